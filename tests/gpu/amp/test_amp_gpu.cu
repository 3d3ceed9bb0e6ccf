/* Every accel_amp.h CUDA path against the CPU path on random data: conversions (RNE, stochastic, lists), fused
   unscale + check (multi-tensor, F32/F16/BF16), norms, clipping, master-weight copies and the scaler driven through
   both; the descriptor scratch (device allocator, allocated once). Bit-exact wherever the math is element-wise; norms
   (a different summation order: per-thread fp32 compensated sums folded in float64) within 1e-12 relative of the
   CPU's float64 sum, and of a long-double reference on the GPT-2 list. Beyond the first tests:
   - every element phase 0..7 of source and destination (the kernels' heads, aligned bodies and element-wise bodies),
     sizes 0..33 and tails of larger ones, for every conversion, stochastic rounding at every index phase, unscale /
     norm / clip / clamp on F32, BF16 and F16; unscale of buffers large enough for their own launch shape;
   - mixed dtypes in one list with empty buffers at random phases; more buffers than one launch takes;
   - the 148-buffer GPT-2 124M gradient list (unscale with and without a planted Inf, norm, clip, bf16 copies);
   - norms whose fp32 sums leave their range (the float64 pass): Inf, NaN, 3e19, 1e-30, all zeros;
   - a buffer not aligned to its element size: refused, nothing changed.
   Exits 77 (skip) without a device. */
#include "accel.h"
#include "accel_amp.h"
#include "accel_test.h"
#include "accel_test_gpu.h"
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>

static accel cpu, gpu;
static uint64_t st = 0x1234567887654321ull;
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

/* random fp32 data with specials sprinkled in */
static void fill(float *f, size_t n, float range) {
    size_t i;
    for (i = 0; i < n; ++i) f[i] = rndf(-range, range);
    if (n > 10) { f[1] = NAN; f[3] = INFINITY; f[5] = -INFINITY; f[7] = 1e-40f; f[9] = 65520.0f; }
}

static void test_convert(void) {
    static const size_t sizes[] = {1, 7, 1000, 65536 * 3 + 5, 2000003};
    static const accel_dtype pairs[][2] = {{ACCEL_F32, ACCEL_BF16}, {ACCEL_F32, ACCEL_F16}, {ACCEL_BF16, ACCEL_F32},
                                           {ACCEL_F16, ACCEL_F32}, {ACCEL_F16, ACCEL_BF16}, {ACCEL_BF16, ACCEL_F16},
                                           {ACCEL_F32, ACCEL_F32}};
    size_t si, pi;
    int sr, shift;
    for (si = 0; si < sizeof sizes / sizeof sizes[0]; ++si)
        for (pi = 0; pi < sizeof pairs / sizeof pairs[0]; ++pi)
            for (sr = 0; sr < 2; ++sr)
                for (shift = 0; shift < 2; ++shift) { /* shift 1: misaligned pointers (scalar path) */
                    size_t n = sizes[si], i;
                    accel_dtype a = pairs[pi][0], b = pairs[pi][1];
                    size_t ea = accel_dtype_size(a), eb = accel_dtype_size(b);
                    unsigned char *src = (unsigned char *)malloc((n + 1) * ea), *oc = (unsigned char *)malloc((n + 1) * eb);
                    unsigned char *og = (unsigned char *)malloc((n + 1) * eb);
                    void *ds, *dd;
                    accel_amp_sr s;
                    if (sr && !(a == ACCEL_F32 && b == ACCEL_BF16)) { free(src); free(oc); free(og); continue; }
                    s.seed = 77; s.step = 5; s.index_offset = 3;
                    for (i = 0; i < n + 1; ++i) {
                        float v = rndf(-100, 100);
                        if (i % 97 == 1) v = NAN;
                        if (i % 89 == 2) v = 1e5f;
                        if (a == ACCEL_F32) memcpy(src + i * 4, &v, 4);
                        else { uint16_t h = a == ACCEL_F16 ? accel_f32_to_f16(v) : accel_f32_to_bf16(v); memcpy(src + i * 2, &h, 2); }
                    }
                    ds = dev_copy(src, (n + 1) * ea);
                    AT_CHECK(cudaMalloc(&dd, (n + 1) * eb) == cudaSuccess);
                    AT_EQ_INT(accel_amp_convert(&cpu, src + shift * ea, a, oc + shift * eb, b, n, sr ? &s : NULL), ACCEL_OK);
                    AT_EQ_INT(accel_amp_convert(&gpu, (unsigned char *)ds + shift * ea, a, (unsigned char *)dd + shift * eb, b, n,
                                                sr ? &s : NULL), ACCEL_OK);
                    host_copy(og + shift * eb, (unsigned char *)dd + shift * eb, n * eb);
                    if (diff_bytes(oc + shift * eb, og + shift * eb, n * eb) != 0)
                        fprintf(stderr, "convert %s->%s n=%zu sr=%d shift=%d differs\n", accel_dtype_name(a), accel_dtype_name(b), n, sr, shift);
                    AT_EQ_INT(diff_bytes(oc + shift * eb, og + shift * eb, n * eb), 0);
                    cudaFree(ds); cudaFree(dd);
                    free(src); free(oc); free(og);
                }
}

/* a list of gradient buffers: sizes, dtypes, one misaligned F32 buffer, one empty */
enum { NL = 9 };
static const size_t lsz[NL] = {1, 1000, 65536, 65537, 0, 300001, 17, 4096, 2000000};
static const accel_dtype ldt[NL] = {ACCEL_F32, ACCEL_F16, ACCEL_F32, ACCEL_BF16, ACCEL_F32, ACCEL_F32, ACCEL_F32, ACCEL_BF16, ACCEL_F32};
static const int lmis[NL] = {0, 0, 0, 0, 0, 1, 1, 0, 0};

typedef struct { unsigned char *h[NL], *orig[NL]; void *d[NL]; accel_tensor th[NL], td[NL]; } glist;

