#!/usr/bin/env bash
# scripts/sanitizers/configure.sh DIR KIND: configures a sanitizer build in DIR, at -O1 with line
# tables (readable reports, tolerable speed) and without the benchmarks, with clang (it compiles
# LibTorch's headers in half gcc's time here). KIND address is ASan+UBSan with libFuzzer's coverage
# (so the same build runs the CTest suite and the fuzz targets); KIND thread is TSan. Used by
# scripts/sanitize.sh and scripts/fuzz.sh. Each GoogleTest program runs as 4 CTest shards rather than
# one process per case (a process takes 2 s to start under ASan).
set -euo pipefail
dir=$1
kind=$2
cmake -S . -B "$dir" -G Ninja -DCMAKE_CXX_COMPILER="$(command -v clang++-14)" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DGPIPE_SANITIZE="$kind" \
  -DGPIPE_BUILD_BENCHMARKS=OFF -DGPIPE_CUDA_PARSE_CHECK=OFF \
  -DGPIPE_TEST_SHARDS=4 >/dev/null
