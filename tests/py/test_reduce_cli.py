"""Command line behaviour of prism-reduce: errors (exit 2, one stderr line that
names the offending thing, no OUT left behind), width admission, defaults, and
the final flags line."""
import errno
import os
import re
import stat
import subprocess
import tempfile
import threading
from pathlib import Path

import numpy as np
import pytest

import prism_ref as ref
from prism_cli import BIN, FLAGS_RE, Case, assert_no_mismatch, compare, require_binary, run_cli


@pytest.fixture(autouse=True)
def _binary():
    require_binary()


def write(path, data: bytes):
    path.write_bytes(data)
    return path.name


def f32(vals):
    return np.asarray(vals, dtype=np.float32).tobytes()


def assert_usage_error(r, *must_mention, any_of=None):
    assert r.rc == 2, f'expected exit 2, got {r.rc}; stderr={r.stderr!r}'
    lines = r.stderr_lines
    assert len(lines) == 1, f'expected exactly one stderr line, got {lines!r}'
    msg = lines[0]
    for m in must_mention:
        assert m in msg, f'error message {msg!r} does not mention {m!r}'
    if any_of:
        assert any(all(re.search(rf'(?<![0-9A-Za-z_]){re.escape(x)}(?![0-9A-Za-z_])', msg)
                       for x in group) for group in any_of), \
            f'error message {msg!r} mentions none of {any_of!r}'
    assert not r.out_exists, 'OUT file left behind after an error'


def test_unequal_lengths(tmp_path):
    a = write(tmp_path / 'a.bin', f32(np.arange(10)))   # 40 bytes, 10 elements
    b = write(tmp_path / 'b.bin', f32(np.arange(11)))   # 44 bytes, 11 elements
    r = run_cli(['--dtype', 'fp32', '--policy', 'kulisch', '-o', 'out.bin', a, b], tmp_path)
    assert_usage_error(r, any_of=[('40', '44'), ('10', '11')])


def test_partial_element(tmp_path):
    a = write(tmp_path / 'odd3.bin', b'\x00\x3c\x00')   # 3 bytes of fp16
    r = run_cli(['--dtype', 'fp16', '--policy', 'kulisch', '-o', 'out.bin', a], tmp_path)
    assert_usage_error(r, any_of=[('odd3.bin',), ('3',)])


def test_partial_element_second_input(tmp_path):
    a = write(tmp_path / 'ok.bin', b'\x00' * 8)
    b = write(tmp_path / 'seven.bin', b'\x00' * 7)     # not a multiple of 4 (fp32)
    r = run_cli(['--dtype', 'fp32', '--policy', 'kulisch', '-o', 'out.bin', a, b], tmp_path)
    assert_usage_error(r, any_of=[('seven.bin',), ('7',)])


@pytest.mark.parametrize('opt,bad', [('--dtype', 'fp64'), ('--policy', 'pairwise'),
                                     ('--out-dtype', 'tf32'), ('--exceptions', 'wrap')])
def test_unknown_names(tmp_path, opt, bad):
    a = write(tmp_path / 'a.bin', f32([1, 2]))
    args = {'--dtype': 'fp32', '--policy': 'kulisch'}
    args[opt] = bad
    argv = [x for kv in args.items() for x in kv] + ['-o', 'out.bin', a]
    r = run_cli(argv, tmp_path)
    assert_usage_error(r, bad)


@pytest.mark.parametrize('dtype', ['fp32', 'bf16', 'e4m3fn'])
@pytest.mark.parametrize('out', ['int32', 'int8'])
def test_float_in_integer_out(tmp_path, dtype, out):
    a = write(tmp_path / 'a.bin', b'\x00' * 8)
    r = run_cli(['--dtype', dtype, '--policy', 'kulisch', '--out-dtype', out,
                 '-o', 'out.bin', a], tmp_path)
    assert r.rc == 2 and len(r.stderr_lines) == 1 and not r.out_exists, r.stderr


