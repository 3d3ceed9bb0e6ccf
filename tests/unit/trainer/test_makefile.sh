#!/usr/bin/env bash
# The Makefile-only example (examples/makefile): `make` with the vendored headers into a temp dir, run it, and compare
# with SEMANTICS.md §1's worked example (N=10, B=3, P=2) and torch's GradScaler rule (init 4, interval 2).
set -u
src=${1:?usage: test_makefile.sh SOURCE_ROOT}
command -v make >/dev/null || { echo "SKIP: make not installed"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! make -s -C "$src/examples/makefile" BUILD="$tmp" >"$tmp/make.log" 2>&1; then
  cat "$tmp/make.log"; echo "trainer-makefile: 0 passed, 1 failed"; exit 1
fi
out=$("$tmp/accel_make_example") || { echo "$out"; echo "trainer-makefile: 0 passed, 1 failed"; exit 1; }
echo "$out"
pass=0 fail=0
for want in "process 0: [0,1,2] [6,7,8]" "process 1: [3,4,5] [9,0,1]" "step 0: found_inf=0 skipped=0 scale=4" \
            "step 1: found_inf=1 skipped=1 scale=2" "step 2: found_inf=0 skipped=0 scale=2" \
            "step 3: found_inf=0 skipped=0 scale=4"; do
  if grep -qxF "$want" <<<"$out"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "missing: $want"; fi
done
[ -z "$(ls -A "$src/examples/makefile" | grep -v '^Makefile$\|^main.c$')" ] && pass=$((pass + 1)) ||
  { fail=$((fail + 1)); echo "make wrote into the source directory"; }
echo "trainer-makefile: $pass passed, $fail failed"
[ $fail -eq 0 ]
