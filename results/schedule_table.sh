#!/usr/bin/env bash
# Regenerates results/schedule_table/: every schedule x K x M x re-materialisation against
# naive-2 for a small AmoebaNet-D and a small Transformer-L (experiments/schedule_table.cpp).
# K=2 is measured on two CPU virtual devices (ROUNDS interleaved rounds, default 3); K=4 is
# simulated from each model's measured layer costs. Writes <model>.md, .csv, .json and .png,
# and the time each model took in README.md's table. Run it on an otherwise idle machine.
#
#   results/schedule_table.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
out=results/schedule_table
scripts/build.sh schedule_table >&2
mkdir -p "$out"
py=/usr/bin/python3
[[ -x $py ]] || py=python3
table=(--ks 2,4 --ms 2,4,8 --checkpoints never,always --rounds "$rounds" --measure-warmup 1
  --measure-steps 2)
# SGD at a small learning rate: the loss column then shows the schedules' float summation order
# (1e-7), which a large rate would amplify over the steps into differences of 1e-4.
amoebanet=(--model amoebanet-d --layers 6 --filters 32 --image-size 64 --classes 10
  --batch-size 64 --optimizer sgd --lr 0.001)
transformer=(--model transformer-l --layers 8 --d-model 256 --ffn 1024 --heads 4 --vocab 2048
  --seq-len 64 --batch-size 32 --optimizer sgd --lr 0.001)
: >"$out/times.txt"
for name in amoebanet-d transformer-l; do
  if [[ $name == amoebanet-d ]]; then flags=("${amoebanet[@]}"); else flags=("${transformer[@]}"); fi
  start=$(date +%s)
  build/bin/schedule_table "${flags[@]}" "${table[@]}" --cache "$out/$name.costs.json" \
    --out "$out/$name" >/dev/null
  echo "$name $(($(date +%s) - start))" >>"$out/times.txt"
  "$py" - "$out/$name.json" "$out/$name.png" <<'PY'
import json, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
table = json.load(open(sys.argv[1]))
rows = [r for r in table["rows"] if r["checkpoint"] == "never" and r["M"] > 1]
panels = sorted({(r["K"], r["source"]) for r in rows})
schedules = list(dict.fromkeys(r["schedule"] for r in rows))
fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4), squeeze=False)
for ax, (K, source) in zip(axes[0], panels):
    ms = sorted({r["M"] for r in rows if r["K"] == K})
    width = 0.8 / len(schedules)
    for i, s in enumerate(schedules):
        ys = [next((r["speedup_over_naive2"] for r in rows
                    if r["K"] == K and r["M"] == m and r["schedule"] == s), 0) or 0 for m in ms]
        ax.bar([j + i * width for j in range(len(ms))], ys, width, label=s)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(ms))])
    ax.set_xticklabels([f"M={m}" for m in ms])
    ax.set_title(f"{table['model']}, K={K} ({source}), no re-materialisation")
    ax.set_ylabel("speedup over naive-2")
axes[0][-1].legend(fontsize=7, ncol=2)
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=100)
PY
done
echo "results/schedule_table.sh $rounds" >"$out/COMMAND"
cat "$out/times.txt"
