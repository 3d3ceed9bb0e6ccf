#!/usr/bin/env python3
"""accel_data.h's dispatcher against a literal transcription of Accelerate's DataLoaderDispatcher (accelerate 1.x,
data_loader.py: _fetch_batches and __iter__), every process simulated here: the main process's batches are broadcast
whole, so process p's view is a function of the loader alone.

Runs `MPIRUN_SH P EXE` (test_data_dispatcher.c) with ACCEL_DISPATCH_OUT and compares every line each rank wrote.
  dispatcher_reference.py MPIRUN_SH EXE P
"""
import math
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def lens_from_c():
    src = open(os.path.join(HERE, "test_data_dispatcher.c")).read()
    lists = {m.group(1): [int(x) for x in m.group(2).split(",")]
             for m in re.finditer(r"static const int (L\d+)\[\] = \{([^}]*)\};", src)}
    order = re.findall(r"\{(L\d+), \d+\}", src)
    return [lists[name] for name in order]


def loader(lens):
    base = 0
    for n in lens:
        yield list(range(base, base + n))
        base += n


class Dispatcher:
    """DataLoaderDispatcher with batches as lists of rows; slice_tensors is a list slice"""

    def __init__(self, lens, P, p, split_batches, drop_last, skip_batches):
        self.lens, self.P, self.p = lens, P, p
        self.split_batches, self._drop_last, self.skip_batches = split_batches, drop_last, skip_batches
        self.end_of_dataloader, self.remainder, self.in_dataloader = False, -1, False

    def _fetch_batches(self, iterator):
        batches, batch = None, None
        try:
            if self.split_batches:
                batch = next(iterator)
            else:
                batches = []
                for _ in range(self.P):
                    batches.append(next(iterator))
                batch = sum(batches, [])
            batch_info = [batch, False]
        except StopIteration:
            batch_info = [None, True]
        self._stop_iteration = batch_info[1]
        if self._stop_iteration:
            if not self.split_batches and not self._drop_last:
                if len(batches) > 0:
                    batch = sum(batches, [])
                    batch_info = [batch, False]
                else:
                    batch_info = [None, True]
        return batch_info[0], batch_info

    def gradient_state_end_of_dataloader(self):
        """GradientState.end_of_dataloader: False when no dataloader is being iterated"""
        return self.end_of_dataloader if self.in_dataloader else False

    def __iter__(self):
        self.in_dataloader = True  # self.begin()
        self.end_of_dataloader, self.remainder = False, -1
        main_iterator = loader(self.lens)
        stop_iteration = False
        self._stop_iteration = False
        first_batch = None
        next_batch, next_batch_info = self._fetch_batches(main_iterator)
        batch_index = 0
        while not stop_iteration:
            batch, batch_info = next_batch, next_batch_info
            if not self._drop_last and first_batch is None:
                first_batch = None if batch is None else batch[0:self.P]
            if batch is None:
                self.in_dataloader = False
                raise ValueError("Batch does not contain any data")
            observed_batch_size = len(batch)
            batch_size = observed_batch_size // self.P
            stop_iteration = self._stop_iteration
            if not stop_iteration:
                next_batch, next_batch_info = self._fetch_batches(main_iterator)
                if self._stop_iteration and next_batch_info[0] is None:
                    stop_iteration = True
            if not self._drop_last and stop_iteration and observed_batch_size % self.P != 0:
                batch = batch + first_batch
                batch_size += 1
            batch = batch[self.p * batch_size:(self.p + 1) * batch_size]
            if stop_iteration:
                self.end_of_dataloader = True
                self.remainder = observed_batch_size
            if batch_index >= self.skip_batches:
                yield batch
            batch_index += 1
        self.in_dataloader = False  # self.end()


def expected(P, p):
    out = []
    for li, lens in enumerate(lens_from_c()):
        for split in (0, 1):
            for drop in (0, 1):
                for skip in (0, 1):
                    out.append(f"case {li} {split} {drop} {skip}")
                    d = Dispatcher(lens, P, p, split, drop, skip)
                    for _ in range(2):
                        try:
                            for b in d:
                                eod = int(d.end_of_dataloader)
                                out.append(f"batch {eod} {d.remainder if eod else -1} :" +
                                           "".join(f" {x}" for x in b))
                            out.append(f"end {int(d.gradient_state_end_of_dataloader())}")
                        except ValueError:
                            out.append("error")
    return out


def main():
    mpirun, exe, P = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, ACCEL_DISPATCH_OUT=tmp)
        proc = subprocess.run([mpirun, str(P), exe], env=env, timeout=200)
        if proc.returncode != 0:
            print(f"test_data_dispatcher failed with exit code {proc.returncode}")
            return 1
        got = [open(os.path.join(tmp, f"rank{p}.txt")).read().splitlines() for p in range(P)]
    failed = checked = 0
    for p in range(P):
        want = expected(P, p)
        for i in range(max(len(want), len(got[p]))):
            w = want[i] if i < len(want) else "<nothing>"
            g = got[p][i] if i < len(got[p]) else "<nothing>"
            checked += 1
            if w != g:
                failed += 1
                if failed < 10:
                    print(f"rank {p} line {i + 1}: {g!r} != reference {w!r}")
                break  # the rest of this rank's lines are shifted
    print(f"dispatcher_reference np{P}: {checked} lines, {failed} ranks differ")
    return 1 if failed or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
