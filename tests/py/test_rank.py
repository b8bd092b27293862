"""prism-rank (libprism) against the real prism-switch, through the
network-namespace testbed (scripts/testbed.py): every rank a process in its
own namespace with a kernel UDP socket, the switch on net_af_packet.

Inputs are made here (numpy, random finite values of each format) and given to
the ranks as files; every rank writes its result, and the result is compared
with the independent Python reference model (prism_ref.py): bit for bit under
KULISCH_FIXED, FP32_BINOMIAL and for integers, within the recursive-summation
bound under FP32_ARRIVAL. The switch's summary must show every
element-contribution reduced exactly once. With S reducer shards, captures of
the ranks' links show every packet at its shard's port (steering_check.py).
Needs root; skips without it.
"""
from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import prism_ref as ref
import steering_check as sc
import switch_util as su
from testbed import Capture, make_testbed, read_pcap, running_testbed, skip_unless_possible  # noqa: F401

RANK = su.BUILD / 'app' / 'prism-rank'
REPO = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------ inputs and expectations
def make_inputs(tb, n: int, dtype: str, seed: int) -> list[np.ndarray]:
    """Every rank's input as codes of `dtype`, written to {dir}/in<rank>.bin."""
    rng = np.random.default_rng(seed)
    ins = []
    for r in range(tb.R):
        if dtype == 'int32':
            codes = rng.integers(-(1 << 20), 1 << 20, n, dtype=np.int64).astype('<i4').view('<u4')
        elif dtype == 'int8':
            codes = rng.integers(-100, 100, n, dtype=np.int64).astype('<i1').view('<u1')
        else:
            x = rng.standard_normal(n) * np.exp2(rng.integers(-6, 7, n))
            codes = ref.float_to_codes(dtype, x)
        ins.append(np.asarray(codes))
        (tb.dir / f'in{r}.bin').write_bytes(ref.codes_to_bytes(dtype, codes))
    return ins


def expected(dtype: str, policy: str, out: str, ins) -> bytes:
    data, flags = ref.reduce(dtype, policy, out, 'ieee', [ref.codes_to_bytes(dtype, c) for c in ins])
    return data


def within_arrival_bound(dtype: str, out: str, ins, got: bytes) -> tuple[int, int]:
    """(elements differing from the exact sum, elements beyond the FP32_ARRIVAL bound): an fp32
    sum in any order of R terms lies within gamma_(R-1) * sum|x| of the exact sum, and the
    exact sum rounded once within u * |S| of it."""
    exact = np.frombuffer(expected(dtype, 'kulisch', out, ins), '<f4').astype(np.float64)
    g = np.frombuffer(got, '<f4').astype(np.float64)
    R = len(ins)
    u = 2.0 ** -24
    absum = sum(np.abs(ref.to_float32(dtype, c).astype(np.float64)) for c in ins)
    bound = ((R - 1) * u / (1 - (R - 1) * u) + u) * absum + 2.0 ** -149
    return int(np.count_nonzero(g != exact)), int(np.count_nonzero(np.abs(g - exact) > bound))


def run_ranks(tb, n_or_file: str, dtype: str, policy: str, out: str, *extra, timeout=120, ranks=None):
    """prism-rank on every rank (or `ranks`): each run joins a new session of the job, so runs
    against one switch never reuse an op number it remembers."""
    cmd = [str(RANK), '--config', '{config}', '--rank', '{rank}', '--dtype', dtype, '--out-dtype', out,
           '--policy', policy, '--json', *map(str, extra)]
    cmd += (['--input', '{dir}/in{rank}.bin', '--output', '{dir}/out{rank}.bin'] if n_or_file == 'files'
            else ['--count', n_or_file])
    return tb.run(cmd, timeout=timeout, ranks=ranks)


def ok_lines(runs) -> list[dict]:
    bad = [r for r in runs if r.rc != 0]
    assert not bad, '\n'.join(f'rank {r.rank}: exit {r.rc}\n{r.stdout}{r.stderr}' for r in bad)
    return [json.loads(r.stdout.strip().splitlines()[-1]) for r in runs]