static void list_make(glist *g, float range) {
    int k;
    memset(g, 0, sizeof *g);
    for (k = 0; k < NL; ++k) {
        size_t es = accel_dtype_size(ldt[k]), n = lsz[k], i, off = (size_t)lmis[k] * es;
        g->h[k] = (unsigned char *)malloc((n + 1) * es);
        g->orig[k] = (unsigned char *)malloc((n + 1) * es);
        for (i = 0; i < n + 1; ++i) {
            float v = rndf(-range, range);
            if (ldt[k] == ACCEL_F32) memcpy(g->h[k] + i * 4, &v, 4);
            else { uint16_t h = ldt[k] == ACCEL_F16 ? accel_f32_to_f16(v) : accel_f32_to_bf16(v); memcpy(g->h[k] + i * 2, &h, 2); }
        }
        memcpy(g->orig[k], g->h[k], (n + 1) * es);
        g->d[k] = dev_copy(g->h[k], (n + 1) * es);
        g->th[k].ptr = g->h[k] + off; g->th[k].dtype = ldt[k]; g->th[k].ndim = 1; g->th[k].shape[0] = (int64_t)n;
        g->td[k] = g->th[k];
        g->td[k].ptr = (unsigned char *)g->d[k] + off;
    }
}
static void list_poke(glist *g, int k, size_t i, float v) { /* same special value on both sides */
    size_t es = accel_dtype_size(ldt[k]), off = (size_t)lmis[k] * es + i * es;
    if (ldt[k] == ACCEL_F32) memcpy(g->h[k] + off, &v, 4);
    else { uint16_t h = ldt[k] == ACCEL_F16 ? accel_f32_to_f16(v) : accel_f32_to_bf16(v); if (v != v) h = ldt[k] == ACCEL_F16 ? 0x7e01 : 0x7fc1; memcpy(g->h[k] + off, &h, 2); }
    AT_CHECK(cudaMemcpy((unsigned char *)g->d[k] + off, g->h[k] + off, es, cudaMemcpyHostToDevice) == cudaSuccess);
}
static size_t list_diff(glist *g) {
    size_t c = 0;
    int k;
    for (k = 0; k < NL; ++k) {
        size_t bytes = (lsz[k] + 1) * accel_dtype_size(ldt[k]);
        unsigned char *tmp = (unsigned char *)malloc(bytes);
        host_copy(tmp, g->d[k], bytes);
        c += diff_bytes(tmp, g->h[k], bytes);
        free(tmp);
    }
    return c;
}
static void list_free(glist *g) {
    int k;
    for (k = 0; k < NL; ++k) { free(g->h[k]); free(g->orig[k]); cudaFree(g->d[k]); }
}

static void test_unscale(void) {
    int trial;
    for (trial = 0; trial < 4; ++trial) {
        glist g;
        accel_amp_scaler sc_c, sc_g;
        accel_amp_scaler_desc d;
        int fc = -1, fg = -2;
        memset(&d, 0, sizeof d);
        d.init_scale = trial == 1 ? 3.0f : 65536.0f;
        list_make(&g, 60000.0f);
        if (trial == 2) list_poke(&g, 8, lsz[8] - 1, INFINITY);  /* last element of the last buffer */
        if (trial == 3) list_poke(&g, 3, 40000, NAN);           /* middle of a bf16 buffer */
        AT_EQ_INT(accel_amp_scaler_init(&cpu, &sc_c, &d), ACCEL_OK);
        AT_EQ_INT(accel_amp_scaler_init(&gpu, &sc_g, &d), ACCEL_OK);
        AT_EQ_INT(accel_amp_unscale_and_check(&sc_c, g.th, NL, &fc), ACCEL_OK);
        AT_EQ_INT(accel_amp_unscale_and_check(&sc_g, g.td, NL, &fg), ACCEL_OK);
        AT_EQ_INT(fc, trial >= 2);
        AT_EQ_INT(fg, fc);
        AT_EQ_INT(list_diff(&g), 0);
        AT_EQ_INT(accel_amp_update(&sc_c), ACCEL_OK);
        AT_EQ_INT(accel_amp_update(&sc_g), ACCEL_OK);
        AT_CHECK(sc_c.scale == sc_g.scale && sc_c.growth_tracker == sc_g.growth_tracker);
        AT_EQ_INT(gpu.optimizer_step_was_skipped, trial >= 2);
        list_free(&g);
    }
}

/* Launches of large buffers take their own shape (ACCEL__AMP_U_UNSCALE_BIG, chosen by the mean size): two F32
   buffers averaging just over ACCEL__AMP_BIG_UNITS units, the first starting at element 1 (a head), finite, then
   with an Inf planted in the last element of the second; bit for bit as the CPU, the flag as the CPU's. */
