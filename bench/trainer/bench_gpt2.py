#!/usr/bin/env python3
"""GPT-2 124M training throughput (T=1024, accumulation 1, one GPU): examples/gpt2/train_gpt2.cu, with cuDNN's flash
attention (--attention cudnn, when the build has it) and with its own attention kernels (--attention own), against
its PyTorch peer (gpt2_torch_peer.py: bf16 autocast, fused AdamW, SDPA, clip 1.0; eager and torch.compile), and
accel's own share of the step: the same trainer with accel's calls in the step replaced by no-ops (--bench-noop-accel:
no loader or stager after the first batch, no accumulation bookkeeping, reducer, clip_grad_norm, scheduler
bookkeeping, loss all-reduce, logging or per-step synchronization). Everything is measured in this run, one after the
other on the same GPU; each PyTorch mode runs every batch size in one process (torch.compile compiles once per shape).
Prints JSON lines (DESIGN.md → Testing); MFU = (6N + 6·L·C·T) · tokens/s ÷ the device's bf16 dense peak.

Lines per batch size (params.attention names the trainer's attention), in the order they are printed (as soon as
their runs are done, so a time limit still leaves the earlier ones):
  gpt2_accel_overhead  the default attention, accel's calls vs no-ops   goal 0.99
  gpt2_train           cudnn vs PyTorch eager   goal 1.0
  gpt2_train           own   vs PyTorch eager   goal 1.0      (no cuDNN: PyTorch eager's level)
  gpt2_train           cudnn vs torch.compile   goal 1.05     (the issue's target, llm.c with cuDNN's level)
  gpt2_train           own   vs torch.compile   goal null     (only when the build has no cuDNN)

usage: bench_gpt2.py TRAIN_GPT2_EXE [--batches 16,32] [--steps 20]     (exit 77 without a CUDA device)
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

PEER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpt2_torch_peer.py")
PEER_NAME = " (bf16 autocast, fused AdamW, SDPA, clip 1.0)"


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
    for line in r.stdout.splitlines():
        if line.startswith("summary: "):
            return json.loads(line[len("summary: "):])
    raise RuntimeError("train_gpt2 printed no summary line")


def peer(batches, compiled):
    """{B: the peer's result} for every batch size it ran"""
    cmd = [sys.executable, PEER, "--batch", ",".join(str(b) for b in batches), "--seq", "1024"] + \
        (["--compile"] if compiled else [])
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    sys.stderr.write(r.stderr[-4000:])
    out = {}
    for line in r.stdout.splitlines():
        if line.startswith("{"):
            res = json.loads(line)
            out[res["batch"]] = res
    if r.returncode != 0:
        sys.stderr.write("peer unavailable (%d): %s\n" % (r.returncode, r.stdout.strip()[-500:]))
    return out


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
        eager = peer(batches, False)
        for B in batches:
            if runs[B]["cudnn"]:
                emit(train_line(B, "cudnn", runs[B]["cudnn"], eager.get(B), "PyTorch eager", 1.0))
            emit(train_line(B, "own", runs[B]["own"], eager.get(B), "PyTorch eager", 1.0))
        comp = peer(batches, True)
        for B in batches:
            if runs[B]["cudnn"]:
                emit(train_line(B, "cudnn", runs[B]["cudnn"], comp.get(B), "torch.compile", 1.05))
            else:
                emit(train_line(B, "own", runs[B]["own"], comp.get(B), "torch.compile", None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
