"""End-to-end tests of prism-switch through the real binary under DPDK.

Traffic and golden results come from ``prism-gen write``; each switch port is a
``net_pcap`` device replaying the capture prism-gen wrote for it; what the
switch sends is decoded with ``prism-gen dump`` and compared bit for bit with
the golden ``op<N>.out`` / ``op<N>.flags`` (docs/PROTOCOL.md, docs/CONFIG.md).
The results are also checked against tests/py/prism_ref.py, the independent
Python reference, on the rank inputs prism-gen wrote.

Every switch process runs with its own --file-prefix, --no-huge, one lcore
(``-l 0``) unless a test needs more.  helpers: switch_util.py.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import struct
import subprocess
import time
from collections import Counter

import numpy as np
import pytest

import prism_ref as ref
import switch_util as su
from switch_util import (DTYPES, NACK, NACK_REASONS, RESULT, RETRANSMIT, Scenario, check_results,
                         member_ip, member_mac)


@pytest.fixture(autouse=True)
def _binaries():
    su.require_binaries()


# ============================================================ reference check
def ref_check(man: dict, assembled: dict):
    """The switch's results (as one rank assembled them) against prism_ref on
    the rank inputs: kulisch and integer ops over all ranks at once,
    fp32_binomial in rank order, fp32_arrival per chunk in the manifest's
    arrival order.  Values and per-element flags."""
    dtype, policy, out, exc = man['dtype'], man['policy'], man['out_dtype'], man['exceptions']
    osz = DTYPES[out][1]
    for o in man['ops']:
        op = o['op']
        ins = su.rank_inputs(man, op)
        mat = ref.matrix_from_arrays(dtype, ins)
        _, gflags = su.golden(man, op)
        if policy == 'fp32_arrival' and dtype in ref.FLOAT_FORMATS:
            parts = []
            for c, order in enumerate(o['arrival']):
                first, cnt = su.chunk_span(man, c)
                assert sorted(order) == list(range(man['group'])), f'op {op} chunk {c}: arrival {order}'
                parts.append(ref.reduce_result(dtype, policy, out, exc, mat[order, first:first + cnt]))
            codes = np.concatenate([p.codes for p in parts])
            ovf = np.concatenate([p.overflow for p in parts])
            inv = np.concatenate([p.invalid for p in parts])
            nan = np.concatenate([p.nan_input for p in parts])
        else:
            res = ref.reduce_result(dtype, policy, out, exc, mat)
            codes, ovf, inv, nan = res.codes, res.overflow, res.invalid, res.nan_input
        want = ref.codes_to_bytes(out, codes)
        want_flags = (ovf * su.OVERFLOW | inv * su.INVALID | nan * su.NAN_INPUT).astype(np.uint8).tobytes()
        for rank, got in assembled[op].items():
            got = bytes(got)
            if got != want:
                diff = [i for i in range(man['elements']) if got[i * osz:(i + 1) * osz] != want[i * osz:(i + 1) * osz]]
                i = diff[0]
                raise AssertionError(
                    f'op {op} rank {rank}: switch result differs from prism_ref in {len(diff)} elements; first '
                    f'element {i}: switch {got[i * osz:(i + 1) * osz].hex()} prism_ref '
                    f'{want[i * osz:(i + 1) * osz].hex()} (inputs {[hex(x) for x in mat[:8, i]]})')
            break  # every rank's copy already equals the golden (check_results)
        assert gflags == want_flags, (
            f'op {op}: golden flags differ from prism_ref at elements '
            f'{[i for i in range(len(want_flags)) if gflags[i] != want_flags[i]][:10]}')


# ============================================================ 1. golden replay
# (id, dtype, policy, R, ports, shards, elements, ops, prism-gen options, lcores)
# FP32_ARRIVAL: one port, one shard (its golden is the capture's arrival order).
GOLDEN = [
    ('fp32-kulisch-R4', 'fp32', 'kulisch', 4, 1, 1, 1000, 3, {}, '0'),
    ('fp16-kulisch-R8-specials', 'fp16', 'kulisch', 8, 2, 2, 1000, 2, {'values': 'specials'}, '0'),
    ('bf16-arrival-R3-specials', 'bf16', 'fp32_arrival', 3, 1, 1, 500, 2, {'values': 'specials', 'chunk': 96}, '0'),
    ('e4m3fn-binomial-R8-specials', 'e4m3fn', 'fp32_binomial', 8, 4, 2, 300, 2,
     {'values': 'specials', 'chunk': 128}, '0'),
    ('e4m3fnuz-kulisch-R64-specials', 'e4m3fnuz', 'kulisch', 64, 4, 3, 200, 2,
     {'values': 'specials', 'chunk': 64}, '0'),
    ('e5m2-arrival-R2-specials', 'e5m2', 'fp32_arrival', 2, 1, 1, 257, 3, {'values': 'specials', 'chunk': 64}, '0'),
    ('e5m2fnuz-binomial-R3-specials', 'e5m2fnuz', 'fp32_binomial', 3, 3, 1, 130, 2,
     {'values': 'specials', 'chunk': 50}, '0'),
    ('int8-kulisch-R1', 'int8', 'kulisch', 1, 1, 1, 100, 2, {'chunk': 33}, '0'),
    ('int32-arrival-R8', 'int32', 'fp32_arrival', 8, 1, 1, 300, 2, {'chunk': 100}, '0'),
    ('int8-binomial-R64', 'int8', 'fp32_binomial', 64, 2, 2, 150, 1, {'chunk': 64}, '0'),
    ('fp32-kulisch-R1000', 'fp32', 'kulisch', 1000, 4, 2, 40, 1, {'chunk': 16}, '0'),
    ('fp32-binomial-R64-cancel-2lcores', 'fp32', 'fp32_binomial', 64, 2, 2, 700, 1, {'values': 'cancel'}, '0-1'),
    ('fp32-arrival-R1-specials', 'fp32', 'fp32_arrival', 1, 1, 1, 100, 2, {'values': 'specials', 'chunk': 30}, '0'),
    ('fp32-arrival-R64-full', 'fp32', 'fp32_arrival', 64, 1, 1, 100, 1, {'values': 'full', 'chunk': 40}, '0'),
    ('fp16-kulisch-R8-full-out-fp16-saturate', 'fp16', 'kulisch', 8, 2, 1, 300, 2,
     {'values': 'full', 'out_dtype': 'fp16', 'exceptions': 'saturate', 'chunk': 128}, '0'),
    ('e4m3fn-kulisch-R8-full-out-e4m3fn', 'e4m3fn', 'kulisch', 8, 1, 1, 300, 1,
     {'values': 'full', 'out_dtype': 'e4m3fn', 'chunk': 100}, '0'),
    ('bf16-kulisch-R3-cancel-out-bf16', 'bf16', 'kulisch', 3, 3, 2, 400, 2,
     {'values': 'cancel', 'out_dtype': 'bf16'}, '0'),
    ('e5m2-binomial-R2-out-fp16', 'e5m2', 'fp32_binomial', 2, 2, 1, 300, 1,
     {'values': 'specials', 'out_dtype': 'fp16', 'chunk': 70}, '0'),
]


def test_golden_matrix_covers_the_brief():
    """Every format, policy and R in {1, 2, 3, 8, 64, 1000} at least once, short last chunks, specials."""
    assert {g[1] for g in GOLDEN} == set(DTYPES)
    assert {g[2] for g in GOLDEN} == set(su.POLICIES)
    assert {1, 2, 3, 8, 64, 1000} <= {g[3] for g in GOLDEN}
    assert sum(1 for g in GOLDEN if g[6] % g[8].get('chunk', 10 ** 9) not in (0, g[6])) >= 5
    assert {g[1] for g in GOLDEN if g[8].get('values') == 'specials'} >= set(ref.FLOAT_DTYPES)
    for g in GOLDEN:
        if g[2] == 'fp32_arrival':
            assert g[4] == 1 and g[5] == 1, g[0]


@pytest.mark.parametrize('case', GOLDEN, ids=[g[0] for g in GOLDEN])
def test_golden_replay(tmp_path, case):
    name, dtype, policy, R, ports, shards, elements, ops, opts, lcores = case
    sc = Scenario(tmp_path, ranks=R, ports=ports, shards=shards,
                  lcores=[0, 1] if lcores == '0-1' else None)
    man = sc.generate(dtype, policy, elements, ops, **opts)
    run = sc.run_switch(lcores=lcores)
    assert run.rc == 0, run.describe()
    res = check_results(run, [man])
    s = run.summary
    n_contrib = man['stats']['contrib']
    assert sum(p['packets'] for p in s.rx.values()) == n_contrib == man['packets'], run.describe()
    assert s.shard_total('contribs') == n_contrib
    assert s.shard_total('results_sent') == R * man['chunks'] * ops == len(res['results'])
    assert s.jobs[sc.job]['completed'] == s.jobs[sc.job]['opened'] == man['chunks'] * ops
    assert not s.incomplete and not s.rx_dropped and not s.shard_dropped and not s.refused, run.describe()
    assert len(run.frames) == len(res['results']), 'frames other than RESULTs were sent'
    if opts.get('values') in ('specials', 'full') and dtype in ref.FLOAT_FORMATS:
        # the sideband comparison is not vacuous here
        assert any(f['flags'] & su.SIDEBAND for f in res['results'])
    ref_check(man, res['assembled'])


# ============================================================ 2. reproducibility
def test_reproducible_under_arbiters_and_orders(tmp_path):
    """8 ranks on 4 ports (one net_pcap each), fp32 gradients; the same op under
    KULISCH_FIXED (op 0) and FP32_ARRIVAL (op 1) in one capture per port, from
    prism-gen --order round_robin / random / reverse, through the switch with the
    arbiter random under 20 seeds, round_robin and reverse, on one lcore and
    then on two (shared nothing, the second lcore's shard passed to it from
    the one-queue ports, and pipelined): every KULISCH_FIXED result is the
    same, bit for bit, and equals the golden.  How many FP32_ARRIVAL elements
    differ between the runs is printed."""
    R, ports, elements = 8, 4, 1500
    sc = Scenario(tmp_path, ranks=R, ports=ports)
    orders = ['round_robin', 'random', 'reverse']
    caps = {}
    for order in orders:
        d = tmp_path / order
        d.mkdir()
        mk = sc.generate('fp32', 'kulisch', elements, 1, order=order, out_dir=d / 'k', exp_dir=d / 'ek', seed=5)
        ma = sc.generate('fp32', 'fp32_arrival', elements, 1, order=order, op_base=1, out_dir=d / 'a',
                         exp_dir=d / 'ea', seed=5)
        for p in range(ports):
            name = f'sw{su.SWITCH_ID}.port{p}.pcap'
            su.concat_pcaps(d / name, [d / 'k' / name, d / 'a' / name])
        caps[order] = (d, mk, ma)
    # the same values whatever the order (one op: values are drawn before the order)
    base = su.rank_inputs(caps['round_robin'][1], 0)
    for order in orders:
        assert su.rank_inputs(caps[order][1], 0) == base and su.rank_inputs(caps[order][2], 1) == base
    arbiters = [('random', s, None) for s in range(1, 21)] + [('round_robin', 1, None), ('reverse', 1, None)]
    arbiters += [(m, s, layout) for layout in ('shared_nothing', 'pipelined')
                 for m, s in (('random', 21), ('random', 22), ('reverse', 1))]
    kulisch, arrival, golden_k = [], [], su.golden(caps['round_robin'][1], 0)[0]
    sc.pcap_dir.mkdir(exist_ok=True)
    for i, (mode, seed, layout) in enumerate(arbiters):
        order = orders[i % len(orders)]
        d, mk, ma = caps[order]
        for p in range(ports):
            shutil.copyfile(d / f'sw{su.SWITCH_ID}.port{p}.pcap', sc.rx_pcap(p))
        two = {'layout': layout, 'lcores': '[0, 1]', 'reducers': '{shards: 3}'} if layout else {}
        sc.write_config(arbiter=f'{{mode: {mode}, seed: {seed}}}', **two)
        run = sc.run_switch(tag=f'rep{i}', lcores='0-1' if layout else '0')
        assert run.rc == 0, run.describe()
        # KULISCH_FIXED: golden-exact, once per member and chunk; FP32_ARRIVAL: only collected
        k = check_results_policy(run, mk)
        a = collect(run, ma)
        kulisch.append((mode, seed, order, k))
        arrival.append((mode, seed, order, a))
        if layout == 'shared_nothing':  # lcore 1 owns shard 1: the one-queue ports' lcore 0 passed it on
            assert run.summary.lcores[1]['inbox_packets'] > 0, run.describe()
    for mode, seed, order, k in kulisch:
        assert k == golden_k, f'KULISCH_FIXED result differs under arbiter {mode} seed {seed}, order {order}'
    vals = np.stack([np.frombuffer(a, dtype='<u4') for *_, a in arrival])
    differ = int((vals != vals[0]).any(axis=0).sum())
    distinct_runs = len({a for *_, a in arrival})
    print(f'\nFP32_ARRIVAL across {len(arrival)} runs (arbiter random x20 seeds, round_robin, reverse; '
          f'random x2 and reverse on two lcores, shared nothing and pipelined; '
          f'prism-gen orders {orders}): {differ} of {elements} elements differ between runs; '
          f'{distinct_runs} distinct result vectors; KULISCH_FIXED: 1 distinct result vector')


def check_results_policy(run: su.SwitchRun, man: dict) -> bytes:
    """Results of the ops of `man` only: golden-exact, once per member and chunk; returns rank 0's vector."""
    sub = su.SwitchRun(run.cmd.split(), run.rc, run.stdout, run.stderr, run.sc)
    ops = {o['op'] for o in man['ops']}
    sub._frames = [f for f in run.frames if f.get('op') in ops]
    res = check_results(sub, [man])
    return bytes(res['assembled'][man['ops'][0]['op']][0])


