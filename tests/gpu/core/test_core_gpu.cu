/* The Philox helpers on the GPU draw exactly what the CPU draws (same ACCEL_HD code). Exit 77 without a device. */
#include "accel.h"
#include "accel_test.h"
#include "accel_test_gpu.h"
#include <cuda_runtime_api.h>

static __global__ void draw_kernel(uint64_t seed, uint64_t stream, uint32_t *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) accel_rng_draw4(seed, stream, (uint64_t)i, out + 4 * i);
}

int main(void) {
    int count = 0, n = 4096, i, bad = 0;
    uint32_t *d_out = NULL, *h = NULL;
    AT_SKIP_WITHOUT_GPU(count);
    h = (uint32_t *)malloc(sizeof(uint32_t) * 4 * (size_t)n);
    AT_CHECK(cudaMalloc((void **)&d_out, sizeof(uint32_t) * 4 * (size_t)n) == cudaSuccess);
    draw_kernel<<<(n + 255) / 256, 256>>>(0x0123456789abcdefull, 17, d_out, n);
    AT_CHECK(cudaGetLastError() == cudaSuccess);
    AT_CHECK(cudaMemcpy(h, d_out, sizeof(uint32_t) * 4 * (size_t)n, cudaMemcpyDeviceToHost) == cudaSuccess);
    for (i = 0; i < n; ++i) {
        uint32_t ref[4];
        accel_rng_draw4(0x0123456789abcdefull, 17, (uint64_t)i, ref);
        if (memcmp(ref, h + 4 * i, sizeof ref) != 0) bad++;
    }
    AT_EQ_INT(bad, 0);
    cudaFree(d_out);
    free(h);
    return at_finish("core_gpu");
}
