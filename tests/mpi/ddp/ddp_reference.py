#!/usr/bin/python3
"""PyTorch's DistributedDataParallel as the reference for the reducer's average (3 ranks, gloo, CPU).

Every rank holds the same input x and the model is y = w * x (element-wise, so it runs in fp16/bf16 on the CPU too):
the gradient of w is x on every rank, and the sum of the three (pre-scaled) gradients is the same in any order. Prints, per dtype, x and the gradient DDP leaves after one
backward (default gradient_as_bucket_view=False, as Accelerate's DistributedDataParallelKwargs).

  ddp_reference.py                 print "DTYPE x grad" lines
  ddp_reference.py --check FILE.c  check every DDP_REF(DTYPE, x, grad) line of FILE.c against PyTorch
Exits 77 (meson: skipped) when torch or its gloo backend is missing.
"""
import os
import re
import socket
import sys

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    if not dist.is_available() or not dist.is_gloo_available():
        raise ImportError("no gloo")
except Exception as e:  # noqa: BLE001 - any import problem means: no reference here
    print(f"torch with gloo not available ({e}): skipped")
    sys.exit(77)

DTYPES = {"F32": (torch.float32, torch.int32), "F64": (torch.float64, torch.int64),
          "F16": (torch.float16, torch.int16), "BF16": (torch.bfloat16, torch.int16)}


class Scale(torch.nn.Module):
    def __init__(self, dt):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(8, dtype=dt))

    def forward(self, x):
        return self.w * x


def worker(rank, world, port, cases, q):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    out = []
    for name, bits in cases:
        dt, it = DTYPES[name]
        x = torch.tensor([bits], dtype=torch.int64).to(it).view(dt).repeat(8)
        m = Scale(dt)
        try:
            ddp = torch.nn.parallel.DistributedDataParallel(m)
        except RuntimeError as e:  # gloo of this torch lacks the dtype (bf16 in 1.13): no reference for it
            out.append((name, bits, None, str(e)))
            continue
        y = ddp(x)
        y.backward(torch.ones_like(y))
        g = m.w.grad
        assert bool((g == g[0]).all())
        out.append((name, bits, int(g[:1].view(it).item()) & ((1 << (8 * g.element_size())) - 1), ""))
    if rank == 0:
        q.put(out)
    dist.destroy_process_group()


def reference(cases):
    """One process group per case (several DDP models in one gloo group of torch 1.13 could hang)."""
    out = []
    ctx = mp.get_context("spawn")
    for case in cases:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        q = ctx.Queue()
        mp.spawn(worker, args=(3, port, [case], q), nprocs=3)
        out += q.get()
    return out


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        src = open(sys.argv[2]).read()
        want = [(m.group(1), int(m.group(2), 16), int(m.group(3), 16))
                for m in re.finditer(r'DDP_REF\("(\w+)",\s*0x([0-9a-fA-F]+)u?\w*,\s*0x([0-9a-fA-F]+)u?\w*\)', src)]
        if not want:
            print(f"no DDP_REF(...) lines in {sys.argv[2]}")
            return 1
        got = reference([(n, b) for n, b, _ in want])
        bad = checked = 0
        for (n, b, g), (_, _, t, why) in zip(want, got):
            if t is None:
                print(f"{n} x={b:#x}: no reference ({why})")
                continue
            checked += 1
            bad += g != t
            print(f"{n} x={b:#x}: test expects {g:#x}, PyTorch DDP gives {t:#x} {'ok' if g == t else 'MISMATCH'}")
        return 1 if bad or not checked else 0
    cases = [("F32", 0x3FC4AA2F), ("F64", 0x3FFD00D7879547F5), ("F16", 0x3D56), ("BF16", 0x3FAE)]
    for n, b, g, why in reference(cases):
        print(f"{n} {b:#x} {g:#x}" if g is not None else f"{n} {b:#x} - ({why})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
