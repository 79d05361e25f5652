#!/usr/bin/env bash
# What the headline run reproduces, and where: trains the fashion-mnist-cpu preset (the
# demonstration of experiments/run_amoebanet.sh: AmoebaNet-D, K=2, fp32, seed 0) on this machine
#   default       as it is;
#   balance       with the layers placed otherwise (--balance 2,7 for the preset's measured 3,6);
#   aten-scalar   with ATen's own kernels (elementwise ops, reductions, BatchNorm, pooling) held to
#                 their non-vector versions (ATEN_CPU_CAPABILITY=default);
#   libs-avx2     with oneDNN (convolutions) and OpenBLAS (matrix products) held to AVX2, as on
#                 a machine without AVX-512 (ONEDNN_MAX_CPU_ISA=AVX2, OPENBLAS_CORETYPE=Haswell);
# and writes results/kernel_paths/README.md: each run's test top-1, last loss, the first step
# whose loss differs from the default run's, and the parameter checksum, with the kernel
# libraries each run recorded (summary.json's "environment"). Each run's outputs go to
# results/kernel_paths/<name>/.
#
#   scripts/kernel_paths.sh [TRAINER FLAGS]   # e.g. --epochs 1 for a quick look
#   scripts/kernel_paths.sh --summary-only    # README.md again from the runs' outputs
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${GPIPE_BUILD_DIR:-build}
out=results/kernel_paths
mkdir -p "$out"
summary_only=0
if [[ "${1:-}" == "--summary-only" ]]; then
  summary_only=1
  shift
fi

train() {  # train NAME [FLAGS]: one run of the preset into $out/NAME
  local name=$1
  shift
  echo "kernel_paths: training '$name' ..."
  local before
  before=$(cut -d' ' -f1-3 /proc/loadavg)
  OMP_WAIT_POLICY=PASSIVE "$build/bin/gpipe_train" --preset fashion-mnist-cpu \
    --output-dir "$out/$name" --overwrite-results --progress log --log-every 200 "$@"
  echo "load average before: $before; after: $(cut -d' ' -f1-3 /proc/loadavg)" >"$out/$name/load.txt"
}

if [[ $summary_only -eq 0 ]]; then
  train default "$@"
  train balance --balance 2,7 "$@"
  ATEN_CPU_CAPABILITY=default train aten-scalar "$@"
  ONEDNN_MAX_CPU_ISA=AVX2 OPENBLAS_CORETYPE=Haswell train libs-avx2 "$@"
fi

python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
names = ["default", "balance", "aten-scalar", "libs-avx2"]
runs = {n: json.load(open(f"{out}/{n}/summary.json")) for n in names}
base = runs["default"]
def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"step {i + 1} ({x:.7f} vs {y:.7f})"
    return "none" if len(a) == len(b) else "length"
lines = ["# fashion-mnist-cpu across placements, load and kernel paths", "",
         "Made by `scripts/kernel_paths.sh`, one run after the other on one machine; each run's "
         "command and environment are in its summary.json, the load average around it in "
         "load.txt.", "",
         "| run | balance | test top-1 % | last loss | first loss differing from default | "
         "parameter checksum | CPU capability, overrides |", "|---|---|---|---|---|---|---|"]
for n, s in runs.items():
    env = s.get("environment", {})
    caps = [l for l in env.get("kernel_libraries", []) if "capability" in l]
    over = ", ".join(f"{k}={v}" for k, v in env.get("overrides", {}).items()) or "none"
    lines.append(f"| {n} | {','.join(map(str, s['balance']))} | {100 * s['final_test_top1']:.2f} | "
                 f"{s['losses'][-1]:.7f} | {first_difference(base['losses'], s['losses'])} | "
                 f"{s['param_checksum']:.10f} | {'; '.join(caps) or '?'}; {over} |")
env = base.get("environment", {})
lines += ["", f"CPU: {env.get('cpu_model')} ({', '.join(env.get('cpu_vector_extensions', []))}); "
          f"LibTorch {env.get('libtorch')}; " + "; ".join(env.get("kernel_libraries", []))]
open(f"{out}/README.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
