"""The `prism` process group: torch.distributed's collectives through libprism.

A Python subclass of torch.distributed.ProcessGroup (the route PyTorch's own
test_c10d_pypg.py takes), not a C++ one: 1.13's C++ ProcessGroup interface
becomes `Backend` in 2.x, while this class uses only what both keep (the
ProcessGroup and Work subclasses, register_backend). The collective itself runs
in libprism with the GIL released, in the order the calls were made, on the
group's own thread or on the thread that waits for it (calls.py), so work
completes asynchronously and may be waited for in any order.
"""
from __future__ import annotations

import atexit
import collections
import json
import os
import weakref
from datetime import timedelta

import torch
import torch.distributed as dist

import prism

from .calls import Calls

# torch dtype -> PRISM format, for the sums. Broadcast and allgather move bytes: any dtype.
SUM_DTYPES = {torch.float32: 'fp32', torch.float16: 'fp16', torch.bfloat16: 'bf16', torch.int32: 'int32',
              torch.int8: 'int8'}
FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _env(name: str, default: str = '') -> str:
    return os.environ.get(name, '') or default


class Options:
    """What a `prism` group does. Defaults come from the environment, as libprism-mpi's do:
    policy ($PRISM_POLICY, `kulisch`: the exact sum rounded once; `fp32_arrival`; `fp32_binomial`),
    algorithm ($PRISM_ALGO: auto, switch, binomial, chain, rhd, ring; one that does not run a
    collective leaves that collective to auto), switch ($PRISM_SWITCH "ip:port") and pool
    ($PRISM_POOL) for a switch's pooled job, host_ip ($PRISM_HOST_IP), calibration (a file for auto),
    digest ($PRISM_TORCH_DIGEST=1: each collective's record gets the XXH3-64 of this rank's result,
    about 14 GB/s here, so 2-4% of an allreduce's time: off unless asked for), log ($PRISM_TORCH_LOG:
    a file that gets each collective's record as a JSON line; implies digest)."""

    def __init__(self, *, policy: str | None = None, algorithm: str | None = None, switch: str | None = None,
                 pool: int | None = None, host_ip: str | None = None, calibration: str = '',
                 candidates: list[str] | None = None, digest: bool | None = None, log: str | None = None,
                 history: int = 1024):
        self.policy = policy or _env('PRISM_POLICY', 'kulisch')
        self.algorithm = algorithm or _env('PRISM_ALGO', 'auto')
        self.switch = switch if switch is not None else _env('PRISM_SWITCH')
        try:
            self.pool = pool if pool is not None else int(_env('PRISM_POOL', '0'))
        except ValueError:
            raise ValueError(f'prism: PRISM_POOL={_env("PRISM_POOL")!r}: a pool id (an integer)') from None
        self.host_ip = host_ip if host_ip is not None else _env('PRISM_HOST_IP')
        self.calibration = calibration
        self.candidates = list(candidates or [])
        self.log = log if log is not None else _env('PRISM_TORCH_LOG')
        d = _env('PRISM_TORCH_DIGEST', '0')
        if d not in ('0', '1'):
            raise ValueError(f'prism: PRISM_TORCH_DIGEST={d!r}: 1 (digest every result) or 0')
        self.digest = bool(self.log) or (digest if digest is not None else d == '1')
        self.history = history
        if self.policy not in prism.POLICIES:
            raise ValueError(f'prism: policy {self.policy!r} is not one of {", ".join(prism.POLICIES)}')
        if self.algorithm not in prism.ALGORITHMS:
            raise ValueError(f'prism: algorithm {self.algorithm!r} is not one of {", ".join(prism.ALGORITHMS)}')


class TorchStore:
    """torch's c10d store as libprism's rendezvous store (prism.Group takes any object with these)."""

    def __init__(self, store):
        self.store = store

    def set(self, key: str, value: bytes):
        self.store.set(key, value)

    def get(self, key: str, timeout_ms: int):
        try:
            self.store.wait([key], timedelta(milliseconds=max(timeout_ms, 1)))
        except RuntimeError:  # torch's "Wait timeout" (and a store that went away): libprism names the key
            if not self.store.check([key]):
                return None
        return self.store.get(key)

    def add(self, key: str, delta: int) -> int:
        return self.store.add(key, delta)

    def check(self, key: str) -> bool:
        return self.store.check([key])


