#!/usr/bin/python3
"""PRISM network-namespace testbed: R ranks, each in its own network namespace,
joined by veth pairs to prism-switch (DPDK, net_af_xdp or net_af_packet) in a
namespace of its own; optionally one Linux bridge in front of one switch port, or a tree of two
switches; optionally impaired links (loss, duplication, reordering: nftables
and htb).

Run `scripts/testbed.sh --help` for the usage. The Python API (used by
tests/py/testbed.py) is the Testbed class:

    with Testbed(ranks=4, loss=5) as tb:              # builds it, starts the switch
        runs = tb.run(['python3', 'client.py', '--rank', '{rank}', '--config', '{config}'])
        exits = tb.stop_switches()                    # SIGINT; stdout holds the summary

    Testbed(ranks=4, jobs=2)   # job 7 (UDP port 20562) and job 8 (20563) over the same ranks;
                               # tb.run(..., label='job8') keeps two concurrent runs' outputs apart
    # everything it made is gone here, even after an exception

Needs root (namespaces, veths, nftables, tc). Only Debian packages: iproute2,
nftables, ethtool, librte-net-af-xdp23 (scripts/setup.sh); Python 3.11 standard library.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import secrets
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DPDK_RUN_DIR = Path('/var/run/dpdk')
STATE = 'testbed.json'
LAYOUTS = ('direct', 'bridge', 'tree')
DUP_MARK = 0x50524953   # "PRIS": a copy nft's `dup` made, passed through untouched
SLOW_CLASS = '1:20'     # the htb class of the delayed path (reordering)
NS_IF = 'prism0'        # the rank's end of its veth, inside its namespace
PRISM_UDP = 20562
DRIVERS = ('af_xdp', 'af_packet')
DEFAULT_DRIVER = 'af_xdp'   # measured faster here: docs/REAL_INTERFACES.md, "net_af_xdp"
# net_af_xdp's buffers are a page each (no hugepages): the switch refuses an interface MTU above this.
AF_XDP_MAX_MTU = 3290

PLACEHOLDERS = ('{rank}', '{ranks}', '{config}', '{ns}', '{ip}', '{switch_ip}', '{dir}')

HELP = f"""\
usage: scripts/testbed.sh [OPTIONS] -- COMMAND [ARG...]   run COMMAND in every rank's namespace
       scripts/testbed.sh [OPTIONS] up                    build the testbed and leave it up
       scripts/testbed.sh down (--id ID | --dir DIR)      tear down one left up
       scripts/testbed.sh capture --iface IF --out FILE [--ns NS] [--direction in|out|both]

A PRISM testbed on one machine, in network namespaces. R ranks: rank k lives in
namespace prism-tb<ID>-r<k> with one interface, {NS_IF}, a veth whose other end
(r<k>) is in the switch's namespace, prism-tb<ID>-switch, where prism-switch
(build/app/prism-switch: DPDK, --no-huge -m 512 --no-pci -l 0, a --file-prefix
of its own) drives it with net_af_xdp (--driver af_packet: net_af_packet).
Nothing is added to the root
namespace. The switch configuration is written to DIR/<switch>.yaml: a job
(--job) with members {{rank, port, mac, ip, udp_port}}, a rank's MAC being its
{NS_IF}'s and its udp_port {PRISM_UDP}; with --jobs N, N jobs over the same
ranks (job ID+i registers each rank at UDP port {PRISM_UDP}+i). The testbed
waits until the switch's telemetry socket answers /prism/ports, then each rank
pings its switch port: no static neighbour entry anywhere, the kernel resolves
the switch by ARP and the switch answers.

