#!/usr/bin/env bash
# usage: dispatch_death.sh MPIRUN_SH TEST_DATA_DISPATCH_DEATH VICTIM — 3 ranks iterate a dispatched epoch under
# mpirun with a 5 s deadline (ACCEL_COLLECTIVE_TIMEOUT) and rank VICTIM kills itself (SIGKILL) part-way (0: the main,
# dispatching process). Fails on a hang, a job that exits 0, a surviving rank that completes the epoch (a silent short
# epoch), an accel error that does not name the dead rank or comes late, or a dead rank nobody names. Open MPI and
# MPICH (Hydra) end the whole job as soon as one process is killed, naming it ("mpirun noticed that process rank 1
# ... exited on signal 9" / "BAD TERMINATION ... PID n"): the survivors cannot report an error of their own, so once
# the checks above pass the test exits 77 and says so — accel's own error naming the rank is checked over the TCP
# store (data-dispatcher-kill-store-*), where the processes outlive a dead peer.
set -u
mpirun_sh=$1; exe=$2; victim=$3
out=$(mktemp)
trap 'rm -f "$out"' EXIT
start=$(date +%s)
ACCEL_COLLECTIVE_TIMEOUT=5 timeout 60 "$mpirun_sh" 3 "$exe" "$victim" >"$out" 2>&1
rc=$?
elapsed=$(( $(date +%s) - start ))
cat "$out"
fail=0
[ "$rc" -eq 124 ] && { echo "FAIL: the job hung (killed after 60 s)"; fail=1; }
[ "$rc" -eq 0 ] && { echo "FAIL: the job exited 0 although rank $victim was killed"; fail=1; }
# 5 s deadline + accel_shutdown's 10 s meeting after a failure + start-up under load
[ "$elapsed" -ge 40 ] && { echo "FAIL: the job took ${elapsed} s (limit 40)"; fail=1; }
grep -q "EPOCH COMPLETE" "$out" && { echo "FAIL: a surviving rank finished the epoch without the dead one"; fail=1; }
grep -q "<-- expected" "$out" && { echo "FAIL: a surviving rank's error did not name rank $victim in time"; fail=1; }
pid=$(sed -n "s/^rank $victim pid \([0-9]*\)$/\1/p" "$out" | head -1)
reported=$(grep -c "^rank [0-9]*: ERROR .*rank\(s\)\? $victim\b" "$out")
named=""
grep -q "process rank $victim with PID .* on signal 9" "$out" && named="Open MPI's launcher"
[ -n "$pid" ] && grep -q "PID $pid RUNNING AT" "$out" && named="MPICH's launcher (by pid $pid)"
if [ "$reported" -lt 2 ] && [ -z "$named" ]; then
  echo "FAIL: rank $victim died and neither every survivor nor the launcher named it"; fail=1
fi
[ "$fail" -ne 0 ] && exit 1
if [ "$reported" -ge 2 ]; then echo "OK: both surviving ranks named rank $victim (${elapsed} s)"; exit 0; fi
echo "skipped: $named ended the job in ${elapsed} s naming rank $victim, before the surviving ranks could report" \
     "(no hang, no short epoch); accel's own error is checked over the TCP store (data-dispatcher-kill-store-*)"
exit 77
