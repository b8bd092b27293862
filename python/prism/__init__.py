"""PRISM for Python: libprism's Group (docs/RANK.md) over a rendezvous store.

    import numpy as np, prism
    g = prism.Group('tcp://10.0.0.1:29600', rank, size)     # or any store object, see below
    x = np.random.rand(1 << 20).astype(np.float32)
    g.allreduce(x)                                           # in place, exact, the same bits everywhere
    g.digest(x)                                              # 16 hex digits to log and compare

A store is a URL ("tcp://host:port", rank 0 serves it; "file:///path") or an
object with set(key, bytes), get(key, timeout_ms) -> bytes or None, add(key,
delta) -> int and check(key) -> bool. `prism_torch` passes torch's own store.

Every collective runs in libprism with the GIL released. Errors: prism.Error
(a collective or a link failed), prism.StoreError (the rendezvous), ValueError
(a bad name or buffer: not a C-contiguous numpy array, or a read-only one for
a call that writes into it), OverflowError (an integer sum beyond its type).
"""
from __future__ import annotations

from ._prism import Error, StoreError, digest as _digest, format_bytes, predict, runs  # noqa: F401
from ._prism import Group as _Group

ALGORITHMS = ('auto', 'switch', 'binomial', 'chain', 'rhd', 'ring')
POLICIES = ('kulisch', 'fp32_arrival', 'fp32_binomial')

# numpy dtype names -> PRISM formats (bf16 has no numpy type: torch tensors carry it)
_NUMPY_FORMATS = {'float32': 'fp32', 'float16': 'fp16', 'int32': 'int32', 'int8': 'int8'}


def _numpy_buffer(a, written: bool = False):
    """The array's address, size and PRISM format; `written`: the call writes its result into `a`."""
    import numpy as np
    if not isinstance(a, np.ndarray):
        raise ValueError(f'a numpy array is needed, not {type(a).__name__}')
    if not a.flags.c_contiguous:
        raise ValueError('the array is not contiguous: pass np.ascontiguousarray(a)')
    if written and not a.flags.writeable:
        raise ValueError('the array is read-only (a.flags.writeable is False; np.frombuffer of bytes makes such '
                         'arrays) and the result is written into it: pass a writeable copy, b = a.copy(), and read '
                         'the result from b')
    fmt = _NUMPY_FORMATS.get(a.dtype.name)
    if fmt is None:
        raise ValueError(f'dtype {a.dtype.name}: PRISM reduces {", ".join(_NUMPY_FORMATS)}')
    return a.ctypes.data, a.size, fmt


class Group(_Group):
    """A group of `size` ranks; this process is `rank`. Keyword options: algorithm (auto, switch,
    binomial, chain, rhd, ring), candidates (what auto chooses among), name (groups sharing one
    store), switch ("ip:port") and pool (a switch's job pool; default $PRISM_SWITCH, $PRISM_POOL),
    host_ip, calibration (a file), connect_timeout_ms, recv_timeout_ms."""

    def allreduce(self, a, *, policy: str = 'kulisch', algorithm: str | None = None) -> dict:
        """In place: `a` becomes the sum of every rank's `a`, rounded once to a's dtype."""
        addr, n, fmt = _numpy_buffer(a, written=True)
        return self.run('allreduce', addr, addr, n, fmt, policy=policy, algorithm=algorithm, same_type=True)

    def broadcast(self, a, *, root: int = 0) -> dict:
        """In place: `a` becomes the root's `a` (every rank's must be writeable, the root's too)."""
        addr, n, fmt = _numpy_buffer(a, written=True)
        return self.run('broadcast', addr, addr, n, fmt, root=root)

    def barrier(self) -> dict:
        return self.run('barrier', 0, 0, 0, 'fp32')

    @staticmethod
    def digest(a) -> str:
        addr, n, fmt = _numpy_buffer(a)
        return _digest(addr, n * format_bytes(fmt))
