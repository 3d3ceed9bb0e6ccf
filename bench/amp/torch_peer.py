"""PyTorch CPU doing accel_amp's jobs, timed inside Python: usage torch_peer.py BYTES REPS.
Prints one JSON object: {"torch": version, "threads": n, "unscale_s": best seconds, "bf16_s": best seconds}.
unscale: g.mul_(inv); torch.isfinite(g).all() (what GradScaler's CPU unscale amounts to);
bf16:    g.to(torch.bfloat16) (a new tensor each call, as a training loop would do)."""
import json
import sys
import time

import torch

nbytes, reps = int(sys.argv[1]), int(sys.argv[2])
g = torch.rand(nbytes // 4, dtype=torch.float32) * 2 - 1
inv = [2.0, 0.5]  # alternate so values neither overflow nor underflow
best_u = best_b = float("inf")
for r in range(reps):
    t0 = time.perf_counter()
    g.mul_(inv[r % 2])
    found = not bool(torch.isfinite(g).all())
    t1 = time.perf_counter()
    best_u = min(best_u, t1 - t0)
    assert not found
    t0 = time.perf_counter()
    h = g.to(torch.bfloat16)
    t1 = time.perf_counter()
    best_b = min(best_b, t1 - t0)
    del h
print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(), "unscale_s": best_u, "bf16_s": best_b}))
