/* accel_zero.h — ZeRO for accel: the optimizer state and the gradients sharded over a communicator's ranks
   (DeepSpeed's ZeRO stages 1 and 2, FSDP's SHARD_GRAD_OP). Communication only: the update is accel_optim.h's, run
   over this rank's shard views (see its DESIGN FOR ZeRO). Builds on accel_ddp.h (stage 1 reduces with a DDP
   reducer), which builds on accel_collectives.h.

   CONTENTS
     USAGE
     OPTIONS                      accel_zero_desc
     PARTITION                    who owns which elements
     STAGES                       1: all-reduce; 2: each bucket reduced to its owners
     RESULTS AND ACCUMULATION
     CHECKPOINTS                  sharded (loadable on any number of processes) or consolidated
     COLLECTIVE CALLS AND ERRORS
     THREADS AND STREAMS
     DIFFERENCES FROM DEEPSPEED

   USAGE
       accel_zero_desc zd = {0};
       zd.stage = 2; zd.params = params; zd.grads = grads; zd.n = N;   // the whole lists, the same on every rank
       accel_zero *z;
       accel_zero_create(coll, &zd, &z);                               // collective: partition + agreement
       accel_tensor vp[N], vg[N], vm[N];                               // this rank's shard: one view per parameter
       accel_zero_views(z, params, N, vp);
       accel_zero_views(z, model, N, vm);                              // BF16/F16 model copies (optional)
       accel_zero_grad_views(z, vg, N);
       od.params = vp; od.grads = vg; od.model = vm; od.nparams = N;   // the unsharded groups still apply
       od.index_offset = (uint64_t)accel_zero_get_partition(z)->begin; // stochastic rounding as unsharded
       accel_optim_create(&acc, &od, &opt);                            // moments: ceil(N/P) elements per rank
       each micro-batch: backward, accel_zero_grad_ready(z, i) as gradient i is final, accel_zero_wait(z);
       on a sync step: accel_optim_step(opt, NULL); accel_zero_gather(z, params, N); and (z, model, N)

   OPTIONS (accel_zero_desc, zero = default)
     stage             1 or 2 (0 → 1).
     params, grads, n  the whole parameter list (any dtype; the shapes matter) and its gradients (equal numels;
                       F64/F32/F16/BF16; stage 2: one dtype), the same on every rank.
     bucket_cap_mb     0 → 25: the reduce buckets (stage 1: the reducer's) and the all-gather chunks, MiB.
     no_average        nonzero: the gradients are summed (default: DDP's average, accel_ddp.h AVERAGING ORDER).

   PARTITION
     The list flattened in order (N elements), padded to P*S with S = ceil(N/P); rank r owns the contiguous
     [r*S, min((r+1)*S, N)) (the padding is never stored; the last ranks may own fewer or no elements). Views keep
     the list's indices (a parameter outside the shard is an empty view), so parameter groups, state keys
     ("state.<i>.exp_avg") and step counts are those of the unsharded optimizer.

   STAGES
     Stage 1: the gradients are all-reduced by an internal reducer (DDP's buckets and averaging order); each rank's
     optimizer reads its shard of them. Stage 2: buckets of whole gradients in reverse list order (bucket_cap_mb,
     as DDP) are pre-scaled by fl(1/P) as the reducer does and each rank's part of a bucket is reduced to its owner
     (accel_coll_reduce_async, root = owner; two buckets in flight, launched in bucket order as backward marks them
     ready); the owner copies its part into the shard gradient buffer (S elements), the only gradient memory the
     optimizer reads. Host buffers on MPI are reduced where they are (pre-scaled in place, as the reducer's direct
     mode: no staging); device buffers are packed into two bucket-sized staging buffers first. Stage 2 consumes
     the gradient buffers: after a reducing wait their contents are unspecified (zero them before accumulating
     again, as every trainer's zero_grad does). One process: no buckets, the gradient views are the caller's
     gradients. Gather: this rank's shard of a list reaches every rank in all_gathers of min(bucket_cap_mb, 4 MiB)
     in total (two in flight; the staging, 2 (P+1)/P chunks, is kept by the object).

   RESULTS AND ACCUMULATION
     Every element's update is the unsharded one, so ZeRO-1 equals the unsharded run (reducer + one optimizer over
     the whole list) bit for bit; ZeRO-2 too where the reduce sums in the all-reduce's order (always at P <= 2; Open
     MPI on one node at 3 and 4 in the tests), else within rounding. As the reducer, grad_ready/wait do nothing unless
     accel_should_reduce(acc): micro-batches accumulate in the full local gradients and the sync step reduces.

   CHECKPOINTS
     Sharded (each rank writes only its shard, loadable on any number of processes):
       accel_zero_state zs = {z, moments, nmoments};                   // accel_optim_state_tensors(opt, ...)
       accel_ckpt_register_sharded(ck, "zero_state", accel_zero_state_save, accel_zero_state_load_all, &zs);
     writes zero_state_<rank>.bin on every rank (the partition recorded: size, rank, range, parameter offsets);
     load_state hands every saved rank's bytes to load_all, which checks them all (same parameter list, dtypes, each
     file its rank's partition) and copies the pieces of this rank's new shard. Plus the step counts through
     accel_optim_shard_state (accel_optim.h).
     Consolidated (any number of processes; interop): accel_zero_export gathers the shard moments
     (accel_optim_state_tensors) into full-size tensors named by the same keys → accel_ckpt_register_optimizer; the
     step counts and hyperparameters go through accel_ckpt_register(ck, "optim_state", accel_optim_shard_state_save,
     accel_optim_shard_state_load, &ss) with ss = {opt, params}; after accel_ckpt_load_state on another P,
     accel_zero_import copies this rank's part back. The full-size buffers are needed around save/load only.

   COLLECTIVE CALLS AND ERRORS
     Collective over the communicator's group: create, wait (on reducing steps), gather, export; grad_ready as the
     reducer's. views, import and the state functions are local (save_state/load_state are collective). create
     validates the lists and checks that every rank gave the same stage and layout: a bad list or a different one on
     any rank fails every rank (the bad rank with its error, the others with ACCEL_ERR_REMOTE, or ACCEL_ERR_MISMATCH
     listing every rank's layout).

   THREADS AND STREAMS
     One thread at a time per object, the thread that uses its communicator. CUDA: the same code with device buffers
     (packing on acc.stream with the reducer's pre-scaling kernel, NCCL or CUDA-aware/staged MPI for the reduces and
     all-gathers); compiled by the nvcc build, tested on the CPU only.

   DIFFERENCES FROM DEEPSPEED
     - Micro-batches accumulate locally and only the sync step reduces (DeepSpeed reduces every micro-batch).
     - Parameters stay whole on every rank (stage 3, sharded parameters, is not here yet).
*/
#ifndef ACCEL_ZERO_H_INCLUDED
#define ACCEL_ZERO_H_INCLUDED
#include "accel.h"
#include "accel_ddp.h" /* stage 1's reducer, and through it accel_collectives.h's communicator */
#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------------------- the partition */
/* docs/semantics.md has no ZeRO section: this is DeepSpeed's ZeRO stages 1 and 2 (FSDP's SHARD_GRAD_OP), see the
   manual above. The partition of a list of n tensors over `size` ranks: the tensors are flattened in list order
   (total elements N), the flat vector is padded to size * S elements with S = ceil(N / size), and rank r owns the
   contiguous elements [r*S, min((r+1)*S, N)) — the padding is the tail of the last rank(s), never stored. */
