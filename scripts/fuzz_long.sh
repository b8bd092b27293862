#!/usr/bin/env bash
# The documented long run of fuzz_switch (docs/FUZZING.md): TOTAL executions
# under ASan/UBSan, cut into libFuzzer jobs of JOB_RUNS executions each
# (-jobs/-workers), all from and into one corpus. It can be stopped and run
# again: each invocation starts the jobs still missing and counts what the
# finished ones did, so a run longer than a working session adds up across
# several. A job killed before its end counts for nothing.
#
# Usage: scripts/fuzz_long.sh [TOTAL] [WORKERS] [OUTDIR]
#   TOTAL    executions in all (default 10000000)
#   WORKERS  jobs at a time (default 1; one core each)
#   OUTDIR   the fuzz build (default build-fuzz/; scripts/fuzz.sh 0 OUTDIR builds it)
# Environment: JOB_RUNS (default 500000) executions a job.
#
# A run belongs to one commit: the first invocation copies OUTDIR/fuzz_switch
# to OUTDIR/long/<commit>/fuzz_switch (scripts/fuzz.sh builds it from the
# working tree: commit first), and every invocation at that commit runs that
# copy and adds to that run, so rebuilding OUTDIR meanwhile changes nothing.
# Logs: OUTDIR/long/<commit>/<invocation>/fuzz-<job>.log. Prints a summary
# (jobs done, executions, exec/s, edges, features, corpus, sanitizer reports)
# and exits 1 when any job found something.
set -euo pipefail
exec </dev/null
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TOTAL=${1:-10000000}
WORKERS=${2:-1}
OUT=${3:-$ROOT/build-fuzz}
JOB_RUNS=${JOB_RUNS:-500000}
for v in "$TOTAL" "$WORKERS" "$JOB_RUNS"; do
  case "$v" in '' | *[!0-9]* | 0) echo "fuzz_long.sh: TOTAL, WORKERS and JOB_RUNS must be positive whole numbers" >&2; exit 2 ;; esac
done
[ -x "$OUT/fuzz_switch" ] || { echo "fuzz_long.sh: $OUT/fuzz_switch missing: run FUZZ_TARGETS=switch scripts/fuzz.sh 0 $OUT" >&2; exit 2; }
OUT=$(cd "$OUT" && pwd)
COMMIT=$(git -C "$ROOT" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
[ -z "$(git -C "$ROOT" status --porcelain -- lib tests/fuzz scripts/fuzz.sh 2>/dev/null)" ] ||
  echo "fuzz_long.sh: warning: lib/ or tests/fuzz/ differs from commit $COMMIT: the run is of what was built" >&2
LONG=$OUT/long/$COMMIT
mkdir -p "$LONG" "$OUT/corpus/switch" "$OUT/crashes"
[ -x "$LONG/fuzz_switch" ] || cp "$OUT/fuzz_switch" "$LONG/fuzz_switch"

# What the finished jobs of earlier invocations did: a finished job's log ends with its final stats.
summary() {
  /usr/bin/python3 - "$LONG" <<'EOF'
import glob, re, sys
done = execs = secs = reports = 0
cov = ft = corp = 0
for log in sorted(glob.glob(sys.argv[1] + "/*/fuzz-*.log")):
    t = open(log, errors="replace").read()
    if re.search(r"ERROR: (AddressSanitizer|UndefinedBehaviorSanitizer|libFuzzer)|runtime error:|FUZZ_CHECK failed", t):
        reports += 1
        print("fuzz_long.sh: finding in", log)
    m = re.search(r"stat::number_of_executed_units: (\d+)", t)
    d = re.findall(r"#(\d+)\s+DONE\s+cov: (\d+) ft: (\d+) corp: (\d+)", t)
    if not m or not d:
        continue
    done += 1
    execs += int(m.group(1))
    secs += int(re.search(r"Done \d+ runs in (\d+) second", t).group(1))
    cov, ft, corp = max(cov, int(d[-1][1])), max(ft, int(d[-1][2])), int(d[-1][3])
print(f"{done} {execs} {secs} {reports} {cov} {ft} {corp}")
EOF
}

read -r done execs secs reports cov ft corp < <(summary | tail -1)
need=$(( (TOTAL - execs + JOB_RUNS - 1) / JOB_RUNS ))
if [ "$need" -gt 0 ] && [ "$reports" = 0 ]; then
  run=$LONG/$(date -u +%Y%m%dT%H%M%S)
  mkdir -p "$run"
  echo "fuzz_long.sh: commit $COMMIT: $execs of $TOTAL executions done; $need jobs of $JOB_RUNS to go, $WORKERS at a time; logs in $run"
  ( cd "$run" && "$LONG/fuzz_switch" -jobs="$need" -workers="$WORKERS" -runs="$JOB_RUNS" -max_len=9100 -timeout=10 \
      -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$OUT/crashes/switch-" \
      "$OUT/corpus/switch" "$OUT/seeds/switch" >/dev/null 2>&1 ) || true
  read -r done execs secs reports cov ft corp < <(summary | tail -1)
fi
rate=$(( secs > 0 ? execs / secs : 0 ))
echo "fuzz_long.sh: commit $COMMIT: $done jobs, $execs executions in $secs s of fuzzing ($rate exec/s a job), cov $cov, ft $ft, corpus $corp, $reports jobs with a finding"
[ "$reports" = 0 ]
