#!/usr/bin/env bash
# usage: check.sh MODE LANG HEADER_DIR HEADER COMPILER [ARGS...]
#   MODE header: HEADER alone (declarations only) must compile
#   MODE impl:   HEADER first with ACCEL_IMPLEMENTATION, then every header, must compile to an object
#   LANG c | c++ | cuda
set -euo pipefail
mode=$1 lang=$2 dir=$3 header=$4; shift 4
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
case $lang in c) ext=c ;; c++) ext=cc ;; cuda) ext=cu ;; esac
src=$tmp/t.$ext
if [ "$mode" = header ]; then
  printf '#include "%s"\nint accel_compile_probe;\n' "$header" > "$src"
else
  { echo '#define ACCEL_IMPLEMENTATION'; for h in "$header" accel.h accel_hostgroup.h accel_collectives.h accel_ddp.h accel_zero.h accel_data.h accel_amp.h accel_optim.h accel_safetensors.h accel_ckpt.h accel_bigmodel.h accel_trackers.h accel_profile.h; do echo "#include \"$h\""; done; } > "$src"
fi
stb=$(pkg-config --cflags stb 2>/dev/null || echo -I/usr/include/stb)
"$@" -I"$dir" $stb -c "$src" -o "$tmp/t.o"
echo "compiled $header ($mode, $lang): $*"
