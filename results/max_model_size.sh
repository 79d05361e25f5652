#!/usr/bin/env bash
# The exact command that made results/max_model_size.{md,csv,json,png} (GPipe Table 1).
# Memory figures do not depend on the machine's load; the quick preset takes about 4 minutes on
# 2 cores.
#
#   results/max_model_size.sh           (from anywhere; builds build/bin/max_model_size if needed)
set -euo pipefail
cd "$(dirname "$0")/.."
experiments/max_model_size --preset quick --out results/max_model_size
