/* accel_optim GPU benchmark: fused AdamW over the GPT-2 124M parameter list (148 tensors, 124,439,808 parameters,
   fp32 master weights), timed with CUDA events (best of REPS), in five forms:
     adamw_step_gpu               F32 gradients                                      28 bytes per parameter
     adamw_step_gpu_bf16          BF16 gradients, BF16 model copy (nearest)          26
     adamw_step_gpu_bf16_sr       BF16 gradients, BF16 model copy (stochastic)       26
     adamw_step_gpu_bf16_moments  F32 gradients, BF16 moments                        20
     adamw_step_gpu_bf16_all      BF16 gradients, BF16 copy (nearest), BF16 moments  18
   (bytes read + written; parameters and gradients random, of ordinary size). Each against, in the same run:
   (1) a device-to-device cudaMemcpy moving the same bytes (half of them read, half written), goal 0.90;
   (2) torch.optim.AdamW(fused=True) on the same list
   (torch_peer_gpu.py, when the local torch has CUDA): with F32 parameters and gradients for the F32-gradient forms
   (goal 1.1 for adamw_step_gpu), with BF16 parameters and gradients for the BF16-gradient forms (torch's fused
   AdamW takes gradients of the parameters' dtype only, so it keeps BF16 weights and moments: 14 bytes per
   parameter; no goal); (3) for the F32 and BF16 + copy forms, a yardstick kernel that moves the same streams with
   trivial math (mix_kernel, its best shape; params.yardstick_vs_copy says what that mix of reads and writes reaches
   against the copy), no goal: it tells the access pattern's cost from the optimizer's own. The accel lines print
   without torch. Exits 77 without a device.
   usage: bench_optim_gpu [TORCH_PEER_GPU_PY|-] [REPS]; the peer runs under $ACCEL_BENCH_PYTHON, else python3 from
   PATH ("-": no peer).
   Built with -DBENCH_OWN_IMPL (bench/optim/sweep_gpu.sh) it holds the implementation itself, compiled with a launch
   shape's macros (bench/optim/variants.txt; BENCH_VARIANT its name), and names that shape in its lines. */
#ifdef BENCH_OWN_IMPL
#define ACCEL_IMPLEMENTATION
#endif
#include "accel.h"
#include "accel_optim.h"
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../amp/bench_limits.cuh"
#include "../gpu_bench.h"

#define NT GB_NT
static int64_t sizes[NT];

#define CK(x)                                                                                                          \
    do {                                                                                                               \
        cudaError_t e_ = (x);                                                                                          \
        if (e_ != cudaSuccess) { fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); return 1; }                \
    } while (0)

/* Parameters and gradients of ordinary size (|p| < 0.05, |g| < 0.01; the BF16 gradients truncated from the F32
   ones), so that the moments too are ordinary after the first step (all zeros would time the update's zero cases). */
static __global__ void fill(float *p, float *g, uint16_t *gb, long long n) {
    long long i;
    for (i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u;
        float gv, pv;
        h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
        gv = ((float)(h & 0xffffu) - 32767.5f) * 3e-7f;
        pv = ((float)(h >> 16) - 32767.5f) * 1.5e-6f;
        p[i] = pv; g[i] = gv; gb[i] = (uint16_t)(__float_as_uint(gv) >> 16);
    }
}

