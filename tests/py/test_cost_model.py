"""prism-rank's cost models and `--algo auto` (lib/coll/cost_model.hpp, issue 18), from outside.

The model is written here a second time, from the seeds' text (seed 000's binomial tree
ceil(log2 p)(T_start + n T_byte) and pipelined chain (T_start + n/m T_byte)(p + m - 2) with
m = sqrt(n (p-2) T_byte / T_start); seed 001's RHD table with its non-power-of-two fold and
unfold terms; the ring's 2(p-1) alpha + 2(p-1)/p n beta + (p-1)/p n gamma), with the adaptations
docs/HOST_COLLECTIVES.md states (alpha once per block for RHD and the ring; partials of w bytes
per input byte; results of o; the hand-made calibrations have one gamma for every block size). Ranks run as local processes over loopback TCP with hand-made
calibrations, so the expected choice is known here: every algorithm's prediction must equal this
file's formula, `auto` must pick this file's argmin (and the chain's m the seed's), every rank
the same, and the result must still be the reference model's (--check). Then a real --calibrate
run, and calibration files that are wrong in each way.
"""
from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

import switch_util as su

RANK = su.BUILD / 'app' / 'prism-rank'
REPO = Path(__file__).resolve().parents[2]
BINOMIAL_BLOCK, RHD_BLOCK = 4096, 65536


def ring_block(p: int) -> int:
    """lib/coll/ring.hpp ring_block(p): 65536 elements at p = 2, 262144 above."""
    return 65536 if p <= 2 else 262144


def loopback_config(tmp: Path, p: int) -> Path:
    # below the kernel's ephemeral ports (32768-60999), which the ranks' own connections take
    base = random.randint(20000, 32700 - p)
    members = '\n'.join(f'      - {{rank: {r}, port: 0, mac: "02:00:00:00:00:{r:02x}", ip: 127.0.0.1, '
                        f'udp_port: {base + r}}}' for r in range(p))
    path = tmp / f'p{p}_{base}.yaml'
    path.write_text('switch: {id: 1, role: root}\nports:\n'
                    '  - {id: 0, device: "", mac: "02:00:00:00:ff:00", ip: 10.0.0.254}\n'
                    f'jobs:\n  - id: 7\n    group: {p}\n    members:\n{members}\n')
    return path