def collect(run: su.SwitchRun, man: dict) -> bytes:
    """Rank 0's result vector for the (single) op of `man`, every member agreeing."""
    op = man['ops'][0]['op']
    osz = DTYPES[man['out_dtype']][1]
    vecs = {}
    for f in run.of_kind(RESULT):
        if f['op'] != op:
            continue
        v = vecs.setdefault(f['dst_ip'], bytearray(man['elements'] * osz))
        first, cnt = su.chunk_span(man, f['chunk'])
        v[first * osz:(first + cnt) * osz] = bytes.fromhex(f['payload'])
    assert len(vecs) == man['group'], f'{len(vecs)} ranks got results for op {op}'
    assert len({bytes(v) for v in vecs.values()}) == 1, f'op {op}: members got different results'
    return bytes(vecs[member_ip(0)])


# ============================================================ 3. faults
@pytest.mark.parametrize('policy,ports', [('kulisch', 4), ('fp32_arrival', 1)])
def test_duplicates_counted_once(tmp_path, policy, ports):
    sc = Scenario(tmp_path, ranks=8, ports=ports)
    man = sc.generate('fp32', policy, 800, 4, dup=0.3, seed=3)
    dups = man['stats'].get('duplicates', 0)
    assert dups > 0
    run = sc.run_switch()
    assert run.rc == 0, run.describe()
    check_results(run, [man])
    s = run.summary
    assert s.shard_dropped['duplicate'] == dups, run.describe()
    assert s.shard_total('contribs') == man['stats']['contrib'] + dups
    assert s.shard_total('resent') == 0


def test_late_retransmit_gets_result_again(tmp_path):
    """--late-retransmit 1.0: after each op every rank re-sends one chunk with
    RETRANSMIT; the switch re-sends that RESULT, with RETRANSMIT, to that rank only."""
    # One port: the capture's order is the arrival order, so every late
    # retransmit comes after its op completed (across ports a repeat may overtake
    # the last contribution of another port and find the slot still open).
    sc = Scenario(tmp_path, ranks=8, ports=1, shards=2)
    man = sc.generate('bf16', 'kulisch', 1000, 3, late_retransmit=1.0, values='specials', seed=4)
    late = man['stats']['late_retransmits']
    assert late == 8 * 3
    asked = Counter()
    for p in range(sc.ports):
        for f in su.dump(sc.rx_pcap(p)):
            if f.get('kind') == su.CONTRIB and f['flags'] & RETRANSMIT:
                asked[(sc.rank_of_ip[f['src_ip']], f['op'], f['chunk'])] += 1
    assert sum(asked.values()) == late
    run = sc.run_switch()
    assert run.rc == 0, run.describe()
    res = check_results(run, [man], allow_retransmit=True)  # payloads of the resent RESULTs are checked too
    assert Counter(res['retransmits']) == asked, run.describe()
    assert run.summary.shard_total('resent') == late
    assert run.summary.shard_total('results_sent') == 8 * man['chunks'] * 3 + late


