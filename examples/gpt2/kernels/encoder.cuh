/* kernels/encoder.cuh — the embeddings: out = wte[token] + wpe[position], and their gradients.

     encoder_forward(out, win, wte, wpe, B, T, C, st)         gpt2_cpu.c's encoder_forward; win is the (B, T+1)
                                                             token window (the inputs are each row's first T)
     prepare_token_segments(buf, B, T, count)                 host: the positions sorted by token, for ...
     encoder_backward(dwte, dwpe, dout, sorted_pos, seg_start, seg_tok, nseg, B, T, C, st)
                                                             gpt2_cpu.c's encoder_backward (dwte, dwpe +=)

   The wte gradient sums the rows of dout that hold the same token. Scattering with atomics would make the sum's order
   (and the bits) depend on scheduling; instead the host groups the positions by token (a counting sort of the batch
   it has anyway) and one block row sums each group in position order. C must be a multiple of 8. */
#ifndef GPT2_KERNELS_ENCODER_CUH
#define GPT2_KERNELS_ENCODER_CUH
#include "common.cuh"

/* 8 channels per thread */
__global__ void encoder_forward_kernel(bf16 *out, const int32_t *win, const bf16 *wte, const bf16 *wpe, int B, int T,
                                       int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, C8 = (size_t)C / 8;
    if (i >= (size_t)B * T * C8) return;
    int c = (int)(i % C8) * 8, bt = (int)(i / C8), b = bt / T, t = bt % T;
    int tok = win[(size_t)b * (T + 1) + t];
    x128 te = load128(wte + (size_t)tok * C + c), pe = load128(wpe + (size_t)t * C + c), o;
#pragma unroll
    for (int k = 0; k < 8; ++k) o[k] = bf(f32(te[k]) + f32(pe[k]));
    store128(out + (size_t)bt * C + c, o);
}

static cudaError_t encoder_forward(bf16 *out, const int32_t *win, const bf16 *wte, const bf16 *wpe, int B, int T,
                                   int C, cudaStream_t st) {
    encoder_forward_kernel<<<ceil_div((size_t)B * T * C / 8, 256), 256, 0, st>>>(out, win, wte, wpe, B, T, C);
    GPT2_LAUNCH_CHECK();
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
            int32_t c = count[tok];
            seg_tok[nseg] = tok;
            seg_start[nseg++] = pos;
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

/* dwte[token] += Σ dout over the token's positions: block (segment, channel group), 8 channels per thread */
#define ENCODER_BWD_THREADS 128
__global__ void encoder_backward_wte_kernel(float *dwte, const bf16 *dout, const int32_t *sorted_pos,
                                            const int32_t *seg_start, const int32_t *seg_tok, int C) {
    int seg = blockIdx.x, c = (blockIdx.y * blockDim.x + threadIdx.x) * 8;
    if (c >= C) return;
    float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int i = seg_start[seg]; i < seg_start[seg + 1]; ++i) {
        x128 d = load128(dout + (size_t)sorted_pos[i] * C + c);
#pragma unroll
        for (int k = 0; k < 8; ++k) s[k] += f32(d[k]);
    }
    float *g = dwte + (size_t)seg_tok[seg] * C + c;
    f128 g0 = load128(g), g1 = load128(g + 4);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        g0[k] += s[k];
        g1[k] += s[4 + k];
    }
    store128(g, g0);
    store128(g + 4, g1);
}
/* dwpe[t] += Σ_b dout[b, t], 8 channels per thread */
__global__ void encoder_backward_wpe_kernel(float *dwpe, const bf16 *dout, int B, int T, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, C8 = (size_t)C / 8;
    if (i >= (size_t)T * C8) return;
    size_t at = (i / C8) * C + (i % C8) * 8; /* t * C + c */
    float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int b = 0; b < B; ++b) {
        x128 d = load128(dout + (size_t)b * T * C + at);
#pragma unroll
        for (int k = 0; k < 8; ++k) s[k] += f32(d[k]);
    }
    f128 g0 = load128(dwpe + at), g1 = load128(dwpe + at + 4);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        g0[k] += s[k];
        g1[k] += s[4 + k];
    }
    store128(dwpe + at, g0);
    store128(dwpe + at + 4, g1);
}

static cudaError_t encoder_backward(float *dwte, float *dwpe, const bf16 *dout, const int32_t *sorted_pos,
                                    const int32_t *seg_start, const int32_t *seg_tok, int nseg, int B, int T, int C,
                                    cudaStream_t st) {
    if (nseg > 0) {
        dim3 grid((unsigned)nseg, ceil_div((size_t)C / 8, ENCODER_BWD_THREADS));
        encoder_backward_wte_kernel<<<grid, ENCODER_BWD_THREADS, 0, st>>>(dwte, dout, sorted_pos, seg_start, seg_tok,
                                                                          C);
        GPT2_LAUNCH_CHECK();
    }
    encoder_backward_wpe_kernel<<<ceil_div((size_t)T * C / 8, 256), 256, 0, st>>>(dwpe, dout, B, T, C);
    GPT2_LAUNCH_CHECK();
    return cudaSuccess;
}

#endif /* GPT2_KERNELS_ENCODER_CUH */
