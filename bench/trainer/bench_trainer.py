#!/usr/bin/env python3
"""Per-step overhead of accel in examples/train_digits vs examples/train_digits_raw (same math, hand-written MPI,
no accel), both on 2 MPI ranks, fp32, measured in the same run: the two trainers alternate, REPS runs each, and the
median of each trainer's own "train samples/s" (training loop only, startup and evaluation excluded) is compared.
Prints one JSON line per configuration (DESIGN.md → Testing); ratio = accel ÷ raw, goal 0.98 (≤ 2 % slower).

First, bench_step (both steps alternating inside one process per rank, 1 and 2 ranks): the robust figure.

usage: bench_trainer.py BENCH_STEP [TRAIN_DIGITS TRAIN_DIGITS_RAW [REPS]]
"""
import json
import os
import statistics
import subprocess
import sys

ROOT = os.environ.get("ACCEL_SOURCE_ROOT") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MPIRUN = os.path.join(ROOT, "tests", "mpi", "mpirun.sh")
DATA = os.path.join(ROOT, "data", "digits.csv")


# Blocking MPI calls busy-poll; on a loaded, oversubscribed machine that measures the scheduler, not the trainer.
# Both trainers run with Open MPI's yield_when_idle (ignored by MPICH).
ENV = dict(os.environ, OMPI_MCA_mpi_yield_when_idle="1")


def rate(exe, np_, args):
    cmd = ["bash", MPIRUN, str(np_), exe, "--data", DATA] + [str(a) for a in args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=ENV)
    if r.returncode != 0:
        raise SystemExit("bench: %s failed:\n%s%s" % (" ".join(cmd), r.stdout, r.stderr))
    for line in r.stdout.splitlines():
        if line.startswith("train samples/s: "):
            return float(line.split(": ")[1])
    raise SystemExit("bench: no 'train samples/s' line from %s" % exe)


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    if not os.path.exists(DATA):
        r = subprocess.run(["bash", os.path.join(ROOT, "scripts", "fetch-digits.sh")], capture_output=True, text=True)
        if r.returncode != 0:
            print("bench: SKIP: no data/digits.csv and fetch-digits.sh failed:\n" + r.stdout + r.stderr)
            return 77
    for np_ in (2, 1):
        cmd = ["bash", MPIRUN, str(np_), sys.argv[1], DATA, "1500"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=ENV)
        if r.returncode != 0:
            raise SystemExit("bench: %s failed:\n%s%s" % (" ".join(cmd), r.stdout, r.stderr))
        print(r.stdout.strip(), flush=True)
    if len(sys.argv) < 4:
        return 0
    accel_exe, raw_exe = sys.argv[2], sys.argv[3]
    reps = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    # accel's collectives default to a watchdog (non-blocking MPI + polling against a deadline); the raw trainer
    # calls blocking MPI_Allreduce. Both accel variants are measured: "watchdog off" is the like-for-like one.
    # 2 ranks (the goal), and 1 rank: no communication, so only accel's own per-step work differs.
    # ~2 s of training per run: 0.1 s runs (the wave-1 1500 steps) measured process start-up noise, 0.75-1.06x
    for np_, hidden, batch, accum, steps in ((2, 64, 16, 1, 20000), (2, 256, 32, 2, 3000), (1, 64, 32, 1, 10000)):
        common = ["--steps", steps, "--batch", batch, "--accum", accum, "--hidden", hidden, "--seed", 1]
        a, aw, r_ = [], [], []
        for _ in range(reps):  # alternate so all see the same machine load
            a.append(rate(accel_exe, np_, common + ["--print-every", 0, "--no-watchdog"]))
            aw.append(rate(accel_exe, np_, common + ["--print-every", 0]))
            r_.append(rate(raw_exe, np_, common))
        mr = statistics.median(r_)
        for name, vals in (("blocking MPI (watchdog off)", a), ("watchdog on (default)", aw)):
            ma = statistics.median(vals)
            print(json.dumps({"bench": "train_digits_end_to_end",
                              "params": {"processes": np_, "hidden": hidden, "batch": batch, "accum": accum,
                                         "steps": steps, "reps": reps, "precision": "no", "accel_collectives": name},
                              "unit": "samples/s", "accel": round(ma, 1), "reference": round(mr, 1),
                              "reference_name": "train_digits_raw (hand-written MPI, no accel)",
                              "ratio": round(ma / mr, 4), "goal": 0.98}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
