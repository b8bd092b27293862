#!/usr/bin/env python3
"""prism-rank's allreduce through the switch against Open MPI's MPI_Allreduce, on the same CPUs, in one run.

    tools/bench_rank.py [--ranks 2,4,8] [--sizes 1MiB,4MiB,16MiB,64MiB] [--mtu 1500,9000] [--repeat N]
                        [--policies kulisch,fp32_arrival] [--baseline BUILD] [--no-echo] [--no-mpi]
                        [--switch-cpu N] [--rank-cpus LIST] [--json FILE] [--plot FILE.png]
                        [--window W] [--set KEY=VALUE] [--driver af_xdp|af_packet]
                        [--markdown] [--from-json FILE] [--quick] [--build DIR] [--id ID] [--keep]

For each R and MTU, a network-namespace testbed in the `bridge` layout (scripts/testbed.py): every
rank in a namespace of its own, all on one Linux bridge behind one port of prism-switch (the
testbed's default port kind, net_af_xdp where the MTU allows, else net_af_packet), so the ranks
also reach each other over TCP.

Fair CPUs: the switch's lcore is pinned to --switch-cpu (default 0) and every rank process, PRISM's
and Open MPI's alike, is confined to --rank-cpus (default: every other CPU) with taskset; Open MPI
is measured a second time on every CPU (the switch stopped), as a user without a switch would run it.

- PRISM: for each size (and policy), `prism-rank --config {config} --rank {rank} --size S
  --repeat N --warmup 1 --json` on every rank at once. The collective's time is the slowest rank's
  (max over ranks of each rank's min, and of each rank's median). Algorithm bandwidth: input bytes
  per rank / time. The switch's counters before and after: the element-contributions it reduced
  (must be R x elements x (warmup + repeat): each once) and its Gbit/s over the timed interval.
- baseline (--baseline BUILD): the same with BUILD's prism-rank (e.g. a build of the commit before a
  change), against the same switch: an A/B of the rank side in one run.
- echo (the path's own ceiling): the same ranks, sizes and switch, each rank alone in a job of one
  taken from a pool (`--store file://... --ranks 1 --pool`, FP32_ARRIVAL, the cheapest accumulator):
  every CONTRIB is its own RESULT. The packets each rank sends and receives are the reduction's, but
  the switch opens and finalizes a slot per CONTRIB where a reduction opens one per R: PRISM / echo
  above 1 means the switch's per-slot work, not the path, was the echo's limit.
- MPI: then the switch is stopped and `mpirun` runs build/tools/mpi-allreduce (fp32 sum, TCP between
  the same namespaces, over the same veths and bridge), confined to --rank-cpus, then on every CPU.
- CPU: each rank reports its own CPU time (user + system) in the timed collectives; the table shows
  their sum per GiB reduced (GiB = R x input bytes x repeat / 2^30), for PRISM and for MPI.

Prints a table; --json writes every measurement (and the CPU model), --plot a log-log gnuplot PNG
of algorithm bandwidth against size, one line per implementation, R and MTU. --quick: R = 2,
64 KiB and 1 MiB, repeat 2, KULISCH_FIXED only, MTU 1500 (a smoke test: tests/py/test_bench_rank.py).
Needs root (namespaces), prism-switch, prism-rank, taskset, Open MPI's mpirun and
build/tools/mpi-allreduce. Timings on a shared 2-vCPU VM are what the machine gives; compare
within one run.
Exit status: 0 done, 1 a measurement failed (the rest is still reported), 2 a usage or setup
error, 130 interrupted. Whatever the way out, every testbed is torn down.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bench_util  # noqa: E402
from bench_util import fmt_time, size_name  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SIZES = '1MiB,4MiB,16MiB,64MiB'
ELEM = 4   # fp32
PRISM_UDP = 20562


def load_testbed():
    """scripts/testbed.py, the testbed's one implementation."""
    sys.path.insert(0, str(REPO / 'scripts'))
    import testbed  # noqa: E402
    return testbed


def log(msg: str):
    print(f'bench_rank: {msg}', file=sys.stderr, flush=True)


def fmt_num(v: float | None, digits: int = 3) -> str:
    if v is None:
        return '-'
    return f'{v:.{digits}g}' if v < 1000 else f'{v:.0f}'


def default_repeat(nbytes: int) -> int:
    """Collectives timed per size when --repeat is not given: fewer for the big ones."""
    if nbytes <= 64 << 10:
        return 20
    if nbytes <= 1 << 20:
        return 10
    if nbytes <= 16 << 20:
        return 5
    return 3


