#!/usr/bin/env bash
# usage: zero_save_load.sh MPIRUN_SH EXE SAVE_NP LOAD_NP... — a ZeRO-2 run saves its optimizer state on SAVE_NP ranks
# and runs on; each LOAD_NP run loads it and must end with the same parameters bit for bit.
# --sharded first: every rank saves its own shard (zero_state_<rank>.bin) instead of the consolidated moments.
set -u
pre=""; [ "${1:-}" = --sharded ] && { pre=s; shift; }
mpirun_sh=$1 exe=$2 save_np=$3; shift 3
dir=$(mktemp -d /tmp/accel_zero_ckpt_XXXXXX); trap 'rm -rf "$dir"' EXIT
"$mpirun_sh" "$save_np" "$exe" ${pre}save "$dir" || { echo "save on $save_np ranks failed"; exit 1; }
for np in "$@"; do
  "$mpirun_sh" "$np" "$exe" ${pre}load "$dir" || { echo "load on $np ranks failed"; exit 1; }
done