@pytest.mark.parametrize('policy,ports', [('kulisch', 4), ('fp32_arrival', 1)])
def test_loss_recovered_by_retransmission(tmp_path, policy, ports):
    sc = Scenario(tmp_path, ranks=8, ports=ports)
    man = sc.generate('fp16', policy, 1500, 3, loss=0.2, seed=6)
    assert man['stats'].get('lost', 0) > 0 and man['stats']['retransmits'] == man['stats']['lost']
    run = sc.run_switch()
    assert run.rc == 0, run.describe()
    check_results(run, [man])
    s = run.summary
    assert not s.incomplete
    assert s.jobs[sc.job]['completed'] == man['chunks'] * 3
    assert s.shard_total('resent') == 0 and not s.shard_dropped, run.describe()


def test_loss_dup_reorder_together(tmp_path):
    sc = Scenario(tmp_path, ranks=8, ports=4, shards=2)
    man = sc.generate('e5m2', 'kulisch', 3000, 3, loss=0.1, dup=0.2, reorder=0.2, values='specials', seed=8)
    run = sc.run_switch()
    assert run.rc == 0, run.describe()
    check_results(run, [man])
    assert run.summary.shard_dropped['duplicate'] == man['stats'].get('duplicates', 0), run.describe()
    assert run.summary.jobs[sc.job]['completed'] == man['chunks'] * 3


def malformed_scenario(tmp_path):
    sc = Scenario(tmp_path, ranks=8, ports=2)
    man = sc.generate('fp32', 'kulisch', 800, 2, malformed=16, foreign=9, seed=9)
    st = man['stats']
    malformed = {k.split('.', 1)[1]: v for k, v in st.items() if k.startswith('malformed.')}
    foreign = {k.split('.', 1)[1]: v for k, v in st.items() if k.startswith('foreign.')}
    assert sum(malformed.values()) == 16 and sum(foreign.values()) == 9
    assert set(foreign) == {'unknown_source', 'foreign_job', 'spoofed_rank'}
    return sc, man, malformed, foreign


# parser refusals past the UDP checks: PRISM traffic, however broken (PROTOCOL.md: NACK MALFORMED
# when the packet parsed far enough to identify a registered member)
BROKEN_PRISM = {'bad_magic', 'bad_version', 'bad_kind', 'bad_dtype', 'payload_length', 'bad_count'}


def test_malformed_and_foreign_dropped_with_reasons(tmp_path):
    """--malformed 16 --foreign 9: each refused by the parser under its own name
    or dropped for its reason (unknown_source, unknown_job, spoofed); NACKs only
    to registered members; no effect on any result."""
    sc, man, malformed, foreign = malformed_scenario(tmp_path)
    st = man['stats']
    run = sc.run_switch()
    assert run.rc == 0, run.describe()
    check_results(run, [man], all_frames_parse=False)  # the NACKs' validity: test_nacks_are_valid_frames
    s = run.summary
    # prism-gen names its malformed kinds after the parser's refusals
    assert dict(s.refused) == malformed, run.describe()
    # every parser refusal is dropped once (as malformed, or not_for_us for the IP/UDP-level ones)
    assert s.rx_dropped['malformed'] + s.rx_dropped['not_for_us'] == 16, run.describe()
    print(f'\nparser refusals dropped as malformed: {s.rx_dropped["malformed"]}, '
          f'as not_for_us: {s.rx_dropped["not_for_us"]} ({malformed})')
    assert s.rx_dropped['unknown_source'] == foreign['unknown_source'], run.describe()
    assert s.rx_dropped['unknown_job'] == foreign['foreign_job'], run.describe()
    assert s.rx_dropped['spoofed'] == foreign['spoofed_rank'], run.describe()
    assert set(s.rx_dropped) <= {'malformed', 'not_for_us', 'unknown_source', 'unknown_job', 'spoofed'}
    assert not s.shard_dropped, 'nothing dropped by RX may reach a reducer'
    assert s.shard_total('contribs') == st['contrib']
    # NACKs: unknown job -> UNKNOWN_JOB, to the registered address that sent it; never to an
    # unknown source, and never to a spoofed sender id (PROTOCOL.md: counted and dropped, never reflected)
    nacks = run.of_kind(NACK)
    assert s.nacks == len([f for f in run.frames if f.get('kind') != RESULT])
    by_status = Counter(f['status'] for f in nacks)
    assert by_status[NACK_REASONS['unknown_job']] == foreign['foreign_job'], by_status
    assert by_status[NACK_REASONS['not_a_member']] == 0, by_status
    for f in nacks:
        r = sc.rank_of_ip.get(f['dst_ip'])
        assert r is not None and f['dst_mac'] == member_mac(r) and f['out_port'] == sc.member_port[r], f
        assert f['terms'] == 0 and f['count'] == 0 and f['sender'] == su.SWITCH_ID and f['payload'] == ''
    for f in run.frames:
        if f['refusal'] == 'ok':
            assert f['dst_ip'] in sc.rank_of_ip, f'a frame went to an unregistered address: {f}'


