/* accel_collectives.h's F16/BF16 reduction loop (the MPI user ops' body, accel__coll_reduce16) in a TU of its own
   (it defines ACCEL_IMPLEMENTATION to reach the static loop), against a long-hand reference that shares nothing with
   the code under test: each 16-bit code decoded with ldexp, the pair combined in double (exact for every product and
   fp16 sum; a bf16 sum is rounded once to double, and double → float of it is still the correctly rounded fp32 sum,
   as 53 >= 2 * 24 + 2), C's double → float conversion (the fp32 result the scalar rule computes), and that float
   judged against the returned code: the code's value must be the nearest 16-bit value, a tie going to the even code,
   +-Inf from the midpoint past the largest finite value on, 0x7FFF exactly for NaN (the scalar codec's rule), signs
   of zeros kept. Checked:
   - SUM, fp16 and bf16: every pair of 16-bit inputs (2^32 each: all specials, subnormals, overflows and ties);
   - PROD / MAX / MIN, both types: every input against 1,024 structured partners (specials, subnormals, boundaries,
     random codes) — the scalar element accel__coll_combine16 too, for all four ops, so the lanes and the scalar rule
     are judged by the same reference;
   - every length 0..40 at offsets 0..9 of both buffers (unaligned, odd tails), guard elements untouched.
   The entry point is the dispatched one: with AVX2 (+F16C) the lanes run on every multiple of 8 and the scalar
   elements on the tail; without them (or built with ACCEL_COLL_NO_DISPATCH on a baseline target) only the scalar
   loop runs, and the last line says which. The sanitizer build takes every 16th first operand of the 2^32 pairs. */
#define ACCEL_IMPLEMENTATION
#include "accel.h"
#include "accel_collectives.h"
#include "accel_test.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *tn(int bf) { return bf ? "bf16" : "f16"; }
static const char *on(int op) {
    return op == ACCEL_COLL_SUM ? "sum" : op == ACCEL_COLL_PROD ? "prod" : op == ACCEL_COLL_MAX ? "max" : "min";
}

/* the reference tables of one type: value of every code; for the finite magnitudes k, the distance to the next
   smaller (down) and next larger (up) magnitude (for the largest finite, up is its binade's step) */
typedef struct ref16 {
    double val[65536], down[0x8000], up[0x8000], inf_from; /* |x| >= inf_from rounds to Inf */
    uint16_t inf;                                            /* the +Inf code */
} ref16;
static ref16 R[2];

static double decode(uint16_t h, int bf) {
    int mbits = bf ? 7 : 10, ebits = bf ? 8 : 5, bias = bf ? 127 : 15;
    int e = (h >> mbits) & ((1 << ebits) - 1), m = h & ((1 << mbits) - 1);
    double v;
    if (e == (1 << ebits) - 1) v = m ? NAN : INFINITY;
    else if (e == 0) v = ldexp(m, 1 - bias - mbits);
    else v = ldexp(m + (1 << mbits), e - bias - mbits);
    return h & 0x8000 ? -v : v;
}
static void ref_init(int bf) {
    ref16 *r = &R[bf];
    int k;
    r->inf = bf ? 0x7f80 : 0x7c00;
    for (k = 0; k < 65536; ++k) r->val[k] = decode((uint16_t)k, bf);
    for (k = 0; k < r->inf; ++k) {
        r->down[k] = k ? r->val[k] - r->val[k - 1] : 0;
        r->up[k] = k + 1 < r->inf ? r->val[k + 1] - r->val[k] : r->val[k] - r->val[k - 1];
    }
    r->inf_from = r->val[r->inf - 1] + r->up[r->inf - 1] / 2;
}
/* 1 when code got is the scalar rule's rounding of the fp32 value f */
static int judge(float f, uint16_t got, int bf) {
    const ref16 *r = &R[bf];
    double a = fabs((double)f), d;
    unsigned k = got & 0x7fffu;
    if (isnan(f)) return got == 0x7fff;
    if ((got >> 15) != (signbit(f) ? 1u : 0u)) return 0;
    if (k == r->inf) return a >= r->inf_from;
    if (k > r->inf) return 0;
    d = a - r->val[k];
    if (d > 0) return d < r->up[k] / 2 || (d == r->up[k] / 2 && (k & 1) == 0);
    if (d < 0) return -d < r->down[k] / 2 || (-d == r->down[k] / 2 && (k & 1) == 0);
    return 1;
}
/* the fp32 value of in op inout (the MPI user op's order: x from in, y from inout) */
static float ref_f32(uint16_t in, uint16_t inout, int op, int bf) {
    double x = R[bf].val[in], y = R[bf].val[inout];
    switch (op) {
    case ACCEL_COLL_MAX: return (float)(x > y ? x : y);
    case ACCEL_COLL_MIN: return (float)(x < y ? x : y);
    case ACCEL_COLL_PROD: return (float)(x * y);
    default: return (float)(x + y);
    }
}
static long report(long bad, uint16_t in, uint16_t inout, uint16_t got, int op, int bf, const char *what) {
    if (bad < 5)
        fprintf(stderr, "%s %s %s: in 0x%04x inout 0x%04x -> 0x%04x (fp32 %.9g)\n", what, tn(bf), on(op),
                (unsigned)in, (unsigned)inout, (unsigned)got, (double)ref_f32(in, inout, op, bf));
    return bad + 1;
}

