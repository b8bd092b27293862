"""Helpers for the end-to-end tests of prism-switch (tests/py/test_switch.py).

A scenario is: a switch configuration written here (members with distinct
MACs and IPs, every port a DPDK ``net_pcap`` device reading the capture
prism-gen wrote for it and writing what the switch sends to ``out<port>.pcap``),
``prism-gen write`` for the traffic and its golden results, one run of the real
``prism-switch`` binary under DPDK (``--no-huge``, one lcore unless asked), and
``prism-gen dump`` to decode what came out.  The checks compare every RESULT
with the golden files bit for bit.

Layouts and codes come from docs/PROTOCOL.md and docs/CONFIG.md.
"""
from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# Under meson PRISM_BUILD names the build directory and a missing binary is a
# failure; run by hand, the tests skip without one.
BUILD = Path(os.environ.get('PRISM_BUILD') or REPO / 'build')
GEN = BUILD / 'app' / 'prism-gen'
SWITCH = BUILD / 'app' / 'prism-switch'

# docs/PROTOCOL.md
CONTRIB, PARTIAL, RESULT, NACK = 1, 2, 3, 4
RETRANSMIT, LAST_CHUNK, SIDEBAND = 1, 2, 4
OVERFLOW, INVALID, NAN_INPUT = 1, 2, 4
NACK_REASONS = {'malformed': 1, 'unknown_job': 2, 'not_a_member': 3, 'descriptor_mismatch': 4,
                'accumulator_too_narrow': 5, 'no_free_slot': 6, 'result_expired': 7, 'op_abandoned': 8}


