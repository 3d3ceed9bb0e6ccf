#!/usr/bin/env python3
"""GPT-2 124M training throughput (T=1024, accumulation 1, one GPU): examples/gpt2/train_gpt2.cu, with cuDNN's flash
attention (--attention cudnn, when the build has it) and with its own attention kernels (--attention own), against
its PyTorch peer (gpt2_torch_peer.py: bf16 autocast, fused AdamW, SDPA, clip 1.0; eager and torch.compile), and
accel's own share of the step: the same trainer with accel's calls in the step replaced by no-ops (--bench-noop-accel:
no loader or stager after the first batch, no accumulation bookkeeping, reducer, clip_grad_norm, scheduler
bookkeeping, loss all-reduce, logging or per-step synchronization). Everything is measured in this run, one after the
other on the same GPU; the PyTorch peer is one process (one torch start-up) that runs every batch size eager, then
compiled (torch.compile with static shapes compiles once per batch size, in its warmup). Prints JSON lines (DESIGN.md
→ Testing); MFU = (6N + 6·L·C·T) · tokens/s ÷ the device's bf16 dense peak. When each run ended goes to stderr
("bench_gpt2: [12.3 s] ...", the peer's warmups with their compile times too), to show where the time goes.

Lines per batch size (params.attention names the attention the trainer's banner says ran), in the order they are
printed (as soon as their runs are done, so a time limit still leaves the earlier ones):
  gpt2_accel_overhead  the default attention, accel's calls vs no-ops   goal 0.99
  gpt2_train           cudnn vs PyTorch eager   goal 1.0
  gpt2_train           own   vs PyTorch eager   goal 1.0      (no cuDNN: PyTorch eager's level)
  gpt2_train           cudnn vs torch.compile   goal 1.05     (the issue's target, llm.c with cuDNN's level)
  gpt2_train           own   vs torch.compile   goal null
(the cudnn lines only when the build has cuDNN's attention).

usage: bench_gpt2.py TRAIN_GPT2_EXE [--batches 16,32] [--steps 20]     (exit 77 without a CUDA device)
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

PEER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpt2_torch_peer.py")
PEER_NAME = " (bf16 autocast, fused AdamW, SDPA, clip 1.0)"
T0 = time.monotonic()


def note(what):
    sys.stderr.write("bench_gpt2: [%.1f s] %s\n" % (time.monotonic() - T0, what))
    sys.stderr.flush()


def trainer(exe, shard, B, steps, attention, noop=False):
    """the trainer's summary line, or None when this build has no cuDNN and attention is cudnn"""
    cmd = [exe, "--data", shard, "--batch", str(B), "--seq", "1024", "--steps", str(steps), "--print-every", "5",
           "--lr", "6e-4", "--warmup", "5", "--weight-decay", "0.1", "--attention", attention] + \
        (["--bench-noop-accel"] if noop else [])
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if r.returncode == 77:
        print(r.stdout.strip())
        sys.exit(77)
    sys.stderr.write(r.stdout + r.stderr)
    if r.returncode != 0 and attention == "cudnn" and "no cuDNN" in r.stderr:
        return None
    if r.returncode != 0:
        raise RuntimeError("train_gpt2 --attention %s failed (%d)" % (attention, r.returncode))
    ran = re.search(r"\| attention: (\w+)", r.stdout)
    if not ran or ran.group(1) != attention:  # the lines name the attention that ran
        raise RuntimeError("train_gpt2 --attention %s: its banner says %s" % (attention, ran and ran.group(0)))
    note("train_gpt2 B=%d --attention %s%s done" % (B, attention, " --bench-noop-accel" if noop else ""))
    for line in r.stdout.splitlines():
        if line.startswith("summary: "):
            return json.loads(line[len("summary: "):])
    raise RuntimeError("train_gpt2 printed no summary line")


