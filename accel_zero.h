/* accel_zero.h — ZeRO for accel: the optimizer state and the gradients sharded over a communicator's ranks
   (DeepSpeed's ZeRO stages 1 and 2, FSDP's SHARD_GRAD_OP), and ZeRO-3 / FSDP (accel_zero_fsdp: the parameters
   sharded too, gathered unit by unit). Communication only: the update is accel_optim.h's, run over this rank's
   shard views (see its DESIGN FOR ZeRO). Builds on accel_ddp.h (stage 1 reduces with a DDP reducer), which builds
   on accel_collectives.h.

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
     ZeRO-3 / FSDP
       FSDP USAGE                 units, the forward and backward calls, the step
       FSDP OPTIONS               accel_zero_fsdp_desc; Accelerate's FullyShardedDataParallelPlugin fields
       UNITS, SHARDS AND BUFFERS  the per-unit partition, padding, what memory is live
       PREFETCH                   forward_prefetch, backward_prefetch, the recorded order
       FSDP RESULTS               equal to DDP + the unsharded optimizer; accumulation and no_sync
       FSDP CALLS AND ERRORS      the per-call agreement check, lifetime errors
       FSDP CHECKPOINTS           sharded (any world size / strategy on load) and consolidated
       DIFFERENCES FROM ACCELERATE / FSDP

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
     - Stages 1 and 2 keep the parameters whole on every rank; stage 3 is accel_zero_fsdp below.

   ZeRO-3 / FSDP
   FSDP USAGE (the user's kernels compute; accel moves memory; no autograd hooks: the calls say where a unit starts
   and ends, as FSDP's pre-/post-forward and pre-/post-backward hooks would)
       accel_zero_unit units[K] = {{"wte", embed_params, 2}, {"h.0", block0_params, 12}, ...};  // forward order
       accel_zero_fsdp_desc fd = {0};
       fd.strategy = ACCEL_ZERO_FULL_SHARD; fd.units = units; fd.nunits = K;
       fd.param_dtype = ACCEL_BF16; fd.reduce_dtype = ACCEL_F32;           // FSDP's MixedPrecision
       accel_zero_fsdp *f;
       accel_zero_fsdp_create(coll, &fd, &f);                  // collective; copies this rank's shard of the init
       accel_tensor vp[N], vm[N], vg[N], vn[N];                // N = accel_zero_fsdp_num_params(f)
       accel_zero_fsdp_views(f, ACCEL_ZERO_VIEW_PARAMS, vp, N);     // → od.params  (F32 master shard)
       accel_zero_fsdp_views(f, ACCEL_ZERO_VIEW_MODEL, vm, N);      // → od.model   (param_dtype copy; NULL ptrs: F32)
       accel_zero_fsdp_views(f, ACCEL_ZERO_VIEW_GRADS, vg, N);      // → od.grads   (F32 gradient shard)
       accel_zero_fsdp_views(f, ACCEL_ZERO_VIEW_NORM_GRADS, vn, N); // clip_grad_norm with ACCEL_AMP_CLIP_SHARDED
       od.offload = fd.cpu_offload == ACCEL_ON;                // offload: moments pinned, the step on the host
       accel_optim_create(&acc, &od, &opt);                    // moments: this rank's shard only
       each micro-batch (inside accel_accumulate_begin/end):
         accel_zero_fsdp_begin_forward(f);
         for u in 0..K-1: accel_zero_fsdp_wait(f, u, w, n_u); forward(u, w); accel_zero_fsdp_release(f, u);
         accel_zero_fsdp_begin_backward(f);
         for u in K-1..0: accel_zero_fsdp_wait(f, u, w, n_u); accel_zero_fsdp_grads(f, u, g, n_u);
                          backward(u, w, g) (+= into g); accel_zero_fsdp_release(f, u);
                          accel_zero_fsdp_reduce_scatter(f, u);
         accel_zero_fsdp_end_backward(f);
       (unit 0 is the root, FSDP's root module: it may stay waited on through the pass — a transformer's embeddings
       and final norm, used first and last — while the others rotate: UNITS, SHARDS AND BUFFERS)
       on a sync step: accel_amp_unscale_and_check(vg), clip over vn, accel_optim_step(opt),
                       accel_zero_fsdp_zero_grad(f)
     The fused step writes the param_dtype copy (od.model) of the shard, which is what the next gathers read.
     accel_zero_fsdp_gather(f, u) starts a gather by hand (wait starts one if nobody did); _progress drives MPI inside
     long CPU compute; _pieces gives the shard as accel_tensor_pieces of the whole tensors (checkpoints, export);
     _get_stats the live/peak buffer bytes and counts; desc.trace an event per gather/wait/release/reduction.

   FSDP OPTIONS (accel_zero_fsdp_desc, zero = default; Accelerate's FullyShardedDataParallelPlugin → accel)
     strategy          sharding_strategy / FSDP_SHARDING_STRATEGY (a name or 1-5): FULL_SHARD (ZeRO-3, default),
                       SHARD_GRAD_OP (a unit stays gathered from its forward to its backward), NO_SHARD (DDP),
                       HYBRID_SHARD / HYBRID_SHARD_ZERO2 (shard over desc.mesh's dp_shard x cp, replicate over
                       dp_replicate; c is the mesh's DP_CP communicator).
     units, nunits     auto_wrap_policy: the user groups the parameters (F32 descriptors; ptr the initial value, the
                       same on every rank, or NULL for zeros).
     param_dtype       mixed_precision_policy.param_dtype: what units are gathered and computed in (F32/BF16/F16).
     reduce_dtype      mixed_precision_policy.reduce_dtype (0 → param_dtype): the unit gradients' dtype.
     forward_prefetch  forward_prefetch / FSDP_FORWARD_PREFETCH (default off).
     backward_prefetch backward_prefetch / FSDP_BACKWARD_PREFETCH: BACKWARD_PRE (default), BACKWARD_POST, NO_PREFETCH.
     cpu_offload       cpu_offload / FSDP_OFFLOAD_PARAMS: the shards in pinned host memory, staged per unit into
                       a gather buffer (the communicator's memory) — also when the shard group is one process.
                       With accel_optim_desc.offload the optimizer's state is pinned too and its step runs on the
                       host over the pinned shard views (ZeRO-Offload, DeepSpeed's offload_optimizer; accel_optim.h
                       HOST STEP): the updated param_dtype copy is what the next gathers stage to the device.
                       The state files follow the state tensors wherever they live (asked per pointer).
     check             the per-call agreement check (FSDP CALLS AND ERRORS).
     no_average        gradients summed instead of averaged.

   UNITS, SHARDS AND BUFFERS
     Each unit's parameters, flattened in order (numel E), are padded to Ps * S with S = ceil(E / Ps) (Ps: the shard
     group's size) and rank r owns slot r: [r*S, (r+1)*S) of the unit (the padding is zeros, gathered and reduced as
     zeros). A rank keeps, for every unit, its slot of the F32 master, of the F32 gradient and (param_dtype != F32) of
     the param_dtype copy: 8 or 10 bytes x sum of S over units (the optimizer's moments add theirs). Buffers: a
     unit's gather buffer (Ps * S of param_dtype) lives from gather to release; its gradient buffer (Ps * S of
     reduce_dtype, + S for the reduced slot) from grads() to the end of its reduction, or across micro-batches while
     no_sync holds it. FSDP's rule for the gathers (root kept, two units rotate): unit 0 is the root (FSDP's root
     module, the parameters outside every wrapped unit: list it first), which FSDP keeps unsharded through the pass;
     its gather buffer is its own (made at its first gather, kept for the next ones, freed by destroy) and does not
     count against the limit. Of the other units, FULL_SHARD / HYBRID_SHARD keep at most two gather buffers live (a
     third gather is ACCEL_ERR_STATE): the one computing and the next one's prefetch, so a trainer that holds the
     root from its first use in forward to its last (the embeddings and the final norm + tied LM head) still has
     unit u + 1's gather in flight while u computes. One reduction is in flight while the next unit computes. Freed
     rotating buffers are cached (two per kind) for the next unit of the same size. test_zero3_mpi checks the
     per-rank peak through the allocator hooks: shards + the root's and two gather buffers + two gradient buffers
     (+ the collective's scratch) when every micro-batch reduces; with no_sync, every unit's gradient buffer is held
     until the sync step (as FSDP's no_sync). A cached buffer is reused only by a unit of its own size (units of
     another size allocate), so the pools never hold more than the largest units' buffers.
     accel_zero_fsdp_estimate states these bytes before create (the same slot sizing), with the optimizer's state
     and the unsharded (DDP) figure beside them: Accelerate's estimate-memory for what accel will allocate (the
     `accel estimate` CLI prints it per strategy). test_zero3_mpi checks it against the allocator hooks, for units
     of one size and of different sizes: each pool's peak (stats) is exactly the estimate's gather_buffers (the
     root's + the two largest other units') and grad_buffers, and in its worst case (two rotating gathers live,
     every gradient buffer held) the allocator's peak is the estimate's total plus the collective's scratch.

   PREFETCH
     The first forward and backward passes record the order in which units are waited on; later passes prefetch by
     it: forward_prefetch starts the next unit's gather in wait(u), BACKWARD_PRE in the backward wait(u),
     BACKWARD_POST in reduce_scatter(u); begin_forward / begin_backward start the first unit's gather. A pass that
     leaves the recorded order stops prefetching for the rest of that pass. The root held through the pass does
     not take a place (UNITS, SHARDS AND BUFFERS): wait(u) can prefetch u + 1 (forward) or u - 1 (BACKWARD_PRE)
     while the root and u are in use, as FSDP does; with both rotating places taken (u - 1 not yet released),
     the prefetch is skipped and that unit is gathered on demand by its wait. On MPI the gathers and reductions are
     nonblocking requests progressed by every call (and _progress); on CUDA they run on the communicator's stream.

   FSDP RESULTS
     Gradients are pre-scaled by fl(1/P) (P: the data-parallel size, as DDP's reducer), reduce-scattered over the
     shard group (accel's reduce-scatter is the all-reduce's first phase: each block is the rank-order sum, bit for
     bit the all-reduce's), all-reduced over the replicate group (hybrid) and widened into the F32 gradient shard.
     So FULL_SHARD, SHARD_GRAD_OP, NO_SHARD and hybrid equal the unsharded run (DDP's reducer + one optimizer over
     the whole parameters) bit for bit in the tests (np 1-4, F32/BF16 gathers, F32/BF16 reductions, offload or not),
     hybrid with both groups > 1 associates the sum differently and is documented within 1e-6 relative. Outside a
     sync step reduce_scatter holds the unit's gradients (no_sync: the next micro-batch adds into the same buffer);
     a reducing micro-batch puts (first since zero_grad) or adds (later: sync_each_batch) into the shard.

   FSDP CALLS AND ERRORS
     create, begin_forward, begin_backward, gather, wait, reduce_scatter and end_backward are collective over c's
     group (every rank calls them in the same order); grads, release, zero_grad, views, pieces are local. With check
     on (default, except NCCL without debug mode), each collective call first all-gathers (call, unit, call number,
     state hash, local result): a rank whose local checks failed (bad unit, a third live gather, wait twice without
     release, reduce_scatter without grads) fails every rank (its own error, ACCEL_ERR_REMOTE elsewhere; the object
     stays usable); ranks that made different calls (a skipped gather, another unit, a release the others did not
     make) all get ACCEL_ERR_MISMATCH naming every rank's call, and the object is unusable (destroy it). Debug mode
     (acc.debug) fills a released gather buffer with NaN, so stale views compute NaN instead of reading weights.

   FSDP CHECKPOINTS
     Sharded (Accelerate's SHARDED_STATE_DICT; every rank writes only its pieces, loadable on any number of ranks,
     any strategy):
       accel_zero_fsdp_state fs = {f, moments, nmoments};              // accel_optim_state_tensors(opt, ...)
       accel_ckpt_register_sharded(ck, "fsdp_state", accel_zero_fsdp_state_save, accel_zero_fsdp_state_load_all, &fs);
       accel_zero_fsdp_full_tensors(f, full, N); accel_optim_shard_state ss = {opt, full};   // step counts
       accel_ckpt_register(ck, "optim_state", accel_optim_shard_state_save, accel_optim_shard_state_load, &ss);
     Consolidated (FULL_STATE_DICT, interop): accel_zero_fsdp_export(f, whole, N) fills whole F32 tensors on every
     rank (accel_ckpt_register_model / accel_st_save with the model's names); accel_zero_fsdp_import(f, whole, N)
     takes this rank's shard back out of them (after accel_ckpt_load_state, on any number of processes). With an
     async checkpointer (accel_ckpt.h ASYNC SAVES) save_state snapshots the whole tensors on the main process and
     returns: the step stalls for the export and that copy, the whole tensors may be refilled right after, and the
     files equal a synchronous save's byte for byte (test zero3-mpi-export-async-np2/4).
     Offline (Accelerate's merge-weights): `accel ckpt merge CKPT_DIR OUT` verifies a sharded checkpoint (marker,
     checksums) and accel_zero_fsdp_merge streams every rank's fsdp_state_<rank>.bin into OUT/model.safetensors
     (or shards + index with --max-shard-size) with the model's names, holding about 1 MiB + the headers.

   DIFFERENCES FROM ACCELERATE / FSDP
     - No autograd: the trainer calls wait/release/grads/reduce_scatter where FSDP's hooks would run.
     - Units are flat per unit and sharded per unit (FSDP1's FlatParameter, not FSDP2's per-parameter DTensor).
     - The optimizer steps the shard views (accel_optim), so its state keys are the unsharded ones.
     - limit_all_gathers is always on for FULL_SHARD (the root's buffer + two rotating ones). FSDP also keeps the
       root gathered from forward into backward (no reshard after forward); accel releases it when the trainer
       does (its buffer stays made, the backward gathers it again); sync_module_states is implied (every rank
       copies its shard out of the same initial values); use_orig_params and activation checkpointing are the
       trainer's business.
     - state_dict_type: SHARDED_STATE_DICT is accel_zero_fsdp_state_save/_load_all (FSDP CHECKPOINTS), FULL_STATE_DICT
       is accel_zero_fsdp_export into whole tensors (every rank holds the whole F32 model for the save: not yet
       streamed slice by slice to a writer); `accel ckpt merge` (accel_zero_fsdp_merge) turns a sharded checkpoint
       into safetensors offline, streaming (merge-weights).
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

/* ----------------------------------------------------------------------------------------- ZeRO-3 / FSDP */
/* FSDP's sharding strategies, numbered as torch's ShardingStrategy (and FSDP_SHARDING_STRATEGY's digits). */
typedef enum accel_zero_strategy {
    ACCEL_ZERO_STRATEGY_DEFAULT = 0, /* FSDP_SHARDING_STRATEGY (a name or 1-5), else FULL_SHARD */
    ACCEL_ZERO_FULL_SHARD,           /* ZeRO-3: parameters, gradients and optimizer state sharded */
    ACCEL_ZERO_SHARD_GRAD_OP,        /* ZeRO-2: a unit stays gathered from its forward to its backward */
    ACCEL_ZERO_NO_SHARD,             /* DDP: everything replicated, gradients all-reduced */
    ACCEL_ZERO_HYBRID_SHARD,         /* FULL_SHARD within the mesh's dp_shard x cp group, replicas over dp_replicate */
    ACCEL_ZERO_HYBRID_SHARD_ZERO2,   /* SHARD_GRAD_OP within it, replicated over dp_replicate */
    ACCEL_ZERO_STRATEGY_COUNT
} accel_zero_strategy;
ACCEL_API const char *accel_zero_strategy_name(accel_zero_strategy s); /* "FULL_SHARD" ...; "?" for others */
/* A name (any case) or Accelerate's digit "1".."5"; ACCEL_ZERO_STRATEGY_DEFAULT when it is neither. */
ACCEL_API accel_zero_strategy accel_zero_strategy_from_name(const char *s);

/* FSDP's BackwardPrefetch (FSDP_BACKWARD_PREFETCH). */
typedef enum accel_zero_prefetch {
    ACCEL_ZERO_PREFETCH_DEFAULT = 0, /* FSDP_BACKWARD_PREFETCH, else BACKWARD_PRE (torch's default) */
    ACCEL_ZERO_BACKWARD_PRE,         /* wait(u) in backward starts the gather of the unit before u */
    ACCEL_ZERO_BACKWARD_POST,        /* reduce_scatter(u) starts it (after u's gradients, before their reduction) */
    ACCEL_ZERO_NO_PREFETCH
} accel_zero_prefetch;

/* A unit (FSDP's wrapped module): its parameters form one flat buffer sharded evenly over the shard group. */
typedef struct accel_zero_unit {
    const char *name;           /* for messages (NULL: "unit <i>") */
    const accel_tensor *params; /* n parameters: name, F32, shape; ptr: the initial value (the whole tensor, the same
                                   on every rank: this rank copies its shard out of it) or NULL (zeros) */
    int n;
} accel_zero_unit;

/* What happened, for traces and tests (desc.trace). */
typedef enum accel_zero_event {
    ACCEL_ZERO_EV_GATHER = 0,   /* an all-gather was started by gather(u) or wait(u) */
    ACCEL_ZERO_EV_PREFETCH,     /* an all-gather was started ahead of use (forward_prefetch / backward_prefetch) */
    ACCEL_ZERO_EV_WAIT,         /* wait(u) returned the gathered parameters */
    ACCEL_ZERO_EV_RELEASE,      /* u's gather buffer went back (not when the strategy keeps it until backward) */
    ACCEL_ZERO_EV_REDUCE,       /* reduce_scatter(u) started the reduction */
    ACCEL_ZERO_EV_REDUCED,      /* u's reduction finished and its gradient buffer went back */
    ACCEL_ZERO_EV_HOLD          /* reduce_scatter(u) on an accumulation step: u's gradients stay (no_sync) */
} accel_zero_event;
typedef void (*accel_zero_trace_fn)(void *user, accel_zero_event ev, int unit);

typedef struct accel_zero_fsdp_desc {
    accel_zero_strategy strategy;
    const accel_zero_unit *units;  /* in forward order (backward runs them in reverse) */
    int nunits;
    accel_dtype param_dtype;       /* 0 → F32: the dtype units are gathered and computed in (F32, BF16, F16) */
    accel_dtype reduce_dtype;      /* 0 → param_dtype: the unit gradients' dtype, reduced in it (F32, BF16, F16) */
    accel_coll_mesh *mesh;         /* HYBRID_*: shard over its dp_shard x cp group, replicate over dp_replicate */
    accel_toggle forward_prefetch; /* DEFAULT → FSDP_FORWARD_PREFETCH, else off: wait(u) in forward gathers u+1 */
    accel_zero_prefetch backward_prefetch;
    accel_toggle cpu_offload;      /* DEFAULT → FSDP_OFFLOAD_PARAMS, else off: shards in pinned host memory */
    accel_toggle check;            /* DEFAULT: on, except NCCL without debug mode (see COLLECTIVE CALLS AND ERRORS) */
    int no_average;                /* nonzero: gradients are summed (default: DDP's average) */
    accel_zero_trace_fn trace;     /* optional */
    void *trace_user;
} accel_zero_fsdp_desc;
typedef struct accel_zero_fsdp accel_zero_fsdp;

/* Collective over c's group (the data-parallel group: every rank that holds this model; with a mesh, its DP_CP
   communicator). Validates the units, agrees on the layout (a difference on any rank fails every rank), allocates
   this rank's shards and copies the initial values in. */
