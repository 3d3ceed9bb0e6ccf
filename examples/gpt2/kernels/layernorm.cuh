/* kernels/layernorm.cuh — LayerNorm (eps 1e-5, population variance), one warp per row of C channels.

     layernorm_forward(out, mean, rstd, inp, w, b, N, C, st)           gpt2_cpu.c's layernorm_forward
     residual_layernorm_forward(res, out, mean, rstd, a, b2, w, b, N, C, st)
                                        residual_forward(res, a, b2) then layernorm_forward(out, ..., res, ...) in
                                        one pass: the sum is written once and normalized from registers
     layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C, scratch, st)
                                        gpt2_cpu.c's layernorm_backward (dinp, dw, db +=), one pass over the rows

   A row lives in registers: lane l holds channels [8(32k + l), 8(32k + l) + 8) for k < CH = ceil(C / 256) (16-byte
   loads; C a multiple of 8, at most 2048). The backward reads dout, inp and dinp once from memory (its second sweep
   over a row hits L1): each warp keeps its own
   dweight/dbias partial sums in registers over the rows it handles (row = block·8 + warp, every grid-th row), the
   block folds its 8 warps in warp order through shared memory, and fold_partials adds the blocks in block order —
   the same bits every run. The grid depends on N only, so the order does too. scratch: layernorm_scratch_floats(C). */
#ifndef GPT2_KERNELS_LAYERNORM_CUH
#define GPT2_KERNELS_LAYERNORM_CUH
#include "common.cuh"

#define LN_THREADS 256 /* 8 warps: 8 rows at a time */
#define LN_BWD_MAX_BLOCKS 256
#define LN_MAX_C 2048

/* Forward; with b2 (the fused residual) x = bf16(a + b2) is also stored to res, else x = a. */
template <int CH>
__global__ void __launch_bounds__(LN_THREADS) layernorm_forward_kernel(bf16 *out, float *mean, float *rstd, bf16 *res,
                                                                       const bf16 *a, const bf16 *b2, const bf16 *w,
                                                                       const bf16 *b, int N, int C) {
    int lane = threadIdx.x % 32, row = blockIdx.x * (LN_THREADS / 32) + threadIdx.x / 32;
    if (row >= N) return;
    size_t base = (size_t)row * C;
    x128 x[CH];
    float s = 0.0f, v = 0.0f;
#pragma unroll
    for (int k = 0; k < CH; ++k) {
        int c = (k * 32 + lane) * 8;
        if (c >= C) continue;
        x[k] = load128cs(a + base + c);
        if (b2) {
            x128 y = load128cs(b2 + base + c);
#pragma unroll
            for (int i = 0; i < 8; ++i) x[k][i] = bf(f32(x[k][i]) + f32(y[i]));
            store128(res + base + c, x[k]);
        }
#pragma unroll
        for (int i = 0; i < 8; ++i) s += f32(x[k][i]);
    }
    float m = warp_sum(s) / C;
#pragma unroll
    for (int k = 0; k < CH; ++k) {
        if ((k * 32 + lane) * 8 >= C) continue;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            float d = f32(x[k][i]) - m;
            v += d * d;
        }
    }
    float r = 1.0f / sqrtf(warp_sum(v) / C + 1e-5f);
#pragma unroll
    for (int k = 0; k < CH; ++k) {
        int c = (k * 32 + lane) * 8;
        if (c >= C) continue;
        x128 wv = load128(w + c), bv = load128(b + c), o;
#pragma unroll
        for (int i = 0; i < 8; ++i) o[i] = bf((f32(x[k][i]) - m) * r * f32(wv[i]) + f32(bv[i]));
        store128(out + base + c, o);
    }
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = r;
    }
}

/* dinp += (w·d - mean(w·d) - norm·mean(w·d·norm))·rstd; partial[blockIdx.x] (dw) and partial[gridDim.x + blockIdx.x]
   (db): this block's sums of norm·d and d (rows of C floats). Dynamic shared memory: 2C floats. Two blocks per SM up
   to C = 1024; above it the accumulators need more registers than that leaves (one block, no spills). */
