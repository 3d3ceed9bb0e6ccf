"""PyTorch's checkpoint I/O from/to CUDA with bench_ckpt_gpu.cu's shapes: usage torch_peer_gpu.py DIR TAG REPS, TAG
gpt2 (148 fp32 tensors t000..t147, GPT-2 124M) or flat (one 1 GiB fp32 tensor "flat"). Best of REPS, host clock:
  save_st_s  safetensors.torch.save_file(tensors on cuda) + fsync      save_pt_s  torch.save + fsync
  load_st_s  safetensors.torch.load_file(device="cuda"), warm           load_pt_s  torch.load(map_location="cuda"), warm
Then reads accel's file DIR/accel_TAG.safetensors with safetensors.torch and compares it bit for bit with the values
bench_ckpt_gpu wrote (its fill hash recomputed here): "accel_file_matches". Prints one JSON object or {"error": why}."""
import json
import os
import sys
import time

try:
    import torch
    import safetensors.torch as st
except ImportError as e:
    print(json.dumps({"error": "no torch/safetensors: %s" % e}))
    sys.exit(0)
if not torch.cuda.is_available():
    print(json.dumps({"error": "torch %s has no CUDA" % torch.__version__}))
    sys.exit(0)
folder, tag, reps = sys.argv[1], sys.argv[2], int(sys.argv[3])
if tag == "gpt2":
    sizes = [50257 * 768, 1024 * 768]
    for _ in range(12):
        sizes += [768, 768, 768 * 2304, 2304, 768 * 768, 768, 768, 768, 768 * 3072, 3072, 3072 * 768, 768]
    sizes += [768, 768]
    names, seed = ["t%03d" % i for i in range(len(sizes))], 5
else:
    sizes, names, seed = [(1 << 30) // 4], ["flat"], 6


def fill(n, seed):
    """gpu_bench.h's gb_fill_kernel: uint32 hash of the index, (h >> 8) * 2^-23 - 1 in float32."""
    m = 0xFFFFFFFF
    i = torch.arange(n, device="cuda", dtype=torch.int64)
    h = ((i * 2654435761) & m) ^ seed
    h = h ^ (h >> 15)
    hh, hl = h >> 16, h & 0xFFFF
    h = ((((hh * 2246822519) & 0xFFFF) << 16) + hl * 2246822519) & m
    h = h ^ (h >> 13)
    return (h >> 8).to(torch.float32) * (1.0 / 8388608.0) - 1.0


def fsync(path):
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)


def best(fn):
    t = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        t = min(t, time.perf_counter() - t0)
    return t


flat = fill(sum(sizes), seed)
tensors = dict(zip(names, [x.clone() for x in torch.split(flat, sizes)]))
out = {"torch": torch.__version__}
p_st = os.path.join(folder, "st_%s.safetensors" % tag)
p_pt = os.path.join(folder, "pt_%s.pt" % tag)


def save_st():
    st.save_file(tensors, p_st)
    fsync(p_st)


def save_pt():
    with open(p_pt, "wb") as f:
        torch.save(tensors, f)
        f.flush()
        os.fsync(f.fileno())


out["save_st_s"] = best(save_st)
out["save_pt_s"] = best(save_pt)
st.load_file(p_st, device="cuda")
out["load_st_s"] = best(lambda: st.load_file(p_st, device="cuda"))
torch.load(p_pt, map_location="cuda")
out["load_pt_s"] = best(lambda: torch.load(p_pt, map_location="cuda"))
os.unlink(p_st)
os.unlink(p_pt)
got = st.load_file(os.path.join(folder, "accel_%s.safetensors" % tag), device="cuda")
out["accel_file_matches"] = sorted(got) == sorted(names) and all(
    got[k].dtype == torch.float32 and torch.equal(got[k].view(torch.int32), tensors[k].view(torch.int32)) for k in names)
print(json.dumps(out))