ACCEL_API accel_result accel_zero_fsdp_create(accel_coll *c, const accel_zero_fsdp_desc *desc, accel_zero_fsdp **out);
ACCEL_API void accel_zero_fsdp_destroy(accel_zero_fsdp *f); /* NULL ok */
/* The resolved settings (strategy, prefetch, offload, dtypes: defaults and the environment applied). */
ACCEL_API accel_result accel_zero_fsdp_get_desc(const accel_zero_fsdp *f, accel_zero_fsdp_desc *out);
ACCEL_API int accel_zero_fsdp_num_params(const accel_zero_fsdp *f); /* the parameters of every unit, in unit order */
/* The whole parameters' descriptors in unit order (name, F32, shape; ptr NULL): accel_optim_shard_state.full. */
ACCEL_API accel_result accel_zero_fsdp_full_tensors(const accel_zero_fsdp *f, accel_tensor *out, int n);
/* Consolidated parameters (FSDP's FULL_STATE_DICT: accel_ckpt_register_model / accel_st_save with the model's
   names). export all-gathers the F32 master unit by unit (staging: one unit's Ps * S floats at a time) into the n
   whole tensors `full` on every rank (F32, the model's shapes, in the communicator's memory: device memory with a
   device communicator); collective, between steps (no unit gathered or reducing), and a bad `full` on any rank fails
   every rank before anything moves. import copies this rank's shard out of whole tensors (a consolidated file read
   on any number of processes, with any strategy) and recomputes the param_dtype copy; local. */
ACCEL_API accel_result accel_zero_fsdp_export(accel_zero_fsdp *f, const accel_tensor *full, int n);
ACCEL_API accel_result accel_zero_fsdp_import(accel_zero_fsdp *f, const accel_tensor *full, int n);

/* This rank's shard as one view per parameter (n = accel_zero_fsdp_num_params), for accel_optim_desc:
   PARAMS the F32 master shard (od.params), MODEL the param_dtype copy the gathers read (od.model: the fused step
   keeps it current; its ptrs are NULL when param_dtype is F32 — no copy), GRADS the F32 gradient shard (od.grads,
   accel_amp_unscale_and_check), NORM_GRADS the gradient views whose norm is reduced over all ranks
   (accel_amp_clip_grad_norm / _grad_norm with ACCEL_AMP_CLIP_SHARDED): GRADS, except empty views on the
   replicas of hybrid strategies (dp_replicate coordinate > 0), so that each shard counts once. */
typedef enum accel_zero_view {
    ACCEL_ZERO_VIEW_PARAMS = 0,
    ACCEL_ZERO_VIEW_MODEL,
    ACCEL_ZERO_VIEW_GRADS,
    ACCEL_ZERO_VIEW_NORM_GRADS
} accel_zero_view;
ACCEL_API accel_result accel_zero_fsdp_views(accel_zero_fsdp *f, accel_zero_view kind, accel_tensor *views, int n);
/* The same shard as pieces of the whole tensors (accel.h's accel_tensor_piece: tensor i's elements [offset, offset +
   count) at ptr), one per parameter (count 0 outside the shard). NORM_GRADS pieces are empty on replicas, and so
   are PARAMS pieces with owner_only: each element then appears on exactly one rank (what a consolidated file needs). */
ACCEL_API accel_result accel_zero_fsdp_pieces(accel_zero_fsdp *f, accel_zero_view kind, int owner_only,
                                              accel_tensor_piece *pieces, int n);

/* The pass in progress (FSDP's training state): prefetch direction, and whether a strategy that keeps units gathered
   after forward (SHARD_GRAD_OP, HYBRID_SHARD_ZERO2) keeps them. begin_forward starts the first unit's gather;
   begin_backward the last unit's (unless NO_PREFETCH). Collective. */
ACCEL_API accel_result accel_zero_fsdp_begin_forward(accel_zero_fsdp *f);
ACCEL_API accel_result accel_zero_fsdp_begin_backward(accel_zero_fsdp *f);
/* Starts the all-gather of unit u (nothing if it is gathered or under way). Collective over the shard group (every
   rank of the data-parallel group calls it, in the same order). FULL_SHARD / HYBRID_SHARD: ACCEL_ERR_STATE when two
   units' buffers besides the root's (unit 0) are live already (release one first). */
ACCEL_API accel_result accel_zero_fsdp_gather(accel_zero_fsdp *f, int unit);
/* Finishes u's gather (starting it first if nobody did) and writes its n parameters as views of the gathered buffer
   in param_dtype (the model's names and shapes); then starts the next unit's gather when prefetch says so.
   Collective. The views stay valid until release(u). */
ACCEL_API accel_result accel_zero_fsdp_wait(accel_zero_fsdp *f, int unit, accel_tensor *params, int n);
/* Done with u's parameters: its buffer goes back (in forward, SHARD_GRAD_OP keeps it until u's backward). Using the
   views afterwards is a bug: wait(u) again. With debug mode (acc.debug) the buffer is filled with NaN. Local. */
ACCEL_API accel_result accel_zero_fsdp_release(accel_zero_fsdp *f, int unit);
/* u's gradient buffer (reduce_dtype, the model's names and shapes), for backward to accumulate into (+=): zeros, or
   the sums of the micro-batches held since the last reducing step. Local. */
ACCEL_API accel_result accel_zero_fsdp_grads(accel_zero_fsdp *f, int unit, accel_tensor *grads, int n);
/* u's gradients are final for this micro-batch. On a reducing step (accel_should_reduce) starts their reduction:
   pre-scaled by fl(1/P) (DDP's order, P = the data-parallel size), reduce-scattered over the shard group, all-reduced
   over the replicate group (hybrid), and put into (first reduction since zero_grad) or added to (later ones) this
   rank's F32 gradient shard; otherwise u's buffer is held for the next micro-batch (no_sync). Collective. */
ACCEL_API accel_result accel_zero_fsdp_reduce_scatter(accel_zero_fsdp *f, int unit);
/* End of backward: every reduction finished (the gradient shard is complete on a reducing step), the units that
   SHARD_GRAD_OP kept are released. A unit whose grads() was taken but not reduce_scattered is ACCEL_ERR_STATE.
   Collective. */
ACCEL_API accel_result accel_zero_fsdp_end_backward(accel_zero_fsdp *f);
/* optimizer.zero_grad(): the gradient shard becomes zeros (the next reduction puts instead of adding). Local. */
ACCEL_API accel_result accel_zero_fsdp_zero_grad(accel_zero_fsdp *f);
/* Drives the operations in flight (MPI progresses only inside MPI calls): call it inside long CPU compute. Local. */
ACCEL_API accel_result accel_zero_fsdp_progress(accel_zero_fsdp *f);

/* Live and peak memory of the object, in bytes through acc's allocators (host, device, pinned together). */
typedef struct accel_zero_fsdp_stats {
    uint64_t shard_bytes;         /* master, model copy and gradient shards (fixed from create) */
    uint64_t buffer_bytes;        /* gather and gradient buffers live now (including the cached free ones) */
    uint64_t peak_buffer_bytes;   /* the most buffer_bytes ever */
    int live_gathers, peak_gathers;   /* units whose gather buffer is in use, now / at most (the root included:
                                         FULL_SHARD at most 3, the root + two) */
    int live_grads, peak_grads;       /* units whose gradient buffer is in use (open, reducing or held) */
    int64_t gathers, prefetches, reductions; /* all-gathers started (prefetches among them), reductions started */
    uint64_t peak_gather_bytes;   /* the most bytes the gather buffers' pool held (live + cached): at most the
                                     estimate's gather_buffers */
    uint64_t peak_grad_bytes;     /* the same for the gradient buffers' pool: at most its grad_buffers */
} accel_zero_fsdp_stats;
ACCEL_API accel_result accel_zero_fsdp_get_stats(const accel_zero_fsdp *f, accel_zero_fsdp_stats *out);
/* Per-rank bytes of a ZeRO-3 model before creating it (Accelerate's estimate-memory, stated as what accel
   allocates): desc as for create (strategy DEFAULT → FULL_SHARD; the environment is not read; only the units'
   shapes matter), dp_shard the shard group's size (the data-parallel size; hybrid: dp_shard x cp; NO_SHARD: any,
   counted as 1), optim_states state tensors of state_dtype per element (AdamW: 2, F32), no_sync nonzero when
   micro-batches accumulate (every unit's gradient buffer is held until the sync step). The sizing is create's. */
typedef struct accel_zero_fsdp_memory {
    uint64_t shards;         /* F32 master + F32 gradient (+ the param_dtype copy unless F32): stats.shard_bytes */
    uint64_t optimizer;      /* the optimizer's state over the shard */
    uint64_t gather_buffers; /* at most live: the root's (unit 0) + the two largest other units (FULL_SHARD,
                                HYBRID_SHARD: UNITS, SHARDS AND BUFFERS) or every unit
                                (SHARD_GRAD_OP, HYBRID_SHARD_ZERO2 keep them from forward to backward); none when
                                the shard group is one process without offload (wait hands out the shard itself) */
    uint64_t grad_buffers;   /* the two largest units' gradient buffers, every unit's under no_sync */
    uint64_t staging;        /* cpu_offload: the pinned slot a reduced unit is widened through (largest S of
                                reduce_dtype); else 0 */
    uint64_t cache;          /* 0: the pools reuse a cached buffer only for a unit of its size, so what they keep
                                cached is within gather_buffers and grad_buffers (kept for older callers, which
                                added it on top) */
    uint64_t total;          /* the sum (add the trainer's activations and the collective's scratch) */
    uint64_t offloaded;      /* the part of total in pinned host memory (cpu_offload ACCEL_ON: shards, optimizer,
                                staging); the rest is the communicator's memory (the device's on a GPU) */
    uint64_t unsharded;      /* the same model replicated (DDP): whole F32 weights, gradients, copy and state */
} accel_zero_fsdp_memory;
ACCEL_API accel_result accel_zero_fsdp_estimate(accel *acc, const accel_zero_fsdp_desc *desc, int dp_shard,
                                                int optim_states, accel_dtype state_dtype, int no_sync,
                                                accel_zero_fsdp_memory *out);

/* Sharded checkpoints of a ZeRO-3 model (FSDP's SHARDED_STATE_DICT): every rank saves its pieces of the F32 master
   parameters and of the optimizer's state, and a load re-partitions onto any number of ranks, any strategy and any
   grouping into units (the pieces are per tensor). obj: an accel_zero_fsdp_state; register it with
     accel_ckpt_register_sharded(ck, "fsdp_state", accel_zero_fsdp_state_save, accel_zero_fsdp_state_load_all, &fs);
   next to the step counts (accel_optim_shard_state with full = accel_zero_fsdp_full_tensors: a global file).
   The bytes (little-endian): "ASF3", u32 version 2, u32 n, u32 k, n u64 element counts of the whole parameters,
   n (u64 offset, u64 count) pieces, u64 L and L bytes of names and shapes (per parameter: u32 ndim, ndim u64 dims,
   u32 name length, the name, a NUL), the pieces' F32 master values, then per state tensor (param-major, m = n * k)
   u32 dtype and its piece's values. Replicas of hybrid strategies save empty pieces (each element once). Version 1
   (no names block) still loads, checked by element counts only; `accel ckpt merge` needs the names.
   load_all checks every saved rank's bytes (magic, sizes, the same parameters and k — version 2: each parameter's
   name and shape, so another model with equal counts is ACCEL_ERR_MISMATCH naming the tensor —, the state dtypes,
   pieces in range) and that the saved pieces tile every parameter exactly once, before it copies anything; then
   this rank's pieces are copied out and the param_dtype copy is recomputed. Local (no communication). */
typedef struct accel_zero_fsdp_state {
    accel_zero_fsdp *fsdp;
    const accel_tensor *state; /* the m state tensors of the shard's optimizer (accel_optim_state_tensors), or NULL */
    int m;                     /* a multiple of accel_zero_fsdp_num_params (0: the parameters only) */
} accel_zero_fsdp_state;
ACCEL_API accel_result accel_zero_fsdp_state_save(void *state, void *buf, size_t cap, size_t *size);
ACCEL_API accel_result accel_zero_fsdp_state_load_all(void *state, const void *const *bufs, const size_t *sizes,
                                                      int count);
/* A sharded checkpoint's parameters as one consolidated model (Accelerate's `accelerate merge-weights`; the CLI's
   `accel ckpt merge DIR OUT` verifies the checkpoint's marker and checksums first and finds the files): files[0..
   count) are every saved rank's bytes (accel_zero_fsdp_state_save, version 2: with the parameters' names and
   shapes), in rank order. Every file's header and layout is checked as load_all checks it (the same model in each,
   pieces in range, the exact size, the pieces tiling every parameter once: a missing rank or another partition is
   named) before anything is written; then out_dir/model.safetensors — or, above max_shard_size bytes (0: no
   limit), model-0000i-of-0000N.safetensors + model.safetensors.index.json, huggingface_hub's plan as
   accel_st_save_model — is written with the model's own names, F32, in accel_safetensors.h's layout, each file
   atomically. Streaming: the values go from file to file through one 1 MiB buffer, so the memory held is the
   files' headers (16 + 24 n bytes + the names each), per file n descriptors and value offsets, the output header
   and that buffer: independent of the parameters' sizes (info->memory reports it). out_dir must not hold a model
   yet (model.safetensors, an index or shards: ACCEL_ERR_INVALID_ARGUMENT); on failure the files this call wrote
   are removed. Local; acc may be NULL. */
typedef struct accel_zero_fsdp_merge_info {
    int saved_ranks;  /* files read */
    int tensors;      /* parameters written */
    int files;        /* safetensors files written (1: model.safetensors) */
    uint64_t bytes;   /* tensor bytes written */
    uint64_t memory;  /* host bytes the merge held (the bound above) */
} accel_zero_fsdp_merge_info;
ACCEL_API accel_result accel_zero_fsdp_merge(accel *acc, const char *const *files, int count, const char *out_dir,
                                             uint64_t max_shard_size, accel_zero_fsdp_merge_info *info);

#ifdef __cplusplus
}
#endif
#endif /* ACCEL_ZERO_H_INCLUDED */

/* ========================================================================================== implementation */
#if defined(ACCEL_IMPLEMENTATION) && !defined(ACCEL__ZERO_IMPL_DONE)
#define ACCEL__ZERO_IMPL_DONE
#include "accel_ddp.h" /* its implementation (and the communicator's) first, when included before */
/* CONTENTS (the core's private services come from accel.h's implementation section, the communicator's lent
   internals — struct accel_coll's fields, accel__coll_copy / _copy_same / _prescale / _prescale_by / _alloc_mem /
   _host_op / _agree / _orphan / _null / _reducible / _blocks — from accel_collectives.h's; both precede this one in
   the same TU, as does accel_ddp.h's, whose reducer stage 1 uses through its public functions)
     1. the partition and shard views
     2. ZeRO-1/2: creation, stage-2 reduce-to-owner buckets, the chunked all-gather
     3. state export / import, per-rank state files (accel_zero_state_save / _load_all)
     4. ZeRO-3 / FSDP: units, buffer pools, the call check, gathers with prefetch, reductions, the pass functions */

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

/* Every rank's k layout words, all-gathered once no rank failed before (create's agreement): *all (k x size words;
   the caller frees it with accel_host_free, also on failure) and *differ nonzero when a rank's words are not ours. */
static accel_result accel__zero_gather_layouts(accel_coll *c, const int64_t *mine, int k, const char *what,
                                               int64_t **all, int *differ) {
    size_t bytes = sizeof(int64_t) * (size_t)k;
    accel_result r;
    int i;
    *differ = 0;
    *all = (int64_t *)accel_host_alloc(c->acc, bytes * (size_t)c->size);
    r = accel__coll_agree(c, *all ? ACCEL_OK : accel__fail_wrap(c->acc, ACCEL_ERR_OUT_OF_MEMORY, "%s", what), what);
    if (r == ACCEL_OK) r = accel__coll_host_op(c, ACCEL__K_ALLGATHER, mine, *all, bytes, 0, NULL);
    for (i = 0; r == ACCEL_OK && i < c->size; ++i)
        if (memcmp(*all + (size_t)k * (size_t)i, mine, bytes) != 0) *differ = 1;
    return r;
}

