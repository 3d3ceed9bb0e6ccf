#!/usr/bin/env python3
"""`accel ckpt merge` (Accelerate's merge-weights) on real ZeRO-3 checkpoints of examples/train_digits.c.

usage: ckpt_merge.py TRAIN_DIGITS_EXE ACCEL_EXE
A --zero 3 run at np 2 and np 4 saves a sharded checkpoint at its last step (every rank's fsdp_state_<rank>.bin);
`accel ckpt merge` turns it into model.safetensors (and into shards + index with --max-shard-size). The merged
tensors, read back by a parser written here (struct + json, not accel's) and by the safetensors package
(ACCEL_REFERENCE_PYTHON, when set), must equal bit for bit the run's consolidated export (--dump-weights: FSDP's
FULL_STATE_DICT through accel_zero_fsdp_export) and the unsharded --zero 1 run's weights (replicated weights,
bit-identical to --zero 3: trainer-zero). Bad input is refused with the problem named: a corrupted shard, a missing
shard, a checkpoint that is not ZeRO-3, an output directory that holds a model already.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trainer_driver as td  # noqa: E402  (run, check, weights, the data)

NAMES = ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]  # the trainer's parameter order (its dump's)


def read_st(path):
    """A safetensors file by its spec: u64 header length, JSON header, data section; {name: (dtype, shape, bytes)}."""
    with open(path, "rb") as f:
        b = f.read()
    (hl,) = struct.unpack("<Q", b[:8])
    head = json.loads(b[8:8 + hl])
    data = b[8 + hl:]
    out = {}
    end = 0
    for k, v in head.items():
        if k == "__metadata__":
            continue
        lo, hi = v["data_offsets"]
        out[k] = (v["dtype"], v["shape"], data[lo:hi])
        end = max(end, hi)
    assert end == len(data), "data section has %d bytes, tensors end at %d" % (len(data), end)
    return out, head.get("__metadata__")


def merged_bytes(tensors):
    return b"".join(tensors[n][2] for n in NAMES)


def merge(accel, args):
    return subprocess.run([accel, "ckpt", "merge"] + [str(a) for a in args], capture_output=True, text=True,
                          timeout=60)


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    exe, accel = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    td.ensure_data()
    ref_py = os.environ.get("ACCEL_REFERENCE_PYTHON")
    with tempfile.TemporaryDirectory(prefix="ckpt-merge-") as tmp:
        common = ["--steps", 40, "--batch", 8, "--accum", 2, "--seed", 3]
        for np_ in (2, 4):
            z3w = os.path.join(tmp, "z3_np%d.w" % np_)
            z1w = os.path.join(tmp, "z1_np%d.w" % np_)
            ck = os.path.join(tmp, "ck%d" % np_)
            td.run(exe, np_, common + ["--zero", 3, "--checkpoint-dir", ck, "--checkpoint-every", 40,
                                       "--dump-weights", z3w], timeout=170)
            td.run(exe, np_, common + ["--zero", 1, "--dump-weights", z1w], timeout=170)
            cdir = os.path.join(ck, "checkpoints", "checkpoint_0")
            out = os.path.join(tmp, "merged%d" % np_)
            r = merge(accel, [cdir, out])
            td.check(r.returncode == 0, "np %d: accel ckpt merge succeeded (%s%s)" % (np_, r.stdout.strip(), r.stderr))
            t, meta = read_st(os.path.join(out, "model.safetensors"))
            td.check(sorted(t) == sorted(NAMES) and all(v[0] == "F32" for v in t.values()) and
                     t["fc1.weight"][1] == [64, 64] and t["fc2.weight"][1] == [10, 64] and t["fc2.bias"][1] == [10],
                     "np %d: the model's own names, shapes and F32 (%s)" % (np_, {k: v[1] for k, v in t.items()}))
            td.check(meta == {"format": "pt"}, "np %d: metadata {\"format\": \"pt\"} as save_model writes" % np_)
            td.check(merged_bytes(t) == td.weights(z3w)[1],
                     "np %d: merged == the run's consolidated export (--dump-weights), bit for bit" % np_)
            td.check(merged_bytes(t) == td.weights(z1w)[1],
                     "np %d: merged == the unsharded --zero 1 run's weights, bit for bit" % np_)
            # above a size: shards + index, huggingface_hub's layout
            outs = os.path.join(tmp, "merged%d_sharded" % np_)
            r = merge(accel, [cdir, outs, "--max-shard-size", "10KB"])
            files = sorted(os.listdir(outs)) if os.path.isdir(outs) else []
            td.check(r.returncode == 0 and "model.safetensors.index.json" in files and
                     "model.safetensors" not in files and len(files) >= 3,
                     "np %d: --max-shard-size 10KB writes shards + index (%s)" % (np_, files))
            if r.returncode == 0:
                with open(os.path.join(outs, "model.safetensors.index.json")) as f:
                    idx = json.load(f)
                st = {}
                for name, fn in idx["weight_map"].items():
                    st[name] = read_st(os.path.join(outs, fn))[0][name]
                td.check(sorted(st) == sorted(NAMES) and merged_bytes(st) == merged_bytes(t) and
                         idx["metadata"]["total_size"] == 4810 * 4,
                         "np %d: the shards through the index hold the same tensors, total_size 19240" % np_)
            if ref_py:
                code = ("import sys, numpy as np\nfrom safetensors.numpy import load_file\n"
                        "d = load_file(sys.argv[1])\n"
                        "w = np.concatenate([d[n].reshape(-1) for n in %r])\n"
                        "sys.exit(0 if w.dtype == np.float32 and w.tobytes() == open(sys.argv[2], 'rb').read() "
                        "else 1)\n" % (NAMES,))
                r = subprocess.run([ref_py, "-c", code, os.path.join(out, "model.safetensors"), z3w],
                                   capture_output=True, text=True, timeout=120)
                td.check(r.returncode == 0, "np %d: the safetensors package reads the merged file: equal to the "
                         "export (%s)" % (np_, r.stderr.strip()[-300:]))
            else:
                print("note: ACCEL_REFERENCE_PYTHON not set: the safetensors package's read-back is skipped")
        cdir = os.path.join(tmp, "ck2", "checkpoints", "checkpoint_0")
        # the output directory holds a model already: refused, the model untouched
        out = os.path.join(tmp, "merged2")
        before = open(os.path.join(out, "model.safetensors"), "rb").read()
        r = merge(accel, [cdir, out])
        td.check(r.returncode == 1 and "already holds model.safetensors" in r.stderr and
                 open(os.path.join(out, "model.safetensors"), "rb").read() == before,
                 "an output directory with a model is refused (%s)" % r.stderr.strip())
        # a corrupted shard: one byte of rank 1's values flipped → the checksum names it, nothing written
        bad = os.path.join(tmp, "corrupt")
        shutil.copytree(cdir, bad)
        p = os.path.join(bad, "fsdp_state_1.bin")
        b = bytearray(open(p, "rb").read())
        b[len(b) // 2] ^= 0x40
        open(p, "wb").write(bytes(b))
        out = os.path.join(tmp, "m_corrupt")
        r = merge(accel, [bad, out])
        td.check(r.returncode == 1 and "fsdp_state_1.bin" in r.stderr and "checksum" in r.stderr and
                 not os.path.exists(os.path.join(out, "model.safetensors")),
                 "a corrupted shard is refused, nothing written (%s)" % r.stderr.strip())
        # a missing shard
        bad = os.path.join(tmp, "missing")
        shutil.copytree(cdir, bad)
        os.unlink(os.path.join(bad, "fsdp_state_1.bin"))
        r = merge(accel, [bad, os.path.join(tmp, "m_missing")])
        td.check(r.returncode == 1 and "fsdp_state_1.bin" in r.stderr,
                 "a missing shard is refused, the file named (%s)" % r.stderr.strip())
        # not a ZeRO-3 checkpoint: --zero 0 saves the whole model (model.safetensors), no fsdp_state
        ck0 = os.path.join(tmp, "ck_z0")
        td.run(exe, 2, common + ["--steps", 10, "--checkpoint-dir", ck0, "--checkpoint-every", 10])
        r = merge(accel, [os.path.join(ck0, "checkpoints", "checkpoint_0"), os.path.join(tmp, "m_z0")])
        td.check(r.returncode == 1 and "not a sharded ZeRO-3 checkpoint" in r.stderr,
                 "a checkpoint that is not ZeRO-3 is refused (%s)" % r.stderr.strip())
        # another object's per-rank files under --name: not ZeRO-3 shard states (random_states_<rank>.bin)
        r = merge(accel, [cdir, os.path.join(tmp, "m_name"), "--name", "random_states"])
        td.check(r.returncode == 1 and "not a ZeRO-3 shard state" in r.stderr,
                 "other per-rank files are refused as not ZeRO-3 shard states (%s)" % r.stderr.strip())
        r = merge(accel, [cdir])
        td.check(r.returncode == 2 and "usage" in r.stderr, "a missing OUT is a usage error")
    print("ckpt-merge: %d passed, %d failed" % (td.checks - td.failures, td.failures))
    return 1 if td.failures or not td.checks else 0


if __name__ == "__main__":
    sys.exit(main())
