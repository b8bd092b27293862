#!/usr/bin/env bash
# Builds PRISM's libFuzzer targets with ASan + UBSan, makes a seed corpus and
# fuzzes each target. docs/FUZZING.md explains the targets and how to replay a crash.
#
# Usage: scripts/fuzz.sh [SECONDS] [OUTDIR]
#   SECONDS  total fuzzing time, split evenly across the targets (default 60;
#            0 only builds and runs every target once over its seeds); fuzz_switch
#            (stateful, the slowest to go deep) gets at least FUZZ_SWITCH_SECONDS
#            (default 60) of its own when SECONDS > 0
#   OUTDIR   build and work folder (default build-fuzz/ in the repository)
# Environment: FUZZ_TARGETS="parse partial config switch" picks targets;
#              CXX_FUZZ=/path/to/clang++ picks the compiler.
#
# Prints one line per target (execs, exec/s, coverage). Exits 0 when no target
# crashed, leaked, timed out, ran out of memory or got a sanitizer report;
# otherwise exits 1 and the last line names each failing target and the input
# that makes it fail. Safe to run again: the working corpus in OUTDIR/corpus
# grows from run to run; seeds are regenerated; nothing outside OUTDIR changes.
set -euo pipefail
exec </dev/null

ROOT=$(cd "$(dirname "$0")/.." && pwd)
SECS=${1:-60}
OUT=${2:-$ROOT/build-fuzz}
case "$SECS" in '' | *[!0-9]*) echo "fuzz.sh: SECONDS must be a whole number, not '$SECS'" >&2; exit 2 ;; esac
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
TARGETS=${FUZZ_TARGETS:-parse partial message config switch}
for t in $TARGETS; do
  case "$t" in parse | partial | message | config | switch) ;; *) echo "fuzz.sh: unknown target '$t' (parse partial message config switch)" >&2; exit 2 ;; esac
done
SWITCH_MIN=${FUZZ_SWITCH_SECONDS:-60}
case "$SWITCH_MIN" in '' | *[!0-9]*) echo "fuzz.sh: FUZZ_SWITCH_SECONDS must be a whole number" >&2; exit 2 ;; esac
JOBS=$(nproc 2>/dev/null || echo 2)
cd "$ROOT"

# --- compiler ------------------------------------------------------------------
CXX=${CXX_FUZZ:-}
if [ -z "$CXX" ]; then
  for c in clang++ clang++-14 /usr/lib/llvm-14/bin/clang++; do
    if command -v "$c" >/dev/null 2>&1; then CXX=$c; break; fi
  done
fi
if [ -z "$CXX" ]; then
  echo "fuzz.sh: clang++ not found (apt-get install clang-14 libclang-rt-14-dev)" >&2
  exit 2
fi

COMMON=(-std=c++20 -O1 -g -ffp-contract=off -fno-fast-math -fno-omit-frame-pointer -Ilib -Itests/fuzz
        -fsanitize=address,undefined -fno-sanitize-recover=all)
OBJ_FLAGS=("${COMMON[@]}" -fsanitize=fuzzer-no-link)

LIB_SRCS=(lib/format/format.cpp lib/arith/op.cpp lib/arith/kernels_portable.cpp lib/arith/kernels_avx2.cpp
          lib/arith/accumulator.cpp lib/arith/accumulator_kulisch.cpp lib/arith/accumulator_fp32.cpp
          lib/arith/accumulator_int.cpp lib/arith/lanes.cpp lib/proto/packet.cpp lib/proto/partial.cpp
          lib/proto/fragment.cpp lib/proto/packed_lanes.cpp lib/coll/partial_message.cpp)
CONFIG_SRC=lib/config/config.cpp
# The switch's receive path (fuzz_switch only: it needs the config reader and yaml-cpp too).
SWITCH_SRCS=(lib/switch/directory.cpp lib/switch/ingress.cpp lib/switch/key_table.cpp lib/switch/result_log.cpp
             lib/switch/reducer.cpp lib/switch/session.cpp lib/switch/pool.cpp lib/switch/pool_shard.cpp)
