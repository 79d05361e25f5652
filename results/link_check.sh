#!/usr/bin/env bash
# The exact command that made results/link_check.{md,csv,json,png}: GPipe's Table 3 (PCIe, no
# NVLink) on the quick preset with its projection check repeated in 5 interleaved rounds (each a
# fresh profile and one-device calibration right before the K=2 run measured under the scaled
# link), because this machine's speed drifts by tens of percent between a profile and a
# measurement minutes apart. Run it on an otherwise idle machine; it takes about 11 minutes on
# 2 cores.
#
#   results/link_check.sh            (from anywhere; builds build/bin/scaling_table if needed)
set -euo pipefail
cd "$(dirname "$0")/.."
experiments/scaling_table --preset quick --tables 3 --check-rounds 5 --out results/link_check
