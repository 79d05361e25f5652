#!/usr/bin/env bash
# The exact command that made results/scaling_table.{md,csv,json,png} (GPipe Tables 2 and 3) and
# results/step_breakdown.{md,csv,json,png} (where Table 2's steps spend their time, and the
# bubble against M). Timings: run it on an otherwise idle machine. Each K=2 projection check runs
# 3 rounds, each a fresh calibration right before its measured run (this machine's speed drifts
# within minutes); the quick preset took 67 minutes on 2 cores (17 with one round).
#
#   results/scaling_table.sh            (from anywhere; builds build/bin/scaling_table if needed)
set -euo pipefail
cd "$(dirname "$0")/.."
experiments/scaling_table --preset quick --check-rounds 3 --out results/scaling_table
