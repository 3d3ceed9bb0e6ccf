/* accel_amp.h's fp8 on a CUDA device. Exits 77 (skip) without a device.
   - The element codec in device code, all 2^32 fp32 patterns x {E4M3, E5M2} x {satfinite, nosat}, against
     cuda_fp8.h's device __nv_cvt_float_to_fp8 (on sm_89+ its satfinite path is the cvt.rn.satfinite PTX
     instruction), fp16 / bf16 inputs (all 2^16 patterns, __nv_cvt_halfraw_to_fp8 / __nv_cvt_bfloat16raw_to_fp8) and
     all 256 codes decoded (__nv_cvt_fp8_to_halfraw, the __nv_fp8 → float conversions).
   - The kernels against the CPU path, bit for bit: fused cast + amax on a list (one launch; F32 / BF16 / F16
     sources, aligned and misaligned, empty, two buffers into one slot, satfinite and not), the amax that
     accel_amp_fp8_update reads back and the scales it makes, dequantize to F32 / BF16 / F16, accel_amp_convert
     between every fp8 and 16/32-bit dtype, state save after an update;
   - the same casts of one buffer at every element phase 0..7 of the high-precision and the fp8 side and sizes 0..33
     and tails of larger ones (the kernels' heads, aligned bodies and element-wise bodies), E4M3 and E5M2, satfinite
     and not, then the scales the device amax gives. */
#include "accel.h"
#include "accel_amp.h"
#include "accel_test.h"
#include <cuda_fp8.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>

static accel cpu, gpu;
static uint64_t st = 0x9e3779b97f4a7c15ull;
static uint32_t rnd32(void) { st ^= st << 13; st ^= st >> 7; st ^= st << 17; return (uint32_t)(st >> 20); }
static float rndf(float lo, float hi) { return lo + (hi - lo) * (float)(rnd32() & 0xffffff) / 16777216.0f; }

static void *dev_copy(const void *h, size_t bytes) {
    void *d = NULL;
    AT_CHECK(cudaMalloc(&d, bytes ? bytes : 1) == cudaSuccess);
    if (bytes) AT_CHECK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice) == cudaSuccess);
    return d;
}
static void host_copy(void *h, const void *d, size_t bytes) {
    AT_CHECK(cudaDeviceSynchronize() == cudaSuccess);
    if (bytes) AT_CHECK(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
}
static size_t diff_bytes(const void *a, const void *b, size_t n) {
    const unsigned char *x = (const unsigned char *)a, *y = (const unsigned char *)b;
    size_t i, c = 0;
    for (i = 0; i < n; ++i) c += x[i] != y[i];
    return c;
}

/* ------------------------------------------------------------------------------------------- device sweeps */
static __global__ void sweep_f32(unsigned long long base, unsigned long long count, unsigned long long *bad,
                                 unsigned *first) {
    unsigned long long i;
    for (i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < count;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        unsigned u = (unsigned)(base + i);
        float f = __uint_as_float(u);
        int e5, sat, b = 0;
        for (e5 = 0; e5 < 2; ++e5)
            for (sat = 0; sat < 2; ++sat) {
                unsigned c = __nv_cvt_float_to_fp8(f, sat ? __NV_SATFINITE : __NV_NOSAT, e5 ? __NV_E5M2 : __NV_E4M3);
                b += c != accel_amp_f32_to_fp8(f, e5, sat);
            }
        if (b) { atomicAdd(bad, (unsigned long long)b); atomicMin(first, u); }
    }
}
static __global__ void sweep_16(unsigned long long *bad) {
    unsigned h = blockIdx.x * blockDim.x + threadIdx.x;
    int e5, sat, b = 0;
    __half_raw hr;
    __nv_bfloat16_raw br;
    if (h >= 65536u) return;
    hr.x = (unsigned short)h;
    br.x = (unsigned short)h;
    for (e5 = 0; e5 < 2; ++e5)
        for (sat = 0; sat < 2; ++sat) {
            __nv_saturation_t s = sat ? __NV_SATFINITE : __NV_NOSAT;
            __nv_fp8_interpretation_t in = e5 ? __NV_E5M2 : __NV_E4M3;
            b += __nv_cvt_halfraw_to_fp8(hr, s, in) != accel_amp_f32_to_fp8(accel_f16_to_f32((uint16_t)h), e5, sat);
            b += __nv_cvt_bfloat16raw_to_fp8(br, s, in) != accel_amp_f32_to_fp8(accel_bf16_to_f32((uint16_t)h), e5, sat);
        }
    if (h < 256u)
        for (e5 = 0; e5 < 2; ++e5) {
            float mine = accel_amp_fp8_to_f32((uint8_t)h, e5);
            __half_raw c = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)h, e5 ? __NV_E5M2 : __NV_E4M3);
            __nv_fp8_e4m3 a;
            __nv_fp8_e5m2 z;
            a.__x = (__nv_fp8_storage_t)h;
            z.__x = (__nv_fp8_storage_t)h;
            b += accel_f32_to_f16(mine) != c.x;
            b += __float_as_uint(mine) != __float_as_uint(e5 ? (float)z : (float)a);
        }
    if (b) atomicAdd(bad, (unsigned long long)b);
}

