#!/usr/bin/env python3
"""An independent reader of accel_profile.h's trace files (Python's json module only), and its checks:
  - the file is one JSON object in the Chrome trace event format: "traceEvents" (a list of events), "displayTimeUnit",
    "otherData"; every event has name/ph/pid/tid; complete events ("X") have numeric ts/dur in microseconds (dur >= 0)
    and args.step; metadata events ("M") name the processes ("rank <pid>") and every thread that has events;
  - per (pid, tid) the timestamps never decrease in file order, and the events are well nested (each one lies
    inside the enclosing one, or after it);
  - every host range lies inside its step's "ProfilerStep#<k>" event when that step was recorded;
  - with cover=True (a loop whose phases fill the step): the phases directly under each step add up to the step's
    duration within 5 %;
  - ranges reported by other modules (cat "reported") are on tid 2, have no step, and are in begin order; the trace
    mode's "checkpoint_snapshot" ranges enclose their step's checkpoint phase (one clock), its writer thread's
    "checkpoint_write" ranges are all there, 2 ms long, one after the other.

usage: check_trace.py TEST_PROFILE_EXE SCRATCH_DIR   (runs `TEST_PROFILE_EXE trace ...` and checks its file)
As a module: validate(doc, cover) -> {pid: {"steps": [k...], "x": [events], "other": otherData}}."""
import json
import os
import re
import shutil
import subprocess
import sys

EPS = 0.002  # ts and dur are printed with 3 decimals each: an end may be off by one unit in the last place


class TraceError(Exception):
    pass


class Tally:
    """passed/failed counters and the closing line the test scripts of this module print"""

    def __init__(self):
        self.passed = self.failed = 0

    def check(self, cond, msg):
        if cond:
            self.passed += 1
        else:
            self.failed += 1
            print("FAIL:", msg)

    def finish(self, name):
        print(f"{name}: {self.passed} passed, {self.failed} failed")
        return 1 if self.failed else 0


def need(cond, msg):
    if not cond:
        raise TraceError(msg)


def is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def load(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    # strict JSON: NaN/Infinity would be accepted by json.loads by default; a trace viewer rejects them
    return json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(TraceError("non-JSON constant " + c)))