typedef struct accel_zero_partition {
    int size, rank;
    int64_t total;      /* N: elements of the flattened list */
    int64_t shard;      /* S = ceil(N / size): each rank's slot (size * S >= N is the padded length) */
    int64_t begin, end; /* this rank's elements [begin, end) of the flattened list */
} accel_zero_partition;
/* Local (no communication): the partition of list t over `size` ranks as seen by `rank` (acc: errors; may be NULL). */
ACCEL_API accel_result accel_zero_partition_list(accel *acc, const accel_tensor *t, int n, int size, int rank,
                                                 accel_zero_partition *out);
/* The n views of this rank's shard of list t (tensors with the partitioned numels, any dtype): view i is the 1-D
   piece of t[i] inside [begin, end) (name and dtype of t[i]); a tensor outside the shard gives an empty view
   (shape {0}, ptr = t[i].ptr). Returns the number of non-empty views, or -1 when t does not match the partition. */
ACCEL_API int accel_zero_partition_views(const accel_zero_partition *p, const accel_tensor *t, int n,
                                         accel_tensor *views);

/* ---------------------------------------------------------------------------------------------------- ZeRO-1/2 */
typedef struct accel_zero_desc {
    int stage;                  /* 1 or 2 (0 → 1) */
    const accel_tensor *params; /* the parameter list that is partitioned (n entries; any dtype, shapes matter) */
    const accel_tensor *grads;  /* its gradients (numel equal; F64/F32/F16/BF16; stage 2: one dtype) */
    int n;
    double bucket_cap_mb;       /* 0 → 25: reduce buckets (stage 1: the reducer's) and all-gather chunks, MiB */
    int no_average;             /* nonzero: gradients are summed (default: DDP's average, as the reducer) */
} accel_zero_desc;
typedef struct accel_zero accel_zero;

/* Collective over c's group: validates the lists and that every rank gave the same stage and layout (a bad list
   or a different one on any rank fails every rank: the bad rank with its error, the others with ACCEL_ERR_REMOTE
   or ACCEL_ERR_MISMATCH listing every rank's layout). */
ACCEL_API accel_result accel_zero_create(accel_coll *c, const accel_zero_desc *desc, accel_zero **out);
ACCEL_API void accel_zero_destroy(accel_zero *z); /* NULL ok */
ACCEL_API const accel_zero_partition *accel_zero_get_partition(const accel_zero *z);
/* This rank's shard of list t (accel_zero_partition_views): n views for accel_optim_desc.params / .model, with
   accel_optim_desc.index_offset = partition begin. */
ACCEL_API accel_result accel_zero_views(accel_zero *z, const accel_tensor *t, int n, accel_tensor *views);
/* The n gradient views the shard's optimizer reads after accel_zero_wait: stage 1 views of desc.grads, stage 2
   views of the shard gradient buffer this object owns (shard elements, the gradients' dtype). */
ACCEL_API accel_result accel_zero_grad_views(accel_zero *z, accel_tensor *views, int n);
/* Gradient i holds its final local value (backward order is the overlap order); no-op unless accel_should_reduce. */
ACCEL_API accel_result accel_zero_grad_ready(accel_zero *z, int index);
/* Reduces what is left and waits: stage 1 every gradient holds the average (the reducer), stage 2 the shard buffer
   holds this rank's part of it (and the gradient buffers' contents are unspecified: zero them before the next
   accumulation). No-op unless accel_should_reduce(acc) (accumulation steps). Collective. */
ACCEL_API accel_result accel_zero_wait(accel_zero *z);
/* Every rank's shard of list t (n tensors of one dtype, the partitioned numels: the parameters, or their BF16/F16
   model copies) reaches every rank, in chunks of bucket_cap_mb (two in flight). Collective. */
ACCEL_API accel_result accel_zero_gather(accel_zero *z, const accel_tensor *t, int n);
/* Optimizer state across partitions (param-major lists of m = n*k tensors, k per parameter, as
   accel_optim_state_tensors gives them): export writes every rank's shard views `shard` into the full-size tensors
   `full` on every rank (collective; the consolidated, unsharded state), import copies this rank's part of `full`
   into `shard` (local: full may come from a checkpoint saved with any number of ranks). */
ACCEL_API accel_result accel_zero_export(accel_zero *z, const accel_tensor *shard, const accel_tensor *full, int m);
ACCEL_API accel_result accel_zero_import(accel_zero *z, const accel_tensor *full, const accel_tensor *shard, int m);
/* Sharded checkpoints of the shard's optimizer state: each rank saves only its shard with the partition recorded,
   and a load on any number of ranks re-partitions. obj: an accel_zero_state; register it with
     accel_ckpt_register_sharded(ck, "zero_state", accel_zero_state_save, accel_zero_state_load_all, &zs);
   (→ zero_state_<rank>.bin on every rank), next to the step counts (accel_optim_shard_state, a global file).
   The bytes (little-endian): "ACZS", u32 version 1, u32 size, u32 rank, u64 total, u64 begin, u64 end, u32 n, u32 k,
   (n + 1) u64 flat offsets of the parameters, then per state tensor (param-major, m = n * k): u32 dtype, u64
   elements, its bytes. load_all validates every saved rank's bytes (same parameter layout, k and dtypes; each file
   the partition of its rank) before copying this rank's new shard out of them. */
typedef struct accel_zero_state {
    accel_zero *zero;
    const accel_tensor *shard; /* the m state tensors of the shard's optimizer (accel_optim_state_tensors) */
    int m;
} accel_zero_state;
ACCEL_API accel_result accel_zero_state_save(void *state, void *buf, size_t cap, size_t *size);
ACCEL_API accel_result accel_zero_state_load_all(void *state, const void *const *bufs, const size_t *sizes, int count);

#ifdef __cplusplus
}
#endif
#endif /* ACCEL_ZERO_H_INCLUDED */

/* ========================================================================================== implementation */
#if defined(ACCEL_IMPLEMENTATION) && !defined(ACCEL__ZERO_IMPL_DONE)
#define ACCEL__ZERO_IMPL_DONE
#include "accel_ddp.h" /* its implementation (and the communicator's) first, when included before */
/* CONTENTS (the core's private services come from accel.h's implementation section, the communicator's lent
   internals — struct accel_coll's fields, accel__coll_copy / _copy_same / _prescale / _alloc_mem / _host_op / _agree /
   _orphan / _null / _reducible — from accel_collectives.h's; both precede this one in the same TU, as does
   accel_ddp.h's, whose reducer stage 1 uses through its public functions)
     1. the partition and shard views
     2. ZeRO-1/2: creation, stage-2 reduce-to-owner buckets, the chunked all-gather
     3. state export / import, per-rank state files (accel_zero_state_save / _load_all) */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --------------------------------------------------------------------------------- 1. the partition and shard views */
ACCEL__DEF accel_result accel_zero_partition_list(accel *acc, const accel_tensor *t, int n, int size, int rank,
                                                  accel_zero_partition *out) {
    int64_t total = 0;
    int i;
    if (!out) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_zero_partition_list: out is NULL");
    memset(out, 0, sizeof *out);
    if (n < 0 || (n > 0 && !t))
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "partition: %d tensors at %p", n, (const void *)t);
    if (size < 1 || rank < 0 || rank >= size)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "partition: rank %d of %d ranks", rank, size);
    for (i = 0; i < n; ++i) {
        int64_t k = accel_tensor_numel(&t[i]);
        if (k < 0)
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                               "partition: tensor %d ('%s') has an invalid shape (ndim %d)", i,
                               t[i].name ? t[i].name : "", t[i].ndim);
        if (total > INT64_MAX / 2 - k)
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "partition: the list has more than 2^62 elements");
        total += k;
    }
    out->size = size;
    out->rank = rank;
    out->total = total;
    out->shard = total / size + (total % size != 0);
    out->begin = (int64_t)rank * out->shard < total ? (int64_t)rank * out->shard : total;
    out->end = out->begin + out->shard < total ? out->begin + out->shard : total;
    return ACCEL_OK;
}

