/* accel_collectives.h — collectives for accel: one API over NONE / MPI / NCCL, Accelerate's gather/reduce/pad/object
   helpers, asynchronous handles, a DDP-style bucketed gradient reducer, ZeRO-1/2 optimizer-state sharding, NCCL
   bootstrap, timeouts and debug checks.

   Depends only on accel.h. One translation unit defines ACCEL_IMPLEMENTATION before including it (compile that TU
   with nvcc to get device buffers, CUDA-aware MPI and NCCL; with a C compiler only host buffers work).

   USAGE
       accel_coll *coll;
       accel_coll_desc cd = {0};        // zero = defaults: backend, timeout, debug from acc (C++: accel_coll_desc cd = {};)
       if (accel_coll_create(&acc, &cd, &coll) != ACCEL_OK) fail(accel_last_error(&acc));
       accel_coll_all_reduce(coll, loss, loss, 1, ACCEL_F32, ACCEL_COLL_AVG);   // in place: send == recv; sum, then / P
       accel_coll_all_gather(coll, preds, all_preds, n, ACCEL_I64);             // equal sizes; gather_rows for ragged
       // DDP-style gradient sync: register once, then every step
       accel_tensor grads[NPARAMS];     // name, ptr, dtype (F64/F32/F16/BF16), shape: one per gradient buffer
       accel_coll_reducer *red;
       accel_coll_reducer_create(coll, NULL, &red);      // NULL: DDP's defaults (1 MiB first bucket, 25 MiB, average)
       accel_coll_reducer_add(red, grads, NPARAMS);      // grad i of the list is index i (later calls continue)
       ... backward: as soon as grad i is final:  accel_coll_grad_ready(red, i);   // launches every full bucket
       accel_coll_reducer_wait(red);    // every bucket reduced and unpacked; no-op unless accel_should_reduce(&acc)
                                        // (a sync step, or sync_each_batch with several processes)
       accel_coll_reducer_destroy(red);
       accel_coll_destroy(coll);

   BACKENDS (accel_coll_desc.backend; ACCEL_COLL_BACKEND_AUTO = 0: NCCL when the group has > 1 process, the buffers
   are device memory and the TU was built by nvcc with ACCEL_WITH_NCCL; else NONE for one process; else MPI — an
   error without MPI)
     NONE  one process: every op gives the correct local result (copies; AVG divides by 1).
     MPI   host buffers. Device buffers (acc.device >= 0, nvcc TU) go straight to MPI when it is CUDA-aware
           (MPIX_Query_cuda_support / MPIX_GPU_query_support, or ACCEL_CUDA_AWARE_MPI=0|1), otherwise through pinned
           host staging (acc's pinned allocator). F16/BF16 reductions use user-defined MPI ops that compute in float
           and round to nearest even (accel.h's codec: a NaN result is 0x7FFF).
     NCCL  device buffers, enqueued on acc.stream (async variants on a private comm stream). Non-blocking communicator
           (config.blocking = 0); errors and deadlines poll ncclCommGetAsyncError and end in ncclCommAbort. AVG is
           ncclSum followed by a division kernel (ncclAvg would scale before the sum). Bootstrap: rank 0's
           ncclUniqueId reaches the others through ACCEL_NCCL_INIT=host|mpi|tcp|file — default host (accel.h's host
           process group, MPI or torchrun's TCP store) when the context spans acc's group and it has one, else mpi
           (the context's own communicator, desc.mpi_comm), else tcp (rank 0 serves it at MASTER_ADDR:MASTER_PORT)
           when MASTER_ADDR is set, else file (ACCEL_NCCL_INIT_FILE on a shared filesystem).
   Buffers are in acc's memory (device when acc.device >= 0) unless desc.host_buffers. Object and shape helpers use
   host memory for objects and acc's memory for tensors. Staging and scratch buffers come from acc's device and
   pinned allocators.

   THE HOST PROCESS GROUP
     When accel has no host process group — several processes without MPI and without torchrun's TCP store, e.g. an
     explicit desc.num_processes or srun without an MPI plugin — a context with the NCCL backend over the whole group
     becomes it: accel.h's host collectives (accel_wait_for_everyone, accel_host_*, the agreement checks amp, ckpt,
     data and trackers make) then run through this context with their deadline, and accel_host_group_name(&acc) says
     "nccl". accel_coll_destroy removes it (host collectives then fail with ACCEL_ERR_UNSUPPORTED again): keep the
     context until the end of training. A group the core already has (MPI, the TCP store) is never replaced.

   OPTIONS (accel_coll_desc, zero = default)
     backend       see BACKENDS.
     mpi_comm      const MPI_Comm * to use (e.g. from MPI_Comm_split, for a process mesh); NULL = acc's group. dup'ed.
     host_buffers  nonzero: buffers are host memory even when acc.device >= 0 (then MPI, never NCCL).
     timeout_ms    deadline of every collective (0 → acc.desc.collective_timeout_ms, Accelerate's 1800 s). A peer that
                   never arrives gives ACCEL_ERR_TIMEOUT instead of a hang; the context is then unusable (every
                   later call fails fast) — destroy it and stop, as torch's watchdog does.
     no_watchdog   0 (default): blocking MPI ops run as MPI_I* + polling with the deadline. An all-reduce of host
                   memory (or staged device memory) runs on point-to-point messages + MPI_Reduce_local instead of
                   MPI_Iallreduce, whose libnbc forms ran at 0.63-0.87x the blocking call: on 2 ranks a ring from
                   64 KiB and one exchange below (sums bitwise MPI's); on 3-64 ranks a direct reduce-scatter +
                   all-gather (one round up to the eager limit) in which every element is the rank-order sum
                   (x0 + x1) + x2 + ... — the same bits whatever the buffer's length or the element's position, so a
                   tensor summed in a bucket equals the tensor summed alone (MPI's own 3+-rank algorithms give no
                   such order). The ranks always hold the same bits. Out of place, the send buffer is read where it
                   is (no copy into recv first: 1.2-1.7x MPI_Allreduce, which copies). From 8 MiB the 2-rank ring
                   reduces in 256 KiB segments as they arrive. Scratch: about the buffer's size on 3+ ranks, half
                   of it on 2 (512 KiB from 8 MiB); one buffer is kept for the next call. More than 64 ranks:
                   MPI_Iallreduce;
                   nonzero: plain blocking MPI calls (no deadline, the MPI library's own algorithms). Async ops always
                   have the deadline.
     debug         accel_toggle; ACCEL_DEFAULT → acc.debug (ACCELERATE_DEBUG_MODE). When on, before each collective
                   every rank's (op, dtype, count, root) are all-gathered; a difference fails on every rank with
                   ACCEL_ERR_MISMATCH listing them.
     cuda_aware_mpi  accel_toggle; ACCEL_DEFAULT → ACCEL_CUDA_AWARE_MPI, else the MPI library's answer (BACKENDS).

   GRADIENT REDUCER (accel_coll_reducer_desc, zero = default)
     bucket_cap_mb, first_bucket_mb  DDP's 25 and 1 MiB.
     no_average    nonzero: the gradients are summed, not averaged.
     flat          accel_toggle; ACCEL_DEFAULT: one in-place all-reduce when the gradients (in registration order)
                   are one contiguous buffer of one dtype on every rank, else buckets; ACCEL_OFF: always buckets;
                   ACCEL_ON: require the contiguous buffer (error otherwise).
     After a failed reduction (ACCEL_ERR_TIMEOUT, a dead peer) the gradients are not a valid step: a packed bucket
     unpacks nothing (its gradients keep this rank's values), but whatever is all-reduced in place — flat mode, and
     host gradients >= 1 MiB on MPI (below) — may hold partial sums, with nothing to restore them from. Do not apply
     the step; the context refuses further work anyway (timeout_ms).
     DDP's bucketing: reverse registration order, one bucket list per dtype, the first bucket closes at
     first_bucket_mb and the others at bucket_cap_mb (a bucket closes at the first gradient that reaches the cap);
     buckets launch strictly in bucket order on every rank. Device gradients are packed into flat staging buffers on
     acc.stream (a scaling kernel when averaging, else D2D copies). On MPI with host memory, gradients >= 1 MiB are all-reduced in place (in bucket order) instead of
     being copied in and out, and at most 2 buckets are in flight (measured faster on CPUs). MPI moves a nonblocking
     operation only inside MPI calls, so every grad_ready also tests the buckets in flight (one MPI_Test each, never
     waits) and unpacks finished ones: communication advances between layers of backward. There is no progress
     thread (accel initializes MPI with MPI_THREAD_FUNNELED), so a rank whose core is busy with backward still pays
     the copies of shared-memory MPI on that core; bench_coll's overlap part measures both cases.
     Averaging order — DDP's, not reduce("mean")'s: every rank's gradient is multiplied by 1/P, rounded to the compute
     type (double for F64, float for F32/F16/BF16), while it is packed into its bucket (in place for gradients reduced
     where they are), and the buckets are all-reduced with SUM. That is what torch's Reducer does with DDP's default
     gradient_as_bucket_view=False (it copies grad * (1.0 / world_size) into the bucket), so where the summation order
     matches (always for P <= 2) the result is PyTorch's bit for bit; the tests compare with torch's DDP. (With
     gradient_as_bucket_view=True, torch divides the bucket instead from its second step on.) accel_coll_all_reduce
     with ACCEL_COLL_AVG and accel_coll_reduce_tensor(..., "mean") keep Accelerate's reduce("mean") order: the sum,
     then a division by P (docs/semantics.md §7). The orders can differ in the last bit when P is not a power of two.

   JOIN — uneven inputs (Accelerate's join_uneven_inputs = torch's Join with DDP's join hook)
       accel_coll_reducer_join_begin(red, NULL);        // collective; finalizes the reducer (register first)
       while (accel_data_shard_next(&sh, idx, &n) == ACCEL_OK && n > 0) { ...; accel_coll_reducer_wait(red); ... }
       accel_coll_reducer_join_end(red, params, NPARAMS); // out of batches: shadow the others, then sync params
     For loaders with even_batches off (no_even_batches), where ranks run out of batches at different steps. In join
     mode every reducing step (accel_should_reduce) starts with one round: an 8-byte all-gather in which each rank
     says whether it reduces (its first grad_ready/wait of the step) or has joined (join_end). Let A be the ranks that
     reduce in that step and D = the group size P (default: DDP's divide_by_initial_world_size=True) or |A|
     (accel_coll_join_desc.no_divide_by_initial_world_size). Then:
       - a rank in A ends the step with  g_i = sum over q in A of fl(g_q,i * fl(1/D))  (each rank's gradient
         pre-scaled in its compute type, then summed by the backend, as torch's Reducer with div_factor D); with
         no_average, the plain sum over A. accel_coll_reducer_join_active(red) says |A|;
       - a rank in join_end issues the same all-reduces (same buckets, order, counts) with zeros; its own gradient
         buffers are not touched and its parameters not updated;
       - when a round finds A empty every rank leaves join_end; the highest-ranked of the ranks that joined last (those
         that shadowed no step; DDP's authoritative rank) broadcasts the n params of join_end to every rank (DDP's
         _sync_final_model). Optimizer state and anything else stay per rank, as in DDP.
     Steps that do not reduce (accumulation) have no round: joined ranks shadow reductions only. A rank that neither
     reduces nor joins (dead, stuck) makes the others' round end in ACCEL_ERR_TIMEOUT at the context's deadline; a
     rank in any other collective of the context makes the round fail with ACCEL_ERR_MISMATCH. join_end with bad
     params still shadows, then fails every rank before the broadcast. Accelerate enables Join only when
     even_batches is off; with even batches every rank runs out at the same step and join_end costs one round.

   PROCESS MESH (Accelerate's ParallelismConfig + the DeviceMesh it builds)
       accel_coll_mesh *mesh;
       accel_coll_mesh_desc md = {0};
       md.dp_shard_size = 2; md.tp_size = 2;            // 4 processes; 0 = PARALLELISM_CONFIG_*_SIZE or 1
       accel_coll_mesh_create(world, &md, &mesh);        // collective over world's group
       accel_coll *dp = accel_coll_mesh_comm(mesh, ACCEL_COLL_MESH_DP), *tp = accel_coll_mesh_comm(mesh, ACCEL_COLL_MESH_TP);
       accel_coll_reducer_create(dp, NULL, &red);        // gradients averaged over the data-parallel group
       accel_coll_all_reduce(tp, part, part, n, ACCEL_F32, ACCEL_COLL_SUM); // a row-parallel layer's partial sums
       accel_coll_mesh_destroy(mesh);                    // before world
     Dimensions in mesh order pp, dp_replicate, dp_shard, cp, tp (Accelerate's order with pipeline stages outermost,
     as torchtitan): rank = (((pp*R + dp_replicate)*S + dp_shard)*C + cp)*T + tp, so tp peers are consecutive ranks.
     Groups: one per dimension and Accelerate's flattened dp (dp_replicate x dp_shard), dp_shard_cp and dp_cp; a group
     holds the ranks whose other coordinates equal this rank's, and this rank's rank in it is its coordinate along the
     group (row-major over the group's dimensions, torch's _flatten). Every group is a full accel_coll (every op,
     async, the reducer, join) with the parent's backend, buffers, timeout, debug and CUDA-aware settings; a group of
     one process is a NONE context. MPI: MPI_Comm_split of the parent's communicator; NCCL: ncclCommSplit of the
     parent's (NCCL >= 2.18; before, a fresh ncclCommInitRankConfig whose unique id travels in an all-gather over the
     parent). Creation is collective over the parent: the sizes are checked on every rank (negative, an environment
     value < 1 or not a number, a product != the parent's size) and then compared across ranks (accel.h's agreement:
     a rank with another mesh fails every rank with ACCEL_ERR_MISMATCH naming the dimension and each rank's value;
     a rank with a bad desc fails every rank, the others with ACCEL_ERR_REMOTE). Only then are the communicators
     split (MPI_Comm_split itself blocks without a deadline: every rank reached it after agreeing). Every size
     0 on a group of P > 1: dp_replicate = P (Accelerate's plain DDP). Shard the data by the dp group (accel_data.h,
     PROCESS MESH). Differences from Accelerate: no tp_handler/cp_handler (accel does no model math); Accelerate's
     refusal of tp/cp > 1 with dp_replicate > 1 and dp_shard == 1 (an FSDP2 composition limit) is not made — the mesh
     is only communicators; pp is an extra dimension (ACCEL_PP_SIZE).

   ZeRO-1/2 (optimizer-state sharding: DeepSpeed's stages 1 and 2, FSDP's SHARD_GRAD_OP; communication only — the
   update is accel_optim.h's, run over this rank's shard views, see its DESIGN FOR ZeRO)
       accel_coll_zero_desc zd = {0};
       zd.stage = 2; zd.params = params; zd.grads = grads; zd.n = N;   // the whole lists, the same on every rank
       accel_coll_zero *z;
       accel_coll_zero_create(coll, &zd, &z);                          // collective: partition + agreement
       accel_tensor vp[N], vg[N], vm[N];                                // this rank's shard: one view per parameter
       accel_coll_zero_views(z, params, N, vp);
       accel_coll_zero_views(z, model, N, vm);                          // BF16/F16 model copies (optional)
       accel_coll_zero_grad_views(z, vg, N);
       od.params = vp; od.grads = vg; od.model = vm; od.nparams = N;    // the unsharded groups still apply
       od.index_offset = (uint64_t)accel_coll_zero_partition(z)->begin; // stochastic rounding as unsharded
       accel_optim_create(&acc, &od, &opt);                              // moments: ceil(N/P) elements per rank
       each micro-batch: backward, accel_coll_zero_grad_ready(z, i) as gradient i is final, accel_coll_zero_wait(z);
       on a sync step: accel_optim_step(opt, NULL); accel_coll_zero_gather(z, params, N); and (z, model, N)
     Partition: the list flattened in order (N elements), padded to P*S with S = ceil(N/P); rank r owns the
     contiguous [r*S, min((r+1)*S, N)) (the padding is never stored; the last ranks may own fewer or no elements).
     Views keep the list's indices (a parameter outside the shard is an empty view), so parameter groups, state keys
     ("state.<i>.exp_avg") and step counts are those of the unsharded optimizer.
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
     Results: every element's update is the unsharded one, so ZeRO-1 equals the unsharded run (reducer + one
     optimizer over the whole list) bit for bit; ZeRO-2 too where the reduce sums in the all-reduce's order (always
     at P <= 2; Open MPI on one node at 3 and 4 in the tests), else within rounding (<= 1e-6 relative after 50 steps).
     Accumulation: as the reducer, grad_ready/wait do nothing unless accel_should_reduce(acc); micro-batches
     accumulate in the full local gradients and the sync step reduces (DeepSpeed reduces every micro-batch).
     Checkpoints, sharded (each rank writes only its shard, loadable on any number of processes):
       accel_coll_zero_state zs = {z, moments, nmoments};              // accel_optim_state_tensors(opt, ...)
       accel_ckpt_register_sharded(ck, "zero_state", accel_coll_zero_state_save, accel_coll_zero_state_load_all, &zs);
     writes zero_state_<rank>.bin on every rank (the partition recorded: size, rank, range, parameter offsets);
     load_state hands every saved rank's bytes to load_all, which checks them all (same parameter list, dtypes, each
     file its rank's partition) and copies the pieces of this rank's new shard. Plus the step counts through
     accel_optim_shard_state (below).
     Checkpoints, consolidated (any number of processes; interop): accel_coll_zero_export gathers the shard moments
     (accel_optim_state_tensors) into full-size tensors named by the same keys → accel_ckpt_register_optimizer;
     the step counts and hyperparameters go through accel_ckpt_register(ck, "optim_state",
     accel_optim_shard_state_save, accel_optim_shard_state_load, &ss) with ss = {opt, params}; after
     accel_ckpt_load_state on another P, accel_coll_zero_import copies this rank's part back. The full-size buffers
     are needed around save/load only.
     CUDA: the same code with device buffers (packing on acc.stream with the reducer's pre-scaling kernel, NCCL or
     CUDA-aware/staged MPI for the reduces and all-gathers); compiled by the nvcc build, tested on the CPU only.
     Collective calls: create, wait (on reducing steps), gather, export; grad_ready as the reducer's; views,
     import and the state functions are local (save_state/load_state are collective).

   COLLECTIVE CALLS AND ERRORS
     Every rank of the group makes the same calls in the same order: accel_coll_create, every data operation,
     the Accelerate helpers (not split_between_processes), accel_coll_reducer_finalize (or the
     first grad_ready/wait) and accel_coll_reducer_wait on a step that reduces, accel_coll_reducer_join_begin and
     accel_coll_reducer_join_end (see JOIN); accel_coll_mesh_create and accel_coll_mesh_destroy over the parent. A local failure (a bad argument, an
     allocation) fails every rank at once: that rank returns its error,
     the others ACCEL_ERR_REMOTE naming it. That holds for create, pad_across_processes, gather_rows,
     gather_for_metrics and finalize; argument errors of the typed ops
     (reduce_tensor included) are local — checking them on every rank would cost a round trip per call — so the other
     ranks then reach the deadline.

   THREADS AND STREAMS
     A context is used by one thread at a time — including the core's host collectives while it is the host process
     group. MPI ops complete on the host before returning (device buffers: acc's stream is synchronized first). NCCL
     ops are enqueued on acc.stream and return; accel_coll_synchronize waits with the deadline. An async request must
     be finished with accel_coll_wait, or accel_coll_test until it reports done.

   DIFFERENCES FROM ACCELERATE (docs/semantics.md §7)
     - reduce "mean" on an integer dtype is an error at every process count (Accelerate raises only when distributed).
     - reduce accepts "sum", "mean", "max", "none" (= sum, as Accelerate) and also "min"/"prod"; anything else is an
       error (Accelerate sums for any other string).
     - pad_across_processes fails with ACCEL_ERR_MISMATCH when ranks differ in rank count or in a non-padded dim
       (torch fails inside all_gather with a less clear message or hangs).
     - Element counts of one MPI call are limited to INT_MAX.
*/
#ifndef ACCEL_COLLECTIVES_H_INCLUDED
#define ACCEL_COLLECTIVES_H_INCLUDED
#include "accel.h"
#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

typedef enum accel_coll_backend {
    ACCEL_COLL_BACKEND_AUTO = 0,
    ACCEL_COLL_BACKEND_NONE,
    ACCEL_COLL_BACKEND_MPI,
    ACCEL_COLL_BACKEND_NCCL
} accel_coll_backend;
ACCEL_API const char *accel_coll_backend_name(accel_coll_backend b); /* "auto" "none" "mpi" "nccl" */

typedef enum accel_coll_op {
    ACCEL_COLL_SUM = 0,
    ACCEL_COLL_AVG,  /* the sum, then / group size (Accelerate's reduce "mean"); floating dtypes only */
    ACCEL_COLL_MAX,
    ACCEL_COLL_MIN,
    ACCEL_COLL_PROD,
    ACCEL_COLL_OP_COUNT
} accel_coll_op;
#define ACCEL_COLL_MEAN ACCEL_COLL_AVG
ACCEL_API const char *accel_coll_op_name(accel_coll_op op); /* "sum" "avg" "max" "min" "prod" */

typedef struct accel_coll_desc {
    accel_coll_backend backend;  /* ACCEL_COLL_BACKEND_AUTO (0): see BACKENDS */
    void *mpi_comm;              /* const MPI_Comm *; NULL → acc's process group */
    int host_buffers;            /* nonzero: buffers are host memory even on a GPU run */
    int timeout_ms;              /* 0 → acc->desc.collective_timeout_ms */
    int no_watchdog;             /* nonzero: blocking MPI ops are plain blocking MPI calls (no deadline) */
    accel_toggle debug;          /* ACCEL_DEFAULT → acc->debug (ACCELERATE_DEBUG_MODE) */
    accel_toggle cuda_aware_mpi; /* ACCEL_DEFAULT → ACCEL_CUDA_AWARE_MPI, else the MPI library's answer */
} accel_coll_desc;

typedef struct accel_coll accel_coll;                 /* a communicator context; opaque */
typedef struct accel_coll_request accel_coll_request; /* an operation in flight; opaque */

/* Collective over the group: every rank of the group calls it (a bad desc on one rank fails every rank). desc NULL =
   all defaults. An NCCL context may become acc's host process group (see THE HOST PROCESS GROUP). */
ACCEL_API accel_result accel_coll_create(accel *acc, const accel_coll_desc *desc, accel_coll **out);
/* NULL is fine. A context that serves as acc's host process group stops serving. */
ACCEL_API void accel_coll_destroy(accel_coll *c);
ACCEL_API int accel_coll_rank(const accel_coll *c);
ACCEL_API int accel_coll_size(const accel_coll *c);
ACCEL_API accel_coll_backend accel_coll_get_backend(const accel_coll *c);
ACCEL_API int accel_coll_uses_device_buffers(const accel_coll *c);
ACCEL_API accel *accel_coll_accel(const accel_coll *c);

/* ---------------------------------------------------------------------------------------------- typed ops */
/* Reductions support F64 F32 F16 BF16 I64 I32 U8 (AVG floating only); data movement supports every dtype.
   count = elements per rank. In place: all_reduce/reduce with send == recv; all_gather/gather with
   send == recv + rank*count. recv of reduce/gather is used on the root only (may be NULL elsewhere). */
ACCEL_API accel_result accel_coll_all_reduce(accel_coll *c, const void *send, void *recv, size_t count, accel_dtype dt,
                                             accel_coll_op op);
ACCEL_API accel_result accel_coll_reduce(accel_coll *c, const void *send, void *recv, size_t count, accel_dtype dt,
                                         accel_coll_op op, int root);
ACCEL_API accel_result accel_coll_broadcast(accel_coll *c, void *buf, size_t count, accel_dtype dt, int root);
/* recv holds size*count elements, rank order (Accelerate's gather: concatenation on dim 0). */
ACCEL_API accel_result accel_coll_all_gather(accel_coll *c, const void *send, void *recv, size_t count, accel_dtype dt);
/* send holds size*recv_count elements; rank r receives the reduction of block r. send and recv must not overlap. */
ACCEL_API accel_result accel_coll_reduce_scatter(accel_coll *c, const void *send, void *recv, size_t recv_count,
                                                 accel_dtype dt, accel_coll_op op);
ACCEL_API accel_result accel_coll_gather(accel_coll *c, const void *send, void *recv, size_t count, accel_dtype dt,
                                         int root);
ACCEL_API accel_result accel_coll_barrier(accel_coll *c);
/* NCCL: wait (with the deadline) for everything enqueued on acc.stream; MPI/NONE: nothing to do. */
ACCEL_API accel_result accel_coll_synchronize(accel_coll *c);

/* ---------------------------------------------------------------------------------------------- async ops */
/* Same arguments; *req receives a handle that accel_coll_wait or accel_coll_test finishes and frees. Buffers must
   stay untouched until then. */
ACCEL_API accel_result accel_coll_all_reduce_async(accel_coll *c, const void *send, void *recv, size_t count,
                                                   accel_dtype dt, accel_coll_op op, accel_coll_request **req);
ACCEL_API accel_result accel_coll_reduce_async(accel_coll *c, const void *send, void *recv, size_t count,
                                               accel_dtype dt, accel_coll_op op, int root, accel_coll_request **req);
ACCEL_API accel_result accel_coll_broadcast_async(accel_coll *c, void *buf, size_t count, accel_dtype dt, int root,
                                                  accel_coll_request **req);
ACCEL_API accel_result accel_coll_all_gather_async(accel_coll *c, const void *send, void *recv, size_t count,
                                                   accel_dtype dt, accel_coll_request **req);
ACCEL_API accel_result accel_coll_reduce_scatter_async(accel_coll *c, const void *send, void *recv, size_t recv_count,
                                                       accel_dtype dt, accel_coll_op op, accel_coll_request **req);
/* Blocks until done or the deadline; frees req either way. NCCL: afterwards acc.stream is ordered after the op. */
ACCEL_API accel_result accel_coll_wait(accel_coll_request *req);
/* *done = 1 when finished (req is then freed and the result returned); 0: still running (ACCEL_OK). */
ACCEL_API accel_result accel_coll_test(accel_coll_request *req, int *done);

/* ------------------------------------------------------------------------------------ Accelerate helpers */
/* Accelerator.reduce(tensor, reduction): "sum" (NULL, Accelerate's default), "mean", "max", "none" (sums), also
   "min" and "prod". In place on buf. */
ACCEL_API accel_result accel_coll_reduce_tensor(accel_coll *c, void *buf, size_t count, accel_dtype dt,
                                                const char *reduction);

/* pad_across_processes(t, dim, pad_index, pad_first): out receives in's shape with `dim` padded to the maximum over
   ranks, filled with pad_value; with pad_first the data goes at the end. out->ptr is allocated (free it with
   accel_coll_free) and out->name = in->name. A dim outside [-ndim, ndim) gives an unchanged copy. */
ACCEL_API accel_result accel_coll_pad_across_processes(accel_coll *c, const accel_tensor *in, int dim, double pad_value,
                                                       int pad_first, accel_tensor *out);
/* Accelerate's gather: an all-gather of tensors whose dim 0 differs per rank (other dims equal), concatenated in rank
   order. out->ptr is allocated (accel_coll_free). With several processes a 0-d tensor counts as shape [1] per rank;
   with one process (not distributed) the input comes back unchanged, a 0-d tensor as a 0-d copy
   (docs/semantics.md §7). */
ACCEL_API accel_result accel_coll_gather_rows(accel_coll *c, const accel_tensor *in, accel_tensor *out);
/* gather_for_metrics: gather_rows, then at the end of the dataloader (acc.end_of_dataloader) with
   acc.remainder > 0 keep only the first `remainder` rows (the padding duplicates are dropped; docs/semantics.md §3).
   A 0-d result is never cut. */
ACCEL_API accel_result accel_coll_gather_for_metrics(accel_coll *c, const accel_tensor *in, accel_tensor *out);
/* Frees memory returned by the helpers above (device or host, as allocated). */
ACCEL_API void accel_coll_free(accel_coll *c, void *ptr);

/* Objects (gather_object, broadcast_object_list) are host bookkeeping: the core's accel_gather_object and
   accel_broadcast_object_list (accel.h) serve every launcher, including torchrun's TCP store. */

/* split_between_processes on [0, n): process p gets [start, end); with apply_padding the slice is extended to
   q + (r > 0) items by repeating item n - 1 (pad_count times), as Accelerate pads lists/tensors. num_processes == 1
   gives [0, n) unchanged. n == 0 with apply_padding is an error (Accelerate: IndexError). */
typedef struct accel_coll_range {
    int64_t start, end;
    int64_t pad_count; /* extra copies of item pad_index appended after [start, end) */
    int64_t pad_index;
} accel_coll_range;
ACCEL_API accel_result accel_coll_split_between_processes(int64_t n, int num_processes, int process_index,
                                                          int apply_padding, accel_coll_range *out);

/* -------------------------------------------------------------------------------------- gradient reducer */
typedef struct accel_coll_reducer_desc {
    double bucket_cap_mb;   /* 0 → 25 (DDP); MiB */
    double first_bucket_mb; /* 0 → 1 (DDP); MiB */
    int no_average;         /* nonzero: sum the gradients (default: DDP's average, see GRADIENT REDUCER) */
    accel_toggle flat;      /* ACCEL_DEFAULT: one all-reduce in place when the grads are one contiguous buffer of one
                               dtype, else buckets; ACCEL_OFF: always bucket; ACCEL_ON: require contiguity (error
                               otherwise) */
} accel_coll_reducer_desc;
typedef struct accel_coll_reducer accel_coll_reducer;

ACCEL_API accel_result accel_coll_reducer_create(accel_coll *c, const accel_coll_reducer_desc *desc,
                                                 accel_coll_reducer **out);
ACCEL_API void accel_coll_reducer_destroy(accel_coll_reducer *r);
/* Registers n gradients (floating dtypes, any shape: numel elements at ptr) before the first step. Their indices, for
   grad_ready, are the registration order across calls: the first call's tensors are 0..n-1, the next call's follow.
   All n are checked first: on an error none is registered. */
ACCEL_API accel_result accel_coll_reducer_add(accel_coll_reducer *r, const accel_tensor *grads, int n);
/* Builds the buckets and checks that every rank registered the same list (collective). Called by the first
   grad_ready/wait when not called explicitly. */
ACCEL_API accel_result accel_coll_reducer_finalize(accel_coll_reducer *r);
/* Grad i holds its final local value; a bucket whose grads are all ready is launched (in bucket order). */
ACCEL_API accel_result accel_coll_grad_ready(accel_coll_reducer *r, int index);
/* Launches what is left (grads never marked ready count as ready now), waits for every bucket and unpacks: the
   gradients then hold the sum of every rank's gradient times 1/P (DDP's average; the sum with no_average). No-op
   unless accel_should_reduce(acc): a sync step, or sync_each_batch with several processes (Accelerate skips DDP's
   no_sync then). */
ACCEL_API accel_result accel_coll_reducer_wait(accel_coll_reducer *r);
ACCEL_API int accel_coll_reducer_num_buckets(const accel_coll_reducer *r); /* -1 before finalize */
/* Bucket b's registration indices (in bucket order) → idx (capacity cap); returns the count (or -1). */
ACCEL_API int accel_coll_reducer_bucket(const accel_coll_reducer *r, int b, int *idx, int cap);
ACCEL_API int accel_coll_reducer_is_flat(const accel_coll_reducer *r);

/* ------------------------------------------------------------------------------ join (uneven inputs, DDP's Join) */
/* Accelerate's join_uneven_inputs over the reducer (torch's Join + DDP's join hook). Between join_begin and join_end a
   rank that has run out of batches calls join_end, which shadows the reductions of the ranks still training with
   zeros until every rank is in join_end. See JOIN in the manual for the exact gradients. */
typedef struct accel_coll_join_desc {
    int no_divide_by_initial_world_size; /* nonzero: DDP's divide_by_initial_world_size=False (average over the ranks
                                            still training in that step); default: divide by the group size */
} accel_coll_join_desc;
/* Collective over the reducer's group: finalizes the reducer (register every gradient first) and checks that every
   rank gave the same desc (NULL = defaults). */
ACCEL_API accel_result accel_coll_reducer_join_begin(accel_coll_reducer *r, const accel_coll_join_desc *desc);
/* Collective: this rank is out of batches. Shadows the others' reductions with zeros until every rank has called it,
   then (n > 0) broadcasts params (n tensors in the context's memory, the same list on every rank) from the
   authoritative rank: the highest rank among the last to join (DDP's _sync_final_model). Leaves join mode. */
ACCEL_API accel_result accel_coll_reducer_join_end(accel_coll_reducer *r, const accel_tensor *params, int n);
/* Ranks that took part in the last reduction in join mode (the divisor with no_divide_by_initial_world_size);
   the group size outside join mode; -1 for NULL. */
ACCEL_API int accel_coll_reducer_join_active(const accel_coll_reducer *r);

/* ---------------------------------------------------------------------------------------------- process mesh */
/* Accelerate's ParallelismConfig / torch's DeviceMesh over a context's group (see PROCESS MESH in the manual). The
   dimensions in mesh order (row-major, tp fastest: consecutive ranks share everything but tp), then the flattened
   groups Accelerate's build_device_mesh adds. Each is a full accel_coll (every op, the reducer). */
typedef enum accel_coll_mesh_dim {
    ACCEL_COLL_MESH_PP = 0,           /* pipeline stages (an extra outermost dimension; not in Accelerate) */
    ACCEL_COLL_MESH_DP_REPLICATE,     /* "dp_replicate" */
    ACCEL_COLL_MESH_DP_SHARD,         /* "dp_shard" */
    ACCEL_COLL_MESH_CP,               /* "cp" */
    ACCEL_COLL_MESH_TP,               /* "tp" (innermost) */
    ACCEL_COLL_MESH_DP,               /* "dp" = dp_replicate x dp_shard: the data-parallel group (shard the data by it) */
    ACCEL_COLL_MESH_DP_SHARD_CP,      /* "dp_shard_cp" = dp_shard x cp: where FSDP shards the model */
    ACCEL_COLL_MESH_DP_CP,            /* "dp_cp" = dp_replicate x dp_shard x cp: where the loss is averaged */
    ACCEL_COLL_MESH_COUNT
} accel_coll_mesh_dim;
#define ACCEL_COLL_MESH_NDIMS 5 /* the real dimensions: PP .. TP; coordinates are int[5] in that order */
ACCEL_API const char *accel_coll_mesh_dim_name(accel_coll_mesh_dim d); /* "pp" "dp_replicate" ... "dp_cp" */

