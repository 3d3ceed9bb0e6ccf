"""torch.optim.AdamW(fused=True) on CUDA over the GPT-2 124M parameter list (148 tensors), lr 6e-4, weight_decay 0.1
(as bench_optim_gpu.cu), timed with CUDA events (best of REPS): fp32 parameters and gradients, and bf16 parameters
and gradients (torch's fused AdamW needs the gradients in the parameters' dtype, so its bf16-gradient form keeps
bf16 parameters and moments). usage: torch_peer_gpu.py REPS. Prints one JSON object {"torch": version,
"f32_step_s": seconds, "bf16_step_s": seconds} with "error" / "error_bf16" in place of what could not run."""
import json
import sys


def sizes():
    s = [50257 * 768, 1024 * 768]
    for _ in range(12):
        s += [768, 768, 768 * 2304, 2304, 768 * 768, 768, 768, 768, 768 * 3072, 3072, 3072 * 768, 768]
    return s + [768, 768]


def time_step(torch, dtype, reps):
    params = [torch.nn.Parameter(torch.zeros(n, device="cuda", dtype=dtype)) for n in sizes()]
    for p in params:
        p.grad = torch.zeros_like(p)
    opt = torch.optim.AdamW(params, lr=6e-4, weight_decay=0.1, fused=True)
    opt.step()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for _ in range(reps):
        a.record()
        opt.step()
        b.record()
        b.synchronize()
        best = min(best, a.elapsed_time(b) * 1e-3)
    del opt, params
    torch.cuda.empty_cache()
    return best


def main():
    out = {}
    try:
        import torch
    except ImportError:
        print(json.dumps({"error": "no torch"}))
        return
    out["torch"] = torch.__version__
    if not torch.cuda.is_available():
        out["error"] = "torch %s has no CUDA" % torch.__version__
        print(json.dumps(out))
        return
    reps = int(sys.argv[1])
    for key, dtype in (("f32_step_s", torch.float32), ("bf16_step_s", torch.bfloat16)):
        try:
            out[key] = time_step(torch, dtype, reps)
        except (TypeError, RuntimeError) as e:  # an old torch without fused AdamW, out of memory, ...
            out["error" if dtype == torch.float32 else "error_bf16"] = str(e)[:200]
    print(json.dumps(out))


main()
