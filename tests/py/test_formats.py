"""Format decode / encode / rounding: every fp8 and fp16 and bf16 code, sampled
fp32 codes, RNE ties, subnormal and max-finite boundaries, overflow under
ieee and saturate.  The first group checks the reference itself (no binary)."""
from fractions import Fraction

import numpy as np
import pytest

import prism_ref as ref
from prism_cli import Case, assert_no_mismatch, require_binary

F = Fraction
SMALL = ['fp16', 'bf16'] + ref.FP8_DTYPES


# ---------------------------------------------------------------------------
# self-checks of the reference (run without the binary)
# ---------------------------------------------------------------------------

def test_ref_fp16_decode_matches_numpy():
    vals = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16)
    for code in range(0, 65536, 1):
        d = ref.decode_fraction('fp16', code)
        v = float(vals[code])
        if np.isnan(v):
            assert d[0] == 'nan'
        elif np.isinf(v):
            assert d == ('inf', v < 0)
        else:
            assert d[0] == 'fin' and d[2] == F(v) and d[1] == (np.signbit(v))


def test_ref_fp16_and_fp32_rounding_match_numpy():
    rng = np.random.default_rng(3)
    xs = list(rng.normal(0, 1e3, 3000)) + list(rng.normal(0, 1e-6, 3000))
    # exact ties and near ties of fp16 (representable in double)
    for code in list(range(0, 0x7C00, 37)) + [0x7BFE, 0x7BFF, 0, 1, 0x3FF, 0x400]:
        a = ref.decode_fraction('fp16', code)[2]
        ulp = F(2) ** max(-24, (a.numerator.bit_length() - a.denominator.bit_length()) - 10) \
            if a else F(2) ** -24
        for off in (ulp / 2, ulp / 2 + ulp / 1024, ulp / 2 - ulp / 1024):
            xs.append(float(a + off))
    with np.errstate(over='ignore'):
        for x in xs:
            for s in (1.0, -1.0):
                v = s * x
                c16, o16 = ref.encode_fraction('fp16', F(v), 'ieee', neg_zero=np.signbit(v))
                assert c16 == int(np.float16(v).view(np.uint16)), (v, hex(c16))
                assert o16 == bool(np.isinf(np.float16(v)))
                c32, _ = ref.encode_fraction('fp32', F(v), 'ieee', neg_zero=np.signbit(v))
                assert c32 == int(np.float32(v).view(np.uint32)), (v, hex(c32))


def test_ref_bf16_rounding_matches_bit_trick():
    rng = np.random.default_rng(4)
    x = rng.integers(0, 2 ** 32, 20000, dtype=np.uint64).astype(np.uint32)
    x = x[np.isfinite(x.view(np.float32))]
    trick = ref.f32_to_bf16_codes(x.view(np.float32))
    for b, t in zip(x, trick):
        d = ref.decode_fraction('fp32', int(b))
        c, o = ref.encode_fraction('bf16', d[2], 'ieee', neg_zero=d[1])
        assert c == t and o == ((t & 0x7FFF) == 0x7F80)


@pytest.mark.parametrize('fmt', ref.FP8_DTYPES)
def test_ref_fp8_rounding_brute_force(fmt):
    """Nearest representable value by exhaustive search, ties to even code."""
    f = ref.FLOAT_FORMATS[fmt]
    pos = sorted({(ref.decode_fraction(fmt, c)[2], c) for c in range(128)
                  if ref.decode_fraction(fmt, c)[0] == 'fin'})
    vals = [v for v, _ in pos]
    mx, ulp = vals[-1], vals[-1] - vals[-2]
    pts = []
    for a, b in zip(vals, vals[1:]):
        m = (a + b) / 2
        pts += [a, m, m + (b - a) / 64, m - (b - a) / 64]
    pts += [mx + ulp / 2, mx + ulp / 2 - ulp / 64, mx + ulp / 2 + ulp / 64, 3 * mx]
    for v in pts:
        best = min(pos, key=lambda t: (abs(t[0] - v), t[1] & 1))
        if v > mx + ulp / 2 or (v == mx + ulp / 2 and pos[-1][1] & 1):
            want = None
        else:
            want = best[1]
        for exc in ref.EXCEPTIONS:
            c, o = ref.encode_fraction(fmt, v, exc)
            if want is None:
                assert o and c == (f.max_code(False) if exc == 'saturate' else
                                   (f.inf_code(False) if f.has_inf else f.canonical_nan))
            else:
                assert not o and c == want, (fmt, v, hex(c), hex(want))
            cn, on = ref.encode_fraction(fmt, -v, exc, neg_zero=True)
            if want is not None:
                assert cn == (want | f.sign_bit if (want or f.has_negzero) else 0)


