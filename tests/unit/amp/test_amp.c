/* Unit tests of accel_amp.h on the CPU: policy, conversions (exhaustive 16-bit patterns, every fp32 exponent with
   boundary mantissas, against a long-hand float64 reference), stochastic rounding, the loss scaler
   (docs/semantics.md §10 trajectories written out by hand), the scaler as an object (its Accelerator, deinit, the
   core's state contract), fused unscale + check (also without a host process group), clip_grad_norm_ /
   clip_grad_value_ against float64 references, master-weight copies, checkpoint bytes and argument errors. */
#include "accel.h"
#include "accel_amp.h"
#include "accel_test.h"
#include "amp_ref.h"
#include <float.h>
#include <stdint.h>
#include <stdlib.h>

static accel g_acc;

static void quiet_log(void *user, accel_log_level level, const char *msg) { (void)user; (void)level; (void)msg; }

static void init_acc(accel *acc, accel_precision p) {
    accel_desc d;
    memset(&d, 0, sizeof d);
    d.cpu = 1;
    d.no_mpi = 1;
    d.mixed_precision = p;
    d.log_fn = quiet_log; /* expected errors are checked through accel_last_error */
    if (accel_init(acc, &d) != ACCEL_OK) {
        fprintf(stderr, "accel_init failed: %s\n", accel_last_error(acc));
        exit(1);
    }
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd32(void) {
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}
static float rndf(float lo, float hi) { return lo + (hi - lo) * (float)(rnd32() >> 8) * (1.0f / 16777216.0f); }

/* ------------------------------------------------------------------------------------------------ policy */
static void test_policy(void) {
    static const struct { accel_precision p; accel_precision want; accel_dtype dt; int scaling; } cases[] = {
        {ACCEL_PRECISION_NO, ACCEL_PRECISION_NO, ACCEL_F32, 0},
        {ACCEL_PRECISION_FP16, ACCEL_PRECISION_FP16, ACCEL_F16, 1},
        {ACCEL_PRECISION_BF16, ACCEL_PRECISION_BF16, ACCEL_BF16, 0},
    };
    size_t i;
    for (i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        accel acc;
        accel_amp_policy pol;
        accel_amp_scaler sc;
        init_acc(&acc, cases[i].p);
        AT_EQ_INT(accel_amp_get_policy(&acc, &pol), ACCEL_OK);
        AT_EQ_INT(pol.precision, cases[i].want);
        AT_EQ_INT(pol.compute_dtype, cases[i].dt);
        AT_EQ_INT(pol.loss_scaling, cases[i].scaling);
        AT_EQ_INT(pol.accelerate_would_scale, 0); /* CPU: Accelerate never creates a scaler */
        AT_EQ_INT(accel_amp_scaler_init(&acc, &sc, NULL), ACCEL_OK);
        AT_EQ_INT(sc.enabled, cases[i].scaling);
        AT_NEAR(accel_amp_loss_scale(&sc), cases[i].scaling ? 65536.0 : 1.0, 0);
        accel_shutdown(&acc);
    }
    {
        accel acc;
        accel_amp_policy pol;
        accel_amp_scaler sc;
        init_acc(&acc, ACCEL_PRECISION_FP8); /* fp8: bf16 outside the fp8 GEMMs, no scaler (test_fp8.c has more) */
        AT_EQ_INT(accel_amp_get_policy(&acc, &pol), ACCEL_OK);
        AT_EQ_INT(pol.precision, ACCEL_PRECISION_FP8);
        AT_EQ_INT(accel_amp_scaler_init(&acc, &sc, NULL), ACCEL_OK);
        AT_EQ_INT(sc.enabled, 0);
        accel_shutdown(&acc);
    }
}

/* ------------------------------------------------------------------------------------------ conversions */
static void test_exhaustive16(void) {
    uint32_t h;
    int bad_f16 = 0, bad_bf16 = 0, bad_nan = 0, bad_rt = 0;
    for (h = 0; h < 65536; ++h) {
        float f = accel_f16_to_f32((uint16_t)h), b = accel_bf16_to_f32((uint16_t)h);
        double rf = ref_decode((uint16_t)h, 10, 15), rb = ref_decode((uint16_t)h, 7, 127);
        int nan_f = ((h & 0x7c00u) == 0x7c00u) && (h & 0x3ffu), nan_b = ((h & 0x7f80u) == 0x7f80u) && (h & 0x7fu);
        if (nan_f) {
            if (!isnan(f)) bad_nan++;
            if (accel_f32_to_f16(f) != 0x7fff) bad_rt++;
            /* widening keeps the sign and the payload (quieted) */
            if ((f_bits(f) >> 31) != (h >> 15) || ((f_bits(f) >> 13) & 0x1ffu) != ((h & 0x1ffu))) bad_nan++;
        } else {
            if ((double)f != rf || !signbit(f) != !signbit(rf)) bad_f16++;
            if (accel_f32_to_f16(f) != h) bad_rt++;
        }
        if (nan_b) {
            if (!isnan(b)) bad_nan++;
            if (accel_f32_to_bf16(b) != 0x7fff) bad_rt++;
            if (f_bits(b) != (h << 16)) bad_nan++; /* bf16 widening is exact, payload included */
        } else {
            if ((double)b != rb || !signbit(b) != !signbit(rb)) bad_bf16++;
            if (accel_f32_to_bf16(b) != h) bad_rt++;
        }
    }
    AT_EQ_INT(bad_f16, 0);
    AT_EQ_INT(bad_bf16, 0);
    AT_EQ_INT(bad_nan, 0);
    AT_EQ_INT(bad_rt, 0);
}

static void test_boundaries(void) {
    size_t cap = 400000, n, i;
    uint32_t *set = (uint32_t *)malloc(cap * sizeof *set);
    int bad16 = 0, badb = 0, shown = 0;
    n = ref_boundary_set(set, cap);
    AT_CHECK(n > 200000 && n < cap);
    for (i = 0; i < n + 2000000; ++i) {
        uint32_t u = i < n ? set[i] : rnd32() ^ (rnd32() << 16);
        float f = bits_f(u);
        uint16_t a = accel_f32_to_f16(f), ra = ref_f32_to_f16(f);
        uint16_t b = accel_f32_to_bf16(f), rb = ref_f32_to_bf16(f);
        if (a != ra) { bad16++; if (shown++ < 5) fprintf(stderr, "f16 %08x: %04x vs ref %04x\n", u, a, ra); }
        if (b != rb) { badb++; if (shown++ < 5) fprintf(stderr, "bf16 %08x: %04x vs ref %04x\n", u, b, rb); }
    }
    AT_EQ_INT(bad16, 0);
    AT_EQ_INT(badb, 0);
    /* named cases */
    AT_EQ_INT(accel_f32_to_f16(65504.0f), 0x7bff);
    AT_EQ_INT(accel_f32_to_f16(65519.996f), 0x7bff);
    AT_EQ_INT(accel_f32_to_f16(65520.0f), 0x7c00);      /* tie at the top rounds to Inf */
    AT_EQ_INT(accel_f32_to_f16(-1e10f), 0xfc00);
    AT_EQ_INT(accel_f32_to_f16(5.9604645e-08f), 0x0001); /* 2^-24, smallest subnormal */
    AT_EQ_INT(accel_f32_to_f16(2.9802322e-08f), 0x0000); /* 2^-25: tie → even 0 */
    AT_EQ_INT(accel_f32_to_f16(2.9802326e-08f), 0x0001); /* just above the tie */
    AT_EQ_INT(accel_f32_to_f16(-0.0f), 0x8000);
    AT_EQ_INT(accel_f32_to_f16(1.0f + 1.0f / 2048.0f), 0x3c00);   /* tie → even */
    AT_EQ_INT(accel_f32_to_f16(1.0f + 3.0f / 2048.0f), 0x3c02);   /* tie → even (up) */
    AT_EQ_INT(accel_f32_to_f16(bits_f(0xffc00001u)), 0x7fff);   /* NaN: canonical, sign dropped (CUDA) */
    AT_EQ_INT(accel_f32_to_bf16(bits_f(0x7f7fffffu)), 0x7f80);   /* FLT_MAX rounds to Inf in bf16 */
    AT_EQ_INT(accel_f32_to_bf16(bits_f(0x7f7f7fffu)), 0x7f7f);
    AT_EQ_INT(accel_f32_to_bf16(bits_f(0x3f808000u)), 0x3f80);   /* tie → even */
    AT_EQ_INT(accel_f32_to_bf16(bits_f(0x3f818000u)), 0x3f82);
    AT_EQ_INT(accel_f32_to_bf16(bits_f(0x00000001u)), 0x0000);   /* fp32 subnormal */
    AT_EQ_INT(accel_f32_to_bf16(bits_f(0x00008001u)), 0x0001);
    AT_EQ_INT(accel_f32_to_bf16(bits_f(0xff800000u)), 0xff80);
    AT_EQ_INT(accel_f32_to_bf16(bits_f(0xff800001u)), 0x7fff);
    free(set);
}

static void test_buffers(void) {
    size_t n = 1000, i;
    float *f = (float *)malloc(n * 4), *back = (float *)malloc(n * 4);
    uint16_t *h = (uint16_t *)malloc(n * 2), *h2 = (uint16_t *)malloc(n * 2);
    int bad = 0;
    for (i = 0; i < n; ++i) f[i] = rndf(-1000.0f, 1000.0f);
    f[3] = NAN; f[4] = INFINITY; f[5] = 1e-7f; f[6] = 70000.0f;
    AT_EQ_INT(accel_amp_convert(&g_acc, f, ACCEL_F32, h, ACCEL_F16, n, NULL), ACCEL_OK);
    for (i = 0; i < n; ++i) bad += h[i] != ref_f32_to_f16(f[i]);
    AT_EQ_INT(accel_amp_master_to_model(&g_acc, f, h2, ACCEL_BF16, n, NULL), ACCEL_OK);
    for (i = 0; i < n; ++i) bad += h2[i] != ref_f32_to_bf16(f[i]);
    AT_EQ_INT(bad, 0);
    /* bf16 → f16 goes through the exact fp32 value */
    AT_EQ_INT(accel_amp_convert(&g_acc, h2, ACCEL_BF16, h, ACCEL_F16, n, NULL), ACCEL_OK);
    for (i = 0; i < n; ++i) bad += h[i] != ref_f32_to_f16((float)ref_decode(h2[i], 7, 127)) && !isnan(f[i]);
    AT_EQ_INT(bad, 0);
    AT_EQ_INT(accel_amp_model_to_master(&g_acc, h2, ACCEL_BF16, back, n), ACCEL_OK);
    for (i = 0; i < n; ++i) bad += !isnan(f[i]) && (double)back[i] != ref_decode(h2[i], 7, 127);
    AT_EQ_INT(bad, 0);
    /* convert_to_fp32 over a list of mixed buffers, one empty */
    {
        uint16_t a16[5] = {0x3c00, 0xc000, 0x0001, 0x7c00, 0x7bff};
        uint16_t b16[3] = {0x3f80, 0x4049, 0x8000};
        float fin[2] = {1.5f, -2.25f};
        float oa[5], ob[3], oc[2];
        float *outs[4];
        accel_tensor t[4];
        memset(t, 0, sizeof t);
        t[0].ptr = a16; t[0].dtype = ACCEL_F16; t[0].ndim = 1; t[0].shape[0] = 5;
        t[1].ptr = b16; t[1].dtype = ACCEL_BF16; t[1].ndim = 1; t[1].shape[0] = 3;
        t[2].ptr = NULL; t[2].dtype = ACCEL_BF16; t[2].ndim = 1; t[2].shape[0] = 0;
        t[3].ptr = fin; t[3].dtype = ACCEL_F32; t[3].ndim = 2; t[3].shape[0] = 1; t[3].shape[1] = 2;
        outs[0] = oa; outs[1] = ob; outs[2] = NULL; outs[3] = oc;
        AT_EQ_INT(accel_amp_convert_to_fp32(&g_acc, t, outs, 4), ACCEL_OK);
        AT_NEAR(oa[0], 1.0, 0); AT_NEAR(oa[1], -2.0, 0); AT_NEAR(oa[2], 5.9604644775390625e-08, 0);
        AT_CHECK(isinf(oa[3]) && oa[3] > 0); AT_NEAR(oa[4], 65504.0, 0);
        AT_NEAR(ob[0], 1.0, 0); AT_NEAR(ob[1], 3.140625, 0); AT_CHECK(ob[2] == 0.0f && signbit(ob[2]));
        AT_NEAR(oc[0], 1.5, 0); AT_NEAR(oc[1], -2.25, 0);
        t[1].dtype = ACCEL_I32;
        AT_EQ_INT(accel_amp_convert_to_fp32(&g_acc, t, outs, 4), ACCEL_ERR_INVALID_ARGUMENT);
        AT_CONTAINS(accel_last_error(&g_acc), "I32");
    }
    /* argument errors change nothing */
    memset(h, 0xab, n * 2);
    AT_EQ_INT(accel_amp_convert(&g_acc, f, ACCEL_F32, h, ACCEL_I16, n, NULL), ACCEL_ERR_INVALID_ARGUMENT);
    {
        accel_amp_sr sr = {1, 2, 3};
        AT_EQ_INT(accel_amp_convert(&g_acc, f, ACCEL_F32, h, ACCEL_F16, n, &sr), ACCEL_ERR_INVALID_ARGUMENT);
        AT_CONTAINS(accel_last_error(&g_acc), "stochastic");
    }
    AT_EQ_INT(accel_amp_convert(&g_acc, NULL, ACCEL_F32, h, ACCEL_F16, n, NULL), ACCEL_ERR_INVALID_ARGUMENT);
    AT_EQ_INT(accel_amp_convert(&g_acc, f, ACCEL_F32, f, ACCEL_F16, n, NULL), ACCEL_ERR_INVALID_ARGUMENT);
    AT_EQ_INT(h[0], 0xabab);
    AT_EQ_INT(accel_amp_convert(&g_acc, NULL, ACCEL_F32, NULL, ACCEL_F16, 0, NULL), ACCEL_OK);
    free(f); free(back); free(h); free(h2);

    /* large buffers (past the caches), misaligned destinations, every element checked */
    {
        size_t N = ((size_t)1 << 20) + 1001;
        float *src = (float *)malloc(N * 4), *wide = (float *)malloc((N + 1) * 4);
        uint16_t *dst = (uint16_t *)malloc((N + 8) * 2);
        accel_amp_sr sr;
        uint32_t r4[4];
        int off;
        for (i = 0; i < N; ++i) src[i] = bits_f(rnd32() ^ (rnd32() << 16));
        for (off = 0; off < 3; ++off) {
            bad = 0;
            AT_EQ_INT(accel_amp_convert(&g_acc, src, ACCEL_F32, dst + off, ACCEL_BF16, N, NULL), ACCEL_OK);
            for (i = 0; i < N; ++i) bad += dst[off + i] != ref_f32_to_bf16(src[i]);
            AT_EQ_INT(accel_amp_convert(&g_acc, src, ACCEL_F32, dst + off, ACCEL_F16, N, NULL), ACCEL_OK);
            for (i = 0; i < N; ++i) bad += dst[off + i] != ref_f32_to_f16(src[i]);
            AT_EQ_INT(accel_amp_convert(&g_acc, dst + off, ACCEL_F16, wide + (off & 1), ACCEL_F32, N, NULL), ACCEL_OK);
            for (i = 0; i < N; ++i) {
                double rv = ref_decode(dst[off + i], 10, 15);
                bad += isnan(rv) ? !isnan(wide[(off & 1) + i]) : (double)wide[(off & 1) + i] != rv;
            }
            sr.seed = 5; sr.step = 6; sr.index_offset = (uint64_t)off * 7;
            AT_EQ_INT(accel_amp_convert(&g_acc, src, ACCEL_F32, dst + off, ACCEL_BF16, N, &sr), ACCEL_OK);
            for (i = 0; i < N; ++i) {
                uint64_t idx = sr.index_offset + i;
                uint32_t u = f_bits(src[i]);
                uint16_t want;
                accel_rng_draw4(5, 6, idx / 4, r4);
                if ((u & 0x7fffffffu) > 0x7f800000u) want = 0x7fff;
                else if ((u & 0x7fffffffu) == 0x7f800000u) want = (uint16_t)(u >> 16);
                else want = (uint16_t)((u + (r4[idx % 4] & 0xffffu)) >> 16);
                bad += dst[off + i] != want;
            }
            AT_EQ_INT(bad, 0);
        }
        free(src); free(wide); free(dst);
    }
}

/* ----------------------------------------------------------------------------------- stochastic rounding */
static void test_stochastic(void) {
    static const float xs[] = {1.0f + 1.0f / 3.0f * 0.0078125f, -3.14159265f, 1.2345e-30f, 65504.7f, 0.1f, 1.0f};
    size_t N = 200000, i, k;
    uint16_t *o = (uint16_t *)malloc(N * 2), *o2 = (uint16_t *)malloc(N * 2);
    float *src = (float *)malloc(N * 4);
    for (k = 0; k < sizeof xs / sizeof xs[0]; ++k) {
        float x = xs[k];
        uint16_t lo = (uint16_t)(f_bits(x) >> 16), hi = (uint16_t)(lo + 1); /* truncation and the next value away from 0 */
        double vlo = ref_decode(lo, 7, 127), vhi = ref_decode(hi, 7, 127), sum = 0.0, ulp = fabs(vhi - vlo);
        size_t nhi = 0, other = 0;
        accel_amp_sr sr;
        sr.seed = 42 + k; sr.step = 7; sr.index_offset = 0;
        for (i = 0; i < N; ++i) src[i] = x;
        AT_EQ_INT(accel_amp_convert(&g_acc, src, ACCEL_F32, o, ACCEL_BF16, N, &sr), ACCEL_OK);
        for (i = 0; i < N; ++i) {
            if (o[i] == hi) nhi++;
            else if (o[i] != lo) other++;
            sum += ref_decode(o[i], 7, 127);
        }
        AT_EQ_INT(other, 0);
        /* unbiased: |mean - x| within 5 standard errors (rounding error std ≤ ulp/2) */
        AT_NEAR(sum / (double)N, (double)x, 5.0 * ulp * 0.5 / sqrt((double)N) + (f_bits(x) & 0xffffu ? 0 : 0));
        if ((f_bits(x) & 0xffffu) == 0) AT_EQ_INT(nhi, 0); /* exactly representable: never moves */
        /* deterministic for (seed, step, index), and index_offset shifts the stream */
        AT_EQ_INT(accel_amp_convert(&g_acc, src, ACCEL_F32, o2, ACCEL_BF16, N, &sr), ACCEL_OK);
        AT_CHECK(memcmp(o, o2, N * 2) == 0);
        sr.index_offset = 13;
        AT_EQ_INT(accel_amp_convert(&g_acc, src, ACCEL_F32, o2, ACCEL_BF16, N - 13, &sr), ACCEL_OK);
        AT_CHECK(memcmp(o + 13, o2, (N - 13) * 2) == 0);
        if (f_bits(x) & 0xffffu) {
            sr.index_offset = 0; sr.step = 8; /* another step draws other bits */
            AT_EQ_INT(accel_amp_convert(&g_acc, src, ACCEL_F32, o2, ACCEL_BF16, N, &sr), ACCEL_OK);
            AT_CHECK(memcmp(o, o2, N * 2) != 0);
        }
    }
    /* the bits of element i are Philox(seed, step, i/4)[i%4], written out here from the core's draw */
    {
        uint32_t r[4];
        float v = 1.0f + 0.3f * 0.0078125f;
        accel_amp_sr sr;
        sr.seed = 99; sr.step = 3; sr.index_offset = 0;
        for (i = 0; i < 64; ++i) src[i] = v;
        AT_EQ_INT(accel_amp_convert(&g_acc, src, ACCEL_F32, o, ACCEL_BF16, 64, &sr), ACCEL_OK);
        for (i = 0; i < 64; ++i) {
            uint32_t u = f_bits(v);
            accel_rng_draw4(99, 3, i / 4, r);
            AT_EQ_INT(o[i], (uint16_t)((u + (r[i % 4] & 0xffffu)) >> 16));
            AT_EQ_INT(accel_amp_sr_bits(99, 3, i), r[i % 4]);
        }
    }
    AT_EQ_INT(accel_amp_f32_to_bf16_sr(NAN, 0xffff), 0x7fff);
    AT_EQ_INT(accel_amp_f32_to_bf16_sr(INFINITY, 0xffff), 0x7f80);
    AT_EQ_INT(accel_amp_f32_to_bf16_sr(-INFINITY, 0xffff), 0xff80);
    AT_EQ_INT(accel_amp_f32_to_bf16_sr(bits_f(0x7f7f0001u), 0xffff), 0x7f80); /* beyond max bf16: may reach Inf */
    AT_EQ_INT(accel_amp_f32_to_bf16_sr(bits_f(0x7f7f0001u), 0x0000), 0x7f7f);
    free(o); free(o2); free(src);
}

/* --------------------------------------------------------------------------------------------- scaler */
typedef struct { int found; float scale; int tracker; } traj_point;

/* Drive the scaler through real buffers: found → a NaN in the gradient. */
static void run_traj(const char *name, const accel_amp_scaler_desc *d, const traj_point *pts, int n) {
    accel acc;
    accel_amp_scaler sc;
    float g[4];
    accel_tensor t;
    int i, f = -1;
    at_context = name;
    init_acc(&acc, ACCEL_PRECISION_FP16);
    AT_EQ_INT(accel_amp_scaler_init(&acc, &sc, d), ACCEL_OK);
    memset(&t, 0, sizeof t);
    t.ptr = g; t.dtype = ACCEL_F32; t.ndim = 1; t.shape[0] = 4;
    for (i = 0; i < n; ++i) {
        g[0] = 1; g[1] = 2; g[2] = pts[i].found ? NAN : 3; g[3] = 4;
        AT_EQ_INT(accel_amp_unscale_and_check(&sc, &t, 1, &f), ACCEL_OK);
        AT_EQ_INT(f, pts[i].found);
        AT_EQ_INT(accel_amp_update(&sc), ACCEL_OK);
        AT_EQ_INT(accel_amp_step_was_skipped(&sc), pts[i].found);
        AT_EQ_INT(acc.optimizer_step_was_skipped, pts[i].found);
        if (sc.scale != pts[i].scale || sc.growth_tracker != pts[i].tracker)
            fprintf(stderr, "%s step %d: scale %.9g tracker %d, expected %.9g %d\n", name, i, (double)sc.scale,
                    (int)sc.growth_tracker, (double)pts[i].scale, pts[i].tracker);
        AT_CHECK(sc.scale == pts[i].scale || (pts[i].scale != pts[i].scale && sc.scale != sc.scale));
        AT_EQ_INT(sc.growth_tracker, pts[i].tracker);
    }
    accel_shutdown(&acc);
    at_context = "";
}

static void test_scaler(void) {
    accel_amp_scaler_desc d;
    /* interval 3: growth exactly on the 3rd consecutive clean step; backoff resets the tracker */
    {
        static const traj_point p[] = {{0, 8, 1}, {0, 8, 2}, {0, 16, 0}, {0, 16, 1}, {1, 8, 0}, {0, 8, 1},
                                       {0, 8, 2}, {1, 4, 0}, {1, 2, 0}, {0, 2, 1}, {0, 2, 2}, {0, 4, 0}};
        memset(&d, 0, sizeof d);
        d.init_scale = 8; d.growth_interval = 3;
        run_traj("interval3", &d, p, (int)(sizeof p / sizeof p[0]));
    }
    /* growth that would overflow to Inf is suppressed, and the tracker still resets */
    {
        static const traj_point p[] = {{0, 1.7014118e38f, 1}, {0, 1.7014118e38f, 0}, {0, 1.7014118e38f, 1},
                                       {1, 8.507059e37f, 0}, {0, 8.507059e37f, 1}, {0, 1.7014118e38f, 0}};
        memset(&d, 0, sizeof d);
        d.init_scale = 1.7014118e38f; /* 2^127 */
        d.growth_interval = 2;
        run_traj("overflow", &d, p, (int)(sizeof p / sizeof p[0]));
    }
    /* no floor: the scale halves down through the subnormals to 0 (2^-150 rounds to even 0), then stays 0 */
    {
        static const traj_point p[] = {{1, 2.8025969e-45f, 0}, {1, 1.4012985e-45f, 0}, {1, 0.0f, 0}, {0, 0.0f, 1},
                                       {0, 0.0f, 0}, {1, 0.0f, 0}};
        memset(&d, 0, sizeof d);
        d.init_scale = 5.6051939e-45f; /* 4 * 2^-149 */
        d.growth_interval = 2;
        run_traj("to_zero", &d, p, (int)(sizeof p / sizeof p[0]));
    }
    /* growth/backoff factors are doubles applied to the float scale, rounded once to float: 10 * 1.1 */
    {
        static const traj_point p[] = {{0, 11.0f, 0}, {0, 12.1f, 0}, {1, 4.84f, 0}};
        memset(&d, 0, sizeof d);
        d.init_scale = 10; d.growth_factor = 1.1; d.backoff_factor = 0.4; d.growth_interval = 1;
        run_traj("factors", &d, p, (int)(sizeof p / sizeof p[0]));
    }
    /* static scale: never moves, found_inf still skips */
    {
        static const traj_point p[] = {{0, 1024, 0}, {1, 1024, 0}, {0, 1024, 0}};
        memset(&d, 0, sizeof d);
        d.init_scale = 1024; d.static_scale = 1; d.growth_interval = 1;
        run_traj("static", &d, p, (int)(sizeof p / sizeof p[0]));
    }
    /* Accelerate's defaults: growth on exactly the 2000th clean step */
    {
        accel acc;
        accel_amp_scaler sc;
        float g = 1.0f;
        accel_tensor t;
        int i, f;
        init_acc(&acc, ACCEL_PRECISION_FP16);
        AT_EQ_INT(accel_amp_scaler_init(&acc, &sc, NULL), ACCEL_OK);
        AT_NEAR(sc.scale, 65536.0, 0); AT_NEAR(sc.growth_factor, 2.0, 0); AT_NEAR(sc.backoff_factor, 0.5, 0);
        AT_EQ_INT(sc.growth_interval, 2000);
        memset(&t, 0, sizeof t);
        t.ptr = &g; t.dtype = ACCEL_F32; t.ndim = 0;
        for (i = 0; i < 1999; ++i) {
            accel_amp_unscale_and_check(&sc, &t, 1, &f);
            accel_amp_update(&sc);
        }
        AT_NEAR(sc.scale, 65536.0, 0);
        AT_EQ_INT(sc.growth_tracker, 1999);
        AT_EQ_INT(accel_amp_unscale_and_check(&sc, &t, 1, &f), ACCEL_OK);
        AT_EQ_INT(accel_amp_update(&sc), ACCEL_OK);
        AT_NEAR(sc.scale, 131072.0, 0);
        AT_EQ_INT(sc.growth_tracker, 0);
        AT_EQ_INT(acc.optimizer_steps, 0); /* counted by the core's accel_optimizer_step_done, not here */
        AT_EQ_INT(sc.steps, 2000);
        /* state errors, as torch */
        AT_EQ_INT(accel_amp_update(&sc), ACCEL_ERR_STATE);
        AT_CONTAINS(accel_last_error(&acc), "No inf checks");
        AT_EQ_INT(accel_amp_unscale_and_check(&sc, &t, 1, &f), ACCEL_OK);
        g = 8.0f;
        AT_EQ_INT(accel_amp_unscale_and_check(&sc, &t, 1, &f), ACCEL_ERR_STATE);
        AT_CONTAINS(accel_last_error(&acc), "already been called");
        AT_NEAR(g, 8.0, 0); /* the refused call changed nothing */
        AT_EQ_INT(accel_amp_update(&sc), ACCEL_OK);
        AT_EQ_INT(sc.growth_tracker, 1);

        /* checkpoint bytes: fixed little-endian layout, written out by hand */
        {
            uint8_t buf[64], want[ACCEL_AMP_SCALER_STATE_BYTES];
            size_t w = 0;
            accel_amp_scaler sc2;
            uint32_t sb = f_bits(131072.0f);
            uint64_t gb, bb;
            double gd = 2.0, bd = 0.5;
            int k;
            memcpy(&gb, &gd, 8); memcpy(&bb, &bd, 8);
            memcpy(want, "AMPS", 4);
            want[4] = 1; want[5] = want[6] = want[7] = 0;
            for (k = 0; k < 4; ++k) want[8 + k] = (uint8_t)(sb >> (8 * k));
            for (k = 0; k < 8; ++k) want[12 + k] = (uint8_t)(gb >> (8 * k));
            for (k = 0; k < 8; ++k) want[20 + k] = (uint8_t)(bb >> (8 * k));
            want[28] = 2000 & 0xff; want[29] = 2000 >> 8; want[30] = want[31] = 0;
            want[32] = 1; want[33] = want[34] = want[35] = 0;
            AT_EQ_INT(accel_amp_scaler_state_save(&sc, buf, sizeof buf, &w), ACCEL_OK);
            AT_EQ_INT(w, ACCEL_AMP_SCALER_STATE_BYTES);
            AT_CHECK(memcmp(buf, want, sizeof want) == 0);
            /* the core's state contract: no buffer, or one too small → the size, ACCEL_OK, nothing written */
            memset(buf, 0xee, sizeof buf);
            w = 0;
            AT_EQ_INT(accel_amp_scaler_state_save(&sc, buf, ACCEL_AMP_SCALER_STATE_BYTES - 1, &w), ACCEL_OK);
            AT_EQ_INT(w, ACCEL_AMP_SCALER_STATE_BYTES);
            AT_EQ_INT(buf[0], 0xee);
            w = 0;
            AT_EQ_INT(accel_amp_scaler_state_save(&sc, NULL, 0, &w), ACCEL_OK);
            AT_EQ_INT(w, ACCEL_AMP_SCALER_STATE_BYTES);
            AT_EQ_INT(accel_amp_scaler_state_save(&sc, buf, sizeof buf, NULL), ACCEL_ERR_INVALID_ARGUMENT);
            {
                /* the functions have the core's types: they register with the checkpointer as they are */
                accel_state_save_fn save_fn = accel_amp_scaler_state_save;
                accel_state_load_fn load_fn = accel_amp_scaler_state_load;
                w = 0;
                AT_EQ_INT(save_fn(&sc, buf, sizeof buf, &w), ACCEL_OK);
                AT_CHECK(w == ACCEL_AMP_SCALER_STATE_BYTES && memcmp(buf, want, sizeof want) == 0);
                AT_EQ_INT(load_fn(&sc, buf, w), ACCEL_OK);
            }
            memset(&d, 0, sizeof d);
            d.init_scale = 4; d.growth_interval = 7;
            AT_EQ_INT(accel_amp_scaler_init(&acc, &sc2, &d), ACCEL_OK);
            AT_EQ_INT(accel_amp_scaler_state_load(&sc2, want, sizeof want), ACCEL_OK);
            AT_NEAR(sc2.scale, 131072.0, 0);
            AT_EQ_INT(sc2.growth_interval, 2000);
            AT_EQ_INT(sc2.growth_tracker, 1);
            /* corrupt bytes are refused and change nothing */
            want[32] = 0xd0; want[33] = 0x07; /* tracker 2000 = interval */
            acc.last_error[0] = 0;
            AT_EQ_INT(accel_amp_scaler_state_load(&sc2, want, sizeof want), ACCEL_ERR_FORMAT);
            AT_CONTAINS(accel_last_error(&acc), "growth_tracker"); /* recorded in the scaler's Accelerator */
            want[32] = 1; want[33] = 0;
            want[0] = 'X';
            AT_EQ_INT(accel_amp_scaler_state_load(&sc2, want, sizeof want), ACCEL_ERR_FORMAT);
            want[0] = 'A';
            AT_EQ_INT(accel_amp_scaler_state_load(&sc2, want, sizeof want - 1), ACCEL_ERR_FORMAT);
            want[11] = 0xff; /* scale becomes NaN */
            AT_EQ_INT(accel_amp_scaler_state_load(&sc2, want, sizeof want), ACCEL_ERR_FORMAT);
            AT_NEAR(sc2.scale, 131072.0, 0);
            AT_EQ_INT(sc2.growth_tracker, 1);
        }
        accel_shutdown(&acc);
    }
    /* bad descriptors */
    {
        accel acc;
        accel_amp_scaler sc;
        init_acc(&acc, ACCEL_PRECISION_FP16);
        memset(&d, 0, sizeof d); d.growth_factor = 0.9;
        AT_EQ_INT(accel_amp_scaler_init(&acc, &sc, &d), ACCEL_ERR_INVALID_ARGUMENT);
        AT_CONTAINS(accel_last_error(&acc), "growth_factor");
        memset(&d, 0, sizeof d); d.backoff_factor = 1.5;
        AT_EQ_INT(accel_amp_scaler_init(&acc, &sc, &d), ACCEL_ERR_INVALID_ARGUMENT);
        memset(&d, 0, sizeof d); d.init_scale = -1;
        AT_EQ_INT(accel_amp_scaler_init(&acc, &sc, &d), ACCEL_ERR_INVALID_ARGUMENT);
        memset(&d, 0, sizeof d); d.growth_interval = -3;
        AT_EQ_INT(accel_amp_scaler_init(&acc, &sc, &d), ACCEL_ERR_INVALID_ARGUMENT);
        /* forcing it on in bf16 mode works; forcing it off in fp16 mode disables it */
        memset(&d, 0, sizeof d); d.enabled = ACCEL_OFF;
        AT_EQ_INT(accel_amp_scaler_init(&acc, &sc, &d), ACCEL_OK);
        AT_EQ_INT(sc.enabled, 0);
        accel_shutdown(&acc);
    }
    /* disabled scaler (bf16): loss scale 1, unscale is a no-op that finds nothing, steps are never skipped */
    {
        accel acc;
        accel_amp_scaler sc;
        float g[2] = {NAN, 3.0f};
        accel_tensor t;
        int f = -1;
        init_acc(&acc, ACCEL_PRECISION_BF16);
        AT_EQ_INT(accel_amp_scaler_init(&acc, &sc, NULL), ACCEL_OK);
        memset(&t, 0, sizeof t);
        t.ptr = g; t.dtype = ACCEL_F32; t.ndim = 1; t.shape[0] = 2;
        AT_NEAR(accel_amp_loss_scale(&sc), 1.0, 0);
        AT_EQ_INT(accel_amp_unscale_and_check(&sc, &t, 1, &f), ACCEL_OK);
        AT_EQ_INT(f, 0);
        AT_NEAR(g[1], 3.0, 0);
        AT_EQ_INT(accel_amp_update(&sc), ACCEL_OK);
        AT_EQ_INT(acc.optimizer_step_was_skipped, 0);
        memset(&d, 0, sizeof d); d.enabled = ACCEL_ON; d.init_scale = 4;
        AT_EQ_INT(accel_amp_scaler_init(&acc, &sc, &d), ACCEL_OK);
        AT_NEAR(accel_amp_loss_scale(&sc), 4.0, 0);
        accel_shutdown(&acc);
    }
}

/* The scaler is an object that remembers its Accelerator: methods take it alone, record errors there, and refuse
   (without crashing) when it was never initialized, failed to initialize or was deinitialized. */
static void test_scaler_object(void) {
    accel a1, a2;
    accel_amp_scaler sc, z;
    accel_amp_scaler_desc d;
    float g[3] = {2, 4, 8};
    accel_tensor t;
    int f = -1;
    size_t w = 0;
    init_acc(&a1, ACCEL_PRECISION_FP16);
    init_acc(&a2, ACCEL_PRECISION_FP16);
    memset(&t, 0, sizeof t);
    t.ptr = g; t.dtype = ACCEL_F32; t.ndim = 1; t.shape[0] = 3;
    AT_EQ_INT(accel_amp_scaler_init(&a2, &sc, NULL), ACCEL_OK);
    AT_CHECK(sc.acc == &a2);
    /* errors land in the scaler's Accelerator, not in another one */
    a1.last_error[0] = 0; a2.last_error[0] = 0;
    AT_EQ_INT(accel_amp_update(&sc), ACCEL_ERR_STATE);
    AT_CONTAINS(accel_last_error(&a2), "No inf checks");
    AT_EQ_INT(a1.last_error[0], 0);
    AT_EQ_INT(accel_amp_unscale_and_check(&sc, &t, 1, &f), ACCEL_OK);
    AT_NEAR(g[2], 8.0 / 65536.0, 0);
    AT_EQ_INT(accel_amp_update(&sc), ACCEL_OK);
    AT_EQ_INT(a2.optimizer_step_was_skipped, 0);
    /* deinit: zeroes, is idempotent and NULL-safe; a deinitialized scaler is refused, not used */
    accel_amp_scaler_deinit(&sc);
    accel_amp_scaler_deinit(&sc);
    accel_amp_scaler_deinit(NULL);
    AT_CHECK(sc.acc == NULL);
    g[0] = 2;
    AT_EQ_INT(accel_amp_unscale_and_check(&sc, &t, 1, &f), ACCEL_ERR_STATE);
    AT_CONTAINS(accel_last_error(NULL), "not initialized");
    AT_NEAR(g[0], 2.0, 0);
    AT_EQ_INT(accel_amp_update(&sc), ACCEL_ERR_STATE);
    AT_EQ_INT(accel_amp_unscale_and_check(NULL, &t, 1, &f), ACCEL_ERR_INVALID_ARGUMENT);
    AT_EQ_INT(accel_amp_update(NULL), ACCEL_ERR_INVALID_ARGUMENT);
    AT_NEAR(accel_amp_loss_scale(NULL), 1.0, 0);
    AT_EQ_INT(accel_amp_scaler_state_save(NULL, NULL, 0, &w), ACCEL_ERR_INVALID_ARGUMENT);
    AT_EQ_INT(accel_amp_scaler_state_load(NULL, "AMPS", 4), ACCEL_ERR_INVALID_ARGUMENT);
    /* a failed init leaves a zeroed scaler behind (deinit-safe, refused by the methods) */
    memset(&z, 0x5a, sizeof z);
    memset(&d, 0, sizeof d);
    d.backoff_factor = 2.0;
    AT_EQ_INT(accel_amp_scaler_init(&a1, &z, &d), ACCEL_ERR_INVALID_ARGUMENT);
    AT_CHECK(z.acc == NULL && z.enabled == 0);
    AT_EQ_INT(accel_amp_update(&z), ACCEL_ERR_STATE);
    accel_amp_scaler_deinit(&z);
    /* enabled is an accel_toggle: anything else is refused */
    memset(&d, 0, sizeof d);
    d.enabled = (accel_toggle)7;
    AT_EQ_INT(accel_amp_scaler_init(&a1, &z, &d), ACCEL_ERR_INVALID_ARGUMENT);
    AT_CONTAINS(accel_last_error(&a1), "enabled=7");
    accel_shutdown(&a1);
    accel_shutdown(&a2);
}

/* Several processes and no host process group (an explicit 2-process layout without MPI: what torchrun without MPI
   looks like before a collectives context installs itself): found_inf cannot be OR-ed, so unscale_and_check fails
   clearly with nothing changed, unless desc.local_found_inf. */
static void test_unscale_without_host_group(void) {
    accel acc;
    accel_desc dd;
    accel_amp_scaler sc;
    accel_amp_scaler_desc d;
    float g[2] = {4, 8};
    accel_tensor t;
    int f = -1;
    memset(&dd, 0, sizeof dd);
    dd.num_processes = 2;
    dd.process_index = 0;
    dd.cpu = 1;
    dd.no_mpi = 1;
    dd.mixed_precision = ACCEL_PRECISION_FP16;
    dd.log_fn = quiet_log;
    AT_EQ_INT(accel_init(&acc, &dd), ACCEL_OK);
    AT_EQ_INT(acc.num_processes, 2);
    AT_CHECK(strcmp(accel_host_group_name(&acc), "none") == 0);
    memset(&t, 0, sizeof t);
    t.ptr = g; t.dtype = ACCEL_F32; t.ndim = 1; t.shape[0] = 2;
    AT_EQ_INT(accel_amp_scaler_init(&acc, &sc, NULL), ACCEL_OK);
    AT_EQ_INT(accel_amp_unscale_and_check(&sc, &t, 1, &f), ACCEL_ERR_UNSUPPORTED);
    AT_CONTAINS(accel_last_error(&acc), "no host process group");
    AT_CONTAINS(accel_last_error(&acc), "local_found_inf");
    AT_NEAR(g[0], 4.0, 0); AT_NEAR(g[1], 8.0, 0); /* nothing changed */
    AT_EQ_INT(sc.unscaled, 0);
    AT_EQ_INT(f, 0);
    memset(&d, 0, sizeof d);
    d.local_found_inf = 1;
    d.init_scale = 4;
    AT_EQ_INT(accel_amp_scaler_init(&acc, &sc, &d), ACCEL_OK);
    AT_EQ_INT(accel_amp_unscale_and_check(&sc, &t, 1, &f), ACCEL_OK);
    AT_NEAR(g[0], 1.0, 0); AT_NEAR(g[1], 2.0, 0);
    AT_EQ_INT(accel_amp_update(&sc), ACCEL_OK);
    /* sharded clipping needs the group too: refused with nothing changed */
    AT_EQ_INT(accel_amp_clip_grad_norm(&acc, &t, 1, 0.1, 2.0, ACCEL_AMP_CLIP_SHARDED, NULL), ACCEL_ERR_UNSUPPORTED);
    AT_NEAR(g[0], 1.0, 0);
    accel_amp_scaler_deinit(&sc);
    accel_shutdown(&acc);
}

/* ------------------------------------------------------------------------------------- unscale_and_check */
static void fill_list(float *a, uint16_t *b, uint16_t *c, size_t na, size_t nb, size_t nc) {
    size_t i;
    for (i = 0; i < na; ++i) a[i] = rndf(-70000.0f, 70000.0f);
    for (i = 0; i < nb; ++i) b[i] = accel_f32_to_f16(rndf(-60000.0f, 60000.0f));
    for (i = 0; i < nc; ++i) c[i] = accel_f32_to_bf16(rndf(-1e30f, 1e30f));
}

static void test_unscale(void) {
    enum { NA = 1031, NB = 257, NC = 64 };
    static float a[NA], a0[NA];
    static uint16_t b[NB], b0[NB], c[NC], c0[NC];
    static const float scales[] = {65536.0f, 3.0f, 1.0f, 1e-3f, 7.0e37f};
    accel_tensor t[4];
    size_t i, si;
    int f, where, buf, bad;
    accel acc;
    accel_amp_scaler sc;
    accel_amp_scaler_desc d;
    init_acc(&acc, ACCEL_PRECISION_FP16);
    memset(t, 0, sizeof t);
    t[0].ptr = a; t[0].dtype = ACCEL_F32; t[0].ndim = 1; t[0].shape[0] = NA; t[0].name = "a";
    t[1].ptr = b; t[1].dtype = ACCEL_F16; t[1].ndim = 1; t[1].shape[0] = NB;
    t[2].ptr = NULL; t[2].dtype = ACCEL_F32; t[2].ndim = 1; t[2].shape[0] = 0;
    t[3].ptr = c; t[3].dtype = ACCEL_BF16; t[3].ndim = 2; t[3].shape[0] = 8; t[3].shape[1] = 8;
    /* values: x * (float)(1/(double)scale), computed in float (torch); 16-bit buffers rounded back with RNE */
    for (si = 0; si < sizeof scales / sizeof scales[0]; ++si) {
        float inv = (float)(1.0 / (double)scales[si]);
        memset(&d, 0, sizeof d);
        d.init_scale = scales[si];
        AT_EQ_INT(accel_amp_scaler_init(&acc, &sc, &d), ACCEL_OK);
        fill_list(a, b, c, NA, NB, NC);
        a[5] = FLT_MAX; a[6] = -FLT_MAX; a[7] = FLT_MIN; b[3] = 0x7bff; c[3] = 0x7f7f; /* large finite: no false positive */
        memcpy(a0, a, sizeof a); memcpy(b0, b, sizeof b); memcpy(c0, c, sizeof c);
        AT_EQ_INT(accel_amp_unscale_and_check(&sc, t, 4, &f), ACCEL_OK);
        AT_EQ_INT(f, 0);
        bad = 0;
        for (i = 0; i < NA; ++i) { volatile float e = a0[i] * inv; bad += f_bits(a[i]) != f_bits(scales[si] == 1.0f ? a0[i] : e); }
        for (i = 0; i < NB; ++i) bad += b[i] != ref_f32_to_f16((float)ref_decode(b0[i], 10, 15) * inv);
        for (i = 0; i < NC; ++i) bad += c[i] != ref_f32_to_bf16((float)ref_decode(c0[i], 7, 127) * inv);
        AT_EQ_INT(bad, 0);
        AT_EQ_INT(accel_amp_update(&sc), ACCEL_OK);
    }
    /* a NaN / +Inf / -Inf at the first, a middle or the last element of any buffer is found */
    for (buf = 0; buf < 3; ++buf)
        for (where = 0; where < 3; ++where) {
            int kind;
            for (kind = 0; kind < 3; ++kind) {
                size_t n = buf == 0 ? NA : buf == 1 ? NB : NC;
                size_t pos = where == 0 ? 0 : where == 1 ? n / 2 : n - 1;
                AT_EQ_INT(accel_amp_scaler_init(&acc, &sc, NULL), ACCEL_OK);
                fill_list(a, b, c, NA, NB, NC);
                if (buf == 0) a[pos] = kind == 0 ? NAN : kind == 1 ? INFINITY : -INFINITY;
                else if (buf == 1) b[pos] = kind == 0 ? 0x7e01 : kind == 1 ? 0x7c00 : 0xfc00;
                else c[pos] = kind == 0 ? 0xffc1 : kind == 1 ? 0x7f80 : 0xff80;
                f = -1;
                AT_EQ_INT(accel_amp_unscale_and_check(&sc, t, 4, &f), ACCEL_OK);
                AT_EQ_INT(f, 1);
                AT_EQ_INT(accel_amp_update(&sc), ACCEL_OK);
                AT_EQ_INT(sc.step_was_skipped, 1);
                AT_NEAR(sc.scale, 32768.0, 0);
            }
        }
    /* a bad list is refused before anything is touched */
    AT_EQ_INT(accel_amp_scaler_init(&acc, &sc, NULL), ACCEL_OK);
    memcpy(a0, a, sizeof a);
    t[2].dtype = ACCEL_F64;
    AT_EQ_INT(accel_amp_unscale_and_check(&sc, t, 4, &f), ACCEL_ERR_INVALID_ARGUMENT);
    AT_CONTAINS(accel_last_error(&acc), "F64");
    AT_CHECK(memcmp(a, a0, sizeof a) == 0);
    t[2].dtype = ACCEL_F32;
    t[1].ptr = NULL;
    AT_EQ_INT(accel_amp_unscale_and_check(&sc, t, 4, &f), ACCEL_ERR_INVALID_ARGUMENT);
    AT_EQ_INT(accel_amp_unscale_and_check(&sc, NULL, 2, &f), ACCEL_ERR_INVALID_ARGUMENT);
    AT_EQ_INT(sc.unscaled, 0);
    accel_shutdown(&acc);
}

/* ------------------------------------------------------------------------------------------ clipping */
static double ref_norm(float *const *bufs, const size_t *ns, int nb, double p) {
    double s = 0.0;
    int k;
    size_t i;
    for (k = 0; k < nb; ++k)
        for (i = 0; i < ns[k]; ++i) {
            double a = fabs((double)bufs[k][i]);
            if (isinf(p)) s = a > s ? a : s;
            else s += pow(a, p);
        }
    return isinf(p) ? s : pow(s, 1.0 / p);
}

static void test_clip(void) {
    enum { NB = 12 };
    float *bufs[NB], *orig[NB];
    size_t ns[NB];
    accel_tensor t[NB];
    static const double ps[] = {2.0, 1.0, 3.0, INFINITY};
    static const double maxes[] = {0.7, 1e9}; /* 0.7: not a power of two, so the coefficient's formula matters */
    int k, pi, mi, bad;
    size_t i;
    memset(t, 0, sizeof t);
    for (k = 0; k < NB; ++k) {
        ns[k] = (size_t)(k * 997 % 3001) + (size_t)k;
        bufs[k] = (float *)malloc((ns[k] + 1) * 4);
        orig[k] = (float *)malloc((ns[k] + 1) * 4);
        for (i = 0; i < ns[k]; ++i) orig[k][i] = rndf(-2.0f, 2.0f) * (float)(k + 1);
        t[k].ptr = bufs[k]; t[k].dtype = ACCEL_F32; t[k].ndim = 1; t[k].shape[0] = (int64_t)ns[k];
    }
    for (pi = 0; pi < 4; ++pi)
        for (mi = 0; mi < 2; ++mi) {
            double total = -1, ref, p = ps[pi];
            float coef;
            for (k = 0; k < NB; ++k) memcpy(bufs[k], orig[k], ns[k] * 4);
            ref = ref_norm(orig, ns, NB, p);
            AT_EQ_INT(accel_amp_clip_grad_norm(&g_acc, t, NB, maxes[mi], isinf(p) ? HUGE_VAL : p, 0, &total), ACCEL_OK);
            AT_NEAR(total, ref, ref * 1e-12);
            /* torch: clip_coef = max_norm / (total + 1e-6) in float32 (the reciprocal, then times max_norm), clamped */
            coef = (1.0f / ((float)total + 1e-6f)) * (float)maxes[mi];
            if (coef > 1.0f) coef = 1.0f;
            bad = 0;
            for (k = 0; k < NB; ++k)
                for (i = 0; i < ns[k]; ++i) bad += bufs[k][i] != orig[k][i] * coef;
            AT_EQ_INT(bad, 0);
            if (mi == 0) {
                double after = 0;
                AT_EQ_INT(accel_amp_grad_norm(&g_acc, t, NB, isinf(p) ? HUGE_VAL : p, 0, &after), ACCEL_OK);
                AT_NEAR(after, maxes[mi], 1e-5);
            }
        }
    /* 16-bit gradients: the norm of the decoded values; scaling rounds back with RNE */
    {
        uint16_t h[300], hb[300];
        float dec[300], decb[300];
        float *two[2];
        size_t n2[2] = {300, 300};
        accel_tensor t2[2];
        double total, ref;
        float coef;
        memset(t2, 0, sizeof t2);
        for (i = 0; i < 300; ++i) {
            h[i] = accel_f32_to_f16(rndf(-3, 3)); dec[i] = accel_f16_to_f32(h[i]);
            hb[i] = accel_f32_to_bf16(rndf(-3, 3)); decb[i] = accel_bf16_to_f32(hb[i]);
        }
        two[0] = dec; two[1] = decb;
        ref = ref_norm(two, n2, 2, 2.0);
        t2[0].ptr = h; t2[0].dtype = ACCEL_F16; t2[0].ndim = 1; t2[0].shape[0] = 300;
        t2[1].ptr = hb; t2[1].dtype = ACCEL_BF16; t2[1].ndim = 1; t2[1].shape[0] = 300;
        AT_EQ_INT(accel_amp_clip_grad_norm(&g_acc, t2, 2, 1.0, 2.0, 0, &total), ACCEL_OK);
        AT_NEAR(total, ref, ref * 1e-12);
        coef = (1.0f / ((float)total + 1e-6f)) * 1.0f;
        bad = 0;
        for (i = 0; i < 300; ++i) {
            bad += h[i] != ref_f32_to_f16(dec[i] * coef);
            bad += hb[i] != ref_f32_to_bf16(decb[i] * coef);
        }
        AT_EQ_INT(bad, 0);
    }
    /* non-finite totals, as torch: NaN → every gradient NaN; Inf → coef 0; error_if_nonfinite → error, no change */
    {
        float g[4] = {1, NAN, 2, 3}, g2[4] = {1, INFINITY, 2, -3};
        accel_tensor t1;
        double total = 0;
        memset(&t1, 0, sizeof t1);
        t1.ptr = g; t1.dtype = ACCEL_F32; t1.ndim = 1; t1.shape[0] = 4;
        AT_EQ_INT(accel_amp_clip_grad_norm(&g_acc, &t1, 1, 1.0, 2.0, ACCEL_AMP_CLIP_ERROR_IF_NONFINITE, &total), ACCEL_ERR_STATE);
        AT_CHECK(isnan(total));
        AT_CONTAINS(accel_last_error(&g_acc), "non-finite");
        AT_NEAR(g[0], 1.0, 0);
        AT_EQ_INT(accel_amp_clip_grad_norm(&g_acc, &t1, 1, 1.0, HUGE_VAL, 0, &total), ACCEL_OK);
        AT_CHECK(isnan(total));
        AT_CHECK(isnan(g[0]) && isnan(g[2]) && isnan(g[3]));
        t1.ptr = g2;
        AT_EQ_INT(accel_amp_clip_grad_norm(&g_acc, &t1, 1, 1.0, 2.0, 0, &total), ACCEL_OK);
        AT_CHECK(isinf(total));
        AT_CHECK(g2[0] == 0.0f && isnan(g2[1]) && g2[2] == 0.0f && g2[3] == 0.0f && signbit(g2[3]));
        AT_EQ_INT(accel_amp_clip_grad_norm(&g_acc, &t1, 1, 1.0, 0.0, 0, &total), ACCEL_ERR_INVALID_ARGUMENT);
        AT_EQ_INT(accel_amp_clip_grad_norm(&g_acc, NULL, 0, 1.0, 2.0, 0, &total), ACCEL_OK);
        AT_NEAR(total, 0.0, 0);
    }
    /* clip_grad_value_: clamp, NaN stays */
    {
        float g[6] = {-5, -0.5f, 0.25f, 7, NAN, -INFINITY};
        uint16_t hb[3];
        accel_tensor t2[2];
        memset(t2, 0, sizeof t2);
        hb[0] = accel_f32_to_bf16(3.0f); hb[1] = accel_f32_to_bf16(-0.125f); hb[2] = 0x7fc0;
        t2[0].ptr = g; t2[0].dtype = ACCEL_F32; t2[0].ndim = 1; t2[0].shape[0] = 6;
        t2[1].ptr = hb; t2[1].dtype = ACCEL_BF16; t2[1].ndim = 1; t2[1].shape[0] = 3;
        AT_EQ_INT(accel_amp_clip_grad_value(&g_acc, t2, 2, 1.0), ACCEL_OK);
        AT_NEAR(g[0], -1, 0); AT_NEAR(g[1], -0.5, 0); AT_NEAR(g[2], 0.25, 0); AT_NEAR(g[3], 1, 0);
        AT_CHECK(isnan(g[4])); AT_NEAR(g[5], -1, 0);
        AT_EQ_INT(hb[0], 0x3f80); AT_EQ_INT(hb[1], accel_f32_to_bf16(-0.125f)); AT_EQ_INT(hb[2], 0x7fff);
        AT_EQ_INT(accel_amp_clip_grad_value(&g_acc, t2, 2, -1.0), ACCEL_ERR_INVALID_ARGUMENT);
    }
    for (k = 0; k < NB; ++k) { free(bufs[k]); free(orig[k]); }
}

int main(void) {
    init_acc(&g_acc, ACCEL_PRECISION_FP16);
    test_policy();
    test_exhaustive16();
    test_boundaries();
    test_buffers();
    test_stochastic();
    test_scaler();
    test_scaler_object();
    test_unscale_without_host_group();
    test_unscale();
    test_clip();
    accel_shutdown(&g_acc);
    return at_finish("amp_unit");
}
