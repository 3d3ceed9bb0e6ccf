/* accel_ddp.h — data-parallel gradient synchronisation for accel: PyTorch DDP's bucketed reducer (its buckets, its
   averaging order, overlap with backward) and join for uneven inputs (Accelerate's join_uneven_inputs). Builds on
   accel_collectives.h: a reducer runs on a communicator (accel_coll), whatever its backend (NONE / MPI / NCCL) or its
   group (the world, or a process mesh's dp group).

   CONTENTS
     USAGE
     OPTIONS                      accel_ddp_desc, accel_ddp_join_desc
     BUCKETS AND OVERLAP          DDP's bucketing, progress inside grad_ready
     AVERAGING ORDER              DDP's, bit for bit
     AFTER A FAILURE
     JOIN                         uneven inputs: the exact gradients
     COMMUNICATION HOOKS          comm_hook / comm_wrapper: torch's fp16/bf16 compress hooks, bit for bit
     LOCAL SGD                    accel_ddp_local_sgd_*: Accelerate's LocalSGD
     trigger_sync_in_backward     accel_ddp_trigger_sync_in_backward_begin/_end (at its declaration)
     COLLECTIVE CALLS AND ERRORS
     THREADS AND STREAMS
     DIFFERENCES FROM ACCELERATE / PYTORCH

   USAGE
       accel_coll *coll;  accel_coll_create(&acc, NULL, &coll);       // the world (or a mesh's dp group)
       accel_ddp *red;    accel_ddp_create(coll, NULL, &red);         // DDP's 25 MiB buckets, averaging
       accel_ddp_add(red, grads, ngrads);                              // accel_tensor[], registration order
       for (each micro-batch) {
           accel_accumulate_begin(&acc);
           backward: after layer i's gradient is final, accel_ddp_grad_ready(red, i) (optional: overlap)
           if (accel_should_reduce(&acc)) accel_ddp_wait(red);          // the step's gradients are averaged
           ... optimizer step on sync steps ...
           accel_accumulate_end(&acc);
       }
       accel_ddp_destroy(red);  accel_coll_destroy(coll);

   OPTIONS (accel_ddp_desc, zero = default)
     bucket_cap_mb, first_bucket_mb  DDP's 25 and 1 MiB.
     no_average    nonzero: the gradients are summed, not averaged.
     flat          accel_toggle; ACCEL_DEFAULT: one in-place all-reduce when the gradients (in registration order)
                   are one contiguous buffer of one dtype on every rank, else buckets; ACCEL_OFF: always buckets;
                   ACCEL_ON: require the contiguous buffer (error otherwise).
     comm_hook, comm_wrapper  COMMUNICATION HOOKS below.
     accel_ddp_join_desc.no_divide_by_initial_world_size  JOIN below.
     ACCEL_DDP_NO_DISPATCH (macro, in the ACCEL_IMPLEMENTATION TU): no run-time choice of the AVX2 + F16C host loop of
                   the comm hooks (then only an AVX2 + F16C build uses it). The same bits either way.

   BUCKETS AND OVERLAP
     DDP's bucketing: reverse registration order, one bucket list per dtype, the first bucket closes at
     first_bucket_mb and the others at bucket_cap_mb (a bucket closes at the first gradient that reaches the cap);
     buckets launch strictly in bucket order on every rank. Device gradients are packed into flat staging buffers
     on acc.stream (a scaling kernel when averaging, else D2D copies). On MPI with host memory, gradients >= 1 MiB
     are all-reduced in place (in bucket order) instead of being copied in and out, and at most 2 buckets are in
     flight. MPI moves a nonblocking operation only inside MPI calls, so every grad_ready also tests the buckets in
     flight (one MPI_Test each, never waits) and unpacks finished ones: communication advances between layers of
     backward. There is no progress thread (MPI_THREAD_FUNNELED), so a rank whose core is busy with backward still
     pays the copies of shared-memory MPI on that core.

   AVERAGING ORDER
     DDP's, not reduce("mean")'s: every rank's gradient is multiplied by 1/P, rounded to the compute type (double
     for F64, float for F32/F16/BF16), while it is packed into its bucket (in place for gradients reduced where they
     are), and the buckets are all-reduced with SUM. That is what torch's Reducer does with DDP's default
     gradient_as_bucket_view=False, so where the summation order matches (always for P <= 2) the result is
     PyTorch's bit for bit; the tests compare with torch's DDP. accel_coll_all_reduce with ACCEL_COLL_AVG and
     accel_coll_reduce_tensor(..., "mean") keep Accelerate's reduce("mean") order: the sum, then a division by P
     (docs/semantics.md §7). The two orders can differ in the last bit when P is not a power of two.

   AFTER A FAILURE
     After a failed reduction (ACCEL_ERR_TIMEOUT, a dead peer) the gradients are not a valid step: a packed bucket
     unpacks nothing (its gradients keep this rank's values), but whatever is all-reduced in place (flat mode, host
     gradients >= 1 MiB on MPI) may hold partial sums, with nothing to restore them from. Do not apply the step; the
     communicator refuses further work anyway.

   JOIN (Accelerate's join_uneven_inputs = torch's Join with DDP's join hook)
       accel_ddp_join_begin(red, NULL);               // collective; finalizes the reducer (add first)
       while (accel_data_shard_next(&sh, idx, &n) == ACCEL_OK && n > 0) { ...; accel_ddp_wait(red); ... }
       accel_ddp_join_end(red, params, NPARAMS);      // out of batches: shadow the others, then sync params
     For loaders with even_batches off, where ranks run out of batches at different steps. In join mode every
     reducing step starts with one round: an 8-byte all-gather in which each rank says whether it reduces or has
     joined. Let A be the ranks that reduce in that step and D = the group size P (DDP's
     divide_by_initial_world_size=True) or |A| (no_divide_by_initial_world_size). Then:
       - a rank in A ends the step with g_i = sum over q in A of fl(g_q,i * fl(1/D)) (no_average: the plain sum over
         A); accel_ddp_join_active(red) says |A|;
       - a rank in join_end issues the same all-reduces (same buckets, order, counts) with zeros; its own gradients
         are not touched and its parameters not updated;
       - when a round finds A empty every rank leaves join_end; the highest-ranked of the ranks that joined last
         (DDP's authoritative rank) broadcasts the n params of join_end to every rank (DDP's _sync_final_model).
         Optimizer state and anything else stay per rank, as in DDP.
     Steps that do not reduce (accumulation) have no round. A rank that neither reduces nor joins (dead, stuck)
     makes the others' round end in ACCEL_ERR_TIMEOUT at the deadline; a rank in any other collective makes the
     round fail with ACCEL_ERR_MISMATCH. join_end with bad params still shadows, then fails every rank before the
     broadcast.

   COMMUNICATION HOOKS
     DistributedDataParallelKwargs(comm_hook=DDPCommunicationHookType.FP16 / BF16, comm_wrapper=...) is
     desc.comm_hook / desc.comm_wrapper. Each bucket goes out as a 16-bit copy (half the bytes of F32 on the wire),
     element by element exactly as torch's default_hooks.py computes it:
         w = wrapper ? round_W(g) : g             fp16/bf16_compress_wrapper: bucket.set_buffer(buffer.to(W))
         c = round_H(round_H(w) / P)              fp16/bf16_compress_hook: buffer.to(H).div_(world_size)
         s = c_0 + c_1 + ... (all-reduce SUM in H, each addition in float rounded to H)
         g = round_grad(wrapper ? round_W(s) : s) the decompress copies back into the buffer, then into the gradient
     round_X is round to nearest even; P the communicator's size (also while joining, as torch's hook). torch's
     CUDA division multiplies by fl(1/P) instead; for a 16-bit c the two give the same bits. With the wrapper equal
     to the hook the wrapper changes nothing. Gradients F32, F16 or BF16 (torch casts F64 through float: a second
     rounding, refused); no_average is refused (the hook divides); comm_wrapper without comm_hook is ignored with a
     warning (Accelerate applies a wrapper only to a hook). On 2 ranks the results equal torch's DDP with the hook
     (gloo) bit for bit; on 3+ the 16-bit sum's association order is the communicator's (gloo's ring and NCCL's
     choose theirs per chunk), so an element may differ from torch's in the last bit (tests/mpi/ddp/
     hooks_reference.py). POWER_SGD / BATCHED_POWER_SGD are not provided. Training with a hook converges like fp32:
     examples/train_digits --comm-hook fp16|bf16 on 2 ranks ends within 2 % of the fp32 run's loss and 1 point of
     its accuracy (tests/mpi/trainer, trainer-comm-hook). Cost: bench/ddp (ddp-bench-hooks-np2/np4). On host
     gradients the cast, division and cast back are one pass per gradient each way (AVX2 + F16C on x86-64, the scalar
     bits); what remains of a hook step on one host is the 16-bit all-reduce itself, whose MPI user operation
     (accel_collectives.h) converts element by element.
     No registration handle: the hook is part of the reducer's desc, fixed for its life. Accelerate sets it once, in
     prepare() (model.register_comm_hook); torch allows one register_comm_hook per DDP model and offers no removal
     (a second call raises), so there is nothing to remove — a reducer with another hook is a new reducer.

   LOCAL SGD
     accelerate.local_sgd.LocalSGD(accelerator, model, local_sgd_steps=K, enabled) as a begin/step/end triple:
         accel_ddp_local_sgd_desc ld = {0}; ld.local_sgd_steps = 8;
         accel_ddp_local_sgd *l;
         accel_ddp_local_sgd_begin(red, params, n_params, &ld, &l);       // with LocalSGD(...) as local_sgd:
         for (each micro-batch) {                                          //   for batch in dl:
             accel_accumulate_begin(&acc); ... backward ...;
             accel_ddp_wait(red);                 // reduces nothing while l is open and enabled (model.no_sync)
             if (acc.sync_gradients) { optimizer step; zero grads }
             accel_accumulate_end(&acc);
             accel_ddp_local_sgd_step(l);                                  //       local_sgd.step()
         }
         accel_ddp_local_sgd_end(l);                                       // __exit__: the final average
     Accelerate's rule: enabled = enabled && distributed_type != NO (one process: off). step() adds 1 to a counter
     on every call, enabled or not, and when enabled and counter % K == 0 replaces every parameter by
     reduce(p, "mean") after a wait_for_everyone: the sum over the reducer's group, then divided by its size
     (ACCEL_COLL_AVG's order). Leaving averages once more when enabled (also right after a step's average). The
     counter counts step() calls, not optimizer steps: with gradient accumulation Accelerate's loop calls step()
     every micro-batch, so K counts micro-batches. "Parameters" are all of model.parameters(), frozen ones too (not
     buffers): pass them all. Disabled, the reducer keeps synchronising gradients as usual. End the LocalSGD before
     destroying its reducer. tests/mpi/ddp/test_ddp_local_sgd.c: a long-hand reference on 1-4 ranks.

   COLLECTIVE CALLS AND ERRORS
     Every rank of the communicator's group makes the same calls in the same order: accel_ddp_create,
     accel_ddp_finalize (or the first grad_ready/wait), accel_ddp_wait on a step that reduces, accel_ddp_join_begin
     and accel_ddp_join_end, accel_ddp_local_sgd_begin/_step/_end. A local failure of create or finalize (a bad
     argument, an allocation) fails every rank at once: that rank returns its error, the others ACCEL_ERR_REMOTE
     naming it.

   THREADS AND STREAMS
     A reducer is used by one thread at a time, the thread of its communicator. Device gradients are packed and
     unpacked on acc.stream; NCCL reductions are enqueued there and accel_ddp_wait returns once they are enqueued
     and (MPI) complete on the host.

   DIFFERENCES FROM ACCELERATE / PYTORCH
     - No autograd hooks: the trainer registers its gradient buffers and calls grad_ready as each becomes final (DDP's
       hooks do that); a gradient never marked ready counts as ready at wait.
     - Gradients are averaged as DDP averages them (AVERAGING ORDER); accel_coll_all_reduce with ACCEL_COLL_AVG keeps
       Accelerate's reduce("mean") order.
*/
#ifndef ACCEL_DDP_H_INCLUDED
#define ACCEL_DDP_H_INCLUDED
#include "accel.h"
#include "accel_collectives.h" /* the communicator a reducer runs on */
#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------- the reducer */
/* Accelerate's DDPCommunicationHookType (POWER_SGD / BATCHED_POWER_SGD are not provided). */
typedef enum accel_ddp_comm_hook {
    ACCEL_DDP_COMM_HOOK_NONE = 0,
    ACCEL_DDP_COMM_HOOK_FP16, /* gradients all-reduced as IEEE half */
    ACCEL_DDP_COMM_HOOK_BF16, /* gradients all-reduced as bfloat16 */
    ACCEL_DDP_COMM_HOOK_COUNT
} accel_ddp_comm_hook;
typedef struct accel_ddp_desc {
    double bucket_cap_mb;   /* 0 → 25 (DDP); MiB */
    double first_bucket_mb; /* 0 → 1 (DDP); MiB */
    int no_average;         /* nonzero: sum the gradients (default: DDP's average, see AVERAGING ORDER) */
    accel_toggle flat;      /* ACCEL_DEFAULT: one all-reduce in place when the grads are one contiguous buffer of one
                               dtype, else buckets; ACCEL_OFF: always bucket; ACCEL_ON: require contiguity (error
                               otherwise) */
    accel_ddp_comm_hook comm_hook;    /* DistributedDataParallelKwargs.comm_hook: NONE, or FP16/BF16 (torch's
                                         fp16/bf16_compress_hook; see COMMUNICATION HOOKS) */
    accel_ddp_comm_hook comm_wrapper; /* DistributedDataParallelKwargs.comm_wrapper: torch's fp16/bf16_compress_wrapper
                                         around comm_hook; ignored without a comm_hook (as in Accelerate) */
} accel_ddp_desc;
typedef struct accel_ddp accel_ddp;

