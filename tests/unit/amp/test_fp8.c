/* Unit tests of accel_amp.h's fp8 on the CPU, against independent long-hand float64 references (fp8_ref.h for the
   formats, amp_ref.h for the 16-bit decodes, and a float64 statement of Transformer Engine's delayed-scaling rule
   written below):
   - every fp8 code decoded (both formats, to fp32 / bf16 / fp16); every bf16 and fp16 pattern encoded; fp32 inputs
     stratified over every exponent and sign with the rounding boundaries of both formats, every fp8 midpoint and
     threshold ±3 ulps, and random patterns (the 2^32 sweep is test_fp8_cuda_host.cu --all-fp32);
   - buffer conversions (accel_amp_convert, the vectorized loops) for every dtype pair;
   - the fp8 object: defaults (Accelerate's FP8RecipeKwargs) and ACCELERATE_FP8_* overrides, fused cast + amax
     (fp32 / bf16 / fp16 sources, satfinite and not, slots, specials), dequantize, argument errors;
   - recipe trajectories (spikes, zeros, Inf, NaN, tiny and huge amaxes; max / most_recent; history 1, 3, 16, 1024;
     margins; HYBRID / E4M3) step by step against the float64 statement, history layout included;
   - the state contract (size query, round trip, every corruption refused with nothing changed);
   - policy "fp8" and ACCELERATE_MIXED_PRECISION=fp8; update without a host process group. */
#include "accel.h"
#include "accel_amp.h"
#include "accel_test.h"
#include "amp_ref.h"
#include "fp8_ref.h"
#include <float.h>
#include <stdint.h>
#include <stdlib.h>

static void quiet_log(void *user, accel_log_level level, const char *msg) { (void)user; (void)level; (void)msg; }

static void init_acc(accel *acc, accel_precision p) {
    accel_desc d;
    memset(&d, 0, sizeof d);
    d.cpu = 1;
    d.no_mpi = 1;
    d.mixed_precision = p;
    d.log_fn = quiet_log;
    if (accel_init(acc, &d) != ACCEL_OK) {
        fprintf(stderr, "accel_init failed: %s\n", accel_last_error(acc));
        exit(1);
    }
}

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static uint32_t rnd32(void) {
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}
static float rndf(float lo, float hi) { return lo + (hi - lo) * (float)(rnd32() >> 8) * (1.0f / 16777216.0f); }

static accel_tensor tens(void *p, accel_dtype t, int64_t n) {
    accel_tensor x;
    memset(&x, 0, sizeof x);
    x.ptr = p; x.dtype = t; x.ndim = 1; x.shape[0] = n;
    return x;
}

/* ---------------------------------------------------------------------------------------- element codecs */
static void test_decode_all(void) {
    int x, e5, bad = 0, badh = 0;
    for (e5 = 0; e5 < 2; ++e5) {
        fp8_fmt fm = e5 ? FP8_E5M2 : FP8_E4M3;
        for (x = 0; x < 256; ++x) {
            double r = ref8_decode((uint8_t)x, fm);
            float f = accel_amp_fp8_to_f32((uint8_t)x, e5);
            if (isnan(r)) { if (ref8_f_bits(f) != 0x7fffffffu) bad++; }
            else if ((double)f != r || (signbit(f) != 0) != (signbit(r) != 0)) bad++;
            /* bf16 and fp16 of the value: exact (the grids contain every fp8 value), NaN → 0x7FFF */
            if (isnan(r)) { if (accel_f32_to_bf16(f) != 0x7fff || accel_f32_to_f16(f) != 0x7fff) badh++; }
            else if (ref_f32_to_bf16((float)r) != accel_f32_to_bf16(f) || ref_f32_to_f16((float)r) != accel_f32_to_f16(f)) badh++;
        }
    }
    AT_EQ_INT(bad, 0);
    AT_EQ_INT(badh, 0);
    /* named values */
    AT_EQ_INT(accel_amp_f32_to_e4m3(448.0f, 0), 0x7e);
    AT_EQ_INT(accel_amp_f32_to_e5m2(57344.0f, 0), 0x7b);
    AT_NEAR(accel_amp_e4m3_to_f32(0x01), ldexp(1.0, -9), 0);
    AT_NEAR(accel_amp_e5m2_to_f32(0x01), ldexp(1.0, -16), 0);
    AT_CHECK(isinf(accel_amp_e5m2_to_f32(0xfc)) && accel_amp_e5m2_to_f32(0xfc) < 0);
    AT_CHECK(isnan(accel_amp_e4m3_to_f32(0xff)) && isnan(accel_amp_e4m3_to_f32(0x7f)));
    AT_NEAR(accel_amp_e4m3_to_f32(0xfe), -448.0, 0); /* E4M3 has no Inf: 0x7E/0xFE are the largest */
}

static int check_f32(uint32_t u, int *shown) {
    float f = ref8_bits_f(u);
    int e5, sat, bad = 0;
    for (e5 = 0; e5 < 2; ++e5)
        for (sat = 0; sat < 2; ++sat) {
            uint8_t want = ref8_from_double((double)f, e5 ? FP8_E5M2 : FP8_E4M3, sat);
            uint8_t got = accel_amp_f32_to_fp8(f, e5, sat);
            if (got != want) {
                bad++;
                if ((*shown)++ < 8)
                    fprintf(stderr, "fp32 %08x (%g) e5m2=%d sat=%d: accel %02x, reference %02x\n", u, (double)f, e5, sat,
                            got, want);
            }
        }
    return bad;
}