#ifndef ACCEL__AMP_BIG_UNITS
#define ACCEL__AMP_BIG_UNITS (1LL << 22) /* accel_amp.h's default (its implementation TU is another one) */
#endif
static void test_unscale_big(void) {
    const size_t n0 = (size_t)ACCEL__AMP_BIG_UNITS * 4 + 1001, n1 = (size_t)ACCEL__AMP_BIG_UNITS * 4 + 13;
    float *h = (float *)malloc((n0 + 1 + n1) * 4), *back = (float *)malloc((n0 + 1 + n1) * 4), *d;
    int trial;
    for (trial = 0; trial < 2; ++trial) {
        accel_tensor tc[2], tg[2];
        accel_amp_scaler sc_c, sc_g;
        int fc = -1, fg = -2;
        size_t i;
        for (i = 0; i < n0 + 1 + n1; ++i) h[i] = rndf(-60000.0f, 60000.0f);
        if (trial == 1) h[n0 + n1] = INFINITY;
        d = (float *)dev_copy(h, (n0 + 1 + n1) * 4);
        memset(tc, 0, sizeof tc);
        tc[0].dtype = tc[1].dtype = ACCEL_F32; tc[0].ndim = tc[1].ndim = 1;
        tc[0].ptr = h + 1; tc[0].shape[0] = (int64_t)n0;
        tc[1].ptr = h + 1 + n0; tc[1].shape[0] = (int64_t)n1;
        tg[0] = tc[0]; tg[1] = tc[1];
        tg[0].ptr = d + 1; tg[1].ptr = d + 1 + n0;
        AT_EQ_INT(accel_amp_scaler_init(&cpu, &sc_c, NULL), ACCEL_OK);
        AT_EQ_INT(accel_amp_scaler_init(&gpu, &sc_g, NULL), ACCEL_OK);
        AT_EQ_INT(accel_amp_unscale_and_check(&sc_c, tc, 2, &fc), ACCEL_OK);
        AT_EQ_INT(accel_amp_unscale_and_check(&sc_g, tg, 2, &fg), ACCEL_OK);
        AT_EQ_INT(fc, trial);
        AT_EQ_INT(fg, fc);
        host_copy(back, d, (n0 + 1 + n1) * 4);
        AT_EQ_INT((long long)diff_bytes(back, h, (n0 + 1 + n1) * 4), 0LL);
        accel_amp_scaler_deinit(&sc_c);
        accel_amp_scaler_deinit(&sc_g);
        cudaFree(d);
    }
    free(h);
    free(back);
}

static void test_norm_clip(void) {
    static const double ps[] = {2.0, 1.0, 3.0, HUGE_VAL};
    int pi;
    for (pi = 0; pi < 4; ++pi) {
        glist g;
        double tc = -1, tg = -2;
        list_make(&g, 3.0f);
        AT_EQ_INT(accel_amp_grad_norm(&cpu, g.th, NL, ps[pi], 0, &tc), ACCEL_OK);
        AT_EQ_INT(accel_amp_grad_norm(&gpu, g.td, NL, ps[pi], 0, &tg), ACCEL_OK);
        AT_NEAR(tg, tc, tc * 1e-12);
        /* clipping: the GPU's buffers equal the CPU's when both use the same coefficient; the totals can differ in the
           last bits, so the CPU side is clipped with the GPU's float32 total */
        AT_EQ_INT(accel_amp_clip_grad_norm(&gpu, g.td, NL, 0.5, ps[pi], 0, &tg), ACCEL_OK);
        {
            float coef = (1.0f / ((float)tg + 1e-6f)) * 0.5f;
            if (coef > 1.0f) coef = 1.0f;
            /* apply coef on the CPU through clip_grad_value-free path: scale via a norm call with max_norm chosen so
               the CPU's coefficient is the same float */
            {
                int k;
                for (k = 0; k < NL; ++k) {
                    size_t i;
                    for (i = 0; i < lsz[k]; ++i) {
                        unsigned char *p = (unsigned char *)g.th[k].ptr;
                        if (ldt[k] == ACCEL_F32) { float v; memcpy(&v, p + 4 * i, 4); v *= coef; memcpy(p + 4 * i, &v, 4); }
                        else {
                            uint16_t h; float v;
                            memcpy(&h, p + 2 * i, 2);
                            v = (ldt[k] == ACCEL_F16 ? accel_f16_to_f32(h) : accel_bf16_to_f32(h)) * coef;
                            h = ldt[k] == ACCEL_F16 ? accel_f32_to_f16(v) : accel_f32_to_bf16(v);
                            memcpy(p + 2 * i, &h, 2);
                        }
                    }
                }
            }
        }
        AT_EQ_INT(list_diff(&g), 0);
        AT_EQ_INT(accel_amp_clip_grad_value(&cpu, g.th, NL, 0.01), ACCEL_OK);
        AT_EQ_INT(accel_amp_clip_grad_value(&gpu, g.td, NL, 0.01), ACCEL_OK);
        AT_EQ_INT(list_diff(&g), 0);
        list_free(&g);
    }
    /* the CPU clip itself against the GPU clip when the totals agree as floats */
    {
        glist g;
        double tc, tg;
        list_make(&g, 1.0f);
        AT_EQ_INT(accel_amp_clip_grad_norm(&cpu, g.th, NL, 2.0, 2.0, 0, &tc), ACCEL_OK);
        AT_EQ_INT(accel_amp_clip_grad_norm(&gpu, g.td, NL, 2.0, 2.0, 0, &tg), ACCEL_OK);
        if ((float)tc == (float)tg) AT_EQ_INT(list_diff(&g), 0);
        list_free(&g);
    }
}

static void test_lists(void) {
    glist g;
    float *oc[NL], *og[NL], *dout[NL];
    int k;
    list_make(&g, 100.0f);
    for (k = 0; k < NL; ++k) {
        oc[k] = (float *)malloc((lsz[k] + 1) * 4);
        og[k] = (float *)malloc((lsz[k] + 1) * 4);
        AT_CHECK(cudaMalloc((void **)&dout[k], (lsz[k] + 1) * 4) == cudaSuccess);
    }
    AT_EQ_INT(accel_amp_convert_to_fp32(&cpu, g.th, oc, NL), ACCEL_OK);
    AT_EQ_INT(accel_amp_convert_to_fp32(&gpu, g.td, dout, NL), ACCEL_OK);
    for (k = 0; k < NL; ++k) {
        host_copy(og[k], dout[k], lsz[k] * 4);
        AT_EQ_INT(diff_bytes(oc[k], og[k], lsz[k] * 4), 0);
        free(oc[k]); free(og[k]); cudaFree(dout[k]);
    }
    list_free(&g);
}

