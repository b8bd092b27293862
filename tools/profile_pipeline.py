#!/usr/bin/env python3
"""Instructions per contribution in the switch's lcore loop, by function.

    tools/profile_pipeline.py [--build build] [--policies forward,fp32_arrival,kulisch]
                              [--dtype fp32] [--payload 1024] [--ranks 8] [--top 12] [--json FILE]

Runs `prism-bench pipeline` under callgrind (valgrind) once per policy, with
one lcore running every stage, and counts only what runs inside the lcore
loop (`--toggle-collect` on Runtime::loop: set-up, capture writing and the
report are left out, and so are the bench's RX and TX callbacks, its traffic
source and its RESULT checks). The count is divided by the packets parsed
(`wire::parse` calls). Timing on a shared VM moves by up to 1.5x between
runs; instruction counts do not, so this is how a change to the hot path is
judged before the timing sweep. Cache misses are not counted: a change that
saves instructions but touches more memory can still be slower.
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


def parse_callgrind(path: str) -> tuple[Counter, Counter, int]:
    """Self instructions and call counts per function, and the total."""
    names: dict[str, str] = {}
    objs: dict[str, str] = {}
    ob = ''
    self_ir: Counter = Counter()
    calls: Counter = Counter()
    fn = None
    callee = None
    after_calls = False
    total = 0

    def name(ref: str, rest: str | None) -> str:
        if rest:
            names[ref] = rest
        return names.get(ref, ref)

    with open(path) as f:
        for line in f:
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
                        self_ir[fn] += int(parts[1])
                        total += int(parts[1])
    return self_ir, calls, total


def short(n: str) -> str:
    n = n.replace('(anonymous namespace)::', '')
    n = re.sub(r'\(.*', '', n)  # drop argument lists
    return n.split(' ')[-1]


def profile(args, policy: str, work: str) -> dict:
    out = os.path.join(work, f'cg.{policy}')
    bench = os.path.join(args.build, 'app', 'prism-bench')
    cmd = ['valgrind', '--tool=callgrind', f'--callgrind-out-file={out}', '--collect-atstart=no',
           '--toggle-collect=prism::pipe::Runtime::loop(*',
           # the bench's own source and checks run inside the loop (RX and TX callbacks): left out
           '--toggle-collect=*rx_rewrite*', '--toggle-collect=*tx_verify*', bench, 'pipeline', '--policies', policy,
           '--dtypes', args.dtype, '--payloads', str(args.payload), '--ranks', str(args.ranks), '--lcores', '1',
           '--repeat', '1', '--time', str(args.time), '--warmup', '0.2', '--no-testpmd', '--no-forward', '--sampled-checks',
           '--work-dir', os.path.join(work, policy)]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        sys.exit(f'profile_pipeline: {" ".join(cmd)} failed ({r.returncode}):\n{r.stdout[-2000:]}')
    self_ir, calls, total = parse_callgrind(out)
    packets = sum(v for k, v in calls.items() if k and re.match(r'prism::wire::parse\(', k))
    if packets == 0:
        sys.exit('profile_pipeline: no packets were parsed inside the lcore loop')
    by_fn: Counter = Counter()
    for k, v in self_ir.items():
        by_fn[short(k)] += v
    return {'policy': policy, 'dtype': args.dtype, 'payload_bytes': args.payload, 'ranks': args.ranks,
            'packets': packets, 'instructions_per_packet': total / packets,
            'functions': {k: v / packets for k, v in by_fn.most_common()}}


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
    args = ap.parse_args()
    if subprocess.run(['which', 'valgrind'], stdout=subprocess.DEVNULL).returncode != 0:
        sys.exit('profile_pipeline: valgrind is not installed (apt-get install valgrind)')
    with tempfile.TemporaryDirectory(prefix='prism-cg-') as work:
        res = [profile(args, p, work) for p in args.policies.split(',')]
    base = res[0]['instructions_per_packet']
    print(f'instructions per contribution inside the lcore loop ({args.dtype}, {args.payload} B, R = {args.ranks}, '
          'one lcore)\n')
    print('| policy | packets | instr/contribution | ÷ first |')
    print('|---|---|---|---|')
    for r in res:
        print(f"| {r['policy']} | {r['packets']} | {r['instructions_per_packet']:.0f} | "
              f"{r['instructions_per_packet'] / base:.2f} |")
    for r in res:
        print(f"\n{r['policy']}: top functions, instructions per contribution\n")
        print('| function | instr |')
        print('|---|---|')
        for k, v in list(r['functions'].items())[:args.top]:
            print(f'| `{k}` | {v:.0f} |')
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
