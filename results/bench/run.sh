#!/usr/bin/env bash
# The exact command that made results/bench/gpipe_bench.json and summary.md: the engine's
# Google Benchmark (core/bench/bench_pipeline.cpp) and the ratios asked of it, from one run.
# This machine's speed drifts by several times within minutes, so a benchmark run after another
# may see a different machine: the run repeats every benchmark REPETITIONS times (default 6) in
# random order (--benchmark_enable_random_interleaving), so the drift falls on every benchmark
# alike, and the ratios are of medians. About 9 minutes on 2 cores; run it on an otherwise idle
# machine. Usage: results/bench/run.sh [REPETITIONS] | --summary-only (remakes summary.md from
# the JSON).
set -euo pipefail
cd "$(dirname "$0")/../.."
if [[ "${1:-}" != "--summary-only" ]]; then
  repetitions=${1:-6}
  scripts/build.sh gpipe_bench >&2  # configures build/ first on a fresh clone
  build/bin/gpipe_bench --benchmark_repetitions="$repetitions" \
    --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=false \
    --benchmark_out=results/bench/gpipe_bench.json --benchmark_out_format=json >/dev/null
fi
py=/usr/bin/python3
[[ -x $py ]] || py=python3
"$py" - results/bench/gpipe_bench.json > results/bench/summary.md <<'PY'
import json, re, statistics, sys
from collections import defaultdict
runs = defaultdict(list)  # benchmark -> its repetitions, in the order they ran
for b in json.load(open(sys.argv[1]))["benchmarks"]:
    if b.get("run_type", "iteration") == "iteration":
        runs[re.sub(r"/min_time:[^/]*", "", b["run_name"] if "run_name" in b else b["name"])].append(b)
rate = lambda name: statistics.median(b["items_per_second"] for b in runs[name])
plain = rate("BM_PlainMLP/real_time")
pipe = lambda k, m: rate(f"BM_PipelineMLP/K:{k}/M:{m}/real_time")
sched = lambda s: rate(f"BM_PipelineMLPSchedule/{s}/K:2/M:8/real_time")
reps = min(len(v) for v in runs.values())
print("# gpipe_bench: the reference MLP, samples/s (`results/bench/run.sh`)\n")
print(f"One run; every benchmark repeated {reps} times, the repetitions in random order so that "
      "the machine's drift falls on all alike. Median and range of the repetitions; the ratios "
      "are of medians.\n")
print("| benchmark | samples/s (median) | min-max | bubble (median) |\n|---|---:|---:|---:|")
order = lambda item: (item[1][0].get("family_index", 0), item[1][0].get("per_family_instance_index", 0))
for name, bs in sorted(runs.items(), key=order):
    x = [b["items_per_second"] for b in bs]
    bubble = f"{statistics.median(b['bubble'] for b in bs):.3f}" if "bubble" in bs[0] else "-"
    print(f"| {name} | {statistics.median(x):.1f} | {min(x):.1f}-{max(x):.1f} | {bubble} |")
print("\n| ratio | measured | required |\n|---|---:|---:|")
for label, value, need in [
    ("K:2/M:8 over K:1/M:8 (pipeline efficiency)", pipe(2, 8) / pipe(1, 8), 1.6),
    ("K:2/M:8 over K:2/M:1 (speedup over naive-2)", pipe(2, 8) / pipe(2, 1), 1.45),
    ("K:1/M:1 over BM_PlainMLP (engine overhead)", pipe(1, 1) / plain, 0.97),
    ("schedule gpipe K:2/M:8 over K:1/M:8 (efficiency, bound 16/9)", sched("gpipe") / pipe(1, 8), 1.72),
    ("schedule zb-h1 over gpipe, K:2/M:8", sched("zb-h1") / sched("gpipe"), 1.04)]:
    print(f"| {label} | {value:.3f} | >= {need} {'ok' if value >= need else 'MISSED'} |")
PY
cat results/bench/summary.md
