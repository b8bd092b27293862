#!/usr/bin/env python3
"""The host collectives' cost models (lib/coll/cost_model.hpp), predicted against measured, in one run;
with --compare, the host collectives against Open MPI and Gloo.

    tools/bench_coll.py [--ranks 2,3,4,5,6,7,8] [--sizes 1KiB,4KiB,...,16MiB]
                        [--algos hosts,auto] [--policy kulisch] [--dtype fp32] [--data spread]
                        [--collective allreduce] [--target-seconds 0.3] [--timeout 180]
                        [--json FILE] [--plot FILE.png] [--markdown] [--quick] [--build DIR]
    tools/bench_coll.py --compare [--ranks 2,4,8] [--sizes 1MiB,4MiB,16MiB,64MiB] [--dtype fp32]
                        [--also bf16:16MiB] [--data gradient[,wide]] [--links tcp,shm]
                        [--baselines mpi_tcp,mpi_sm,gloo]
                        [--algos rhd,ring] [--skip P:SIZE] [--check] [--json FILE] [--plot FILE.png]
                        [--markdown] [--quick]

No switch: every rank is a local process of build/app/prism-rank on loopback (a config whose
members are all 127.0.0.1 with distinct udp_port, the port each rank's TCP listener takes), and
the ranks reduce among themselves over TCP with --algo (lib/coll).

Method:
- Calibration, once per p, with p ranks (as `--algo auto` does it before each run):
  `prism-rank --calibrate FILE --candidates HOSTS` with the op given (policy,
  dtype, collective): every pair of ranks ping-pongs at once for alpha and beta, every rank times
  its reducers for gamma, all at once, so ranks that share the cores measure that. Every run at
  that p gets `--calibration FILE`, so its algorithms' predictions come from the same parameters;
  they are printed.
- For each p of --ranks, n of --sizes and algorithm of --algos: p processes at once, `--algo A
  --repeat N --warmup 1 --json` (the chain with the model's m: no --segments; auto with
  --candidates HOSTS). HOSTS: every host algorithm of `prism-rank --list-algos --json`
  (lib/coll/algorithms.hpp's table). N is adaptive, enough collectives for about
  --target-seconds of measurement, between 2 and 20: from the larger of the algorithm's
  prediction (once a run at this (p, n) has reported them) and its time at the previous size
  scaled by the size; a run whose measured time shows N was far too small (N < 20) is rerun once
  with more. The collective's time is the slowest rank's: max over ranks of each rank's median
  (and of each rank's min); the prediction is the run's `predicted_seconds` (what ran).
- Checks: every rank of a run reports the same digest; with --policy kulisch every algorithm
  reports the same digest for the same (p, n) (KULISCH_FIXED is exact: the order does not
  matter). A mismatch, a failed rank or a run past --timeout (its process groups killed) is a
  failure: reported, and the exit status is 1.
- Each run gets fresh TCP ports (a random base in 30000-60000, moving on each run); a run that
  fails is retried once on new ports.

Output: a table, per (p, n): each algorithm's measured median, predicted time and
measured/predicted; the algorithm measured fastest (of the non-auto ones); what auto chose (its
run's `algo` and, for the chain, `segments`) and whether that was the fastest, strictly and
within 10% (its algorithm's own run against the fastest's). Then a summary: how often auto
picked the fastest, over all (p, n) and for p <= 2 (no oversubscription on a 2-vCPU machine)
against p > 2; and per algorithm the median and spread (min, max, quartiles) of
measured/predicted. --markdown prints the table and summary as Markdown instead (for docs).
--json FILE writes every measurement (every rank's JSON line too), the calibration, the CPU
model (lscpu) and the core count. --plot FILE.png (gnuplot; pngcairo, else png): a 2x2
multiplot, measured (points) against predicted (lines) time over size, log-log, one colour per
algorithm, for p = 2, 4 and 8 (or the ranks given), and measured/predicted against n for every run.
--quick: p = 2 and 3, 4 KiB and 256 KiB, repeat 2 (the smoke test: tests/py/test_bench_coll.py).

--compare (docs/HOST_COLLECTIVES.md, "Against Open MPI and Gloo"): an allreduce, for every p of
--ranks and n of --sizes (and the --also cells, e.g. bf16 at 16 MiB), in one run:
- PRISM: every host algorithm of the table under --policy fp32_arrival and under kulisch, and
  --algo auto under each (its calibration once per (p, policy, dtype, data), as above), prism-rank
  --dtype D --out-dtype D --data DATA (default gradient; a list runs each: gradient,wide), over
  each kind of links of --links (default tcp,shm: PRISM_LINKS=tcp, then shm, lib/group/links_choice.hpp;
  the ranks meet through a fresh file store), the kinds of one size one after the other. Each
  (p, n, dtype, data, links) is a row.
- mpi_tcp: build/tools/mpi-allreduce under mpirun --bind-to none --oversubscribe --mca pml ob1
  --mca btl self,tcp (btl_tcp_if_include lo) --mca mpi_yield_when_idle 1 (at every p: a spinning
  rank at p = 2 on a shared 2-vCPU machine can wait a scheduler slice, ~24 ms, per step, in some
  launches); mpi_sm: the same with --mca btl self,vader; gloo:
  p processes of /usr/bin/python3 tools/torch_allreduce.py (torch.distributed, backend gloo, a CPU
  tensor, a file store, GLOO_SOCKET_IFNAME=lo). One launch per p and dtype for every size; their
  data are their own (values whose sums are exact), and every result is checked against the
  exact sum (--check in both programs); bf16 runs under MPI as a user-defined sum, and is refused
  by torch 1.13's gloo (reported as n/a).
- Every figure timed the same way: after one warmup, each rank times its own collectives back to
  back (no barrier between them); the time is the slowest rank's median; Gbit/s = input bytes
  per rank x 8 / time. The repeat is adaptive (about --target-seconds measured, 3..20; MPI and
  Gloo set theirs from their warmup), or --repeat.
- Per (p, n, dtype, data): Gbit/s of each; KULISCH / ARRIVAL per algorithm; the best host
  algorithm under each policy / MPI tcp, / MPI sm and / Gloo; what auto chose under each policy
  and whether that algorithm was the measured fastest of the policy (or within 10%). Summary: the
  fraction of cells auto got right, the ratios' spreads, and issue 28's targets cell by cell; over
  every row and per kind of links.
- Checks: the ranks of every run agree; under kulisch every algorithm and auto, over every kind of
  links, give the same digest for the same (p, n, dtype, data); MPI's and Gloo's results are the exact sum; --check
  also has prism-rank compare every result with the reference model (small sizes: it is slow).
- --json FILE: every run (each rank's JSON line too), the calibrations, the CPU, the load
  average at start and end, Open MPI's and torch's versions and the commit. --plot FILE.png: for
  p = 2, 4 and 8, Gbit/s over n of the best host algorithm per policy and kind of links (solid
  KULISCH, dashed ARRIVAL) and of the baselines, and KULISCH / ARRIVAL of every algorithm and row. --quick: p = 2, 256 KiB fp32 and 64 KiB bf16,
  repeat 2 (tests/py/test_bench_coll.py). Needs Open MPI (openmpi-bin, libopenmpi-dev) and
  python3-torch (scripts/setup.sh installs both); --baselines leaves any out.

Timings on a shared VM are what the machine gives: with more ranks than cores the ranks time-share
the CPUs; the model knows only what the calibration at that p measured of it.

Exit status: 0 done, 1 a measurement or check failed (the rest is still reported), 2 a usage or
setup error (prism-rank missing, calibration failed), 130 interrupted. Whatever the way out,
every rank process is killed and the temporary directory removed.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_util import fmt_time, machine_info, mpi_version, mpirun_prefix, parse_size, size_name  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DEFAULT_RANKS = '2,3,4,5,6,7,8'
DEFAULT_SIZES = '1KiB,4KiB,16KiB,64KiB,256KiB,1MiB,4MiB,16MiB'
DEFAULT_ALGOS = 'hosts,auto'  # every host algorithm of prism-rank's table, then auto
ELEM = {'fp32': 4, 'fp16': 2, 'bf16': 2, 'e4m3fn': 1, 'e4m3fnuz': 1, 'e5m2': 1, 'e5m2fnuz': 1,
        'int8': 1, 'int32': 4}
COLOURS = {'binomial': '#1f77b4', 'chain': '#d62728', 'rhd': '#2ca02c', 'ring': '#9467bd',
           'auto': '#ff7f0e'}  # others: gnuplot's own


def host_algorithms(rank_bin: Path) -> dict[str, list[str]]:
    """The host algorithms of prism-rank's table (lib/coll/algorithms.hpp, `--list-algos --json`), each
    with the collectives it runs: the one list the library, its CLI and this tool share."""
    out = subprocess.run([str(rank_bin), '--list-algos', '--json'], capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        raise ValueError(f'{rank_bin} --list-algos --json: {out.stderr.strip()}')
    return {a['name']: a['collectives'] for a in json.loads(out.stdout)['algorithms'] if a['hosts']}


CANDIDATES = ''  # set by main(): every host algorithm of the table, comma-separated

MIN_REPEAT, MAX_REPEAT = 2, 20


class Interrupted(Exception):
    pass


def log(msg: str):
    print(f'bench_coll: {msg}', file=sys.stderr, flush=True)


# ---------------------------------------------------------------- processes
LIVE: set = set()   # every rank process not yet reaped; each leads a process group of its own


def kill_group(proc: subprocess.Popen):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    LIVE.discard(proc)


def kill_all():
    for proc in list(LIVE):
        kill_group(proc)


class Ports:
    """A fresh block of TCP ports for each run: below the kernel's ephemeral range where 30000-60000
    leaves room (so an outgoing connection cannot hold a rank's port), each port checked free."""

    def __init__(self):
        lo, hi = 30000, 60000
        try:
            e_lo, e_hi = map(int, Path('/proc/sys/net/ipv4/ip_local_port_range').read_text().split())
            if e_lo - lo >= 1000:
                hi = e_lo
            elif hi - e_hi >= 1000:
                lo = e_hi + 1
        except (OSError, ValueError):
            pass
        self.lo, self.hi = lo, hi
        self.next = random.randrange(lo, hi - 100)

    @staticmethod
    def free(port: int) -> bool:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(('127.0.0.1', port))
                return True
            except OSError:
                return False

    def take(self, p: int) -> int:
        for _ in range(1000):
            if self.next + p > self.hi:
                self.next = self.lo
            base = self.next
            self.next += p + 1
            if all(self.free(base + r) for r in range(p)):
                return base
        raise RuntimeError('no free block of TCP ports')


def write_config(path: Path, p: int, base: int):
    lines = ['switch: {id: 1, role: root}', 'ports:',
             '  - {id: 0, device: "", mac: "02:00:00:00:ff:00", ip: 10.0.0.254}', 'jobs:',
             '  - id: 7', f'    group: {p}', '    members:']
    for r in range(p):
        lines.append(f'      - {{rank: {r}, port: 0, mac: "02:00:00:00:{r >> 8:02x}:{r & 255:02x}", '
                     f'ip: 127.0.0.1, udp_port: {base + r}}}')
    path.write_text('\n'.join(lines) + '\n')


def launch(rank_bin: Path, work: Path, ports: Ports, p: int, extra: list[str], timeout: float,
           tag: str, need_json: bool = True, links: str | None = None) -> tuple[list[dict] | None, str]:
    """p ranks of prism-rank at once with `extra`; (each rank's last JSON line, '') or (None, why).
    The ranks find each other through a config (TCP links) or, with `links` (tcp, shm, auto), through a
    fresh file store with PRISM_LINKS=links (lib/group/links_choice.hpp), listening on 127.0.0.1."""
    env = None
    if links is None:
        cfg = work / f'{tag}.yaml'
        write_config(cfg, p, ports.take(p))
        where = ['--config', str(cfg)]
    else:
        where = ['--store', f'file://{work / (tag + ".store")}', '--ranks', str(p)]
        env = dict(os.environ, PRISM_LINKS=links, PRISM_HOST_IP='127.0.0.1')
    procs, outs = [], []
    try:
        for r in range(p):
            o = open(work / f'{tag}.{r}.out', 'w+')
            e = open(work / f'{tag}.{r}.err', 'w+')
            outs.append((o, e))
            proc = subprocess.Popen([str(rank_bin)] + where + ['--rank', str(r)] + extra,
                                    stdout=o, stderr=e, stdin=subprocess.DEVNULL, start_new_session=True, env=env)
            LIVE.add(proc)
            procs.append(proc)
        deadline = time.monotonic() + timeout
        timed_out = failed_early = False
        while True:   # every rank done, one failed (the others would wait for it), or the timeout
            codes = [proc.poll() for proc in procs]
            if all(c is not None for c in codes):
                break
            if any(c not in (None, 0) for c in codes):
                failed_early = True
                break
            if time.monotonic() > deadline:
                timed_out = True
                break
            time.sleep(0.005 if deadline - time.monotonic() > timeout - 1 else 0.02)
        if timed_out:
            for proc in procs:
                kill_group(proc)
            return None, f'timed out after {timeout:g} s (process groups killed)'
        if failed_early:
            time.sleep(0.2)   # let the others print theirs
        for proc in procs:
            kill_group(proc)   # reaped already; kills anything a rank left in its group
        errors, lines = [], []
        for r, (proc, (o, e)) in enumerate(zip(procs, outs)):
            o.seek(0)
            e.seek(0)
            text, err = o.read(), e.read()
            objs = []
            for ln in text.splitlines():
                ln = ln.strip()
                if ln.startswith('{'):
                    try:
                        objs.append(json.loads(ln))
                    except json.JSONDecodeError:
                        pass
            if proc.returncode is None or proc.returncode < 0 and failed_early:
                continue   # killed because another rank failed
            if proc.returncode != 0:
                errors.append(f'rank {r} exit {proc.returncode}: {(err or text).strip()[-300:]}')
            elif not objs and need_json:
                errors.append(f'rank {r}: no JSON line: {(err or text).strip()[-300:]}')
            elif objs:
                lines.append(objs[-1])
        if errors:
            return None, ' | '.join(errors)
        return lines, ''
    finally:
        for proc in procs:
            if proc.poll() is None:
                kill_group(proc)
            LIVE.discard(proc)
        for o, e in outs:
            o.close()
            e.close()


def calibrate(rank_bin: Path, work: Path, ports: Ports, op: list[str], timeout: float,
              p: int, links: str | None = None) -> tuple[dict | None, str]:
    out = work / f'calibration_p{p}.json'
    why = ''
    for attempt in range(2):
        lines, why = launch(rank_bin, work, ports, p,
                            op + ['--calibrate', str(out), '--candidates', CANDIDATES], timeout, f'cal{attempt}',
                            need_json=False, links=links)
        if lines is not None and out.exists():
            try:
                return json.loads(out.read_text()), ''
            except json.JSONDecodeError as e:
                why = f'calibration file unreadable: {e}'
        elif lines is not None:
            why = 'rank 0 wrote no calibration file'
    return None, why


def repeat_for(est: float | None, target: float) -> int:
    if not est or est <= 0:
        return MIN_REPEAT
    return max(MIN_REPEAT, min(MAX_REPEAT, int(round(target / est))))


def measure(rank_bin: Path, work: Path, ports: Ports, p: int, n: int, algo: str, op: list[str], collective: str,
            cal_file: Path, est: float | None, target: float, timeout: float, fixed_repeat: int | None,
            counter: list[int], links: str | None = None) -> dict:
    """One (p, n, algo): the collective's time (slowest rank), the prediction, the digests."""
    repeat = fixed_repeat or repeat_for(est, target)
    res: dict = {'algo_requested': algo, 'repeat': repeat, 'warmup': 1}
    attempts = []
    reran = False
    while True:
        extra = op + ['--size', str(n), '--algo', algo, '--calibration', str(cal_file),
                      '--repeat', str(repeat), '--warmup', '1', '--json']
        if algo == 'auto':
            extra += ['--candidates', CANDIDATES]
        counter[0] += 1
        t0 = time.monotonic()
        lines, why = launch(rank_bin, work, ports, p, extra, timeout, f'run{counter[0]}', links=links)
        if lines is None and len(attempts) == 0:
            attempts.append(why)
            log(f'p={p} n={size_name(n)} {algo}: {why}; retrying on new ports')
            counter[0] += 1
            lines, why = launch(rank_bin, work, ports, p, extra, timeout, f'run{counter[0]}', links=links)
        res['wall_seconds'] = round(time.monotonic() - t0, 3)
        if lines is None:
            attempts.append(why)
            res['error'] = ' || '.join(attempts)
            return res
        med = max(x['seconds_median'] for x in lines)
        # Far too few collectives for the target (the estimate was too high): once more with enough.
        want = repeat_for(med, target)
        if not fixed_repeat and not reran and want > 1.5 * repeat and repeat < MAX_REPEAT:
            res['first_repeat'] = repeat
            repeat = want
            res['repeat'] = repeat
            reran = True
            continue
        break
    r0 = next((x for x in lines if x.get('rank') == 0), lines[0])
    by_rank = {x.get('rank'): x.get('digest') for x in lines}
    digests = sorted({d for d in by_rank.values() if d})
    res.update({
        'algo': r0.get('algo'),
        'segments': r0.get('segments'),
        'model_segments': r0.get('model_segments'),
        'seconds_median': med,
        'seconds_min': max(x['seconds_min'] for x in lines),
        'predicted_seconds': r0.get('predicted_seconds'),
        'predictions': r0.get('predictions') or {},
        'digests': digests,
        'digest_by_rank': [by_rank.get(r, '') for r in range(len(lines))],
        # every rank the same result; reduce: only the root has one; reduce_scatter: a block each
        'digests_agree': len(digests) == 1 or (collective == 'reduce_scatter' and len(digests) >= 1),
        'per_rank': lines,
    })
    pred = res['predicted_seconds']
    res['ratio'] = med / pred if pred else None
    if attempts:
        res['retried'] = attempts
    return res


# ---------------------------------------------------------------- analysis
def analyse_row(row: dict, policy: str) -> list[str]:
    """Fills in fastest / auto's choice; returns the failures found."""
    fails = []
    A = row['algos']
    for a, e in A.items():
        if 'error' in e:
            fails.append(f"p={row['ranks']} n={size_name(row['bytes'])} {a}: {e['error']}")
        elif not e['digests_agree']:
            fails.append(f"p={row['ranks']} n={size_name(row['bytes'])} {a}: ranks disagree on the digest "
                         f"{e['digests']}")
    ok = {a: e for a, e in A.items() if 'error' not in e}
    all_digests = sorted({d for e in ok.values() for d in e['digests']})
    row['digests'] = all_digests
    results = {tuple(e['digest_by_rank']) for e in ok.values()}  # each rank's result, per algorithm
    row['digests_agree'] = len(results) <= 1
    if policy == 'kulisch' and len(results) > 1:
        fails.append(f"p={row['ranks']} n={size_name(row['bytes'])}: algorithms disagree on the KULISCH "
                     f"digest: " + ', '.join(f"{a}={e['digests']}" for a, e in ok.items()))
    measured = {a: e['seconds_median'] for a, e in ok.items() if a != 'auto'}
    row['fastest'] = min(measured, key=measured.get) if measured else None
    au = ok.get('auto')
    if au:
        choice = au['algo']
        row['auto_choice'] = choice
        row['auto_segments'] = au['segments'] if choice == 'chain' else None
        if row['fastest']:
            t_choice = measured.get(choice, au['seconds_median'])
            row['auto_fastest'] = choice == row['fastest']
            row['auto_within_10pct'] = t_choice <= 1.10 * measured[row['fastest']]
    return fails


def summary(rows: list[dict], algos: list[str]) -> dict:
    def count(sel):
        rs = [r for r in rows if sel(r) and 'auto_fastest' in r]
        return {'rows': len(rs), 'fastest': sum(r['auto_fastest'] for r in rs),
                'within_10pct': sum(r['auto_within_10pct'] for r in rs)}
    out = {'auto': {'all': count(lambda r: True), 'p<=2': count(lambda r: r['ranks'] <= 2),
                    'p>2': count(lambda r: r['ranks'] > 2)}, 'ratio': {}}
    for a in algos:
        rs = sorted(r['algos'][a]['ratio'] for r in rows
                    if a in r['algos'] and r['algos'][a].get('ratio'))
        if not rs:
            continue
        q = statistics.quantiles(rs, n=4) if len(rs) >= 2 else [rs[0]] * 3
        worst = max((r for r in rows if a in r['algos'] and r['algos'][a].get('ratio')),
                    key=lambda r: abs(math.log(r['algos'][a]['ratio'])))
        out['ratio'][a] = {'runs': len(rs), 'median': statistics.median(rs), 'min': rs[0], 'max': rs[-1],
                           'q1': q[0], 'q3': q[2],
                           'worst': {'ranks': worst['ranks'], 'bytes': worst['bytes'],
                                     'ratio': worst['algos'][a]['ratio']}}
    return out


def table_rows(rows: list[dict], algos: list[str]) -> tuple[list[str], list[list[str]]]:
    head = ['p', 'n']
    for a in algos:
        head += [f'{a} meas', f'{a} pred', f'{a} m/p']
    head += ['fastest', 'auto chose', 'auto = fastest', 'auto within 10%']
    body = []
    for row in rows:
        cells = [str(row['ranks']), size_name(row['bytes'])]
        for a in algos:
            e = row['algos'].get(a, {})
            if 'error' in e:
                cells += ['failed', '-', '-']
                continue
            cells += [fmt_time(e.get('seconds_median')), fmt_time(e.get('predicted_seconds')),
                      f"{e['ratio']:.2f}" if e.get('ratio') else '-']
        ch = row.get('auto_choice')
        if ch == 'chain' and row.get('auto_segments') is not None:
            ch = f"chain m={row['auto_segments']}"
        cells += [row.get('fastest') or '-', ch or '-',
                  {True: 'yes', False: 'no'}.get(row.get('auto_fastest'), '-'),
                  {True: 'yes', False: 'no'}.get(row.get('auto_within_10pct'), '-')]
        body.append(cells)
    return head, body


def summary_lines(s: dict) -> list[str]:
    out = []
    for k, label in (('all', 'all (p, n)'), ('p<=2', 'p <= 2'), ('p>2', 'p > 2')):
        c = s['auto'][k]
        if c['rows']:
            out.append(f"auto picked the measured fastest, {label}: {c['fastest']}/{c['rows']} "
                       f"({100 * c['fastest'] / c['rows']:.0f}%), within 10% of it: {c['within_10pct']}/{c['rows']} "
                       f"({100 * c['within_10pct'] / c['rows']:.0f}%)")
    for a, r in s['ratio'].items():
        w = r['worst']
        out.append(f"{a}: measured/predicted median {r['median']:.2f}, quartiles {r['q1']:.2f}..{r['q3']:.2f}, "
                   f"range {r['min']:.2f}..{r['max']:.2f} over {r['runs']} runs; farthest from 1: "
                   f"{w['ratio']:.2f} at p={w['ranks']} n={size_name(w['bytes'])}")
    return out


def text_table(head, body) -> str:
    widths = [max(len(h), *(len(c[i]) for c in body)) if body else len(h) for i, h in enumerate(head)]
    lines = ['  '.join(h.rjust(w) for h, w in zip(head, widths)), '  '.join('-' * w for w in widths)]
    lines += ['  '.join(c.rjust(w) for c, w in zip(cells, widths)) for cells in body]
    return '\n'.join(lines)


def cal_line(cal: dict, op: dict, p: int) -> str:
    return (f"calibration ({op['collective']}, {op['policy']}, {op['dtype']}; p = {p}): alpha {cal['alpha'] * 1e6:.3f} us, "
            f"beta {cal['beta'] * 1e9:.4f} ns/B ({8 / cal['beta'] / 1e9 if cal['beta'] else 0:.1f} Gbit/s), "
            f"gap {cal.get('gap', 0) * 1e6:.2f} us, "
            f"gamma {cal['gamma'] * 1e9:.3f} ns/B (65536 lanes: {cal.get('gamma_large', cal['gamma']) * 1e9:.3f}), "
            f"w {cal['partial_ratio']:.3f}, o {cal['out_ratio']:.3f}")


def markdown(head, body, s: dict, cals: dict, op: dict) -> str:
    out = [f'- {cal_line(c, op, int(p))}' for p, c in cals.items()] + ([''] if cals else [])
    out += ['| ' + ' | '.join(head) + ' |', '|' + '|'.join('---:' for _ in head) + '|']
    out += ['| ' + ' | '.join(c) + ' |' for c in body]
    out.append('')
    out += [f'- {ln}' for ln in summary_lines(s)]
    return '\n'.join(out)


# ---------------------------------------------------------------- plot
def plot(rows: list[dict], png: Path, algos: list[str], ranks: list[int], machine: dict, cal: dict,
         op: str) -> str | None:
    if not shutil.which('gnuplot'):
        return 'gnuplot not found (apt-get install gnuplot-nox)'
    panels = [p for p in (2, 4, 8) if p in ranks]
    for p in ranks:               # fewer than three of 2, 4, 8: fill with what was run
        if len(panels) >= 3:
            break
        if p not in panels:
            panels.append(p)
    panels = sorted(panels)[:3]
    work = Path(tempfile.mkdtemp(prefix='bench-coll-plot-'))
    try:
        sizes = sorted({r['bytes'] for r in rows})
        if not sizes:
            return 'nothing to plot'
        xtics = ', '.join(f'"{size_name(n).replace(" ", "")}" {n}' for n in sizes)
        xr = f'set xrange [{sizes[0] / 1.5}:{sizes[-1] * 1.5}]'
        gp = [f"set terminal TERM size 1400,1000 noenhanced font ',10'", f"set output '{png}'",
              f"set multiplot layout 2,2 title \"{op}: measured (points) against the cost model (lines), "
              f"calibrated at each p (p = 2: alpha {cal.get('alpha', 0) * 1e6:.2f} us, "
              f"beta {cal.get('beta', 0) * 1e9:.3f} ns/B, gamma {cal.get('gamma', 0) * 1e9:.2f}.."
              f"{cal.get('gamma_large', cal.get('gamma', 0)) * 1e9:.2f} ns/B, w {cal.get('partial_ratio', 0):.2f}); "
              f"{machine.get('cpus')} vCPUs, {machine.get('cpu_model', '')}\"",
              'set logscale xy', f'set xtics ({xtics})', xr, "set format y '%.0s %cs'", 'set grid',
              "set key top left font ',8' spacing 0.9 samplen 2",
              "set xlabel 'bytes per rank'", "set ylabel 'seconds per collective'"]
        for p in panels:
            plots = []
            for a in algos:
                pts = [(r['bytes'], r['algos'][a]) for r in rows if r['ranks'] == p and a in r['algos']
                       and 'error' not in r['algos'][a]]
                if not pts:
                    continue
                dat = work / f'p{p}_{a}.dat'
                dat.write_text(''.join(f"{n} {e['seconds_median']} {e['predicted_seconds'] or 0}\n"
                                       for n, e in sorted(pts, key=lambda t: t[0])))
                c = COLOURS.get(a, '#000000')
                plots.append(f"'{dat}' using 1:2 with points pt 7 ps 1.2 lc rgb '{c}' title '{a} measured'")
                if a != 'auto':
                    plots.append(f"'{dat}' using 1:($3>0?$3:1/0) with lines lw 2 lc rgb '{c}' title '{a} model'")
            if plots:
                gp += [f"set title 'p = {p}'", 'plot ' + ', '.join(plots)]
        plots = []
        for i, a in enumerate(algos):
            pts = [(r['bytes'], r['ranks'], r['algos'][a]['ratio']) for r in rows
                   if a in r['algos'] and r['algos'][a].get('ratio')]
            if not pts:
                continue
            dat = work / f'ratio_{a}.dat'
            # a small horizontal offset per algorithm so the points of one size do not hide each other
            off = 1.0 + 0.06 * (i - (len(algos) - 1) / 2)
            dat.write_text(''.join(f'{n * off} {rt} {p}\n' for n, p, rt in sorted(pts)))
            plots.append(f"'{dat}' using 1:2 with points pt 7 ps 1 lc rgb '{COLOURS.get(a, '#000000')}' title '{a}'")
        if plots:
            gp += [f"set title 'measured / predicted, every p ({', '.join(map(str, ranks))})'",
                   "set ylabel 'measured / predicted'", "set format y '%g'", "set key top right font ',8'", 'plot ' + ', '.join(plots) + ", 1 with lines lc rgb 'black' dt 2 notitle"]
        gp.append('unset multiplot')
        text = '\n'.join(gp) + '\n'
        r = None
        for term in ('pngcairo', 'png'):
            (work / 'plot.gp').write_text(text.replace('TERM', term))
            r = subprocess.run(['gnuplot', str(work / 'plot.gp')], capture_output=True, text=True)
            if r.returncode == 0:
                return None
        return f'gnuplot failed: {r.stderr.strip()[-400:]}'
    finally:
        shutil.rmtree(work, ignore_errors=True)


# ---------------------------------------------------------------- --compare: against Open MPI and Gloo
POLICIES = ('fp32_arrival', 'kulisch')
SHORT = {'fp32_arrival': 'A', 'kulisch': 'K'}
BASELINES = {   # name -> (label, what runs it)
    'mpi_tcp': ('MPI tcp', "Open MPI's MPI_Allreduce, --mca pml ob1 --mca btl self,tcp (loopback TCP only)"),
    'mpi_sm': ('MPI sm', "Open MPI's MPI_Allreduce, --mca pml ob1 --mca btl self,vader (shared memory)"),
    'gloo': ('Gloo', "torch.distributed's gloo backend, all_reduce of a CPU tensor (tools/torch_allreduce.py)"),
}
# Of each rank's JSON line, what --compare keeps (the rest are the switch path's counters, all zero here)
# (policy, dtype, out_dtype and bytes are checked against what was asked, then dropped)
RANK_KEYS = {'rank', 'seconds_min', 'seconds_median', 'cpu_seconds', 'algo', 'segments', 'digest'}
SYS_PYTHON = '/usr/bin/python3'   # Debian's, with python3-torch (python3 on PATH may be another)
GLOO = REPO / 'tools' / 'torch_allreduce.py'
COMPARE_RANKS, COMPARE_SIZES, COMPARE_ALSO, COMPARE_LINKS = '2,4,8', '1MiB,4MiB,16MiB,64MiB', 'bf16:16MiB', 'tcp,shm'


def gbit(n: int, s: float | None) -> float | None:
    return n * 8 / s / 1e9 if s else None


def run_group(cmds: list[list[str]], work: Path, tag: str, timeout: float,
              env: dict | None = None) -> tuple[list[tuple[int | None, str, str]], bool]:
    """Processes started at once (each its own process group), waited for together; ([(exit, stdout,
    stderr)], timed out). One that fails ends the wait (the others would wait for it)."""
    procs, outs = [], []
    try:
        for i, cmd in enumerate(cmds):
            o, e = open(work / f'{tag}.{i}.out', 'w+'), open(work / f'{tag}.{i}.err', 'w+')
            outs.append((o, e))
            proc = subprocess.Popen(cmd, stdout=o, stderr=e, stdin=subprocess.DEVNULL, start_new_session=True,
                                    env=env)
            LIVE.add(proc)
            procs.append(proc)
        deadline, timed_out = time.monotonic() + timeout, False
        while True:
            codes = [p.poll() for p in procs]
            if all(c is not None for c in codes) or any(c not in (None, 0) for c in codes):
                break
            if time.monotonic() > deadline:
                timed_out = True
                break
            time.sleep(0.02)
        if not timed_out and any(p.poll() is None for p in procs):
            time.sleep(0.5)   # one failed: let the others say why, if they will
        for p in procs:
            kill_group(p)
        res = []
        for p, (o, e) in zip(procs, outs):
            o.seek(0)
            e.seek(0)
            res.append((p.returncode, o.read(), e.read()))
        return res, timed_out
    finally:
        for p in procs:
            if p.poll() is None:
                kill_group(p)
            LIVE.discard(p)
        for o, e in outs:
            o.close()
            e.close()


def json_lines(text: str) -> list[dict]:
    out = []
    for ln in text.splitlines():
        if ln.strip().startswith('{'):
            try:
                out.append(json.loads(ln))
            except json.JSONDecodeError:
                pass
    return out


def gloo_refuses(dtype: str, torch_version: str) -> bool:
    """torch 1.x's gloo backend has no bf16 all_reduce on CPU ('Invalid scalar type'): such a cell is
    not launched. (Launched, a rank was once killed instead of reporting it, which failed the run.)"""
    return dtype == 'bf16' and torch_version.startswith('1.')


def run_baseline(kind: str, mpi_bin: Path, work: Path, p: int, dtype: str, sizes: list[int], target: float,
                 fixed_repeat: int | None, timeout: float, counter: list[int],
                 torch_version: str = '') -> dict[int, dict]:
    """One launch of a baseline at p ranks for every size (the program sets each size's repeat from
    its warmup, about `target` seconds, 3..20): {bytes: entry}; an entry has 'error' when it failed."""
    if kind == 'gloo' and gloo_refuses(dtype, torch_version):
        why = f"torch {torch_version}'s gloo backend has no {dtype} all_reduce on CPU (Invalid scalar type)"
        return {n: {'error': why, 'unsupported': True, 'command': 'not launched'} for n in sizes}
    common = ['--sizes', ','.join(map(str, sizes)), '--dtype', dtype, '--warmup', '1', '--check']
    common += ['--repeat', str(fixed_repeat)] if fixed_repeat else [
        '--target-seconds', str(target), '--min-repeat', str(MIN_REPEAT), '--max-repeat', str(MAX_REPEAT)]
    why = ''
    for attempt in (1, 2):   # mpirun occasionally fails a launch; a retry gets a fresh store/ports
        counter[0] += 1
        tag = f'{kind}{counter[0]}'
        if kind == 'gloo':
            store = work / f'{tag}.store'
            cmds = [[SYS_PYTHON, str(GLOO), '--rank', str(r), '--ranks', str(p), '--init', f'file://{store}']
                    + common for r in range(p)]
            env = dict(os.environ, GLOO_SOCKET_IFNAME='lo', OMP_NUM_THREADS='1')
            command = f'GLOO_SOCKET_IFNAME=lo {SYS_PYTHON} tools/torch_allreduce.py --rank R --ranks {p} ' \
                      f'--init file://STORE ' + ' '.join(common)
        else:
            btl = 'self,tcp' if kind == 'mpi_tcp' else 'self,vader'
            # yield when idle at every p: Open MPI does it by itself only when p exceeds the cores; a rank
            # that spins at p = 2 on a shared 2-vCPU machine waits whole scheduler slices (~24 ms) for its
            # peer, in some launches and not others (prism-rank's and Gloo's ranks block in poll/epoll)
            cmd = mpirun_prefix(p) + ['--mca', 'pml', 'ob1', '--mca', 'btl', btl, '--mca', 'mpi_yield_when_idle', '1']
            if kind == 'mpi_tcp':
                cmd += ['--mca', 'btl_tcp_if_include', 'lo']
            cmd += ['--mca', 'oob_tcp_if_include', 'lo', str(mpi_bin), '--back-to-back'] + common
            cmds, env = [cmd], None
            command = ' '.join(cmd).replace(str(mpi_bin), 'build/tools/mpi-allreduce')
        t0 = time.monotonic()
        res, timed_out = run_group(cmds, work, tag, timeout, env)
        wall = round(time.monotonic() - t0, 2)
        lines = [x for _, out, _ in res for x in json_lines(out)]
        by_size = {x['bytes']: x for x in lines if 'bytes' in x}
        codes = [c for c, _, _ in res]
        if timed_out:
            why = f'timed out after {timeout:g} s (process groups killed)'
        elif kind == 'gloo' and all(c in (0, 3) for c in codes) and by_size:
            why = ''   # 3: a dtype torch's gloo refuses, said in the JSON line
        elif any(c != 0 for c in codes) or not by_size:
            errs = ' | '.join(f'exit {c}: {(err or out).strip()[-300:]}' for c, out, err in res if c != 0)
            why = errs or 'no JSON line'
        if not why or attempt == 2 or timed_out:
            break
        log(f'{BASELINES[kind][0]} p={p}: {why}; retrying')
    out = {}
    for n in sizes:
        e = dict(by_size.get(n) or {'error': why or 'no result for this size'})
        e.update({'command': command, 'launch_wall_seconds': wall})
        if 'error' not in e:
            if e.get('check_differ'):
                e['error'] = f"result differs from the exact sum in {e['check_differ']} elements"
            elif not e.get('checked'):
                e['error'] = 'result not checked'
            else:
                e['gbit_s_median'] = gbit(n, e['seconds_median'])
        out[n] = e
    return out


def analyse_cell(cell: dict, algos: list[str]) -> list[str]:
    """Fills in a (p, n, dtype, data) cell's Gbit/s, ratios and auto's verdicts; returns the failures."""
    where = f"p={cell['ranks']} n={size_name(cell['bytes'])} {cell['dtype']} {cell['data']} {cell['links']}"
    fails = []
    g: dict = {}
    for pol in POLICIES:
        for a, e in cell['prism'][pol].items():
            if 'error' in e:
                fails.append(f'{where} {a} {pol}: {e["error"]}')
            elif not e['digests_agree']:
                fails.append(f"{where} {a} {pol}: ranks disagree on the digest {e['digests']}")
            else:
                g[f'{a}/{SHORT[pol]}'] = gbit(cell['bytes'], e['seconds_median'])
    for b in BASELINES:
        e = cell.get(b)
        if e is None:
            continue
        if 'error' in e:
            if not e.get('unsupported'):
                fails.append(f'{where} {BASELINES[b][0]}: {e["error"]}')
        else:
            g[b] = e['gbit_s_median']
    cell['gbit_s'] = g
    # KULISCH_FIXED is exact: every algorithm, auto too, the same bits at every rank.
    kul = {a: tuple(e['digest_by_rank']) for a, e in cell['prism']['kulisch'].items() if 'error' not in e}
    cell['kulisch_digests'] = sorted({d for t in kul.values() for d in t})
    cell['kulisch_digests_agree'] = len(set(kul.values())) <= 1 and len(cell['kulisch_digests']) <= 1
    if not cell['kulisch_digests_agree']:
        fails.append(f'{where}: algorithms disagree on the KULISCH digest: '
                     + ', '.join(f'{a}={sorted(set(t))}' for a, t in kul.items()))
    r: dict = {}
    for a in algos:
        k, ar = g.get(f'{a}/K'), g.get(f'{a}/A')
        r[f'{a} K/A'] = k / ar if k and ar else None
    best = {}
    for pol in POLICIES:
        cands = {a: g[f'{a}/{SHORT[pol]}'] for a in algos if g.get(f'{a}/{SHORT[pol]}')}
        if cands:
            fa = max(cands, key=cands.get)
            best[pol] = {'algo': fa, 'gbit_s': cands[fa]}
            for b in BASELINES:
                r[f'best {SHORT[pol]}/{b}'] = cands[fa] / g[b] if g.get(b) else None
        au = cell['prism'][pol].get('auto')
        if au and 'error' not in au and cands:
            ch = au['algo']
            fastest = best[pol]['algo']
            t_best = cell['prism'][pol][fastest]['seconds_median']
            t_ch = cell['prism'][pol][ch]['seconds_median'] if ch in cell['prism'][pol] and \
                'error' not in cell['prism'][pol][ch] else au['seconds_median']
            cell.setdefault('auto', {})[pol] = {
                'choice': ch, 'segments': au.get('segments') if ch == 'chain' else None, 'fastest': fastest,
                'picked_fastest': ch == fastest, 'within_10pct': t_ch <= 1.10 * t_best,
                'auto_run_gbit_s': g.get(f'auto/{SHORT[pol]}')}
    cell['best'] = best
    cell['ratios'] = r
    return fails


def compare_summary(cells: list[dict], algos: list[str]) -> dict:
    """Over every cell, and the same per links kind (by_links) when there are several."""
    s = summary_of(cells, algos)
    kinds = list(dict.fromkeys(c['links'] for c in cells))
    if len(kinds) > 1:
        s['by_links'] = {k: summary_of([c for c in cells if c['links'] == k], algos) for k in kinds}
    return s


def summary_of(cells: list[dict], algos: list[str]) -> dict:
    def spread(vals):
        vals = sorted(v for v in vals if v)
        if not vals:
            return None
        return {'cells': len(vals), 'min': vals[0], 'median': statistics.median(vals), 'max': vals[-1]}
    s: dict = {'auto': {}, 'kulisch_over_arrival': {}, 'best_over_baseline': {}, 'targets': {}}
    for pol in POLICIES + ('both',):
        pols = POLICIES if pol == 'both' else (pol,)
        v = [c['auto'][q] for c in cells for q in pols if q in c.get('auto', {})]
        s['auto'][pol] = {'cells': len(v), 'picked_fastest': sum(x['picked_fastest'] for x in v),
                          'within_10pct': sum(x['within_10pct'] for x in v)}
    for a in algos:
        s['kulisch_over_arrival'][a] = spread(c['ratios'].get(f'{a} K/A') for c in cells)
    for pol in POLICIES:
        for b in BASELINES:
            s['best_over_baseline'][f'{SHORT[pol]}/{b}'] = spread(c['ratios'].get(f'best {SHORT[pol]}/{b}')
                                                                  for c in cells)
    # issue 28's targets, cell by cell: K/A >= 0.8 for every algorithm; the best under A >= 1.0x and
    # under K >= 0.8x of MPI tcp and Gloo
    def met(key, bound):
        v = [c['ratios'].get(key) for c in cells if c['ratios'].get(key)]
        return {'cells': len(v), 'met': sum(x >= bound for x in v)}
    s['targets'] = {f'{a} K/A >= 0.8': met(f'{a} K/A', 0.8) for a in algos}
    for b in ('mpi_tcp', 'gloo'):
        s['targets'][f'best A / {b} >= 1.0'] = met(f'best A/{b}', 1.0)
        s['targets'][f'best K / {b} >= 0.8'] = met(f'best K/{b}', 0.8)
    return s


def compare_tables(cells: list[dict], algos: list[str], baselines: list[str]) -> list[tuple[str, list, list]]:
    """(title, head, body) of the two tables: Gbit/s, then ratios and auto's verdicts."""
    def f(x, d=2):
        return '-' if x is None else f'{x:.{d}f}'
    def key(c):
        return [str(c['ranks']), size_name(c['bytes']), c['dtype'], c['data'], c['links']]
    head1 = ['p', 'n', 'dtype', 'data', 'links'] + [f'{a} {SHORT[p]}' for a in algos + ['auto'] for p in POLICIES] \
        + [BASELINES[b][0] for b in baselines]
    body1 = []
    for c in cells:
        row = key(c) + [f(c['gbit_s'].get(f'{a}/{SHORT[p]}')) for a in algos + ['auto'] for p in POLICIES]
        for b in baselines:
            e = c.get(b) or {}
            row.append('n/a' if e.get('unsupported') else f(c['gbit_s'].get(b)))
        body1.append(row)
    head2 = ['p', 'n', 'dtype', 'data', 'links'] + [f'{a} K/A' for a in algos] \
        + [f'best {SHORT[p]} / {BASELINES[b][0]}' for p in POLICIES for b in baselines] \
        + [f'auto {SHORT[p]}' for p in POLICIES]
    body2 = []
    for c in cells:
        row = key(c) + [f(c['ratios'].get(f'{a} K/A')) for a in algos]
        for p in POLICIES:
            for b in baselines:
                row.append(f(c['ratios'].get(f'best {SHORT[p]}/{b}')))
        for p in POLICIES:
            v = c.get('auto', {}).get(p)
            if not v:
                row.append('-')
                continue
            ch = v['choice'] + (f" m={v['segments']}" if v.get('segments') else '')
            verdict = 'fastest' if v['picked_fastest'] else ('within 10%' if v['within_10pct'] else
                                                              f"no ({v['fastest']})")
            row.append(f'{ch}: {verdict}')
        body2.append(row)
    return [('Gbit/s (input bytes / the slowest rank\'s median time); A = FP32_ARRIVAL, K = KULISCH_FIXED',
             head1, body1),
            ('KULISCH / ARRIVAL per algorithm; the best PRISM host algorithm under A and K / each baseline; '
             'what auto chose and whether it was the measured fastest (or within 10%)', head2, body2)]


def compare_summary_lines(s: dict) -> list[str]:
    out = summary_lines_of(s)
    for k, sub in s.get('by_links', {}).items():
        out += [f'links {k}: {ln}' for ln in summary_lines_of(sub)]
    return out


def summary_lines_of(s: dict) -> list[str]:
    out = []
    for pol, v in s['auto'].items():
        if v['cells']:
            label = 'both policies' if pol == 'both' else pol
            out.append(f"auto ({label}): the measured fastest in {v['picked_fastest']}/{v['cells']} cells "
                       f"({100 * v['picked_fastest'] / v['cells']:.0f}%), within 10% of it in "
                       f"{v['within_10pct']}/{v['cells']} ({100 * v['within_10pct'] / v['cells']:.0f}%)")
    for a, v in s['kulisch_over_arrival'].items():
        if v:
            out.append(f"{a}: KULISCH / ARRIVAL median {v['median']:.2f}, range {v['min']:.2f}..{v['max']:.2f} "
                       f"over {v['cells']} cells")
    for k, v in s['best_over_baseline'].items():
        if v:
            pol, b = k.split('/')
            out.append(f"best PRISM under {'FP32_ARRIVAL' if pol == 'A' else 'KULISCH_FIXED'} / {BASELINES[b][0]}: "
                       f"median {v['median']:.2f}, range {v['min']:.2f}..{v['max']:.2f} over {v['cells']} cells")
    for k, v in s['targets'].items():
        if v['cells']:
            out.append(f"target {k}: met in {v['met']}/{v['cells']} cells")
    return out


def compare_plot(cells: list[dict], png: Path, algos: list[str], baselines: list[str], ranks: list[int],
                 dtype: str, machine: dict, title_extra: str) -> str | None:
    if not shutil.which('gnuplot'):
        return 'gnuplot not found (apt-get install gnuplot-nox)'
    main_cells = [c for c in cells if c['dtype'] == dtype]
    datas = list(dict.fromkeys(c['data'] for c in main_cells))
    if not main_cells:
        return 'nothing to plot'
    data0 = datas[0]
    panels = sorted([p for p in (2, 4, 8) if p in ranks] or ranks)[:3]
    for p in ranks:
        if len(panels) >= 3:
            break
        if p not in panels:
            panels.append(p)
    panels = sorted(panels)[:3]
    base_style = {'mpi_tcp': ('#000000', 5), 'mpi_sm': ('#7f7f7f', 9), 'gloo': ('#8c564b', 11)}
    work = Path(tempfile.mkdtemp(prefix='bench-coll-plot-'))
    try:
        sizes = sorted({c['bytes'] for c in main_cells})
        xtics = ', '.join(f'"{size_name(n).replace(" ", "")}" {n}' for n in sizes)
        gp = ["set terminal TERM size 1400,1000 noenhanced font ',10'", f"set output '{png}'",
              f"set multiplot layout 2,2 title \"allreduce {dtype}, {data0} data: the best of PRISM's host algorithms "
              f"(solid KULISCH_FIXED, dashed FP32_ARRIVAL; per links kind)\\nagainst Open MPI and Gloo, one host; "
              f"{machine.get('cpus')} vCPUs, {machine.get('cpu_model', '')}{title_extra}\"",
              'set logscale xy', f'set xtics ({xtics})', f'set xrange [{sizes[0] / 1.4}:{sizes[-1] * 1.4}]',
              'set grid', "set key outside right top font ',8' spacing 0.9 samplen 2", "set format y '%g'",
              "set xlabel 'bytes per rank'", "set ylabel 'Gbit/s (input bytes / time), log'"]
        links = list(dict.fromkeys(c['links'] for c in main_cells))
        link_colour = {'tcp': '#1f77b4', 'shm': '#2ca02c', 'auto': '#9467bd'}
        for p in panels:
            plots = []
            for link in links:
                pc = sorted((c for c in main_cells if c['ranks'] == p and c['data'] == data0 and c['links'] == link),
                            key=lambda c: c['bytes'])
                for pol, dt in (('kulisch', 1), ('fp32_arrival', 2)):
                    pts = [(c['bytes'], c['best'][pol]['gbit_s'], c['best'][pol]['algo']) for c in pc
                           if pol in c.get('best', {})]
                    if not pts:
                        continue
                    dat = work / f'p{p}_{link}_{pol}.dat'
                    dat.write_text(''.join(f'{n} {v} {a}\n' for n, v, a in pts))
                    plots.append(f"'{dat}' using 1:2 with linespoints lw 2 dt {dt} pt 7 ps 0.9 "
                                 f"lc rgb '{link_colour.get(link, '#000000')}' title 'PRISM {SHORT[pol]}, {link}'")
            pc = [c for c in main_cells if c['ranks'] == p and c['data'] == data0 and c['links'] == links[0]]
            for b in baselines:
                pts = sorted((c['bytes'], c['gbit_s'].get(b)) for c in pc if c['gbit_s'].get(b))
                if not pts:
                    continue
                dat = work / f'p{p}_{b}.dat'
                dat.write_text(''.join(f'{n} {v}\n' for n, v in pts))
                col, pt = base_style[b]
                plots.append(f"'{dat}' using 1:2 with linespoints lw 3 dt 1 pt {pt} ps 1.2 lc rgb '{col}' "
                             f"title '{BASELINES[b][0]}'")
            if plots:
                gp += [f"set title 'p = {p}'", 'plot ' + ', '.join(plots)]
        # KULISCH / ARRIVAL of every cell: colour the algorithm, shape p (filled: the first data kind,
        # open: a second), a small horizontal offset per algorithm so that one size's points stay apart
        shapes = {}
        for k, p in enumerate(sorted(ranks)):
            shapes[p] = [(7, 6), (5, 4), (9, 8), (11, 10), (13, 12)][k % 5]
        plots = []
        for i, a in enumerate(algos):
            off = 1.0 + 0.05 * (i - (len(algos) - 1) / 2)
            for j, link in enumerate(links[:2]):
                pts = [(c['bytes'] * off, c['ratios'].get(f'{a} K/A'), shapes[c['ranks']][j]) for c in main_cells
                       if c['data'] == data0 and c['links'] == link and c['ratios'].get(f'{a} K/A')]
                if not pts:
                    continue
                dat = work / f'ka_{a}_{link}.dat'
                dat.write_text(''.join(f'{n} {v} {pt}\n' for n, v, pt in sorted(pts)))
                plots.append(f"'{dat}' using 1:2:3 with points pt variable ps 1.1 "
                             f"lc rgb '{COLOURS.get(a, '#000000')}' notitle")
        for a in algos:   # the key: colours, then shapes
            plots.append(f"1/0 with points pt 7 lc rgb '{COLOURS.get(a, '#000000')}' title '{a}'")
        for p in sorted(ranks):
            plots.append(f"1/0 with points pt {shapes[p][0]} lc rgb 'black' title 'p = {p}'")
        if plots:
            gp += [f"set title 'KULISCH_FIXED / FP32_ARRIVAL (Gbit/s) of every algorithm, every p"
                   f"{' (filled ' + links[0] + ', open ' + links[1] + ')' if len(links) > 1 else ''}'",
                   'unset logscale y', "set ylabel 'KULISCH / ARRIVAL'", 'set yrange [0:*]',
                   'plot ' + ', '.join(plots) + ", 0.8 with lines lc rgb 'black' dt 2 title 'target 0.8', "
                   "1 with lines lc rgb 'grey' dt 3 notitle"]
        gp.append('unset multiplot')
        text = '\n'.join(gp) + '\n'
        r = None
        for term in ('pngcairo', 'png'):
            (work / 'plot.gp').write_text(text.replace('TERM', term))
            r = subprocess.run(['gnuplot', str(work / 'plot.gp')], capture_output=True, text=True)
            if r.returncode == 0:
                return None
        return f'gnuplot failed: {r.stderr.strip()[-400:]}'
    finally:
        shutil.rmtree(work, ignore_errors=True)


def git_commit() -> dict:
    def git(*args):
        try:
            return subprocess.run(['git', '-C', str(REPO)] + list(args), capture_output=True, text=True,
                                  timeout=10).stdout.rstrip()
        except (OSError, subprocess.SubprocessError):
            return ''
    # what the working tree (and so, perhaps, the build) had beyond the commit: porcelain's 'XY path'
    changed = [ln[3:] for ln in git('status', '--porcelain', '--', 'lib', 'app', 'include').splitlines() if ln]
    return {'commit': git('rev-parse', 'HEAD'), 'subject': git('log', '-1', '--format=%s'),
            'uncommitted_in_lib_app': changed}


def compare_main(a, rank_bin: Path, hosts: dict[str, list[str]]) -> int:
    """--compare: PRISM's host algorithms under FP32_ARRIVAL and KULISCH_FIXED, auto, Open MPI (TCP
    only and shared memory) and Gloo, every (p, n) of one run."""
    global MIN_REPEAT
    MIN_REPEAT = 3   # a median of three at least
    try:
        ranks = [int(x) for x in a.ranks.split(',') if x.strip()]
        datas = [x.strip() for x in a.data.split(',') if x.strip()]
        for d in datas:
            if d not in ('spread', 'gradient', 'wide'):
                raise ValueError(f'--data: spread, gradient or wide, not {d!r}')
        if a.dtype not in ('fp32', 'bf16'):
            raise ValueError('--compare: --dtype fp32 or bf16 (what Open MPI and Gloo reduce too)')
        groups = [(a.dtype, [parse_size(x, ELEM[a.dtype]) for x in a.sizes.split(',') if x.strip()])]
        for x in a.also:
            if x.strip() in ('', 'none'):
                continue
            dt, _, sz = x.partition(':')
            if dt not in ('fp32', 'bf16') or not sz:
                raise ValueError(f'--also {x!r}: DTYPE:SIZE[,SIZE], DTYPE fp32 or bf16')
            groups.append((dt, [parse_size(s, ELEM[dt]) for s in sz.split(',')]))
        baselines = [x.strip() for x in a.baselines.split(',') if x.strip() and x.strip() != 'none']
        for b in baselines:
            if b not in BASELINES:
                raise ValueError(f'--baselines: {", ".join(BASELINES)} or none, not {b!r}')
        for p in ranks:
            if p < 2:
                raise ValueError('--ranks: every p at least 2')
        algos = [x for x in hosts if 'allreduce' in hosts[x]]
        if a.algos != DEFAULT_ALGOS:   # a subset of the host algorithms, auto's candidates too
            want = [x.strip() for x in a.algos.split(',') if x.strip() and x.strip() not in ('hosts', 'auto')]
            for x in want:
                if x not in algos:
                    raise ValueError(f'--algos: {x!r} is not a host algorithm that runs allreduce ({", ".join(algos)})')
            algos = [x for x in algos if x in want] or algos
        global CANDIDATES
        CANDIDATES = ','.join(algos)   # auto chooses among what is measured
        for p in ranks:
            for dt, ns in groups:
                for n in ns:
                    skipped(p, n, a.skip)   # a bad --skip is a usage error now, not later
        links = [x.strip() for x in a.links.split(',') if x.strip()]
        for x in links:
            if x not in ('tcp', 'shm', 'auto'):
                raise ValueError(f'--links: tcp, shm or auto, not {x!r}')
        if not links or len(set(links)) != len(links):
            raise ValueError('--links: one or more of tcp, shm, auto, each once')
        lib = next((x for x in sorted((a.build / 'lib').glob('libprism.so*')) if x.is_file()), None)
        if lib and b'PRISM_LINKS' not in lib.read_bytes():
            raise ValueError(f'--links: {lib} predates PRISM_LINKS (shared-memory links): rebuild it')
    except (KeyError, ValueError) as e:
        log(f'usage: {e}')
        return 2
    mpi_bin = a.build / 'tools' / 'mpi-allreduce'
    if any(b.startswith('mpi') for b in baselines):
        if not os.access(mpi_bin, os.X_OK) or not shutil.which('mpirun'):
            log(f'{mpi_bin} or mpirun missing: Open MPI (openmpi-bin, libopenmpi-dev: scripts/setup.sh), then '
                f'ninja -C {a.build}; or --baselines without mpi_tcp, mpi_sm')
            return 2
    torch_version = ''
    if 'gloo' in baselines:
        r = subprocess.run([SYS_PYTHON, '-c', 'import torch, torch.distributed as d; '
                            'assert d.is_gloo_available(); print(torch.__version__)'],
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            log(f'Gloo needs torch with gloo for {SYS_PYTHON}: Debian\'s python3-torch (scripts/setup.sh: '
                f'apt-get install python3-torch); or --baselines without gloo. {r.stderr.strip()[-300:]}')
            return 2
        torch_version = r.stdout.strip()

    def on_signal(signum, _frame):
        raise Interrupted(f'signal {signum}')
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, on_signal)
    work = Path(tempfile.mkdtemp(prefix='bench-coll-'))
    try:   # copies, so that a rebuild during the run changes nothing
        (work / 'app').mkdir()
        (work / 'lib').mkdir()
        (work / 'tools').mkdir()
        shutil.copy2(rank_bin, work / 'app' / 'prism-rank')
        for lib in (a.build / 'lib').glob('libprism.so*'):
            if lib.is_file():
                shutil.copy(lib.resolve(), work / 'lib' / lib.name)
        rank_bin = work / 'app' / 'prism-rank'
        if mpi_bin.exists():
            shutil.copy2(mpi_bin, work / 'tools' / 'mpi-allreduce')
            mpi_bin = work / 'tools' / 'mpi-allreduce'
    except OSError as e:
        log(f'cannot copy the binaries: {e}')
        shutil.rmtree(work, ignore_errors=True)
        return 2
    machine = machine_info()
    machine['mpi'] = mpi_version()
    machine['torch'] = torch_version
    ports = Ports()
    cells: list[dict] = []
    failures: list[str] = []
    doc = {'mode': 'compare', 'complete': False, 'machine': machine, 'cores': os.cpu_count(),
           'git': git_commit(), 'build': str(a.build),
           'built': {x: time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime((a.build / x).stat().st_mtime))
                     for x in ('app/prism-rank', 'lib/libprism.so', 'tools/mpi-allreduce') if (a.build / x).exists()},
           'collective': 'allreduce', 'ranks': ranks,
           'groups': [{'dtype': dt, 'sizes': ns} for dt, ns in groups], 'data': datas, 'algos': algos,
           'policies': list(POLICIES), 'links': links, 'baselines': {b: BASELINES[b][1] for b in baselines},
           'target_seconds': a.target_seconds, 'repeat': [MIN_REPEAT, MAX_REPEAT] if not a.repeat else a.repeat,
           'prism_check': a.check,
           'method': 'every rank a local process on loopback; each run p processes at once; time per collective: '
                     'each rank times its own collectives back to back after one warmup, the figure is the '
                     'slowest rank\'s median; Gbit/s = input bytes per rank / that time. PRISM: prism-rank '
                     '--data D (generated floats); Open MPI and Gloo: their own generated data whose sums are '
                     'exact, the result checked against the exact sum.',
           'calibrations': {}, 'results': cells, 'loadavg_start': os.getloadavg()}
    status = 0
    t_start = time.monotonic()
    counter = [0]
    try:
        for p in ranks:
            for dtype, all_sizes in groups:
                sizes = [n for n in all_sizes if not skipped(p, n, a.skip)]
                if not sizes:
                    continue
                base: dict = {}
                for b in baselines:
                    base[b] = run_baseline(b, mpi_bin, work, p, dtype, sizes, a.target_seconds, a.repeat,
                                           a.timeout * len(sizes), counter, torch_version)
                    for n, e in base[b].items():
                        log(f"p={p} n={size_name(n)} {dtype} {BASELINES[b][0]}: "
                            + (f"not measured: {e['error']}" if e.get('unsupported') else
                               f"FAILED {e['error']}" if 'error' in e else
                               f"{fmt_time(e['seconds_median'])} ({e['gbit_s_median']:.2f} Gbit/s, repeat "
                               f"{e['repeat']}, checked)"))
                for data in datas:
                    prev: dict = {}
                    cal_files: dict = {}
                    for link in links:   # a calibration per (p, policy, format, data, links), as auto's
                        for pol in POLICIES:
                            op = ['--policy', pol, '--dtype', dtype, '--out-dtype', dtype, '--collective',
                                  'allreduce', '--data', data]
                            cal, why = calibrate(rank_bin, work, ports, op, a.timeout, p, links=link)
                            if cal is None:
                                log(f'calibration failed (p={p} {pol} {dtype} {data} {link}): {why}')
                                return 2
                            f = work / f'calibration_p{p}_{pol}_{dtype}_{data}_{link}.json'
                            (work / f'calibration_p{p}.json').replace(f)
                            cal_files[(link, pol)] = f
                            doc['calibrations'][f'{p}/{pol}/{dtype}/{data}/{link}'] = cal
                    for n in sizes:
                        same_n = []
                        for link in links:   # the links of one size one after the other: the same minutes
                            cell = {'ranks': p, 'bytes': n, 'dtype': dtype, 'data': data, 'links': link,
                                    'prism': {pol: {} for pol in POLICIES}}
                            for b in baselines:
                                cell[b] = base[b][n]
                            cells.append(cell)
                            same_n.append(cell)
                            for pol in POLICIES:
                                op = ['--policy', pol, '--dtype', dtype, '--out-dtype', dtype, '--collective',
                                      'allreduce', '--data', data] + (['--check'] if a.check else [])
                                preds: dict = {}
                                for algo in algos + ['auto']:
                                    ests = []
                                    if algo in preds:
                                        ests.append(preds[algo])
                                    elif algo == 'auto' and preds:
                                        ests.append(min(preds.values()))
                                    if (link, pol, algo) in prev:
                                        n0, t0 = prev[(link, pol, algo)]
                                        ests.append(t0 * n / n0)
                                    e = measure(rank_bin, work, ports, p, n, algo, op, 'allreduce',
                                                cal_files[(link, pol)], max(ests) if ests else None,
                                                a.target_seconds, a.timeout, a.repeat, counter, links=link)
                                    asked = {'policy': pol, 'dtype': dtype, 'out_dtype': dtype, 'bytes': n}
                                    for x in e.get('per_rank', []):
                                        ran = {k: x.get(k) for k in asked}
                                        if ran != asked and 'error' not in e:
                                            e['error'] = f"rank {x.get('rank')} ran {ran}, not {asked}"
                                        for k in [k for k in x if k not in RANK_KEYS and not k.startswith('check')]:
                                            del x[k]   # what the comparison reads, no more
                                    cell['prism'][pol][algo] = e
                                    what = f'p={p} n={size_name(n)} {dtype} {data} {link} {algo} {pol}'
                                    if 'error' in e:
                                        log(f"{what}: FAILED {e['error']}")
                                        continue
                                    preds = preds or e['predictions']
                                    prev[(link, pol, algo)] = (n, e['seconds_median'])
                                    log(f"{what}: {fmt_time(e['seconds_median'])} "
                                        f"({gbit(n, e['seconds_median']):.2f} Gbit/s"
                                        f"{', ran ' + e['algo'] if algo == 'auto' else ''}, repeat {e['repeat']}, "
                                        f"{e['wall_seconds']:.1f} s)")
                            fl = analyse_cell(cell, algos)
                            for x in fl:
                                log(f'FAILURE: {x}')
                            failures += fl
                        # exact over any link too: one KULISCH digest for the size
                        ds = {d for c in same_n for d in c['kulisch_digests']}
                        if len(ds) > 1:
                            x = (f'p={p} n={size_name(n)} {dtype} {data}: the links disagree on the KULISCH digest: '
                                 + ', '.join(f"{c['links']}={c['kulisch_digests']}" for c in same_n))
                            log(f'FAILURE: {x}')
                            failures.append(x)
        doc['complete'] = True
    except Interrupted as e:
        log(f'interrupted ({e}): reporting what was measured')
        status = 130
    finally:
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN)
        kill_all()
        shutil.rmtree(work, ignore_errors=True)
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_DFL)
    cells = [c for c in cells if 'gbit_s' in c]   # an interrupted cell is left out
    doc['results'] = cells
    doc['loadavg_end'] = os.getloadavg()
    doc['seconds'] = round(time.monotonic() - t_start, 1)
    s = compare_summary(cells, algos)
    doc['summary'] = s
    doc['failures'] = failures
    tables = compare_tables(cells, algos, baselines)
    head = (f"{machine.get('cpus')} vCPUs, {machine.get('cpu_model')}; {machine.get('mpi')}; torch "
            f"{torch_version or '-'}; commit {doc['git']['commit'][:12]}; data: {', '.join(datas)}")
    if a.markdown:
        print(f'- {head}')
        for title, h, body in tables:
            print(f'\n{title}:\n')
            print('| ' + ' | '.join(h) + ' |')
            print('|' + '|'.join('---' if i in (2, 3, 4) else '---:' for i in range(len(h))) + '|')
            print('\n'.join('| ' + ' | '.join(c) + ' |' for c in body))
        print()
        print('\n'.join(f'- {ln}' for ln in compare_summary_lines(s)))
    else:
        print(head)
        for title, h, body in tables:
            print(f'\n{title}:')
            print(text_table(h, body))
        print()
        print('\n'.join(compare_summary_lines(s)))
    log(f'{len(cells)} cells in {doc["seconds"]:.0f} s')
    if failures:
        log(f'{len(failures)} failure(s):')
        for x in failures:
            log(f'  {x}')
        status = status or 1
    if a.json:   # a row a line: readable, and small enough for docs/data
        rows = doc.pop('results')
        text = json.dumps(doc, indent=1)
        text = text[:text.rindex('}')].rstrip() + ',\n "results": [\n' + ',\n'.join(
            '  ' + json.dumps(c, separators=(',', ':')) for c in rows) + '\n ]\n}\n'
        a.json.write_text(text)
        doc['results'] = rows
        log(f'wrote {a.json}')
    if a.plot and cells:
        why = compare_plot(cells, a.plot, algos, baselines, ranks, a.dtype, machine,
                           f"; commit {doc['git']['commit'][:10]}")
        if why:
            log(f'no plot: {why}')
        else:
            log(f'wrote {a.plot}')
    return status


