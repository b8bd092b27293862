"""An independent minimal client (minimal_client.py, written from
docs/PROTOCOL.md alone) against the real prism-switch, through the
network-namespace testbed (scripts/testbed.py): each rank a process in its own
namespace with a kernel UDP socket, joined to the switch's net_af_packet ports
by veth pairs, resolving the switch by ARP.

Every rank's result must equal, bit for bit, the exact sum of the ranks'
inputs rounded once (KULISCH_FIXED), computed here by the reference model
(prism_ref.py) and, for fp32, cross-checked against a sum of Fractions rounded
to fp32 by hand. Then the same under 5% loss in both directions, under
duplication and under reordering (shown to happen by captures), on one Linux
bridge, and across a leaf and a root switch; the switch's summary must show
every element-contribution reduced exactly once. Sessions too: the clients join
the job's session (JOIN, JOINED, from PROTOCOL.md alone) and number their ops
from its first op number, run after run against one switch; a rank that never
joins is named. Steering too: with S reducer shards every packet goes to its
shard's port (checked on captures by steering_check.py), and a client that
ignores it is served all the same. Needs root; skips without it.
"""
from __future__ import annotations

import hashlib
import json
import subprocess
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import prism_ref as ref
import steering_check as sc
import switch_util as su
from minimal_client import make_input
from testbed import PY, Capture, make_testbed, read_pcap, left_behind, skip_unless_possible, running_testbed  # noqa: F401

CLIENT = str(Path(__file__).resolve().parent / 'minimal_client.py')
SEED = 17
# (elements, dtype, out_dtype): one chunk, then many (70, 105 and 15 chunks at MTU 1500)
ONE_CHUNK = (100, 'fp32', 'fp32')
MANY = [(20000, 'fp32', 'fp32'), (30000, 'fp16', 'fp32'), (7000, 'fp16', 'fp16')]


# ------------------------------------------------------------------ expected results
def fp32_bits(x: Fraction) -> int:
    """x rounded once to binary32, round to nearest even (x is a finite sum of fp32 values)."""
    if x == 0:
        return 0
    sign, a = int(x < 0), abs(x)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    e = max(e, -126)
    m = round(a / Fraction(2) ** (e - 23))    # Fraction rounds half to even
    if m == 1 << 24:
        m, e = 1 << 23, e + 1
    if e > 127:
        return sign << 31 | 0x7F800000
    bits = m if m < 1 << 23 else (e + 127) << 23 | (m - (1 << 23))
    return sign << 31 | bits


def expected(n: int, dtype: str, out_dtype: str, R: int, seed: int = SEED) -> str:
    """sha256 of the reference model's KULISCH_FIXED result over the ranks' inputs."""
    ins = [make_input(seed, r, n, dtype).tobytes() for r in range(R)]
    out, flags = ref.reduce(dtype, 'kulisch', out_dtype, 'ieee', ins)
    assert flags == {'overflow': 0, 'invalid': 0, 'nan_input': 0}, flags
    if dtype == 'fp32' and out_dtype == 'fp32' and n <= 1000:   # a second, separate computation
        cols = [make_input(seed, r, n, dtype) for r in range(R)]
        exact = [sum((Fraction(float(c[i])) for c in cols), Fraction(0)) for i in range(n)]
        assert np.frombuffer(out, '<u4').tolist() == [fp32_bits(x) for x in exact]
    return hashlib.sha256(out).hexdigest()


def test_the_fraction_rounding_is_right():
    """fp32_bits against numpy where one rounding from float64 is exact (values of fp32 + a
    small part that is a tie or not), and at the edges."""
    f = np.float32
    assert fp32_bits(Fraction(1) + Fraction(1, 1 << 24)) == 0x3F800000          # tie -> even
    assert fp32_bits(Fraction(1) + Fraction(3, 1 << 24)) == 0x3F800002          # tie -> even (up)
    assert fp32_bits(Fraction(1) + Fraction(1, 1 << 24) + Fraction(1, 1 << 60)) == 0x3F800001
    assert fp32_bits(Fraction(1, 1 << 149)) == 1                                # smallest subnormal
    assert fp32_bits(Fraction(1, 1 << 150)) == 0                                # tie -> even (zero)
    assert fp32_bits(-Fraction(3, 1 << 150)) == 0x80000002
    assert fp32_bits(Fraction(2) ** 128) == 0x7F800000
    rng = np.random.default_rng(5)
    for x in rng.standard_normal(200) * np.exp2(rng.integers(-140, 120, 200)):
        assert fp32_bits(Fraction(float(x))) == int(np.array([x]).astype(f).view('<u4')[0])


