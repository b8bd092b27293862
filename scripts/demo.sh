#!/usr/bin/env bash
# PRISM's main job on the embedded default: the bundled captures in
# pcaps/demo (8 ranks of job 7 on 4 ports, 2 ops x 1024 fp32 elements, once
# under KULISCH_FIXED and once under FP32_ARRIVAL) replayed through
# prism-switch with configs/demo.yaml.in, under several arbiter orders.
# Prints, per run, the results check against the golden results and how many
# elements differ from the first run. KULISCH_FIXED must match the golden
# results and be identical in every order; FP32_ARRIVAL changes with the order.
# Then, as root where network namespaces work: 4 ranks, each a prism-rank
# process in its own namespace, allreduce 1 MiB of fp32 five times through
# prism-switch on the testbed's default port kind (scripts/testbed.sh: net_af_xdp), each result checked
# against the reference model.
# Usage: scripts/demo.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
SWITCH="$BUILD/app/prism-switch"
GEN="$BUILD/app/prism-gen"
PY=/usr/bin/python3
TMP=$(mktemp -d)
PREFIX="prism-demo-$$"
trap 'rm -rf "$TMP" "/var/run/dpdk/$PREFIX"' EXIT

arbiters=("round_robin 1" "reverse 1" "random 1" "random 2" "random 3" "random 4")
status=0
printf '%-13s %-14s %-8s %-9s %-15s %-17s %s\n' policy arbiter results problems "golden mismatch" digest "elements differing from run 1"
for policy in kulisch fp32_arrival; do
  first=1
  digests=()
  for arb in "${arbiters[@]}"; do
    set -- $arb
    out="$TMP/$policy.$1.$2"
    mkdir -p "$out"
    sed -e "s|@IN@|pcaps/demo/$policy|g" -e "s|@OUT@|$out|g" -e "s|@MODE@|$1|" -e "s|@SEED@|$2|" \
      configs/demo.yaml.in >"$out/switch.yaml"
    "$SWITCH" -l 0 --no-huge -m 512 --no-pci --file-prefix "$PREFIX" --log-level=lib.eal:error \
      --log-level=pmd.net.pcap:error -- --config "$out/switch.yaml" --exit-when-idle 200 --quiet \
      >"$out/switch.log" 2>&1 || { cat "$out/switch.log"; echo "prism-switch failed"; exit 1; }
    if [ $first = 1 ]; then
      line=$($PY tools/replay_check.py "$GEN" "pcaps/demo/$policy/expected" "$out"/port*.pcap --save "$TMP/$policy.base")
      first=0
    else
      line=$($PY tools/replay_check.py "$GEN" "pcaps/demo/$policy/expected" "$out"/port*.pcap --baseline "$TMP/$policy.base")
    fi
    read -r results missing mismatch digest differ < <($PY -c 'import json,sys; d=json.loads(sys.argv[1]); print(d["results"], d["missing"] + d["duplicates"] + d["inconsistent"], d["golden_mismatch"], d["digest"], d["differ_from_baseline"] or 0)' "$line")
    printf '%-13s %-14s %-8s %-9s %-15s %-17s %s\n' "$policy" "$1:$2" "$results" "$missing" "$mismatch" "$digest" "$differ"
    if [ "$missing" != 0 ]; then status=1; fi
    if [ "$policy" = kulisch ] && { [ "$mismatch" != 0 ] || [ "$differ" != 0 ]; }; then status=1; fi
  done
done
echo
if [ $status = 0 ]; then
  echo "KULISCH_FIXED: every rank got every chunk, bit for bit the golden result, identical under every arbiter order."
else
  echo "FAILED: a result is missing, or KULISCH_FIXED differs from the golden result or between orders." >&2
fi
echo "FP32_ARRIVAL: golden results assume the capture's single-port order; with 4 ports the arbiter's order changes the sums."

echo
if [ "$(id -u)" -ne 0 ] || ! ip netns add "prism-demo-probe-$$" 2>/dev/null; then
  echo "Ranks in network namespaces: skipped (needs root and network namespaces)."
  exit $status
fi
ip netns del "prism-demo-probe-$$"
echo "4 ranks, each a process in its own network namespace, allreduce 1 MiB of fp32 (KULISCH_FIXED) five times"
echo "through prism-switch on the testbed's default port (net_af_xdp; every result checked against the reference model):"
printf '%-5s %-12s %-12s %-11s %-17s %s\n' rank "time (min)" "Gbit/s" retransmits digest check
if scripts/testbed.sh --ranks 4 --build "$BUILD" --dir "$TMP/testbed" --keep-dir -- \
    "$BUILD/app/prism-rank" --config '{config}' --rank '{rank}' --size 1MiB --repeat 5 --check --json \
    >"$TMP/testbed.log" 2>&1; then
  for k in 0 1 2 3; do
    $PY -c 'import json,sys; d=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); print("%-5d %-12s %-12.3f %-11d %-17s %s" % (d["rank"], "%.6f s" % d["seconds_min"], d["gbit_s"], d["retransmits"], d["digest"], "identical" if d["check_differ"] == 0 else "DIFFERS"))' "$TMP/testbed/rank$k.out"
  done
  echo "Every rank got the same digest, bit for bit the reference model's result."
else
  tail -30 "$TMP/testbed.log"
  echo "FAILED: the ranks' allreduce through the switch (log above)." >&2
  status=1
fi
exit $status
