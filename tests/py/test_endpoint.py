"""The switch as a real endpoint on a Linux interface: a kernel host in its own
network namespace, joined to prism-switch (net_af_packet) by a veth pair,
resolves the switch's address by ARP and pings it, with no static neighbour
entry; after a neighbour flush it resolves it again. Needs root (namespaces);
skips without it."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

import switch_util as su

PORT_MAC, PORT_IP, HOST_IP = '02:00:00:00:ee:01', '10.77.0.254', '10.77.0.1'


def sh(*args, check=True, ns: str | None = None) -> subprocess.CompletedProcess:
    cmd = (['ip', 'netns', 'exec', ns] if ns else []) + [str(a) for a in args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    if check and r.returncode != 0:
        raise AssertionError(f'{" ".join(cmd)}: exit {r.returncode}: {r.stdout}{r.stderr}')
    return r


class Host:
    """A network namespace with one end of a veth pair (addressed), the other end left in the
    root namespace for the switch."""

    def __init__(self, tag: str):
        self.ns, self.sw_if, self.host_if = f'prism-ep{tag}', f'pe{tag}s', f'pe{tag}h'
        r = sh('ip', 'netns', 'add', self.ns, check=False)
        if r.returncode != 0:
            pytest.skip(f'cannot create a network namespace: {r.stderr.strip()}')
        try:
            sh('ip', 'link', 'add', self.sw_if, 'type', 'veth', 'peer', 'name', self.host_if)
            sh('ip', 'link', 'set', self.host_if, 'netns', self.ns)
            sh('sysctl', '-qw', f'net.ipv6.conf.{self.sw_if}.disable_ipv6=1', check=False)
            sh('sysctl', '-qw', 'net.ipv6.conf.all.disable_ipv6=1', ns=self.ns, check=False)
            sh('ip', 'addr', 'add', f'{HOST_IP}/24', 'dev', self.host_if, ns=self.ns)
            sh('ip', 'link', 'set', self.host_if, 'up', ns=self.ns)
            sh('ip', 'link', 'set', 'lo', 'up', ns=self.ns)
            sh('ip', 'link', 'set', self.sw_if, 'up')
            self.mac = json.loads(sh('ip', '-j', 'link', 'show', self.host_if, ns=self.ns).stdout)[0]['address']
        except Exception:
            self.close()
            raise

    def close(self):
        sh('ip', 'link', 'del', self.sw_if, check=False)
        sh('ip', 'netns', 'del', self.ns, check=False)


@pytest.fixture
def host():
    if os.geteuid() != 0:
        pytest.skip('needs root (network namespaces)')
    h = Host(str(os.getpid() % 100000))
    yield h
    h.close()


def neighbour(h: Host) -> str:
    return sh('ip', 'neigh', 'show', PORT_IP, 'dev', h.host_if, ns=h.ns).stdout.strip()


def start_switch(tmp_path: Path, host: Host) -> tuple[subprocess.Popen, str]:
    """prism-switch on the root namespace's end of the veth (net_af_packet), job 7 with the host
    as its one rank; returns once its telemetry socket is up."""
    su.require_binaries()
    cfg = tmp_path / 'sw.yaml'
    cfg.write_text(f'''switch: {{id: 1, role: root}}
ports:
  - {{id: 0, device: "net_af_packet0,iface={host.sw_if}", mac: "{PORT_MAC}", ip: {PORT_IP}}}
jobs:
  - id: 7
    members:
      - {{rank: 0, port: 0, mac: "{host.mac}", ip: {HOST_IP}}}
''')
    prefix = su.file_prefix('ep')
    proc = subprocess.Popen([str(su.SWITCH), *su.EAL_BASE, '--log-level=pmd.net.af_packet:error', '-l', '0',
                             '--file-prefix', prefix, '--', '--config', str(cfg)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    up = su.wait_for(lambda: su.telemetry_socket(prefix).exists() or proc.poll() is not None, 30)
    if not up or proc.poll() is not None:
        rc, out, err = su.stop_switch(proc)
        su.cleanup_prefix(prefix)
        raise AssertionError(f'prism-switch did not start: exit {rc}\n{out}\n{err}')
    return proc, prefix


def test_a_kernel_host_resolves_and_pings_the_switch(tmp_path: Path, host: Host):
    proc, prefix = start_switch(tmp_path, host)
    try:
        assert neighbour(host) == '', 'a neighbour entry before the test'
        # No static entry: the kernel asks by ARP, the switch answers, the pings come back.
        ping = sh('ping', '-c', 3, '-i', 0.2, '-W', 2, PORT_IP, ns=host.ns, check=False)
        assert ping.returncode == 0, ping.stdout + ping.stderr
        assert '3 received' in ping.stdout, ping.stdout
        assert f'lladdr {PORT_MAC}' in neighbour(host), neighbour(host)
        # A neighbour flush does not cut the host off: it resolves the switch again.
        sh('ip', 'neigh', 'flush', 'dev', host.host_if, ns=host.ns)
        assert PORT_MAC not in neighbour(host)
        ping = sh('ping', '-c', 2, '-i', 0.2, '-W', 2, PORT_IP, ns=host.ns, check=False)
        assert ping.returncode == 0 and '2 received' in ping.stdout, ping.stdout + ping.stderr
        assert f'lladdr {PORT_MAC}' in neighbour(host), neighbour(host)
        # An address that is not the switch's stays unresolved (the switch answers only for its own).
        other = sh('ping', '-c', 1, '-W', 1, '10.77.0.99', ns=host.ns, check=False)
        assert other.returncode != 0, other.stdout
    finally:
        rc, out, err = su.stop_switch(proc)
        su.cleanup_prefix(prefix)
    assert rc == 0, (rc, out, err)
    s = su.parse_summary(out)
    assert s.rx[0]['arp_replies'] >= 2, out  # once before the first ping, once after the flush
    assert s.rx[0]['echo_replies'] == 5, out
    assert not s.shard_dropped and s.shard_total('packets') == 0, out


CLIENT = r"""
import socket, struct, sys
# A CONTRIB of 4 fp32 elements for job 7, op 0, from rank 0 of a group of 1, built from docs/PROTOCOL.md.
vals = [1.5, -2.25, 3.0, 1e-30]
hdr = struct.pack('>HBBIIIHHHHBBBBBBBB', 0x5052, 1, 1, 7, 0, 0, 0, 1, 1, len(vals), 1, 1, 2, 1, 2, 1, 2, 0)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(('HOST_IP', 20562))
s.settimeout(3)
s.sendto(hdr + struct.pack('<4f', *vals), ('PORT_IP', 20562))
data, addr = s.recvfrom(9000)
kind, terms, count = data[3], struct.unpack('>H', data[20:22])[0], struct.unpack('>H', data[22:24])[0]
print(kind, terms, count, struct.unpack('<4f', data[32:48]) == struct.unpack('<4f', struct.pack('<4f', *vals)))
"""


def test_a_kernel_udp_socket_gets_its_result(tmp_path: Path, host: Host):
    """A rank as a plain kernel UDP socket in the namespace, default offloads on the veth (its
    datagrams leave the UDP checksum to offload): the switch takes the CONTRIB and the socket
    receives the RESULT (group of one: the sum is its own elements, bit for bit)."""
    proc, prefix = start_switch(tmp_path, host)
    try:
        code = CLIENT.replace('HOST_IP', HOST_IP).replace('PORT_IP', PORT_IP)
        r = sh('/usr/bin/python3', '-c', code, ns=host.ns, check=False)
    finally:
        rc, out, err = su.stop_switch(proc)
        su.cleanup_prefix(prefix)
    assert rc == 0, (rc, out, err)
    assert r.returncode == 0, r.stdout + r.stderr + out
    assert r.stdout.split() == ['3', '1', '4', 'True'], r.stdout + out
    s = su.parse_summary(out)
    # The kernel left the UDP checksum to an offload that never ran on the veth: taken as not given.
    assert s.rx[0]['partial_checksums'] == 1 and not s.refused, out
    assert s.shard_total('contribs') == 1 and s.shard_total('results_sent') == 1, out


FLOOD = r"""
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(('HOST_IP', 20562))
d = b'x' * 1400
for i in range(COUNT):
    s.sendto(d, ('PORT_IP', 20562))
