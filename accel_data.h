/* accel_data.h — which samples each process sees, with Hugging Face Accelerate's exact sharding semantics, plus
   llm.c token-shard files and batch staging to the device. Depends only on accel.h.

   CONTENTS
     WHAT IT DOES
     USAGE                        the resume-safe loop
     ONE PROCESS
     SHARDING                     the closed form of Accelerate's samplers
     CONFIGURATION AGREEMENT
     PROCESS MESH                 sharding by a mesh's dp group
     EPOCHS AND RESUME
     RANDOM SAMPLER               the algorithm
     GRADIENTSTATE BOOKKEEPING
     FILES                        llm.c token shards
     DISPATCHER                   dispatch_batches=True: the main process reads, every process gets its slice
     MEMORY
     THREADS AND STREAMS
     DIFFERENCES FROM ACCELERATE

   WHAT IT DOES
     accel never loads your samples: it hands each process the dataset *indices* of its batches (your code reads
     the samples), computed lazily in O(1) memory — batch k of process p is a closed form, so a 10^9-sample dataset
     costs nothing and resuming mid-epoch is O(1).
       - accel_data_sampler: sequential or seeded-random order over N samples. The permutation depends only on
         (seed, epoch): identical on every rank and every world size.
       - accel_data_shard: what Accelerator.prepare(dataloader) iterates on process p of P — Accelerate's
         BatchSamplerShard (map-style datasets) or IterableDatasetShard + the per-process DataLoader (iterable
         datasets), and with one process the plain DataLoader (prepare() does not shard then). split_batches,
         even_batches (final batches completed by looping back to the start of the epoch), drop_last. The shard
         owns its epoch and its position in it (state save/load for checkpoints, skip_first_batches) and reports
         each epoch's begin / last batch / end to the Accelerator (accel_dataloader_begin/_last_batch/_end in
         accel.h: acc->end_of_dataloader and acc->remainder, which accumulation and gather_for_metrics use).
       - accel_data_token_file: llm.c token shards (GPT-2 uint16 / Llama-3 uint32), mmap'd, validated first.
       - accel_data_seq_loader: each rank gets disjoint (B, T+1) token windows of each global batch.
       - accel_data_stager: pinned host buffers + cudaMemcpyAsync on acc->stream, a ring of 2 (8 for small batches).

   USAGE — the resume-safe loop: the shard counts the epochs, a checkpoint restores the epoch and the position
       accel_data_shard sh;
       accel_data_shard_desc d = {0};                // zero = default: P/p from acc, even_batches on
       d.dataset_len = n; d.batch_size = 32; d.shuffle = 1; d.seed = 42;
       if (accel_data_shard_init(&acc, &sh, &d) != ACCEL_OK) die(accel_last_error(&acc));   // collective
       accel_ckpt_register(ck, "sampler", accel_data_shard_state_save, accel_data_shard_state_load, &sh);
       ...accel_ckpt_load_state(ck, NULL) (ACCEL_ERR_NOT_FOUND: nothing to resume, start fresh)...
       int64_t *idx = malloc(sizeof *idx * accel_data_shard_batch_size(&sh)), count;
       while (accel_data_shard_epoch(&sh) < epochs) {
           while (accel_data_shard_next(&sh, idx, &count) == ACCEL_OK && count > 0) {
               load_samples(idx, count);                // acc.end_of_dataloader is 1 on the last batch
               accel_accumulate_begin(&acc); ... ; accel_accumulate_end(&acc);
               // after an all-gather of per-sample metric rows (rank order), keep the real ones:
               keep = accel_data_gather_real_rows(&acc, gathered_rows);
           }                                            // count 0: the epoch is over and the shard advanced it
       }
       accel_data_shard_deinit(&sh);
     Do not count epochs yourself: a `for (epoch = 0; ...)` counter starts again at 0 after a resume and trains
     too long. Loops that call accel_data_shard_set_epoch(&sh, accel_data_shard_epoch(&sh)) at the top of every
     epoch (as PyTorch loops call sampler.set_epoch) resume correctly too: see EPOCHS AND RESUME.

   ONE PROCESS — as prepare(): with P = 1 Accelerate does not shard, the plain DataLoader yields batches k*B ..
     of the sampler's order, the last one short unless drop_last (N=5, B=2: [0,1],[2,3],[4]), for map-style and
     iterable datasets alike, and remainder = N % B. desc.batch_sampler_shard models BatchSamplerShard /
     IterableDatasetShard themselves instead, which pad at P = 1 too ([0,1],[2,3],[4,0]); `accel shards` sets it.

   SHARDING — the closed form (checked against a literal transcription of Accelerate's generators, all flags)
     Let s(i) be the sampler's i-th index, b the per-process batch size (B//P with split_batches, else B),
     G = P*b the global batch (B with split, else B*P) and D = min(N, G). Process p's batch k holds the positions
     q = k*G + p*b + j (j < b) of the epoch's stream; position q is s(q) if q < N, else the padding s((q-N) mod D)
     (Accelerate's "initial_data" — the first P batches, or the first batch with split_batches, doubled until long
     enough — read with a cursor that never resets). Number of batches of process p:
       drop_last: floor(N/G);  even_batches: ceil(N/G) (every batch full);
       neither: the k with k*G + p*b < N (the last one may be short: min(b, N - k*G - p*b) indices).
     This covers BatchSamplerShard with and without split_batches (docs/semantics.md §1). Iterable
     (IterableDatasetShard, then DataLoader(batch_size=b, drop_last); §2): the same as even_batches with the given
     drop_last — an iterable shard always loops back, whatever even_batches says. One process without
     batch_sampler_shard: drop_last as above, else the "neither" rule with P = 1, whatever even_batches and
     iterable say. When there is no batch at all (N=0, or drop_last with N < G) every process gets nothing.
     Errors (Accelerate's ValueError text, ACCEL_ERR_INVALID_ARGUMENT), in prepare()'s order: split_batches with
     B > 1 and B % P != 0 → prepare()'s "To use a `DataLoader` in `split_batches` mode, ..." check; then, with
     P > 1, BatchSamplerShard's own check rejects the B = 1 that prepare() let through, and an iterable shard
     with B = 1 is refused (policy 2). With batch_sampler_shard only the shard classes' checks apply, with their
     messages ("To use `BatchSamplerShard` ..." / "To use `IterableDatasetShard` ...").

   CONFIGURATION AGREEMENT (at init)
     With desc.num_processes 0 (P and p from acc) accel_data_shard_init is collective: one small all-gather checks
     that every rank has the same dataset_len, batch_size, split_batches, even_batches, drop_last, iterable,
     shuffle and seed; a difference fails on every rank with ACCEL_ERR_MISMATCH naming the field and every rank's
     value. (Otherwise a rank with another batch size trains on wrong shards and the failure comes much later, in a
     collective whose sizes differ.) accel_data_seq_init checks the number of files, the total number of tokens,
     batch_size, seq_len, shuffle and seed the same way. An explicit desc.num_processes (sharding computed without
     an Accelerator, as `accel shards` does) skips the check, unless desc.collective; so does a run without a host
     process group.

   PROCESS MESH (accel_collectives.h's accel_coll_mesh)
     With tensor/context/pipeline parallelism the batches are split over the mesh's data-parallel group ("dp" =
     dp_replicate x dp_shard), not the world: ranks that differ only in tp/cp/pp get the same batches. Pass the
     group's size and rank, and keep the world-wide agreement with desc.collective (every rank calls init):
       accel_coll *dp = accel_coll_mesh_comm(mesh, ACCEL_COLL_MESH_DP);
       d.num_processes = accel_coll_size(dp); d.process_index = accel_coll_rank(dp); d.collective = 1;
     (Accelerate's prepare_data_loader with a ParallelismConfig does the same.) The sequence loader likewise.

   EPOCHS AND RESUME
     The shard owns its epoch (accel_data_shard_epoch, starts at 0) and its position (batches consumed in the
     epoch). The next() after the epoch's last batch returns count 0, ends the epoch and advances it (reshuffles).
     accel_data_shard_set_epoch(s, e) with e equal to the current epoch before that epoch's first next() keeps
     the position (the one state_load or skip_first_batches set); any other e, or the current one once the epoch
     is being iterated, starts epoch e at its first batch. state_save/state_load store (epoch, position) and
     implement accel.h's accel_state_save_fn / accel_state_load_fn, so the shard registers with the checkpointer
     as it is; a state of another configuration (dataset_len, batch_size, the flags) is refused with both values in
     the shard's acc ("shard state: saved for batch_size 8, this shard has 4"). The sequence loader works the same
     way (accel_data_seq_epoch).
     Another number of processes resumes by global samples consumed: the saved (rank 0's) position k on P0
     processes means S = k*G0 samples of the epoch's stream were consumed (G0 = the global batch then); this run
     starts at global batch floor(S / G), G its own global batch — the count a user of Accelerate's
     skip_first_batches computes, rounded down so that no sample of the epoch is skipped: up to G - 1 samples of
     the saving run's last global batch are seen again (logged at info). The stream is the same (the permutation
     depends on seed and epoch only), so the remaining samples are exactly those an uninterrupted run would see.
     A saved epoch that was complete stays complete. (With split_batches G = batch_size on any P.)

   RANDOM SAMPLER — the algorithm (any implementation can reproduce it)
     n <= 1: identity. Else k = ceil(log2 n) bits, split into lo = floor(k/2) bits and hi = k - lo bits. Round keys
     key[r] = w[0] | w[1] << 32 with w = accel_rng_draw4(seed, epoch, r) (Philox4x32-10; stream = epoch, index = r),
     r = 0..5. One pass over x < 2^k (accel_data_feistel_pass): for r = 0, 2, 4: lo ^= F(hi, key[r]) & lo_mask;
     hi ^= F(lo, key[r+1]) & hi_mask (an unbalanced Feistel network; each half-round is a bijection), F(v, key) =
     h ^ (h >> 29) with h = (v ^ key) * 0x9E3779B97F4A7C15, all arithmetic mod 2^64 (accel_data_feistel_round).
     Index i of the epoch's permutation: x = i; repeat x = pass(x) until x < n (cycle walking; the domain is < 2n,
     so < 2 passes on average). O(1) time and memory per index, on CPU or GPU (ACCEL_HD).

   GRADIENTSTATE BOOKKEEPING (docs/semantics.md §3; the list of active loaders lives in acc, see accel.h)
     The first accel_data_shard_next of an epoch is Accelerate's begin(): accel_dataloader_begin(acc, shard,
     remainder) with remainder = N % G (the number of real samples in the last global batch, 0 = full), or -1
     with drop_last. The call that returns the last batch sets acc->end_of_dataloader = 1 (Accelerate iterates one
     ahead); the call after it returns count 0 and ends the loader (accel_dataloader_end). acc's two fields follow
     the innermost active loader of that acc (an eval loop inside a training epoch) and are 0 / -1 when none is
     active. accel_data_shard_end abandons an epoch early (the epoch is not advanced); accel_data_shard_deinit ends
     it too: call one of them before a shard that is in the middle of an epoch goes out of scope, or its entry
     stays in acc's list (acc only compares the address, never reads the shard, but mirrors the stale entry while
     it is the innermost). Without an acc there is no bookkeeping. The sequence loader reports the same way
     (remainder -1: its tail is dropped).

   FILES
     Token shard (llm.c): 256 x int32 little-endian header, then tokens. GPT-2: magic 20240520, version 1, uint16;
     Llama-3: magic 20240801, version 7, uint32; header[2] = ntok >= 0; the size must be exactly 1024 + ntok*width.
     The header is validated before any other byte is trusted (ACCEL_ERR_FORMAT naming the problem); 64-bit
     offsets (files >= 4 GiB work). Sequence loader: window w of a file is tokens [w*T, w*T + T] (T+1 tokens;
     consecutive windows overlap by one token, like llm.c's B*T+1 reads); the windows of all files are numbered in
     file order; a global batch is P*B windows and rank r takes rows r*B .. r*B+B-1 of it; an epoch has
     floor(W / (P*B)) global batches (the tail is dropped, as llm.c does). shuffle permutes the W windows with the
     sampler above for (seed, epoch). Without shuffle the layout is llm.c's (rank r reads at r*B*T in its chunk).
     Each row is widened to int32 in one pass straight from the mapping (no staging copy), requesting the bytes
     2 KiB ahead — the next row's first ones near a row's end — so the loader reads at about `cat` speed.

   DISPATCHER
     DataLoaderConfiguration(dispatch_batches=True) / DataLoaderDispatcher. Only the main process reads the
     underlying loader (desc.fetch: batches of any number of rows of row_bytes, e.g. variable-length or streaming
     sources); each global batch is broadcast over the host group and every process takes its slice. Accelerate's
     rule (data_loader.py), which tests/mpi/data/dispatcher_reference.py transcribes literally:
       - a global batch is one loader batch (split_batches) or P consecutive loader batches concatenated; when the
         loader ends inside a group of P, the batches read so far are still a global batch unless drop_last;
       - of a global batch of n rows, process p gets rows [p*b, (p+1)*b) with b = n / P (rounded down: in a middle
         batch with n % P != 0 the last n % P rows go to nobody, as in Accelerate);
       - the last global batch, when n % P != 0 and not drop_last, is extended by the first min(P, n0) rows of the
         epoch's first global batch and b grows by 1 (a slice past the end is shorter);
       - the last batch is known one batch ahead (the next global batch is read before this one is handed out):
         acc->end_of_dataloader is 1 with it and acc->remainder = its n (the real rows of what gather collects);
       - skip_batches global batches are read and not handed out at the start of every epoch;
       - a loader that ends before a first global batch (empty, or a dropped partial group) is Accelerate's
         ValueError "Batch does not contain any data": ACCEL_ERR_STATE on every process.
     A main-process fetch error fails every process (ACCEL_ERR_REMOTE elsewhere). A process that dies or hangs in
     the middle of an epoch (the main one included) fails next() on every other process, never a short epoch:
     over the TCP store (torchrun, accel launch) with an error naming it — at once when it died ("no frame from
     rank 1: the connection was closed"), at the deadline (ACCEL_COLLECTIVE_TIMEOUT / ACCEL_TRAIN_TIMEOUT) when it
     hangs ("rank(s) 1 did not reach the collective within 5.0 s"). Under mpirun, Open MPI and MPICH end the whole
     job as soon as a process is killed and their launcher names it (Open MPI: "process rank 1 ... exited on signal
     9"; MPICH: by pid); a launcher that keeps the others running (Open MPI's --enable-recovery) leaves them the
     deadline's ACCEL_ERR_TIMEOUT, which cannot name the rank (MPI without ULFM does not say who is missing).
     Device buffers (a CUDA build, acc on a GPU; else create fails: ACCEL_ERR_INVALID_ARGUMENT on a CPU run,
     ACCEL_ERR_UNSUPPORTED without nvcc): desc.device_rows — the loader's rows are device memory, copied to the main
     process's host buffer before its next fetch (the batch travels over the host group); desc.device_out — next()
     copies the slice into device memory on acc->stream and returns without waiting: kernels on acc->stream see it,
     other streams wait for acc->stream first; the host buffer is not touched again until that copy is done.
     Differences: the global batch travels over the host group, not NCCL; one contiguous row per sample instead of
     a nested structure of tensors; the rows need no structure broadcast first (the header carries the row count).

   MEMORY
     The sequence loader's tables go through acc's host allocator; the stager's buffers through accel_pinned_alloc
     and accel_device_alloc, one of each per slot (on a CPU run, or without an acc, two host buffers from
     accel_host_alloc).

   THREADS AND STREAMS
     Objects are used by one thread at a time; distinct objects are independent, except that a shard or loader
     iterated with an acc reports to that acc's list of active loaders: it follows acc's rule (one thread at a
     time per Accelerator). The stager enqueues copies on acc->stream and waits (cudaEventSynchronize) only before
     refilling a host buffer whose copy is in flight.

   DIFFERENCES FROM ACCELERATE (deliberate; docs/semantics.md policies 1, 2 and 4)
     1. accel_data_shard_len is the number of batches the process really gets. Accelerate's __len__ says L with
        split_batches && !even_batches && !drop_last (processes past the short tail get L-1), and
        IterableDatasetShard.__len__ is wrong under split_batches.
     2. An iterable shard with split_batches, batch_size 1 and P > 1 (Accelerate silently yields nothing anywhere) is
        refused with ACCEL_ERR_INVALID_ARGUMENT.
     4. skip_first_batches keeps the remainder (Accelerate loses it, so gather_for_metrics keeps padding duplicates
        in a resumed epoch).
     - Ranks must agree on the shard's configuration (checked at init, see above); Accelerate checks nothing.
     - The random permutation is not torch.randperm's (same contract: a function of (seed, epoch) only, identical on
       every rank). remainder for an iterable shard is N % G (Accelerate takes len() of the shard, which is the
       per-process length, or gets -1 when the dataset has no len). skip_first_batches applies to the current epoch
       only (Accelerate's SkipBatchSampler skips on every pass of the returned loader, which is used for one
       resumed epoch). The sequence loader's windows never span two files; llm.c's loader moves to the next file
       when a chunk does not fit.
     - Not a difference, but the shard classes differ here: with one process the shard is prepare()'s plain
       DataLoader (see ONE PROCESS), not a BatchSamplerShard that pads the last batch.
*/
#ifndef ACCEL_DATA_H_INCLUDED
#define ACCEL_DATA_H_INCLUDED
#include "accel.h"
#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------------------ sampler */
#define ACCEL_DATA_FEISTEL_ROUNDS 6

