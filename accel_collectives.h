/* accel_collectives.h — the communicator of accel: one API over NONE / MPI / NCCL with deadlines and debug checks,
   typed and asynchronous operations, Accelerate's gather/reduce/pad/split helpers, the host-group adapter, the
   process mesh and NCCL bootstrap. Builds on accel.h alone; accel_ddp.h (DDP's gradient reducer, join) and
   accel_zero.h (ZeRO) run on its communicators. One translation unit defines ACCEL_IMPLEMENTATION before including
   it (compile that TU with nvcc to get device buffers, CUDA-aware MPI and NCCL; with a C compiler only host buffers
   work).

   CONTENTS
     USAGE
     BACKENDS                     NONE, MPI, NCCL; what AUTO picks; NCCL bootstrap
     THE HOST PROCESS GROUP       an NCCL communicator serving the core's host collectives
     OPTIONS                      accel_coll_desc
     ALL-REDUCE ON MPI            the polled point-to-point algorithms and their summation order
     OTHER OPERATIONS ON MPI      reduce, all_gather, gather, broadcast on point-to-point messages
     PROCESS MESH                 Accelerate's ParallelismConfig groups as communicators
     COLLECTIVE CALLS AND ERRORS
     FLIGHT RECORDER              the last calls of every group, dumped per rank; `accel fr`
     THREADS AND STREAMS
     DIFFERENCES FROM ACCELERATE

   USAGE
       accel_coll *coll;
       accel_coll_desc cd = {0};   // zero = defaults: backend, timeout, debug from acc (C++: accel_coll_desc cd = {};)
       if (accel_coll_create(&acc, &cd, &coll) != ACCEL_OK) fail(accel_last_error(&acc));
       accel_coll_all_reduce(coll, loss, loss, 1, ACCEL_F32, ACCEL_COLL_AVG);   // in place: send == recv; sum, / P
       accel_coll_all_gather(coll, preds, all_preds, n, ACCEL_I64);             // equal sizes; gather_rows for ragged
       accel_coll_request *req;
       accel_coll_all_reduce_async(coll, buf, buf, n, ACCEL_F32, ACCEL_COLL_SUM, &req);   // ... other work ...
       accel_coll_wait(req);                                                    // or accel_coll_test until done
       accel_coll_destroy(coll);
     A data-parallel trainer's gradients go through accel_ddp.h's reducer on this communicator.

   BACKENDS (accel_coll_desc.backend; ACCEL_COLL_BACKEND_AUTO = 0: NCCL when the group has > 1 process, the buffers
   are device memory and the TU was built by nvcc with ACCEL_WITH_NCCL; else NONE for one process; else MPI — an
   error without MPI)
     NONE  one process: every op gives the correct local result (copies; AVG divides by 1).
     MPI   host buffers. Device buffers (acc.device >= 0, nvcc TU) go straight to MPI when it is CUDA-aware
           (MPIX_Query_cuda_support / MPIX_GPU_query_support, or ACCEL_CUDA_AWARE_MPI=0|1), otherwise through pinned
           host staging (acc's pinned allocator). F16/BF16 reductions use user-defined MPI ops that compute in float
           and round to nearest even (accel.h's codec: a NaN result is 0x7FFF); on x86-64 8 lanes at a time when the
           CPU has AVX2 (+ F16C for F16), the same bits (ACCEL_COLL_NO_DISPATCH, a macro in the ACCEL_IMPLEMENTATION
           TU: only a build whose -march has them uses the lanes).
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
     becomes it: the core's host collectives (accel_wait_for_everyone, accel_host_*, the agreement checks amp, ckpt,
     data and trackers make) then run through this context with their deadline, and accel_host_group_name(&acc) says
     "nccl". accel_coll_destroy removes it (host collectives then fail with ACCEL_ERR_UNSUPPORTED again): keep the
     context until the end of training. A group the core already has (MPI, the TCP store) is never replaced.

   OPTIONS (accel_coll_desc, zero = default)
     backend         ACCEL_COLL_BACKEND_AUTO (see BACKENDS), or NONE / MPI / NCCL.
     mpi_comm        const MPI_Comm * to use (dup'ed; e.g. from MPI_Comm_split); NULL = acc's group.
     host_buffers    nonzero: buffers are host memory even when acc.device >= 0 (then MPI, never NCCL).
     timeout_ms      the deadline of every collective (0 → acc.desc.collective_timeout_ms, Accelerate's 1800 s): a
                     peer that never arrives gives ACCEL_ERR_TIMEOUT, and the communicator then fails every later call
                     at once — destroy it and stop, as torch's watchdog does.
     no_watchdog     nonzero: blocking MPI ops are plain blocking MPI calls (no deadline, the MPI library's own
                     algorithms; see ALL-REDUCE ON MPI); async ops always have the deadline.
     debug           accel_toggle; ACCEL_DEFAULT → acc.debug (ACCELERATE_DEBUG_MODE). On: every rank's (op, dtype,
                     count, root) are all-gathered before each collective; a difference is ACCEL_ERR_MISMATCH on all.
                     Off, every data operation of host (or staged) memory on 2-64 ranks with the deadline — all-reduce,
                     reduce-scatter, reduce, all_gather, gather, broadcast — is still checked: they run on accel's
                     point-to-point algorithms (ALL-REDUCE ON MPI, OTHER OPERATIONS ON MPI) whose messages' tags carry
                     (op, dtype, count; reduce, gather, broadcast: the root too), and a difference is ACCEL_ERR_MISMATCH
                     on every rank within about a millisecond, naming the rank and what differs (the context is then
                     unusable). Not checked off debug mode: all_gather_v (its byte counts differ by design), a
                     no_watchdog context's blocking calls (MPI's own), more than 64 ranks, NCCL; there another count
                     can give a wrong result or Open MPI's MPI_ERR_TRUNCATE, raised on MPI_COMM_WORLD (by default
                     fatal to the job), and the flight recorder names the difference at the deadline.
     cuda_aware_mpi  accel_toggle; ACCEL_DEFAULT → ACCEL_CUDA_AWARE_MPI, else the MPI library's answer (BACKENDS).

   ALL-REDUCE ON MPI (with the deadline, no_watchdog 0)
     Blocking MPI ops run as MPI_I* + polling. An all-reduce of host memory (or staged device memory) runs on
     point-to-point messages + MPI_Reduce_local instead of MPI_Iallreduce: on 2 ranks a ring from 64 KiB and one
     exchange below (sums bitwise MPI's); on 3-64 ranks a direct reduce-scatter + all-gather (one round up to the
     eager limit) in which every element is the rank-order sum (x0 + x1) + x2 + ... — the same bits whatever the
     buffer's length or the element's position, so a tensor summed in a bucket equals the tensor summed alone (MPI's
     own 3+-rank algorithms give no such order). The ranks always hold the same bits. Out of place, the send buffer
     is read where it is (no copy into recv first). From 8 MiB the 2-rank ring reduces in 256 KiB segments as they
     arrive. Scratch: about the buffer's size on 3+ ranks, half of it on 2 (512 KiB from 8 MiB); one buffer is kept
     for the next call. More than 64 ranks: MPI_Iallreduce. Why these algorithms, and their speed against
     MPI_Allreduce: the implementation's section 6 and bench/collectives (bench_coll).
     A reduce-scatter (2-64 ranks, same conditions) is the first phase of that direct algorithm: each block is
     folded in rank order on its owner, so it equals the matching block of the all-reduce bit for bit (ZeRO-3's
     reduce-scatter of a unit therefore equals DDP's all-reduce of it). Scratch: P-1 blocks.

   OTHER OPERATIONS ON MPI (host or staged memory, 2-64 ranks, with the deadline; else MPI_I* + polling)
     reduce      the point-to-point all-reduce above, its result kept on the root (scratch elsewhere); on 3+
                 ranks above the eager limit the second phase sends the folded chunks to the root alone. The root's
                 bits are the all-reduce's (the rank-order sum on 3+ ranks), on every root.
     all_gather  one round: every rank sends its block to every other rank, straight into its place in recv.
     gather      every block straight to the root's recv, and an empty message between every other pair of ranks;
     broadcast   the root's buffer to every other rank (no tree), an empty message between every other pair —
                 while the root sends at most 16 MiB in all ((P-1) x bytes, ACCEL__COLL_BCAST_FANOUT_MAX); a larger
                 broadcast is MPI_Ibcast (its trees), checked first by debug mode's signature all-gather (48 bytes a
                 rank; a difference: ACCEL_ERR_MISMATCH "broadcast: ranks called different collectives: ..." on every
                 rank, before any data moves; the context stays usable).
     The empty messages make every rank receive one message of the call from every peer, so that a difference
     anywhere is found everywhere; they overlap the data. Speed against MPI_Reduce / MPI_Allgather / MPI_Gather /
     MPI_Bcast: bench/collectives/bench_coll --ops (the implementation's section 6).

   PROCESS MESH (Accelerate's ParallelismConfig + the DeviceMesh it builds)
       accel_coll_mesh *mesh;
       accel_coll_mesh_desc md = {0};
       md.dp_shard_size = 2; md.tp_size = 2;            // 4 processes; 0 = PARALLELISM_CONFIG_*_SIZE or 1
       accel_coll_mesh_create(world, &md, &mesh);        // collective over world's group
       accel_coll *dp = accel_coll_mesh_comm(mesh, ACCEL_COLL_MESH_DP);
       accel_coll *tp = accel_coll_mesh_comm(mesh, ACCEL_COLL_MESH_TP);
       accel_ddp_create(dp, NULL, &red);                 // accel_ddp.h: gradients averaged over the dp group
       accel_coll_all_reduce(tp, part, part, n, ACCEL_F32, ACCEL_COLL_SUM); // a row-parallel layer's partial sums
       accel_coll_mesh_destroy(mesh);                    // before world
     Dimensions in mesh order pp, dp_replicate, dp_shard, cp, tp (Accelerate's order with pipeline stages outermost, as
     torchtitan): rank = (((pp*R + dp_replicate)*S + dp_shard)*C + cp)*T + tp, so tp peers are consecutive ranks.
     Groups: one per dimension and Accelerate's flattened dp (dp_replicate x dp_shard), dp_shard_cp and dp_cp; a group
     holds the ranks whose other coordinates equal this rank's, and this rank's rank in it is its coordinate along the
     group (row-major over the group's dimensions, torch's _flatten). Every group is a full accel_coll (every op, async,
     accel_ddp.h's reducer and join) with the parent's backend, buffers, timeout, debug and CUDA-aware settings; a group
     of one process is a NONE context. MPI: MPI_Comm_split of the parent's communicator; NCCL: ncclCommSplit of the
     parent's (NCCL >= 2.18; before, a fresh ncclCommInitRankConfig whose unique id travels in an all-gather over the
     parent). Creation is collective over the parent: the sizes are checked on every rank (negative, an environment
     value < 1 or not a number, a product != the parent's size) and then compared across ranks (accel.h's agreement: a
     rank with another mesh fails every rank with ACCEL_ERR_MISMATCH naming the dimension and each rank's value; a rank
     with a bad desc fails every rank, the others with ACCEL_ERR_REMOTE). Only then are the communicators split
     (MPI_Comm_split itself blocks without a deadline: every rank reached it after agreeing). Every size 0 on a group of
     P > 1: dp_replicate = P (Accelerate's plain DDP). Shard the data by the dp group (accel_data.h, PROCESS MESH).
     Differences from Accelerate: no tp_handler/cp_handler (accel does no model math); Accelerate's refusal of tp/cp > 1
     with dp_replicate > 1 and dp_shard == 1 (an FSDP2 composition limit) is not made — the mesh is only communicators;
     pp is an extra dimension (ACCEL_PP_SIZE).

   COLLECTIVE CALLS AND ERRORS
     Every rank of the group makes the same calls in the same order: accel_coll_create, every data operation, the
     Accelerate helpers (not split_between_processes), accel_coll_mesh_create and accel_coll_mesh_destroy over the
     parent (and accel_ddp.h's / accel_zero.h's collective calls on the communicator). A local failure (a bad
     argument, an allocation) fails every rank at once: that rank returns its error, the others ACCEL_ERR_REMOTE
     naming it. That holds for create, pad_across_processes, gather_rows and gather_for_metrics; argument errors of
     the typed ops (reduce_tensor included) are local — checking them on every rank would cost a round trip per call
     — so the other ranks then reach the deadline.

   FLIGHT RECORDER
     Every process keeps its last ACCEL_FLIGHT_RECORDER_SIZE (2000; 0 = off) collective calls in a ring written where
     the calls are issued: the host group (group 0 of the dump: the core's host collectives and agreement checks) and
     every operation of every context (groups 1.., in creation order, which is the same on every rank), so
     accel_ddp.h's buckets and accel_zero.h's operations too. An entry: the call's number in its group, what, op,
     dtype, count, bytes, root, call site (__FILE__:__LINE__ of the outermost wrapped call: the accel_coll_* data
     operations and the core's host collectives are macros around the functions; ACCEL_NO_CALL_SITES drops them),
     posted and completed times (a coarse monotonic clock, ms resolution) and state (posted, completed, failed). NCCL
     operations count as completed once enqueued. Cost: about 20 ns a call (bench/collectives/bench_fr.c).
     Dump: <ACCEL_FLIGHT_DIR, default <project_dir>/flight>/rank<R>.json (temp + rename), written by each rank when a
     deadline passes, on ACCEL_ERR_MISMATCH or an MPI/NCCL failure, when accel_shutdown aborts the job, on SIGUSR1
     (from a context's creation until its Accelerator's accel_shutdown, when SIGUSR1 has the default disposition,
     accel's handler already — accel_preemption_install's: one handler then stops and dumps, accel.h PREEMPTION — or
     the MPI library's from the MPI_Init accel_init called (MPICH's, which accel's handler then chains to); a
     program's own SIGUSR1 handler is left alone; the writer uses async-signal-safe calls only, so a rank stuck in
     its own work dumps too) and on accel_coll_fr_dump. Format:
       {"format":"accel-flight-recorder","version":1,"rank":R,"world_size":P,"pid":..,"reason":"..","now_us":..,
        "capacity":N,"recorded":M,"groups":[{"id":G,"name":"coll1:mpi","rank":r,"size":n},..],
        "calls":[{"seq":k,"group":G,"what":"all_reduce","op":"sum","dtype":"F32","count":..,"bytes":..,"root":..,
                  "file":"train.c","line":88,"posted_us":..,"completed_us":..,"state":"completed"},..]}
     `accel fr DIR` (tools/) reads every rank's dump and names the first divergence of each group: the rank that
     never made call #k, the rank that made a different call, or the rank still inside #k, with the call sites.

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
ACCEL_API accel_result (accel_coll_all_reduce)(accel_coll *c, const void *send, void *recv, size_t count,
                                               accel_dtype dt,
                                             accel_coll_op op);
ACCEL_API accel_result (accel_coll_reduce)(accel_coll *c, const void *send, void *recv, size_t count, accel_dtype dt,
                                         accel_coll_op op, int root);
ACCEL_API accel_result (accel_coll_broadcast)(accel_coll *c, void *buf, size_t count, accel_dtype dt, int root);
/* recv holds size*count elements, rank order (Accelerate's gather: concatenation on dim 0). */
ACCEL_API accel_result (accel_coll_all_gather)(accel_coll *c, const void *send, void *recv, size_t count,
                                               accel_dtype dt);