static void test_master(void) {
    size_t n = 1234567, i;
    float *m = (float *)malloc(n * 4), *back_c = (float *)malloc(n * 4), *back_g = (float *)malloc(n * 4);
    uint16_t *wc = (uint16_t *)malloc(n * 2), *wg = (uint16_t *)malloc(n * 2);
    void *dm, *dw, *db;
    accel_amp_sr s;
    fill(m, n, 10.0f);
    dm = dev_copy(m, n * 4);
    AT_CHECK(cudaMalloc(&dw, n * 2) == cudaSuccess);
    AT_CHECK(cudaMalloc(&db, n * 4) == cudaSuccess);
    s.seed = 2024; s.step = 11; s.index_offset = 0;
    for (i = 0; i < 3; ++i) {
        accel_dtype t = i == 1 ? ACCEL_F16 : ACCEL_BF16;
        const accel_amp_sr *sp = i == 2 ? &s : NULL;
        AT_EQ_INT(accel_amp_master_to_model(&cpu, m, wc, t, n, sp), ACCEL_OK);
        AT_EQ_INT(accel_amp_master_to_model(&gpu, (const float *)dm, dw, t, n, sp), ACCEL_OK);
        host_copy(wg, dw, n * 2);
        AT_EQ_INT(diff_bytes(wc, wg, n * 2), 0);
        AT_EQ_INT(accel_amp_model_to_master(&cpu, wc, t, back_c, n), ACCEL_OK);
        AT_EQ_INT(accel_amp_model_to_master(&gpu, dw, t, (float *)db, n), ACCEL_OK);
        host_copy(back_g, db, n * 4);
        AT_EQ_INT(diff_bytes(back_c, back_g, n * 4), 0);
    }
    cudaFree(dm); cudaFree(dw); cudaFree(db);
    free(m); free(back_c); free(back_g); free(wc); free(wg);
}

/* The kernels' results live in the Accelerator's device scratch and come back through its page-locked scratch:
   allocated through the device and pinned allocators (counted here), once, and reused by every later call;
   accel_shutdown frees both. */
static int g_dev_allocs, g_dev_frees;
static at_gpu_count g_pin;
static void *count_alloc(size_t n, void *u) {
    void *p = NULL;
    (void)u;
    if (cudaMalloc(&p, n) != cudaSuccess) return NULL;
    g_dev_allocs++;
    return p;
}
static void count_free(void *p, void *u) {
    (void)u;
    g_dev_frees++;
    cudaFree(p);
}
static void test_scratch(void) {
    enum { N = 300000 };
    float *h = (float *)malloc(N * 4), *dv, *dm;
    uint16_t *dh;
    accel_tensor t;
    accel_amp_scaler sc;
    int f = -1, i, warm;
    long pin_warm;
    double norm = 0;
    fill(h, N, 4.0f);
    for (i = 0; i < N; ++i) if (h[i] != h[i] || h[i] - h[i] != 0.0f) h[i] = 1.0f; /* finite */
    dv = (float *)dev_copy(h, N * 4);
    dm = (float *)dev_copy(h, N * 4);
    AT_CHECK(cudaMalloc((void **)&dh, N * 2) == cudaSuccess);
    memset(&t, 0, sizeof t);
    t.ptr = dv; t.dtype = ACCEL_F32; t.ndim = 1; t.shape[0] = N;
    AT_EQ_INT(accel_amp_scaler_init(&gpu, &sc, NULL), ACCEL_OK);
    AT_EQ_INT(accel_amp_unscale_and_check(&sc, &t, 1, &f), ACCEL_OK);
    AT_EQ_INT(accel_amp_update(&sc), ACCEL_OK);
    warm = g_dev_allocs;
    AT_CHECK(warm >= 1); /* through the device allocator, not cudaMallocAsync */
    AT_CHECK(g_pin.allocs >= 1); /* the read-back through the pinned allocator */
    pin_warm = g_pin.allocs;
    for (i = 0; i < 50; ++i) {
        AT_EQ_INT(accel_amp_unscale_and_check(&sc, &t, 1, &f), ACCEL_OK);
        AT_EQ_INT(f, 0);
        AT_EQ_INT(accel_amp_update(&sc), ACCEL_OK);
        AT_EQ_INT(accel_amp_clip_grad_norm(&gpu, &t, 1, 1.0, 2.0, 0, &norm), ACCEL_OK);
        AT_EQ_INT(accel_amp_master_to_model(&gpu, dm, dh, ACCEL_BF16, N, NULL), ACCEL_OK);
        AT_EQ_INT(accel_amp_clip_grad_value(&gpu, &t, 1, 0.5), ACCEL_OK);
    }
    AT_EQ_INT(g_dev_allocs, warm); /* reused: no allocation per call */
    AT_EQ_INT(g_pin.allocs, pin_warm);
    AT_CHECK(cudaDeviceSynchronize() == cudaSuccess);
    accel_amp_scaler_deinit(&sc);
    cudaFree(dv); cudaFree(dm); cudaFree(dh);
    free(h);
}

/* ------------------------------------------------------------------------------------------ phases, tails */
/* host (CPU side), readback and device copies of one allocation; guards outside what a call may touch */
typedef struct { unsigned char *h, *g; void *d; size_t bytes; } dbuf;
static void db_make(dbuf *b, size_t bytes) {
    b->bytes = bytes;
    b->h = (unsigned char *)malloc(bytes);
    b->g = (unsigned char *)malloc(bytes);
    memset(b->h, 0xA5, bytes);
    AT_CHECK(cudaMalloc(&b->d, bytes) == cudaSuccess);
    AT_CHECK(cudaMemcpy(b->d, b->h, bytes, cudaMemcpyHostToDevice) == cudaSuccess);
}
static void db_push(dbuf *b) { AT_CHECK(cudaMemcpy(b->d, b->h, b->bytes, cudaMemcpyHostToDevice) == cudaSuccess); }
static size_t db_diff(dbuf *b) { host_copy(b->g, b->d, b->bytes); return diff_bytes(b->h, b->g, b->bytes); }
static void db_free(dbuf *b) { free(b->h); free(b->g); cudaFree(b->d); }
/* n random elements of dtype t at p (specials: NaN, Inf, subnormals, -0, fp16 overflow, any 16-bit code) */
static void fill_dt(unsigned char *p, accel_dtype t, size_t n, float range, int specials) {
    size_t i;
    for (i = 0; i < n; ++i) {
        float v = rndf(-range, range);
        uint32_t r = rnd32() % 61;
        if (specials && r == 0) v = accel_bits_f32(0x7fffffffu); /* the GPU's NaN: its arithmetic returns this one, */
        if (specials && r == 1) v = (rnd32() & 1) ? INFINITY : -INFINITY; /* x86 keeps any quiet NaN's payload */
        if (specials && r == 2) v = 1e-41f;
        if (specials && r == 3) v = -0.0f;
        if (specials && r == 4) v = 70000.0f;
        if (t == ACCEL_F32) memcpy(p + 4 * i, &v, 4);
        else if (t == ACCEL_BF16 || t == ACCEL_F16) {
            uint16_t h = t == ACCEL_F16 ? accel_f32_to_f16(v) : accel_f32_to_bf16(v);
            if (specials && r == 5) h = (uint16_t)rnd32();
            memcpy(p + 2 * i, &h, 2);
        } else {
            p[i] = (unsigned char)rnd32();
        }
    }
}
static const size_t tail_sizes[] = {0, 1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 31, 33, 1000, 4097, 65539};
enum { NTAIL = (int)(sizeof tail_sizes / sizeof tail_sizes[0]) };

