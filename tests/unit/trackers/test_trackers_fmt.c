/* accel_trackers.h's number formatting in a TU of its own (it defines ACCEL_IMPLEMENTATION to reach the static
   helpers). The reference is the C library: for N = 1..17 the nearest N-digit decimal ("%.{N-1}e", glibc rounds
   exactly) and, when v is a power of two (its rounding interval reaches only a quarter ulp below v), the N-digit
   decimal just above it; the first N where one of them reads back as v (strtod) gives the shortest, the nearer
   one when both do. The formatter must give the same digits and exponent, and its text must read back as v.
   Cases: uniformly random bit patterns, random short decimals (1-17 digits, any exponent, through strtod), every
   power of two and of ten and their neighbours, the first 100000 and the last subnormals, small integers, the
   limits. Counts: argv[1] random bit patterns, argv[2] random short decimals (default 1000000 and 500000).
   `test_trackers_fmt --dump N` prints "hexbits text" for N random doubles and the special cases instead (what
   check_fmt.py compares with Python's repr and json). */
#define ACCEL_IMPLEMENTATION
#include "accel.h"
#include "accel_trackers.h"
#include "accel_test.h"
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rs = 0x9E3779B97F4A7C15ull;
static uint64_t rnd64(void) { /* xorshift64* */
    rs ^= rs >> 12; rs ^= rs << 25; rs ^= rs >> 27;
    return rs * 0x2545F4914F6CDD1Dull;
}
static double bits_d(uint64_t u) { double d; memcpy(&d, &u, 8); return d; }
static uint64_t d_bits(double d) { uint64_t u; memcpy(&u, &d, 8); return u; }

/* "%.{n-1}e" of |v| split into digits (trailing zeros dropped) and the exponent of the first digit */
static void ref_digits(double v, int n, char *dig, int *nd, int *e10) {
    char s[64];
    const char *p;
    int k = 0;
    snprintf(s, sizeof s, "%.*e", n - 1, fabs(v));
    for (p = s; *p && *p != 'e'; ++p)
        if (*p >= '0' && *p <= '9') dig[k++] = *p;
    *e10 = atoi(p + 1);
    while (k > 1 && dig[k - 1] == '0') --k;
    dig[k] = 0;
    *nd = k;
}

static int reads_back(const char *dig, int nd, int e10, double v) {
    char s[64];
    snprintf(s, sizeof s, "%c.%se%d", dig[0], nd > 1 ? dig + 1 : "", e10);
    return strtod(s, NULL) == fabs(v);
}

/* dig + 1 unit in the n-th digit (n >= nd: the digits padded with zeros to n) */
static void next_up(const char *dig, int nd, int e10, int n, char *out, int *ond, int *oe10) {
    int i;
    for (i = 0; i < n; ++i) out[i] = i < nd ? dig[i] : '0';
    for (i = n - 1; i >= 0 && out[i] == '9'; --i) out[i] = '0';
    *oe10 = e10;
    if (i >= 0) out[i]++;
    else { memmove(out + 1, out, (size_t)n); out[0] = '1'; ++n; ++*oe10; }
    while (n > 1 && out[n - 1] == '0') --n;
    out[n] = 0;
    *ond = n;
}

/* the reference shortest digits of finite nonzero v */
static void reference(double v, char *dig, int *nd, int *e10) {
    uint64_t b = d_bits(v);
    int pow2 = (b & 0xFFFFFFFFFFFFFull) == 0 && ((b >> 52) & 0x7FF) > 1;
    int n;
    for (n = 1; n <= 17; ++n) {
        char up[24];
        int und, ue;
        ref_digits(v, n, dig, nd, e10);
        if (reads_back(dig, *nd, *e10, v)) return;
        if (pow2) {
            next_up(dig, *nd, *e10, n, up, &und, &ue);
            if (reads_back(up, und, ue, v)) { memcpy(dig, up, (size_t)und + 1); *nd = und; *e10 = ue; return; }
        }
    }
    ref_digits(v, 17, dig, nd, e10); /* not reached: 17 digits always read back */
}

static long nbad, nchecked;

static void check(double v) {
    char want[24], got[24], text[40];
    int wnd, we, gk, gnd;
    uint64_t d;
    size_t len;
    if (v != v || v == 0 || fabs(v) > DBL_MAX) return;
    ++nchecked;
    reference(v, want, &wnd, &we);
    d = accel__track_shortest(v, &gk);
    while (d % 10 == 0) { d /= 10; ++gk; }
    snprintf(got, sizeof got, "%llu", (unsigned long long)d);
    gnd = (int)strlen(got);
    len = accel__track_fmt_double(text, v);
    if (gnd != wnd || strcmp(got, want) != 0 || gk + gnd - 1 != we || strtod(text, NULL) != v || len != strlen(text)) {
        if (++nbad <= 20)
            fprintf(stderr, "  %.17g (bits %016llx): got %s e%d \"%s\", reference %s e%d\n", v,
                    (unsigned long long)d_bits(v), got, gk + gnd - 1, text, want, we);
    }
}

static void check_pm(double v) { check(v); check(-v); }

