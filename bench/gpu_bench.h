/* Shared by the GPU benchmarks (bench/<module>/bench_*_gpu.cu): the GPT-2 124M gradient list, CUDA-event timing,
   a read-only reduction kernel (the limit for norms), the skip rule and the python peer runner. Not part of accel. */
#ifndef ACCEL_BENCH_GPU_BENCH_H
#define ACCEL_BENCH_GPU_BENCH_H
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GB_NT 148 /* GPT-2 124M: 148 fp32 tensors, 124,439,808 parameters */
#define GB_FLAT_BYTES ((size_t)1 << 30)

/* wte, wpe, 12 × (ln_1 w b, c_attn w b, attn c_proj w b, ln_2 w b, c_fc w b, mlp c_proj w b), ln_f w b */
static inline int64_t gb_gpt2_sizes(int64_t *sizes) {
    int i = 0, l;
    int64_t n = 0;
    sizes[i++] = 50257LL * 768; sizes[i++] = 1024LL * 768;
    for (l = 0; l < 12; ++l) {
        sizes[i++] = 768; sizes[i++] = 768;
        sizes[i++] = 768LL * 2304; sizes[i++] = 2304;
        sizes[i++] = 768LL * 768; sizes[i++] = 768;
        sizes[i++] = 768; sizes[i++] = 768;
        sizes[i++] = 768LL * 3072; sizes[i++] = 3072;
        sizes[i++] = 3072LL * 768; sizes[i++] = 768;
    }
    sizes[i++] = 768; sizes[i++] = 768;
    for (i = 0; i < GB_NT; ++i) n += sizes[i];
    return n;
}

#define GB_CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(1); } } while (0)

/* Exit 77 (meson: skipped) without a device. */
static inline void gb_need_device(const char *prog) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        printf("%s: no CUDA device: skipped\n", prog);
        exit(77);
    }
}

static inline const char *gb_device_name(void) {
    static char name[256];
    cudaDeviceProp p;
    int d = 0;
    if (!name[0] && cudaGetDevice(&d) == cudaSuccess && cudaGetDeviceProperties(&p, d) == cudaSuccess)
        snprintf(name, sizeof name, "%s", p.name);
    return name;
}

/* Deterministic values in [-1, 1) (finite), so unscale and norms see realistic data. */
__global__ static void gb_fill_kernel(float *p, size_t n, uint32_t seed) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x, stride = (size_t)gridDim.x * blockDim.x;
    for (; i < n; i += stride) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
        p[i] = (float)(h >> 8) * (1.0f / 8388608.0f) - 1.0f;
    }
}
static inline void gb_fill(float *p, size_t n, uint32_t seed, cudaStream_t st) {
    gb_fill_kernel<<<1024, 256, 0, st>>>(p, n, seed);
    GB_CK(cudaGetLastError());
}

/* The read-only limit for norms: sum of squares with 16-byte loads, block partials in fp32, one atomic per block.
   n4 = number of float4 (the caller handles alignment: every buffer here is cudaMalloc'd, a multiple of 4). */
__global__ static void gb_sumsq_kernel(const float4 *p, size_t n4, float *out) {
    __shared__ float ws[32];
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x, stride = (size_t)gridDim.x * blockDim.x;
    float s = 0.0f;
    int o;
    for (; i < n4; i += stride) {
        float4 v = p[i];
        s += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
    for (o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
    if ((threadIdx.x & 31) == 0) ws[threadIdx.x >> 5] = s;
    __syncthreads();
    if (threadIdx.x < 32) {
        s = threadIdx.x < (blockDim.x >> 5) ? ws[threadIdx.x] : 0.0f;
        for (o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
        if (threadIdx.x == 0) atomicAdd(out, s);
    }
}
/* Launch the limit reduction over a whole buffer: grid from the SM count (4 blocks of 256 per SM keeps enough loads
   in flight on A100/H100). */
static inline void gb_sumsq(const float *p, size_t n, float *out, cudaStream_t st) {
    static int blocks = 0;
    if (!blocks) {
        int d = 0, sms = 0;
        cudaGetDevice(&d);
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, d);
        blocks = sms > 0 ? sms * 8 : 1024;
    }
    cudaMemsetAsync(out, 0, sizeof(float), st);
    gb_sumsq_kernel<<<blocks, 256, 0, st>>>((const float4 *)p, n / 4, out);
}

/* Best-of-reps time in seconds of what the statements (last argument) enqueue on st (CUDA events around it). */
#define GB_TIME(best, st, reps, ...) do { \
    cudaEvent_t a_, b_; int r_; float ms_ = 0; (best) = 1e30; \
    GB_CK(cudaEventCreate(&a_)); GB_CK(cudaEventCreate(&b_)); \
    for (r_ = 0; r_ < (reps); ++r_) { \
        GB_CK(cudaEventRecord(a_, st)); { __VA_ARGS__; } GB_CK(cudaEventRecord(b_, st)); \
        GB_CK(cudaEventSynchronize(b_)); GB_CK(cudaEventElapsedTime(&ms_, a_, b_)); \
        if (ms_ * 1e-3 < (best)) (best) = ms_ * 1e-3; \
    } \
    GB_CK(cudaGetLastError()); cudaEventDestroy(a_); cudaEventDestroy(b_); } while (0)

/* Keeps the stream busy for `ns` nanoseconds (one thread watching the global timer). */
__global__ static void gb_spin_kernel(unsigned long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
}
/* What a call that synchronizes costs a trainer whose host runs ahead of the GPU: the stream is kept busy for 300 us
   first (as by the backward pass), so the host prepares and enqueues the call meanwhile; timed from the GPU finishing
   that work to the call's return (its GPU work, the read-back, the wake-up and whatever the host does after), best
   of reps. */
#define GB_TIME_BUSY(best, st, reps, ...) do { \
    cudaEvent_t a_, b_; int r_; float ms_ = 0; (best) = 1e30; \
    GB_CK(cudaEventCreate(&a_)); GB_CK(cudaEventCreate(&b_)); \
    for (r_ = 0; r_ < (reps); ++r_) { \
        gb_spin_kernel<<<1, 1, 0, st>>>(300000ull); \
        GB_CK(cudaEventRecord(a_, st)); { __VA_ARGS__; } GB_CK(cudaEventRecord(b_, st)); \
        GB_CK(cudaEventSynchronize(b_)); GB_CK(cudaEventElapsedTime(&ms_, a_, b_)); \
        if (ms_ * 1e-3 < (best)) (best) = ms_ * 1e-3; \
    } \
    GB_CK(cudaGetLastError()); cudaEventDestroy(a_); cudaEventDestroy(b_); } while (0)