ACCEL_API accel_result accel_ddp_create(accel_coll *c, const accel_ddp_desc *desc,
                                                 accel_ddp **out);
ACCEL_API void accel_ddp_destroy(accel_ddp *r);
/* Registers n gradients (floating dtypes, any shape: numel elements at ptr) before the first step. Their indices, for
   grad_ready, are the registration order across calls: the first call's tensors are 0..n-1, the next call's follow.
   All n are checked first: on an error none is registered. */
ACCEL_API accel_result accel_ddp_add(accel_ddp *r, const accel_tensor *grads, int n);
/* Builds the buckets and checks that every rank registered the same list (collective). Called by the first
   grad_ready/wait when not called explicitly. */
ACCEL_API accel_result accel_ddp_finalize(accel_ddp *r);
/* Grad i holds its final local value; a bucket whose grads are all ready is launched (in bucket order). */
ACCEL_API accel_result accel_ddp_grad_ready(accel_ddp *r, int index);
/* Launches what is left (grads never marked ready count as ready now), waits for every bucket and unpacks: the
   gradients then hold the sum of every rank's gradient times 1/P (DDP's average; the sum with no_average). No-op
   unless accel_should_reduce(acc): a sync step, or sync_each_batch with several processes (Accelerate skips DDP's
   no_sync then). */
ACCEL_API accel_result accel_ddp_wait(accel_ddp *r);
ACCEL_API int accel_ddp_num_buckets(const accel_ddp *r); /* -1 before finalize */
/* Accelerate's `with accelerator.trigger_sync_in_backward(model):` — between begin and end the reducer reduces on
   every grad_ready/wait, also on a step that accumulate (or an open LocalSGD, model.no_sync) would not sync. Only
   when acc->use_distributed (Accelerate does nothing otherwise). acc->sync_gradients is not changed. Nests (end
   restores what begin found). Local: nothing is communicated; every rank must use it on the same steps. */
ACCEL_API accel_result accel_ddp_trigger_sync_in_backward_begin(accel_ddp *r);
ACCEL_API accel_result accel_ddp_trigger_sync_in_backward_end(accel_ddp *r);
/* Bucket b's registration indices (in bucket order) → idx (capacity cap); returns the count (or -1). */
ACCEL_API int accel_ddp_bucket(const accel_ddp *r, int b, int *idx, int cap);
ACCEL_API int accel_ddp_is_flat(const accel_ddp *r);

/* ------------------------------------------------------------------------------ join (uneven inputs, DDP's Join) */
/* Accelerate's join_uneven_inputs over the reducer (torch's Join + DDP's join hook). Between join_begin and join_end a
   rank that has run out of batches calls join_end, which shadows the reductions of the ranks still training with
   zeros until every rank is in join_end. See JOIN in the manual for the exact gradients. */
typedef struct accel_ddp_join_desc {
    int no_divide_by_initial_world_size; /* nonzero: DDP's divide_by_initial_world_size=False (average over the ranks
                                            still training in that step); default: divide by the group size */
} accel_ddp_join_desc;
/* Collective over the reducer's group: finalizes the reducer (register every gradient first) and checks that every
   rank gave the same desc (NULL = defaults). */
ACCEL_API accel_result accel_ddp_join_begin(accel_ddp *r, const accel_ddp_join_desc *desc);
/* Collective: this rank is out of batches. Shadows the others' reductions with zeros until every rank has called it,
   then (n > 0) broadcasts params (n tensors in the context's memory, the same list on every rank) from the
   authoritative rank: the highest rank among the last to join (DDP's _sync_final_model). Leaves join mode. */
ACCEL_API accel_result accel_ddp_join_end(accel_ddp *r, const accel_tensor *params, int n);
/* Ranks that took part in the last reduction in join mode (the divisor with no_divide_by_initial_world_size);
   the group size outside join mode; -1 for NULL. */
