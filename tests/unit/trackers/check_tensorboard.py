"""Loads the event file accel_trackers.h writes with TensorBoard's own EventAccumulator and checks the scalars and
the hparams text summary. Exits 77 (meson: skipped) when the tensorboard package is not importable.
usage: check_tensorboard.py WRITE_RUN_EXE"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import expected_run as X  # noqa: E402

try:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
except Exception as e:  # not installed here: try the system Python once, else skip (CI may not have it)
    if os.path.exists("/usr/bin/python3") and os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3") \
            and not os.environ.get("ACCEL_TRK_REEXEC"):
        os.environ["ACCEL_TRK_REEXEC"] = "1"
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    print("SKIP: tensorboard is not importable by %s: %s" % (sys.executable, e))
    sys.exit(77)


def main():
    failures = passes = 0

    def check(cond, what):
        nonlocal failures, passes
        if cond:
            passes += 1
        else:
            failures += 1
            print("FAIL:", what)

    tmp, paths, t0, t1 = X.run_writer(sys.argv[1], "all")
    ea = EventAccumulator(paths["run_dir"], size_guidance={"scalars": 0, "tensors": 0})
    ea.Reload()
    tags = ea.Tags()
    expected = {}
    for step, vals in X.calls():
        for n, x in vals:
            expected.setdefault(n, []).append((step if step is not None else 0, X.f32(x)))
    check(sorted(tags["scalars"]) == sorted(expected), "scalar tags: %s" % tags["scalars"])
    for tag, series in expected.items():
        got = [(e.step, e.value) for e in ea.Scalars(tag)] if tag in tags["scalars"] else []
        check(len(got) == len(series), "%r: %d events" % (tag, len(got)))
        for (gs, gv), (es, ev) in zip(got, series):
            check(gs == es and X.same(float(gv), ev), "%r step %d: %r vs %r" % (tag, es, gv, ev))
        for e in (ea.Scalars(tag) if tag in tags["scalars"] else []):
            check(t0 - 1 <= e.wall_time <= t1 + 1, "wall_time")
    check("hparams" in tags["tensors"], "hparams text summary present: %s" % tags["tensors"])
    if "hparams" in tags["tensors"]:
        tp = ea.Tensors("hparams")[0].tensor_proto
        text = tp.string_val[0].decode("utf-8")
        check("| lr | 0.0003 |" in text and "| use_amp | true |" in text, "hparams text: %s" % text)
        check(ea.SummaryMetadata("hparams").plugin_data.plugin_name == "text", "text plugin")
    tmp.cleanup()
    print("trackers-tensorboard: %d passed, %d failed" % (passes, failures))
    return 1 if failures or not passes else 0


if __name__ == "__main__":
    sys.exit(main())
