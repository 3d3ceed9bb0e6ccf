#!/usr/bin/env bash
# usage: zero_export_async.sh MPIRUN_SH EXE NP [kill ACCEL_CLI TRIALS] — the consolidated ZeRO-3 export
# (accel_zero_fsdp_export) saved synchronously and through an async save on NP ranks (test_zero3_mpi export DIR):
# the two checkpoint directories must be identical byte for byte, and model.safetensors, read by the safetensors
# package (a second parser; the interpreter of ACCEL_REFERENCE_PYTHON, else python3 — without the package, a reader
# of the format's header written here), must hold the parameters put together from the ranks' pieces (DIR/expected.f32, written by the run without the export).
# With kill: TRIALS runs of test_zero3_mpi exportloop (an async save of the export after every step) are killed
# (kill -9, every rank, by pid) at a random moment; each time every visible checkpoint must be complete and verify
# (`accel ckpt ls` exits 0) and the newest one must hold the parameters of its own iteration (expected_<N>.f32).
set -u
mpirun_sh=$1 exe=$2 np=$3
dir=$(mktemp -d /tmp/accel_zero_export_XXXXXX); trap 'rm -rf "$dir"' EXIT
py=${ACCEL_REFERENCE_PYTHON:-python3}
"$py" -c "import numpy, safetensors" 2>/dev/null || py=python3
# DIR/async/model.safetensors against DIR/expected.f32 (a second parser), every rank's file in the marker
cat >"$dir/check.py" <<'PY'
import json, os, struct, sys
d, np_ = sys.argv[1], int(sys.argv[2])
try:
    import numpy as np
    from safetensors.numpy import load_file
    def read(path):  # name -> (dtype, shape, bytes)
        return {n: (str(t.dtype), tuple(t.shape), t.tobytes()) for n, t in load_file(path).items()}
    reader = "the safetensors package"
except ImportError:
    def read(path):  # the format by hand: u64 header length, JSON header, data
        b = open(path, "rb").read()
        n = struct.unpack("<Q", b[:8])[0]
        h = json.loads(b[8:8 + n])
        h.pop("__metadata__", None)
        return {k: ({"F32": "float32"}.get(v["dtype"], v["dtype"]), tuple(v["shape"]),
                    b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]) for k, v in h.items()}
    reader = "a reader of the header written here (no safetensors package)"
# the test model of test_zero3_mpi.c (NAMES, SHAPES), written here by hand
names = ["wte", "wpe", "h.0.w", "h.0.b", "h.0.empty", "h.1.w", "h.1.b", "tiny", "h.2.w", "h.2.b", "h.3.w", "h.3.b",
         "head"]
shapes = [(37, 3), (5, 2), (8, 9), (9, 1), (0, 4), (8, 9), (9, 1), (2, 1), (11, 7), (7, 1), (11, 7), (7, 1), (50, 1)]
raw = open(os.path.join(d, "expected.f32"), "rb").read()
want, off = {}, 0
for n, s in zip(names, shapes):
    k = s[0] * s[1] * 4
    want[n] = raw[off:off + k]
    off += k
assert off == len(raw), f"expected.f32 holds {len(raw)} bytes, the model {off}"
got = read(os.path.join(d, "async", "model.safetensors"))
assert sorted(got) == sorted(names), f"tensors {sorted(got)}"
for n, s in zip(names, shapes):
    dt, shape, data = got[n]
    assert dt == "float32" and shape == s, f"{n}: {dt} {shape}"
    assert data == want[n], f"{n}: values differ from the pieces put together"
# every rank's own file is listed in the marker
marker = json.load(open(os.path.join(d, "async", "checkpoint_complete.json")))
for r in range(np_):
    assert f"random_states_{r}.bin" in marker["files"], f"random_states_{r}.bin missing from the marker"
if len(sys.argv) < 4:
    print(f"zero3 np{np_}: the async consolidated export equals the synchronous one; {reader} reads it")
PY
if [ "${4:-}" = kill ]; then
  cli=$5 trials=$6 during=0 with=0
  for t in $(seq 1 "$trials"); do
    d=$dir/k$t; mkdir -p "$d"
    "$mpirun_sh" "$np" "$exe" exportloop "$d" >"$d/out.txt" 2>&1 &
    job=$!
    for _ in $(seq 1 300); do [ "$(ls "$d"/pid_* 2>/dev/null | wc -l)" -eq "$np" ] && break; sleep 0.1; done
    [ "$(ls "$d"/pid_* 2>/dev/null | wc -l)" -eq "$np" ] ||
      { echo "trial $t: the ranks did not start"; cat "$d/out.txt"; exit 1; }
    sleep "$((RANDOM % 3)).$((RANDOM % 10))$((RANDOM % 10))"
    kill -9 $(cat "$d"/pid_*) 2>/dev/null
    wait "$job" 2>/dev/null
    ls -a "$d/checkpoints" 2>/dev/null | grep -q '^\..*\.tmp$' && during=$((during + 1))
    newest=$(ls "$d/checkpoints" 2>/dev/null | grep '^checkpoint_[0-9]*$' | sed 's/checkpoint_//' | sort -n | tail -1)
    [ -n "$newest" ] || { echo "trial $t: killed before the first checkpoint"; continue; }
    "$cli" ckpt ls "$d/checkpoints" >"$d/ls.txt" 2>&1 ||
      { echo "trial $t: accel ckpt ls failed"; cat "$d/ls.txt"; exit 1; }
    grep -q "checkpoint_$newest: checkpoint, complete, checksums OK (newest" "$d/ls.txt" ||
      { echo "trial $t: checkpoint_$newest is not the newest complete one"; cat "$d/ls.txt"; exit 1; }
    cp "$d/expected_$newest.f32" "$d/expected.f32" 2>/dev/null || { echo "trial $t: no expected_$newest.f32"; exit 1; }
    mkdir -p "$d/async" && cp "$d/checkpoints/checkpoint_$newest/"* "$d/async/"
    "$py" "$dir/check.py" "$d" "$np" quiet || { echo "trial $t: checkpoint_$newest holds other values"; exit 1; }
    with=$((with + 1))
  done
  echo "kill -9 during async exports: $trials trials, $with with a checkpoint to check, $during killed during a write"
  [ "$with" -ge $((trials / 2)) ] || { echo "too few trials reached a checkpoint"; exit 1; }
  exit 0
fi
"$mpirun_sh" "$np" "$exe" export "$dir" || { echo "export on $np ranks failed"; exit 1; }
diff -r "$dir/sync" "$dir/async" || { echo "the async export differs from the synchronous one"; exit 1; }
[ -f "$dir/async/model.safetensors" ] || { echo "no model.safetensors in the async checkpoint"; exit 1; }
"$py" "$dir/check.py" "$dir" "$np" || exit 1
