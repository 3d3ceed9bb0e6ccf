#!/usr/bin/env python3
"""GPT-2 training throughput on the CPU (float32, one thread, one process): examples/gpt2/gpt2_cpu.c against its
PyTorch peer (gpt2_torch_peer.py --cpu: the same model, eager, AdamW foreach, clip 1.0, one intra-op thread), and
accel's own share of the step: the same trainer with accel's calls in the step replaced by no-ops (--bench-noop-accel:
no loader after the first batch, no accumulation bookkeeping, reducer, clip_grad_norm, schedule, loss all-reduce or
logging). The three runs alternate, `--rounds` times, on the same machine; the figures are the medians (a shared
machine: the spread is printed too). Prints JSON lines (DESIGN.md → Testing).

usage: bench_gpt2_cpu.py GPT2_CPU_EXE [--rounds 3] [--steps 8] [--config L,H,C,V,T,B]
       (default config 4,4,128,512,128,4: 0.9M parameters, 512 tokens a step; the PyTorch peer is skipped when
       /usr/bin/python3 has no torch)
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

PEER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpt2_torch_peer.py")
TORCH_PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def trainer(exe, shard, cfg, steps, noop):
    L, H, C, V, T, B = cfg
    cmd = [exe, "--data", shard, "--layers", L, "--heads", H, "--channels", C, "--vocab", V, "--block-size", T,
           "--seq", T, "--batch", B, "--steps", steps + 3, "--print-every", 0, "--lr", "6e-4", "--warmup", 2,
           "--weight-decay", "0.1"] + (["--bench-noop-accel"] if noop else [])
    r = subprocess.run([str(x) for x in cmd], capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        raise RuntimeError("gpt2_cpu failed (%d): %s%s" % (r.returncode, r.stdout, r.stderr))
    for line in r.stdout.splitlines():
        if line.startswith("summary: "):
            return json.loads(line[len("summary: "):])
    raise RuntimeError("gpt2_cpu printed no summary line")


def peer(cfg, steps):
    L, H, C, V, T, B = cfg
    cmd = [TORCH_PY, PEER, "--cpu", "--threads", "1", "--batch", B, "--seq", T, "--layers", L, "--heads", H,
           "--channels", C, "--vocab", V, "--block-size", T, "--steps", steps, "--warmup", 3]
    r = subprocess.run([str(x) for x in cmd], capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        sys.stderr.write("PyTorch peer unavailable (%d): %s%s\n" % (r.returncode, r.stdout.strip(), r.stderr[-2000:]))
        return None
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("exe")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--config", default="4,4,128,512,128,4")
    a = ap.parse_args()
    cfg = [int(x) for x in a.config.split(",")]
    L, H, C, V, T, B = cfg
    acc, noop, ref = [], [], []
    with tempfile.TemporaryDirectory(prefix="bench-gpt2-cpu-") as tmp:
        shard = os.path.join(tmp, "tokens.bin")
        r = subprocess.run([a.exe, "--gen-shard", shard, str((a.steps + 4) * B * (T + 1) + 1), str(V)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            print(r.stdout + r.stderr)
            return 1
        for _ in range(a.rounds):
            acc.append(trainer(a.exe, shard, cfg, a.steps, False)["tokens_per_s"])
            noop.append(trainer(a.exe, shard, cfg, a.steps, True)["tokens_per_s"])
            p = peer(cfg, a.steps)
            if p:
                ref.append(p["tokens_per_s"])
                torch_version = p["torch"]
    params = {"model": "gpt2 L%d H%d C%d V%d" % (L, H, C, V), "B": B, "T": T, "accum": 1, "threads": 1,
              "rounds": a.rounds}
    m_acc, m_noop = statistics.median(acc), statistics.median(noop)
    spread = lambda xs: [round(min(xs), 1), round(max(xs), 1)]  # noqa: E731
    m_ref = statistics.median(ref) if ref else None
    print(json.dumps({"bench": "gpt2_cpu_train", "params": params, "unit": "tokens/s", "accel": round(m_acc, 1),
                      "reference": round(m_ref, 1) if m_ref else None,
                      "reference_name": "PyTorch eager on the CPU (float32, 1 thread, AdamW foreach, clip 1.0)" +
                      (", torch %s" % torch_version if ref else ", unavailable"),
                      "ratio": round(m_acc / m_ref, 3) if m_ref else None, "goal": None,
                      "accel_range": spread(acc), "reference_range": spread(ref) if ref else None}), flush=True)
    print(json.dumps({"bench": "gpt2_cpu_accel_overhead", "params": params, "unit": "tokens/s",
                      "accel": round(m_acc, 1), "reference": round(m_noop, 1),
                      "reference_name": "the same trainer with accel's calls replaced by no-ops",
                      "ratio": round(m_acc / m_noop, 4), "goal": 0.99,
                      "accel_share_of_step": round(1.0 - m_acc / m_noop, 4), "accel_range": spread(acc),
                      "reference_range": spread(noop)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
