#!/usr/bin/env python3
"""Independent reference for the shuffled sampler: the algorithm documented at the top of accel_data.h (Philox4x32-10
round keys, unbalanced Feistel network, cycle walking), written here from that text in plain Python. Checks
`accel shards --shuffle --seed S --epoch E` against it — the order itself (P=1, B=1) and whole shuffled shards (the
literal Accelerate generators of ref_shards.py run over the Python permutation).

usage: ref_permutation.py ACCEL_EXE"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_shards  # noqa: E402

M32 = 0xFFFFFFFF
M64 = 0xFFFFFFFFFFFFFFFF


def philox4x32_10(ctr, key):
    c0, c1, c2, c3 = ctr
    k0, k1 = key
    for _ in range(10):
        p0 = 0xD2511F53 * c0
        p1 = 0xCD9E8D57 * c2
        hi0, lo0 = p0 >> 32, p0 & M32
        hi1, lo1 = p1 >> 32, p1 & M32
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
        k0 = (k0 + 0x9E3779B9) & M32
        k1 = (k1 + 0xBB67AE85) & M32
    return c0, c1, c2, c3


def draw4(seed, stream, index):
    ctr = (index & M32, index >> 32 & M32, stream & M32, stream >> 32 & M32)
    return philox4x32_10(ctr, (seed & M32, seed >> 32 & M32))


def permutation(n, seed, epoch):
    if n <= 1:
        return list(range(n))
    k = 0
    while (1 << k) < n:
        k += 1
    lo_bits = k // 2
    lo_mask = (1 << lo_bits) - 1
    hi_mask = (1 << (k - lo_bits)) - 1
    keys = []
    for r in range(6):
        w = draw4(seed, epoch, r)
        keys.append(w[0] | w[1] << 32)

    def f(v, key):
        h = ((v ^ key) * 0x9E3779B97F4A7C15) & M64
        return h ^ (h >> 29)

    def one_pass(x):
        lo, hi = x & lo_mask, x >> lo_bits
        for r in range(0, 6, 2):
            lo ^= f(hi, keys[r]) & lo_mask
            hi ^= f(lo, keys[r + 1]) & hi_mask
        return hi << lo_bits | lo

    out = []
    for i in range(n):
        x = one_pass(i)
        while x >= n:
            x = one_pass(x)
        out.append(x)
    return out


def run(exe, n, b, p, seed, epoch, split=False, even=True, drop=False, iterable=False):
    args = [exe, "shards", "--dataset-len", str(n), "--batch-size", str(b), "--num-processes", str(p),
            "--even-batches", str(int(even)), "--shuffle", "--seed", str(seed), "--epoch", str(epoch)]
    args += (["--split-batches"] if split else []) + (["--drop-last"] if drop else []) + (["--iterable"] if iterable else [])
    r = subprocess.run(args, capture_output=True, text=True, check=True)
    return json.loads(r.stdout)


def main():
    exe = sys.argv[1]
    passed = failed = 0
    for n in [0, 1, 2, 3, 5, 16, 17, 100, 1000, 4099]:
        for seed, epoch in [(0, 0), (42, 0), (42, 1), (2**40 + 7, 3)]:
            perm = permutation(n, seed, epoch)
            got = run(exe, n, 1, 1, seed, epoch, even=False)
            if got["shards"] == [[[x] for x in perm]] and sorted(perm) == list(range(n)):
                passed += 1
            else:
                failed += 1
                print("ORDER MISMATCH", n, seed, epoch, str(got)[:200], perm[:20])
    for n in [7, 10, 23, 64, 101]:
        for b in [1, 2, 3, 4]:
            for p in [1, 2, 3]:
                for split, even, drop, iterable in [(False, True, False, False), (False, False, False, False),
                                                    (True, True, False, False), (False, True, True, False),
                                                    (False, True, False, True)]:
                    if split and b % p:
                        continue
                    perm = permutation(n, 9, 2)
                    want = ref_shards.reference(n, b, p, split, even, drop, iterable, order=perm)
                    got = run(exe, n, b, p, 9, 2, split, even, drop, iterable)
                    if got["shards"] == want[0] and got["lengths"] == want[1]:
                        passed += 1
                    else:
                        failed += 1
                        print("SHARD MISMATCH", n, b, p, split, even, drop, iterable)
    print(f"data-ref-permutation: {passed} passed, {failed} failed")
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
