"""The steering rule (docs/PROTOCOL.md, Steering), checked on captured frames: the tests of
libprism (test_rank.py) and of the client written from the document (test_client.py) capture what
the ranks send and receive and hand the frames to check_steering, which decodes them here (Ethernet,
IPv4, UDP, the PRISM header) and recomputes every packet's port from the document's words.
"""
from __future__ import annotations

import struct
from collections import Counter
from dataclasses import dataclass, field

# docs/PROTOCOL.md
CONTRIB, RESULT, JOIN, JOINED, QUERY, STATUS = 1, 3, 5, 6, 11, 12
RETRANSMIT = 1


@dataclass
class Steering:
    """What check_steering found in a capture of a switch's links."""
    sent: Counter = field(default_factory=Counter)         # kind -> packets towards the switch
    replies: Counter = field(default_factory=Counter)      # kind -> packets from the switch
    shards_used: set = field(default_factory=set)          # shard ports (minus udp_port) that packets went to
    retransmits: int = 0
    keys: set = field(default_factory=set)                 # (op, chunk) of the CONTRIBs
    wrong: list = field(default_factory=list)              # what broke the rule, in words


def check_steering(frames, switch_ips, udp_port: int, shards: int) -> Steering:
    """Every PRISM packet towards the switch (to one of `switch_ips`): a CONTRIB or a QUERY (about
    a chunk: PROTOCOL.md, Queries) to udp_port + (job + op + chunk) mod S, a JOIN to udp_port + job mod S (Python's integers do not wrap); every
    packet from the switch sent from udp_port itself. Frames are Ethernet/IPv4/UDP, parsed here."""
    st = Steering()
    for i, f in enumerate(frames):
        if len(f) < 14 + 20 + 8 + 32 or f[12:14] != b'\x08\x00' or f[23] != 17:
            continue
        ihl = (f[14] & 15) * 4
        src, dst = '.'.join(map(str, f[26:30])), '.'.join(map(str, f[30:34]))
        sport, dport = struct.unpack_from('>HH', f, 14 + ihl)
        p = f[14 + ihl + 8:]
        magic, version, kind, job, op, chunk = struct.unpack_from('>HBBIII', p)
        if magic != 0x5052 or version != 1:
            continue
        if dst in switch_ips:
            st.sent[kind] += 1
            if kind == CONTRIB:
                want = udp_port + (job + op + chunk) % shards
                st.keys.add((op, chunk))
                st.retransmits += bool(p[30] & RETRANSMIT)
            elif kind == QUERY:
                want = udp_port + (job + op + chunk) % shards
            elif kind == JOIN:
                want = udp_port + (job + 0 + 0) % shards
            else:
                st.wrong.append(f'frame {i}: kind {kind} sent to the switch')
                continue
            st.shards_used.add(dport - udp_port)
            if dport != want:
                st.wrong.append(f'frame {i}: kind {kind} job {job} op {op} chunk {chunk} to port {dport}, '
                                f'the rule says {want}')
        elif src in switch_ips:
            st.replies[kind] += 1
            if sport != udp_port:
                st.wrong.append(f'frame {i}: kind {kind} from the switch\'s port {sport}, not {udp_port}')
    return st