static void test_encode_fp32(void) {
    size_t cap = 400000, n, i;
    uint32_t *set = (uint32_t *)malloc(cap * sizeof *set);
    long bad = 0, count = 0;
    int shown = 0, e5, x, d;
    n = ref_boundary_set(set, cap); /* every exponent and sign, mantissas around every rounding position */
    AT_CHECK(n > 200000);
    for (i = 0; i < n; ++i, ++count) bad += check_f32(set[i], &shown);
    /* every fp8 value and the midpoint to its neighbour, ±3 ulps, both signs */
    for (e5 = 0; e5 < 2; ++e5) {
        fp8_fmt fm = e5 ? FP8_E5M2 : FP8_E4M3;
        for (x = 0; x < 0x7f; ++x) {
            double v = ref8_decode((uint8_t)x, fm), w = ldexp(1.0, 20), pts[2];
            int p;
            if (isnan(v) || isinf(v)) continue;
            if (x + 1 < 0x7f && !isnan(ref8_decode((uint8_t)(x + 1), fm)) && !isinf(ref8_decode((uint8_t)(x + 1), fm)))
                w = ref8_decode((uint8_t)(x + 1), fm);
            else /* past the largest: the next grid point of the unbounded grid */
                w = v + ldexp(1.0, ilogb(v) - fm.mbits);
            pts[0] = v; pts[1] = (v + w) / 2;
            for (p = 0; p < 2; ++p)
                for (d = -3; d <= 3; ++d) {
                    uint32_t u = ref8_f_bits((float)pts[p]);
                    uint32_t t = (uint32_t)((int64_t)u + d);
                    if (pts[p] == 0.0 && d < 0) continue;
                    bad += check_f32(t, &shown); bad += check_f32(t | 0x80000000u, &shown);
                    count += 2;
                }
        }
    }
    /* thresholds named in the header */
    {
        static const float th[] = {448.0f, 464.0f, 480.0f, 57344.0f, 61440.0f, 65536.0f, 0x1p-10f, 0x1p-17f, 0x1p-6f,
                                   0x1p-14f, 0x1p-9f, 0x1p-16f, 1.0f, FLT_MAX, FLT_MIN, 1e-45f};
        for (i = 0; i < sizeof th / sizeof th[0]; ++i)
            for (d = -5; d <= 5; ++d) {
                uint32_t t = (uint32_t)((int64_t)ref8_f_bits(th[i]) + d);
                bad += check_f32(t, &shown); bad += check_f32(t | 0x80000000u, &shown);
                count += 2;
            }
    }
    /* random patterns and random values in the fp8 ranges */
    for (i = 0; i < 3000000; ++i, ++count) bad += check_f32(rnd32() ^ (rnd32() << 16), &shown);
    for (i = 0; i < 1000000; ++i, ++count) bad += check_f32(ref8_f_bits(rndf(-70000.0f, 70000.0f)), &shown);
    for (i = 0; i < 1000000; ++i, ++count) bad += check_f32(ref8_f_bits(rndf(-0.02f, 0.02f)), &shown);
    AT_EQ_INT(bad, 0);
    AT_CHECK(count > 5000000);
    /* the rules stated in the header, by example */
    AT_EQ_INT(accel_amp_f32_to_e4m3(NAN, 1), 0x7f);
    AT_EQ_INT(accel_amp_f32_to_e4m3(-NAN, 0), 0x7f);         /* sign dropped */
    AT_EQ_INT(accel_amp_f32_to_e5m2(-NAN, 1), 0x7f);
    AT_EQ_INT(accel_amp_f32_to_e4m3(-INFINITY, 1), 0xfe);    /* satfinite: Inf → -448 */
    AT_EQ_INT(accel_amp_f32_to_e4m3(-INFINITY, 0), 0xff);    /* no Inf in E4M3: sign|NaN */
    AT_EQ_INT(accel_amp_f32_to_e5m2(INFINITY, 0), 0x7c);
    AT_EQ_INT(accel_amp_f32_to_e4m3(464.0f, 0), 0x7e);       /* the tie rounds to even 448 */
    AT_EQ_INT(accel_amp_f32_to_e4m3(464.00003f, 0), 0x7f);   /* just above: overflow */
    AT_EQ_INT(accel_amp_f32_to_e5m2(61440.0f, 0), 0x7c);     /* the tie rounds to the (odd-free) Inf */
    AT_EQ_INT(accel_amp_f32_to_e5m2(61440.0f, 1), 0x7b);
    AT_EQ_INT(accel_amp_f32_to_e4m3(-0x1p-10f, 1), 0x80);    /* half the smallest subnormal: -0 */
    AT_EQ_INT(accel_amp_f32_to_e4m3(0x1.000002p-10f, 1), 0x01);
    free(set);
}

static void test_encode_16(void) {
    uint32_t h;
    long bad = 0;
    int e5, sat;
    for (h = 0; h < 65536; ++h) {
        double vb = ref_decode((uint16_t)h, 7, 127), vh = ref_decode((uint16_t)h, 10, 15);
        for (e5 = 0; e5 < 2; ++e5)
            for (sat = 0; sat < 2; ++sat) {
                fp8_fmt fm = e5 ? FP8_E5M2 : FP8_E4M3;
                bad += accel_amp_f32_to_fp8(accel_bf16_to_f32((uint16_t)h), e5, sat) != ref8_from_double(vb, fm, sat);
                bad += accel_amp_f32_to_fp8(accel_f16_to_f32((uint16_t)h), e5, sat) != ref8_from_double(vh, fm, sat);
            }
    }
    AT_EQ_INT(bad, 0);
}

/* ------------------------------------------------------------------------------------------ buffer convert */
/* the value of element i of a buffer, from the references (NaN → NAN) */
static double ref_value(const void *p, accel_dtype t, size_t i) {
    switch (t) {
    case ACCEL_F32: return (double)((const float *)p)[i];
    case ACCEL_BF16: return ref_decode(((const uint16_t *)p)[i], 7, 127);
    case ACCEL_F16: return ref_decode(((const uint16_t *)p)[i], 10, 15);
    case ACCEL_F8_E4M3: return ref8_decode(((const uint8_t *)p)[i], FP8_E4M3);
    default: return ref8_decode(((const uint8_t *)p)[i], FP8_E5M2);
    }
}
/* the expected bits of converting value v to t (fp8 saturating; 16-bit NaN → 0x7FFF, fp32 NaN → 0x7FFFFFFF) */
static uint32_t ref_store_bits(double v, accel_dtype t) {
    switch (t) {
    case ACCEL_F32: return isnan(v) ? 0x7fffffffu : ref8_f_bits((float)v);
    case ACCEL_BF16: return ref_f32_to_bf16((float)v);
    case ACCEL_F16: return ref_f32_to_f16((float)v);
    case ACCEL_F8_E4M3: return ref8_from_double(v, FP8_E4M3, 1);
    default: return ref8_from_double(v, FP8_E5M2, 1);
    }
}
static uint32_t get_bits(const void *p, accel_dtype t, size_t i) {
    size_t es = accel_dtype_size(t);
    if (es == 4) return ((const uint32_t *)p)[i];
    if (es == 2) return ((const uint16_t *)p)[i];
    return ((const uint8_t *)p)[i];
}

static void test_convert_buffers(void) {
    static const accel_dtype ts[] = {ACCEL_F32, ACCEL_BF16, ACCEL_F16, ACCEL_F8_E4M3, ACCEL_F8_E5M2};
    accel acc;
    size_t n = 1000 + 37, i, a, b;
    float *f = (float *)malloc(n * 4);
    unsigned char *src = (unsigned char *)malloc(n * 4), *dst = (unsigned char *)malloc(n * 4);
    long bad = 0;
    init_acc(&acc, ACCEL_PRECISION_NO);
    for (i = 0; i < n; ++i) f[i] = (i % 3) ? rndf(-500.0f, 500.0f) : rndf(-0.05f, 0.05f);
    f[1] = NAN; f[2] = INFINITY; f[4] = -INFINITY; f[5] = 70000.0f; f[7] = -1e-30f; f[8] = 0.0f; f[10] = -0.0f;
    for (a = 0; a < 5; ++a)
        for (b = 0; b < 5; ++b) {
            /* the source buffer: f converted to ts[a] by the reference */
            for (i = 0; i < n; ++i) {
                uint32_t v = ref_store_bits((double)f[i], ts[a]);
                if (ts[a] == ACCEL_F32) ((float *)src)[i] = f[i];
                else if (accel_dtype_size(ts[a]) == 2) ((uint16_t *)src)[i] = (uint16_t)v;
                else src[i] = (uint8_t)v;
            }
            memset(dst, 0xab, n * 4);
            AT_EQ_INT(accel_amp_convert(&acc, src, ts[a], dst, ts[b], n, NULL), ACCEL_OK);
            for (i = 0; i < n; ++i) {
                double v = ref_value(src, ts[a], i);
                uint32_t want = ts[a] == ts[b] ? get_bits(src, ts[a], i) : ref_store_bits(v, ts[b]);
                uint32_t got = get_bits(dst, ts[b], i);
                if (ts[b] == ACCEL_F32 && isnan(v)) { bad += !isnan(((float *)dst)[i]); continue; }
                if (got != want) {
                    if (bad < 5) fprintf(stderr, "convert %s -> %s [%zu]: %x vs %x\n", accel_dtype_name(ts[a]),
                                         accel_dtype_name(ts[b]), i, got, want);
                    bad++;
                }
            }
        }
    AT_EQ_INT(bad, 0);
    AT_EQ_INT(accel_amp_convert(&acc, src, ACCEL_I32, dst, ACCEL_F8_E4M3, n, NULL), ACCEL_ERR_INVALID_ARGUMENT);
    AT_CONTAINS(accel_last_error(&acc), "F8_E4M3");
    accel_shutdown(&acc);
    free(f); free(src); free(dst);
}

