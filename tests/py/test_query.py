"""QUERY and STATUS (docs/PROTOCOL.md, Queries) through the real switch.

Frames are built with scapy and struct from PROTOCOL.md's layout alone and
replayed through prism-switch on a net_pcap port; what it sends back is
decoded with scapy and struct too, never with PRISM's parser, and checked
field by field against PROTOCOL.md: a STATUS HELD or MISSING with the terms
received and the bitmap of the members lacking while the chunk is open, a
STATUS MISSING with terms 0 for a chunk never seen, the RESULT again (with
RETRANSMIT) for a completed chunk, a NACK MALFORMED for a QUERY with a
count, and nothing at all for a spoofed QUERY.
"""
from __future__ import annotations

import struct

import numpy as np
import pytest

import switch_util as su
from switch_util import Scenario

scapy = pytest.importorskip('scapy.all')
from scapy.layers.inet import IP, UDP  # noqa: E402
from scapy.layers.l2 import Ether  # noqa: E402

# ---------------------------------------------------------------- PROTOCOL.md
HDR = struct.Struct('>HBBIIIHHHHBBBBBBBB')
FIELDS = ('magic', 'version', 'kind', 'job', 'op', 'chunk', 'sender', 'group', 'terms', 'count', 'dtype',
          'out_dtype', 'policy', 'encoding', 'transport', 'exceptions', 'flags', 'status')
CONTRIB, RESULT, NACK, QUERY, STATUS = 1, 3, 4, 11, 12
MISSING, HELD = 0, 1                 # STATUS's status byte
RETRANSMIT, LAST_CHUNK = 1, 2
MALFORMED = 1                        # NACK reason
PORT = 20562
JOB, GROUP, N = 7, 4, 16
# fp32 in and out, KULISCH_FIXED, encoding 1 (dtype), transport KULISCH, exceptions IEEE.
DESC = dict(dtype=1, out_dtype=1, policy=2, encoding=1, transport=2, exceptions=1)


def header(**kw) -> bytes:
    h = dict(magic=0x5052, version=1, kind=CONTRIB, job=JOB, op=0, chunk=0, sender=0, group=GROUP, terms=1,
             count=0, flags=0, status=0, **DESC)
    h.update(kw)
    return HDR.pack(*(h[f] for f in FIELDS))


def to_switch(payload: bytes, *, mac: str, ip: str) -> Ether:
    return Ether(src=mac, dst=su.port_mac(0)) / IP(src=ip, dst=su.port_ip(0), flags='DF') / \
        UDP(sport=PORT, dport=PORT) / payload   # one shard: every chunk's port is udp_port


def from_rank(r: int, payload: bytes) -> Ether:
    return to_switch(payload, mac=su.member_mac(r), ip=su.member_ip(r))


def inputs(r: int) -> np.ndarray:
    return (np.arange(N, dtype=np.float32) * 0.5 + r + 1).astype('<f4')


def contrib(r: int, op: int) -> Ether:
    return from_rank(r, header(op=op, sender=r, count=N, flags=LAST_CHUNK) + inputs(r).tobytes())


def query(r: int, op: int, **kw) -> bytes:
    """Rank r's QUERY: its CONTRIB's header with count 0, terms 1, flags 0 and no body."""
    return header(kind=QUERY, op=op, sender=r, terms=1, count=0, flags=0, **kw)


