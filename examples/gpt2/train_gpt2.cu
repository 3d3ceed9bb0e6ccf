/* train_gpt2.cu — GPT-2 on CUDA in the style of karpathy/llm.c, with accel around the model.

   The model (gpt2.h: the same layout, initialization and Hugging Face names as gpt2_cpu.c, its float32 oracle):
   token + position embeddings, L pre-LN blocks with causal self-attention, a tied LM head. bf16 weights and
   activations, fp32 master weights, gradients and AdamW moments. forward() and backward() below call the same layers
   as gpt2_cpu.c's gpt2_forward / gpt2_backward, with the same names and arguments (plus a stream and scratch), so the
   two read side by side; the layers are in kernels/, one file per family, each kernel with its host launcher:

     kernels/encoder.cuh     encoder_forward / encoder_backward (token segments made on the host: no atomics)
     kernels/layernorm.cuh   layernorm_forward, residual_layernorm_forward (the residual add fused in),
                             layernorm_backward (one pass; parameter gradients folded in a fixed order)
     kernels/matmul.cuh      matmul_forward / matmul_backward: cuBLASLt with the bias (and, on Hopper, GELU and its
                             derivative) in the GEMM epilogues; the bias gradients as column sums
     kernels/attention.cuh   attention_forward / attention_backward: cuDNN's flash attention (--attention cudnn, the
                             default when built) or the trainer's own (--attention own: batched GEMMs over the heads
                             in place, a causal softmax one warp per row); neither permutes q, k, v
     kernels/gelu.cuh, residual.cuh   gelu_forward / gelu_backward, residual_forward (where not fused)
     kernels/classifier.cuh  fused_classifier: softmax, cross-entropy and its gradient in one pass per row
   Every reduction has a fixed order (no float atomics; cuDNN's deterministic backward), so a run is bit-reproducible
   and a resumed run equals an uninterrupted one.
   The loop does not wait for the device at the end of a step: the step's loss comes back to pinned memory behind an
   event, and gpt2.h logs the step after the next micro-batch's forward and backward are enqueued (step_readback),
   so the host prepares the next batch and launches its kernels while the device still runs AdamW. The one wait left
   is the gradient norm's (gpt2.h, gpt2_run_optimizer_step), until the clip coefficient is computed on the device.

   Everything around the model is accel (the same loop as gpt2_cpu.c):
     accel.h              launcher/ranks, device = local rank, gradient accumulation, scheduler bookkeeping
     accel_data.h         llm.c token shards → each rank's (B, T+1) windows; pinned double-buffered staging
     accel_collectives.h  the gradient reducer (NCCL between GPUs)
     accel_amp.h          the gradient norm on the device; fp32 master → bf16 model copy at start and resume
     accel_optim.h        fused AdamW on the device: clip coefficient in, bf16 model copy out (round to nearest
                          even, or stochastic rounding with --sr), the cosine schedule
     accel_ckpt.h         save_state / load_state (fp32 master weights, moments, loader, counters, RNG), save_model
                          and --init with Hugging Face GPT-2 names
     accel_trackers.h     TensorBoard + JSONL
     accel_profile.h      --profile DIR: the per-step phase table (host ms and CUDA-event ms on the stream) and
                          Chrome traces, NVTX ranges for Nsight Systems

     build/examples/gpt2/train_gpt2 --gen-shard /tmp/tiny.bin 1000000 64
     build/examples/gpt2/train_gpt2 --data /tmp/tiny.bin --vocab 64 --layers 2 --channels 64 --heads 4 --seq 64
     mpirun -np 8 build/examples/gpt2/train_gpt2 --data fineweb_train_*.bin --batch 16 --seq 1024 \
         --lr 6e-4 --warmup 700 --weight-decay 0.1 --steps 19000 --checkpoint-dir run --checkpoint-every 1000

   --zero 3 (ZeRO-3 / FSDP FULL_SHARD, gpt2.h's gpt2_z3 as gpt2_cpu.c's): the units are the embeddings with the final
   norm and each block; forward and backward take a unit's bf16 weights (gathered from the shards' bf16 copy, which
   AdamW writes) and fp32 gradient buffer from unit_get and give them back with unit_done (backward: reduce-scatter
   into the fp32 gradient shard). FSDP's rule (accel_zero.h UNITS, SHARDS AND BUFFERS): unit 0, the root, is held
   through each pass and has a gather buffer of its own; two blocks rotate, so block l + 1's gather (on the
   communicator's stream) is in flight while block l computes — started by unit_get(l) (forward_prefetch; in
   backward BACKWARD_PRE starts l - 1's) — and forward releases block l right before it waits on l + 1 for the
   fused residual + LN1. The run's last lines include gpt2.h's zero3 line (prefetched gathers, the buffers' peak). Checkpoints are sharded; the export gathers the shards at the end.
   Not with --sr (its bits are indexed by the flat buffer) or --bench-noop-accel.

   Exit status 77 when there is no CUDA device (the test suite's "skip"). */
#include "accel.h"
#include "accel_amp.h"
#include "accel_ckpt.h"
#include "accel_safetensors.h"
#include "accel_collectives.h"
#include "accel_ddp.h"
#include "accel_data.h"
#include "accel_optim.h"
#include "accel_profile.h"
#include "accel_trackers.h"
#include "gpt2.h"
#include "kernels/attention.cuh"
#include "kernels/classifier.cuh"
#include "kernels/encoder.cuh"
#include "kernels/gelu.cuh"
#include "kernels/layernorm.cuh"
#include "kernels/matmul.cuh"
#include "kernels/residual.cuh"
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <signal.h>