def contrib_frame(src_mac: str, src_ip: str, sport: int, dst_port: int, sender: int, op: int) -> bytes:
    """A CONTRIB for job 7, one fp32 element, built from docs/PROTOCOL.md alone (scapy computes the
    IPv4 and UDP checksums)."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    hdr = struct.pack('>HBBIIIHHHHBBBBBBBB', 0x5052, 1, 1, 7, op, 0, sender, 4, 1, 1, 1, 1, 2, 1, 2, 1, 0, 0)
    pkt = (Ether(src=src_mac, dst=su.port_mac(dst_port)) / IP(src=src_ip, dst=su.port_ip(dst_port), flags='DF') /
           UDP(sport=sport, dport=20562) / (hdr + struct.pack('<f', 1.0)))
    return bytes(pkt)


def test_spoofed_senders_are_never_answered(tmp_path):
    """The three shapes of a CONTRIB whose source is not the member it claims, through the switch
    on its pcap ports: an unregistered MAC with rank 0's IP and UDP port; rank 1's whole address
    claiming rank 0; rank 0's own address arriving on a port it is not registered on. Each is
    counted as spoofed, opens no slot and gets no answer of any kind (PROTOCOL.md: never
    reflected); the genuine op beside them completes as usual."""
    from scapy.utils import rdpcap, wrpcap
    sc = Scenario(tmp_path, ranks=4, ports=2)  # rank r behind port r % 2
    man = sc.generate('fp32', 'kulisch', 100, 1)
    shapes = {0: [contrib_frame('02:00:00:00:77:00', su.member_ip(0), 20562, 0, 0, op=99),   # unregistered MAC
                  ],
              1: [contrib_frame(su.member_mac(1), su.member_ip(1), 20562, 1, 0, op=99),      # rank 1 claims rank 0
                  contrib_frame(su.member_mac(0), su.member_ip(0), 20562, 1, 0, op=99)]}     # rank 0 on port 1
    for p, frames in shapes.items():
        from scapy.layers.l2 import Ether
        wrpcap(str(sc.rx_pcap(p)), [Ether(f) for f in frames] + list(rdpcap(str(sc.rx_pcap(p)))))
    run = sc.run_switch()
    assert run.rc == 0, run.describe()
    check_results(run, [man])
    s = run.summary
    assert s.rx_dropped == Counter({'spoofed': 3}), run.describe()
    assert s.nacks == 0 and not run.of_kind(NACK), run.describe()
    assert s.jobs[sc.job]['opened'] == s.jobs[sc.job]['completed'] == man['chunks'], run.describe()
    assert all(f['op'] != 99 for f in run.frames if f.get('op') is not None)


def test_switch_answers_arp_and_ping_for_its_ports(tmp_path):
    """The switch is an endpoint: an ARP who-has for a port's IPv4 address gets the port's MAC
    back, and an ICMP echo request to it an echo reply; scapy decodes both and finds their
    checksums right. ARP for another address, and an echo to another address, get nothing.
    Neither touches a PRISM counter; the genuine op beside them completes."""
    from scapy.layers.inet import ICMP, IP
    from scapy.layers.l2 import ARP, Ether
    from scapy.utils import rdpcap, wrpcap
    sc = Scenario(tmp_path, ranks=4, ports=2)
    man = sc.generate('fp32', 'kulisch', 100, 1)
    asker_mac, asker_ip = su.member_mac(1), su.member_ip(1)  # rank 1, behind port 1
    req = [Ether(src=asker_mac, dst='ff:ff:ff:ff:ff:ff') / ARP(op=1, hwsrc=asker_mac, psrc=asker_ip,
                                                            pdst=su.port_ip(1)),
           Ether(src=asker_mac, dst='ff:ff:ff:ff:ff:ff') / ARP(op=1, hwsrc=asker_mac, psrc=asker_ip,
                                                            pdst='10.0.1.99'),
           Ether(src=asker_mac, dst=su.port_mac(1)) / IP(src=asker_ip, dst=su.port_ip(1)) /
           ICMP(type=8, id=0x77, seq=3) / (b'prism' * 11),
           Ether(src=asker_mac, dst=su.port_mac(1)) / IP(src=asker_ip, dst='10.0.1.99') / ICMP(type=8)]
    wrpcap(str(sc.rx_pcap(1)), [Ether(bytes(p)) for p in req] + list(rdpcap(str(sc.rx_pcap(1)))))
    run = sc.run_switch()
    assert run.rc == 0, run.describe()
    check_results(run, [man], all_frames_parse=False)
    s = run.summary
    assert s.rx[1]['arp_replies'] == 1 and s.rx[1]['echo_replies'] == 1, run.describe()
    assert s.rx[0]['arp_replies'] == s.rx[0]['echo_replies'] == 0
    out = [p for p in rdpcap(str(sc.tx_pcap(1))) if not p.haslayer('UDP')]
    arps, pings = [p for p in out if p.haslayer(ARP)], [p for p in out if p.haslayer(ICMP)]
    assert len(arps) == 1 and len(pings) == 1 and len(out) == 2, [p.summary() for p in out]
    a = arps[0]
    assert (a[Ether].dst, a[Ether].src) == (asker_mac, su.port_mac(1))
    assert (a[ARP].op, a[ARP].hwsrc, a[ARP].psrc, a[ARP].hwdst, a[ARP].pdst) == (
        2, su.port_mac(1), su.port_ip(1), asker_mac, asker_ip)
    e = pings[0]
    assert (e[Ether].dst, e[Ether].src, e[IP].src, e[IP].dst) == (asker_mac, su.port_mac(1), su.port_ip(1), asker_ip)
    assert (e[ICMP].type, e[ICMP].id, e[ICMP].seq, bytes(e[ICMP].payload)) == (0, 0x77, 3, b'prism' * 11)
    ip_sum, icmp_sum = e[IP].chksum, e[ICMP].chksum
    e2 = Ether(bytes(e))
    del e2[IP].chksum, e2[ICMP].chksum
    e2 = Ether(bytes(e2))  # scapy recomputes both
    assert (e2[IP].chksum, e2[ICMP].chksum) == (ip_sum, icmp_sum)


def test_nacks_are_valid_frames(tmp_path):
    """Every frame the switch sends is valid PRISM v1: in particular the NACK
    MALFORMED it sends a registered member for a broken PRISM packet (magic
    0x5052, version 1, kind NACK, terms 0, count 0), one per such packet, to
    the member that sent it, echoing job/op/chunk where the refused packet's
    header got that far."""
    sc, man, malformed, foreign = malformed_scenario(tmp_path)
    want = Counter()
    for p in range(sc.ports):
        _, recs = su.read_pcap(sc.rx_pcap(p))
        for (_, fr), f in zip(recs, su.dump(sc.rx_pcap(p))):
            if f['refusal'] in BROKEN_PRISM:
                want[sc.rank_of_ip[su.frame_src_ip(fr)]] += 1
    assert sum(want.values()) == sum(v for k, v in malformed.items() if k in BROKEN_PRISM)
    run = sc.run_switch()
    assert run.rc == 0, run.describe()
    raw = []
    for p in range(sc.ports):
        _, recs = su.read_pcap(sc.tx_pcap(p))
        raw += [fr for _, fr in recs]
    # NACKs decoded by hand (docs/PROTOCOL.md), so that invalid ones can be looked at too
    hand = [dict(zip(('magic', 'version', 'kind', 'job', 'op', 'chunk', 'sender', 'group', 'terms', 'count'),
                     struct.unpack('>HBBIIIHHHH', fr[42:66])), status=fr[73], dst_ip=su.frame_src_ip(fr[4:]))
            for fr in raw if len(fr) == 74]
    mal = [h for h in hand if h['status'] == NACK_REASONS['malformed'] and h['kind'] == NACK]
    print(f'\nNACK MALFORMED: {len(mal)} (expected {sum(want.values())}); (magic, version, job, op, chunk) '
          f'they carry: {sorted(Counter((hex(h["magic"]), h["version"], h["job"], h["op"], h["chunk"]) for h in mal).items())}')
    assert Counter(sc.rank_of_ip[h['dst_ip']] for h in mal) == want, run.describe()
    for h in mal:
        assert h['terms'] == 0 and h['count'] == 0 and h['sender'] == su.SWITCH_ID, h
    bad = [f for f in run.frames if f['refusal'] != 'ok']
    assert not bad, (f'{len(bad)} of {len(run.frames)} frames the switch sent are not valid PRISM: '
                     f'{Counter(f["refusal"] for f in bad)}; PRISM headers: '
                     + ', '.join(fr[42:74].hex() for fr in raw if fr[42:44] != b'PR' or fr[44] != 1)[:300]
                     + '\n' + run.describe())


@pytest.mark.parametrize('shards', [1, 2])
def test_incomplete_ops_reported_at_idle_exit(tmp_path, shards):
    """A capture missing rank 2's packets: exit status 3 and one INCOMPLETE line per (op, chunk)."""
    sc = Scenario(tmp_path, ranks=4, ports=1, shards=shards)
    man = sc.generate('fp32', 'kulisch', 1000, 2)
    ghdr, recs = su.read_pcap(sc.rx_pcap(0))
    gone = su.mac_bytes(member_mac(2))
    kept = [(h, fr) for h, fr in recs if fr[6:12] != gone]
    assert len(kept) == len(recs) - man['chunks'] * 2
    su.write_pcap(sc.rx_pcap(0), ghdr, kept)
    run = sc.run_switch()
    assert run.rc == 3, run.describe()
    lines = [ln for ln in run.stdout.splitlines() if 'INCOMPLETE' in ln]
    want = {(sc.job, o, c) for o in range(2) for c in range(man['chunks'])}
    got = {(j, o, c) for j, o, c, _, _ in run.summary.incomplete}
    assert got == want and len(lines) == len(want), run.describe()
    assert all((got_, of) == (3, 4) for *_, got_, of in run.summary.incomplete), run.describe()
    for j, o, c in want:
        assert any(ln.strip().startswith(f'INCOMPLETE job {j} op {o} chunk {c}') for ln in lines)
    assert not run.of_kind(RESULT)


def test_complete_capture_exits_zero_with_no_incomplete_line(tmp_path):
    sc = Scenario(tmp_path, ranks=2)
    man = sc.generate('int32', 'kulisch', 10, 1)
    run = sc.run_switch()
    assert run.rc == 0 and 'INCOMPLETE' not in run.stdout, run.describe()
    check_results(run, [man])


