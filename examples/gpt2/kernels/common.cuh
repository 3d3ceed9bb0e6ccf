/* kernels/common.cuh — what every kernel family of train_gpt2.cu shares.

     bf16, f32(), bf()        the activation type and its conversions (round to nearest even)
     x128 / f128              16 bytes of bf16 / float, loaded and stored as one vector (LDG.E.128 / STG.E.128):
                              load128 / store128, and load128cs / store128cs for data read or written once
                              (cache-streaming: it does not push what the next kernel rereads out of L2)
     warp_sum, warp_max       butterfly reductions over the 32 lanes (every lane gets the result, fixed order)
     softmax_combine          merges two online-softmax partials (max m, sum s of exp(x - m)); host and device
     fold_partials            dst[i] += Σ_p partial[p][i] in a fixed order: the second stage of every column sum
     gpt2_peak_flops          the device's dense bf16 peak (MFU's denominator)
     ceil_div, GPT2_TRY, GPT2_LAUNCH_CHECK, gpt2_kernel_error   launch arithmetic and the error convention:

   Every launcher takes a cudaStream_t and returns cudaError_t (cudaSuccess, the launch's error, or for a library
   failure a CUDA error after a line on stderr that names the call and the shapes). Every reduction in these kernels
   has a fixed order — no float atomics — so a step is bit-reproducible and a resumed run equals an uninterrupted one.
   Element-wise arithmetic is `static ACCEL_INLINE ACCEL_HD` so the CPU tests run the same math as the kernels. */
#ifndef GPT2_KERNELS_COMMON_CUH
#define GPT2_KERNELS_COMMON_CUH
#include "accel.h"
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef __nv_bfloat16 bf16;

static __device__ __forceinline__ float f32(bf16 x) { return __bfloat162float(x); }
static __device__ __forceinline__ bf16 bf(float x) { return __float2bfloat16(x); }

/* 16 bytes of T, aligned so one load or store moves them. */
template <class T> struct alignas(16) packed128 {
    static constexpr int size = (int)(16 / sizeof(T));
    T v[16 / sizeof(T)];
    __device__ __forceinline__ T &operator[](int i) { return v[i]; }
    __device__ __forceinline__ const T &operator[](int i) const { return v[i]; }
};
typedef packed128<bf16> x128;
typedef packed128<float> f128;

template <class T> static __device__ __forceinline__ packed128<T> load128(const T *p) {
    packed128<T> r;
    *reinterpret_cast<int4 *>(r.v) = *reinterpret_cast<const int4 *>(p);
    return r;
}
template <class T> static __device__ __forceinline__ packed128<T> load128cs(const T *p) {
    packed128<T> r;
    *reinterpret_cast<int4 *>(r.v) = __ldcs(reinterpret_cast<const int4 *>(p));
    return r;
}
template <class T> static __device__ __forceinline__ void store128(T *p, const packed128<T> &v) {
    *reinterpret_cast<int4 *>(p) = *reinterpret_cast<const int4 *>(v.v);
}
template <class T> static __device__ __forceinline__ void store128cs(T *p, const packed128<T> &v) {
    __stcs(reinterpret_cast<int4 *>(p), *reinterpret_cast<const int4 *>(v.v));
}

static __device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
static __device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Online softmax: (m, s) summarises values x as m = max x and s = Σ exp(x - m); an empty set is (-inf, 0). Merging
   rescales both sums to the larger maximum (an empty side contributes 0, never exp(-inf - -inf) = NaN). */
static ACCEL_INLINE ACCEL_HD void softmax_combine(float *m, float *s, float om, float os) {
    float nm = fmaxf(*m, om);
    *s = (*s > 0.0f ? *s * expf(*m - nm) : 0.0f) + (os > 0.0f ? os * expf(om - nm) : 0.0f);
    *m = nm;
}
static __device__ __forceinline__ void warp_softmax_combine(float *m, float *s) {
    for (int o = 16; o > 0; o >>= 1) {
        float om = __shfl_xor_sync(0xffffffffu, *m, o), os = __shfl_xor_sync(0xffffffffu, *s, o);
        softmax_combine(m, s, om, os);
    }
}

