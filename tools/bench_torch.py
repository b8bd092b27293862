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

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_util import machine_info, parse_size, size_name  # noqa: E402

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


def cell(row: dict) -> str:
    t = row['seconds_median']
    return f'{t * 1e6:.1f} µs' if row['bytes'] < (1 << 20) else f"{row['bytes'] * 8 / t / 1e9:.2f} Gbit/s"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--build', default=str(REPO / 'build'))
    ap.add_argument('--ranks', default='2,4')
    ap.add_argument('--sizes', default=SIZES)
    ap.add_argument('--modes', default=','.join(MODES))
    ap.add_argument('--target-seconds', type=float, default=0.2)
    ap.add_argument('--quick', action='store_true', help='p = 2; 4 B and 4 KiB')
    ap.add_argument('--json', help='write every figure here')
    ap.add_argument('--markdown', action='store_true', help='print the table as Markdown')
    a = ap.parse_args()
    build = Path(a.build)
    ranks = [2] if a.quick else [int(x) for x in a.ranks.split(',')]
    sizes = [4, 4096] if a.quick else [parse_size(x, 1) for x in a.sizes.split(',')]
    modes = [m for m in a.modes.split(',') if m]
    for m in modes:
        if m not in MODES:
            ap.error(f'--modes: {m} is not one of {", ".join(MODES)}')
    t0 = time.time()
    results = []
    for p in ranks:
        for m in modes:
            for row in run(build, m, p, sizes, a.target_seconds):
                results.append(dict(mode=m, ranks=p, bytes=row['bytes'], seconds_median=row['seconds_median'],
                                    seconds_min=row['seconds_min'], repeat=row['repeat'],
                                    cpu_seconds=row['cpu_seconds'], checked=row.get('checked', False)))
                print(f"bench_torch: p={p} {size_name(row['bytes'])} {m}: {cell(row)}", file=sys.stderr)
    by = {(r['ranks'], r['bytes'], r['mode']): r for r in results}
    # speed ratios (Gloo's time over PRISM's): above 1, PRISM is faster
    pairs = [(m, 'gloo') for m in modes if m.startswith('prism') and 'gloo' in modes]
    head = ['p', 'n'] + modes + [f'{m} ÷ {b} (speed)' for m, b in pairs]
    lines = ['| ' + ' | '.join(head) + ' |', '|' + '---:|' * len(head)]
    for p in ranks:
        for n in sizes:
            row = [str(p), size_name(n)] + [cell(by[(p, n, m)]) for m in modes]
            row += [f"{by[(p, n, b)]['seconds_median'] / by[(p, n, m)]['seconds_median']:.2f}" for m, b in pairs]
            lines.append('| ' + ' | '.join(row) + ' |')
    table = '\n'.join(lines)
    print(table if a.markdown else table.replace('|', ' '))
    if a.json:
        Path(a.json).write_text(json.dumps(dict(machine=machine_info(), seconds=round(time.time() - t0, 1),
                                                ranks=ranks, sizes=sizes, modes=modes, results=results), indent=1))
    return 0


if __name__ == '__main__':
    sys.exit(main())