def machine_info() -> dict:
    out = bench_util.machine_info()
    try:
        v = subprocess.run(['mpirun', '--version'], capture_output=True, text=True, timeout=10).stdout
        out['mpi'] = v.splitlines()[0].strip() if v else ''
    except (OSError, subprocess.SubprocessError):
        out['mpi'] = ''
    return out


# ---------------------------------------------------------------- the switch's counters
COUNTERS = ['/prism/reducers', '/prism/ports', '/prism/drops']


def read_counters(tb) -> dict:
    t = tb.telemetry('switch', COUNTERS)
    flat = {}
    for d in t.values():
        if isinstance(d, dict):
            flat.update({k: v for k, v in d.items() if isinstance(v, (int, float))})
    return flat


def summed(c: dict, suffix: str) -> int:
    """The sum over shards (or ports) of a counter: shard0_elements + shard1_elements + ..."""
    return sum(v for k, v in c.items() if re.fullmatch(r'(shard|port)\d+_' + suffix, k))


def delta(before: dict, after: dict) -> dict:
    return {k: after[k] - before.get(k, 0) for k in after if after[k] - before.get(k, 0)}


# ---------------------------------------------------------------- PRISM
POOL = 1000   # the echo's pool: a job of one per rank


def pool_setting(R: int) -> str:
    """The switch YAML's pools: R jobs of one rank each for the echo, from the testbed's bridge network."""
    return (f'[{{jobs: {{first: {POOL}, count: {R}}}, max_group: 1, ranges: [10.88.0.0/16], slot_quota: 256, '
            'idle_timeout_ms: 600000}]')


def gib_reduced(R: int, nbytes: int, repeat: int) -> float:
    return R * nbytes * repeat / 2 ** 30


def rank_cmd(rank_bin: Path, nbytes: int, repeat: int, warmup: int, policy: str, window: int | None,
             pin: list[str], echo: bool = False) -> list[str]:
    if echo:   # alone in a pooled job of one: the switch echoes every CONTRIB as its RESULT
        where = ['--store', 'file://{dir}/echo-store-{rank}-%d' % nbytes, '--ranks', '1', '--rank', '0',
                 '--switch', f'{{switch_ip}}:{PRISM_UDP}', '--pool', str(POOL), '--algo', 'switch', '--check']
    else:
        where = ['--config', '{config}', '--rank', '{rank}']
    cmd = pin + [str(rank_bin)] + where + ['--size', str(nbytes), '--repeat', str(repeat), '--warmup', str(warmup),
                                           '--json', '--policy', policy]
    if window:
        cmd += ['--window', str(window)]
    return cmd


def prism_case(tb, cmd: list[str], nbytes: int, repeat: int, warmup: int, policy: str, impl: str = 'prism') -> dict:
    R = tb.R
    # Generous: 60 s plus 2 MB/s of contributions (the 2-vCPU VM reduces several times that).
    timeout = 60 + R * nbytes * (repeat + warmup) / 2e6
    res = {'impl': impl, 'policy': policy, 'ranks': R, 'bytes': nbytes, 'repeat': repeat, 'warmup': warmup,
           'command': ' '.join(cmd)}
    try:
        before = read_counters(tb)
        t0 = time.monotonic()
        runs = tb.run(cmd, timeout=timeout)
        res['wall_seconds'] = time.monotonic() - t0
        after = read_counters(tb)
    except (OSError, ValueError) as e:   # the telemetry socket: the switch died
        res['error'] = f"the switch's telemetry did not answer: {e}"
        return res
    bad = [r for r in runs if r.rc != 0]
    if bad:
        res['error'] = '; '.join(f'rank {r.rank}: exit {r.rc}{" (timed out)" if r.timed_out else ""}: '
                                 f'{(r.stderr or r.stdout).strip()[-400:]}' for r in bad)
        return res
    per_rank = [json.loads(r.stdout.strip().splitlines()[-1]) for r in runs]
    res['per_rank'] = per_rank
    res['seconds_min'] = max(p['seconds_min'] for p in per_rank)
    res['seconds_median'] = max(p['seconds_median'] for p in per_rank)
    res['gbit_s'] = nbytes * 8 / res['seconds_min'] / 1e9
    res['gbit_s_median'] = nbytes * 8 / res['seconds_median'] / 1e9
    res['retransmits'] = sum(p['retransmits'] for p in per_rank)
    if all('cpu_seconds' in p for p in per_rank):   # (a baseline build may not report it)
        res['cpu_seconds'] = sum(p['cpu_seconds'] for p in per_rank)
        res['cpu_s_per_gib'] = res['cpu_seconds'] / gib_reduced(R, nbytes, repeat)
    res['chunks'] = per_rank[0]['chunks']
    res['chunk_elems'] = per_rank[0]['chunk_elems']
    res['window'] = per_rank[0]['window']
    res['digests'] = sorted({p['digest'] for p in per_rank})
    res['digests_agree'] = len(res['digests']) == 1
    # What the switch counted between the two reads.
    d = delta(before, after)
    count = nbytes // ELEM
    elements = summed(d, 'elements')
    sw = {'element_contributions': elements,
          'expected_element_contributions': R * count * (repeat + warmup),
          'contribution_packets': summed(d, 'contribs'),
          'results_sent': summed(d, 'results_sent'),
          'results_resent': summed(d, 'resent'),
          'nacks_sent': summed(d, 'nacks_sent'),
          'rx_packets': summed(d, 'rx_packets'),
          'rx_ring_drops': summed(d, 'rx_ring_drops'),
          'drops': {k: v for k, v in d.items() if not re.match(r'(shard|port)\d+_', k)},
          'counters_delta': d}
    sw['each_once'] = elements == sw['expected_element_contributions']
    # Over the ranks' timed interval: the timed collectives' share of what the switch reduced,
    # over repeat x the slowest rank's median collective.
    timed = elements * repeat / (repeat + warmup)
    interval = repeat * res['seconds_median']
    sw['timed_interval_seconds'] = interval
    sw['gbit_s'] = timed * ELEM * 8 / interval / 1e9 if interval > 0 else None
    sw['element_contributions_per_s'] = timed / interval if interval > 0 else None
    res['switch'] = sw
    if impl == 'echo':   # each rank, rank 0 of a group of one, gets its own input back (--check)
        if any(p.get('check_differ') for p in per_rank):
            res['error'] = 'an echo differs from its input: ' + '; '.join(p.get('check_first', '') for p in per_rank)
    elif not res['digests_agree']:
        res['error'] = f'ranks disagree on the result: digests {res["digests"]}'
    return res


