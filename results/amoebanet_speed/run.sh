#!/usr/bin/env bash
# The exact command that made results/amoebanet_speed/bench.json and bench.md: AmoebaNet-D
# (L=6, D=64, 64x64 images, batch 64, SGD, no re-materialisation) as a plain LibTorch loop at 1
# and 2 intra-op threads, as the engine at K=1, naive-2 (K=2, M=1) and K=2 at M = 2, 4, 8
# under gpipe and zb-h1 (stages balanced by measured time), all timed by build/bin/engine_overhead.
#
# Each contender runs in a process of its own: OpenMP keeps one team of threads per thread that
# ever ran a parallel region, so a plain loop at 2 threads on the main thread would leave a team
# beside the contenders after it. Rounds run every contender once, in an order rotated by one
# each round, so the machine's drift falls on all alike; a contender's figure is the median of
# its rounds' medians, and its range the slowest and fastest round. About 4 minutes on 2 cores
# with 5 rounds; run it on an otherwise idle machine.
#
#   results/amoebanet_speed/run.sh [ROUNDS]   (default 5)
#   results/amoebanet_speed/run.sh --summary-only   (remakes bench.md from bench.json)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=results/amoebanet_speed
source results/amoebanet_speed/config.sh
model=("${amoebanet_d[@]}" --steps 4)
contenders=(
  "plain-1t|--contenders plain --threads 1 --chunks 1"
  "plain-2t|--contenders plain --threads 2 --chunks 1"
  "K1-M1|--contenders engine --chunks 1"
  "naive-2|--contenders engine -K 2 --balance-by time --chunks 1"
  "K2-M2-gpipe|--contenders engine -K 2 --balance-by time --chunks 2 --schedule gpipe"
  "K2-M4-gpipe|--contenders engine -K 2 --balance-by time --chunks 4 --schedule gpipe"
  "K2-M8-gpipe|--contenders engine -K 2 --balance-by time --chunks 8 --schedule gpipe"
  "K2-M2-zb-h1|--contenders engine -K 2 --balance-by time --chunks 2 --schedule zb-h1"
  "K2-M4-zb-h1|--contenders engine -K 2 --balance-by time --chunks 4 --schedule zb-h1"
  "K2-M8-zb-h1|--contenders engine -K 2 --balance-by time --chunks 8 --schedule zb-h1"
)
if [[ "${1:-}" != "--summary-only" ]]; then
  rounds=${1:-5}
  scripts/build.sh engine_overhead >&2
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  n=${#contenders[@]}
  for ((round = 0; round < rounds; round++)); do
    for ((i = 0; i < n; i++)); do
      entry=${contenders[$(((i + round) % n))]}
      name=${entry%%|*}
      read -ra flags <<<"${entry#*|}"
      build/bin/engine_overhead "${model[@]}" "${flags[@]}" --json "$tmp/$name.$round.json" \
        >/dev/null 2>"$tmp/log"  || { cat "$tmp/log" >&2; exit 1; }
    done
    echo "round $((round + 1))/$rounds done" >&2
  done
  py=/usr/bin/python3
  [[ -x $py ]] || py=python3
  "$py" - "$tmp" "$out/bench.json" "${contenders[@]%%|*}" <<'PY'
import glob, json, os, sys
folder, target, names = sys.argv[1], sys.argv[2], sys.argv[3:]
runs = {}
for name in names:
    rounds = []
    for path in sorted(glob.glob(os.path.join(folder, name + ".*.json")),
                       key=lambda p: int(p.rsplit(".", 2)[1])):
        j = json.load(open(path))
        row = j["rows"][0]
        rounds.append(row["plain_ms"] or row["engine_ms"])
    runs[name] = {"config": {k: j[k] for k in ("contenders", "threads", "partitions", "schedule",
                                               "balance_by", "batch_size", "torch")}
                  | {"chunks": row["chunks"], "model": j["model"]},
                  "step_ms_per_round": rounds}
json.dump(runs, open(target, "w"), indent=1)
PY
fi
py=/usr/bin/python3
[[ -x $py ]] || py=python3
"$py" - "$out/bench.json" >"$out/bench.md" <<'PY'
import json, statistics, sys
runs = json.load(open(sys.argv[1]))
batch = next(iter(runs.values()))["config"]["batch_size"]
def rates(name):  # samples/s of each round's median step
    return [batch * 1000 / statistics.median(r) for r in runs[name]["step_ms_per_round"]]
rate = lambda name: statistics.median(rates(name))
rounds = min(len(r["step_ms_per_round"]) for r in runs.values())
print("# AmoebaNet-D on 2 cores: plain LibTorch against the engine (`results/amoebanet_speed/run.sh`)\n")
print(f"L=6, D=64, 64x64 images, batch {batch}, SGD, no re-materialisation; K=2 stages on cpu:0 "
      "and cpu:1 with one intra-op thread each, balanced by measured time. Every contender in a "
      f"process of its own, {rounds} rounds in rotated order; samples/s is the median of the "
      "rounds' medians (4 timed steps a round after 1 warm-up), the range the slowest and "
      "fastest round.\n")
print("| contender | samples/s | range | step ms |\n|---|---:|---:|---:|")
for name in runs:
    x = rates(name)
    print(f"| {name} | {rate(name):.1f} | {min(x):.1f}-{max(x):.1f} | {batch * 1000 / rate(name):.1f} |")
plain = max(rate("plain-1t"), rate("plain-2t"))
k2 = [n for n in runs if n.startswith("K2-")] + ["naive-2"]
best = max(k2, key=rate)
print("\n| ratio | measured | asked |\n|---|---:|---:|")
for label, value, need in [
    (f"best K=2 ({best}) over the faster plain loop", rate(best) / plain, 1.4),
    ("K2-M8-gpipe over naive-2", rate("K2-M8-gpipe") / rate("naive-2"), 1.0),
    ("K2-M8-zb-h1 over naive-2", rate("K2-M8-zb-h1") / rate("naive-2"), 1.0),
    ("K1-M1 over plain-2t", rate("K1-M1") / rate("plain-2t"), 0.97)]:
    print(f"| {label} | {value:.3f} | >= {need} {'ok' if value >= need else 'MISSED'} |")
print(f"\nThe bound of two one-thread stages: twice plain-1t, {2 * rate('plain-1t'):.1f} samples/s, "
      f"{2 * rate('plain-1t') / plain:.3f} of the faster plain loop, before any bubble.")
PY
cat "$out/bench.md"