/* ------------------------------------------------------------------------------------------ the fp8 object */
static void clear_fp8_env(void) {
    unsetenv("ACCELERATE_FP8_FORMAT");
    unsetenv("ACCELERATE_FP8_AMAX_COMPUTE_ALGO");
    unsetenv("ACCELERATE_FP8_AMAX_HISTORY_LEN");
    unsetenv("ACCELERATE_FP8_MARGIN");
}

static void test_init(void) {
    accel acc;
    accel_amp_fp8 f;
    accel_amp_fp8_desc d;
    init_acc(&acc, ACCEL_PRECISION_FP8);
    clear_fp8_env();
    memset(&d, 0, sizeof d);
    AT_EQ_INT(accel_amp_fp8_init(&acc, &f, &d), ACCEL_ERR_INVALID_ARGUMENT); /* no slots */
    AT_CONTAINS(accel_last_error(&acc), "num_forward");
    AT_CHECK(f.acc == NULL);
    accel_amp_fp8_deinit(&f); /* zeroed: safe */
    AT_EQ_INT(accel_amp_fp8_init(&acc, &f, NULL), ACCEL_ERR_INVALID_ARGUMENT);
    d.num_forward = 2; d.num_backward = 1;
    AT_EQ_INT(accel_amp_fp8_init(&acc, &f, &d), ACCEL_OK);
    /* Accelerate's FP8RecipeKwargs defaults */
    AT_EQ_INT(f.fp8_format, ACCEL_AMP_FP8_HYBRID);
    AT_EQ_INT(f.amax_compute_algo, ACCEL_AMP_AMAX_MOST_RECENT);
    AT_EQ_INT(f.amax_history_len, 1024);
    AT_EQ_INT(f.margin, 0);
    AT_EQ_INT(f.num_tensors, 3);
    AT_EQ_INT(accel_amp_fp8_dtype(&f, 0), ACCEL_F8_E4M3);
    AT_EQ_INT(accel_amp_fp8_dtype(&f, 1), ACCEL_F8_E4M3);
    AT_EQ_INT(accel_amp_fp8_dtype(&f, 2), ACCEL_F8_E5M2);
    AT_EQ_INT(accel_amp_fp8_dtype(&f, 3), ACCEL_DTYPE_INVALID);
    AT_EQ_INT(accel_amp_fp8_dtype(&f, -1), ACCEL_DTYPE_INVALID);
    AT_NEAR(f.scale[0], 1.0, 0); AT_NEAR(f.scale_inv[2], 1.0, 0); AT_NEAR(f.amax_history[1023 * 3 + 2], 0.0, 0);
    accel_amp_fp8_deinit(&f);
    accel_amp_fp8_deinit(&f); /* idempotent */
    accel_amp_fp8_deinit(NULL);
    /* the environment fills the zero fields, as Accelerate's kwargs handler */
    setenv("ACCELERATE_FP8_FORMAT", "e4m3", 1);
    setenv("ACCELERATE_FP8_AMAX_COMPUTE_ALGO", "max", 1);
    setenv("ACCELERATE_FP8_AMAX_HISTORY_LEN", "16", 1);
    setenv("ACCELERATE_FP8_MARGIN", "-2", 1);
    AT_EQ_INT(accel_amp_fp8_init(&acc, &f, &d), ACCEL_OK);
    AT_EQ_INT(f.fp8_format, ACCEL_AMP_FP8_E4M3);
    AT_EQ_INT(f.amax_compute_algo, ACCEL_AMP_AMAX_MAX);
    AT_EQ_INT(f.amax_history_len, 16);
    AT_EQ_INT(f.margin, -2);
    AT_EQ_INT(accel_amp_fp8_dtype(&f, 2), ACCEL_F8_E4M3); /* E4M3 everywhere */
    accel_amp_fp8_deinit(&f);
    /* explicit fields win */
    d.fp8_format = ACCEL_AMP_FP8_HYBRID; d.amax_compute_algo = ACCEL_AMP_AMAX_MOST_RECENT; d.amax_history_len = 4; d.margin = 1;
    AT_EQ_INT(accel_amp_fp8_init(&acc, &f, &d), ACCEL_OK);
    AT_EQ_INT(f.fp8_format, ACCEL_AMP_FP8_HYBRID);
    AT_EQ_INT(f.amax_compute_algo, ACCEL_AMP_AMAX_MOST_RECENT);
    AT_EQ_INT(f.amax_history_len, 4);
    AT_EQ_INT(f.margin, 1);
    accel_amp_fp8_deinit(&f);
    memset(&d, 0, sizeof d);
    d.num_forward = 1;
    /* garbage in the environment is an error naming the variable */
    setenv("ACCELERATE_FP8_AMAX_HISTORY_LEN", "0", 1);
    AT_EQ_INT(accel_amp_fp8_init(&acc, &f, &d), ACCEL_ERR_ENVIRONMENT);
    AT_CONTAINS(accel_last_error(&acc), "ACCELERATE_FP8_AMAX_HISTORY_LEN");
    setenv("ACCELERATE_FP8_AMAX_HISTORY_LEN", "8", 1);
    setenv("ACCELERATE_FP8_FORMAT", "E5M2", 1);
    AT_EQ_INT(accel_amp_fp8_init(&acc, &f, &d), ACCEL_ERR_ENVIRONMENT);
    AT_CONTAINS(accel_last_error(&acc), "ACCELERATE_FP8_FORMAT");
    setenv("ACCELERATE_FP8_FORMAT", "HYBRID", 1);
    setenv("ACCELERATE_FP8_AMAX_COMPUTE_ALGO", "mean", 1);
    AT_EQ_INT(accel_amp_fp8_init(&acc, &f, &d), ACCEL_ERR_ENVIRONMENT);
    AT_CONTAINS(accel_last_error(&acc), "ACCELERATE_FP8_AMAX_COMPUTE_ALGO");
    setenv("ACCELERATE_FP8_AMAX_COMPUTE_ALGO", "max", 1);
    setenv("ACCELERATE_FP8_MARGIN", "1x", 1);
    AT_EQ_INT(accel_amp_fp8_init(&acc, &f, &d), ACCEL_ERR_ENVIRONMENT);
    AT_CONTAINS(accel_last_error(&acc), "ACCELERATE_FP8_MARGIN");
    clear_fp8_env();
    /* bad fields */
    d.fp8_format = (accel_amp_fp8_format)7;
    AT_EQ_INT(accel_amp_fp8_init(&acc, &f, &d), ACCEL_ERR_INVALID_ARGUMENT);
    d.fp8_format = ACCEL_AMP_FP8_FORMAT_DEFAULT; d.amax_compute_algo = (accel_amp_amax_algo)9;
    AT_EQ_INT(accel_amp_fp8_init(&acc, &f, &d), ACCEL_ERR_INVALID_ARGUMENT);
    d.amax_compute_algo = ACCEL_AMP_AMAX_DEFAULT; d.amax_history_len = -1;
    AT_EQ_INT(accel_amp_fp8_init(&acc, &f, &d), ACCEL_ERR_INVALID_ARGUMENT);
    d.amax_history_len = 0; d.num_backward = -1;
    AT_EQ_INT(accel_amp_fp8_init(&acc, &f, &d), ACCEL_ERR_INVALID_ARGUMENT);
    /* methods refuse an uninitialized object */
    memset(&f, 0, sizeof f);
    AT_EQ_INT(accel_amp_fp8_update(&f), ACCEL_ERR_STATE);
    AT_EQ_INT(accel_amp_fp8_update(NULL), ACCEL_ERR_INVALID_ARGUMENT);
    accel_shutdown(&acc);
}