ACCEL__DEF int accel_zero_partition_views(const accel_zero_partition *p, const accel_tensor *t, int n,
                                          accel_tensor *views) {
    int64_t off = 0;
    int i, cnt = 0;
    if (!p || n < 0 || (n > 0 && (!t || !views))) return -1;
    for (i = 0; i < n; ++i) {
        int64_t k = accel_tensor_numel(&t[i]), lo, hi;
        accel_tensor v;
        if (k < 0) return -1;
        lo = off > p->begin ? off : p->begin;
        hi = off + k < p->end ? off + k : p->end;
        memset(&v, 0, sizeof v);
        v.name = t[i].name;
        v.dtype = t[i].dtype;
        v.ndim = 1;
        v.ptr = t[i].ptr;
        if (hi > lo) {
            v.ptr = (unsigned char *)t[i].ptr + (size_t)(lo - off) * accel_dtype_size(t[i].dtype);
            v.shape[0] = hi - lo;
            ++cnt;
        }
        views[i] = v;
        off += k;
    }
    return off == p->total ? cnt : -1;
}

/* ----------------------------------- 2. ZeRO-1/2: creation, stage-2 reduce-to-owner buckets, the chunked all-gather */
/* All-gather chunks: at most this many bytes in total per all_gather (or bucket_cap_mb if smaller); larger chunks
   gained nothing on MPI over shared memory and cost staging memory. */
#define ACCEL__ZERO_CHUNK ((size_t)4 << 20)

/* ZeRO-2 bucket: parameters [first, last] (reverse registration order across buckets, as DDP), flat range [lo, hi) */
typedef struct accel__zero_bucket {
    int first, last, pending;
    int64_t lo, hi;
} accel__zero_bucket;

struct accel_zero {
    accel_coll *c;
    int stage, n, average;
    size_t cap_bytes;
    accel_zero_partition part;
    int64_t *off;            /* n + 1 flat offsets */
    accel_tensor *grads;     /* copies of desc.grads (no names) */
    accel_dtype gdt;         /* stage 2: the gradients' dtype */
    accel_ddp *red; /* stage 1 */
    /* stage 2 */
    void *shard_grad;        /* part.shard elements of gdt (at least 1) */
    accel__zero_bucket *buckets;
    int nb, next_launch;
    int *bucket_of, *ready;
    int direct;              /* host MPI: gradients reduced where they are (pre-scaled in place), no staging */
    void *slot[2];           /* staging of two buckets in flight (device buffers) */
    int slot_bucket[2];      /* -1: free */
    accel_coll_request **slot_req[2]; /* stb_ds arrays: the reduces of the bucket in the slot */
    size_t slot_elems;
    /* gather staging (grown on demand) */
    void *gbuf;
    size_t gbuf_bytes;
};

static accel_result accel__zero_null(void) {
    return accel__fail(NULL, ACCEL_ERR_INVALID_ARGUMENT, __FILE__, __LINE__, "accel_zero: object is NULL");
}

/* Copies the flat elements [lo, hi) of list t (offsets z->off, element size es) to buf (to_buf) or back. */
static accel_result accel__zero_copy(accel_zero *z, const accel_tensor *t, int64_t lo, int64_t hi, void *buf,
                                          size_t es, int to_buf) {
    int a = 0, b = z->n, i;
    while (a < b) { /* first tensor that ends after lo */
        int mid = (a + b) / 2;
        if (z->off[mid + 1] <= lo) a = mid + 1;
        else b = mid;
    }
    for (i = a; i < z->n && z->off[i] < hi; ++i) {
        int64_t s = z->off[i] > lo ? z->off[i] : lo, e = z->off[i + 1] < hi ? z->off[i + 1] : hi;
        unsigned char *tp, *bp;
        accel_result r;
        if (s >= e) continue;
        tp = (unsigned char *)t[i].ptr + (size_t)(s - z->off[i]) * es;
        bp = (unsigned char *)buf + (size_t)(s - lo) * es;
        r = accel__coll_copy_same(z->c, to_buf ? (void *)bp : (void *)tp, to_buf ? (const void *)tp : (const void *)bp,
                                  (size_t)(e - s) * es, z->c->device_mem);
        if (r != ACCEL_OK) return r;
    }
    return ACCEL_OK;
}

ACCEL__DEF void accel_zero_destroy(accel_zero *z) {
    accel *acc;
    int k;
    if (!z) return;
    acc = z->c->acc;
    for (k = 0; k < 2; ++k) {
        int i;
        for (i = 0; i < (int)stbds_arrlen(z->slot_req[k]); ++i)
            if (z->slot_req[k][i]) accel__coll_orphan(z->slot_req[k][i]);
        stbds_arrfree(z->slot_req[k]);
        accel_coll_free(z->c, z->slot[k]);
    }
    accel_ddp_destroy(z->red);
    accel_coll_free(z->c, z->shard_grad);
    accel_coll_free(z->c, z->gbuf);
    accel_host_free(acc, z->off);
    accel_host_free(acc, z->grads);
    accel_host_free(acc, z->buckets);
    accel_host_free(acc, z->bucket_of);
    accel_host_free(acc, z);
}

/* What every rank must agree on: stage, averaging, count, total, and a hash of every numel and gradient dtype. */
static accel_result accel__zero_check_layout(accel_zero *z) {
    accel_coll *c = z->c;
    int64_t mine[5], *all;
    uint64_t h = ACCEL__FNV_INIT;
    accel_result r;
    int i;
    if (c->size <= 1) return ACCEL_OK;
    for (i = 0; i < z->n; ++i) {
        unsigned char b[12];
        accel__put_u64(b, (uint64_t)(z->off[i + 1] - z->off[i]));
        accel__put_u32(b + 8, (uint32_t)z->grads[i].dtype);
        h = accel__fnv1a(h, b, sizeof b);
    }
    mine[0] = z->stage;
    mine[1] = z->average;
    mine[2] = z->n;
    mine[3] = z->part.total;
    mine[4] = (int64_t)(h >> 1);
    all = (int64_t *)accel_host_alloc(c->acc, sizeof mine * (size_t)c->size);
    r = accel__coll_agree(c, all ? ACCEL_OK : accel__fail_wrap(c->acc, ACCEL_ERR_OUT_OF_MEMORY, "accel_zero_create"),
                          "accel_zero_create (layout)");
    if (r == ACCEL_OK) r = accel__coll_host_op(c, ACCEL__K_ALLGATHER, mine, all, sizeof mine, 0, NULL);
    for (i = 0; r == ACCEL_OK && i < c->size; ++i)
        if (memcmp(all + 5 * i, mine, sizeof mine) != 0) {
            accel__sb b;
            int k;
            accel__sb_init(&b, c->acc);
            accel__sb_printf(&b, "accel_zero_create: ranks gave different lists:");
            for (k = 0; k < c->size; ++k)
                accel__sb_printf(&b, " rank %d: stage %lld, %s, %lld tensors, %lld elements, layout hash %llx;", k,
                                 (long long)all[5 * k], all[5 * k + 1] ? "average" : "sum", (long long)all[5 * k + 2],
                                 (long long)all[5 * k + 3], (unsigned long long)all[5 * k + 4]);
            r = ACCEL__FAIL(c->acc, ACCEL_ERR_MISMATCH, "%s",
                            b.oom ? "accel_zero_create: ranks gave different lists" : b.p);
            accel__sb_free(&b);
        }
    accel_host_free(c->acc, all);
    return r;
}

