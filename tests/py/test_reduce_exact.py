"""prism-reduce vs the independent reference: exactness, order independence,
fp32_arrival / fp32_binomial orders, flags counts."""
import numpy as np
import pytest

import prism_ref as ref
from prism_cli import Case, assert_no_mismatch, require_binary

RS = [1, 2, 3, 7, 64, 257, 1000]
FLOAT_OUTS = ref.FLOAT_DTYPES


def _per_kind(R):
    return 8 if R <= 64 else 5


def _seed(*parts):
    """Deterministic seed (independent of PYTHONHASHSEED)."""
    return sum((i + 1) * 7919 * sum(map(ord, str(p))) for i, p in enumerate(parts))


@pytest.fixture(scope='module')
def cases(tmp_path_factory):
    made = {}

    def get(dtype, R):
        if (dtype, R) not in made:
            mat = ref.gen_matrix(dtype, R, _per_kind(R), seed=_seed(dtype, R))
            made[(dtype, R)] = Case(dtype, mat, tmp_path_factory.mktemp(f'{dtype}_R{R}'))
        return made[(dtype, R)]
    return get


# ---------------------------------------------------------------------------
# kulisch: bit-exact for every output format and both exception policies
# ---------------------------------------------------------------------------

@pytest.mark.parametrize('R', RS)
@pytest.mark.parametrize('dtype', ref.FLOAT_DTYPES)
def test_kulisch_exact_float(cases, dtype, R):
    require_binary()
    case = cases(dtype, R)
    msgs = []
    for out in FLOAT_OUTS:
        for exc in ref.EXCEPTIONS:
            msgs += case.check('kulisch', out, exc)
    assert_no_mismatch(msgs)


@pytest.mark.parametrize('R', RS)
@pytest.mark.parametrize('dtype', list(ref.INT_FORMATS))
def test_integer_inputs(cases, dtype, R):
    """Integer inputs: exact sum under every policy; int32 saturates, floats round once."""
    require_binary()
    case = cases(dtype, R)
    msgs = []
    for policy in ref.POLICIES:
        for exc in ref.EXCEPTIONS:
            msgs += case.check(policy, 'int32', exc)
            msgs += case.check(policy, 'fp32', exc)
    for out in ['fp16', 'bf16', 'e4m3fn', 'e4m3fnuz', 'e5m2', 'e5m2fnuz']:
        for exc in ref.EXCEPTIONS:
            msgs += case.check('kulisch', out, exc)
    assert_no_mismatch(msgs)


# ---------------------------------------------------------------------------
# fp32_arrival / fp32_binomial
# ---------------------------------------------------------------------------

@pytest.mark.parametrize('policy', ['fp32_arrival', 'fp32_binomial'])
@pytest.mark.parametrize('R', RS)
@pytest.mark.parametrize('dtype', ref.FLOAT_DTYPES)
def test_fp32_orders(cases, dtype, R, policy):
    require_binary()
    case = cases(dtype, R)
    msgs = []
    outs = FLOAT_OUTS if R <= 257 else ['fp32', 'bf16', 'e4m3fnuz', 'e5m2']
    for out in outs:
        for exc in ref.EXCEPTIONS:
            msgs += case.check(policy, out, exc)
    assert_no_mismatch(msgs)


def test_arrival_is_order_sensitive_reference():
    """Sanity of the reference itself: arrival order matters, kulisch does not."""
    x = np.array([[0x7F000000], [0xFF000000], [0x3F800000]], dtype=np.int64)  # 2^127,-2^127,1
    y = x[[0, 2, 1]]
    a = ref.fp32_arrival('fp32', x, 'fp32', 'ieee').codes[0]
    b = ref.fp32_arrival('fp32', y, 'fp32', 'ieee').codes[0]
    assert a == 0x3F800000 and b == 0
    assert ref.ExactSums('fp32', y).finalize('fp32', 'ieee').codes[0] == 0x3F800000


# ---------------------------------------------------------------------------
# order independence of kulisch
# ---------------------------------------------------------------------------

@pytest.mark.parametrize('dtype,R,nperm', [
    ('fp32', 7, 1000),
    ('bf16', 64, 20),
    ('e5m2', 257, 10),
    ('fp16', 1000, 5),
])
def test_kulisch_order_independence(tmp_path, dtype, R, nperm):
    require_binary()
    mat = ref.gen_matrix(dtype, R, per_kind=4, seed=_seed('perm', dtype, R))
    case = Case(dtype, mat, tmp_path / 'c')
    out = 'fp32' if dtype != 'e5m2' else 'e4m3fn'
    exp = case.expected('kulisch', out, 'ieee')
    msgs = case.check('kulisch', out, 'ieee', expected=exp)
    assert_no_mismatch(msgs)
    first = case.run('kulisch', out, 'ieee').out
    rng = np.random.default_rng(R)
    diffs = []
    for k in range(nperm):
        order = rng.permutation(R)
        r = case.run('kulisch', out, 'ieee', order=order)
        if r.rc != 0 or r.out != first:
            got = None if r.out is None else ref.bytes_to_codes(out, r.out)
            want = ref.bytes_to_codes(out, first)
            where = [] if got is None else list(np.nonzero(got != want)[0][:4])
            diffs.append(f'permutation #{k} {list(order[:12])}: rc={r.rc} '
                         f'differs at elements {where}')
            if len(diffs) >= 5:
                break
    assert not diffs, '\n'.join(diffs)


