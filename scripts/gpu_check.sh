#!/usr/bin/env bash
# gpu_check.sh: the one prepared check of the CUDA path, for a machine with a GPU and PyTorch 2.x.
#
#   scripts/gpu_check.sh --pack              # here (Debian): gather the build's other
#                                            # dependencies into .gpu_deps/ (git-ignored)
#   scripts/gpu_check.sh [--out DIR]         # there, with .gpu_deps/ beside the sources
#   scripts/gpu_check.sh --dry-run [--out DIR]   # here: every step on the CPU, against
#                                            # the PyTorch 2.x build CI makes
#
# Why it is one script: a GPU machine is lent now and then, for minutes, with PyTorch 2.x and
# its CMake config but none of Debian's packages and no internet. So the small dependencies
# (spdlog, fmt, CLI11, nlohmann-json, GoogleTest, Google Benchmark, Gloo's headers, zlib) travel
# from here in .gpu_deps/. The build is CI's second build (scripts/build.sh with
# GPIPE_TORCH_PYTHON, CUDA required) against that machine's python3, in build-torch2/. Then,
# stopping at the first failure:
#   1. the CUDA tests of core and models (core/tests/test_cuda.cpp,
#      models/tests/test_cuda_models.cpp), each test's result in DIR/*_cuda_tests.xml, and a
#      small AmoebaNet-D and Transformer-L trained as two stages on cuda:0 (DIR/<model>.json,
#      losses, step times and peak bytes, and DIR/<model>-trace.json);
#   2. the engine against a plain LibTorch loop of the same layers, the input placed alike
#      (host: copied each step; resident: already on the GPU), for the reference MLP (2048 x 8,
#      batch 1024) at M = 1, 4, 8 (engine_overhead);
#   3. the same MLP as a PyTorch eager loop in the machine's python3 (scripts/eager_reference.py);
#   4. AmoebaNet-D and Transformer-L, the engine at K=1 M=1 against the plain loop;
#   5. bf16: AmoebaNet-D and Transformer-L, the engine at K=1 M=1 against the plain loop, both
#      under autocast (engine_overhead --precision bf16), and AmoebaNet-D, Transformer-L and the
#      MLP as PyTorch eager loops under torch.autocast (scripts/eager_reference.py
#      --precision bf16);
#   6. gpipe_train on synthetic data for the quick presets (fashion-mnist-cpu's AmoebaNet-D,
#      transformer-cpu), two stages on cuda:0, in fp32 and in bf16, with step time, peak memory
#      per device and the bytes sent between the stages;
#   7. summary.md and summary.json.
# A dry run does all of it on the CPU with small sizes, so every step but the GPU's own is
# exercised here; its summary says so. Everything lands in DIR (default results/gpu, for a dry
# run results/gpu_dry_run), with gpu_check.log and the commands in commands.txt.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,35p' "$0" | sed 's/^# \{0,1\}//'; }
out=""
pack=0
dry=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --pack) pack=1 ;;
    --dry-run) dry=1 ;;
    --out) out=${2:?--out needs a folder}; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