/* Stage 2: DDP's bucket assignment over whole tensors in reverse order (a bucket closes once it reaches the cap). */
static accel_result accel__zero_buckets(accel_zero *z) {
    accel *acc = z->c->acc;
    size_t es = accel_dtype_size(z->gdt), bytes = 0, most = 1;
    int i, b;
    z->buckets = (accel__zero_bucket *)accel_host_alloc(acc, sizeof(accel__zero_bucket) * (size_t)(z->n + 1));
    z->bucket_of = (int *)accel_host_alloc(acc, sizeof(int) * 2 * (size_t)(z->n + 1));
    if (!z->buckets || !z->bucket_of)
        return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "accel_zero_create (buckets)");
    memset(z->bucket_of, 0, sizeof(int) * 2 * (size_t)(z->n + 1));
    z->ready = z->bucket_of + z->n + 1;
    z->nb = 0;
    for (i = z->n - 1; i >= 0; --i) {
        int64_t k = z->off[i + 1] - z->off[i];
        if (bytes == 0) {
            z->buckets[z->nb].last = i;
            z->buckets[z->nb].hi = z->off[i + 1];
            ++z->nb;
        }
        b = z->nb - 1;
        z->buckets[b].first = i;
        z->buckets[b].lo = z->off[i];
        z->bucket_of[i] = b;
        bytes += (size_t)k * es + 1; /* + 1: empty tensors still fill a bucket eventually */
        if (bytes >= z->cap_bytes || i == 0 || (size_t)(z->buckets[b].hi - z->off[i - 1]) > (size_t)INT_MAX) bytes = 0;
    }
    for (b = 0; b < z->nb; ++b) {
        size_t e = (size_t)(z->buckets[b].hi - z->buckets[b].lo);
        if (e > most) most = e;
        z->buckets[b].pending = z->buckets[b].last - z->buckets[b].first + 1;
    }
    z->slot_elems = most;
    z->direct = !z->c->device_mem && z->c->backend == ACCEL_COLL_BACKEND_MPI;
    for (i = 0; i < 2; ++i) {
        z->slot_bucket[i] = -1;
        if (z->direct) continue;
        z->slot[i] = accel__coll_alloc_mem(z->c, most * es);
        if (!z->slot[i]) return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "accel_zero_create (staging)");
    }
    z->shard_grad = accel__coll_alloc_mem(z->c, (size_t)(z->part.shard > 0 ? z->part.shard : 1) * es);
    if (!z->shard_grad) return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "accel_zero_create (shard gradients)");
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_zero_create(accel_coll *c, const accel_zero_desc *desc, accel_zero **out) {
    accel *acc;
    accel_zero_desc d;
    accel_zero *z = NULL;
    accel_result r = ACCEL_OK;
    int i;
    if (!c) return accel__coll_null();
    acc = c->acc;
    if (out) *out = NULL;
    if (desc) d = *desc;
    else memset(&d, 0, sizeof d);
    if (d.stage == 0) d.stage = 1;
    if (!out) r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_zero_create: out is NULL");
    else if (d.stage != 1 && d.stage != 2)
        r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_zero_create: stage %d (1 or 2)", d.stage);
    else if (!(d.bucket_cap_mb >= 0.0 && d.bucket_cap_mb < 1e9))
        r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_zero_create: bucket_cap_mb %g (0 = 25)",
                        d.bucket_cap_mb);
    else if (d.n < 0 || (d.n > 0 && (!d.params || !d.grads)))
        r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_zero_create: n %d with params %p, grads %p", d.n,
                        (const void *)d.params, (const void *)d.grads);
    if (r == ACCEL_OK) {
        z = (accel_zero *)accel_host_alloc(acc, sizeof *z);
        if (!z) r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "accel_zero_create");
    }
    if (r == ACCEL_OK) {
        memset(z, 0, sizeof *z);
        z->c = c;
        z->stage = d.stage;
        z->n = d.n;
        z->average = !d.no_average;
        z->cap_bytes = (size_t)((d.bucket_cap_mb > 0.0 ? d.bucket_cap_mb : 25.0) * 1048576.0);
        if (z->cap_bytes == 0) z->cap_bytes = 1;
        z->off = (int64_t *)accel_host_alloc(acc, sizeof(int64_t) * (size_t)(d.n + 1));
        z->grads = (accel_tensor *)accel_host_alloc(acc, sizeof(accel_tensor) * (size_t)(d.n + 1));
        if (!z->off || !z->grads) r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "accel_zero_create");
    }
    if (r == ACCEL_OK) r = accel_zero_partition_list(acc, d.params, d.n, c->size, c->rank, &z->part);
    for (i = 0; r == ACCEL_OK && i < d.n; ++i) {
        const accel_tensor *g = &d.grads[i];
        int64_t pk = accel_tensor_numel(&d.params[i]), gk = accel_tensor_numel(g);
        const char *nm = d.params[i].name ? d.params[i].name : "";
        z->off[i] = i == 0 ? 0 : z->off[i - 1] + accel_tensor_numel(&d.params[i - 1]);
        z->grads[i] = *g;
        z->grads[i].name = NULL;
        if (gk != pk)
            r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                            "accel_zero_create: grads[%d] has %lld elements, its parameter "
                            "'%s' has %lld",
                            i, (long long)gk, nm, (long long)pk);
        else if (!accel_dtype_is_float(g->dtype) || !accel__coll_reducible(g->dtype))
            r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                            "accel_zero_create: grads[%d] ('%s') is %s (F64/F32/F16/BF16)", i, nm,
                            accel_dtype_name(g->dtype) ? accel_dtype_name(g->dtype) : "invalid");
        else if (gk > 0 && !g->ptr)
            r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_zero_create: grads[%d] ('%s') has no data pointer",
                            i, nm);
        else if (d.stage == 2 && g->dtype != d.grads[0].dtype)
            r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                            "accel_zero_create: stage 2 needs one gradient dtype (grads[0] is "
                            "%s, grads[%d] ('%s') %s)",
                            accel_dtype_name(d.grads[0].dtype), i, nm, accel_dtype_name(g->dtype));
    }
    if (r == ACCEL_OK) z->off[d.n] = z->part.total;
    /* a bad list on one rank fails every rank; then the layouts must agree */
    r = accel__coll_agree(c, r, "accel_zero_create");
    if (r == ACCEL_OK) r = accel__zero_check_layout(z);
    if (r == ACCEL_OK && z->stage == 1) {
        accel_ddp_desc rd;
        memset(&rd, 0, sizeof rd);
        rd.bucket_cap_mb = d.bucket_cap_mb;
        rd.no_average = d.no_average;
        r = accel_ddp_create(c, &rd, &z->red);
        if (r == ACCEL_OK) r = accel_ddp_add(z->red, d.grads, d.n);
        r = accel__coll_agree(c, r, "accel_zero_create (reducer)");
        if (r == ACCEL_OK) r = accel_ddp_finalize(z->red); /* collective, agrees itself */
    } else if (r == ACCEL_OK) {
        if (d.n > 0) z->gdt = d.grads[0].dtype;
        else z->gdt = ACCEL_F32;
        /* one process: the gradients are final where they are (no buckets, no shard copy) */
        if (c->size > 1) r = accel__coll_agree(c, accel__zero_buckets(z), "accel_zero_create (buckets)");
    }
    if (r != ACCEL_OK) {
        accel_zero_destroy(z);
        return r;
    }
    accel_log(acc, ACCEL_LOG_DEBUG, "zero: stage %d, %d tensors, %lld elements, shard [%lld, %lld) of %lld per rank%s",
              z->stage, z->n, (long long)z->part.total, (long long)z->part.begin, (long long)z->part.end,
              (long long)z->part.shard, z->stage == 2 ? "" : " (gradients: the reducer)");
    *out = z;
    return ACCEL_OK;
}

ACCEL__DEF const accel_zero_partition *accel_zero_get_partition(const accel_zero *z) { return z ? &z->part : NULL; }