def missing_bitmap(group: int, missing) -> bytes:
    """The body of a NACK OP_ABANDONED (PROTOCOL.md): ceil(group / 8) bytes, bit r % 8 of byte r // 8 set
    for each rank r that had not contributed."""
    b = bytearray((group + 7) // 8)
    for r in missing:
        b[r // 8] |= 1 << (r % 8)
    return bytes(b)
DTYPES = {'fp32': (1, 4), 'fp16': (2, 2), 'bf16': (3, 2), 'e4m3fn': (4, 1), 'e4m3fnuz': (5, 1),
          'e5m2': (6, 1), 'e5m2fnuz': (7, 1), 'int8': (8, 1), 'int32': (9, 4)}
POLICIES = {'fp32_arrival': 1, 'kulisch': 2, 'fp32_binomial': 3}
UDP_PORT = 20562
SWITCH_ID = 1

# EAL arguments every run shares: no hugepages, no PCI scan, quiet EAL.
EAL_BASE = ['--no-huge', '-m', '512', '--no-pci', '--log-level=lib.eal:error']
DPDK_RUN_DIR = Path('/var/run/dpdk') if os.geteuid() == 0 else \
    Path(os.environ.get('XDG_RUNTIME_DIR') or '/tmp') / 'dpdk'

_prefix_counter = itertools.count()


def require_binaries(*bins: Path):
    for b in bins or (GEN, SWITCH):
        if not (b.is_file() and os.access(b, os.X_OK)):
            if os.environ.get('PRISM_BUILD'):
                pytest.fail(f'{b.name} binary not found at {b}')
            pytest.skip(f'{b.name} binary not found at {b} (set PRISM_BUILD)')


def installed_libprism(tmp_path: Path) -> tuple[list[str], Path]:
    """libprism installed (meson install) into a staging directory under tmp_path: pkg-config's
    --cflags --libs for it, and the folder its libprism.so is in (for LD_LIBRARY_PATH)."""
    dest = tmp_path / 'inst'
    r = subprocess.run(['meson', 'install', '-C', str(BUILD), '--destdir', str(dest), '--quiet'],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    pcs = list(dest.rglob('prism.pc'))
    assert len(pcs) == 1, pcs
    env = {'PKG_CONFIG_PATH': str(pcs[0].parent), 'PKG_CONFIG_SYSROOT_DIR': str(dest), 'PATH': '/usr/bin:/bin'}
    flags = subprocess.run(['pkg-config', '--cflags', '--libs', 'prism'], capture_output=True, text=True, env=env)
    assert flags.returncode == 0, flags.stderr
    return flags.stdout.split(), next(p.parent for p in dest.rglob('libprism.so'))


def file_prefix(tag: str = '') -> str:
    """A DPDK --file-prefix no other process uses (short: it ends up in socket paths)."""
    tag = re.sub(r'[^A-Za-z0-9]', '', tag)[:16]
    return f'pst{os.getpid()}x{next(_prefix_counter)}{tag}'


def cleanup_prefix(prefix: str):
    """Removes the runtime directory DPDK left for our own --file-prefix."""
    d = DPDK_RUN_DIR / prefix
    if d.is_dir():
        shutil.rmtree(d, ignore_errors=True)


# ------------------------------------------------------------------ addresses
def member_mac(r: int) -> str:
    return f'02:00:00:{(r >> 16) & 0xFF:02x}:{(r >> 8) & 0xFF:02x}:{r & 0xFF:02x}'


def member_ip(r: int) -> str:
    return f'10.1.{(r >> 8) & 0xFF}.{(r & 0xFF)}'


def port_mac(p: int) -> str:
    return f'02:00:00:00:ff:{p:02x}'


def port_ip(p: int) -> str:
    return f'10.0.{p}.254'


@dataclass
class Scenario:
    """A switch configuration whose ports replay pcaps from `pcap_dir`."""
    dir: Path
    ranks: int
    ports: int = 1
    shards: int = 1
    job: int = 7
    arbiter: str | None = None     # round_robin / random / reverse
    seed: int | None = None
    lcores: list[int] | None = None
    extra: dict = field(default_factory=dict)  # other top-level keys, written as YAML flow values
    port_of_rank: object = None    # callable r -> port (default r % ports)

    def __post_init__(self):
        self.dir = Path(self.dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.pcap_dir = self.dir / 'p'
        self.exp_dir = self.dir / 'exp'
        if self.port_of_rank is None:
            self.port_of_rank = lambda r: r % self.ports
        self.member_port = {r: self.port_of_rank(r) for r in range(self.ranks)}
        self.rank_of_ip = {member_ip(r): r for r in range(self.ranks)}
        self.config = self.dir / 'sw.yaml'
        self.write_config()

    def rx_pcap(self, p: int) -> Path:
        return self.pcap_dir / f'sw{SWITCH_ID}.port{p}.pcap'

    def tx_pcap(self, p: int) -> Path:
        return self.dir / f'out{p}.pcap'

    def write_config(self, path: Path | None = None, **over):
        """Writes the YAML (the same addresses every time); `over` replaces top-level keys."""
        lines = [f'switch: {{id: {SWITCH_ID}, role: root}}', 'ports:']
        for p in range(self.ports):
            dev = f'net_pcap{p},rx_pcap={self.rx_pcap(p)},tx_pcap={self.tx_pcap(p)}'
            lines.append(f'  - {{id: {p}, device: "{dev}", mac: "{port_mac(p)}", ip: {port_ip(p)}}}')
        lines += ['jobs:', f'  - id: {self.job}', '    members:']
        for r in range(self.ranks):
            lines.append(f'      - {{rank: {r}, port: {self.member_port[r]}, mac: "{member_mac(r)}", '
                         f'ip: {member_ip(r)}}}')
        top = dict(self.extra)
        top.setdefault('reducers', f'{{shards: {self.shards}}}')
        if self.arbiter:
            top.setdefault('arbiter', f'{{mode: {self.arbiter}, seed: {self.seed or 1}}}')
        if self.lcores is not None:
            top.setdefault('lcores', '[' + ', '.join(map(str, self.lcores)) + ']')
        top.update(over)
        for k, v in top.items():
            lines.append(f'{k}: {v}')
        path = path or self.config
        path.write_text('\n'.join(lines) + '\n')
        return path

    # -------------------------------------------------------------- prism-gen
    def generate(self, dtype: str, policy: str, elements: int, ops: int = 1, *, out_dir: Path | None = None,
                 exp_dir: Path | None = None, **opts) -> dict:
        """prism-gen write for this config; `opts` are further options (chunk=96 -> --chunk 96).

        Returns the manifest (with 'exp_dir' added)."""
        out_dir = out_dir or self.pcap_dir
        exp_dir = exp_dir or self.exp_dir
        args = ['write', '--config', self.config, '--job', self.job, '--dtype', dtype, '--policy', policy,
                '--elements', elements, '--ops', ops, '--pcap-dir', out_dir, '--expected', exp_dir]
        for k, v in opts.items():
            args += ['--' + k.replace('_', '-'), v]
        r = run([GEN] + args)
        assert r.returncode == 0, f'prism-gen {" ".join(map(str, args))} failed: {r.stderr}'
        man = json.loads((exp_dir / 'manifest.json').read_text())
        man['exp_dir'] = str(exp_dir)
        return man

    # ---------------------------------------------------------------- switch
    def run_switch(self, *, idle_ms: int = 200, lcores: str = '0', config: Path | None = None,
                   timeout: float = 120, tag: str = '') -> 'SwitchRun':
        for p in range(self.ports):
            self.tx_pcap(p).unlink(missing_ok=True)
        prefix = file_prefix(tag or self.dir.name)
        cmd = [SWITCH, *EAL_BASE, '-l', lcores, '--file-prefix', prefix, '--',
               '--config', config or self.config, '--exit-when-idle', idle_ms]
        try:
            r = run(cmd, timeout=timeout)
        finally:
            cleanup_prefix(prefix)
        return SwitchRun(cmd, r.returncode, r.stdout, r.stderr, self)


def run(args, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, **kw)


def dump(pcap: Path, shards: int = 64) -> list[dict]:
    """Every frame of a capture, parsed by prism-gen dump: frames to any of the switch's shard ports
    (20562 .. +shards-1) are PRISM's."""
    r = run([GEN, 'dump', pcap, '--shards', str(shards)])
    assert r.returncode == 0, f'prism-gen dump {pcap}: {r.stderr}'
    return [json.loads(ln) for ln in r.stdout.splitlines() if ln.strip()]


# ------------------------------------------------------------------ summary
@dataclass
class Summary:
    rx: dict = field(default_factory=dict)          # port -> {packets, bytes, to_reducers, backpressure, ...}
    tx: dict = field(default_factory=dict)          # port -> {packets, bytes, retries, nacks}
    refused: Counter = field(default_factory=Counter)   # parser refusal name -> n (all ports)
    rx_dropped: Counter = field(default_factory=Counter)  # RX drop reason -> n (all ports)
    shards: dict = field(default_factory=dict)      # shard -> {packets, contribs, ..., nacks_sent, ...}
    shard_dropped: Counter = field(default_factory=Counter)  # reducer drop reason -> n (all shards)
    lcores: dict = field(default_factory=dict)      # lcore -> {shards: [..], rx, local, dispatched, inbox_packets, ...}
    jobs: dict = field(default_factory=dict)        # job -> Counter(opened, completed, ...) of op chunks, over shards
    incomplete: list = field(default_factory=list)  # (job, op, chunk, got, of)
    abandoned: dict = field(default_factory=dict)  # job -> op chunks abandoned after op_timeout_ms
    pools: dict = field(default_factory=dict)      # pool id -> {first, count, max_group, free, allocated, ...}
    pooled_jobs: dict = field(default_factory=dict)  # job -> {state, group, bound, idle_ms} (jobs not free)
    polling: dict = field(default_factory=dict)    # lcore -> {sleeps, slept_us} (polling: adaptive)
    stalls: dict = field(default_factory=dict)     # lcore -> (stalls, seconds left out, the longest)
    oversize: dict = field(default_factory=dict)   # port -> frames above its MTU (the operator's hint line)
    header: str = ''

    def shard_total(self, key: str) -> int:
        return sum(s[key] for s in self.shards.values())

    def dropped(self, reason: str) -> int:
        return self.rx_dropped[reason] + self.shard_dropped[reason]

    @property
    def hw_checksums(self) -> int:  # packets whose sums the device verified (RX checksum offload), all ports
        return sum(p['hw_checksums'] for p in self.rx.values())

    @property
    def nacks(self) -> int:  # NACKs sent out of every port
        return sum(p['nacks'] for p in self.tx.values())


# Every counter line is "name value" pairs: the switch prints its counter tables as they are.
_PAIRS = r'((?:[a-z_0-9]+ \d+)(?:, [a-z_0-9]+ \d+)*)'
_RX = re.compile(r'^  port (\d+) rx: ' + _PAIRS + '$')
_TX = re.compile(r'^  port (\d+) tx: ' + _PAIRS + '$')
_SHARD = re.compile(r'^  shard (\d+): ' + _PAIRS + '$')
_LCORE = re.compile(r'^  lcore (\d+) \(shards ([0-9,]+|none)\): ' + _PAIRS + '$')
_JOB = re.compile(r'^    job (\d+) chunks: ' + _PAIRS + '$')
_REFUSED = re.compile(r'^    refused (\S+)\s+(\d+)$')
_DROPPED = re.compile(r'^    dropped (\S+)\s+(\d+)$')
_INCOMPLETE = re.compile(r'^  INCOMPLETE job (\d+) op (\d+) chunk (\d+): (\d+) of (\d+) contributions$')
_ABANDONED = re.compile(r'^  INCOMPLETE job (\d+): (\d+) op chunks abandoned after op_timeout_ms$')
_POOL = re.compile(r'^  pool (\d+): ' + _PAIRS + '$')
_POOLED = re.compile(r'^    pooled job (\d+) ([a-z]+): ' + _PAIRS + '$')
_POLLING = re.compile(r'^  lcore (\d+) polling adaptive: ' + _PAIRS + '$')
_STALLS = re.compile(r'^  lcore (\d+) stalls: (\d+), ([0-9.]+) s not counted against ops \(the longest ([0-9.]+) s\)$')
_OVERSIZE = re.compile(r"^  port (\d+): (\d+) frames larger than the port's MTU \(a GSO super-packet .*\)$")


def _pairs(text: str) -> dict:
    out = {}
    for kv in text.split(', '):
        k, v = kv.split(' ')
        assert k not in out, f'counter {k} twice in one line: {text!r}'
        out[k] = int(v)
    return out


def parse_summary(stdout: str) -> Summary:
    s = Summary()
    section = None
    for ln in stdout.splitlines():
        if ln.startswith('prism-switch ') and ln.endswith(' summary'):
            s.header = ln
            continue
        if m := _RX.match(ln):
            section = 'rx'
            s.rx[int(m[1])] = _pairs(m[2])
        elif m := _TX.match(ln):
            section = 'tx'
            s.tx[int(m[1])] = _pairs(m[2])
        elif m := _LCORE.match(ln):
            section = 'lcore'
            s.lcores[int(m[1])] = {'shards': [] if m[2] == 'none' else [int(x) for x in m[2].split(',')],
                                   **_pairs(m[3])}
        elif m := _SHARD.match(ln):
            section = 'shard'
            s.shards[int(m[1])] = _pairs(m[2])
        elif m := _REFUSED.match(ln):
            assert section == 'rx', f'refusal line outside a port section: {ln!r}'
            s.refused[m[1]] += int(m[2])
        elif m := _DROPPED.match(ln):
            assert section in ('rx', 'shard'), f'drop line outside a section: {ln!r}'
            (s.rx_dropped if section == 'rx' else s.shard_dropped)[m[1]] += int(m[2])
        elif m := _JOB.match(ln):
            assert section == 'shard', f'job line outside a shard section: {ln!r}'
            s.jobs.setdefault(int(m[1]), Counter()).update(_pairs(m[2]))
        elif m := _INCOMPLETE.match(ln):
            s.incomplete.append(tuple(map(int, m.groups())))
        elif m := _ABANDONED.match(ln):
            s.abandoned[int(m[1])] = int(m[2])
        elif m := _STALLS.match(ln):
            s.stalls[int(m[1])] = (int(m[2]), float(m[3]), float(m[4]))
        elif m := _POLLING.match(ln):
            s.polling[int(m[1])] = _pairs(m[2])
        elif m := _OVERSIZE.match(ln):
            assert section == 'rx', f'oversize line outside a port section: {ln!r}'
            s.oversize[int(m[1])] = int(m[2])
        elif m := _POOL.match(ln):
            section = 'pool'
            s.pools[int(m[1])] = _pairs(m[2])
        elif m := _POOLED.match(ln):
            assert section == 'pool', f'pooled job line outside a pool section: {ln!r}'
            s.pooled_jobs[int(m[1])] = {'state': m[2], **_pairs(m[3])}
        elif ln.strip():
            raise AssertionError(f'unrecognised summary line: {ln!r}')
    return s


class SwitchRun:
    def __init__(self, cmd, rc, stdout, stderr, sc: Scenario):
        self.cmd = ' '.join(map(str, cmd))
        self.rc, self.stdout, self.stderr, self.sc = rc, stdout, stderr, sc
        self._frames = None
        self._summary = None

    def describe(self) -> str:
        return f'command: {self.cmd}\nexit status: {self.rc}\nstdout:\n{self.stdout}\nstderr:\n{self.stderr}'

    @property
    def summary(self) -> Summary:
        if self._summary is None:
            self._summary = parse_summary(self.stdout)
        return self._summary

    @property
    def frames(self) -> list[dict]:
        """Every frame the switch sent, each with 'out_port' added."""
        if self._frames is None:
            self._frames = []
            for p in range(self.sc.ports):
                assert self.sc.tx_pcap(p).exists(), f'no tx capture for port {p}\n{self.describe()}'
                for f in dump(self.sc.tx_pcap(p)):
                    f['out_port'] = p
                    self._frames.append(f)
        return self._frames

    def of_kind(self, kind: int) -> list[dict]:
        return [f for f in self.frames if f.get('kind') == kind]


# ------------------------------------------------------------------ checks
def out_dtype_of(man: dict) -> str:
    return man['out_dtype']


def golden(man: dict, op: int) -> tuple[bytes, bytes]:
    d = Path(man['exp_dir'])
    return (d / f'op{op}.out').read_bytes(), (d / f'op{op}.flags').read_bytes()


def rank_inputs(man: dict, op: int) -> list[bytes]:
    d = Path(man['exp_dir'])
    return [(d / f'rank{r}.op{op}.in').read_bytes() for r in range(man['group'])]


def chunk_span(man: dict, chunk: int) -> tuple[int, int]:
    first = chunk * man['chunk']
    return first, min(man['chunk'], man['elements'] - first)


def check_results(run: SwitchRun, mans: list[dict], *, allow_retransmit=False, all_frames_parse=True) -> dict:
    """Every RESULT payload equals the golden slice bit for bit, its SIDEBAND the
    flags slice (none when the slice has no flag), status the OR of the slice,
    header fields as PROTOCOL.md says; every member gets every chunk of every op
    exactly once (RETRANSMIT copies aside: returned for the caller to check).

    Returns {'results': [...], 'retransmits': [...], 'assembled': {op: {rank: bytearray}}}."""
    sc = run.sc
    bad = []
    first_copies = Counter()
    retrans = []
    assembled = defaultdict(dict)
    by_op = {}
    for man in mans:
        for o in man['ops']:
            assert o['op'] not in by_op, 'op numbers overlap between manifests'
            by_op[o['op']] = (man, *golden(man, o['op']))
    results = run.of_kind(RESULT)
    for f in run.frames if all_frames_parse else []:
        if f['refusal'] != 'ok':
            bad.append(f'frame {f["index"]} on port {f["out_port"]} does not parse: {f["refusal"]}')
    for f in results:
        tag = f'RESULT op {f["op"]} chunk {f["chunk"]} to {f["dst_ip"]}'
        if f['op'] not in by_op:
            bad.append(f'{tag}: no such op generated')
            continue
        man, out, flags = by_op[f['op']]
        osz = DTYPES[man['out_dtype']][1]
        rank = sc.rank_of_ip.get(f['dst_ip'])
        if rank is None:
            bad.append(f'{tag}: not a member address')
            continue
        p = sc.member_port[rank]
        exp_hdr = {'job': man['job'], 'sender': SWITCH_ID, 'group': man['group'], 'terms': man['group'],
                   'dtype': DTYPES[man['dtype']][0], 'out_dtype': DTYPES[man['out_dtype']][0],
                   'policy': POLICIES[man['policy']], 'encoding': 2,
                   'dst_mac': member_mac(rank), 'dst_port': UDP_PORT, 'src_mac': port_mac(p), 'src_ip': port_ip(p),
                   'src_port': UDP_PORT, 'out_port': p}
        for k, v in exp_hdr.items():
            if f[k] != v:
                bad.append(f'{tag}: {k} = {f[k]!r}, expected {v!r}')
        if f['chunk'] >= man['chunks']:
            bad.append(f'{tag}: chunk out of range ({man["chunks"]} chunks)')
            continue
        first, cnt = chunk_span(man, f['chunk'])
        if f['count'] != cnt:
            bad.append(f'{tag}: count {f["count"]}, expected {cnt}')
            continue
        want = out[first * osz:(first + cnt) * osz]
        got = bytes.fromhex(f['payload'])
        if got != want:
            diff = [i for i in range(cnt) if got[i * osz:(i + 1) * osz] != want[i * osz:(i + 1) * osz]]
            i = diff[0]
            bad.append(f'{tag}: payload differs from golden in {len(diff)} of {cnt} elements; first at element '
                       f'{first + i}: got {got[i * osz:(i + 1) * osz].hex()} expected {want[i * osz:(i + 1) * osz].hex()}')
        fl = flags[first:first + cnt]
        status = 0
        for b in fl:
            status |= b
        if f['status'] != status:
            bad.append(f'{tag}: status {f["status"]}, expected OR of flags {status}')
        has_sb = bool(f['flags'] & SIDEBAND)
        if has_sb != bool(status):
            bad.append(f'{tag}: SIDEBAND flag {has_sb} but the flags slice {"has" if status else "has no"} flag')
        if has_sb and bytes.fromhex(f['sideband']) != fl:
            bad.append(f'{tag}: sideband {f["sideband"][:80]} != golden flags {fl.hex()[:80]}')
        last = f['chunk'] == man['chunks'] - 1
        if bool(f['flags'] & LAST_CHUNK) != last:
            bad.append(f'{tag}: LAST_CHUNK {bool(f["flags"] & LAST_CHUNK)}, expected {last}')
        if f['flags'] & ~(RETRANSMIT | LAST_CHUNK | SIDEBAND):
            bad.append(f'{tag}: reserved flag bits {f["flags"]:#x}')
        if f['flags'] & RETRANSMIT:
            retrans.append((rank, f['op'], f['chunk']))
        else:
            first_copies[(rank, f['op'], f['chunk'])] += 1
            buf = assembled[f['op']].setdefault(rank, bytearray(man['elements'] * osz))
            buf[first * osz:(first + cnt) * osz] = got
    # every member, every op, every chunk: exactly once
    missing, repeated = [], []
    for op, (man, _, _) in by_op.items():
        for r in range(man['group']):
            for c in range(man['chunks']):
                n = first_copies[(r, op, c)]
                if n == 0:
                    missing.append((r, op, c))
                elif n > 1:
                    repeated.append(((r, op, c), n))
    if missing:
        bad.append(f'{len(missing)} (rank, op, chunk) got no RESULT, e.g. {missing[:6]}')
    if repeated:
        bad.append(f'{len(repeated)} (rank, op, chunk) got more than one non-RETRANSMIT RESULT, e.g. {repeated[:6]}')
    if retrans and not allow_retransmit:
        bad.append(f'{len(retrans)} RESULTs with RETRANSMIT set where none was asked for, e.g. {retrans[:6]}')
    assert not bad, '\n'.join(bad[:25]) + f'\n({len(bad)} problems)\n' + run.describe()
    return {'results': results, 'retransmits': retrans, 'assembled': assembled}


# ------------------------------------------------------------------ pcap files
PCAP_GLOBAL = struct.Struct('<IHHiIII')
PCAP_REC = struct.Struct('<IIII')


def read_pcap(path: Path) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    """(global header, [(record header, frame)]) of a classic little-endian pcap."""
    data = Path(path).read_bytes()
    ghdr = data[:PCAP_GLOBAL.size]
    magic = PCAP_GLOBAL.unpack(ghdr)[0]
    assert magic in (0xA1B2C3D4, 0xA1B23C4D), f'{path}: not a little-endian pcap ({magic:#x})'
    recs, off = [], PCAP_GLOBAL.size
    while off < len(data):
        rh = data[off:off + PCAP_REC.size]
        incl = PCAP_REC.unpack(rh)[2]
        off += PCAP_REC.size
        recs.append((rh, data[off:off + incl]))
        off += incl
    return ghdr, recs


def write_pcap(path: Path, ghdr: bytes, recs):
    with open(path, 'wb') as f:
        f.write(ghdr)
        for rh, fr in recs:
            f.write(rh)
            f.write(fr)


def concat_pcaps(out: Path, inputs: list[Path]):
    ghdr, all_recs = None, []
    for p in inputs:
        g, recs = read_pcap(p)
        ghdr = ghdr or g
        all_recs += recs
    write_pcap(out, ghdr, all_recs)


def mac_bytes(mac: str) -> bytes:
    return bytes(int(x, 16) for x in mac.split(':'))


def frame_src_ip(frame: bytes) -> str:
    """IPv4 source of an untagged Ethernet/IPv4 frame (whatever else is wrong with it)."""
    return '.'.join(str(b) for b in frame[26:30])


# ------------------------------------------------------------------ telemetry
def telemetry_socket(prefix: str) -> Path:
    return DPDK_RUN_DIR / prefix / 'dpdk_telemetry.v2'


def telemetry_query(prefix: str, commands: list[str], timeout: float = 5.0) -> dict:
    """Speaks DPDK's telemetry v2 protocol (what dpdk-telemetry.py does): a
    SOCK_SEQPACKET unix socket; the server greets with a JSON object, then
    answers each command with {command: data}."""
    import socket
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(timeout)
    s.connect(str(telemetry_socket(prefix)))
    try:
        hello = json.loads(s.recv(1 << 16).decode())
        bufsize = int(hello.get('max_output_len', 16384))
        out = {}
        for c in commands:
            s.send(c.encode())
            out.update(json.loads(s.recv(bufsize).decode()))
        return out
    finally:
        s.close()


def wait_for(pred, timeout: float, step: float = 0.05) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(step)
    return pred()


def start_switch(sc: Scenario, prefix: str, *, idle_ms: int = 0, lcores: str = '0') -> subprocess.Popen:
    cmd = [str(SWITCH), *EAL_BASE, '-l', lcores, '--file-prefix', prefix, '--', '--config', str(sc.config)]
    if idle_ms:
        cmd += ['--exit-when-idle', str(idle_ms)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            text=True)


def stop_switch(proc: subprocess.Popen, sig=signal.SIGTERM, timeout: float = 20) -> tuple[int, str, str]:
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f'prism-switch did not stop within {timeout}s of signal {sig}\n{out}\n{err}')
    return proc.returncode, out, err