def test_missing_input_file(tmp_path):
    a = write(tmp_path / 'a.bin', f32([1, 2]))
    r = run_cli(['--dtype', 'fp32', '--policy', 'kulisch', '-o', 'out.bin', a,
                 'no_such_input.bin'], tmp_path)
    assert_usage_error(r, 'no_such_input.bin')


def test_unreadable_input(tmp_path):
    (tmp_path / 'adir.bin').mkdir()                     # a directory cannot be read as IN
    a = write(tmp_path / 'a.bin', f32([1, 2]))
    r = run_cli(['--dtype', 'fp32', '--policy', 'kulisch', '-o', 'out.bin', a, 'adir.bin'],
                tmp_path)
    assert_usage_error(r, 'adir.bin')


def test_no_input(tmp_path):
    r = run_cli(['--dtype', 'fp32', '--policy', 'kulisch', '-o', 'out.bin'], tmp_path)
    assert_usage_error(r)


def test_missing_output_option(tmp_path):
    a = write(tmp_path / 'a.bin', f32([1, 2]))
    before = set(p.name for p in tmp_path.iterdir())
    r = run_cli(['--dtype', 'fp32', '--policy', 'kulisch', a], tmp_path)
    assert_usage_error(r)
    assert set(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.parametrize('missing', ['--dtype', '--policy'])
def test_missing_required_option(tmp_path, missing):
    a = write(tmp_path / 'a.bin', f32([1, 2]))
    args = {'--dtype': 'fp32', '--policy': 'kulisch'}
    del args[missing]
    argv = [x for kv in args.items() for x in kv] + ['-o', 'out.bin', a]
    r = run_cli(argv, tmp_path)
    assert r.rc == 2 and len(r.stderr_lines) == 1 and not r.out_exists, r.stderr


def test_error_keeps_no_stale_output(tmp_path):
    """An OUT that would be produced must not appear when an IN is missing later."""
    names = [write(tmp_path / f'r{i}', f32([i])) for i in range(5)]
    r = run_cli(['--dtype', 'fp32', '--policy', 'fp32_arrival', '-o', 'out.bin']
                + names + ['gone'], tmp_path)
    assert_usage_error(r, 'gone')


# ---------------------------------------------------------------------------
# width admission
# ---------------------------------------------------------------------------

WIDTH_CASES = [('fp32', 64), ('fp32', 1), ('bf16', 3), ('fp16', 2), ('e5m2fnuz', 7),
               ('e5m2', 5), ('e4m3fn', 1), ('e4m3fnuz', 9), ('int8', 2), ('int32', 3)]


@pytest.mark.parametrize('dtype,R', WIDTH_CASES)
def test_width_admission(tmp_path, dtype, R):
    need = ref.required_width(dtype, R)
    mat = np.zeros((R, 2), dtype=np.int64)
    case = Case(dtype, mat, tmp_path)
    r = case.run('kulisch', width=need - 1)
    assert_usage_error(r, str(need))
    r = case.run('kulisch', width=need)
    assert r.rc == 0, f'--width {need} refused for {dtype} R={R}: {r.stderr!r}'
    r = case.run('kulisch')          # default width 294 admits all of these
    assert r.rc == 0, r.stderr


def test_width_fp32_64_inputs_283(tmp_path):
    case = Case('fp32', np.zeros((64, 1), dtype=np.int64), tmp_path)
    r = case.run('kulisch', width=283)
    assert_usage_error(r, '284')


# ---------------------------------------------------------------------------
# successful runs: defaults, output size, flags line
# ---------------------------------------------------------------------------

def test_default_out_dtypes(tmp_path):
    msgs = []
    mat = ref.gen_matrix('bf16', 5, per_kind=2, seed=11)
    c = Case('bf16', mat, tmp_path / 'f')
    r = c.run('kulisch', exceptions='ieee')                   # default out = fp32
    msgs += compare('default out bf16', 'bf16', mat, 'fp32', r,
                    c.expected('kulisch', 'fp32', 'ieee'))
    imat = ref.gen_matrix('int8', 5, per_kind=2, seed=12)
    ci = Case('int8', imat, tmp_path / 'i')
    r = ci.run('kulisch', exceptions='ieee')                  # default out = int32
    msgs += compare('default out int8', 'int8', imat, 'int32', r,
                    ci.expected('kulisch', 'int32', 'ieee'))
    assert_no_mismatch(msgs)


def test_flags_line_format_and_counts(tmp_path):
    inf, nan, M = float('inf'), float('nan'), float(np.finfo(np.float32).max)
    # columns: plain, NaN input, +Inf & -Inf, overflow, Inf into e4m3fn
    rows = [[1.0, nan, inf, M, inf],
            [2.0, 1.0, -inf, M, 1.0]]
    names = [write(tmp_path / f'in{i}', f32(r)) for i, r in enumerate(rows)]
    r = run_cli(['--dtype', 'fp32', '--policy', 'kulisch', '--out-dtype', 'fp32',
                 '--exceptions', 'ieee', '-o', 'out.bin'] + names, tmp_path)
    assert r.rc == 0, r.stderr
    last = r.stderr.splitlines()[-1]
    assert FLAGS_RE.match(last), last
    assert r.flags() == {'overflow': 1, 'invalid': 1, 'nan_input': 1}
    assert list(np.frombuffer(r.out, '<u4')) == [0x40400000, 0x7FC00000, 0x7FC00000,
                                                  0x7F800000, 0x7F800000]
    r = run_cli(['--dtype', 'fp32', '--policy', 'kulisch', '--out-dtype', 'e4m3fn',
                 '--exceptions', 'saturate', '-o', 'out.bin'] + names, tmp_path)
    assert r.rc == 0, r.stderr
    assert r.flags() == {'overflow': 2, 'invalid': 1, 'nan_input': 1}
    assert list(r.out) == [0x44, 0x7F, 0x7F, 0x7E, 0x7E]   # 3.0 = 1.5*2^1


def test_empty_inputs(tmp_path):
    """Zero-length INs are whole numbers of elements: empty OUT, zero flags."""
    names = [write(tmp_path / f'e{i}', b'') for i in range(3)]
    r = run_cli(['--dtype', 'fp16', '--policy', 'kulisch', '-o', 'out.bin'] + names, tmp_path)
    if r.rc == 2:
        pytest.skip('empty inputs rejected (not specified)')
    assert r.rc == 0 and r.out == b''
    assert r.flags() == {'overflow': 0, 'invalid': 0, 'nan_input': 0}


# ---------------------------------------------------------------------------
# -o OUT: what OUT names stays what it is
# ---------------------------------------------------------------------------

def reduce_to(tmp_path, out, umask=None):
    """fp32 kulisch of [1, 2] + [3, 4] (exact: [4, 6]) written to `out`; returns the CompletedProcess."""
    a = write(tmp_path / 'a.bin', f32([1, 2]))
    b = write(tmp_path / 'b.bin', f32([3, 4]))
    return subprocess.run([str(BIN), '--dtype', 'fp32', '--policy', 'kulisch', '-o', str(out), a, b],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
                          preexec_fn=(lambda: os.umask(umask)) if umask is not None else None)


SUM = f32([4, 6])


def leftovers(*dirs):
    return [p.name for d in dirs for p in d.iterdir() if '.tmp' in p.name]


def test_output_symlink_stays_a_link_and_its_target_gets_the_data(tmp_path):
    (tmp_path / 'sub').mkdir()
    target = tmp_path / 'sub' / 'real.bin'
    target.write_bytes(b'old contents')
    target.chmod(0o640)
    link = tmp_path / 'out.bin'
    link.symlink_to('sub/real.bin')
    r = reduce_to(tmp_path, 'out.bin')
    assert r.returncode == 0, r.stderr
    assert link.is_symlink() and os.readlink(link) == 'sub/real.bin'
    assert target.read_bytes() == SUM
    assert stat.S_IMODE(target.stat().st_mode) == 0o640, 'the replaced file keeps its permission bits'
    assert leftovers(tmp_path, tmp_path / 'sub') == []


def test_output_dangling_symlink_creates_its_target(tmp_path):
    link = tmp_path / 'out.bin'
    link.symlink_to('new.bin')
    r = reduce_to(tmp_path, 'out.bin')
    assert r.returncode == 0, r.stderr
    assert link.is_symlink() and (tmp_path / 'new.bin').read_bytes() == SUM


def test_new_output_gets_the_umask_mode(tmp_path):
    r = reduce_to(tmp_path, 'out.bin', umask=0o027)
    assert r.returncode == 0, r.stderr
    assert stat.S_IMODE((tmp_path / 'out.bin').stat().st_mode) == 0o640
    assert (tmp_path / 'out.bin').read_bytes() == SUM and leftovers(tmp_path) == []


def test_output_fifo_is_written_through(tmp_path):
    fifo = tmp_path / 'out.fifo'
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    r = reduce_to(tmp_path, fifo)
    reader.join(30)
    assert r.returncode == 0, r.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode), 'the FIFO was replaced'
    assert got == [SUM]
    assert leftovers(tmp_path) == []


