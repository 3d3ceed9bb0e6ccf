/* kernels/gelu.cuh — GELU, tanh approximation (GPT-2's "gelu_new"): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).

     gelu_forward(out, inp, n, st)        gpt2_cpu.c's gelu_forward
     gelu_backward(d, inp, n, st)         gpt2_cpu.c's gelu_backward: d *= gelu'(inp), in place
     gelu_tanh(x), gelu_tanh_grad(x)      the element math (host and device: the CPU tests call it)

   On Hopper and later the MLP runs GELU inside the fc GEMM's epilogue instead (matmul.cuh: cuBLASLt GELU_AUX_BIAS
   forward, DGELU backward): these kernels are the path where that is slower or unsupported. n is a multiple of 8. */
#ifndef GPT2_KERNELS_GELU_CUH
#define GPT2_KERNELS_GELU_CUH
#include "common.cuh"

#define GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */
static ACCEL_INLINE ACCEL_HD float gelu_tanh(float x) {
    return 0.5f * x * (1.0f + tanhf(GELU_SCALE * (x + 0.044715f * x * x * x)));
}
static ACCEL_INLINE ACCEL_HD float gelu_tanh_grad(float x) {
    float th = tanhf(GELU_SCALE * (x + 0.044715f * x * x * x));
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
}

__global__ void gelu_forward_kernel(bf16 *out, const bf16 *inp, size_t n8) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n8) return;
    x128 x = load128(inp + i * 8), o;
#pragma unroll
    for (int k = 0; k < 8; ++k) o[k] = bf(gelu_tanh(f32(x[k])));
    store128(out + i * 8, o);
}
__global__ void gelu_backward_kernel(bf16 *d, const bf16 *inp, size_t n8) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n8) return;
    x128 x = load128cs(inp + i * 8), g = load128(d + i * 8);
#pragma unroll
    for (int k = 0; k < 8; ++k) g[k] = bf(f32(g[k]) * gelu_tanh_grad(f32(x[k])));
    store128(d + i * 8, g);
}

static cudaError_t gelu_forward(bf16 *out, const bf16 *inp, size_t n, cudaStream_t st) {
    if (n % 8) return gpt2_kernel_error(cudaErrorInvalidValue, "gelu_forward: n = %zu (a multiple of 8)", n);
    gelu_forward_kernel<<<ceil_div(n / 8, 256), 256, 0, st>>>(out, inp, n / 8);
    GPT2_LAUNCH_CHECK();
    return cudaSuccess;
}
static cudaError_t gelu_backward(bf16 *d, const bf16 *inp, size_t n, cudaStream_t st) {
    if (n % 8) return gpt2_kernel_error(cudaErrorInvalidValue, "gelu_backward: n = %zu (a multiple of 8)", n);
    gelu_backward_kernel<<<ceil_div(n / 8, 256), 256, 0, st>>>(d, inp, n / 8);
    GPT2_LAUNCH_CHECK();
    return cudaSuccess;
}

#endif /* GPT2_KERNELS_GELU_CUH */