/* What every rank must agree on: stage, averaging, count, total, and a hash of every numel and gradient dtype. */
static accel_result accel__zero_check_layout(accel_zero *z) {
    accel_coll *c = z->c;
    int64_t mine[5], *all;
    uint64_t h = ACCEL__FNV_INIT;
    accel_result r;
    int i, differ;
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
    r = accel__zero_gather_layouts(c, mine, 5, "accel_zero_create (layout)", &all, &differ);
    if (r == ACCEL_OK && differ) {
        accel__sb b;
        accel__sb_init(&b, c->acc);
        accel__sb_printf(&b, "accel_zero_create: ranks gave different lists:");
        for (i = 0; i < c->size; ++i)
            accel__sb_printf(&b, " rank %d: stage %lld, %s, %lld tensors, %lld elements, layout hash %llx;", i,
                             (long long)all[5 * i], all[5 * i + 1] ? "average" : "sum", (long long)all[5 * i + 2],
                             (long long)all[5 * i + 3], (unsigned long long)all[5 * i + 4]);
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

/* ----------------------------------------------------------------------------------------------- 4. ZeRO-3 / FSDP */
/* Element-wise math of the shards (CPU loop and CUDA kernel): the master → param_dtype copy (round to nearest even,
   as accel_optim's model copy), and a reduced gradient widened into the F32 shard (put, or added). */
static ACCEL_INLINE ACCEL_HD void accel__zero_cast_elem(void *dst, int dt, const float *src, size_t i) {
    if (dt == ACCEL_BF16) ((uint16_t *)dst)[i] = accel_f32_to_bf16(src[i]);
    else if (dt == ACCEL_F16) ((uint16_t *)dst)[i] = accel_f32_to_f16(src[i]);
    else ((float *)dst)[i] = src[i];
}
static ACCEL_INLINE ACCEL_HD float accel__zero_widen_elem(const void *src, int dt, size_t i) {
    if (dt == ACCEL_BF16) return accel_bf16_to_f32(((const uint16_t *)src)[i]);
    if (dt == ACCEL_F16) return accel_f16_to_f32(((const uint16_t *)src)[i]);
    return ((const float *)src)[i];
}
static ACCEL_INLINE ACCEL_HD void accel__zero_accum_elem(float *dst, const void *src, int dt, size_t i, int put) {
    float g = accel__zero_widen_elem(src, dt, i);
    dst[i] = put ? g : dst[i] + g;
}
#ifdef ACCEL__COLL_DEVICE
static __global__ void accel__zero_cast_kernel(void *dst, int dt, const float *src, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (size_t)gridDim.x * blockDim.x;
    for (; i < n; i += stride) accel__zero_cast_elem(dst, dt, src, i);
}
static __global__ void accel__zero_accum_kernel(float *dst, const void *src, int dt, size_t n, int put) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (size_t)gridDim.x * blockDim.x;
    for (; i < n; i += stride) accel__zero_accum_elem(dst, src, dt, i, put);
}
#endif

ACCEL__DEF const char *accel_zero_strategy_name(accel_zero_strategy s) {
    static const char *n[] = {"DEFAULT", "FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD",
                              "HYBRID_SHARD_ZERO2"};
    return (int)s >= 0 && s < ACCEL_ZERO_STRATEGY_COUNT ? n[s] : "?";
}
/* case-insensitive equality of ASCII names */
static int accel__zero_name_eq(const char *a, const char *b) {
    for (; *a && *b; ++a, ++b) {
        char x = *a >= 'a' && *a <= 'z' ? (char)(*a - 32) : *a, y = *b >= 'a' && *b <= 'z' ? (char)(*b - 32) : *b;
        if (x != y) return 0;
    }
    return *a == *b;
}
ACCEL__DEF accel_zero_strategy accel_zero_strategy_from_name(const char *s) {
    int k;
    if (!s) return ACCEL_ZERO_STRATEGY_DEFAULT;
    if (s[0] >= '1' && s[0] <= '5' && s[1] == 0) return (accel_zero_strategy)(s[0] - '0');
    for (k = 1; k < ACCEL_ZERO_STRATEGY_COUNT; ++k)
        if (accel__zero_name_eq(s, accel_zero_strategy_name((accel_zero_strategy)k))) return (accel_zero_strategy)k;
    return ACCEL_ZERO_STRATEGY_DEFAULT;
}
static const char *accel__zero_prefetch_name(accel_zero_prefetch p) {
    return p == ACCEL_ZERO_BACKWARD_PRE ? "BACKWARD_PRE" : p == ACCEL_ZERO_BACKWARD_POST ? "BACKWARD_POST"
                                                                                         : "NO_PREFETCH";
}

/* Memory kinds of the object's allocations: host, acc's device, pinned host. */
enum { ACCEL__FSDP_HOST = 0, ACCEL__FSDP_DEVICE = 1, ACCEL__FSDP_PINNED = 2 };
/* Units besides the root (unit 0) whose gather buffers may be live at once (FULL_SHARD, HYBRID_SHARD; the issue's
   "two units"): FSDP keeps the root unsharded through the pass and rotates the wrapped units, so the root's buffer
   is its own (f->groot) and never takes one of these two places. */
#define ACCEL__FSDP_LIVE 2
/* Free buffers kept for reuse, per pool (equal-sized units then allocate once). */
#define ACCEL__FSDP_CACHE 2
/* Reductions in flight: one, so that one unit's gradients reduce while the next unit's are computed and at most two
   gradient buffers are live (an open one and a reducing one; no_sync holds more). */
#define ACCEL__FSDP_REDUCING 1

typedef struct accel__fsdp_buf {
    void *p;
    size_t bytes;
} accel__fsdp_buf;
typedef struct accel__fsdp_pool {
    accel__fsdp_buf cache[ACCEL__FSDP_CACHE];
    int ncache, kind, live;
    uint64_t bytes; /* live + cached */
} accel__fsdp_pool;

typedef struct accel__fsdp_unit {
    char *name;
    int first, n;                  /* parameters [first, first + n) of the whole list */
    int64_t numel, S, begin, end;  /* elements; shard slot ceil(numel / Ps); this rank's [begin, end) of the unit */
    int64_t soff;                  /* the unit's slot starts at element soff of the shard buffers */
    int64_t flat;                  /* the unit's first element in the whole flattened list */
    /* parameters */
    int gstate;                    /* 0 released, 1 gather started, 2 waited, 3 kept (SHARD_GRAD_OP after forward) */
    accel__fsdp_buf g;             /* the gathered unit: Ps * S elements of param_dtype */
    accel_coll_request *greq;      /* the all-gather while unfinished */
    /* gradients */
    int rstate;                    /* 0 none, 1 open (grads taken), 2 held (no_sync), 3 reducing */
    accel__fsdp_buf r;             /* Ps * S elements of reduce_dtype, then S more: the reduce-scatter's result */
    accel_coll_request *rreq;
    int rphase;                    /* reducing: 1 reduce-scatter (or Ps == 1: the all-reduce), 2 replicate all-reduce */
    int has_grad;                  /* the F32 gradient shard holds a reduction since zero_grad */
} accel__fsdp_unit;

struct accel_zero_fsdp {
    accel_coll *c;                 /* the data-parallel group (checks, agreement) */
    accel_coll *sc, *rc;           /* shard group, replicate group (NULL: one process in it) */
    accel *acc;
    accel_zero_fsdp_desc d;        /* resolved (units points at nothing after create) */
    int Ps, Pr, srank, rrank, dp;  /* group sizes, this rank's coordinates, Ps * Pr */
    int keep_after_forward, limited, offload, check, poison, broken;
    int K, n;                      /* units, parameters */
    accel__fsdp_unit *u;
    accel_tensor *full;            /* n descriptors (names copied, F32, ptr NULL) */
    int64_t shard_elems;           /* sum of the slots */
    int shard_kind;                /* where the shards live */
    float *master, *grad;          /* shard_elems each */
    void *model;                   /* shard_elems of param_dtype, or NULL (param_dtype F32: the master is gathered) */
    void *stage;                   /* offload: pinned host staging of one reduced slot (largest S of reduce_dtype) */
    size_t pes, res;               /* param_dtype and reduce_dtype element sizes */
    accel__fsdp_pool gpool, rpool; /* the rotating units' gather buffers (unit 1..K-1), the gradient buffers */
    accel__fsdp_pool groot;        /* the root's (unit 0's) gather buffer: one, of its size, kept once made */
    int *fifo;                     /* reducing units in the order their reductions started (stb_ds array) */
    int phase;                     /* 0 none, 1 forward, 2 backward */
    int *order[2];                 /* recorded wait order of the first forward / backward pass (stb_ds arrays) */
    int recorded[2], pos[2];
    int64_t seq;
    accel_zero_fsdp_stats st;
};

#ifndef ACCEL__COLL_DEVICE
static accel_result accel__fsdp_no_device(accel_zero_fsdp *f);
#endif
/* create's slot size: a unit of `numel` elements over Ps ranks (padding to Ps) */
static int64_t accel__fsdp_slot(int64_t numel, int Ps) { return (numel + Ps - 1) / Ps; }
static accel_result accel__fsdp_null(void) {
    return accel__fail(NULL, ACCEL_ERR_INVALID_ARGUMENT, __FILE__, __LINE__, "accel_zero_fsdp: object is NULL");
}
#ifndef ACCEL__COLL_DEVICE
static accel_result accel__fsdp_no_device(accel_zero_fsdp *f) {
    return ACCEL__FAIL(f->acc, ACCEL_ERR_UNSUPPORTED,
                       "device buffers need the ACCEL_IMPLEMENTATION TU compiled with nvcc");
}
#endif
static void accel__fsdp_trace(accel_zero_fsdp *f, accel_zero_event ev, int unit) {
    if (f->d.trace) f->d.trace(f->d.trace_user, ev, unit);
}

static void *accel__fsdp_alloc(accel *acc, int kind, size_t bytes) {
    if (bytes == 0) bytes = 1;
    return kind == ACCEL__FSDP_DEVICE ? accel_device_alloc(acc, bytes)
           : kind == ACCEL__FSDP_PINNED ? accel_pinned_alloc(acc, bytes)
                                        : accel_host_alloc(acc, bytes);
}
static void accel__fsdp_free(accel *acc, int kind, void *p) {
    if (!p) return;
    if (kind == ACCEL__FSDP_DEVICE) accel_device_free(acc, p);
    else if (kind == ACCEL__FSDP_PINNED) accel_pinned_free(acc, p);
    else accel_host_free(acc, p);
}
/* accel__coll_copy's direction between two memory kinds */
static int accel__fsdp_dir(int src_kind, int dst_kind) {
    int sd = src_kind == ACCEL__FSDP_DEVICE, dd = dst_kind == ACCEL__FSDP_DEVICE;
    return sd ? (dd ? 3 : 2) : (dd ? 1 : 0);
}
static accel_result accel__fsdp_fill(accel_zero_fsdp *f, int kind, void *p, int byte, size_t bytes) {
    if (bytes == 0) return ACCEL_OK;
    if (kind != ACCEL__FSDP_DEVICE) {
        memset(p, byte, bytes);
        return ACCEL_OK;
    }
#ifdef ACCEL__COLL_DEVICE
    ACCEL__CUDA_CHECK(f->acc, cudaMemsetAsync(p, byte, bytes, (cudaStream_t)f->acc->stream));
    return ACCEL_OK;
#else
    return accel__fsdp_no_device(f);
#endif
}

/* A buffer of `bytes` from the pool: a cached one of exactly that size, else a new one (a limited pool drops cached
   buffers first so that live + cached stays within `cap` buffers; cap 0: no limit). Exactly: a unit never holds a
   larger unit's buffer, so the buffers of one size never outnumber the units of that size and the pool holds at most
   the largest units' buffers (accel_zero_fsdp_estimate's figures, reached, not exceeded). A larger cached buffer
   would save an allocation when units differ in size, at the price of a second large one (the largest unit's
   buffer lent to a smaller unit while the largest is gathered again): up to 2 x the largest unit on top. */
static accel_result accel__fsdp_get(accel_zero_fsdp *f, accel__fsdp_pool *pl, size_t bytes, int cap,
                                    accel__fsdp_buf *out, const char *what) {
    int i, best = -1;
    for (i = 0; i < pl->ncache && best < 0; ++i)
        if (pl->cache[i].bytes == bytes) best = i;
    if (best >= 0) {
        *out = pl->cache[best];
        pl->cache[best] = pl->cache[--pl->ncache];
        pl->live++;
        return ACCEL_OK;
    }
    while (pl->ncache > 0 && cap > 0 && pl->live + pl->ncache >= cap) {
        accel__fsdp_buf *b = &pl->cache[--pl->ncache];
        accel__fsdp_free(f->acc, pl->kind, b->p);
        pl->bytes -= b->bytes;
    }
    out->p = accel__fsdp_alloc(f->acc, pl->kind, bytes);
    out->bytes = bytes;
    if (!out->p) return accel__fail_wrap(f->acc, ACCEL_ERR_OUT_OF_MEMORY, "%s: %zu bytes", what, bytes);
    pl->bytes += bytes;
    pl->live++;
    return ACCEL_OK;
}
static void accel__fsdp_put(accel_zero_fsdp *f, accel__fsdp_pool *pl, accel__fsdp_buf *b) {
    if (!b->p) return;
    pl->live--;
    if (pl->ncache < ACCEL__FSDP_CACHE) {
        pl->cache[pl->ncache++] = *b;
    } else { /* keep the larger ones */
        int i, small = 0;
        for (i = 1; i < pl->ncache; ++i)
            if (pl->cache[i].bytes < pl->cache[small].bytes) small = i;
        if (pl->cache[small].bytes < b->bytes) {
            accel__fsdp_buf t = pl->cache[small];
            pl->cache[small] = *b;
            *b = t;
        }
        accel__fsdp_free(f->acc, pl->kind, b->p);
        pl->bytes -= b->bytes;
    }
    b->p = NULL;
    b->bytes = 0;
}
static void accel__fsdp_pool_free(accel_zero_fsdp *f, accel__fsdp_pool *pl) {
    int i;
    for (i = 0; i < pl->ncache; ++i) accel__fsdp_free(f->acc, pl->kind, pl->cache[i].p);
    pl->ncache = 0;
}
/* The gather pool of unit i: the root's own, or the rotating units' */
static accel__fsdp_pool *accel__fsdp_gpool(accel_zero_fsdp *f, int i) { return i == 0 ? &f->groot : &f->gpool; }
static void accel__fsdp_note_buffers(accel_zero_fsdp *f) {
    int i, lg = 0, lr = 0;
    for (i = 0; i < f->K; ++i) {
        lg += f->u[i].g.p != NULL;
        lr += f->u[i].r.p != NULL;
    }
    f->st.live_gathers = lg;
    f->st.live_grads = lr;
    if (lg > f->st.peak_gathers) f->st.peak_gathers = lg;
    if (lr > f->st.peak_grads) f->st.peak_grads = lr;
    f->st.buffer_bytes = f->gpool.bytes + f->groot.bytes + f->rpool.bytes;
    if (f->st.buffer_bytes > f->st.peak_buffer_bytes) f->st.peak_buffer_bytes = f->st.buffer_bytes;
    if (f->gpool.bytes + f->groot.bytes > f->st.peak_gather_bytes)
        f->st.peak_gather_bytes = f->gpool.bytes + f->groot.bytes;
    if (f->rpool.bytes > f->st.peak_grad_bytes) f->st.peak_grad_bytes = f->rpool.bytes;
}

/* The state every rank must share before a collective call: which units are gathered, which gradients are open or
   held, the pass. Reductions finishing in the background are not part of it (they complete at different times). */
static uint64_t accel__fsdp_state_hash(const accel_zero_fsdp *f) {
    uint64_t h = ACCEL__FNV_INIT;
    int i;
    unsigned char b[3];
    b[0] = (unsigned char)f->phase;
    h = accel__fnv1a(h, b, 1);
    for (i = 0; i < f->K; ++i) {
        b[0] = (unsigned char)f->u[i].gstate;
        b[1] = (unsigned char)(f->u[i].rstate == 3 ? 0 : f->u[i].rstate);
        b[2] = (unsigned char)(f->u[i].r.p != NULL && f->u[i].rstate != 3);
        h = accel__fnv1a(h, b, 3);
    }
    return h;
}

static const char *accel__fsdp_call_name(int kind) {
    static const char *n[] = {"?", "begin_forward", "begin_backward", "gather", "wait", "reduce_scatter",
                              "end_backward"};
    return kind >= 1 && kind <= 6 ? n[kind] : "?";
}
enum { ACCEL__FSDP_C_FWD = 1, ACCEL__FSDP_C_BWD, ACCEL__FSDP_C_GATHER, ACCEL__FSDP_C_WAIT, ACCEL__FSDP_C_RS,
       ACCEL__FSDP_C_END };

/* Before every collective call: every rank of the data-parallel group must make the same call (kind, unit, call
   number) from the same state, and none may have failed its local checks (local: ACCEL_OK or this rank's error).
   One small all-gather over the group, before anything is posted: a rank that failed its checks fails every rank
   (its own error there, ACCEL_ERR_REMOTE elsewhere; the object stays usable); a different call or state fails every
   rank with ACCEL_ERR_MISMATCH naming each rank's call, and leaves the object unusable (its ranks no longer agree on
   what comes next). Without the check (desc.check off) only the local result counts. */
static accel_result accel__fsdp_sync(accel_zero_fsdp *f, int kind, int unit, accel_result local) {
    int64_t mine[6], *all = NULL;
    accel_result r;
    int i, differ = 0, failed = -1;
    f->seq++;
    if (!f->check || f->c->size <= 1) return local;
    mine[0] = 0x6673647063686bLL; /* "fsdpchk" */
    mine[1] = kind;
    mine[2] = unit;
    mine[3] = f->seq;
    mine[4] = (int64_t)(accel__fsdp_state_hash(f) >> 1);
    mine[5] = local;
    all = (int64_t *)accel_host_alloc(f->acc, sizeof mine * (size_t)f->c->size);
    if (!all) return accel__fail_wrap(f->acc, ACCEL_ERR_OUT_OF_MEMORY, "accel_zero_fsdp (call check)");
    r = accel__coll_host_op(f->c, ACCEL__K_ALLGATHER, mine, all, sizeof mine, 0, NULL);
    if (r != ACCEL_OK) {
        accel_host_free(f->acc, all);
        f->broken = 1;
        return r;
    }
    for (i = 0; i < f->c->size; ++i) {
        if (memcmp(all + 6 * i, mine, 5 * sizeof(int64_t)) != 0) differ = 1;
        if (all[6 * i + 5] != ACCEL_OK && failed < 0) failed = i;
    }
    if (local != ACCEL_OK) {
        r = local;
    } else if (failed >= 0) {
        r = ACCEL__FAIL(f->acc, ACCEL_ERR_REMOTE, "accel_zero_fsdp %s: rank %d failed its checks (%s)",
                        accel__fsdp_call_name(kind), failed, accel_result_string((accel_result)all[6 * failed + 5]));
    } else if (differ) {
        accel__sb b;
        accel__sb_init(&b, f->acc);
        accel__sb_printf(&b, "accel_zero_fsdp: ranks made different calls (every rank must call gather, wait, "
                             "reduce_scatter and the pass functions in the same order, from the same state):");
        for (i = 0; i < f->c->size; ++i) {
            const int64_t *s = all + 6 * i;
            accel__sb_printf(&b, " rank %d: call %lld %s(unit %lld), state %llx;", i, (long long)s[3],
                             s[0] == mine[0] ? accel__fsdp_call_name((int)s[1]) : "<not a ZeRO-3 call>",
                             (long long)s[2], (unsigned long long)s[4]);
        }
        r = ACCEL__FAIL(f->acc, ACCEL_ERR_MISMATCH, "%s", b.oom ? "accel_zero_fsdp: ranks made different calls" : b.p);
        accel__sb_free(&b);
        f->broken = 1;
    }
    accel_host_free(f->acc, all);
    return r;
}

static accel_result accel__fsdp_usable(accel_zero_fsdp *f) {
    if (!f) return accel__fsdp_null();
    if (f->broken)
        return ACCEL__FAIL(f->acc, ACCEL_ERR_STATE,
                           "accel_zero_fsdp: an earlier call failed on the ranks' agreement or a communication; "
                           "destroy the object");
    return ACCEL_OK;
}
static accel_result accel__fsdp_unit_arg(accel_zero_fsdp *f, int unit, const char *what) {
    if (unit < 0 || unit >= f->K)
        return ACCEL__FAIL(f->acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: unit %d is not a unit (0..%d)", what, unit,
                           f->K - 1);
    return ACCEL_OK;
}

/* ----- the environment and the resolved settings */
static accel_result accel__fsdp_resolve(accel *acc, accel_zero_fsdp_desc *d) {
    const char *s;
    int b;
    if (d->strategy == ACCEL_ZERO_STRATEGY_DEFAULT) {
        s = getenv("FSDP_SHARDING_STRATEGY");
        if (s && *s) {
            d->strategy = accel_zero_strategy_from_name(s);
            if (d->strategy == ACCEL_ZERO_STRATEGY_DEFAULT)
                return ACCEL__FAIL(acc, ACCEL_ERR_ENVIRONMENT,
                                   "FSDP_SHARDING_STRATEGY=\"%.60s\" is not FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, "
                                   "HYBRID_SHARD, HYBRID_SHARD_ZERO2 or 1-5", s);
        } else {
            d->strategy = ACCEL_ZERO_FULL_SHARD;
        }
    }
    if ((int)d->strategy < 0 || d->strategy >= ACCEL_ZERO_STRATEGY_COUNT)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_zero_fsdp: strategy %d", (int)d->strategy);
    if (d->backward_prefetch == ACCEL_ZERO_PREFETCH_DEFAULT) {
        s = getenv("FSDP_BACKWARD_PREFETCH");
        d->backward_prefetch = ACCEL_ZERO_BACKWARD_PRE;
        if (s && *s) {
            if (accel__zero_name_eq(s, "BACKWARD_PRE")) d->backward_prefetch = ACCEL_ZERO_BACKWARD_PRE;
            else if (accel__zero_name_eq(s, "BACKWARD_POST")) d->backward_prefetch = ACCEL_ZERO_BACKWARD_POST;
            else if (accel__zero_name_eq(s, "NO_PREFETCH")) d->backward_prefetch = ACCEL_ZERO_NO_PREFETCH;
            else
                return ACCEL__FAIL(acc, ACCEL_ERR_ENVIRONMENT,
                                   "FSDP_BACKWARD_PREFETCH=\"%.60s\" is not BACKWARD_PRE, BACKWARD_POST or "
                                   "NO_PREFETCH", s);
        }
    }
    if ((int)d->backward_prefetch < 0 || d->backward_prefetch > ACCEL_ZERO_NO_PREFETCH)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_zero_fsdp: backward_prefetch %d",
                           (int)d->backward_prefetch);
    if (d->forward_prefetch == ACCEL_DEFAULT) {
        s = getenv("FSDP_FORWARD_PREFETCH");
        d->forward_prefetch = ACCEL_OFF;
        if (s && *s) {
            if ((b = accel_parse_bool(s)) < 0)
                return ACCEL__FAIL(acc, ACCEL_ERR_ENVIRONMENT, "FSDP_FORWARD_PREFETCH=\"%.60s\" is not a boolean", s);
            d->forward_prefetch = b ? ACCEL_ON : ACCEL_OFF;
        }
    }
    if (d->cpu_offload == ACCEL_DEFAULT) {
        s = getenv("FSDP_OFFLOAD_PARAMS");
        d->cpu_offload = ACCEL_OFF;
        if (s && *s) {
            if ((b = accel_parse_bool(s)) < 0)
                return ACCEL__FAIL(acc, ACCEL_ERR_ENVIRONMENT, "FSDP_OFFLOAD_PARAMS=\"%.60s\" is not a boolean", s);
            d->cpu_offload = b ? ACCEL_ON : ACCEL_OFF;
        }
    }
    if (d->param_dtype == ACCEL_DTYPE_INVALID) d->param_dtype = ACCEL_F32;
    if (d->reduce_dtype == ACCEL_DTYPE_INVALID) d->reduce_dtype = d->param_dtype;
    if ((d->param_dtype != ACCEL_F32 && d->param_dtype != ACCEL_BF16 && d->param_dtype != ACCEL_F16) ||
        (d->reduce_dtype != ACCEL_F32 && d->reduce_dtype != ACCEL_BF16 && d->reduce_dtype != ACCEL_F16))
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                           "accel_zero_fsdp: param_dtype %s and reduce_dtype %s (F32, BF16 or F16)",
                           accel_dtype_name(d->param_dtype) ? accel_dtype_name(d->param_dtype) : "invalid",
                           accel_dtype_name(d->reduce_dtype) ? accel_dtype_name(d->reduce_dtype) : "invalid");
    return ACCEL_OK;
}

