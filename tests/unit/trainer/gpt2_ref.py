"""GPT-2 written in PyTorch, the oracle of examples/gpt2/gpt2_cpu.c (test-only; Debian python3-torch 1.13, CPU).

The model is spelled out with the Hugging Face layout (Conv1D weights [in, out], tied LM head, tanh GELU, LayerNorm
eps 1e-5) and runs in float64, so it is an independent reference for the C trainer's float32. Files are read and
written with json + struct (no safetensors package), llm.c token shards with struct.
"""
import json
import math
import struct

import torch
import torch.nn.functional as F


def write_safetensors(path, tensors):
    """tensors: name -> tensor (stored F32, C order), sorted by name, header padded to 8 bytes."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().to(torch.float32).contiguous().view(-1).tolist()
        b = struct.pack("<%df" % len(t), *t)
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape), "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    """name -> float64 tensor (F32 files only), plus the header dict."""
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    base, out = 8 + n, {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        assert e["dtype"] == "F32", (name, e["dtype"])
        b, end = e["data_offsets"]
        vals = struct.unpack("<%df" % ((end - b) // 4), data[base + b:base + end])
        out[name] = torch.tensor(vals, dtype=torch.float64).reshape(e["shape"])
    return out, header


def write_shard(path, tokens):
    """An llm.c GPT-2 token shard: 256 int32 header (magic 20240520, version 1, count), uint16 tokens."""
    header = [20240520, 1, len(tokens)] + [0] * 253
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack("<%dH" % len(tokens), *tokens))


def hf_names(L):
    names = ["wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias"]
    for l in range(L):
        for s in ("ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
                  "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
                  "mlp.c_proj.weight", "mlp.c_proj.bias"):
            names.append("h.%d.%s" % (l, s))
    return names


def random_init(L, C, V, block, gen, std=0.1):
    """Every parameter random (nonzero biases, LayerNorm gains away from 1), so no path is hidden by a 0 or a 1."""
    def n(*shape, s=std):
        return torch.randn(*shape, generator=gen, dtype=torch.float64) * s
    w = {"wte.weight": n(V, C), "wpe.weight": n(block, C), "ln_f.weight": 1 + n(C, s=0.2), "ln_f.bias": n(C, s=0.2)}
    for l in range(L):
        p = "h.%d." % l
        w[p + "ln_1.weight"] = 1 + n(C, s=0.2)
        w[p + "ln_1.bias"] = n(C, s=0.2)
        w[p + "attn.c_attn.weight"] = n(C, 3 * C)
        w[p + "attn.c_attn.bias"] = n(3 * C, s=0.05)
        w[p + "attn.c_proj.weight"] = n(C, C)
        w[p + "attn.c_proj.bias"] = n(C, s=0.05)
        w[p + "ln_2.weight"] = 1 + n(C, s=0.2)
        w[p + "ln_2.bias"] = n(C, s=0.2)
        w[p + "mlp.c_fc.weight"] = n(C, 4 * C)
        w[p + "mlp.c_fc.bias"] = n(4 * C, s=0.05)
        w[p + "mlp.c_proj.weight"] = n(4 * C, C)
        w[p + "mlp.c_proj.bias"] = n(C, s=0.05)
    # what the C trainer reads is float32: start the reference from the same rounded values
    return {k: v.to(torch.float32).to(torch.float64) for k, v in w.items()}


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def gelu_erf(x):  # the exact GELU: what a wrong activation would compute (negative control)
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def loss_fn(W, L, H, idx, targets, gelu=gelu_tanh):
    B, T = idx.shape
    C = W["wte.weight"].shape[1]
    hs = C // H
    x = W["wte.weight"][idx] + W["wpe.weight"][:T]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for l in range(L):
        p = "h.%d." % l
        h = F.layer_norm(x, (C,), W[p + "ln_1.weight"], W[p + "ln_1.bias"], 1e-5)
        qkv = h @ W[p + "attn.c_attn.weight"] + W[p + "attn.c_attn.bias"]
        q, k, v = (t.view(B, T, H, hs).transpose(1, 2) for t in qkv.split(C, dim=2))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = torch.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ W[p + "attn.c_proj.weight"] + W[p + "attn.c_proj.bias"]
        h = F.layer_norm(x, (C,), W[p + "ln_2.weight"], W[p + "ln_2.bias"], 1e-5)
        h = gelu(h @ W[p + "mlp.c_fc.weight"] + W[p + "mlp.c_fc.bias"])
        x = x + h @ W[p + "mlp.c_proj.weight"] + W[p + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (C,), W["ln_f.weight"], W["ln_f.bias"], 1e-5)
    logits = x @ W["wte.weight"].t()
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def lr_at(base, s, warmup, total):
    """transformers' get_cosine_schedule_with_warmup (what gpt2.h's gpt2_lr computes)."""
    if s < warmup:
        return base * s / max(1, warmup)
    q = (s - warmup) / max(1, total - warmup)
    return base * max(0.0, 0.5 * (1.0 + math.cos(math.pi * q)))


def windows(tokens, T, first, count):
    """Windows first..first+count-1 of T+1 tokens (window w starts at token w*T, as llm.c / accel_data_seq)."""
    rows = [tokens[w * T:w * T + T + 1] for w in range(first, first + count)]
    t = torch.tensor(rows, dtype=torch.long)
    return t[:, :-1], t[:, 1:]


def train(W0, L, H, tokens, B, T, accum, steps, lr, warmup, wd, clip, gelu=gelu_tanh):
    """torch.optim.AdamW (betas 0.9/0.95, eps 1e-8, decay on the 2-D weights) + clip_grad_norm_, one process.
    Returns (losses per step, the first step's gradients, the final weights)."""
    W = {k: v.clone().requires_grad_(True) for k, v in W0.items()}
    decay = [W[k] for k in sorted(W) if W[k].dim() >= 2]
    nodecay = [W[k] for k in sorted(W) if W[k].dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": wd}, {"params": nodecay, "weight_decay": 0.0}],
                            lr=lr, betas=(0.9, 0.95), eps=1e-8)
    losses, first_grads = [], None
    for s in range(steps):
        total = 0.0
        for m in range(accum):
            idx, tgt = windows(tokens, T, (s * accum + m) * B, B)
            loss = loss_fn(W, L, H, idx, tgt, gelu) / accum
            loss.backward()
            total += loss.item()
        losses.append(total)
        if first_grads is None:
            first_grads = {k: v.grad.detach().clone() for k, v in W.items()}
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(list(W.values()), clip)
        for g in opt.param_groups:
            g["lr"] = lr_at(lr, s, warmup, steps)
        opt.step()
        opt.zero_grad()
    return losses, first_grads, {k: v.detach() for k, v in W.items()}
