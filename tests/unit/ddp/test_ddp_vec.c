/* accel_ddp.h's host loops of the communication hooks in a TU of their own (it defines ACCEL_IMPLEMENTATION to reach
   the static loops): the AVX2 + F16C loop gives the bits of the scalar element functions (the ones
   tests/mpi/ddp/hooks_reference.py checks against torch's fp16/bf16_compress_hook) for
   - compress of fp32 gradients, no wrapper, p = 3 (a true division): all 2^32 fp32 inputs to fp16 and to bf16;
   - compress of every (gradient dtype, wrapper, hook dtype, p in 1 2 3 4 7): 2^20 random bits with the specials
     (NaN with payloads, +-Inf, +-0, subnormals, the fp16 overflow and rounding boundaries) for fp32 gradients,
     all 65536 inputs for fp16 / bf16 gradients;
   - decompress of all 65536 16-bit values for every (hook dtype, wrapper, gradient dtype), fp32 output compared bit
     for bit (NaN payloads included);
   - every length 0..40 at offsets 0..9 through the dispatched entry point, guard elements untouched.
   Without AVX2 + F16C (or built with ACCEL_DDP_NO_DISPATCH on a baseline target) only the dispatched entry point (then
   the scalar loop) is checked and the line says so. */
#define ACCEL_IMPLEMENTATION
#include "accel.h"
#include "accel_collectives.h"
#include "accel_ddp.h"
#include "accel_test.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rs = 0x9E3779B97F4A7C15ull;
static uint32_t rnd32(void) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return (uint32_t)(rs >> 16); }
static float bitsf(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

typedef void (*host_fn)(void *, uint16_t *, size_t, int, int, int, float, int);
static void dispatched(void *g, uint16_t *c, size_t n, int gdt, int wdt, int hdt, float p, int compress) {
    accel__ddp_hook_host(g, c, n, gdt, wdt, hdt, p, compress);
}

static const int NONE = (int)ACCEL_DTYPE_COUNT;
static const char *dn(int dt) {
    return dt == (int)ACCEL_F32 ? "f32" : dt == (int)ACCEL_F16 ? "f16" : dt == (int)ACCEL_BF16 ? "bf16" : "none";
}
static size_t esize(int dt) { return dt == (int)ACCEL_F32 ? 4 : 2; }

/* the specials: every fp32 class and the boundaries of both 16-bit roundings */
static uint32_t special_bits(uint32_t k) {
    static const uint32_t sp[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u,
                                  0x7f800001u, 0x7fbfffffu, 0x00000001u, 0x807fffffu, 0x477fe000u, 0x477fefffu,
                                  0x477ff000u, 0xc77ff000u, 0x33000000u, 0x33000001u, 0x387fc000u, 0x38800000u,
                                  0x3f808000u, 0x3f818000u, 0x3f800001u, 0x7f7fffffu, 0xff7fffffu, 0x4b800000u};
    return sp[k % (sizeof sp / sizeof sp[0])] ^ (k & 0x100u ? 0x80000000u : 0u);
}

/* compress n inputs (src, gradient dtype gdt) through f and through the scalar element; returns the mismatches */
static long cmp_compress(host_fn f, const void *src, size_t n, int gdt, int wdt, int hdt, float p, uint16_t *got,
                         const char *name) {
    size_t i;
    long bad = 0;
    f((void *)(uintptr_t)src, got, n, gdt, wdt, hdt, p, 1);
    for (i = 0; i < n; ++i) {
        uint16_t want = accel__ddp_compress_elem(src, i, gdt, wdt, hdt, p);
        if (got[i] != want) {
            if (bad < 3) {
                uint32_t in = gdt == (int)ACCEL_F32 ? ((const uint32_t *)src)[i] : ((const uint16_t *)src)[i];
                fprintf(stderr, "%s: grad %s 0x%08x wrapper %s hook %s p %g: 0x%04x, scalar 0x%04x\n", name, dn(gdt),
                        (unsigned)in, dn(wdt), dn(hdt), (double)p, (unsigned)got[i], (unsigned)want);
            }
            ++bad;
        }
    }
    return bad;
}

#ifdef ACCEL__DDP_AVX2 /* only the AVX2 loops use it (a NO_DISPATCH build without -mavx2 has none) */
static void exhaustive_f32(host_fn f, int hdt, const char *name) {
    const size_t chunk = (size_t)1 << 20;
    uint32_t *s = (uint32_t *)malloc(chunk * 4);
    uint16_t *d = (uint16_t *)malloc(chunk * 2);
    uint64_t base;
    long bad = 0;
    size_t i;
    at_context = name;
    if (!s || !d) { AT_CHECK(!"out of memory"); free(s); free(d); return; }
#ifdef __SANITIZE_ADDRESS__
    const uint64_t stride = (uint64_t)chunk * 16; /* the sanitizer build: every 16th chunk */
#else
    const uint64_t stride = (uint64_t)chunk;
#endif
    for (base = 0; base < ((uint64_t)1 << 32); base += stride) {
        for (i = 0; i < chunk; ++i) s[i] = (uint32_t)(base + i);
        bad += cmp_compress(f, s, chunk, (int)ACCEL_F32, NONE, hdt, 3.0f, d, name);
    }
    AT_EQ_INT(bad, 0);
    free(s);
    free(d);
}
#endif

static void combos_compress(host_fn f, const char *name) {
    static const int gdts[3] = {ACCEL_F32, ACCEL_F16, ACCEL_BF16}, hdts[2] = {ACCEL_F16, ACCEL_BF16};
    static const float ps[5] = {1, 2, 3, 4, 7};
    const size_t n = (size_t)1 << 20;
    uint32_t *s32 = (uint32_t *)malloc(n * 4);
    uint16_t *s16 = (uint16_t *)malloc(65536 * 2), *d = (uint16_t *)malloc(n * 2);
    int g, w, h, k;
    long bad = 0;
    size_t i;
    at_context = name;
    if (!s32 || !s16 || !d) { AT_CHECK(!"out of memory"); free(s32); free(s16); free(d); return; }
    for (i = 0; i < n; ++i) s32[i] = i % 13 == 7 ? special_bits((uint32_t)i) : rnd32();
    for (i = 0; i < 65536; ++i) s16[i] = (uint16_t)i;
    for (g = 0; g < 3; ++g)
        for (w = 0; w < 3; ++w)
            for (h = 0; h < 2; ++h)
                for (k = 0; k < 5; ++k) {
                    int wdt = w == 0 ? NONE : hdts[w - 1];
                    if (gdts[g] == (int)ACCEL_F32)
                        bad += cmp_compress(f, s32, n, gdts[g], wdt, hdts[h], ps[k], d, name);
                    else
                        bad += cmp_compress(f, s16, 65536, gdts[g], wdt, hdts[h], ps[k], d, name);
                }
    AT_EQ_INT(bad, 0);
    free(s32);
    free(s16);
    free(d);
}

static void all_decompress(host_fn f, const char *name) {
    static const int gdts[3] = {ACCEL_F32, ACCEL_F16, ACCEL_BF16}, hdts[2] = {ACCEL_F16, ACCEL_BF16};
    uint16_t *c = (uint16_t *)malloc(65536 * 2);
    unsigned char *got = (unsigned char *)malloc(65536 * 4), *want = (unsigned char *)malloc(65536 * 4);
    int g, w, h;
    long bad = 0;
    size_t i;
    at_context = name;
    if (!c || !got || !want) { AT_CHECK(!"out of memory"); free(c); free(got); free(want); return; }
    for (i = 0; i < 65536; ++i) c[i] = (uint16_t)i;
    for (g = 0; g < 3; ++g)
        for (w = 0; w < 3; ++w)
            for (h = 0; h < 2; ++h) {
                int wdt = w == 0 ? NONE : hdts[w - 1];
                size_t es = esize(gdts[g]);
                memset(got, 0xa5, 65536 * 4);
                memset(want, 0x5a, 65536 * 4);
                f(got, c, 65536, gdts[g], wdt, hdts[h], 2.0f, 0);
                for (i = 0; i < 65536; ++i) accel__ddp_decompress_elem(want, c, i, gdts[g], wdt, hdts[h]);
                for (i = 0; i < 65536; ++i)
                    if (memcmp(got + i * es, want + i * es, es)) {
                        if (bad < 3)
                            fprintf(stderr, "%s: hook %s 0x%04x wrapper %s grad %s differs\n", name, dn(hdts[h]),
                                    (unsigned)i, dn(wdt), dn(gdts[g]));
                        ++bad;
                    }
            }
    AT_EQ_INT(bad, 0);
    free(c);
    free(got);
    free(want);
}

/* every length 0..40 at every offset 0..9 in both directions, guards around the destination untouched */
static void tails(host_fn f, const char *name) {
    static const int cases[4][3] = {{ACCEL_F32, -1, ACCEL_F16}, {ACCEL_F32, ACCEL_BF16, ACCEL_F16},
                                    {ACCEL_BF16, -1, ACCEL_BF16}, {ACCEL_F16, ACCEL_F16, ACCEL_BF16}};
    uint32_t s32[64];
    uint16_t s16[64], d[64], c[64];
    float g32[64];
    size_t off, n, i;
    int k;
    long bad = 0;
    at_context = name;
    for (i = 0; i < 64; ++i) {
        s32[i] = i % 7 == 3 ? special_bits((uint32_t)i) : rnd32();
        s16[i] = (uint16_t)rnd32();
    }
    for (k = 0; k < 4; ++k) {
        int gdt = cases[k][0], wdt = cases[k][1] < 0 ? NONE : cases[k][1], hdt = cases[k][2];
        const void *src = gdt == (int)ACCEL_F32 ? (const void *)s32 : (const void *)s16;
        for (off = 0; off < 10; ++off)
            for (n = 0; n <= 40; ++n) {
                /* compress: src + off → d + off */
                for (i = 0; i < 64; ++i) d[i] = 0xabcd;
                f((void *)((const unsigned char *)src + off * esize(gdt)), d + off, n, gdt, wdt, hdt, 3.0f, 1);
                for (i = 0; i < 64; ++i) {
                    uint16_t want = i >= off && i < off + n ? accel__ddp_compress_elem(src, i, gdt, wdt, hdt, 3.0f)
                                                             : 0xabcd;
                    if (d[i] != want) ++bad;
                }
                /* decompress: s16 + off → the gradient at + off */
                for (i = 0; i < 64; ++i) { g32[i] = -7.0f; c[i] = 0xabcd; }
                memcpy(c, s16, sizeof c);
                if (gdt == (int)ACCEL_F32) {
                    f(g32 + off, c + off, n, gdt, wdt, hdt, 3.0f, 0);
                    for (i = 0; i < 64; ++i) {
                        float want = -7.0f;
                        if (i >= off && i < off + n) accel__ddp_decompress_elem(&want, c + i, 0, gdt, wdt, hdt);
                        if (memcmp(&g32[i], &want, 4)) ++bad;
                    }
                } else {
                    uint16_t g16[64];
                    for (i = 0; i < 64; ++i) g16[i] = 0xabcd;
                    f(g16 + off, c + off, n, gdt, wdt, hdt, 3.0f, 0);
                    for (i = 0; i < 64; ++i) {
                        uint16_t want = 0xabcd;
                        if (i >= off && i < off + n) accel__ddp_decompress_elem(&want, c + i, 0, gdt, wdt, hdt);
                        if (g16[i] != want) ++bad;
                    }
                }
            }
    }
    AT_EQ_INT(bad, 0);
}

int main(void) {
    int vec = 0;
    (void)bitsf;
#ifdef ACCEL__DDP_AVX2
    vec = accel__cpu_has(ACCEL__CPU_AVX2 | ACCEL__CPU_F16C);
    if (vec) {
        exhaustive_f32(accel__ddp_hook_host_avx2, ACCEL_F16, "compress f32->f16 / 3 AVX2, all 2^32 inputs");
        exhaustive_f32(accel__ddp_hook_host_avx2, ACCEL_BF16, "compress f32->bf16 / 3 AVX2, all 2^32 inputs");
        combos_compress(accel__ddp_hook_host_avx2, "compress AVX2, every dtype, wrapper and p");
        all_decompress(accel__ddp_hook_host_avx2, "decompress AVX2, all 16-bit values");
        tails(accel__ddp_hook_host_avx2, "AVX2, lengths and offsets");
    }
#endif
    combos_compress(dispatched, "compress dispatched, every dtype, wrapper and p");
    all_decompress(dispatched, "decompress dispatched, all 16-bit values");
    tails(dispatched, "dispatched, lengths and offsets");
    printf("vector loop: %s\n", vec ? "AVX2 + F16C run" : "not available (the scalar loop checked)");
    return at_finish("ddp-vec");
}
