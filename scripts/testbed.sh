#!/usr/bin/env bash
# PRISM's network-namespace testbed: ranks in namespaces, prism-switch on
# net_af_xdp (or --driver af_packet: net_af_packet) over veth pairs, optional
# bridge, tree and impairments.
# The work is done by scripts/testbed.py; `scripts/testbed.sh --help` for the usage.
exec /usr/bin/python3 "$(dirname "$0")/testbed.py" "$@"