/* Best time of one step (an untimed step first: the moments' first touch, the scratch). 0 on failure. */
static double time_steps(accel *acc, accel_optim *opt, int reps) {
    cudaStream_t st = (cudaStream_t)acc->stream;
    cudaEvent_t a, b;
    float ms = 0, best = 1e30f;
    int r;
    if (accel_optim_step(opt, NULL) != ACCEL_OK || cudaStreamSynchronize(st) != cudaSuccess) return 0;
    cudaEventCreate(&a); cudaEventCreate(&b);
    for (r = 0; r < reps; ++r) {
        cudaEventRecord(a, st);
        accel_optim_step(opt, NULL);
        cudaEventRecord(b, st);
        cudaEventSynchronize(b);
        cudaEventElapsedTime(&ms, a, b);
        if (ms < best) best = ms;
    }
    cudaEventDestroy(a); cudaEventDestroy(b);
    return cudaGetLastError() == cudaSuccess ? best * 1e-3 : 0;
}
static double time_copy(cudaStream_t st, void *dst, const void *src, size_t bytes, int reps) {
    cudaEvent_t a, b;
    float ms = 0, best = 1e30f;
    int r;
    cudaEventCreate(&a); cudaEventCreate(&b);
    for (r = 0; r < reps + 1; ++r) {
        cudaEventRecord(a, st);
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, st);
        cudaEventRecord(b, st);
        cudaEventSynchronize(b);
        cudaEventElapsedTime(&ms, a, b);
        if (r > 0 && ms < best) best = ms;
    }
    cudaEventDestroy(a); cudaEventDestroy(b);
    return cudaGetLastError() == cudaSuccess ? best * 1e-3 : 0;
}

/* The stream-mix yardstick: a kernel that moves exactly the streams of an AdamW form (F32: p, g, m, v in, p, m, v out;
   BF16 + copy: the gradient read and a model copy written in 16 bits) with trivial math, in the optimizer's access
   layout (a warp's lanes take 16-byte quads 0..31 and 32..63 of a 64-quad unit; 8-byte quads for the 16-bit
   streams), U units a thread loaded before any store. Its best shape says what that mix of reads and writes costs on
   this device, apart from the optimizer's arithmetic and launch structure. Not part of accel. */
template <int U, bool G16, bool COPY>
__global__ static void mix_kernel(float4 *p, float4 *m, float4 *v, const float4 *g32, const uint2 *g16, uint2 *model,
                                  size_t nq) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wpb = blockDim.x >> 5;
    for (size_t b = blockIdx.x;; b += gridDim.x) {
        size_t q0 = (b * U * (size_t)wpb + (size_t)warp) * 64u + (size_t)lane;
        float4 P[U][2], M[U][2], V[U][2], G[U][2];
        if ((b * U * (size_t)wpb) * 64u >= nq) return;
#pragma unroll
        for (int k = 0; k < U; ++k)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                size_t q = q0 + (size_t)k * wpb * 64u + (size_t)h * 32u;
                if (q < nq) {
                    P[k][h] = p[q]; M[k][h] = m[q]; V[k][h] = v[q];
                    if (G16) {
                        uint2 w = g16[q];
                        G[k][h] = make_float4(__uint_as_float(w.x << 16), __uint_as_float(w.x & 0xffff0000u),
                                              __uint_as_float(w.y << 16), __uint_as_float(w.y & 0xffff0000u));
                    } else G[k][h] = g32[q];
                }
            }
