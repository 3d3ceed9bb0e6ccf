#!/usr/bin/env python3
"""Multi-process checks of examples/gpt2/gpt2_cpu.c (suite trainer, kind mpi).

usage: gpt2_driver.py CHECK GPT2_CPU_EXE
  equivalence  2 ranks x batch B = 1 rank x batch 2B = 1 rank x batch B x accum 2 (the same global batch): the loss
               trajectories agree within 1e-5 relative and the exported weights within 1e-5 (the key biases, whose
               true gradient is 0, within steps x lr: see tests/unit/trainer/test_gpt2_torch.py); a different global
               batch does not (control).
  resume       2 ranks, accumulation 2, shuffled windows, an epoch of 4.5 optimizer steps (the short last window and
               the reshuffle cross the checkpoints): a run killed (SIGKILL) at a random step and resumed from its last
               checkpoint ends bit-identical to a straight run (exported weights, loss file).
  resume-async the same with --async-checkpoint (save_state returns after a snapshot, a writer thread writes); the
               resumed run's --profile traces hold one "checkpoint_snapshot" and one "checkpoint_write" range per save
               on each rank (read back by check_trace.py's reader), each write starting after its snapshot began.
  preempt      SIGUSR1 on the last rank after step 7 (--signal-at): every rank saves there and exits with 75 (nothing
               exported); --resume ends bit-identical to a straight run; sync and async saves.
  profile      2 ranks, accumulation 2, checkpoints: --profile DIR prints rank 0's phase table once (a row per phase
               the trainer marks, checkpoint in 2 of the 6 steps), writes DIR/profile_<rank>.json and
               DIR/profile_merged.json, read back by tests/unit/profile/check_trace.py's independent reader (well
               nested, every step recorded, the phases under each step add up to it within 5 %); the loss file equals
               the same run's without --profile, which prints no table and writes no file.
"""
import os
import random
import struct
import subprocess
import sys
import tempfile
import json

ROOT = os.environ.get("ACCEL_SOURCE_ROOT") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
MPIRUN = os.path.join(ROOT, "tests", "mpi", "mpirun.sh")
MODEL = ["--layers", 2, "--heads", 2, "--channels", 32, "--vocab", 64, "--block-size", 16, "--seq", 16]
failures = checks = 0


def check(ok, what):
    global failures, checks
    checks += 1
    failures += 0 if ok else 1
    print(("ok: " if ok else "FAIL: ") + what, flush=True)


