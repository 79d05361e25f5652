#!/usr/bin/env bash
# scripts/build.sh [TARGET...]: the one place that configures and builds build/ (or
# $GPIPE_BUILD_DIR), used by scripts/test.sh, experiments/run_amoebanet.sh and the table
# commands. The first time (no build files there yet) it configures a Release build with Ninja
# and clang when it is installed: clang compiles LibTorch's headers about 3x faster than gcc
# here (a full build: 8 min against 25 on 2 cores); CXX=g++ picks gcc for a new build folder
# (an existing one keeps its compiler). Then it builds TARGETs, or everything when none is named.
# A folder configured with other options than this call's (the LibTorch, GPIPE_CMAKE_ARGS) is
# configured again first; the options are kept in <build>/gpipe_configure_args. The Debian build
# requires OpenCV (GPIPE_REQUIRE_OPENCV), so that its codec tests cannot skip unnoticed.
#
# GPIPE_TORCH_PYTHON=PY configures against the LibTorch inside PY's torch package instead of
# Debian's LibTorch 1.13: PyTorch 2.x with CUDA, as `scripts/install_deps.sh --torch2` installs
# it here and as a GPU machine's python3 has it. CI's second build (scripts/test_torch2.sh) and
# scripts/gpu_check.sh configure this way; such a build folder defaults to build-torch2.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
torch_python=${GPIPE_TORCH_PYTHON:-}
if [[ -n $torch_python ]]; then
  build=${GPIPE_BUILD_DIR:-$root/build-torch2}
else
  build=${GPIPE_BUILD_DIR:-$root/build}
fi

args=(-DCMAKE_BUILD_TYPE=Release)
if [[ -n $torch_python ]]; then
  prefix=$("$torch_python" -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null) ||
    { echo "build.sh: GPIPE_TORCH_PYTHON=$torch_python cannot import torch" >&2; exit 2; }
  # No CUDA kernel of ours is compiled; the list only quiets LibTorch's configure.
  args+=(-DCMAKE_PREFIX_PATH="$prefix${GPIPE_EXTRA_PREFIX:+;$GPIPE_EXTRA_PREFIX}"
         -DTORCH_CUDA_ARCH_LIST="${GPIPE_CUDA_ARCH:-9.0}")
else
  args+=(-DGPIPE_REQUIRE_OPENCV=ON)
fi
read -r -a extra <<<"${GPIPE_CMAKE_ARGS:-}"
args+=("${extra[@]}")
stamp=$build/gpipe_configure_args
if [[ ! -f "$build/build.ninja" || "$(cat "$stamp" 2>/dev/null)" != "${args[*]}" ]]; then
  cxx=${CXX:-$(command -v clang++-14 || command -v c++ || true)}
  [[ -n "$cxx" ]] || { echo "build.sh: no C++ compiler (run scripts/install_deps.sh)" >&2; exit 1; }
  echo "build.sh: configuring $build (Release, Ninja, $cxx${torch_python:+, torch of $torch_python})" >&2
  # A configure that failed half-way, or one with other options, leaves a cache behind: start
  # that folder's configuration afresh (its object files stay and are reused where they can).
  rm -f "$build/CMakeCache.txt" "$stamp"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" "${args[@]}" >/dev/null
  echo "${args[*]}" >"$stamp"
fi
targets=()
for target in "$@"; do targets+=(--target "$target"); done
cmake --build "$build" -j "$(nproc)" "${targets[@]}"