typedef struct accel_coll_mesh_desc {
    /* 0 → the environment (PARALLELISM_CONFIG_DP_REPLICATE_SIZE, _DP_SHARD_SIZE, _TP_SIZE, _CP_SIZE, as Accelerate;
       ACCEL_PP_SIZE) or 1. When every size resolves to 1 on a group of P > 1, dp_replicate = P (Accelerate: plain
       DDP). The product must be the parent's size; a size < 1 is an error. */
    int dp_replicate_size;
    int dp_shard_size;
    int tp_size;
    int cp_size;
    int pp_size;
} accel_coll_mesh_desc;
typedef struct accel_coll_mesh accel_coll_mesh;

/* Collective over parent's group: validates desc, checks that every rank resolved the same sizes (a difference fails
   on every rank, naming the dimension and every rank's value), then builds the 8 sub-communicators (MPI_Comm_split,
   ncclCommSplit). Each inherits parent's backend, buffers, timeout, debug and CUDA-aware settings. */
ACCEL_API accel_result accel_coll_mesh_create(accel_coll *parent, const accel_coll_mesh_desc *desc, accel_coll_mesh **out);
ACCEL_API void accel_coll_mesh_destroy(accel_coll_mesh *m); /* destroys the sub-communicators; NULL ok */
/* The communicator of d (owned by the mesh); its rank is this process's coordinate along d. NULL for a bad d. */
ACCEL_API accel_coll *accel_coll_mesh_comm(const accel_coll_mesh *m, accel_coll_mesh_dim d);
ACCEL_API int accel_coll_mesh_size(const accel_coll_mesh *m, accel_coll_mesh_dim d);  /* 0 for a bad d */
ACCEL_API int accel_coll_mesh_coord(const accel_coll_mesh *m, accel_coll_mesh_dim d); /* -1 for a bad d */
/* rank of the parent group → coords[5] (pp, dp_replicate, dp_shard, cp, tp); and back (-1 when out of range). */
ACCEL_API accel_result accel_coll_mesh_coords(const accel_coll_mesh *m, int rank, int coords[ACCEL_COLL_MESH_NDIMS]);
ACCEL_API int accel_coll_mesh_rank_of(const accel_coll_mesh *m, const int coords[ACCEL_COLL_MESH_NDIMS]);

/* ----------------------------------------------------------------------------- bootstrap byte exchanges */
/* Rank 0's `bytes` bytes reach every rank of `size`, and no one else: both admit by the job's secret and run id, as
   the core's store does (accel.h: SECURITY; ACCEL_STORE_SECRET, TORCHELASTIC_RUN_ID / ACCEL_RUN_ID). TCP: rank 0
   listens on addr:port (that interface only; a non-loopback addr needs the secret or ACCEL_STORE_TRUSTED_NETWORK=1)
   and serves size-1 peers at once; a peer without the secret is refused ("not admitted: wrong secret") and never
   sees the bytes. File: rank 0 writes path atomically (temp + rename), readable by its user only, with its proof
   over the bytes; the others poll for it and ignore a file that is not this job's (garbage, another run's, or
   written without the secret) until rank 0's arrives. Both end with ACCEL_ERR_TIMEOUT after timeout_ms. acc may be
   NULL (the process-wide error is set). */
ACCEL_API accel_result accel_coll_tcp_broadcast(accel *acc, const char *addr, int port, int rank, int size, void *data,
                                                size_t bytes, int timeout_ms);
ACCEL_API accel_result accel_coll_file_broadcast(accel *acc, const char *path, int rank, void *data, size_t bytes,
                                                 int timeout_ms);

/* -------------------------------------------------------------------------------- ZeRO-1/2 (optimizer sharding) */
/* docs/semantics.md has no ZeRO section: this is DeepSpeed's ZeRO stages 1 and 2 (FSDP's SHARD_GRAD_OP), see ZeRO in
   the manual above. The partition of a list of n tensors over `size` ranks: the tensors are flattened in list order
   (total elements N), the flat vector is padded to size * S elements with S = ceil(N / size), and rank r owns the
   contiguous elements [r*S, min((r+1)*S, N)) — the padding is the tail of the last rank(s), never stored. */
typedef struct accel_coll_partition {
    int size, rank;
    int64_t total;      /* N: elements of the flattened list */
    int64_t shard;      /* S = ceil(N / size): each rank's slot (size * S >= N is the padded length) */
    int64_t begin, end; /* this rank's elements [begin, end) of the flattened list */
} accel_coll_partition;
/* Local (no communication): the partition of list t over `size` ranks as seen by `rank` (acc: errors; may be NULL). */
ACCEL_API accel_result accel_coll_partition_list(accel *acc, const accel_tensor *t, int n, int size, int rank,
                                                 accel_coll_partition *out);
/* The n views of this rank's shard of list t (tensors with the partitioned numels, any dtype): view i is the 1-D
   piece of t[i] inside [begin, end) (name and dtype of t[i]); a tensor outside the shard gives an empty view
   (shape {0}, ptr = t[i].ptr). Returns the number of non-empty views, or -1 when t does not match the partition. */
ACCEL_API int accel_coll_partition_views(const accel_coll_partition *p, const accel_tensor *t, int n, accel_tensor *views);

typedef struct accel_coll_zero_desc {
    int stage;                  /* 1 or 2 (0 → 1) */
    const accel_tensor *params; /* the parameter list that is partitioned (n entries; any dtype, shapes matter) */
    const accel_tensor *grads;  /* its gradients (numel equal; F64/F32/F16/BF16; stage 2: one dtype) */
    int n;
    double bucket_cap_mb;       /* 0 → 25: reduce buckets (stage 1: the reducer's) and all-gather chunks, MiB */
    int no_average;             /* nonzero: gradients are summed (default: DDP's average, as the reducer) */
} accel_coll_zero_desc;
typedef struct accel_coll_zero accel_coll_zero;

/* Collective over c's group: validates the lists and that every rank gave the same stage and layout (a bad list
   or a different one on any rank fails every rank: the bad rank with its error, the others with ACCEL_ERR_REMOTE
   or ACCEL_ERR_MISMATCH listing every rank's layout). */
ACCEL_API accel_result accel_coll_zero_create(accel_coll *c, const accel_coll_zero_desc *desc, accel_coll_zero **out);
ACCEL_API void accel_coll_zero_destroy(accel_coll_zero *z); /* NULL ok */
ACCEL_API const accel_coll_partition *accel_coll_zero_partition(const accel_coll_zero *z);
/* This rank's shard of list t (accel_coll_partition_views): n views for accel_optim_desc.params / .model, with
   accel_optim_desc.index_offset = partition begin. */
ACCEL_API accel_result accel_coll_zero_views(accel_coll_zero *z, const accel_tensor *t, int n, accel_tensor *views);
/* The n gradient views the shard's optimizer reads after accel_coll_zero_wait: stage 1 views of desc.grads, stage 2
   views of the shard gradient buffer this object owns (shard elements, the gradients' dtype). */
ACCEL_API accel_result accel_coll_zero_grad_views(accel_coll_zero *z, accel_tensor *views, int n);
/* Gradient i holds its final local value (backward order is the overlap order); no-op unless accel_should_reduce. */
ACCEL_API accel_result accel_coll_zero_grad_ready(accel_coll_zero *z, int index);
/* Reduces what is left and waits: stage 1 every gradient holds the average (the reducer), stage 2 the shard buffer
   holds this rank's part of it (and the gradient buffers' contents are unspecified: zero them before the next
   accumulation). No-op unless accel_should_reduce(acc) (accumulation steps). Collective. */
ACCEL_API accel_result accel_coll_zero_wait(accel_coll_zero *z);
/* Every rank's shard of list t (n tensors of one dtype, the partitioned numels: the parameters, or their BF16/F16
   model copies) reaches every rank, in chunks of bucket_cap_mb (two in flight). Collective. */
ACCEL_API accel_result accel_coll_zero_gather(accel_coll_zero *z, const accel_tensor *t, int n);
/* Optimizer state across partitions (param-major lists of m = n*k tensors, k per parameter, as
   accel_optim_state_tensors gives them): export writes every rank's shard views `shard` into the full-size tensors
   `full` on every rank (collective; the consolidated, unsharded state), import copies this rank's part of `full`
   into `shard` (local: full may come from a checkpoint saved with any number of ranks). */
ACCEL_API accel_result accel_coll_zero_export(accel_coll_zero *z, const accel_tensor *shard, const accel_tensor *full, int m);
ACCEL_API accel_result accel_coll_zero_import(accel_coll_zero *z, const accel_tensor *full, const accel_tensor *shard, int m);
/* Sharded checkpoints of the shard's optimizer state: each rank saves only its shard with the partition recorded,
   and a load on any number of ranks re-partitions. obj: an accel_coll_zero_state; register it with
     accel_ckpt_register_sharded(ck, "zero_state", accel_coll_zero_state_save, accel_coll_zero_state_load_all, &zs);
   (→ zero_state_<rank>.bin on every rank), next to the step counts (accel_optim_shard_state, a global file).
   The bytes (little-endian): "ACZS", u32 version 1, u32 size, u32 rank, u64 total, u64 begin, u64 end, u32 n, u32 k,
   (n + 1) u64 flat offsets of the parameters, then per state tensor (param-major, m = n * k): u32 dtype, u64
   elements, its bytes. load_all validates every saved rank's bytes (same parameter layout, k and dtypes; each file
   the partition of its rank) before copying this rank's new shard out of them. */
typedef struct accel_coll_zero_state {
    accel_coll_zero *zero;
    const accel_tensor *shard; /* the m state tensors of the shard's optimizer (accel_optim_state_tensors) */
    int m;
} accel_coll_zero_state;
ACCEL_API accel_result accel_coll_zero_state_save(void *state, void *buf, size_t cap, size_t *size);
ACCEL_API accel_result accel_coll_zero_state_load_all(void *state, const void *const *bufs, const size_t *sizes, int count);

#ifdef __cplusplus
}
#endif
#endif /* ACCEL_COLLECTIVES_H_INCLUDED */

/* ========================================================================================== implementation */
#if defined(ACCEL_IMPLEMENTATION) && !defined(ACCEL__COLLECTIVES_IMPL_DONE)
#define ACCEL__COLLECTIVES_IMPL_DONE
/* CONTENTS — follows accel.h's implementation in the same TU and uses its services (errors, allocators, stb_ds,
   deadlines, byte order, files, MPI/CUDA checks, accel__agree, the host process group):
     0. includes, backend macros (ACCEL__COLL_DEVICE: nvcc; ACCEL__COLL_NCCL: nvcc + ACCEL_WITH_NCCL)
     1. element-wise math for CPU and GPU: the F16/BF16 combine of the MPI user ops, DDP's pre-scaling, AVG's
        division, pad values (all through the core's 16-bit codec), and their kernels
     2. structures (accel_coll, requests), names, small queries
     3. MPI bits: F16/BF16 user ops, datatypes and ops
     4. NCCL bits: datatypes, ops, settling non-blocking calls
     5. agreement of local failures (accel__coll_agree), accel_coll_create / accel_coll_destroy
     6. copies, pre-scaling, completing requests (progress, accel_coll_wait / accel_coll_test)
     7. posting an operation: NONE, MPI (pinned staging of device buffers), NCCL (device staging of host buffers)
     8. debug mode (cross-rank argument check), post + wait
     9. validation and the typed ops, blocking and async
    10. the host process group over a context (accel.h's transport, installed for NCCL)
    11. Accelerate helpers: reduce, pad_across_processes, gather(_for_metrics)
    12. split_between_processes (objects are the core's: accel_gather_object, accel_broadcast_object_list)
    13. the gradient reducer: registration, DDP's buckets, pre-scaled packing, launch and finish
    13b. join for uneven inputs (rounds, zero shadows, the final broadcast); the process mesh (sub-communicators)
    14. bootstrap byte exchanges: TCP (the core's sockets), file (the core's atomic write)
    15. NCCL init (the unique id over the host group / MPI / TCP / file)
    16. ZeRO: the partition, shard views, stage-2 reduce-to-owner buckets, the chunked all-gather, state export,
        per-rank state files (accel_coll_zero_state_save / _load_all) */

/* ------------------------------------------------------------------------------------------------------ 0. includes */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <errno.h>
#include <sched.h>
#include <unistd.h>
#include <fcntl.h>
#include <time.h>
#include <sys/types.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>

#if defined(__CUDACC__) && !defined(ACCEL_WITH_CUDA)
#define ACCEL_WITH_CUDA 1
#endif
#ifdef __CUDACC__
#include <cuda_runtime_api.h>
#define ACCEL__COLL_DEVICE 1
#endif
#if defined(ACCEL_WITH_NCCL) && defined(__CUDACC__)
#include <nccl.h>
#define ACCEL__COLL_NCCL 1
#endif
#ifdef ACCEL_WITH_MPI
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>
#if defined(ACCEL__COLL_DEVICE) && defined(OPEN_MPI) && OPEN_MPI
#include <mpi-ext.h>
#endif
#endif

/* --------------------------------------------------------------------------------- 1. element-wise math (CPU + GPU) */
static ACCEL_INLINE ACCEL_HD float accel__coll_combine_f32(float a, float b, int op) {
    switch (op) {
    case ACCEL_COLL_MAX: return a > b ? a : b;
    case ACCEL_COLL_MIN: return a < b ? a : b;
    case ACCEL_COLL_PROD: return a * b;
    default: return a + b;
    }
}
/* inout[i] = in[i] op inout[i] for 16-bit floats (bf16 nonzero: bfloat16, else IEEE half): computed in float and
   rounded to nearest even by the core's codec (every NaN becomes 0x7FFF, CUDA's rule) */
static ACCEL_INLINE ACCEL_HD uint16_t accel__coll_combine16(uint16_t a, uint16_t b, int op, int bf16) {
    float x = bf16 ? accel_bf16_to_f32(a) : accel_f16_to_f32(a);
    float y = bf16 ? accel_bf16_to_f32(b) : accel_f16_to_f32(b);
    float z = accel__coll_combine_f32(x, y, op);
    return bf16 ? accel_f32_to_bf16(z) : accel_f32_to_f16(z);
}
/* DDP's pre-scaling of one element: dst[i] = src[i] * fl(1/n), dst may equal src. torch's Reducer copies each gradient
   into its bucket as grad * (1.0 / world_size) (a wrapped double scalar, so the product is taken in the tensor's
   compute type: double for F64, float for F32/F16/BF16, then rounded to the 16-bit type), before an all-reduce SUM.
   A multiplication by the rounded reciprocal, not a division: the two differ in the last bit (see the reducer's
   averaging order in the manual). */
static ACCEL_INLINE ACCEL_HD void accel__coll_prescale_elem(void *dst, const void *src, size_t i, int dt, double n) {
    switch (dt) {
    case ACCEL_F64: ((double *)dst)[i] = ((const double *)src)[i] * (1.0 / n); break;
    case ACCEL_F32: ((float *)dst)[i] = ((const float *)src)[i] * (float)(1.0 / n); break;
    case ACCEL_F16: ((uint16_t *)dst)[i] = accel_f32_to_f16(accel_f16_to_f32(((const uint16_t *)src)[i]) * (float)(1.0 / n)); break;
    case ACCEL_BF16: ((uint16_t *)dst)[i] = accel_f32_to_bf16(accel_bf16_to_f32(((const uint16_t *)src)[i]) * (float)(1.0 / n)); break;
    default: break;
    }
}
/* element i of a buffer divided by n (AVG after the sum, Accelerate's reduce("mean")): computed in the dtype's float
   width */
static ACCEL_INLINE ACCEL_HD void accel__coll_div_elem(void *buf, size_t i, int dt, double n) {
    switch (dt) {
    case ACCEL_F64: ((double *)buf)[i] /= n; break;
    case ACCEL_F32: ((float *)buf)[i] = (float)(((float *)buf)[i] / (float)n); break;
    case ACCEL_F16: ((uint16_t *)buf)[i] = accel_f32_to_f16(accel_f16_to_f32(((uint16_t *)buf)[i]) / (float)n); break;
    case ACCEL_BF16: ((uint16_t *)buf)[i] = accel_f32_to_bf16(accel_bf16_to_f32(((uint16_t *)buf)[i]) / (float)n); break;
    default: break;
    }
}
/* the pad value as the dtype's bytes (little-endian host) */
static ACCEL_INLINE ACCEL_HD void accel__coll_value_bytes(double v, int dt, unsigned char out[8]) {
    int k;
    for (k = 0; k < 8; ++k) out[k] = 0;
    switch (dt) {
    case ACCEL_F64: memcpy(out, &v, 8); break;
    case ACCEL_F32: { float f = (float)v; memcpy(out, &f, 4); } break;
    case ACCEL_F16: { uint16_t h = accel_f32_to_f16((float)v); memcpy(out, &h, 2); } break;
    case ACCEL_BF16: { uint16_t h = accel_f32_to_bf16((float)v); memcpy(out, &h, 2); } break;
    case ACCEL_I64: case ACCEL_U64: { int64_t x = (int64_t)v; memcpy(out, &x, 8); } break;
    case ACCEL_I32: case ACCEL_U32: { int32_t x = (int32_t)(int64_t)v; memcpy(out, &x, 4); } break;
    case ACCEL_I16: case ACCEL_U16: { int16_t x = (int16_t)(int64_t)v; memcpy(out, &x, 2); } break;
    default: out[0] = (unsigned char)(int64_t)v; break;
    }
}

#ifdef ACCEL__COLL_DEVICE
static __global__ void accel__coll_div_kernel(void *buf, size_t n, int dt, double d) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (size_t)gridDim.x * blockDim.x;
    for (; i < n; i += stride) accel__coll_div_elem(buf, i, dt, d);
}
static __global__ void accel__coll_prescale_kernel(void *dst, const void *src, size_t n, int dt, double d) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (size_t)gridDim.x * blockDim.x;
    for (; i < n; i += stride) accel__coll_prescale_elem(dst, src, i, dt, d);
}
static unsigned accel__coll_blocks(size_t n) { return (unsigned)(n > (size_t)4096 * 256 ? 4096 : (n + 255) / 256); }
static __global__ void accel__coll_fill_kernel(unsigned char *dst, size_t n, size_t es, uint64_t pattern) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (size_t)gridDim.x * blockDim.x;
    for (; i < n; i += stride) {
        size_t k;
        for (k = 0; k < es; ++k) dst[i * es + k] = (unsigned char)(pattern >> (8 * k));
    }
}
#endif

/* ---------------------------------------------------------------------------------------------------- 2. structures */
enum { ACCEL__K_ALLREDUCE = 1, ACCEL__K_REDUCE, ACCEL__K_BCAST, ACCEL__K_ALLGATHER, ACCEL__K_REDUCE_SCATTER,
       ACCEL__K_GATHER, ACCEL__K_BARRIER, ACCEL__K_ALLGATHERV };
static const char *accel__coll_kind_name(int k) {
    static const char *n[] = {"?", "all_reduce", "reduce", "broadcast", "all_gather", "reduce_scatter", "gather",
                              "barrier", "all_gather_v"};
    return (k >= 0 && k <= ACCEL__K_ALLGATHERV) ? n[k] : "?";
}

struct accel_coll {
    accel *acc;
    accel_coll_backend backend;
    int rank, size;
    int device_mem;       /* user buffers are device memory */
    int debug, watchdog, cuda_aware;
    int on_host_group;    /* the group is acc's process group (no desc.mpi_comm) */
    int host_group;       /* installed as acc's host process group (accel__coll_host_group_install) */
    accel__transport tp;  /* its transport table */
    double timeout_s;
    accel_result broken;  /* nonzero after a timeout/fatal error: every later call fails fast */
    accel_coll_request *orphans;
#ifdef ACCEL_WITH_MPI
    MPI_Comm comm;
    int comm_valid;
    MPI_Op op16[2][4];    /* [bf16][sum,prod,max,min] user ops */
    int ops_valid;
    unsigned ring_seq;    /* ring all-reduces posted (their message tag): the same on every rank */
    void *ring_cache;     /* one idle ring scratch buffer kept for the next operation */
    size_t ring_cache_bytes;
#endif
    size_t eager_bytes;   /* the MPI library's shared-memory eager limit (accel__coll_exchange) */
#ifdef ACCEL__COLL_NCCL
    ncclComm_t nccl;
    int nccl_valid;
    cudaStream_t comm_stream;
    void *scratch;        /* 8 device bytes for the barrier */
#endif
};

struct accel_coll_request {
    accel_coll *c;
    int kind;
    accel_dtype dt;
    accel_coll_op op;
    size_t count;
    int root;
    double start, deadline;
    /* post-processing once the transfer is complete */
    void *avg_buf;          /* divide avg_count elements here by size (host memory, or device with avg_dev) */
    size_t avg_count;
    int avg_dev;
    void *stage;            /* staging buffer: pinned host (stage_kind 1) or device (2) */
    int stage_kind;
    void *copy_dst;         /* copy copy_bytes from copy_src (stage) to copy_dst (user) at the end */
    const void *copy_src;
    size_t copy_bytes;
    int copy_dir;           /* 1 host→device, 2 device→host */
    int *ivec;              /* counts/displacements of v-collectives */
#ifdef ACCEL_WITH_MPI
    MPI_Request mreq;
    int has_mreq;         /* an MPI operation is in flight (ring: rreq[0..1] instead of mreq) */
    /* ring all-reduce (accel__coll_ring_*): reduce-scatter then allgather over point-to-point messages */
    int ring, ring_step;  /* ring: 1 ring, 2 two-rank exchange, 3 direct (3+ ranks), 4 direct in one round (small),
                             5 two-rank ring in segments (large); ring_step: 0 .. 2(P-1) */
    int ring_direct;      /* not in place: step 0 reads ring_src and receives straight into ring_buf (no copy) */
    MPI_Request rreq[2];  /* this step's send and receive */
    MPI_Request *rq;      /* the requests in flight: rreq (ring, exchange) or 2(P-1) in ring_tmp (direct) */
    int nrq;
    unsigned char *ring_buf, *ring_tmp;
    const unsigned char *ring_src;
    int fold_k;           /* direct: the next rank whose contribution is folded in (rank order) */
    unsigned char *fold_acc; /* direct: where the running fold is (ring_buf's own chunk once it got there) */
    unsigned char *dslots;   /* direct: P-1 receive slots of dslot_bytes, after the requests in ring_tmp */
    size_t dslot_bytes;
    size_t ring_tmp_bytes;
    MPI_Datatype ring_t;
    MPI_Op ring_op;
    int ring_tag;
#endif
#ifdef ACCEL__COLL_NCCL
    cudaEvent_t ev;
    int has_ev;
    int on_comm_stream;
#endif
    accel_coll_request *next;
};

/* this context's deadline for an operation starting now (desc.timeout_ms, else the Accelerator's collective timeout) */
ACCEL__PRIVATE double accel__coll_deadline(const accel_coll *c) { return accel_now() + c->timeout_s; }

static accel_result accel__coll_null(void) {
    return accel__fail(NULL, ACCEL_ERR_INVALID_ARGUMENT, __FILE__, __LINE__, "accel_coll: context is NULL");
}

ACCEL__DEF const char *accel_coll_backend_name(accel_coll_backend b) {
    switch (b) {
    case ACCEL_COLL_BACKEND_NONE: return "none";
    case ACCEL_COLL_BACKEND_MPI: return "mpi";
    case ACCEL_COLL_BACKEND_NCCL: return "nccl";
    default: return "auto";
    }
}
ACCEL__DEF const char *accel_coll_op_name(accel_coll_op op) {
    static const char *n[] = {"sum", "avg", "max", "min", "prod"};
    return ((int)op >= 0 && (int)op < ACCEL_COLL_OP_COUNT) ? n[op] : "?";
}
ACCEL__DEF int accel_coll_rank(const accel_coll *c) { return c ? c->rank : -1; }
ACCEL__DEF int accel_coll_size(const accel_coll *c) { return c ? c->size : 0; }
ACCEL__DEF accel_coll_backend accel_coll_get_backend(const accel_coll *c) { return c ? c->backend : ACCEL_COLL_BACKEND_AUTO; }
ACCEL__DEF int accel_coll_uses_device_buffers(const accel_coll *c) { return c ? c->device_mem : 0; }
ACCEL__DEF accel *accel_coll_accel(const accel_coll *c) { return c ? c->acc : NULL; }

static int accel__coll_reducible(accel_dtype dt) {
    return dt == ACCEL_F64 || dt == ACCEL_F32 || dt == ACCEL_F16 || dt == ACCEL_BF16 || dt == ACCEL_I64 ||
           dt == ACCEL_I32 || dt == ACCEL_U8;
}

/* ------------------------------------------------------------------------------------------------------ 3. MPI bits */
#ifdef ACCEL_WITH_MPI
/* MPI_Testall without statuses, in one place: MPICH defines MPI_STATUSES_IGNORE as (MPI_Status *)1 and GCC's access
   attribute on MPI_Testall then warns (-Wstringop-overflow) that count statuses are written to a region of size 0 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#endif
static int accel__mpi_testall(int n, MPI_Request *reqs, int *done) { return MPI_Testall(n, reqs, done, MPI_STATUSES_IGNORE); }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#define ACCEL__COLL_USER_OP(NAME, OP, BF)                                                                              \
    static void NAME(void *in, void *inout, int *len, MPI_Datatype *dtp) {                                             \
        const uint16_t *a = (const uint16_t *)in;                                                                      \
        uint16_t *b = (uint16_t *)inout;                                                                               \
        int i;                                                                                                         \
        (void)dtp;                                                                                                     \
        for (i = 0; i < *len; ++i) b[i] = accel__coll_combine16(a[i], b[i], OP, BF);                                   \
    }
ACCEL__COLL_USER_OP(accel__coll_op_f16_sum, ACCEL_COLL_SUM, 0)
ACCEL__COLL_USER_OP(accel__coll_op_f16_prod, ACCEL_COLL_PROD, 0)
ACCEL__COLL_USER_OP(accel__coll_op_f16_max, ACCEL_COLL_MAX, 0)
ACCEL__COLL_USER_OP(accel__coll_op_f16_min, ACCEL_COLL_MIN, 0)
ACCEL__COLL_USER_OP(accel__coll_op_bf16_sum, ACCEL_COLL_SUM, 1)
ACCEL__COLL_USER_OP(accel__coll_op_bf16_prod, ACCEL_COLL_PROD, 1)
ACCEL__COLL_USER_OP(accel__coll_op_bf16_max, ACCEL_COLL_MAX, 1)
ACCEL__COLL_USER_OP(accel__coll_op_bf16_min, ACCEL_COLL_MIN, 1)

static MPI_Datatype accel__coll_mpi_type(accel_dtype dt) {
    switch (dt) {
    case ACCEL_F64: return MPI_DOUBLE;
    case ACCEL_F32: return MPI_FLOAT;
    case ACCEL_F16: case ACCEL_BF16: case ACCEL_U16: return MPI_UINT16_T;
    case ACCEL_I64: return MPI_INT64_T;
    case ACCEL_I32: return MPI_INT32_T;
    case ACCEL_I16: return MPI_INT16_T;
    case ACCEL_I8: return MPI_INT8_T;
    case ACCEL_U64: return MPI_UINT64_T;
    case ACCEL_U32: return MPI_UINT32_T;
    default: return MPI_UINT8_T;
    }
}
static MPI_Op accel__coll_mpi_op(accel_coll *c, accel_dtype dt, accel_coll_op op) {
    int k = op == ACCEL_COLL_PROD ? 1 : op == ACCEL_COLL_MAX ? 2 : op == ACCEL_COLL_MIN ? 3 : 0;
    if (dt == ACCEL_F16 || dt == ACCEL_BF16) return c->op16[dt == ACCEL_BF16][k];
    switch (op) {
    case ACCEL_COLL_MAX: return MPI_MAX;
    case ACCEL_COLL_MIN: return MPI_MIN;
    case ACCEL_COLL_PROD: return MPI_PROD;
    default: return MPI_SUM;
    }
}
#endif

/* ----------------------------------------------------------------------------------------------------- 4. NCCL bits */
#ifdef ACCEL__COLL_NCCL
static accel_result accel__coll_nccl_fail(accel_coll *c, ncclResult_t rc, const char *what, int line) {
    const char *last = c->nccl_valid ? ncclGetLastError(c->nccl) : NULL;
    return accel__fail(c->acc, ACCEL_ERR_NCCL, __FILE__, line, "%s failed: %s%s%s", what, ncclGetErrorString(rc),
                       last && *last ? ": " : "", last ? last : "");
}
static ncclDataType_t accel__coll_nccl_type(accel_dtype dt) {
    switch (dt) {
    case ACCEL_F64: return ncclFloat64;
    case ACCEL_F32: return ncclFloat32;
    case ACCEL_F16: return ncclFloat16;
    case ACCEL_BF16: return ncclBfloat16;
    case ACCEL_I64: return ncclInt64;
    case ACCEL_I32: return ncclInt32;
    case ACCEL_U64: return ncclUint64;
    case ACCEL_U32: return ncclUint32;
    case ACCEL_I8: return ncclInt8;
    default: return ncclUint8;
    }
}
static ncclRedOp_t accel__coll_nccl_op(accel_coll_op op) {
    switch (op) {
    /* AVG: SUM here, then the division (accel__coll_post_nccl); ncclAvg pre-multiplies by 1/nranks instead */
    case ACCEL_COLL_MAX: return ncclMax;
    case ACCEL_COLL_MIN: return ncclMin;
    case ACCEL_COLL_PROD: return ncclProd;
    default: return ncclSum;
    }
}
/* A non-blocking communicator may answer ncclInProgress: poll until the call is really enqueued (or fails or the
   deadline passes, which aborts the communicator). */
