"""tools/bench_coll.py --quick, the cost-model benchmark's smoke test: prism-rank's host
collectives (every host algorithm of prism-rank --list-algos, and auto) as local processes over loopback TCP, p = 2 and 3,
4 KiB and 256 KiB, repeat 2, each run with one calibration's parameters. Checks the JSON it
writes, never its timings: every (p, n, algo) measured with positive times and a positive
prediction, auto's choice the argmin of the predictions it reported (recomputed here), every
rank and every algorithm on the same KULISCH_FIXED digest, and the PNG written.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import switch_util as su

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / 'tools' / 'bench_coll.py'
RANK = su.BUILD / 'app' / 'prism-rank'


def host_algorithms() -> list[str]:
    """prism-rank's table (lib/coll/algorithms.hpp), as the tool reads it: a host algorithm added there is
    benchmarked, and checked here, without a change to either."""
    out = subprocess.run([str(RANK), '--list-algos', '--json'], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return [a['name'] for a in json.loads(out.stdout)['algorithms'] if a['hosts']]


def test_quick_run_predicts_and_measures_every_algorithm(tmp_path):
    su.require_binaries(RANK)
    CANDIDATES = host_algorithms()
    ALGOS = CANDIDATES + ['auto']
    assert {'binomial', 'chain', 'rhd', 'ring'} <= set(CANDIDATES), CANDIDATES
    out, png = tmp_path / 'coll.json', tmp_path / 'coll.png'
    r = subprocess.run([sys.executable, str(BENCH), '--quick', '--build', str(su.BUILD),
                        '--json', str(out), '--plot', str(png)], capture_output=True, text=True, timeout=600)
    text = r.stdout + r.stderr
    assert r.returncode == 0, text
    assert 'calibration' in r.stdout and 'auto picked the measured fastest' in r.stdout, text

    d = json.loads(out.read_text())
    assert d['complete'] and d['machine']['cpu_model'] and d['cores'] >= 1, d['machine']
    assert d['failures'] == [], d['failures']
    cals = d['calibrations']
    assert sorted(cals) == ['2', '3'] and d['calibration'] == cals['2'], cals  # one per p, with p ranks
    for cal in cals.values():
        for k in ('alpha', 'beta', 'gamma', 'gamma_large', 'partial_ratio', 'out_ratio'):
            assert cal[k] > 0, cal
    rows = d['results']
    assert [(x['ranks'], x['bytes']) for x in rows] == [(2, 4096), (2, 262144), (3, 4096), (3, 262144)]
    for row in rows:
        p, n = row['ranks'], row['bytes']
        cal = cals[str(p)]
        assert sorted(row['algos']) == sorted(ALGOS), row['algos'].keys()
        kulisch = set()
        for algo in ALGOS:
            e = row['algos'][algo]
            assert 'error' not in e, (p, n, algo, e.get('error'))
            assert e['seconds_min'] > 0 and e['seconds_median'] >= e['seconds_min'], (p, n, algo)
            assert e['predicted_seconds'] > 0, (p, n, algo, e)
            assert e['repeat'] == 2 and e['warmup'] == 1
            assert e['ratio'] == e['seconds_median'] / e['predicted_seconds']
            assert e['algo'] in CANDIDATES and (algo == 'auto' or e['algo'] == algo), (algo, e['algo'])
            # Every rank: same parameters, same answer.
            assert len(e['per_rank']) == p
            assert sorted(x['rank'] for x in e['per_rank']) == list(range(p))
            params = {k: v for k, v in cal.items() if k not in ('op', 'ranks')}  # the file also says what for
            assert all(x['calibration'] == params for x in e['per_rank']), (p, n, algo)
            assert all(x['bytes'] == n and x['algo'] == e['algo'] for x in e['per_rank'])
            assert len({x['digest'] for x in e['per_rank']}) == 1 and e['digests_agree'], e['digests']
            # The time reported is the slowest rank's median (and min).
            assert e['seconds_median'] == max(x['seconds_median'] for x in e['per_rank'])
            assert e['seconds_min'] == max(x['seconds_min'] for x in e['per_rank'])
            preds = e['predictions']
            assert set(preds) == set(CANDIDATES) and all(v > 0 for v in preds.values()), preds
            assert abs(e['predicted_seconds'] - preds[e['algo']]) <= 1e-9 + 1e-6 * preds[e['algo']], e
            kulisch |= set(e['digests'])
        # KULISCH_FIXED is exact: every algorithm gives the same bits.
        assert len(kulisch) == 1 and row['digests_agree'], (p, n, kulisch)

        # auto ran the argmin of its own predictions (the first candidate on a tie).
        auto = row['algos']['auto']
        preds = auto['predictions']
        best = min(preds.values())
        argmin = next(a for a in CANDIDATES if preds[a] <= best * (1 + 1e-9))
        assert auto['algo'] == argmin, (p, n, auto['algo'], preds)
        assert auto['algo_requested'] == 'auto'
        if auto['algo'] == 'chain':
            assert auto['segments'] == auto['model_segments'] >= 1
        # The chain run alone also takes the model's m.
        ch = row['algos']['chain']
        assert ch['segments'] == ch['model_segments'] >= 1, ch
        # The row's verdicts are consistent with its numbers.
        measured = {a: row['algos'][a]['seconds_median'] for a in CANDIDATES}
        assert row['fastest'] == min(measured, key=measured.get)
        assert row['auto_choice'] == auto['algo']
        assert row['auto_fastest'] == (auto['algo'] == row['fastest'])
        assert row['auto_within_10pct'] == (measured[auto['algo']] <= 1.1 * measured[row['fastest']])

    s = d['summary']
    assert s['auto']['all']['rows'] == 4 and s['auto']['p<=2']['rows'] == 2 and s['auto']['p>2']['rows'] == 2
    assert set(s['ratio']) == set(ALGOS)
    if shutil.which('gnuplot'):
        assert png.exists() and png.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
