#!/usr/bin/env bash
# accel_optim.h's CUDA launch shapes against each other on one GPU (issue 27). Every shape of
# bench/optim/variants.txt is compiled by nvcc into its own bench_optim_gpu (-DBENCH_OWN_IMPL: the implementation in
# the benchmark's TU, with the shape's macros) and into its own tests/gpu/optim/test_optim_gpu, all at once; then
# each benchmark runs alone (accel against a cudaMemcpy of the same bytes, no torch peer), a table follows (GB/s and
# the ratio to the copy for each form and shape, registers and spills, the best shape), and last the GPU test (bit
# for bit against the CPU path) runs with the best shape while the budget lasts. Every shape's launch is also
# simulated on the CPU by tests/unit/optim (optim-unit-impl-<shape>), so the winner is a tested one.
# usage (from the project root, on the GPU machine; CUDA's nvcc in PATH or /usr/local/cuda; no MPI, NCCL, cuBLAS):
#   bash bench/optim/sweep_gpu.sh [RESULT_DIR]        (default $OUT, else only the work folder)
# env: SM (90), REPS (timed steps per form, best of: 20), BUDGET (seconds for all of it: 90), NVCC, STB_INCLUDE
# (the folder of stb_ds.h; else pkg-config stb, .gpu/stb/include/stb, /usr/include/stb), VARIANTS (another list in
# variants.txt's format; two nvcc per shape run at once), SWEEP_WORK (the work folder: /tmp/optim-sweep).
# The work folder holds the programs and every log; RESULT_DIR gets three files (a device run brings back few):
# optim-sweep-table.txt, optim-sweep.jsonl (every benchmark line), optim-sweep-logs.txt (each shape's ptxas
# registers and spills, build errors, benchmark output, and the GPU test's output).
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${SWEEP_WORK:-/tmp/optim-sweep}
res=${1:-${OUT:-}}
sm=${SM:-90}
reps=${REPS:-20}
budget=${BUDGET:-90}
t0=$(date +%s)
left() { echo $((budget - ($(date +%s) - t0))); }
mkdir -p "$out" || exit 1
cd "$root" || exit 1
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[ -x "$nvcc" ] || { echo "sweep_gpu: no nvcc ($nvcc)"; exit 1; }
stb=${STB_INCLUDE:-}
if [ -z "$stb" ]; then
  for d in $(pkg-config --cflags-only-I stb 2>/dev/null | sed 's/-I//g') "$root/.gpu/stb/include/stb" \
    /usr/include/stb; do
    [ -f "$d/stb_ds.h" ] && { stb=$d; break; }
  done
fi
if [ -z "$stb" ] || [ ! -f "$stb/stb_ds.h" ]; then echo "sweep_gpu: stb_ds.h not found (set STB_INCLUDE)"; exit 1; fi

# the shapes: name, then macros (at most 8)
names=() ; declare -A flags
while read -r name rest; do
  case "$name" in ''|'#'*) continue ;; esac
  names+=("$name"); flags[$name]="$rest"
