"""PRISM for PyTorch (docs/TORCH.md): a `prism` backend for torch.distributed and
a DDP communication hook, both over libprism's exact collectives.

    import torch.distributed as dist, prism_torch      # registers the backend
    dist.init_process_group('prism')                   # torchrun's env://; the switch via PRISM_SWITCH/PRISM_POOL
    dist.all_reduce(grad)                              # exact: the same bits whatever the order or algorithm
    prism_torch.determinism()                          # 'exact'
    prism_torch.last_record()['digest']                # the last result's XXH3-64 (PRISM_TORCH_DIGEST=1)

Options (policy, algorithm, switch, pool, log) come from the environment or
from `init_process_group('prism', pg_options=prism_torch.Options(...))`.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from .backend import SUM_DTYPES, Options, ProcessGroupPrism, create, digest  # noqa: F401
from .hook import HookState, allreduce_hook  # noqa: F401

if not hasattr(dist.Backend, 'PRISM'):
    dist.Backend.register_backend('prism', create, extended_api=True)


def _prism_group(group) -> ProcessGroupPrism:
    if isinstance(group, HookState):
        return group.pg
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    if not isinstance(pg, ProcessGroupPrism):
        raise ValueError(f'{type(pg).__name__} is not a prism process group (init_process_group("prism") or '
                         'dist.new_group(backend="prism") makes one; a DDP hook\'s is HookState)')
    return pg


def determinism(group=None) -> str:
    """What a group's sums promise, from its policy and algorithm:
    'exact': KULISCH_FIXED, the exact sum rounded once: the same bits whatever the algorithm, the
             rank count's arrival order, the bucketing or the switch/host path;
    'reproducible': FP32_BINOMIAL through the binomial tree or the switch: the same bits run to run
             for the same ranks, not the exact sum;
    'none': fp32 additions in arrival or algorithm order (FP32_ARRIVAL; FP32_BINOMIAL elsewhere)."""
    o = _prism_group(group).options
    if o.policy == 'kulisch':
        return 'exact'
    if o.policy == 'fp32_binomial' and o.algorithm in ('binomial', 'switch'):
        return 'reproducible'
    return 'none'


def last_record(group=None) -> dict | None:
    """The record of the group's last collective: seq, collective, rank, dtype, count, policy,
    algorithm, seconds, and digest (XXH3-64 of this rank's result, 16 hex digits; None unless
    digests are on: PRISM_TORCH_DIGEST=1 or Options(digest=True)); None before the first."""
    d = _prism_group(group).records
    return d[-1] if d else None


def records(group=None) -> list[dict]:
    """The group's last records (Options.history of them, 1024 by default), oldest first."""
    return list(_prism_group(group).records)


def all_reduce(tensor: torch.Tensor, *, out_dtype: torch.dtype | None = None, group=None) -> torch.Tensor:
    """The exact sum of every rank's `tensor`, rounded once to `out_dtype` (default: tensor's dtype):
    e.g. bf16 gradients summed exactly and returned as float32. Synchronous; returns a new tensor."""
    pg = _prism_group(group)
    out_dtype = out_dtype or tensor.dtype
    fmt, out = SUM_DTYPES.get(tensor.dtype), SUM_DTYPES.get(out_dtype)
    if fmt is None or out is None or (tensor.dtype in (torch.int8, torch.int32)) != (out_dtype in (torch.int8, torch.int32)):
        raise ValueError(f'prism: a sum of {tensor.dtype} into {out_dtype} is not supported (floats into '
                         'float32, float16 or bfloat16; integers into int32 or their own type)')
    return pg.sum_into(tensor, out_dtype)
