/* train_gpt2.cu — GPT-2 on CUDA in the style of karpathy/llm.c, with accel around the model.

   The model (gpt2.h: the same layout, initialization and Hugging Face names as gpt2_cpu.c, its float32 oracle):
   token + position embeddings, L pre-LN blocks with causal self-attention, a tied LM head. bf16 weights and
   activations, fp32 master weights, gradients and AdamW moments. The GEMMs are cuBLAS (bf16 inputs, fp32
   accumulation); everything else is a kernel below: LayerNorm forward/backward, the attention softmax forward/backward
   and the head permutations around cuBLAS's batched GEMMs, GELU (tanh) forward/backward with the fc bias, residual
   adds with the projection biases, a fused softmax + cross-entropy + gradient kernel for the LM head, the embedding
   backward, and column sums for the bias and LayerNorm gradients. Every reduction has a fixed order (no float
   atomics), so a run is bit-reproducible and a resumed run equals an uninterrupted one.

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
#include "accel_safetensors.h"
#include "accel_ckpt.h"
#include "accel_collectives.h"
#include "accel_ddp.h"
#include "accel_data.h"
#include "accel_optim.h"
#include "accel_profile.h"
#include "accel_trackers.h"
#include "gpt2.h"
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <signal.h>

typedef __nv_bfloat16 bf16;

/* ------------------------------------------------------------------------------------------------- kernels */
__device__ __forceinline__ float f32(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ bf16 bf(float x) { return __float2bfloat16(x); }
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* out[b,t,:] = wte[token] + wpe[t]; the window row b holds T+1 tokens (inputs are its first T) */
__global__ void encoder_forward_kernel(bf16 *out, const int32_t *win, const bf16 *wte, const bf16 *wpe, int B, int T,
                                       int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)B * T * C) return;
    int c = (int)(i % C), bt = (int)(i / C), b = bt / T, t = bt % T;
    int tok = win[(size_t)b * (T + 1) + t];
    out[i] = bf(f32(wte[(size_t)tok * C + c]) + f32(wpe[(size_t)t * C + c]));
}

/* dwte[token] += Σ dout over the positions holding that token: one block row per distinct token (segments of the
   positions sorted by token, made on the host), a fixed summation order. */
__global__ void encoder_backward_wte_kernel(float *dwte, const bf16 *dout, const int32_t *sorted_pos,
                                            const int32_t *seg_start, const int32_t *seg_tok, int C) {
    int seg = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float s = 0.0f;
    for (int i = seg_start[seg]; i < seg_start[seg + 1]; ++i) s += f32(dout[(size_t)sorted_pos[i] * C + c]);
    dwte[(size_t)seg_tok[seg] * C + c] += s;
}
/* dwpe[t] += Σ_b dout[b, t] */
__global__ void encoder_backward_wpe_kernel(float *dwpe, const bf16 *dout, int B, int T, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)T * C) return;
    float s = 0.0f;
    for (int b = 0; b < B; ++b) s += f32(dout[(size_t)b * T * C + i]);
    dwpe[i] += s;
}