ACCEL_API int accel_ddp_join_active(const accel_ddp *r);

/* ------------------------------------------------------------------------ LocalSGD (accelerate.local_sgd.LocalSGD) */
/* No gradient synchronisation while it is open; the parameters averaged every local_sgd_steps steps and at the end.
   See LOCAL SGD in the manual. */
typedef struct accel_ddp_local_sgd_desc {
    int local_sgd_steps;  /* K >= 1: average after every K-th accel_ddp_local_sgd_step */
    accel_toggle enabled; /* ACCEL_DEFAULT / ACCEL_ON: on when acc->distributed_type != NO; ACCEL_OFF: off */
} accel_ddp_local_sgd_desc;
typedef struct accel_ddp_local_sgd accel_ddp_local_sgd;
/* LocalSGD's __enter__ over the reducer r: params (n tensors, floating dtypes, in the reducer's memory: every
   parameter of the model, frozen ones too, the same list on every rank) are remembered; when enabled the reducer
   stops reducing (DDP's no_sync) until local_sgd_end. Local: nothing is communicated. */
ACCEL_API accel_result accel_ddp_local_sgd_begin(accel_ddp *r, const accel_tensor *params, int n,
                                                 const accel_ddp_local_sgd_desc *desc, accel_ddp_local_sgd **out);
/* LocalSGD.step(): counts the step; when enabled and the count is a multiple of K, averages the parameters
   (collective then). Call it where Accelerate's loop calls local_sgd.step(): after every micro-batch. */
ACCEL_API accel_result accel_ddp_local_sgd_step(accel_ddp_local_sgd *l);
/* LocalSGD's __exit__: averages the parameters once more when enabled (collective), gives the reducer its
   synchronisation back and frees l (also on an error). NULL: no-op. */
ACCEL_API accel_result accel_ddp_local_sgd_end(accel_ddp_local_sgd *l);
ACCEL_API int64_t accel_ddp_local_sgd_num_steps(const accel_ddp_local_sgd *l); /* steps counted; -1 for NULL */
ACCEL_API int accel_ddp_local_sgd_enabled(const accel_ddp_local_sgd *l);       /* resolved enabled flag */

#ifdef __cplusplus
}
#endif
#endif /* ACCEL_DDP_H_INCLUDED */

/* ========================================================================================== implementation */
#if defined(ACCEL_IMPLEMENTATION) && !defined(ACCEL__DDP_IMPL_DONE)
#define ACCEL__DDP_IMPL_DONE
#include "accel_collectives.h" /* its implementation first, when this TU included the header before */
/* CONTENTS (the core's private services come from accel.h's implementation section, the communicator's lent
   internals — struct accel_coll's fields, accel__coll_copy_same / _prescale_by / _fill / _alloc_mem / _host_op /
   _agree / _check_broken / _orphan / _null / _reducible — from accel_collectives.h's; both precede this one)
     1. the reducer: registration, DDP's buckets, pre-scaled packing, launch and finish
     2. join for uneven inputs (rounds, zero shadows, the final broadcast)
     3. LocalSGD (no_sync while open, parameter averaging)
   accel_zero.h (stage 1) uses the reducer through its public functions only. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------------- 1. the reducer */
typedef struct accel__ddp_grad {
    void *ptr;
    size_t count;
    accel_dtype dt;
    char name[64];
    int bucket;
    size_t offset; /* elements into the bucket's flat buffer */
    int ready;
    int direct;    /* reduced in place by its own request instead of being packed (large host tensors on MPI) */
    accel_coll_request *req;
} accel__ddp_grad;

typedef struct accel__ddp_bucket {
    accel_dtype dt;
    int first, n;  /* its grads are order[first .. first+n) */
    size_t count;
    void *flat;    /* staging buffer, or the grad/contiguous buffer itself when inplace */
    int inplace;
    int pending;   /* grads not ready yet */
    int launched;
    int inflight;  /* launched and not finished */
    accel_result err; /* a failure seen while polling (accel__ddp_poll): finish then unpacks nothing */
    accel_coll_request *req;
    uint16_t *comp;   /* with a comm hook: the bucket compressed to the hook's 16-bit dtype (context memory) */
} accel__ddp_bucket;

/* Communication hooks (torch's default_hooks.py). fp16_compress_hook is buffer.to(float16).div_(world_size), an
   all-reduce SUM in float16, then the sum copied back into the gradient's dtype; bf16 the same with bfloat16.
   A wrapper (fp16/bf16_compress_wrapper) first sets the bucket to its own dtype, runs the hook on it and copies
   the hook's result back into that dtype. Every step is one rounding to nearest even through float (torch's casts
   and CPU division; fp32's 24 bits make the float quotient's second rounding to 11 or 8 bits harmless). */
static accel_dtype accel__ddp_hook_dtype(accel_ddp_comm_hook h) {
    return h == ACCEL_DDP_COMM_HOOK_FP16   ? ACCEL_F16
           : h == ACCEL_DDP_COMM_HOOK_BF16 ? ACCEL_BF16
                                           : ACCEL_DTYPE_COUNT;
}
static ACCEL_INLINE ACCEL_HD float accel__ddp_round16(float x, int dt) { /* x rounded to dt (F16/BF16; else x) */
    return dt == (int)ACCEL_F16 ? accel_f16_to_f32(accel_f32_to_f16(x))
           : dt == (int)ACCEL_BF16 ? accel_bf16_to_f32(accel_f32_to_bf16(x))
                                   : x;
}
static ACCEL_INLINE ACCEL_HD float accel__ddp_load(const void *p, size_t i, int dt) {
    return dt == (int)ACCEL_F16 ? accel_f16_to_f32(((const uint16_t *)p)[i])
           : dt == (int)ACCEL_BF16 ? accel_bf16_to_f32(((const uint16_t *)p)[i])
                                   : ((const float *)p)[i];
}
/* element i of a gradient (F32/F16/BF16) → the wrapper's dtype (wdt) → the hook's (hdt), divided by p there */
static ACCEL_INLINE ACCEL_HD uint16_t accel__ddp_compress_elem(const void *src, size_t i, int sdt, int wdt, int hdt,
                                                               float p) {
    float x = accel__ddp_round16(accel__ddp_round16(accel__ddp_load(src, i, sdt), wdt), hdt) / p;
    return hdt == (int)ACCEL_BF16 ? accel_f32_to_bf16(x) : accel_f32_to_f16(x);
}
/* the reduced element back: hook dtype → the wrapper's → the gradient's */
static ACCEL_INLINE ACCEL_HD void accel__ddp_decompress_elem(void *dst, const uint16_t *src, size_t i, int ddt,
                                                             int wdt, int hdt) {
    float x = accel__ddp_round16(accel__ddp_load(src, i, hdt), wdt);
    if (ddt == (int)ACCEL_F32) ((float *)dst)[i] = x;
    else ((uint16_t *)dst)[i] = ddt == (int)ACCEL_BF16 ? accel_f32_to_bf16(x) : accel_f32_to_f16(x);
}
/* element i in one direction: compress (gradient → comp) or decompress (comp → gradient) */
static ACCEL_INLINE ACCEL_HD void accel__ddp_hook_elem(void *grad, uint16_t *comp, size_t i, int gdt, int wdt, int hdt,
                                                       float p, int compress) {
    if (compress) comp[i] = accel__ddp_compress_elem(grad, i, gdt, wdt, hdt, p);
    else accel__ddp_decompress_elem(grad, comp, i, gdt, wdt, hdt);
}
/* The host loops of the hooks: one pass per gradient that loads, casts, divides and casts again (compress), or loads
   and casts back (decompress) — the scalar elements above, or 8 lanes at a time with AVX2 + F16C (x86 GCC/clang,
   chosen at run time by the core's accel__cpu_has, as accel_amp.h's, accel_optim.h's and the 16-bit all-reduce's
   loops; ACCEL_DDP_NO_DISPATCH: only an AVX2+F16C build uses them; not in an nvcc-compiled TU, whose host passes
   stay scalar). The lanes give the scalar bits: every step is an IEEE operation rounded to nearest even (the core's
   8-lane codec, divps), and the division is the scalar's division (the loop is memory-bound: a multiplication by
   fl(1/p) would save nothing). tests/unit/ddp/test_ddp_vec.c checks every fp32 input. */
#if defined(ACCEL__X86) && defined(__x86_64__) && \
    ((defined(__AVX2__) && defined(__F16C__)) || !defined(ACCEL_DDP_NO_DISPATCH))
