"""prism::Group end to end (issue 26): programs that use PRISM with no member
entries written anywhere, against the real prism-switch in the namespace
testbed.

- A C program (docs/examples/group_allreduce.c) built with `pkg-config --cflags
  --libs prism` against an installed tree finds its group through a TCP store
  (rank 0 serves it, as torch's MASTER_ADDR), allreduces exactly with `auto`
  among the hosts, then through the switch with a job taken from the switch's
  pool: both digests are the same, and the result is the reference model's
  (prism_ref, computed here from the inputs the program wrote).
- The independent Python client (minimal_client.py, written from
  docs/PROTOCOL.md alone) takes a job from the pool as rank 0 and C++ ranks
  (prism-rank --pool-job) join it: every rank gets the same bits, the
  reference's.
- Two groups of four prism-rank processes started at once, each through its
  own store and the pool, get two job ids and exact results (--check); a
  declared job in the same config keeps working beside them.
Needs root (namespaces); skips without it.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import prism_ref as ref
import switch_util as su
from minimal_client import make_input
from test_client import expected, stop
from test_pool import pool_yaml
from testbed import PY, make_testbed, skip_unless_possible  # noqa: F401

REPO = Path(__file__).resolve().parents[2]
RANK = su.BUILD / 'app' / 'prism-rank'
CLIENT = str(Path(__file__).resolve().parent / 'minimal_client.py')
PORT = 20562  # the testbed switch's udp_port


def fnv1a(data: bytes) -> str:
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return f'{h:016x}'


def test_a_c_program_uses_a_tcp_store_then_a_switch_pool_with_the_same_bits(make_testbed, tmp_path):
    skip_unless_possible()
    flags, libdir = su.installed_libprism(tmp_path)
    exe = tmp_path / 'group_allreduce'
    cc = subprocess.run(['cc', '-std=c99', '-Wall', '-Werror', str(REPO / 'docs/examples/group_allreduce.c'),
                         *flags, '-o', str(exe)], capture_output=True, text=True)
    assert cc.returncode == 0, cc.stderr
    R, n = 3, 20000
    tb = make_testbed(ranks=R, layout='bridge', settings={'pools': pool_yaml(1000, 2, 4, '10.88.0.0/24')})
    dump = tb.dir / 'dump'
    dump.mkdir()
    store = f'tcp://{tb.ranks[0].ip}:29500'
    runs = tb.run(['env', f'LD_LIBRARY_PATH={libdir}', f'PRISM_STORE={store}', f'PRISM_SWITCH={{switch_ip}}:{PORT}',
                   'PRISM_POOL=1000', 'PRISM_HOST_IP={ip}', str(exe), '{rank}', str(R), str(n), str(dump)],
                  timeout=180)
    bad = [run for run in runs if run.rc != 0 or ' same' not in run.stdout]
    assert not bad, '\n'.join(f'rank {run.rank}: exit {run.rc}\n{run.stdout}{run.stderr}' for run in runs)
    digests = {run.stdout.split()[4] for run in runs} | {run.stdout.split()[7] for run in runs}
    assert len(digests) == 1, [run.stdout for run in runs]
    ins = [(dump / f'in{r}.bin').read_bytes() for r in range(R)]
    want, fl = ref.reduce('fp32', 'kulisch', 'fp32', 'ieee', ins)
    for r in range(R):
        assert (dump / f'out{r}.bin').read_bytes() == want, f'rank {r}: not the reference model'
    assert digests == {fnv1a(want)}
    # Every rank left: the job went back to the pool.
    pools = tb.telemetry('switch', ['/prism/pools'])['/prism/pools']
    assert pools['pool1000']['allocated'] == 1 and pools['pool1000']['released'] == 1, pools
    stop(tb)


def test_the_independent_client_and_cpp_ranks_share_one_pooled_job(make_testbed):
    skip_unless_possible()
    su.require_binaries(RANK)
    R, n, seed = 3, 3000, 23
    tb = make_testbed(ranks=R, settings={'pools': pool_yaml(1000, 2, 4, '10.88.0.0/16')})
    share = tb.dir / 'share.json'
    for r in range(1, R):  # the C++ ranks reduce the client's generator's inputs (make_input)
        (tb.dir / f'in{r}.bin').write_bytes(make_input(seed, r, n, 'fp32').tobytes())
    py = {}

    def client():
        py['runs'] = tb.run([PY, CLIENT, '--config', '{config}', '--pool', '1000', '--group', str(R), '--rank', '0',
                             '--ip', '{ip}', '--udp-port', '30555', '--switch-ip', '{switch_ip}', '--pool-share',
                             str(share), '--elements', str(n), '--seed', str(seed), '--deadline', '60',
                             '--join-timeout', '60'], timeout=120, ranks=[0], label='py')

    t = threading.Thread(target=client)
    t.start()
    assert su.wait_for(share.exists, 30), 'the client shared no job id'
    job = json.loads(share.read_text())
    cpp = tb.run([str(RANK), '--pool-job', str(job['job']), '--shards', str(job['shards']), '--ranks', str(R),
                  '--rank', '{rank}', '--switch', f'{{switch_ip}}:{PORT}', '--input', '{dir}/in{rank}.bin',
                  '--output', '{dir}/out{rank}.bin', '--json'], timeout=120, ranks=list(range(1, R)))
    t.join()
    for run in cpp + py['runs']:
        assert run.rc == 0, f'rank {run.rank}: exit {run.rc}\n{run.stdout}{run.stderr}'
    line = json.loads(py['runs'][0].stdout.strip().splitlines()[-1])
    want = expected(n, 'fp32', 'fp32', R, seed)
    assert line['digest'] == want, line
    for r in range(1, R):
        assert hashlib.sha256((tb.dir / f'out{r}.bin').read_bytes()).hexdigest() == want, f'rank {r}'
        assert json.loads(cpp[r - 1].stdout.strip().splitlines()[-1])['job'] == job['job']
    stop(tb)


def test_two_groups_started_at_once_take_two_pooled_jobs_beside_a_declared_one(make_testbed):
    skip_unless_possible()
    su.require_binaries(RANK)
    tb = make_testbed(ranks=4, layout='bridge', settings={'pools': pool_yaml(1000, 2, 4, '10.88.0.0/24')})
    got = {}

    def group(label: str):
        got[label] = tb.run([str(RANK), '--store', f'file://{{dir}}/store-{label}', '--ranks', '4', '--rank', '{rank}',
                             '--switch', f'{{switch_ip}}:{PORT}', '--pool', '1000', '--algo', 'switch', '--size',
                             '256KiB', '--repeat', '2', '--check', '--json', '--linger-ms', '3000'],
                            timeout=120, label=label)  # lingering: both jobs live at once, however scheduled

    threads = [threading.Thread(target=group, args=(label,)) for label in ('A', 'B')]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    jobs = {}
    for label, runs in got.items():
        for run in runs:
            assert run.rc == 0, f'{label} rank {run.rank}: exit {run.rc}\n{run.stdout}{run.stderr}'
        lines = [json.loads(run.stdout.strip().splitlines()[-1]) for run in runs]
        assert len({ln['job'] for ln in lines}) == 1 and len({ln['digest'] for ln in lines}) == 1, lines
        assert all(ln['check_differ'] == 0 and ln['algo'] == 'switch' for ln in lines), lines
        jobs[label] = lines[0]['job']
    assert sorted(jobs.values()) == [1000, 1001], jobs
    # The declared job (7) in the same config, after them and with the switch never restarted.
    runs = tb.run([str(RANK), '--config', '{config}', '--rank', '{rank}', '--size', '64KiB', '--check', '--json'],
                  timeout=120)
    for run in runs:
        assert run.rc == 0, f'rank {run.rank}: exit {run.rc}\n{run.stdout}{run.stderr}'
        assert json.loads(run.stdout.strip().splitlines()[-1])['job'] == 7
    stop(tb)


def test_python_refuses_to_write_the_result_into_a_read_only_array(tmp_path):
    """prism.Group.allreduce and .broadcast work in place: an array numpy marks read-only (here one
    over a bytes object, which C code must not change) is a ValueError that says what to do, and the
    bytes stay as they were; a writeable array of a one-rank group is its own sum."""
    code = f'''
import numpy as np, prism
g = prism.Group('file://{tmp_path}/store', 0, 1)
data = bytes(range(64))
a = np.frombuffer(data, dtype=np.float32)
for call in (g.allreduce, g.broadcast):
    try:
        call(a)
        print(call.__name__, 'took it')
    except ValueError as e:
        print(call.__name__, 'refused:', e)
b = np.arange(16, dtype=np.float32)
b.flags.writeable = False
try:
    g.allreduce(b)
    print('view took it')
except ValueError as e:
    print('view refused:', e)
print('unchanged' if data == bytes(range(64)) else 'changed')
c = np.arange(16, dtype=np.float32)
g.allreduce(c)
print('sum', c.tolist() == list(range(16)))
'''
    r = subprocess.run([sys.executable, '-c', code], env=dict(os.environ, PYTHONPATH=str(su.BUILD / 'python')),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    for what in ('allreduce', 'broadcast', 'view'):
        line = next(ln for ln in lines if ln.startswith(what + ' '))
        assert line.startswith(what + ' refused: the array is read-only'), r.stdout
        assert 'copy()' in line, line
    assert 'unchanged' in lines and 'sum True' in lines, r.stdout