/* fp8(x * scale) by the reference, x a float */
static uint8_t ref_q(float x, float scale, accel_dtype t, int sat) {
    float p = x * scale;
    return ref8_from_double((double)p, t == ACCEL_F8_E5M2 ? FP8_E5M2 : FP8_E4M3, sat);
}

static void test_quantize(void) {
    static const size_t lens[] = {0, 1, 15, 16, 17, 1000, 4099};
    accel acc;
    accel_amp_fp8 f;
    accel_amp_fp8_desc d;
    size_t li, i;
    int nosat, src_t;
    init_acc(&acc, ACCEL_PRECISION_FP8);
    clear_fp8_env();
    for (nosat = 0; nosat < 2; ++nosat)
        for (src_t = 0; src_t < 3; ++src_t)
            for (li = 0; li < sizeof lens / sizeof lens[0]; ++li) {
                accel_dtype st = src_t == 0 ? ACCEL_F32 : src_t == 1 ? ACCEL_BF16 : ACCEL_F16;
                size_t n = lens[li];
                float *x = (float *)malloc((n + 1) * 4), *back = (float *)malloc((n + 1) * 4);
                uint16_t *x16 = (uint16_t *)malloc((n + 1) * 2);
                uint8_t *q[2];
                accel_tensor src[2], dst[2], out[2];
                int slots[2] = {2, 0}, k, bad = 0;
                double amax_ref[2] = {0, 0};
                float scales[3];
                q[0] = (uint8_t *)malloc(n + 1); q[1] = (uint8_t *)malloc(n + 1);
                memset(&d, 0, sizeof d);
                d.num_forward = 2; d.num_backward = 1; d.no_saturate = nosat; d.amax_history_len = 4;
                AT_EQ_INT(accel_amp_fp8_init(&acc, &f, &d), ACCEL_OK);
                /* give the slots scales that are not 1: record amaxes and update */
                AT_EQ_INT(accel_amp_fp8_record_amax(&f, 0, 3.0f), ACCEL_OK);
                AT_EQ_INT(accel_amp_fp8_record_amax(&f, 2, 1e-3f), ACCEL_OK);
                AT_EQ_INT(accel_amp_fp8_update(&f), ACCEL_OK);
                for (k = 0; k < 3; ++k) scales[k] = f.scale[k];
                AT_NEAR(scales[0], (float)(448.0 / 3.0), 0);
                AT_NEAR(scales[2], 57344.0f / 1e-3f, 0);
                AT_NEAR(scales[1], 1.0, 0);
                for (i = 0; i < n; ++i) x[i] = (i % 4) ? rndf(-4.0f, 4.0f) : rndf(-0.01f, 0.01f);
                if (n > 10) { x[1] = NAN; x[3] = INFINITY; x[5] = -INFINITY; x[6] = 1e6f; x[7] = -1e-12f; x[9] = 3.5f; }
                if (st != ACCEL_F32) { /* the source in 16 bits; the reference reads it back exactly */
                    for (i = 0; i < n; ++i) {
                        x16[i] = st == ACCEL_BF16 ? ref_f32_to_bf16(x[i]) : ref_f32_to_f16(x[i]);
                        x[i] = (float)ref_decode(x16[i], st == ACCEL_BF16 ? 7 : 10, st == ACCEL_BF16 ? 127 : 15);
                    }
                }
                for (k = 0; k < 2; ++k) {
                    src[k] = tens(st == ACCEL_F32 ? (void *)x : (void *)x16, st, (int64_t)n);
                    dst[k] = tens(q[k], accel_amp_fp8_dtype(&f, slots[k]), (int64_t)n);
                }
                AT_EQ_INT(accel_amp_fp8_quantize(&f, slots, src, dst, 2), ACCEL_OK);
                for (k = 0; k < 2; ++k)
                    for (i = 0; i < n; ++i) {
                        uint8_t want = ref_q(x[i], scales[slots[k]], dst[k].dtype, !nosat);
                        if (q[k][i] != want) {
                            if (bad++ < 5) fprintf(stderr, "quantize %s slot %d [%zu] %g: %02x vs %02x\n",
                                                   accel_dtype_name(st), slots[k], i, (double)x[i], q[k][i], want);
                        }
                        if (!isnan(x[i]) && fabs((double)x[i]) > amax_ref[k]) amax_ref[k] = fabs((double)x[i]);
                    }
                AT_EQ_INT(bad, 0);
                /* this step's amax: the largest |x| with NaN left out (TE's fmaxf), Inf seen */
                AT_CHECK((double)f.amax_history[2] == amax_ref[0]);
                AT_CHECK((double)f.amax_history[0] == amax_ref[1]);
                AT_NEAR(f.amax_history[1], 0.0, 0);
                /* a second cast into the same slot raises, never lowers, the step's amax */
                if (n > 10) {
                    float small = 0.5f;
                    accel_tensor s1 = tens(&small, ACCEL_F32, 1), d1 = tens(q[0], ACCEL_F8_E5M2, 1);
                    int sl = 2;
                    AT_EQ_INT(accel_amp_fp8_quantize(&f, &sl, &s1, &d1, 1), ACCEL_OK);
                    AT_CHECK((double)f.amax_history[2] == amax_ref[0]);
                }
                /* dequantize: fp8 value * scale_inv rounded to the destination */
                for (k = 0; k < 2 && n > 0; ++k) {
                    accel_dtype outs[3] = {ACCEL_F32, ACCEL_BF16, ACCEL_F16};
                    int o;
                    for (o = 0; o < 3; ++o) {
                        out[k] = tens(back, outs[o], (int64_t)n);
                        AT_EQ_INT(accel_amp_fp8_dequantize(&f, &slots[k], &dst[k], &out[k], 1), ACCEL_OK);
                        for (i = 0, bad = 0; i < n; ++i) {
                            double v = ref8_decode(q[k][i], dst[k].dtype == ACCEL_F8_E5M2 ? FP8_E5M2 : FP8_E4M3);
                            float p = (float)v * f.scale_inv[slots[k]]; /* one float multiply, as TE */
                            uint32_t want = ref_store_bits(isnan(v) ? NAN : (double)p, outs[o]);
                            if (isnan(v) && outs[o] == ACCEL_F32) { bad += !isnan(back[i]); continue; }
                            bad += get_bits(back, outs[o], i) != want;
                        }
                        AT_EQ_INT(bad, 0);
                    }
                }
                accel_amp_fp8_deinit(&f);
                free(x); free(back); free(x16); free(q[0]); free(q[1]);
            }
    accel_shutdown(&acc);
}

/* the CPU cast kernel (vectorized on x86-64) against the element helper (checked exhaustively against cuda_fp8.h) on
   2^22 + 13 fp32 patterns spread over all 2^32 (every sign, exponent, NaN payload, subnormal), both formats, satfinite
   and not, scale 1 and a scale that is not a power of two; the amax against a scalar loop. */
