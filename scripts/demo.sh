#!/usr/bin/env bash
# Installs dependencies if missing, builds, and runs the demo: the `accel env` report and a 2-rank MPI run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
export PATH="/usr/local/cuda/bin:$PATH"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
build=${BUILD_DIR:-build}
[ -f "$build/build.ninja" ] || meson setup "$build" >/dev/null
ninja -C "$build" >/dev/null
echo "== accel env (mpirun -np 2)"
bash tests/mpi/mpirun.sh 2 "$build/tools/accel" env
echo "== hello (mpirun -np 2)"
bash tests/mpi/mpirun.sh 2 "$build/examples/hello"
