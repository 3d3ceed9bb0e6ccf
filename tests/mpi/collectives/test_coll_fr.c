/* The flight recorder on 3 ranks (run by test_fr.sh, which then runs `accel fr` on the dumps): after two healthy
   calls, call #2 of the context diverges on the last rank —
     skip   it skips an all-reduce and goes on to the next broadcast (ACCEL_ERR_MISMATCH on every rank at once: the
            broadcast's messages carry another signature; before broadcast was checked, every rank reached the 2 s
            deadline),
     count  it calls the all-reduce with 3 elements instead of 4 (ACCEL_ERR_MISMATCH on every rank at once),
     stall  it computes for 6 s instead of calling (the others reach the deadline; rank 0 then sends it SIGUSR1,
            which dumps it while it computes).
   Every rank's dump is written by accel (deadline, mismatch, SIGUSR1). This program writes DIR/expect.txt: lines
   that `accel fr DIR` must print, from its own call sites (__LINE__) and its own count of calls. */
#include "accel.h"
#include "accel_collectives.h"
#include "accel_test.h"
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static accel acc;
static void quiet(void *u, accel_log_level l, const char *m) { (void)u; (void)l; (void)m; }

static void sleep_s(double s) { /* nanosleep returns early on a signal: sleep the rest */
    double until = accel_now() + s;
    while (accel_now() < until) {
        struct timespec ts;
        double left = until - accel_now();
        if (left <= 0) break;
        ts.tv_sec = (time_t)left;
        ts.tv_nsec = (long)((left - (double)ts.tv_sec) * 1e9);
        nanosleep(&ts, NULL);
    }
}

static FILE *fopen_expect(const char *dir) {
    char path[1024];
    snprintf(path, sizeof path, "%s/expect.txt", dir);
    return fopen(path, "w");
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    const char *dir = getenv("ACCEL_FLIGHT_DIR");
    accel_desc d;
    accel_coll *c;
    float x[4] = {1, 2, 3, 4};
    int64_t pids[3], me;
    int R, last, line_a = 0, line_b = 0, line_prev = 0;
    accel_result r;
    FILE *ex = NULL;
    char base[256];
    memset(&d, 0, sizeof d);
    d.cpu = 1;
    d.log_fn = quiet;
    if (accel_init(&acc, &d) != ACCEL_OK || acc.num_processes != 3 || !dir) {
        fprintf(stderr, "test_coll_fr: needs 3 ranks and ACCEL_FLIGHT_DIR (%s)\n", accel_last_error(&acc));
        return 1;
    }
    R = acc.process_index;
    last = R == 2;
    AT_EQ_INT(acc.desc.collective_timeout_ms, 2000); /* ACCEL_COLLECTIVE_TIMEOUT=2 from test_fr.sh */
    me = (int64_t)getpid();
    AT_EQ_INT(accel_host_allgather(&acc, &me, pids, sizeof me), ACCEL_OK);
    AT_EQ_INT(accel_coll_create(&acc, NULL, &c), ACCEL_OK);
    snprintf(base, sizeof base, "%s", __FILE__); /* as ACCEL_FR_SITE records it */
    /* calls #0 and #1: healthy */
    AT_EQ_INT(accel_coll_all_reduce(c, x, x, 4, ACCEL_F32, ACCEL_COLL_SUM), ACCEL_OK);
    AT_EQ_INT(accel_coll_broadcast(c, x, 4, ACCEL_F32, 0), ACCEL_OK); line_prev = __LINE__;
    if (!strcmp(mode, "skip")) {
        if (!last) {
            r = accel_coll_all_reduce(c, x, x, 4, ACCEL_F32, ACCEL_COLL_SUM); line_a = __LINE__;
            AT_EQ_INT(r, ACCEL_ERR_MISMATCH); /* the broadcast's messages carry another signature: found at once */
        }
        r = accel_coll_broadcast(c, x, 4, ACCEL_F32, 0); line_b = __LINE__;
        AT_CHECK(r == (last ? ACCEL_ERR_MISMATCH : ACCEL_ERR_STATE));
        if (R == 0 && (ex = fopen_expect(dir)) != NULL)
            fprintf(ex, "call #2: rank 2 made a different call: broadcast(F32, count 4) at %s:%d\n"
                        "ranks 0, 1 made all_reduce(sum, F32, count 4) at %s:%d\n", base, line_b, base, line_a);
    } else if (!strcmp(mode, "count")) {
        if (last) { r = accel_coll_all_reduce(c, x, x, 3, ACCEL_F32, ACCEL_COLL_SUM); line_b = __LINE__; }
        else { r = accel_coll_all_reduce(c, x, x, 4, ACCEL_F32, ACCEL_COLL_SUM); line_a = __LINE__; }
        AT_EQ_INT(r, ACCEL_ERR_MISMATCH);
        if (R == 0 && (ex = fopen_expect(dir)) != NULL)
            fprintf(ex, "call #2: rank 2 made a different call: all_reduce(sum, F32, count 3) at %s:%d\n"
                        "ranks 0, 1 made all_reduce(sum, F32, count 4) at %s:%d\n", base, line_a - 1, base, line_a);
        (void)line_b;
    } else if (!strcmp(mode, "stall")) {
        if (last) {
            sleep_s(6.0); /* stuck in its own work: SIGUSR1 from rank 0 dumps it meanwhile */
        } else {
            r = accel_coll_all_reduce(c, x, x, 4, ACCEL_F32, ACCEL_COLL_SUM); line_a = __LINE__;
            AT_EQ_INT(r, ACCEL_ERR_TIMEOUT);
            if (R == 0) {
                sleep_s(0.5); /* rank 1's dump too */
                AT_EQ_INT(kill((pid_t)pids[2], SIGUSR1), 0);
            }
            sleep_s(R == 0 ? 3.0 : 3.5); /* the final barrier's 2 s deadline must cover the end of the stall */
        }
        if (R == 0 && (ex = fopen_expect(dir)) != NULL)
            fprintf(ex, "call #2: rank 2 never made it; ranks 0, 1 made all_reduce(sum, F32, count 4) at %s:%d "
                        "(failed)\n"
                        "rank 2's last call in this group: #1 broadcast(F32, count 4) at %s:%d (completed)\n",
                    base, line_a, base, line_prev);
    } else {
        fprintf(stderr, "usage: test_coll_fr skip|count|stall\n");
        return 2;
    }
    if (ex) fclose(ex);
    (void)line_b;
    AT_EQ_INT(accel_wait_for_everyone(&acc), ACCEL_OK);
    accel_coll_destroy(c);
    r = (accel_result)at_finish("collectives_fr");
    accel_shutdown(&acc);
    return (int)r;
}