static void test_quantize_patterns(void) {
    const size_t n = ((size_t)1 << 22) + 13;
    uint32_t *x = (uint32_t *)malloc(n * 4);
    uint8_t *q = (uint8_t *)malloc(n);
    accel acc;
    accel_amp_fp8 f;
    accel_amp_fp8_desc d;
    size_t i;
    int nosat, slot, pass;
    init_acc(&acc, ACCEL_PRECISION_FP8);
    clear_fp8_env();
    for (i = 0; i < n; ++i) x[i] = (uint32_t)i * 1024u + (uint32_t)(i & 1023u);
    x[5] = 0x7f800000u; x[77] = 0xff800000u; x[100] = 0x7fc00000u; x[n - 1] = 0x7f800001u; x[n - 2] = 0x80000000u;
    for (nosat = 0; nosat < 2; ++nosat)
        for (pass = 0; pass < 2; ++pass) {
            memset(&d, 0, sizeof d);
            d.num_forward = 1; d.num_backward = 1; d.no_saturate = nosat; d.amax_history_len = 2;
            AT_EQ_INT(accel_amp_fp8_init(&acc, &f, &d), ACCEL_OK);
            if (pass) { /* scales 448/3.3 and 57344/7e-4 */
                AT_EQ_INT(accel_amp_fp8_record_amax(&f, 0, 3.3f), ACCEL_OK);
                AT_EQ_INT(accel_amp_fp8_record_amax(&f, 1, 7e-4f), ACCEL_OK);
                AT_EQ_INT(accel_amp_fp8_update(&f), ACCEL_OK);
            }
            for (slot = 0; slot < 2; ++slot) {
                accel_dtype ft = accel_amp_fp8_dtype(&f, slot);
                accel_tensor src = tens(x, ACCEL_F32, (int64_t)n), dst = tens(q, ft, (int64_t)n);
                float sc = f.scale[slot], want_amax = 0;
                int bad = 0;
                AT_EQ_INT(accel_amp_fp8_quantize(&f, &slot, &src, &dst, 1), ACCEL_OK);
                for (i = 0; i < n; ++i) {
                    float v;
                    uint8_t want;
                    memcpy(&v, &x[i], 4);
                    want = accel_amp_f32_to_fp8(v * sc, ft == ACCEL_F8_E5M2, !nosat);
                    if (!isnan(v) && fabsf(v) > want_amax) want_amax = fabsf(v);
                    if (q[i] != want && bad++ < 3)
                        fprintf(stderr, "cast %s sat %d scale %g [%zu] %08x: %02x vs %02x\n", accel_dtype_name(ft), !nosat,
                                (double)sc, i, x[i], q[i], want);
                }
                AT_EQ_INT(bad, 0);
                AT_CHECK(f.amax_history[slot] == want_amax);
            }
            accel_amp_fp8_deinit(&f);
        }
    accel_shutdown(&acc);
    free(x);
    free(q);
}

/* dequantize of every code, in a buffer long enough for the CPU's table path (n >= 4096) and in a short one (the
   per-element path), to F32 / BF16 / F16 with a scale_inv that rounds: both equal the long-hand reference. */
static void test_dequantize_all_codes(void) {
    static const size_t lens[] = {256, 8192 + 3};
    accel acc;
    accel_amp_fp8 f;
    accel_amp_fp8_desc d;
    uint8_t *q = (uint8_t *)malloc(8192 + 3);
    float *back = (float *)malloc((8192 + 3) * 4);
    size_t li, i;
    int slot, o;
    init_acc(&acc, ACCEL_PRECISION_FP8);
    clear_fp8_env();
    memset(&d, 0, sizeof d);
    d.num_forward = 1; d.num_backward = 1; d.amax_history_len = 2;
    AT_EQ_INT(accel_amp_fp8_init(&acc, &f, &d), ACCEL_OK);
    AT_EQ_INT(accel_amp_fp8_record_amax(&f, 0, 3.3f), ACCEL_OK);
    AT_EQ_INT(accel_amp_fp8_record_amax(&f, 1, 7e-4f), ACCEL_OK);
    AT_EQ_INT(accel_amp_fp8_update(&f), ACCEL_OK);
    for (li = 0; li < 2; ++li)
        for (slot = 0; slot < 2; ++slot)
            for (o = 0; o < 3; ++o) {
                accel_dtype outs[3] = {ACCEL_F32, ACCEL_BF16, ACCEL_F16};
                accel_dtype ft = accel_amp_fp8_dtype(&f, slot);
                size_t n = lens[li];
                accel_tensor src = tens(q, ft, (int64_t)n), dst = tens(back, outs[o], (int64_t)n);
                int bad = 0;
                for (i = 0; i < n; ++i) q[i] = (uint8_t)(i * 37u + li);
                AT_EQ_INT(accel_amp_fp8_dequantize(&f, &slot, &src, &dst, 1), ACCEL_OK);
                for (i = 0; i < n; ++i) {
                    double v = ref8_decode(q[i], ft == ACCEL_F8_E5M2 ? FP8_E5M2 : FP8_E4M3);
                    float p = (float)v * f.scale_inv[slot];
                    if (isnan(v) && outs[o] == ACCEL_F32) { bad += !isnan(back[i]); continue; }
                    if (get_bits(back, outs[o], i) != ref_store_bits(isnan(v) ? NAN : (double)p, outs[o])) {
                        if (bad++ < 3) fprintf(stderr, "dequantize n=%zu %s code %02x -> %s wrong\n", n,
                                               accel_dtype_name(ft), q[i], accel_dtype_name(outs[o]));
                    }
                }
                AT_EQ_INT(bad, 0);
            }
    accel_amp_fp8_deinit(&f);
    accel_shutdown(&acc);
    free(q);
    free(back);
}

static void test_quantize_errors(void) {
    accel acc;
    accel_amp_fp8 f;
    accel_amp_fp8_desc d;
    float x[4] = {1, 2, 3, 4};
    uint8_t q[4] = {9, 9, 9, 9};
    accel_tensor s, t;
    int slot;
    init_acc(&acc, ACCEL_PRECISION_FP8);
    clear_fp8_env();
    memset(&d, 0, sizeof d);
    d.num_forward = 1; d.num_backward = 1;
    AT_EQ_INT(accel_amp_fp8_init(&acc, &f, &d), ACCEL_OK);
    s = tens(x, ACCEL_F32, 4);
    t = tens(q, ACCEL_F8_E5M2, 4);
    slot = 0; /* a forward slot: E4M3, not E5M2 */
    AT_EQ_INT(accel_amp_fp8_quantize(&f, &slot, &s, &t, 1), ACCEL_ERR_INVALID_ARGUMENT);
    AT_CONTAINS(accel_last_error(&acc), "forward");
    AT_EQ_INT(q[0], 9); /* nothing written */
    slot = 2;
    AT_EQ_INT(accel_amp_fp8_quantize(&f, &slot, &s, &t, 1), ACCEL_ERR_INVALID_ARGUMENT);
    AT_CONTAINS(accel_last_error(&acc), "slot 2");
    slot = 1;
    t.shape[0] = 3;
    AT_EQ_INT(accel_amp_fp8_quantize(&f, &slot, &s, &t, 1), ACCEL_ERR_INVALID_ARGUMENT);
    AT_CONTAINS(accel_last_error(&acc), "elements");
    t.shape[0] = 4;
    s.dtype = ACCEL_F64;
    AT_EQ_INT(accel_amp_fp8_quantize(&f, &slot, &s, &t, 1), ACCEL_ERR_INVALID_ARGUMENT);
    s.dtype = ACCEL_F32;
    t.ptr = NULL;
    AT_EQ_INT(accel_amp_fp8_quantize(&f, &slot, &s, &t, 1), ACCEL_ERR_INVALID_ARGUMENT);
    t.ptr = q;
    AT_EQ_INT(accel_amp_fp8_quantize(&f, &slot, &s, &t, -1), ACCEL_ERR_INVALID_ARGUMENT);
    AT_EQ_INT(accel_amp_fp8_quantize(&f, &slot, &s, &t, 0), ACCEL_OK);
    AT_NEAR(f.amax_history[1], 0.0, 0);
    AT_EQ_INT(accel_amp_fp8_quantize(&f, &slot, &s, &t, 1), ACCEL_OK);
    AT_NEAR(f.amax_history[1], 4.0, 0);
    AT_EQ_INT(accel_amp_fp8_record_amax(&f, 0, -1.0f), ACCEL_ERR_INVALID_ARGUMENT);
    AT_EQ_INT(accel_amp_fp8_record_amax(&f, 5, 1.0f), ACCEL_ERR_INVALID_ARGUMENT);
    AT_EQ_INT(accel_amp_fp8_record_amax(&f, 0, NAN), ACCEL_OK);
    AT_CHECK(isnan(f.amax_history[0]));
    AT_EQ_INT(accel_amp_fp8_record_amax(&f, 0, 5.0f), ACCEL_OK); /* NaN stays the step's amax */
    AT_CHECK(isnan(f.amax_history[0]));
    accel_amp_fp8_deinit(&f);
    AT_EQ_INT(accel_amp_fp8_quantize(&f, &slot, &s, &t, 1), ACCEL_ERR_STATE);
    accel_shutdown(&acc);
}