/* One warp per row: y = (x - mean) * rstd * w + b (eps 1e-5), keeps mean and rstd. */
__global__ void layernorm_forward_kernel(bf16 *out, float *mean, float *rstd, const bf16 *inp, const bf16 *w,
                                         const bf16 *b, int N, int C) {
    int row = (int)(((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32), lane = threadIdx.x % 32;
    if (row >= N) return;
    const bf16 *x = inp + (size_t)row * C;
    float s = 0.0f, v = 0.0f;
    for (int i = lane; i < C; i += 32) s += f32(x[i]);
    float m = warp_sum(s) / C;
    for (int i = lane; i < C; i += 32) {
        float d = f32(x[i]) - m;
        v += d * d;
    }
    float r = 1.0f / sqrtf(warp_sum(v) / C + 1e-5f);
    bf16 *o = out + (size_t)row * C;
    for (int i = lane; i < C; i += 32) o[i] = bf((f32(x[i]) - m) * r * f32(w[i]) + f32(b[i]));
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = r;
    }
}

/* One warp per row: dinp += (w·d - mean(w·d) - norm·mean(w·d·norm)) · rstd (dinp is the bf16 residual gradient). */
__global__ void layernorm_backward_kernel(bf16 *dinp, const bf16 *dout, const bf16 *inp, const bf16 *w,
                                          const float *mean, const float *rstd, int N, int C) {
    int row = (int)(((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32), lane = threadIdx.x % 32;
    if (row >= N) return;
    const bf16 *d = dout + (size_t)row * C, *x = inp + (size_t)row * C;
    float m = mean[row], r = rstd[row], a = 0.0f, an = 0.0f;
    for (int i = lane; i < C; i += 32) {
        float dn = f32(w[i]) * f32(d[i]);
        a += dn;
        an += dn * (f32(x[i]) - m) * r;
    }
    a = warp_sum(a) / C;
    an = warp_sum(an) / C;
    bf16 *dx = dinp + (size_t)row * C;
    for (int i = lane; i < C; i += 32) {
        float norm = (f32(x[i]) - m) * r, dn = f32(w[i]) * f32(d[i]);
        dx[i] = bf(f32(dx[i]) + (dn - a - norm * an) * r);
    }
}

/* Column sums in two deterministic stages. Stage 1: split `split` of the rows, 32 columns per block (x), 8 row
   lanes (y) → partial[split][col]. With inp (LayerNorm): partial_w += d·norm, partial += d; else partial += d. */
#define COLSUM_SPLITS 64
__global__ void colsum_partial_kernel(float *partial, float *partial_w, const bf16 *d, const bf16 *inp,
                                      const float *mean, const float *rstd, int N, int C) {
    __shared__ float sb[8][33], sw[8][33];
    int col = blockIdx.x * 32 + threadIdx.x, split = blockIdx.y;
    int per = (N + COLSUM_SPLITS - 1) / COLSUM_SPLITS, r0 = split * per, r1 = min(N, r0 + per);
    float b = 0.0f, w = 0.0f;
    if (col < C)
        for (int r = r0 + threadIdx.y; r < r1; r += 8) {
            float g = f32(d[(size_t)r * C + col]);
            b += g;
            if (inp) w += g * (f32(inp[(size_t)r * C + col]) - mean[r]) * rstd[r];
        }
    sb[threadIdx.y][threadIdx.x] = b;
    sw[threadIdx.y][threadIdx.x] = w;
    __syncthreads();
    if (threadIdx.y == 0 && col < C) {
        for (int y = 1; y < 8; ++y) {
            b += sb[y][threadIdx.x];
            w += sw[y][threadIdx.x];
        }
        partial[(size_t)split * C + col] = b;
        if (inp) partial_w[(size_t)split * C + col] = w;
    }
}
/* Stage 2: dst[c] += Σ_split partial[split][c] */
__global__ void colsum_final_kernel(float *dst, const float *partial, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float s = 0.0f;
    for (int k = 0; k < COLSUM_SPLITS; ++k) s += partial[(size_t)k * C + c];
    dst[c] += s;
}

/* qkv (B, T, 3, NH, HS) → q, k, v (B, NH, T, HS). With bias: qkv += bias first (in place, the stored activation). */
__global__ void permute_kernel(bf16 *q, bf16 *k, bf16 *v, bf16 *qkv, const bf16 *bias, int B, int T, int NH, int HS) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)B * NH * T * HS) return;
    int d = (int)(i % HS), t = (int)((i / HS) % T), h = (int)((i / ((size_t)HS * T)) % NH), b = (int)(i / ((size_t)HS * T * NH));
    int C = NH * HS;
    bf16 *src = qkv + ((size_t)b * T + t) * 3 * C + h * HS + d;
    if (bias) {
        src[0] = bf(f32(src[0]) + f32(bias[h * HS + d]));
        src[C] = bf(f32(src[C]) + f32(bias[C + h * HS + d]));
        src[2 * C] = bf(f32(src[2 * C]) + f32(bias[2 * C + h * HS + d]));
    }
    q[i] = src[0];
    k[i] = src[C];
    v[i] = src[2 * C];
}
/* (B, NH, T, HS) → (B, T, C) at column offset `col` of rows of `width` (C for y, 3C for dqkv). */
__global__ void unpermute_kernel(bf16 *out, const bf16 *in, int B, int T, int NH, int HS, int width, int col) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)B * NH * T * HS) return;
    int d = (int)(i % HS), t = (int)((i / HS) % T), h = (int)((i / ((size_t)HS * T)) % NH), b = (int)(i / ((size_t)HS * T * NH));
    out[((size_t)b * T + t) * width + col + h * HS + d] = in[i];
}
/* (B, T, C) → (B, NH, T, HS) */
__global__ void permute_rows_kernel(bf16 *out, const bf16 *in, int B, int T, int NH, int HS) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)B * NH * T * HS) return;
    int d = (int)(i % HS), t = (int)((i / HS) % T), h = (int)((i / ((size_t)HS * T)) % NH), b = (int)(i / ((size_t)HS * T * NH));
    out[i] = in[((size_t)b * T + t) * NH * HS + h * HS + d];
}

/* Causal softmax in place, one warp per row (B·NH·T rows of T; the scale was applied by the GEMM); 0 above the
   diagonal, so the following GEMM can use the full row. */
