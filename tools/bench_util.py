"""What the rank benchmarks (tools/bench_rank.py, tools/bench_coll.py) share: sizes given and
printed, times printed, and the machine a run measured."""
from __future__ import annotations

import os
import platform
import re
import subprocess
import sys


def parse_size(s: str, elem: int = 4) -> int:
    """'64KiB' -> 65536; a positive whole number of `elem`-byte elements, else ValueError."""
    m = re.fullmatch(r'(\d+)\s*(B|KiB|K|k|MiB|M|GiB|G)?', s.strip())
    if not m:
        raise ValueError(f'bad size {s!r}: bytes, e.g. 4096, 64KiB, 1MiB')
    mul = {None: 1, 'B': 1, 'KiB': 1 << 10, 'K': 1 << 10, 'k': 1 << 10, 'MiB': 1 << 20, 'M': 1 << 20,
           'GiB': 1 << 30, 'G': 1 << 30}[m.group(2)]
    n = int(m.group(1)) * mul
    if n <= 0 or n % elem:
        raise ValueError(f'size {s!r}: a positive whole number of {elem}-byte elements')
    return n


def size_name(n: int) -> str:
    for unit, v in (('GiB', 1 << 30), ('MiB', 1 << 20), ('KiB', 1 << 10)):
        if n % v == 0:
            return f'{n // v} {unit}'
    return f'{n} B'


def fmt_time(s: float | None) -> str:
    if s is None:
        return '-'
    if s < 1e-3:
        return f'{s * 1e6:.0f} us'
    if s < 1:
        return f'{s * 1e3:.2f} ms'
    return f'{s:.2f} s'


def machine_info() -> dict:
    """Host name, kernel, CPU count and lscpu's fields (the CPU model a figure came from)."""
    out = {'hostname': platform.node(), 'kernel': platform.release(), 'cpus': os.cpu_count()}
    try:
        text = subprocess.run(['lscpu'], capture_output=True, text=True, timeout=10).stdout
        fields = dict(ln.split(':', 1) for ln in text.splitlines() if ':' in ln)
        fields = {k.strip(): v.strip() for k, v in fields.items()}
        out['cpu_model'] = fields.get('Model name', '')
        out['hypervisor'] = fields.get('Hypervisor vendor', '')
        out['lscpu'] = {k: v for k, v in fields.items() if k != 'Flags'}
    except (OSError, subprocess.SubprocessError):
        out['cpu_model'] = platform.processor()
    return out


def load_testbed():
    """scripts/testbed.py, the testbed's one implementation, as a module (the tools' benches)."""
    import importlib.util
    from pathlib import Path
    spec = importlib.util.spec_from_file_location(
        'prism_testbed_impl', Path(__file__).resolve().parents[1] / 'scripts' / 'testbed.py')
    mod = importlib.util.module_from_spec(spec)
    sys.modules['prism_testbed_impl'] = mod
    spec.loader.exec_module(mod)
    return mod


def mpirun_prefix(ranks: int) -> list[str]:
    """mpirun for `ranks` local processes on a machine with fewer cores: no binding (the ranks
    time-share every CPU, as prism-rank's do), oversubscription allowed, and root allowed when root."""
    cmd = ['mpirun', '-np', str(ranks), '--bind-to', 'none', '--oversubscribe']
    if os.geteuid() == 0:
        cmd.insert(1, '--allow-run-as-root')
    return cmd


def mpi_version() -> str:
    """`mpirun --version`'s first line ('' without Open MPI)."""
    try:
        v = subprocess.run(['mpirun', '--version'], capture_output=True, text=True, timeout=10).stdout
        return v.splitlines()[0].strip() if v else ''
    except (OSError, subprocess.SubprocessError):
        return ''
