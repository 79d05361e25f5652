#!/usr/bin/env bash
# What one change bought: two builds of engine_overhead (before and after the change) on the
# configuration of issue 47 (AmoebaNet-D, L=6, D=64, 64x64 images, batch 64, SGD, no
# re-materialisation), contender by contender, interleaved: each round runs every contender under
# both builds back to back, the order of the builds alternating by round, so the machine's drift
# falls on both alike. Prints, per contender, each build's step ms in every round, their medians
# and after/before. About 5 minutes with 3 rounds; run it on an otherwise idle machine.
#
#   results/amoebanet_speed/ab.sh BEFORE AFTER [ROUNDS]   (default 3)
#
# BEFORE and AFTER are engine_overhead programs, e.g. build/bin/engine_overhead copied aside
# before and after the change (the libraries are static, so a copied program keeps its code).
set -euo pipefail
if [[ $# -lt 2 || ! -x $1 || ! -x $2 ]]; then
  echo "usage: $0 BEFORE AFTER [ROUNDS] (two engine_overhead programs)" >&2
  exit 2
fi
before=$1 after=$2 rounds=${3:-3}
source "$(dirname "$0")/config.sh"
model=("${amoebanet_d[@]}" --steps 4)
contenders=(
  "plain-1t-mb64|--contenders plain --threads 1 --chunks 1"
  "plain-1t-mb8|--contenders plain --threads 1 --chunks 8"
  "plain-2t|--contenders plain --threads 2 --chunks 1"
  "K2-M4-zb-h1|--contenders engine -K 2 --balance-by time --chunks 4 --schedule zb-h1"
  "K2-M8-gpipe|--contenders engine -K 2 --balance-by time --chunks 8 --schedule gpipe"
  "K2-M8-zb-h1|--contenders engine -K 2 --balance-by time --chunks 8 --schedule zb-h1"
)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for ((round = 0; round < rounds; round++)); do
  order=(before after)
  ((round % 2 == 0)) || order=(after before)
  for entry in "${contenders[@]}"; do
    name=${entry%%|*}
    read -ra flags <<<"${entry#*|}"
    for which in "${order[@]}"; do
      program=$before
      [[ $which == after ]] && program=$after
      "$program" "${model[@]}" "${flags[@]}" --json "$tmp/$name.$which.$round.json" \
        >/dev/null 2>"$tmp/log" || { cat "$tmp/log" >&2; exit 1; }
    done
  done
  echo "round $((round + 1))/$rounds done" >&2
done
py=/usr/bin/python3
[[ -x $py ]] || py=python3
"$py" - "$tmp" "$rounds" "${contenders[@]%%|*}" <<'PY'
import json, statistics, sys
folder, rounds, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def step_ms(name, which, r):
    row = json.load(open(f"{folder}/{name}.{which}.{r}.json"))["rows"][0]
    return row["plain_ms_median"] or row["engine_ms_median"]
print("| contender | before, ms a step per round | after | median before | median after | after/before |")
print("|---|---|---|---:|---:|---:|")
for name in names:
    b = [step_ms(name, "before", r) for r in range(rounds)]
    a = [step_ms(name, "after", r) for r in range(rounds)]
    mb, ma = statistics.median(b), statistics.median(a)
    cells = lambda xs: " / ".join(f"{x:.1f}" for x in xs)
    print(f"| {name} | {cells(b)} | {cells(a)} | {mb:.1f} | {ma:.1f} | {ma / mb:.3f} |")
PY
