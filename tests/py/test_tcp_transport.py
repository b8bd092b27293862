"""The TCP Transport (lib/coll/tcp.hpp) between processes in separate network namespaces:
four ranks on one bridge (the testbed's 'bridge' layout), each running the driver case of
tests/unit/test_tcp_transport (TcpDriver.*) with the switch's YAML, which gives every rank's
address (TCP port = its udp_port). Each rank exchanges 0 B, 1 B, 1 MiB and 16 MiB with
every other rank at once (sendrecv in shifts) and checks the bytes it receives against
the sender's pattern, regenerated on its side."""
from __future__ import annotations

import switch_util as su
from testbed import make_testbed  # noqa: F401

DRIVER = su.BUILD / 'tests' / 'unit' / 'test_tcp_transport'


def test_ranks_exchange_over_tcp_between_namespaces(make_testbed):
    su.require_binaries(DRIVER)
    tb = make_testbed(ranks=4, layout='bridge')
    runs = tb.run(['env', 'PRISM_TCP_CONFIG={config}', 'PRISM_TCP_RANK={rank}', str(DRIVER),
                   '--gtest_filter=TcpDriver.*'], timeout=120)
    for r in runs:
        assert r.rc == 0 and not r.timed_out, f'rank {r.rank}: rc {r.rc}\n{r.stdout}\n{r.stderr}'
        assert f'TCP-DRIVER OK rank {r.rank} of 4' in r.stdout, f'rank {r.rank}:\n{r.stdout}\n{r.stderr}'
