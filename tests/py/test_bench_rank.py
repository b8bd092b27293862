"""tools/bench_rank.py --quick, the rank benchmark's smoke test: prism-rank through the switch, the
path's echo (a pooled job of one per rank), and Open MPI's MPI_Allreduce over TCP between the same
namespaces, on the ranks' CPUs and on every CPU (R = 2, 64 KiB and 1 MiB, repeat 2).
Checks the JSON it writes, never its timings: every implementation measured with positive times and
CPU seconds, PRISM's ranks agreeing on the result's digest and the echo's each getting its own input
back (prism-rank --check), the switch having reduced every element-contribution once, and nothing of the testbed left
behind. Needs root and Open MPI; skips without them.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import switch_util as su
from testbed import impl, skip_unless_possible

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / 'tools' / 'bench_rank.py'
RANK = su.BUILD / 'app' / 'prism-rank'
MPI = su.BUILD / 'tools' / 'mpi-allreduce'


def test_quick_run_measures_both_implementations(tmp_path):
    skip_unless_possible()
    su.require_binaries(RANK)
    if not shutil.which('mpirun') or not MPI.exists():
        pytest.skip('Open MPI (openmpi-bin, libopenmpi-dev) or build/tools/mpi-allreduce missing')
    tb_id = f'br{os.getpid() % 100000}'
    out, png = tmp_path / 'bench.json', tmp_path / 'bench.png'
    r = subprocess.run([sys.executable, str(BENCH), '--quick', '--build', str(su.BUILD), '--id', tb_id,
                        '--json', str(out), '--plot', str(png)], capture_output=True, text=True, timeout=600)
    text = r.stdout + r.stderr
    assert r.returncode == 0, text
    # Nothing left behind: namespaces, switch, DPDK runtime directory.
    assert not [n for n in impl.list_netns() if n.startswith(f'prism-tb{tb_id}-')], text
    assert not (impl.DPDK_RUN_DIR / f'prism-tb{tb_id}-switch').exists(), text

    d = json.loads(out.read_text())
    assert d['complete'] and d['machine']['cpu_model'], d['machine']
    rows = d['results']
    assert [(x['ranks'], x['mtu'], x['bytes']) for x in rows] == [(2, 1500, 65536), (2, 1500, 1 << 20)]
    assert d['machine']['rank_cpus'] and d['machine']['switch_cpu'] not in d['machine']['rank_cpus']
    for row in rows:
        p, e, m, ma = row['prism']['kulisch'], row['echo'], row['mpi'], row['mpi_all']
        for x in (p, e, m, ma):
            assert 'error' not in x, x.get('error')
        assert (p['impl'], e['impl'], m['impl'], ma['impl']) == ('prism', 'echo', 'mpi', 'mpi_all')
        for x in (p, e, m, ma):
            assert x['seconds_min'] > 0 and x['seconds_median'] >= x['seconds_min'] and x['gbit_s'] > 0, x
            assert x['cpu_seconds'] > 0 and x['cpu_s_per_gib'] > 0, x
        # The echo: each rank, rank 0 of a job of one, gets its own input back (checked by prism-rank
        # against the reference model).
        assert all(x['check_differ'] == 0 for x in e['per_rank']) and e['switch']['each_once'], e
        assert 'taskset' in p['command'] and 'taskset' in m['command'] and 'taskset' not in ma['command']
        assert len(p['per_rank']) == 2 and p['digests_agree'] and len(p['digests']) == 1, p['digests']
        assert all(x['digest'] == p['digests'][0] for x in p['per_rank'])
        sw = p['switch']
        assert sw['each_once'], sw
        assert sw['element_contributions'] == 2 * (row['bytes'] // 4) * (p['repeat'] + p['warmup'])
        assert sw['gbit_s'] > 0
        # MPI's traffic crossed the ranks' veths (TCP between the namespaces).
        assert all(v > 0 for v in m['link_bytes'].values()), m['link_bytes']
    # The table's header, and the plot when gnuplot is there.
    assert 'PRISM / MPI' in r.stdout and 'PRISM / echo' in r.stdout
    if shutil.which('gnuplot'):
        assert png.exists() and png.read_bytes()[:4] == b'\x89PNG'
