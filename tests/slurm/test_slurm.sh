#!/usr/bin/env bash
# accel under a real Slurm (slurmctld + two slurmd on this host, tests/slurm/cluster.sh): srun with the MPI plugin
# this build's MPI needs (Open MPI: pmix, MPICH: pmi2), srun without one (accel's own error naming the plugin),
# mpirun inside a salloc shell and inside an sbatch script (the job's variables must not get in the way), an uneven
# two-node step (SLURM_STEP_TASKS_PER_NODE=2,1), a failing rank under srun -K, and the digits trainer under srun
# bit-identical to mpirun. Skips (77) when Slurm is not installed (scripts/install-deps.sh --slurm) or not root.
# usage: test_slurm.sh PROBE_EXE [TRAINER_EXE]
set -u
probe=$(readlink -f "$1") trainer=${2:+$(readlink -f "$2")}
here=$(cd "$(dirname "$0")" && pwd)
root=${ACCEL_SOURCE_ROOT:-$(cd "$here/../.." && pwd)}
for b in munged slurmctld slurmd srun sbatch salloc; do
  command -v "$b" >/dev/null || { echo "SKIP: $b not installed (scripts/install-deps.sh --slurm)"; exit 77; }
done
[ "$(id -u)" = 0 ] || { echo "SKIP: the test cluster's daemons need root"; exit 77; }
case "${ACCEL_MPI_IMPL:-auto}" in
  mpich) plugin=pmi2 mpirun=mpiexec.mpich ;;
  *) plugin=pmix mpirun=mpirun.openmpi ;;
esac
command -v "$mpirun" >/dev/null || mpirun=mpirun
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
dir=$(mktemp -d /tmp/accel-slurm.XXXXXX)
cl() { "$here/cluster.sh" "$dir" "$@"; }
trap 'cl down; rm -rf "$dir"' EXIT
cl up 2 || { echo "FAIL: the test cluster did not start"; tail -20 "$dir"/log/*.log; echo "slurm: 0 passed, 1 failed"; exit 1; }
passed=0 failed=0
check() { if eval "$1"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL: $2"; fi; }
mpiflags=""
"$mpirun" --version 2>&1 | grep -qi "open mpi\|open-mpi" && mpiflags="--oversubscribe --bind-to none --mca btl self,vader,tcp"

# 1. srun with the right plugin: MPI carries the group, every rank sees the others
out=$(cl run timeout 120 srun -N 1 -n 2 --mpi=$plugin "$probe" 2>&1); rc=$?
check '[ $rc = 0 ] && [ "$(echo "$out" | grep -c "of 2 local [01] of 2 launcher [a-z]* group mpi sum 1")" = 2 ]' \
  "srun --mpi=$plugin: $out"

# 2. srun without a plugin: accel's own error naming it, on every task, no hang
out=$(cl run timeout 120 srun -N 1 -n 2 "$probe" 2>&1); rc=$?
check '[ $rc != 0 ] && [ "$(echo "$out" | grep -c -- "--mpi=$plugin")" -ge 2 ]' "srun without --mpi: $out"

# 3. mpirun inside a salloc shell (SLURM_NTASKS without a step)
out=$(cl run timeout 120 salloc -N 1 -n 2 "$mpirun" -np 2 $mpiflags "$probe" 2>&1); rc=$?
check '[ $rc = 0 ] && [ "$(echo "$out" | grep -c "of 2 local [01] of 2 launcher [a-z]* group mpi sum 1")" = 2 ]' \
  "mpirun in salloc: $out"

# 4. an sbatch script: mpirun inside it, and a plain run of the program (one process despite SLURM_PROCID/NTASKS)
cat > "$dir/job.sh" <<J
#!/bin/bash
"$mpirun" -np 2 $mpiflags "$probe"
echo "mpirun-exit \$?"
"$probe"
echo "plain-exit \$?"
J
cl run timeout 120 sbatch --wait -N 1 -n 2 -o "$dir/job.out" "$dir/job.sh" >/dev/null 2>&1
out=$(cat "$dir/job.out" 2>/dev/null)
check 'echo "$out" | grep -q "mpirun-exit 0" && [ "$(echo "$out" | grep -c "of 2 local [01] of 2 launcher [a-z]* group mpi sum 1")" = 2 ]' \
  "mpirun in sbatch: $out"
check 'echo "$out" | grep -q "plain-exit 0" && echo "$out" | grep -q "rank 0 of 1 local 0 of 1 launcher none group none sum 0"' \
  "plain run in sbatch: $out"

# 5. an uneven two-node step: 2 tasks on the first node, 1 on the second
out=$(cl run timeout 120 srun -N 2 -n 3 "$probe" layout 2>&1 | sort); rc=$?
want=$'rank 0 of 3 local 0 of 2 launcher slurm\nrank 1 of 3 local 1 of 2 launcher slurm\nrank 2 of 3 local 0 of 1 launcher slurm'
check '[ "$out" = "$want" ]' "uneven step layout: $out"

# 6. a rank fails under srun -K: srun ends the others and fails, promptly
t0=$(date +%s)
out=$(cl run timeout 120 srun -K -N 1 -n 2 --mpi=$plugin "$probe" fail 1 2>&1); rc=$?
t1=$(date +%s)
check '[ $rc != 0 ] && [ $rc != 124 ] && [ $((t1 - t0)) -lt 60 ] && echo "$out" | grep -q "failing on purpose"' \
  "srun -K with a failing rank (exit $rc after $((t1 - t0)) s): $out"

# 7. the digits trainer: srun gives the same weights as mpirun
if [ -n "$trainer" ]; then
  data=$root/data/digits.csv
  if [ ! -f "$data" ]; then bash "$root/scripts/fetch-digits.sh" >/dev/null 2>&1 || true; fi
  if [ -f "$data" ]; then
    args="--data $data --epochs 2 --hidden 32 --batch 16 --print-every 0 --seed 3"
    cl run timeout 300 srun -N 1 -n 2 --mpi=$plugin "$trainer" $args --dump-weights "$dir/w_srun.bin" > "$dir/srun.log" 2>&1; rc=$?
    "$mpirun" -np 2 $mpiflags "$trainer" $args --dump-weights "$dir/w_mpirun.bin" > "$dir/mpirun.log" 2>&1; rc2=$?
    check '[ $rc = 0 ] && [ $rc2 = 0 ] && cmp -s "$dir/w_srun.bin" "$dir/w_mpirun.bin"' \
      "digits trainer under srun == mpirun ($rc/$rc2): $(tail -3 "$dir/srun.log") / $(tail -3 "$dir/mpirun.log")"
  else
    echo "note: data/digits.csv unavailable; the trainer comparison was not run"
  fi
fi

echo "slurm: $passed passed, $failed failed"
[ $failed = 0 ]
