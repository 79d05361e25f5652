#!/usr/bin/env bash
# Installs every Debian package the project needs, and nothing that is already there.
#
# Why a script: a fresh Debian 12 machine must go from clone to training with no manual step,
# and CI runs this first. It skips packages already installed, runs `apt-get update` only when
# something is missing, uses sudo when not root, and fails with a message naming the package
# that could not be had.
set -euo pipefail

packages=(
  # build tools
  build-essential cmake ninja-build pkg-config clang-format
  # LibTorch 1.13 (CPU) and the Gloo backend of c10d
  libtorch-dev libgloo-dev
  # BLAS and allocator: CPU pipelines do not scale without them (docs/design.md)
  libopenblas0-openmp libgoogle-perftools-dev
  # images, command lines, logging, JSON
  libopencv-dev libcli11-dev libspdlog-dev nlohmann-json3-dev
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev
  # the real data this machine trains on, and the plots
  dataset-fashion-mnist python3-matplotlib
  # multi-host tests create network namespaces
  iproute2
  # sanitizer and fuzzing builds (scripts/sanitize.sh, scripts/fuzz.sh): clang with libFuzzer
  clang-14 libclang-rt-14-dev
)

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install_deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo=()
if [[ $(id -u) -ne 0 ]]; then
  if ! command -v sudo >/dev/null; then
    echo "install_deps: need root or sudo to install: ${missing[*]}" >&2
    exit 1
  fi
  sudo=(sudo)
fi

echo "install_deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq || echo "install_deps: apt-get update failed; trying the cached lists" >&2
if ! "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"; then
  for p in "${missing[@]}"; do
    if ! apt-cache show "$p" >/dev/null 2>&1; then
      echo "install_deps: package '$p' is not available from the configured Debian archive" >&2
    fi
  done
  echo "install_deps: apt-get install failed for: ${missing[*]}" >&2
  exit 1
fi
echo "install_deps: done"
