#!/usr/bin/env bash
# Rounds of the schedule comparison: gpipe and zb-h1 at K:2/M:8 and the K:1/M:8 reference, run
# back to back in one gpipe_bench process per round (this machine's speed drifts by several
# times within minutes, so single runs mislead). Writes results/bench/rounds.md and
# rounds_<n>.json. Usage: results/bench/rounds.sh [ROUNDS]   (default 4; idle machine)
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-4}
scripts/build.sh gpipe_bench >&2  # configures build/ first on a fresh clone
for r in $(seq 1 "$rounds"); do
  build/bin/gpipe_bench --benchmark_filter='BM_PipelineMLPSchedule/(gpipe|zb-h1)|BM_PipelineMLP/K:1/M:8' \
    --benchmark_min_time=6 --benchmark_out="results/bench/rounds_$r.json" \
    --benchmark_out_format=json >/dev/null 2>&1
done
py=/usr/bin/python3
[[ -x $py ]] || py=python3
"$py" - "$rounds" > results/bench/rounds.md <<'PY'
import json, re, statistics, sys
rows = []
for r in range(1, int(sys.argv[1]) + 1):
    b = {re.sub(r"/min_time:[^/]*", "", x["name"]): x["items_per_second"]
         for x in json.load(open(f"results/bench/rounds_{r}.json"))["benchmarks"]}
    k1 = b["BM_PipelineMLP/K:1/M:8/real_time"]
    g = b["BM_PipelineMLPSchedule/gpipe/K:2/M:8/real_time"]
    z = b["BM_PipelineMLPSchedule/zb-h1/K:2/M:8/real_time"]
    rows.append((r, k1, g, z, g / k1, z / g))
print("# gpipe_bench rounds: gpipe vs zb-h1 at K:2/M:8 (`results/bench/rounds.sh`)\n")
print("| round | K:1/M:8 | gpipe K:2/M:8 | zb-h1 K:2/M:8 | gpipe efficiency (>= 1.72) | zb-h1 / gpipe (>= 1.04) |")
print("|---|---:|---:|---:|---:|---:|")
for r, k1, g, z, e, s in rows:
    print(f"| {r} | {k1:.1f} | {g:.1f} | {z:.1f} | {e:.3f} | {s:.3f} |")
eff = [r[4] for r in rows]
sp = [r[5] for r in rows]
print(f"\nzb-h1 / gpipe: mean {statistics.mean(sp):.3f}, range {min(sp):.3f}-{max(sp):.3f} over {len(rows)} rounds.")
print(f"gpipe efficiency: mean {statistics.mean(eff):.3f}, range {min(eff):.3f}-{max(eff):.3f}.")
PY
cat results/bench/rounds.md
