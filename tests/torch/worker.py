#!/usr/bin/python3
"""One rank of tests/py/test_torch.py: runs torch.distributed's collectives on
the `prism` backend and writes every input and result to DIR for the test to
check against the reference model (prism_ref) and numpy.

    RANK=r WORLD_SIZE=p MASTER_ADDR=127.0.0.1 MASTER_PORT=port worker.py DIR [CASE...]

Files: <case>.in<r>, <case>.out<r> (raw bytes); DIR/report<r>.json: each
case's error (type: message) where it raised, the digests and determinism.
"""
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

import prism_torch

OUT = Path(sys.argv[1])
rank = int(os.environ['RANK'])
size = int(os.environ['WORLD_SIZE'])
report = {'errors': {}, 'records': []}


def data(case: str, dtype: torch.dtype, n: int, r: int = rank) -> torch.Tensor:
    """Rank r's input: gradient-like floats over many binades, or small integers."""
    g = torch.Generator().manual_seed(7919 * r + sum(map(ord, case)) * 131 + n)
    if dtype in (torch.int32, torch.int8):
        return torch.randint(-20, 20, (n,), generator=g, dtype=torch.int32).to(dtype)
    x = torch.randn(n, generator=g) * torch.exp2(torch.randint(-12, 12, (n,), generator=g).float())
    return x.to(dtype)


def save(name: str, t: torch.Tensor, kind: str):
    (OUT / f'{name}.{kind}{rank}').write_bytes(t.contiguous().view(torch.int8).numpy().tobytes()
                                               if t.numel() else b'')


def sum_case(name, dtype, n, op=dist.ReduceOp.SUM):
    x = data(name, dtype, n)
    save(name, x, 'in')
    dist.all_reduce(x, op=op)
    save(name, x, 'out')


def errors(name, fn):
    try:
        fn()
        report['errors'][name] = None
    except Exception as e:  # the test reads the message
        report['errors'][name] = f'{type(e).__name__}: {e}'


CASES = {
    'fp32': lambda: sum_case('fp32', torch.float32, 30011),
    'fp16': lambda: sum_case('fp16', torch.float16, 3001),
    'bf16': lambda: sum_case('bf16', torch.bfloat16, 3001),
    'int32': lambda: sum_case('int32', torch.int32, 3001),
    'int8': lambda: sum_case('int8', torch.int8, 3001),
    'avg': lambda: sum_case('avg', torch.float32, 1001, dist.ReduceOp.AVG),
}


def case_reduce():
    x = data('reduce', torch.float32, 2000)
    save('reduce', x, 'in')
    dist.reduce(x, dst=size - 1)
    save('reduce', x, 'out')


def case_reduce_scatter():
    ins = [data(f'rs{i}', torch.float32, 777) for i in range(size)]
    save('rs', torch.cat(ins), 'in')
    out = torch.empty(777)
    dist.reduce_scatter(out, ins)
    save('rs', out, 'out')


def case_bytes():
    # broadcast and allgather move bytes: any dtype (DDP broadcasts int64 buffers)
    b = torch.arange(10, dtype=torch.int64) * (rank + 1)
    dist.broadcast(b, src=size - 1)
    save('bcast', b, 'out')
    outs = [torch.empty(5, dtype=torch.float64) for _ in range(size)]
    dist.all_gather(outs, torch.full((5,), rank + 0.5, dtype=torch.float64))
    save('gather', torch.cat(outs), 'out')
    whole = torch.empty(size * 3, dtype=torch.int16)
    dist.all_gather_into_tensor(whole, torch.full((3,), rank, dtype=torch.int16)) \
        if hasattr(dist, 'all_gather_into_tensor') else dist._all_gather_base(whole, torch.full((3,), rank,
                                                                                                   dtype=torch.int16))
    save('gather_base', whole, 'out')


def case_strided():
    m = data('strided', torch.float32, 64 * 48).reshape(64, 48)
    t = m.t()  # not contiguous: reduced through a copy, written back in place
    save('strided', t, 'in')
    dist.all_reduce(t)
    save('strided', t, 'out')


def case_async():
    xs = [data(f'async{i}', torch.float32, 4099) for i in range(3)]
    for i, x in enumerate(xs):
        save(f'async{i}', x, 'in')
    works = [dist.all_reduce(x, async_op=True) for x in xs]
    for w in reversed(works):  # in any order
        w.wait()
    for i, x in enumerate(xs):
        save(f'async{i}', x, 'out')


def case_bf16_fp32():
    x = data('bf16_fp32', torch.bfloat16, 2001)
    save('bf16_fp32', x, 'in')
    y = prism_torch.all_reduce(x, out_dtype=torch.float32)
    save('bf16_fp32', y, 'out')


def case_errors():
    errors('float64', lambda: dist.all_reduce(torch.ones(3, dtype=torch.float64)))
    errors('max', lambda: dist.all_reduce(torch.ones(3), op=dist.ReduceOp.MAX))
    errors('int_avg', lambda: dist.all_reduce(torch.ones(3, dtype=torch.int32), op=dist.ReduceOp.AVG))
    errors('send', lambda: dist.send(torch.ones(1), dst=(rank + 1) % size))
    errors('int8_overflow', lambda: dist.all_reduce(torch.full((6,), 100, dtype=torch.int8)))
    errors('int32_overflow', lambda: dist.all_reduce(torch.full((6,), 2**30, dtype=torch.int32)))
    errors('not_cpu', lambda: dist.all_reduce(torch.ones(3, device='meta')))  # as a CUDA tensor would be
    errors('sparse', lambda: dist.all_reduce(torch.ones(3).to_sparse()))
    # the group still works after refusals and a failed sum
    x = torch.ones(3)
    dist.all_reduce(x)
    report['after_errors'] = x.tolist()


def case_subgroup():
    # a second prism group over the even ranks, from the same torch store (new_group's prefix)
    members = list(range(0, size, 2))
    sub = dist.new_group(ranks=members, backend='prism')
    x = data('sub', torch.float32, 5003)
    save('sub', x, 'in')
    if rank in members:
        dist.all_reduce(x, group=sub)
        report['sub_determinism'] = prism_torch.determinism(sub)
    save('sub', x, 'out')


def case_peer_dies():
    # the last rank exits after a first collective: the others' next one fails, naming it, at once
    x = torch.ones(100)
    dist.all_reduce(x)
    if rank == size - 1:
        os._exit(0)
    time.sleep(0.3)
    t0 = time.monotonic()
    errors('peer_died', lambda: dist.all_reduce(x))
    report['seconds_to_error'] = time.monotonic() - t0
    (OUT / f'report{rank}.json').write_text(json.dumps(report))
    os._exit(0)  # the group is broken: no barrier


CASES.update({'peer_dies': case_peer_dies, 'subgroup': case_subgroup, 'reduce': case_reduce, 'rs': case_reduce_scatter, 'bytes': case_bytes, 'strided': case_strided,
              'async': case_async, 'bf16_fp32': case_bf16_fp32, 'errors': case_errors})

dist.init_process_group('prism')
for c in sys.argv[2:] or list(CASES):
    CASES[c]()
    report['records'].append(prism_torch.last_record())
dist.barrier()
report['determinism'] = prism_torch.determinism()
report['options'] = vars(dist.distributed_c10d._get_default_group().options)
(OUT / f'report{rank}.json').write_text(json.dumps(report))
dist.destroy_process_group()
