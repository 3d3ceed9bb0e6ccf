#!/usr/bin/env python3
"""`accel estimate` (Accelerate's estimate-memory) on known models, against sizes computed here.

usage: check_estimate.py ACCEL_EXE
- GPT-2 124M from its config.json: 124,439,808 parameters (the published count), 13 units (12 blocks + the root:
  wte, wpe, ln_f); every row of the JSON output equals the per-rank bytes computed here from GPT-2's layout
  (written out below from the architecture, not from accel) and accel_zero.h's documented slot sizing: a unit of E
  elements over a shard group of Ps ranks keeps S = ceil(E / Ps) elements of F32 master and gradient (+ the
  param_dtype copy), gathers Ps * S of param_dtype (under FULL_SHARD the root's — unit 0, kept — and the two
  largest other units' live: FSDP's root kept, two units rotate; every unit under SHARD_GRAD_OP, none on one
  process), reduces through Ps * S (+ S) of reduce_dtype (two largest, every unit under
  --accumulation); ZeRO-1: the optimizer over ceil(N / P). (test_zero3_mpi checks that sizing against the
  allocator hooks of real runs.) The printed table has its rows and header.
- the same through a safetensors file written here (block names h.<i>., any dtype: the master is F32), a sharded
  index folder, and accel's model JSON; and refusals: a missing file, a config.json that is not GPT-2's, a
  --replicate that does not divide --np.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

failures = 0
checks = 0


def check(ok, what):
    global failures, checks
    checks += 1
    print(("ok: " if ok else "FAIL: ") + what, flush=True)
    if not ok:
        failures += 1


def gpt2_units(V=50257, T=1024, C=768, L=12):
    root = [V * C, T * C, C, C]  # wte, wpe, ln_f.weight, ln_f.bias
    block = [C, C, C * 3 * C, 3 * C, C * C, C, C, C, C * 4 * C, 4 * C, 4 * C * C, C]
    return [sum(root)] + [sum(block)] * L


def expected(units, P, pes, res, states, no_sync, strategy, offload=False):
    ps = 1 if strategy == "NO_SHARD" else P
    S = [(e + ps - 1) // ps for e in units]
    shards = sum(S) * (8 + (0 if pes == 4 else pes))
    opt = sum(S) * states * 4
    gb = [(s * ps * pes if (ps > 1 or offload) else 0) for s in S]
    rb = [s * ps * res + (s * res if ps > 1 else 0) for s in S]
    top2 = lambda xs: sum(sorted(xs)[-2:])
    gather = sum(gb) if strategy == "SHARD_GRAD_OP" else gb[0] + top2(gb[1:])  # units[0]: the root
    grad = sum(rb) if no_sync else top2(rb)
    staging = max(S) * res if offload else 0
    total = shards + opt + gather + grad + staging
    return {"weights_and_grads": shards, "optimizer": opt, "buffers": gather + grad + staging, "total": total,
            "pinned_host": shards + opt + staging if offload else 0}


def st_file(path, tensors):
    """A safetensors file by the spec (F16 here: the estimate counts elements; the master is F32)."""
    head, off, data = {}, 0, b""
    for name, shape in tensors:
        n = 1
        for d in shape:
            n *= d
        head[name] = {"dtype": "F16", "shape": shape, "data_offsets": [off, off + 2 * n]}
        off += 2 * n
        data += b"\0" * (2 * n)
    h = json.dumps(head).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def est(accel, args):
    return subprocess.run([accel, "estimate"] + [str(a) for a in args], capture_output=True, text=True, timeout=60)


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    accel = sys.argv[1]
    with tempfile.TemporaryDirectory(prefix="estimate-") as tmp:
        cfg = os.path.join(tmp, "gpt2")
        os.mkdir(cfg)
        with open(os.path.join(cfg, "config.json"), "w") as f:
            json.dump({"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "vocab_size": 50257,
                       "n_positions": 1024}, f)
        units = gpt2_units()
        for P, pdt, pes, rdt, res, acc in ((4, "bfloat16", 2, "float32", 4, False), (2, "float32", 4, "bfloat16", 2,
                                                                                     True)):
            args = [os.path.join(cfg, "config.json"), "--np", P, "--dtype", pdt, "--reduce-dtype", rdt, "--json"]
            r = est(accel, args + (["--accumulation"] if acc else []))
            check(r.returncode == 0, "estimate GPT-2 config.json, np %d, %s (%s)" % (P, pdt, r.stderr.strip()))
            if r.returncode:
                continue
            j = json.loads(r.stdout)
            check(j["parameters"] == 124439808 and j["units"] == 13 and j["blocks"] == 12,
                  "GPT-2 124M: 124,439,808 parameters, 12 blocks + root (%s, %s)" % (j["parameters"], j["units"]))
            rows = {x["strategy"]: x for x in j["rows"]}
            want = {"DDP (NO_SHARD)": expected(units, P, pes, res, 2, acc, "NO_SHARD"),
                    "ZeRO-2 (SHARD_GRAD_OP)": expected(units, P, pes, res, 2, acc, "SHARD_GRAD_OP"),
                    "ZeRO-3 (FULL_SHARD)": expected(units, P, pes, res, 2, acc, "FULL_SHARD"),
                    "ZeRO-3 + CPU offload": expected(units, P, pes, res, 2, acc, "FULL_SHARD", offload=True)}
            z1 = dict(want["DDP (NO_SHARD)"])
            z1["optimizer"] = (sum(units) + P - 1) // P * 2 * 4
            z1["total"] = z1["weights_and_grads"] + z1["optimizer"] + z1["buffers"]
            want["ZeRO-1"] = z1
            for name, w in want.items():
                got = {k: rows.get(name, {}).get(k) for k in w}
                check(got == w, "np %d %s%s: %s" % (P, name, " accumulation" if acc else "",
                                                     "as computed" if got == w else "%s != %s" % (got, w)))
        # the table, with hybrid rows and activations
        r = est(accel, [cfg, "--np", 4, "--replicate", 2, "--dtype", "bf16", "--activations", "1GiB"])
        lines = r.stdout.splitlines()
        check(r.returncode == 0 and lines[0].startswith("GPT-2 config (vocab 50257") and
              "124439808 parameters in 13 units" in lines[0] and "shard over 2, replicate over 2" in r.stdout and
              any(l.startswith("ZeRO-3 (FULL_SHARD)") for l in lines) and
              any(l.startswith("HYBRID_SHARD ") for l in lines) and "1.00 GiB" in r.stdout,
              "the printed table:\n" + r.stdout)
        r2 = est(accel, [cfg, "--np", 4, "--replicate", 2, "--json"])
        j = json.loads(r2.stdout)
        rows = {x["strategy"]: x for x in j["rows"]}
        check(rows["HYBRID_SHARD"]["total"] == expected(units, 2, 4, 4, 2, False, "FULL_SHARD")["total"],
              "HYBRID_SHARD over 4 = 2 x 2 holds what FULL_SHARD over 2 holds")
        # a safetensors file, an index folder, accel's model JSON: the same model, the same figures
        tensors = [("emb.weight", [100, 16])] + [("h.%d.%s" % (i, n), s) for i in range(3)
                                                 for n, s in (("w", [16, 16]), ("b", [16]))] + [("norm.w", [16])]
        st = os.path.join(tmp, "m.safetensors")
        st_file(st, tensors)
        idx = os.path.join(tmp, "idx")
        os.mkdir(idx)
        st_file(os.path.join(idx, "model-00001-of-00002.safetensors"), tensors[:4])
        st_file(os.path.join(idx, "model-00002-of-00002.safetensors"), tensors[4:])
        with open(os.path.join(idx, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": 0}, "weight_map": {}}, f)
        mj = os.path.join(tmp, "model.json")
        mods = [["", "M", ["emb", "h", "norm"], [], []], ["emb", "Embedding", [], ["weight"], []],
                ["h", "ModuleList", ["0", "1", "2"], [], []]]
        mods += [["h.%d" % i, "Block", [], ["w", "b"], []] for i in range(3)]
        mods += [["norm", "Norm", [], ["w"], []]]
        with open(mj, "w") as f:
            json.dump({"modules": mods, "tensors": [[n, s, "torch.float16"] for n, s in tensors]}, f)
        small = [100 * 16 + 16] + [16 * 16 + 16] * 3
        for src in (st, idx, os.path.join(idx, "model.safetensors.index.json"), mj):
            r = est(accel, [src, "--np", 3, "--json"])
            ok = r.returncode == 0
            if ok:
                j = json.loads(r.stdout)
                rows = {x["strategy"]: x for x in j["rows"]}
                ok = (j["parameters"] == sum(small) and j["units"] == 4 and j["blocks"] == 3 and
                      rows["ZeRO-3 (FULL_SHARD)"]["total"] == expected(small, 3, 4, 4, 2, False, "FULL_SHARD")["total"])
            check(ok, "%s: 3 blocks + root, FULL_SHARD as computed (%s)" % (os.path.basename(src), r.stderr.strip()))
        # refusals
        r = est(accel, [os.path.join(tmp, "nothing.safetensors")])
        check(r.returncode == 1 and "nothing.safetensors" in r.stderr, "a missing file is refused")
        bad = os.path.join(tmp, "llama")
        os.mkdir(bad)
        with open(os.path.join(bad, "config.json"), "w") as f:
            json.dump({"model_type": "llama"}, f)
        r = est(accel, [bad])
        check(r.returncode == 1 and "model_type is not \"gpt2\"" in r.stderr, "a config.json that is not GPT-2's")
        r = est(accel, [cfg, "--np", 4, "--replicate", 3])
        check(r.returncode == 2 and "usage" in r.stderr, "--replicate 3 does not divide --np 4: usage error")
    print("estimate: %d passed, %d failed" % (checks - failures, failures))
    return 1 if failures or not checks else 0


if __name__ == "__main__":
    sys.exit(main())
