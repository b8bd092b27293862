"""prism-gen: command-line errors, and that `write` produces what its manifest says.

The captures are decoded here with scapy and Python's own RFC 1071 checksums
(layout from docs/PROTOCOL.md); the configs are read with PyYAML; the golden
results are checked against a fresh prism-reduce run over the rank inputs.
"""
from __future__ import annotations

import errno
import json
import os
import re
import stat
import struct
import subprocess
from collections import Counter, defaultdict
from pathlib import Path

import pytest
import yaml

from scapy.all import Ether, IP, UDP, rdpcap

BUILD = Path(os.environ.get('PRISM_BUILD') or Path(__file__).resolve().parents[2] / 'build')
GEN = BUILD / 'app' / 'prism-gen'
REDUCE = BUILD / 'app' / 'prism-reduce'
REPO = Path(__file__).resolve().parents[2]
REFERENCE_YAML = REPO / 'configs' / 'reference.yaml'

# docs/PROTOCOL.md
PORT = 20562
MAGIC, VERSION, CONTRIB = 0x5052, 1, 1
RETRANSMIT, LAST_CHUNK = 1, 2
FORMATS = {'fp32': (1, 4), 'fp16': (2, 2), 'bf16': (3, 2), 'e4m3fn': (4, 1), 'e4m3fnuz': (5, 1),
           'e5m2': (6, 1), 'e5m2fnuz': (7, 1), 'int8': (8, 1), 'int32': (9, 4)}
SIZE = {code: size for code, size in FORMATS.values()}
HDR = struct.Struct('>HBBIIIHHHHBBBBBBBB')
FIELDS = ('magic', 'version', 'kind', 'job', 'op', 'chunk', 'sender', 'group', 'terms', 'count', 'dtype',
          'out_dtype', 'policy', 'encoding', 'transport', 'exceptions', 'flags', 'status')
FLAGS_RE = re.compile(r'^flags: overflow=(\d+) invalid=(\d+) nan_input=(\d+)$')


@pytest.fixture(autouse=True)
def _binaries():
    for b in (GEN, REDUCE):
        if not (b.is_file() and os.access(b, os.X_OK)):
            pytest.skip(f'{b} not found (set PRISM_BUILD)')


def run(args, cwd=None, timeout=120):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          stdin=subprocess.DEVNULL)