static inline unsigned ceil_div(size_t n, size_t d) { return (unsigned)((n + d - 1) / d); }

#define GPT2_LAUNCH_CHECK()                                                                                          \
    do {                                                                                                             \
        cudaError_t e_ = cudaGetLastError();                                                                         \
        if (e_ != cudaSuccess) return e_;                                                                            \
    } while (0)
#define GPT2_TRY(call)                                                                                               \
    do {                                                                                                             \
        cudaError_t e_ = (call);                                                                                     \
        if (e_ != cudaSuccess) return e_;                                                                            \
    } while (0)

/* A failure the CUDA error alone would not explain (a library status, an unsupported shape): one line on stderr,
   then the CUDA error the trainer reports. */
static inline cudaError_t gpt2_kernel_error(cudaError_t e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline cudaError_t gpt2_kernel_error(cudaError_t e, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("train_gpt2: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return e;
}

/* The second stage of the two-stage column sums (bias and LayerNorm parameter gradients): blockIdx.y = 0 folds
   partial[0 .. nparts) into dst0, blockIdx.y = 1 folds partial[nparts .. 2 nparts) into dst1 (rows of n floats).
   32 part-lanes each sum every 32nd part in order, then lane 0 sums the 32 in order: a fixed tree. */
__global__ void __launch_bounds__(1024) fold_partials_kernel(float *dst0, float *dst1, const float *partial,
                                                             int nparts, int n) {
    __shared__ float sh[32][33];
    int i = blockIdx.x * 32 + threadIdx.x;
    const float *p = partial + (size_t)blockIdx.y * nparts * n;
    float s = 0.0f;
    if (i < n)
        for (int k = threadIdx.y; k < nparts; k += 32) s += p[(size_t)k * n + i];
    sh[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && i < n) {
        float t = 0.0f;
        for (int r = 0; r < 32; ++r) t += sh[r][threadIdx.x];
        (blockIdx.y ? dst1 : dst0)[i] += t;
    }
}
/* dst0 += Σ of the first nparts rows of n floats; with dst1, dst1 += Σ of the next nparts rows */
static cudaError_t fold_partials(float *dst0, float *dst1, const float *partial, int nparts, int n, cudaStream_t st) {
    fold_partials_kernel<<<dim3(ceil_div((size_t)n, 32), dst1 ? 2 : 1), dim3(32, 32), 0, st>>>(dst0, dst1, partial,
                                                                                                nparts, n);
    GPT2_LAUNCH_CHECK();
    return cudaSuccess;
}

/* The device's dense bf16 tensor-core peak in FLOP/s, for MFU; 0 when unknown (no bf16 tensor cores, or a compute
   capability this table does not know). Parts whose datasheet figure assumes another clock than the one the driver
   reports (the H100/H200 family, A100) get the datasheet figure; the rest SMs x clock x the per-SM rate of their
   architecture: dense bf16 FLOP per clock per SM 2048 (sm_80), 1024 (sm_86/87/89, sm_12x: the professional parts'
   rate; GeForce boards run bf16 with fp32 accumulation at half of it, so their MFU reads low), 4096 (sm_90),
   8192 (sm_10x). */
static inline double gpt2_peak_flops(const char *name, int major, int minor, int sms, int clock_khz) {
    double per_sm = 0.0;
    if (strstr(name, "H100") && strstr(name, "PCIe")) return 756e12;
    if (strstr(name, "H100") || strstr(name, "H200") || strstr(name, "H800")) return 989e12; /* GH200 too */
    if (strstr(name, "A100") || strstr(name, "A800")) return 312e12;
    if (major == 8) per_sm = minor == 0 ? 2048.0 : 1024.0;
    else if (major == 9) per_sm = 4096.0;
    else if (major == 10) per_sm = 8192.0;
    else if (major == 12) per_sm = 1024.0;
    if (sms <= 0 || clock_khz <= 0) return 0.0;
    return per_sm * sms * clock_khz * 1e3;
}

#endif /* GPT2_KERNELS_COMMON_CUH */
