"""Hostile traffic at rate through the switch's real RX path, mixed with an honest job
(docs/SECURITY.md; issue 38).

The network-namespace testbed (one bridge, the switch's net_af_xdp or net_af_packet port on
it) runs job 7's three ranks, each the independent minimal client (minimal_client.py) doing
allreduces whose exact results the reference model computes here. Beside them, on the same
bridge, an attacker's namespace is a pool tenant (it took a pooled job and completed a few ops)
and a host on the members' segment. While the honest ranks run, prism-flood
(tools/prism_flood.cpp) sends from it, at a fixed rate, a mix built here: malformed frames,
frames for another port or station, spoofed CONTRIBs claiming rank 0's address, injected
RESULTs and NACKs, CONTRIBs from an unregistered port, the tenant's own CONTRIBs with a
mismatched descriptor, and RETRANSMIT and QUERY floods for the tenant's completed ops; a
second prism-flood sends ALLOCs from addresses of the pool's range, rotating UDP ports.

It checks, from the switch's summary and the attacker's interface counters:
- every received frame is counted by exactly one counter: per port, received = handed to the
  reducers + answered (ARP, ping) + every named drop; the shards take what RX handed on, and
  each shard's packets = accepted + dropped, dropped the sum of its named reasons;
- each kind of hostile frame is counted under the reason PROTOCOL.md and SECURITY.md give it,
  exactly as many times as it was sent;
- the hostile frames are at least half of what the switch received;
- every honest result is bit for bit the exact sum;
- the attacker got back no more bytes than it sent.
Needs root; skips without it.
"""
from __future__ import annotations

import json
import struct
import subprocess
import threading
from pathlib import Path

import switch_util as su
from hostile_frames import add_host, frame, header, link_stats, query, sh, write_pcap
from minimal_client import ALLOC, CONTRIB, F_LAST_CHUNK, F_RETRANSMIT, HDR, MAGIC, NACK, RESULT, VERSION, read_switch, shard_port
from test_client import expected
from testbed import PY, make_testbed  # noqa: F401

CLIENT = str(Path(__file__).resolve().parent / 'minimal_client.py')
FLOOD = su.BUILD / 'tools' / 'prism-flood'
POOL, POOL_IDS = 1000, 4
ATK_IP, ATK_PORT, ATK_STRAY_PORT = '10.88.0.200', 30600, 40000
FOREIGN_MAC, FOREIGN_IP = '02:aa:bb:cc:dd:ee', '10.88.0.77'
R, SEED, ELEMENTS, OPS = 3, 41, 20000, 6
TENANT_ELEMENTS, TENANT_OPS = 200, 4   # one chunk per op
PPS, LOOPS = 8000, 3                   # the mix's rate, and how many times it is sent (4.5 s)
EACH = 1000                            # frames of each hostile kind in the mix file


