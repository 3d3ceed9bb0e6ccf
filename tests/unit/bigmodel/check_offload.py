#!/usr/bin/env python3
"""Accelerate's offload folder (utils/offload.py) both ways: an offload folder written by Accelerate's
offload_state_dict is read by accel (format_fixture read-offload: every name, dtype, shape and XXH64 of the bytes), and
one written by accel (accel_bm_offload_save through format_fixture write-offload) is loaded by Accelerate's
load_offloaded_weight (every tensor's dtype, shape and bytes) and its index.json is byte-identical to the one
Accelerate's save_offload_index writes for the same tensors.

usage: check_offload.py CKPT_FIXTURE — needs accelerate, numpy and torch (this interpreter or ACCEL_REFERENCE_PYTHON),
else skipped (exit 77).
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np  # noqa: F401
    import torch
    from accelerate.utils import offload
except ImportError:
    ref = os.environ.get("ACCEL_REFERENCE_PYTHON")
    if ref and os.path.realpath(ref) != os.path.realpath(sys.executable) and not os.environ.get("ACCEL_REF_REEXEC"):
        os.environ["ACCEL_REF_REEXEC"] = "1"
        os.execv(ref, [ref] + sys.argv)
    print("skipped: no interpreter with accelerate, numpy and torch (set ACCEL_REFERENCE_PYTHON)")
    sys.exit(77)

FIXTURE = sys.argv[1]
failures = 0
checks = 0


def check(cond, what):
    global failures, checks
    checks += 1
    if not cond:
        failures += 1
        print("FAIL:", what, file=sys.stderr)
    return cond


M = (1 << 64) - 1
P1, P2, P3, P4, P5 = (11400714785074694791, 14029467366897019727, 1609587929392839161, 9650029242287828579,
                      2870177450012600261)


def rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & M


def xround(acc, v):
    return (rotl((acc + v * P2) & M, 31) * P1) & M


def xxh64(data, seed=0):
    """XXH64 written from the specification (Yann Collet's xxHash spec, XXH64 section)."""
    n = len(data)
    p = 0
    if n >= 32:
        v = [(seed + P1 + P2) & M, (seed + P2) & M, seed, (seed - P1) & M]
        while p + 32 <= n:
            for i in range(4):
                v[i] = xround(v[i], struct.unpack_from("<Q", data, p + 8 * i)[0])
            p += 32
        h = (rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18)) & M
        for i in range(4):
            h = ((h ^ xround(0, v[i])) * P1 + P4) & M
    else:
        h = (seed + P5) & M
    h = (h + n) & M
    while p + 8 <= n:
        h = (rotl(h ^ xround(0, struct.unpack_from("<Q", data, p)[0]), 27) * P1 + P4) & M
        p += 8
    if p + 4 <= n:
        h = (rotl(h ^ ((struct.unpack_from("<I", data, p)[0] * P1) & M), 23) * P2 + P3) & M
        p += 4
    while p < n:
        h = (rotl(h ^ ((data[p] * P5) & M), 11) * P1) & M
        p += 1
    h ^= h >> 33
    h = (h * P2) & M
    h ^= h >> 29
    h = (h * P3) & M
    h ^= h >> 32
    return h




def pattern(n, k):
    return bytes(((i * 131 + k * 17 + (i >> 8)) & 255) for i in range(n))


# the set of format_fixture.c's OFFLOAD_T, in order: name, torch dtype, accel's name, shape
SET = [("embed.weight", torch.float32, "F32", [2, 3]), ("h.0.attn.bias", torch.float16, "F16", [5]),
       ("h.0.mlp.w", torch.bfloat16, "BF16", [2, 2]), ("d", torch.float64, "F64", [3]),
       ("pos_ids", torch.int64, "I64", [1, 4]), ("i32", torch.int32, "I32", [2]), ("i16", torch.int16, "I16", [2]),
       ("i8", torch.int8, "I8", [3]), ("u8", torch.uint8, "U8", [3]), ("mask", torch.bool, "BOOL", [1, 1, 5]),
       ("scale", torch.float32, "F32", []), ("caf\u00e9", torch.float32, "F32", [1])]


