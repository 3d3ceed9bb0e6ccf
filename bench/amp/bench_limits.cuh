/* The bandwidth limits the amp GPU benchmarks divide by, measured in the same run (bench_amp_gpu.cu, bench_fp8_gpu.cu).
   A ratio is only as good as its limit, so neither limit is one kernel taken on trust:
   - read + write: the faster of cudaMemcpyAsync device-to-device and a copy kernel swept over its depth (1, 2, 4, 8
     16-byte loads in flight per thread before the stores) and its grid (2, 4, 8, 16 blocks of 256 per SM walking
     the buffer with the grid as stride, or one block per 256 x depth vectors as torch's element-wise kernels);
   - read only: a sum-of-squares kernel (fp32, one atomic per block) swept the same way (2..16 loads in flight).
   Each sweep keeps its best configuration; bl_print_limits prints both, next to cudaMemcpyAsync and the nominal peak
   (memory clock x bus width), so a reader can see that the limit sits where the hardware does. Not part of accel. */
#ifndef ACCEL_BENCH_AMP_LIMITS_CUH
#define ACCEL_BENCH_AMP_LIMITS_CUH
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

template <int U>
__global__ static void bl_copy_kernel(const uint4 *__restrict__ s, uint4 *__restrict__ d, size_t n) {
    const size_t b = blockDim.x;
    size_t i = (size_t)blockIdx.x * b * U + threadIdx.x;
    const size_t stride = (size_t)gridDim.x * b * U;
    for (; i < n; i += stride) {
        uint4 v[U];
#pragma unroll
        for (int k = 0; k < U; ++k)
            if (i + k * b < n) v[k] = s[i + k * b];
#pragma unroll
        for (int k = 0; k < U; ++k)
            if (i + k * b < n) d[i + k * b] = v[k];
    }
}

template <int U>
__global__ static void bl_sumsq_kernel(const float4 *__restrict__ p, size_t n, float *out) {
    __shared__ float ws[32];
    const size_t b = blockDim.x;
    size_t i = (size_t)blockIdx.x * b * U + threadIdx.x;
    const size_t stride = (size_t)gridDim.x * b * U;
    float acc = 0.0f;
    for (; i < n; i += stride) {
        float4 v[U];
#pragma unroll
        for (int k = 0; k < U; ++k) v[k] = i + k * b < n ? p[i + k * b] : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int k = 0; k < U; ++k) acc += v[k].x * v[k].x + v[k].y * v[k].y + v[k].z * v[k].z + v[k].w * v[k].w;
    }
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
    if ((threadIdx.x & 31) == 0) ws[threadIdx.x >> 5] = acc;
    __syncthreads();
    if (threadIdx.x < 32) {
        acc = threadIdx.x < (blockDim.x >> 5) ? ws[threadIdx.x] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
        if (threadIdx.x == 0) atomicAdd(out, acc);
    }
}

#define BL_CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(1); } } while (0)

typedef struct { double gbs; int depth, per_sm; } bl_best;

static inline int bl_sms(void) {
    int d = 0, n = 0;
    BL_CK(cudaGetDevice(&d));
    BL_CK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, d));
    return n > 0 ? n : 1;
}
/* memory clock (kHz) x bus width (bits) x 2 (double data rate), in GB/s; 0 when the device does not say */
static inline double bl_nominal_peak_gbs(void) {
    int d = 0, khz = 0, bits = 0;
    BL_CK(cudaGetDevice(&d));
    if (cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, d) != cudaSuccess ||
        cudaDeviceGetAttribute(&bits, cudaDevAttrGlobalMemoryBusWidth, d) != cudaSuccess) {
        cudaGetLastError();
        return 0.0;
    }
    return 2.0 * (double)khz * 1e3 * (double)bits / 8.0 * 1e-9;
}

/* seconds per launch of what launch() enqueues on st, launches back to back (the GPU's throughput, no host gaps; the
   jobs that do not synchronize are timed the same way): the best of 3 batches of reps launches */
template <typename F>
static inline double bl_time(cudaStream_t st, int reps, F launch) {
    cudaEvent_t a, b;
    float ms = 0;
    double best = 1e30;
    BL_CK(cudaEventCreate(&a));
    BL_CK(cudaEventCreate(&b));
    launch(); /* warm-up */
    for (int k = 0; k < 3; ++k) {
        BL_CK(cudaEventRecord(a, st));
        for (int r = 0; r < reps; ++r) launch();
        BL_CK(cudaEventRecord(b, st));
        BL_CK(cudaEventSynchronize(b));
        BL_CK(cudaEventElapsedTime(&ms, a, b));
        if (ms * 1e-3 / reps < best) best = ms * 1e-3 / reps;
    }
    BL_CK(cudaGetLastError());
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return best;
}

/* the best (GB/s = bytes / time) of launch(depth, grid) over depths x grids of per_sm[] blocks per SM (per_sm 0:
   grid 0, the launcher's one block per tile) */