def run(exe, np_, args, expect_ok=True, timeout=240):
    cmd = ["bash", MPIRUN, str(np_), exe, "--print-every", "0"] + [str(a) for a in MODEL + args]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        print("command timed out: %s\n%s%s" % (" ".join(cmd), e.stdout or "", e.stderr or ""))
        sys.exit(1)
    if expect_ok and r.returncode != 0:
        print("command failed (%d): %s\n%s%s" % (r.returncode, " ".join(cmd), r.stdout, r.stderr))
        sys.exit(1)
    return r


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        out[name] = struct.unpack("<%df" % ((end - b) // 4), data[8 + n + b:8 + n + end])
    return out, data


def losses(path):
    return [float(line.split()[1]) for line in open(path)]


def weight_diff(a, b, C=32):
    """max |a - b| over every tensor but the key biases, and over the key biases."""
    dw = dk = 0.0
    for k in a:
        for i, (x, y) in enumerate(zip(a[k], b[k])):
            if k.endswith("attn.c_attn.bias") and C <= i < 2 * C:
                dk = max(dk, abs(x - y))
            else:
                dw = max(dw, abs(x - y))
    return dw, dk


def equivalence(exe, tmp):
    shard = os.path.join(tmp, "tiny.bin")
    subprocess.run([exe, "--gen-shard", shard, "20000", "64"], check=True, capture_output=True)
    steps, lr = 12, 2e-3
    common = ["--data", shard, "--steps", steps, "--lr", lr, "--warmup", 2, "--weight-decay", 0.1, "--seed", 7]
    res = {}
    for name, np_, b, a in (("1x8", 1, 8, 1), ("2x4", 2, 4, 1), ("1x4_accum2", 1, 4, 2)):
        lf, ex = os.path.join(tmp, name + ".loss"), os.path.join(tmp, name + ".export")
        logs = os.path.join(tmp, name + ".logs")
        r = run(exe, np_, common + ["--batch", b, "--accum", a, "--loss-file", lf, "--export", ex, "--log-dir", logs])
        check("%d process(es) x batch %d" % (np_, b) in r.stdout, "%s ran on %d process(es)" % (name, np_))
        recs = [json.loads(x) for x in open(os.path.join(logs, "gpt2_cpu", "metrics.jsonl"))]
        tb = [f for f in os.listdir(os.path.join(logs, "gpt2_cpu")) if "tfevents" in f]
        logged = [x["train/loss"] for x in recs if "train/loss" in x]
        check(len(logged) == steps and all(abs(a - b) <= 1e-8 * b for a, b in zip(logged, losses(lf))) and len(tb) == 1,
              "%s: metrics.jsonl has the %d losses of the loss file (written once), and one TensorBoard file" %
              (name, steps))
        res[name] = (losses(lf), read_safetensors(os.path.join(ex, "model.safetensors"))[0])
    ref_l, ref_w = res["1x8"]
    for name in ("2x4", "1x4_accum2"):
        l, w = res[name]
        d = max(abs(x - y) / abs(x) for x, y in zip(ref_l, l)) if len(l) == len(ref_l) == steps else float("inf")
        check(d <= 1e-5, "%s: loss trajectory equals 1x8's over %d steps (max relative difference %.2e)" % (name, steps, d))
        dw, dk = weight_diff(ref_w, w)
        check(dw <= 1e-5, "%s: exported weights equal 1x8's (max abs difference %.2e)" % (name, dw))
        check(dk <= steps * lr, "%s: key biases (true gradient 0) within steps x lr (%.2e)" % (name, dk))
    lf = os.path.join(tmp, "ctrl.loss")
    run(exe, 2, common + ["--batch", 2, "--loss-file", lf])
    d = max(abs(x - y) / abs(x) for x, y in zip(ref_l, losses(lf)))
    check(d > 1e-3, "control: 2 x batch 2 (global batch 4) differs from 1x8 (max relative difference %.2e)" % d)


def small_run(exe, tmp, steps):
    """The resume and preempt runs' options: 2 ranks, accumulation 2, shuffled windows of a small shard (72 windows
    of 17 tokens: 9 global batches of 2 x 4 windows per epoch = 4 optimizer steps + a short last window)."""
    shard = os.path.join(tmp, "small.bin")
    subprocess.run([exe, "--gen-shard", shard, str(72 * 16 + 1), "64"], check=True, capture_output=True)
    return ["--data", shard, "--steps", steps, "--batch", 4, "--accum", 2, "--shuffle", "--lr", 3e-3, "--warmup", 3,
            "--weight-decay", 0.1, "--seed", 11]


def resume(exe, tmp, async_ckpt=False):
    extra = ["--async-checkpoint"] if async_ckpt else []
    steps = 16
    common = small_run(exe, tmp, steps)
    straight_lf, straight_ex = os.path.join(tmp, "straight.loss"), os.path.join(tmp, "straight.export")
    run(exe, 2, common + ["--loss-file", straight_lf, "--export", straight_ex])
    seed = int(os.environ.get("GPT2_KILL_SEED", random.randrange(1 << 30)))
    kill_at = random.Random(seed).randint(4, steps - 2)
    print("kill at step %d (GPT2_KILL_SEED=%d reproduces it)" % (kill_at, seed), flush=True)
    ck, lf, ex = os.path.join(tmp, "ck"), os.path.join(tmp, "resumed.loss"), os.path.join(tmp, "resumed.export")
    r = run(exe, 2, common + extra + ["--checkpoint-dir", ck, "--checkpoint-every", 3, "--kill-at", kill_at,
                                      "--loss-file", lf, "--export", ex], expect_ok=False)
    check(r.returncode != 0 and not os.path.exists(ex), "the run was killed at step %d (exit %d), nothing exported" %
          (kill_at, r.returncode))
    prof = os.path.join(tmp, "prof")
    r = run(exe, 2, common + extra + ["--checkpoint-dir", ck, "--checkpoint-every", 3, "--resume", "--loss-file", lf,
                                      "--export", ex] + (["--profile", prof] if async_ckpt else []))
    resumed_at = kill_at // 3 * 3
    if async_ckpt:
        sys.path.insert(0, os.path.join(ROOT, "tests", "unit", "profile"))
        import check_trace
        saves = len([k for k in range(resumed_at + 1, steps + 1) if k % 3 == 0 or k == steps])
        for rk in (0, 1):
            try:
                info = check_trace.validate(check_trace.load(os.path.join(prof, "profile_%d.json" % rk)))
                rep = [e for e in info[rk]["x"] if e["cat"] == "reported"]
                sn = [e for e in rep if e["name"] == "checkpoint_snapshot"]
                wr = [e for e in rep if e["name"] == "checkpoint_write"]
                check(len(sn) == saves and len(wr) == saves and len(rep) == 2 * saves and
                      all(w["ts"] >= s["ts"] for s, w in zip(sn, wr)),
                      "rank %d: %d snapshot and %d write ranges for %d async saves, each write after its snapshot "
                      "began" % (rk, len(sn), len(wr), saves))
            except (check_trace.TraceError, ValueError, OSError, KeyError) as e:
                check(False, "profile_%d.json: %s" % (rk, e))
    check("resumed at step %d" % resumed_at in r.stdout, "resumed from the step-%d checkpoint" % resumed_at)
    a, abytes = read_safetensors(os.path.join(straight_ex, "model.safetensors"))
    b, bbytes = read_safetensors(os.path.join(ex, "model.safetensors"))
    check(abytes == bbytes, "straight vs killed + resumed: bit-identical exported weights (%d tensors)" % len(a))
    sl, rl = open(straight_lf).read().splitlines(), open(lf).read().splitlines()
    check(sl == rl and len(sl) == steps, "the loss file (%d lines of step loss lr) is identical" % len(rl))
    # control: the comparison sees a one-step difference
    ctrl = os.path.join(tmp, "ctrl.export")
    run(exe, 2, common[:3] + [steps - 1] + common[4:] + ["--export", ctrl])
    c, cbytes = read_safetensors(os.path.join(ctrl, "model.safetensors"))
    check(cbytes != abytes and weight_diff(a, c)[0] > 1e-5, "control: 15 instead of 16 steps gives other weights")


def preempt(exe, tmp):
    # Preemption (issue 29): the last rank raises SIGUSR1 after step 7 (--signal-at; not a --checkpoint-every 3 step):
    # every rank stops there, saves, exits with ACCEL_EXIT_REQUEUE (75) without exporting; --resume continues to
    # weights and a loss file bit-identical to a straight run. Sync and async saves.
    steps = 12
    common = small_run(exe, tmp, steps)
    straight_lf, straight_ex = os.path.join(tmp, "straight.loss"), os.path.join(tmp, "straight.export")
    run(exe, 2, common + ["--loss-file", straight_lf, "--export", straight_ex])
    a, abytes = read_safetensors(os.path.join(straight_ex, "model.safetensors"))
    for extra in ([], ["--async-checkpoint"]):
        tag = "async" if extra else "sync"
        ck, lf, ex = (os.path.join(tmp, tag + x) for x in (".ck", ".loss", ".export"))
        cka = ["--checkpoint-dir", ck, "--checkpoint-every", 3] + extra
        r = run(exe, 2, common + cka + ["--signal-at", 7, "--loss-file", lf, "--export", ex], expect_ok=False)
        check(r.returncode == 75 and not os.path.exists(ex), "%s: preempted after step 7: exit %d (want 75), nothing "
              "exported" % (tag, r.returncode))
        check(r.stdout.count("preempted (signal 10) after step 7: checkpoint saved") == 1, "%s: says so once" % tag)
        check(len(open(lf).read().splitlines()) == 7, "%s: the loss file holds steps 1..7" % tag)
        r = run(exe, 2, common + cka + ["--resume", "--loss-file", lf, "--export", ex])
        check("resumed at step 7" in r.stdout, "%s: resumed at step 7" % tag)
        b, bbytes = read_safetensors(os.path.join(ex, "model.safetensors"))
        check(abytes == bbytes, "%s: straight vs preempted + resumed: bit-identical exported weights" % tag)
        check(open(straight_lf).read() == open(lf).read(), "%s: the loss files are identical" % tag)


def profile(exe, tmp):
    sys.path.insert(0, os.path.join(ROOT, "tests", "unit", "profile"))
    import check_trace
    shard = os.path.join(tmp, "tiny.bin")
    subprocess.run([exe, "--gen-shard", shard, "20000", "64"], check=True, capture_output=True)
    steps = 6
    common = ["--data", shard, "--steps", steps, "--batch", 4, "--accum", 2, "--lr", 1e-3, "--seed", 5]
    prof, lf = os.path.join(tmp, "prof"), os.path.join(tmp, "prof.loss")
    r = run(exe, 2, common + ["--profile", prof, "--loss-file", lf, "--checkpoint-dir", os.path.join(tmp, "ck"),
                              "--checkpoint-every", 3])
    print(r.stdout)
    check(r.stdout.count("accel profile (rank 0): %d recorded steps" % steps) == 1,
          "rank 0 prints one phase table of %d steps" % steps)
    names = ("step", "data", "forward", "backward", "grad_sync", "optimizer", "logging", "checkpoint", "(other)")
    rows = {ln.split()[0]: ln.split() for ln in r.stdout.splitlines() if ln.split() and ln.split()[0] in names}
    check(all(n in rows for n in names), "a table row for each of %s (got %s)" % (names, sorted(rows)))
    check(rows.get("checkpoint", [""])[-1] == "2", "checkpoint ran in 2 of the steps: %s" % rows.get("checkpoint"))
    check(rows.get("forward", [""])[-1] == str(steps), "forward ran in every step: %s" % rows.get("forward"))
    for rk in (0, 1):
        try:
            info = check_trace.validate(check_trace.load(os.path.join(prof, "profile_%d.json" % rk)), cover=True)
            check(info[rk]["steps"] == list(range(steps)), "rank %d: steps %s recorded" % (rk, info[rk]["steps"]))
            fw = [e for e in info[rk]["x"] if e["name"] == "forward"]
            gs = [e for e in info[rk]["x"] if e["name"] == "grad_sync"]
            check(len(fw) == 2 * steps and len(gs) == steps,
                  "rank %d: %d forward ranges (2 micro-batches x %d steps), %d grad_sync (one per step: no sync on "
                  "the accumulating micro-batch)" % (rk, len(fw), steps, len(gs)))
        except (check_trace.TraceError, ValueError, OSError, KeyError) as e:
            check(False, "profile_%d.json: %s" % (rk, e))
    try:
        merged = check_trace.validate(check_trace.load(os.path.join(prof, "profile_merged.json")))
        check(sorted(merged) == [0, 1], "profile_merged.json holds ranks %s" % sorted(merged))
    except (check_trace.TraceError, ValueError, OSError) as e:
        check(False, "profile_merged.json: %s" % e)
    lf2 = os.path.join(tmp, "plain.loss")
    r = run(exe, 2, common + ["--loss-file", lf2])
    check("accel profile" not in r.stdout and len(os.listdir(tmp)) == 5, "without --profile: no table, no file")
    check(open(lf).read() == open(lf2).read(), "the loss file is the same with and without --profile")


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("equivalence", "resume", "resume-async", "profile", "preempt"):
        print(__doc__)
        return 2
    with tempfile.TemporaryDirectory(prefix="gpt2-mpi-") as tmp:
        if sys.argv[1] == "resume-async":
            resume(os.path.abspath(sys.argv[2]), tmp, async_ckpt=True)
        else:
            globals()[sys.argv[1]](os.path.abspath(sys.argv[2]), tmp)
    print("gpt2-%s: %d passed, %d failed" % (sys.argv[1], checks - failures, failures))
    return 1 if failures or not checks else 0


if __name__ == "__main__":
    sys.exit(main())
