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

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_util import machine_info, mpirun_prefix, parse_size, size_name  # noqa: E402

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
                                    seconds_min=row['seconds_min'], repeat=row['repeat']))
                print(f"bench_mpi: p={p} {size_name(row['bytes'])} {m}: {cell(row)}", file=sys.stderr)
    by = {(r['ranks'], r['bytes'], r['mode']): r for r in results}
    # speed ratios (the baseline's time over PRISM's): above 1, PRISM is faster
    pairs = [(m, b) for m in modes if m.startswith('prism') for b in ('mpi_tcp', 'mpi_vader') if b in modes]
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