template <typename L>
static inline bl_best bl_sweep(const int *depths, int nd, const int *per_sm, int np, double bytes, cudaStream_t st,
                               int reps, L launch) {
    const int sms = bl_sms();
    bl_best best = {0.0, 0, 0};
    for (int di = 0; di < nd; ++di)
        for (int pi = 0; pi < np; ++pi) {
            double gbs = bytes * 1e-9 / bl_time(st, reps, [&] { launch(depths[di], sms * per_sm[pi]); });
            if (gbs > best.gbs) { best.gbs = gbs; best.depth = depths[di]; best.per_sm = per_sm[pi]; }
        }
    return best;
}
/* the copy kernel at its best: GB/s counting bytes read + written (2 x bytes); bytes a multiple of 16 */
static inline bl_best bl_copy_best(void *dst, const void *src, size_t bytes, cudaStream_t st, int reps) {
    static const int depths[] = {1, 2, 4, 8}, per_sm[] = {2, 4, 8, 16, 0};
    const uint4 *s = (const uint4 *)src;
    uint4 *d = (uint4 *)dst;
    const size_t n = bytes / 16;
    return bl_sweep(depths, 4, per_sm, 5, 2.0 * (double)bytes, st, reps, [&](int depth, int g) {
        if (g == 0) g = (int)((n + 256u * (size_t)depth - 1) / (256u * (size_t)depth)); /* a block per tile */
        if (depth == 1) bl_copy_kernel<1><<<g, 256, 0, st>>>(s, d, n);
        else if (depth == 2) bl_copy_kernel<2><<<g, 256, 0, st>>>(s, d, n);
        else if (depth == 4) bl_copy_kernel<4><<<g, 256, 0, st>>>(s, d, n);
        else bl_copy_kernel<8><<<g, 256, 0, st>>>(s, d, n);
    });
}
/* the read-only reduction at its best: GB/s counting bytes read; out: one float of device memory (it accumulates
   over the repetitions: only the time is used) */
static inline bl_best bl_read_best(const float *p, size_t bytes, float *out, cudaStream_t st, int reps) {
    static const int depths[] = {2, 4, 8, 16}, per_sm[] = {2, 4, 8};
    const float4 *q = (const float4 *)p;
    const size_t n = bytes / 16;
    return bl_sweep(depths, 4, per_sm, 3, (double)bytes, st, reps, [&](int depth, int g) {
        if (depth == 2) bl_sumsq_kernel<2><<<g, 256, 0, st>>>(q, n, out);
        else if (depth == 4) bl_sumsq_kernel<4><<<g, 256, 0, st>>>(q, n, out);
        else if (depth == 8) bl_sumsq_kernel<8><<<g, 256, 0, st>>>(q, n, out);
        else bl_sumsq_kernel<16><<<g, 256, 0, st>>>(q, n, out);
    });
}
/* cudaMemcpyAsync device-to-device, GB/s counting bytes read + written */
static inline double bl_memcpy_gbs(void *dst, const void *src, size_t bytes, cudaStream_t st, int reps) {
    double t = bl_time(st, reps, [&] { BL_CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, st)); });
    return 2.0 * (double)bytes * 1e-9 / t;
}

/* The information lines: the copy limit (kernel vs cudaMemcpyAsync) and the read limit (vs the copy limit), with
   the configurations that won and the nominal peak. goal null: these are the yardsticks, not jobs. */
static inline void bl_print_limits(const char *what, const char *dev, double memcpy_gbs, bl_best copy, bl_best read) {
    const double peak = bl_nominal_peak_gbs(), lim = copy.gbs > memcpy_gbs ? copy.gbs : memcpy_gbs;
    char grid[64];
    if (copy.per_sm > 0) snprintf(grid, sizeof grid, "%d blocks of 256 per SM", copy.per_sm);
    else snprintf(grid, sizeof grid, "a block of 256 per %d vectors", 256 * copy.depth);
    printf("{\"bench\": \"limit_copy_gpu\", \"params\": {%s, \"device\": \"%s\", \"kernel\": \"16-byte vectors, %d in "
           "flight per thread, %s (best of 20)\", \"nominal_peak_gbs\": %.0f, \"limit_gbs\": %.1f, "
           "\"limit_of_nominal\": %.3f, \"timed\": \"back-to-back launches\"}, \"unit\": \"GB/s\", \"accel\": %.1f, "
           "\"reference\": %.1f, \"reference_name\": \"cudaMemcpyAsync D2D\", \"ratio\": %.3f, \"goal\": null}\n",
           what, dev, copy.depth, grid, peak, lim, peak > 0 ? lim / peak : 0.0, copy.gbs, memcpy_gbs,
           copy.gbs / memcpy_gbs);
    printf("{\"bench\": \"limit_read_gpu\", \"params\": {%s, \"device\": \"%s\", \"kernel\": \"sum of squares, 16-byte "
           "vectors, %d in flight per thread, %d blocks of 256 per SM (best of 12)\", \"nominal_peak_gbs\": %.0f, "
           "\"limit_of_nominal\": %.3f}, \"unit\": \"GB/s\", \"accel\": %.1f, \"reference\": %.1f, \"reference_name\": "
           "\"copy limit (read + written)\", \"ratio\": %.3f, \"goal\": null}\n",
           what, dev, read.depth, read.per_sm, peak, peak > 0 ? read.gbs / peak : 0.0, read.gbs, lim, read.gbs / lim);
    fflush(stdout);
}
#endif
