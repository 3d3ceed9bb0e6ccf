"""PyTorch's host-to-device batch copy with bench_data_gpu.cu's batch sizes: a pinned uint8 host tensor (pin_memory()
once), then .to("cuda", non_blocking=True) per batch, BATCHES batches back to back, timed with CUDA events, best of
ROUNDS: usage torch_peer_gpu.py ROUNDS. Prints one JSON object {"torch": version, "s_<bytes>": seconds per batch, ...}
or {"error": why}."""
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
rounds = int(sys.argv[1])
out = {"torch": torch.__version__}
for nbytes in [64 << 10, 1 << 20, 16 << 20, 256 << 20, 1 << 30]:
    batches = 2000 if nbytes <= 1 << 20 else 100 if nbytes <= 16 << 20 else 8
    host = torch.ones(nbytes, dtype=torch.uint8).pin_memory()
    keep = [host.to("cuda", non_blocking=True) for _ in range(2)]
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for _ in range(rounds):
        a.record()
        for k in range(batches):
            keep[k & 1] = host.to("cuda", non_blocking=True)
        b.record()
        b.synchronize()
        best = min(best, a.elapsed_time(b) * 1e-3 / batches)
    out["s_%d" % nbytes] = best
    del host, keep
    torch.cuda.empty_cache()
print(json.dumps(out))