def test_ref_constants():
    mx = {k: float(f.max_finite) for k, f in ref.FLOAT_FORMATS.items()}
    assert mx['e4m3fn'] == 448 and mx['e4m3fnuz'] == 240
    assert mx['e5m2'] == 57344 and mx['e5m2fnuz'] == 57344 and mx['fp16'] == 65504
    assert mx['fp32'] == float(np.finfo(np.float32).max)
    want = {'fp32': 278, 'bf16': 262, 'fp16': 41, 'e5m2fnuz': 34, 'e5m2': 33,
            'e4m3fn': 19, 'e4m3fnuz': 19, 'int8': 8, 'int32': 32}
    for k, w in want.items():
        assert ref.required_width(k, 1) == w
        assert ref.required_width(k, 64) == w + 6
        assert ref.required_width(k, 65) == w + 7
    assert ref.required_width('fp32', 65535) == 294
    # min subnormals
    assert ref.decode_fraction('e4m3fnuz', 1)[2] == F(1, 2 ** 10)
    assert ref.decode_fraction('e5m2fnuz', 1)[2] == F(1, 2 ** 17)
    assert ref.decode_fraction('e4m3fn', 1)[2] == F(1, 2 ** 9)
    assert ref.decode_fraction('e5m2', 1)[2] == F(1, 2 ** 16)


# ---------------------------------------------------------------------------
# decode of every code through the binary (R = 1)
# ---------------------------------------------------------------------------

def expected_fp32_bits(dtype, code):
    """Independent path: Fraction -> Python float -> numpy float32 (exact)."""
    d = ref.decode_fraction(dtype, code)
    if d[0] == 'nan':
        return 0x7FC00000
    if d[0] == 'inf':
        return 0xFF800000 if d[1] else 0x7F800000
    if d[2] == 0:
        return 0x80000000 if d[1] else 0
    return int(np.float32(float(d[2])).view(np.uint32))


def all_codes(dtype):
    if dtype == 'fp32':
        rng = np.random.default_rng(32)
        edges = [0, 0x80000000, 1, 0x80000001, 0x007FFFFF, 0x807FFFFF, 0x00800000,
                 0x3F800000, 0x3F800001, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000, 0xFF800000,
                 0x7F800001, 0x7FBFFFFF, 0x7FC00000, 0xFFC00001, 0xFFFFFFFF]
        return np.concatenate([np.array(edges, dtype=np.int64),
                               rng.integers(0, 2 ** 32, 60000, dtype=np.int64)])
    return np.arange(1 << ref.FLOAT_FORMATS[dtype].nbits, dtype=np.int64)


@pytest.mark.parametrize('dtype', ref.FLOAT_DTYPES)
def test_decode_every_code_to_fp32(tmp_path, dtype):
    require_binary()
    codes = all_codes(dtype)
    case = Case(dtype, codes[None, :], tmp_path, label=f'decode {dtype}')
    want = np.array([expected_fp32_bits(dtype, int(c)) for c in codes], dtype=np.int64)
    n_nan = sum(ref.is_nan_code(dtype, int(c)) for c in codes)
    exp = case.expected('kulisch', 'fp32', 'ieee')
    assert list(exp.codes & 0xFFFFFFFF) == list(want)        # reference self-check
    assert exp.flags() == {'overflow': 0, 'invalid': 0, 'nan_input': n_nan}
    msgs = []
    for policy in ref.POLICIES:
        for exc in ref.EXCEPTIONS:
            msgs += case.check(policy, 'fp32', exc, expected=exp)
    assert_no_mismatch(msgs)


