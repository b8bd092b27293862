#!/usr/bin/python3
"""The switch's kernel-facing port kinds against each other, in one run: net_af_xdp and
net_af_packet on the same testbed layout, the same ranks and sizes, alternating (a, b, a, b, ...)
so that drift on the machine falls on both.

For each driver, size and repeat: a testbed (scripts/testbed.py) with R ranks, prism-rank
--size S --repeat N --json on every rank; the figure is the ranks' algorithm bandwidth (their
median Gbit/s) and the switch's intake (bytes its port received over the time the ranks' ops
took). Prints a table, the median over the runs, and the ratio; --json FILE writes every run.

    tools/bench_ports.py                          # bridge, R=2, 1 MiB, 20 ops, 3 runs per driver
    tools/bench_ports.py --ranks 4 --size 16MiB --runs 5 --json /tmp/ports.json
    PRISM_BUILD=build-sw tools/bench_ports.py --layout direct

Needs root (the testbed's namespaces). The switch runs on lcore 0 (--lcore), the ranks
wherever the kernel puts them: the same for both drivers.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / 'tools'))
from bench_util import machine_info, parse_size, size_name, load_testbed  # noqa: E402


def port_rx_bytes(summary: str) -> int:
    return sum(int(m.group(1)) for m in re.finditer(r'port \d+ rx: packets \d+, bytes (\d+)', summary))


def one_run(tbm, build: Path, driver: str, layout: str, ranks: int, size: int, repeat: int, lcore: int) -> dict:
    rank_bin = build / 'app' / 'prism-rank'
    with tbm.Testbed(ranks, layout, driver=driver, build=build, lcore=lcore) as tb:
        runs = tb.run([str(rank_bin), '--config', '{config}', '--rank', '{rank}', '--size', str(size),
                       '--repeat', str(repeat), '--json'], timeout=300)
        exits = tb.stop_switches()
    bad = [r for r in runs if r.rc != 0]
    if bad:
        raise RuntimeError(f'{driver}: rank {bad[0].rank} exited {bad[0].rc}: {bad[0].stderr[-2000:]}')
    lines = [json.loads(r.stdout.strip().splitlines()[-1]) for r in runs]
    summary = next(iter(exits.values())).stdout
    op_seconds = max(ln['seconds_median'] for ln in lines) * repeat
    return {
        'driver': driver, 'layout': layout, 'ranks': ranks, 'bytes': size, 'repeat': repeat,
        'gbit_s': statistics.median(ln['gbit_s'] for ln in lines),
        'intake_gbit_s': port_rx_bytes(summary) * 8 / op_seconds / 1e9,
        'retransmits': sum(ln['retransmits'] for ln in lines),
        'oversize': summary.count('dropped oversize'),
    }


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--drivers', default='af_xdp,af_packet')
    p.add_argument('--layout', default='bridge', choices=['bridge', 'direct'])
    p.add_argument('--ranks', type=int, default=2)
    p.add_argument('--size', default='1MiB', help='comma-separated sizes, e.g. 1MiB,16MiB')
    p.add_argument('--repeat', type=int, default=20)
    p.add_argument('--runs', type=int, default=3)
    p.add_argument('--lcore', type=int, default=0)
    p.add_argument('--build', default=os.environ.get('PRISM_BUILD') or str(REPO / 'build'))
    p.add_argument('--json')
    a = p.parse_args(argv)
    tbm = load_testbed()
    drivers = a.drivers.split(',')
    sizes = [parse_size(s) for s in a.size.split(',')]
    rows = []
    for size in sizes:
        for i in range(a.runs):
            for d in drivers if i % 2 == 0 else reversed(drivers):
                r = one_run(tbm, Path(a.build), d, a.layout, a.ranks, size, a.repeat, a.lcore)
                r['run'] = i
                rows.append(r)
                print(f'{d:10} {size_name(size):>8} run {i}: {r["gbit_s"]:.3f} Gbit/s, intake '
                      f'{r["intake_gbit_s"]:.3f} Gbit/s, retransmits {r["retransmits"]}', file=sys.stderr)
                time.sleep(0.5)
    info = machine_info()
    print(f'\n{a.layout} layout, R={a.ranks}, {a.repeat} ops a run, median of {a.runs} runs; '
          f'CPU: {info.get("cpu_model", "?")}')
    print(f'| size | {" | ".join(f"{d} Gbit/s | {d} intake" for d in drivers)} | {drivers[0]} ÷ {drivers[-1]} |')
    print('|---' * (2 * len(drivers) + 2) + '|')
    summary = []
    for size in sizes:
        med = {d: statistics.median(r['gbit_s'] for r in rows if r['driver'] == d and r['bytes'] == size)
               for d in drivers}
        intake = {d: statistics.median(r['intake_gbit_s'] for r in rows if r['driver'] == d and r['bytes'] == size)
                  for d in drivers}
        ratio = med[drivers[0]] / med[drivers[-1]] if med[drivers[-1]] else float('nan')
        print(f'| {size_name(size)} | ' + ' | '.join(f'{med[d]:.3f} | {intake[d]:.3f}' for d in drivers)
              + f' | {ratio:.2f} |')
        summary.append({'bytes': size, 'gbit_s': med, 'intake_gbit_s': intake, 'ratio': ratio})
    if a.json:
        Path(a.json).write_text(json.dumps({'machine': info, 'layout': a.layout, 'ranks': a.ranks,
                                            'repeat': a.repeat, 'runs': rows, 'median': summary}, indent=1) + '\n')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
