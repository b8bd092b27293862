"""Helpers to run the prism-reduce binary and compare it with prism_ref."""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

import prism_ref as ref

REPO = Path(__file__).resolve().parents[2]
# Under meson (scripts/test.sh, CI) PRISM_BUILD names the build directory and
# a missing binary is a failure; run by hand, the tests skip without one.
BUILD = Path(os.environ.get('PRISM_BUILD') or REPO / 'build')
BIN = Path(os.environ.get('PRISM_REDUCE') or BUILD / 'app/prism-reduce')

FLAGS_RE = re.compile(r'^flags: overflow=(\d+) invalid=(\d+) nan_input=(\d+)$')
MAX_REPORT = 6


def require_binary():
    if not (BIN.is_file() and os.access(BIN, os.X_OK)):
        if os.environ.get('PRISM_BUILD'):
            pytest.fail(f'prism-reduce binary not found at {BIN}')
        pytest.skip(f'prism-reduce binary not found at {BIN} (set PRISM_BUILD or PRISM_REDUCE)')


class Run:
    def __init__(self, proc: subprocess.CompletedProcess, out_path: Path):
        self.rc = proc.returncode
        self.stderr = proc.stderr.decode('utf-8', 'replace')
        self.stdout = proc.stdout.decode('utf-8', 'replace')
        self.out_path = out_path
        self.out_exists = out_path.exists()
        self.out = out_path.read_bytes() if self.out_exists else None

    @property
    def stderr_lines(self):
        return [ln for ln in self.stderr.splitlines() if ln.strip()]

    def flags(self) -> dict:
        lines = self.stderr.splitlines()
        assert lines, 'no stderr output; expected a final flags line'
        m = FLAGS_RE.match(lines[-1])
        assert m, f'last stderr line is not a flags line: {lines[-1]!r}'
        return {'overflow': int(m[1]), 'invalid': int(m[2]), 'nan_input': int(m[3])}


def run_cli(args, cwd: Path, out_name='out.bin', timeout=120) -> Run:
    """Run prism-reduce with `args` (list of str) in `cwd`."""
    out_path = cwd / out_name
    if out_path.exists():
        out_path.unlink()
    proc = subprocess.run([str(BIN)] + [str(a) for a in args], cwd=cwd,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          timeout=timeout, stdin=subprocess.DEVNULL)
    return Run(proc, out_path)


class Case:
    """R input files r0..r{R-1} holding the rows of `mat` (R, N) of `dtype` codes."""

    def __init__(self, dtype: str, mat: np.ndarray, directory: Path, label=''):
        self.dtype = dtype
        self.mat = np.asarray(mat, dtype=np.int64)
        self.R, self.N = self.mat.shape
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.label = label or f'{dtype} R={self.R}'
        self.names = [f'r{i}' for i in range(self.R)]
        dfd = os.open(self.dir, os.O_RDONLY)
        try:
            for name, row in zip(self.names, self.mat):
                fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644, dir_fd=dfd)
                try:
                    data = memoryview(ref.codes_to_bytes(dtype, row))
                    while data:
                        data = data[os.write(fd, data):]
                finally:
                    os.close(fd)
        finally:
            os.close(dfd)
        self._exact = None

    @property
    def exact(self) -> ref.ExactSums:
        if self._exact is None:
            self._exact = ref.ExactSums(self.dtype, self.mat)
        return self._exact

    def run(self, policy, out=None, exceptions=None, order=None, width=None) -> Run:
        args = ['--dtype', self.dtype, '--policy', policy]
        if out is not None:
            args += ['--out-dtype', out]
        if exceptions is not None:
            args += ['--exceptions', exceptions]
        if width is not None:
            args += ['--width', str(width)]
        args += ['-o', 'out.bin']
        names = self.names if order is None else [self.names[i] for i in order]
        return run_cli(args + names, self.dir)

    def expected(self, policy, out, exceptions, order=None) -> ref.Result:
        mat = self.mat if order is None else self.mat[list(order)]
        if policy == 'kulisch' or self.dtype in ref.INT_FORMATS:
            if order is None:
                return self.exact.finalize(out, exceptions)
            return ref.ExactSums(self.dtype, mat).finalize(out, exceptions)
        if policy == 'fp32_arrival':
            return ref.fp32_arrival(self.dtype, mat, out, exceptions)
        return ref.fp32_binomial(self.dtype, mat, out, exceptions)

    def check(self, policy, out, exceptions, order=None, expected=None) -> list[str]:
        """Run and compare; returns a list of human readable mismatches."""
        tag = f'{self.label} policy={policy} out={out} exc={exceptions}'
        r = self.run(policy, out, exceptions, order)
        if r.rc != 0:
            return [f'{tag}: exit {r.rc}, stderr={r.stderr.strip()!r}']
        exp = expected or self.expected(policy, out, exceptions, order)
        return compare(tag, self.dtype, self.mat if order is None else self.mat[list(order)],
                       out, r, exp)


def compare(tag, dtype, mat, out, r: Run, exp: ref.Result) -> list[str]:
    msgs = []
    n = mat.shape[1]
    if r.out is None:
        return [f'{tag}: no output file']
    esz = ref.elem_size(out)
    if len(r.out) != n * esz:
        return [f'{tag}: output has {len(r.out)} bytes, expected {n * esz}']
    got = ref.bytes_to_codes(out, r.out)
    exp_codes = np.asarray(exp.codes, dtype=np.int64)
    if out not in ref.INT_FORMATS:
        mask = (1 << (8 * esz)) - 1
        got = got & mask
        exp_codes = exp_codes & mask
    bad = np.nonzero(got != exp_codes)[0]
    for j in bad[:MAX_REPORT]:
        col = mat[:, j]
        shown = ', '.join(ref.fmt_code(dtype, c) for c in col[:8])
        if len(col) > 8:
            shown += f', ... ({len(col)} inputs)'
        fl = [k for k in ('overflow', 'invalid', 'nan_input') if getattr(exp, k)[j]]
        msgs.append(f'{tag} elem {j}: expected {ref.fmt_code(out, exp_codes[j])} '
                    f'(flags {fl}) got {ref.fmt_code(out, got[j])}; inputs [{shown}]')
    if len(bad) > MAX_REPORT:
        msgs.append(f'{tag}: ... {len(bad)} mismatching elements in total')
    try:
        fl = r.flags()
    except AssertionError as e:
        msgs.append(f'{tag}: {e}')
    else:
        if fl != exp.flags():
            msgs.append(f'{tag}: flags expected {exp.flags()} got {fl}')
    return msgs


def assert_no_mismatch(msgs):
    if msgs:
        pytest.fail(f'{len(msgs)} mismatch report(s):\n' + '\n'.join(msgs[:40]),
                    pytrace=False)
