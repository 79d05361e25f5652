#!/usr/bin/env bash
# The exact command that made results/amoebanet_speed/breakdown.json and breakdown.md: where a
# step of AmoebaNet-D (L=6, D=64, 64x64 images, batch 64, SGD) goes, per operation kind and per
# micro-batch size. build/bin/engine_overhead --op-profile times the plain LibTorch loop on one
# intra-op thread with the batch as M = 1, 2, 4, 8 micro-batches in sequence (micro-batches of
# 64, 32, 16, 8), and the engine at K=2 M=8 under zb-h1, and records each operator's self time
# (ATen operators and autograd nodes): the engine's both stages together, and each stage apart
# (stage k runs on cpu:k's worker thread). About 1 minute.
#
#   results/amoebanet_speed/breakdown.sh [OUT_PREFIX] [ENGINE_OVERHEAD]
#   (defaults: results/amoebanet_speed/breakdown, build/bin/engine_overhead)
set -euo pipefail
cd "$(dirname "$0")/../.."
prefix=${1:-results/amoebanet_speed/breakdown}
program=${2:-build/bin/engine_overhead}
[[ $# -ge 2 ]] || scripts/build.sh engine_overhead >&2
source results/amoebanet_speed/config.sh
model=("${amoebanet_d[@]}" --steps 3)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$program" "${model[@]}" --contenders plain --threads 1 --chunks 1,2,4,8 \
  --op-profile "$tmp/plain.json" >"$tmp/plain.txt" 2>/dev/null
"$program" "${model[@]}" --contenders engine -K 2 --balance-by time --schedule zb-h1 --chunks 8 \
  --op-profile "$tmp/engine.json" >"$tmp/engine.txt" 2>/dev/null
py=/usr/bin/python3
[[ -x $py ]] || py=python3
"$py" - "$tmp" "$prefix" <<'PY'
import json, re, sys
folder, prefix = sys.argv[1], sys.argv[2]
# Operation kinds, first match wins.
kinds = [("DeferredBatchNorm statistics", r"var_mean"),
         ("convolution", r"conv"),
         ("BatchNorm", r"batch_norm"),
         ("pooling", r"pool"),
         ("concatenation", r"aten::cat|CatBackward"),
         ("ReLU", r"relu|clamp_min|threshold_backward"),
         ("copies and dtype casts", r"copy|aten::to$|_to_copy|contiguous|clone"),
         ("autograd engine", r"autograd::|AccumulateGrad"),
         ("matrix products", r"aten::(addmm|mm|bmm|matmul|linear)"),
         ("element-wise and reductions", r"aten::(add|mul|div|sub|sum|mean|neg|fill|zero)"),
         ("allocation and views", r"aten::(empty|view|reshape|slice|narrow|as_strided|select|expand|t$|transpose|permute|detach|split|chunk|unsqueeze|squeeze|alias|resize)"),
         ("other", r".")]
def kind_of(name):
    return next(k for k, pattern in kinds if re.search(pattern, name))
def step_ms(text):  # the table's last column with a number: plain or engine ms per row
    rows = [line.split() for line in text.splitlines() if line[:1].isdigit()]
    return [float(r[2]) if r[2] != "-" else float(r[3]) for r in rows]
out = {"runs": []}
for name in ("plain", "engine"):
    profile = json.load(open(f"{folder}/{name}.json"))
    times = step_ms(open(f"{folder}/{name}.txt").read())
    for row, ms in zip(profile["rows"], times):
        parts = [("all", row[name]["all"])]
        if name == "engine":  # and each stage apart: stage k on cpu:k
            parts += sorted((w, ops) for w, ops in row[name]["by_thread"].items()
                            if w.startswith("cpu:"))
        for where, ops in parts:
            by_kind = {}
            for op, v in ops.items():
                entry = by_kind.setdefault(kind_of(op), {"self_ms": 0.0, "calls": 0.0})
                entry["self_ms"] += v["self_ms_per_step"]
                entry["calls"] += v["calls_per_step"]
            if name == "plain":
                label = f"plain, 1 thread, micro-batch {64 // row['chunks']}"
            elif where == "all":
                label = "engine K=2 M=8 zb-h1, both stages"
            else:
                label = f"engine, stage {where[4:]} ({where})"
            out["runs"].append({"run": label, "chunks": row["chunks"], "step_ms": ms,
                                "by_kind": by_kind, "operators": ops})
json.dump(out, open(prefix + ".json", "w"), indent=1)
with open(prefix + ".md", "w") as md:
    md.write("Self milliseconds per step by operation kind (calls per step in brackets); "
             "`step ms` is the step's time with the profiler's cost in it.\n\n")
    md.write("| kind | " + " | ".join(r["run"] for r in out["runs"]) + " |\n")
    md.write("|---|" + "---:|" * len(out["runs"]) + "\n")
    for k, _ in kinds:
        cells = [r["by_kind"].get(k) for r in out["runs"]]
        if not any(cells): continue
        md.write(f"| {k} | " + " | ".join(
            f"{c['self_ms']:.1f} ({c['calls']:.0f})" if c else "-" for c in cells) + " |\n")
    md.write("| **sum of self times** | " + " | ".join(
        f"{sum(c['self_ms'] for c in r['by_kind'].values()):.1f}" for r in out["runs"]) + " |\n")
    md.write("| **step ms** | " + " | ".join(f"{r['step_ms']:.1f}" for r in out["runs"]) + " |\n")
PY
cat "$prefix.md"