static void test_device_codec(void) {
    unsigned long long *bad, hbad = 0;
    unsigned *first, hfirst = 0;
    cudaEvent_t a, b;
    float ms = 0;
    AT_CHECK(cudaMalloc(&bad, 8) == cudaSuccess);
    AT_CHECK(cudaMalloc(&first, 4) == cudaSuccess);
    AT_CHECK(cudaMemset(bad, 0, 8) == cudaSuccess);
    AT_CHECK(cudaMemset(first, 0xff, 4) == cudaSuccess);
    cudaEventCreate(&a); cudaEventCreate(&b);
    cudaEventRecord(a);
    sweep_f32<<<4096, 256>>>(0ull, 0x100000000ull, bad, first);
    cudaEventRecord(b);
    AT_CHECK(cudaGetLastError() == cudaSuccess);
    host_copy(&hbad, bad, 8);
    host_copy(&hfirst, first, 4);
    cudaEventElapsedTime(&ms, a, b);
    printf("device: all 2^32 fp32 patterns x 4 vs __nv_cvt_float_to_fp8: %llu mismatches (first %08x), %.0f ms\n", hbad,
           hbad ? hfirst : 0u, ms);
    AT_EQ_INT(hbad, 0);
    AT_CHECK(cudaMemset(bad, 0, 8) == cudaSuccess);
    sweep_16<<<256, 256>>>(bad);
    AT_CHECK(cudaGetLastError() == cudaSuccess);
    host_copy(&hbad, bad, 8);
    AT_EQ_INT(hbad, 0);
    cudaFree(bad); cudaFree(first);
}

/* ---------------------------------------------------------------------------------- kernels vs the CPU */
enum { NL = 8 };
static const size_t lsz[NL] = {1, 1000, 65536, 65537, 0, 300001, 17, 2000003};
static const accel_dtype ldt[NL] = {ACCEL_F32, ACCEL_F16, ACCEL_F32, ACCEL_BF16, ACCEL_F32, ACCEL_F32, ACCEL_F32, ACCEL_F32};
static const int lmis[NL] = {0, 0, 0, 1, 0, 1, 1, 0};   /* misaligned by one element */
static const int lslot[NL] = {0, 1, 2, 3, 0, 2, 4, 0}; /* slots 0..2 forward (E4M3), 3..4 backward (E5M2) */

