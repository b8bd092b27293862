"""libprism-mpi.so under an unmodified MPI program (tests/mpi/allreduce.c), with Open MPI's mpirun:
MPI_Allreduce of floats through PRISM gives every rank the exact sum rounded once (prism_ref, the
independent reference model), in place or not, whatever the algorithm or the rank count; what PRISM
does not take (doubles) goes to Open MPI untouched; a bad setting is an MPI error that says what is
wrong, and so is a setting that differs between ranks (not a hang); MPI_Bcast and MPI_Allgather take
one path on every rank whatever datatype handles describe the same signature."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / 'tools'))
import prism_ref  # noqa: E402
import switch_util as su  # noqa: E402
from bench_util import mpirun_prefix  # noqa: E402
from test_pool import pool_yaml  # noqa: E402
from testbed import make_testbed, skip_unless_possible  # noqa: E402,F401

LIB = su.BUILD / 'mpi' / 'libprism-mpi.so'
PROG = su.BUILD / 'tests' / 'mpi' / 'allreduce'


def require():
    if not shutil.which('mpirun'):
        pytest.fail('mpirun not found: scripts/setup.sh installs openmpi-bin')
    for f in (LIB, PROG):
        if not f.is_file():
            pytest.fail(f'{f} not built (meson builds it when Open MPI is installed)')


def run(tmp: Path, p: int, count: int, seed: int, env: dict | None = None, preload=True,
        mca: tuple = ()) -> subprocess.CompletedProcess:
    tmp.mkdir(parents=True, exist_ok=True)
    cmd = mpirun_prefix(p) + ['--mca', 'btl', 'self,tcp', '--mca', 'btl_tcp_if_include', 'lo',
                              '--mca', 'oob_tcp_if_include', 'lo', '--mca', 'mpi_yield_when_idle', '1']
    for k, v in mca:
        cmd += ['--mca', k, v]
    e = dict(os.environ)
    e.update(env or {})
    if preload:
        e['LD_PRELOAD'] = str(LIB)
        e['LD_LIBRARY_PATH'] = str(su.BUILD / 'lib')
    for k in ('LD_PRELOAD', 'LD_LIBRARY_PATH', 'PRISM_ALGO', 'PRISM_POLICY', 'PRISM_MPI', 'PRISM_LINKS'):
        if k in e:
            cmd += ['-x', k]
    cmd += [str(PROG), str(count), str(seed), str(tmp)]
    return subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=300)


def results(tmp: Path, p: int, count: int):
    ins = [np.fromfile(tmp / f'in{r}.f32', dtype=np.uint32) for r in range(p)]
    outs = [np.fromfile(tmp / f'out{r}.f32', dtype=np.uint32) for r in range(p)]
    d_outs = [np.fromfile(tmp / f'out{r}.f64', dtype=np.uint64) for r in range(p)]
    assert all(len(o) == 2 * count for o in outs), [len(o) for o in outs]
    return ins, outs, d_outs


def exact(ins) -> np.ndarray:
    out, flags = prism_ref.reduce('fp32', 'kulisch', 'fp32', 'ieee', [a.tobytes() for a in ins])
    assert flags == {'overflow': 0, 'invalid': 0, 'nan_input': 0}, flags
    return np.frombuffer(out, dtype=np.uint32)


@pytest.mark.parametrize('p,algo', [(2, 'auto'), (3, 'rhd'), (3, 'ring'), (4, 'auto'), (4, 'binomial'),
                                    (4, 'chain'), (4, 'ring')])
def test_float_allreduce_is_the_exact_sum_rounded_once(tmp_path, p, algo):
    require()
    count = 70001
    r = run(tmp_path, p, count, seed=5, env={'PRISM_ALGO': algo})
    assert r.returncode == 0, r.stdout + r.stderr
    ins, outs, _ = results(tmp_path, p, count)
    want = exact(ins)
    for rank, o in enumerate(outs):
        assert np.array_equal(o[:count], want), f'rank {rank}: out of place differs from the exact sum'
        assert np.array_equal(o[count:], want), f'rank {rank}: in place differs from the exact sum'
    if p >= 3:  # the data are such that the order matters: a plain fp32 sum differs (at p = 2 it is one rounding)
        naive = np.sum(np.stack([a.view(np.float32) for a in ins]), axis=0, dtype=np.float32).view(np.uint32)
        assert np.count_nonzero(naive != want) > count // 20


def test_open_mpis_algorithms_disagree_and_prism_does_not(tmp_path):
    """Open MPI's own allreduce algorithms (coll_tuned) give different float sums of the same data;
    with libprism-mpi every one of those runs gives the exact sum."""
    require()
    p, count = 4, 50000
    plain, prism = [], []
    for n, alg in enumerate(('1', '3', '4', '6')):  # basic linear, recursive doubling, ring, Rabenseifner
        mca = (('coll_tuned_use_dynamic_rules', '1'), ('coll_tuned_allreduce_algorithm', alg))
        for preload, into in ((False, plain), (True, prism)):
            d = tmp_path / f'{alg}-{int(preload)}'
            r = run(d, p, count, seed=9, preload=preload, mca=mca)
            assert r.returncode == 0, r.stdout + r.stderr
            ins, outs, _ = results(d, p, count)
            into.append(outs[0][:count])
    want = exact(ins)
    assert len({o.tobytes() for o in plain}) > 1, "Open MPI's algorithms agreed: the data do not show the point"
    assert all(np.array_equal(o, want) for o in prism)


def test_doubles_go_to_open_mpi_untouched(tmp_path):
    """MPI_DOUBLE is not PRISM's (no exact double sum yet): the preloaded run gives Open MPI's own bits."""
    require()
    p, count = 3, 20000
    a, b = tmp_path / 'plain', tmp_path / 'prism'
    for d, preload in ((a, False), (b, True)):
        r = run(d, p, count, seed=3, preload=preload)
        assert r.returncode == 0, r.stdout + r.stderr
    _, _, plain = results(a, p, count)
    _, _, prism = results(b, p, count)
    assert all(np.array_equal(x, y) for x, y in zip(plain, prism))


def test_prism_mpi_off_leaves_every_call_to_open_mpi(tmp_path):
    require()
    p, count = 3, 20000
    a, b = tmp_path / 'plain', tmp_path / 'off'
    assert run(a, p, count, seed=4, preload=False).returncode == 0
    r = run(b, p, count, seed=4, env={'PRISM_MPI': 'off'})
    assert r.returncode == 0, r.stdout + r.stderr
    assert results(a, p, count)[1][0].tobytes() == results(b, p, count)[1][0].tobytes()


def test_a_bad_setting_is_an_mpi_error_naming_it(tmp_path):
    require()
    r = run(tmp_path, 2, 100, seed=1, env={'PRISM_ALGO': 'fastest'})
    assert r.returncode != 0
    assert 'PRISM_ALGO=fastest: not one of auto, switch, binomial, chain, rhd, ring' in r.stderr + r.stdout


COLL = su.BUILD / 'tests' / 'mpi' / 'collectives'


def run_collectives(tmp: Path, p: int, count: int, seed: int, env: dict | None = None, preload=True):
    global PROG
    saved, PROG = PROG, COLL
    try:
        return run(tmp, p, count, seed, env, preload)
    finally:
        PROG = saved


@pytest.mark.parametrize('p,algo', [(2, 'auto'), (3, 'auto'), (4, 'ring'), (5, 'rhd')])
def test_every_collective_it_takes(tmp_path, p, algo):
    """MPI_Reduce (to root 1, in place too), MPI_Reduce_scatter_block (in place too), MPI_Iallreduce:
    the exact float sum rounded once; MPI_Allreduce of MPI_INT: the integer sum; MPI_Bcast of doubles
    and MPI_Allgather of ints (in place too): the root's and every rank's bytes."""
    require()
    if not COLL.is_file():
        pytest.fail(f'{COLL} not built')
    count = 30001 // p * p
    b = count // p
    r = run_collectives(tmp_path, p, count, seed=13, env={'PRISM_ALGO': algo})
    assert r.returncode == 0, r.stdout + r.stderr
    raw = [np.fromfile(tmp_path / f'in{k}.bin', dtype=np.uint32) for k in range(p)]
    xs = [a[:count] for a in raw]
    ks = [a[count:].view(np.int32) for a in raw]
    want = exact(xs)
    root = 1 % p
    red = np.fromfile(tmp_path / f'reduce{root}.bin', dtype=np.uint32)
    assert np.array_equal(red[:count], want) and np.array_equal(red[count:], want), 'MPI_Reduce'
    for k in range(p):
        rsb = np.fromfile(tmp_path / f'rsb{k}.bin', dtype=np.uint32)
        assert np.array_equal(rsb[:b], want[k * b:(k + 1) * b]), f'rank {k}: MPI_Reduce_scatter_block'
        assert np.array_equal(rsb[b:], want[k * b:(k + 1) * b]), f'rank {k}: MPI_Reduce_scatter_block in place'
        assert np.array_equal(np.fromfile(tmp_path / f'iar{k}.bin', dtype=np.uint32), want), f'rank {k}: Iallreduce'
        isum = np.sum(np.stack([a.astype(np.int64) for a in ks]), axis=0)
        assert np.array_equal(np.fromfile(tmp_path / f'i32{k}.bin', dtype=np.int32), isum), f'rank {k}: int sum'
        bc = np.fromfile(tmp_path / f'bcast{k}.bin', dtype=np.float64)
        assert np.array_equal(bc, xs[p - 1].view(np.float32).astype(np.float64) * 3.0), f'rank {k}: MPI_Bcast'
        ag = np.fromfile(tmp_path / f'ag{k}.bin', dtype=np.int32)
        gathered = np.concatenate([ks[u][u * b:(u + 1) * b] for u in range(p)])
        assert np.array_equal(ag[:count], gathered) and np.array_equal(ag[count:], gathered), f'rank {k}: Allgather'


INTS = su.BUILD / 'tests' / 'mpi' / 'integers'


def run_integers(tmp: Path, p: int, mode: str, preload=True) -> subprocess.CompletedProcess:
    tmp.mkdir(parents=True, exist_ok=True)
    cmd = mpirun_prefix(p) + ['--mca', 'btl', 'self,tcp', '--mca', 'btl_tcp_if_include', 'lo',
                              '--mca', 'oob_tcp_if_include', 'lo', '--mca', 'mpi_yield_when_idle', '1']
    e = dict(os.environ)
    if preload:
        e['LD_PRELOAD'], e['LD_LIBRARY_PATH'] = str(LIB), str(su.BUILD / 'lib')
        cmd += ['-x', 'LD_PRELOAD', '-x', 'LD_LIBRARY_PATH']
    return subprocess.run(cmd + [str(INTS), mode, str(tmp)], env=e, capture_output=True, text=True, timeout=120)


def test_int8_sums_that_fit_are_exact(tmp_path):
    require()
    r = run_integers(tmp_path, 3, 'int8')
    assert r.returncode == 0, r.stdout + r.stderr
    files = [np.fromfile(tmp_path / f'i8{k}.bin', dtype=np.int8) for k in range(3)]
    want = np.sum(np.stack([f[:1000].astype(np.int32) for f in files]), axis=0)
    assert want.min() >= -128 and want.max() <= 127
    for f in files:
        assert np.array_equal(f[1000:].astype(np.int32), want)


@pytest.mark.parametrize('mode,what', [('int32-over', '32-bit'), ('int8-over', '8-bit')])
def test_an_integer_sum_beyond_its_type_is_an_error_not_a_wrap(tmp_path, mode, what):
    """Open MPI wraps the sum around (the program runs and prints it); through PRISM it is an MPI
    error that says how many elements overflowed."""
    require()
    plain = run_integers(tmp_path / 'plain', 2, mode, preload=False)
    assert plain.returncode == 0, plain.stdout + plain.stderr
    r = run_integers(tmp_path / 'prism', 2, mode)
    assert r.returncode != 0
    assert f'the sum of these {what} integers overflows in' in r.stderr + r.stdout


FORTRAN = su.BUILD / 'tests' / 'mpi' / 'allreduce_f'


@pytest.mark.parametrize('p,binding', [(2, 'mpi'), (3, 'mpi'), (4, 'mpi'), (3, 'mpi_f08'), (4, 'mpi_f08')])
def test_a_fortran_program_goes_through_prism_too(tmp_path, p, binding):
    """Debian's Fortran bindings call PMPI_Allreduce directly: libprism-mpi wraps their entry points
    (`use mpi`'s mpi_allreduce_, `use mpi_f08`'s mpi_allreduce_f08_). MPI_ALLREDUCE of REAL out of
    place and with Fortran's MPI_IN_PLACE, and MPI_REDUCE to rank 0: the exact sum rounded once;
    without the library Open MPI's sum differs from it (p >= 3)."""
    require()
    prog = FORTRAN.with_name('allreduce_f08') if binding == 'mpi_f08' else FORTRAN
    if not prog.is_file():
        pytest.fail(f'{prog} not built (scripts/setup.sh installs gfortran)')
    n = 50000
    global PROG
    saved, PROG = PROG, prog
    try:
        outs = {}
        for preload in (True, False):
            d = tmp_path / str(preload)
            d.mkdir()
            r = run(d, p, n, seed=0, preload=preload)
            assert r.returncode == 0, r.stdout + r.stderr
            outs[preload] = d
    finally:
        PROG = saved
    d = outs[True]
    ins = [np.fromfile(d / f'in{k}.f32', dtype=np.uint32) for k in range(p)]
    want = exact(ins)
    for k in range(p):
        o = np.fromfile(d / f'out{k}.f32', dtype=np.uint32)
        assert len(o) == (3 if k == 0 else 2) * n
        for part in range(len(o) // n):
            assert np.array_equal(o[part * n:(part + 1) * n], want), f'rank {k}, result {part}'
    if p >= 3:
        plain = np.fromfile(outs[False] / 'out0.f32', dtype=np.uint32)[:n]
        assert not np.array_equal(plain, want), "Open MPI's own sum was the exact one: the data show nothing"


def test_16_bit_words_as_bf16_with_prism_mpi_16bit(tmp_path):
    """PRISM_MPI_16BIT=bf16: MPI_UINT16_T buffers hold bf16 values, summed exactly and rounded once
    to bf16 (the reference model's bits); without it such a call is Open MPI's integer sum."""
    require()
    p, n = 3, 1000
    e = dict(os.environ, PRISM_MPI_16BIT='bf16')
    cmd = mpirun_prefix(p) + ['--mca', 'btl', 'self,tcp', '--mca', 'btl_tcp_if_include', 'lo',
                              '--mca', 'oob_tcp_if_include', 'lo', '--mca', 'mpi_yield_when_idle', '1',
                              '-x', 'LD_PRELOAD', '-x', 'LD_LIBRARY_PATH', '-x', 'PRISM_MPI_16BIT',
                              str(INTS), 'bf16', str(tmp_path)]
    e['LD_PRELOAD'], e['LD_LIBRARY_PATH'] = str(LIB), str(su.BUILD / 'lib')
    r = subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    files = [np.fromfile(tmp_path / f'h{k}.bin', dtype=np.uint16) for k in range(p)]
    out, flags = prism_ref.reduce('bf16', 'kulisch', 'bf16', 'ieee', [f[:n].tobytes() for f in files])
    want = np.frombuffer(out, dtype=np.uint16)
    for k, f in enumerate(files):
        assert np.array_equal(f[n:], want), f'rank {k}'


def test_the_osu_style_benchmark_runs_both_ways(tmp_path):
    """tools/bench_mpi.py --quick: the same program plainly and preloaded, every result checked
    against the exact sum by the program itself (--check), a row per size and mode."""
    require()
    out = tmp_path / 'mpi.json'
    r = subprocess.run(['/usr/bin/python3', str(Path(__file__).resolve().parents[2] / 'tools' / 'bench_mpi.py'),
                        '--build', str(su.BUILD), '--quick', '--json', str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    d = json.loads(out.read_text())
    assert {(x['mode'], x['bytes']) for x in d['results']} == \
        {(m, n) for m in ('mpi_tcp', 'mpi_vader', 'prism', 'prism_a') for n in (4, 4096)}
    assert all(x['seconds_median'] > 0 for x in d['results'])


AGENT = Path(__file__).resolve().parents[1] / 'mpi' / 'netns_agent.sh'


@pytest.mark.parametrize('p', [2, 3, 4])
def test_ranks_in_the_testbeds_namespaces_get_the_same_bits_through_the_switch_rhd_and_ring(make_testbed, tmp_path,
                                                                                             p):
    """mpirun in rank 0's namespace starts every other rank's daemon in that rank's namespace (as ssh
    would on another machine: tests/mpi/netns_agent.sh), Open MPI's TCP over the testbed's bridge.
    Rank 0 serves the store at its own address (PRISM_MPI_HOST); every rank's host links listen at
    its own. With PRISM_ALGO=switch the job comes from the switch's pool and is given back."""
    require()
    skip_unless_possible()
    count = 30011
    tb = make_testbed(ranks=p, layout='bridge', settings={'pools': pool_yaml(1000, 2, 4, '10.88.0.0/24')})
    netns_map, log = tb.dir / 'netns.map', tb.dir / 'launches.log'
    netns_map.write_text(''.join(f'{r.ip} {r.ns}\n' for r in tb.ranks))
    switch = tb.substitute('{switch_ip}', tb.ranks[0]) + ':20562'
    sent = []  # the switch's RESULTs after each run: the switch reduces, RHD and the ring do not use it
    sessions: list[Path] = []  # each mpirun's session directory, removed at the end
    try:
        _namespace_runs(tb, tmp_path, p, count, netns_map, log, switch, sent, sessions)
    finally:
        for d in sessions:
            shutil.rmtree(d, ignore_errors=True)


def _namespace_runs(tb, tmp_path, p, count, netns_map, log, switch, sent, sessions):
    for algo in ('switch', 'rhd', 'ring'):
        out = tmp_path / algo
        out.mkdir()
        env = dict(os.environ, PRISM_NETNS_MAP=str(netns_map), PRISM_NETNS_LOG=str(log), LD_PRELOAD=str(LIB),
                   LD_LIBRARY_PATH=str(su.BUILD / 'lib'), PRISM_MPI_HOST=tb.ranks[0].ip, PRISM_ALGO=algo,
                   PRISM_SWITCH=switch if algo == 'switch' else '', PRISM_POOL='1000' if algo == 'switch' else '0')
        cmd = ['ip', 'netns', 'exec', tb.ranks[0].ns] + mpirun_prefix(p) + [
            '--host', ','.join(f'{r.ip}:1' for r in tb.ranks), '--mca', 'plm_rsh_agent', str(AGENT),
            '--mca', 'btl', 'self,tcp', '--mca', 'btl_tcp_if_include', 'prism0', '--mca', 'oob_tcp_if_include',
            'prism0',
            # Open MPI 4.1.4's daemons write their hwloc topology into the largest hole of their address
            # space; now and then that hole is where the stack grows and the daemon segfaults in
            # hwloc_shmem_topology_write (seen once in CI). Without a hole it shares no topology.
            '--mca', 'rtc_hwloc_vmhole', 'none',
            # Every "node" here is this host: the daemons of one mpirun removed the shared session
            # directory (/tmp/ompi.HOST.UID) as they ended while the next mpirun's daemons made theirs in
            # it ("A call to mkdir was unable to create ... jf.N/0", seen once in CI). Each run its own.
            '--mca', 'orte_tmpdir_base', tempfile.mkdtemp(prefix='om', dir='/tmp')]
        sessions.append(Path(cmd[-1]))
        for k in ('LD_PRELOAD', 'LD_LIBRARY_PATH', 'PRISM_MPI_HOST', 'PRISM_ALGO', 'PRISM_SWITCH', 'PRISM_POOL'):
            cmd += ['-x', k]
        r = subprocess.run(cmd + [str(PROG), str(count), '11', str(out)], env=env, capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0, f'{algo}: {r.stdout}{r.stderr}'
        ins, outs, _ = results(out, p, count)
        want = exact(ins)
        for rank, o in enumerate(outs):
            assert np.array_equal(o[:count], want) and np.array_equal(o[count:], want), f'{algo}, rank {rank}'
        reducers = tb.telemetry('switch', ['/prism/reducers'])['/prism/reducers']
        sent.append(sum(v for k, v in reducers.items() if k.endswith('_results_sent')))
    launched = {line.split()[1] for line in log.read_text().splitlines()}
    assert launched >= {r.ns for r in tb.ranks[1:]}, f'the daemons did not start in the ranks\' namespaces: {launched}'
    pools = tb.telemetry('switch', ['/prism/pools'])['/prism/pools']
    assert pools['pool1000']['allocated'] == 1 and pools['pool1000']['released'] == 1, pools
    assert sent == [sent[0]] * 3 and sent[0] > 0, f'results the switch sent after switch, rhd, ring: {sent}'


SIG = su.BUILD / 'tests' / 'mpi' / 'signatures'
N, B = 5003, 777  # signatures.c's


def run_signatures(tmp: Path, p: int, mode: str, rank0_env: dict | None = None,
                   limit: int = 60) -> subprocess.CompletedProcess:
    """tests/mpi/signatures.c under libprism-mpi. `rank0_env`: variables set on rank 0 alone, by a
    wrapper script (OMPI_COMM_WORLD_RANK names the rank). mpirun's own --timeout ends a run that
    hangs (it says 'time limit'), and with it every rank."""
    require()
    if not SIG.is_file():
        pytest.fail(f'{SIG} not built')
    tmp.mkdir(parents=True, exist_ok=True)
    wrapper = tmp / 'rank0_env.sh'
    wrapper.write_text('#!/bin/sh\n' + f'export LD_PRELOAD={LIB}\n' +
                       ''.join(f'[ "$OMPI_COMM_WORLD_RANK" = 0 ] && export {k}={v}\n'
                               for k, v in (rank0_env or {}).items()) + 'exec "$@"\n')
    e = {k: v for k, v in os.environ.items() if not k.startswith('PRISM_') and k != 'LD_PRELOAD'}
    e['LD_LIBRARY_PATH'] = str(su.BUILD / 'lib')
    cmd = mpirun_prefix(p) + ['--mca', 'btl', 'self,tcp', '--mca', 'btl_tcp_if_include', 'lo',
                              '--mca', 'oob_tcp_if_include', 'lo', '--mca', 'mpi_yield_when_idle', '1',
                              '--timeout', str(limit), '-x', 'LD_LIBRARY_PATH',
                              '/bin/sh', str(wrapper), str(SIG), mode, str(tmp)]
    return subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=limit + 60)


@pytest.mark.parametrize('var,value,want', [
    ('PRISM_MPI_16BIT', 'bf16', 'rank 0 has PRISM_MPI_16BIT=bf16, rank 1 has none'),
    ('PRISM_MPI', 'off', 'rank 0 has PRISM_MPI=off, rank 1 has PRISM_MPI=on'),
    ('PRISM_ALGO', 'ring', 'rank 0 has PRISM_ALGO=ring, rank 1 has PRISM_ALGO=auto')])
def test_a_setting_on_one_rank_only_is_an_error_on_every_rank_not_a_hang(tmp_path, var, value, want):
    """Rank 0 alone has the setting. The first call (an MPI_UINT16_T sum, PRISM's under
    PRISM_MPI_16BIT) would take PRISM on some ranks and Open MPI on others, or the next (an MPI_INT
    sum) a different algorithm: instead every rank's first call is an MPI error naming the difference
    (the program uses MPI_ERRORS_RETURN and prints it), within seconds."""
    p = 3
    t0 = time.monotonic()
    r = run_signatures(tmp_path, p, 'settings', {var: value})
    took, out = time.monotonic() - t0, r.stdout + r.stderr
    assert 'time limit' not in out, f'hung ({took:.0f} s):\n{out}'
    assert r.returncode != 0, out
    for k in range(p):
        line = next((ln for ln in r.stdout.splitlines() if ln.startswith(f'rank {k}: ')), '')
        assert line.startswith(f'rank {k}: error: ') and want in line, f'rank {k}: {line!r}\n{out}'
    assert took < 40, f'{took:.0f} s'


def test_the_same_settings_everywhere_run_as_before(tmp_path):
    r = run_signatures(tmp_path, 3, 'settings')
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted(ln for ln in r.stdout.splitlines() if ln.startswith('rank ')) == \
        [f'rank {k}: ok' for k in range(3)], r.stdout


def test_bcast_and_allgather_decide_on_the_type_signature_not_the_handle(tmp_path):
    """MPI_Bcast: the root sends 4N MPI_INTs, rank 1 receives N contiguous(4, MPI_INT), rank 2 one
    vector of 4N ints at stride 2 (the same signature: valid MPI); MPI_Allgather: rank 1 sends one
    contiguous(B, MPI_INT), rank 2 receives P of them, the others MPI_INTs. Every rank gets the
    root's ints, and every rank's block, where its own type puts them."""
    p = 3
    r = run_signatures(tmp_path, p, 'derived')
    out = r.stdout + r.stderr
    assert 'time limit' not in out, f'hung:\n{out}'
    assert r.returncode == 0, out
    want_bc = (np.arange(4 * N, dtype=np.int64) * 7 + 3).astype(np.int32)
    want_ag = np.concatenate([k * 100000 + np.arange(B, dtype=np.int32) for k in range(p)])
    for k in range(p):
        assert np.array_equal(np.fromfile(tmp_path / f'bc{k}.bin', dtype=np.int32), want_bc), f'rank {k}: MPI_Bcast'
        assert np.array_equal(np.fromfile(tmp_path / f'ag{k}.bin', dtype=np.int32), want_ag), \
            f'rank {k}: MPI_Allgather'


def test_the_store_is_closed_once_the_group_is_set_up(tmp_path):
    """Nothing reads the rendezvous store after set-up: rank 0 no longer listens for it (nor any
    rank for anything else PRISM opened) once its first collective returns."""
    p = 2
    r = run_signatures(tmp_path, p, 'store')
    assert r.returncode == 0, r.stdout + r.stderr
    for k in range(p):
        left = (tmp_path / f'listen{k}.txt').read_text().split()
        assert left == [], f'rank {k} still listens at {left} (hex address:port, /proc/net/tcp)'
