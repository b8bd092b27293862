"""prism_torch: torch.distributed's `prism` backend and PRISM's DDP communication hook.

Every rank's result of every sum is the reference model's (prism_ref, exact
fractions: an independent implementation) for float32, float16 and bfloat16, and
numpy's for int32 and int8, whatever the host algorithm or the rank count; reduce,
reduce_scatter, broadcast, allgather, in place through a strided view and
asynchronous work waited in reverse order; bf16 summed exactly into float32; the
digests are XXH3-64 as python3-xxhash computes it. What PRISM does not take is
refused with a message that says what to do. DDP training on 4 processes gives
the weights of a single-process simulation that sums each step's gradients with
the reference model, through the backend, through the hook over Gloo, and
through a PRISM switch's pooled job whatever its arbiter's order; the example
(examples/torch/compare.py) shows the same bits under KULISCH_FIXED and drift
under FP32_ARRIVAL and Gloo.
"""
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xxhash

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
import prism_ref as ref  # noqa: E402
import switch_util as su  # noqa: E402
from test_pool import pool_yaml  # noqa: E402
from testbed import PY, make_testbed, skip_unless_possible  # noqa: E402,F401

PYPATH = su.BUILD / 'python'
WORKER = REPO / 'tests' / 'torch' / 'worker.py'
TRAIN = REPO / 'examples' / 'torch' / 'train.py'
COMPARE = REPO / 'examples' / 'torch' / 'compare.py'
PORT = 20562


def require():
    if not (PYPATH / 'prism' / '__init__.py').is_file():
        pytest.fail(f'{PYPATH}/prism not built: meson builds it when python3-dev, pybind11-dev and libxxhash-dev '
                    'are installed (scripts/setup.sh)')


def free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def env_for(r: int, p: int, port: int, extra: dict | None = None) -> dict:
    e = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(p), MASTER_ADDR='127.0.0.1',
             MASTER_PORT=str(port), OMP_NUM_THREADS='1', PYTHONPATH=str(PYPATH))
    for k in ('PRISM_ALGO', 'PRISM_POLICY', 'PRISM_SWITCH', 'PRISM_POOL', 'PRISM_TORCH_LOG'):
        e.pop(k, None)
    e.update(extra or {})
    return e


