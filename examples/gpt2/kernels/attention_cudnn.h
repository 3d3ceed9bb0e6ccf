/* kernels/attention_cudnn.h — causal self-attention through cuDNN's fused scaled-dot-product attention (flash
   attention: the T x T scores never reach memory), declared for train_gpt2.cu and implemented in
   attention_cudnn.cpp. That file is plain C++ for the host compiler: the cuDNN frontend is a header-only C++ library
   that g++ compiles in seconds and nvcc in minutes.

     attention_cudnn_forward(out, stats, qkv, B, T, NH, HS, st)
         out (B, T, NH·HS) = softmax(q·kᵀ / sqrt(HS), causal) · v for q, k, v read in place from the fused qkv rows
         (B, T, 3, NH, HS), no permutes; stats (B, NH, T) fp32: each row's log-sum-exp, kept for the backward
     attention_cudnn_backward(dqkv, dout, qkv, out, stats, B, T, NH, HS, st)
         dq, dk, dv written in place into dqkv's (B, T, 3, NH, HS) rows; cuDNN's deterministic algorithm (the same
         bits every run: a resumed run must equal an uninterrupted one)
     attention_cudnn_prepare(B, T, NH, HS)
         builds (and caches) both graphs of the shape without running them: whether cuDNN takes it, known before
         any buffer is allocated (and the plans' build time is not charged to the first step)
     attention_cudnn_error()       what the last failure was (cuDNN's message), for the caller's report
     attention_cudnn_destroy()     the handle, the cached graphs and the workspace

   Both return 0, or -1 with attention_cudnn_error() set. The first call of a shape builds and caches its cuDNN graph
   and execution plan (the heuristics' first choice); later calls only execute it. Needs bf16, HS a multiple of 8 up
   to 256, an sm_80+ GPU and cuDNN 9 with frontend 1.13 or later; anything else is reported as unsupported.

   sdpa_layout_of gives the logical shape and the strides the graphs are built with; the CPU test walks the same
   strides with a reference attention and compares with gpt2_cpu.c, so the layout is checked without a GPU. */
#ifndef GPT2_KERNELS_ATTENTION_CUDNN_H
#define GPT2_KERNELS_ATTENTION_CUDNN_H
#include <cuda_runtime_api.h>
#include <stdint.h>

/* The tensors of one call as cuDNN sees them: dims (B, NH, T, HS), element strides into our buffers. */
struct sdpa_layout {
    int64_t dim[4];                       /* B, NH, T, HS */
    int64_t qkv_stride[4];                /* q, k, v (and dq, dk, dv) inside the (B, T, 3, NH, HS) rows */
    int64_t k_offset, v_offset;           /* elements from q's base to k's and v's */
    int64_t o_stride[4];                  /* out and dout: (B, T, NH, HS) */
    int64_t stats_dim[4], stats_stride[4]; /* (B, NH, T, 1) fp32, packed */
};

static inline sdpa_layout sdpa_layout_of(int B, int T, int NH, int HS) {
    int64_t C = (int64_t)NH * HS;
    sdpa_layout l;
    l.dim[0] = B;
    l.dim[1] = NH;
    l.dim[2] = T;
    l.dim[3] = HS;
    l.qkv_stride[0] = 3 * C * T; /* batch: T rows of 3C */
    l.qkv_stride[1] = HS;        /* head: HS channels on */
    l.qkv_stride[2] = 3 * C;     /* position: the next row */
    l.qkv_stride[3] = 1;
    l.k_offset = C;
    l.v_offset = 2 * C;
    l.o_stride[0] = C * T;
    l.o_stride[1] = HS;
    l.o_stride[2] = C;
    l.o_stride[3] = 1;
    l.stats_dim[0] = B;
    l.stats_dim[1] = NH;
    l.stats_dim[2] = T;
    l.stats_dim[3] = 1;
    l.stats_stride[0] = (int64_t)NH * T;
    l.stats_stride[1] = T;
    l.stats_stride[2] = 1;
    l.stats_stride[3] = 1;
    return l;
}

int attention_cudnn_prepare(int B, int T, int NH, int HS);
int attention_cudnn_forward(void *out, float *stats, const void *qkv, int B, int T, int NH, int HS, cudaStream_t st);
int attention_cudnn_backward(void *dqkv, const void *dout, const void *qkv, const void *out, const float *stats,
                             int B, int T, int NH, int HS, cudaStream_t st);
const char *attention_cudnn_error(void);
void attention_cudnn_destroy(void);

#endif /* GPT2_KERNELS_ATTENTION_CUDNN_H */
