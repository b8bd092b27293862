"""The Wireshark dissector tools/wireshark/prism.lua against PRISM's own parser.

Two independent readings of the same bytes: `prism-gen dump` (the C++ codec in
lib/proto) and tshark running the Lua dissector (written from docs/PROTOCOL.md).
Captures come from prism-gen (CONTRIBs, with faults) and from scapy (RESULTs
with sidebands, NACKs, Kulisch partials, JOINs and JOINEDs, malformed
headers), plus the worked example bytes printed in PROTOCOL.md.

Wireshark already has a protocol whose filter name is "prism" (the 802.11 Prism
capture header), so the Lua protocol is registered as "prism_wire"; its fields
are prism.* as documented in tools/wireshark/README.md.

Skips (never fails) when tshark, or a tshark with Lua, is missing.
"""
from __future__ import annotations

import json
import math
import os
import re
import shutil
import struct
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get('PRISM_BUILD') or Path(__file__).resolve().parents[2] / 'build')
GEN = BUILD / 'app' / 'prism-gen'
LUA = REPO / 'tools' / 'wireshark' / 'prism.lua'
PROTOCOL_MD = REPO / 'docs' / 'PROTOCOL.md'
CONFIG = REPO / 'configs' / 'reference.yaml'
PROTO = 'prism_wire'  # the Lua protocol's filter name (module of its preferences)
PORT = 20562


def _find_tshark():
    t = shutil.which('tshark')
    if t:
        return t
    return '/usr/bin/tshark' if os.access('/usr/bin/tshark', os.X_OK) else None


TSHARK = _find_tshark()


@pytest.fixture(scope='module', autouse=True)
def _tshark_with_lua():
    if not TSHARK:
        pytest.skip('tshark not installed')
    v = subprocess.run([TSHARK, '-v'], capture_output=True, text=True, timeout=60)
    if v.returncode != 0 or 'without Lua' in v.stdout or 'with Lua' not in v.stdout:
        pytest.skip('tshark has no Lua support')


def require_gen():
    if not (GEN.is_file() and os.access(GEN, os.X_OK)):
        pytest.skip(f'prism-gen not found at {GEN} (build first, or set PRISM_BUILD)')


# --------------------------------------------------------------------------
# Codes, from docs/PROTOCOL.md and docs/ARITHMETIC.md

KIND = {1: 'CONTRIB', 2: 'PARTIAL', 3: 'RESULT', 4: 'NACK', 5: 'JOIN', 6: 'JOINED', 7: 'ALLOC', 8: 'ALLOCATED',
        9: 'LEAVE', 10: 'LEFT', 11: 'QUERY', 12: 'STATUS'}
JOIN, JOINED, COMPLETE = 5, 6, 1
ALLOC, ALLOCATED, LEAVE, LEFT = 7, 8, 9, 10        # job pools
JOB_KINDS = (JOIN, JOINED, ALLOC, ALLOCATED, LEAVE, LEFT)   # no descriptor, op a nonce
QUERY, STATUS, MISSING, HELD = 11, 12, 0, 1       # queries
FORMAT = {1: 'fp32', 2: 'fp16', 3: 'bf16', 4: 'e4m3fn', 5: 'e4m3fnuz', 6: 'e5m2', 7: 'e5m2fnuz', 8: 'int8',
          9: 'int32'}
FORMAT_CODE = {v: k for k, v in FORMAT.items()}
FORMAT_BYTES = {1: 4, 2: 2, 3: 2, 4: 1, 5: 1, 6: 1, 7: 1, 8: 1, 9: 4}
POLICY = {1: 'FP32_ARRIVAL', 2: 'KULISCH_FIXED', 3: 'FP32_BINOMIAL'}
TRANSPORT = {1: 'ROUNDED', 2: 'KULISCH', 3: 'AUTO'}
EXCEPTIONS = {1: 'IEEE', 2: 'SATURATE'}
NACK_REASON = {1: 'MALFORMED', 2: 'UNKNOWN_JOB', 3: 'NOT_A_MEMBER', 4: 'DESCRIPTOR_MISMATCH',
               5: 'ACCUMULATOR_TOO_NARROW', 6: 'NO_FREE_SLOT', 7: 'RESULT_EXPIRED', 8: 'OP_ABANDONED',
               9: 'POOL_FULL', 10: 'GROUP_TOO_LARGE', 11: 'OUT_OF_POOL', 12: 'RANK_TAKEN', 13: 'CHUNK_TOO_LARGE',
               14: 'SWITCH_STOPPING'}
# Lane unit exponents: the input format's smallest subnormal.
UNIT = {1: -149, 2: -24, 3: -133, 4: -9, 5: -10, 6: -16, 7: -17, 8: 0, 9: 0}
# fp8: exponent bits, mantissa bits, bias, how NaN/Inf are encoded.
FP8 = {4: (4, 3, 7, 'fn'), 5: (4, 3, 8, 'fnuz'), 6: (5, 2, 15, 'ieee'), 7: (5, 2, 16, 'fnuz')}

SIDE_NAN, SIDE_PINF, SIDE_NINF, SIDE_NZERO, SIDE_INVALID, SIDE_OVERFLOW, SIDE_SIGN = 1, 2, 4, 8, 16, 32, 128

HEADER_KEYS = ['kind', 'job', 'op', 'chunk', 'sender', 'group', 'terms', 'count', 'dtype', 'out_dtype', 'policy',
               'encoding', 'transport', 'exceptions', 'flags', 'status']

# prism-gen dump's refusal -> the expert info the dissector must raise for it.
REFUSAL_EXPERT = {
    'short_header': {'prism.short_header'},
    'bad_magic': {'prism.bad_magic'},
    'bad_version': {'prism.bad_version'},
    'bad_kind': {'prism.bad_code'},
    # (an unknown code; on a JOIN or JOINED, any non-zero descriptor byte)
    'bad_dtype': {'prism.bad_code', 'prism.bad_descriptor'},
    'bad_out_dtype': {'prism.bad_code', 'prism.bad_descriptor'},
    'bad_policy': {'prism.bad_code', 'prism.bad_descriptor'},
    'bad_encoding': {'prism.bad_encoding', 'prism.bad_code', 'prism.bad_descriptor'},
    'bad_transport': {'prism.bad_code', 'prism.bad_descriptor'},
    'bad_exceptions': {'prism.bad_code', 'prism.bad_descriptor'},
    'bad_flags': {'prism.bad_flags'},
    'bad_group': {'prism.bad_group'},
    'bad_terms': {'prism.bad_terms'},
    'bad_count': {'prism.bad_count'},
    'payload_length': {'prism.bad_length'},
    'bad_fragment': {'prism.bad_fragment'},
    'bad_partial': {'prism.bad_lane'},
    'bad_nack_reason': {'prism.bad_code'},
    'bad_status': {'prism.bad_status'},
}
ERROR_EXPERTS = sorted(set().union(*REFUSAL_EXPERT.values()) | {'prism.bad_status'})

FIELDS = [
    'frame.number', 'ip.checksum.status', 'udp.checksum.status', '_ws.malformed.expert',
    '_ws.malformed.dissector_bug', '_ws.lua.error',
    '_ws.expert.message',
    'prism.magic', 'prism.version', 'prism.kind', 'prism.job', 'prism.op', 'prism.chunk', 'prism.sender',
    'prism.group', 'prism.terms', 'prism.count', 'prism.dtype', 'prism.out_dtype', 'prism.policy', 'prism.encoding',
    'prism.transport', 'prism.exceptions', 'prism.flags', 'prism.flags.retransmit', 'prism.flags.last_chunk',
    'prism.flags.sideband', 'prism.flags.reserved', 'prism.status', 'prism.status.overflow', 'prism.status.invalid',
    'prism.status.nan_input', 'prism.nack_reason',
    'prism.elements', 'prism.elements.count', 'prism.elements.length', 'prism.elements.format',
    'prism.element.fp32', 'prism.element.value', 'prism.element.int8', 'prism.element.int32',
    'prism.sideband', 'prism.sideband.status',
    'prism.first_lane', 'prism.chunk_lanes', 'prism.lane', 'prism.lane.index', 'prism.lane.side',
    'prism.lane.sign', 'prism.lane.n', 'prism.lane.offset', 'prism.lane.magnitude', 'prism.lane.value',
    'prism.retransmit', 'prism.nack', 'prism.result_status',
    'prism.missing', 'prism.missing.rank', 'prism.missing.children', '_ws.col.Info',
    'prism.nonce', 'prism.first_op', 'prism.fresh_op', 'prism.rank', 'prism.ranks_joined', 'prism.status.complete',
    'prism.status.joined_reserved', 'prism.joined', 'prism.joined.rank', 'prism.joined.missing',
    'prism.bad_session', 'prism.session_complete',
    'prism.pool', 'prism.shards', 'prism.still_bound', 'prism.slot_quota', 'prism.idle_timeout_ms',
    'prism.query_status',
] + ERROR_EXPERTS


# --------------------------------------------------------------------------
# Running the tools

def tshark(pcap: Path, *opts: str, fields=FIELDS) -> list[dict]:
    """One dict per frame: field -> list of string values (tshark -T json -e)."""
    cmd = [TSHARK, '-n', '-r', str(pcap), '-X', f'lua_script:{LUA}',
           '-o', 'ip.check_checksum:TRUE', '-o', 'udp.check_checksum:TRUE', *opts, '-T', 'json']
    for f in fields:
        cmd += ['-e', f]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f'tshark failed ({r.returncode}): {r.stderr}'
    assert 'Lua' not in r.stderr, f'Lua error loading the dissector: {r.stderr}'
    frames = [p['_source']['layers'] for p in json.loads(r.stdout or '[]')]
    for i, fr in enumerate(frames):
        assert int(fr['frame.number'][0]) == i + 1
        assert '_ws.lua.error' not in fr, f'frame {i + 1}: Lua error in the dissector: {fr}'
        # (_ws.malformed alone also marks the dissector's own MALFORMED expert infos.)
        for bug in ('_ws.malformed.expert', '_ws.malformed.dissector_bug'):
            assert bug not in fr, f'frame {i + 1}: dissector raised an exception: {fr}'
    return frames


def tshark_pdml(pcap: Path, *opts: str) -> list[dict]:
    """One dict per frame: field name -> list of shownames (tshark -T pdml)."""
    cmd = [TSHARK, '-n', '-r', str(pcap), '-X', f'lua_script:{LUA}', *opts, '-T', 'pdml']
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = []
    for pkt in ET.fromstring(r.stdout).iter('packet'):
        d: dict[str, list[str]] = {}
        for fld in pkt.iter('field'):
            if fld.get('name'):
                d.setdefault(fld.get('name'), []).append(fld.get('showname') or fld.get('show') or '')
        out.append(d)
    return out


