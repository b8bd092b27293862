#!/usr/bin/env bash
# One command on a fresh Debian 12 machine (as root): install what is missing,
# build, and run PRISM's main job on the embedded default.
# Usage: scripts/run.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
scripts/setup.sh
[ -f "$BUILD/build.ninja" ] || meson setup "$BUILD" >/dev/null
ninja -C "$BUILD" >/dev/null
exec scripts/demo.sh "$BUILD"
