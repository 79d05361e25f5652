#!/usr/bin/env bash
# scripts/build.sh [TARGET...]: the one place that configures and builds build/ (or
# $GPIPE_BUILD_DIR), used by scripts/test.sh, experiments/run_amoebanet.sh and the table
# commands. The first time (no build files there yet) it configures a Release build with Ninja
# and clang when it is installed: clang compiles LibTorch's headers about 3x faster than gcc
# here (a full build: 8 min against 25 on 2 cores); CXX=g++ picks gcc for a new build folder
# (an existing one keeps its compiler). Then it builds TARGETs, or everything when none is named.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${GPIPE_BUILD_DIR:-$root/build}

if [[ ! -f "$build/build.ninja" && ! -f "$build/Makefile" ]]; then
  cxx=${CXX:-$(command -v clang++-14 || command -v c++ || true)}
  [[ -n "$cxx" ]] || { echo "build.sh: no C++ compiler (run scripts/install_deps.sh)" >&2; exit 1; }
  echo "build.sh: configuring $build (Release, Ninja, $cxx)" >&2
  # A configure that failed half-way leaves a cache behind: start that folder afresh.
  rm -f "$build/CMakeCache.txt"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_COMPILER="$cxx" >/dev/null
fi
targets=()
for target in "$@"; do targets+=(--target "$target"); done
cmake --build "$build" -j "$(nproc)" "${targets[@]}"
