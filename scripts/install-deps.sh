#!/usr/bin/env bash
# Installs what accel's build, tests and demo need (idempotent: does nothing when everything is there).
#   scripts/install-deps.sh          build + tests: meson, ninja, pkg-config, Open MPI, MPICH, stb, libyaml, OpenSSL's
#                                    libcrypto (the TCP store's MAC), clang runtimes
#   scripts/install-deps.sh --bench  also the benchmark peers (python3-torch)
#   scripts/install-deps.sh --slurm  also Slurm + munge for tests/slurm (the test starts its own cluster)
#   scripts/install-deps.sh --cudnn-frontend  also the cuDNN frontend's C++ headers (the nvidia-cudnn-frontend wheel's
#                                    include/, ${CUDNN_FRONTEND_VERSION:-1.32.0}) into .deps/cudnn-frontend/include
#                                    (git-ignored), where meson looks for them: examples/gpt2's flash attention
#   scripts/install-deps.sh --oracles  also the independent references the tests compare against: Debian's
#                                    python3-torch (torch.optim, GPT-2, torch.profiler.schedule) and a venv with
#                                    Accelerate + safetensors from PyPI on top of it (device maps, offload folders,
#                                    safetensors bytes): ${ACCEL_REFVENV:-~/.cache/accel/refvenv}
# CUDA, cuBLAS and NCCL come with the CUDA toolkit under /usr/local/cuda (not from apt).
set -euo pipefail
want_bench=0 want_slurm=0 want_oracles=0 want_cudnn_fe=0
for a in "$@"; do
  case "$a" in
    --bench) want_bench=1 ;;
    --slurm) want_slurm=1 ;;
    --oracles) want_oracles=1 ;;
    --cudnn-frontend) want_cudnn_fe=1 ;;
    *) echo "install-deps: unknown option $a" >&2; exit 2 ;;
  esac
done

pkgs=(meson ninja-build pkg-config libopenmpi-dev openmpi-bin mpich libmpich-dev libstb-dev libyaml-dev libssl-dev clang
      libclang-rt-14-dev python3 python3-yaml file)
[ $want_bench = 1 ] && pkgs+=(python3-torch)
[ $want_oracles = 1 ] && pkgs+=(python3-torch python3-numpy python3-psutil python3-venv python3-pip)
[ $want_cudnn_fe = 1 ] && pkgs+=(python3-pip)
[ $want_slurm = 1 ] && pkgs+=(slurmctld slurmd slurm-client munge slurm-wlm-basic-plugins)

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" != 0 ] && SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  # the slurm/munge packages' postinst may try to start system services: a container's policy-rc.d denies that,
  # which is what the tests want (they start their own daemons on their own configuration)
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# Open MPI stays the default `mpi` when both are installed; the MPICH build names its pkg-config/mpiexec itself.
export PATH="/usr/local/cuda/bin:$PATH"
command -v nvcc >/dev/null || echo "install-deps: note: nvcc not found; CUDA parts will be skipped"
if [ $want_oracles = 1 ]; then
  # Accelerate's own placement/offload functions are the oracle for accel_bigmodel.h. Accelerate 1.15
  # declares torch >= 2, but the functions the tests call run on Debian's torch 1.13: --no-deps keeps pip from
  # pulling a second torch. A failure here (no network) leaves those tests skipping with the reason.
  venv="${ACCEL_REFVENV:-$HOME/.cache/accel/refvenv}"
  if ! "$venv/bin/python" -c "import accelerate, safetensors, torch" 2>/dev/null; then
    echo "install-deps: reference venv $venv (accelerate 1.15.0, safetensors 0.8.0)"
    rm -rf "$venv"
    /usr/bin/python3 -m venv --system-site-packages "$venv" &&
      "$venv/bin/pip" install -q --no-deps accelerate==1.15.0 safetensors==0.8.0 packaging ||
      echo "install-deps: note: could not build the reference venv; Accelerate/safetensors comparisons will skip"
  fi
fi
if [ $want_cudnn_fe = 1 ]; then
  # header-only C++; libcudnn itself comes with the CUDA toolkit or the nvidia-cudnn-cu13 wheel (CPATH/LIBRARY_PATH)
  root="$(cd "$(dirname "$0")/.." && pwd)"
  dest="$root/.deps/cudnn-frontend"
  if [ ! -f "$dest/include/cudnn_frontend.h" ]; then
    t=$(mktemp -d)
    echo "install-deps: cuDNN frontend ${CUDNN_FRONTEND_VERSION:-1.32.0} headers -> $dest/include"
    if python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
         --platform manylinux_2_28_x86_64 -d "$t" "nvidia-cudnn-frontend==${CUDNN_FRONTEND_VERSION:-1.32.0}" &&
       python3 - "$t" "$dest" <<'PY'
import glob, sys, zipfile
z = zipfile.ZipFile(glob.glob(sys.argv[1] + "/*.whl")[0])
for n in z.namelist():
    if n.startswith("include/"):
        z.extract(n, sys.argv[2])
PY
    then :
    else echo "install-deps: note: cuDNN frontend headers not fetched (PyPI unreachable?): no cuDNN attention"
    fi
    rm -rf "$t"
  fi
fi
echo "install-deps: ok"
