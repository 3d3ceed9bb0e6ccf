#!/usr/bin/env bash
# usage: run_np.sh MPIRUN_SH NP EXE — runs EXE on NP ranks when this machine has >= NP GPUs, else skips (77).
set -u
mpirun_sh=$1 np=$2 exe=$3
n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "${n:-0}" -lt "$np" ]; then echo "need $np GPUs, found ${n:-0}: skipped"; exit 77; fi
exec "$mpirun_sh" "$np" "$exe"