# ---------------------------------------------------------------- main
def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--compare', action='store_true',
                    help='PRISM (every host algorithm under fp32_arrival and kulisch, and auto) against Open MPI '
                         '(TCP only; shared memory) and Gloo: see "--compare" above')
    ap.add_argument('--ranks', help=f'p values (default {DEFAULT_RANKS}; --compare: {COMPARE_RANKS})')
    ap.add_argument('--sizes', help=f'bytes per rank (default {DEFAULT_SIZES}; --compare: {COMPARE_SIZES})')
    ap.add_argument('--algos', default=DEFAULT_ALGOS,
                    help='algorithms, comma-separated; hosts: every host algorithm of prism-rank --list-algos '
                         f'(default {DEFAULT_ALGOS})')
    ap.add_argument('--policy', default='kulisch', help='fp32_arrival kulisch fp32_binomial (default kulisch)')
    ap.add_argument('--dtype', default='fp32', help='input format (default fp32)')
    ap.add_argument('--data', help="prism-rank's generated floats: spread, gradient, wide (default: prism-rank's, "
                                   "spread; --compare: gradient; there a comma-separated list runs each)")
    ap.add_argument('--also', action='append', metavar='DTYPE:SIZES',
                    help=f'--compare: more cells in another format, e.g. bf16:16MiB (default {COMPARE_ALSO}; '
                         'none: no more)')
    ap.add_argument('--baselines', default=','.join(BASELINES),
                    help=f'--compare: of {", ".join(BASELINES)} (default all; none: PRISM only)')
    ap.add_argument('--links', default=COMPARE_LINKS,
                    help=f"--compare: PRISM's links between its ranks, each run: tcp, shm, auto (PRISM_LINKS; the "
                         f"ranks meet through a file store; default {COMPARE_LINKS})")
    ap.add_argument('--check', action='store_true',
                    help="--compare: prism-rank --check (every result against the reference model; small sizes)")
    ap.add_argument('--collective', default='allreduce',
                    choices=['allreduce', 'reduce', 'broadcast', 'reduce_scatter', 'allgather'])
    ap.add_argument('--repeat', type=int, help='collectives per run (default adaptive, 2..20; --compare 3..20)')
    ap.add_argument('--target-seconds', type=float, default=0.3,
                    help='measurement per run that the adaptive repeat aims at (default 0.3)')
    ap.add_argument('--timeout', type=float, default=180, help='seconds per run (default 180)')
    ap.add_argument('--skip', action='append', default=[], metavar='P:SIZE',
                    help="leave out (p, n) pairs: 'P>=6:16MiB' or '8:4MiB' (repeatable)")
    ap.add_argument('--json', type=Path, help='write every measurement here')
    ap.add_argument('--plot', type=Path, help='write a gnuplot PNG here')
    ap.add_argument('--markdown', action='store_true', help='print the table and summary as Markdown')
    ap.add_argument('--quick', action='store_true',
                    help='p = 2, 3; 4KiB, 256KiB; repeat 2 (smoke test); with --compare: p = 2, 256KiB and '
                         'bf16:64KiB, repeat 2')
    ap.add_argument('--build', type=Path, default=REPO / 'build', help='the build directory (default build)')
    a = ap.parse_args(argv)
    if a.compare:
        a.ranks = a.ranks or COMPARE_RANKS
        a.sizes = a.sizes or COMPARE_SIZES
        a.data = a.data or 'gradient'
        a.also = a.also if a.also is not None else [COMPARE_ALSO]
        if a.quick:
            a.ranks, a.sizes, a.repeat, a.also = '2', '256KiB', a.repeat or 2, ['bf16:64KiB']
        return a
    a.ranks = a.ranks or DEFAULT_RANKS
    a.sizes = a.sizes or DEFAULT_SIZES
    if a.quick:
        a.ranks, a.sizes, a.repeat = '2,3', '4KiB,256KiB', a.repeat or 2
    return a


