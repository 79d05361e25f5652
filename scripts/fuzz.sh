#!/usr/bin/env bash
# scripts/fuzz.sh [--seconds S] [--results DIR] [TARGET...]: runs every libFuzzer target of
# tests/fuzz (or the ones named: idx cifar image parsers config snapshot) for S seconds each
# (default 60), from the seed corpus tests/fuzz/corpus/<target>/ and the inputs that once crashed,
# tests/fuzz/regressions/<target>/. Builds them first in build-asan/ (clang, ASan+UBSan, shared
# with scripts/sanitize.sh). New inputs go to build-asan/fuzz/<target>/corpus, never to the tree.
# Prints executions and coverage per target; with --results DIR also writes DIR/summary.{json,md}
# and DIR/COMMAND. Exits 1 when a target crashes, hangs or leaks: its input is left in
# build-asan/fuzz/<target>/ (fix the defect, then add the input to regressions/<target>/).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

seconds=60
results=""
targets=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --seconds) seconds=${2:?--seconds needs a number}; shift 2 ;;
    --results) results=${2:?--results needs a folder}; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz.sh: unknown flag '$1' (see --help)" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
[[ "$seconds" =~ ^[0-9]+$ && "$seconds" -gt 0 ]] ||
  { echo "fuzz.sh: --seconds must be a positive whole number, got '$seconds'" >&2; exit 2; }
all=(idx cifar image parsers config snapshot)
[[ ${#targets[@]} -gt 0 ]] || targets=("${all[@]}")
for t in "${targets[@]}"; do
  [[ " ${all[*]} " == *" $t "* ]] ||
    { echo "fuzz.sh: no target '$t' (targets: ${all[*]})" >&2; exit 2; }
done

scripts/install_deps.sh >/dev/null
scripts/sanitizers/configure.sh build-asan address
cmake --build build-asan -j "$(nproc)" --target "${targets[@]/#/fuzz_}"

export OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=1
export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1"
export LSAN_OPTIONS="suppressions=$root/scripts/sanitizers/lsan.supp:print_suppressions=0"
status=0
rows=()
for t in "${targets[@]}"; do
  work="build-asan/fuzz/$t"
  rm -rf "$work/crashes" && mkdir -p "$work/corpus" "$work/crashes"
  inputs=("tests/fuzz/corpus/$t")
  [[ -d "tests/fuzz/regressions/$t" ]] && inputs+=("tests/fuzz/regressions/$t")
  # 6 GiB and 60 s: LibTorch's unpickler reserves a string's declared length (a 32-bit field, so
  # at most 4 GiB) before reading it, so a corrupt shard may cost 4 GiB (and, under ASan, the time
  # to map its shadow) before its read fails and load_stage_shards reports InputError
  # (regressions/snapshot/oom-*). More is a defect.
  if build-asan/bin/fuzz_"$t" -max_total_time="$seconds" -timeout=60 -rss_limit_mb=6144 \
      -print_final_stats=1 -artifact_prefix="$work/crashes/" "$work/corpus" "${inputs[@]}" \
      >"$work/log" 2>&1; then
    verdict=clean
  else
    verdict=FAILED
    status=1
  fi
  runs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$work/log" | awk '{print $2}' | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$work/log" | awk '{print $2}' | tail -1)
  features=$(grep -o 'ft: [0-9]*' "$work/log" | awk '{print $2}' | tail -1)
  corpus=$(find "$work/corpus" -type f | wc -l)
  printf 'fuzz_%-10s %-7s %10s runs  cov %6s  ft %6s  corpus %5s  (%s s)\n' "$t" "$verdict" \
    "${runs:-0}" "${cov:-0}" "${features:-0}" "$corpus" "$seconds"
  if [[ $verdict == FAILED ]]; then
    grep -E "ERROR|SUMMARY|==[0-9]+==|Test unit written" "$work/log" | head -20 >&2
    echo "fuzz.sh: fuzz_$t failed; its input is in $work/crashes/ and the log in $work/log" >&2
  fi
  rows+=("$t ${verdict} ${runs:-0} ${cov:-0} ${features:-0} $corpus")
done

if [[ -n "$results" ]]; then
  mkdir -p "$results"
  command="scripts/fuzz.sh --seconds $seconds --results $results ${targets[*]}"
  echo "$command" >"$results/COMMAND"
  printf '%s\n' "${rows[@]}" | /usr/bin/python3 -c '
import datetime, json, os, sys
seconds, out, command = int(sys.argv[1]), sys.argv[2], sys.argv[3]
rows = [l.split() for l in sys.stdin if l.strip()]
targets = [dict(target=r[0], verdict=r[1], executions=int(r[2]), coverage_edges=int(r[3]),
                features=int(r[4]), corpus_inputs=int(r[5]), seconds=seconds) for r in rows]
load = [round(x, 2) for x in os.getloadavg()]  # other work sharing the cores lowers executions
json.dump({"date": datetime.date.today().isoformat(), "load_average_after": load,
           "targets": targets},
          open(out + "/summary.json", "w"), indent=1)
with open(out + "/summary.md", "w") as f:
    f.write("# Fuzzing campaign (libFuzzer, clang-14, ASan+UBSan)\n\n")
    f.write(f"Command: `{command}` on 2 cores, one target at a time; load average "
            f"afterwards {load[0]:.2f}, {load[1]:.2f}, {load[2]:.2f} (other work on the cores lowers "
            "the executions, not the verdicts).\n\n")
    f.write("| target | verdict | executions | exec/s | coverage (edges) | features | corpus |\n")
    f.write("|---|---|---:|---:|---:|---:|---:|\n")
    for t in targets:
        f.write("| fuzz_{target} | {verdict} | {executions} | {rate:.0f} | {coverage_edges} | "
                "{features} | {corpus_inputs} |\n".format(rate=t["executions"] / seconds, **t))
' "$seconds" "$results" "$command"
  echo "fuzz.sh: wrote $results/summary.md"
fi
exit $status
