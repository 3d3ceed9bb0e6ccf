/* accel_amp.h's fp8 codec against cuda_fp8.h's host conversion functions (compiled by nvcc, run on the CPU: no CUDA
   runtime call, no device needed) and against the long-hand reference of fp8_ref.h:
     __nv_cvt_float_to_fp8 (E4M3 / E5M2, __NV_SATFINITE / __NV_NOSAT), __nv_cvt_halfraw_to_fp8 and
     __nv_cvt_bfloat16raw_to_fp8 over all 2^16 patterns, __nv_cvt_fp8_to_halfraw, and the __nv_fp8_e4m3 /
     __nv_fp8_e5m2 conversions to float and __nv_bfloat16 over all 256 codes;
   fp32 inputs: every exponent and sign with the rounding boundaries, every fp8 midpoint ±3 ulps, 4M random patterns.
   --all-fp32: all 2^32 fp32 patterns x 4 (format, saturation) against CUDA and the reference (threads: every core). */
#include "accel.h"
#include "accel_amp.h"
#include "accel_test.h"
#include "amp_ref.h"
#include "fp8_ref.h"
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <pthread.h>
#include <unistd.h>

static unsigned cuda_q(float f, int e5, int sat) {
    return (unsigned)__nv_cvt_float_to_fp8(f, sat ? __NV_SATFINITE : __NV_NOSAT, e5 ? __NV_E5M2 : __NV_E4M3);
}

static long check_one(uint32_t u, int with_ref, int *shown) {
    float f = ref8_bits_f(u);
    long bad = 0;
    int e5, sat;
    for (e5 = 0; e5 < 2; ++e5)
        for (sat = 0; sat < 2; ++sat) {
            unsigned a = accel_amp_f32_to_fp8(f, e5, sat), c = cuda_q(f, e5, sat);
            unsigned r = with_ref ? ref8_from_double((double)f, e5 ? FP8_E5M2 : FP8_E4M3, sat) : c;
            if (a != c || r != c) {
                bad++;
                if (shown && (*shown)++ < 8)
                    printf("fp32 %08x e5m2=%d sat=%d: accel %02x cuda %02x reference %02x\n", u, e5, sat, a, c, r);
            }
        }
    return bad;
}

typedef struct sweep_job { uint64_t lo, hi; long bad; } sweep_job;
static void *sweep(void *p) {
    sweep_job *j = (sweep_job *)p;
    uint64_t u;
    for (u = j->lo; u < j->hi; ++u) j->bad += check_one((uint32_t)u, 1, NULL);
    return NULL;
}

int main(int argc, char **argv) {
    size_t cap = 400000, n, i;
    uint32_t *set = (uint32_t *)malloc(cap * sizeof *set);
    uint64_t s = 0x6a09e667f3bcc908ull;
    long bad = 0, bad16 = 0, bad8 = 0;
    int shown = 0, e5, sat, x, d;
    uint32_t h;
    int full = argc > 1 && !strcmp(argv[1], "--all-fp32");
    n = ref_boundary_set(set, cap);
    AT_CHECK(n > 200000);
    for (i = 0; i < n; ++i) bad += check_one(set[i], 1, &shown);
    for (e5 = 0; e5 < 2; ++e5) /* every fp8 value and midpoint, ±3 ulps */
        for (x = 0; x < 0x7f; ++x) {
            float v = accel_amp_fp8_to_f32((uint8_t)x, e5), w;
            if (!isfinite(v)) continue;
            w = (x + 1 < 0x7f && isfinite(accel_amp_fp8_to_f32((uint8_t)(x + 1), e5))) ? accel_amp_fp8_to_f32((uint8_t)(x + 1), e5)
                                                                                       : 2.0f * v;
            for (d = -3; d <= 3; ++d) {
                uint32_t m = (uint32_t)((int64_t)ref8_f_bits(0.5f * (v + w)) + d), t = (uint32_t)((int64_t)ref8_f_bits(v) + d);
                bad += check_one(m, 1, &shown) + check_one(m | 0x80000000u, 1, &shown);
                if (v != 0.0f || d >= 0) bad += check_one(t, 1, &shown) + check_one(t | 0x80000000u, 1, &shown);
            }
        }
    for (i = 0; i < 4000000; ++i) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        bad += check_one((uint32_t)(s >> 11), 1, &shown);
    }
    AT_EQ_INT(bad, 0);
    /* 16-bit inputs: all patterns */
    for (h = 0; h < 65536; ++h) {
        __half_raw hr;
        __nv_bfloat16_raw br;
        hr.x = (unsigned short)h;
        br.x = (unsigned short)h;
        for (e5 = 0; e5 < 2; ++e5)
            for (sat = 0; sat < 2; ++sat) {
                __nv_saturation_t st = sat ? __NV_SATFINITE : __NV_NOSAT;
                __nv_fp8_interpretation_t in = e5 ? __NV_E5M2 : __NV_E4M3;
                bad16 += accel_amp_f32_to_fp8(accel_f16_to_f32((uint16_t)h), e5, sat) != __nv_cvt_halfraw_to_fp8(hr, st, in);
                bad16 += accel_amp_f32_to_fp8(accel_bf16_to_f32((uint16_t)h), e5, sat) != __nv_cvt_bfloat16raw_to_fp8(br, st, in);
            }
    }
    AT_EQ_INT(bad16, 0);
    /* all 256 codes decoded */
    for (x = 0; x < 256; ++x) {
        __nv_fp8_e4m3 a;
        __nv_fp8_e5m2 b;
        a.__x = (__nv_fp8_storage_t)x;
        b.__x = (__nv_fp8_storage_t)x;
        for (e5 = 0; e5 < 2; ++e5) {
            float mine = accel_amp_fp8_to_f32((uint8_t)x, e5);
            float cf = e5 ? (float)b : (float)a;
            __nv_bfloat16 cb = e5 ? (__nv_bfloat16)b : (__nv_bfloat16)a;
            __nv_bfloat16_raw cbr = cb;
            __half_raw chr = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)x, e5 ? __NV_E5M2 : __NV_E4M3);
            bad8 += ref8_f_bits(mine) != ref8_f_bits(cf);
            bad8 += accel_f32_to_bf16(mine) != cbr.x;
            bad8 += accel_f32_to_f16(mine) != chr.x;
        }
    }
    AT_EQ_INT(bad8, 0);
    if (full) {
        long nt = sysconf(_SC_NPROCESSORS_ONLN), t, total = 0;
        sweep_job *jobs;
        pthread_t *th;
        if (nt < 1) nt = 1;
        if (nt > 64) nt = 64;
        jobs = (sweep_job *)calloc((size_t)nt, sizeof *jobs);
        th = (pthread_t *)calloc((size_t)nt, sizeof *th);
        for (t = 0; t < nt; ++t) {
            jobs[t].lo = (0x100000000ull * (uint64_t)t) / (uint64_t)nt;
            jobs[t].hi = (0x100000000ull * (uint64_t)(t + 1)) / (uint64_t)nt;
            pthread_create(&th[t], NULL, sweep, &jobs[t]);
        }
        for (t = 0; t < nt; ++t) { pthread_join(th[t], NULL); total += jobs[t].bad; }
        printf("all 2^32 fp32 patterns x {E4M3, E5M2} x {satfinite, nosat}: %ld mismatches (accel vs cuda_fp8.h vs "
               "the long-hand reference, %ld threads)\n", total, nt);
        AT_EQ_INT(total, 0);
        free(jobs); free(th);
    }
    free(set);
    return at_finish("amp_fp8_cuda_host");
}
