#!/usr/bin/env bash
# Regenerates results/schedule_table/: every schedule x K x M x re-materialisation against
# naive-2 for a small AmoebaNet-D and a small Transformer-L (experiments/schedule_table.cpp).
# K=2 is measured on two CPU virtual devices (ROUNDS interleaved rounds, default 3); K=4 is
# simulated from each model's measured layer costs. Writes <model>.md, .csv, .json and .png,
# and the time each model took in README.md's table. Run it on an otherwise idle machine.
#
#   results/schedule_table.sh [ROUNDS]   |   results/schedule_table.sh --summary-only
set -euo pipefail
cd "$(dirname "$0")/.."
out=results/schedule_table
py=/usr/bin/python3
[[ -x $py ]] || py=python3
summarise() {  # summary.md: per model the time, the best cell of each K and the prediction error
  "$py" - "$out" >"$out/summary.md" <<'PY'
import json, statistics, sys
out = sys.argv[1]
times = dict(line.split() for line in open(f"{out}/times.txt"))
print("# Schedules against naive-2 (`results/schedule_table.sh`)\n")
print("Per model: the whole table (`<model>.md`, `.csv`, `.json`, `.png`), the time it took, the "
      "fastest cell of each K (measured at K=2 on two CPU virtual devices, simulated at K=4), "
      "and how far the simulator's prediction of each measured cell was from the measurement "
      "(predicted over measured, minus 1).\n")
print("| model | seconds | cells (measured) | fastest K=2 (measured) | fastest K=4 (simulated) "
      "| prediction error of measured cells: median (min, max) | largest loss difference |")
print("|---|---:|---|---|---|---|---:|")
for name in ["amoebanet-d", "transformer-l"]:
    rows = json.load(open(f"{out}/{name}.json"))["rows"]
    measured = [r for r in rows if r["source"] == "measured"]
    errors = [r["predicted_step_ms"] / r["step_ms"] - 1 for r in measured if r["M"] > 1]
    best = {}
    for K, source in [(2, "measured"), (4, "simulated")]:
        r = max((r for r in rows if r["K"] == K and r["source"] == source),
                key=lambda r: r["speedup_over_naive2"])
        best[K] = f"{r['schedule']} M={r['M']} {r['checkpoint']}: {r['speedup_over_naive2']:.3f}x"
    loss = max(r["max_loss_difference"] or 0 for r in rows)
    print(f"| {name} | {times[name]} | {len(rows)} ({len(measured)}) | {best[2]} | {best[4]} | "
          f"{statistics.median(errors):+.1%} ({min(errors):+.1%}, {max(errors):+.1%}) | {loss:.1e} |")
families = {"fused": {"gpipe", "1f1b", "interleaved-1f1b", "looped-bfs"},
            "split": {"zb-h1", "zb-h2"}, "v": {"zbv", "dualpipev", "v-half"}}
print("\nThe same prediction errors by schedule family (each family has its own calibration, "
      "costs/calibration.h): median (min, max) over the measured cells with M > 1.\n")
print("| model | " + " | ".join(families) + " |")
print("|---|" + "---|" * len(families))
for name in ["amoebanet-d", "transformer-l"]:
    rows = json.load(open(f"{out}/{name}.json"))["rows"]
    cells = []
    for family, kinds in families.items():
        errors = [r["predicted_step_ms"] / r["step_ms"] - 1 for r in rows
                  if r["source"] == "measured" and r["M"] > 1 and r["schedule"] in kinds]
        cells.append(f"{statistics.median(errors):+.1%} ({min(errors):+.1%}, {max(errors):+.1%}), "
                     f"{len(errors)} cells" if errors else "-")
    print(f"| {name} | " + " | ".join(cells) + " |")
PY
  cat "$out/summary.md"
}
if [[ "${1:-}" == "--summary-only" ]]; then
  summarise
  exit 0
fi
rounds=${1:-3}
scripts/build.sh schedule_table >&2
mkdir -p "$out"
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
summarise
