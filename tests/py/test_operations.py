"""A switch that stays up (issue 39; docs/PROTOCOL.md, "Stalls, restarts and
stops"): prism-rank processes in their own network namespaces (scripts/testbed.py)
run checked allreduces, each result compared by the rank with its own reference
model of the whole job (--check), while the switch is frozen (SIGSTOP) and
continued, killed and started again, or stopped.

Needs root; skips without it.
"""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest

import switch_util as su
from test_pool import pool_yaml
from testbed import make_testbed, skip_unless_possible  # noqa: F401

RANK = su.BUILD / 'app' / 'prism-rank'
PORT = 20562  # the testbed switch's udp_port


def run_async(tb, command, ranks=None, timeout=120, label=None):
    """tb.run in a thread: (thread, box) where box[0] gets the runs."""
    box = []
    t = threading.Thread(target=lambda: box.append(tb.run(command, timeout=timeout, ranks=ranks, label=label)))
    t.start()
    return t, box


def checked(repeat: int, size: str = '1MiB', *extra) -> list[str]:
    return [str(RANK), '--config', '{config}', '--rank', '{rank}', '--size', size, '--repeat', str(repeat),
            '--check', '--timeout-ms', '10000', *map(str, extra)]


def completed(tb, sw='switch', job=7) -> int:
    jobs = tb.telemetry(sw, ['/prism/jobs']).get('/prism/jobs') or {}
    return jobs.get(f'job{job}_chunks_completed', 0)


def assert_exact(runs, repeat: int):
    bad = [r for r in runs if r.timed_out or r.rc != 0]
    assert not bad, '\n'.join(f'rank {r.rank}: exit {r.rc} after {r.seconds:.1f} s\n{r.stdout}{r.stderr[-2000:]}'
                               for r in bad)
    for r in runs:
        assert f'identical to the reference model ({repeat} collectives)' in r.stdout, r.stdout


def pooled(repeat: int, size: str = '1MiB') -> list[str]:
    """A group of every testbed rank that takes a job from pool 1000 (rendezvous through a file)."""
    return [str(RANK), '--store', 'file://{dir}/store', '--ranks', '{ranks}', '--rank', '{rank}', '--switch',
            f'{{switch_ip}}:{PORT}', '--pool', '1000', '--algo', 'switch', '--size', size, '--repeat', str(repeat),
            '--check', '--timeout-ms', '10000']


def pooled_completed(tb) -> int:
    jobs = tb.telemetry('switch', ['/prism/jobs']).get('/prism/jobs') or {}
    return sum(v for k, v in jobs.items() if k.startswith('job1') and k.endswith('_chunks_completed'))


def freeze(tb, name: str, seconds: float):
    """SIGSTOP the switch `name` for `seconds`, then SIGCONT."""
    sw = next(s for s in tb.switches if s.name == name)
    os.kill(sw.pid, signal.SIGSTOP)
    try:
        time.sleep(seconds)
    finally:
        os.kill(sw.pid, signal.SIGCONT)


@pytest.mark.parametrize('seconds', [1, 3, 8])
def test_a_switch_frozen_mid_job_loses_no_op(make_testbed, seconds):
    """The switch is frozen (SIGSTOP) for 1, 3 or 8 s while 4 ranks run checked 1 MiB allreduces
    (op_timeout_ms 3000, the ranks' own timeout 10 s): the time it did not run does not count
    against an op, so every rank finishes and every result is exact."""
    su.require_binaries(RANK)
    tb = make_testbed(ranks=4)
    repeat = 300
    ranks, box = run_async(tb, checked(repeat), timeout=240)
    assert su.wait_for(lambda: completed(tb) > 2000, 60), 'the job did not get under way'
    assert ranks.is_alive(), 'the ranks finished before the switch was frozen: make the run longer'
    freeze(tb, 'switch', seconds)
    ranks.join()
    assert_exact(box[0], repeat)
    exit = tb.stop_switches()['switch']
    s = su.parse_summary(exit.stdout)
    assert s.jobs[7]['timed_out'] == 0 and s.jobs[7]['in_flight'] == 0, s.jobs
    # The switch saw the stall and says so: the summary, and a warning when it woke.
    stalls, left_out, longest = s.stalls[0]
    assert stalls >= 1 and seconds - 0.2 <= longest <= left_out < seconds + 2, s.stalls
    assert 'did not run for' in exit.stderr, exit.stderr[-2000:]


