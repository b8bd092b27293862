#!/usr/bin/env bash
# Builds PRISM and runs its whole test suite: every suite in a release build,
# the fuzz targets for a minute, then the unit suites again under
# AddressSanitizer + UndefinedBehaviorSanitizer (at -O1, as ASan advises: a
# third less compile time than -O2 on this 2-core machine).
# Last line: `N passed, N failed` (", N skipped" when any), counted from the
# test cases' JUnit results.
# Usage: scripts/test.sh [BUILD_DIR]      (as root on Debian 12: installs what is missing)
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
SAN="$BUILD-san"
fail() { echo "$1"; echo "0 passed, 1 failed"; exit 1; }

scripts/setup.sh || fail "setup failed"
[ -f "$BUILD/build.ninja" ] || meson setup "$BUILD" >/dev/null || fail "meson setup failed"
ninja -C "$BUILD" || fail "build failed"
rm -rf "$BUILD/test-results" && mkdir -p "$BUILD/test-results"
meson test -C "$BUILD" --print-errorlogs --num-processes 2 </dev/null

# Fuzzing: the parser, the partial decoders, the config reader and the switch's
# whole receive path (fuzz_switch, at least 60 s of its own) under libFuzzer with
# ASan+UBSan, for a bounded time (PRISM_FUZZ_SECONDS, default 60, shared by the others).
if [ -z "${PRISM_NO_FUZZ:-}" ]; then
  fuzz_rc=0
  scripts/fuzz.sh "${PRISM_FUZZ_SECONDS:-60}" "$BUILD-fuzz" >"$BUILD/test-results/fuzz.log" 2>&1 || fuzz_rc=$?
  tail -5 "$BUILD/test-results/fuzz.log"
  /usr/bin/python3 - "$BUILD/test-results/fuzz.log" "$fuzz_rc" >"$BUILD/test-results/fuzz.xml" <<'PY'
import sys
from xml.sax.saxutils import escape
log, rc = open(sys.argv[1]).read(), int(sys.argv[2])
cases = []
targets = ("fuzz_parse", "fuzz_partial", "fuzz_message", "fuzz_config", "fuzz_switch")
for t in targets:
    ok = rc == 0 or any(l.startswith(t) and " ok " in l for l in log.splitlines())
    body = "" if ok else f'<failure message="{t} failed">{escape(log[-4000:])}</failure>'
    cases.append(f'<testcase classname="fuzz" name="{t}">{body}</testcase>')
print(f'<testsuite name="fuzz" tests="{len(targets)}">{"".join(cases)}</testsuite>')
PY
fi

if [ -z "${PRISM_NO_SANITIZERS:-}" ]; then
  [ -f "$SAN/build.ninja" ] ||
    meson setup "$SAN" -Dbuildtype=debugoptimized -Doptimization=1 -Db_sanitize=address,undefined >/dev/null ||
    fail "meson setup (sanitizers) failed"
  # Only what the unit suites run: the tools and the bench are not built a second time.
  units=$(meson introspect --tests "$SAN" | /usr/bin/python3 -c '
import json, os, sys
root = os.path.realpath(sys.argv[1])
for t in json.load(sys.stdin):
    if "prism:unit" in t["suite"]:
        print(os.path.relpath(t["cmd"][0], root))' "$SAN") || fail "meson introspect (sanitizers) failed"
  ninja -C "$SAN" $units || fail "build (sanitizers) failed"
  rm -rf "$SAN/test-results" && mkdir -p "$SAN/test-results"
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1 \
    meson test -C "$SAN" --no-rebuild --suite unit --print-errorlogs --num-processes 2 </dev/null
  /usr/bin/python3 scripts/summary.py "$BUILD" "$SAN"
else
  /usr/bin/python3 scripts/summary.py "$BUILD"
fi