def allreduce_case(tb, n: int, dtype: str, policy: str, out: str, seed: int, *extra) -> list[dict]:
    """One allreduce of n elements on every rank; every rank's result checked; returns the ranks' JSON."""
    ins = make_inputs(tb, n, dtype, seed)
    lines = ok_lines(run_ranks(tb, 'files', dtype, policy, out, *extra))
    results = {r: (tb.dir / f'out{r}.bin').read_bytes() for r in range(tb.R)}
    what = f'{n} {dtype}->{out} {policy}, R={tb.R}'
    if policy == 'fp32_arrival' and dtype not in ('int8', 'int32'):
        for r, got in results.items():
            differ, beyond = within_arrival_bound(dtype, out, ins, got)
            assert beyond == 0, f'{what}: rank {r}: {beyond} of {n} elements beyond the bound'
        # Every rank received the same RESULT, whatever its bits.
        assert len(set(results.values())) == 1, what
    else:
        want = expected(dtype, policy, out, ins)
        for r, got in results.items():
            if got != want:
                a, b = np.frombuffer(got, np.uint8), np.frombuffer(want, np.uint8)
                raise AssertionError(f'{what}: rank {r}: {np.count_nonzero(a != b)} bytes differ from the reference')
    for ln in lines:
        assert ln['count'] == n and ln['results'] == ln['chunks'], ln
    return lines


def stop(tb) -> dict:
    exits = tb.stop_switches()
    out = {}
    for name, e in exits.items():
        assert e.rc == 0, f'{name}: exit {e.rc}\n{e.stdout}\n{e.stderr[-3000:]}'
        out[name] = su.parse_summary(e.stdout)
    return out


def check_once(s: su.Summary, R: int, elements: int, chunks: int, text: str = ''):
    """Every element-contribution reduced exactly once; every chunk opened and completed once."""
    assert s.shard_total('elements') == R * elements, text
    assert s.jobs[7]['completed'] == chunks and s.jobs[7]['opened'] == chunks, text
    assert s.jobs[7]['in_flight'] == 0 and not s.incomplete, text


# (elements, dtype, policy, out_dtype): one chunk, then more than two windows of 64 chunks
# (at MTU 1500: 288 elements a chunk for fp32 results, 480 for fp16 to fp16)
CASES = [
    (100, 'fp32', 'kulisch', 'fp32'),
    (64 * 288 * 2 + 5, 'fp32', 'kulisch', 'fp32'),
    (30000, 'fp16', 'kulisch', 'fp16'),
    (20000, 'bf16', 'kulisch', 'fp32'),
    (20000, 'e4m3fn', 'kulisch', 'fp32'),
    (20000, 'int32', 'kulisch', 'int32'),
    (20000, 'fp32', 'fp32_arrival', 'fp32'),
    (20000, 'bf16', 'fp32_arrival', 'fp32'),
    (9000, 'fp16', 'fp32_binomial', 'fp32'),
]


@pytest.mark.parametrize('R', [2, 4, 8])
def test_every_rank_gets_the_reference_result(make_testbed, R):
    su.require_binaries(RANK)
    tb = make_testbed(ranks=R)
    elements = chunks = 0
    base = 0    # one past the highest op the switch opened for the job: none yet
    for i, (n, dt, pol, out) in enumerate(CASES):
        lines = allreduce_case(tb, n, dt, pol, out, seed=100 * R + i)
        elements += n
        chunks += lines[0]['chunks']
        # Each run is a new session of the job: every rank starts at the same first op, in
        # [base, base + 2^24) (PROTOCOL.md, Sessions: base plus a random offset), past the last run's ops.
        firsts, ops = {ln['first_op'] for ln in lines}, {ln['ops'] for ln in lines}
        assert len(firsts) == 1 and len(ops) == 1, (firsts, ops)
        first = firsts.pop()
        assert 0 <= first - base < 2 ** 24, (first, base)
        base = first + ops.pop()
    s = stop(tb)['switch']
    check_once(s, R, elements, chunks, str(s))
    assert s.shard_total('session_packets') >= R * len(CASES)


@pytest.mark.parametrize('impair', [dict(loss=1), dict(loss=5), dict(loss=10), dict(dup=20), dict(reorder=30)],
                         ids=['loss1', 'loss5', 'loss10', 'dup20', 'reorder30'])