"""


def test_ring_overflow_is_counted(tmp_path: Path, host: Host):
    """A sender faster than the switch polls overflows net_af_packet's ring: the kernel drops
    the frames, and DPDK 22.11's driver does not say so (imissed stays 0). The switch reads the
    kernel's count from the driver's packet sockets: every frame sent is either received or
    counted as a ring drop."""
    proc, prefix = start_switch(tmp_path, host)
    n = 200000
    try:
        # Resolve the switch first: while ARP is pending the kernel keeps only a few datagrams.
        sh('ping', '-c', 1, '-W', 2, PORT_IP, ns=host.ns)
        code = FLOOD.replace('HOST_IP', HOST_IP).replace('PORT_IP', PORT_IP).replace('COUNT', str(n))
        # The switch stopped (SIGSTOP) while the sender floods: it cannot poll, so the 512-frame
        # ring overflows for certain, on any CPU. (Sharing one CPU with the sender was not enough
        # on every machine: an AMD EPYC VM's switch kept up with it.)
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            r = sh('/usr/bin/python3', '-c', code, ns=host.ns, check=False)
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        time.sleep(0.5)  # the RX stage samples the kernel's count ten times a second
    finally:
        rc, out, err = su.stop_switch(proc)
        su.cleanup_prefix(prefix)
    assert rc == 0 and r.returncode == 0, (rc, out, err, r.stderr)
    rx = su.parse_summary(out).rx[0]
    # Every datagram of the flood was either received (its checksum left to offload) or dropped by
    # the ring (the ping and its ARP are received too, and may have been the ring's drops as well).
    assert n <= rx['partial_checksums'] + rx['ring_drops'] <= n + 2, out
    assert rx['ring_drops'] > 0, f'the flood did not overflow the ring here: {out}'


def test_jumbo_frames_size_the_ring_from_the_interface_mtu(tmp_path: Path, host: Host):
    """With MTU 9000 on the veth, the switch gives net_af_packet frames that hold 9000-byte
    packets (framesz/blocksz from the interface's MTU, logged), so a jumbo CONTRIB gets its
    jumbo RESULT; without them the kernel would drop it silently. 1788 fp32 elements: the most
    whose RESULT, sideband included, fits a 9000-byte packet (PROTOCOL.md: size C for the RESULT)."""
    sh('ip', 'link', 'set', host.sw_if, 'mtu', 9000)
    sh('ip', 'link', 'set', host.host_if, 'mtu', 9000, ns=host.ns)
    proc, prefix = start_switch(tmp_path, host)
    try:
        code = CLIENT.replace('HOST_IP', HOST_IP).replace('PORT_IP', PORT_IP).replace(
            "vals = [1.5, -2.25, 3.0, 1e-30]", "vals = [1.5, -2.25, 3.0, 1e-30] * 447").replace(
            "'<4f'", "'<1788f'").replace('data[32:48]', 'data[32:32 + 7152]')
        r = sh('/usr/bin/python3', '-c', code, ns=host.ns, check=False)
    finally:
        rc, out, err = su.stop_switch(proc)
        su.cleanup_prefix(prefix)
    assert rc == 0, (rc, out, err)
    assert 'has MTU 9000: framesz=9216,blocksz=36864 added' in err, err
    assert r.returncode == 0, r.stdout + r.stderr + out
    assert r.stdout.split() == ['3', '1', '1788', 'True'], r.stdout + out