# ------------------------------------------------------------------ running clients
def run_clients(tb, n: int, dtype: str, out_dtype: str, op: int, *extra) -> list[dict]:
    runs = tb.run([PY, CLIENT, '--config', '{config}', '--rank', '{rank}', '--elements', str(n),
                   '--dtype', dtype, '--out-dtype', out_dtype, '--op', str(op), '--seed', str(SEED),
                   '--deadline', '40', *map(str, extra)], timeout=60)
    bad = [r for r in runs if r.rc != 0]
    assert not bad, '\n'.join(f'rank {r.rank}: exit {r.rc}\n{r.stdout}{r.stderr}' for r in bad)
    lines = [json.loads(r.stdout.strip().splitlines()[-1]) for r in runs]
    for ln in lines:
        assert ln['op'] == op and ln['elements'] == n and ln['results'] == ln['chunks'], ln
    return lines


def allreduces(tb, cases, op0: int = 0) -> tuple[list[dict], int, int]:
    """Runs each case as one op on every rank and checks every digest; returns the clients'
    lines, the elements and the chunks of all ops."""
    R = tb.R
    lines, elements, chunks = [], 0, 0
    for i, (n, dt, odt) in enumerate(cases):
        got = run_clients(tb, n, dt, odt, op0 + i)
        want = expected(n, dt, odt, R)
        digests = {ln['rank']: ln['digest'] for ln in got}
        assert sorted(digests) == list(range(R)), digests
        assert set(digests.values()) == {want}, (f'op {op0 + i}: {n} {dt}->{odt}, R={R}: expected {want}, '
                                                 f'got {digests}')
        lines += got
        elements += n
        chunks += got[0]['chunks']
    return lines, elements, chunks


def stop(tb) -> dict:
    """Stops the switches; returns their parsed summaries (and checks they exited cleanly)."""
    exits = tb.stop_switches()
    out = {}
    for name, e in exits.items():
        assert e.rc == 0, f'{name}: exit {e.rc}\n{e.stdout}\n{e.stderr[-3000:]}'
        out[name] = su.parse_summary(e.stdout)
    return out


def check_once(s: su.Summary, R: int, elements: int, chunks: int, job: int = 7, text: str = ''):
    """Every element of every rank reduced exactly once, every chunk completed once, none left;
    every CONTRIB beyond the first of each (rank, chunk) dropped as a duplicate (or late) or
    answered with the retained RESULT, never added."""
    assert s.shard_total('elements') == R * elements, text
    extra = s.shard_total('contribs') - R * chunks
    assert extra == s.shard_dropped['duplicate'] + s.shard_dropped['late'] + s.shard_total('resent'), \
        (text, s.shard_total('contribs'), R * chunks, s.shard_dropped, s.shard_total('resent'))
    assert s.jobs[job]['completed'] == chunks and s.jobs[job]['opened'] == chunks, text
    assert s.jobs[job]['in_flight'] == 0 and not s.incomplete, text
    assert s.shard_total('nacks_sent') == 0 and s.nacks == 0, text


# ------------------------------------------------------------------ captures
def ip_ids(pcap: Path, kind: int) -> list[int]:
    """IPv4 ids of the PRISM frames of `kind` in a capture, in capture order."""
    ids = []
    for fr in read_pcap(pcap):
        if len(fr) < 14 + 20 + 8 + 32 or fr[12:14] != b'\x08\x00' or fr[23] != 17:
            continue
        ihl = (fr[14] & 15) * 4
        body = fr[14 + ihl + 8:]
        if body[:2] == b'PR' and body[3] == kind:
            ids.append(int.from_bytes(fr[18:20], 'big'))
    return ids


def inversions(ids: list[int]) -> int:
    """Frames that arrived after one sent later (ids count up by one per frame sent, mod 2^16)."""
    return sum(1 for a, b in zip(ids, ids[1:]) if (b - a) & 0xFFFF > 0x8000)