def skipped(p: int, n: int, skips: list[str]) -> bool:
    for s in skips:
        m = re.fullmatch(r'P?(>=|<=|>|<|=)?(\d+):(.+)', s.strip())
        if not m:
            raise ValueError(f'bad --skip {s!r}')
        op, q, size = m.group(1) or '=', int(m.group(2)), parse_size(m.group(3), 1)
        hit = {'=': p == q, '>=': p >= q, '<=': p <= q, '>': p > q, '<': p < q}[op]
        if hit and n == size:
            return True
    return False


def main(argv: list[str]) -> int:
    global CANDIDATES
    a = parse_args(argv)
    rank_bin = a.build / 'app' / 'prism-rank'
    if not os.access(rank_bin, os.X_OK):
        log(f'{rank_bin} missing (ninja -C {a.build})')
        return 2
    try:
        hosts = host_algorithms(rank_bin)
        CANDIDATES = ','.join(hosts)
        if a.compare:
            return compare_main(a, rank_bin, hosts)
        elem = ELEM[a.dtype]
        ranks = [int(x) for x in a.ranks.split(',') if x.strip()]
        sizes = [parse_size(x, elem) for x in a.sizes.split(',') if x.strip()]
        algos = []
        for x in (x.strip() for x in a.algos.split(',') if x.strip()):
            algos += list(hosts) if x == 'hosts' else [x]
        for p in ranks:
            if p < 2:
                raise ValueError('--ranks: every p at least 2 (the calibration needs two ranks)')
        for x in algos:
            if x not in hosts and x != 'auto':
                raise ValueError(f'--algos: unknown algorithm {x!r} (the host algorithms: {", ".join(hosts)}; auto)')
        algos = [x for x in algos if x == 'auto' or a.collective in hosts[x]]  # those that run it
        if a.repeat is not None and not 1 <= a.repeat:
            raise ValueError('--repeat: at least 1')
        pairs = [(p, n) for p in ranks for n in sizes if not skipped(p, n, a.skip)]
    except (KeyError, ValueError) as e:
        log(f'usage: {e}')
        return 2
    def on_signal(signum, _frame):
        raise Interrupted(f'signal {signum}')
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, on_signal)

    work = Path(tempfile.mkdtemp(prefix='bench-coll-'))
    # A copy of prism-rank and its libprism, so that a rebuild during the run changes nothing.
    try:
        (work / 'app').mkdir()
        (work / 'lib').mkdir()
        shutil.copy2(rank_bin, work / 'app' / 'prism-rank')
        for lib in (a.build / 'lib').glob('libprism.so*'):
            if lib.is_file():
                shutil.copy(lib.resolve(), work / 'lib' / lib.name)
        rank_bin = work / 'app' / 'prism-rank'
    except OSError as e:
        log(f'cannot copy prism-rank: {e}')
        shutil.rmtree(work, ignore_errors=True)
        return 2
    op = ['--policy', a.policy, '--dtype', a.dtype, '--collective', a.collective] + (['--data', a.data] if a.data else [])
    machine = machine_info()
    ports = Ports()
    rows: list[dict] = []
    failures: list[str] = []
    doc = {'complete': False, 'machine': machine, 'cores': os.cpu_count(),
           'op': {'policy': a.policy, 'dtype': a.dtype, 'collective': a.collective, 'data': a.data or 'spread'},
           'ranks': ranks, 'sizes': sizes, 'algos': algos, 'candidates': CANDIDATES.split(','),
           'skipped': [[p, n] for p in ranks for n in sizes if skipped(p, n, a.skip)],
           'target_seconds': a.target_seconds, 'calibration': None, 'calibrations': {}, 'results': rows}
    status = 0
    t_start = time.monotonic()
    try:
        prev: dict = {}   # (p, algo) -> (n, seconds) of the last size measured
        counter = [0]
        for p, n in pairs:
            if str(p) not in doc['calibrations']:
                cal, why = calibrate(rank_bin, work, ports, op, a.timeout, p)
                if cal is None:
                    log(f'calibration failed: {why}')
                    return 2
                cal_file = work / f'calibration_p{p}.json'
                doc['calibrations'][str(p)] = cal
                doc['calibration'] = doc['calibration'] or cal
                print(cal_line(cal, doc['op'], p), file=sys.stderr if a.markdown else sys.stdout, flush=True)
            row = {'ranks': p, 'bytes': n, 'algos': {}}
            rows.append(row)
            preds: dict = {}
            for algo in algos:
                ests = []
                if algo in preds:
                    ests.append(preds[algo])
                elif algo == 'auto' and preds:
                    ests.append(min(preds.values()))
                if (p, algo) in prev:
                    n0, t0 = prev[(p, algo)]
                    ests.append(t0 * n / n0)
                est = max(ests) if ests else None
                e = measure(rank_bin, work, ports, p, n, algo, op, a.collective, cal_file, est, a.target_seconds,
                            a.timeout, a.repeat, counter)
                row['algos'][algo] = e
                if 'error' not in e:
                    preds = preds or e['predictions']
                    prev[(p, algo)] = (n, e['seconds_median'])
                    log(f"p={p} n={size_name(n)} {algo}: {fmt_time(e['seconds_median'])} "
                        f"(predicted {fmt_time(e['predicted_seconds'])}, ran {e['algo']}"
                        f"{' m=' + str(e['segments']) if e['algo'] == 'chain' else ''}, repeat {e['repeat']}, "
                        f"{e['wall_seconds']:.1f} s)")
                else:
                    log(f"p={p} n={size_name(n)} {algo}: FAILED {e['error']}")
            f = analyse_row(row, a.policy)
            for x in f:
                log(f'FAILURE: {x}')
            failures += f
        doc['complete'] = True
    except Interrupted as e:
        log(f'interrupted ({e}): reporting what was measured')
        status = 130
    finally:
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN)   # let the cleanup finish
        kill_all()
        shutil.rmtree(work, ignore_errors=True)
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_DFL)

    doc['seconds'] = round(time.monotonic() - t_start, 1)
    s = summary(rows, algos)
    doc['summary'] = s
    doc['failures'] = failures
    head, body = table_rows(rows, algos)
    if a.markdown:
        print(markdown(head, body, s, doc['calibrations'], doc['op']))
    else:
        print(text_table(head, body))
        print()
        print('\n'.join(summary_lines(s)))
    log(f'{len(rows)} (p, n) pairs in {doc["seconds"]:.0f} s')
    if failures:
        log(f'{len(failures)} failure(s):')
        for x in failures:
            log(f'  {x}')
        status = status or 1
    if a.json:
        a.json.write_text(json.dumps(doc, indent=1) + '\n')
        log(f'wrote {a.json}')
    if a.plot and rows:
        why = plot(rows, a.plot, algos, ranks, machine, doc['calibration'] or {}, a.collective)
        if why:
            log(f'no plot: {why}')
        else:
            log(f'wrote {a.plot}')
    return status


if __name__ == '__main__':
    try:
        sys.exit(main(sys.argv[1:]))
    finally:
        kill_all()
