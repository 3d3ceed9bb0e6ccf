#!/usr/bin/env bash
# Launch-shape sweep of the accel_amp.h GPU kernels (issue 27): builds bench_amp_gpu.cu and bench_fp8_gpu.cu once per
# variant of the launch-shape macros (ACCEL_AMP_CUDA_BLOCK, ACCEL__AMP_U_*, ACCEL__AMP_MINB_*, ACCEL__AMP_WAVES_*;
# accel_amp.h "list kernels" says what each means), runs each build without the PyTorch peer, and prints one table
# row per (variant, bench row) with its ratio to the limit measured in the same run, then the best variant per row.
#
#   usage (from the project root, on the GPU machine): bash bench/amp/sweep_gpu.sh [OUTDIR]
#   env:   ARCH (default sm_90), JOBS (parallel nvcc, default 16), REPS (default 10), FP8_BYTES (default 268435456),
#          VARIANTS (a file of lines as the list below, replacing it), NVCC, STB_INCLUDE (the folder holding
#          stb_ds.h: /usr/include/stb or .gpu/stb/include/stb when unset)
#   expected time on one H200 with 16 cores: about 60 s of compiles (16 nvcc in parallel) + about 5 s per variant of
#   runs, 100-120 s in all. Output: OUTDIR/table.txt (also printed), OUTDIR/<variant>.{amp,fp8}.jsonl, the builds'
#   ptxas -v output (registers, spills; summarised in the table) in OUTDIR/<variant>.{amp,fp8}.build.txt.
#
# Each build compiles the implementation into the bench's own TU (-DACCEL_IMPLEMENTATION: the core and accel_amp.h,
# nothing else), so no NCCL, cuBLAS or MPI is needed: only nvcc, the CUDA runtime and stb_ds.h. Flags as meson's
# release build of the benches (-O3, -std=c++17, -lineinfo, -fno-math-errno on the host side).
#
# Every variant is inside what tests/unit/amp/test_amp_grid.c runs the kernels' thread code over on the CPU (U in
# {1, 2, 4, 8}, blocks of 32..1024 threads, a block per chunk or any smaller grid; the macros refuse anything else
# with #error), and the launch bound (MINB) only changes registers: a variant that wins computes what the default
# computes. Before making a winner the default, run the gpu suite (amp-gpu, amp-gpu-fp8) with it.
set -u
root=$(pwd)
[ -f "$root/accel_amp.h" ] || { echo "run from the project root" >&2; exit 2; }
OUT=${1:-/tmp/amp-sweep}
ARCH=${ARCH:-sm_90}
JOBS=${JOBS:-16}
REPS=${REPS:-10}
FP8_BYTES=${FP8_BYTES:-268435456}
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
if [ -z "${STB_INCLUDE:-}" ]; then
  for d in /usr/include/stb "$root/.gpu/stb/include/stb" "$root/../shared/gpu/stb/include/stb"; do
    [ -f "$d/stb_ds.h" ] && { STB_INCLUDE=$d; break; }
  done
fi
[ -f "${STB_INCLUDE:-}/stb_ds.h" ] || { echo "stb_ds.h not found: set STB_INCLUDE" >&2; exit 2; }
mkdir -p "$OUT"
T0=$(date +%s)

# One variant a line: name, then B = ACCEL_AMP_CUDA_BLOCK, and for the read + write kinds (unscale, conversions,
# stochastic rounding, fp8 cast / dequantize: FAST) and the norm (NORM): U = 16-byte units a thread loads before it
# works, MINB = blocks of 256 threads per SM in the launch bound (8 -> 32 registers), WAVES = 0: a block per chunk,
# k: k x the resident blocks walking the chunks; anything after the eighth column is passed on as further macros
# (e.g. -DACCEL__AMP_U_UNSCALE=2 -DACCEL__AMP_CACHE=1). v0 is the committed default, written out.
default_variants() {
cat <<'EOF'
#  name          B    U_FAST MINB_FAST WAVES_FAST  U_NORM MINB_NORM WAVES_NORM
v0-default      256   4      4         0           4      4         1
v1-u2           256   2      4         0           8      4         1
v2-u1-full      256   1      8         0           2      8         1
v3-u8           256   8      2         0           4      4         2
v4-stride1      256   4      4         1           8      4         2
v5-stride2-u1   256   1      8         2           8      2         1
v6-b128         128   4      4         0           4      4         1
v7-b512         512   2      4         0           4      4         4
EOF
}
if [ -n "${VARIANTS:-}" ]; then cat "$VARIANTS"; else default_variants; fi | grep -v '^\s*\(#\|$\)' |
  while read -r name B uf mf wf un mn wn extra; do
    echo "$name|-DACCEL_AMP_CUDA_BLOCK=$B" \
         "-DACCEL__AMP_U_FAST=$uf -DACCEL__AMP_MINB_FAST=$mf -DACCEL__AMP_WAVES_FAST=$wf" \
         "-DACCEL__AMP_U_NORM=$un -DACCEL__AMP_MINB_NORM=$mn -DACCEL__AMP_WAVES_NORM=$wn${extra:+ $extra}"
  done > "$OUT/variants.txt"