/* every conversion (and stochastic rounding at index phases 0..3) at source phase x destination phase 0..7 */
static void test_convert_phases(void) {
    static const accel_dtype pairs[][2] = {{ACCEL_F32, ACCEL_BF16}, {ACCEL_F32, ACCEL_F16}, {ACCEL_BF16, ACCEL_F32},
                                           {ACCEL_F16, ACCEL_F32}, {ACCEL_F16, ACCEL_BF16}, {ACCEL_BF16, ACCEL_F16}};
    size_t si, pi;
    int pa, pb, sr;
    for (si = 0; si < NTAIL; ++si)
        for (pi = 0; pi < sizeof pairs / sizeof pairs[0]; ++pi)
            for (sr = 0; sr < 5; ++sr) {
                accel_dtype a = pairs[pi][0], b = pairs[pi][1];
                size_t n = tail_sizes[si], ea = accel_dtype_size(a), eb = accel_dtype_size(b);
                dbuf src, dst;
                accel_amp_sr s;
                if (sr && !(a == ACCEL_F32 && b == ACCEL_BF16)) continue;
                s.seed = 99; s.step = 3; s.index_offset = (uint64_t)(sr - 1);
                db_make(&src, (n + 8) * ea + 64);
                db_make(&dst, (n + 8) * eb + 64);
                for (pa = 0; pa < 8; ++pa)
                    for (pb = 0; pb < 8; ++pb) {
                        size_t c;
                        if (n > 5000 && (pa + pb) % 3) continue; /* the large size at a third of the phase pairs */
                        fill_dt(src.h + 32 + pa * ea, a, n, 50.0f, 1);
                        db_push(&src);
                        AT_EQ_INT(accel_amp_convert(&cpu, src.h + 32 + pa * ea, a, dst.h + 32 + pb * eb, b, n,
                                                    sr ? &s : NULL), ACCEL_OK);
                        AT_EQ_INT(accel_amp_convert(&gpu, (unsigned char *)src.d + 32 + pa * ea, a,
                                                    (unsigned char *)dst.d + 32 + pb * eb, b, n, sr ? &s : NULL), ACCEL_OK);
                        c = db_diff(&dst);
                        if (c) fprintf(stderr, "convert %s->%s n=%zu phases %d/%d sr=%d: %zu bytes differ\n",
                                       accel_dtype_name(a), accel_dtype_name(b), n, pa, pb, sr, c);
                        AT_EQ_INT(c, 0);
                        memcpy(dst.h, dst.g, dst.bytes); /* the next case starts from the same bytes */
                    }
                db_free(&src); db_free(&dst);
            }
}

