/* accel_profile.h on the CPU.
     test_profile                       the unit tests: bad input (NULL, unbalanced ends, unwritable directories),
                                        disabled profilers, the schedule, the phase table's figures, max_ranges,
                                        names, the merge on one process, and the allocator hooks (a counting
                                        allocator sees every block freed; a failing one gives errors, never a crash)
     test_profile schedule              prints "wait warmup active repeat skip_first step action" for a grid of
                                        schedules (check_schedule_torch.py compares every line with torch)
     test_profile trace DIR W WU A R SF STEPS [report]
                                        a synthetic training loop (phases that spin, a nested user range, a
                                        checkpoint every 3rd step) profiled with that schedule; writes
                                        DIR/profile_0.json and prints "ready <step>" for each on_trace_ready call.
                                        With "report", ranges are reported too (accel_prof_record_range, as async
                                        checkpoints do): "checkpoint_snapshot" around each checkpoint phase from this
                                        thread, and REPORTED_WRITES "checkpoint_write" ranges of 2 ms, 3 ms apart,
                                        from a second thread while the loop runs */
#include "accel.h"
#include "accel_profile.h"
#include "accel_test.h"
#include "accel_test_fs.h"
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void spin_us(double us) {
    double t0 = accel_now();
    while ((accel_now() - t0) * 1e6 < us) {
    }
}

static void quiet(void *user, accel_log_level level, const char *msg) {
    (void)user; (void)level; (void)msg;
}

