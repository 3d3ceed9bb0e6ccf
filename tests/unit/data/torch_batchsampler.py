#!/usr/bin/env python3
"""Optional check against torch itself (exit 77 = skip when torch is missing):
  - the unsharded case of `accel shards` (P=1, no split) without padding (even_batches=0) is exactly
    torch.utils.data.BatchSampler(SequentialSampler(range(N)), B, drop_last);
  - `accel shards --prepare` with one process (what Accelerator.prepare() hands the trainer: no sharding) is exactly
    torch's DataLoader — whatever even_batches says, for a map-style dataset (BatchSampler) and for an
    IterableDataset (DataLoader(iterable, batch_size=B, drop_last)), with or without split_batches (B // 1 = B)."""
import json
import subprocess
import sys

try:
    from torch.utils.data import BatchSampler, DataLoader, IterableDataset, SequentialSampler
except Exception as e:  # noqa: BLE001 — any import failure means "no torch here"
    print(f"torch not available ({e}); skipping")
    sys.exit(77)


class Stream(IterableDataset):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        return iter(range(self.n))


exe = sys.argv[1]
passed = failed = 0


def check(args, want):
    global passed, failed
    out = json.loads(subprocess.run(args, capture_output=True, text=True, check=True).stdout)
    if out["shards"] == [want] and out["lengths"] == [len(want)]:
        passed += 1
    else:
        failed += 1
        print("MISMATCH", args[1:], out, want)


for n in list(range(0, 20)) + [63, 64, 65, 100]:
    for b in range(1, 9):
        for drop in (False, True):
            base = [exe, "shards", "--dataset-len", str(n), "--batch-size", str(b), "--num-processes", "1"]
            tail = ["--drop-last"] if drop else []
            want = [list(x) for x in BatchSampler(SequentialSampler(range(n)), b, drop)]
            check(base + ["--even-batches", "0"] + tail, want)
            check(base + ["--prepare", "--even-batches", "1"] + tail, want)
            check(base + ["--prepare", "--split-batches", "--even-batches", str(b % 2)] + tail, want)
            want_it = [[int(i) for i in x] for x in DataLoader(Stream(n), batch_size=b, drop_last=drop)]
            check(base + ["--prepare", "--iterable", "--even-batches", str(n % 2)] + tail, want_it)
print(f"data-torch-batchsampler: {passed} passed, {failed} failed")
sys.exit(1 if failed or not passed else 0)
