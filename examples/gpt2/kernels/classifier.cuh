/* kernels/classifier.cuh — the LM head's softmax cross-entropy, loss and gradient in one kernel.

     fused_classifier(logits, losses, win, B, T, V, Vp, dloss, st)
         gpt2_cpu.c's crossentropy_forward (losses[n] = logsumexp(z[:V]) - z[target]) and
         crossentropy_softmax_backward (z → (softmax(z) - onehot(target)) · dloss in place, the Vp - V padded columns
         0) in one pass per row; the targets are the windows' next tokens, win[b][t + 1]
     loss_mean(acc, losses, n, st)       acc += mean(losses), one block, fixed order

   One block per row: the first sweep keeps an online (max, sum of exp) per thread over 16-byte chunks — one read of
   the row — and merges them in a fixed tree; the second sweep rereads the row (from L2: the block just read it) and
   writes the gradient with streaming stores (the next reader is the backward's GEMMs, after all the rows). */
#ifndef GPT2_KERNELS_CLASSIFIER_CUH
#define GPT2_KERNELS_CLASSIFIER_CUH
#include "common.cuh"

#define CLS_THREADS 1024 /* 32 warps: the block merge is one warp's */
__global__ void __launch_bounds__(CLS_THREADS) fused_classifier_kernel(bf16 *logits, float *losses,
                                                                       const int32_t *win, int T, int V, int Vp,
                                                                       float dloss) {
    __shared__ float sm[CLS_THREADS / 32], ss[CLS_THREADS / 32], res[2];
    int row = blockIdx.x, tid = threadIdx.x, b = row / T, t = row % T;
    int target = win[(size_t)b * (T + 1) + t + 1];
    bf16 *z = logits + (size_t)row * Vp;
    float m = -INFINITY, s = 0.0f;
    for (int c = tid * 8; c < V; c += CLS_THREADS * 8) {
        x128 v = load128(z + c);
        float cm = -INFINITY, add = 0.0f, nm;
#pragma unroll
        for (int i = 0; i < 8; ++i)
            if (c + i < V) cm = fmaxf(cm, f32(v[i]));
        nm = fmaxf(m, cm);
#pragma unroll
        for (int i = 0; i < 8; ++i)
            if (c + i < V) add += __expf(f32(v[i]) - nm);
        s = s * __expf(m - nm) + add; /* m = -inf at first: exp(-inf) = 0 */
        m = nm;
    }
    warp_softmax_combine(&m, &s);
    if (tid % 32 == 0) {
        sm[tid / 32] = m;
        ss[tid / 32] = s;
    }
    __syncthreads();
    if (tid < 32) {
        m = sm[tid];
        s = ss[tid];
        warp_softmax_combine(&m, &s);
        if (tid == 0) {
            res[0] = m + logf(s); /* logsumexp */
            res[1] = f32(z[target]);
        }
    }
    __syncthreads();
    float lse = res[0];
    for (int c = tid * 8; c < Vp; c += CLS_THREADS * 8) {
        x128 v = load128cs(z + c), o;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            int k = c + i;
            o[i] = k < V ? bf((__expf(f32(v[i]) - lse) - (k == target ? 1.0f : 0.0f)) * dloss) : bf(0.0f);
        }
        store128cs(z + c, o);
    }
    if (tid == 0) losses[row] = lse - res[1];
}

static cudaError_t fused_classifier(bf16 *logits, float *losses, const int32_t *win, int B, int T, int V, int Vp,
                                    float dloss, cudaStream_t st) {
    if (Vp % 8 || V > Vp)
        return gpt2_kernel_error(cudaErrorInvalidValue, "fused_classifier: V = %d, padded %d (a multiple of 8)", V, Vp);
    fused_classifier_kernel<<<B * T, CLS_THREADS, 0, st>>>(logits, losses, win, T, V, Vp, dloss);
    GPT2_LAUNCH_CHECK();
    return cudaSuccess;
}

/* acc += mean(losses) in a fixed order (one block of 1024) */
__global__ void __launch_bounds__(1024) loss_mean_kernel(float *acc, const float *losses, int n) {
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
static cudaError_t loss_mean(float *acc, const float *losses, int n, cudaStream_t st) {
    loss_mean_kernel<<<1, 1024, 0, st>>>(acc, losses, n);
    GPT2_LAUNCH_CHECK();
    return cudaSuccess;
}

#endif /* GPT2_KERNELS_CLASSIFIER_CUH */
