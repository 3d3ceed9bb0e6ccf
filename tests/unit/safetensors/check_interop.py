#!/usr/bin/env python3
"""Interop of accel_safetensors.h and accel_ckpt.h with an independent reader/writer (json + struct only; no torch, no safetensors package).

usage: check_interop.py CKPT_FIXTURE ACCEL_CLI

1. format_fixture writes safetensors files, a sharded model and a save_state checkpoint; this script reads them by the
   format rules (REFERENCE.md): header length, padding, offsets tiling the data, dtype sizes, the reference writer's
   order, the bytes; the index file against json.dumps(indent=2, sort_keys=True); the checkpoint marker against an
   independent XXH64.
2. This script writes files by the reference layout (its own writer) and format_fixture / `accel ckpt ls` read them.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

FIXTURE, CLI = sys.argv[1], sys.argv[2]
DTYPE_SIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "I64": 8, "I32": 4, "I16": 2,
              "I8": 1, "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1}
# the reference's Dtype enum (safetensors/src/tensor.rs), ascending; its writer sorts by it descending, then by name
ENUM_RANK = {d: i for i, d in enumerate(["BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "F16", "BF16", "I32",
                                         "U32", "F32", "F64", "I64", "U64"])}
ORDER = ["F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2", "I64", "I32", "I16", "I8", "U64", "U32", "U16", "U8",
         "BOOL"]  # accel_dtype enum order 1..15
failures = 0
checks = 0


def check(cond, what):
    global failures, checks
    checks += 1
    if not cond:
        failures += 1
        print("FAIL:", what, file=sys.stderr)


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


check(xxh64(b"") == 0xEF46DB3751D8E999 and xxh64(b"abc") == 0x44BC2CF5AD770999, "python xxh64 test vectors")


def pattern(n, k):
    return bytes(((i * 131 + k * 17 + (i >> 8)) & 255) for i in range(n))


def read_safetensors(path):
    """A strict reader following REFERENCE.md, in the reference reader's order of checks."""
    raw = open(path, "rb").read()
    assert len(raw) >= 8
    (n,) = struct.unpack_from("<Q", raw, 0)
    assert n <= 100_000_000 and 8 + n <= len(raw)
    text = raw[8:8 + n].decode("utf-8")

    def no_dups(pairs):
        keys = [k for k, _ in pairs]
        assert len(keys) == len(set(keys)), "duplicate keys"
        return dict(pairs)

    header = json.loads(text, object_pairs_hook=no_dups)
    meta = header.pop("__metadata__", None)
    entries = sorted(header.items(), key=lambda kv: tuple(kv[1]["data_offsets"]))
    cur = 0
    for name, info in entries:
        b, e = info["data_offsets"]
        assert b == cur and e >= b, f"offsets of {name!r}"
        numel = 1
        for s in info["shape"]:
            numel *= s
        assert e - b == numel * DTYPE_SIZE[info["dtype"]], f"size of {name!r}"
        cur = e
    assert 8 + n + cur == len(raw), "data section length"
    data = raw[8 + n:]
    return n, text, meta, header, {k: data[v["data_offsets"][0]:v["data_offsets"][1]] for k, v in header.items()}


