#!/usr/bin/env python3
"""`accel launch --max-restarts` (torchrun's rule, issue 29): a worker killed at a random step is restarted and the
trainer (examples/quickstart.c, which resumes from its newest complete checkpoint) ends with the weights of an
uninterrupted run, bit for bit.

usage: launch_restart.py QUICKSTART_EXE ACCEL_EXE
One process: the quickstart's data collectives need MPI, which `accel launch` does not start. The kill step is drawn
at random (the seed is printed; QUICKSTART_SEED=<n> replays it). Control: the same kill under --max-restarts 0 fails
with the killed rank's 128 + SIGKILL and writes no weights, so the comparison can fail.
"""
import os
import random
import shutil
import subprocess
import sys
import tempfile

import quickstart_resume as qr  # its check() and counters, and its checkpoint interval
from quickstart_resume import EVERY, check


def run(cmd):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELERATE_", "ACCEL_RESTART", "TORCHELASTIC"))}
    return subprocess.run([str(a) for a in cmd], capture_output=True, text=True, timeout=180, env=env)


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    exe, accel = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    seed = int(os.environ.get("QUICKSTART_SEED") or random.SystemRandom().randrange(1 << 30))
    print("QUICKSTART_SEED=%d" % seed, flush=True)
    rng = random.Random(seed)
    tmp = tempfile.mkdtemp(prefix="launch-restart-")
    try:
        base = ["--epochs", 3, "--every", EVERY, "--accum", 2, "--fp16"]
        ref_w, ref_l = os.path.join(tmp, "ref.w"), os.path.join(tmp, "ref.log")
        r = run([exe] + base + ["--dir", os.path.join(tmp, "ref"), "--dump", ref_w, "--log", ref_l])
        check(r.returncode == 0, "the uninterrupted run (exit %d) %s" % (r.returncode, r.stderr.strip()[-300:]))
        with open(ref_l) as f:
            total = sum(1 for line in f if line.strip())
        with open(ref_w, "rb") as f:
            ref = f.read()
        k = rng.randrange(EVERY, total - 1)
        d = os.path.join(tmp, "restarted")
        w = d + ".w"
        r = run([accel, "launch", "-n", 1, "--max-restarts", 2, "--", exe] + base +
                ["--dir", d, "--kill-at", k, "--dump", w])
        check(r.returncode == 0 and "restart 1 of 2" in r.stderr and "restart 2 of 2" not in r.stderr,
              "killed after step %d, restarted once, finished (exit %d): %s" % (k, r.returncode, r.stderr.strip()[-400:]))
        check("resumed at optimizer step %d " % ((k // EVERY) * EVERY) in r.stdout,
              "the restart resumed from the newest checkpoint, step %d: %s" % ((k // EVERY) * EVERY, r.stdout[:200]))
        got = open(w, "rb").read() if os.path.exists(w) else b""
        check(got == ref, "final weights bit-identical to the uninterrupted run (%d bytes)" % len(ref))
        # control: no restarts allowed
        d = os.path.join(tmp, "norestart")
        r = run([accel, "launch", "-n", 1, "--", exe] + base + ["--dir", d, "--kill-at", k, "--dump", d + ".w"])
        check(r.returncode == 137 and not os.path.exists(d + ".w") and "restart" not in r.stderr,
              "control: without --max-restarts the kill ends the job (exit %d)" % r.returncode)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("launch-restart: %d passed, %d failed" % (qr.checks - qr.failures, qr.failures))
    return 1 if qr.failures or not qr.checks else 0


if __name__ == "__main__":
    sys.exit(main())