/* every pair (a, b): in = a (all lanes), inout = every code b */
static void all_pairs_sum(int bf) {
    uint16_t *in = (uint16_t *)malloc(65536 * 2), *io = (uint16_t *)malloc(65536 * 2);
    long bad = 0;
    unsigned a, b;
#ifdef __SANITIZE_ADDRESS__
    const unsigned stride = 16;
#else
    const unsigned stride = 1;
#endif
    at_context = bf ? "sum bf16, every pair" : "sum f16, every pair";
    if (!in || !io) { AT_CHECK(!"out of memory"); free(in); free(io); return; }
    for (a = 0; a < 65536; a += stride) {
        const double x = R[bf].val[a];
        for (b = 0; b < 65536; ++b) { in[b] = (uint16_t)a; io[b] = (uint16_t)b; }
        accel__coll_reduce16(in, io, 65536, ACCEL_COLL_SUM, bf);
        for (b = 0; b < 65536; ++b)
            if (!judge((float)(x + R[bf].val[b]), io[b], bf))
                bad = report(bad, (uint16_t)a, (uint16_t)b, io[b], ACCEL_COLL_SUM, bf, "lanes");
    }
    AT_EQ_INT(bad, 0);
    free(in);
    free(io);
}

/* 1,024 partners: the specials of both encodings with both signs, subnormal and overflow boundaries, codes around
   1, then random codes */
static void partners(uint16_t *p, int bf) {
    static const uint16_t f16[] = {0x0000, 0x0001, 0x0002, 0x0003, 0x01ff, 0x0200, 0x03ff, 0x0400, 0x0401,
                                   0x3bff, 0x3c00, 0x3c01, 0x3800, 0x1400, 0x1401, 0x7bfe, 0x7bff, 0x7c00,
                                   0x7c01, 0x7e00, 0x7fff, 0x5800, 0x57ff, 0x0c00, 0x2400, 0x2401};
    static const uint16_t b16[] = {0x0000, 0x0001, 0x0002, 0x0003, 0x003f, 0x0040, 0x007f, 0x0080, 0x0081,
                                   0x3f7f, 0x3f80, 0x3f81, 0x3f00, 0x3b80, 0x3b81, 0x7f7e, 0x7f7f, 0x7f80,
                                   0x7f81, 0x7fc0, 0x7fff, 0x4b00, 0x4aff, 0x0100, 0x1f80, 0x1f81};
    const uint16_t *sp = bf ? b16 : f16;
    uint32_t s = 0x12345678u;
    int i, n = (int)(sizeof f16 / sizeof f16[0]);
    for (i = 0; i < 1024; ++i) {
        s = s * 1664525u + 1013904223u;
        p[i] = i < 2 * n ? (uint16_t)(sp[i % n] | (i >= n ? 0x8000 : 0)) : (uint16_t)(s >> 16);
    }
}
static void ops_structured(int bf) {
    static const int ops[4] = {ACCEL_COLL_SUM, ACCEL_COLL_PROD, ACCEL_COLL_MAX, ACCEL_COLL_MIN};
    uint16_t p[1024], *in = (uint16_t *)malloc(65536 * 2), *io = (uint16_t *)malloc(65536 * 2);
    long bad = 0, bad_scalar = 0;
    unsigned a;
    int j, o;
    at_context = bf ? "sum prod max min bf16, every input x 1024 partners" : "sum prod max min f16, 1024 partners";
    if (!in || !io) { AT_CHECK(!"out of memory"); free(in); free(io); return; }
    partners(p, bf);
    for (o = 0; o < 4; ++o)
        for (j = 0; j < 1024; ++j) {
            /* both operand orders: the partner as in, then as inout */
            for (a = 0; a < 65536; ++a) { in[a] = p[j]; io[a] = (uint16_t)a; }
            accel__coll_reduce16(in, io, 65536, ops[o], bf);
            for (a = 0; a < 65536; ++a) {
                if (!judge(ref_f32(p[j], (uint16_t)a, ops[o], bf), io[a], bf))
                    bad = report(bad, p[j], (uint16_t)a, io[a], ops[o], bf, "lanes");
                if (!judge(ref_f32(p[j], (uint16_t)a, ops[o], bf), accel__coll_combine16(p[j], (uint16_t)a, ops[o], bf),
                           bf))
                    bad_scalar = report(bad_scalar, p[j], (uint16_t)a,
                                        accel__coll_combine16(p[j], (uint16_t)a, ops[o], bf), ops[o], bf, "scalar");
            }
            for (a = 0; a < 65536; ++a) { in[a] = (uint16_t)a; io[a] = p[j]; }
            accel__coll_reduce16(in, io, 65536, ops[o], bf);
            for (a = 0; a < 65536; ++a)
                if (!judge(ref_f32((uint16_t)a, p[j], ops[o], bf), io[a], bf))
                    bad = report(bad, (uint16_t)a, p[j], io[a], ops[o], bf, "lanes");
        }
    AT_EQ_INT(bad, 0);
    AT_EQ_INT(bad_scalar, 0);
    free(in);
    free(io);
}