/* send holds size*recv_count elements; rank r receives the reduction of block r. send and recv must not overlap. */
ACCEL_API accel_result (accel_coll_reduce_scatter)(accel_coll *c, const void *send, void *recv, size_t recv_count,
                                                 accel_dtype dt, accel_coll_op op);
ACCEL_API accel_result (accel_coll_gather)(accel_coll *c, const void *send, void *recv, size_t count, accel_dtype dt,
                                         int root);
ACCEL_API accel_result (accel_coll_barrier)(accel_coll *c);
/* NCCL: wait (with the deadline) for everything enqueued on acc.stream; MPI/NONE: nothing to do. */
ACCEL_API accel_result accel_coll_synchronize(accel_coll *c);

/* ---------------------------------------------------------------------------------------------- async ops */
/* Same arguments; *req receives a handle that accel_coll_wait or accel_coll_test finishes and frees. Buffers must
   stay untouched until then. */
ACCEL_API accel_result (accel_coll_all_reduce_async)(accel_coll *c, const void *send, void *recv, size_t count,
                                                   accel_dtype dt, accel_coll_op op, accel_coll_request **req);
ACCEL_API accel_result (accel_coll_reduce_async)(accel_coll *c, const void *send, void *recv, size_t count,
                                               accel_dtype dt, accel_coll_op op, int root, accel_coll_request **req);
ACCEL_API accel_result (accel_coll_broadcast_async)(accel_coll *c, void *buf, size_t count, accel_dtype dt, int root,
                                                  accel_coll_request **req);
ACCEL_API accel_result (accel_coll_all_gather_async)(accel_coll *c, const void *send, void *recv, size_t count,
                                                   accel_dtype dt, accel_coll_request **req);
ACCEL_API accel_result (accel_coll_reduce_scatter_async)(accel_coll *c, const void *send, void *recv, size_t recv_count,
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
   accel_broadcast_object_list (accel_hostgroup.h) serve every launcher, including torchrun's TCP store. */

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

/* ---------------------------------------------------------------------------------------------- process mesh */
/* Accelerate's ParallelismConfig / torch's DeviceMesh over a context's group (see PROCESS MESH in the manual). The
   dimensions in mesh order (row-major, tp fastest: consecutive ranks share everything but tp), then the flattened
   groups Accelerate's build_device_mesh adds. Each is a full accel_coll (every op, the reducer). */
typedef enum accel_coll_mesh_dim {
    ACCEL_COLL_MESH_PP = 0, /* pipeline stages (an extra outermost dimension; not in Accelerate) */
    ACCEL_COLL_MESH_DP_REPLICATE, /* "dp_replicate" */
    ACCEL_COLL_MESH_DP_SHARD, /* "dp_shard" */
    ACCEL_COLL_MESH_CP, /* "cp" */
    ACCEL_COLL_MESH_TP, /* "tp" (innermost) */
    ACCEL_COLL_MESH_DP, /* "dp" = dp_replicate x dp_shard: the data-parallel group (shard the data by it) */
    ACCEL_COLL_MESH_DP_SHARD_CP, /* "dp_shard_cp" = dp_shard x cp: where FSDP shards the model */
    ACCEL_COLL_MESH_DP_CP, /* "dp_cp" = dp_replicate x dp_shard x cp: where the loss is averaged */
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
ACCEL_API accel_result accel_coll_mesh_create(accel_coll *parent, const accel_coll_mesh_desc *desc,
                                              accel_coll_mesh **out);
ACCEL_API void accel_coll_mesh_destroy(accel_coll_mesh *m); /* destroys the sub-communicators; NULL ok */
/* The communicator of d (owned by the mesh); its rank is this process's coordinate along d. NULL for a bad d. */
ACCEL_API accel_coll *accel_coll_mesh_comm(const accel_coll_mesh *m, accel_coll_mesh_dim d);
ACCEL_API int accel_coll_mesh_size(const accel_coll_mesh *m, accel_coll_mesh_dim d);  /* 0 for a bad d */
ACCEL_API int accel_coll_mesh_coord(const accel_coll_mesh *m, accel_coll_mesh_dim d); /* -1 for a bad d */
/* rank of the parent group → coords[5] (pp, dp_replicate, dp_shard, cp, tp); and back (-1 when out of range). */
ACCEL_API accel_result accel_coll_mesh_coords(const accel_coll_mesh *m, int rank, int coords[ACCEL_COLL_MESH_NDIMS]);
ACCEL_API int accel_coll_mesh_rank_of(const accel_coll_mesh *m, const int coords[ACCEL_COLL_MESH_NDIMS]);

/* ----------------------------------------------------------------------------- bootstrap byte exchanges */
/* Rank 0's `bytes` bytes reach every rank of `size`, and no one else: both admit by the job's secret and run id, as the
   core's store does (accel_hostgroup.h: SECURITY; ACCEL_STORE_SECRET, TORCHELASTIC_RUN_ID / ACCEL_RUN_ID). TCP: rank 0
   listens on addr:port (that interface only; a non-loopback addr needs the secret or ACCEL_STORE_TRUSTED_NETWORK=1) and
   serves size-1 peers at once; a peer without the secret is refused ("not admitted: wrong secret") and never sees the
   bytes. File: rank 0 writes path atomically (temp + rename), readable by its user only, with its proof over the bytes;
   the others poll for it and ignore a file that is not this job's (garbage, another run's, or written without the
   secret) until rank 0's arrives. Both end with ACCEL_ERR_TIMEOUT after timeout_ms. acc may be NULL (the process-wide
   error is set). */
ACCEL_API accel_result accel_coll_tcp_broadcast(accel *acc, const char *addr, int port, int rank, int size, void *data,
                                                size_t bytes, int timeout_ms);
ACCEL_API accel_result accel_coll_file_broadcast(accel *acc, const char *path, int rank, void *data, size_t bytes,
                                                 int timeout_ms);

/* ----------------------------------------------------------------------------------------------- flight recorder */
/* Writes this rank's flight recorder dump now (FLIGHT RECORDER); reason goes into the file. */
ACCEL_API accel_result accel_coll_fr_dump(accel *acc, const char *reason);

#ifdef __cplusplus
}
#endif
#ifndef ACCEL_NO_CALL_SITES /* the call site of each data operation for the flight recorder (accel_hostgroup.h) */
#define accel_coll_all_reduce(...) ACCEL_FR_SITE((accel_coll_all_reduce)(__VA_ARGS__))
#define accel_coll_reduce(...) ACCEL_FR_SITE((accel_coll_reduce)(__VA_ARGS__))
#define accel_coll_broadcast(...) ACCEL_FR_SITE((accel_coll_broadcast)(__VA_ARGS__))
#define accel_coll_all_gather(...) ACCEL_FR_SITE((accel_coll_all_gather)(__VA_ARGS__))
#define accel_coll_reduce_scatter(...) ACCEL_FR_SITE((accel_coll_reduce_scatter)(__VA_ARGS__))
#define accel_coll_gather(...) ACCEL_FR_SITE((accel_coll_gather)(__VA_ARGS__))
#define accel_coll_barrier(...) ACCEL_FR_SITE((accel_coll_barrier)(__VA_ARGS__))
#define accel_coll_all_reduce_async(...) ACCEL_FR_SITE((accel_coll_all_reduce_async)(__VA_ARGS__))
#define accel_coll_reduce_async(...) ACCEL_FR_SITE((accel_coll_reduce_async)(__VA_ARGS__))
#define accel_coll_broadcast_async(...) ACCEL_FR_SITE((accel_coll_broadcast_async)(__VA_ARGS__))
#define accel_coll_all_gather_async(...) ACCEL_FR_SITE((accel_coll_all_gather_async)(__VA_ARGS__))
#define accel_coll_reduce_scatter_async(...) ACCEL_FR_SITE((accel_coll_reduce_scatter_async)(__VA_ARGS__))
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
    13. the process mesh (sub-communicators)
    14. bootstrap byte exchanges: TCP (the core's sockets), file (the core's atomic write)
    15. NCCL init (the unique id over the host group / MPI / TCP / file)
   LENT to accel_ddp.h and accel_zero.h, whose implementations follow in the same TU: struct accel_coll's fields (acc,
   size, rank, device_mem), accel__coll_null, _check_broken, _reducible, _agree, _host_op, _alloc_mem, _fill, _copy,
   _copy_same, _prescale, _prescale_by, _orphan. */

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
#include <signal.h>

/* ACCEL_WITH_CUDA, cuda_runtime_api.h and mpi.h (its C API) come from accel.h's implementation preamble. */
#ifdef __CUDACC__
#define ACCEL__COLL_DEVICE 1
#endif
#if defined(ACCEL_WITH_NCCL) && defined(__CUDACC__)
#include <nccl.h>
#define ACCEL__COLL_NCCL 1
#endif
#if defined(ACCEL_WITH_MPI) && defined(ACCEL__COLL_DEVICE) && defined(OPEN_MPI) && OPEN_MPI
#include <mpi-ext.h>
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
/* The F16/BF16 reductions of the MPI user ops (also the point-to-point all-reduce's MPI_Reduce_local) over n
   elements: inout[i] = accel__coll_combine16(in[i], inout[i], op, bf16). On x86-64 GCC/clang 8 lanes at a time when
   the CPU has AVX2 (bf16: the widening is a shift, the rounding integer lanes) or AVX2 + F16C (fp16), chosen at run
   time by the core's accel__cpu_has (ACCEL_COLL_NO_DISPATCH: only a build whose -march has them uses the lanes); the
   scalar elements on other CPUs and for the tail. Lane for lane the scalar bits: widening is exact, addps / mulps
   round to nearest even as the scalar float operation, maxps(x, y) / minps(x, y) are x > y ? x : y / x < y ? x : y
   (the scalar's choice for NaN and signed zeros), and the core's 8-lane codec rounds back (NaN → 0x7FFF).
   tests/unit/collectives/test_coll_vec.c checks every pair of 16-bit inputs of the sum against a long-hand float64
   reference. At 124 M elements the scalar loop made the 16-bit all-reduce slower than MPI's fp32 one of twice the
   bytes (bench/ddp). */
#if defined(ACCEL__X86) && defined(__x86_64__) && (defined(__AVX2__) || !defined(ACCEL_COLL_NO_DISPATCH))
#define ACCEL__COLL_AVX2 1
ACCEL__TARGET_AVX2 static ACCEL_INLINE __m256 accel__coll_v8_combine(__m256 x, __m256 y, int op) {
    switch (op) {
    case ACCEL_COLL_MAX: return _mm256_max_ps(x, y);
    case ACCEL_COLL_MIN: return _mm256_min_ps(x, y);
    case ACCEL_COLL_PROD: return _mm256_mul_ps(x, y);
    default: return _mm256_add_ps(x, y);
    }
}
/* the lanes of one type: returns the elements done (a multiple of 8) */
#define ACCEL__COLL_REDUCE16_LANES(NAME, TARGET, WIDEN, ROUND)                                                         \
    TARGET static size_t NAME(const uint16_t *in, uint16_t *inout, size_t n, int op) {                                \
        size_t i = 0;                                                                                                  \
        for (; i + 8 <= n; i += 8) {                                                                                   \
            __m256 x = WIDEN(_mm_loadu_si128((const __m128i *)(const void *)(in + i)));                                \
            __m256 y = WIDEN(_mm_loadu_si128((const __m128i *)(const void *)(inout + i)));                             \
            _mm_storeu_si128((__m128i *)(void *)(inout + i), ROUND(accel__coll_v8_combine(x, y, op)));                 \
        }                                                                                                              \
        return i;                                                                                                      \
    }
ACCEL__COLL_REDUCE16_LANES(accel__coll_reduce_bf16_avx2, ACCEL__TARGET_AVX2, accel__v8_bf16_to_f32,
                           accel__v8_f32_to_bf16)
#if defined(__F16C__) || !defined(ACCEL_COLL_NO_DISPATCH)
#define ACCEL__COLL_F16_LANES 1
ACCEL__COLL_REDUCE16_LANES(accel__coll_reduce_f16_avx2, ACCEL__TARGET_F16C, accel__v8_f16_to_f32, accel__v8_f32_to_f16)
#endif
#endif
ACCEL__PRIVATE void accel__coll_reduce16(const uint16_t *in, uint16_t *inout, size_t n, int op, int bf16) {
    size_t i = 0;
#ifdef ACCEL__COLL_AVX2
    if (bf16 && accel__cpu_has(ACCEL__CPU_AVX2)) i = accel__coll_reduce_bf16_avx2(in, inout, n, op);
#endif
#ifdef ACCEL__COLL_F16_LANES
    if (!bf16 && accel__cpu_has(ACCEL__CPU_AVX2 | ACCEL__CPU_F16C)) i = accel__coll_reduce_f16_avx2(in, inout, n, op);
#endif
    for (; i < n; ++i) inout[i] = accel__coll_combine16(in[i], inout[i], op, bf16);
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
    case ACCEL_F16:
        ((uint16_t *)dst)[i] = accel_f32_to_f16(accel_f16_to_f32(((const uint16_t *)src)[i]) * (float)(1.0 / n));
        break;
    case ACCEL_BF16:
        ((uint16_t *)dst)[i] = accel_f32_to_bf16(accel_bf16_to_f32(((const uint16_t *)src)[i]) * (float)(1.0 / n));
        break;
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
    case ACCEL_BF16:
        ((uint16_t *)buf)[i] = accel_f32_to_bf16(accel_bf16_to_f32(((uint16_t *)buf)[i]) / (float)n);
        break;
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
    double timeout_s;     /* desc.timeout_ms; 0: the Accelerator's deadline at each call (accel__timeout_s) */
    accel_result broken;  /* nonzero after a timeout/fatal error: every later call fails fast */
    int fr_group;         /* this context's group number in the flight recorder's dump */
    uint64_t fr_seq;      /* calls posted (the recorder's call numbers) */
    accel_coll_request *orphans;
    accel_coll_request *req_cache; /* one released request kept for the next call (no allocation per call) */
#ifdef ACCEL_WITH_MPI
    MPI_Comm comm;
    int comm_valid;
    MPI_Op op16[2][4];    /* [bf16][sum,prod,max,min] user ops */
    int ops_valid;
    unsigned ring_seq;    /* ring all-reduces posted (their message tag): the same on every rank */
    int tag_sig_bits;     /* bits of the call's signature above the sequence in a tag (0: not yet queried) */
    void *ring_cache;     /* one idle ring scratch buffer kept for the next operation */
    size_t ring_cache_bytes;
#endif
    size_t eager_bytes;   /* the MPI library's shared-memory eager limit (accel__coll_exchange) */
#ifdef ACCEL__COLL_NCCL
    ncclComm_t nccl;
    int nccl_valid;
    cudaStream_t comm_stream;
    void *scratch;        /* 8 device bytes for the barrier */
    cudaEvent_t ev_cache; /* one released request's event kept for the next one that needs an event */
    int has_ev_cache;
#endif
};

