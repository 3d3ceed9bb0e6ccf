/* What the GPT-2 kernel tests share: the ok/FAIL line of a check (counted), and a fixed xorshift stream of uniform
   floats in [-1, 1) (the same inputs every run, on every machine). */
#ifndef GPT2_KERNEL_TESTS_H
#define GPT2_KERNEL_TESTS_H
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>

static int failures, checks;
static void check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(int ok, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("%s", ok ? "ok: " : "FAIL: ");
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
    va_end(ap);
    checks++;
    failures += !ok;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float frand(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

#endif