done < "${VARIANTS:-bench/optim/variants.txt}"
[ ${#names[@]} -le 8 ] || { echo "sweep_gpu: more than 8 shapes in bench/optim/variants.txt"; exit 1; }

# what meson's build passes nvcc for these programs, less MPI, NCCL and cuBLAS (the benchmark and the test use none)
common=(-O3 "-arch=sm_$sm" -std=c++17 "-Xcompiler=-fno-math-errno,-pthread" -I"$root" -I"$root/tests" -I"$stb")
link=(-cudart static -lm -lrt) # static: no libcudart.so to find at run time
echo "sweep_gpu: ${#names[@]} shapes, sm_$sm, $(basename "$nvcc") $("$nvcc" --version | grep -o 'release [0-9.]*')," \
  "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
rm -f "$out"/*.rc "$out/winner" "$out/test.log"
for n in "${names[@]}"; do
  # shellcheck disable=SC2086 # the macros are separate words
  ( timeout "$budget" "$nvcc" "${common[@]}" -Xptxas -v -DBENCH_OWN_IMPL -DBENCH_VARIANT="\"$n\"" ${flags[$n]} \
      bench/optim/bench_optim_gpu.cu -o "$out/bench_$n" "${link[@]}" > "$out/$n.build.log" 2>&1
    echo $? > "$out/$n.build.rc" ) &
  cat > "$out/test_$n.cu" <<'CU'
/* tests/gpu/optim/test_optim_gpu.cu with the implementation in its TU (the shape's macros apply to it) */
#define ACCEL_IMPLEMENTATION
#include "accel.h"
#include "accel_safetensors.h"
#include "accel_ckpt.h"
#include "accel_optim.h"
#include "gpu/optim/test_optim_gpu.cu"
CU
  # shellcheck disable=SC2086
  ( timeout "$budget" "$nvcc" "${common[@]}" ${flags[$n]} "$out/test_$n.cu" -o "$out/test_$n" "${link[@]}" \
      > "$out/$n.test-build.log" 2>&1
    echo $? > "$out/$n.test-build.rc" ) &
done
bench_builds() { for n in "${names[@]}"; do [ -f "$out/$n.build.rc" ] || return 1; done; }
while ! bench_builds; do sleep 1; done
echo "sweep_gpu: benchmarks built at $(( $(date +%s) - t0 ))s"

: > "$out/sweep.jsonl"
for n in "${names[@]}"; do
  if [ "$(cat "$out/$n.build.rc")" != 0 ]; then echo "  $n: build failed"; tail -5 "$out/$n.build.log"; continue; fi
  l=$(left); [ "$l" -gt 25 ] || { echo "  $n: skipped (budget)"; continue; }
  timeout $((l < 60 ? l - 10 : 50)) "$out/bench_$n" - "$reps" > "$out/$n.run.log" 2>&1
  rc=$?
  grep '^{' "$out/$n.run.log" >> "$out/sweep.jsonl"
  echo "  $n: rc $rc, $(grep -c '^{' "$out/$n.run.log") lines at $(( $(date +%s) - t0 ))s"
done

python3 - "$out" "${names[@]}" <<'PY' | tee "$out/table.txt"
import json, math, re, sys
out, names = sys.argv[1], sys.argv[2:]
forms = ["adamw_step_gpu", "adamw_step_gpu_bf16", "adamw_step_gpu_bf16_sr", "adamw_step_gpu_bf16_moments",
         "adamw_step_gpu_bf16_all"]
short = ["f32 28B", "bf16+copy 26B", "bf16+SR 26B", "bf16 mom 20B", "all bf16 18B"]
res = {}
for l in open(out + "/sweep.jsonl"):
    d = json.loads(l)
    m = re.match(r"(\S+):", d["params"].get("shape", ""))
    if m: res[(m.group(1), d["bench"])] = (d["accel"], d["reference"], d["ratio"])
def regs(n):  # registers and spill bytes of the vector-path instances (ptxas -v)
    r, sp, cur = [], 0, ""
    try: lines = open("%s/%s.build.log" % (out, n)).read().split("\n")
    except OSError: return "-"
    for l in lines:
        m = re.search(r"Compiling entry function '(\S+)'", l)
        if m: cur = m.group(1); continue
        if "vec_kernel" not in cur: continue
        m = re.search(r"(\d+) bytes spill stores", l)
        if m: sp = max(sp, int(m.group(1)))
        m = re.search(r"Used (\d+) registers", l)
        if m: r.append(int(m.group(1)))
    return "%d-%d/%dB" % (min(r), max(r), sp) if r else "-"
print("ratio to cudaMemcpy of the same bytes (accel GB/s), goal 0.90 each; regs: vector-path registers/most spill")
print("%-8s" % "shape" + "".join("%15s" % s for s in short) + "%9s%9s  %s" % ("geomean", "min", "regs"))
score = {}
for n in names:
    row = [res.get((n, f)) for f in forms]
    cells = ["%6.3f (%4.0f)" % (x[2], x[0]) if x else "%15s" % "-" for x in row]
    ok = [x[2] for x in row if x]
    if len(ok) == len(forms):
        score[n] = (math.exp(sum(math.log(x) for x in ok) / len(ok)), min(ok))
    g = "%9.3f%9.3f" % score[n] if n in score else "%18s" % "-"
    print("%-8s" % n + "".join(" %14s" % c for c in cells) + g + "  " + regs(n))
for i, f in enumerate(forms):
    best = max((res[(n, f)][2], n) for n in names if (n, f) in res) if any((n, f) in res for n in names) else None
    if best: print("best %-14s %s (%.3f)" % (short[i] + ":", best[1], best[0]))
if score:
    win = max(score, key=lambda n: score[n])
    print("best over the forms (geometric mean of the ratios): %s %.3f (min %.3f)" % (win, *score[win]))
    open(out + "/winner", "w").write(win)
PY

win=$(cat "$out/winner" 2>/dev/null)
[ -n "$win" ] || win=${names[0]} # no complete row: the GPU test of the first shape (the defaults)
if [ -n "$win" ]; then
  while [ ! -f "$out/$win.test-build.rc" ] && [ "$(left)" -gt 30 ]; do sleep 1; done
  l=$(left)
  if [ ! -f "$out/$win.test-build.rc" ] || [ "$(cat "$out/$win.test-build.rc")" != 0 ]; then
    echo "sweep_gpu: the GPU test of $win did not build in time"; tail -5 "$out/$win.test-build.log" 2>/dev/null
  elif [ "$l" -gt 20 ]; then
    echo "sweep_gpu: GPU test (optim-gpu's source) with $win, ${l}s left"
    timeout $((l - 5)) "$out/test_$win" > "$out/test.log" 2>&1
    echo "sweep_gpu: test rc $? (0: bit for bit as the CPU path; 124: out of time)"; tail -4 "$out/test.log"
  else
    echo "sweep_gpu: no time left for the GPU test of $win"
  fi
fi
wait
if [ -n "$res" ]; then
  mkdir -p "$res" && cp "$out/table.txt" "$res/optim-sweep-table.txt" && cp "$out/sweep.jsonl" "$res/optim-sweep.jsonl"
  for n in "${names[@]}"; do
    echo "== $n (${flags[$n]:-defaults}): benchmark build rc $(cat "$out/$n.build.rc" 2>/dev/null)," \
      "test build rc $(cat "$out/$n.test-build.rc" 2>/dev/null)"
    grep -E "Compiling entry|registers|spill|error" "$out/$n.build.log" 2>/dev/null | grep -v "Compile time"
    grep -E "error" "$out/$n.test-build.log" 2>/dev/null | head -20
    cat "$out/$n.run.log" 2>/dev/null
  done > "$res/optim-sweep-logs.txt"
  [ -f "$out/test.log" ] && { echo "== GPU test ($win)"; cat "$out/test.log"; } >> "$res/optim-sweep-logs.txt"
  echo "sweep_gpu: results in $res/optim-sweep-{table.txt,.jsonl,logs.txt}"
fi
echo "sweep_gpu: done at $(( $(date +%s) - t0 ))s; the best shape becomes the default by its macros in accel_optim.h"
