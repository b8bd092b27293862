"""PRISM wire protocol (docs/PROTOCOL.md) against an independent codec.

Every frame here is built or decoded with scapy and with Python's own struct
and RFC 1071 checksum code, from the layout PROTOCOL.md gives, never from the
C++ sources: scapy-built frames must parse (``prism-gen dump``) to exactly the
fields they were built with; PRISM-built frames (``prism-gen write``) must
decode in scapy to what the generator's manifest, inputs and config say; each
malformed variant must be refused with its own reason; the worked example of
PROTOCOL.md must be true.
"""
from __future__ import annotations

import json
import os
import random
import re
import struct
import subprocess
from pathlib import Path

import pytest

from scapy.all import ARP, Dot1Q, Ether, IP, IPv6, Raw, UDP, rdpcap, wrpcap
from scapy.layers.inet import IPOption_NOP, IPOption_Router_Alert

BUILD = Path(os.environ.get('PRISM_BUILD') or Path(__file__).resolve().parents[2] / 'build')
GEN = BUILD / 'app' / 'prism-gen'
REPO = Path(__file__).resolve().parents[2]
DOC = REPO / 'docs' / 'PROTOCOL.md'
REFERENCE_YAML = REPO / 'configs' / 'reference.yaml'

# ---------------------------------------------------------------- PROTOCOL.md
PORT = 20562
MAGIC = 0x5052
VERSION = 1
CONTRIB, PARTIAL, RESULT, NACK, JOIN, JOINED = 1, 2, 3, 4, 5, 6
ENC_DTYPE, ENC_OUT, ENC_KULISCH = 1, 2, 3
RETRANSMIT, LAST_CHUNK, SIDEBAND = 1, 2, 4
# Format codes and element sizes.
FORMATS = {'fp32': (1, 4), 'fp16': (2, 2), 'bf16': (3, 2), 'e4m3fn': (4, 1), 'e4m3fnuz': (5, 1),
           'e5m2': (6, 1), 'e5m2fnuz': (7, 1), 'int8': (8, 1), 'int32': (9, 4)}
SIZE = {code: size for code, size in FORMATS.values()}
POLICIES = {'fp32_arrival': 1, 'kulisch': 2, 'fp32_binomial': 3}
TRANSPORTS = {'rounded': 1, 'kulisch': 2, 'auto': 3}
EXCEPTIONS = {'ieee': 1, 'saturate': 2}
NACK_REASONS = range(1, 9)
OP_ABANDONED = 8
# Lane record sideband bits.
S_NAN, S_POSINF, S_NEGINF, S_NEGZERO, S_INVALID, S_OVERFLOW, S_SIGN = 1, 2, 4, 8, 16, 32, 128

HDR = struct.Struct('>HBBIIIHHHHBBBBBBBB')
assert HDR.size == 32
FIELDS = ('magic', 'version', 'kind', 'job', 'op', 'chunk', 'sender', 'group', 'terms', 'count', 'dtype',
          'out_dtype', 'policy', 'encoding', 'transport', 'exceptions', 'flags', 'status')
ETH, VLAN, IPMIN, UDPLEN = 14, 4, 20, 8


def header(**kw) -> bytes:
    h = dict(magic=MAGIC, version=VERSION, kind=CONTRIB, job=7, op=0, chunk=0, sender=0, group=4, terms=1,
             count=1, dtype=1, out_dtype=1, policy=2, encoding=ENC_DTYPE, transport=2, exceptions=1, flags=0,
             status=0)
    unknown = set(kw) - set(h)
    assert not unknown, unknown
    h.update(kw)
    return HDR.pack(*(h[f] for f in FIELDS))


def unpack_header(b: bytes) -> dict:
    return dict(zip(FIELDS, HDR.unpack(b[:32])))