@pytest.mark.parametrize('dtype', ref.FLOAT_DTYPES)
def test_reencode_same_dtype(tmp_path, dtype):
    """R=1, out dtype = in dtype: the same code back; NaNs -> canonical NaN."""
    require_binary()
    f = ref.FLOAT_FORMATS[dtype]
    codes = all_codes(dtype)
    case = Case(dtype, codes[None, :], tmp_path, label=f'reencode {dtype}')
    want = np.array([f.canonical_nan if ref.is_nan_code(dtype, int(c)) else int(c)
                     for c in codes], dtype=np.int64)
    msgs = []
    for exc in ref.EXCEPTIONS:
        exp = case.expected('kulisch', dtype, exc)
        mask = (1 << f.nbits) - 1
        assert list(exp.codes & mask) == list(want & mask)   # reference self-check
        msgs += case.check('kulisch', dtype, exc, expected=exp)
        msgs += case.check('fp32_arrival', dtype, exc, expected=exp)
    assert_no_mismatch(msgs)


def _cross_inputs(dtype):
    if dtype in ref.FP8_DTYPES:
        return all_codes(dtype)
    rng = np.random.default_rng(16)
    if dtype == 'fp32':
        c = rng.integers(0, 2 ** 32, 12000, dtype=np.int64)
        # bias towards the narrow ranges of the small formats
        e = rng.integers(100, 160, 12000) << 23
        c2 = (rng.integers(0, 2, 12000) << 31) | e | rng.integers(0, 1 << 23, 12000)
        return np.concatenate([all_codes('fp32')[:18], c, c2])
    return np.concatenate([np.arange(0, 65536, 7), rng.integers(0, 65536, 4000)])


@pytest.mark.parametrize('dtype', ref.FLOAT_DTYPES)
def test_convert_R1_every_out_format(tmp_path, dtype):
    """R=1: each input rounded once into every output format."""
    require_binary()
    case = Case(dtype, _cross_inputs(dtype)[None, :], tmp_path, label=f'R=1 {dtype}')
    msgs = []
    for out in ref.FLOAT_DTYPES:
        for exc in ref.EXCEPTIONS:
            exp = case.expected('kulisch', out, exc)
            msgs += case.check('kulisch', out, exc, expected=exp)
            if dtype in ref.FP8_DTYPES or out in ('e4m3fn', 'e5m2fnuz'):
                # for R=1 the fp32 orders are the same single rounding
                msgs += case.check('fp32_binomial', out, exc, expected=exp)
    assert_no_mismatch(msgs)


# ---------------------------------------------------------------------------
# rounding targets: ties, near ties, subnormal and max-finite boundaries
# ---------------------------------------------------------------------------

def _fp32_exact(x: Fraction) -> bool:
    c, o = ref.encode_fraction('fp32', x, 'ieee')
    return not o and ref.decode_fraction('fp32', c)[2] == x


def _val(fmt, code):
    return ref.decode_fraction(fmt, code)[2]


