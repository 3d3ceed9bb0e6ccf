/* Overhead of accel_profile.h's ranges, each against the same loop without the range, measured in the same run
   (REPS short chunks of each, interleaved, timed with the thread's CPU clock; the best chunk of each side counts:
   a chunk is short enough to run without a context switch on a loaded machine). One JSON line per measurement
   (DESIGN.md → Testing):
     prof_range_disabled     accel_prof_begin + accel_prof_end on a disabled profiler (desc.disabled = 1)
     prof_range_unrecorded   the same on an enabled profiler on a step the schedule does not record (balance checks)
     prof_range_enabled      the same on a recorded step: two CLOCK_MONOTONIC reads, the record kept for the trace,
                             the per-step sums (CPU build: no CUDA events)
   The loop body is one add behind a compiler barrier with a memory clobber, so the profiler's flag is loaded from
   memory on every iteration (as it is in a real loop, where calls in between defeat hoisting).
     "accel"     ns per iteration with the range      "reference"   ns per iteration of the same loop without it
     "overhead_ns" = accel - reference                "goal_ns"     the budget: 2 ns disabled, 1000 ns enabled
     "ratio" = goal_ns / overhead_ns (higher is better; "goal": 1.0 = within budget; overhead below 0.01 ns counts as
     0.01 ns, i.e. lost in the loop's own noise).
     prof_range_enabled_cuda (bench_profile SCALE --device, an implementation built by nvcc and a CUDA device)
                             the same with device timing: two cudaEventRecord calls on acc's stream more
   usage: bench_profile [iterations_scale] [--device]  */
#include "accel.h"
#include "accel_profile.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__GNUC__) || defined(__clang__)
#define BARRIER(x) __asm__ volatile("" : "+r"(x) : : "memory")
#else
#define BARRIER(x) ((void)(x))
#endif
#define REPS 101 /* short interleaved chunks; the best of each side */

/* this thread's CPU time: on a shared machine, time other processes take from us is not counted */
static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double loop_plain(long n) {
    long i, x = 0;
    double t0 = now();
    for (i = 0; i < n; ++i) {
        x += i;
        BARRIER(x);
    }
    return (now() - t0) * 1e9 / (double)n + (x == 42 ? 1e-30 : 0);
}

static double loop_ranges(accel_prof *p, long n) {
    long i, x = 0;
    int bad = 0;
    double t0 = now();
    for (i = 0; i < n; ++i) {
        bad |= accel_prof_begin(p, ACCEL_PROF_FORWARD);
        x += i;
        BARRIER(x);
        bad |= accel_prof_end(p, ACCEL_PROF_FORWARD);
    }
    t0 = (now() - t0) * 1e9 / (double)n + (x == 42 ? 1e-30 : 0);
    if (bad) {
        fprintf(stderr, "bench_profile: a range failed: %s\n", accel_last_error(p->acc));
        exit(1);
    }
    return t0;
}

static void report(const char *name, long n, double accel_ns, double ref_ns, double goal_ns) {
    double over = accel_ns - ref_ns, eff = over < 0.01 ? 0.01 : over;
    printf("{\"bench\": \"%s\", \"params\": {\"iterations\": %ld, \"reps\": %d}, \"unit\": \"ns/iteration\", "
           "\"accel\": %.3f, \"reference\": %.3f, \"reference_name\": \"the same loop without the range\", "
           "\"overhead_ns\": %.3f, \"goal_ns\": %.1f, \"ratio\": %.2f, \"goal\": 1.0}\n",
           name, n, REPS, accel_ns, ref_ns, over, goal_ns, goal_ns / eff);
}

/* the best (lowest) of REPS interleaved chunks of each side */
static void measure(const char *name, accel_prof *p, long n, double goal_ns) {
    double best_a = 1e30, best_r = 1e30;
    int r;
    for (r = 0; r < REPS; ++r) {
        double ref = loop_plain(n), a = loop_ranges(p, n);
        if (a < best_a) best_a = a;
        if (ref < best_r) best_r = ref;
    }
    report(name, n, best_a, best_r, goal_ns);
}

int main(int argc, char **argv) {
    accel acc;
    accel_desc d;
    accel_prof *p = NULL;
    accel_prof_desc pd;
    double scale = argc > 1 ? atof(argv[1]) : 1.0;
    int device = argc > 2 && !strcmp(argv[2], "--device");
    long n_fast = (long)(400000 * scale), n_rec = (long)(2000 * scale);
    if (n_fast < 1000) n_fast = 1000;
    if (n_rec < 100) n_rec = 100;
    memset(&d, 0, sizeof d);
    d.cpu = !device;
    d.no_mpi = 1;
    if (accel_init(&acc, &d) != ACCEL_OK) { fprintf(stderr, "%s\n", accel_last_error(&acc)); return 1; }
    memset(&pd, 0, sizeof pd);
    pd.disabled = 1;
    if (accel_prof_create(&acc, &pd, &p) != ACCEL_OK) { fprintf(stderr, "%s\n", accel_last_error(&acc)); return 1; }
    measure("prof_range_disabled", p, n_fast, 2.0);
    accel_prof_destroy(p);
    memset(&pd, 0, sizeof pd);
    pd.wait = 1; pd.active = 1; /* step 0 is a wait step: not recorded */
    if (accel_prof_create(&acc, &pd, &p) != ACCEL_OK || p->recording) { fprintf(stderr, "%s\n", accel_last_error(&acc)); return 1; }
    measure("prof_range_unrecorded", p, n_fast / 4, 1000.0);
    accel_prof_destroy(p);
    /* every step recorded; REPS x n_rec ranges stay within max_ranges, so every one is kept for the trace (the
       record array's growth is amortized over the chunks; the best chunk excludes the copies) */
    if (accel_prof_create(&acc, NULL, &p) != ACCEL_OK || !p->recording) { fprintf(stderr, "%s\n", accel_last_error(&acc)); return 1; }
    measure(p->device_timing ? "prof_range_enabled_cuda" : "prof_range_enabled", p, n_rec, 1000.0);
    if (p->dropped_ranges) { fprintf(stderr, "bench_profile: ranges were dropped\n"); return 1; }
    if (device && !p->device_timing) fprintf(stderr, "bench_profile: --device, but no device timing (no device, or a C build)\n");
    accel_prof_destroy(p);
    accel_shutdown(&acc);
    return 0;
}