def rfc1071(data: bytes) -> int:
    if len(data) % 2:
        data += b'\0'
    s = sum(struct.unpack(f'>{len(data) // 2}H', data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


# ------------------------------------------------------------------ CLI errors
def base_args(tmp_path, **over):
    a = {'--config': str(REFERENCE_YAML), '--job': '7', '--dtype': 'fp32', '--policy': 'kulisch',
         '--merged': str(tmp_path / 'm.pcap')}
    a.update(over)
    out = ['write']
    for k, v in a.items():
        if v is not None:
            out += [k, v]
    return out


BROKEN_YAML = {  # file text, the line yaml reports (1-based), per the defect's position
    'indent': ('switch:\n  id: 1\n role: root\nports: []\n', 3),
    'tab': ('switch:\n\tid: 1\n', 2),
}

CLI_ERRORS = [
    # id, overrides, words the one stderr line must contain
    ('unknown_dtype', {'--dtype': 'fp33'}, ['--dtype', "'fp33'"]),
    ('unknown_out_dtype', {'--out-dtype': 'fp64'}, ['--out-dtype', "'fp64'"]),
    ('unknown_policy', {'--policy': 'kulish'}, ['--policy', "'kulish'"]),
    ('unknown_order', {'--order': 'sideways'}, ['--order', "'sideways'"]),
    ('unknown_values', {'--values': 'wild'}, ['--values', "'wild'"]),
    ('unknown_transport', {'--transport': 'pigeon'}, ['--transport', "'pigeon'"]),
    ('unknown_exceptions', {'--exceptions': 'panic'}, ['--exceptions', "'panic'"]),
    ('missing_config', {'--config': None}, ['--config']),
    ('missing_job', {'--job': None}, ['--job']),
    ('missing_dtype', {'--dtype': None}, ['--dtype']),
    ('missing_policy', {'--policy': None}, ['--policy']),
    ('job_not_in_config', {'--job': '8'}, ['job 8']),
    ('config_missing', {'--config': '{tmp}/no-such.yaml'}, ['{tmp}/no-such.yaml']),
    ('broken_yaml_indent', {'--config': '{tmp}/indent.yaml'}, ['{tmp}/indent.yaml:3:']),
    ('broken_yaml_tab', {'--config': '{tmp}/tab.yaml'}, ['{tmp}/tab.yaml:2:']),
    # PROTOCOL.md: size C for the RESULT: out_dtype elements plus a sideband byte each
    # (fp32 out: 5 bytes per element): a 1500-byte MTU holds 1440 bytes of body, 9000 holds 8940.
    ('chunk_fp32_1500', {'--chunk': '289'}, ['--chunk', '289', '1500', '288']),
    ('chunk_bf16_1500', {'--dtype': 'bf16', '--chunk': '289'}, ['--chunk', '289', '288']),
    ('chunk_e5m2_1500', {'--dtype': 'e5m2', '--chunk': '289'}, ['--chunk', '289', '288']),
    ('chunk_fp32_9000', {'--mtu': '9000', '--chunk': '1789'}, ['--chunk', '1789', '9000', '1788']),
    ('chunk_int8_9000', {'--dtype': 'int8', '--mtu': '9000', '--chunk': '1789'}, ['1789', '1788']),
    ('nothing_to_write', {'--merged': None}, ['nothing to write']),
    ('bad_dup', {'--dup': '1.5'}, ['--dup', '1.5']),
    ('bad_ops', {'--ops': '0'}, ['--ops', "'0'"]),
    ('unknown_option', {'--frobnicate': '1'}, ['--frobnicate']),
]


@pytest.mark.parametrize('case,over,words', CLI_ERRORS, ids=[c[0] for c in CLI_ERRORS])
def test_cli_error(tmp_path, case, over, words):
    for name, (text, _) in BROKEN_YAML.items():
        (tmp_path / f'{name}.yaml').write_text(text)
    over = {k: (v.format(tmp=tmp_path) if v else v) for k, v in over.items()}
    r = run([GEN] + base_args(tmp_path, **over))
    assert r.returncode == 2, f'expected exit 2, got {r.returncode}; stderr={r.stderr!r}'
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, f'expected one stderr line, got {lines!r}'
    for w in words:
        w = w.format(tmp=tmp_path)
        assert w in lines[0], f'{lines[0]!r} does not name {w!r}'
    assert r.stdout == ''
    assert not (tmp_path / 'm.pcap').exists(), 'a capture was written despite the error'


def test_cli_chunk_at_mtu_limit_is_accepted(tmp_path):
    # The largest chunk whose RESULT (fp32 out + sideband: 5 bytes per element) fits the MTU.
    for dt, mtu, c in [('fp32', 1500, 288), ('fp16', 1500, 288), ('e4m3fn', 1500, 288), ('fp32', 9000, 1788)]:
        r = run([GEN] + base_args(tmp_path, **{'--dtype': dt, '--mtu': str(mtu), '--chunk': str(c),
                                               '--elements': str(c)}))
        assert r.returncode == 0, r.stderr
        assert 20 + 8 + 32 + c * 5 <= mtu < 20 + 8 + 32 + (c + 1) * 5
        (f,) = rdpcap(str(tmp_path / 'm.pcap'))[:1]
        assert len(bytes(f)) <= 14 + mtu, f'{dt} chunk {c} at MTU {mtu}: frame of {len(bytes(f))} bytes'


def test_dump_errors(tmp_path):
    r = run([GEN, 'dump'])
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    r = run([GEN, 'dump', tmp_path / 'none.pcap'])
    assert r.returncode == 2 and 'none.pcap' in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = run([GEN, 'frobnicate'])
    assert r.returncode == 2 and 'frobnicate' in r.stderr and len(r.stderr.strip().splitlines()) == 1


# ------------------------------------------------------------------ a tree of two switches
ROOT_YAML = """\
switch: {id: 1, role: root, udp_port: 20562}
ports:
  - {id: 0, mac: "02:00:00:00:ff:00", ip: 10.0.0.254}
  - {id: 1, mac: "02:00:00:00:ff:01", ip: 10.0.1.254}
  - {id: 2, mac: "02:00:00:00:ff:02", ip: 10.0.2.254}
jobs:
  - id: 7
    group: 6
    members:
      - {rank: 0, port: 0, mac: "02:00:00:00:00:00", ip: 10.0.0.1, udp_port: 20562}
      - {rank: 1, port: 0, mac: "02:00:00:00:00:01", ip: 10.0.0.2, udp_port: 5001}
      - {rank: 2, port: 1, mac: "02:00:00:00:01:02", ip: 10.0.1.3, udp_port: 20562}
    children:
      - {id: 2, port: 2, mac: "02:00:00:00:fe:02", ip: 10.0.2.1, udp_port: 4791, ranks: 3}
"""
LEAF_YAML = """\
switch:
  id: 2
  role: leaf
  udp_port: 4791
  parent: {port: 0, mac: "02:00:00:00:ff:02", ip: 10.0.2.254, udp_port: 20562}
ports:
  - {id: 0, mac: "02:00:00:00:fe:02", ip: 10.0.2.1}
  - {id: 1, mac: "02:00:00:00:fe:03", ip: 10.0.3.1}
  - {id: 2, mac: "02:00:00:00:fe:04", ip: 10.0.4.1}
jobs:
  - id: 7
    group: 6
    members:
      - {rank: 3, port: 1, mac: "02:00:00:00:03:03", ip: 10.0.3.4, udp_port: 20562}
      - {rank: 4, port: 1, mac: "02:00:00:00:03:04", ip: 10.0.3.5, udp_port: 20562}
      - {rank: 5, port: 2, mac: "02:00:00:00:04:05", ip: 10.0.4.6, udp_port: 6000}
"""


class Net:
    """Addresses from the switch configs, read with PyYAML."""

    def __init__(self, paths):
        self.switches = {}   # id -> (udp_port, {port id: (mac, ip)})
        self.members = {}    # rank -> dict(sw, port, mac, ip, udp_port)
        self.group = None
        for p in paths:
            c = yaml.safe_load(Path(p).read_text())
            sw = c.get('switch', {})
            sid, uport = sw.get('id', 0), sw.get('udp_port', PORT)
            self.switches[sid] = (uport, {q['id']: (q['mac'], q['ip']) for q in c['ports']})
            for j in c['jobs']:
                if j['id'] != 7:
                    continue
                self.group = j['group']
                for m in j['members']:
                    self.members[m['rank']] = dict(sw=sid, port=m['port'], mac=m['mac'], ip=m['ip'],
                                                   udp_port=m['udp_port'])
        self.by_addr = {(m['mac'], m['ip'], m['udp_port']): r for r, m in self.members.items()}
        self.member_ips = {m['ip'] for m in self.members.values()}
        self.port_of = {(mac, ip): (sid, pid) for sid, (_, ports) in self.switches.items()
                        for pid, (mac, ip) in ports.items()}


def tree(tmp_path):
    (tmp_path / 'root.yaml').write_text(ROOT_YAML)
    (tmp_path / 'leaf.yaml').write_text(LEAF_YAML)
    return [tmp_path / 'root.yaml', tmp_path / 'leaf.yaml']


def write(tmp_path, configs, *args, name='w'):
    out = tmp_path / name
    out.mkdir(exist_ok=True)  # the outputs' directories are made, their parent is not
    cmd = [GEN, 'write'] + [x for c in configs for x in ('--config', c)] + \
        ['--job', 7, '--merged', out / 'm.pcap', '--pcap-dir', out / 'ports', '--expected', out / 'exp'] + list(args)
    r = run(cmd)
    assert r.returncode == 0, f'exit {r.returncode}: {r.stderr}'
    return out, json.loads((out / 'exp' / 'manifest.json').read_text())


def classify(raw: bytes, net: Net):
    """Decodes one frame independently: ('malformed', reason) / ('foreign', kind) / ('genuine', header)."""
    p = Ether(raw)
    ip, udp = p[IP], p[UDP]
    ihl = ip.ihl * 4
    if rfc1071(raw[14:14 + ihl]) != 0:
        return 'malformed', 'ip_bad_checksum', None
    seg = raw[14 + ihl:14 + ip.len]
    pseudo = raw[14 + 12:14 + 20] + struct.pack('>BBH', 0, 17, len(seg))
    if udp.chksum != 0 and rfc1071(pseudo + seg) != 0:
        return 'malformed', 'udp_bad_checksum', None
    body = seg[8:]
    h = dict(zip(FIELDS, HDR.unpack(body[:32])))
    if h['magic'] != MAGIC:
        return 'malformed', 'bad_magic', h
    if h['version'] != VERSION:
        return 'malformed', 'bad_version', h
    if not 1 <= h['kind'] <= 4:
        return 'malformed', 'bad_kind', h
    if h['dtype'] not in SIZE:
        return 'malformed', 'bad_dtype', h
    if h['count'] == 0:
        return 'malformed', 'bad_count', h
    if len(body) - 32 != h['count'] * SIZE[h['dtype']]:
        return 'malformed', 'payload_length', h
    assert h['kind'] == CONTRIB and h['terms'] == 1 and h['encoding'] == 1
    if ip.src not in net.member_ips:
        return 'foreign', 'unknown_source', h
    if h['job'] != 7:
        return 'foreign', 'foreign_job', h
    owner = net.by_addr.get((p[Ether].src, ip.src, udp.sport))
    assert owner is not None, f'a frame from {ip.src} that matches no member address exactly'
    if owner != h['sender']:
        return 'foreign', 'spoofed_rank', h
    h['payload'] = body[32:]
    return 'genuine', None, h


FAULTS = ['--dup', 0.15, '--loss', 0.1, '--late-retransmit', 0.5, '--reorder', 0.05, '--malformed', 19,
          '--foreign', 11]


def test_faults_match_manifest(tmp_path):
    cfgs = tree(tmp_path)
    net = Net(cfgs)
    out, man = write(tmp_path, cfgs, '--dtype', 'bf16', '--out-dtype', 'bf16', '--policy', 'kulisch',
                     '--elements', 1200, '--ops', 3, '--op-base', 100, '--seed', 5, *FAULTS)
    R, C, chunks = man['group'], man['chunk'], man['chunks']
    # bf16 out: RESULTs of 2 + 1 (sideband) bytes per element; CONTRIBs of 2: 1440 // 3 = 480 per chunk.
    assert R == 6 and C == 480 and chunks == 3
    frames = [bytes(p) for p in rdpcap(str(out / 'm.pcap'))]
    assert len(frames) == man['packets']
    stats = Counter()
    originals = defaultdict(list)   # (op, chunk, rank) -> frames without RETRANSMIT
    retrans = Counter()             # (op, chunk, rank) -> RETRANSMIT copies
    inputs = {}
    noise_reasons = []
    for raw in frames:
        cls, kind, h = classify(raw, net)
        if cls != 'genuine':
            stats[f'{cls}.{kind}'] += 1
            noise_reasons.append(kind if cls == 'malformed' else 'ok')
            continue
        noise_reasons.append(None)
        key = (h['op'], h['chunk'], h['sender'])
        assert 100 <= h['op'] < 103 and h['chunk'] < chunks and h['sender'] < R
        r = h['sender']
        if (r, h['op']) not in inputs:
            inputs[(r, h['op'])] = (out / 'exp' / f'rank{r}.op{h["op"]}.in').read_bytes()
        c = h['chunk']
        assert h['payload'] == inputs[(r, h['op'])][c * C * 2:(c * C + h['count']) * 2], 'payload is not the input'
        assert h['flags'] & LAST_CHUNK == (LAST_CHUNK if c == chunks - 1 else 0)
        if h['flags'] & RETRANSMIT:
            retrans[key] += 1
        else:
            originals[key].append(raw)
    keys = set(originals) | set(retrans)
    assert len(keys) == R * chunks * 3, 'every (op, chunk, rank) has a contribution'
    for key, copies in originals.items():
        assert len(copies) <= 2 and all(c == copies[0] for c in copies), f'{key}: copies differ'
        stats['duplicates'] += len(copies) - 1
    lost = [k for k in keys if not originals.get(k)]
    stats['retransmits'] = stats['lost'] = len(lost)
    stats['late_retransmits'] = sum(retrans.values()) - len(lost)
    stats['contrib'] = len(keys)
    want = {k: v for k, v in man['stats'].items() if k != 'reordered'}
    got = {k: v for k, v in stats.items() if v}
    assert got == want, f'decoded {got}, manifest says {want}'
    # The fault mix must be exercised by this seed.
    for k in ('duplicates', 'retransmits', 'late_retransmits'):
        assert stats[k] > 0, k
    assert sum(v for k, v in stats.items() if k.startswith('malformed.')) == 19
    assert sum(v for k, v in stats.items() if k.startswith('foreign.')) == 11
    assert len({k for k in stats if k.startswith('malformed.')}) == 8
    assert len({k for k in stats if k.startswith('foreign.')}) == 3
    # PRISM's parser refuses each malformed frame with the reason the manifest names it by.
    # (Packets to the leaf listen on its udp_port.)
    rows = {port: [json.loads(x) for x in run([GEN, 'dump', out / 'm.pcap', '--port', port]).stdout.splitlines()]
            for port in (PORT, 4791)}
    for i, (raw, want_reason) in enumerate(zip(frames, noise_reasons)):
        row = rows[Ether(raw)[UDP].dport][i]
        assert row['refusal'] == (want_reason or 'ok'), f'frame {i}: {row["refusal"]} vs {want_reason}'


def test_per_port_pcaps(tmp_path):
    cfgs = tree(tmp_path)
    net = Net(cfgs)
    out, man = write(tmp_path, cfgs, '--dtype', 'e4m3fn', '--out-dtype', 'fp32', '--policy', 'fp32_arrival',
                     '--elements', 3000, '--seed', 9, *FAULTS)
    merged = [bytes(p) for p in rdpcap(str(out / 'm.pcap'))]
    names = sorted(p.name for p in (out / 'ports').iterdir())
    want_names = sorted(f'sw{sid}.port{pid}.pcap' for sid, (_, ports) in net.switches.items() for pid in ports)
    assert names == want_names
    total = 0
    for sid, (uport, ports) in net.switches.items():
        for pid, (mac, ip) in ports.items():
            got = [bytes(p) for p in rdpcap(str(out / 'ports' / f'sw{sid}.port{pid}.pcap'))]
            # Exactly the merged capture's frames addressed to this port, in the same order.
            assert got == [f for f in merged if (Ether(f).dst, Ether(f)[IP].dst) == (mac, ip)], f'sw{sid}.port{pid}'
            on_port = {r for r, m in net.members.items() if (m['sw'], m['port']) == (sid, pid)}
            if not on_port:
                assert got == [], f'sw{sid}.port{pid} has no members but {len(got)} frames'
            for f in got:
                e = Ether(f)
                assert e[UDP].dport == uport, f'frames to switch {sid} go to its udp_port {uport}'
                cls, kind, h = classify(f, net)
                if cls == 'genuine':
                    assert h['sender'] in on_port
                    m = net.members[h['sender']]
                    assert (e.src, e[IP].src, e[UDP].sport) == (m['mac'], m['ip'], m['udp_port'])
                elif kind != 'unknown_source':
                    # Noise from a member's own address (malformed, foreign job, spoofed rank id).
                    assert net.by_addr[(e.src, e[IP].src, e[UDP].sport)] in on_port
            total += len(got)
    assert total == len(merged) == man['packets']
    # Every rank sent on its own port.
    for r, m in net.members.items():
        port_frames = [bytes(p) for p in rdpcap(str(out / 'ports' / f'sw{m["sw"]}.port{m["port"]}.pcap'))]
        senders = {h['sender'] for cls, _, h in (classify(f, net) for f in port_frames) if cls == 'genuine'}
        assert r in senders


def test_frames_follow_the_steering_rule(tmp_path):
    """PROTOCOL.md, Steering: every frame goes to UDP port udp_port + (job + op + chunk) mod S of the
    switch that receives it, S its reducers.shards (given: 3 at the root; by default one per listed
    lcore: 2 at the leaf), the sum not wrapping at 2^32 -- computed here from the frame's own header,
    noise included. PRISM's parser (prism-gen dump) takes them all with --shards, refuses the shard
    ports above the base without it."""
    root = ROOT_YAML + 'reducers: {shards: 3}\n'
    leaf = LEAF_YAML + 'lcores: [0, 1]\n'
    (tmp_path / 'root.yaml').write_text(root)
    (tmp_path / 'leaf.yaml').write_text(leaf)
    cfgs = [tmp_path / 'root.yaml', tmp_path / 'leaf.yaml']
    net = Net(cfgs)
    shards = {1: 3, 2: 2}   # switch id -> S, as written above
    out, man = write(tmp_path, cfgs, '--dtype', 'fp32', '--policy', 'kulisch', '--elements', 3000, '--ops', 3,
                     '--op-base', 0xFFFFFFFE, '--seed', 4, *FAULTS)
    frames = [bytes(p) for p in rdpcap(str(out / 'm.pcap'))]
    assert len(frames) == man['packets']
    used = defaultdict(set)
    for i, raw in enumerate(frames):
        e = Ether(raw)
        sid, _ = net.port_of[(e.dst, e[IP].dst)]
        base, S = net.switches[sid][0], shards[sid]
        h = dict(zip(FIELDS, HDR.unpack(bytes(e[UDP].payload)[:32])))
        want = base + (h['job'] + h['op'] + h['chunk']) % S
        assert e[UDP].dport == want, f'frame {i} to switch {sid}: port {e[UDP].dport}, the rule says {want} ({h})'
        used[sid].add(e[UDP].dport - base)
    assert used == {1: {0, 1, 2}, 2: {0, 1}}, used
    # The ops run 2^32-2, 2^32-1, 0: job + op + chunk passes 2^32, where a 32-bit sum would pick other shards.
    assert any((7 + 0xFFFFFFFE + c) % 3 != (7 + 0xFFFFFFFE + c) % (1 << 32) % 3 for c in range(man['chunks']))
    for base, S in ((PORT, 3), (4791, 2)):
        rows, plain = ([json.loads(x) for x in run([GEN, 'dump', out / 'm.pcap', '--port', base, *more]).stdout
                        .splitlines()] for more in (['--shards', S], []))
        for raw, row, row1 in zip(frames, rows, plain):
            dport = Ether(raw)[UDP].dport
            if row['refusal'] in ('ip_bad_checksum', 'udp_bad_checksum'):
                continue   # checked before the port
            if base <= dport < base + S:
                assert row['refusal'] != 'wrong_port', row
                assert (row1['refusal'] == 'wrong_port') == (dport != base), (dport, row1['refusal'])
            else:
                assert row['refusal'] == 'wrong_port', row
    r = run([GEN, 'dump', out / 'm.pcap', '--port', 65535, '--shards', 2])
    assert r.returncode == 2 and 'run past 65535' in r.stderr, r.stderr


# ------------------------------------------------------------------ golden results vs prism-reduce
def reduce_run(tmp_path, dtype, out_dtype, policy, exceptions, files, out):
    r = run([REDUCE, '--dtype', dtype, '--policy', policy, '--out-dtype', out_dtype, '--exceptions', exceptions,
             '-o', out] + files, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    m = FLAGS_RE.match(r.stderr.strip().splitlines()[-1])
    assert m, r.stderr
    return Path(out).read_bytes(), dict(overflow=int(m[1]), invalid=int(m[2]), nan_input=int(m[3]))


def flag_counts(flags: bytes):
    return dict(overflow=sum(1 for f in flags if f & 1), invalid=sum(1 for f in flags if f & 2),
                nan_input=sum(1 for f in flags if f & 4))


KULISCH = [
    # dtype, out, exceptions, values, elements, faults
    ('fp32', 'fp32', 'ieee', 'specials', 1000, True),
    ('fp32', 'bf16', 'saturate', 'full', 500, False),
    ('fp16', 'fp16', 'ieee', 'cancel', 1500, True),
    ('bf16', 'fp32', 'ieee', 'full', 777, False),
    ('e4m3fn', 'e4m3fn', 'saturate', 'full', 2000, False),
    ('e4m3fnuz', 'fp16', 'ieee', 'specials', 2000, False),
    ('e5m2', 'e5m2', 'ieee', 'full', 1000, True),
    ('e5m2fnuz', 'fp32', 'saturate', 'gradient', 1000, False),
    ('int8', 'int32', 'ieee', 'full', 3000, False),
    ('int32', 'fp32', 'ieee', 'full', 400, False),
]


@pytest.mark.parametrize('dt,ot,ex,values,elements,faults', KULISCH, ids=[f'{c[0]}-{c[1]}-{c[3]}' for c in KULISCH])
def test_expected_equals_prism_reduce_kulisch(tmp_path, dt, ot, ex, values, elements, faults):
    out, man = write(tmp_path, [REFERENCE_YAML], '--dtype', dt, '--out-dtype', ot, '--policy', 'kulisch',
                     '--exceptions', ex, '--values', values, '--elements', elements, '--ops', 2, '--op-base', 5,
                     '--order', 'random', *(FAULTS if faults else []))
    R = man['group']
    assert [o['op'] for o in man['ops']] == [5, 6]
    for o in man['ops']:
        op = o['op']
        files = [str(out / 'exp' / f'rank{r}.op{op}.in') for r in range(R)]
        got, fl = reduce_run(tmp_path, dt, ot, 'kulisch', ex, files, tmp_path / f'ref{op}.out')
        exp = (out / 'exp' / o['result']).read_bytes()
        assert len(exp) == elements * FORMATS[ot][1]
        assert exp == got, f'op {op}: golden result differs from prism-reduce at ' \
            f'{[i for i in range(0, len(exp)) if exp[i] != got[i]][:8]}'
        flags = (out / 'exp' / o['flags']).read_bytes()
        assert len(flags) == elements
        assert flag_counts(flags) == fl == {k: o[k] for k in ('overflow', 'invalid', 'nan_input')}


def test_expected_equals_prism_reduce_fp32_policies(tmp_path):
    """FP32_ARRIVAL: per chunk, the ranks in the manifest's arrival order; FP32_BINOMIAL: rank order."""
    for policy in ('fp32_arrival', 'fp32_binomial'):
        out, man = write(tmp_path, [REFERENCE_YAML], '--dtype', 'fp16', '--out-dtype', 'fp32', '--policy', policy,
                         '--values', 'cancel', '--elements', 1000, '--chunk', 250, '--order', 'random',
                         '--seed', 3, name=policy)
        R, C = man['group'], man['chunk']
        (o,) = man['ops']
        exp = (out / 'exp' / o['result']).read_bytes()
        ins = [(out / 'exp' / f'rank{r}.op0.in').read_bytes() for r in range(R)]
        if policy == 'fp32_binomial':
            got, _ = reduce_run(tmp_path, 'fp16', 'fp32', policy, 'ieee',
                                [str(out / 'exp' / f'rank{r}.op0.in') for r in range(R)], tmp_path / 'b.out')
            assert got == exp
            continue
        assert any(arr != sorted(arr) for arr in o['arrival']), 'the random order should permute some chunk'
        for c, arr in enumerate(o['arrival']):
            assert sorted(arr) == list(range(R))
            n = min(C, 1000 - c * C)
            files = []
            for k, r in enumerate(arr):
                p = tmp_path / f'{policy}.c{c}.{k}.in'
                p.write_bytes(ins[r][c * C * 2:(c * C + n) * 2])
                files.append(str(p))
            got, _ = reduce_run(tmp_path, 'fp16', 'fp32', policy, 'ieee', files, tmp_path / 'a.out')
            assert got == exp[c * C * 4:(c * C + n) * 4], f'chunk {c}'


def first_copy_order(frames):
    """(op, chunk) -> ranks in the order their first copy (RETRANSMIT or not) appears: the order in which a
    switch counts them (PROTOCOL.md: a slot counts each contributor once; only a repeat is dropped)."""
    order = defaultdict(list)
    for raw in frames:
        h = dict(zip(FIELDS, HDR.unpack(bytes(Ether(raw)[UDP].payload)[:32])))
        key = (h['op'], h['chunk'])
        if h['sender'] not in order[key]:
            order[key].append(h['sender'])
    return order


def test_fp32_arrival_golden_follows_capture_order_with_reorder_and_late_retransmits(tmp_path):
    """With --reorder, a late RETRANSMIT (a rank asking again for a RESULT) can be swapped in front of the
    rank's original CONTRIB. A switch reading the capture counts whichever copy comes first, so the arrival
    order, and FP32_ARRIVAL's golden result, must follow the capture."""
    out, man = write(tmp_path, [REFERENCE_YAML], '--dtype', 'fp32', '--policy', 'fp32_arrival', '--elements', 1000,
                     '--ops', 3, '--late-retransmit', 0.9, '--reorder', 0.3, '--seed', 1)
    frames = [bytes(p) for p in rdpcap(str(out / 'm.pcap'))]
    order = first_copy_order(frames)
    R, C = man['group'], man['chunk']
    problems = []
    for o in man['ops']:
        op = o['op']
        ins = [(out / 'exp' / f'rank{r}.op{op}.in').read_bytes() for r in range(R)]
        gold = (out / 'exp' / o['result']).read_bytes()
        for c, arr in enumerate(o['arrival']):
            if order[(op, c)] == arr:
                continue
            n = min(C, 1000 - c * C)
            files = []
            for k, r in enumerate(order[(op, c)]):
                p = tmp_path / f'op{op}.c{c}.{k}.in'
                p.write_bytes(ins[r][c * C * 4:(c * C + n) * 4])
                files.append(str(p))
            got, _ = reduce_run(tmp_path, 'fp32', 'fp32', 'fp32_arrival', 'ieee', files, tmp_path / 'a.out')
            exp = gold[c * C * 4:(c * C + n) * 4]
            diff = sum(1 for i in range(0, len(got), 4) if got[i:i + 4] != exp[i:i + 4])
            problems.append(f'op {op} chunk {c}: manifest arrival {arr}, capture order {order[(op, c)]}; '
                            f'golden differs from prism-reduce in capture order in {diff}/{n} elements')
    assert not problems, '\n'.join(problems)


def test_op_numbers_wrap(tmp_path):
    """PROTOCOL.md: op numbers may wrap after 2^32."""
    out, man = write(tmp_path, [REFERENCE_YAML], '--dtype', 'fp32', '--policy', 'kulisch', '--elements', 100,
                     '--ops', 2, '--op-base', 0xFFFFFFFF)
    assert [o['op'] for o in man['ops']] == [0xFFFFFFFF, 0]
    ops = [dict(zip(FIELDS, HDR.unpack(bytes(p[UDP].payload)[:32])))['op'] for p in rdpcap(str(out / 'm.pcap'))]
    assert ops == [0xFFFFFFFF] * 4 + [0] * 4
    for op in (0xFFFFFFFF, 0):
        files = [str(out / 'exp' / f'rank{r}.op{op}.in') for r in range(4)]
        got, _ = reduce_run(tmp_path, 'fp32', 'fp32', 'kulisch', 'ieee', files, tmp_path / 'w.out')
        assert got == (out / 'exp' / f'op{op}.out').read_bytes()


# ------------------------------------------------------------------ outputs
def write_args(out: Path, merged, *extra):
    return [GEN, 'write', '--config', REFERENCE_YAML, '--job', 7, '--dtype', 'fp32', '--policy', 'kulisch',
            '--elements', 300, '--pcap-dir', out / 'ports', '--expected', out / 'exp', '--merged', merged, *extra]


def tree_of(d: Path):
    """Every path under d with its kind and, for files, its bytes."""
    return {str(p.relative_to(d)): (p.read_bytes() if p.is_file() and not p.is_symlink() else
                                    os.readlink(p) if p.is_symlink() else 'dir') for p in sorted(d.rglob('*'))}


def one_error_line(r, *words):
    assert r.returncode == 2, f'expected exit 2, got {r.returncode}; stderr={r.stderr!r}'
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, lines
    for w in words:
        assert str(w) in lines[0], f'{lines[0]!r} does not name {w!r}'


@pytest.mark.skipif(not os.path.exists('/dev/full'), reason='no /dev/full')
def test_failed_write_exits_nonzero_and_leaves_nothing(tmp_path):
    """--merged /dev/full: the write fails (ENOSPC); the exit status says so and
    none of the other outputs appears: the directories it made are gone, an
    existing golden directory keeps what it had."""
    (tmp_path / 'exp').mkdir()
    (tmp_path / 'exp' / 'manifest.json').write_text('earlier run\n')
    before = tree_of(tmp_path)
    r = run(write_args(tmp_path, '/dev/full'))
    one_error_line(r, '/dev/full', os.strerror(errno.ENOSPC))
    assert tree_of(tmp_path) == before


def test_a_later_output_failing_leaves_no_earlier_one(tmp_path):
    """The golden results cannot be written (op0.out is a directory): the
    captures, written first, must not appear either, and an existing merged
    capture keeps its old bytes."""
    (tmp_path / 'exp' / 'op0.out').mkdir(parents=True)
    (tmp_path / 'm.pcap').write_bytes(b'old capture')
    before = tree_of(tmp_path)
    r = run(write_args(tmp_path, tmp_path / 'm.pcap'))
    one_error_line(r, tmp_path / 'exp' / 'op0.out', 'directory')
    assert tree_of(tmp_path) == before


def test_merged_in_a_missing_directory_is_refused(tmp_path):
    r = run([GEN] + base_args(tmp_path, **{'--merged': str(tmp_path / 'typo' / 'deeper' / 'm.pcap')}))
    one_error_line(r, '--merged', tmp_path / 'typo' / 'deeper', 'does not exist')
    assert list(tmp_path.iterdir()) == []


def test_outputs_written_through_devices_and_symlinks(tmp_path):
    """/dev/null stays a character device; a symlinked capture stays a link whose
    target gets the same bytes a plain path gets; no temp is left anywhere."""
    plain = tmp_path / 'plain'
    for d in ('plain', 'null', 'linked'):
        (tmp_path / d).mkdir()
    r = run(write_args(plain, plain / 'm.pcap'))
    assert r.returncode == 0, r.stderr
    r = run(write_args(tmp_path / 'null', '/dev/null'))
    assert r.returncode == 0, r.stderr
    assert stat.S_ISCHR(os.lstat('/dev/null').st_mode)
    (tmp_path / 'real').mkdir()
    (tmp_path / 'real' / 'capture.pcap').write_bytes(b'older')
    link = tmp_path / 'link.pcap'
    link.symlink_to('real/capture.pcap')
    r = run(write_args(tmp_path / 'linked', link))
    assert r.returncode == 0, r.stderr
    assert link.is_symlink() and os.readlink(link) == 'real/capture.pcap'
    assert (tmp_path / 'real' / 'capture.pcap').read_bytes() == (plain / 'm.pcap').read_bytes()
    assert {k: v for k, v in tree_of(tmp_path / 'linked').items()} == \
        {k: v for k, v in tree_of(plain).items() if k != 'm.pcap'}
    assert [p for p in tmp_path.rglob('*') if '.tmp' in p.name] == []
    assert [n for n in os.listdir('/dev') if '.tmp' in n] == []


def test_dir_options_make_their_directories(tmp_path):
    """--pcap-dir and --expected name directories: made when missing, in a parent that exists; a
    missing parent is refused in one line and nothing is made anywhere (as documented)."""
    (tmp_path / 'a').mkdir()
    r = run(write_args(tmp_path / 'a', tmp_path / 'm.pcap'))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / 'a' / 'ports').is_dir() and (tmp_path / 'a' / 'exp' / 'manifest.json').is_file()
    r = run(write_args(tmp_path / 'x' / 'y', tmp_path / 'm2.pcap'))
    assert r.returncode == 2, r.stderr
    assert 'does not exist' in r.stderr and r.stderr.count('\n') == 1, r.stderr
    assert not (tmp_path / 'x').exists() and not (tmp_path / 'm2.pcap').exists()


def test_help_names_every_choice():
    """--help lists every format (docs/PROTOCOL.md's codes), policy, value kind and order."""
    r = run([GEN, '--help'])
    assert r.returncode == 0
    for w in list(FORMATS) + ['fp32_arrival', 'kulisch', 'fp32_binomial', 'rounded', 'auto', 'ieee', 'saturate',
                              'gradient', 'full', 'cancel', 'specials', 'round_robin', 'random', 'reverse']:
        assert re.search(rf'(?<![0-9A-Za-z_]){w}(?![0-9A-Za-z_])', r.stdout), f'--help does not name {w}'
