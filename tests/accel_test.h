/* Minimal test harness: checks that always run (never assert(), which NDEBUG removes), a count per file, and the
   plain closing line "N passed, N failed". Include in exactly one TU per test executable. */
#ifndef ACCEL_TEST_H
#define ACCEL_TEST_H
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int at_passed, at_failed;
static const char *at_context = "";

#define AT_CHECK(cond) at_check_((cond) ? 1 : 0, __FILE__, __LINE__, #cond, NULL)
#define AT_CHECK_MSG(cond, msg) at_check_((cond) ? 1 : 0, __FILE__, __LINE__, #cond, (msg))
#define AT_EQ_INT(a, b)                                                                                             \
    do {                                                                                                            \
        long long at_a_ = (long long)(a), at_b_ = (long long)(b);                                                   \
        if (at_a_ == at_b_) at_passed++;                                                                            \
        else { at_failed++; fprintf(stderr, "%s:%d: %s%s%s == %s failed: %lld != %lld\n", __FILE__, __LINE__,       \
                                    at_context, *at_context ? ": " : "", #a, #b, at_a_, at_b_); }                   \
    } while (0)
#define AT_EQ_STR(a, b)                                                                                             \
    do {                                                                                                            \
        const char *at_a_ = (a), *at_b_ = (b);                                                                      \
        if (at_a_ && at_b_ && !strcmp(at_a_, at_b_)) at_passed++;                                                   \
        else { at_failed++; fprintf(stderr, "%s:%d: %s%s%s == %s failed: \"%s\" != \"%s\"\n", __FILE__, __LINE__,   \
                                    at_context, *at_context ? ": " : "", #a, #b, at_a_ ? at_a_ : "(null)",          \
                                    at_b_ ? at_b_ : "(null)"); }                                                    \
    } while (0)
#define AT_NEAR(a, b, tol)                                                                                          \
    do {                                                                                                            \
        double at_a_ = (double)(a), at_b_ = (double)(b);                                                            \
        if (fabs(at_a_ - at_b_) <= (tol)) at_passed++;                                                              \
        else { at_failed++; fprintf(stderr, "%s:%d: %s%s|%s - %s| <= %g failed: %.17g vs %.17g\n", __FILE__,        \
                                    __LINE__, at_context, *at_context ? ": " : "", #a, #b, (double)(tol), at_a_,    \
                                    at_b_); }                                                                       \
    } while (0)
/* substring check for error messages */
#define AT_CONTAINS(hay, needle)                                                                                    \
    do {                                                                                                            \
        const char *at_h_ = (hay), *at_n_ = (needle);                                                               \
        if (at_h_ && at_n_ && strstr(at_h_, at_n_)) at_passed++;                                                    \
        else { at_failed++; fprintf(stderr, "%s:%d: %s%s\"%s\" does not contain \"%s\"\n", __FILE__, __LINE__,      \
                                    at_context, *at_context ? ": " : "", at_h_ ? at_h_ : "(null)", at_n_); }        \
    } while (0)

static void at_check_(int ok, const char *file, int line, const char *expr, const char *msg) {
    if (ok) { at_passed++; return; }
    at_failed++;
    fprintf(stderr, "%s:%d: %s%sCHECK failed: %s%s%s\n", file, line, at_context, *at_context ? ": " : "", expr,
            msg ? " — " : "", msg ? msg : "");
}

/* A counting host allocator (accel_desc.host_allocator; AT_USE_COUNTER(desc, &counter) installs it): every block
   carries a header naming its counter, so a block this counter did not hand out is counted as foreign and leaked,
   never freed; fail_at = k makes the k-th call return NULL (0: never). AT_RAW_MALLOC / AT_RAW_FREE (define both
   before including this header) name the allocator underneath: a test that wraps malloc at link time passes its
   __real_ functions. */
#ifndef AT_RAW_MALLOC
#define AT_RAW_MALLOC malloc
#define AT_RAW_FREE free
#endif
#define AT_COUNTER_MAGIC 0x41434b4c4c4f4341ull /* "ACALLOCK" */
typedef struct at_counter {
    long calls, allocs, frees, live, foreign, failed;
    long fail_at; /* 0: never; else the call number that returns NULL */
} at_counter;
static inline void *at_counter_alloc(size_t n, void *u) {
    at_counter *c = (at_counter *)u;
    unsigned long long *h;
    c->calls++;
    if (c->fail_at && c->calls == c->fail_at) { c->failed++; return NULL; }
    h = (unsigned long long *)AT_RAW_MALLOC(n + 16);
    if (!h) return NULL;
    h[0] = AT_COUNTER_MAGIC;
    h[1] = (unsigned long long)(size_t)c;
    c->allocs++;
    c->live++;
    return h + 2;
}
static inline void at_counter_free(void *p, void *u) {
    at_counter *c = (at_counter *)u;
    unsigned long long *h;
    if (!p) return;
    h = (unsigned long long *)p - 2;
    if (h[0] != AT_COUNTER_MAGIC || h[1] != (unsigned long long)(size_t)c) { c->foreign++; return; } /* not ours */
    h[0] = 0;
    c->frees++;
    c->live--;
    AT_RAW_FREE(h);
}
#define AT_USE_COUNTER(desc, counter)                                                                               \
    ((desc).host_allocator.alloc = at_counter_alloc, (desc).host_allocator.free = at_counter_free,                  \
     (desc).host_allocator.user_data = (counter))

#ifdef ACCEL_H_INCLUDED
/* A 1-D tensor of n elements of dt at p. */
static inline accel_tensor at_vec(const char *name, void *p, accel_dtype dt, int64_t n) {
    accel_tensor t;
    memset(&t, 0, sizeof t);
    t.name = name;
    t.ptr = p;
    t.dtype = dt;
    t.ndim = 1;
    t.shape[0] = n;
    return t;
}
/* accel_init of a one-process test (no MPI) whose host memory is counted by c and whose log goes to log_fn. */
static inline accel_result at_init_counting(accel *acc, at_counter *c, accel_log_fn log_fn) {
    accel_desc d;
    memset(&d, 0, sizeof d);
    d.no_mpi = 1;
    d.log_fn = log_fn;
    AT_USE_COUNTER(d, c);
    return accel_init(acc, &d);
}
#endif

/* Prints the closing line and returns the exit code. prefix names the test (one word). */
static int at_finish(const char *prefix) {
    printf("%s: %d passed, %d failed\n", prefix, at_passed, at_failed);
    fflush(stdout);
    return at_failed ? 1 : (at_passed ? 0 : 1); /* a test that checked nothing is a failure */
}
#endif
