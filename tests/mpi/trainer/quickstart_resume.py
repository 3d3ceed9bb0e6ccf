#!/usr/bin/env python3
"""The README's loop survives a kill at any step (issue 11): examples/quickstart.c, on 1 and 2 processes.

usage: quickstart_resume.py QUICKSTART_EXE
For P in (1, 2): an uninterrupted run gives the reference weights and per-step log. Then, for kill steps drawn at
random (the seed is printed; QUICKSTART_SEED=<n> replays it), a run is SIGKILLed right after that optimizer step,
and the same command started again must resume from the newest checkpoint and end with the reference weights bit
for bit, its log rows after the resume point equal to the reference's. Resuming from an older checkpoint (the
newest one deleted) must also end bit-identical. Control: a second half whose learning-rate schedule is one epoch
longer (the cosine's total changes from the resume point on) must NOT match, so the comparison can fail.
"""
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile

ROOT = os.environ.get("ACCEL_SOURCE_ROOT") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
MPIRUN = os.path.join(ROOT, "tests", "mpi", "mpirun.sh")
EVERY = 7
failures = checks = 0


def check(ok, what):
    global failures, checks
    checks += 1
    if not ok:
        failures += 1
    print(("ok: " if ok else "FAIL: ") + what, flush=True)


def run(exe, np_, args, expect_ok=True):
    cmd = ["bash", MPIRUN, str(np_), exe] + [str(a) for a in args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if expect_ok and r.returncode != 0:
        print("command failed (%d): %s\n%s%s" % (r.returncode, " ".join(cmd), r.stdout, r.stderr))
        sys.exit(1)
    return r


def weights(path):
    with open(path, "rb") as f:
        b = f.read()
    return b, struct.unpack("<%df" % (len(b) // 4), b)


def log_rows(path):
    with open(path) as f:
        return [line.split() for line in f if line.strip()]


def main():
    exe = sys.argv[1]
    seed = int(os.environ.get("QUICKSTART_SEED") or random.SystemRandom().randrange(1 << 30))
    print("QUICKSTART_SEED=%d" % seed, flush=True)
    rng = random.Random(seed)
    tmp = tempfile.mkdtemp(prefix="quickstart-resume-")
    try:
        for np_ in (1, 2):
            base = ["--epochs", 3, "--every", EVERY, "--accum", 2, "--fp16"]
            ref_w = os.path.join(tmp, "ref%d.w" % np_)
            ref_l = os.path.join(tmp, "ref%d.log" % np_)
            run(exe, np_, base + ["--dir", os.path.join(tmp, "ref%d" % np_), "--dump", ref_w, "--log", ref_l])
            rb, _ = weights(ref_w)
            rows = log_rows(ref_l)
            total = len(rows)
            check(total > 3 * EVERY, "P=%d: the uninterrupted run took %d optimizer steps" % (np_, total))
            for trial in range(2):
                k = rng.randrange(EVERY, total - 1)
                # one directory per trial: both trials may draw the same step (seed 545417278 did), and the second
                # would then resume from the first one's finished run instead of being killed
                d = os.path.join(tmp, "p%d_t%d_k%d" % (np_, trial, k))
                w, l = d + ".w", d + ".log"
                r = run(exe, np_, base + ["--dir", d, "--kill-at", k, "--dump", w, "--log", l], expect_ok=False)
                check(r.returncode != 0 and not os.path.exists(w), "P=%d: killed after step %d (exit %d)"
                      % (np_, k, r.returncode))
                if trial == 1:  # the newest checkpoint lost: resume from the one before (still bit-identical)
                    ckdir = os.path.join(d, "checkpoints")
                    names = sorted(os.listdir(ckdir), key=lambda s: int(s.rsplit("_", 1)[1]))
                    if len(names) > 1:
                        shutil.rmtree(os.path.join(ckdir, names[-1]))
                r = run(exe, np_, base + ["--dir", d, "--dump", w, "--log", l])
                resumed_at = (k // EVERY) * EVERY if trial == 0 else None
                check("resumed at optimizer step" in r.stdout, "P=%d kill at %d: the second run resumed (%s)"
                      % (np_, k, r.stdout.strip().splitlines()[0] if r.stdout.strip() else "no output"))
                if resumed_at is not None:
                    check(("resumed at optimizer step %d " % resumed_at) in r.stdout,
                          "P=%d kill at %d: resumed from the newest checkpoint, step %d" % (np_, k, resumed_at))
                wb, _ = weights(w)
                check(wb == rb, "P=%d kill at %d%s: final weights bit-identical to the uninterrupted run"
                      % (np_, k, "" if trial == 0 else " (older checkpoint)"))
                got = log_rows(l)
                # the log is appended by both halves: rows up to the kill, then the resumed rows from the checkpoint on
                tail = got[k:]
                start = int(tail[0][0]) if tail else -1
                check(tail == rows[start - 1:] and start >= 1,
                      "P=%d kill at %d: per-step loss/lr after the resume equal the uninterrupted run's (%d rows)"
                      % (np_, k, len(tail)))
            # control: a second half with a longer schedule must differ (the comparison can fail)
            k = rng.randrange(EVERY, total - 1)
            d = os.path.join(tmp, "ctrl%d" % np_)
            run(exe, np_, base + ["--dir", d, "--kill-at", k], expect_ok=False)
            ctrl = ["--epochs", 4] + base[2:]
            w = d + ".w"
            run(exe, np_, ctrl + ["--dir", d, "--dump", w])
            cb, cv = weights(w)
            check(cb != rb, "P=%d control: a second half with a longer schedule does not match (max diff %.3g)"
                  % (np_, max(abs(a - b) for a, b in zip(cv, weights(ref_w)[1]))))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("quickstart-resume: %d passed, %d failed" % (checks - failures, failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
