#!/usr/bin/env python3
"""`accel ckpt plan` and `accel size` against docs/semantics.md (§6 and policy 6), parsed with Python's json.

usage: check_plan.py ACCEL_CLI
The reference plan below is huggingface_hub's split_state_dict_into_shards_factory restated from docs/semantics.md
§6 (no string entries, no tied storage); the size parser is policy 6 restated with Python's Decimal."""
import json
import random
import re
import subprocess
import sys
from decimal import Decimal

CLI = sys.argv[1]
failures = checks = 0


def check(cond, what):
    global failures, checks
    checks += 1
    if not cond:
        failures += 1
        print("FAIL:", what, file=sys.stderr)


def run(*args):
    return subprocess.run([CLI, *args], capture_output=True, text=True)


def hub_plan(items, max_size):
    shards, cur, cur_size = [], {}, 0
    for name, size in items:
        if size > max_size:
            shards.append({name: size})
            continue
        if cur_size + size > max_size:
            shards.append(cur)
            cur, cur_size = {}, 0
        cur[name] = size
        cur_size += size
    if cur:
        shards.append(cur)
    n = len(shards)
    out = []
    for i, s in enumerate(shards):
        fn = "model.safetensors" if n == 1 else "model-%05d-of-%05d.safetensors" % (i + 1, n)
        out.append({"file": fn, "tensors": list(s), "bytes": sum(s.values())})
    index = None
    if n > 1:
        index = {"metadata": {"total_size": sum(sz for _, sz in items)},
                 "weight_map": {nm: sh["file"] for sh in out for nm in sh["tensors"]}}
    return {"shards": out, "is_sharded": n > 1, "index": index}


def plan(max_size, items):
    r = run("ckpt", "plan", "--max-shard-size", max_size, *[f"{n}:{s}" for n, s in items])
    check(r.returncode == 0, f"plan exit {r.returncode}: {r.stderr}")
    return json.loads(r.stdout)


G = 10**9
# docs/semantics.md §6 worked examples
p = plan("10GB", [("a", "6GB"), ("b", "6GB"), ("c", "2GB"), ("d", "6GB"), ("e", "2GB"), ("f", "2GB")])
check([s["tensors"] for s in p["shards"]] == [["a"], ["b", "c"], ["d", "e", "f"]], "doc example [6],[6,2],[6,2,2]: %r" % p)
check([s["bytes"] for s in p["shards"]] == [6 * G, 8 * G, 10 * G], "doc example bytes")
check(p["is_sharded"] is True and p["index"]["metadata"]["total_size"] == 24 * G, "doc example index")
check([s["file"] for s in p["shards"]] == ["model-0000%d-of-00003.safetensors" % i for i in (1, 2, 3)], "file names")
p = plan("10GB", [("a", 2 * G), ("b", 12 * G), ("c", 2 * G)])
check([s["tensors"] for s in p["shards"]] == [["b"], ["a", "c"]], "[2,12,2]@10GB → 00001:[b], 00002:[a,c]: %r" % p)
check(p["index"]["weight_map"] == {"a": "model-00002-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
                                   "c": "model-00002-of-00002.safetensors"}, "weight_map")
p = plan("10GB", [("only", 5)])
check(p == {"shards": [{"file": "model.safetensors", "tensors": ["only"], "bytes": 5}], "is_sharded": False, "index": None},
      "single shard: %r" % p)
p = plan("1KB", [])
check(p == {"shards": [], "is_sharded": False, "index": None}, "empty state dict: %r" % p)
p = plan("10", [("big", 20), ("small", 5)])
check([s["tensors"] for s in p["shards"]] == [["big"], ["small"]], "oversize first: no empty shard (policy 7)")
p = plan("0", [("z", 0), ("a", 1)])
check([s["tensors"] for s in p["shards"]] == [["a"], ["z"]], "max 0: %r" % p)
p = plan("100", [("na:me\u00e9\"x", 60), ("b", 60)])
check(p["shards"][0]["tensors"] == ["na:me\u00e9\"x"], "names with ':' and escapes: %r" % p)

# random cases against the restated algorithm
rng = random.Random(6)
for case in range(80):
    n = rng.randint(1, 12)
    max_size = rng.randint(0, 100)
    items = [(f"t{i}_{rng.randint(0, 9)}", rng.choice([0, rng.randint(1, 60), rng.randint(1, 150)])) for i in range(n)]
    names = set()
    items = [(nm, sz) for nm, sz in items if not (nm in names or names.add(nm))]
    got = plan(str(max_size), items)
    check(got == hub_plan(items, max_size), f"random case {case}: {items} @ {max_size}: {got}")

# errors: invalid size string → exit 2 with the message
r = run("ckpt", "plan", "--max-shard-size", "5B", "a:1")
check(r.returncode == 2 and "invalid size" in r.stderr and "5B" in r.stderr, "invalid --max-shard-size: " + r.stderr)
r = run("ckpt", "plan", "--max-shard-size", "1GB", "a:-1")
check(r.returncode == 2 and "invalid size" in r.stderr, "invalid tensor size")
r = run("ckpt", "plan", "a:1")
check(r.returncode == 2, "missing --max-shard-size")
r = run("ckpt", "plan", "--max-shard-size", "1GB", "a:1", "a:2")
check(r.returncode == 2 and "duplicate" in r.stderr, "duplicate name")
r = run("ckpt", "plan", "--max-shard-size", "1GB", "noseparator")
check(r.returncode == 2, "name without bytes")


# accel size: policy 6, restated with Decimal
def policy6(s):
    s = s.strip()
    if re.fullmatch(r"\d+", s, flags=re.ASCII):
        return int(s)
    m = re.fullmatch(r"(\d+(?:\.\d*)?|\.\d+) *([kKmMgGtT])([iI]?)[bB]", s, flags=re.ASCII)
    if not m:
        return None
    exp = "kmgt".index(m.group(2).lower()) + 1
    unit = 1024**exp if m.group(3) else 1000**exp
    return int(Decimal(m.group(1)) * unit)  # int() truncates toward zero


cases = ["10GB", "10 GB", "5MiB", "1GiB", "1gib", "7kb", "7kB", "3.999999KB", "1.5GB", " 42 ", "0", ".5TB", "5.KiB",
         "0.1KiB", "1.9999999999999999999KiB", "2TiB", "18446744073709551615", "123456789012KB",
         "5B", "GB", "-5MB", "", "1e3MB", "1.5", "inf", "nanGB", "0x10", "+1KB", "1KBB", "1 K B", "1_000",
         "\u0661KB", "18446744073709551616", "99999999999TB"]
for s in cases:
    want = policy6(s)
    if want is not None and want >= 2**64:
        want = None
    r = run("size", s)
    if want is None:
        check(r.returncode == 2 and "size" in r.stderr and r.stdout == "", f"size {s!r} must be refused: {r.returncode} {r.stdout!r}")
    else:
        check(r.returncode == 0 and r.stdout == f"{want}\n", f"size {s!r}: {r.stdout!r} != {want}")
r = run("size")
check(r.returncode == 2, "size without argument")

print(f"ckpt-plan: {checks - failures} passed, {failures} failed")
sys.exit(1 if failures else 0)
