/* kernels/attention.cuh — causal multi-head self-attention, two ways, both reading q, k, v in place from the fused
   qkv rows (B, T, 3, NH, HS) and writing the output straight into (B, T, C) rows: no permuted copies.

   cuDNN (attention_cudnn.h; built when meson finds cuDNN and its frontend):
     attention_forward_cudnn(out, stats, qkv, B, T, C, NH, st)
     attention_backward_cudnn(dqkv, dout, qkv, out, stats, B, T, C, NH, st)
         flash attention: the T x T scores stay on chip; stats (B, NH, T) fp32 is the softmax's log-sum-exp per row

   The trainer's own (any build):
     attention_forward(out, att, qkv, B, T, C, NH, blas, ptrs, st)
     attention_backward(dqkv, datt, dout, qkv, att, B, T, C, NH, blas, ptrs, st)
         gpt2_cpu.c's attention_forward / attention_backward: att (B, NH, T, T) keeps the probabilities (0 above the
         diagonal), datt is a scratch of the same size. cuBLAS batched GEMMs over the B·NH (batch, head) matrices
         take arrays of pointers, which a small kernel computes on the device from the base pointers
         (attention_offset: head h of q starts h·HS channels into its row, the row stride is 3C), so the GEMMs read
         and write the fused layouts directly; the causal softmax and its backward are one warp per row, 16-byte
         vectors, touching only the t + 1 entries of row t (and zero-filling the rest, which the GEMMs read).
         blas: a cuBLAS handle; ptrs: attention_ptr_count(B, NH) pointers of device scratch.
     softmax_forward(att, B, NH, T, st), softmax_backward(datt, att, B, NH, T, st)
         the causal softmax of the scores and its backward, in place (the own attention's middle step)

   The GEMMs (column-major, as cuBLAS sees the row-major matrices; per (batch, head) i, scale = 1/sqrt(HS)):
     forward   S  = scale · Q Kᵀ          attention_gemm(ATT_GEMM_S)      then the softmax on S's rows, in place
               Y  = S V                   attention_gemm(ATT_GEMM_Y)
     backward  dS = dY Vᵀ                 attention_gemm(ATT_GEMM_DS)
               dV = Sᵀ dY                 attention_gemm(ATT_GEMM_DV)     then dS = S ⊙ (dS - rowsum(S ⊙ dS))
               dQ = scale · dS K          attention_gemm(ATT_GEMM_DQ)
               dK = scale · dSᵀ Q         attention_gemm(ATT_GEMM_DK)
   attention_gemm and attention_offset are plain host functions the CPU test executes against gpt2_cpu.c. */
#ifndef GPT2_KERNELS_ATTENTION_CUH
#define GPT2_KERNELS_ATTENTION_CUH
#include "attention_cudnn.h"
#include "common.cuh"
#include <cublas_v2.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------- cuDNN */
static cudaError_t attention_forward_cudnn(bf16 *out, float *stats, const bf16 *qkv, int B, int T, int C, int NH,
                                           cudaStream_t st) {
#ifdef GPT2_WITH_CUDNN
    if (attention_cudnn_forward(out, stats, qkv, B, T, NH, C / NH, st) != 0)
        return gpt2_kernel_error(cudaErrorNotSupported, "cuDNN attention: %s (--attention own avoids cuDNN)",
                                 attention_cudnn_error());
    return cudaSuccess;
#else
    (void)out, (void)stats, (void)qkv, (void)B, (void)T, (void)C, (void)NH, (void)st;
    return gpt2_kernel_error(cudaErrorNotSupported, "this build has no cuDNN attention (meson finds cuDNN through "
                                                    "cudnn.h, libcudnn and the cuDNN frontend's headers)");
#endif
}
static cudaError_t attention_backward_cudnn(bf16 *dqkv, const bf16 *dout, const bf16 *qkv, const bf16 *out,
                                            const float *stats, int B, int T, int C, int NH, cudaStream_t st) {
#ifdef GPT2_WITH_CUDNN
    if (attention_cudnn_backward(dqkv, dout, qkv, out, stats, B, T, NH, C / NH, st) != 0)
        return gpt2_kernel_error(cudaErrorNotSupported, "cuDNN attention: %s (--attention own avoids cuDNN)",
                                 attention_cudnn_error());
    return cudaSuccess;
#else
    (void)dqkv, (void)dout, (void)qkv, (void)out, (void)stats, (void)B, (void)T, (void)C, (void)NH, (void)st;
    return gpt2_kernel_error(cudaErrorNotSupported, "this build has no cuDNN attention");
#endif
}