static accel_result accel__coll_nccl_settle(accel_coll *c, ncclResult_t rc, const char *what, int line) {
    double deadline = accel__coll_deadline(c);
    while (rc == ncclInProgress) {
        ncclResult_t st = ncclSuccess;
        ncclResult_t q = ncclCommGetAsyncError(c->nccl, &st);
        if (q != ncclSuccess) { rc = q; break; }
        rc = st;
        if (rc != ncclInProgress) break;
        if (accel_now() > deadline) {
            ncclCommAbort(c->nccl);
            c->nccl_valid = 0;
            c->broken = ACCEL_ERR_TIMEOUT;
            return accel__fail(c->acc, ACCEL_ERR_TIMEOUT, __FILE__, line, "%s did not complete within %.1f s; NCCL communicator aborted",
                               what, c->timeout_s);
        }
        sched_yield();
    }
    if (rc != ncclSuccess) {
        accel_result r = accel__coll_nccl_fail(c, rc, what, line);
        if (c->nccl_valid) { ncclCommAbort(c->nccl); c->nccl_valid = 0; }
        c->broken = ACCEL_ERR_NCCL;
        return r;
    }
    return ACCEL_OK;
}
#define ACCEL__COLL_NCCL_CALL(c, call)                                                                                \
    do {                                                                                                               \
        accel_result accel__nr = accel__coll_nccl_settle((c), (call), #call, __LINE__);                                \
        if (accel__nr != ACCEL_OK) return accel__nr;                                                                   \
    } while (0)
#endif

#ifdef ACCEL__COLL_DEVICE
static cudaStream_t accel__coll_stream(accel_coll *c) { return (cudaStream_t)c->acc->stream; }
#endif

/* ----------------------------------------------------------------- 5. agreement of local failures, create / destroy */
static accel_result accel__coll_nccl_init(accel_coll *c);
static void accel__coll_host_group_install(accel_coll *c);

/* The collective form of a local result over a context's group: every rank returns an error when any rank failed (the
   failed rank keeps its own error; the others get ACCEL_ERR_REMOTE). A context on the host group agrees through the
   core (accel__agree: the failed rank's message travels along); a context on its own MPI communicator
   (desc.mpi_comm) exchanges the statuses on that communicator, with the deadline. */
#ifdef ACCEL_WITH_MPI
static accel_result accel__coll_agree_mpi(accel *acc, MPI_Comm comm, accel_result local, const char *what, double deadline) {
    int P = 1, mine = (int)local, stack_all[64], *all, i, failed = -1;
    MPI_Request q;
    accel_result r;
    MPI_Comm_size(comm, &P);
    if (P <= 1) return local;
    all = P <= 64 ? stack_all : (int *)accel_host_alloc(acc, sizeof(int) * (size_t)P);
    if (!all) return ACCEL_ERR_OUT_OF_MEMORY; /* the peers then reach their deadline */
    r = MPI_Iallgather(&mine, 1, MPI_INT, all, 1, MPI_INT, comm, &q) == MPI_SUCCESS
            ? accel__mpi_wait(acc, &q, deadline, what)
            : ACCEL__FAIL(acc, ACCEL_ERR_MPI, "%s: MPI_Iallgather of the statuses failed", what);
    for (i = 0; r == ACCEL_OK && i < P; ++i)
        if (all[i] != ACCEL_OK && failed < 0) failed = i;
    if (r == ACCEL_OK && local == ACCEL_OK && failed >= 0)
        r = ACCEL__FAIL(acc, ACCEL_ERR_REMOTE, "rank %d of this communicator failed in %s (%s)", failed, what,
                        accel_result_string((accel_result)all[failed]));
    if (all != stack_all) accel_host_free(acc, all);
    return local != ACCEL_OK ? local : r;
}
#endif
static accel_result accel__coll_agree(accel_coll *c, accel_result local, const char *what) {
    if (c->size <= 1) return local;
    if (c->on_host_group) return accel__agree(c->acc, local, what);
#ifdef ACCEL_WITH_MPI
    if (c->comm_valid) return accel__coll_agree_mpi(c->acc, c->comm, local, what, accel__coll_deadline(c));
#endif
    return local;
}

/* The eager limit of the MPI library's shared-memory path: a message above it waits for the receiver (rendezvous).
   Open MPI's vader: 4 KiB including its header; MPICH's: 8 KiB. The 2-rank all-reduce picks its algorithm by it. */
static size_t accel__coll_eager_limit(void) {
#ifdef ACCEL_WITH_MPI
    char v[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    if (MPI_Get_library_version(v, &len) == MPI_SUCCESS && len > 0 && strstr(v, "MPICH")) return 8192;
#endif
    return 4032;
}

ACCEL__DEF accel_result accel_coll_create(accel *acc, const accel_coll_desc *desc, accel_coll **out) {
    accel_coll_desc d;
    accel_coll *c = NULL;
    accel_result r = ACCEL_OK;
    void *mcomm = NULL;
    double timeout_s;
    if (!acc || !out) return accel__fail(acc, ACCEL_ERR_INVALID_ARGUMENT, __FILE__, __LINE__, "accel_coll_create: NULL argument");
    *out = NULL;
    if (desc) d = *desc;
    else memset(&d, 0, sizeof d);
    timeout_s = 1e-3 * (double)(d.timeout_ms > 0 ? d.timeout_ms : acc->desc.collective_timeout_ms > 0 ? acc->desc.collective_timeout_ms : 1800000);
    /* local checks first; then one agreement before anything collective (MPI_Comm_dup, the NCCL bootstrap), so a rank
       whose arguments were bad fails every rank instead of leaving the others blocked in MPI_Comm_dup */
    if ((int)d.backend < 0 || (int)d.backend > (int)ACCEL_COLL_BACKEND_NCCL)
        r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_coll_desc.backend=%d is not an accel_coll_backend", (int)d.backend);
    else if (d.timeout_ms < 0)
        r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_coll_desc.timeout_ms=%d must be >= 0", d.timeout_ms);
    else if ((int)d.debug < (int)ACCEL_OFF || (int)d.debug > (int)ACCEL_ON || (int)d.cuda_aware_mpi < (int)ACCEL_OFF ||
             (int)d.cuda_aware_mpi > (int)ACCEL_ON)
        r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_coll_desc: debug=%d / cuda_aware_mpi=%d is not an "
                        "accel_toggle (ACCEL_DEFAULT, ACCEL_ON, ACCEL_OFF)", (int)d.debug, (int)d.cuda_aware_mpi);
#ifndef ACCEL_WITH_MPI
    else if (d.mpi_comm)
        r = ACCEL__FAIL(acc, ACCEL_ERR_UNSUPPORTED, "accel_coll_desc.mpi_comm given but the implementation was built without ACCEL_WITH_MPI");
#endif
    if (r == ACCEL_OK) {
        c = (accel_coll *)accel_host_alloc(acc, sizeof *c);
        if (!c) r = ACCEL_ERR_OUT_OF_MEMORY;
    }
    if (r == ACCEL_OK) {
        memset(c, 0, sizeof *c);
        c->acc = acc;
        c->debug = d.debug == ACCEL_ON ? 1 : d.debug == ACCEL_OFF ? 0 : acc->debug;
        c->watchdog = !d.no_watchdog;
        c->timeout_s = timeout_s;
        c->eager_bytes = accel__coll_eager_limit();
        c->device_mem = acc->device >= 0 && !d.host_buffers;
        c->rank = acc->process_index;
        c->size = acc->num_processes;
        c->on_host_group = !d.mpi_comm;
#ifdef ACCEL_WITH_MPI
        mcomm = d.mpi_comm ? d.mpi_comm : accel__mpi_comm(acc);
        if (mcomm) {
            int inited = 0;
            MPI_Initialized(&inited);
            if (!inited) mcomm = NULL;
        }
        if (mcomm && (d.mpi_comm || acc->mpi_active)) {
            MPI_Comm_rank(*(MPI_Comm *)mcomm, &c->rank);
            MPI_Comm_size(*(MPI_Comm *)mcomm, &c->size);
        } else if (!d.mpi_comm) {
            mcomm = NULL;
        }
#endif
        /* backend choice */
        c->backend = d.backend;
        if (c->backend == ACCEL_COLL_BACKEND_AUTO) {
#ifdef ACCEL__COLL_NCCL
            if (c->device_mem && c->size > 1) c->backend = ACCEL_COLL_BACKEND_NCCL;
            else
#endif
            if (c->size <= 1) c->backend = ACCEL_COLL_BACKEND_NONE;
            else if (mcomm) c->backend = ACCEL_COLL_BACKEND_MPI;
            else r = ACCEL__FAIL(acc, ACCEL_ERR_UNSUPPORTED,
                                 "collectives across %d processes need MPI (mpirun/srun and ACCEL_WITH_MPI) or NCCL (an nvcc-built "
                                 "implementation TU with ACCEL_WITH_NCCL and a GPU)", c->size);
        } else if (c->backend == ACCEL_COLL_BACKEND_NONE && c->size > 1) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "backend none cannot serve a group of %d processes", c->size);
        } else if (c->backend == ACCEL_COLL_BACKEND_MPI && !mcomm) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_UNSUPPORTED, "backend mpi requested but MPI is not the process group (build with ACCEL_WITH_MPI and launch with mpirun/srun)");
        } else if (c->backend == ACCEL_COLL_BACKEND_NCCL) {
#ifndef ACCEL__COLL_NCCL
            r = ACCEL__FAIL(acc, ACCEL_ERR_UNSUPPORTED, "backend nccl needs the ACCEL_IMPLEMENTATION TU compiled with nvcc and ACCEL_WITH_NCCL");
#else
            if (!c->device_mem) r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "backend nccl needs a CUDA device (acc.device >= 0) and device buffers");
#endif
        }
#ifndef ACCEL__COLL_DEVICE
        if (r == ACCEL_OK && c->device_mem)
            r = ACCEL__FAIL(acc, ACCEL_ERR_UNSUPPORTED, "device buffers need the ACCEL_IMPLEMENTATION TU compiled with nvcc "
                            "(or set accel_coll_desc.host_buffers)");
#endif
    }
    if (!d.mpi_comm) r = accel__agree(acc, r, "accel_coll_create");
#ifdef ACCEL_WITH_MPI
    else {
        int inited = 0;
        MPI_Initialized(&inited);
        if (inited) r = accel__coll_agree_mpi(acc, *(MPI_Comm *)d.mpi_comm, r, "accel_coll_create", accel_now() + timeout_s);
    }
#endif
    if (r != ACCEL_OK) { accel_host_free(acc, c); return r; }

#ifdef ACCEL_WITH_MPI
    if (mcomm && c->backend != ACCEL_COLL_BACKEND_NONE) {
        int mrc = MPI_Comm_dup(*(MPI_Comm *)mcomm, &c->comm);
        if (mrc != MPI_SUCCESS) { r = accel__mpi_fail(c->acc, mrc, "MPI_Comm_dup", __FILE__, __LINE__); accel_host_free(acc, c); return r; }
        c->comm_valid = 1;
        MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
        {
            MPI_User_function *fns[2][4];
            int i, j;
            fns[0][0] = accel__coll_op_f16_sum; fns[0][1] = accel__coll_op_f16_prod;
            fns[0][2] = accel__coll_op_f16_max; fns[0][3] = accel__coll_op_f16_min;
            fns[1][0] = accel__coll_op_bf16_sum; fns[1][1] = accel__coll_op_bf16_prod;
            fns[1][2] = accel__coll_op_bf16_max; fns[1][3] = accel__coll_op_bf16_min;
            for (i = 0; i < 2; ++i)
                for (j = 0; j < 4; ++j) MPI_Op_create(fns[i][j], 1, &c->op16[i][j]);
            c->ops_valid = 1;
        }
        /* CUDA-aware MPI: environment override, else the library's own answer */
        if (c->device_mem) {
            const char *e = getenv("ACCEL_CUDA_AWARE_MPI");
            int b = e && *e ? accel_parse_bool(e) : -1;
            if (d.cuda_aware_mpi == ACCEL_ON) c->cuda_aware = 1;
            else if (d.cuda_aware_mpi == ACCEL_OFF) c->cuda_aware = 0;
            else if (b >= 0) c->cuda_aware = b;
            else {
#if defined(ACCEL__COLL_DEVICE) && defined(MPIX_CUDA_AWARE_SUPPORT)
                c->cuda_aware = MPIX_Query_cuda_support() ? 1 : 0;
#elif defined(ACCEL__COLL_DEVICE) && defined(MPICH_NUMVERSION) && MPICH_NUMVERSION >= 40000000 && defined(MPIX_GPU_SUPPORT_CUDA)
                {
                    int ok = 0;
                    if (MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA, &ok) == MPI_SUCCESS) c->cuda_aware = ok ? 1 : 0;
                }
#else
                c->cuda_aware = 0;
#endif
            }
            accel_log(acc, ACCEL_LOG_INFO, "MPI device buffers: %s", c->cuda_aware ? "CUDA-aware MPI" : "staged through pinned host memory");
        }
    }
#endif
    if (c->backend == ACCEL_COLL_BACKEND_NCCL) r = accel__coll_nccl_init(c);
    /* all or nothing: a rank whose setup failed (NCCL bootstrap, device memory) fails every rank */
    r = accel__coll_agree(c, r, "accel_coll_create (setup)");
    if (r != ACCEL_OK) { accel_coll_destroy(c); return r; }
    /* no host process group (several processes without MPI or torchrun's store): an NCCL context over the whole group
       becomes it, so amp, ckpt and trackers work too */
    if (c->backend == ACCEL_COLL_BACKEND_NCCL && c->on_host_group) accel__coll_host_group_install(c);
    accel_log(acc, ACCEL_LOG_DEBUG, "accel_coll: backend %s, rank %d of %d, %s buffers, timeout %.1f s",
               accel_coll_backend_name(c->backend), c->rank, c->size, c->device_mem ? "device" : "host", c->timeout_s);
    *out = c;
    return ACCEL_OK;
}

static void accel__coll_release(accel_coll_request *q);

ACCEL__DEF void accel_coll_destroy(accel_coll *c) {
    accel *acc;
    accel_coll_request *q, *nx;
    int pending = 0;
    if (!c) return;
    acc = c->acc;
    if (c->host_group) accel__group_uninstall(acc, c); /* host collectives need a group again (or fail) */
    /* requests abandoned after a deadline: give them a moment, then leak them (MPI forbids freeing an unfinished
       collective request) */
    {
        double until = accel_now() + 0.2;
        (void)until;
        for (q = c->orphans; q; q = nx) {
            nx = q->next;
#ifdef ACCEL_WITH_MPI
            if (q->has_mreq) {
                int done = 0;
                while (!done && accel_now() < until)
                    if ((q->ring ? accel__mpi_testall(q->nrq, q->rq, &done)
                                 : MPI_Test(&q->mreq, &done, MPI_STATUS_IGNORE)) != MPI_SUCCESS) break;
                if (done) { q->has_mreq = 0; accel__coll_release(q); continue; }
                ++pending;
                continue;
            }
#endif
            accel__coll_release(q);
        }
    }
    if (pending) accel_log(acc, ACCEL_LOG_WARN, "accel_coll_destroy: %d timed-out operation(s) never completed; their buffers are leaked", pending);
#ifdef ACCEL__COLL_NCCL
    if (c->nccl_valid) {
        if (c->broken) ncclCommAbort(c->nccl);
        else {
            ncclResult_t rc = ncclCommFinalize(c->nccl);
            double deadline = accel__coll_deadline(c);
            while (rc == ncclInProgress && accel_now() < deadline) {
                ncclResult_t st = ncclSuccess;
                if (ncclCommGetAsyncError(c->nccl, &st) != ncclSuccess) break;
                rc = st;
            }
            if (rc == ncclSuccess) ncclCommDestroy(c->nccl);
            else ncclCommAbort(c->nccl);
        }
        c->nccl_valid = 0;
    }
    if (c->comm_stream) cudaStreamDestroy(c->comm_stream);
    accel_device_free(acc, c->scratch);
#endif
#ifdef ACCEL_WITH_MPI
    {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized) {
            if (c->ops_valid) {
                int i, j;
                for (i = 0; i < 2; ++i)
                    for (j = 0; j < 4; ++j) MPI_Op_free(&c->op16[i][j]);
            }
            if (c->comm_valid && !pending) MPI_Comm_free(&c->comm);
        }
    }
    accel_host_free(acc, c->ring_cache);
#endif
    accel_host_free(acc, c);
}

/* ---------------------------------------------------------------------- 6. copies, pre-scaling, completing requests */
/* copy between memories: dir 0 host→host, 1 host→device, 2 device→host, 3 device→device (on acc.stream; host
   directions synchronize the stream) */
static accel_result accel__coll_copy(accel_coll *c, void *dst, const void *src, size_t bytes, int dir) {
    if (bytes == 0 || dst == src) return ACCEL_OK;
    if (dir == 0) { memmove(dst, src, bytes); return ACCEL_OK; }
#ifdef ACCEL__COLL_DEVICE
    {
        cudaMemcpyKind k = dir == 1 ? cudaMemcpyHostToDevice : dir == 2 ? cudaMemcpyDeviceToHost : cudaMemcpyDeviceToDevice;
        ACCEL__CUDA_CHECK(c->acc, cudaMemcpyAsync(dst, src, bytes, k, accel__coll_stream(c)));
        if (dir != 3) ACCEL__CUDA_CHECK(c->acc, cudaStreamSynchronize(accel__coll_stream(c)));
        return ACCEL_OK;
    }
#else
    return accel__fail(c->acc, ACCEL_ERR_UNSUPPORTED, __FILE__, __LINE__, "device copies need the ACCEL_IMPLEMENTATION TU compiled with nvcc");
#endif
}
/* copy within the user's memory kind */
static accel_result accel__coll_copy_same(accel_coll *c, void *dst, const void *src, size_t bytes, int mem_dev) {
    return accel__coll_copy(c, dst, src, bytes, mem_dev ? 3 : 0);
}

static void accel__coll_divide_host(void *buf, size_t n, accel_dtype dt, double by) {
    size_t i;
    if (dt == ACCEL_F32) {
        float *f = (float *)buf, inv = (float)by;
        for (i = 0; i < n; ++i) f[i] = f[i] / inv;
        return;
    }
    for (i = 0; i < n; ++i) accel__coll_div_elem(buf, i, (int)dt, by);
}

/* dst[0..n) = src[0..n) * fl(1/by) in the context's memory (DDP's pre-scaling; by = the group size, or with join the
   ranks still training; dst may equal src): a host loop, or a kernel on acc.stream. */
static accel_result accel__coll_prescale_by(accel_coll *c, void *dst, const void *src, size_t n, accel_dtype dt, double by) {
    size_t i;
    if (n == 0) return ACCEL_OK;
    if (!c->device_mem) {
        if (dt == ACCEL_F32) { /* the common case, as a plain loop the compiler vectorizes */
            const float *sf = (const float *)src;
            float *df = (float *)dst, inv = (float)(1.0 / by);
            for (i = 0; i < n; ++i) df[i] = sf[i] * inv;
        } else {
            for (i = 0; i < n; ++i) accel__coll_prescale_elem(dst, src, i, (int)dt, by);
        }
        return ACCEL_OK;
    }
#ifdef ACCEL__COLL_DEVICE
    accel__coll_prescale_kernel<<<accel__coll_blocks(n), 256, 0, accel__coll_stream(c)>>>(dst, src, n, (int)dt, by);
    ACCEL__CUDA_CHECK(c->acc, cudaGetLastError());
    return ACCEL_OK;
#else
    return ACCEL__FAIL(c->acc, ACCEL_ERR_UNSUPPORTED, "device gradients need the ACCEL_IMPLEMENTATION TU compiled with nvcc");
#endif
}
static accel_result accel__coll_prescale(accel_coll *c, void *dst, const void *src, size_t n, accel_dtype dt) {
    return accel__coll_prescale_by(c, dst, src, n, dt, (double)c->size);
}

static void accel__coll_release(accel_coll_request *q) {
    accel_coll *c = q->c;
#ifdef ACCEL_WITH_MPI
    if (q->ring_tmp) {
        if (!c->ring_cache && !q->has_mreq) { c->ring_cache = q->ring_tmp; c->ring_cache_bytes = q->ring_tmp_bytes; }
        else accel_host_free(c->acc, q->ring_tmp);
    }
#endif
    if (q->stage_kind == 1) accel_pinned_free(c->acc, q->stage);
    else if (q->stage_kind == 2) accel_device_free(c->acc, q->stage);
#ifdef ACCEL__COLL_NCCL
    if (q->has_ev) cudaEventDestroy(q->ev);
#endif
    accel_host_free(c->acc, q->ivec);
    accel_host_free(c->acc, q);
}

static void accel__coll_orphan(accel_coll_request *q) {
    q->next = q->c->orphans;
    q->c->orphans = q;
}

#ifdef ACCEL_WITH_MPI
/* Ring all-reduce of the polled (deadline) path: reduce-scatter then allgather, 2(P-1) steps of one MPI_Isend to the
   right neighbour and one MPI_Irecv from the left, chunk k = elements [k*n/P ..) (the first n%P chunks one longer),
   partial sums by MPI_Reduce_local. It replaces MPI_Iallreduce for host buffers of >= ACCEL__COLL_RING_MIN_BYTES:
   Open MPI's libnbc runs MPI_Iallreduce on fewer than 4 ranks as a binomial reduce + broadcast (twice the critical
   path of the blocking call's ring / recursive doubling), which made the deadline path 0.78-0.87x MPI_Allreduce.
   Every chunk is reduced on one rank and then copied, so all ranks hold the same bits. The tag is the context's ring
   counter (every rank posts the same collectives in the same order), so concurrent async all-reduces don't mix.
   Used on 2 ranks only: there an element is one commutative operation (a op b == b op a bitwise, whatever the
   algorithm), so results equal MPI's own to the bit. With 3+ ranks the ring's association order depends on an
   element's chunk, so a bucket reduced by the ring would differ in the last bit from the same tensor reduced alone;
   3+ ranks take the direct all-reduce below instead (accel__coll_direct_*).
   Below ACCEL__COLL_RING_MIN_BYTES on 2 ranks the ring is one exchange (q->ring == 2): each rank sends its whole
   buffer and receives the peer's, then both compute rank0 op rank1 in that operand order (rank 0 reduces into the
   scratch and copies back), so the ranks agree to the bit even for MAX/MIN with NaN or signed zeros. That is one
   message latency, MPI_Allreduce's recursive doubling; libnbc's reduce + broadcast is two (train_digits' 19 KB
   gradient all-reduce was 0.91-0.94x the hand-written trainer end to end). One exception: a whole buffer just over
   the shared-memory eager limit (Open MPI's btl_vader_eager_limit, 4 KiB with its header) goes by rendezvous, 2.7x
   slower than two eager halves, so 4-8 KiB take the ring (measured: 4096 B 0.37x MPI_Allreduce as an exchange, 0.88x
   as a ring; 1-4 KiB and 8-64 KiB the other way round). MPICH's limit is 8 KiB (12 KiB: 0.59x as an exchange). */
#define ACCEL__COLL_RING_MIN_BYTES ((size_t)65536)
static int accel__coll_exchange(const accel_coll *c, size_t bytes) {
    return bytes <= c->eager_bytes || (bytes > 2 * c->eager_bytes && bytes < ACCEL__COLL_RING_MIN_BYTES);
}

static void accel__coll_ring_chunk(const accel_coll_request *q, int k, size_t *off, int *cnt) {
    size_t P = (size_t)q->c->size, base = q->count / P, rem = q->count % P, kk = (size_t)k;
    *off = kk * base + (kk < rem ? kk : rem);
    *cnt = (int)(base + (kk < rem ? 1 : 0));
}

/* the chunks step s sends and receives */
static void accel__coll_ring_chunks(const accel_coll_request *q, int s, int *sk, int *rk) {
    int P = q->c->size, r = q->c->rank, g = s < P - 1 ? s : s - (P - 1);
    if (s < P - 1) { *sk = (r - g + 2 * P) % P; *rk = (r - g - 1 + 2 * P) % P; } /* reduce-scatter */
    else { *sk = (r + 1 - g + 2 * P) % P; *rk = (r - g + 2 * P) % P; }          /* allgather of the reduced chunks */
}

static int accel__coll_ring_post(accel_coll_request *q) {
    accel_coll *c = q->c;
    int P = c->size, sk, rk, scnt, rcnt, mrc, direct;
    size_t es = accel_dtype_size(q->dt), soff, roff;
    if (q->ring == 2) { /* the whole-buffer exchange */
        mrc = MPI_Irecv(q->ring_direct ? q->ring_buf : q->ring_tmp, (int)q->count, q->ring_t, 1 - c->rank, q->ring_tag,
                        c->comm, &q->rreq[1]);
        if (mrc == MPI_SUCCESS)
            mrc = MPI_Isend(q->ring_direct ? q->ring_src : q->ring_buf, (int)q->count, q->ring_t, 1 - c->rank, q->ring_tag,
                            c->comm, &q->rreq[0]);
        return mrc;
    }
    accel__coll_ring_chunks(q, q->ring_step, &sk, &rk);
    accel__coll_ring_chunk(q, sk, &soff, &scnt);
    accel__coll_ring_chunk(q, rk, &roff, &rcnt);
    direct = q->ring_direct && q->ring_step == 0;
    mrc = MPI_Irecv(q->ring_step < P - 1 && !direct ? (void *)q->ring_tmp : (void *)(q->ring_buf + roff * es), rcnt,
                    q->ring_t, (c->rank + P - 1) % P, q->ring_tag, c->comm, &q->rreq[1]);
    if (mrc == MPI_SUCCESS)
        mrc = MPI_Isend((direct ? q->ring_src : q->ring_buf) + soff * es, scnt, q->ring_t, (c->rank + 1) % P, q->ring_tag,
                        c->comm, &q->rreq[0]);
    return mrc;
}

/* advances the ring as far as it goes without blocking; *flag = 1 once complete */
static int accel__coll_ring_test(accel_coll_request *q, int *flag) {
    int P = q->c->size, mrc, done, sk, rk, rcnt;
    size_t roff, es = accel_dtype_size(q->dt);
    *flag = 0;
    for (;;) {
        done = 0;
        mrc = accel__mpi_testall(2, q->rreq, &done);
        if (mrc != MPI_SUCCESS || !done) return mrc;
        if (q->ring == 2) { /* rank0 op rank1 on both ranks (MPI_Reduce_local: inout = in op inout) */
            if (q->ring_direct) { /* rank 0, not in place: rank 1's buffer arrived in ring_buf */
                mrc = MPI_Reduce_local(q->ring_src, q->ring_buf, (int)q->count, q->ring_t, q->ring_op);
            } else if (q->c->rank == 0) {
                mrc = MPI_Reduce_local(q->ring_buf, q->ring_tmp, (int)q->count, q->ring_t, q->ring_op);
                if (mrc == MPI_SUCCESS) memcpy(q->ring_buf, q->ring_tmp, q->count * es);
            } else {
                mrc = MPI_Reduce_local(q->ring_tmp, q->ring_buf, (int)q->count, q->ring_t, q->ring_op);
            }
            if (mrc == MPI_SUCCESS) *flag = 1;
            return mrc;
        }
        if (q->ring_step < P - 1) {
            accel__coll_ring_chunks(q, q->ring_step, &sk, &rk);
            accel__coll_ring_chunk(q, rk, &roff, &rcnt);
            if (q->ring_direct && q->ring_step == 0) /* mine op the left neighbour's, which arrived in ring_buf */
                mrc = MPI_Reduce_local(q->ring_src + roff * es, q->ring_buf + roff * es, rcnt, q->ring_t, q->ring_op);
            else
                mrc = MPI_Reduce_local(q->ring_tmp, q->ring_buf + roff * es, rcnt, q->ring_t, q->ring_op);
            if (mrc != MPI_SUCCESS) return mrc;
        }
        if (++q->ring_step == 2 * (P - 1)) { *flag = 1; return MPI_SUCCESS; }
        mrc = accel__coll_ring_post(q);
        if (mrc != MPI_SUCCESS) return mrc;
    }
}

/* the scratch of a point-to-point all-reduce: the context's cached buffer when it is large enough, else a new one */
static accel_result accel__coll_scratch(accel_coll *c, accel_coll_request *q, size_t bytes) {
    if (c->ring_cache && c->ring_cache_bytes >= bytes) {
        q->ring_tmp = (unsigned char *)c->ring_cache;
        q->ring_tmp_bytes = c->ring_cache_bytes;
        c->ring_cache = NULL;
        return ACCEL_OK;
    }
    q->ring_tmp = (unsigned char *)accel_host_alloc(c->acc, bytes);
    if (!q->ring_tmp) return ACCEL__FAIL(c->acc, ACCEL_ERR_OUT_OF_MEMORY, "all_reduce: %zu bytes of scratch", bytes);
    q->ring_tmp_bytes = bytes;
    return ACCEL_OK;
}

/* what every point-to-point all-reduce records: buffers (direct: the send buffer is read where it is), type, op, and
   the message tag (the context's counter: every rank posts the same collectives in the same order) */
static void accel__coll_p2p_init(accel_coll *c, accel_coll_request *q, const void *send, void *recv, MPI_Datatype t,
                                 MPI_Op op, int direct) {
    q->ring_step = 0;
    q->ring_direct = direct;
    q->ring_src = direct ? (const unsigned char *)send : (const unsigned char *)recv;
    q->ring_buf = (unsigned char *)recv;
    q->ring_t = t;
    q->ring_op = op;
    q->ring_tag = (int)(c->ring_seq++ % 32767u);
}

/* The 2-rank ring for chunks over 2 segments (q->ring == 5): step 0 sends the peer's chunk as segments of
   ACCEL__COLL_SEG_BYTES (all posted at once) and receives its own chunk segment by segment into two scratch slots,
   reducing each one as it arrives and posting the receive two segments ahead; step 1 is the ring's (one message
   each way). The same operations in the same operand order as the unsegmented ring, so the same bits; what changes
   is that a segment is reduced while it is in the cache: with one chunk-sized receive, a 16 MiB all-reduce wrote
   and re-read 8 MiB of scratch through memory. Not in place (ring_direct) the segments land in recv itself, as in
   the ring. rq: [0, nseg(peer's chunk)) the sends, then the two receive slots; step 1 uses rq[0] and rq[1].
   Only for chunks of ACCEL__COLL_SEG_MIN_CHUNK or more: below, both ranks' buffers and the scratch stay in the
   last-level cache anyway, and the per-segment handshakes cost more than they save (measured on a 2-core EPYC,
   32 MiB L3: 4 MiB all-reduces in segments 0.70-0.78x MPI_Allreduce in place, against 0.94-1.0x as one chunk;
   16 MiB 1.04-1.24x, against 0.91-1.11x). */
#define ACCEL__COLL_SEG_BYTES ((size_t)262144)
#define ACCEL__COLL_SEG_MIN_CHUNK ((size_t)4 << 20)

static int accel__coll_seg_n(const accel_coll_request *q, int chunk) {
    size_t off, seg = ACCEL__COLL_SEG_BYTES / accel_dtype_size(q->dt);
    int cnt;
    accel__coll_ring_chunk(q, chunk, &off, &cnt);
    return (int)(((size_t)cnt + seg - 1) / seg);
}

/* segment i of a chunk: its first element and its count */
static void accel__coll_seg_at(const accel_coll_request *q, int chunk, int i, size_t *off, int *cnt) {
    size_t seg = ACCEL__COLL_SEG_BYTES / accel_dtype_size(q->dt), left;
    accel__coll_ring_chunk(q, chunk, off, cnt);
    left = (size_t)*cnt - (size_t)i * seg;
    *off += (size_t)i * seg;
    *cnt = (int)(left < seg ? left : seg);
}

/* receive segment i of my chunk (1 - rank) */
static int accel__coll_seg_recv(accel_coll_request *q, int i) {
    size_t es = accel_dtype_size(q->dt), off;
    int cnt, ns = accel__coll_seg_n(q, q->c->rank);
    accel__coll_seg_at(q, 1 - q->c->rank, i, &off, &cnt);
    return MPI_Irecv(q->ring_direct ? q->ring_buf + off * es : q->dslots + (size_t)(i % 2) * ACCEL__COLL_SEG_BYTES, cnt,
                     q->ring_t, 1 - q->c->rank, q->ring_tag, q->c->comm, &q->rq[ns + i % 2]);
}

static int accel__coll_seg_test(accel_coll_request *q, int *flag) {
    accel_coll *c = q->c;
    int r = c->rank, ns = accel__coll_seg_n(q, r), nm = accel__coll_seg_n(q, 1 - r), mrc, done, mcnt, ocnt;
    size_t es = accel_dtype_size(q->dt), moff, ooff;
    *flag = 0;
    accel__coll_ring_chunk(q, 1 - r, &moff, &mcnt);
    accel__coll_ring_chunk(q, r, &ooff, &ocnt);
    if (q->ring_step == 0) {
        while (q->fold_k < nm) {
            int i = q->fold_k, cnt;
            size_t off;
            accel__coll_seg_at(q, 1 - r, i, &off, &cnt);
            done = 0;
            mrc = MPI_Test(&q->rq[ns + i % 2], &done, MPI_STATUS_IGNORE);
            if (mrc != MPI_SUCCESS || !done) return mrc;
            if (q->ring_direct) /* mine op the peer's, which arrived in recv (as the ring) */
                mrc = MPI_Reduce_local(q->ring_src + off * es, q->ring_buf + off * es, cnt, q->ring_t, q->ring_op);
            else
                mrc = MPI_Reduce_local(q->dslots + (size_t)(i % 2) * ACCEL__COLL_SEG_BYTES, q->ring_buf + off * es, cnt,
                                       q->ring_t, q->ring_op);
            if (mrc == MPI_SUCCESS && i + 2 < nm) mrc = accel__coll_seg_recv(q, i + 2);
            if (mrc != MPI_SUCCESS) return mrc;
            q->fold_k++;
        }
        done = 0;
        mrc = accel__mpi_testall(q->nrq, q->rq, &done); /* my sends of the peer's chunk: it is overwritten next */
        if (mrc != MPI_SUCCESS || !done) return mrc;
        q->ring_step = 1;
        mrc = MPI_Irecv(q->ring_buf + ooff * es, ocnt, q->ring_t, 1 - r, q->ring_tag, c->comm, &q->rq[1]);
        if (mrc == MPI_SUCCESS)
            mrc = MPI_Isend(q->ring_buf + moff * es, mcnt, q->ring_t, 1 - r, q->ring_tag, c->comm, &q->rq[0]);
        if (mrc != MPI_SUCCESS) return mrc;
    }
    done = 0;
    mrc = accel__mpi_testall(q->nrq, q->rq, &done);
    if (mrc == MPI_SUCCESS && done) *flag = 1;
    return mrc;
}

static accel_result accel__coll_seg_start(accel_coll *c, accel_coll_request *q, int direct) {
    int r = c->rank, ns = accel__coll_seg_n(q, r), nm = accel__coll_seg_n(q, 1 - r), i, mrc = MPI_SUCCESS;
    size_t reqb = ((size_t)(ns + 2) * sizeof(MPI_Request) + 63) & ~(size_t)63, tmp = reqb + (direct ? 0 : 2 * ACCEL__COLL_SEG_BYTES);
    accel_result ar = accel__coll_scratch(c, q, tmp);
    if (ar != ACCEL_OK) return ar;
    q->ring = 5;
    q->rq = (MPI_Request *)(void *)q->ring_tmp;
    q->nrq = ns + 2;
    q->dslots = q->ring_tmp + reqb;
    q->fold_k = 0;
    for (i = 0; i < ns + 2; ++i) q->rq[i] = MPI_REQUEST_NULL;
    q->has_mreq = 1;
    for (i = 0; i < 2 && i < nm && mrc == MPI_SUCCESS; ++i) mrc = accel__coll_seg_recv(q, i);
    for (i = 0; i < ns && mrc == MPI_SUCCESS; ++i) { /* the peer's chunk (mine: rank), all its segments */
        size_t off;
        int cnt;
        accel__coll_seg_at(q, r, i, &off, &cnt);
        mrc = MPI_Isend(q->ring_src + off * accel_dtype_size(q->dt), cnt, q->ring_t, 1 - r, q->ring_tag, c->comm, &q->rq[i]);
    }
    if (mrc != MPI_SUCCESS) return accel__mpi_fail(c->acc, mrc, "all_reduce (ring step 0)", __FILE__, __LINE__);
    return ACCEL_OK;
}

static accel_result accel__coll_ring_start(accel_coll *c, accel_coll_request *q, const void *send, void *recv, size_t es,
                                           MPI_Datatype t, MPI_Op op) {
    int exchange = accel__coll_exchange(c, q->count * es); /* 2 ranks, small: one exchange */
    int inplace = send == MPI_IN_PLACE || send == recv;
    /* Not in place, the send buffer is read where it is instead of being copied to recv first (that copy cost ~10 %
       of a 16 MiB 2-rank all-reduce): the ring's step 0 sends from it and receives the neighbour's chunk straight
       into recv, then recv = mine op neighbour's; the exchange does that on rank 0 (rank 0's operand comes first).
       Only the 2-rank ring (one reduce-scatter step) and rank 0 of the exchange need no scratch then. */
    int direct = !inplace && (exchange ? c->rank == 0 : c->size == 2);
    size_t tmp = direct ? 0 : exchange ? q->count * es : (q->count / (size_t)c->size + 1) * es;
    int mrc;
    accel_result ar;
    if (!inplace && !direct) memcpy(recv, send, q->count * es);
    q->ring_tmp = NULL;
    q->ring_tmp_bytes = 0;
    accel__coll_p2p_init(c, q, send, recv, t, op, direct);
    if (!exchange && c->size == 2 && (q->count / 2) * es >= ACCEL__COLL_SEG_MIN_CHUNK) return accel__coll_seg_start(c, q, direct);
    if (tmp > 0 && (ar = accel__coll_scratch(c, q, tmp)) != ACCEL_OK) return ar;
    q->ring = exchange ? 2 : 1;
    q->rreq[0] = q->rreq[1] = MPI_REQUEST_NULL;
    q->rq = q->rreq;
    q->nrq = 2;
    q->has_mreq = 1;
    mrc = accel__coll_ring_post(q);
    if (mrc != MPI_SUCCESS) return accel__mpi_fail(c->acc, mrc, "all_reduce (ring step 0)", __FILE__, __LINE__);
    return ACCEL_OK;
}

