/* accel_profile.h across real processes.
     test_profile_mpi ok DIR          every rank profiles a few steps (rank-dependent phase lengths), writes
                                      DIR/profile_<rank>.json and takes part in the merge: rank 0 writes
                                      DIR/profile_merged.json (check_merge.py then reads every file); every rank
                                      gets ACCEL_OK; a rank whose profiler is disabled still takes part
     test_profile_mpi unwritable DIR  the merge path on rank 0 lies under a regular file: rank 0 gets ACCEL_ERR_IO,
                                      every other rank ACCEL_ERR_REMOTE carrying rank 0's message — nobody hangs */
#include "accel.h"
#include "accel_profile.h"
#include "accel_test.h"
#include <stdlib.h>
#include <string.h>

static void spin_us(double us) {
    double t0 = accel_now();
    while ((accel_now() - t0) * 1e6 < us) {
    }
}

static void quiet(void *user, accel_log_level level, const char *msg) {
    (void)user; (void)level; (void)msg;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "ok", *dir = argc > 2 ? argv[2] : "/tmp/accel_prof_mpi";
    accel acc;
    accel_desc d;
    accel_prof *p = NULL;
    accel_prof_desc pd;
    int k, rank;
    memset(&d, 0, sizeof d);
    d.log_fn = quiet;
    d.collective_timeout_ms = 60000;
    if (accel_init(&acc, &d) != ACCEL_OK) { fprintf(stderr, "accel_init: %s\n", accel_last_error(&acc)); return 1; }
    rank = acc.process_index;
    at_context = mode;
    memset(&pd, 0, sizeof pd);
    pd.trace_dir = dir;
    pd.wait = 1;
    pd.active = 3; /* steps 1-3 and 5-7 of 8 */
    AT_EQ_INT(accel_prof_create(&acc, &pd, &p), ACCEL_OK);
    if (!p) return at_finish("profile_mpi");
    for (k = 0; k < 8; ++k) {
        AT_CHECK(accel_prof_begin(p, ACCEL_PROF_DATA) == ACCEL_OK);
        spin_us(200 + 100 * rank);
        AT_CHECK(accel_prof_end(p, ACCEL_PROF_DATA) == ACCEL_OK);
        AT_CHECK(accel_prof_begin(p, ACCEL_PROF_FORWARD) == ACCEL_OK);
        spin_us(300);
        AT_CHECK(accel_prof_end(p, ACCEL_PROF_FORWARD) == ACCEL_OK);
        AT_CHECK(accel_prof_begin(p, ACCEL_PROF_GRAD_SYNC) == ACCEL_OK);
        AT_CHECK(accel_wait_for_everyone(&acc) == ACCEL_OK);
        AT_CHECK(accel_prof_end(p, ACCEL_PROF_GRAD_SYNC) == ACCEL_OK);
        AT_CHECK(accel_prof_step(p) == ACCEL_OK);
    }
    AT_EQ_INT(p->recorded_steps, 6);
    if (!strcmp(mode, "ok")) {
        AT_EQ_INT(accel_prof_write_trace(p), ACCEL_OK);
        AT_EQ_INT(accel_prof_merge_trace(p, NULL), ACCEL_OK);
        /* a second merge where the last rank's profiler is disabled: it contributes nothing, nobody hangs */
        if (rank == acc.num_processes - 1) {
            accel_prof_destroy(p);
            memset(&pd, 0, sizeof pd);
            pd.disabled = 1;
            AT_EQ_INT(accel_prof_create(&acc, &pd, &p), ACCEL_OK);
        }
        {
            char path[600];
            snprintf(path, sizeof path, "%s/partial.json", dir);
            AT_EQ_INT(accel_prof_merge_trace(p, path), ACCEL_OK);
        }
    } else {
        char path[600];
        /* profile_0.json is a regular file once written: a path under it cannot be created, even by root */
        snprintf(path, sizeof path, "%s/profile_0.json/merged.json", dir);
        AT_EQ_INT(accel_prof_write_trace(p), ACCEL_OK);
        AT_EQ_INT(accel_wait_for_everyone(&acc), ACCEL_OK);
        {
            accel_result r = accel_prof_merge_trace(p, path);
            AT_EQ_INT(r, rank == 0 ? ACCEL_ERR_IO : ACCEL_ERR_REMOTE);
            if (rank != 0) AT_CONTAINS(accel_last_error(&acc), "rank 0 failed");
            AT_CONTAINS(accel_last_error(&acc), "profile_0.json/merged.json");
        }
    }
    accel_prof_destroy(p);
    accel_shutdown(&acc);
    return at_finish("profile_mpi");
}