def tensor_of(k, dt, shape):
    n = 1
    for s in shape:
        n *= s
    size = torch.empty((), dtype=dt).element_size()
    raw = bytearray(pattern(n * size, k))
    if dt == torch.bool:
        raw = bytearray(b & 1 for b in raw)
    t = torch.frombuffer(raw, dtype=torch.uint8).clone() if raw else torch.empty(0, dtype=torch.uint8)
    return t.view(dt).reshape(shape), bytes(raw)


def tobytes(t):
    t = t.contiguous().reshape(-1)
    return t.view(torch.uint8).numpy().tobytes() if t.dtype != torch.bool else t.to(torch.uint8).numpy().tobytes()


with tempfile.TemporaryDirectory() as tmp:
    # 1. Accelerate writes, accel reads
    a_dir = os.path.join(tmp, "by_accelerate")
    sd = {}
    want = {}
    for k, (name, dt, an, shape) in enumerate(SET):
        t, raw = tensor_of(k, dt, shape)
        sd[name] = t
        want[name] = (an, shape, len(raw), xxh64(raw))
    offload.offload_state_dict(a_dir, sd)
    out = subprocess.run([FIXTURE, "read-offload", a_dir], capture_output=True, text=True)
    if check(out.returncode == 0, "read-offload of Accelerate's folder: %s" % out.stderr):
        got = {}
        for line in out.stdout.splitlines():
            f = line.split()
            if f[0] == "meta":
                continue
            ndim = int(f[2])
            got[bytes.fromhex(f[0]).decode()] = (f[1], [int(x) for x in f[3:3 + ndim]], int(f[3 + ndim]),
                                                 int(f[4 + ndim], 16))
        check(set(got) == set(want), "names %r vs %r" % (sorted(got), sorted(want)))
        for name in want:
            check(got.get(name) == want[name], "%r: accel read %r, Accelerate wrote %r" % (name, got.get(name), want[name]))
    # 2. accel writes, Accelerate reads
    c_dir = os.path.join(tmp, "by_accel")
    out = subprocess.run([FIXTURE, "write-offload", c_dir], capture_output=True, text=True)
    if check(out.returncode == 0, "write-offload: %s" % out.stderr):
        with open(os.path.join(c_dir, "index.json")) as f:
            index = json.load(f)
        check(list(index) == [n for n, _, _, _ in SET], "index order %r" % list(index))
        for k, (name, dt, an, shape) in enumerate(SET):
            if not check(name in index, "%r missing from accel's index.json" % name):
                continue
            w = offload.load_offloaded_weight(os.path.join(c_dir, name + ".dat"), index[name])
            t, raw = tensor_of(k, dt, shape)
            check(w.dtype == dt and list(w.shape) == shape, "%r: Accelerate loaded %s %r, want %s %r" % (
                name, w.dtype, list(w.shape), dt, shape))
            check(tobytes(w) == raw, "%r: bytes differ" % name)
        # the same index written by Accelerate for the same tensors
        r_dir = os.path.join(tmp, "ref_index")
        offload.offload_state_dict(r_dir, {n: tensor_of(k, dt, s)[0] for k, (n, dt, _, s) in enumerate(SET)})
        with open(os.path.join(r_dir, "index.json"), "rb") as f:
            ref_bytes = f.read()
        with open(os.path.join(c_dir, "index.json"), "rb") as f:
            got_bytes = f.read()
        check(got_bytes == ref_bytes, "index.json differs:\n accel      %r\n accelerate %r" % (got_bytes, ref_bytes))
        for k, (name, dt, _, _) in enumerate(SET):
            with open(os.path.join(r_dir, name + ".dat"), "rb") as f1, open(os.path.join(c_dir, name + ".dat"), "rb") as f2:
                check(f1.read() == f2.read(), "%r.dat differs from Accelerate's" % name)

print(f"ckpt-offload-accelerate: {checks - failures} passed, {failures} failed")
sys.exit(1 if failures else 0)