/* --------------------------------------------------------------------------------------------- the recipe */
/* Transformer Engine's DelayedScaling update stated long-hand in float64 (read from TE's
   transformer_engine/common/recipe/delayed_scaling.cu, kernel_bulk, and pytorch/quantization.py):
     a step whose amax is 0 changes nothing (the history does not move);
     otherwise the amax joins a window of the last L non-zero step amaxes, and
       amax' = this step's amax (most_recent) or the largest non-NaN amax of the window, 0 if none (max);
     amax' finite and > 0: scale = float(fp8_max * 2^-margin / amax'), FLT_MAX if that overflows;
     otherwise the scale stays; scale_inv = float(1 / scale). */
typedef struct traj_ref {
    double win[2048];
    int count;
    float scale, scale_inv;
} traj_ref;

static void traj_step(traj_ref *r, double a, int L, int algo_max, double fp8_max, int margin) {
    double sel = 0.0, s;
    int i;
    if (a != 0.0) { /* NaN != 0 */
        if (r->count == L) { memmove(r->win, r->win + 1, sizeof(double) * (size_t)(L - 1)); r->count--; }
        r->win[r->count++] = a;
        if (algo_max) { for (i = 0; i < r->count; ++i) if (!isnan(r->win[i]) && r->win[i] > sel) sel = r->win[i]; }
        else sel = a;
    }
    if (isfinite(sel) && sel > 0.0) {
        float scaled_max = (float)ldexp(fp8_max, -margin);
        s = (double)scaled_max / sel;
        r->scale = s > (double)FLT_MAX ? FLT_MAX : (float)s; /* (float) of an overflowing quotient: Inf → FLT_MAX */
        if (isinf(r->scale)) r->scale = FLT_MAX;
    }
    r->scale_inv = (float)(1.0 / (double)r->scale);
}

/* runs a sequence of step amaxes for a forward and a backward slot through the object and the statement */
static void run_traj(const char *name, const float *fwd, const float *bwd, int steps, int L, accel_amp_amax_algo algo,
                     int margin, accel_amp_fp8_format fmt) {
    accel acc;
    accel_amp_fp8 f;
    accel_amp_fp8_desc d;
    traj_ref r[2];
    int s, k, bad = 0, badh = 0;
    init_acc(&acc, ACCEL_PRECISION_FP8);
    clear_fp8_env();
    memset(&d, 0, sizeof d);
    d.num_forward = 1; d.num_backward = 1; d.amax_history_len = L; d.amax_compute_algo = algo; d.margin = margin;
    d.fp8_format = fmt;
    AT_EQ_INT(accel_amp_fp8_init(&acc, &f, &d), ACCEL_OK);
    memset(r, 0, sizeof r);
    r[0].scale = r[1].scale = r[0].scale_inv = r[1].scale_inv = 1.0f;
    at_context = name;
    for (s = 0; s < steps; ++s) {
        if (fwd[s] != 0.0f) AT_EQ_INT(accel_amp_fp8_record_amax(&f, 0, fwd[s]), ACCEL_OK);
        if (bwd[s] != 0.0f) AT_EQ_INT(accel_amp_fp8_record_amax(&f, 1, bwd[s]), ACCEL_OK);
        AT_EQ_INT(accel_amp_fp8_update(&f), ACCEL_OK);
        for (k = 0; k < 2; ++k) {
            double fmax = (k == 1 && fmt != ACCEL_AMP_FP8_E4M3) ? 57344.0 : 448.0;
            int j;
            traj_step(&r[k], (double)(k ? bwd[s] : fwd[s]), L, algo == ACCEL_AMP_AMAX_MAX, fmax, margin);
            if (ref8_f_bits(f.scale[k]) != ref8_f_bits(r[k].scale) || ref8_f_bits(f.scale_inv[k]) != ref8_f_bits(r[k].scale_inv)) {
                if (bad++ < 5)
                    fprintf(stderr, "%s step %d slot %d: scale %.9g / %.9g, reference %.9g / %.9g\n", name, s, k,
                            (double)f.scale[k], (double)f.scale_inv[k], (double)r[k].scale, (double)r[k].scale_inv);
            }
            /* TE's history layout: row 0 zero, rows L-1, L-2, ... the newest non-zero amaxes */
            if (f.amax_history[k] != 0.0f) badh++;
            for (j = 1; j < L; ++j) {
                int w = r[k].count - (L - j); /* window index shown in row j */
                double want = w >= 0 && (L == 1 || w < r[k].count) ? r[k].win[w] : 0.0;
                double got = (double)f.amax_history[(size_t)j * 2 + (size_t)k];
                if (!(got == want || (isnan(got) && isnan(want)))) badh++;
            }
        }
    }
    AT_EQ_INT(bad, 0);
    AT_EQ_INT(badh, 0);
    AT_EQ_INT(f.updates, steps);
    at_context = "";
    accel_amp_fp8_deinit(&f);
    accel_shutdown(&acc);
}

