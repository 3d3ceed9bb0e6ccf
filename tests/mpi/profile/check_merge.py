#!/usr/bin/env python3
"""The merged trace of test_profile_mpi on NP ranks, read by check_trace.py's independent reader:
  - every per-rank file profile_<r>.json is a valid, well-nested trace with pid = r and steps 1-3, 5-7 recorded;
  - profile_merged.json is valid too and holds every rank's events under pid = rank: per rank the same events
    (names, steps, durations) as its own file, every timestamp shifted by one constant per rank (its start minus
    the earliest start), with "rank <r>" process names;
  - partial.json (the last rank's profiler disabled) holds the other ranks only.

usage: check_merge.py MPIRUN_SH NP TEST_PROFILE_MPI_EXE SCRATCH_DIR"""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ.get("ACCEL_SOURCE_ROOT", "."), "tests", "unit", "profile"))
import check_trace  # noqa: E402

mpirun, np_, exe, scratch = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
tally = check_trace.Tally()
check = tally.check


shutil.rmtree(scratch, ignore_errors=True)
os.makedirs(scratch)
res = subprocess.run([mpirun, str(np_), exe, "ok", scratch], capture_output=True, text=True, timeout=240)
sys.stdout.write(res.stdout)
sys.stderr.write(res.stderr[-4000:])
check(res.returncode == 0, f"mpirun exited {res.returncode}")
per = {}
for r in range(np_):
    try:
        info = check_trace.validate(check_trace.load(os.path.join(scratch, f"profile_{r}.json")))
        check(list(info) == [r], f"profile_{r}.json has pids {list(info)}")
        check(info[r]["steps"] == [1, 2, 3, 5, 6, 7], f"rank {r} recorded steps {info[r]['steps']}")
        per[r] = info[r]
    except (check_trace.TraceError, ValueError, OSError) as e:
        check(False, f"profile_{r}.json: {e}")


def key(e):
    return (e["name"], e["cat"], e["tid"], e["args"]["step"], e["dur"])


try:
    merged = check_trace.validate(check_trace.load(os.path.join(scratch, "profile_merged.json")))
    check(sorted(merged) == list(range(np_)), f"merged pids {sorted(merged)}")
    shifts = []
    for r, own in per.items():
        mine = merged.get(r, {"x": []})["x"]
        check([key(e) for e in mine] == [key(e) for e in own["x"]],
              f"rank {r}: the merged events differ from profile_{r}.json")
        d = {round(m["ts"] - o["ts"], 2) for m, o in zip(mine, own["x"])}
        check(len(d) == 1 and min(d) >= 0, f"rank {r}: timestamps shifted by {sorted(d)[:5]} (one constant >= 0)")
        shifts.append(min(d) if d else -1)
    check(min(shifts) == 0, f"the earliest rank is not at shift 0: {shifts}")
    check(max(shifts) < 60e6, f"shifts {shifts} us: ranks started a minute apart?")
except (check_trace.TraceError, ValueError, OSError) as e:
    check(False, f"profile_merged.json: {e}")
try:
    partial = check_trace.validate(check_trace.load(os.path.join(scratch, "partial.json")))
    check(sorted(partial) == list(range(np_ - 1)), f"partial.json pids {sorted(partial)}")
except (check_trace.TraceError, ValueError, OSError) as e:
    check(False, f"partial.json: {e}")
shutil.rmtree(scratch, ignore_errors=True)
sys.exit(tally.finish("merge"))