def test_output_dev_null_stays_a_device():
    # Written through: /dev/null is not replaced by a file (run as root, the
    # rename of a temp over it would succeed), and nothing is left in /dev.
    before = set(os.listdir('/dev'))
    with tempfile.TemporaryDirectory() as d:
        r = reduce_to(Path(d), '/dev/null')
    assert r.returncode == 0, r.stderr
    assert stat.S_ISCHR(os.lstat('/dev/null').st_mode)
    assert set(os.listdir('/dev')) - before == set()


def test_output_write_error_is_reported(tmp_path):
    if not os.path.exists('/dev/full'):
        pytest.skip('no /dev/full')
    r = reduce_to(tmp_path, '/dev/full')
    assert r.returncode == 2
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and '/dev/full' in lines[0] and os.strerror(errno.ENOSPC) in lines[0], lines


@pytest.mark.parametrize('out,says', [('nodir/out.bin', 'directory nodir does not exist'),
                                      ('sub', 'it is a directory')])
def test_output_that_cannot_be_made_is_refused(tmp_path, out, says):
    (tmp_path / 'sub').mkdir()
    before = sorted(p.name for p in tmp_path.rglob('*') if p.name not in ('a.bin', 'b.bin'))
    r = reduce_to(tmp_path, out)
    assert r.returncode == 2 and says in r.stderr and out in r.stderr, r.stderr
    assert sorted(p.name for p in tmp_path.rglob('*') if p.name not in ('a.bin', 'b.bin')) == before


def test_help_and_errors_name_every_choice(tmp_path):
    """--help and an unknown name list every format, policy and exceptions policy
    the reference model knows (the texts come from the tables, not copies)."""
    r = subprocess.run([str(BIN), '--help'], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0
    for w in ref.ALL_DTYPES + ref.POLICIES + ref.EXCEPTIONS:
        assert re.search(rf'(?<![0-9A-Za-z_]){w}(?![0-9A-Za-z_])', r.stdout), f'--help does not name {w}'
    a = write(tmp_path / 'a.bin', f32([1]))
    for opt, listed in [('--dtype', ref.ALL_DTYPES), ('--policy', ref.POLICIES), ('--exceptions', ref.EXCEPTIONS)]:
        args = {'--dtype': 'fp32', '--policy': 'kulisch', opt: 'nonesuch'}
        r = run_cli([x for kv in args.items() for x in kv] + ['-o', 'out.bin', a], tmp_path)
        assert_usage_error(r, 'nonesuch', *listed)