typedef struct accel_data_sampler {
    int64_t n;        /* dataset length */
    int shuffle;      /* 0 = sequential */
    uint64_t seed;
    int64_t epoch;
    int lo_bits;
    uint64_t lo_mask, hi_mask;
    uint64_t keys[ACCEL_DATA_FEISTEL_ROUNDS];
} accel_data_sampler;

/* 0 <= n <= 2^62; shuffle 0 = sequential. Epoch starts at 0. A value object (nothing to release). */
ACCEL_API accel_result accel_data_sampler_init(accel *acc, accel_data_sampler *s, int64_t n, int shuffle,
                                               uint64_t seed);
ACCEL_API void accel_data_sampler_set_epoch(accel_data_sampler *s, int64_t epoch);

/* The round function F: one multiply (the high half folded down). */
static ACCEL_INLINE ACCEL_HD uint64_t accel_data_feistel_round(uint64_t v, uint64_t key) {
    uint64_t h = (v ^ key) * 0x9E3779B97F4A7C15ull;
    return h ^ (h >> 29);
}

/* One Feistel pass over [0, 2^k). */
static ACCEL_INLINE ACCEL_HD uint64_t accel_data_feistel_pass(const accel_data_sampler *s, uint64_t x) {
    uint64_t lo = x & s->lo_mask, hi = x >> s->lo_bits;
    int r;
    for (r = 0; r < ACCEL_DATA_FEISTEL_ROUNDS; r += 2) {
        lo ^= accel_data_feistel_round(hi, s->keys[r]) & s->lo_mask;
        hi ^= accel_data_feistel_round(lo, s->keys[r + 1]) & s->hi_mask;
    }
    return (hi << s->lo_bits) | lo;
}

/* Index i (0 <= i < n) of the epoch's order. */
static ACCEL_INLINE ACCEL_HD int64_t accel_data_sampler_index(const accel_data_sampler *s, int64_t i) {
    uint64_t x = (uint64_t)i;
    if (!s->shuffle || s->n <= 1) return i;
    do { x = accel_data_feistel_pass(s, x); } while (x >= (uint64_t)s->n);
    return (int64_t)x;
}

/* Indices first .. first+count-1 of the order into out (8 independent lanes at a time: the round function is
   latency-bound, so interleaving gives the CPU's multipliers parallel work). ACCEL_ERR_INVALID_ARGUMENT (nothing
   written) for a NULL sampler or out, or a range outside [0, n): the permutation is only defined there. */
ACCEL_API accel_result accel_data_sampler_fill(const accel_data_sampler *s, int64_t first, int64_t count, int64_t *out);

/* ------------------------------------------------------------------------------------------------- shards */
typedef struct accel_data_shard_desc {
    int64_t dataset_len;       /* N >= 0 (an iterable: the number of items it yields) */
    int64_t batch_size;        /* B >= 1: the DataLoader's batch_size (the global batch with split_batches) */
    int num_processes;         /* 0 → P and p from acc (1 and 0 without acc); init is then collective (agreement) */
    int process_index;         /* used when num_processes > 0 (no agreement check) */
    accel_toggle split_batches; /* ACCEL_DEFAULT → acc->desc.split_batches (off without acc) */
    int no_even_batches;       /* nonzero: Accelerate's even_batches=False (the default is True) */
    int drop_last;             /* nonzero: the DataLoader's drop_last */
    int iterable;              /* nonzero: IterableDatasetShard + per-process DataLoader semantics */
    int shuffle;               /* nonzero: seeded random sampler (accel_data_sampler) */
    int batch_sampler_shard;   /* nonzero: model BatchSamplerShard / IterableDatasetShard even with P = 1 (they pad
                                  the last batch) and only their checks; default: prepare()'s behaviour */
    uint64_t seed;             /* the sampler's seed (the same on every rank) */
    int collective; /* nonzero with num_processes > 0 and acc: init is still collective over acc's whole group
                                  (the agreement) — for a process mesh's data-parallel group (see PROCESS MESH) */
} accel_data_shard_desc;

/* Fields are readable; change them only through functions. */
typedef struct accel_data_shard {
    accel_data_shard_desc desc; /* resolved: num_processes, process_index, split_batches (ON/OFF) explicit */
    accel_data_sampler sampler;
    accel *acc;                 /* bookkeeping target and error sink (may be NULL) */
    int64_t n, b, g, pad_mod;   /* N, per-process batch, global batch, min(N, G) */
    int num_processes, process_index;
    int padded;                 /* every batch is full (even_batches / iterable when sharded, without drop_last) */
    int active;                 /* between the epoch's first next() and its end (in acc's list of loaders) */
    int64_t num_batches;        /* this process's batches per epoch (the real count) */
    int64_t epoch;
    int64_t position;           /* batches consumed (or skipped) in this epoch */
} accel_data_shard;

/* Collective when acc is given and desc->num_processes is 0 or desc->collective (the agreement above). On failure s is
   unchanged. */
ACCEL_API accel_result accel_data_shard_init(accel *acc, accel_data_shard *s, const accel_data_shard_desc *desc);
/* Ends the shard's bookkeeping (an epoch in progress leaves acc's list) and zeroes it; safe on a zeroed shard. */
ACCEL_API void accel_data_shard_deinit(accel_data_shard *s);
ACCEL_API int64_t accel_data_shard_len(const accel_data_shard *s);        /* batches this process really gets */
ACCEL_API int64_t accel_data_shard_batch_size(const accel_data_shard *s); /* b: the most indices in one batch */
ACCEL_API int64_t accel_data_shard_batch_len(const accel_data_shard *s, int64_t k); /* 0 when k is out of range */
/* N % G, or -1 with drop_last (Accelerate's remainder: real samples in the last global batch, 0 = full). */
ACCEL_API int accel_data_shard_remainder(const accel_data_shard *s);
/* Batch k of this epoch (random access, no bookkeeping): out gets *count <= b indices. */
ACCEL_API accel_result accel_data_shard_get_batch(const accel_data_shard *s, int64_t k, int64_t *out, int64_t *count);
/* The iterator: next batch into out (*count > 0), or *count = 0 at the end of the epoch (which then ends the
   dataloader and advances the epoch). Reports to acc's list of loaders (see the top). */
ACCEL_API accel_result accel_data_shard_next(accel_data_shard *s, int64_t *out, int64_t *count);
/* Abandon the current epoch (like leaving the loop early): the shard leaves acc's list, the next next() starts
   the same epoch again at its first batch (the epoch is not advanced). */
ACCEL_API void accel_data_shard_end(accel_data_shard *s);
/* The current epoch (0 after init; +1 each time an epoch ends; restored by state_load). */
ACCEL_API int64_t accel_data_shard_epoch(const accel_data_shard *s);
/* Epoch `epoch` (reseeds the permutation). The current epoch before its first next(): keeps the position (restored
   or skipped); otherwise ends an epoch in progress and starts `epoch` at its first batch. */
ACCEL_API accel_result accel_data_shard_set_epoch(accel_data_shard *s, int64_t epoch);
/* Resume: the next accel_data_shard_next of this epoch returns batch n (per-process count); O(1). Only before the
   epoch's first next(). The remainder is kept (policy 4). */
ACCEL_API accel_result accel_data_shard_skip_first_batches(accel_data_shard *s, int64_t n);

/* Checkpoint state (accel_state_save_fn / accel_state_load_fn of accel.h; shard is an accel_data_shard *).
   Little-endian, fixed layout: "ACDS", u32 version 1, i64 N, i64 B, i32 P, i32 p, u32 flags (1 split, 2 even,
   4 drop_last, 8 iterable, 16 shuffle, 32 batch_sampler_shard), u32 0, u64 seed, i64 epoch, i64 position.
   save: buf NULL or cap < ACCEL_DATA_SHARD_STATE_BYTES → *size = ACCEL_DATA_SHARD_STATE_BYTES, ACCEL_OK.
   load: the configuration (N, B, P, flags) must match the shard's (ACCEL_ERR_MISMATCH naming the field); seed,
   epoch and position are restored (an epoch in progress is ended). Nothing changes on error. */
#define ACCEL_DATA_SHARD_STATE_BYTES 64
ACCEL_API accel_result accel_data_shard_state_save(void *shard, void *buf, size_t cap, size_t *size);
ACCEL_API accel_result accel_data_shard_state_load(void *shard, const void *buf, size_t size);
/* The bytes decoded without a shard (tools: `accel ckpt ls`): the parser accel_data_shard_state_load uses, with its
   format checks (size, magic, version, ranges, reserved bits: ACCEL_ERR_FORMAT naming the problem); whether the
   configuration fits a shard is load's business. acc may be NULL. */
typedef struct accel_data_shard_state_info {
    int64_t dataset_len, batch_size;
    int32_t num_processes, process_index;
    uint32_t flags;           /* 1 split_batches, 2 even_batches, 4 drop_last, 8 iterable, 16 shuffle,
                                 32 batch_sampler_shard */
    uint64_t seed;
    int64_t epoch, position;  /* the next batch of that epoch (per-process count) */
} accel_data_shard_state_info;
ACCEL_API accel_result accel_data_shard_state_decode(accel *acc, const void *buf, size_t size,
                                                     accel_data_shard_state_info *out);

/* gather_for_metrics: of `gathered_rows` rows all-gathered in rank order, how many are real samples. */
ACCEL_API int64_t accel_data_real_rows(int end_of_dataloader, int remainder, int64_t gathered_rows);
ACCEL_API int64_t accel_data_gather_real_rows(const accel *acc, int64_t gathered_rows); /* uses acc's fields */