def validate(doc, cover=False):
    need(isinstance(doc, dict), "the file is not a JSON object")
    need(isinstance(doc.get("traceEvents"), list), "no traceEvents list")
    need(doc.get("displayTimeUnit") in ("ms", "ns"), "displayTimeUnit is not ms or ns")
    need(isinstance(doc.get("otherData"), dict), "no otherData object")
    procs, threads, order = {}, {}, {}
    xs = []
    for i, e in enumerate(doc["traceEvents"]):
        need(isinstance(e, dict), f"event {i} is not an object")
        for key in ("name", "ph", "pid", "tid"):
            need(key in e, f"event {i} has no {key}: {e}")
        need(isinstance(e["name"], str) and e["name"], f"event {i}: bad name")
        need(isinstance(e["pid"], int) and isinstance(e["tid"], int), f"event {i}: pid/tid are not integers")
        if e["ph"] == "M":
            need(isinstance(e.get("args"), dict), f"metadata event {i} has no args")
            if e["name"] == "process_name":
                procs[e["pid"]] = e["args"].get("name")
            elif e["name"] == "thread_name":
                threads[(e["pid"], e["tid"])] = e["args"].get("name")
            elif e["name"] == "process_sort_index":
                need(isinstance(e["args"].get("sort_index"), int), f"event {i}: sort_index")
            else:
                raise TraceError(f"unknown metadata event {e['name']}")
            continue
        need(e["ph"] == "X", f"event {i}: phase {e['ph']!r} is not X or M")
        need(is_num(e.get("ts")) and is_num(e.get("dur")), f"event {i}: ts/dur are not numbers")
        need(e["dur"] >= 0 and e["ts"] >= 0, f"event {i}: negative ts or dur: {e}")
        need(isinstance(e.get("cat"), str), f"event {i}: no cat")
        if e.get("cat") == "reported":
            need(e["tid"] == 2 and "args" not in e, f"event {i}: a reported range off tid 2 or with args: {e}")
        else:
            need(isinstance(e.get("args"), dict) and isinstance(e["args"].get("step"), int), f"event {i}: no args.step")
        key = (e["pid"], e["tid"])
        need(e["ts"] >= order.get(key, -1.0), f"event {i} ({e['name']}): ts {e['ts']} goes back in time on {key}")
        order[key] = e["ts"]
        xs.append(e)
    out = {}
    for e in xs:
        need(procs.get(e["pid"]) == f"rank {e['pid']}", f"pid {e['pid']} has no process_name 'rank {e['pid']}'")
        need(isinstance(threads.get((e["pid"], e["tid"])), str), f"thread {(e['pid'], e['tid'])} has no thread_name")
        need(e["cat"] in ("step", "phase", "range", "device", "reported"), f"unknown cat {e['cat']}")
        need((e["cat"] == "device") == (e["tid"] == 1), f"{e['name']}: device events are on tid 1, host on tid 0")
        out.setdefault(e["pid"], {"steps": [], "x": [], "other": doc["otherData"]})["x"].append(e)
    for pid, info in out.items():
        for tid in (0, 1):
            evs = sorted((e for e in info["x"] if e["tid"] == tid), key=lambda e: (e["ts"], -e["dur"]))
            stack = []
            for e in evs:
                while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"] + EPS:
                    stack.pop()
                if stack:
                    parent = stack[-1]
                    need(e["ts"] + e["dur"] <= parent["ts"] + parent["dur"] + EPS,
                         f"pid {pid} tid {tid}: {e['name']} [{e['ts']}, +{e['dur']}] overlaps {parent['name']} "
                         f"[{parent['ts']}, +{parent['dur']}] without nesting")
                    e["_parent"] = parent
                    e["_depth"] = parent["_depth"] + 1
                else:
                    e["_parent"] = None
                    e["_depth"] = 0
                stack.append(e)
        steps = {}
        for e in info["x"]:
            if e["cat"] == "step":
                m = re.fullmatch(r"ProfilerStep#(\d+)", e["name"])
                need(m and int(m.group(1)) == e["args"]["step"], f"bad step event {e['name']}")
                need(e["_depth"] == 0, f"{e['name']} is nested in something")
                need(e["args"]["step"] not in steps, f"{e['name']} twice")
                steps[e["args"]["step"]] = e
        for e in info["x"]:
            if e["tid"] == 0 and e["cat"] != "step" and e["args"]["step"] in steps:
                top = e
                while top["_parent"] is not None:
                    top = top["_parent"]
                need(top is steps[e["args"]["step"]], f"{e['name']} of step {e['args']['step']} is outside its step")
        if cover:
            for k, s in steps.items():
                kids = [e for e in info["x"] if e.get("_parent") is s]
                total = sum(e["dur"] for e in kids)
                need(kids and abs(total - s["dur"]) <= 0.05 * s["dur"],
                     f"pid {pid} step {k}: the phases add up to {total:.1f} us of a {s['dur']:.1f} us step (> 5 %)")
        info["steps"] = sorted(steps)
    return out


