#!/usr/bin/env python3
"""GPU test of examples/train_gpt2.cu: a tiny generated llm.c token shard (a Markov chain over 64 tokens, each
token with two likely successors: the best possible loss is ln 2), 60 optimizer steps with accumulation 2 and a
checkpoint, then a resume. Checks that the loss decreases and the checkpoint is complete. Exits 77 (skip) when the
trainer reports no CUDA device.

usage: test_gpt2.py TRAIN_GPT2_EXE"""
import json
import math
import os
import subprocess
import sys
import tempfile


def main():
    exe = sys.argv[1]
    fails = 0
    with tempfile.TemporaryDirectory(prefix="gpt2-") as tmp:
        shard = os.path.join(tmp, "tiny.bin")
        r = subprocess.run([exe, "--gen-shard", shard, "200000", "64"], capture_output=True, text=True)
        if r.returncode != 0:
            print(r.stdout + r.stderr)
            return 1
        if os.path.getsize(shard) != 1024 + 2 * 200000:
            print("FAIL: generated shard has the wrong size")
            return 1
        lf = os.path.join(tmp, "loss.txt")
        ck = os.path.join(tmp, "ck")
        args = [exe, "--data", shard, "--vocab", "64", "--batch", "8", "--seq", "64", "--accum", "2", "--lr", "3e-3",
                "--print-every", "10", "--loss-file", lf, "--checkpoint-dir", ck, "--checkpoint-every", "30"]
        r = subprocess.run(args + ["--steps", "60"], capture_output=True, text=True, timeout=300)
        print(r.stdout + r.stderr)
        if r.returncode == 77:
            return 77
        if r.returncode != 0:
            print("FAIL: train_gpt2 exited %d" % r.returncode)
            return 1
        rows = [line.split() for line in open(lf)]
        losses = [float(x[1]) for x in rows]
        first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5

        def check(ok, what):
            nonlocal fails
            print(("ok: " if ok else "FAIL: ") + what)
            fails += 0 if ok else 1

        check(len(losses) == 60, "60 optimizer steps logged (%d)" % len(losses))
        check(abs(first - math.log(64)) < 0.75, "initial loss near ln 64 = %.2f (%.3f)" % (math.log(64), first))
        check(last < 0.7 * first and last > math.log(2) - 0.1,
              "the loss decreases toward ln 2 = 0.69 (%.3f -> %.3f)" % (first, last))
        done = os.path.join(ck, "checkpoints", "checkpoint_1", "checkpoint_complete.json")
        check(os.path.exists(done) and "model.safetensors" in json.load(open(done)).get("files", {}),
              "checkpoint_1 (step 60) is complete and holds model.safetensors")
        # resume from the newest checkpoint (step 60) for 10 more steps: the loss continues where it was
        r = subprocess.run(args + ["--steps", "70", "--resume"], capture_output=True, text=True, timeout=300)
        print(r.stdout + r.stderr)
        rows = [line.split() for line in open(lf)]
        check(r.returncode == 0 and len(rows) == 70 and int(rows[60][0]) == 61, "resumed at step 61 and ran to 70")
        if r.returncode == 0 and len(rows) == 70:
            resumed = sum(float(x[1]) for x in rows[60:]) / 10
            check(resumed < 0.7 * first, "the resumed loss stays low (%.3f)" % resumed)
    print("trainer-gpt2: %s" % ("ok" if not fails else "%d failed" % fails))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
