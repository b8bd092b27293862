#!/usr/bin/env bash
# Builds PRISM and runs its whole test suite: every suite in a release build,
# then the unit suites again under AddressSanitizer + UndefinedBehaviorSanitizer.
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

if [ -z "${PRISM_NO_SANITIZERS:-}" ]; then
  [ -f "$SAN/build.ninja" ] ||
    meson setup "$SAN" -Dbuildtype=debugoptimized -Db_sanitize=address,undefined >/dev/null ||
    fail "meson setup (sanitizers) failed"
  ninja -C "$SAN" || fail "build (sanitizers) failed"
  rm -rf "$SAN/test-results" && mkdir -p "$SAN/test-results"
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1 \
    meson test -C "$SAN" --suite unit --print-errorlogs --num-processes 2 </dev/null
  /usr/bin/python3 scripts/summary.py "$BUILD" "$SAN"
else
  /usr/bin/python3 scripts/summary.py "$BUILD"
fi
