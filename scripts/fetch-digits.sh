#!/usr/bin/env bash
# Fetches the UCI handwritten digits (1,797 8x8 images, 64 features 0..16 + label per CSV row) into data/digits.csv.
# The copy comes from Debian's python3-sklearn package (sklearn/datasets/data/digits.csv.gz): the .deb is downloaded
# with `apt-get download` and unpacked with `dpkg -x` into a temp dir; neither the package nor Python is installed.
# Idempotent: does nothing when data/digits.csv already has 1,797 rows.
#   scripts/fetch-digits.sh [OUT_CSV]     (default: data/digits.csv under the repository root)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out=${1:-$root/data/digits.csv}
if [ -f "$out" ] && [ "$(wc -l < "$out")" -eq 1797 ]; then
  echo "fetch-digits: $out already present"
  exit 0
fi
mkdir -p "$(dirname "$out")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
SUDO=""
[ "$(id -u)" != 0 ] && command -v sudo >/dev/null && SUDO=sudo
found=""
for pkg in python3-sklearn python3-sklearn-lib; do
  ( cd "$tmp" && chmod 777 . && apt-get download -qq "$pkg" >/dev/null 2>&1 ) ||
    { $SUDO apt-get update -qq >/dev/null 2>&1 || true; ( cd "$tmp" && apt-get download -qq "$pkg" >/dev/null 2>&1 ) || continue; }
  for deb in "$tmp"/"$pkg"_*.deb; do
    [ -f "$deb" ] || continue
    dpkg -x "$deb" "$tmp/x"
  done
  found=$(find "$tmp/x" -path '*sklearn/datasets/data/digits.csv.gz' -print -quit 2>/dev/null || true)
  [ -n "$found" ] && break
done
if [ -z "$found" ]; then
  echo "fetch-digits: could not find sklearn/datasets/data/digits.csv.gz in python3-sklearn or python3-sklearn-lib" >&2
  echo "fetch-digits: (check 'apt-cache policy python3-sklearn'; the package must be available from an apt source)" >&2
  exit 1
fi
gunzip -c "$found" > "$tmp/digits.csv"
rows=$(wc -l < "$tmp/digits.csv")
if [ "$rows" -ne 1797 ]; then
  echo "fetch-digits: $found has $rows rows, expected 1797" >&2
  exit 1
fi
mv "$tmp/digits.csv" "$out"
echo "fetch-digits: wrote $out (1797 rows) from Debian package $pkg"
