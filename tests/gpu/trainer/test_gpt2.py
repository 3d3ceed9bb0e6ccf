#!/usr/bin/env python3
"""GPU tests of examples/gpt2/train_gpt2.cu (suite trainer, kind gpu). Exits 77 (skip) when the trainer reports no
CUDA device.

usage: test_gpt2.py CHECK TRAIN_GPT2_EXE GPT2_CPU_EXE [cudnn|no-cudnn]
  (cudnn: the build has the cuDNN attention, and vs-cpu and resume run it too: --attention cudnn and --attention own)

  vs-cpu    the CUDA trainer (bf16 weights and activations, fp32 master weights and gradients) against the float32
            reference gpt2_cpu.c on a tiny model (L2 H4 C64 V64, T32 B4, the same initialization and windows),
            20 AdamW steps, with each attention the build has. bf16 tolerances: the first loss within 1% relative,
            every step's loss within 3% relative, and the first step's gradient of every tensor within 5% (relative L2
            error). bf16 rounds to 2^-9 = 0.2% per operation; the loss averages 128 positions, so a correct kernel set
            lands well inside these (a wrong kernel, e.g. a missing bias or scale, is off by far more; the layer
            test, test_gpt2_layers.cu, names the layer). In a build without cuDNN, --attention cudnn must fail
            with a message saying so.
  learns    60 steps with accumulation 2 on a generated shard (a Markov chain over 64 tokens, best loss ln 2): the
            loss starts near ln 64 and falls toward ln 2; the exported model loads back: model.safetensors has the
            Hugging Face names and shapes, and gpt2_cpu --init and train_gpt2 --init both start from it with a loss
            near the trained one.
  resume    stochastic rounding, accumulation 2, shuffled windows: a run killed at a random step and resumed from its
            last checkpoint ends bit-identical to an uninterrupted run (exported weights and loss file), with each
            attention the build has.
  preempt   SIGUSR1 after step 7 (--signal-at): saved there (sync and async), exit 75, nothing exported; --resume ends
            bit-identical to an uninterrupted run (exported weights and loss file).
  profile   --profile DIR (accumulation 2, a checkpoint): the phase table has the "device ms" column (CUDA events on
            the trainer's stream) and a row per phase; DIR/profile_0.json passes tests/unit/profile/check_trace.py's
            reader with a device event (tid 1) for every host forward/backward range; the loss file is bit-identical
            to the same run's without --profile (the events do not perturb the math), which prints no table.
  zero3     --zero 3 (ZeRO-3 / FSDP FULL_SHARD: units = embeddings + final norm and each block, bf16 gathers of the
            shards' bf16 copy, fp32 gradient buffers reduce-scattered into fp32 shards, AdamW over the shards) on one
            GPU, accumulation 2, shuffled windows, --clip 0, with each attention the build has: the loss file and the
            exported weights equal --zero 0's bit for bit, and so does --zero 3 --offload (AdamW on the host). Why
            bit for bit: one GPU runs the same kernels in the same order on the same bf16 weights (nearest-rounded
            from the same fp32 master) and sums gradients into fp32 in the same order; the one thing the layouts
            change is where each tensor starts, and the cuBLASLt plans key on operand alignment (matmul.cuh,
            gemm_alignment), so the model is chosen (C 128, L 2) where every GEMM operand's alignment is the same in
            the flat, the sharded and the per-unit-buffer layouts (checked here first). With clipping on (--clip 1)
            the sharded norm is the norm of 4 + 12 L per-unit tensor norms instead of 16 per-tensor ones, so the clip
            coefficient may differ in its last float bit: then every step's loss must agree within 1e-3 relative and
            every exported tensor within 1e-2 relative L2 error (a missed unit gradient or a stale gather is off by
            far more; bit-equality is reported). A run killed at a random step and resumed from its --zero 3 (sharded:
            fsdp_state files, no model.safetensors) checkpoint ends bit-identical to the straight --zero 3 run.
            --zero 3 --sr is refused, saying why; control: another seed gives other weights. Prefetch (FSDP's rule:
            the root held through the pass, two blocks rotate): --zero 3 --offload stages every unit into a device
            gather buffer, and its zero3 line must show every block's gather after the first micro-batch started
            while the unit before it computed, at most 3 buffers live, the peak = the root's + two blocks' bytes.
"""
import json
import math
import os
import random
import re
import struct
import subprocess
import sys
import tempfile