static void test_kernels(int nosat) {
    accel_amp_fp8 fc, fg;
    accel_amp_fp8_desc d;
    unsigned char *hs[NL], *hq[NL], *gq[NL];
    void *ds[NL], *dq[NL];
    accel_tensor ts[NL], tq[NL], gs[NL], gqt[NL];
    int k, step;
    memset(&d, 0, sizeof d);
    d.num_forward = 3; d.num_backward = 2; d.amax_history_len = 4; d.amax_compute_algo = ACCEL_AMP_AMAX_MAX;
    d.no_saturate = nosat; d.margin = 1;
    AT_EQ_INT(accel_amp_fp8_init(&cpu, &fc, &d), ACCEL_OK);
    AT_EQ_INT(accel_amp_fp8_init(&gpu, &fg, &d), ACCEL_OK);
    for (k = 0; k < NL; ++k) {
        size_t es = accel_dtype_size(ldt[k]), n = lsz[k], off = (size_t)lmis[k];
        hs[k] = (unsigned char *)malloc((n + 1) * es);
        hq[k] = (unsigned char *)malloc(n + 1);
        gq[k] = (unsigned char *)malloc(n + 1);
        ds[k] = NULL;
        AT_CHECK(cudaMalloc(&dq[k], n + 1) == cudaSuccess);
        memset(&ts[k], 0, sizeof ts[k]);
        ts[k].ptr = hs[k] + off * es; ts[k].dtype = ldt[k]; ts[k].ndim = 1; ts[k].shape[0] = (int64_t)n;
        tq[k] = ts[k];
        tq[k].ptr = hq[k] + off; tq[k].dtype = accel_amp_fp8_dtype(&fc, lslot[k]);
    }
    for (step = 0; step < 3; ++step) {
        for (k = 0; k < NL; ++k) {
            size_t es = accel_dtype_size(ldt[k]), n = lsz[k], i, off = (size_t)lmis[k];
            float range = lslot[k] >= 3 ? 1e-3f : (step == 1 && k == 5 ? 900.0f : 4.0f);
            for (i = 0; i < n + 1; ++i) {
                float v = rndf(-range, range);
                if (i % 1013 == 7) v = NAN;
                if (i % 977 == 9 && k != 2) v = (i & 1) ? INFINITY : -1e30f;
                if (i % 331 == 5) v = rndf(-1e-6f, 1e-6f);
                if (ldt[k] == ACCEL_F32) memcpy(hs[k] + i * 4, &v, 4);
                else { uint16_t h = ldt[k] == ACCEL_F16 ? accel_f32_to_f16(v) : accel_f32_to_bf16(v); memcpy(hs[k] + i * 2, &h, 2); }
            }
            if (ds[k]) cudaFree(ds[k]);
            ds[k] = dev_copy(hs[k], (n + 1) * es);
            gs[k] = ts[k]; gs[k].ptr = (unsigned char *)ds[k] + off * es;
            gqt[k] = tq[k]; gqt[k].ptr = (unsigned char *)dq[k] + off;
        }
        AT_EQ_INT(accel_amp_fp8_quantize(&fc, lslot, ts, tq, NL), ACCEL_OK);
        AT_EQ_INT(accel_amp_fp8_quantize(&fg, lslot, gs, gqt, NL), ACCEL_OK);
        for (k = 0; k < NL; ++k) {
            size_t n = lsz[k], off = (size_t)lmis[k], c;
            host_copy(gq[k], dq[k], n + 1);
            c = diff_bytes(gq[k] + off, hq[k] + off, n);
            if (c) fprintf(stderr, "quantize step %d buffer %d (%s, slot %d, nosat %d): %zu bytes differ\n", step, k,
                           accel_dtype_name(ldt[k]), lslot[k], nosat, c);
            AT_EQ_INT(c, 0);
        }
        /* the device amax, read back by update, gives the CPU's scales and history, bit for bit */
        AT_EQ_INT(accel_amp_fp8_update(&fc), ACCEL_OK);
        AT_EQ_INT(accel_amp_fp8_update(&fg), ACCEL_OK);
        AT_CHECK(memcmp(fc.scale, fg.scale, sizeof(float) * 5 * (2 + 4)) == 0);
        if (memcmp(fc.scale, fg.scale, sizeof(float) * 5 * (2 + 4)) != 0)
            fprintf(stderr, "step %d: scale[0] %g vs %g, amax row 3 slot 0 %g vs %g\n", step, (double)fc.scale[0],
                    (double)fg.scale[0], (double)fc.amax_history[15], (double)fg.amax_history[15]);
    }
    /* dequantize into F32 / BF16 / F16, aligned and not */
    {
        static const accel_dtype outs[3] = {ACCEL_F32, ACCEL_BF16, ACCEL_F16};
        int o;
        for (o = 0; o < 3; ++o) {
            accel_tensor hb[NL], gb[NL];
            unsigned char *hbuf[NL], *gbuf[NL];
            void *dbuf[NL];
            size_t es = accel_dtype_size(outs[o]);
            for (k = 0; k < NL; ++k) {
                size_t n = lsz[k], off = (size_t)((k + o) & 1);
                hbuf[k] = (unsigned char *)malloc((n + 1) * es);
                gbuf[k] = (unsigned char *)malloc((n + 1) * es);
                AT_CHECK(cudaMalloc(&dbuf[k], (n + 1) * es) == cudaSuccess);
                hb[k] = ts[k]; hb[k].dtype = outs[o]; hb[k].ptr = hbuf[k] + off * es;
                gb[k] = hb[k]; gb[k].ptr = (unsigned char *)dbuf[k] + off * es;
            }
            AT_EQ_INT(accel_amp_fp8_dequantize(&fc, lslot, tq, hb, NL), ACCEL_OK);
            AT_EQ_INT(accel_amp_fp8_dequantize(&fg, lslot, gqt, gb, NL), ACCEL_OK);
            for (k = 0; k < NL; ++k) {
                size_t n = lsz[k], off = (size_t)((k + o) & 1);
                host_copy(gbuf[k], dbuf[k], (n + 1) * es);
                AT_EQ_INT(diff_bytes(gbuf[k] + off * es, hbuf[k] + off * es, n * es), 0);
                free(hbuf[k]); free(gbuf[k]); cudaFree(dbuf[k]);
            }
        }
    }
    /* the state after a GPU update is the CPU's */
    {
        size_t nc = 0, ng = 0;
        unsigned char *bc, *bg;
        AT_EQ_INT(accel_amp_fp8_state_save(&fc, NULL, 0, &nc), ACCEL_OK);
        AT_EQ_INT(accel_amp_fp8_state_save(&fg, NULL, 0, &ng), ACCEL_OK);
        AT_EQ_INT(nc, ng);
        bc = (unsigned char *)malloc(nc); bg = (unsigned char *)malloc(ng);
        AT_EQ_INT(accel_amp_fp8_state_save(&fc, bc, nc, &nc), ACCEL_OK);
        AT_EQ_INT(accel_amp_fp8_state_save(&fg, bg, ng, &ng), ACCEL_OK);
        AT_CHECK(memcmp(bc, bg, nc) == 0);
        AT_EQ_INT(accel_amp_fp8_state_load(&fg, bc, nc), ACCEL_OK);
        free(bc); free(bg);
    }
    for (k = 0; k < NL; ++k) { free(hs[k]); free(hq[k]); free(gq[k]); cudaFree(ds[k]); cudaFree(dq[k]); }
    accel_amp_fp8_deinit(&fc);
    accel_amp_fp8_deinit(&fg);
}

