#!/usr/bin/env python3
"""Independent reference for `accel shards`: Accelerate's BatchSamplerShard and IterableDatasetShard iteration
transcribed literally from docs/semantics.md §1-2 (Accelerate data_loader.py) as plain generators — no closed forms —
then compared with the JSON `accel shards` prints over a grid (N <= 200, B <= 8, P <= 5, every flag). `accel shards
--prepare` (accel_data_shard's default) is compared with prepare_data_loader's decision transcribed on top of them:
its split_batches sanity check first, then no sharding at all with one process (the plain DataLoader). Accelerate's
ValueError texts must appear verbatim in the CLI's message.

usage: ref_shards.py ACCEL_EXE [--full]   (default: edges of the grid, ~5k runs; --full: all of it, 128,640 runs)
Exit 0 when every case matches, 1 otherwise."""
import json
import random
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor


class ConfigError(Exception):
    """exact: the message is Accelerate's ValueError text (accel must print it verbatim)."""
    def __init__(self, msg, exact=True):
        super().__init__(msg)
        self.exact = exact


def batch_sampler(n, batch_size, drop_last, order=None):
    """torch.utils.data.BatchSampler over a sampler yielding `order` (default SequentialSampler(range(n)))."""
    batch = []
    for idx in (range(n) if order is None else order):
        batch.append(idx)
        if len(batch) == batch_size:
            yield batch
            batch = []
    if len(batch) > 0 and not drop_last:
        yield batch


class BatchSamplerShard:
    def __init__(self, n, batch_size, drop_last, num_processes, process_index, split_batches, even_batches, order=None):
        self.n = n
        self.order = order
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.num_processes = num_processes
        self.process_index = process_index
        self.split_batches = split_batches
        self.even_batches = even_batches
        if split_batches and batch_size % num_processes != 0:
            raise ConfigError(
                f"To use `BatchSamplerShard` in `split_batches` mode, the batch size ({batch_size}) "
                f"needs to be a round multiple of the number of processes ({num_processes}).")

    def batch_sampler(self):
        return batch_sampler(self.n, self.batch_size, self.drop_last, self.order)

    def __iter__(self):
        return self._iter_with_split() if self.split_batches else self._iter_with_no_split()

    def _iter_with_split(self):
        initial_data = []
        batch_length = self.batch_size // self.num_processes
        batch = []
        for idx, batch in enumerate(self.batch_sampler()):
            if idx == 0:
                initial_data = batch
            if len(batch) == self.batch_size:
                yield batch[batch_length * self.process_index: batch_length * (self.process_index + 1)]
        if not self.drop_last and len(initial_data) > 0 and len(batch) < self.batch_size:
            if not self.even_batches:
                if len(batch) > batch_length * self.process_index:
                    yield batch[batch_length * self.process_index: batch_length * (self.process_index + 1)]
            else:
                while len(initial_data) < self.batch_size:
                    initial_data += initial_data
                batch = batch + initial_data
                yield batch[batch_length * self.process_index: batch_length * (self.process_index + 1)]

    def _iter_with_no_split(self):
        initial_data = []
        batch_to_yield = []
        batch = []
        idx = -1
        for idx, batch in enumerate(self.batch_sampler()):
            if not self.drop_last and idx < self.num_processes:
                initial_data += batch
            if idx % self.num_processes == self.process_index:
                batch_to_yield = batch
            if idx % self.num_processes == self.num_processes - 1 and len(batch) == self.batch_size:
                yield batch_to_yield
                batch_to_yield = []
        if not self.drop_last and len(initial_data) > 0:
            if not self.even_batches:
                if len(batch_to_yield) > 0:
                    yield batch_to_yield
            else:
                if len(batch_to_yield) == self.batch_size:
                    yield batch_to_yield
                while len(initial_data) < self.num_processes * self.batch_size:
                    initial_data += initial_data
                if len(batch) == self.batch_size:
                    batch = []
                    idx += 1
                cycle_index = 0
                while idx % self.num_processes != 0 or len(batch) > 0:
                    end_index = cycle_index + self.batch_size - len(batch)
                    batch += initial_data[cycle_index:end_index]
                    if idx % self.num_processes == self.process_index:
                        yield batch
                    cycle_index = end_index
                    batch = []
                    idx += 1


