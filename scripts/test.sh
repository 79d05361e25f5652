#!/usr/bin/env bash
# The project's test command (CI runs it through .ci/run): installs what is missing, configures
# a Release build with Ninja in build/, builds everything, and runs every test under CTest.
# Exits non-zero on any failure. Extra arguments go to ctest (e.g. -R Pipeline).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

scripts/install_deps.sh

build=${GPIPE_BUILD_DIR:-build}
jobs=$(nproc)
# clang compiles LibTorch's headers about 3x faster than gcc here (a full Release build: 8 min
# against 25 on 2 cores); CXX=g++ scripts/test.sh builds with gcc, which stays supported.
cxx=${CXX:-$(command -v clang++-14 || command -v c++)}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="$cxx"
cmake --build "$build" -j "$jobs"
# Several virtual devices per test process share the cores: keep OpenMP threads passive.
export OMP_WAIT_POLICY=PASSIVE
ctest --test-dir "$build" --output-on-failure -j "$jobs" "$@"
