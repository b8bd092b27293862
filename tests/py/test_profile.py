"""tools/profile_pipeline.py: instructions per contribution from callgrind.

The callgrind reader is checked against a hand-written profile in
callgrind's own format (name compression, calls with inclusive costs,
objects without symbols), whose self costs are known by construction; the
tool itself is run once, briefly, on the forward-only pipeline.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get('PRISM_BUILD') or REPO / 'build')
TOOL = REPO / 'tools' / 'profile_pipeline.py'

spec = importlib.util.spec_from_file_location('profile_pipeline', TOOL)
pp = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pp)

# main calls parse twice (inclusive 300) and an unnamed function in libfoo once (inclusive 40).
# Self costs: main 10 + 5 = 15, parse 120 + 180 = 300, libfoo:0x10 40. Total 355.
PROFILE = """# callgrind format
version: 1
events: Ir
ob=(1) /bin/app
fl=(1) app.cpp
fn=(1) main
3 10
cfn=(2) prism::wire::parse(std::span<unsigned char const>, unsigned short)
calls=2 0
4 300
cob=(2) /usr/lib/libfoo.so.1
cfn=(3) 0x0000000000000010
calls=1 0
5 40
+1 5

fn=(2)
10 120
+2 180

ob=(2)
fl=(2) ???
fn=(3)
0 40
"""


def test_reader_counts_self_costs_and_calls(tmp_path):
    f = tmp_path / 'cg.out'
    f.write_text(PROFILE)
    cost, calls, totals = pp.parse_callgrind(str(f))
    self_ir, total = cost['Ir'], totals['Ir']
    assert total == 355
    assert self_ir['main'] == 15
    assert self_ir['prism::wire::parse(std::span<unsigned char const>, unsigned short)'] == 300
    assert self_ir['libfoo.so.1:0x0000000000000010'] == 40
    assert calls['prism::wire::parse(std::span<unsigned char const>, unsigned short)'] == 2
    assert pp.short('prism::wire::(anonymous namespace)::sum32_avx2(unsigned char const*) [clone .constprop.0]') \
        == 'prism::wire::sum32_avx2'


# The same shape with callgrind's cache simulation: five events per cost line
# (a line may stop early: the missing events are 0). Self D1 misses: main
# 1 + 0 (read, write) + 2, parse 3 + 1 and 4 + 0, libfoo 0. LL misses: parse's
# first line only, 1 + 1.
CACHE_PROFILE = """# callgrind format
version: 1
events: Ir D1mr D1mw DLmr DLmw
ob=(1) /bin/app
fl=(1) app.cpp
fn=(1) main
3 10 1
cfn=(2) prism::wire::parse
calls=2 0
4 300 8 1 1 1
+1 5 0 2

fn=(2)
10 120 3 1 1 1
+2 180 4

ob=(2)
fl=(2) ???
fn=(3) 0x0000000000000010
0 40
"""


def test_reader_keeps_each_cache_event_apart(tmp_path):
    f = tmp_path / 'cg.out'
    f.write_text(CACHE_PROFILE)
    cost, calls, totals = pp.parse_callgrind(str(f))
    assert totals['Ir'] == 655 - 300  # the call line's inclusive cost is not main's own
    assert cost['D1mr']['main'] == 1 and cost['D1mw']['main'] == 2
    assert cost['D1mr']['prism::wire::parse'] == 7 and cost['D1mw']['prism::wire::parse'] == 1
    assert cost['DLmr']['prism::wire::parse'] == 1 and cost['DLmw']['prism::wire::parse'] == 1
    assert totals['DLmr'] + totals['DLmw'] == 2 and totals['D1mr'] + totals['D1mw'] == 11
    assert calls['prism::wire::parse'] == 2


def test_tool_reports_instructions_per_contribution(tmp_path):
    bench = BUILD / 'app' / 'prism-bench'
    if not bench.is_file():
        if os.environ.get('PRISM_BUILD'):
            pytest.fail(f'prism-bench not found at {bench}')
        pytest.skip('prism-bench not built')
    if not shutil.which('valgrind'):
        pytest.skip('valgrind not installed')
    out = tmp_path / 'p.json'
    r = subprocess.run([sys.executable, str(TOOL), '--build', str(BUILD), '--policies', 'forward', '--time', '0.2',
                        '--cache-sim', '--json', str(out)], capture_output=True, text=True, timeout=600,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    (res,) = json.loads(out.read_text())
    assert res['policy'] == 'forward' and res['packets'] > 1000
    fns = res['functions']
    # Self costs add up to the total, and every forwarded packet was parsed and checksummed.
    assert abs(sum(fns.values()) - res['instructions_per_packet']) < 1e-6 * res['instructions_per_packet']
    assert fns['prism::wire::parse'] > 0 and fns['prism::sw::ingress'] > 0
    assert '| forward |' in r.stdout
    # --cache-sim: misses per contribution, their per-function parts adding up to them. net_pcap's copy of each
    # frame out of its replay buffers (megabytes, past the simulated 2 MiB last level) misses at least once a frame.
    for level in ('d1', 'll'):
        by_fn = res[f'{level}_misses_by_function']
        assert abs(sum(by_fn.values()) - res[f'{level}_misses_per_packet']) < 1e-6 * res[f'{level}_misses_per_packet']
    assert res['ll_misses_per_packet'] >= 1 and res['d1_misses_per_packet'] >= res['ll_misses_per_packet']
