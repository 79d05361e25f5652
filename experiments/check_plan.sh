#!/usr/bin/env bash
# Regenerates results/plan/: gpipe_plan's choices against measurement and a hand-picked grid.
# For the MLP, a small AmoebaNet-D and a small Transformer-L, each under a generous budget and a
# tight one (that forces K >= 2 or re-materialisation), gpipe_plan ranks the plans, runs its top
# 3 (--verify 3) and predicts and runs 13 hand-picked shapes (--grid), one of them two
# data-parallel replicas (R = 2, run as two gpipe_train processes). The 16 run in turn, 3 rounds
# over (--verify-rounds), so the machine's drift falls on all of them alike; each round also
# predicts each plan again from its calibration measured right before it (--verify-paired), which
# the machine's drift between planning and measuring does not move.
# summary.md/json: per scenario the prediction errors of every measured plan, the planner's first
# choice against the fastest grid shape that fit (measured), and the planning time.
# Usage: experiments/check_plan.sh [BUILD_DIR]   (run on an otherwise idle machine)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/build}/bin
GPIPE_BUILD_DIR=$(dirname "$bin") "$root/scripts/build.sh" gpipe_plan gpipe_train >&2
out=$root/results/plan
py=/usr/bin/python3
[[ -x $py ]] || py=python3
mkdir -p "$out"
rm -f "$out"/*.json "$out"/summary.md

grid="K=1,M=1,threads=2;K=1,M=4,threads=2;K=1,M=4,threads=2,checkpoint=always"
grid+=";K=2,M=2,schedule=gpipe;K=2,M=4,schedule=gpipe;K=2,M=8,schedule=gpipe"
grid+=";K=2,M=8,schedule=gpipe,checkpoint=always;K=2,M=4,schedule=1f1b;K=2,M=8,schedule=1f1b"
grid+=";K=2,M=4,schedule=zb-h1;K=2,M=8,schedule=interleaved-1f1b;K=2,M=4,schedule=zbv"
grid+=";K=1,R=2,M=1,threads=1"

mlp="--model mlp --layers 8 --width 2048 --in-features 1024 --batch-size 128"
amoebanet="--model amoebanet-d --layers 6 --filters 32 --image-size 32 --batch-size 32"
amoebanet+=" --optimizer rmsprop"
transformer="--model transformer-l --layers 8 --d-model 256 --ffn 1024 --heads 4 --seq-len 64"
transformer+=" --vocab 1024 --batch-size 32 --optimizer adam"

run() {  # NAME BUDGET FLAGS...
  local name=$1 budget=$2
  shift 2
  echo "== $name ($budget)" >&2
  # shellcheck disable=SC2068
  (cd "$root" && "$bin/gpipe_plan" $@ --memory-per-device "$budget" --top 5 \
    --verify 3 --verify-rounds 3 --verify-paired --grid "$grid" --json "results/plan/${name}.json")
}
run mlp-1GiB 1GiB $mlp
run mlp-256MiB 256MiB $mlp
run amoebanet-d-64MiB 64MiB $amoebanet
run amoebanet-d-16MiB 16MiB $amoebanet
run transformer-l-1GiB 1GiB $transformer
run transformer-l-160MiB 160MiB $transformer
"$py" "$root/scripts/plan_summary.py" "$out"
