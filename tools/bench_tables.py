#!/usr/bin/env python3
"""Markdown tables from `prism-bench pipeline --json FILE` (docs/PERFORMANCE.md).

    tools/bench_tables.py docs/data/pipeline.json

One table per section of the sweep, with each policy's ratios to forward-only,
testpmd and the ideal reducer (its ceiling) as measured in the same run.
"""
from __future__ import annotations

import json
import sys


def fmt(x, nd=2):
    return '-' if not x else f'{x:.{nd}f}'


def main(path: str) -> int:
    rows = json.load(open(path))
    sections: dict[str, list] = {}
    for r in rows:
        sections.setdefault('testpmd' if r['policy'].startswith('testpmd') else r['section'], []).append(r)
    head = ('| policy | dtype | payload B | R | lcores | layout | Mpps | Gbit/s | ns/elem | ÷ forward | ÷ testpmd '
            '| ÷ ideal | ÷ arrival | ÷ 1 lcore | main ns/pkt | reduce ns/pkt | L100 | L400 | slot B |')
    sep = '|' + '|'.join(['---'] * (head.count('|') - 1)) + '|'
    for name, rs in sections.items():
        print(f'\n**{name}**\n')
        print(head)
        print(sep)
        for r in rs:
            b = r['baseline']
            print(f"| {r['policy']} | {r['dtype']} | {r['payload_bytes']} | {r['ranks']} | {r['lcores']} "
                  f"| {r.get('layout', '-').replace('_', ' ')} "
                  f"| {r['mpps']:.3f} | {r['gbps']:.2f} | {r['ns_per_elem']:.3f} | {fmt(b['vs_forward'])} "
                  f"| {fmt(b['vs_testpmd'])} | {fmt(b.get('vs_ideal'))} | {fmt(b['vs_fp32_arrival'])} "
                  f"| {fmt(b.get('vs_one_lcore'))} "
                  f"| {r['main_ns_per_packet']:.0f} | {r['reduce_ns_per_packet']:.0f} "
                  f"| {r['lcores_100g'] or '-'} | {r['lcores_400g'] or '-'} | {r['slot_bytes'] or '-'} |")
    bad = sum(r['mismatches'] for r in rows)
    drops = sum(r['drops'] for r in rows)
    checked = sum(r['results_checked'] for r in rows)
    print(f'\n{len(rows)} measurements; {checked} RESULTs checked, {bad} mismatches; {drops} drops.')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else 'docs/data/pipeline.json'))
