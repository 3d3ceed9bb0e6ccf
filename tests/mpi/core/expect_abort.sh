#!/usr/bin/env bash
# usage: expect_abort.sh MPIRUN_SH TEST_CORE_MPI — runs `test_core_mpi missing_file` on 3 ranks with a 300 s
# collective deadline (ACCEL_COLLECTIVE_TIMEOUT) and checks that the whole job ends within 40 s, with a nonzero exit
# status, the failed rank's message and accel_shutdown's abort message.
set -u
mpirun_sh=$1; exe=$2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
start=$(date +%s)
ACCEL_COLLECTIVE_TIMEOUT=300 timeout 80 "$mpirun_sh" 3 "$exe" missing_file >"$out" 2>&1
rc=$?
elapsed=$(( $(date +%s) - start ))
cat "$out"
fail=0
if [ "$rc" -eq 0 ]; then echo "FAIL: the job exited 0"; fail=1; fi
if [ "$rc" -eq 124 ]; then echo "FAIL: the job hung (killed after 80 s)"; fail=1; fi
if [ "$elapsed" -ge 40 ]; then echo "FAIL: the job took ${elapsed} s (limit 40)"; fail=1; fi
grep -q "/nonexistent/accel-test/train_000.bin" "$out" || { echo "FAIL: no message naming the missing file"; fail=1; }
grep -q "accel_shutdown after a failure" "$out" || { echo "FAIL: no abort message from accel_shutdown"; fail=1; }
grep -q "wait_for_everyone returned" "$out" && { echo "FAIL: a waiting rank returned instead of being ended"; fail=1; }
[ "$fail" -eq 0 ] && echo "OK: ended in ${elapsed} s with status $rc"
exit "$fail"