@pytest.mark.parametrize('which', ['leaf', 'root'])
def test_a_frozen_leaf_or_root_loses_no_op(make_testbed, which):
    """Two ranks behind a leaf, two behind the root: the leaf, or the root, frozen for 8 s while
    they run checked allreduces. The running switch leaves the ops that wait only on the frozen
    one to it (peer_timeout_ms, 15 s, not op_timeout_ms, 3 s): every rank finishes exact."""
    su.require_binaries(RANK)
    tb = make_testbed(ranks=4, layout='tree')
    repeat = 200
    ranks, box = run_async(tb, checked(repeat), timeout=240)
    assert su.wait_for(lambda: completed(tb, 'root') > 2000, 60), 'the job did not get under way'
    assert ranks.is_alive(), 'the ranks finished before the switch was frozen: make the run longer'
    freeze(tb, which, 8)
    ranks.join()
    assert_exact(box[0], repeat)
    exits = tb.stop_switches()
    for name, e in exits.items():
        s = su.parse_summary(e.stdout)
        assert s.jobs[7]['timed_out'] == 0 and s.jobs[7]['in_flight'] == 0, (name, s.jobs)
    assert su.parse_summary(exits[which].stdout).stalls[0][0] >= 1


@pytest.mark.parametrize('where', ['leaf', 'root'])
def test_a_rank_killed_in_a_tree_fails_every_other_rank_at_once_naming_it(make_testbed, where):
    """A rank behind the leaf, or behind the root, is killed mid-job: the switch it belongs to
    gives the op up after op_timeout_ms (3 s) and tells the other switch, which gives it up too
    (PROTOCOL.md, "The switch stalls"): every other rank, behind either switch, fails with
    OP_ABANDONED naming the dead rank, well before its own 10 s timeout."""
    su.require_binaries(RANK)
    tb = make_testbed(ranks=4, layout='tree')
    victim = next(r.rank for r in tb.ranks if r.switch == where)
    others = [r.rank for r in tb.ranks if r.rank != victim]
    cmd = checked(100000)
    survivors, box = run_async(tb, cmd, others, timeout=60)
    killed = tb.run(cmd, ranks=[victim], timeout=2.5)  # SIGTERM at 2.5 s, mid-op
    survivors.join()
    assert killed[0].timed_out, killed[0].stdout + killed[0].stderr
    for r in box[0]:
        assert not r.timed_out and r.rc == 1, f'rank {r.rank}: exit {r.rc}\n{r.stdout}{r.stderr}'
        assert 'the switch abandoned the op' in r.stderr and f'missing rank {victim}' in r.stderr, r.stderr
        assert r.seconds < 2.5 + 3 + 4, r.seconds  # op_timeout_ms, not the ranks' own 10 s
    exits = tb.stop_switches()
    for name, e in exits.items():
        s = su.parse_summary(e.stdout)
        assert s.jobs[7]['in_flight'] == 0 and s.jobs[7]['timed_out'] > 0, (name, s.jobs)


def test_a_switch_frozen_under_a_pooled_job_loses_no_op(make_testbed):
    """A group takes a job from a pool and runs checked allreduces; the switch frozen 3 s (its
    pool's idle reclaim and the op's timeout both stand still): every rank finishes exact, and
    the pooled job is released as usual at the end."""
    su.require_binaries(RANK)
    tb = make_testbed(ranks=4, layout='bridge', settings={'pools': pool_yaml(1000, 2, 4, '10.88.0.0/24', 2000)})
    repeat = 200
    ranks, box = run_async(tb, pooled(repeat), timeout=240)
    assert su.wait_for(lambda: pooled_completed(tb) > 2000, 60), 'the pooled job did not get under way'
    assert ranks.is_alive(), 'the ranks finished before the switch was frozen: make the run longer'
    freeze(tb, 'switch', 3)
    ranks.join()
    assert_exact(box[0], repeat)
    s = su.parse_summary(tb.stop_switches()['switch'].stdout)
    assert s.pools[1000]['reclaimed'] == 0 and s.pools[1000]['free'] == 2, s.pools
    assert s.stalls[0][0] >= 1


def test_the_ranks_own_timeout_fires_when_the_switch_is_gone_for_good(make_testbed):
    """The switch frozen and never continued: the ranks do not wait for ever: each fails after
    its own timeout (--timeout-ms 4000) with an error that says no result came."""
    su.require_binaries(RANK)
    tb = make_testbed(ranks=4)
    cmd = checked(100000)
    cmd[cmd.index('--timeout-ms') + 1] = '4000'
    ranks, box = run_async(tb, cmd, timeout=60)
    assert su.wait_for(lambda: completed(tb) > 2000, 60), 'the job did not get under way'
    sw = tb.switches[0]
    os.kill(sw.pid, signal.SIGSTOP)
    t0 = time.monotonic()
    try:
        ranks.join()
    finally:
        os.kill(sw.pid, signal.SIGCONT)
    assert time.monotonic() - t0 < 4 + 6, 'the ranks waited far past their timeout'
    for r in box[0]:
        assert not r.timed_out and r.rc == 1, f'rank {r.rank}: exit {r.rc}\n{r.stdout}{r.stderr}'
        assert 'no RESULT for' in r.stderr, r.stderr