/* A checked broadcast on point-to-point messages has the root send the whole buffer to every other rank: fine while
   those P-1 copies are small, against MPI's trees and pipelines beyond. Above this many bytes sent by the root
   the broadcast is MPI's, checked first by the signature all-gather of debug mode (48 bytes a rank: under 1 % of a
   broadcast that large). */
#define ACCEL__COLL_BCAST_FANOUT_MAX ((size_t)16 << 20)
static int accel__coll_bcast_direct(const accel_coll *c, size_t count, accel_dtype dt) {
    return count * accel_dtype_size(dt) <= ACCEL__COLL_BCAST_FANOUT_MAX / (size_t)(c->size > 1 ? c->size - 1 : 1);
}

struct accel_coll_request {
    accel_coll *c;
    int kind;
    accel_dtype dt;
    accel_coll_op op;
    size_t count;
    int root;
    double start, deadline;
    uint64_t fr_id;         /* the flight recorder's record of this call */
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
                             5 two-rank ring in segments (large), 6 all-gather; ring_step: 0 .. 2(P-1) */
    int ring_direct;      /* not in place: step 0 reads ring_src and receives straight into ring_buf (no copy) */
    MPI_Request rreq[2];  /* this step's send and receive */
    MPI_Request *rq;      /* the requests in flight: rreq (ring, exchange) or 2(P-1) in ring_tmp (direct) */
    int nrq;
    unsigned char *ring_buf, *ring_tmp;
    const unsigned char *ring_src;
    int fold_k;           /* direct: the next rank whose contribution is folded in (rank order) */
    unsigned char *fold_acc; /* direct: where the running fold is (ring_buf's own chunk once it got there) */
    unsigned char *dslots;   /* direct: P-1 receive slots of dslot_bytes, after the requests in ring_tmp */
    unsigned char *rs_own;   /* direct reduce-scatter: this rank's block (the user's recv); NULL for an all-reduce */
    size_t dslot_bytes;
    size_t ring_tmp_bytes;
    MPI_Datatype ring_t;
    MPI_Op ring_op;
    int ring_tag;
    double probe_at;      /* next look for a peer's message of another signature (accel__coll_p2p_mismatch) */
    void *red_tmp;        /* a reduce's result off the root (the reduce runs as a point-to-point all-reduce) */
#endif
#ifdef ACCEL__COLL_NCCL
    cudaEvent_t ev;
    int has_ev;
    int on_comm_stream;
#endif
    accel_coll_request *next;
};

/* this context's deadline for an operation starting now (desc.timeout_ms, else the Accelerator's collective timeout) */
ACCEL__PRIVATE double accel__coll_timeout_s(const accel_coll *c) {
    return c->timeout_s > 0 ? c->timeout_s : accel__timeout_s(c->acc);
}
ACCEL__PRIVATE double accel__coll_deadline(const accel_coll *c) { return accel_now() + accel__coll_timeout_s(c); }
static void accel__coll_fr_register(accel_coll *c, const char *kind); /* 16. flight recorder */
#if defined(ACCEL_WITH_MPI) || defined(ACCEL__COLL_NCCL)
static void accel__coll_fr_tick(const accel_coll_request *q);
#endif

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
ACCEL__DEF accel_coll_backend accel_coll_get_backend(const accel_coll *c) {
    return c ? c->backend : ACCEL_COLL_BACKEND_AUTO;
}
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
static int accel__mpi_testall(int n, MPI_Request *reqs, int *done) {
    return MPI_Testall(n, reqs, done, MPI_STATUSES_IGNORE);
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#define ACCEL__COLL_USER_OP(NAME, OP, BF)                                                                              \
    static void NAME(void *in, void *inout, int *len, MPI_Datatype *dtp) {                                             \
        (void)dtp;                                                                                                     \
        if (*len > 0) accel__coll_reduce16((const uint16_t *)in, (uint16_t *)inout, (size_t)*len, OP, BF);             \
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
            return accel__fail(c->acc, ACCEL_ERR_TIMEOUT, __FILE__, line,
                               "%s did not complete within %.1f s; NCCL communicator aborted", what,
                               accel__coll_timeout_s(c));
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
static accel_result accel__coll_agree_mpi(accel *acc, MPI_Comm comm, accel_result local, const char *what,
                                          double deadline) {
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
    if (!acc || !out)
        return accel__fail(acc, ACCEL_ERR_INVALID_ARGUMENT, __FILE__, __LINE__, "accel_coll_create: NULL argument");
    *out = NULL;
    if (desc) d = *desc;
    else memset(&d, 0, sizeof d);
    timeout_s = 1e-3 * (double)(d.timeout_ms > 0 ? d.timeout_ms : 0); /* 0: the Accelerator's, call by call */
    /* local checks first; then one agreement before anything collective (MPI_Comm_dup, the NCCL bootstrap), so a rank
       whose arguments were bad fails every rank instead of leaving the others blocked in MPI_Comm_dup */
    if ((int)d.backend < 0 || (int)d.backend > (int)ACCEL_COLL_BACKEND_NCCL)
        r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_coll_desc.backend=%d is not an accel_coll_backend",
                        (int)d.backend);
    else if (d.timeout_ms < 0)
        r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_coll_desc.timeout_ms=%d must be >= 0", d.timeout_ms);
    else if ((int)d.debug < (int)ACCEL_OFF || (int)d.debug > (int)ACCEL_ON || (int)d.cuda_aware_mpi < (int)ACCEL_OFF ||
             (int)d.cuda_aware_mpi > (int)ACCEL_ON)
        r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_coll_desc: debug=%d / cuda_aware_mpi=%d is not an "
                        "accel_toggle (ACCEL_DEFAULT, ACCEL_ON, ACCEL_OFF)", (int)d.debug, (int)d.cuda_aware_mpi);
#ifndef ACCEL_WITH_MPI
    else if (d.mpi_comm)
        r = ACCEL__FAIL(acc, ACCEL_ERR_UNSUPPORTED,
                        "accel_coll_desc.mpi_comm given but the implementation was built without ACCEL_WITH_MPI");
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
            else
                r = ACCEL__FAIL(
                    acc, ACCEL_ERR_UNSUPPORTED,
                    "collectives across %d processes need MPI (mpirun/srun and ACCEL_WITH_MPI) or NCCL (an nvcc-built "
                    "implementation TU with ACCEL_WITH_NCCL and a GPU)",
                    c->size);
        } else if (c->backend == ACCEL_COLL_BACKEND_NONE && c->size > 1) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "backend none cannot serve a group of %d processes",
                            c->size);
        } else if (c->backend == ACCEL_COLL_BACKEND_MPI && !mcomm) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_UNSUPPORTED,
                            "backend mpi requested but MPI is not the process group (build with ACCEL_WITH_MPI and "
                            "launch with mpirun/srun)");
        } else if (c->backend == ACCEL_COLL_BACKEND_NCCL) {
#ifndef ACCEL__COLL_NCCL
            r = ACCEL__FAIL(acc, ACCEL_ERR_UNSUPPORTED,
                            "backend nccl needs the ACCEL_IMPLEMENTATION TU compiled with nvcc and ACCEL_WITH_NCCL");
#else
            if (!c->device_mem)
                r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                                "backend nccl needs a CUDA device (acc.device >= 0) and device buffers");
#endif
        }
#ifndef ACCEL__COLL_DEVICE
        if (r == ACCEL_OK && c->device_mem)
            r = ACCEL__FAIL(acc, ACCEL_ERR_UNSUPPORTED,
                            "device buffers need the ACCEL_IMPLEMENTATION TU compiled with nvcc "
                            "(or set accel_coll_desc.host_buffers)");
#endif
    }
    if (!d.mpi_comm) r = accel__agree(acc, r, "accel_coll_create");
#ifdef ACCEL_WITH_MPI
    else {
        int inited = 0;
        MPI_Initialized(&inited);
        if (inited)
            r = accel__coll_agree_mpi(acc, *(MPI_Comm *)d.mpi_comm, r, "accel_coll_create",
                                      accel_now() + (timeout_s > 0 ? timeout_s : accel__timeout_s(acc)));
    }
#endif
    if (r != ACCEL_OK) { accel_host_free(acc, c); return r; }

#ifdef ACCEL_WITH_MPI
    if (mcomm && c->backend != ACCEL_COLL_BACKEND_NONE) {
        int mrc = MPI_Comm_dup(*(MPI_Comm *)mcomm, &c->comm);
        if (mrc != MPI_SUCCESS) {
            r = accel__mpi_fail(c->acc, mrc, "MPI_Comm_dup", __FILE__, __LINE__);
            accel_host_free(acc, c);
            return r;
        }
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
#elif defined(ACCEL__COLL_DEVICE) && defined(MPICH_NUMVERSION) && MPICH_NUMVERSION >= 40000000 &&                      \
    defined(MPIX_GPU_SUPPORT_CUDA)
                {
                    int ok = 0;
                    if (MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA, &ok) == MPI_SUCCESS) c->cuda_aware = ok ? 1 : 0;
                }
#else
                c->cuda_aware = 0;
#endif
            }
            accel_log(acc, ACCEL_LOG_INFO, "MPI device buffers: %s",
                      c->cuda_aware ? "CUDA-aware MPI" : "staged through pinned host memory");
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
              accel_coll_backend_name(c->backend), c->rank, c->size, c->device_mem ? "device" : "host",
              accel__coll_timeout_s(c));
    accel__coll_fr_register(c, "coll");
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
    if (pending)
        accel_log(acc, ACCEL_LOG_WARN,
                  "accel_coll_destroy: %d timed-out operation(s) never completed; their buffers are leaked", pending);
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
#ifdef ACCEL__COLL_NCCL
    if (c->has_ev_cache) cudaEventDestroy(c->ev_cache);
#endif
    accel_host_free(acc, c->req_cache);
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
        cudaMemcpyKind k = dir == 1   ? cudaMemcpyHostToDevice
                           : dir == 2 ? cudaMemcpyDeviceToHost
                                      : cudaMemcpyDeviceToDevice;
        ACCEL__CUDA_CHECK(c->acc, cudaMemcpyAsync(dst, src, bytes, k, accel__coll_stream(c)));
        if (dir != 3) ACCEL__CUDA_CHECK(c->acc, cudaStreamSynchronize(accel__coll_stream(c)));
        return ACCEL_OK;
    }
#else
    return accel__fail(c->acc, ACCEL_ERR_UNSUPPORTED, __FILE__, __LINE__,
                       "device copies need the ACCEL_IMPLEMENTATION TU compiled with nvcc");
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
static accel_result accel__coll_prescale_by(accel_coll *c, void *dst, const void *src, size_t n, accel_dtype dt,
                                            double by) {
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
    return ACCEL__FAIL(c->acc, ACCEL_ERR_UNSUPPORTED,
                       "device gradients need the ACCEL_IMPLEMENTATION TU compiled with nvcc");
#endif
}
ACCEL__PRIVATE accel_result accel__coll_prescale(accel_coll *c, void *dst, const void *src, size_t n, accel_dtype dt) {
    return accel__coll_prescale_by(c, dst, src, n, dt, (double)c->size);
}

static void accel__coll_release(accel_coll_request *q) {
    accel_coll *c = q->c;
#ifdef ACCEL_WITH_MPI
    if (q->ring_tmp) {
        if (!c->ring_cache && !q->has_mreq) { c->ring_cache = q->ring_tmp; c->ring_cache_bytes = q->ring_tmp_bytes; }
        else accel_host_free(c->acc, q->ring_tmp);
    }
    accel_host_free(c->acc, q->red_tmp);
#endif
    if (q->stage_kind == 1) accel_pinned_free(c->acc, q->stage);
    else if (q->stage_kind == 2) accel_device_free(c->acc, q->stage);
#ifdef ACCEL__COLL_NCCL
    if (q->has_ev && !c->has_ev_cache) { c->ev_cache = q->ev; c->has_ev_cache = 1; }
    else if (q->has_ev) cudaEventDestroy(q->ev);
#endif
    accel_host_free(c->acc, q->ivec);
    if (!c->req_cache) c->req_cache = q;
    else accel_host_free(c->acc, q);
}

/* A zeroed request for c: the one kept by the last release, else a new one. An accel_coll is used by one thread at a
   time (the manual), so the one-slot caches need no lock. */
static accel_coll_request *accel__coll_req_new(accel_coll *c) {
    accel_coll_request *q = c->req_cache;
    if (q) c->req_cache = NULL;
    else q = (accel_coll_request *)accel_host_alloc(c->acc, sizeof *q);
    if (q) {
        memset(q, 0, sizeof *q);
        q->c = c;
    }
    return q;
}

#ifdef ACCEL__COLL_NCCL
/* q's event: the one kept by an earlier release, else a new one (re-recording an event is how CUDA reuses it). */
static cudaError_t accel__coll_ev_new(accel_coll_request *q) {
    accel_coll *c = q->c;
    cudaError_t e = cudaSuccess;
    if (c->has_ev_cache) {
        q->ev = c->ev_cache;
        c->has_ev_cache = 0;
    } else {
        e = cudaEventCreateWithFlags(&q->ev, cudaEventDisableTiming);
    }
    if (e == cudaSuccess) q->has_ev = 1;
    return e;
}
#endif

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
            mrc = MPI_Isend(q->ring_direct ? q->ring_src : q->ring_buf, (int)q->count, q->ring_t, 1 - c->rank,
                            q->ring_tag, c->comm, &q->rreq[0]);
        return mrc;
    }
    accel__coll_ring_chunks(q, q->ring_step, &sk, &rk);
    accel__coll_ring_chunk(q, sk, &soff, &scnt);
    accel__coll_ring_chunk(q, rk, &roff, &rcnt);
    direct = q->ring_direct && q->ring_step == 0;
    mrc = MPI_Irecv(q->ring_step < P - 1 && !direct ? (void *)q->ring_tmp : (void *)(q->ring_buf + roff * es), rcnt,
                    q->ring_t, (c->rank + P - 1) % P, q->ring_tag, c->comm, &q->rreq[1]);
    if (mrc == MPI_SUCCESS)
        mrc = MPI_Isend((direct ? q->ring_src : q->ring_buf) + soff * es, scnt, q->ring_t, (c->rank + 1) % P,
                        q->ring_tag, c->comm, &q->rreq[0]);
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
/* small: only the 2(P-1) request handles of an all-gather, gather or broadcast, which must not take (and, having
   MPI requests, then free) the cached scratch of the reductions: allocated for the call alone */