/* ------------------------------------------------------------------------------- the trainer's own */
/* The batched GEMMs' operands: one pointer array of B·NH matrices each. */
enum { ATT_Q, ATT_K, ATT_V, ATT_S, ATT_Y, ATT_DQ, ATT_DK, ATT_DV, ATT_DS, ATT_DY, ATT_NPTR };

static ACCEL_INLINE size_t attention_ptr_count(int B, int NH) { return (size_t)ATT_NPTR * B * NH; }

/* Element offset of matrix i = b·NH + h of an operand from its base: q, k, v (dq, dk, dv) inside the (B, T, 3C)
   rows, the scores (B, NH, T, T), y and dy inside (B, T, C) rows. */
static ACCEL_INLINE ACCEL_HD size_t attention_offset(int which, int i, int T, int C, int NH) {
    size_t b = (size_t)(i / NH), h = (size_t)(i % NH), HS = (size_t)(C / NH);
    switch (which) {
    case ATT_Q:
    case ATT_DQ: return b * T * 3 * C + h * HS;
    case ATT_K:
    case ATT_DK: return b * T * 3 * C + C + h * HS;
    case ATT_V:
    case ATT_DV: return b * T * 3 * C + 2 * (size_t)C + h * HS;
    case ATT_S:
    case ATT_DS: return (size_t)i * T * T;
    default: return b * T * C + h * HS; /* ATT_Y, ATT_DY */
    }
}

typedef struct attention_bases {
    const bf16 *p[ATT_NPTR]; /* NULL: not used by this pass */
} attention_bases;

__global__ void attention_pointers_kernel(const bf16 **ptrs, attention_bases bases, int BH, int T, int C, int NH) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= ATT_NPTR * BH) return;
    int which = i / BH, j = i % BH;
    ptrs[i] = bases.p[which] ? bases.p[which] + attention_offset(which, j, T, C, NH) : NULL;
}

/* One batched GEMM in cuBLAS's terms; a, b, c name the operand arrays (ATT_*). */
typedef struct attention_gemm_desc {
    int transa, transb, m, n, k, a, lda, b, ldb, c, ldc;
    float alpha;
} attention_gemm_desc;
enum { ATT_GEMM_S, ATT_GEMM_Y, ATT_GEMM_DS, ATT_GEMM_DV, ATT_GEMM_DQ, ATT_GEMM_DK };

static ACCEL_INLINE attention_gemm_desc attention_gemm(int which, int T, int C, int NH) {
    int HS = C / NH;
    float scale = 1.0f / sqrtf((float)HS);
    attention_gemm_desc g;
    memset(&g, 0, sizeof g);
    g.alpha = 1.0f;
    switch (which) {
    case ATT_GEMM_S: /* Sᵀ (T x T) = K (viewed HS x T, transposed) · Qᵀ (viewed HS x T) */
        g.transa = 1, g.m = T, g.n = T, g.k = HS, g.a = ATT_K, g.lda = 3 * C, g.b = ATT_Q, g.ldb = 3 * C;
        g.c = ATT_S, g.ldc = T, g.alpha = scale;
        break;
    case ATT_GEMM_Y: /* Yᵀ (HS x T) = Vᵀ · Sᵀ */
        g.m = HS, g.n = T, g.k = T, g.a = ATT_V, g.lda = 3 * C, g.b = ATT_S, g.ldb = T, g.c = ATT_Y, g.ldc = C;
        break;
    case ATT_GEMM_DS: /* dSᵀ (T x T) = V · dYᵀ */
        g.transa = 1, g.m = T, g.n = T, g.k = HS, g.a = ATT_V, g.lda = 3 * C, g.b = ATT_DY, g.ldb = C;
        g.c = ATT_DS, g.ldc = T;
        break;
    case ATT_GEMM_DV: /* dVᵀ (HS x T) = dYᵀ · S */
        g.transb = 1, g.m = HS, g.n = T, g.k = T, g.a = ATT_DY, g.lda = C, g.b = ATT_S, g.ldb = T;
        g.c = ATT_DV, g.ldc = 3 * C;
        break;
    case ATT_GEMM_DQ: /* dQᵀ (HS x T) = scale · Kᵀ · dSᵀ */
        g.m = HS, g.n = T, g.k = T, g.a = ATT_K, g.lda = 3 * C, g.b = ATT_DS, g.ldb = T, g.c = ATT_DQ, g.ldc = 3 * C;
        g.alpha = scale;
        break;
    default: /* ATT_GEMM_DK: dKᵀ (HS x T) = scale · Qᵀ · dS */
        g.transb = 1, g.m = HS, g.n = T, g.k = T, g.a = ATT_Q, g.lda = 3 * C, g.b = ATT_DS, g.ldb = T;
        g.c = ATT_DK, g.ldc = 3 * C, g.alpha = scale;
        break;
    }
    return g;
}

