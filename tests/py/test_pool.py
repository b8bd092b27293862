"""Job pools (docs/PROTOCOL.md, "Job pools") against the real prism-switch in
the network-namespace testbed (scripts/testbed.py), with the independent
client (minimal_client.py --pool, written from PROTOCOL.md alone): rank 0 of a
job ALLOCs an id from the pool and shares it through a file, every rank JOINs
(the switch binds it to the address its first JOIN came from), runs its
allreduces and LEAVEs.

- Two jobs of four ranks started at the same moment get two ids and the exact
  sums (the reference model's KULISCH_FIXED result, as test_client.py checks);
  a declared job in the same config is served as before.
- A rank outside the pool's ranges, a second JOIN for a bound rank from another
  address, a group above max_group and a full pool are refused with their
  reasons (the client's NACK, the switch's counters in /prism/pools and its
  summary), and never reach an accumulator.
- A job whose ranks end without LEAVE is reclaimed after idle_timeout_ms, and
  its id serves the next job, whose ops start past the old ones.
One switch process for each test, never restarted. Needs root; skips without it.
"""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

import switch_util as su
from test_client import expected, stop
from testbed import PY, make_testbed  # noqa: F401

CLIENT = str(Path(__file__).resolve().parent / 'minimal_client.py')
N = 3000          # fp32 elements: 11 chunks an op at MTU 1500
SEED = 41


def pool_yaml(first: int, count: int, max_group: int, ranges: str, idle_ms: int = 30000) -> str:
    return (f'[{{jobs: {{first: {first}, count: {count}}}, max_group: {max_group}, ranges: [{ranges}], '
            f'slot_quota: 64, idle_timeout_ms: {idle_ms}}}]')


# 50 ALLOCs (PROTOCOL.md's layout, pool 1000, group 2) from one socket, then the NACKs that came back in 0.2 s.
BURST = """
import socket, struct, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], 20609))
s.connect((sys.argv[2], 20562))
for n in range(50):
    s.send(struct.pack('>HBBIIIHHHHBBBBBBBB', 0x5052, 1, 7, 1000, n + 1, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))
s.settimeout(0.2)
got = 0
try:
    while True:
        if s.recv(100)[3] == 4:
            got += 1
except socket.timeout:
    pass
print(got)
"""


def pool_cmd(tb, pool: int, group: int, port: int, share: str, *extra) -> list[str]:
    return [PY, CLIENT, '--config', '{config}', '--pool', str(pool), '--group', str(group), '--rank', '{rank}',
            '--ip', '{ip}', '--udp-port', str(port), '--switch-ip', '{switch_ip}', '--pool-share', share,
            '--elements', str(N), '--seed', str(SEED), '--deadline', '30', '--join-timeout', '30', *map(str, extra)]


def lines_of(runs, ok=True) -> list[dict]:
    if ok:
        bad = [r for r in runs if r.rc != 0]
        assert not bad, '\n'.join(f'rank {r.rank}: exit {r.rc}\n{r.stdout}{r.stderr}' for r in bad)
    return [json.loads(r.stdout.strip().splitlines()[-1]) for r in runs]


def pools(tb) -> dict:
    return tb.telemetry('switch', ['/prism/pools'])['/prism/pools']


def switch_pid(tb) -> int:
    return tb.switches[0].pid


LAYOUTS = {  # one lcore; two lcores sharing nothing (ALLOC on shard 0, job 1001's JOINs on shard 1); pipelined
    'one-lcore': ({}, None),
    'shared-nothing': ({'reducers': '{shards: 2}'}, '0,1'),
    'pipelined': ({'reducers': '{shards: 2}', 'layout': 'pipelined'}, '0,1'),
}