def test_op_timeout_abandons_incomplete_ops(tmp_path):
    """op_timeout_ms: an op still incomplete after it is abandoned and counted
    (timed out), its slot freed; no RESULT for it. Rank 1 never sends: each of
    ranks 0, 2 and 3 (the ones waiting) gets one NACK OP_ABANDONED (8) per
    chunk, echoing the op, with terms 3 and the one-byte bitmap naming rank 1
    (0x02); rank 1 gets nothing. Decoded twice: by prism-gen dump and by scapy
    from the raw frames, against PROTOCOL.md's layout."""
    from scapy.all import IP, UDP, Ether, rdpcap
    sc = Scenario(tmp_path, ranks=4, extra={'op_timeout_ms': 50})
    man = sc.generate('fp16', 'kulisch', 1000, 2)
    ghdr, recs = su.read_pcap(sc.rx_pcap(0))
    gone = su.mac_bytes(member_mac(1))
    su.write_pcap(sc.rx_pcap(0), ghdr, [(h, fr) for h, fr in recs if fr[6:12] != gone])
    run = sc.run_switch(idle_ms=400)
    s = run.summary
    n = man['chunks'] * 2
    assert s.jobs[sc.job]['timed_out'] == n and s.jobs[sc.job]['completed'] == 0, run.describe()
    assert s.jobs[sc.job]['in_flight'] == 0 and s.shard_total('slots_in_use') == 0, run.describe()
    assert not s.incomplete and not run.of_kind(RESULT), run.describe()
    # Abandoned ops count as incomplete at an idle exit: reported, exit status 3.
    assert s.abandoned.get(sc.job) == n and run.rc == 3, run.describe()
    bitmap = su.missing_bitmap(4, [1])
    assert bitmap == bytes([0x02])
    nacks = run.of_kind(NACK)
    assert len(nacks) == 3 * n == s.shard_total('nacks_sent') == s.nacks, run.describe()
    assert Counter((sc.rank_of_ip[f['dst_ip']], f['op'], f['chunk']) for f in nacks) == Counter(
        {(r, o, c): 1 for r in (0, 2, 3) for o in range(2) for c in range(man['chunks'])})
    for f in nacks:
        assert f['status'] == NACK_REASONS['op_abandoned'] == 8
        assert (f['terms'], f['count'], f['group'], f['sender']) == (3, 0, 4, su.SWITCH_ID), f
        assert f['payload'] == bitmap.hex(), f
        assert f['dtype'] == DTYPES['fp16'][0] and f['policy'] == su.POLICIES['kulisch']
    # scapy: Ethernet / IPv4 / UDP to the rank's registered address, then the 32-byte header and the bitmap.
    seen = Counter()
    for pkt in rdpcap(str(sc.tx_pcap(0))):
        body = bytes(pkt[UDP].payload)
        magic, version, kind, job, op, chunk, sender, group, terms, count = struct.unpack('>HBBIIIHHHH', body[:24])
        if kind != NACK:
            continue
        r = sc.rank_of_ip[pkt[IP].dst]
        assert pkt[Ether].dst == member_mac(r) and pkt[UDP].dport == su.UDP_PORT
        assert (magic, version, job, sender, group, terms, count) == (0x5052, 1, sc.job, su.SWITCH_ID, 4, 3, 0)
        assert body[31] == 8 and body[32:] == bitmap, body.hex()
        seen[r] += 1
    assert seen == Counter({0: n, 2: n, 3: n})


def test_no_udp_checksum_only_where_the_job_accepts_it(tmp_path):
    """A contribution sent with UDP checksum 0 is dropped (no_checksum) with a NACK MALFORMED to its
    rank unless its job says udp_checksum: optional; then its op completes with the golden RESULT."""
    for optional in (False, True):
        sc = Scenario(tmp_path / str(optional), ranks=4)
        if optional:
            sc.config.write_text(sc.config.read_text().replace(f'  - id: {sc.job}\n',
                                                               f'  - id: {sc.job}\n    udp_checksum: optional\n'))
        man = sc.generate('fp32', 'kulisch', 200, 1)
        ghdr, recs = su.read_pcap(sc.rx_pcap(0))
        bare = [(h, bytes(fr[:40]) + b'\0\0' + bytes(fr[42:])) if i == 2 else (h, fr) for i, (h, fr) in enumerate(recs)]
        su.write_pcap(sc.rx_pcap(0), ghdr, bare)
        run = sc.run_switch()
        s = run.summary
        if optional:
            assert run.rc == 0 and not s.rx_dropped, run.describe()
            check_results(run, [man])
        else:
            assert s.rx_dropped['no_checksum'] == 1, run.describe()
            nacks = run.of_kind(NACK)
            assert len(nacks) == 1 and nacks[0]['status'] == NACK_REASONS['malformed'], run.describe()
            assert s.jobs[sc.job]['completed'] == 0, run.describe()


@pytest.mark.parametrize('limit', ['slots', 'slot_quota'])
def test_a_full_slot_table_refuses_with_no_free_slot(tmp_path, limit):
    """A slot is held only while its chunk is open, so a table of one slot (or a
    slot_quota of one) takes op after op. Op 1's first contribution arrives
    while op 0 holds the only slot: refused, NACK NO_FREE_SLOT to that rank
    (and counted as a slot refusal); once op 0 completes, its slot is free,
    op 1's other contributions open it, and the refused rank's retry (a
    RETRANSMIT, as after a NACK NO_FREE_SLOT) completes it. Both ops'
    RESULTs are the golden ones."""
    sc = Scenario(tmp_path, ranks=4)
    if limit == 'slots':
        sc.write_config(reducers='{shards: 1, slots: 1}')
    else:
        sc.config.write_text(sc.config.read_text().replace(f'  - id: {sc.job}\n',
                                                           f'  - id: {sc.job}\n    slot_quota: 1\n'))
    man = sc.generate('fp32', 'kulisch', 200, 2)
    assert man['chunks'] == 1
    ghdr, recs = su.read_pcap(sc.rx_pcap(0))
    by = {}
    for h, fr in recs:
        op, sender = struct.unpack_from('>IxxxxH', fr, 42 + 8)
        by[(op, sender)] = (h, fr)
    retry = bytearray(by[(1, 0)][1])
    retry[42 + 30] |= RETRANSMIT
    retry[40:42] = b'\0\0'  # UDP checksum: none (RFC 768), which the job must then accept
    sc.config.write_text(sc.config.read_text().replace(f'  - id: {sc.job}\n',
                                                       f'  - id: {sc.job}\n    udp_checksum: optional\n'))
    order = [by[(0, 0)], by[(0, 1)], by[(1, 0)], by[(0, 2)], by[(0, 3)], by[(1, 1)], by[(1, 2)], by[(1, 3)],
             (by[(1, 0)][0], bytes(retry))]
    su.write_pcap(sc.rx_pcap(0), ghdr, order)
    run = sc.run_switch()
    assert run.rc == 0, run.describe()
    s = run.summary
    assert s.shard_dropped['no_free_slot'] == 1 and s.jobs[sc.job]['slot_refusals'] == 1, run.describe()
    assert s.shard_total('slots_high') == 1 and s.jobs[sc.job]['completed'] == 2, run.describe()
    nacks = run.of_kind(NACK)
    assert len(nacks) == 1 == s.nacks, run.describe()
    assert (nacks[0]['status'], nacks[0]['op'], nacks[0]['dst_ip']) == (NACK_REASONS['no_free_slot'], 1,
                                                                        member_ip(0))
    check_results(run, [man])


def test_a_jobs_rate_drops_what_exceeds_it_before_the_reducers(tmp_path):
    """jobs[].rate (a trTCM per job, DPDK's rte_meter): 2 ranks send 100 ops
    of 360 fp32 (200 frames of 1514 bytes, 303 KB) as fast as net_pcap replays
    them, against a peak rate of 1 Mbit/s with a 16 KiB burst. About the
    burst passes (10 frames); the rest is dropped at RX as over_rate, never
    reaching a reducer (the shards take only what RX admitted), unanswered;
    every frame is counted exactly once; and the ops that did complete are
    the golden results. The same capture without a rate completes all 100."""
    sc = Scenario(tmp_path, ranks=2)
    man = sc.generate('fp32', 'kulisch', 288, 100)
    assert man['chunks'] == 1
    free = sc.run_switch()
    assert free.rc == 0 and free.summary.jobs[sc.job]['completed'] == 100, free.describe()
    sc.config.write_text(sc.config.read_text().replace(
        f'  - id: {sc.job}\n', f'  - id: {sc.job}\n    rate: {{committed_mbit: 1, committed_burst_kib: 16}}\n'))
    run = sc.run_switch()
    s = run.summary
    over = s.dropped('over_rate')
    assert 150 <= over <= 195, run.describe()
    rx = sum(p['packets'] for p in s.rx.values())
    assert rx == 200, run.describe()
    assert s.shard_total('packets') == rx - sum(s.rx_dropped.values()), run.describe()
    assert s.shard_total('contribs') == 200 - over, run.describe()
    assert s.nacks == 0, 'an over-rate packet is never answered'
    done = s.jobs[sc.job]['completed']
    assert 1 <= done <= 25, run.describe()
    # Every RESULT that went out is its op's golden one.
    results = run.of_kind(RESULT)
    assert len(results) == 2 * done, run.describe()
    for r in results:
        want, _ = su.golden(man, r['op'])
        assert bytes.fromhex(r['payload']) == want, f'op {r["op"]}'


def test_backpressure_small_rings_loses_nothing(tmp_path):
    """rings.size 64 (VOQ and TX rings) with a fan-out of 64 RESULTs per chunk on
    two lcores: full rings push back instead of dropping; every result exact."""
    sc = Scenario(tmp_path, ranks=64, ports=4, shards=2, lcores=[0, 1], extra={'rings': '{size: 64}'})
    man = sc.generate('fp16', 'kulisch', 3600, 2, values='specials', chunk=256)
    run = sc.run_switch(lcores='0-1')
    assert run.rc == 0, run.describe()
    check_results(run, [man])
    s = run.summary
    assert not s.rx_dropped and not s.shard_dropped, run.describe()
    assert s.shard_total('results_sent') == 64 * man['chunks'] * 2