__global__ void softmax_forward_kernel(bf16 *att, int rows, int T) {
    int row = (int)(((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32), lane = threadIdx.x % 32;
    if (row >= rows) return;
    int t = row % T;
    bf16 *x = att + (size_t)row * T;
    float mx = -INFINITY, s = 0.0f;
    for (int j = lane; j <= t; j += 32) mx = fmaxf(mx, f32(x[j]));
    mx = warp_max(mx);
    for (int j = lane; j <= t; j += 32) s += expf(f32(x[j]) - mx);
    s = 1.0f / warp_sum(s);
    for (int j = lane; j < T; j += 32) x[j] = j <= t ? bf(expf(f32(x[j]) - mx) * s) : bf(0.0f);
}
/* datt → dpreatt in place: a·(da - Σ a·da) on the causal part, 0 above it. */
__global__ void softmax_backward_kernel(bf16 *datt, const bf16 *att, int rows, int T) {
    int row = (int)(((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32), lane = threadIdx.x % 32;
    if (row >= rows) return;
    int t = row % T;
    bf16 *d = datt + (size_t)row * T;
    const bf16 *a = att + (size_t)row * T;
    float s = 0.0f;
    for (int j = lane; j <= t; j += 32) s += f32(a[j]) * f32(d[j]);
    s = warp_sum(s);
    for (int j = lane; j < T; j += 32) d[j] = j <= t ? bf(f32(a[j]) * (f32(d[j]) - s)) : bf(0.0f);
}

#define GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */
/* h += bias (stored: backward reads it); g = gelu_tanh(h) */
__global__ void bias_gelu_forward_kernel(bf16 *g, bf16 *h, const bf16 *bias, size_t n, int OC) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    bf16 hb = bf(f32(h[i]) + f32(bias[i % OC]));
    float x = f32(hb);
    h[i] = hb;
    g[i] = bf(0.5f * x * (1.0f + tanhf(GELU_SCALE * (x + 0.044715f * x * x * x))));
}
/* d = d · gelu'(h), in place */
__global__ void gelu_backward_kernel(bf16 *d, const bf16 *h, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = f32(h[i]), u = GELU_SCALE * (x + 0.044715f * x * x * x), th = tanhf(u);
    float grad = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
    d[i] = bf(f32(d[i]) * grad);
}
/* out = a + b + bias (the projection's bias folded into the residual add) */
__global__ void residual_bias_kernel(bf16 *out, const bf16 *a, const bf16 *b, const bf16 *bias, size_t n, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = bf(f32(a[i]) + f32(b[i]) + f32(bias[i % C]));
}

/* The LM head's loss and gradient in one pass per row: loss = logsumexp(z[:V]) - z[target] (online max/sum), then
   z → (softmax - onehot) · dloss in place (bf16), the padded columns 0. One block per row. */
#define CE_THREADS 512
__global__ void __launch_bounds__(CE_THREADS) fused_classifier_kernel(bf16 *logits, float *losses,
                                                                       const int32_t *win, int T, int V, int Vp,
                                                                       float dloss) {
    __shared__ float sm[CE_THREADS / 32], ss[CE_THREADS / 32], res[2];
    int row = blockIdx.x, tid = threadIdx.x, b = row / T, t = row % T;
    int target = win[(size_t)b * (T + 1) + t + 1];
    bf16 *z = logits + (size_t)row * Vp;
    float m = -INFINITY, s = 0.0f;
    for (int i = tid; i < V; i += CE_THREADS) {
        float v = f32(z[i]);
        if (v > m) {
            s = s * expf(m - v) + 1.0f;
            m = v;
        } else {
            s += expf(v - m);
        }
    }
    for (int o = 16; o > 0; o >>= 1) { /* combine (m, s) pairs within the warp */
        float om = __shfl_xor_sync(0xffffffffu, m, o), os = __shfl_xor_sync(0xffffffffu, s, o), nm = fmaxf(m, om);
        s = (s > 0.0f ? s * expf(m - nm) : 0.0f) + (os > 0.0f ? os * expf(om - nm) : 0.0f);
        m = nm;
    }
    if (tid % 32 == 0) {
        sm[tid / 32] = m;
        ss[tid / 32] = s;
    }
    __syncthreads();
    if (tid == 0) {
        float M = sm[0], S = ss[0];
        for (int w = 1; w < CE_THREADS / 32; ++w) {
            float nm = fmaxf(M, sm[w]);
            S = (S > 0.0f ? S * expf(M - nm) : 0.0f) + (ss[w] > 0.0f ? ss[w] * expf(sm[w] - nm) : 0.0f);
            M = nm;
        }
        res[0] = M + logf(S); /* logsumexp */
        res[1] = f32(z[target]);
    }
    __syncthreads();
    float lse = res[0];
    for (int i = tid; i < Vp; i += CE_THREADS)
        z[i] = i < V ? bf((expf(f32(z[i]) - lse) - (i == target ? 1.0f : 0.0f)) * dloss) : bf(0.0f);
    if (tid == 0) losses[row] = lse - res[1];
}
/* acc += mean(losses) in a fixed order (one block) */
__global__ void loss_mean_kernel(float *acc, const float *losses, int n) {
    __shared__ float sh[32];
    float s = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += losses[i];
    s = warp_sum(s);
    if (threadIdx.x % 32 == 0) sh[threadIdx.x / 32] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        float t = 0.0f;
        for (int w = 0; w < (int)blockDim.x / 32; ++w) t += sh[w];
        acc[0] += t / n;
    }
}

/* ------------------------------------------------------------------------------------------------ cuBLAS */
/* Row-major GEMMs on column-major cuBLAS (a row-major X is the column-major Xᵀ), bf16 inputs, fp32 accumulation,
   output bf16 or fp32 (ot); batched over `batch` matrices with the given element strides.
     GEMM_NT: out[M,N] = α A[M,K]·B[N,K]ᵀ + β out      (a linear layer: inp · Wᵀ)
     GEMM_NN: out[M,N] = α A[M,K]·B[K,N] + β out
     GEMM_TN: out[M,N] = α A[K,M]ᵀ·B[K,N] + β out      (a weight gradient: doutᵀ · inp) */
enum { GEMM_NT, GEMM_NN, GEMM_TN };
static cublasHandle_t g_blas;
static cublasStatus_t gemm(int kind, void *out, cudaDataType ot, const bf16 *A, const bf16 *B, int M, int N, int K,
                           float alpha, float beta, int batch = 1, long long sA = 0, long long sB = 0, long long sO = 0) {
    /* column-major: outᵀ[N,M] = op(Bᵀ) · op(Aᵀ) */
    cublasOperation_t opB = kind == GEMM_NT ? CUBLAS_OP_T : CUBLAS_OP_N, opA = kind == GEMM_TN ? CUBLAS_OP_T : CUBLAS_OP_N;
    int ldb = kind == GEMM_NT ? K : N, lda = kind == GEMM_TN ? M : K;
    if (batch == 1)
        return cublasGemmEx(g_blas, opB, opA, N, M, K, &alpha, B, CUDA_R_16BF, ldb, A, CUDA_R_16BF, lda, &beta, out,
                            ot, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    return cublasGemmStridedBatchedEx(g_blas, opB, opA, N, M, K, &alpha, B, CUDA_R_16BF, ldb, sB, A, CUDA_R_16BF, lda,
                                      sA, &beta, out, ot, N, sO, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

/* ------------------------------------------------------------------------------------------------- model */
typedef struct activations {
    /* bf16, kept for backward (per layer: L × the size) */
    bf16 *encoded, *ln1, *qkv, *atty, *att, *res2, *ln2, *fch, *fch_gelu, *res3, *lnf, *logits;
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd, *lnf_mean, *lnf_rstd, *losses, *loss_acc, *partial;
    /* scratch (one layer) */
    bf16 *tmp, *qp, *kp, *vp, *yp, *dres, *dc, *d4c, *dqkv, *datt, *dqp, *dkp, *dvp, *dyp;
} activations;

/* Carves the activations out of base (NULL: only sizes them); returns the bytes needed. */
static size_t carve_activations(char *base, activations *a, const gpt2_config *c, int B, int T) {
    size_t off = 0, L = (size_t)c->num_layers, C = (size_t)c->channels, NH = (size_t)c->num_heads, BT = (size_t)B * T;
#define CARVE(ptr, type, n)                                                                                          \
    do {                                                                                                             \
        off = (off + 255) & ~(size_t)255;                                                                            \
        a->ptr = (type *)(base ? base + off : NULL);                                                                 \
        off += (size_t)(n) * sizeof(type);                                                                           \
    } while (0)
    CARVE(encoded, bf16, BT * C); CARVE(ln1, bf16, L * BT * C); CARVE(qkv, bf16, L * BT * 3 * C);
    CARVE(atty, bf16, L * BT * C); CARVE(att, bf16, L * B * NH * T * T); CARVE(res2, bf16, L * BT * C);
    CARVE(ln2, bf16, L * BT * C); CARVE(fch, bf16, L * BT * 4 * C); CARVE(fch_gelu, bf16, L * BT * 4 * C);
    CARVE(res3, bf16, L * BT * C); CARVE(lnf, bf16, BT * C); CARVE(logits, bf16, BT * c->padded_vocab_size);
    CARVE(ln1_mean, float, L * BT); CARVE(ln1_rstd, float, L * BT); CARVE(ln2_mean, float, L * BT);
    CARVE(ln2_rstd, float, L * BT); CARVE(lnf_mean, float, BT); CARVE(lnf_rstd, float, BT); CARVE(losses, float, BT);
    CARVE(loss_acc, float, 1); CARVE(partial, float, 2 * COLSUM_SPLITS * 4 * C);
    CARVE(tmp, bf16, BT * C); CARVE(qp, bf16, BT * C); CARVE(kp, bf16, BT * C); CARVE(vp, bf16, BT * C);
    CARVE(yp, bf16, BT * C); CARVE(dres, bf16, BT * C); CARVE(dc, bf16, BT * C); CARVE(d4c, bf16, BT * 4 * C);
    CARVE(dqkv, bf16, BT * 3 * C); CARVE(datt, bf16, B * NH * T * T); CARVE(dqp, bf16, BT * C);
    CARVE(dkp, bf16, BT * C); CARVE(dvp, bf16, BT * C); CARVE(dyp, bf16, BT * C);
#undef CARVE
    return off;
}

typedef struct model {
    gpt2_config cfg;
    int B, T;
    size_t off[GPT2_NUM_TENSORS + 1], n;
    float *master, *grads;         /* device, fp32, gpt2.h's layout (the AdamW moments belong to accel_optim) */
    bf16 *w;                       /* device, bf16 model copy */
    activations a;
    char *arena;
    cudaStream_t st;
} model;

#define W_(m, t) ((m)->w + (m)->off[t])
#define G_(m, t) ((m)->grads + (m)->off[t])
static unsigned blocks(size_t n, unsigned threads) { return (unsigned)((n + threads - 1) / threads); }

#define KCHECK() do { cudaError_t e_ = cudaGetLastError(); if (e_ != cudaSuccess) return e_; } while (0)
#define BCHECK(x) do { if ((x) != CUBLAS_STATUS_SUCCESS) return cudaErrorUnknown; } while (0)

static cudaError_t layernorm_fwd(model *m, bf16 *out, float *mean, float *rstd, const bf16 *inp, const bf16 *w,
                                 const bf16 *b) {
    int N = m->B * m->T;
    layernorm_forward_kernel<<<blocks((size_t)N * 32, 256), 256, 0, m->st>>>(out, mean, rstd, inp, w, b, N,
                                                                              m->cfg.channels);
    KCHECK();
    return cudaSuccess;
}
/* dres += LN backward; dw, db += parameter gradients */
static cudaError_t layernorm_bwd(model *m, float *dw, float *db, const bf16 *dout, const bf16 *inp, const bf16 *w,
                                 const float *mean, const float *rstd) {
    int N = m->B * m->T, C = m->cfg.channels;
    float *pb = m->a.partial, *pw = m->a.partial + (size_t)COLSUM_SPLITS * 4 * C;
    layernorm_backward_kernel<<<blocks((size_t)N * 32, 256), 256, 0, m->st>>>(m->a.dres, dout, inp, w, mean, rstd, N,
                                                                               C);
    KCHECK();
    colsum_partial_kernel<<<dim3(blocks(C, 32), COLSUM_SPLITS), dim3(32, 8), 0, m->st>>>(pb, pw, dout, inp, mean,
                                                                                           rstd, N, C);
    KCHECK();
    colsum_final_kernel<<<blocks(C, 256), 256, 0, m->st>>>(db, pb, C);
    colsum_final_kernel<<<blocks(C, 256), 256, 0, m->st>>>(dw, pw, C);
    KCHECK();
    return cudaSuccess;
}
/* Linear layer backward: dinp = dout·W (bf16), dW += doutᵀ·inp (fp32), db += column sums of dout. */
static cudaError_t linear_bwd(model *m, bf16 *dinp, float *dW, float *db, const bf16 *dout, const bf16 *inp,
                              const bf16 *W, int C, int OC) {
    int N = m->B * m->T;
    BCHECK(gemm(GEMM_NN, dinp, CUDA_R_16BF, dout, W, N, C, OC, 1.0f, 0.0f));
    BCHECK(gemm(GEMM_TN, dW, CUDA_R_32F, dout, inp, OC, C, N, 1.0f, 1.0f));
    if (db) {
        colsum_partial_kernel<<<dim3(blocks(OC, 32), COLSUM_SPLITS), dim3(32, 8), 0, m->st>>>(m->a.partial, NULL, dout,
                                                                                                NULL, NULL, NULL, N, OC);
        KCHECK();
        colsum_final_kernel<<<blocks(OC, 256), 256, 0, m->st>>>(db, m->a.partial, OC);
        KCHECK();
    }
    return cudaSuccess;
}

/* Forward of one micro-batch (win: the device copy of the (B, T+1) windows); the CE kernel leaves dlogits (for a loss
   multiplied by loss_mult) in the logits buffer and adds the mean loss to a.loss_acc. */
static cudaError_t forward(model *m, const int32_t *win, float loss_mult) {
    const gpt2_config *c = &m->cfg;
    activations *a = &m->a;
    int B = m->B, T = m->T, C = c->channels, NH = c->num_heads, HS = C / NH, L = c->num_layers, BT = B * T;
    size_t btc = (size_t)BT * C, att_n = (size_t)B * NH * T * T;
    float scale = 1.0f / sqrtf((float)HS);
    cudaError_t e;
    encoder_forward_kernel<<<blocks(btc, 256), 256, 0, m->st>>>(a->encoded, win, W_(m, GPT2_WTE), W_(m, GPT2_WPE), B,
                                                                T, C);
    KCHECK();
    for (int l = 0; l < L; ++l) {
        const bf16 *res = l == 0 ? a->encoded : a->res3 + (l - 1) * btc;
        bf16 *ln1 = a->ln1 + l * btc, *qkv = a->qkv + l * 3 * btc, *atty = a->atty + l * btc, *att = a->att + l * att_n;
        bf16 *res2 = a->res2 + l * btc, *ln2 = a->ln2 + l * btc, *fch = a->fch + l * 4 * btc;
        bf16 *fch_gelu = a->fch_gelu + l * 4 * btc, *res3 = a->res3 + l * btc;
        if ((e = layernorm_fwd(m, ln1, a->ln1_mean + l * BT, a->ln1_rstd + l * BT, res, W_(m, GPT2_LN1W) + l * C,
                               W_(m, GPT2_LN1B) + l * C)) != cudaSuccess) return e;
        BCHECK(gemm(GEMM_NT, qkv, CUDA_R_16BF, ln1, W_(m, GPT2_QKVW) + (size_t)l * 3 * C * C, BT, 3 * C, C, 1.0f, 0.0f));
        permute_kernel<<<blocks(btc, 256), 256, 0, m->st>>>(a->qp, a->kp, a->vp, qkv, W_(m, GPT2_QKVB) + l * 3 * C, B,
                                                            T, NH, HS);
        KCHECK();
        BCHECK(gemm(GEMM_NT, att, CUDA_R_16BF, a->qp, a->kp, T, T, HS, scale, 0.0f, B * NH, (long long)T * HS,
                    (long long)T * HS, (long long)T * T));
        softmax_forward_kernel<<<blocks((size_t)B * NH * T * 32, 256), 256, 0, m->st>>>(att, B * NH * T, T);
        KCHECK();
        BCHECK(gemm(GEMM_NN, a->yp, CUDA_R_16BF, att, a->vp, T, HS, T, 1.0f, 0.0f, B * NH, (long long)T * T,
                    (long long)T * HS, (long long)T * HS));
        unpermute_kernel<<<blocks(btc, 256), 256, 0, m->st>>>(atty, a->yp, B, T, NH, HS, C, 0);
        KCHECK();
        BCHECK(gemm(GEMM_NT, a->tmp, CUDA_R_16BF, atty, W_(m, GPT2_ATTPROJW) + (size_t)l * C * C, BT, C, C, 1.0f, 0.0f));
        residual_bias_kernel<<<blocks(btc, 256), 256, 0, m->st>>>(res2, res, a->tmp, W_(m, GPT2_ATTPROJB) + l * C, btc, C);
        KCHECK();
        if ((e = layernorm_fwd(m, ln2, a->ln2_mean + l * BT, a->ln2_rstd + l * BT, res2, W_(m, GPT2_LN2W) + l * C,
                               W_(m, GPT2_LN2B) + l * C)) != cudaSuccess) return e;
        BCHECK(gemm(GEMM_NT, fch, CUDA_R_16BF, ln2, W_(m, GPT2_FCW) + (size_t)l * 4 * C * C, BT, 4 * C, C, 1.0f, 0.0f));
        bias_gelu_forward_kernel<<<blocks(4 * btc, 256), 256, 0, m->st>>>(fch_gelu, fch, W_(m, GPT2_FCB) + l * 4 * C,
                                                                         4 * btc, 4 * C);
        KCHECK();
        BCHECK(gemm(GEMM_NT, a->tmp, CUDA_R_16BF, fch_gelu, W_(m, GPT2_FCPROJW) + (size_t)l * 4 * C * C, BT, C, 4 * C,
                    1.0f, 0.0f));
        residual_bias_kernel<<<blocks(btc, 256), 256, 0, m->st>>>(res3, res2, a->tmp, W_(m, GPT2_FCPROJB) + l * C, btc, C);
        KCHECK();
    }
    if ((e = layernorm_fwd(m, a->lnf, a->lnf_mean, a->lnf_rstd, a->res3 + (L - 1) * btc, W_(m, GPT2_LNFW),
                           W_(m, GPT2_LNFB))) != cudaSuccess) return e;
    BCHECK(gemm(GEMM_NT, a->logits, CUDA_R_16BF, a->lnf, W_(m, GPT2_WTE), BT, c->padded_vocab_size, C, 1.0f, 0.0f));
    fused_classifier_kernel<<<BT, CE_THREADS, 0, m->st>>>(a->logits, a->losses, win, T, c->vocab_size,
                                                         c->padded_vocab_size, loss_mult / (float)BT);
    KCHECK();
    loss_mean_kernel<<<1, 1024, 0, m->st>>>(a->loss_acc, a->losses, BT);
    KCHECK();
    return cudaSuccess;
}

/* Backward of the micro-batch forward() just ran; gradients accumulate (fp32). seg: the host-made token segments
   (sorted positions, segment starts, segment tokens) in device memory, nseg of them. */
static cudaError_t backward(model *m, const int32_t *sorted_pos, const int32_t *seg_start, const int32_t *seg_tok,
                            int nseg) {
    const gpt2_config *c = &m->cfg;
    activations *a = &m->a;
    int B = m->B, T = m->T, C = c->channels, NH = c->num_heads, HS = C / NH, L = c->num_layers, BT = B * T;
    size_t btc = (size_t)BT * C, att_n = (size_t)B * NH * T * T;
    float scale = 1.0f / sqrtf((float)HS);
    cudaError_t e;
    /* LM head (tied): dlnf = dlogits · wte, dwte += dlogitsᵀ · lnf */
    if ((e = linear_bwd(m, a->dc, G_(m, GPT2_WTE), NULL, a->logits, a->lnf, W_(m, GPT2_WTE), C,
                        c->padded_vocab_size)) != cudaSuccess) return e;
    if ((e = cudaMemsetAsync(a->dres, 0, btc * sizeof(bf16), m->st)) != cudaSuccess) return e;
    if ((e = layernorm_bwd(m, G_(m, GPT2_LNFW), G_(m, GPT2_LNFB), a->dc, a->res3 + (L - 1) * btc, W_(m, GPT2_LNFW),
                           a->lnf_mean, a->lnf_rstd)) != cudaSuccess) return e;
    for (int l = L - 1; l >= 0; --l) { /* a->dres = d(residual3 of layer l) */
        const bf16 *res = l == 0 ? a->encoded : a->res3 + (l - 1) * btc;
        bf16 *qkv = a->qkv + l * 3 * btc, *att = a->att + l * att_n;
        if ((e = linear_bwd(m, a->d4c, G_(m, GPT2_FCPROJW) + (size_t)l * 4 * C * C, G_(m, GPT2_FCPROJB) + l * C, a->dres,
                            a->fch_gelu + l * 4 * btc, W_(m, GPT2_FCPROJW) + (size_t)l * 4 * C * C, 4 * C, C)) != cudaSuccess)
            return e;
        gelu_backward_kernel<<<blocks(4 * btc, 256), 256, 0, m->st>>>(a->d4c, a->fch + l * 4 * btc, 4 * btc);
        KCHECK();
        if ((e = linear_bwd(m, a->dc, G_(m, GPT2_FCW) + (size_t)l * 4 * C * C, G_(m, GPT2_FCB) + l * 4 * C, a->d4c,
                            a->ln2 + l * btc, W_(m, GPT2_FCW) + (size_t)l * 4 * C * C, C, 4 * C)) != cudaSuccess)
            return e;
        if ((e = layernorm_bwd(m, G_(m, GPT2_LN2W) + l * C, G_(m, GPT2_LN2B) + l * C, a->dc, a->res2 + l * btc,
                               W_(m, GPT2_LN2W) + l * C, a->ln2_mean + l * BT, a->ln2_rstd + l * BT)) != cudaSuccess)
            return e;
        if ((e = linear_bwd(m, a->dc, G_(m, GPT2_ATTPROJW) + (size_t)l * C * C, G_(m, GPT2_ATTPROJB) + l * C, a->dres,
                            a->atty + l * btc, W_(m, GPT2_ATTPROJW) + (size_t)l * C * C, C, C)) != cudaSuccess)
            return e;
        /* attention: recompute q, k, v (qkv holds the biased values), then the batched GEMMs' backward */
        permute_kernel<<<blocks(btc, 256), 256, 0, m->st>>>(a->qp, a->kp, a->vp, qkv, NULL, B, T, NH, HS);
        permute_rows_kernel<<<blocks(btc, 256), 256, 0, m->st>>>(a->dyp, a->dc, B, T, NH, HS);
        KCHECK();
        BCHECK(gemm(GEMM_NT, a->datt, CUDA_R_16BF, a->dyp, a->vp, T, T, HS, 1.0f, 0.0f, B * NH, (long long)T * HS,
                    (long long)T * HS, (long long)T * T));
        BCHECK(gemm(GEMM_TN, a->dvp, CUDA_R_16BF, att, a->dyp, T, HS, T, 1.0f, 0.0f, B * NH, (long long)T * T,
                    (long long)T * HS, (long long)T * HS));
        softmax_backward_kernel<<<blocks((size_t)B * NH * T * 32, 256), 256, 0, m->st>>>(a->datt, att, B * NH * T, T);
        KCHECK();
        BCHECK(gemm(GEMM_NN, a->dqp, CUDA_R_16BF, a->datt, a->kp, T, HS, T, scale, 0.0f, B * NH, (long long)T * T,
                    (long long)T * HS, (long long)T * HS));
        BCHECK(gemm(GEMM_TN, a->dkp, CUDA_R_16BF, a->datt, a->qp, T, HS, T, scale, 0.0f, B * NH, (long long)T * T,
                    (long long)T * HS, (long long)T * HS));
        unpermute_kernel<<<blocks(btc, 256), 256, 0, m->st>>>(a->dqkv, a->dqp, B, T, NH, HS, 3 * C, 0);
        unpermute_kernel<<<blocks(btc, 256), 256, 0, m->st>>>(a->dqkv, a->dkp, B, T, NH, HS, 3 * C, C);
        unpermute_kernel<<<blocks(btc, 256), 256, 0, m->st>>>(a->dqkv, a->dvp, B, T, NH, HS, 3 * C, 2 * C);
        KCHECK();
        if ((e = linear_bwd(m, a->dc, G_(m, GPT2_QKVW) + (size_t)l * 3 * C * C, G_(m, GPT2_QKVB) + l * 3 * C, a->dqkv,
                            a->ln1 + l * btc, W_(m, GPT2_QKVW) + (size_t)l * 3 * C * C, C, 3 * C)) != cudaSuccess)
            return e;
        if ((e = layernorm_bwd(m, G_(m, GPT2_LN1W) + l * C, G_(m, GPT2_LN1B) + l * C, a->dc, res,
                               W_(m, GPT2_LN1W) + l * C, a->ln1_mean + l * BT, a->ln1_rstd + l * BT)) != cudaSuccess)
            return e;
    }
    encoder_backward_wte_kernel<<<dim3(nseg, blocks(C, 256)), 256, 0, m->st>>>(G_(m, GPT2_WTE), a->dres, sorted_pos,
                                                                               seg_start, seg_tok, C);
    encoder_backward_wpe_kernel<<<blocks((size_t)T * C, 256), 256, 0, m->st>>>(G_(m, GPT2_WPE), a->dres, B, T, C);
    KCHECK();
    return cudaSuccess;
}

/* The host's part of the embedding backward: positions sorted by token (counting sort, stable), grouped into
   segments, written after the window in the staged buffer: [win (B(T+1)) | sorted_pos (BT) | seg_start (BT+1) |
   seg_tok (BT)]. count is a V-sized zeroed scratch (left zeroed). Returns the number of segments. */
static int prepare_token_segments(int32_t *buf, int B, int T, int32_t *count) {
    int32_t *win = buf, *sorted = buf + (size_t)B * (T + 1), *seg_start = sorted + (size_t)B * T;
    int32_t *seg_tok = seg_start + (size_t)B * T + 1;
    int n = B * T, nseg = 0, i, pos = 0;
    for (i = 0; i < n; ++i) count[win[(i / T) * (T + 1) + i % T]]++;
    /* segments in the order of each token's first position; positions ascending inside a segment */
    for (i = 0; i < n; ++i) {
        int32_t tok = win[(i / T) * (T + 1) + i % T];
        if (count[tok] > 0) { /* first time: reserve its range; count[tok] becomes -(next slot + 1) */
            seg_tok[nseg] = tok;
            seg_start[nseg++] = pos;
            int32_t c = count[tok];
            count[tok] = -(pos + 1);
            pos += c;
        }
        sorted[-count[tok] - 1] = i;
        count[tok]--; /* next slot: -(start+1) - 1 = -(start+2) */
    }
    seg_start[nseg] = n;
    for (i = 0; i < nseg; ++i) count[seg_tok[i]] = 0;
    return nseg;
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

/* Dense bf16 peak of the device (for MFU), 0 when unknown. */
static double peak_flops(int device) {
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, device) != cudaSuccess) return 0.0;
    if (strstr(p.name, "H100") && strstr(p.name, "PCIe")) return 756e12;
    if (strstr(p.name, "H100") || strstr(p.name, "H200") || strstr(p.name, "H800") || strstr(p.name, "GH200"))
        return 989e12;
    if (strstr(p.name, "A100") || strstr(p.name, "A800")) return 312e12;
    return 0.0;
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
    accel_ddp *red = NULL;
    accel_ckpt *ck = NULL;
    accel_st_file *initf = NULL;
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
    if (o.init) CHECK(accel_st_file_open(&acc, o.init, &initf));
    if (gpt2_resolve_config(&acc, &o, initf, &cfg, prefix) != 0) goto fail;
    M.cfg = cfg;
    M.B = B;
    M.T = T;
    M.st = (cudaStream_t)acc.stream;
    M.n = gpt2_offsets(&cfg, M.off);
    host = (float *)accel_host_alloc(&acc, M.n * sizeof(float));
    if (!host) goto fail;
    if (initf) {
        CHECK(gpt2_hf_load(&acc, initf, &cfg, prefix, host));
        accel_st_file_destroy(initf);
        initf = NULL;
    } else {
        gpt2_init_params(&cfg, host, o.seed);
    }
    {
        size_t act = carve_activations(NULL, &M.a, &cfg, B, T);
        M.master = (float *)accel_device_alloc(&acc, M.n * sizeof(float));
        M.grads = (float *)accel_device_alloc(&acc, M.n * sizeof(float));
        M.w = (bf16 *)accel_device_alloc(&acc, M.n * sizeof(bf16));
        M.arena = (char *)accel_device_alloc(&acc, act);
        if (!M.master || !M.grads || !M.w || !M.arena) {
            fprintf(stderr, "train_gpt2: out of device memory (%zu parameters, %.2f GiB of activations)\n", M.n,
                    act / 1073741824.0);
            goto fail;
        }
        carve_activations(M.arena, &M.a, &cfg, B, T);
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
    CHECK(accel_ddp_create(coll, NULL, &red));
    CHECK(accel_ddp_add(red, grads, GPT2_NUM_TENSORS));
    CHECK(accel_ddp_finalize(red));

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
                (long long)accel_data_seq_len(&ld), accel_ddp_is_flat(red) ? "one in-place all-reduce" : "buckets",
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
                for (k = 0; k < GPT2_NUM_TENSORS; ++k) CHECK(accel_ddp_grad_ready(red, k));
                CHECK(accel_ddp_wait(red)); /* average over ranks (NCCL on acc.stream) */
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
    if (g_blas) cublasDestroy(g_blas);
    accel_st_file_destroy(initf);
    accel_ckpt_destroy(ck);
    accel_optim_destroy(opt);
    accel_prof_destroy(prof);
    accel_ddp_destroy(red);
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
