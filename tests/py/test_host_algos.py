"""The host collectives (issue 18) against the switch: prism-rank --algo binomial reduces among
the ranks alone, over TCP between their namespaces (seed 000's binomial tree, lib/coll), with
PRISM's arithmetic. Under KULISCH_FIXED its partials travel losslessly and it rounds once, so its
result has the switch's bits; under FP32_BINOMIAL the tree is the switch's binomial order over
rank index, so those bits agree too; FP32_ARRIVAL's differ (each its own order), within the
bound. Through the namespace testbed's bridge layout (ranks reach each other). Needs root.
"""
from __future__ import annotations

import json

import pytest

import switch_util as su
from testbed import make_testbed  # noqa: F401

RANK = su.BUILD / 'app' / 'prism-rank'


def digests(tb, algo: str, policy: str, size: str, collective: str = 'allreduce') -> dict:
    runs = tb.run([str(RANK), '--config', '{config}', '--rank', '{rank}', '--size', size, '--policy', policy,
                   '--algo', algo, '--collective', collective, '--root', '1', '--check', '--json'], timeout=120)
    bad = [r for r in runs if r.rc != 0]
    assert not bad, '\n'.join(f'rank {r.rank}: exit {r.rc}\n{r.stdout}{r.stderr}' for r in bad)
    lines = [json.loads(r.stdout.strip().splitlines()[-1]) for r in runs]
    for ln in lines:
        assert ln['algo'] == algo and ln['check_beyond_bound'] == 0, ln
    return {ln['rank']: ln['digest'] for ln in lines}


@pytest.mark.parametrize('R', [3, 4])
def test_binomial_tree_over_tcp_gives_the_switchs_bits(make_testbed, R):
    su.require_binaries(RANK)
    tb = make_testbed(ranks=R, layout='bridge')
    for policy in ('kulisch', 'fp32_binomial'):
        sw = digests(tb, 'switch', policy, '200KiB')
        host = digests(tb, 'binomial', policy, '200KiB')
        assert len(set(sw.values())) == 1, sw
        assert host == sw, f'{policy}, R = {R}: the binomial tree {host} against the switch {sw}'
    # reduce to rank 1: only the root keeps the result, the same bits again
    sw = digests(tb, 'switch', 'kulisch', '64KiB', 'reduce')
    host = digests(tb, 'binomial', 'kulisch', '64KiB', 'reduce')
    assert host[1] == sw[1] != '', (host, sw)
    exits = tb.stop_switches()
    assert exits['switch'].rc == 0, exits['switch'].stderr[-2000:]
