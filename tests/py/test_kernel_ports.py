"""The switch's ports on Linux interfaces, through the network-namespace testbed
(scripts/testbed.py), and how an idle switch waits (`polling:`).

- net_af_xdp as a port kind: prism-rank allreduces through it in the bridge and the direct
  layouts, every rank's result
  compared bit for bit with the independent Python reference (prism_ref.py, as test_rank.py;
  with two lcores, the one RX queue a veth gives net_af_xdp feeding both);
  ARP and ping answered by the switch (the testbed checks both before every run).
- Frames above the MTU: a UDP GSO send (UDP_SEGMENT, 20 KiB in 1400-byte segments) from a rank's
  namespace. Not PRISM messages: the switch refuses every segment (bad_magic). Through
  net_af_packet with the testbed's offloads (the rank's interface segments), the switch sees the
  segments; without them the super-packet reaches net_af_packet whole, cut to its ring frame, and
  is dropped as `oversize` with the operator's hint in the summary (and a member that sent it is
  told NACK MALFORMED, naming the chunk its head holds); net_af_xdp sees segments
  without any offload set (a veth whose peer runs XDP does not pass GSO packets on).
- polling: adaptive (the default for kernel-interface ports) sleeps when idle (its counters say
  so) and still answers ping and reduces exactly after idling; polling: busy never sleeps.
No timing is asserted (tools/bench_ports.py and tools/bench_idle.py measure). Needs root; skips
without it.
"""
from __future__ import annotations

import math
import time

import pytest

import switch_util as su
from test_rank import allreduce_case, check_once, stop
from testbed import PY, impl, make_testbed  # noqa: F401

GSO_SEND = r'''
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_UDP, 103, 1400)   # UDP_SEGMENT: the kernel cuts the datagram into 1400-byte segments
s.sendto(b'x' * 20480, (sys.argv[1], 20562))
print('sent')
'''
SEGMENTS = math.ceil(20480 / 1400)

# A registered rank's GSO message of 10 CONTRIBs (job 7, op 900, chunks 0-9, 288 fp32 each: 1184-byte
# segments), from its member address; then what the switch answers within 2 s, as "kind status job chunk".
GSO_CONTRIBS = r'''
import socket, struct, sys
ip, sw = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((ip, 20562))
seg = []
for c in range(10):   # magic ver kind job op chunk sender group terms count dtype out policy enc transport exc flags status
    h = struct.pack('>HBBIIIHHHHBBBBBBBB', 0x5052, 1, 1, 7, 900, c, 0, 2, 1, 288, 1, 1, 2, 1, 2, 1, 0, 0)
    seg.append(h + bytes(288 * 4))
s.setsockopt(socket.IPPROTO_UDP, 103, len(seg[0]))
s.sendto(b''.join(seg), (sw, 20562))
s.settimeout(2)
try:
    while True:
        d = s.recv(2048)
        f = struct.unpack('>HBBIIIHHHHBBBBBBBB', d[:32])
        print(f[2], f[17], f[3], f[5])
except socket.timeout:
    print('done')
'''


def gso_send(tb) -> su.Summary:
    runs = tb.run([PY, '-c', GSO_SEND, '{switch_ip}'], ranks=[0], timeout=30)
    assert runs[0].rc == 0, runs[0].stderr
    time.sleep(0.5)   # the switch polls on its own time
    return stop(tb)['switch']


@pytest.mark.parametrize('layout,lcores', [('bridge', None), ('direct', None), ('bridge', '0-1')])
def test_af_xdp_allreduce_matches_the_reference(make_testbed, layout, lcores):
    tb = make_testbed(ranks=3, layout=layout, driver='af_xdp', lcores=lcores)
    assert 'net_af_xdp' in tb.switches[0].config.read_text()
    n = 64 * 288 * 2 + 5   # more than two windows of chunks
    allreduce_case(tb, n, 'fp32', 'kulisch', 'fp32', 11)
    allreduce_case(tb, 20000, 'bf16', 'kulisch', 'fp32', 12)
    t = tb.telemetry(tb.switches[0], ['/prism/lcores'])['/prism/lcores']
    if lcores:   # a veth has no combined channels: one queue, the other lcore served through its inbox
        assert t['port0_rx_queues'] == 1 and t['layout'] == 'shared_nothing', t
    exits = tb.stop_switches()
    assert exits['switch'].rc == 0, exits['switch'].stderr[-3000:]
    s = su.parse_summary(exits['switch'].stdout)
    chunks = sum(math.ceil(e / c) for e, c in ((n, 288), (20000, 288)))
    check_once(s, 3, n + 20000, chunks)
    assert not s.rx_dropped['oversize'] and not s.oversize, exits['switch'].stdout


