#!/usr/bin/env bash
# results/scaling_check/contention.sh [ROUNDS]: how much slower one device's training step runs
# while the other core runs the same kind of work, for the quick preset's two models at M=4.
#
# Why: the scaling table's K=2 check projects from costs measured on one thread with the other
# core idle (the per-layer profile and the one-device calibration), while its measured run has
# two virtual devices busy at once, sharing the caches and memory bus. Each round runs one
# one-device step alone (gpipe_train -K 1, one thread), then two of them at once, and prints the
# median step of each; the ratio is the slowdown a K=2 run's devices suffer that the
# projection does not see. Run on an otherwise idle machine; about 2.5 minutes a round.
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-2}
ninja -C build bin/gpipe_train >/dev/null
export OMP_WAIT_POLICY=PASSIVE
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
amoebanet=(--model amoebanet-d --layers 26 --filters 16 --image-size 128 --classes 10
           --batch-size 256 --optimizer rmsprop)
transformer=(--model transformer-l --layers 32 --d-model 256 --ffn 1024 --heads 4 --vocab 2048
             --seq-len 64 --batch-size 64 --optimizer adam)
common=(-K 1 --threads-per-device 1 -M 4 --checkpoint always --steps 4 --progress off
        --log-level warn --eval-every -1)
median_ms() {  # the median of a summary's steps after the first, in ms
  python3 -c 'import json,statistics,sys; s=json.load(open(sys.argv[1]))["step_seconds"][1:]; print(f"{statistics.median(s)*1e3:.1f}")' "$1"
}
echo "| model | round | alone ms | two at once ms (each) | slowdown |"
echo "|---|---:|---:|---:|---:|"
for r in $(seq "$rounds"); do
  for name in amoebanet transformer; do
    declare -n flags=$name
    build/bin/gpipe_train "${flags[@]}" "${common[@]}" --json "$tmp/alone.json"
    build/bin/gpipe_train "${flags[@]}" "${common[@]}" --json "$tmp/a.json" &
    build/bin/gpipe_train "${flags[@]}" "${common[@]}" --json "$tmp/b.json" &
    wait
    alone=$(median_ms "$tmp/alone.json") a=$(median_ms "$tmp/a.json") b=$(median_ms "$tmp/b.json")
    python3 -c "import sys; al,a,b=map(float,sys.argv[1:]); print(f'| $name | $r | {al:.1f} | {a:.1f}, {b:.1f} | {(a+b)/2/al:.3f} |')" "$alone" "$a" "$b"
  done
done