static void test_convert(void) {
    static const accel_dtype ts[] = {ACCEL_F32, ACCEL_BF16, ACCEL_F16, ACCEL_F8_E4M3, ACCEL_F8_E5M2};
    size_t n = 300007, a, b, i;
    for (a = 0; a < 5; ++a)
        for (b = 0; b < 5; ++b) {
            size_t ea = accel_dtype_size(ts[a]), eb = accel_dtype_size(ts[b]);
            unsigned char *src = (unsigned char *)malloc(n * ea), *oc = (unsigned char *)malloc(n * eb), *og = (unsigned char *)malloc(n * eb);
            void *ds, *dd;
            if (a == b) { free(src); free(oc); free(og); continue; }
            for (i = 0; i < n * ea; ++i) src[i] = (unsigned char)rnd32(); /* every bit pattern: NaNs, Infs, subnormals */
            ds = dev_copy(src, n * ea);
            AT_CHECK(cudaMalloc(&dd, n * eb) == cudaSuccess);
            AT_EQ_INT(accel_amp_convert(&cpu, src, ts[a], oc, ts[b], n, NULL), ACCEL_OK);
            AT_EQ_INT(accel_amp_convert(&gpu, ds, ts[a], dd, ts[b], n, NULL), ACCEL_OK);
            host_copy(og, dd, n * eb);
            if (ts[b] == ACCEL_F32) { /* NaN: any NaN bits (an x86 and a GPU multiply keep different payloads) */
                for (i = 0; i < n; ++i) {
                    float x, y;
                    memcpy(&x, oc + 4 * i, 4); memcpy(&y, og + 4 * i, 4);
                    if (x != x && y != y) { memcpy(oc + 4 * i, og + 4 * i, 4); }
                }
            }
            AT_EQ_INT(diff_bytes(oc, og, n * eb), 0);
            cudaFree(ds); cudaFree(dd);
            free(src); free(oc); free(og);
        }
}

