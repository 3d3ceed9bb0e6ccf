#!/usr/bin/env bash
# accel as a meson subproject: a user project gets dependency('accel') and dependency('accel-headers') through
# meson.override_dependency, builds, and runs.
set -euo pipefail
src=$1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/subprojects"
ln -s "$src" "$tmp/subprojects/accel"
cat > "$tmp/meson.build" <<'M'
project('user', 'c', default_options: ['c_std=c99'])
subproject('accel', default_options: ['tests=false', 'examples=false', 'bench=false', 'cuda=disabled'])
accel = dependency('accel')
headers = dependency('accel-headers')
executable('user_prog', 'user.c', dependencies: accel)
executable('user_headers_only', 'vendored.c', dependencies: headers)
M
cat > "$tmp/user.c" <<'C'
#include "accel.h"
#include <stdio.h>
int main(void) { printf("%s\n", accel_dtype_name(ACCEL_F8_E4M3)); return accel_version() == ACCEL_VERSION_NUMBER ? 0 : 1; }
C
cat > "$tmp/vendored.c" <<'C'
#define ACCEL_IMPLEMENTATION
#include "accel.h"
int main(void) { return accel_dtype_size(ACCEL_BF16) == 2 ? 0 : 1; }
C
cd "$tmp"
meson setup b >/dev/null
ninja -C b >/dev/null
out=$(./b/user_prog)
./b/user_headers_only
[ "$out" = "F8_E4M3" ] || { echo "unexpected output: $out"; echo "subproject: 0 passed, 1 failed"; exit 1; }
echo "subproject: 2 passed, 0 failed"
