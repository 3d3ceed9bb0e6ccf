#!/usr/bin/env bash
# usage: mpirun.sh NP PROGRAM [ARGS...] — runs PROGRAM on NP ranks with whichever MPI the build uses.
set -u
np=$1; shift
exe=${ACCEL_MPIEXEC:-mpirun}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if "$exe" --version 2>&1 | grep -qi "open mpi\|open-mpi\|openrte"; then
  exec "$exe" -np "$np" --oversubscribe --bind-to none --mca btl self,vader,tcp --mca btl_tcp_if_include lo "$@"
else
  exec "$exe" -n "$np" "$@"
fi
