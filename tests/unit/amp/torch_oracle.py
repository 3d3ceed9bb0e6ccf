"""Oracle data from PyTorch CPU for test_amp_torch.c (written to stdout, little-endian binary):
  clip cases: i32 nbufs, f64 max_norm, f64 norm_type, f32 torch_total, then per buffer i32 n, f32 in[n], f32 out[n]
              (torch.nn.utils.clip_grad_norm_); i32 -1 ends the list.
  conversions: i32 n, f32 x[n], u16 bf16[n] (x.to(torch.bfloat16)), u16 f16[n] (x.to(torch.float16))."""
import struct
import sys

import torch

out = sys.stdout.buffer
g = torch.Generator().manual_seed(1234)
for case in range(120):
    nb = int(torch.randint(1, 7, (1,), generator=g))
    norm_type = [2.0, 1.0, 3.0, float("inf")][case % 4]
    max_norm = float(torch.rand(1, generator=g)) * 4.0 + 0.01
    grads = [torch.randn(int(torch.randint(1, 700, (1,), generator=g)), generator=g) * float(torch.rand(1, generator=g) * 3)
             for _ in range(nb)]
    ps = []
    for t in grads:
        p = torch.zeros_like(t, requires_grad=True)
        p.grad = t.clone()
        ps.append(p)
    total = torch.nn.utils.clip_grad_norm_(ps, max_norm, norm_type)
    out.write(struct.pack("<iddf", nb, max_norm, norm_type, float(total)))
    for t, p in zip(grads, ps):
        out.write(struct.pack("<i", t.numel()))
        out.write(t.numpy().astype("<f4").tobytes())
        out.write(p.grad.numpy().astype("<f4").tobytes())
out.write(struct.pack("<i", -1))
# conversions: random bit patterns (finite and not) and values around the rounding boundaries
bits = torch.randint(-2**31, 2**31 - 1, (200000,), generator=g, dtype=torch.int64).to(torch.int32)
x = bits.view(torch.float32)
out.write(struct.pack("<i", x.numel()))
out.write(x.numpy().astype("<f4").tobytes())
out.write(x.to(torch.bfloat16).view(torch.int16).numpy().astype("<i2").tobytes())
out.write(x.to(torch.float16).view(torch.int16).numpy().astype("<i2").tobytes())
out.flush()
