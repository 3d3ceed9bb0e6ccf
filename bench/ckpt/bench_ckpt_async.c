/* The training loop's stall per checkpoint, CPU: an async save (accel_ckpt_desc.async) vs a synchronous one vs the
   bytes' own costs, all measured in this run on the same state (best of REPS, fsync'd, files under $ACCEL_BENCH_DIR,
   default the cwd). The state is GPT-2 124M + AdamW by default: params, exp_avg, exp_avg_sq in F32 (1.49 GB), each
   as 12 tensors, plus a small object.
     bench_ckpt_async [PARAMS]     PARAMS: parameter count (default 124439808)
   Lines (JSON, times; ratio = reference / accel so that higher is better, as DESIGN.md and gpu_bench.h have it):
     ckpt-async-stall        save_state's return with async on (the arena already made by a first save) vs the
                             snapshot copy alone (memcpy of the same tensors into a pinned, pre-faulted buffer);
                             goal 0.83 (issue 32: stall <= 1.2 x the copy)
     ckpt-sync-stall         save_state with async off vs write()+fsync of the same bytes to one file (the floor of
                             any synchronous save); goal null (informative: the price of checksums, rename, marker)
     ckpt-async-vs-sync      the async stall vs the synchronous one: what async saves buy
     ckpt-async-step         a training step's stand-in (a fixed compute loop on one core, ~20 ms) while the
                             background write runs vs without one; goal 0.95 (a step <= 1.05 x) when a core is free
                             for the writer (params.cores says how many there were) */
#include "accel_ckpt.h"
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NT 12
#define REPS 3
#define STEPS 40

static void die(const char *what) {
    fprintf(stderr, "bench_ckpt_async: %s: %s\n", what, accel_last_error(NULL));
    exit(1);
}
static double mn(double a, double b) { return a < b ? a : b; }

static void line(const char *bench, const char *params, const char *unit, double a, double r, const char *ref_name,
                 double goal) {
    char g[32];
    if (goal > 0) snprintf(g, sizeof g, "%.2f", goal);
    else snprintf(g, sizeof g, "null");
    printf("{\"bench\": \"%s\", \"params\": {%s}, \"unit\": \"%s\", \"accel\": %.6f, \"reference\": %.6f, "
           "\"reference_name\": \"%s\", \"ratio\": %.3f, \"goal\": %s}\n",
           bench, params, unit, a, r, ref_name, r / a, g);
    fflush(stdout);
}

/* the background write's end, reported by the writer thread through on_range */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static double g_write_end;
static void on_range(void *u, const char *name, double b, double e) {
    (void)u;
    (void)b;
    if (strcmp(name, "checkpoint_write")) return;
    pthread_mutex_lock(&g_mu);
    g_write_end = e;
    pthread_mutex_unlock(&g_mu);
}
static double write_end(void) {
    double e;
    pthread_mutex_lock(&g_mu);
    e = g_write_end;
    pthread_mutex_unlock(&g_mu);
    return e;
}

typedef struct { int64_t step; char note[48]; } trainer_state;
static accel_result t_save(void *o, void *buf, size_t cap, size_t *n) {
    *n = sizeof(trainer_state);
    if (buf && cap >= *n) memcpy(buf, o, *n);
    return ACCEL_OK;
}
static accel_result t_load(void *o, const void *buf, size_t n) {
    if (n != sizeof(trainer_state)) return accel_set_error(NULL, ACCEL_ERR_FORMAT, "trainer: %zu bytes", n);
    memcpy(o, buf, n);
    return ACCEL_OK;
}

/* A step's stand-in: dependent float work on a small cache-resident buffer (one core, no memory traffic to speak of),
   so that it measures the CPU the writer thread takes from it. */