/* every special case, also the --dump list */
static void specials(void (*f)(double)) {
    double p;
    int e;
    uint64_t c;
    for (e = -1074; e <= 1023; ++e) { /* powers of two and their neighbours */
        p = ldexp(1.0, e);
        f(p); f(nextafter(p, 0)); f(nextafter(p, INFINITY));
    }
    for (e = -323; e <= 308; ++e) { /* powers of ten (the nearest double) and their neighbours */
        char s[16];
        snprintf(s, sizeof s, "1e%d", e);
        p = strtod(s, NULL);
        f(p); f(nextafter(p, 0)); f(nextafter(p, INFINITY));
        snprintf(s, sizeof s, "9.5e%d", e);
        f(strtod(s, NULL));
    }
    for (c = 1; c <= 100000; ++c) f(bits_d(c));                              /* smallest subnormals */
    for (c = 0; c < 1000; ++c) f(bits_d(0x000FFFFFFFFFFFFFull - c));         /* largest subnormals */
    for (c = 0; c < 1000; ++c) f(bits_d(0x0010000000000000ull + c));         /* smallest normals */
    for (c = 0; c < 1000; ++c) f(bits_d(0x7FEFFFFFFFFFFFFFull - c));         /* largest */
    for (c = 1; c <= 100000; ++c) f((double)c);
    for (c = 0; c < 64; ++c) f((double)((1ull << 53) - c)), f((double)(1ull << 53) + 2.0 * (double)c);
    f(0.1); f(0.2); f(0.3); f(0.1 + 0.2); f(1.0 / 3); f(2.0 / 3); f(1e23); f(9007199254740993.0); f(5e-324);
    f(DBL_MAX); f(DBL_MIN); f(DBL_EPSILON); f(1e-4); f(9.999999999999999e-5); f(1e16); f(9999999999999998.0);
    f(123456789012345678.0); f(1.5e-7); f(0.5 + 1e-7); f(3e-4);
}

static double short_decimal(void) {
    char s[40];
    uint64_t m = rnd64();
    int nd = 1 + (int)(rnd64() % 17), e = (int)(rnd64() % 650) - 330, i;
    uint64_t p10 = 1;
    for (i = 0; i < nd; ++i) p10 *= 10;
    m %= p10;
    snprintf(s, sizeof s, "%llue%d", (unsigned long long)m, e);
    return strtod(s, NULL);
}

static void dump_one(double v) {
    char text[40];
    accel__track_fmt_double(text, v);
    printf("%016llx %s\n", (unsigned long long)d_bits(v), text);
}

int main(int argc, char **argv) {
    long i, nrand = 1000000, nshort = 500000;
    if (argc > 2 && !strcmp(argv[1], "--dump")) {
        long n = atol(argv[2]);
        specials(dump_one);
        dump_one(0.0); dump_one(-0.0); dump_one(INFINITY); dump_one(-INFINITY); dump_one(NAN);
        for (i = 0; i < n; ++i) {
            double v = (i & 1) ? bits_d(rnd64()) : short_decimal();
            if (v == v && fabs(v) <= DBL_MAX) dump_one(v);
        }
        return 0;
    }
    if (argc > 1) nrand = atol(argv[1]);
    if (argc > 2) nshort = atol(argv[2]);

    at_context = "special doubles";
    nbad = nchecked = 0;
    specials(check_pm);
    AT_CHECK(nbad == 0);
    printf("special doubles: %ld checked, %ld differ\n", nchecked, nbad);

    at_context = "random bit patterns";
    nbad = nchecked = 0;
    for (i = 0; i < nrand; ++i) check(bits_d(rnd64()));
    AT_CHECK(nbad == 0);
    printf("random bit patterns: %ld checked, %ld differ\n", nchecked, nbad);

    at_context = "random short decimals";
    nbad = nchecked = 0;
    for (i = 0; i < nshort; ++i) check_pm(short_decimal());
    AT_CHECK(nbad == 0);
    printf("random short decimals: %ld checked, %ld differ\n", nchecked, nbad);

    at_context = "zeros, infinities, NaN";
    {
        char t[40];
        AT_EQ_INT((int)accel__track_fmt_double(t, 0.0), 3); AT_EQ_STR(t, "0.0");
        AT_EQ_INT((int)accel__track_fmt_double(t, -0.0), 4); AT_EQ_STR(t, "-0.0");
        AT_EQ_INT((int)accel__track_fmt_double(t, INFINITY), 8); AT_EQ_STR(t, "Infinity");
        AT_EQ_INT((int)accel__track_fmt_double(t, -INFINITY), 9); AT_EQ_STR(t, "-Infinity");
        AT_EQ_INT((int)accel__track_fmt_double(t, NAN), 3); AT_EQ_STR(t, "NaN");
        accel__track_fmt_double(t, 1e16); AT_EQ_STR(t, "1e+16");
        accel__track_fmt_double(t, 9999999999999998.0); AT_EQ_STR(t, "9999999999999998.0");
        accel__track_fmt_double(t, 1e-4); AT_EQ_STR(t, "0.0001");
        accel__track_fmt_double(t, 9.5e-5); AT_EQ_STR(t, "9.5e-05");
        accel__track_fmt_double(t, -5e-324); AT_EQ_STR(t, "-5e-324");
        accel__track_fmt_double(t, DBL_MAX); AT_EQ_STR(t, "1.7976931348623157e+308");
        accel__track_fmt_double(t, 0.1 + 0.2); AT_EQ_STR(t, "0.30000000000000004");
        accel__track_fmt_double(t, 1125899906842624.25); AT_EQ_STR(t, "1125899906842624.2"); /* tie: even */
        accel__track_fmt_double(t, 1125899906842624.75); AT_EQ_STR(t, "1125899906842624.8");
    }
    return at_finish("trackers-fmt");
}