n=$(wc -l < "$OUT/variants.txt")
ver=$("$NVCC" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')
echo "== $n variants, $ARCH, nvcc $ver, stb $STB_INCLUDE, out $OUT"

# ---- builds: every (variant, bench) in parallel
build() { # name macros bench
  local name=$1 macros=$2 b=$3
  # shellcheck disable=SC2086
  "$NVCC" -O3 -std=c++17 -arch="$ARCH" -lineinfo -Xcompiler=-fno-math-errno -Xptxas -v -DACCEL_IMPLEMENTATION $macros \
    -I"$root" -I"$root/bench/amp" -I"$STB_INCLUDE" "$root/bench/amp/bench_${b}_gpu.cu" -o "$OUT/$name.$b" \
    -lm -lpthread > "$OUT/$name.$b.build.txt" 2>&1 ||
    { echo "BUILD FAILED: $name $b (see $OUT/$name.$b.build.txt)"; return 1; }
}
pids=()
while IFS='|' read -r name macros; do
  for b in amp fp8; do
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do sleep 0.2; done
    build "$name" "$macros" "$b" & pids+=($!)
  done
done < "$OUT/variants.txt"
for p in "${pids[@]}"; do wait "$p"; done
echo "== built at $(( $(date +%s) - T0 ))s"

# ---- runs, one at a time (the GPU is the thing measured)
while IFS='|' read -r name macros; do
  [ -x "$OUT/$name.amp" ] && timeout 120 "$OUT/$name.amp" "" "$REPS" < /dev/null > "$OUT/$name.amp.jsonl" \
    2> "$OUT/$name.amp.err"
  [ -x "$OUT/$name.fp8" ] && timeout 60 "$OUT/$name.fp8" "" "$FP8_BYTES" "$((REPS * 2))" < /dev/null \
    > "$OUT/$name.fp8.jsonl" 2> "$OUT/$name.fp8.err"
  echo "   ran $name at $(( $(date +%s) - T0 ))s"
done < "$OUT/variants.txt"

# ---- the table
python3 - "$OUT" <<'PY' | tee "$OUT/table.txt"
import json, os, re, sys
out = sys.argv[1]
variants = [l.rstrip("\n").split("|", 1) for l in open(os.path.join(out, "variants.txt")) if "|" in l]
names = {(0, 1): "unscale", (1, 2): "cvt_bf16", (1, 3): "cvt_f16", (2, 2): "sr", (3, 1): "norm", (4, 1): "scale",
         (6, 4): "fp8q", (7, 5): "fp8d"}
def regs(name):
    """registers of the specialised instances and any spill, from ptxas -v"""
    p = os.path.join(out, name + ".amp.build.txt")
    if not os.path.exists(p):
        return "no build"
    cur, res, spill = None, {}, []
    for l in open(p):
        if "Compiling entry function" in l:
            m = re.search(r"'_Z17accel__amp_kernelILi(n?\d+)ELi(n?\d+)E", l)
            cur = None
            if m:
                k, i = (int(x.replace("n", "-")) for x in m.groups())
                cur = names.get((k, i), "generic%d" % k if i == 0 else None)
            continue
        m = re.search(r"Used (\d+) registers", l)
        if m and cur:
            res[cur] = int(m.group(1))
        m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", l)
        if m and cur and (m.group(1) != "0" or m.group(2) != "0"):
            spill.append(cur)
    keep = ["unscale", "cvt_bf16", "sr", "norm", "scale", "fp8q", "fp8d"]
    s = " ".join("%s=%d" % (k, res[k]) for k in keep if k in res)
    return s + ("; SPILLS: " + ",".join(sorted(set(spill))) if spill else "; no spills")
def key(d):
    p = d.get("params", {})
    shape = "%s tensors" % p["tensors"] if "tensors" in p else ""
    if "bytes" in p:
        shape += (" " if shape else "") + "%d MiB" % (p["bytes"] >> 20)
    elif "elements" in p:
        shape += (" " if shape else "") + "%.0fM el" % (p["elements"] / 1e6)
    return d["bench"], shape
rows, best = [], {}
print("%-14s %-28s %-20s %9s %9s %7s %5s" % ("variant", "bench", "shape", "accel", "limit", "ratio", "goal"))
for name, macros in variants:
    lines = []
    for f in ("amp", "fp8"):
        p = os.path.join(out, "%s.%s.jsonl" % (name, f))
        if os.path.exists(p):
            for l in open(p):
                try:
                    lines.append(json.loads(l))
                except ValueError:
                    pass
    if not lines:
        print("%-14s (no results: see %s/%s.*.err / .build.txt)" % (name, out, name))
    for d in lines:
        b, shape = key(d)
        if b.startswith("limit_"):
            continue
        r = d.get("ratio")
        print("%-14s %-28s %-20s %9.0f %9.0f %7.3f %5s" % (name, b, shape, d["accel"], d["reference"], r,
                                                        d.get("goal")))
        k = (b, shape)
        if r is not None and (k not in best or r > best[k][0]):
            best[k] = (r, name, d.get("goal"))
    for d in lines:
        if d["bench"] == "limit_copy_gpu":
            p = d["params"]
            print("%-14s   limit: copy %.0f GB/s (%s; cudaMemcpy %.0f), %s" % (name, p.get("limit_gbs", 0),
                  p.get("kernel", ""), d["reference"], "bytes %d" % p.get("bytes", 0)))
    print("%-14s   registers: %s" % (name, regs(name)))
    print("%-14s   macros: %s" % (name, macros))
print("\nbest variant per row:")
for (b, shape), (r, name, goal) in sorted(best.items()):
    print("  %-28s %-20s %-14s %.3f (goal %s)%s" % (b, shape, name, r, goal,
          "" if goal is None or r >= goal else "  below goal"))
PY
echo "== done at $(( $(date +%s) - T0 ))s"
