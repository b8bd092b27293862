#!/usr/bin/python3
"""Trains a small MLP with DistributedDataParallel for --steps steps and writes
rank 0's final weights (float32, every parameter in order) to --out.

    # 4 processes on this machine, through PRISM's backend (exact sums):
    PYTHONPATH=build/python /usr/bin/python3 -m torch.distributed.run --standalone --nproc_per_node 4 \\
        examples/torch/train.py --steps 20 --out w.bin

--backend prism (default) | gloo; --hook: the gloo process group with PRISM's
DDP communication hook. PRISM's options come from the environment (PRISM_POLICY,
PRISM_ALGO, PRISM_SWITCH, PRISM_POOL: docs/TORCH.md). --jitter SEED sleeps a
random 0-3 ms before each backward on every rank, so gradients reach the
reduction in another order each run. examples/torch/compare.py runs it under
several settings and compares the weights bit for bit.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def model() -> torch.nn.Module:
    torch.manual_seed(0)  # every rank starts from the same weights (DDP also broadcasts rank 0's)
    # 550k parameters (2.2 MB): more than DDP's first bucket (1 MB), so --bucket-cap-mb splits the rest
    return torch.nn.Sequential(torch.nn.Linear(32, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(),
                               torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))


def batch(rank: int, step: int, teacher: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * step + rank)  # each rank its own data
    x = torch.randn(64, 32, generator=g)
    return x, torch.tanh(x @ teacher)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--steps', type=int, default=20)
    ap.add_argument('--backend', choices=('prism', 'gloo'), default='prism')
    ap.add_argument('--hook', action='store_true', help='PRISM as a DDP communication hook over a gloo group')
    ap.add_argument('--bucket-cap-mb', type=float, default=25.0)
    ap.add_argument('--jitter', type=int, default=0, help='seed of the random sleeps (0: none)')
    ap.add_argument('--out', help="rank 0 writes the final weights' bytes here")
    ap.add_argument('--digests', help="rank 0 writes its collectives' records, digests on (JSON lines), here")
    a = ap.parse_args()
    if a.hook and a.backend != 'gloo':
        ap.error('--hook runs over a gloo process group: add --backend gloo')
    torch.set_num_threads(1)  # the same kernels (and so the same local gradients) every run

    if a.digests:
        os.environ['PRISM_TORCH_DIGEST'] = '1'
    import prism_torch  # registers the backend
    dist.init_process_group(a.backend)
    rank, size = dist.get_rank(), dist.get_world_size()
    net = DDP(model(), bucket_cap_mb=a.bucket_cap_mb)
    state = None
    if a.hook:
        state = prism_torch.HookState()
        net.register_comm_hook(state, prism_torch.allreduce_hook)
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    teacher = torch.randn(32, 10, generator=torch.Generator().manual_seed(7))
    jitter = random.Random(a.jitter * 1000 + rank) if a.jitter else None
    t0 = time.perf_counter()
    for step in range(a.steps):
        if step == 1:
            t0 = time.perf_counter()  # the first step carries set-up (auto's calibration)
        x, y = batch(rank, step, teacher)
        loss = torch.nn.functional.mse_loss(net(x), y)
        opt.zero_grad()
        if jitter:
            time.sleep(jitter.uniform(0, 0.003))
        loss.backward()
        opt.step()
    step_ms = (time.perf_counter() - t0) / max(a.steps - 1, 1) * 1e3
    weights = torch.cat([p.detach().reshape(-1) for p in net.module.parameters()])
    if rank == 0:
        if a.out:
            with open(a.out, 'wb') as f:
                f.write(weights.numpy().tobytes())
        if a.digests and (a.backend == 'prism' or a.hook):
            with open(a.digests, 'w') as f:
                f.writelines(json.dumps(r) + '\n' for r in prism_torch.records(state))
        how = 'gloo' + (' + prism hook' if a.hook else '') if a.backend == 'gloo' else 'prism'
        det = prism_torch.determinism(state) if (a.backend == 'prism' or a.hook) else 'none (gloo)'
        print(f'{how}: {size} ranks, {a.steps} steps, bucket {a.bucket_cap_mb} MB, loss {loss.item():.6f}, '
              f'weights {prism_torch.digest(weights)}, determinism {det}, {step_ms:.1f} ms/step')
    if state:
        state.close()
    dist.destroy_process_group()
    return 0


if __name__ == '__main__':
    sys.exit(main())