failures = checks = 0
ATTENTION = ["own"]  # plus "cudnn" when the build has it (main)
TINY = ["--layers", "2", "--heads", "4", "--channels", "64", "--vocab", "64", "--block-size", "32", "--seq", "32"]


def check(ok, what):
    global failures, checks
    checks += 1
    failures += 0 if ok else 1
    print(("ok: " if ok else "FAIL: ") + what, flush=True)


def run(cmd, expect_ok=True, timeout=300):
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout)
    if r.returncode == 77:
        print(r.stdout + r.stderr)
        sys.exit(77)
    if expect_ok and r.returncode != 0:
        print("command failed (%d): %s\n%s%s" % (r.returncode, " ".join(map(str, cmd)), r.stdout, r.stderr))
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
        out[name] = (e["shape"], struct.unpack("<%df" % ((end - b) // 4), data[8 + n + b:8 + n + end]))
    return out, data


def losses(path):
    return [float(line.split()[1]) for line in open(path)]


def vs_cpu(gpu, cpu, tmp):
    shard = os.path.join(tmp, "tiny.bin")
    run([gpu, "--gen-shard", shard, 100000, 64])
    common = TINY + ["--data", shard, "--batch", 4, "--steps", 20, "--lr", 1e-3, "--warmup", 2, "--weight-decay", 0.1,
                     "--seed", 5, "--print-every", 0]
    res = {}
    for name, exe, extra in [("cuda-" + a, gpu, ["--attention", a]) for a in ATTENTION] + [("cpu", cpu, [])]:
        lf, gf = os.path.join(tmp, name + ".loss"), os.path.join(tmp, name + ".grads")
        run([exe] + common + extra + ["--loss-file", lf, "--dump-grads", gf])
        res[name] = (losses(lf), read_safetensors(gf)[0])
    lc, gc = res["cpu"]
    for a in ATTENTION:
        lg, gg = res["cuda-" + a]
        d0 = abs(lg[0] - lc[0]) / lc[0]
        check(d0 <= 0.01, "attention %s: first loss: CUDA %.5f vs CPU %.5f (relative difference %.2e <= 1e-2)" %
              (a, lg[0], lc[0], d0))
        dmax = max(abs(x - y) / y for x, y in zip(lg, lc)) if len(lg) == len(lc) == 20 else float("inf")
        check(dmax <= 0.03, "attention %s: 20-step loss trajectory within 3%% (max relative difference %.2e): CUDA %s "
              "vs CPU %s" % (a, dmax, ["%.4f" % x for x in lg[::4]], ["%.4f" % x for x in lc[::4]]))
        worst, worst_name = 0.0, ""
        for k, (shape, ref) in gc.items():
            got = gg[k][1]
            nr = math.sqrt(sum(x * x for x in ref))
            if nr == 0.0:
                continue
            err = math.sqrt(sum((x - y) ** 2 for x, y in zip(got, ref))) / nr
            if err > worst:
                worst, worst_name = err, k
        check(worst <= 0.05, "attention %s: first-step gradients: every tensor within 5%% relative L2 error (worst "
              "%.2e, %s)" % (a, worst, worst_name))
    if "cudnn" not in ATTENTION:
        r = run([gpu] + common + ["--attention", "cudnn"], expect_ok=False)
        check(r.returncode != 0 and "no cuDNN" in r.stderr, "a build without cuDNN refuses --attention cudnn, saying "
              "so (exit %d: %s)" % (r.returncode, r.stderr.strip().splitlines()[-1:] if r.stderr.strip() else ""))


def learns(gpu, cpu, tmp):
    shard = os.path.join(tmp, "markov.bin")
    run([gpu, "--gen-shard", shard, 200000, 64])
    lf, ex = os.path.join(tmp, "loss.txt"), os.path.join(tmp, "export")
    log = os.path.join(tmp, "logs")
    r = run([gpu] + TINY + ["--data", shard, "--batch", 8, "--accum", 2, "--steps", 60, "--lr", 3e-3, "--warmup", 5,
                            "--print-every", 10, "--loss-file", lf, "--export", ex, "--log-dir", log])
    print(r.stdout)
    ls = losses(lf)
    first, last = sum(ls[:3]) / 3, sum(ls[-5:]) / 5
    check(len(ls) == 60, "60 optimizer steps logged (%d)" % len(ls))
    check(abs(first - math.log(64)) < 0.75, "initial loss near ln 64 = %.2f (%.3f)" % (math.log(64), first))
    check(last < 0.6 * first and last > math.log(2) - 0.1, "the loss falls toward ln 2 = 0.69 (%.3f -> %.3f)" %
          (first, last))
    check("tok/s" in r.stdout and "MFU" in r.stdout, "the progress line shows tokens/s and MFU")
    recs = [json.loads(x) for x in open(os.path.join(log, "train_gpt2", "metrics.jsonl"))]
    check(len([x for x in recs if "train/loss" in x]) == 60, "metrics.jsonl has 60 train/loss records")
    model, _ = read_safetensors(os.path.join(ex, "model.safetensors"))
    check(model["wte.weight"][0] == [64, 64] and model["h.1.mlp.c_fc.weight"][0] == [64, 256] and
          len(model) == 4 + 12 * 2, "export: Hugging Face names and Conv1D shapes (%d tensors)" % len(model))
    init = os.path.join(ex, "model.safetensors")
    back = {}
    for name, exe in (("cpu", cpu), ("cuda", gpu)):
        blf = os.path.join(tmp, "back_%s.loss" % name)
        run([exe, "--init", init, "--data", shard, "--seq", 32, "--batch", 8, "--steps", 1, "--lr", 0,
             "--loss-file", blf, "--print-every", 0])
        back[name] = losses(blf)[0]
    check(abs(back["cpu"] - last) < 0.25 and abs(back["cuda"] - back["cpu"]) / back["cpu"] < 0.02,
          "the export loads back (--init): gpt2_cpu loss %.4f, train_gpt2 loss %.4f, trained %.4f" %
          (back["cpu"], back["cuda"], last))


def resume(gpu, cpu, tmp):
    for a in ATTENTION:
        resume_with(gpu, os.path.join(tmp, a), a)


def resume_with(gpu, tmp, attention):
    os.makedirs(tmp)
    shard = os.path.join(tmp, "small.bin")
    run([gpu, "--gen-shard", shard, 9 * 4 * 32 + 1, 64])  # 36 windows: 9 micro-batches of 4 per epoch
    steps = 16
    common = TINY + ["--data", shard, "--batch", 4, "--accum", 2, "--steps", steps, "--shuffle", "--sr", "--lr", 3e-3,
                     "--warmup", 3, "--weight-decay", 0.1, "--seed", 9, "--print-every", 0, "--attention", attention]
    slf, sex = os.path.join(tmp, "straight.loss"), os.path.join(tmp, "straight")
    run([gpu] + common + ["--loss-file", slf, "--export", sex])
    seed = int(os.environ.get("GPT2_KILL_SEED", random.randrange(1 << 30)))
    kill_at = random.Random(seed).randint(4, steps - 2)
    print("attention %s: kill at step %d (GPT2_KILL_SEED=%d reproduces it)" % (attention, kill_at, seed), flush=True)
    ck, lf, ex = os.path.join(tmp, "ck"), os.path.join(tmp, "resumed.loss"), os.path.join(tmp, "resumed")
    r = run([gpu] + common + ["--checkpoint-dir", ck, "--checkpoint-every", 3, "--kill-at", kill_at, "--loss-file", lf,
                              "--export", ex], expect_ok=False)
    check(r.returncode != 0 and not os.path.exists(ex), "attention %s: killed at step %d (exit %d)" %
          (attention, kill_at, r.returncode))
    r = run([gpu] + common + ["--checkpoint-dir", ck, "--checkpoint-every", 3, "--resume", "--loss-file", lf,
                              "--export", ex])
    check("resumed at step %d" % (kill_at // 3 * 3) in r.stdout, "attention %s: resumed from the step-%d checkpoint" %
          (attention, kill_at // 3 * 3))
    _, a = read_safetensors(os.path.join(sex, "model.safetensors"))
    _, b = read_safetensors(os.path.join(ex, "model.safetensors"))
    check(a == b, "attention %s: straight vs killed + resumed: bit-identical exported weights" % attention)
    check(open(slf).read() == open(lf).read(), "attention %s: identical loss files" % attention)
    # control: the comparison sees a different run (another seed)
    cex = os.path.join(tmp, "ctrl")
    run([gpu] + [x if x != 9 else 10 for x in common] + ["--export", cex])
    _, c = read_safetensors(os.path.join(cex, "model.safetensors"))
    check(c != a, "attention %s: control: another seed gives other weights" % attention)


def profile(gpu, cpu, tmp):
    root = os.environ.get("ACCEL_SOURCE_ROOT") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
    sys.path.insert(0, os.path.join(root, "tests", "unit", "profile"))
    import check_trace
    shard = os.path.join(tmp, "tiny.bin")
    run([gpu, "--gen-shard", shard, 100000, 64])
    steps = 6
    common = TINY + ["--data", shard, "--batch", 4, "--accum", 2, "--steps", steps, "--lr", 1e-3, "--print-every", 0]
    prof, lf = os.path.join(tmp, "prof"), os.path.join(tmp, "prof.loss")
    r = run([gpu] + common + ["--profile", prof, "--loss-file", lf, "--checkpoint-dir", os.path.join(tmp, "ck"),
                              "--checkpoint-every", 3])
    print(r.stdout)
    out = r.stdout
    check(out.count("accel profile (rank 0): %d recorded steps" % steps) == 1, "one phase table of %d steps" % steps)
    check("device ms" in out, "the table has the device column (CUDA events)")
    names = ("step", "data", "forward", "backward", "optimizer", "logging", "checkpoint", "(other)")
    rows = {ln.split()[0]: ln.split() for ln in out.splitlines() if ln.split() and ln.split()[0] in names}
    check(all(n in rows for n in names), "a row for each of %s (got %s)" % (names, sorted(rows)))
    try:
        info = check_trace.validate(check_trace.load(os.path.join(prof, "profile_0.json")))
        check(info[0]["steps"] == list(range(steps)), "steps %s recorded" % info[0]["steps"])
        for name in ("forward", "backward"):
            host = [e for e in info[0]["x"] if e["name"] == name and e["tid"] == 0]
            dev = [e for e in info[0]["x"] if e["name"] == name and e["tid"] == 1]
            check(len(host) == len(dev) == 2 * steps, "%s: %d host and %d device ranges (2 micro-batches x %d steps)" %
                  (name, len(host), len(dev), steps))
    except (check_trace.TraceError, ValueError, OSError, KeyError) as e:
        check(False, "profile_0.json: %s" % e)
    lf2 = os.path.join(tmp, "plain.loss")
    r = run([gpu] + common + ["--loss-file", lf2])
    check("accel profile" not in r.stdout, "without --profile: no table")
    check(open(lf).read() == open(lf2).read(), "the loss file is bit-identical with and without --profile")


def preempt(gpu, cpu, tmp):
    # Preemption (issue 29): SIGUSR1 raised after step 7 (--signal-at; not a --checkpoint-every 3 step): the trainer
    # waits for the step's loss, saves there (sync, then async: the pinned snapshot's write waited for), exits with
    # ACCEL_EXIT_REQUEUE (75) without exporting; --resume ends bit-identical to an uninterrupted run.
    shard = os.path.join(tmp, "small.bin")
    run([gpu, "--gen-shard", shard, 9 * 4 * 32 + 1, 64])
    common = TINY + ["--data", shard, "--batch", 4, "--accum", 2, "--steps", 12, "--shuffle", "--sr", "--lr", 3e-3,
                     "--warmup", 3, "--weight-decay", 0.1, "--seed", 9, "--print-every", 0]
    slf, sex = os.path.join(tmp, "straight.loss"), os.path.join(tmp, "straight")
    run([gpu] + common + ["--loss-file", slf, "--export", sex])
    _, a = read_safetensors(os.path.join(sex, "model.safetensors"))
    for extra in ([], ["--async-checkpoint"]):
        tag = "async" if extra else "sync"
        ck, lf, ex = (os.path.join(tmp, tag + x) for x in (".ck", ".loss", ".export"))
        cka = ["--checkpoint-dir", ck, "--checkpoint-every", 3] + extra
        r = run([gpu] + common + cka + ["--signal-at", 7, "--loss-file", lf, "--export", ex], expect_ok=False)
        check(r.returncode == 75 and not os.path.exists(ex) and
              "preempted (signal 10) after step 7: checkpoint saved" in r.stdout,
              "%s: preempted after step 7, exit %d (want 75), nothing exported" % (tag, r.returncode))
        check(len(open(lf).read().splitlines()) == 7, "%s: the loss file holds steps 1..7" % tag)
        r = run([gpu] + common + cka + ["--resume", "--loss-file", lf, "--export", ex])
        check("resumed at step 7" in r.stdout, "%s: resumed at step 7" % tag)
        _, b = read_safetensors(os.path.join(ex, "model.safetensors"))
        check(a == b, "%s: straight vs preempted + resumed: bit-identical exported weights" % tag)
        check(open(slf).read() == open(lf).read(), "%s: identical loss files" % tag)


ZERO3_MODEL = ["--layers", "2", "--heads", "4", "--channels", "128", "--vocab", "64", "--block-size", "32",
               "--seq", "32"]


def gemm_alignments_agree(C, L, Vp, maxT):
    """Whether every GEMM operand (wte, qkvw, attprojw, fcw, fcprojw of each layer: bf16 weights and their fp32
    gradients) starts at the same alignment (power of two up to 256, matmul.cuh's gemm_alignment) in --zero 0's flat
    buffers and in --zero 3's layouts at one GPU: the shard (units back to back, the bf16 copy the unit views point
    into) and a unit's own buffer (the gradient buffers; --offload's gather buffers). Allocations are cudaMalloc's
    (256-byte aligned)."""
    def al(b):
        a = 256
        while a > 1 and b % a:
            a //= 2
        return a
    names = ["ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb", "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb"]
    per = dict(ln1w=C, ln1b=C, qkvw=3 * C * C, qkvb=3 * C, attprojw=C * C, attprojb=C, ln2w=C, ln2b=C, fcw=4 * C * C,
               fcb=4 * C, fcprojw=4 * C * C, fcprojb=C)
    flat, shard, unit = {("wte", 0): 0}, {("wte", 0): 0}, {("wte", 0): 0}
    o = Vp * C + maxT * C
    for n in names:
        for layer in range(L):
            flat[n, layer] = o + layer * per[n]
        o += L * per[n]
    e0, eb = Vp * C + maxT * C + 2 * C, sum(per.values())
    for layer in range(L):
        u = 0
        for n in names:
            shard[n, layer], unit[n, layer] = e0 + layer * eb + u, u
            u += per[n]
    keys = [k for k in flat if k[0] in ("wte", "qkvw", "attprojw", "fcw", "fcprojw")]
    w = [[al(lay[k] * 2) for k in keys] for lay in (flat, shard, unit)]
    g = [[al(lay[k] * 4) for k in keys] for lay in (flat, unit)]
    return w[0] == w[1] == w[2] and g[0] == g[1]


def zero3(gpu, cpu, tmp):
    check(gemm_alignments_agree(128, 2, 128, 32), "the model's GEMM operands have the same alignments in the flat, "
          "sharded and per-unit layouts (the precondition of bit-equality)")
    check(not gemm_alignments_agree(64, 2, 128, 32), "control: the alignment check sees a layout where they differ "
          "(C 64, L 2)")
    for a in ATTENTION:
        zero3_with(gpu, os.path.join(tmp, a), a)


def zero3_prefetch(stdout, attention, micro):
    """--zero 3 --offload on one GPU stages every unit into a device gather buffer: the zero3 line (gpt2.h, from
    accel_zero's events) must show every block's staging after the first micro-batch (the recording pass) started
    while the unit before it computed — the root (embeddings + final norm) held through the pass, two blocks rotating
    — and the device gather buffers' peak exactly the root's + two blocks' bf16 buffers (computed here from
    ZERO3_MODEL's layout: C 128, V 64 padded to 128, T 32, L 2)."""
    L, C, vp, T = 2, 128, 128, 32
    m = re.search(r"zero3: (\d+) block gathers, (\d+) prefetched while the unit before computed; gather buffers "
                  r"per rank: at most (\d+) live, peak (\d+) bytes \(estimate (\d+)", stdout)
    check(m is not None, "attention %s: --zero 3 --offload prints the zero3 line" % attention)
    if not m:
        return
    gathers, ahead, live, peak, est = (int(x) for x in m.groups())
    check(gathers == 2 * L * micro and ahead == gathers - 2 * L,
          "attention %s: --zero 3 --offload: %d of %d block gathers prefetched while the unit before computed (all "
          "but the first micro-batch's %d)" % (attention, ahead, gathers, 2 * L))
    root, block = (vp * C + T * C + 2 * C) * 2, (12 * C * C + 13 * C) * 2
    check(live == 3 and peak == root + 2 * block == est,
          "attention %s: --zero 3 --offload: at most %d gather buffers live, peak %d bytes == root %d + 2 x block %d "
          "(estimate %d)" % (attention, live, peak, root, block, est))


def zero3_with(gpu, tmp, attention):
    os.makedirs(tmp)
    shard = os.path.join(tmp, "small.bin")
    run([gpu, "--gen-shard", shard, 9 * 4 * 32 + 1, 64])
    steps = 12
    common = ZERO3_MODEL + ["--data", shard, "--batch", 4, "--accum", 2, "--steps", steps, "--shuffle", "--lr", 3e-3,
                            "--warmup", 3, "--weight-decay", 0.1, "--seed", 9, "--print-every", 0, "--attention",
                            attention]
    out = {}
    for tag, extra in (("z0", ["--zero", 0, "--clip", 0]), ("z3", ["--zero", 3, "--clip", 0]),
                       ("z3off", ["--zero", 3, "--offload", "--clip", 0]), ("z0clip", ["--zero", 0, "--clip", 1]),
                       ("z3clip", ["--zero", 3, "--clip", 1])):
        lf, ex = os.path.join(tmp, tag + ".loss"), os.path.join(tmp, tag)
        r = run([gpu] + common + extra + ["--loss-file", lf, "--export", ex])
        if tag == "z3":
            check("ZeRO-3" in r.stdout, "attention %s: the banner names ZeRO-3" % attention)
        if tag == "z3off":
            zero3_prefetch(r.stdout, attention, steps * 2)
        out[tag] = (open(lf).read(), read_safetensors(os.path.join(ex, "model.safetensors"))[0])
    z0 = out["z0"]
    check(len(z0[0].splitlines()) == steps, "attention %s: %d steps logged" % (attention, steps))
    for tag, what in (("z3", "--zero 3"), ("z3off", "--zero 3 --offload")):
        check(out[tag][0] == z0[0], "attention %s: %s vs --zero 0: identical loss files" % (attention, what))
        check(out[tag][1] == z0[1], "attention %s: %s vs --zero 0: bit-identical exported weights" % (attention, what))
    la = [float(x.split()[1]) for x in out["z0clip"][0].splitlines()]
    lb = [float(x.split()[1]) for x in out["z3clip"][0].splitlines()]
    dl = max(abs(x - y) / abs(x) for x, y in zip(la, lb)) if len(la) == len(lb) == steps else float("inf")
    check(dl <= 1e-3, "attention %s: --clip 1: --zero 3's losses within 1e-3 relative of --zero 0's (max %.2e)" %
          (attention, dl))
    worst, worst_name = 0.0, ""
    for k, (_, ref) in out["z0clip"][1].items():
        got = out["z3clip"][1][k][1]
        nr = math.sqrt(sum(x * x for x in ref))
        err = math.sqrt(sum((x - y) ** 2 for x, y in zip(got, ref))) / (nr if nr else 1.0)
        if err > worst:
            worst, worst_name = err, k
    check(worst <= 1e-2, "attention %s: --clip 1: every exported tensor within 1e-2 relative L2 error (worst %.2e, %s;"
          " bit-identical: %s)" % (attention, worst, worst_name, out["z0clip"] == out["z3clip"]))
    # resume from a --zero 3 checkpoint (sharded)
    seed = int(os.environ.get("GPT2_KILL_SEED", random.randrange(1 << 30)))
    kill_at = random.Random(seed).randint(4, steps - 2)
    print("attention %s: --zero 3: kill at step %d (GPT2_KILL_SEED=%d reproduces it)" % (attention, kill_at, seed),
          flush=True)
    z3 = common + ["--zero", 3, "--clip", 0]
    ck, lf, ex = os.path.join(tmp, "ck"), os.path.join(tmp, "resumed.loss"), os.path.join(tmp, "resumed")
    r = run([gpu] + z3 + ["--checkpoint-dir", ck, "--checkpoint-every", 3, "--kill-at", kill_at, "--loss-file", lf,
                          "--export", ex], expect_ok=False)
    check(r.returncode != 0 and not os.path.exists(ex), "attention %s: --zero 3 killed at step %d (exit %d)" %
          (attention, kill_at, r.returncode))
    files = [f for _, _, fs in os.walk(ck) for f in fs]
    check(any(f.startswith("fsdp_state") for f in files) and "model.safetensors" not in files,
          "attention %s: the checkpoint is sharded (fsdp_state files, no model.safetensors): %s" %
          (attention, sorted(set(files))))
    r = run([gpu] + z3 + ["--checkpoint-dir", ck, "--checkpoint-every", 3, "--resume", "--loss-file", lf,
                          "--export", ex])
    check("resumed at step %d" % (kill_at // 3 * 3) in r.stdout, "attention %s: resumed from the step-%d checkpoint" %
          (attention, kill_at // 3 * 3))
    check(open(lf).read() == out["z3"][0], "attention %s: --zero 3 killed + resumed: identical loss file" % attention)
    check(read_safetensors(os.path.join(ex, "model.safetensors"))[0] == out["z3"][1],
          "attention %s: --zero 3 killed + resumed: bit-identical exported weights" % attention)
    # control: the comparisons see a different run
    cex = os.path.join(tmp, "ctrl")
    run([gpu] + [x if x != 9 else 10 for x in z3] + ["--export", cex])
    check(read_safetensors(os.path.join(cex, "model.safetensors"))[0] != z0[1],
          "attention %s: control: another seed gives other weights" % attention)
    r = run([gpu] + z3 + ["--sr"], expect_ok=False)
    check(r.returncode != 0 and "--sr" in r.stderr, "attention %s: --zero 3 --sr is refused, saying why (%s)" %
          (attention, r.stderr.strip().splitlines()[-1:] if r.stderr.strip() else ""))


def main():
    if len(sys.argv) not in (4, 5) or sys.argv[1] not in ("vs-cpu", "learns", "resume", "profile", "preempt",
                                                          "zero3") or \
            sys.argv[4:] not in ([], ["cudnn"], ["no-cudnn"]):
        print(__doc__)
        return 2
    if sys.argv[4:] == ["cudnn"]:
        ATTENTION.append("cudnn")
    with tempfile.TemporaryDirectory(prefix="gpt2-gpu-") as tmp:
        {"vs-cpu": vs_cpu, "learns": learns, "resume": resume, "profile": profile, "preempt": preempt,
         "zero3": zero3}[sys.argv[1]](
            os.path.abspath(sys.argv[2]), os.path.abspath(sys.argv[3]), tmp)
    print("gpt2-%s: %d passed, %d failed" % (sys.argv[1], checks - failures, failures))
    return 1 if failures or not checks else 0


if __name__ == "__main__":
    sys.exit(main())
