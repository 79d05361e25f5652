#!/usr/bin/env bash
# gpu_check.sh: the one prepared check of the CUDA path, for a machine with a GPU and PyTorch.
#
#   scripts/gpu_check.sh --pack              # here (Debian): gather the build's other
#                                            # dependencies into .gpu_deps/ (git-ignored)
#   scripts/gpu_check.sh [--out DIR]         # there, with .gpu_deps/ beside the sources
#
# Why it is one script: a GPU machine is lent now and then, for minutes, with PyTorch 2.x and
# its CMake config but none of Debian's packages and no internet. So the header-only and small
# dependencies (spdlog, fmt, CLI11, nlohmann-json, GoogleTest, Google Benchmark) travel from
# here in .gpu_deps/, and the check configures a core-only CUDA build (GPIPE_CORE_ONLY: the
# engine, the models, their tests and gpipe_bench; the data loaders and gpipe_train need OpenCV,
# which that machine lacks) and then, stopping at the first failure, runs:
#   1. the CUDA tests: two stages on one GPU against the plain model (every checkpoint mode,
#      two schedules, deferred BatchNorm), dropout replayed under recompute, the memory meter
#      reading CUDA's caching allocator, and a small AmoebaNet-D and Transformer-L trained as
#      two stages on cuda:0 with their traces (core/tests/test_cuda.cpp,
#      models/tests/test_cuda_models.cpp);
#   2. gpipe_bench on CUDA: plain LibTorch, and K=1, K=2 (cuda:0,cuda:0) at M=1, 4, 8;
#   3. summary.md with the figures.
# Everything lands in DIR (default results/gpu): summary.md, summary.json, gpipe_bench.json,
# <model>.json, <model>-trace.json and gpu_check.log.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; }
out=results/gpu
pack=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --pack) pack=1 ;;
    --out) out=${2:?--out needs a folder}; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

deps=$PWD/.gpu_deps
if [[ $pack -eq 1 ]]; then
  # Every file of these Debian packages but their documentation, under .gpu_deps/usr; their
  # CMake configs find their prefix relative to themselves.
  packages=(libspdlog-dev libspdlog1.10 libfmt-dev libfmt9 libcli11-dev nlohmann-json3-dev
            libgtest-dev libgmock-dev libbenchmark-dev libbenchmark1debian)
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
  echo "gpu_check.sh: packed ${#packages[@]} packages into .gpu_deps ($(du -sh "$deps" | cut -f1)); carry .gpu_deps"
  exit 0
fi

mkdir -p "$out"
out=$(cd "$out" && pwd)
exec > >(tee "$out/gpu_check.log") 2>&1
start=$SECONDS
step() { echo "== gpu_check [$((SECONDS - start)) s] $*"; }
fail() { echo "gpu_check FAILED: $*" >&2; exit 1; }

step "device"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
[[ -d $deps/usr ]] || fail ".gpu_deps/ is missing: run scripts/gpu_check.sh --pack on the build machine and carry .gpu_deps"
torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)') ||
  fail "python3 cannot import torch: this check needs PyTorch with its CMake config"
torch_version=$(python3 -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.is_available())')
echo "torch $torch_version, CMake config in $torch_prefix"

step "configure build-cuda (core only)"
logs=/tmp/gpu_check_logs
mkdir -p "$logs"
arch=$(python3 -c 'import torch; c = torch.cuda.get_device_capability(); print(f"{c[0]}{c[1]}")' 2>/dev/null || echo 90)
cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DGPIPE_CORE_ONLY=ON \
  -DGPIPE_WERROR=OFF -DCMAKE_PREFIX_PATH="$torch_prefix;$deps/usr" \
  -DCMAKE_CUDA_ARCHITECTURES="$arch" -DTORCH_CUDA_ARCH_LIST="${arch:0:1}.${arch:1}" \
  > "$logs/configure.log" 2>&1 || { tail -40 "$logs/configure.log"; fail "configure"; }
grep "gpipe: Torch" "$logs/configure.log"
grep -q "CUDA ON" "$logs/configure.log" || fail "the PyTorch found has no CUDA targets (torch_cuda)"

step "build core_tests, models_tests, gpipe_bench"
export LD_LIBRARY_PATH="$deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
cmake --build build-cuda -j "$(nproc)" --target core_tests models_tests gpipe_bench \
  > "$logs/build.log" 2>&1 || { grep -m 20 -A 5 "error" "$logs/build.log"; fail "build"; }

step "CUDA tests"
export GPIPE_GPU_CHECK_OUT=$out
(cd build-cuda && ctest -R '^Cuda' --output-on-failure --timeout 120) || fail "CUDA tests"
for model in amoebanet-d transformer-l; do
  [[ -f $out/$model.json ]] || fail "the $model run wrote no $out/$model.json"
done

step "gpipe_bench on CUDA"
build-cuda/bin/gpipe_bench --benchmark_filter=Cuda --benchmark_out="$out/gpipe_bench.json" \
  --benchmark_out_format=json || fail "gpipe_bench"

step "summary"
python3 - "$out" "$torch_version" <<'EOF' || fail "summary"
import json, sys, pathlib
out, torch_version = pathlib.Path(sys.argv[1]), sys.argv[2]
bench = json.loads((out / "gpipe_bench.json").read_text())
rows = {b["name"]: b for b in bench["benchmarks"]}
lines = ["# GPU check", "", f"Device: {bench['context'].get('host_name', '?')}; torch {torch_version}.",
         "Made by: `scripts/gpu_check.sh` (see gpu_check.log).", "",
         "## gpipe_bench on CUDA (MLP 8 x 2048, batch 1024, SGD)", "",
         "| benchmark | ms/step | samples/s |", "|---|---|---|"]
for name, b in rows.items():
    lines.append(f"| {name} | {b['real_time']:.2f} | {b.get('items_per_second', 0):.0f} |")
def ratio(a, b):
    a, b = rows.get(a), rows.get(b)
    return f"{a['items_per_second'] / b['items_per_second']:.2f}" if a and b else "-"
k = "BM_PipelineMLPCuda/K:{}/M:{}/min_time:2.000/real_time"
lines += ["", f"Engine overhead, K=1 M=1 over plain: {ratio(k.format(1, 1), 'BM_PlainMLPCuda/min_time:2.000/real_time')}; "
          f"K=2 M=8 over K=2 M=1 (two stages share one GPU, so no speedup is expected): {ratio(k.format(2, 8), k.format(2, 1))}.", "",
          "## Models on cuda:0 as two stages (M=4, recompute except last, batch 32)", "",
          "| model | first loss | last loss | median step ms | peak bytes per stage |", "|---|---|---|---|---|"]
summary = {"torch": torch_version, "bench": rows, "models": {}}
for model in ("amoebanet-d", "transformer-l"):
    run = json.loads((out / f"{model}.json").read_text())
    steps = run["steps"]
    ms = sorted(s["step_ms"] for s in steps)[len(steps) // 2]
    lines.append(f"| {model} | {steps[0]['loss']:.4f} | {steps[-1]['loss']:.4f} | {ms:.2f} | {steps[-1]['peak_bytes']} |")
    summary["models"][model] = run
(out / "summary.md").write_text("\n".join(lines) + "\n")
(out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
print("\n".join(lines))
EOF
step "done: $out"
