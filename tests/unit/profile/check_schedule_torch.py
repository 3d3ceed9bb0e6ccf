#!/usr/bin/env python3
"""accel_profile.h's schedule against torch.profiler itself (/usr/bin/python3 + Debian python3-torch; exit 77 =
skip when torch is missing):
  1. accel_prof_schedule_action for a grid of (wait, warmup, active, repeat, skip_first) and steps 0..59 equals
     torch.profiler.schedule(...)(step) (the ProfilerAction value);
  2. a profiled loop (test_profile trace) records exactly the steps torch.profiler.schedule marks RECORD or
     RECORD_AND_SAVE (the "ProfilerStep#k" events of the trace file, read by check_trace.py), every step without a
     schedule;
  3. on_trace_ready runs at the same step numbers as torch.profiler.profile's on_trace_ready in a real torch loop
     (prof.step_num inside the callback), leaving out the call torch makes when the profiler stops mid-cycle.

usage: check_schedule_torch.py TEST_PROFILE_EXE SCRATCH_DIR"""
import os
import shutil
import subprocess
import sys
import warnings

try:
    import torch
    from torch.profiler import ProfilerAction, ProfilerActivity, profile, schedule
except Exception as e:  # noqa: BLE001 — any import failure means "no torch here"
    print(f"torch not available ({e}); skipping")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_trace  # noqa: E402

warnings.simplefilter("ignore")  # torch warns about warmup=0 schedules
exe, scratch = sys.argv[1], sys.argv[2]
tally = check_trace.Tally()
check = tally.check


# 1. the rule, step by step
out = subprocess.run([exe, "schedule"], check=True, capture_output=True, text=True).stdout.split("\n")
n = bad = 0
for line in out:
    if not line.strip():
        continue
    w, wu, a, r, sf, k, act = map(int, line.split())
    want = schedule(wait=w, warmup=wu, active=a, repeat=r, skip_first=sf)(k).value
    n += 1
    if act != want:
        bad += 1
        if bad < 10:
            print(f"FAIL: wait={w} warmup={wu} active={a} repeat={r} skip_first={sf} step {k}: accel {act}, torch {want}")
check(n >= 600 and bad == 0, f"{bad} of {n} schedule actions differ from torch")

# 2 + 3. profiled loops
RECORDING = (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)
for (w, wu, a, r, sf, steps) in [(1, 1, 2, 2, 1, 14), (0, 0, 3, 0, 0, 10), (2, 0, 1, 0, 3, 12), (0, 2, 2, 1, 1, 9),
                                 (0, 0, 0, 0, 0, 5), (1, 1, 3, 0, 0, 13)]:
    tag = f"wait={w} warmup={wu} active={a} repeat={r} skip_first={sf} steps={steps}"
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    res = subprocess.run([exe, "trace", scratch] + [str(v) for v in (w, wu, a, r, sf, steps)], check=True,
                         capture_output=True, text=True)
    ready = [int(line.split()[1]) for line in res.stdout.split("\n") if line.startswith("ready ")]
    try:
        info = check_trace.validate(check_trace.load(os.path.join(scratch, "profile_0.json")), cover=True)
    except (check_trace.TraceError, ValueError) as e:
        check(False, f"{tag}: {e}")
        continue
    if a == 0:  # no schedule_option: torch.profiler.profile(schedule=None) records every step
        want = list(range(steps))
        fn = None
    else:
        fn = schedule(wait=w, warmup=wu, active=a, repeat=r, skip_first=sf)
        want = [k for k in range(steps) if fn(k) in RECORDING]
    check(info[0]["steps"] == want, f"{tag}: recorded {info[0]['steps']}, torch.profiler.schedule records {want}")
    calls = []
    with profile(activities=[ProfilerActivity.CPU], schedule=fn,
                 on_trace_ready=lambda p: calls.append(p.step_num)) as prof:
        for _ in range(steps):
            torch.ones(2).sum()
            prof.step()
        in_loop = len(calls)
    calls = calls[:in_loop]  # not torch's extra call when the profiler stops inside a cycle
    check(ready == calls, f"{tag}: on_trace_ready at steps {ready}, torch at {calls}")
shutil.rmtree(scratch, ignore_errors=True)
sys.exit(tally.finish("schedule-torch"))