# ---------------------------------------------------------------- MPI
def write_agent(tb, pin: list[str], name: str) -> Path:
    """mpirun's rsh agent: `agent HOST CMD...` runs CMD in the namespace whose rank has address HOST
    (under `pin`, a taskset prefix, when given)."""
    agent = tb.dir / name
    cases = '\n'.join(f'  {r.ip}) ns={r.ns} ;;' for r in tb.ranks)
    agent.write_text('#!/bin/sh\n# written by tools/bench_rank.py: mpirun launch agent, rank IP -> namespace\n'
                     'while [ $# -gt 0 ]; do case "$1" in -*) shift ;; *) break ;; esac; done\n'
                     f'host=$1; shift\ncase "$host" in\n{cases}\n'
                     '  *) echo "mpi-agent: unknown host $host" >&2; exit 1 ;;\nesac\n'
                     f'exec ip netns exec "$ns" {" ".join(pin)} sh -c "$*"\n')
    agent.chmod(0o755)
    return agent


def link_bytes(tb) -> dict:
    """Bytes each rank's prism0 sent and received (proof that MPI's traffic crossed the veths)."""
    out = {}
    for r in tb.ranks:
        p = subprocess.run(['ip', '-n', r.ns, '-j', '-s', 'link', 'show', 'prism0'], capture_output=True, text=True)
        try:
            st = json.loads(p.stdout)[0]['stats64']
            out[r.rank] = st['rx']['bytes'] + st['tx']['bytes']
        except (ValueError, KeyError, IndexError):
            out[r.rank] = 0
    return out


class Interrupted(Exception):
    pass


_current: list = []   # the running mpirun, killed on SIGINT/SIGTERM


