#!/usr/bin/env bash
# The exact command that made results/max_model_size.{md,csv,json,png} (GPipe Table 1).
# Every row in fp32 (the paper's precision) and in bf16. Memory figures do not depend on the
# machine's load; the quick preset takes about 4 minutes a precision on 2 cores.
#
#   results/max_model_size.sh           (from anywhere; builds build/bin/max_model_size if needed)
set -euo pipefail
cd "$(dirname "$0")/.."
experiments/max_model_size --preset quick --precision fp32,bf16 --out results/max_model_size
