#!/usr/bin/env python3
"""PRISM's Links (TCP, shared memory) against Open MPI's point to point (TCP BTL, vader) on this
machine: ping-pong, a one-way stream and an exchange (sendrecv around a ring of --exchange-ranks),
message size by message size. The implementations take turns, --runs times (so a busy machine
slows them alike); each cell is the median of its runs, and the ratios are within this run.

  tools/bench_links.py --build build --runs 3 --sizes 4KiB,64KiB,1MiB,16MiB,64MiB
  tools/bench_links.py --impls prism-tcp,mpi-tcp --modes pingpong --json out.json

Prints a markdown table per mode: GB/s (message bytes over one-way time; the exchange's per rank)
and PRISM ÷ Open MPI TCP (and shm ÷ vader)."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_util import parse_size, size_name  # noqa: E402

IMPLS = ('prism-tcp', 'prism-shm', 'mpi-tcp', 'mpi-vader')
MPIRUN = ['mpirun', '--allow-run-as-root', '--oversubscribe', '--bind-to', 'none']


def command(build: str, impl: str, mode: str, ranks: int, sizes: list[int], repeat: int) -> list[str]:
    """impl@DIR: DIR's prism-links-p2p with its libprism (a saved build, to compare before and after)."""
    common = ['--mode', mode, '--sizes', ','.join(map(str, sizes)), '--repeat', str(repeat)]
    if '@' in impl:
        impl, saved = impl.split('@', 1)
        return ['env', f'LD_LIBRARY_PATH={saved}', f'{saved}/prism-links-p2p', '--links', impl[len('prism-'):],
                '--ranks', str(ranks)] + common
    if impl.startswith('prism-'):
        return [f'{build}/tools/prism-links-p2p', '--links', impl[len('prism-'):], '--ranks', str(ranks)] + common
    btl = 'self,tcp' if impl == 'mpi-tcp' else 'self,vader'
    return MPIRUN + ['--mca', 'btl', btl, '-np', str(ranks), f'{build}/tools/mpi-p2p'] + common


def run_once(cmd: list[str]) -> dict[int, float]:
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=600).stdout
    return {r['bytes']: r['gbyte_s'] for r in map(json.loads, filter(None, out.splitlines()))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--build', default='build')
    ap.add_argument('--impls', default=','.join(IMPLS))
    ap.add_argument('--modes', default='pingpong,stream,exchange')
    ap.add_argument('--sizes', default='4KiB,64KiB,1MiB,16MiB,64MiB')
    ap.add_argument('--exchange-ranks', type=int, default=2)
    ap.add_argument('--runs', type=int, default=3)
    ap.add_argument('--repeat', type=int, default=5)
    ap.add_argument('--json', help='write every run\'s figures here')
    a = ap.parse_args()
    impls = a.impls.split(',')
    sizes = [parse_size(s, 1) for s in a.sizes.split(',')]
    got: dict[tuple[str, str], dict[int, list[float]]] = {}
    for mode in a.modes.split(','):
        ranks = a.exchange_ranks if mode == 'exchange' else 2
        for _ in range(a.runs):
            for impl in impls:
                for b, v in run_once(command(a.build, impl, mode, ranks, sizes, a.repeat)).items():
                    got.setdefault((mode, impl), {}).setdefault(b, []).append(v)
        med = {impl: {b: statistics.median(v) for b, v in got[(mode, impl)].items()} for impl in impls}
        ratios = [(x, 'mpi-tcp') for x in impls if x.startswith('prism-') and 'mpi-tcp' in impls]
        if 'prism-shm' in impls and 'mpi-vader' in impls:
            ratios.append(('prism-shm', 'mpi-vader'))
        print(f'\n{mode}, p = {ranks}, GB/s (median of {a.runs} runs)\n')
        print('| size | ' + ' | '.join(impls + [f'{x} ÷ {y}' for x, y in ratios]) + ' |')
        print('|---' * (1 + len(impls) + len(ratios)) + '|')
        for b in sizes:
            cells = [f'{med[i][b]:.2f}' for i in impls] + [f'{med[x][b] / med[y][b]:.2f}' for x, y in ratios]
            print(f'| {size_name(b)} | ' + ' | '.join(cells) + ' |')
        sys.stdout.flush()
    if a.json:
        with open(a.json, 'w') as f:
            json.dump([{'mode': m, 'impl': i, 'bytes': b, 'gbyte_s': v}
                       for (m, i), per in got.items() for b, v in per.items()], f, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