def mpi_case(tb, agent: Path, mpi_bin: Path, nbytes: int, repeat: int, warmup: int, pin: list[str],
             impl: str) -> dict:
    R = tb.R
    cmd = ['ip', 'netns', 'exec', tb.ranks[0].ns] + pin + [
           'mpirun', '--allow-run-as-root', '--bind-to', 'none', '-np', str(R), '--host',
           ','.join(r.ip for r in tb.ranks), '--mca', 'plm_rsh_agent', str(agent), '--mca', 'btl', 'tcp,self',
           '--mca', 'btl_tcp_if_include', 'prism0', '--mca', 'oob_tcp_if_include', 'prism0',
           '--mca', 'mpi_yield_when_idle', '1', str(mpi_bin), '--sizes', str(nbytes), '--repeat', str(repeat),
           '--warmup', str(warmup)]
    timeout = 60 + R * nbytes * (repeat + warmup) / 2e6
    res = {'impl': impl, 'ranks': R, 'bytes': nbytes, 'repeat': repeat, 'warmup': warmup,
           'command': ' '.join(cmd[4:])}
    errors = []
    for attempt in (1, 2):   # mpirun occasionally fails its first launch
        if attempt == 2 and 'route a message' in errors[-1]:
            # ORTE's routing tree lost a daemon: the retry has each daemon talk to mpirun directly.
            cmd[cmd.index('mpirun') + 1:cmd.index('mpirun') + 1] = ['--mca', 'routed', 'direct']
            res['command'] = ' '.join(cmd[4:])
        before = link_bytes(tb)
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             stdin=subprocess.DEVNULL, start_new_session=True)
        _current.append(p)
        try:
            out, err = p.communicate(timeout=timeout)
            rc = p.returncode
        except subprocess.TimeoutExpired:
            kill_group(p)
            out, err = p.communicate()
            rc = 124
        finally:
            _current.remove(p)
        res['wall_seconds'] = time.monotonic() - t0
        lines = [json.loads(ln) for ln in out.splitlines() if ln.startswith('{')]
        if rc == 0 and lines:
            after = link_bytes(tb)
            res.update({k: v for k, v in lines[-1].items() if k not in ('impl', 'ranks', 'bytes', 'repeat')})
            res['gbit_s_median'] = nbytes * 8 / res['seconds_median'] / 1e9
            if 'cpu_seconds' in res:
                res['cpu_s_per_gib'] = res['cpu_seconds'] / gib_reduced(R, nbytes, repeat)
            res['link_bytes'] = {k: after[k] - before.get(k, 0) for k in after}
            res['attempts'] = attempt
            if errors:
                res['first_attempt_error'] = errors[0]
            return res
        errors.append(f'attempt {attempt}: exit {rc}{" (timed out after %.0f s)" % timeout if rc == 124 else ""}: '
                      f'{(err or out).strip()[-600:]}')
        if rc == 124:
            break   # too slow: a second try would be too
        # A failed launch may leave MPI's daemons behind in the ranks' namespaces: nothing else
        # of ours runs there now (the switch has its own namespace).
        for r in tb.ranks:
            pids = subprocess.run(['ip', 'netns', 'pids', r.ns], capture_output=True, text=True).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
        time.sleep(0.5)
    res['error'] = ' | '.join(errors)
    return res


def kill_group(p: subprocess.Popen):
    load_testbed().Testbed._kill_group(p)


# ---------------------------------------------------------------- output
def ratio(a: dict | None, b: dict | None) -> str:
    if a and b and a.get('gbit_s') and b.get('gbit_s'):
        return f'{a["gbit_s"] / b["gbit_s"]:.3g}'
    return '-'


def gbit(e: dict | None) -> str:
    if not e:
        return '-'
    return fmt_num(e['gbit_s']) if e.get('gbit_s') else 'failed'


def table(rows: list[dict], policies: list[str]) -> str:
    main = 'kulisch' if 'kulisch' in policies else policies[0]
    extra = [p for p in policies if p != main]
    head = ['R', 'MTU', 'size', 'PRISM Gbit/s', 'x baseline', 'echo Gbit/s', 'PRISM / echo', 'MPI Gbit/s',
            'PRISM / MPI', 'MPI all-CPU Gbit/s', 'PRISM / MPI all', 'CPU s/GiB PRISM', 'CPU s/GiB MPI',
            'switch Gbit/s', 'retransmits']
    if main != 'kulisch':
        head[3] = f'PRISM {main} Gbit/s'
    head += [f'{p} Gbit/s' for p in extra]
    body = []
    for row in rows:
        pr = row['prism'].get(main) or {}
        mp, ma = row.get('mpi'), row.get('mpi_all')
        cells = [str(row['ranks']), str(row.get('mtu', 1500)), size_name(row['bytes']), gbit(pr),
                 ratio(pr, row.get('baseline')), gbit(row.get('echo')), ratio(pr, row.get('echo')), gbit(mp),
                 ratio(pr, mp), gbit(ma), ratio(pr, ma),
                 fmt_num(pr.get('cpu_s_per_gib')), fmt_num((mp or {}).get('cpu_s_per_gib')),
                 fmt_num((pr.get('switch') or {}).get('gbit_s')),
                 str(pr['retransmits']) if 'retransmits' in pr else '-']
        cells += [gbit(row['prism'].get(p)) for p in extra]
        body.append(cells)
    widths = [max(len(h), *(len(c[i]) for c in body)) if body else len(h) for i, h in enumerate(head)]
    lines = ['  '.join(h.rjust(w) for h, w in zip(head, widths)),
             '  '.join('-' * w for w in widths)]
    lines += ['  '.join(c.rjust(w) for c, w in zip(cells, widths)) for cells in body]
    return '\n'.join(lines)