static cudaError_t attention_gemm_run(cublasHandle_t blas, const bf16 **ptrs, int which, int B, int T, int C,
                                      int NH) {
    attention_gemm_desc g = attention_gemm(which, T, C, NH);
    int BH = B * NH;
    float zero = 0.0f;
    cublasStatus_t s = cublasGemmBatchedEx(
        blas, g.transa ? CUBLAS_OP_T : CUBLAS_OP_N, g.transb ? CUBLAS_OP_T : CUBLAS_OP_N, g.m, g.n, g.k, &g.alpha,
        (const void *const *)(ptrs + (size_t)g.a * BH), CUDA_R_16BF, g.lda,
        (const void *const *)(ptrs + (size_t)g.b * BH), CUDA_R_16BF, g.ldb, &zero,
        (void *const *)(ptrs + (size_t)g.c * BH), CUDA_R_16BF, g.ldc, BH, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS)
        return gpt2_kernel_error(cudaErrorUnknown, "attention: batched GEMM %d (%d matrices of %dx%dx%d): cuBLAS "
                                                   "status %d", which, BH, g.m, g.n, g.k, (int)s);
    return cudaSuccess;
}

template <int VEC> static __device__ __forceinline__ void load_row(float (&v)[VEC], const bf16 *p) {
    if constexpr (VEC == 8) {
        x128 t = load128(p);
#pragma unroll
        for (int i = 0; i < 8; ++i) v[i] = f32(t[i]);
    } else {
        v[0] = f32(*p);
    }
}
template <int VEC> static __device__ __forceinline__ void store_row(bf16 *p, const float (&v)[VEC]) {
    if constexpr (VEC == 8) {
        x128 t;
#pragma unroll
        for (int i = 0; i < 8; ++i) t[i] = bf(v[i]);
        store128(p, t);
    } else {
        *p = bf(v[0]);
    }
}

#define SOFTMAX_THREADS 256
/* Row r of the (B·NH·T, T) scores is query t = r mod T: softmax over its first t + 1 entries (the GEMM applied the
   scale), 0 after them. VEC = 8 needs T a multiple of 8 (16-byte aligned rows), VEC = 1 is the general case. */
template <int VEC>
__global__ void __launch_bounds__(SOFTMAX_THREADS) softmax_forward_kernel(bf16 *att, size_t rows, int T) {
    int lane = threadIdx.x % 32;
    size_t row = (size_t)blockIdx.x * (SOFTMAX_THREADS / 32) + threadIdx.x / 32;
    if (row >= rows) return;
    int len = (int)(row % T) + 1;
    bf16 *x = att + row * T;
    float m = -INFINITY, s = 0.0f, v[VEC];
    for (int j = lane * VEC; j < len; j += 32 * VEC) {
        float cm = -INFINITY, add = 0.0f, nm;
        load_row<VEC>(v, x + j);
#pragma unroll
        for (int i = 0; i < VEC; ++i)
            if (j + i < len) cm = fmaxf(cm, v[i]);
        nm = fmaxf(m, cm);
#pragma unroll
        for (int i = 0; i < VEC; ++i)
            if (j + i < len) add += __expf(v[i] - nm);
        s = s * __expf(m - nm) + add;
        m = nm;
    }
    warp_softmax_combine(&m, &s);
    float inv = 1.0f / s;
    for (int j = lane * VEC; j < T; j += 32 * VEC) {
        if (j < len) load_row<VEC>(v, x + j);
#pragma unroll
        for (int i = 0; i < VEC; ++i) v[i] = j + i < len ? __expf(v[i] - m) * inv : 0.0f;
        store_row<VEC>(x + j, v);
    }
}
/* datt → dpreatt in place: a·(da - Σ a·da) over the first t + 1 entries, 0 after them (the scale is the next
   GEMMs' alpha). */
template <int VEC>
__global__ void __launch_bounds__(SOFTMAX_THREADS) softmax_backward_kernel(bf16 *datt, const bf16 *att, size_t rows,
                                                                           int T) {
    int lane = threadIdx.x % 32;
    size_t row = (size_t)blockIdx.x * (SOFTMAX_THREADS / 32) + threadIdx.x / 32;
    if (row >= rows) return;
    int len = (int)(row % T) + 1;
    bf16 *d = datt + row * T;
    const bf16 *a = att + row * T;
    float dot = 0.0f, av[VEC], dv[VEC];
    for (int j = lane * VEC; j < len; j += 32 * VEC) {
        load_row<VEC>(av, a + j);
        load_row<VEC>(dv, d + j);
#pragma unroll
        for (int i = 0; i < VEC; ++i)
            if (j + i < len) dot += av[i] * dv[i];
    }
    dot = warp_sum(dot);
    for (int j = lane * VEC; j < T; j += 32 * VEC) {
        if (j < len) {
            load_row<VEC>(av, a + j);
            load_row<VEC>(dv, d + j);
        }
#pragma unroll
        for (int i = 0; i < VEC; ++i) dv[i] = j + i < len ? av[i] * (dv[i] - dot) : 0.0f;
        store_row<VEC>(d + j, dv);
    }
}