/* Direct all-reduce of the polled path on 3..ACCEL__COLL_DIRECT_MAX_RANKS ranks (q->ring == 3). Rank r owns chunk r
   (accel__coll_ring_chunk). Phase 1: every rank sends chunk k to rank k and receives its own chunk from every
   other rank, all at once, then folds the contributions in rank order: x0 op x1 op ... op x(P-1), left to right.
   Phase 2: every rank sends its folded chunk to every other rank. Why not a ring, as on 2 ranks: a ring adds an
   element's contributions starting from the rank that holds its chunk, so the association of a float sum depends
   on the element's position in the buffer: a tensor summed inside a bucket would differ in the last bit from the
   same tensor summed alone. Here every element of every buffer is the same rank-order sum, whatever the count or
   the position, and the ranks hold the same bits (each chunk is folded once, then copied). MPI_Iallreduce, which
   this replaces for 3+ ranks, has no such order (libnbc's ring, and its in-place fallback ran at 0.63-0.82x the
   blocking call on 4 ranks). It moves what a ring moves (each rank sends and receives (P-1)/P of the buffer twice
   and folds P-1 chunks) in 2 rounds of concurrent messages instead of 2(P-1) dependent steps.
   The fold never copies: MPI_Reduce_local(in, inout) writes inout = in op inout, and every op accel uses is
   commutative (a op b == b op a, bitwise for sums and products; MAX/MIN may pick the other of two NaNs or of -0/+0,
   the same choice on every rank), so the running value moves into whichever buffer is writable — a receive slot,
   then the own chunk of recv, where it stays. Not in place, the first other rank's chunk is received straight into
   recv's own chunk, so nothing is copied from the send buffer either. Scratch: P-1 receive slots of one chunk.
   Up to the MPI library's eager limit (c->eager_bytes) it is one round instead (q->ring == 4): every rank sends its
   whole buffer to every other rank and folds all P contributions itself, with the same calls in the same operand
   roles on every rank (MPI_Reduce_local(acc, x_k) for k = 1 .. P-1), so the ranks agree to the bit even for MAX/MIN
   with NaN or signed zeros, and a sum has the bits of the two-phase form. One message latency instead of two
   (3 ranks, 1 KiB: 0.46-0.82x MPI_Allreduce in two phases). */
#define ACCEL__COLL_DIRECT_MAX_RANKS 64

static unsigned char *accel__coll_direct_slot(const accel_coll_request *q, int k) { /* x_k's phase-1 receive buffer */
    int r = q->c->rank;
    size_t roff;
    int rcnt;
    accel__coll_ring_chunk(q, r, &roff, &rcnt);
    if (q->ring_direct && k == (r == 0 ? 1 : 0)) return q->ring_buf + roff * accel_dtype_size(q->dt);
    return q->dslots + (size_t)(k < r ? k : k - 1) * q->dslot_bytes;
}

/* posts phase 1 (ring_step 0) or phase 2 (1), or the one round (ring 4): rq[j] the send to, rq[P-1+j] the receive
   from the j-th other rank */
static int accel__coll_direct_post(accel_coll_request *q) {
    accel_coll *c = q->c;
    int P = c->size, r = c->rank, k, j, mrc = MPI_SUCCESS, mcnt, kcnt;
    size_t es = accel_dtype_size(q->dt), moff, koff;
    accel__coll_ring_chunk(q, r, &moff, &mcnt);
    for (j = 0; j < 2 * (P - 1); ++j) q->rq[j] = MPI_REQUEST_NULL;
    for (k = 0, j = 0; k < P && mrc == MPI_SUCCESS; ++k) {
        if (k == r) continue;
        if (q->ring == 4) { /* whole buffers: mine to rank k, rank k's into slot j */
            mrc = MPI_Irecv(q->dslots + (size_t)j * q->dslot_bytes, (int)q->count, q->ring_t, k, q->ring_tag, c->comm,
                            &q->rq[P - 1 + j]);
            if (mrc == MPI_SUCCESS) mrc = MPI_Isend(q->ring_src, (int)q->count, q->ring_t, k, q->ring_tag, c->comm, &q->rq[j]);
            ++j;
            continue;
        }
        accel__coll_ring_chunk(q, k, &koff, &kcnt);
        if (q->ring_step == 0) { /* chunk k to rank k; my chunk from rank k (empty chunks are not sent) */
            if (mcnt > 0)
                mrc = MPI_Irecv(accel__coll_direct_slot(q, k), mcnt, q->ring_t, k, q->ring_tag, c->comm, &q->rq[P - 1 + j]);
            if (mrc == MPI_SUCCESS && kcnt > 0)
                mrc = MPI_Isend(q->ring_src + koff * es, kcnt, q->ring_t, k, q->ring_tag, c->comm, &q->rq[j]);
        } else { /* my folded chunk to rank k; chunk k from rank k */
            if (kcnt > 0) mrc = MPI_Irecv(q->ring_buf + koff * es, kcnt, q->ring_t, k, q->ring_tag, c->comm, &q->rq[P - 1 + j]);
            if (mrc == MPI_SUCCESS && mcnt > 0)
                mrc = MPI_Isend(q->ring_buf + moff * es, mcnt, q->ring_t, k, q->ring_tag, c->comm, &q->rq[j]);
        }
        ++j;
    }
    return mrc;
}

static int accel__coll_direct_test(accel_coll_request *q, int *flag) {
    accel_coll *c = q->c;
    int P = c->size, r = c->rank, mrc, done, mcnt;
    size_t es = accel_dtype_size(q->dt), moff;
    unsigned char *own;
    *flag = 0;
    if (q->ring == 4) { /* one round: everything arrived (and mine left), then acc = x0; acc = acc op x_k, k = 1.. */
        unsigned char *acc = NULL;
        int k;
        done = 0;
        mrc = accel__mpi_testall(q->nrq, q->rq, &done);
        if (mrc != MPI_SUCCESS || !done) return mrc;
        if (q->ring_direct) memcpy(q->ring_buf, q->ring_src, q->count * es);
        for (k = 0; k < P; ++k) {
            unsigned char *xk = k == r ? q->ring_buf : q->dslots + (size_t)(k < r ? k : k - 1) * q->dslot_bytes;
            if (k > 0) {
                mrc = MPI_Reduce_local(acc, xk, (int)q->count, q->ring_t, q->ring_op);
                if (mrc != MPI_SUCCESS) return mrc;
            }
            acc = xk;
        }
        if (acc != q->ring_buf) memcpy(q->ring_buf, acc, q->count * es);
        *flag = 1;
        return MPI_SUCCESS;
    }
    accel__coll_ring_chunk(q, r, &moff, &mcnt);
    own = q->ring_buf + moff * es;
    if (q->ring_step == 0) {
        /* fold the contributions that arrived, in rank order */
        while (mcnt > 0 && q->fold_k < P) {
            int k = q->fold_k;
            unsigned char *xk;
            const unsigned char *in;
            if (k == r) {
                xk = q->ring_direct ? NULL : own; /* not in place, my contribution is read-only in the send buffer */
                in = q->ring_src + moff * es;
            } else {
                MPI_Request *rr = &q->rq[P - 1 + (k < r ? k : k - 1)];
                done = 0;
                mrc = MPI_Test(rr, &done, MPI_STATUS_IGNORE);
                if (mrc != MPI_SUCCESS || !done) return mrc;
                xk = accel__coll_direct_slot(q, k);
                in = xk;
            }
            if (k == 0) {
                q->fold_acc = xk ? xk : (unsigned char *)(uintptr_t)in; /* read-only only while it is x0 */
            } else if (q->fold_acc == own || !xk) {
                /* the running value stays where it is: it is in recv's own chunk, or x_k is read-only */
                mrc = MPI_Reduce_local(in, q->fold_acc, mcnt, q->ring_t, q->ring_op);
                if (mrc != MPI_SUCCESS) return mrc;
            } else {
                mrc = MPI_Reduce_local(q->fold_acc, xk, mcnt, q->ring_t, q->ring_op);
                if (mrc != MPI_SUCCESS) return mrc;
                q->fold_acc = xk;
            }
            q->fold_k++;
        }
        done = 0;
        mrc = accel__mpi_testall(q->nrq, q->rq, &done); /* the sends (recv's chunks are rewritten next) */
        if (mrc != MPI_SUCCESS || !done) return mrc;
        q->ring_step = 1;
        mrc = accel__coll_direct_post(q);
        if (mrc != MPI_SUCCESS) return mrc;
    }
    done = 0;
    mrc = accel__mpi_testall(q->nrq, q->rq, &done);
    if (mrc == MPI_SUCCESS && done) *flag = 1;
    return mrc;
}

static accel_result accel__coll_direct_start(accel_coll *c, accel_coll_request *q, const void *send, void *recv,
                                             size_t es, MPI_Datatype t, MPI_Op op) {
    int P = c->size, inplace = send == MPI_IN_PLACE || send == recv, mrc, one_round = q->count * es <= c->eager_bytes;
    size_t reqb = ((size_t)(2 * (P - 1)) * sizeof(MPI_Request) + 63) & ~(size_t)63;
    size_t slot = one_round ? q->count * es : (q->count / (size_t)P + 1) * es, tmp = reqb + (size_t)(P - 1) * slot;
    accel_result ar = accel__coll_scratch(c, q, tmp);
    if (ar != ACCEL_OK) return ar;
    accel__coll_p2p_init(c, q, send, recv, t, op, !inplace);
    q->ring = one_round ? 4 : 3;
    q->rq = (MPI_Request *)(void *)q->ring_tmp;
    q->nrq = 2 * (P - 1);
    q->dslots = q->ring_tmp + reqb;
    q->dslot_bytes = slot;
    q->fold_k = 0;
    q->fold_acc = NULL;
    q->has_mreq = 1;
    mrc = accel__coll_direct_post(q);
    if (mrc != MPI_SUCCESS) return accel__mpi_fail(c->acc, mrc, "all_reduce (direct, first round)", __FILE__, __LINE__);
    return ACCEL_OK;
}

static int accel__coll_mpi_test(accel_coll_request *q, int *flag) {
    if (q->ring == 5) return accel__coll_seg_test(q, flag);
    if (q->ring >= 3) return accel__coll_direct_test(q, flag);
    return q->ring ? accel__coll_ring_test(q, flag) : MPI_Test(&q->mreq, flag, MPI_STATUS_IGNORE);
}
#endif

static accel_result accel__coll_check_broken(accel_coll *c) {
    if (!c) return accel__coll_null();
    if (c->broken)
        return ACCEL__FAIL(c->acc, ACCEL_ERR_STATE, "this collective context failed earlier (%s) and cannot be used; "
                           "destroy it", accel_result_string(c->broken));
    return ACCEL_OK;
}

/* After the transfer completed: average, copy out of staging, free. */
static accel_result accel__coll_complete(accel_coll_request *q) {
    accel_coll *c = q->c;
    accel_result r = ACCEL_OK;
    if (q->avg_buf && q->avg_count) {
        if (!q->avg_dev) accel__coll_divide_host(q->avg_buf, q->avg_count, q->dt, (double)c->size);
#ifdef ACCEL__COLL_DEVICE
        else {
            cudaError_t e;
            accel__coll_div_kernel<<<accel__coll_blocks(q->avg_count), 256, 0, accel__coll_stream(c)>>>(
                q->avg_buf, q->avg_count, (int)q->dt, (double)c->size);
            e = cudaGetLastError();
            if (e != cudaSuccess) r = ACCEL__FAIL(c->acc, ACCEL_ERR_CUDA, "average kernel launch: %s", cudaGetErrorString(e));
        }
#endif
    }
    if (r == ACCEL_OK && q->copy_bytes) r = accel__coll_copy(c, q->copy_dst, q->copy_src, q->copy_bytes, q->copy_dir);
    accel__coll_release(q);
    return r;
}

/* One step of progress. Returns ACCEL_OK with *done, or an error (the request is then released or orphaned). */
static accel_result accel__coll_progress(accel_coll_request *q, int *done) {
    accel_coll *c = q->c;
    *done = 0;
    if (c->broken) { /* another operation of this context failed: don't wait for this one's deadline too */
        accel__coll_orphan(q);
        return ACCEL__FAIL(c->acc, c->broken, "%s abandoned: this collective context failed earlier (%s)",
                           accel__coll_kind_name(q->kind), accel_result_string(c->broken));
    }
#ifdef ACCEL_WITH_MPI
    if (q->has_mreq) {
        int flag = 0, mrc = accel__coll_mpi_test(q, &flag);
        if (mrc != MPI_SUCCESS) {
            accel_result r = accel__mpi_fail(c->acc, mrc, q->ring ? "all_reduce (ring step)" : "MPI_Test", __FILE__, __LINE__);
            c->broken = ACCEL_ERR_MPI;
            accel__coll_orphan(q);
            return r;
        }
        if (!flag) goto not_yet;
        q->has_mreq = 0;
    }
#endif
#ifdef ACCEL__COLL_NCCL
    if (q->has_ev) {
        cudaError_t e = cudaEventQuery(q->ev);
        if (e == cudaErrorNotReady) {
            ncclResult_t st = ncclSuccess;
            if (c->nccl_valid && ncclCommGetAsyncError(c->nccl, &st) == ncclSuccess && st != ncclSuccess && st != ncclInProgress) {
                accel_result r = accel__coll_nccl_fail(c, st, "NCCL asynchronous error", __LINE__);
                ncclCommAbort(c->nccl);
                c->nccl_valid = 0;
                c->broken = ACCEL_ERR_NCCL;
                accel__coll_orphan(q);
                return r;
            }
            goto not_yet;
        }
        if (e != cudaSuccess) {
            accel_result r = ACCEL__FAIL(c->acc, ACCEL_ERR_CUDA, "%s: %s", accel__coll_kind_name(q->kind), cudaGetErrorString(e));
            c->broken = ACCEL_ERR_CUDA;
            accel__coll_orphan(q);
            return r;
        }
        if (q->on_comm_stream) {
            cudaError_t e2 = cudaStreamWaitEvent(accel__coll_stream(c), q->ev, 0);
            if (e2 != cudaSuccess) {
                accel__coll_release(q);
                return ACCEL__FAIL(c->acc, ACCEL_ERR_CUDA, "cudaStreamWaitEvent: %s", cudaGetErrorString(e2));
            }
        }
    }
#endif
    *done = 1;
    return accel__coll_complete(q);
#if defined(ACCEL_WITH_MPI) || defined(ACCEL__COLL_NCCL)
not_yet:
    if (accel_now() > q->deadline) {
        accel_result r = ACCEL__FAIL(c->acc, ACCEL_ERR_TIMEOUT,
                                     "%s (%s, %zu elements) did not complete within %.1f s on rank %d of %d: a peer is "
                                     "dead, stuck, or not calling the same collective; this context is now unusable",
                                     accel__coll_kind_name(q->kind), accel_dtype_name(q->dt) ? accel_dtype_name(q->dt) : "-",
                                     q->count, q->deadline - q->start, c->rank, c->size);
        c->broken = ACCEL_ERR_TIMEOUT;
#ifdef ACCEL__COLL_NCCL
        if (c->nccl_valid) { ncclCommAbort(c->nccl); c->nccl_valid = 0; }
#endif
        accel__coll_orphan(q);
        return r;
    }
    return ACCEL_OK;
#endif
}

ACCEL__DEF accel_result accel_coll_test(accel_coll_request *q, int *done) {
    if (!q || !done) return accel__fail(q ? q->c->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, __FILE__, __LINE__, "accel_coll_test: NULL argument");
    return accel__coll_progress(q, done);
}

ACCEL__DEF accel_result accel_coll_wait(accel_coll_request *q) {
    int done = 0, spins = 0;
    accel_result r;
    if (!q) return accel__fail(NULL, ACCEL_ERR_INVALID_ARGUMENT, __FILE__, __LINE__, "accel_coll_wait: request is NULL");
    for (;;) {
        r = accel__coll_progress(q, &done);
        if (r != ACCEL_OK || done) return r;
        if (++spins > 256) sched_yield(); /* oversubscribed ranks: let the peer run */
    }
}

/* ------------------------------------------------------------------------------------------ 7. posting an operation */
typedef struct accel__coll_args {
    int kind;
    const void *send;
    void *recv;
    size_t count;           /* elements per rank (allgatherv: unused) */
    accel_dtype dt;
    accel_coll_op op;
    int root;
    int dev;                /* buffers are device memory */
    const size_t *vcounts;  /* allgatherv: bytes per rank */
    int async;              /* NCCL: use the comm stream */
    double deadline;        /* > 0: this absolute deadline (the core's host group) instead of the context's timeout;
                               MPI then always polls, even with no_watchdog */
} accel__coll_args;

#if defined(ACCEL__COLL_DEVICE) && (defined(ACCEL_WITH_MPI) || defined(ACCEL__COLL_NCCL))
static size_t accel__coll_recv_elems(const accel_coll *c, const accel__coll_args *a) {
    switch (a->kind) {
    case ACCEL__K_ALLGATHER: return a->count * (size_t)c->size;
    case ACCEL__K_GATHER: return c->rank == a->root ? a->count * (size_t)c->size : 0;
    case ACCEL__K_BARRIER: return 0;
    case ACCEL__K_REDUCE: return c->rank == a->root ? a->count : 0;
    default: return a->count;
    }
}
#endif

/* NONE backend: the local result. */
static accel_result accel__coll_post_none(accel_coll *c, const accel__coll_args *a) {
    size_t es = accel_dtype_size(a->dt), bytes = a->count * es;
    switch (a->kind) {
    case ACCEL__K_ALLREDUCE: case ACCEL__K_REDUCE: case ACCEL__K_ALLGATHER: case ACCEL__K_GATHER: case ACCEL__K_REDUCE_SCATTER:
        return accel__coll_copy_same(c, a->recv, a->send, bytes, a->dev);
    case ACCEL__K_ALLGATHERV:
        return accel__coll_copy_same(c, a->recv, a->send, a->vcounts[0], a->dev);
    default: return ACCEL_OK; /* AVG over one process divides by 1: nothing to do */
    }
}

#ifdef ACCEL_WITH_MPI
static int accel__coll_is_reduction_result(const accel_coll *c, const accel__coll_args *a) {
    return a->op == ACCEL_COLL_AVG && (a->kind == ACCEL__K_ALLREDUCE || (a->kind == ACCEL__K_REDUCE && c->rank == a->root) ||
                                       a->kind == ACCEL__K_REDUCE_SCATTER);
}

/* MPI backend. Device buffers without CUDA-aware MPI (or with F16/BF16 user ops, which run on the host) are staged
   through one pinned host buffer laid out like the in-place form of the call. */
static accel_result accel__coll_post_mpi(accel_coll *c, accel__coll_args *a, accel_coll_request *q) {
    size_t es = accel_dtype_size(a->dt);
    int P = c->size, me = c->rank, n = (int)a->count, mrc = MPI_SUCCESS, i;
    MPI_Datatype t = accel__coll_mpi_type(a->dt);
    MPI_Op op = MPI_SUM;
    const void *send = a->send;
    void *recv = a->recv;
    void *bcast_buf = (void *)a->send;
    int stage = 0;
    if (a->kind == ACCEL__K_ALLREDUCE || a->kind == ACCEL__K_REDUCE || a->kind == ACCEL__K_REDUCE_SCATTER)
        op = accel__coll_mpi_op(c, a->dt, a->op);
    if (a->dev) {
#ifdef ACCEL__COLL_DEVICE
        stage = !c->cuda_aware || a->dt == ACCEL_F16 || a->dt == ACCEL_BF16;
        ACCEL__CUDA_CHECK(c->acc, cudaStreamSynchronize(accel__coll_stream(c))); /* inputs produced by earlier kernels */
#else
        return ACCEL__FAIL(c->acc, ACCEL_ERR_UNSUPPORTED, "device buffers need the ACCEL_IMPLEMENTATION TU compiled with nvcc");
#endif
    }
    if (a->kind == ACCEL__K_ALLGATHERV) {
        size_t total = 0;
        q->ivec = (int *)accel_host_alloc(c->acc, sizeof(int) * 2 * (size_t)P);
        if (!q->ivec) return ACCEL_ERR_OUT_OF_MEMORY;
        for (i = 0; i < P; ++i) {
            if (a->vcounts[i] > (size_t)INT_MAX || total > (size_t)INT_MAX - a->vcounts[i])
                return ACCEL__FAIL(c->acc, ACCEL_ERR_INVALID_ARGUMENT, "all_gather_v: %zu bytes in total is too large for MPI", total + a->vcounts[i]);
            q->ivec[i] = (int)a->vcounts[i];
            q->ivec[P + i] = (int)total;
            total += a->vcounts[i];
        }
        q->count = total;
    }
    if (stage) {
#ifdef ACCEL__COLL_DEVICE
        /* stage layout: the in-place form of each call */
        size_t sbytes, in_off = 0, in_bytes = 0, out_off = 0, out_bytes = 0;
        int has_in = 1;
        switch (a->kind) {
        case ACCEL__K_ALLREDUCE: case ACCEL__K_REDUCE: case ACCEL__K_BCAST:
            sbytes = a->count * es; in_bytes = sbytes; out_bytes = accel__coll_recv_elems(c, a) * es;
            if (a->kind == ACCEL__K_BCAST) { has_in = me == a->root; out_bytes = me == a->root ? 0 : sbytes; }
            break;
        case ACCEL__K_ALLGATHER:
            sbytes = a->count * es * (size_t)P; in_off = (size_t)me * a->count * es; in_bytes = a->count * es; out_bytes = sbytes;
            break;
        case ACCEL__K_GATHER:
            sbytes = a->count * es * (me == a->root ? (size_t)P : 1u); in_off = me == a->root ? (size_t)me * a->count * es : 0;
            in_bytes = a->count * es; out_bytes = me == a->root ? sbytes : 0;
            break;
        case ACCEL__K_REDUCE_SCATTER:
            sbytes = a->count * es * (size_t)(P + 1); in_bytes = a->count * es * (size_t)P; out_off = in_bytes; out_bytes = a->count * es;
            break;
        case ACCEL__K_ALLGATHERV:
            sbytes = q->count; in_off = (size_t)q->ivec[P + me]; in_bytes = a->vcounts[me]; out_bytes = sbytes;
            break;
        default: sbytes = 0; has_in = 0; break;
        }
        if (sbytes) {
            q->stage = accel_pinned_alloc(c->acc, sbytes);
            if (!q->stage) return ACCEL_ERR_OUT_OF_MEMORY;
            q->stage_kind = 1;
            if (has_in && in_bytes) {
                accel_result r = accel__coll_copy(c, (unsigned char *)q->stage + in_off, a->send, in_bytes, 2);
                if (r != ACCEL_OK) return r;
            }
            if (out_bytes) {
                q->copy_dst = a->kind == ACCEL__K_BCAST ? (void *)a->send : a->recv;
                q->copy_src = (unsigned char *)q->stage + out_off;
                q->copy_bytes = out_bytes;
                q->copy_dir = 1;
            }
        }
        bcast_buf = q->stage;
        send = q->stage;
        recv = q->stage;
        if (a->kind == ACCEL__K_REDUCE_SCATTER) recv = (unsigned char *)q->stage + out_off;
        else if (a->kind == ACCEL__K_ALLGATHER || a->kind == ACCEL__K_ALLGATHERV || (a->kind == ACCEL__K_GATHER && me == a->root))
            send = MPI_IN_PLACE;
        else if (a->kind == ACCEL__K_ALLREDUCE || (a->kind == ACCEL__K_REDUCE && me == a->root)) send = MPI_IN_PLACE;
        if (accel__coll_is_reduction_result(c, a)) { q->avg_buf = recv; q->avg_count = a->count; q->avg_dev = 0; }
#endif
    } else {
        /* user buffers directly (host, or device with CUDA-aware MPI) */
        if (a->kind == ACCEL__K_ALLREDUCE && send == recv) send = MPI_IN_PLACE;
        if (a->kind == ACCEL__K_REDUCE && me == a->root && send == recv) send = MPI_IN_PLACE;
        if ((a->kind == ACCEL__K_ALLGATHER || (a->kind == ACCEL__K_GATHER && me == a->root)) &&
            send == (const void *)((const unsigned char *)recv + (size_t)me * a->count * es))
            send = MPI_IN_PLACE;
        if (a->kind == ACCEL__K_ALLGATHERV && send == (const void *)((const unsigned char *)recv + q->ivec[P + me]))
            send = MPI_IN_PLACE;
        if (accel__coll_is_reduction_result(c, a)) { q->avg_buf = recv; q->avg_count = a->count; q->avg_dev = a->dev; }
    }
    if (!c->watchdog && !a->async && a->deadline <= 0) {
        switch (a->kind) {
        case ACCEL__K_ALLREDUCE: mrc = MPI_Allreduce(send, recv, n, t, op, c->comm); break;
        case ACCEL__K_REDUCE: mrc = MPI_Reduce(send, recv, n, t, op, a->root, c->comm); break;
        case ACCEL__K_BCAST: mrc = MPI_Bcast(bcast_buf, n, t, a->root, c->comm); break;
        case ACCEL__K_ALLGATHER: mrc = MPI_Allgather(send, n, t, recv, n, t, c->comm); break;
        case ACCEL__K_GATHER: mrc = MPI_Gather(send, n, t, recv, n, t, a->root, c->comm); break;
        case ACCEL__K_REDUCE_SCATTER: mrc = MPI_Reduce_scatter_block(send, recv, n, t, op, c->comm); break;
        case ACCEL__K_BARRIER: mrc = MPI_Barrier(c->comm); break;
        case ACCEL__K_ALLGATHERV:
            mrc = MPI_Allgatherv(send, q->ivec[me], MPI_BYTE, recv, q->ivec, q->ivec + P, MPI_BYTE, c->comm);
            break;
        default: break;
        }
        if (mrc != MPI_SUCCESS) return accel__mpi_fail(c->acc, mrc, accel__coll_kind_name(a->kind), __FILE__, __LINE__);
        return ACCEL_OK;
    }
    if (a->kind == ACCEL__K_ALLREDUCE && P == 2 && (a->count >= 2 || (a->count == 1 && accel__coll_exchange(c, es))) &&
        (!a->dev || stage))
        return accel__coll_ring_start(c, q, send, recv, es, t, op);
    if (a->kind == ACCEL__K_ALLREDUCE && P >= 3 && P <= ACCEL__COLL_DIRECT_MAX_RANKS && a->count >= 1 && (!a->dev || stage))
        return accel__coll_direct_start(c, q, send, recv, es, t, op);
    switch (a->kind) {
    case ACCEL__K_ALLREDUCE: mrc = MPI_Iallreduce(send, recv, n, t, op, c->comm, &q->mreq); break;
    case ACCEL__K_REDUCE: mrc = MPI_Ireduce(send, recv, n, t, op, a->root, c->comm, &q->mreq); break;
    case ACCEL__K_BCAST: mrc = MPI_Ibcast(bcast_buf, n, t, a->root, c->comm, &q->mreq); break;
    case ACCEL__K_ALLGATHER: mrc = MPI_Iallgather(send, n, t, recv, n, t, c->comm, &q->mreq); break;
    case ACCEL__K_GATHER: mrc = MPI_Igather(send, n, t, recv, n, t, a->root, c->comm, &q->mreq); break;
    case ACCEL__K_REDUCE_SCATTER: mrc = MPI_Ireduce_scatter_block(send, recv, n, t, op, c->comm, &q->mreq); break;
    case ACCEL__K_BARRIER: mrc = MPI_Ibarrier(c->comm, &q->mreq); break;
    case ACCEL__K_ALLGATHERV:
        mrc = MPI_Iallgatherv(send, q->ivec[me], MPI_BYTE, recv, q->ivec, q->ivec + P, MPI_BYTE, c->comm, &q->mreq);
        break;
    default: break;
    }
    if (mrc != MPI_SUCCESS) return accel__mpi_fail(c->acc, mrc, accel__coll_kind_name(a->kind), __FILE__, __LINE__);
    q->has_mreq = 1;
    return ACCEL_OK;
}
#endif

#ifdef ACCEL__COLL_NCCL
static accel_result accel__coll_post_nccl(accel_coll *c, accel__coll_args *a, accel_coll_request *q) {
    size_t es = accel_dtype_size(a->dt);
    cudaStream_t user = accel__coll_stream(c), s = user;
    ncclDataType_t t = accel__coll_nccl_type(a->dt);
    ncclRedOp_t op = accel__coll_nccl_op(a->op);
    const void *send = a->send;
    void *recv = a->recv;
    int P = c->size, me = c->rank, i;
    size_t total = 0, sbytes = 0, in_off = 0, in_bytes = 0, out_off = 0, out_bytes = 0;
    if (!a->dev) {
        /* host buffers (objects, shapes, debug checks): stage through device memory, in-place layout */
        switch (a->kind) {
        case ACCEL__K_ALLREDUCE: case ACCEL__K_REDUCE: case ACCEL__K_BCAST:
            sbytes = a->count * es; in_bytes = sbytes; out_bytes = accel__coll_recv_elems(c, a) * es;
            if (a->kind == ACCEL__K_BCAST) { in_bytes = me == a->root ? sbytes : 0; out_bytes = me == a->root ? 0 : sbytes; }
            break;
        case ACCEL__K_ALLGATHER: case ACCEL__K_GATHER:
            sbytes = a->count * es * (size_t)P; in_off = (size_t)me * a->count * es; in_bytes = a->count * es;
            out_bytes = accel__coll_recv_elems(c, a) * es;
            break;
        case ACCEL__K_REDUCE_SCATTER:
            sbytes = a->count * es * (size_t)(P + 1); in_bytes = a->count * es * (size_t)P; out_off = in_bytes; out_bytes = a->count * es;
            break;
        case ACCEL__K_ALLGATHERV:
            for (i = 0; i < P; ++i) { if (i == me) in_off = total; total += a->vcounts[i]; }
            sbytes = total; in_bytes = a->vcounts[me]; out_bytes = total;
            break;
        default: break;
        }
        if (sbytes) {
            q->stage = accel_device_alloc(c->acc, sbytes);
            if (!q->stage) return ACCEL_ERR_OUT_OF_MEMORY;
            q->stage_kind = 2;
            /* on acc.stream, ahead of the collective (a plain cudaMemcpy runs on the legacy stream, which a
               non-blocking acc.stream does not wait for) */
            if (in_bytes)
                ACCEL__CUDA_CHECK(c->acc, cudaMemcpyAsync((unsigned char *)q->stage + in_off, a->send, in_bytes,
                                                          cudaMemcpyHostToDevice, user));
            if (out_bytes) {
                q->copy_dst = a->kind == ACCEL__K_BCAST ? (void *)a->send : a->recv;
                q->copy_src = (unsigned char *)q->stage + out_off;
                q->copy_bytes = out_bytes;
                q->copy_dir = 2;
            }
        }
        send = (unsigned char *)q->stage + in_off;
        recv = a->kind == ACCEL__K_REDUCE_SCATTER ? (void *)((unsigned char *)q->stage + out_off) : q->stage;
        if (a->kind == ACCEL__K_REDUCE_SCATTER || a->kind == ACCEL__K_BCAST) send = q->stage;
    }
    if (a->async) {
        if (!c->comm_stream) ACCEL__CUDA_CHECK(c->acc, cudaStreamCreateWithFlags(&c->comm_stream, cudaStreamNonBlocking));
        ACCEL__CUDA_CHECK(c->acc, cudaEventCreateWithFlags(&q->ev, cudaEventDisableTiming));
        q->has_ev = 1;
        ACCEL__CUDA_CHECK(c->acc, cudaEventRecord(q->ev, user));
        ACCEL__CUDA_CHECK(c->acc, cudaStreamWaitEvent(c->comm_stream, q->ev, 0));
        s = c->comm_stream;
        q->on_comm_stream = 1;
    }
    switch (a->kind) {
    case ACCEL__K_ALLREDUCE: ACCEL__COLL_NCCL_CALL(c, ncclAllReduce(send, recv, a->count, t, op, c->nccl, s)); break;
    case ACCEL__K_REDUCE: ACCEL__COLL_NCCL_CALL(c, ncclReduce(send, recv, a->count, t, op, a->root, c->nccl, s)); break;
    case ACCEL__K_BCAST: ACCEL__COLL_NCCL_CALL(c, ncclBroadcast(send, (void *)send, a->count, t, a->root, c->nccl, s)); break;
    case ACCEL__K_ALLGATHER: ACCEL__COLL_NCCL_CALL(c, ncclAllGather(send, recv, a->count, t, c->nccl, s)); break;
    case ACCEL__K_REDUCE_SCATTER: ACCEL__COLL_NCCL_CALL(c, ncclReduceScatter(send, recv, a->count, t, op, c->nccl, s)); break;
    case ACCEL__K_GATHER:
        ACCEL__COLL_NCCL_CALL(c, ncclGroupStart());
        if (me == a->root) {
            for (i = 0; i < P; ++i) {
                void *dst = (unsigned char *)recv + (size_t)i * a->count * es;
                if (i == me) {
                    if (dst != send) ACCEL__CUDA_CHECK(c->acc, cudaMemcpyAsync(dst, send, a->count * es, cudaMemcpyDeviceToDevice, s));
                } else ACCEL__COLL_NCCL_CALL(c, ncclRecv(dst, a->count, t, i, c->nccl, s));
            }
        } else ACCEL__COLL_NCCL_CALL(c, ncclSend(send, a->count, t, a->root, c->nccl, s));
        ACCEL__COLL_NCCL_CALL(c, ncclGroupEnd());
        break;
    case ACCEL__K_ALLGATHERV: {
        size_t off = 0;
        ACCEL__COLL_NCCL_CALL(c, ncclGroupStart());
        for (i = 0; i < P; ++i) {
            void *dst = (unsigned char *)recv + off;
            if (a->vcounts[i])
                ACCEL__COLL_NCCL_CALL(c, ncclBroadcast(i == me ? send : dst, dst, a->vcounts[i], ncclUint8, i, c->nccl, s));
            off += a->vcounts[i];
        }
        ACCEL__COLL_NCCL_CALL(c, ncclGroupEnd());
    } break;
    case ACCEL__K_BARRIER:
        ACCEL__COLL_NCCL_CALL(c, ncclAllReduce(c->scratch, c->scratch, 1, ncclInt32, ncclSum, c->nccl, s));
        break;
    default: break;
    }
    /* AVG: the sum, then the division on the same stream (Accelerate's reduce("mean") order) */
    if (a->op == ACCEL_COLL_AVG && a->count > 0 &&
        (a->kind == ACCEL__K_ALLREDUCE || a->kind == ACCEL__K_REDUCE_SCATTER || (a->kind == ACCEL__K_REDUCE && me == a->root))) {
        accel__coll_div_kernel<<<accel__coll_blocks(a->count), 256, 0, s>>>(recv, a->count, (int)a->dt, (double)P);
        ACCEL__CUDA_CHECK(c->acc, cudaGetLastError());
    }
    if (!q->has_ev && (q->stage || a->kind == ACCEL__K_BARRIER)) {
        /* host results or a barrier: the host must wait for the stream */
        ACCEL__CUDA_CHECK(c->acc, cudaEventCreateWithFlags(&q->ev, cudaEventDisableTiming));
        q->has_ev = 1;
    }
    if (q->has_ev) ACCEL__CUDA_CHECK(c->acc, cudaEventRecord(q->ev, s));
    return ACCEL_OK;
}
#endif

