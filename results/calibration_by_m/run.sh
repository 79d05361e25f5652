#!/usr/bin/env bash
# The command that makes results/calibration_by_m/ (scaling_table.* and step_breakdown.*): does
# the calibration of the projected tables (a one-device step over its projection,
# costs/calibration.h) depend on M? See README.md here for the run that made the files.
# Table 2's quick models calibrated at M = 1, 4, 16 and 32 in 3 rounds interleaved over the
# models and Ms (the Calibrations section); only K=2 is projected, nothing else measured. About
# 10 minutes on 2 cores.
#
#   results/calibration_by_m/run.sh    (from anywhere; builds build/bin/scaling_table if needed)
set -euo pipefail
cd "$(dirname "$0")/../.."
experiments/scaling_table --preset quick --tables 2 --partitions 2 --chunks 1,4,16,32 \
  --calibration-chunks 1,4,16,32 --max-measured-k 1 --out results/calibration_by_m/scaling_table