static void test_recipe(void) {
    enum { S = 64 };
    float spike[S], zeros[S], nonfin[S], extreme[S], rnd[S], bwd[S];
    static const int Ls[] = {1, 3, 16, 1024};
    static const int margins[] = {0, 2, -1};
    int i, li, mi, algo;
    for (i = 0; i < S; ++i) {
        spike[i] = (i == 5 || i == 30) ? 1000.0f : 1.0f + 0.01f * (float)i;
        zeros[i] = (i % 4 == 1 || (i >= 20 && i < 26)) ? 0.0f : 0.5f * (float)(i % 7 + 1);
        nonfin[i] = i == 3 ? INFINITY : i == 9 ? NAN : (i == 15 || i == 16) ? NAN : i == 40 ? INFINITY : 2.0f + (float)(i % 5);
        extreme[i] = i % 5 == 0 ? 1e-39f : i % 5 == 1 ? 3e38f : i % 5 == 2 ? FLT_MIN : i % 5 == 3 ? 1e-30f : 7.0f;
        rnd[i] = (rnd32() % 6 == 0) ? 0.0f : rndf(0.0f, 10.0f) * (rnd32() % 9 == 0 ? 1000.0f : 1.0f);
        bwd[i] = i % 3 ? 1e-4f * (float)(i + 1) : 0.0f;
    }
    for (li = 0; li < 4; ++li)
        for (mi = 0; mi < 3; ++mi)
            for (algo = 0; algo < 2; ++algo) {
                accel_amp_amax_algo a = algo ? ACCEL_AMP_AMAX_MAX : ACCEL_AMP_AMAX_MOST_RECENT;
                run_traj("spike", spike, bwd, S, Ls[li], a, margins[mi], ACCEL_AMP_FP8_HYBRID);
                run_traj("zeros", zeros, spike, S, Ls[li], a, margins[mi], ACCEL_AMP_FP8_HYBRID);
                run_traj("inf-nan", nonfin, zeros, S, Ls[li], a, margins[mi], ACCEL_AMP_FP8_E4M3);
                run_traj("extreme", extreme, nonfin, S, Ls[li], a, margins[mi], ACCEL_AMP_FP8_HYBRID);
                run_traj("random", rnd, extreme, S, Ls[li], a, margins[mi], ACCEL_AMP_FP8_E4M3);
            }
    /* worked cases stated outright (not through the statement above) */
    {
        accel acc;
        accel_amp_fp8 f;
        accel_amp_fp8_desc d;
        init_acc(&acc, ACCEL_PRECISION_FP8);
        memset(&d, 0, sizeof d);
        d.num_forward = 1; d.amax_history_len = 3; d.amax_compute_algo = ACCEL_AMP_AMAX_MAX;
        AT_EQ_INT(accel_amp_fp8_init(&acc, &f, &d), ACCEL_OK);
        accel_amp_fp8_record_amax(&f, 0, 4.0f); accel_amp_fp8_update(&f);
        AT_NEAR(f.scale[0], 112.0, 0);            /* 448 / 4 */
        AT_NEAR(f.scale_inv[0], 1.0 / 112.0, 1e-9);
        accel_amp_fp8_record_amax(&f, 0, 2.0f); accel_amp_fp8_update(&f);
        AT_NEAR(f.scale[0], 112.0, 0);            /* max of {4, 2} */
        accel_amp_fp8_update(&f);                 /* amax 0: nothing moves */
        AT_NEAR(f.scale[0], 112.0, 0);
        accel_amp_fp8_record_amax(&f, 0, 1.0f); accel_amp_fp8_update(&f);
        AT_NEAR(f.scale[0], 112.0, 0);            /* {4, 2, 1}: 4 still in the window of 3 */
        accel_amp_fp8_record_amax(&f, 0, 1.0f); accel_amp_fp8_update(&f);
        AT_NEAR(f.scale[0], 224.0, 0);            /* {2, 1, 1} */
        accel_amp_fp8_record_amax(&f, 0, INFINITY); accel_amp_fp8_update(&f);
        AT_NEAR(f.scale[0], 224.0, 0);            /* Inf: the scale stays */
        accel_amp_fp8_record_amax(&f, 0, 1e-39f); accel_amp_fp8_update(&f);
        AT_NEAR(f.scale[0], 224.0, 0);            /* Inf still in the window */
        accel_amp_fp8_record_amax(&f, 0, 1e-39f); accel_amp_fp8_update(&f);
        accel_amp_fp8_record_amax(&f, 0, 1e-39f); accel_amp_fp8_update(&f);
        AT_CHECK(f.scale[0] == FLT_MAX);          /* 448 / 1e-39 overflows: FLT_MAX */
        accel_amp_fp8_deinit(&f);
        accel_shutdown(&acc);
    }
}

/* quantize → update → quantize: the second cast uses the scale from the first step's amax */
static void test_recipe_with_data(void) {
    accel acc;
    accel_amp_fp8 f;
    accel_amp_fp8_desc d;
    float x[100], g[100];
    uint8_t qx[100], qg[100];
    accel_tensor src[2], dst[2];
    int i, bad = 0;
    init_acc(&acc, ACCEL_PRECISION_FP8);
    clear_fp8_env();
    memset(&d, 0, sizeof d);
    d.num_forward = 1; d.num_backward = 1; d.margin = 1;
    AT_EQ_INT(accel_amp_fp8_init(&acc, &f, &d), ACCEL_OK);
    for (i = 0; i < 100; ++i) { x[i] = rndf(-3.0f, 3.0f); g[i] = rndf(-1e-5f, 1e-5f); }
    x[17] = -6.5f; g[3] = 2e-5f;
    src[0] = tens(x, ACCEL_F32, 100); dst[0] = tens(qx, ACCEL_F8_E4M3, 100);
    src[1] = tens(g, ACCEL_F32, 100); dst[1] = tens(qg, ACCEL_F8_E5M2, 100);
    AT_EQ_INT(accel_amp_fp8_quantize(&f, NULL, src, dst, 2), ACCEL_OK);
    AT_EQ_INT(accel_amp_fp8_update(&f), ACCEL_OK);
    AT_CHECK(f.scale[0] == (float)(224.0 / 6.5));     /* 448 * 2^-1 / 6.5 */
    AT_CHECK(f.scale[1] == 28672.0f / 2e-5f);
    AT_EQ_INT(accel_amp_fp8_quantize(&f, NULL, src, dst, 2), ACCEL_OK);
    for (i = 0; i < 100; ++i) {
        bad += qx[i] != ref_q(x[i], f.scale[0], ACCEL_F8_E4M3, 1);
        bad += qg[i] != ref_q(g[i], f.scale[1], ACCEL_F8_E5M2, 1);
    }
    AT_EQ_INT(bad, 0);
    AT_EQ_INT(qx[17], 0xf6); /* -6.5 * 224/6.5 = -224 = -1.75 * 2^7: 1.1110.110 */
    accel_amp_fp8_deinit(&f);
    accel_shutdown(&acc);
}