def _refuse(what: str):
    raise RuntimeError(f'prism backend: {what}')


def _sum_format(t: torch.Tensor, op_name: str) -> str:
    fmt = SUM_DTYPES.get(t.dtype)
    if fmt is None:
        hint = (' PRISM has no exact float64 sum: convert with .float(), or run this collective on a gloo group '
                '(dist.new_group(backend="gloo"))' if t.dtype == torch.float64 else '')
        _refuse(f'{op_name} of {t.dtype} is not supported: PRISM sums float32, float16, bfloat16, int32 and '
                f'int8.{hint}')
    return fmt


def _op_name(op) -> str:
    for name in ('SUM', 'AVG', 'PRODUCT', 'MIN', 'MAX', 'BAND', 'BOR', 'BXOR', 'PREMUL_SUM'):
        if hasattr(dist.ReduceOp, name) and op == getattr(dist.ReduceOp, name):
            return name
    return str(op)


def _check_op(op, t: torch.Tensor) -> bool:
    """True for AVG (sum, then divide), False for SUM; anything else is refused."""
    name = _op_name(op)
    if name == 'SUM':
        return False
    if name == 'AVG' and t.dtype in FLOAT_DTYPES:
        return True
    if name == 'AVG':
        _refuse(f'ReduceOp.AVG of {t.dtype} is not defined (an integer mean rounds): use SUM and divide')
    _refuse(f'ReduceOp.{name} is not supported: PRISM reduces by SUM and AVG only. Run it on a gloo group '
            '(dist.new_group(backend="gloo")); PRISM never falls back to another arithmetic by itself')


def _cpu(t: torch.Tensor, what: str) -> torch.Tensor:
    if t.device.type != 'cpu':
        _refuse(f'{what}: the tensor is on {t.device}; the prism backend reduces CPU tensors')
    if t.is_sparse:
        _refuse(f'{what}: sparse tensors are not supported')
    return t


def _one(tensors, what: str) -> torch.Tensor:
    if isinstance(tensors, torch.Tensor):
        return _cpu(tensors, what)
    if len(tensors) != 1:
        _refuse(f'{what}: one tensor per process is supported, got {len(tensors)}')
    return _cpu(tensors[0], what)


class _Contiguous:
    """A contiguous tensor to give libprism, copied back into `t` when `t` was not contiguous."""

    def __init__(self, t: torch.Tensor):
        self.t = t
        self.c = t if t.is_contiguous() else t.contiguous()

    def done(self):
        if self.c is not self.t:
            self.t.copy_(self.c)


_groups = weakref.WeakSet()  # closed at exit: the pooled job is given back, the links closed


@atexit.register
def _close_all():
    for g in list(_groups):
        g.close()