/* The GPU time per call of what the statements enqueue when calls follow each other (a trainer's steady state for
   work that does not synchronize: the host runs ahead, so its own time per call is hidden): the best of `batches`
   runs of `reps` back-to-back calls between two events, divided by reps. */
#define GB_TIME_BATCH(best, st, batches, reps, ...) do { \
    cudaEvent_t a_, b_; int r_, k_; float ms_ = 0; (best) = 1e30; \
    GB_CK(cudaEventCreate(&a_)); GB_CK(cudaEventCreate(&b_)); \
    for (k_ = 0; k_ < (batches); ++k_) { \
        GB_CK(cudaEventRecord(a_, st)); for (r_ = 0; r_ < (reps); ++r_) { __VA_ARGS__; } \
        GB_CK(cudaEventRecord(b_, st)); GB_CK(cudaEventSynchronize(b_)); GB_CK(cudaEventElapsedTime(&ms_, a_, b_)); \
        if (ms_ * 1e-3 / (reps) < (best)) (best) = ms_ * 1e-3 / (reps); \
    } \
    GB_CK(cudaGetLastError()); cudaEventDestroy(a_); cudaEventDestroy(b_); } while (0)

/* Runs `python3 SCRIPT ARGS` (ACCEL_BENCH_PYTHON overrides the interpreter: a venv with torch+CUDA) and keeps its
   first output line (one JSON object). 0 when there is no usable line. */
static inline int gb_run_peer(const char *script, const char *args, char *out, size_t cap) {
    char cmd[2048];
    const char *py = getenv("ACCEL_BENCH_PYTHON");
    FILE *pp;
    int ok = 0;
    out[0] = 0;
    if (!script || !script[0]) return 0;
    snprintf(cmd, sizeof cmd, "'%s' '%s' %s 2>/dev/null", py && py[0] ? py : "python3", script, args);
    fflush(stdout);
    pp = popen(cmd, "r");
    if (!pp) return 0;
    if (fgets(out, (int)cap, pp)) ok = out[0] == '{' && !strstr(out, "\"error\"");
    pclose(pp);
    return ok;
}
/* The number after "key": in a one-line JSON object; 0 when absent. */
static inline double gb_json_num(const char *json, const char *key) {
    char pat[128];
    const char *s;
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    s = strstr(json, pat);
    return s ? atof(s + strlen(pat)) : 0.0;
}

/* One DESIGN.md line. ratio = accel / reference for speeds (GB/s), reference / accel for times (unit starting "us"
or "s"), so a ratio above 1 always means accel is faster. */
static inline void gb_line(const char *bench, const char *params, const char *unit, double accel_v, double ref_v,
                           const char *ref_name, double goal) {
    int time_unit = unit[0] == 's' || (unit[0] == 'u' && unit[1] == 's');
    double ratio = accel_v > 0 && ref_v > 0 ? (time_unit ? ref_v / accel_v : accel_v / ref_v) : 0.0;
    printf("{\"bench\": \"%s\", \"params\": {%s, \"device\": \"%s\"}, \"unit\": \"%s\", \"accel\": %.4g, "
           "\"reference\": %.4g, \"reference_name\": \"%s\", \"ratio\": %.3f, \"goal\": %.2f}\n",
           bench, params, gb_device_name(), unit, accel_v, ref_v, ref_name, ratio, goal);
    fflush(stdout);
}
#endif
