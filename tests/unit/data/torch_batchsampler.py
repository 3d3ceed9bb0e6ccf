#!/usr/bin/env python3
"""Optional check: the unsharded case of `accel shards` (P=1, no split) without padding (even_batches=0) is exactly
torch.utils.data.BatchSampler(SequentialSampler(range(N)), B, drop_last). Exit 77 (skip) when torch is missing."""
import json
import subprocess
import sys

try:
    from torch.utils.data import BatchSampler, SequentialSampler
except Exception as e:  # noqa: BLE001 — any import failure means "no torch here"
    print(f"torch not available ({e}); skipping")
    sys.exit(77)

exe = sys.argv[1]
passed = failed = 0
for n in list(range(0, 20)) + [63, 64, 65, 100]:
    for b in range(1, 9):
        for drop in (False, True):
            want = [list(x) for x in BatchSampler(SequentialSampler(range(n)), b, drop)]
            args = [exe, "shards", "--dataset-len", str(n), "--batch-size", str(b), "--num-processes", "1",
                    "--even-batches", "0"] + (["--drop-last"] if drop else [])
            out = json.loads(subprocess.run(args, capture_output=True, text=True, check=True).stdout)
            if out["shards"] == [want] and out["lengths"] == [len(want)]:
                passed += 1
            else:
                failed += 1
                print("MISMATCH", args[1:], out, want)
print(f"data-torch-batchsampler: {passed} passed, {failed} failed")
sys.exit(1 if failed or not passed else 0)