/* unscale / norm / clip / clamp of one buffer of each dtype at every phase 0..7 and tail size */
static void test_inplace_phases(void) {
    static const accel_dtype dts[3] = {ACCEL_F32, ACCEL_BF16, ACCEL_F16};
    size_t si;
    int di, ph;
    for (si = 0; si < NTAIL; ++si)
        for (di = 0; di < 3; ++di) {
            accel_dtype t = dts[di];
            size_t n = tail_sizes[si], es = accel_dtype_size(t);
            dbuf b;
            db_make(&b, (n + 8) * es + 64);
            for (ph = 0; ph < 8; ++ph) {
                accel_tensor tc, tg;
                accel_amp_scaler sc_c, sc_g;
                accel_amp_scaler_desc d;
                double nc = -1, ng = -2;
                int fc = -1, fg = -2, sp = (ph & 3) == 1;
                memset(&tc, 0, sizeof tc);
                tc.dtype = t; tc.ndim = 1; tc.shape[0] = (int64_t)n; tc.ptr = b.h + 32 + ph * es;
                tg = tc; tg.ptr = (unsigned char *)b.d + 32 + ph * es;
                fill_dt(b.h + 32 + ph * es, t, n, 4.0f, sp);
                db_push(&b);
                memset(&d, 0, sizeof d);
                d.init_scale = 3.0f; /* inv = 1/3: inexact products */
                AT_EQ_INT(accel_amp_scaler_init(&cpu, &sc_c, &d), ACCEL_OK);
                AT_EQ_INT(accel_amp_scaler_init(&gpu, &sc_g, &d), ACCEL_OK);
                AT_EQ_INT(accel_amp_unscale_and_check(&sc_c, &tc, 1, &fc), ACCEL_OK);
                AT_EQ_INT(accel_amp_unscale_and_check(&sc_g, &tg, 1, &fg), ACCEL_OK);
                AT_EQ_INT(fg, fc);
                AT_EQ_INT(db_diff(&b), 0);
                accel_amp_update(&sc_c); accel_amp_update(&sc_g);
                if (!sp) {
                    AT_EQ_INT(accel_amp_grad_norm(&cpu, &tc, 1, 2.0, 0, &nc), ACCEL_OK);
                    AT_EQ_INT(accel_amp_grad_norm(&gpu, &tg, 1, 2.0, 0, &ng), ACCEL_OK);
                    AT_NEAR(ng, nc, 1e-12 * nc);
                    AT_EQ_INT(accel_amp_grad_norm(&cpu, &tc, 1, HUGE_VAL, 0, &nc), ACCEL_OK);
                    AT_EQ_INT(accel_amp_grad_norm(&gpu, &tg, 1, HUGE_VAL, 0, &ng), ACCEL_OK);
                    AT_CHECK(ng == nc);
                    /* clip: both sides with the GPU's total (max_norm so coef < 1 is the same float) */
                    AT_EQ_INT(accel_amp_clip_grad_norm(&gpu, &tg, 1, 0.5, 2.0, 0, &ng), ACCEL_OK);
                    {
                        float coef = (1.0f / ((float)ng + 1e-6f)) * 0.5f;
                        size_t i;
                        if (coef > 1.0f) coef = 1.0f;
                        for (i = 0; i < n; ++i) {
                            unsigned char *q = (unsigned char *)tc.ptr + i * es;
                            if (t == ACCEL_F32) { float v; memcpy(&v, q, 4); v *= coef; memcpy(q, &v, 4); }
                            else {
                                uint16_t h; float v;
                                memcpy(&h, q, 2);
                                v = (t == ACCEL_F16 ? accel_f16_to_f32(h) : accel_bf16_to_f32(h)) * coef;
                                h = t == ACCEL_F16 ? accel_f32_to_f16(v) : accel_f32_to_bf16(v);
                                memcpy(q, &h, 2);
                            }
                        }
                    }
                    AT_EQ_INT(db_diff(&b), 0);
                }
                AT_EQ_INT(accel_amp_clip_grad_value(&cpu, &tc, 1, 0.3), ACCEL_OK);
                AT_EQ_INT(accel_amp_clip_grad_value(&gpu, &tg, 1, 0.3), ACCEL_OK);
                AT_EQ_INT(db_diff(&b), 0);
                memcpy(b.h, b.g, b.bytes);
            }
            db_free(&b);
        }
}

/* a list of n buffers of mixed dtypes, random sizes (some empty) and phases: every list operation against the CPU */
static void test_mixed_list(int nbuf, size_t maxlen) {
    static const accel_dtype dts[3] = {ACCEL_F32, ACCEL_BF16, ACCEL_F16};
    dbuf *b = (dbuf *)calloc((size_t)nbuf, sizeof *b), *o = (dbuf *)calloc((size_t)nbuf, sizeof *o);
    accel_tensor *tc = (accel_tensor *)calloc((size_t)nbuf, sizeof *tc), *tg = (accel_tensor *)calloc((size_t)nbuf, sizeof *tg);
    float **oc = (float **)calloc((size_t)nbuf, sizeof *oc), **og = (float **)calloc((size_t)nbuf, sizeof *og);
    accel_amp_scaler sc_c, sc_g;
    accel_amp_scaler_desc d;
    double nc = -1, ng = -2;
    int k, fc = -1, fg = -2;
    size_t diff = 0;
    for (k = 0; k < nbuf; ++k) {
        accel_dtype t = dts[rnd32() % 3];
        size_t n = rnd32() % 7 == 0 ? 0 : (size_t)(rnd32() % maxlen), es = accel_dtype_size(t), ph = rnd32() % 8;
        db_make(&b[k], (n + 8) * es + 64);
        db_make(&o[k], (n + 8) * 4 + 64);
        fill_dt(b[k].h + 32 + ph * es, t, n, 8.0f, 0);
        db_push(&b[k]);
        tc[k].dtype = t; tc[k].ndim = 1; tc[k].shape[0] = (int64_t)n; tc[k].ptr = b[k].h + 32 + ph * es;
        tg[k] = tc[k]; tg[k].ptr = (unsigned char *)b[k].d + 32 + ph * es;
        oc[k] = (float *)(o[k].h + 32 + 4 * (ph ^ 1));
        og[k] = (float *)((unsigned char *)o[k].d + 32 + 4 * (ph ^ 1));
    }
    memset(&d, 0, sizeof d);
    d.init_scale = 0.75f;
    AT_EQ_INT(accel_amp_scaler_init(&cpu, &sc_c, &d), ACCEL_OK);
    AT_EQ_INT(accel_amp_scaler_init(&gpu, &sc_g, &d), ACCEL_OK);
    AT_EQ_INT(accel_amp_unscale_and_check(&sc_c, tc, nbuf, &fc), ACCEL_OK);
    AT_EQ_INT(accel_amp_unscale_and_check(&sc_g, tg, nbuf, &fg), ACCEL_OK);
    AT_EQ_INT(fg, fc);
    accel_amp_update(&sc_c); accel_amp_update(&sc_g);
    for (k = 0; k < nbuf; ++k) diff += db_diff(&b[k]);
    AT_EQ_INT(diff, 0);
    AT_EQ_INT(accel_amp_grad_norm(&cpu, tc, nbuf, 2.0, 0, &nc), ACCEL_OK);
    AT_EQ_INT(accel_amp_grad_norm(&gpu, tg, nbuf, 2.0, 0, &ng), ACCEL_OK);
    AT_NEAR(ng, nc, 1e-12 * nc);
    AT_EQ_INT(accel_amp_grad_norm(&cpu, tc, nbuf, 1.0, 0, &nc), ACCEL_OK);
    AT_EQ_INT(accel_amp_grad_norm(&gpu, tg, nbuf, 1.0, 0, &ng), ACCEL_OK);
    AT_NEAR(ng, nc, 1e-12 * nc);
    AT_EQ_INT(accel_amp_grad_norm(&cpu, tc, nbuf, 3.0, 0, &nc), ACCEL_OK);
    AT_EQ_INT(accel_amp_grad_norm(&gpu, tg, nbuf, 3.0, 0, &ng), ACCEL_OK);
    AT_NEAR(ng, nc, 1e-12 * nc);
    AT_EQ_INT(accel_amp_clip_grad_value(&cpu, tc, nbuf, 2.0), ACCEL_OK);
    AT_EQ_INT(accel_amp_clip_grad_value(&gpu, tg, nbuf, 2.0), ACCEL_OK);
    AT_EQ_INT(accel_amp_convert_to_fp32(&cpu, tc, oc, nbuf), ACCEL_OK);
    AT_EQ_INT(accel_amp_convert_to_fp32(&gpu, tg, og, nbuf), ACCEL_OK);
    diff = 0;
    for (k = 0; k < nbuf; ++k) diff += db_diff(&b[k]) + db_diff(&o[k]);
    AT_EQ_INT(diff, 0);
    for (k = 0; k < nbuf; ++k) { db_free(&b[k]); db_free(&o[k]); }
    free(b); free(o); free(tc); free(tg); free(oc); free(og);
}