/* Validates nothing (callers did); posts the operation; *out receives the request. */
static accel_result accel__coll_post(accel_coll *c, accel__coll_args *a, accel_coll_request **out) {
    accel_coll_request *q;
    accel_result r = ACCEL_OK;
    *out = NULL;
    q = (accel_coll_request *)accel_host_alloc(c->acc, sizeof *q);
    if (!q) return ACCEL_ERR_OUT_OF_MEMORY;
    memset(q, 0, sizeof *q);
    q->c = c;
    q->kind = a->kind;
    q->dt = a->dt;
    q->op = a->op;
    q->count = a->count;
    q->root = a->root;
    q->start = accel_now();
    q->deadline = a->deadline > 0 ? a->deadline : q->start + c->timeout_s;
    switch (c->backend) {
    case ACCEL_COLL_BACKEND_MPI:
#ifdef ACCEL_WITH_MPI
        r = accel__coll_post_mpi(c, a, q);
#endif
        break;
    case ACCEL_COLL_BACKEND_NCCL:
#ifdef ACCEL__COLL_NCCL
        r = accel__coll_post_nccl(c, a, q);
#endif
        break;
    default: r = accel__coll_post_none(c, a); break;
    }
    if (r != ACCEL_OK) {
#ifdef ACCEL_WITH_MPI
        if (q->has_mreq) { accel__coll_orphan(q); return r; }
#endif
        accel__coll_release(q);
        return r;
    }
    *out = q;
    return ACCEL_OK;
}

/* ----------------------------------------------------------------------------------------------- 8. debug mode, run */
typedef struct accel__coll_sig { int64_t magic, kind, dtype, op, count, root; } accel__coll_sig;

static accel_result accel__coll_run(accel_coll *c, accel__coll_args *a);

static accel_result accel__coll_debug_check(accel_coll *c, const accel__coll_args *a) {
    accel__coll_sig mine, *all;
    accel__coll_args g;
    accel_result r;
    int i, differ = 0;
    if (!c->debug || c->size <= 1) return ACCEL_OK;
    memset(&mine, 0, sizeof mine);
    mine.magic = 0x6163636f6c6cLL;
    mine.kind = a->kind;
    mine.dtype = a->kind == ACCEL__K_BARRIER ? 0 : (int64_t)a->dt;
    mine.op = (a->kind == ACCEL__K_ALLREDUCE || a->kind == ACCEL__K_REDUCE || a->kind == ACCEL__K_REDUCE_SCATTER) ? (int64_t)a->op : -1;
    mine.count = a->kind == ACCEL__K_BARRIER || a->kind == ACCEL__K_ALLGATHERV ? -1 : (int64_t)a->count;
    mine.root = (a->kind == ACCEL__K_REDUCE || a->kind == ACCEL__K_BCAST || a->kind == ACCEL__K_GATHER) ? a->root : -1;
    all = (accel__coll_sig *)accel_host_alloc(c->acc, sizeof(accel__coll_sig) * (size_t)c->size);
    if (!all) return ACCEL_ERR_OUT_OF_MEMORY;
    memset(&g, 0, sizeof g);
    g.kind = ACCEL__K_ALLGATHER;
    g.send = &mine;
    g.recv = all;
    g.count = sizeof mine;
    g.dt = ACCEL_U8;
    g.dev = 0;
    r = accel__coll_run(c, &g);
    if (r != ACCEL_OK) { accel_host_free(c->acc, all); return r; }
    for (i = 1; i < c->size; ++i)
        if (memcmp(&all[i], &all[0], sizeof mine) != 0) differ = 1;
    if (differ) {
        char msg[ACCEL_ERROR_CAPACITY];
        size_t off = (size_t)snprintf(msg, sizeof msg, "debug mode: ranks called different collectives:");
        for (i = 0; i < c->size && off < sizeof msg - 8; ++i) {
            const accel__coll_sig *s = &all[i];
            const char *dn = accel_dtype_name((accel_dtype)s->dtype);
            off += (size_t)snprintf(msg + off, sizeof msg - off, " rank %d: %s(dtype=%s, op=%s, count=%lld, root=%lld)%s", i,
                                    s->magic == mine.magic ? accel__coll_kind_name((int)s->kind) : "<not a collective check>",
                                    dn ? dn : "-", s->op >= 0 ? accel_coll_op_name((accel_coll_op)s->op) : "-",
                                    (long long)s->count, (long long)s->root, i + 1 < c->size ? ";" : "");
        }
        accel_host_free(c->acc, all);
        return ACCEL__FAIL(c->acc, ACCEL_ERR_MISMATCH, "%s", msg);
    }
    accel_host_free(c->acc, all);
    return ACCEL_OK;
}

/* post + wait */
static accel_result accel__coll_run(accel_coll *c, accel__coll_args *a) {
    accel_coll_request *q = NULL;
    accel_result r = accel__coll_post(c, a, &q);
    if (r != ACCEL_OK || !q) return r;
#ifdef ACCEL__COLL_NCCL
    /* device results of a blocking NCCL op stay on acc.stream: no host wait (accel_coll_synchronize) */
    if (c->backend == ACCEL_COLL_BACKEND_NCCL && !q->has_ev) return accel__coll_complete(q);
#endif
    return accel_coll_wait(q);
}