with tempfile.TemporaryDirectory() as tmp:
    out = subprocess.run([FIXTURE, "write", tmp], capture_output=True, text=True)
    check(out.returncode == 0, "fixture write: " + out.stderr)

    # ---------------------------------------------------------------- all.safetensors
    n, text, meta, header, data = read_safetensors(os.path.join(tmp, "all.safetensors"))
    check(n % 8 == 0, "header length is a multiple of 8")
    check(text.rstrip(" ") == text.rstrip(" ").rstrip() and len(text) - len(text.rstrip(" ")) < 8, "padded with < 8 spaces")
    check(text.startswith("{"), "header starts with {")
    check(meta == {"format": "pt", "note": "caf\u00e9 \"q\" \\ \n \U0001F600"}, "metadata round trip: %r" % (meta,))
    expect = {}
    k = 0
    for d in ORDER:
        expect["t_" + d] = (d, [2, 3 + ORDER.index(d) + 1], pattern(DTYPE_SIZE[d] * 2 * (3 + ORDER.index(d) + 1), k))
        k += 1
    expect["scalar"] = ("F32", [], pattern(4, k)); k += 1
    expect["empty"] = ("BF16", [0, 5], b""); k += 1
    expect["\u03b1\u03b2/\"x\"\\y\t\x01\U0001F600"] = ("U8", [3], pattern(3, k)); k += 1
    check(set(header) == set(expect), "tensor names: %r" % sorted(header))
    for name, (dt, shape, payload) in expect.items():
        if name not in header:
            continue
        check(header[name]["dtype"] == dt and header[name]["shape"] == shape, f"dtype/shape of {name!r}")
        check(data[name] == payload, f"bytes of {name!r}")
    # the reference writer's order: its Dtype enum order (REFERENCE.md), descending, then name (byte order)
    by_offset = [k for k, _ in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0])]
    want_order = sorted(header, key=lambda k: (-ENUM_RANK[header[k]["dtype"]], k.encode("utf-8")))
    # entries with equal offsets (empty tensors) may appear in any order among themselves
    check([k for k in by_offset if data[k]] == [k for k in want_order if data[k]], "reference writer order")
    for name in header:
        check((8 + n + header[name]["data_offsets"][0]) % DTYPE_SIZE[header[name]["dtype"]] == 0, f"alignment of {name!r}")

    # ---------------------------------------------------------------- sharded model
    mdir = os.path.join(tmp, "model")
    idx_text = open(os.path.join(mdir, "model.safetensors.index.json"), encoding="utf-8").read()
    idx = json.loads(idx_text)
    check(idx_text == json.dumps(idx, indent=2, sort_keys=True) + "\n", "index is json.dumps(indent=2, sort_keys=True)")
    check(idx["metadata"]["total_size"] == sum(len(v[2]) for v in expect.values()), "total_size")
    check(set(idx["weight_map"]) == set(expect), "weight_map names")
    # the plan, recomputed here from docs/semantics.md §6 (hub algorithm) in state-dict order
    shards, cur, cur_size = [], [], 0
    for name in expect:  # fixture order
        size = len(expect[name][2])
        if size > 150:
            shards.append([name])
            continue
        if cur and cur_size + size > 150:
            shards.append(cur)
            cur, cur_size = [], 0
        cur.append(name)
        cur_size += size
    if cur:
        shards.append(cur)
    files = sorted(f for f in os.listdir(mdir) if f.endswith(".safetensors"))
    check(files == ["model-%05d-of-%05d.safetensors" % (i + 1, len(shards)) for i in range(len(shards))], "shard files %r" % files)
    for i, names in enumerate(shards):
        fn = "model-%05d-of-%05d.safetensors" % (i + 1, len(shards))
        for nm in names:
            check(idx["weight_map"].get(nm) == fn, f"weight_map[{nm!r}]")
        _, _, smeta, sheader, sdata = read_safetensors(os.path.join(mdir, fn))
        check(smeta == {"format": "pt"}, "shard metadata")
        check(sorted(sheader) == sorted(names), f"tensors of {fn}")
        for nm in names:
            check(sdata.get(nm) == expect[nm][2], f"bytes of {nm!r} in {fn}")

    # ---------------------------------------------------------------- save_state checkpoint
    sdir = os.path.join(tmp, "state")
    marker = json.load(open(os.path.join(sdir, "checkpoint_complete.json")))
    check(marker["format"] == "accel-checkpoint" and marker["version"] == 1, "marker format")
    listed = set(marker["files"])
    present = set(os.listdir(sdir)) - {"checkpoint_complete.json"}
    check(listed == present, "marker lists every file: %r vs %r" % (sorted(listed), sorted(present)))
    check({"model.safetensors", "optimizer.safetensors", "random_states_0.bin", "accelerator_state.json"} <= present, "layout")
    for fn, info in marker["files"].items():
        blob = open(os.path.join(sdir, fn), "rb").read()
        check(len(blob) == info["bytes"], f"size of {fn}")
        check("%016x" % xxh64(blob) == info["xxh64"], f"xxh64 of {fn}")
    # accel.h's training state (ACCEL_STATE_BYTES = 80, little-endian), read by its documented layout
    rs = open(os.path.join(sdir, "random_states_0.bin"), "rb").read()
    check(len(rs) == 80, "random_states_0.bin is 80 bytes (%d)" % len(rs))
    if len(rs) == 80:
        (magic, version, nproc, rank, step, sync, skipped, accum, opt_steps, sched_steps, adj_steps, seed, offset,
         reserved) = struct.unpack("<4sIiiiiiiqqqQQ8s", rs)
        check((magic, version, nproc, rank) == (b"ACST", 1, 1, 0), "random_states_0.bin header %r" % rs[:16])
        check((step, sync, skipped, accum, opt_steps, sched_steps, adj_steps) == (0, 1, 0, 1, 0, 0, 0),
              "random_states_0.bin counters of a fresh Accelerator")
        check(seed == 0xFFFFFFFFFFFFFFF0 and offset == 12345 and reserved == bytes(8), "random_states_0.bin RNG")
    raw = open(os.path.join(sdir, "accelerator_state.json"), "rb").read()
    st = json.loads(raw)
    check(st == {"format": "accel", "iteration": 0, "num_processes": 1, "version": 1}, "accelerator_state.json %r" % st)
    check(raw.decode() == json.dumps(st, sort_keys=True) + "\n", "accelerator_state.json as json.dumps(sort_keys=True)")
    _, _, _, mh, md = read_safetensors(os.path.join(sdir, "model.safetensors"))
    check(sorted(mh) == sorted(["t_F64", "t_F32", "t_F16", "t_BF16", "t_F8_E4M3"]), "model tensors")
    check(all(md[k] == expect[k][2] for k in mh), "model bytes")
    ok = subprocess.run([CLI, "ckpt", "verify", sdir], capture_output=True, text=True)
    check(ok.returncode == 0, "accel ckpt verify: " + ok.stderr)
    # corrupt one byte: verify must fail
    p = os.path.join(sdir, "optimizer.safetensors")
    blob = bytearray(open(p, "rb").read())
    blob[-1] ^= 1
    open(p, "wb").write(bytes(blob))
    bad = subprocess.run([CLI, "ckpt", "verify", sdir], capture_output=True, text=True)
    check(bad.returncode == 1 and "checksum of optimizer.safetensors" in bad.stderr, "verify detects corruption: " + bad.stderr)

    # ---------------------------------------------------------------- files written by this script, read by accel
    def write_reference(path, tensors, metadata=None, pad=True, ensure_ascii=False):
        # the reference writer: sort by its Dtype enum descending then name; pad the header with spaces
        items = sorted(tensors.items(), key=lambda kv: (-ENUM_RANK[kv[1][0]], kv[0].encode("utf-8")))
        hdr, off, blobs = {}, 0, []
        if metadata is not None:
            hdr["__metadata__"] = metadata
        for name, (dt, shape, payload) in items:
            hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(payload)]}
            off += len(payload)
            blobs.append(payload)
        text = json.dumps(hdr, separators=(",", ":"), ensure_ascii=ensure_ascii).encode("utf-8")
        if pad:
            text += b" " * ((8 - len(text) % 8) % 8)
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))

    ref = {
        "w": ("F32", [2, 2], struct.pack("<4f", 1.0, -2.5, 3.25, 0.0)),
        "b": ("F64", [], struct.pack("<d", 6.5)),
        "\u00fcber/\"quoted\"": ("I16", [3], struct.pack("<3h", -1, 2, -3)),
        "mask": ("BOOL", [4], bytes([1, 0, 1, 1])),
        "none": ("F16", [0], b""),
        "\U0001F680": ("BF16", [1, 1, 2], b"\x80\x3f\x00\x40"),
    }
    for variant, kw in (("padded", {}), ("unpadded", {"pad": False}), ("ascii", {"ensure_ascii": True})):
        path = os.path.join(tmp, f"ref_{variant}.safetensors")
        write_reference(path, ref, metadata={"format": "pt", "k\u00e9y": "v\u00e0l"}, **kw)
        out = subprocess.run([FIXTURE, "read", path], capture_output=True, text=True)
        check(out.returncode == 0, f"accel reads {variant}: " + out.stderr)
        got, gmeta = {}, {}
        for line in out.stdout.splitlines():
            parts = line.split()
            if parts[0] == "meta":
                gmeta[bytes.fromhex(parts[1]).decode()] = bytes.fromhex(parts[2]).decode()
                continue
            name = bytes.fromhex(parts[0]).decode("utf-8")
            ndim = int(parts[2])
            got[name] = (parts[1], [int(x) for x in parts[3:3 + ndim]], int(parts[3 + ndim]), int(parts[4 + ndim], 16))
        check(set(got) == set(ref), f"{variant}: names {sorted(got)}")
        for name, (dt, shape, payload) in ref.items():
            check(got.get(name) == (dt, shape, len(payload), xxh64(payload)), f"{variant}: {name!r} {got.get(name)}")
        check(gmeta == {"format": "pt", "k\u00e9y": "v\u00e0l"}, f"{variant}: metadata {gmeta}")
    ls = subprocess.run([CLI, "ckpt", "ls", os.path.join(tmp, "ref_padded.safetensors")], capture_output=True, text=True)
    check(ls.returncode == 0 and "6 tensors" in ls.stdout and "I16" in ls.stdout and "[2, 2]" in ls.stdout
          and "metadata format = pt" in ls.stdout, "accel ckpt ls: " + ls.stdout + ls.stderr)
    ls = subprocess.run([CLI, "ckpt", "ls", mdir], capture_output=True, text=True)
    check(ls.returncode == 0 and "sharded model" in ls.stdout, "accel ckpt ls DIR")
    # a file this script corrupts (overlapping offsets) is refused by the CLI with the specific reason
    path = os.path.join(tmp, "overlap.safetensors")
    hdr = json.dumps({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
                      "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]}}).encode()
    open(path, "wb").write(struct.pack("<Q", len(hdr)) + hdr + b"\0" * 6)
    ls = subprocess.run([CLI, "ckpt", "ls", path], capture_output=True, text=True)
    check(ls.returncode == 1 and "overlap" in ls.stderr, "ls refuses overlap: " + ls.stderr)

print(f"ckpt-interop: {checks - failures} passed, {failures} failed")
sys.exit(1 if failures else 0)
