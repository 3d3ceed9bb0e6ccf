"""torch.distributed (gloo) peer for bench_coll: all_reduce over the same sizes, and DDP gradient sync of GPT-2
small's 148 fp32 tensors. Launched with torch's own spawn on 2 processes on 127.0.0.1.
usage: torch_peer.py MAX_BYTES PORT   (prints "allreduce BYTES SECONDS" and "ddp BYTES SECONDS_SYNC SECONDS_NOSYNC")"""
import os
import sys
import time


def gpt2_shapes():
    C = 768
    s = [(50257, C), (1024, C)]
    for _ in range(12):
        s += [(C,), (C,), (C, 3 * C), (3 * C,), (C, C), (C,), (C,), (C,), (C, 4 * C), (4 * C,), (4 * C, C), (C,)]
    s += [(C,), (C,)]
    return s


def worker(rank, world, max_bytes, port):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank, world_size=world)

    def timed(fn, it):
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(it):
            fn()
        t = torch.tensor([(time.perf_counter() - t0) / it], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.item()

    S = 1024
    while S <= max_bytes:
        x = torch.ones(S // 4, dtype=torch.float32)
        it = max(2, min(400, (256 << 20) // S // 4))
        timed(lambda: dist.all_reduce(x), 1)
        best = min(timed(lambda: dist.all_reduce(x), it) for _ in range(3))
        if rank == 0:
            print("allreduce %d %.9f" % (S, best), flush=True)
        del x
        S *= 4

    # DDP on a module holding the GPT-2 parameter list; loss = sum of all parameters (grads of ones)
    shapes = gpt2_shapes()
    params = torch.nn.ParameterList([torch.nn.Parameter(torch.zeros(*s)) for s in shapes])

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.p = params

        def forward(self):
            return sum(p.sum() for p in self.p)

    ddp = torch.nn.parallel.DistributedDataParallel(M(), bucket_cap_mb=25)
    nbytes = sum(p.numel() for p in params) * 4

    def step_sync():
        ddp().backward()

    def step_nosync():
        with ddp.no_sync():
            ddp().backward()

    timed(step_sync, 1)
    t_sync = min(timed(step_sync, 1) for _ in range(3))
    t_nosync = min(timed(step_nosync, 1) for _ in range(3))
    if rank == 0:
        print("ddp %d %.6f %.6f" % (nbytes, t_sync, t_nosync), flush=True)
    dist.barrier()
    os._exit(0)  # gloo's teardown at interpreter exit can hang; everything is printed already


if __name__ == "__main__":
    try:
        import torch
        import torch.multiprocessing as mp
    except Exception as e:  # no torch: the C side skips the lines
        print("torch unavailable: %s" % e)
        sys.exit(0)
    max_bytes, port = int(sys.argv[1]), int(sys.argv[2])
    ctx = mp.start_processes(worker, args=(2, max_bytes, port), nprocs=2, join=False, start_method="spawn")
    deadline = time.time() + 900
    while not ctx.join(timeout=1):
        if time.time() > deadline:
            print("torch peer: deadline passed, stopping")
            for p in ctx.processes:
                p.kill()
            break
    sys.stdout.flush()
    os._exit(0)