ACCEL__DEF void accel_zero_fsdp_destroy(accel_zero_fsdp *f) {
    int i;
    accel *acc;
    if (!f) return;
    acc = f->acc;
    for (i = 0; f->u && i < f->K; ++i) {
        accel__fsdp_unit *u = &f->u[i];
        /* every rank posted the same operations (unless the ranks disagreed): finish them, so that no MPI request
           outlives its buffers; a broken object's requests go to the communicator's orphans */
        if (u->greq) {
            if (f->broken) accel__coll_orphan(u->greq);
            else (void)accel_coll_wait(u->greq); /* frees the request either way */
        }
        if (u->rreq) {
            if (f->broken) accel__coll_orphan(u->rreq);
            else (void)accel_coll_wait(u->rreq);
        }
        accel__fsdp_free(acc, f->gpool.kind, u->g.p);
        accel__fsdp_free(acc, f->rpool.kind, u->r.p);
        accel_host_free(acc, u->name);
    }
    accel__fsdp_pool_free(f, &f->gpool);
    accel__fsdp_pool_free(f, &f->groot);
    accel__fsdp_pool_free(f, &f->rpool);
    for (i = 0; f->full && i < f->n; ++i) accel_host_free(acc, (void *)f->full[i].name);
    accel_host_free(acc, f->full);
    accel_host_free(acc, f->u);
    accel__fsdp_free(acc, f->shard_kind, f->master);
    accel__fsdp_free(acc, f->shard_kind, f->grad);
    accel__fsdp_free(acc, f->shard_kind, f->model);
    accel__fsdp_free(acc, ACCEL__FSDP_PINNED, f->stage);
    stbds_arrfree(f->fifo);
    stbds_arrfree(f->order[0]);
    stbds_arrfree(f->order[1]);
    accel_host_free(acc, f);
}

static char *accel__fsdp_strdup(accel *acc, const char *s) {
    size_t n = strlen(s);
    char *p = (char *)accel_host_alloc(acc, n + 1);
    if (p) memcpy(p, s, n + 1);
    return p;
}

/* The groups of the strategy: shard group and replicate group (NULL where it is one process). */
static accel_result accel__fsdp_groups(accel_zero_fsdp *f) {
    accel_coll *c = f->c;
    accel_zero_strategy s = f->d.strategy;
    f->sc = f->rc = NULL;
    if (s == ACCEL_ZERO_HYBRID_SHARD || s == ACCEL_ZERO_HYBRID_SHARD_ZERO2) {
        accel_coll *sh, *re;
        if (!f->d.mesh)
            return ACCEL__FAIL(f->acc, ACCEL_ERR_INVALID_ARGUMENT,
                               "accel_zero_fsdp: %s needs desc.mesh (shard over dp_shard x cp, replicate over "
                               "dp_replicate)", accel_zero_strategy_name(s));
        sh = accel_coll_mesh_comm(f->d.mesh, ACCEL_COLL_MESH_DP_SHARD_CP);
        re = accel_coll_mesh_comm(f->d.mesh, ACCEL_COLL_MESH_DP_REPLICATE);
        if (!sh || !re || sh->size * re->size != c->size)
            return ACCEL__FAIL(f->acc, ACCEL_ERR_INVALID_ARGUMENT,
                               "accel_zero_fsdp: the mesh's dp_shard x cp (%d) times dp_replicate (%d) is not the "
                               "size of the data-parallel group (%d): pass its DP_CP communicator",
                               sh ? sh->size : 0, re ? re->size : 0, c->size);
        if (sh->device_mem != c->device_mem || re->device_mem != c->device_mem)
            return ACCEL__FAIL(f->acc, ACCEL_ERR_INVALID_ARGUMENT,
                               "accel_zero_fsdp: the mesh's communicators and c use different memory");
        f->sc = sh->size > 1 ? sh : NULL;
        f->rc = re->size > 1 ? re : NULL;
        f->Ps = sh->size;
        f->Pr = re->size;
        f->srank = sh->rank;
        f->rrank = re->rank;
    } else if (s == ACCEL_ZERO_NO_SHARD) {
        f->rc = c->size > 1 ? c : NULL;
        f->Ps = 1;
        f->Pr = c->size;
        f->srank = 0;
        f->rrank = c->rank;
    } else {
        f->sc = c->size > 1 ? c : NULL;
        f->Ps = c->size;
        f->Pr = 1;
        f->srank = c->rank;
        f->rrank = 0;
    }
    f->dp = f->Ps * f->Pr;
    return ACCEL_OK;
}

/* What every rank must agree on at create: strategy, dtypes, offload, averaging, sizes, and every unit's layout. */
static accel_result accel__fsdp_check_layout(accel_zero_fsdp *f) {
    accel_coll *c = f->c;
    int64_t mine[8], *all;
    uint64_t h = ACCEL__FNV_INIT;
    accel_result r;
    int i, differ;
    if (c->size <= 1) return ACCEL_OK;
    for (i = 0; i < f->n; ++i) {
        unsigned char b[8];
        accel__put_u64(b, (uint64_t)accel_tensor_numel(&f->full[i]));
        h = accel__fnv1a(h, b, 8);
    }
    for (i = 0; i < f->K; ++i) {
        unsigned char b[4];
        accel__put_u32(b, (uint32_t)f->u[i].n);
        h = accel__fnv1a(h, b, 4);
    }
    mine[0] = f->d.strategy;
    mine[1] = f->d.param_dtype * 64 + f->d.reduce_dtype;
    mine[2] = f->offload * 2 + (f->d.no_average != 0);
    mine[3] = f->K;
    mine[4] = f->n;
    mine[5] = (int64_t)(h >> 1);
    mine[6] = f->Ps;
    mine[7] = f->check;
    r = accel__zero_gather_layouts(c, mine, 8, "accel_zero_fsdp_create (layout)", &all, &differ);
    if (r == ACCEL_OK && differ) {
        accel__sb b;
        accel__sb_init(&b, c->acc);
        accel__sb_printf(&b, "accel_zero_fsdp_create: ranks gave different models or settings:");
        for (i = 0; i < c->size; ++i) {
            const int64_t *s = all + 8 * i;
            accel__sb_printf(&b, " rank %d: %s, param %s, reduce %s, offload %d, %s, %lld units, %lld "
                                 "parameters, layout %llx, shard group %lld, check %lld;", i,
                             accel_zero_strategy_name((accel_zero_strategy)s[0]),
                             accel_dtype_name((accel_dtype)(s[1] / 64)) ? accel_dtype_name((accel_dtype)(s[1] / 64))
                                                                          : "?",
                             accel_dtype_name((accel_dtype)(s[1] % 64)) ? accel_dtype_name((accel_dtype)(s[1] % 64))
                                                                          : "?",
                             (int)(s[2] / 2), s[2] % 2 ? "sum" : "average", (long long)s[3], (long long)s[4],
                             (unsigned long long)s[5], (long long)s[6], (long long)s[7]);
        }
        r = ACCEL__FAIL(c->acc, ACCEL_ERR_MISMATCH, "%s",
                        b.oom ? "accel_zero_fsdp_create: ranks gave different models" : b.p);
        accel__sb_free(&b);
    }
    accel_host_free(c->acc, all);
    return r;
}

/* The local part of create: units, descriptors, layout. */
static accel_result accel__fsdp_build(accel_zero_fsdp *f, const accel_zero_fsdp_desc *desc) {
    accel *acc = f->acc;
    int i, j, p;
    int64_t soff = 0, flat = 0;
    if (desc->nunits < 1 || !desc->units)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_zero_fsdp_create: %d units", desc->nunits);
    f->K = desc->nunits;
    for (i = 0; i < f->K; ++i) {
        if (desc->units[i].n < 0 || (desc->units[i].n > 0 && !desc->units[i].params))
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_zero_fsdp_create: unit %d has %d parameters",
                               i, desc->units[i].n);
        if (f->n > INT_MAX / 2 - desc->units[i].n)
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_zero_fsdp_create: too many parameters");
        f->n += desc->units[i].n;
    }
    f->u = (accel__fsdp_unit *)accel_host_alloc(acc, sizeof(accel__fsdp_unit) * (size_t)f->K);
    f->full = (accel_tensor *)accel_host_alloc(acc, sizeof(accel_tensor) * (size_t)(f->n + 1));
    if (!f->u || !f->full) return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "accel_zero_fsdp_create");
    memset(f->u, 0, sizeof(accel__fsdp_unit) * (size_t)f->K);
    memset(f->full, 0, sizeof(accel_tensor) * (size_t)(f->n + 1));
    for (i = 0, p = 0; i < f->K; ++i) {
        accel__fsdp_unit *u = &f->u[i];
        char nm[32];
        u->first = p;
        u->n = desc->units[i].n;
        if (desc->units[i].name) u->name = accel__fsdp_strdup(acc, desc->units[i].name);
        else {
            snprintf(nm, sizeof nm, "unit %d", i);
            u->name = accel__fsdp_strdup(acc, nm);
        }
        if (!u->name) return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "accel_zero_fsdp_create");
        for (j = 0; j < u->n; ++j, ++p) {
            const accel_tensor *t = &desc->units[i].params[j];
            int64_t k = accel_tensor_numel(t);
            if (!t->name)
                return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                                   "accel_zero_fsdp_create: parameter %d of %s has no name", j, u->name);
            if (t->dtype != ACCEL_F32 || k < 0)
                return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                                   "accel_zero_fsdp_create: '%s' (%s) is %s with %d dimensions: the master "
                                   "parameters are F32 with a valid shape",
                                   t->name, u->name,
                                   accel_dtype_name(t->dtype) ? accel_dtype_name(t->dtype) : "invalid",
                                   t->ndim);
            if (u->numel > INT64_MAX / 4 - k)
                return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_zero_fsdp_create: %s is too large",
                                   u->name);
            f->full[p] = *t;
            f->full[p].ptr = NULL;
            f->full[p].name = accel__fsdp_strdup(acc, t->name);
            if (!f->full[p].name) return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "accel_zero_fsdp_create");
            u->numel += k;
        }
        u->S = accel__fsdp_slot(u->numel, f->Ps);
        if (u->S * (int64_t)f->Ps > (int64_t)INT_MAX)
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                               "accel_zero_fsdp_create: %s has %lld elements; one collective carries at most INT_MAX",
                               u->name, (long long)u->numel);
        u->begin = (int64_t)f->srank * u->S < u->numel ? (int64_t)f->srank * u->S : u->numel;
        u->end = u->begin + u->S < u->numel ? u->begin + u->S : u->numel;
        u->soff = soff;
        u->flat = flat;
        soff += u->S;
        flat += u->numel;
    }
    f->shard_elems = soff;
    return ACCEL_OK;
}

/* Allocates the shards and copies this rank's part of the initial values (desc ptrs) into the master shard. */
static accel_result accel__fsdp_alloc_shards(accel_zero_fsdp *f, const accel_zero_fsdp_desc *desc) {
    accel *acc = f->acc;
    size_t n = (size_t)(f->shard_elems > 0 ? f->shard_elems : 1);
    int64_t maxS = 1;
    int i, j, ukind = f->c->device_mem ? ACCEL__FSDP_DEVICE : ACCEL__FSDP_HOST;
    accel_result r = ACCEL_OK;
    f->master = (float *)accel__fsdp_alloc(acc, f->shard_kind, n * 4);
    f->grad = (float *)accel__fsdp_alloc(acc, f->shard_kind, n * 4);
    if (f->d.param_dtype != ACCEL_F32) f->model = accel__fsdp_alloc(acc, f->shard_kind, n * f->pes);
    for (i = 0; i < f->K; ++i)
        if (f->u[i].S > maxS) maxS = f->u[i].S;
    if (f->offload) f->stage = accel__fsdp_alloc(acc, ACCEL__FSDP_PINNED, (size_t)maxS * f->res);
    if (!f->master || !f->grad || (f->d.param_dtype != ACCEL_F32 && !f->model) || (f->offload && !f->stage))
        return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "accel_zero_fsdp_create: %zu shard elements", n);
    f->st.shard_bytes = (uint64_t)n * (8 + (f->model ? f->pes : 0));
    /* zeros: the padding stays zero for good (gathered and reduced as zeros) */
    if ((r = accel__fsdp_fill(f, f->shard_kind, f->master, 0, n * 4)) != ACCEL_OK) return r;
    if ((r = accel__fsdp_fill(f, f->shard_kind, f->grad, 0, n * 4)) != ACCEL_OK) return r;
    if (f->model && (r = accel__fsdp_fill(f, f->shard_kind, f->model, 0, n * f->pes)) != ACCEL_OK) return r;
    for (i = 0; i < f->K && r == ACCEL_OK; ++i) {
        accel__fsdp_unit *u = &f->u[i];
        int64_t off = 0;
        for (j = 0; j < u->n && r == ACCEL_OK; ++j) {
            const accel_tensor *t = &desc->units[i].params[j];
            int64_t k = accel_tensor_numel(t), lo = off > u->begin ? off : u->begin;
            int64_t hi = off + k < u->end ? off + k : u->end;
            if (t->ptr && hi > lo)
                r = accel__coll_copy(f->c, f->master + u->soff + (lo - u->begin),
                                     (const float *)t->ptr + (lo - off), (size_t)(hi - lo) * 4,
                                     accel__fsdp_dir(ukind, f->shard_kind));
            off += k;
        }
    }
    return r;
}

/* The param_dtype copy of the master shard (create, and after a checkpoint load): round to nearest even. */
static accel_result accel__fsdp_refresh_model(accel_zero_fsdp *f) {
    size_t n = (size_t)f->shard_elems, i;
    if (!f->model || n == 0) return ACCEL_OK;
    if (f->shard_kind != ACCEL__FSDP_DEVICE) {
        for (i = 0; i < n; ++i) accel__zero_cast_elem(f->model, (int)f->d.param_dtype, f->master, i);
        return ACCEL_OK;
    }
#ifdef ACCEL__COLL_DEVICE
    accel__zero_cast_kernel<<<accel__coll_blocks(n), 256, 0, (cudaStream_t)f->acc->stream>>>(
        f->model, (int)f->d.param_dtype, f->master, n);
    ACCEL__CUDA_CHECK(f->acc, cudaGetLastError());
    return ACCEL_OK;
#else
    return accel__fsdp_no_device(f);
#endif
}

