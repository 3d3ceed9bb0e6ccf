/* Every allocation of accel_trackers.h goes through the Accelerator's host allocator (DESIGN.md → Who owns what):
     1. while a tracker runs (init, init_trackers with both writers and a config, log, flush, deinit) the C library's
        malloc/calloc/realloc — interposed in this program — is not called at all (stdio's FILE buffers would be);
     2. a counting host allocator sees the tracker's allocations, and after deinit every block is freed;
     3. a host allocator that fails the k-th allocation, for every k until a whole run succeeds, makes some call
        return ACCEL_ERR_OUT_OF_MEMORY (never a crash) and leaks nothing after deinit.
   glibc only (the interposer calls __libc_malloc); skipped (77) under sanitizers, which own malloc. */
#include "accel.h"
#include "accel_trackers.h"
#include "accel_test.h"
#include "accel_test_fs.h"
#include <stdlib.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TRK_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define TRK_SANITIZED 1
#endif
#endif

#if defined(__GLIBC__) && !defined(TRK_SANITIZED)
#define TRK_INTERPOSE 1
extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t a, size_t b);
extern void *__libc_realloc(void *p, size_t n);
extern void __libc_free(void *p);
static volatile int raw_watch;
static volatile long raw_calls;
void *malloc(size_t n) {
    if (raw_watch) raw_calls++;
    return __libc_malloc(n);
}
void *calloc(size_t a, size_t b) {
    if (raw_watch) raw_calls++;
    return __libc_calloc(a, b);
}
void *realloc(void *p, size_t n) {
    if (raw_watch) raw_calls++;
    return __libc_realloc(p, n);
}
void free(void *p) { __libc_free(p); }
#define HOOK_ALLOC(n) __libc_malloc(n)
#define HOOK_FREE(p) __libc_free(p)
#else
#define HOOK_ALLOC(n) malloc(n)
#define HOOK_FREE(p) free(p)
#endif

typedef struct counter {
    long allocs, frees, live;
    long fail_at; /* the allocation with this index (from 0) fails; -1 never */
    long seen;
} counter;

static void *count_alloc(size_t n, void *user) {
    counter *c = (counter *)user;
    if (c->fail_at >= 0 && c->seen++ == c->fail_at) return NULL;
    c->allocs++;
    c->live++;
    return HOOK_ALLOC(n);
}
static void count_free(void *p, void *user) {
    counter *c = (counter *)user;
    if (!p) return;
    c->frees++;
    c->live--;
    HOOK_FREE(p);
}

static void quiet(void *user, accel_log_level level, const char *msg) {
    (void)user; (void)level; (void)msg;
}

static char tmpdir[256];

/* One whole run; returns the first failing call's result (ACCEL_OK when all succeeded). */
static accel_result one_run(accel *acc, const char *project, int *step_out) {
    accel_track t;
    accel_track_desc td;
    accel_track_param cfg[3];
    accel_track_value v[2];
    accel_result r, first = ACCEL_OK;
    static char big[100000]; /* a name larger than the event file's buffer: the scratch path */
    int s;
    memset(&td, 0, sizeof td);
    td.log_with = ACCEL_TRACK_ALL;
    td.logging_dir = tmpdir;
    td.flush_secs = -1;
    cfg[0] = accel_track_param_number("lr", 3e-4);
    cfg[1] = accel_track_param_string("model", "m \"q\" | x");
    cfg[2] = accel_track_param_int("batch_size", 64);
    memset(big, 'n', sizeof big - 1);
    *step_out = 0;
    r = accel_track_init(acc, &t, &td);
    if (r == ACCEL_OK) {
        *step_out = 1;
        r = accel_track_init_trackers(&t, project, cfg, 3);
    }
    if (r == ACCEL_OK) {
        *step_out = 2;
        for (s = 0; s < 3 && first == ACCEL_OK; ++s) {
            v[0] = accel_track_scalar("train/loss", 1.0 / (s + 1));
            v[1] = accel_track_scalar(s == 2 ? big : "lr", 0.1 * s);
            first = accel_track_log(&t, v, 2, s);
        }
        if (first == ACCEL_OK) first = accel_track_flush(&t);
        r = first;
    }
    first = r;
    r = accel_track_deinit(&t);
    if (first == ACCEL_OK) first = r;
    return first;
}

int main(void) {
    accel acc;
    accel_desc d;
    counter c;
    long before, k;
    int step, ok_seen = 0;
    const char *base = getenv("TMPDIR");
    accel_result r;
    snprintf(tmpdir, sizeof tmpdir, "%s/accel-trk-alloc-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 1; }
    memset(&c, 0, sizeof c);
    c.fail_at = -1;
    memset(&d, 0, sizeof d);
    d.no_mpi = 1;
    d.log_fn = quiet;
    d.host_allocator.alloc = count_alloc;
    d.host_allocator.free = count_free;
    d.host_allocator.user_data = &c;
    AT_EQ_INT(accel_init(&acc, &d), ACCEL_OK);

    /* 1 + 2: a healthy run */
    before = c.live;
    c.allocs = 0;
#ifdef TRK_INTERPOSE
    raw_calls = 0;
    raw_watch = 1;
#endif
    r = one_run(&acc, "healthy", &step);
#ifdef TRK_INTERPOSE
    raw_watch = 0;
    AT_EQ_INT(raw_calls, 0);
#endif
    AT_EQ_INT(r, ACCEL_OK);
    AT_CHECK(c.allocs >= 4); /* the tracker state, the event buffer, the config text, the JSONL line, the scratch */
    AT_EQ_INT(c.live, before);

    /* 3: fail the k-th allocation of a run, for every k */
    for (k = 0; k < 200 && !ok_seen; ++k) {
        char project[32];
        snprintf(project, sizeof project, "fail%ld", k);
        before = c.live;
        c.seen = 0;
        c.fail_at = k;
        r = one_run(&acc, project, &step);
        c.fail_at = -1;
        if (r == ACCEL_OK) {
            ok_seen = 1;
        } else {
            AT_EQ_INT(r, ACCEL_ERR_OUT_OF_MEMORY);
            AT_CONTAINS(accel_last_error(&acc), "allocation");
        }
        AT_EQ_INT(c.live, before);
    }
    AT_CHECK(ok_seen);
    AT_CHECK(k > 4); /* several allocations were failed one by one before a run got through */
    accel_shutdown(&acc);
    at_rm_rf(tmpdir);
    return at_finish("trackers-alloc");
}
