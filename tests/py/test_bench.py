"""prism-bench pipeline: the measurement program, not its figures.

No timing is asserted (timings on a shared machine drift). What is asserted:
every RESULT the pipeline sent under load was checked against the reference
and none differed, nothing was dropped, each policy is paired with its
forward-only and testpmd baselines (and the ideal reducer, when asked for), the derived figures agree with the
measured ones when recomputed here, the plot is a PNG, and the checks can
fail: with --inject-fault (signs flipped in one contribution per round) every
policy's RESULTs must be reported wrong and the exit status must say so.
"""
from __future__ import annotations

import json
import re
import math
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get('PRISM_BUILD') or REPO / 'build')
BENCH = BUILD / 'app' / 'prism-bench'
TESTPMD = shutil.which('dpdk-testpmd')

FIELDS = {'policy', 'dtype', 'payload_bytes', 'ranks', 'lcores', 'mpps', 'gbps', 'ns_per_elem', 'baseline',
          'stage_share', 'lcores_100g', 'lcores_400g', 'slot_bytes', 'drops', 'results_checked', 'mismatches'}


def require_bench():
    if not (BENCH.is_file() and os.access(BENCH, os.X_OK)):
        if os.environ.get('PRISM_BUILD'):
            pytest.fail(f'prism-bench not found at {BENCH}')
        pytest.skip(f'prism-bench not found at {BENCH} (set PRISM_BUILD)')


