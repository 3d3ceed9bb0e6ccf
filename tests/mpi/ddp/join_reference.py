#!/usr/bin/env python3
"""Join for uneven inputs against DDP's rule, written out here in float64.

Runs `MPIRUN_SH 3 EXE join` (test_ddp_join.c), which trains three ranks with 3, 5 and 7 batches (and, in the loader
cases, an even_batches=False shard of N=10, B=2: 2, 2 and 1 batches) and writes each rank's final weights. The
reference: in step s the ranks with a batch compute grad_r = 0.5 w + c(r, s, t, i) (+ their batch's term); a rank
without one contributes zeros (torch's Join + DDP's join hook); every active rank pre-scales by 1/D before the sum
(D = 3, DDP's divide_by_initial_world_size=True, or the number of active ranks with False) and steps w -= 0.1 g;
at the end every rank holds the last joiner's weights (DDP's _sync_final_model).

The rule itself is checked against PyTorch when Debian's torch (gloo) is there: DDP + Join with 3, 5, 7 batches on
the same per-element loss (0.25 w^2 + c w, whose gradient is 0.5 w + c), both divide_by_initial_world_size choices.

  join_reference.py MPIRUN_SH EXE
  join_reference.py --torch          only the PyTorch check of the rule
"""
import os
import subprocess
import sys
import tempfile

P = 3
SAMPLES = [0, 1, 2, 3, 4, 6, 997, 65536, 139999]
SIZES = [5, 140000, 7]
CASES = {"buckets": (False, False), "flat_by_active": (True, False), "loader": (False, True),
         "loader_by_active": (True, True)}  # name: (divide by the active ranks, even_batches=False loader)


def coef(rank, step, tensor, i):
    return (rank + 1) * 0.25 + step * 0.125 + (i % 7) * 0.0625 - tensor * 0.5


def loader_batches(p, n=10, b=2, world=P):
    """BatchSamplerShard without even_batches, sequential sampler: batch k of process p holds positions
    k*G + p*b + j < n (docs/semantics.md section 1), G = world * b."""
    g = world * b
    out, k = [], 0
    while k * g + p * b < n:
        out.append([q for q in range(k * g + p * b, k * g + p * b + b) if q < n])
        k += 1
    return out


def reference(by_active, loader):
    if loader:
        batches = [loader_batches(p) for p in range(P)]
        nb = [len(x) for x in batches]
    else:
        batches = None
        nb = [3 + 2 * r for r in range(P)]
    w = {(t, i): 1.0 + 0.001 * i - t for t in range(3) for i in SAMPLES if i < SIZES[t]}
    for step in range(max(nb)):
        active = [r for r in range(P) if step < nb[r]]
        d = len(active) if by_active else P
        for key in w:
            t, i = key
            g = 0.0
            for r in active:
                extra = sum((q + 1) * 0.01 for q in batches[r][step]) if loader else 0.0
                g += (0.5 * w[key] + coef(r, step, t, i) + extra) * (1.0 / d)
            w[key] = w[key] - 0.1 * g
    return w


def torch_worker(rank, world, port, by_active, q):
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.join import Join
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    keys = [(t, i) for t in range(3) for i in SAMPLES if i < SIZES[t]]

    class PerElement(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.tensor([1.0 + 0.001 * i - t for t, i in keys], dtype=torch.float64))

        def forward(self, c):
            return (0.25 * self.w * self.w + c * self.w).sum()

    model = PerElement()
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    with Join([ddp], divide_by_initial_world_size=not by_active):
        for step in range(3 + 2 * rank):
            c = torch.tensor([coef(rank, step, t, i) for t, i in keys], dtype=torch.float64)
            opt.zero_grad()
            ddp(c).backward()
            opt.step()
    if rank == 0:
        q.put(dict(zip(keys, model.w.detach().tolist())))
        q.close()
        q.join_thread()
    # torch 1.13's gloo teardown after a Join can block one rank forever: leave without it (the result is sent)
    os._exit(0)


def torch_check():
    """0 when PyTorch's DDP + Join gives the reference's weights, 1 when not, None without torch."""
    try:
        import socket
        import torch.distributed as dist
        import torch.multiprocessing as mp
        if not dist.is_available() or not dist.is_gloo_available():
            raise ImportError("no gloo")
    except Exception as e:  # noqa: BLE001 - any import problem means: no torch oracle here
        print(f"torch with gloo not available ({e}): the rule is not cross-checked")
        return None
    failed = 0
    for by_active in (False, True):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        mp.spawn(torch_worker, args=(P, port, by_active, q), nprocs=P)
        got, ref = q.get(), reference(by_active, False)
        for key, want in ref.items():
            if abs(got[key] - want) > 1e-12 * max(1.0, abs(want)):
                failed += 1
                print(f"torch DDP+Join (divide_by_initial_world_size={not by_active}) {key}: {got[key]!r} != rule {want!r}")
        print(f"torch DDP+Join, divide_by_initial_world_size={not by_active}: {len(ref)} weights, "
              f"{'ok' if not failed else 'MISMATCH'}")
    return 1 if failed else 0


def main():
    if sys.argv[1:] == ["--torch"]:
        r = torch_check()
        return 77 if r is None else r
    mpirun, exe = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as out:
        env = dict(os.environ, ACCEL_JOIN_OUT=out)
        proc = subprocess.run([mpirun, str(P), exe, "join"], env=env, timeout=200)
        if proc.returncode != 0:
            print(f"test_ddp_join join failed with exit code {proc.returncode}")
            return 1
        got = {}
        for r in range(P):
            with open(os.path.join(out, f"rank{r}.txt")) as f:
                for line in f:
                    _, case, rank, t, i, v = line.split()
                    got[(case, int(rank), int(t), int(i))] = float.fromhex(v)
    failed = checked = 0
    for case, (by_active, loader) in CASES.items():
        ref = reference(by_active, loader)
        for r in range(P):
            for (t, i), want in ref.items():
                v = got.get((case, r, t, i))
                checked += 1
                if v is None or abs(v - want) > 1e-12 * max(1.0, abs(want)):
                    failed += 1
                    print(f"{case} rank {r} tensor {t} [{i}]: {v!r} != reference {want!r}")
    # the reference must depend on the rule: dividing by the active ranks changes the weights
    if reference(False, False) == reference(True, False):
        failed += 1
        print("the two divisors give the same reference: the test cannot tell them apart")
    print(f"join_reference: {checked} weights checked, {failed} failed")
    if torch_check():
        failed += 1
    return 1 if failed or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
