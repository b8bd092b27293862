#!/usr/bin/python3
"""torch.distributed's all_reduce on CPU tensors through Gloo and through PRISM's `prism` backend,
side by side (OSU-style: 4 B to 64 MiB of fp32, SUM, the default group), on loopback.

The program is tools/torch_allreduce.py (its --check compares the last result with the exact sum,
recomputed with numpy from every rank's generator), p processes started together:
  gloo       torch's own gloo backend (GLOO_SOCKET_IFNAME=lo)
  prism      prism_torch's backend: PRISM_POLICY=kulisch (exact), PRISM_ALGO=auto
  prism_a    the same with PRISM_POLICY=fp32_arrival (not exact)
Time per collective: after 3 warmups (the first carries auto's calibration), each rank times its own
collectives back to back, as many as fill --target-seconds by the last warmup (5 to 2000); the
figure is the slowest rank's median. One intra-op thread per rank.

  tools/bench_torch.py --ranks 2,4 --json torch.json --markdown
  tools/bench_torch.py --quick        # p = 2; 4 B and 4 KiB (the test suite's smoke run)
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_util import osu_main  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
PROG = REPO / 'tools' / 'torch_allreduce.py'
MODES = ('gloo', 'prism', 'prism_a')
SIZES = '4,64,1KiB,16KiB,256KiB,1MiB,4MiB,16MiB,64MiB'


def free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def run(build: Path, mode: str, p: int, sizes: list[int], target: float) -> list[dict]:
    env = dict(os.environ, GLOO_SOCKET_IFNAME='lo', OMP_NUM_THREADS='1',
               PRISM_POLICY='fp32_arrival' if mode == 'prism_a' else 'kulisch', PRISM_ALGO='auto')
    init = f'tcp://127.0.0.1:{free_port()}'
    procs = [subprocess.Popen(['/usr/bin/python3', str(PROG), '--rank', str(r), '--ranks', str(p), '--init', init,
                               '--backend', 'gloo' if mode == 'gloo' else 'prism', '--build', str(build),
                               '--sizes', ','.join(map(str, sizes)), '--target-seconds', str(target), '--warmup', '3',
                               '--min-repeat', '5', '--max-repeat', '2000', '--check'],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(p)]
    outs = [q.communicate(timeout=900) + (q.returncode,) for q in procs]
    bad = [(r, o) for r, o in enumerate(outs) if o[2] != 0]
    if bad:
        r, (o, e, rc) = bad[0]
        raise SystemExit(f'bench_torch: {mode} at p = {p}: rank {r} exited {rc}:\n{o}\n{e[-3000:]}')
    rows = [json.loads(ln) for ln in outs[0][0].splitlines() if ln.startswith('{')]
    if len(rows) != len(sizes) or any(row.get('check_differ') for row in rows):
        raise SystemExit(f'bench_torch: {mode} at p = {p}: wrong or missing results:\n{outs[0][0]}')
    return rows


def main() -> int:
    return osu_main('bench_torch', __doc__, MODES, SIZES, ('gloo',), run, REPO / 'build')


if __name__ == '__main__':
    sys.exit(main())