def bench(*args, timeout=600):
    return subprocess.run([str(BENCH), 'pipeline', *args], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


@pytest.fixture(scope='module')
def quick(tmp_path_factory):
    require_bench()
    d = tmp_path_factory.mktemp('bench')
    args = ['--quick', '--json', str(d / 'out.json')]
    if shutil.which('gnuplot'):
        args += ['--plot', str(d / 'plot.png')]
    r = bench(*args)
    return r, d


def test_quick_sweep_checks_every_result_and_drops_nothing(quick):
    r, d = quick
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    rows = json.loads((d / 'out.json').read_text())
    assert rows, 'no measurement'
    for row in rows:
        assert FIELDS <= row.keys(), row
        assert row['error'] is None, row
        assert row['drops'] == 0 and row['mismatches'] == 0, row
        if not row['policy'].startswith('testpmd'):
            assert row['results_checked'] > 0, row
    policies = {r['policy'] for r in rows}
    assert {'forward', 'fp32_arrival', 'kulisch'} <= policies
    assert {r['dtype'] for r in rows} == {'fp32', 'fp16'}
    assert 'summary:' in r.stdout and 'RESULT mismatches' in r.stdout


def test_each_policy_is_paired_with_its_baselines(quick):
    r, d = quick
    rows = json.loads((d / 'out.json').read_text())
    fwd = {(x['dtype'], x['payload_bytes'], x['ranks'], x['lcores']): x['mpps'] for x in rows if x['policy'] == 'forward'}
    tpm = {(x['dtype'], x['payload_bytes'], x['ranks']): x['mpps'] for x in rows if x['policy'] == 'testpmd'}
    if TESTPMD:
        assert tpm, 'dpdk-testpmd is installed but no testpmd row was measured'
    csum = {(x['dtype'], x['payload_bytes'], x['ranks']): x for x in rows if x['policy'] == 'testpmd_csum'}
    if TESTPMD:  # testpmd's csum engine runs on the headline shape only, as a reference
        assert set(csum) == {('fp32', 1024, 8)}, csum.keys()
        c = csum[('fp32', 1024, 8)]
        assert c['baseline']['vs_testpmd'] == pytest.approx(c['mpps'] / tpm[('fp32', 1024, 8)], rel=1e-4)
        lines = [l for l in r.stdout.splitlines() if l.startswith('  reference: testpmd csum / io')]
        assert len(lines) == 1, r.stdout[-3000:]
        m = re.match(r'  reference: testpmd csum / io ([0-9.]+) \(rounds [0-9.-]+\); forward / testpmd csum ([0-9.]+) ',
                     lines[0])
        assert m, lines[0]
        assert float(m[1]) == pytest.approx(c['baseline']['vs_testpmd'], abs=0.006)
        f = next(x for x in rows if x['policy'] == 'forward' and (x['dtype'], x['payload_bytes']) == ('fp32', 1024))
        assert f['baseline']['testpmd_csum_mpps'] == pytest.approx(c['mpps'])
        assert float(m[2]) == pytest.approx(f['baseline']['vs_testpmd_csum'], abs=0.006)
    for x in rows:
        if x['policy'].startswith('testpmd'):
            continue
        key = (x['dtype'], x['payload_bytes'], x['ranks'], x['lcores'])
        assert x['baseline']['forward_mpps'] == pytest.approx(fwd[key])
        assert x['baseline']['vs_forward'] == pytest.approx(x['mpps'] / fwd[key], rel=1e-4)
        # Each ratio's range over the rounds holds its median.
        for k in ('vs_forward', 'vs_testpmd', 'vs_fp32_arrival'):
            lo, hi = x['baseline'][k + '_range']
            if x['baseline'][k] > 0:
                assert lo <= x['baseline'][k] * (1 + 1e-4) and x['baseline'][k] <= hi * (1 + 1e-4), x
        if TESTPMD:
            t = tpm[key[:3]]
            assert x['baseline']['testpmd_mpps'] == pytest.approx(t)
            assert x['baseline']['vs_testpmd'] == pytest.approx(x['mpps'] / t, rel=1e-4)


TARGET = re.compile(r'target (.+?)\s+lcores=(\d) +([0-9.]+) \(>= ([0-9.]+)\) (PASS|MISS)  rounds ([0-9.]+)-([0-9.]+), '
                    r'(every round passed|every round missed|rounds split)$')


def test_targets_give_the_rounds_range_and_a_consistent_verdict(tmp_path):
    """Each target line: the median ratio, its verdict, and the lowest and
    highest per-round ratio, which must hold the median and agree with the
    words (firm pass, firm miss, or split). The JSON row carries the same."""
    require_bench()
    out = tmp_path / 't.json'
    r = bench('--policies', 'forward,fp32_arrival,kulisch', '--payloads', '1024', '--dtypes', 'fp32', '--ranks', '8',
              '--lcores', '2', '--repeat', '3', '--time', '0.1', '--warmup', '0.05', '--no-testpmd', '--json', str(out))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    lines = [l for l in r.stdout.splitlines() if l.startswith('target ')]
    assert len(lines) == 3, r.stdout[-3000:]  # fp32_arrival / forward, kulisch / fp32_arrival and its stretch
    rows = {x['policy']: x for x in json.loads(out.read_text())}
    for line in lines:
        m = TARGET.match(line)
        assert m, line
        what, med, goal, verdict, lo, hi, words = m[1], float(m[3]), float(m[4]), m[5], float(m[6]), float(m[7]), m[8]
        assert lo <= med <= hi, line
        b = rows['kulisch' if what.startswith('kulisch') else 'fp32_arrival']['baseline']
        key = 'vs_fp32_arrival' if what.startswith('kulisch') else 'vs_forward'
        assert b[key] == pytest.approx(med, abs=0.006)
        assert b[key + '_range'] == pytest.approx([lo, hi], abs=0.006)
        # The verdict and its words from the unrounded figures (the line prints two decimals: a round
        # at 0.6996 against 0.70 prints as 0.70 and rightly splits the rounds).
        x_med, (x_lo, x_hi) = b[key], b[key + '_range']
        assert verdict == ('PASS' if x_med >= goal else 'MISS'), (line, x_med)
        assert words == ('every round passed' if x_lo >= goal else 'every round missed' if x_hi < goal
                         else 'rounds split'), (line, x_lo, x_hi)


def test_derived_figures_agree_with_the_measured_rate(quick):
    r, d = quick
    for x in json.loads((d / 'out.json').read_text()):
        if x['mpps'] == 0:
            continue
        # Gbit/s of contribution payload and ns per element-contribution, recomputed from Mpps.
        assert x['gbps'] == pytest.approx(x['mpps'] * 1e6 * x['payload_bytes'] * 8 / 1e9, rel=1e-3)
        assert x['ns_per_elem'] == pytest.approx(1e3 / (x['mpps'] * x['elements']), rel=1e-3)
        if not x['policy'].startswith('testpmd'):
            # The lcores 100 Gbit/s on the wire needs (frame + 24 B of FCS, preamble and gap) at the measured costs.
            pps = 100e9 / ((x['frame_bytes'] + 24) * 8)
            want = math.ceil(pps * x['main_ns_per_packet'] * 1e-9)
            if x['reduce_ns_per_packet'] > 0:
                want += math.ceil(pps * x['reduce_ns_per_packet'] * 1e-9)
            assert x['lcores_100g'] == want, x
            # Busy time is booked when a poll ends, so a poll straddling the window's edge can push a
            # share slightly past 1.
            assert 0 <= x['stage_share']['rx'] <= 1.1 and 0 <= x['stage_share']['reduce'] <= 1.1


def test_plot_is_a_png(quick):
    if not shutil.which('gnuplot'):
        pytest.skip('gnuplot not installed')
    r, d = quick
    data = (d / 'plot.png').read_bytes()
    assert data[:8] == b'\x89PNG\r\n\x1a\n' and len(data) > 2000


@pytest.mark.parametrize('fanout,says', [('chain', 'chained mbufs')])
def test_other_fanouts_results_check_out(tmp_path, fanout, says):
    """--fanout chain: each RESULT copy is a header mbuf chained to one shared
    payload. The checker reads the frames and finds every one right."""
    require_bench()
    out = tmp_path / f'{fanout}.json'
    r = bench('--policies', 'fp32_arrival,kulisch', '--payloads', '256,1024', '--dtypes', 'fp32,bf16', '--lcores',
              '1,2', '--repeat', '1', '--time', '0.1', '--warmup', '0.05', '--no-testpmd', '--fanout', fanout,
              '--json', str(out))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert f'RESULT fan-out by {says}' in r.stdout
    rows = json.loads(out.read_text())
    assert {row['policy'] for row in rows} == {'forward', 'fp32_arrival', 'kulisch'}
    assert {row['lcores'] for row in rows} == {1, 2}
    for row in rows:
        assert row['error'] is None and row['drops'] == 0 and row['mismatches'] == 0, row
        assert row['results_checked'] > 0, row
        assert row['fanout'] == (None if row['policy'] == 'forward' else fanout), row


CEILING = re.compile(r'  ceiling: ideal / forward ([0-9.]+) \(rounds ([0-9.]+)-([0-9.]+)\); '
                     r'fp32_arrival / ideal ([0-9.]+) \(rounds ([0-9.]+)-([0-9.]+)\)$')


def test_ideal_reducer_is_paired_and_rewrites_what_it_sends(tmp_path):
    """--policies ideal: forward-only plus only the data work any reducer
    must do. Its frames go back out whole, with their elements rewritten:
    PRISM's parser finds their headers good and their UDP checksums (left
    as they came) wrong, which the bench requires of most frames it checks.
    It runs for float formats only, is paired with forward-only, and each
    policy row and target block gives it as the ceiling."""
    require_bench()
    out = tmp_path / 'ideal.json'
    r = bench('--policies', 'ideal,fp32_arrival', '--payloads', '1024', '--dtypes', 'fp32,bf16,int32', '--lcores',
              '1,2', '--repeat', '2', '--time', '0.1', '--warmup', '0.05', '--no-testpmd', '--json', str(out))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    rows = json.loads(out.read_text())
    ideal = {(x['dtype'], x['lcores']): x for x in rows if x['policy'] == 'ideal'}
    assert set(ideal) == {(d, lc) for d in ('fp32', 'bf16') for lc in (1, 2)}, 'ideal runs on float formats only'
    for x in ideal.values():
        assert x['error'] is None and x['drops'] == 0 and x['results_checked'] > 0, x
        assert x['fanout'] is None, x
        fwd = next(y for y in rows if y['policy'] == 'forward' and (y['dtype'], y['lcores']) == (x['dtype'], x['lcores']))
        assert x['baseline']['forward_mpps'] == pytest.approx(fwd['mpps'])
        lo, hi = x['baseline']['vs_forward_range']
        assert 0 < lo <= x['baseline']['vs_forward'] * (1 + 1e-4) and x['baseline']['vs_forward'] <= hi * (1 + 1e-4), x
    for x in rows:
        if x['policy'] != 'fp32_arrival':
            continue
        i = ideal[(x['dtype'], x['lcores'])]
        assert x['baseline']['ideal_mpps'] == pytest.approx(i['mpps'])
        lo, hi = x['baseline']['vs_ideal_range']
        assert lo <= x['baseline']['vs_ideal'] * (1 + 1e-4) and x['baseline']['vs_ideal'] <= hi * (1 + 1e-4), x
    lines = [l for l in r.stdout.splitlines() if l.startswith('  ceiling:')]
    assert len(lines) == 2, r.stdout[-3000:]  # under the fp32_arrival target of each layout
    arrival = {x['lcores']: x for x in rows if x['policy'] == 'fp32_arrival' and x['dtype'] == 'fp32'}
    for line, lc in zip(lines, (2, 1)):
        m = CEILING.match(line)
        assert m, line
        i = ideal[('fp32', lc)]['baseline']
        assert float(m[1]) == pytest.approx(i['vs_forward'], abs=0.006)
        assert [float(m[2]), float(m[3])] == pytest.approx(i['vs_forward_range'], abs=0.006)
        assert float(m[4]) == pytest.approx(arrival[lc]['baseline']['vs_ideal'], abs=0.006)


@pytest.mark.parametrize('fanout', ['copy', 'chain'])
def test_an_injected_fault_is_caught(fanout):
    require_bench()
    # fp16 and e5m2 too: FP32_ARRIVAL's check decodes their RESULTs through a table.
    r = bench('--policies', 'fp32_arrival,kulisch', '--payloads', '1024', '--dtypes', 'fp32,fp16,e5m2', '--lcores',
              '1,2', '--repeat', '1', '--time', '0.1', '--warmup', '0.05', '--no-testpmd', '--inject-fault', '--fanout',
              fanout)
    assert r.returncode == 3, r.stdout[-3000:] + r.stderr[-2000:]
    assert 'CHECK FAILED' in r.stdout
    for line in r.stdout.splitlines():
        if line.startswith(('fp32_arrival', 'kulisch')):
            assert 'CHECK FAILED' in line, line


@pytest.mark.parametrize('args,msg', [
    (['--policies', 'fastest'], "unknown policy 'fastest'"),
    (['--dtypes', 'fp64'], "unknown dtype 'fp64'"),
    (['--payloads', '16'], 'bad --payloads value'),
    (['--ranks', '0'], 'bad --ranks value'),
    (['--lcores', '99'], '--lcores'),
    (['--plot', 'out.svg'], '.png'),
    (['--frobnicate'], 'unknown option --frobnicate'),
    (['--fanout', 'zero_copy'], "--fanout 'zero_copy': use copy or chain"),
    (['--fanout', 'egress'], "--fanout 'egress': use copy or chain"),
    (['--ranks', '1'], 'bad --ranks value'),
    (['--json', '/nonexistent-dir/out.json'], 'cannot write --json /nonexistent-dir/out.json'),
    (['extra'], "unexpected argument 'extra'"),
])
def test_usage_errors_exit_2_with_a_reason(args, msg):
    require_bench()
    r = bench(*args)
    assert r.returncode == 2, r.stdout + r.stderr
    assert msg in r.stderr, r.stderr