def test_exact_under_loss_duplication_and_reordering(make_testbed, impair):
    """Impairments on every veth, both directions: still exact on every rank; every
    element-contribution reduced once (duplicates are dropped, never counted); the ranks
    report how they recovered: a lost CONTRIB by re-sending it after the switch said MISSING, a
    lost RESULT by a QUERY the switch answers with the RESULT again (no re-send needed)."""
    su.require_binaries(RANK)
    tb = make_testbed(ranks=4, **impair)
    elements = chunks = 0
    retransmits = queries = 0
    for i, (n, dt, pol, out) in enumerate([(64 * 288 * 2 + 5, 'fp32', 'kulisch', 'fp32'),
                                           (30000, 'bf16', 'kulisch', 'fp32')]):
        lines = allreduce_case(tb, n, dt, pol, out, seed=7 + i)
        elements += n
        chunks += lines[0]['chunks']
        retransmits += sum(ln['retransmits'] for ln in lines)
        queries += sum(ln['queries'] for ln in lines)
    s = stop(tb)['switch']
    check_once(s, 4, elements, chunks, str(s))
    if impair.get('loss'):
        assert retransmits + queries > 0, 'loss, yet no rank re-sent or asked'
    if impair.get('dup'):
        assert s.shard_dropped['duplicate'] > 0, 'duplication, yet the switch dropped no duplicate'


@pytest.mark.parametrize('S,impair', [(1, {}), (2, {}), (3, {'loss': 5})], ids=['S1', 'S2', 'S3-loss5'])
def test_every_packet_goes_to_its_shards_port(make_testbed, tmp_path, S, impair):
    """The switch with reducers.shards S (from its YAML, which prism-rank reads): every CONTRIB
    (retransmissions too) and JOIN that libprism sends, captured on each rank's link, goes to UDP port
    udp_port + (job + op + chunk) mod S (a JOIN: job mod S) -- computed here from each captured
    header -- and every reply comes from udp_port; the results stay exact."""
    su.require_binaries(RANK)
    tb = make_testbed(ranks=3, settings={'reducers': f'{{shards: {S}}}'}, **impair)
    caps = [Capture('prism0', tmp_path / f'r{r.rank}.pcap', ns=r.ns) for r in tb.ranks]   # each rank's link
    elements = chunks = 0
    try:
        for i, (n, dt, pol, out) in enumerate([(64 * 288 + 7, 'fp32', 'kulisch', 'fp32'),
                                               (20000, 'bf16', 'kulisch', 'fp32')]):
            lines = allreduce_case(tb, n, dt, pol, out, 40 + i)
            elements += n
            chunks += lines[0]['chunks']
    finally:
        for c in caps:
            c.stop()
    s = stop(tb)['switch']
    check_once(s, 3, elements, chunks, str(s))
    st = sc.check_steering([f for c in caps for f in read_pcap(c.out)], {r.switch_ip for r in tb.ranks},
                           su.UDP_PORT, S)
    assert not st.wrong, '\n'.join(st.wrong[:20])
    assert len(st.keys) == chunks and st.sent[sc.CONTRIB] >= 3 * chunks, (len(st.keys), chunks, st.sent)
    assert st.sent[sc.JOIN] >= 3 * 2, st.sent            # each rank joined each run's session
    assert st.shards_used == set(range(S)), st.shards_used
    assert st.replies[sc.RESULT] >= 3 * chunks and st.replies[sc.JOINED] >= 3 * 2, st.replies
    if impair:
        assert st.retransmits > 0, 'loss, yet no retransmission was captured'


def test_ranks_on_one_bridge(make_testbed):
    su.require_binaries(RANK)
    tb = make_testbed(ranks=4, layout='bridge')
    lines = allreduce_case(tb, 64 * 288 * 2 + 5, 'fp32', 'kulisch', 'fp32', seed=3)
    check_once(stop(tb)['switch'], 4, 64 * 288 * 2 + 5, lines[0]['chunks'])


