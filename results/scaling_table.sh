#!/usr/bin/env bash
# The exact command that made results/scaling_table.{md,csv,json,png} (GPipe Tables 2 and 3) and
# results/step_breakdown.{md,csv,json,png} (where Table 2's steps spend their time, and the
# bubble against M). Timings: run it on an otherwise idle machine; the quick preset takes about
# 17 minutes on 2 cores.
#
#   results/scaling_table.sh            (from anywhere; builds build/bin/scaling_table if needed)
set -euo pipefail
cd "$(dirname "$0")/.."
experiments/scaling_table --preset quick --out results/scaling_table
