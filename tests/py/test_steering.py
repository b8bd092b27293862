"""Shared-nothing lcores on real steering (issue 19): ranks in their own network
namespaces, on a bridge, send to a prism-switch whose one port is a multi-queue
net_tap with two lcores. Each shard's UDP port is steered by the tap's steering
program to the queue of the lcore that owns it; each lcore runs its shards to
completion. What the switch reports per lcore is checked against a capture of
what the ranks sent, decoded here (UDP destination ports, PRISM header), and
against the steering rule written again from docs/PROTOCOL.md.
"""
import re
import struct
from collections import Counter
from pathlib import Path

import pytest

import switch_util as su
from testbed import Capture, make_testbed, read_pcap  # noqa: F401

BASE = 20562
CONTRIB = 1


def shard_of(job: int, op: int, chunk: int, shards: int) -> int:
    """docs/PROTOCOL.md, Steering: (job + op + chunk) mod S, without wrapping."""
    return (job + op + chunk) % shards


def segments(payload: bytes) -> list[bytes]:
    """The PRISM datagrams in a UDP payload: one, or several when the capture saw a UDP GSO message
    before the kernel cut it (equal-size segments, the last maybe shorter; each starts with the
    header's magic and version, and the same job)."""
    for k in range(32, len(payload) - 8):
        if payload[k:k + 3] == b'PR\x01' and payload[k + 4:k + 8] == payload[4:8]:
            return [payload[i:i + k] for i in range(0, len(payload), k)]
    return [payload]


def sent_by_port(pcap: Path) -> tuple[Counter, int]:
    """UDP destination port -> IPv4/UDP PRISM datagrams a rank sent towards the switch ('other': every
    other frame, ARP and ping among them); and how many of the CONTRIBs were sent to a port other
    than the rule's. A GSO message captured whole counts as the datagrams it holds."""
    by_port, off_rule = Counter(), 0
    for f in read_pcap(pcap):
        if len(f) < 14 + 20 + 8 + 32 or f[12:14] != b'\x08\x00' or f[23] != 17:
            by_port['other'] += 1
            continue
        ihl = (f[14] & 0x0f) * 4
        udp = 14 + ihl
        dport, ulen = struct.unpack('>HH', f[udp + 2:udp + 6])
        h = udp + 8
        if f[h:h + 2] != b'PR' or not BASE <= dport < BASE + 64:
            by_port['other'] += 1
            continue
        for d in segments(f[h:udp + ulen]):
            by_port[dport] += 1
            kind = d[3]
            job, op, chunk = struct.unpack('>III', d[4:16])
            if kind == CONTRIB and dport != BASE + shard_of(job, op, chunk, SHARDS):
                off_rule += 1
    return by_port, off_rule


SHARDS = 4


def run_ranks(tb, config: str, extra=()):
    runs = tb.run([str(su.BUILD / 'app' / 'prism-rank'), '--config', config, '--rank', '{rank}',
                   '--size', '128KiB', '--repeat', '2', '--check', *extra], timeout=120)
    for r in runs:
        assert r.rc == 0, (r.rank, r.stdout[-2000:], r.stderr[-2000:])
        assert 'identical to the reference model' in r.stdout, r.stdout
    return runs