# ---------------------------------------------------------------------------
# R = 65535 (the maximum for the default width 294)
# ---------------------------------------------------------------------------

@pytest.fixture(scope='module')
def big_fp32(tmp_path_factory):
    R = 65535
    rng = np.random.default_rng(65535)
    cols = [
        ref.gen_column('fp32', 'cancel', R, rng),
        ref.gen_column('fp32', 'gradient', R, rng),
        ref.gen_column('fp32', 'bits', R, rng),
        np.full(R, 0x7F7FFFFF, dtype=np.int64),           # all max finite: overflows
        ref.gen_column('fp32', 'subnormal', R, rng),
    ]
    mat = np.stack(cols, axis=1)
    return Case('fp32', mat, tmp_path_factory.mktemp('big_fp32'), label='fp32 R=65535')


def test_r65535_fp32(big_fp32):
    require_binary()
    case = big_fp32
    msgs = []
    for out, exc in [('fp32', 'ieee'), ('fp32', 'saturate'), ('e4m3fn', 'saturate'),
                     ('bf16', 'ieee')]:
        msgs += case.check('kulisch', out, exc)
    msgs += case.check('fp32_arrival', 'fp32', 'ieee')
    msgs += case.check('fp32_binomial', 'fp32', 'saturate')
    # default width (294) must admit exactly this; 293 must be refused
    r = case.run('kulisch', 'fp32', 'ieee', width=294)
    if r.rc != 0:
        msgs.append(f'--width 294 with R=65535 fp32 refused: {r.stderr.strip()!r}')
    r = case.run('kulisch', 'fp32', 'ieee', width=293)
    if r.rc != 2 or '294' not in r.stderr:
        msgs.append(f'--width 293 with R=65535 fp32: rc={r.rc} stderr={r.stderr.strip()!r}')
    assert_no_mismatch(msgs)


