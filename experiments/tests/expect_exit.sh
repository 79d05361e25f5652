#!/usr/bin/env bash
# expect_exit.sh CODE SUBSTRING [--one-line] -- COMMAND...: runs COMMAND, passes when it exits
# with CODE and its stderr+stdout contains SUBSTRING (and, with --one-line, is a single line).
# The programs' bad-input tests are built from it.
set -u
want=$1
needle=$2
shift 2
one_line=0
if [[ "${1:-}" == --one-line ]]; then one_line=1; shift; fi
shift  # --
output=$("$@" 2>&1)
got=$?
if [[ $got -ne $want ]]; then
  echo "expected exit $want, got $got: $*"
  echo "$output" | tail -20
  exit 1
fi
if [[ "$output" != *"$needle"* ]]; then
  echo "output lacks '$needle': $*"
  echo "$output" | tail -20
  exit 1
fi
if [[ $one_line -eq 1 && $(printf '%s\n' "$output" | wc -l) -ne 1 ]]; then
  echo "expected one line, got $(printf '%s\n' "$output" | wc -l): $*"
  echo "$output" | head -20
  exit 1
fi
echo "ok: exit $got, '$needle'"
