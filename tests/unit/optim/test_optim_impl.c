/* accel_optim.h's private math in a TU of its own (it defines ACCEL_IMPLEMENTATION to reach the static helpers):
   - the exact fused multiply-add emulation against the C library's fmaf (glibc's is correctly rounded), on random
     triples, near-cancellations and double-rounding cases;
   - the four ways a step can run give the same bits: the blocked CPU loop (generic, and its AVX2+FMA twin when the
     CPU has it) and the per-element function each CUDA thread runs (accel__optim_elem), with the hardware fma and with
     the emulation — for AdamW (mul+add and lerp, amsgrad), SGD (momentum, nesterov, weight decay, first step), F32/BF16/F16
     gradients, unscale and clip coefficients, maximize, and BF16/F16 model copies (nearest and stochastic). So the
     kernel's element path is checked on the CPU even where no GPU is. NaN compares equal to NaN (payloads may differ). */
#define ACCEL_IMPLEMENTATION
#include "accel.h"
#include "accel_optim.h"
#include "accel_test.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rs = 0xC0FFEE1234567ull;
static uint32_t rnd32(void) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return (uint32_t)(rs >> 16); }
static float bitsf(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t fbits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static int same_f(float a, float b) { return (a != a && b != b) || fbits(a) == fbits(b); }

static void test_fma(void) {
    long i, bad = 0, n = 4000000;
    at_context = "fma emulation";
    for (i = 0; i < n; ++i) {
        float a, b, c, x, y;
        int mode = (int)(i % 5);
        a = bitsf((rnd32() & 0x807fffffu) | ((uint32_t)(64 + rnd32() % 128) << 23));
        b = bitsf((rnd32() & 0x807fffffu) | ((uint32_t)(64 + rnd32() % 128) << 23));
        c = bitsf((rnd32() & 0x807fffffu) | ((uint32_t)(64 + rnd32() % 128) << 23));
        if (mode == 1) c = nextafterf(-(float)((double)a * b), (rnd32() & 1) ? INFINITY : -INFINITY); /* cancellation */
        if (mode == 2) { /* integer products: where rounding twice differs */
            a = (float)(1 + (rnd32() & 0xffffff)); b = (float)(1 + (rnd32() & 0xfff));
            c = ldexpf((float)(rnd32() & 0xffffff), -(int)(rnd32() % 40)) * ((rnd32() & 1) ? 1.0f : -1.0f);
        }
        if (mode == 3) c = bitsf(rnd32()); /* anything: subnormals, Inf, NaN */
        if (mode == 4) { a = bitsf(rnd32()); b = bitsf(rnd32()); }
        x = fmaf(a, b, c);
        y = accel__optim_fma_emu(a, b, c);
        if (!same_f(x, y)) {
            if (bad < 5) fprintf(stderr, "fma(%a, %a, %a): libm %a, emulation %a\n", (double)a, (double)b, (double)c,
                                 (double)x, (double)y);
            ++bad;
        }
    }
    AT_EQ_INT(bad, 0);
    printf("fma emulation: %ld triples, %ld differences from fmaf\n", n, bad);
}

/* -------------------------------------------------------------------------------- the four step paths */
enum { NV = 4 };
typedef struct {
    float *p, *m, *v, *vm;
    uint16_t *model;
} bufs;

static void bufs_alloc(bufs *b, size_t n) {
    b->p = (float *)malloc(4 * n); b->m = (float *)malloc(4 * n); b->v = (float *)malloc(4 * n);
    b->vm = (float *)malloc(4 * n); b->model = (uint16_t *)malloc(2 * n);
}
static void bufs_free(bufs *b) { free(b->p); free(b->m); free(b->v); free(b->vm); free(b->model); }
static size_t bufs_diff(const bufs *a, const bufs *b, size_t n) {
    size_t i, d = 0;
    for (i = 0; i < n; ++i)
        d += !same_f(a->p[i], b->p[i]) + !same_f(a->m[i], b->m[i]) + !same_f(a->v[i], b->v[i]) +
             !same_f(a->vm[i], b->vm[i]) + (a->model[i] != b->model[i]);
    return d;
}

static void run_config(int kind, int ams, int nesterov, int gt, int mt, int stochastic, int has_inv, int has_coef,
                       int neg, double wd, unsigned long long t) {
    static const size_t sizes[] = {1, 15, 16, 17, 1000, 4099};
    size_t si;
    for (si = 0; si < sizeof sizes / sizeof sizes[0]; ++si) {
        size_t n = sizes[si], i;
        bufs b[NV];
        void *g = malloc(4 * n);
        accel__optim_hyper hy;
        accel__optim_in in;
        accel__optim_job jb;
        int w;
        memset(&hy, 0, sizeof hy);
        hy.beta1 = kind == ACCEL__OPTIM_K_ADAMW_LERP && t == 3 ? 0.3 : 0.9; /* the large-weight lerp branch too */
        hy.beta2 = 0.999;
        hy.eps = 1e-8;
        hy.momentum = kind >= ACCEL__OPTIM_K_SGD ? 0.9 : 0.0;
        hy.dampening = nesterov ? 0.0 : 0.2;
        hy.kind = kind;
        hy.amsgrad = ams;
        hy.nesterov = nesterov;
        hy.maximize = neg;
        hy.stochastic = stochastic;
        hy.sr_seed = 4242;
        memset(&in, 0, sizeof in);
        in.has_inv = has_inv; in.inv = 0.0123f;
        in.has_coef = has_coef; in.coef = 0.77f;
        in.neg = neg;
        for (w = 0; w < NV; ++w) bufs_alloc(&b[w], n);
        for (i = 0; i < n; ++i) {
            float gv = (float)((int)(rnd32() % 20001) - 10000) * 1e-3f;
            if (i % 97 == 5) gv = NAN;
            if (i % 89 == 7) gv = INFINITY;
            if (gt == (int)ACCEL_F32) ((float *)g)[i] = gv;
            else if (gt == (int)ACCEL_BF16) ((uint16_t *)g)[i] = accel_f32_to_bf16(gv);
            else ((uint16_t *)g)[i] = accel_f32_to_f16(gv);
            b[0].p[i] = (float)((int)(rnd32() % 2001) - 1000) * 1e-3f;
            b[0].m[i] = (float)((int)(rnd32() % 2001) - 1000) * 1e-4f;
            b[0].v[i] = (float)(rnd32() % 1000) * 1e-6f;
            b[0].vm[i] = (float)(rnd32() % 1000) * 1e-6f;
            b[0].model[i] = 0;
        }
        for (w = 1; w < NV; ++w) {
            memcpy(b[w].p, b[0].p, 4 * n); memcpy(b[w].m, b[0].m, 4 * n); memcpy(b[w].v, b[0].v, 4 * n);
            memcpy(b[w].vm, b[0].vm, 4 * n); memcpy(b[w].model, b[0].model, 2 * n);
        }
        memset(&jb, 0, sizeof jb);
        jb.g = g;
        jb.gt = gt;
        jb.mt = mt;
        jb.n = (long long)n;
        jb.lr = 0.01;
        jb.wd = wd;
        jb.index = 12345;
        accel__optim_host_coefs(&hy, jb.lr, jb.wd, t, &jb.k);
        for (w = 0; w < NV; ++w) {
            jb.p = b[w].p;
            jb.m = b[w].m;
            jb.v = kind <= ACCEL__OPTIM_K_ADAMW_LERP ? b[w].v : NULL;
            jb.vmax = ams ? b[w].vm : NULL;
            jb.model = mt ? (void *)b[w].model : NULL;
            if (w == 0) accel__optim_cpu_generic(&jb, 1, &hy, &in);
            else if (w == 1) {
#ifdef ACCEL__OPTIM_X86_DISPATCH
                if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) accel__optim_cpu_avx2(&jb, 1, &hy, &in);
                else accel__optim_cpu_generic(&jb, 1, &hy, &in);
#else
                accel__optim_cpu_generic(&jb, 1, &hy, &in);
#endif
            } else {
                long long e;
                for (e = 0; e < jb.n; ++e) accel__optim_elem(&jb, &jb.k, &hy, &in, e, w == 2); /* a CUDA thread's work */
            }
        }
        for (w = 1; w < NV; ++w) {
            size_t d = bufs_diff(&b[0], &b[w], n);
            if (d) fprintf(stderr, "kind %d ams %d nest %d gt %d mt %d sr %d inv %d coef %d neg %d wd %g t %llu n %zu: path %d differs "
                           "in %zu values\n", kind, ams, nesterov, gt, mt, stochastic, has_inv, has_coef, neg, wd, t, n, w, d);
            AT_EQ_INT(d, 0);
        }
        for (w = 0; w < NV; ++w) bufs_free(&b[w]);
        free(g);
    }
}

