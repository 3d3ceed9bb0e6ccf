"""PyTorch CPU doing accel_optim's job, timed inside Python: usage torch_peer.py BYTES TENSORS REPS.
One torch.optim.AdamW(foreach=True) step over BYTES of fp32 parameters split in TENSORS tensors, fp32 gradients,
lr 1e-4, weight_decay 0.1 (as bench_optim.c). Prints one JSON object:
{"torch": version, "threads": n, "step_s": best seconds of REPS steps after a warm-up step}."""
import json
import sys
import time

import torch

nbytes, nt, reps = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
per = nbytes // 4 // nt
params = [torch.nn.Parameter(torch.rand(per) * 2 - 1) for _ in range(nt)]
for p in params:
    p.grad = (torch.rand(per) - 0.5) * 0.02
opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.1, foreach=True)
opt.step()  # creates the state
best = float("inf")
for _ in range(reps):
    t0 = time.perf_counter()
    opt.step()
    best = min(best, time.perf_counter() - t0)
print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(), "step_s": best}))
