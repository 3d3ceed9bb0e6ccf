#!/usr/bin/env bash
# Installs dependencies if missing, builds, fetches the UCI digits and runs the demo: the `accel env` report, the
# hello example, and the digits MLP trained data-parallel on 2 MPI ranks with accel (sharded sampler, gradient
# accumulation, bucketed all-reduce, fp16 loss scaling, clipping, gather_for_metrics, checkpoints, TensorBoard/JSONL
# logs under runs/). The last line reads "test accuracy: NN.NN%".
set -euo pipefail
here=$PWD   # runs/ (logs, checkpoints) goes where the demo is run from
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
export PATH="/usr/local/cuda/bin:$PATH"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
build=${BUILD_DIR:-build}
[ -f "$build/build.ninja" ] || meson setup "$build" >/dev/null
ninja -C "$build" tools/accel examples/hello examples/train_digits >/dev/null  # only what the demo runs
bash scripts/fetch-digits.sh
echo "== accel env (mpirun -np 2)"
bash tests/mpi/mpirun.sh 2 "$build/tools/accel" env
echo "== hello (mpirun -np 2)"
bash tests/mpi/mpirun.sh 2 "$build/examples/hello"
echo "== train_digits: MLP on the UCI digits, 2 ranks, fp16 with loss scaling, accumulation 2 (mpirun -np 2)"
rm -rf "$here/runs/demo-checkpoints"
bash tests/mpi/mpirun.sh 2 "$build/examples/train_digits" --data data/digits.csv --precision fp16 --batch 8 --accum 2 \
  --steps 500 --print-every 50 --checkpoint-dir "$here/runs/demo-checkpoints" --checkpoint-every 250 --log-dir "$here/runs"
echo "== logs: $here/runs/train_digits (TensorBoard events + metrics.jsonl; tensorboard --logdir $here/runs)"
echo "== checkpoints: $here/runs/demo-checkpoints/checkpoints"