class IterableDatasetShard:
    def __init__(self, n, batch_size, drop_last, num_processes, process_index, split_batches, order=None):
        self.order = order
        if split_batches and batch_size > 1 and batch_size % num_processes != 0:
            raise ConfigError(
                f"To use `IterableDatasetShard` in `split_batches` mode, the batch size ({batch_size}) "
                f"needs to be a round multiple of the number of processes ({num_processes}).")
        self.n = n
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.num_processes = num_processes
        self.process_index = process_index
        self.split_batches = split_batches

    def __iter__(self):
        real_batch_size = self.batch_size if self.split_batches else (self.batch_size * self.num_processes)
        process_batch_size = (self.batch_size // self.num_processes) if self.split_batches else self.batch_size
        process_slice = range(self.process_index * process_batch_size, (self.process_index + 1) * process_batch_size)
        first_batch = None
        current_batch = []
        for element in (range(self.n) if self.order is None else self.order):
            current_batch.append(element)
            if len(current_batch) == real_batch_size:
                for i in process_slice:
                    yield current_batch[i]
                if first_batch is None:
                    first_batch = current_batch.copy()
                current_batch = []
        if not self.drop_last and len(current_batch) > 0:
            if first_batch is None:
                first_batch = current_batch.copy()
            while len(current_batch) < real_batch_size:
                current_batch += first_batch
            for i in process_slice:
                yield current_batch[i]


def dataloader_batches(iterable, batch_size, drop_last):
    """torch DataLoader(iterable_dataset, batch_size, drop_last): consecutive chunks."""
    batch = []
    for x in iterable:
        batch.append(x)
        if len(batch) == batch_size:
            yield batch
            batch = []
    if batch and not drop_last:
        yield batch


def reference(n, b, p_count, split, even, drop, iterable, order=None):
    """(shards, lengths), or ConfigError. Lengths are the number of batches really yielded (accel's policy 1)."""
    shards = []
    for p in range(p_count):
        if iterable:
            if split and b == 1 and p_count > 1:
                # policy 2: Accelerate's per-process DataLoader gets batch_size 1 // P = 0; accel refuses
                raise ConfigError("split_batches with batch size 1", exact=False)
            shard = IterableDatasetShard(n, b, drop, p_count, p, split, order)
            per = b // p_count if split else b
            shards.append(list(dataloader_batches(iter(shard), per, drop)))
        else:
            shard = BatchSamplerShard(n, b, drop, p_count, p, split, even, order)
            shards.append([list(x) for x in shard])
    return shards, [len(s) for s in shards]


def prepare_reference(n, b, p_count, split, even, drop, iterable, order=None):
    """What Accelerator.prepare(DataLoader(...)) iterates on each process (prepare_data_loader, dispatch_batches
    False): the sanity check, then "No change if no multiprocess" — with one process the DataLoader itself, whose
    batch_size is B // 1 with split_batches."""
    if split and b > 1 and b % p_count != 0:
        raise ConfigError(
            f"To use a `DataLoader` in `split_batches` mode, the batch size ({b}) "
            f"needs to be a round multiple of the number of processes ({p_count}).")
    if p_count == 1:
        source = range(n) if order is None else order
        if iterable:
            batches = list(dataloader_batches(iter(source), b, drop))
        else:
            batches = [list(x) for x in batch_sampler(n, b, drop, order)]
        return [batches], [len(batches)]
    return reference(n, b, p_count, split, even, drop, iterable, order)


def run_case(exe, case):
    n, b, p, split, even, drop, iterable, prepare = case
    args = [exe, "shards", "--dataset-len", str(n), "--batch-size", str(b), "--num-processes", str(p),
            "--even-batches", str(int(even))]
    if split:
        args.append("--split-batches")
    if drop:
        args.append("--drop-last")
    if iterable:
        args.append("--iterable")
    if prepare:
        args.append("--prepare")
    error = None
    try:
        want = (prepare_reference if prepare else reference)(n, b, p, split, even, drop, iterable)
    except ConfigError as e:
        want, error = None, e
    r = subprocess.run(args, capture_output=True, text=True)
    if want is None:
        if r.returncode != 2:
            return f"{args[1:]}: expected exit 2 (invalid combination), got {r.returncode}: {r.stdout[:200]}"
        if error.exact and str(error) not in r.stderr:
            return f"{args[1:]}: expected Accelerate's message {str(error)!r}, got {r.stderr.strip()[:300]!r}"
        return None
    if r.returncode != 0:
        return f"{args[1:]}: exit {r.returncode}: {r.stderr.strip()[:300]}"
    try:
        got = json.loads(r.stdout)
    except ValueError as e:
        return f"{args[1:]}: output is not JSON ({e}): {r.stdout[:200]}"
    if set(got) != {"shards", "lengths"}:
        return f"{args[1:]}: keys {sorted(got)}"
    if got["shards"] != want[0] or got["lengths"] != want[1]:
        exp = json.dumps({"shards": want[0], "lengths": want[1]})
        return f"{args[1:]}:\n  accel    {r.stdout.strip()[:400]}\n  expected {exp[:400]}"
    return None


def grid(full):
    rng = random.Random(20240520)
    cases = []
    for b in range(1, 9):
        for p in range(1, 6):
            if full:
                ns = range(0, 201)
            else:
                # the edges of every rule (around multiples of B and of the global batch) plus a random N
                g = b * p
                ns = {0, 1, b + 1, g - 1, g + 1, 2 * g - 1, 2 * g + b + 1, rng.randrange(0, 201)}
                ns = sorted(x for x in ns if 0 <= x <= 200)
            for n in ns:
                for split in (False, True):
                    for even in (False, True):
                        for drop in (False, True):
                            for iterable in (False, True):
                                cases.append((n, b, p, split, even, drop, iterable, False))
                                # prepare(): every one-process case and every split refusal; a sample of the rest
                                if p == 1 or (split and b % p) or rng.random() < 0.1:
                                    cases.append((n, b, p, split, even, drop, iterable, True))
    return cases


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    exe = sys.argv[1]
    full = "--full" in sys.argv[2:]
    cases = grid(full)
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda c: run_case(exe, c), cases))
    failures = [r for r in results if r]
    for f in failures[:20]:
        print("MISMATCH", f)
    print(f"data-ref-shards: {len(cases) - len(failures)} passed, {len(failures)} failed")
    return 1 if failures or not cases else 0


if __name__ == "__main__":
    sys.exit(main())
