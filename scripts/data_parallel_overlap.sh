#!/usr/bin/env bash
# How much of the data-parallel gradient all-reduce the backward hides.
#
#   scripts/data_parallel_overlap.sh [--rounds N] [--steps S] [--results DIR]
#
# Two replicas (two processes, one stage each) of an MLP with 64 MiB of gradients (4 hidden
# layers of 2048x2048) train on synthetic batches of 512. Each round runs, back to back, the
# default 25 MiB buckets (summed while the backward goes on) and one bucket larger than all the
# gradients (summed only once the backward has ended: no overlap). From each run's summary.json
# (rank 0) it takes grad_reduce_ms (the communication thread's time on the buckets) and
# grad_reduce_exposed_ms (what the step waited for), the first step left out, and writes
# DIR/summary.{json,md} (default results/data_parallel) with the command in DIR/COMMAND.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=3
steps=8
results=results/data_parallel
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --results) results=$2; shift 2 ;;
    -h | --help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

scripts/build.sh gpipe_train >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$results"
echo "scripts/data_parallel_overlap.sh --rounds $rounds --steps $steps --results $results" \
  >"$results/COMMAND"

port=29611
for ((round = 1; round <= rounds; ++round)); do
  for bucket in 25 1024; do
    port=$((port + 1))
    scripts/launch.sh --nproc-per-node 2 --master-port "$port" -- build/bin/gpipe_train \
      --distributed --model mlp --layers 4 --width 2048 --in-features 2048 --classes 16 \
      --balance 5 --chunks 1 --batch-size 512 --steps "$steps" --threads-per-device 1 \
      --optimizer sgd --lr 0.01 --progress off --bucket-mb "$bucket" \
      --json "$work/round$round-bucket$bucket.json" >"$work/log" 2>&1 ||
      { tail -5 "$work/log"; exit 1; }
    echo "round $round, --bucket-mb $bucket: done"
  done
done

python3 - "$work" "$results" "$rounds" <<'PY'
import glob, json, statistics, sys
work, results, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = []
for bucket in (25, 1024):
    per_round = []
    for r in range(1, rounds + 1):
        s = json.load(open(f"{work}/round{r}-bucket{bucket}.json"))
        total = statistics.mean(s["grad_reduce_ms"][1:])
        exposed = statistics.mean(s["grad_reduce_exposed_ms"][1:])
        step = statistics.mean(s["step_seconds"][1:]) * 1000
        per_round.append({"grad_reduce_ms": total, "grad_reduce_exposed_ms": exposed,
                          "exposed_fraction": exposed / total, "step_ms": step})
    fractions = [p["exposed_fraction"] for p in per_round]
    rows.append({"bucket_mb": bucket, "gradient_mib": s["parameters"] * 4 / 2**20,
                 "rounds": per_round,
                 "exposed_fraction_mean": statistics.mean(fractions),
                 "exposed_fraction_min": min(fractions),
                 "exposed_fraction_max": max(fractions),
                 "step_ms_mean": statistics.mean(p["step_ms"] for p in per_round)})
json.dump({"replicas": 2, "stages": 1, "model": "mlp 4x2048 (+ classifier)", "rows": rows},
          open(f"{results}/summary.json", "w"), indent=1)
with open(f"{results}/summary.md", "w") as md:
    md.write("# Data-parallel all-reduce: how much the step waits for\n\n")
    md.write(f"2 replicas (processes) of a {rows[0]['gradient_mib']:.0f} MiB-gradient MLP, "
             f"batch 512, M=1, Gloo over loopback, this 2-core machine; {rounds} rounds, the two "
             "bucket sizes back to back in each; per run the mean over steps 2.., rank 0.\n\n")
    md.write("| --bucket-mb | all-reduce ms | exposed ms | exposed / all-reduce (mean, min-max) "
             "| step ms |\n|---|---|---|---|---|\n")
    for row in rows:
        total = statistics.mean(p["grad_reduce_ms"] for p in row["rounds"])
        exposed = statistics.mean(p["grad_reduce_exposed_ms"] for p in row["rounds"])
        md.write(f"| {row['bucket_mb']} | {total:.1f} | {exposed:.1f} | "
                 f"{row['exposed_fraction_mean']:.2f} ({row['exposed_fraction_min']:.2f}-"
                 f"{row['exposed_fraction_max']:.2f}) | {row['step_ms_mean']:.0f} |\n")
    md.write("\n1024 MiB is one bucket holding every gradient: it can start only when the "
             "backward has ended, so nearly all of it is exposed; 25 MiB buckets start as the "
             "backward produces them (grad_reducer.h).\n")
print(open(f"{results}/summary.md").read())
PY