/* ---------------------------------------------------------------------------- dispatcher (dispatch_batches=True) */
/* The main process's loader: the next batch of the underlying DataLoader as *nrows rows of desc.row_bytes at *rows
   (valid until the next call), or *end = 1 when it is exhausted. Called on the main process only. */
typedef accel_result (*accel_data_fetch_fn)(void *user, const void **rows, int64_t *nrows, int *end);
typedef struct accel_data_dispatcher_desc {
    size_t row_bytes;            /* bytes of one sample (every field of the batch, packed): >= 1 */
    accel_toggle split_batches;  /* ACCEL_DEFAULT → acc->desc.split_batches */
    int drop_last;               /* the DataLoader's drop_last */
    int64_t skip_batches;        /* batches not handed out at the start of every epoch (skip_first_batches) */
    accel_data_fetch_fn fetch;   /* the main process's loader (ignored on the others) */
    void *user;
    int device_rows;             /* nonzero: fetch's rows are device memory of acc's device (see DISPATCHER) */
    int device_out;              /* nonzero: next()'s out is device memory of acc's device */
} accel_data_dispatcher_desc;
typedef struct accel_data_dispatcher accel_data_dispatcher;
/* Local (nothing is communicated); every process must then call next on the same steps. */
ACCEL_API accel_result accel_data_dispatcher_create(accel *acc, const accel_data_dispatcher_desc *desc,
                                                    accel_data_dispatcher **out);
ACCEL_API void accel_data_dispatcher_destroy(accel_data_dispatcher *d); /* ends an epoch in progress */
/* Collective: this process's slice of the next global batch into out (cap_rows rows of row_bytes): *nrows rows
   (0 is possible), *end = 0; or *end = 1 and *nrows = 0 at the end of the epoch (the next call starts the next
   one). Reports begin / last batch (remainder = the last global batch's rows) / end to acc's list of loaders. */
ACCEL_API accel_result accel_data_dispatcher_next(accel_data_dispatcher *d, void *out, int64_t cap_rows,
                                                  int64_t *nrows, int *end);
/* len(DataLoaderDispatcher) from the underlying loader's len: split_batches → L; drop_last → L / P; else ceil. */
ACCEL_API int64_t accel_data_dispatcher_len(const accel_data_dispatcher *d, int64_t loader_len);

/* ------------------------------------------------------------------------------------------- token files */
#define ACCEL_DATA_TOKEN_HEADER_BYTES 1024
#define ACCEL_DATA_GPT2_MAGIC 20240520
#define ACCEL_DATA_GPT2_VERSION 1
#define ACCEL_DATA_LLAMA3_MAGIC 20240801
#define ACCEL_DATA_LLAMA3_VERSION 7

typedef struct accel_data_token_info {
    int32_t magic, version;
    int token_bytes;     /* 2 (uint16) or 4 (uint32) */
    int64_t num_tokens;
} accel_data_token_info;

/* Validates an llm.c header (the first header_len bytes of a file of file_size bytes). Untrusted bytes welcome. */
ACCEL_API accel_result accel_data_token_header_parse(accel *acc, const void *header, size_t header_len,
                                                     uint64_t file_size, accel_data_token_info *out);

typedef struct accel_data_token_file {
    accel_data_token_info info;
    const uint8_t *tokens; /* num_tokens * token_bytes little-endian bytes (inside the mapping) */
    void *map;
    uint64_t map_bytes;
    accel *acc;            /* error sink (may be NULL) */
} accel_data_token_file;

ACCEL_API accel_result accel_data_token_file_open(accel *acc, accel_data_token_file *f, const char *path);
ACCEL_API void accel_data_token_file_deinit(accel_data_token_file *f); /* unmaps; safe on a zeroed file */
/* tokens [first, first+count) as int32; ACCEL_ERR_INVALID_ARGUMENT when out of range. */
ACCEL_API accel_result accel_data_token_file_read(const accel_data_token_file *f, int64_t first, int64_t count,
                                                  int32_t *dst);

typedef struct accel_data_seq_desc {
    const char *const *files; /* token shard paths, in order */
    int num_files;
    int batch_size;           /* B rows per process */
    int seq_len;              /* T: each row has T+1 tokens (inputs = row[0..T), targets = row[1..T]) */
    int num_processes;        /* 0 → from acc (1 / 0 without acc); init is then collective (agreement) */
    int process_index;
    int shuffle;              /* nonzero: permute the windows per (seed, epoch) */
    uint64_t seed;
    int collective;           /* as accel_data_shard_desc.collective */
} accel_data_seq_desc;

/* Fields are readable; change them only through functions. */
typedef struct accel_data_seq_loader {
    accel *acc;
    accel_data_token_file *files;
    int64_t *first_window;    /* num_files + 1 prefix sums of windows per file */
    int num_files;
    int batch_size, seq_len, num_processes, process_index;
    accel_data_sampler sampler; /* over the windows */
    int64_t num_windows, num_batches, epoch, position;
    int active;               /* between the epoch's first next() and its end (in acc's list of loaders) */
} accel_data_seq_loader;

/* Opens every file (validated). Collective when acc is given and desc->num_processes is 0 or desc->collective. */
ACCEL_API accel_result accel_data_seq_init(accel *acc, accel_data_seq_loader *ld, const accel_data_seq_desc *desc);
ACCEL_API void accel_data_seq_deinit(accel_data_seq_loader *ld); /* ends the bookkeeping, unmaps; safe when zeroed */
ACCEL_API int64_t accel_data_seq_len(const accel_data_seq_loader *ld); /* global batches per epoch */
/* This rank's rows of global batch k: B*(T+1) int32 tokens, row-major. */
ACCEL_API accel_result accel_data_seq_get_batch(const accel_data_seq_loader *ld, int64_t k, int32_t *dst);
/* Iterator like accel_data_shard_next: *got = 1 with a batch, 0 at the end of the epoch (epoch advances);
   same end_of_dataloader bookkeeping (remainder -1: the tail is dropped). */
ACCEL_API accel_result accel_data_seq_next(accel_data_seq_loader *ld, int32_t *dst, int *got);
ACCEL_API int64_t accel_data_seq_epoch(const accel_data_seq_loader *ld);
ACCEL_API accel_result accel_data_seq_set_epoch(accel_data_seq_loader *ld, int64_t epoch); /* as the shard's */
ACCEL_API accel_result accel_data_seq_skip_first_batches(accel_data_seq_loader *ld, int64_t n);
/* accel_state_save_fn / _load_fn (loader is an accel_data_seq_loader *): "ACSQ", u32 version 1, i64 total tokens,
   i32 files, i32 B, i32 T, i32 P, i32 p, u32 flags (16 shuffle), u64 seed, i64 epoch, i64 position. */
#define ACCEL_DATA_SEQ_STATE_BYTES 64
ACCEL_API accel_result accel_data_seq_state_save(void *loader, void *buf, size_t cap, size_t *size);
ACCEL_API accel_result accel_data_seq_state_load(void *loader, const void *buf, size_t size);
/* The bytes decoded without a loader (tools: `accel ckpt ls`): the parser accel_data_seq_state_load uses, with its
   format checks (size, magic, version, ranges, flag bits: ACCEL_ERR_FORMAT naming the problem); whether the
   configuration fits a loader is load's business. acc may be NULL. */
typedef struct accel_data_seq_state_info {
    int64_t total_tokens;
    int32_t num_files, batch_size, seq_len, num_processes, process_index;
    uint32_t flags;           /* 16 shuffle */
    uint64_t seed;
    int64_t epoch, position;  /* the next global batch of that epoch */
} accel_data_seq_state_info;
ACCEL_API accel_result accel_data_seq_state_decode(accel *acc, const void *buf, size_t size,
                                                   accel_data_seq_state_info *out);

/* ------------------------------------------------------------------------------------------------ staging */
#define ACCEL_DATA_STAGER_MAX_SLOTS 8
typedef struct accel_data_stager {
    accel *acc;
    size_t bytes;
    int nslots;      /* 2 on the CPU; on a device 2, 4 or 8, see accel_data_stager_init */
    int group;       /* slots per event: one event covers the copies of nslots/2 consecutive slots */
    int unrecorded;  /* copies enqueued since the last event */
    void *host[ACCEL_DATA_STAGER_MAX_SLOTS];   /* pinned (accel_pinned_alloc) on a device */
    void *dev[ACCEL_DATA_STAGER_MAX_SLOTS];    /* == host[] on the CPU */
    void *event[ACCEL_DATA_STAGER_MAX_SLOTS];  /* cudaEvent_t after the copies out of the group starting at i */
    int in_flight[ACCEL_DATA_STAGER_MAX_SLOTS];
    int slot;
    int on_device;
} accel_data_stager;

/* A ring of staging slots, each a host buffer and (on a device) a device buffer of `bytes`. On the CPU, 2 host buffers
   and no copy. On a device, 2 slots, or more for small batches so that copies queue back to back instead of the host
   waiting on each one (a 64 KiB batch copies in ~4 µs, about a host wake-up): nslots = 4 MiB / bytes rounded down
   to a power of two in [2, ACCEL_DATA_STAGER_MAX_SLOTS]. One event per half ring (not per copy) keeps the host's
   work per batch near one cudaMemcpyAsync. A device pointer from submit is not overwritten before nslots - 1 further
   submits (at least the next one). */
ACCEL_API accel_result accel_data_stager_init(accel *acc, accel_data_stager *st, size_t bytes);
ACCEL_API void accel_data_stager_deinit(accel_data_stager *st); /* waits for copies in flight; safe when zeroed */
/* The host buffer to fill next (waits until the copy that last used it has finished). */
ACCEL_API accel_result accel_data_stager_host(accel_data_stager *st, void **host);
/* Enqueue the copy of that buffer to the device on acc->stream; *device gets the device copy (CPU: the host
   buffer itself, no copy). Kernels that read it must run on acc->stream (or wait for it). */
ACCEL_API accel_result accel_data_stager_submit(accel_data_stager *st, void **device);

#ifdef __cplusplus
}
#endif
#endif /* ACCEL_DATA_H_INCLUDED */

/* ========================================================================================== implementation */
#if defined(ACCEL_IMPLEMENTATION) && !defined(ACCEL__DATA_IMPL_DONE)
#define ACCEL__DATA_IMPL_DONE
/* CONTENTS: sampler · dataloader bookkeeping · shards (init + agreement, iteration, epochs, state) · token files ·
   sequence loader · staging. Private helpers (errors, byte order, allocation, agreement) are the core's. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#if !defined(_WIN32)
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>
#endif
/* ACCEL_WITH_CUDA and cuda_runtime_api.h come from accel.h's implementation preamble. */
#if defined(__SSE2__) && !defined(__CUDACC__)
#include <emmintrin.h>
#endif

/* ------------------------------------------------------------------------------------------------ sampler */
static void accel__data_sampler_key(accel_data_sampler *s) {
    int r;
    for (r = 0; r < ACCEL_DATA_FEISTEL_ROUNDS; ++r) {
        uint32_t w[4];
        accel_rng_draw4(s->seed, (uint64_t)s->epoch, (uint64_t)r, w);
        s->keys[r] = (uint64_t)w[0] | ((uint64_t)w[1] << 32);
    }
}

ACCEL__DEF accel_result accel_data_sampler_init(accel *acc, accel_data_sampler *s, int64_t n, int shuffle,
                                                uint64_t seed) {
    int bits = 0;
    if (!s) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_data_sampler_init: sampler is NULL");
    if (n < 0 || n > ((int64_t)1 << 62))
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "sampler: dataset length %lld out of range [0, 2^62]",
                           (long long)n);
    memset(s, 0, sizeof *s);
    s->n = n;
    s->shuffle = shuffle ? 1 : 0;
    s->seed = seed;
    while (bits < 63 && ((uint64_t)1 << bits) < (uint64_t)n) ++bits;
    s->lo_bits = bits / 2;
    s->lo_mask = ((uint64_t)1 << s->lo_bits) - 1;
    s->hi_mask = ((uint64_t)1 << (bits - s->lo_bits)) - 1;
    accel__data_sampler_key(s);
    return ACCEL_OK;
}

ACCEL__DEF void accel_data_sampler_set_epoch(accel_data_sampler *s, int64_t epoch) {
    if (!s) return;
    s->epoch = epoch;
    accel__data_sampler_key(s);
}