ACCEL__DEF accel_result accel_zero_fsdp_create(accel_coll *c, const accel_zero_fsdp_desc *desc,
                                               accel_zero_fsdp **out) {
    accel *acc;
    accel_zero_fsdp *f = NULL;
    accel_result r = ACCEL_OK;
    if (!c) return accel__coll_null();
    acc = c->acc;
    if (out) *out = NULL;
    if (!out || !desc)
        r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_zero_fsdp_create: NULL %s", out ? "desc" : "out");
    if (r == ACCEL_OK) {
        f = (accel_zero_fsdp *)accel_host_alloc(acc, sizeof *f);
        if (!f) r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "accel_zero_fsdp_create");
    }
    if (r == ACCEL_OK) {
        memset(f, 0, sizeof *f);
        f->c = c;
        f->acc = acc;
        f->d = *desc;
        f->d.units = NULL;
        r = accel__fsdp_resolve(acc, &f->d);
    }
    if (r == ACCEL_OK) r = accel__fsdp_groups(f);
    if (r == ACCEL_OK) {
        accel_zero_strategy s = f->d.strategy;
        f->keep_after_forward = s == ACCEL_ZERO_SHARD_GRAD_OP || s == ACCEL_ZERO_HYBRID_SHARD_ZERO2;
        f->limited = s == ACCEL_ZERO_FULL_SHARD || s == ACCEL_ZERO_HYBRID_SHARD;
        f->offload = f->d.cpu_offload == ACCEL_ON;
        f->check = f->d.check == ACCEL_ON ||
                   (f->d.check == ACCEL_DEFAULT && (c->backend != ACCEL_COLL_BACKEND_NCCL || c->debug));
        f->poison = acc->debug;
        f->pes = accel_dtype_size(f->d.param_dtype);
        f->res = accel_dtype_size(f->d.reduce_dtype);
        f->shard_kind = f->offload ? ACCEL__FSDP_PINNED : c->device_mem ? ACCEL__FSDP_DEVICE : ACCEL__FSDP_HOST;
        f->gpool.kind = f->groot.kind = f->rpool.kind = c->device_mem ? ACCEL__FSDP_DEVICE : ACCEL__FSDP_HOST;
        r = accel__fsdp_build(f, desc);
    }
    /* a bad description on one rank fails every rank; then the layouts must agree */
    if (f || c->size > 1) r = accel__coll_agree(c, r, "accel_zero_fsdp_create");
    if (r == ACCEL_OK) r = accel__fsdp_check_layout(f);
    if (r == ACCEL_OK) r = accel__coll_agree(c, accel__fsdp_alloc_shards(f, desc), "accel_zero_fsdp_create (shards)");
    if (r == ACCEL_OK) r = accel__coll_agree(c, accel__fsdp_refresh_model(f), "accel_zero_fsdp_create (model copy)");
    if (r != ACCEL_OK) {
        accel_zero_fsdp_destroy(f);
        return r;
    }
    accel__fsdp_note_buffers(f);
    accel_log(acc, ACCEL_LOG_DEBUG,
              "zero-3: %s, %d units, %d parameters, shard group %d x replicate %d, %lld shard elements per rank, "
              "param %s, reduce %s%s, backward prefetch %s%s", accel_zero_strategy_name(f->d.strategy), f->K, f->n,
              f->Ps, f->Pr, (long long)f->shard_elems, accel_dtype_name(f->d.param_dtype),
              accel_dtype_name(f->d.reduce_dtype), f->offload ? ", offload" : "",
              accel__zero_prefetch_name(f->d.backward_prefetch),
              f->d.forward_prefetch == ACCEL_ON ? ", forward prefetch" : "");
    *out = f;
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_zero_fsdp_get_desc(const accel_zero_fsdp *f, accel_zero_fsdp_desc *out) {
    if (!f || !out) return accel__fsdp_null();
    *out = f->d;
    return ACCEL_OK;
}
ACCEL__DEF int accel_zero_fsdp_num_params(const accel_zero_fsdp *f) { return f ? f->n : -1; }
ACCEL__DEF accel_result accel_zero_fsdp_full_tensors(const accel_zero_fsdp *f, accel_tensor *out, int n) {
    if (!f) return accel__fsdp_null();
    if (n != f->n || !out)
        return ACCEL__FAIL(f->acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_zero_fsdp_full_tensors: %d tensors for %d", n,
                           f->n);
    memcpy(out, f->full, sizeof(accel_tensor) * (size_t)n);
    return ACCEL_OK;
}
ACCEL__DEF accel_result accel_zero_fsdp_get_stats(const accel_zero_fsdp *f, accel_zero_fsdp_stats *out) {
    if (!f || !out) return accel__fsdp_null();
    *out = f->st;
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_zero_fsdp_views(accel_zero_fsdp *f, accel_zero_view kind, accel_tensor *views, int n) {
    int i, j, p;
    unsigned char *base;
    size_t es;
    accel_dtype dt;
    if (!f) return accel__fsdp_null();
    if (n != f->n || !views || (int)kind < 0 || kind > ACCEL_ZERO_VIEW_NORM_GRADS)
        return ACCEL__FAIL(f->acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_zero_fsdp_views: kind %d, %d views for %d "
                           "parameters", (int)kind, n, f->n);
    base = kind == ACCEL_ZERO_VIEW_PARAMS ? (unsigned char *)f->master
           : kind == ACCEL_ZERO_VIEW_MODEL ? (unsigned char *)f->model
                                           : (unsigned char *)f->grad;
    dt = kind == ACCEL_ZERO_VIEW_MODEL ? f->d.param_dtype : ACCEL_F32;
    es = accel_dtype_size(dt);
    for (i = 0, p = 0; i < f->K; ++i) {
        const accel__fsdp_unit *u = &f->u[i];
        int64_t off = 0;
        for (j = 0; j < u->n; ++j, ++p) {
            int64_t k = accel_tensor_numel(&f->full[p]), lo = off > u->begin ? off : u->begin;
            int64_t hi = off + k < u->end ? off + k : u->end;
            accel_tensor *v = &views[p];
            memset(v, 0, sizeof *v);
            v->name = f->full[p].name;
            v->dtype = dt;
            v->ndim = 1;
            if (kind == ACCEL_ZERO_VIEW_NORM_GRADS && f->rrank > 0) hi = lo; /* a replica: counted by rank 0 */
            if (base) v->ptr = base + (size_t)u->soff * es;
            if (hi > lo) {
                v->shape[0] = hi - lo;
                if (base) v->ptr = base + (size_t)(u->soff + lo - u->begin) * es;
            }
            off += k;
        }
    }
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_zero_fsdp_pieces(accel_zero_fsdp *f, accel_zero_view kind, int owner_only,
                                               accel_tensor_piece *pieces, int n) {
    accel_tensor *v;
    accel_result r;
    int i, j, p;
    if (!f) return accel__fsdp_null();
    if (!pieces && n > 0)
        return ACCEL__FAIL(f->acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_zero_fsdp_pieces: pieces is NULL");
    v = (accel_tensor *)accel_host_alloc(f->acc, sizeof(accel_tensor) * (size_t)(f->n + 1));
    if (!v) return accel__fail_wrap(f->acc, ACCEL_ERR_OUT_OF_MEMORY, "accel_zero_fsdp_pieces");
    r = accel_zero_fsdp_views(f, kind, v, n);
    for (i = 0, p = 0; r == ACCEL_OK && i < f->K; ++i) {
        const accel__fsdp_unit *u = &f->u[i];
        int64_t off = 0;
        for (j = 0; j < u->n; ++j, ++p) {
            int64_t k = accel_tensor_numel(&f->full[p]), lo = off > u->begin ? off : u->begin;
            pieces[p].tensor = p;
            pieces[p].offset = lo > off ? lo - off : 0;
            pieces[p].count = (owner_only && f->rrank > 0) ? 0 : v[p].shape[0];
            if (pieces[p].offset > k) pieces[p].offset = k;
            pieces[p].ptr = v[p].ptr;
            off += k;
        }
    }
    accel_host_free(f->acc, v);
    return r;
}

/* ----- gathers */
/* Starts u's all-gather into a buffer of the gather pool (the caller checked the limit). Offload: the shard is
   staged into this rank's slot of the buffer first and gathered in place. */
static accel_result accel__fsdp_post_gather(accel_zero_fsdp *f, int i, int prefetch) {
    accel__fsdp_unit *u = &f->u[i];
    const void *send = f->model ? (const void *)((const unsigned char *)f->model + (size_t)u->soff * f->pes)
                                : (const void *)(f->master + u->soff);
    size_t slot = (size_t)u->S * f->pes;
    accel_result r = accel__fsdp_get(f, accel__fsdp_gpool(f, i), slot * (size_t)f->Ps,
                                     f->limited ? ACCEL__FSDP_LIVE : 0, &u->g, "accel_zero_fsdp gather buffer");
    if (r != ACCEL_OK) return r;
    if (f->offload) {
        void *mine = (unsigned char *)u->g.p + slot * (size_t)f->srank;
        r = accel__coll_copy(f->sc ? f->sc : f->c, mine, send, slot, accel__fsdp_dir(f->shard_kind, f->gpool.kind));
        send = mine;
    }
    if (r == ACCEL_OK && f->sc) /* a shard group of one (offload): the staged slot is the unit */
        r = accel_coll_all_gather_async(f->sc, send, u->g.p, (size_t)u->S, f->d.param_dtype, &u->greq);
    if (r != ACCEL_OK) {
        accel__fsdp_put(f, accel__fsdp_gpool(f, i), &u->g);
        f->broken = 1; /* the peers posted theirs */
        return r;
    }
    u->gstate = 1;
    f->st.gathers++;
    if (prefetch) f->st.prefetches++;
    accel__fsdp_note_buffers(f);
    accel__fsdp_trace(f, prefetch ? ACCEL_ZERO_EV_PREFETCH : ACCEL_ZERO_EV_GATHER, i);
    return ACCEL_OK;
}
/* The rotating units gathered (the root, unit 0, is not counted: ACCEL__FSDP_LIVE) */
static int accel__fsdp_live_gathers(const accel_zero_fsdp *f) {
    int i, k = 0;
    for (i = 1; i < f->K; ++i) k += f->u[i].gstate != 0;
    return k;
}
/* Whether units live in gather buffers: a shard group of more than one process, or offload (the pinned host shard
   is staged into the gather pool's memory — the device's with a device communicator — even when there is nothing to
   gather: compute never reads the pinned shard). */
static int accel__fsdp_buffered(const accel_zero_fsdp *f) { return f->sc || f->offload; }
/* Whether gather(u) needs a buffer (and, with a shard group, communication): u not gathered already. */
static int accel__fsdp_needs_gather(const accel_zero_fsdp *f, int i) {
    return accel__fsdp_buffered(f) && f->u[i].gstate == 0 && f->u[i].S > 0;
}
/* Whether gathering unit i now would make a third rotating unit live (FULL_SHARD, HYBRID_SHARD; never the root) */
static int accel__fsdp_over_limit(const accel_zero_fsdp *f, int i) {
    return f->limited && i > 0 && accel__fsdp_needs_gather(f, i) && accel__fsdp_live_gathers(f) >= ACCEL__FSDP_LIVE;
}
/* Prefetch of unit i (when it is a unit, needs a gather and the limit allows) */
static accel_result accel__fsdp_prefetch(accel_zero_fsdp *f, int i) {
    if (i < 0 || i >= f->K || !accel__fsdp_needs_gather(f, i)) return ACCEL_OK;
    if (f->limited && i > 0 && accel__fsdp_live_gathers(f) >= ACCEL__FSDP_LIVE) return ACCEL_OK;
    return accel__fsdp_post_gather(f, i, 1);
}
/* The unit after position pos of this pass's recorded order (first pass: nothing is known yet) */
static int accel__fsdp_next_in_order(const accel_zero_fsdp *f, int ph, int pos) {
    if (!f->recorded[ph] || pos + 1 >= (int)stbds_arrlen(f->order[ph])) return -1;
    return f->order[ph][pos + 1];
}

/* ----- reductions */
/* Widens u's reduced slot (at src, memory kind src_kind) into the F32 gradient shard. */
static accel_result accel__fsdp_accumulate(accel_zero_fsdp *f, accel__fsdp_unit *u, const void *src, int src_kind) {
    size_t n = (size_t)u->S, i;
    float *dst = f->grad + u->soff;
    int put = !u->has_grad;
    if (f->offload && src_kind == ACCEL__FSDP_DEVICE) { /* device → pinned staging, then the host loop */
        accel_result r = accel__coll_copy(f->c, f->stage, src, n * f->res, 2);
        if (r != ACCEL_OK) return r;
        src = f->stage;
        src_kind = ACCEL__FSDP_PINNED;
    }
    u->has_grad = 1;
    if (f->shard_kind != ACCEL__FSDP_DEVICE) {
        for (i = 0; i < n; ++i) accel__zero_accum_elem(dst, src, (int)f->d.reduce_dtype, i, put);
        return ACCEL_OK;
    }
#ifdef ACCEL__COLL_DEVICE
    accel__zero_accum_kernel<<<accel__coll_blocks(n), 256, 0, (cudaStream_t)f->acc->stream>>>(
        dst, src, (int)f->d.reduce_dtype, n, put);
    ACCEL__CUDA_CHECK(f->acc, cudaGetLastError());
    return ACCEL_OK;
#else
    (void)src_kind;
    return accel__fsdp_no_device(f);
#endif
}

/* Where u's reduced slot is: the receive part after the Ps slots (Ps > 1), or the buffer itself (Ps == 1). */
static void *accel__fsdp_reduced(const accel_zero_fsdp *f, const accel__fsdp_unit *u) {
    return f->sc ? (unsigned char *)u->r.p + (size_t)u->S * (size_t)f->Ps * f->res : u->r.p;
}

/* Advances the oldest reduction (FIFO: every rank posts the replicate all-reduces in the same order); block: wait.
   *done: the oldest finished (or there is none). */
static accel_result accel__fsdp_advance(accel_zero_fsdp *f, int block, int *done) {
    accel__fsdp_unit *u;
    accel_result r = ACCEL_OK;
    int i, fin = 1;
    *done = 1;
    if (stbds_arrlen(f->fifo) == 0) return ACCEL_OK;
    i = f->fifo[0];
    u = &f->u[i];
    for (;;) {
        if (u->rreq) {
            if (block) r = accel_coll_wait(u->rreq);
            else r = accel_coll_test(u->rreq, &fin);
            if (r != ACCEL_OK) {
                u->rreq = NULL;
                f->broken = 1;
                return r;
            }
            if (!fin) { *done = 0; return ACCEL_OK; }
            u->rreq = NULL;
        }
        if (u->rphase == 1 && f->sc && f->rc) { /* then across the replicas, in place on the reduced slot */
            u->rphase = 2;
            r = accel_coll_all_reduce_async(f->rc, accel__fsdp_reduced(f, u), accel__fsdp_reduced(f, u),
                                            (size_t)u->S, f->d.reduce_dtype, ACCEL_COLL_SUM, &u->rreq);
            if (r != ACCEL_OK) { f->broken = 1; return r; }
            continue;
        }
        break;
    }
    r = accel__fsdp_accumulate(f, u, accel__fsdp_reduced(f, u), f->rpool.kind);
    accel__fsdp_put(f, &f->rpool, &u->r);
    u->rstate = 0;
    u->rphase = 0;
    stbds_arrdel(f->fifo, 0);
    accel__fsdp_note_buffers(f);
    accel__fsdp_trace(f, ACCEL_ZERO_EV_REDUCED, i);
    return r;
}
/* Polls everything in flight once: gathers (MPI progresses only inside MPI calls) and the reductions in order. */
static accel_result accel__fsdp_poll(accel_zero_fsdp *f) {
    int i, done = 1;
    accel_result r = ACCEL_OK;
    for (i = 0; i < f->K && r == ACCEL_OK; ++i)
        if (f->u[i].greq) {
            int fin = 0;
            r = accel_coll_test(f->u[i].greq, &fin);
            if (r != ACCEL_OK || fin) f->u[i].greq = NULL;
            if (r != ACCEL_OK) f->broken = 1;
        }
    while (r == ACCEL_OK && done && stbds_arrlen(f->fifo) > 0) r = accel__fsdp_advance(f, 0, &done);
    return r;
}
ACCEL__DEF accel_result accel_zero_fsdp_progress(accel_zero_fsdp *f) {
    accel_result r = accel__fsdp_usable(f);
    return r == ACCEL_OK ? accel__fsdp_poll(f) : r;
}

/* ----- the pass functions */
static accel_result accel__fsdp_begin(accel_zero_fsdp *f, int ph) {
    int kind = ph == 1 ? ACCEL__FSDP_C_FWD : ACCEL__FSDP_C_BWD;
    accel_result r = accel__fsdp_usable(f);
    if (r != ACCEL_OK) return r;
    r = accel__fsdp_sync(f, kind, -1, ACCEL_OK);
    if (r != ACCEL_OK) return r;
    /* the first pass of each kind records the order in which units are waited on (it ends when another pass
       begins); the later ones prefetch by it */
    if (f->phase && stbds_arrlen(f->order[f->phase - 1]) > 0) f->recorded[f->phase - 1] = 1;
    f->phase = ph;
    f->pos[ph - 1] = -1;
    if ((r = accel__fsdp_poll(f)) != ACCEL_OK) return r;
    if (ph == 1 && f->d.forward_prefetch == ACCEL_ON)
        return accel__fsdp_prefetch(f, accel__fsdp_next_in_order(f, 0, -1));
    if (ph == 2 && f->d.backward_prefetch != ACCEL_ZERO_NO_PREFETCH)
        return accel__fsdp_prefetch(f, accel__fsdp_next_in_order(f, 1, -1));
    return ACCEL_OK;
}
ACCEL__DEF accel_result accel_zero_fsdp_begin_forward(accel_zero_fsdp *f) { return accel__fsdp_begin(f, 1); }
ACCEL__DEF accel_result accel_zero_fsdp_begin_backward(accel_zero_fsdp *f) { return accel__fsdp_begin(f, 2); }

ACCEL__DEF accel_result accel_zero_fsdp_gather(accel_zero_fsdp *f, int unit) {
    accel_result r = accel__fsdp_usable(f), local;
    if (r != ACCEL_OK) return r;
    local = accel__fsdp_unit_arg(f, unit, "accel_zero_fsdp_gather");
    if (local == ACCEL_OK && accel__fsdp_over_limit(f, unit))
        local = ACCEL__FAIL(f->acc, ACCEL_ERR_STATE,
                            "accel_zero_fsdp_gather(%d): %d units are gathered already (%s keeps at most %d live "
                            "besides the root, unit 0: release one first)", unit, ACCEL__FSDP_LIVE,
                            accel_zero_strategy_name(f->d.strategy), ACCEL__FSDP_LIVE);
    r = accel__fsdp_sync(f, ACCEL__FSDP_C_GATHER, unit, local);
    if (r != ACCEL_OK) return r;
    if ((r = accel__fsdp_poll(f)) != ACCEL_OK) return r;
    return accel__fsdp_needs_gather(f, unit) ? accel__fsdp_post_gather(f, unit, 0) : ACCEL_OK;
}

/* The n parameter views of unit i over base (the gathered buffer, or the shard itself when Ps == 1). */
static void accel__fsdp_unit_views(const accel_zero_fsdp *f, int i, const void *base, accel_dtype dt,
                                   accel_tensor *out) {
    const accel__fsdp_unit *u = &f->u[i];
    size_t es = accel_dtype_size(dt), off = 0;
    int j;
    for (j = 0; j < u->n; ++j) {
        out[j] = f->full[u->first + j];
        out[j].dtype = dt;
        out[j].ptr = base ? (unsigned char *)(uintptr_t)base + off * es : NULL;
        off += (size_t)accel_tensor_numel(&f->full[u->first + j]);
    }
}
static accel_result accel__fsdp_views_arg(accel_zero_fsdp *f, int unit, const accel_tensor *v, int n,
                                          const char *what) {
    accel_result r = accel__fsdp_unit_arg(f, unit, what);
    if (r == ACCEL_OK && (n != f->u[unit].n || (n > 0 && !v)))
        r = ACCEL__FAIL(f->acc, ACCEL_ERR_INVALID_ARGUMENT, "%s(%d): %d views for %s's %d parameters", what, unit, n,
                        f->u[unit].name, f->u[unit].n);
    return r;
}

ACCEL__DEF accel_result accel_zero_fsdp_wait(accel_zero_fsdp *f, int unit, accel_tensor *params, int n) {
    accel_result r = accel__fsdp_usable(f), local;
    accel__fsdp_unit *u;
    int ph, next = -1;
    if (r != ACCEL_OK) return r;
    local = accel__fsdp_views_arg(f, unit, params, n, "accel_zero_fsdp_wait");
    if (local == ACCEL_OK && f->u[unit].gstate == 2)
        local = ACCEL__FAIL(f->acc, ACCEL_ERR_STATE, "accel_zero_fsdp_wait(%d): %s is in use already (waited, not "
                            "released)", unit, f->u[unit].name);
    if (local == ACCEL_OK && accel__fsdp_over_limit(f, unit))
        local = ACCEL__FAIL(f->acc, ACCEL_ERR_STATE,
                            "accel_zero_fsdp_wait(%d): %d units are gathered already (%s keeps at most %d live "
                            "besides the root, unit 0: release one first)", unit, ACCEL__FSDP_LIVE,
                            accel_zero_strategy_name(f->d.strategy), ACCEL__FSDP_LIVE);
    r = accel__fsdp_sync(f, ACCEL__FSDP_C_WAIT, unit, local);
    if (r != ACCEL_OK) return r;
    u = &f->u[unit];
    if (accel__fsdp_needs_gather(f, unit) && (r = accel__fsdp_post_gather(f, unit, 0)) != ACCEL_OK) return r;
    if (u->greq) {
        r = accel_coll_wait(u->greq);
        u->greq = NULL;
        if (r != ACCEL_OK) { f->broken = 1; return r; }
    }
    u->gstate = 2;
    if (accel__fsdp_buffered(f)) accel__fsdp_unit_views(f, unit, u->g.p, f->d.param_dtype, params);
    else accel__fsdp_unit_views(f, unit, f->model ? (const void *)((const unsigned char *)f->model +
                                                                   (size_t)u->soff * f->pes)
                                                  : (const void *)(f->master + u->soff),
                                f->d.param_dtype, params);
    accel__fsdp_trace(f, ACCEL_ZERO_EV_WAIT, unit);
    /* the execution order: recorded in the first pass, followed (prefetch) in the later ones */
    if (f->phase) {
        ph = f->phase - 1;
        if (!f->recorded[ph]) {
            if (accel__arr_reserve((void **)&f->order[ph], sizeof(int), 1) != 0)
                return accel__fail_wrap(f->acc, ACCEL_ERR_OUT_OF_MEMORY, "accel_zero_fsdp_wait");
            stbds_arrput(f->order[ph], unit);
        } else {
            int p = f->pos[ph] + 1;
            if (p < (int)stbds_arrlen(f->order[ph]) && f->order[ph][p] == unit) {
                f->pos[ph] = p;
                next = accel__fsdp_next_in_order(f, ph, p);
            } else {
                f->pos[ph] = (int)stbds_arrlen(f->order[ph]); /* off the recorded order: no prefetch this pass */
            }
        }
        if (next >= 0 && ((ph == 0 && f->d.forward_prefetch == ACCEL_ON) ||
                          (ph == 1 && f->d.backward_prefetch == ACCEL_ZERO_BACKWARD_PRE)))
            if ((r = accel__fsdp_prefetch(f, next)) != ACCEL_OK) return r;
    }
    return accel__fsdp_poll(f);
}

ACCEL__DEF accel_result accel_zero_fsdp_release(accel_zero_fsdp *f, int unit) {
    accel_result r = accel__fsdp_usable(f);
    accel__fsdp_unit *u;
    if (r != ACCEL_OK) return r;
    if ((r = accel__fsdp_unit_arg(f, unit, "accel_zero_fsdp_release")) != ACCEL_OK) return r;
    u = &f->u[unit];
    if (u->gstate != 2)
        return ACCEL__FAIL(f->acc, ACCEL_ERR_STATE, "accel_zero_fsdp_release(%d): %s is not in use (wait on it "
                           "first)", unit, u->name);
    if (f->keep_after_forward && f->phase == 1 && accel__fsdp_buffered(f)) { /* ZeRO-2: stays for the backward */
        u->gstate = 3;
        return accel__fsdp_poll(f);
    }
    u->gstate = 0;
    if (u->g.p) {
        if (f->poison && (r = accel__fsdp_fill(f, f->gpool.kind, u->g.p, 0xFF, u->g.bytes)) != ACCEL_OK) return r;
        accel__fsdp_put(f, accel__fsdp_gpool(f, unit), &u->g);
    }
    accel__fsdp_note_buffers(f);
    accel__fsdp_trace(f, ACCEL_ZERO_EV_RELEASE, unit);
    return accel__fsdp_poll(f);
}

ACCEL__DEF accel_result accel_zero_fsdp_grads(accel_zero_fsdp *f, int unit, accel_tensor *grads, int n) {
    accel_result r = accel__fsdp_usable(f);
    accel__fsdp_unit *u;
    if (r != ACCEL_OK) return r;
    if ((r = accel__fsdp_views_arg(f, unit, grads, n, "accel_zero_fsdp_grads")) != ACCEL_OK) return r;
    u = &f->u[unit];
    if (u->rstate == 3)
        return ACCEL__FAIL(f->acc, ACCEL_ERR_STATE, "accel_zero_fsdp_grads(%d): %s's gradients are being reduced "
                           "(end_backward first)", unit, u->name);
    if (u->rstate == 0) {
        size_t bytes = (size_t)u->S * (size_t)f->Ps * f->res;
        r = accel__fsdp_get(f, &f->rpool, bytes + (f->sc ? (size_t)u->S * f->res : 0), ACCEL__FSDP_REDUCING + 1,
                            &u->r, "accel_zero_fsdp gradient buffer");
        if (r == ACCEL_OK) r = accel__fsdp_fill(f, f->rpool.kind, u->r.p, 0, bytes);
        if (r != ACCEL_OK) {
            accel__fsdp_put(f, &f->rpool, &u->r);
            return r;
        }
        accel__fsdp_note_buffers(f);
    }
    u->rstate = 1;
    accel__fsdp_unit_views(f, unit, u->r.p, f->d.reduce_dtype, grads);
    return ACCEL_OK;
}

/* Starts u's reduction: pre-scale, reduce-scatter over the shard group (or, Ps == 1, all-reduce over the replicas);
   at most ACCEL__FSDP_REDUCING in flight (the oldest is finished first). */
static accel_result accel__fsdp_post_reduce(accel_zero_fsdp *f, int i) {
    accel__fsdp_unit *u = &f->u[i];
    size_t n = (size_t)u->S * (size_t)f->Ps;
    accel_result r = ACCEL_OK;
    int done = 1;
    while (r == ACCEL_OK && stbds_arrlen(f->fifo) >= ACCEL__FSDP_REDUCING) r = accel__fsdp_advance(f, 1, &done);
    if (r != ACCEL_OK) return r;
    if (accel__arr_reserve((void **)&f->fifo, sizeof(int), 1) != 0)
        return accel__fail_wrap(f->acc, ACCEL_ERR_OUT_OF_MEMORY, "accel_zero_fsdp_reduce_scatter");
    if (!f->d.no_average && f->dp > 1)
        r = accel__coll_prescale_by(f->sc ? f->sc : f->rc, u->r.p, u->r.p, n, f->d.reduce_dtype, (double)f->dp);
    u->rstate = 3;
    u->rphase = 1;
    stbds_arrput(f->fifo, i);
    if (r == ACCEL_OK && f->sc)
        r = accel_coll_reduce_scatter_async(f->sc, u->r.p, accel__fsdp_reduced(f, u), (size_t)u->S,
                                            f->d.reduce_dtype, ACCEL_COLL_SUM, &u->rreq);
    else if (r == ACCEL_OK && f->rc)
        r = accel_coll_all_reduce_async(f->rc, u->r.p, u->r.p, n, f->d.reduce_dtype, ACCEL_COLL_SUM, &u->rreq);
    if (r != ACCEL_OK) {
        f->broken = 1;
        return r;
    }
    f->st.reductions++;
    accel__fsdp_trace(f, ACCEL_ZERO_EV_REDUCE, i);
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_zero_fsdp_reduce_scatter(accel_zero_fsdp *f, int unit) {
    accel_result r = accel__fsdp_usable(f), local;
    if (r != ACCEL_OK) return r;
    local = accel__fsdp_unit_arg(f, unit, "accel_zero_fsdp_reduce_scatter");
    if (local == ACCEL_OK && f->u[unit].rstate != 1)
        local = ACCEL__FAIL(f->acc, ACCEL_ERR_STATE, "accel_zero_fsdp_reduce_scatter(%d): %s has no gradients in this "
                            "micro-batch (grads(%d) first)", unit, f->u[unit].name, unit);
    r = accel__fsdp_sync(f, ACCEL__FSDP_C_RS, unit, local);
    if (r != ACCEL_OK) return r;
    if (f->phase == 2 && f->d.backward_prefetch == ACCEL_ZERO_BACKWARD_POST) {
        int ph = 1, next = f->recorded[ph] ? accel__fsdp_next_in_order(f, ph, f->pos[ph]) : -1;
        if ((r = accel__fsdp_prefetch(f, next)) != ACCEL_OK) return r;
    }
    if (!accel_should_reduce(f->acc)) { /* no_sync: the sums stay in u's buffer */
        f->u[unit].rstate = 2;
        accel__fsdp_trace(f, ACCEL_ZERO_EV_HOLD, unit);
        return accel__fsdp_poll(f);
    }
    if ((!f->sc && !f->rc) || f->u[unit].S == 0) { /* one process, or nothing: final where they are */
        accel__fsdp_unit *u = &f->u[unit];
        f->st.reductions++;
        accel__fsdp_trace(f, ACCEL_ZERO_EV_REDUCE, unit);
        r = accel__fsdp_accumulate(f, u, u->r.p, f->rpool.kind);
        accel__fsdp_put(f, &f->rpool, &u->r);
        u->rstate = 0;
        accel__fsdp_note_buffers(f);
        accel__fsdp_trace(f, ACCEL_ZERO_EV_REDUCED, unit);
        return r;
    }
    if ((r = accel__fsdp_post_reduce(f, unit)) != ACCEL_OK) return r;
    return accel__fsdp_poll(f);
}

ACCEL__DEF accel_result accel_zero_fsdp_end_backward(accel_zero_fsdp *f) {
    accel_result r = accel__fsdp_usable(f), local = ACCEL_OK;
    int i, done = 1;
    if (r != ACCEL_OK) return r;
    for (i = 0; i < f->K && local == ACCEL_OK; ++i)
        if (f->u[i].rstate == 1)
            local = ACCEL__FAIL(f->acc, ACCEL_ERR_STATE, "accel_zero_fsdp_end_backward: %s's gradients were taken "
                                "(grads) but not reduce_scattered", f->u[i].name);
    r = accel__fsdp_sync(f, ACCEL__FSDP_C_END, -1, local);
    if (r != ACCEL_OK) return r;
    while (r == ACCEL_OK && stbds_arrlen(f->fifo) > 0) r = accel__fsdp_advance(f, 1, &done);
    for (i = 0; r == ACCEL_OK && i < f->K; ++i) {
        accel__fsdp_unit *u = &f->u[i];
        if (u->gstate != 3) continue; /* ZeRO-2's units kept since forward and not used in backward */
        if (u->greq) {
            r = accel_coll_wait(u->greq);
            u->greq = NULL;
        }
        u->gstate = 0;
        accel__fsdp_put(f, accel__fsdp_gpool(f, i), &u->g);
        accel__fsdp_trace(f, ACCEL_ZERO_EV_RELEASE, i);
    }
    if (f->phase && stbds_arrlen(f->order[f->phase - 1]) > 0) f->recorded[f->phase - 1] = 1;
    f->phase = 0;
    accel__fsdp_note_buffers(f);
    if (r != ACCEL_OK) f->broken = 1;
    return r;
}

ACCEL__DEF accel_result accel_zero_fsdp_zero_grad(accel_zero_fsdp *f) {
    accel_result r = accel__fsdp_usable(f);
    int i;
    if (r != ACCEL_OK) return r;
    if (stbds_arrlen(f->fifo) > 0)
        return ACCEL__FAIL(f->acc, ACCEL_ERR_STATE, "accel_zero_fsdp_zero_grad: reductions are in flight "
                           "(end_backward first)");
    for (i = 0; i < f->K; ++i) f->u[i].has_grad = 0;
    return accel__fsdp_fill(f, f->shard_kind, f->grad, 0, (size_t)(f->shard_elems > 0 ? f->shard_elems : 1) * 4);
}

/* ----- the memory estimate */
ACCEL__DEF accel_result accel_zero_fsdp_estimate(accel *acc, const accel_zero_fsdp_desc *desc, int dp_shard,
                                                 int optim_states, accel_dtype state_dtype, int no_sync,
                                                 accel_zero_fsdp_memory *out) {
    const char *what = "accel_zero_fsdp_estimate";
    accel_zero_strategy s;
    uint64_t pes, res, ses, g0 = 0, g1 = 0, g2 = 0, r1 = 0, r2 = 0, gall = 0, rall = 0, elems = 0, whole = 0;
    uint64_t maxS = 1;
    int i, j, Ps;
    if (!desc || !out || (desc->nunits > 0 && !desc->units) || desc->nunits < 0)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: NULL desc, out or units", what);
    s = desc->strategy == ACCEL_ZERO_STRATEGY_DEFAULT ? ACCEL_ZERO_FULL_SHARD : desc->strategy;
    pes = accel_dtype_size(desc->param_dtype ? desc->param_dtype : ACCEL_F32);
    res = accel_dtype_size(desc->reduce_dtype ? desc->reduce_dtype : desc->param_dtype ? desc->param_dtype
                                                                                     : ACCEL_F32);
    ses = optim_states > 0 ? accel_dtype_size(state_dtype) : 0;
    if ((int)s < 0 || s >= ACCEL_ZERO_STRATEGY_COUNT || dp_shard < 1 || optim_states < 0 || !pes || !res ||
        (optim_states > 0 && !ses))
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: strategy %d, dp_shard %d, %d optimizer states of %s",
                           what, (int)s, dp_shard, optim_states,
                           accel_dtype_name(state_dtype) ? accel_dtype_name(state_dtype) : "invalid");
    Ps = s == ACCEL_ZERO_NO_SHARD ? 1 : dp_shard;
    for (i = 0; i < desc->nunits; ++i) {
        const accel_zero_unit *u = &desc->units[i];
        int64_t numel = 0, S;
        uint64_t gb, rb;
        if (u->n < 0 || (u->n > 0 && !u->params))
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: unit %d has %d parameters", what, i, u->n);
        for (j = 0; j < u->n; ++j) {
            int64_t k = accel_tensor_numel(&u->params[j]);
            if (k < 0 || numel > INT64_MAX / 4 - k)
                return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: unit %d parameter %d has a bad shape", what,
                                   i, j);
            numel += k;
        }
        S = accel__fsdp_slot(numel, Ps);
        if ((uint64_t)S > maxS) maxS = (uint64_t)S;
        elems += (uint64_t)S;
        whole += (uint64_t)numel;
        gb = Ps > 1 || desc->cpu_offload == ACCEL_ON ? (uint64_t)S * (uint64_t)Ps * pes : 0; /* _buffered */
        rb = (uint64_t)S * (uint64_t)Ps * res + (Ps > 1 ? (uint64_t)S * res : 0);
        gall += gb;
        rall += rb;
        if (i == 0) g0 = gb; /* the root's own buffer (ACCEL__FSDP_LIVE) */
        else if (gb > g1) { g2 = g1; g1 = gb; } else if (gb > g2) g2 = gb;
        if (rb > r1) { r2 = r1; r1 = rb; } else if (rb > r2) r2 = rb;
    }
    memset(out, 0, sizeof *out);
    out->shards = elems * (8 + (pes == 4 ? 0 : pes));
    out->optimizer = elems * (uint64_t)optim_states * ses;
    out->gather_buffers = s == ACCEL_ZERO_SHARD_GRAD_OP || s == ACCEL_ZERO_HYBRID_SHARD_ZERO2 ? gall : g0 + g1 + g2;
    out->grad_buffers = no_sync ? rall : r1 + r2;
    out->staging = desc->cpu_offload == ACCEL_ON ? maxS * res : 0; /* create's f->stage */
    out->cache = 0; /* accel__fsdp_get reuses exact sizes only */
    out->total = out->shards + out->optimizer + out->gather_buffers + out->grad_buffers + out->staging;
    out->offloaded = desc->cpu_offload == ACCEL_ON ? out->shards + out->optimizer + out->staging : 0;
    out->unsharded = whole * (8 + (pes == 4 ? 0 : pes) + (uint64_t)optim_states * ses);
    return ACCEL_OK;
}

/* ----- consolidated parameters (accel_zero_fsdp_export / _import) */
static accel_result accel__fsdp_full_arg(accel_zero_fsdp *f, const accel_tensor *full, int n, const char *what) {
    int i;
    if (n != f->n || (n > 0 && !full))
        return ACCEL__FAIL(f->acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: %d tensors for %d parameters", what, n, f->n);
    for (i = 0; i < n; ++i)
        if (full[i].dtype != ACCEL_F32 || accel_tensor_numel(&full[i]) != accel_tensor_numel(&f->full[i]) ||
            (accel_tensor_numel(&full[i]) > 0 && !full[i].ptr))
            return ACCEL__FAIL(f->acc, ACCEL_ERR_INVALID_ARGUMENT,
                               "%s: tensor %d is %s with %lld elements%s; parameter %d (%s) is F32 with %lld", what,
                               i, accel_dtype_name(full[i].dtype) ? accel_dtype_name(full[i].dtype) : "invalid",
                               (long long)accel_tensor_numel(&full[i]), full[i].ptr ? "" : " and no memory", i,
                               f->full[i].name, (long long)accel_tensor_numel(&f->full[i]));
    return ACCEL_OK;
}
static accel_result accel__fsdp_between_steps(accel_zero_fsdp *f, const char *what) {
    int i;
    for (i = 0; i < f->K; ++i)
        if (f->u[i].gstate != 0 || f->u[i].rstate != 0)
            return ACCEL__FAIL(f->acc, ACCEL_ERR_STATE, "%s: %s is %s (call it between steps)", what, f->u[i].name,
                               f->u[i].gstate ? "gathered" : "holding gradients");
    return ACCEL_OK;
}
ACCEL__DEF accel_result accel_zero_fsdp_export(accel_zero_fsdp *f, const accel_tensor *full, int n) {
    const char *what = "accel_zero_fsdp_export";
    accel_result r = accel__fsdp_usable(f), local;
    int64_t maxS = 1;
    float *tmp = NULL;
    int i, j, p, kind;
    if (r != ACCEL_OK) return r;
    kind = f->gpool.kind;
    local = accel__fsdp_full_arg(f, full, n, what);
    if (local == ACCEL_OK) local = accel__fsdp_between_steps(f, what);
    for (i = 0; i < f->K; ++i)
        if (f->u[i].S > maxS) maxS = f->u[i].S;
    if (local == ACCEL_OK) {
        tmp = (float *)accel__fsdp_alloc(f->acc, kind, (size_t)maxS * (size_t)f->Ps * 4);
        if (!tmp) local = accel__fail_wrap(f->acc, ACCEL_ERR_OUT_OF_MEMORY, "%s (staging)", what);
    }
    if ((r = accel__coll_agree(f->c, local, what)) != ACCEL_OK) {
        accel__fsdp_free(f->acc, kind, tmp);
        return r;
    }
    for (i = 0, p = 0; i < f->K && r == ACCEL_OK; ++i) {
        accel__fsdp_unit *u = &f->u[i];
        int64_t off = 0;
        float *mine = tmp + (size_t)u->S * (size_t)f->srank;
        /* this rank's slot into its place of the staging, then gathered in place (the shards may be pinned host
           memory under offload, the collective's memory is the communicator's) */
        r = accel__coll_copy(f->c, mine, f->master + u->soff, (size_t)u->S * 4, accel__fsdp_dir(f->shard_kind, kind));
        if (r == ACCEL_OK && f->sc && u->S > 0) r = accel_coll_all_gather(f->sc, mine, tmp, (size_t)u->S, ACCEL_F32);
        for (j = 0; j < u->n && r == ACCEL_OK; ++j, ++p) {
            int64_t k = accel_tensor_numel(&f->full[p]);
            r = accel__coll_copy(f->c, full[p].ptr, tmp + off, (size_t)k * 4, accel__fsdp_dir(kind, kind));
            off += k;
        }
    }
    accel__fsdp_free(f->acc, kind, tmp);
    if (r != ACCEL_OK) f->broken = 1; /* the ranks may have stopped at different units */
    return r;
}
ACCEL__DEF accel_result accel_zero_fsdp_import(accel_zero_fsdp *f, const accel_tensor *full, int n) {
    const char *what = "accel_zero_fsdp_import";
    accel_tensor_piece *pc;
    accel_result r = accel__fsdp_usable(f);
    int i;
    if (r != ACCEL_OK) return r;
    if ((r = accel__fsdp_full_arg(f, full, n, what)) != ACCEL_OK) return r;
    if ((r = accel__fsdp_between_steps(f, what)) != ACCEL_OK) return r;
    pc = (accel_tensor_piece *)accel_host_alloc(f->acc, sizeof *pc * (size_t)f->n);
    if (!pc) return accel__fail_wrap(f->acc, ACCEL_ERR_OUT_OF_MEMORY, "%s", what);
    r = accel_zero_fsdp_pieces(f, ACCEL_ZERO_VIEW_PARAMS, 0, pc, f->n);
    for (i = 0; i < f->n && r == ACCEL_OK; ++i)
        r = accel__coll_copy(f->c, pc[i].ptr, (const float *)full[i].ptr + pc[i].offset, (size_t)pc[i].count * 4,
                             accel__fsdp_dir(f->gpool.kind, f->shard_kind));
    accel_host_free(f->acc, pc);
    if (r == ACCEL_OK) r = accel__fsdp_refresh_model(f);
    return r;
}

/* ----- sharded checkpoints (accel_zero_fsdp_state_save / _load_all) */
#define ACCEL__FSDP_STATE_MAGIC 0x33465341u /* "ASF3" */
typedef struct accel__fsdp_span {
    int64_t lo, hi;
    int file;
} accel__fsdp_span;
static int accel__fsdp_span_cmp(const void *a, const void *b) {
    const accel__fsdp_span *x = (const accel__fsdp_span *)a, *y = (const accel__fsdp_span *)b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Version 2's names block: u64 its length L, then per parameter u32 ndim, ndim u64 dims, u32 name length, the
   name and a NUL (8 + L bytes). */
static size_t accel__fsdp_names_bytes(const accel_zero_fsdp *f) {
    size_t b = 8;
    int i;
    for (i = 0; i < f->n; ++i) b += 4 + 8 * (size_t)f->full[i].ndim + 4 + strlen(f->full[i].name) + 1;
    return b;
}
/* A saved rank's header, shared by load_all (the whole file in memory) and merge (read from disk as far as
   needed): b holds the file's first `have` bytes, the file has `total`. Checks the magic, the version (1, or 2 with
   names) and the lengths; h->need is how many bytes the caller must hold before calling again (have < need: call
   again with more), h->data_at where the master values start (known once have >= need). */
typedef struct accel__fsdp_head {
    uint32_t ver, n, k;
    uint64_t need, data_at;
} accel__fsdp_head;
static accel_result accel__fsdp_state_head(accel *acc, const char *what, int q, const unsigned char *b, uint64_t have,
                                           uint64_t total, accel__fsdp_head *h) {
    uint64_t t;
    memset(h, 0, sizeof *h);
    if (!b || have < 16 || total < 16 || accel__get_u32(b) != ACCEL__FSDP_STATE_MAGIC ||
        (accel__get_u32(b + 4) != 1 && accel__get_u32(b + 4) != 2))
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%s: saved rank %d: not a ZeRO-3 shard state (%llu bytes)", what, q,
                           (unsigned long long)total);
    h->ver = accel__get_u32(b + 4);
    h->n = accel__get_u32(b + 8);
    h->k = accel__get_u32(b + 12);
    t = 16 + (uint64_t)h->n * 24;
    if (total < t + (h->ver == 2 ? 8 : 0))
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%s: saved rank %d's file is truncated", what, q);
    h->need = h->data_at = t;
    if (h->ver == 1) return ACCEL_OK;
    h->need = t + 8;
    h->data_at = 0;
    if (have < h->need) return ACCEL_OK;
    if (accel__get_u64(b + t) > total - t - 8)
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%s: saved rank %d's file is truncated (names)", what, q);
    h->need = h->data_at = t + 8 + accel__get_u64(b + t);
    return ACCEL_OK;
}
/* Version 2's names and shapes (b: the header, h complete) into out[0..n) (F32; names point into b; ptr NULL),
   each shape's product checked against the element count of the table. */
static accel_result accel__fsdp_state_names(accel *acc, const char *what, int q, const unsigned char *b,
                                            const accel__fsdp_head *h, accel_tensor *out) {
    uint64_t at = 16 + (uint64_t)h->n * 24 + 8, end = h->data_at;
    uint32_t i, d;
    if (h->ver != 2)
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%s: saved rank %d was written by an older accel (version 1: no "
                           "parameter names); load it into the model and save it again", what, q);
    for (i = 0; i < h->n; ++i) {
        uint64_t numel = accel__get_u64(b + 16 + (size_t)i * 8), prod = 1, len;
        accel_tensor *t = &out[i];
        memset(t, 0, sizeof *t);
        if (end - at < 4 || accel__get_u32(b + at) > ACCEL_MAX_DIMS || (end - at - 4) / 8 < accel__get_u32(b + at))
            return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%s: saved rank %d: parameter %u's shape is malformed", what,
                               q, i);
        t->ndim = (int)accel__get_u32(b + at);
        at += 4;
        for (d = 0; d < (uint32_t)t->ndim; ++d, at += 8) {
            uint64_t v = accel__get_u64(b + at);
            if (v > (uint64_t)INT64_MAX || (v && prod > (uint64_t)INT64_MAX / v))
                return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%s: saved rank %d: parameter %u's shape overflows", what,
                                   q, i);
            t->shape[d] = (int64_t)v;
            prod *= v;
        }
        if (prod != numel)
            return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%s: saved rank %d: parameter %u's shape has %llu elements, "
                               "its table %llu", what, q, i, (unsigned long long)prod, (unsigned long long)numel);
        if (end - at < 4 || (len = accel__get_u32(b + at)) >= end - at - 4 || b[at + 4 + len] != 0 ||
            memchr(b + at + 4, 0, (size_t)len) != NULL)
            return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%s: saved rank %d: parameter %u's name is malformed", what, q,
                               i);
        t->name = (const char *)(b + at + 4);
        t->dtype = ACCEL_F32;
        at += 4 + len + 1;
    }
    if (at != end)
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%s: saved rank %d: %llu stray bytes after the names", what, q,
                           (unsigned long long)(end - at));
    return ACCEL_OK;
}
/* The saved pieces tile every parameter exactly once (heads[q]: rank q's header; numels from heads[0], equal in
   all of them; names for messages); sp: count spans of scratch. */