def lane_record(side: int, value: int) -> bytes:
    """A lane record as PROTOCOL.md lays it out: sideband|sign, n, offset, magnitude (LE, trimmed)."""
    if value == 0:
        return bytes([side, 0, 0])
    mag = abs(value)
    b = mag.to_bytes((mag.bit_length() + 7) // 8, 'little')
    lo = next(i for i, x in enumerate(b) if x)
    n = len(b) - lo
    assert n + lo <= 47
    return bytes([side | (S_SIGN if value < 0 else 0), n, lo]) + b[lo:]


def rfc1071(data: bytes) -> int:
    """Internet checksum: one's complement of the one's complement sum of 16-bit words."""
    if len(data) % 2:
        data += b'\0'
    s = sum(struct.unpack(f'>{len(data) // 2}H', data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def ip_offset(frame: bytes) -> int:
    et = struct.unpack_from('>H', frame, 12)[0]
    return ETH + VLAN if et == 0x8100 else ETH


def fix_ip_checksum(f: bytearray, at=None):
    at = ip_offset(f) if at is None else at
    ihl = (f[at] & 0xF) * 4
    f[at + 10:at + 12] = b'\0\0'
    f[at + 10:at + 12] = struct.pack('>H', rfc1071(bytes(f[at:at + ihl])))


def udp_checksum(src_ip: bytes, dst_ip: bytes, udp: bytes) -> int:
    pseudo = src_ip + dst_ip + struct.pack('>BBH', 0, 17, len(udp))
    c = rfc1071(pseudo + udp[:6] + b'\0\0' + udp[8:])
    return 0xFFFF if c == 0 else c


def fix_udp_checksum(f: bytearray, udp_len=None):
    at = ip_offset(f)
    ihl = (f[at] & 0xF) * 4
    u = at + ihl
    n = struct.unpack_from('>H', f, u + 4)[0] if udp_len is None else udp_len
    f[u + 6:u + 8] = struct.pack('>H', udp_checksum(bytes(f[at + 12:at + 16]), bytes(f[at + 16:at + 20]),
                                                   bytes(f[u:u + n])))


def prism_offset(f) -> int:
    at = ip_offset(f)
    return at + (f[at] & 0xF) * 4 + UDPLEN


def frame(prism: bytes, *, vlan=None, prio=0, src_mac='02:00:00:00:00:01', dst_mac='02:00:00:00:ff:00',
          src_ip='10.0.0.2', dst_ip='10.0.0.254', sport=PORT, dport=PORT, ip_id=1, ttl=64, df=True,
          options=None, pad=b'') -> bytes:
    """An Ethernet [802.1Q] / IPv4 / UDP / PRISM frame built by scapy (it fills lengths and checksums)."""
    eth = Ether(src=src_mac, dst=dst_mac)
    if vlan is not None:
        eth = eth / Dot1Q(vlan=vlan, prio=prio)
    ip = IP(src=src_ip, dst=dst_ip, id=ip_id, ttl=ttl, flags='DF' if df else 0)
    if options:
        ip.options = options
    return bytes(eth / ip / UDP(sport=sport, dport=dport) / Raw(prism)) + pad


def write_pcap(path: Path, frames):
    wrpcap(str(path), [Ether(f) for f in frames])


def dump(pcap: Path, *extra) -> list[dict]:
    p = subprocess.run([str(GEN), 'dump', str(pcap), *map(str, extra)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, f'prism-gen dump exited {p.returncode}: {p.stderr}'
    return [json.loads(line) for line in p.stdout.splitlines() if line.strip()]


def dump_frames(tmp_path: Path, frames, name='f.pcap', *extra) -> list[dict]:
    path = tmp_path / name
    write_pcap(path, frames)
    rows = dump(path, *extra)
    assert len(rows) == len(frames), f'dump printed {len(rows)} rows for {len(frames)} frames'
    for i, r in enumerate(rows):
        assert r['index'] == i
    return rows


@pytest.fixture(autouse=True)
def _binary():
    if not (GEN.is_file() and os.access(GEN, os.X_OK)):
        pytest.skip(f'prism-gen not found at {GEN} (set PRISM_BUILD)')


# ------------------------------------------------ scapy-built frames -> dump
def rand_mac(rng):
    return '02:' + ':'.join(f'{rng.randrange(256):02x}' for _ in range(5))


def rand_ip(rng):
    return '.'.join(str(x) for x in (rng.randrange(1, 224), rng.randrange(256), rng.randrange(256),
                                     rng.randrange(1, 255)))


def rand_lane(rng) -> tuple[int, int]:
    """(side, value) of a valid lane record: specials, zeros, tiny and huge magnitudes."""
    r = rng.random()
    if r < 0.1:
        return rng.choice([S_NAN, S_POSINF, S_NEGINF, S_POSINF | S_NEGINF, S_NEGZERO, S_NAN | S_POSINF]), 0
    if r < 0.15:
        return rng.choice([0, S_INVALID, S_OVERFLOW]), 0
    if r < 0.35:
        v = rng.randrange(1, 256)
    elif r < 0.6:
        v = rng.getrandbits(rng.randrange(1, 64)) | 1
    elif r < 0.8:  # a value with trailing zero bytes (offset > 0)
        v = (rng.getrandbits(rng.randrange(1, 40)) | 1) << rng.randrange(8, 250)
    else:  # near the top: fp32 at 65535 ranks needs ~294 bits; records allow up to 376
        v = rng.getrandbits(rng.randrange(280, 376)) | 1
    return rng.choice([0, 0, S_INVALID, S_OVERFLOW]), -v if rng.random() < 0.5 else v


def random_packet(rng, kind, encoding=None, sideband=None):
    """(header fields, body bytes, expected payload, expected sideband, first_lane, chunk_lanes)."""
    group = rng.choice([1, 2, 3, 4, 7, 64, 1000, 65535, rng.randrange(1, 65536)])
    h = dict(kind=kind, job=rng.getrandbits(32), op=rng.getrandbits(32), chunk=rng.getrandbits(32),
             sender=rng.getrandbits(16), group=group, dtype=rng.randrange(1, 10), out_dtype=rng.randrange(1, 10),
             policy=rng.randrange(1, 4), transport=rng.randrange(1, 4), exceptions=rng.randrange(1, 3),
             flags=rng.choice([0, RETRANSMIT, LAST_CHUNK, RETRANSMIT | LAST_CHUNK]), status=0)
    if kind == NACK:
        # A NACK echoes whatever the refused packet said: any codes, count 0, terms 0, no body.
        h.update(terms=0, count=0, status=rng.choice(NACK_REASONS), encoding=rng.randrange(256),
                 dtype=rng.randrange(256), out_dtype=rng.randrange(256), policy=rng.randrange(256),
                 transport=rng.randrange(256), exceptions=rng.randrange(256), group=rng.randrange(65536))
        return h, b'', b'', b'', 0, 0
    if kind == CONTRIB:
        h.update(encoding=ENC_DTYPE, terms=1)
    elif kind == PARTIAL:
        h.update(encoding=encoding, terms=rng.randrange(1, group + 1))
    else:
        h.update(encoding=ENC_OUT, terms=group, status=rng.randrange(8))
    if h['encoding'] == ENC_KULISCH:
        count = rng.randrange(1, 40)
        first = rng.randrange(0, 65536 - count)
        lanes = first + count + rng.choice([0, 0, rng.randrange(0, 65536 - first - count)])
        recs = b''.join(lane_record(*rand_lane(rng)) for _ in range(count))
        h['count'] = count
        return h, struct.pack('>HH', first, lanes) + recs, recs, b'', first, lanes
    size = SIZE[h['dtype'] if h['encoding'] == ENC_DTYPE else h['out_dtype']]
    count = rng.choice([1, 2, 3, rng.randrange(1, 1440 // size // 2)])
    h['count'] = count
    elems = rng.randbytes(count * size)
    side = b''
    if kind != CONTRIB and (sideband if sideband is not None else rng.random() < 0.5):
        h['flags'] |= SIDEBAND
        side = bytes(rng.randrange(8) for _ in range(count))
    return h, elems + side, elems, side, 0, count


def check_row(row, h, payload, side, first, lanes, net):
    assert row['refusal'] == 'ok', row
    for f in FIELDS[2:]:
        assert row[f] == h[f], f'{f}: dump says {row[f]}, frame has {h[f]} ({row})'
    for k, v in net.items():
        assert row[k] == v, f'{k}: dump says {row[k]}, frame has {v}'
    assert row['payload'] == payload.hex(), 'payload differs'
    assert row['sideband'] == side.hex(), 'sideband differs'
    if h['kind'] != NACK:
        assert (row['first_lane'], row['chunk_lanes']) == (first, lanes)


CASES = [(CONTRIB, None, False), (PARTIAL, ENC_OUT, False), (PARTIAL, ENC_OUT, True),
         (PARTIAL, ENC_KULISCH, False), (RESULT, ENC_OUT, False), (RESULT, ENC_OUT, True)] + \
        [(NACK, None, None)] * len(NACK_REASONS)


@pytest.mark.parametrize('tagged', [False, True], ids=['untagged', 'vlan'])
def test_scapy_frames_parse_to_their_fields(tmp_path, tagged):
    rng = random.Random(20562 + tagged)
    frames, expect = [], []
    for rep in range(12):
        for i, (kind, enc, sb) in enumerate(CASES):
            h, body, payload, side, first, lanes = random_packet(rng, kind, enc, sb)
            if kind == NACK:
                h['status'] = 1 + i - CASES.index((NACK, None, None))  # every reason 1..8
            net = dict(src_mac=rand_mac(rng), dst_mac=rand_mac(rng), src_ip=rand_ip(rng), dst_ip=rand_ip(rng),
                       src_port=rng.randrange(1, 65536), dst_port=PORT,
                       vlan=rng.randrange(1, 4095) if tagged else 0)
            opts = None
            if rep % 4 == 3:  # options are allowed on receive
                opts = rng.choice([[IPOption_Router_Alert()], [IPOption_NOP()] * 4, [IPOption_NOP()] * 8])
            pad = b'\0' * rng.choice([0, 0, 1, 6]) if rep % 3 == 2 else b''  # Ethernet padding is ignored
            f = frame(header(**h) + body, vlan=net['vlan'] if tagged else None, prio=rng.randrange(8),
                      src_mac=net['src_mac'], dst_mac=net['dst_mac'], src_ip=net['src_ip'], dst_ip=net['dst_ip'],
                      sport=net['src_port'], ip_id=rng.getrandbits(16), ttl=rng.randrange(1, 256),
                      df=rng.random() < 0.8, options=opts, pad=pad)
            frames.append(f)
            expect.append((h, payload, side, first, lanes, net))
    rows = dump_frames(tmp_path, frames)
    seen = set()
    for row, (h, payload, side, first, lanes, net), f in zip(rows, expect, frames):
        assert row['len'] == len(f)
        check_row(row, h, payload, side, first, lanes, net)
        seen.add((h['kind'], h['encoding'] if h['kind'] != NACK else h['status'], bool(h['flags'] & SIDEBAND)))
    for want in [(CONTRIB, 1, False), (PARTIAL, 2, False), (PARTIAL, 2, True),
                 (PARTIAL, 3, False), (RESULT, 2, False), (RESULT, 2, True)]:
        assert want in seen
    assert {s[1] for s in seen if s[0] == NACK} == set(NACK_REASONS)


def test_kulisch_partial_extremes_parse(tmp_path):
    """Encoding 3 records at the limits PROTOCOL.md sets: n = 47, n + offset = 47, every special, the
    fp32 worst case (3 + 37 bytes), and a fragment that ends exactly at chunk_lanes = 65535."""
    lanes = [(0, (1 << (8 * 47)) - 1), (0, -((1 << (8 * 47)) - 1)), (0, 1 << (8 * 46)), (0, -(0xFF << (8 * 46))),
             (0, 1), (0, -1), (S_NAN, 0), (S_POSINF, 0), (S_NEGINF, 0), (S_NEGZERO, 0), (S_POSINF | S_NEGINF, 0),
             (0, 0), (S_INVALID | S_OVERFLOW, 12345)]
    fp32_worst = 65535 * ((1 << 24) - 1) * (1 << 253) + 1  # 65535 x max fp32 in units of 2^-149, plus one unit
    assert len(lane_record(0, fp32_worst)) == 3 + 37
    lanes.append((0, -fp32_worst))
    recs = b''.join(lane_record(s, v) for s, v in lanes)
    frames, expect = [], []
    for first, total in [(0, len(lanes)), (65535 - len(lanes), 65535), (100, 1000)]:
        h = dict(kind=PARTIAL, encoding=ENC_KULISCH, count=len(lanes), group=65535, terms=65535)
        frames.append(frame(header(**h) + struct.pack('>HH', first, total) + recs))
        expect.append((h, first, total))
    # A single-record fragment of the worst case, alone in a frame.
    h = dict(kind=PARTIAL, encoding=ENC_KULISCH, count=1, group=65535, terms=1)
    frames.append(frame(header(**h) + struct.pack('>HH', 255, 256) + lane_record(0, fp32_worst)))
    rows = dump_frames(tmp_path, frames)
    for row, (h, first, total) in zip(rows[:3], expect):
        assert row['refusal'] == 'ok', row
        assert (row['first_lane'], row['chunk_lanes'], row['count']) == (first, total, len(lanes))
        assert row['payload'] == recs.hex()
    assert rows[3]['refusal'] == 'ok' and rows[3]['payload'] == lane_record(0, fp32_worst).hex()


def test_dump_port_option(tmp_path):
    f = frame(header() + bytes(4), dport=4791)
    assert dump_frames(tmp_path, [f])[0]['refusal'] == 'wrong_port'
    assert dump_frames(tmp_path, [f], 'g.pcap', '--port', '4791')[0]['refusal'] == 'ok'


def test_udp_checksum_ffff_accepted(tmp_path):
    """A UDP checksum that computes to 0 is sent as 0xFFFF (RFC 768); it must be accepted."""
    base = bytearray(frame(header(job=0) + bytes(4)))
    u = ip_offset(base) + IPMIN
    p = u + UDPLEN
    # Choose the job's low 16 bits so that the checksum computes to 0.
    base[p + 6:p + 8] = b'\0\0'
    base[u + 6:u + 8] = b'\0\0'
    pseudo = bytes(base[26:34]) + struct.pack('>BBH', 0, 17, len(base) - u)
    s = rfc1071(pseudo + bytes(base[u:]))  # one's complement of the sum with the word at 0
    # Adding word w to the sum changes ~sum: we want the folded sum to be 0xFFFF, i.e. w = s.
    base[p + 6:p + 8] = struct.pack('>H', s)
    assert rfc1071(pseudo + bytes(base[u:])) == 0
    base[u + 6:u + 8] = b'\xff\xff'
    assert Ether(bytes(base))[UDP].chksum == 0xFFFF
    again = Ether(bytes(base))
    del again[UDP].chksum
    assert Ether(bytes(again))[UDP].chksum == 0xFFFF, 'scapy computes the same checksum'
    rows = dump_frames(tmp_path, [bytes(base)])
    assert rows[0]['refusal'] == 'ok', rows[0]
    assert rows[0]['job'] == s


# ------------------------------------------------ PRISM-built frames -> scapy
def load_config(path: Path) -> dict:
    import yaml
    return yaml.safe_load(path.read_text())


def gen_write(tmp_path: Path, name: str, *args, config=REFERENCE_YAML):
    out = tmp_path / name
    out.mkdir(exist_ok=True)  # prism-gen makes --expected and --pcap-dir themselves, not their parents
    cmd = [str(GEN), 'write', '--config', str(config), '--job', '7', '--merged', str(out / 'm.pcap'),
           '--expected', str(out / 'exp'), '--pcap-dir', str(out / 'ports'), *map(str, args)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, f'{cmd}: exit {p.returncode}: {p.stderr}'
    man = json.loads((out / 'exp' / 'manifest.json').read_text())
    return out, man


GEN_CASES = [
    # dtype, out, policy, transport, exceptions, elements, mtu, ops
    ('fp32', 'fp32', 'kulisch', 'kulisch', 'ieee', 1000, 1500, 2),
    ('fp16', 'fp32', 'fp32_arrival', 'rounded', 'ieee', 1500, 1500, 1),
    ('bf16', 'bf16', 'fp32_binomial', 'auto', 'saturate', 777, 1500, 1),
    ('e4m3fn', 'fp16', 'kulisch', 'auto', 'ieee', 3000, 1500, 1),
    ('e5m2fnuz', 'fp32', 'kulisch', 'kulisch', 'saturate', 1441, 1500, 1),
    ('int8', 'int32', 'kulisch', 'kulisch', 'ieee', 9000, 9000, 1),
    ('int32', 'int32', 'fp32_arrival', 'rounded', 'ieee', 2236, 9000, 1),
]


@pytest.mark.parametrize('dt,ot,pol,tr,ex,elements,mtu,ops', GEN_CASES, ids=[c[0] + '-' + c[2] for c in GEN_CASES])
def test_prism_frames_decode_in_scapy(tmp_path, dt, ot, pol, tr, ex, elements, mtu, ops):
    out, man = gen_write(tmp_path, 'w', '--dtype', dt, '--out-dtype', ot, '--policy', pol, '--transport', tr,
                         '--exceptions', ex, '--elements', elements, '--mtu', mtu, '--ops', ops, '--op-base', 40,
                         '--values', 'specials' if dt.startswith('fp') else 'full', '--order', 'random')
    cfg = load_config(REFERENCE_YAML)
    job = next(j for j in cfg['jobs'] if j['id'] == 7)
    R = job['group']
    members = {m['rank']: m for m in job['members']}
    ports = {p['id']: p for p in cfg['ports']}
    dcode, esz = FORMATS[dt]
    # Chunk size: the most elements whose CONTRIB and RESULT both fit the MTU
    # (PROTOCOL.md: MTU - 20 - 8 - 32 body bytes; a RESULT carries out_dtype
    # elements plus a sideband byte each).
    osz = FORMATS[ot][1]
    C = min((mtu - 20 - 8 - 32) // max(esz, osz + 1), elements)
    assert man['chunk'] == C
    nchunks = -(-elements // C)
    assert man['chunks'] == nchunks
    inputs = {(r, op): (out / 'exp' / f'rank{r}.op{op}.in').read_bytes() for r in range(R)
              for op in range(40, 40 + ops)}
    for data in inputs.values():
        assert len(data) == elements * esz
    pkts = rdpcap(str(out / 'm.pcap'))
    assert len(pkts) == man['packets'] == R * nchunks * ops
    seen = set()
    for pkt in pkts:
        raw = bytes(pkt)
        assert len(raw) <= ETH + mtu, f'frame of {len(raw)} bytes exceeds a {mtu}-byte MTU'
        ip, udp = pkt[IP], pkt[UDP]
        assert ip.version == 4 and ip.ihl == 5 and not ip.options
        assert ip.flags == 'DF' and ip.frag == 0 and ip.ttl == 64 and ip.proto == 17
        assert ip.len == len(raw) - ETH
        assert udp.len == ip.len - 20
        assert udp.dport == PORT
        # Checksums as scapy recomputes them (and as RFC 1071 says).
        again = Ether(raw)
        del again[IP].chksum
        del again[UDP].chksum
        again = Ether(bytes(again))
        assert ip.chksum == again[IP].chksum
        assert rfc1071(raw[ETH:ETH + 20]) == 0
        assert udp.chksum != 0 and udp.chksum == again[UDP].chksum
        body = bytes(udp.payload)
        h = unpack_header(body)
        assert (h['magic'], h['version'], h['kind']) == (MAGIC, VERSION, CONTRIB)
        assert h['job'] == 7 and h['group'] == R and h['terms'] == 1
        r, op, c = h['sender'], h['op'], h['chunk']
        assert r in members and 40 <= op < 40 + ops and c < nchunks
        m = members[r]
        assert (pkt[Ether].src, ip.src, udp.sport) == (m['mac'], m['ip'], m['udp_port'])
        assert (pkt[Ether].dst, ip.dst) == (ports[m['port']]['mac'], ports[m['port']]['ip'])
        assert (h['dtype'], h['out_dtype'], h['policy'], h['encoding'], h['transport'], h['exceptions']) == \
            (dcode, FORMATS[ot][0], POLICIES[pol], ENC_DTYPE, TRANSPORTS[tr], EXCEPTIONS[ex])
        count = min(C, elements - c * C)
        assert h['count'] == count
        assert h['flags'] == (LAST_CHUNK if c == nchunks - 1 else 0), f'flags {h["flags"]} on chunk {c}'
        assert h['status'] == 0
        assert body[32:] == inputs[(r, op)][c * C * esz:(c * C + count) * esz], \
            f'payload of rank {r} op {op} chunk {c} is not its input slice'
        assert (r, op, c) not in seen
        seen.add((r, op, c))
    assert len(seen) == R * nchunks * ops
    # Every rank's packets in one chunk follow the manifest's arrival order.
    for o in man['ops']:
        for c, arr in enumerate(o['arrival']):
            order = [unpack_header(bytes(p[UDP].payload))['sender'] for p in pkts
                     if unpack_header(bytes(p[UDP].payload))['op'] == o['op'] and
                     unpack_header(bytes(p[UDP].payload))['chunk'] == c]
            assert order == arr


# ------------------------------------------------ malformed frames: one reason each
def good(**kw) -> bytearray:
    """A valid CONTRIB of 4 fp32 elements (or per kw), as a mutable frame."""
    h = dict(kind=CONTRIB, group=4, terms=1, count=4, dtype=1, out_dtype=1, encoding=ENC_DTYPE)
    body = kw.pop('body', None)
    vlan = kw.pop('vlan', None)
    h.update(kw)
    if body is None:
        body = bytes(range(h['count'] * SIZE.get(h['dtype'] if h['encoding'] == 1 else h['out_dtype'], 1)))
    return bytearray(frame(header(**h) + body, vlan=vlan))


def setb(f: bytearray, off: int, fmt: str, v):
    struct.pack_into(fmt, f, off, v)


def hdr_patch(f: bytearray, fix_udp=True, **kw) -> bytearray:
    p = prism_offset(f)
    h = unpack_header(bytes(f[p:p + 32]))
    h.update(kw)
    f[p:p + 32] = HDR.pack(*(h[k] for k in FIELDS))
    if fix_udp:
        fix_udp_checksum(f)
    return f


def resize_udp_payload(f: bytearray, new_body: bytes) -> bytearray:
    """Replaces everything after the UDP header, fixing IP/UDP lengths and checksums."""
    at = ip_offset(f)
    ihl = (f[at] & 0xF) * 4
    u = at + ihl
    g = bytearray(f[:u + UDPLEN]) + new_body
    setb(g, at + 2, '>H', ihl + UDPLEN + len(new_body))
    setb(g, u + 4, '>H', UDPLEN + len(new_body))
    fix_ip_checksum(g)
    fix_udp_checksum(g)
    return g


def kulisch(records: bytes, count: int, first=0, lanes=None, **kw) -> bytearray:
    lanes = first + count if lanes is None else lanes
    h = dict(kind=PARTIAL, encoding=ENC_KULISCH, terms=2, group=4, count=count, out_dtype=1)
    h.update(kw)
    return bytearray(frame(header(**h) + struct.pack('>HH', first, lanes) + records))


def malformed_variants():
    v = []  # (name, expected refusal, frame)

    def add(name, want, f):
        v.append((name, want, bytes(f)))

    g = good()
    add('baseline', 'ok', g)
    add('baseline_vlan', 'ok', good(vlan=5))
    add('short_frame', 'short_frame', g[:ETH + IPMIN + UDPLEN - 1])
    add('short_frame_14', 'short_frame', g[:14])
    add('short_frame_vlan', 'short_frame', good(vlan=5)[:ETH + VLAN + IPMIN + UDPLEN - 1])
    add('not_ipv4_arp', 'not_ipv4', bytes(Ether(dst='ff:ff:ff:ff:ff:ff') / ARP(psrc='10.0.0.2', pdst='10.0.0.254'))
        .ljust(60, b'\0'))
    add('not_ipv4_ipv6', 'not_ipv4', bytes(Ether() / IPv6() / UDP(dport=PORT) / Raw(bytes(g[42:]))))
    add('not_ipv4_qinq', 'not_ipv4', bytes(Ether() / Dot1Q(vlan=1) / Dot1Q(vlan=2) / IP(dst='10.0.0.254') /
                                          UDP(dport=PORT) / Raw(bytes(g[42:]))))
    f = bytearray(g)
    f[ETH] = 0x65  # version 6
    fix_ip_checksum(f, ETH)
    add('ip_version_6', 'ip_bad_header', f)
    f = bytearray(g)
    f[ETH] = 0x44  # IHL 4
    setb(f, ETH + 10, '>H', 0)
    setb(f, ETH + 10, '>H', rfc1071(bytes(f[ETH:ETH + 16])))
    add('ip_ihl_4', 'ip_bad_header', f)
    f = bytearray(g)
    setb(f, ETH + 2, '>H', len(g) - ETH + 1)  # total length beyond the frame
    fix_ip_checksum(f)
    add('ip_total_too_long', 'ip_bad_length', f)
    f = bytearray(g)
    setb(f, ETH + 2, '>H', 20 + 7)  # less than IPv4 + UDP headers
    fix_ip_checksum(f)
    add('ip_total_too_short', 'ip_bad_length', f)
    f = bytearray(g)
    f[ETH + 10] ^= 0x01
    add('ip_checksum', 'ip_bad_checksum', f)
    for name, ff in [('mf', 0x6000), ('offset', 0x4001), ('mf_no_df', 0x2000), ('offset_max', 0x1FFF)]:
        f = bytearray(g)
        setb(f, ETH + 6, '>H', ff)
        fix_ip_checksum(f)
        add('ip_fragment_' + name, 'ip_fragment', f)
    f = bytearray(g)
    f[ETH + 9] = 6  # TCP
    fix_ip_checksum(f)
    add('not_udp', 'not_udp', f)
    f = bytearray(g)
    setb(f, ETH + 20 + 4, '>H', len(g) - ETH - 20 - 1)  # UDP length one short of the IP payload
    setb(f, ETH + 20 + 6, '>H', 0)
    add('udp_length_short', 'udp_bad_length', f)
    f = bytearray(g)
    setb(f, ETH + 20 + 4, '>H', len(g) - ETH - 20 + 1)
    setb(f, ETH + 20 + 6, '>H', 0)
    add('udp_length_long', 'udp_bad_length', f)
    # Padding may follow the IP datagram, but the UDP length must still equal the IP payload.
    f = bytearray(g) + b'\0\0\0\0'
    setb(f, ETH + 2, '>H', len(f) - ETH)
    fix_ip_checksum(f)
    add('udp_length_vs_ip_payload', 'udp_bad_length', f)
    f = bytearray(g)
    f[ETH + 20 + 6] ^= 0x10
    add('udp_checksum', 'udp_bad_checksum', f)
    f = bytearray(g)
    f[-1] ^= 0x01  # payload corrupted, checksum stale
    add('udp_checksum_payload', 'udp_bad_checksum', f)
    f = bytearray(g)
    f[-1] ^= 0x01
    setb(f, ETH + 20 + 6, '>H', 0)  # no checksum: RFC 768 allows it
    add('udp_checksum_zero', 'ok', f)
    add('wrong_port', 'wrong_port', frame(header(count=4) + bytes(16), dport=PORT + 1))
    add('short_header', 'short_header', resize_udp_payload(bytearray(g), bytes(g[42:42 + 31])))
    add('short_header_empty', 'short_header', resize_udp_payload(bytearray(g), b''))
    add('bad_magic', 'bad_magic', hdr_patch(bytearray(g), magic=0x5250))
    add('bad_version_0', 'bad_version', hdr_patch(bytearray(g), version=0))
    add('bad_version_2', 'bad_version', hdr_patch(bytearray(g), version=2))
    add('bad_kind_0', 'bad_kind', hdr_patch(bytearray(g), kind=0))
    add('bad_kind_13', 'bad_kind', hdr_patch(bytearray(g), kind=13))  # 5 JOIN ... 10 LEFT, 11 QUERY, 12 STATUS exist
    for code in (0, 10, 255):
        add(f'bad_dtype_{code}', 'bad_dtype', hdr_patch(bytearray(g), dtype=code))
        add(f'bad_out_dtype_{code}', 'bad_out_dtype', hdr_patch(bytearray(g), out_dtype=code))
    for code in (0, 4):
        add(f'bad_policy_{code}', 'bad_policy', hdr_patch(bytearray(g), policy=code))
        add(f'bad_encoding_{code}', 'bad_encoding', hdr_patch(bytearray(g), encoding=code))
        add(f'bad_transport_{code}', 'bad_transport', hdr_patch(bytearray(g), transport=code))
    add('bad_exceptions_0', 'bad_exceptions', hdr_patch(bytearray(g), exceptions=0))
    add('bad_exceptions_3', 'bad_exceptions', hdr_patch(bytearray(g), exceptions=3))
    # Kind/encoding combinations PROTOCOL.md does not allow.
    add('contrib_enc2', 'bad_encoding', good(encoding=ENC_OUT))
    add('contrib_enc3', 'bad_encoding', hdr_patch(bytearray(g), encoding=ENC_KULISCH))
    add('partial_enc1', 'bad_encoding', good(kind=PARTIAL, terms=2, encoding=ENC_DTYPE))
    add('result_enc1', 'bad_encoding', good(kind=RESULT, terms=4, encoding=ENC_DTYPE))
    add('result_enc3', 'bad_encoding', kulisch(lane_record(0, 5) * 4, 4, kind=RESULT, terms=4))
    for bit in range(3, 8):
        add(f'flag_bit{bit}', 'bad_flags', hdr_patch(bytearray(g), flags=LAST_CHUNK | (1 << bit)))
    add('kulisch_sideband', 'bad_flags', kulisch(lane_record(0, 5), 1, flags=SIDEBAND))
    add('group_0', 'bad_group', good(group=0, terms=1))
    add('contrib_terms_0', 'bad_terms', good(terms=0))
    add('contrib_terms_2', 'bad_terms', good(terms=2))
    add('partial_terms_0', 'bad_terms', good(kind=PARTIAL, encoding=ENC_OUT, terms=0))
    add('partial_terms_above_group', 'bad_terms', good(kind=PARTIAL, encoding=ENC_OUT, terms=5))
    add('partial_terms_group', 'ok', good(kind=PARTIAL, encoding=ENC_OUT, terms=4))
    add('kulisch_terms_above_group', 'bad_terms', kulisch(lane_record(0, 5), 1, terms=5))
    add('result_terms_below_group', 'bad_terms', good(kind=RESULT, encoding=ENC_OUT, terms=3))
    add('result_terms_above_group', 'bad_terms', good(kind=RESULT, encoding=ENC_OUT, terms=5))
    add('contrib_count_0', 'bad_count', good(count=0, body=b''))
    add('result_count_0', 'bad_count', good(kind=RESULT, encoding=ENC_OUT, terms=4, count=0, body=b''))
    add('kulisch_count_0', 'bad_count', kulisch(b'', 0, lanes=1))
    add('payload_too_long', 'payload_length', good(body=bytes(17)))
    add('payload_too_short', 'payload_length', good(body=bytes(15)))
    add('payload_one_element_short', 'payload_length', good(body=bytes(12)))
    add('payload_fp16_count', 'payload_length', good(dtype=2, body=bytes(16)))  # 4 fp16 are 8 bytes
    add('payload_out_dtype', 'payload_length', good(kind=RESULT, encoding=ENC_OUT, terms=4, out_dtype=2,
                                                    body=bytes(16)))  # RESULT counts in out_dtype
    add('result_out_dtype_ok', 'ok', good(kind=RESULT, encoding=ENC_OUT, terms=4, out_dtype=2, body=bytes(8)))
    add('sideband_missing', 'payload_length', good(kind=RESULT, encoding=ENC_OUT, terms=4, flags=SIDEBAND,
                                                   body=bytes(16)))
    add('sideband_short', 'payload_length', good(kind=RESULT, encoding=ENC_OUT, terms=4, flags=SIDEBAND,
                                                 body=bytes(16 + 3)))
    add('sideband_long', 'payload_length', good(kind=RESULT, encoding=ENC_OUT, terms=4, flags=SIDEBAND,
                                                body=bytes(16 + 5)))
    add('sideband_ok', 'ok', good(kind=RESULT, encoding=ENC_OUT, terms=4, flags=SIDEBAND, body=bytes(16 + 4)))
    add('contrib_sideband_unflagged', 'payload_length', good(body=bytes(16 + 4)))
    # SIDEBAND: RESULT and encoding-2 PARTIAL only; its bytes carry the RESULT status bits (3-7 zero).
    add('contrib_sideband', 'bad_flags', good(flags=SIDEBAND, body=bytes(16 + 4)))
    add('partial_sideband_ok', 'ok', good(kind=PARTIAL, encoding=ENC_OUT, terms=2, flags=SIDEBAND,
                                          body=bytes(16) + bytes([0, 7, 1, 4])))
    for name, sb in [('bit3', 8), ('bit7', 0x80), ('ff', 0xFF)]:
        add(f'result_sideband_{name}', 'bad_sideband', good(kind=RESULT, encoding=ENC_OUT, terms=4, flags=SIDEBAND,
                                                           body=bytes(16) + bytes([7, 0, sb, 1])))
        add(f'partial_sideband_{name}', 'bad_sideband', good(kind=PARTIAL, encoding=ENC_OUT, terms=1,
                                                            flags=SIDEBAND, body=bytes(16) + bytes([0, 0, 0, sb])))
    # status: RESULT bits 0-2 only; CONTRIB and PARTIAL 0.
    add('result_status_7', 'ok', good(kind=RESULT, encoding=ENC_OUT, terms=4, status=7))
    add('result_status_bit3', 'bad_status', good(kind=RESULT, encoding=ENC_OUT, terms=4, status=8))
    add('result_status_bit7', 'bad_status', good(kind=RESULT, encoding=ENC_OUT, terms=4, status=0x81))
    add('contrib_status', 'bad_status', good(status=1))
    add('contrib_status_nack_reason', 'bad_status', good(status=4))
    add('partial_status', 'bad_status', good(kind=PARTIAL, encoding=ENC_OUT, terms=2, status=1))
    add('kulisch_status', 'bad_status', kulisch(lane_record(0, 5), 1, status=0x40))
    # Encoding 3.
    rec = lane_record(0, 0x1234) + lane_record(S_NAN, 0)
    add('kulisch_ok', 'ok', kulisch(rec, 2))
    add('kulisch_no_fragment_header', 'payload_length',
        bytearray(frame(header(kind=PARTIAL, encoding=3, terms=2, count=1) + b'\0\0\0')))
    add('kulisch_first_beyond', 'bad_fragment', kulisch(rec, 2, first=1, lanes=2))
    add('kulisch_lanes_0', 'bad_fragment', kulisch(rec, 2, first=0, lanes=0))
    add('kulisch_first_max', 'bad_fragment', kulisch(rec, 2, first=65535, lanes=65535))
    add('kulisch_fragment_end_ok', 'ok', kulisch(rec, 2, first=65533, lanes=65535))
    add('kulisch_truncated_record', 'payload_length', kulisch(lane_record(0, 0x1234)[:-1], 1))
    add('kulisch_truncated_header', 'payload_length', kulisch(lane_record(0, 0x1234) + b'\0\0', 2))
    add('kulisch_missing_record', 'payload_length', kulisch(rec, 3))
    add('kulisch_extra_bytes', 'payload_length', kulisch(rec + b'\0', 2))
    bad_records = {
        'reserved_bit6': bytes([0x40, 0, 0]),
        'n_plus_offset_48': bytes([0, 1, 47, 1]),
        'n_48': bytes([0, 48, 0]) + b'\x01' * 48,
        'n_255': bytes([0, 255, 0]) + b'\x01' * 255,
        'first_byte_zero': bytes([0, 2, 0, 0, 1]),
        'last_byte_zero': bytes([0, 2, 0, 1, 0]),
        'signed_zero': bytes([S_SIGN, 0, 0]),
        'zero_with_offset': bytes([0, 0, 3]),
        'nan_with_magnitude': bytes([S_NAN, 1, 0, 5]),
        'posinf_with_magnitude': bytes([S_POSINF, 1, 0, 5]),
        'neginf_with_magnitude': bytes([S_NEGINF | S_SIGN, 1, 0, 5]),
        'negzero_with_magnitude': bytes([S_NEGZERO, 1, 0, 5]),
    }
    for name, r in bad_records.items():
        add('lane_' + name, 'bad_partial', kulisch(lane_record(0, 7) + r, 2))
    add('lane_n_plus_offset_47', 'ok', kulisch(bytes([0, 1, 46, 1]), 1))
    add('lane_n_47', 'ok', kulisch(bytes([0, 47, 0]) + b'\x01' * 47, 1))
    add('lane_overflow_with_value', 'ok', kulisch(bytes([S_OVERFLOW | S_INVALID | S_SIGN, 1, 0, 5]), 1))
    # NACK.
    nack = dict(kind=NACK, terms=0, count=0, status=4)
    add('nack_ok', 'ok', good(body=b'', **nack))
    for code in (0, 15, 255):  # 1..14 are reasons
        add(f'nack_reason_{code}', 'bad_nack_reason', good(body=b'', **{**nack, 'status': code}))
    add('nack_count', 'bad_count', good(body=b'', **{**nack, 'count': 1}))
    add('nack_body', 'payload_length', good(body=b'\0', **nack))
    # OP_ABANDONED (8): terms 0..group, and no body or a bitmap of exactly ceil(group / 8) bytes (group 4: one).
    ab = {**nack, 'status': OP_ABANDONED}
    add('abandoned_late', 'ok', good(body=b'', **ab))
    add('abandoned_terms', 'ok', good(body=b'', **{**ab, 'terms': 4}))
    add('abandoned_bitmap', 'ok', good(body=b'\x08', **{**ab, 'terms': 3}))
    add('abandoned_bitmap_12', 'ok', good(body=b'\xde\x0d', **{**ab, 'terms': 3, 'group': 12}))
    add('abandoned_terms_above_group', 'bad_terms', good(body=b'\x08', **{**ab, 'terms': 5}))
    add('abandoned_bitmap_long', 'payload_length', good(body=b'\x08\x00', **{**ab, 'terms': 3}))
    add('abandoned_bitmap_short', 'payload_length', good(body=b'\xde', **{**ab, 'terms': 3, 'group': 12}))
    add('abandoned_count', 'bad_count', good(body=b'\x08', **{**ab, 'terms': 3, 'count': 1}))
    add('nack_bitmap_other_reason', 'payload_length', good(body=b'\x08', **{**nack, 'status': 6}))
    return v


MALFORMED = malformed_variants()


def test_malformed_frames_refused_with_their_reason(tmp_path):
    rows = dump_frames(tmp_path, [f for _, _, f in MALFORMED])
    bad = [f'{name}: expected {want}, dump says {row["refusal"]}'
           for (name, want, _), row in zip(MALFORMED, rows) if row['refusal'] != want]
    assert not bad, '\n'.join(bad)
    reasons = {want for _, want, _ in MALFORMED}
    every = {'short_frame', 'not_ipv4', 'ip_bad_header', 'ip_bad_length', 'ip_bad_checksum', 'ip_fragment',
             'not_udp', 'udp_bad_length', 'udp_bad_checksum', 'wrong_port', 'short_header', 'bad_magic',
             'bad_version', 'bad_kind', 'bad_dtype', 'bad_out_dtype', 'bad_policy', 'bad_encoding',
             'bad_transport', 'bad_exceptions', 'bad_flags', 'bad_group', 'bad_terms', 'bad_count',
             'payload_length', 'bad_fragment', 'bad_partial', 'bad_nack_reason', 'bad_status', 'bad_sideband'}
    assert every <= reasons


@pytest.mark.parametrize('field,value,want', [('terms', 1, 'bad_terms'), ('terms', 4, 'bad_terms'),
                                               ('flags', 8, 'bad_flags'), ('flags', 0x80 | LAST_CHUNK, 'bad_flags')])
def test_nack_header_rules(tmp_path, field, value, want):
    """PROTOCOL.md's header table: terms is 0 for a NACK (as count is 0, which parse enforces), and flag bits
    3-7 must be 0 in every header. A NACK echoes the refused packet's job ... exceptions fields, not its
    terms or reserved flag bits."""
    f = good(**{'kind': NACK, 'terms': 0, 'count': 0, 'status': 2, 'body': b'', field: value})
    row = dump_frames(tmp_path, [bytes(f)])[0]
    assert row['refusal'] == want, f'NACK with {field}={value}: dump says {row["refusal"]}, PROTOCOL.md implies {want}'


# ------------------------------------------------ the worked example
def doc_examples():
    text = DOC.read_text()
    sec = text[text.index('## Worked example'):]
    blocks = re.findall(r'```\n(.*?)```', sec, re.S)
    assert len(blocks) == 2, 'expected the CONTRIB and RESULT hex blocks'
    return [bytes.fromhex(b.replace('\n', ' ')) for b in blocks]


def f32(x) -> bytes:
    return struct.pack('<f', x)


def test_worked_example_is_true(tmp_path):
    contrib, result = doc_examples()
    assert len(contrib) == 90 and len(result) == 94
    # CONTRIB from rank 1.
    p = Ether(contrib)
    assert (p.dst, p.src, p.type) == ('02:00:00:00:ff:01', '02:00:00:00:00:01', 0x0800)
    ip, udp = p[IP], p[UDP]
    assert (ip.version, ip.ihl, ip.tos, ip.len, ip.id, ip.flags, ip.frag, ip.ttl, ip.proto) == \
        (4, 5, 0, 76, 1, 'DF', 0, 64, 17)
    assert (ip.src, ip.dst, ip.chksum) == ('10.0.0.1', '10.0.0.254', 0x25a2)
    assert (udp.sport, udp.dport, udp.len, udp.chksum) == (20562, 20562, 56, 0x87e7)
    again = Ether(contrib)
    del again[IP].chksum
    del again[UDP].chksum
    again = Ether(bytes(again))
    assert (again[IP].chksum, again[UDP].chksum) == (0x25a2, 0x87e7), 'the printed checksums are right'
    assert rfc1071(contrib[14:34]) == 0
    assert udp_checksum(contrib[26:30], contrib[30:34], contrib[34:]) == 0x87e7
    h = unpack_header(bytes(udp.payload))
    assert h == dict(magic=0x5052, version=1, kind=CONTRIB, job=7, op=42, chunk=0, sender=1, group=2, terms=1,
                     count=4, dtype=1, out_dtype=1, policy=2, encoding=1, transport=2, exceptions=1,
                     flags=LAST_CHUNK, status=0)
    rank1 = [1.0, -2.5, 2.0 ** -24, 3.0e38]
    elems = bytes(udp.payload)[32:]
    assert elems == b''.join(f32(x) for x in rank1)
    assert [struct.unpack('<I', elems[i:i + 4])[0] for i in range(0, 16, 4)] == \
        [0x3f800000, 0xc0200000, 0x33800000, 0x7f61b1e6]
    # RESULT to rank 1.
    q = Ether(result)
    assert (q.dst, q.src, q.type) == ('02:00:00:00:00:01', '02:00:00:00:ff:01', 0x0800)
    ip, udp = q[IP], q[UDP]
    assert (ip.len, ip.id, ip.flags, ip.ttl, ip.src, ip.dst, ip.chksum) == \
        (80, 2, 'DF', 64, '10.0.0.254', '10.0.0.1', 0x259d)
    assert (udp.len, udp.chksum, udp.sport, udp.dport) == (60, 0x0b8a, 20562, 20562)
    again = Ether(result)
    del again[IP].chksum
    del again[UDP].chksum
    again = Ether(bytes(again))
    assert (again[IP].chksum, again[UDP].chksum) == (0x259d, 0x0b8a)
    h = unpack_header(bytes(udp.payload))
    assert h == dict(magic=0x5052, version=1, kind=RESULT, job=7, op=42, chunk=0, sender=1, group=2, terms=2,
                     count=4, dtype=1, out_dtype=1, policy=2, encoding=2, transport=2, exceptions=1,
                     flags=LAST_CHUNK | SIDEBAND, status=1)
    body = bytes(udp.payload)[32:]
    assert len(body) == 16 + 4
    # The sum the text states, computed here: rank 0 + rank 1, rounded once to fp32 (exact except the overflow).
    rank0 = [0.5, -2.5, 2.0 ** -24, 3.0e38]
    r0 = struct.unpack('<4f', b''.join(f32(x) for x in rank0))
    r1 = struct.unpack('<4f', elems)
    sums = [a + b for a, b in zip(r0, r1)]  # exact in double
    expect = []
    for s in sums:
        try:
            expect.append(f32(s))
        except OverflowError:
            expect.append(struct.pack('<I', 0x7f800000 if s > 0 else 0xff800000))
    assert body[:16] == b''.join(expect)
    assert [struct.unpack('<I', body[i:i + 4])[0] for i in range(0, 16, 4)] == \
        [0x3fc00000, 0xc0a00000, 0x34000000, 0x7f800000]
    assert body[16:] == bytes([0, 0, 0, 1]), 'sideband marks element 3 OVERFLOW'
    # PRISM's parser agrees.
    rows = dump_frames(tmp_path, [contrib, result])
    c, r = rows
    assert c['refusal'] == r['refusal'] == 'ok'
    assert (c['src_mac'], c['dst_mac'], c['src_ip'], c['dst_ip'], c['src_port'], c['dst_port'], c['vlan']) == \
        ('02:00:00:00:00:01', '02:00:00:00:ff:01', '10.0.0.1', '10.0.0.254', 20562, 20562, 0)
    assert (c['kind'], c['job'], c['op'], c['chunk'], c['sender'], c['group'], c['terms'], c['count']) == \
        (1, 7, 42, 0, 1, 2, 1, 4)
    assert (c['dtype'], c['out_dtype'], c['policy'], c['encoding'], c['transport'], c['exceptions'],
            c['flags'], c['status']) == (1, 1, 2, 1, 2, 1, 2, 0)
    assert c['payload'] == elems.hex() and c['sideband'] == ''
    assert (r['kind'], r['sender'], r['terms'], r['encoding'], r['flags'], r['status']) == (3, 1, 2, 2, 6, 1)
    assert (r['src_ip'], r['dst_ip']) == ('10.0.0.254', '10.0.0.1')
    assert r['payload'] == body[:16].hex() and r['sideband'] == '00000001'


# ------------------------------------------------ steering
def test_steering_example_is_true():
    """PROTOCOL.md, Steering: the worked example's ports, recomputed from the rule as the text states it
    (shard = (job + op + chunk) mod S without wrapping; a JOIN's = job mod S; port = udp_port + shard)."""
    text = DOC.read_text()
    sec = text[text.index('## Steering'):text.index('## Reaching the switch')]
    m = re.search(r'`udp_port` (\d+) and (\d+) shards; job (\d+), op (\d+)', sec)
    base, S, job, op = map(int, m.groups())
    rows = re.findall(r'^\| (CONTRIB chunk (\d+)[^|]*|chunk (\d+) again, RETRANSMIT|JOIN[^|]*) \| [^|]+ \| (\d+) \| '
                      r'(\d+) \|$', sec, re.M)
    assert len(rows) == 6, rows
    for what, c1, c2, shard, port in rows:
        want = job % S if what.startswith('JOIN') else (job + op + int(c1 or c2)) % S
        assert (int(shard), int(port)) == (want, base + want), what
    m = re.search(r'with (\d+) shards, job (\d+) \(2³² − 1\), op (\d+), chunk (\d+)\s+sums to (\d+), and \d+ mod \d+ '
                  r'= (\d+): port (\d+)', sec)
    S, job, op, chunk, total, shard, port = map(int, m.groups())
    assert job == 2 ** 32 - 1 and total == job + op + chunk and shard == total % S and port == base + shard
    assert (total % 2 ** 32) % S != shard, 'the example must show what wrapping would get wrong'