#define ACCEL__DDP_AVX2 1
#define ACCEL__DDP_TARGET ACCEL__TARGET_F16C
/* 8 floats ↔ 8 halves or bfloat16s: the core's 8-lane codec (NaN → 0x7FFF; widening exact) */
ACCEL__DDP_TARGET static ACCEL_INLINE __m128i accel__ddp_v_pack(__m256 x, int dt) {
    return dt == (int)ACCEL_BF16 ? accel__v8_f32_to_bf16(x) : accel__v8_f32_to_f16(x);
}
ACCEL__DDP_TARGET static ACCEL_INLINE __m256 accel__ddp_v_unpack(__m128i h, int dt) {
    return dt == (int)ACCEL_BF16 ? accel__v8_bf16_to_f32(h) : accel__v8_f16_to_f32(h);
}
/* accel__ddp_round16 on 8 lanes */
ACCEL__DDP_TARGET static ACCEL_INLINE __m256 accel__ddp_v_round(__m256 x, int dt) {
    return dt == (int)ACCEL_F16 || dt == (int)ACCEL_BF16 ? accel__ddp_v_unpack(accel__ddp_v_pack(x, dt), dt) : x;
}
ACCEL__DDP_TARGET static ACCEL_INLINE __m256 accel__ddp_v_load(const void *p, size_t i, int dt) {
    if (dt == (int)ACCEL_F32) return _mm256_loadu_ps((const float *)p + i);
    return accel__ddp_v_unpack(_mm_loadu_si128((const __m128i *)(const void *)((const uint16_t *)p + i)), dt);
}
/* n elements of one gradient: compress (grad → comp) or decompress (comp → grad); the scalar tail */
ACCEL__DDP_TARGET static void accel__ddp_hook_host_avx2(void *grad, uint16_t *comp, size_t n, int gdt, int wdt,
                                                        int hdt, float p, int compress) {
    const __m256 vp = _mm256_set1_ps(p);
    size_t i = 0;
    if (compress) {
        for (; i + 8 <= n; i += 8) {
            __m256 x = accel__ddp_v_round(accel__ddp_v_round(accel__ddp_v_load(grad, i, gdt), wdt), hdt);
            _mm_storeu_si128((__m128i *)(void *)(comp + i), accel__ddp_v_pack(_mm256_div_ps(x, vp), hdt));
        }
    } else {
        for (; i + 8 <= n; i += 8) {
            __m256 x = accel__ddp_v_round(accel__ddp_v_load(comp, i, hdt), wdt);
            if (gdt == (int)ACCEL_F32) _mm256_storeu_ps((float *)grad + i, x);
            else _mm_storeu_si128((__m128i *)(void *)((uint16_t *)grad + i), accel__ddp_v_pack(x, gdt));
        }
    }
    for (; i < n; ++i) accel__ddp_hook_elem(grad, comp, i, gdt, wdt, hdt, p, compress);
}
#endif
/* the host pass over n elements: the AVX2 loop when the CPU has it, else the scalar elements */
static void accel__ddp_hook_host(void *grad, uint16_t *comp, size_t n, int gdt, int wdt, int hdt, float p,
                                 int compress) {
    size_t i;
#ifdef ACCEL__DDP_AVX2
    if (accel__cpu_has(ACCEL__CPU_AVX2 | ACCEL__CPU_F16C)) {
        accel__ddp_hook_host_avx2(grad, comp, n, gdt, wdt, hdt, p, compress);
        return;
    }
#endif
    for (i = 0; i < n; ++i) accel__ddp_hook_elem(grad, comp, i, gdt, wdt, hdt, p, compress);
}
#ifdef ACCEL__COLL_DEVICE
static __global__ void accel__ddp_hook_kernel(void *grad, uint16_t *comp, size_t n, int gdt, int wdt, int hdt, float p,
                                              int compress) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (size_t)gridDim.x * blockDim.x;
    for (; i < n; i += stride) accel__ddp_hook_elem(grad, comp, i, gdt, wdt, hdt, p, compress);
}
#endif

/* Host gradients at least this large are all-reduced in place on their own (still in bucket order) instead of being
   copied into the bucket's staging buffer and back: on the CPU the two copies cost more than the extra message
   (GPT-2 list: 0.5x of per-tensor all-reduces with packing). Device gradients are always packed (D2D copies are
   cheap; fewer NCCL launches matter). */
#define ACCEL__DDP_DIRECT_BYTES ((size_t)1 << 20)

struct accel_ddp {
    accel_coll *c;
    accel_ddp_desc d;
    accel__ddp_grad *grads; /* stb_ds array, registration order (the index of grad_ready) */
    int *order;
    accel__ddp_bucket *buckets;
    int nb;
    int finalized;
    int next_launch;
    int flat;
    int prescale; /* averaging over > 1 process: each gradient is multiplied by 1/P before the sum (DDP) */
    accel_dtype hook_dt, wrap_dt; /* comm hook: the dtype on the wire and the wrapper's (ACCEL_DTYPE_COUNT: none) */
    int hook;
    /* join (uneven inputs; section 2) */
    double div; /* the pre-scaling divisor: P, or in join mode with no_divide_by_initial_world_size the ranks active */
    int join, join_by_active, round_open, active;
    int no_sync; /* an enabled LocalSGD is open: nothing is reduced */
    int force_sync; /* trigger_sync_in_backward depth: reduce whatever the step */
    void *join_zero; /* a zero buffer as large as the largest all-reduce of a step (context memory) */
    size_t join_zero_bytes;
};
static accel_result accel__ddp_join_round(accel_ddp *r, int active, int *n_active);

static int accel__ddp_ngrads(const accel_ddp *r) { return (int)stbds_arrlen(r->grads); }

/* a gradient into its bucket's compressed copy (compress) or the reduced copy back into the gradient: a host loop or
   a kernel on acc.stream */
static accel_result accel__ddp_hook_convert(accel_ddp *r, int compress, void *grad, uint16_t *comp, size_t n,
                                            accel_dtype gdt) {
    float p = (float)r->c->size; /* torch divides by the group's size, also while joining */
    if (n == 0) return ACCEL_OK;
    if (!r->c->device_mem) {
        accel__ddp_hook_host(grad, comp, n, (int)gdt, (int)r->wrap_dt, (int)r->hook_dt, p, compress);
        return ACCEL_OK;
    }
#ifdef ACCEL__COLL_DEVICE
    accel__ddp_hook_kernel<<<accel__coll_blocks(n), 256, 0, accel__coll_stream(r->c)>>>(
        grad, comp, n, (int)gdt, (int)r->wrap_dt, (int)r->hook_dt, p, compress);
    ACCEL__CUDA_CHECK(r->c->acc, cudaGetLastError());
    return ACCEL_OK;
#else
    return ACCEL__FAIL(r->c->acc, ACCEL_ERR_UNSUPPORTED,
                       "device gradients need the ACCEL_IMPLEMENTATION TU compiled with nvcc");
#endif
}

ACCEL__DEF accel_result accel_ddp_create(accel_coll *c, const accel_ddp_desc *desc, accel_ddp **out) {
    accel_ddp *r;
    accel_ddp_desc d;
    if (!c) return accel__coll_null();
    if (!out) return ACCEL__FAIL(c->acc, ACCEL_ERR_INVALID_ARGUMENT, "reducer_create: out is NULL");
    *out = NULL;
    if (desc) d = *desc;
    else memset(&d, 0, sizeof d);
    if (!(d.bucket_cap_mb >= 0) || !(d.first_bucket_mb >= 0))
        return ACCEL__FAIL(c->acc, ACCEL_ERR_INVALID_ARGUMENT, "reducer: bucket sizes must be >= 0 (0 = default)");
    if ((int)d.flat < (int)ACCEL_OFF || (int)d.flat > (int)ACCEL_ON)
        return ACCEL__FAIL(c->acc, ACCEL_ERR_INVALID_ARGUMENT, "reducer: flat=%d is not an accel_toggle", (int)d.flat);
    if ((int)d.comm_hook < 0 || (int)d.comm_hook >= (int)ACCEL_DDP_COMM_HOOK_COUNT || (int)d.comm_wrapper < 0 ||
        (int)d.comm_wrapper >= (int)ACCEL_DDP_COMM_HOOK_COUNT)
        return ACCEL__FAIL(c->acc, ACCEL_ERR_INVALID_ARGUMENT, "reducer: comm_hook=%d / comm_wrapper=%d is not an "
                           "accel_ddp_comm_hook", (int)d.comm_hook, (int)d.comm_wrapper);
    if (d.comm_hook != ACCEL_DDP_COMM_HOOK_NONE && d.no_average)
        return ACCEL__FAIL(c->acc, ACCEL_ERR_INVALID_ARGUMENT, "reducer: a comm_hook divides by the world size "
                           "(torch's compress hooks); it cannot be combined with no_average");
    if (d.comm_hook == ACCEL_DDP_COMM_HOOK_NONE && d.comm_wrapper != ACCEL_DDP_COMM_HOOK_NONE) {
        accel_log(c->acc, ACCEL_LOG_WARN, "reducer: comm_wrapper without a comm_hook is ignored (as in Accelerate)");
        d.comm_wrapper = ACCEL_DDP_COMM_HOOK_NONE;
    }
    if (d.bucket_cap_mb == 0) d.bucket_cap_mb = 25.0;
    if (d.first_bucket_mb == 0) d.first_bucket_mb = 1.0;
    r = (accel_ddp *)accel_host_alloc(c->acc, sizeof *r);
    if (!r) return ACCEL_ERR_OUT_OF_MEMORY;
    memset(r, 0, sizeof *r);
    r->c = c;
    r->d = d;
    r->hook = d.comm_hook != ACCEL_DDP_COMM_HOOK_NONE;
    r->hook_dt = accel__ddp_hook_dtype(d.comm_hook);
    r->wrap_dt = accel__ddp_hook_dtype(d.comm_wrapper);
    r->prescale = !d.no_average && c->size > 1 && !r->hook;
    r->div = (double)c->size;
    r->active = c->size;
    *out = r;
    return ACCEL_OK;
}

