#!/usr/bin/env python3
"""What a flooder gets out of the switch, and what a flooding tenant costs an honest job, in one run.

    tools/bench_hostile.py [--rates 1000,10000,0] [--seconds S] [--size BYTES] [--repeat N]
                           [--json FILE] [--markdown] [--quick] [--build DIR]

A network-namespace testbed in the `bridge` layout (scripts/testbed.py): two honest ranks of job 7
and prism-switch's port on one Linux bridge, with a pool (ids 1000-1003, range 10.88.0.128/25).
Two more hosts join the bridge: the attacker (10.88.0.200, in the pool's range) and a sink
(a namespace that takes frames for its MAC and drops them: their IP address is not its own).
The attacker first becomes a pool tenant (tests/py/minimal_client.py takes a job of one rank and
completes 4 ops, their RESULTs retained), then sends with tools/prism-flood.

Reflection. For each kind of flood and each rate (--rates, frames per second; 0 = as fast as
prism-flood goes), --seconds of it; the attacker's interface counts the bytes it sent and the
bytes that came back (every reply, whatever address it names, comes to the attacker's MAC).
Kinds, all with the source port rotating (a new one per frame):
- alloc: ALLOCs without the 8 bytes of padding (the worst case: a 74-byte request, an 82-byte answer)
- alloc_padded: ALLOCs as PROTOCOL.md asks (82 bytes)
- bad_alloc: ALLOCs with group 0 (refused MALFORMED, answered to a pool source)
- join_free: JOINs for a pooled id nobody holds (UNKNOWN_JOB, answered to a pool source)
- query_stranger: QUERYs for job 7 from an address no job registers (never answered)
and, from the tenant's own bound address (a registered member: no rotation):
- tenant_query: QUERYs for its completed ops (each would get a 1.3 KB RESULT)
- tenant_retransmit: RETRANSMITs of its completed ops (the whole chunk again)
The row's ratio is bytes back / bytes sent: the switch promises <= 1 (docs/SECURITY.md).

Bandwidth. prism-rank's allreduce (--size, --repeat, two ranks, KULISCH_FIXED, every result checked bit for bit
against the reference model: prism-rank --check) three times: with
no flood; while the tenant floods the switch as fast as prism-flood goes (its QUERYs and
RETRANSMITs for completed ops, CONTRIBs with a wrong descriptor, ALLOCs); and while the very same
frames go to the sink instead (the control: what carrying the flood costs the machine, the
switch aside). The switch's cost of the flood is 1 - bandwidth(switch) / bandwidth(sink).

Prints tables; --json writes every figure (and the CPU model). Needs root (namespaces),
prism-switch, prism-rank and prism-flood. On a 2-vCPU VM the flooder, the bridge, the ranks and
the switch share two CPUs: compare within one run.
Exit status: 0 done, 1 a measurement failed, 2 a usage or setup error. The testbed is torn down
whatever happens.
"""
from __future__ import annotations

import argparse
import json
import struct
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / 'tools'))
sys.path.insert(0, str(REPO / 'scripts'))
sys.path.insert(0, str(REPO / 'tests' / 'py'))
import bench_util  # noqa: E402
import testbed as tbm  # noqa: E402
from hostile_frames import add_host, csum, frame, header, link_stats, query, write_pcap  # noqa: E402
from minimal_client import (ALLOC, CONTRIB, F_LAST_CHUNK, F_RETRANSMIT, HDR, JOIN, MAGIC, VERSION,  # noqa: E402
                            read_switch, shard_port)

PY = '/usr/bin/python3'
CLIENT = REPO / 'tests' / 'py' / 'minimal_client.py'
POOL, POOL_IDS = 1000, 4
ATK_IP, ATK_PORT, SINK_IP, SINK_DST = '10.88.0.200', 30600, '10.88.0.201', '10.88.0.202'
TENANT_ELEMENTS, TENANT_OPS = 200, 4


def log(msg: str):
    print(f'bench_hostile: {msg}', file=sys.stderr, flush=True)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--rates', default='1000,10000,0', help='frames per second, 0 = flat out (default 1000,10000,0)')
    p.add_argument('--seconds', type=float, default=2.0, help='each reflection flood (default 2)')
    p.add_argument('--size', default='4MiB', help='allreduce input per rank (default 4MiB)')
    p.add_argument('--repeat', type=int, default=10, help='timed allreduces per case (default 10)')
    p.add_argument('--floods', default='mix', help='the bandwidth cases\' floods: mix, or any of query, retransmit, '
                   'mismatch, alloc (comma-separated; default mix)')
    p.add_argument('--flood-pps', default='50000,0', help='the bandwidth cases\' flood rates, frames per second '
                   '(0 = flat out; default 50000,0)')
    p.add_argument('--no-reflection', action='store_true', help='the bandwidth cases only')
    p.add_argument('--json', help='write every figure to this file')
    p.add_argument('--markdown', action='store_true', help='tables in Markdown')
    p.add_argument('--quick', action='store_true', help='rates 0 only, 1 s, 1 MiB x 3 (a smoke test)')
    p.add_argument('--build', default=str(REPO / 'build'))
    p.add_argument('--id', help='the testbed id (scripts/testbed.py --id; default: a free one)')
    a = p.parse_args(argv)
    try:
        a.rates = [float(x) for x in a.rates.split(',')]
        a.flood_pps = [float(x) for x in a.flood_pps.split(',')]
        a.nbytes = bench_util.parse_size(a.size)
    except ValueError as e:
        p.error(str(e))
    if a.quick:
        a.rates, a.seconds, a.nbytes, a.repeat, a.flood_pps = [0.0], 1.0, 1 << 20, 3, [0.0]
    return a