static cudaError_t softmax_forward(bf16 *att, int B, int NH, int T, cudaStream_t st) {
    size_t rows = (size_t)B * NH * T;
    unsigned grid = ceil_div(rows, SOFTMAX_THREADS / 32);
    if (T % 8 == 0) softmax_forward_kernel<8><<<grid, SOFTMAX_THREADS, 0, st>>>(att, rows, T);
    else softmax_forward_kernel<1><<<grid, SOFTMAX_THREADS, 0, st>>>(att, rows, T);
    GPT2_LAUNCH_CHECK();
    return cudaSuccess;
}
static cudaError_t softmax_backward(bf16 *datt, const bf16 *att, int B, int NH, int T, cudaStream_t st) {
    size_t rows = (size_t)B * NH * T;
    unsigned grid = ceil_div(rows, SOFTMAX_THREADS / 32);
    if (T % 8 == 0) softmax_backward_kernel<8><<<grid, SOFTMAX_THREADS, 0, st>>>(datt, att, rows, T);
    else softmax_backward_kernel<1><<<grid, SOFTMAX_THREADS, 0, st>>>(datt, att, rows, T);
    GPT2_LAUNCH_CHECK();
    return cudaSuccess;
}

/* The pass's pointer arrays from its base pointers (q, k, v always from qkv), cuBLAS on the stream. */
static cudaError_t attention_pointers(cublasHandle_t blas, const bf16 **ptrs, attention_bases *bases, const bf16 *qkv,
                                      int B, int T, int C, int NH, cudaStream_t st) {
    int n = ATT_NPTR * B * NH;
    bases->p[ATT_Q] = bases->p[ATT_K] = bases->p[ATT_V] = qkv;
    if (cublasSetStream(blas, st) != CUBLAS_STATUS_SUCCESS)
        return gpt2_kernel_error(cudaErrorUnknown, "attention: cublasSetStream failed");
    attention_pointers_kernel<<<ceil_div((size_t)n, 256), 256, 0, st>>>(ptrs, *bases, B * NH, T, C, NH);
    GPT2_LAUNCH_CHECK();
    return cudaSuccess;
}

static cudaError_t attention_forward(bf16 *out, bf16 *att, const bf16 *qkv, int B, int T, int C, int NH,
                                     cublasHandle_t blas, const bf16 **ptrs, cudaStream_t st) {
    attention_bases bases;
    memset(&bases, 0, sizeof bases);
    bases.p[ATT_S] = att;
    bases.p[ATT_Y] = out;
    GPT2_TRY(attention_pointers(blas, ptrs, &bases, qkv, B, T, C, NH, st));
    GPT2_TRY(attention_gemm_run(blas, ptrs, ATT_GEMM_S, B, T, C, NH));
    GPT2_TRY(softmax_forward(att, B, NH, T, st));
    return attention_gemm_run(blas, ptrs, ATT_GEMM_Y, B, T, C, NH);
}

static cudaError_t attention_backward(bf16 *dqkv, bf16 *datt, const bf16 *dout, const bf16 *qkv, const bf16 *att,
                                      int B, int T, int C, int NH, cublasHandle_t blas, const bf16 **ptrs,
                                      cudaStream_t st) {
    attention_bases bases;
    memset(&bases, 0, sizeof bases);
    bases.p[ATT_DQ] = bases.p[ATT_DK] = bases.p[ATT_DV] = dqkv;
    bases.p[ATT_S] = att;
    bases.p[ATT_DS] = datt;
    bases.p[ATT_DY] = dout;
    GPT2_TRY(attention_pointers(blas, ptrs, &bases, qkv, B, T, C, NH, st));
    GPT2_TRY(attention_gemm_run(blas, ptrs, ATT_GEMM_DS, B, T, C, NH));
    GPT2_TRY(attention_gemm_run(blas, ptrs, ATT_GEMM_DV, B, T, C, NH));
    GPT2_TRY(softmax_backward(datt, att, B, NH, T, st));
    GPT2_TRY(attention_gemm_run(blas, ptrs, ATT_GEMM_DQ, B, T, C, NH));
    return attention_gemm_run(blas, ptrs, ATT_GEMM_DK, B, T, C, NH);
}

#endif /* GPT2_KERNELS_ATTENTION_CUH */
