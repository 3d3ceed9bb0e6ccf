#!/usr/bin/env python3
"""The PyTorch peer of examples/gpt2/train_gpt2.cu for bench_gpt2.py: the same GPT-2 (124M by default), trained the
way a careful PyTorch user would: bf16 autocast, fused AdamW (betas 0.9/0.95, weight decay 0.1 on the 2-D weights),
scaled_dot_product_attention (flash attention), tied LM head with the vocabulary padded to 50304, clip_grad_norm_ 1.0,
TF32 matmuls allowed. Random tokens (the step time does not depend on them).

With --cpu (the peer of examples/gpt2/gpt2_cpu.c for bench_gpt2_cpu.py): float32 on the CPU, --threads N intra-op
threads (default 1, as gpt2_cpu), AdamW's foreach implementation (fused=True is CUDA-only), the same clip 1.0, and
SDPA where the torch has it (2.0+), else the causal softmax attention written out (torch 1.13).

usage: gpt2_torch_peer.py --batch B[,B2...] --seq T [--compile | --modes eager,compile] [--steps N] [--warmup N]
                          [--layers L --heads H --channels C] [--vocab V] [--cpu [--threads N]]
prints one JSON line per batch size and mode, in order, as each is measured: {"batch": B, "tokens_per_s": ...,
"step_ms": ..., "compile": 0|1, "torch": version}; exit 77 without CUDA (without --cpu). Several batch sizes and
modes share the process (one torch start-up, one model, one optimizer; --modes eager,compile runs every batch size
eager, then compiled; torch.compile with static shapes compiles each batch size once, in its warmup, whose duration
goes to stderr).
"""
import argparse
import json
import math
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    print("SKIP: no PyTorch")
    sys.exit(77)


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        if hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # torch < 2.0
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.shape[-1]))
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            y = att.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ v
        y = y.transpose(1, 2).reshape(B, T, C)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, L, H, C, V, block):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(block, C)
        self.h = nn.ModuleList(Block(C, H) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        for n, p in self.named_parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * L) if n.endswith("proj.weight") else 0.02)
            elif n.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.h:
            x = b(x)
        logits = self.ln_f(x) @ self.wte.weight.t()  # tied head
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", default="16")
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--compile", action="store_true", help="the same as --modes compile")
    ap.add_argument("--modes", help="eager, compile or both (comma-separated, in this order); default eager")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--channels", type=int, default=768)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--block-size", type=int, default=1024)
    ap.add_argument("--cpu", action="store_true")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    modes = a.modes.split(",") if a.modes else ["compile" if a.compile else "eager"]
    if not modes or any(m not in ("eager", "compile") for m in modes) or (a.modes and a.compile):
        ap.error("--modes: eager and/or compile, comma-separated (and not with --compile)")
    if not a.cpu and not torch.cuda.is_available():
        print("SKIP: no CUDA device for PyTorch")
        return 77
    torch.manual_seed(0)
    if a.cpu:
        torch.set_num_threads(a.threads)
        dev = "cpu"
    else:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        dev = "cuda"
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    model = GPT2(a.layers, a.heads, a.channels, a.vocab, max(a.block_size, a.seq)).to(dev)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    nodecay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": nodecay, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8, **({"foreach": True} if a.cpu else {"fused": True}))
    for mode in modes:
        step_fn = torch.compile(model, dynamic=False) if mode == "compile" else model
        for batch in [int(b) for b in a.batch.split(",")]:
            measure(a, model, opt, step_fn, mode, batch, dev, sync)
        if dev == "cuda":
            torch.cuda.empty_cache()  # the next mode starts from the same free memory
    return 0


def measure(a, model, opt, step_fn, mode, batch, dev, sync):
    """one JSON line: the step time of step_fn at this batch size (after a warmup that compiles, in compile mode)"""
    x = torch.randint(0, min(50257, a.vocab), (batch, a.seq + 1), device=dev)
    inp, tgt = x[:, :-1].contiguous(), x[:, 1:].contiguous()

    def step():
        if a.cpu:
            loss = step_fn(inp, tgt)
        else:
            with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
                loss = step_fn(inp, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    t = time.perf_counter()
    for _ in range(a.warmup):
        step()
    sync()
    sys.stderr.write("gpt2_torch_peer: %s B=%d: warmup (%d steps%s) %.1f s\n" % (
        mode, batch, a.warmup, ", compiling" if mode == "compile" else "", time.perf_counter() - t))
    t = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    loss.item()
    sync()
    el = time.perf_counter() - t
    print(json.dumps({"batch": batch, "tokens_per_s": a.steps * batch * a.seq / el, "step_ms": 1000 * el / a.steps,
                      "compile": int(mode == "compile"), "torch": torch.__version__}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
