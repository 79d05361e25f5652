#!/usr/bin/env bash
# The exact command that made results/bench/gpipe_bench.json and summary.md: the engine's
# Google Benchmark (core/bench/bench_pipeline.cpp) and the ratios asked of it, all from one run. Run it on an otherwise idle machine (about 2 minutes on 2 cores);
# `--summary-only` remakes summary.md from the JSON.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [[ "${1:-}" != "--summary-only" ]]; then
  scripts/build.sh gpipe_bench >&2  # configures build/ first on a fresh clone
  build/bin/gpipe_bench --benchmark_out=results/bench/gpipe_bench.json --benchmark_out_format=json
fi
python3 - results/bench/gpipe_bench.json > results/bench/summary.md <<'PY'
import json, re, sys
runs = {re.sub(r"/min_time:[^/]*", "", b["name"]): b
        for b in json.load(open(sys.argv[1]))["benchmarks"]}
rate = lambda name: runs[name]["items_per_second"]
plain = rate("BM_PlainMLP/real_time")
pipe = lambda k, m: rate(f"BM_PipelineMLP/K:{k}/M:{m}/real_time")
sched = lambda s: rate(f"BM_PipelineMLPSchedule/{s}/K:2/M:8/real_time")
print("# gpipe_bench: the reference MLP, samples/s (one run, `results/bench/run.sh`)\n")
print("| benchmark | samples/s | bubble |\n|---|---:|---:|")
for name, b in runs.items():
    bubble = f"{b['bubble']:.3f}" if "bubble" in b else "-"
    print(f"| {name} | {b['items_per_second']:.1f} | {bubble} |")
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
