/* The flight recorder's and the mismatch check's cost (issue 29), under mpirun -np 2. Compiled with the
   implementation (ACCEL_STATIC) to time exactly what a call adds (in this thread's CPU time):
     flight_recorder_coll   per accel_coll call: the call site (enter/leave), the ring's post and done, and the
                            all-reduce tag's signature — against one 64 KiB MPI_Allreduce measured in the same run
                            (goal: <= 1 % of it);
     flight_recorder_host   per host-group call: the same plus the host group's entry (goal: <= 100 ns);
     all_reduce_64k_fr      accel_coll_all_reduce of 64 KiB with the recorder on against off (the whole call;
                            information: the difference is below the run-to-run noise).
   Each line is the JSON of bench/ (time per call in ns; ratio = accel / reference). */
#define ACCEL_IMPLEMENTATION
#define ACCEL_STATIC
#include "accel.h"
#include "accel_collectives.h"
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static accel acc;
static int R;
static volatile uint64_t sink;

static double max_time(double t) {
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return t;
}
static void line(const char *bench, const char *params, double a, double ref, const char *ref_name, const char *goal) {
    if (R != 0) return;
    printf("{\"bench\": \"%s\", \"params\": {%s}, \"unit\": \"ns\", \"accel\": %.2f, \"reference\": %.2f, "
           "\"reference_name\": \"%s\", \"ratio\": %.5f, \"goal\": %s}\n",
           bench, params, a, ref, ref_name, a / ref, goal);
    fflush(stdout);
}
/* this thread's CPU time: the recorder's work is CPU work, and a loaded machine's preemptions don't count */
static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
/* the recorder's work for one call, n times; CPU seconds per call (best of 5 blocks) */
static double recorder_cost(int host, int n) {
    double best = 1e9;
    int rep, i;
    for (rep = 0; rep < 5; ++rep) {
        double t0 = cpu_now();
        for (i = 0; i < n; ++i) {
            uint64_t id;
            accel_fr_site_enter(__FILE__, __LINE__);
            if (host) accel__fr_host_group(&acc);
            id = accel__fr_post(host ? 0 : 1, (uint64_t)i, host ? "barrier" : "all_reduce", host ? -1 : 0, 2, 16384,
                                65536, 0);
            if (!host) sink += accel__coll_tag_sig(16384, ACCEL_F32, ACCEL_COLL_SUM, 19);
            accel__fr_done(&acc, id, ACCEL_OK);
            (void)accel_fr_site_leave(ACCEL_OK);
        }
        t0 = (cpu_now() - t0) / n;
        if (t0 < best) best = t0;
    }
    return best;
}
static double allreduce_time(accel_coll *c, float *x, int raw, int it) {
    double best = 1e9;
    int rep, i;
    for (rep = 0; rep < 7; ++rep) {
        double t0;
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = accel_now();
        for (i = 0; i < it; ++i) {
            if (raw) MPI_Allreduce(MPI_IN_PLACE, x, 16384, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            else if (accel_coll_all_reduce(c, x, x, 16384, ACCEL_F32, ACCEL_COLL_SUM) != ACCEL_OK) {
                fprintf(stderr, "%s\n", accel_last_error(&acc));
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        }
        t0 = max_time((accel_now() - t0) / it);
        if (t0 < best) best = t0;
    }
    return best;
}

int main(void) {
    accel_desc d;
    accel_coll *c;
    float *x = (float *)calloc(16384, sizeof(float));
    double t_mpi, t_coll, t_host, t_on, t_off;
    uint64_t cap;
    char params[96];
    memset(&d, 0, sizeof d);
    d.cpu = 1;
    if (!x || accel_init(&acc, &d) != ACCEL_OK || accel_coll_create(&acc, NULL, &c) != ACCEL_OK) {
        fprintf(stderr, "bench_fr: %s\n", accel_last_error(&acc));
        return 1;
    }
    R = acc.process_index;
    snprintf(params, sizeof params, "\"bytes\": 65536, \"np\": %d", acc.num_processes);
    t_mpi = allreduce_time(c, x, 1, 2000);
    t_coll = recorder_cost(0, 200000);
    t_host = recorder_cost(1, 200000);
    t_coll = max_time(t_coll);
    t_host = max_time(t_host);
    line("flight_recorder_coll", params, t_coll * 1e9, t_mpi * 1e9, "MPI_Allreduce 64 KiB", "0.01");
    line("flight_recorder_host", params, t_host * 1e9, 100.0, "limit 100 ns", "1.0");
    cap = accel__g_fr_cap;
    t_on = allreduce_time(c, x, 0, 2000);
    accel__g_fr_cap = 0; /* the recorder off: post returns 0, done only tracks success */
    t_off = allreduce_time(c, x, 0, 2000);
    accel__g_fr_cap = cap;
    line("all_reduce_64k_fr", params, t_on * 1e9, t_off * 1e9, "accel all_reduce, recorder off", "null");
    accel_coll_destroy(c);
    accel_shutdown(&acc);
    free(x);
    return 0;
}
