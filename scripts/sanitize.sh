#!/usr/bin/env bash
# scripts/sanitize.sh [--asan] [--tsan]: sanitizer builds and the tests run under them.
#   ASan + UBSan (build-asan/, clang): every library, program, test and fuzz target, the whole
#   CTest suite under it.
#   TSan (build-tsan/): the core tests (stage threads, transports) and the data loader's tests.
# With no flag, both. LibTorch, OpenMP and Gloo are not instrumented; what the sanitizers report
# inside them is suppressed by library in scripts/sanitizers/*.supp, never for this project's
# code. Every report goes to a file under <build>/sanitizer-reports/ (subprocesses of the CLI
# and distributed tests included); clean means that folder is empty and every test passes.
# Exits non-zero on any report or failure. GPIPE_SANITIZE_CTEST_ARGS adds ctest arguments
# (e.g. "-R core_tests": each GoogleTest program runs there as 4 shards, not one entry a case).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

run_asan=0
run_tsan=0
for arg in "$@"; do
  case "$arg" in
    --asan) run_asan=1 ;;
    --tsan) run_tsan=1 ;;
    -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "sanitize.sh: unknown argument '$arg' (use --asan, --tsan or nothing for both)" >&2
       exit 2 ;;
  esac
done
if [[ $run_asan -eq 0 && $run_tsan -eq 0 ]]; then run_asan=1; run_tsan=1; fi

scripts/install_deps.sh
jobs=$(nproc)
export OMP_WAIT_POLICY=PASSIVE
supp="$root/scripts/sanitizers"
status=0

# reports DIR NAME: prints the reports in DIR and fails when there is any.
reports() {
  local files
  files=$(find "$1" -type f 2>/dev/null | sort)
  if [[ -z "$files" ]]; then
    echo "sanitize.sh: $2 clean: no reports"
    return 0
  fi
  echo "sanitize.sh: $2 reported $(echo "$files" | wc -l) time(s):" >&2
  for f in $files; do echo "==> $f" >&2; head -60 "$f" >&2; done
  return 1
}

if [[ $run_asan -eq 1 ]]; then
  start=$SECONDS
  scripts/sanitizers/configure.sh build-asan address
  cmake --build build-asan -j "$jobs"
  out="$root/build-asan/sanitizer-reports"
  rm -rf "$out" && mkdir -p "$out"
  export ASAN_OPTIONS="log_path=$out/asan:detect_leaks=1:strict_init_order=1:detect_stack_use_after_return=0:exitcode=86"
  export UBSAN_OPTIONS="log_path=$out/ubsan:print_stacktrace=1:halt_on_error=1:exitcode=86"
  export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
  # ${GPIPE_SANITIZE_CTEST_ARGS} unquoted on purpose: several arguments.
  # shellcheck disable=SC2086
  ctest --test-dir build-asan --output-on-failure -j "$jobs" ${GPIPE_SANITIZE_CTEST_ARGS:-} ||
    status=1
  reports "$out" "ASan+UBSan" || status=1
  unset ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS
  echo "sanitize.sh: ASan+UBSan build and tests took $((SECONDS - start)) s"
fi

if [[ $run_tsan -eq 1 ]]; then
  start=$SECONDS
  scripts/sanitizers/configure.sh build-tsan thread
  cmake --build build-tsan -j "$jobs" --target core_tests datasets_tests
  out="$root/build-tsan/sanitizer-reports"
  rm -rf "$out" && mkdir -p "$out"
  export TSAN_OPTIONS="log_path=$out/tsan:suppressions=$supp/tsan.supp:second_deadlock_stack=1:exitcode=86"
  # One OpenMP thread per operator: libgomp's own synchronisation is invisible to TSan, and the
  # threads under test are the project's (stage workers, receivers, loader workers).
  OMP_NUM_THREADS=1 build-tsan/bin/core_tests --gtest_brief=1 || status=1
  OMP_NUM_THREADS=1 build-tsan/bin/datasets_tests --gtest_brief=1 --gtest_filter='*Loader*' ||
    status=1
  reports "$out" "TSan" || status=1
  unset TSAN_OPTIONS
  echo "sanitize.sh: TSan build and tests took $((SECONDS - start)) s"
fi
exit $status