# The standard library's fills of the reducers' preallocated tables run uninstrumented (see the file).
SWITCH_FLAGS=(-fsanitize-ignorelist=tests/fuzz/switch_ignorelist.txt
              -fsanitize-coverage-ignorelist=tests/fuzz/switch_ignorelist.txt)

obj_of() { local s=${1#lib/}; s=${s#tests/fuzz/}; echo "$OUT/obj/${s//\//_}.o"; }

compile() {  # SOURCE [EXTRA FLAGS...]
  local src=$1 obj flags=("${OBJ_FLAGS[@]}")
  obj=$(obj_of "$1")
  shift
  # fuzz_switch's model of the switch is sanitized but not coverage-traced: its
  # branches are not the switch's, and tracing them made each input 1.4x slower
  # while it found no more of the switch's edges (docs/FUZZING.md).
  [ "$src" = tests/fuzz/fuzz_switch.cpp ] && flags=("${COMMON[@]}")
  if ! "$CXX" "${flags[@]}" "$@" -c "$src" -o "$obj.tmp" 2>"$obj.log"; then
    echo "fuzz.sh: compiling $src failed:" >&2
    cat "$obj.log" >&2
    return 1
  fi
  mv -f "$obj.tmp" "$obj"
}

# Runs "$@" in the background, at most JOBS at a time; BUILD_FAILED=1 when any fails.
PIDS=()
BUILD_FAILED=0
spawn() {
  "$@" &
  PIDS+=($!)
  if [ "${#PIDS[@]}" -ge "$JOBS" ]; then
    wait "${PIDS[0]}" || BUILD_FAILED=1
    PIDS=("${PIDS[@]:1}")
  fi
}
wait_all() {
  local p
  for p in "${PIDS[@]}"; do wait "$p" || BUILD_FAILED=1; done
  PIDS=()
}

# --- build (an object is rebuilt when its source, any header or this script is newer) --
stale() {  # OBJECT SOURCE...
  local obj=$1 f
  shift
  [ -f "$obj" ] || return 0
  for f in "$@" scripts/fuzz.sh; do [ "$f" -nt "$obj" ] && return 0; done
  [ -n "$(find lib tests/fuzz -name '*.hpp' -newer "$obj" -print -quit)" ] && return 0
  return 1
}
t_build=$(date +%s)
mkdir -p "$OUT/obj"
FUZZ_SRCS=(tests/fuzz/fuzz_parse.cpp tests/fuzz/fuzz_partial.cpp tests/fuzz/fuzz_message.cpp tests/fuzz/fuzz_config.cpp
           tests/fuzz/fuzz_switch.cpp tests/fuzz/seedgen.cpp tests/fuzz/seedgen_switch.cpp)
compiled=0
for s in "${LIB_SRCS[@]}" "$CONFIG_SRC" "${SWITCH_SRCS[@]}" "${FUZZ_SRCS[@]}"; do
  stale "$(obj_of "$s")" "$s" tests/fuzz/switch_ignorelist.txt || continue
  [ "$compiled" = 0 ] && echo "fuzz.sh: compiling with $("$CXX" --version | head -1), $JOBS jobs"
  compiled=$((compiled + 1))
  if [ "$s" = lib/arith/kernels_avx2.cpp ]; then
    spawn compile "$s" -mavx2 -mfma -mf16c
  elif [[ " ${SWITCH_SRCS[*]} tests/fuzz/fuzz_switch.cpp " == *" $s "* ]]; then
    spawn compile "$s" "${SWITCH_FLAGS[@]}"
  else
    spawn compile "$s"
  fi
done
wait_all
[ "$BUILD_FAILED" = 0 ] || { echo "fuzz.sh: build failed" >&2; exit 2; }
LIB_OBJS=()
for s in "${LIB_SRCS[@]}"; do LIB_OBJS+=("$(obj_of "$s")"); done
link_exe() {  # OUTPUT FLAGS-AND-OBJECTS...
  local out=$1
  shift
  "$CXX" "${COMMON[@]}" "$@" -o "$out.tmp" && mv -f "$out.tmp" "$out"
}
SWITCH_OBJS=()
for s in "${SWITCH_SRCS[@]}"; do SWITCH_OBJS+=("$(obj_of "$s")"); done
for e in fuzz_parse fuzz_partial fuzz_message fuzz_config fuzz_switch seedgen seedgen_switch; do [ -x "$OUT/$e" ] || compiled=$((compiled + 1)); done
if [ "$compiled" -gt 0 ]; then
  spawn link_exe "$OUT/fuzz_parse" -fsanitize=fuzzer "$(obj_of tests/fuzz/fuzz_parse.cpp)" "${LIB_OBJS[@]}"
  spawn link_exe "$OUT/fuzz_partial" -fsanitize=fuzzer "$(obj_of tests/fuzz/fuzz_partial.cpp)" "${LIB_OBJS[@]}"
  spawn link_exe "$OUT/fuzz_message" -fsanitize=fuzzer "$(obj_of tests/fuzz/fuzz_message.cpp)" "${LIB_OBJS[@]}"
  spawn link_exe "$OUT/fuzz_config" -fsanitize=fuzzer "$(obj_of tests/fuzz/fuzz_config.cpp)" "$(obj_of "$CONFIG_SRC")" \
    "${LIB_OBJS[@]}" -lyaml-cpp
  spawn link_exe "$OUT/fuzz_switch" -fsanitize=fuzzer "$(obj_of tests/fuzz/fuzz_switch.cpp)" "${SWITCH_OBJS[@]}" \
    "$(obj_of "$CONFIG_SRC")" "${LIB_OBJS[@]}" -lyaml-cpp
  spawn link_exe "$OUT/seedgen" "$(obj_of tests/fuzz/seedgen.cpp)" "${LIB_OBJS[@]}"
  spawn link_exe "$OUT/seedgen_switch" "$(obj_of tests/fuzz/seedgen_switch.cpp)" "${LIB_OBJS[@]}"
  wait_all
  [ "$BUILD_FAILED" = 0 ] || { echo "fuzz.sh: link failed" >&2; exit 2; }
  echo "fuzz.sh: built in $(($(date +%s) - t_build)) s"
else
  echo "fuzz.sh: targets up to date in $OUT"
fi

# --- seed corpus ---------------------------------------------------------------
SEEDS="$OUT/seeds"
rm -rf "$SEEDS" "$OUT/gen"
mkdir -p "$SEEDS/parse" "$SEEDS/partial" "$SEEDS/message" "$SEEDS/config" "$SEEDS/switch" "$OUT/gen"
PCAPS=()
GEN=build/app/prism-gen
if [ -x "$GEN" ]; then
  gen() {  # NAME PRISM-GEN-OPTIONS...: one capture of job 7 of configs/reference.yaml, with faults
    local name=$1
    shift
    if "$GEN" write --config configs/reference.yaml --job 7 --merged "$OUT/gen/$name.pcap" --seed 3 "$@" \
        >>"$OUT/gen/prism-gen.log" 2>&1; then
      PCAPS+=("$OUT/gen/$name.pcap")
    else
      echo "fuzz.sh: prism-gen $name failed (see $OUT/gen/prism-gen.log); continuing without it"
    fi
  }
  gen fp32-kulisch --dtype fp32 --policy kulisch --elements 700 --loss 0.2 --dup 0.2 --late-retransmit 0.5 \
    --malformed 16 --foreign 6
  gen bf16-arrival --dtype bf16 --policy fp32_arrival --values specials --elements 300 --order random --malformed 8
  gen e4m3fn-binomial --dtype e4m3fn --out-dtype e4m3fn --policy fp32_binomial --exceptions saturate --values full \
    --elements 100 --malformed 8 --foreign 3
  gen int8-auto --dtype int8 --policy kulisch --transport auto --elements 64 --malformed 8
  gen fp16-jumbo --dtype fp16 --policy kulisch --transport rounded --mtu 9000 --elements 5000 --values cancel \
    --reorder 0.3 --malformed 8
else
  echo "fuzz.sh: $GEN not built: seeds are the hand-made frames only (ninja -C build for more)"
fi
"$OUT/seedgen" "$SEEDS" "${PCAPS[@]}"
cp configs/reference.yaml "$SEEDS/config/reference.yaml"
cp tests/fuzz/seeds/config/*.yaml "$SEEDS/config/"
# fuzz_switch: honest scenarios and the bundled captures' contributions, plus the committed corpus.
"$OUT/seedgen_switch" "$SEEDS/switch" pcaps/demo/*/sw1.port*.pcap >/dev/null
cp tests/fuzz/seeds/fuzz_switch/* "$SEEDS/switch/"

# --- fuzzing -----------------------------------------------------------------------
set -- $TARGETS
N=$#
PER=$((SECS / N))
[ "$SECS" -gt 0 ] && [ "$PER" -lt 1 ] && PER=1
mkdir -p "$OUT/crashes" "$OUT/logs"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
FAILS=()
for t in $TARGETS; do
  secs=$PER
  [ "$t" = switch ] && [ "$SECS" -gt 0 ] && [ "$secs" -lt "$SWITCH_MIN" ] && secs=$SWITCH_MIN
  corpus="$OUT/corpus/$t"
  log="$OUT/logs/$t.log"
  mkdir -p "$corpus"
  extra=()
  [ "$t" = config ] && extra+=(-dict=tests/fuzz/config.dict)
  if [ "$secs" -gt 0 ]; then extra+=(-max_total_time="$secs"); else extra+=(-runs=0); fi
  rc=0
  "$OUT/fuzz_$t" "${extra[@]}" -max_len=9100 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$OUT/crashes/$t-" "$corpus" "$SEEDS/$t" >"$log" 2>&1 || rc=$?
  # Metrics from the log (absent ones print as '?'; a crash log has no final stats).
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1 || true)
  [ -n "$execs" ] || execs=$({ grep -o '^#[0-9]*' "$log" || true; } | tail -1 | tr -d '#')
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1 || true)
  cov=$({ grep -o 'cov: [0-9]*' "$log" || true; } | tail -1 | cut -d' ' -f2)
  ft=$({ grep -o 'ft: [0-9]*' "$log" || true; } | tail -1 | cut -d' ' -f2)
  corp=$({ grep -o 'corp: [0-9]*' "$log" || true; } | tail -1 | cut -d' ' -f2)
  if [ "$rc" = 0 ]; then
    printf 'fuzz_%-8s ok      %9s execs  %6s exec/s  %3s s  cov %s  ft %s  corpus %s\n' \
      "$t" "${execs:-?}" "${rate:-?}" "$secs" "${cov:-?}" "${ft:-?}" "${corp:-?}"
  else
    input=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1 || true)
    what=$({ grep -o -E 'FUZZ_CHECK failed: .*|runtime error: .*|threw .*|ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer): [a-z -]*' "$log" || true; } | head -1)
    printf 'fuzz_%-8s FAILED  %9s execs  rc %s: %s\n' "$t" "${execs:-?}" "$rc" "${what:-see $log}"
    { grep -E 'SUMMARY:|FUZZ_CHECK|runtime error|threw' "$log" || true; } | head -4 | sed 's/^/    /'
    FAILS+=("fuzz_$t failed (${what:-rc $rc}), input: ${input:-none written, see $log}; replay: $OUT/fuzz_$t ${input:-}")
  fi
done

if [ "${#FAILS[@]}" -gt 0 ]; then
  echo "fuzz.sh: logs in $OUT/logs"
  ( IFS=';'; echo "FAIL: ${FAILS[*]}" )
  exit 1
fi
echo "fuzz.sh: all targets passed ($TARGETS; ${PER} s each, fuzz_switch at least ${SWITCH_MIN} s; logs in $OUT/logs)"