def peer(batches):
    """the peer's results (eager for every batch size, then torch.compile), each as soon as the peer prints it"""
    cmd = [sys.executable, PEER, "--batch", ",".join(str(b) for b in batches), "--seq", "1024",
           "--modes", "eager,compile"]
    rest = ""  # the peer's last other stdout line (its reason to skip)
    with tempfile.TemporaryFile(mode="w+") as err:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
        limit = threading.Timer(1800, p.kill)
        limit.start()
        try:
            for line in p.stdout:
                if line.startswith("{"):
                    res = json.loads(line)
                    note("PyTorch %s B=%d done" % ("torch.compile" if res["compile"] else "eager", res["batch"]))
                    yield res
                else:
                    rest = line
            p.wait()
        finally:
            limit.cancel()
            if p.poll() is None:
                p.kill()
                p.wait()
            err.seek(0)
            sys.stderr.write(err.read()[-4000:])
        if p.returncode != 0:
            sys.stderr.write("peer unavailable (%d)%s\n" % (p.returncode, ": " + rest.strip() if rest else ""))


def emit(line):
    print(json.dumps(line), flush=True)


def train_line(B, attention, acc, ref, name, goal):
    params = {"model": "gpt2-124M", "B": B, "T": 1024, "accum": 1, "attention": attention}
    return {"bench": "gpt2_train", "params": params, "unit": "tokens/s", "accel": round(acc["tokens_per_s"]),
            "reference": round(ref["tokens_per_s"]) if ref else None,
            "reference_name": name + PEER_NAME + (", torch %s" % ref["torch"] if ref else ", unavailable"),
            "ratio": round(acc["tokens_per_s"] / ref["tokens_per_s"], 3) if ref else None, "goal": goal,
            "mfu": round(acc["mfu"], 4), "step_ms": round(acc["step_ms"], 2)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("exe")
    ap.add_argument("--batches", default="16,32")
    ap.add_argument("--steps", type=int, default=20)
    a = ap.parse_args()
    batches = [int(x) for x in a.batches.split(",")]
    with tempfile.TemporaryDirectory(prefix="bench-gpt2-") as tmp:
        shard = os.path.join(tmp, "tokens.bin")
        ntok = (a.steps + 2) * max(batches) * 1024 + 1
        r = subprocess.run([a.exe, "--gen-shard", shard, str(ntok), "50257"], capture_output=True, text=True)
        if r.returncode != 0:
            print(r.stdout + r.stderr)
            return 1
        runs = {}
        for B in batches:  # the trainers first (each a process of its own), then the peers; lines as they are ready
            cudnn = trainer(a.exe, shard, B, a.steps, "cudnn")
            default = "cudnn" if cudnn else "own"
            x = runs[B] = {"cudnn": cudnn, "own": trainer(a.exe, shard, B, a.steps, "own"), "default": default,
                           "noop": trainer(a.exe, shard, B, a.steps, default, noop=True)}
            acc, noop = x[default], x["noop"]
            emit({"bench": "gpt2_accel_overhead",
                  "params": {"model": "gpt2-124M", "B": B, "T": 1024, "accum": 1, "attention": default},
                  "unit": "tokens/s", "accel": round(acc["tokens_per_s"]), "reference": round(noop["tokens_per_s"]),
                  "reference_name": "the same trainer with accel's calls replaced by no-ops",
                  "ratio": round(acc["tokens_per_s"] / noop["tokens_per_s"], 4), "goal": 0.99,
                  "accel_share_of_step": round(1.0 - acc["tokens_per_s"] / noop["tokens_per_s"], 4)})
        seen = set()
        for ref in peer(batches):
            B, compiled = ref["batch"], ref["compile"]
            if B not in runs or (B, compiled) in seen:
                continue
            seen.add((B, compiled))
            name, goals = ("torch.compile", (1.05, None)) if compiled else ("PyTorch eager", (1.0, 1.0))
            if runs[B]["cudnn"]:
                emit(train_line(B, "cudnn", runs[B]["cudnn"], ref, name, goals[0]))
            emit(train_line(B, "own", runs[B]["own"], ref, name, goals[1]))
        for B in batches:  # a peer that could not run: the lines still come, with reference null
            for compiled, name, goals in ((0, "PyTorch eager", (1.0, 1.0)), (1, "torch.compile", (1.05, None))):
                if (B, compiled) not in seen:
                    if runs[B]["cudnn"]:
                        emit(train_line(B, "cudnn", runs[B]["cudnn"], None, name, goals[0]))
                    emit(train_line(B, "own", runs[B]["own"], None, name, goals[1]))
    note("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
