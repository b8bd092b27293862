"""tools/bench_coll.py --quick, the cost-model benchmark's smoke test: prism-rank's host
collectives (every host algorithm of prism-rank --list-algos, and auto) as local processes over loopback TCP, p = 2 and 3,
4 KiB and 256 KiB, repeat 2, each run with one calibration's parameters. Checks the JSON it
writes, never its timings: every (p, n, algo) measured with positive times and a positive
prediction, auto's choice the argmin of the predictions it reported (recomputed here), every
rank and every algorithm on the same KULISCH_FIXED digest, and the PNG written.

And --compare --quick, the comparison with Open MPI and Gloo (p = 2, 256 KiB fp32 and 64 KiB bf16):
every row present with positive times, one KULISCH_FIXED digest for every algorithm and both links
kinds (TCP, shared memory), prism-rank's
results checked against the reference model (--check), and Open MPI's and Gloo's results equal to
the exact sum of their data computed here (their digests recomputed from it). Needs Open MPI and
/usr/bin/python3 with torch (scripts/setup.sh): without them the test fails and says so.
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
        assert cal['gap'] >= 0, cal  # measured (0 when a stream's messages cost no more than their bytes)
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

        # auto ran the argmin of its own predictions (the first candidate on a tie; at p = 2 the ring
        # on a tie with RHD: lib/coll/cost_model.cpp choose()).
        auto = row['algos']['auto']
        preds = auto['predictions']
        best = min(preds.values())
        tied = [a for a in CANDIDATES if preds[a] <= best * (1 + 1e-9)]
        argmin = 'ring' if p == 2 and 'ring' in tied else tied[0]
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


# ---------------------------------------------------------------- --compare
MPI_BIN = su.BUILD / 'tools' / 'mpi-allreduce'
SYS_PYTHON = '/usr/bin/python3'   # Debian's, where python3-torch is installed


def exact_sum(n: int, ranks: int, dtype: str):
    """The exact allreduce of tools/mpi/mpi_allreduce.cpp's and tools/torch_allreduce.py's data, computed
    here from the formula (integers, then scaled), independently of both programs' own checks."""
    import numpy as np
    i = np.arange(n, dtype=np.uint64)
    total = np.zeros(n, dtype=np.int64)
    for r in range(ranks):
        h = (i * np.uint64(2654435761) + np.uint64(r * 40503)) & np.uint64(0xffffffff)
        total += (h % np.uint64(33 if dtype == 'bf16' else 2001)).astype(np.int64) - (16 if dtype == 'bf16' else 1000)
    if dtype == 'bf16':   # small integers: bf16 is the top half of their fp32 encoding
        return (total.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).tobytes()
    return (total.astype(np.float64) / 256.0).astype(np.float32).tobytes()


def fnv1a(b: bytes) -> str:
    h = 0xcbf29ce484222325
    for x in b:
        h = ((h ^ x) * 0x100000001b3) & 0xffffffffffffffff
    return f'{h:016x}'


