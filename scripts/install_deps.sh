#!/usr/bin/env bash
# scripts/install_deps.sh [--torch2]: installs every Debian package the project needs, and
# nothing that is already there. With --torch2 it also installs the LibTorch that GPU users
# have, PyTorch 2.x with CUDA from the Python package registry, for the second build
# (scripts/test_torch2.sh, scripts/gpu_check.sh), and prints the Python that imports it.
#
# Why a script: a fresh Debian 12 machine must go from clone to training with no manual step,
# and CI runs this first. It skips packages already installed, runs `apt-get update` only when
# something is missing, uses sudo when not root, and fails with a message naming the package
# that could not be had.
set -euo pipefail

# The PyTorch of the GPU machines (2.11.0 with CUDA 13), in a virtual environment of its own
# (GPIPE_TORCH_VENV, default ~/.cache/gpipe/torch-2.11.0) that later runs find in place. The
# wheels (about 3 GB with CUDA's libraries) are kept in ~/.cache/gpipe/wheels-torch-2.11.0 (the
# registry's answers are not cached by pip), so a venv made afresh downloads only what is
# missing there.
torch_version=2.11.0
install_torch2() {
  local venv=${GPIPE_TORCH_VENV:-$HOME/.cache/gpipe/torch-$torch_version}
  # LibTorch's CMake config with CUDA needs the CUDA toolkit (nvcc, cuBLAS, cuDNN, NCCL headers).
  if ! command -v nvcc >/dev/null && [[ ! -x /usr/local/cuda/bin/nvcc ]]; then
    echo "install_deps: --torch2 needs the CUDA 13 toolkit (nvcc in PATH or /usr/local/cuda):" \
      "PyTorch's CMake config finds CUDA through it; install NVIDIA's cuda-toolkit-13" >&2
    exit 1
  fi
  local python=$venv/bin/python
  if ! "$python" -c "import torch; assert torch.__version__.split('+')[0] == '$torch_version'" \
      2>/dev/null; then
    echo "install_deps: installing torch==$torch_version into $venv" >&2
    python3 -m venv "$venv" >&2 || { echo "install_deps: python3 -m venv $venv failed (python3-venv)" >&2; exit 1; }
    local wheels=$HOME/.cache/gpipe/wheels-torch-$torch_version
    "$python" -m pip download --quiet -d "$wheels" "torch==$torch_version" >&2 &&
      "$python" -m pip install --quiet --no-index --find-links "$wheels" \
        "torch==$torch_version" >&2 ||
      { echo "install_deps: pip install torch==$torch_version failed" >&2; exit 1; }
  fi
  echo "$python"
}
torch2=0
for arg in "$@"; do
  case $arg in
    --torch2) torch2=1 ;;
    -h|--help) sed -n '2,5p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install_deps: unknown argument '$arg' (only --torch2)" >&2; exit 2 ;;
  esac
done

packages=(
  # build tools; ccache keeps every build folder's objects under ~/.cache/ccache (CMakeLists.txt);
  # python3-venv for the PyTorch 2.x build (--torch2)
  build-essential cmake ninja-build pkg-config clang-format ccache python3-venv
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
  echo "install_deps: all ${#packages[@]} packages present" >&2
  [[ $torch2 -eq 0 ]] || install_torch2
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

echo "install_deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq >&2 || echo "install_deps: apt-get update failed; trying the cached lists" >&2
if ! "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2; then
  for p in "${missing[@]}"; do
    if ! apt-cache show "$p" >/dev/null 2>&1; then
      echo "install_deps: package '$p' is not available from the configured Debian archive" >&2
    fi
  done
  echo "install_deps: apt-get install failed for: ${missing[*]}" >&2
  exit 1
fi
echo "install_deps: done" >&2
[[ $torch2 -eq 0 ]] || install_torch2
