"""Frames built by hand (Ethernet, IPv4 with its checksum, UDP with its checksum, a PRISM header
from docs/PROTOCOL.md's layout), pcap files of them for prism-flood, and a host of one's own on
a testbed's bridge: what tests/py/test_hostile.py and tools/bench_hostile.py send at the switch.
"""
from __future__ import annotations

import json
import struct
import subprocess
from pathlib import Path

from minimal_client import (CONTRIB, EXC_IEEE, ENC_DTYPE, ENC_OUT, HDR, MAGIC, POLICY, RESULT,  # noqa: F401
                            TRANSPORT_KULISCH, VERSION)

QUERY = 11


def mac_bytes(mac: str) -> bytes:
    return bytes(int(x, 16) for x in mac.split(':'))


def ip_bytes(ip: str) -> bytes:
    return bytes(int(x) for x in ip.split('.'))


def csum(data: bytes) -> int:
    if len(data) % 2:
        data += b'\0'
    s = sum(struct.unpack(f'>{len(data) // 2}H', data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def frame(src_mac: str, dst_mac: str, src_ip: str, dst_ip: str, sport: int, dport: int, payload: bytes, *,
          bad_ip_sum: bool = False, ip_total: int | None = None) -> bytes:
    udp_len = 8 + len(payload)
    pseudo = ip_bytes(src_ip) + ip_bytes(dst_ip) + struct.pack('>BBH', 0, 17, udp_len)
    u = struct.pack('>HHHH', sport, dport, udp_len, 0) + payload
    us = csum(pseudo + u) or 0xFFFF
    u = u[:6] + struct.pack('>H', us) + u[8:]
    total = ip_total if ip_total is not None else 20 + udp_len
    iph = struct.pack('>BBHHHBBH4s4s', 0x45, 0, total, 0, 0x4000, 64, 17, 0, ip_bytes(src_ip), ip_bytes(dst_ip))
    s = csum(iph) ^ (0xFFFF if bad_ip_sum else 0)
    iph = iph[:10] + struct.pack('>H', s) + iph[12:]
    return mac_bytes(dst_mac) + mac_bytes(src_mac) + b'\x08\x00' + iph + u


def header(kind: int, job: int, op: int, chunk: int, sender: int, group: int, terms: int, count: int,
           flags: int = 0, status: int = 0, policy: str = 'kulisch') -> bytes:
    return HDR.pack(MAGIC, VERSION, kind, job, op, chunk, sender, group, terms, count, 1 if count else 0,
                    1 if count else 0, POLICY[policy] if count or kind == QUERY else 0,
                    (ENC_OUT if kind == RESULT else ENC_DTYPE) if count else 0, TRANSPORT_KULISCH if count or kind == QUERY else 0,
                    EXC_IEEE if count or kind == QUERY else 0, flags, status)


def query(job: int, op: int, sender: int, group: int) -> bytes:
    """A QUERY: the chunk's CONTRIB header without its elements (count 0, flags 0)."""
    return HDR.pack(MAGIC, VERSION, QUERY, job, op, 0, sender, group, 1, 0, 1, 1, POLICY['kulisch'], ENC_DTYPE,
                    TRANSPORT_KULISCH, EXC_IEEE, 0, 0)


def write_pcap(path: Path, frames: list[bytes]):
    with open(path, 'wb') as f:
        f.write(struct.pack('<IHHiIII', 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for fr in frames:
            f.write(struct.pack('<IIII', 0, 0, len(fr), len(fr)) + fr)


def link_stats(ns: str, dev: str) -> dict:
    out = subprocess.run(['ip', '-n', ns, '-s', '-j', 'link', 'show', dev], capture_output=True, text=True,
                         check=True).stdout
    st = json.loads(out)[0]['stats64']
    return {'rx_bytes': st['rx']['bytes'], 'rx_packets': st['rx']['packets'],
            'tx_bytes': st['tx']['bytes'], 'tx_packets': st['tx']['packets']}


def sh(*args, ns: str | None = None):
    cmd = (['ip', 'netns', 'exec', ns] if ns else []) + [str(a) for a in args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, f'{" ".join(cmd)}: exit {r.returncode}\n{r.stdout}{r.stderr}'
    return r


def add_host(tb, name: str, ip: str) -> tuple[str, str]:
    """A namespace of the testbed's (torn down with it) on its bridge br0, with address ip/24 and
    interface eth0, that has pinged the switch's port; returns (namespace, MAC)."""
    sw = tb.switches[0]
    ns = tb.switch_ns(name)
    tb._netns(ns)
    tb._veth(sw.ns, f'{name}0', ns, 'eth0')
    sh('ip', '-n', sw.ns, 'link', 'set', f'{name}0', 'master', 'br0', 'up')
    sh('ip', '-n', ns, 'addr', 'add', f'{ip}/24', 'dev', 'eth0')
    sh('ip', '-n', ns, 'link', 'set', 'eth0', 'up')
    sh('ping', '-c', '1', '-W', '5', sw.ports[0]['ip'], ns=ns)
    return ns, json.loads(sh('ip', '-n', ns, '-j', 'link', 'show', 'eth0').stdout)[0]['address']
