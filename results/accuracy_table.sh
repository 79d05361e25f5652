#!/usr/bin/env bash
# The exact command that made results/accuracy_table.{md,csv,json} and the runs in
# results/accuracy_table/ (GPipe Table 4 beside ours: naive-1, pipeline-2 and pipeline-4 of the
# fashion-mnist-cpu preset, then the transfer rows: pretraining on classes 0-4 and 5 fine-tuning
# and 5 from-scratch runs on 5-9). Accuracies do not depend on the machine's load; it trains 14
# runs and takes about 35 minutes on 2 cores.
#
#   results/accuracy_table.sh          (from anywhere; builds build/bin/accuracy_table if needed)
set -euo pipefail
cd "$(dirname "$0")/.."
experiments/tables/run_table.sh accuracy_table --out results
# The folder's COMMAND names this script, the command that works from a fresh clone.
echo results/accuracy_table.sh > results/accuracy_table/COMMAND