def bitmap(ranks) -> bytes:
    b = bytearray((GROUP + 7) // 8)
    for r in ranks:
        b[r // 8] |= 1 << (r % 8)
    return bytes(b)


def decode(pkt) -> dict:
    """A frame the switch sent, by hand: addresses, checksums recomputed by scapy, the header, the body."""
    assert pkt.haslayer(UDP), pkt.summary()
    ip, udp = pkt[IP], pkt[UDP]
    rebuilt = Ether(bytes(pkt))
    del rebuilt[IP].chksum, rebuilt[UDP].chksum
    rebuilt = Ether(bytes(rebuilt))
    assert (rebuilt[IP].chksum, rebuilt[UDP].chksum) == (ip.chksum, udp.chksum), 'a checksum is wrong'
    raw = bytes(udp.payload)
    assert len(raw) >= 32 and udp.len == 8 + len(raw)
    d = dict(zip(FIELDS, HDR.unpack(raw[:32])))
    d.update(body=raw[32:], eth_src=pkt[Ether].src, eth_dst=pkt[Ether].dst, ip_src=ip.src, ip_dst=ip.dst,
             sport=udp.sport, dport=udp.dport, df=bool(ip.flags & 2))
    return d


def test_query_answered_by_the_chunks_state(tmp_path):
    sc = Scenario(tmp_path, ranks=GROUP, ports=1)
    sc.pcap_dir.mkdir(parents=True, exist_ok=True)
    spoofs = [from_rank(1, query(2, 5)),                                                # rank 1 claims rank 2
              to_switch(query(3, 5), mac='02:00:00:00:77:00', ip=su.member_ip(3))]     # rank 3's IP, another MAC
    frames = ([from_rank(0, query(0, 6)),       # a chunk never seen: MISSING, terms 0, no body
               contrib(0, 5),
               from_rank(0, query(0, 5)),       # held: HELD, terms 1, ranks 1-3 lacking
               from_rank(1, query(1, 5))]       # not held: MISSING, the same bitmap
              + spoofs
              + [from_rank(2, query(2, 5)[:22] + struct.pack('>H', 1) + query(2, 5)[24:]),  # count 1: malformed
                 contrib(1, 5), contrib(2, 5), contrib(3, 5),
                 from_rank(3, query(3, 5))])    # complete: the RESULT again, RETRANSMIT set
    scapy.wrpcap(str(sc.rx_pcap(0)), [Ether(bytes(f)) for f in frames])
    run = sc.run_switch()
    assert run.rc == 0, run.describe()
    out = [decode(p) for p in scapy.rdpcap(str(sc.tx_pcap(0))) if p.haslayer(UDP)]

    for d in out:   # every reply: from the port, udp_port to the member's port, to the member it answers
        assert (d['magic'], d['version']) == (0x5052, 1)
        assert (d['eth_src'], d['ip_src'], d['sport']) == (su.port_mac(0), su.port_ip(0), PORT), d
        r = [r for r in range(GROUP) if su.member_ip(r) == d['ip_dst']]
        assert r and d['eth_dst'] == su.member_mac(r[0]) and d['dport'] == PORT and d['df'], d
        d['rank'] = r[0]
    statuses = [d for d in out if d['kind'] == STATUS]
    assert [(d['rank'], d['op']) for d in statuses] == [(0, 6), (0, 5), (1, 5)], out
    for d, (status, terms, body) in zip(statuses, [(MISSING, 0, b''), (HELD, 1, bitmap([1, 2, 3])),
                                                   (MISSING, 1, bitmap([1, 2, 3]))]):
        want = dict(job=JOB, chunk=0, sender=su.SWITCH_ID, group=GROUP, terms=terms, count=0, flags=0,
                    status=status, body=body, **DESC)
        assert {k: d[k] for k in want} == want, d
    nacks = [d for d in out if d['kind'] == NACK]
    assert [(d['rank'], d['status'], d['op'], d['count'], d['terms']) for d in nacks] == [(2, MALFORMED, 5, 0, 0)]
    results = [d for d in out if d['kind'] == RESULT]
    assert sorted(d['rank'] for d in results) == [0, 1, 2, 3, 3], results
    want_sum = sum(inputs(r).astype(np.float64) for r in range(GROUP)).astype('<f4').tobytes()
    first = [d for d in results if not d['flags'] & RETRANSMIT]
    again = [d for d in results if d['flags'] & RETRANSMIT]
    assert len(first) == 4 and len(again) == 1 and again[0]['rank'] == 3
    for d in results:
        assert (d['op'], d['terms'], d['count'], d['body']) == (5, GROUP, N, want_sum), d
    # The very header every member got, RETRANSMIT set; the very bytes.
    assert {k: v for k, v in again[0].items() if k not in ('flags', 'rank', 'eth_dst', 'ip_dst')} == \
        {k: v for k, v in first[0].items() if k not in ('flags', 'rank', 'eth_dst', 'ip_dst')}
    assert again[0]['flags'] == first[0]['flags'] | RETRANSMIT

    s = run.summary
    assert s.shards[0]['queries'] == 4 and s.shards[0]['statuses_sent'] == 3, run.describe()
    assert s.shards[0]['resent'] == 1 and s.shards[0]['contribs'] == GROUP, run.describe()
    assert s.rx_dropped['spoofed'] == 2, run.describe()
    assert s.jobs[JOB]['opened'] == s.jobs[JOB]['completed'] == 1, run.describe()   # no QUERY opened a slot