@pytest.mark.parametrize('layout', list(LAYOUTS))
def test_two_jobs_at_once_get_two_ids_and_exact_sums(make_testbed, layout):
    settings, lcores = LAYOUTS[layout]
    tb = make_testbed(ranks=4, lcores=lcores, settings={'pools': pool_yaml(1000, 4, 4, '10.88.0.0/16'), **settings})
    pid = switch_pid(tb)
    got = {}

    def job(label: str, port: int):
        # --linger: each job keeps its id a while before LEAVE, so the two are live at once however the
        # machine schedules them (a job done before the other's ALLOC would hand its id on, rightly)
        got[label] = tb.run(pool_cmd(tb, 1000, 4, port, str(tb.dir / f'share-{label}'), '--ops', 2, '--linger', 3),
                            timeout=90, label=label)

    threads = [threading.Thread(target=job, args=(label, port)) for label, port in (('a', 20601), ('b', 20602))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    a, b = lines_of(got['a']), lines_of(got['b'])
    ids = {ln['job'] for ln in a}, {ln['job'] for ln in b}
    assert len(ids[0]) == 1 and len(ids[1]) == 1 and ids[0] != ids[1], ids
    assert ids[0] | ids[1] <= set(range(1000, 1004)), ids
    for k in range(2):
        want = expected(N, 'fp32', 'fp32', 4, SEED + k)
        for ln in a + b:
            assert ln['digests'][k] == want, (ln['job'], ln['rank'], k)
    for ln in a + b:
        assert ln['joined_ranks'] == [0, 1, 2, 3] and ln['left_terms'] <= 3, ln
    assert sorted(ln['left_terms'] for ln in a) == [0, 1, 2, 3]
    # Both released: every id free again.
    tel = pools(tb)
    assert tel['pool1000']['free'] == 4 and tel['pool1000']['allocated'] == 2 and tel['pool1000']['released'] == 2, tel
    # The declared job 7 (every rank a member, UDP port 20562) beside them, as before.
    runs = tb.run([PY, CLIENT, '--config', '{config}', '--rank', '{rank}', '--elements', str(N), '--op', '5',
                   '--seed', str(SEED)], timeout=60)
    assert {ln['digest'] for ln in lines_of(runs)} == {expected(N, 'fp32', 'fp32', 4, SEED)}
    assert switch_pid(tb) == pid
    s = stop(tb)['switch']
    assert s.pools[1000]['allocated'] == 2 and s.pools[1000]['released'] == 2 and s.pools[1000]['free'] == 4, s.pools
    assert s.jobs[7]['completed'] == a[0]['chunks'] and s.nacks == 0
    assert not s.pooled_jobs and not s.incomplete
    assert s.shard_total('elements') == 4 * N * (2 * 2 + 1)   # two pooled jobs of two ops, one declared op


def test_refusals_name_their_reason(make_testbed):
    """Pool 1000 of two ids, max_group 4, for 10.88.0.0/22 (ranks 0-3; rank 4 is 10.88.4.1)."""
    tb = make_testbed(ranks=5, settings={'pools': pool_yaml(1000, 2, 4, '10.88.0.0/22'), 'op_timeout_ms': '20000'})
    pid = switch_pid(tb)
    share = str(tb.dir / 'share-a')
    # Job A: ranks 0 and 1, lingering 4 s before LEAVE, held by its ranks meanwhile.
    held = {}
    t = threading.Thread(target=lambda: held.update(
        runs=tb.run(pool_cmd(tb, 1000, 2, 20601, share, '--linger', 4), ranks=[0, 1], timeout=60, label='a')))
    t.start()
    assert su.wait_for(lambda: any(v.get('state') == 'live' for k, v in pools(tb).items() if k.startswith('job')),
                       20), pools(tb)
    job_a = json.loads(Path(share).read_text())['job']
    tel = pools(tb)[f'job{job_a}']
    one = tb.telemetry('switch', [f'/prism/pools,{job_a}'])[f'/prism/pools']
    same = lambda t: {k: v for k, v in t.items() if k != 'idle_ms'}   # noqa: E731 (the clock moves)
    assert same(one[f'job{job_a}']) == same(tel) and 'pool1000' in one and len(one) == 2, one
    assert tel['group'] == 2 and tel['bound'] == 2 and tel['rank1'].endswith(':20601 port 1'), tel
    # A second process claims rank 1 of job A from rank 2's address: RANK_TAKEN.
    spoof_cmd = [PY, CLIENT, '--config', '{config}', '--pool', '1000', '--group', '2', '--rank', '1',
                 '--pool-job', str(job_a), '--ip', '{ip}', '--udp-port', '20601', '--switch-ip', '{switch_ip}',
                 '--elements', str(N), '--join-timeout', '5']
    spoof = lines_of(tb.run(spoof_cmd, ranks=[2], timeout=30, label='spoof'), ok=False)[0]
    assert spoof.get('nack') == 'RANK_TAKEN' or 'RANK_TAKEN' in spoof.get('error', ''), spoof
    # Rank 4, outside the ranges: OUT_OF_POOL.
    out = lines_of(tb.run(pool_cmd(tb, 1000, 2, 20601, str(tb.dir / 'share-x'), '--alloc-only', '--rank', 0), ranks=[4],
                          timeout=30, label='outside'), ok=False)[0]
    assert 'NACK OUT_OF_POOL' in out['error'], out
    # The same outsider sends 50 ALLOCs in a burst: answered at most once per 100 ms, the rest counted.
    # The limit is per source IP (whatever its ports), and it was just answered: 100 ms pass first.
    time.sleep(0.15)
    limited0 = pools(tb)['pool1000']['nacks_limited']
    burst = tb.run([PY, '-c', BURST, '{ip}', '{switch_ip}'], ranks=[4], timeout=30, label='burst')[0]
    assert burst.rc == 0, burst.stderr
    answered = int(burst.stdout.split()[0])
    assert 1 <= answered <= 3, burst.stdout
    assert pools(tb)['pool1000']['nacks_limited'] - limited0 >= 50 - answered, pools(tb)['pool1000']
    # A group of 5 (max_group 4): GROUP_TOO_LARGE.
    big = lines_of(tb.run(pool_cmd(tb, 1000, 5, 20603, str(tb.dir / 'share-big'), '--alloc-only'), ranks=[0],
                          timeout=30, label='big'), ok=False)[0]
    assert 'NACK GROUP_TOO_LARGE' in big['error'], big
    # The second id taken (an ALLOC whose job never joins), then a third ALLOC: POOL_FULL.
    second = lines_of(tb.run(pool_cmd(tb, 1000, 2, 20604, str(tb.dir / 'share-b'), '--alloc-only'), ranks=[0],
                             timeout=30, label='second'))[0]
    assert second['job'] != job_a and 1000 <= second['job'] <= 1001, second
    full = lines_of(tb.run(pool_cmd(tb, 1000, 2, 20605, str(tb.dir / 'share-c'), '--alloc-only', '--rank', 0), ranks=[3],
                           timeout=30, label='full'), ok=False)[0]
    assert 'NACK POOL_FULL' in full['error'], full
    t.join()
    a = lines_of(held['runs'])
    assert {ln['job'] for ln in a} == {job_a}
    assert {ln['digest'] for ln in a} == {expected(N, 'fp32', 'fp32', 2, SEED)}   # the spoof reached no sum
    assert switch_pid(tb) == pid
    s = stop(tb)['switch']
    p = s.pools[1000]
    assert p['refused_rank_taken'] >= 1 and p['refused_out_of_pool'] >= 1, p
    assert p['refused_group_too_large'] >= 1 and p['refused_pool_full'] >= 1, p
    assert s.dropped('rank_taken') >= 1 and s.dropped('out_of_pool') >= 1 and s.dropped('pool_full') >= 1
    assert s.dropped('group_too_large') >= 1
    assert s.shard_total('elements') == 2 * N, 'only job A\'s two ranks were summed'
    assert s.pooled_jobs[second['job']]['state'] == 'allocated', s.pooled_jobs


def test_a_job_that_dies_is_reclaimed_and_its_id_reused(make_testbed):
    tb = make_testbed(ranks=2, settings={'pools': pool_yaml(1000, 1, 2, '10.88.0.0/16', idle_ms=1500)})
    pid = switch_pid(tb)
    first = lines_of(tb.run(pool_cmd(tb, 1000, 2, 20601, str(tb.dir / 'share-1'), '--ops', 3, '--no-leave'),
                            timeout=60, label='first'))
    assert {ln['job'] for ln in first} == {1000} and 'left_terms' not in first[0]
    assert pools(tb)['job1000']['state'] == 'live'
    assert su.wait_for(lambda: pools(tb)['pool1000']['reclaimed'] == 1, 10), pools(tb)
    tel = pools(tb)
    assert tel['pool1000']['free'] == 1 and 'job1000' not in tel, tel
    again = lines_of(tb.run(pool_cmd(tb, 1000, 2, 20602, str(tb.dir / 'share-2')), timeout=60, label='again'))
    assert {ln['job'] for ln in again} == {1000}
    # PROTOCOL.md, Sessions: a session's first op is base + r, r random in [0, 2^24), base one past the
    # highest op the switch opened for the job (none before the first run: 0; the first run's 3 ops after).
    f = first[0]['first_op']
    assert {ln['first_op'] for ln in first} == {f} and f < 2 ** 24, first
    firsts = {ln['first_op'] for ln in again}
    assert len(firsts) == 1 and 0 <= firsts.pop() - (f + 3) < 2 ** 24, (f, again)
    assert {ln['digest'] for ln in again} == {expected(N, 'fp32', 'fp32', 2, SEED)}
    assert switch_pid(tb) == pid
    s = stop(tb)['switch']
    assert s.pools[1000]['reclaimed'] == 1 and s.pools[1000]['released'] == 1 and s.pools[1000]['allocated'] == 2
    assert s.shard_total('elements') == 2 * N * 4 and not s.incomplete