/* the GPT-2 124M gradient list: 148 fp32 buffers back to back, as a trainer holds them */
static void test_gpt2(void) {
    int64_t sizes[148];
    accel_tensor tc[148], tg[148];
    size_t n = 0, i;
    int k = 0, l, fc = -1, fg = -2, trial;
    float *h, *d, *back;
    uint16_t *bc, *bg, *d16;
    long double ref = 0.0L;
    double nc, ng;
    accel_amp_sr s;
    sizes[k++] = 50257LL * 768; sizes[k++] = 1024LL * 768;
    for (l = 0; l < 12; ++l) {
        static const int64_t per[12] = {768, 768, 768LL * 2304, 2304, 768LL * 768, 768, 768, 768, 768LL * 3072, 3072,
                                        3072LL * 768, 768};
        for (i = 0; i < 12; ++i) sizes[k++] = per[i];
    }
    sizes[k++] = 768; sizes[k++] = 768;
    AT_EQ_INT(k, 148);
    for (k = 0; k < 148; ++k) n += (size_t)sizes[k];
    AT_EQ_INT(n, 124439808);
    h = (float *)malloc(n * 4); back = (float *)malloc(n * 4);
    bc = (uint16_t *)malloc(n * 2); bg = (uint16_t *)malloc(n * 2);
    AT_CHECK(cudaMalloc((void **)&d, n * 4) == cudaSuccess);
    AT_CHECK(cudaMalloc((void **)&d16, n * 2) == cudaSuccess);
    for (i = 0; i < n; ++i) h[i] = rndf(-1.0f, 1.0f) * (i % 1000 == 0 ? 300.0f : 1e-2f);
    for (trial = 0; trial < 2; ++trial) {
        accel_amp_scaler sc_c, sc_g;
        accel_amp_scaler_desc sd;
        size_t off = 0;
        for (k = 0; k < 148; ++k) {
            memset(&tc[k], 0, sizeof tc[k]);
            tc[k].dtype = ACCEL_F32; tc[k].ndim = 1; tc[k].shape[0] = sizes[k]; tc[k].ptr = h + off;
            tg[k] = tc[k]; tg[k].ptr = d + off;
            off += (size_t)sizes[k];
        }
        if (trial == 1) h[n - 1] = INFINITY; /* the last element of the last buffer */
        AT_CHECK(cudaMemcpy(d, h, n * 4, cudaMemcpyHostToDevice) == cudaSuccess);
        memset(&sd, 0, sizeof sd);
        sd.init_scale = 65536.0f;
        AT_EQ_INT(accel_amp_scaler_init(&cpu, &sc_c, &sd), ACCEL_OK);
        AT_EQ_INT(accel_amp_scaler_init(&gpu, &sc_g, &sd), ACCEL_OK);
        AT_EQ_INT(accel_amp_unscale_and_check(&sc_c, tc, 148, &fc), ACCEL_OK);
        AT_EQ_INT(accel_amp_unscale_and_check(&sc_g, tg, 148, &fg), ACCEL_OK);
        AT_EQ_INT(fc, trial);
        AT_EQ_INT(fg, fc);
        host_copy(back, d, n * 4);
        AT_EQ_INT(diff_bytes(back, h, n * 4), 0);
        accel_amp_update(&sc_c); accel_amp_update(&sc_g);
    }
    h[n - 1] = 1.0f;
    AT_CHECK(cudaMemcpy(d, h, n * 4, cudaMemcpyHostToDevice) == cudaSuccess);
    for (i = 0; i < n; ++i) ref += (long double)h[i] * (long double)h[i];
    AT_EQ_INT(accel_amp_grad_norm(&cpu, tc, 148, 2.0, 0, &nc), ACCEL_OK);
    AT_EQ_INT(accel_amp_grad_norm(&gpu, tg, 148, 2.0, 0, &ng), ACCEL_OK);
    printf("GPT-2 list: norm %.17g (GPU) %.17g (CPU float64) %.17Lg (long double): GPU - long double %.3g relative\n", ng,
           nc, sqrtl(ref), (double)(((long double)ng - sqrtl(ref)) / sqrtl(ref)));
    AT_NEAR(ng, nc, 1e-12 * nc);
    AT_NEAR(ng, (double)sqrtl(ref), 1e-12 * (double)sqrtl(ref));
    AT_EQ_INT(accel_amp_clip_grad_norm(&gpu, tg, 148, 0.25, 2.0, 0, &ng), ACCEL_OK);
    {
        float coef = (1.0f / ((float)ng + 1e-6f)) * 0.25f;
        for (i = 0; i < n; ++i) h[i] *= coef;
    }
    host_copy(back, d, n * 4);
    AT_EQ_INT(diff_bytes(back, h, n * 4), 0);
    s.seed = 5; s.step = 77; s.index_offset = 0;
    for (trial = 0; trial < 2; ++trial) {
        AT_EQ_INT(accel_amp_master_to_model(&cpu, h, bc, ACCEL_BF16, n, trial ? &s : NULL), ACCEL_OK);
        AT_EQ_INT(accel_amp_master_to_model(&gpu, d, d16, ACCEL_BF16, n, trial ? &s : NULL), ACCEL_OK);
        host_copy(bg, d16, n * 2);
        AT_EQ_INT(diff_bytes(bc, bg, n * 2), 0);
    }
    free(h); free(back); free(bc); free(bg);
    cudaFree(d); cudaFree(d16);
}