ACCEL__DEF accel_result accel_zero_views(accel_zero *z, const accel_tensor *t, int n, accel_tensor *views) {
    int i;
    if (!z) return accel__zero_null();
    if (n != z->n || (n > 0 && (!t || !views)))
        return ACCEL__FAIL(z->c->acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_zero_views: %d tensors for a partition of %d",
                           n, z->n);
    for (i = 0; i < n; ++i)
        if (accel_tensor_numel(&t[i]) != z->off[i + 1] - z->off[i])
            return ACCEL__FAIL(z->c->acc, ACCEL_ERR_INVALID_ARGUMENT,
                               "accel_zero_views: tensor %d ('%s') has %lld elements, the "
                               "partitioned one %lld",
                               i, t[i].name ? t[i].name : "", (long long)accel_tensor_numel(&t[i]),
                               (long long)(z->off[i + 1] - z->off[i]));
    (void)accel_zero_partition_views(&z->part, t, n, views);
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_zero_grad_views(accel_zero *z, accel_tensor *views, int n) {
    int i;
    if (!z) return accel__zero_null();
    if (z->stage == 1 || !z->shard_grad) return accel_zero_views(z, z->grads, n, views);
    if (n != z->n || (n > 0 && !views))
        return ACCEL__FAIL(z->c->acc, ACCEL_ERR_INVALID_ARGUMENT,
                           "accel_zero_grad_views: %d views for a partition of %d", n, z->n);
    for (i = 0; i < n; ++i) {
        int64_t lo = z->off[i] > z->part.begin ? z->off[i] : z->part.begin;
        int64_t hi = z->off[i + 1] < z->part.end ? z->off[i + 1] : z->part.end;
        memset(&views[i], 0, sizeof views[i]);
        views[i].dtype = z->gdt;
        views[i].ndim = 1;
        views[i].ptr = z->shard_grad;
        if (hi > lo) {
            views[i].ptr = (unsigned char *)z->shard_grad + (size_t)(lo - z->part.begin) * accel_dtype_size(z->gdt);
            views[i].shape[0] = hi - lo;
        }
    }
    return ACCEL_OK;
}

/* Stage 2: waits for the reduces of the bucket in slot k and copies this rank's part into the shard buffer. */
static accel_result accel__zero_finish(accel_zero *z, int k) {
    accel_result r = ACCEL_OK, e;
    int i, b = z->slot_bucket[k];
    if (b < 0) return ACCEL_OK;
    for (i = 0; i < (int)stbds_arrlen(z->slot_req[k]); ++i) {
        e = accel_coll_wait(z->slot_req[k][i]);
        if (e != ACCEL_OK && r == ACCEL_OK) r = e;
    }
    if (z->slot_req[k]) stbds_header(z->slot_req[k])->length = 0;
    z->slot_bucket[k] = -1;
    if (r == ACCEL_OK) {
        const accel__zero_bucket *q = &z->buckets[b];
        int64_t lo = q->lo > z->part.begin ? q->lo : z->part.begin, hi = q->hi < z->part.end ? q->hi : z->part.end;
        size_t es = accel_dtype_size(z->gdt);
        if (hi > lo && z->direct) /* the sums landed in this rank's own gradient buffers */
            r = accel__zero_copy(z, z->grads, lo, hi,
                                 (unsigned char *)z->shard_grad + (size_t)(lo - z->part.begin) * es, es, 1);
        else if (hi > lo)
            r = accel__coll_copy_same(z->c, (unsigned char *)z->shard_grad + (size_t)(lo - z->part.begin) * es,
                                      (const unsigned char *)z->slot[k] + (size_t)(lo - q->lo) * es,
                                      (size_t)(hi - lo) * es, z->c->device_mem);
    }
    return r;
}

/* Stage 2: the flat elements [lo, hi) held at buf (buf's first element is flat element lo) reduced to their owners
   — the piece inside rank rk's shard goes to rk (accel_coll_reduce_async, SUM) — each request queued on slot k. */
static accel_result accel__zero_reduce_range(accel_zero *z, int k, void *buf, int64_t lo, int64_t hi) {
    accel_coll *c = z->c;
    size_t es = accel_dtype_size(z->gdt);
    int rk;
    for (rk = 0; rk < c->size; ++rk) {
        int64_t s0 = (int64_t)rk * z->part.shard, a = lo > s0 ? lo : s0;
        int64_t e = hi < s0 + z->part.shard ? hi : s0 + z->part.shard;
        accel_coll_request *req = NULL;
        void *p = (unsigned char *)buf + (size_t)(a - lo) * es;
        accel_result r;
        if (e <= a) continue;
        r = accel_coll_reduce_async(c, p, p, (size_t)(e - a), z->gdt, ACCEL_COLL_SUM, rk, &req);
        if (r != ACCEL_OK) return r;
        if (accel__arr_reserve((void **)&z->slot_req[k], sizeof req, 1) != 0) {
            accel_coll_wait(req);
            return ACCEL__FAIL(c->acc, ACCEL_ERR_OUT_OF_MEMORY, "zero: request list");
        }
        stbds_arrput(z->slot_req[k], req);
    }
    return ACCEL_OK;
}

/* Stage 2: packs bucket b (pre-scaled by 1/P when averaging: DDP's order) and reduces each rank's part to that rank. */
static accel_result accel__zero_launch(accel_zero *z, int b) {
    accel_coll *c = z->c;
    const accel__zero_bucket *q = &z->buckets[b];
    size_t es = accel_dtype_size(z->gdt);
    int k = b & 1, i;
    accel_result r = accel__zero_finish(z, k);
    if (r != ACCEL_OK) return r;
    if (z->direct) { /* each gradient piece is reduced in place to its owner (the reducer's direct mode) */
        z->slot_bucket[k] = b;
        for (i = q->first; i <= q->last; ++i) {
            int64_t n = z->off[i + 1] - z->off[i];
            if (n == 0) continue;
            if (z->average && c->size > 1) {
                r = accel__coll_prescale(c, z->grads[i].ptr, z->grads[i].ptr, (size_t)n, z->gdt);
                if (r != ACCEL_OK) return r;
            }
            r = accel__zero_reduce_range(z, k, z->grads[i].ptr, z->off[i], z->off[i + 1]);
            if (r != ACCEL_OK) return r;
        }
        return ACCEL_OK;
    }
    for (i = q->first; i <= q->last; ++i) {
        size_t cnt = (size_t)(z->off[i + 1] - z->off[i]);
        void *dst = (unsigned char *)z->slot[k] + (size_t)(z->off[i] - q->lo) * es;
        r = z->average && c->size > 1 ? accel__coll_prescale(c, dst, z->grads[i].ptr, cnt, z->gdt)
                                      : accel__coll_copy_same(c, dst, z->grads[i].ptr, cnt * es, c->device_mem);
        if (r != ACCEL_OK) return r;
    }
    z->slot_bucket[k] = b;
    if (c->size == 1) return ACCEL_OK; /* the bucket already holds the result */
    return accel__zero_reduce_range(z, k, z->slot[k], q->lo, q->hi);
}

static accel_result accel__zero_launch_ready(accel_zero *z) {
    while (z->next_launch < z->nb && z->buckets[z->next_launch].pending == 0) {
        accel_result r = accel__zero_launch(z, z->next_launch);
        z->next_launch++;
        if (r != ACCEL_OK) return r;
    }
    return ACCEL_OK;
}

static void accel__zero_reset(accel_zero *z) {
    int b, i;
    for (i = 0; i < z->n; ++i) z->ready[i] = 0;
    for (b = 0; b < z->nb; ++b) z->buckets[b].pending = z->buckets[b].last - z->buckets[b].first + 1;
    z->next_launch = 0;
}

ACCEL__DEF accel_result accel_zero_grad_ready(accel_zero *z, int index) {
    if (!z) return accel__zero_null();
    if (z->stage == 1) return accel_ddp_grad_ready(z->red, index);
    if (index < 0 || index >= z->n)
        return ACCEL__FAIL(z->c->acc, ACCEL_ERR_INVALID_ARGUMENT,
                           "accel_zero_grad_ready: index %d is not a gradient (0..%d)", index, z->n - 1);
    if (!accel_should_reduce(z->c->acc) || !z->shard_grad) return ACCEL_OK;
    if (z->ready[index])
        return ACCEL__FAIL(z->c->acc, ACCEL_ERR_STATE,
                           "accel_zero_grad_ready: gradient %d was already marked ready in this step", index);
    z->ready[index] = 1;
    z->buckets[z->bucket_of[index]].pending--;
    return accel__zero_launch_ready(z);
}

ACCEL__DEF accel_result accel_zero_wait(accel_zero *z) {
    accel_result r, first = ACCEL_OK;
    int b, k;
    if (!z) return accel__zero_null();
    if (z->stage == 1) return accel_ddp_wait(z->red);
    if (!z->shard_grad) return ACCEL_OK; /* one process */
    if (!accel_should_reduce(z->c->acc)) {
        accel__zero_reset(z);
        return ACCEL_OK;
    }
    for (b = 0; b < z->nb; ++b) z->buckets[b].pending = 0;
    first = accel__zero_launch_ready(z);
    /* the older bucket first (same order on every rank) */
    k = z->slot_bucket[0] >= 0 && (z->slot_bucket[1] < 0 || z->slot_bucket[0] < z->slot_bucket[1]) ? 0 : 1;
    r = accel__zero_finish(z, k);
    if (r != ACCEL_OK && first == ACCEL_OK) first = r;
    r = accel__zero_finish(z, 1 - k);
    if (r != ACCEL_OK && first == ACCEL_OK) first = r;
    accel__zero_reset(z);
    return first;
}

/* Local check of a list against the partition: n tensors, the partitioned numels, one dtype, data present. */
static accel_result accel__zero_check_list(accel_zero *z, const accel_tensor *t, int n, const char *what) {
    int i;
    if (n != z->n || (n > 0 && !t))
        return ACCEL__FAIL(z->c->acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: %d tensors for a partition of %d", what, n,
                           z->n);
    for (i = 0; i < n; ++i) {
        int64_t k = accel_tensor_numel(&t[i]);
        if (k != z->off[i + 1] - z->off[i])
            return ACCEL__FAIL(z->c->acc, ACCEL_ERR_INVALID_ARGUMENT,
                               "%s: tensor %d ('%s') has %lld elements, the partitioned one "
                               "%lld",
                               what, i, t[i].name ? t[i].name : "", (long long)k,
                               (long long)(z->off[i + 1] - z->off[i]));
        if (t[i].dtype != t[0].dtype || accel_dtype_size(t[i].dtype) == 0)
            return ACCEL__FAIL(z->c->acc, ACCEL_ERR_INVALID_ARGUMENT,
                               "%s: tensor %d ('%s') is %s, tensor 0 %s (one dtype per list)", what, i,
                               t[i].name ? t[i].name : "",
                               accel_dtype_name(t[i].dtype) ? accel_dtype_name(t[i].dtype) : "invalid",
                               accel_dtype_name(t[0].dtype) ? accel_dtype_name(t[0].dtype) : "invalid");
        if (k > 0 && !t[i].ptr)
            return ACCEL__FAIL(z->c->acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: tensor %d ('%s') has no data pointer", what,
                               i, t[i].name ? t[i].name : "");
    }
    return ACCEL_OK;
}

/* The all-gather of every shard of t, in chunks of the bucket size, two in flight. */
static accel_result accel__zero_gather_list(accel_zero *z, const accel_tensor *t) {
    accel_coll *c = z->c;
    const int P = c->size;
    const int64_t S = z->part.shard;
    size_t es = z->n > 0 ? accel_dtype_size(t[0].dtype) : 1, B, need;
    accel_dtype dt = z->n > 0 ? t[0].dtype : ACCEL_U8;
    accel_coll_request *req[2] = {NULL, NULL};
    int64_t start[2] = {0, 0}, cnt[2] = {0, 0}, at;
    accel_result r = ACCEL_OK, e;
    int k = 0, j;
    if (P <= 1 || S == 0) return ACCEL_OK;
    B = (z->cap_bytes < ACCEL__ZERO_CHUNK ? z->cap_bytes : ACCEL__ZERO_CHUNK) / es / (size_t)P;
    if (B < 1) B = 1;
    if (B > (size_t)S) B = (size_t)S;
    if (B > (size_t)INT_MAX / (size_t)P) B = (size_t)INT_MAX / (size_t)P;
    need = 2 * B * es * (size_t)(P + 1);
    if (z->gbuf_bytes < need) {
        accel_coll_free(c, z->gbuf);
        z->gbuf_bytes = 0;
        z->gbuf = accel__coll_alloc_mem(c, need);
        if (!z->gbuf)
            return accel__fail_wrap(c->acc, ACCEL_ERR_OUT_OF_MEMORY, "accel_zero_gather: %zu bytes of staging", need);
        z->gbuf_bytes = need;
    }
    for (at = 0;; at += (int64_t)B, k ^= 1) {
        unsigned char *send = (unsigned char *)z->gbuf + (size_t)k * B * es * (size_t)(P + 1), *recv = send + B * es;
        if (req[k]) { /* the chunk that used this staging: finish and unpack every other rank's piece */
            e = accel_coll_wait(req[k]);
            req[k] = NULL;
            for (j = 0; e == ACCEL_OK && j < P; ++j) {
                int64_t lo = (int64_t)j * S + start[k], hi = lo + cnt[k];
                if (hi > z->part.total) hi = z->part.total;
                if (j != c->rank && lo < hi)
                    e = accel__zero_copy(z, t, lo, hi, recv + (size_t)j * (size_t)cnt[k] * es, es, 0);
            }
            if (e != ACCEL_OK && r == ACCEL_OK) r = e;
        }
        if (at >= S || r != ACCEL_OK) {
            if (req[k ^ 1]) continue; /* drain the other one */
            break;
        }
        start[k] = at;
        cnt[k] = S - at < (int64_t)B ? S - at : (int64_t)B;
        {
            int64_t lo = z->part.begin + at, hi = lo + cnt[k];
            if (hi > z->part.end) hi = z->part.end;
            if (lo < hi) r = accel__zero_copy(z, t, lo, hi, send, es, 1);
        }
        if (r == ACCEL_OK) r = accel_coll_all_gather_async(c, send, recv, (size_t)cnt[k], dt, &req[k]);
    }
    return r;
}

ACCEL__DEF accel_result accel_zero_gather(accel_zero *z, const accel_tensor *t, int n) {
    accel_result r;
    if (!z) return accel__zero_null();
    r = accel__coll_agree(z->c, accel__zero_check_list(z, t, n, "accel_zero_gather"), "accel_zero_gather");
    if (r != ACCEL_OK) return r;
    return accel__zero_gather_list(z, t);
}

/* ------------------------------------------------------------------- 3. state export / import, per-rank state files */
/* The state list's kind s as n tensors (param-major lists of n*k). */
static accel_result accel__zero_state_lists(accel_zero *z, const accel_tensor *shard, const accel_tensor *full, int m,
                                                 const char *what, accel_tensor **sh, accel_tensor **fl, int *kk) {
    accel *acc = z->c->acc;
    int i, s, k;
    *sh = *fl = NULL;
    if (m < 0 || (m > 0 && (!shard || !full)) || (z->n == 0 ? m != 0 : m % z->n != 0))
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                           "%s: %d state tensors for %d parameters (k per parameter, param-major)", what, m, z->n);
    k = z->n ? m / z->n : 0;
    *kk = k;
    *sh = (accel_tensor *)accel_host_alloc(acc, sizeof(accel_tensor) * (size_t)(m + 1));
    *fl = (accel_tensor *)accel_host_alloc(acc, sizeof(accel_tensor) * (size_t)(m + 1));
    if (!*sh || !*fl) return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "%s", what);
    for (s = 0; s < k; ++s)
        for (i = 0; i < z->n; ++i) {
            (*sh)[s * z->n + i] = shard[i * k + s];
            (*fl)[s * z->n + i] = full[i * k + s];
        }
    for (s = 0; s < k; ++s) {
        accel_result r = accel__zero_check_list(z, *fl + s * z->n, z->n, what);
        if (r != ACCEL_OK) return r;
        for (i = 0; i < z->n; ++i) {
            const accel_tensor *a = &(*sh)[s * z->n + i], *b = &(*fl)[s * z->n + i];
            int64_t lo = z->off[i] > z->part.begin ? z->off[i] : z->part.begin;
            int64_t hi = z->off[i + 1] < z->part.end ? z->off[i + 1] : z->part.end;
            int64_t want = hi > lo ? hi - lo : 0;
            if (accel_tensor_numel(a) != want || a->dtype != b->dtype || (want > 0 && !a->ptr))
                return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                                   "%s: shard tensor %d ('%s') has %lld elements of %s, this rank's "
                                   "shard of '%s' is %lld elements of %s",
                                   what, i * k + s, a->name ? a->name : "", (long long)accel_tensor_numel(a),
                                   accel_dtype_name(a->dtype) ? accel_dtype_name(a->dtype) : "invalid",
                                   b->name ? b->name : "", (long long)want, accel_dtype_name(b->dtype));
        }
    }
    return ACCEL_OK;
}