def test_compare_quick_run_against_open_mpi_and_gloo(tmp_path):
    """--compare --quick: p = 2, 256 KiB fp32 and 64 KiB bf16, repeat 2: every host algorithm under both
    policies and auto, over TCP and over shared-memory links (prism-rank --check: each result against the
    reference model), Open MPI over TCP
    and over shared memory, Gloo; the JSON's rows complete, times positive, the KULISCH digests of every
    algorithm one, and Open MPI's and Gloo's results the exact sum computed here."""
    import hashlib
    su.require_binaries(RANK, MPI_BIN)
    assert shutil.which('mpirun'), 'mpirun missing: scripts/setup.sh installs openmpi-bin'
    r = subprocess.run([SYS_PYTHON, '-c', 'import torch, torch.distributed as d; assert d.is_gloo_available()'],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, ('Gloo needs python3-torch for /usr/bin/python3 (scripts/setup.sh: '
                               f'apt-get install python3-torch): {r.stderr.strip()[-400:]}')
    algos = host_algorithms()
    out, png = tmp_path / 'cmp.json', tmp_path / 'cmp.png'
    r = subprocess.run([sys.executable, str(BENCH), '--compare', '--quick', '--check', '--build', str(su.BUILD),
                        '--json', str(out), '--plot', str(png)], capture_output=True, text=True, timeout=600)
    text = r.stdout + r.stderr
    assert r.returncode == 0, text
    assert 'KULISCH / ARRIVAL' in r.stdout and 'auto (both policies)' in r.stdout, text

    d = json.loads(out.read_text())
    assert d['mode'] == 'compare' and d['complete'] and d['failures'] == [], d.get('failures')
    assert d['machine']['cpu_model'] and d['machine']['mpi'] and d['machine']['torch'], d['machine']
    assert d['data'] == ['gradient'] and d['git']['commit'], (d['data'], d['git'])
    assert set(d['baselines']) == {'mpi_tcp', 'mpi_sm', 'gloo'} and d['links'] == ['tcp', 'shm']
    cells = d['results']
    assert [(c['ranks'], c['bytes'], c['dtype'], c['data'], c['links']) for c in cells] == \
        [(2, 262144, 'fp32', 'gradient', 'tcp'), (2, 262144, 'fp32', 'gradient', 'shm'),
         (2, 65536, 'bf16', 'gradient', 'tcp'), (2, 65536, 'bf16', 'gradient', 'shm')]
    # KULISCH_FIXED over TCP and over shared memory: the same bits
    for n in (262144, 65536):
        assert len({tuple(c['kulisch_digests']) for c in cells if c['bytes'] == n}) == 1, n
    for c in cells:
        p, n, dtype = c['ranks'], c['bytes'], c['dtype']
        kulisch = set()
        for pol in ('fp32_arrival', 'kulisch'):
            runs = c['prism'][pol]
            assert sorted(runs) == sorted(algos + ['auto']), runs.keys()
            for a, e in runs.items():
                assert 'error' not in e, (p, n, dtype, pol, a, e.get('error'))
                assert e['seconds_min'] > 0 and e['seconds_median'] >= e['seconds_min'], (pol, a)
                assert e['repeat'] == 2 and len(e['per_rank']) == p   # (each rank's policy, formats and
                assert sorted(x['rank'] for x in e['per_rank']) == list(range(p))   # size: checked by the bench)
                assert e['seconds_median'] == max(x['seconds_median'] for x in e['per_rank'])
                assert e['digests_agree'] and len(e['digests']) == 1, e['digests']
                g = c['gbit_s'][f"{a}/{'K' if pol == 'kulisch' else 'A'}"]
                assert abs(g - n * 8 / e['seconds_median'] / 1e9) <= 1e-9 * g
                if pol == 'kulisch':
                    kulisch |= set(e['digests'])
            assert runs['auto']['algo'] in algos
            v = c['auto'][pol]
            assert v['choice'] == runs['auto']['algo'] and v['fastest'] in algos
            t = {a: runs[a]['seconds_median'] for a in algos}
            assert v['fastest'] == min(t, key=t.get)
            assert v['within_10pct'] == (t[v['choice']] <= 1.1 * t[v['fastest']])
        # KULISCH_FIXED is exact: every algorithm (auto too) the same bits.
        assert len(kulisch) == 1 and c['kulisch_digests_agree'], kulisch
        for a in algos:
            k, ar = c['gbit_s'][f'{a}/K'], c['gbit_s'][f'{a}/A']
            assert abs(c['ratios'][f'{a} K/A'] - k / ar) <= 1e-9 * (k / ar)

        want = exact_sum(n // (2 if dtype == 'bf16' else 4), p, dtype)
        for b in ('mpi_tcp', 'mpi_sm'):
            e = c[b]
            assert 'error' not in e, (b, e)
            assert e['ranks'] == p and e['bytes'] == n and e['dtype'] == dtype and e['timing'] == 'back_to_back'
            assert e['checked'] and e['check_differ'] == 0 and e['repeat'] == 2
            assert e['seconds_median'] >= e['seconds_min'] > 0 and c['gbit_s'][b] > 0
            assert e['digest'] == fnv1a(want), (b, 'not the exact sum')
            best = max(c['gbit_s'][f'{a}/A'] for a in algos)
            assert abs(c['ratios'][f'best A/{b}'] - best / c['gbit_s'][b]) <= 1e-9 * best / c['gbit_s'][b]
        g = c['gloo']
        if dtype == 'bf16':   # torch 1.13's gloo refuses bf16 on CPU: reported, not measured
            assert g.get('unsupported') and 'gloo' not in c['gbit_s'], g
        else:
            assert 'error' not in g, g
            assert g['checked'] and g['check_differ'] == 0 and g['seconds_median'] >= g['seconds_min'] > 0
            assert g['digest'] == hashlib.blake2b(want, digest_size=8).hexdigest(), 'Gloo: not the exact sum'
    s = d['summary']
    assert s['auto']['both']['cells'] == 8 and set(s['kulisch_over_arrival']) == set(algos)
    assert set(s['by_links']) == {'tcp', 'shm'} and s['by_links']['shm']['auto']['both']['cells'] == 4
    if shutil.which('gnuplot'):
        assert png.exists() and png.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