#ifdef GPT2_WITH_CUDNN
#define GPT2_HAVE_CUDNN 1
#else
#define GPT2_HAVE_CUDNN 0
#endif

/* ------------------------------------------------------------------------------------------------- model */
typedef struct activations {
    /* bf16, kept for backward (per layer: L × the size); att only with the trainer's own attention */
    bf16 *encoded, *ln1, *qkv, *atty, *att, *res2, *ln2, *fch, *fch_gelu, *res3, *lnf, *logits;
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd, *lnf_mean, *lnf_rstd, *losses, *loss_acc;
    float *stats;   /* cuDNN attention: the log-sum-exp of every score row (L × B × NH × T) */
    float *scratch; /* the two-stage column sums' partials */
    /* scratch (one layer) */
    bf16 *tmp, *dres, *dc, *d4c, *dqkv, *datt;
    const bf16 **att_ptrs; /* own attention: the batched GEMMs' pointer arrays */
} activations;

typedef struct model {
    gpt2_config cfg;
    int B, T;
    size_t off[GPT2_NUM_TENSORS + 1], n;
    float *master, *grads; /* device, fp32, gpt2.h's layout (the AdamW moments belong to accel_optim); --zero 3: the
                              master only until gpt2_run_setup has copied its shards out, no grads */
    bf16 *w;               /* device, bf16 model copy (--zero 3: none, the units are gathered) */
    gpt2_run *z3;          /* --zero 3: the run whose FSDP object holds the weights and gradients (gpt2.h) */
    activations a;
    char *arena;
    cudaStream_t st;
    int attention; /* GPT2_ATTENTION_* (--attention); carve_activations resolves AUTO */
    int ready;     /* the first forward made mm */
    matmul_ctx mm; /* cuBLASLt: handle, workspace, GEMM plans */
} model;

static cublasHandle_t g_blas; /* the own attention's batched GEMMs (main creates it on the model's stream) */

/* Whether cuDNN's attention takes the shape: head size a multiple of 8 up to 256 (128 before Hopper), an sm_80+ GPU,
   and cuDNN builds both graphs (they are cached for the run). */
static int cudnn_attention_fits(const model *m, const char **why) {
    int dev = 0, major = 0, NH = m->cfg.num_heads, hs = m->cfg.channels / NH;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev))
        major = 0;
    *why = "cuDNN's attention needs an sm_80+ GPU and a head size (channels / heads) that is a multiple of 8, at most "
           "256 (128 before Hopper)";
    if (major < 8 || hs % 8 || hs > (major >= 9 ? 256 : 128)) return 0;
#ifdef GPT2_WITH_CUDNN
    if (attention_cudnn_prepare(m->B, m->T, NH, hs) != 0) {
        *why = attention_cudnn_error();
        return 0;
    }
    return 1;
#else
    *why = "this build has no cuDNN (meson -Dcudnn=enabled: cudnn.h, libcudnn and the cuDNN frontend's headers, see "
           "scripts/install-deps.sh --cudnn-frontend)";
    return 0;
#endif
}

/* AUTO: cuDNN's attention where it fits, else (with a note) the trainer's own. An explicit cudnn that does not fit
   stays, and model_setup reports why. */
static int resolve_attention(const model *m) {
    const char *why = "";
    if (m->attention == GPT2_ATTENTION_OWN) return GPT2_ATTENTION_OWN;
    if (cudnn_attention_fits(m, &why)) return GPT2_ATTENTION_CUDNN;
    if (m->attention == GPT2_ATTENTION_AUTO && GPT2_HAVE_CUDNN)
        fprintf(stderr, "train_gpt2: note: cuDNN's attention does not fit (%s): the trainer's own attention\n", why);
    return m->attention == GPT2_ATTENTION_AUTO ? GPT2_ATTENTION_OWN : GPT2_ATTENTION_CUDNN;
}

/* Carves the activations out of base (NULL: only sizes them, and resolves m->attention); returns the bytes needed. */
/* One layer's slice of the cuDNN stats, rounded up to 64 floats so that every layer's slice starts 256-byte aligned
   (B·NH·T need not be a multiple of 4). */
static size_t stats_stride(int B, int NH, int T) { return ((size_t)B * NH * T + 63) & ~(size_t)63; }