# ------------------------------------------------------------------ tests
@pytest.mark.parametrize('R', [2, 4, 8])
def test_every_rank_gets_the_exact_sum(make_testbed, R):
    tb = make_testbed(ranks=R)
    if R == 2:   # no neighbour entry left from the testbed's own check: resolved by ARP again
        for r in tb.ranks:
            subprocess.run(['ip', 'netns', 'exec', r.ns, 'ip', 'neigh', 'flush', 'dev', 'prism0'], check=True)
    lines, elements, chunks = allreduces(tb, [ONE_CHUNK] + MANY)
    s = stop(tb)['switch']
    check_once(s, R, elements, chunks, text=tb.dir.name)
    for p, rx in s.rx.items():
        assert rx['arp_replies'] >= (2 if R == 2 else 1), (p, rx)     # each rank resolved its port
        assert rx['partial_checksums'] > 0, (p, rx)                    # kernel sockets, default offloads
    assert not s.refused, s.refused


@pytest.mark.parametrize('R,impairment', [(4, 'loss'), (8, 'loss'), (4, 'dup'), (4, 'reorder')])
def test_impaired_links_change_nothing(make_testbed, tmp_path, R, impairment):
    kw = {'loss': {'loss': 5}, 'dup': {'dup': 10}, 'reorder': {'reorder': 25}}[impairment]
    # A rank the 2-vCPU machine starves for a while must not see its op abandoned: the client's
    # doubling timeouts (200 ms to 1.6 s) after a few losses in a row already take 3 s, the
    # switch's default op_timeout_ms. What is tested is exactness under impairment, not timing.
    tb = make_testbed(ranks=R, settings={'retention_ms': '5000', 'op_timeout_ms': '15000'}, **kw)
    caps = []
    if impairment == 'reorder':   # rank 0's frames as the switch side receives them, and as rank 0 does
        r0 = tb.ranks[0]
        caps = [Capture(r0.switch_if, tmp_path / 'to_switch.pcap', ns=r0.switch_ns, direction='in'),
                Capture('prism0', tmp_path / 'from_switch.pcap', ns=r0.ns, direction='in')]
    try:
        cases = [(50000, 'fp32', 'fp32'), (30000, 'fp16', 'fp32')] if impairment == 'reorder' else MANY[:2]
        lines, elements, chunks = allreduces(tb, cases)
    finally:
        for c in caps:
            c.stop()
    s = stop(tb)['switch']
    check_once(s, R, elements, chunks, text=f'{impairment}, R={R}')
    retransmits = sum(ln['retransmits'] for ln in lines)
    if impairment == 'loss':
        assert retransmits > 0, lines
        assert s.shard_total('resent') > 0     # RESULTs lost on the way to a rank, sent again
    if impairment == 'dup':
        assert s.shard_dropped['duplicate'] > 0, s.shard_dropped
        assert sum(ln['duplicates'] for ln in lines) > 0, lines
    if impairment == 'reorder':
        to_sw = ip_ids(tmp_path / 'to_switch.pcap', su.CONTRIB)
        from_sw = ip_ids(tmp_path / 'from_switch.pcap', su.RESULT)
        assert len(to_sw) >= chunks and len(from_sw) >= chunks, (len(to_sw), len(from_sw), chunks)
        assert inversions(to_sw) > 0, f'no CONTRIB overtook another: {to_sw[:60]}'
        assert inversions(from_sw) > 0, f'no RESULT overtook another: {from_sw[:60]}'


@pytest.mark.parametrize('impaired', [False, True])
def test_ranks_on_one_bridge(make_testbed, impaired):
    kw = {'loss': 5, 'dup': 5, 'reorder': 25} if impaired else {}
    tb = make_testbed(ranks=4, layout='bridge', **kw)
    lines, elements, chunks = allreduces(tb, [ONE_CHUNK] + MANY[:2])
    s = stop(tb)['switch']
    assert list(s.rx) == [0], s.rx       # one switch port for every rank
    check_once(s, 4, elements, chunks, text=f'bridge impaired={impaired}')
    if impaired:
        assert sum(ln['retransmits'] for ln in lines) > 0
        assert s.shard_dropped['duplicate'] > 0, s.shard_dropped
    else:
        assert not s.shard_dropped and not s.rx_dropped, (s.shard_dropped, s.rx_dropped)


