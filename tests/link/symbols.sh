#!/usr/bin/env bash
# usage: symbols.sh LIB OBJS_OR_EXES... — every strong accel_ symbol is defined exactly once across the library and
# the user objects, the library defines the public API, and the ACCEL_STATIC program exports no accel_ symbol.
set -euo pipefail
lib=$1 static_exe=$2; shift 2
dups=$( { nm --defined-only "$lib" "$@" 2>/dev/null | awk '$2 ~ /^[TDB]$/ && $3 ~ /^accel_/ {print $3}'; } | sort | uniq -d)
if [ -n "$dups" ]; then echo "duplicate strong symbols: $dups"; echo "symbols: 0 passed, 1 failed"; exit 1; fi
n=$(nm --defined-only "$lib" | awk '$2 == "T" && $3 ~ /^accel_/' | wc -l)
if [ "$n" -lt 40 ]; then echo "library exports only $n accel_ functions"; echo "symbols: 1 passed, 1 failed"; exit 1; fi
leak=$(nm --defined-only "$static_exe" | awk '$2 ~ /^[TDB]$/ && $3 ~ /^accel_/ {print $3}' | head -5)
if [ -n "$leak" ]; then echo "ACCEL_STATIC build exports: $leak"; echo "symbols: 2 passed, 1 failed"; exit 1; fi
echo "library exports $n accel_ functions, no duplicates; ACCEL_STATIC exports none"
echo "symbols: 3 passed, 0 failed"
