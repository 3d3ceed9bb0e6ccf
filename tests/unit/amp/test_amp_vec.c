/* accel_amp.h's run-time dispatched CPU kernels in a TU of their own (it defines ACCEL_IMPLEMENTATION to reach the
   static loops): every vector path gives the bits of the core's scalar codec / the scalar unscale rule.
   - fp32 → bf16 and fp32 → fp16: all 2^32 fp32 inputs through the AVX2 (and F16C) kernels against accel_f32_to_bf16 /
     accel_f32_to_f16 element by element (NaN → 0x7FFF, RNE ties, overflow, fp16 subnormals), then every length 0..80
     at every start offset 0..15 (the vector body and the scalar tail) through the dispatched entry points;
   - unscale_and_check (fp32): products g·inv against the scalar product bit for bit (NaN payloads included) for inv =
     1 (read-only path), powers of two, inexact factors, factors that overflow to Inf or go subnormal, on random bits
     and all specials; found_inf against the scalar OR with one non-finite planted at every position of every length
     0..80 (body lanes, block boundaries, tail), and zero when all are finite;
   - outputs of 4 MiB and more (streaming stores): every element at destination offsets 0..17, guard after the end;
   - the public accel_amp_convert / accel_amp_unscale_and_check on a large buffer (the same dispatch) against the same
     scalar references.
   Without AVX2 (or built with ACCEL_AMP_NO_DISPATCH on a baseline target) the dispatched entry points are still checked
   (they are then the scalar loops) and the line says the vector kernels were not run. */