static size_t carve_activations(char *base, model *m) {
    const gpt2_config *c = &m->cfg;
    activations *a = &m->a;
    size_t off = 0, L = (size_t)c->num_layers, C = (size_t)c->channels, NH = (size_t)c->num_heads;
    size_t B = (size_t)m->B, T = (size_t)m->T, BT = B * T;
    size_t own = (m->attention = resolve_attention(m)) == GPT2_ATTENTION_OWN;
    size_t scratch = layernorm_scratch_floats((int)C) > matmul_scratch_floats(4 * (int)C)
                         ? layernorm_scratch_floats((int)C) : matmul_scratch_floats(4 * (int)C);
#define CARVE(ptr, type, n)                                                                                          \
    do {                                                                                                             \
        off = (off + 255) & ~(size_t)255;                                                                            \
        a->ptr = (type *)(base && (size_t)(n) != 0 ? base + off : NULL);                                           \
        off += (size_t)(n) * sizeof(type);                                                                           \
    } while (0)
    CARVE(encoded, bf16, BT * C); CARVE(ln1, bf16, L * BT * C); CARVE(qkv, bf16, L * BT * 3 * C);
    CARVE(atty, bf16, L * BT * C); CARVE(att, bf16, own * L * B * NH * T * T); CARVE(res2, bf16, L * BT * C);
    CARVE(ln2, bf16, L * BT * C); CARVE(fch, bf16, L * BT * 4 * C); CARVE(fch_gelu, bf16, L * BT * 4 * C);
    CARVE(res3, bf16, L * BT * C); CARVE(lnf, bf16, BT * C); CARVE(logits, bf16, BT * c->padded_vocab_size);
    CARVE(ln1_mean, float, L * BT); CARVE(ln1_rstd, float, L * BT); CARVE(ln2_mean, float, L * BT);
    CARVE(ln2_rstd, float, L * BT); CARVE(lnf_mean, float, BT); CARVE(lnf_rstd, float, BT); CARVE(losses, float, BT);
    CARVE(loss_acc, float, 1); CARVE(stats, float, (1 - own) * L * stats_stride(B, NH, T));
    CARVE(scratch, float, scratch);
    CARVE(tmp, bf16, BT * C); CARVE(dres, bf16, BT * C); CARVE(dc, bf16, BT * C); CARVE(d4c, bf16, BT * 4 * C);
    CARVE(dqkv, bf16, BT * 3 * C); CARVE(datt, bf16, own * B * NH * T * T);
    CARVE(att_ptrs, const bf16 *, own * attention_ptr_count((int)B, (int)NH));
#undef CARVE
    return off;
}

/* What the first forward sets up: the shape checks the kernels need and cuBLASLt (GELU in the GEMM epilogues from
   Hopper on, where it is faster than the separate kernels). */
static cudaError_t model_setup(model *m) {
    int C = m->cfg.channels, dev = 0, major = 0;
    const char *why = "";
    if (C % 8 || !layernorm_chunks(C))
        return gpt2_kernel_error(cudaErrorInvalidValue, "--channels %d: the CUDA kernels need a multiple of 8 up to "
                                                        "%d", C, LN_MAX_C);
    if (m->attention == GPT2_ATTENTION_CUDNN && !cudnn_attention_fits(m, &why))
        return gpt2_kernel_error(cudaErrorNotSupported, "--attention cudnn: %s", why);
    GPT2_TRY(cudaGetDevice(&dev));
    GPT2_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    GPT2_TRY(matmul_create(&m->mm, major >= 9));
    m->ready = 1;
    return cudaSuccess;
}

/* The kernels' own resources (cuBLASLt, cuDNN); the buffers belong to main. */
static void kernels_destroy(model *m) {
    if (m->ready) matmul_destroy(&m->mm);
    m->ready = 0;
#ifdef GPT2_WITH_CUDNN
    attention_cudnn_destroy();
#endif
}

/* Unit u's tensors (u = 0: wte, wpe, lnfw, lnfb; u = 1 + l: block l's twelve) as w[tensor] (bf16) and with g the
   fp32 gradients to += into: slices of the flat buffers, or under --zero 3 the gathered unit and its gradient buffer
   (gpt2.h's gpt2_z3_unit_v: FSDP's wait / grads; gpt2_cpu.c's unit_get). unit_done releases it (and in backward
   reduce-scatters its gradients). Their accel errors come back as cudaErrorUnknown after a line naming them. */
static cudaError_t unit_error(const model *m, accel_result r) {
    if (r == ACCEL_OK) return cudaSuccess;
    return gpt2_kernel_error(cudaErrorUnknown, "--zero 3: %s", accel_last_error(m->z3->acc));
}
static cudaError_t unit_get(model *m, int u, bf16 *w[GPT2_NUM_TENSORS], float *g[GPT2_NUM_TENSORS]) {
    void *wv[GPT2_NUM_TENSORS], *gv[GPT2_NUM_TENSORS];
    accel_result r = m->z3 ? gpt2_z3_unit_v(m->z3, u, wv, g ? gv : NULL) : ACCEL_OK;
    for (int t = 0; t < GPT2_NUM_TENSORS && r == ACCEL_OK; ++t) {
        size_t at = gpt2_unit_offset(m->off, m->cfg.num_layers, u, t);
        if (!gpt2_unit_has(u, t)) continue;
        w[t] = m->z3 ? (bf16 *)wv[t] : m->w + at;
        if (g) g[t] = m->z3 ? (float *)gv[t] : m->grads + at;
    }
    return unit_error(m, r);
}
static cudaError_t unit_done(model *m, int u, int backward) {
    return m->z3 ? unit_error(m, gpt2_z3_done(m->z3, u, backward)) : cudaSuccess;
}

/* Forward of one micro-batch (win: the device copy of the (B, T+1) windows); the classifier leaves dlogits (for a
   loss multiplied by loss_mult) in the logits buffer and adds the mean loss to a.loss_acc. */