static accel_result accel__fsdp_state_tiles(accel *acc, const char *what, const unsigned char *const *heads,
                                            int count, int n, const accel_tensor *names, accel__fsdp_span *sp) {
    accel_result r = ACCEL_OK;
    int i, q;
    for (i = 0; i < n && r == ACCEL_OK; ++i) {
        int ns = 0, t;
        int64_t next = 0, numel = (int64_t)accel__get_u64(heads[0] + 16 + (size_t)i * 8);
        for (q = 0; q < count; ++q) {
            const unsigned char *b = heads[q] + 16 + (size_t)n * 8 + (size_t)i * 16;
            accel__fsdp_span s;
            s.lo = (int64_t)accel__get_u64(b);
            s.hi = s.lo + (int64_t)accel__get_u64(b + 8);
            s.file = q;
            if (s.hi > s.lo) sp[ns++] = s;
        }
        qsort(sp, (size_t)ns, sizeof *sp, accel__fsdp_span_cmp);
        for (t = 0; t <= ns && r == ACCEL_OK; ++t) {
            int64_t lo = t < ns ? sp[t].lo : numel;
            if (lo != next)
                r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%s: parameter %d (%s): elements [%lld, %lld) are %s", what, i,
                                names && names[i].name ? names[i].name : "?", (long long)(lo < next ? lo : next),
                                (long long)(lo < next ? next : lo),
                                lo < next ? "in two saved ranks' files (the partitions do not match)"
                                          : "in no saved rank's file (a shard is missing)");
            if (t < ns) next = sp[t].hi;
        }
    }
    return r;
}
/* Checks the object and its state tensors (k per parameter, each the size of this rank's piece); *pc: the n
   pieces (owner_only as given), allocated here (the caller frees them). */