def run_ranks(cfg: Path, p: int, args: list[str], timeout: float = 120) -> list[subprocess.CompletedProcess]:
    procs = [subprocess.Popen([str(RANK), '--config', str(cfg), '--rank', str(r)] + args, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in range(p)]
    out = []
    try:
        for pr in procs:
            so, se = pr.communicate(timeout=timeout)
            out.append(subprocess.CompletedProcess(pr.args, pr.returncode, so, se))
    finally:
        for pr in procs:
            if pr.poll() is None:
                pr.kill()
                pr.wait()
    return out


# ---- the seeds' formulas, written again ------------------------------------------------------

def blocks(count: int, block: int) -> int:
    return max(1, -(-count // block))


def seed_prediction(algo: str, coll: str, p: int, count: int, esz: int, c: dict, m: int | None = None):
    a, b, g, w, o = c['alpha'], c['beta'], c['gamma'], c['partial_ratio'], c['out_ratio']
    n = count * esz
    red, res = w * b + g, o * b  # a partial sent and merged; a result moved (per input byte)
    if p == 1:
        return 0.0
    L = math.ceil(math.log2(p))
    k = int(math.floor(math.log2(p)))
    q = 2 ** k
    f = 1 if p != q else 0
    if algo == 'binomial':  # its blocks stream: alpha once per level, as the seed counts it, and
        # each block of 4096 elements a gap at each level, up and (allreduce) down again
        gap = c.get('gap', 0) * blocks(count, 4096)
        reduce_ = L * (a + gap + n * red)
        if coll == 'reduce':
            return reduce_
        return reduce_ + L * (a + gap + n * res)
    if algo == 'chain':
        t_start, t_byte = (2 * a, red + res) if coll == 'allreduce' else (a, red)
        if m is None:
            m = seed_chain_m(n, p, t_start, t_byte, count)
        return (t_start + n / m * t_byte) * (p + m - 2)
    if algo == 'rhd':
        B = blocks(count, RHD_BLOCK)
        if coll == 'allreduce':  # seed 001: (2 floor(log p) + 2) alpha + ... for p not a power of two
            return (2 * k + 2 * f) * B * a + (f + (q - 1) / q) * n * (red + res)
        return (2 * k + f) * B * a + (f + (q - 1) / q) * n * red + (q - 1) / q * n * res
    if algo == 'ring':
        if coll != 'allreduce':
            return None
        B = blocks(count, ring_block(p))
        return 2 * (p - 1) * B * a + (p - 1) / p * n * (red + res)
    raise AssertionError(algo)


def seed_chain_m(n: int, p: int, t_start: float, t_byte: float, count: int) -> int:
    """Seed 000's m = sqrt(n (p - 2) T_byte / T_start), the better integer beside it, and
    segments of at most 65536 elements (HOST_COLLECTIVES.md)."""
    if n <= 1 or p <= 2:
        return 1
    x = math.sqrt(n * (p - 2) * t_byte / t_start) if t_start > 0 else float('inf')
    if not x >= 1:
        m = 1
    elif x >= n:
        m = n
    else:
        lo = math.floor(x)
        t = lambda mm: (t_start + n / mm * t_byte) * (p + mm - 2)  # noqa: E731
        m = lo + 1 if t(lo + 1) < t(lo) else lo
    m = max(m, -(-count // 65536))  # a segment holds at most 65536 elements (its memory)
    return max(1, min(m, count))


# ---- the tests -------------------------------------------------------------------------------

CALIBRATIONS = {
    # latency dominates: few messages win
    'latency': dict(alpha=2e-3, beta=1e-12, gamma=1e-12, partial_ratio=1.9, out_ratio=1.0),
    # the wire dominates: the ring's and RHD's (p-1)/p win
    'wire': dict(alpha=1e-9, beta=5e-8, gamma=1e-12, partial_ratio=1.0, out_ratio=1.0),
    # in between: the pipelined chain's m matters
    'mixed': dict(alpha=2e-5, beta=1e-9, gap=4e-6, gamma=2e-8, partial_ratio=1.9, out_ratio=1.0),
}


@pytest.mark.parametrize('p', [3, 5, 8])
def test_auto_picks_the_seed_formulas_argmin(tmp_path, p):
    su.require_binaries(RANK)
    cfg = loopback_config(tmp_path, p)
    chosen = set()
    for cname, cal in CALIBRATIONS.items():
        cal_file = tmp_path / f'{cname}.json'
        cal_file.write_text(json.dumps(cal))
        for coll, size in (('allreduce', '1KiB'), ('allreduce', '1MiB'), ('reduce', '256KiB')):
            count = {'1KiB': 256, '1MiB': 262144, '256KiB': 65536}[size]
            runs = run_ranks(cfg, p, ['--algo', 'auto', '--candidates', 'binomial,chain,rhd,ring', '--calibration',
                                      str(cal_file), '--size', size, '--collective', coll, '--check', '--json'])
            assert all(r.returncode == 0 for r in runs), '\n'.join(r.stdout + r.stderr for r in runs)
            lines = [json.loads(r.stdout.strip().splitlines()[-1]) for r in runs]
            want = {}
            for algo in ('binomial', 'chain', 'rhd', 'ring'):
                t = seed_prediction(algo, coll, p, count, 4, cal)
                if t is not None:
                    want[algo] = t
            best = min(want, key=lambda a: (want[a], ['binomial', 'chain', 'rhd', 'ring'].index(a)))
            for ln in lines:
                ctx = f'p={p} {cname} {coll} {size}: rank {ln["rank"]}'
                assert set(ln['predictions']) == set(want), ctx
                for algo, t in want.items():
                    assert ln['predictions'][algo] == pytest.approx(t, rel=1e-5), f'{ctx}: {algo}'
                # the least prediction (an exact tie, rounded differently here and there, either way)
                tied = {x for x in want if want[x] <= want[best] * (1 + 1e-9)}
                assert ln['algo_requested'] == 'auto' and ln['algo'] in tied, f'{ctx}: {ln["algo"]} not {tied} {want}'
                assert ln['predicted_seconds'] == pytest.approx(want[ln['algo']], rel=1e-5), ctx
                if ln['algo'] == 'chain':
                    t_start, t_byte = ((2 * cal['alpha'], cal['partial_ratio'] * cal['beta'] + cal['gamma'] +
                                        cal['out_ratio'] * cal['beta']) if coll == 'allreduce' else
                                       (cal['alpha'], cal['partial_ratio'] * cal['beta'] + cal['gamma']))
                    assert ln['segments'] == seed_chain_m(count * 4, p, t_start, t_byte, count), ctx
                assert ln['check_beyond_bound'] == 0, ctx
            assert len({ln['digest'] for ln in lines if ln['digest']}) == 1
            chosen.add(best)
    # the three calibrations do not all choose alike: auto follows the model
    assert len(chosen) >= 2, chosen


def test_calibrate_measures_this_machine(tmp_path):
    su.require_binaries(RANK)
    cfg = loopback_config(tmp_path, 3)
    out = tmp_path / 'cal.json'
    runs = run_ranks(cfg, 3, ['--calibrate', str(out), '--candidates', 'binomial,chain,rhd,ring', '--size', '1MiB'])
    assert all(r.returncode == 0 for r in runs), '\n'.join(r.stdout + r.stderr for r in runs)
    cal = json.loads(out.read_text())
    assert cal['alpha'] > 0 and cal['beta'] > 0 and cal['gamma'] > 0, cal
    # KULISCH partials of fp32 sums travel as packed lanes, wider than the input
    assert cal['partial_ratio'] > 1 and cal['out_ratio'] == 1, cal  # an fp32 (status bytes only when set)
    assert not cal['have_switch'], cal
    # three ranks on this one host (one boot id), with the cores this process may use
    assert cal['ranks_per_host'] == 3 and cal['host_cores'] == len(os.sched_getaffinity(0)), cal
    assert 'ping-pong 8 bytes' in runs[0].stderr
    # bf16 in, fp32 out under FP32_ARRIVAL: partials are fp32, twice the input; results fp32, twice too
    runs = run_ranks(cfg, 3, ['--calibrate', str(out), '--candidates', 'ring', '--dtype', 'bf16', '--out-dtype', 'fp32',
                              '--policy', 'fp32_arrival', '--size', '64KiB'])
    assert all(r.returncode == 0 for r in runs), '\n'.join(r.stdout + r.stderr for r in runs)
    cal = json.loads(out.read_text())
    assert cal['partial_ratio'] == pytest.approx(2, rel=0.01) and cal['out_ratio'] == 2, cal


@pytest.mark.parametrize('text, says', [
    ('{"alpha": 1e-6, "beta": 1e-9, "gamma": 1e-9, "partial_ratio": 1}', 'no "out_ratio"'),
    ('{"alpha": -1, "beta": 1e-9, "gamma": 1e-9, "partial_ratio": 1, "out_ratio": 1}', '"alpha" is out of range'),
    ('{"alpha": "fast", "beta": 1e-9, "gamma": 1e-9, "partial_ratio": 1, "out_ratio": 1}', '"alpha" is not a number'),
    ('[1, 2, 3]', 'expected a JSON object'),
    ('{"alpha": [', 'not a calibration'),
])
def test_a_bad_calibration_is_refused_with_its_reason(tmp_path, text, says):
    su.require_binaries(RANK)
    cfg = loopback_config(tmp_path, 2)
    bad = tmp_path / 'bad.json'
    bad.write_text(text)
    r = subprocess.run([str(RANK), '--config', str(cfg), '--rank', '0', '--algo', 'auto', '--calibration', str(bad)],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and says in r.stderr and '--calibrate FILE' in r.stderr, r.stderr


def test_usage_errors(tmp_path):
    su.require_binaries(RANK)
    cfg = loopback_config(tmp_path, 2)
    for args, says in ((['--algo', 'auto', '--candidates', 'ring,auto'], 'auto is not one'),
                       (['--algo', 'ring', '--candidates', 'ring'], 'give it with --algo auto'),
                       (['--algo', 'auto', '--candidates', 'bogus'], "unknown --candidates algorithm 'bogus'"),
                       (['--calibration', 'a.json', '--calibrate', 'b.json'], 'not both'),
                       (['--algo', 'auto', '--calibration', str(tmp_path / 'missing.json')], 'cannot read'),
                       (['--algo', 'chain', '--collective', 'reduce', '--root', '1'], 'reduces to rank 0')):
        r = subprocess.run([str(RANK), '--config', str(cfg), '--rank', '0'] + args, capture_output=True, text=True,
                           timeout=30)
        assert r.returncode == 2 and says in r.stderr, (args, r.stderr)


def test_a_calibration_is_for_its_op_and_group(tmp_path):
    """--calibrate records what it measured: gamma and w belong to one op, the hosts to one group."""
    su.require_binaries(RANK)
    cfg3, cfg2 = loopback_config(tmp_path, 3), loopback_config(tmp_path, 2)
    cal = tmp_path / 'cal.json'
    runs = run_ranks(cfg3, 3, ['--calibrate', str(cal), '--candidates', 'ring', '--size', '64KiB'])
    assert all(r.returncode == 0 for r in runs), '\n'.join(r.stdout + r.stderr for r in runs)
    rec = json.loads(cal.read_text())
    assert rec['op'] == 'fp32->fp32 kulisch ieee' and rec['ranks'] == 3, rec
    r = subprocess.run([str(RANK), '--config', str(cfg3), '--rank', '0', '--algo', 'ring', '--calibration', str(cal),
                        '--policy', 'fp32_arrival'], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and 'was measured for fp32->fp32 kulisch ieee' in r.stderr, r.stderr
    runs = run_ranks(cfg2, 2, ['--algo', 'ring', '--calibration', str(cal)])
    assert all(x.returncode == 2 and 'measured in a group of 3 ranks, this one has 2' in x.stderr for x in runs), \
        [x.stderr for x in runs]


def test_auto_without_a_switch_says_how_to_leave_it_out(tmp_path):
    """auto's default candidates include the switch; with none there (loopback: no switch's MAC
    on lo), the error says how to choose among the host algorithms alone."""
    su.require_binaries(RANK)
    cfg = loopback_config(tmp_path, 2)
    r = subprocess.run([str(RANK), '--config', str(cfg), '--rank', '0', '--algo', 'auto'], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode != 0 and '--candidates binomial,chain,rhd,ring' in r.stderr, r.stderr
    r = subprocess.run([str(RANK), '--config', str(cfg), '--rank', '0', '--algo', 'auto', '--candidates',
                        'binomial,chain', '--collective', 'allgather'], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and 'no algorithm of --candidates runs allgather' in r.stderr, r.stderr


def test_each_algorithms_fp32_binomial_bits_are_checked_for_what_they_are(tmp_path):
    """FP32_BINOMIAL through the binomial tree is the accumulator's binomial order over its ranks
    relabelled (rank - root) mod p: bit for bit, at any root. Through the chain, RHD and the ring it
    is their own order: within the bound of the exact sum."""
    su.require_binaries(RANK)
    cfg = loopback_config(tmp_path, 5)
    for args in (['--algo', 'binomial', '--collective', 'reduce', '--root', '2'],
                 ['--algo', 'binomial'], ['--algo', 'chain'], ['--algo', 'rhd'], ['--algo', 'ring'],
                 ['--algo', 'rhd', '--collective', 'reduce_scatter']):
        runs = run_ranks(cfg, 5, args + ['--policy', 'fp32_binomial', '--count', '70001', '--check', '--json'])
        assert all(r.returncode == 0 for r in runs), (args, '\n'.join(r.stdout + r.stderr for r in runs))
        lines = [json.loads(r.stdout.strip().splitlines()[-1]) for r in runs]
        if args[1] == 'binomial':  # exact
            assert all(ln['check_differ'] == 0 for ln in lines), (args, lines)


def test_reduce_scatter_blocks_put_together_are_the_allreduce(tmp_path):
    """Each rank's reduce_scatter block, written to its own --output (FILE with {rank}), in rank
    order, gives the allreduce's bytes (KULISCH_FIXED: one rounding per element wherever)."""
    su.require_binaries(RANK)
    p, count = 5, 100003
    cfg = loopback_config(tmp_path, p)
    for algo in ('rhd', 'ring'):
        runs = run_ranks(cfg, p, ['--algo', algo, '--collective', 'reduce_scatter', '--count', str(count),
                                  '--output', str(tmp_path / f'rs_{algo}_{{rank}}.bin')])
        assert all(r.returncode == 0 for r in runs), '\n'.join(r.stdout + r.stderr for r in runs)
    runs = run_ranks(cfg, p, ['--algo', 'binomial', '--count', str(count), '--output', str(tmp_path / 'ar.bin')])
    assert all(r.returncode == 0 for r in runs), '\n'.join(r.stdout + r.stderr for r in runs)
    whole = (tmp_path / 'ar.bin').read_bytes()
    for algo in ('rhd', 'ring'):
        parts = [(tmp_path / f'rs_{algo}_{r}.bin').read_bytes() for r in range(p)]
        # blocks in rank order, the first count % p one element larger
        assert [len(x) // 4 for x in parts] == [count // p + (r < count % p) for r in range(p)], algo
        assert b''.join(parts) == whole, algo


def test_auto_replay_scores_this_model_on_recorded_runs():
    """tools/auto_replay.py: auto's choice from each recorded calibration, scored against the times
    the run measured. Its count of what the run itself chose is the run's own summary's."""
    runs = sorted((REPO / 'docs' / 'data').glob('host_collectives*.json'))
    env = dict(os.environ, PYTHONPATH=str(su.BUILD / 'python'))
    r = subprocess.run([sys.executable, str(REPO / 'tools' / 'auto_replay.py'), *map(str, runs)], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    for path in runs:
        line = next(ln for ln in r.stdout.splitlines() if ln.startswith(str(path)))
        s = json.loads(path.read_text())['summary']['auto']['both']
        assert f"{s['within_10pct']}/{s['cells']} chosen in the run" in line, (line, s)
