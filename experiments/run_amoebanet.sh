#!/usr/bin/env bash
# Trains AmoebaNet with GPipe.
#
#   experiments/run_amoebanet.sh                  # the CPU demonstration below
#   experiments/run_amoebanet.sh [TRAINER FLAGS]  # the same, with flags changed
#   experiments/run_amoebanet.sh --preset amoebanet-b-imagenet --data-dir /data/imagenet \
#       --devices cuda:0,cuda:1,cuda:2,cuda:3,cuda:4,cuda:5,cuda:6,cuda:7
#
# With no arguments, on a fresh Debian 12 machine: installs what is missing, builds the trainer,
# and trains a small AmoebaNet-D on the real Fashion-MNIST that Debian's dataset-fashion-mnist
# installs, pipelined over two CPU virtual devices (K=2, M=4), evaluating on the test split
# every epoch. It writes results/run_amoebanet/: metrics.jsonl (every step and evaluation),
# summary.json (final test top-1/top-5, losses, throughput, memory per device, parameter
# checksum), trace.json (the last step's timeline; open it in Perfetto or chrome://tracing) and
# COMMAND. Any flag of build/bin/gpipe_train (see --help) passes through; without --preset or
# --config the CPU preset experiments/presets/fashion-mnist-cpu.toml is the starting point.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
  echo
  echo "Trainer flags (build/bin/gpipe_train --help):"
fi

"$root/scripts/install_deps.sh"
build=${GPIPE_BUILD_DIR:-$root/build}
echo "run_amoebanet: building the trainer in $build ..."
# Ninja's progress lines are dropped; compiler errors still show, and a failed build stops here
# (pipefail) instead of running a stale trainer.
if ! GPIPE_BUILD_DIR=$build "$root/scripts/build.sh" gpipe_train |
  { grep -Ev '^\[[0-9]+/[0-9]+\]' || true; }; then
  echo "run_amoebanet: the build failed; see the compiler output above" >&2
  exit 1
fi

args=("$@")
has() {
  local flag
  for flag in "${args[@]}"; do [[ "$flag" == "$1" || "$flag" == "$1="* ]] && return 0; done
  return 1
}
if ! has --preset && ! has --config; then
  args=(--preset fashion-mnist-cpu "${args[@]}")
  if ! has --output-dir; then
    # Relative to where it runs (results/run_amoebanet from the repository root), so the
    # command recorded in summary.json holds no absolute path.
    # The demonstration regenerates the committed result there, so it replaces it.
    args+=(--output-dir "$(realpath --relative-to=. "$root/results/run_amoebanet")"
           --overwrite-results)
  fi
fi

command=(experiments/run_amoebanet.sh "$@")
set +e
"$build/bin/gpipe_train" "${args[@]}"
status=$?
set -e
for ((i = 0; i < ${#args[@]}; i++)); do
  if [[ "${args[$i]}" == "--output-dir" && $status -eq 0 ]]; then
    echo "${command[*]}" > "${args[$((i + 1))]}/COMMAND"
  fi
done
exit $status