def markdown_table(rows: list[dict], policies: list[str]) -> str:
    """The same table in Markdown, for docs/PERFORMANCE.md."""
    text = table(rows, policies).splitlines()
    cols = [re.split(r'\s{2,}', ln.strip()) for ln in text]
    head, body = cols[0], cols[2:]
    out = ['| ' + ' | '.join(head) + ' |', '|' + '|'.join('---:' for _ in head) + '|']
    out += ['| ' + ' | '.join(c) + ' |' for c in body]
    return '\n'.join(out)


def plot(rows: list[dict], png: Path, policies: list[str], machine: dict) -> str | None:
    if not shutil.which('gnuplot'):
        return 'gnuplot not found (apt-get install gnuplot-nox)'
    series: dict[str, list[tuple[int, float]]] = {}
    style: dict[str, tuple[int, int]] = {}
    colours = {}
    dashes = {'PRISM': 1, 'echo': 3, 'MPI': 2, 'MPI all-CPU': 4, 'baseline': 5}
    main = 'kulisch' if 'kulisch' in policies else policies[0]
    for row in rows:
        R, m = row['ranks'], row.get('mtu', 1500)
        colours.setdefault((R, m), len(colours) + 1)
        for what, e in (('PRISM', row['prism'].get(main)), ('echo', row.get('echo')), ('MPI', row.get('mpi')),
                        ('MPI all-CPU', row.get('mpi_all'))):
            if e and e.get('gbit_s'):
                name = f'{what} R={R} MTU {m}'
                series.setdefault(name, []).append((row['bytes'], e['gbit_s']))
                style[name] = (colours[(R, m)], dashes[what])
    if not series:
        return 'nothing to plot'
    work = Path(tempfile.mkdtemp(prefix='bench-rank-plot-'))
    try:
        dat = work / 'rank_vs_mpi.dat'
        names = list(series)
        with open(dat, 'w') as f:
            for n in names:
                f.write(f'# {n}\n' + ''.join(f'{x} {y}\n' for x, y in sorted(series[n])) + '\n\n')
        palette = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#8c564b', '#e377c2', '#17becf']
        plots = []
        for i, n in enumerate(names):
            c, dt = style[n]
            pt = 5 if n.startswith('MPI') else 7 if n.startswith('PRISM') else 6
            plots.append(f"'{dat}' index {i} with linespoints lw 2 dt {dt} pt {pt} "
                         f"lc rgb '{palette[(c - 1) % len(palette)]}' title '{n}'")
        cpu = machine.get('cpu_model', '')
        sizes = sorted({row['bytes'] for row in rows})
        xtics = ', '.join(f'"{size_name(n).replace(" ", "")}" {n}' for n in sizes)
        gp = (f"set terminal TERM size 1280,720 noenhanced\nset output '{png}'\n"
              f"set title \"allreduce, fp32 sum ({main}): prism-rank through prism-switch, its echo ceiling and Open MPI"
              f" (TCP)\\nbridge testbed, ranks on the same CPUs, {machine.get('cpus')} vCPUs, {cpu}\"\n"
              "set xlabel 'bytes per rank'\nset ylabel 'algorithm bandwidth, Gbit/s (bytes per rank / time)'\n"
              f"set logscale xy\nset xtics ({xtics})\nset xrange [{sizes[0] / 1.5}:{sizes[-1] * 1.5}]\n"
              "set key outside right top\nset grid\n"
              "plot " + ', '.join(plots) + '\n')
        for term in ('pngcairo', 'png'):
            (work / 'plot.gp').write_text(gp.replace('TERM', term))
            r = subprocess.run(['gnuplot', str(work / 'plot.gp')], capture_output=True, text=True)
            if r.returncode == 0:
                return None
        return f'gnuplot failed: {r.stderr.strip()[-400:]}'
    finally:
        shutil.rmtree(work, ignore_errors=True)


