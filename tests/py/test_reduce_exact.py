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
