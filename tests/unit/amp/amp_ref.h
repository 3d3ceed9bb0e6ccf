/* Independent long-hand float64 references for the amp tests: round-to-nearest-even of a real number onto the fp16 /
   bf16 grids, written from the IEEE 754 definition (quantum, rint, re-encode) rather than from bit tricks. */
#ifndef AMP_REF_H
#define AMP_REF_H
#include <math.h>
#include <stdint.h>
#include <string.h>

/* Encode the exact value v (already on the grid) of a binary format with `mbits` mantissa bits, exponent bias
   `bias` and max biased exponent `emax_biased` (all ones = Inf/NaN). */
static inline uint16_t ref_encode(double v, int neg, int mbits, int bias) {
    int ebits_max = (1 << (15 - mbits)) - 1; /* all-ones exponent */
    double min_normal = ldexp(1.0, 1 - bias);
    uint32_t bits;
    if (v == 0.0) bits = 0;
    else if (v < min_normal) bits = (uint32_t)(v / ldexp(1.0, 1 - bias - mbits)); /* subnormal: v / 2^(emin-m) */
    else {
        int e = ilogb(v);
        uint32_t mant = (uint32_t)(v / ldexp(1.0, e - mbits)) - (1u << mbits);
        if (e + bias >= ebits_max) bits = (uint32_t)ebits_max << mbits; /* Inf */
        else bits = ((uint32_t)(e + bias) << mbits) | mant;
    }
    return (uint16_t)(bits | (neg ? 0x8000u : 0u));
}

/* RNE of float f onto a format with mbits mantissa bits and exponent bias; NaN → 0x7FFF (CUDA's canonical NaN). */
static inline uint16_t ref_round(float f, int mbits, int bias) {
    double x = (double)f, a, q, r, maxfin;
    int neg, ebits_max = (1 << (15 - mbits)) - 1, e;
    if (isnan(x)) return 0x7fff;
    neg = signbit(x) != 0;
    a = fabs(x);
    if (isinf(a)) return (uint16_t)(((uint32_t)ebits_max << mbits) | (neg ? 0x8000u : 0u));
    /* largest finite = (2 - 2^-m) * 2^emax; values >= largest + half an ulp round to Inf (a tie rounds to the even Inf) */
    maxfin = (2.0 - ldexp(1.0, -mbits)) * ldexp(1.0, ebits_max - 1 - bias);
    if (a >= maxfin + ldexp(1.0, ebits_max - 1 - bias - mbits - 1))
        return (uint16_t)(((uint32_t)ebits_max << mbits) | (neg ? 0x8000u : 0u));
    e = a == 0.0 ? (1 - bias) : ilogb(a);
    if (e < 1 - bias) e = 1 - bias;           /* subnormal range shares the smallest normal quantum */
    q = ldexp(1.0, e - mbits);
    r = rint(a / q);                          /* a/q is exact in double; rint rounds half to even */
    return ref_encode(r * q, neg, mbits, bias);
}
static inline uint16_t ref_f32_to_f16(float f) { return ref_round(f, 10, 15); }
static inline uint16_t ref_f32_to_bf16(float f) { return ref_round(f, 7, 127); }

/* Decode a 16-bit pattern to double from the definition. Returns NAN for NaN patterns. */
static inline double ref_decode(uint16_t h, int mbits, int bias) {
    int ebits_max = (1 << (15 - mbits)) - 1;
    int e = (h >> mbits) & ebits_max;
    uint32_t m = h & ((1u << mbits) - 1u);
    double s = (h & 0x8000u) ? -1.0 : 1.0, v;
    if (e == ebits_max) return m ? NAN : s * INFINITY;
    if (e == 0) v = ldexp((double)m, 1 - bias - mbits);
    else v = ldexp((double)(m | (1u << mbits)), e - bias - mbits);
    return s * v;
}

static inline float bits_f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t f_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* The boundary test set: every exponent and sign, with mantissas around every rounding position (13..23 dropped
   bits covers bf16 (16) and every fp16 subnormal shift), plus the extremes. Returns the count written (≤ cap). */
static inline size_t ref_boundary_set(uint32_t *out, size_t cap) {
    size_t n = 0;
    uint32_t e, sgn, sh, k, d;
    static const uint32_t ks[] = {0, 1, 2, 3, 0x55, 0x3fe, 0x3ff};
    for (sgn = 0; sgn < 2; ++sgn)
        for (e = 0; e < 256; ++e) {
            uint32_t base = (sgn << 31) | (e << 23);
            uint32_t fixed[] = {0, 1, 2, 0x7fffff, 0x7ffffe, 0x400000, 0x400001, 0x3fffff};
            for (k = 0; k < sizeof fixed / sizeof fixed[0] && n < cap; ++k) out[n++] = base | fixed[k];
            for (sh = 12; sh <= 23; ++sh) {
                uint32_t half = 1u << (sh - 1);
                for (k = 0; k < sizeof ks / sizeof ks[0]; ++k) {
                    uint32_t hi = (ks[k] << sh) & 0x7fffffu;
                    uint32_t deltas[] = {half - 1, half, half + 1, 0, (1u << sh) - 1, 1};
                    for (d = 0; d < 6 && n < cap; ++d) out[n++] = base | ((hi + deltas[d]) & 0x7fffffu);
                }
            }
        }
    return n;
}
#endif