static accel_result accel__coll_scratch_ex(accel_coll *c, accel_coll_request *q, size_t bytes, int small) {
    if (!small && c->ring_cache && c->ring_cache_bytes >= bytes) {
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
static accel_result accel__coll_scratch(accel_coll *c, accel_coll_request *q, size_t bytes) {
    return accel__coll_scratch_ex(c, q, bytes, 0);
}

/* The message tag of a point-to-point all-reduce carries the call's signature, so that ranks calling it with another
   count, dtype or op fail instead of computing a wrong result (an Irecv accepts a shorter message: 4 elements against
   3 gave rank 0 ACCEL_OK and a wrong sum). Bits 0-11: the context's call counter (every rank posts the same
   collectives in the same order; concurrent async all-reduces don't mix). Above, as many bits as MPI_TAG_UB leaves
   (19 with Open MPI's and MPICH's 2^31 - 1; at least 3 in MPI's minimum 32767): op (3), dtype (5), then a hash of
   the count. A message of another signature never matches the receive; the waiting rank finds it with MPI_Iprobe
   (accel__coll_p2p_mismatch, from 1 ms into the wait: nothing on the fast path) and every rank fails with
   ACCEL_ERR_MISMATCH, since in both algorithms every rank receives from every peer. */
#define ACCEL__COLL_TAG_SEQ_BITS 12
static int accel__coll_tag_sig_bits(accel_coll *c) {
    if (!c->tag_sig_bits) {
        void *v = NULL;
        int flag = 0, ub = 32767, bits = 0;
        if (MPI_Comm_get_attr(c->comm, MPI_TAG_UB, &v, &flag) == MPI_SUCCESS && flag && v) ub = *(int *)v;
        while (bits < 31 && ((long long)1 << (bits + 1)) - 1 <= (long long)ub) ++bits;
        bits -= ACCEL__COLL_TAG_SEQ_BITS;
        c->tag_sig_bits = bits > 19 ? 19 : bits < 1 ? -1 : bits; /* -1: no room (never with a conforming MPI) */
    }
    return c->tag_sig_bits > 0 ? c->tag_sig_bits : 0;
}
static unsigned accel__coll_tag_sig(size_t count, accel_dtype dt, accel_coll_op op, int bits) {
    uint64_t h = (uint64_t)count * 0x9E3779B97F4A7C15ull;
    unsigned sig = ((unsigned)op & 7u) | (((unsigned)dt & 31u) << 3) | ((unsigned)(h >> 40) << 8);
    return bits >= 32 ? sig : sig & ((1u << bits) - 1u);
}

/* the signature's op field: the op of a reduction (0-4), else the kind of the call (5 all_gather, 6 gather,
   7 broadcast), so that ranks calling different collectives at the same point never match each other's messages */
static accel_coll_op accel__coll_tag_op(const accel_coll_request *q) {
    return q->kind == ACCEL__K_ALLGATHER ? (accel_coll_op)5 : q->kind == ACCEL__K_GATHER ? (accel_coll_op)6
         : q->kind == ACCEL__K_BCAST ? (accel_coll_op)7 : q->op;
}

/* what every point-to-point all-reduce records: buffers (direct: the send buffer is read where it is), type, op, and
   the message tag (above) */
static void accel__coll_p2p_init(accel_coll *c, accel_coll_request *q, const void *send, void *recv, MPI_Datatype t,
                                 MPI_Op op, int direct) {
    int bits = accel__coll_tag_sig_bits(c);
    size_t key = q->count;
    q->ring_step = 0;
    q->ring_direct = direct;
    q->ring_src = direct ? (const unsigned char *)send : (const unsigned char *)recv;
    q->ring_buf = (unsigned char *)recv;
    q->ring_t = t;
    q->ring_op = op;
    if (q->kind == ACCEL__K_GATHER || q->kind == ACCEL__K_BCAST || q->kind == ACCEL__K_REDUCE) /* the root too */
        key ^= (size_t)(q->root + 1) * (size_t)0x9E3779B1u << (sizeof(size_t) > 4 ? 20 : 0);
    q->ring_tag = (int)((c->ring_seq++ % (1u << ACCEL__COLL_TAG_SEQ_BITS)) |
                        (accel__coll_tag_sig(key, q->dt, accel__coll_tag_op(q), bits) << ACCEL__COLL_TAG_SEQ_BITS));
    q->probe_at = q->start + 1e-3;
}

/* A pending point-to-point all-reduce: is a peer's message of this call (same counter) waiting with another
   signature? Then records ACCEL_ERR_MISMATCH naming the peer and what differs, and returns it. */
static accel_result accel__coll_p2p_mismatch(accel_coll_request *q) {
    accel_coll *c = q->c;
    const char *what = accel__coll_kind_name(q->kind); /* all_reduce or reduce_scatter */
    int k, bits = accel__coll_tag_sig_bits(c);
    unsigned seq_mask = (1u << ACCEL__COLL_TAG_SEQ_BITS) - 1u, mine = (unsigned)q->ring_tag;
    if (!bits) return ACCEL_OK;
    for (k = 0; k < c->size; ++k) {
        MPI_Status st;
        int flag = 0, nbytes = 0;
        unsigned theirs, sig, msig;
        if (k == c->rank || MPI_Iprobe(k, MPI_ANY_TAG, c->comm, &flag, &st) != MPI_SUCCESS || !flag) continue;
        theirs = (unsigned)st.MPI_TAG;
        if ((theirs & seq_mask) != (mine & seq_mask) || theirs == mine) continue;
        sig = theirs >> ACCEL__COLL_TAG_SEQ_BITS;
        msig = mine >> ACCEL__COLL_TAG_SEQ_BITS;
        (void)MPI_Get_count(&st, MPI_BYTE, &nbytes);
        if ((sig & 7u) != (msig & 7u) && bits >= 3 && ((sig & 7u) >= 5 || (msig & 7u) >= 5)) {
            static const char *kinds[] = {"all_gather", "gather", "broadcast"};
            return ACCEL__FAIL(c->acc, ACCEL_ERR_MISMATCH, "%s: rank %d called %s at this point, rank %d %s", what, k,
                               (sig & 7u) >= 5 ? kinds[(sig & 7u) - 5] : "a reduction", c->rank, what);
        }
        if ((sig & 7u) != (msig & 7u) && bits >= 3)
            return ACCEL__FAIL(c->acc, ACCEL_ERR_MISMATCH,
                               "%s: rank %d called it with op %s, rank %d with op %s", what, k,
                               accel_coll_op_name((accel_coll_op)(sig & 7u)), c->rank, accel_coll_op_name(q->op));
        if (((sig >> 3) & 31u) != ((msig >> 3) & 31u) && bits >= 8) {
            const char *dn = accel_dtype_name((accel_dtype)((sig >> 3) & 31u));
            return ACCEL__FAIL(c->acc, ACCEL_ERR_MISMATCH, "%s: rank %d called it with dtype %s, rank %d with %s (%zu "
                               "elements)", what, k, dn ? dn : "?", c->rank, accel_dtype_name(q->dt), q->count);
        }
        if ((q->ring == 2 || q->ring == 4) && q->kind == ACCEL__K_REDUCE &&
            (size_t)nbytes == q->count * accel_dtype_size(q->dt)) /* same length, another signature: the root */
            return ACCEL__FAIL(c->acc, ACCEL_ERR_MISMATCH, "%s: rank %d called it with another root than rank %d "
                               "(root %d)", what, k, c->rank, q->root);
        if (q->ring == 7 || (q->kind == ACCEL__K_REDUCE && q->ring != 2 && q->ring != 4))
            return ACCEL__FAIL(c->acc, ACCEL_ERR_MISMATCH, "%s: rank %d called it with another element count or root "
                               "than rank %d (%zu %s, root %d)", what, k, c->rank, q->count, accel_dtype_name(q->dt),
                               q->root);
        if (q->ring == 2 || q->ring == 4 || q->ring == 6) /* whole buffers: the peer's count is its message length */
            return ACCEL__FAIL(c->acc, ACCEL_ERR_MISMATCH, "%s: rank %d called it with %zu elements, rank %d with %zu "
                               "(%s)", what, k, (size_t)nbytes / accel_dtype_size(q->dt), c->rank, q->count,
                               accel_dtype_name(q->dt));
        return ACCEL__FAIL(c->acc, ACCEL_ERR_MISMATCH, "%s: rank %d called it with another element count than rank %d "
                           "(%zu %s; its message holds %d bytes)", what, k, c->rank, q->count,
                           accel_dtype_name(q->dt), nbytes);
    }
    return ACCEL_OK;
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
    size_t reqb = ((size_t)(ns + 2) * sizeof(MPI_Request) + 63) & ~(size_t)63,
           tmp = reqb + (direct ? 0 : 2 * ACCEL__COLL_SEG_BYTES);
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
        mrc = MPI_Isend(q->ring_src + off * accel_dtype_size(q->dt), cnt, q->ring_t, 1 - r, q->ring_tag, c->comm,
                        &q->rq[i]);
    }
    if (mrc != MPI_SUCCESS) return accel__mpi_fail(c->acc, mrc, "all_reduce (ring step 0)", __FILE__, __LINE__);
    return ACCEL_OK;
}

static accel_result accel__coll_ring_start(accel_coll *c, accel_coll_request *q, const void *send, void *recv,
                                           size_t es, MPI_Datatype t, MPI_Op op) {
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
    if (!exchange && c->size == 2 && (q->count / 2) * es >= ACCEL__COLL_SEG_MIN_CHUNK)
        return accel__coll_seg_start(c, q, direct);
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
    if (q->ring_direct && k == (r == 0 ? 1 : 0))
        return q->rs_own ? q->rs_own : q->ring_buf + roff * accel_dtype_size(q->dt);
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
            if (mrc == MPI_SUCCESS)
                mrc = MPI_Isend(q->ring_src, (int)q->count, q->ring_t, k, q->ring_tag, c->comm, &q->rq[j]);
            ++j;
            continue;
        }
        accel__coll_ring_chunk(q, k, &koff, &kcnt);
        if (q->ring_step == 0) { /* chunk k to rank k; my chunk from rank k (empty chunks are not sent) */
            if (mcnt > 0)
                mrc = MPI_Irecv(accel__coll_direct_slot(q, k), mcnt, q->ring_t, k, q->ring_tag, c->comm,
                                &q->rq[P - 1 + j]);
            if (mrc == MPI_SUCCESS && kcnt > 0)
                mrc = MPI_Isend(q->ring_src + koff * es, kcnt, q->ring_t, k, q->ring_tag, c->comm, &q->rq[j]);
        } else { /* my folded chunk to rank k; chunk k from rank k (a reduce: to and on the root alone) */
            int red = q->kind == ACCEL__K_REDUCE;
            if (kcnt > 0 && (!red || r == q->root))
                mrc = MPI_Irecv(q->ring_buf + koff * es, kcnt, q->ring_t, k, q->ring_tag, c->comm, &q->rq[P - 1 + j]);
            if (mrc == MPI_SUCCESS && mcnt > 0 && (!red || k == q->root))
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
    own = q->rs_own ? q->rs_own : q->ring_buf + moff * es;
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
        if (q->rs_own) { /* reduce-scatter: phase 1 alone; the fold ended in own (the first other rank's block was
                            received there, or x0 was, and every later contribution folded into it) */
            *flag = 1;
            return MPI_SUCCESS;
        }
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

/* Reduce-scatter as phase 1 of the direct all-reduce (q->ring == 3 with rs_own = recv): block k of send (recv_count
   elements) goes to rank k, which folds the P contributions in rank order into its recv — the same sum, in the same
   order, as the all-reduce gives that element, so a reduce-scatter of a buffer equals the matching block of its
   all-reduce bit for bit (ZeRO-3 reduces with it). send and recv must not overlap (the collective's contract), so
   the send buffer is always read where it is and the first other rank's block lands in recv. q->count is set to the
   whole send buffer's elements (P * recv_count): the chunking of the all-reduce then gives the blocks exactly. */
static accel_result accel__coll_direct_rs_start(accel_coll *c, accel_coll_request *q, const void *send, void *recv,
                                                size_t es, MPI_Datatype t, MPI_Op op) {
    int P = c->size, mrc;
    size_t reqb = ((size_t)(2 * (P - 1)) * sizeof(MPI_Request) + 63) & ~(size_t)63;
    size_t slot = (q->count + 1) * es, tmp = reqb + (size_t)(P - 1) * slot;
    accel_result ar = accel__coll_scratch(c, q, tmp);
    if (ar != ACCEL_OK) return ar;
    q->count *= (size_t)P;
    accel__coll_p2p_init(c, q, send, recv, t, op, 1);
    q->rs_own = (unsigned char *)recv;
    q->ring = 3;
    q->rq = (MPI_Request *)(void *)q->ring_tmp;
    q->nrq = 2 * (P - 1);
    q->dslots = q->ring_tmp + reqb;
    q->dslot_bytes = slot;
    q->fold_k = 0;
    q->fold_acc = NULL;
    q->has_mreq = 1;
    mrc = accel__coll_direct_post(q);
    if (mrc != MPI_SUCCESS) return accel__mpi_fail(c->acc, mrc, "reduce_scatter (direct)", __FILE__, __LINE__);
    return ACCEL_OK;
}

/* All-gather on point-to-point messages (q->ring == 6), 2..ACCEL__COLL_DIRECT_MAX_RANKS ranks, host (or staged)
   memory: every rank sends its block to every other rank and receives every other rank's block straight into its
   place in recv, all in one round, under the call's signature tag (accel__coll_p2p_init). Every rank receives from
   every peer, so another count or dtype on any rank is ACCEL_ERR_MISMATCH on every rank within about a millisecond
   (accel__coll_p2p_mismatch); MPI_Iallgather instead gave Open MPI's MPI_ERR_TRUNCATE, raised on MPI_COMM_WORLD and
   fatal to the job, or a short block and ACCEL_OK. It moves what MPI's ring moves ((P-1) blocks in and out per
   rank) in one round of concurrent messages instead of P-1 dependent steps; the sends go to rank+1, rank+2, ... so
   that the ranks don't all start with the same peer. Scratch: the 2(P-1) requests. The result is a copy, so it is
   the same bits whatever the algorithm. */
static accel_result accel__coll_allgather_start(accel_coll *c, accel_coll_request *q, const void *send, void *recv,
                                                size_t es, MPI_Datatype t) {
    int P = c->size, r = c->rank, i, j = 0, mrc = MPI_SUCCESS;
    size_t blk = q->count * es;
    unsigned char *own = (unsigned char *)recv + (size_t)r * blk;
    accel_result ar = accel__coll_scratch_ex(c, q, (size_t)(2 * (P - 1)) * sizeof(MPI_Request), 1);
    if (ar != ACCEL_OK) return ar;
    if (send == MPI_IN_PLACE) send = own;
    accel__coll_p2p_init(c, q, send, recv, t, MPI_OP_NULL, 1);
    q->ring = 6;
    q->rq = (MPI_Request *)(void *)q->ring_tmp;
    q->nrq = 2 * (P - 1);
    for (i = 0; i < q->nrq; ++i) q->rq[i] = MPI_REQUEST_NULL;
    q->has_mreq = 1;
    if (send != own) memcpy(own, send, blk); /* send and recv don't overlap but in place (the call's contract) */
    for (i = 1; i < P && mrc == MPI_SUCCESS; ++i, ++j) {
        int from = (r - i + P) % P, to = (r + i) % P;
        mrc = MPI_Irecv((unsigned char *)recv + (size_t)from * blk, (int)q->count, t, from, q->ring_tag, c->comm,
                        &q->rq[P - 1 + j]);
        if (mrc == MPI_SUCCESS) mrc = MPI_Isend(send, (int)q->count, t, to, q->ring_tag, c->comm, &q->rq[j]);
    }
    if (mrc != MPI_SUCCESS) return accel__mpi_fail(c->acc, mrc, "all_gather (point-to-point)", __FILE__, __LINE__);
    return ACCEL_OK;
}

/* Gather and broadcast on point-to-point messages (q->ring == 7), 2..ACCEL__COLL_DIRECT_MAX_RANKS ranks, host (or
   staged) memory. The data go straight where they belong (gather: every block to the root, into its place in recv;
   broadcast: the root's buffer to every other rank), and every other pair of ranks exchanges an empty message, all
   posted at once under the call's signature tag, with the root mixed into the count's hash (accel__coll_p2p_init).
   So every rank receives one message from every peer, and another count, dtype or root on any rank is
   ACCEL_ERR_MISMATCH on every rank within about a millisecond (accel__coll_p2p_mismatch) — a gather with a shorter
   block on one rank gave ACCEL_OK and a wrong result before, a broadcast Open MPI's fatal MPI_ERR_TRUNCATE. The empty
   messages cost one small-message latency that overlaps the data. A broadcast sends the whole buffer from the root
   to each rank (no tree, no scatter + all-gather): the root sends P-1 buffers (bench_coll --ops has the figures). */
static accel_result accel__coll_rooted_start(accel_coll *c, accel_coll_request *q, const void *send, void *recv,
                                             size_t es, MPI_Datatype t) {
    int P = c->size, r = c->rank, root = q->root, gather = q->kind == ACCEL__K_GATHER, i, j = 0, mrc = MPI_SUCCESS;
    size_t blk = q->count * es;
    accel_result ar = accel__coll_scratch_ex(c, q, (size_t)(2 * (P - 1)) * sizeof(MPI_Request), 1);
    if (ar != ACCEL_OK) return ar;
    if (gather && r == root && send == MPI_IN_PLACE) send = (unsigned char *)recv + (size_t)r * blk;
    accel__coll_p2p_init(c, q, send, recv, t, MPI_OP_NULL, 1);
    q->ring = 7;
    q->rq = (MPI_Request *)(void *)q->ring_tmp;
    q->nrq = 2 * (P - 1);
    for (i = 0; i < q->nrq; ++i) q->rq[i] = MPI_REQUEST_NULL;
    q->has_mreq = 1;
    if (gather && r == root && send != (unsigned char *)recv + (size_t)r * blk)
        memcpy((unsigned char *)recv + (size_t)r * blk, send, blk);
    for (i = 1; i < P && mrc == MPI_SUCCESS; ++i, ++j) {
        int from = (r - i + P) % P, to = (r + i) % P, rn = 0, sn = 0;
        void *rb = q->ring_tmp;             /* empty messages: any valid address */
        const void *sb = q->ring_tmp;
        if (gather ? r == root : from == root) {
            rb = gather ? (unsigned char *)recv + (size_t)from * blk : recv;
            rn = 1;
        }
        if (gather ? to == root : r == root) { sb = send; sn = 1; }
        mrc = MPI_Irecv(rb, rn ? (int)q->count : 0, t, from, q->ring_tag, c->comm, &q->rq[P - 1 + j]);
        if (mrc == MPI_SUCCESS)
            mrc = MPI_Isend(sb, sn ? (int)q->count : 0, t, to, q->ring_tag, c->comm, &q->rq[j]);
    }
    if (mrc != MPI_SUCCESS) return accel__mpi_fail(c->acc, mrc, accel__coll_kind_name(q->kind), __FILE__, __LINE__);
    return ACCEL_OK;
}

static int accel__coll_mpi_test(accel_coll_request *q, int *flag) {
    if (q->ring >= 6) return accel__mpi_testall(q->nrq, q->rq, flag);
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
            if (e != cudaSuccess)
                r = ACCEL__FAIL(c->acc, ACCEL_ERR_CUDA, "average kernel launch: %s", cudaGetErrorString(e));
        }
#endif
    }
    if (r == ACCEL_OK && q->copy_bytes) r = accel__coll_copy(c, q->copy_dst, q->copy_src, q->copy_bytes, q->copy_dir);
    accel__coll_release(q);
    return r;
}