def test_gso_sends_on_a_clean_path_cost_no_retransmission(make_testbed):
    """Ranks send runs of chunks as UDP GSO messages (the testbed's port kind takes them segmented):
    the result is the reference's, nothing is sent twice, and the statistics show the batching."""
    su.require_binaries(RANK)
    tb = make_testbed(ranks=4, layout='bridge')
    n = 64 * 288 * 3 + 7
    lines = allreduce_case(tb, n, 'fp32', 'kulisch', 'fp32', seed=11)
    for ln in lines:
        assert ln['retransmits'] == 0 and ln['status_missing'] == 0, ln
        if not ln['gso_refused']:
            assert ln['gso_sends'] > 0 and ln['gso_datagrams'] > ln['gso_sends'], ln
            # The first window (64 chunks) leaves in one call; later refills follow the RESULTs as
            # they come, one or many a call as the scheduler has it, so only this bound is certain.
            assert ln['send_calls'] < ln['chunks'], ln
    check_once(stop(tb)['switch'], 4, n, lines[0]['chunks'])


def test_a_path_that_passes_gso_whole_to_af_packet_falls_back_to_plain_datagrams(make_testbed):
    """net_af_packet's 2 KiB ring frames cut a GSO super-packet that no interface segmented (the
    testbed's offloads left as they are): the switch counts it OVERSIZE (or refuses its head as
    malformed), and the ranks give GSO up and still get the exact result."""
    su.require_binaries(RANK)
    tb = make_testbed(ranks=2, layout='bridge', driver='af_packet', offloads=False)
    n = 64 * 288 * 2 + 3
    lines = allreduce_case(tb, n, 'fp32', 'kulisch', 'fp32', seed=12)
    assert all(ln['gso_refused'] == 1 for ln in lines), lines
    summary = stop(tb)['switch']
    assert summary.dropped('oversize') > 0, summary.rx_dropped


@pytest.mark.parametrize('transport', ['kulisch', 'auto', 'rounded'])
def test_leaf_and_root_give_one_switchs_bits(make_testbed, transport):
    """Ranks behind a leaf and behind the root: under KULISCH and AUTO transport every rank's
    result is the one rounding of the exact sum, as one switch gives; under ROUNDED the leaf's
    partial is rounded to fp32 first (PROTOCOL.md), and the result is the exact sum of that
    partial and the root's own members' inputs, rounded once."""
    su.require_binaries(RANK)
    tb = make_testbed(ranks=4, layout='tree')
    n = 10000
    ins = make_inputs(tb, n, 'fp32', seed=11)
    ok_lines(run_ranks(tb, 'files', 'fp32', 'kulisch', 'fp32', '--transport', transport))
    results = {r: (tb.dir / f'out{r}.bin').read_bytes() for r in range(tb.R)}
    if transport == 'rounded':
        leaf = [r.rank for r in tb.ranks if r.switch == 'leaf']
        root = [r.rank for r in tb.ranks if r.switch == 'root']
        partial = expected('fp32', 'kulisch', 'fp32', [ins[r] for r in leaf])
        want = ref.reduce('fp32', 'kulisch', 'fp32', 'ieee',
                          [partial] + [ref.codes_to_bytes('fp32', ins[r]) for r in root])[0]
        # The rounded partial loses bits: the test tells the transports apart.
        assert want != expected('fp32', 'kulisch', 'fp32', ins)
    else:
        want = expected('fp32', 'kulisch', 'fp32', ins)
    for r, got in results.items():
        assert got == want, f'rank {r} ({transport}): differs from the expected result'
    stop(tb)


def test_prism_rank_checks_itself_and_splits_ops(make_testbed):
    """prism-rank's own --check (generated data, every rank's input made from the seed) and
    --split (several non-blocking ops in flight, waited last first) and --in-place."""
    su.require_binaries(RANK)
    tb = make_testbed(ranks=3)
    lines = ok_lines(run_ranks(tb, '50000', 'bf16', 'kulisch', 'bf16', '--check', '--split', '5',
                               '--repeat', '2', '--in-place'))
    for ln in lines:
        assert ln['check_differ'] == 0 and ln['check_beyond_bound'] == 0, ln
    assert len({ln['digest'] for ln in lines}) == 1
    stop(tb)