/* ------------------------------------------------------------------------------------- 9. validation, the typed ops */
static accel_result accel__coll_validate(accel_coll *c, accel__coll_args *a, const char *what) {
    accel_result r = accel__coll_check_broken(c);
    size_t es;
    if (r != ACCEL_OK) return r;
    a->dev = c->device_mem;
    if (a->kind == ACCEL__K_BARRIER) return ACCEL_OK;
    es = accel_dtype_size(a->dt);
    if (es == 0) return ACCEL__FAIL(c->acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: dtype %d is not an accel_dtype", what, (int)a->dt);
    if ((int)a->op < 0 || (int)a->op >= ACCEL_COLL_OP_COUNT)
        return ACCEL__FAIL(c->acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: op %d is not an accel_coll_op", what, (int)a->op);
    if (a->kind == ACCEL__K_ALLREDUCE || a->kind == ACCEL__K_REDUCE || a->kind == ACCEL__K_REDUCE_SCATTER) {
        if (!accel__coll_reducible(a->dt))
            return ACCEL__FAIL(c->acc, ACCEL_ERR_UNSUPPORTED, "%s: reductions support F64 F32 F16 BF16 I64 I32 U8, not %s", what,
                               accel_dtype_name(a->dt));
        if (a->op == ACCEL_COLL_AVG && !accel_dtype_is_float(a->dt))
            return ACCEL__FAIL(c->acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: mean/avg of an integer dtype (%s) is not defined "
                               "(Accelerate raises too); use sum", what, accel_dtype_name(a->dt));
    }
    if (a->root < 0 || a->root >= c->size)
        return ACCEL__FAIL(c->acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: root %d is not a rank of this group of %d", what, a->root, c->size);
    if (a->count > (size_t)INT_MAX || ((a->kind == ACCEL__K_ALLGATHER || a->kind == ACCEL__K_GATHER || a->kind == ACCEL__K_REDUCE_SCATTER) &&
                                       a->count > (size_t)INT_MAX / (size_t)c->size))
        return ACCEL__FAIL(c->acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: %zu elements is more than one call can move (INT_MAX)", what, a->count);
    if (a->count > 0) {
        int need_recv = a->kind != ACCEL__K_BCAST &&
                        !((a->kind == ACCEL__K_REDUCE || a->kind == ACCEL__K_GATHER) && c->rank != a->root);
        if (!a->send || (need_recv && !a->recv))
            return ACCEL__FAIL(c->acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: NULL buffer for %zu elements", what, a->count);
        if (a->kind == ACCEL__K_REDUCE_SCATTER) {
            const unsigned char *s0 = (const unsigned char *)a->send, *r0 = (const unsigned char *)a->recv;
            size_t sb = a->count * es * (size_t)c->size, rb = a->count * es;
            if (r0 < s0 + sb && s0 < r0 + rb)
                return ACCEL__FAIL(c->acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: send and recv overlap (not supported)", what);
        }
    }
    return ACCEL_OK;
}

static accel_result accel__coll_do(accel_coll *c, accel__coll_args *a, const char *what, accel_coll_request **req) {
    accel_result r = accel__coll_validate(c, a, what);
    if (req) *req = NULL;
    if (r != ACCEL_OK) return r;
    r = accel__coll_debug_check(c, a);
    if (r != ACCEL_OK) return r;
    if (!req) {
        if (a->count == 0 && a->kind != ACCEL__K_BARRIER && a->kind != ACCEL__K_ALLGATHERV) return ACCEL_OK;
        return accel__coll_run(c, a);
    }
    a->async = 1; /* always a nonblocking MPI call / the comm stream */
    return accel__coll_post(c, a, req);
}

static void accel__coll_args_init(accel__coll_args *a, int kind, const void *send, void *recv, size_t count, accel_dtype dt,
                                  accel_coll_op op, int root) {
    memset(a, 0, sizeof *a);
    a->kind = kind; a->send = send; a->recv = recv; a->count = count; a->dt = dt; a->op = op; a->root = root;
}

ACCEL__DEF accel_result accel_coll_all_reduce(accel_coll *c, const void *send, void *recv, size_t count, accel_dtype dt, accel_coll_op op) {
    accel__coll_args a;
    accel__coll_args_init(&a, ACCEL__K_ALLREDUCE, send, recv, count, dt, op, 0);
    return accel__coll_do(c, &a, "all_reduce", NULL);
}
ACCEL__DEF accel_result accel_coll_reduce(accel_coll *c, const void *send, void *recv, size_t count, accel_dtype dt, accel_coll_op op, int root) {
    accel__coll_args a;
    accel__coll_args_init(&a, ACCEL__K_REDUCE, send, recv, count, dt, op, root);
    return accel__coll_do(c, &a, "reduce", NULL);
}
ACCEL__DEF accel_result accel_coll_broadcast(accel_coll *c, void *buf, size_t count, accel_dtype dt, int root) {
    accel__coll_args a;
    accel__coll_args_init(&a, ACCEL__K_BCAST, buf, buf, count, dt, ACCEL_COLL_SUM, root);
    return accel__coll_do(c, &a, "broadcast", NULL);
}
ACCEL__DEF accel_result accel_coll_all_gather(accel_coll *c, const void *send, void *recv, size_t count, accel_dtype dt) {
    accel__coll_args a;
    accel__coll_args_init(&a, ACCEL__K_ALLGATHER, send, recv, count, dt, ACCEL_COLL_SUM, 0);
    return accel__coll_do(c, &a, "all_gather", NULL);
}
ACCEL__DEF accel_result accel_coll_reduce_scatter(accel_coll *c, const void *send, void *recv, size_t recv_count, accel_dtype dt, accel_coll_op op) {
    accel__coll_args a;
    accel__coll_args_init(&a, ACCEL__K_REDUCE_SCATTER, send, recv, recv_count, dt, op, 0);
    return accel__coll_do(c, &a, "reduce_scatter", NULL);
}
ACCEL__DEF accel_result accel_coll_gather(accel_coll *c, const void *send, void *recv, size_t count, accel_dtype dt, int root) {
    accel__coll_args a;
    accel__coll_args_init(&a, ACCEL__K_GATHER, send, recv, count, dt, ACCEL_COLL_SUM, root);
    return accel__coll_do(c, &a, "gather", NULL);
}
ACCEL__DEF accel_result accel_coll_barrier(accel_coll *c) {
    accel__coll_args a;
    accel__coll_args_init(&a, ACCEL__K_BARRIER, NULL, NULL, 0, ACCEL_U8, ACCEL_COLL_SUM, 0);
    if (c && c->size <= 1) return accel__coll_check_broken(c);
    return accel__coll_do(c, &a, "barrier", NULL);
}
ACCEL__DEF accel_result accel_coll_synchronize(accel_coll *c) {
    accel_result r = accel__coll_check_broken(c);
    if (r != ACCEL_OK) return r;
#ifdef ACCEL__COLL_NCCL
    if (c->backend == ACCEL_COLL_BACKEND_NCCL) {
        accel_coll_request *q = (accel_coll_request *)accel_host_alloc(c->acc, sizeof *q);
        if (!q) return ACCEL_ERR_OUT_OF_MEMORY;
        memset(q, 0, sizeof *q);
        q->c = c;
        q->kind = ACCEL__K_BARRIER;
        q->start = accel_now();
        q->deadline = q->start + c->timeout_s;
        if (cudaEventCreateWithFlags(&q->ev, cudaEventDisableTiming) != cudaSuccess) {
            accel__coll_release(q);
            return ACCEL__FAIL(c->acc, ACCEL_ERR_CUDA, "cudaEventCreate failed");
        }
        q->has_ev = 1;
        if (cudaEventRecord(q->ev, accel__coll_stream(c)) != cudaSuccess) {
            accel__coll_release(q);
            return ACCEL__FAIL(c->acc, ACCEL_ERR_CUDA, "cudaEventRecord failed");
        }
        return accel_coll_wait(q);
    }
#endif
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_coll_all_reduce_async(accel_coll *c, const void *send, void *recv, size_t count, accel_dtype dt,
                                                    accel_coll_op op, accel_coll_request **req) {
    accel__coll_args a;
    if (!req) return accel__fail(c ? c->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, __FILE__, __LINE__, "all_reduce_async: req is NULL");
    accel__coll_args_init(&a, ACCEL__K_ALLREDUCE, send, recv, count, dt, op, 0);
    return accel__coll_do(c, &a, "all_reduce_async", req);
}
ACCEL__DEF accel_result accel_coll_reduce_async(accel_coll *c, const void *send, void *recv, size_t count, accel_dtype dt,
                                                accel_coll_op op, int root, accel_coll_request **req) {
    accel__coll_args a;
    if (!req) return accel__fail(c ? c->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, __FILE__, __LINE__, "reduce_async: req is NULL");
    accel__coll_args_init(&a, ACCEL__K_REDUCE, send, recv, count, dt, op, root);
    return accel__coll_do(c, &a, "reduce_async", req);
}
ACCEL__DEF accel_result accel_coll_broadcast_async(accel_coll *c, void *buf, size_t count, accel_dtype dt, int root,
                                                   accel_coll_request **req) {
    accel__coll_args a;
    if (!req) return accel__fail(c ? c->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, __FILE__, __LINE__, "broadcast_async: req is NULL");
    accel__coll_args_init(&a, ACCEL__K_BCAST, buf, buf, count, dt, ACCEL_COLL_SUM, root);
    return accel__coll_do(c, &a, "broadcast_async", req);
}
ACCEL__DEF accel_result accel_coll_all_gather_async(accel_coll *c, const void *send, void *recv, size_t count, accel_dtype dt,
                                                    accel_coll_request **req) {
    accel__coll_args a;
    if (!req) return accel__fail(c ? c->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, __FILE__, __LINE__, "all_gather_async: req is NULL");
    accel__coll_args_init(&a, ACCEL__K_ALLGATHER, send, recv, count, dt, ACCEL_COLL_SUM, 0);
    return accel__coll_do(c, &a, "all_gather_async", req);
}
ACCEL__DEF accel_result accel_coll_reduce_scatter_async(accel_coll *c, const void *send, void *recv, size_t recv_count,
                                                        accel_dtype dt, accel_coll_op op, accel_coll_request **req) {
    accel__coll_args a;
    if (!req) return accel__fail(c ? c->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, __FILE__, __LINE__, "reduce_scatter_async: req is NULL");
    accel__coll_args_init(&a, ACCEL__K_REDUCE_SCATTER, send, recv, recv_count, dt, op, 0);
    return accel__coll_do(c, &a, "reduce_scatter_async", req);
}

/* ------------------------------------------------------------------------ 10. the host process group over a context */
/* When the core has no host process group (several processes without MPI or torchrun's store), a context over NCCL that
   spans acc's group becomes it (accel_coll_create installs it, accel_coll_destroy removes it): the core's host
   collectives (barrier, broadcast, all-gather, small all-reduces, agreement checks — what amp, ckpt and trackers use)
   then move their bytes through these functions: host memory, staged through the device by the NCCL backend, each
   call with the deadline the core passes (accel__transport in accel.h). */
static accel_result accel__coll_tp_run(void *ctx, accel *acc, int kind, const void *in, void *out, size_t bytes, int root,
                                       const size_t *vcounts, double deadline) {
    accel_coll *c = (accel_coll *)ctx;
    accel__coll_args a;
    accel_result r = accel__coll_check_broken(c);
    (void)acc; /* c->acc: the core passes the Accelerator this context belongs to */
    if (r != ACCEL_OK) return r;
    if (bytes > (size_t)INT_MAX) return ACCEL__FAIL(c->acc, ACCEL_ERR_INVALID_ARGUMENT, "host group: %zu bytes is too large", bytes);
    if (kind != ACCEL__K_ALLGATHERV && bytes == 0) return ACCEL_OK;
    accel__coll_args_init(&a, kind, in, out, bytes, ACCEL_U8, ACCEL_COLL_SUM, root);
    a.vcounts = vcounts;
    a.dev = 0;
    a.deadline = deadline;
    return accel__coll_run(c, &a);
}
static accel_result accel__coll_tp_allgather(void *ctx, accel *acc, const void *in, void *out, size_t bytes, double deadline) {
    return accel__coll_tp_run(ctx, acc, ACCEL__K_ALLGATHER, in, out, bytes, 0, NULL, deadline);
}
static accel_result accel__coll_tp_allgatherv(void *ctx, accel *acc, const void *in, void *out, const size_t *counts,
                                              double deadline) {
    return accel__coll_tp_run(ctx, acc, ACCEL__K_ALLGATHERV, in, out, 0, 0, counts, deadline);
}
static accel_result accel__coll_tp_bcast(void *ctx, accel *acc, void *buf, size_t bytes, int root, double deadline) {
    return accel__coll_tp_run(ctx, acc, ACCEL__K_BCAST, buf, buf, bytes, root, NULL, deadline);
}
/* Installs c as acc's host process group if acc has none (the core refuses otherwise: one process, or MPI). */
static void accel__coll_host_group_install(accel_coll *c) {
    c->tp.name = accel_coll_backend_name(c->backend);
    c->tp.allgather = accel__coll_tp_allgather;
    c->tp.allgatherv = accel__coll_tp_allgatherv;
    c->tp.bcast = accel__coll_tp_bcast;
    c->host_group = accel__group_install(c->acc, &c->tp, c);
    if (c->host_group)
        accel_log(c->acc, ACCEL_LOG_INFO, "the host process group of %d processes now runs over this %s context",
                  c->size, c->tp.name);
}

/* ------------------------------------------------------------------------------------------- 11. Accelerate helpers */
ACCEL__DEF accel_result accel_coll_reduce_tensor(accel_coll *c, void *buf, size_t count, accel_dtype dt, const char *reduction) {
    accel_coll_op op;
    if (!c) return accel__coll_null();
    if (!reduction || !strcmp(reduction, "sum") || !strcmp(reduction, "none")) op = ACCEL_COLL_SUM;
    else if (!strcmp(reduction, "mean")) op = ACCEL_COLL_AVG;
    else if (!strcmp(reduction, "max")) op = ACCEL_COLL_MAX;
    else if (!strcmp(reduction, "min")) op = ACCEL_COLL_MIN;
    else if (!strcmp(reduction, "prod")) op = ACCEL_COLL_PROD;
    else return ACCEL__FAIL(c->acc, ACCEL_ERR_INVALID_ARGUMENT, "reduce: reduction \"%s\" is not one of sum, mean, max, none, min, prod", reduction);
    return accel_coll_all_reduce(c, buf, buf, count, dt, op);
}

/* host-memory collectives for shapes and objects (no debug check: their sizes are fixed by construction) */
static accel_result accel__coll_host_op(accel_coll *c, int kind, const void *send, void *recv, size_t count, int root,
                                        const size_t *vcounts) {
    accel__coll_args a;
    accel_result r = accel__coll_check_broken(c);
    if (r != ACCEL_OK) return r;
    accel__coll_args_init(&a, kind, send, recv, count, ACCEL_U8, ACCEL_COLL_SUM, root);
    a.vcounts = vcounts;
    a.dev = 0;
    if (count > (size_t)INT_MAX) return ACCEL__FAIL(c->acc, ACCEL_ERR_INVALID_ARGUMENT, "%zu bytes is too large for one collective", count);
    if (kind != ACCEL__K_ALLGATHERV && count == 0) return ACCEL_OK;
    return accel__coll_run(c, &a);
}

static void *accel__coll_alloc_mem(accel_coll *c, size_t bytes) {
    return c->device_mem ? accel_device_alloc(c->acc, bytes ? bytes : 1) : accel_host_alloc(c->acc, bytes ? bytes : 1);
}
ACCEL__DEF void accel_coll_free(accel_coll *c, void *ptr) {
    if (!c || !ptr) return;
    if (c->device_mem) accel_device_free(c->acc, ptr);
    else accel_host_free(c->acc, ptr);
}

static accel_result accel__coll_check_tensor(accel_coll *c, const accel_tensor *t, const char *what, int64_t *nbytes) {
    int64_t nb;
    if (!t) return ACCEL__FAIL(c->acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: tensor is NULL", what);
    nb = accel_tensor_nbytes(t);
    if (nb < 0) return ACCEL__FAIL(c->acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: tensor '%s' has an invalid dtype/shape", what, t->name ? t->name : "");
    if (nb > 0 && !t->ptr) return ACCEL__FAIL(c->acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: tensor '%s' has no data pointer", what, t->name ? t->name : "");
    *nbytes = nb;
    return ACCEL_OK;
}

/* every rank's {ndim, dtype, shape[8]} */
static accel_result accel__coll_gather_shapes(accel_coll *c, const accel_tensor *t, int ndim, const int64_t *shape,
                                              int64_t **out) {
    int64_t mine[2 + ACCEL_MAX_DIMS];
    int64_t *all;
    accel_result r;
    int k;
    memset(mine, 0, sizeof mine);
    mine[0] = ndim;
    mine[1] = (int64_t)t->dtype;
    for (k = 0; k < ndim; ++k) mine[2 + k] = shape[k];
    all = (int64_t *)accel_host_alloc(c->acc, sizeof mine * (size_t)c->size);
    if (!all) return ACCEL_ERR_OUT_OF_MEMORY;
    r = accel__coll_host_op(c, ACCEL__K_ALLGATHER, mine, all, sizeof mine, 0, NULL);
    if (r != ACCEL_OK) { accel_host_free(c->acc, all); return r; }
    *out = all;
    return ACCEL_OK;
}

static accel_result accel__coll_shape_mismatch(accel_coll *c, const char *what, const int64_t *all, int skip_dim) {
    char msg[ACCEL_ERROR_CAPACITY];
    size_t off = (size_t)snprintf(msg, sizeof msg, "%s: ranks disagree on dtype/rank/shape (dim %d may differ):", what, skip_dim);
    int i, k;
    for (i = 0; i < c->size && off < sizeof msg - 16; ++i) {
        const int64_t *s = all + (size_t)i * (2 + ACCEL_MAX_DIMS);
        const char *dn = accel_dtype_name((accel_dtype)s[1]);
        off += (size_t)snprintf(msg + off, sizeof msg - off, " rank %d: %s[", i, dn ? dn : "?");
        for (k = 0; k < (int)s[0] && k < ACCEL_MAX_DIMS && off < sizeof msg - 16; ++k)
            off += (size_t)snprintf(msg + off, sizeof msg - off, "%s%lld", k ? "," : "", (long long)s[2 + k]);
        off += (size_t)snprintf(msg + off, sizeof msg - off, "]");
    }
    return ACCEL__FAIL(c->acc, ACCEL_ERR_MISMATCH, "%s", msg);
}

static accel_result accel__coll_fill(accel_coll *c, void *dst, size_t n, accel_dtype dt, double value) {
    unsigned char pat[8];
    size_t es = accel_dtype_size(dt), i;
    accel__coll_value_bytes(value, (int)dt, pat);
    if (n == 0) return ACCEL_OK;
    if (!c->device_mem) {
        for (i = 0; i < n; ++i) memcpy((unsigned char *)dst + i * es, pat, es);
        return ACCEL_OK;
    }
#ifdef ACCEL__COLL_DEVICE
    {
        uint64_t p = 0;
        for (i = 0; i < 8; ++i) p |= (uint64_t)pat[i] << (8 * i);
        accel__coll_fill_kernel<<<accel__coll_blocks(n), 256, 0, accel__coll_stream(c)>>>((unsigned char *)dst, n, es, p);
        ACCEL__CUDA_CHECK(c->acc, cudaGetLastError());
        return ACCEL_OK;
    }
#else
    return ACCEL__FAIL(c->acc, ACCEL_ERR_UNSUPPORTED, "device fill needs the ACCEL_IMPLEMENTATION TU compiled with nvcc");
#endif
}

ACCEL__DEF accel_result accel_coll_pad_across_processes(accel_coll *c, const accel_tensor *in, int dim, double pad_value,
                                                        int pad_first, accel_tensor *out) {
    int64_t nb, *all = NULL, maxd, old, outer = 1, inner;
    int nd, i, k;
    size_t es, obytes;
    void *buf;
    accel_result r;
    if (!c) return accel__coll_null();
    r = accel__coll_check_broken(c);
    if (r != ACCEL_OK) return r;
    r = out ? accel__coll_check_tensor(c, in, "pad_across_processes", &nb)
            : ACCEL__FAIL(c->acc, ACCEL_ERR_INVALID_ARGUMENT, "pad_across_processes: out is NULL");
    r = accel__coll_agree(c, r, "pad_across_processes"); /* a bad tensor on one rank fails every rank */
    if (r != ACCEL_OK) return r;
    nd = in->ndim;
    es = accel_dtype_size(in->dtype);
    if (dim >= nd || dim < -nd) {
        /* Accelerate returns the tensor unchanged, before any communication */
        buf = accel__coll_alloc_mem(c, (size_t)nb);
        if (!buf) return ACCEL_ERR_OUT_OF_MEMORY;
        r = accel__coll_copy_same(c, buf, in->ptr, (size_t)nb, c->device_mem);
        if (r != ACCEL_OK) { accel_coll_free(c, buf); return r; }
        *out = *in;
        out->ptr = buf;
        return ACCEL_OK;
    }
    if (dim < 0) dim += nd;
    r = accel__coll_gather_shapes(c, in, nd, in->shape, &all);
    if (r != ACCEL_OK) return r;
    maxd = 0;
    for (i = 0; i < c->size; ++i) {
        const int64_t *s = all + (size_t)i * (2 + ACCEL_MAX_DIMS);
        int bad = s[0] != nd || s[1] != (int64_t)in->dtype;
        for (k = 0; !bad && k < nd; ++k)
            if (k != dim && s[2 + k] != in->shape[k]) bad = 1;
        if (bad) {
            r = accel__coll_shape_mismatch(c, "pad_across_processes", all, dim);
            accel_host_free(c->acc, all);
            return r;
        }
        if (s[2 + dim] > maxd) maxd = s[2 + dim];
    }
    accel_host_free(c->acc, all);
    old = in->shape[dim];
    inner = (int64_t)es;
    for (k = 0; k < nd; ++k) {
        if (k < dim) outer *= in->shape[k];
        else if (k > dim) inner *= in->shape[k];
    }
    obytes = (size_t)(outer * maxd * inner);
    buf = accel__coll_alloc_mem(c, obytes);
    if (!buf) return ACCEL_ERR_OUT_OF_MEMORY;
    if (maxd == old) {
        r = accel__coll_copy_same(c, buf, in->ptr, (size_t)nb, c->device_mem);
    } else {
        size_t off = (size_t)(pad_first ? (maxd - old) * inner : 0), blk = (size_t)(old * inner);
        r = accel__coll_fill(c, buf, obytes / es, in->dtype, pad_value);
        if (r == ACCEL_OK && blk) {
            if (!c->device_mem) {
                int64_t o;
                for (o = 0; o < outer; ++o)
                    memcpy((unsigned char *)buf + (size_t)(o * maxd * inner) + off, (const unsigned char *)in->ptr + (size_t)o * blk, blk);
            }
#ifdef ACCEL__COLL_DEVICE
            else {
                cudaError_t e = cudaMemcpy2DAsync((unsigned char *)buf + off, (size_t)(maxd * inner), in->ptr, blk, blk, (size_t)outer,
                                                  cudaMemcpyDeviceToDevice, accel__coll_stream(c));
                if (e != cudaSuccess) r = ACCEL__FAIL(c->acc, ACCEL_ERR_CUDA, "cudaMemcpy2DAsync: %s", cudaGetErrorString(e));
            }
#endif
        }
    }
    if (r != ACCEL_OK) { accel_coll_free(c, buf); return r; }
    *out = *in;
    out->ptr = buf;
    out->shape[dim] = maxd;
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_coll_gather_rows(accel_coll *c, const accel_tensor *in, accel_tensor *out) {
    int64_t nb, *all = NULL, shape[ACCEL_MAX_DIMS], rowbytes, total_rows = 0;
    size_t *vcounts, total = 0;
    int nd, i, k;
    void *buf;
    accel_result r;
    accel__coll_args a;
    if (!c) return accel__coll_null();
    r = accel__coll_check_broken(c);
    if (r != ACCEL_OK) return r;
    r = out ? accel__coll_check_tensor(c, in, "gather", &nb) : ACCEL__FAIL(c->acc, ACCEL_ERR_INVALID_ARGUMENT, "gather: out is NULL");
    r = accel__coll_agree(c, r, "gather"); /* a bad tensor on one rank fails every rank, before any exchange */
    if (r != ACCEL_OK) return r;
    if (in->ndim == 0 && c->size == 1 && !c->acc->use_distributed) {
        /* Accelerate's gather returns its input when not distributed: a 0-d tensor stays 0-d (a copy) */
        buf = accel__coll_alloc_mem(c, (size_t)nb);
        if (!buf) return ACCEL_ERR_OUT_OF_MEMORY;
        r = accel__coll_copy_same(c, buf, in->ptr, (size_t)nb, c->device_mem);
        if (r != ACCEL_OK) { accel_coll_free(c, buf); return r; }
        *out = *in;
        out->ptr = buf;
        return ACCEL_OK;
    }
    nd = in->ndim ? in->ndim : 1;
    for (k = 0; k < ACCEL_MAX_DIMS; ++k) shape[k] = k < in->ndim ? in->shape[k] : (k == 0 ? 1 : 0);
    r = accel__coll_gather_shapes(c, in, nd, shape, &all);
    if (r != ACCEL_OK) return r;
    rowbytes = (int64_t)accel_dtype_size(in->dtype);
    for (k = 1; k < nd; ++k) rowbytes *= shape[k];
    vcounts = (size_t *)accel_host_alloc(c->acc, sizeof(size_t) * (size_t)c->size);
    if (!vcounts) { accel_host_free(c->acc, all); return ACCEL_ERR_OUT_OF_MEMORY; }
    for (i = 0; i < c->size; ++i) {
        const int64_t *s = all + (size_t)i * (2 + ACCEL_MAX_DIMS);
        int bad = s[0] != nd || s[1] != (int64_t)in->dtype;
        for (k = 1; !bad && k < nd; ++k)
            if (s[2 + k] != shape[k]) bad = 1;
        if (bad) {
            r = accel__coll_shape_mismatch(c, "gather", all, 0);
            accel_host_free(c->acc, all);
            accel_host_free(c->acc, vcounts);
            return r;
        }
        vcounts[i] = (size_t)(s[2] * rowbytes);
        total += vcounts[i];
        total_rows += s[2];
    }
    accel_host_free(c->acc, all);
    buf = accel__coll_alloc_mem(c, total);
    r = accel__coll_agree(c, buf ? ACCEL_OK : ACCEL_ERR_OUT_OF_MEMORY, "gather (buffer)"); /* all take part, or none */
    if (r != ACCEL_OK) { accel_coll_free(c, buf); accel_host_free(c->acc, vcounts); return r; }
    accel__coll_args_init(&a, ACCEL__K_ALLGATHERV, in->ptr, buf, 0, ACCEL_U8, ACCEL_COLL_SUM, 0);
    a.vcounts = vcounts;
    a.dev = c->device_mem;
    r = total > (size_t)INT_MAX ? ACCEL__FAIL(c->acc, ACCEL_ERR_INVALID_ARGUMENT, "gather: %zu bytes in total is too large", total)
                                : accel__coll_run(c, &a);
    accel_host_free(c->acc, vcounts);
    if (r != ACCEL_OK) { accel_coll_free(c, buf); return r; }
    *out = *in;
    out->ndim = nd;
    for (k = 0; k < ACCEL_MAX_DIMS; ++k) out->shape[k] = shape[k];
    out->shape[0] = total_rows;
    out->ptr = buf;
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_coll_gather_for_metrics(accel_coll *c, const accel_tensor *in, accel_tensor *out) {
    accel_result r = accel_coll_gather_rows(c, in, out);
    if (r != ACCEL_OK) return r;
    if (out->ndim > 0 && c->acc->end_of_dataloader && c->acc->remainder > 0 && c->acc->remainder < out->shape[0])
        out->shape[0] = c->acc->remainder;
    return ACCEL_OK;
}

/* ------------------------------------------------------------------------------- 12. split_between_processes */
ACCEL__DEF accel_result accel_coll_split_between_processes(int64_t n, int P, int p, int apply_padding, accel_coll_range *out) {
    int64_t q, rem;
    if (!out || n < 0 || P < 1 || p < 0 || p >= P)
        return accel__fail(NULL, ACCEL_ERR_INVALID_ARGUMENT, __FILE__, __LINE__,
                           "split_between_processes: bad arguments (n=%lld, num_processes=%d, process_index=%d)", (long long)n, P, p);
    memset(out, 0, sizeof *out);
    if (P == 1) { out->end = n; out->pad_index = n - 1; return ACCEL_OK; }
    if (apply_padding && n == 0)
        return accel__fail(NULL, ACCEL_ERR_INVALID_ARGUMENT, __FILE__, __LINE__,
                           "split_between_processes: apply_padding on an empty input (Accelerate: IndexError)");
    q = n / P;
    rem = n % P;
    out->start = (int64_t)p * q + (p < rem ? p : rem);
    out->end = out->start + q + (p < rem ? 1 : 0);
    out->pad_index = n - 1;
    if (apply_padding) out->pad_count = q + (rem > 0 ? 1 : 0) - (out->end - out->start);
    return ACCEL_OK;
}

/* --------------------------------------------------------------------------------------------- 13. gradient reducer */
typedef struct accel__coll_grad {
    void *ptr;
    size_t count;
    accel_dtype dt;
    char name[64];
    int bucket;
    size_t offset; /* elements into the bucket's flat buffer */
    int ready;
    int direct;    /* reduced in place by its own request instead of being packed (large host tensors on MPI) */
    accel_coll_request *req;
} accel__coll_grad;

typedef struct accel__coll_bucket {
    accel_dtype dt;
    int first, n;  /* its grads are order[first .. first+n) */
    size_t count;
    void *flat;    /* staging buffer, or the grad/contiguous buffer itself when inplace */
    int inplace;
    int pending;   /* grads not ready yet */
    int launched;
    int inflight;  /* launched and not finished */
    accel_result err; /* a failure seen while polling (accel__coll_reducer_poll): finish then unpacks nothing */
    accel_coll_request *req;
} accel__coll_bucket;

/* Host gradients at least this large are all-reduced in place on their own (still in bucket order) instead of being
   copied into the bucket's staging buffer and back: on the CPU the two copies cost more than the extra message
   (GPT-2 list: 0.5x of per-tensor all-reduces with packing). Device gradients are always packed (D2D copies are
   cheap; fewer NCCL launches matter). */
#define ACCEL__COLL_DIRECT_BYTES ((size_t)1 << 20)

struct accel_coll_reducer {
    accel_coll *c;
    accel_coll_reducer_desc d;
    accel__coll_grad *grads; /* stb_ds array, registration order (the index of grad_ready) */
    int *order;
    accel__coll_bucket *buckets;
    int nb;
    int finalized;
    int next_launch;
    int flat;
    int prescale; /* averaging over > 1 process: each gradient is multiplied by 1/P before the sum (DDP) */
    /* join (uneven inputs; section 13b) */
    double div;   /* the pre-scaling divisor: P, or in join mode with no_divide_by_initial_world_size the ranks active */
    int join, join_by_active, round_open, active;
    void *join_zero; /* a zero buffer as large as the largest all-reduce of a step (context memory) */
    size_t join_zero_bytes;
};
static accel_result accel__coll_join_round(accel_coll_reducer *r, int active, int *n_active);

static int accel__coll_ngrads(const accel_coll_reducer *r) { return (int)stbds_arrlen(r->grads); }

ACCEL__DEF accel_result accel_coll_reducer_create(accel_coll *c, const accel_coll_reducer_desc *desc, accel_coll_reducer **out) {
    accel_coll_reducer *r;
    accel_coll_reducer_desc d;
    if (!c) return accel__coll_null();
    if (!out) return ACCEL__FAIL(c->acc, ACCEL_ERR_INVALID_ARGUMENT, "reducer_create: out is NULL");
    *out = NULL;
    if (desc) d = *desc;
    else memset(&d, 0, sizeof d);
    if (!(d.bucket_cap_mb >= 0) || !(d.first_bucket_mb >= 0))
        return ACCEL__FAIL(c->acc, ACCEL_ERR_INVALID_ARGUMENT, "reducer: bucket sizes must be >= 0 (0 = default)");
    if ((int)d.flat < (int)ACCEL_OFF || (int)d.flat > (int)ACCEL_ON)
        return ACCEL__FAIL(c->acc, ACCEL_ERR_INVALID_ARGUMENT, "reducer: flat=%d is not an accel_toggle", (int)d.flat);
    if (d.bucket_cap_mb == 0) d.bucket_cap_mb = 25.0;
    if (d.first_bucket_mb == 0) d.first_bucket_mb = 1.0;
    r = (accel_coll_reducer *)accel_host_alloc(c->acc, sizeof *r);
    if (!r) return ACCEL_ERR_OUT_OF_MEMORY;
    memset(r, 0, sizeof *r);
    r->c = c;
    r->d = d;
    r->prescale = !d.no_average && c->size > 1;
    r->div = (double)c->size;
    r->active = c->size;
    *out = r;
    return ACCEL_OK;
}

static void accel__coll_reducer_drop_buckets(accel_coll_reducer *r) {
    int b, i;
    for (i = 0; i < accel__coll_ngrads(r); ++i)
        if (r->grads[i].req) { accel__coll_orphan(r->grads[i].req); r->grads[i].req = NULL; }
    for (b = 0; b < r->nb; ++b) {
        if (r->buckets[b].req) { accel__coll_orphan(r->buckets[b].req); r->buckets[b].req = NULL; }
        if (!r->buckets[b].inplace) accel_coll_free(r->c, r->buckets[b].flat);
    }
    accel_host_free(r->c->acc, r->buckets);
    accel_host_free(r->c->acc, r->order);
    r->buckets = NULL;
    r->order = NULL;
    r->nb = 0;
}

ACCEL__DEF void accel_coll_reducer_destroy(accel_coll_reducer *r) {
    if (!r) return;
    accel__coll_reducer_drop_buckets(r);
    accel_coll_free(r->c, r->join_zero);
    stbds_arrfree(r->grads);
    accel_host_free(r->c->acc, r);
}

/* stb_ds would write through a failed allocation: grow with the core's checked reserve first. */
static accel_result accel__coll_grads_reserve(accel_coll_reducer *r, size_t n) {
    size_t have = (size_t)stbds_arrlen(r->grads);
    if (n <= have) return ACCEL_OK;
    if (accel__arr_reserve((void **)&r->grads, sizeof *r->grads, n - have) != 0)
        return ACCEL__FAIL(r->c->acc, ACCEL_ERR_OUT_OF_MEMORY, "reducer_add: no memory for %zu gradient entries", n);
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_coll_reducer_add(accel_coll_reducer *r, const accel_tensor *grads, int n) {
    accel *acc;
    accel_result res;
    int i, first;
    if (!r) return accel__coll_null();
    acc = r->c->acc;
    first = accel__coll_ngrads(r);
    if (n < 0 || (n > 0 && !grads))
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "reducer_add: %d tensors at %p", n, (const void *)grads);
    if (r->finalized)
        return ACCEL__FAIL(acc, ACCEL_ERR_STATE, "reducer_add: the buckets are already built (register every gradient "
                           "before the first finalize/grad_ready/wait)");
    /* everything is checked before anything is registered */
    for (i = 0; i < n; ++i) {
        const accel_tensor *t = &grads[i];
        const char *nm = t->name ? t->name : "";
        int64_t numel = accel_tensor_numel(t);
        if (!accel_dtype_is_float(t->dtype) || !accel__coll_reducible(t->dtype))
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "reducer_add: tensor %d ('%s'): gradients must be "
                               "F64/F32/F16/BF16, not %s", i, nm, accel_dtype_name(t->dtype) ? accel_dtype_name(t->dtype) : "invalid");
        if (numel < 0)
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "reducer_add: tensor %d ('%s') has an invalid shape (ndim %d)",
                               i, nm, t->ndim);
        if (numel > 0 && !t->ptr)
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "reducer_add: tensor %d ('%s') has no data pointer", i, nm);
        if (numel > (int64_t)INT_MAX)
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "reducer_add: tensor %d ('%s') has more than INT_MAX elements", i, nm);
    }
    res = accel__coll_grads_reserve(r, (size_t)first + (size_t)n);
    if (res != ACCEL_OK) return res;
    for (i = 0; i < n; ++i) {
        accel__coll_grad g;
        memset(&g, 0, sizeof g);
        g.ptr = grads[i].ptr;
        g.count = (size_t)accel_tensor_numel(&grads[i]);
        g.dt = grads[i].dtype;
        accel__fmt(g.name, sizeof g.name, "%s", grads[i].name ? grads[i].name : "");
        stbds_arrput(r->grads, g); /* within the reserved capacity: no allocation */
    }
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_coll_reducer_finalize(accel_coll_reducer *r) {
    accel_coll *c;
    accel *acc;
    int i, b, flat_ok = 1, nb = 0, *counts = NULL, *fill = NULL, direct_ok;
    int open[ACCEL_DTYPE_COUNT], used_first[ACCEL_DTYPE_COUNT];
    size_t bytes[ACCEL_DTYPE_COUNT];
    size_t total = 0;
    uint64_t h = 1469598103934665603ull;
    int64_t mine[4], *all;
    accel_result res;
    if (!r) return accel__coll_null();
    c = r->c;
    acc = c->acc;
    if (r->finalized) return ACCEL_OK;
    res = accel__coll_check_broken(c);
    if (res != ACCEL_OK) return res;
    direct_ok = !c->device_mem && c->backend == ACCEL_COLL_BACKEND_MPI;
    for (i = 0; i < accel__coll_ngrads(r); ++i) {
        const accel__coll_grad *g = &r->grads[i];
        total += g->count;
        h = (h ^ (uint64_t)g->count) * 1099511628211ull;
        h = (h ^ (uint64_t)g->dt) * 1099511628211ull;
        if (g->dt != r->grads[0].dt) flat_ok = 0;
        if (i > 0 && (const unsigned char *)r->grads[i - 1].ptr + r->grads[i - 1].count * accel_dtype_size(r->grads[i - 1].dt) !=
                         (const unsigned char *)g->ptr)
            flat_ok = 0;
    }
    if (accel__coll_ngrads(r) == 0 || total > (size_t)INT_MAX || r->d.flat == ACCEL_OFF) flat_ok = 0;
    if (r->d.flat == ACCEL_ON && !flat_ok)
        res = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "reducer: flat mode requested but the %d gradients are not one "
                          "contiguous buffer of one dtype (in registration order)", accel__coll_ngrads(r));
    res = accel__coll_agree(c, res, "reducer finalize");
    if (res != ACCEL_OK) return res;
    /* every rank must build the same buckets; flat only when every rank can */
    mine[0] = accel__coll_ngrads(r);
    mine[1] = (int64_t)total;
    mine[2] = (int64_t)(h >> 1);
    mine[3] = flat_ok;
    all = (int64_t *)accel_host_alloc(acc, sizeof mine * (size_t)c->size);
    if (!all) return ACCEL_ERR_OUT_OF_MEMORY;
    res = accel__coll_host_op(c, ACCEL__K_ALLGATHER, mine, all, sizeof mine, 0, NULL);
    if (res != ACCEL_OK) { accel_host_free(acc, all); return res; }
    for (i = 0; i < c->size; ++i) {
        if (all[4 * i] != mine[0] || all[4 * i + 1] != mine[1] || all[4 * i + 2] != mine[2]) {
            char msg[ACCEL_ERROR_CAPACITY];
            size_t off = (size_t)snprintf(msg, sizeof msg, "reducer: ranks registered different gradients:");
            int k;
            for (k = 0; k < c->size && off < sizeof msg - 8; ++k)
                off += (size_t)snprintf(msg + off, sizeof msg - off, " rank %d: %lld tensors, %lld elements, layout hash %llx;", k,
                                        (long long)all[4 * k], (long long)all[4 * k + 1], (unsigned long long)all[4 * k + 2]);
            accel_host_free(acc, all);
            return ACCEL__FAIL(acc, ACCEL_ERR_MISMATCH, "%s", msg);
        }
        if (!all[4 * i + 3]) flat_ok = 0;
    }
    accel_host_free(acc, all);
    r->flat = flat_ok;
    if (accel__coll_ngrads(r) == 0) { r->finalized = 1; return ACCEL_OK; }

    r->order = (int *)accel_host_alloc(acc, sizeof(int) * (size_t)accel__coll_ngrads(r));
    r->buckets = (accel__coll_bucket *)accel_host_alloc(acc, sizeof(accel__coll_bucket) * (size_t)accel__coll_ngrads(r));
    counts = (int *)accel_host_alloc(acc, sizeof(int) * (size_t)accel__coll_ngrads(r));
    fill = (int *)accel_host_alloc(acc, sizeof(int) * (size_t)accel__coll_ngrads(r));
    if (!r->order || !r->buckets || !counts || !fill) res = ACCEL_ERR_OUT_OF_MEMORY;
    else memset(r->buckets, 0, sizeof(accel__coll_bucket) * (size_t)accel__coll_ngrads(r));
    if (res != ACCEL_OK) {
        /* nothing to build */
    } else if (flat_ok) {
        nb = 1;
        r->buckets[0].dt = r->grads[0].dt;
        r->buckets[0].first = 0;
        r->buckets[0].n = accel__coll_ngrads(r);
        r->buckets[0].count = total;
        r->buckets[0].flat = r->grads[0].ptr;
        r->buckets[0].inplace = 1;
        for (i = 0; i < accel__coll_ngrads(r); ++i) {
            r->order[i] = i;
            r->grads[i].bucket = 0;
        }
    } else {
        /* DDP's assignment: reverse registration order, one open bucket per dtype, closed once it reaches its cap
           (the first bucket of each dtype is capped at first_bucket_mb) */
        for (i = 0; i < ACCEL_DTYPE_COUNT; ++i) { open[i] = -1; used_first[i] = 0; bytes[i] = 0; }
        for (i = accel__coll_ngrads(r) - 1; i >= 0; --i) {
            accel__coll_grad *g = &r->grads[i];
            int dt = (int)g->dt;
            double cap = (used_first[dt] ? r->d.bucket_cap_mb : r->d.first_bucket_mb) * 1048576.0;
            if (open[dt] < 0) {
                open[dt] = nb++;
                r->buckets[open[dt]].dt = g->dt;
                bytes[dt] = 0;
                counts[open[dt]] = 0;
            }
            b = open[dt];
            g->bucket = b;
            g->direct = direct_ok && g->count * accel_dtype_size(g->dt) >= ACCEL__COLL_DIRECT_BYTES;
            g->offset = g->direct ? 0 : r->buckets[b].count;
            if (!g->direct) r->buckets[b].count += g->count;
            counts[b]++;
            bytes[dt] += g->count * accel_dtype_size(g->dt);
            if ((double)bytes[dt] >= cap || r->buckets[b].count > (size_t)INT_MAX / 2) {
                open[dt] = -1;
                used_first[dt] = 1;
            }
        }
        for (b = 0, i = 0; b < nb; ++b) { r->buckets[b].first = i; r->buckets[b].n = counts[b]; fill[b] = 0; i += counts[b]; }
        for (i = accel__coll_ngrads(r) - 1; i >= 0; --i) {
            b = r->grads[i].bucket;
            r->order[r->buckets[b].first + fill[b]++] = i;
        }
        for (b = 0; b < nb; ++b) {
            accel__coll_bucket *k = &r->buckets[b];
            if (k->n == 1) {
                accel__coll_grad *g = &r->grads[r->order[k->first]];
                k->inplace = 1;
                k->flat = g->ptr;
                k->count = g->count;
                g->direct = 0;
                g->offset = 0;
                continue;
            }
            if (k->count == 0) { k->flat = NULL; continue; } /* every grad of the bucket is reduced directly */
            k->flat = accel__coll_alloc_mem(c, k->count * accel_dtype_size(k->dt));
            if (!k->flat) { res = ACCEL_ERR_OUT_OF_MEMORY; break; }
        }
    }
    accel_host_free(acc, counts);
    accel_host_free(acc, fill);
    r->nb = nb;
    /* a rank that could not build its buckets fails every rank (the others would wait in the first all-reduce) */
    res = accel__coll_agree(c, res, "reducer finalize (buckets)");
    if (res != ACCEL_OK) {
        accel__coll_reducer_drop_buckets(r);
        return res;
    }
    for (b = 0; b < nb; ++b) r->buckets[b].pending = r->buckets[b].n;
    r->next_launch = 0;
    r->finalized = 1;
    accel_log(acc, ACCEL_LOG_DEBUG, "reducer: %d gradients in %d bucket(s)%s", accel__coll_ngrads(r), nb, flat_ok ? " (flat)" : "");
    return ACCEL_OK;
}

ACCEL__DEF int accel_coll_reducer_num_buckets(const accel_coll_reducer *r) { return r && r->finalized ? r->nb : -1; }
ACCEL__DEF int accel_coll_reducer_is_flat(const accel_coll_reducer *r) { return r && r->finalized ? r->flat : 0; }
ACCEL__DEF int accel_coll_reducer_bucket(const accel_coll_reducer *r, int b, int *idx, int cap) {
    int i;
    if (!r || !r->finalized || b < 0 || b >= r->nb) return -1;
    for (i = 0; i < r->buckets[b].n && i < cap; ++i)
        if (idx) idx[i] = r->order[r->buckets[b].first + i];
    return r->buckets[b].n;
}

/* Waits for bucket b's all-reduces and unpacks the packed gradients. */
static accel_result accel__coll_bucket_finish(accel_coll_reducer *r, int b) {
    accel__coll_bucket *k = &r->buckets[b];
    accel_result res = ACCEL_OK, first = k->err;
    int i;
    if (!k->inflight) return ACCEL_OK;
    k->inflight = 0;
    k->err = ACCEL_OK;
    if (k->req) {
        res = accel_coll_wait(k->req);
        k->req = NULL;
        if (first == ACCEL_OK) first = res;
        res = ACCEL_OK;
    }
    for (i = 0; i < k->n; ++i) {
        accel__coll_grad *g = &r->grads[r->order[k->first + i]];
        size_t es = accel_dtype_size(g->dt);
        if (g->req) {
            res = accel_coll_wait(g->req);
            g->req = NULL;
        } else if (first == ACCEL_OK && !k->inplace && !g->direct) {
            res = accel__coll_copy_same(r->c, g->ptr, (unsigned char *)k->flat + g->offset * es, g->count * es, r->c->device_mem);
        }
        if (res != ACCEL_OK && first == ACCEL_OK) first = res;
    }
    return first;
}

/* MPI on the host has no separate engine: many large nonblocking collectives in flight at once progress worse than
   a couple (measured with the GPT-2 list), so at most this many buckets are outstanding; NCCL queues on a stream. */
#define ACCEL__COLL_MPI_INFLIGHT 2

/* Packs bucket b (pre-scaled while packing when averaging) and launches its all-reduce(s) with SUM: DDP's order, every
   rank's gradient times fl(1/P), then the sum. Gradients reduced where they are (a bucket of one, flat mode, direct
   host gradients) are pre-scaled in place first. */
static accel_result accel__coll_bucket_launch(accel_coll_reducer *r, int b) {
    accel__coll_bucket *k = &r->buckets[b];
    accel_coll *c = r->c;
    size_t es = accel_dtype_size(k->dt);
    accel_result res;
    int i;
    k->launched = 1;
    k->inflight = 1;
    for (i = 0; i < k->n && !k->inplace; ++i) {
        accel__coll_grad *g = &r->grads[r->order[k->first + i]];
        void *slot = (unsigned char *)k->flat + g->offset * es;
        if (g->direct) {
            res = r->prescale ? accel__coll_prescale_by(c, g->ptr, g->ptr, g->count, g->dt, r->div) : ACCEL_OK;
            if (res == ACCEL_OK) res = accel_coll_all_reduce_async(c, g->ptr, g->ptr, g->count, g->dt, ACCEL_COLL_SUM, &g->req);
        } else if (r->prescale) {
            res = accel__coll_prescale_by(c, slot, g->ptr, g->count, g->dt, r->div);
        } else {
            res = accel__coll_copy_same(c, slot, g->ptr, g->count * es, c->device_mem);
        }
        if (res != ACCEL_OK) return res;
    }
    if (k->inplace && r->prescale) {
        res = accel__coll_prescale_by(c, k->flat, k->flat, k->count, k->dt, r->div);
        if (res != ACCEL_OK) return res;
    }
    if (k->inplace || k->count > 0) return accel_coll_all_reduce_async(c, k->flat, k->flat, k->count, k->dt, ACCEL_COLL_SUM, &k->req);
    return ACCEL_OK;
}

/* MPI progresses a nonblocking operation only inside MPI calls (Open MPI's shared-memory rendezvous, libnbc, our
   2-rank ring all post their next step from a test). Without this, a bucket launched early in backward would sit
   until the next launch or reducer_wait, and "overlap" would be a queue. Each grad_ready therefore tests every
   in-flight bucket once (one MPI_Test per request, no waiting) and finishes (unpacks) the ones that are done. */
static accel_result accel__coll_reducer_poll(accel_coll_reducer *r) {
    int b, i;
    if (r->c->backend != ACCEL_COLL_BACKEND_MPI) return ACCEL_OK; /* NCCL runs on its stream by itself */
    for (b = 0; b < r->next_launch; ++b) {
        accel__coll_bucket *k = &r->buckets[b];
        int busy = 0, done;
        accel_result res;
        if (!k->inflight) continue;
        for (i = 0; i < k->n; ++i) {
            accel__coll_grad *g = &r->grads[r->order[k->first + i]];
            if (!g->req) continue;
            res = accel_coll_test(g->req, &done);
            if (res != ACCEL_OK) { g->req = NULL; k->err = res; return res; } /* released or orphaned by the test */
            if (done) g->req = NULL;
            else busy = 1;
        }
        if (k->req) {
            res = accel_coll_test(k->req, &done);
            if (res != ACCEL_OK) { k->req = NULL; k->err = res; return res; }
            if (done) k->req = NULL;
            else busy = 1;
        }
        if (!busy) {
            res = accel__coll_bucket_finish(r, b); /* nothing left to wait for: unpacks */
            if (res != ACCEL_OK) return res;
        }
    }
    return ACCEL_OK;
}

/* Launches the ready buckets in bucket order. On MPI at most ACCEL__COLL_MPI_INFLIGHT are in flight: from grad_ready
   (may_block 0) a ready bucket beyond that waits for a later grad_ready's poll to free a slot, because blocking there
   on the oldest bucket means waiting for a peer that is still computing (its MPI only moves when it calls in), which
   measured slower than reducing after backward; from reducer_wait (may_block 1) the oldest is finished first. */
static accel_result accel__coll_launch_ready(accel_coll_reducer *r, int may_block) {
    while (r->next_launch < r->nb && r->buckets[r->next_launch].pending == 0) {
        accel_result res;
        if (r->c->backend == ACCEL_COLL_BACKEND_MPI) {
            int i, outstanding = 0, oldest = -1;
            for (i = 0; i < r->next_launch; ++i)
                if (r->buckets[i].inflight) { if (oldest < 0) oldest = i; ++outstanding; }
            if (outstanding >= ACCEL__COLL_MPI_INFLIGHT) {
                if (!may_block) return ACCEL_OK;
                res = accel__coll_bucket_finish(r, oldest);
                if (res != ACCEL_OK) return res;
            }
        }
        res = accel__coll_bucket_launch(r, r->next_launch);
        r->next_launch++;
        if (res != ACCEL_OK) return res;
    }
    return ACCEL_OK;
}

static void accel__coll_reducer_reset(accel_coll_reducer *r) {
    int b, i;
    for (i = 0; i < accel__coll_ngrads(r); ++i) r->grads[i].ready = 0;
    for (b = 0; b < r->nb; ++b) {
        r->buckets[b].pending = r->buckets[b].n;
        r->buckets[b].launched = 0;
        r->buckets[b].inflight = 0;
        r->buckets[b].err = ACCEL_OK;
    }
    r->next_launch = 0;
    r->round_open = 0;
}

ACCEL__DEF accel_result accel_coll_grad_ready(accel_coll_reducer *r, int index) {
    accel_result res;
    accel__coll_grad *g;
    if (!r) return accel__coll_null();
    if (index < 0 || index >= accel__coll_ngrads(r))
        return ACCEL__FAIL(r->c->acc, ACCEL_ERR_INVALID_ARGUMENT, "grad_ready: index %d is not a registered gradient (0..%d)", index, accel__coll_ngrads(r) - 1);
    if (!accel_should_reduce(r->c->acc)) return ACCEL_OK; /* accumulation step / no_sync: nothing to reduce */
    res = accel_coll_reducer_finalize(r);
    if (res != ACCEL_OK) return res;
    if (r->join && !r->round_open) { /* join: the step's first reduction counts the ranks still training */
        res = accel__coll_join_round(r, 1, NULL);
        if (res != ACCEL_OK) return res;
    }
    g = &r->grads[index];
    if (g->ready)
        return ACCEL__FAIL(r->c->acc, ACCEL_ERR_STATE, "grad_ready: gradient %d ('%s') was already marked ready in this step", index, g->name);
    g->ready = 1;
    r->buckets[g->bucket].pending--;
    res = accel__coll_reducer_poll(r);
    return res != ACCEL_OK ? res : accel__coll_launch_ready(r, 0);
}

ACCEL__DEF accel_result accel_coll_reducer_wait(accel_coll_reducer *r) {
    accel_result res, first = ACCEL_OK;
    int b;
    if (!r) return accel__coll_null();
    if (!accel_should_reduce(r->c->acc)) {
        if (r->finalized) accel__coll_reducer_reset(r);
        return ACCEL_OK;
    }
    res = accel_coll_reducer_finalize(r);
    if (res != ACCEL_OK) return res;
    if (r->join && !r->round_open) {
        res = accel__coll_join_round(r, 1, NULL);
        if (res != ACCEL_OK) return res;
    }
    /* grads never marked ready are taken as ready now (a trainer may call only wait: no overlap) */
    for (b = 0; b < r->nb; ++b) r->buckets[b].pending = 0;
    res = accel__coll_launch_ready(r, 1);
    if (res != ACCEL_OK) first = res;
    for (b = 0; b < r->nb; ++b) {
        res = accel__coll_bucket_finish(r, b);
        if (res != ACCEL_OK && first == ACCEL_OK) first = res;
    }
    accel__coll_reducer_reset(r);
    return first;
}

/* ---------------------------------------------------------------------------- 13b. join (uneven inputs), process mesh */
/* Join: one round per reduction. Every rank of the reducer's group all-gathers one word: ACCEL__COLL_JOIN_MAGIC | 1
   from a rank that reduces (its first grad_ready/wait of a sync step), | 0 from a rank in join_end. Zero ranks
   active ends the join everywhere; otherwise the ranks in join_end issue the same all-reduces as a reducing rank
   (accel__coll_join_shadow: same order, counts and dtypes) with zeros. A word without the magic is a rank in some
   other collective: ACCEL_ERR_MISMATCH. A dead rank: the round's deadline (ACCEL_ERR_TIMEOUT). */
#define ACCEL__COLL_JOIN_MAGIC ((int64_t)0x4a4f494e0000LL) /* "JOIN" */

static accel_result accel__coll_join_round(accel_coll_reducer *r, int active, int *n_active) {
    accel_coll *c = r->c;
    int64_t mine = ACCEL__COLL_JOIN_MAGIC | (active ? 1 : 0), stack_all[64], *all;
    accel_result res;
    int i, n = 0, bad = -1;
    all = c->size <= 64 ? stack_all : (int64_t *)accel_host_alloc(c->acc, sizeof(int64_t) * (size_t)c->size);
    if (!all) return ACCEL_ERR_OUT_OF_MEMORY; /* the peers then reach their deadline */
    res = accel__coll_host_op(c, ACCEL__K_ALLGATHER, &mine, all, sizeof mine, 0, NULL);
    for (i = 0; res == ACCEL_OK && i < c->size; ++i) {
        if ((all[i] & ~(int64_t)1) != ACCEL__COLL_JOIN_MAGIC) { if (bad < 0) bad = i; }
        else n += (int)(all[i] & 1);
    }
    if (all != stack_all) accel_host_free(c->acc, all);
    if (res != ACCEL_OK) return accel__fail_wrap(c->acc, res, "join (counting the ranks still training)");
    if (bad >= 0)
        return ACCEL__FAIL(c->acc, ACCEL_ERR_MISMATCH, "join: rank %d of the reducer's group is in another collective "
                           "(every rank must reduce or be in accel_coll_reducer_join_end)", bad);
    r->active = n;
    r->div = r->join_by_active && n > 0 ? (double)n : (double)c->size;
    r->round_open = active;
    if (n_active) *n_active = n;
    return ACCEL_OK;
}

/* The all-reduces one reducing step issues (accel__coll_bucket_launch), in its order, with zeros. */
static accel_result accel__coll_join_shadow(accel_coll_reducer *r) {
    accel_coll *c = r->c;
    accel_result res = ACCEL_OK;
    int b, i;
    for (b = 0; b < r->nb && res == ACCEL_OK; ++b) {
        const accel__coll_bucket *k = &r->buckets[b];
        for (i = 0; i < k->n && !k->inplace && res == ACCEL_OK; ++i) {
            const accel__coll_grad *g = &r->grads[r->order[k->first + i]];
            if (!g->direct) continue;
            res = accel__coll_fill(c, r->join_zero, g->count, g->dt, 0.0);
            if (res == ACCEL_OK) res = accel_coll_all_reduce(c, r->join_zero, r->join_zero, g->count, g->dt, ACCEL_COLL_SUM);
        }
        if (res == ACCEL_OK && (k->inplace || k->count > 0)) {
            res = accel__coll_fill(c, r->join_zero, k->count, k->dt, 0.0);
            if (res == ACCEL_OK) res = accel_coll_all_reduce(c, r->join_zero, r->join_zero, k->count, k->dt, ACCEL_COLL_SUM);
        }
    }
    return res;
}

/* statuses (and one more value) of every rank of the reducer's group; the first failure fails every rank */
static accel_result accel__coll_join_agree(accel_coll_reducer *r, accel_result local, int64_t value, int64_t *values,
                                           const char *what) {
    accel_coll *c = r->c;
    int64_t mine[2], stack_all[128], *all;
    accel_result res;
    int i, failed = -1;
    mine[0] = (int64_t)local;
    mine[1] = value;
    all = c->size <= 64 ? stack_all : (int64_t *)accel_host_alloc(c->acc, sizeof mine * (size_t)c->size);
    if (!all) return local != ACCEL_OK ? local : ACCEL_ERR_OUT_OF_MEMORY;
    res = accel__coll_host_op(c, ACCEL__K_ALLGATHER, mine, all, sizeof mine, 0, NULL);
    for (i = 0; res == ACCEL_OK && i < c->size; ++i) {
        if (all[2 * i] != ACCEL_OK && failed < 0) failed = i;
        if (values) values[i] = all[2 * i + 1];
    }
    if (res == ACCEL_OK && local == ACCEL_OK && failed >= 0)
        res = ACCEL__FAIL(c->acc, ACCEL_ERR_REMOTE, "rank %d of the reducer's group failed in %s (%s)", failed, what,
                          accel_result_string((accel_result)all[2 * failed]));
    if (all != stack_all) accel_host_free(c->acc, all);
    return local != ACCEL_OK ? local : res;
}

ACCEL__DEF accel_result accel_coll_reducer_join_begin(accel_coll_reducer *r, const accel_coll_join_desc *desc) {
    accel_coll *c;
    accel_result res, local = ACCEL_OK;
    int64_t stack_v[64], *v;
    size_t most = 0, es;
    int i, b, by_active = desc && desc->no_divide_by_initial_world_size ? 1 : 0;
    if (!r) return accel__coll_null();
    c = r->c;
    res = accel_coll_reducer_finalize(r); /* collective; fails every rank itself */
    if (res != ACCEL_OK) return res;
    if (r->join) local = ACCEL__FAIL(c->acc, ACCEL_ERR_STATE, "join_begin: the reducer is already in join mode (call "
                                     "accel_coll_reducer_join_end first)");
    for (b = 0; local == ACCEL_OK && b < r->nb; ++b) {
        const accel__coll_bucket *k = &r->buckets[b];
        es = accel_dtype_size(k->dt);
        if (k->count * es > most) most = k->count * es;
        for (i = 0; i < k->n; ++i) {
            const accel__coll_grad *g = &r->grads[r->order[k->first + i]];
            if (g->direct && g->count * es > most) most = g->count * es;
        }
    }
    if (local == ACCEL_OK && most > r->join_zero_bytes) {
        accel_coll_free(c, r->join_zero);
        r->join_zero_bytes = 0;
        r->join_zero = accel__coll_alloc_mem(c, most);
        if (!r->join_zero) local = ACCEL__FAIL(c->acc, ACCEL_ERR_OUT_OF_MEMORY, "join_begin: no memory for a %zu-byte zero buffer", most);
        else r->join_zero_bytes = most;
    }
    v = c->size <= 64 ? stack_v : (int64_t *)accel_host_alloc(c->acc, sizeof(int64_t) * (size_t)c->size);
    if (!v && local == ACCEL_OK) local = ACCEL_ERR_OUT_OF_MEMORY;
    res = accel__coll_join_agree(r, local, by_active, v, "accel_coll_reducer_join_begin");
    for (i = 1; res == ACCEL_OK && i < c->size; ++i)
        if (v[i] != v[0])
            res = ACCEL__FAIL(c->acc, ACCEL_ERR_MISMATCH, "join_begin: processes disagree on no_divide_by_initial_world_size "
                              "(rank 0=%lld, rank %d=%lld)", (long long)v[0], i, (long long)v[i]);
    if (v && v != stack_v) accel_host_free(c->acc, v);
    if (res != ACCEL_OK) return res;
    r->join = 1;
    r->join_by_active = by_active;
    r->round_open = 0;
    r->active = c->size;
    r->div = (double)c->size;
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_coll_reducer_join_end(accel_coll_reducer *r, const accel_tensor *params, int n) {
    accel_coll *c;
    accel_result res = ACCEL_OK, local = ACCEL_OK;
    int64_t stack_v[64], *v;
    int i, na = 0, last = 1, root = -1;
    if (!r) return accel__coll_null();
    c = r->c;
    if (!r->join)
        return ACCEL__FAIL(c->acc, ACCEL_ERR_STATE, "join_end: the reducer is not in join mode (accel_coll_reducer_join_begin)");
    if (r->round_open)
        return ACCEL__FAIL(c->acc, ACCEL_ERR_STATE, "join_end: called in the middle of a reduction (grad_ready without "
                           "accel_coll_reducer_wait)");
    /* bad params: still shadow (the others must finish their steps), then fail every rank before the broadcast */
    if (n < 0 || (n > 0 && !params)) local = ACCEL__FAIL(c->acc, ACCEL_ERR_INVALID_ARGUMENT, "join_end: %d tensors at %p", n, (const void *)params);
    for (i = 0; local == ACCEL_OK && i < n; ++i)
        if (accel_tensor_numel(&params[i]) < 0 || accel_dtype_size(params[i].dtype) == 0 ||
            (accel_tensor_numel(&params[i]) > 0 && !params[i].ptr))
            local = ACCEL__FAIL(c->acc, ACCEL_ERR_INVALID_ARGUMENT, "join_end: parameter %d ('%s') has no data, an invalid "
                                "shape or dtype", i, params[i].name ? params[i].name : "");
    for (;;) {
        res = accel__coll_join_round(r, 0, &na);
        if (res != ACCEL_OK || na == 0) break;
        last = 0; /* torch's Join: a rank that shadowed a step is not a last joiner */
        res = accel__coll_join_shadow(r);
        if (res != ACCEL_OK) break;
    }
    r->round_open = 0;
    if (res != ACCEL_OK) return res; /* a timeout or a broken context: the join cannot finish */
    r->join = 0;
    r->active = c->size;
    r->div = (double)c->size;
    /* DDP's _sync_final_model: the highest rank among the last joiners is authoritative */
    v = c->size <= 64 ? stack_v : (int64_t *)accel_host_alloc(c->acc, sizeof(int64_t) * (size_t)c->size);
    if (!v && local == ACCEL_OK) local = ACCEL_ERR_OUT_OF_MEMORY;
    res = accel__coll_join_agree(r, local, last ? c->rank : -1, v, "accel_coll_reducer_join_end");
    for (i = 0; res == ACCEL_OK && i < c->size; ++i)
        if (v[i] > root) root = (int)v[i];
    if (v && v != stack_v) accel_host_free(c->acc, v);
    if (res != ACCEL_OK) return res;
    if (root < 0) root = 0; /* cannot happen: the ranks of the final round are last joiners */
    for (i = 0; i < n && res == ACCEL_OK; ++i) {
        int64_t cnt = accel_tensor_numel(&params[i]);
        if (cnt > 0) res = accel_coll_broadcast(c, params[i].ptr, (size_t)cnt, params[i].dtype, root);
    }
    accel_log(c->acc, ACCEL_LOG_DEBUG, "join: every rank done; %d parameter tensor(s) broadcast from rank %d", n, root);
    return res;
}

ACCEL__DEF int accel_coll_reducer_join_active(const accel_coll_reducer *r) { return r ? r->active : -1; }

/* Process mesh. Coordinates are row-major over (pp, dp_replicate, dp_shard, cp, tp): rank = ((((pp * R + rep) * S +
   shard) * C + cp) * T + tp), torch's init_device_mesh(arange(world).view(shape)) with Accelerate's order and pp
   outermost (torchtitan's). A group over a set of dimensions holds the ranks whose other coordinates equal this
   rank's; its rank is the row-major index of this rank's coordinates along the set (torch's _flatten). */
struct accel_coll_mesh {
    accel_coll *parent;
    int size[ACCEL_COLL_MESH_NDIMS];
    int coord[ACCEL_COLL_MESH_NDIMS];
    accel_coll *comm[ACCEL_COLL_MESH_COUNT];
};

static unsigned accel__coll_mesh_mask(int d) {
    static const unsigned m[ACCEL_COLL_MESH_COUNT] = {1u, 2u, 4u, 8u, 16u, 2u | 4u, 4u | 8u, 2u | 4u | 8u};
    return d >= 0 && d < ACCEL_COLL_MESH_COUNT ? m[d] : 0u;
}

ACCEL__DEF const char *accel_coll_mesh_dim_name(accel_coll_mesh_dim d) {
    static const char *n[ACCEL_COLL_MESH_COUNT] = {"pp", "dp_replicate", "dp_shard", "cp", "tp", "dp", "dp_shard_cp", "dp_cp"};
    return (int)d >= 0 && (int)d < ACCEL_COLL_MESH_COUNT ? n[d] : "?";
}

static void accel__coll_mesh_coords_of(const int *size, int rank, int *coord) {
    int d;
    for (d = ACCEL_COLL_MESH_NDIMS - 1; d >= 0; --d) {
        coord[d] = rank % size[d];
        rank /= size[d];
    }
}

/* A context of `size` ranks (this one is `key`) carved out of parent: MPI_Comm_split and ncclCommSplit (NCCL >= 2.18;
   before, rank 0 of each group publishes a fresh unique id through an all-gather over parent). Every rank of parent
   calls it for the same group kind. Failures are agreed over parent by the caller. */
static accel_result accel__coll_sub_create(accel_coll *parent, int color, int key, int size, accel_coll **out) {
    accel *acc = parent->acc;
    accel_result r = ACCEL_OK;
    accel_coll *c = (accel_coll *)accel_host_alloc(acc, sizeof *c);
    *out = NULL;
    if (!c) r = ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "mesh: no memory for a communicator");
    else {
        memset(c, 0, sizeof *c);
        c->acc = acc;
        c->debug = parent->debug;
        c->watchdog = parent->watchdog;
        c->timeout_s = parent->timeout_s;
        c->eager_bytes = parent->eager_bytes;
        c->device_mem = parent->device_mem;
        c->cuda_aware = parent->cuda_aware;
        c->rank = key;
        c->size = size;
        c->backend = size > 1 ? parent->backend : ACCEL_COLL_BACKEND_NONE;
    }
#ifdef ACCEL_WITH_MPI
    if (parent->comm_valid) { /* collective over parent: every rank takes part, even after a local failure */
        MPI_Comm nc = MPI_COMM_NULL;
        int mrc = MPI_Comm_split(parent->comm, r == ACCEL_OK && size > 1 ? color : MPI_UNDEFINED, key, &nc);
        if (mrc != MPI_SUCCESS && r == ACCEL_OK) r = accel__mpi_fail(acc, mrc, "MPI_Comm_split (mesh)", __FILE__, __LINE__);
        if (r == ACCEL_OK && nc != MPI_COMM_NULL) {
            int i, j, chk_rank = -1, chk_size = 0;
            MPI_User_function *fns[2][4];
            c->comm = nc;
            c->comm_valid = 1;
            MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
            MPI_Comm_rank(nc, &chk_rank);
            MPI_Comm_size(nc, &chk_size);
            if (chk_rank != key || chk_size != size)
                r = ACCEL__FAIL(acc, ACCEL_ERR_MPI, "mesh: MPI_Comm_split gave rank %d of %d, expected %d of %d", chk_rank,
                                chk_size, key, size);
            fns[0][0] = accel__coll_op_f16_sum; fns[0][1] = accel__coll_op_f16_prod;
            fns[0][2] = accel__coll_op_f16_max; fns[0][3] = accel__coll_op_f16_min;
            fns[1][0] = accel__coll_op_bf16_sum; fns[1][1] = accel__coll_op_bf16_prod;
            fns[1][2] = accel__coll_op_bf16_max; fns[1][3] = accel__coll_op_bf16_min;
            for (i = 0; i < 2; ++i)
                for (j = 0; j < 4; ++j) MPI_Op_create(fns[i][j], 1, &c->op16[i][j]);
            c->ops_valid = 1;
        } else if (nc != MPI_COMM_NULL) {
            MPI_Comm_free(&nc);
        }
    }
#endif
#ifdef ACCEL__COLL_NCCL
    if (parent->nccl_valid && size > 1) { /* collective over parent (size is the same on every rank) */
        ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
        ncclResult_t rc;
        cfg.blocking = 0;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0)
        if (c) {
            c->nccl = NULL;
            rc = ncclCommSplit(parent->nccl, r == ACCEL_OK ? color : NCCL_SPLIT_NOCOLOR, key, &c->nccl, &cfg);
            if (r == ACCEL_OK) {
                if (rc != ncclSuccess && rc != ncclInProgress) r = accel__coll_nccl_fail(parent, rc, "ncclCommSplit (mesh)", __LINE__);
                else if (!c->nccl) r = ACCEL__FAIL(acc, ACCEL_ERR_NCCL, "ncclCommSplit (mesh) gave no communicator");
                else {
                    c->nccl_valid = 1;
                    r = accel__coll_nccl_settle(c, rc, "ncclCommSplit (mesh)", __LINE__);
                }
            }
        } else {
            ncclComm_t none = NULL;
            (void)ncclCommSplit(parent->nccl, NCCL_SPLIT_NOCOLOR, key, &none, &cfg);
        }
#else
        { /* a fresh init: each group's rank 0 publishes its unique id in an all-gather over parent */
            ncclUniqueId *ids = (ncclUniqueId *)accel_host_alloc(acc, sizeof(ncclUniqueId) * (size_t)parent->size), mine;
            int *keys = (int *)accel_host_alloc(acc, sizeof(int) * 2 * (size_t)parent->size), two[2], i, root = -1;
            accel_result xr;
            memset(&mine, 0, sizeof mine);
            if (r == ACCEL_OK && (!ids || !keys)) r = ACCEL_ERR_OUT_OF_MEMORY;
            if (r == ACCEL_OK && key == 0) {
                rc = ncclGetUniqueId(&mine);
                if (rc != ncclSuccess) r = accel__coll_nccl_fail(parent, rc, "ncclGetUniqueId (mesh)", __LINE__);
            }
            xr = accel__coll_agree(parent, r, "mesh (NCCL unique ids)");
            two[0] = color; two[1] = key;
            if (xr == ACCEL_OK) xr = accel__coll_host_op(parent, ACCEL__K_ALLGATHER, &mine, ids, sizeof mine, 0, NULL);
            if (xr == ACCEL_OK) xr = accel__coll_host_op(parent, ACCEL__K_ALLGATHER, two, keys, sizeof two, 0, NULL);
            for (i = 0; xr == ACCEL_OK && i < parent->size; ++i)
                if (keys[2 * i] == color && keys[2 * i + 1] == 0) root = i;
            if (xr == ACCEL_OK && root >= 0) {
                rc = ncclCommInitRankConfig(&c->nccl, size, ids[root], key, &cfg);
                if (rc != ncclSuccess && rc != ncclInProgress) xr = accel__coll_nccl_fail(parent, rc, "ncclCommInitRankConfig (mesh)", __LINE__);
                else {
                    c->nccl_valid = 1;
                    xr = accel__coll_nccl_settle(c, rc, "ncclCommInitRankConfig (mesh)", __LINE__);
                }
            }
            if (r == ACCEL_OK) r = xr;
            accel_host_free(acc, ids);
            accel_host_free(acc, keys);
        }
#endif
        if (r == ACCEL_OK) {
            c->scratch = accel_device_alloc(acc, 8);
            if (!c->scratch) r = ACCEL_ERR_OUT_OF_MEMORY;
            else if (cudaMemset(c->scratch, 0, 8) != cudaSuccess) r = ACCEL__FAIL(acc, ACCEL_ERR_CUDA, "cudaMemset (mesh scratch) failed");
        }
    }
#endif
    (void)color;
    if (r != ACCEL_OK) { accel_coll_destroy(c); return r; }
    *out = c;
    return ACCEL_OK;
}

/* desc size, else the environment, else 1 */
static accel_result accel__coll_mesh_resolve(accel *acc, int v, const char *env, const char *field, int64_t *out) {
    const char *e;
    char *end = NULL;
    long x;
    *out = v;
    if (v != 0) return ACCEL_OK;
    *out = 1;
    e = getenv(env);
    if (!e || !*e) return ACCEL_OK;
    errno = 0;
    x = strtol(e, &end, 10);
    if (errno || !end || *end || x > INT_MAX || x < INT_MIN)
        return ACCEL__FAIL(acc, ACCEL_ERR_ENVIRONMENT, "mesh: %s=\"%s\" is not an integer (for %s)", env, e, field);
    if (x < 1) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "mesh: %s=%ld: %s must be at least 1", env, x, field);
    *out = x;
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_coll_mesh_create(accel_coll *parent, const accel_coll_mesh_desc *desc, accel_coll_mesh **out) {
    static const char *const names[ACCEL_COLL_MESH_NDIMS] = {"pp_size", "dp_replicate_size", "dp_shard_size", "cp_size", "tp_size"};
    static const char *const envs[ACCEL_COLL_MESH_NDIMS] = {"ACCEL_PP_SIZE", "PARALLELISM_CONFIG_DP_REPLICATE_SIZE",
                                                           "PARALLELISM_CONFIG_DP_SHARD_SIZE", "PARALLELISM_CONFIG_CP_SIZE",
                                                           "PARALLELISM_CONFIG_TP_SIZE"};
    accel_coll_mesh_desc d;
    accel_coll_mesh *m = NULL;
    accel *acc;
    accel_result r = ACCEL_OK;
    int64_t v[ACCEL_COLL_MESH_NDIMS], prod = 1;
    int given[ACCEL_COLL_MESH_NDIMS], i, g;
    if (!parent) return accel__coll_null();
    acc = parent->acc;
    if (!out) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_coll_mesh_create: out is NULL");
    *out = NULL;
    if (desc) d = *desc;
    else memset(&d, 0, sizeof d);
    r = accel__coll_check_broken(parent);
    given[0] = d.pp_size; given[1] = d.dp_replicate_size; given[2] = d.dp_shard_size; given[3] = d.cp_size; given[4] = d.tp_size;
    for (i = 0; i < ACCEL_COLL_MESH_NDIMS; ++i) v[i] = 0;
    for (i = 0; r == ACCEL_OK && i < ACCEL_COLL_MESH_NDIMS; ++i) {
        if (given[i] < 0) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "mesh: %s=%d must be at least 1 (0 = the environment or 1)",
                            names[i], given[i]);
            break;
        }
        r = accel__coll_mesh_resolve(acc, given[i], envs[i], names[i], &v[i]);
    }
    if (r == ACCEL_OK) {
        for (i = 0; i < ACCEL_COLL_MESH_NDIMS; ++i) prod *= v[i]; /* each <= INT_MAX: the product of 5 fits unless huge */
        if (prod == 1 && parent->size > 1) { v[1] = parent->size; prod = parent->size; } /* Accelerate: plain DDP */
        for (i = 0, prod = 1; i < ACCEL_COLL_MESH_NDIMS && prod <= (int64_t)INT_MAX; ++i) prod *= v[i];
        if (prod != (int64_t)parent->size)
            r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "mesh: pp %lld x dp_replicate %lld x dp_shard %lld x cp %lld x "
                            "tp %lld = %lld does not match the %d processes of the group", (long long)v[0], (long long)v[1],
                            (long long)v[2], (long long)v[3], (long long)v[4], (long long)prod, parent->size);
    }
    /* every rank must build the same mesh: a difference fails on every rank, naming the dimension */
    if (parent->on_host_group) {
        r = accel__agree_values(acc, r, "accel_coll_mesh_create", names, v, ACCEL_COLL_MESH_NDIMS);
    } else {
        int64_t *all = (int64_t *)accel_host_alloc(acc, sizeof v * (size_t)parent->size);
        accel_result x = accel__coll_agree(parent, r == ACCEL_OK && !all ? ACCEL_ERR_OUT_OF_MEMORY : r, "accel_coll_mesh_create");
        if (x == ACCEL_OK) x = accel__coll_host_op(parent, ACCEL__K_ALLGATHER, v, all, sizeof v, 0, NULL);
        for (i = 0; x == ACCEL_OK && i < ACCEL_COLL_MESH_NDIMS; ++i) {
            int k;
            for (k = 1; k < parent->size; ++k)
                if (all[k * ACCEL_COLL_MESH_NDIMS + i] != all[i]) {
                    x = ACCEL__FAIL(acc, ACCEL_ERR_MISMATCH, "accel_coll_mesh_create: processes disagree on %s: rank 0=%lld, "
                                    "rank %d=%lld", names[i], (long long)all[i], k, (long long)all[k * ACCEL_COLL_MESH_NDIMS + i]);
                    break;
                }
        }
        accel_host_free(acc, all);
        r = x;
    }
    if (r != ACCEL_OK) return r;
    m = (accel_coll_mesh *)accel_host_alloc(acc, sizeof *m);
    if (m) {
        memset(m, 0, sizeof *m);
        m->parent = parent;
        for (i = 0; i < ACCEL_COLL_MESH_NDIMS; ++i) m->size[i] = (int)v[i];
        accel__coll_mesh_coords_of(m->size, parent->rank, m->coord);
    }
    r = accel__coll_agree(parent, m ? ACCEL_OK : ACCEL_ERR_OUT_OF_MEMORY, "accel_coll_mesh_create (memory)");
    for (g = 0; r == ACCEL_OK && g < ACCEL_COLL_MESH_COUNT; ++g) {
        unsigned mask = accel__coll_mesh_mask(g);
        int color = 0, key = 0, size = 1;
        for (i = 0; i < ACCEL_COLL_MESH_NDIMS; ++i) {
            if (mask & (1u << i)) { key = key * m->size[i] + m->coord[i]; size *= m->size[i]; }
            else color = color * m->size[i] + m->coord[i];
        }
        r = accel__coll_sub_create(parent, color, key, size, &m->comm[g]);
        r = accel__coll_agree(parent, r, "accel_coll_mesh_create (sub-communicators)");
        if (r != ACCEL_OK) accel__fail_wrap(acc, r, "mesh group %s", accel_coll_mesh_dim_name((accel_coll_mesh_dim)g));
    }
    if (r != ACCEL_OK) { accel_coll_mesh_destroy(m); return r; }
    accel_log(acc, ACCEL_LOG_DEBUG, "mesh: pp %d x dp_replicate %d x dp_shard %d x cp %d x tp %d; rank %d at (%d, %d, %d, %d, %d)",
              m->size[0], m->size[1], m->size[2], m->size[3], m->size[4], parent->rank, m->coord[0], m->coord[1],
              m->coord[2], m->coord[3], m->coord[4]);
    *out = m;
    return ACCEL_OK;
}

ACCEL__DEF void accel_coll_mesh_destroy(accel_coll_mesh *m) {
    int g;
    if (!m) return;
    for (g = ACCEL_COLL_MESH_COUNT - 1; g >= 0; --g) accel_coll_destroy(m->comm[g]);
    accel_host_free(m->parent->acc, m);
}
ACCEL__DEF accel_coll *accel_coll_mesh_comm(const accel_coll_mesh *m, accel_coll_mesh_dim d) {
    return m && (int)d >= 0 && (int)d < ACCEL_COLL_MESH_COUNT ? m->comm[d] : NULL;
}
ACCEL__DEF int accel_coll_mesh_size(const accel_coll_mesh *m, accel_coll_mesh_dim d) {
    return m && (int)d >= 0 && (int)d < ACCEL_COLL_MESH_COUNT ? m->comm[d]->size : 0;
}
ACCEL__DEF int accel_coll_mesh_coord(const accel_coll_mesh *m, accel_coll_mesh_dim d) {
    return m && (int)d >= 0 && (int)d < ACCEL_COLL_MESH_COUNT ? m->comm[d]->rank : -1;
}
ACCEL__DEF accel_result accel_coll_mesh_coords(const accel_coll_mesh *m, int rank, int coords[ACCEL_COLL_MESH_NDIMS]) {
    if (!m || !coords) return accel__fail(m ? m->parent->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, __FILE__, __LINE__, "mesh_coords: NULL argument");
    if (rank < 0 || rank >= m->parent->size)
        return ACCEL__FAIL(m->parent->acc, ACCEL_ERR_INVALID_ARGUMENT, "mesh_coords: rank %d is not in [0, %d)", rank, m->parent->size);
    accel__coll_mesh_coords_of(m->size, rank, coords);
    return ACCEL_OK;
}
ACCEL__DEF int accel_coll_mesh_rank_of(const accel_coll_mesh *m, const int coords[ACCEL_COLL_MESH_NDIMS]) {
    int d, rank = 0;
    if (!m || !coords) return -1;
    for (d = 0; d < ACCEL_COLL_MESH_NDIMS; ++d) {
        if (coords[d] < 0 || coords[d] >= m->size[d]) return -1;
        rank = rank * m->size[d] + coords[d];
    }
    return rank;
}

/* ----------------------------------------------------------------------------------------- 14. bootstrap: TCP, file */
/* Both use the core's admission (accel.h: accel__admit_*): the job's secret (ACCEL_STORE_SECRET) and run id decide
   who gets rank 0's bytes — the NCCL unique id never goes to a peer that did not prove the secret. TCP: rank 0
   listens on addr (its interface only) and answers each admitted peer's HELLO with a WELCOME carrying its proof and
   the bytes; the sockets are the core's (every call gives up at the deadline). */
typedef struct accel__coll_tcp_serve {
    const accel__admit *adm;
    const void *data;
    size_t bytes;
    int size, served;
    unsigned char *done; /* per rank: received the bytes */
    double deadline;
} accel__coll_tcp_serve;
static int accel__coll_tcp_admit(void *ctx, int fd, const accel__admit_hello *h, const accel__admit_conn *c, char *why,
                                 size_t cap) {
    accel__coll_tcp_serve *s = (accel__coll_tcp_serve *)ctx;
    unsigned char pre[4 + ACCEL__ADMIT_MAC];
    size_t pn;
    if (h->world != (uint32_t)s->size || h->rank == 0 || h->rank >= (uint32_t)s->size) {
        accel__fmt(why, cap, "not admitted: rank %u of %u is not a peer of this bootstrap", (unsigned)h->rank,
                   (unsigned)h->world);
        return 1;
    }
    if (s->done[h->rank]) {
        accel__fmt(why, cap, "not admitted: the job is full (rank %u already has the bytes)", (unsigned)h->rank);
        return 1;
    }
    pn = accel__admit_put_welcome(s->adm, h->world, h->rank, c->nonce, h->nonce, s->data, s->bytes, pre);
    if (pn && accel__store_send2(fd, ACCEL__ST_WELCOME, 0, 0, 0, pre, pn, s->data, s->bytes, s->deadline) == 0) {
        s->done[h->rank] = 1;
        s->served++;
    }
    close(fd); /* the callback owns it: done with this peer either way (a failed send: the peer retries) */
    return s->served == s->size - 1 ? 2 : 0;
}

ACCEL__DEF accel_result accel_coll_tcp_broadcast(accel *acc, const char *addr, int port, int rank, int size, void *data,
                                                 size_t bytes, int timeout_ms) {
    struct sockaddr_storage ss;
    socklen_t sl = 0;
    double deadline;
    accel__admit adm;
    accel_result r;
    char where[300];
    if (!addr || !*addr || port < 1 || port > 65535 || size < 1 || rank < 0 || rank >= size || (bytes && !data) ||
        timeout_ms < 0 || bytes > ((size_t)1 << 30))
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "tcp bootstrap: bad arguments (addr=%s port=%d rank=%d "
                           "size=%d bytes=%zu)", addr ? addr : "(null)", port, rank, size, bytes);
    if (size == 1) return ACCEL_OK;
    deadline = accel_now() + 1e-3 * (double)timeout_ms;
    if (accel__sock_resolve(addr, port, &ss, &sl) != 0)
        return ACCEL__FAIL(acc, ACCEL_ERR_ENVIRONMENT, "tcp bootstrap: cannot resolve MASTER_ADDR \"%s\"", addr);
    accel__fmt(where, sizeof where, "%s:%d", addr, port);
    r = accel__admit_init(acc, &adm, "nccl-tcp");
    if (r == ACCEL_OK) r = accel__admit_policy(acc, &adm, &ss, "tcp bootstrap", where);
    if (r != ACCEL_OK) return r;
    if (rank == 0) {
        accel__coll_tcp_serve s;
        int lfd = accel__sock_listen(&ss, ACCEL__ADMIT_BACKLOG);
        if (lfd < 0)
            return ACCEL__FAIL(acc, ACCEL_ERR_IO, "tcp bootstrap: rank 0 cannot listen on %s: %s", where,
                               strerror(errno));
        memset(&s, 0, sizeof s);
        s.adm = &adm;
        s.data = data;
        s.bytes = bytes;
        s.size = size;
        s.deadline = deadline;
        s.done = (unsigned char *)accel_host_alloc(acc, (size_t)size);
        if (!s.done) { close(lfd); return ACCEL_ERR_OUT_OF_MEMORY; }
        memset(s.done, 0, (size_t)size);
        r = accel__admit_serve(acc, &adm, lfd, "tcp bootstrap", where, deadline, NULL, 0, accel__coll_tcp_admit, &s,
                               NULL, 0);
        close(lfd);
        accel_host_free(acc, s.done);
        if (r == ACCEL_ERR_TIMEOUT)
            return ACCEL__FAIL(acc, ACCEL_ERR_TIMEOUT, "tcp bootstrap: rank 0 listening on %s served %d of %d peers "
                               "within %d ms", where, s.served, size - 1, timeout_ms);
        return r;
    } else {
        unsigned char *p = NULL;
        const unsigned char *body = NULL;
        size_t blen = 0;
        int fd = -1;
        r = accel__admit_join(acc, &adm, &ss, sl, "tcp bootstrap", where, (uint32_t)size, (uint32_t)rank, deadline,
                              deadline, bytes, &fd, &p, &body, &blen);
        if (r == ACCEL_OK && blen != bytes)
            r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "tcp bootstrap: rank 0 sends %zu bytes, rank %d expects %zu", blen,
                            rank, bytes);
        else if (r == ACCEL_OK && bytes)
            memcpy(data, body, bytes);
        if (fd >= 0) close(fd);
        accel_host_free(acc, p);
        return r;
    }
}

/* File: rank 0 seals the bytes (accel__admit_seal: its proof, the run id; readable by its user only) and writes them
   atomically (temp + fsync + rename); the others poll. A file that is not this job's (garbage, another run's, one
   written without the secret) is ignored, not an error: whoever can write to the directory cannot fail the job by
   writing first, and rank 0's rename replaces it. */
ACCEL__DEF accel_result accel_coll_file_broadcast(accel *acc, const char *path, int rank, void *data, size_t bytes,
                                                  int timeout_ms) {
    double deadline;
    accel__admit adm;
    accel_result r;
    char ignored[300];
    if (!path || !*path || rank < 0 || (bytes && !data) || timeout_ms < 0 || bytes > ((size_t)1 << 30))
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "file bootstrap: bad arguments (path=%s rank=%d bytes=%zu)",
                           path ? path : "(null)", rank, bytes);
    deadline = accel_now() + 1e-3 * (double)timeout_ms;
    r = accel__admit_init(acc, &adm, "nccl-file");
    if (r != ACCEL_OK) return r;
    if (rank == 0) {
        unsigned char *buf = NULL;
        size_t n = 0;
        char tmp[4200];
        int fd;
        r = accel__admit_seal(acc, &adm, data, bytes, &buf, &n);
        if (r == ACCEL_OK) r = accel__atomic_open(acc, path, tmp, sizeof tmp, &fd);
        if (r == ACCEL_OK) {
            int ok = fchmod(fd, 0600) == 0 && accel__write_all(fd, buf, n) == 0; /* 0600 before a byte is in it */
            accel_result cr;
            if (!ok) r = accel__io_fail(acc, "cannot write", tmp);
            cr = accel__atomic_commit(acc, fd, tmp, path, ok);
            if (r == ACCEL_OK) r = cr;
        }
        accel_host_free(acc, buf);
        return r == ACCEL_OK ? r : accel__fail_wrap(acc, r, "file bootstrap");
    }
    ignored[0] = 0;
    for (;;) {
        if (accel__is_file(path)) {
            char *buf = NULL;
            size_t n = 0, blen = 0;
            const unsigned char *body = NULL;
            char why[300];
            r = accel__read_file(acc, path, &buf, &n, ACCEL__SEAL_FIXED + ACCEL__ST_MAX_TOKEN + 8 + bytes + 4096);
            if (r == ACCEL_OK &&
                accel__admit_unseal(&adm, (const unsigned char *)buf, n, &body, &blen, why, sizeof why) == 0) {
                if (blen != bytes)
                    r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "file bootstrap: %s holds %zu bytes, rank %d expects %zu",
                                    path, blen, rank, bytes);
                else if (bytes)
                    memcpy(data, body, bytes);
                accel_host_free(acc, buf);
                return r;
            }
            if (r == ACCEL_OK && strcmp(ignored, why) != 0) {
                accel_log(acc, ACCEL_LOG_WARN, "file bootstrap: ignored %s: %s", path, why);
                accel__fmt(ignored, sizeof ignored, "%s", why);
            }
            accel_host_free(acc, buf); /* unreadable or not ours: rank 0's file may still replace it */
        }
        if (accel__ms_left(deadline) == 0) break;
        accel__sleep_ms(20);
    }
    return ACCEL__FAIL(acc, ACCEL_ERR_TIMEOUT, "file bootstrap: %s did not appear within %d ms (rank 0 not started, or "
                       "not a shared filesystem?)%s%s", path, timeout_ms,
                       ignored[0] ? "; ignored what was there: " : "", ignored);
}

