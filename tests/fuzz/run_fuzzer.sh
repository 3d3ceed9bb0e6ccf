#!/usr/bin/env bash
# usage: run_fuzzer.sh FUZZER [libFuzzer args...] — meson 1.0's test() can't run a custom_target directly.
# Runs from a scratch dir so crash/leak artifacts don't land in the source tree; prints the exec count.
set -uo pipefail
fz=$(readlink -f "$1"); shift
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
cd "$work"
"$fz" -artifact_prefix="$work/" "$@" 2>&1 | tee log.txt | grep -E "stat::number_of_executed_units|ERROR|SUMMARY|Done|==" | head -40
rc=${PIPESTATUS[0]}
n=$(grep -o "stat::number_of_executed_units: *[0-9]*" log.txt | grep -o "[0-9]*$")
echo "fuzz: ${n:-?} executions, exit $rc"
if [ "$rc" = 0 ]; then echo "fuzz: 1 passed, 0 failed"; else tail -30 log.txt; echo "fuzz: 0 passed, 1 failed"; fi
exit "$rc"