class Bench:
    def __init__(self, a, tb):
        self.a, self.tb = a, tb
        self.build = Path(a.build)
        self.flood_bin = self.build / 'tools' / 'prism-flood'
        sw = tb.switches[0]
        self.sw_mac, self.sw_ip = sw.ports[0]['mac'], sw.ports[0]['ip']
        self.udp, self.shards = read_switch(str(sw.config))
        self.atk, self.atk_mac = add_host(tb, 'atk', ATK_IP)
        self.sink, self.sink_mac = add_host(tb, 'snk', SINK_IP)
        share = tb.dir / 'tenant.json'
        out = subprocess.run(['ip', 'netns', 'exec', self.atk, PY, str(CLIENT), '--config', str(sw.config), '--pool',
                              str(POOL), '--group', '1', '--rank', '0', '--ip', ATK_IP, '--udp-port', str(ATK_PORT),
                              '--switch-ip', self.sw_ip, '--pool-share', str(share), '--elements',
                              str(TENANT_ELEMENTS), '--ops', str(TENANT_OPS), '--no-leave', '--deadline', '30'],
                             capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            raise RuntimeError(f'the tenant could not take a pooled job: {out.stdout}{out.stderr}')
        t = json.loads(out.stdout.strip().splitlines()[-1])
        self.job, self.first = t['job'], t['first_op']
        log(f'tenant: pooled job {self.job}, ops {self.first}..{t["last_op"]}')

    def to_switch(self, payload: bytes, key: tuple, *, src_ip: str = ATK_IP, sport: int = 40000) -> bytes:
        return frame(self.atk_mac, self.sw_mac, src_ip, self.sw_ip, sport,
                     shard_port(self.udp, self.shards, key[0], key[1], 0), payload)

    def kinds(self) -> dict[str, tuple[list[bytes], bool]]:
        """name -> (frames, rotate source ports)"""
        job, first = self.job, self.first
        chunk = struct.pack('<f', 0.0) * TENANT_ELEMENTS

        def alloc(nonce: int, group: int = 2, pad: bool = False) -> bytes:
            return HDR.pack(MAGIC, VERSION, ALLOC, POOL, nonce, 0, 0, group, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0) + \
                (bytes(8) if pad else b'')
        free_id = POOL + POOL_IDS - 1 if job != POOL + POOL_IDS - 1 else POOL
        return {
            'alloc': ([self.to_switch(alloc(1 + i), (POOL, 0)) for i in range(64)], True),
            'alloc_padded': ([self.to_switch(alloc(1 + i, pad=True), (POOL, 0)) for i in range(64)], True),
            'bad_alloc': ([self.to_switch(alloc(1 + i, group=0), (POOL, 0)) for i in range(64)], True),
            'join_free': ([self.to_switch(HDR.pack(MAGIC, VERSION, JOIN, free_id, 1 + i, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0,
                                                   0, 0, 0), (free_id, 0)) for i in range(64)], True),
            'query_stranger': ([self.to_switch(query(7, i, 0, 2), (7, i)) for i in range(64)], True),
            'tenant_query': ([self.to_switch(query(job, first + i % TENANT_OPS, 0, 1), (job, first + i % TENANT_OPS),
                                             sport=ATK_PORT) for i in range(64)], False),
            'tenant_retransmit': ([self.to_switch(header(CONTRIB, job, first + i % TENANT_OPS, 0, 0, 1, 1,
                                                         TENANT_ELEMENTS, F_LAST_CHUNK | F_RETRANSMIT) + chunk,
                                                  (job, first + i % TENANT_OPS), sport=ATK_PORT)
                                   for i in range(64)], False),
        }

    def tenant_flood(self, kind: str = 'mix') -> list[bytes]:
        """The bandwidth case's flood: the tenant's QUERYs, RETRANSMITs, mismatched CONTRIBs and
        ALLOCs (mix), or one of them (query, retransmit, mismatch, alloc)."""
        k = self.kinds()
        el = struct.pack('<f', 1.0) * 8
        parts = {'query': k['tenant_query'][0], 'retransmit': k['tenant_retransmit'][0],
                 'mismatch': [self.to_switch(header(CONTRIB, self.job, self.first + 1000 + i, 0, 0, 2, 1, 8,
                                                    F_LAST_CHUNK) + el, (self.job, self.first + 1000 + i),
                                             sport=ATK_PORT) for i in range(64)],
                 'alloc': k['alloc_padded'][0]}
        chosen = list(parts) if kind == 'mix' else [kind]
        return [parts[c][i] for i in range(64) for c in chosen]

    def to_sink(self, frames: list[bytes]) -> list[bytes]:
        """The same frames for the sink: its MAC, an IP address it does not hold (dropped, unanswered)."""
        out = []
        for f in frames:
            b = bytearray(f)
            b[0:6] = bytes(int(x, 16) for x in self.sink_mac.split(':'))
            ip = bytes(int(x) for x in SINK_DST.split('.'))
            old = bytes(b[30:34])
            b[30:34] = ip
            # the IPv4 checksum again (the UDP checksum covers the address too: recomputed)
            b[24:26] = b'\0\0'
            b[24:26] = struct.pack('>H', csum(bytes(b[14:34])))
            if old != ip:
                b[40:42] = b'\0\0'
                udp_len = struct.unpack('>H', b[38:40])[0]
                pseudo = bytes(b[26:34]) + struct.pack('>BBH', 0, 17, udp_len)
                s = csum(pseudo + bytes(b[34:34 + udp_len])) or 0xFFFF
                b[40:42] = struct.pack('>H', s)
            out.append(bytes(b))
        return out

    def flood(self, pcap: Path, seconds: float, pps: float, rotate: bool, cpu: str | None = None) -> subprocess.Popen:
        cmd = ['ip', 'netns', 'exec', self.atk] + (['taskset', '-c', cpu] if cpu else []) + [
            str(self.flood_bin), '--iface', 'eth0', '--pcap', str(pcap), '--seconds', str(seconds), '--json']
        if pps:
            cmd += ['--pps', str(int(pps))]
        if rotate:
            cmd.append('--rotate-ports')
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def reflection(self) -> list[dict]:
        rows = []
        for name, (frames, rotate) in self.kinds().items():
            pcap = self.tb.dir / f'{name}.pcap'
            write_pcap(pcap, frames)
            for rate in self.a.rates:
                time.sleep(0.3)   # the per-source pacing (100 ms) forgets the row before
                before = link_stats(self.atk, 'eth0')
                p = self.flood(pcap, self.a.seconds, rate, rotate)
                out, err = p.communicate(timeout=self.a.seconds + 60)
                time.sleep(0.2)   # the last answers
                after = link_stats(self.atk, 'eth0')
                if p.returncode != 0:
                    raise RuntimeError(f'prism-flood: {err}')
                sent = json.loads(out)
                gave, got = after['tx_bytes'] - before['tx_bytes'], after['rx_bytes'] - before['rx_bytes']
                row = {'kind': name, 'rate': rate, 'frames': sent['frames'], 'pps': sent['pps'], 'bytes_sent': gave,
                       'bytes_back': got, 'frames_back': after['rx_packets'] - before['rx_packets'],
                       'ratio': got / gave if gave else None}
                log(f'{name} at {"flat out" if not rate else int(rate)}: {sent["pps"]:.0f} frames/s, '
                    f'{got} bytes back for {gave} sent ({row["ratio"]:.3f})')
                rows.append(row)
        return rows

    def allreduce(self) -> dict:
        rank = self.build / 'app' / 'prism-rank'
        runs = self.tb.run(['taskset', '-c', '1', str(rank), '--config', '{config}', '--rank', '{rank}', '--size',
                            str(self.a.nbytes), '--repeat', str(self.a.repeat), '--warmup', '1', '--check', '--json'],
                           timeout=300)
        bad = [r for r in runs if r.rc != 0]
        if bad:
            raise RuntimeError('\n'.join(f'rank {r.rank}: exit {r.rc}\n{r.stdout}{r.stderr}' for r in bad))
        lines = [json.loads(r.stdout.strip().splitlines()[-1]) for r in runs]
        med = max(ln['seconds_median'] for ln in lines)
        return {'median_s': med, 'gbit_s': self.a.nbytes * 8 / med / 1e9, 'lines': lines}

    def bandwidth(self, kind: str = 'mix', pps: float = 0) -> dict:
        flood = self.tenant_flood(kind)
        at_switch, at_sink = self.tb.dir / f'flood_{kind}.pcap', self.tb.dir / f'flood_{kind}_sink.pcap'
        write_pcap(at_switch, flood)
        write_pcap(at_sink, self.to_sink(flood))
        res = {'flood': kind, 'pps': pps, 'quiet': self.allreduce()}
        for name, pcap in (('flood_to_switch', at_switch), ('flood_to_sink', at_sink)):
            before = link_stats(self.atk, 'eth0')
            t0 = time.monotonic()
            p = self.flood(pcap, 600, pps, False, cpu='1')
            time.sleep(0.5)
            try:
                res[name] = self.allreduce()
            finally:
                p.terminate()   # (ip netns exec and taskset exec it: p is prism-flood itself)
                p.communicate(timeout=30)
            after = link_stats(self.atk, 'eth0')
            res[name]['flood_frames'] = after['tx_packets'] - before['tx_packets']
            res[name]['flood_pps'] = res[name]['flood_frames'] / (time.monotonic() - t0)
            res[name]['flood_bytes'] = after['tx_bytes'] - before['tx_bytes']
            res[name]['bytes_back'] = after['rx_bytes'] - before['rx_bytes']
        res['cost'] = 1 - res['flood_to_switch']['gbit_s'] / res['flood_to_sink']['gbit_s']
        return res


def tables(refl: list[dict], bws: list[dict], md: bool) -> str:
    def rate(r):
        return 'flat out' if not r else f'{int(r)}/s'
    lines = []
    if refl and md:
        lines += ['| flood | asked | frames/s | bytes sent | bytes back | back / sent |', '|---|---|---:|---:|---:|---:|']
        for r in refl:
            lines.append(f'| {r["kind"]} | {rate(r["rate"])} | {r["pps"]:.0f} | {r["bytes_sent"]} | {r["bytes_back"]} '
                         f'| {r["ratio"]:.3f} |')
    elif refl:
        lines.append(f'{"flood":<18} {"asked":>9} {"frames/s":>9} {"bytes sent":>12} {"bytes back":>12} {"back/sent":>9}')
        for r in refl:
            lines.append(f'{r["kind"]:<18} {rate(r["rate"]):>9} {r["pps"]:>9.0f} {r["bytes_sent"]:>12} '
                         f'{r["bytes_back"]:>12} {r["ratio"]:>9.3f}')
    if md:
        lines += ['', '| tenant flood | asked | frames/s | allreduce quiet | flood to the switch | flood to the sink '
                  '| cost |', '|---|---|---:|---:|---:|---:|---:|']
    else:
        lines += ['', f'{"tenant flood":<12} {"asked":>9} {"frames/s":>9} {"quiet Gbit/s":>12} {"to switch":>10} '
                  f'{"to sink":>10} {"cost":>6}']
    for bw in bws:
        q, w, k = bw['quiet'], bw['flood_to_switch'], bw['flood_to_sink']
        fps = f'{w["flood_pps"]:.0f}/{k["flood_pps"]:.0f}'
        if md:
            lines.append(f'| {bw["flood"]} | {rate(bw["pps"])} | {fps} | {q["gbit_s"]:.3f} | {w["gbit_s"]:.3f} | '
                         f'{k["gbit_s"]:.3f} | {100 * bw["cost"]:.1f}% |')
        else:
            lines.append(f'{bw["flood"]:<12} {rate(bw["pps"]):>9} {fps:>9} {q["gbit_s"]:>12.3f} {w["gbit_s"]:>10.3f} '
                         f'{k["gbit_s"]:>10.3f} {100 * bw["cost"]:>5.1f}%')
    lines.append('frames/s: the flood as sent, to the switch / to the sink; cost: 1 - bandwidth with the flood at '
                 'the switch / bandwidth with the same flood at the sink')
    return '\n'.join(lines)


def main(argv) -> int:
    a = parse_args(argv)
    settings = {'pools': f'[{{jobs: {{first: {POOL}, count: {POOL_IDS}}}, max_group: 4, ranges: [10.88.0.128/25], '
                         'idle_timeout_ms: 600000}]', 'retention_ms': '600000'}
    tb = tbm.Testbed(ranks=2, layout='bridge', settings=settings, build=a.build, tb_id=a.id)
    try:
        tb.up()
        b = Bench(a, tb)
        refl = [] if a.no_reflection else b.reflection()
        bws = [b.bandwidth(k, r) for r in a.flood_pps for k in a.floods.split(',')]
    except tbm.TestbedError as e:
        log(str(e))
        return 2
    except RuntimeError as e:
        log(str(e))
        return 1
    finally:
        tb.down()
    print(tables(refl, bws, a.markdown))
    if a.json:
        Path(a.json).write_text(json.dumps({'machine': bench_util.machine_info(), 'reflection': refl,
                                            'bandwidth': bws}, indent=1) + '\n')
    worst = max([r['ratio'] for r in refl if r['ratio'] is not None] + [0])
    return 0 if worst <= 1 else 1


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