# ------------------------------------------------------------------ restarts (PROTOCOL.md, "Failures and what follows")
def exact_or_named(runs, repeat: int, t_start: float, by: float):
    """Every rank either finished with every result exact, or failed with an error that names
    its cause (the switch gave the op up, or no RESULT came) by the monotonic time `by` (it
    started at t_start); none hung, none got a wrong result. Returns how many finished."""
    done = 0
    for r in runs:
        assert not r.timed_out, f'rank {r.rank} hung: {r.stderr[-2000:]}'
        assert 'check failed' not in r.stderr and 'differ' not in r.stdout, r.stdout + r.stderr
        if r.rc == 0:
            assert f'identical to the reference model ({repeat} collectives)' in r.stdout, r.stdout
            done += 1
        else:
            assert r.rc == 1 and ('abandoned' in r.stderr or 'no RESULT for' in r.stderr), r.stderr
            assert t_start + r.seconds < by, (r.rank, r.seconds, r.stderr)
    return done


def restart(tb, name: str, down_s: float):
    tb.kill_switch(name)
    time.sleep(down_s)
    tb.start_switch(name)


@pytest.mark.parametrize('which', ['leaf', 'root'])
def test_a_leaf_or_root_killed_and_restarted_under_the_other(make_testbed, which):
    """kill -9 of the leaf (under a running root) or of the root (under a running leaf) while
    four ranks run checked allreduces, started again 1 s later: the restarted switch has
    forgotten its open chunks, the ranks and the other switch send them again (RETRANSMIT, the
    leaf's PARTIAL retries), and every rank either finishes exact or fails naming why within
    its own timeout (10 s) of the restart; afterwards both switches hold nothing, and the job
    runs again exact."""
    su.require_binaries(RANK)
    tb = make_testbed(ranks=4, layout='tree')
    repeat = 200
    t_start = time.monotonic()
    ranks, box = run_async(tb, checked(repeat), timeout=240)
    assert su.wait_for(lambda: completed(tb, 'root') > 2000, 60), 'the job did not get under way'
    assert ranks.is_alive(), 'the ranks finished before the switch was killed: make the run longer'
    t_kill = time.monotonic()
    restart(tb, which, 1.0)
    ranks.join()
    # A failure comes at the latest from the ranks' own timeout (10 s) after the restart.
    exact_or_named(box[0], repeat, t_start, t_kill + 1 + 10 + 3)
    # Nothing left behind on either switch once the ops' timeouts passed; the job runs again.
    again = tb.run(checked(3, '256KiB'), timeout=120)
    assert_exact(again, 3)
    exits = tb.stop_switches()
    for name, e in exits.items():
        assert e.rc == 0, (name, e.stderr[-2000:])
        s = su.parse_summary(e.stdout)
        assert s.jobs[7]['in_flight'] == 0 and not s.incomplete, (name, s.jobs)


def test_a_rank_restarted_with_the_same_id_fails_the_others_clearly_then_the_job_runs(make_testbed):
    """Rank 3 is killed mid-job and started again at once with the same rank id while the
    others wait for it: its JOIN (a new nonce) starts a new session, the others' ops cannot
    complete and fail within op_timeout_ms plus their own timeout, naming the cause; nothing
    is wrong, nothing hangs. The lone rank 3 gives up joining after its --join-timeout-ms; the
    whole job started again (more than 3 s after, so that its last JOIN no longer counts:
    PROTOCOL.md, Sessions) runs exact."""
    su.require_binaries(RANK)
    tb = make_testbed(ranks=4)
    cmd = checked(100000)
    others, box = run_async(tb, cmd, [0, 1, 2], timeout=60)
    killed = tb.run(cmd, ranks=[3], timeout=2.5)  # SIGTERM at 2.5 s, mid-op
    assert killed[0].timed_out
    again, box3 = run_async(tb, checked(5, '1MiB', '--join-timeout-ms', 8000), [3], timeout=30, label='again')
    others.join()
    again.join()
    for r in box[0]:
        assert not r.timed_out and r.rc == 1, f'rank {r.rank}: exit {r.rc}\n{r.stdout}{r.stderr}'
        assert 'abandoned' in r.stderr or 'no RESULT for' in r.stderr, r.stderr
        assert r.seconds < 2.5 + 3 + 10 + 2, r.seconds
    r3 = box3[0][0]  # alone in its new session: the others are gone
    assert not r3.timed_out and r3.rc == 1, r3.stdout + r3.stderr
    assert 'for every rank to join' in r3.stderr and r3.seconds < 8 + 3, r3.stderr
    time.sleep(3.5)
    assert_exact(tb.run(checked(3, '256KiB'), timeout=120), 3)
    s = su.parse_summary(tb.stop_switches()['switch'].stdout)
    assert s.jobs[7]['in_flight'] == 0 and not s.incomplete, s.jobs


