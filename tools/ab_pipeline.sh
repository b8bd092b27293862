#!/bin/bash
# Before/after timing of two prism-bench builds on this noisy machine: the
# builds take turns, ROUNDS runs each, and the median Mpps of each
# (policy, dtype, lcores and layout: 2p is pipelined) is printed as a Markdown table.
#
#   tools/ab_pipeline.sh OLD/prism-bench NEW/prism-bench ROUNDS [prism-bench pipeline options]
#   tools/ab_pipeline.sh /tmp/old/build/app/prism-bench build/app/prism-bench 3 \
#       --policies forward,fp32_arrival,kulisch --dtypes fp32,fp16,bf16 --lcores 1,2 --repeat 1 --no-testpmd
#
# NEW_ARGS (environment) adds options for the NEW side only, to compare two
# settings of one build, e.g. the RESULT fan-out:
#   NEW_ARGS="--fanout chain" tools/ab_pipeline.sh build/app/prism-bench build/app/prism-bench 3 \
#       --policies fp32_arrival,kulisch --payloads 1024,8192 --lcores 1,2 --repeat 1 --no-testpmd
set -euo pipefail
if [ $# -lt 3 ] || [ ! -x "$1" ] || [ ! -x "$2" ] || ! [[ "$3" =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: $0 OLD_PRISM_BENCH NEW_PRISM_BENCH ROUNDS [prism-bench pipeline options]" >&2
  echo "  OLD and NEW must be executable prism-bench binaries; ROUNDS a whole number >= 1" >&2
  exit 2
fi
old=$1 new=$2 rounds=$3
shift 3
runs=$(mktemp)
trap 'rm -f "$runs"' EXIT
for ((r = 1; r <= rounds; ++r)); do
  for b in old new; do
    bin=$old extra=()
    [ "$b" = new ] && bin=$new && read -r -a extra <<< "${NEW_ARGS:-}"
    out=$("$bin" pipeline "$@" "${extra[@]}" 2>&1) || { echo "$bin pipeline $* ${extra[*]} failed:" >&2; echo "$out" | tail -20 >&2; exit 1; }
    # rows: policy dtype bytes R lcores | Mpps ...
    echo "$out" | awk -v b="$b" '$6 == "|" && $1 !~ /^testpmd/ && $1 != "policy" {print b, $1, $2, $3, $5, $7}' >> "$runs"
  done
  echo "round $r of $rounds done" >&2
done
python3 - "$runs" <<'PY'
import collections, statistics, sys
d = collections.defaultdict(list)
for line in open(sys.argv[1]):
    b, policy, dtype, nbytes, lcores, mpps = line.split()   # lcores: 2, or 2p (pipelined)
    d[(policy, dtype, int(nbytes), lcores, b)].append(float(mpps))
print('| policy | dtype | payload B | lcores | before (Mpps) | after (Mpps) | after ÷ before |')
print('|---|---|---|---|---|---|---|')
for k in sorted({k[:4] for k in d}, key=lambda k: (k[0], k[1], k[2], int(k[3].rstrip('p')), k[3])):
    o, n = d.get(k + ('old',)), d.get(k + ('new',))
    if not o or not n:
        continue
    o, n = statistics.median(o), statistics.median(n)
    print(f'| {k[0]} | {k[1]} | {k[2]} | {k[3]} | {o:.3f} | {n:.3f} | {n / o:.2f} |')
PY