static cudaError_t forward(model *m, const int32_t *win, float loss_mult) {
    const gpt2_config *c = &m->cfg;
    activations *a = &m->a;
    matmul_ctx *mm = &m->mm;
    cudaStream_t st = m->st;
    int B = m->B, T = m->T, C = c->channels, NH = c->num_heads, L = c->num_layers, BT = B * T;
    size_t btc = (size_t)BT * C, att_n = (size_t)B * NH * T * T, stats_n = stats_stride(B, NH, T);
    bf16 *e[GPT2_NUM_TENSORS], *w[GPT2_NUM_TENSORS]; /* unit 0 (held through the pass), the block's */
    if (!m->ready) GPT2_TRY(model_setup(m));
    if (m->z3) GPT2_TRY(unit_error(m, accel_zero_fsdp_begin_forward(m->z3->z3.f)));
    GPT2_TRY(unit_get(m, 0, e, NULL));
    GPT2_TRY(encoder_forward(a->encoded, win, e[GPT2_WTE], e[GPT2_WPE], B, T, C, st));
    /* the first block's LN1; every later LayerNorm comes fused with the residual add before it */
    GPT2_TRY(unit_get(m, 1, w, NULL));
    GPT2_TRY(layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, a->encoded, w[GPT2_LN1W], w[GPT2_LN1B], BT, C, st));
    for (int l = 0; l < L; ++l) { /* w: block l's weights */
        const bf16 *res = l == 0 ? a->encoded : a->res3 + (l - 1) * btc;
        bf16 *ln1 = a->ln1 + l * btc, *qkv = a->qkv + l * 3 * btc, *atty = a->atty + l * btc;
        bf16 *res2 = a->res2 + l * btc, *ln2 = a->ln2 + l * btc, *fch = a->fch + l * 4 * btc;
        bf16 *fch_gelu = a->fch_gelu + l * 4 * btc, *res3 = a->res3 + l * btc;
        /* the next LayerNorm: the following block's LN1, or after the last block the final one */
        int last = l == L - 1;
        bf16 *next_ln = last ? a->lnf : a->ln1 + (l + 1) * btc;
        float *next_mean = last ? a->lnf_mean : a->ln1_mean + (l + 1) * BT;
        float *next_rstd = last ? a->lnf_rstd : a->ln1_rstd + (l + 1) * BT;

        GPT2_TRY(matmul_forward(mm, qkv, ln1, w[GPT2_QKVW], w[GPT2_QKVB], BT, C, 3 * C, st));
        if (m->attention == GPT2_ATTENTION_CUDNN)
            GPT2_TRY(attention_forward_cudnn(atty, a->stats + l * stats_n, qkv, B, T, C, NH, st));
        else
            GPT2_TRY(attention_forward(atty, a->att + l * att_n, qkv, B, T, C, NH, g_blas, a->att_ptrs, st));
        GPT2_TRY(matmul_forward(mm, a->tmp, atty, w[GPT2_ATTPROJW], w[GPT2_ATTPROJB], BT, C, C, st));
        /* residual_forward(res2, res, tmp) + layernorm_forward(ln2, ..., res2, ...) */
        GPT2_TRY(residual_layernorm_forward(res2, ln2, a->ln2_mean + l * BT, a->ln2_rstd + l * BT, res, a->tmp,
                                            w[GPT2_LN2W], w[GPT2_LN2B], BT, C, st));
        /* matmul_forward(fch, ln2, ...) + gelu_forward(fch_gelu, fch) */
        GPT2_TRY(matmul_forward(mm, fch_gelu, ln2, w[GPT2_FCW], w[GPT2_FCB], BT, C, 4 * C, st, fch));
        GPT2_TRY(matmul_forward(mm, a->tmp, fch_gelu, w[GPT2_FCPROJW], w[GPT2_FCPROJB], BT, 4 * C, C, st));
        /* block l is done: its unit goes back, and the next one (its gather started by unit_get of block l, so it
           overlapped block l's kernels) is waited on for residual_forward(res3, res2, tmp) + the next
           layernorm_forward with the next unit's weights */
        GPT2_TRY(unit_done(m, 1 + l, 0));
        if (!last) GPT2_TRY(unit_get(m, 2 + l, w, NULL));
        GPT2_TRY(residual_layernorm_forward(res3, next_ln, next_mean, next_rstd, res2, a->tmp,
                                            last ? e[GPT2_LNFW] : w[GPT2_LN1W], last ? e[GPT2_LNFB] : w[GPT2_LN1B],
                                            BT, C, st));
    }
    GPT2_TRY(matmul_forward(mm, a->logits, a->lnf, e[GPT2_WTE], NULL, BT, C, c->padded_vocab_size, st));
    GPT2_TRY(unit_done(m, 0, 0));
    /* crossentropy_forward + crossentropy_softmax_backward */
    GPT2_TRY(fused_classifier(a->logits, a->losses, win, B, T, c->vocab_size, c->padded_vocab_size,
                              loss_mult / (float)BT, st));
    return loss_mean(a->loss_acc, a->losses, BT, st);
}

/* Backward of the micro-batch forward() just ran; gradients accumulate (fp32). seg: the host-made token segments
   (sorted positions, segment starts, segment tokens) in device memory, nseg of them. */
