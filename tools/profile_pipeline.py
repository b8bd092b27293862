#!/usr/bin/env python3
"""Instructions per contribution in the switch's lcore loop, by function.

    tools/profile_pipeline.py [--build build] [--policies forward,fp32_arrival,kulisch]
                              [--dtype fp32] [--payload 1024] [--ranks 8] [--top 12] [--json FILE]
                              [--cache-sim] [--staged]

Runs `prism-bench pipeline` under callgrind (valgrind) once per policy, with
one lcore running every stage, and counts only what runs inside the lcore
loop (`--toggle-collect` on Runtime::loop: set-up, capture writing and the
report are left out, and so are the bench's RX and TX callbacks, its traffic
source and its RESULT checks). The count is divided by the packets parsed
(`wire::parse` calls). Timing on a shared VM moves by up to 1.5x between
runs; instruction counts do not, so this is how a change to the hot path is
judged before the timing sweep.

With --cache-sim, callgrind also simulates the caches (one core: L1d 32 KiB,
and the last level modelled as this machine's 2 MiB L2, so an "LL miss" is a
line the core had to fetch from L3, memory or the other core) and the tables
gain D1 and LL misses per contribution. The simulation is repeatable too, so
a change that saves instructions but touches more memory shows here before
it shows in the noise of a timing run. It has no second core: the lines that
move between lcores on two lcores are not in it.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter


EVENTS = ('Ir', 'D1mr', 'D1mw', 'DLmr', 'DLmw')


def parse_callgrind(path: str) -> tuple[dict[str, Counter], Counter, Counter]:
    """Self cost per event per function, call counts, and the totals per event."""
    names: dict[str, str] = {}
    events: list[str] = ['Ir']
    objs: dict[str, str] = {}
    ob = ''
    self_cost: dict[str, Counter] = {e: Counter() for e in EVENTS}
    calls: Counter = Counter()
    fn = None
    callee = None
    after_calls = False
    total: Counter = Counter()

    def name(ref: str, rest: str | None) -> str:
        if rest:
            names[ref] = rest
        return names.get(ref, ref)

    with open(path) as f:
        for line in f:
            if line.startswith('events:'):
                events = line.split()[1:]
                continue
            m = re.match(r'(c?ob)=\((\d+)\)(?: (.*))?$', line.rstrip('\n'))
            if m:  # objects are named once, in whichever line mentions them first
                if m.group(3):
                    objs[m.group(2)] = os.path.basename(m.group(3))
                if m.group(1) == 'ob':
                    ob = objs.get(m.group(2), '')
                continue
            m = re.match(r'(c?fn)=\((\d+)\)(?: (.*))?$', line.rstrip('\n'))
            if m:
                n = name(m.group(2), m.group(3))
                if n.startswith('0x') and m.group(1) == 'fn':  # no symbols: name its object
                    n = names[m.group(2)] = f'{ob}:{n}'
                if m.group(1) == 'fn':
                    fn = n
                else:
                    callee = n
                continue
            m = re.match(r'calls=(\d+)', line)
            if m:
                calls[callee] += int(m.group(1))
                after_calls = True
                continue
            if line[:1].isdigit() or line[:1] in '+-*':
                parts = line.split()
                if len(parts) >= 2 and fn is not None:
                    if after_calls:  # the inclusive cost of the call just named: not this function's own
                        after_calls = False
                    else:
                        for e, v in zip(events, parts[1:]):
                            if e in self_cost:
                                self_cost[e][fn] += int(v)
                                total[e] += int(v)
    return self_cost, calls, total


def short(n: str) -> str:
    n = n.replace('(anonymous namespace)::', '')
    n = re.sub(r'\(.*', '', n)  # drop argument lists
    return n.split(' ')[-1]


def profile(args, policy: str, work: str) -> dict:
    out = os.path.join(work, f'cg.{policy}')
    bench = os.path.join(args.build, 'app', 'prism-bench')
    sim = ['--cache-sim=yes', '--D1=32768,8,64', '--LL=2097152,16,64'] if args.cache_sim else []
    cmd = ['valgrind', '--tool=callgrind', *sim, f'--callgrind-out-file={out}', '--collect-atstart=no',
           '--toggle-collect=prism::pipe::Runtime::loop(*',
           # the bench's own source and checks run inside the loop (RX and TX callbacks): left out
           '--toggle-collect=*rx_rewrite*', '--toggle-collect=*tx_verify*', bench, 'pipeline', '--policies', policy,
           '--dtypes', args.dtype, '--payloads', str(args.payload), '--ranks', str(args.ranks), '--lcores', '1',
           '--repeat', '1', '--time', str(args.time), '--warmup', '0.2', '--no-testpmd', '--no-forward', '--sampled-checks',
           '--work-dir', os.path.join(work, policy)] + (['--staged'] if args.staged else [])
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        sys.exit(f'profile_pipeline: {" ".join(cmd)} failed ({r.returncode}):\n{r.stdout[-2000:]}')
    self_cost, calls, total = parse_callgrind(out)
    packets = sum(v for k, v in calls.items() if k and re.match(r'prism::wire::parse\(', k))
    if packets == 0:
        sys.exit('profile_pipeline: no packets were parsed inside the lcore loop')
    by_fn: Counter = Counter()
    for k, v in self_cost['Ir'].items():
        by_fn[short(k)] += v
    res = {'policy': policy, 'dtype': args.dtype, 'payload_bytes': args.payload, 'ranks': args.ranks,
           'packets': packets, 'instructions_per_packet': total['Ir'] / packets,
           'functions': {k: v / packets for k, v in by_fn.most_common()}}
    if args.cache_sim:
        miss = {'d1': ('D1mr', 'D1mw'), 'll': ('DLmr', 'DLmw')}
        for level, evs in miss.items():
            res[f'{level}_misses_per_packet'] = sum(total[e] for e in evs) / packets
            per: Counter = Counter()
            for e in evs:
                for k, v in self_cost[e].items():
                    per[short(k)] += v
            res[f'{level}_misses_by_function'] = {k: v / packets for k, v in per.most_common()}
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--build', default='build')
    ap.add_argument('--policies', default='forward,fp32_arrival,kulisch')
    ap.add_argument('--dtype', default='fp32')
    ap.add_argument('--payload', type=int, default=1024)
    ap.add_argument('--ranks', type=int, default=8)
    ap.add_argument('--time', type=float, default=1.5, help='seconds per run (valgrind runs ~50x slower)')
    ap.add_argument('--top', type=int, default=12)
    ap.add_argument('--json')
    ap.add_argument('--staged', action='store_true',
                    help='keep the rings between stages (by default one lcore runs packets to completion)')
    ap.add_argument('--cache-sim', action='store_true',
                    help='also count simulated D1 and LL (2 MiB) misses per contribution')
    args = ap.parse_args()
    if subprocess.run(['which', 'valgrind'], stdout=subprocess.DEVNULL).returncode != 0:
        sys.exit('profile_pipeline: valgrind is not installed (apt-get install valgrind)')
    with tempfile.TemporaryDirectory(prefix='prism-cg-') as work:
        res = [profile(args, p, work) for p in args.policies.split(',')]
    base = res[0]['instructions_per_packet']
    print(f'instructions per contribution inside the lcore loop ({args.dtype}, {args.payload} B, R = {args.ranks}, '
          'one lcore)\n')
    sim = args.cache_sim
    print('| policy | packets | instr/contribution | ÷ first |' + (' D1 misses | LL misses |' if sim else ''))
    print('|---|---|---|---|' + ('---|---|' if sim else ''))
    for r in res:
        extra = f" {r['d1_misses_per_packet']:.1f} | {r['ll_misses_per_packet']:.2f} |" if sim else ''
        print(f"| {r['policy']} | {r['packets']} | {r['instructions_per_packet']:.0f} | "
              f"{r['instructions_per_packet'] / base:.2f} |" + extra)
    for r in res:
        print(f"\n{r['policy']}: top functions, instructions per contribution\n")
        print('| function | instr |')
        print('|---|---|')
        for k, v in list(r['functions'].items())[:args.top]:
            print(f'| `{k}` | {v:.0f} |')
        if sim:
            print(f"\n{r['policy']}: top functions, LL (2 MiB) misses per contribution\n")
            print('| function | LL misses | D1 misses |')
            print('|---|---|---|')
            for k, v in list(r['ll_misses_by_function'].items())[:args.top]:
                print(f"| `{k}` | {v:.2f} | {r['d1_misses_by_function'].get(k, 0):.1f} |")
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