/* ---------------------------------------------------------------------------------------------------- 15. NCCL init */
static accel_result accel__coll_nccl_init(accel_coll *c) {
#ifdef ACCEL__COLL_NCCL
    accel *acc = c->acc;
    ncclUniqueId id;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    ncclResult_t rc;
    accel_result r = ACCEL_OK;
    const char *how = getenv("ACCEL_NCCL_INIT");
    const char *file = getenv("ACCEL_NCCL_INIT_FILE");
    int tmo = (int)(c->timeout_s * 1000.0 > 2e9 ? 2e9 : c->timeout_s * 1000.0);
    /* the host process group (MPI or the TCP store) carries the id when this context spans it */
    int group = c->on_host_group && strcmp(accel_host_group_name(acc), "none") != 0;
    memset(&id, 0, sizeof id);
#ifdef ACCEL_WITH_MPI
    if (!how || !*how) how = group ? "host" : c->comm_valid ? "mpi" : acc->master_addr[0] ? "tcp" : (file && *file) ? "file" : "";
#else
    if (!how || !*how) how = group ? "host" : acc->master_addr[0] ? "tcp" : (file && *file) ? "file" : "";
#endif
    if (c->rank == 0) {
        rc = ncclGetUniqueId(&id);
        if (rc != ncclSuccess) r = accel__coll_nccl_fail(c, rc, "ncclGetUniqueId", __LINE__);
    }
    r = accel__coll_agree(c, r, "NCCL bootstrap (ncclGetUniqueId)"); /* rank 0's failure reaches every rank */
    if (r != ACCEL_OK) return r;
    if (c->size == 1) {
        /* nothing to exchange */
    } else if (!strcmp(how, "host")) {
        if (!group) return ACCEL__FAIL(acc, ACCEL_ERR_ENVIRONMENT, "ACCEL_NCCL_INIT=host but this context has no host process group to use");
        r = accel_host_broadcast(acc, &id, sizeof id, 0);
    } else if (!strcmp(how, "mpi")) {
#ifdef ACCEL_WITH_MPI
        if (!c->comm_valid) return ACCEL__FAIL(acc, ACCEL_ERR_ENVIRONMENT, "ACCEL_NCCL_INIT=mpi but MPI is not the process group");
        {
            MPI_Request q;
            ACCEL__MPI_CHECK(acc, MPI_Ibcast(&id, (int)sizeof id, MPI_BYTE, 0, c->comm, &q));
            r = accel__mpi_wait(acc, &q, accel__coll_deadline(c), "NCCL bootstrap (ncclUniqueId broadcast)");
            if (r == ACCEL_ERR_TIMEOUT) c->broken = r; /* the request stays in flight: the communicator is unusable */
        }
#else
        return ACCEL__FAIL(acc, ACCEL_ERR_UNSUPPORTED, "ACCEL_NCCL_INIT=mpi but the implementation was built without MPI");
#endif
    } else if (!strcmp(how, "tcp")) {
        if (!acc->master_addr[0]) return ACCEL__FAIL(acc, ACCEL_ERR_ENVIRONMENT, "ACCEL_NCCL_INIT=tcp needs MASTER_ADDR (and MASTER_PORT)");
        r = accel_coll_tcp_broadcast(acc, acc->master_addr, acc->master_port, c->rank, c->size, &id, sizeof id, tmo);
    } else if (!strcmp(how, "file")) {
        if (!file || !*file) return ACCEL__FAIL(acc, ACCEL_ERR_ENVIRONMENT, "ACCEL_NCCL_INIT=file needs ACCEL_NCCL_INIT_FILE=<path on a shared filesystem>");
        r = accel_coll_file_broadcast(acc, file, c->rank, &id, sizeof id, tmo);
    } else {
        return ACCEL__FAIL(acc, ACCEL_ERR_ENVIRONMENT, "NCCL bootstrap: ACCEL_NCCL_INIT=\"%s\" is not host|mpi|tcp|file (and no "
                           "default applies: no host process group, MPI, MASTER_ADDR or ACCEL_NCCL_INIT_FILE)", how);
    }
    if (r != ACCEL_OK) return r;
    cfg.blocking = 0;
    rc = ncclCommInitRankConfig(&c->nccl, c->size, id, c->rank, &cfg);
    if (rc != ncclSuccess && rc != ncclInProgress) return accel__coll_nccl_fail(c, rc, "ncclCommInitRankConfig", __LINE__);
    c->nccl_valid = 1;
    r = accel__coll_nccl_settle(c, rc, "ncclCommInitRankConfig", __LINE__);
    if (r != ACCEL_OK) return r;
    c->scratch = accel_device_alloc(acc, 8);
    if (!c->scratch) return ACCEL_ERR_OUT_OF_MEMORY;
    ACCEL__CUDA_CHECK(c->acc, cudaMemset(c->scratch, 0, 8));
    return ACCEL_OK;
#else
    return ACCEL__FAIL(c->acc, ACCEL_ERR_UNSUPPORTED, "NCCL needs the ACCEL_IMPLEMENTATION TU compiled with nvcc and ACCEL_WITH_NCCL");
#endif
}


