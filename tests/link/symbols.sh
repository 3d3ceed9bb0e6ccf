#!/usr/bin/env bash
# usage: symbols.sh STATIC_EXE LIB [LIB...] -- USER_OBJS...
# - every strong symbol a library defines is accel_* or one of stb_ds's functions (documented in accel.h's manual);
# - every strong accel_ symbol is defined exactly once across the libraries' objects and the user objects;
# - the library exports the public API (a floor on the count);
# - the ACCEL_STATIC program defines no strong symbol except main and the C runtime's own (names starting with _).
set -euo pipefail
static_exe=$1; shift
libs=(); users=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do libs+=("$1"); shift; done
[ $# -gt 0 ] && shift
users=("$@")
stbds="stbds_arrgrowf stbds_arrfreef stbds_hmget_key stbds_hmget_key_ts stbds_hmput_default stbds_hmput_key
stbds_hmdel_key stbds_hmfree_func stbds_shmode_func stbds_hash_bytes stbds_hash_string stbds_rand_seed stbds_stralloc
stbds_strreset"
passed=0 failed=0
check() { if [ "$1" = ok ]; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL: $2"; fi; }
strong() { nm --defined-only "$@" 2>/dev/null | awk '$2 ~ /^[TDBRG]$/ {print $3}'; }
for lib in "${libs[@]}"; do
  bad=$(strong "$lib" | sort -u | grep -v '^accel_' | grep -vxF -f <(tr ' ' '\n' <<<"$stbds" | sed '/^$/d') || true)
  [ -z "$bad" ] && check ok || check no "$(basename "$lib") defines symbols outside accel_ and stb_ds: $(echo $bad | head -c 400)"
  dups=$( { strong "$lib" "${users[@]}" | grep '^accel_'; } | sort | uniq -d)
  [ -z "$dups" ] && check ok || check no "duplicate strong symbols with $(basename "$lib"): $dups"
  n=$(strong "$lib" | grep -c '^accel_' || true)
  [ "$n" -ge 60 ] && check ok || check no "$(basename "$lib") exports only $n accel_ symbols"
  echo "$(basename "$lib"): $n accel_ symbols, $(strong "$lib" | grep -c '^stbds_' || true) stb_ds functions"
done
leak=$(strong "$static_exe" | grep -v '^_' | grep -vx 'main' || true)
[ -z "$leak" ] && check ok || check no "ACCEL_STATIC program defines: $(echo $leak | head -c 400)"
echo "symbols: $passed passed, $failed failed"
[ "$failed" = 0 ]