def test_the_c_example_builds_with_pkg_config_and_runs(make_testbed, tmp_path):
    """docs/examples/allreduce.c against an installed libprism (meson install into a staging
    directory, then cc with pkg-config's flags), run as two ranks: the exact sums come back."""
    skip_unless_possible()
    flags, libdir = su.installed_libprism(tmp_path)
    exe = tmp_path / 'allreduce'
    cc = subprocess.run(['cc', '-std=c99', '-Wall', '-Werror', str(REPO / 'docs/examples/allreduce.c'),
                         *flags, '-o', str(exe)], capture_output=True, text=True)
    assert cc.returncode == 0, cc.stderr
    tb = make_testbed(ranks=2)
    runs = tb.run(['env', f'LD_LIBRARY_PATH={libdir}', str(exe), '{config}', '{rank}'], timeout=60)
    for run in runs:
        assert run.rc == 0, run.stdout + run.stderr
        # v[i] = rank + i/4 summed over ranks 0 and 1: v[0] = 1, v[999] = 1 + 2 * 249.75
        assert f'rank {run.rank}: v[0] = 1, v[999] = 500.5' in run.stdout, run.stdout
    stop(tb)


def test_a_wrong_mac_or_rank_is_refused_before_sending(make_testbed):
    """The rank checks its registration against this host before it sends anything."""
    su.require_binaries(RANK)
    tb = make_testbed(ranks=2)
    cfg = Path(tb.ranks[0].config)
    bad = tb.dir / 'bad.yaml'
    bad.write_text(cfg.read_text().replace(tb.ranks[0].mac, '02:00:00:00:99:99'))
    runs = tb.run([str(RANK), '--config', str(bad), '--rank', '{rank}', '--count', '10'], timeout=30, ranks=[0])
    assert runs[0].rc == 2 and 'is registered with MAC 02:00:00:00:99:99' in runs[0].stderr, runs[0].stderr
    assert 'put this host\'s MAC in the member\'s entry' in runs[0].stderr
    runs = tb.run([str(RANK), '--config', '{config}', '--rank', '5', '--count', '10'], timeout=30, ranks=[0])
    assert runs[0].rc == 2 and 'rank 5 is not a member of job 7' in runs[0].stderr, runs[0].stderr
    s = stop(tb)['switch']
    assert s.shard_total('packets') == 0


def run_async(tb, command, ranks, timeout):
    """tb.run in a thread: (thread, box) where box[0] gets the runs."""
    box = []
    t = threading.Thread(target=lambda: box.append(tb.run(command, timeout=timeout, ranks=ranks)))
    t.start()
    return t, box


LONG = [str(RANK), '--config', '{config}', '--rank', '{rank}', '--size', '1MiB', '--repeat', '100000',
        '--timeout-ms', '10000']


def test_a_rank_killed_mid_op_fails_the_others_clearly_and_the_job_restarts(make_testbed):
    """Rank 3 is killed while the job runs allreduce after allreduce: the switch abandons the
    op after op_timeout_ms (3000 ms) and the other ranks fail with OP_ABANDONED naming rank 3,
    well within their own 10 s timeout; the switch frees the op's slots. The job then starts
    again, op numbers from a new session, and runs exactly."""
    su.require_binaries(RANK)
    tb = make_testbed(ranks=4)
    survivors, box = run_async(tb, LONG, [0, 1, 2], timeout=60)
    killed = tb.run(LONG, ranks=[3], timeout=2.5)  # SIGTERM at 2.5 s, mid-op
    survivors.join()
    assert killed[0].timed_out, killed[0].stdout + killed[0].stderr
    for r in box[0]:
        assert not r.timed_out and r.rc == 1, f'rank {r.rank}: exit {r.rc}\n{r.stdout}{r.stderr}'
        assert 'the switch abandoned the op' in r.stderr and 'missing rank 3' in r.stderr, r.stderr
        assert r.seconds < 2.5 + 3 + 8, r.seconds  # the switch's op_timeout, not the rank's own timeout
    after = tb.telemetry(tb.switches[0], ['/prism/jobs'])['/prism/jobs']
    assert after['job7_chunks_timed_out'] > 0 and after['job7_chunks_in_flight'] == 0, after
    # The whole job again: a new session, exact results.
    lines = ok_lines(run_ranks(tb, '100000', 'fp32', 'kulisch', 'fp32', '--check', '--repeat', '3'))
    assert all(ln['check_differ'] == 0 for ln in lines)
    assert len({ln['digest'] for ln in lines}) == 1
    stop(tb)