static accel_result accel__fsdp_state_need(accel_zero_fsdp_state *fs, const char *what, int owner_only, int *k,
                                           accel_tensor_piece **pc) {
    accel_zero_fsdp *f;
    accel_tensor_piece *p;
    accel_result r;
    int i;
    *pc = NULL;
    if (!fs || !fs->fsdp)
        return accel__fail(NULL, ACCEL_ERR_INVALID_ARGUMENT, __FILE__, __LINE__, "%s: NULL state or object", what);
    f = fs->fsdp;
    if (f->n < 1 || fs->m < 0 || (fs->m > 0 && !fs->state) || fs->m % f->n != 0)
        return ACCEL__FAIL(f->acc, ACCEL_ERR_INVALID_ARGUMENT,
                           "%s: %d state tensors for %d parameters (a multiple of them, param-major)", what, fs->m,
                           f->n);
    *k = fs->m / f->n;
    p = (accel_tensor_piece *)accel_host_alloc(f->acc, sizeof *p * (size_t)f->n);
    if (!p) return accel__fail_wrap(f->acc, ACCEL_ERR_OUT_OF_MEMORY, "%s", what);
    r = accel_zero_fsdp_pieces(f, ACCEL_ZERO_VIEW_PARAMS, 0, p, f->n);
    for (i = 0; r == ACCEL_OK && i < fs->m; ++i)
        if (accel_tensor_numel(&fs->state[i]) != p[i / *k].count || accel_dtype_size(fs->state[i].dtype) == 0 ||
            (p[i / *k].count > 0 && !fs->state[i].ptr))
            r = ACCEL__FAIL(f->acc, ACCEL_ERR_INVALID_ARGUMENT,
                            "%s: state tensor %d (%s) has %lld elements of %s, this rank's piece of parameter %d "
                            "has %lld", what, i, fs->state[i].name ? fs->state[i].name : "?",
                            (long long)accel_tensor_numel(&fs->state[i]),
                            accel_dtype_name(fs->state[i].dtype) ? accel_dtype_name(fs->state[i].dtype) : "invalid",
                            i / *k, (long long)p[i / *k].count);
    if (r == ACCEL_OK && owner_only && f->rrank > 0)
        for (i = 0; i < f->n; ++i) p[i].count = 0;
    if (r != ACCEL_OK) accel_host_free(f->acc, p);
    else *pc = p;
    return r;
}
/* accel_safetensors.h's implementation first: where a state tensor lives is asked as it asks it, load_all's
   messages print shapes as it does, and the merge below writes its layout (the shard plan, the index) */
#include "accel_safetensors.h"
/* Where a state tensor lives: the optimizer's memory, which is the device's, or pinned host memory when it steps on
   the host (accel_optim_desc.offload, as with cpu_offload) — asked per pointer, so an offloaded model with a device
   optimizer saves too. */
static int accel__fsdp_state_kind(const accel_zero_fsdp *f, const void *p) {
    return f->c->device_mem && accel__st_is_device_ptr(p) ? ACCEL__FSDP_DEVICE : ACCEL__FSDP_HOST;
}

ACCEL__DEF accel_result accel_zero_fsdp_state_save(void *state, void *buf, size_t cap, size_t *size) {
    accel_zero_fsdp_state *fs = (accel_zero_fsdp_state *)state;
    accel_zero_fsdp *f;
    accel_tensor_piece *pc = NULL;
    unsigned char *b = (unsigned char *)buf;
    size_t need, at;
    accel_result r;
    int k = 0, i;
    const char *what = "accel_zero_fsdp_state_save";
    if (!size) return accel__fail(NULL, ACCEL_ERR_INVALID_ARGUMENT, __FILE__, __LINE__, "%s: size is NULL", what);
    if ((r = accel__fsdp_state_need(fs, what, 1, &k, &pc)) != ACCEL_OK) return r;
    f = fs->fsdp;
    need = 16 + (size_t)f->n * 24 + accel__fsdp_names_bytes(f);
    for (i = 0; i < f->n; ++i) need += (size_t)pc[i].count * 4;
    for (i = 0; i < fs->m; ++i) need += 4 + (size_t)pc[i / k].count * accel_dtype_size(fs->state[i].dtype);
    *size = need;
    if (!buf || cap < need) {
        accel_host_free(f->acc, pc);
        return ACCEL_OK;
    }
    accel__put_u32(b, ACCEL__FSDP_STATE_MAGIC);
    accel__put_u32(b + 4, 2);
    accel__put_u32(b + 8, (uint32_t)f->n);
    accel__put_u32(b + 12, (uint32_t)k);
    at = 16;
    for (i = 0; i < f->n; ++i, at += 8) accel__put_u64(b + at, (uint64_t)accel_tensor_numel(&f->full[i]));
    for (i = 0; i < f->n; ++i, at += 16) {
        accel__put_u64(b + at, (uint64_t)pc[i].offset);
        accel__put_u64(b + at + 8, (uint64_t)pc[i].count);
    }
    /* version 2: the names and shapes, so that `accel ckpt merge` can write the model without the program */
    accel__put_u64(b + at, (uint64_t)(accel__fsdp_names_bytes(f) - 8));
    at += 8;
    for (i = 0; i < f->n; ++i) {
        size_t len = strlen(f->full[i].name);
        int d;
        accel__put_u32(b + at, (uint32_t)f->full[i].ndim);
        at += 4;
        for (d = 0; d < f->full[i].ndim; ++d, at += 8) accel__put_u64(b + at, (uint64_t)f->full[i].shape[d]);
        accel__put_u32(b + at, (uint32_t)len);
        memcpy(b + at + 4, f->full[i].name, len + 1);
        at += 4 + len + 1;
    }
    for (i = 0; i < f->n && r == ACCEL_OK; ++i) {
        r = accel__coll_copy(f->c, b + at, pc[i].ptr, (size_t)pc[i].count * 4,
                             accel__fsdp_dir(f->shard_kind, ACCEL__FSDP_HOST));
        at += (size_t)pc[i].count * 4;
    }
    for (i = 0; i < fs->m && r == ACCEL_OK; ++i) {
        size_t bytes = (size_t)pc[i / k].count * accel_dtype_size(fs->state[i].dtype);
        accel__put_u32(b + at, (uint32_t)fs->state[i].dtype);
        r = accel__coll_copy(f->c, b + at + 4, fs->state[i].ptr, bytes,
                             accel__fsdp_dir(accel__fsdp_state_kind(f, fs->state[i].ptr), ACCEL__FSDP_HOST));
        at += 4 + bytes;
    }
    accel_host_free(f->acc, pc);
    return r == ACCEL_OK ? ACCEL_OK : accel__fail_wrap(f->acc, r, "%s", what);
}

ACCEL__DEF accel_result accel_zero_fsdp_state_load_all(void *state, const void *const *bufs, const size_t *sizes,
                                                       int count) {
    accel_zero_fsdp_state *fs = (accel_zero_fsdp_state *)state;
    accel_zero_fsdp *f;
    accel *acc;
    accel_tensor_piece *pc = NULL;
    size_t *data = NULL; /* per file: n master offsets, then m state offsets (into its bytes) */
    accel__fsdp_span *sp = NULL;
    accel_tensor *nm = NULL; /* a version-2 file's names and shapes (each must be this model's) */
    accel_result r;
    int k = 0, q, i, j, w;
    const char *what = "accel_zero_fsdp_state_load_all";
    if ((r = accel__fsdp_state_need(fs, what, 0, &k, &pc)) != ACCEL_OK) return r;
    f = fs->fsdp;
    acc = f->acc;
    w = f->n + fs->m;
    if (count < 1 || !bufs || !sizes)
        r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: %d saved ranks", what, count);
    if (r == ACCEL_OK) {
        data = (size_t *)accel_host_alloc(acc, sizeof(size_t) * (size_t)w * (size_t)count);
        sp = (accel__fsdp_span *)accel_host_alloc(acc, sizeof *sp * (size_t)count);
        nm = (accel_tensor *)accel_host_alloc(acc, sizeof *nm * (size_t)f->n);
        if (!data || !sp || !nm) r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "%s", what);
    }
    /* 1. every saved rank's bytes: header, the same parameters, pieces in range, state dtypes, the exact size */
    for (q = 0; q < count && r == ACCEL_OK; ++q) {
        const unsigned char *b = (const unsigned char *)bufs[q];
        size_t n = sizes[q], at;
        accel__fsdp_head h;
        if ((r = accel__fsdp_state_head(acc, what, q, b, b ? n : 0, n, &h)) != ACCEL_OK) break;
        if ((int64_t)h.n != f->n || (int64_t)h.k != k) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_MISMATCH, "%s: saved rank %d has %u parameters with %u state tensors "
                            "each; this model has %d with %d", what, q, h.n, h.k, f->n, k);
            break;
        }
        if (h.ver == 2 && (r = accel__fsdp_state_names(acc, what, q, b, &h, nm)) != ACCEL_OK) break;
        /* version 2 names its parameters: another model with the same element counts is refused, not loaded */
        for (i = 0; h.ver == 2 && i < f->n && r == ACCEL_OK; ++i)
            if (strcmp(nm[i].name, f->full[i].name) || nm[i].ndim != f->full[i].ndim ||
                memcmp(nm[i].shape, f->full[i].shape, sizeof(int64_t) * (size_t)nm[i].ndim)) {
                char ss[96], sh[96];
                accel__st_shape_str(ss, sizeof ss, nm[i].ndim, nm[i].shape);
                accel__st_shape_str(sh, sizeof sh, f->full[i].ndim, f->full[i].shape);
                r = ACCEL__FAIL(acc, ACCEL_ERR_MISMATCH, "%s: saved rank %d: parameter %d is %.200s %s, here %.200s "
                                "%s (a different model)", what, q, i, nm[i].name, ss, f->full[i].name, sh);
            }
        if (r != ACCEL_OK) break;
        at = (size_t)h.data_at;
        for (i = 0; i < f->n && r == ACCEL_OK; ++i) {
            uint64_t numel = accel__get_u64(b + 16 + (size_t)i * 8);
            uint64_t off = accel__get_u64(b + 16 + (size_t)f->n * 8 + (size_t)i * 16);
            uint64_t cnt = accel__get_u64(b + 24 + (size_t)f->n * 8 + (size_t)i * 16);
            int64_t mine = accel_tensor_numel(&f->full[i]);
            if (numel != (uint64_t)mine)
                r = ACCEL__FAIL(acc, ACCEL_ERR_MISMATCH, "%s: saved rank %d: parameter %d (%s) has %llu elements, "
                                "here %lld (a different model)", what, q, i, f->full[i].name,
                                (unsigned long long)numel, (long long)mine);
            else if (off > numel || cnt > numel - off)
                r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%s: saved rank %d: piece [%llu, +%llu) of parameter %d "
                                "is outside its %llu elements", what, q, (unsigned long long)off,
                                (unsigned long long)cnt, i, (unsigned long long)numel);
            else if ((n - at) / 4 < cnt)
                r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%s: saved rank %d's file is truncated", what, q);
            else {
                data[(size_t)q * (size_t)w + (size_t)i] = at;
                at += (size_t)cnt * 4;
            }
        }
        for (j = 0; j < fs->m && r == ACCEL_OK; ++j) {
            uint64_t cnt = accel__get_u64(b + 24 + (size_t)f->n * 8 + (size_t)(j / k) * 16);
            size_t es = accel_dtype_size(fs->state[j].dtype);
            if (n - at < 4)
                r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%s: saved rank %d's file is truncated", what, q);
            else if (accel__get_u32(b + at) != (uint32_t)fs->state[j].dtype)
                r = ACCEL__FAIL(acc, ACCEL_ERR_MISMATCH, "%s: saved rank %d: state tensor %d was saved as %s, this "
                                "optimizer's is %s", what, q, j,
                                accel_dtype_name((accel_dtype)accel__get_u32(b + at))
                                    ? accel_dtype_name((accel_dtype)accel__get_u32(b + at)) : "invalid",
                                accel_dtype_name(fs->state[j].dtype));
            else if ((n - at - 4) / es < cnt)
                r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%s: saved rank %d's file is truncated", what, q);
            else {
                data[(size_t)q * (size_t)w + (size_t)f->n + (size_t)j] = at + 4;
                at += 4 + (size_t)cnt * es;
            }
        }
        if (r == ACCEL_OK && at != n)
            r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%s: saved rank %d's file has %zu bytes after its state", what, q,
                            n - at);
    }
    /* 2. the saved pieces tile every parameter exactly once */
    if (r == ACCEL_OK)
        r = accel__fsdp_state_tiles(acc, what, (const unsigned char *const *)bufs, count, f->n, f->full, sp);
    /* 3. this rank's pieces out of the files that hold them */
    for (i = 0; i < f->n && r == ACCEL_OK; ++i) {
        int64_t mlo = pc[i].offset, mhi = pc[i].offset + pc[i].count;
        for (q = 0; q < count && r == ACCEL_OK && mhi > mlo; ++q) {
            const unsigned char *b = (const unsigned char *)bufs[q];
            int64_t slo = (int64_t)accel__get_u64(b + 16 + (size_t)f->n * 8 + (size_t)i * 16);
            int64_t shi = slo + (int64_t)accel__get_u64(b + 24 + (size_t)f->n * 8 + (size_t)i * 16);
            int64_t lo = slo > mlo ? slo : mlo, hi = shi < mhi ? shi : mhi;
            if (hi <= lo) continue;
            r = accel__coll_copy(f->c, (float *)pc[i].ptr + (lo - mlo),
                                 b + data[(size_t)q * (size_t)w + (size_t)i] + (size_t)(lo - slo) * 4,
                                 (size_t)(hi - lo) * 4, accel__fsdp_dir(ACCEL__FSDP_HOST, f->shard_kind));
            for (j = i * k; j < (i + 1) * k && r == ACCEL_OK; ++j) {
                size_t es = accel_dtype_size(fs->state[j].dtype);
                r = accel__coll_copy(f->c, (unsigned char *)fs->state[j].ptr + (size_t)(lo - mlo) * es,
                                     b + data[(size_t)q * (size_t)w + (size_t)f->n + (size_t)j] +
                                         (size_t)(lo - slo) * es,
                                     (size_t)(hi - lo) * es,
                                     accel__fsdp_dir(ACCEL__FSDP_HOST, accel__fsdp_state_kind(f, fs->state[j].ptr)));
            }
        }
    }
    if (r == ACCEL_OK) r = accel__fsdp_refresh_model(f);
    accel_host_free(acc, pc);
    accel_host_free(acc, data);
    accel_host_free(acc, sp);
    accel_host_free(acc, nm);
    return r;
}


