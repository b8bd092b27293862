"""tools/bench_hostile.py --quick, the hostile-traffic benchmark's smoke test: each reflection flood
flat out for a second, and the tenant's mixed flood against a 1 MiB allreduce (every result checked
by prism-rank --check), to the switch and to a sink. Checks what it writes, never its timings:
every kind measured, no flood getting back more bytes than it sent, the allreduce measured in the
three cases, and nothing of the testbed left behind. Needs root; skips without it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import switch_util as su
from testbed import impl, skip_unless_possible

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / 'tools' / 'bench_hostile.py'
KINDS = ['alloc', 'alloc_padded', 'bad_alloc', 'join_free', 'query_stranger', 'tenant_query', 'tenant_retransmit']


def test_quick_run_measures_reflection_and_the_tenants_cost(tmp_path):
    skip_unless_possible()
    su.require_binaries(su.BUILD / 'app' / 'prism-rank', su.BUILD / 'tools' / 'prism-flood')
    tb_id = f'bh{os.getpid() % 100000}'
    out = tmp_path / 'hostile.json'
    r = subprocess.run([sys.executable, str(BENCH), '--quick', '--build', str(su.BUILD), '--id', tb_id,
                        '--json', str(out)], capture_output=True, text=True, timeout=600)
    text = r.stdout + r.stderr
    assert r.returncode == 0, text
    assert not [n for n in impl.list_netns() if n.startswith(f'prism-tb{tb_id}-')], text
    assert not (impl.DPDK_RUN_DIR / f'prism-tb{tb_id}-switch').exists(), text
    d = json.loads(out.read_text())
    assert d['machine']['cpu_model'], d['machine']
    assert [x['kind'] for x in d['reflection']] == KINDS, d['reflection']
    for x in d['reflection']:
        assert x['frames'] > 0 and x['bytes_sent'] > 0, x
        assert x['bytes_back'] <= x['bytes_sent'], f'{x["kind"]}: more bytes back than sent: {x}'
    strangers = [x for x in d['reflection'] if not x['kind'].startswith('tenant')]
    assert all(x['bytes_back'] <= x['bytes_sent'] / 10 for x in strangers), strangers
    (bw,) = d['bandwidth']
    assert bw['flood'] == 'mix'
    for case in ('quiet', 'flood_to_switch', 'flood_to_sink'):
        assert bw[case]['gbit_s'] > 0 and bw[case]['median_s'] > 0, bw[case]
    for case in ('flood_to_switch', 'flood_to_sink'):
        assert bw[case]['flood_frames'] > 0, bw[case]
    assert bw['flood_to_sink']['bytes_back'] <= bw['flood_to_switch']['bytes_back'] + 10000, bw
    assert 'the flood' in text or 'cost' in text, text