def test_a_switch_restart_mid_op_recovers_or_fails_clearly(make_testbed):
    """The switch is killed (kill -9: a graceful stop would refuse the next op instead,
    test_operations.py) while the ranks run allreduce after allreduce (checked against the
    reference model each time) and started again 0.5 s later: every rank either finishes with
    exact results or fails with an error that says what happened; none hangs past its timeout,
    none reports a wrong result."""
    su.require_binaries(RANK)
    tb = make_testbed(ranks=3)
    cmd = [str(RANK), '--config', '{config}', '--rank', '{rank}', '--size', '256KiB', '--repeat', '2000',
           '--check', '--timeout-ms', '6000']
    ranks, box = run_async(tb, cmd, None, timeout=180)
    # Once the job is well under way (chunks completing), stop the switch under it.
    end = time.monotonic() + 30
    while time.monotonic() < end:
        jobs = tb.telemetry(tb.switches[0], ['/prism/jobs']).get('/prism/jobs') or {}
        if jobs.get('job7_chunks_completed', 0) > 2000:
            break
        time.sleep(0.1)
    assert ranks.is_alive(), 'the ranks finished before the switch was stopped: make the run longer'
    tb.kill_switch('switch')
    time.sleep(0.5)
    tb.start_switch('switch')
    ranks.join()
    for r in box[0]:
        assert not r.timed_out, f'rank {r.rank} hung: {r.stderr}'
        assert 'check failed' not in r.stderr, r.stderr
        if r.rc != 0:
            assert r.rc == 1 and ('abandoned' in r.stderr or 'no RESULT for' in r.stderr), r.stderr
        else:
            assert 'identical to the reference model (2000 collectives)' in r.stdout, r.stdout
    # The restart fell in the middle: the first switch had completed 2000 chunks (above), the
    # second reduced part of the run too.
    assert stop(tb)['switch'].jobs[7]['completed'] > 0


