#!/usr/bin/env bash
# usage: save_load.sh MPIRUN_SH EXE SAVE_NP LOAD_NP... — "no checkpoint yet" and a save on SAVE_NP ranks, then loads
# on each LOAD_NP.
set -u
mpirun_sh=$1 exe=$2 save_np=$3; shift 3
dir=$(mktemp -d /tmp/accel_ckpt_mpi_XXXXXX); trap 'rm -rf "$dir"' EXIT
"$mpirun_sh" "$save_np" "$exe" fresh "$dir" || { echo "fresh on $save_np ranks failed"; exit 1; }
"$mpirun_sh" "$save_np" "$exe" save "$dir" || exit 1
for np in "$@"; do
  "$mpirun_sh" "$np" "$exe" load "$dir" || { echo "load on $np ranks failed"; exit 1; }
done
"$mpirun_sh" 2 "$exe" loadbad "$dir" || { echo "loadbad failed"; exit 1; }