#define ACCEL__DATA_LANES 8
ACCEL__DEF accel_result accel_data_sampler_fill(const accel_data_sampler *s, int64_t first, int64_t count,
                                                int64_t *out) {
    int64_t i = 0;
    uint64_t keys[ACCEL_DATA_FEISTEL_ROUNDS], lo_mask, hi_mask, n;
    int lo_bits, r;
    if (!s || (!out && count > 0))
        return ACCEL__FAIL(NULL, ACCEL_ERR_INVALID_ARGUMENT, "accel_data_sampler_fill: %s is NULL",
                           s ? "out" : "sampler");
    if (s->n < 0 || s->lo_bits < 0 || s->lo_bits > 31)
        return ACCEL__FAIL(NULL, ACCEL_ERR_INVALID_ARGUMENT, "accel_data_sampler_fill: the sampler is not initialized "
                           "(accel_data_sampler_init)");
    if (first < 0 || count < 0 || first > s->n || count > s->n - first)
        return ACCEL__FAIL(NULL, ACCEL_ERR_INVALID_ARGUMENT, "accel_data_sampler_fill: indices [%lld, %lld + %lld) are "
                           "not within the dataset's [0, %lld)", (long long)first, (long long)first, (long long)count,
                           (long long)s->n);
    lo_mask = s->lo_mask;
    hi_mask = s->hi_mask;
    n = (uint64_t)s->n;
    lo_bits = s->lo_bits;
    if (!s->shuffle || s->n <= 1) {
        for (i = 0; i < count; ++i) out[i] = first + i;
        return ACCEL_OK;
    }
    for (r = 0; r < ACCEL_DATA_FEISTEL_ROUNDS; ++r) keys[r] = s->keys[r];
    for (; i + ACCEL__DATA_LANES <= count; i += ACCEL__DATA_LANES) {
        uint64_t lo[ACCEL__DATA_LANES], hi[ACCEL__DATA_LANES];
        int l;
        for (l = 0; l < ACCEL__DATA_LANES; ++l) {
            uint64_t x = (uint64_t)(first + i + l);
            lo[l] = x & lo_mask;
            hi[l] = x >> lo_bits;
        }
        for (r = 0; r < ACCEL_DATA_FEISTEL_ROUNDS; r += 2) {
            for (l = 0; l < ACCEL__DATA_LANES; ++l) lo[l] ^= accel_data_feistel_round(hi[l], keys[r]) & lo_mask;
            for (l = 0; l < ACCEL__DATA_LANES; ++l) hi[l] ^= accel_data_feistel_round(lo[l], keys[r + 1]) & hi_mask;
        }
        for (l = 0; l < ACCEL__DATA_LANES; ++l) {
            uint64_t x = (hi[l] << lo_bits) | lo[l];
            while (x >= n) x = accel_data_feistel_pass(s, x); /* cycle-walk the lanes that left [0, n) */
            out[i + l] = (int64_t)x;
        }
    }
    for (; i < count; ++i) out[i] = accel_data_sampler_index(s, first + i);
    return ACCEL_OK;
}

/* ------------------------------------------------------------------------ dataloader bookkeeping (§3) */
/* GradientState.dataloader_references lives in acc (accel.h): a loader is keyed by its own address and is
   `active` from its epoch's first next() to the epoch's end. Without an acc only the flag is kept. */
static accel_result accel__data_begin(accel *acc, const void *key, int *active, int remainder) {
    if (*active) return ACCEL_OK;
    if (acc) {
        accel_result r = accel_dataloader_begin(acc, key, remainder);
        if (r != ACCEL_OK) return r;
    }
    *active = 1;
    return ACCEL_OK;
}
static void accel__data_end(accel *acc, const void *key, int *active) {
    if (!*active) return;
    *active = 0;
    if (acc) accel_dataloader_end(acc, key);
}

ACCEL__DEF int64_t accel_data_real_rows(int end_of_dataloader, int remainder, int64_t gathered_rows) {
    if (!end_of_dataloader || remainder <= 0) return gathered_rows; /* -1: unknown, 0: last batch was full */
    return (int64_t)remainder < gathered_rows ? (int64_t)remainder : gathered_rows;
}
ACCEL__DEF int64_t accel_data_gather_real_rows(const accel *acc, int64_t gathered_rows) {
    if (!acc) return gathered_rows;
    return accel_data_real_rows(acc->end_of_dataloader, acc->remainder, gathered_rows);
}

/* ------------------------------------------------------------------------------------------------- shards */
#define ACCEL__DATA_MAX_BATCH ((int64_t)1 << 40)

/* ---------------------------------------------------------------------------------------------- dispatcher */
/* accelerate.data_loader.DataLoaderDispatcher, step by step (see DISPATCHER in the manual). Every global batch is
   broadcast whole from the main process (a header, then the rows); each process slices its part. */
typedef struct accel__dbuf {
    unsigned char *p;
    int64_t rows;
    size_t cap; /* bytes */
} accel__dbuf;

struct accel_data_dispatcher {
    accel *acc;
    accel_data_dispatcher_desc d;
    int P, p;
    accel__dbuf cur, nxt, first;
    int nxt_has, have_first, stop_flag; /* stop_flag: Accelerate's self._stop_iteration */
    int in_epoch, done;
    int64_t batch_index, iteration;
    void *copy_event; /* device_out: a cudaEvent_t recorded after the slice's copy out of cur */
    int copy_pending; /* that copy may still read the host buffer */
};

/* device_out: before a host buffer that the last slice was copied from is written or freed */
static accel_result accel__dispatch_copy_wait(accel_data_dispatcher *d) {
    if (!d->copy_pending) return ACCEL_OK;
    d->copy_pending = 0;
#ifdef ACCEL_WITH_CUDA
    ACCEL__CUDA_CHECK(d->acc, cudaEventSynchronize((cudaEvent_t)d->copy_event));
#endif
    return ACCEL_OK;
}

static accel_result accel__dbuf_room(accel *acc, accel__dbuf *b, int64_t rows, size_t row_bytes) {
    size_t need;
    if (rows < 0 || (uint64_t)rows > (uint64_t)(SIZE_MAX / 2) / row_bytes)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "dispatcher: a batch of %lld rows is too large",
                           (long long)rows);
    need = (size_t)rows * row_bytes;
    if (need > b->cap) {
        unsigned char *q = (unsigned char *)accel_host_alloc(acc, need);
        if (!q) return ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "dispatcher: no memory for %zu bytes", need);
        if (b->rows > 0) memcpy(q, b->p, (size_t)b->rows * row_bytes);
        accel_host_free(acc, b->p);
        b->p = q;
        b->cap = need;
    }
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_data_dispatcher_create(accel *acc, const accel_data_dispatcher_desc *desc,
                                                     accel_data_dispatcher **out) {
    accel_data_dispatcher *d;
    if (!acc || !acc->impl) return ACCEL__FAIL(acc, ACCEL_ERR_STATE, "dispatcher_create: the Accelerator is not "
                                               "initialized");
    if (!out || !desc) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "dispatcher_create: desc or out is NULL");
    *out = NULL;
    if (desc->row_bytes == 0 || desc->skip_batches < 0 || (int)desc->split_batches < (int)ACCEL_OFF ||
        (int)desc->split_batches > (int)ACCEL_ON)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "dispatcher_create: row_bytes must be >= 1, skip_batches "
                           ">= 0 and split_batches an accel_toggle (got %zu, %lld, %d)", desc->row_bytes,
                           (long long)desc->skip_batches, (int)desc->split_batches);
    if (acc->process_index == 0 && !desc->fetch)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "dispatcher_create: the main process needs desc.fetch");
    if ((desc->device_rows || desc->device_out) && acc->device < 0)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "dispatcher_create: device_rows / device_out need the "
                           "Accelerator on a CUDA device (this one runs on the CPU)");
#ifndef ACCEL_WITH_CUDA
    if (desc->device_rows || desc->device_out)
        return ACCEL__FAIL(acc, ACCEL_ERR_UNSUPPORTED, "dispatcher_create: device_rows / device_out need CUDA: compile "
                           "the ACCEL_IMPLEMENTATION TU with nvcc");
#endif
    d = (accel_data_dispatcher *)accel_host_alloc(acc, sizeof *d);
    if (!d) return ACCEL_ERR_OUT_OF_MEMORY;
    memset(d, 0, sizeof *d);
#ifdef ACCEL_WITH_CUDA
    if (desc->device_out) {
        cudaEvent_t ev;
        cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
        if (e != cudaSuccess) {
            accel_host_free(acc, d);
            return ACCEL__FAIL(acc, ACCEL_ERR_CUDA, "dispatcher_create: cudaEventCreate failed: %s",
                               cudaGetErrorString(e));
        }
        d->copy_event = (void *)ev;
    }
#endif
    d->acc = acc;
    d->d = *desc;
    if (d->d.split_batches == ACCEL_DEFAULT) d->d.split_batches = acc->desc.split_batches ? ACCEL_ON : ACCEL_OFF;
    d->P = acc->num_processes > 0 ? acc->num_processes : 1;
    d->p = acc->process_index;
    *out = d;
    return ACCEL_OK;
}

ACCEL__DEF void accel_data_dispatcher_destroy(accel_data_dispatcher *d) {
    if (!d) return;
    if (d->in_epoch) accel_dataloader_end(d->acc, d);
    (void)accel__dispatch_copy_wait(d); /* the buffers are freed next */
#ifdef ACCEL_WITH_CUDA
    if (d->copy_event) (void)cudaEventDestroy((cudaEvent_t)d->copy_event);
#endif
    accel_host_free(d->acc, d->cur.p);
    accel_host_free(d->acc, d->nxt.p);
    accel_host_free(d->acc, d->first.p);
    accel_host_free(d->acc, d);
}

ACCEL__DEF int64_t accel_data_dispatcher_len(const accel_data_dispatcher *d, int64_t loader_len) {
    if (!d || loader_len < 0) return -1;
    if (d->d.split_batches == ACCEL_ON) return loader_len;
    return d->d.drop_last ? loader_len / d->P : (loader_len + d->P - 1) / d->P;
}

/* _fetch_batches: the main process reads one batch (split_batches) or P batches concatenated; at the loader's end a
   partial group (at least one batch) is still dispatched unless drop_last. Then header {status, has, stop, rows}
   and the rows are broadcast; a failure on the main process fails every process. */
static accel_result accel__dispatch_fetch(accel_data_dispatcher *d) {
    accel *acc = d->acc;
    size_t rb = d->d.row_bytes;
    int64_t h[4] = {ACCEL_OK, 0, 0, 0};
    accel_result res = accel__dispatch_copy_wait(d); /* nxt was the last slice's source */
    if (res != ACCEL_OK) return res;
    if (d->p == 0) {
        int k, nb = 0, want = d->d.split_batches == ACCEL_ON ? 1 : d->P, end = 0;
        d->nxt.rows = 0;
        for (k = 0; k < want && res == ACCEL_OK; ++k) {
            const void *rows = NULL;
            int64_t n = 0;
            end = 0;
            res = d->d.fetch(d->d.user, &rows, &n, &end);
            if (res != ACCEL_OK) break;
            if (end) break;
            if (n < 0 || (n > 0 && !rows)) {
                res = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "dispatcher: fetch gave %lld rows at %p",
                                  (long long)n, rows);
                break;
            }
            res = accel__dbuf_room(acc, &d->nxt, d->nxt.rows + n, rb);
            if (res != ACCEL_OK) break;
            if (n > 0 && !d->d.device_rows) memcpy(d->nxt.p + (size_t)d->nxt.rows * rb, rows, (size_t)n * rb);
#ifdef ACCEL_WITH_CUDA
            if (n > 0 && d->d.device_rows) { /* before the loader's next call reuses its rows */
                cudaError_t e = cudaMemcpyAsync(d->nxt.p + (size_t)d->nxt.rows * rb, rows, (size_t)n * rb,
                                                cudaMemcpyDeviceToHost, (cudaStream_t)acc->stream);
                if (e == cudaSuccess) e = cudaStreamSynchronize((cudaStream_t)acc->stream);
                if (e != cudaSuccess) {
                    res = ACCEL__FAIL(acc, ACCEL_ERR_CUDA, "dispatcher: copying %lld device rows to the host failed: "
                                      "%s", (long long)n, cudaGetErrorString(e));
                    break;
                }
            }
#endif
            d->nxt.rows += n;
            nb++;
        }
        h[0] = res;
        h[2] = end;
        h[1] = !end || (d->d.split_batches != ACCEL_ON && !d->d.drop_last && nb > 0);
        h[3] = h[1] ? d->nxt.rows : 0;
    }
    res = accel_host_broadcast(acc, h, sizeof h, 0);
    if (res != ACCEL_OK) return accel__fail_wrap(acc, res, "dispatcher (the batch header from the main process)");
    if (h[0] != ACCEL_OK)
        return d->p == 0 ? (accel_result)h[0]
                         : ACCEL__FAIL(acc, ACCEL_ERR_REMOTE, "dispatcher: the main process failed to fetch a batch "
                                       "(%s)", accel_result_string((accel_result)h[0]));
    d->stop_flag = (int)h[2];
    d->nxt_has = (int)h[1];
    if (!d->nxt_has) { d->nxt.rows = 0; return ACCEL_OK; }
    if (d->p != 0) {
        d->nxt.rows = 0;
        res = accel__dbuf_room(acc, &d->nxt, h[3], rb);
        if (res != ACCEL_OK) return res; /* the main process then waits out its deadline */
        d->nxt.rows = h[3];
    }
    if (h[3] > 0) res = accel_host_broadcast(acc, d->nxt.p, (size_t)h[3] * rb, 0);
    return res != ACCEL_OK ? accel__fail_wrap(acc, res, "dispatcher (the batch from the main process)") : ACCEL_OK;
}

static void accel__dispatch_end_epoch(accel_data_dispatcher *d) {
    d->in_epoch = 0;
    d->iteration++;
    accel_dataloader_end(d->acc, d);
}

