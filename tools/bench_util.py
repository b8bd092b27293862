"""What the rank benchmarks (tools/bench_rank.py, tools/bench_coll.py, tools/bench_mpi.py,
tools/bench_torch.py) share: sizes given and printed, times printed, the machine a run measured,
and the OSU-style side-by-side driver (osu_main)."""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path


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


def osu_cell(row: dict) -> str:
    """Below 1 MiB the time, from 1 MiB the input Gbit/s."""
    t = row['seconds_median']
    return f'{t * 1e6:.1f} µs' if row['bytes'] < (1 << 20) else f"{row['bytes'] * 8 / t / 1e9:.2f} Gbit/s"


def osu_main(prog: str, doc: str, modes: tuple, sizes: str, baselines: tuple, run, build: Path) -> int:
    """An OSU-style run: every mode of `modes` at each p and size, side by side, with the speed ratios
    of each PRISM mode against each baseline (the baseline's time over PRISM's: above 1, PRISM is
    faster). run(build, mode, p, sizes, target_seconds) returns one row per size (bytes,
    seconds_median, seconds_min, repeat; cpu_seconds and checked where the program gives them)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--build', default=str(build))
    ap.add_argument('--ranks', default='2,4')
    ap.add_argument('--sizes', default=sizes)
    ap.add_argument('--modes', default=','.join(modes))
    ap.add_argument('--target-seconds', type=float, default=0.2)
    ap.add_argument('--quick', action='store_true', help='p = 2; 4 B and 4 KiB')
    ap.add_argument('--json', help='write every figure here')
    ap.add_argument('--markdown', action='store_true', help='print the table as Markdown')
    a = ap.parse_args()
    ranks = [2] if a.quick else [int(x) for x in a.ranks.split(',')]
    sz = [4, 4096] if a.quick else [parse_size(x, 1) for x in a.sizes.split(',')]
    chosen = [m for m in a.modes.split(',') if m]
    for m in chosen:
        if m not in modes:
            ap.error(f'--modes: {m} is not one of {", ".join(modes)}')
    t0 = time.time()
    results = []
    for p in ranks:
        for m in chosen:
            for row in run(Path(a.build), m, p, sz, a.target_seconds):
                results.append(dict(mode=m, ranks=p, bytes=row['bytes'], seconds_median=row['seconds_median'],
                                    seconds_min=row['seconds_min'], repeat=row['repeat'],
                                    **{k: row[k] for k in ('cpu_seconds', 'checked') if k in row}))
                print(f"{prog}: p={p} {size_name(row['bytes'])} {m}: {osu_cell(row)}", file=sys.stderr)
    by = {(r['ranks'], r['bytes'], r['mode']): r for r in results}
    pairs = [(m, b) for m in chosen if m.startswith('prism') for b in baselines if b in chosen]
    head = ['p', 'n'] + chosen + [f'{m} ÷ {b} (speed)' for m, b in pairs]
    lines = ['| ' + ' | '.join(head) + ' |', '|' + '---:|' * len(head)]
    for p in ranks:
        for n in sz:
            row = [str(p), size_name(n)] + [osu_cell(by[(p, n, m)]) for m in chosen]
            row += [f"{by[(p, n, b)]['seconds_median'] / by[(p, n, m)]['seconds_median']:.2f}" for m, b in pairs]
            lines.append('| ' + ' | '.join(row) + ' |')
    table = '\n'.join(lines)
    print(table if a.markdown else table.replace('|', ' '))
    if a.json:
        Path(a.json).write_text(json.dumps(dict(machine=machine_info(), seconds=round(time.time() - t0, 1),
                                                ranks=ranks, sizes=sz, modes=chosen, results=results), indent=1))
    return 0