/* ------------------------------------------------------------------------------------------------ state */
static void test_state(void) {
    accel acc;
    accel_amp_fp8 f, g;
    accel_amp_fp8_desc d;
    unsigned char *buf, *bad;
    size_t need = 0, w = 0, cells;
    int i;
    init_acc(&acc, ACCEL_PRECISION_FP8);
    clear_fp8_env();
    memset(&d, 0, sizeof d);
    d.num_forward = 2; d.num_backward = 1; d.amax_history_len = 5; d.amax_compute_algo = ACCEL_AMP_AMAX_MAX;
    AT_EQ_INT(accel_amp_fp8_init(&acc, &f, &d), ACCEL_OK);
    for (i = 0; i < 7; ++i) {
        accel_amp_fp8_record_amax(&f, 0, 1.0f + (float)i);
        accel_amp_fp8_record_amax(&f, 2, i == 3 ? NAN : 0.25f * (float)i);
        accel_amp_fp8_update(&f);
    }
    accel_amp_fp8_record_amax(&f, 1, 9.0f); /* a step in progress (CPU: on the host, saved) */
    AT_EQ_INT(accel_amp_fp8_state_save(&f, NULL, 0, &need), ACCEL_OK);
    cells = 3 * 5;
    AT_EQ_INT(need, ACCEL_AMP_FP8_STATE_HEADER_BYTES + 4 * (6 + cells));
    buf = (unsigned char *)malloc(need);
    bad = (unsigned char *)malloc(need + 4);
    AT_EQ_INT(accel_amp_fp8_state_save(&f, buf, need - 1, &w), ACCEL_OK); /* too small: the size, nothing written */
    AT_EQ_INT(w, need);
    AT_EQ_INT(accel_amp_fp8_state_save(&f, buf, need, &w), ACCEL_OK);
    AT_EQ_INT(w, need);
    AT_CHECK(memcmp(buf, "AF8S", 4) == 0);
    /* a second object with the same layout (margin / algo may differ: configuration) */
    d.margin = 3; d.amax_compute_algo = ACCEL_AMP_AMAX_MOST_RECENT;
    AT_EQ_INT(accel_amp_fp8_init(&acc, &g, &d), ACCEL_OK);
    AT_EQ_INT(accel_amp_fp8_state_load(&g, buf, need), ACCEL_OK);
    AT_CHECK(memcmp(g.scale, f.scale, sizeof(float) * (6 + cells)) == 0); /* bytes: the NaN amax too */
    AT_EQ_INT(g.updates, 7);
    AT_EQ_INT(g.margin, 3);
    AT_EQ_INT(g.amax_compute_algo, ACCEL_AMP_AMAX_MOST_RECENT);
    /* corruptions: each refused with FORMAT and g unchanged */
    {
        struct { size_t off; uint32_t val; const char *msg; } cs[] = {
            {0, 0x53384641u /* "AF8S" reversed */, "magic"}, {4, 2, "version"}, {8, 3, "forward"}, {12, 2, "backward"},
            {16, 2, "fp8_format"}, {20, 6, "amax_history_len"},
            {ACCEL_AMP_FP8_STATE_HEADER_BYTES, 0x7f800000u, "scale"},          /* scale Inf */
            {ACCEL_AMP_FP8_STATE_HEADER_BYTES + 4, 0u, "scale"},               /* scale 0 */
            {ACCEL_AMP_FP8_STATE_HEADER_BYTES + 12, 0x3f800000u, "scale_inv"}, /* scale_inv != 1/scale */
            {ACCEL_AMP_FP8_STATE_HEADER_BYTES + 24 + 8, 0xbf800000u, "negative"}};
        size_t c;
        float before = g.scale[0];
        for (c = 0; c < sizeof cs / sizeof cs[0]; ++c) {
            memcpy(bad, buf, need);
            bad[cs[c].off] = (unsigned char)cs[c].val; bad[cs[c].off + 1] = (unsigned char)(cs[c].val >> 8);
            bad[cs[c].off + 2] = (unsigned char)(cs[c].val >> 16); bad[cs[c].off + 3] = (unsigned char)(cs[c].val >> 24);
            if (cs[c].off == 0) memcpy(bad, "XF8S", 4);
            g.scale[0] = 123.0f;
            AT_EQ_INT(accel_amp_fp8_state_load(&g, bad, need), ACCEL_ERR_FORMAT);
            AT_CONTAINS(accel_last_error(&acc), cs[c].msg);
            AT_NEAR(g.scale[0], 123.0, 0);
        }
        g.scale[0] = before;
        AT_EQ_INT(accel_amp_fp8_state_load(&g, buf, need - 1), ACCEL_ERR_FORMAT);
        AT_EQ_INT(accel_amp_fp8_state_load(&g, buf, 3), ACCEL_ERR_FORMAT);
        memcpy(bad, buf, need); bad[need] = 0;
        AT_EQ_INT(accel_amp_fp8_state_load(&g, bad, need + 1), ACCEL_ERR_FORMAT);
    }
    /* a loaded object continues exactly as the original */
    accel_amp_fp8_deinit(&g);
    d.margin = 0; d.amax_compute_algo = ACCEL_AMP_AMAX_MAX;
    AT_EQ_INT(accel_amp_fp8_init(&acc, &g, &d), ACCEL_OK);
    AT_EQ_INT(accel_amp_fp8_state_load(&g, buf, need), ACCEL_OK);
    for (i = 0; i < 4; ++i) {
        accel_amp_fp8_record_amax(&f, 0, 0.5f * (float)i); accel_amp_fp8_record_amax(&g, 0, 0.5f * (float)i);
        accel_amp_fp8_update(&f); accel_amp_fp8_update(&g);
    }
    AT_CHECK(memcmp(g.scale, f.scale, sizeof(float) * 6) == 0);
    accel_amp_fp8_deinit(&f);
    accel_amp_fp8_deinit(&g);
    free(buf); free(bad);
    accel_shutdown(&acc);
}

/* ---------------------------------------------------------------------------------------------- policy */
static void test_policy(void) {
    accel acc;
    accel_amp_policy pol;
    accel_amp_scaler sc;
    init_acc(&acc, ACCEL_PRECISION_FP8);
    AT_EQ_INT(accel_amp_get_policy(&acc, &pol), ACCEL_OK);
    AT_EQ_INT(pol.precision, ACCEL_PRECISION_FP8);
    AT_EQ_INT(pol.compute_dtype, ACCEL_BF16);
    AT_EQ_INT(pol.loss_scaling, 0);
    AT_EQ_INT(pol.accelerate_would_scale, 0);
    AT_EQ_INT(accel_amp_scaler_init(&acc, &sc, NULL), ACCEL_OK); /* no GradScaler in fp8 (as Accelerate) */
    AT_EQ_INT(sc.enabled, 0);
    accel_amp_scaler_deinit(&sc);
    accel_shutdown(&acc);
    /* Accelerate's variable picks fp8 when the desc leaves the precision unset */
    setenv("ACCELERATE_MIXED_PRECISION", "fp8", 1);
    init_acc(&acc, ACCEL_PRECISION_DEFAULT);
    AT_EQ_INT(acc.mixed_precision, ACCEL_PRECISION_FP8);
    AT_EQ_INT(accel_amp_get_policy(&acc, &pol), ACCEL_OK);
    AT_EQ_INT(pol.precision, ACCEL_PRECISION_FP8);
    accel_shutdown(&acc);
    unsetenv("ACCELERATE_MIXED_PRECISION");
}

/* several processes and no host process group: the amax cannot be reduced, so update fails with nothing changed,
   unless desc.local_amax */
static void test_update_without_host_group(void) {
    accel acc;
    accel_desc dd;
    accel_amp_fp8 f;
    accel_amp_fp8_desc d;
    memset(&dd, 0, sizeof dd);
    dd.num_processes = 2; dd.process_index = 1; dd.cpu = 1; dd.no_mpi = 1; dd.log_fn = quiet_log;
    dd.mixed_precision = ACCEL_PRECISION_FP8;
    AT_EQ_INT(accel_init(&acc, &dd), ACCEL_OK);
    clear_fp8_env();
    memset(&d, 0, sizeof d);
    d.num_forward = 1;
    AT_EQ_INT(accel_amp_fp8_init(&acc, &f, &d), ACCEL_OK);
    accel_amp_fp8_record_amax(&f, 0, 2.0f);
    AT_EQ_INT(accel_amp_fp8_update(&f), ACCEL_ERR_UNSUPPORTED);
    AT_CONTAINS(accel_last_error(&acc), "local_amax");
    AT_NEAR(f.scale[0], 1.0, 0);
    AT_NEAR(f.amax_history[0], 2.0, 0);
    AT_EQ_INT(f.updates, 0);
    accel_amp_fp8_deinit(&f);
    d.local_amax = 1;
    AT_EQ_INT(accel_amp_fp8_init(&acc, &f, &d), ACCEL_OK);
    accel_amp_fp8_record_amax(&f, 0, 2.0f);
    AT_EQ_INT(accel_amp_fp8_update(&f), ACCEL_OK);
    AT_NEAR(f.scale[0], 224.0, 0);
    accel_amp_fp8_deinit(&f);
    accel_shutdown(&acc);
}

int main(void) {
    test_decode_all();
    test_encode_fp32();
    test_encode_16();
    test_convert_buffers();
    test_init();
    test_quantize();
    test_dequantize_all_codes();
    test_quantize_patterns();
    test_quantize_errors();
    test_recipe();
    test_recipe_with_data();
    test_state();
    test_policy();
    test_update_without_host_group();
    return at_finish("amp_fp8");
}