/* ----- `accel ckpt merge`: saved ranks' files → a consolidated safetensors model (accel_zero_fsdp_merge) */

typedef struct accel__fsdp_mfile {
    int fd;
    uint64_t size;
    unsigned char *hb;  /* the header: data_at bytes */
    accel__fsdp_head h;
    accel_tensor *nm;   /* n: names (into hb) and shapes */
    uint64_t *voff;     /* n: where each parameter's piece of master values starts in the file */
} accel__fsdp_mfile;

#define ACCEL__FSDP_MERGE_BUF ((size_t)1 << 20)

/* Reads and checks file q's header, its names and the layout of everything behind it (the optimizer state is not
   merged, but its dtypes and lengths are checked, so the file's size must be exact). */
static accel_result accel__fsdp_merge_open(accel *acc, const char *what, const char *path, int q,
                                           accel__fsdp_mfile *m, uint64_t *mem) {
    struct stat st;
    uint64_t have = 0, need = 16, at;
    accel_result r = accel__open_regular(acc, path, &st, &m->fd);
    uint32_t i, j;
    if (r != ACCEL_OK) return r;
    m->size = (uint64_t)st.st_size;
    while (have < need) {
        unsigned char *nb;
        if (need > m->size)
            return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%s: saved rank %d: not a ZeRO-3 shard state (%llu bytes)",
                               what, q, (unsigned long long)m->size);
        nb = (unsigned char *)accel_host_alloc(acc, (size_t)need);
        if (!nb) return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "%s: header of %.300s", what, path);
        if (have) memcpy(nb, m->hb, (size_t)have);
        accel_host_free(acc, m->hb);
        m->hb = nb;
        if (accel__pread_all(m->fd, m->hb + have, (size_t)(need - have), have) != 0)
            return accel__io_fail(acc, "cannot read", path);
        have = need;
        if ((r = accel__fsdp_state_head(acc, what, q, m->hb, have, m->size, &m->h)) != ACCEL_OK) return r;
        need = m->h.need;
    }
    if (m->h.n < 1) return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%s: saved rank %d holds no parameters", what, q);
    m->nm = (accel_tensor *)accel_host_alloc(acc, sizeof *m->nm * (size_t)m->h.n);
    m->voff = (uint64_t *)accel_host_alloc(acc, sizeof *m->voff * (size_t)m->h.n);
    if (!m->nm || !m->voff) return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "%s", what);
    *mem += have + (sizeof *m->nm + sizeof *m->voff) * (size_t)m->h.n;
    if ((r = accel__fsdp_state_names(acc, what, q, m->hb, &m->h, m->nm)) != ACCEL_OK) return r;
    at = m->h.data_at;
    for (i = 0; i < m->h.n; ++i) {
        uint64_t numel = accel__get_u64(m->hb + 16 + (size_t)i * 8);
        uint64_t off = accel__get_u64(m->hb + 16 + (size_t)m->h.n * 8 + (size_t)i * 16);
        uint64_t cnt = accel__get_u64(m->hb + 24 + (size_t)m->h.n * 8 + (size_t)i * 16);
        if (off > numel || cnt > numel - off)
            return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%s: saved rank %d: piece [%llu, +%llu) of parameter %u (%s) "
                               "is outside its %llu elements", what, q, (unsigned long long)off,
                               (unsigned long long)cnt, i, m->nm[i].name, (unsigned long long)numel);
        if ((m->size - at) / 4 < cnt)
            return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%s: saved rank %d's file is truncated", what, q);
        m->voff[i] = at;
        at += cnt * 4;
    }
    for (j = 0; j < m->h.n * m->h.k; ++j) {
        uint64_t cnt = accel__get_u64(m->hb + 24 + (size_t)m->h.n * 8 + (size_t)(j / m->h.k) * 16);
        unsigned char d4[4];
        accel_dtype dt;
        size_t es;
        if (m->size - at < 4 || accel__pread_all(m->fd, d4, 4, at) != 0)
            return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%s: saved rank %d's file is truncated", what, q);
        dt = (accel_dtype)accel__get_u32(d4);
        es = accel_dtype_name(dt) ? accel_dtype_size(dt) : 0;
        if (es == 0)
            return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%s: saved rank %d: state tensor %u has an invalid dtype %u",
                               what, q, j, accel__get_u32(d4));
        if ((m->size - at - 4) / es < cnt)
            return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%s: saved rank %d's file is truncated", what, q);
        at += 4 + cnt * es;
    }
    if (at != m->size)
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%s: saved rank %d's file has %llu bytes after its state", what, q,
                           (unsigned long long)(m->size - at));
    return ACCEL_OK;
}

/* The same model in file q as in file 0: parameter count, state tensors per parameter, names and shapes. */
static accel_result accel__fsdp_merge_same(accel *acc, const char *what, int q, const accel__fsdp_mfile *m0,
                                           const accel__fsdp_mfile *m) {
    uint32_t i;
    if (m->h.n != m0->h.n || m->h.k != m0->h.k)
        return ACCEL__FAIL(acc, ACCEL_ERR_MISMATCH, "%s: saved rank %d has %u parameters with %u state tensors "
                           "each, saved rank 0 %u with %u (not one checkpoint)", what, q, m->h.n, m->h.k, m0->h.n,
                           m0->h.k);
    for (i = 0; i < m->h.n; ++i)
        if (strcmp(m->nm[i].name, m0->nm[i].name) || m->nm[i].ndim != m0->nm[i].ndim ||
            memcmp(m->nm[i].shape, m0->nm[i].shape, sizeof(int64_t) * (size_t)m->nm[i].ndim))
            return ACCEL__FAIL(acc, ACCEL_ERR_MISMATCH, "%s: saved rank %d's parameter %u (%.200s) differs from "
                               "saved rank 0's (%.200s) in name or shape (not one checkpoint)", what, q, i,
                               m->nm[i].name, m0->nm[i].name);
    return ACCEL_OK;
}

/* Shard file s of the plan: its tensors' header (the writer's layout), then each tensor's pieces in element order,
   file to file through buf. Written to a temporary and renamed (accel__atomic_open / _commit). */
static accel_result accel__fsdp_merge_write(accel *acc, const char *what, const char *path, accel__fsdp_mfile *mf,
                                            int count, const accel_tensor *sub, const int *idx, int m,
                                            accel__fsdp_span *sp, unsigned char *buf, uint64_t *mem) {
    const char *meta[2] = {"format", "pt"};
    accel__st_item *items = NULL;
    accel__sb hb;
    uint64_t dbytes = 0;
    char tmp[4200];
    int fd = -1, x, q, t;
    accel_result r = accel__st_layout(acc, path, sub, m, meta, 1, &hb, &items, &dbytes);
    if (r != ACCEL_OK) return r;
    *mem += hb.n + sizeof *items * (size_t)m;
    r = accel__atomic_open(acc, path, tmp, sizeof tmp, &fd);
    if (r == ACCEL_OK && accel__write_all(fd, hb.p, hb.n) != 0) r = accel__io_fail(acc, "cannot write", tmp);
    for (x = 0; x < m && r == ACCEL_OK; ++x) {
        int i = idx[items[x].t - sub], k = 0;
        uint32_t n = mf[0].h.n;
        for (q = 0; q < count; ++q) {
            const unsigned char *b = mf[q].hb + 16 + (size_t)n * 8 + (size_t)i * 16;
            sp[k].lo = (int64_t)accel__get_u64(b);
            sp[k].hi = sp[k].lo + (int64_t)accel__get_u64(b + 8);
            sp[k].file = q;
            if (sp[k].hi > sp[k].lo) ++k;
        }
        qsort(sp, (size_t)k, sizeof *sp, accel__fsdp_span_cmp);
        for (t = 0; t < k && r == ACCEL_OK; ++t) {
            uint64_t left = (uint64_t)(sp[t].hi - sp[t].lo) * 4, at = mf[sp[t].file].voff[i];
            while (left > 0 && r == ACCEL_OK) {
                size_t len = left < ACCEL__FSDP_MERGE_BUF ? (size_t)left : ACCEL__FSDP_MERGE_BUF;
                if (accel__pread_all(mf[sp[t].file].fd, buf, len, at) != 0)
                    r = ACCEL__FAIL(acc, ACCEL_ERR_IO, "%s: cannot read saved rank %d's values", what, sp[t].file);
                else if (accel__write_all(fd, buf, len) != 0)
                    r = accel__io_fail(acc, "cannot write", tmp);
                at += len;
                left -= len;
            }
        }
    }
    if (fd >= 0) { /* publish, or remove the temporary (r is the cause) */
        accel_result c = accel__atomic_commit(acc, fd, tmp, path, r == ACCEL_OK);
        if (r == ACCEL_OK) r = c;
    }
    accel__sb_free(&hb);
    accel_host_free(acc, items);
    return r;
}

ACCEL__DEF accel_result accel_zero_fsdp_merge(accel *acc, const char *const *files, int count, const char *out_dir,
                                              uint64_t max_shard_size, accel_zero_fsdp_merge_info *info) {
    const char *what = "accel_zero_fsdp_merge";
    accel__fsdp_mfile *mf = NULL;
    accel_tensor *sub = NULL;
    const unsigned char **heads = NULL;
    accel__fsdp_span *sp = NULL;
    uint64_t *sizes = NULL, *shard_bytes = NULL, mem = 0, total = 0, max = max_shard_size ? max_shard_size : UINT64_MAX;
    int *shard_of = NULL, *idx = NULL, ns = 0, written = 0, q, s, n = 0, i;
    unsigned char *buf = NULL;
    char path[4200], fname[64];
    accel_result r = ACCEL_OK;
    DIR *d;
    struct dirent *de;
    if (info) memset(info, 0, sizeof *info);
    if (count < 1 || !files || !out_dir)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: %d files, out_dir %s", what, count,
                           out_dir ? out_dir : "NULL");
    for (q = 0; q < count; ++q)
        if (!files[q]) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: file %d is NULL", what, q);
    /* out_dir must not hold a model: a merge never mixes with (or silently replaces) another one */
    d = opendir(out_dir);
    if (d) {
        while ((de = readdir(d)) != NULL && r == ACCEL_OK)
            if (!strcmp(de->d_name, "model.safetensors") || !strcmp(de->d_name, "model.safetensors.index.json") ||
                accel__st_is_shard_name(de->d_name))
                r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: %.300s already holds %.200s (merge into a "
                                "new or empty directory)", what, out_dir, de->d_name);
        closedir(d);
        if (r != ACCEL_OK) return r;
    }
    mf = (accel__fsdp_mfile *)accel_host_alloc(acc, sizeof *mf * (size_t)count);
    heads = (const unsigned char **)accel_host_alloc(acc, sizeof *heads * (size_t)count);
    sp = (accel__fsdp_span *)accel_host_alloc(acc, sizeof *sp * (size_t)count);
    if (!mf || !heads || !sp) { r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "%s", what); goto done; }
    mem += (sizeof *mf + sizeof *heads + sizeof *sp) * (size_t)count;
    memset(mf, 0, sizeof *mf * (size_t)count);
    for (q = 0; q < count; ++q) mf[q].fd = -1;
    /* 1. every file's header and layout, the same model in each, the pieces tiling every parameter once */
    for (q = 0; q < count && r == ACCEL_OK; ++q) {
        r = accel__fsdp_merge_open(acc, what, files[q], q, &mf[q], &mem);
        if (r == ACCEL_OK && q > 0) r = accel__fsdp_merge_same(acc, what, q, &mf[0], &mf[q]);
        heads[q] = mf[q].hb;
    }
    if (r != ACCEL_OK) goto done;
    n = (int)mf[0].h.n;
    if (n < 0 || (uint32_t)n != mf[0].h.n) {
        r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%s: %u parameters", what, mf[0].h.n);
        goto done;
    }
    if ((r = accel__fsdp_state_tiles(acc, what, heads, count, n, mf[0].nm, sp)) != ACCEL_OK) goto done;
    for (i = 0; i < n; ++i) mf[0].nm[i].ptr = mf[0].hb; /* the writer's checks want memory; the values stream */
    if ((r = accel__st_check_tensors(acc, mf[0].nm, n, what)) != ACCEL_OK) goto done;
    /* 2. the plan (save_model's), then each output file */
    sizes = (uint64_t *)accel_host_alloc(acc, sizeof *sizes * (size_t)n);
    shard_bytes = (uint64_t *)accel_host_alloc(acc, sizeof *shard_bytes * (size_t)n);
    shard_of = (int *)accel_host_alloc(acc, sizeof *shard_of * (size_t)n);
    idx = (int *)accel_host_alloc(acc, sizeof *idx * (size_t)n);
    sub = (accel_tensor *)accel_host_alloc(acc, sizeof *sub * (size_t)n);
    buf = (unsigned char *)accel_host_alloc(acc, ACCEL__FSDP_MERGE_BUF);
    if (!sizes || !shard_bytes || !shard_of || !idx || !sub || !buf) {
        r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "%s", what);
        goto done;
    }
    mem += (sizeof *sizes * 2 + sizeof *shard_of * 2 + sizeof *sub) * (size_t)n + ACCEL__FSDP_MERGE_BUF;
    for (i = 0; i < n; ++i) {
        sizes[i] = (uint64_t)accel_tensor_numel(&mf[0].nm[i]) * 4;
        total += sizes[i];
    }
    if ((r = accel_st_plan_shards(acc, sizes, n, max, shard_of, shard_bytes, &ns)) != ACCEL_OK) goto done;
    if (accel__mkdir_p(out_dir, NULL, 0) != 0) {
        r = accel__io_fail(acc, "cannot create directory", out_dir);
        goto done;
    }
    for (s = 0; s < ns && r == ACCEL_OK; ++s) {
        int m = 0;
        for (i = 0; i < n; ++i)
            if (shard_of[i] == s) { idx[m] = i; sub[m++] = mf[0].nm[i]; }
        accel_st_shard_name(s, ns, fname, sizeof fname);
        accel__fmt(path, sizeof path, "%s/%s", out_dir, fname);
        r = accel__fsdp_merge_write(acc, what, path, mf, count, sub, idx, m, sp, buf, &mem);
        if (r == ACCEL_OK) written = s + 1;
    }
    if (r == ACCEL_OK && ns > 1) {
        accel__sb b;
        accel__sb_init(&b, acc);
        accel__st_index_json(&b, mf[0].nm, n, shard_of, ns, total);
        accel__fmt(path, sizeof path, "%s/model.safetensors.index.json", out_dir);
        if (b.oom) r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "%.300s", path);
        else r = accel__write_file(acc, path, b.p, b.n, 1);
        mem += b.cap;
        accel__sb_free(&b);
    }
    if (r == ACCEL_OK && accel__fsync_dir(out_dir) != 0) r = accel__io_fail(acc, "cannot fsync directory", out_dir);
    if (r != ACCEL_OK) /* nothing half-applied: the files this call published go again */
        for (s = 0; s < written; ++s) {
            accel_st_shard_name(s, ns, fname, sizeof fname);
            accel__fmt(path, sizeof path, "%s/%s", out_dir, fname);
            (void)unlink(path);
        }
    if (r == ACCEL_OK && info) {
        info->saved_ranks = count;
        info->tensors = n;
        info->files = ns;
        info->bytes = total;
        info->memory = mem;
    }
done:
    for (q = 0; mf && q < count; ++q) {
        if (mf[q].fd >= 0) close(mf[q].fd);
        accel_host_free(acc, mf[q].hb);
        accel_host_free(acc, mf[q].nm);
        accel_host_free(acc, mf[q].voff);
    }
    accel_host_free(acc, mf);
    accel_host_free(acc, heads);
    accel_host_free(acc, sp);
    accel_host_free(acc, sizes);
    accel_host_free(acc, shard_bytes);
    accel_host_free(acc, shard_of);
    accel_host_free(acc, idx);
    accel_host_free(acc, sub);
    accel_host_free(acc, buf);
    return r;
}

#endif /* ACCEL_IMPLEMENTATION && !ACCEL__ZERO_IMPL_DONE */

/* accel is released under the MIT licence. Copyright (c) 2026 the accel authors. */