@pytest.mark.parametrize('impaired', [False, True])
def test_a_leaf_and_a_root(make_testbed, impaired):
    """Ranks 0-1 behind a leaf, 2-3 behind the root: the same exact result as one switch."""
    kw = {'loss': 5, 'dup': 5, 'reorder': 25} if impaired else {}
    tb = make_testbed(ranks=4, layout='tree', **kw)
    lines, elements, chunks = allreduces(tb, [ONE_CHUNK] + MANY[:2])
    s = stop(tb)
    leaf, root = s['leaf'], s['root']
    # the leaf reduces its two ranks; the root its two and the leaf's partials (two terms each)
    assert leaf.shard_total('elements') == 2 * elements and root.shard_total('elements') == 4 * elements
    assert root.jobs[7]['completed'] == chunks and leaf.jobs[7]['completed'] == chunks
    assert root.shard_total('partials') >= chunks      # the leaf's partials (Kulisch fragments)
    assert leaf.shard_total('parent_results') >= chunks
    for x in (leaf, root):
        assert not x.incomplete and x.nacks == 0


def test_a_missing_rank_is_a_clear_error(make_testbed):
    """Rank 2 of 3 never sends: the switch abandons the chunks after op_timeout_ms and the two
    others stop with NACK OP_ABANDONED naming rank 2 (exit status 3), not with a silent hang."""
    tb = make_testbed(ranks=3, settings={'op_timeout_ms': '500'})
    runs = tb.run([PY, CLIENT, '--config', '{config}', '--rank', '{rank}', '--elements', '1000', '--deadline', '20'],
                  ranks=[0, 1], timeout=60)
    for r in runs:
        assert r.rc == 3, (r.rc, r.stdout, r.stderr)
        line = json.loads(r.stdout.strip().splitlines()[-1])
        assert 'NACK OP_ABANDONED' in line['error'] and line['missing_ranks'] == [2], line
        assert 'OP_ABANDONED' in r.stderr and 'missing ranks here: [2]' in r.stderr, r.stderr
    s = stop(tb)['switch']
    assert s.jobs[7]['timed_out'] >= 1 and s.nacks >= 2, s.jobs


def test_a_testbed_leaves_nothing_behind(tmp_path):
    """Torn down after an exception inside it: no namespace, link, nft table, switch process or
    DPDK runtime directory remains."""
    skip_unless_possible()
    with pytest.raises(RuntimeError, match='on purpose'):
        with running_testbed(tmp_path / 'a', ranks=2, layout='tree', bridge=True, loss=1, dup=1, reorder=10) as tb:
            assert left_behind(tb), 'the testbed is not up'
            raise RuntimeError('on purpose')
    assert left_behind(tb) == []


@pytest.mark.parametrize('sig', ['TERM', 'INT'])
def test_the_command_line_cleans_up_on_a_signal(tmp_path, sig):
    """scripts/testbed.sh stopped by SIGTERM or SIGINT (Ctrl-C) while its ranks run: exit 130,
    and everything it made is gone."""
    skip_unless_possible()
    tb_id = f's{sig[0].lower()}{__import__("os").getpid() % 1000}'
    cmd = [str(su.REPO / 'scripts/testbed.sh'), '--ranks', '2', '--reorder', '--dup', '1', '--id', tb_id,
           '--build', str(su.BUILD), '--dir', str(tmp_path / 'tb'), '--', 'sleep', '60']
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert su.wait_for(lambda: (tmp_path / 'tb' / 'rank1.out').exists() or p.poll() is not None, 30)
        assert p.poll() is None, p.communicate()
        time.sleep(0.3)
        p.send_signal(getattr(__import__('signal'), 'SIG' + sig))
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, (p.returncode, out, err)
    assert 'tearing down' in err, err
    ns = subprocess.run(['ip', 'netns', 'list'], capture_output=True, text=True).stdout
    assert f'prism-tb{tb_id}-' not in ns, ns
    assert not (Path('/var/run/dpdk') / f'prism-tb{tb_id}-switch').exists()


def test_the_command_line_refuses_clearly(tmp_path):
    skip_unless_possible()
    sh = str(su.REPO / 'scripts/testbed.sh')
    r = subprocess.run([sh, '--help'], capture_output=True, text=True)
    assert r.returncode == 0 and '--loss PCT' in r.stdout and '--tree' in r.stdout and 'down' in r.stdout
    r = subprocess.run([sh, '--build', str(tmp_path), '--', 'true'], capture_output=True, text=True)
    assert r.returncode == 2 and 'prism-switch not found' in r.stderr, r.stderr
    r = subprocess.run(['setpriv', '--reuid=65534', '--regid=65534', '--clear-groups', sh, '--', 'true'],
                       capture_output=True, text=True)
    assert r.returncode == 2 and 'needs root' in r.stderr, r.stderr
    r = subprocess.run([sh, '--loss', '150', '--', 'true'], capture_output=True, text=True)
    assert r.returncode == 2 and '--loss 150' in r.stderr, r.stderr