def dump(pcap: Path, port: int = PORT) -> list[dict]:
    require_gen()
    r = subprocess.run([str(GEN), 'dump', str(pcap), '--port', str(port)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    return [json.loads(ln) for ln in r.stdout.splitlines() if ln.strip()]


def gen(tmp_path: Path, name: str, *args: str) -> Path:
    require_gen()
    pcap = tmp_path / f'{name}.pcap'
    r = subprocess.run([str(GEN), 'write', '--config', str(CONFIG), '--job', '7', *args, '--merged', str(pcap)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f'prism-gen write {args}: {r.stderr}'
    return pcap


# --------------------------------------------------------------------------
# Building frames (scapy) from PROTOCOL.md's byte layout

def header(kind, *, magic=0x5052, version=1, job=7, op=42, chunk=0, sender=1, group=4, terms=1, count=0, dtype=1,
           out_dtype=1, policy=2, encoding=1, transport=2, exceptions=1, flags=0, status=0) -> bytes:
    h = struct.pack('>HBBIIIHHHHBBBBBBBB', magic, version, kind, job, op, chunk, sender, group, terms, count, dtype,
                    out_dtype, policy, encoding, transport, exceptions, flags, status)
    assert len(h) == 32
    return h


def frame(payload: bytes, *, sport=PORT, dport=PORT, src='10.0.0.254', dst='10.0.0.1', vlan=None, ip_id=1,
          smac='02:00:00:00:ff:00', dmac='02:00:00:00:00:01'):
    scapy = pytest.importorskip('scapy.all')
    l2 = scapy.Ether(src=smac, dst=dmac)
    if vlan is not None:
        l2 = l2 / scapy.Dot1Q(vlan=vlan)
    return l2 / scapy.IP(src=src, dst=dst, id=ip_id, flags='DF', ttl=64) / scapy.UDP(sport=sport, dport=dport) / \
        scapy.Raw(payload)


def write_pcap(path: Path, frames) -> Path:
    scapy = pytest.importorskip('scapy.all')
    pkts = []
    for i, f in enumerate(frames):
        p = f if not isinstance(f, (bytes, bytearray)) else scapy.Ether(bytes(f))
        p.time = 1 + i * 1e-6
        pkts.append(p)
    scapy.wrpcap(str(path), pkts)
    return path


def encode_elements(fmt: int, values) -> bytes:
    if fmt == 1:
        return struct.pack(f'<{len(values)}f', *values)
    if fmt == 2:
        return struct.pack(f'<{len(values)}e', *values)
    if fmt == 8:
        return struct.pack(f'<{len(values)}b', *values)
    if fmt == 9:
        return struct.pack(f'<{len(values)}i', *values)
    raise ValueError(fmt)


def lane_record(value: int, side: int = 0) -> bytes:
    """One Kulisch lane record for an exact integer value (in lane units)."""
    if value == 0:
        return bytes([side, 0, 0])
    m = abs(value)
    lo = ((m & -m).bit_length() - 1) // 8
    hi = (m.bit_length() - 1) // 8
    mag = (m >> (8 * lo)).to_bytes(hi - lo + 1, 'little')
    return bytes([side | (SIDE_SIGN if value < 0 else 0), len(mag), lo]) + mag


# --------------------------------------------------------------------------
# Reading values independently of the dissector

def decode_element(fmt: int, b: bytes) -> float:
    if fmt == 1:
        return struct.unpack('<f', b)[0]
    if fmt == 2:
        return struct.unpack('<e', b)[0]
    if fmt == 3:
        return struct.unpack('<f', b'\0\0' + b)[0]
    if fmt == 8:
        return struct.unpack('<b', b)[0]
    if fmt == 9:
        return struct.unpack('<i', b)[0]
    ebits, mbits, bias, style = FP8[fmt]
    x = b[0]
    s, e, m = x >> 7, (x >> mbits) & ((1 << ebits) - 1), x & ((1 << mbits) - 1)
    emax = (1 << ebits) - 1
    if style == 'fnuz' and x == 0x80:
        return math.nan
    if style == 'fn' and e == emax and m == (1 << mbits) - 1:
        return math.nan
    if style == 'ieee' and e == emax:
        return math.nan if m else (-math.inf if s else math.inf)
    v = math.ldexp(m, 1 - bias - mbits) if e == 0 else math.ldexp((1 << mbits) + m, e - bias - mbits)
    return -v if s else v


def parse_lanes(records: bytes, count: int):
    """Lane records as (side, sign, n, offset, magnitude bytes, record bytes)."""
    out, at = [], 0
    for _ in range(count):
        s, n, off = records[at], records[at + 1], records[at + 2]
        mag = records[at + 3:at + 3 + n]
        out.append((s & 0x7F, s >> 7, n, off, mag, records[at:at + 3 + n]))
        at += 3 + n
    assert at == len(records)
    return out


def lane_value(dtype: int, side: int, sign: int, off: int, mag: bytes) -> float:
    if side & SIDE_NAN or (side & SIDE_PINF and side & SIDE_NINF):
        return math.nan
    if side & SIDE_PINF:
        return math.inf
    if side & SIDE_NINF:
        return -math.inf
    if not mag:
        return -0.0 if side & SIDE_NZERO else 0.0
    v = math.ldexp(float(int.from_bytes(mag, 'little')), 8 * off + UNIT[dtype])
    return -v if sign else v


def same_value(got: str, want: float, rel: float) -> bool:
    g = float(got)
    if math.isnan(want):
        return math.isnan(g)
    if want == 0:
        return g == 0 and math.copysign(1, g) == math.copysign(1, want)
    if math.isinf(want):
        return g == want
    return abs(g - want) <= rel * abs(want)


def num(fr: dict, key: str) -> int:
    return int(fr[key][0], 0)


def ints(fr: dict, key: str) -> list[int]:
    return [int(x, 0) for x in fr.get(key, [])]


# --------------------------------------------------------------------------
# The cross-check: every frame's dissection against prism-gen dump's parse

def check_frame(i: int, fr: dict, d: dict):
    where = f'frame {i + 1} ({d["refusal"]})'
    experts = {e for e in ERROR_EXPERTS if e in fr}
    assert 'prism.magic' in fr, f'{where}: not dissected as PRISM'
    ip_ok = d['refusal'] != 'ip_bad_checksum'
    udp_ok = d['refusal'] != 'udp_bad_checksum'
    # tshark 4.0: checksum status 0 = Bad, 1 = Good, 2 = Unverified.
    assert num(fr, 'ip.checksum.status') == (1 if ip_ok else 0), where
    assert num(fr, 'udp.checksum.status') == (1 if udp_ok else 0), where

    if d['refusal'] in ('ip_bad_checksum', 'udp_bad_checksum'):
        # The corruption is below PRISM: the header itself is fine.
        assert num(fr, 'prism.magic') == 0x5052 and num(fr, 'prism.version') == 1, where
        assert not experts, f'{where}: unexpected {experts}'
        return
    if d['refusal'] != 'ok':
        want = REFUSAL_EXPERT.get(d['refusal'])
        assert want, f'{where}: refusal with no expert mapping'
        assert experts & want, f'{where}: dissector raised {experts or "nothing"}, expected one of {want}'
        if d['refusal'] == 'bad_magic':
            assert num(fr, 'prism.magic') != 0x5052
        if d['refusal'] == 'bad_version':
            assert num(fr, 'prism.version') != 1
        if d['refusal'] == 'bad_kind':
            assert num(fr, 'prism.kind') not in KIND
        if d['refusal'] == 'bad_dtype':   # unknown, or any at all on a JOIN, JOINED or pool kind
            assert num(fr, 'prism.dtype') not in FORMAT or num(fr, 'prism.kind') in JOB_KINDS
        return

    assert not experts, f'{where}: C++ parser accepts it but the dissector raised {experts}: ' \
                        f'{fr.get("_ws.expert.message")}'
    assert num(fr, 'prism.magic') == 0x5052 and num(fr, 'prism.version') == 1
    for k in HEADER_KEYS:
        assert num(fr, f'prism.{k}') == d[k], f'{where}: prism.{k} = {fr[f"prism.{k}"]}, dump says {d[k]}'
    flags = d['flags']
    assert num(fr, 'prism.flags.retransmit') == flags & 1
    assert num(fr, 'prism.flags.last_chunk') == (flags >> 1) & 1
    assert num(fr, 'prism.flags.sideband') == (flags >> 2) & 1
    assert num(fr, 'prism.flags.reserved') == 0
    assert ('prism.retransmit' in fr) == bool(flags & 1), where
    kind = d['kind']
    if kind == 3:
        st = d['status']
        assert [num(fr, 'prism.status.overflow'), num(fr, 'prism.status.invalid'),
                num(fr, 'prism.status.nan_input')] == [st & 1, (st >> 1) & 1, (st >> 2) & 1], where
        assert ('prism.result_status' in fr) == (st != 0)
    if kind == 4:
        assert num(fr, 'prism.nack_reason') == d['status']
        assert 'prism.nack' in fr
        assert 'prism.elements' not in fr and 'prism.lane' not in fr
        # OP_ABANDONED's bitmap, decoded here from PROTOCOL.md: bit r % 8 of byte r // 8 names member rank r.
        bitmap = bytes.fromhex(d['payload'])
        want = [r for r in range(d['group']) if bitmap and bitmap[r // 8] >> (r % 8) & 1]
        assert ints(fr, 'prism.missing.rank') == want, where
        assert ('prism.missing' in fr) == bool(bitmap), where
        if bitmap:
            assert ints(fr, 'prism.missing.children') == [d['group'] - d['terms'] - len(want)], where
        return
    assert 'prism.nack_reason' not in fr
    if kind in (QUERY, STATUS):
        # PROTOCOL.md, Queries: no elements; a STATUS's status is HELD or MISSING and its body, when there is
        # one, the bitmap of this switch's members that have not contributed (as OP_ABANDONED's).
        assert 'prism.elements' not in fr and 'prism.lane' not in fr, where
        bitmap = bytes.fromhex(d['payload'])
        want = [r for r in range(d['group']) if bitmap and bitmap[r // 8] >> (r % 8) & 1]
        assert ints(fr, 'prism.missing.rank') == want, where
        assert ('prism.missing' in fr) == bool(bitmap), where
        if kind == STATUS:
            assert num(fr, 'prism.query_status') == d['status'], where
        else:
            assert 'prism.query_status' not in fr and not bitmap, where
        return
    if kind in (JOIN, JOINED):
        check_session_frame(where, fr, d)
        return
    if kind in JOB_KINDS:
        check_pool_frame(where, fr, d)
        return
    for k in ('prism.nonce', 'prism.first_op', 'prism.fresh_op', 'prism.rank', 'prism.ranks_joined',
              'prism.status.complete', 'prism.joined'):
        assert k not in fr, f'{where}: {k} on a {KIND[kind]}'

    payload = bytes.fromhex(d['payload'])
    if d['encoding'] in (1, 2):
        fmt = d['dtype'] if d['encoding'] == 1 else d['out_dtype']
        w = FORMAT_BYTES[fmt]
        assert fr['prism.elements'] == [d['payload']], where
        assert num(fr, 'prism.elements.count') == d['count']
        assert num(fr, 'prism.elements.length') == len(payload) == d['count'] * w
        assert num(fr, 'prism.elements.format') == fmt
        want = [decode_element(fmt, payload[j:j + w]) for j in range(0, len(payload), w)]
        key = {1: 'prism.element.fp32', 8: 'prism.element.int8', 9: 'prism.element.int32'}.get(fmt,
                                                                                                'prism.element.value')
        got = fr.get(key, [])
        assert len(got) == d['count'], f'{where}: {len(got)} {key} items for count {d["count"]}'
        # FT_FLOAT prints 6 significant digits; the bytes above are the exact check.
        rel = 1e-5 if fmt == 1 else 1e-12
        bad = [(j, g, v) for j, (g, v) in enumerate(zip(got, want)) if not same_value(g, v, rel)]
        assert not bad, f'{where}: {fmt} elements differ (index, tshark, expected): {bad[:5]}'
        for other in {'prism.element.fp32', 'prism.element.int8', 'prism.element.int32',
                      'prism.element.value'} - {key}:
            assert other not in fr
        if flags & 4:
            assert fr['prism.sideband'] == [d['sideband']], where
            assert ints(fr, 'prism.sideband.status') == list(bytes.fromhex(d['sideband']))
        else:
            assert 'prism.sideband' not in fr and d['sideband'] == ''
        assert 'prism.first_lane' not in fr
    else:
        assert num(fr, 'prism.first_lane') == d['first_lane'], where
        assert num(fr, 'prism.chunk_lanes') == d['chunk_lanes'], where
        lanes = parse_lanes(payload, d['count'])
        assert fr['prism.lane'] == [r[5].hex() for r in lanes], where
        assert ints(fr, 'prism.lane.index') == list(range(d['first_lane'], d['first_lane'] + d['count']))
        assert ints(fr, 'prism.lane.side') == [r[0] for r in lanes], where
        assert ints(fr, 'prism.lane.sign') == [r[1] for r in lanes], where
        assert ints(fr, 'prism.lane.n') == [r[2] for r in lanes], where
        assert ints(fr, 'prism.lane.offset') == [r[3] for r in lanes], where
        assert fr.get('prism.lane.magnitude', []) == [r[4].hex() for r in lanes if r[2]], where
        vals = [lane_value(d['dtype'], r[0], r[1], r[3], r[4]) for r in lanes]
        got = fr['prism.lane.value']
        assert len(got) == len(vals)
        bad = [(j, g, v) for j, (g, v) in enumerate(zip(got, vals)) if not same_value(g, v, 1e-12)]
        assert not bad, f'{where}: lane values differ: {bad[:5]}'
        assert 'prism.elements' not in fr and 'prism.sideband' not in fr


def check_pool_frame(where: str, fr: dict, d: dict):
    """An ALLOC, ALLOCATED, LEAVE or LEFT the C++ parser accepted, read from PROTOCOL.md (Job pools):
    op is the nonce; ALLOCATED's chunk the pool id, terms the switch's shards and body slot_quota and
    idle_timeout_ms (big-endian u32 each); LEFT's terms the ranks still bound."""
    kind = d['kind']
    assert num(fr, 'prism.nonce') == d['op'], where
    for k in ('prism.elements', 'prism.lane', 'prism.sideband', 'prism.missing', 'prism.joined', 'prism.first_op'):
        assert k not in fr, f'{where}: {k} on a {KIND[kind]}'
    info = fr['_ws.col.Info'][0]
    assert info.startswith(f'{KIND[kind]} job={d["job"]} nonce=0x{d["op"]:08x}'), info
    if kind == ALLOCATED:
        assert 'prism.rank' not in fr, where   # sender is the switch
        assert num(fr, 'prism.pool') == d['chunk'] and num(fr, 'prism.shards') == d['terms'], where
        quota, idle = struct.unpack('>II', bytes.fromhex(d['payload']))
        assert num(fr, 'prism.slot_quota') == quota and num(fr, 'prism.idle_timeout_ms') == idle, where
        assert f'pool={d["chunk"]} group={d["group"]} shards={d["terms"]} quota={quota} idle_ms={idle}' in info
        return
    assert num(fr, 'prism.rank') == d['sender'], where
    padding = '00' * 8 if kind == ALLOC and d['payload'] else ''  # an ALLOC's padding (PROTOCOL.md, Job pools)
    assert d['payload'] == padding and 'prism.body' not in fr, where
    if kind == LEFT:
        assert num(fr, 'prism.still_bound') == d['terms'] and f'still_bound={d["terms"]}/{d["group"]}' in info
    if kind == ALLOC:
        assert f'group={d["group"]}' in info, info


def check_session_frame(where: str, fr: dict, d: dict):
    """A JOIN or JOINED the C++ parser accepted, read from PROTOCOL.md (Sessions): op is the nonce,
    sender the rank; a JOINED's terms are the ranks joined, status bit0 COMPLETE, chunk the first op
    number once complete, and its body (if any) a bitmap of ceil(group / 8) bytes of the ranks joined."""
    kind = d['kind']
    assert num(fr, 'prism.nonce') == d['op'], where
    assert num(fr, 'prism.rank') == d['sender'], where
    for k in ('prism.elements', 'prism.lane', 'prism.sideband', 'prism.first_lane', 'prism.missing', 'prism.body'):
        assert k not in fr, f'{where}: {k} on a {KIND[kind]}'
    assert 'prism.retransmit' not in fr, where
    info = fr['_ws.col.Info'][0]
    assert info.startswith(f'{KIND[kind]} job={d["job"]} nonce=0x{d["op"]:08x} rank={d["sender"]}'), info
    if kind == JOIN:
        assert (d['terms'], d['count'], d['status'], d['flags'], d['payload']) == (0, 0, 0, 0, ''), where
        assert 'prism.ranks_joined' not in fr and 'prism.status.complete' not in fr and 'prism.joined' not in fr
        assert 'prism.first_op' not in fr, where
        # A rank sends chunk 0; a leaf forwarding it, the first op number fresh there.
        assert ints(fr, 'prism.fresh_op') == ([d['chunk']] if d['chunk'] else []), where
        assert f'group={d["group"]}' in info, info
        return
    complete = d['status'] & COMPLETE
    assert num(fr, 'prism.ranks_joined') == d['terms'], where
    assert num(fr, 'prism.status.complete') == complete, where
    assert num(fr, 'prism.status.joined_reserved') == 0, where
    assert ints(fr, 'prism.first_op') == ([d['chunk']] if complete else []), where
    assert ('prism.session_complete' in fr) == bool(complete), where
    assert 'prism.fresh_op' not in fr
    assert f'joined={d["terms"]}/{d["group"]}' in info, info
    assert (f'COMPLETE first_op={d["chunk"]}' in info) == bool(complete), info
    bitmap = bytes.fromhex(d['payload'])
    joined = [r for r in range(d['group']) if bitmap and bitmap[r // 8] >> (r % 8) & 1]
    assert ('prism.joined' in fr) == bool(bitmap), where
    if bitmap:
        assert fr['prism.joined'] == [d['payload']], where
        assert ints(fr, 'prism.joined.rank') == joined, where
        assert ints(fr, 'prism.joined.missing') == [r for r in range(d['group']) if r not in joined][:64], where
        if joined:
            assert 'ranks=' + ','.join(map(str, joined[:16])) in info, info
    else:
        assert 'prism.joined.rank' not in fr and 'ranks=' not in info, where


def cross_check(pcap: Path) -> tuple[list[dict], list[dict]]:
    frames = tshark(pcap)
    dumped = dump(pcap)
    assert len(frames) == len(dumped) > 0
    for i, (fr, d) in enumerate(zip(frames, dumped)):
        check_frame(i, fr, d)
    return frames, dumped


# --------------------------------------------------------------------------
# prism-gen captures

MALFORMED_KINDS = {'bad_magic', 'bad_version', 'bad_kind', 'bad_dtype', 'ip_bad_checksum', 'udp_bad_checksum',
                   'payload_length', 'bad_count'}

SCENARIOS = {
    'fp32-kulisch-faults': ['--dtype', 'fp32', '--policy', 'kulisch', '--elements', '700', '--ops', '2',
                            '--values', 'specials', '--malformed', '8', '--late-retransmit', '1', '--loss', '0.2'],
    'fp16-arrival-dup-reorder': ['--dtype', 'fp16', '--out-dtype', 'fp16', '--policy', 'fp32_arrival',
                                 '--elements', '1000', '--dup', '0.3', '--reorder', '0.3', '--malformed', '8',
                                 '--late-retransmit', '0.5', '--seed', '3'],
    'bf16-binomial-saturate': ['--dtype', 'bf16', '--policy', 'fp32_binomial', '--transport', 'rounded',
                               '--exceptions', 'saturate', '--values', 'specials', '--elements', '900'],
    'e4m3fn-full': ['--dtype', 'e4m3fn', '--policy', 'kulisch', '--transport', 'auto', '--values', 'full',
                    '--elements', '1500', '--late-retransmit', '1'],
    'e4m3fnuz-full': ['--dtype', 'e4m3fnuz', '--policy', 'kulisch', '--values', 'full', '--elements', '600'],
    'e5m2-full': ['--dtype', 'e5m2', '--out-dtype', 'bf16', '--policy', 'fp32_arrival', '--values', 'full',
                  '--elements', '600', '--order', 'random'],
    'e5m2fnuz-full': ['--dtype', 'e5m2fnuz', '--policy', 'kulisch', '--values', 'full', '--elements', '600'],
    'int8-foreign': ['--dtype', 'int8', '--policy', 'kulisch', '--values', 'full', '--elements', '500',
                     '--foreign', '3', '--malformed', '4'],
    'int32-jumbo': ['--dtype', 'int32', '--policy', 'kulisch', '--values', 'full', '--mtu', '9000',
                    '--elements', '3000', '--op-base', '4294967295'],
}


@pytest.mark.parametrize('name', list(SCENARIOS))
def test_generated_capture_matches_prism_parser(tmp_path, name):
    args = SCENARIOS[name]
    pcap = gen(tmp_path, name, *args)
    frames, dumped = cross_check(pcap)
    refusals = {d['refusal'] for d in dumped}
    if '--malformed' in args:
        n = int(args[args.index('--malformed') + 1])
        assert len(refusals - {'ok'}) == min(n, len(MALFORMED_KINDS)), refusals
        assert refusals - {'ok'} <= MALFORMED_KINDS
    else:
        assert refusals == {'ok'}
    if '--late-retransmit' in args and args[args.index('--late-retransmit') + 1] == '1':
        assert any(d.get('flags', 0) & 1 for d in dumped), 'no RETRANSMIT frame generated'
    dtype = FORMAT_CODE[args[args.index('--dtype') + 1]]
    assert all(num(fr, 'prism.dtype') == dtype for fr, d in zip(frames, dumped) if d['refusal'] != 'bad_dtype')


# --------------------------------------------------------------------------
# The worked example in PROTOCOL.md

def _doc_frames() -> dict[str, bytes]:
    text = PROTOCOL_MD.read_text()
    out = {}
    for title in ('CONTRIB from rank 1', 'RESULT to rank 1'):
        m = re.search(re.escape(title) + r' \((\d+) bytes\):\s*```\s*\n(.*?)```', text, re.S)
        assert m, f'PROTOCOL.md has no hex block for {title!r}'
        b = bytes.fromhex(' '.join(m.group(2).split()))
        assert len(b) == int(m.group(1)), f'{title}: {len(b)} bytes, the text says {m.group(1)}'
        out[title] = b
    return out


def test_protocol_md_worked_example(tmp_path):
    docs = _doc_frames()
    pcap = write_pcap(tmp_path / 'worked.pcap', [docs['CONTRIB from rank 1'], docs['RESULT to rank 1']])
    frames = tshark(pcap, fields=FIELDS + ['ip.checksum', 'udp.checksum', 'ip.len', 'udp.length', 'ip.id'])
    assert len(frames) == 2
    c, r = frames
    common = dict(magic=0x5052, version=1, job=7, op=42, chunk=0, sender=1, group=2, count=4, dtype=1, out_dtype=1,
                  policy=2, transport=2, exceptions=1)
    for fr in frames:
        for k, v in common.items():
            assert num(fr, f'prism.{k}') == v, (k, fr.get(f'prism.{k}'))
        assert num(fr, 'ip.checksum.status') == 1 and num(fr, 'udp.checksum.status') == 1
        assert not {e for e in ERROR_EXPERTS if e in fr}
        assert num(fr, 'prism.flags.last_chunk') == 1 and num(fr, 'prism.flags.retransmit') == 0
    # CONTRIB: bytes 42-89 per the table.
    assert (num(c, 'prism.kind'), num(c, 'prism.terms'), num(c, 'prism.encoding')) == (1, 1, 1)
    assert (num(c, 'prism.flags'), num(c, 'prism.status'), num(c, 'prism.flags.sideband')) == (2, 0, 0)
    assert (num(c, 'ip.checksum'), num(c, 'udp.checksum'), num(c, 'ip.len'), num(c, 'udp.length')) == \
        (0x25a2, 0x87e7, 76, 56)
    assert c['prism.elements'] == ['0000803f000020c000008033e6b1617f']
    for g, v in zip(c['prism.element.fp32'], [1.0, -2.5, 2.0 ** -24, 3.0e38]):
        assert same_value(g, v, 1e-5)
    assert 'prism.sideband' not in c
    # RESULT: kind 3, terms = group, encoding 2, LAST_CHUNK + SIDEBAND, OVERFLOW, sideband 00 00 00 01.
    assert (num(r, 'prism.kind'), num(r, 'prism.terms'), num(r, 'prism.encoding')) == (3, 2, 2)
    assert (num(r, 'prism.flags'), num(r, 'prism.status'), num(r, 'prism.flags.sideband')) == (6, 1, 1)
    assert (num(r, 'prism.status.overflow'), num(r, 'prism.status.invalid'), num(r, 'prism.status.nan_input')) == \
        (1, 0, 0)
    assert (num(r, 'ip.checksum'), num(r, 'udp.checksum'), num(r, 'ip.len'), num(r, 'udp.length'),
            num(r, 'ip.id')) == (0x259d, 0x0b8a, 80, 60, 2)
    for g, v in zip(r['prism.element.fp32'], [1.5, -5.0, 2.0 ** -23, math.inf]):
        assert same_value(g, v, 1e-5)
    assert len(r['prism.element.fp32']) == 4
    assert r['prism.sideband'] == ['00000001']
    assert ints(r, 'prism.sideband.status') == [0, 0, 0, 1]
    assert 'prism.result_status' in r
    # And PRISM's own parser reads the same bytes the same way.
    if GEN.is_file():
        cross_check(pcap)


# --------------------------------------------------------------------------
# scapy-built frames: RESULT with sideband, NACKs, Kulisch partials

def test_result_and_partial_with_sideband(tmp_path):
    nan, inf = math.nan, math.inf
    vals16 = [1.5, nan, inf, 65504.0, -0.0, 2.0 ** -24]
    side16 = [0, 4, 1, 0, 0, 2]
    frames = [
        # RESULT fp16 out with sideband: NAN_INPUT | OVERFLOW | INVALID
        frame(header(3, dtype=3, out_dtype=2, group=4, terms=4, count=6, encoding=2, flags=6, status=7)
              + encode_elements(2, vals16) + bytes(side16)),
        # RESULT int32 out, no flags, retransmitted (a retained result), VLAN tagged
        frame(header(3, dtype=8, out_dtype=9, terms=4, count=3, encoding=2, flags=1, status=0)
              + encode_elements(9, [-2147483648, 0, 2147483647]), vlan=5),
        # PARTIAL encoding 2 (rounded) with a sideband, fp32 out
        frame(header(2, sender=2, dtype=1, out_dtype=1, terms=3, count=2, encoding=2, transport=1, policy=1,
                     flags=4) + encode_elements(1, [3.4e38, -1.0]) + bytes([1, 0])),
        # RESULT fp32 with status but no sideband, and SATURATE
        frame(header(3, count=1, terms=4, encoding=2, exceptions=2, status=1, flags=2)
              + encode_elements(1, [3.4028234663852886e38])),
    ]
    pcap = write_pcap(tmp_path / 'result.pcap', frames)
    tsf, dumped = cross_check(pcap)
    assert [d['refusal'] for d in dumped] == ['ok'] * 4
    r = tsf[0]
    assert ints(r, 'prism.sideband.status') == side16
    assert [num(r, k) for k in ('prism.status.overflow', 'prism.status.invalid', 'prism.status.nan_input')] == \
        [1, 1, 1]
    assert 'prism.retransmit' in tsf[1] and num(tsf[1], 'prism.flags.retransmit') == 1
    pd = tshark_pdml(pcap)
    show = ' | '.join(pd[0]['prism.status'] + pd[0]['prism.flags'])
    assert 'OVERFLOW' in show and 'INVALID' in show and 'NAN_INPUT' in show and 'SIDEBAND' in show
    assert any('NAN_INPUT' in s for s in pd[0]['prism.sideband.status'])


def test_every_small_format_code(tmp_path):
    """All 256 codes of each fp8 format and int8, and fp16/bf16 specials, subnormals and extremes: NaN and Inf
    encodings differ per format (ARITHMETIC.md), and generated traffic never carries specials in every format."""
    frames = []
    for fmt in (4, 5, 6, 7, 8):
        frames.append(frame(header(1, count=256, dtype=fmt, out_dtype=1) + bytes(range(256))))
    for fmt in (2, 3):
        codes = [0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x3C00, 0x7BFF, 0x7C00, 0xFC00, 0x7C01, 0x7E00,
                 0xFFFF, 0x7F80, 0xFF80, 0x7FC0, 0x0080, 0x007F, 0x7F7F, 0xC000]
        frames.append(frame(header(3, count=len(codes), dtype=fmt, out_dtype=fmt, terms=4, encoding=2)
                            + struct.pack(f'<{len(codes)}H', *codes)))
    f32 = [0x00000000, 0x80000000, 0x00000001, 0x7F7FFFFF, 0x7F800000, 0xFF800000, 0x7FC00000, 0x00800000]
    frames.append(frame(header(1, count=len(f32)) + struct.pack(f'<{len(f32)}I', *f32)))
    pcap = write_pcap(tmp_path / 'codes.pcap', frames)
    tsf, dumped = cross_check(pcap)
    assert [d['refusal'] for d in dumped] == ['ok'] * len(frames)
    nans = [sum(math.isnan(float(x)) for x in f['prism.element.value']) for f in tsf[:4]]
    assert nans == [2, 1, 6, 1]  # e4m3fn S.1111.111; fnuz 0x80 only; e5m2 IEEE (2 x 3 NaNs); fnuz 0x80
    infs = [sum(math.isinf(float(x)) for x in f['prism.element.value']) for f in tsf[:4]]
    assert infs == [0, 0, 2, 0]
    assert [int(x) for x in tsf[4]['prism.element.int8']] == [b - 256 if b > 127 else b for b in range(256)]


def test_nack_reasons(tmp_path):
    frames = [frame(header(4, sender=1, group=4, terms=0, count=0, dtype=2, encoding=1, status=code))
              for code in NACK_REASON]
    # A NACK echoes the refused packet's descriptor, valid or not.
    frames.append(frame(header(4, terms=0, count=0, dtype=0x42, out_dtype=0, policy=9, encoding=7, transport=0,
                               exceptions=5, status=4)))
    frames.append(frame(header(4, terms=0, count=0, status=15)))   # unknown reason
    frames.append(frame(header(4, terms=0, count=3, status=1)))   # a NACK carries count 0
    frames.append(frame(header(4, terms=0, count=0, status=2) + b'\x01\x02'))  # and an empty body
    pcap = write_pcap(tmp_path / 'nack.pcap', frames)
    tsf, dumped = cross_check(pcap)
    n = len(NACK_REASON)
    assert n == 14
    assert [d['refusal'] for d in dumped] == ['ok'] * (n + 1) + ['bad_nack_reason', 'bad_count', 'payload_length']
    assert [num(f, 'prism.nack_reason') for f in tsf[:n]] == list(NACK_REASON)
    assert num(tsf[n], 'prism.dtype') == 0x42 and num(tsf[n], 'prism.encoding') == 7
    pd = tshark_pdml(pcap)
    for p, (code, name) in zip(pd, NACK_REASON.items()):
        assert p['prism.kind'] == ['Kind: NACK (4)']
        assert p['prism.nack_reason'][0].startswith(f'NACK reason: {name} ({code})'), p['prism.nack_reason']
        assert p['prism.status'][0].startswith(f'Status: 0x{code:02x}')
    for text in ('malformed', 'unknown job', 'not a member', 'descriptor mismatch', 'accumulator too narrow',
                 'no free slot', 'result expired', 'op abandoned'):
        assert any(text in s for p in pd[:n] for s in p['prism.nack_reason']), text


def test_op_abandoned_nacks(tmp_path):
    """NACK OP_ABANDONED (8) as PROTOCOL.md gives it: terms = contributions that arrived (up to group) and a
    body that is empty or a bitmap of ceil(group / 8) bytes naming the switch's members that had not
    contributed. The dissector lists the missing ranks and what child switches still owed
    (group - terms - missing), and flags the shapes the C++ parser refuses."""
    nack = dict(sender=1, count=0, dtype=1, encoding=1, status=8)
    cases = [  # (header fields, body, dump's refusal, missing ranks by hand, children owed)
        (dict(group=4, terms=3), b'\x08', 'ok', [3], 0),                                  # rank 3 never sent
        (dict(group=12, terms=3), b'\xde\x0d', 'ok', [1, 2, 3, 4, 6, 7, 8, 10, 11], 0),  # two bytes
        (dict(group=4, terms=1), b'\x02', 'ok', [1], 2),                                  # + a child's 2 ranks
        (dict(group=9, terms=9), b'\x00\x00', 'ok', [], 0),                              # nobody missing here
        (dict(group=4, terms=0), b'', 'ok', [], None),                                    # a late packet's answer
        (dict(group=4, terms=3), b'\x08\x00', 'payload_length', None, None),             # not ceil(4 / 8) bytes
        (dict(group=4, terms=5), b'\x08', 'bad_terms', None, None),                       # more than the group
        (dict(group=4, terms=0, status=3), b'\x08', 'payload_length', None, None),        # only 8 has a body
        (dict(group=4, terms=2, status=7), b'', 'bad_terms', None, None),                  # only 8 has terms
    ]
    frames = [frame(header(4, **{**nack, **h}) + body) for h, body, *_ in cases]
    pcap = write_pcap(tmp_path / 'abandoned.pcap', frames)
    tsf, dumped = cross_check(pcap)
    assert [d['refusal'] for d in dumped] == [c[2] for c in cases]
    for i, (fr, (h, body, refusal, missing, owed)) in enumerate(zip(tsf, cases)):
        if refusal == 'payload_length':
            assert 'prism.bad_length' in fr and 'prism.missing' not in fr, i
            continue
        if refusal == 'bad_terms':
            assert 'prism.bad_terms' in fr, i
            continue
        assert not {e for e in ERROR_EXPERTS if e in fr}, (i, fr.get('_ws.expert.message'))
        assert ints(fr, 'prism.missing.rank') == missing, i
        assert ints(fr, 'prism.missing.children') == ([] if owed is None else [owed]), i
        info = fr['_ws.col.Info'][0]
        assert 'reason=OP_ABANDONED' in info and f'terms={h["terms"]}/{h["group"]}' in info, info
        if missing:
            assert 'missing=' + ','.join(map(str, missing)) in info, info


# --------------------------------------------------------------------------
# Sessions: JOIN (kind 5) and JOINED (kind 6), from PROTOCOL.md's "Sessions"

def session(kind, *, nonce=0x1234ABCD, rank=3, group=4, joined=0, first_op=0, complete=False, **kw) -> bytes:
    """A JOIN or JOINED header as PROTOCOL.md gives it: op = the nonce, sender = the rank, no
    descriptor (dtype ... exceptions 0), count 0, flags 0; a JOINED's terms = ranks joined, chunk =
    the first op number when COMPLETE (status bit0), else 0."""
    f = dict(op=nonce, chunk=first_op, sender=rank, group=group, terms=joined, count=0, dtype=0, out_dtype=0,
             policy=0, encoding=0, transport=0, exceptions=0, flags=0, status=COMPLETE if complete else 0)
    f.update(kw)
    return header(kind, **f)


def bitmap(ranks, group) -> bytes:
    """ceil(group / 8) bytes, bit r % 8 of byte r // 8 set for each rank r (PROTOCOL.md)."""
    b = bytearray((group + 7) // 8)
    for r in ranks:
        b[r // 8] |= 1 << (r % 8)
    return bytes(b)


def test_join_and_joined(tmp_path):
    """A rank's JOIN, a leaf's forwarded JOIN, JOINEDs before and at COMPLETE (with and without the
    bitmap), a 12-rank JOINED over two bitmap bytes, and the NACK MALFORMED that echoes a JOIN: each
    field read by the dissector as PROTOCOL.md names it, and PRISM's parser reads the same bytes."""
    rank_ip = dict(src='10.0.0.3', dst='10.0.0.254', smac='02:00:00:00:00:03', dmac='02:00:00:00:ff:00')
    cases = [  # (frame bytes, what the dissector must show)
        (session(JOIN), dict(kind=JOIN, nonce=0x1234ABCD, rank=3)),
        (session(JOIN, nonce=0xFFFFFFFF, rank=0, first_op=77), dict(kind=JOIN, nonce=0xFFFFFFFF, rank=0, fresh=77)),
        (session(JOINED, joined=2) + bitmap([0, 3], 4), dict(kind=JOINED, joined=[0, 3], complete=0)),
        (session(JOINED, joined=1), dict(kind=JOINED, joined=None, complete=0)),   # no body: accepted too
        (session(JOINED, joined=4, first_op=4242, complete=True) + bitmap(range(4), 4),
         dict(kind=JOINED, joined=[0, 1, 2, 3], complete=1, first_op=4242)),
        (session(JOINED, rank=11, group=12, joined=12, first_op=2 ** 32 - 1, complete=True) + bitmap(range(12), 12),
         dict(kind=JOINED, joined=list(range(12)), complete=1, first_op=2 ** 32 - 1)),
        (session(JOINED, rank=5, group=12, joined=3) + bitmap([1, 5, 9], 12),
         dict(kind=JOINED, joined=[1, 5, 9], complete=0)),
        (session(JOINED, joined=0, first_op=0, complete=True, group=1, rank=0) + b'\x00',   # odd but parseable
         None),
    ]
    frames = [frame(c[0], **(rank_ip if c[0][3] == JOIN else {})) for c in cases]
    # The switch refusing a JOIN (here: its group is not the job's) echoes it in a NACK MALFORMED.
    frames.append(frame(header(4, op=0x1234ABCD, sender=1, group=5, terms=0, count=0, dtype=0, out_dtype=0,
                               policy=0, encoding=0, transport=0, exceptions=0, status=1)))
    pcap = write_pcap(tmp_path / 'session.pcap', frames)
    tsf, dumped = cross_check(pcap)
    assert [d['refusal'] for d in dumped] == ['ok'] * len(frames)
    for i, (fr, (raw, want)) in enumerate(zip(tsf, cases)):
        if want is None:
            continue
        assert num(fr, 'prism.kind') == want['kind'], i
        if want['kind'] == JOIN:
            assert num(fr, 'prism.nonce') == want['nonce'] and num(fr, 'prism.rank') == want['rank'], i
            assert ints(fr, 'prism.fresh_op') == ([want['fresh']] if 'fresh' in want else []), i
            assert 'prism.bad_session' not in fr, (i, fr.get('_ws.expert.message'))
            continue
        assert num(fr, 'prism.status.complete') == want['complete'], i
        assert ints(fr, 'prism.first_op') == ([want['first_op']] if want['complete'] else []), i
        assert ints(fr, 'prism.joined.rank') == (want['joined'] or []), i
        assert 'prism.bad_session' not in fr, (i, fr.get('_ws.expert.message'))
    # COMPLETE with terms 0 of group 1 breaks the session's rules, not the parser's.
    assert 'prism.bad_session' in tsf[7]
    assert tsf[0]['_ws.col.Info'] == ['JOIN job=7 nonce=0x1234abcd rank=3 group=4']
    assert tsf[1]['_ws.col.Info'] == ['JOIN job=7 nonce=0xffffffff rank=0 group=4 fresh_op=77']
    assert tsf[2]['_ws.col.Info'] == ['JOINED job=7 nonce=0x1234abcd rank=3 joined=2/4 ranks=0,3']
    assert tsf[4]['_ws.col.Info'] == ['JOINED job=7 nonce=0x1234abcd rank=3 joined=4/4 COMPLETE first_op=4242 '
                                      'ranks=0,1,2,3']
    assert ints(tsf[6], 'prism.joined.missing') == [0, 2, 3, 4, 6, 7, 8, 10, 11]
    nack = tsf[-1]
    assert num(nack, 'prism.nack_reason') == 1 and num(nack, 'prism.op') == 0x1234ABCD and 'prism.nonce' not in nack
    pd = tshark_pdml(pcap)
    assert pd[0]['prism.kind'] == ['Kind: JOIN (5)'] and pd[2]['prism.kind'] == ['Kind: JOINED (6)']
    assert pd[0]['prism.dtype'] == ['Input format (dtype): 0 (none: a JOIN has no descriptor)']
    assert pd[4]['prism.status'][0].startswith('Status: 0x01 (COMPLETE)')
    assert any(s.endswith('COMPLETE: True') for s in pd[4]['prism.status.complete'])
    assert any(s.endswith('COMPLETE: False') for s in pd[2]['prism.status.complete'])
    assert pd[4]['prism.first_op'] == ['Session\'s first op number: 4242']
    assert pd[0]['prism.sender'][0] == 'Sender: 3 (the joining rank)'
    assert pd[2]['prism.sender'][0] == 'Sender: 3 (the rank it answers)'
    assert pd[2]['prism.joined'][0].endswith('(ranks 0, 3)'), pd[2]['prism.joined']


def test_malformed_session_shapes(tmp_path):
    """What PROTOCOL.md forbids in a JOIN or JOINED (a descriptor byte, flags, count, a JOIN's terms,
    status or body, a JOINED's terms past the group, reserved status bits or a body that is not the
    bitmap) is refused by PRISM's parser and flagged by the dissector, which still decodes the rest.
    Kinds 13 and up stay unknown."""
    cases = [  # (frame bytes, prism-gen dump's refusal, the expert the dissector raises)
        (session(JOIN, dtype=1), 'bad_dtype', 'prism.bad_descriptor'),
        (session(JOIN, out_dtype=1), 'bad_out_dtype', 'prism.bad_descriptor'),
        (session(JOINED, policy=2), 'bad_policy', 'prism.bad_descriptor'),
        (session(JOIN, encoding=1), 'bad_encoding', 'prism.bad_descriptor'),
        (session(JOINED, transport=2), 'bad_transport', 'prism.bad_descriptor'),
        (session(JOIN, exceptions=1), 'bad_exceptions', 'prism.bad_descriptor'),
        (session(JOIN, flags=1), 'bad_flags', 'prism.bad_flags'),                 # no RETRANSMIT on a JOIN
        (session(JOINED, flags=2), 'bad_flags', 'prism.bad_flags'),
        (session(JOIN, count=1) + bytes(4), 'bad_count', 'prism.bad_count'),
        (session(JOINED, count=3), 'bad_count', 'prism.bad_count'),
        (session(JOIN, terms=1), 'bad_terms', 'prism.bad_terms'),
        (session(JOIN, status=1), 'bad_status', 'prism.bad_status'),              # COMPLETE is JOINED's
        (session(JOIN) + b'\x01', 'payload_length', 'prism.bad_length'),
        (session(JOINED, joined=5) + bitmap([0], 4), 'bad_terms', 'prism.bad_terms'),
        (session(JOINED, joined=1, status=2) + bitmap([0], 4), 'bad_status', 'prism.bad_status'),
        (session(JOINED, joined=1) + bitmap([0], 4) + b'\x00', 'payload_length', 'prism.bad_length'),
        (session(JOINED, joined=1, group=12) + b'\x01', 'payload_length', 'prism.bad_length'),
        (session(JOINED, group=0), 'bad_group', 'prism.bad_group'),
        (header(13, count=0, terms=0), 'bad_kind', 'prism.bad_code'),
        (header(255, count=1) + bytes(4), 'bad_kind', 'prism.bad_code'),
    ]
    pcap = write_pcap(tmp_path / 'session_bad.pcap', [frame(c[0]) for c in cases])
    tsf, dumped = cross_check(pcap)
    assert [d['refusal'] for d in dumped] == [c[1] for c in cases]
    for i, (fr, (raw, refusal, expert_name)) in enumerate(zip(tsf, cases)):
        assert expert_name in fr, (i, refusal, fr.get('_ws.expert.message'))
        kind = raw[3]
        if kind in (JOIN, JOINED):   # still decoded as a session packet
            assert num(fr, 'prism.nonce') == 0x1234ABCD and num(fr, 'prism.rank') == 3, i
            assert fr['_ws.col.Info'][0].startswith(f'{KIND[kind]} job=7 nonce=0x1234abcd rank=3'), i
            assert 'prism.elements' not in fr and 'prism.lane' not in fr, i
        else:
            assert 'prism.nonce' not in fr and 'prism.joined' not in fr, i
            assert fr['_ws.col.Info'][0].startswith(f'unknown ({kind})'), fr['_ws.col.Info']
    msgs = ' | '.join(m for fr in tsf for m in fr.get('_ws.expert.message', []))
    for text in ('dtype 1 on a JOIN: it has no descriptor', 'Flags 0x01 on a JOIN', 'A JOIN has count 0',
                 'A JOINED has count 0', 'A JOIN has no body', 'Reserved JOINED status bits set: 0x02',
                 "A JOINED's body is empty or a bitmap of 1 bytes", 'Unknown kind 13', 'Unknown kind 255'):
        assert text in msgs, text


def test_session_rules_the_switch_enforces(tmp_path):
    """Shapes PRISM's parser accepts but the session's rules do not: a JOIN with nonce 0 or a rank
    outside the group (the root refuses both with NACK MALFORMED), a JOINED whose COMPLETE, terms,
    chunk and bitmap disagree. The dissector warns (prism.bad_session) and decodes them whole."""
    cases = [  # (frame bytes, text of the warning)
        (session(JOIN, nonce=0), 'Nonce 0: a JOIN'),
        (session(JOIN, rank=4), 'Rank 4 is outside the group (0..3): the switch refuses this JOIN'),
        (session(JOINED, nonce=0, joined=1) + bitmap([3], 4), 'Nonce 0: a JOINED'),
        (session(JOINED, joined=3, first_op=9, complete=True) + bitmap([0, 1, 3], 4), 'COMPLETE, yet 3 of 4'),
        (session(JOINED, joined=2, first_op=9) + bitmap([0, 3], 4), 'Chunk 9 on a JOINED without COMPLETE'),
        (session(JOINED, joined=1) + bitmap([0, 3], 4), 'The bitmap names 2 rank(s), terms says 1'),
        (session(JOINED, joined=1, group=4) + b'\x81', 'bit(s) set past rank 3'),
    ]
    pcap = write_pcap(tmp_path / 'session_rules.pcap', [frame(c[0]) for c in cases])
    tsf, dumped = cross_check(pcap)
    assert [d['refusal'] for d in dumped] == ['ok'] * len(cases)
    for i, (fr, (raw, text)) in enumerate(zip(tsf, cases)):
        assert 'prism.bad_session' in fr, i
        assert any(text in m for m in fr['_ws.expert.message']), (i, text, fr['_ws.expert.message'])
        assert not {e for e in ERROR_EXPERTS if e in fr}, i


def test_heuristic_knows_the_session_kinds(tmp_path):
    """The heuristic takes kinds 1-12 on any UDP port, and no longer stops at NACK; kind 13 is not PRISM's."""
    pcap = write_pcap(tmp_path / 'heur.pcap', [frame(session(JOIN), sport=30001, dport=30001),
                                               frame(session(JOINED, joined=1) + bitmap([3], 4), sport=30001,
                                                     dport=30001),
                                               frame(header(13, count=0, terms=0), sport=30001, dport=30001),
                                               frame(header(STATUS, count=0, terms=0), sport=30001, dport=30001)])
    assert all('prism.kind' not in f for f in tshark(pcap))
    f = tshark(pcap, '-o', f'{PROTO}.heuristic:TRUE')
    assert [ints(x, 'prism.kind') for x in f] == [[JOIN], [JOINED], [], [STATUS]]
    assert ints(f[1], 'prism.joined.rank') == [3]


KULISCH_LANES = [  # (exact value in lane units, sideband)
    (0, 0),
    (3 << 148, 0),                       # fp32 1.5
    (-(5 << 148), 0),                    # fp32 -2.5
    (0, SIDE_NAN),
    (0, SIDE_NZERO),
    (0, SIDE_PINF),
    (0, SIDE_NINF),
    (0, SIDE_PINF | SIDE_NINF),
    ((2 ** 24 - 1) * 65535 << 253 | 1, 0),  # n = 37: the worst case in PROTOCOL.md
    (1, 0),                              # 2^-149
    (-(0x1234 << 80), SIDE_INVALID),
    (7 << 200, SIDE_OVERFLOW),
]


def test_kulisch_partial_fragments(tmp_path):
    recs = [lane_record(v, s) for v, s in KULISCH_LANES]
    assert len(recs[8]) == 3 + 37
    n1 = 7
    frag1 = struct.pack('>HH', 0, 300) + b''.join(recs[:n1])
    frag2 = struct.pack('>HH', 288, 300) + b''.join(recs[n1:])
    int_lanes = [lane_record(v) for v in (-123456789, 0, 2 ** 40, -(2 ** 300))]
    fp16_lanes = [lane_record(v) for v in (1, -(1 << 24), 65504 << 24)]
    frames = [
        frame(header(2, sender=2, group=8, terms=4, count=n1, encoding=3) + frag1),
        frame(header(2, sender=2, group=8, terms=4, count=len(recs) - n1, encoding=3, flags=2) + frag2),
        frame(header(2, sender=3, terms=2, count=4, dtype=9, out_dtype=9, encoding=3, transport=3, flags=1)
              + struct.pack('>HH', 10, 14) + b''.join(int_lanes)),
        frame(header(2, sender=3, terms=1, count=3, dtype=2, out_dtype=2, encoding=3)
              + struct.pack('>HH', 0, 3) + b''.join(fp16_lanes)),
    ]
    pcap = write_pcap(tmp_path / 'kulisch.pcap', frames)
    tsf, dumped = cross_check(pcap)
    assert [d['refusal'] for d in dumped] == ['ok'] * 4
    f1, f2 = tsf[0], tsf[1]
    assert (num(f1, 'prism.first_lane'), num(f1, 'prism.chunk_lanes')) == (0, 300)
    assert (num(f2, 'prism.first_lane'), num(f2, 'prism.chunk_lanes')) == (288, 300)
    assert ints(f2, 'prism.lane.index') == list(range(288, 288 + len(recs) - n1))
    assert ints(f1, 'prism.lane.n') == [0, 1, 1, 0, 0, 0, 0]
    assert ints(f1, 'prism.lane.offset') == [0, 18, 18, 0, 0, 0, 0]
    assert ints(f1, 'prism.lane.sign') == [0, 0, 1, 0, 0, 0, 0]
    assert ints(f1, 'prism.lane.side') == [0, 0, 0, SIDE_NAN, SIDE_NZERO, SIDE_PINF, SIDE_NINF]
    assert [float(x) for x in f1['prism.lane.value'][:3]] == [0.0, 1.5, -2.5]
    assert ints(f2, 'prism.lane.n')[:3] == [0, 37, 1]
    for g, v in zip(tsf[2]['prism.lane.value'], [-123456789.0, 0.0, 2.0 ** 40, -(2.0 ** 300)]):
        assert same_value(g, v, 1e-12)
    assert len(tsf[3]['prism.lane.value']) == 3
    for g, v in zip(tsf[3]['prism.lane.value'], [2.0 ** -24, -1.0, 65504.0]):
        assert same_value(g, v, 1e-12)
    pd = tshark_pdml(pcap)
    assert pd[0]['prism.encoding'] == ['Encoding: Kulisch partial (3)']
    assert any('NEG_ZERO_ONLY: True' in s for s in pd[0]['prism.lane.side.neg_zero_only'])
    assert any('negative' in s for s in pd[0]['prism.lane.sign'])


def test_malformed_frames_raise_expert_info(tmp_path):
    good = [lane_record(3 << 148), lane_record(-1)]
    frag = struct.pack('>HH', 0, 8)

    def partial(records: bytes, count=2, flags=0, first=0, lanes=8):
        return frame(header(2, terms=2, count=count, encoding=3, flags=flags) + struct.pack('>HH', first, lanes)
                     + records)

    cases = [  # (frame, prism-gen dump's refusal)
        (partial(bytes([0, 1, 47, 1]) + good[1]), 'bad_partial'),                  # n + offset = 48
        (partial(bytes([0, 2, 3, 1, 0]) + good[1]), 'bad_partial'),                # last magnitude byte 0
        (partial(bytes([0, 2, 3, 0, 1]) + good[1]), 'bad_partial'),                # first magnitude byte 0
        (partial(bytes([SIDE_SIGN, 0, 0]) + good[1]), 'bad_partial'),              # zero with a sign
        (partial(bytes([0, 0, 4]) + good[1]), 'bad_partial'),                      # zero with an offset
        (partial(bytes([SIDE_NAN, 1, 0, 5]) + good[1]), 'bad_partial'),            # special with a magnitude
        (partial(bytes([0x40, 0, 0]) + good[1]), 'bad_partial'),                   # reserved sideband bit
        (partial(b''.join(good), count=3), 'payload_length'),                      # ends inside the records
        (partial(good[0] + good[1][:3]), 'payload_length'),                        # record cut short
        (partial(b''.join(good) + b'\0'), 'payload_length'),                       # trailing byte
        (partial(b''.join(good), first=7, lanes=8), 'bad_fragment'),               # 7 + 2 > 8 lanes
        (partial(b''.join(good), lanes=0), 'bad_fragment'),
        (partial(b''.join(good), flags=4), 'bad_flags'),                           # SIDEBAND on encoding 3
        (frame(header(2, terms=2, count=1, encoding=3) + b'\0\0'), 'payload_length'),  # no fragment header
        (frame(header(1, count=1, flags=0x08) + bytes(4)), 'bad_flags'),
        (frame(header(1, count=1, group=0) + bytes(4)), 'bad_group'),
        (frame(header(1, count=1, terms=2) + bytes(4)), 'bad_terms'),
        (frame(header(3, count=1, group=4, terms=3, encoding=2) + bytes(4)), 'bad_terms'),
        (frame(header(2, count=1, group=4, terms=5, encoding=2) + bytes(4)), 'bad_terms'),
        (frame(header(1, count=1, encoding=2) + bytes(4)), 'bad_encoding'),
        (frame(header(3, count=1, terms=4, encoding=3) + frag + good[0]), 'bad_encoding'),
        (frame(header(2, count=1, terms=1, encoding=1) + bytes(4)), 'bad_encoding'),
        (frame(header(1, count=1, encoding=4) + bytes(4)), 'bad_encoding'),
        (frame(header(1, count=1, out_dtype=10) + bytes(4)), 'bad_out_dtype'),
        (frame(header(1, count=1, policy=0) + bytes(4)), 'bad_policy'),
        (frame(header(1, count=1, transport=4) + bytes(4)), 'bad_transport'),
        (frame(header(1, count=1, exceptions=3) + bytes(4)), 'bad_exceptions'),
        (frame(header(3, count=2, terms=4, encoding=2, flags=4) + bytes(8) + b'\x01'), 'payload_length'),  # sideband cut short
        (frame(header(1, count=2, flags=4) + bytes(8) + bytes(2)), 'bad_flags'),    # SIDEBAND on a CONTRIB
        (frame(header(3, count=2, terms=4, encoding=2, dtype=4, out_dtype=2) + bytes(3)), 'payload_length'),
        (frame(header(1, count=1)[:20]), 'short_header'),
        (frame(header(1, count=1, magic=0x5053) + bytes(4)), 'bad_magic'),
        (frame(header(1, count=1, version=2) + bytes(4)), 'bad_version'),
        (frame(header(0, count=1) + bytes(4)), 'bad_kind'),
    ]
    pcap = write_pcap(tmp_path / 'malformed.pcap', [c[0] for c in cases])
    tsf, dumped = cross_check(pcap)
    assert [d['refusal'] for d in dumped] == [c[1] for c in cases]
    # Every frame is still dissected as far as it goes, and flagged.
    assert all({e for e in ERROR_EXPERTS if e in f} for f in tsf)


def test_rules_both_enforce(tmp_path):
    """PROTOCOL.md says these must be 0 (or equal): the C++ parser refuses them with its own reasons and
    the dissector flags them, without refusing to decode."""
    frames = [
        frame(header(1, count=1, status=1) + bytes(4)),                         # status on a CONTRIB
        frame(header(3, count=1, terms=4, encoding=2, status=0x10) + bytes(4)),  # reserved RESULT status bit
        frame(header(4, count=0, terms=2, status=3)),                            # NACK terms must be 0 (but for 8)
        frame(header(3, count=1, terms=4, encoding=2, flags=4) + bytes(4) + b'\x20'),  # reserved sideband bit
    ]
    pcap = write_pcap(tmp_path / 'lax.pcap', frames)
    assert [d['refusal'] for d in dump(pcap)] == ['bad_status', 'bad_status', 'bad_terms', 'bad_sideband']
    tsf = tshark(pcap)
    assert 'prism.bad_status' in tsf[0]
    assert 'prism.bad_status' in tsf[1]
    assert 'prism.bad_terms' in tsf[2]
    assert 'prism.bad_status' in tsf[3]
    assert num(tsf[3], 'prism.sideband.status') == 0x20


def test_value_strings_for_every_code(tmp_path):
    frames = []
    for i in range(9):
        code = i + 1
        out = (i + 3) % 9 + 1
        frames.append(frame(header(1, count=1, dtype=code, out_dtype=out, policy=i % 3 + 1, transport=(i + 1) % 3 + 1,
                                   exceptions=i % 2 + 1, flags=2 if i % 2 else 1)
                            + bytes(FORMAT_BYTES[code])))
    pcap = write_pcap(tmp_path / 'codes.pcap', frames)
    pd = tshark_pdml(pcap)
    for i, p in enumerate(pd):
        code, out = i + 1, (i + 3) % 9 + 1
        assert p['prism.kind'] == ['Kind: CONTRIB (1)']
        assert p['prism.dtype'][0].endswith(f': {FORMAT[code]} ({code})'), p['prism.dtype']
        assert p['prism.out_dtype'][0].endswith(f': {FORMAT[out]} ({out})'), p['prism.out_dtype']
        assert p['prism.policy'][0].endswith(f': {POLICY[i % 3 + 1]} ({i % 3 + 1})')
        assert p['prism.transport'][0].endswith(f': {TRANSPORT[(i + 1) % 3 + 1]} ({(i + 1) % 3 + 1})')
        assert p['prism.exceptions'][0].endswith(f': {EXCEPTIONS[i % 2 + 1]} ({i % 2 + 1})')
        assert p['prism.encoding'] == ['Encoding: elements in dtype (1)']
        flag = 'LAST_CHUNK' if i % 2 else 'RETRANSMIT'
        assert any(s.endswith(f'{flag}: True') for s in p[f'prism.flags.{flag.lower()}'])
    tsf = tshark(pcap)
    assert [num(f, 'prism.dtype') for f in tsf] == list(range(1, 10))


def test_port_preference_and_heuristic(tmp_path):
    body = header(1, count=1) + struct.pack('<f', 2.5)
    pcap = write_pcap(tmp_path / 'port.pcap', [frame(body, sport=30000, dport=30000)])
    assert 'prism.job' not in tshark(pcap)[0]
    f = tshark(pcap, '-o', f'{PROTO}.udp_port:30000')[0]
    assert num(f, 'prism.job') == 7 and [float(x) for x in f['prism.element.fp32']] == [2.5]
    assert num(f, 'udp.checksum.status') == 1
    f = tshark(pcap, '-o', f'{PROTO}.heuristic:TRUE')[0]
    assert num(f, 'prism.job') == 7
    # Port 20562 is no longer PRISM's once the preference moves it.
    pcap2 = write_pcap(tmp_path / 'port2.pcap', [frame(body)])
    assert 'prism.job' not in tshark(pcap2, '-o', f'{PROTO}.udp_port:30000')[0]
    assert num(tshark(pcap2)[0], 'prism.job') == 7
    assert dump(pcap, port=30000)[0]['refusal'] == 'ok'


# --------------------------------------------------------------------------
# Steering (PROTOCOL.md): a switch takes udp_port .. udp_port + S - 1

STEER_FIELDS = ['frame.number', 'udp.dstport', 'prism.job', 'prism.op', 'prism.chunk', 'prism.kind',
                'prism.shard_port', 'prism.shard', 'prism.wrong_shard_port', '_ws.expert.message', '_ws.lua.error']


def test_shard_ports(tmp_path):
    """By default every port of udp_port .. udp_port + 63 (the most shards a switch has) is PRISM's,
    and a packet towards the switch shows which shard's port it went to; with prism_wire.shards = S
    only udp_port .. udp_port + S - 1 are, and the port is checked against the rule, computed here:
    (job + op + chunk) mod S without wrapping, a JOIN's job mod S."""
    body = header(1, count=1) + struct.pack('<f', 1.0)         # CONTRIB job 7 op 42 chunk 0: 49
    frames = [frame(body, sport=5001, dport=PORT + k) for k in range(66)]   # from a rank at port 5001
    frames.append(frame(header(5, op=0x1234, chunk=0, terms=0, dtype=0, out_dtype=0, policy=0, encoding=0,
                               transport=0, exceptions=0), sport=5001, dport=PORT + 3))   # JOIN job 7
    frames.append(frame(header(1, job=0xFFFFFFFF, op=1, chunk=0, count=1) + struct.pack('<f', 1.0),
                        sport=5001, dport=PORT + 1))   # 2^32 mod 3 = 1: right without wrapping, wrong with
    pcap = write_pcap(tmp_path / 'shards.pcap', frames)
    f = tshark(pcap, fields=STEER_FIELDS)
    for k in range(66):
        if k < 64:
            assert num(f[k], 'prism.job') == 7 and num(f[k], 'prism.shard_port') == k, f[k]
            assert 'prism.shard' not in f[k] and 'prism.wrong_shard_port' not in f[k], f[k]
        else:
            assert 'prism.job' not in f[k], f'port {PORT + k} is past the 64 shard ports: {f[k]}'
    for S in (1, 3, 4):
        f = tshark(pcap, '-o', f'{PROTO}.shards:{S}', fields=STEER_FIELDS)
        for k in range(66):
            if k >= S:
                assert 'prism.job' not in f[k], f'port {PORT + k} with {S} shards: {f[k]}'
                continue
            want = (7 + 42 + 0) % S
            assert num(f[k], 'prism.shard_port') == k and num(f[k], 'prism.shard') == want, f[k]
            assert ('prism.wrong_shard_port' in f[k]) == (k != want), (S, k, f[k])
        join, big = f[66], f[67]
        if S == 4:      # JOIN: 7 mod 4 = 3, sent to port + 3
            assert num(join, 'prism.shard') == 3 and 'prism.wrong_shard_port' not in join, join
        if S == 3:      # (2^32 - 1 + 1 + 0) mod 3 = 1, sent to port + 1
            assert num(big, 'prism.shard') == 1 and 'prism.wrong_shard_port' not in big, big
    # Another udp_port moves the whole range.
    f = tshark(write_pcap(tmp_path / 'moved.pcap', [frame(body, sport=5001, dport=30002),
                                                    frame(body, sport=5001, dport=30003)]),
               '-o', f'{PROTO}.udp_port:30000', '-o', f'{PROTO}.shards:3', fields=STEER_FIELDS)
    assert num(f[0], 'prism.shard_port') == 2 and num(f[0], 'prism.shard') == (7 + 42) % 3 and 'prism.job' not in f[1]


def test_a_steered_capture_decodes_as_prisms_parser_does(tmp_path):
    """prism-gen writes each frame to its shard's port (a switch of 3 shards): tshark decodes every
    one, as `prism-gen dump --shards 3` does, and finds none on the wrong port."""
    require_gen()
    cfg = tmp_path / 'three.yaml'
    text = CONFIG.read_text().replace('shards: 1 ', 'shards: 3 ')
    assert 'shards: 3 ' in text, 'configs/reference.yaml no longer says reducers: {shards: 1}'
    cfg.write_text(text)
    pcap = tmp_path / 'steered.pcap'
    r = subprocess.run([str(GEN), 'write', '--config', str(cfg), '--job', '7', '--dtype', 'fp32', '--policy',
                        'kulisch', '--elements', '3000', '--ops', '2', '--merged', str(pcap)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    f = tshark(pcap, '-o', f'{PROTO}.shards:3', fields=STEER_FIELDS)
    r = subprocess.run([str(GEN), 'dump', str(pcap), '--shards', '3'], capture_output=True, text=True, timeout=60)
    dumped = [json.loads(ln) for ln in r.stdout.splitlines()]
    assert len(f) == len(dumped) > 0 and {d['refusal'] for d in dumped} == {'ok'}
    assert {num(x, 'udp.dstport') for x in f} == {PORT, PORT + 1, PORT + 2}
    for x, d in zip(f, dumped):
        assert (num(x, 'prism.job'), num(x, 'prism.op'), num(x, 'prism.chunk')) == (d['job'], d['op'], d['chunk'])
        assert num(x, 'prism.shard_port') == num(x, 'prism.shard') == num(x, 'udp.dstport') - PORT
        assert 'prism.wrong_shard_port' not in x, x


def test_pool_kinds(tmp_path):
    """PROTOCOL.md's Job pools example (ALLOC and ALLOCATED, byte for byte as printed there), a LEAVE and
    its LEFT, the four new NACK reasons echoing an ALLOC, and what PROTOCOL.md forbids in them: each read
    by the dissector as PROTOCOL.md names it, and PRISM's parser reads the same bytes."""
    alloc = bytes.fromhex(('50 52 01 07 00 00 03 e8 ca fe f0 0d 00 00 00 00 '
                           '00 00 00 04 00 00 00 00 00 00 00 00 00 00 00 00 '
                           '00 00 00 00 00 00 00 00').replace(' ', ''))  # padded to the ALLOCATED's size
    allocated = bytes.fromhex(('50 52 01 08 00 00 03 eb ca fe f0 0d 00 00 03 e8 '
                               '00 01 00 04 00 02 00 00 00 00 00 00 00 00 00 00 '
                               '00 00 01 00 00 00 75 30').replace(' ', ''))
    assert alloc == session(ALLOC, nonce=0xCAFEF00D, rank=0, group=4, job=1000) + bytes(8)
    leave = session(LEAVE, nonce=0x1234ABCD, rank=2, group=0, job=1003)
    left = session(LEFT, nonce=0x1234ABCD, rank=2, group=4, joined=3, job=1003)
    rank_ip = dict(src='10.0.0.3', dst='10.0.0.254', smac='02:00:00:00:00:03', dmac='02:00:00:00:ff:00')
    good = [frame(alloc, **rank_ip), frame(allocated), frame(leave, **rank_ip), frame(left)]
    for reason in (9, 10, 11, 12):   # a NACK to the source echoes the ALLOC: the nonce, the rank, the group
        good.append(frame(header(4, job=1000, op=0xCAFEF00D, sender=0, group=4, terms=0, count=0, dtype=0,
                                 out_dtype=0, policy=0, encoding=0, transport=0, exceptions=0, status=reason)))
    pcap = write_pcap(tmp_path / 'pool.pcap', good)
    tsf, dumped = cross_check(pcap)
    assert [d['refusal'] for d in dumped] == ['ok'] * len(good)
    assert tsf[0]['_ws.col.Info'] == ['ALLOC job=1000 nonce=0xcafef00d rank=0 group=4']
    assert tsf[1]['_ws.col.Info'] == ['ALLOCATED job=1003 nonce=0xcafef00d rank=1 pool=1000 group=4 shards=2 '
                                      'quota=256 idle_ms=30000']
    assert tsf[3]['_ws.col.Info'] == ['LEFT job=1003 nonce=0x1234abcd rank=2 still_bound=3/4']
    names = [fr['_ws.col.Info'][0].split('reason=')[1] for fr in tsf[4:]]
    assert names == ['POOL_FULL', 'GROUP_TOO_LARGE', 'OUT_OF_POOL', 'RANK_TAKEN'], names
    pd = tshark_pdml(pcap)
    assert pd[0]['prism.kind'] == ['Kind: ALLOC (7)'] and pd[1]['prism.kind'] == ['Kind: ALLOCATED (8)']
    assert pd[2]['prism.kind'] == ['Kind: LEAVE (9)'] and pd[3]['prism.kind'] == ['Kind: LEFT (10)']
    assert pd[0]['prism.sender'][0] == 'Sender: 0 (the asking rank)'
    assert pd[1]['prism.sender'][0] == 'Sender: 1 (switch)'
    assert pd[2]['prism.sender'][0] == 'Sender: 2 (the leaving rank)'
    bad = [  # (frame bytes, prism-gen dump's refusal, the expert the dissector raises)
        (session(ALLOC, dtype=1), 'bad_dtype', 'prism.bad_descriptor'),
        (session(ALLOC, terms=1), 'bad_terms', 'prism.bad_terms'),
        (session(ALLOC, group=0), 'bad_group', 'prism.bad_group'),
        (session(ALLOC) + b'\x00', 'payload_length', 'prism.bad_length'),
        (allocated[:32], 'payload_length', 'prism.bad_length'),
        (allocated[:20] + b'\x00\x00' + allocated[22:], 'bad_terms', 'prism.bad_terms'),
        (session(LEAVE, group=0, flags=1), 'bad_flags', 'prism.bad_flags'),
        (session(LEFT, joined=5, group=4), 'bad_terms', 'prism.bad_terms'),
        (session(LEFT, status=1), 'bad_status', 'prism.bad_status'),
    ]
    pcap = write_pcap(tmp_path / 'pool_bad.pcap', [frame(c[0]) for c in bad])
    tsf, dumped = cross_check(pcap)
    assert [d['refusal'] for d in dumped] == [c[1] for c in bad]
    for i, (fr, (_raw, refusal, expert_name)) in enumerate(zip(tsf, bad)):
        assert expert_name in fr, (i, refusal, fr.get('_ws.expert.message'))


# --------------------------------------------------------------------------
# Queries: QUERY (kind 11) and STATUS (kind 12), from PROTOCOL.md's "Queries"

def test_query_and_status(tmp_path):
    """A rank's QUERY (its CONTRIB's header: terms 1, count 0, no flags, no body), the STATUS answers (HELD
    and MISSING, with and without the bitmap of the members lacking), and the shapes PROTOCOL.md forbids:
    each read by the dissector as PROTOCOL.md names it, and PRISM's parser reads the same bytes."""
    rank = dict(src='10.0.0.1', dst='10.0.0.254', smac='02:00:00:00:00:01', dmac='02:00:00:00:ff:00')
    q = dict(sender=1, group=4, terms=1, count=0)
    st = dict(sender=9, group=12, count=0)
    cases = [  # (kind, header fields, body, from the rank, dump's refusal, expert raised)
        (QUERY, q, b'', True, 'ok', None),
        (STATUS, dict(st, terms=3, status=HELD), bitmap([2, 5, 6, 7, 8, 9, 10, 11, 4], 12), False, 'ok', None),
        (STATUS, dict(st, terms=0, status=MISSING), b'', False, 'ok', None),
        (STATUS, dict(st, terms=12, status=HELD), bitmap([], 12), False, 'ok', None),
        (QUERY, dict(q, count=4), b'', True, 'bad_count', 'prism.bad_count'),
        (QUERY, q, b'\x00\x00\x80\x3f', True, 'payload_length', 'prism.bad_length'),
        (QUERY, dict(q, terms=2), b'', True, 'bad_terms', 'prism.bad_terms'),
        (QUERY, dict(q, flags=1), b'', True, 'bad_flags', 'prism.bad_flags'),
        (QUERY, dict(q, encoding=2), b'', True, 'bad_encoding', 'prism.bad_encoding'),
        (STATUS, dict(st, terms=1, status=2), b'', False, 'bad_status', 'prism.bad_status'),
        (STATUS, dict(st, terms=13, status=HELD), b'', False, 'bad_terms', 'prism.bad_terms'),
        (STATUS, dict(st, terms=1, status=HELD), b'\x01', False, 'payload_length', 'prism.bad_length'),
    ]
    frames = [frame(header(kind, **h) + body, **(rank if from_rank else {})) for kind, h, body, from_rank, *_ in cases]
    pcap = write_pcap(tmp_path / 'queries.pcap', frames)
    tsf, dumped = cross_check(pcap)
    assert [d['refusal'] for d in dumped] == [c[4] for c in cases]
    for i, (fr, (kind, h, body, _, refusal, expert)) in enumerate(zip(tsf, cases)):
        if expert:
            assert expert in fr, (i, fr.get('_ws.expert.message'))
            continue
        assert num(fr, 'prism.kind') == kind
        info = fr['_ws.col.Info'][0]
        assert info.startswith(f'{KIND[kind]} job=7 op=42 chunk=0 sender={h["sender"]}'), info
        if kind == STATUS:
            assert f'{"HELD" if h["status"] else "MISSING"} terms={h["terms"]}/{h["group"]}' in info, info
    assert ints(tsf[1], 'prism.missing.rank') == [2, 4, 5, 6, 7, 8, 9, 10, 11]
    assert ints(tsf[1], 'prism.missing.children') == [12 - 3 - 9]
    assert 'missing=2,4,5,6,7,8,9,10,11' in tsf[1]['_ws.col.Info'][0]
    pd = tshark_pdml(pcap)
    assert pd[0]['prism.kind'] == ['Kind: QUERY (11)'] and pd[1]['prism.kind'] == ['Kind: STATUS (12)']
    assert pd[1]['prism.query_status'][0].startswith('Query status: HELD (1)'), pd[1]['prism.query_status']
    assert pd[2]['prism.query_status'][0].startswith('Query status: MISSING (0)'), pd[2]['prism.query_status']
