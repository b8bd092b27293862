"""Independent exact reference model of ``prism-reduce``.

This module is written from the written specification of ``prism-reduce`` only
(formats, policies, flags, width admission), never from the C++ sources in
lib/ or app/.  It is deliberately simple and slow:

* every input code is decoded into an exact class (finite / NaN / +-Inf) and,
  for finite values, a signed Python integer ``K`` such that the value is
  ``K * 2**u`` where ``2**u`` is the smallest subnormal of the input format
  (``u = 0`` for integer formats);
* the ``kulisch`` policy sums those big integers exactly and rounds the exact
  rational once, round-to-nearest-even, into the output format (subnormals,
  overflow handled per the ``ieee`` / ``saturate`` exception policy, canonical
  NaNs);
* ``fp32_arrival`` and ``fp32_binomial`` use numpy float32 additions (IEEE
  binary32, round-to-nearest-even), in IN order or in the binomial-tree order,
  then the fp32 result is rounded once into the output format.

Public entry point: :func:`reduce` ``(dtype, policy, out_dtype, exceptions,
arrays) -> (out_bytes, flags)`` with ``flags`` a dict of counts
``{'overflow': n, 'invalid': n, 'nan_input': n}``.  Data generators for tests
are at the bottom (:func:`gen_codes`, :func:`gen_int`).
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import numpy as np

# ----------------------------------------------------------------------------
# Formats
# ----------------------------------------------------------------------------


@dataclass(frozen=True)
class FloatFormat:
    name: str
    ebits: int
    mbits: int
    bias: int
    kind: str           # 'ieee' (Inf + NaN at max exponent), 'fn' (no Inf,
                        # NaN = S.1..1.1..1), 'fnuz' (no Inf, no -0, NaN = 0x80)
    canonical_nan: int

    @property
    def nbits(self) -> int:
        return 1 + self.ebits + self.mbits

    @property
    def sign_bit(self) -> int:
        return 1 << (self.ebits + self.mbits)

    @property
    def emask(self) -> int:
        return (1 << self.ebits) - 1

    @property
    def mmask(self) -> int:
        return (1 << self.mbits) - 1

    @property
    def has_inf(self) -> bool:
        return self.kind == 'ieee'

    @property
    def has_negzero(self) -> bool:
        return self.kind != 'fnuz'

    @property
    def emin(self) -> int:
        """Exponent of the smallest normal number."""
        return 1 - self.bias

    @property
    def unit_exp(self) -> int:
        """Exponent of the smallest subnormal (the quantum of the format)."""
        return self.emin - self.mbits

    @property
    def max_field(self) -> int:
        return self.emask - 1 if self.kind == 'ieee' else self.emask

    @property
    def max_man(self) -> int:
        return self.mmask - 1 if self.kind == 'fn' else self.mmask

    @property
    def emax(self) -> int:
        """Exponent of the largest finite number."""
        return self.max_field - self.bias

    @property
    def precision(self) -> int:
        return self.mbits + 1

    @property
    def max_finite(self) -> Fraction:
        return Fraction(self.max_man + (1 << self.mbits)) * Fraction(2) ** (self.emax - self.mbits)

    def max_code(self, neg: bool) -> int:
        return (self.sign_bit if neg else 0) | (self.max_field << self.mbits) | self.max_man

    def inf_code(self, neg: bool) -> int:
        assert self.has_inf
        return (self.sign_bit if neg else 0) | (self.emask << self.mbits)

    def zero_code(self, neg: bool) -> int:
        return self.sign_bit if (neg and self.has_negzero) else 0


FLOAT_FORMATS = {
    'fp32': FloatFormat('fp32', 8, 23, 127, 'ieee', 0x7FC00000),
    'fp16': FloatFormat('fp16', 5, 10, 15, 'ieee', 0x7E00),
    'bf16': FloatFormat('bf16', 8, 7, 127, 'ieee', 0x7FC0),
    'e4m3fn': FloatFormat('e4m3fn', 4, 3, 7, 'fn', 0x7F),
    'e4m3fnuz': FloatFormat('e4m3fnuz', 4, 3, 8, 'fnuz', 0x80),
    'e5m2': FloatFormat('e5m2', 5, 2, 15, 'ieee', 0x7E),
    'e5m2fnuz': FloatFormat('e5m2fnuz', 5, 2, 16, 'fnuz', 0x80),
}
INT_FORMATS = {'int8': 8, 'int32': 32}
ALL_DTYPES = list(FLOAT_FORMATS) + list(INT_FORMATS)
FLOAT_DTYPES = list(FLOAT_FORMATS)
FP8_DTYPES = ['e4m3fn', 'e4m3fnuz', 'e5m2', 'e5m2fnuz']
POLICIES = ['fp32_arrival', 'kulisch', 'fp32_binomial']
EXCEPTIONS = ['ieee', 'saturate']

STORAGE = {
    'fp32': '<u4', 'fp16': '<u2', 'bf16': '<u2',
    'e4m3fn': 'u1', 'e4m3fnuz': 'u1', 'e5m2': 'u1', 'e5m2fnuz': 'u1',
    'int8': 'i1', 'int32': '<i4',
}
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def elem_size(dtype: str) -> int:
    return np.dtype(STORAGE[dtype]).itemsize


def codes_to_bytes(dtype: str, codes) -> bytes:
    return np.asarray(codes).astype(STORAGE[dtype]).tobytes()


def bytes_to_codes(dtype: str, data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype=STORAGE[dtype]).astype(np.int64)


def default_out(dtype: str) -> str:
    return 'int32' if dtype in INT_FORMATS else 'fp32'


def required_width(dtype: str, R: int) -> int:
    """W_signed = Emax - Emin + p + ceil(log2 R) + 1 (ints: bits + ceil(log2 R))."""
    lg = (R - 1).bit_length()  # == ceil(log2 R) for R >= 1
    if dtype in INT_FORMATS:
        return INT_FORMATS[dtype] + lg
    f = FLOAT_FORMATS[dtype]
    return f.emax - f.emin + f.precision + lg + 1


DEFAULT_WIDTH = 294

# ----------------------------------------------------------------------------
# Decoding
# ----------------------------------------------------------------------------

FIN, NAN, PINF, NINF = 0, 1, 2, 3


def decode_fraction(dtype: str, code: int):
    """Decode one code. Returns ('nan',) | ('inf', neg) | ('fin', neg, Fraction).

    Straightforward field-by-field decode used as the 'textbook' decoder."""
    code = int(code)
    if dtype in INT_FORMATS:
        return ('fin', code < 0, Fraction(code))
    f = FLOAT_FORMATS[dtype]
    neg = bool(code & f.sign_bit)
    field = (code >> f.mbits) & f.emask
    man = code & f.mmask
    if f.kind == 'fnuz':
        if code == f.sign_bit:
            return ('nan',)
    elif f.kind == 'fn':
        if field == f.emask and man == f.mmask:
            return ('nan',)
    else:
        if field == f.emask:
            return ('inf', neg) if man == 0 else ('nan',)
    if field == 0:
        mag = Fraction(man, 1 << f.mbits) * Fraction(2) ** (1 - f.bias)
    else:
        mag = (1 + Fraction(man, 1 << f.mbits)) * Fraction(2) ** (field - f.bias)
    return ('fin', neg, -mag if neg else mag)


def _decode_scalar_K(f: FloatFormat, code: int):
    """(cls, K, is_negzero) with value = K * 2**f.unit_exp."""
    neg = bool(code & f.sign_bit)
    field = (code >> f.mbits) & f.emask
    man = code & f.mmask
    if f.kind == 'fnuz':
        if code == f.sign_bit:
            return NAN, 0, False
    elif f.kind == 'fn':
        if field == f.emask and man == f.mmask:
            return NAN, 0, False
    elif field == f.emask:
        if man:
            return NAN, 0, False
        return (NINF if neg else PINF), 0, False
    if field == 0:
        k = man
    else:
        k = (man | (1 << f.mbits)) << (field - 1)
    return FIN, (-k if neg else k), (neg and k == 0)


@lru_cache(maxsize=None)
def _small_table(dtype: str):
    f = FLOAT_FORMATS[dtype]
    n = 1 << f.nbits
    cls = np.zeros(n, dtype=np.int8)
    K = np.empty(n, dtype=object)
    negz = np.zeros(n, dtype=bool)
    for c in range(n):
        cls[c], K[c], negz[c] = _decode_scalar_K(f, c)
    return cls, K, negz


def decode_K(dtype: str, codes: np.ndarray):
    """Vector decode: (cls int8 array, K object array, negzero bool array, u)."""
    codes = np.asarray(codes, dtype=np.int64)
    if dtype in INT_FORMATS:
        K = np.empty(codes.size, dtype=object)
        K[:] = [int(v) for v in codes.ravel()]
        return (np.zeros(codes.shape, np.int8), K.reshape(codes.shape),
                np.zeros(codes.shape, bool), 0)
    f = FLOAT_FORMATS[dtype]
    if f.nbits <= 16:
        cls, K, negz = _small_table(dtype)
        return cls[codes], K[codes], negz[codes], f.unit_exp
    flat = codes.ravel()
    out = [_decode_scalar_K(f, int(c)) for c in flat]
    cls = np.array([o[0] for o in out], dtype=np.int8).reshape(codes.shape)
    K = np.empty(len(out), dtype=object)
    K[:] = [o[1] for o in out]
    negz = np.array([o[2] for o in out], dtype=bool).reshape(codes.shape)
    return cls, K.reshape(codes.shape), negz, f.unit_exp


def value_to_f32_bits(dtype: str, code: int) -> int:
    """Exact conversion of one input code to fp32 bits (all formats fit)."""
    d = decode_fraction(dtype, code)
    if d[0] == 'nan':
        return 0x7FC00000
    if d[0] == 'inf':
        return 0xFF800000 if d[1] else 0x7F800000
    code32, ovf = encode_fraction('fp32', d[2], 'ieee', neg_zero=d[1])
    assert not ovf
    assert decode_fraction('fp32', code32)[2] == d[2]
    return code32


@lru_cache(maxsize=None)
def _to_f32_table(dtype: str) -> np.ndarray:
    f = FLOAT_FORMATS[dtype]
    return np.array([value_to_f32_bits(dtype, c) for c in range(1 << f.nbits)],
                    dtype=np.uint32)


def to_float32(dtype: str, codes: np.ndarray) -> np.ndarray:
    codes = np.asarray(codes, dtype=np.int64)
    if dtype == 'fp32':
        return codes.astype(np.uint32).view(np.float32)
    if dtype in INT_FORMATS:
        raise ValueError('integer inputs are summed exactly')
    return _to_f32_table(dtype)[codes].view(np.float32)


# ----------------------------------------------------------------------------
# Encoding (correct rounding, RNE)
# ----------------------------------------------------------------------------


def encode_scaled(out: str, neg: bool, A: int, u: int, exceptions: str):
    """Round (-1)**neg * A * 2**u (A >= 0) once, RNE, into float format `out`.

    Returns (code, overflow_flag)."""
    f = FLOAT_FORMATS[out]
    if A == 0:
        return f.zero_code(neg), False
    E = A.bit_length() - 1 + u              # floor(log2 |value|)
    qe = max(E, f.emin) - f.mbits           # exponent of the quantum (ulp)
    shift = qe - u
    if shift <= 0:
        M = A << (-shift)
    else:
        M = A >> shift
        rem = A - (M << shift)
        half = 1 << (shift - 1)
        if rem > half or (rem == half and (M & 1)):
            M += 1
    if M == 0:                              # underflow to zero keeps the sign
        return f.zero_code(neg), False
    if M >> (f.mbits + 1):                  # carry out of the significand
        assert M == 1 << (f.mbits + 1)
        M >>= 1
        qe += 1
    if M < (1 << f.mbits):                  # subnormal
        assert qe == f.emin - f.mbits
        field, man = 0, M
    else:
        field, man = qe + f.mbits + f.bias, M - (1 << f.mbits)
    if field > f.max_field or (field == f.max_field and man > f.max_man):
        return overflow_code(out, neg, exceptions), True
    return (f.sign_bit if neg else 0) | (field << f.mbits) | man, False


def overflow_code(out: str, neg: bool, exceptions: str) -> int:
    f = FLOAT_FORMATS[out]
    if exceptions == 'saturate':
        return f.max_code(neg)
    return f.inf_code(neg) if f.has_inf else f.canonical_nan


def encode_fraction(out: str, value: Fraction, exceptions: str = 'ieee', neg_zero=False):
    """Round an exact dyadic rational into `out` (value 0 -> -0 iff neg_zero)."""
    value = Fraction(value)
    if value == 0:
        return FLOAT_FORMATS[out].zero_code(neg_zero), False
    neg = value < 0
    num, den = abs(value.numerator), value.denominator
    if den & (den - 1):
        raise ValueError('not a dyadic rational')
    return encode_scaled(out, neg, num, -(den.bit_length() - 1), exceptions)


def encode_int_out(out: str, s: int):
    """Integer sum into int32 (saturating) -> (code, overflow)."""
    assert out == 'int32'
    if s > INT32_MAX:
        return INT32_MAX, True
    if s < INT32_MIN:
        return INT32_MIN, True
    return s, False


# ----------------------------------------------------------------------------
# Policies
# ----------------------------------------------------------------------------


class Result:
    def __init__(self, n):
        self.codes = np.zeros(n, dtype=np.int64)
        self.overflow = np.zeros(n, dtype=bool)
        self.invalid = np.zeros(n, dtype=bool)
        self.nan_input = np.zeros(n, dtype=bool)

    def flags(self) -> dict:
        return {'overflow': int(self.overflow.sum()),
                'invalid': int(self.invalid.sum()),
                'nan_input': int(self.nan_input.sum())}


class ExactSums:
    """Per-element exact summary of R inputs (policy independent for ints)."""

    def __init__(self, dtype: str, mat: np.ndarray):
        # mat: (R, N) array of codes
        self.dtype = dtype
        cls, K, negz, u = decode_K(dtype, mat)
        self.u = u
        self.any_nan = (cls == NAN).any(axis=0)
        self.any_pinf = (cls == PINF).any(axis=0)
        self.any_ninf = (cls == NINF).any(axis=0)
        self.all_negz = negz.all(axis=0)
        self.sum = K.sum(axis=0) if mat.shape[0] else np.zeros(mat.shape[1], object)
        self.n = mat.shape[1]

    def finalize(self, out: str, exceptions: str) -> Result:
        res = Result(self.n)
        is_int = self.dtype in INT_FORMATS
        if out in INT_FORMATS:
            if not is_int or out != 'int32':
                raise ValueError('bad out dtype for integer output')
            for j in range(self.n):
                res.codes[j], res.overflow[j] = encode_int_out(out, int(self.sum[j]))
            return res
        f = FLOAT_FORMATS[out]
        for j in range(self.n):
            if self.any_nan[j]:
                res.codes[j] = f.canonical_nan
                res.nan_input[j] = True
            elif self.any_pinf[j] and self.any_ninf[j]:
                res.codes[j] = f.canonical_nan
                res.invalid[j] = True
            elif self.any_pinf[j] or self.any_ninf[j]:
                neg = bool(self.any_ninf[j])
                if f.has_inf:
                    res.codes[j] = f.inf_code(neg)
                else:
                    res.codes[j] = overflow_code(out, neg, exceptions)
                    res.overflow[j] = True
            else:
                s = int(self.sum[j])
                if s == 0:
                    res.codes[j] = f.zero_code(bool(self.all_negz[j]))
                else:
                    res.codes[j], res.overflow[j] = encode_scaled(
                        out, s < 0, abs(s), self.u, exceptions)
        return res


def _f32_finalize(acc: np.ndarray, ovf: np.ndarray, inv: np.ndarray, nan_in: np.ndarray,
                  inf_in: np.ndarray, out: str, exceptions: str) -> Result:
    """Shared tail of fp32_arrival / fp32_binomial.

    Flags follow IEEE 754's exceptions: invalid when an addition of two
    non-NaN operands gave NaN (Inf - Inf), overflow when an addition of two
    finite operands gave Inf, nan_input when any input was NaN. They are
    independent: [+Inf, -Inf, NaN] in arrival order flags invalid and nan_input."""
    n = acc.shape[0]
    res = Result(n)
    f = FLOAT_FORMATS[out]
    bits = acc.view(np.uint32)
    res.overflow[:] = ovf
    res.invalid[:] = inv
    res.nan_input[:] = nan_in
    for j in range(n):
        a = acc[j]
        if np.isnan(a):
            res.codes[j] = f.canonical_nan
        elif np.isinf(a):
            neg = bool(a < 0)
            if inf_in[j]:
                if f.has_inf:
                    res.codes[j] = f.inf_code(neg)
                else:
                    res.codes[j] = overflow_code(out, neg, exceptions)
                    res.overflow[j] = True
            else:
                # produced by overflow of finite additions only
                assert ovf[j]
                res.codes[j] = overflow_code(out, neg, exceptions)
                res.overflow[j] = True
        else:
            d = decode_fraction('fp32', int(bits[j]))
            code, o = encode_fraction(out, d[2], exceptions, neg_zero=d[1])
            res.codes[j] = code
            if o:
                res.overflow[j] = True
    return res


def _f32_matrix(dtype: str, mat: np.ndarray) -> np.ndarray:
    return to_float32(dtype, mat).reshape(mat.shape)


def fp32_arrival(dtype: str, mat: np.ndarray, out: str, exceptions: str) -> Result:
    X = _f32_matrix(dtype, mat)
    acc = X[0].copy()
    ovf = np.zeros(X.shape[1], dtype=bool)
    inv = np.zeros(X.shape[1], dtype=bool)
    with np.errstate(all='ignore'):
        for i in range(1, X.shape[0]):
            new = (acc + X[i]).astype(np.float32)
            ovf |= np.isfinite(acc) & np.isfinite(X[i]) & np.isinf(new)
            inv |= ~np.isnan(acc) & ~np.isnan(X[i]) & np.isnan(new)
            acc = new
    return _f32_finalize(acc, ovf, inv, np.isnan(X).any(axis=0), np.isinf(X).any(axis=0),
                         out, exceptions)


def binomial_schedule(R: int):
    """List of (i, j) additions x_i <- x_i + x_j, in execution order."""
    sched = []
    k = 0
    while (1 << k) < R:
        step = 1 << k
        for i in range(R):
            if (i >> k) & 1 == 0 and i % (step << 1) == 0 and i + step < R:
                sched.append((i, i + step))
        k += 1
    return sched


def fp32_binomial(dtype: str, mat: np.ndarray, out: str, exceptions: str) -> Result:
    X = _f32_matrix(dtype, mat)
    x = X.copy()
    ovf = np.zeros(X.shape[1], dtype=bool)
    inv = np.zeros(X.shape[1], dtype=bool)
    with np.errstate(all='ignore'):
        for i, j in binomial_schedule(X.shape[0]):
            new = (x[i] + x[j]).astype(np.float32)
            ovf |= np.isfinite(x[i]) & np.isfinite(x[j]) & np.isinf(new)
            inv |= ~np.isnan(x[i]) & ~np.isnan(x[j]) & np.isnan(new)
            x[i] = new
    return _f32_finalize(x[0].copy(), ovf, inv, np.isnan(X).any(axis=0),
                         np.isinf(X).any(axis=0), out, exceptions)


def check_args(dtype: str, policy: str, out_dtype: str | None, exceptions: str):
    if dtype not in STORAGE:
        raise ValueError(f'unknown dtype {dtype}')
    if policy not in POLICIES:
        raise ValueError(f'unknown policy {policy}')
    out = out_dtype or default_out(dtype)
    if out not in STORAGE:
        raise ValueError(f'unknown out dtype {out}')
    if dtype in FLOAT_FORMATS and out in INT_FORMATS:
        raise ValueError('float input with integer output')
    if dtype in INT_FORMATS and out == 'int8':
        raise ValueError('integer output must be int32')
    if exceptions not in EXCEPTIONS:
        raise ValueError(f'unknown exceptions {exceptions}')
    return out


def matrix_from_arrays(dtype: str, arrays) -> np.ndarray:
    rows = [bytes_to_codes(dtype, a) if isinstance(a, (bytes, bytearray))
            else np.asarray(a, dtype=np.int64) for a in arrays]
    if not rows:
        raise ValueError('no input')
    n = len(rows[0])
    if any(len(r) != n for r in rows):
        raise ValueError('unequal lengths')
    return np.stack(rows).reshape(len(rows), n)


def reduce_result(dtype: str, policy: str, out_dtype: str | None, exceptions: str,
                  arrays) -> Result:
    out = check_args(dtype, policy, out_dtype, exceptions)
    mat = matrix_from_arrays(dtype, arrays)
    if dtype in INT_FORMATS or policy == 'kulisch':
        return ExactSums(dtype, mat).finalize(out, exceptions)
    if policy == 'fp32_arrival':
        return fp32_arrival(dtype, mat, out, exceptions)
    return fp32_binomial(dtype, mat, out, exceptions)


def reduce(dtype: str, policy: str, out_dtype: str | None, exceptions: str, arrays):
    """Reference for prism-reduce. `arrays`: list of raw LE bytes (or code arrays).

    Returns (out_bytes, {'overflow': n, 'invalid': n, 'nan_input': n})."""
    out = check_args(dtype, policy, out_dtype, exceptions)
    res = reduce_result(dtype, policy, out, exceptions, arrays)
    return codes_to_bytes(out, res.codes), res.flags()


# ----------------------------------------------------------------------------
# Helpers about code sets
# ----------------------------------------------------------------------------


def is_nan_code(dtype: str, code: int) -> bool:
    return dtype in FLOAT_FORMATS and decode_fraction(dtype, code)[0] == 'nan'


def finite_codes(dtype: str) -> np.ndarray:
    f = FLOAT_FORMATS[dtype]
    assert f.nbits <= 16
    cls = _small_table(dtype)[0]
    return np.nonzero(cls == FIN)[0]


def nan_codes(dtype: str) -> np.ndarray:
    f = FLOAT_FORMATS[dtype]
    assert f.nbits <= 16
    return np.nonzero(_small_table(dtype)[0] == NAN)[0]


@lru_cache(maxsize=None)
def sorted_finite(dtype: str):
    """(values float64 sorted ascending, codes) over all finite codes (+0 only once)."""
    codes = finite_codes(dtype)
    vals = np.array([float(decode_fraction(dtype, c)[2]) for c in codes])
    keep = ~((vals == 0) & (codes != 0))
    codes, vals = codes[keep], vals[keep]
    order = np.argsort(vals, kind='stable')
    return vals[order], codes[order]


def f32_to_bf16_codes(x32: np.ndarray) -> np.ndarray:
    b = x32.astype(np.float32).view(np.uint32).astype(np.int64)
    r = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
    return r & 0xFFFF


def float_to_codes(dtype: str, x: np.ndarray) -> np.ndarray:
    """Round float64 values into codes (for data generation; clips to max)."""
    x = np.asarray(x, dtype=np.float64)
    f = FLOAT_FORMATS[dtype]
    mx = float(f.max_finite)
    x = np.clip(x, -mx, mx)
    if dtype == 'fp32':
        return x.astype(np.float32).view(np.uint32).astype(np.int64)
    if dtype == 'fp16':
        return x.astype(np.float16).view(np.uint16).astype(np.int64)
    if dtype == 'bf16':
        c = f32_to_bf16_codes(x.astype(np.float32))
        return np.where((c & 0x7FFF) == 0x7F80, c - 1, c)
    vals, codes = sorted_finite(dtype)
    idx = np.clip(np.searchsorted(vals, x), 1, len(vals) - 1)
    lo, hi = vals[idx - 1], vals[idx]
    pick = np.where(np.abs(x - lo) <= np.abs(hi - x), idx - 1, idx)
    out = codes[pick].astype(np.int64)
    # keep the sign of tiny negative values where -0 exists
    if f.has_negzero:
        out = np.where((out == 0) & (x < 0), f.sign_bit, out)
    return out


# ----------------------------------------------------------------------------
# Test data generation
# ----------------------------------------------------------------------------

KINDS = ['gradient', 'bits', 'cancel', 'subnormal', 'special']


def _random_finite_codes(dtype: str, rng, size, field_lo=None, field_hi=None):
    f = FLOAT_FORMATS[dtype]
    lo = 0 if field_lo is None else field_lo
    hi = f.max_field if field_hi is None else field_hi
    field = rng.integers(lo, hi + 1, size=size)
    man = rng.integers(0, f.mmask + 1, size=size)
    sign = rng.integers(0, 2, size=size)
    codes = (sign << (f.ebits + f.mbits)) | (field << f.mbits) | man
    # fix codes that are not finite
    if f.kind == 'fnuz':
        bad = codes == f.sign_bit
    elif f.kind == 'fn':
        bad = (field == f.emask) & (man == f.mmask)
    else:
        bad = field == f.emask
    if f.kind == 'fn':
        codes = np.where(bad, codes - 1, codes)          # S.1111.111 -> S.1111.110
    elif f.kind == 'fnuz':
        codes = np.where(bad, 0, codes)                  # 0x80 -> +0
    return codes.astype(np.int64)


def _specials(dtype: str):
    f = FLOAT_FORMATS[dtype]
    sp = {'nan': f.canonical_nan, '+0': 0}
    if f.has_negzero:
        sp['-0'] = f.sign_bit
    if f.has_inf:
        sp['+inf'] = f.inf_code(False)
        sp['-inf'] = f.inf_code(True)
    return sp


def _random_nan(dtype: str, rng) -> int:
    f = FLOAT_FORMATS[dtype]
    if f.kind == 'fnuz':
        return f.sign_bit
    if f.kind == 'fn':
        return int(rng.choice([f.canonical_nan, f.canonical_nan | f.sign_bit]))
    man = int(rng.integers(1, f.mmask + 1))
    return (int(rng.integers(0, 2)) * f.sign_bit) | (f.emask << f.mbits) | man


def gen_column(dtype: str, kind: str, R: int, rng) -> np.ndarray:
    """R codes for one output element, of the given data kind."""
    f = FLOAT_FORMATS[dtype]
    if kind == 'gradient':
        lo = max(f.unit_exp + 1, -40)
        hi = min(f.emax - 5, 12)
        sigma = 2.0 ** rng.uniform(lo, hi)
        return float_to_codes(dtype, rng.normal(0.0, sigma, size=R))
    if kind == 'bits':
        return _random_finite_codes(dtype, rng, R)
    if kind == 'subnormal':
        c = _random_finite_codes(dtype, rng, R, 0, 0)
        mix = rng.random(R) < 0.2
        c2 = _random_finite_codes(dtype, rng, R, 1, 1)
        return np.where(mix, c2, c)
    if kind == 'cancel':
        n_pairs = R // 2 - (R // 8 if R >= 4 else 0)
        n_small = R - 2 * n_pairs
        big = _random_finite_codes(dtype, rng, n_pairs, max(1, f.max_field // 2), f.max_field)
        small = _random_finite_codes(dtype, rng, n_small, 0, min(f.max_field, 3))
        col = np.concatenate([big, big ^ f.sign_bit, small]).astype(np.int64)
        return col[rng.permutation(R)]
    if kind == 'special':
        base = (_random_finite_codes(dtype, rng, R) if rng.random() < 0.5
                else gen_column(dtype, 'gradient', R, rng))
        sp = _specials(dtype)
        names = list(sp)
        p = min(0.5, 1.5 / R)
        hit = rng.random(R) < p
        col = base.copy()
        for r in np.nonzero(hit)[0]:
            nm = names[int(rng.integers(0, len(names)))]
            col[r] = _random_nan(dtype, rng) if nm == 'nan' else sp[nm]
        return col
    raise ValueError(kind)


def _fixed_special_columns(dtype: str, R: int, rng):
    """Deterministic corner columns: all -0, +-0 mix, one Inf, +Inf & -Inf, one NaN,
    x,-x with -0 padding (exact zero from non-zero terms)."""
    f = FLOAT_FORMATS[dtype]
    sp = _specials(dtype)
    cols = []
    negz = sp.get('-0', 0)
    cols.append(np.full(R, negz, dtype=np.int64))
    cols.append(rng.choice([0, negz], size=R).astype(np.int64))
    base = _random_finite_codes(dtype, rng, R, 0, max(1, f.max_field // 2))
    c = base.copy()
    c[int(rng.integers(0, R))] = sp.get('-inf', _random_nan(dtype, rng))
    cols.append(c)
    if R >= 2 and f.has_inf:
        c = base.copy()
        r = rng.permutation(R)
        c[r[0]], c[r[1]] = sp['+inf'], sp['-inf']
        cols.append(c)
    c = base.copy()
    c[int(rng.integers(0, R))] = _random_nan(dtype, rng)
    cols.append(c)
    if R >= 2:
        c = np.full(R, negz, dtype=np.int64)
        x = _random_finite_codes(dtype, rng, 1, 1, f.max_field)[0]
        r = rng.permutation(R)
        c[r[0]], c[r[1]] = x, x ^ f.sign_bit
        cols.append(c)
    return cols


def gen_codes(dtype: str, R: int, per_kind: int = 8, seed: int = 0,
              kinds=KINDS, fixed: bool = True) -> np.ndarray:
    """(R, N) matrix of codes of float `dtype`: `per_kind` columns of each kind
    (plus fixed corner columns) -- columns are output elements."""
    rng = np.random.default_rng(seed)
    cols = []
    for kind in kinds:
        for _ in range(per_kind):
            cols.append(gen_column(dtype, kind, R, rng))
    if fixed:
        cols.extend(_fixed_special_columns(dtype, R, rng))
    return np.stack(cols, axis=1).astype(np.int64)


def gen_int(dtype: str, R: int, per_kind: int = 8, seed: int = 0) -> np.ndarray:
    """(R, N) integer matrix: uniform full range, extremes, cancellation, small."""
    rng = np.random.default_rng(seed)
    bits = INT_FORMATS[dtype]
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    cols = []
    for _ in range(per_kind):
        cols.append(rng.integers(lo, hi + 1, size=R, dtype=np.int64))
    for _ in range(per_kind):
        cols.append(rng.choice([lo, hi, lo + 1, hi - 1], size=R).astype(np.int64))
    cols.append(np.full(R, hi, dtype=np.int64))
    cols.append(np.full(R, lo, dtype=np.int64))
    for _ in range(per_kind):
        n_pairs = R // 2
        x = rng.integers(lo + 1, hi + 1, size=n_pairs, dtype=np.int64)
        small = rng.integers(-3, 4, size=R - 2 * n_pairs, dtype=np.int64)
        c = np.concatenate([x, -x, small])
        cols.append(c[rng.permutation(R)])
    for _ in range(per_kind):
        cols.append(rng.integers(-5, 6, size=R, dtype=np.int64))
    return np.stack(cols, axis=1)


def gen_matrix(dtype: str, R: int, per_kind: int = 8, seed: int = 0) -> np.ndarray:
    if dtype in INT_FORMATS:
        return gen_int(dtype, R, per_kind, seed)
    return gen_codes(dtype, R, per_kind, seed)


def fmt_code(dtype: str, code: int) -> str:
    w = 2 * elem_size(dtype)
    if dtype in INT_FORMATS:
        return str(int(code))
    return f'0x{int(code) & ((1 << (4 * w)) - 1):0{w}X}'
