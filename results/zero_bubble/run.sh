#!/usr/bin/env bash
# The exact command that made results/zero_bubble/: zb-h1 against gpipe at K=2, M=8 (no
# re-materialisation) on the scaling table's quick AmoebaNet-D (L=26, D=16, 128x128 images,
# batch 256) and Transformer-L (L=32, d=256, ffn 1024, seq 64, batch 64), now that every layer
# splits its backward (core/include/gpipe/backward_split.h).
#
# gpipe_plan measures each model's layers (the cache keeps each layer's W share), predicts both
# shapes with the simulator (one calibration, shared by both shapes: the predicted ratio is the
# simulator's) and measures them in turn, ROUNDS rounds (default 5), so the machine's drift falls
# on both alike. summary.md: per model the W share of the backward, the predicted and measured
# step of each schedule (median and range of the rounds) and the two ratios. About 20 minutes on
# 2 cores; run it on an otherwise idle machine.
#
#   results/zero_bubble/run.sh [ROUNDS]   |   results/zero_bubble/run.sh --summary-only
set -euo pipefail
cd "$(dirname "$0")/../.."
out=results/zero_bubble
grid="K=2,M=8,schedule=gpipe,checkpoint=never;K=2,M=8,schedule=zb-h1,checkpoint=never"
amoebanet=(--model amoebanet-d --layers 26 --filters 16 --image-size 128 --classes 10
  --batch-size 256)
transformer=(--model transformer-l --layers 32 --d-model 256 --ffn 1024 --heads 4 --vocab 2048
  --seq-len 64 --batch-size 64)
if [[ "${1:-}" != "--summary-only" ]]; then
  rounds=${1:-5}
  scripts/build.sh gpipe_plan gpipe_train >&2
  for name in amoebanet-d transformer-l; do
    if [[ $name == amoebanet-d ]]; then flags=("${amoebanet[@]}"); else flags=("${transformer[@]}"); fi
    rm -f "$out/$name.costs.json"
    build/bin/gpipe_plan "${flags[@]}" --top 1 --max-chunks 8 --max-replicas 1 --verify 0 \
      --verify-rounds "$rounds" --grid "$grid" --cache "$out/$name.costs.json" \
      --json "$out/$name.json" >&2
  done
fi
py=/usr/bin/python3
[[ -x $py ]] || py=python3
"$py" - "$out" > "$out/summary.md" <<'PY'
import json, statistics, sys
out = sys.argv[1]
print("# zb-h1 against gpipe at K=2, M=8, every layer split (`results/zero_bubble/run.sh`)\n")
print("Steps in ms. Predicted: the simulator over the measured layer costs, scaled by one "
      "calibration that both shapes share, so the predicted ratio is the simulator's. Measured: "
      "the two shapes run in turn, one round after another; median and range of the rounds.\n")
print("| model | W share of the backward | schedule | predicted | measured (median) | rounds "
      "(min-max) |\n|---|---:|---|---:|---:|---:|")
ratios = []
for name in ["amoebanet-d", "transformer-l"]:
    plan = json.load(open(f"{out}/{name}.json"))
    costs = json.load(open(f"{out}/{name}.costs.json"))
    micro = plan["batch_size"] // 8
    # The layer costs at the grid's micro-batch and one thread (the cache holds every size).
    layers = next(iter(costs.values()))["costs"][f"{micro}x1"]
    share = sum(layers["weight_ms"]) / sum(layers["backward_ms"])
    # The most zb-h1 can gain over gpipe on K equal stages: gpipe's step is (M+K-1)c for c a
    # stage's F+B+W of one micro-batch; zb-h1's bubble is (K-1)(F+B-W), 2(K-1)W less.
    K, M = 2, 8
    c = (sum(layers["forward_ms"]) + sum(layers["backward_ms"])) / K
    w = sum(layers["weight_ms"]) / K
    bound = (M + K - 1) * c / ((M + K - 1) * c - 2 * (K - 1) * w)
    rows = {g["schedule"]: g for g in plan["grid"]}
    for s in ["gpipe", "zb-h1"]:
        g = rows[s]
        r = g["measured_round_ms"]
        print(f"| {name} | {share:.2f} | {s} | {g['predicted_step_ms']:.1f} | "
              f"{statistics.median(r):.1f} | {min(r):.1f}-{max(r):.1f} |")
    predicted = rows["gpipe"]["predicted_step_ms"] / rows["zb-h1"]["predicted_step_ms"]
    measured = statistics.median(rows["gpipe"]["measured_round_ms"]) / statistics.median(
        rows["zb-h1"]["measured_round_ms"])
    paired = [a / b for a, b in zip(rows["gpipe"]["measured_round_ms"],
                                     rows["zb-h1"]["measured_round_ms"])]
    ratios.append((name, predicted, measured, paired, bound))
print("\n| model | zb-h1 over gpipe, measured (medians) | per round | simulated | simulated "
      "against measured | bound on equal stages |\n|---|---:|---|---:|---:|---:|")
for name, predicted, measured, paired, bound in ratios:
    rounds = " ".join(f"{p:.3f}" for p in paired)
    print(f"| {name} | {measured:.3f} | {rounds} | {predicted:.3f} | "
          f"{100 * (predicted / measured - 1):+.1f}% | {bound:.3f} |")
print("\nBound on equal stages: (M+K-1)c / ((M+K-1)c - 2(K-1)W), c a stage's F+B+W and W its "
      "weight gradients for one micro-batch (the measured layer costs over K): the whole of "
      "gpipe's bubble that zb-h1 can fill, with nothing paid for the split.")
PY
cat "$out/summary.md"
