#!/bin/sh
# Open MPI's rsh launch agent for the testbed's namespaces (tests/py/test_mpi.py):
# `mpirun --mca plm_rsh_agent tests/mpi/netns_agent.sh --host IP0,IP1,...` calls it as
# `netns_agent.sh IP COMMAND...` to start its daemon on "host" IP; it runs COMMAND in the
# network namespace that holds IP, as ssh would on another machine. PRISM_NETNS_MAP names a
# file of "IP NAMESPACE" lines; PRISM_NETNS_LOG, if set, a file that gets one such line a launch.
set -eu
host=$1
shift
ns=$(awk -v h="$host" '$1 == h { print $2 }' "${PRISM_NETNS_MAP:?PRISM_NETNS_MAP: a file of IP NAMESPACE lines}")
[ -n "$ns" ] || { echo "netns_agent: no namespace for host $host in $PRISM_NETNS_MAP" >&2; exit 1; }
[ -z "${PRISM_NETNS_LOG:-}" ] || echo "$host $ns" >>"$PRISM_NETNS_LOG"
exec ip netns exec "$ns" /bin/sh -c "$*"
