#!/usr/bin/env bash
# Builds PRISM and runs its whole test suite. Last line: `N passed, N failed`.
# Usage: scripts/test.sh [BUILD_DIR]      (as root on Debian 12: installs what is missing)
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
scripts/setup.sh || { echo "setup failed"; echo "0 passed, 1 failed"; exit 1; }
if [ ! -f "$BUILD/build.ninja" ]; then
  meson setup "$BUILD" >/dev/null || { echo "meson setup failed"; echo "0 passed, 1 failed"; exit 1; }
fi
ninja -C "$BUILD" || { echo "build failed"; echo "0 passed, 1 failed"; exit 1; }
rm -rf "$BUILD/test-results" && mkdir -p "$BUILD/test-results"
meson test -C "$BUILD" --print-errorlogs --num-processes 2 </dev/null
/usr/bin/python3 scripts/summary.py "$BUILD"
