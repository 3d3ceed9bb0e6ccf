#!/usr/bin/env python3
"""Multi-run checks of examples/train_digits.c (suite trainer): the modules composed in a real trainer.

usage: trainer_driver.py CHECK TRAIN_DIGITS_EXE [ACCEL_EXE]
  CHECK: equivalence | resume | resume-async | skip | accuracy | zero | comm-hook | launch (needs ACCEL_EXE: the
  trainer under `accel launch`) | preempt (SIGUSR1 on one rank: save, exit 75, --resume bit-identical)
  (resume-async: --async-checkpoint every 10 steps, killed after step 50, resumed: bit-identical to a straight run)
Runs the trainer through tests/mpi/mpirun.sh (ACCEL_SOURCE_ROOT), reads its --loss-file / --dump-weights outputs and
compares them. The data (data/digits.csv) is fetched with scripts/fetch-digits.sh when missing; if that is not
possible the test is skipped (exit 77) with the reason.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

ROOT = os.environ.get("ACCEL_SOURCE_ROOT") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
MPIRUN = os.path.join(ROOT, "tests", "mpi", "mpirun.sh")
DATA = os.path.join(ROOT, "data", "digits.csv")
failures = 0
checks = 0


def check(ok, what):
    global failures, checks
    checks += 1
    if not ok:
        failures += 1
        print("FAIL: " + what, flush=True)
    else:
        print("ok: " + what, flush=True)


def ensure_data():
    if os.path.exists(DATA):
        return
    r = subprocess.run(["bash", os.path.join(ROOT, "scripts", "fetch-digits.sh")], capture_output=True, text=True)
    if r.returncode != 0 or not os.path.exists(DATA):
        print("SKIP: data/digits.csv is missing and scripts/fetch-digits.sh failed:\n" + r.stdout + r.stderr)
        sys.exit(77)


def run(exe, np_, args, expect_ok=True, timeout=100):
    cmd = ["bash", MPIRUN, str(np_), exe, "--data", DATA, "--print-every", "0"] + [str(a) for a in args]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        print("command timed out: %s\n%s%s" % (" ".join(cmd), e.stdout or "", e.stderr or ""))
        sys.exit(1)
    if expect_ok and r.returncode != 0:
        print("command failed (%d): %s\n%s%s" % (r.returncode, " ".join(cmd), r.stdout, r.stderr))
        sys.exit(1)
    return r


def losses(path):
    rows = []
    with open(path) as f:
        for line in f:
            step, loss, lr, scale, skipped, sched = line.split()
            rows.append((int(step), float(loss), float(lr), float(scale), int(skipped), int(sched)))
    return rows


def weights(path):
    with open(path, "rb") as f:
        b = f.read()
    return struct.unpack("<%df" % (len(b) // 4), b), b


def max_rel(a, b):
    return max(abs(x - y) / max(abs(x), abs(y), 1e-3) for x, y in zip(a, b))


def equivalence(exe, tmp):
    # Global batch 4B = 60 with B = 15: the 1500 training samples are exactly 25 optimizer steps per epoch in every
    # configuration, so 60 steps cross two epoch boundaries (reshuffles) and every step sees the same 60 samples:
    # positions [60s, 60s+60) of the epoch's permutation (which depends on seed and epoch only). P processes with
    # batch b take the permutation's consecutive b-sized batches round-robin; accumulation takes A of a process's
    # batches. See the top of examples/train_digits.c.
    B, steps = 15, 60
    configs = [("1x4B", 1, 4 * B, 1, []), ("2x2B", 2, 2 * B, 1, ["--bucket-kb", 4]), ("4xB", 4, B, 1, []),
               ("1xB_accum4", 1, B, 4, [])]
    res = {}
    for name, np_, b, a, extra in configs:
        lf, wf = os.path.join(tmp, name + ".loss"), os.path.join(tmp, name + ".w")
        r = run(exe, np_, ["--steps", steps, "--batch", b, "--accum", a, "--seed", 7, "--loss-file", lf,
                           "--dump-weights", wf, "--lr", 0.05, "--clip", 1.0] + extra)
        check("%d process(es), batch %d x accum %d = global batch %d" % (np_, b, a, 4 * B) in r.stdout,
              "%s ran as %d process(es) x batch %d x accum %d" % (name, np_, b, a))
        res[name] = (losses(lf), weights(wf)[0])
    ref_l, ref_w = res["1x4B"]
    check(len(ref_l) == steps, "reference has %d loss rows" % steps)
    for name in res:
        if name == "1x4B":
            continue
        l, w = res[name]
        d = max_rel([r[1] for r in ref_l], [r[1] for r in l]) if len(l) == len(ref_l) else float("inf")
        lr_same = len(l) == len(ref_l) and all(abs(x[2] - y[2]) <= 1e-7 * max(1, abs(x[2])) for x, y in zip(ref_l, l))
        dw = max(abs(x - y) for x, y in zip(ref_w, w))
        check(d < 1e-5, "%s loss trajectory matches 1x4B over %d steps (max rel diff %.2e)" % (name, steps, d))
        check(lr_same, "%s LR per optimizer step matches 1x4B (scheduler steps P per step, length steps*P)" % name)
        check(dw < 1e-5, "%s final weights match 1x4B (max abs diff %.2e)" % (name, dw))
    # negative control: a different global batch (2 x B = 30) must NOT match — the comparison can fail
    lf = os.path.join(tmp, "ctrl.loss")
    run(exe, 2, ["--steps", steps, "--batch", B, "--accum", 1, "--seed", 7, "--loss-file", lf, "--lr", 0.05])
    d = max_rel([r[1] for r in ref_l], [r[1] for r in losses(lf)])
    check(d > 1e-2, "control (2 x B, global batch 2B) differs from 1x4B (max rel diff %.2e)" % d)


def resume_async(exe, tmp):
    # async checkpoints every 10 steps (the writer thread works while training goes on), killed after step 50's
    common = ["--steps", 100, "--batch", 16, "--accum", 2, "--precision", "fp16", "--seed", 3]
    straight = os.path.join(tmp, "straight.w")
    run(exe, 2, common + ["--dump-weights", straight, "--loss-file", os.path.join(tmp, "straight.loss")])
    ck = os.path.join(tmp, "ck")
    asy = ["--checkpoint-dir", ck, "--checkpoint-every", 10, "--async-checkpoint"]
    r = run(exe, 2, common + asy + ["--kill-at", 50], expect_ok=False)
    check(r.returncode != 0, "the async run was killed (exit %d) after its step-50 checkpoint" % r.returncode)
    resumed = os.path.join(tmp, "resumed.w")
    r = run(exe, 2, common + asy + ["--resume", "--dump-weights", resumed,
                                    "--loss-file", os.path.join(tmp, "resumed.loss")])
    check("resumed at step 50" in r.stdout, "resumed from the async step-50 checkpoint")
    check(weights(straight)[1] == weights(resumed)[1], "100 straight vs async 50 + kill + resume: bit-identical weights")
    ls, lr_ = losses(os.path.join(tmp, "straight.loss")), losses(os.path.join(tmp, "resumed.loss"))
    check(len(lr_) == 50 and all(a == b for a, b in zip(ls[50:], lr_)), "resumed rows equal the straight run's 51..100")


def resume(exe, tmp):
    # fp16 (scaler state), momentum, accumulation, shuffling; 23 optimizer steps per epoch, so the save at step 50
    # is mid-epoch 3.
    common = ["--steps", 100, "--batch", 16, "--accum", 2, "--precision", "fp16", "--seed", 3]
    straight = os.path.join(tmp, "straight.w")
    run(exe, 2, common + ["--dump-weights", straight, "--loss-file", os.path.join(tmp, "straight.loss")])
    ck = os.path.join(tmp, "ck")
    r = run(exe, 2, common + ["--checkpoint-dir", ck, "--checkpoint-every", 50, "--kill-at", 50,
                              "--dump-weights", os.path.join(tmp, "never.w")], expect_ok=False)
    check(r.returncode != 0, "the first half was killed (exit %d) after its step-50 checkpoint" % r.returncode)
    check(not os.path.exists(os.path.join(tmp, "never.w")), "the killed run wrote no final weights")
    ck1 = os.path.join(tmp, "ck_for_p1")  # the step-50 checkpoint, before the resumed run adds its final one
    shutil.copytree(ck, ck1)
    resumed = os.path.join(tmp, "resumed.w")
    run(exe, 2, common + ["--checkpoint-dir", ck, "--resume", "--dump-weights", resumed,
                          "--loss-file", os.path.join(tmp, "resumed.loss")])
    ws, bs = weights(straight)
    wr, br = weights(resumed)
    check(bs == br, "100 straight vs 50 + kill + resume 50 on 2 processes: bit-identical weights (%d floats)" % len(ws))
    ls, lr_ = losses(os.path.join(tmp, "straight.loss")), losses(os.path.join(tmp, "resumed.loss"))
    check(len(lr_) == 50 and lr_[0][0] == 51 and lr_[-1][0] == 100, "the resumed run did steps 51..100")
    check(all(a == b for a, b in zip(ls[50:], lr_)), "resumed loss/lr/scale rows equal the straight run's 51..100")
    # another world size: P=1 with batch 32 (same global batch 64), from the same P=2 checkpoint
    other = os.path.join(tmp, "resumed_p1.w")
    r = run(exe, 1, ["--steps", 100, "--batch", 32, "--accum", 2, "--precision", "fp16", "--seed", 3,
                     "--checkpoint-dir", ck1, "--resume", "--dump-weights", other,
                     "--loss-file", os.path.join(tmp, "resumed_p1.loss")])
    lp1 = losses(os.path.join(tmp, "resumed_p1.loss"))
    check("resumed at step 50" in r.stdout and len(lp1) == 50 and lp1[0][0] == 51,
          "the 1-process run resumed from the 2-process step-50 checkpoint (did steps 51..100)")
    check(all(abs(a[2] - b[2]) <= 1e-6 * max(1.0, a[2]) for a, b in zip(ls[50:], lp1)),
          "its LR continues the 2-process schedule (scheduler position rescaled from P=2 to P=1)")
    wo, _ = weights(other)
    d = max(abs(x - y) for x, y in zip(ws, wo))
    check(d < 5e-4, "resume on 1 process (batch 32) from the 2-process checkpoint matches (max abs diff %.2e)" % d)
    # negative control for that tolerance: 99 instead of 100 steps differs by much more
    ctrl = os.path.join(tmp, "ctrl99.w")
    run(exe, 2, ["--steps", 99] + common[2:] + ["--dump-weights", ctrl])
    dc = max(abs(x - y) for x, y in zip(ws, weights(ctrl)[0]))
    check(dc > 10 * max(d, 1e-6), "control: 99 vs 100 steps differs far more (%.2e)" % dc)


def preempt(exe, tmp):
    # Preemption (issue 29): SIGUSR1 raised by the last rank inside step 37 (--signal-at; not a checkpoint step of
    # --checkpoint-every 10): every rank stops after step 37, saves there and exits with ACCEL_EXIT_REQUEUE (75);
    # --resume continues bit-identically. 3 ranks; then 2 ranks with --async-checkpoint (the save waited for).
    for np_, extra in ((3, []), (2, ["--async-checkpoint"])):
        common = ["--steps", 80, "--batch", 8, "--accum", 2, "--precision", "fp16", "--seed", 5]
        tag = "np%d%s" % (np_, " async" if extra else "")
        d = os.path.join(tmp, "p%d%s" % (np_, "a" if extra else ""))
        os.makedirs(d)
        straight = os.path.join(d, "straight.w")
        run(exe, np_, common + ["--dump-weights", straight, "--loss-file", os.path.join(d, "straight.loss")])
        ck, got, lf = os.path.join(d, "ck"), os.path.join(d, "resumed.w"), os.path.join(d, "resumed.loss")
        cka = ["--checkpoint-dir", ck, "--checkpoint-every", 10] + extra
        r = run(exe, np_, common + cka + ["--signal-at", 37, "--dump-weights", got, "--loss-file", lf],
                expect_ok=False)
        check(r.returncode == 75, "%s: the preempted run exits with ACCEL_EXIT_REQUEUE 75 (got %d): %s" %
              (tag, r.returncode, r.stdout[-300:] + r.stderr[-300:]))
        check("preempted (signal 10) after step 37: checkpoint saved" in r.stdout,
              "%s: it says it was preempted after step 37 (SIGUSR1)" % tag)
        check(not os.path.exists(got), "%s: the preempted run wrote no final weights" % tag)
        ckpts = sorted(os.listdir(os.path.join(ck, "checkpoints")))
        check(ckpts[-1:] == ["checkpoint_3"], "%s: 4 saves (steps 10, 20, 30, 37; the newest kept): %s" % (tag, ckpts))
        rows = losses(lf)
        check(len(rows) == 37 and rows[-1][0] == 37, "%s: the preempted run's loss file ends at step 37" % tag)
        r = run(exe, np_, common + cka + ["--resume", "--dump-weights", got, "--loss-file", lf])
        check("resumed at step 37 " in r.stdout, "%s: resumed at step 37" % tag)
        check(weights(straight)[1] == weights(got)[1], "%s: 80 straight vs 37 + preempt + resume: bit-identical "
              "weights" % tag)
        check(losses(os.path.join(d, "straight.loss")) == losses(lf), "%s: loss/lr/scale rows 1..80 equal" % tag)
    # no signal: the same preemptible run is never stopped (exit 0, 80 steps)
    d = os.path.join(tmp, "none")
    r = run(exe, 2, ["--steps", 80, "--batch", 8, "--seed", 5, "--checkpoint-dir", d, "--checkpoint-every", 40,
                     "--loss-file", os.path.join(tmp, "none.loss")])
    check(r.returncode == 0 and "preempted" not in r.stdout and len(losses(os.path.join(tmp, "none.loss"))) == 80,
          "unsignalled preemptible run: 80 steps, never stopped")


def skip(exe, tmp):
    lf = os.path.join(tmp, "skip.loss")
    ck = os.path.join(tmp, "ck")
    r = run(exe, 2, ["--steps", 300, "--batch", 16, "--precision", "fp16", "--init-scale", 2 ** 24,
                     "--loss-file", lf, "--seed", 5, "--checkpoint-dir", ck])
    rows = losses(lf)
    nskip = 0
    while nskip < len(rows) and rows[nskip][4] == 1:
        nskip += 1
    check(nskip >= 2, "fp16 at init scale 2^24: the first %d steps are skipped" % nskip)
    check(all(rows[i][3] == 2.0 ** (24 - i) for i in range(nskip + 1)),
          "the scale halves on every skipped step (2^24 -> 2^%d)" % (24 - nskip))
    check(all(rows[i][5] == 0 for i in range(nskip)), "the scheduler does not advance on skipped steps")
    check(all(rows[i][2] == rows[0][2] for i in range(nskip + 1)), "the LR stays at its initial value until a step is taken")
    taken = [x for x in rows if x[4] == 0]
    check(all(taken[i][5] == 2 * (i + 1) for i in range(len(taken))),
          "every taken step advances the scheduler by num_processes = 2 (%d taken)" % len(taken))
    check(sum(x[4] for x in rows[nskip:]) <= 2, "after backing off, (almost) no more overflows")
    try:  # the Accelerator's counters: accel_state_save bytes (accel.h), i64 optimizer/scheduler steps at 32 and 40
        raw = open(os.path.join(ck, "checkpoints", "checkpoint_0", "random_states_0.bin"), "rb").read()
        st = dict(zip(("optimizer_steps", "scheduler_steps"), struct.unpack_from("<qq", raw, 32)))
    except (OSError, struct.error) as e:
        st = {"error": str(e)}
    check(st.get("optimizer_steps") == len(taken) and st.get("scheduler_steps") == 2 * len(taken),
          "the final checkpoint counts %d optimizer steps and %d scheduler steps: %s" % (len(taken), 2 * len(taken), st))
    first = sum(x[1] for x in rows[nskip:nskip + 10]) / 10
    last = sum(x[1] for x in rows[-10:]) / 10
    check(last < 0.5 * first, "training converges after the skips (loss %.3f -> %.3f)" % (first, last))
    acc = [l for l in r.stdout.splitlines() if l.startswith("test accuracy: ")]
    check(len(acc) == 1 and float(acc[0][15:-1]) >= 90.0, "fp16 test accuracy >= 90%%: %s" % (acc[0] if acc else "none"))


def accuracy(exe, tmp):
    for prec in ("no", "bf16"):
        logdir = os.path.join(tmp, "runs_" + prec)
        r = run(exe, 2, ["--precision", prec, "--log-dir", logdir])
        lines = r.stdout.strip().splitlines()
        last = lines[-1] if lines else ""
        ok = last.startswith("test accuracy: ") and last.endswith("%") and len(last.split(".")[-1]) == 3
        check(ok, "%s: the last line reads 'test accuracy: NN.NN%%' (%r)" % (prec, last))
        check(ok and float(last[15:-1]) >= 95.0, "%s: 2-process test accuracy >= 95%% (%s)" % (prec, last))
        try:
            recs = [json.loads(l) for l in open(os.path.join(logdir, "train_digits", "metrics.jsonl"))]
        except OSError:
            recs = []
        check(any("eval/accuracy" in x for x in recs) and any("train/loss" in x for x in recs),
              "%s: metrics.jsonl has train/loss and eval/accuracy (%d records)" % (prec, len(recs)))


def final_metrics(r, loss_file):
    """(mean training loss over the last 100 steps, test accuracy in %) of a finished run"""
    rows = losses(loss_file)
    last = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
    check(last.startswith("test accuracy: ") and len(rows) >= 100, "a finished run: %r, %d loss rows" % (last, len(rows)))
    tail = [x[1] for x in rows[-100:]]
    return sum(tail) / max(len(tail), 1), float(last[15:-1]) if last.startswith("test accuracy: ") else -1.0


# The documented bound for "training with a comm hook converges like fp32" (issue 33): the same 500-step run on 2
# processes, with the FP16 / BF16 hook instead of fp32 all-reduces, ends with a mean training loss over its last 100
# steps within 2 % of the fp32 run's and a test accuracy within 1 percentage point (3 of the 297 test samples). The
# hook moves that loss by ~0.02 % here; another seed moves it by ~5 %, a 10 % smaller learning rate by ~10 %.
HOOK_LOSS_REL, HOOK_ACC_PP = 0.02, 1.0


def like_fp32(ref, got):
    return abs(got[0] - ref[0]) <= HOOK_LOSS_REL * ref[0] and abs(got[1] - ref[1]) <= HOOK_ACC_PP


def comm_hook(exe, tmp):
    def go(name, args):
        lf = os.path.join(tmp, name + ".loss")
        return final_metrics(run(exe, 2, args + ["--loss-file", lf]), lf), losses(lf)
    ref, ref_rows = go("fp32", [])
    check(ref[1] >= 95.0, "fp32 (no hook): test accuracy >= 95%% (%.2f%%), last-100 loss %.5f" % (ref[1], ref[0]))
    # fp16 over the flat buffer, bf16 through 4-KiB buckets (both of the reducer's paths)
    for hook, extra in (("fp16", []), ("bf16", ["--bucket-kb", 4])):
        got, rows = go(hook, ["--comm-hook", hook] + extra)
        check(any(a[1] != b[1] for a, b in zip(ref_rows, rows)),
              "--comm-hook %s changes the trajectory (the hook is in effect)" % hook)
        check(like_fp32(ref, got), "--comm-hook %s converges like fp32: last-100 loss %.5f vs %.5f (bound %g %%), "
              "accuracy %.2f%% vs %.2f%% (bound %g pp)" % (hook, got[0], ref[0], 100 * HOOK_LOSS_REL, got[1], ref[1],
                                                         HOOK_ACC_PP))
    # control: the same bound rejects a run that trains measurably differently (learning rate 0.045 instead of 0.05)
    ctl, _ = go("control", ["--lr", 0.045])
    check(not like_fp32(ref, ctl), "control: --lr 0.045 (last-100 loss %.5f vs %.5f) fails the bound" % (ctl[0], ref[0]))
    # bad values are refused with a message, before any training
    for args, msg in ((["--comm-hook", "fp8"], "--comm-hook must be none, fp16 or bf16"),
                      (["--comm-hook", "fp16", "--zero", 1], "does not combine with --zero")):
        r = run(exe, 2, args, expect_ok=False)
        check(r.returncode != 0 and msg in r.stderr, "%s refused: %r" % (" ".join(map(str, args)), msg))


def zero(exe, tmp):
    # --zero 1|2|3 on 3 processes (uneven shards: 4,810 parameters over 3 ranks), with accumulation: ZeRO-1 and ZeRO-2
    # step the same SGD over the same shards, so their weights agree (bit for bit where MPI's reduce sums in its
    # all-reduce's order), and both train to the example's accuracy. --zero 3: zero3() below.
    out = {}
    for z in (1, 2, 3):
        w = os.path.join(tmp, "zero%d.bin" % z)
        r = run(exe, 3, ["--zero", z, "--accum", 2, "--batch", 8, "--steps", 250, "--dump-weights", w], timeout=170)
        last = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
        check(last.startswith("test accuracy: ") and float(last[15:-1]) >= 95.0,
              "--zero %d: 3-process test accuracy >= 95%% (%s)" % (z, last))
        out[z] = weights(w)
    # Open MPI's reduce sums in its all-reduce's order here (bit-identical); MPICH's does not, and a last-bit
    # difference in one gradient grows through 250 momentum-SGD steps (measured with MPICH: 1 weight off by 8e-8
    # after 5 steps, 6e-6 after 50, 2.9e-5 over 2368 weights after 250), hence 1e-4, not the rounding of one step.
    d = max_rel(out[1][0], out[2][0])
    check(d <= 1e-4, "--zero 1 and --zero 2 weights agree (max rel %.3g, %s)" %
          (d, "bit-identical" if out[1][1] == out[2][1] else "not bit-identical"))
    # --zero 3 reduce-scatters with accel's rank-order sums (per unit: 4,160 and 650 parameters over 3 ranks)
    d = max_rel(out[1][0], out[3][0])
    check(d <= 1e-4, "--zero 1 and --zero 3 weights agree on 3 processes (max rel %.3g, %s)" %
          (d, "bit-identical" if out[1][1] == out[3][1] else "not bit-identical"))
    r = run(exe, 2, ["--zero", 4, "--steps", 1], expect_ok=False)
    check(r.returncode != 0 and "--zero takes 1, 2 or 3" in r.stderr, "--zero 4 is refused")
    r = run(exe, 2, ["--zero", 2, "--steps", 1, "--checkpoint-dir", os.path.join(tmp, "z2ck")], expect_ok=False)
    check(r.returncode != 0 and "does not combine with --checkpoint-dir" in r.stderr,
          "--zero 2 with --checkpoint-dir is refused")
    zero3(exe, tmp)


def zero3(exe, tmp):
    # --zero 3 (FSDP FULL_SHARD, one unit per layer: each layer's weights gathered for its forward and backward, its
    # gradients reduce-scattered) on 2 processes with accumulation (no_sync holds, the sync step reduces), in every
    # precision. Against --zero 1, which steps the same accel_optim SGD over replicated weights with all-reduced
    # gradients: bit-identical (a sum of two ranks' values is the same in any order, and the layer-by-layer pass does
    # digits_mlp.h's operations in its order). Against --zero 0 (DDP + the example's own SGD loop, without torch's
    # fma): close, not bit-identical — the optimizer's rounding, not the sharding (measured 1.4e-5 max rel after 60
    # fp32 steps).
    common = ["--steps", 60, "--batch", 8, "--accum", 2, "--seed", 5]
    for prec in ("no", "bf16", "fp16"):
        w = {}
        for z in (0, 1, 3):
            if z == 0 and prec != "no":
                continue
            f = os.path.join(tmp, "z3_%s_%d.bin" % (prec, z))
            run(exe, 2, common + ["--precision", prec, "--zero", z, "--dump-weights", f], timeout=170)
            w[z] = weights(f)
        check(w[3][1] == w[1][1], "--zero 3 == --zero 1 bit for bit (%s, 2 processes, accum 2, 60 steps)" % prec)
        if prec == "no":
            d = max_rel(w[0][0], w[3][0])
            check(d <= 1e-4, "--zero 3 vs --zero 0 (DDP, the example's SGD without fma): max rel %.3g <= 1e-4" % d)
    # killed after step 25 (checkpoints every 10: the sharded fsdp_state_<rank>.bin) and resumed == a straight run
    common = ["--zero", 3, "--steps", 40, "--batch", 8, "--accum", 2, "--precision", "fp16", "--seed", 3]
    straight = os.path.join(tmp, "z3_straight.w")
    r = run(exe, 2, common + ["--dump-weights", straight])
    last = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
    ck = os.path.join(tmp, "z3ck")
    r = run(exe, 2, common + ["--checkpoint-dir", ck, "--checkpoint-every", 10, "--kill-at", 25], expect_ok=False)
    check(r.returncode != 0, "--zero 3 --kill-at 25 ended the run")
    cdir = os.path.join(ck, "checkpoints", "checkpoint_1")
    names = sorted(os.listdir(cdir)) if os.path.isdir(cdir) else []
    check("fsdp_state_0.bin" in names and "fsdp_state_1.bin" in names and "model.safetensors" not in names,
          "--zero 3 checkpoints are sharded: one fsdp_state per rank, no whole model (%s)" % names)
    resumed = os.path.join(tmp, "z3_resumed.w")
    r = run(exe, 2, common + ["--checkpoint-dir", ck, "--checkpoint-every", 10, "--resume", "--dump-weights", resumed])
    check("resumed at step 20" in r.stdout, "--zero 3 resumed at step 20")
    check(weights(resumed)[1] == weights(straight)[1], "--zero 3 killed at 25 and resumed == straight (bit-identical)")
    check(r.stdout.strip().splitlines()[-1] == last, "resumed test accuracy equals the straight run's (%s)" % last)
    # the same with --async-checkpoint (the sharded state snapshotted, written by the writer thread)
    ck = os.path.join(tmp, "z3ck_async")
    asy = ["--checkpoint-dir", ck, "--checkpoint-every", 10, "--async-checkpoint"]
    run(exe, 2, common + asy + ["--kill-at", 25], expect_ok=False)
    resumed = os.path.join(tmp, "z3_resumed_async.w")
    r = run(exe, 2, common + asy + ["--resume", "--dump-weights", resumed])
    check("resumed at step 20" in r.stdout and weights(resumed)[1] == weights(straight)[1],
          "--zero 3 --async-checkpoint killed at 25 and resumed == straight (bit-identical)")
    # the sharded checkpoint re-partitions: saved by 2 processes (batch 12), resumed on 3 (batch 8, the same global
    # batch 48 and samples); the gradient sums associate differently over 3 ranks, so close, not bit-identical
    # (measured 4.5e-6 max rel after the 20 resumed fp32 steps)
    common = ["--zero", 3, "--steps", 40, "--accum", 2, "--seed", 3]
    straight = os.path.join(tmp, "z3_straight2.w")
    run(exe, 2, common + ["--batch", 12, "--dump-weights", straight])
    ck = os.path.join(tmp, "z3ck2")
    run(exe, 2, common + ["--batch", 12, "--checkpoint-dir", ck, "--checkpoint-every", 10, "--kill-at", 25],
        expect_ok=False)
    resumed = os.path.join(tmp, "z3_resumed3.w")
    r = run(exe, 3, common + ["--batch", 8, "--checkpoint-dir", ck, "--resume", "--dump-weights", resumed])
    d = max_rel(weights(straight)[0], weights(resumed)[0])
    check("resumed at step 20" in r.stdout and d <= 1e-4,
          "--zero 3 saved on 2 processes, resumed on 3: weights within 1e-4 max rel of the straight run (%.3g)" % d)


def launch(exe, tmp):
    """The trainer under `accel launch`: the launcher's settings reach it (issue 30 item 11)."""
    accel = os.path.abspath(sys.argv[3])
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELERATE_")}
    env["HF_HOME"] = os.path.join(tmp, "hf")  # no default config file of the user's
    common = ["--data", DATA, "--print-every", "0", "--steps", 30, "--batch", 16, "--seed", 3]

    def go(cmd, name):
        w = os.path.join(tmp, name + ".w")
        r = subprocess.run([str(a) for a in cmd + ["--dump-weights", w]], capture_output=True, text=True, env=env,
                           timeout=120)
        if r.returncode != 0:
            print("command failed (%d): %s\n%s%s" % (r.returncode, " ".join(map(str, cmd)), r.stdout, r.stderr))
            sys.exit(1)
        return weights(w)[1]
    direct_bf16 = go([exe] + common + ["--precision", "bf16"], "direct_bf16")
    direct_no = go([exe] + common, "direct_no")
    launched = go([accel, "launch", "-n", 1, "--mixed-precision", "bf16", "--", exe] + common, "launched_bf16")
    check(direct_bf16 != direct_no, "control: bf16 and no give different weights")
    check(launched == direct_bf16, "accel launch --mixed-precision bf16 == --precision bf16 (bit-identical)")
    launched = go([accel, "launch", "-n", 1, "--mixed-precision", "bf16", "--", exe] + common + ["--precision", "no"],
                  "launched_override")
    check(launched == direct_no, "the program's own --precision no wins over the launcher's bf16 (as Accelerate)")
    # --cpu with 2 processes runs mpirun (accelerate launch --multi_cpu's rule): the same weights as mpirun itself
    ref = os.path.join(tmp, "mpirun2.w")
    run(exe, 2, common[4:] + ["--precision", "bf16", "--dump-weights", ref])
    launched = go([accel, "launch", "--cpu", "-n", 2, "--mixed-precision", "bf16", "--", exe] + common, "cpu2")
    check(launched == weights(ref)[1], "accel launch --cpu -n 2 == mpirun -np 2 (bit-identical)")


def main():
    checks_ = ("equivalence", "resume", "resume-async", "skip", "accuracy", "zero", "comm-hook", "launch", "preempt")
    if len(sys.argv) != 3 + (sys.argv[1:2] == ["launch"]) or sys.argv[1] not in checks_:
        print(__doc__)
        return 2
    ensure_data()
    with tempfile.TemporaryDirectory(prefix="trainer-") as tmp:
        globals()[sys.argv[1].replace("-", "_")](os.path.abspath(sys.argv[2]), tmp)
    print("trainer-%s: %d passed, %d failed" % (sys.argv[1], checks - failures, failures))
    return 1 if failures or not checks else 0


if __name__ == "__main__":
    sys.exit(main())