@pytest.mark.parametrize('lcores', ['0-1', '0'])
def test_fanout_to_many_ranks(tmp_path, lcores):
    """A RESULT made once and copied to 64 ranks on 4 ports, two shards, rings
    of 64, fp16 with specials (so RESULTs carry a sideband): on two lcores
    through the rings, on one run to completion. Every member gets every
    chunk exactly once, bit for bit the golden; tshark finds every sent
    frame's IPv4 and UDP checksums good (each copy's headers are its own)."""
    R, ports, ops = 64, 4, 2
    sc = Scenario(tmp_path, ranks=R, ports=ports, shards=2, lcores=[0, 1] if lcores == '0-1' else None,
                  extra={'rings': '{size: 64}'})
    man = sc.generate('fp16', 'kulisch', 3600, ops, values='specials', chunk=256)
    run = sc.run_switch(lcores=lcores)
    assert run.rc == 0, run.describe()
    res = check_results(run, [man])
    ref_check(man, res['assembled'])
    s = run.summary
    assert not s.rx_dropped and not s.shard_dropped, run.describe()
    results = man['chunks'] * ops
    assert len(res['results']) == R * results
    on_port = Counter(f['out_port'] for f in run.of_kind(RESULT))
    for p in range(ports):
        assert on_port[p] == R // ports * results
        assert s.tx[p]['packets'] == on_port[p], run.describe()
        r = subprocess.run(['tshark', '-n', '-r', str(sc.tx_pcap(p)), '-o', 'ip.check_checksum:TRUE',
                            '-o', 'udp.check_checksum:TRUE', '-T', 'fields', '-e', 'ip.checksum.status',
                            '-e', 'udp.checksum.status'], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        status = Counter(r.stdout.split('\n')[:-1])
        assert status == Counter({'1\t1': on_port[p]}), status  # tshark: 1 = Good

# ------------------------------------------------------------ admission NACKs
@pytest.mark.parametrize('what', ['format_not_allowed', 'policy_not_allowed'])
def test_admission_refusals(tmp_path, what):
    """Ops the switch refuses at admission: a NACK with the documented reason to
    every member whose CONTRIB was refused, the drop counted, no RESULT for them."""
    sc = Scenario(tmp_path, ranks=4, ports=2)
    chunks_ok = 0  # (test_a_full_slot_table_refuses_with_no_free_slot: NO_FREE_SLOT)
    text = sc.config.read_text().replace(
        f'  - id: {sc.job}\n',
        f'  - id: {sc.job}\n' + ('    formats: [fp16, bf16]\n' if what == 'format_not_allowed'
                                 else '    policies: [fp32_arrival]\n'))
    sc.config.write_text(text)
    reason, drop = 'descriptor_mismatch', 'not_allowed'
    man = sc.generate('fp32', 'kulisch', 500, 1)
    assert man['chunks'] == 2
    run = sc.run_switch()
    assert run.rc == 0, run.describe()
    refused = 4 * (man['chunks'] - chunks_ok)
    s = run.summary
    assert s.shard_dropped[drop] == refused, run.describe()
    nacks = run.of_kind(NACK)
    assert len(nacks) == refused == s.shard_total('nacks_sent') == s.nacks, run.describe()
    assert {f['status'] for f in nacks} == {NACK_REASONS[reason]}
    assert Counter(sc.rank_of_ip[f['dst_ip']] for f in nacks) == Counter({r: man['chunks'] - chunks_ok
                                                                         for r in range(4)})
    for f in nacks:
        r = sc.rank_of_ip[f['dst_ip']]
        assert f['out_port'] == sc.member_port[r] and f['dst_mac'] == member_mac(r)
        assert f['job'] == sc.job and f['count'] == 0 and f['terms'] == 0 and f['sender'] == su.SWITCH_ID
        assert f['policy'] == su.POLICIES['kulisch'] and f['dtype'] == DTYPES['fp32'][0]
    results = run.of_kind(RESULT)
    assert {f['chunk'] for f in results} == set(range(chunks_ok)) and len(results) == 4 * chunks_ok


def test_too_narrow_a_width_is_refused_at_start(tmp_path):
    """kulisch_width: 100 where job 7 allows fp32 under KULISCH at R = 4 (280 bits): every such op
    would be refused at run time (NACK ACCUMULATOR_TOO_NARROW), so the switch refuses the
    configuration up front, naming the key, the job, the bits needed and what to change. (The
    reducer's own refusal, for configurations made as values, is unit-tested in test_switch.cpp.)"""
    sc = Scenario(tmp_path, ranks=4, ports=2)
    sc.write_config(kulisch_width=100)
    r = su.run([su.SWITCH, *su.EAL_BASE, '-l', '0', '--file-prefix', su.file_prefix('narrow'), '--', '--config',
                sc.config, '--exit-when-idle', 100])
    assert r.returncode == 2, r.stdout + r.stderr
    assert 'kulisch_width' in r.stderr and 'job 7' in r.stderr and '280 bits' in r.stderr, r.stderr
    assert r.stderr.count('\n') == 1, 'one line, before the EAL starts: ' + r.stderr


# ============================================================ 4. config and CLI errors
def run_cli(tmp_path, app_args, eal=None):
    prefix = su.file_prefix('cli')
    eal = su.EAL_BASE + ['-l', '0', '--file-prefix', prefix] if eal is None else eal
    t = time.monotonic()
    try:
        r = su.run([su.SWITCH, *eal, *app_args], timeout=60)
        created = (su.DPDK_RUN_DIR / prefix).exists()
    finally:
        su.cleanup_prefix(prefix)
    return r, created, time.monotonic() - t


def assert_early_error(r, created, words):
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert len(lines) == 1, f'expected one line on stderr, got {lines}'
    assert lines[0].startswith('prism-switch: '), lines
    for w in words:
        assert re.search(w, lines[0]), f'{w!r} not in {lines[0]!r}'
    assert not created, 'DPDK was initialised (runtime directory created) before the error'
    assert 'EAL' not in r.stderr and not r.stdout.strip(), (r.stdout, r.stderr)


def good_config(tmp_path):
    sc = Scenario(tmp_path / 'good', ranks=2)
    sc.generate('fp32', 'kulisch', 4, 1)
    return sc


BROKEN_CONFIGS = {  # name: (text, regex the message must match)
    'yaml_indent': ('switch:\n  id: 1\n role: root\nports: []\n', r'sw\.yaml:3:\d+: .*YAML'),
    'yaml_tab': ('switch:\n\tid: 1\n', r'sw\.yaml:2:\d+: '),
    'yaml_unclosed': ('switch: {id: 1, role: root\njobs: []\n', r'sw\.yaml:\d+:\d+: .*YAML'),
    'unknown_key': ('switch: {id: 1}\nports:\n  - {id: 0, mac: "02:00:00:00:ff:00", ip: 10.0.0.254, speed: 10}\n'
                    'jobs:\n  - id: 7\n    members:\n      - {rank: 0, port: 0, mac: "02:00:00:00:00:01", '
                    'ip: 10.0.0.1}\n', r'sw\.yaml:3:\d+: ports\[0\]\.speed: unknown key'),
    'bad_ip': ('switch: {id: 1}\nports:\n  - {id: 0, mac: "02:00:00:00:ff:00", ip: 10.0.0.254}\njobs:\n  - id: 7\n'
               '    members:\n      - {rank: 0, port: 0, mac: "02:00:00:00:00:01", ip: 10.0.0.300}\n',
               r"sw\.yaml:7:\d+: jobs\[0\]\.members\[0\]\.ip: '10\.0\.0\.300' is not an IPv4 address"),
    'bad_arbiter': ('switch: {id: 1}\nports:\n  - {id: 0, mac: "02:00:00:00:ff:00", ip: 10.0.0.254}\njobs:\n'
                    '  - id: 7\n    members:\n      - {rank: 0, port: 0, mac: "02:00:00:00:00:01", ip: 10.0.0.1}\n'
                    'arbiter: {mode: fastest}\n', r"sw\.yaml:8:\d+: arbiter\.mode: 'fastest' is not an arbiter mode"),
    'empty': ('', r'sw\.yaml: the file is empty'),
}


@pytest.mark.parametrize('name', list(BROKEN_CONFIGS))
def test_broken_config_fails_before_dpdk(tmp_path, name):
    text, pattern = BROKEN_CONFIGS[name]
    cfg = tmp_path / 'sw.yaml'
    cfg.write_text(text)
    r, created, _ = run_cli(tmp_path, ['--', '--config', cfg])
    assert_early_error(r, created, [pattern])


CLI_ERRORS = {  # name: (app args after the EAL options, regexes)
    'missing_config': (['--'], [r'missing --config']),
    'no_separator': ([], [r'missing --config']),
    'config_not_found': (['--', '--config', '/nonexistent/sw.yaml'], [r'/nonexistent/sw\.yaml', r'cannot read']),
    'unknown_option': (['--', '--config', 'CFG', '--frobnicate'], [r'unknown option --frobnicate']),
    'bad_idle': (['--', '--config', 'CFG', '--exit-when-idle', 'soon'], [r'--exit-when-idle', r"'soon'"]),
    'idle_zero': (['--', '--config', 'CFG', '--exit-when-idle', '0'], [r'--exit-when-idle']),
    'idle_no_value': (['--', '--config', 'CFG', '--exit-when-idle'], [r'--exit-when-idle needs a value']),
    'positional': (['--', '--config', 'CFG', 'extra'], [r"unexpected argument 'extra'"]),
    'quiet_with_value': (['--', '--config', 'CFG', '--quiet=yes'], [r'--quiet takes no value']),
}


@pytest.mark.parametrize('name', list(CLI_ERRORS))
def test_cli_errors_fail_before_dpdk(tmp_path, name):
    args, words = CLI_ERRORS[name]
    cfg = good_config(tmp_path).config
    args = [str(cfg) if a == 'CFG' else a for a in args]
    r, created, took = run_cli(tmp_path, args)
    assert_early_error(r, created, words)
    assert took < 10


def test_help(tmp_path):
    for args in (['--help'], ['--', '--help']):
        r = su.run([su.SWITCH, *args], timeout=30)
        assert r.returncode == 0 and r.stdout.startswith('usage: prism-switch'), (args, r.stdout, r.stderr)
        assert '--exit-when-idle' in r.stdout and '--config' in r.stdout


def test_setup_errors_after_eal(tmp_path):
    """A device that cannot be created, and a port DPDK does not have: exit 2 naming the port."""
    sc = Scenario(tmp_path, ranks=2)
    # no rx capture written: net_pcap cannot open it
    r, _, _ = run_cli(tmp_path, ['--', '--config', sc.config, '--exit-when-idle', '100'])
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert re.search(r'^prism-switch: .*port 0: cannot create device', r.stderr, re.M), r.stderr
    cfg = tmp_path / 'nodev.yaml'
    cfg.write_text(sc.config.read_text().replace(f'device: "net_pcap0,rx_pcap={sc.rx_pcap(0)},'
                                                 f'tx_pcap={sc.tx_pcap(0)}", ', ''))
    assert 'net_pcap' not in cfg.read_text()
    r, _, _ = run_cli(tmp_path, ['--', '--config', cfg, '--exit-when-idle', '100'])
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert re.search(r'^prism-switch: .*port 0 has no device', r.stderr, re.M), r.stderr


def test_eal_error_exits_2(tmp_path):
    sc = good_config(tmp_path)
    prefix = su.file_prefix('eal')
    try:
        r = su.run([su.SWITCH, '--no-huge', '-m', '512', '--no-pci', '--file-prefix', prefix,
                    '--bogus-eal-option', '--', '--config', sc.config], timeout=60)
    finally:
        su.cleanup_prefix(prefix)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert 'EAL initialisation failed' in r.stderr


# ============================================================ 5. telemetry and signals
TELEMETRY_SCRIPT = shutil.which('dpdk-telemetry.py') or '/usr/bin/dpdk-telemetry.py'


def telemetry_scenario(tmp_path, extra=None):
    sc = Scenario(tmp_path, ranks=4, ports=2, shards=2, extra=extra or {})
    man = sc.generate('fp32', 'kulisch', 800, 2, malformed=8, foreign=6, seed=11)
    return sc, man


def expected_counters(sc, man):
    st = man['stats']
    results = 4 * man['chunks'] * 2
    return st, results


def check_telemetry(data: dict, sc: Scenario, man: dict):
    st, results = expected_counters(sc, man)
    ports, drops, reds = data['/prism/ports'], data['/prism/drops'], data['/prism/reducers']
    assert sum(ports[f'port{p}_rx_packets'] for p in range(sc.ports)) == man['packets'], ports
    for p in range(sc.ports):
        for k in ('rx_bytes', 'rx_backpressure', 'nacks', 'tx_packets', 'tx_bytes'):
            assert f'port{p}_{k}' in ports, (k, ports)
    assert sum(ports[f'port{p}_tx_packets'] for p in range(sc.ports)) == results + sum(
        ports[f'port{p}_nacks'] for p in range(sc.ports)), ports
    for kind in ('bad_magic', 'bad_version', 'bad_kind', 'bad_dtype', 'ip_bad_checksum', 'udp_bad_checksum',
                 'payload_length', 'bad_count'):
        assert drops[f'refused_{kind}'] == st.get(f'malformed.{kind}', 0), (kind, drops)
    assert drops['unknown_source'] == st.get('foreign.unknown_source', 0), drops
    assert drops['unknown_job'] == st.get('foreign.foreign_job', 0), drops
    assert drops['spoofed'] == st.get('foreign.spoofed_rank', 0), drops
    for k in ('duplicate', 'late', 'no_free_slot', 'too_narrow', 'result_expired', 'abandoned'):
        assert k in drops, (k, drops)
    assert sum(reds[f'shard{s}_results_sent'] for s in range(sc.shards)) == results, reds
    assert sum(reds[f'shard{s}_contribs'] for s in range(sc.shards)) == st['contrib'], reds
    for s in range(sc.shards):
        for k in ('packets', 'partials', 'resent', 'nacks_sent', 'elements', 'slots_in_use', 'slots_high',
                  'results_retained', 'evicted_for_room', 'dequeued', 'backpressured'):
            assert f'shard{s}_{k}' in reds, (k, reds)
    # One lcore, round robin: every packet runs to completion, so the switch made no ring at all
    # (test_rings_telemetry_when_staged covers the staged layout's rings).
    assert data['/prism/rings'] == {}, data['/prism/rings']
    jobs = data['/prism/jobs']
    assert jobs[f'job{sc.job}_chunks_completed'] == jobs[f'job{sc.job}_chunks_opened'] == man['chunks'] * 2, jobs
    assert jobs[f'job{sc.job}_chunks_in_flight'] == 0, jobs
    slots = data['/prism/slots']
    assert all(slots[f'shard{s}_capacity'] == 4096 for s in range(sc.shards)), slots
    arb = data['/prism/arbiter']
    assert all(arb[f'shard{s}_mode'] == 'round_robin' for s in range(sc.shards)), arb
    served = sum(arb[f'shard{s}_served_port{p}'] for s in range(sc.shards) for p in range(sc.ports))
    assert served == sum(reds[f'shard{s}_dequeued'] for s in range(sc.shards)) == st['contrib'], (arb, reds)


def run_with_telemetry(tmp_path, query, extra=None):
    """Starts the switch (no idle exit), waits until every RESULT is out, runs
    `query(prefix)`, then SIGTERM: clean exit 0 with a summary."""
    sc, man = telemetry_scenario(tmp_path, extra)
    _, results = expected_counters(sc, man)
    prefix = su.file_prefix('tel')
    proc = su.start_switch(sc, prefix)
    try:
        sock = su.telemetry_socket(prefix)
        assert su.wait_for(lambda: sock.exists() or proc.poll() is not None, 30), 'no telemetry socket'
        assert proc.poll() is None, proc.communicate()

        def done():
            d = su.telemetry_query(prefix, ['/prism/reducers'])['/prism/reducers']
            if d is None:  # the socket is up before the switch registers its commands
                return False
            return sum(d[f'shard{s}_results_sent'] for s in range(sc.shards)) >= results

        assert su.wait_for(done, 30, 0.1), 'the switch did not send every RESULT'
        data = query(prefix)
    finally:
        rc, out, err = su.stop_switch(proc)
        su.cleanup_prefix(prefix)
    assert rc == 0, (rc, out, err)
    s = su.parse_summary(out)
    assert s.header == f'prism-switch {su.SWITCH_ID} summary' and s.shard_total('results_sent') == results, out
    return sc, man, data


COMMANDS = ['/prism/ports', '/prism/drops', '/prism/reducers', '/prism/rings', '/prism/jobs', '/prism/slots',
            '/prism/arbiter']


def test_telemetry_socket(tmp_path):
    """The /prism/* commands over DPDK's telemetry socket (v2 protocol, spoken here)."""
    sc, man, data = run_with_telemetry(tmp_path, lambda prefix: su.telemetry_query(prefix, COMMANDS + ['/']))
    assert set(COMMANDS) <= set(data['/']), data['/']
    check_telemetry(data, sc, man)


@pytest.mark.parametrize('layout', ['shared_nothing', 'pipelined'])
def test_rings_telemetry_when_staged(tmp_path, layout):
    """A random arbiter keeps the VOQs even on one lcore (it must vary the order): /prism/rings
    lists a VOQ per (port, shard) (and, pipelined, a TX ring per port; shared nothing, each lcore
    sends on its own TX queue), all empty once every RESULT is out, and the arbiter reports its
    mode."""
    sc, man, data = run_with_telemetry(tmp_path, lambda prefix: su.telemetry_query(prefix, COMMANDS),
                                       extra={'arbiter': '{mode: random, seed: 3}', 'layout': layout})
    rings = data['/prism/rings']
    want = {f'voq_p{p}_s{s}' for p in range(sc.ports) for s in range(sc.shards)}
    if layout == 'pipelined':
        want |= {f'tx_p{p}' for p in range(sc.ports)}
    assert set(rings) == want, rings
    assert not any(rings.values()), rings
    assert all(data['/prism/arbiter'][f'shard{s}_mode'] == 'random' for s in range(sc.shards)), data['/prism/arbiter']


@pytest.mark.skipif(not os.access(TELEMETRY_SCRIPT, os.X_OK), reason=f'{TELEMETRY_SCRIPT} not installed')
def test_stock_dpdk_telemetry_script(tmp_path):
    import json

    def query(prefix):
        r = subprocess.run([TELEMETRY_SCRIPT, '-f', prefix], input='\n'.join(COMMANDS) + '\n', text=True,
                           capture_output=True, timeout=30)
        assert r.returncode == 0, (r.stdout, r.stderr)
        out = {}
        dec = json.JSONDecoder()
        text = r.stdout
        i = text.find('{')
        while i >= 0:
            obj, end = dec.raw_decode(text, i)
            if isinstance(obj, dict):
                out.update(obj)
            i = text.find('{', end)
        return out

    sc, man, data = run_with_telemetry(tmp_path, query)
    check_telemetry(data, sc, man)


@pytest.mark.parametrize('sig', [signal.SIGINT, signal.SIGHUP])
def test_signal_stops_cleanly_with_summary(tmp_path, sig):
    """SIGINT and SIGHUP (a closed terminal) stop the switch as SIGTERM does: exit 0, every
    RESULT sent, the summary printed."""
    sc = Scenario(tmp_path, ranks=2)
    man = sc.generate('fp16', 'kulisch', 100, 1)
    prefix = su.file_prefix('int')
    proc = su.start_switch(sc, prefix)
    try:
        def sent():  # every RESULT out (the telemetry socket is up before the commands are registered)
            d = su.telemetry_query(prefix, ['/prism/reducers'])['/prism/reducers'] if su.telemetry_socket(
                prefix).exists() else None
            return d is not None and d['shard0_results_sent'] >= 2 * man['chunks']
        assert su.wait_for(lambda: proc.poll() is not None or sent(), 30, 0.1), 'the switch sent no RESULTs'
        assert proc.poll() is None, proc.communicate()
    finally:
        rc, out, err = su.stop_switch(proc, sig)
        su.cleanup_prefix(prefix)
    assert rc == 0, (rc, out, err)
    run = su.SwitchRun(['prism-switch'], rc, out, err, sc)
    check_results(run, [man])
    assert run.summary.shard_total('results_sent') == 2 * man['chunks']
    assert 'INCOMPLETE' not in out  # reported only at an idle exit


def test_file_prefix_clash_is_named(tmp_path):
    """A second switch on the --file-prefix of one that runs is refused in one line that names the
    other process and says what to do (the EAL alone would say "Success"); the first runs on."""
    sc = Scenario(tmp_path, ranks=2)
    sc.generate('fp16', 'kulisch', 100, 1)
    prefix = su.file_prefix('clash')
    proc = su.start_switch(sc, prefix)
    try:
        sock = su.telemetry_socket(prefix)
        assert su.wait_for(lambda: sock.exists() or proc.poll() is not None, 30), 'the first switch did not start'
        r = su.run([su.SWITCH, *su.EAL_BASE, '-l', '0', '--file-prefix', prefix, '--', '--config', sc.config,
                    '--exit-when-idle', 100])
        assert r.returncode == 2, r.stdout + r.stderr
        assert f'pid {proc.pid}' in r.stderr and f'--file-prefix {prefix}' in r.stderr, r.stderr
        assert 'Success' not in r.stderr, r.stderr
        assert proc.poll() is None, 'the first switch stopped'
    finally:
        rc, out, err = su.stop_switch(proc)
        su.cleanup_prefix(prefix)
    assert rc == 0, (rc, out, err)


def test_lcores_the_eal_was_not_given_are_refused(tmp_path):
    """lcores: [0, 1] with the EAL given only -l 0: a one-line start-up error naming the lcore and
    what to do, not a silent run on one lcore."""
    sc = Scenario(tmp_path, ranks=2, lcores=[0, 1])
    sc.generate('fp16', 'kulisch', 100, 1)
    run = sc.run_switch(lcores='0')
    assert run.rc == 2, run.describe()
    assert 'lcore 1 is not one the EAL was given' in run.stderr and '-l 0-1' in run.stderr, run.describe()


# ------------------------------------------------------------ RX checksum offload
def test_rx_checksum_offload_on_net_tap(tmp_path):
    """net_tap verifies checksums on RX (RX checksum offload): the switch turns
    the offload on, takes the device's word for the good sums (counted in the
    summary) and still refuses a contribution whose UDP checksum is wrong.
    The frames come from prism-gen; the kernel sends them into the tap
    interface (scapy), so DPDK receives them."""
    su.require_binaries()
    scapy = pytest.importorskip('scapy.all')
    iface = f'prtap{os.getpid() % 100000}'
    cfg = tmp_path / 'sw.yaml'
    cfg.write_text('\n'.join([
        'switch: {id: 1, role: root}', 'ports:',
        f'  - {{id: 0, device: "net_tap0,iface={iface}", mac: "{su.port_mac(0)}", ip: {su.port_ip(0)}}}',
        'jobs:', '  - id: 7', '    members:'] +
        [f'      - {{rank: {r}, port: 0, mac: "{su.member_mac(r)}", ip: {su.member_ip(r)}}}' for r in range(2)]) +
        '\n')
    g = su.run([su.GEN, 'write', '--config', cfg, '--job', 7, '--dtype', 'fp32', '--policy', 'kulisch',
                '--elements', 64, '--ops', 2, '--pcap-dir', tmp_path / 'p', '--expected', tmp_path / 'exp'])
    assert g.returncode == 0, g.stderr
    good = [bytes(p) for p in scapy.rdpcap(str(tmp_path / 'p' / 'sw1.port0.pcap'))]
    assert len(good) == 4
    bad = bytearray(good[0])
    bad[41] ^= 1  # the UDP checksum's low byte
    prefix = su.file_prefix('tap')
    sw = subprocess.Popen([str(su.SWITCH), *su.EAL_BASE, '-l', '0', '--file-prefix', prefix,
                           '--log-level=pmd.net.tap:error', '--', '--config', str(cfg), '--exit-when-idle', '3000'],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 20
        while subprocess.run(['ip', 'link', 'show', iface], capture_output=True).returncode != 0:
            if sw.poll() is not None or time.time() > deadline:
                pytest.skip(f'net_tap did not create {iface}: ' + (sw.communicate()[0] if sw.poll() is not None
                                                                   else 'timed out'))
            time.sleep(0.1)
        time.sleep(0.5)  # the port starts after its interface appears
        for f in good + [bytes(bad)]:
            scapy.sendp(scapy.Ether(f), iface=iface, verbose=False)
        out = sw.communicate(timeout=60)[0]
    finally:
        if sw.poll() is None:
            sw.kill()
            sw.communicate()
        su.cleanup_prefix(prefix)
    assert sw.returncode == 0, out
    assert 'RX checksum offload on' in out, out
    s = su.parse_summary(out[out.index('prism-switch 1 summary'):])
    assert s.hw_checksums == 4, out  # the four good contributions: not summed again
    assert s.refused['udp_bad_checksum'] == 1, out  # marked bad by the device, refused by parse()
    assert s.shard_total('contribs') == 4 and s.jobs[7]['completed'] == 2, out
