#!/usr/bin/python3
"""Gloo's allreduce (torch.distributed, backend gloo, CPU tensors), timed as prism-rank times its
collectives: one rank of P; tools/bench_coll.py --compare starts P of them beside the host algorithms.

    GLOO_SOCKET_IFNAME=lo /usr/bin/python3 tools/gloo_allreduce.py --rank R --ranks P \\
        --init file:///tmp/store [--sizes 1048576,16777216] [--dtype fp32] [--warmup 1] \\
        [--repeat N | --target-seconds T [--min-repeat A] [--max-repeat B]] [--check]

Each rank allreduces (sum, in place, as torch.distributed does) a CPU tensor of each size: --warmup
untimed collectives, then --repeat timed ones back to back, each rank timing its own (no barrier
between them, as prism-rank). --target-seconds: the repeat from the slowest rank's last warmup (about T
seconds measured), the same on every rank. Rank 0 prints one JSON object per size: the slowest
rank's median and min of its own times (seconds_median, seconds_min), Gbit/s (input bytes / that
median), CPU seconds of every rank, and a digest (BLAKE2b-64 of the result's bytes).

Data and --check: element i of rank r is a multiple of 1/256 of magnitude at most 1000/256 (fp32),
so every partial sum of up to 2^12 ranks is exact whatever the order: --check recomputes the exact
sum with numpy from every rank's generator (in float64, without torch; the formula of
tools/mpi/mpi_allreduce.cpp; bf16: integers of magnitude at most 16) and compares it with the
last result element by element, each rank a 1/P share; a difference is reported (check_differ) and
the exit status is 1. The tensor is re-filled before every collective (an in-place allreduce
overwrites its input); the copy is outside the timed region.

--dtype bf16 is refused by this torch's gloo backend on CPU (Debian 12's torch 1.13: "Invalid
scalar type"); the program says so in its JSON (error, unsupported: true) and exits with status 3
rather than measuring something else. Exit status: 0 done (and checked), 1 a check or collective
failed, 2 torch missing, 3 the dtype unsupported.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import sys
import time


def values(lo: int, hi: int, r: int, dtype: str, np):
    """Elements lo..hi-1 of rank r, as float64 (tools/mpi/mpi_allreduce.cpp's formula): fp32 a
    multiple of 1/256 of magnitude at most 1000/256, bf16 an integer of magnitude at most 16."""
    i = np.arange(lo, hi, dtype=np.uint64)
    h = (i * np.uint64(2654435761) + np.uint64(r * 40503)) & np.uint64(0xffffffff)
    if dtype == 'bf16':
        return (h % np.uint64(33)).astype(np.int64).astype(np.float64) - 16.0
    return ((h % np.uint64(2001)).astype(np.int64) - 1000).astype(np.float64) / 256.0


def cpu_now() -> float:
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--rank', type=int, required=True)
    ap.add_argument('--ranks', type=int, required=True)
    ap.add_argument('--init', required=True, help='torch init_method: file:///PATH or tcp://127.0.0.1:PORT')
    ap.add_argument('--sizes', default='1048576', help='bytes per rank, comma-separated')
    ap.add_argument('--dtype', default='fp32', choices=['fp32', 'bf16'])
    ap.add_argument('--backend', default='gloo', choices=['gloo', 'prism'])
    ap.add_argument('--build', default=os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'build'),
                    help='where prism_torch was built (--backend prism)')
    ap.add_argument('--repeat', type=int, default=5)
    ap.add_argument('--warmup', type=int, default=1)
    ap.add_argument('--target-seconds', type=float, default=0)
    ap.add_argument('--min-repeat', type=int, default=2)
    ap.add_argument('--max-repeat', type=int, default=20)
    ap.add_argument('--threads', type=int, default=1, help='torch intra-op threads (default 1)')
    ap.add_argument('--check', action='store_true')
    a = ap.parse_args(argv)
    try:
        import numpy as np
        import torch
        import torch.distributed as dist
    except ImportError as e:
        print(f'torch_allreduce: {e}: install Debian\'s python3-torch (scripts/setup.sh)', file=sys.stderr)
        return 2
    torch.set_num_threads(a.threads)
    os.environ.setdefault('GLOO_SOCKET_IFNAME', 'lo')
    if a.backend == 'prism':
        sys.path.insert(0, os.path.join(a.build, 'python'))
        import prism_torch  # noqa: F401  (registers the backend)
    dist.init_process_group(a.backend, init_method=a.init, rank=a.rank, world_size=a.ranks)
    ctl = dist.new_group(backend='gloo') if a.backend != 'gloo' else None  # the bookkeeping's
    tdtype = {'fp32': torch.float32, 'bf16': torch.bfloat16}[a.dtype]
    esz = 4 if a.dtype == 'fp32' else 2
    status = 0
    warmup = max(a.warmup, 1 if a.target_seconds > 0 else 0)
    for nbytes in (int(x) for x in a.sizes.split(',') if x.strip()):
        n = nbytes // esz
        src = torch.from_numpy(values(0, n, a.rank, a.dtype, np).astype(np.float32)).to(tdtype)
        buf = src.clone()
        out = {'impl': a.backend, 'policy': os.environ.get('PRISM_POLICY', 'kulisch') if a.backend == 'prism' else None,
               'ranks': a.ranks, 'dtype': a.dtype, 'bytes': n * esz, 'warmup': warmup,
               'timing': 'back_to_back', 'torch': torch.__version__}
        try:
            own, warm, cpu = [], 0.0, 0.0
            reps = a.repeat
            it = 0
            while it < warmup + reps:
                buf.copy_(src)
                c0, t0 = cpu_now(), time.perf_counter()
                dist.all_reduce(buf, op=dist.ReduceOp.SUM)
                t = time.perf_counter() - t0
                if it < warmup:
                    warm = t   # the last warmup's: the first may carry one-time set-up (auto's calibration)
                else:
                    own.append(t)
                    cpu += cpu_now() - c0
                it += 1
                if a.target_seconds > 0 and it == warmup:   # the slowest rank's decides, on every rank
                    w = torch.tensor([warm], dtype=torch.float64)
                    dist.all_reduce(w, op=dist.ReduceOp.MAX, group=ctl)
                    w = float(w[0])
                    reps = a.max_repeat if w <= 0 else round(a.target_seconds / w)
                    reps = max(a.min_repeat, min(max(a.min_repeat, a.max_repeat), reps))
        except RuntimeError as e:
            out['error'] = f'torch {torch.__version__} {a.backend} allreduce of {a.dtype}: {e}'
            out['unsupported'] = 'Invalid scalar type' in str(e)
            if a.rank == 0:
                print(json.dumps(out), flush=True)
            # the group is unusable after a failed collective (its barrier fails too): leave now
            sys.stdout.flush()
            os._exit(3 if out['unsupported'] else 1)
        own.sort()
        worst = torch.tensor([own[len(own) // 2], own[0]], dtype=torch.float64)   # this rank's median, min
        dist.all_reduce(worst, op=dist.ReduceOp.MAX, group=ctl)
        cpu_all = torch.tensor([cpu], dtype=torch.float64)
        dist.all_reduce(cpu_all, op=dist.ReduceOp.SUM, group=ctl)
        out.update({'repeat': reps, 'seconds_min': float(worst[1]), 'seconds_median': float(worst[0]),
                    'gbit_s': n * esz * 8 / float(worst[0]) / 1e9, 'cpu_seconds': float(cpu_all[0])})
        res = buf.float().numpy()
        if a.check:
            lo, hi = n * a.rank // a.ranks, n * (a.rank + 1) // a.ranks
            want = sum(values(lo, hi, r, a.dtype, np) for r in range(a.ranks))
            bad = torch.tensor([int(np.count_nonzero(res[lo:hi].astype(np.float64) != want))], dtype=torch.int64)
            dist.all_reduce(bad, op=dist.ReduceOp.SUM, group=ctl)
            out['checked'] = True
            out['check_differ'] = int(bad[0])
            if out['check_differ']:
                status = 1
        raw = buf.view(torch.int16 if esz == 2 else torch.int32).numpy().tobytes()
        out['digest'] = hashlib.blake2b(raw, digest_size=8).hexdigest()
        if a.rank == 0:
            print(json.dumps(out), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return status


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