def launch(p: int, argv: list[str], extra: dict | None = None, timeout: float = 240) -> list[tuple[int, str, str]]:
    """Runs argv as p local ranks (torchrun's environment); returns each rank's (rc, stdout, stderr)."""
    port = free_port()
    procs = [subprocess.Popen([PY, *argv], env=env_for(r, p, port, extra), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in range(p)]
    outs = []
    try:
        for q in procs:
            o, e = q.communicate(timeout=timeout)
            outs.append((q.returncode, o, e))
    finally:
        for q in procs:
            q.kill()
    return outs


def ok(outs):
    bad = [(r, rc, e) for r, (rc, _, e) in enumerate(outs) if rc != 0]
    assert not bad, '\n'.join(f'rank {r}: exit {rc}\n{e[-3000:]}' for r, rc, e in bad)


def worker(tmp: Path, p: int, cases=(), extra: dict | None = None):
    tmp.mkdir(parents=True, exist_ok=True)
    ok(launch(p, [str(WORKER), str(tmp), *cases], extra))
    return [json.loads((tmp / f'report{r}.json').read_text()) for r in range(p)]


def read(tmp: Path, name: str, kind: str, r: int) -> bytes:
    return (tmp / f'{name}.{kind}{r}').read_bytes()


def ins(tmp: Path, name: str, p: int) -> list[bytes]:
    return [read(tmp, name, 'in', r) for r in range(p)]


def exact(dtype: str, inputs: list[bytes], out: str | None = None, policy: str = 'kulisch') -> bytes:
    return ref.reduce(dtype, policy, out or dtype, 'ieee', inputs)[0]


TORCH_FORMAT = {'float32': 'fp32', 'float16': 'fp16', 'bfloat16': 'bf16', 'int32': 'int32', 'int8': 'int8'}


@pytest.mark.parametrize('p,algo', [(2, 'auto'), (3, 'rhd'), (3, 'ring'), (4, 'auto'), (4, 'binomial'),
                                    (4, 'chain'), (4, 'ring'), (4, 'rhd')])
def test_every_collective_gives_the_reference_models_bits_on_every_rank(tmp_path, p, algo):
    require()
    reports = worker(tmp_path, p, ('fp32', 'fp16', 'bf16', 'int32', 'int8', 'avg', 'reduce', 'rs', 'bytes', 'strided',
                                   'async', 'bf16_fp32', 'subgroup'), {'PRISM_ALGO': algo, 'PRISM_TORCH_DIGEST': '1'})
    for name, dtype in (('fp32', 'fp32'), ('fp16', 'fp16'), ('bf16', 'bf16'), ('strided', 'fp32'),
                        ('async0', 'fp32'), ('async1', 'fp32'), ('async2', 'fp32')):
        want = exact(dtype, ins(tmp_path, name, p))
        for r in range(p):
            assert read(tmp_path, name, 'out', r) == want, f'{name}, rank {r} of {p} ({algo}): not the exact sum'
    want = exact('bf16', ins(tmp_path, 'bf16_fp32', p), out='fp32')
    assert all(read(tmp_path, 'bf16_fp32', 'out', r) == want for r in range(p)), 'bf16 summed into fp32'
    for name, dt in (('int32', np.int32), ('int8', np.int8)):
        s = sum(np.frombuffer(b, dtype=dt).astype(np.int64) for b in ins(tmp_path, name, p))
        for r in range(p):
            assert np.array_equal(np.frombuffer(read(tmp_path, name, 'out', r), dtype=dt), s), (name, r)
    # AVG: the exact sum rounded once, then divided by p in fp32 (the same on every rank)
    avg = np.frombuffer(exact('fp32', ins(tmp_path, 'avg', p)), dtype=np.float32) / np.float32(p)
    assert all(read(tmp_path, 'avg', 'out', r) == avg.astype(np.float32).tobytes() for r in range(p))
    # reduce to the last rank: the others keep their input
    want = exact('fp32', ins(tmp_path, 'reduce', p))
    for r in range(p):
        assert read(tmp_path, 'reduce', 'out', r) == (want if r == p - 1 else read(tmp_path, 'reduce', 'in', r)), r
    # reduce_scatter: rank r gets block r of the sum of the concatenated inputs
    whole = exact('fp32', ins(tmp_path, 'rs', p))
    for r in range(p):
        assert read(tmp_path, 'rs', 'out', r) == whole[r * 777 * 4:(r + 1) * 777 * 4], r
    # a group of the even ranks beside the default one: their exact sum; the odd ranks keep their input
    members = list(range(0, p, 2))
    want = exact('fp32', [read(tmp_path, 'sub', 'in', r) for r in members]) if len(members) > 1 else None
    for r in range(p):
        assert read(tmp_path, 'sub', 'out', r) == (want if r in members and want else read(tmp_path, 'sub', 'in', r)), r
    # broadcast and allgather move any dtype's bytes
    for r in range(p):
        assert np.array_equal(np.frombuffer(read(tmp_path, 'bcast', 'out', r), np.int64), np.arange(10) * p)
        assert np.array_equal(np.frombuffer(read(tmp_path, 'gather', 'out', r), np.float64),
                              np.repeat(np.arange(p) + 0.5, 5))
        assert np.array_equal(np.frombuffer(read(tmp_path, 'gather_base', 'out', r), np.int16), np.repeat(np.arange(p), 3))
    # every rank logs the same digest of the same result, and it is XXH3-64 of the result's bytes
    for i, rec in enumerate(reports[0]['records']):
        if rec['collective'] == 'allreduce':
            assert {rep['records'][i]['digest'] for rep in reports} == {rec['digest']}, rec
    fp32 = next(rec for rec in reports[0]['records'] if rec['dtype'] == 'float32')
    assert fp32['digest'] == xxhash.xxh3_64(read(tmp_path, 'fp32', 'out', 0)).hexdigest()
    assert fp32['policy'] == 'kulisch' and (algo == 'auto' or fp32['algorithm'] == algo), fp32
    assert {rep['determinism'] for rep in reports} == {'exact'}


def test_what_prism_does_not_take_is_refused_and_says_what_to_do(tmp_path):
    require()
    reports = worker(tmp_path, 2, ('errors',))
    for rep in reports:
        e = rep['errors']
        assert 'float64 is not supported' in e['float64'] and '.float()' in e['float64'] and 'gloo' in e['float64']
        assert 'ReduceOp.MAX is not supported' in e['max'] and 'never falls back' in e['max']
        assert 'AVG of torch.int32 is not defined' in e['int_avg'] and 'use SUM' in e['int_avg']
        assert 'send is not supported' in e['send'] and 'gloo' in e['send']
        assert e['int8_overflow'].startswith('OverflowError: the sum of these 8-bit integers overflows in 6 of 6')
        assert e['int32_overflow'].startswith('OverflowError: the sum of these 32-bit integers overflows in 6 of 6')
        assert "the tensor is on meta; the prism backend reduces CPU tensors" in e['not_cpu'], e['not_cpu']
        assert 'sparse tensors are not supported' in e['sparse'], e['sparse']
        assert rep['after_errors'] == [2.0, 2.0, 2.0], 'the group works after refusals'
        assert rep['records'][-1]['digest'] is None, 'digests are off unless asked for'


@pytest.mark.parametrize('links', ['shm', 'tcp'])
def test_a_rank_that_dies_is_an_error_naming_it_not_a_hang(tmp_path, links):
    require()
    p = 3
    outs = launch(p, [str(WORKER), str(tmp_path), 'peer_dies'], {'PRISM_LINKS': links}, timeout=120)
    assert all(rc == 0 for rc, _, _ in outs), outs
    errs = []
    for r in range(p - 1):  # (a survivor that saw the error first exits too: another may name it)
        rep = json.loads((tmp_path / f'report{r}.json').read_text())
        errs.append(rep['errors']['peer_died'])
        assert errs[-1] and errs[-1].startswith('Error: ') and ' is gone' in errs[-1], errs[-1]
        assert rep['seconds_to_error'] < 30, rep  # detected, not a timeout (torch's default is 30 minutes)
    assert any(f'rank {p - 1} is gone' in e for e in errs), errs


@pytest.mark.parametrize('var,value,message', [
    ('PRISM_ALGO', 'fastest', "algorithm 'fastest' is not one of auto, switch, binomial, chain, rhd, ring"),
    ('PRISM_POLICY', 'exactish', "policy 'exactish' is not one of kulisch, fp32_arrival, fp32_binomial"),
    ('PRISM_POOL', 'first', "PRISM_POOL='first': a pool id (an integer)"),
    ('PRISM_TORCH_DIGEST', 'yes', "PRISM_TORCH_DIGEST='yes': 1 (digest every result) or 0")])
def test_a_bad_setting_is_an_error_naming_it(tmp_path, var, value, message):
    require()
    outs = launch(2, [str(WORKER), str(tmp_path), 'fp32'], {var: value}, timeout=120)
    for rc, _, err in outs:
        assert rc != 0 and message in err, err


@pytest.mark.parametrize('policy,algo,level', [('fp32_binomial', 'binomial', 'reproducible'),
                                               ('fp32_arrival', 'ring', 'none')])
def test_the_determinism_level_follows_the_policy(tmp_path, policy, algo, level):
    require()
    p = 4
    reports = worker(tmp_path, p, ('fp32',), {'PRISM_POLICY': policy, 'PRISM_ALGO': algo})
    assert {rep['determinism'] for rep in reports} == {level}
    if policy == 'fp32_binomial':  # through the binomial tree: the switch's binomial order, bit for bit
        want = exact('fp32', ins(tmp_path, 'fp32', p), policy='fp32_binomial')
        assert all(read(tmp_path, 'fp32', 'out', r) == want for r in range(p))


def simulate(p: int, steps: int) -> bytes:
    """examples/torch/train.py's training in one process: each step, every rank's gradient (times 1/p,
    as DDP scales it) summed by the reference model, then the same SGD step."""
    import torch
    sys.path.insert(0, str(TRAIN.parent))
    import train
    torch.set_num_threads(1)
    net = train.model()
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    teacher = torch.randn(32, 10, generator=torch.Generator().manual_seed(7))
    for step in range(steps):
        grads = []
        for r in range(p):
            x, y = train.batch(r, step, teacher)
            net.zero_grad()
            torch.nn.functional.mse_loss(net(x), y).backward()
            grads.append([(q.grad * (1.0 / p)).reshape(-1).numpy().tobytes() for q in net.parameters()])
        for i, q in enumerate(net.parameters()):
            s = exact('fp32', [g[i] for g in grads])
            q.grad = torch.frombuffer(bytearray(s), dtype=torch.float32).reshape(q.shape)
        opt.step()
    return torch.cat([q.detach().reshape(-1) for q in net.parameters()]).numpy().tobytes()


def train_weights(tmp: Path, name: str, p: int, steps: int, args=(), extra=None) -> bytes:
    out = tmp / f'{name}.bin'
    ok(launch(p, [str(TRAIN), '--steps', str(steps), '--out', str(out), *args], extra))
    return out.read_bytes()


def test_ddp_training_gives_the_weights_of_exact_sums_through_the_backend_and_the_hook(tmp_path):
    """4 ranks: DDP scales each gradient by 1/4 (exact) before the sum; the hook sums first and divides
    after: with p a power of two both are the exact sum of the scaled gradients."""
    require()
    p, steps = 4, 3
    want = simulate(p, steps)
    assert train_weights(tmp_path, 'backend', p, steps, ['--bucket-cap-mb', '0.1']) == want
    assert train_weights(tmp_path, 'hook', p, steps, ['--backend', 'gloo', '--hook']) == want
    assert train_weights(tmp_path, 'gloo', p, steps, ['--backend', 'gloo']) != want, 'Gloo is not the exact sum'


def test_the_example_shows_the_same_bits_under_kulisch_and_drift_under_fp32_and_gloo(tmp_path):
    require()
    table = tmp_path / 'compare.json'
    r = subprocess.run([PY, str(COMPARE), '--ranks', '4', '--steps', '6', '--json', str(table)],
                       env=env_for(0, 1, 0), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = {row['run']: row for row in json.loads(table.read_text())['rows']}
    exact_rows = [row for name, row in rows.items() if 'kulisch' in name]
    assert len(exact_rows) == 7 and all(row.get('same_bits', True) for row in exact_rows), exact_rows
    assert all(row['elements_differing_vs_exact'] == 0 for row in exact_rows)
    inexact = [row for name, row in rows.items() if 'kulisch' not in name]
    assert all(row['elements_differing_vs_exact'] > 0 for row in inexact), inexact
    assert rows['prism fp32_arrival rhd, bucket 25 MB']['elements_differing'] > 0
    assert rows['gloo, bucket 0.05 MB']['elements_differing'] > 0
    assert 'same bits' in r.stdout and 'max ULP' in r.stdout


@pytest.mark.parametrize('seeds', [(5, 9)])
def test_through_a_switch_pool_the_weights_are_the_host_algorithms_whatever_the_arbiter(make_testbed, tmp_path,
                                                                                        seeds):
    """The ranks in namespaces, the switch's random arbiter with two seeds: the job comes from the
    pool, every gradient bucket goes through the switch, and the weights are the host run's."""
    require()
    skip_unless_possible()
    p, steps = 4, 3
    host = train_weights(tmp_path, 'host', p, steps, ['--bucket-cap-mb', '0.1'], {'PRISM_ALGO': 'ring'})
    for seed in seeds:
        tb = make_testbed(ranks=p, layout='bridge',
                          settings={'pools': pool_yaml(1000, 2, 4, '10.88.0.0/24'),
                                    'arbiter': f'{{mode: random, seed: {seed}}}'})
        out, dig = tb.dir / 'w.bin', tb.dir / 'digests.jsonl'
        runs = tb.run(['env', f'PYTHONPATH={PYPATH}', 'OMP_NUM_THREADS=1', 'RANK={rank}', f'WORLD_SIZE={p}',
                       f'MASTER_ADDR={tb.ranks[0].ip}', 'MASTER_PORT=29500', 'PRISM_ALGO=switch',
                       f'PRISM_SWITCH={{switch_ip}}:{PORT}', 'PRISM_POOL=1000', 'PRISM_HOST_IP={ip}', PY, str(TRAIN),
                       '--steps', str(steps), '--bucket-cap-mb', '0.1', '--jitter', str(seed), '--out', str(out),
                       '--digests', str(dig)], timeout=300)
        bad = [run for run in runs if run.rc != 0]
        assert not bad, '\n'.join(f'rank {run.rank}: exit {run.rc}\n{run.stdout}{run.stderr[-3000:]}' for run in bad)
        records = [json.loads(line) for line in dig.read_text().splitlines()]
        sums = [rec for rec in records if rec['collective'] == 'allreduce']
        assert sums and all(rec['algorithm'] == 'switch' and len(rec['digest']) == 16 for rec in sums), records
        assert out.read_bytes() == host, f'arbiter seed {seed}: the switch gave other weights than the host ring'
        pools = tb.telemetry('switch', ['/prism/pools'])['/prism/pools']
        assert pools['pool1000']['allocated'] == 1 and pools['pool1000']['released'] == 1, pools


def test_the_osu_style_benchmark_runs_both_backends(tmp_path):
    require()
    out = tmp_path / 'torch.json'
    r = subprocess.run([PY, str(REPO / 'tools' / 'bench_torch.py'), '--quick', '--build', str(su.BUILD),
                        '--json', str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads(out.read_text())['results']
    assert {(x['mode'], x['bytes']) for x in res} == {(m, n) for m in ('gloo', 'prism', 'prism_a') for n in (4, 4096)}
    assert all(x['checked'] and x['seconds_median'] > 0 for x in res), res
    assert 'prism ÷ gloo (speed)' in r.stdout