def test_r65535_int32(tmp_path):
    require_binary()
    R = 65535
    rng = np.random.default_rng(7)
    hi, lo = ref.INT32_MAX, ref.INT32_MIN
    cols = [np.full(R, hi, dtype=np.int64), np.full(R, lo, dtype=np.int64),
            rng.integers(lo, hi + 1, size=R, dtype=np.int64)]
    x = rng.integers(-hi, hi + 1, size=R // 2, dtype=np.int64)
    cols.append(np.concatenate([x, -x, [5]])[rng.permutation(R)])
    case = Case('int32', np.stack(cols, axis=1), tmp_path / 'c', label='int32 R=65535')
    msgs = []
    for out in ['int32', 'fp32', 'e5m2']:
        msgs += case.check('kulisch', out, 'ieee')
    msgs += case.check('fp32_arrival', 'int32', 'saturate')
    assert_no_mismatch(msgs)


# ---------------------------------------------------------------------------
# self-checks of the reference's fp32 orders (no binary needed)
# ---------------------------------------------------------------------------

def _scalar_arrival(xs):
    acc = np.float32(xs[0])
    for x in xs[1:]:
        acc = np.float32(acc + np.float32(x))
    return acc


def _scalar_binomial(xs):
    x = [np.float32(v) for v in xs]
    R, k = len(x), 0
    while (1 << k) < R:
        s = 1 << k
        for i in range(0, R, 2 * s):
            if i + s < R:
                x[i] = np.float32(x[i] + x[i + s])
        k += 1
    return x[0]


@pytest.mark.parametrize('dtype,R', [('fp32', 7), ('fp32', 100), ('bf16', 33), ('e5m2', 64)])
def test_ref_orders_match_scalar_numpy(dtype, R):
    mat = ref.gen_matrix(dtype, R, per_kind=3, seed=R)
    X = ref.to_float32(dtype, mat).reshape(mat.shape)
    a = ref.fp32_arrival(dtype, mat, 'fp32', 'ieee').codes
    b = ref.fp32_binomial(dtype, mat, 'fp32', 'ieee').codes
    with np.errstate(all='ignore'):
        for j in range(mat.shape[1]):
            for got, fn in ((a[j], _scalar_arrival), (b[j], _scalar_binomial)):
                v = fn(list(X[:, j]))
                want = 0x7FC00000 if np.isnan(v) else int(np.float32(v).view(np.uint32))
                assert got & 0xFFFFFFFF == want or (np.isinf(v) and not np.isinf(X[:, j]).any())


def test_ref_binomial_schedule():
    assert ref.binomial_schedule(1) == []
    assert ref.binomial_schedule(2) == [(0, 1)]
    assert ref.binomial_schedule(3) == [(0, 1), (0, 2)]
    assert ref.binomial_schedule(5) == [(0, 1), (2, 3), (0, 2), (0, 4)]
    assert ref.binomial_schedule(8) == [(0, 1), (2, 3), (4, 5), (6, 7), (0, 2), (4, 6), (0, 4)]


# ---------------------------------------------------------------------------
# small hand cases for the fp32 orders (minimal reproductions)
# ---------------------------------------------------------------------------

_M = float(np.finfo(np.float32).max)
_INF, _NAN = float('inf'), float('nan')

# (policy, fp32 inputs in IN order, out, exceptions, expected code, expected flags)
ORDER_HAND = [
    # an Inf produced by overflow inside the tree is not an input Inf
    ('fp32_binomial', [1.0, 1.0, _M, _M], 'fp32', 'saturate', 0x7F7FFFFF, (1, 0, 0)),
    ('fp32_binomial', [_M, _M, 1.0, 1.0], 'fp32', 'saturate', 0x7F7FFFFF, (1, 0, 0)),
    ('fp32_binomial', [1.0, 1.0, _M, _M], 'fp32', 'ieee', 0x7F800000, (1, 0, 0)),
    ('fp32_binomial', [1.0, 1.0, _M, _M], 'e5m2', 'saturate', 0x7B, (1, 0, 0)),
    # a NaN produced by Inf - Inf inside the tree is not a NaN input
    ('fp32_binomial', [1.0, 1.0, _INF, -_INF], 'fp32', 'ieee', 0x7FC00000, (0, 1, 0)),
    ('fp32_binomial', [_INF, -_INF, 1.0, 1.0], 'fp32', 'ieee', 0x7FC00000, (0, 1, 0)),
    ('fp32_binomial', [1.0, _INF, 1.0, 1.0], 'e4m3fn', 'saturate', 0x7E, (1, 0, 0)),
    # binomial order differs from arrival order: (2^24 + 0) + (1 + 1) vs ((2^24 + 0) + 1) + 1
    ('fp32_binomial', [2.0 ** 24, 0.0, 1.0, 1.0], 'fp32', 'ieee', 0x4B800001, (0, 0, 0)),
    ('fp32_arrival', [2.0 ** 24, 0.0, 1.0, 1.0], 'fp32', 'ieee', 0x4B800000, (0, 0, 0)),
    ('fp32_binomial', [2.0 ** 24, 1.0, 1.0], 'fp32', 'ieee', 0x4B800000, (0, 0, 0)),
    ('fp32_arrival', [_M, _M, -_INF], 'fp32', 'ieee', 0x7FC00000, (1, 1, 0)),
    ('fp32_arrival', [_M, _M, _INF], 'fp32', 'saturate', 0x7F800000, (1, 0, 0)),
    ('fp32_arrival', [_M, _M, -_M], 'fp32', 'saturate', 0x7F7FFFFF, (1, 0, 0)),
    ('fp32_arrival', [_INF], 'e4m3fnuz', 'ieee', 0x80, (1, 0, 0)),
    ('fp32_arrival', [-0.0, -0.0], 'fp32', 'ieee', 0x80000000, (0, 0, 0)),
    ('fp32_arrival', [-0.0, 0.0], 'fp32', 'ieee', 0x00000000, (0, 0, 0)),
    ('fp32_arrival', [1.0, -1.0], 'e5m2', 'ieee', 0x00, (0, 0, 0)),
    ('fp32_arrival', [-(2.0 ** -20)], 'e4m3fn', 'ieee', 0x80, (0, 0, 0)),
    ('fp32_arrival', [-(2.0 ** -20)], 'e4m3fnuz', 'ieee', 0x00, (0, 0, 0)),
    # IEEE exceptions: Inf - Inf raised invalid before the NaN input arrived
    ('fp32_arrival', [_INF, -_INF, _NAN], 'fp32', 'ieee', 0x7FC00000, (0, 1, 1)),
    # ... but a NaN first means no Inf - Inf is ever computed
    ('fp32_arrival', [_NAN, _INF, -_INF], 'fp32', 'ieee', 0x7FC00000, (0, 0, 1)),
]


def test_ref_order_hand_cases():
    for pol, xs, out, exc, code, fl in ORDER_HAND:
        col = np.array([[int(np.float32(x).view(np.uint32))] for x in xs], dtype=np.int64)
        r = ref.reduce_result('fp32', pol, out, exc, list(col))
        got = (int(r.codes[0]), (int(r.overflow[0]), int(r.invalid[0]), int(r.nan_input[0])))
        assert got == (code, fl), (pol, xs, out, exc)


@pytest.mark.parametrize('k', range(len(ORDER_HAND)))
def test_order_hand_cases_binary(tmp_path, k):
    require_binary()
    pol, xs, out, exc, code, fl = ORDER_HAND[k]
    mat = np.array([[int(np.float32(x).view(np.uint32))] for x in xs], dtype=np.int64)
    case = Case('fp32', mat, tmp_path, label=f'fp32 {xs}')
    exp = ref.Result(1)
    exp.codes[0] = code
    exp.overflow[0], exp.invalid[0], exp.nan_input[0] = fl
    assert_no_mismatch(case.check(pol, out, exc, expected=exp))
