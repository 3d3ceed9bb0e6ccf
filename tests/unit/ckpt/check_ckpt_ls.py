#!/usr/bin/env python3
"""`accel ckpt ls` on a folder of checkpoints (issue 29): every checkpoint_<N> gets a verdict, in numeric order; an
incomplete or damaged one is marked (with the verification's reason) and makes the exit code 1; the newest complete
one is marked as the one load_state loads; a folder of intact checkpoints exits 0.

usage: check_ckpt_ls.py TEST_CKPT_FALLBACK_EXE ACCEL_EXE SCRATCH_DIR"""
import os
import shutil
import struct
import subprocess
import sys

exe, cli, scratch = sys.argv[1], sys.argv[2], sys.argv[3]
checks = failures = 0


def check(cond, what):
    global checks, failures
    checks += 1
    if not cond:
        failures += 1
        print("FAIL:", what)


shutil.rmtree(scratch, ignore_errors=True)
os.makedirs(scratch)
proj = os.path.join(scratch, "proj")
subprocess.run([exe, "make", proj], check=True)
cdir = os.path.join(proj, "checkpoints")
r = subprocess.run([cli, "ckpt", "ls", cdir], capture_output=True, text=True)
lines = [ln for ln in r.stdout.splitlines() if ": checkpoint, " in ln]
names = [os.path.basename(ln.split(": checkpoint, ")[0]) for ln in lines]
verdict = {n: ln.split(": checkpoint, ", 1)[1] for n, ln in zip(names, lines)}
check(r.returncode == 1, "exit code %d with a damaged and an incomplete checkpoint (1 expected)" % r.returncode)
check(names == ["checkpoint_8", "checkpoint_9", "checkpoint_10", "checkpoint_11"], "numeric order: %s" % names)
check(verdict.get("checkpoint_8") == "complete, checksums OK", "checkpoint_8: %s" % verdict.get("checkpoint_8"))
check(verdict.get("checkpoint_9", "").startswith("complete, checksums OK") and
      "load_state loads it" in verdict.get("checkpoint_9", ""), "checkpoint_9 is the one loaded: %s" %
      verdict.get("checkpoint_9"))
check(verdict.get("checkpoint_10", "").startswith("DAMAGED") and
      "checksum of model.safetensors" in verdict.get("checkpoint_10", ""), "checkpoint_10: %s" %
      verdict.get("checkpoint_10"))
check(verdict.get("checkpoint_11", "").startswith("INCOMPLETE") and
      "checkpoint_complete.json" in verdict.get("checkpoint_11", ""), "checkpoint_11: %s" % verdict.get("checkpoint_11"))
check(sum("load_state loads it" in v for v in verdict.values()) == 1, "exactly one checkpoint is marked as loaded")
# one damaged checkpoint on its own
r = subprocess.run([cli, "ckpt", "ls", os.path.join(cdir, "checkpoint_10")], capture_output=True, text=True)
check(r.returncode == 1 and "DAMAGED" in r.stdout, "ls of checkpoint_10 alone: exit %d, %s" % (r.returncode, r.stdout))
# without the bad ones: exit 0, the newest is marked
shutil.rmtree(os.path.join(cdir, "checkpoint_10"))
shutil.rmtree(os.path.join(cdir, "checkpoint_11"))
r = subprocess.run([cli, "ckpt", "ls", cdir], capture_output=True, text=True)
check(r.returncode == 0 and "INCOMPLETE" not in r.stdout and "DAMAGED" not in r.stdout and
      "checkpoint_9: checkpoint, complete, checksums OK (newest" in r.stdout, "intact folder: exit %d\n%s" %
      (r.returncode, r.stdout))
# the examples' sequence loader state (loader.bin), encoded here from its documented layout (accel_data.h)
c8 = os.path.join(cdir, "checkpoint_8")
seq = b"ACSQ" + struct.pack("<IqiiiiiIQqq", 1, 123456789, 3, 16, 1024, 4, 1, 16, 42, 2, 17)
with open(os.path.join(c8, "loader.bin"), "wb") as f:
    f.write(seq)
r = subprocess.run([cli, "ckpt", "ls", c8], capture_output=True, text=True)
check("loader.bin: sequence loader state, saved by process 1 of 4\n  epoch 2, next global batch 17, seed 42, "
      "shuffle yes\n  3 token files, 123456789 tokens, batch_size 16, seq_len 1024\n" in r.stdout,
      "loader.bin decoded:\n%s" % r.stdout)
with open(os.path.join(c8, "loader.bin"), "wb") as f:
    f.write(seq[:36] + b"\x03" + seq[37:])  # a flag bit the format does not have
r = subprocess.run([cli, "ckpt", "ls", c8], capture_output=True, text=True)
check(r.returncode == 1 and "loader.bin: CORRUPT sequence loader state: seq state: corrupt" in r.stdout,
      "damaged loader.bin: exit %d\n%s" % (r.returncode, r.stdout))
shutil.rmtree(scratch, ignore_errors=True)
print("ckpt-ls: %d passed, %d failed" % (checks - failures, failures))
sys.exit(1 if failures or not checks else 0)