static accel_result accel__coll_progress_x(accel_coll_request *q, int *done);
/* One step of progress. Returns ACCEL_OK with *done, or an error (the request is then released or orphaned). The
   flight recorder's record ends here. */
static accel_result accel__coll_progress(accel_coll_request *q, int *done) {
    accel *acc = q->c->acc;
    uint64_t id = q->fr_id;
    accel_result r = accel__coll_progress_x(q, done);
    if (r != ACCEL_OK || *done) accel__fr_done(acc, id, r);
    return r;
}
static accel_result accel__coll_progress_x(accel_coll_request *q, int *done) {
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
            accel_result r =
                accel__mpi_fail(c->acc, mrc, q->ring ? accel__coll_kind_name(q->kind) : "MPI_Test", __FILE__, __LINE__);
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
            if (c->nccl_valid && ncclCommGetAsyncError(c->nccl, &st) == ncclSuccess && st != ncclSuccess &&
                st != ncclInProgress) {
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
            accel_result r =
                ACCEL__FAIL(c->acc, ACCEL_ERR_CUDA, "%s: %s", accel__coll_kind_name(q->kind), cudaGetErrorString(e));
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
    if (accel_now() - q->start >= 30.0) accel__coll_fr_tick(q);
#ifdef ACCEL_WITH_MPI
    if (q->ring && accel_now() >= q->probe_at) {
        accel_result r = accel__coll_p2p_mismatch(q);
        q->probe_at = accel_now() + 1e-3;
        if (r != ACCEL_OK) {
            c->broken = r;
            accel__coll_orphan(q);
            return r;
        }
    }
#endif
    if (accel_now() > q->deadline) {
        accel_result r =
            ACCEL__FAIL(c->acc, ACCEL_ERR_TIMEOUT,
                        "%s (%s, %zu elements) did not complete within %.1f s on rank %d of %d: a peer is "
                        "dead, stuck, or not calling the same collective; this context is now unusable",
                        accel__coll_kind_name(q->kind), accel_dtype_name(q->dt) ? accel_dtype_name(q->dt) : "-",
                        q->count, q->deadline - q->start, c->rank, c->size);
        accel__fr_done(c->acc, q->fr_id, ACCEL_ERR_TIMEOUT); /* the dump shows this call failed, the others' state */
        q->fr_id = 0;
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
    if (!q || !done)
        return accel__fail(q ? q->c->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, __FILE__, __LINE__,
                           "accel_coll_test: NULL argument");
    return accel__coll_progress(q, done);
}

ACCEL__DEF accel_result accel_coll_wait(accel_coll_request *q) {
    int done = 0, spins = 0;
    accel_result r;
    if (!q)
        return accel__fail(NULL, ACCEL_ERR_INVALID_ARGUMENT, __FILE__, __LINE__, "accel_coll_wait: request is NULL");
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
    case ACCEL__K_ALLREDUCE:
    case ACCEL__K_REDUCE:
    case ACCEL__K_ALLGATHER:
    case ACCEL__K_GATHER:
    case ACCEL__K_REDUCE_SCATTER:
        return accel__coll_copy_same(c, a->recv, a->send, bytes, a->dev);
    case ACCEL__K_ALLGATHERV:
        return accel__coll_copy_same(c, a->recv, a->send, a->vcounts[0], a->dev);
    default: return ACCEL_OK; /* AVG over one process divides by 1: nothing to do */
    }
}

#ifdef ACCEL_WITH_MPI
static int accel__coll_is_reduction_result(const accel_coll *c, const accel__coll_args *a) {
    return a->op == ACCEL_COLL_AVG &&
           (a->kind == ACCEL__K_ALLREDUCE || (a->kind == ACCEL__K_REDUCE && c->rank == a->root) ||
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
        ACCEL__CUDA_CHECK(c->acc,
                          cudaStreamSynchronize(accel__coll_stream(c))); /* inputs produced by earlier kernels */
#else
        return ACCEL__FAIL(c->acc, ACCEL_ERR_UNSUPPORTED,
                           "device buffers need the ACCEL_IMPLEMENTATION TU compiled with nvcc");
#endif
    }
    if (a->kind == ACCEL__K_ALLGATHERV) {
        size_t total = 0;
        q->ivec = (int *)accel_host_alloc(c->acc, sizeof(int) * 2 * (size_t)P);
        if (!q->ivec) return ACCEL_ERR_OUT_OF_MEMORY;
        for (i = 0; i < P; ++i) {
            if (a->vcounts[i] > (size_t)INT_MAX || total > (size_t)INT_MAX - a->vcounts[i])
                return ACCEL__FAIL(c->acc, ACCEL_ERR_INVALID_ARGUMENT,
                                   "all_gather_v: %zu bytes in total is too large for MPI", total + a->vcounts[i]);
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
            sbytes = a->count * es * (size_t)P;
            in_off = (size_t)me * a->count * es;
            in_bytes = a->count * es;
            out_bytes = sbytes;
            break;
        case ACCEL__K_GATHER:
            sbytes = a->count * es * (me == a->root ? (size_t)P : 1u);
            in_off = me == a->root ? (size_t)me * a->count * es : 0;
            in_bytes = a->count * es; out_bytes = me == a->root ? sbytes : 0;
            break;
        case ACCEL__K_REDUCE_SCATTER:
            sbytes = a->count * es * (size_t)(P + 1);
            in_bytes = a->count * es * (size_t)P;
            out_off = in_bytes;
            out_bytes = a->count * es;
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
        else if (a->kind == ACCEL__K_ALLGATHER || a->kind == ACCEL__K_ALLGATHERV ||
                 (a->kind == ACCEL__K_GATHER && me == a->root))
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
    if (a->kind == ACCEL__K_REDUCE && P >= 2 && P <= ACCEL__COLL_DIRECT_MAX_RANKS && a->count >= 1 &&
        (a->count >= 2 || P > 2 || accel__coll_exchange(c, es)) && (!a->dev || stage)) {
        /* REDUCE ON MPI (the manual): the point-to-point all-reduce, its result kept on the root alone. Staged, the
           stage is the buffer in place on every rank; else off the root the result goes to scratch. */
        if (me != a->root && !stage) {
            q->red_tmp = accel_host_alloc(c->acc, a->count * es);
            if (!q->red_tmp) return ACCEL__FAIL(c->acc, ACCEL_ERR_OUT_OF_MEMORY, "reduce: %zu bytes of scratch",
                                                a->count * es);
            recv = q->red_tmp;
        }
        return P == 2 ? accel__coll_ring_start(c, q, send, recv, es, t, op)
                      : accel__coll_direct_start(c, q, send, recv, es, t, op);
    }
    if (a->kind == ACCEL__K_ALLREDUCE && P == 2 && (a->count >= 2 || (a->count == 1 && accel__coll_exchange(c, es))) &&
        (!a->dev || stage))
        return accel__coll_ring_start(c, q, send, recv, es, t, op);
    if (a->kind == ACCEL__K_ALLREDUCE && P >= 3 && P <= ACCEL__COLL_DIRECT_MAX_RANKS && a->count >= 1 &&
        (!a->dev || stage))
        return accel__coll_direct_start(c, q, send, recv, es, t, op);
    if (a->kind == ACCEL__K_REDUCE_SCATTER && P >= 2 && P <= ACCEL__COLL_DIRECT_MAX_RANKS && a->count >= 1 &&
        (!a->dev || stage))
        return accel__coll_direct_rs_start(c, q, send, recv, es, t, op);
    if ((a->kind == ACCEL__K_GATHER || (a->kind == ACCEL__K_BCAST && accel__coll_bcast_direct(c, a->count, a->dt))) &&
        P >= 2 && P <= ACCEL__COLL_DIRECT_MAX_RANKS && a->count >= 1 && (!a->dev || stage))
        return a->kind == ACCEL__K_BCAST ? accel__coll_rooted_start(c, q, bcast_buf, bcast_buf, es, t)
                                         : accel__coll_rooted_start(c, q, send, recv, es, t);
    if (a->kind == ACCEL__K_ALLGATHER && P >= 2 && P <= ACCEL__COLL_DIRECT_MAX_RANKS && a->count >= 1 &&
        (!a->dev || stage))
        return accel__coll_allgather_start(c, q, send, recv, es, t);
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
            if (a->kind == ACCEL__K_BCAST) {
                in_bytes = me == a->root ? sbytes : 0;
                out_bytes = me == a->root ? 0 : sbytes;
            }
            break;
        case ACCEL__K_ALLGATHER: case ACCEL__K_GATHER:
            sbytes = a->count * es * (size_t)P; in_off = (size_t)me * a->count * es; in_bytes = a->count * es;
            out_bytes = accel__coll_recv_elems(c, a) * es;
            break;
        case ACCEL__K_REDUCE_SCATTER:
            sbytes = a->count * es * (size_t)(P + 1);
            in_bytes = a->count * es * (size_t)P;
            out_off = in_bytes;
            out_bytes = a->count * es;
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
        if (!c->comm_stream)
            ACCEL__CUDA_CHECK(c->acc, cudaStreamCreateWithFlags(&c->comm_stream, cudaStreamNonBlocking));
        ACCEL__CUDA_CHECK(c->acc, accel__coll_ev_new(q));
        ACCEL__CUDA_CHECK(c->acc, cudaEventRecord(q->ev, user));
        ACCEL__CUDA_CHECK(c->acc, cudaStreamWaitEvent(c->comm_stream, q->ev, 0));
        s = c->comm_stream;
        q->on_comm_stream = 1;
    }
    switch (a->kind) {
    case ACCEL__K_ALLREDUCE: ACCEL__COLL_NCCL_CALL(c, ncclAllReduce(send, recv, a->count, t, op, c->nccl, s)); break;
    case ACCEL__K_REDUCE: ACCEL__COLL_NCCL_CALL(c, ncclReduce(send, recv, a->count, t, op, a->root, c->nccl, s)); break;
    case ACCEL__K_BCAST:
        ACCEL__COLL_NCCL_CALL(c, ncclBroadcast(send, (void *)send, a->count, t, a->root, c->nccl, s));
        break;
    case ACCEL__K_ALLGATHER: ACCEL__COLL_NCCL_CALL(c, ncclAllGather(send, recv, a->count, t, c->nccl, s)); break;
    case ACCEL__K_REDUCE_SCATTER:
        ACCEL__COLL_NCCL_CALL(c, ncclReduceScatter(send, recv, a->count, t, op, c->nccl, s));
        break;
    case ACCEL__K_GATHER:
        ACCEL__COLL_NCCL_CALL(c, ncclGroupStart());
        if (me == a->root) {
            for (i = 0; i < P; ++i) {
                void *dst = (unsigned char *)recv + (size_t)i * a->count * es;
                if (i == me) {
                    if (dst != send)
                        ACCEL__CUDA_CHECK(c->acc,
                                          cudaMemcpyAsync(dst, send, a->count * es, cudaMemcpyDeviceToDevice, s));
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
                ACCEL__COLL_NCCL_CALL(
                    c, ncclBroadcast(i == me ? send : dst, dst, a->vcounts[i], ncclUint8, i, c->nccl, s));
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
        (a->kind == ACCEL__K_ALLREDUCE || a->kind == ACCEL__K_REDUCE_SCATTER ||
         (a->kind == ACCEL__K_REDUCE && me == a->root))) {
        accel__coll_div_kernel<<<accel__coll_blocks(a->count), 256, 0, s>>>(recv, a->count, (int)a->dt, (double)P);
        ACCEL__CUDA_CHECK(c->acc, cudaGetLastError());
    }
    if (!q->has_ev && (q->stage || a->kind == ACCEL__K_BARRIER)) {
        /* host results or a barrier: the host must wait for the stream */
        ACCEL__CUDA_CHECK(c->acc, accel__coll_ev_new(q));
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
    q = accel__coll_req_new(c);
    if (!q) return ACCEL_ERR_OUT_OF_MEMORY;
    q->kind = a->kind;
    q->dt = a->dt;
    q->op = a->op;
    q->count = a->count;
    q->root = a->root;
    q->start = accel_now();
    q->deadline = a->deadline > 0 ? a->deadline : q->start + accel__coll_timeout_s(c);
    q->fr_id = accel__fr_post(c->fr_group, c->fr_seq++, accel__coll_kind_name(a->kind),
                              (a->kind == ACCEL__K_ALLREDUCE || a->kind == ACCEL__K_REDUCE ||
                               a->kind == ACCEL__K_REDUCE_SCATTER) ? (int)a->op : -1,
                              a->kind == ACCEL__K_BARRIER ? -1 : (int)a->dt, (int64_t)a->count,
                              (int64_t)(a->count * accel_dtype_size(a->dt)), a->root);
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
        accel__fr_done(c->acc, q->fr_id, r);
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

/* Debug mode's cross-rank check; also run outside it (force) before a broadcast too large for the checked
   point-to-point form (accel__coll_bcast_direct). */
static accel_result accel__coll_debug_check(accel_coll *c, const accel__coll_args *a, int force) {
    accel__coll_sig mine, *all;
    accel__coll_args g;
    accel_result r;
    int i, differ = 0;
    if ((!c->debug && !force) || c->size <= 1) return ACCEL_OK;
    memset(&mine, 0, sizeof mine);
    mine.magic = 0x6163636f6c6cLL;
    mine.kind = a->kind;
    mine.dtype = a->kind == ACCEL__K_BARRIER ? 0 : (int64_t)a->dt;
    mine.op = (a->kind == ACCEL__K_ALLREDUCE || a->kind == ACCEL__K_REDUCE || a->kind == ACCEL__K_REDUCE_SCATTER)
                  ? (int64_t)a->op
                  : -1;
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
        size_t off = (size_t)snprintf(msg, sizeof msg, "%s: ranks called different collectives:",
                                      c->debug ? "debug mode" : accel__coll_kind_name(a->kind));
        for (i = 0; i < c->size && off < sizeof msg - 8; ++i) {
            const accel__coll_sig *s = &all[i];
            const char *dn = accel_dtype_name((accel_dtype)s->dtype);
            off += (size_t)snprintf(
                msg + off, sizeof msg - off, " rank %d: %s(dtype=%s, op=%s, count=%lld, root=%lld)%s", i,
                s->magic == mine.magic ? accel__coll_kind_name((int)s->kind) : "<not a collective check>",
                dn ? dn : "-", s->op >= 0 ? accel_coll_op_name((accel_coll_op)s->op) : "-", (long long)s->count,
                (long long)s->root, i + 1 < c->size ? ";" : "");
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
    if (c->backend == ACCEL_COLL_BACKEND_NCCL && !q->has_ev) {
        uint64_t id = q->fr_id; /* enqueued on acc.stream: the recorder counts it done on the host */
        r = accel__coll_complete(q);
        accel__fr_done(c->acc, id, r);
        return r;
    }
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
    if (es == 0)
        return ACCEL__FAIL(c->acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: dtype %d is not an accel_dtype", what, (int)a->dt);
    if ((int)a->op < 0 || (int)a->op >= ACCEL_COLL_OP_COUNT)
        return ACCEL__FAIL(c->acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: op %d is not an accel_coll_op", what, (int)a->op);
    if (a->kind == ACCEL__K_ALLREDUCE || a->kind == ACCEL__K_REDUCE || a->kind == ACCEL__K_REDUCE_SCATTER) {
        if (!accel__coll_reducible(a->dt))
            return ACCEL__FAIL(c->acc, ACCEL_ERR_UNSUPPORTED,
                               "%s: reductions support F64 F32 F16 BF16 I64 I32 U8, not %s", what,
                               accel_dtype_name(a->dt));
        if (a->op == ACCEL_COLL_AVG && !accel_dtype_is_float(a->dt))
            return ACCEL__FAIL(c->acc, ACCEL_ERR_INVALID_ARGUMENT,
                               "%s: mean/avg of an integer dtype (%s) is not defined "
                               "(Accelerate raises too); use sum",
                               what, accel_dtype_name(a->dt));
    }
    if (a->root < 0 || a->root >= c->size)
        return ACCEL__FAIL(c->acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: root %d is not a rank of this group of %d", what,
                           a->root, c->size);
    if (a->count > (size_t)INT_MAX ||
        ((a->kind == ACCEL__K_ALLGATHER || a->kind == ACCEL__K_GATHER || a->kind == ACCEL__K_REDUCE_SCATTER) &&
         a->count > (size_t)INT_MAX / (size_t)c->size))
        return ACCEL__FAIL(c->acc, ACCEL_ERR_INVALID_ARGUMENT,
                           "%s: %zu elements is more than one call can move (INT_MAX)", what, a->count);
    if (a->count > 0) {
        int need_recv = a->kind != ACCEL__K_BCAST &&
                        !((a->kind == ACCEL__K_REDUCE || a->kind == ACCEL__K_GATHER) && c->rank != a->root);
        if (!a->send || (need_recv && !a->recv))
            return ACCEL__FAIL(c->acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: NULL buffer for %zu elements", what, a->count);
        if (a->kind == ACCEL__K_REDUCE_SCATTER) {
            const unsigned char *s0 = (const unsigned char *)a->send, *r0 = (const unsigned char *)a->recv;
            size_t sb = a->count * es * (size_t)c->size, rb = a->count * es;
            if (r0 < s0 + sb && s0 < r0 + rb)
                return ACCEL__FAIL(c->acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: send and recv overlap (not supported)",
                                   what);
        }
    }
    return ACCEL_OK;
}

static accel_result accel__coll_do(accel_coll *c, accel__coll_args *a, const char *what, accel_coll_request **req) {
    accel_result r = accel__coll_validate(c, a, what);
    if (req) *req = NULL;
    if (r != ACCEL_OK) return r;
    r = accel__coll_debug_check(c, a, a->kind == ACCEL__K_BCAST && c->backend == ACCEL_COLL_BACKEND_MPI &&
                                          a->count > 0 && !accel__coll_bcast_direct(c, a->count, a->dt));
    if (r != ACCEL_OK) return r;
    if (!req) {
        if (a->count == 0 && a->kind != ACCEL__K_BARRIER && a->kind != ACCEL__K_ALLGATHERV) return ACCEL_OK;
        return accel__coll_run(c, a);
    }
    a->async = 1; /* always a nonblocking MPI call / the comm stream */
    return accel__coll_post(c, a, req);
}

static void accel__coll_args_init(accel__coll_args *a, int kind, const void *send, void *recv, size_t count,
                                  accel_dtype dt, accel_coll_op op, int root) {
    memset(a, 0, sizeof *a);
    a->kind = kind; a->send = send; a->recv = recv; a->count = count; a->dt = dt; a->op = op; a->root = root;
}

ACCEL__DEF accel_result (accel_coll_all_reduce)(accel_coll *c, const void *send, void *recv, size_t count,
                                                accel_dtype dt,
                                              accel_coll_op op) {
    accel__coll_args a;
    accel__coll_args_init(&a, ACCEL__K_ALLREDUCE, send, recv, count, dt, op, 0);
    return accel__coll_do(c, &a, "all_reduce", NULL);
}
ACCEL__DEF accel_result (accel_coll_reduce)(accel_coll *c, const void *send, void *recv, size_t count, accel_dtype dt,
                                          accel_coll_op op, int root) {
    accel__coll_args a;
    accel__coll_args_init(&a, ACCEL__K_REDUCE, send, recv, count, dt, op, root);
    return accel__coll_do(c, &a, "reduce", NULL);
}
ACCEL__DEF accel_result (accel_coll_broadcast)(accel_coll *c, void *buf, size_t count, accel_dtype dt, int root) {
    accel__coll_args a;
    accel__coll_args_init(&a, ACCEL__K_BCAST, buf, buf, count, dt, ACCEL_COLL_SUM, root);
    return accel__coll_do(c, &a, "broadcast", NULL);
}
ACCEL__DEF accel_result (accel_coll_all_gather)(accel_coll *c, const void *send, void *recv, size_t count,
                                              accel_dtype dt) {
    accel__coll_args a;
    accel__coll_args_init(&a, ACCEL__K_ALLGATHER, send, recv, count, dt, ACCEL_COLL_SUM, 0);
    return accel__coll_do(c, &a, "all_gather", NULL);
}
ACCEL__DEF accel_result (accel_coll_reduce_scatter)(accel_coll *c, const void *send, void *recv, size_t recv_count,
                                                  accel_dtype dt, accel_coll_op op) {
    accel__coll_args a;
    accel__coll_args_init(&a, ACCEL__K_REDUCE_SCATTER, send, recv, recv_count, dt, op, 0);
    return accel__coll_do(c, &a, "reduce_scatter", NULL);
}
ACCEL__DEF accel_result (accel_coll_gather)(accel_coll *c, const void *send, void *recv, size_t count, accel_dtype dt,
                                          int root) {
    accel__coll_args a;
    accel__coll_args_init(&a, ACCEL__K_GATHER, send, recv, count, dt, ACCEL_COLL_SUM, root);
    return accel__coll_do(c, &a, "gather", NULL);
}
ACCEL__DEF accel_result (accel_coll_barrier)(accel_coll *c) {
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
        accel_coll_request *q = accel__coll_req_new(c);
        if (!q) return ACCEL_ERR_OUT_OF_MEMORY;
        q->kind = ACCEL__K_BARRIER;
        q->start = accel_now();
        q->deadline = q->start + accel__coll_timeout_s(c);
        if (accel__coll_ev_new(q) != cudaSuccess) {
            accel__coll_release(q);
            return ACCEL__FAIL(c->acc, ACCEL_ERR_CUDA, "cudaEventCreate failed");
        }
        if (cudaEventRecord(q->ev, accel__coll_stream(c)) != cudaSuccess) {
            accel__coll_release(q);
            return ACCEL__FAIL(c->acc, ACCEL_ERR_CUDA, "cudaEventRecord failed");
        }
        return accel_coll_wait(q);
    }
#endif
    return ACCEL_OK;
}

ACCEL__DEF accel_result (accel_coll_all_reduce_async)(accel_coll *c, const void *send, void *recv, size_t count,
                                                    accel_dtype dt, accel_coll_op op, accel_coll_request **req) {
    accel__coll_args a;
    if (!req)
        return accel__fail(c ? c->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, __FILE__, __LINE__,
                           "all_reduce_async: req is NULL");
    accel__coll_args_init(&a, ACCEL__K_ALLREDUCE, send, recv, count, dt, op, 0);
    return accel__coll_do(c, &a, "all_reduce_async", req);
}
ACCEL__DEF accel_result (accel_coll_reduce_async)(accel_coll *c, const void *send, void *recv, size_t count,
                                                accel_dtype dt, accel_coll_op op, int root, accel_coll_request **req) {
    accel__coll_args a;
    if (!req)
        return accel__fail(c ? c->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, __FILE__, __LINE__,
                           "reduce_async: req is NULL");
    accel__coll_args_init(&a, ACCEL__K_REDUCE, send, recv, count, dt, op, root);
    return accel__coll_do(c, &a, "reduce_async", req);
}
ACCEL__DEF accel_result (accel_coll_broadcast_async)(accel_coll *c, void *buf, size_t count, accel_dtype dt, int root,
                                                   accel_coll_request **req) {
    accel__coll_args a;
    if (!req)
        return accel__fail(c ? c->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, __FILE__, __LINE__,
                           "broadcast_async: req is NULL");
    accel__coll_args_init(&a, ACCEL__K_BCAST, buf, buf, count, dt, ACCEL_COLL_SUM, root);
    return accel__coll_do(c, &a, "broadcast_async", req);
}
ACCEL__DEF accel_result (accel_coll_all_gather_async)(accel_coll *c, const void *send, void *recv, size_t count,
                                                    accel_dtype dt, accel_coll_request **req) {
    accel__coll_args a;
    if (!req)
        return accel__fail(c ? c->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, __FILE__, __LINE__,
                           "all_gather_async: req is NULL");
    accel__coll_args_init(&a, ACCEL__K_ALLGATHER, send, recv, count, dt, ACCEL_COLL_SUM, 0);
    return accel__coll_do(c, &a, "all_gather_async", req);
}
ACCEL__DEF accel_result (accel_coll_reduce_scatter_async)(accel_coll *c, const void *send, void *recv,
                                                          size_t recv_count,
                                                        accel_dtype dt, accel_coll_op op, accel_coll_request **req) {
    accel__coll_args a;
    if (!req)
        return accel__fail(c ? c->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, __FILE__, __LINE__,
                           "reduce_scatter_async: req is NULL");
    accel__coll_args_init(&a, ACCEL__K_REDUCE_SCATTER, send, recv, recv_count, dt, op, 0);
    return accel__coll_do(c, &a, "reduce_scatter_async", req);
}

/* ------------------------------------------------------------------------ 10. the host process group over a context */
/* When the core has no host process group (several processes without MPI or torchrun's store), a context over NCCL that
   spans acc's group becomes it (accel_coll_create installs it, accel_coll_destroy removes it): the core's host
   collectives (barrier, broadcast, all-gather, small all-reduces, agreement checks — what amp, ckpt and trackers use)
   then move their bytes through these functions: host memory, staged through the device by the NCCL backend, each
   call with the deadline the core passes (accel__transport in accel.h). */
static accel_result accel__coll_tp_run(void *ctx, accel *acc, int kind, const void *in, void *out, size_t bytes,
                                       int root, const size_t *vcounts, double deadline) {
    accel_coll *c = (accel_coll *)ctx;
    accel__coll_args a;
    accel_result r = accel__coll_check_broken(c);
    (void)acc; /* c->acc: the core passes the Accelerator this context belongs to */
    if (r != ACCEL_OK) return r;
    if (bytes > (size_t)INT_MAX)
        return ACCEL__FAIL(c->acc, ACCEL_ERR_INVALID_ARGUMENT, "host group: %zu bytes is too large", bytes);
    if (kind != ACCEL__K_ALLGATHERV && bytes == 0) return ACCEL_OK;
    accel__coll_args_init(&a, kind, in, out, bytes, ACCEL_U8, ACCEL_COLL_SUM, root);
    a.vcounts = vcounts;
    a.dev = 0;
    a.deadline = deadline;
    return accel__coll_run(c, &a);
}
static accel_result accel__coll_tp_allgather(void *ctx, accel *acc, const void *in, void *out, size_t bytes,
                                             double deadline) {
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
ACCEL__DEF accel_result accel_coll_reduce_tensor(accel_coll *c, void *buf, size_t count, accel_dtype dt,
                                                 const char *reduction) {
    accel_coll_op op;
    if (!c) return accel__coll_null();
    if (!reduction || !strcmp(reduction, "sum") || !strcmp(reduction, "none")) op = ACCEL_COLL_SUM;
    else if (!strcmp(reduction, "mean")) op = ACCEL_COLL_AVG;
    else if (!strcmp(reduction, "max")) op = ACCEL_COLL_MAX;
    else if (!strcmp(reduction, "min")) op = ACCEL_COLL_MIN;
    else if (!strcmp(reduction, "prod")) op = ACCEL_COLL_PROD;
    else
        return ACCEL__FAIL(c->acc, ACCEL_ERR_INVALID_ARGUMENT,
                           "reduce: reduction \"%s\" is not one of sum, mean, max, none, min, prod", reduction);
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
    if (count > (size_t)INT_MAX)
        return ACCEL__FAIL(c->acc, ACCEL_ERR_INVALID_ARGUMENT, "%zu bytes is too large for one collective", count);
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
    if (nb < 0)
        return ACCEL__FAIL(c->acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: tensor '%s' has an invalid dtype/shape", what,
                           t->name ? t->name : "");
    if (nb > 0 && !t->ptr)
        return ACCEL__FAIL(c->acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: tensor '%s' has no data pointer", what,
                           t->name ? t->name : "");
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
    size_t off = (size_t)snprintf(msg, sizeof msg, "%s: ranks disagree on dtype/rank/shape (dim %d may differ):", what,
                                  skip_dim);
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
        accel__coll_fill_kernel<<<accel__coll_blocks(n), 256, 0, accel__coll_stream(c)>>>((unsigned char *)dst, n, es,
                                                                                          p);
        ACCEL__CUDA_CHECK(c->acc, cudaGetLastError());
        return ACCEL_OK;
    }
#else
    return ACCEL__FAIL(c->acc, ACCEL_ERR_UNSUPPORTED,
                       "device fill needs the ACCEL_IMPLEMENTATION TU compiled with nvcc");
#endif
}

ACCEL__DEF accel_result accel_coll_pad_across_processes(accel_coll *c, const accel_tensor *in, int dim,
                                                        double pad_value, int pad_first, accel_tensor *out) {
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
                    memcpy((unsigned char *)buf + (size_t)(o * maxd * inner) + off,
                           (const unsigned char *)in->ptr + (size_t)o * blk, blk);
            }
#ifdef ACCEL__COLL_DEVICE
            else {
                cudaError_t e = cudaMemcpy2DAsync((unsigned char *)buf + off, (size_t)(maxd * inner), in->ptr, blk, blk,
                                                  (size_t)outer, cudaMemcpyDeviceToDevice, accel__coll_stream(c));
                if (e != cudaSuccess)
                    r = ACCEL__FAIL(c->acc, ACCEL_ERR_CUDA, "cudaMemcpy2DAsync: %s", cudaGetErrorString(e));
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
    r = out ? accel__coll_check_tensor(c, in, "gather", &nb)
            : ACCEL__FAIL(c->acc, ACCEL_ERR_INVALID_ARGUMENT, "gather: out is NULL");
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
    r = total > (size_t)INT_MAX
            ? ACCEL__FAIL(c->acc, ACCEL_ERR_INVALID_ARGUMENT, "gather: %zu bytes in total is too large", total)
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
ACCEL__DEF accel_result accel_coll_split_between_processes(int64_t n, int P, int p, int apply_padding,
                                                           accel_coll_range *out) {
    int64_t q, rem;
    if (!out || n < 0 || P < 1 || p < 0 || p >= P)
        return accel__fail(NULL, ACCEL_ERR_INVALID_ARGUMENT, __FILE__, __LINE__,
                           "split_between_processes: bad arguments (n=%lld, num_processes=%d, process_index=%d)",
                           (long long)n, P, p);
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

/* ------------------------------------------------------------------------------------------- 13. process mesh */
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
    static const char *n[ACCEL_COLL_MESH_COUNT] = {"pp", "dp_replicate", "dp_shard",    "cp",
                                                   "tp", "dp",           "dp_shard_cp", "dp_cp"};
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
        if (mrc != MPI_SUCCESS && r == ACCEL_OK)
            r = accel__mpi_fail(acc, mrc, "MPI_Comm_split (mesh)", __FILE__, __LINE__);
        if (r == ACCEL_OK && nc != MPI_COMM_NULL) {
            int i, j, chk_rank = -1, chk_size = 0;
            MPI_User_function *fns[2][4];
            c->comm = nc;
            c->comm_valid = 1;
            MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
            MPI_Comm_rank(nc, &chk_rank);
            MPI_Comm_size(nc, &chk_size);
            if (chk_rank != key || chk_size != size)
                r = ACCEL__FAIL(acc, ACCEL_ERR_MPI, "mesh: MPI_Comm_split gave rank %d of %d, expected %d of %d",
                                chk_rank, chk_size, key, size);
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
                if (rc != ncclSuccess && rc != ncclInProgress)
                    r = accel__coll_nccl_fail(parent, rc, "ncclCommSplit (mesh)", __LINE__);
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
            ncclUniqueId *ids = (ncclUniqueId *)accel_host_alloc(acc, sizeof(ncclUniqueId) * (size_t)parent->size),
                         mine;
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
                if (rc != ncclSuccess && rc != ncclInProgress)
                    xr = accel__coll_nccl_fail(parent, rc, "ncclCommInitRankConfig (mesh)", __LINE__);
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
            else if (cudaMemset(c->scratch, 0, 8) != cudaSuccess)
                r = ACCEL__FAIL(acc, ACCEL_ERR_CUDA, "cudaMemset (mesh scratch) failed");
        }
    }
#endif
    (void)color;
    if (r != ACCEL_OK) { accel_coll_destroy(c); return r; }
    accel__coll_fr_register(c, "mesh");
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
    if (x < 1)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "mesh: %s=%ld: %s must be at least 1", env, x, field);
    *out = x;
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_coll_mesh_create(accel_coll *parent, const accel_coll_mesh_desc *desc,
                                               accel_coll_mesh **out) {
    static const char *const names[ACCEL_COLL_MESH_NDIMS] = {"pp_size", "dp_replicate_size", "dp_shard_size", "cp_size",
                                                             "tp_size"};
    static const char *const envs[ACCEL_COLL_MESH_NDIMS] = {"ACCEL_PP_SIZE", "PARALLELISM_CONFIG_DP_REPLICATE_SIZE",
                                                            "PARALLELISM_CONFIG_DP_SHARD_SIZE",
                                                            "PARALLELISM_CONFIG_CP_SIZE", "PARALLELISM_CONFIG_TP_SIZE"};
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
    given[0] = d.pp_size;
    given[1] = d.dp_replicate_size;
    given[2] = d.dp_shard_size;
    given[3] = d.cp_size;
    given[4] = d.tp_size;
    for (i = 0; i < ACCEL_COLL_MESH_NDIMS; ++i) v[i] = 0;
    for (i = 0; r == ACCEL_OK && i < ACCEL_COLL_MESH_NDIMS; ++i) {
        if (given[i] < 0) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                            "mesh: %s=%d must be at least 1 (0 = the environment or 1)", names[i], given[i]);
            break;
        }
        r = accel__coll_mesh_resolve(acc, given[i], envs[i], names[i], &v[i]);
    }
    if (r == ACCEL_OK) {
        for (i = 0; i < ACCEL_COLL_MESH_NDIMS; ++i)
            prod *= v[i]; /* each <= INT_MAX: the product of 5 fits unless huge */
        if (prod == 1 && parent->size > 1) { v[1] = parent->size; prod = parent->size; } /* Accelerate: plain DDP */
        for (i = 0, prod = 1; i < ACCEL_COLL_MESH_NDIMS && prod <= (int64_t)INT_MAX; ++i) prod *= v[i];
        if (prod != (int64_t)parent->size)
            r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                            "mesh: pp %lld x dp_replicate %lld x dp_shard %lld x cp %lld x "
                            "tp %lld = %lld does not match the %d processes of the group",
                            (long long)v[0], (long long)v[1], (long long)v[2], (long long)v[3], (long long)v[4],
                            (long long)prod, parent->size);
    }
    /* every rank must build the same mesh: a difference fails on every rank, naming the dimension */
    if (parent->on_host_group) {
        r = accel__agree_values(acc, r, "accel_coll_mesh_create", names, v, ACCEL_COLL_MESH_NDIMS);
    } else {
        int64_t *all = (int64_t *)accel_host_alloc(acc, sizeof v * (size_t)parent->size);
        accel_result x =
            accel__coll_agree(parent, r == ACCEL_OK && !all ? ACCEL_ERR_OUT_OF_MEMORY : r, "accel_coll_mesh_create");
        if (x == ACCEL_OK) x = accel__coll_host_op(parent, ACCEL__K_ALLGATHER, v, all, sizeof v, 0, NULL);
        for (i = 0; x == ACCEL_OK && i < ACCEL_COLL_MESH_NDIMS; ++i) {
            int k;
            for (k = 1; k < parent->size; ++k)
                if (all[k * ACCEL_COLL_MESH_NDIMS + i] != all[i]) {
                    x = ACCEL__FAIL(acc, ACCEL_ERR_MISMATCH,
                                    "accel_coll_mesh_create: processes disagree on %s: rank 0=%lld, "
                                    "rank %d=%lld",
                                    names[i], (long long)all[i], k, (long long)all[k * ACCEL_COLL_MESH_NDIMS + i]);
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
    accel_log(acc, ACCEL_LOG_DEBUG,
              "mesh: pp %d x dp_replicate %d x dp_shard %d x cp %d x tp %d; rank %d at (%d, %d, %d, %d, %d)",
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
    if (!m || !coords)
        return accel__fail(m ? m->parent->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, __FILE__, __LINE__,
                           "mesh_coords: NULL argument");
    if (rank < 0 || rank >= m->parent->size)
        return ACCEL__FAIL(m->parent->acc, ACCEL_ERR_INVALID_ARGUMENT, "mesh_coords: rank %d is not in [0, %d)", rank,
                           m->parent->size);
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
/* Both use the core's admission (accel_hostgroup.h: accel__admit_*): the job's secret (ACCEL_STORE_SECRET) and run id
   decide who gets rank 0's bytes — the NCCL unique id never goes to a peer that did not prove the secret. TCP: rank 0
   listens on addr (its interface only) and answers each admitted peer's HELLO with a WELCOME carrying its proof and the
   bytes; the sockets are the core's (every call gives up at the deadline). */
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
        r = accel__admit_join(acc, &adm, NULL, &ss, sl, "tcp bootstrap", where, (uint32_t)size, (uint32_t)rank,
                              deadline, deadline, bytes, &fd, &p, &body, &blen);
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
    int tmo = (int)(accel__coll_timeout_s(c) * 1000.0 > 2e9 ? 2e9 : accel__coll_timeout_s(c) * 1000.0);
    /* the host process group (MPI or the TCP store) carries the id when this context spans it */
    int group = c->on_host_group && strcmp(accel_host_group_name(acc), "none") != 0;
    memset(&id, 0, sizeof id);
#ifdef ACCEL_WITH_MPI
    if (!how || !*how)
        how = group ? "host" : c->comm_valid ? "mpi" : acc->master_addr[0] ? "tcp" : (file && *file) ? "file" : "";
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
        if (!group)
            return ACCEL__FAIL(acc, ACCEL_ERR_ENVIRONMENT,
                               "ACCEL_NCCL_INIT=host but this context has no host process group to use");
        r = accel_host_broadcast(acc, &id, sizeof id, 0);
    } else if (!strcmp(how, "mpi")) {
#ifdef ACCEL_WITH_MPI
        if (!c->comm_valid)
            return ACCEL__FAIL(acc, ACCEL_ERR_ENVIRONMENT, "ACCEL_NCCL_INIT=mpi but MPI is not the process group");
        {
            MPI_Request q;
            ACCEL__MPI_CHECK(acc, MPI_Ibcast(&id, (int)sizeof id, MPI_BYTE, 0, c->comm, &q));
            r = accel__mpi_wait(acc, &q, accel__coll_deadline(c), "NCCL bootstrap (ncclUniqueId broadcast)");
            if (r == ACCEL_ERR_TIMEOUT) c->broken = r; /* the request stays in flight: the communicator is unusable */
        }
#else
        return ACCEL__FAIL(acc, ACCEL_ERR_UNSUPPORTED,
                           "ACCEL_NCCL_INIT=mpi but the implementation was built without MPI");
#endif
    } else if (!strcmp(how, "tcp")) {
        if (!acc->master_addr[0])
            return ACCEL__FAIL(acc, ACCEL_ERR_ENVIRONMENT, "ACCEL_NCCL_INIT=tcp needs MASTER_ADDR (and MASTER_PORT)");
        r = accel_coll_tcp_broadcast(acc, acc->master_addr, acc->master_port, c->rank, c->size, &id, sizeof id, tmo);
    } else if (!strcmp(how, "file")) {
        if (!file || !*file)
            return ACCEL__FAIL(acc, ACCEL_ERR_ENVIRONMENT,
                               "ACCEL_NCCL_INIT=file needs ACCEL_NCCL_INIT_FILE=<path on a shared filesystem>");
        r = accel_coll_file_broadcast(acc, file, c->rank, &id, sizeof id, tmo);
    } else {
        return ACCEL__FAIL(acc, ACCEL_ERR_ENVIRONMENT,
                           "NCCL bootstrap: ACCEL_NCCL_INIT=\"%s\" is not host|mpi|tcp|file (and no "
                           "default applies: no host process group, MPI, MASTER_ADDR or ACCEL_NCCL_INIT_FILE)",
                           how);
    }
    if (r != ACCEL_OK) return r;
    cfg.blocking = 0;
    rc = ncclCommInitRankConfig(&c->nccl, c->size, id, c->rank, &cfg);
    if (rc != ncclSuccess && rc != ncclInProgress)
        return accel__coll_nccl_fail(c, rc, "ncclCommInitRankConfig", __LINE__);
    c->nccl_valid = 1;
    r = accel__coll_nccl_settle(c, rc, "ncclCommInitRankConfig", __LINE__);
    if (r != ACCEL_OK) return r;
    c->scratch = accel_device_alloc(acc, 8);
    if (!c->scratch) return ACCEL_ERR_OUT_OF_MEMORY;
    ACCEL__CUDA_CHECK(c->acc, cudaMemset(c->scratch, 0, 8));
    return ACCEL_OK;
#else
    return ACCEL__FAIL(c->acc, ACCEL_ERR_UNSUPPORTED,
                       "NCCL needs the ACCEL_IMPLEMENTATION TU compiled with nvcc and ACCEL_WITH_NCCL");
#endif
}

/* ------------------------------------------------------------------------------------------ 16. flight recorder */
/* The dump: one JSON file per rank, <dir>/rank<R>.json (temp + rename), written by accel__coll_fr_write with
   async-signal-safe calls only (open, write, rename, close, mkdir; numbers and strings formatted here), so SIGUSR1
   dumps a rank even while it computes or waits. It reads the ring while the process may be writing a slot: a slot
   being rewritten has id 0 and is skipped. */
static char accel__coll_fr_dir[512];          /* ACCEL_FLIGHT_DIR, else <project_dir>/flight */
static int accel__coll_fr_rank = -1, accel__coll_fr_world;
static volatile sig_atomic_t accel__coll_fr_busy;
static char accel__coll_fr_buf[4096];
static size_t accel__coll_fr_len;
static int accel__coll_fr_fd = -1, accel__coll_fr_err;

static void accel__coll_fr_flush(void) {
    size_t off = 0;
    while (off < accel__coll_fr_len && !accel__coll_fr_err) {
        ssize_t k = write(accel__coll_fr_fd, accel__coll_fr_buf + off, accel__coll_fr_len - off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) accel__coll_fr_err = 1;
        else off += (size_t)k;
    }
    accel__coll_fr_len = 0;
}
static void accel__coll_fr_raw(const char *t) {
    for (; *t; ++t) {
        if (accel__coll_fr_len == sizeof accel__coll_fr_buf) accel__coll_fr_flush();
        accel__coll_fr_buf[accel__coll_fr_len++] = *t;
    }
}
static void accel__coll_fr_str(const char *t) { /* a JSON string: printable ASCII kept, the rest escaped or '?' */
    char e[8];
    accel__coll_fr_raw("\"");
    for (; t && *t; ++t) {
        unsigned char ch = (unsigned char)*t;
        if (ch == '"' || ch == '\\') { e[0] = '\\'; e[1] = (char)ch; e[2] = 0; }
        else if (ch < 0x20 || ch > 0x7e) { e[0] = '?'; e[1] = 0; }
        else { e[0] = (char)ch; e[1] = 0; }
        accel__coll_fr_raw(e);
    }
    accel__coll_fr_raw("\"");
}
static void accel__coll_fr_int(int64_t v) {
    char d[24];
    int n = 0;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do { d[n++] = (char)('0' + (int)(u % 10)); u /= 10; } while (u);
    if (v < 0) accel__coll_fr_raw("-");
    while (n > 0) { char one[2]; one[0] = d[--n]; one[1] = 0; accel__coll_fr_raw(one); }
}
static void accel__coll_fr_key(const char *k) {
    accel__coll_fr_raw(",\"");
    accel__coll_fr_raw(k);
    accel__coll_fr_raw("\":");
}
static int64_t accel__coll_fr_us(double t) { return t > 0 ? (int64_t)(t * 1e6) : 0; }

/* Writes this rank's dump; 0 ok, -1 when the file could not be written (or a dump is in progress). */
static int accel__coll_fr_write(const char *reason) {
    char path[600], tmp[620], num[16];
    uint64_t i, first;
    int k, n = 0;
    if (accel__coll_fr_busy || accel__coll_fr_rank < 0) return -1;
    accel__coll_fr_busy = 1;
    k = accel__coll_fr_rank;
    do { num[n++] = (char)('0' + k % 10); k /= 10; } while (k && n < 15);
    for (k = 0; accel__coll_fr_dir[k] && k < 560; ++k) path[k] = accel__coll_fr_dir[k];
    memcpy(path + k, "/rank", 5);
    k += 5;
    while (n > 0) path[k++] = num[--n];
    memcpy(path + k, ".json", 6);
    memcpy(tmp, path, (size_t)k + 6);
    memcpy(tmp + k + 5, ".tmp", 5);
    (void)mkdir(accel__coll_fr_dir, 0755);
    accel__coll_fr_fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (accel__coll_fr_fd < 0) { accel__coll_fr_busy = 0; return -1; }
    accel__coll_fr_err = 0;
    accel__coll_fr_len = 0;
    accel__coll_fr_raw("{\"format\":\"accel-flight-recorder\",\"version\":1");
    accel__coll_fr_key("rank"); accel__coll_fr_int(accel__coll_fr_rank);
    accel__coll_fr_key("world_size"); accel__coll_fr_int(accel__coll_fr_world);
    accel__coll_fr_key("pid"); accel__coll_fr_int((int64_t)getpid());
    accel__coll_fr_key("reason"); accel__coll_fr_str(reason);
    accel__coll_fr_key("now_us"); accel__coll_fr_int(accel__coll_fr_us(accel__fr_now()));
    accel__coll_fr_key("capacity"); accel__coll_fr_int((int64_t)accel__g_fr_cap);
    accel__coll_fr_key("recorded"); accel__coll_fr_int((int64_t)accel__g_fr_n);
    accel__coll_fr_raw(",\"groups\":[");
    for (k = 0; k < accel__g_fr_ngroups; ++k) {
        accel__coll_fr_raw(k ? ",{\"id\":" : "{\"id\":");
        accel__coll_fr_int(k);
        accel__coll_fr_key("name"); accel__coll_fr_str(accel__g_fr_groups[k].name);
        accel__coll_fr_key("rank"); accel__coll_fr_int(accel__g_fr_groups[k].rank);
        accel__coll_fr_key("size"); accel__coll_fr_int(accel__g_fr_groups[k].size);
        accel__coll_fr_raw("}");
    }
    accel__coll_fr_raw("],\"calls\":[");
    first = accel__g_fr_n > accel__g_fr_cap ? accel__g_fr_n - accel__g_fr_cap + 1 : 1;
    for (i = first, n = 0; accel__g_fr_cap && i <= accel__g_fr_n; ++i) {
        const accel__fr_entry *e = &accel__g_fr[(i - 1) % accel__g_fr_cap];
        const char *dn = e->dtype > 0 ? accel_dtype_name((accel_dtype)e->dtype) : "";
        if (e->id != i) continue;
        accel__coll_fr_raw(n++ ? ",\n{\"seq\":" : "\n{\"seq\":");
        accel__coll_fr_int((int64_t)e->seq);
        accel__coll_fr_key("group"); accel__coll_fr_int(e->group);
        accel__coll_fr_key("what"); accel__coll_fr_str(e->what);
        accel__coll_fr_key("op"); accel__coll_fr_str(e->op >= 0 ? accel_coll_op_name((accel_coll_op)e->op) : "");
        accel__coll_fr_key("dtype"); accel__coll_fr_str(dn ? dn : "");
        accel__coll_fr_key("count"); accel__coll_fr_int(e->count);
        accel__coll_fr_key("bytes"); accel__coll_fr_int(e->bytes);
        accel__coll_fr_key("root"); accel__coll_fr_int(e->root);
        accel__coll_fr_key("file"); accel__coll_fr_str(e->file ? e->file : "");
        accel__coll_fr_key("line"); accel__coll_fr_int(e->line);
        accel__coll_fr_key("posted_us"); accel__coll_fr_int(accel__coll_fr_us(e->posted));
        accel__coll_fr_key("completed_us"); accel__coll_fr_int(accel__coll_fr_us(e->done));
        accel__coll_fr_key("state");
        accel__coll_fr_str(e->state == ACCEL__FR_DONE     ? "completed"
                           : e->state == ACCEL__FR_FAILED ? "failed"
                                                          : "posted");
        accel__coll_fr_raw("}");
    }
    accel__coll_fr_raw("\n]}\n");
    accel__coll_fr_flush();
    if (close(accel__coll_fr_fd) != 0) accel__coll_fr_err = 1;
    accel__coll_fr_fd = -1;
    if (!accel__coll_fr_err && rename(tmp, path) != 0) accel__coll_fr_err = 1;
    if (accel__coll_fr_err) (void)unlink(tmp);
    accel__coll_fr_busy = 0;
    return accel__coll_fr_err ? -1 : 0;
}
static void accel__coll_fr_dump_hook(const char *reason) { (void)accel__coll_fr_write(reason); }

/* A context joins the recorder: group number (the same on every rank: contexts are created collectively), the
   dump's directory, the dump hook, and SIGUSR1 (accel__signal_dump). */
static void accel__coll_fr_register(accel_coll *c, const char *kind) {
    char name[32];
    const char *dir = getenv("ACCEL_FLIGHT_DIR");
    accel__fr_host_group(c->acc);
    accel__fmt(name, sizeof name, "%s%d:%s", kind, accel__g_fr_ngroups, accel_coll_backend_name(c->backend));
    c->fr_group = accel__fr_group(name, c->rank, c->size);
    if (dir && *dir) accel__fmt(accel__coll_fr_dir, sizeof accel__coll_fr_dir, "%s", dir);
    else accel__fmt(accel__coll_fr_dir, sizeof accel__coll_fr_dir, "%s/flight", c->acc->desc.project_dir);
    accel__coll_fr_rank = c->acc->process_index;
    accel__coll_fr_world = c->acc->num_processes;
    if (!accel__g_fr_dump) accel__g_fr_dump = accel__coll_fr_dump_hook;
    /* SIGUSR1 dumps through the core's handler, which also serves accel_preemption_install's stop flag on SIGUSR1
       (accel.h: PREEMPTION); until this Accelerator's accel_shutdown */
    if (accel__g_fr_cap) accel__signal_dump(c->acc, accel__coll_fr_dump_hook);
}

#if defined(ACCEL_WITH_MPI) || defined(ACCEL__COLL_NCCL)
/* The "waiting for" line of a request in flight for 30 s or more, naming a peer whose message has not arrived. */
static void accel__coll_fr_tick(const accel_coll_request *q) {
    char peer[48];
    int k = -1;
#ifdef ACCEL_WITH_MPI
    int P = q->c->size, j;
    if (q->ring == 2 && q->rreq[1] != MPI_REQUEST_NULL) k = 1 - q->c->rank;
    else if ((q->ring == 1 || q->ring == 5) && P > 1) k = (q->c->rank + P - 1) % P;
    else if ((q->ring == 3 || q->ring == 4) && q->rq)
        for (j = 0; j < P - 1 && k < 0; ++j)
            if (q->rq[P - 1 + j] != MPI_REQUEST_NULL) k = j < q->c->rank ? j : j + 1;
#endif
    if (k >= 0) accel__fmt(peer, sizeof peer, "rank %d", k);
    accel__fr_tick(q->c->acc, k >= 0 ? peer : NULL);
}
#endif

ACCEL__DEF accel_result accel_coll_fr_dump(accel *acc, const char *reason) {
    if (!acc)
        return accel__fail(NULL, ACCEL_ERR_INVALID_ARGUMENT, __FILE__, __LINE__, "accel_coll_fr_dump: acc is NULL");
    if (accel__coll_fr_rank < 0)
        return ACCEL__FAIL(acc, ACCEL_ERR_STATE, "flight recorder: no accel_coll context was created in this process");
    if (!accel__g_fr_cap)
        return ACCEL__FAIL(acc, ACCEL_ERR_STATE, "flight recorder: off (ACCEL_FLIGHT_RECORDER_SIZE=0)");
    if (accel__coll_fr_write(reason ? reason : "on request") != 0)
        return ACCEL__FAIL(acc, ACCEL_ERR_IO, "flight recorder: cannot write %s/rank%d.json: %s", accel__coll_fr_dir,
                           acc->process_index, strerror(errno));
    return ACCEL_OK;
}


#endif /* ACCEL_IMPLEMENTATION */

/* accel_collectives.h is released under the MIT licence. Copyright (c) 2026 the accel authors. */
