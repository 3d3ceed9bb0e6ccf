/* Independent long-hand references for the fp8 tests, written from the format definitions (OCP 8-bit floating point
   / the E4M3 and E5M2 of cuda_fp8.h) in float64 arithmetic: a value is rounded onto the format's grid with rint
   (round half to even) on an exact quotient, then re-encoded field by field. Nothing here shares code with
   accel_amp.h.
     E4M3: bias 7, 3 mantissa bits, no Inf, S.1111.111 is NaN, largest 448 (S.1111.110), smallest subnormal 2^-9.
     E5M2: bias 15, 2 mantissa bits, S.11111.00 = Inf, S.11111.xx (xx != 0) NaN, largest 57344, subnormal 2^-16.
   Rules stated for CUDA's conversions (and checked against them elsewhere): NaN in → 0x7F (no sign); a finite value
   is rounded to nearest even on the grid extended past the largest finite value; a result above the largest finite
   value (and ±Inf) saturates to ±largest (satfinite) or becomes sign|0x7F (E4M3) / ±Inf (E5M2) otherwise. */
#ifndef FP8_REF_H
#define FP8_REF_H
#include <math.h>
#include <stdint.h>
#include <string.h>

typedef struct fp8_fmt {
    int mbits, bias;
    double maxfin;
} fp8_fmt;
static const fp8_fmt FP8_E4M3 = {3, 7, 448.0};
static const fp8_fmt FP8_E5M2 = {2, 15, 57344.0};

/* the field pattern (no sign) of a value already on the grid and <= maxfin */
static inline uint8_t ref8_encode(double v, fp8_fmt f) {
    double min_normal = ldexp(1.0, 1 - f.bias);
    int e;
    if (v == 0.0) return 0;
    if (v < min_normal) return (uint8_t)(v / ldexp(1.0, 1 - f.bias - f.mbits)); /* subnormal: count of quanta */
    e = ilogb(v);
    return (uint8_t)(((e + f.bias) << f.mbits) | ((int)(v / ldexp(1.0, e - f.mbits)) - (1 << f.mbits)));
}

/* x (any double that is a float value) → fp8 bits */
static inline uint8_t ref8_from_double(double x, fp8_fmt f, int satfinite) {
    uint8_t sign = signbit(x) ? 0x80 : 0x00;
    double a = fabs(x), q, r;
    int e;
    int e5m2 = f.mbits == 2;
    if (isnan(x)) return 0x7f;
    if (isinf(a)) return (uint8_t)(sign | (satfinite ? ref8_encode(f.maxfin, f) : (e5m2 ? 0x7c : 0x7f)));
    e = a == 0.0 ? (1 - f.bias) : ilogb(a);
    if (e < 1 - f.bias) e = 1 - f.bias; /* the subnormal range shares the smallest normal quantum */
    q = ldexp(1.0, e - f.mbits);
    r = rint(a / q) * q; /* a / q is exact (a power of two apart); rint: half to even */
    if (r > f.maxfin) return (uint8_t)(sign | (satfinite ? ref8_encode(f.maxfin, f) : (e5m2 ? 0x7c : 0x7f)));
    return (uint8_t)(sign | ref8_encode(r, f));
}

/* fp8 bits → value; NAN for NaN codes */
static inline double ref8_decode(uint8_t b, fp8_fmt f) {
    int emask = (1 << (7 - f.mbits)) - 1;
    int e = (b >> f.mbits) & emask, m = b & ((1 << f.mbits) - 1);
    double s = (b & 0x80) ? -1.0 : 1.0;
    if (f.mbits == 3 && e == emask && m == 7) return NAN;
    if (f.mbits == 2 && e == emask) return m ? NAN : s * INFINITY;
    if (e == 0) return s * ldexp((double)m, 1 - f.bias - f.mbits);
    return s * ldexp((double)(m + (1 << f.mbits)), e - f.bias - f.mbits);
}

static inline float ref8_bits_f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t ref8_f_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

#endif
