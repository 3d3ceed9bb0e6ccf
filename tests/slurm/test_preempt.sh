#!/usr/bin/env bash
# Preemption and requeue under a real Slurm (issue 29; tests/slurm/cluster.sh, one slurmd on this host): the
# README's job script (sbatch --requeue, --signal=USR1@90, srun -K, `scontrol requeue` on ACCEL_EXIT_REQUEUE, --resume
# once SLURM_RESTART_COUNT > 0) runs examples/train_digits on 2 tasks. One job runs uninterrupted; a second one is sent
# `scancel --signal=USR1 JOBID` mid-run (what --signal=USR1@90 sends the job's steps before the time limit): every
# rank saves after the same step, srun ends with 75, the script requeues the job, the requeued job resumes and ends
# with final weights and a loss file bit-identical to the uninterrupted job's. A third job is sent SIGTERM to the
# steps (scancel --signal=TERM: a preemption's or a shutdown's signal) and must end the same way.
# Skips (77) without the Slurm packages, without root, or without data/digits.csv.
# usage: test_preempt.sh TRAINER_EXE
set -u
trainer=$(readlink -f "$1")
here=$(cd "$(dirname "$0")" && pwd)
root=${ACCEL_SOURCE_ROOT:-$(cd "$here/../.." && pwd)}
for b in munged slurmctld slurmd srun sbatch scontrol scancel; do
  command -v "$b" >/dev/null || { echo "SKIP: $b not installed (scripts/install-deps.sh --slurm)"; exit 77; }
done
[ "$(id -u)" = 0 ] || { echo "SKIP: the test cluster's daemons need root"; exit 77; }
data=$root/data/digits.csv
[ -f "$data" ] || bash "$root/scripts/fetch-digits.sh" >/dev/null 2>&1 || true
[ -f "$data" ] || { echo "SKIP: data/digits.csv is missing and scripts/fetch-digits.sh could not fetch it"; exit 77; }
case "${ACCEL_MPI_IMPL:-auto}" in
  mpich) plugin=pmi2 ;;
  *) plugin=pmix ;;
esac
# a port pair of our own (slurmctld, slurmd) so that another cluster on this host (core-slurm) does not collide
if [ -z "${ACCEL_SLURM_PORT:-}" ]; then
  ACCEL_SLURM_PORT=$(python3 -c '
import socket
for p in range(21000, 29000, 7):
    try:
        ss = [socket.socket() for _ in range(2)]
        for k, s in enumerate(ss): s.bind(("127.0.0.1", p + k))
        for s in ss: s.close()
        print(p); break
    except OSError:
        pass')
  export ACCEL_SLURM_PORT
fi
dir=$(mktemp -d /tmp/accel-slurm-preempt.XXXXXX)
cl() { "$here/cluster.sh" "$dir" "$@"; }
trap 'cl down; rm -rf "$dir"' EXIT
cl up 1 || { echo "FAIL: the test cluster did not start"; tail -20 "$dir"/log/*.log; exit 1; }
passed=0 failed=0
check() { if eval "$1"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL: $2"; fi; }

# The job script is README.md's (readme_job.py takes it from there: the test's sizes and trainer options
# substituted, a line printing the exit code added; a README whose script changed fails here). The
# trainer: 60 steps of 150 ms (--throttle-ms gives the test time to signal mid-run), a checkpoint every 25 steps (so
# the preempted one is extra).
make_job() { python3 "$here/readme_job.py" "$root/README.md" "$1" "$plugin" "$trainer" "$data" "$dir" > "$dir/$1.sh"; }
for run in straight preempt_USR1 preempt_TERM; do
  make_job $run || { echo "FAIL: the job script could not be taken from README.md"; exit 1; }
done

submit() { cl run sbatch --parsable -D "$dir" -o "$dir/$1.out" "$dir/$1.sh" 2>&1 | cut -d";" -f1; }
state() { cl run scontrol show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -1; }
# wait until the job ends for good (not a requeue's pass through COMPLETING/PENDING), at most $2 s
wait_done() {
  local id=$1 t=$2 s
  for _ in $(seq $((t * 5))); do
    s=$(state "$id" JobState)
    case "$s" in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY) echo "$s"; return;; esac
    sleep 0.2
  done
  echo "still-$s"
}
# wait until the job's output shows training step $2 (the progress line every step), at most 120 s
wait_step() {
  local f=$dir/$1.out want=$2
  for _ in $(seq 600); do
    if [ -f "$f" ] && grep -q "^step *$want/" "$f"; then return 0; fi
    sleep 0.2
  done
  return 1
}

# 1. uninterrupted
id0=$(submit straight)
st0=$(wait_done "$id0" 240)
check '[ "$st0" = COMPLETED ] && grep -q "restart 0 exit 0" "$dir/straight.out" && [ -s "$dir/straight.w" ]' \
  "the uninterrupted job ($id0: $st0): $(tail -5 "$dir/straight.out" 2>/dev/null)"

# 2./3. preempted mid-run by SIGUSR1 / SIGTERM to the job's steps, requeued by the script, resumed
for sig in USR1 TERM; do
  run=preempt_$sig
  id=$(submit "$run")
  if ! wait_step "$run" 12; then
    check false "$run: job $id never reached step 12: $(tail -5 "$dir/$run.out" 2>/dev/null)"
    continue
  fi
  t0=$(date +%s)
  cl run scancel --signal="$sig" "$id"
  # Slurm lets a requeued batch job start again only after a delay (its BeginTime, about 2 minutes), which also
  # lets the first run's steps be cleaned up; the test waits for it rather than shortening it (releasing the job
  # at once made the new run's srun collide with the old step's PMIx socket)
  st=$(wait_done "$id" 400)
  echo "$run: job $id $st $(($(date +%s) - t0)) s after the signal"
  out=$(cat "$dir/$run.out" 2>/dev/null)
  num=$([ $sig = USR1 ] && echo 10 || echo 15)
  check '[ "$st" = COMPLETED ] && [ "$(state "$id" Restarts)" = 1 ]' "$run: job $id ended $st after one requeue"
  check 'echo "$out" | grep -q "restart 0 exit 75" && echo "$out" | grep -q "restart 1 exit 0"' \
    "$run: srun ended with 75 (ACCEL_EXIT_REQUEUE), then the requeued run with 0: $out"
  stop=$(echo "$out" | sed -n "s/^preempted (signal $num) after step \([0-9]*\): checkpoint saved.*/\1/p")
  check '[ -n "$stop" ] && [ "$stop" -ge 12 ] && [ "$stop" -lt 60 ] && echo "$out" | grep -q "resumed at step $stop "' \
    "$run: every rank stopped after step ${stop:-?} (signal $num), the requeued run resumed there"
  check '[ "$(echo "$out" | grep -c "^preempted")" = 1 ]' "$run: one preemption line (rank 0's)"
  check 'cmp -s "$dir/straight.w" "$dir/$run.w"' "$run: final weights bit-identical to the uninterrupted job's"
  check 'cmp -s "$dir/straight.loss" "$dir/$run.loss"' "$run: loss file (60 steps) identical to the uninterrupted job's"
  [ $failed = 0 ] || { echo "--- $run.out:"; grep -v "^step" "$dir/$run.out"; }
done

echo "slurm-preempt: $passed passed, $failed failed"
[ $failed = 0 ]