#pragma unroll
        for (int k = 0; k < U; ++k)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                size_t q = q0 + (size_t)k * wpb * 64u + (size_t)h * 32u;
                float4 a = P[k][h], x = M[k][h], y = V[k][h], g = G[k][h];
                if (q >= nq) continue;
                a.x += 1e-3f * g.x; a.y += 1e-3f * g.y; a.z += 1e-3f * g.z; a.w += 1e-3f * g.w;
                x.x += g.x; x.y += g.y; x.z += g.z; x.w += g.w;
                y.x += g.x * g.x; y.y += g.y * g.y; y.z += g.z * g.z; y.w += g.w * g.w;
                p[q] = a; m[q] = x; v[q] = y;
                if (COPY)
                    model[q] = make_uint2((__float_as_uint(a.x) >> 16) | (__float_as_uint(a.y) & 0xffff0000u),
                                          (__float_as_uint(a.z) >> 16) | (__float_as_uint(a.w) & 0xffff0000u));
            }
    }
}
template <bool G16, bool COPY>
static bl_best mix_best(float *p, float *m, float *v, const float *g32, const uint16_t *g16, uint16_t *model,
                        int64_t n, double bytes_per_param, cudaStream_t st, int reps) {
    static const int depths[] = {1, 2, 4}, per_sm[] = {4, 8, 16, 0};
    const size_t nq = (size_t)n / 4;
    return bl_sweep(depths, 3, per_sm, 4, bytes_per_param * (double)(nq * 4), st, reps, [&](int u, int g) {
        if (g == 0) g = (int)((nq + 512u * (size_t)u - 1) / (512u * (size_t)u)); /* a block per tile */
        float4 *P = (float4 *)p, *M = (float4 *)m, *V = (float4 *)v;
        const float4 *G = (const float4 *)g32;
        const uint2 *G2 = (const uint2 *)g16;
        uint2 *C = (uint2 *)model;
        if (u == 1) mix_kernel<1, G16, COPY><<<g, 256, 0, st>>>(P, M, V, G, G2, C, nq);
        else if (u == 2) mix_kernel<2, G16, COPY><<<g, 256, 0, st>>>(P, M, V, G, G2, C, nq);
        else mix_kernel<4, G16, COPY><<<g, 256, 0, st>>>(P, M, V, G, G2, C, nq);
    });
}

/* The value of "key": in the peer's one-line JSON object, or 0. */
static double json_num(const char *s, const char *key) {
    char pat[64];
    const char *p;
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    p = strstr(s, pat);
    return p ? atof(p + strlen(pat)) : 0.0;
}

int main(int argc, char **argv) {
    static const struct {
        const char *bench, *params;
        int bf16_grads, copy, sr, bf16_moments;
        double bytes;
    } form[5] = {
        {"adamw_step_gpu", "\"grads\": \"F32\", \"moments\": \"F32\"", 0, 0, 0, 0, 28},
        {"adamw_step_gpu_bf16", "\"grads\": \"BF16\", \"model_copy\": \"BF16 nearest\", \"moments\": \"F32\"",
         1, 1, 0, 0, 26},
        {"adamw_step_gpu_bf16_sr", "\"grads\": \"BF16\", \"model_copy\": \"BF16 stochastic\", \"moments\": \"F32\"",
         1, 1, 1, 0, 26},
        {"adamw_step_gpu_bf16_moments", "\"grads\": \"F32\", \"moments\": \"BF16\"", 0, 0, 0, 1, 20},
        {"adamw_step_gpu_bf16_all", "\"grads\": \"BF16\", \"model_copy\": \"BF16 nearest\", \"moments\": \"BF16\"",
         1, 1, 0, 1, 18},
    };
    int count = 0, reps = argc > 2 ? atoi(argv[2]) : 20, i, f;
    char shape[256] = "";
    int64_t n = 0;
    accel acc;
    accel_desc d;
    accel_tensor pt[NT], g32[NT], g16[NT], mt[NT];
    float *p, *g;
    uint16_t *gb, *mb;
    unsigned char *c0, *c1;
    double t[5], tcopy[5], t_f32 = 0, t_bf16 = 0;
    char peer[1024] = "";
    cudaStream_t st;
    cudaDeviceProp prop;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) { printf("no CUDA device: skipped\n"); return 77; }
    n = gb_gpt2_sizes(sizes);
    if (reps < 1) reps = 1;
#ifdef BENCH_OWN_IMPL
#ifndef BENCH_VARIANT
#define BENCH_VARIANT "own"
#endif
    snprintf(shape, sizeof shape, ", \"shape\": \"%s: chunk %d/%d, block %d, U %d, fast %d, minb %d/%d/%d\"",
             BENCH_VARIANT, ACCEL_OPTIM_CHUNK, ACCEL_OPTIM_CHUNK_SR, ACCEL_OPTIM_CUDA_BLOCK, ACCEL_OPTIM_CUDA_U,
             ACCEL_OPTIM_CUDA_FAST, ACCEL_OPTIM_CUDA_MINB, ACCEL_OPTIM_CUDA_MINB_SR, ACCEL_OPTIM_CUDA_MINB_MOM16);