#define ACCEL_IMPLEMENTATION
#include "accel.h"
#include "accel_amp.h"
#include "accel_test.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rs = 0xA5F00D1234567ull;
static uint32_t rnd32(void) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return (uint32_t)(rs >> 16); }
static float bitsf(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t fbits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

typedef void (*conv_fn)(const float *, uint16_t *, size_t);
static void conv_bf16_dispatched(const float *s, uint16_t *d, size_t n) { accel__amp_cpu_f32_to_bf16(s, d, n); }
static void conv_f16_dispatched(const float *s, uint16_t *d, size_t n) { accel__amp_cpu_f32_to_f16(s, d, n); }

#ifdef ACCEL__AMP_AVX2 /* only the AVX2 loops use it (a NO_DISPATCH build without -mavx2 has none) */
/* all 2^32 inputs, 2^20 per call; reports the first few differences */
static void exhaustive_conv(conv_fn f, int bf16, const char *name) {
    const size_t chunk = (size_t)1 << 20;
    float *s = (float *)malloc(chunk * sizeof(float));
    uint16_t *d = (uint16_t *)malloc(chunk * sizeof(uint16_t));
    uint64_t base, bad = 0;
    size_t i;
    at_context = name;
    if (!s || !d) { AT_CHECK(!"out of memory"); free(s); free(d); return; }
    /* Under ASan (the CI's sanitizer build) every 16th chunk — each chunk still spans whole exponent ranges and all
       low mantissa patterns; the default build checks all 2^32 inputs. */
#ifdef __SANITIZE_ADDRESS__
    const uint64_t stride = (uint64_t)chunk * 16;
#else
    const uint64_t stride = (uint64_t)chunk;
#endif
    for (base = 0; base < ((uint64_t)1 << 32); base += stride) {
        for (i = 0; i < chunk; ++i) s[i] = bitsf((uint32_t)(base + i));
        f(s, d, chunk);
        for (i = 0; i < chunk; ++i) {
            uint16_t want = bf16 ? accel_f32_to_bf16(s[i]) : accel_f32_to_f16(s[i]);
            if (d[i] != want) {
                if (bad < 5)
                    fprintf(stderr, "%s: input 0x%08x gives 0x%04x, the codec 0x%04x\n", name, (unsigned)(base + i),
                            (unsigned)d[i], (unsigned)want);
                ++bad;
            }
        }
    }
    AT_EQ_INT(bad, 0);
    free(s);
    free(d);
}
#endif

/* every length 0..80 at every offset 0..15, guard elements around the destination untouched */
static void tails_conv(conv_fn f, int bf16, const char *name) {
    float s[128];
    uint16_t d[128];
    size_t off, n, i;
    long bad = 0;
    at_context = name;
    for (off = 0; off < 16; ++off)
        for (n = 0; n <= 80; ++n) {
            for (i = 0; i < 128; ++i) s[i] = bitsf(i % 7 == 3 ? 0x7fc00001u + (uint32_t)i : i % 11 == 5 ? 0x3f808000u + ((uint32_t)i << 16) : rnd32());
            for (i = 0; i < 128; ++i) d[i] = 0xabcd;
            f(s + off, d + off, n);
            for (i = 0; i < 128; ++i) {
                uint16_t want = (i >= off && i < off + n) ? (bf16 ? accel_f32_to_bf16(s[i]) : accel_f32_to_f16(s[i])) : 0xabcd;
                if (d[i] != want) ++bad;
            }
        }
    AT_EQ_INT(bad, 0);
}

static uint32_t special_bits(uint32_t k);

#ifdef ACCEL__AMP_AVX2 /* only the AVX2 loops use it (a NO_DISPATCH build without -mavx2 has none) */
/* Outputs of 4 MiB and more take the streaming-store path (an unaligned head converted one by one up to the next
   32-byte boundary, streamed body, scalar tail): every element against the codec at destination offsets 0..17
   (each 32-byte phase of a uint16 pointer, and past it), with a guard element after the end. */
static void large_conv(conv_fn f, int bf16, const char *name) {
    const size_t n = ((size_t)5 << 19) + 13; /* 5 MiB + 26 bytes of output */
    float *s = (float *)malloc((n + 32) * sizeof(float));
    uint16_t *d = (uint16_t *)malloc((n + 32) * sizeof(uint16_t));
    size_t off, i;
    long bad = 0;
    at_context = name;
    if (!s || !d) { AT_CHECK(!"out of memory"); free(s); free(d); return; }
    for (i = 0; i < n + 32; ++i) s[i] = bitsf(i % 97 == 5 ? special_bits((uint32_t)i) : rnd32());
    for (off = 0; off < 18; off += (off < 4 ? 1 : 7)) {
        for (i = 0; i < n + 32; ++i) d[i] = 0xabcd;
        f(s + off, d + off, n);
        for (i = 0; i < n + 32; ++i) {
            uint16_t want = (i >= off && i < off + n) ? (bf16 ? accel_f32_to_bf16(s[i]) : accel_f32_to_f16(s[i])) : 0xabcd;
            if (d[i] != want) {
                if (bad < 5) fprintf(stderr, "%s: offset %zu, element %zu: 0x%04x, the codec 0x%04x\n", name, off, i,
                                     (unsigned)d[i], (unsigned)want);
                ++bad;
            }
        }
    }
    AT_EQ_INT(bad, 0);
    free(s);
    free(d);
}
#endif

typedef uint32_t (*unscale_fn)(float *, size_t, float);
static uint32_t unscale_dispatched(float *g, size_t n, float inv) { return accel__amp_cpu_unscale_f32(g, n, inv); }

static uint32_t special_bits(uint32_t k) {
    static const uint32_t sp[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x00800000u, 0x7f7fffffu,
                                  0xff7fffffu, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u, 0x7f800001u,
                                  0xff812345u, 0x7fbfffffu, 0x3f800000u, 0xbf800000u, 0x7effffffu, 0x00400000u};
    return sp[k % (sizeof sp / sizeof sp[0])];
}

static void check_unscale(unscale_fn f, const char *name) {
    static const float invs[] = {1.0f, 2.0f, 0.5f, 65536.0f, 1.0f / 65536.0f, 3.0f, 0.1f, 1.0e30f, 1.0e-30f,
                                 5.9604645e-8f, 3.4028235e38f, 1.4e-45f};
    enum { N = 4099 };
    float *g = (float *)malloc(N * sizeof(float)), *ref = (float *)malloc(N * sizeof(float));
    size_t k, i, n, off, pos;
    long bad_bits = 0, bad_flag = 0;
    at_context = name;
    if (!g || !ref) { AT_CHECK(!"out of memory"); free(g); free(ref); return; }
    for (k = 0; k < sizeof invs / sizeof invs[0]; ++k) {
        int rep;
        for (rep = 0; rep < 40; ++rep) {
            uint32_t got, want = 0;
            volatile float vinv = invs[k];
            for (i = 0; i < N; ++i) {
                uint32_t u = rnd32();
                /* rep 0: all finite; 1: specials everywhere; others: random bits (some non-finite) */
                if (rep == 0) u &= 0xbf7fffffu;
                else if (rep == 1) u = special_bits((uint32_t)i);
                g[i] = bitsf(u);
            }
            for (i = 0; i < N; ++i) {
                float v = g[i];
                want |= accel_amp_nonfinite(v);
                ref[i] = invs[k] == 1.0f ? v : v * vinv;
            }
            got = f(g, N, invs[k]);
            if (got != want) ++bad_flag;
            for (i = 0; i < N; ++i)
                if (fbits(g[i]) != fbits(ref[i])) {
                    if (bad_bits < 5)
                        fprintf(stderr, "%s: inv %g element %zu gives 0x%08x, the scalar product 0x%08x\n", name,
                                (double)invs[k], i, (unsigned)fbits(g[i]), (unsigned)fbits(ref[i]));
                    ++bad_bits;
                }
        }
    }
    /* found_inf: one non-finite at every position of every length, and none */
    for (off = 0; off < 4; ++off)
        for (n = 0; n <= 80; ++n)
            for (pos = 0; pos <= n; ++pos) {
                for (k = 0; k < 3; ++k) {
                    float inv = k == 0 ? 1.0f : k == 1 ? 0.5f : 3.0f;
                    uint32_t got;
                    for (i = 0; i < 96; ++i) g[i] = (float)(int)(i % 13) - 6.0f;
                    g[96] = bitsf(0x7f800000u); /* just past the end: never counted */
                    if (pos < n) g[off + pos] = bitsf(special_bits(7u + (uint32_t)((pos + k) % 6)));
                    if (off + n < 96) g[off + n] = bitsf(0x7fc00000u);
                    got = f(g + off, n, inv);
                    if (got != (pos < n ? 1u : 0u)) ++bad_flag;
                }
            }
    AT_EQ_INT(bad_bits, 0);
    AT_EQ_INT(bad_flag, 0);
    free(g);
    free(ref);
}

/* the public entry points on a large buffer (the dispatched kernels behind them) */
static void check_public(void) {
    accel acc;
    accel_desc d;
    accel_amp_scaler sc;
    accel_amp_scaler_desc sd;
    accel_tensor t;
    size_t n = ((size_t)1 << 20) + 13, i;
    float *g = (float *)malloc(n * sizeof(float)), *ref = (float *)malloc(n * sizeof(float));
    uint16_t *h = (uint16_t *)malloc(n * sizeof(uint16_t));
    long bad = 0;
    int found = -1;
    at_context = "public API";
    memset(&d, 0, sizeof d);
    d.cpu = 1;
    d.no_mpi = 1;
    d.mixed_precision = ACCEL_PRECISION_FP16;
    if (!g || !ref || !h || accel_init(&acc, &d) != ACCEL_OK) { AT_CHECK(!"setup failed"); free(g); free(ref); free(h); return; }
    for (i = 0; i < n; ++i) g[i] = bitsf(rnd32() & 0xbfffffffu); /* finite or tiny */
    AT_EQ_INT(accel_amp_convert(&acc, g, ACCEL_F32, h, ACCEL_BF16, n, NULL), ACCEL_OK);
    for (i = 0; i < n; ++i) bad += h[i] != accel_f32_to_bf16(g[i]);
    AT_EQ_INT(accel_amp_convert(&acc, g, ACCEL_F32, h, ACCEL_F16, n, NULL), ACCEL_OK);
    for (i = 0; i < n; ++i) bad += h[i] != accel_f32_to_f16(g[i]);
    memset(&sd, 0, sizeof sd);
    sd.init_scale = 8.0f;
    AT_EQ_INT(accel_amp_scaler_init(&acc, &sc, &sd), ACCEL_OK);
    memset(&t, 0, sizeof t);
    t.ptr = g; t.dtype = ACCEL_F32; t.ndim = 1; t.shape[0] = (int64_t)n;
    for (i = 0; i < n; ++i) ref[i] = g[i] * 0.125f;
    AT_EQ_INT(accel_amp_unscale_and_check(&sc, &t, 1, &found), ACCEL_OK);
    AT_EQ_INT(found, 0);
    for (i = 0; i < n; ++i) bad += fbits(g[i]) != fbits(ref[i]);
    AT_EQ_INT(accel_amp_update(&sc), ACCEL_OK);
    g[n - 3] = bitsf(0xff800000u); /* in the scalar tail of the vector loop */
    g[n / 2] = bitsf(0x7fc00000u);
    AT_EQ_INT(accel_amp_unscale_and_check(&sc, &t, 1, &found), ACCEL_OK);
    AT_EQ_INT(found, 1);
    AT_EQ_INT(bad, 0);
    accel_amp_scaler_deinit(&sc);
    accel_shutdown(&acc);
    free(g);
    free(ref);
    free(h);
}

int main(void) {
    int vec = 0, f16c = 0;
#ifdef ACCEL__AMP_AVX2
    vec = accel__amp_has_avx2();
    f16c = accel__amp_has_f16c();
    if (vec) {
        exhaustive_conv(accel__amp_cpu_f32_to_bf16_avx2, 1, "fp32->bf16 AVX2, all 2^32 inputs");
        tails_conv(accel__amp_cpu_f32_to_bf16_avx2, 1, "fp32->bf16 AVX2, lengths and offsets");
        large_conv(accel__amp_cpu_f32_to_bf16_avx2, 1, "fp32->bf16 AVX2, streaming stores");
        check_unscale(accel__amp_cpu_unscale_f32_avx2, "unscale_f32 AVX2");
    }
    if (f16c) {
        exhaustive_conv(accel__amp_cpu_f32_to_f16_avx2, 0, "fp32->fp16 AVX2+F16C, all 2^32 inputs");
        tails_conv(accel__amp_cpu_f32_to_f16_avx2, 0, "fp32->fp16 AVX2+F16C, lengths and offsets");
        large_conv(accel__amp_cpu_f32_to_f16_avx2, 0, "fp32->fp16 AVX2+F16C, streaming stores");
    }
#endif
    tails_conv(conv_bf16_dispatched, 1, "fp32->bf16 dispatched, lengths and offsets");
    tails_conv(conv_f16_dispatched, 0, "fp32->fp16 dispatched, lengths and offsets");
    check_unscale(unscale_dispatched, "unscale_f32 dispatched");
    check_public();
    printf("vector kernels: AVX2 %s, F16C %s\n", vec ? "run" : "not available (scalar loops checked)",
           f16c ? "run" : "not available");
    return at_finish("amp-vec");
}
