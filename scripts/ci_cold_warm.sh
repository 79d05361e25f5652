#!/usr/bin/env bash
# CI's time cold and warm: two clean clones of this repository's HEAD, one after the other in one
# folder, each running .ci/run with one ccache folder of their own, emptied before the first run.
# The first run compiles everything (a fresh machine); the second finds it in the cache (a CI
# machine that ran before, at the same clone path: compiler_cache.cmake says why other paths
# miss). Prints each run's parts (.ci/run's own lines) and writes each log beside the clone.
#
#   scripts/ci_cold_warm.sh [CLONE_DIR]   # default /tmp/gpipe-ci; logs CLONE_DIR-{cold,warm}.log
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
clone=${1:-/tmp/gpipe-ci}
export CCACHE_DIR=${clone}-ccache
failed=0
run() {
  local name=$1 log=${clone}-$1.log
  rm -rf "$clone" && git clone -q "$root" "$clone" || exit 1
  echo "== $name: $(git -C "$clone" log --oneline -1 | cut -c1-60); $(date +%T)"
  local start=$SECONDS
  (cd "$clone" && .ci/run) >"$log" 2>&1
  local status=$?
  echo "== $name: exit $status in $((SECONDS - start)) s ($log)"
  grep '^.ci/run:' "$log"
  [[ $status -eq 0 ]] || failed=1
}
rm -rf "$CCACHE_DIR"
run cold
run warm
exit $failed