def rounding_columns(out):
    """Lists of fp32 Fractions (R=4) whose exact sums land on interesting points."""
    f = ref.FLOAT_FORMATS[out]
    maxc = f.max_code(False)
    one = ref.encode_fraction(out, F(1))[0]
    minnorm = 1 << f.mbits
    base_codes = sorted({0, 1, 2, 3, f.mmask - 1, f.mmask, minnorm, minnorm + 1,
                         one - 1, one, one + 1, one + 2, maxc - 2, maxc - 1, maxc,
                         (minnorm + maxc) // 2})
    big = F(2) ** 100
    cols = []
    for c in base_codes:
        a = _val(out, c)
        if c == maxc:
            ulp = F(2) ** (f.emax - f.mbits)
            b = a + ulp
        else:
            b = _val(out, c + 1)
        h = (b - a) / 2
        d = (b - a) / 2 ** 12
        for s in (1, -1):
            A, H, D = s * a, s * h, s * d
            cand = [
                [A, H, 0, 0], [A, H, D, 0], [A, H, -D, 0], [A, 0, 0, 0],
                [A, 2 * H, 0, 0], [big, A, -big, H], [A, H, D, -D],
                [A, H - D, 0, 0] if H != D else None,
            ]
            if c == maxc:
                cand += [[A, A, 0, 0], [A, 4 * H, 0, 0], [A, 2 * H, 2 * H, 2 * H]]
            for col in cand:
                if col is not None and all(_fp32_exact(F(x)) for x in col):
                    cols.append([F(x) for x in col])
    # exact zeros from non-zero terms, and all -0
    cols.append([F(3), F(-3), 0, 0])
    return cols


def _to_f32_codes(cols):
    mat = np.zeros((4, len(cols)), dtype=np.int64)
    for j, col in enumerate(cols):
        for i, x in enumerate(col):
            mat[i, j] = ref.encode_fraction('fp32', x, 'ieee')[0]
    return mat


@pytest.mark.parametrize('out', ref.FLOAT_DTYPES)
def test_rounding_boundaries(tmp_path, out):
    require_binary()
    cols = rounding_columns(out)
    mat = _to_f32_codes(cols)
    negz = np.full((4, 2), 0x80000000, dtype=np.int64)       # all -0; and -0,+0 mix
    negz[2, 1] = 0
    mat = np.concatenate([mat, negz], axis=1)
    case = Case('fp32', mat, tmp_path, label=f'rounding->{out}')
    msgs = []
    for exc in ref.EXCEPTIONS:
        msgs += case.check('kulisch', out, exc)
    assert_no_mismatch(msgs)


# Hand-computed expectations (independent of the reference's encoder):
# (out, fp32 inputs, expected code under ieee, expected code under saturate, overflow)
HAND = [
    ('e4m3fn', [464.0], 0x7E, 0x7E, False),           # tie 448|480 -> even 448
    ('e4m3fn', [464.0, 2.0 ** -10], 0x7F, 0x7E, True),
    ('e4m3fn', [465.0], 0x7F, 0x7E, True),
    ('e4m3fn', [-465.0], 0x7F, 0xFE, True),
    ('e4m3fn', [-464.0], 0xFE, 0xFE, False),
    ('e4m3fn', [2.0 ** -10], 0x00, 0x00, False),       # half min subnormal -> +0
    ('e4m3fn', [-(2.0 ** -10)], 0x80, 0x80, False),    # -> -0
    ('e4m3fn', [3 * 2.0 ** -10], 0x02, 0x02, False),   # tie 1|2 -> 2
    ('e4m3fn', [15 * 2.0 ** -10], 0x08, 0x08, False),  # tie max-subnormal|min-normal
    ('e4m3fn', [2.0 ** -10, 2.0 ** -30], 0x01, 0x01, False),
    ('e4m3fn', [float('inf')], 0x7F, 0x7E, True),      # Inf into a format without Inf
    ('e4m3fn', [float('-inf')], 0x7F, 0xFE, True),
    ('e4m3fnuz', [240.0], 0x7F, 0x7F, False),
    ('e4m3fnuz', [247.0], 0x7F, 0x7F, False),
    ('e4m3fnuz', [248.0], 0x80, 0x7F, True),           # tie 240|256 -> 256 overflows
    ('e4m3fnuz', [-248.0], 0x80, 0xFF, True),
    ('e4m3fnuz', [-(2.0 ** -11)], 0x00, 0x00, False),  # no -0
    ('e4m3fnuz', [-0.0, -0.0], 0x00, 0x00, False),
    ('e4m3fnuz', [2.0 ** -11, 2.0 ** -40], 0x01, 0x01, False),
    ('e5m2', [57344.0], 0x7B, 0x7B, False),
    ('e5m2', [61439.0], 0x7B, 0x7B, False),
    ('e5m2', [61440.0], 0x7C, 0x7B, True),             # tie, odd max -> overflow
    ('e5m2', [-61440.0], 0xFC, 0xFB, True),
    ('e5m2', [float('-inf')], 0xFC, 0xFC, False),
    ('e5m2', [float('inf'), float('-inf')], 0x7E, 0x7E, False),
    ('e5m2', [2.0 ** -17], 0x00, 0x00, False),
    ('e5m2', [2.0 ** -17, 2.0 ** -30], 0x01, 0x01, False),
    ('e5m2fnuz', [57344.0], 0x7F, 0x7F, False),
    ('e5m2fnuz', [61440.0], 0x80, 0x7F, True),
    ('e5m2fnuz', [-61440.0], 0x80, 0xFF, True),
    ('e5m2fnuz', [2.0 ** -18], 0x00, 0x00, False),
    ('e5m2fnuz', [3 * 2.0 ** -18], 0x02, 0x02, False),
    ('fp16', [65504.0], 0x7BFF, 0x7BFF, False),
    ('fp16', [65519.0], 0x7BFF, 0x7BFF, False),
    ('fp16', [65520.0], 0x7C00, 0x7BFF, True),
    ('fp16', [-65520.0], 0xFC00, 0xFBFF, True),
    ('fp16', [2.0 ** -25], 0x0000, 0x0000, False),
    ('fp16', [-(2.0 ** -25)], 0x8000, 0x8000, False),
    ('fp16', [3 * 2.0 ** -25], 0x0002, 0x0002, False),
    ('fp16', [1.0, 2.0 ** -11], 0x3C00, 0x3C00, False),
    ('fp16', [1.0, 2.0 ** -11, 2.0 ** -40], 0x3C01, 0x3C01, False),
    ('bf16', [1.0, 2.0 ** -8], 0x3F80, 0x3F80, False),
    ('bf16', [1.0, 3 * 2.0 ** -8], 0x3F82, 0x3F82, False),
    ('bf16', [1.0, 2.0 ** -8, -(2.0 ** -60)], 0x3F80, 0x3F80, False),
    ('bf16', [(2 - 2.0 ** -8) * 2.0 ** 127], 0x7F80, 0x7F7F, True),
    ('fp32', [1.0, 2.0 ** -24], 0x3F800000, 0x3F800000, False),
    ('fp32', [1.0, 2.0 ** -24, 2.0 ** -40], 0x3F800001, 0x3F800001, False),
    ('fp32', [1.0, 3 * 2.0 ** -24], 0x3F800002, 0x3F800002, False),
    ('fp32', [2.0 ** 100, 1.0, -(2.0 ** 100)], 0x3F800000, 0x3F800000, False),
    ('fp32', [float(np.finfo(np.float32).max), 2.0 ** 103], 0x7F800000, 0x7F7FFFFF, True),
    ('fp32', [float(np.finfo(np.float32).max), 2.0 ** 103, -(2.0 ** 80)],
     0x7F7FFFFF, 0x7F7FFFFF, False),
    ('fp32', [float(np.finfo(np.float32).max)] * 2, 0x7F800000, 0x7F7FFFFF, True),
    ('fp32', [-0.0, -0.0, -0.0], 0x80000000, 0x80000000, False),
    ('fp32', [-0.0, 0.0, -0.0], 0x00000000, 0x00000000, False),
    ('fp32', [5.0, -5.0, -0.0], 0x00000000, 0x00000000, False),
]


def _hand_matrix(rows):
    mat = np.zeros((3, len(rows)), dtype=np.int64)
    for j, (_, xs, *_rest) in enumerate(rows):
        for i, x in enumerate(xs):
            mat[i, j] = int(np.float32(x).view(np.uint32))
    return mat


def test_ref_hand_cases():
    for out, xs, c_ieee, c_sat, ovf in HAND:
        col = np.array([[int(np.float32(x).view(np.uint32))] for x in xs], dtype=np.int64)
        for exc, want in (('ieee', c_ieee), ('saturate', c_sat)):
            r = ref.ExactSums('fp32', col).finalize(out, exc)
            assert (r.codes[0], bool(r.overflow[0])) == (want, ovf), (out, xs, exc)


@pytest.mark.parametrize('out', ref.FLOAT_DTYPES)
def test_hand_cases_binary(tmp_path, out):
    require_binary()
    rows = [h for h in HAND if h[0] == out]
    # pad to R=3 with +0 (does not change sums; zero sign only matters for all -0)
    mat = _hand_matrix(rows)
    for j, (_, xs, *_r) in enumerate(rows):
        if all(np.signbit(x) and x == 0 for x in xs):
            mat[len(xs):, j] = 0x80000000
    case = Case('fp32', mat, tmp_path, label=f'hand->{out}')
    msgs = []
    for exc, k in (('ieee', 2), ('saturate', 3)):
        exp = ref.Result(len(rows))
        for j, row in enumerate(rows):
            exp.codes[j] = row[k]
            xs = row[1]
            exp.invalid[j] = (any(np.isposinf(x) for x in xs)
                              and any(np.isneginf(x) for x in xs))
            exp.overflow[j] = row[4]
        msgs += case.check('kulisch', out, exc, expected=exp)
    assert_no_mismatch(msgs)
