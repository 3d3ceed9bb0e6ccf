#!/usr/bin/env python3
"""The test and benchmark hooks of examples/gpt2 (gpt2.h's gpt2_hooks) and the lines other programs read, on gpt2_cpu
with one process (tests/mpi/trainer covers two ranks; tests/gpu/trainer and bench/trainer read the same lines from
train_gpt2, which prints them through the same gpt2.h code):
  - every run ends with one `summary: {...}` line (bench/trainer/bench_gpt2*.py): the steps after the third, tokens/s
    that agree with step_ms (B x T x accum / step_ms), noop_accel 0; with --peak-tflops its mfu is
    gpt2_flops_per_token x tokens/s / peak, recomputed here from the model's shapes (6N + 6LCT per token);
  - the progress line (`step N/S | loss | lr | norm | ms/step | tok/s | MFU x%`, MFU n/a without a peak) every
    --print-every steps and at the last; the loss file has one line per step;
  - --bench-noop-accel: the banner says so, the summary has noop_accel 1 over the steps after the third, and nothing
    of the bookkeeping runs (no loss-file line, no checkpoint, no progress line);
  - --kill-at N: the process dies by SIGKILL after step N, with N loss lines and step N's checkpoint written, and
    --resume continues from it to the same final loss file as an uninterrupted run; a kill between checkpoints
    leaves N loss lines too, and the resume from the last checkpoint ends at the same loss file.
usage: test_gpt2_hooks.py GPT2_CPU_EXE
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile

failures = checks = 0
L, H, C, V, T, B = 2, 2, 32, 64, 16, 4
MODEL = ["--layers", L, "--heads", H, "--channels", C, "--vocab", V, "--seq", T, "--batch", B]


def check(ok, what):
    global failures, checks
    checks += 1
    failures += 0 if ok else 1
    print(("ok: " if ok else "FAIL: ") + what, flush=True)


def run(exe, args):
    return subprocess.run([str(x) for x in [exe] + args], capture_output=True, text=True, timeout=120)


def summary(out):
    lines = [ln for ln in out.splitlines() if ln.startswith("summary: ")]
    return json.loads(lines[0][len("summary: "):]) if len(lines) == 1 else None


def params(block):  # block: wpe rows (1024 unless --block-size)
    """gpt2.h's parameter count (padded vocabulary, as llm.c counts)."""
    Vp = (V + 127) // 128 * 128
    per_layer = 2 * C + (3 * C * C + 3 * C) + (C * C + C) + 2 * C + (4 * C * C + 4 * C) + (4 * C * C + C)
    return Vp * C + block * C + L * per_layer + 2 * C


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    exe = os.path.abspath(sys.argv[1])
    with tempfile.TemporaryDirectory(prefix="gpt2-hooks-") as tmp:
        shard = os.path.join(tmp, "tokens.bin")
        run(exe, ["--gen-shard", shard, 20000, V])
        lf = os.path.join(tmp, "loss.txt")
        steps, peak = 9, 0.5
        r = run(exe, MODEL + ["--data", shard, "--steps", steps, "--accum", 2, "--print-every", 4, "--loss-file", lf,
                              "--peak-tflops", peak])
        s = summary(r.stdout)
        check(r.returncode == 0 and s is not None and s["steps"] == steps - 3 and s["noop_accel"] == 0 and
              abs(s["tokens_per_s"] * s["step_ms"] / 1000.0 - B * T * 2) <= 1e-3 * B * T * 2,
              "summary line: %d timed steps, tokens/s x step_ms = B x T x accum (%s)%s" %
              (steps - 3, s, "" if r.returncode == 0 else "\n" + r.stdout + r.stderr))
        want_mfu = (6.0 * params(1024) + 6.0 * L * C * T) * s["tokens_per_s"] / (peak * 1e12) if s else -1
        check(s is not None and abs(s["mfu"] - want_mfu) <= 1e-4 + 1e-3 * want_mfu,
              "summary mfu = (6N + 6LCT) x tokens/s / peak: %s vs %.6f" % (s and s["mfu"], want_mfu))
        pat = re.compile(r"^step +(\d+)/%d \| loss \d+\.\d{6} \| lr [0-9.e+-]+ \| norm \d+\.\d{4} \| "
                         r"[0-9.]+ ms/step \| \d+ tok/s \| MFU [0-9.]+%%$" % steps)
        got = [int(m.group(1)) for m in map(pat.match, r.stdout.splitlines()) if m]
        check(got == [4, 8, 9], "progress lines at steps 4, 8 and the last, with tok/s and MFU: %s" % got)
        check(len(open(lf).read().splitlines()) == steps, "the loss file has one line per step")
        r = run(exe, MODEL + ["--data", shard, "--steps", 2, "--print-every", 1])
        check("| MFU n/a" in r.stdout and summary(r.stdout) is None,
              "without a peak: MFU n/a; under 4 steps: no summary line")

        # --bench-noop-accel
        lf2, ck = os.path.join(tmp, "noop.loss"), os.path.join(tmp, "noop_ck")
        r = run(exe, MODEL + ["--data", shard, "--steps", 7, "--accum", 2, "--print-every", 1, "--loss-file", lf2,
                              "--checkpoint-dir", ck, "--checkpoint-every", 1, "--bench-noop-accel"])
        s = summary(r.stdout)
        check(r.returncode == 0 and "BENCHMARK: accel's calls are no-ops" in r.stdout and s is not None and
              s["noop_accel"] == 1 and s["steps"] == 4 and
              abs(s["tokens_per_s"] * s["step_ms"] / 1e3 - B * T) < 1e-3 * B * T,
              "--bench-noop-accel: banner, summary over 4 steps of B x T tokens (no accumulation): %s" % s)
        check(open(lf2).read() == "" and not os.path.exists(os.path.join(ck, "checkpoints")) and
              not re.search(r"^step ", r.stdout, re.M), "--bench-noop-accel: no loss line, checkpoint or progress line")

        # --kill-at, then --resume
        common = MODEL + ["--data", shard, "--steps", 8, "--accum", 2, "--shuffle", "--lr", 3e-3, "--warmup", 2,
                          "--print-every", 0]
        straight = os.path.join(tmp, "straight.loss")
        run(exe, common + ["--loss-file", straight])
        ck, lf3 = os.path.join(tmp, "ck"), os.path.join(tmp, "killed.loss")
        r = run(exe, common + ["--loss-file", lf3, "--checkpoint-dir", ck, "--checkpoint-every", 5, "--kill-at", 5])
        cks = os.path.join(ck, "checkpoints")
        names = sorted(os.listdir(cks)) if os.path.isdir(cks) else []
        check(r.returncode == -signal.SIGKILL and len(open(lf3).read().splitlines()) == 5 and len(names) == 1,
              "--kill-at 5: SIGKILL (exit %d) after 5 loss lines and the step-5 checkpoint (%s)" %
              (r.returncode, names))
        r = run(exe, common + ["--loss-file", lf3, "--checkpoint-dir", ck, "--checkpoint-every", 5, "--resume"])
        check(r.returncode == 0 and "resumed at step 5" in r.stdout and open(lf3).read() == open(straight).read(),
              "--resume: resumed at step 5, the loss file equals the uninterrupted run's")
        # --kill-at between checkpoints: the loss lines up to the kill are written all the same (the trainers log a
        # step after the next one's backward, gpt2.h; a killed step logs at once), and the resume drops those after
        # the checkpoint
        ck, lf4 = os.path.join(tmp, "ck4"), os.path.join(tmp, "killed4.loss")
        r = run(exe, common + ["--loss-file", lf4, "--checkpoint-dir", ck, "--checkpoint-every", 3, "--kill-at", 4])
        first4 = open(straight).read().splitlines()[:4]
        check(r.returncode == -signal.SIGKILL and open(lf4).read().splitlines() == first4,
              "--kill-at 4, checkpoints every 3: SIGKILL (exit %d) after the uninterrupted run's first 4 loss lines" %
              r.returncode)
        r = run(exe, common + ["--loss-file", lf4, "--checkpoint-dir", ck, "--checkpoint-every", 3, "--resume"])
        check(r.returncode == 0 and "resumed at step 3" in r.stdout and open(lf4).read() == open(straight).read(),
              "--resume: resumed at step 3, the loss file equals the uninterrupted run's")
    print("gpt2-hooks: %d passed, %d failed" % (checks - failures, failures))
    return 1 if failures or not checks else 0


if __name__ == "__main__":
    sys.exit(main())