/* ------------------------------------------------------------------------------------------ phases, tails */
static void test_phases(void) {
    static const size_t sizes[] = {0, 1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 31, 33, 1000, 4097, 65539};
    static const accel_dtype hps[3] = {ACCEL_F32, ACCEL_BF16, ACCEL_F16};
    size_t si;
    int hi, nosat, slot, pa, pb;
    for (nosat = 0; nosat < 2; ++nosat) {
        accel_amp_fp8 fc, fg;
        accel_amp_fp8_desc d;
        memset(&d, 0, sizeof d);
        d.num_forward = 1; d.num_backward = 1; d.no_saturate = nosat; d.amax_history_len = 2;
        AT_EQ_INT(accel_amp_fp8_init(&cpu, &fc, &d), ACCEL_OK);
        AT_EQ_INT(accel_amp_fp8_init(&gpu, &fg, &d), ACCEL_OK);
        fc.scale[0] = fg.scale[0] = 37.5f; fc.scale_inv[0] = fg.scale_inv[0] = 1.0f / 37.5f;
        fc.scale[1] = fg.scale[1] = 2048.0f; fc.scale_inv[1] = fg.scale_inv[1] = 1.0f / 2048.0f;
        for (si = 0; si < sizeof sizes / sizeof sizes[0]; ++si) {
            for (hi = 0; hi < 3; ++hi)
                for (slot = 0; slot < 2; ++slot) {
                    accel_dtype ht = hps[hi], ft = accel_amp_fp8_dtype(&fc, slot);
                    size_t n = sizes[si], es = accel_dtype_size(ht), hb = (n + 8) * es + 64, qb = n + 64;
                    unsigned char *hh = (unsigned char *)malloc(hb), *qc = (unsigned char *)malloc(qb);
                    unsigned char *qg = (unsigned char *)malloc(qb), *bc = (unsigned char *)malloc(hb);
                    unsigned char *bg = (unsigned char *)malloc(hb);
                    void *dh, *dq, *db;
                    AT_CHECK(cudaMalloc(&dh, hb) == cudaSuccess);
                    AT_CHECK(cudaMalloc(&dq, qb) == cudaSuccess);
                    AT_CHECK(cudaMalloc(&db, hb) == cudaSuccess);
                    for (pa = 0; pa < 8; ++pa)
                        for (pb = 0; pb < 8; ++pb) {
                            accel_tensor th, tq, gh, gq, tb, gb;
                            size_t i;
                            if (n > 5000 && (pa + pb) % 3) continue;
                            memset(qc, 0x5A, qb); memset(bc, 0x5A, hb);
                            for (i = 0; i < n; ++i) {
                                float v = rndf(-4.0f, 4.0f) * (slot ? 1e-3f : 1.0f);
                                uint32_t r = rnd32() % 53;
                                unsigned char *q = hh + 32 + (pa + i) * es;
                                if (r == 0) v = accel_bits_f32(0x7fffffffu);
                                if (r == 1) v = (i & 1) ? INFINITY : -3e38f;
                                if (r == 2) v = rndf(-1e-6f, 1e-6f);
                                if (ht == ACCEL_F32) memcpy(q, &v, 4);
                                else { uint16_t h16 = ht == ACCEL_F16 ? accel_f32_to_f16(v) : accel_f32_to_bf16(v); memcpy(q, &h16, 2); }
                            }
                            AT_CHECK(cudaMemcpy(dh, hh, hb, cudaMemcpyHostToDevice) == cudaSuccess);
                            AT_CHECK(cudaMemcpy(dq, qc, qb, cudaMemcpyHostToDevice) == cudaSuccess);
                            AT_CHECK(cudaMemcpy(db, bc, hb, cudaMemcpyHostToDevice) == cudaSuccess);
                            memset(&th, 0, sizeof th);
                            th.dtype = ht; th.ndim = 1; th.shape[0] = (int64_t)n; th.ptr = hh + 32 + pa * es;
                            tq = th; tq.dtype = ft; tq.ptr = qc + 32 + pb;
                            gh = th; gh.ptr = (unsigned char *)dh + 32 + pa * es;
                            gq = tq; gq.ptr = (unsigned char *)dq + 32 + pb;
                            AT_EQ_INT(accel_amp_fp8_quantize(&fc, &slot, &th, &tq, 1), ACCEL_OK);
                            AT_EQ_INT(accel_amp_fp8_quantize(&fg, &slot, &gh, &gq, 1), ACCEL_OK);
                            host_copy(qg, dq, qb);
                            if (diff_bytes(qc, qg, qb))
                                fprintf(stderr, "quantize %s -> %s n=%zu phases %d/%d nosat %d: %zu bytes differ\n",
                                        accel_dtype_name(ht), accel_dtype_name(ft), n, pa, pb, nosat,
                                        diff_bytes(qc, qg, qb));
                            AT_EQ_INT(diff_bytes(qc, qg, qb), 0);
                            /* back from the same codes into the high-precision dtype at the fp8 side's phase */
                            tb = th; tb.ptr = bc + 32 + pb * es;
                            gb = tb; gb.ptr = (unsigned char *)db + 32 + pb * es;
                            AT_EQ_INT(accel_amp_fp8_dequantize(&fc, &slot, &tq, &tb, 1), ACCEL_OK);
                            AT_EQ_INT(accel_amp_fp8_dequantize(&fg, &slot, &gq, &gb, 1), ACCEL_OK);
                            host_copy(bg, db, hb);
                            AT_EQ_INT(diff_bytes(bc, bg, hb), 0);
                        }
                    free(hh); free(qc); free(qg); free(bc); free(bg);
                    cudaFree(dh); cudaFree(dq); cudaFree(db);
                }
            /* the amaxes of everything cast at this size: the device's give the CPU's scales and history */
            AT_EQ_INT(accel_amp_fp8_update(&fc), ACCEL_OK);
            AT_EQ_INT(accel_amp_fp8_update(&fg), ACCEL_OK);
            AT_CHECK(memcmp(fc.scale, fg.scale, sizeof(float) * 2 * (2 + 2)) == 0);
        }
        accel_amp_fp8_deinit(&fc);
        accel_amp_fp8_deinit(&fg);
    }
}

int main(void) {
    int count = 0;
    accel_desc d;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        printf("no CUDA device: skipped\n");
        return 77;
    }
    memset(&d, 0, sizeof d);
    d.cpu = 1; d.no_mpi = 1; d.mixed_precision = ACCEL_PRECISION_FP8;
    if (accel_init(&cpu, &d) != ACCEL_OK) { fprintf(stderr, "%s\n", accel_last_error(&cpu)); return 1; }
    d.cpu = 0;
    if (accel_init(&gpu, &d) != ACCEL_OK) { fprintf(stderr, "%s\n", accel_last_error(&gpu)); return 1; }
    AT_CHECK(gpu.device >= 0);
    if (gpu.device < 0) return at_finish("amp_fp8_gpu");
    test_device_codec();
    test_kernels(0);
    test_kernels(1);
    test_convert();
    test_phases();
    AT_CHECK(cudaDeviceSynchronize() == cudaSuccess);
    accel_shutdown(&cpu);
    accel_shutdown(&gpu);
    return at_finish("amp_fp8_gpu");
}