ACCEL__DEF accel_result accel_data_dispatcher_next(accel_data_dispatcher *d, void *out, int64_t cap_rows,
                                                   int64_t *nrows, int *end) {
    accel *acc;
    size_t rb;
    accel_result res;
    if (!d) return ACCEL_ERR_INVALID_ARGUMENT;
    acc = d->acc;
    rb = d->d.row_bytes;
    if (!nrows || !end || cap_rows < 0 || (cap_rows > 0 && !out))
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "dispatcher_next: out %p (capacity %lld rows), nrows "
                           "%p, end %p", out, (long long)cap_rows, (void *)nrows, (void *)end);
    *nrows = 0;
    *end = 0;
    if (!d->in_epoch) { /* __iter__: begin, the first fetch */
        res = accel_dataloader_begin(acc, d, -1);
        if (res != ACCEL_OK) return res;
        d->in_epoch = 1;
        d->done = 0;
        d->have_first = 0;
        d->stop_flag = 0;
        d->batch_index = 0;
        d->first.rows = 0;
        res = accel__dispatch_fetch(d);
        if (res != ACCEL_OK) { accel__dispatch_end_epoch(d); return res; }
    }
    for (;;) {
        accel__dbuf t;
        int64_t observed, bs, lo, hi, avail;
        int stop;
        if (d->done) {
            accel__dispatch_end_epoch(d);
            *end = 1;
            return ACCEL_OK;
        }
        if (!d->nxt_has) { /* Accelerate raises ValueError here (an empty loader, or only a dropped partial group) */
            accel__dispatch_end_epoch(d);
            return ACCEL__FAIL(acc, ACCEL_ERR_STATE, "dispatcher: the batch has no data (the loader ended before a "
                               "first full batch: Accelerate's \"Batch does not contain any data\")");
        }
        t = d->cur; /* batch = next_batch */
        d->cur = d->nxt;
        d->nxt = t;
        d->nxt.rows = 0;
        if (!d->d.drop_last && !d->have_first) { /* first_batch = batch[0:P] */
            int64_t n = d->cur.rows < d->P ? d->cur.rows : d->P;
            res = accel__dbuf_room(acc, &d->first, n, rb);
            if (res != ACCEL_OK) { accel__dispatch_end_epoch(d); return res; }
            if (n > 0) memcpy(d->first.p, d->cur.p, (size_t)n * rb);
            d->first.rows = n;
            d->have_first = 1;
        }
        observed = d->cur.rows;
        bs = observed / d->P;
        stop = d->stop_flag;
        if (!stop) {
            res = accel__dispatch_fetch(d);
            if (res != ACCEL_OK) { accel__dispatch_end_epoch(d); return res; }
            if (d->stop_flag && !d->nxt_has) stop = 1;
        }
        avail = observed;
        if (!d->d.drop_last && stop && observed % d->P != 0) { /* batch = concatenate([batch, first_batch]) */
            res = accel__dbuf_room(acc, &d->cur, observed + d->first.rows, rb);
            if (res != ACCEL_OK) { accel__dispatch_end_epoch(d); return res; }
            if (d->first.rows > 0)
                memcpy(d->cur.p + (size_t)observed * rb, d->first.p, (size_t)d->first.rows * rb);
            avail += d->first.rows;
            bs += 1;
        }
        lo = (int64_t)d->p * bs;
        hi = lo + bs;
        if (hi > avail) hi = avail; /* a Python slice past the end is shorter */
        if (lo > hi) lo = hi;
        if (stop) {
            d->done = 1;
            res = accel_dataloader_begin(acc, d, observed > INT_MAX ? INT_MAX : (int)observed); /* remainder */
            if (res != ACCEL_OK) { d->in_epoch = 0; return res; }
            accel_dataloader_last_batch(acc, d);
        }
        if (d->batch_index++ < d->d.skip_batches) continue;
        if (hi - lo > cap_rows)
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "dispatcher_next: this process's slice has %lld rows, "
                               "out holds %lld", (long long)(hi - lo), (long long)cap_rows);
        if (hi > lo && !d->d.device_out) memcpy(out, d->cur.p + (size_t)lo * rb, (size_t)(hi - lo) * rb);
#ifdef ACCEL_WITH_CUDA
        if (hi > lo && d->d.device_out) { /* asynchronous: the event guards cur until the copy has read it */
            cudaError_t e = cudaMemcpyAsync(out, d->cur.p + (size_t)lo * rb, (size_t)(hi - lo) * rb,
                                            cudaMemcpyHostToDevice, (cudaStream_t)acc->stream);
            if (e == cudaSuccess) e = cudaEventRecord((cudaEvent_t)d->copy_event, (cudaStream_t)acc->stream);
            d->copy_pending = 1; /* also after a failed record: the next wait then reports the stream's error */
            if (e != cudaSuccess)
                return ACCEL__FAIL(acc, ACCEL_ERR_CUDA, "dispatcher_next: copying %lld rows to the device failed: %s",
                                   (long long)(hi - lo), cudaGetErrorString(e));
        }
#endif
        *nrows = hi - lo;
        return ACCEL_OK;
    }
}

/* The local part of init: validates desc and fills *t (nothing else changes). Checks in prepare_data_loader's
   order (docs/semantics.md §1-§2), or the shard classes' alone with batch_sampler_shard. */
static accel_result accel__data_shard_make(accel *acc, accel_data_shard *t, const accel_data_shard_desc *desc) {
    accel_result r;
    int P, p, split, even, sharded;
    int64_t N, B, b, G;
    if (!t || !desc)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_data_shard_init: shard or desc is NULL");
    N = desc->dataset_len;
    B = desc->batch_size;
    if (desc->num_processes > 0) { P = desc->num_processes; p = desc->process_index; }
    else if (desc->num_processes == 0) { P = acc ? acc->num_processes : 1; p = acc ? acc->process_index : 0;
    } else
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "shard: num_processes (%d) must be >= 1 (or 0 for acc's)",
                           desc->num_processes);
    if (P < 1 || p < 0 || p >= P)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "shard: process_index %d is not in [0, num_processes=%d)",
                           p, P);
    if (desc->split_batches == ACCEL_DEFAULT) split = acc ? (acc->desc.split_batches ? 1 : 0) : 0;
    else if (desc->split_batches == ACCEL_ON || desc->split_batches == ACCEL_OFF)
        split = desc->split_batches == ACCEL_ON;
    else
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                           "shard: split_batches %d is not ACCEL_DEFAULT, ACCEL_ON or "
                           "ACCEL_OFF",
                           (int)desc->split_batches);
    even = desc->no_even_batches ? 0 : 1;
    sharded = P > 1 || desc->batch_sampler_shard; /* prepare() does not shard with one process */
    if (N < 0 || N > ((int64_t)1 << 62))
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "shard: dataset_len %lld out of range [0, 2^62]",
                           (long long)N);
    if (B < 1 || B > ACCEL__DATA_MAX_BATCH)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "shard: batch_size %lld must be in [1, 2^40]",
                           (long long)B);
    if (!split && B * (int64_t)P > ((int64_t)1 << 61))
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "shard: batch_size * num_processes overflows");
    if (split && !desc->batch_sampler_shard && B > 1 && B % P != 0) /* prepare_data_loader's sanity check */
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                           "To use a `DataLoader` in `split_batches` mode, the batch size (%lld) needs to be a round "
                           "multiple of the number of processes (%d).", (long long)B, P);
    if (split && sharded && desc->iterable) {
        if (B > 1 && B % P != 0)
            return ACCEL__FAIL(
                acc, ACCEL_ERR_INVALID_ARGUMENT,
                "To use `IterableDatasetShard` in `split_batches` mode, the batch size (%lld) needs to be a "
                "round multiple of the number of processes (%d).",
                (long long)B, P);
        if (B == 1 && P > 1)
            return ACCEL__FAIL(
                acc, ACCEL_ERR_INVALID_ARGUMENT,
                "IterableDatasetShard in `split_batches` mode with batch size 1 and %d processes would give "
                "every process batches of 1 // %d = 0 samples (Accelerate silently yields nothing); use "
                "split_batches=False or a batch size that is a multiple of the number of processes",
                P, P);
    } else if (split && sharded && B % P != 0) {
        return ACCEL__FAIL(
            acc, ACCEL_ERR_INVALID_ARGUMENT,
            "To use `BatchSamplerShard` in `split_batches` mode, the batch size (%lld) needs to be a round "
            "multiple of the number of processes (%d).",
            (long long)B, P);
    }
    memset(t, 0, sizeof *t);
    t->desc = *desc;
    t->desc.num_processes = P;
    t->desc.process_index = p;
    t->desc.split_batches = split ? ACCEL_ON : ACCEL_OFF;
    t->desc.no_even_batches = even ? 0 : 1;
    t->desc.drop_last = desc->drop_last ? 1 : 0;
    t->desc.iterable = desc->iterable ? 1 : 0;
    t->desc.shuffle = desc->shuffle ? 1 : 0;
    t->desc.batch_sampler_shard = desc->batch_sampler_shard ? 1 : 0;
    r = accel_data_sampler_init(acc, &t->sampler, N, t->desc.shuffle, desc->seed);
    if (r != ACCEL_OK) return r;
    b = split ? B / P : B;
    G = b * P;
    t->acc = acc;
    t->n = N; t->b = b; t->g = G;
    t->pad_mod = N < G ? N : G;
    t->num_processes = P; t->process_index = p;
    t->padded = sharded && !t->desc.drop_last && (even || t->desc.iterable);
    if (t->desc.drop_last) t->num_batches = N / G;
    else if (t->padded) t->num_batches = (N + G - 1) / G;
    else t->num_batches = N > (int64_t)p * b ? (N - (int64_t)p * b + G - 1) / G : 0;
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_data_shard_init(accel *acc, accel_data_shard *s, const accel_data_shard_desc *desc) {
    static const char *const names[8] = {"dataset_len", "batch_size",  "split_batches", "even_batches",
                                         "drop_last",   "iterable",    "shuffle",       "seed"};
    accel_data_shard t;
    accel_result r;
    memset(&t, 0, sizeof t);
    r = accel__data_shard_make(acc, s ? &t : NULL, desc);
    if (acc &&
        (!desc || desc->num_processes == 0 || desc->collective)) { /* every rank takes part, even after a failure */
        int64_t v[8];
        memset(v, 0, sizeof v);
        if (r == ACCEL_OK) {
            v[0] = t.n;
            v[1] = t.desc.batch_size;
            v[2] = t.desc.split_batches == ACCEL_ON;
            v[3] = !t.desc.no_even_batches;
            v[4] = t.desc.drop_last; v[5] = t.desc.iterable; v[6] = t.desc.shuffle; v[7] = (int64_t)t.desc.seed;
        }
        r = accel__agree_values(acc, r, "accel_data_shard_init", names, v, 8);
    }
    if (r != ACCEL_OK) return r;
    if (acc) accel_dataloader_end(acc, s); /* a shard re-initialized in place mid-epoch leaves acc's list */
    *s = t;
    return ACCEL_OK;
}

ACCEL__DEF void accel_data_shard_deinit(accel_data_shard *s) {
    if (!s) return;
    accel__data_end(s->acc, s, &s->active);
    memset(s, 0, sizeof *s);
}

ACCEL__DEF int64_t accel_data_shard_len(const accel_data_shard *s) { return s ? s->num_batches : 0; }
ACCEL__DEF int64_t accel_data_shard_batch_size(const accel_data_shard *s) { return s ? s->b : 0; }
ACCEL__DEF int64_t accel_data_shard_epoch(const accel_data_shard *s) { return s ? s->epoch : 0; }

ACCEL__DEF int accel_data_shard_remainder(const accel_data_shard *s) {
    if (!s || s->desc.drop_last || s->g < 1) return -1;
    return (int)(s->n % s->g);
}

ACCEL__DEF int64_t accel_data_shard_batch_len(const accel_data_shard *s, int64_t k) {
    int64_t start;
    if (!s || k < 0 || k >= s->num_batches) return 0;
    if (s->desc.drop_last || s->padded) return s->b;
    start = k * s->g + (int64_t)s->process_index * s->b;
    return s->n - start < s->b ? s->n - start : s->b;
}

ACCEL__DEF accel_result accel_data_shard_get_batch(const accel_data_shard *s, int64_t k, int64_t *out, int64_t *count) {
    int64_t start, len, end, real_end, q, j = 0;
    if (!s || !out || !count)
        return ACCEL__FAIL(s ? s->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, "accel_data_shard_get_batch: NULL argument");
    if (k < 0 || k >= s->num_batches) {
        *count = 0;
        return ACCEL__FAIL(s->acc, ACCEL_ERR_INVALID_ARGUMENT, "shard: batch %lld out of range [0, %lld)", (long long)k,
                           (long long)s->num_batches);
    }
    len = accel_data_shard_batch_len(s, k);
    start = k * s->g + (int64_t)s->process_index * s->b;
    end = start + len;
    real_end = end < s->n ? end : s->n;
    if (!s->sampler.shuffle) {
        for (q = start; q < real_end; ++q) out[j++] = q;
        for (q = start > s->n ? start : s->n; q < end; ++q) out[j++] = (q - s->n) % s->pad_mod;
    } else {
        if (real_end > start) {
            accel_result fr = accel_data_sampler_fill(&s->sampler, start, real_end - start, out);
            if (fr != ACCEL_OK) return fr; /* unreachable: start < real_end <= n */
            j = real_end - start;
        }
        for (q = start > s->n ? start : s->n; q < end; ++q)
            out[j++] = accel_data_sampler_index(&s->sampler, (q - s->n) % s->pad_mod);
    }
    *count = j;
    return ACCEL_OK;
}

ACCEL__DEF void accel_data_shard_end(accel_data_shard *s) {
    if (!s || !s->active) return;
    accel__data_end(s->acc, s, &s->active);
    s->position = 0;
}