@pytest.mark.parametrize('driver,offloads,want_oversize', [('af_packet', True, False), ('af_packet', False, True),
                                                           ('af_xdp', False, False)])
def test_gso_super_packets_are_segmented_or_refused_as_oversize(make_testbed, driver, offloads, want_oversize):
    tb = make_testbed(ranks=2, layout='bridge', driver=driver, offloads=offloads)
    s = gso_send(tb)
    text = f'{driver}, offloads {offloads}: {s.rx_dropped} {s.refused}'
    if want_oversize:
        # One frame: the super-packet cut short; counted once, with the hint, and nothing of it parsed on.
        assert s.rx_dropped['oversize'] == 1 and s.oversize == {0: 1}, text
        assert s.refused['bad_magic'] == 0, text
    else:
        # Every 1400-byte segment arrived on its own and was refused as what it is: not PRISM's.
        assert s.rx_dropped['oversize'] == 0 and not s.oversize, text
        assert s.refused['bad_magic'] == SEGMENTS, text
    assert s.shard_total('contribs') == 0, text


def test_an_oversize_message_from_a_member_is_nacked_malformed(make_testbed):
    """Through net_af_packet with the offloads left alone, a member's GSO message of 10 CONTRIBs
    arrives whole, cut to the ring frame: one `oversize` drop, and the member is told NACK
    MALFORMED for the chunk its head names (libprism then sends plain datagrams)."""
    tb = make_testbed(ranks=2, layout='bridge', driver='af_packet', offloads=False)
    r = tb.ranks[0]
    runs = tb.run([PY, '-c', GSO_CONTRIBS, r.ip, r.switch_ip], ranks=[0], timeout=30)
    assert runs[0].rc == 0, runs[0].stderr
    answers = runs[0].stdout.split('\n')
    s = stop(tb)['switch']
    assert s.rx_dropped['oversize'] == 1 and s.oversize == {0: 1}, (s.rx_dropped, runs[0].stdout)
    assert answers[0] == '4 1 7 0', runs[0].stdout   # NACK, MALFORMED, job 7, chunk 0
    assert s.shard_total('contribs') == 0


def test_adaptive_switch_sleeps_then_answers_and_reduces(make_testbed):
    tb = make_testbed(ranks=2, layout='bridge')   # kernel-interface ports: adaptive by default
    sw = tb.switches[0]
    t = tb.telemetry(sw, ['/prism/lcores'])['/prism/lcores']
    assert t['polling'] == 'adaptive', t
    time.sleep(1.5)   # idle
    t = tb.telemetry(sw, ['/prism/lcores'])['/prism/lcores']
    assert t['lcore0_sleeps'] > 0 and t['lcore0_slept_us'] > 0, t
    tb.check_arp()   # ping and ARP after the idle period
    allreduce_case(tb, 5000, 'fp32', 'kulisch', 'fp32', 21)
    time.sleep(1.5)   # idle again: the retention and op timers still run
    allreduce_case(tb, 5000, 'fp16', 'kulisch', 'fp16', 22)
    s = stop(tb)['switch']
    assert s.polling[0]['sleeps'] > 0, s.polling
    check_once(s, 2, 10000, math.ceil(5000 / 288) + math.ceil(5000 / 480))   # fp16 results: 480 a chunk


def test_busy_switch_never_sleeps(make_testbed):
    tb = make_testbed(ranks=2, layout='bridge', settings={'polling': 'busy'})
    time.sleep(0.5)
    t = tb.telemetry(tb.switches[0], ['/prism/lcores'])['/prism/lcores']
    assert t['polling'] == 'busy' and t['lcore0_sleeps'] == 0, t
    allreduce_case(tb, 5000, 'fp32', 'kulisch', 'fp32', 23)
    s = stop(tb)['switch']
    assert not s.polling, s.polling
