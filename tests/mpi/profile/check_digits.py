#!/usr/bin/env python3
"""examples/train_digits.c with --profile DIR on 2 ranks (accumulation 2, a checkpoint): the run succeeds, rank 0
prints the phase table (one row per phase the trainer marks, a row per recorded step count), every rank writes
DIR/profile_<rank>.json and rank 0 DIR/profile_merged.json, all read back by check_trace.py's independent reader with
every optimizer step recorded under its rank's pid. Without --profile nothing is printed or written (the disabled
profiler). Skips (77) when data/digits.csv is missing and scripts/fetch-digits.sh cannot fetch it.

usage: check_digits.py MPIRUN_SH TRAIN_DIGITS_EXE SCRATCH_DIR"""
import os
import shutil
import subprocess
import sys

ROOT = os.environ.get("ACCEL_SOURCE_ROOT", ".")
sys.path.insert(0, os.path.join(ROOT, "tests", "unit", "profile"))
import check_trace  # noqa: E402

mpirun, exe, scratch = sys.argv[1], sys.argv[2], sys.argv[3]
DATA = os.path.join(ROOT, "data", "digits.csv")
if not os.path.exists(DATA):
    r = subprocess.run(["bash", os.path.join(ROOT, "scripts", "fetch-digits.sh")], capture_output=True, text=True)
    if r.returncode != 0 or not os.path.exists(DATA):
        print("SKIP: data/digits.csv is missing and scripts/fetch-digits.sh failed:\n" + r.stdout + r.stderr)
        sys.exit(77)
tally = check_trace.Tally()
check = tally.check


shutil.rmtree(scratch, ignore_errors=True)
os.makedirs(scratch)
prof = os.path.join(scratch, "prof")
common = ["--data", DATA, "--print-every", "0", "--steps", "40", "--accum", "2"]
r = subprocess.run([mpirun, "2", exe] + common + ["--profile", prof, "--checkpoint-dir", os.path.join(scratch, "ck"),
                                                   "--checkpoint-every", "20"],
                   capture_output=True, text=True, timeout=150)
print(r.stdout)
check(r.returncode == 0, f"train_digits --profile exited {r.returncode}: {r.stderr[-2000:]}")
out = r.stdout
check(out.count("accel profile (rank 0): 40 recorded steps") == 1, "rank 0 prints one table of 40 steps")
rows = {line.split()[0]: line.split() for line in out.split("\n") if line and line.split()[0] in
        ("step", "data", "forward_backward", "grad_sync", "optimizer", "logging", "checkpoint", "(other)")}
for name in ("step", "data", "forward_backward", "grad_sync", "optimizer", "logging", "checkpoint", "(other)"):
    check(name in rows, f"no table row {name}")
if "checkpoint" in rows:
    check(rows["checkpoint"][-1] == "2", f"checkpoint ran in 2 of the steps: {rows['checkpoint']}")
if "forward_backward" in rows:
    check(rows["forward_backward"][-1] == "40", f"forward_backward in every step: {rows['forward_backward']}")
for rk in (0, 1):
    try:
        info = check_trace.validate(check_trace.load(os.path.join(prof, f"profile_{rk}.json")))
        check(info[rk]["steps"] == list(range(40)), f"rank {rk}: steps {info[rk]['steps'][:5]}...")
        fb = [e for e in info[rk]["x"] if e["name"] == "forward_backward"]
        check(len(fb) == 80, f"rank {rk}: {len(fb)} forward_backward ranges (2 micro-batches x 40 steps)")
    except (check_trace.TraceError, ValueError, OSError) as e:
        check(False, f"profile_{rk}.json: {e}")
try:
    merged = check_trace.validate(check_trace.load(os.path.join(prof, "profile_merged.json")))
    check(sorted(merged) == [0, 1], f"merged pids {sorted(merged)}")
except (check_trace.TraceError, ValueError, OSError) as e:
    check(False, f"profile_merged.json: {e}")
# disabled: no table, no files
prof2 = os.path.join(scratch, "none")
r = subprocess.run([mpirun, "1", exe] + common, capture_output=True, text=True, timeout=100)
check(r.returncode == 0 and "accel profile" not in r.stdout and not os.path.exists(prof2), "without --profile")
shutil.rmtree(scratch, ignore_errors=True)
sys.exit(tally.finish("digits-profile"))