Layouts:
  (default)     one switch port per rank: port k = net_af_xdp<k>,iface=r<k>;
                rank k is 10.88.k.1/24, its switch port 10.88.k.254
  --bridge      every rank on one Linux bridge (br0, in the switch's namespace)
                behind one switch port (a veth sw0 <-> br0sw);
                ranks 10.88.0.(k+1)/24, switch port 10.88.0.254
  --tree        two switches, each in its own namespace: a leaf (id 2,
                prism-tb<ID>-leaf) in front of ranks 0..R/2-1 and a root (id 1,
                prism-tb<ID>-root) in front of the others, joined by a veth pair
                (up0 10.89.0.2 in the leaf's, down0 10.89.0.1 in the root's); the
                leaf's ranks are 10.88.k.1 (10.88.1.x with --bridge). With --bridge
                each switch has its own bridge. Configs: DIR/leaf.yaml, DIR/root.yaml

Running a command (after --): it runs in every rank's namespace at once, as
`ip netns exec NS COMMAND...` (no shell: write `sh -c '...'` for one), with
these words replaced in every argument:
  {{rank}} the rank id   {{ranks}} R   {{config}} the YAML of the rank's switch
  {{ns}} the namespace   {{ip}} the rank's address   {{switch_ip}} its switch port's
  {{dir}} DIR
Each rank's stdout and stderr go to DIR/rank<k>.out / .err and are printed,
prefixed "[r<k>] ", when all have finished; then the switch is stopped with
SIGINT and its summary (DIR/<switch>.out; its log in DIR/<switch>.err) printed.
Exit status: 0 when every rank and every switch exited 0, 1 otherwise, 2 for a
usage or setup error, 124 when a rank ran past --timeout, 130 when interrupted.

`up` builds the testbed, starts the switch(es) and leaves them running: it
prints the namespaces, the configs and the `down` command (then, e.g.,
`ip netns exec prism-tb<ID>-r0 ping 10.88.0.254`, or
`ip netns exec prism-tb<ID>-switch tcpdump -ni r0`). `down` stops the switches
(SIGINT; summaries in DIR/<switch>.out) and removes what `up` made. Whatever
the way out of a run (normal exit, an error, Ctrl-C, SIGTERM, SIGHUP), the
testbed removes everything it made: the switch processes, the namespaces (and
with them every veth, bridge, nft table and qdisc) and /var/run/dpdk/<prefix>.
DIR is removed after a successful run unless --dir or --keep-dir was given.

Options:
  --ranks R           ranks (default 4; 1..200; --tree needs 2 or more)
  --bridge            ranks on one Linux bridge behind one switch port
  --tree              a leaf and a root switch (see Layouts)
  --loss PCT          drop PCT% of the IPv4 UDP frames in each direction (0..100, fractions ok)
  --dup PCT           duplicate PCT% of them in each direction (nft dup)
  --reorder [PCT]     send PCT% (default 25) through a slower htb class, so frames
                      queued there are overtaken: reordering in each direction
                      (tests/py/test_client.py shows it in captures)
  --reorder-rate R    rate of the slow class (tc units; default 20mbit)
  --mtu BYTES         IP MTU of every link (default 1500; 576..9000). Above 1500 the
                      switch's net_af_packet ports get blocksz=36864,framesz=9216
                      (the driver's default 2048-byte frames hold no more than 1500);
                      net_af_xdp takes up to {AF_XDP_MAX_MTU} (a buffer is a page): above
                      that the default driver is af_packet
  --driver KIND       the switch's ports: af_xdp (net_af_xdp: XDP in the veth's driver,
                      copy mode, an AF_XDP socket per queue; the default, measured
                      faster) or af_packet (net_af_packet: a TPACKET_V2 ring; the default
                      above MTU {AF_XDP_MAX_MTU}, and for --dup or --reorder without --bridge,
                      whose egress hook net_af_xdp's frames do not pass)
  --no-offloads       leave the interfaces' offloads as the kernel made them. By
                      default, with af_packet, every rank's {NS_IF} gets
                      `ethtool -K {NS_IF} tx-udp-segmentation off` and the switch's
                      interfaces `gro off`, so that a UDP GSO send is segmented before
                      it reaches the switch (net_af_packet would get the unsegmented
                      super-packet, dropped as oversize); af_xdp needs nothing: a veth
                      whose peer runs XDP does not pass GSO packets on
  --job ID            the job id (default 7)
  --jobs N            N jobs over the same ranks (default 1; 1..16): job ID+i has every
                      rank as a member at UDP port {PRISM_UDP}+i, with the same MAC and IP
                      (members of two jobs may share an IP when their UDP ports differ,
                      docs/CONFIG.md). A rank's command picks its job: prism-rank --job 8
                      binds job 8's udp_port from {{config}}; the switch still listens on
                      {PRISM_UDP} for every job
  --set KEY=VALUE     a top-level key of the switch YAML (repeatable), e.g.
                      --set retention_ms=2000 --set 'reducers={{shards: 2}}'
                      (the testbed's default: retention_ms=5000)
  --id ID             testbed id, 1-12 of [a-z0-9] (default: 4 random hex digits)
  --dir DIR           configs, outputs and the state file (default /tmp/prism-tb<ID>)
  --build DIR         the build directory (default: $PRISM_BUILD or the repository's build/)
  --lcore N           the EAL lcore of the switch(es) (default 0)
  --lcores LIST       the switch's lcores instead, e.g. 0,1 or 0-1: its EAL -l and its
                      config's lcores: (shared nothing: one reducer shard each unless
                      --set 'reducers={{shards: S}}')
  --tap               with --bridge: the switch port is net_tap (one queue per lcore,
                      each shard's UDP port steered to its lcore's queue by the tap's
                      steering program), attached to the bridge once the switch made it
  --timeout SECONDS   a rank's command is killed after this long (default 300)
  --no-ping           skip the ARP/ping check before the command
  --keep-dir          keep DIR after a successful run
  --json FILE         write a report (each rank's exit status and output, switch exits)
  -q, --quiet         print only failures and the last line
  -h, --help          this help

Impairments apply to IPv4 UDP frames only (ARP and ping pass untouched), in
both directions, with nftables (table `netdev prism_tb<ID>` in each rank's
namespace and in the switch's):
  towards the switch  loss, duplication and reordering on the egress hook of the
                      rank's {NS_IF}
  from the switch     loss on the ingress hook of the rank's {NS_IF}; duplication
                      and reordering on the egress hook of r<k>, the switch's end of
                      the rank's veth (with --bridge, the bridge's port to the rank)
Reordering adds an htb qdisc (class 1:10 fast, 1:20 slow) where the egress
hooks are. In the default layout --dup and --reorder give each rank's switch
port qdisc_bypass=0, so that the switch's frames pass that hook and qdisc.
(A frame that net_af_packet sends and an egress hook drops is not lost: the
kernel keeps it in the socket's TX ring and sends it again; hence loss from the
switch is made at the rank's ingress.) net_af_packet also receives the frames
sent out of its interface by others, so in the default layout the copies --dup
makes of the switch's frames come back to the switch too: it counts them as
unknown_source and drops them.

Examples:
  scripts/testbed.sh --ranks 4 -- python3 tests/py/minimal_client.py --config {{config}} --rank {{rank}} --elements 10000
  scripts/testbed.sh --ranks 8 --loss 5 --dup 2 --reorder -- python3 tests/py/minimal_client.py --config {{config}} --rank {{rank}}
  scripts/testbed.sh --ranks 4 --tree --bridge -- sh -c 'ip neigh; ping -c1 {{switch_ip}}'
  scripts/testbed.sh --ranks 4 --bridge --id demo up;  ip netns exec prism-tbdemo-r0 ping -c1 10.88.0.254;  scripts/testbed.sh down --id demo
"""


class TestbedError(Exception):
    """Something the testbed cannot do; the message says what and what to do."""


def parse_lcores(text: str) -> list[int]:
    """'0,1' or '0-3' or '0,2-3': the switch's lcores."""
    out = []
    for part in text.split(','):
        a, sep, b = part.partition('-')
        if not a.isdigit() or (sep and not b.isdigit()):
            raise TestbedError(f'--lcores {text!r}: lcore ids such as 0,1 or 0-3')
        out += list(range(int(a), int(b) + 1)) if sep else [int(a)]
    if not out or len(set(out)) != len(out):
        raise TestbedError(f'--lcores {text!r}: each lcore once')
    return out


def log(msg: str):
    print(f'testbed: {msg}', file=sys.stderr, flush=True)


def sh(*args, ns: str | None = None, check: bool = True, timeout: float = 30,
       input: str | None = None) -> subprocess.CompletedProcess:
    cmd = (['ip', 'netns', 'exec', ns] if ns else []) + [str(a) for a in args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, input=input,
                       stdin=None if input is not None else subprocess.DEVNULL)
    if check and r.returncode != 0:
        raise TestbedError(f'{" ".join(cmd)}: exit {r.returncode}: {(r.stderr or r.stdout).strip()}')
    return r


def netns_exists(name: str) -> bool:
    return (Path('/var/run/netns') / name).exists()


def list_netns() -> list[str]:
    d = Path('/var/run/netns')
    return sorted(p.name for p in d.iterdir()) if d.is_dir() else []


def link_mac(name: str, ns: str | None = None) -> str:
    return json.loads(sh('ip', '-j', 'link', 'show', 'dev', name, ns=ns).stdout)[0]['address']


def check_environment(switch: Path):
    """Refuses clearly when not root or a tool or binary is missing."""
    if os.geteuid() != 0:
        raise TestbedError('needs root (network namespaces, veth pairs, nftables, DPDK): run it as root')
    for tool, pkg in (('ip', 'iproute2'), ('nft', 'nftables'), ('tc', 'iproute2'), ('ping', 'iputils-ping')):
        if not shutil.which(tool):
            raise TestbedError(f'{tool} not found: install Debian\'s {pkg} (scripts/setup.sh does)')
    if not (switch.is_file() and os.access(switch, os.X_OK)):
        raise TestbedError(f'{switch} not found or not executable: build it first (ninja -C build), '
                           'or give --build DIR')


def pct_rule(pct: float) -> str:
    """An nft expression true for pct% of packets (resolution 0.01%)."""
    return f'numgen random mod 10000 < {int(round(pct * 100))}'


@dataclass
class Impairments:
    loss: float = 0.0
    dup: float = 0.0
    reorder: float = 0.0
    reorder_rate: str = '20mbit'

    def __bool__(self):
        return bool(self.loss or self.dup or self.reorder)

    def describe(self) -> str:
        parts = [f'loss {self.loss}%' if self.loss else '', f'dup {self.dup}%' if self.dup else '',
                 f'reorder {self.reorder}% via {self.reorder_rate}' if self.reorder else '']
        return ', '.join(p for p in parts if p) or 'none'

    def chain(self, name: str, dev: str, hook: str = 'egress', *, loss: bool = True, reorder: bool = True,
              dup: bool = True) -> str:
        """An nft netdev chain on dev's hook with the chosen impairments: loss, the slow class,
        duplication (a copy `dup` makes re-enters the egress hook marked: passed untouched)."""
        rules = [f'meta mark {DUP_MARK:#x} accept'] if dup and self.dup else []
        if loss and self.loss:
            rules.append(f'ip protocol udp {pct_rule(self.loss)} counter drop')
        if reorder and self.reorder:
            rules.append(f'ip protocol udp {pct_rule(self.reorder)} meta priority set {SLOW_CLASS} counter')
        if dup and self.dup:
            rules.append(f'ip protocol udp {pct_rule(self.dup)} meta mark set {DUP_MARK:#x} counter dup to "{dev}"')
        if not rules:
            return ''
        body = '\n    '.join(rules)
        return (f'  chain {name} {{\n    type filter hook {hook} device "{dev}" priority 0; policy accept;\n'
                f'    {body}\n  }}\n')

    def qdisc(self, dev: str, mtu: int, ns: str | None):
        """htb on dev: class 1:10 (default) at 10gbit, 1:20 at reorder_rate with a one-frame
        bucket, so that frames sent to 1:20 while it is busy wait and are overtaken."""
        if not self.reorder:
            return
        burst = mtu + 100
        sh('tc', 'qdisc', 'replace', 'dev', dev, 'root', 'handle', '1:', 'htb', 'default', '10', ns=ns)
        sh('tc', 'class', 'add', 'dev', dev, 'parent', '1:', 'classid', '1:10', 'htb', 'rate', '10gbit',
           'quantum', '60000', ns=ns)
        sh('tc', 'class', 'add', 'dev', dev, 'parent', '1:', 'classid', SLOW_CLASS, 'htb', 'rate',
           self.reorder_rate, 'burst', burst, 'cburst', burst, 'quantum', burst, ns=ns)


@dataclass
class Rank:
    rank: int
    ns: str
    ip: str
    mac: str = ''
    switch: str = ''        # name of its switch ('switch', 'leaf', 'root')
    port: int = 0           # its port on that switch
    switch_ip: str = ''
    switch_mac: str = ''
    switch_ns: str = ''     # the namespace of its switch
    switch_if: str = ''     # the switch's end of the rank's veth, in switch_ns
    config: str = ''


@dataclass
class Switch:
    name: str
    id: int
    role: str
    config: Path
    prefix: str
    ns: str                 # the switch's network namespace: its interfaces, bridge, nft table
    ports: list = field(default_factory=list)   # [{id, iface, mac, ip, impaired}]
    pid: int = 0
    proc: subprocess.Popen | None = None


@dataclass
class RankRun:
    rank: int
    ns: str
    rc: int
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool = False


@dataclass
class SwitchExit:
    name: str
    rc: int
    stdout: str
    stderr: str


class Testbed:
    def __init__(self, ranks: int = 4, layout: str = 'direct', *, bridge: bool | None = None,
                 loss: float = 0, dup: float = 0, reorder: float = 0, reorder_rate: str = '20mbit',
                 mtu: int = 1500, job: int = 7, jobs: int = 1, settings: dict | None = None,
                 tb_id: str | None = None,
                 dir: Path | str | None = None, build: Path | str | None = None, lcore: int = 0,
                 ping: bool = True, lcores: str | None = None, tap: bool = False,
                 driver: str | None = None, offloads: bool = True):
        if layout not in LAYOUTS:
            raise TestbedError(f'layout {layout!r}: one of {", ".join(LAYOUTS)}')
        self.layout = layout
        self.bridge = layout == 'bridge' if bridge is None else bridge
        self.tree = layout == 'tree'
        if not 2 <= ranks <= 200 and not (ranks == 1 and not self.tree):
            raise TestbedError(f'--ranks {ranks}: 1..200 (2..200 with --tree)')
        self.R = ranks
        for what, v in (('loss', loss), ('dup', dup), ('reorder', reorder)):
            if not 0 <= v <= 100:
                raise TestbedError(f'--{what} {v}: a percentage, 0..100')
        self.imp = Impairments(float(loss), float(dup), float(reorder), reorder_rate)
        if not 576 <= mtu <= 9000:
            raise TestbedError(f'--mtu {mtu}: 576..9000')
        self.mtu = mtu
        if driver is not None and driver not in DRIVERS:
            raise TestbedError(f'--driver {driver!r}: one of {", ".join(DRIVERS)}')
        if driver == 'af_xdp' and mtu > AF_XDP_MAX_MTU:
            raise TestbedError(f'--driver af_xdp --mtu {mtu}: net_af_xdp takes an MTU up to {AF_XDP_MAX_MTU} '
                               '(a buffer is a page): lower --mtu or use --driver af_packet')
        # net_af_xdp sends straight to the driver (copy mode: no qdisc, no egress hook), so the
        # duplication and reordering of the switch's frames on the egress of its own interface (the
        # direct layout's) need net_af_packet with qdisc_bypass=0.
        egress_impaired = self.imp.dup or self.imp.reorder
        if driver == 'af_xdp' and egress_impaired and not self.bridge:
            raise TestbedError('--driver af_xdp with --dup or --reorder needs --bridge (net_af_xdp\'s frames pass '
                               'no qdisc or egress hook of its interface): add --bridge or use --driver af_packet')
        self.driver = driver or (DEFAULT_DRIVER if mtu <= AF_XDP_MAX_MTU and (self.bridge or not egress_impaired)
                                 else 'af_packet')
        self.offloads = offloads
        if not 1 <= jobs <= 16:
            raise TestbedError(f'--jobs {jobs}: 1..16')
        if not 0 <= job <= 0xFFFFFFFF - (jobs - 1):
            raise TestbedError(f'--job {job}: 0..2^32-1 (with --jobs {jobs}: up to {0xFFFFFFFF - (jobs - 1)})')
        self.job = job
        # (job id, the members' UDP port in it): job ID+i at port 20562+i, over the same ranks
        self.jobs = [(job + i, PRISM_UDP + i) for i in range(jobs)]
        self.settings = {'retention_ms': '5000'}
        self.settings.update(settings or {})
        if tb_id is not None and not re.fullmatch(r'[a-z0-9]{1,12}', tb_id):
            raise TestbedError(f'--id {tb_id!r}: 1 to 12 characters of [a-z0-9]')
        self.id = tb_id or self._free_id()
        self.dir = Path(dir) if dir else Path(f'/tmp/prism-tb{self.id}')
        self.build = Path(build) if build else Path(os.environ.get('PRISM_BUILD') or REPO / 'build')
        self.switch_bin = self.build / 'app' / 'prism-switch'
        self.lcore = lcore
        self.lcores = parse_lcores(lcores) if lcores else None
        self.tap = tap
        if tap and (not self.bridge or self.tree):
            raise TestbedError('--tap: only with --bridge (one switch port, a tap on the bridge), not --tree')
        self.ping = ping
        self.ranks: list[Rank] = []
        self.switches: list[Switch] = []
        # Everything made, in order, for teardown (and the state file).
        self.made: list[list] = []
        self._up = False

    # ------------------------------------------------------------ names
    @staticmethod
    def _free_id() -> str:
        for _ in range(100):
            i = secrets.token_hex(2)
            if not any(n.startswith(f'prism-tb{i}-') for n in list_netns()) and not Path(f'/tmp/prism-tb{i}').exists():
                return i
        raise TestbedError('no free testbed id found')

    def ns_name(self, k: int) -> str:
        return f'prism-tb{self.id}-r{k}'

    def switch_ns(self, name: str) -> str:
        return f'prism-tb{self.id}-{name}'

    @property
    def nft_table(self) -> str:
        return f'prism_tb{self.id}'

    # ------------------------------------------------------------ building
    def _record(self, kind: str, *args):
        self.made.append([kind, *args])
        self._save()

    def _save(self):
        if not self.dir.is_dir():
            return
        state = {'id': self.id, 'dir': str(self.dir), 'layout': self.layout, 'bridge': self.bridge,
                 'driver': self.driver,
                 'jobs': [{'id': j, 'udp_port': u} for j, u in self.jobs], 'made': self.made,
                 'switches': [{'name': s.name, 'pid': s.pid, 'prefix': s.prefix, 'config': str(s.config),
                               'ns': s.ns} for s in self.switches],
                 'ranks': [r.__dict__ for r in self.ranks]}
        tmp = self.dir / (STATE + '.tmp')
        tmp.write_text(json.dumps(state, indent=1) + '\n')
        tmp.replace(self.dir / STATE)

    def _in_use(self) -> str | None:
        mine = [n for n in list_netns() if n.startswith(f'prism-tb{self.id}-')]
        if mine:
            return f'namespace {mine[0]} exists'
        if (self.dir / STATE).exists():
            return f'{self.dir / STATE} exists'
        return None

    def up(self):
        """Builds the testbed and starts the switch(es); on any failure removes what it made."""
        check_environment(self.switch_bin)
        busy = self._in_use()
        if busy:
            raise TestbedError(f'testbed id {self.id} is in use ({busy}): '
                               f'`scripts/testbed.sh down --id {self.id}`, or choose another --id')
        made_dir = not self.dir.exists()
        self.dir.mkdir(parents=True, exist_ok=True)
        if made_dir:
            self._record('dir', str(self.dir))
        self._up = True
        try:
            self._plan()
            self._make_links()
            self._impair()
            self._write_configs()
            self._start_switches()
            if self.ping:
                self.check_arp()
        except BaseException:
            self.down()
            raise
        return self

    def _plan(self):
        """Which rank sits on which switch and port, with which addresses."""
        groups = {}
        if self.tree:
            half = self.R // 2
            groups['leaf'] = list(range(half))
            groups['root'] = list(range(half, self.R))
        else:
            groups['switch'] = list(range(self.R))
        for si, (name, members) in enumerate(groups.items()):
            sw_id = 2 if name == 'leaf' else 1
            role = 'leaf' if name == 'leaf' else 'root'
            sw = Switch(name, sw_id, role, self.dir / f'{name}.yaml', f'prism-tb{self.id}-{name}',
                        self.switch_ns(name))
            if self.bridge:
                net = 1 if name == 'leaf' else 0
                sw.ports.append({'id': 0, 'iface': 'sw0', 'mac': f'02:50:54:{net:02x}:00:00',
                                 'ip': f'10.88.{net}.254', 'bridge': 'br0', 'bridge_port': 'br0sw',
                                 'tap': self.tap})
                for i, k in enumerate(members):
                    self.ranks.append(Rank(k, self.ns_name(k), f'10.88.{net}.{i + 1}', switch=name, port=0,
                                           switch_ip=f'10.88.{net}.254', switch_mac=sw.ports[0]['mac'],
                                           switch_ns=sw.ns, switch_if=f'r{k}', config=str(sw.config)))
            else:
                for p, k in enumerate(members):
                    mac = f'02:50:54:{si:02x}:{p >> 8:02x}:{p & 0xff:02x}'
                    sw.ports.append({'id': p, 'iface': f'r{k}', 'mac': mac, 'ip': f'10.88.{k}.254'})
                    self.ranks.append(Rank(k, self.ns_name(k), f'10.88.{k}.1', switch=name, port=p,
                                           switch_ip=f'10.88.{k}.254', switch_mac=mac, switch_ns=sw.ns,
                                           switch_if=f'r{k}', config=str(sw.config)))
            self.switches.append(sw)
        self.ranks.sort(key=lambda r: r.rank)
        if self.tree:
            leaf, root = self.switches
            leaf.ports.append({'id': len(leaf.ports), 'iface': 'up0', 'mac': '02:50:54:fe:00:02',
                               'ip': '10.89.0.2', 'uplink': True})
            root.ports.append({'id': len(root.ports), 'iface': 'down0', 'mac': '02:50:54:fe:00:01',
                               'ip': '10.89.0.1', 'downlink': True})

    def _netns(self, name: str):
        self._record('netns', name)   # first: an interrupt right after `add` leaves nothing behind
        sh('ip', 'netns', 'add', name)
        for k in ('all', 'default'):   # no IPv6: no router solicitations or MLD reaching the switch
            sh('sysctl', '-qw', f'net.ipv6.conf.{k}.disable_ipv6=1', ns=name, check=False)
        sh('ip', 'link', 'set', 'lo', 'up', ns=name)

    def _veth(self, ns_a: str, a: str, ns_b: str, b: str):
        # One queue: DPDK 22.11's net_af_xdp counts a device's combined channels, of which a veth
        # reports none, and binds queue 0 only; a frame on another queue would pass XDP to the stack.
        sh('ip', '-n', ns_a, 'link', 'add', a, 'mtu', self.mtu, 'type', 'veth', 'peer', 'name', b,
           'netns', ns_b, 'mtu', self.mtu)

    def _make_links(self):
        for sw in self.switches:
            self._netns(sw.ns)
            # A bridge that only forwards frames: with br_netfilter loaded, a bridge hands IPv4
            # to iptables, which drops a bad IP checksum or length before the switch could count it.
            for k in ('iptables', 'ip6tables', 'arptables'):
                sh('sysctl', '-qw', f'net.bridge.bridge-nf-call-{k}=0', ns=sw.ns, check=False)
        for r in self.ranks:
            self._netns(r.ns)
        for sw in self.switches:
            for p in sw.ports:
                if 'bridge' in p:
                    # No STP, no multicast snooping (its IGMP reports would reach the switch).
                    sh('ip', '-n', sw.ns, 'link', 'add', 'name', p['bridge'], 'mtu', self.mtu, 'type', 'bridge',
                       'stp_state', '0', 'forward_delay', '0', 'mcast_snooping', '0')
                    if not p.get('tap'):   # a tap is made by the switch, and joins the bridge then
                        self._veth(sw.ns, p['iface'], sw.ns, p['bridge_port'])
                        sh('ip', '-n', sw.ns, 'link', 'set', p['bridge_port'], 'master', p['bridge'], 'up')
                    sh('ip', '-n', sw.ns, 'link', 'set', p['bridge'], 'up')
        if self.tree:
            leaf, root = self.switches
            self._veth(leaf.ns, 'up0', root.ns, 'down0')
        for r in self.ranks:
            self._veth(r.switch_ns, r.switch_if, r.ns, NS_IF)
            sh('ip', '-n', r.ns, 'addr', 'add', f'{r.ip}/24', 'dev', NS_IF)
            sh('ip', '-n', r.ns, 'link', 'set', NS_IF, 'up')
            r.mac = link_mac(NS_IF, r.ns)
            if self.bridge:
                sh('ip', '-n', r.switch_ns, 'link', 'set', r.switch_if, 'master', 'br0')
            sh('ip', '-n', r.switch_ns, 'link', 'set', r.switch_if, 'up')
        for sw in self.switches:
            for p in sw.ports:
                if not p.get('tap'):
                    sh('ip', '-n', sw.ns, 'link', 'set', p['iface'], 'up')
        self._set_offloads()
        self._save()

    def _set_offloads(self):
        """net_af_packet takes what the kernel hands it, a GSO super-packet whole (cut to its ring
        frame): every rank's interface segments UDP GSO sends itself, and the switch's interfaces do
        no GRO. net_af_xdp needs nothing: a veth whose peer runs XDP drops GSO from its features,
        so the kernel segments before the frame crosses."""
        if not self.offloads or self.driver != 'af_packet':
            return
        if not shutil.which('ethtool'):
            raise TestbedError('ethtool not found: install Debian\'s ethtool (scripts/setup.sh does), '
                               'or pass --no-offloads')
        for r in self.ranks:
            sh('ethtool', '-K', NS_IF, 'tx-udp-segmentation', 'off', ns=r.ns)
        for sw in self.switches:
            for p in sw.ports:
                if not p.get('tap'):
                    sh('ethtool', '-K', p['iface'], 'gro', 'off', ns=sw.ns, check=False)

    def _impair(self):
        """Towards the switch, everything on the egress hook (and qdisc) of the rank's own
        interface. From the switch, loss on that interface's ingress hook (a frame the switch's
        net_af_packet socket sends and the egress hook drops is not lost: the kernel leaves it in
        the TX ring and sends it again), duplication and the slow class on the egress hook (and
        qdisc) of the switch side of the rank's veth."""
        if not self.imp:
            return
        for r in self.ranks:
            rules = self.imp.chain('to_switch', NS_IF) + self.imp.chain('from_switch', NS_IF, 'ingress',
                                                                          reorder=False, dup=False)
            sh('nft', '-f', '-', ns=r.ns, input=f'table netdev {self.nft_table} {{\n{rules}}}\n')
            self.imp.qdisc(NS_IF, self.mtu, r.ns)
        for sw in self.switches:
            chains = ''.join(self.imp.chain(f'from_switch_r{r.rank}', r.switch_if, loss=False)
                             for r in self.ranks if r.switch == sw.name)
            if chains:
                sh('nft', '-f', '-', ns=sw.ns, input=f'table netdev {self.nft_table} {{\n{chains}}}\n')
        for r in self.ranks:
            self.imp.qdisc(r.switch_if, self.mtu, r.switch_ns)
        if not self.bridge and (self.imp.dup or self.imp.reorder):
            # The switch's frames must pass the egress hook and the qdisc of its own interface.
            for sw in self.switches:
                for p in sw.ports:
                    if not p.get('uplink') and not p.get('downlink'):
                        p['impaired'] = True

    def _device(self, p: dict, index: int) -> str:
        if p.get('tap'):
            return f'net_tap{index},iface={p["iface"]}'
        if self.driver == 'af_xdp':
            return f'net_af_xdp{index},iface={p["iface"]}'
        dev = f'net_af_packet{index},iface={p["iface"]}'
        if self.mtu > 1500:   # net_af_packet's default 2048-byte frames hold a 1500-byte MTU, no more
            dev += ',blocksz=36864,framesz=9216'
        if p.get('impaired'):
            dev += ',qdisc_bypass=0'
        return dev

    def _write_configs(self):
        by_name = {s.name: s for s in self.switches}
        for sw in self.switches:
            lines = []
            if sw.role == 'leaf':
                up = next(p for p in sw.ports if p.get('uplink'))
                down = next(p for p in by_name['root'].ports if p.get('downlink'))
                lines.append(f'switch: {{id: {sw.id}, role: leaf, parent: {{port: {up["id"]}, mac: "{down["mac"]}", '
                             f'ip: {down["ip"]}}}}}')
            else:
                lines.append(f'switch: {{id: {sw.id}, role: root}}')
            lines.append('ports:')
            for i, p in enumerate(sw.ports):
                lines.append(f'  - {{id: {p["id"]}, device: "{self._device(p, i)}", mac: "{p["mac"]}", ip: {p["ip"]}}}')
            lines.append('jobs:')
            for job, udp_port in self.jobs:
                lines += [f'  - id: {job}', f'    group: {self.R}', '    members:']
                for r in self.ranks:
                    if r.switch == sw.name:
                        lines.append(f'      - {{rank: {r.rank}, port: {r.port}, mac: "{r.mac}", ip: {r.ip}, '
                                     f'udp_port: {udp_port}}}')
                if self.tree and sw.role == 'root':
                    up = next(p for p in by_name['leaf'].ports if p.get('uplink'))
                    down = next(p for p in sw.ports if p.get('downlink'))
                    n = sum(1 for r in self.ranks if r.switch == 'leaf')
                    lines += ['    children:', f'      - {{id: {by_name["leaf"].id}, port: {down["id"]}, '
                              f'mac: "{up["mac"]}", ip: {up["ip"]}, ranks: {n}}}']
            if self.lcores and 'lcores' not in self.settings:
                lines.append(f'lcores: [{", ".join(str(c) for c in self.lcores)}]')
            for k, v in self.settings.items():
                lines.append(f'{k}: {v}')
            sw.config.write_text('# written by scripts/testbed.py\n' + '\n'.join(lines) + '\n')

    def switch_cmd(self, sw: Switch) -> list[str]:
        return [str(self.switch_bin), '--no-huge', '-m', '512', '--no-pci', '--file-prefix', sw.prefix,
                '-l', ','.join(str(c) for c in self.lcores) if self.lcores else str(self.lcore),
                '--log-level=lib.eal:error', '--log-level=pmd.net.af_packet:error', '--log-level=pmd.net.tap:error',
                '--log-level=pmd.net.af_xdp:error',
                '--', '--config', str(sw.config)]

    def telemetry_socket(self, sw: Switch) -> Path:
        return DPDK_RUN_DIR / sw.prefix / 'dpdk_telemetry.v2'

    def _start_switches(self, names: list[str] | None = None):
        # The root first: a leaf's partials need their parent.
        for sw in sorted(self.switches, key=lambda s: s.role != 'root'):
            if names is not None and sw.name not in names:
                continue
            if (DPDK_RUN_DIR / sw.prefix).exists():
                shutil.rmtree(DPDK_RUN_DIR / sw.prefix, ignore_errors=True)
            out = open(self.dir / f'{sw.name}.out', 'w')
            err = open(self.dir / f'{sw.name}.err', 'w')
            self._record('dpdk', sw.prefix)
            # Its own session: a terminal's Ctrl-C reaches this script, which stops the switch itself.
            sw.proc = subprocess.Popen(['ip', 'netns', 'exec', sw.ns] + self.switch_cmd(sw), stdout=out,
                                       stderr=err, stdin=subprocess.DEVNULL, start_new_session=True)
            out.close()
            err.close()
            sw.pid = sw.proc.pid
            self._record('switch', sw.name, sw.pid, sw.prefix)
            # Up when its telemetry socket answers /prism/ports (registered once the ports started).
            end = time.monotonic() + 30
            while not self._ports_started(sw):
                if sw.proc.poll() is not None or time.monotonic() > end:
                    why = f'exited with status {sw.proc.returncode}' if sw.proc.poll() is not None \
                        else 'its telemetry socket did not answer /prism/ports within 30 s'
                    raise TestbedError(f'prism-switch ({sw.name}) did not start: {why}\n'
                                       + (self.dir / f'{sw.name}.err').read_text()[-3000:]
                                       + (self.dir / f'{sw.name}.out').read_text()[-2000:])
                time.sleep(0.05)
            for p in sw.ports:   # the switch's tap, now that it exists, joins the bridge
                if p.get('tap'):
                    sh('ip', '-n', sw.ns, 'link', 'set', p['iface'], 'mtu', self.mtu, 'master', p['bridge'], 'up')

    def _ports_started(self, sw: Switch) -> bool:
        if not self.telemetry_socket(sw).exists():
            return False
        try:
            return self.telemetry(sw, ['/prism/ports'], timeout=2).get('/prism/ports') is not None
        except (OSError, ValueError):
            return False

    def check_arp(self, timeout: float = 10):
        """Every rank pings its switch port (no static neighbour entry: the kernel resolves it by
        ARP and the switch answers), then its neighbour table must hold the port's MAC."""
        def one(r: Rank):
            end = time.monotonic() + timeout
            while True:
                p = sh('ping', '-c', '1', '-W', '1', r.switch_ip, ns=r.ns, check=False)
                if p.returncode == 0:
                    break
                if time.monotonic() > end:
                    raise TestbedError(f'rank {r.rank} ({r.ns}) cannot ping its switch {r.switch_ip}: '
                                       f'{p.stdout.strip()} {p.stderr.strip()}')
            n = sh('ip', 'neigh', 'show', r.switch_ip, 'dev', NS_IF, ns=r.ns).stdout
            if f'lladdr {r.switch_mac}' not in n or 'PERMANENT' in n:
                raise TestbedError(f'rank {r.rank}: neighbour entry for {r.switch_ip} is {n.strip()!r}, '
                                   f'expected {r.switch_mac} learnt by ARP')
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(16, len(self.ranks))) as ex:
            list(ex.map(one, self.ranks))

    # ------------------------------------------------------------ using it
    def substitute(self, arg: str, r: Rank) -> str:
        for k, v in (('{rank}', r.rank), ('{ranks}', self.R), ('{config}', r.config), ('{ns}', r.ns),
                     ('{ip}', r.ip), ('{switch_ip}', r.switch_ip), ('{dir}', self.dir)):
            arg = arg.replace(k, str(v))
        return arg

    def run(self, command: list[str], timeout: float = 300, ranks: list[int] | None = None,
            label: str = '') -> list[RankRun]:
        """Runs command (placeholders substituted) in every rank's namespace at once; returns
        each rank's exit status and output once all have finished (or were killed at timeout).
        Outputs go to DIR/rank<k>.out and .err, or DIR/rank<k>-<label>.out and .err: runs at the
        same time (e.g. two jobs on the same ranks, from two threads) need labels of their own."""
        if label and not re.fullmatch(r'[A-Za-z0-9_.]+', label):
            raise TestbedError(f'label {label!r}: letters, digits, _ and . only')
        suffix = f'-{label}' if label else ''

        if not self._up:
            raise TestbedError('the testbed is not up')
        chosen = [r for r in self.ranks if ranks is None or r.rank in ranks]
        procs = []
        t0 = time.monotonic()
        for r in chosen:
            argv = ['ip', 'netns', 'exec', r.ns] + [self.substitute(a, r) for a in command]
            out = open(self.dir / f'rank{r.rank}{suffix}.out', 'w')
            err = open(self.dir / f'rank{r.rank}{suffix}.err', 'w')
            procs.append((r, subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                              start_new_session=True)))
            out.close()
            err.close()
        ended: dict[int, float] = {}
        timed_out: set[int] = set()
        try:
            while len(ended) < len(procs):
                now = time.monotonic()
                for r, p in procs:
                    if r.rank in ended:
                        continue
                    if p.poll() is not None:
                        ended[r.rank] = now - t0
                    elif now - t0 > timeout:
                        self._kill_group(p)
                        timed_out.add(r.rank)
                        ended[r.rank] = now - t0
                time.sleep(0.01)
        finally:
            for _, p in procs:
                if p.poll() is None:
                    self._kill_group(p)
        return [RankRun(r.rank, r.ns, 124 if r.rank in timed_out else p.returncode,
                        (self.dir / f'rank{r.rank}{suffix}.out').read_text(errors='replace'),
                        (self.dir / f'rank{r.rank}{suffix}.err').read_text(errors='replace'),
                        ended[r.rank], r.rank in timed_out) for r, p in procs]

    @staticmethod
    def _kill_group(p: subprocess.Popen):
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                return
            try:
                p.wait(timeout=3)
                return
            except subprocess.TimeoutExpired:
                continue

    def telemetry(self, sw: Switch | str, commands: list[str], timeout: float = 5) -> dict:
        """DPDK telemetry v2 (what dpdk-telemetry.py speaks) against a running switch."""
        if isinstance(sw, str):
            sw = next(s for s in self.switches if s.name == sw)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.settimeout(timeout)
        s.connect(str(self.telemetry_socket(sw)))
        try:
            hello = json.loads(s.recv(1 << 16).decode())
            size = int(hello.get('max_output_len', 16384))
            out = {}
            for c in commands:
                s.send(c.encode())
                out.update(json.loads(s.recv(size).decode()))
            return out
        finally:
            s.close()

    def kill_switch(self, name: str):
        """SIGKILL to the switch `name` (no summary, nothing cleaned up: a crash); start_switch(name)
        starts it again with the same configuration."""
        sw = next(s for s in self.switches if s.name == name)
        if sw.pid and is_our_switch(sw.pid, sw.prefix):
            os.kill(sw.pid, signal.SIGKILL)
        if sw.proc:
            sw.proc.wait(timeout=20)
        sw.pid = 0
        sw.proc = None

    def start_switch(self, name: str):
        """Starts the switch `name` (stopped or killed before) and waits until its ports are up."""
        self._start_switches([name])

    def stop_switches(self, timeout: float = 20) -> dict[str, SwitchExit]:
        """SIGINT to every switch (leaf first); returns their exits with stdout (the summary)."""
        exits = {}
        for sw in sorted(self.switches, key=lambda s: s.role == 'root'):
            rc = stop_pid(sw.pid, sw.prefix, sw.proc, timeout)
            exits[sw.name] = SwitchExit(sw.name, rc,
                                        (self.dir / f'{sw.name}.out').read_text(errors='replace')
                                        if (self.dir / f'{sw.name}.out').exists() else '',
                                        (self.dir / f'{sw.name}.err').read_text(errors='replace')
                                        if (self.dir / f'{sw.name}.err').exists() else '')
            sw.pid = 0
            sw.proc = None
        return exits

    # ------------------------------------------------------------ teardown
    def down(self):
        """Removes everything made, newest first; errors are logged, not raised. SIGINT, SIGTERM
        and SIGHUP wait until it is done (a Ctrl-C in the middle would leave half a testbed)."""
        self._up = False
        try:
            old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
        except (ValueError, OSError):
            old = None
        try:
            teardown(self.made, self.switches)
            self.made = []
            (self.dir / STATE).unlink(missing_ok=True)
        finally:
            if old is not None:
                signal.pthread_sigmask(signal.SIG_SETMASK, old)   # a signal that came meanwhile acts now

    def __enter__(self):
        return self.up()

    def __exit__(self, *exc):
        self.down()
        return False


def is_our_switch(pid: int, prefix: str) -> bool:
    """pid runs prism-switch with our --file-prefix (never signal a pid that was reused)."""
    try:
        cmd = Path(f'/proc/{pid}/cmdline').read_bytes().split(b'\0')
    except OSError:
        return False
    want = prefix.encode()
    return any(a == b'--file-prefix' and b == want for a, b in zip(cmd, cmd[1:]))


def stop_pid(pid: int, prefix: str, proc: subprocess.Popen | None, timeout: float = 20) -> int:
    """SIGINT (the switch prints its summary and exits), SIGKILL after timeout. Returns the exit
    status when the switch is our child, else 0 (-1 when there was nothing to stop)."""
    if not pid:
        return proc.returncode if proc and proc.returncode is not None else -1
    if proc is not None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                log(f'prism-switch {pid} did not stop within {timeout} s of SIGINT: killing it')
                proc.kill()
                proc.wait()
        return proc.returncode
    # A switch another invocation started (down): ours only if its command line has our prefix.
    if not is_our_switch(pid, prefix):
        return -1
    os.kill(pid, signal.SIGINT)
    end = time.monotonic() + timeout
    while is_our_switch(pid, prefix) and time.monotonic() < end:
        time.sleep(0.05)
    if is_our_switch(pid, prefix):
        log(f'prism-switch {pid} did not stop within {timeout} s of SIGINT: killing it')
        os.kill(pid, signal.SIGKILL)
    return 0


def _kill_ns_pids(ns: str):
    """Processes still running in one of our namespaces (a rank's command left behind)."""
    r = sh('ip', 'netns', 'pids', ns, check=False)
    for pid in r.stdout.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


def teardown(made: list, switches: list | None = None):
    """Undoes the `made` records newest first (switches stopped before their namespaces go)."""
    errors = []
    interrupted: BaseException | None = None
    live = {s.pid: s for s in (switches or []) if s.pid}

    def undo(rec: list):
        kind = rec[0]
        if kind == 'switch':
            _, name, pid, prefix = rec
            sw = live.get(pid)
            stop_pid(pid, prefix, sw.proc if sw else None, 20)
            if sw:
                sw.pid, sw.proc = 0, None
        elif kind == 'dpdk':   # any switch still running with this prefix (started, not yet recorded)
            for proc in Path('/proc').iterdir():
                if proc.name.isdigit() and is_our_switch(int(proc.name), rec[1]):
                    stop_pid(int(proc.name), rec[1], None, 20)
            shutil.rmtree(DPDK_RUN_DIR / rec[1], ignore_errors=True)
        elif kind == 'netns':
            if netns_exists(rec[1]):
                _kill_ns_pids(rec[1])
                sh('ip', 'netns', 'del', rec[1])
        # 'dir': the caller decides (see main: --keep-dir)

    for rec in reversed(made):
        for attempt in (1, 2):
            try:
                undo(rec)
                break
            except Exception as e:   # noqa: BLE001 - keep removing the rest
                errors.append(f'{rec}: {e}')
                break
            except BaseException as e:   # an interrupt that got through: finish first, then raise it
                interrupted = interrupted or e
                if attempt == 2:
                    errors.append(f'{rec}: interrupted twice ({type(e).__name__})')
    for e in errors:
        log(f'teardown: {e}')
    if interrupted is not None:
        raise interrupted


# ---------------------------------------------------------------- capture
PCAP_HDR = struct.pack('<IHHiIII', 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)
PACKET_OUTGOING = 4


def capture(iface: str, out: Path, direction: str = 'both', seconds: float = 0):
    """Writes what iface sees to a classic pcap (Ethernet), until SIGINT/SIGTERM or `seconds`.
    direction: 'in' (frames the interface received), 'out' (sent), 'both'."""
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    s.bind((iface, 0))
    s.settimeout(0.2)
    stop = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.append(1))
    end = time.monotonic() + seconds if seconds else None
    with open(out, 'wb') as f:
        f.write(PCAP_HDR)
        f.flush()
        print('capturing', flush=True)
        while not stop and (end is None or time.monotonic() < end):
            try:
                data, addr = s.recvfrom(65535)
            except socket.timeout:
                continue
            except InterruptedError:
                continue
            outgoing = addr[2] == PACKET_OUTGOING
            if (direction == 'in' and outgoing) or (direction == 'out' and not outgoing):
                continue
            t = time.time()
            f.write(struct.pack('<IIII', int(t), int((t % 1) * 1e6), len(data), len(data)) + data)
    s.close()


class Capture:
    """tb-side handle: `python3 testbed.py capture` in a namespace (or the root one)."""

    def __init__(self, iface: str, out: Path, ns: str | None = None, direction: str = 'both'):
        self.out = Path(out)
        cmd = (['ip', 'netns', 'exec', ns] if ns else []) + [
            sys.executable, str(Path(__file__).resolve()), 'capture', '--iface', iface, '--out', str(out),
            '--direction', direction]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        line = self.proc.stdout.readline()
        if 'capturing' not in line:
            self.proc.kill()
            raise TestbedError(f'capture on {iface} did not start: {line}{self.proc.stderr.read()}')

    def stop(self) -> Path:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.out


def read_pcap(path: Path) -> list[bytes]:
    data = Path(path).read_bytes()
    frames, off = [], 24
    while off + 16 <= len(data):
        incl = struct.unpack('<IIII', data[off:off + 16])[2]
        off += 16
        frames.append(data[off:off + incl])
        off += incl
    return frames


# ---------------------------------------------------------------- CLI
def load_state(tb_id: str | None, d: str | None) -> dict:
    path = Path(d) / STATE if d else Path(f'/tmp/prism-tb{tb_id}') / STATE
    if not path.exists():
        raise TestbedError(f'no testbed state at {path}: nothing to tear down there')
    return json.loads(path.read_text())


def cmd_down(args) -> int:
    if os.geteuid() != 0:
        raise TestbedError('needs root: run it as root')
    st = load_state(args.id, args.dir)
    teardown(st['made'])
    for s in st['switches']:
        out = Path(st['dir']) / f'{s["name"]}.out'
        if out.exists():
            log(f'{s["name"]}: summary in {out}')
    (Path(st['dir']) / STATE).unlink(missing_ok=True)
    log(f'testbed {st["id"]} is down')
    return 0


def parse_args(argv: list[str]):
    if '--' in argv:
        i = argv.index('--')
        argv, command = argv[:i], argv[i + 1:]
    else:
        command = None
    p = argparse.ArgumentParser(prog='scripts/testbed.sh', add_help=False, allow_abbrev=False)
    p.add_argument('action', nargs='?', choices=['up', 'down', 'capture'])
    p.add_argument('-h', '--help', action='store_true')
    p.add_argument('--ranks', type=int, default=4)
    p.add_argument('--bridge', action='store_true')
    p.add_argument('--tree', action='store_true')
    p.add_argument('--loss', type=float, default=0)
    p.add_argument('--dup', type=float, default=0)
    p.add_argument('--reorder', type=float, nargs='?', const=25.0, default=0)
    p.add_argument('--reorder-rate', default='20mbit')
    p.add_argument('--mtu', type=int, default=1500)
    p.add_argument('--job', type=int, default=7)
    p.add_argument('--jobs', type=int, default=1)
    p.add_argument('--set', action='append', default=[], metavar='KEY=VALUE')
    p.add_argument('--id')
    p.add_argument('--dir')
    p.add_argument('--build')
    p.add_argument('--lcore', type=int, default=0)
    p.add_argument('--lcores')
    p.add_argument('--tap', action='store_true')
    p.add_argument('--driver', choices=DRIVERS)
    p.add_argument('--no-offloads', action='store_true')
    p.add_argument('--timeout', type=float, default=300)
    p.add_argument('--no-ping', action='store_true')
    p.add_argument('--keep-dir', action='store_true')
    p.add_argument('--json')
    p.add_argument('-q', '--quiet', action='store_true')
    # capture
    p.add_argument('--iface')
    p.add_argument('--out')
    p.add_argument('--ns')
    p.add_argument('--direction', choices=['in', 'out', 'both'], default='both')
    p.add_argument('--seconds', type=float, default=0)
    p.error = lambda msg: (_ for _ in ()).throw(TestbedError(f'{msg} (see --help)'))  # type: ignore[method-assign]
    a = p.parse_args(argv)
    a.command = command
    return a


def main(argv: list[str]) -> int:
    try:
        args = parse_args(argv)
    except TestbedError as e:
        log(str(e))
        return 2
    if args.help:
        print(HELP, end='')
        return 0
    if args.action == 'capture':
        if not args.iface or not args.out:
            log('capture needs --iface and --out')
            return 2
        if args.ns:
            return subprocess.call(['ip', 'netns', 'exec', args.ns, sys.executable, __file__, 'capture',
                                    '--iface', args.iface, '--out', args.out, '--direction', args.direction,
                                    '--seconds', str(args.seconds)])
        capture(args.iface, Path(args.out), args.direction, args.seconds)
        return 0
    if args.action == 'down':
        if not args.id and not args.dir:
            log('down needs --id ID or --dir DIR')
            return 2
        try:
            return cmd_down(args)
        except TestbedError as e:
            log(str(e))
            return 2
    if args.action is None and not args.command:
        log('nothing to do: give `up`, `down`, or a command after -- (see --help)')
        return 2
    if args.action == 'up' and args.command:
        log('`up` takes no command (run one with `ip netns exec prism-tb<ID>-r<k> ...`)')
        return 2
    settings = {}
    for kv in args.set:
        k, sep, v = kv.partition('=')
        if not sep or not re.fullmatch(r'[a-z_]+', k):
            log(f'--set {kv!r}: write KEY=VALUE (a top-level key of the switch YAML)')
            return 2
        settings[k] = v
    layout = 'tree' if args.tree else 'bridge' if args.bridge else 'direct'

    # SIGTERM and SIGHUP end the run the way Ctrl-C does: through the finally below.
    def on_signal(signum, _frame):
        raise KeyboardInterrupt(f'signal {signum}')
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)

    tb = None
    failed = True
    try:
        tb = Testbed(args.ranks, layout, bridge=args.bridge, loss=args.loss, dup=args.dup, reorder=args.reorder,
                     reorder_rate=args.reorder_rate, mtu=args.mtu, job=args.job, jobs=args.jobs, settings=settings, tb_id=args.id,
                     dir=args.dir, build=args.build, lcore=args.lcore, ping=not args.no_ping,
                     lcores=args.lcores, tap=args.tap, driver=args.driver, offloads=not args.no_offloads)
        t0 = time.monotonic()
        tb.up()
        if not args.quiet:
            log(f'up in {time.monotonic() - t0:.1f} s: id {tb.id}, {tb.R} ranks, '
                f'job{"s" if len(tb.jobs) > 1 else ""} {", ".join(str(j) for j, _ in tb.jobs)}, layout {layout}'
                f'{" with bridges" if tb.tree and tb.bridge else ""}, impairments {tb.imp.describe()}, '
                f'MTU {tb.mtu}, driver {tb.driver}, dir {tb.dir}')
        if args.action == 'up':
            for r in tb.ranks:
                print(f'rank {r.rank}: ns {r.ns}, {r.ip} ({r.mac}), switch {r.switch} {r.switch_ip}, '
                      f'config {r.config}')
            for sw in tb.switches:
                print(f'switch {sw.name}: pid {sw.pid}, config {sw.config}, file prefix {sw.prefix}, '
                      f'output {tb.dir / (sw.name + ".out")}')
            for j, u in tb.jobs:
                print(f'job {j}: ranks 0..{tb.R - 1}, each at UDP port {u}')
            print(f'down: scripts/testbed.sh down --id {tb.id}' +
                  (f' (or --dir {tb.dir})' if args.dir else ''))
            failed = False
            tb = None     # leave it up
            return 0
        runs = tb.run(args.command, timeout=args.timeout)
        exits = tb.stop_switches()
        bad = [r for r in runs if r.rc != 0] + [e for e in exits.values() if e.rc != 0]
        failed = bool(bad)
        for r in runs:
            if args.quiet and r.rc == 0:
                continue
            print(f'--- rank {r.rank} ({r.ns}): exit {r.rc}{" (timed out)" if r.timed_out else ""}, '
                  f'{r.seconds:.2f} s')
            for ln in (r.stdout + r.stderr).splitlines():
                print(f'[r{r.rank}] {ln}')
        for e in exits.values():
            if args.quiet and e.rc == 0:
                continue
            print(f'--- switch {e.name}: exit {e.rc}')
            print(e.stdout, end='')
            if e.rc != 0:
                print(e.stderr[-3000:], end='')
        if args.json:
            Path(args.json).write_text(json.dumps({
                'id': tb.id, 'layout': layout, 'ranks': [r.__dict__ for r in runs],
                'switches': {k: v.__dict__ for k, v in exits.items()}}, indent=1) + '\n')
        ok = sum(1 for r in runs if r.rc == 0)
        print(f'testbed: {ok} of {len(runs)} ranks exited 0; switch exit '
              + ', '.join(f'{e.name} {e.rc}' for e in exits.values()))
        if any(r.timed_out for r in runs):
            return 124
        return 1 if failed else 0
    except TestbedError as e:
        log(str(e))
        return 2
    except KeyboardInterrupt as e:
        log(f'interrupted ({e.args[0] if e.args else "Ctrl-C"}): tearing down')
        return 130
    finally:
        if tb is not None:
            signal.signal(signal.SIGINT, signal.SIG_IGN)   # let teardown finish
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            tb.down()
            if tb.dir.is_dir():
                kept = failed and any(tb.dir.iterdir())
                if kept:
                    log(f'outputs kept in {tb.dir}')
                elif not args.keep_dir and not args.dir:
                    shutil.rmtree(tb.dir, ignore_errors=True)


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