/* norms whose fp32 compensated sums leave their range: the float64 pass gives the CPU's answer */
static void test_norm_ranges(void) {
    static const float scales[] = {1e-30f, 1e-20f, 3e19f, 1e30f};
    enum { N = 300001 };
    float *h = (float *)malloc(sizeof(float) * N), *d;
    accel_tensor tc, tg;
    int si, sp;
    AT_CHECK(cudaMalloc((void **)&d, sizeof(float) * N) == cudaSuccess);
    memset(&tc, 0, sizeof tc);
    tc.dtype = ACCEL_F32; tc.ndim = 1; tc.shape[0] = N; tc.ptr = h;
    tg = tc; tg.ptr = d;
    for (si = 0; si < 6; ++si)
        for (sp = 0; sp < 3; ++sp) {
            double nc = -1, ng = -2, p;
            int i, pi;
            for (i = 0; i < N; ++i) h[i] = si < 4 ? rndf(-1.0f, 1.0f) * scales[si] : si == 4 ? 0.0f : rndf(-2.0f, 2.0f);
            if (sp == 1) h[N / 2] = INFINITY;
            if (sp == 2) { h[7] = NAN; h[N - 3] = -INFINITY; }
            AT_CHECK(cudaMemcpy(d, h, sizeof(float) * N, cudaMemcpyHostToDevice) == cudaSuccess);
            for (pi = 0; pi < 3; ++pi) {
                p = pi == 0 ? 2.0 : pi == 1 ? 1.0 : HUGE_VAL;
                AT_EQ_INT(accel_amp_grad_norm(&cpu, &tc, 1, p, 0, &nc), ACCEL_OK);
                AT_EQ_INT(accel_amp_grad_norm(&gpu, &tg, 1, p, 0, &ng), ACCEL_OK);
                if (nc != nc) AT_CHECK(ng != ng);
                else if (isinf(nc) || nc == 0.0) AT_CHECK(ng == nc);
                else AT_NEAR(ng, nc, 1e-12 * nc);
            }
        }
    free(h);
    cudaFree(d);
}

/* a buffer not aligned to its element size: refused before anything runs, nothing changed */
static void test_unaligned(void) {
    dbuf b;
    accel_tensor t[2];
    accel_amp_scaler sc;
    int f = -1;
    double nrm = 0;
    db_make(&b, 4096);
    fill_dt(b.h, ACCEL_F32, 1000, 3.0f, 0);
    db_push(&b);
    memset(t, 0, sizeof t);
    t[0].dtype = ACCEL_F32; t[0].ndim = 1; t[0].shape[0] = 100; t[0].ptr = b.d;
    t[1] = t[0]; t[1].ptr = (unsigned char *)b.d + 402; /* 2 bytes off a float */
    AT_EQ_INT(accel_amp_scaler_init(&gpu, &sc, NULL), ACCEL_OK);
    AT_EQ_INT(accel_amp_unscale_and_check(&sc, t, 2, &f), ACCEL_ERR_INVALID_ARGUMENT);
    AT_CONTAINS(accel_last_error(&gpu), "not aligned to its element size");
    AT_EQ_INT(accel_amp_grad_norm(&gpu, t, 2, 2.0, 0, &nrm), ACCEL_ERR_INVALID_ARGUMENT);
    AT_EQ_INT(accel_amp_convert(&gpu, (unsigned char *)b.d + 1, ACCEL_F16, b.d, ACCEL_F32, 10, NULL),
              ACCEL_ERR_INVALID_ARGUMENT);
    AT_EQ_INT(db_diff(&b), 0);
    accel_amp_scaler_deinit(&sc);
    db_free(&b);
}

int main(void) {
    int count = 0;
    accel_desc d;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        printf("no CUDA device: skipped\n");
        return 77;
    }
    memset(&d, 0, sizeof d);
    d.cpu = 1; d.no_mpi = 1; d.mixed_precision = ACCEL_PRECISION_FP16;
    if (accel_init(&cpu, &d) != ACCEL_OK) { fprintf(stderr, "%s\n", accel_last_error(&cpu)); return 1; }
    d.cpu = 0;
    d.device_allocator.alloc = count_alloc;
    d.device_allocator.free = count_free;
    d.pinned_allocator.alloc = at_pinned_count_alloc;
    d.pinned_allocator.free = at_pinned_count_free;
    d.pinned_allocator.user_data = &g_pin;
    if (accel_init(&gpu, &d) != ACCEL_OK) { fprintf(stderr, "%s\n", accel_last_error(&gpu)); return 1; }
    AT_CHECK(gpu.device >= 0);
    if (gpu.device < 0) return at_finish("amp_gpu");
    test_convert();
    test_unscale();
    test_unscale_big();
    test_norm_clip();
    test_lists();
    test_master();
    test_scratch();
    test_convert_phases();
    test_inplace_phases();
    test_mixed_list(24, 70000);
    test_mixed_list(400, 3000); /* more buffers than one launch takes */
    test_gpt2();
    test_norm_ranges();
    test_unaligned();
    AT_CHECK(cudaDeviceSynchronize() == cudaSuccess);
    accel_shutdown(&cpu);
    accel_shutdown(&gpu);
    AT_EQ_INT(g_dev_frees, g_dev_allocs); /* the scratch is freed by accel_shutdown */
    AT_CHECK(g_pin.frees == g_pin.allocs);
    return at_finish("amp_gpu");
}
