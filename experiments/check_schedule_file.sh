#!/usr/bin/env bash
# Regenerates results/schedule_file/: schedules from a file (core/include/gpipe/schedule_file.h).
#   1. A schedule written by hand (custom.txt: zb-h1's order with device 0's W's all left to the
#      end) drawn and simulated by gpipe_sim, then trained end to end: the Fashion-MNIST preset
#      (fashion-mnist-cpu: AmoebaNet-D, K=2, M=4) for one epoch, evaluated on the test set.
#   2. The round trip of every built-in schedule at K=4, M=8: gpipe_sim --write-schedule, read
#      back with --schedule file:PATH and written again; the two files and the simulated steps
#      must be equal.
#   3. Three hostile files (an F without its B, a dependency cycle, a stage no line runs): each
#      must end with exit 2 and one line naming the line, the action and the rule.
# Usage: experiments/check_schedule_file.sh [BUILD_DIR]   (about 2 minutes on 2 cores)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/build}/bin
GPIPE_BUILD_DIR=$(dirname "$bin") "$root/scripts/build.sh" gpipe_sim gpipe_train >&2
out=$root/results/schedule_file
mkdir -p "$out"
cd "$out"
rm -f ./*.txt ./*.json ./*.log summary.md
start=$(date +%s)

cat >custom.txt <<'EOF'
# Written by hand: zb-h1's order on device 1; device 0 runs every B first and leaves its W's
# to the end (F, B, W micro-batch.stage; one line per device).
F0.0 F1.0 B0.0 F2.0 B1.0 F3.0 B2.0 B3.0 W0.0 W1.0 W2.0 W3.0
F0.1 B0.1 W0.1 F1.1 B1.1 W1.1 F2.1 B2.1 W2.1 F3.1 B3.1 W3.1
EOF
"$bin/gpipe_sim" --schedule file:custom.txt --draw --json sim_custom.json >/dev/null \
  2>drawing_custom.txt
"$bin/gpipe_train" --preset fashion-mnist-cpu --schedule file:custom.txt --epochs 1 \
  --json train_custom.json 2>train_custom.log

schedules="gpipe 1f1b interleaved-1f1b zb-h1 zb-h2 zbv looped-bfs dualpipev v-half"
for s in $schedules; do
  "$bin/gpipe_sim" -K 4 -M 8 --schedule "$s" --write-schedule "written_$s.txt" \
    --json "sim_$s.json" >/dev/null
  "$bin/gpipe_sim" --schedule "file:written_$s.txt" --write-schedule "reread_$s.txt" \
    --json "sim_reread_$s.json" >/dev/null
done

printf 'F0.0 F1.0 B0.0\n' >hostile_missing_b.txt
printf 'F0.0 B0.0 F1.0 B1.0\nF1.1 F0.1 B0.1 B1.1\n' >hostile_cycle.txt
printf 'F0.0 B0.0\nF0.2 B0.2\n' >hostile_missing_stage.txt
for f in hostile_missing_b hostile_cycle hostile_missing_stage; do
  set +e
  "$bin/gpipe_sim" --schedule "file:$f.txt" >/dev/null 2>"$f.log"
  echo "exit $?" >>"$f.log"
  set -e
done

/usr/bin/python3 - "$schedules" "$(($(date +%s) - start))" <<'PY'
import json, sys
schedules, seconds = sys.argv[1].split(), sys.argv[2]
load = lambda f: json.load(open(f))
strip = lambda f: [l for l in open(f) if not l.startswith("#")]
train, sim = load("train_custom.json"), load("sim_custom.json")
top1 = train["evaluations"][-1]["test_top1"]
rows = []
for s in schedules:
    same_file = strip(f"written_{s}.txt") == strip(f"reread_{s}.txt")
    a, b = load(f"sim_{s}.json")["step_time"], load(f"sim_reread_{s}.json")["step_time"]
    rows.append(f"| {s} | {same_file} | {a:.1f} | {b:.1f} |")
hostile = []
for f in ["hostile_missing_b", "hostile_cycle", "hostile_missing_stage"]:
    text = open(f"{f}.txt").read().strip().replace("\n", " / ")
    log = open(f"{f}.log").read().strip().splitlines()
    hostile.append(f"| `{text}` | {log[-1]} | `{log[0]}` |")
with open("summary.md", "w") as out:
    out.write(f"""# Schedules from a file

Made by `experiments/check_schedule_file.sh` (see COMMAND) in {seconds} s.

## A schedule written by hand, trained end to end

`custom.txt` (zb-h1's order on device 1; device 0 leaves its W's to the end), drawn by
`gpipe_sim --schedule file:custom.txt --draw` (`drawing_custom.txt`):

```
{open("drawing_custom.txt").read().rstrip()}
```

Simulated at unit costs: bubble {sim["bubble_fraction"]:.4f}, peak in-flight
{max(sim["peak_inflight_per_device"]):.1f} micro-batches. Trained with
`gpipe_train --preset fashion-mnist-cpu --schedule file:custom.txt --epochs 1` (AmoebaNet-D,
K=2, M=4, the real Fashion-MNIST): {len(train["losses"])} steps, last loss
{train["losses"][-1]:.4f}, test top-1 after one epoch **{top1:.4f}** (`train_custom.json`,
`train_custom.log`).

## Round trip of every built-in schedule (K=4, M=8)

`gpipe_sim --schedule S --write-schedule written_S.txt`, then
`gpipe_sim --schedule file:written_S.txt --write-schedule reread_S.txt`: the same actions
(comment line aside) and the same simulated step. (core/tests/test_schedule_file.cpp checks the
lowered programs equal for every kind, K in 2..4, several M and every checkpoint mode.)

| schedule | files equal | step (built-in) | step (read back) |
|---|---|---|---|
""" + "\n".join(rows) + """

## Hostile files

| file (lines separated by /) | exit | the one line |
|---|---|---|
""" + "\n".join(hostile) + "\n")
print(open("summary.md").read())
PY
echo "experiments/check_schedule_file.sh" >COMMAND