# ---------------------------------------------------------------- main
def parse_cpus(text: str) -> list[int]:
    out = []
    for part in text.split(','):
        lo, _, hi = part.partition('-')
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def parse_args(argv):
    p = argparse.ArgumentParser(prog='tools/bench_rank.py', description=__doc__.split('\n\n', 2)[2],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=(
                                    'Method and today\'s figures: docs/PERFORMANCE.md, '
                                    '"End to end: ranks through the switch against Open MPI".'))
    p.add_argument('--ranks', default='2,4,8', help='R values, comma-separated (default 2,4,8)')
    p.add_argument('--sizes', default=DEFAULT_SIZES, help=f'bytes per rank, comma-separated (default {DEFAULT_SIZES})')
    p.add_argument('--mtu', default='1500,9000', help="the testbed links' MTUs, comma-separated (default 1500,9000)")
    p.add_argument('--repeat', type=int, help='timed collectives per size (default: 20 up to 64 KiB, 10 up to '
                   '1 MiB, 5 up to 16 MiB, 3 above)')
    p.add_argument('--warmup', type=int, default=1, help='untimed collectives first (default 1)')
    p.add_argument('--policies', default='kulisch,fp32_arrival',
                   help='PRISM policies, comma-separated: kulisch, fp32_arrival, fp32_binomial (default kulisch,fp32_arrival)')
    p.add_argument('--baseline', type=Path, metavar='BUILD',
                   help="also run BUILD's prism-rank (kulisch), e.g. a build of an older commit: an A/B in one run")
    p.add_argument('--no-echo', action='store_true', help="skip the path's echo ceiling")
    p.add_argument('--window', type=int, help="prism-rank's --window (default: prism-rank's)")
    p.add_argument('--set', action='append', default=[], metavar='KEY=VALUE',
                   help="a top-level key of the switch's YAML (repeatable), as scripts/testbed.sh --set")
    p.add_argument('--driver', choices=('af_xdp', 'af_packet'), help="the switch port's kind (default: the testbed's)")
    p.add_argument('--switch-cpu', type=int, default=0, help="the CPU of the switch's lcore (default 0)")
    p.add_argument('--rank-cpus', help='the CPUs every rank process runs on, PRISM and MPI alike, e.g. 1 or 1-3 '
                   '(default: every CPU but the switch\'s)')
    p.add_argument('--no-mpi', action='store_true', help='PRISM only')
    p.add_argument('--quick', action='store_true', help='smoke test: R = 2, 64 KiB and 1 MiB, repeat 2, kulisch, MTU 1500')
    p.add_argument('--json', type=Path, help='write every measurement here')
    p.add_argument('--plot', type=Path, help='write a gnuplot PNG here')
    p.add_argument('--markdown', action='store_true', help='also print the table in Markdown')
    p.add_argument('--from-json', type=Path, metavar='FILE',
                   help="measure nothing: print the table (and --plot) of an earlier run's --json FILE")
    p.add_argument('--build', type=Path, default=Path(os.environ.get('PRISM_BUILD') or REPO / 'build'),
                   help='the build directory (default: $PRISM_BUILD or build/)')
    p.add_argument('--id', help='testbed id (1-12 of [a-z0-9]; default: random), the same for every R in turn')
    p.add_argument('--keep', action='store_true', help="keep the testbeds' folders (configs, outputs)")
    a = p.parse_args(argv)
    if a.quick:
        a.ranks, a.sizes, a.repeat, a.policies, a.mtu = '2', '64KiB,1MiB', a.repeat or 2, 'kulisch', '1500'
    try:
        a.ranks = [int(x) for x in a.ranks.split(',') if x]
        a.sizes = [bench_util.parse_size(x, ELEM) for x in a.sizes.split(',') if x]
        a.mtu = [int(x) for x in a.mtu.split(',') if x]
    except ValueError as e:
        p.error(str(e))
    a.policies = [x.strip() for x in a.policies.split(',') if x.strip()]
    a.settings = {}
    for kv in a.set:
        k, sep, v = kv.partition('=')
        if not sep or not re.fullmatch(r'[a-z_]+', k):
            p.error(f'--set {kv!r}: write KEY=VALUE (a top-level key of the switch YAML)')
        a.settings[k] = v
    if 'pools' in a.settings and not a.no_echo:
        p.error('--set pools=...: the echo takes the pools key; add --no-echo to set your own')
    if not a.ranks or any(not 2 <= r <= 64 for r in a.ranks):
        p.error('--ranks: values 2..64')
    if not a.sizes or not a.policies or not a.mtu:
        p.error('give at least one size, one policy and one MTU')
    if any(not 576 <= m <= 9000 for m in a.mtu):
        p.error('--mtu: values 576..9000')
    for x in a.policies:
        if x not in ('kulisch', 'fp32_arrival', 'fp32_binomial'):
            p.error(f'--policies: {x!r} is not kulisch, fp32_arrival or fp32_binomial')
    if a.repeat is not None and a.repeat < 1:
        p.error('--repeat: 1 or more')
    ncpu = os.cpu_count() or 1
    try:
        a.rank_cpus = parse_cpus(a.rank_cpus) if a.rank_cpus else [c for c in range(ncpu) if c != a.switch_cpu]
    except ValueError:
        p.error(f'--rank-cpus {a.rank_cpus!r}: write a list such as 1 or 1-3 or 1,3')
    if not 0 <= a.switch_cpu < ncpu or not a.rank_cpus or any(not 0 <= c < ncpu for c in a.rank_cpus):
        p.error(f'--switch-cpu / --rank-cpus: CPUs 0..{ncpu - 1}, at least one for the ranks')
    return a