# ------------------------------------------------------------------ sessions (JOIN, JOINED)
SESSION_N = 3000    # fp32: 11 chunks an op


def joined_lines(runs, ops: int) -> list[dict]:
    bad = [r for r in runs if r.rc != 0]
    assert not bad, '\n'.join(f'rank {r.rank}: exit {r.rc}\n{r.stdout}{r.stderr}' for r in bad)
    lines = [json.loads(r.stdout.strip().splitlines()[-1]) for r in runs]
    for ln in lines:
        assert ln['ops'] == ops and len(ln['digests']) == ops and ln['results'] == ops * ln['chunks'], ln
        assert ln['join_sends'] >= 1 and ln['joined_received'] >= 1, ln
    return lines


FIRST_OP_SPREAD = 2 ** 24    # PROTOCOL.md, Sessions: first op = base + r, r random in [0, 2^24)


def check_session_run(lines: list[dict], R: int, ops: int, seed: int, base: int) -> int:
    """Every rank joined the same session, whose first op number lies in [base, base + 2^24) (base:
    one past the highest op the switch opened, 0 if none), numbered its ops from it, and got the
    exact sum of each op. Returns the first op number."""
    assert sorted(ln['rank'] for ln in lines) == list(range(R))
    firsts = {ln['first_op'] for ln in lines}
    assert len(firsts) == 1, [(ln['rank'], ln['first_op']) for ln in lines]
    first_op = firsts.pop()
    assert (first_op - base) % 2 ** 32 < FIRST_OP_SPREAD, (first_op, base)
    for ln in lines:
        assert (ln['op'], ln['last_op']) == (first_op, first_op + ops - 1), ln
        assert ln['joined_ranks'] == list(range(R)) and ln['joined_count'] == R, ln
    for k in range(ops):
        want = expected(SESSION_N, 'fp32', 'fp32', R, seed + k)
        got = {ln['rank']: ln['digests'][k] for ln in lines}
        assert set(got.values()) == {want}, f'op {first_op + k}: expected {want}, got {got}'
    return first_op


def test_clients_join_a_session_and_a_rerun_starts_past_it(make_testbed):
    """PROTOCOL.md's sessions, used by a client written from the document alone. A client that never
    joins numbers its ops as it likes (op 41 here); then 4 clients join (a random nonce each) and
    get the session's first op number F, one past the highest op the switch opened (42) plus a
    random offset below 2^24, the same for all 4, and run three allreduces as ops F..F+2, exact. The
    same clients run again (new processes, new nonces, rank 3 a second late): a new session, whose
    first op lies in [F + 3, F + 3 + 2^24), past the previous run's ops; the ranks that came first
    re-sent their JOIN until rank 3's made the session COMPLETE. Exact again."""
    tb = make_testbed(ranks=4)
    R, ops = 4, 3
    allreduces(tb, [(SESSION_N, 'fp32', 'fp32')], op0=41)     # no session: op 41 as the client likes
    base = [PY, CLIENT, '--config', '{config}', '--rank', '{rank}', '--elements', str(SESSION_N),
            '--join', '--ops', str(ops), '--deadline', '30', '--join-timeout', '30']
    first = joined_lines(tb.run(base + ['--seed', '100'], timeout=60), ops)
    f = check_session_run(first, R, ops, 100, base=42)
    # Run again: new processes, rank 3 one second after the others.
    late = ['sh', '-c', 'if [ {rank} = 3 ]; then sleep 1; fi; exec "$0" "$@"'] + base + ['--seed', '200']
    again = joined_lines(tb.run(late, timeout=60), ops)
    check_session_run(again, R, ops, 200, base=f + ops)
    nonces = [ln['nonce'] for ln in first + again]
    assert len(set(nonces)) == len(nonces) and 0 not in nonces, nonces
    for ln in again:
        if ln['rank'] != 3:    # they waited for rank 3, sending their JOIN again
            assert ln['join_seconds'] >= 0.7 and ln['join_sends'] >= 3, ln
    s = stop(tb)['switch']
    chunks = first[0]['chunks'] * (1 + 2 * ops)
    check_once(s, R, SESSION_N * (1 + 2 * ops), chunks, text=str(s.jobs))
    # every JOIN the clients sent reached the switch (no loss here), and no op was refused
    assert s.shard_total('session_packets') == sum(ln['join_sends'] for ln in first + again), s.shards


