#!/usr/bin/env bash
# expect_exit.sh CODE SUBSTRING -- COMMAND...: runs COMMAND, passes when it exits with CODE and
# its stderr+stdout contains SUBSTRING. The drivers' bad-input tests are built from it.
set -u
want=$1
needle=$2
shift 3
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
echo "ok: exit $got, '$needle'"