template <int CH>
__global__ void __launch_bounds__(LN_THREADS, CH <= 4 ? 2 : 1)
    layernorm_backward_kernel(bf16 *dinp, float *partial, const bf16 *dout, const bf16 *inp, const bf16 *w,
                              const float *mean, const float *rstd, int N, int C) {
    extern __shared__ float sh[];
    const int nw = LN_THREADS / 32;
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    float dw[CH][8], db[CH][8];
    x128 wv[CH];
#pragma unroll
    for (int k = 0; k < CH; ++k) {
        int c = (k * 32 + lane) * 8;
#pragma unroll
        for (int i = 0; i < 8; ++i) dw[k][i] = db[k][i] = 0.0f;
        if (c < C) wv[k] = load128(w + c);
    }
    for (int row = blockIdx.x * nw + warp; row < N; row += gridDim.x * nw) {
        size_t base = (size_t)row * C;
        float m = mean[row], r = rstd[row], a = 0.0f, an = 0.0f;
#pragma unroll
        for (int k = 0; k < CH; ++k) {
            int c = (k * 32 + lane) * 8;
            if (c >= C) continue;
            x128 dv = load128(dout + base + c), xv = load128(inp + base + c);
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                float dn = f32(wv[k][i]) * f32(dv[i]);
                a += dn;
                an += dn * ((f32(xv[i]) - m) * r);
            }
        }
        a = warp_sum(a) / C;
        an = warp_sum(an) / C;
        /* the second sweep rereads dout and inp (L1 hits: the warp just read them) instead of keeping them in
           registers, which the dweight/dbias accumulators need */
#pragma unroll
        for (int k = 0; k < CH; ++k) {
            int c = (k * 32 + lane) * 8;
            if (c >= C) continue;
            x128 dv = load128cs(dout + base + c), xv = load128cs(inp + base + c), g = load128(dinp + base + c);
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                float d = f32(dv[i]), norm = (f32(xv[i]) - m) * r, dn = f32(wv[k][i]) * d;
                g[i] = bf(f32(g[i]) + (dn - a - norm * an) * r);
                db[k][i] += d;
                dw[k][i] += norm * d;
            }
            store128(dinp + base + c, g);
        }
    }
    for (int i = threadIdx.x; i < 2 * C; i += LN_THREADS) sh[i] = 0.0f;
    __syncthreads();
    for (int wi = 0; wi < nw; ++wi) { /* warp order: lanes own disjoint channels, warps take turns */
        if (warp == wi) {
#pragma unroll
            for (int k = 0; k < CH; ++k) {
                int c = (k * 32 + lane) * 8;
                if (c >= C) continue;
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    sh[c + i] += dw[k][i];
                    sh[C + c + i] += db[k][i];
                }
            }
        }
        __syncthreads();
    }
    for (int i = threadIdx.x; i < C; i += LN_THREADS) {
        partial[(size_t)blockIdx.x * C + i] = sh[i];
        partial[((size_t)gridDim.x + blockIdx.x) * C + i] = sh[C + i];
    }
}

/* Register chunks per lane for C channels (a compiled instance: 1, 2, 3, 4, 6 or 8), 0 when unsupported. */
static ACCEL_INLINE int layernorm_chunks(int C) {
    int ch = (C + 255) / 256;
    if (C < 8 || C % 8 || C > LN_MAX_C) return 0;
    return ch <= 4 ? ch : ch <= 6 ? 6 : 8;
}
static ACCEL_INLINE unsigned layernorm_backward_blocks(int N) {
    unsigned b = ceil_div((size_t)N, LN_THREADS / 32);
    return b < LN_BWD_MAX_BLOCKS ? b : LN_BWD_MAX_BLOCKS;
}
/* floats of scratch layernorm_backward needs */
static ACCEL_INLINE size_t layernorm_scratch_floats(int C) { return 2 * (size_t)LN_BWD_MAX_BLOCKS * C; }

#define GPT2_LN_SWITCH(C, LAUNCH)                                                                                    \
    switch (layernorm_chunks(C)) {                                                                                   \
    case 1: LAUNCH(1); break;                                                                                        \
    case 2: LAUNCH(2); break;                                                                                        \
    case 3: LAUNCH(3); break;                                                                                        \
    case 4: LAUNCH(4); break;                                                                                        \
    case 6: LAUNCH(6); break;                                                                                        \
    case 8: LAUNCH(8); break;                                                                                        \
    default:                                                                                                         \
        return gpt2_kernel_error(cudaErrorInvalidValue, "layernorm: C = %d channels (a multiple of 8, at most %d)",  \
                                 C, LN_MAX_C);                                                                       \
    }

static cudaError_t residual_layernorm_forward(bf16 *res, bf16 *out, float *mean, float *rstd, const bf16 *a,
                                              const bf16 *b2, const bf16 *w, const bf16 *b, int N, int C,
                                              cudaStream_t st) {
    unsigned grid = ceil_div((size_t)N, LN_THREADS / 32);
#define GPT2_LN_FWD(CH)                                                                                              \
    layernorm_forward_kernel<CH><<<grid, LN_THREADS, 0, st>>>(out, mean, rstd, res, a, b2, w, b, N, C)
    GPT2_LN_SWITCH(C, GPT2_LN_FWD)
#undef GPT2_LN_FWD
    GPT2_LAUNCH_CHECK();
    return cudaSuccess;
}

static cudaError_t layernorm_forward(bf16 *out, float *mean, float *rstd, const bf16 *inp, const bf16 *w,
                                     const bf16 *b, int N, int C, cudaStream_t st) {
    return residual_layernorm_forward(NULL, out, mean, rstd, inp, NULL, w, b, N, C, st);
}

static cudaError_t layernorm_backward(bf16 *dinp, float *dw, float *db, const bf16 *dout, const bf16 *inp,
                                      const bf16 *w, const float *mean, const float *rstd, int N, int C,
                                      float *scratch, cudaStream_t st) {
    unsigned grid = layernorm_backward_blocks(N);
    size_t smem = 2 * (size_t)C * sizeof(float);
#define GPT2_LN_BWD(CH)                                                                                              \
    layernorm_backward_kernel<CH><<<grid, LN_THREADS, smem, st>>>(dinp, scratch, dout, inp, w, mean, rstd, N, C)
    GPT2_LN_SWITCH(C, GPT2_LN_BWD)
#undef GPT2_LN_BWD
    GPT2_LAUNCH_CHECK();
    return fold_partials(dw, db, scratch, (int)grid, C, st);
}

#endif /* GPT2_KERNELS_LAYERNORM_CUH */