def main():
    exe, scratch = sys.argv[1], sys.argv[2]
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    tally = Tally()
    check = tally.check

    # wait 1, warmup 1, active 3, repeat 2, skip_first 2 over 16 steps: steps 4-6 and 9-11 are recorded
    subprocess.run([exe, "trace", scratch, "1", "1", "3", "2", "2", "16", "report"], check=True,
                   stdout=subprocess.DEVNULL)
    try:
        doc = load(os.path.join(scratch, "profile_0.json"))
        info = validate(doc, cover=True)
        check(True, "")
    except (TraceError, ValueError) as e:
        check(False, f"profile_0.json: {e}")
        info = {}
    if info:
        r0 = info[0]
        check(r0["steps"] == [4, 5, 6, 9, 10, 11], f"recorded steps {r0['steps']}")
        names = {e["name"] for e in r0["x"]}
        for n in ("data", "forward", "attention", "backward", "grad_sync", "optimizer", "checkpoint", "logging"):
            check(n in names, f"no {n} event")
        att = [e for e in r0["x"] if e["name"] == "attention"]
        check(all(e["_parent"]["name"] == "forward" for e in att), "attention is not nested in forward")
        check(all(e["cat"] == "range" for e in att), "a user range's cat is not 'range'")
        check(all(e["cat"] == "phase" for e in r0["x"] if e["name"] == "data"), "a phase's cat is not 'phase'")
        ck = sorted(e["args"]["step"] for e in r0["x"] if e["name"] == "checkpoint")
        check(ck == [5, 11], f"checkpoint (every 3rd step) recorded at {ck}")
        o = doc["otherData"]
        check(o.get("rank") == 0 and o.get("steps") == 16 and o.get("recorded_steps") == 6, f"otherData {o}")
        check(o.get("schedule") == {"wait": 1, "warmup": 1, "active": 3, "repeat": 2, "skip_first": 2},
              f"otherData.schedule {o.get('schedule')}")
        # the range after the last boundary falls on step 16, which the schedule does not record (NONE)
        check(not any(e["tid"] != 2 and e["args"]["step"] == 16 for e in r0["x"]), "a range of the unrecorded step 16")
        # reported ranges: every one kept (the schedule does not filter them), on accel_now's clock
        rep = [e for e in r0["x"] if e["cat"] == "reported"]
        snaps = [e for e in rep if e["name"] == "checkpoint_snapshot"]
        writes = [e for e in rep if e["name"] == "checkpoint_write"]
        check(len(snaps) == 5 and len(writes) == 8 and len(rep) == 13,
              f"reported ranges: {len(snaps)} snapshots (5), {len(writes)} writes (8), {len(rep)} in all")
        check(all(abs(w["dur"] - 2000) <= EPS for w in writes), f"a checkpoint_write is not 2 ms long: {writes}")
        check(all(a["ts"] + a["dur"] <= b["ts"] + EPS for a, b in zip(writes, writes[1:])),
              "the writer thread's ranges overlap")
        for e in (e for e in r0["x"] if e["name"] == "checkpoint"):
            enc = [s for s in snaps if s["ts"] <= e["ts"] + EPS and e["ts"] + e["dur"] <= s["ts"] + s["dur"] + EPS]
            check(len(enc) == 1, f"checkpoint phase at {e['ts']} is not inside one reported checkpoint_snapshot")
        check(o.get("dropped_reported") == 0, f"otherData.dropped_reported {o.get('dropped_reported')}")
    # a file that breaks the rules must fail the reader (the checks can fail)
    bad = {"traceEvents": [{"name": "process_name", "ph": "M", "pid": 0, "tid": 0, "args": {"name": "rank 0"}},
                           {"name": "thread_name", "ph": "M", "pid": 0, "tid": 0, "args": {"name": "host"}},
                           {"name": "a", "cat": "phase", "ph": "X", "ts": 10, "dur": 10, "pid": 0, "tid": 0,
                            "args": {"step": 0}},
                           {"name": "b", "cat": "phase", "ph": "X", "ts": 15, "dur": 10, "pid": 0, "tid": 0,
                            "args": {"step": 0}}],
           "displayTimeUnit": "ms", "otherData": {}}
    try:
        validate(bad)
        check(False, "overlapping events were accepted")
    except TraceError:
        check(True, "")
    bad["traceEvents"][3]["ts"] = 5
    try:
        validate(bad)
        check(False, "a timestamp going back was accepted")
    except TraceError:
        check(True, "")
    shutil.rmtree(scratch, ignore_errors=True)
    return tally.finish("trace")


if __name__ == "__main__":
    sys.exit(main())
