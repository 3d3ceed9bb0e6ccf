#!/usr/bin/env python3
"""accel_safetensors.h against the reference `safetensors` package (huggingface/safetensors), both directions.

usage: check_safetensors_ref.py CKPT_FIXTURE

Needs an interpreter with `safetensors` and `numpy` (torch too for BF16): this one, or the one named by
ACCEL_REFERENCE_PYTHON (e.g. a venv made with `python3 -m venv --system-site-packages V && V/bin/pip install
--no-deps safetensors`, beside Debian's numpy/torch). Without one the test is skipped (exit 77).

1. accel writes a file (every dtype numpy knows, BF16 when torch is there, a tensor named "", a 0-rank tensor, one
   metadata entry): the reference package reads every tensor back with the same bytes, and the reference writer
   given the same tensors and metadata writes a byte-identical file (its tensor order: its Dtype enum order,
   descending, then the name).
2. The reference writes a file with a tensor named "" and __metadata__ keys/values containing U+0000 ("k" and
   "k\\0x"): accel reads every tensor and the metadata with its full lengths (nothing cut at the NUL, no key shadowing
   another).
"""
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import safetensors
    from safetensors.numpy import load_file, save, save_file
except ImportError:
    ref = os.environ.get("ACCEL_REFERENCE_PYTHON")
    if ref and os.path.realpath(ref) != os.path.realpath(sys.executable) and not os.environ.get("ACCEL_REF_REEXEC"):
        os.environ["ACCEL_REF_REEXEC"] = "1"
        os.execv(ref, [ref] + sys.argv)
    print("skipped: no interpreter with the safetensors package (set ACCEL_REFERENCE_PYTHON)")
    sys.exit(77)
try:
    from safetensors import TensorSpec  # safetensors >= 0.6: (dtype, shape, data pointer, length)
except ImportError:
    TensorSpec = None

FIXTURE = sys.argv[1]
failures = 0
checks = 0


def check(cond, what):
    global failures, checks
    checks += 1
    if not cond:
        failures += 1
        print("FAIL:", what, file=sys.stderr)


def pattern(n, k):
    """format_fixture's pattern()."""
    return bytes(((i * 131 + k * 17 + (i >> 8)) & 255) for i in range(n))


# format_fixture write-ref: (name, dtype, shape), pattern index = position in this list
NP = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32, "I16": np.int16,
      "I8": np.int8, "U64": np.uint64, "U32": np.uint32, "U16": np.uint16, "U8": np.uint8, "BOOL": np.bool_}
SPEC = [("w_%s" % d, d, [2, 3 + i]) for i, d in enumerate(["F64", "F32", "F16", "I64", "I32", "I16", "I8", "U64",
                                                           "U32", "U16", "U8", "BOOL"])]
SPEC += [("", "U8", [3]), ("scalar", "F32", []), ("z_BF16", "BF16", [2, 2])]
SIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8, "U32": 4, "U16": 2,
        "U8": 1, "BOOL": 1}


def payload(k, dt, shape):
    n = 1
    for s in shape:
        n *= s
    b = pattern(n * SIZE[dt], k)
    if dt == "BOOL":
        b = bytes(x & 1 for x in b)  # valid numpy booleans
    return b


NAME = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64", "I32": "int32",
        "I16": "int16", "I8": "int8", "U64": "uint64", "U32": "uint32", "U16": "uint16", "U8": "uint8", "BOOL": "bool"}


def ref_serialize(items, metadata):
    """The reference writer itself (safetensors.serialize, the Rust code every binding calls)."""
    keep, flat = [], {}
    for name, (dt, shape, data) in items.items():
        if TensorSpec is not None:
            buf = np.frombuffer(data if data else b"\0", dtype=np.uint8).copy()
            keep.append(buf)
            flat[name] = TensorSpec(dtype=NAME[dt], shape=tuple(shape), data_ptr=buf.ctypes.data, data_len=len(data))
        else:
            flat[name] = {"dtype": NAME[dt], "shape": shape, "data": data}
    return bytes(safetensors.serialize(flat, metadata=metadata))


with tempfile.TemporaryDirectory() as tmp:
    # ------------------------------------------------------------------ 1. accel writes, the reference reads
    out = subprocess.run([FIXTURE, "write-ref", tmp], capture_output=True, text=True)
    check(out.returncode == 0, "format_fixture write-ref: " + out.stderr)
    path = os.path.join(tmp, "ref.safetensors")
    raw = open(path, "rb").read() if out.returncode == 0 else b""
    items = {name: (dt, shape, payload(k, dt, shape)) for k, (name, dt, shape) in enumerate(SPEC)}
    if raw:
        got = {name: (info["dtype"], info["shape"], bytes(info["data"])) for name, info in safetensors.deserialize(raw)}
        check(set(got) == set(items), "the reference reads every name: %r" % sorted(got))
        for name, want in items.items():
            check(got.get(name) == want, "the reference reads %r: %r" % (name, got.get(name, ("?",))[:2]))
        with safetensors.safe_open(path, framework="np") as f:
            meta = f.metadata()
            for name, (dt, shape, data) in items.items():
                if dt == "BF16":
                    continue  # numpy has no bfloat16
                a = f.get_tensor(name)
                check(a.dtype == np.dtype(NAME[dt]) and list(a.shape) == shape and a.tobytes() == data,
                      "numpy reader: %r" % name)
        check(meta == {"format": "pt"}, "the reference reads the metadata: %r" % (meta,))
        # byte-identical to the reference writer (one metadata key: the order of serde's HashMap does not matter)
        ref_bytes = ref_serialize(items, {"format": "pt"})
        check(ref_bytes == raw, "byte-identical to the reference writer (tensor order, padding, header)")
        if ref_bytes != raw:
            print("accel:    ", raw[8:8 + 400], file=sys.stderr)
            print("reference:", ref_bytes[8:8 + 400], file=sys.stderr)

    # ------------------------------------------------------------------ 2. the reference writes, accel reads
    ref_path = os.path.join(tmp, "nul.safetensors")
    tensors = {"": np.arange(3, dtype=np.uint8), "a": np.array([1.5, -2.0], dtype=np.float32),
               "b": np.array(7, dtype=np.int32)}
    meta = {"k": "plain", "k\0x": "v\0w", "z": "\0"}
    save_file(tensors, ref_path, metadata=meta)
    out = subprocess.run([FIXTURE, "read", ref_path], capture_output=True, text=True)
    check(out.returncode == 0, "accel reads the reference file: " + out.stderr)
    got, gmeta = {}, []
    for line in out.stdout.splitlines():
        parts = line.split(" ")
        if parts[0] == "meta":
            gmeta.append((bytes.fromhex(parts[1]).decode(), bytes.fromhex(parts[2]).decode()))
            continue
        got[bytes.fromhex(parts[0]).decode()] = parts[1]
    check(set(got) == set(tensors), "names (the empty one included): %r" % sorted(got))
    check(sorted(gmeta) == sorted(meta.items()), "metadata with U+0000 kept whole: %r" % gmeta)
    out = subprocess.run([FIXTURE, "meta-get", ref_path, "k"], capture_output=True, text=True)
    check(out.returncode == 0 and out.stdout.strip() == "706c61696e", "metadata_get(\"k\") is \"plain\", not "
          "shadowed by \"k\\0x\": %r %r" % (out.stdout, out.stderr))

print(f"ckpt-safetensors-ref: {checks - failures} passed, {failures} failed")
sys.exit(1 if failures else 0)
