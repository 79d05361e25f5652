#!/usr/bin/env bash
# The project's test command (CI runs it through .ci/run): installs what is missing, builds
# everything in build/ (scripts/build.sh: Release, Ninja, clang when installed), and runs every
# test under CTest.
# Exits non-zero on any failure. Extra arguments go to ctest (e.g. -R Pipeline).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

scripts/install_deps.sh

build=${GPIPE_BUILD_DIR:-build}
jobs=$(nproc)
GPIPE_BUILD_DIR=$build scripts/build.sh
# Several virtual devices per test process share the cores: keep OpenMP threads passive.
export OMP_WAIT_POLICY=PASSIVE
ctest --test-dir "$build" --output-on-failure -j "$jobs" "$@"