@pytest.mark.parametrize('S,ignore', [(1, False), (2, False), (3, False), (3, True)],
                         ids=['S1', 'S2', 'S3', 'S3-ignored'])
def test_clients_steer_each_packet_to_its_shards_port(make_testbed, tmp_path, S, ignore):
    """PROTOCOL.md, Steering, followed by the client written from it: with the switch's
    reducers.shards S, every CONTRIB (and RETRANSMIT) and JOIN the clients send, captured on their
    links, goes to udp_port + (job + op + chunk) mod S (a JOIN: job mod S), computed here from each
    captured header; every reply comes from udp_port. A client that ignores steering (--shards 1,
    everything to udp_port) is served all the same. Exact results either way."""
    tb = make_testbed(ranks=3, settings={'reducers': f'{{shards: {S}}}'})
    R, ops = 3, 2
    caps = [Capture('prism0', tmp_path / f'r{r.rank}.pcap', ns=r.ns) for r in tb.ranks]
    try:
        lines = joined_lines(tb.run([PY, CLIENT, '--config', '{config}', '--rank', '{rank}', '--elements',
                                     str(SESSION_N), '--join', '--ops', str(ops), '--seed', '300', '--deadline', '30',
                                     *(['--shards', '1'] if ignore else [])], timeout=60), ops)
    finally:
        for c in caps:
            c.stop()
    check_session_run(lines, R, ops, 300, base=0)
    assert {ln['shards'] for ln in lines} == {1 if ignore else S}, lines
    s = stop(tb)['switch']
    check_once(s, R, SESSION_N * ops, lines[0]['chunks'] * ops, text=str(s.jobs))
    frames = [f for c in caps for f in read_pcap(c.out)]
    st = sc.check_steering(frames, {r.switch_ip for r in tb.ranks}, su.UDP_PORT, 1 if ignore else S)
    assert not st.wrong, '\n'.join(st.wrong[:20])
    assert len(st.keys) == ops * lines[0]['chunks'] and st.sent[sc.JOIN] >= R, (st.keys, st.sent)
    assert st.shards_used == set(range(1 if ignore else S)), st.shards_used
    assert st.replies[sc.RESULT] >= R * len(st.keys) and st.replies[sc.JOINED] >= R, st.replies
    if ignore and S > 1:   # by the rule most packets belonged on other ports
        assert sc.check_steering(frames, {r.switch_ip for r in tb.ranks}, su.UDP_PORT, S).wrong


def test_a_rank_that_never_joins_is_named(make_testbed):
    """Ranks 0-2 of 4 join, rank 3 never does: the session never completes, no op starts (joining is
    the job's first step), and each of the three gives up after its --join-timeout with an error
    that names rank 3, from the JOINED bitmap of the ranks that had joined (exit status 4)."""
    tb = make_testbed(ranks=4)
    runs = tb.run([PY, CLIENT, '--config', '{config}', '--rank', '{rank}', '--elements', str(SESSION_N),
                   '--join', '--join-timeout', '3'], ranks=[0, 1, 2], timeout=30)
    for r in runs:
        assert r.rc == 4, (r.rc, r.stdout, r.stderr)
        line = json.loads(r.stdout.strip().splitlines()[-1])
        assert line['missing_ranks'] == [3] and line['joined_ranks'] == [0, 1, 2], line
        assert line['joined_count'] == 3 and line['first_op'] is None, line
        assert 'timeout joining job 7\'s session after 3.0 s: 3 of 4 ranks joined; not joined: rank 3' \
            in line['error'], line['error']
        assert 'not joined: rank 3' in r.stderr, r.stderr
        assert 3 <= r.seconds < 10, r.seconds
    s = stop(tb)['switch']
    assert s.jobs.get(7, {}).get('opened', 0) == 0, s.jobs
    assert s.shard_total('session_packets') >= 3 and s.nacks == 0