static void test_paths(void) {
    static const int gts[3] = {ACCEL_F32, ACCEL_BF16, ACCEL_F16};
    static const int mts[4][2] = {{0, 0}, {ACCEL_BF16, 0}, {ACCEL_BF16, 1}, {ACCEL_F16, 0}};
    int kind, ams, nest, gi, mi, flags;
    unsigned long long t;
    at_context = "step paths";
    for (kind = ACCEL__OPTIM_K_ADAMW; kind <= ACCEL__OPTIM_K_SGD_MOM; ++kind)
        for (ams = 0; ams < 2; ++ams) {
            if (ams && kind >= ACCEL__OPTIM_K_SGD) continue;
            for (nest = 0; nest < 2; ++nest) {
                if (nest && kind != ACCEL__OPTIM_K_SGD_MOM) continue;
                for (gi = 0; gi < 3; ++gi)
                    for (mi = 0; mi < 4; ++mi)
                        for (t = 1; t <= 3; t += 2) {
                            flags = (int)(rnd32() % 8);
                            run_config(kind, ams, nest, gts[gi], mts[mi][0], mts[mi][1], flags & 1, (flags >> 1) & 1,
                                       (flags >> 2) & 1, (gi + mi) % 2 ? 0.1 : 0.0, t);
                        }
            }
        }
#ifdef ACCEL__OPTIM_X86_DISPATCH
    printf("step paths: generic loop, AVX2+FMA loop (%s on this CPU), per-element with hardware fma and with emulation\n",
           __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? "run" : "not available");
#else
    printf("step paths: generic loop, per-element with hardware fma and with emulation (no x86 dispatch in this build)\n");
#endif
}

int main(void) {
    AT_CHECK(same_f(NAN, -NAN) && !same_f(0.0f, -0.0f));
    test_fma();
    test_paths();
    at_context = "";
    return at_finish("optim-impl");
}