@pytest.mark.parametrize('case', ['steered', 'client_ignores_rule', 'random_arbiter'])
def test_tap_steering_puts_each_shard_on_its_lcore(make_testbed, tmp_path, case):
    """steered: every CONTRIB reaches the lcore that owns its shard on that lcore's own queue (no
    packet crosses lcores), and each shard's packets are exactly the frames sent to its port.
    client_ignores_rule: ranks configured with one shard send everything to the base port; the tap
    puts it all on lcore 0's queue, which passes the other lcore's shards to it through its inbox,
    counted, and every result is still right. random_arbiter: the order-varying arbiter works on
    every lcore (VOQs per lcore), results bit for bit the reference's."""
    settings = {'reducers': f'{{shards: {SHARDS}}}', 'retention_ms': '5000'}
    if case == 'random_arbiter':
        settings['arbiter'] = '{mode: random, seed: 5}'
    tb = make_testbed(ranks=3, layout='bridge', tap=True, lcores='0-1', settings=settings)
    sw = tb.switches[0]
    config = '{config}'
    if case == 'client_ignores_rule':
        text = sw.config.read_text()
        assert f'reducers: {{shards: {SHARDS}}}' in text
        one = tmp_path / 'one_shard.yaml'
        one.write_text(text.replace(f'reducers: {{shards: {SHARDS}}}', 'reducers: {shards: 1}'))
        config = str(one)
    # What each rank sends, on the bridge's port to it (frames it forwards never show on br0 itself).
    caps = [Capture(r.switch_if, tmp_path / f'{r.switch_if}.pcap', ns=sw.ns, direction='in') for r in tb.ranks]
    try:
        run_ranks(tb, config)
    finally:
        pcaps = [c.stop() for c in caps]
    t = tb.telemetry(sw, ['/prism/lcores', '/prism/ports'])
    lc, ports = t['/prism/lcores'], t['/prism/ports']
    assert lc['layout'] == 'shared_nothing'
    assert lc['port0_steering'] == 'tap_program', lc
    assert lc['port0_rx_queues'] == 2 and lc['port0_tx_queues'] == 2, lc
    assert lc['lcore0_shards'] == '0,2' and lc['lcore1_shards'] == '1,3', lc
    by_port, off_rule = Counter(), 0
    for pcap in pcaps:
        b, o = sent_by_port(pcap)
        by_port += b
        off_rule += o
    shard_packets = {s: lc[f'lcore{s % 2}_shard{s}_packets'] for s in range(SHARDS)}
    if case == 'client_ignores_rule':
        assert set(by_port) - {'other'} == {BASE}, by_port   # the ranks' library used S = 1: all to the base port
        assert off_rule > 0
        assert lc['lcore1_port0_q1_rx_packets'] == 0, lc   # the base port is shard 0's: queue 0
        moved = shard_packets[1] + shard_packets[3]
        assert moved > 0 and lc['lcore0_dispatched'] == moved, (lc, shard_packets)
        assert lc['lcore1_inbox_packets'] == moved, lc
    else:
        assert off_rule == 0, 'libprism sent a CONTRIB to another port than its shard\'s'
        assert set(by_port) - {'other'} == {BASE + s for s in range(SHARDS)}, by_port
        assert lc['lcore0_dispatched'] == 0 and lc['lcore1_dispatched'] == 0, lc
        assert lc['lcore0_inbox_packets'] == 0 and lc['lcore1_inbox_packets'] == 0, lc
        for s in range(SHARDS):   # every frame to a shard's port, and nothing else, reached that shard
            assert shard_packets[s] == by_port[BASE + s], (s, shard_packets, by_port)
        # lcore 1's queue holds its shards' frames only; lcore 0's also every frame that is not
        # PRISM's (the ARP and pings it answers among them)
        assert lc['lcore1_port0_q1_rx_packets'] == by_port[BASE + 1] + by_port[BASE + 3], lc
        # (the switch answered ARP and pings before the capture began too: count them from its side)
        not_prism = ports['port0_rx_packets'] - ports['port0_rx_to_reducers']
        assert lc['lcore0_port0_q0_rx_packets'] == by_port[BASE] + by_port[BASE + 2] + not_prism, (lc, by_port)
    exits = tb.stop_switches()
    summary = su.parse_summary(exits[sw.name].stdout)
    assert sorted(summary.lcores) == [0, 1] and summary.lcores[1]['shards'] == [1, 3], exits[sw.name].stdout
    # Nothing of PRISM's refused (ICMP errors from a rank that had exited are not for the switch);
    # a retransmission that overtook its op's completion is a duplicate, nothing else.
    assert set(summary.rx_dropped) <= {'not_for_us'}, exits[sw.name].stdout
    assert set(summary.shard_dropped) <= {'duplicate'}, exits[sw.name].stdout


def test_one_queue_device_dispatches_in_software(make_testbed, tmp_path):
    """net_af_packet (one queue) on two lcores: lcore 0 polls the port and passes lcore 1's shards to
    it; lcore 1 runs them and sends their RESULTs on its own TX queue... or, where the device has one
    TX queue, on the shared one under a lock. Results bit for bit the reference's."""
    tb = make_testbed(ranks=2, layout='bridge', lcores='0-1', settings={'reducers': '{shards: 2}'})
    sw = tb.switches[0]
    run_ranks(tb, '{config}')
    lc = tb.telemetry(sw, ['/prism/lcores'])['/prism/lcores']
    assert lc['port0_steering'] == 'software' and lc['port0_rx_queues'] == 1, lc
    assert 'lcore1_port0_q1_rx_packets' not in lc, lc   # lcore 1 has no queue of its own
    assert lc['lcore1_shard1_packets'] > 0 and lc['lcore0_dispatched'] == lc['lcore1_inbox_packets'] \
        == lc['lcore1_shard1_packets'], lc
