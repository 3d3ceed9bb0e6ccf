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

   Exit status 77 when there is no CUDA device (the test suite's "skip"). */
#include "accel.h"
#include "accel_amp.h"
#include "accel_ckpt.h"
#include "accel_collectives.h"
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
    float *master, *grads; /* device, fp32, gpt2.h's layout (the AdamW moments belong to accel_optim) */
    bf16 *w;               /* device, bf16 model copy */
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
    CARVE(loss_acc, float, 1); CARVE(stats, float, (1 - own) * L * B * NH * T); CARVE(scratch, float, scratch);
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

#define W_(m, t) ((m)->w + (m)->off[t])
#define G_(m, t) ((m)->grads + (m)->off[t])

/* Forward of one micro-batch (win: the device copy of the (B, T+1) windows); the classifier leaves dlogits (for a
   loss multiplied by loss_mult) in the logits buffer and adds the mean loss to a.loss_acc. */
static cudaError_t forward(model *m, const int32_t *win, float loss_mult) {
    const gpt2_config *c = &m->cfg;
    activations *a = &m->a;
    matmul_ctx *mm = &m->mm;
    cudaStream_t st = m->st;
    int B = m->B, T = m->T, C = c->channels, NH = c->num_heads, L = c->num_layers, BT = B * T;
    size_t btc = (size_t)BT * C, att_n = (size_t)B * NH * T * T, stats_n = (size_t)B * NH * T;
    if (!m->ready) GPT2_TRY(model_setup(m));
    GPT2_TRY(encoder_forward(a->encoded, win, W_(m, GPT2_WTE), W_(m, GPT2_WPE), B, T, C, st));
    /* the first block's LN1; every later LayerNorm comes fused with the residual add before it */
    GPT2_TRY(layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, a->encoded, W_(m, GPT2_LN1W), W_(m, GPT2_LN1B), BT, C,
                               st));
    for (int l = 0; l < L; ++l) {
        const bf16 *res = l == 0 ? a->encoded : a->res3 + (l - 1) * btc;
        bf16 *ln1 = a->ln1 + l * btc, *qkv = a->qkv + l * 3 * btc, *atty = a->atty + l * btc;
        bf16 *res2 = a->res2 + l * btc, *ln2 = a->ln2 + l * btc, *fch = a->fch + l * 4 * btc;
        bf16 *fch_gelu = a->fch_gelu + l * 4 * btc, *res3 = a->res3 + l * btc;
        /* the next LayerNorm: the following block's LN1, or after the last block the final one */
        int last = l == L - 1;
        bf16 *next_ln = last ? a->lnf : a->ln1 + (l + 1) * btc;
        float *next_mean = last ? a->lnf_mean : a->ln1_mean + (l + 1) * BT;
        float *next_rstd = last ? a->lnf_rstd : a->ln1_rstd + (l + 1) * BT;
        const bf16 *next_w = last ? W_(m, GPT2_LNFW) : W_(m, GPT2_LN1W) + (l + 1) * C;
        const bf16 *next_b = last ? W_(m, GPT2_LNFB) : W_(m, GPT2_LN1B) + (l + 1) * C;

        GPT2_TRY(matmul_forward(mm, qkv, ln1, W_(m, GPT2_QKVW) + (size_t)l * 3 * C * C, W_(m, GPT2_QKVB) + l * 3 * C,
                                BT, C, 3 * C, st));
        if (m->attention == GPT2_ATTENTION_CUDNN)
            GPT2_TRY(attention_forward_cudnn(atty, a->stats + l * stats_n, qkv, B, T, C, NH, st));
        else
            GPT2_TRY(attention_forward(atty, a->att + l * att_n, qkv, B, T, C, NH, g_blas, a->att_ptrs, st));
        GPT2_TRY(matmul_forward(mm, a->tmp, atty, W_(m, GPT2_ATTPROJW) + (size_t)l * C * C,
                                W_(m, GPT2_ATTPROJB) + l * C, BT, C, C, st));
        /* residual_forward(res2, res, tmp) + layernorm_forward(ln2, ..., res2, ...) */
        GPT2_TRY(residual_layernorm_forward(res2, ln2, a->ln2_mean + l * BT, a->ln2_rstd + l * BT, res, a->tmp,
                                            W_(m, GPT2_LN2W) + l * C, W_(m, GPT2_LN2B) + l * C, BT, C, st));
        /* matmul_forward(fch, ln2, ...) + gelu_forward(fch_gelu, fch) */
        GPT2_TRY(matmul_forward(mm, fch_gelu, ln2, W_(m, GPT2_FCW) + (size_t)l * 4 * C * C, W_(m, GPT2_FCB) + l * 4 * C,
                                BT, C, 4 * C, st, fch));
        GPT2_TRY(matmul_forward(mm, a->tmp, fch_gelu, W_(m, GPT2_FCPROJW) + (size_t)l * 4 * C * C,
                                W_(m, GPT2_FCPROJB) + l * C, BT, 4 * C, C, st));
        /* residual_forward(res3, res2, tmp) + the next layernorm_forward */
        GPT2_TRY(residual_layernorm_forward(res3, next_ln, next_mean, next_rstd, res2, a->tmp, next_w, next_b, BT, C,
                                            st));
    }
    GPT2_TRY(matmul_forward(mm, a->logits, a->lnf, W_(m, GPT2_WTE), NULL, BT, C, c->padded_vocab_size, st));
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
    size_t btc = (size_t)BT * C, att_n = (size_t)B * NH * T * T, stats_n = (size_t)B * NH * T;
    float *scr = a->scratch;
    /* LM head (tied): dlnf = dlogits · wte, dwte += dlogitsᵀ · lnf */
    GPT2_TRY(matmul_backward(mm, a->dc, G_(m, GPT2_WTE), NULL, a->logits, a->lnf, W_(m, GPT2_WTE), BT, C,
                             c->padded_vocab_size, scr, st));
    GPT2_TRY(cudaMemsetAsync(a->dres, 0, btc * sizeof(bf16), st));
    GPT2_TRY(layernorm_backward(a->dres, G_(m, GPT2_LNFW), G_(m, GPT2_LNFB), a->dc, a->res3 + (L - 1) * btc,
                                W_(m, GPT2_LNFW), a->lnf_mean, a->lnf_rstd, BT, C, scr, st));
    for (int l = L - 1; l >= 0; --l) { /* a->dres = d(residual3 of layer l) */
        const bf16 *res = l == 0 ? a->encoded : a->res3 + (l - 1) * btc;
        const bf16 *ln1 = a->ln1 + l * btc, *qkv = a->qkv + l * 3 * btc, *atty = a->atty + l * btc;
        const bf16 *res2 = a->res2 + l * btc, *ln2 = a->ln2 + l * btc, *fch = a->fch + l * 4 * btc;
        const bf16 *fch_gelu = a->fch_gelu + l * 4 * btc;
        /* matmul_backward(d4c, ..., fch_gelu, ...) + gelu_backward(d4c, fch) */
        GPT2_TRY(matmul_backward(mm, a->d4c, G_(m, GPT2_FCPROJW) + (size_t)l * 4 * C * C, G_(m, GPT2_FCPROJB) + l * C,
                                 a->dres, fch_gelu, W_(m, GPT2_FCPROJW) + (size_t)l * 4 * C * C, BT, 4 * C, C, scr, st,
                                 fch));
        GPT2_TRY(matmul_backward(mm, a->dc, G_(m, GPT2_FCW) + (size_t)l * 4 * C * C, G_(m, GPT2_FCB) + l * 4 * C,
                                 a->d4c, ln2, W_(m, GPT2_FCW) + (size_t)l * 4 * C * C, BT, C, 4 * C, scr, st));
        GPT2_TRY(layernorm_backward(a->dres, G_(m, GPT2_LN2W) + l * C, G_(m, GPT2_LN2B) + l * C, a->dc, res2,
                                    W_(m, GPT2_LN2W) + l * C, a->ln2_mean + l * BT, a->ln2_rstd + l * BT, BT, C, scr,
                                    st));
        GPT2_TRY(matmul_backward(mm, a->dc, G_(m, GPT2_ATTPROJW) + (size_t)l * C * C, G_(m, GPT2_ATTPROJB) + l * C,
                                 a->dres, atty, W_(m, GPT2_ATTPROJW) + (size_t)l * C * C, BT, C, C, scr, st));
        if (m->attention == GPT2_ATTENTION_CUDNN)
            GPT2_TRY(attention_backward_cudnn(a->dqkv, a->dc, qkv, atty, a->stats + l * stats_n, B, T, C, NH, st));
        else
            GPT2_TRY(attention_backward(a->dqkv, a->datt, a->dc, qkv, a->att + l * att_n, B, T, C, NH, g_blas,
                                        a->att_ptrs, st));
        GPT2_TRY(matmul_backward(mm, a->dc, G_(m, GPT2_QKVW) + (size_t)l * 3 * C * C, G_(m, GPT2_QKVB) + l * 3 * C,
                                 a->dqkv, ln1, W_(m, GPT2_QKVW) + (size_t)l * 3 * C * C, BT, C, 3 * C, scr, st));
        GPT2_TRY(layernorm_backward(a->dres, G_(m, GPT2_LN1W) + l * C, G_(m, GPT2_LN1B) + l * C, a->dc, res,
                                    W_(m, GPT2_LN1W) + l * C, a->ln1_mean + l * BT, a->ln1_rstd + l * BT, BT, C, scr,
                                    st));
    }
    return encoder_backward(G_(m, GPT2_WTE), G_(m, GPT2_WPE), a->dres, sorted_pos, seg_start, seg_tok, nseg, B, T, C,
                            st);
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

int main(int argc, char **argv) {
    gpt2_opts o;
    gpt2_config cfg;
    model M;
    accel acc;
    accel_desc desc;
    accel_data_seq_loader ld;
    accel_data_seq_desc sd;
    accel_data_stager stager;
    accel_coll *coll = NULL;
    accel_coll_reducer *red = NULL;
    accel_ckpt *ck = NULL;
    accel_ckpt_file *initf = NULL;
    accel_optim *opt = NULL;
    accel_prof *prof = NULL;
    accel_prof_desc pfd;
    accel_optim_schedule sched;
    accel_track trk;
    accel_tensor params[GPT2_NUM_TENSORS], grads[GPT2_NUM_TENSORS], model16[GPT2_NUM_TENSORS];
    char prefix[16];
    FILE *lf = NULL;
    float *host = NULL;
    int32_t *count = NULL;
    int rc = 1, inited = 0, have_stager = 0, tracking = 0, ndev = 0, k, B, T, P, micro = 0;
    double t0 = 0.0, t_bench = 0.0, lr = 0.0, norm = 0.0, lossv = 0.0, peak;
    int64_t first_step, step = 0, bench_from = -1;
    size_t stage_bytes;
    int pr = gpt2_parse_args(argc, argv, &o);
    if (pr >= 0) return pr;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
        (void)cudaGetLastError();
        printf("train_gpt2: no CUDA device: skipping\n");
        return 77;
    }
    memset(&M, 0, sizeof M);
    memset(&ld, 0, sizeof ld);
    memset(&stager, 0, sizeof stager);
    memset(&trk, 0, sizeof trk);

    memset(&desc, 0, sizeof desc);
    desc.mixed_precision = ACCEL_PRECISION_BF16;
    desc.gradient_accumulation_steps = o.accum;
    if (accel_init(&acc, &desc) != ACCEL_OK) {
        fprintf(stderr, "train_gpt2: accel_init: %s\n", accel_last_error(&acc));
        accel_shutdown(&acc);
        return 1;
    }
    inited = 1;
    if (acc.device < 0) {
        fprintf(stderr, "train_gpt2: accel chose the CPU (ACCELERATE_USE_CPU?); this trainer needs a GPU\n");
        goto fail;
    }
    B = o.batch;
    T = o.seq;
    P = acc.num_processes;
    peak = o.peak_tflops > 0 ? o.peak_tflops * 1e12 : peak_flops(acc.device);

    /* 1. the model: from --init (Hugging Face names) or GPT-2's initialization, on the host, then to the device */
    if (o.init) CHECK(accel_ckpt_file_open(&acc, o.init, &initf));
    if (gpt2_resolve_config(&acc, &o, initf, &cfg, prefix) != 0) goto fail;
    M.cfg = cfg;
    M.B = B;
    M.T = T;
    M.st = (cudaStream_t)acc.stream;
    M.attention = o.attention;
    M.n = gpt2_offsets(&cfg, M.off);
    host = (float *)accel_host_alloc(&acc, M.n * sizeof(float));
    if (!host) goto fail;
    if (initf) {
        CHECK(gpt2_hf_load(&acc, initf, &cfg, prefix, host));
        accel_ckpt_file_destroy(initf);
        initf = NULL;
    } else {
        gpt2_init_params(&cfg, host, o.seed);
    }
    {
        size_t act = carve_activations(NULL, &M);
        M.master = (float *)accel_device_alloc(&acc, M.n * sizeof(float));
        M.grads = (float *)accel_device_alloc(&acc, M.n * sizeof(float));
        M.w = (bf16 *)accel_device_alloc(&acc, M.n * sizeof(bf16));
        M.arena = (char *)accel_device_alloc(&acc, act);
        if (!M.master || !M.grads || !M.w || !M.arena) {
            fprintf(stderr, "train_gpt2: out of device memory (%zu parameters, %.2f GiB of activations)\n", M.n,
                    act / 1073741824.0);
            goto fail;
        }
        carve_activations(M.arena, &M);
    }
    CUDA_OK(cudaMemcpy(M.master, host, M.n * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(M.grads, 0, M.n * sizeof(float)));
    CUDA_OK(cudaMemset(M.a.loss_acc, 0, sizeof(float)));
    gpt2_describe(&cfg, M.master, ACCEL_F32, params);
    gpt2_describe(&cfg, M.grads, ACCEL_F32, grads);
    gpt2_describe(&cfg, M.w, ACCEL_BF16, model16);
    /* AdamW (decay on the 2-D weights) writing the bf16 copy; cosine schedule with warmup on the scheduler count */
    CHECK(gpt2_optim_create(&acc, params, grads, model16, o.lr, o.weight_decay, o.sr, o.seed, &opt));
    sched = gpt2_schedule(o.warmup, o.steps, P);
    if (cublasCreate(&g_blas) != CUBLAS_STATUS_SUCCESS || cublasSetStream(g_blas, M.st) != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "train_gpt2: cuBLAS initialization failed\n");
        goto fail;
    }

    /* 2. data: each rank's (B, T+1) windows, staged with the token segments of the embedding backward */
    memset(&sd, 0, sizeof sd);
    sd.files = o.data;
    sd.num_files = o.ndata;
    sd.batch_size = B;
    sd.seq_len = T;
    sd.shuffle = o.shuffle;
    sd.seed = o.seed;
    CHECK(accel_data_seq_init(&acc, &ld, &sd));
    if (accel_data_seq_len(&ld) < 1) {
        fprintf(stderr, "train_gpt2: the shards hold less than one global batch of %d x %d tokens\n", P * B, T + 1);
        goto fail;
    }
    stage_bytes = ((size_t)B * (T + 1) + 3 * (size_t)B * T + 1) * sizeof(int32_t);
    CHECK(accel_data_stager_init(&acc, &stager, stage_bytes));
    have_stager = 1;
    count = (int32_t *)accel_host_alloc(&acc, (size_t)cfg.vocab_size * sizeof(int32_t));
    if (!count) goto fail;
    memset(count, 0, (size_t)cfg.vocab_size * sizeof(int32_t));

    /* 3. gradient reducer: one contiguous fp32 buffer → one in-place all-reduce (NCCL between GPUs; nothing on one) */
    CHECK(accel_coll_create(&acc, NULL, &coll));
    CHECK(accel_coll_reducer_create(coll, NULL, &red));
    CHECK(accel_coll_reducer_add(red, grads, GPT2_NUM_TENSORS));
    CHECK(accel_coll_reducer_finalize(red));

    /* 4. checkpoints: fp32 master weights and moments (device buffers, staged by accel), the optimizer's step counts,
          loader, counters, RNG */
    if (o.ckpt_dir) {
        accel_ckpt_desc kd;
        const accel_tensor *moments;
        int nmoments;
        memset(&kd, 0, sizeof kd);
        kd.project_dir = o.ckpt_dir;
        kd.automatic_checkpoint_naming = 1;
        kd.total_limit = 2;
        CHECK(accel_ckpt_create(&acc, &kd, &ck));
        CHECK(accel_ckpt_register_model(ck, params, GPT2_NUM_TENSORS));
        CHECK(accel_optim_state_tensors(opt, &moments, &nmoments));
        CHECK(accel_ckpt_register_optimizer(ck, moments, nmoments));
        CHECK(accel_ckpt_register(ck, "optim_state", accel_optim_state_save, accel_optim_state_load, opt));
        CHECK(accel_ckpt_register(ck, "loader", accel_data_seq_state_save, accel_data_seq_state_load, &ld));
        if (o.resume) {
            accel_result r = accel_ckpt_load_state(ck, NULL);
            if (r == ACCEL_ERR_NOT_FOUND) accel_print(&acc, "no checkpoint in %s: starting fresh\n", o.ckpt_dir);
            else CHECK(r);
            if (r == ACCEL_OK) accel_print(&acc, "resumed at step %lld\n", (long long)acc.optimizer_steps);
        }
    }
    {   /* the bf16 copy of the master weights: what the last step wrote (with --sr the same bits: accel_optim's
           stochastic rounding is accel_amp's rule for (seed, the parameter's step count, flat index)) */
        accel_amp_sr sr;
        memset(&sr, 0, sizeof sr);
        sr.seed = o.seed;
        sr.step = (uint64_t)acc.optimizer_steps;
        CHECK(accel_amp_master_to_model(&acc, M.master, M.w, ACCEL_BF16, M.n, o.sr && acc.optimizer_steps ? &sr : NULL));
    }
    first_step = acc.optimizer_steps;
    if (o.loss_file && acc.is_main_process && !(lf = gpt2_open_loss_file(o.loss_file, o.resume, first_step))) {
        fprintf(stderr, "train_gpt2: cannot write %s\n", o.loss_file);
        goto fail;
    }
    if (o.log_dir) {
        accel_track_desc td;
        accel_track_param hp[8];
        memset(&td, 0, sizeof td);
        td.log_with = ACCEL_TRACK_ALL;
        td.logging_dir = o.log_dir;
        CHECK(accel_track_init(&acc, &trk, &td));
        tracking = 1;
        hp[0] = accel_track_param_int("layers", cfg.num_layers);
        hp[1] = accel_track_param_int("heads", cfg.num_heads);
        hp[2] = accel_track_param_int("channels", cfg.channels);
        hp[3] = accel_track_param_int("vocab", cfg.vocab_size);
        hp[4] = accel_track_param_int("batch", B);
        hp[5] = accel_track_param_int("seq", T);
        hp[6] = accel_track_param_int("accum", acc.gradient_accumulation_steps);
        hp[7] = accel_track_param_number("lr", o.lr);
        CHECK(accel_track_init_trackers(&trk, "train_gpt2", hp, 8));
    }
    accel_print(&acc, "train_gpt2: L=%d H=%d C=%d V=%d (padded %d) block %d: %zu parameters | %d GPU(s) x batch %d x "
                "seq %d x accum %d | bf16%s | %lld global batches per epoch | reducer: %s%s\n", cfg.num_layers,
                cfg.num_heads, cfg.channels, cfg.vocab_size, cfg.padded_vocab_size, cfg.max_seq_len, M.n, P, B, T,
                acc.gradient_accumulation_steps, o.sr ? " (stochastic rounding)" : "",
                (long long)accel_data_seq_len(&ld), accel_coll_reducer_is_flat(red) ? "one in-place all-reduce" : "buckets",
                o.bench_noop ? " | BENCHMARK: accel's calls are no-ops" : "");

    /* the profiler: disabled without --profile (then every begin/end below is one flag test); one profiler step per
       optimizer step; device times are CUDA events on acc.stream (the model's stream), read without synchronizing */
    memset(&pfd, 0, sizeof pfd);
    pfd.disabled = !o.profile_dir;
    pfd.trace_dir = o.profile_dir;
    CHECK(accel_prof_create(&acc, &pfd, &prof));
#define PROF_BEGIN(id) CHECK(accel_prof_begin(prof, (id)))
#define PROF_END(id) CHECK(accel_prof_end(prof, (id)))

    /* 5. the loop (the same as gpt2_cpu.c's) */
    t0 = accel_now();
    {
        void *dev = NULL;
        int nseg = 0;
        while (acc.optimizer_steps < o.steps) {
            int got = 0;
            int32_t bad, *hbuf;
            const int32_t *win;
            void *hv;
            if (!o.bench_noop || !dev) {
                PROF_BEGIN(ACCEL_PROF_DATA);
                CHECK(accel_data_stager_host(&stager, &hv));
                hbuf = (int32_t *)hv;
                CHECK(accel_data_seq_next(&ld, hbuf, &got));
                if (!got) { /* end of an epoch: the loader advanced it */
                    PROF_END(ACCEL_PROF_DATA);
                    continue;
                }
                if (gpt2_check_tokens(hbuf, (size_t)B * (T + 1), cfg.vocab_size, &bad) != 0) {
                    fprintf(stderr, "train_gpt2: token %d in the data is outside the vocabulary (%d)\n", (int)bad,
                            cfg.vocab_size);
                    goto fail;
                }
                nseg = prepare_token_segments(hbuf, B, T, count);
                CHECK(accel_data_stager_submit(&stager, &dev));
                PROF_END(ACCEL_PROF_DATA);
            }
            win = (const int32_t *)dev;
            if (!o.bench_noop) accel_accumulate_begin(&acc);
            PROF_BEGIN(ACCEL_PROF_FORWARD);
            CUDA_OK(forward(&M, win, o.bench_noop ? 1.0f : 1.0f / accel_loss_divisor(&acc)));
            PROF_END(ACCEL_PROF_FORWARD);
            PROF_BEGIN(ACCEL_PROF_BACKWARD);
            CUDA_OK(backward(&M, win + (size_t)B * (T + 1), win + (size_t)B * (T + 1) + (size_t)B * T,
                             win + (size_t)B * (T + 1) + 2 * (size_t)B * T + 1, nseg));
            PROF_END(ACCEL_PROF_BACKWARD);
            micro++;
            if (o.bench_noop) { /* the same math without accel's bookkeeping: one micro-batch per step, no clipping,
                                   no sync, no logs; the optimizer (the model's math) still steps */
                step++;
                CHECK(accel_optim_step(opt, NULL));
                CUDA_OK(cudaMemsetAsync(M.grads, 0, M.n * sizeof(float), M.st));
                if (step == 3) {
                    CUDA_OK(cudaStreamSynchronize(M.st));
                    t_bench = accel_now();
                    bench_from = step;
                }
                if (step == o.steps) break;
                continue;
            }
            if (accel_should_reduce(&acc)) {
                PROF_BEGIN(ACCEL_PROF_GRAD_SYNC);
                for (k = 0; k < GPT2_NUM_TENSORS; ++k) CHECK(accel_coll_grad_ready(red, k));
                CHECK(accel_coll_reducer_wait(red)); /* average over ranks (NCCL on acc.stream) */
                PROF_END(ACCEL_PROF_GRAD_SYNC);
            }
            if (acc.sync_gradients) {
                accel_optim_step_args sa;
                float coef = 1.0f;
                PROF_BEGIN(ACCEL_PROF_OPTIMIZER);
                step = acc.optimizer_steps + 1;
                if (o.dump_grads && step == 1) {
                    CUDA_OK(cudaMemcpy(host, M.grads, M.n * sizeof(float), cudaMemcpyDeviceToHost));
                    if (acc.is_main_process) CHECK(gpt2_save_hf_file(&acc, &cfg, host, o.dump_grads));
                }
                /* clip_grad_norm_: the norm (one read of the gradients), the coefficient applied inside the step */
                CHECK(accel_amp_grad_norm(&acc, grads, GPT2_NUM_TENSORS, 2.0, 0, &norm));
                if (o.clip > 0) coef = accel_optim_clip_coef(norm, o.clip);
                memset(&sa, 0, sizeof sa);
                sa.clip_coef = o.clip > 0 ? &coef : NULL;
                CHECK(accel_optim_apply_schedule(opt, &sched, acc.scheduler_steps));
                lr = accel_optim_lr(opt, 0);
                CHECK(accel_optim_step(opt, &sa)); /* params, moments and the bf16 copy in one pass */
                accel_optimizer_step_done(&acc, 0);
                CUDA_OK(cudaMemsetAsync(M.grads, 0, M.n * sizeof(float), M.st)); /* zero_grad */
                PROF_END(ACCEL_PROF_OPTIMIZER);
            }
            accel_scheduler_steps(&acc, 0);
            accel_accumulate_end(&acc);
            if (!acc.sync_gradients) continue;

            PROF_BEGIN(ACCEL_PROF_LOGGING);
            {   /* after the step: mean loss over the micro-batches and ranks, logs, checkpoint */
                float l = 0.0f;
                CUDA_OK(cudaMemcpyAsync(&l, M.a.loss_acc, sizeof l, cudaMemcpyDeviceToHost, M.st));
                CUDA_OK(cudaMemsetAsync(M.a.loss_acc, 0, sizeof(float), M.st));
                CUDA_OK(cudaStreamSynchronize(M.st));
                lossv = (double)l / micro;
                micro = 0;
            }
            CHECK(accel_host_allreduce_f64(&acc, &lossv, 1, ACCEL_HOST_SUM));
            lossv /= P;
            if (step == first_step + 3) { /* steady state from here (the first steps warm up cuBLAS and caches) */
                t_bench = accel_now();
                bench_from = step;
            }
            if (lf) {
                fprintf(lf, "%lld %.9g %.9g\n", (long long)step, lossv, lr);
                fflush(lf);
            }
            {
                double el = accel_now() - t0;
                double tps = (double)(step - first_step) * B * T * acc.gradient_accumulation_steps * P / (el > 0 ? el : 1e-9);
                double mfu = peak > 0 ? gpt2_flops_per_token(&cfg, T) * tps / (peak * P) : 0.0;
                if (o.print_every && (step % o.print_every == 0 || step == o.steps)) {
                    char mfus[32] = "n/a";
                    if (peak > 0) snprintf(mfus, sizeof mfus, "%.1f%%", 100.0 * mfu);
                    accel_print(&acc, "step %5lld/%d | loss %.6f | lr %.3e | norm %.4f | %.1f ms/step | %.0f tok/s | "
                                "MFU %s\n", (long long)step, o.steps, lossv, lr, norm,
                                1000.0 * el / (double)(step - first_step), tps, mfus);
                }
                if (tracking) {
                    accel_track_value tv[5];
                    tv[0] = accel_track_scalar("train/loss", lossv);
                    tv[1] = accel_track_scalar("train/lr", lr);
                    tv[2] = accel_track_scalar("train/grad_norm", norm);
                    tv[3] = accel_track_scalar("perf/tokens_per_s", tps);
                    tv[4] = accel_track_scalar("perf/mfu", mfu);
                    CHECK(accel_track_log(&trk, tv, 5, step));
                }
            }
            PROF_END(ACCEL_PROF_LOGGING);
            if (ck && ((o.ckpt_every && step % o.ckpt_every == 0) || step == o.steps)) {
                PROF_BEGIN(ACCEL_PROF_CHECKPOINT);
                CHECK(accel_ckpt_save_state(ck, NULL, NULL, 0));
                PROF_END(ACCEL_PROF_CHECKPOINT);
            }
            CHECK(accel_prof_step(prof));
            if (o.kill_at && step == o.kill_at) {
                if (lf) fclose(lf);
                lf = NULL;
                fflush(stdout);
                accel_wait_for_everyone(&acc);
                raise(SIGKILL);
            }
        }
    }
    CUDA_OK(cudaStreamSynchronize(M.st));
    if (bench_from >= 0 && step > bench_from) { /* one line for bench/trainer/bench_gpt2.py */
        double el = accel_now() - t_bench;
        double tps = (double)(step - bench_from) * B * T * (o.bench_noop ? 1 : acc.gradient_accumulation_steps) * P / el;
        accel_print(&acc, "summary: {\"steps\": %lld, \"tokens_per_s\": %.1f, \"step_ms\": %.3f, \"mfu\": %.4f, "
                    "\"noop_accel\": %d}\n", (long long)(step - bench_from), tps,
                    1000.0 * el / (double)(step - bench_from),
                    peak > 0 ? gpt2_flops_per_token(&cfg, T) * tps / (peak * P) : 0.0, o.bench_noop);
    }
    if (o.profile_dir) { /* this rank's phase table, the per-rank traces and, on several ranks, the merge */
        if (acc.is_main_process) CHECK(accel_prof_print_table(prof, stdout));
        CHECK(accel_prof_write_trace(prof));
        if (P > 1) CHECK(accel_prof_merge_trace(prof, NULL));
    }
    if (o.export_dir) {
        CUDA_OK(cudaMemcpy(host, M.master, M.n * sizeof(float), cudaMemcpyDeviceToHost));
        CHECK(gpt2_export(&acc, &cfg, host, o.export_dir));
        accel_print(&acc, "exported %s/model.safetensors (Hugging Face GPT-2 names) and config.json\n", o.export_dir);
    }
    if (tracking) CHECK(accel_track_deinit(&trk));
    tracking = 0;
    rc = 0;
fail:
    if (lf) fclose(lf);
    if (tracking) accel_track_deinit(&trk);
    kernels_destroy(&M);
    if (g_blas) cublasDestroy(g_blas);
    accel_ckpt_file_destroy(initf);
    accel_ckpt_destroy(ck);
    accel_optim_destroy(opt);
    accel_prof_destroy(prof);
    accel_coll_reducer_destroy(red);
    accel_coll_destroy(coll);
    if (have_stager) accel_data_stager_deinit(&stager);
    accel_data_seq_deinit(&ld);
    accel_host_free(&acc, host);
    accel_host_free(&acc, count);
    accel_device_free(&acc, M.master);
    accel_device_free(&acc, M.grads);
    accel_device_free(&acc, M.w);
    accel_device_free(&acc, M.arena);
    if (rc && inited && acc.num_processes > 1) { /* peers may wait in a collective: let the launcher end the job */
        fflush(stdout);
        fflush(stderr);
        exit(rc);
    }
    if (inited) accel_shutdown(&acc);
    return rc;
}