static void accel__ddp_drop_buckets(accel_ddp *r) {
    int b, i;
    for (i = 0; i < accel__ddp_ngrads(r); ++i)
        if (r->grads[i].req) { accel__coll_orphan(r->grads[i].req); r->grads[i].req = NULL; }
    for (b = 0; b < r->nb; ++b) {
        if (r->buckets[b].req) { accel__coll_orphan(r->buckets[b].req); r->buckets[b].req = NULL; }
        if (!r->buckets[b].inplace) accel_coll_free(r->c, r->buckets[b].flat);
        accel_coll_free(r->c, r->buckets[b].comp);
    }
    accel_host_free(r->c->acc, r->buckets);
    accel_host_free(r->c->acc, r->order);
    r->buckets = NULL;
    r->order = NULL;
    r->nb = 0;
}

ACCEL__DEF void accel_ddp_destroy(accel_ddp *r) {
    if (!r) return;
    accel__ddp_drop_buckets(r);
    accel_coll_free(r->c, r->join_zero);
    stbds_arrfree(r->grads);
    accel_host_free(r->c->acc, r);
}

/* stb_ds would write through a failed allocation: grow with the core's checked reserve first. */
static accel_result accel__ddp_grads_reserve(accel_ddp *r, size_t n) {
    size_t have = (size_t)stbds_arrlen(r->grads);
    if (n <= have) return ACCEL_OK;
    if (accel__arr_reserve((void **)&r->grads, sizeof *r->grads, n - have) != 0)
        return ACCEL__FAIL(r->c->acc, ACCEL_ERR_OUT_OF_MEMORY, "reducer_add: no memory for %zu gradient entries", n);
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_ddp_add(accel_ddp *r, const accel_tensor *grads, int n) {
    accel *acc;
    accel_result res;
    int i, first;
    if (!r) return accel__coll_null();
    acc = r->c->acc;
    first = accel__ddp_ngrads(r);
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
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                               "reducer_add: tensor %d ('%s'): gradients must be "
                               "F64/F32/F16/BF16, not %s",
                               i, nm, accel_dtype_name(t->dtype) ? accel_dtype_name(t->dtype) : "invalid");
        if (numel < 0)
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                               "reducer_add: tensor %d ('%s') has an invalid shape (ndim %d)", i, nm, t->ndim);
        if (numel > 0 && !t->ptr)
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "reducer_add: tensor %d ('%s') has no data pointer", i,
                               nm);
        if (numel > (int64_t)INT_MAX)
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                               "reducer_add: tensor %d ('%s') has more than INT_MAX elements", i, nm);
        if (r->hook && t->dtype != ACCEL_F32 && t->dtype != ACCEL_F16 && t->dtype != ACCEL_BF16)
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                               "reducer_add: tensor %d ('%s') is %s: a comm_hook takes F32/F16/BF16 gradients (torch "
                               "casts F64 through float, a second rounding)", i, nm, accel_dtype_name(t->dtype));
    }
    res = accel__ddp_grads_reserve(r, (size_t)first + (size_t)n);
    if (res != ACCEL_OK) return res;
    for (i = 0; i < n; ++i) {
        accel__ddp_grad g;
        memset(&g, 0, sizeof g);
        g.ptr = grads[i].ptr;
        g.count = (size_t)accel_tensor_numel(&grads[i]);
        g.dt = grads[i].dtype;
        accel__fmt(g.name, sizeof g.name, "%s", grads[i].name ? grads[i].name : "");
        stbds_arrput(r->grads, g); /* within the reserved capacity: no allocation */
    }
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_ddp_finalize(accel_ddp *r) {
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
    direct_ok = !c->device_mem && c->backend == ACCEL_COLL_BACKEND_MPI && !r->hook;
    for (i = 0; i < accel__ddp_ngrads(r); ++i) {
        const accel__ddp_grad *g = &r->grads[i];
        total += g->count;
        h = (h ^ (uint64_t)g->count) * 1099511628211ull;
        h = (h ^ (uint64_t)g->dt) * 1099511628211ull;
        if (g->dt != r->grads[0].dt) flat_ok = 0;
        if (i > 0 &&
            (const unsigned char *)r->grads[i - 1].ptr + r->grads[i - 1].count * accel_dtype_size(r->grads[i - 1].dt) !=
                (const unsigned char *)g->ptr)
            flat_ok = 0;
    }
    if (accel__ddp_ngrads(r) == 0 || total > (size_t)INT_MAX || r->d.flat == ACCEL_OFF) flat_ok = 0;
    if (r->d.flat == ACCEL_ON && !flat_ok)
        res = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                          "reducer: flat mode requested but the %d gradients are not one "
                          "contiguous buffer of one dtype (in registration order)",
                          accel__ddp_ngrads(r));
    res = accel__coll_agree(c, res, "reducer finalize");
    if (res != ACCEL_OK) return res;
    /* every rank must build the same buckets; flat only when every rank can */
    mine[0] = accel__ddp_ngrads(r);
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
                off += (size_t)snprintf(
                    msg + off, sizeof msg - off, " rank %d: %lld tensors, %lld elements, layout hash %llx;", k,
                    (long long)all[4 * k], (long long)all[4 * k + 1], (unsigned long long)all[4 * k + 2]);
            accel_host_free(acc, all);
            return ACCEL__FAIL(acc, ACCEL_ERR_MISMATCH, "%s", msg);
        }
        if (!all[4 * i + 3]) flat_ok = 0;
    }
    accel_host_free(acc, all);
    r->flat = flat_ok;
    if (accel__ddp_ngrads(r) == 0) { r->finalized = 1; return ACCEL_OK; }

    r->order = (int *)accel_host_alloc(acc, sizeof(int) * (size_t)accel__ddp_ngrads(r));
    r->buckets = (accel__ddp_bucket *)accel_host_alloc(acc, sizeof(accel__ddp_bucket) * (size_t)accel__ddp_ngrads(r));
    counts = (int *)accel_host_alloc(acc, sizeof(int) * (size_t)accel__ddp_ngrads(r));
    fill = (int *)accel_host_alloc(acc, sizeof(int) * (size_t)accel__ddp_ngrads(r));
    if (!r->order || !r->buckets || !counts || !fill) res = ACCEL_ERR_OUT_OF_MEMORY;
    else memset(r->buckets, 0, sizeof(accel__ddp_bucket) * (size_t)accel__ddp_ngrads(r));
    if (res != ACCEL_OK) {
        /* nothing to build */
    } else if (flat_ok) {
        nb = 1;
        r->buckets[0].dt = r->grads[0].dt;
        r->buckets[0].first = 0;
        r->buckets[0].n = accel__ddp_ngrads(r);
        r->buckets[0].count = total;
        r->buckets[0].flat = r->grads[0].ptr;
        r->buckets[0].inplace = 1;
        for (i = 0; i < accel__ddp_ngrads(r); ++i) {
            r->order[i] = i;
            r->grads[i].bucket = 0;
            r->grads[i].offset = i == 0 ? 0 : r->grads[i - 1].offset + r->grads[i - 1].count; /* a hook packs */
        }
    } else {
        /* DDP's assignment: reverse registration order, one open bucket per dtype, closed once it reaches its cap
           (the first bucket of each dtype is capped at first_bucket_mb) */
        for (i = 0; i < ACCEL_DTYPE_COUNT; ++i) { open[i] = -1; used_first[i] = 0; bytes[i] = 0; }
        for (i = accel__ddp_ngrads(r) - 1; i >= 0; --i) {
            accel__ddp_grad *g = &r->grads[i];
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
            g->direct = direct_ok && g->count * accel_dtype_size(g->dt) >= ACCEL__DDP_DIRECT_BYTES;
            g->offset = g->direct ? 0 : r->buckets[b].count;
            if (!g->direct) r->buckets[b].count += g->count;
            counts[b]++;
            bytes[dt] += g->count * accel_dtype_size(g->dt);
            if ((double)bytes[dt] >= cap || r->buckets[b].count > (size_t)INT_MAX / 2) {
                open[dt] = -1;
                used_first[dt] = 1;
            }
        }
        for (b = 0, i = 0; b < nb; ++b) {
            r->buckets[b].first = i;
            r->buckets[b].n = counts[b];
            fill[b] = 0;
            i += counts[b];
        }
        for (i = accel__ddp_ngrads(r) - 1; i >= 0; --i) {
            b = r->grads[i].bucket;
            r->order[r->buckets[b].first + fill[b]++] = i;
        }
        for (b = 0; b < nb; ++b) {
            accel__ddp_bucket *k = &r->buckets[b];
            if (k->n == 1) {
                accel__ddp_grad *g = &r->grads[r->order[k->first]];
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
    for (b = 0; b < nb && res == ACCEL_OK && r->hook; ++b) { /* the compressed copy each bucket goes out as */
        r->buckets[b].comp = (uint16_t *)accel__coll_alloc_mem(c, r->buckets[b].count * 2);
        if (!r->buckets[b].comp && r->buckets[b].count > 0) res = ACCEL_ERR_OUT_OF_MEMORY;
    }
    accel_host_free(acc, counts);
    accel_host_free(acc, fill);
    r->nb = nb;
    /* a rank that could not build its buckets fails every rank (the others would wait in the first all-reduce) */
    res = accel__coll_agree(c, res, "reducer finalize (buckets)");
    if (res != ACCEL_OK) {
        accel__ddp_drop_buckets(r);
        return res;
    }
    for (b = 0; b < nb; ++b) r->buckets[b].pending = r->buckets[b].n;
    r->next_launch = 0;
    r->finalized = 1;
    accel_log(acc, ACCEL_LOG_DEBUG, "reducer: %d gradients in %d bucket(s)%s", accel__ddp_ngrads(r), nb,
              flat_ok ? " (flat)" : "");
    return ACCEL_OK;
}

ACCEL__DEF int accel_ddp_num_buckets(const accel_ddp *r) { return r && r->finalized ? r->nb : -1; }
ACCEL__DEF int accel_ddp_is_flat(const accel_ddp *r) { return r && r->finalized ? r->flat : 0; }
ACCEL__DEF int accel_ddp_bucket(const accel_ddp *r, int b, int *idx, int cap) {
    int i;
    if (!r || !r->finalized || b < 0 || b >= r->nb) return -1;
    for (i = 0; i < r->buckets[b].n && i < cap; ++i)
        if (idx) idx[i] = r->order[r->buckets[b].first + i];
    return r->buckets[b].n;
}

/* Waits for bucket b's all-reduces and unpacks the packed gradients. */
static accel_result accel__ddp_bucket_finish(accel_ddp *r, int b) {
    accel__ddp_bucket *k = &r->buckets[b];
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
        accel__ddp_grad *g = &r->grads[r->order[k->first + i]];
        size_t es = accel_dtype_size(g->dt);
        if (g->req) {
            res = accel_coll_wait(g->req);
            g->req = NULL;
        } else if (first == ACCEL_OK && r->hook) {
            res = accel__ddp_hook_convert(r, 0, g->ptr, k->comp + g->offset, g->count, g->dt);
        } else if (first == ACCEL_OK && !k->inplace && !g->direct) {
            res = accel__coll_copy_same(r->c, g->ptr, (unsigned char *)k->flat + g->offset * es, g->count * es,
                                        r->c->device_mem);
        }
        if (res != ACCEL_OK && first == ACCEL_OK) first = res;
    }
    return first;
}

/* MPI on the host has no separate engine: many large nonblocking collectives in flight at once progress worse than
   a couple (measured with the GPT-2 list), so at most this many buckets are outstanding; NCCL queues on a stream. */
#define ACCEL__DDP_MPI_INFLIGHT 2

/* Packs bucket b (pre-scaled while packing when averaging) and launches its all-reduce(s) with SUM: DDP's order, every
   rank's gradient times fl(1/P), then the sum. Gradients reduced where they are (a bucket of one, flat mode, direct
   host gradients) are pre-scaled in place first. */
static accel_result accel__ddp_bucket_launch(accel_ddp *r, int b) {
    accel__ddp_bucket *k = &r->buckets[b];
    accel_coll *c = r->c;
    size_t es = accel_dtype_size(k->dt);
    accel_result res;
    int i;
    k->launched = 1;
    k->inflight = 1;
    if (r->hook) { /* torch's compress hook: every gradient cast and divided into the 16-bit copy, which is summed */
        for (i = 0; i < k->n; ++i) {
            accel__ddp_grad *g = &r->grads[r->order[k->first + i]];
            res = accel__ddp_hook_convert(r, 1, g->ptr, k->comp + g->offset, g->count, g->dt);
            if (res != ACCEL_OK) return res;
        }
        return k->count > 0 ? accel_coll_all_reduce_async(c, k->comp, k->comp, k->count, r->hook_dt, ACCEL_COLL_SUM,
                                                          &k->req)
                            : ACCEL_OK;
    }
    for (i = 0; i < k->n && !k->inplace; ++i) {
        accel__ddp_grad *g = &r->grads[r->order[k->first + i]];
        void *slot = (unsigned char *)k->flat + g->offset * es;
        if (g->direct) {
            res = r->prescale ? accel__coll_prescale_by(c, g->ptr, g->ptr, g->count, g->dt, r->div) : ACCEL_OK;
            if (res == ACCEL_OK)
                res = accel_coll_all_reduce_async(c, g->ptr, g->ptr, g->count, g->dt, ACCEL_COLL_SUM, &g->req);
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
    if (k->inplace || k->count > 0)
        return accel_coll_all_reduce_async(c, k->flat, k->flat, k->count, k->dt, ACCEL_COLL_SUM, &k->req);
    return ACCEL_OK;
}

/* MPI progresses a nonblocking operation only inside MPI calls (Open MPI's shared-memory rendezvous, libnbc, our
   2-rank ring all post their next step from a test). Without this, a bucket launched early in backward would sit
   until the next launch or reducer_wait, and "overlap" would be a queue. Each grad_ready therefore tests every
   in-flight bucket once (one MPI_Test per request, no waiting) and finishes (unpacks) the ones that are done. */
static accel_result accel__ddp_poll(accel_ddp *r) {
    int b, i;
    if (r->c->backend != ACCEL_COLL_BACKEND_MPI) return ACCEL_OK; /* NCCL runs on its stream by itself */
    for (b = 0; b < r->next_launch; ++b) {
        accel__ddp_bucket *k = &r->buckets[b];
        int busy = 0, done;
        accel_result res;
        if (!k->inflight) continue;
        for (i = 0; i < k->n; ++i) {
            accel__ddp_grad *g = &r->grads[r->order[k->first + i]];
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
            res = accel__ddp_bucket_finish(r, b); /* nothing left to wait for: unpacks */
            if (res != ACCEL_OK) return res;
        }
    }
    return ACCEL_OK;
}

/* Launches the ready buckets in bucket order. On MPI at most ACCEL__DDP_MPI_INFLIGHT are in flight: from grad_ready
   (may_block 0) a ready bucket beyond that waits for a later grad_ready's poll to free a slot, because blocking there
   on the oldest bucket means waiting for a peer that is still computing (its MPI only moves when it calls in), which
   measured slower than reducing after backward; from reducer_wait (may_block 1) the oldest is finished first. */
static accel_result accel__ddp_launch_ready(accel_ddp *r, int may_block) {
    while (r->next_launch < r->nb && r->buckets[r->next_launch].pending == 0) {
        accel_result res;
        if (r->c->backend == ACCEL_COLL_BACKEND_MPI) {
            int i, outstanding = 0, oldest = -1;
            for (i = 0; i < r->next_launch; ++i)
                if (r->buckets[i].inflight) { if (oldest < 0) oldest = i; ++outstanding; }
            if (outstanding >= ACCEL__DDP_MPI_INFLIGHT) {
                if (!may_block) return ACCEL_OK;
                res = accel__ddp_bucket_finish(r, oldest);
                if (res != ACCEL_OK) return res;
            }
        }
        res = accel__ddp_bucket_launch(r, r->next_launch);
        r->next_launch++;
        if (res != ACCEL_OK) return res;
    }
    return ACCEL_OK;
}

static void accel__ddp_reset(accel_ddp *r) {
    int b, i;
    for (i = 0; i < accel__ddp_ngrads(r); ++i) r->grads[i].ready = 0;
    for (b = 0; b < r->nb; ++b) {
        r->buckets[b].pending = r->buckets[b].n;
        r->buckets[b].launched = 0;
        r->buckets[b].inflight = 0;
        r->buckets[b].err = ACCEL_OK;
    }
    r->next_launch = 0;
    r->round_open = 0;
}

/* DDP's require_backward_grad_sync: a sync step outside no_sync, or forced by trigger_sync_in_backward */
static int accel__ddp_reduces(const accel_ddp *r) {
    return (accel_should_reduce(r->c->acc) && !r->no_sync) || (r->force_sync > 0 && r->c->acc->use_distributed);
}

ACCEL__DEF accel_result accel_ddp_trigger_sync_in_backward_begin(accel_ddp *r) {
    if (!r) return accel__coll_null();
    if (r->force_sync >= 1 << 20)
        return ACCEL__FAIL(r->c->acc, ACCEL_ERR_STATE, "trigger_sync_in_backward_begin: nested too deep (an end is "
                           "missing)");
    r->force_sync++;
    return ACCEL_OK;
}
ACCEL__DEF accel_result accel_ddp_trigger_sync_in_backward_end(accel_ddp *r) {
    if (!r) return accel__coll_null();
    if (r->force_sync <= 0)
        return ACCEL__FAIL(r->c->acc, ACCEL_ERR_STATE, "trigger_sync_in_backward_end without a begin");
    r->force_sync--;
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_ddp_grad_ready(accel_ddp *r, int index) {
    accel_result res;
    accel__ddp_grad *g;
    if (!r) return accel__coll_null();
    if (index < 0 || index >= accel__ddp_ngrads(r))
        return ACCEL__FAIL(r->c->acc, ACCEL_ERR_INVALID_ARGUMENT,
                           "grad_ready: index %d is not a registered gradient (0..%d)", index,
                           accel__ddp_ngrads(r) - 1);
    if (!accel__ddp_reduces(r)) return ACCEL_OK; /* accumulation step / no_sync */
    res = accel_ddp_finalize(r);
    if (res != ACCEL_OK) return res;
    if (r->join && !r->round_open) { /* join: the step's first reduction counts the ranks still training */
        res = accel__ddp_join_round(r, 1, NULL);
        if (res != ACCEL_OK) return res;
    }
    g = &r->grads[index];
    if (g->ready)
        return ACCEL__FAIL(r->c->acc, ACCEL_ERR_STATE,
                           "grad_ready: gradient %d ('%s') was already marked ready in this step", index, g->name);
    g->ready = 1;
    r->buckets[g->bucket].pending--;
    res = accel__ddp_poll(r);
    return res != ACCEL_OK ? res : accel__ddp_launch_ready(r, 0);
}

ACCEL__DEF accel_result accel_ddp_wait(accel_ddp *r) {
    accel_result res, first = ACCEL_OK;
    int b;
    if (!r) return accel__coll_null();
    if (!accel__ddp_reduces(r)) {
        if (r->finalized) accel__ddp_reset(r);
        return ACCEL_OK;
    }
    res = accel_ddp_finalize(r);
    if (res != ACCEL_OK) return res;
    if (r->join && !r->round_open) {
        res = accel__ddp_join_round(r, 1, NULL);
        if (res != ACCEL_OK) return res;
    }
    /* grads never marked ready are taken as ready now (a trainer may call only wait: no overlap) */
    for (b = 0; b < r->nb; ++b) r->buckets[b].pending = 0;
    res = accel__ddp_launch_ready(r, 1);
    if (res != ACCEL_OK) first = res;
    for (b = 0; b < r->nb; ++b) {
        res = accel__ddp_bucket_finish(r, b);
        if (res != ACCEL_OK && first == ACCEL_OK) first = res;
    }
    accel__ddp_reset(r);
    return first;
}

/* ---------------------------------------------------------------------------------- 2. join for uneven inputs */
/* Join: one round per reduction. Every rank of the reducer's group all-gathers one word: ACCEL__DDP_JOIN_MAGIC | 1
   from a rank that reduces (its first grad_ready/wait of a sync step), | 0 from a rank in join_end. Zero ranks
   active ends the join everywhere; otherwise the ranks in join_end issue the same all-reduces as a reducing rank
   (accel__ddp_join_shadow: same order, counts and dtypes) with zeros. A word without the magic is a rank in some
   other collective: ACCEL_ERR_MISMATCH. A dead rank: the round's deadline (ACCEL_ERR_TIMEOUT). */
#define ACCEL__DDP_JOIN_MAGIC ((int64_t)0x4a4f494e0000LL) /* "JOIN" */

static accel_result accel__ddp_join_round(accel_ddp *r, int active, int *n_active) {
    accel_coll *c = r->c;
    int64_t mine = ACCEL__DDP_JOIN_MAGIC | (active ? 1 : 0), stack_all[64], *all;
    accel_result res;
    int i, n = 0, bad = -1;
    all = c->size <= 64 ? stack_all : (int64_t *)accel_host_alloc(c->acc, sizeof(int64_t) * (size_t)c->size);
    if (!all) return ACCEL_ERR_OUT_OF_MEMORY; /* the peers then reach their deadline */
    res = accel__coll_host_op(c, ACCEL__K_ALLGATHER, &mine, all, sizeof mine, 0, NULL);
    for (i = 0; res == ACCEL_OK && i < c->size; ++i) {
        if ((all[i] & ~(int64_t)1) != ACCEL__DDP_JOIN_MAGIC) { if (bad < 0) bad = i; }
        else n += (int)(all[i] & 1);
    }
    if (all != stack_all) accel_host_free(c->acc, all);
    if (res != ACCEL_OK) return accel__fail_wrap(c->acc, res, "join (counting the ranks still training)");
    if (bad >= 0)
        return ACCEL__FAIL(c->acc, ACCEL_ERR_MISMATCH, "join: rank %d of the reducer's group is in another collective "
                           "(every rank must reduce or be in accel_ddp_join_end)", bad);
    r->active = n;
    r->div = r->join_by_active && n > 0 ? (double)n : (double)c->size;
    r->round_open = active;
    if (n_active) *n_active = n;
    return ACCEL_OK;
}

/* The all-reduces one reducing step issues (accel__ddp_bucket_launch), in its order, with zeros. */
static accel_result accel__ddp_join_shadow(accel_ddp *r) {
    accel_coll *c = r->c;
    accel_result res = ACCEL_OK;
    int b, i;
    for (b = 0; b < r->nb && res == ACCEL_OK; ++b) {
        const accel__ddp_bucket *k = &r->buckets[b];
        if (r->hook) { /* one all-reduce of the compressed bucket */
            if (k->count == 0) continue;
            res = accel__coll_fill(c, r->join_zero, k->count, r->hook_dt, 0.0);
            if (res == ACCEL_OK)
                res = accel_coll_all_reduce(c, r->join_zero, r->join_zero, k->count, r->hook_dt, ACCEL_COLL_SUM);
            continue;
        }
        for (i = 0; i < k->n && !k->inplace && res == ACCEL_OK; ++i) {
            const accel__ddp_grad *g = &r->grads[r->order[k->first + i]];
            if (!g->direct) continue;
            res = accel__coll_fill(c, r->join_zero, g->count, g->dt, 0.0);
            if (res == ACCEL_OK)
                res = accel_coll_all_reduce(c, r->join_zero, r->join_zero, g->count, g->dt, ACCEL_COLL_SUM);
        }
        if (res == ACCEL_OK && (k->inplace || k->count > 0)) {
            res = accel__coll_fill(c, r->join_zero, k->count, k->dt, 0.0);
            if (res == ACCEL_OK)
                res = accel_coll_all_reduce(c, r->join_zero, r->join_zero, k->count, k->dt, ACCEL_COLL_SUM);
        }
    }
    return res;
}

/* statuses (and one more value) of every rank of the reducer's group; the first failure fails every rank */
static accel_result accel__ddp_join_agree(accel_ddp *r, accel_result local, int64_t value, int64_t *values,
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

ACCEL__DEF accel_result accel_ddp_join_begin(accel_ddp *r, const accel_ddp_join_desc *desc) {
    accel_coll *c;
    accel_result res, local = ACCEL_OK;
    int64_t stack_v[64], *v;
    size_t most = 0, es;
    int i, b, by_active = desc && desc->no_divide_by_initial_world_size ? 1 : 0;
    if (!r) return accel__coll_null();
    c = r->c;
    res = accel_ddp_finalize(r); /* collective; fails every rank itself */
    if (res != ACCEL_OK) return res;
    if (r->join) local = ACCEL__FAIL(c->acc, ACCEL_ERR_STATE, "join_begin: the reducer is already in join mode (call "
                                     "accel_ddp_join_end first)");
    for (b = 0; local == ACCEL_OK && b < r->nb; ++b) {
        const accel__ddp_bucket *k = &r->buckets[b];
        es = accel_dtype_size(k->dt);
        if (k->count * es > most) most = k->count * es;
        for (i = 0; i < k->n; ++i) {
            const accel__ddp_grad *g = &r->grads[r->order[k->first + i]];
            if (g->direct && g->count * es > most) most = g->count * es;
        }
    }
    if (local == ACCEL_OK && most > r->join_zero_bytes) {
        accel_coll_free(c, r->join_zero);
        r->join_zero_bytes = 0;
        r->join_zero = accel__coll_alloc_mem(c, most);
        if (!r->join_zero)
            local =
                ACCEL__FAIL(c->acc, ACCEL_ERR_OUT_OF_MEMORY, "join_begin: no memory for a %zu-byte zero buffer", most);
        else r->join_zero_bytes = most;
    }
    v = c->size <= 64 ? stack_v : (int64_t *)accel_host_alloc(c->acc, sizeof(int64_t) * (size_t)c->size);
    if (!v && local == ACCEL_OK) local = ACCEL_ERR_OUT_OF_MEMORY;
    res = accel__ddp_join_agree(r, local, by_active, v, "accel_ddp_join_begin");
    for (i = 1; res == ACCEL_OK && i < c->size; ++i)
        if (v[i] != v[0])
            res = ACCEL__FAIL(c->acc, ACCEL_ERR_MISMATCH,
                              "join_begin: processes disagree on no_divide_by_initial_world_size "
                              "(rank 0=%lld, rank %d=%lld)",
                              (long long)v[0], i, (long long)v[i]);
    if (v && v != stack_v) accel_host_free(c->acc, v);
    if (res != ACCEL_OK) return res;
    r->join = 1;
    r->join_by_active = by_active;
    r->round_open = 0;
    r->active = c->size;
    r->div = (double)c->size;
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_ddp_join_end(accel_ddp *r, const accel_tensor *params, int n) {
    accel_coll *c;
    accel_result res = ACCEL_OK, local = ACCEL_OK;
    int64_t stack_v[64], *v;
    int i, na = 0, last = 1, root = -1;
    if (!r) return accel__coll_null();
    c = r->c;
    if (!r->join)
        return ACCEL__FAIL(c->acc, ACCEL_ERR_STATE, "join_end: the reducer is not in join mode (accel_ddp_join_begin)");
    if (r->round_open)
        return ACCEL__FAIL(c->acc, ACCEL_ERR_STATE, "join_end: called in the middle of a reduction (grad_ready without "
                           "accel_ddp_wait)");
    /* bad params: still shadow (the others must finish their steps), then fail every rank before the broadcast */
    if (n < 0 || (n > 0 && !params))
        local = ACCEL__FAIL(c->acc, ACCEL_ERR_INVALID_ARGUMENT, "join_end: %d tensors at %p", n, (const void *)params);
    for (i = 0; local == ACCEL_OK && i < n; ++i)
        if (accel_tensor_numel(&params[i]) < 0 || accel_dtype_size(params[i].dtype) == 0 ||
            (accel_tensor_numel(&params[i]) > 0 && !params[i].ptr))
            local = ACCEL__FAIL(c->acc, ACCEL_ERR_INVALID_ARGUMENT,
                                "join_end: parameter %d ('%s') has no data, an invalid "
                                "shape or dtype",
                                i, params[i].name ? params[i].name : "");
    for (;;) {
        res = accel__ddp_join_round(r, 0, &na);
        if (res != ACCEL_OK || na == 0) break;
        last = 0; /* torch's Join: a rank that shadowed a step is not a last joiner */
        res = accel__ddp_join_shadow(r);
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
    res = accel__ddp_join_agree(r, local, last ? c->rank : -1, v, "accel_ddp_join_end");
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

ACCEL__DEF int accel_ddp_join_active(const accel_ddp *r) { return r ? r->active : -1; }

/* ------------------------------------------------------------------------------------------------ 3. LocalSGD */
struct accel_ddp_local_sgd {
    accel_ddp *r;
    accel_tensor *params; /* copies of the descriptions (names are not kept) */
    int n, k, enabled;
    int64_t steps;
};

ACCEL__DEF accel_result accel_ddp_local_sgd_begin(accel_ddp *r, const accel_tensor *params, int n,
                                                  const accel_ddp_local_sgd_desc *desc, accel_ddp_local_sgd **out) {
    accel *acc;
    accel_ddp_local_sgd *l;
    int i;
    if (!r) return accel__coll_null();
    acc = r->c->acc;
    if (!out) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "local_sgd_begin: out is NULL");
    *out = NULL;
    if (!desc || desc->local_sgd_steps < 1)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "local_sgd_begin: local_sgd_steps must be >= 1 (got %d)",
                           desc ? desc->local_sgd_steps : 0);
    if ((int)desc->enabled < (int)ACCEL_OFF || (int)desc->enabled > (int)ACCEL_ON)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "local_sgd_begin: enabled=%d is not an accel_toggle",
                           (int)desc->enabled);
    if (n < 0 || (n > 0 && !params))
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "local_sgd_begin: %d tensors at %p", n,
                           (const void *)params);
    for (i = 0; i < n; ++i) {
        const accel_tensor *t = &params[i];
        int64_t numel = accel_tensor_numel(t);
        if (!accel_dtype_is_float(t->dtype) || !accel__coll_reducible(t->dtype) || numel < 0 ||
            (numel > 0 && !t->ptr))
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                               "local_sgd_begin: parameter %d ('%s') needs data, a valid shape and a dtype "
                               "F64/F32/F16/BF16 (the average divides)", i, t->name ? t->name : "");
    }
    if (r->no_sync)
        return ACCEL__FAIL(acc, ACCEL_ERR_STATE, "local_sgd_begin: a LocalSGD is already open on this reducer");
    if (r->join)
        return ACCEL__FAIL(acc, ACCEL_ERR_STATE, "local_sgd_begin: the reducer is in join mode");
    l = (accel_ddp_local_sgd *)accel_host_alloc(acc, sizeof *l);
    if (!l) return ACCEL_ERR_OUT_OF_MEMORY;
    memset(l, 0, sizeof *l);
    if (n > 0) {
        l->params = (accel_tensor *)accel_host_alloc(acc, sizeof(accel_tensor) * (size_t)n);
        if (!l->params) { accel_host_free(acc, l); return ACCEL_ERR_OUT_OF_MEMORY; }
        memcpy(l->params, params, sizeof(accel_tensor) * (size_t)n);
        for (i = 0; i < n; ++i) l->params[i].name = NULL;
    }
    l->r = r;
    l->n = n;
    l->k = desc->local_sgd_steps;
    /* Accelerate: enabled and distributed_type != NO; only then does it enter model.no_sync() */
    l->enabled = desc->enabled != ACCEL_OFF && acc->distributed_type != ACCEL_DISTRIBUTED_NO;
    if (l->enabled) r->no_sync = 1;
    *out = l;
    return ACCEL_OK;
}

/* _sync_and_avg_model_params: wait_for_everyone, then every parameter replaced by reduce(p, "mean") (the sum, then
   divided by the number of processes: ACCEL_COLL_AVG's order) */
static accel_result accel__ddp_local_sgd_average(accel_ddp_local_sgd *l) {
    accel_coll *c = l->r->c;
    accel_result res = accel_coll_barrier(c);
    int i;
    for (i = 0; i < l->n && res == ACCEL_OK; ++i) {
        int64_t cnt = accel_tensor_numel(&l->params[i]);
        if (cnt > 0)
            res = accel_coll_all_reduce(c, l->params[i].ptr, l->params[i].ptr, (size_t)cnt, l->params[i].dtype,
                                        ACCEL_COLL_AVG);
    }
    return res != ACCEL_OK ? accel__fail_wrap(c->acc, res, "LocalSGD (averaging the parameters)") : ACCEL_OK;
}

ACCEL__DEF accel_result accel_ddp_local_sgd_step(accel_ddp_local_sgd *l) {
    if (!l) return ACCEL_ERR_INVALID_ARGUMENT;
    l->steps++;
    if (!l->enabled || l->steps % l->k != 0) return ACCEL_OK;
    return accel__ddp_local_sgd_average(l);
}

ACCEL__DEF accel_result accel_ddp_local_sgd_end(accel_ddp_local_sgd *l) {
    accel_result res = ACCEL_OK;
    accel *acc;
    if (!l) return ACCEL_OK;
    acc = l->r->c->acc;
    if (l->enabled) {
        res = accel__ddp_local_sgd_average(l);
        l->r->no_sync = 0;
    }
    accel_host_free(acc, l->params);
    accel_host_free(acc, l);
    return res;
}

ACCEL__DEF int64_t accel_ddp_local_sgd_num_steps(const accel_ddp_local_sgd *l) { return l ? l->steps : -1; }
ACCEL__DEF int accel_ddp_local_sgd_enabled(const accel_ddp_local_sgd *l) { return l ? l->enabled : 0; }

#endif /* ACCEL_IMPLEMENTATION && !ACCEL__DDP_IMPL_DONE */

/* accel is released under the MIT licence. Copyright (c) 2026 the accel authors. */
