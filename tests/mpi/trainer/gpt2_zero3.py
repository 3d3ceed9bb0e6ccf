#!/usr/bin/env python3
"""examples/gpt2/gpt2_cpu.c --zero 3 (ZeRO-3 / FSDP FULL_SHARD, units = embeddings + final norm and each block).

usage: gpt2_zero3.py GPT2_CPU_EXE ACCEL_EXE
- np 2 and np 4, accumulation 2, clipping on: --zero 3 equals --zero 0 (DDP's reducer + AdamW over the whole
  weights) bit for bit — the loss file and the exported model.safetensors bytes. The gathers are F32 and accel's
  reduce-scatter sums each block in the all-reduce's rank order, AdamW is element-wise, and the sharded gradient
  norm came out equal here (were it to differ in its last bit with clipping active, the weights would differ at
  rounding level: then this check would say so).
- --zero 3 --offload (the shards and AdamW's state in pinned host memory, AdamW stepping on the host: FSDP's
  cpu_offload + DeepSpeed's offload_optimizer) equals --zero 0 the same way at np 2 and 4: the host step is the
  same element-wise AdamW as the non-offloaded one. --offload without --zero 3 is refused.
- the initial weights: --zero 3 draws GPT-2's initialization straight into each rank's shard pieces (no whole
  model on any rank); at np 3 (a block's slot is odd, so pieces start inside a pair of Box-Muller normals) with
  --steps 0 its export equals --zero 0's byte for byte; --zero 3 --init of that file exports it unchanged.
- checkpoints are sharded (fsdp_state_<rank>.bin, no model.safetensors); a run killed after step 6 and resumed from
  its step-4 checkpoint ends bit-identical to the straight run.
- `accel ckpt merge` of the last checkpoint gives the model's own tensors (wte, h.<l>.qkvw, ...), equal bit for bit
  to the export's (Hugging Face names and layout: Conv1D weights transposed, wte's padded rows dropped).
- --zero 3 with --dump-grads is refused with the reason.
- prefetch (FSDP's rule: the root kept, two blocks rotate): at np 2 and 4 with 4 blocks, the trainer's zero3 line
  (counted by gpt2.h from accel_zero's events) says every block's gather after the first micro-batch (the pass that
  records the order) was a prefetch started while the unit before it computed (between its wait and its release),
  at most 3 gather buffers were live (the root held through the pass + two blocks), and the gather buffers' peak
  per rank is exactly the root's + two blocks' F32 buffers, computed here from GPT-2's layout (and equal to
  accel_zero_fsdp_estimate's figure, which the line prints beside it).
"""
import re
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_driver as gd  # noqa: E402  (run, check, read_safetensors, MODEL)

C, V = 32, 64
HF = {"ln1w": "ln_1.weight", "ln1b": "ln_1.bias", "qkvw": "attn.c_attn.weight", "qkvb": "attn.c_attn.bias",
      "attprojw": "attn.c_proj.weight", "attprojb": "attn.c_proj.bias", "ln2w": "ln_2.weight", "ln2b": "ln_2.bias",
      "fcw": "mlp.c_fc.weight", "fcb": "mlp.c_fc.bias", "fcprojw": "mlp.c_proj.weight", "fcprojb": "mlp.c_proj.bias"}
ROWS = {"qkvw": 3 * C, "attprojw": C, "fcw": 4 * C, "fcprojw": C}  # ours [out, in]; HF's Conv1D [in, out]


def as_hf(name, vals):
    """One merged tensor (llm.c layout) → (HF name, values in HF's layout)."""
    top = {"wte": "wte.weight", "wpe": "wpe.weight", "lnfw": "ln_f.weight", "lnfb": "ln_f.bias"}
    if name in top:
        return top[name], vals[:V * C] if name == "wte" else vals
    _, layer, t = name.split(".")
    hf = "h.%s.%s" % (layer, HF[t])
    if t in ROWS:
        rows = ROWS[t]
        cols = len(vals) // rows
        vals = tuple(vals[r * cols + c] for c in range(cols) for r in range(rows))
    return hf, vals


