#!/usr/bin/env bash
# scripts/stateful_before_after.sh REV: the hostile-state suite (experiments/tests/stateful_inputs.py)
# run against the programs of an earlier commit REV and of this tree, side by side in
# results/stateful_inputs/table.md (with before.json and after.json, and COMMAND). REV's programs
# are built in a worktree under $TMPDIR (gpipe_train, gpipe_sim, gpipe_plan, dataset_info); this
# tree's come from scripts/build.sh. Exits 2 on bad arguments, 1 when a step fails.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
[[ $# -eq 1 ]] || { echo "usage: scripts/stateful_before_after.sh REV" >&2; exit 2; }
rev=$(git rev-parse --verify --quiet "$1^{commit}") ||
  { echo "stateful_before_after.sh: '$1' is not a commit" >&2; exit 2; }
before=${TMPDIR:-/tmp}/gpipe-before-${rev:0:12}
[[ -d $before ]] || git worktree add --detach "$before" "$rev" >/dev/null
programs=(gpipe_train gpipe_sim gpipe_plan dataset_info)
GPIPE_BUILD_DIR=$before/build "$before/scripts/build.sh" "${programs[@]}" >/dev/null
scripts/build.sh "${programs[@]}" >/dev/null
out=results/stateful_inputs
mkdir -p "$out"
# The earlier programs fail most cases: that is the point; only the tables are kept.
python3 experiments/tests/stateful_inputs.py --bin "$before/build/bin" --json "$out/before.json" |
  tail -1 || true
python3 experiments/tests/stateful_inputs.py --bin build/bin --json "$out/after.json" | tail -1
python3 experiments/tests/stateful_inputs.py --table "$out/before.json" "$out/after.json" \
  "$out/table.md"
echo "scripts/stateful_before_after.sh $1" >"$out/COMMAND"
echo "wrote $out/table.md"