class ProcessGroupPrism(dist.ProcessGroup):
    def __init__(self, store, rank: int, size: int, timeout: timedelta, options: Options | None = None,
                 name: str = ''):
        super().__init__(rank, size)
        self.options = options or Options()
        o = self.options
        ms = int(timeout.total_seconds() * 1000) if timeout else 60000
        # auto as the group's algorithm: every call names its own (_run: the chosen one where it runs the
        # collective, auto's choice where it does not, e.g. broadcast with the switch chosen)
        self.group = prism.Group(TorchStore(store), rank, size, algorithm='auto', candidates=o.candidates,
                                 name=name, switch=o.switch, pool=o.pool, host_ip=o.host_ip,
                                 calibration=o.calibration, connect_timeout_ms=ms, recv_timeout_ms=ms)
        self.records = collections.deque(maxlen=o.history)  # one per collective, newest last
        self._seq = 0
        self._log = open(o.log, 'a', buffering=1) if o.log else None
        self._closed = False
        self._calls = Calls(f'prism-pg{rank}')
        _groups.add(self)

    # --- torch's interface ---

    def getBackendName(self) -> str:
        return 'prism'

    def allreduce(self, tensors, opts=None):
        t = _one(tensors, 'allreduce')
        fmt = _sum_format(t, 'allreduce')
        avg = _check_op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM, t)
        return self._submit('allreduce', lambda: self._sum('allreduce', t, fmt, avg=avg), [t])

    def allreduce_coalesced(self, tensors, opts=None):
        works = [self.allreduce([t], opts) for t in tensors]
        return works[-1] if works else self.barrier()

    def reduce(self, tensors, opts=None):
        t = _one(tensors, 'reduce')
        fmt = _sum_format(t, 'reduce')
        avg = _check_op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM, t)
        root = opts.rootRank if opts is not None else 0
        return self._submit('reduce', lambda: self._sum('reduce', t, fmt, avg=avg, root=root), [t])

    def broadcast(self, tensors, opts=None):
        t = _one(tensors, 'broadcast')
        root = opts.rootRank if opts is not None else 0

        def run():
            c = _Contiguous(t)
            b = self._bytes(c.c)
            rep = self._run('broadcast', b, b, b.numel(), 'int8', root=root)
            c.done()
            return self._record('broadcast', t, rep, c.c)

        return self._submit('broadcast', run, [t])

    def allgather(self, output_tensors, input_tensors, opts=None):
        t = _one(input_tensors, 'allgather')
        outs = output_tensors[0] if output_tensors and isinstance(output_tensors[0], (list, tuple)) else output_tensors
        if len(outs) != self.size() or any(o.numel() != t.numel() or o.dtype != t.dtype for o in outs):
            _refuse(f'allgather: {self.size()} output tensors of {t.numel()} {t.dtype} are needed')

        def run():
            whole = torch.empty(self.size() * t.numel(), dtype=t.dtype)
            self._gather(t, whole)
            for r, o in enumerate(outs):
                o.copy_(whole[r * t.numel():(r + 1) * t.numel()].view_as(o))
            return self._record('allgather', t, self._last, whole)

        return self._submit('allgather', run, list(outs))

    def _allgather_base(self, output, input, opts=None):
        _cpu(input, 'allgather')
        if output.numel() != self.size() * input.numel() or output.dtype != input.dtype:
            _refuse(f'allgather: the output needs {self.size()} x {input.numel()} elements of {input.dtype}')

        def run():
            c = _Contiguous(output)
            self._gather(input, c.c)
            c.done()
            return self._record('allgather', input, self._last, c.c)

        return self._submit('allgather', run, [output])

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        out = _one(output_tensors, 'reduce_scatter')
        ins = input_tensors[0] if input_tensors and isinstance(input_tensors[0], (list, tuple)) else input_tensors
        if len(ins) != self.size() or any(i.numel() != out.numel() or i.dtype != out.dtype for i in ins):
            _refuse(f'reduce_scatter: {self.size()} input tensors of {out.numel()} {out.dtype} are needed')
        fmt = _sum_format(out, 'reduce_scatter')
        avg = _check_op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM, out)
        return self._submit('reduce_scatter',
                            lambda: self._scatter(torch.cat([i.reshape(-1) for i in ins]), out, fmt, avg), [out])

    def _reduce_scatter_base(self, output, input, opts=None):
        _cpu(input, 'reduce_scatter')
        if input.numel() != self.size() * output.numel() or output.dtype != input.dtype:
            _refuse(f'reduce_scatter: the input needs {self.size()} x {output.numel()} elements of {output.dtype}')
        fmt = _sum_format(output, 'reduce_scatter')
        avg = _check_op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM, output)
        return self._submit('reduce_scatter', lambda: self._scatter(input.contiguous(), output, fmt, avg), [output])

    def barrier(self, opts=None):
        return self._submit('barrier', lambda: self._record('barrier', None, self._run('barrier', None, None, 0,
                                                                                         'fp32'), None), [])

    def close(self):
        """Finishes the calls made, then leaves the switch's pooled job and closes the links."""
        if self._closed:
            return
        self._closed = True
        self._calls.close()
        self.group.close()
        if self._log:
            self._log.close()
            self._log = None

    # --- the work ---

    def _submit(self, what: str, fn, tensors):
        if self._closed:
            _refuse(f'{what}: this group is closed')
        return self._calls.submit(fn, tensors)

    def sum_into(self, t: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
        """prism_torch.all_reduce's: the exact sum of `t` rounded once to `out_dtype`, in a new tensor."""
        src = _cpu(t, 'all_reduce').contiguous()
        out = torch.empty(src.shape, dtype=out_dtype)
        fmt, out_fmt = SUM_DTYPES[src.dtype], SUM_DTYPES[out_dtype]

        def run():
            rep = self._run('allreduce', src, out, src.numel(), fmt, same_type=out_fmt == fmt,
                            out=None if out_fmt == fmt else out_fmt)
            return self._record('allreduce', src, rep, out)

        self._submit('allreduce', run, [out]).wait()
        return out

    def _run(self, collective, t_in, t_out, count, fmt, *, root=0, same_type=False, out=None):
        algo = self.options.algorithm
        if algo != 'auto' and not prism.runs(algo, collective, root):
            algo = 'auto'
        addr = lambda t: t.data_ptr() if t is not None else 0  # noqa: E731
        self._last = self.group.run(collective, addr(t_in), addr(t_out), count, fmt, policy=self.options.policy,
                                    algorithm=algo, root=root, same_type=same_type, out=out)
        return self._last

    @staticmethod
    def _bytes(t: torch.Tensor) -> torch.Tensor:
        return t.reshape(-1).view(torch.int8) if t.numel() else torch.empty(0, dtype=torch.int8)

    def _sum(self, collective, t, fmt, *, avg=False, root=0):
        c = _Contiguous(t)
        mine = collective == 'allreduce' or self.rank() == root
        rep = self._run(collective, c.c, c.c if mine else None, c.c.numel(), fmt, root=root, same_type=True)
        if mine:
            if avg:
                c.c.div_(self.size())
            c.done()
        return self._record(collective, t, rep, c.c if mine else None)

    def _scatter(self, whole, out, fmt, avg):
        c = _Contiguous(out)
        rep = self._run('reduce_scatter', whole, c.c, whole.numel(), fmt, same_type=True)
        if avg:
            c.c.div_(self.size())
        c.done()
        return self._record('reduce_scatter', out, rep, c.c)

    def _gather(self, t, whole):
        mine = t.contiguous()
        self._run('allgather', self._bytes(mine), self._bytes(whole), whole.numel() * whole.element_size(), 'int8')

    def _record(self, collective, t, rep, result):
        self._seq += 1
        rec = {'seq': self._seq, 'collective': collective, 'rank': self.rank(),
               'dtype': str(t.dtype).replace('torch.', '') if t is not None else None,
               'count': t.numel() if t is not None else 0, 'policy': self.options.policy,
               'algorithm': rep['algorithm'], 'seconds': rep['seconds'],
               'digest': digest(result) if result is not None and self.options.digest else None}
        self.records.append(rec)
        if self._log:
            self._log.write(json.dumps(rec) + '\n')
        return rec


def _unsupported(name: str):
    def refuse(self, *args, **kwargs):
        _refuse(f'{name} is not supported (PRISM runs allreduce, reduce, broadcast, allgather, reduce_scatter and '
                'barrier). Run it on a gloo group: dist.new_group(backend="gloo")')
    return refuse


for _name in ('send', 'recv', 'recv_anysource', 'alltoall', 'alltoall_base', 'gather', 'scatter',
              'allgather_coalesced', 'monitored_barrier'):
    setattr(ProcessGroupPrism, _name, _unsupported(_name))


def digest(t: torch.Tensor) -> str:
    """XXH3-64 of a tensor's bytes (16 hex digits): equal digests, equal bits."""
    t = t.contiguous()
    return prism._digest(t.data_ptr(), t.numel() * t.element_size())


def create(opts, pg_options=None):
    """torch.distributed's creator (register_backend(..., extended_api=True))."""
    return ProcessGroupPrism(opts.store, opts.group_rank, opts.group_size, opts.timeout,
                             pg_options if isinstance(pg_options, Options) else None, name=opts.group_id)
