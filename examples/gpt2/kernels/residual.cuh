/* kernels/residual.cuh — the residual stream's add.

     residual_forward(out, a, b, n, st)      gpt2_cpu.c's residual_forward: out = a + b (n a multiple of 8)

   The forward pass uses it fused into the next LayerNorm (layernorm.cuh's residual_layernorm_forward); this one is
   the plain layer, for the tests and for anyone who rearranges the block. The projections' biases are added by the
   GEMMs' epilogues (matmul.cuh), and the backward of an add is the identity: the residual gradient simply flows on. */
#ifndef GPT2_KERNELS_RESIDUAL_CUH
#define GPT2_KERNELS_RESIDUAL_CUH
#include "common.cuh"

__global__ void residual_forward_kernel(bf16 *out, const bf16 *a, const bf16 *b, size_t n8) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n8) return;
    x128 x = load128cs(a + i * 8), y = load128cs(b + i * 8), o;
#pragma unroll
    for (int k = 0; k < 8; ++k) o[k] = bf(f32(x[k]) + f32(y[k]));
    store128(out + i * 8, o);
}

static cudaError_t residual_forward(bf16 *out, const bf16 *a, const bf16 *b, size_t n, cudaStream_t st) {
    if (n % 8) return gpt2_kernel_error(cudaErrorInvalidValue, "residual_forward: n = %zu (a multiple of 8)", n);
    residual_forward_kernel<<<ceil_div(n / 8, 256), 256, 0, st>>>(out, a, b, n / 8);
    GPT2_LAUNCH_CHECK();
    return cudaSuccess;
}

#endif /* GPT2_KERNELS_RESIDUAL_CUH */
