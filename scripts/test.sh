#!/usr/bin/env bash
# Installs dependencies if missing, builds, runs every test suite. The exit code is the verdict.
#   BUILD_DIR (default build) and extra meson setup options in MESON_OPTS.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --slurm --oracles || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
# the reference interpreter (Accelerate, safetensors) made by install-deps --oracles, unless the caller chose one
refvenv="${ACCEL_REFVENV:-$HOME/.cache/accel/refvenv}"
if [ -z "${ACCEL_REFERENCE_PYTHON:-}" ] && "$refvenv/bin/python" -c "import accelerate, safetensors" 2>/dev/null; then
  export ACCEL_REFERENCE_PYTHON="$refvenv/bin/python"
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
build=${BUILD_DIR:-build}
if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" ${MESON_OPTS:-} || exit 1
fi
ninja -C "$build" || exit 1
meson test -C "$build" --print-errorlogs --num-processes 2 ${MESON_TEST_OPTS:-}
rc=$?
python3 scripts/summarize.py "$build/meson-logs/testlog.json"
exit $rc