static cudaError_t backward(model *m, const int32_t *sorted_pos, const int32_t *seg_start, const int32_t *seg_tok,
                            int nseg) {
    const gpt2_config *c = &m->cfg;
    activations *a = &m->a;
    matmul_ctx *mm = &m->mm;
    cudaStream_t st = m->st;
    int B = m->B, T = m->T, C = c->channels, NH = c->num_heads, L = c->num_layers, BT = B * T;
    size_t btc = (size_t)BT * C, att_n = (size_t)B * NH * T * T, stats_n = stats_stride(B, NH, T);
    float *scr = a->scratch;
    bf16 *e[GPT2_NUM_TENSORS], *w[GPT2_NUM_TENSORS];   /* unit 0 (held through the pass), the block's */
    float *ge[GPT2_NUM_TENSORS], *g[GPT2_NUM_TENSORS]; /* their gradients */
    if (m->z3) GPT2_TRY(unit_error(m, accel_zero_fsdp_begin_backward(m->z3->z3.f)));
    GPT2_TRY(unit_get(m, 0, e, ge));
    /* LM head (tied): dlnf = dlogits · wte, dwte += dlogitsᵀ · lnf */
    GPT2_TRY(matmul_backward(mm, a->dc, ge[GPT2_WTE], NULL, a->logits, a->lnf, e[GPT2_WTE], BT, C,
                             c->padded_vocab_size, scr, st));
    GPT2_TRY(cudaMemsetAsync(a->dres, 0, btc * sizeof(bf16), st));
    GPT2_TRY(layernorm_backward(a->dres, ge[GPT2_LNFW], ge[GPT2_LNFB], a->dc, a->res3 + (L - 1) * btc, e[GPT2_LNFW],
                                a->lnf_mean, a->lnf_rstd, BT, C, scr, st));
    for (int l = L - 1; l >= 0; --l) { /* a->dres = d(residual3 of layer l) */
        const bf16 *res = l == 0 ? a->encoded : a->res3 + (l - 1) * btc;
        const bf16 *ln1 = a->ln1 + l * btc, *qkv = a->qkv + l * 3 * btc, *atty = a->atty + l * btc;
        const bf16 *res2 = a->res2 + l * btc, *ln2 = a->ln2 + l * btc, *fch = a->fch + l * 4 * btc;
        const bf16 *fch_gelu = a->fch_gelu + l * 4 * btc;
        GPT2_TRY(unit_get(m, 1 + l, w, g));
        /* matmul_backward(d4c, ..., fch_gelu, ...) + gelu_backward(d4c, fch) */
        GPT2_TRY(matmul_backward(mm, a->d4c, g[GPT2_FCPROJW], g[GPT2_FCPROJB], a->dres, fch_gelu, w[GPT2_FCPROJW], BT,
                                 4 * C, C, scr, st, fch));
        GPT2_TRY(matmul_backward(mm, a->dc, g[GPT2_FCW], g[GPT2_FCB], a->d4c, ln2, w[GPT2_FCW], BT, C, 4 * C, scr, st));
        GPT2_TRY(layernorm_backward(a->dres, g[GPT2_LN2W], g[GPT2_LN2B], a->dc, res2, w[GPT2_LN2W],
                                    a->ln2_mean + l * BT, a->ln2_rstd + l * BT, BT, C, scr, st));
        GPT2_TRY(matmul_backward(mm, a->dc, g[GPT2_ATTPROJW], g[GPT2_ATTPROJB], a->dres, atty, w[GPT2_ATTPROJW], BT, C,
                                 C, scr, st));
        if (m->attention == GPT2_ATTENTION_CUDNN)
            GPT2_TRY(attention_backward_cudnn(a->dqkv, a->dc, qkv, atty, a->stats + l * stats_n, B, T, C, NH, st));
        else
            GPT2_TRY(attention_backward(a->dqkv, a->datt, a->dc, qkv, a->att + l * att_n, B, T, C, NH, g_blas,
                                        a->att_ptrs, st));
        GPT2_TRY(matmul_backward(mm, a->dc, g[GPT2_QKVW], g[GPT2_QKVB], a->dqkv, ln1, w[GPT2_QKVW], BT, C, 3 * C, scr,
                                 st));
        GPT2_TRY(layernorm_backward(a->dres, g[GPT2_LN1W], g[GPT2_LN1B], a->dc, res, w[GPT2_LN1W],
                                    a->ln1_mean + l * BT, a->ln1_rstd + l * BT, BT, C, scr, st));
        GPT2_TRY(unit_done(m, 1 + l, 1)); /* --zero 3: the block's gradients are final: reduce-scatter */
    }
    GPT2_TRY(encoder_backward(ge[GPT2_WTE], ge[GPT2_WPE], a->dres, sorted_pos, seg_start, seg_tok, nseg, B, T, C, st));
    GPT2_TRY(unit_done(m, 0, 1));
    return m->z3 ? unit_error(m, accel_zero_fsdp_end_backward(m->z3->z3.f)) : cudaSuccess;
}

