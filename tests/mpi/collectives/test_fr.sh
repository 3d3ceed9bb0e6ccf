#!/usr/bin/env bash
# usage: test_fr.sh MPIRUN_SH TEST_COLL_FR ACCEL_CLI MODE — runs test_coll_fr MODE on 3 ranks with a 2 s deadline
# (ACCEL_COLLECTIVE_TIMEOUT) and the dumps in a fresh ACCEL_FLIGHT_DIR, then `accel fr` on them: every rank must have
# dumped, `accel fr` must exit 1 (a divergence named) and print each line the test program expected (expect.txt:
# the rank, the call number and both call sites).
set -u
mpirun_sh=$1; exe=$2; cli=$3; mode=$4
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
ACCEL_FLIGHT_DIR=$dir ACCEL_COLLECTIVE_TIMEOUT=2 timeout 60 "$mpirun_sh" 3 "$exe" "$mode" ||
  { echo "FAIL: the run failed"; exit 1; }
for r in 0 1 2; do [ -f "$dir/rank$r.json" ] || { echo "FAIL: rank $r did not dump"; ls -l "$dir"; exit 1; }; done
"$cli" fr "$dir" >"$dir/report.txt" 2>&1
rc=$?
cat "$dir/report.txt"
[ "$rc" -eq 1 ] || { echo "FAIL: accel fr exited $rc, not 1 (a divergence)"; exit 1; }
[ -s "$dir/expect.txt" ] || { echo "FAIL: no expect.txt"; exit 1; }
fail=0
while IFS= read -r line; do
  grep -qF -- "$line" "$dir/report.txt" || { echo "FAIL: the report lacks: $line"; fail=1; }
done <"$dir/expect.txt"
[ "$fail" -eq 0 ] && echo "OK: accel fr named the divergence ($mode)"
exit "$fail"
