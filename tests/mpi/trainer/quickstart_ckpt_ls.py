#!/usr/bin/env python3
"""`accel ckpt ls` decodes a real checkpoint's state files in words (issue 29): examples/quickstart.c trains with
--fp16 on 1 process (1 epoch) and on 2 (2 epochs), checkpointing every 10 optimizer steps (total_limit 2), and the
listing of checkpoint_2 (optimizer step 30) must say what the run's known inputs imply. The expected lines are
written here from quickstart.c's constants, not from the code under test:
  N 600 samples, B 8 per process, accumulation 2, shuffle with seed 42, even_batches (the default);
  P 1: 75 batches per epoch; step 30 = micro-batch 60 → epoch 0, next batch 60.
  P 2: ceil(600 / 16) = 38 batches per epoch, 19 steps; step 30 = micro-batch 60 → epoch 1, next batch 22.
  scaler: init 65536, growth_interval 7, factor 2, backoff 0.5, no overflow in F32 → 65536 * 2^(30 // 7), tracker
  30 % 7 = 2. scheduler: P steps per optimizer step (30 P), 30 non-sync micro-batches counted by the adjustment.
  AdamW lr 0.2, weight_decay 0.01, betas (0.9, 0.999), eps 1e-8; cosine with 5 warmup steps, floor 0.1, total
  epochs * (batches // 2) * P; the lr the checkpoint holds was set before step 30 at scheduler step 29 P.
  micro-step counter: as Accelerate's GradientState, it restarts at an epoch's last batch, so it counts the
  micro-batches of the current epoch: the next batch's index.
  RNG: quickstart never seeds: seed 0, offset 0 on every rank.
Then damaged state files (truncated, bad magic, a field out of range, a flipped byte under the optimizer's checksum,
an empty file) each give a line naming the file and the parser's reason, exit code 1, and no crash.

usage: quickstart_ckpt_ls.py QUICKSTART_EXE ACCEL_EXE"""
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile

ROOT = os.environ.get("ACCEL_SOURCE_ROOT") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
MPIRUN = os.path.join(ROOT, "tests", "mpi", "mpirun.sh")
failures = checks = 0


def check(ok, what):
    global failures, checks
    checks += 1
    if not ok:
        failures += 1
    print(("ok: " if ok else "FAIL: ") + what, flush=True)


def lr_at(sched_step, total):
    """transformers' cosine with min_lr_rate, half a cycle, written out"""
    progress = (sched_step - 5) / (total - 5)
    return 0.2 * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress)))


def expected(np_, epochs, d):
    batches = 75 if np_ == 1 else 38
    epoch, nxt = divmod(60, batches)
    total = epochs * (batches // 2) * np_
    lr = lr_at(29 * np_, total)
    out = [
        "%s/optim_state.bin: optimizer state, AdamW, 30 steps, 1 groups, 1 parameters" % d,
        "  betas (0.9, 0.999), eps 1e-08, amsgrad no, maximize no",
        "  group 0: 1 parameters, lr %.9g (initial 0.2), weight_decay 0.01" % lr,
        "  parameter 0: 17 elements, 30 steps",
    ]
    for r in range(np_):
        out += [
            "%s/random_states_%d.bin: training state of process %d of %d" % (d, r, r, np_),
            "  optimizer steps 30 (the last one skipped: no), scheduler steps %d (adjusted 30)" % (30 * np_),
            "  micro-step counter %d, gradient_accumulation_steps 2, sync_gradients yes" % nxt,
            "  RNG seed 0, offset 0",
        ]
    out += [
        "%s/sampler.bin: sampler state, saved by process 0 of %d" % (d, np_),
        "  epoch %d, next batch %d (per process), seed 42" % (epoch, nxt),
        "  dataset_len 600, batch_size 8, options: even_batches, shuffle",
        "%s/scaler.bin: loss scaler state" % d,
        "  scale %d, growth_tracker 2 of growth_interval 7, growth_factor 2, backoff_factor 0.5" % (65536 * 2 ** 4),
    ]
    return out


def decoded(stdout):
    """the lines of the state files: from a state file's header line up to the next file's line"""
    keep, on = [], False
    for line in stdout.splitlines():
        if not line.startswith("  "):
            on = any(k in line for k in (": optimizer state", ": training state", ": sampler state",
                                         ": loss scaler state", ": CORRUPT"))
        if on:
            keep.append(line)
    return keep


def ls(cli, d):
    r = subprocess.run([cli, "ckpt", "ls", d], capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout, r.stderr


def main():
    exe, cli = sys.argv[1], sys.argv[2]
    tmp = tempfile.mkdtemp(prefix="quickstart-ckpt-ls-")
    try:
        for np_, epochs in ((1, 1), (2, 2)):
            proj = os.path.join(tmp, "np%d" % np_)
            cmd = ["bash", MPIRUN, str(np_), exe, "--dir", proj, "--epochs", epochs, "--every", 10, "--fp16"]
            r = subprocess.run([str(a) for a in cmd], capture_output=True, text=True, timeout=120)
            if r.returncode != 0:
                print("quickstart failed (%d)\n%s%s" % (r.returncode, r.stdout, r.stderr))
                return 1
            d = os.path.join(proj, "checkpoints", "checkpoint_2")
            rc, out, err = ls(cli, d)
            want = expected(np_, epochs, d)
            got = decoded(out)
            check(rc == 0 and got == want, "np %d: the state files of checkpoint_2 decoded as expected (exit %d)%s"
                  % (np_, rc, "" if got == want else "\n  want:\n    " + "\n    ".join(want) + "\n  got:\n    " +
                     "\n    ".join(got) + "\n" + err))
        # damaged state files (a copy of the np 2 checkpoint each): the file and the parser's reason, exit 1
        src = os.path.join(tmp, "np2", "checkpoints", "checkpoint_2")

        def damaged(name, edit, reason):
            d = os.path.join(tmp, "bad-" + name.replace(".", "-") + "-%d" % checks)
            shutil.copytree(src, d)
            p = os.path.join(d, name)
            with open(p, "rb") as f:
                b = bytearray(f.read())
            with open(p, "wb") as f:
                f.write(edit(b))
            rc, out, err = ls(cli, d)
            line = "%s: CORRUPT " % p
            hit = [ln for ln in out.splitlines() if ln.startswith(line)]
            check(rc == 1 and len(hit) == 1 and reason in hit[0] and "DAMAGED" in out and not err,
                  "%s %s: exit %d, %s" % (name, reason, rc, hit or out + err))

        damaged("sampler.bin", lambda b: b[:63], "sampler state: shard state: not a sampler state (63 bytes, want 64")
        damaged("random_states_1.bin", lambda b: b"XXXX" + b[4:],
                "training state: training state: not an accel state (80 bytes")
        damaged("scaler.bin", lambda b: b[:32] + struct.pack("<i", 7),
                "loss scaler state: scaler state: growth_tracker 7 is not in [0, 7)")
        damaged("optim_state.bin", lambda b: b[:30] + bytes([b[30] ^ 1]) + b[31:],
                "optimizer state: optimizer state: checksum mismatch")
        damaged("scaler.bin", lambda b: b"", "loss scaler state: scaler state: 0 bytes, expected 36")
        damaged("sampler.bin", lambda b: b[:48] + struct.pack("<q", -3) + b[56:],
                "sampler state: shard state: corrupt (epoch -3")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("quickstart-ckpt-ls: %d passed, %d failed" % (checks - failures, failures))
    return 1 if failures or not checks else 0


if __name__ == "__main__":
    sys.exit(main())
