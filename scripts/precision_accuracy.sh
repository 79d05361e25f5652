#!/usr/bin/env bash
# Trains the fashion-mnist-cpu preset (experiments/run_amoebanet.sh's demonstration) twice with
# the same seed, in fp32 and in bf16, one after the other, and writes
# results/precision/accuracy.md: each run's final test top-1/top-5 and last loss, and the
# difference. Each run's own outputs go to results/precision/fashion_mnist_<precision>/.
#
#   scripts/precision_accuracy.sh [TRAINER FLAGS]   # e.g. --epochs 1 for a quick look
#   scripts/precision_accuracy.sh --summary-only    # accuracy.md again from the two runs' outputs
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${GPIPE_BUILD_DIR:-build}
out=results/precision
mkdir -p "$out"
summary_only=0
if [[ "${1:-}" == "--summary-only" ]]; then
  summary_only=1
  shift
fi
for precision in fp32 bf16; do
  [[ $summary_only -eq 1 ]] && break
  echo "precision_accuracy: training in $precision ..."
  OMP_WAIT_POLICY=PASSIVE "$build/bin/gpipe_train" --preset fashion-mnist-cpu \
    --precision "$precision" --output-dir "$out/fashion_mnist_$precision" --overwrite-results \
    --progress log --log-every 100 "$@"
done
python3 - "$out" "$*" <<'PY'
import json, sys
out = sys.argv[1]
extra = json.load(open(f"{out}/fashion_mnist_fp32/summary.json"))["command"]
rows = {}
for p in ("fp32", "bf16"):
    s = json.load(open(f"{out}/fashion_mnist_{p}/summary.json"))
    rows[p] = s
def top1(s): return 100 * s["final_test_top1"]
lines = ["# fashion-mnist-cpu in fp32 and bf16, same seed", "",
         "Made by `scripts/precision_accuracy.sh` (each run's command is in its summary.json: "
         f"`{extra}` and the same with `--precision bf16`). The two runs train one after the "
         "other; samples/s is what each saw, not a comparison of speed (speed_memory.md measures "
         "that in interleaved rounds).", "",
         "| precision | test top-1 % | test top-5 % | last loss | samples/s | parameter checksum |",
         "|---|---|---|---|---|---|"]
for p, s in rows.items():
    lines.append(f"| {p} | {top1(s):.2f} | {100 * s['final_test_top5']:.2f} | "
                 f"{s['losses'][-1]:.4f} | {s['throughput_samples_per_s']:.0f} | {s['param_checksum']:.4f} |")
lines += ["", f"bf16 - fp32 top-1: {top1(rows['bf16']) - top1(rows['fp32']):+.2f} points"]
open(f"{out}/accuracy.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
