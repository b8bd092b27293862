#!/usr/bin/python3
"""Trains examples/torch/train.py under several settings on this machine and
compares the final weights bit for bit with the first run's.

    PYTHONPATH=build/python /usr/bin/python3 examples/torch/compare.py --ranks 4 --steps 20

Under KULISCH_FIXED (PRISM's default policy) every setting gives the same bits:
another host algorithm, another DDP bucket size, gradients arriving in another
order. Under FP32_ARRIVAL and under Gloo they drift; the table says by how much
(the largest distance in units in the last place, and how many of the weights
differ). --switch IP:PORT --pool N adds runs through a PRISM switch's job pool.
--json writes the table. Each run is `--ranks` local processes started as
torchrun would (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT).
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
TRAIN = HERE / 'train.py'

# (label, reference label, policy, algorithm, train.py's extra arguments)
KULISCH = [
    ('prism kulisch auto, bucket 25 MB', None, 'kulisch', 'auto', []),
    ('prism kulisch ring, bucket 0.05 MB, jitter', 0, 'kulisch', 'ring', ['--bucket-cap-mb', '0.05', '--jitter', '1']),
    ('prism kulisch rhd, bucket 1 MB, jitter', 0, 'kulisch', 'rhd', ['--bucket-cap-mb', '1', '--jitter', '2']),
    ('prism kulisch binomial, bucket 0.2 MB', 0, 'kulisch', 'binomial', ['--bucket-cap-mb', '0.2']),
    ('prism kulisch chain, bucket 0.05 MB', 0, 'kulisch', 'chain', ['--bucket-cap-mb', '0.05']),
]
DRIFT = [
    ('prism fp32_arrival ring, bucket 25 MB', None, 'fp32_arrival', 'ring', []),
    ('prism fp32_arrival rhd, bucket 25 MB', 'prism fp32_arrival ring, bucket 25 MB', 'fp32_arrival', 'rhd', []),
    ('prism fp32_arrival ring, bucket 0.05 MB', 'prism fp32_arrival ring, bucket 25 MB', 'fp32_arrival', 'ring',
     ['--bucket-cap-mb', '0.05']),
    ('gloo, bucket 25 MB', None, None, None, ['--backend', 'gloo']),
    ('gloo, bucket 0.05 MB', 'gloo, bucket 25 MB', None, None, ['--backend', 'gloo', '--bucket-cap-mb', '0.05']),
    ('gloo, bucket 1 MB, jitter', 'gloo, bucket 25 MB', None, None, ['--backend', 'gloo', '--bucket-cap-mb', '1',
                                                                     '--jitter', '3']),
    ('gloo + prism hook (kulisch), bucket 25 MB', None, 'kulisch', 'auto', ['--backend', 'gloo', '--hook']),
    ('gloo + prism hook (kulisch), bucket 0.05 MB, jitter', 'gloo + prism hook (kulisch), bucket 25 MB', 'kulisch',
     'ring', ['--backend', 'gloo', '--hook', '--bucket-cap-mb', '0.05', '--jitter', '4']),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def train(ranks: int, steps: int, policy, algorithm, extra: list[str], env_extra: dict, out: Path,
          timeout: float) -> str:
    """Runs train.py on `ranks` local processes; returns rank 0's summary line."""
    port = free_port()
    procs = []
    for r in range(ranks):
        env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(ranks), MASTER_ADDR='127.0.0.1',
                   MASTER_PORT=str(port), OMP_NUM_THREADS='1', **env_extra)
        if policy:
            env['PRISM_POLICY'] = policy
        if algorithm:
            env['PRISM_ALGO'] = algorithm
        procs.append(subprocess.Popen([sys.executable, str(TRAIN), '--steps', str(steps), '--out', str(out), *extra],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = []
    for p in procs:
        try:
            o, e = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise SystemExit(f'compare: a run of train.py {" ".join(extra)} took over {timeout} s')
        outs.append((p.returncode, o, e))
    bad = [(r, rc, e) for r, (rc, o, e) in enumerate(outs) if rc != 0]
    if bad:
        r, rc, e = bad[0]
        raise SystemExit(f'compare: rank {r} of train.py {" ".join(extra)} exited {rc}:\n{e[-3000:]}')
    return outs[0][1].strip().splitlines()[-1]


def ordered(w: np.ndarray) -> np.ndarray:
    """fp32 bits as integers in the floats' order: the difference of two is their distance in ULPs."""
    i = w.view(np.int32).astype(np.int64)
    return np.where(i < 0, -(i & 0x7FFFFFFF), i)


def drift(a: np.ndarray, b: np.ndarray) -> tuple[int, int]:
    """(largest distance in ULPs, elements whose bits differ)."""
    return int(np.abs(ordered(a) - ordered(b)).max()), int(np.count_nonzero(a.view(np.int32) != b.view(np.int32)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--ranks', type=int, default=4)
    ap.add_argument('--steps', type=int, default=20)
    ap.add_argument('--switch', help='a PRISM switch "ip:port" with a job pool: adds runs through it')
    ap.add_argument('--pool', type=int, default=0)
    ap.add_argument('--only', choices=('kulisch', 'drift'), help='one half of the table')
    ap.add_argument('--json', help='writes the rows here')
    ap.add_argument('--timeout', type=float, default=300)
    a = ap.parse_args()
    runs = ([] if a.only == 'drift' else KULISCH) + ([] if a.only == 'kulisch' else DRIFT)
    if a.switch:
        if not a.pool:
            ap.error('--switch needs --pool (the switch\'s job pool to take a job from)')
        runs = runs + [('prism kulisch switch, bucket 0.05 MB, jitter', 0, 'kulisch', 'switch',
                        ['--bucket-cap-mb', '0.05', '--jitter', '5'])]
    weights: dict[str, np.ndarray] = {}
    rows = []
    print(f'{a.ranks} ranks, {a.steps} steps of DDP training; each row against its reference\'s weights')
    print(f'{"run":<56} {"weights":<17} {"same bits":<10} {"max ULP":>8} {"differ":>8}   '
          f'{"vs exact: max ULP":>17} {"differ":>8} {"ms/step":>8}')
    with tempfile.TemporaryDirectory() as tmp:
        for i, (label, ref, policy, algorithm, extra) in enumerate(runs):
            out = Path(tmp) / f'w{i}.bin'
            env = {'PRISM_SWITCH': a.switch, 'PRISM_POOL': str(a.pool)} if algorithm == 'switch' else {}
            line = train(a.ranks, a.steps, policy, algorithm, extra, env, out, a.timeout)
            w = np.frombuffer(out.read_bytes(), dtype=np.float32)
            weights[label] = w
            ref_label = runs[ref][0] if isinstance(ref, int) else ref
            row = {'run': label, 'reference': ref_label, 'weights_digest': line.split('weights ')[1].split(',')[0],
                   'elements': int(w.size), 'ms_per_step': float(line.split(', ')[-1].split(' ms')[0])}
            cells = f'{"(ref)":<10} {"":>8} {"":>8}'
            if ref_label:
                ulp, differ = drift(w, weights[ref_label])
                row.update(same_bits=differ == 0, max_ulp=ulp, elements_differing=differ)
                cells = f'{"yes" if differ == 0 else "no":<10} {ulp:>8} {differ:>8}'
            exact = weights.get(KULISCH[0][0])
            if exact is not None:  # how far from training on exact sums
                ulp, differ = drift(w, exact)
                row.update(max_ulp_vs_exact=ulp, elements_differing_vs_exact=differ)
                cells += f'   {ulp:>17} {differ:>8}'
            else:
                cells += f'   {"":>17} {"":>8}'
            print(f'{label:<56} {row["weights_digest"]:<17} {cells} {row["ms_per_step"]:>8.1f}')
            rows.append(row)
    if a.json:
        Path(a.json).write_text(json.dumps({'ranks': a.ranks, 'steps': a.steps, 'rows': rows}, indent=1) + '\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
