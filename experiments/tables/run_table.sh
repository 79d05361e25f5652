#!/usr/bin/env bash
# run_table.sh NAME ARGS...: what experiments/scaling_table and experiments/max_model_size do,
# and what results/accuracy_table.sh runs.
#
# Why this file exists: a user expects `experiments/<table> --preset quick` to work from a fresh
# clone. This builds build/bin/NAME if needed (configuring build/ first if there is none), runs
# it with OMP_WAIT_POLICY=PASSIVE (idle OpenMP threads must not spin on a shared CPU; it has to
# be set before the program starts) and ARGS, and then draws OUT.png from the OUT.json the run
# wrote (OUT from --out, default results/NAME) with scripts/plot_NAME.py, when python3 with
# matplotlib is installed. GPIPE_BUILD_DIR overrides the build folder.
set -euo pipefail
name=$1
shift
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${GPIPE_BUILD_DIR:-$root/build}

GPIPE_BUILD_DIR=$build "$root/scripts/build.sh" "$name" >&2

out=results/$name
plot=yes
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case ${args[i]} in
    --out) out=${args[i + 1]:-} ;;
    --out=*) out=${args[i]#--out=} ;;
    --help | -h) plot=no ;;
  esac
done

export OMP_WAIT_POLICY=PASSIVE
"$build/bin/$name" "$@"

if [[ $plot == yes && -n $out && -f $out.json ]]; then
  # Debian's python3-matplotlib is in the system interpreter, which a pyenv shim may hide.
  for python in python3 /usr/bin/python3; do
    if "$python" -c 'import matplotlib' 2>/dev/null; then
      "$python" "$root/scripts/plot_$name.py" "$out.json" "$out.png"
      # scaling_table also writes the step breakdown beside --out (its --breakdown-out).
      breakdown=$(dirname "$out")/step_breakdown
      if [[ $name == scaling_table && -f $breakdown.json ]]; then
        "$python" "$root/scripts/plot_step_breakdown.py" "$breakdown.json" "$breakdown.png"
      fi
      exit 0
    fi
  done
  echo "no python3 with matplotlib (Debian: python3-matplotlib): $out.png not drawn" >&2
fi