# ------------------------------------------------------------------ the test
def test_a_hostile_mix_at_rate_is_counted_frame_by_frame_and_costs_the_honest_job_nothing(make_testbed, tmp_path):
    su.require_binaries(FLOOD)
    pools = (f'[{{jobs: {{first: {POOL}, count: {POOL_IDS}}}, max_group: 4, ranges: [10.88.0.128/25], '
             f'idle_timeout_ms: 60000}}]')
    tb = make_testbed(ranks=R, layout='bridge', settings={'pools': pools, 'retention_ms': '60000'})
    sw = tb.switches[0]
    port = sw.ports[0]
    sw_mac, sw_ip = port['mac'], port['ip']
    udp, shards = read_switch(str(sw.config))

    # The attacker: a namespace on the members' bridge, in the pool's range.
    atk, atk_mac = add_host(tb, 'atk', ATK_IP)

    # It becomes a pool tenant: a pooled job of one rank, a few ops completed, their RESULTs retained.
    share = tmp_path / 'tenant.json'
    t = sh(PY, CLIENT, '--config', sw.config, '--pool', POOL, '--group', 1, '--rank', 0, '--ip', ATK_IP,
           '--udp-port', ATK_PORT, '--switch-ip', sw_ip, '--pool-share', share, '--elements', TENANT_ELEMENTS,
           '--ops', TENANT_OPS, '--no-leave', '--deadline', 30, ns=atk)
    tenant = json.loads(t.stdout.strip().splitlines()[-1])
    job, first = tenant['job'], tenant['first_op']
    assert POOL <= job < POOL + POOL_IDS and tenant['results'] == TENANT_OPS, tenant

    def to_switch(payload: bytes, *, src_ip=ATK_IP, sport=ATK_STRAY_PORT, dport=None, h=None, **kw) -> bytes:
        if dport is None:
            dport = shard_port(udp, shards, h[0], h[1], 0) if h else udp
        return frame(atk_mac, sw_mac, src_ip, sw_ip, sport, dport, payload, **kw)

    rank0 = tb.ranks[0]
    el = struct.pack('<f', 1.0) * 8
    far = 0x7FFF0000                      # op numbers no honest rank reaches
    kinds: dict[str, list[bytes]] = {
        # not PRISM's, or not for this switch
        'bad_magic': [to_switch(b'XX' + header(CONTRIB, 7, far + i, 0, 1, R, 1, 8)[2:] + el) for i in range(EACH)],
        'wrong_port': [to_switch(header(CONTRIB, 7, far, 0, 1, R, 1, 8) + el, dport=9999) for _ in range(EACH)],
        'ip_bad_checksum': [to_switch(header(CONTRIB, 7, far + i, 0, 1, R, 1, 8) + el, h=(7, far + i),
                                      bad_ip_sum=True) for i in range(EACH)],
        'truncated': [to_switch(header(CONTRIB, 7, far + i, 0, 1, R, 1, 8) + el, h=(7, far + i), ip_total=1400)
                      for i in range(EACH)],
        'foreign': [frame(atk_mac, FOREIGN_MAC, ATK_IP, FOREIGN_IP, ATK_STRAY_PORT, udp,
                          header(CONTRIB, 7, far + i, 0, 1, R, 1, 8) + el) for i in range(EACH)],
        # spoofs and injections
        'spoofed': [to_switch(header(CONTRIB, 7, far + i, 0, 0, R, 1, 8, F_LAST_CHUNK) + el, h=(7, far + i),
                              src_ip=rank0.ip, sport=20562) for i in range(EACH)],
        'result': [to_switch(header(RESULT, 7, i, 0, 1, R, R, 8, F_LAST_CHUNK) + el, h=(7, i)) for i in range(EACH)],
        'nack': [to_switch(header(NACK, 7, i, 0, 1, R, 0, 0, status=6)) for i in range(EACH)],
        'stray_port': [to_switch(header(CONTRIB, 7, far + i, 0, 1, R, 1, 8, F_LAST_CHUNK) + el, h=(7, far + i))
                       for i in range(EACH)],
        # the tenant: mismatched descriptors, RETRANSMIT and QUERY floods for its completed ops
        'mismatch': [to_switch(header(CONTRIB, job, first + 1000 + i, 0, 0, 2, 1, 8, F_LAST_CHUNK) + el,
                               h=(job, first + 1000 + i), sport=ATK_PORT) for i in range(EACH)],
        'retransmit': [to_switch(header(CONTRIB, job, first + i % TENANT_OPS, 0, 0, 1, 1, TENANT_ELEMENTS,
                                        F_LAST_CHUNK | F_RETRANSMIT) + struct.pack('<f', 0.0) * TENANT_ELEMENTS,
                                 h=(job, first + i % TENANT_OPS), sport=ATK_PORT) for i in range(EACH)],
        'query': [to_switch(query(job, first + i % TENANT_OPS, 0, 1), h=(job, first + i % TENANT_OPS), sport=ATK_PORT)
                  for i in range(EACH)],
    }
    mix = [f for i in range(EACH) for k in kinds.values() for f in [k[i]]]   # interleaved
    mix_pcap = tmp_path / 'mix.pcap'
    write_pcap(mix_pcap, mix)
    # ALLOCs from 100 addresses of the pool's range (8 zero bytes of padding, as PROTOCOL.md asks)
    allocs = [to_switch(HDR.pack(MAGIC, VERSION, ALLOC, POOL, 1 + i, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0) + bytes(8),
                        src_ip=f'10.88.0.{130 + i % 100}', h=(POOL, 0)) for i in range(EACH)]
    alloc_pcap = tmp_path / 'alloc.pcap'
    write_pcap(alloc_pcap, allocs)
    n_mix = len(mix)

    # The honest job and the floods at once.
    honest: dict = {}

    def run_honest():
        honest['runs'] = tb.run([PY, CLIENT, '--config', '{config}', '--rank', '{rank}', '--join', '--ops', str(OPS),
                                 '--elements', str(ELEMENTS), '--seed', str(SEED), '--deadline', '60'], timeout=120)

    before = link_stats(atk, 'eth0')
    th = threading.Thread(target=run_honest)
    th.start()
    alloc_flood = subprocess.Popen(['ip', 'netns', 'exec', atk, str(FLOOD), '--iface', 'eth0', '--pcap',
                                    str(alloc_pcap), '--frames', str(EACH), '--pps', '2000', '--rotate-ports',
                                    '--json'], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    flood = sh(FLOOD, '--iface', 'eth0', '--pcap', mix_pcap, '--frames', LOOPS * n_mix, '--pps', PPS, '--json', ns=atk)
    a_out, a_err = alloc_flood.communicate(timeout=60)
    assert alloc_flood.returncode == 0, a_err
    th.join(timeout=180)
    sent = json.loads(flood.stdout)
    sent_allocs = json.loads(a_out)
    assert sent['frames'] == LOOPS * n_mix and sent_allocs['frames'] == EACH, (sent, sent_allocs)
    after = link_stats(atk, 'eth0')

    # Every honest result exact.
    runs = honest['runs']
    bad = [r for r in runs if r.rc != 0]
    assert not bad, '\n'.join(f'rank {r.rank}: exit {r.rc}\n{r.stdout}{r.stderr}' for r in bad)
    want = [expected(ELEMENTS, 'fp32', 'fp32', R, SEED + k) for k in range(OPS)]
    for r in runs:
        line = json.loads(r.stdout.strip().splitlines()[-1])
        assert line['digests'] == want, f'rank {r.rank}: a result is not the exact sum'

    exits = tb.stop_switches()
    e = exits['switch']
    assert e.rc == 0, e.stderr[-3000:]
    s = su.parse_summary(e.stdout)
    rx = s.rx[0]
    assert rx['ring_drops'] == 0, f'the port dropped frames before the switch saw them: {rx}\n{e.stdout}'

    # Every received frame counted once, at RX and then at the shards.
    dropped_rx = sum(s.rx_dropped.values())
    assert rx['packets'] == rx['to_reducers'] + rx['arp_replies'] + rx['echo_replies'] + dropped_rx, e.stdout
    assert sum(sh_['packets'] for sh_ in s.shards.values()) == rx['to_reducers'], e.stdout
    for k, sh_ in s.shards.items():
        assert sh_['packets'] == sh_['accepted'] + sh_['dropped'], (k, sh_)
    assert sum(sh_['dropped'] for sh_ in s.shards.values()) == sum(s.shard_dropped.values()), e.stdout

    # Each hostile kind under its reason, as often as it was sent.
    n = LOOPS * EACH   # frames of each kind of the mix
    assert s.refused['bad_magic'] == n and s.refused['wrong_port'] == n, s.refused
    assert s.refused['ip_bad_checksum'] == n, s.refused
    assert s.refused['ip_bad_length'] == n and s.rx_dropped['oversize'] == n, (s.refused, s.rx_dropped)
    # not for this switch: another port, another station, and what else was not IPv4/UDP (unanswered ARP)
    others = s.refused['not_ipv4'] + s.refused['not_udp'] + s.refused['short_frame']
    assert s.rx_dropped['not_for_us'] == 2 * n + others, (s.rx_dropped, s.refused)
    assert s.rx_dropped['malformed'] == 2 * n, s.rx_dropped   # bad magic, bad IP checksum
    assert s.rx_dropped['spoofed'] == n, s.rx_dropped
    assert s.rx_dropped['unknown_source'] == 2 * n, s.rx_dropped   # RESULTs, a stray port's CONTRIBs
    assert s.rx_dropped['wrong_kind'] == n, s.rx_dropped
    assert s.shard_dropped['descriptor_mismatch'] == n, s.shard_dropped
    # The tenant's floods: answered within its resend budget, the rest over_budget.
    # A RETRANSMIT carries a whole chunk and earns about what its RESULT costs; a 74-byte QUERY
    # earns a sixteenth of it: most QUERYs must find the budget spent.
    resent = sum(sh_['resent'] for sh_ in s.shards.values())
    assert resent + s.shard_dropped['over_budget'] >= 2 * n, (resent, s.shard_dropped)
    assert s.shard_dropped['over_budget'] >= n // 2, s.shard_dropped
    # ALLOCs: every one answered within the per-source limits, or dropped under a named reason.
    alloc_outcomes = (s.shard_dropped['rate_limited'] + s.shard_dropped['pool_full'] +
                      sum(sh_['pool_replies'] for sh_ in s.shards.values()))
    assert alloc_outcomes >= EACH, (s.shard_dropped, s.shards)

    # At least half of what the switch received was hostile.
    hostile = LOOPS * n_mix + EACH
    assert hostile >= rx['packets'] / 2, (hostile, rx['packets'])
    # The attacker got back no more bytes than it sent (its interface counts everything).
    got, gave = after['rx_bytes'] - before['rx_bytes'], after['tx_bytes'] - before['tx_bytes']
    assert got <= gave, f'the attacker got {got} bytes back for {gave} sent'
    print(json.dumps({'received': rx['packets'], 'hostile_sent': hostile, 'mix_pps': sent['pps'],
                      'attacker_bytes_sent': gave, 'attacker_bytes_back': got, 'ratio_back': round(got / gave, 3),
                      'resent': resent, 'over_budget': s.shard_dropped['over_budget'],
                      'honest_elements_reduced': sum(sh_['elements'] for sh_ in s.shards.values())}))