ACCEL__DEF accel_result accel_data_shard_next(accel_data_shard *s, int64_t *out, int64_t *count) {
    accel_result r;
    if (!s || !out || !count)
        return ACCEL__FAIL(s ? s->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, "accel_data_shard_next: NULL argument");
    if (s->b < 1) /* a zeroed shard would look like an empty epoch forever */
        return ACCEL__FAIL(s->acc, ACCEL_ERR_STATE, "accel_data_shard_next: the shard is not initialized "
                           "(accel_data_shard_init)");
    if ((r = accel__data_begin(s->acc, s, &s->active, accel_data_shard_remainder(s))) != ACCEL_OK) return r;
    if (s->position >= s->num_batches) { /* the loop is over: end(), iteration += 1 */
        accel__data_end(s->acc, s, &s->active);
        s->position = 0;
        s->epoch += 1;
        accel_data_sampler_set_epoch(&s->sampler, s->epoch);
        *count = 0;
        return ACCEL_OK;
    }
    r = accel_data_shard_get_batch(s, s->position, out, count);
    if (r != ACCEL_OK) return r;
    s->position += 1;
    if (s->position == s->num_batches && s->acc) accel_dataloader_last_batch(s->acc, s);
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_data_shard_set_epoch(accel_data_shard *s, int64_t epoch) {
    if (!s) return ACCEL__FAIL(NULL, ACCEL_ERR_INVALID_ARGUMENT, "accel_data_shard_set_epoch: shard is NULL");
    if (epoch < 0 || epoch > ((int64_t)1 << 62))
        return ACCEL__FAIL(s->acc, ACCEL_ERR_INVALID_ARGUMENT, "shard: epoch %lld not in [0, 2^62]", (long long)epoch);
    if (epoch == s->epoch && !s->active) return ACCEL_OK; /* keeps a restored or skipped position */
    accel_data_shard_end(s);
    s->epoch = epoch;
    s->position = 0;
    accel_data_sampler_set_epoch(&s->sampler, epoch);
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_data_shard_skip_first_batches(accel_data_shard *s, int64_t n) {
    if (!s) return ACCEL__FAIL(NULL, ACCEL_ERR_INVALID_ARGUMENT, "accel_data_shard_skip_first_batches: shard is NULL");
    if (n < 0) return ACCEL__FAIL(s->acc, ACCEL_ERR_INVALID_ARGUMENT, "skip_first_batches: n = %lld < 0", (long long)n);
    if (s->active)
        return ACCEL__FAIL(s->acc, ACCEL_ERR_STATE, "skip_first_batches: the epoch is already being iterated "
                           "(call it before the epoch's first accel_data_shard_next, or after set_epoch)");
    s->position = n;
    return ACCEL_OK;
}

static uint32_t accel__data_shard_flags(const accel_data_shard_desc *d) {
    return (d->split_batches == ACCEL_ON ? 1u : 0u) | (!d->no_even_batches ? 2u : 0u) | (d->drop_last ? 4u : 0u) |
           (d->iterable ? 8u : 0u) | (d->shuffle ? 16u : 0u) | (d->batch_sampler_shard ? 32u : 0u);
}

ACCEL__DEF accel_result accel_data_shard_state_save(void *shard, void *buf, size_t cap, size_t *size) {
    const accel_data_shard *s = (const accel_data_shard *)shard;
    unsigned char *p = (unsigned char *)buf;
    if (!s || !size)
        return ACCEL__FAIL(s ? s->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, "shard state_save: shard or size is NULL");
    *size = ACCEL_DATA_SHARD_STATE_BYTES;
    if (!buf || cap < ACCEL_DATA_SHARD_STATE_BYTES) return ACCEL_OK; /* the size query */
    memcpy(p, "ACDS", 4);
    accel__put_u32(p + 4, 1);
    accel__put_u64(p + 8, (uint64_t)s->n);
    accel__put_u64(p + 16, (uint64_t)s->desc.batch_size);
    accel__put_u32(p + 24, (uint32_t)s->num_processes);
    accel__put_u32(p + 28, (uint32_t)s->process_index);
    accel__put_u32(p + 32, accel__data_shard_flags(&s->desc));
    accel__put_u32(p + 36, 0);
    accel__put_u64(p + 40, s->sampler.seed);
    accel__put_u64(p + 48, (uint64_t)s->epoch);
    accel__put_u64(p + 56, (uint64_t)s->position);
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_data_shard_state_decode(accel *acc, const void *buf, size_t size,
                                                     accel_data_shard_state_info *out) {
    const unsigned char *p = (const unsigned char *)buf;
    accel_data_shard_state_info d;
    if (!out) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_data_shard_state_decode: out is NULL");
    if (!buf || size != ACCEL_DATA_SHARD_STATE_BYTES || memcmp(p, "ACDS", 4) != 0)
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT,
                           "shard state: not a sampler state (%zu bytes, want %d starting \"ACDS\")", size,
                           ACCEL_DATA_SHARD_STATE_BYTES);
    if (accel__get_u32(p + 4) != 1)
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "shard state: unsupported version %u (this build reads 1)",
                           (unsigned)accel__get_u32(p + 4));
    d.dataset_len = (int64_t)accel__get_u64(p + 8);
    d.batch_size = (int64_t)accel__get_u64(p + 16);
    d.num_processes = (int32_t)accel__get_u32(p + 24);
    d.process_index = (int32_t)accel__get_u32(p + 28);
    d.flags = accel__get_u32(p + 32);
    d.seed = accel__get_u64(p + 40);
    d.epoch = (int64_t)accel__get_u64(p + 48);
    d.position = (int64_t)accel__get_u64(p + 56);
    if (d.epoch < 0 || d.epoch > ((int64_t)1 << 62) || d.position < 0 || accel__get_u32(p + 36) != 0 ||
        (d.flags & ~63u))
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "shard state: corrupt (epoch %lld, position %lld, flags 0x%x)",
                           (long long)d.epoch, (long long)d.position, (unsigned)d.flags);
    if (d.num_processes < 1 || d.num_processes > (1 << 24))
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "shard state: corrupt (num_processes %d)", (int)d.num_processes);
    *out = d;
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_data_shard_state_load(void *shard, const void *buf, size_t size) {
    accel_data_shard *s = (accel_data_shard *)shard;
    accel_data_shard_state_info d;
    int64_t n, B, epoch, position;
    int32_t P;
    uint32_t flags, mine;
    accel_result r;
    if (!s || !buf)
        return ACCEL__FAIL(s ? s->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, "shard state_load: NULL argument");
    if ((r = accel_data_shard_state_decode(s->acc, buf, size, &d)) != ACCEL_OK) return r;
    n = d.dataset_len;
    B = d.batch_size;
    P = d.num_processes;
    flags = d.flags;
    epoch = d.epoch;
    position = d.position;
    mine = accel__data_shard_flags(&s->desc);
    if (n != s->n)
        return ACCEL__FAIL(s->acc, ACCEL_ERR_MISMATCH, "shard state: saved for dataset_len %lld, this shard has %lld",
                           (long long)n, (long long)s->n);
    if (B != s->desc.batch_size)
        return ACCEL__FAIL(s->acc, ACCEL_ERR_MISMATCH, "shard state: saved for batch_size %lld, this shard has %lld",
                           (long long)B, (long long)s->desc.batch_size);
    if (flags != mine)
        return ACCEL__FAIL(s->acc, ACCEL_ERR_MISMATCH,
                           "shard state: saved with flags 0x%x (1 split_batches, 2 even_batches, "
                           "4 drop_last, 8 iterable, 16 shuffle, 32 batch_sampler_shard), this shard has 0x%x",
                           (unsigned)flags, (unsigned)mine);
    if (P != s->num_processes) { /* another world size: resume by global samples consumed (EPOCHS AND RESUME) */
        accel_data_shard old;
        accel_data_shard_desc od = s->desc;
        int64_t consumed, resumed;
        od.num_processes = P;
        od.process_index = 0; /* the state of the main process (ckpt writes global objects once) */
        od.collective = 0;
        if (accel__data_shard_make(NULL, &old, &od) != ACCEL_OK)
            return ACCEL__FAIL(s->acc, ACCEL_ERR_MISMATCH, "shard state: saved with num_processes %d, which this "
                               "configuration does not allow (batch_size %lld, split_batches)", (int)P, (long long)B);
        if (position >= old.num_batches) { /* the saved epoch was consumed: so is this one */
            consumed = old.num_batches * old.g;
            resumed = s->num_batches;
        } else {
            consumed = position * old.g;
            resumed = consumed / s->g;
            if (resumed > s->num_batches) resumed = s->num_batches;
        }
        accel_log(s->acc, ACCEL_LOG_INFO, "shard state: saved with num_processes %d at batch %lld of epoch %lld (%lld "
                  "samples consumed); this run has %d: it resumes at batch %lld (sample %lld; %lld seen again)",
                  (int)P, (long long)position, (long long)epoch, (long long)consumed, s->num_processes,
                  (long long)resumed, (long long)(resumed * s->g),
                  (long long)(consumed > resumed * s->g ? consumed - resumed * s->g : 0));
        position = resumed;
    }
    accel__data_end(s->acc, s, &s->active);
    s->sampler.seed = d.seed;
    s->desc.seed = s->sampler.seed;
    s->epoch = epoch;
    accel_data_sampler_set_epoch(&s->sampler, epoch);
    s->position = position;
    return ACCEL_OK;
}

/* ------------------------------------------------------------------------------------------- token files */
/* The header check with the message in msg (shared by the public parser and open, which adds the path). */
static accel_result accel__data_token_check(const unsigned char *h, size_t header_len, uint64_t file_size,
                                            accel_data_token_info *out, char *msg, size_t cap) {
    int32_t magic, version, ntok;
    int width;
    uint64_t want;
    if (header_len < ACCEL_DATA_TOKEN_HEADER_BYTES || file_size < ACCEL_DATA_TOKEN_HEADER_BYTES) {
        snprintf(msg, cap, "%llu bytes is too small for the 1024-byte llm.c header (truncated file?)",
                 (unsigned long long)(file_size < header_len ? file_size : header_len));
        return ACCEL_ERR_FORMAT;
    }
    magic = (int32_t)accel__get_u32(h);
    version = (int32_t)accel__get_u32(h + 4);
    ntok = (int32_t)accel__get_u32(h + 8);
    if (magic == ACCEL_DATA_GPT2_MAGIC) {
        width = 2;
        if (version != ACCEL_DATA_GPT2_VERSION) {
            snprintf(msg, cap, "GPT-2 magic %d with version %d (expected %d)", (int)magic, (int)version,
                     ACCEL_DATA_GPT2_VERSION);
            return ACCEL_ERR_FORMAT;
        }
    } else if (magic == ACCEL_DATA_LLAMA3_MAGIC) {
        width = 4;
        if (version != ACCEL_DATA_LLAMA3_VERSION) {
            snprintf(msg, cap, "Llama-3 magic %d with version %d (expected %d)", (int)magic, (int)version,
                     ACCEL_DATA_LLAMA3_VERSION);
            return ACCEL_ERR_FORMAT;
        }
    } else {
        snprintf(msg, cap, "bad magic %d (expected %d for GPT-2 uint16 or %d for Llama-3 uint32 tokens)", (int)magic,
                 ACCEL_DATA_GPT2_MAGIC, ACCEL_DATA_LLAMA3_MAGIC);
        return ACCEL_ERR_FORMAT;
    }
    if (ntok < 0) {
        snprintf(msg, cap, "negative token count %d in header[2]", (int)ntok);
        return ACCEL_ERR_FORMAT;
    }
    want = (uint64_t)ACCEL_DATA_TOKEN_HEADER_BYTES + (uint64_t)ntok * (uint64_t)width;
    if (file_size != want) {
        snprintf(msg, cap, "header says %d tokens of %d bytes (a file of %llu bytes) but the file has %llu bytes (%s)",
                 (int)ntok, width, (unsigned long long)want, (unsigned long long)file_size,
                 file_size < want ? "truncated" : "trailing bytes");
        return ACCEL_ERR_FORMAT;
    }
    out->magic = magic;
    out->version = version;
    out->token_bytes = width;
    out->num_tokens = ntok;
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_data_token_header_parse(accel *acc, const void *header, size_t header_len,
                                                     uint64_t file_size, accel_data_token_info *out) {
    char msg[512];
    accel_data_token_info info;
    accel_result r;
    if (!header || !out) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "token header: NULL argument");
    r = accel__data_token_check((const unsigned char *)header, header_len, file_size, &info, msg, sizeof msg);
    if (r != ACCEL_OK) return ACCEL__FAIL(acc, r, "token shard: %s", msg);
    *out = info;
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_data_token_file_open(accel *acc, accel_data_token_file *f, const char *path) {
#if defined(_WIN32)
    (void)f; (void)path;
    return ACCEL__FAIL(acc, ACCEL_ERR_UNSUPPORTED, "token shards need POSIX mmap");
#else
    unsigned char hdr[ACCEL_DATA_TOKEN_HEADER_BYTES];
    struct stat sb;
    accel_data_token_info info;
    accel_result r;
    size_t got;
    void *map;
    int fd;
    if (!f || !path) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "token_file_open: NULL argument");
    memset(f, 0, sizeof *f);
    fd = accel__open_regular_fd(path, &sb); /* a FIFO must not hang the open */
    if (fd < 0) {
        if (errno == ENOENT) return ACCEL__FAIL(acc, ACCEL_ERR_NOT_FOUND, "token shard %s: no such file", path);
        if (errno == EINVAL) return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "token shard %s: not a regular file", path);
        return accel__io_fail(acc, "token shard: cannot open", path);
    }
    got = (uint64_t)sb.st_size < sizeof hdr ? (size_t)sb.st_size : sizeof hdr;
    if (accel__pread_all(fd, hdr, got, 0) != 0) {
        r = accel__io_fail(acc, "token shard: cannot read", path);
        close(fd);
        return r;
    }
    {
        char msg[512];
        r = accel__data_token_check(hdr, got, (uint64_t)sb.st_size, &info, msg, sizeof msg);
        if (r != ACCEL_OK) {
            close(fd);
            return ACCEL__FAIL(acc, r, "token shard %s: %s", path, msg);
        }
    }
    if ((uint64_t)sb.st_size > (uint64_t)SIZE_MAX) {
        close(fd);
        return ACCEL__FAIL(acc, ACCEL_ERR_UNSUPPORTED, "token shard %s: %llu bytes do not fit the address space", path,
                           (unsigned long long)sb.st_size);
    }
    map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        r = ACCEL__FAIL(acc, ACCEL_ERR_IO, "token shard %s: mmap of %llu bytes: %s", path,
                        (unsigned long long)sb.st_size, strerror(errno));
        close(fd);
        return r;
    }
    close(fd); /* the mapping keeps the file */
