"""PyTorch on CUDA doing the fp8 cast + amax, timed with CUDA events (back-to-back calls): usage
torch_fp8_peer.py BYTES REPS.
Prints one JSON object: {"torch": version, "device": name, "cast_amax_s": best seconds, "dequantize_s": best seconds}
for
  y = x.to(torch.float8_e4m3fn); a = x.abs().amax()     (what accel_amp_fp8_quantize does in one pass)
  z = y.to(torch.float32) * scale_inv                     (accel_amp_fp8_dequantize)
over BYTES of fp32. Exits 77 without CUDA or float8."""
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


def best_of(fn):
    """seconds per call of back-to-back calls (GPU time, as bench_fp8_gpu times accel): the best of 3 runs of REPS"""
    out = fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(3):
        start.record()
        for _ in range(reps):
            out = fn()
        stop.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(stop) / 1e3 / reps)
    del out
    return best


cast = best_of(lambda: (x.to(torch.float8_e4m3fn), x.abs().amax()))
y = x.to(torch.float8_e4m3fn)
sinv = torch.full((1,), 0.01, device="cuda")
deq = best_of(lambda: y.to(torch.float32) * sinv)
print(json.dumps({"torch": torch.__version__, "device": torch.cuda.get_device_name(), "cast_amax_s": cast,
                  "dequantize_s": deq}))