deps=$PWD/.gpu_deps
pack_deps() {
  # Every file of these Debian packages but their documentation, under .gpu_deps/usr; their
  # CMake configs find their prefix relative to themselves.
  local packages=(libspdlog-dev libspdlog1.10 libfmt-dev libfmt9 libcli11-dev nlohmann-json3-dev
                  libgtest-dev libgmock-dev libbenchmark-dev libbenchmark1debian libgloo-dev
                  zlib1g-dev zlib1g)
  rm -rf "$deps"
  for p in "${packages[@]}"; do
    dpkg -L "$p" >/dev/null 2>&1 || { echo "gpu_check.sh: package $p is not installed (scripts/install_deps.sh)" >&2; exit 1; }
    dpkg -L "$p" | grep -v -e '/share/doc' -e '/share/lintian' | while read -r f; do
      if [[ -f $f || -L $f ]]; then
        mkdir -p "$deps$(dirname "$f")"
        cp -a "$f" "$deps$f"
      fi
    done
  done
  # A link to an absolute path names this machine's file (libz.so -> /lib/...): point it at the
  # packed copy instead, relative, so that it resolves wherever .gpu_deps is carried.
  find "$deps" -type l | while read -r link; do
    target=$(readlink "$link")
    [[ $target == /* && -e $deps$target ]] || continue
    ln -sfn "$(realpath --relative-to="$(dirname "$link")" "$deps$target")" "$link"
  done
  echo "gpu_check.sh: packed ${#packages[@]} packages into .gpu_deps ($(du -sh "$deps" | cut -f1)); carry .gpu_deps"
}
if [[ $pack -eq 1 ]]; then
  pack_deps
  exit 0
fi

[[ -n $out ]] || out=$([[ $dry -eq 1 ]] && echo results/gpu_dry_run || echo results/gpu)
mkdir -p "$out"
# Relative to the repository root when inside it, so that commands.txt reads the same anywhere.
out=$(cd "$out" && pwd)
out=${out#"$PWD"/}
exec > >(tee "$out/gpu_check.log") 2>&1
start=$SECONDS
step() { echo "== gpu_check [$((SECONDS - start)) s] $*"; }
fail() { echo "gpu_check FAILED: $*" >&2; exit 1; }
: >"$out/commands.txt"
# Runs a command from the repository root, after writing it to commands.txt.
record() {
  echo "$*" >>"$out/commands.txt"
  "$@"
}

step "device"
if [[ $dry -eq 1 ]]; then
  python=$(scripts/install_deps.sh --torch2) || fail "installing PyTorch 2.x for the dry run"
  device=cpu
else
  python=${GPIPE_TORCH_PYTHON:-python3}
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  device=cuda:0
fi
torch_version=$("$python" -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.is_available())' 2>/dev/null) ||
  fail "$python cannot import torch: this check needs PyTorch 2.x with its CMake config"
echo "torch $torch_version ($python)"
[[ $dry -eq 1 || $torch_version == *True ]] || fail "torch sees no GPU: run with --dry-run on a CPU machine"

step "build build-torch2 (CI's PyTorch 2.x build, CUDA required)"
extra=""
if [[ $dry -eq 0 ]]; then
  [[ -d $deps/usr ]] || fail ".gpu_deps/ is missing: run scripts/gpu_check.sh --pack on the build machine and carry .gpu_deps"
  extra=$deps/usr
  export LD_LIBRARY_PATH="$deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
fi
arch=$("$python" -c 'import torch; c = torch.cuda.get_device_capability(); print(f"{c[0]}.{c[1]}")' 2>/dev/null || echo 9.0)
# Warnings are errors in CI's build (clang); that machine's gcc may warn of other things, and
# its minutes are for measuring, so there they stay warnings.
werror=$([[ $dry -eq 1 ]] && echo ON || echo OFF)
GPIPE_TORCH_PYTHON=$python GPIPE_EXTRA_PREFIX=$extra GPIPE_CUDA_ARCH=$arch \
  GPIPE_CMAKE_ARGS="-DGPIPE_REQUIRE_CUDA=ON -DGPIPE_WERROR=$werror" \
  scripts/build.sh core_tests models_tests engine_overhead gpipe_train || fail "build"
bin=${GPIPE_BUILD_DIR:-build-torch2}/bin

step "CUDA tests"
export GPIPE_GPU_CHECK_OUT=$out  # the two-stage model runs write <model>.json and their traces
for t in core_tests models_tests; do
  record "$bin/$t" --gtest_filter='Cuda*' --gtest_output="xml:$out/${t%_tests}_cuda_tests.xml" ||
    fail "CUDA tests of $t"
done

# Sizes: the GPU's, or small ones that exercise the same code on the CPU in seconds.
if [[ $dry -eq 1 ]]; then
  mlp=(--in-features 256 --width 256 --layers 8 --classes 10 --batch-size 64)
  amoebanet=(--layers 1 --filters 16 --image-size 32 --batch-size 8)
  transformer=(--layers 2 --d-model 64 --ffn 256 --heads 4 --seq-len 32 --vocab 256 --batch-size 8)
  timing=(--rounds 1 --steps 2 --warmup 1)
  train=(--devices cpu:0,cpu:1 --steps 3)
else
  mlp=(--in-features 2048 --width 2048 --layers 8 --classes 10 --batch-size 1024)
  amoebanet=(--layers 6 --filters 64 --image-size 64 --batch-size 64)
  transformer=(--layers 8 --d-model 1024 --ffn 4096 --heads 16 --seq-len 256 --vocab 32000 --batch-size 16)
  timing=(--rounds 3 --steps 10 --warmup 3)
  train=(--devices cuda:0,cuda:0 --steps 40)
fi

step "engine against plain LibTorch, the MLP at M = 1, 4, 8"
record "$bin/engine_overhead" --model mlp "${mlp[@]}" --device "$device" --chunks 1,4,8 \
  "${timing[@]}" --json "$out/engine_overhead_mlp.json" || fail "engine_overhead mlp"

step "PyTorch eager reference, the same MLP"
record "$python" scripts/eager_reference.py --device "$device" "${mlp[@]}" --chunks 1,4,8 \
  "${timing[@]}" --json "$out/eager_mlp.json" || fail "eager_reference.py"

step "the paper's models, engine K=1 M=1 against the plain loop"
record "$bin/engine_overhead" --model amoebanet-d "${amoebanet[@]}" --device "$device" --chunks 1 \
  "${timing[@]}" --json "$out/engine_overhead_amoebanet-d.json" || fail "engine_overhead amoebanet-d"
record "$bin/engine_overhead" --model transformer-l "${transformer[@]}" --device "$device" \
  --chunks 1 "${timing[@]}" --json "$out/engine_overhead_transformer-l.json" ||
  fail "engine_overhead transformer-l"

step "bf16: the paper's models, engine K=1 M=1 against the plain loop, both under autocast"
for model in amoebanet-d transformer-l; do
  [[ $model == amoebanet-d ]] && sizes=("${amoebanet[@]}") || sizes=("${transformer[@]}")
  record "$bin/engine_overhead" --model "$model" "${sizes[@]}" --device "$device" --chunks 1 \
    --precision bf16 "${timing[@]}" --json "$out/engine_overhead_${model}_bf16.json" ||
    fail "engine_overhead $model --precision bf16"
done

step "bf16: PyTorch eager under torch.autocast, AmoebaNet-D, Transformer-L and the MLP"
record "$python" scripts/eager_reference.py --device "$device" --model amoebanet-d \
  --precision bf16 "${amoebanet[@]}" --chunks 1 "${timing[@]}" \
  --json "$out/eager_amoebanet-d_bf16.json" || fail "eager_reference.py amoebanet-d bf16"
record "$python" scripts/eager_reference.py --device "$device" --model transformer-l \
  --precision bf16 "${transformer[@]}" --chunks 1 "${timing[@]}" \
  --json "$out/eager_transformer-l_bf16.json" || fail "eager_reference.py transformer-l bf16"
record "$python" scripts/eager_reference.py --device "$device" --precision bf16 "${mlp[@]}" \
  --chunks 1,4,8 "${timing[@]}" --json "$out/eager_mlp_bf16.json" ||
  fail "eager_reference.py mlp bf16"

step "gpipe_train on synthetic data, the quick presets, fp32 and bf16"
for preset in fashion-mnist-cpu transformer-cpu; do
  for precision in fp32 bf16; do
    record "$bin/gpipe_train" --preset "$preset" --dataset synthetic "${train[@]}" \
      --precision "$precision" --eval-every -1 --log-every 10 \
      --json "$out/train_${preset}_$precision.json" ||
      fail "gpipe_train --preset $preset --precision $precision"
  done
done

step "summary"
"$python" scripts/gpu_summary.py "$out" --torch "$torch_version" --dry-run "$dry" ||
  fail "summary"
step "done: $out"
