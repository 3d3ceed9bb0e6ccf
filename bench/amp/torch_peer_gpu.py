"""PyTorch on CUDA doing accel_amp's GPU jobs with bench_amp_gpu.cu's shapes (GPT-2 124M gradient list, 148 fp32
tensors; one flat 1 GiB buffer), timed with CUDA events as bench_amp_gpu times accel (the copies: GPU time per call
of back-to-back calls; the rest: each call alone behind other GPU work, to its return), best of REPS: usage
torch_peer_gpu.py REPS.
Prints one JSON object {"torch": version, "unscale_s", "bf16_s", "fp16_s", "bf16_flat_s", "norm_s", "clip_s"}
(seconds) or {"error": why}.
  unscale: torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale) (GradScaler.unscale_)
  bf16/fp16: dst.copy_(src) into a preallocated 16-bit tensor (one 124 M buffer; 1 GiB for bf16_flat)
  norm: torch.nn.utils.get_total_norm(grads, 2.0, foreach=True) (torch >= 2.6; else the foreach norms stacked)
  clip: torch.nn.utils.clip_grad_norm_(params, 1e30, 2.0, foreach=True) (coef clamps to 1, as bench_amp_gpu)."""
import json
import sys

try:
    import torch
except ImportError:
    print(json.dumps({"error": "no torch"}))
    sys.exit(0)
if not torch.cuda.is_available():
    print(json.dumps({"error": "torch %s has no CUDA" % torch.__version__}))
    sys.exit(0)
reps = int(sys.argv[1])
sizes = [50257 * 768, 1024 * 768]
for _ in range(12):
    sizes += [768, 768, 768 * 2304, 2304, 768 * 768, 768, 768, 768, 768 * 3072, 3072, 3072 * 768, 768]
sizes += [768, 768]
n = sum(sizes)
flat = torch.rand(n, device="cuda") * 2 - 1
grads = list(torch.split(flat, sizes))
params = [torch.nn.Parameter(torch.zeros(s, device="cuda")) for s in sizes]
for p, g in zip(params, grads):
    p.grad = g


def best(fn, batch=False):
    """best seconds per call: each call alone behind about 0.5 ms of other GPU work (torch.cuda._sleep; the jobs that
    synchronize, timed from that work's end to the call's return, as bench_amp_gpu's GB_TIME_BUSY), or batch=True: the
    best of 3 runs of REPS back-to-back calls divided by REPS (the copies: GPU time per call, as bench_amp_gpu times
    its jobs that do not synchronize)"""
    fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t = float("inf")
    for _ in range(3 if batch else reps):
        if not batch:
            torch.cuda._sleep(1000000)
        a.record()
        for _ in range(reps if batch else 1):
            fn()
        b.record()
        b.synchronize()
        t = min(t, a.elapsed_time(b) * 1e-3 / (reps if batch else 1))
    return t


out = {"torch": torch.__version__}
found = torch.zeros(1, device="cuda")
invs = [torch.full((1,), 0.5, device="cuda"), torch.full((1,), 2.0, device="cuda")]
state = [0]


def unscale():
    state[0] ^= 1
    torch._amp_foreach_non_finite_check_and_unscale_(grads, found, invs[state[0]])
    found.item()  # GradScaler reads found_inf once per step (accel's unscale_and_check does too)


try:
    out["unscale_s"] = best(unscale)
except (AttributeError, RuntimeError) as e:
    out["unscale_error"] = str(e)
h = torch.empty(n, dtype=torch.bfloat16, device="cuda")
out["bf16_s"] = best(lambda: h.copy_(flat), batch=True)
h16 = torch.empty(n, dtype=torch.float16, device="cuda")
out["fp16_s"] = best(lambda: h16.copy_(flat), batch=True)
del h, h16
big = torch.rand((1 << 30) // 4, device="cuda")
hb = torch.empty(big.numel(), dtype=torch.bfloat16, device="cuda")
out["bf16_flat_s"] = best(lambda: hb.copy_(big), batch=True)
del big, hb
if hasattr(torch.nn.utils, "get_total_norm"):
    out["norm_s"] = best(lambda: torch.nn.utils.get_total_norm(grads, 2.0, foreach=True).item())
else:
    out["norm_s"] = best(lambda: torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2.0)), 2.0).item())
out["clip_s"] = best(lambda: torch.nn.utils.clip_grad_norm_(params, 1e30, 2.0, foreach=True).item())
print(json.dumps(out))