#ifdef MADV_SEQUENTIAL
    (void)madvise(map, (size_t)sb.st_size, MADV_SEQUENTIAL);
#endif
    f->info = info;
    f->map = map;
    f->map_bytes = (uint64_t)sb.st_size;
    f->tokens = (const uint8_t *)map + ACCEL_DATA_TOKEN_HEADER_BYTES;
    f->acc = acc;
    return ACCEL_OK;
#endif
}

ACCEL__DEF void accel_data_token_file_deinit(accel_data_token_file *f) {
    if (!f) return;
#if !defined(_WIN32)
    if (f->map) munmap(f->map, (size_t)f->map_bytes);
#endif
    memset(f, 0, sizeof *f);
}

static int accel__data_little_endian(void) {
    const uint16_t one = 1;
    unsigned char c;
    memcpy(&c, &one, 1);
    return c == 1;
}

/* Reading ahead: the pages of a token file come from the page cache in no order the hardware prefetcher can follow
   across 4 KiB pages, so each 64-byte line is converted while the line ACCEL__DATA_AHEAD bytes further on is
   requested — further in the row, then in the row the caller reads next. One pass over the bytes; measured in
   bench/data (token_loader_read_*). */
#define ACCEL__DATA_AHEAD 2048
#if (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDA_ARCH__)
#define ACCEL__DATA_PREFETCH(p) __builtin_prefetch((const void *)(p), 0, 3)
#else
#define ACCEL__DATA_PREFETCH(p) ((void)(p))
#endif

/* count uint16 little-endian tokens at p as int32 (little-endian host), 32 per line */
static void accel__data_widen_u16(const uint8_t *ACCEL_RESTRICT p, int64_t count, int32_t *ACCEL_RESTRICT d) {
    int64_t i = 0;
#if defined(__SSE2__) && !defined(__CUDACC__)
    {   /* x86-64 baseline: zero-extend 8 tokens per 16-byte load */
        const __m128i zero = _mm_setzero_si128();
        for (; i + 8 <= count; i += 8) {
            __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(p + 2 * i));
            _mm_storeu_si128((__m128i *)(void *)(d + i), _mm_unpacklo_epi16(v, zero));
            _mm_storeu_si128((__m128i *)(void *)(d + i + 4), _mm_unpackhi_epi16(v, zero));
        }
    }
#endif
    for (; i + 8 <= count; i += 8) { /* memcpy loads, no aliasing: two 8-byte loads per 8 tokens */
        uint64_t a, b;
        memcpy(&a, p + 2 * i, 8);
        memcpy(&b, p + 2 * i + 8, 8);
        d[i] = (int32_t)(a & 0xFFFFu); d[i + 1] = (int32_t)((a >> 16) & 0xFFFFu);
        d[i + 2] = (int32_t)((a >> 32) & 0xFFFFu); d[i + 3] = (int32_t)(a >> 48);
        d[i + 4] = (int32_t)(b & 0xFFFFu); d[i + 5] = (int32_t)((b >> 16) & 0xFFFFu);
        d[i + 6] = (int32_t)((b >> 32) & 0xFFFFu); d[i + 7] = (int32_t)(b >> 48);
    }
    for (; i < count; ++i) {
        uint16_t v;
        memcpy(&v, p + 2 * i, 2);
        d[i] = (int32_t)v;
    }
}

/* tokens [first, first + count) of f as int32 into dst; next (may be NULL): the next_bytes the caller reads after
   these (the next row), whose first ACCEL__DATA_AHEAD bytes are requested while the end of this range converts. */
static void accel__data_tokens_to_i32(const accel_data_token_file *f, int64_t first, int64_t count, int32_t *dst,
                                      const uint8_t *next, size_t next_bytes) {
    const int w = f->info.token_bytes;
    const uint8_t *src = f->tokens + first * w;
    const size_t bytes = (size_t)count * (size_t)w;
    size_t o;
    int64_t i;
    if (!accel__data_little_endian()) {
        if (w == 2)
            for (i = 0; i < count; ++i) dst[i] = (int32_t)accel__get_u16(src + 2 * i);
        else
            for (i = 0; i < count; ++i) dst[i] = (int32_t)accel__get_u32(src + 4 * i);
        return;
    }
    if (!next) next_bytes = 0;
    for (o = 0; o < bytes; o += 64) {
        size_t n = bytes - o < 64 ? bytes - o : 64, ahead = o + ACCEL__DATA_AHEAD;
        if (ahead < bytes) ACCEL__DATA_PREFETCH(src + ahead);
        else if (ahead - bytes < next_bytes) ACCEL__DATA_PREFETCH(next + (ahead - bytes));
        if (w == 2) accel__data_widen_u16(src + o, (int64_t)(n / 2), dst + o / 2);
        else if (n == 64) memcpy(dst + o / 4, src + o, 64); /* inlined */
        else memcpy(dst + o / 4, src + o, n);
    }
}

ACCEL__DEF accel_result accel_data_token_file_read(const accel_data_token_file *f, int64_t first, int64_t count,
                                                  int32_t *dst) {
    if (!f || !f->map || (!dst && count > 0))
        return ACCEL__FAIL(f ? f->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT,
                           "token_file_read: file not open or NULL buffer");
    if (first < 0 || count < 0 || first > f->info.num_tokens || count > f->info.num_tokens - first)
        return ACCEL__FAIL(f->acc, ACCEL_ERR_INVALID_ARGUMENT, "token_file_read: tokens [%lld, %lld) outside [0, %lld)",
                           (long long)first, (long long)(first + count), (long long)f->info.num_tokens);
    accel__data_tokens_to_i32(f, first, count, dst, NULL, 0);
    return ACCEL_OK;
}

/* --------------------------------------------------------------------------------------- sequence loader */
ACCEL__DEF void accel_data_seq_deinit(accel_data_seq_loader *ld) {
    int i;
    if (!ld) return;
    accel__data_end(ld->acc, ld, &ld->active);
    if (ld->files) {
        for (i = 0; i < ld->num_files; ++i) accel_data_token_file_deinit(&ld->files[i]);
        accel_host_free(ld->acc, ld->files);
    }
    if (ld->first_window) accel_host_free(ld->acc, ld->first_window);
    memset(ld, 0, sizeof *ld);
}

static int64_t accel__data_seq_total_tokens(const accel_data_seq_loader *ld) {
    int64_t s = 0;
    int i;
    for (i = 0; i < ld->num_files; ++i) s += ld->files[i].info.num_tokens;
    return s;
}

/* The local part of init: opens the files into *t (which the caller frees with deinit on any outcome). */
static accel_result accel__data_seq_make(accel *acc, accel_data_seq_loader *t, const accel_data_seq_desc *desc) {
    accel_result r;
    int i, P, p;
    int64_t per_batch;
    if (!desc) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_data_seq_init: NULL argument");
    if (desc->num_files < 1 || !desc->files)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "seq loader: no token files given");
    if (desc->batch_size < 1 || desc->seq_len < 1)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "seq loader: batch_size (%d) and seq_len (%d) must be >= 1",
                           desc->batch_size, desc->seq_len);
    if (desc->num_processes > 0) { P = desc->num_processes; p = desc->process_index; }
    else if (desc->num_processes == 0) { P = acc ? acc->num_processes : 1; p = acc ? acc->process_index : 0; }
    else return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "seq loader: num_processes %d < 0", desc->num_processes);
    if (p < 0 || p >= P)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "seq loader: process_index %d not in [0, %d)", p, P);
    t->acc = acc;
    t->batch_size = desc->batch_size; t->seq_len = desc->seq_len;
    t->num_processes = P; t->process_index = p;
    t->files = (accel_data_token_file *)accel_host_alloc(acc, sizeof(accel_data_token_file) * (size_t)desc->num_files);
    if (!t->files) return ACCEL_ERR_OUT_OF_MEMORY;
    memset(t->files, 0, sizeof(accel_data_token_file) * (size_t)desc->num_files);
    t->first_window = (int64_t *)accel_host_alloc(acc, sizeof(int64_t) * ((size_t)desc->num_files + 1));
    if (!t->first_window) return ACCEL_ERR_OUT_OF_MEMORY;
    t->first_window[0] = 0;
    for (i = 0; i < desc->num_files; ++i) {
        int64_t ntok, w;
        if ((r = accel_data_token_file_open(acc, &t->files[i], desc->files[i])) != ACCEL_OK) return r;
        t->num_files = i + 1;
        ntok = t->files[i].info.num_tokens;
        w = ntok > 0 ? (ntok - 1) / desc->seq_len : 0;
        t->first_window[i + 1] = t->first_window[i] + w;
    }
    t->num_windows = t->first_window[t->num_files];
    per_batch = (int64_t)P * desc->batch_size;
    t->num_batches = t->num_windows / per_batch;
    if ((r = accel_data_sampler_init(acc, &t->sampler, t->num_windows, desc->shuffle, desc->seed)) != ACCEL_OK)
        return r;
    if (t->num_batches == 0)
        accel_log(acc, ACCEL_LOG_WARN, "seq loader: %lld windows of %d+1 tokens are fewer than one global batch (%lld "
                  "rows): the epoch is empty", (long long)t->num_windows, desc->seq_len, (long long)per_batch);
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_data_seq_init(accel *acc, accel_data_seq_loader *ld, const accel_data_seq_desc *desc) {
    static const char *const names[6] = {"num_files", "total_tokens", "batch_size", "seq_len", "shuffle", "seed"};
    accel_data_seq_loader t;
    accel_result r;
    memset(&t, 0, sizeof t);
    r = ld ? accel__data_seq_make(acc, &t, desc)
           : ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_data_seq_init: loader is NULL");
    if (acc &&
        (!desc || desc->num_processes == 0 || desc->collective)) { /* every rank takes part, even after a failure */
        int64_t v[6];
        memset(v, 0, sizeof v);
        if (r == ACCEL_OK) {
            v[0] = t.num_files; v[1] = accel__data_seq_total_tokens(&t); v[2] = t.batch_size; v[3] = t.seq_len;
            v[4] = t.sampler.shuffle; v[5] = (int64_t)t.sampler.seed;
        }
        r = accel__agree_values(acc, r, "accel_data_seq_init", names, v, 6);
    }
    if (r != ACCEL_OK) {
        accel_data_seq_deinit(&t);
        return r;
    }
    if (acc) accel_dataloader_end(acc, ld); /* a loader re-initialized in place mid-epoch leaves acc's list */
    *ld = t;
    return ACCEL_OK;
}

ACCEL__DEF int64_t accel_data_seq_len(const accel_data_seq_loader *ld) { return ld ? ld->num_batches : 0; }
ACCEL__DEF int64_t accel_data_seq_epoch(const accel_data_seq_loader *ld) { return ld ? ld->epoch : 0; }

/* The file and first token of window w (the last file whose first window <= w). */
static const accel_data_token_file *accel__data_seq_window(const accel_data_seq_loader *ld, int64_t w, int64_t *first) {
    int lo = 0, hi = ld->num_files - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (ld->first_window[mid] <= w) lo = mid; else hi = mid - 1;
    }
    *first = (w - ld->first_window[lo]) * ld->seq_len;
    return &ld->files[lo];
}

