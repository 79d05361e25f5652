#!/usr/bin/env bash
# scripts/test_torch2.sh [CTEST ARGS...]: the second build CI runs on every submission: the same
# sources against the LibTorch that GPU users have, PyTorch 2.11 with CUDA from the Python
# package registry, in build-torch2/ (or $GPIPE_BUILD_DIR).
#
# It installs that PyTorch when missing (scripts/install_deps.sh --torch2), configures with CUDA
# on against its CMake config, compiles and links every target (the CUDA and NCCL code paths
# included: the machine has the CUDA toolkit but no GPU) with warnings as errors, then runs
# every test on the CPU, where the CUDA tests skip: the engine, models, data, drivers, trainer
# and the multi-process runs over c10d. GoogleTest programs run as 4 shards each here: a
# process linked with CUDA's libraries takes about a second to start. Extra arguments go to
# ctest (e.g. -L core_tests for one program's tests).
# Exits non-zero on any failure.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

start=$SECONDS
python=$(scripts/install_deps.sh --torch2)
echo "test_torch2: $("$python" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)' 2>/dev/null) ($((SECONDS - start)) s)"

build=${GPIPE_BUILD_DIR:-$root/build-torch2}
part=$SECONDS
GPIPE_TORCH_PYTHON=$python GPIPE_BUILD_DIR=$build \
  GPIPE_CMAKE_ARGS="-DGPIPE_REQUIRE_CUDA=ON -DGPIPE_TEST_SHARDS=4" scripts/build.sh
echo "test_torch2: built every target in $((SECONDS - part)) s"

part=$SECONDS
export OMP_WAIT_POLICY=PASSIVE
ctest --test-dir "$build" --output-on-failure --no-tests=error -j "$(nproc)" "$@"
echo "test_torch2: the tests took $((SECONDS - part)) s"

# PyTorch's own pipelining beside the engine, on this LibTorch (experiments/peers/): every
# schedule both have on a small MLP, one round, untimed in effect. It fails when either side
# cannot run a schedule or trains something else than its plain model (--strict).
part=$SECONDS
python3 experiments/peers/peers.py --python "$python" --ours "$build/bin/gpipe_train" --strict \
  --set in-features=32 --set width=32 --set layers=3 --set batch-size=16 --chunks 4 \
  --rounds 1 --check-steps 2 --steps 1 --out "$build/peers_check/peers"
echo "test_torch2: PyTorch's pipelining beside the engine took $((SECONDS - part)) s"