def test_a_rank_of_one_job_killed_the_switch_keeps_serving_another(make_testbed):
    """Two jobs over the same four ranks (testbed jobs=2: job 7 at UDP port 20562, job 8 at 20563).
    Job 8 runs a long series of checked allreduces while job 7 runs too and its rank 3 is killed
    mid-op: job 7's ranks 0-2 fail with OP_ABANDONED naming rank 3 (after the switch's
    op_timeout_ms), the switch frees job 7's timed-out chunks, and job 8 goes on throughout,
    completing every chunk it opened, exactly on every rank."""
    import re
    su.require_binaries(RANK)
    tb = make_testbed(ranks=4, jobs=2)
    assert [j for j, _ in tb.jobs] == [7, 8]
    job8 = [str(RANK), '--config', '{config}', '--job', '8', '--rank', '{rank}', '--size', '256KiB', '--check',
            '--timeout-ms', '10000']
    job7 = [str(RANK), '--config', '{config}', '--job', '7', '--rank', '{rank}', '--size', '256KiB', '--repeat',
            '100000', '--timeout-ms', '10000']
    chunks_per_op = -(-256 * 1024 // 4 // 288)    # 228 fp32 chunks of 288 elements (MTU 1500)

    def jobs() -> dict:
        return tb.telemetry(tb.switches[0], ['/prism/jobs'])['/prism/jobs']

    def check_lines(runs, n: int) -> list[str]:
        for r in runs:
            assert r.rc == 0 and not r.timed_out, f'job 8 rank {r.rank}: exit {r.rc}\n{r.stdout}{r.stderr}'
            assert f'check: identical to the reference model ({n} collectives)' in r.stdout, r.stdout
            assert f'chunks {n * chunks_per_op} ' in r.stdout and 'nacks 0 ' in r.stdout, r.stdout
        return [r.stdout for r in runs]

    # How fast job 8 runs here and now, alone: its run must outlast job 7's failure (some 6.5 s after
    # job 8 starts): planned for 9 s alone, it takes 10-20 s beside job 7 on 2 vCPUs.
    calib = 200
    check_lines(tb.run(job8 + ['--repeat', str(calib)], timeout=60, label='job8'), calib)
    medians = [float(m) for r in (tb.dir / f'rank{k}-job8.out' for k in range(4))
               for m in re.findall(r'median ([0-9.e-]+) s', r.read_text())]
    assert len(medians) == 4, medians
    n = int(min(20000, max(2000, 9.0 / max(medians))))
    runs8, box8 = run_async_labelled(tb, job8 + ['--repeat', str(n)], None, 90, 'job8')
    assert su.wait_for(lambda: jobs()['job8_chunks_completed'] > calib * chunks_per_op + 20 * chunks_per_op, 30)

    # Job 7 on the same ranks; its rank 3 killed (SIGTERM) 2.5 s in, mid-op.
    survivors, box7 = run_async_labelled(tb, job7, [0, 1, 2], 60, 'job7')
    killed = tb.run(job7, ranks=[3], timeout=2.5, label='job7')
    survivors.join()
    mid = jobs()
    assert killed[0].timed_out, killed[0].stdout + killed[0].stderr
    for r in box7[0]:
        assert not r.timed_out and r.rc == 1, f'job 7 rank {r.rank}: exit {r.rc}\n{r.stdout}{r.stderr}'
        assert 'the switch abandoned the op' in r.stderr and 'missing rank 3' in r.stderr, r.stderr
        assert r.seconds < 2.5 + 3 + 8, r.seconds    # the switch's op_timeout, not the rank's own timeout
    assert mid['job7_chunks_timed_out'] > 0 and mid['job7_chunks_in_flight'] == 0, mid
    assert runs8.is_alive(), f'job 8 ({n} allreduces) finished before job 7 failed: make its run longer ({mid})'

    # Job 8 went on: it completes, exactly, on every rank, and the switch completed more of its
    # chunks after it had abandoned job 7's.
    runs8.join()
    check_lines(box8[0], n)
    after = jobs()
    assert after['job8_chunks_completed'] > mid['job8_chunks_completed'], (mid, after)
    total8 = (calib + n) * chunks_per_op
    assert after['job8_chunks_opened'] == after['job8_chunks_completed'] == total8, after
    assert after['job8_chunks_in_flight'] == 0 and after['job8_chunks_timed_out'] == 0, after
    assert after['job7_chunks_in_flight'] == 0, after
    assert after['job7_chunks_timed_out'] == mid['job7_chunks_timed_out'] > 0, (mid, after)
    assert after['job7_chunks_opened'] == after['job7_chunks_completed'] + after['job7_chunks_timed_out'], after
    s = stop(tb)['switch']
    assert s.jobs[8]['completed'] == s.jobs[8]['opened'] == total8 and s.jobs[8]['timed_out'] == 0, s.jobs
    assert s.jobs[7]['in_flight'] == 0 and s.jobs[7]['timed_out'] > 0 and 8 not in s.abandoned, s.jobs


def run_async_labelled(tb, command, ranks, timeout, label):
    """tb.run in a thread with its outputs under `label` (two jobs run on the same ranks at once)."""
    box = []
    t = threading.Thread(target=lambda: box.append(tb.run(command, timeout=timeout, ranks=ranks, label=label)))
    t.start()
    return t, box


def test_retention_does_not_cap_throughput(make_testbed):
    """Back-to-back 4 MiB allreduces through a switch with only 512 slots and results retained
    for 5 s: a completed chunk frees its slot at once (its RESULT goes to the result log), so
    ten thousand chunks a few seconds apart find slots: no NO_FREE_SLOT, no retries."""
    su.require_binaries(RANK)
    tb = make_testbed(ranks=2, settings={'reducers': '{slots: 512}', 'retention_ms': '5000'})
    lines = ok_lines(run_ranks(tb, str(1 << 20), 'fp32', 'kulisch', 'fp32', '--repeat', '3', '--check'))
    for ln in lines:
        assert ln['nacks'] == 0 and ln['no_slot_retries'] == 0, ln
        assert ln['check_differ'] == 0, ln
    s = stop(tb)['switch']
    chunks = lines[0]['chunks']
    assert chunks == 3 * (((1 << 20) + 287) // 288) and chunks > 512 * 20
    assert s.jobs[7]['completed'] == chunks and s.jobs[7]['slot_refusals'] == 0, str(s.jobs)
    assert s.shard_total('slots_high') <= 512