ACCEL__DEF accel_result accel_data_seq_get_batch(const accel_data_seq_loader *ld, int64_t k, int32_t *dst) {
    const accel_data_token_file *f, *nf = NULL;
    int64_t row, base, first, nfirst = 0, n;
    if (!ld || !dst)
        return ACCEL__FAIL(ld ? ld->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, "seq get_batch: NULL argument");
    if (k < 0 || k >= ld->num_batches)
        return ACCEL__FAIL(ld->acc, ACCEL_ERR_INVALID_ARGUMENT, "seq loader: batch %lld out of range [0, %lld)",
                           (long long)k, (long long)ld->num_batches);
    n = (int64_t)ld->seq_len + 1;
    base = (k * ld->num_processes + ld->process_index) * (int64_t)ld->batch_size;
    f = accel__data_seq_window(ld, accel_data_sampler_index(&ld->sampler, base), &first);
    for (row = 0; row < ld->batch_size; ++row) {
        /* the row read next: this batch's next row, after the last one this rank's first row of batch k + 1 */
        int64_t next = row + 1 < ld->batch_size ? base + row + 1
                       : k + 1 < ld->num_batches
                           ? ((k + 1) * ld->num_processes + ld->process_index) * (int64_t)ld->batch_size
                           : -1;
        if (next >= 0) nf = accel__data_seq_window(ld, accel_data_sampler_index(&ld->sampler, next), &nfirst);
        else nf = NULL;
        accel__data_tokens_to_i32(f, first, n, dst + row * n, nf ? nf->tokens + nfirst * nf->info.token_bytes : NULL,
                                  (size_t)(n * (nf ? nf->info.token_bytes : 0)));
        f = nf;
        first = nfirst;
    }
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_data_seq_next(accel_data_seq_loader *ld, int32_t *dst, int *got) {
    accel_result r;
    if (!ld || !dst || !got)
        return ACCEL__FAIL(ld ? ld->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, "seq next: NULL argument");
    *got = 0;
    if ((r = accel__data_begin(ld->acc, ld, &ld->active, -1)) != ACCEL_OK) return r;
    if (ld->position >= ld->num_batches) {
        accel__data_end(ld->acc, ld, &ld->active);
        ld->position = 0;
        ld->epoch += 1;
        accel_data_sampler_set_epoch(&ld->sampler, ld->epoch);
        return ACCEL_OK;
    }
    r = accel_data_seq_get_batch(ld, ld->position, dst);
    if (r != ACCEL_OK) return r;
    ld->position += 1;
    *got = 1;
    if (ld->position == ld->num_batches && ld->acc) accel_dataloader_last_batch(ld->acc, ld);
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_data_seq_set_epoch(accel_data_seq_loader *ld, int64_t epoch) {
    if (!ld) return ACCEL__FAIL(NULL, ACCEL_ERR_INVALID_ARGUMENT, "seq set_epoch: NULL loader");
    if (epoch < 0 || epoch > ((int64_t)1 << 62))
        return ACCEL__FAIL(ld->acc, ACCEL_ERR_INVALID_ARGUMENT, "seq loader: epoch %lld not in [0, 2^62]",
                           (long long)epoch);
    if (epoch == ld->epoch && !ld->active) return ACCEL_OK; /* keeps a restored or skipped position */
    accel__data_end(ld->acc, ld, &ld->active);
    ld->epoch = epoch;
    ld->position = 0;
    accel_data_sampler_set_epoch(&ld->sampler, epoch);
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_data_seq_skip_first_batches(accel_data_seq_loader *ld, int64_t n) {
    if (!ld) return ACCEL__FAIL(NULL, ACCEL_ERR_INVALID_ARGUMENT, "seq skip_first_batches: NULL loader");
    if (n < 0)
        return ACCEL__FAIL(ld->acc, ACCEL_ERR_INVALID_ARGUMENT, "seq skip_first_batches: n = %lld < 0", (long long)n);
    if (ld->active)
        return ACCEL__FAIL(ld->acc, ACCEL_ERR_STATE, "seq skip_first_batches: the epoch is already being iterated");
    ld->position = n;
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_data_seq_state_save(void *loader, void *buf, size_t cap, size_t *size) {
    const accel_data_seq_loader *ld = (const accel_data_seq_loader *)loader;
    unsigned char *p = (unsigned char *)buf;
    if (!ld || !size)
        return ACCEL__FAIL(ld ? ld->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, "seq state_save: loader or size is NULL");
    *size = ACCEL_DATA_SEQ_STATE_BYTES;
    if (!buf || cap < ACCEL_DATA_SEQ_STATE_BYTES) return ACCEL_OK; /* the size query */
    memcpy(p, "ACSQ", 4);
    accel__put_u32(p + 4, 1);
    accel__put_u64(p + 8, (uint64_t)accel__data_seq_total_tokens(ld));
    accel__put_u32(p + 16, (uint32_t)ld->num_files);
    accel__put_u32(p + 20, (uint32_t)ld->batch_size);
    accel__put_u32(p + 24, (uint32_t)ld->seq_len);
    accel__put_u32(p + 28, (uint32_t)ld->num_processes);
    accel__put_u32(p + 32, (uint32_t)ld->process_index);
    accel__put_u32(p + 36, ld->sampler.shuffle ? 16u : 0u);
    accel__put_u64(p + 40, ld->sampler.seed);
    accel__put_u64(p + 48, (uint64_t)ld->epoch);
    accel__put_u64(p + 56, (uint64_t)ld->position);
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_data_seq_state_decode(accel *acc, const void *buf, size_t size,
                                                   accel_data_seq_state_info *out) {
    const unsigned char *p = (const unsigned char *)buf;
    accel_data_seq_state_info d;
    if (!out) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_data_seq_state_decode: out is NULL");
    if (!buf || size != ACCEL_DATA_SEQ_STATE_BYTES || memcmp(p, "ACSQ", 4) != 0)
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT,
                           "seq state: not a sequence loader state (%zu bytes, want %d starting \"ACSQ\")", size,
                           ACCEL_DATA_SEQ_STATE_BYTES);
    if (accel__get_u32(p + 4) != 1)
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "seq state: unsupported version %u (this build reads 1)",
                           (unsigned)accel__get_u32(p + 4));
    d.total_tokens = (int64_t)accel__get_u64(p + 8);
    d.num_files = (int32_t)accel__get_u32(p + 16);
    d.batch_size = (int32_t)accel__get_u32(p + 20);
    d.seq_len = (int32_t)accel__get_u32(p + 24);
    d.num_processes = (int32_t)accel__get_u32(p + 28);
    d.process_index = (int32_t)accel__get_u32(p + 32);
    d.flags = accel__get_u32(p + 36);
    d.seed = accel__get_u64(p + 40);
    d.epoch = (int64_t)accel__get_u64(p + 48);
    d.position = (int64_t)accel__get_u64(p + 56);
    if (d.epoch < 0 || d.epoch > ((int64_t)1 << 62) || d.position < 0 || (d.flags & ~16u))
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "seq state: corrupt (epoch %lld, position %lld, flags 0x%x)",
                           (long long)d.epoch, (long long)d.position, (unsigned)d.flags);
    if (d.total_tokens < 0 || d.num_files < 1 || d.batch_size < 1 || d.seq_len < 1 || d.num_processes < 1 ||
        d.num_processes > (1 << 24) || d.process_index < 0 || d.process_index >= d.num_processes)
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT,
                           "seq state: corrupt (tokens %lld, files %d, B %d, T %d, process %d of %d)",
                           (long long)d.total_tokens, (int)d.num_files, (int)d.batch_size, (int)d.seq_len,
                           (int)d.process_index, (int)d.num_processes);
    *out = d;
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_data_seq_state_load(void *loader, const void *buf, size_t size) {
    accel_data_seq_loader *ld = (accel_data_seq_loader *)loader;
    accel_data_seq_state_info d;
    accel_result r;
    if (!ld || !buf)
        return ACCEL__FAIL(ld ? ld->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, "seq state_load: NULL argument");
    if ((r = accel_data_seq_state_decode(ld->acc, buf, size, &d)) != ACCEL_OK) return r;
    if (d.total_tokens != accel__data_seq_total_tokens(ld) || d.num_files != ld->num_files)
        return ACCEL__FAIL(ld->acc, ACCEL_ERR_MISMATCH,
                           "seq state: saved for %d files / %lld tokens, this loader has %d / %lld", (int)d.num_files,
                           (long long)d.total_tokens, ld->num_files, (long long)accel__data_seq_total_tokens(ld));
    if (d.batch_size != ld->batch_size || d.seq_len != ld->seq_len || d.num_processes != ld->num_processes)
        return ACCEL__FAIL(ld->acc, ACCEL_ERR_MISMATCH,
                           "seq state: saved for B=%d T=%d P=%d, this loader has B=%d T=%d P=%d", (int)d.batch_size,
                           (int)d.seq_len, (int)d.num_processes, ld->batch_size, ld->seq_len, ld->num_processes);
    if (((d.flags & 16u) != 0) != (ld->sampler.shuffle != 0))
        return ACCEL__FAIL(ld->acc, ACCEL_ERR_MISMATCH, "seq state: saved with shuffle %d, this loader has %d",
                           (d.flags & 16u) != 0, ld->sampler.shuffle);
    accel__data_end(ld->acc, ld, &ld->active);
    ld->sampler.seed = d.seed;
    ld->epoch = d.epoch;
    accel_data_sampler_set_epoch(&ld->sampler, d.epoch);
    ld->position = d.position;
    return ACCEL_OK;
}

/* ------------------------------------------------------------------------------------------------ staging */
ACCEL__DEF void accel_data_stager_deinit(accel_data_stager *st) {
    int i;
    if (!st) return;
#ifdef ACCEL_WITH_CUDA
    if (st->on_device && st->unrecorded && st->event[0] &&
        st->acc) /* copies of a partly submitted group: wait for them too */
        (void)cudaEventRecord((cudaEvent_t)st->event[0], (cudaStream_t)st->acc->stream);
#endif
    for (i = 0; i < st->nslots && i < ACCEL_DATA_STAGER_MAX_SLOTS; ++i) {
        if (st->on_device) {
#ifdef ACCEL_WITH_CUDA
            if (st->event[i]) {
                (void)cudaEventSynchronize((cudaEvent_t)st->event[i]);
                (void)cudaEventDestroy((cudaEvent_t)st->event[i]);
            }
#endif
            accel_pinned_free(st->acc, st->host[i]);
            accel_device_free(st->acc, st->dev[i]);
        } else {
            accel_host_free(st->acc, st->host[i]);
        }
    }
    memset(st, 0, sizeof *st);
}

ACCEL__DEF accel_result accel_data_stager_init(accel *acc, accel_data_stager *st, size_t bytes) {
    int i;
    if (!st || bytes == 0) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "stager_init: NULL stager or 0 bytes");
    memset(st, 0, sizeof *st);
    st->acc = acc;
    st->bytes = bytes;
    st->nslots = 2;
    st->group = 1;
    if (!acc || acc->device < 0) {
        for (i = 0; i < 2; ++i) {
            st->host[i] = accel_host_alloc(acc, bytes);
            if (!st->host[i]) {
                accel_data_stager_deinit(st);
                return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "stager: buffer %d of %zu bytes", i, bytes);
            }
            st->dev[i] = st->host[i];
        }
        return ACCEL_OK;
    }
#ifdef ACCEL_WITH_CUDA
    st->on_device = 1;
    {
        size_t want = ((size_t)4 << 20) / bytes;
        while (st->nslots < ACCEL_DATA_STAGER_MAX_SLOTS && (size_t)st->nslots * 2 <= want) st->nslots *= 2;
        st->group = st->nslots / 2;
    }
    for (i = 0; i < st->nslots; ++i) {
        cudaEvent_t ev;
        cudaError_t e;
        st->host[i] = accel_pinned_alloc(acc, bytes);
        if (!st->host[i]) {
            accel_data_stager_deinit(st);
            return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "stager: pinned buffer %d of %zu bytes", i, bytes);
        }
        st->dev[i] = accel_device_alloc(acc, bytes);
        if (!st->dev[i]) {
            accel_data_stager_deinit(st);
            return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "stager: device buffer %d of %zu bytes", i, bytes);
        }
        e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
        if (e != cudaSuccess) {
            accel_data_stager_deinit(st);
            return ACCEL__FAIL(acc, ACCEL_ERR_CUDA, "stager: cudaEventCreate failed: %s", cudaGetErrorString(e));
        }
        st->event[i] = (void *)ev;
    }
    return ACCEL_OK;
#else
    return ACCEL__FAIL(acc, ACCEL_ERR_UNSUPPORTED,
                       "stager: the Accelerator uses CUDA device %d but this implementation was "
                       "compiled without CUDA: compile the ACCEL_IMPLEMENTATION TU with nvcc",
                       acc->device);
#endif
}

ACCEL__DEF accel_result accel_data_stager_host(accel_data_stager *st, void **host) {
    if (!st || !host || !st->host[0])
        return ACCEL__FAIL(st ? st->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, "stager_host: not initialized");
#ifdef ACCEL_WITH_CUDA
    if (st->on_device && st->slot % st->group == 0 && st->in_flight[st->slot]) {
        /* the group's event follows the copies out of all its slots (stream order) */
        cudaError_t e = cudaEventSynchronize((cudaEvent_t)st->event[st->slot]);
        if (e != cudaSuccess)
            return ACCEL__FAIL(st->acc, ACCEL_ERR_CUDA, "stager: cudaEventSynchronize failed: %s",
                               cudaGetErrorString(e));
        st->in_flight[st->slot] = 0;
    }
#endif
    *host = st->host[st->slot];
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_data_stager_submit(accel_data_stager *st, void **device) {
    int s;
    if (!st || !device || !st->host[0])
        return ACCEL__FAIL(st ? st->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, "stager_submit: not initialized");
    s = st->slot;
#ifdef ACCEL_WITH_CUDA
    if (st->on_device) {
        cudaStream_t stream = st->acc->stream;
        int g0 = s - s % st->group;
        cudaError_t e = cudaMemcpyAsync(st->dev[s], st->host[s], st->bytes, cudaMemcpyHostToDevice, stream);
        if (e != cudaSuccess)
            return ACCEL__FAIL(st->acc, ACCEL_ERR_CUDA, "stager: cudaMemcpyAsync of %zu bytes failed: %s", st->bytes,
                               cudaGetErrorString(e));
        st->unrecorded = 1;
        if (s + 1 == g0 + st->group) { /* the group's last slot: one event after its copies */
            e = cudaEventRecord((cudaEvent_t)st->event[g0], stream);
            if (e != cudaSuccess)
                return ACCEL__FAIL(st->acc, ACCEL_ERR_CUDA, "stager: cudaEventRecord failed: %s",
                                   cudaGetErrorString(e));
            st->in_flight[g0] = 1;
            st->unrecorded = 0;
        }
    }
#endif
    *device = st->dev[s];
    st->slot = (s + 1) % st->nslots;
    return ACCEL_OK;
}

#endif /* ACCEL_IMPLEMENTATION && !ACCEL__DATA_IMPL_DONE */

/* MIT License. Copyright (c) 2026 the accel authors. See README.md. */