/* lengths 0..40 at offsets 0..9 of in and of inout (independently): results inside, guards outside untouched */
static void tails(int bf) {
    static const int ops[4] = {ACCEL_COLL_SUM, ACCEL_COLL_PROD, ACCEL_COLL_MAX, ACCEL_COLL_MIN};
    uint16_t src[64], in[64], io[64], keep[64];
    uint32_t s = 777u;
    long bad = 0;
    int n, oi, oo, o, i;
    at_context = bf ? "bf16 lengths 0..40, offsets 0..9" : "f16 lengths 0..40, offsets 0..9";
    for (n = 0; n <= 40; ++n)
        for (oi = 0; oi < 10; ++oi)
            for (oo = 0; oo < 10; ++oo)
                for (o = 0; o < 4; ++o) {
                    for (i = 0; i < 64; ++i) {
                        s = s * 1664525u + 1013904223u;
                        src[i] = (uint16_t)(s >> 16);
                        in[i] = (uint16_t)s;
                        io[i] = keep[i] = src[i];
                    }
                    accel__coll_reduce16(in + oi, io + oo, (size_t)n, ops[o], bf);
                    for (i = 0; i < 64; ++i) {
                        int k = i - oo;
                        if (k >= 0 && k < n) {
                            if (!judge(ref_f32(in[oi + k], keep[i], ops[o], bf), io[i], bf))
                                bad = report(bad, in[oi + k], keep[i], io[i], ops[o], bf, "tail");
                        } else if (io[i] != keep[i]) {
                            bad = report(bad, 0, keep[i], io[i], ops[o], bf, "guard");
                        }
                    }
                }
    AT_EQ_INT(bad, 0);
}

int main(void) {
    int bf, lanes16 = 0, lanes_bf16 = 0;
    ref_init(0);
    ref_init(1);
    /* the reference itself on cases worked by hand */
    at_context = "reference";
    AT_CHECK(R[0].inf_from == 65520.0 && R[1].inf_from == ldexp(511, 119));
    AT_CHECK(judge(1.0f + 0x1p-11f, 0x3c00, 0) && !judge(1.0f + 0x1p-11f, 0x3c01, 0)); /* tie → even 1.0 */
    AT_CHECK(judge(1.0f + 3 * 0x1p-11f, 0x3c02, 0) && !judge(1.0f + 3 * 0x1p-11f, 0x3c01, 0));
    AT_CHECK(judge(0x1p-25f, 0x0000, 0) && judge(0x1.000002p-25f, 0x0001, 0) && judge(-0.0f, 0x8000, 0));
    AT_CHECK(!judge(-0.0f, 0x0000, 0) && judge(65519.0f, 0x7bff, 0) && judge(65520.0f, 0x7c00, 0));
    AT_CHECK(judge(NAN, 0x7fff, 1) && !judge(NAN, 0x7fc0, 1) && !judge(1.0f, 0x7fff, 1));
    AT_CHECK(judge(1.0f + 0x1p-8f, 0x3f80, 1) && judge(1.0f + 3 * 0x1p-8f, 0x3f82, 1));
#ifdef ACCEL__COLL_AVX2
    lanes_bf16 = accel__cpu_has(ACCEL__CPU_AVX2);
#endif
#ifdef ACCEL__COLL_F16_LANES
    lanes16 = accel__cpu_has(ACCEL__CPU_AVX2 | ACCEL__CPU_F16C);
#endif
    for (bf = 0; bf < 2; ++bf) {
        tails(bf);
        ops_structured(bf);
        all_pairs_sum(bf);
    }
    printf("f16 loop: %s; bf16 loop: %s\n", lanes16 ? "AVX2 + F16C lanes" : "scalar",
           lanes_bf16 ? "AVX2 lanes" : "scalar");
    return at_finish("coll-vec");
}
