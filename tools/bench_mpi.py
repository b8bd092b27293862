#!/usr/bin/env python3
"""An unmodified MPI program, plainly and with libprism-mpi preloaded, side by side (OSU-style
allreduce latency and bandwidth: 4 B to 64 MiB of fp32, MPI_SUM, MPI_COMM_WORLD).

The program is build/tools/mpi-allreduce (its --check compares the last result with the exact
sum, recomputed from every rank's generator), run under mpirun on loopback:
  mpi_tcp     Open MPI alone, --mca btl self,tcp
  mpi_vader   Open MPI alone, --mca btl self,vader (shared memory)
  prism       the same program with LD_PRELOAD=build/mpi/libprism-mpi.so: PRISM_POLICY=kulisch
              (exact), PRISM_ALGO=auto, PRISM_LINKS=auto (shared memory between ranks of one host)
  prism_a     the same with PRISM_POLICY=fp32_arrival (not exact)
Time per collective: after warmups, each rank times its own collectives back to back; the figure
is the slowest rank's median (mpi-allreduce --back-to-back). Nothing is pinned, every rank yields
when idle (--mca mpi_yield_when_idle 1).

  tools/bench_mpi.py --ranks 2,4 --json mpi.json --markdown
  tools/bench_mpi.py --quick        # p = 2; 4 B and 4 KiB (the test suite's smoke run)
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_util import mpirun_prefix, osu_main  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
MODES = ('mpi_tcp', 'mpi_vader', 'prism', 'prism_a')
SIZES = '4,64,1KiB,16KiB,256KiB,1MiB,4MiB,16MiB,64MiB'


def run(build: Path, mode: str, p: int, sizes: list[int], target: float) -> list[dict]:
    btl = 'self,vader' if mode == 'mpi_vader' else 'self,tcp'
    cmd = mpirun_prefix(p) + ['--mca', 'pml', 'ob1', '--mca', 'btl', btl, '--mca', 'mpi_yield_when_idle', '1',
                              '--mca', 'oob_tcp_if_include', 'lo']
    if btl == 'self,tcp':
        cmd += ['--mca', 'btl_tcp_if_include', 'lo']
    env = dict(os.environ)
    if mode.startswith('prism'):
        env.update(LD_PRELOAD=str(build / 'mpi' / 'libprism-mpi.so'), LD_LIBRARY_PATH=str(build / 'lib'),
                   PRISM_POLICY='fp32_arrival' if mode == 'prism_a' else 'kulisch', PRISM_ALGO='auto')
        cmd += ['-x', 'LD_PRELOAD', '-x', 'LD_LIBRARY_PATH', '-x', 'PRISM_POLICY', '-x', 'PRISM_ALGO']
    cmd += [str(build / 'tools' / 'mpi-allreduce'), '--sizes', ','.join(map(str, sizes)), '--back-to-back',
            '--target-seconds', str(target), '--check']
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        raise SystemExit(f'bench_mpi: {mode} at p = {p} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}')
    rows = [json.loads(ln) for ln in r.stdout.splitlines() if ln.startswith('{')]
    if len(rows) != len(sizes):
        raise SystemExit(f'bench_mpi: {mode} at p = {p}: {len(rows)} results for {len(sizes)} sizes:\n{r.stdout}')
    return rows


def main() -> int:
    return osu_main('bench_mpi', __doc__, MODES, SIZES, ('mpi_tcp', 'mpi_vader'), run, REPO / 'build')


if __name__ == '__main__':
    sys.exit(main())