#endif
    memset(&d, 0, sizeof d);
    d.no_mpi = 1;
    if (accel_init(&acc, &d) != ACCEL_OK || acc.device < 0) {
        fprintf(stderr, "%s\n", accel_last_error(&acc));
        return 1;
    }
    st = (cudaStream_t)acc.stream;
    CK(cudaGetDeviceProperties(&prop, acc.device));
    CK(cudaMalloc((void **)&p, 4 * (size_t)n)); CK(cudaMalloc((void **)&g, 4 * (size_t)n));
    CK(cudaMalloc((void **)&gb, 2 * (size_t)n)); CK(cudaMalloc((void **)&mb, 2 * (size_t)n));
    CK(cudaMalloc((void **)&c0, 14 * (size_t)n)); CK(cudaMalloc((void **)&c1, 14 * (size_t)n));
    fill<<<1024, 256, 0, st>>>(p, g, gb, (long long)n);
    CK(cudaGetLastError());
    CK(cudaMemset(c0, 0, 14 * (size_t)n));
    {
        int64_t off = 0;
        for (i = 0; i < NT; ++i) { /* one flat buffer per stream, as llm.c lays out its parameters */
            memset(&pt[i], 0, sizeof pt[i]);
            pt[i].name = "w"; pt[i].ptr = p + off; pt[i].dtype = ACCEL_F32; pt[i].ndim = 1; pt[i].shape[0] = sizes[i];
            g32[i] = pt[i]; g32[i].ptr = g + off;
            g16[i] = pt[i]; g16[i].ptr = gb + off; g16[i].dtype = ACCEL_BF16;
            mt[i] = g16[i]; mt[i].ptr = mb + off;
            off += sizes[i];
        }
    }
    /* one optimizer at a time (their moments are 0.5 to 1 GB each); the copy of the same bytes right after */
    for (f = 0; f < 5; ++f) {
        accel_optim_desc od;
        accel_optim *o = NULL;
        memset(&od, 0, sizeof od);
        od.lr = 6e-4; od.weight_decay = 0.1;
        od.params = pt; od.nparams = NT;
        od.grads = form[f].bf16_grads ? g16 : g32;
        od.model = form[f].copy ? mt : NULL;
        od.model_rounding = form[f].sr ? ACCEL_OPTIM_ROUND_STOCHASTIC : ACCEL_OPTIM_ROUND_NEAREST;
        od.moment_dtype = form[f].bf16_moments ? ACCEL_BF16 : ACCEL_F32;
        if (accel_optim_create(&acc, &od, &o) != ACCEL_OK) {
            fprintf(stderr, "%s\n", accel_last_error(&acc));
            return 1;
        }
        t[f] = time_steps(&acc, o, reps);
        accel_optim_destroy(o);
        tcopy[f] = time_copy(st, c1, c0, (size_t)(form[f].bytes / 2 * (double)n), reps);
        if (t[f] <= 0 || tcopy[f] <= 0) {
            fprintf(stderr, "%s: the step or the copy failed\n", form[f].bench);
            return 1;
        }
    }
    /* the stream-mix yardstick of the F32 and the BF16 + copy forms (in c0 / c1's memory: m and v, 8 B/param) */
    bl_best mix32 = mix_best<false, false>(p, (float *)c0, (float *)c0 + n, g, gb, mb, n, 28, st, reps);
    bl_best mix16 = mix_best<true, true>(p, (float *)c0, (float *)c0 + n, g, gb, mb, n, 26, st, reps);
    cudaFree(c0); cudaFree(c1); /* room for the peer */
    if (argc > 1 && strcmp(argv[1], "-") != 0) {
        char cmd[1200];
        FILE *pp;
        const char *py = getenv("ACCEL_BENCH_PYTHON"); /* a venv with CUDA torch; else python3 from PATH */
        snprintf(cmd, sizeof cmd, "%s'%s' '%s' %d 2>&1",
                 access("/usr/bin/timeout", X_OK) == 0 ? "/usr/bin/timeout 300 " : "", py && py[0] ? py : "python3",
                 argv[1], reps);
        pp = popen(cmd, "r");
        if (pp) {
            char line[1024];
            while (fgets(line, sizeof line, pp))
                if (line[0] == '{') snprintf(peer, sizeof peer, "%s", line);
            pclose(pp);
        }
        t_f32 = json_num(peer, "f32_step_s");
        t_bf16 = json_num(peer, "bf16_step_s");
    }
    for (f = 0; f < 5; ++f) {
        double gbs = form[f].bytes * (double)n * 1e-9 / t[f], copy_gbs = form[f].bytes * (double)n * 1e-9 / tcopy[f];
        double tt = form[f].bf16_grads ? t_bf16 : t_f32;
        printf("{\"bench\": \"%s\", \"params\": {\"parameters\": %lld, \"tensors\": %d, %s, \"device\": \"%s\", "
               "\"counted\": \"%.0f bytes per parameter\"%s}, \"unit\": \"GB/s\", \"accel\": %.1f, \"reference\": "
               "%.1f, \"reference_name\": \"cudaMemcpy D2D of the same bytes\", \"ratio\": %.3f, \"goal\": 0.90}\n",
               form[f].bench, (long long)n, NT, form[f].params, prop.name, form[f].bytes, shape, gbs, copy_gbs,
               gbs / copy_gbs);
        if (tt > 0)
            printf("{\"bench\": \"%s\", \"params\": {\"parameters\": %lld, \"tensors\": %d, %s, \"device\": \"%s\"}, "
                   "\"unit\": \"steps/s\", \"accel\": %.2f, \"reference\": %.2f, \"reference_name\": "
                   "\"torch.optim.AdamW(fused=True), %s parameters and gradients\", \"ratio\": %.3f, \"goal\": %s}\n",
                   form[f].bench, (long long)n, NT, form[f].params, prop.name, 1.0 / t[f], 1.0 / tt,
                   form[f].bf16_grads ? "BF16" : "F32", tt / t[f], f == 0 ? "1.1" : "null");
    }
    for (f = 0; f < 2; ++f) {
        const bl_best *x = f == 0 ? &mix32 : &mix16;
        double gbs = form[f].bytes * (double)n * 1e-9 / t[f], copy_gbs = form[f].bytes * (double)n * 1e-9 / tcopy[f];
        printf("{\"bench\": \"%s\", \"params\": {\"parameters\": %lld, %s, \"device\": \"%s\", \"yardstick\": "
               "\"U %d, %d blocks/SM (0: a block per tile)\", \"yardstick_vs_copy\": %.3f}, \"unit\": \"GB/s\", "
               "\"accel\": %.1f, \"reference\": %.1f, \"reference_name\": \"a kernel moving the same streams with "
               "trivial math (bench_optim_gpu.cu mix_kernel, best shape)\", \"ratio\": %.3f, \"goal\": null}\n",
               form[f].bench, (long long)n, form[f].params, prop.name, x->depth, x->per_sm, x->gbs / copy_gbs, gbs,
               x->gbs, gbs / x->gbs);
    }
    if (t_f32 <= 0 || t_bf16 <= 0)
        fprintf(stderr, "bench_optim_gpu: torch lines skipped where the peer gave no time (%s)\n",
                peer[0] ? peer : argc > 1 && strcmp(argv[1], "-") != 0 ? "no output" : "no peer");
    cudaFree(p); cudaFree(g); cudaFree(gb); cudaFree(mb);
    accel_shutdown(&acc);
    return 0;
}
