"""torch.optim.AdamW(fused=True) on CUDA over the GPT-2 124M parameter list (148 tensors), fp32 parameters and
gradients, lr 6e-4, weight_decay 0.1 (as bench_optim_gpu.cu): usage torch_peer_gpu.py REPS. Prints one JSON object
{"torch": version, "step_s": best seconds (CUDA events)} or {"error": why}."""
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
params = [torch.nn.Parameter(torch.zeros(n, device="cuda")) for n in sizes]
for p in params:
    p.grad = torch.zeros_like(p)
try:
    opt = torch.optim.AdamW(params, lr=6e-4, weight_decay=0.1, fused=True)
except (TypeError, RuntimeError) as e:
    print(json.dumps({"error": "fused AdamW: %s" % e}))
    sys.exit(0)
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
print(json.dumps({"torch": torch.__version__, "step_s": best}))