def cpu_list(cpus: list[int]) -> str:
    return ','.join(map(str, cpus))


def run_size(tb, a, R: int, mtu: int, n: int, rank_bin: Path, pin: list[str], row: dict) -> bool:
    """PRISM (each policy), the baseline and the echo for one size; False when one failed."""
    ok = True
    rep = a.repeat or default_repeat(n)
    cases = [(f'PRISM {pol}', 'prism', pol, rank_cmd(rank_bin, n, rep, a.warmup, pol, a.window, pin))
             for pol in a.policies]
    if a.baseline:
        cases.append(('baseline', 'baseline', 'kulisch',
                      rank_cmd(a.baseline / 'app' / 'prism-rank', n, rep, a.warmup, 'kulisch', a.window, pin)))
    if not a.no_echo:
        # FP32_ARRIVAL: the cheapest accumulator; with one term its result is the input itself.
        # Each echo rank is alone in its job, so its window would not know that R share the port's
        # ring: give it the window a rank of the R-rank job has at most (docs/RANK.md, Window).
        cases.append(('echo', 'echo', 'fp32_arrival',
                      rank_cmd(rank_bin, n, rep, a.warmup, 'fp32_arrival', a.window or max(16, 512 // R), pin,
                               True)))
    for label, impl, pol, cmd in cases:
        res = prism_case(tb, cmd, n, rep, a.warmup, pol, impl)
        if impl == 'prism':
            row['prism'][pol] = res
        else:
            row[impl] = res
        where = f'R = {R}, MTU {mtu}, {size_name(n)}, {label}'
        if 'error' in res:
            ok = False
            log(f'{where}: {res["error"]}')
            continue
        sw = res['switch']
        log(f'{where}: min {fmt_time(res["seconds_min"])}, {res["gbit_s"]:.3g} Gbit/s, {res["retransmits"]} '
            f'retransmits; switch: {sw["element_contributions"]} element-contributions'
            f'{"" if sw["each_once"] else " (expected %d)" % sw["expected_element_contributions"]}, '
            f'{sw["gbit_s"]:.3g} Gbit/s')
        if not sw['each_once']:
            ok = False
    return ok


def main(argv: list[str]) -> int:
    a = parse_args(argv)
    if a.from_json:
        d = json.loads(a.from_json.read_text())
        policies = d['args']['policies']
        print(table(d['results'], policies))
        if a.markdown:
            print()
            print(markdown_table(d['results'], policies))
        if a.plot:
            why = plot(d['results'], a.plot, policies, d['machine'])
            print(f'plot: {a.plot}' if why is None else f'plot: not written: {why}')
        return 0
    tbm = load_testbed()
    rank_bin = a.build / 'app' / 'prism-rank'
    mpi_bin = a.build / 'tools' / 'mpi-allreduce'
    need = [rank_bin, a.build / 'app' / 'prism-switch'] + ([] if a.no_mpi else [mpi_bin])
    if a.baseline:
        need.append(a.baseline / 'app' / 'prism-rank')
    for b in need:
        if not os.access(b, os.X_OK):
            log(f'{b} not found: build it first (ninja -C {b.parents[1]}); mpi-allreduce needs libopenmpi-dev')
            return 2
    if not a.no_mpi and not shutil.which('mpirun'):
        log('mpirun not found: install Debian\'s openmpi-bin')
        return 2
    if not shutil.which('taskset'):
        log('taskset not found: install Debian\'s util-linux')
        return 2
    if os.geteuid() != 0:
        log('needs root (network namespaces): run it as root')
        return 2
    for path in (a.json, a.plot):
        if path and not path.parent.is_dir():
            log(f'{path}: its folder does not exist')
            return 2

    def on_signal(signum, _frame):
        raise Interrupted(f'signal {signum}')
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)

    machine = machine_info()
    machine['loadavg_start'] = list(os.getloadavg())
    machine['switch_cpu'] = a.switch_cpu
    machine['rank_cpus'] = a.rank_cpus
    log(f'{machine.get("cpus")} CPUs, {machine.get("cpu_model")}; {machine.get("mpi")}; '
        f'load average {machine["loadavg_start"][0]:.2f}; switch on CPU {a.switch_cpu}, ranks on CPUs '
        f'{cpu_list(a.rank_cpus)}')
    if machine['loadavg_start'][0] > 0.5 * (machine.get('cpus') or 1):
        log('the machine is busy (load average above half its CPUs): the times will show it')
    pin = ['taskset', '-c', cpu_list(a.rank_cpus)]
    rows: list[dict] = []
    failed = False
    started = time.monotonic()
    status = 0
    tb = None
    try:
        for mtu in a.mtu:
            for R in a.ranks:
                tb_dir = Path(tempfile.mkdtemp(prefix=f'bench-rank-R{R}-'))
                settings = dict(a.settings)
                if not a.no_echo:
                    settings['pools'] = pool_setting(R)
                tb = tbm.Testbed(ranks=R, layout='bridge', tb_id=a.id, dir=tb_dir, build=a.build,
                                 settings=settings, mtu=mtu, lcore=a.switch_cpu, driver=a.driver)
                t0 = time.monotonic()
                tb.up()
                log(f'R = {R}, MTU {mtu}: testbed {tb.id} up in {time.monotonic() - t0:.1f} s ({tb_dir}), '
                    f'port {tb.driver}')
                by_size = {n: {'ranks': R, 'mtu': mtu, 'driver': tb.driver, 'bytes': n, 'prism': {}, 'baseline': None,
                               'echo': None, 'mpi': None, 'mpi_all': None} for n in a.sizes}
                for n in a.sizes:
                    if not run_size(tb, a, R, mtu, n, rank_bin, pin, by_size[n]):
                        failed = True
                exits = tb.stop_switches()
                sw_exit = exits.get('switch')
                if sw_exit and sw_exit.rc != 0:
                    failed = True
                    log(f'R = {R}: the switch exited {sw_exit.rc}: {sw_exit.stderr[-800:]}')
                if not a.no_mpi:
                    for impl, mpin in (('mpi', pin), ('mpi_all', [])):
                        agent = write_agent(tb, mpin, f'mpi-agent-{impl}.sh')
                        for n in a.sizes:
                            rep = a.repeat or default_repeat(n)
                            res = mpi_case(tb, agent, mpi_bin, n, rep, a.warmup, mpin, impl)
                            by_size[n][impl] = res
                            what = 'MPI' if impl == 'mpi' else 'MPI on every CPU'
                            if 'error' in res:
                                failed = True
                                log(f'R = {R}, MTU {mtu}, {size_name(n)}, {what}: {res["error"]}')
                            else:
                                log(f'R = {R}, MTU {mtu}, {size_name(n)}, {what}: min {fmt_time(res["seconds_min"])}, '
                                    f'{res["gbit_s"]:.3g} Gbit/s')
                tb.down()
                tb = None
                if not a.keep:
                    shutil.rmtree(tb_dir, ignore_errors=True)
                rows.extend(by_size.values())
    except Interrupted as e:
        log(f'interrupted ({e}): tearing down')
        status = 130
    except tbm.TestbedError as e:
        log(str(e))
        status = 2
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)   # let the teardown finish
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for p in list(_current):
            kill_group(p)
        if tb is not None:
            tb.down()
            if not a.keep:
                shutil.rmtree(tb.dir, ignore_errors=True)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    elapsed = time.monotonic() - started
    machine['loadavg_end'] = list(os.getloadavg())

    if rows:
        print(table(rows, a.policies))
        if a.markdown:
            print()
            print(markdown_table(rows, a.policies))
        print(f'\n{machine.get("cpus")} vCPUs, {machine.get("cpu_model")}; switch on CPU {a.switch_cpu}, every rank '
              f'(PRISM and MPI) on CPUs {cpu_list(a.rank_cpus)}, "MPI all-CPU" on every CPU; {elapsed:.0f} s in all. '
              'Gbit/s: bytes per rank / the slowest rank\'s min time; x baseline, / echo, / MPI: ratios of Gbit/s; '
              'CPU s/GiB: the ranks\' CPU time (user + system, summed) in the timed collectives per GiB reduced '
              '(R x bytes x repeat); switch Gbit/s: the contributions the switch reduced in the timed collectives / '
              '(repeat x the median time).')
    if a.json:
        a.json.write_text(json.dumps({
            'benchmark': 'bench_rank', 'machine': machine, 'seconds': elapsed,
            'args': {'ranks': a.ranks, 'sizes': a.sizes, 'repeat': a.repeat, 'warmup': a.warmup,
                     'policies': a.policies, 'window': a.window, 'switch_settings': a.settings, 'mtu': a.mtu,
                     'quick': a.quick, 'no_mpi': a.no_mpi, 'baseline': str(a.baseline) if a.baseline else None,
                     'switch_cpu': a.switch_cpu, 'rank_cpus': a.rank_cpus, 'driver': a.driver},
            'complete': status == 0,
            'results': rows}, indent=1) + '\n')
        print(f'json: {a.json}')
    if a.plot and rows:
        why = plot(rows, a.plot, a.policies, machine)
        print(f'plot: {a.plot}' if why is None else f'plot: not written: {why}')
    if status:
        return status
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