/* ------------------------------------------------------------------------------------------------ main */
#define CHECK(call)                                                                                                  \
    do {                                                                                                             \
        if ((call) != ACCEL_OK) {                                                                                    \
            fprintf(stderr, "train_gpt2: rank %d: %s: %s\n", acc.process_index, #call, accel_last_error(&acc));      \
            goto fail;                                                                                               \
        }                                                                                                            \
    } while (0)
#define CUDA_OK(call)                                                                                                \
    do {                                                                                                             \
        cudaError_t e_ = (call);                                                                                     \
        if (e_ != cudaSuccess) {                                                                                     \
            fprintf(stderr, "train_gpt2: rank %d: %s:%d: %s: %s\n", acc.process_index, __FILE__, __LINE__, #call,    \
                    cudaGetErrorString(e_));                                                                         \
            goto fail;                                                                                               \
        }                                                                                                            \
    } while (0)

/* Dense bf16 peak of the device (for MFU), 0 when unknown (kernels/common.cuh's gpt2_peak_flops). */
static double peak_flops(int device) {
    cudaDeviceProp p;
    int clock_khz = 0;
    if (cudaGetDeviceProperties(&p, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device) != cudaSuccess)
        return 0.0;
    return gpt2_peak_flops(p.name, p.major, p.minor, p.multiProcessorCount, clock_khz);
}

/* The model on the device: the fp32 master weights from run->host (--init's or GPT-2's initialization), zeroed
   gradients, room for the bf16 copy and the activations; cuBLAS on accel's stream. --zero 3: the master weights only
   (main frees them once gpt2_run_setup has copied the shards out), no gradients and no bf16 copy. */
static accel_result model_create(model *m, gpt2_run *run) {
    accel *acc = run->acc;
    size_t act;
    cudaError_t e;
    m->cfg = run->cfg;
    m->B = run->o->batch;
    m->T = run->o->seq;
    m->st = (cudaStream_t)acc->stream;
    m->attention = run->o->attention;
    m->n = gpt2_offsets(&m->cfg, m->off);
    act = carve_activations(NULL, m);
    int z3 = run->o->zero == 3;
    m->master = (float *)accel_device_alloc(acc, m->n * sizeof(float));
    m->grads = z3 ? NULL : (float *)accel_device_alloc(acc, m->n * sizeof(float));
    m->w = z3 ? NULL : (bf16 *)accel_device_alloc(acc, m->n * sizeof(bf16));
    m->arena = (char *)accel_device_alloc(acc, act);
    if (!m->master || (!z3 && (!m->grads || !m->w)) || !m->arena)
        return accel_set_error(acc, ACCEL_ERR_OUT_OF_MEMORY, "out of device memory (%zu parameters, %.2f GiB of "
                               "activations)", m->n, act / 1073741824.0);
    carve_activations(m->arena, m);
    if ((e = cudaMemcpy(m->master, run->host, m->n * sizeof(float), cudaMemcpyHostToDevice)) != cudaSuccess ||
        (m->grads && (e = cudaMemset(m->grads, 0, m->n * sizeof(float))) != cudaSuccess) ||
        (e = cudaMemset(m->a.loss_acc, 0, sizeof(float))) != cudaSuccess)
        return accel_set_error(acc, ACCEL_ERR_CUDA, "model_create: %s", cudaGetErrorString(e));
    if (cublasCreate(&g_blas) != CUBLAS_STATUS_SUCCESS || cublasSetStream(g_blas, m->st) != CUBLAS_STATUS_SUCCESS)
        return accel_set_error(acc, ACCEL_ERR_CUDA, "cuBLAS initialization failed");
    return ACCEL_OK;
}

static void model_destroy(model *m, accel *acc) {
    kernels_destroy(m);
    if (g_blas) cublasDestroy(g_blas);
    g_blas = NULL;
    accel_device_free(acc, m->master);
    accel_device_free(acc, m->grads);
    accel_device_free(acc, m->w);
    accel_device_free(acc, m->arena);
}

/* The bf16 copy of the master weights as the last step wrote it (after a resume; with --sr the same bits:
   accel_optim's stochastic rounding is accel_amp's rule for (seed, the parameter's step count, flat index)). */
static accel_result model_bf16_from_master(model *m, gpt2_run *run) {
    accel_amp_sr sr;
    memset(&sr, 0, sizeof sr);
    sr.seed = run->o->seed;
    sr.step = (uint64_t)run->acc->optimizer_steps;
    return accel_amp_master_to_model(run->acc, m->master, m->w, ACCEL_BF16, m->n,
                                     run->o->sr && run->acc->optimizer_steps ? &sr : NULL);
}

/* Device → host, for gpt2_run (--dump-grads, the export). */
static accel_result device_to_host(accel *acc, void *dst, const void *src, size_t bytes) {
    cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) return accel_set_error(acc, ACCEL_ERR_CUDA, "device-to-host copy: %s", cudaGetErrorString(e));
    return ACCEL_OK;
}

/* Batches go to the device through accel's pinned, double-buffered stager, each with the token segments of the
   embedding backward (prepared on the host while the device still runs the previous step). */
typedef struct staging {
    accel_data_stager stager;
    int32_t *count; /* prepare_token_segments' V-sized scratch */
    int ready;
} staging;

static accel_result staging_init(staging *s, gpt2_run *run) {
    size_t B = (size_t)run->o->batch, T = (size_t)run->o->seq, V = (size_t)run->cfg.vocab_size;
    accel_result r = accel_data_stager_init(run->acc, &s->stager, (B * (T + 1) + 3 * B * T + 1) * sizeof(int32_t));
    if (r != ACCEL_OK) return r;
    s->ready = 1;
    if (!(s->count = (int32_t *)accel_host_alloc(run->acc, V * sizeof(int32_t))))
        return accel_set_error(run->acc, ACCEL_ERR_OUT_OF_MEMORY, "out of host memory");
    memset(s->count, 0, V * sizeof(int32_t));
    return ACCEL_OK;
}

static void staging_deinit(staging *s, accel *acc) {
    if (s->ready) accel_data_stager_deinit(&s->stager);
    accel_host_free(acc, s->count);
}

/* The next batch on the device: [win (B(T+1)) | its token segments]; *got = 0 at the end of an epoch. */
static accel_result next_batch(gpt2_run *run, staging *s, const int32_t **win, int *nseg, int *got) {
    void *host, *dev;
    accel_result r;
    if ((r = accel_data_stager_host(&s->stager, &host)) != ACCEL_OK ||
        (r = gpt2_run_next(run, (int32_t *)host, got)) != ACCEL_OK || !*got)
        return r;
    *nseg = prepare_token_segments((int32_t *)host, run->o->batch, run->o->seq, s->count);
    if ((r = accel_data_stager_submit(&s->stager, &dev)) != ACCEL_OK) return r;
    *win = (const int32_t *)dev;
    return ACCEL_OK;
}