def gather_bytes(P, L, C=32, V=64, T=16):
    """F32 gather buffers of the root (wte padded to 128 rows, wpe, ln_f) and of a block, over P ranks."""
    vp = (V + 127) // 128 * 128
    root, block = vp * C + T * C + 2 * C, 12 * C * C + 13 * C
    return [P * ((e + P - 1) // P) * 4 for e in (root, block)]


def prefetch(exe, shard):
    L, steps, accum = 4, 3, 2
    for np_ in (2, 4):
        r = gd.run(exe, np_, ["--layers", L, "--data", shard, "--steps", steps, "--accum", accum, "--batch", 2,
                              "--zero", 3])
        m = re.search(r"zero3: (\d+) block gathers, (\d+) prefetched while the unit before computed; gather buffers "
                      r"per rank: at most (\d+) live, peak (\d+) bytes \(estimate (\d+)", r.stdout)
        gd.check(m is not None, "np %d: the zero3 line is printed" % np_)
        if not m:
            continue
        gathers, ahead, live, peak, est = (int(x) for x in m.groups())
        micro = steps * accum
        gd.check(gathers == 2 * L * micro and ahead == gathers - 2 * L,
                 "np %d: %d of %d block gathers prefetched while the unit before computed (all but the first "
                 "micro-batch's %d)" % (np_, ahead, gathers, 2 * L))
        root, block = gather_bytes(np_, L)
        gd.check(live == 3 and peak == root + 2 * block and est == peak,
                 "np %d: at most %d gather buffers live (the root + two blocks), peak %d bytes per rank == %d + 2 x %d "
                 "(estimate %d)" % (np_, live, peak, root, block, est))


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    exe, accel = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    with tempfile.TemporaryDirectory(prefix="gpt2-zero3-") as tmp:
        shard = os.path.join(tmp, "tiny.bin")
        subprocess.run([exe, "--gen-shard", shard, "20000", "64"], check=True, capture_output=True)
        prefetch(exe, shard)
        common = ["--data", shard, "--steps", 12, "--lr", 2e-3, "--warmup", 2, "--weight-decay", 0.1, "--seed", 7,
                  "--accum", 2, "--clip", 1.0]
        for np_, b in ((2, 4), (4, 2)):
            out = {}
            for z, extra in ((0, []), (3, []), ("3o", ["--offload"])):
                lf, ex = os.path.join(tmp, "z%s_np%d.loss" % (z, np_)), os.path.join(tmp, "z%s_np%d" % (z, np_))
                r = gd.run(exe, np_, common + ["--batch", b, "--zero", str(z)[0], "--loss-file", lf, "--export", ex]
                           + extra)
                if z != 0:
                    gd.check("ZeRO-3 (FULL_SHARD" in r.stdout, "np %d: the banner names ZeRO-3" % np_)
                    gd.check(("offload: AdamW on the host" in r.stdout) == (z == "3o"),
                             "np %d: the banner says offload exactly when --offload is given" % np_)
                out[z] = (open(lf).read(), gd.read_safetensors(os.path.join(ex, "model.safetensors"))[1])
            for z, what in ((3, "--zero 3"), ("3o", "--zero 3 --offload")):
                gd.check(out[z][0] == out[0][0] and len(out[0][0].splitlines()) == 12,
                         "np %d: %s loss file == --zero 0's (12 steps, accumulation 2, clipping)" % (np_, what))
                gd.check(out[z][1] == out[0][1], "np %d: %s exported weights == --zero 0's, bit for bit" % (np_, what))
        init = {}
        for z in (0, 3):
            ex = os.path.join(tmp, "init_z%d" % z)
            gd.run(exe, 3, common[:2] + ["--steps", 0, "--seed", 7, "--batch", 2, "--zero", z, "--export", ex])
            init[z] = open(os.path.join(ex, "model.safetensors"), "rb").read()
        gd.check(init[3] == init[0], "np 3, --steps 0: --zero 3's initial weights (drawn per shard piece) == --zero 0's")
        ex = os.path.join(tmp, "init_back")
        gd.run(exe, 2, common[:2] + ["--steps", 0, "--seed", 8, "--batch", 2, "--zero", 3, "--init",
                                      os.path.join(tmp, "init_z0"), "--export", ex])
        gd.check(open(os.path.join(ex, "model.safetensors"), "rb").read() == init[0],
                 "np 2, --zero 3 --init (another --seed): the file's weights go into the shards and export unchanged")
        # sharded checkpoints, kill + resume
        z3 = common + ["--batch", 4, "--zero", 3]
        straight = os.path.join(tmp, "z3_straight")
        gd.run(exe, 2, z3 + ["--export", straight])
        ck = os.path.join(tmp, "ck")
        r = gd.run(exe, 2, z3 + ["--checkpoint-dir", ck, "--checkpoint-every", 4, "--kill-at", 6], expect_ok=False)
        gd.check(r.returncode != 0, "--zero 3 --kill-at 6 ended the run")
        c0 = os.path.join(ck, "checkpoints", "checkpoint_0")
        names = sorted(os.listdir(c0)) if os.path.isdir(c0) else []
        gd.check("fsdp_state_0.bin" in names and "fsdp_state_1.bin" in names and "model.safetensors" not in names,
                 "--zero 3 checkpoints are sharded: %s" % names)
        resumed = os.path.join(tmp, "z3_resumed")
        r = gd.run(exe, 2, z3 + ["--checkpoint-dir", ck, "--checkpoint-every", 4, "--resume", "--export", resumed])
        a = gd.read_safetensors(os.path.join(straight, "model.safetensors"))
        b_ = gd.read_safetensors(os.path.join(resumed, "model.safetensors"))
        gd.check("resumed at step 4" in r.stdout and a[1] == b_[1],
                 "--zero 3 killed after step 6, resumed from step 4 == straight, bit for bit")
        # the last checkpoint (step 12) merged: the model's own tensors == the export's
        merged = os.path.join(tmp, "merged")
        r = subprocess.run([accel, "ckpt", "merge", os.path.join(ck, "checkpoints", "checkpoint_2"), merged],
                           capture_output=True, text=True, timeout=60)
        gd.check(r.returncode == 0, "accel ckpt merge of the step-12 checkpoint (%s)" % r.stderr.strip())
        if r.returncode == 0:
            m = gd.read_safetensors(os.path.join(merged, "model.safetensors"))[0]
            hf = dict(as_hf(k, v) for k, v in m.items())
            gd.check(len(m) == 4 + 12 * 2 and set(hf) == set(a[0]) and all(hf[k] == a[0][k] for k in a[0]),
                     "merged (%d tensors, llm.c layout) == the export (HF layout), bit for bit" % len(m))
        r = gd.run(exe, 2, common + ["--batch", 4, "--zero", 3, "--dump-grads", os.path.join(tmp, "g")],
                   expect_ok=False)
        gd.check(r.returncode != 0 and "--zero 3 is not supported with --dump-grads" in r.stderr,
                 "--zero 3 --dump-grads is refused with the reason")
        r = gd.run(exe, 2, common + ["--batch", 4, "--offload"], expect_ok=False)
        gd.check(r.returncode != 0 and "--offload needs --zero 3" in r.stderr, "--offload without --zero 3 is refused")
    print("gpt2-zero3: %d passed, %d failed" % (gd.checks - gd.failures, gd.failures))
    return 1 if gd.failures or not gd.checks else 0


if __name__ == "__main__":
    sys.exit(main())