/* ------------------------------------------------------------------------------------------------------- 16. ZeRO */
ACCEL__DEF accel_result accel_coll_partition_list(accel *acc, const accel_tensor *t, int n, int size, int rank,
                                                  accel_coll_partition *out) {
    int64_t total = 0;
    int i;
    if (!out) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_coll_partition_list: out is NULL");
    memset(out, 0, sizeof *out);
    if (n < 0 || (n > 0 && !t))
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "partition: %d tensors at %p", n, (const void *)t);
    if (size < 1 || rank < 0 || rank >= size)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "partition: rank %d of %d ranks", rank, size);
    for (i = 0; i < n; ++i) {
        int64_t k = accel_tensor_numel(&t[i]);
        if (k < 0)
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "partition: tensor %d ('%s') has an invalid shape (ndim %d)", i,
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

ACCEL__DEF int accel_coll_partition_views(const accel_coll_partition *p, const accel_tensor *t, int n, accel_tensor *views) {
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

/* All-gather chunks: at most this many bytes in total per all_gather (or bucket_cap_mb if smaller); larger chunks
   gained nothing on MPI over shared memory and cost staging memory. */
#define ACCEL__COLL_ZERO_CHUNK ((size_t)4 << 20)

/* ZeRO-2 bucket: parameters [first, last] (reverse registration order across buckets, as DDP), flat range [lo, hi) */
typedef struct accel__coll_zbucket {
    int first, last, pending;
    int64_t lo, hi;
} accel__coll_zbucket;

struct accel_coll_zero {
    accel_coll *c;
    int stage, n, average;
    size_t cap_bytes;
    accel_coll_partition part;
    int64_t *off;            /* n + 1 flat offsets */
    accel_tensor *grads;     /* copies of desc.grads (no names) */
    accel_dtype gdt;         /* stage 2: the gradients' dtype */
    accel_coll_reducer *red; /* stage 1 */
    /* stage 2 */
    void *shard_grad;        /* part.shard elements of gdt (at least 1) */
    accel__coll_zbucket *buckets;
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

static accel_result accel__coll_zero_null(void) {
    return accel__fail(NULL, ACCEL_ERR_INVALID_ARGUMENT, __FILE__, __LINE__, "accel_coll_zero: object is NULL");
}

/* Copies the flat elements [lo, hi) of list t (offsets z->off, element size es) to buf (to_buf) or back. */
static accel_result accel__coll_zero_copy(accel_coll_zero *z, const accel_tensor *t, int64_t lo, int64_t hi, void *buf,
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

ACCEL__DEF void accel_coll_zero_destroy(accel_coll_zero *z) {
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
    accel_coll_reducer_destroy(z->red);
    accel_coll_free(z->c, z->shard_grad);
    accel_coll_free(z->c, z->gbuf);
    accel_host_free(acc, z->off);
    accel_host_free(acc, z->grads);
    accel_host_free(acc, z->buckets);
    accel_host_free(acc, z->bucket_of);
    accel_host_free(acc, z);
}

/* What every rank must agree on: stage, averaging, count, total, and a hash of every numel and gradient dtype. */
static accel_result accel__coll_zero_check_layout(accel_coll_zero *z) {
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
    r = accel__coll_agree(c, all ? ACCEL_OK : accel__fail_wrap(c->acc, ACCEL_ERR_OUT_OF_MEMORY, "accel_coll_zero_create"),
                          "accel_coll_zero_create (layout)");
    if (r == ACCEL_OK) r = accel__coll_host_op(c, ACCEL__K_ALLGATHER, mine, all, sizeof mine, 0, NULL);
    for (i = 0; r == ACCEL_OK && i < c->size; ++i)
        if (memcmp(all + 5 * i, mine, sizeof mine) != 0) {
            accel__sb b;
            int k;
            accel__sb_init(&b, c->acc);
            accel__sb_printf(&b, "accel_coll_zero_create: ranks gave different lists:");
            for (k = 0; k < c->size; ++k)
                accel__sb_printf(&b, " rank %d: stage %lld, %s, %lld tensors, %lld elements, layout hash %llx;", k,
                                 (long long)all[5 * k], all[5 * k + 1] ? "average" : "sum", (long long)all[5 * k + 2],
                                 (long long)all[5 * k + 3], (unsigned long long)all[5 * k + 4]);
            r = ACCEL__FAIL(c->acc, ACCEL_ERR_MISMATCH, "%s", b.oom ? "accel_coll_zero_create: ranks gave different lists" : b.p);
            accel__sb_free(&b);
        }
    accel_host_free(c->acc, all);
    return r;
}

/* Stage 2: DDP's bucket assignment over whole tensors in reverse order (a bucket closes once it reaches the cap). */
static accel_result accel__coll_zero_buckets(accel_coll_zero *z) {
    accel *acc = z->c->acc;
    size_t es = accel_dtype_size(z->gdt), bytes = 0, most = 1;
    int i, b;
    z->buckets = (accel__coll_zbucket *)accel_host_alloc(acc, sizeof(accel__coll_zbucket) * (size_t)(z->n + 1));
    z->bucket_of = (int *)accel_host_alloc(acc, sizeof(int) * 2 * (size_t)(z->n + 1));
    if (!z->buckets || !z->bucket_of) return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "accel_coll_zero_create (buckets)");
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
        if (!z->slot[i]) return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "accel_coll_zero_create (staging)");
    }
    z->shard_grad = accel__coll_alloc_mem(z->c, (size_t)(z->part.shard > 0 ? z->part.shard : 1) * es);
    if (!z->shard_grad) return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "accel_coll_zero_create (shard gradients)");
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_coll_zero_create(accel_coll *c, const accel_coll_zero_desc *desc, accel_coll_zero **out) {
    accel *acc;
    accel_coll_zero_desc d;
    accel_coll_zero *z = NULL;
    accel_result r = ACCEL_OK;
    int i;
    if (!c) return accel__coll_null();
    acc = c->acc;
    if (out) *out = NULL;
    if (desc) d = *desc;
    else memset(&d, 0, sizeof d);
    if (d.stage == 0) d.stage = 1;
    if (!out) r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_coll_zero_create: out is NULL");
    else if (d.stage != 1 && d.stage != 2)
        r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_coll_zero_create: stage %d (1 or 2)", d.stage);
    else if (!(d.bucket_cap_mb >= 0.0 && d.bucket_cap_mb < 1e9))
        r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_coll_zero_create: bucket_cap_mb %g (0 = 25)", d.bucket_cap_mb);
    else if (d.n < 0 || (d.n > 0 && (!d.params || !d.grads)))
        r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_coll_zero_create: n %d with params %p, grads %p", d.n,
                        (const void *)d.params, (const void *)d.grads);
    if (r == ACCEL_OK) {
        z = (accel_coll_zero *)accel_host_alloc(acc, sizeof *z);
        if (!z) r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "accel_coll_zero_create");
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
        if (!z->off || !z->grads) r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "accel_coll_zero_create");
    }
    if (r == ACCEL_OK) r = accel_coll_partition_list(acc, d.params, d.n, c->size, c->rank, &z->part);
    for (i = 0; r == ACCEL_OK && i < d.n; ++i) {
        const accel_tensor *g = &d.grads[i];
        int64_t pk = accel_tensor_numel(&d.params[i]), gk = accel_tensor_numel(g);
        const char *nm = d.params[i].name ? d.params[i].name : "";
        z->off[i] = i == 0 ? 0 : z->off[i - 1] + accel_tensor_numel(&d.params[i - 1]);
        z->grads[i] = *g;
        z->grads[i].name = NULL;
        if (gk != pk)
            r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_coll_zero_create: grads[%d] has %lld elements, its parameter "
                            "'%s' has %lld", i, (long long)gk, nm, (long long)pk);
        else if (!accel_dtype_is_float(g->dtype) || !accel__coll_reducible(g->dtype))
            r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_coll_zero_create: grads[%d] ('%s') is %s (F64/F32/F16/BF16)", i,
                            nm, accel_dtype_name(g->dtype) ? accel_dtype_name(g->dtype) : "invalid");
        else if (gk > 0 && !g->ptr)
            r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_coll_zero_create: grads[%d] ('%s') has no data pointer", i, nm);
        else if (d.stage == 2 && g->dtype != d.grads[0].dtype)
            r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_coll_zero_create: stage 2 needs one gradient dtype (grads[0] is "
                            "%s, grads[%d] ('%s') %s)", accel_dtype_name(d.grads[0].dtype), i, nm, accel_dtype_name(g->dtype));
    }
    if (r == ACCEL_OK) z->off[d.n] = z->part.total;
    /* a bad list on one rank fails every rank; then the layouts must agree */
    r = accel__coll_agree(c, r, "accel_coll_zero_create");
    if (r == ACCEL_OK) r = accel__coll_zero_check_layout(z);
    if (r == ACCEL_OK && z->stage == 1) {
        accel_coll_reducer_desc rd;
        memset(&rd, 0, sizeof rd);
        rd.bucket_cap_mb = d.bucket_cap_mb;
        rd.no_average = d.no_average;
        r = accel_coll_reducer_create(c, &rd, &z->red);
        if (r == ACCEL_OK) r = accel_coll_reducer_add(z->red, d.grads, d.n);
        r = accel__coll_agree(c, r, "accel_coll_zero_create (reducer)");
        if (r == ACCEL_OK) r = accel_coll_reducer_finalize(z->red); /* collective, agrees itself */
    } else if (r == ACCEL_OK) {
        if (d.n > 0) z->gdt = d.grads[0].dtype;
        else z->gdt = ACCEL_F32;
        /* one process: the gradients are final where they are (no buckets, no shard copy) */
        if (c->size > 1) r = accel__coll_agree(c, accel__coll_zero_buckets(z), "accel_coll_zero_create (buckets)");
    }
    if (r != ACCEL_OK) {
        accel_coll_zero_destroy(z);
        return r;
    }
    accel_log(acc, ACCEL_LOG_DEBUG, "zero: stage %d, %d tensors, %lld elements, shard [%lld, %lld) of %lld per rank%s", z->stage,
              z->n, (long long)z->part.total, (long long)z->part.begin, (long long)z->part.end, (long long)z->part.shard,
              z->stage == 2 ? "" : " (gradients: the reducer)");
    *out = z;
    return ACCEL_OK;
}

ACCEL__DEF const accel_coll_partition *accel_coll_zero_partition(const accel_coll_zero *z) { return z ? &z->part : NULL; }

ACCEL__DEF accel_result accel_coll_zero_views(accel_coll_zero *z, const accel_tensor *t, int n, accel_tensor *views) {
    int i;
    if (!z) return accel__coll_zero_null();
    if (n != z->n || (n > 0 && (!t || !views)))
        return ACCEL__FAIL(z->c->acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_coll_zero_views: %d tensors for a partition of %d", n, z->n);
    for (i = 0; i < n; ++i)
        if (accel_tensor_numel(&t[i]) != z->off[i + 1] - z->off[i])
            return ACCEL__FAIL(z->c->acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_coll_zero_views: tensor %d ('%s') has %lld elements, the "
                               "partitioned one %lld", i, t[i].name ? t[i].name : "", (long long)accel_tensor_numel(&t[i]),
                               (long long)(z->off[i + 1] - z->off[i]));
    (void)accel_coll_partition_views(&z->part, t, n, views);
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_coll_zero_grad_views(accel_coll_zero *z, accel_tensor *views, int n) {
    int i;
    if (!z) return accel__coll_zero_null();
    if (z->stage == 1 || !z->shard_grad) return accel_coll_zero_views(z, z->grads, n, views);
    if (n != z->n || (n > 0 && !views))
        return ACCEL__FAIL(z->c->acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_coll_zero_grad_views: %d views for a partition of %d", n, z->n);
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
static accel_result accel__coll_zero_finish(accel_coll_zero *z, int k) {
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
        const accel__coll_zbucket *q = &z->buckets[b];
        int64_t lo = q->lo > z->part.begin ? q->lo : z->part.begin, hi = q->hi < z->part.end ? q->hi : z->part.end;
        size_t es = accel_dtype_size(z->gdt);
        if (hi > lo && z->direct) /* the sums landed in this rank's own gradient buffers */
            r = accel__coll_zero_copy(z, z->grads, lo, hi, (unsigned char *)z->shard_grad + (size_t)(lo - z->part.begin) * es,
                                      es, 1);
        else if (hi > lo)
            r = accel__coll_copy_same(z->c, (unsigned char *)z->shard_grad + (size_t)(lo - z->part.begin) * es,
                                      (const unsigned char *)z->slot[k] + (size_t)(lo - q->lo) * es, (size_t)(hi - lo) * es,
                                      z->c->device_mem);
    }
    return r;
}

/* Stage 2: packs bucket b (pre-scaled by 1/P when averaging: DDP's order) and reduces each rank's part to that rank. */
static accel_result accel__coll_zero_launch(accel_coll_zero *z, int b) {
    accel_coll *c = z->c;
    const accel__coll_zbucket *q = &z->buckets[b];
    size_t es = accel_dtype_size(z->gdt);
    int k = b & 1, i, rk;
    accel_result r = accel__coll_zero_finish(z, k);
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
            for (rk = 0; rk < c->size; ++rk) {
                int64_t s0 = (int64_t)rk * z->part.shard, lo = z->off[i] > s0 ? z->off[i] : s0;
                int64_t hi = z->off[i + 1] < s0 + z->part.shard ? z->off[i + 1] : s0 + z->part.shard;
                accel_coll_request *req = NULL;
                void *p = (unsigned char *)z->grads[i].ptr + (size_t)(lo - z->off[i]) * es;
                if (hi <= lo) continue;
                r = accel_coll_reduce_async(c, p, p, (size_t)(hi - lo), z->gdt, ACCEL_COLL_SUM, rk, &req);
                if (r != ACCEL_OK) return r;
                if (accel__arr_reserve((void **)&z->slot_req[k], sizeof req, 1) != 0) {
                    accel_coll_wait(req);
                    return ACCEL__FAIL(c->acc, ACCEL_ERR_OUT_OF_MEMORY, "zero: request list");
                }
                stbds_arrput(z->slot_req[k], req);
            }
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
    for (rk = 0; rk < c->size; ++rk) {
        int64_t s0 = (int64_t)rk * z->part.shard, lo = q->lo > s0 ? q->lo : s0;
        int64_t hi = q->hi < s0 + z->part.shard ? q->hi : s0 + z->part.shard;
        accel_coll_request *req = NULL;
        void *p = (unsigned char *)z->slot[k] + (size_t)(lo - q->lo) * es;
        if (hi <= lo) continue;
        if (c->size == 1) continue; /* the bucket already holds the result */
        r = accel_coll_reduce_async(c, p, p, (size_t)(hi - lo), z->gdt, ACCEL_COLL_SUM, rk, &req);
        if (r != ACCEL_OK) return r;
        if (accel__arr_reserve((void **)&z->slot_req[k], sizeof req, 1) != 0) {
            accel_coll_wait(req);
            return ACCEL__FAIL(c->acc, ACCEL_ERR_OUT_OF_MEMORY, "zero: request list");
        }
        stbds_arrput(z->slot_req[k], req);
    }
    return ACCEL_OK;
}

static accel_result accel__coll_zero_launch_ready(accel_coll_zero *z) {
    while (z->next_launch < z->nb && z->buckets[z->next_launch].pending == 0) {
        accel_result r = accel__coll_zero_launch(z, z->next_launch);
        z->next_launch++;
        if (r != ACCEL_OK) return r;
    }
    return ACCEL_OK;
}

static void accel__coll_zero_reset(accel_coll_zero *z) {
    int b, i;
    for (i = 0; i < z->n; ++i) z->ready[i] = 0;
    for (b = 0; b < z->nb; ++b) z->buckets[b].pending = z->buckets[b].last - z->buckets[b].first + 1;
    z->next_launch = 0;
}

ACCEL__DEF accel_result accel_coll_zero_grad_ready(accel_coll_zero *z, int index) {
    if (!z) return accel__coll_zero_null();
    if (z->stage == 1) return accel_coll_grad_ready(z->red, index);
    if (index < 0 || index >= z->n)
        return ACCEL__FAIL(z->c->acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_coll_zero_grad_ready: index %d is not a gradient (0..%d)",
                           index, z->n - 1);
    if (!accel_should_reduce(z->c->acc) || !z->shard_grad) return ACCEL_OK;
    if (z->ready[index])
        return ACCEL__FAIL(z->c->acc, ACCEL_ERR_STATE, "accel_coll_zero_grad_ready: gradient %d was already marked ready in this step", index);
    z->ready[index] = 1;
    z->buckets[z->bucket_of[index]].pending--;
    return accel__coll_zero_launch_ready(z);
}

ACCEL__DEF accel_result accel_coll_zero_wait(accel_coll_zero *z) {
    accel_result r, first = ACCEL_OK;
    int b, k;
    if (!z) return accel__coll_zero_null();
    if (z->stage == 1) return accel_coll_reducer_wait(z->red);
    if (!z->shard_grad) return ACCEL_OK; /* one process */
    if (!accel_should_reduce(z->c->acc)) {
        accel__coll_zero_reset(z);
        return ACCEL_OK;
    }
    for (b = 0; b < z->nb; ++b) z->buckets[b].pending = 0;
    first = accel__coll_zero_launch_ready(z);
    /* the older bucket first (same order on every rank) */
    k = z->slot_bucket[0] >= 0 && (z->slot_bucket[1] < 0 || z->slot_bucket[0] < z->slot_bucket[1]) ? 0 : 1;
    r = accel__coll_zero_finish(z, k);
    if (r != ACCEL_OK && first == ACCEL_OK) first = r;
    r = accel__coll_zero_finish(z, 1 - k);
    if (r != ACCEL_OK && first == ACCEL_OK) first = r;
    accel__coll_zero_reset(z);
    return first;
}

/* Local check of a list against the partition: n tensors, the partitioned numels, one dtype, data present. */
static accel_result accel__coll_zero_check_list(accel_coll_zero *z, const accel_tensor *t, int n, const char *what) {
    int i;
    if (n != z->n || (n > 0 && !t))
        return ACCEL__FAIL(z->c->acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: %d tensors for a partition of %d", what, n, z->n);
    for (i = 0; i < n; ++i) {
        int64_t k = accel_tensor_numel(&t[i]);
        if (k != z->off[i + 1] - z->off[i])
            return ACCEL__FAIL(z->c->acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: tensor %d ('%s') has %lld elements, the partitioned one "
                               "%lld", what, i, t[i].name ? t[i].name : "", (long long)k, (long long)(z->off[i + 1] - z->off[i]));
        if (t[i].dtype != t[0].dtype || accel_dtype_size(t[i].dtype) == 0)
            return ACCEL__FAIL(z->c->acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: tensor %d ('%s') is %s, tensor 0 %s (one dtype per list)",
                               what, i, t[i].name ? t[i].name : "", accel_dtype_name(t[i].dtype) ? accel_dtype_name(t[i].dtype) : "invalid",
                               accel_dtype_name(t[0].dtype) ? accel_dtype_name(t[0].dtype) : "invalid");
        if (k > 0 && !t[i].ptr)
            return ACCEL__FAIL(z->c->acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: tensor %d ('%s') has no data pointer", what, i,
                               t[i].name ? t[i].name : "");
    }
    return ACCEL_OK;
}

/* The all-gather of every shard of t, in chunks of the bucket size, two in flight. */
static accel_result accel__coll_zero_gather_list(accel_coll_zero *z, const accel_tensor *t) {
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
    B = (z->cap_bytes < ACCEL__COLL_ZERO_CHUNK ? z->cap_bytes : ACCEL__COLL_ZERO_CHUNK) / es / (size_t)P;
    if (B < 1) B = 1;
    if (B > (size_t)S) B = (size_t)S;
    if (B > (size_t)INT_MAX / (size_t)P) B = (size_t)INT_MAX / (size_t)P;
    need = 2 * B * es * (size_t)(P + 1);
    if (z->gbuf_bytes < need) {
        accel_coll_free(c, z->gbuf);
        z->gbuf_bytes = 0;
        z->gbuf = accel__coll_alloc_mem(c, need);
        if (!z->gbuf) return accel__fail_wrap(c->acc, ACCEL_ERR_OUT_OF_MEMORY, "accel_coll_zero_gather: %zu bytes of staging", need);
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
                if (j != c->rank && lo < hi) e = accel__coll_zero_copy(z, t, lo, hi, recv + (size_t)j * (size_t)cnt[k] * es, es, 0);
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
            if (lo < hi) r = accel__coll_zero_copy(z, t, lo, hi, send, es, 1);
        }
        if (r == ACCEL_OK) r = accel_coll_all_gather_async(c, send, recv, (size_t)cnt[k], dt, &req[k]);
    }
    return r;
}

ACCEL__DEF accel_result accel_coll_zero_gather(accel_coll_zero *z, const accel_tensor *t, int n) {
    accel_result r;
    if (!z) return accel__coll_zero_null();
    r = accel__coll_agree(z->c, accel__coll_zero_check_list(z, t, n, "accel_coll_zero_gather"), "accel_coll_zero_gather");
    if (r != ACCEL_OK) return r;
    return accel__coll_zero_gather_list(z, t);
}

/* The state list's kind s as n tensors (param-major lists of n*k). */
static accel_result accel__coll_zero_state_lists(accel_coll_zero *z, const accel_tensor *shard, const accel_tensor *full, int m,
                                                 const char *what, accel_tensor **sh, accel_tensor **fl, int *kk) {
    accel *acc = z->c->acc;
    int i, s, k;
    *sh = *fl = NULL;
    if (m < 0 || (m > 0 && (!shard || !full)) || (z->n == 0 ? m != 0 : m % z->n != 0))
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: %d state tensors for %d parameters (k per parameter, param-major)",
                           what, m, z->n);
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
        accel_result r = accel__coll_zero_check_list(z, *fl + s * z->n, z->n, what);
        if (r != ACCEL_OK) return r;
        for (i = 0; i < z->n; ++i) {
            const accel_tensor *a = &(*sh)[s * z->n + i], *b = &(*fl)[s * z->n + i];
            int64_t lo = z->off[i] > z->part.begin ? z->off[i] : z->part.begin;
            int64_t hi = z->off[i + 1] < z->part.end ? z->off[i + 1] : z->part.end;
            int64_t want = hi > lo ? hi - lo : 0;
            if (accel_tensor_numel(a) != want || a->dtype != b->dtype || (want > 0 && !a->ptr))
                return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: shard tensor %d ('%s') has %lld elements of %s, this rank's "
                                   "shard of '%s' is %lld elements of %s", what, i * k + s, a->name ? a->name : "",
                                   (long long)accel_tensor_numel(a), accel_dtype_name(a->dtype) ? accel_dtype_name(a->dtype) : "invalid",
                                   b->name ? b->name : "", (long long)want, accel_dtype_name(b->dtype));
        }
    }
    return ACCEL_OK;
}

/* Copies this rank's shard between the full tensors of one kind and the shard views (to_full or back). */
static accel_result accel__coll_zero_local(accel_coll_zero *z, const accel_tensor *sh, const accel_tensor *fl, int to_full) {
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

ACCEL__DEF accel_result accel_coll_zero_export(accel_coll_zero *z, const accel_tensor *shard, const accel_tensor *full, int m) {
    accel_tensor *sh, *fl;
    accel_result r;
    int k = 0, s;
    if (!z) return accel__coll_zero_null();
    r = accel__coll_zero_state_lists(z, shard, full, m, "accel_coll_zero_export", &sh, &fl, &k);
    r = accel__coll_agree(z->c, r, "accel_coll_zero_export");
    for (s = 0; r == ACCEL_OK && s < k; ++s) {
        r = accel__coll_agree(z->c, accel__coll_zero_local(z, sh + s * z->n, fl + s * z->n, 1), "accel_coll_zero_export");
        if (r == ACCEL_OK) r = accel__coll_zero_gather_list(z, fl + s * z->n);
    }
    accel_host_free(z->c->acc, sh);
    accel_host_free(z->c->acc, fl);
    return r;
}

ACCEL__DEF accel_result accel_coll_zero_import(accel_coll_zero *z, const accel_tensor *full, const accel_tensor *shard, int m) {
    accel_tensor *sh, *fl;
    accel_result r;
    int k = 0, s;
    if (!z) return accel__coll_zero_null();
    r = accel__coll_zero_state_lists(z, shard, full, m, "accel_coll_zero_import", &sh, &fl, &k);
    for (s = 0; r == ACCEL_OK && s < k; ++s) r = accel__coll_zero_local(z, sh + s * z->n, fl + s * z->n, 0);
    accel_host_free(z->c->acc, sh);
    accel_host_free(z->c->acc, fl);
    return r;
}

/* Sharded checkpoint bytes (layout in the declaration's comment). */
#define ACCEL__ZS_MAGIC 0x535a4341u /* "ACZS" */
static accel_result accel__coll_zs_need(const accel_coll_zero_state *zs, const char *what, int *k) {
    int i;
    if (!zs || !zs->zero) return accel__fail(NULL, ACCEL_ERR_INVALID_ARGUMENT, __FILE__, __LINE__, "%s: NULL state or zero", what);
    if (zs->m < 0 || (zs->m > 0 && !zs->shard) || (zs->zero->n == 0 ? zs->m != 0 : zs->m % zs->zero->n != 0))
        return ACCEL__FAIL(zs->zero->c->acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: %d state tensors for %d parameters (k per parameter, param-major)",
                           what, zs->m, zs->zero->n);
    *k = zs->zero->n ? zs->m / zs->zero->n : 0;
    for (i = 0; i < zs->m; ++i) {
        const accel_coll_zero *z = zs->zero;
        int p = i / *k;
        int64_t lo = z->off[p] > z->part.begin ? z->off[p] : z->part.begin;
        int64_t hi = z->off[p + 1] < z->part.end ? z->off[p + 1] : z->part.end;
        if (accel_tensor_numel(&zs->shard[i]) != (hi > lo ? hi - lo : 0) || accel_dtype_size(zs->shard[i].dtype) == 0)
            return ACCEL__FAIL(z->c->acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: state tensor %d has %lld elements, this rank's shard of "
                               "parameter %d is %lld", what, i, (long long)accel_tensor_numel(&zs->shard[i]), p,
                               (long long)(hi > lo ? hi - lo : 0));
    }
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_coll_zero_state_save(void *state, void *buf, size_t cap, size_t *size) {
    accel_coll_zero_state *zs = (accel_coll_zero_state *)state;
    accel_coll_zero *z;
    size_t need, at;
    unsigned char *b = (unsigned char *)buf;
    accel_result r;
    int k = 0, i;
    if (!size) return accel__fail(NULL, ACCEL_ERR_INVALID_ARGUMENT, __FILE__, __LINE__, "accel_coll_zero_state_save: size is NULL");
    if ((r = accel__coll_zs_need(zs, "accel_coll_zero_state_save", &k)) != ACCEL_OK) return r;
    z = zs->zero;
    need = 4 * 4 + 3 * 8 + 2 * 4 + (size_t)(z->n + 1) * 8;
    for (i = 0; i < zs->m; ++i) need += 12 + (size_t)accel_tensor_numel(&zs->shard[i]) * accel_dtype_size(zs->shard[i].dtype);
    *size = need;
    if (!buf || cap < need) return ACCEL_OK;
    accel__put_u32(b, ACCEL__ZS_MAGIC); accel__put_u32(b + 4, 1);
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
        if (bytes && (r = accel__coll_copy(z->c, b + at, zs->shard[i].ptr, bytes, z->c->device_mem ? 2 : 0)) != ACCEL_OK)
            return accel__fail_wrap(z->c->acc, r, "accel_coll_zero_state_save");
        at += bytes;
    }
    return ACCEL_OK;
}

/* Where state tensor i's bytes start in saved rank q's buffer (validated: every size checked). */
typedef struct accel__coll_zs_file { const unsigned char *b; int64_t begin, end; size_t *data; } accel__coll_zs_file;

ACCEL__DEF accel_result accel_coll_zero_state_load_all(void *state, const void *const *bufs, const size_t *sizes, int count) {
    accel_coll_zero_state *zs = (accel_coll_zero_state *)state;
    accel_coll_zero *z;
    accel *acc;
    accel__coll_zs_file *f = NULL;
    accel_result r;
    int k = 0, q, i;
    const char *what = "accel_coll_zero_state_load_all";
    if ((r = accel__coll_zs_need(zs, what, &k)) != ACCEL_OK) return r;
    z = zs->zero;
    acc = z->c->acc;
    if (count < 1 || !bufs || !sizes) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: %d saved ranks", what, count);
    f = (accel__coll_zs_file *)accel_host_alloc(acc, sizeof *f * (size_t)count);
    if (!f) return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "%s", what);
    for (q = 0; q < count; ++q) f[q].data = NULL;
    /* 1. validate every saved rank's bytes */
    for (q = 0; q < count && r == ACCEL_OK; ++q) {
        const unsigned char *b = (const unsigned char *)bufs[q];
        size_t n = sizes[q], at;
        int64_t S;
        f[q].b = b;
        if (!b || n < 48 || accel__get_u32(b) != ACCEL__ZS_MAGIC || accel__get_u32(b + 4) != 1) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%s: saved rank %d: not a ZeRO shard state (%zu bytes)", what, q, n);
            break;
        }
        if ((int)accel__get_u32(b + 8) != count || (int)accel__get_u32(b + 12) != q) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%s: file %d says it is rank %u of %u, the checkpoint has %d ranks", what, q,
                            accel__get_u32(b + 12), accel__get_u32(b + 8), count);
            break;
        }
        if ((int64_t)accel__get_u64(b + 16) != z->part.total || (int)accel__get_u32(b + 40) != z->n || (int)accel__get_u32(b + 44) != k) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: saved with %llu elements in %u parameters, %u states each; this "
                            "optimizer has %lld in %d, %d each", what, (unsigned long long)accel__get_u64(b + 16),
                            accel__get_u32(b + 40), accel__get_u32(b + 44), (long long)z->part.total, z->n, k);
            break;
        }
        S = (z->part.total + count - 1) / count;
        f[q].begin = (int64_t)accel__get_u64(b + 24);
        f[q].end = (int64_t)accel__get_u64(b + 32);
        if (f[q].begin != (int64_t)q * S || f[q].end != ((int64_t)(q + 1) * S < z->part.total ? (int64_t)(q + 1) * S : z->part.total)) {
            if (!(S * q >= z->part.total && f[q].begin == f[q].end)) {
                r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%s: rank %d's range [%lld, %lld) is not its partition of %lld elements over %d",
                                what, q, (long long)f[q].begin, (long long)f[q].end, (long long)z->part.total, count);
                break;
            }
        }
        at = 48;
        if (n < at + (size_t)(z->n + 1) * 8) { r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%s: rank %d's file is truncated", what, q); break; }
        for (i = 0; i <= z->n; ++i, at += 8)
            if ((int64_t)accel__get_u64(b + at) != z->off[i]) break;
        if (i <= z->n) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: rank %d's file: parameter %d starts at element %llu, here at %lld "
                            "(a different parameter list)", what, q, i, (unsigned long long)accel__get_u64(b + at), (long long)z->off[i]);
            break;
        }
        f[q].data = (size_t *)accel_host_alloc(acc, sizeof(size_t) * (size_t)(zs->m + 1));
        if (!f[q].data) { r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "%s", what); break; }
        for (i = 0; i < zs->m && r == ACCEL_OK; ++i) {
            int p = i / (k ? k : 1);
            int64_t lo = z->off[p] > f[q].begin ? z->off[p] : f[q].begin, hi = z->off[p + 1] < f[q].end ? z->off[p + 1] : f[q].end;
            uint64_t cnt;
            size_t es;
            if (n < at + 12) { r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%s: rank %d's file is truncated", what, q); break; }
            es = accel_dtype_size((accel_dtype)accel__get_u32(b + at));
            cnt = accel__get_u64(b + at + 4);
            if ((accel_dtype)accel__get_u32(b + at) != zs->shard[i].dtype || cnt != (uint64_t)(hi > lo ? hi - lo : 0))
                r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: rank %d's state tensor %d: %llu elements of dtype %u, expected %lld of %s",
                                what, q, i, (unsigned long long)cnt, accel__get_u32(b + at), (long long)(hi > lo ? hi - lo : 0),
                                accel_dtype_name(zs->shard[i].dtype));
            else if (n - at - 12 < cnt * es)
                r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%s: rank %d's file is truncated", what, q);
            f[q].data[i] = at + 12;
            at += 12 + (size_t)cnt * es;
        }
        if (r == ACCEL_OK && at != n) r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%s: rank %d's file has %zu trailing bytes", what, q, n - at);
    }
    /* 2. this rank's new shard of every state tensor, from the saved ranks that hold its pieces */
    for (i = 0; i < zs->m && r == ACCEL_OK; ++i) {
        int p = i / (k ? k : 1);
        int64_t lo = z->off[p] > z->part.begin ? z->off[p] : z->part.begin, hi = z->off[p + 1] < z->part.end ? z->off[p + 1] : z->part.end;
        size_t es = accel_dtype_size(zs->shard[i].dtype);
        for (q = 0; q < count && r == ACCEL_OK && hi > lo; ++q) {
            int64_t qlo = z->off[p] > f[q].begin ? z->off[p] : f[q].begin; /* saved rank q's piece of parameter p */
            int64_t a = lo > qlo ? lo : qlo, e = hi < f[q].end ? hi : f[q].end;
            if (e > z->off[p + 1]) e = z->off[p + 1];
            if (e <= a) continue;
            r = accel__coll_copy(z->c, (unsigned char *)zs->shard[i].ptr + (size_t)(a - lo) * es,
                                 f[q].b + f[q].data[i] + (size_t)(a - qlo) * es, (size_t)(e - a) * es, z->c->device_mem ? 1 : 0);
        }
    }
    for (q = 0; q < count; ++q) accel_host_free(acc, f[q].data);
    accel_host_free(acc, f);
    return r;
}

#endif /* ACCEL_IMPLEMENTATION */

/* accel_collectives.h is released under the MIT licence. Copyright (c) 2026 the accel authors. */
