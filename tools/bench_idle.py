#!/usr/bin/python3
"""What `polling: adaptive` costs and saves against `polling: busy` (docs/CONFIG.md, polling):

  (a) idle CPU: the switch's user + system CPU time (/proc/PID/stat) over --idle seconds with no
      traffic at all, as a share of one CPU;
  (b) first-packet latency: a rank pings the switch's port after --gap seconds of silence, --pings
      times; the median and the 90th percentile round trip (the switch answers ICMP itself, so
      its wake-up is all that differs);
  (c) throughput under load: prism-rank allreduces of --size, --repeat ops, --runs runs; the
      ranks' median Gbit/s.

Each figure gets a testbed of its own, one up at a time (bridge layout, --ranks ranks, the
testbed's default driver, the switch on lcore 0), the modes alternating for (c). Prints a table; --json FILE writes every figure.

    tools/bench_idle.py                                   # busy, adaptive (1000 us, the default), adaptive (250 us)
    tools/bench_idle.py --modes busy,adaptive:500 --idle 60 --pings 20 --json /tmp/idle.json
    PRISM_BUILD=build-sw tools/bench_idle.py --idle 10 --pings 5 --runs 1   # a quick look

Needs root (the testbed's namespaces).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / 'tools'))
from bench_util import machine_info, load_testbed  # noqa: E402


def cpu_seconds(pid: int) -> float:
    """utime + stime of the process (every thread), in seconds."""
    fields = Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


def settings_of(mode: str) -> tuple[str, dict]:
    """'busy', 'adaptive' or 'adaptive:US' -> (label, the switch's YAML keys)."""
    kind, _, us = mode.partition(':')
    if kind not in ('busy', 'adaptive'):
        raise SystemExit(f'--modes: {mode!r} is not busy, adaptive or adaptive:US')
    s = {'polling': kind}
    if us:
        s['polling_sleep_max_us'] = us
    return (f'adaptive {us or 1000} us' if kind == 'adaptive' else 'busy'), s


def ping_once(tb, r) -> float | None:
    p = subprocess.run(['ip', 'netns', 'exec', r.ns, 'ping', '-c', '1', '-W', '1', r.switch_ip],
                       capture_output=True, text=True)
    m = re.search(r'time=([\d.]+) ms', p.stdout)
    return float(m[1]) * 1000 if m else None


def throughput(tb, build: Path, size: str, repeat: int) -> float:
    runs = tb.run([str(build / 'app' / 'prism-rank'), '--config', '{config}', '--rank', '{rank}', '--size', size,
                   '--repeat', str(repeat), '--json'], timeout=300)
    bad = [r for r in runs if r.rc != 0]
    if bad:
        raise RuntimeError(f'rank {bad[0].rank} exited {bad[0].rc}: {bad[0].stderr[-2000:]}')
    return statistics.median(json.loads(r.stdout.strip().splitlines()[-1])['gbit_s'] for r in runs)


def pct(v: list[float], q: float) -> float:
    v = sorted(v)
    return v[min(len(v) - 1, int(round(q * (len(v) - 1))))]


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--modes', default='busy,adaptive,adaptive:250')
    p.add_argument('--ranks', type=int, default=2)
    p.add_argument('--idle', type=float, default=60, help='seconds of idle CPU measured (a)')
    p.add_argument('--pings', type=int, default=20, help='pings after silence (b)')
    p.add_argument('--gap', type=float, default=1.0, help='seconds of silence before each ping (b)')
    p.add_argument('--size', default='16MiB')
    p.add_argument('--repeat', type=int, default=5)
    p.add_argument('--runs', type=int, default=3, help='throughput runs per mode (c)')
    p.add_argument('--driver', choices=['af_xdp', 'af_packet'])
    p.add_argument('--build', default=os.environ.get('PRISM_BUILD') or str(REPO / 'build'))
    p.add_argument('--json')
    a = p.parse_args(argv)
    tbm = load_testbed()
    build = Path(a.build)
    modes = [settings_of(m) for m in a.modes.split(',')]
    out = {label: {'settings': s, 'gbit_s': []} for label, s in modes}
    driver = None

    def testbed(s: dict):
        return tbm.Testbed(a.ranks, 'bridge', build=build, driver=a.driver, settings=dict(s, retention_ms='5000'))

    # One testbed at a time: every switch runs on lcore 0, and a busy one would take it from another's.
    for label, s in modes:
        with testbed(s) as tb:
            driver = tb.driver
            pid = tb.switches[0].pid
            time.sleep(1)
            c0, t0 = cpu_seconds(pid), time.monotonic()
            time.sleep(a.idle)
            out[label]['idle_cpu_pct'] = 100 * (cpu_seconds(pid) - c0) / (time.monotonic() - t0)
            rtts = []
            for _ in range(a.pings):
                time.sleep(a.gap)
                if (us := ping_once(tb, tb.ranks[0])) is not None:
                    rtts.append(us)
            out[label]['ping_us'] = rtts
            exits = tb.stop_switches()
            m = re.search(r'lcore \d+ polling adaptive: sleeps (\d+), slept_us (\d+)', exits['switch'].stdout)
            out[label]['sleeps'], out[label]['slept_us'] = (int(m[1]), int(m[2])) if m else (0, 0)
        print(f'{label}: idle CPU {out[label]["idle_cpu_pct"]:.1f}%, first-ping median '
              f'{statistics.median(rtts):.0f} us', file=sys.stderr)
    for i in range(a.runs):   # alternating, so drift falls on every mode
        for label, s in (modes if i % 2 == 0 else list(reversed(modes))):
            with testbed(s) as tb:
                g = throughput(tb, build, a.size, a.repeat)
            out[label]['gbit_s'].append(g)
            print(f'{label}: {a.size} run {i}: {g:.3f} Gbit/s', file=sys.stderr)
    info = machine_info()
    print(f'\nbridge layout, R={a.ranks}, driver {driver}; '
          f'CPU: {info.get("cpu_model", "?")}, {info.get("cpus")} vCPUs')
    print(f'| polling | idle CPU ({a.idle:.0f} s) | first ping after {a.gap:g} s idle: median | p90 | '
          f'{a.size} allreduce Gbit/s (median of {a.runs}) |')
    print('|---|---|---|---|---|')
    for label, _ in modes:
        o = out[label]
        print(f'| {label} | {o["idle_cpu_pct"]:.1f}% | {statistics.median(o["ping_us"]):.0f} us | '
              f'{pct(o["ping_us"], 0.9):.0f} us | {statistics.median(o["gbit_s"]) if o["gbit_s"] else 0:.3f} |')
    if a.json:
        Path(a.json).write_text(json.dumps({'machine': info, 'args': vars(a), 'modes': out}, indent=1) + '\n')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
