"""The host collectives (issue 18) against the switch: prism-rank --algo binomial|chain|rhd|ring
reduces among the ranks alone, over TCP between their namespaces (lib/coll), with PRISM's
arithmetic. Under KULISCH_FIXED the partials travel losslessly and the result is rounded once,
so every algorithm's result has the switch's bits, for any number of ranks (RHD folds when it is
not a power of two); under FP32_BINOMIAL the binomial tree is the switch's binomial order over
rank index, so those bits agree too. Through the testbed's bridge layout (ranks reach each
other). Needs root.
"""
from __future__ import annotations

import json

import pytest

import switch_util as su
from testbed import make_testbed  # noqa: F401

RANK = su.BUILD / 'app' / 'prism-rank'


def host_algorithms() -> list[str]:
    """Every host algorithm of prism-rank's table (lib/coll/algorithms.hpp): one added there is run here."""
    import subprocess
    out = subprocess.run([str(RANK), '--list-algos', '--json'], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return [a['name'] for a in json.loads(out.stdout)['algorithms'] if a['hosts']]


def digests(tb, algo: str, policy: str, size: str, collective: str = 'allreduce') -> dict:
    runs = tb.run([str(RANK), '--config', '{config}', '--rank', '{rank}', '--size', size, '--policy', policy,
                   '--algo', algo, '--collective', collective, '--root', '1', '--check', '--json'], timeout=120)
    bad = [r for r in runs if r.rc != 0]
    assert not bad, '\n'.join(f'rank {r.rank}: exit {r.rc}\n{r.stdout}{r.stderr}' for r in bad)
    lines = [json.loads(r.stdout.strip().splitlines()[-1]) for r in runs]
    for ln in lines:
        assert ln['algo'] == algo and ln['check_beyond_bound'] == 0, ln
    return {ln['rank']: ln['digest'] for ln in lines}


@pytest.mark.parametrize('R', [3, 4, 5])
def test_every_host_algorithm_over_tcp_gives_the_switchs_bits(make_testbed, R):
    su.require_binaries(RANK)
    tb = make_testbed(ranks=R, layout='bridge')
    sw = digests(tb, 'switch', 'kulisch', '200KiB')
    assert len(set(sw.values())) == 1, sw
    for algo in host_algorithms():
        host = digests(tb, algo, 'kulisch', '200KiB')
        assert host == sw, f'KULISCH_FIXED, R = {R}: {algo} {host} against the switch {sw}'
    sw = digests(tb, 'switch', 'fp32_binomial', '200KiB')
    host = digests(tb, 'binomial', 'fp32_binomial', '200KiB')
    assert host == sw, f'FP32_BINOMIAL, R = {R}: the binomial tree {host} against the switch {sw}'
    # reduce to rank 1: only the root keeps the result, the same bits again
    sw = digests(tb, 'switch', 'kulisch', '64KiB', 'reduce')
    for algo in ('binomial', 'rhd'):
        host = digests(tb, algo, 'kulisch', '64KiB', 'reduce')
        assert host[1] == sw[1] != '', (algo, host, sw)
    exits = tb.stop_switches()
    assert exits['switch'].rc == 0, exits['switch'].stderr[-2000:]


def test_auto_weighs_the_switch_against_the_host_algorithms(make_testbed):
    """--algo auto with the default candidates joins the switch, measures it (a one-element and a
    1 MiB allreduce through it) beside the hosts' alpha, beta and gamma, and runs the candidate
    whose prediction is least: every rank the same one, with the switch's KULISCH bits whichever
    it is. Then reduce_scatter, allgather and broadcast by auto (the switch runs none of them)."""
    su.require_binaries(RANK)
    tb = make_testbed(ranks=3, layout='bridge')
    sw = digests(tb, 'switch', 'kulisch', '512KiB')
    runs = tb.run([str(RANK), '--config', '{config}', '--rank', '{rank}', '--size', '512KiB', '--algo', 'auto',
                   '--check', '--json'], timeout=120)
    bad = [r for r in runs if r.rc != 0]
    assert not bad, '\n'.join(f'rank {r.rank}: exit {r.rc}\n{r.stdout}{r.stderr}' for r in bad)
    lines = [json.loads(r.stdout.strip().splitlines()[-1]) for r in runs]
    for ln in lines:
        cal, pred = ln['calibration'], ln['predictions']
        assert cal['have_switch'] and cal['switch_alpha'] > 0 and cal['switch_beta'] > 0, cal
        assert set(pred) == {'switch', *host_algorithms()}, pred
        assert ln['algo'] == min(pred, key=pred.get), ln
        assert ln['algo'] == lines[0]['algo'] and ln['calibration'] == lines[0]['calibration']
        assert ln['digest'] == sw[ln['rank']] and ln['check_beyond_bound'] == 0, (ln, sw)
    for coll, can in (('reduce_scatter', {'rhd', 'ring'}), ('allgather', {'rhd', 'ring'}),
                      ('broadcast', {'binomial', 'chain', 'rhd'})):
        runs = tb.run([str(RANK), '--config', '{config}', '--rank', '{rank}', '--count', '100001', '--algo', 'auto',
                       '--collective', coll, '--root', '0', '--check', '--json'], timeout=120)
        bad = [r for r in runs if r.rc != 0]
        assert not bad, '\n'.join(f'rank {r.rank}: exit {r.rc}\n{r.stdout}{r.stderr}' for r in bad)
        lines = [json.loads(r.stdout.strip().splitlines()[-1]) for r in runs]
        for ln in lines:
            assert set(ln['predictions']) == can and ln['algo'] in can, (coll, ln)
            assert ln['check_differ'] == 0, (coll, ln)
    exits = tb.stop_switches()
    assert exits['switch'].rc == 0, exits['switch'].stderr[-2000:]
