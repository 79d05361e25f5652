#!/usr/bin/env bash
# The exact commands that produced the files in this folder: one model_info run per
# configuration of GPipe's Table 1 and Table 4, each writing <name>.json and <name>.log, then
# table.md (ours against the paper's counts) from the JSON files.
#
#   results/model_info/commands.sh      (from anywhere; builds build/bin/model_info if needed)
set -euo pipefail
cd "$(dirname "$0")"
../../scripts/build.sh model_info >&2
bin=../../build/bin/model_info

run() {  # run NAME PAPER_PARAMETERS ARGS...
  local name=$1 paper=$2
  shift 2
  echo "model_info $* --paper-parameters $paper --json $name.json" | tee "$name.log"
  "$bin" "$@" --paper-parameters "$paper" --json "$name.json" 2>&1 | tee -a "$name.log"
}

amoeba=(--classes 1000 --image-size 224 --channels 3 --partitions 8 --balance-by params)
run amoebanet-d_18_208 82e6 --model amoebanet-d --layers 18 --filters 208 "${amoeba[@]}"
run amoebanet-d_18_416 318e6 --model amoebanet-d --layers 18 --filters 416 "${amoeba[@]}"
run amoebanet-d_18_544 542e6 --model amoebanet-d --layers 18 --filters 544 "${amoeba[@]}"
run amoebanet-d_36_544 1.05e9 --model amoebanet-d --layers 36 --filters 544 "${amoeba[@]}"
run amoebanet-d_72_512 1.8e9 --model amoebanet-d --layers 72 --filters 512 "${amoeba[@]}"
run amoebanet-b_18_512 557e6 --model amoebanet-b --layers 18 --filters 512 "${amoeba[@]}"

# Transformer-L counts analytically; --verify-by-building also builds each layer and checks it.
transformer=(--d-model 2048 --ffn 8192 --heads 32 --vocab 32000 --seq-len 1024 --balance-by params
  --verify-by-building)
# L = 3 has 5 layers (embedding, 3 decoder layers, head), so at most 5 partitions.
run transformer-l_3 282.2e6 --model transformer-l --layers 3 --partitions 4 "${transformer[@]}"
run transformer-l_13 785.8e6 --model transformer-l --layers 13 --partitions 8 "${transformer[@]}"
run transformer-l_103 5.3e9 --model transformer-l --layers 103 --partitions 8 "${transformer[@]}"

python3 make_table.py ./*.json > table.md
cat table.md