/* backward over a staged batch: [win (B(T+1)) | sorted_pos (BT) | seg_start (BT+1) | seg_tok (BT)]. */
static cudaError_t backward_staged(model *m, const int32_t *win, int nseg) {
    size_t W = (size_t)m->B * (m->T + 1), BT = (size_t)m->B * m->T;
    return backward(m, win + W, win + W + BT, win + W + 2 * BT + 1, nseg);
}

/* The step's loss on its way to the host, so that the loop need not wait for the device at the end of a step: the
   sum of the step's micro-batch losses (forward accumulates it on the device) is copied to pinned memory behind an
   event. gpt2.h writes the step's log line after the next micro-batch's forward and backward are enqueued (the
   device has work while the host waits for the event here, in readback_fetch), or at once where the step must be
   complete (gpt2_run_step_must_complete: a checkpoint, --kill-at, the summary clock, the last step). Meanwhile the
   host prepares the next batch and enqueues its kernels. The event follows all of the step's work (AdamW, zeroing
   the gradients): waiting for it waits for the step. With the device-side clip (gpt2.h, gpt2_run_optimizer_step),
   the gradient norm would come back here too, next to the loss. One slot is enough: a step's line is written (after
   the next micro-batch's backward) before the next step's read-back is enqueued. */
typedef struct step_readback {
    float *loss;      /* pinned: the step's summed loss */
    cudaEvent_t done; /* recorded after the copy (and after the step's other work: stream order) */
} step_readback;

static accel_result readback_init(step_readback *rb, accel *acc) {
    cudaError_t e;
    if (!(rb->loss = (float *)accel_pinned_alloc(acc, sizeof(float))))
        return accel_set_error(acc, ACCEL_ERR_OUT_OF_MEMORY, "out of pinned host memory");
    if ((e = cudaEventCreateWithFlags(&rb->done, cudaEventDisableTiming)) != cudaSuccess) {
        rb->done = NULL;
        return accel_set_error(acc, ACCEL_ERR_CUDA, "cudaEventCreate: %s", cudaGetErrorString(e));
    }
    return ACCEL_OK;
}

static void readback_deinit(step_readback *rb, accel *acc) {
    if (rb->done) {
        (void)cudaEventSynchronize(rb->done); /* a copy into rb->loss may still be in flight */
        cudaEventDestroy(rb->done);
    }
    accel_pinned_free(acc, rb->loss);
}

/* At the end of a step (after gpt2_run_optimizer_step and zeroing the gradients): the loss's copy, the accumulator
   reset for the next step, the event. */
static accel_result readback_enqueue(step_readback *rb, model *m, accel *acc) {
    cudaError_t e;
    if ((e = cudaMemcpyAsync(rb->loss, m->a.loss_acc, sizeof(float), cudaMemcpyDeviceToHost, m->st)) != cudaSuccess ||
        (e = cudaMemsetAsync(m->a.loss_acc, 0, sizeof(float), m->st)) != cudaSuccess ||
        (e = cudaEventRecord(rb->done, m->st)) != cudaSuccess)
        return accel_set_error(acc, ACCEL_ERR_CUDA, "the step's loss read-back: %s", cudaGetErrorString(e));
    return ACCEL_OK;
}

/* gpt2_run's fetch_loss: waits for the last enqueued step, then its loss sum. */
static accel_result readback_fetch(accel *acc, void *ctx, double *loss_sum) {
    step_readback *rb = (step_readback *)ctx;
    cudaError_t e = cudaEventSynchronize(rb->done);
    if (e != cudaSuccess) return accel_set_error(acc, ACCEL_ERR_CUDA, "the step's loss: %s", cudaGetErrorString(e));
    *loss_sum = (double)*rb->loss;
    return ACCEL_OK;
}

/* --bench-noop-accel (bench/trainer/bench_gpt2.py): main's loop with accel's calls taken out — one batch, staged
   once; one micro-batch a step; no accumulation, reduction, clipping, schedule, logs, checkpoints or per-step
   synchronization. The optimizer (the model's math) still steps. The training loop's tokens/s over this one's is
   accel's share of the step. */
static accel_result bench_noop_loop(gpt2_run *run, model *m, staging *s) {
    const int32_t *win = NULL;
    int64_t step;
    int got = 0, nseg = 0;
    cudaError_t e = cudaSuccess;
    accel_result r;
    while (!got)
        if ((r = next_batch(run, s, &win, &nseg, &got)) != ACCEL_OK) return r;
    for (step = run->first_step + 1; step <= run->o->steps; ++step) {
        if ((e = forward(m, win, 1.0f)) != cudaSuccess || (e = backward_staged(m, win, nseg)) != cudaSuccess) break;
        if ((r = accel_optim_step(run->opt, NULL)) != ACCEL_OK) return r;
        if ((e = cudaMemsetAsync(m->grads, 0, m->n * sizeof(float), m->st)) != cudaSuccess) break;
        if (step == run->first_step + GPT2_UNTIMED_STEPS && (e = cudaStreamSynchronize(m->st)) != cudaSuccess) break;
        run->step = step;
        gpt2_hooks_step_timed(run, step);
    }
    if (e != cudaSuccess)
        return accel_set_error(run->acc, ACCEL_ERR_CUDA, "--bench-noop-accel: %s", cudaGetErrorString(e));
    return ACCEL_OK;
}

#define PHASE(id, ...) GPT2_PHASE(run, id, __VA_ARGS__) /* a phase of the step in the profiler */

