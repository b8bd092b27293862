"""The network-namespace testbed (scripts/testbed.py) for pytest suites.

    from testbed import make_testbed        # a fixture: import it into the test module

    def test_something(make_testbed):
        tb = make_testbed(ranks=4, loss=5)  # up: namespaces, veths, switch running, ARP checked
        runs = tb.run([PY, CLIENT, '--config', '{config}', '--rank', '{rank}'])
        exits = tb.stop_switches()           # SIGINT; exits['switch'].stdout is the summary
        summary = switch_util.parse_summary(exits['switch'].stdout)

or, outside a fixture, `with running_testbed(tmp_path, ranks=4) as tb: ...`. Every testbed
is torn down when its test ends, passed or failed (and on SIGTERM, e.g. a meson
timeout, before the process dies). Tests skip when not root or when network
namespaces, veths or nftables are unavailable; a missing prism-switch skips
by hand and fails under meson (PRISM_BUILD set), as switch_util does.

Layouts: layout='direct' (a switch port per rank), 'bridge', 'tree' (bridge=True
puts a bridge in front of each switch of the tree). Each rank's command gets
{rank} {ranks} {config} {ns} {ip} {switch_ip} {dir} substituted. jobs=2 adds
job 8 over the same ranks (each at UDP port 20563; tb.jobs lists (id, port));
two runs at once on the same ranks (from threads) each need their own
tb.run(..., label=...), which names their output files.
"""
from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import switch_util as su

REPO = Path(__file__).resolve().parents[2]
PY = '/usr/bin/python3'


def _load_impl():
    name = 'prism_testbed_impl'
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO / 'scripts' / 'testbed.py')
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


impl = _load_impl()
Testbed = impl.Testbed
Testbed.__test__ = False   # not a pytest class
TestbedError = impl.TestbedError
Capture = impl.Capture
read_pcap = impl.read_pcap

_live: list = []
_prev_term = None


def _on_term(signum, frame):
    """SIGTERM (a meson timeout): tear every live testbed down, then die as asked."""
    for tb in list(_live):
        tb.down()
    _live.clear()
    signal.signal(signum, _prev_term if callable(_prev_term) else signal.SIG_DFL)
    if callable(_prev_term):
        _prev_term(signum, frame)
    else:
        os.kill(os.getpid(), signum)


def _install_term_handler():
    global _prev_term
    if _prev_term is None:
        _prev_term = signal.getsignal(signal.SIGTERM) or signal.SIG_DFL
        signal.signal(signal.SIGTERM, _on_term)


_possible: str | None = None


def skip_unless_possible():
    """Skips the test when this machine cannot build a testbed (not root, no namespaces)."""
    global _possible
    if os.geteuid() != 0:
        pytest.skip('needs root (network namespaces, veth pairs, nftables)')
    for tool in ('ip', 'nft', 'tc', 'ping'):
        if not shutil.which(tool):
            pytest.skip(f'{tool} not found (scripts/setup.sh installs iproute2, nftables, iputils-ping)')
    if _possible is None:
        probe = f'prism-tbprobe{os.getpid()}'
        r = subprocess.run(['ip', 'netns', 'add', probe], capture_output=True, text=True)
        if r.returncode != 0:
            _possible = f'cannot create a network namespace: {r.stderr.strip()}'
        else:
            r = subprocess.run(['ip', 'netns', 'exec', probe, 'nft', 'list', 'tables'], capture_output=True,
                               text=True)
            subprocess.run(['ip', 'netns', 'del', probe], capture_output=True)
            _possible = '' if r.returncode == 0 else f'nftables unusable: {r.stderr.strip()}'
    if _possible:
        pytest.skip(_possible)
    su.require_binaries(su.SWITCH)


@contextlib.contextmanager
def running_testbed(dir: Path, **kw):
    """A Testbed up for the `with` block, down after it whatever happens."""
    skip_unless_possible()
    _install_term_handler()
    tb = Testbed(dir=Path(dir), build=su.BUILD, **kw)
    _live.append(tb)
    try:
        tb.up()
        yield tb
    finally:
        tb.down()
        if tb in _live:
            _live.remove(tb)


@pytest.fixture
def make_testbed(tmp_path):
    """make_testbed(**Testbed kwargs) -> a Testbed that is up; all are torn down after the test."""
    stack = contextlib.ExitStack()
    n = [0]

    def make(**kw):
        n[0] += 1
        return stack.enter_context(running_testbed(tmp_path / f'tb{n[0]}', **kw))

    with stack:
        yield make


def left_behind(tb) -> list[str]:
    """What of tb still exists: its namespaces (which hold every link, bridge, nft table and
    qdisc it made), switch processes and DPDK runtime directories."""
    out = [n for n in impl.list_netns() if n.startswith(f'prism-tb{tb.id}-')]
    out += [str(impl.DPDK_RUN_DIR / s.prefix) for s in tb.switches if (impl.DPDK_RUN_DIR / s.prefix).exists()]
    for proc in Path('/proc').iterdir():
        if proc.name.isdigit() and any(impl.is_our_switch(int(proc.name), s.prefix) for s in tb.switches):
            out.append(f'process {proc.name}')
    return out