def test_two_jobs_in_flight_when_the_switch_is_killed_and_restarted(make_testbed):
    """Jobs 7 and 8 run checked allreduces over the same four ranks when the switch is killed
    (kill -9) and started again 1 s later: in each job every rank either finishes exact or
    fails naming why within its own timeout; neither job gets a wrong result or hangs, and both
    run again exact."""
    su.require_binaries(RANK)
    tb = make_testbed(ranks=4, jobs=2)
    repeat = 150
    t_start = time.monotonic()
    j7, box7 = run_async(tb, checked(repeat, '512KiB', '--job', 7), timeout=240, label='job7')
    j8, box8 = run_async(tb, checked(repeat, '512KiB', '--job', 8), timeout=240, label='job8')
    assert su.wait_for(lambda: completed(tb) > 1000 and completed(tb, job=8) > 1000, 60), 'not under way'
    assert j7.is_alive() and j8.is_alive(), 'a job finished before the switch was killed: make the runs longer'
    t_kill = time.monotonic()
    restart(tb, 'switch', 1.0)
    j7.join()
    j8.join()
    for box in (box7, box8):
        exact_or_named(box[0], repeat, t_start, t_kill + 1 + 10 + 3)
    for job in (7, 8):
        assert_exact(tb.run(checked(2, '256KiB', '--job', job), timeout=120, label=f'again{job}'), 2)
    s = su.parse_summary(tb.stop_switches()['switch'].stdout)
    for job in (7, 8):
        assert s.jobs[job]['in_flight'] == 0, s.jobs
    assert not s.incomplete


# ------------------------------------------------------------------ a graceful stop (PROTOCOL.md, "The switch stops")
def test_sigterm_lets_the_ops_in_flight_finish_and_refuses_new_ones_by_name(make_testbed):
    """SIGTERM while four ranks run checked allreduces back to back: the switch takes no new op
    (NACK SWITCH_STOPPING), lets the op in flight finish (none timed out, none left open), exits 0
    with its summary within stop_timeout_ms (5 s), and every rank fails its next collective at
    once, naming the cause, never with a wrong result."""
    su.require_binaries(RANK)
    tb = make_testbed(ranks=4)
    ranks, box = run_async(tb, checked(100000), timeout=60)
    assert su.wait_for(lambda: completed(tb) > 2000, 60), 'the job did not get under way'
    sw = tb.switches[0]
    t0 = time.monotonic()
    os.kill(sw.pid, signal.SIGTERM)
    rc = sw.proc.wait(timeout=20)
    took = time.monotonic() - t0
    ranks.join()
    assert rc == 0 and took < 5 + 1.5, (rc, took)
    out, err = (tb.dir / 'switch.out').read_text(), (tb.dir / 'switch.err').read_text()
    assert 'every op in flight finished' in err, err[-2000:]
    s = su.parse_summary(out)
    assert s.jobs[7]['in_flight'] == 0 and s.jobs[7]['timed_out'] == 0, s.jobs
    assert s.shard_total('elements') > 0 and s.shard_dropped['stopping'] > 0, s.shard_dropped
    for r in box[0]:
        assert not r.timed_out and r.rc == 1, f'rank {r.rank}: exit {r.rc}\n{r.stdout}{r.stderr}'
        assert 'switch_stopping' in r.stderr and 'check failed' not in r.stderr, r.stderr
    sw.pid, sw.proc = 0, None


def test_a_second_signal_stops_at_once(make_testbed):
    """Two SIGTERMs in a row under load: the switch exits at once (well within stop_timeout_ms),
    with its summary; the ranks fail naming why (abandoned, or no RESULT), none wrongly."""
    su.require_binaries(RANK)
    tb = make_testbed(ranks=4, settings={'stop_timeout_ms': 30000})
    ranks, box = run_async(tb, checked(100000), timeout=60)
    assert su.wait_for(lambda: completed(tb) > 2000, 60), 'the job did not get under way'
    sw = tb.switches[0]
    t0 = time.monotonic()
    os.kill(sw.pid, signal.SIGTERM)
    time.sleep(0.05)
    os.kill(sw.pid, signal.SIGTERM)
    rc = sw.proc.wait(timeout=20)
    took = time.monotonic() - t0
    ranks.join()
    assert rc == 0 and took < 2, (rc, took)
    assert su.parse_summary((tb.dir / 'switch.out').read_text()).shard_total('elements') > 0
    for r in box[0]:
        assert not r.timed_out and r.rc == 1, f'rank {r.rank}: exit {r.rc}\n{r.stdout}{r.stderr}'
        assert 'check failed' not in r.stderr, r.stderr
    sw.pid, sw.proc = 0, None
