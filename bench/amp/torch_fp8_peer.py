"""PyTorch on CUDA doing the fp8 cast + amax, timed with CUDA events: usage torch_fp8_peer.py BYTES REPS.
Prints one JSON object: {"torch": version, "device": name, "cast_amax_s": best seconds} for
  y = x.to(torch.float8_e4m3fn); a = x.abs().amax()
over BYTES of fp32 (what accel_amp_fp8_quantize does in one pass). Exits 77 without CUDA or float8."""
import json
import sys

try:
    import torch
except ImportError:
    sys.exit(77)
if not torch.cuda.is_available() or not hasattr(torch, "float8_e4m3fn"):
    sys.exit(77)

nbytes, reps = int(sys.argv[1]), int(sys.argv[2])
x = (torch.rand(nbytes // 4, dtype=torch.float32, device="cuda") * 4 - 2)
start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
best = float("inf")
for r in range(reps + 2):
    start.record()
    y = x.to(torch.float8_e4m3fn)
    a = x.abs().amax()
    stop.record()
    torch.cuda.synchronize()
    if r >= 2:
        best = min(best, start.elapsed_time(stop) / 1e3)
    del y, a
print(json.dumps({"torch": torch.__version__, "device": torch.cuda.get_device_name(), "cast_amax_s": best}))