static int init_acc(accel *acc, const accel_allocator *host) {
    accel_desc d;
    memset(&d, 0, sizeof d);
    d.cpu = 1;
    d.no_mpi = 1;
    d.log_fn = quiet;
    if (host) d.host_allocator = *host;
    if (accel_init(acc, &d) != ACCEL_OK) {
        fprintf(stderr, "accel_init: %s\n", accel_last_error(acc));
        return 1;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------- trace mode */
static void on_ready(accel_prof *p, void *user) {
    (void)user;
    printf("ready %lld\n", (long long)p->step);
}

#define REPORTED_WRITES 8
/* a writer thread's ranges, reported after the fact while the loop runs (the async checkpoint's pattern); their
   times are set, not spun, so that the thread takes no CPU time from the loop's timed phases */
static void *report_writes(void *arg) {
    double t = accel_now();
    int i;
    for (i = 0; i < REPORTED_WRITES; ++i)
        accel_prof_record_range(arg, "checkpoint_write", t + 3e-3 * i, t + 3e-3 * i + 2e-3);
    return NULL;
}

static int run_trace(int argc, char **argv) {
    accel acc;
    accel_prof *p = NULL;
    accel_prof_desc pd;
    pthread_t writer;
    int steps, k, attn = -1, report = argc > 9 && !strcmp(argv[9], "report");
    if (argc < 9) {
        fprintf(stderr, "usage: test_profile trace DIR WAIT WARMUP ACTIVE REPEAT SKIP_FIRST STEPS [report]\n");
        return 2;
    }
    if (init_acc(&acc, NULL)) return 1;
    memset(&pd, 0, sizeof pd);
    pd.trace_dir = argv[2];
    pd.wait = atoi(argv[3]);
    pd.warmup = atoi(argv[4]);
    pd.active = atoi(argv[5]);
    pd.repeat = atoi(argv[6]);
    pd.skip_first = atoi(argv[7]);
    steps = atoi(argv[8]);
    pd.on_trace_ready = on_ready;
    ACCEL_CHECK(&acc, accel_prof_create(&acc, &pd, &p));
    ACCEL_CHECK(&acc, accel_prof_range_id(p, "attention", &attn));
    if (report && pthread_create(&writer, NULL, report_writes, p) != 0) return 1;
    for (k = 0; k < steps; ++k) {
        ACCEL_CHECK(&acc, accel_prof_begin(p, ACCEL_PROF_DATA));
        spin_us(300);
        ACCEL_CHECK(&acc, accel_prof_end(p, ACCEL_PROF_DATA));
        ACCEL_CHECK(&acc, accel_prof_begin(p, ACCEL_PROF_FORWARD));
        spin_us(200);
        ACCEL_CHECK(&acc, accel_prof_begin(p, attn)); /* nested user range */
        spin_us(400);
        ACCEL_CHECK(&acc, accel_prof_end(p, attn));
        spin_us(100);
        ACCEL_CHECK(&acc, accel_prof_end(p, ACCEL_PROF_FORWARD));
        ACCEL_CHECK(&acc, accel_prof_begin(p, ACCEL_PROF_BACKWARD));
        spin_us(900);
        ACCEL_CHECK(&acc, accel_prof_end(p, ACCEL_PROF_BACKWARD));
        ACCEL_CHECK(&acc, accel_prof_begin(p, ACCEL_PROF_GRAD_SYNC));
        spin_us(300);
        ACCEL_CHECK(&acc, accel_prof_end(p, ACCEL_PROF_GRAD_SYNC));
        ACCEL_CHECK(&acc, accel_prof_begin(p, ACCEL_PROF_OPTIMIZER));
        spin_us(400);
        ACCEL_CHECK(&acc, accel_prof_end(p, ACCEL_PROF_OPTIMIZER));
        if (k % 3 == 2) { /* a reported range encloses the phase: check_trace.py sees both on one clock */
            double t0 = accel_now();
            ACCEL_CHECK(&acc, accel_prof_begin(p, ACCEL_PROF_CHECKPOINT));
            spin_us(700);
            ACCEL_CHECK(&acc, accel_prof_end(p, ACCEL_PROF_CHECKPOINT));
            if (report) accel_prof_record_range(p, "checkpoint_snapshot", t0, accel_now());
        }
        ACCEL_CHECK(&acc, accel_prof_begin(p, ACCEL_PROF_LOGGING));
        spin_us(100);
        ACCEL_CHECK(&acc, accel_prof_end(p, ACCEL_PROF_LOGGING));
        ACCEL_CHECK(&acc, accel_prof_step(p));
    }
    /* the step after the last boundary never completes: its ranges are in the trace, not in the table */
    ACCEL_CHECK(&acc, accel_prof_begin(p, ACCEL_PROF_LOGGING));
    ACCEL_CHECK(&acc, accel_prof_end(p, ACCEL_PROF_LOGGING));
    if (report && pthread_join(writer, NULL) != 0) return 1;
    ACCEL_CHECK(&acc, accel_prof_write_trace(p));
    fflush(stdout);
    accel_prof_destroy(p);
    accel_shutdown(&acc);
    return 0;
}

/* ---------------------------------------------------------------------------------- schedule mode */
static int run_schedule(void) {
    static const int grid[][5] = {
        {0, 0, 1, 0, 0}, {1, 1, 1, 0, 0}, {1, 1, 3, 2, 0}, {2, 0, 1, 0, 3}, {0, 2, 2, 1, 1}, {3, 2, 4, 3, 5},
        {0, 0, 5, 1, 0}, {5, 0, 1, 0, 0}, {1, 0, 1, 4, 2}, {0, 1, 1, 0, 7}, {2, 3, 1, 2, 1}, {0, 0, 2, 3, 0}};
    size_t g;
    int k;
    for (g = 0; g < sizeof grid / sizeof grid[0]; ++g) {
        accel_prof_desc d;
        memset(&d, 0, sizeof d);
        d.wait = grid[g][0]; d.warmup = grid[g][1]; d.active = grid[g][2]; d.repeat = grid[g][3];
        d.skip_first = grid[g][4];
        for (k = 0; k < 60; ++k)
            printf("%d %d %d %d %d %d %d\n", d.wait, d.warmup, d.active, d.repeat, d.skip_first, k,
                   (int)accel_prof_schedule_action(&d, k));
    }
    return 0;
}

/* ------------------------------------------------------------------------------------- unit tests */
static char tmp[256];

static int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static void test_null_and_bad_input(accel *acc) {
    accel_prof *p = (accel_prof *)&p; /* garbage: create must set it to NULL on failure */
    accel_prof_desc d;
    accel_prof_stats s;
    int id;
    at_context = "null";
    AT_EQ_INT(accel_prof_create(NULL, NULL, &p), ACCEL_ERR_INVALID_ARGUMENT);
    AT_CHECK(p == NULL);
    AT_CONTAINS(accel_last_error(NULL), "acc is NULL");
    AT_EQ_INT(accel_prof_create(acc, NULL, NULL), ACCEL_ERR_INVALID_ARGUMENT);
    AT_EQ_INT(accel_prof_begin(NULL, ACCEL_PROF_DATA), ACCEL_ERR_INVALID_ARGUMENT);
    AT_EQ_INT(accel_prof_end(NULL, ACCEL_PROF_DATA), ACCEL_ERR_INVALID_ARGUMENT);
    AT_EQ_INT(accel_prof_range_begin(NULL, 0), ACCEL_ERR_INVALID_ARGUMENT);
    AT_EQ_INT(accel_prof_step(NULL), ACCEL_ERR_INVALID_ARGUMENT);
    AT_EQ_INT(accel_prof_range_id(NULL, "x", &id), ACCEL_ERR_INVALID_ARGUMENT);
    AT_EQ_INT(accel_prof_phase_stats(NULL, 0, &s), ACCEL_ERR_INVALID_ARGUMENT);
    AT_EQ_INT(accel_prof_print_table(NULL, stdout), ACCEL_ERR_INVALID_ARGUMENT);
    AT_EQ_INT(accel_prof_write_trace(NULL), ACCEL_ERR_INVALID_ARGUMENT);
    AT_EQ_INT(accel_prof_merge_trace(NULL, NULL), ACCEL_ERR_INVALID_ARGUMENT);
    AT_CHECK(accel_prof_range_name(NULL, 0) == NULL);
    accel_prof_destroy(NULL);

    at_context = "schedule validation";
    memset(&d, 0, sizeof d);
    d.wait = -1; d.active = 1;
    p = (accel_prof *)&p;
    AT_EQ_INT(accel_prof_create(acc, &d, &p), ACCEL_ERR_INVALID_ARGUMENT);
    AT_CHECK(p == NULL);
    AT_CONTAINS(accel_last_error(acc), "wait=-1");
    memset(&d, 0, sizeof d);
    d.wait = 2; /* active 0 with a schedule: torch asserts active > 0 */
    AT_EQ_INT(accel_prof_create(acc, &d, &p), ACCEL_ERR_INVALID_ARGUMENT);
    AT_CONTAINS(accel_last_error(acc), "active > 0");
    memset(&d, 0, sizeof d);
    d.max_ranges = -5;
    AT_EQ_INT(accel_prof_create(acc, &d, &p), ACCEL_ERR_INVALID_ARGUMENT);
    memset(&d, 0, sizeof d);
    d.trace_dir = "";
    AT_EQ_INT(accel_prof_create(acc, &d, &p), ACCEL_ERR_INVALID_ARGUMENT);
    AT_EQ_INT(accel_prof_schedule_action(NULL, 5), ACCEL_PROF_RECORD);
    d.trace_dir = NULL;
    d.wait = -1; d.active = 2;
    AT_EQ_INT(accel_prof_schedule_action(&d, 5), ACCEL_PROF_NONE);
}

static void test_unbalanced(accel *acc) {
    accel_prof *p = NULL;
    int i, attn = -1;
    at_context = "unbalanced";
    AT_EQ_INT(accel_prof_create(acc, NULL, &p), ACCEL_OK);
    if (!p) return;
    AT_EQ_INT(accel_prof_range_id(p, "attention", &attn), ACCEL_OK);
    AT_EQ_INT(accel_prof_end(p, ACCEL_PROF_DATA), ACCEL_ERR_STATE);
    AT_CONTAINS(accel_last_error(acc), "no range is open");
    AT_EQ_INT(accel_prof_begin(p, ACCEL_PROF_FORWARD), ACCEL_OK);
    AT_EQ_INT(accel_prof_begin(p, attn), ACCEL_OK);
    AT_EQ_INT(accel_prof_end(p, ACCEL_PROF_FORWARD), ACCEL_ERR_STATE); /* attention is innermost */
    AT_CONTAINS(accel_last_error(acc), "innermost open range is attention");
    AT_EQ_INT(p->depth, 2);                                          /* nothing changed */
    AT_EQ_INT(accel_prof_step(p), ACCEL_ERR_STATE);                  /* open ranges at a boundary */
    AT_CONTAINS(accel_last_error(acc), "2 range(s) still open");
    AT_EQ_INT(p->step, 0);
    AT_EQ_INT(accel_prof_end(p, attn), ACCEL_OK);
    AT_EQ_INT(accel_prof_end(p, ACCEL_PROF_FORWARD), ACCEL_OK);
    AT_EQ_INT(accel_prof_begin(p, 9999), ACCEL_ERR_INVALID_ARGUMENT);
    AT_EQ_INT(accel_prof_begin(p, -3), ACCEL_ERR_INVALID_ARGUMENT);
    AT_EQ_INT(accel_prof_end(p, 9999), ACCEL_ERR_INVALID_ARGUMENT);
    AT_EQ_INT(p->depth, 0);
    AT_EQ_INT(accel_prof_step(p), ACCEL_OK);
    AT_EQ_INT(p->step, 1);
    AT_EQ_INT(p->recorded_steps, 1);
    for (i = 0; i < ACCEL_PROF_MAX_DEPTH; ++i) AT_CHECK(accel_prof_begin(p, ACCEL_PROF_DATA) == ACCEL_OK);
    AT_EQ_INT(accel_prof_begin(p, ACCEL_PROF_DATA), ACCEL_ERR_STATE);
    AT_CONTAINS(accel_last_error(acc), "ACCEL_PROF_MAX_DEPTH");
    for (i = 0; i < ACCEL_PROF_MAX_DEPTH; ++i) AT_CHECK(accel_prof_end(p, ACCEL_PROF_DATA) == ACCEL_OK);
    AT_EQ_INT(accel_prof_step(p), ACCEL_OK);
    {   /* a range nested in itself counts once (its outermost occurrence) */
        accel_prof_stats s;
        AT_EQ_INT(accel_prof_phase_stats(p, ACCEL_PROF_DATA, &s), ACCEL_OK);
        AT_EQ_INT(s.calls, 1);
        AT_EQ_INT(s.steps_with, 1);
        AT_EQ_INT(s.steps, 2);
    }
    /* on a step the schedule does not record, balance is still checked */
    accel_prof_destroy(p);
    {
        accel_prof_desc d;
        memset(&d, 0, sizeof d);
        d.wait = 1; d.active = 1;
        AT_EQ_INT(accel_prof_create(acc, &d, &p), ACCEL_OK);
        AT_EQ_INT(p->recording, 0);
        AT_EQ_INT(accel_prof_end(p, ACCEL_PROF_DATA), ACCEL_ERR_STATE);
        AT_EQ_INT(accel_prof_begin(p, ACCEL_PROF_DATA), ACCEL_OK);
        AT_EQ_INT(accel_prof_end(p, ACCEL_PROF_OPTIMIZER), ACCEL_ERR_STATE);
        AT_EQ_INT(accel_prof_step(p), ACCEL_ERR_STATE);
        AT_EQ_INT(accel_prof_end(p, ACCEL_PROF_DATA), ACCEL_OK);
        AT_EQ_INT(accel_prof_step(p), ACCEL_OK);
        AT_EQ_INT(p->recording, 1);
        accel_prof_destroy(p);
    }
}

static void test_unwritable(accel *acc) {
    char file[300], path[400];
    accel_prof *p = (accel_prof *)&p;
    accel_prof_desc d;
    FILE *f;
    at_context = "unwritable";
    snprintf(file, sizeof file, "%s/plain_file", tmp);
    f = fopen(file, "w");
    AT_CHECK(f != NULL);
    if (f) fclose(f);
    memset(&d, 0, sizeof d);
    snprintf(path, sizeof path, "%s/sub/dir", file); /* under a regular file: ENOTDIR even for root */
    d.trace_dir = path;
    AT_EQ_INT(accel_prof_create(acc, &d, &p), ACCEL_ERR_IO);
    AT_CHECK(p == NULL);
    AT_CONTAINS(accel_last_error(acc), "cannot create trace_dir");
    AT_CONTAINS(accel_last_error(acc), "plain_file");
    /* the directory disappears (replaced by a file) after create: write_trace fails, naming the file */
    snprintf(path, sizeof path, "%s/gone", tmp);
    d.trace_dir = path;
    AT_EQ_INT(accel_prof_create(acc, &d, &p), ACCEL_OK);
    if (!p) return;
    AT_EQ_INT(accel_prof_begin(p, ACCEL_PROF_DATA), ACCEL_OK);
    AT_EQ_INT(accel_prof_end(p, ACCEL_PROF_DATA), ACCEL_OK);
    AT_EQ_INT(accel_prof_step(p), ACCEL_OK);
    at_rm_rf(path);
    f = fopen(path, "w");
    if (f) fclose(f);
    AT_EQ_INT(accel_prof_write_trace(p), ACCEL_ERR_IO);
    AT_CONTAINS(accel_last_error(acc), "profile_0.json");
    /* merge: an unwritable path and a missing path are errors too (one process: the collective is local) */
    snprintf(file, sizeof file, "%s/gone/merged.json", tmp);
    AT_EQ_INT(accel_prof_merge_trace(p, file), ACCEL_ERR_IO);
    accel_prof_destroy(p);
    memset(&d, 0, sizeof d);
    AT_EQ_INT(accel_prof_create(acc, &d, &p), ACCEL_OK);
    AT_EQ_INT(accel_prof_write_trace(p), ACCEL_ERR_STATE); /* no trace_dir */
    AT_EQ_INT(accel_prof_merge_trace(p, NULL), ACCEL_ERR_STATE);
    accel_prof_destroy(p);
    unlink(path);
}

static void test_disabled(accel *acc) {
    char dir[300], file[400];
    accel_prof *p = NULL;
    accel_prof_desc d;
    accel_prof_stats s;
    int k;
    at_context = "disabled";
    snprintf(dir, sizeof dir, "%s/disabled", tmp);
    memset(&d, 0, sizeof d);
    d.disabled = 1;
    d.trace_dir = dir;
    AT_EQ_INT(accel_prof_create(acc, &d, &p), ACCEL_OK);
    if (!p) return;
    AT_EQ_INT(p->enabled, 0);
    AT_CHECK(!file_exists(dir)); /* no I/O at all */
    for (k = 0; k < 10; ++k) {
        AT_CHECK(accel_prof_begin(p, ACCEL_PROF_DATA) == ACCEL_OK);
        AT_CHECK(accel_prof_end(p, ACCEL_PROF_OPTIMIZER) == ACCEL_OK); /* not even checked */
        AT_CHECK(accel_prof_step(p) == ACCEL_OK);
    }
    AT_EQ_INT(p->step, 0);
    AT_EQ_INT(p->depth, 0);
    AT_EQ_INT(p->recorded_steps, 0);
    AT_EQ_INT(accel_prof_write_trace(p), ACCEL_OK);
    snprintf(file, sizeof file, "%s/profile_0.json", dir);
    AT_CHECK(!file_exists(file));
    AT_EQ_INT(accel_prof_phase_stats(p, ACCEL_PROF_STEP, &s), ACCEL_OK);
    AT_EQ_INT(s.steps, 0);
    accel_prof_destroy(p);
}

/* The table's figures against the spins they measured: a host clock read around each spin is the reference. */
/* accel_prof_print_table's text in buf (through a temporary file); 0 when that file could not be made */
static int table_text(accel_prof *p, char *buf, size_t size) {
    FILE *f = tmpfile();
    size_t n;
    AT_CHECK(f != NULL);
    if (!f) return 0;
    AT_EQ_INT(accel_prof_print_table(p, f), ACCEL_OK);
    rewind(f);
    n = fread(buf, 1, size - 1, f);
    buf[n] = 0;
    fclose(f);
    return 1;
}

static void test_stats(accel *acc) {
    accel_prof *p = NULL;
    accel_prof_stats s, fwd, opt, oth, st;
    double data_us[6], fwd_us[6], t;
    int k, rare = -1;
    char buf[4096];
    at_context = "stats";
    AT_EQ_INT(accel_prof_create(acc, NULL, &p), ACCEL_OK);
    if (!p) return;
    /* the table before any step ended says so (it used to print "steps 0-0", as if one step had run) */
    if (table_text(p, buf, sizeof buf)) {
        AT_CONTAINS(buf, "accel profile (rank 0): 0 recorded steps (no step ended yet)");
        AT_CHECK(strstr(buf, "steps 0-") == NULL);
    }
    AT_EQ_INT(accel_prof_range_id(p, "rare", &rare), ACCEL_OK);
    for (k = 0; k < 6; ++k) {
        t = accel_now();
        AT_CHECK(accel_prof_begin(p, ACCEL_PROF_DATA) == ACCEL_OK);
        spin_us(500 + 100 * k);
        AT_CHECK(accel_prof_end(p, ACCEL_PROF_DATA) == ACCEL_OK);
        data_us[k] = (accel_now() - t) * 1e6;
        t = accel_now();
        AT_CHECK(accel_prof_begin(p, ACCEL_PROF_FORWARD) == ACCEL_OK);
        spin_us(300);
        AT_CHECK(accel_prof_end(p, ACCEL_PROF_FORWARD) == ACCEL_OK);
        AT_CHECK(accel_prof_begin(p, ACCEL_PROF_FORWARD) == ACCEL_OK); /* twice per step: summed */
        spin_us(300);
        AT_CHECK(accel_prof_end(p, ACCEL_PROF_FORWARD) == ACCEL_OK);
        fwd_us[k] = (accel_now() - t) * 1e6;
        if (k % 2 == 1) {
            AT_CHECK(accel_prof_begin(p, rare) == ACCEL_OK);
            spin_us(200);
            AT_CHECK(accel_prof_end(p, rare) == ACCEL_OK);
        }
        spin_us(200); /* outside every range: (other) */
        AT_CHECK(accel_prof_step(p) == ACCEL_OK);
    }
    AT_EQ_INT(p->recorded_steps, 6);
    AT_EQ_INT(accel_prof_phase_stats(p, ACCEL_PROF_DATA, &s), ACCEL_OK);
    AT_EQ_STR(s.name, "data");
    AT_EQ_INT(s.steps, 6);
    AT_EQ_INT(s.steps_with, 6);
    AT_EQ_INT(s.calls, 6);
    {
        double mn = 1e30, mx = 0, sum = 0;
        for (k = 0; k < 6; ++k) {
            sum += data_us[k];
            if (data_us[k] < mn) mn = data_us[k];
            if (data_us[k] > mx) mx = data_us[k];
        }
        /* the profiler's interval lies inside the test's and holds the spin (robust to preemption: a preempted
           range only grows, and the test's interval grows with it) */
        AT_CHECK(s.total_ms <= sum * 1e-3 && s.total_ms >= 4.5);
        AT_CHECK(s.min_ms <= mn * 1e-3 && s.min_ms >= 0.5);
        AT_CHECK(s.max_ms <= mx * 1e-3 && s.max_ms >= 1.0);
        AT_NEAR(s.mean_ms, s.total_ms / 6, 1e-9);
        AT_NEAR(s.device_mean_ms, -1.0, 0);
    }
    AT_EQ_INT(accel_prof_phase_stats(p, ACCEL_PROF_FORWARD, &fwd), ACCEL_OK);
    AT_EQ_INT(fwd.calls, 12);
    AT_CHECK(fwd.min_ms >= 0.6 && fwd.total_ms >= 3.6);
    {
        double sum = 0;
        for (k = 0; k < 6; ++k) sum += fwd_us[k];
        AT_CHECK(fwd.total_ms <= sum * 1e-3);
    }
    AT_EQ_INT(accel_prof_phase_stats(p, rare, &opt), ACCEL_OK);
    AT_EQ_INT(opt.steps_with, 3);
    AT_NEAR(opt.min_ms, 0.0, 0);                      /* steps without it count 0 */
    AT_CHECK(opt.max_ms >= 0.2);
    AT_EQ_INT(accel_prof_phase_stats(p, ACCEL_PROF_STEP, &st), ACCEL_OK);
    AT_EQ_INT(accel_prof_phase_stats(p, ACCEL_PROF_OTHER, &oth), ACCEL_OK);
    AT_NEAR(st.share, 1.0, 1e-12);
    /* the top-level rows and (other) add up to the step exactly */
    AT_NEAR(s.total_ms + fwd.total_ms + opt.total_ms + oth.total_ms, st.total_ms, 1e-6);
    AT_NEAR(s.share + fwd.share + opt.share + oth.share, 1.0, 1e-9);
    AT_CHECK(oth.min_ms >= 0.2);
    AT_EQ_INT(accel_prof_phase_stats(p, ACCEL_PROF_BACKWARD, &s), ACCEL_OK); /* never ran */
    AT_EQ_INT(s.steps_with, 0);
    AT_NEAR(s.total_ms, 0.0, 0);
    AT_EQ_INT(accel_prof_phase_stats(p, 777, &s), ACCEL_ERR_INVALID_ARGUMENT);
    AT_EQ_INT(accel_prof_phase_stats(p, ACCEL_PROF_DATA, NULL), ACCEL_ERR_INVALID_ARGUMENT);
    /* the printed table */
    if (table_text(p, buf, sizeof buf)) {
        AT_CONTAINS(buf, "accel profile (rank 0): 6 recorded steps (steps 0-5)");
        AT_CONTAINS(buf, "\nstep ");
        AT_CONTAINS(buf, "\ndata ");
        AT_CONTAINS(buf, "\nforward ");
        AT_CONTAINS(buf, "\nrare ");
        AT_CONTAINS(buf, "\n(other) ");
        AT_CHECK(strstr(buf, "backward") == NULL); /* rows only for ranges that ran */
        AT_CONTAINS(buf, "100.0%");
    }
    accel_prof_destroy(p);
}

static int ready_calls[16], nready;
static void count_ready(accel_prof *p, void *user) {
    (void)user;
    if (nready < 16) ready_calls[nready++] = (int)p->step;
}

static void test_schedule(accel *acc) {
    accel_prof *p = NULL;
    accel_prof_desc d;
    int k, recorded = 0;
    at_context = "schedule";
    memset(&d, 0, sizeof d);
    d.wait = 1; d.warmup = 1; d.active = 2; d.repeat = 2; d.skip_first = 1;
    d.on_trace_ready = count_ready;
    /* the rule, worked by hand: 0 skip | 1 wait, 2 warmup, 3 rec, 4 rec+save | 5 wait, 6 warmup, 7 rec, 8 rec+save |
       then NONE for ever (repeat 2) */
    {
        static const int want[12] = {0, 0, 1, 2, 3, 0, 1, 2, 3, 0, 0, 0};
        for (k = 0; k < 12; ++k) AT_EQ_INT(accel_prof_schedule_action(&d, k), want[k]);
    }
    nready = 0;
    AT_EQ_INT(accel_prof_create(acc, &d, &p), ACCEL_OK);
    if (!p) return;
    for (k = 0; k < 12; ++k) {
        int rec = accel_prof_schedule_action(&d, k) >= ACCEL_PROF_RECORD;
        AT_EQ_INT(p->recording, rec);
        recorded += rec;
        AT_CHECK(accel_prof_begin(p, ACCEL_PROF_DATA) == ACCEL_OK);
        AT_CHECK(accel_prof_end(p, ACCEL_PROF_DATA) == ACCEL_OK);
        AT_CHECK(accel_prof_step(p) == ACCEL_OK);
    }
    AT_EQ_INT(p->recorded_steps, recorded);
    AT_EQ_INT(recorded, 4);
    AT_EQ_INT(nready, 2);   /* torch calls on_trace_ready with step_num 5 and 9 for this schedule */
    AT_EQ_INT(ready_calls[0], 5);
    AT_EQ_INT(ready_calls[1], 9);
    accel_prof_destroy(p);
}

static void test_names_and_limits(accel *acc) {
    char dir[300], name[400], *buf;
    accel_prof *p = NULL;
    accel_prof_desc d;
    accel_prof_stats s;
    size_t n;
    int id = -1, id2 = -1, k;
    at_context = "names";
    snprintf(dir, sizeof dir, "%s/limits", tmp);
    memset(&d, 0, sizeof d);
    d.trace_dir = dir;
    d.max_ranges = 5;
    AT_EQ_INT(accel_prof_create(acc, &d, &p), ACCEL_OK);
    if (!p) return;
    AT_EQ_INT(accel_prof_range_id(p, "optimizer", &id), ACCEL_OK); /* a phase's name gives the phase */
    AT_EQ_INT(id, ACCEL_PROF_OPTIMIZER);
    AT_EQ_INT(accel_prof_range_id(p, "embed \"q\"", &id), ACCEL_OK);
    AT_EQ_INT(accel_prof_range_id(p, "embed \"q\"", &id2), ACCEL_OK);
    AT_EQ_INT(id, id2);
    AT_EQ_INT(id, ACCEL_PROF_PHASE_COUNT);
    AT_EQ_STR(accel_prof_range_name(p, id), "embed \"q\"");
    AT_EQ_STR(accel_prof_range_name(p, ACCEL_PROF_GRAD_SYNC), "grad_sync");
    AT_CHECK(accel_prof_range_name(p, 500) == NULL);
    AT_EQ_INT(accel_prof_range_id(p, "", &id2), ACCEL_ERR_INVALID_ARGUMENT);
    AT_EQ_INT(accel_prof_range_id(p, "bad\xff", &id2), ACCEL_ERR_INVALID_ARGUMENT);
    AT_EQ_INT(accel_prof_range_id(p, NULL, &id2), ACCEL_ERR_INVALID_ARGUMENT);
    AT_EQ_INT(accel_prof_range_id(p, "x", NULL), ACCEL_ERR_INVALID_ARGUMENT);
    memset(name, 'a', 201);
    name[201] = 0;
    AT_EQ_INT(accel_prof_range_id(p, name, &id2), ACCEL_ERR_INVALID_ARGUMENT);
    for (k = 0; k < 10; ++k) {
        AT_CHECK(accel_prof_begin(p, id) == ACCEL_OK);
        AT_CHECK(accel_prof_end(p, id) == ACCEL_OK);
    }
    AT_EQ_INT(accel_prof_step(p), ACCEL_OK);
    AT_EQ_INT(p->dropped_ranges, 5);
    AT_EQ_INT(accel_prof_phase_stats(p, id, &s), ACCEL_OK);
    AT_EQ_INT(s.calls, 10); /* the table still counts them all */
    AT_EQ_INT(accel_prof_write_trace(p), ACCEL_OK);
    buf = (char *)at_read_file(p->trace_file, &n);
    AT_CHECK(buf != NULL);
    if (buf) {
        const char *q = buf;
        int events = 0;
        buf[n] = 0;
        AT_CHECK(!strncmp(buf, "{\"traceEvents\":[\n{", 18));
        while ((q = strstr(q, "\"name\":\"embed \\\"q\\\"\"")) != NULL) { events++; q++; }
        AT_EQ_INT(events, 5); /* the escaped name, max_ranges of them */
        AT_CONTAINS(buf, "\"dropped_ranges\":5");
        free(buf);
    }
    /* names run out at ACCEL_PROF_MAX_NAMES */
    for (k = 0; k < ACCEL_PROF_MAX_NAMES; ++k) {
        snprintf(name, sizeof name, "n%d", k);
        if (accel_prof_range_id(p, name, &id2) != ACCEL_OK) break;
    }
    AT_EQ_INT(k, ACCEL_PROF_MAX_NAMES - ACCEL_PROF_PHASE_COUNT - 1);
    AT_CONTAINS(accel_last_error(acc), "ACCEL_PROF_MAX_NAMES");
    /* merge on one process: a local collective, the merged file holds rank 0's events */
    AT_EQ_INT(accel_prof_merge_trace(p, NULL), ACCEL_OK);
    snprintf(name, sizeof name, "%s/profile_merged.json", dir);
    buf = (char *)at_read_file(name, &n);
    AT_CHECK(buf != NULL);
    if (buf) {
        buf[n] = 0;
        AT_CONTAINS(buf, "\"merged\":true");
        AT_CONTAINS(buf, "\"args\":{\"name\":\"rank 0\"}");
        free(buf);
    }
    accel_prof_destroy(p);
}

/* ----------------------------------------------------------------------------------- allocator hooks */
typedef struct counter {
    long allocs, frees, live, fail_at, seen;
} counter;
static counter g_count;
static void *count_alloc(size_t n, void *user) {
    counter *c = (counter *)user;
    if (c->fail_at >= 0 && c->seen++ == c->fail_at) return NULL;
    c->allocs++;
    c->live++;
    return malloc(n);
}
static void count_free(void *ptr, void *user) {
    counter *c = (counter *)user;
    if (!ptr) return;
    c->frees++;
    c->live--;
    free(ptr);
}

/* A whole profiled run; the first failing call's result. */
static accel_result alloc_run(accel *acc, const char *dir) {
    accel_prof *p = NULL;
    accel_prof_desc d;
    accel_result r;
    int k, j, id;
    FILE *devnull = fopen("/dev/null", "w");
    memset(&d, 0, sizeof d);
    d.trace_dir = dir;
    if ((r = accel_prof_create(acc, &d, &p)) != ACCEL_OK) goto out;
    if ((r = accel_prof_range_id(p, "user", &id)) != ACCEL_OK) goto out;
    for (k = 0; k < 30; ++k) {
        for (j = 0; j < 5; ++j) {
            if ((r = accel_prof_begin(p, j % 2 ? id : ACCEL_PROF_DATA)) != ACCEL_OK) goto out;
            if ((r = accel_prof_end(p, j % 2 ? id : ACCEL_PROF_DATA)) != ACCEL_OK) goto out;
        }
        if ((r = accel_prof_step(p)) != ACCEL_OK) goto out;
    }
    if ((r = accel_prof_print_table(p, devnull)) != ACCEL_OK) goto out;
    if ((r = accel_prof_write_trace(p)) != ACCEL_OK) goto out;
    r = accel_prof_merge_trace(p, NULL);
out:
    if (devnull) fclose(devnull);
    accel_prof_destroy(p);
    return r;
}

static void test_allocator(void) {
    accel acc;
    accel_allocator a;
    char dir[300];
    long base, k;
    int ok_runs = 0, oom_runs = 0, other = 0;
    at_context = "allocator";
    snprintf(dir, sizeof dir, "%s/alloc", tmp);
    memset(&g_count, 0, sizeof g_count);
    g_count.fail_at = -1;
    a.alloc = count_alloc;
    a.free = count_free;
    a.user_data = &g_count;
    if (init_acc(&acc, &a)) { AT_CHECK(0); return; }
    base = g_count.live;
    {
        long before = g_count.allocs;
        AT_EQ_INT(alloc_run(&acc, dir), ACCEL_OK);
        AT_CHECK(g_count.allocs > before + 5); /* the profiler's blocks went through the hook */
        AT_EQ_INT(g_count.live, base);          /* and destroy freed every one */
    }
    for (k = 0; k < 400; ++k) {
        accel_result r;
        g_count.seen = 0;
        g_count.fail_at = k;
        r = alloc_run(&acc, dir);
        g_count.fail_at = -1;
        if (r == ACCEL_OK) { ok_runs++; break; }
        if (r == ACCEL_ERR_OUT_OF_MEMORY) oom_runs++;
        else { other++; fprintf(stderr, "fail_at %ld: %s\n", k, accel_last_error(&acc)); }
        if (g_count.live != base) { fprintf(stderr, "fail_at %ld leaks %ld blocks\n", k, g_count.live - base); other++; }
    }
    AT_EQ_INT(ok_runs, 1);    /* past the last allocation the run succeeds */
    AT_CHECK(oom_runs > 8);   /* every earlier failure point gave ACCEL_ERR_OUT_OF_MEMORY */
    AT_EQ_INT(other, 0);
    accel_shutdown(&acc);
    AT_EQ_INT(g_count.live, 0);
}

int main(int argc, char **argv) {
    accel acc;
    if (argc > 1 && !strcmp(argv[1], "schedule")) return run_schedule();
    if (argc > 1 && !strcmp(argv[1], "trace")) return run_trace(argc, argv);
    snprintf(tmp, sizeof tmp, "/tmp/accel_prof_unit_%d", (int)getpid());
    at_rm_rf(tmp);
    if (mkdir(tmp, 0777) != 0) { perror(tmp); return 1; }
    if (init_acc(&acc, NULL)) return 1;
    test_null_and_bad_input(&acc);
    test_unbalanced(&acc);
    test_unwritable(&acc);
    test_disabled(&acc);
    test_stats(&acc);
    test_schedule(&acc);
    test_names_and_limits(&acc);
    accel_shutdown(&acc);
    test_allocator();
    at_rm_rf(tmp);
    at_context = "";
    return at_finish("profile");
}
