#!/usr/bin/python3
"""auto's choices replayed on recorded measurements: for every cell of one or more
tools/bench_coll.py JSON files (p, size, links, policy), the cost model of the build
at hand predicts every algorithm's time from the calibration the run recorded, and
its choice is scored against the times the run measured for each algorithm (within
10% of the fastest, as bench_coll scores the choice it made then).

A change to the model can so be scored on the same measurements it is meant to
improve, without their noise, and on runs it was not fitted to:

    PYTHONPATH=build/python tools/auto_replay.py docs/data/host_collectives.json \\
        docs/data/host_collectives_gradient_c.json docs/data/host_collectives_gradient_d.json [--misses]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ALGOS = ['binomial', 'chain', 'rhd', 'ring']


def replay(path: Path, show: bool) -> tuple[int, int, int]:
    import prism
    d = json.loads(path.read_text())
    cal = d['calibrations']
    ok = then = rows = 0
    for r in d['results']:
        for pol, pr in r['prism'].items():
            key = f"{r['ranks']}/{pol}/{r['dtype']}/{r['data']}/{r['links']}"
            measured = {a: pr[a]['seconds_median'] for a in ALGOS if a in pr and 'seconds_median' in pr[a]}
            if key not in cal or len(measured) < len(ALGOS):
                continue
            esz = prism.format_bytes(r['dtype'])
            pred = prism.predict(json.dumps(cal[key]), 'allreduce', r['ranks'], r['bytes'] // esz, esz, ALGOS)
            best = min(measured, key=measured.get)
            good = measured[pred['auto']] <= 1.10 * measured[best]
            rows += 1
            ok += good
            then += r['auto'][pol]['within_10pct']
            if show and not good:
                print(f"  {path.name}: p={r['ranks']} {r['bytes'] >> 20} MiB {r['links']} {pol}: chose {pred['auto']} "
                      f"(x{measured[pred['auto']] / measured[best]:.2f}), fastest {best}; predicted/measured "
                      + ' '.join(f'{a} {pred[a] / measured[a]:.2f}' for a in ALGOS))
    return ok, then, rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('runs', nargs='+', type=Path, help='tools/bench_coll.py --json files')
    ap.add_argument('--misses', action='store_true', help='print every cell where the choice is not within 10%%')
    a = ap.parse_args()
    total = [0, 0, 0]
    for path in a.runs:
        ok, then, rows = replay(path, a.misses)
        total = [total[0] + ok, total[1] + then, total[2] + rows]
        print(f'{path}: auto within 10% of the fastest: {ok}/{rows} ({100 * ok / max(rows, 1):.0f}%) with this '
              f'model; {then}/{rows} chosen in the run')
    if len(a.runs) > 1:
        print(f'all: {total[0]}/{total[2]} ({100 * total[0] / max(total[2], 1):.0f}%) with this model; '
              f'{total[1]}/{total[2]} in the runs')
    return 0


if __name__ == '__main__':
    sys.exit(main())