int main(int argc, char **argv) {
    gpt2_opts o;
    gpt2_run run; /* accel and everything around the model: gpt2.h */
    model M;
    accel acc;
    accel_desc desc;
    staging stage;
    step_readback rb;
    int rc = 1, ndev = 0, micro = 0;
    int pr = gpt2_parse_args(argc, argv, &o);
    if (pr >= 0) return pr;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
        (void)cudaGetLastError();
        printf("train_gpt2: no CUDA device: skipping\n");
        return 77;
    }
    memset(&M, 0, sizeof M);
    memset(&stage, 0, sizeof stage);
    memset(&rb, 0, sizeof rb);
    memset(&desc, 0, sizeof desc);
    desc.mixed_precision = ACCEL_PRECISION_BF16;
    desc.gradient_accumulation_steps = o.accum;
    CHECK(gpt2_run_init(&run, &acc, &desc, &o, "train_gpt2"));
    if (acc.device < 0) {
        fprintf(stderr, "train_gpt2: accel chose the CPU (ACCELERATE_USE_CPU?); this trainer needs a GPU\n");
        goto fail;
    }
    if (run.peak_flops <= 0) run.peak_flops = peak_flops(acc.device); /* --peak-tflops, else the device's */
    run.to_host = device_to_host;
    run.zero3_capable = 1;           /* --zero 3: forward and backward go unit by unit (unit_get / unit_done) */
    run.z3_param_dtype = ACCEL_BF16; /* the kernels read bf16 weights: the shards' bf16 copy, gathered */

    /* 1. the model: --init's weights (Hugging Face names) or GPT-2's initialization, on the host, then to the device */
    if (!(run.host = (float *)accel_host_alloc(&acc, gpt2_num_parameters(&run.cfg) * sizeof(float)))) {
        fprintf(stderr, "train_gpt2: out of host memory\n");
        goto fail;
    }
    CHECK(gpt2_run_weights(&run, run.host));
    CHECK(model_create(&M, &run));
    /* the banner names the attention that runs (model_create resolved --attention auto) */
    run.banner_note = M.attention == GPT2_ATTENTION_CUDNN ? "attention: cudnn" : "attention: own";

    CHECK(staging_init(&stage, &run));
    CHECK(readback_init(&rb, &acc));
    run.fetch_loss = readback_fetch;
    run.fetch_ctx = &rb;

    /* 2. AdamW writing the bf16 copy, the loader, the reducer, checkpoints (and --resume), logs: gpt2.h */
    if (o.zero == 3) { /* the shards (and their bf16 copy) are copied out of the whole weights, which go */
        CHECK(gpt2_run_setup(&run, M.master, NULL, NULL));
        accel_device_free(&acc, M.master);
        M.master = NULL;
        M.z3 = &run;
    } else {
        CHECK(gpt2_run_setup(&run, M.master, M.grads, M.w));
        CHECK(model_bf16_from_master(&M, &run));
    }

    if (o.hooks.bench_noop) {
        CHECK(bench_noop_loop(&run, &M, &stage));
    } else {
        /* 3. the loop: gpt2_cpu.c's, with the batch staged to the device and the loss read back without waiting
           (step_readback): the host prepares and enqueues a step while the device still runs the previous one */
        while (acc.optimizer_steps < o.steps && !run.stop) { /* run.stop: preempted and saved (gpt2_run_step_end) */
            const int32_t *win = NULL;
            int got = 0, nseg = 0;
            PHASE(ACCEL_PROF_DATA, CHECK(next_batch(&run, &stage, &win, &nseg, &got)));
            if (!got) continue; /* end of an epoch: the loader advanced it */
            accel_accumulate_begin(&acc); /* sets acc.sync_gradients */
            PHASE(ACCEL_PROF_FORWARD, CUDA_OK(forward(&M, win, 1.0f / accel_loss_divisor(&acc)))); /* loss / accum */
            PHASE(ACCEL_PROF_BACKWARD, CUDA_OK(backward_staged(&M, win, nseg)));
            micro++;
            CHECK(gpt2_run_log_pending(&run)); /* the previous step's log line: waits while the device runs this one */
            if (accel_should_reduce(&acc)) PHASE(ACCEL_PROF_GRAD_SYNC, CHECK(gpt2_run_reduce(&run)));
            if (acc.sync_gradients) /* clip, schedule, AdamW; zero_grad */
                PHASE(ACCEL_PROF_OPTIMIZER, CHECK(gpt2_run_optimizer_step(&run));
                      if (M.z3) CHECK(accel_zero_fsdp_zero_grad(run.z3.f));
                      else CUDA_OK(cudaMemsetAsync(M.grads, 0, M.n * sizeof(float), M.st)));
            accel_scheduler_steps(&acc, 0); /* every micro-batch: P on a taken step, 0 otherwise */
            accel_accumulate_end(&acc);
            if (!acc.sync_gradients) continue;
            CHECK(readback_enqueue(&rb, &M, &acc));
            gpt2_run_log_later(&run, micro, 0.0); /* the step's log line, written when its loss is back */
            micro = 0;
            CHECK(gpt2_run_step_end(&run)); /* its log line when it must be complete, a checkpoint when due, ... */
        }
    }
    CUDA_OK(cudaStreamSynchronize(M.st));
    if (!run.stop) CHECK(gpt2_run_finish(&run)); /* summary line, profile, export (not when preempted) */
    rc = run.stop ? ACCEL_EXIT_REQUEUE : 0; /* preempted: the job script requeues on it (README.md) */
fail:
    gpt2_run_release(&run); /* before the buffers it uses */
    staging_deinit(&stage, &acc);
    readback_deinit(&rb, &acc);
    accel_host_free(&acc, run.host);
    model_destroy(&M, &acc);
    return gpt2_run_end(&run, rc);
}