static float g_sink;
static double compute_step(float *x, int n, int iters) {
    double t0 = accel_now();
    int it, i;
    for (it = 0; it < iters; ++it)
        for (i = 0; i < n; ++i) x[i] = x[i] * 0.999f + 0.001f * (float)(i & 7);
    g_sink += x[n / 2];
    return accel_now() - t0;
}
static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double raw_write(const char *path, float **bufs, size_t each) {
    double t0 = accel_now();
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644), g;
    if (fd < 0) die("open");
    for (g = 0; g < 3 * NT; ++g) {
        size_t done = 0;
        const char *p = (const char *)bufs[g];
        while (done < each) {
            ssize_t w = write(fd, p + done, each - done);
            if (w <= 0) die("write");
            done += (size_t)w;
        }
    }
    if (fsync(fd) != 0) die("fsync");
    close(fd);
    return accel_now() - t0;
}

int main(int argc, char **argv) {
    size_t nparams = argc > 1 ? (size_t)strtoull(argv[1], NULL, 10) : (size_t)124439808, each, total;
    const char *base = getenv("ACCEL_BENCH_DIR") ? getenv("ACCEL_BENCH_DIR") : ".";
    char dir[512], raw[700], proj_s[700], proj_a[700], params[320], cmd[1200];
    static char names[3 * NT][32];
    float *bufs[3 * NT], x[4096];
    accel_tensor model[NT], optim[2 * NT];
    trainer_state ts;
    accel acc;
    accel_desc d;
    accel_ckpt *cs = NULL, *ca = NULL;
    accel_ckpt_desc cd;
    unsigned char *pinned;
    double t_copy = 1e9, t_raw = 1e9, t_sync = 1e9, t_async = 1e9, t_bg = 0, idle[STEPS], busy[STEPS];
    int i, g, rep, nbusy = 0, iters = 1, cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    each = (nparams / NT) * sizeof(float);
    total = each * 3 * NT;
    snprintf(dir, sizeof dir, "%s/accel_bench_ckpt_async_XXXXXX", base);
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    snprintf(raw, sizeof raw, "%s/raw.bin", dir);
    snprintf(proj_s, sizeof proj_s, "%s/sync", dir);
    snprintf(proj_a, sizeof proj_a, "%s/async", dir);
    memset(&d, 0, sizeof d);
    d.no_mpi = 1;
    if (accel_init(&acc, &d) != ACCEL_OK) die("accel_init");
    for (g = 0; g < 3 * NT; ++g) {
        size_t k;
        bufs[g] = (float *)malloc(each);
        if (!bufs[g]) die("malloc");
        for (k = 0; k < each / sizeof(float); ++k) bufs[g][k] = (float)((k * 2654435761u + (size_t)g) & 0xffff) * 1e-4f;
        snprintf(names[g], sizeof names[g], "%s.%02d", g < NT ? "w" : g < 2 * NT ? "w.exp_avg" : "w.exp_avg_sq",
                 g % NT);
    }
    memset(model, 0, sizeof model);
    memset(optim, 0, sizeof optim);
    for (g = 0; g < 3 * NT; ++g) {
        accel_tensor *t = g < NT ? &model[g] : &optim[g - NT];
        t->name = names[g];
        t->dtype = ACCEL_F32;
        t->ndim = 1;
        t->shape[0] = (int64_t)(each / sizeof(float));
        t->ptr = bufs[g];
    }
    memset(&ts, 0, sizeof ts);
    /* two checkpointers on the same state: synchronous and async (total_limit 1: one checkpoint on disk each) */
    for (i = 0; i < 2; ++i) {
        accel_ckpt **ck = i ? &ca : &cs;
        memset(&cd, 0, sizeof cd);
        cd.project_dir = i ? proj_a : proj_s;
        cd.automatic_checkpoint_naming = 1;
        cd.total_limit = 1;
        cd.async = i ? ACCEL_ON : ACCEL_OFF;
        cd.on_range = on_range;
        if (accel_ckpt_create(&acc, &cd, ck) != ACCEL_OK || accel_ckpt_register_model(*ck, model, NT) != ACCEL_OK ||
            accel_ckpt_register_optimizer(*ck, optim, 2 * NT) != ACCEL_OK ||
            accel_ckpt_register(*ck, "trainer", t_save, t_load, &ts) != ACCEL_OK)
            die("checkpointer");
    }
    /* the snapshot copy alone: into pinned memory (acc's pinned allocator, as the snapshot), pre-faulted */
    pinned = (unsigned char *)accel_pinned_alloc(&acc, total);
    if (!pinned) die("pinned buffer");
    memset(pinned, 1, total);
    /* the first async save makes the snapshot arena (as the first save of a run does); not timed */
    if (accel_ckpt_save_state(ca, NULL, NULL, 0) != ACCEL_OK || accel_ckpt_wait(ca) != ACCEL_OK) die("first save");
    for (rep = 0; rep < REPS; ++rep) {
        double t0;
        size_t off = 0;
        t0 = accel_now();
        for (g = 0; g < 3 * NT; ++g, off += each) memcpy(pinned + off, bufs[g], each);
        t_copy = mn(t_copy, accel_now() - t0);
        t_raw = mn(t_raw, raw_write(raw, bufs, each));
        unlink(raw);
        t0 = accel_now();
        if (accel_ckpt_save_state(cs, NULL, NULL, 0) != ACCEL_OK) die("sync save");
        t_sync = mn(t_sync, accel_now() - t0);
        t0 = accel_now();
        if (accel_ckpt_save_state(ca, NULL, NULL, 0) != ACCEL_OK) die("async save");
        t_async = mn(t_async, accel_now() - t0);
        if (accel_ckpt_wait(ca) != ACCEL_OK) die("async wait");
        t_bg = accel_now() - t0;
    }
    snprintf(params, sizeof params, "\"bytes\": %zu, \"tensors\": %d, \"state\": \"params + AdamW m, v (F32)\", "
             "\"parameters\": %zu, \"fsync\": true", total, 3 * NT, nparams);
    line("ckpt-async-stall", params, "s", t_async, t_copy, "memcpy into pinned memory (the snapshot copy alone)",
         1 / 1.2);
    line("ckpt-sync-stall", params, "s", t_sync, t_raw, "write()+fsync of the same bytes", 0);
    line("ckpt-async-vs-sync", params, "s", t_async, t_sync, "accel_ckpt_save_state, async off", 0);
    fprintf(stderr, "bench_ckpt_async: the background write (save_state to published) took %.3f s\n", t_bg);

    /* a step during a background write vs without one: calibrate the step to ~20 ms, then STEPS idle steps, then
       steps right after an async save_state, counted while the writer thread still runs (its on_range end) */
    for (i = 0; i < 4096; ++i) x[i] = (float)i;
    while (compute_step(x, 4096, iters) < 0.02 && iters < (1 << 20)) iters *= 2;
    for (i = 0; i < STEPS; ++i) idle[i] = compute_step(x, 4096, iters);
    pthread_mutex_lock(&g_mu);
    g_write_end = 0;
    pthread_mutex_unlock(&g_mu);
    if (accel_ckpt_save_state(ca, NULL, NULL, 0) != ACCEL_OK) die("async save");
    for (i = 0; i < STEPS; ++i) {
        double t0 = accel_now(), t = compute_step(x, 4096, iters), e = write_end();
        if (e == 0 || e > t0 + t) busy[nbusy++] = t; /* the writer ran during the whole step */
    }
    if (accel_ckpt_wait(ca) != ACCEL_OK) die("async wait");
    qsort(idle, STEPS, sizeof(double), cmp_d);
    if (nbusy) {
        qsort(busy, (size_t)nbusy, sizeof(double), cmp_d);
        snprintf(params, sizeof params, "\"bytes\": %zu, \"step\": \"compute loop, one core\", \"steps\": %d, "
                 "\"cores\": %d, \"statistic\": \"median\"", total, nbusy, cores);
        line("ckpt-async-step", params, "ms", busy[nbusy / 2] * 1e3, idle[STEPS / 2] * 1e3, "the same step, no write",
             1 / 1.05);
    } else {
        fprintf(stderr, "bench_ckpt_async: the background write ended before the first step did: no step line\n");
    }

    accel_ckpt_destroy(cs);
    accel_ckpt_destroy(ca);
    accel_pinned_free(&acc, pinned);
    for (g = 0; g < 3 * NT; ++g) free(bufs[g]);
    accel_shutdown(&acc);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "cleanup of %s failed\n", dir);
    return 0;
}