/* Copies this rank's shard between the full tensors of one kind and the shard views (to_full or back). */
static accel_result accel__zero_local(accel_zero *z, const accel_tensor *sh, const accel_tensor *fl, int to_full) {
    int i;
    for (i = 0; i < z->n; ++i) {
        int64_t lo = z->off[i] > z->part.begin ? z->off[i] : z->part.begin;
        int64_t hi = z->off[i + 1] < z->part.end ? z->off[i + 1] : z->part.end;
        size_t es = accel_dtype_size(fl[i].dtype);
        unsigned char *f;
        accel_result r;
        if (hi <= lo) continue;
        f = (unsigned char *)fl[i].ptr + (size_t)(lo - z->off[i]) * es;
        r = accel__coll_copy_same(z->c, to_full ? (void *)f : sh[i].ptr, to_full ? sh[i].ptr : (const void *)f,
                                  (size_t)(hi - lo) * es, z->c->device_mem);
        if (r != ACCEL_OK) return r;
    }
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_zero_export(accel_zero *z, const accel_tensor *shard, const accel_tensor *full, int m) {
    accel_tensor *sh, *fl;
    accel_result r;
    int k = 0, s;
    if (!z) return accel__zero_null();
    r = accel__zero_state_lists(z, shard, full, m, "accel_zero_export", &sh, &fl, &k);
    r = accel__coll_agree(z->c, r, "accel_zero_export");
    for (s = 0; r == ACCEL_OK && s < k; ++s) {
        r = accel__coll_agree(z->c, accel__zero_local(z, sh + s * z->n, fl + s * z->n, 1), "accel_zero_export");
        if (r == ACCEL_OK) r = accel__zero_gather_list(z, fl + s * z->n);
    }
    accel_host_free(z->c->acc, sh);
    accel_host_free(z->c->acc, fl);
    return r;
}

ACCEL__DEF accel_result accel_zero_import(accel_zero *z, const accel_tensor *full, const accel_tensor *shard, int m) {
    accel_tensor *sh, *fl;
    accel_result r;
    int k = 0, s;
    if (!z) return accel__zero_null();
    r = accel__zero_state_lists(z, shard, full, m, "accel_zero_import", &sh, &fl, &k);
    for (s = 0; r == ACCEL_OK && s < k; ++s) r = accel__zero_local(z, sh + s * z->n, fl + s * z->n, 0);
    accel_host_free(z->c->acc, sh);
    accel_host_free(z->c->acc, fl);
    return r;
}

/* Sharded checkpoint bytes (layout in the declaration's comment). */
#define ACCEL__ZERO_STATE_MAGIC 0x535a4341u /* "ACZS" */
static accel_result accel__zero_state_need(const accel_zero_state *zs, const char *what, int *k) {
    int i;
    if (!zs || !zs->zero)
        return accel__fail(NULL, ACCEL_ERR_INVALID_ARGUMENT, __FILE__, __LINE__, "%s: NULL state or zero", what);
    if (zs->m < 0 || (zs->m > 0 && !zs->shard) || (zs->zero->n == 0 ? zs->m != 0 : zs->m % zs->zero->n != 0))
        return ACCEL__FAIL(zs->zero->c->acc, ACCEL_ERR_INVALID_ARGUMENT,
                           "%s: %d state tensors for %d parameters (k per parameter, param-major)", what, zs->m,
                           zs->zero->n);
    *k = zs->zero->n ? zs->m / zs->zero->n : 0;
    for (i = 0; i < zs->m; ++i) {
        const accel_zero *z = zs->zero;
        int p = i / *k;
        int64_t lo = z->off[p] > z->part.begin ? z->off[p] : z->part.begin;
        int64_t hi = z->off[p + 1] < z->part.end ? z->off[p + 1] : z->part.end;
        if (accel_tensor_numel(&zs->shard[i]) != (hi > lo ? hi - lo : 0) || accel_dtype_size(zs->shard[i].dtype) == 0)
            return ACCEL__FAIL(z->c->acc, ACCEL_ERR_INVALID_ARGUMENT,
                               "%s: state tensor %d has %lld elements, this rank's shard of "
                               "parameter %d is %lld",
                               what, i, (long long)accel_tensor_numel(&zs->shard[i]), p,
                               (long long)(hi > lo ? hi - lo : 0));
    }
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_zero_state_save(void *state, void *buf, size_t cap, size_t *size) {
    accel_zero_state *zs = (accel_zero_state *)state;
    accel_zero *z;
    size_t need, at;
    unsigned char *b = (unsigned char *)buf;
    accel_result r;
    int k = 0, i;
    if (!size)
        return accel__fail(NULL, ACCEL_ERR_INVALID_ARGUMENT, __FILE__, __LINE__, "accel_zero_state_save: size is NULL");
    if ((r = accel__zero_state_need(zs, "accel_zero_state_save", &k)) != ACCEL_OK) return r;
    z = zs->zero;
    need = 4 * 4 + 3 * 8 + 2 * 4 + (size_t)(z->n + 1) * 8;
    for (i = 0; i < zs->m; ++i)
        need += 12 + (size_t)accel_tensor_numel(&zs->shard[i]) * accel_dtype_size(zs->shard[i].dtype);
    *size = need;
    if (!buf || cap < need) return ACCEL_OK;
    accel__put_u32(b, ACCEL__ZERO_STATE_MAGIC); accel__put_u32(b + 4, 1);
    accel__put_u32(b + 8, (uint32_t)z->part.size); accel__put_u32(b + 12, (uint32_t)z->part.rank);
    accel__put_u64(b + 16, (uint64_t)z->part.total); accel__put_u64(b + 24, (uint64_t)z->part.begin);
    accel__put_u64(b + 32, (uint64_t)z->part.end);
    accel__put_u32(b + 40, (uint32_t)z->n); accel__put_u32(b + 44, (uint32_t)k);
    at = 48;
    for (i = 0; i <= z->n; ++i, at += 8) accel__put_u64(b + at, (uint64_t)z->off[i]);
    for (i = 0; i < zs->m; ++i) {
        size_t bytes = (size_t)accel_tensor_numel(&zs->shard[i]) * accel_dtype_size(zs->shard[i].dtype);
        accel__put_u32(b + at, (uint32_t)zs->shard[i].dtype);
        accel__put_u64(b + at + 4, (uint64_t)accel_tensor_numel(&zs->shard[i]));
        at += 12;
        if (bytes &&
            (r = accel__coll_copy(z->c, b + at, zs->shard[i].ptr, bytes, z->c->device_mem ? 2 : 0)) != ACCEL_OK)
            return accel__fail_wrap(z->c->acc, r, "accel_zero_state_save");
        at += bytes;
    }
    return ACCEL_OK;
}

/* Where state tensor i's bytes start in saved rank q's buffer (validated: every size checked). */
typedef struct accel__zero_state_file {
    const unsigned char *b;
    int64_t begin, end;
    size_t *data;
} accel__zero_state_file;

ACCEL__DEF accel_result accel_zero_state_load_all(void *state, const void *const *bufs, const size_t *sizes,
                                                  int count) {
    accel_zero_state *zs = (accel_zero_state *)state;
    accel_zero *z;
    accel *acc;
    accel__zero_state_file *f = NULL;
    accel_result r;
    int k = 0, q, i;
    const char *what = "accel_zero_state_load_all";
    if ((r = accel__zero_state_need(zs, what, &k)) != ACCEL_OK) return r;
    z = zs->zero;
    acc = z->c->acc;
    if (count < 1 || !bufs || !sizes)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: %d saved ranks", what, count);
    f = (accel__zero_state_file *)accel_host_alloc(acc, sizeof *f * (size_t)count);
    if (!f) return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "%s", what);
    for (q = 0; q < count; ++q) f[q].data = NULL;
    /* 1. validate every saved rank's bytes */
    for (q = 0; q < count && r == ACCEL_OK; ++q) {
        const unsigned char *b = (const unsigned char *)bufs[q];
        size_t n = sizes[q], at;
        int64_t S;
        f[q].b = b;
        if (!b || n < 48 || accel__get_u32(b) != ACCEL__ZERO_STATE_MAGIC || accel__get_u32(b + 4) != 1) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%s: saved rank %d: not a ZeRO shard state (%zu bytes)", what, q, n);
            break;
        }
        if ((int)accel__get_u32(b + 8) != count || (int)accel__get_u32(b + 12) != q) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%s: file %d says it is rank %u of %u, the checkpoint has %d ranks",
                            what, q, accel__get_u32(b + 12), accel__get_u32(b + 8), count);
            break;
        }
        if ((int64_t)accel__get_u64(b + 16) != z->part.total || (int)accel__get_u32(b + 40) != z->n ||
            (int)accel__get_u32(b + 44) != k) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                            "%s: saved with %llu elements in %u parameters, %u states each; this "
                            "optimizer has %lld in %d, %d each",
                            what, (unsigned long long)accel__get_u64(b + 16), accel__get_u32(b + 40),
                            accel__get_u32(b + 44), (long long)z->part.total, z->n, k);
            break;
        }
        S = (z->part.total + count - 1) / count;
        f[q].begin = (int64_t)accel__get_u64(b + 24);
        f[q].end = (int64_t)accel__get_u64(b + 32);
        if (f[q].begin != (int64_t)q * S ||
            f[q].end != ((int64_t)(q + 1) * S < z->part.total ? (int64_t)(q + 1) * S : z->part.total)) {
            if (!(S * q >= z->part.total && f[q].begin == f[q].end)) {
                r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT,
                                "%s: rank %d's range [%lld, %lld) is not its partition of %lld elements over %d", what,
                                q, (long long)f[q].begin, (long long)f[q].end, (long long)z->part.total, count);
                break;
            }
        }
        at = 48;
        if (n < at + (size_t)(z->n + 1) * 8) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%s: rank %d's file is truncated", what, q);
            break;
        }
        for (i = 0; i <= z->n; ++i, at += 8)
            if ((int64_t)accel__get_u64(b + at) != z->off[i]) break;
        if (i <= z->n) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                            "%s: rank %d's file: parameter %d starts at element %llu, here at %lld "
                            "(a different parameter list)",
                            what, q, i, (unsigned long long)accel__get_u64(b + at), (long long)z->off[i]);
            break;
        }
        f[q].data = (size_t *)accel_host_alloc(acc, sizeof(size_t) * (size_t)(zs->m + 1));
        if (!f[q].data) { r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "%s", what); break; }
        for (i = 0; i < zs->m && r == ACCEL_OK; ++i) {
            int p = i / (k ? k : 1);
            int64_t lo = z->off[p] > f[q].begin ? z->off[p] : f[q].begin,
                    hi = z->off[p + 1] < f[q].end ? z->off[p + 1] : f[q].end;
            uint64_t cnt;
            size_t es;
            if (n < at + 12) {
                r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%s: rank %d's file is truncated", what, q);
                break;
            }
            es = accel_dtype_size((accel_dtype)accel__get_u32(b + at));
            cnt = accel__get_u64(b + at + 4);
            if ((accel_dtype)accel__get_u32(b + at) != zs->shard[i].dtype || cnt != (uint64_t)(hi > lo ? hi - lo : 0))
                r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                                "%s: rank %d's state tensor %d: %llu elements of dtype %u, expected %lld of %s", what,
                                q, i, (unsigned long long)cnt, accel__get_u32(b + at),
                                (long long)(hi > lo ? hi - lo : 0), accel_dtype_name(zs->shard[i].dtype));
            else if (n - at - 12 < cnt * es)
                r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%s: rank %d's file is truncated", what, q);
            f[q].data[i] = at + 12;
            at += 12 + (size_t)cnt * es;
        }
        if (r == ACCEL_OK && at != n)
            r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%s: rank %d's file has %zu trailing bytes", what, q, n - at);
    }
    /* 2. this rank's new shard of every state tensor, from the saved ranks that hold its pieces */
    for (i = 0; i < zs->m && r == ACCEL_OK; ++i) {
        int p = i / (k ? k : 1);
        int64_t lo = z->off[p] > z->part.begin ? z->off[p] : z->part.begin,
                hi = z->off[p + 1] < z->part.end ? z->off[p + 1] : z->part.end;
        size_t es = accel_dtype_size(zs->shard[i].dtype);
        for (q = 0; q < count && r == ACCEL_OK && hi > lo; ++q) {
            int64_t qlo = z->off[p] > f[q].begin ? z->off[p] : f[q].begin; /* saved rank q's piece of parameter p */
            int64_t a = lo > qlo ? lo : qlo, e = hi < f[q].end ? hi : f[q].end;
            if (e > z->off[p + 1]) e = z->off[p + 1];
            if (e <= a) continue;
            r = accel__coll_copy(z->c, (unsigned char *)zs->shard[i].ptr + (size_t)(a - lo) * es,
                                 f[q].b + f[q].data[i] + (size_t)(a - qlo) * es, (size_t)(e - a) * es,
                                 z->c->device_mem ? 1 : 0);
        }
    }
    for (q = 0; q < count; ++q) accel_host_free(acc, f[q].data);
    accel_host_free(acc, f);
    return r;
}

#endif /* ACCEL_IMPLEMENTATION && !ACCEL__ZERO_IMPL_DONE */

/* accel is released under the MIT licence. Copyright (c) 2026 the accel authors. */
