/* Join for uneven inputs (accel_ddp.h JOIN) under mpirun.
   usage: test_ddp_join join   (np 3) ranks with 3, 5 and 7 batches (and an even_batches=false loader): prints the
                               final weights as "W case rank idx hexfloat" lines for join_reference.py, which checks
                               them against DDP's rule in float64; checks here what each rank sees per step.
          test_ddp_join joinfault  (np 3) a rank that stalls without joining: the others get ACCEL_ERR_TIMEOUT. */
#include "accel.h"
#include "accel_collectives.h"
#include "accel_ddp.h"
#include "accel_data.h"
#include "accel_test.h"
#include "accel_test_coll.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static accel acc;
static int P, R;

/* ------------------------------------------------------------------------------------------------------- join */
/* Three gradient tensors (F64); each element is independent: grad_i = 0.5 w_i + c(rank, step, i), SGD lr 0.1. The
   middle one is >= 1 MiB (reduced directly on MPI), the others packed; first_bucket_mb tiny: several buckets. Case
   "flat" uses one contiguous buffer (flat mode) and divide_by_initial_world_size=False. */
#define N0 5
#define N1 140000
#define N2 7
static double coef(int rank, int64_t step, int tensor, int i) {
    return (rank + 1) * 0.25 + (double)step * 0.125 + (i % 7) * 0.0625 - tensor * 0.5;
}
static const int sample_idx[] = {0, 1, 2, 3, 4, 6, 997, 65536, 139999};

/* one file per rank in $ACCEL_JOIN_OUT (mpirun's merged stdout could interleave lines) */
static void print_weights(const char *name, double *const *w, const int *n) {
    const char *dir = getenv("ACCEL_JOIN_OUT");
    char path[512];
    FILE *f;
    int t, k;
    if (!dir || !*dir) return;
    snprintf(path, sizeof path, "%s/rank%d.txt", dir, R);
    f = fopen(path, "a");
    AT_CHECK(f != NULL);
    if (!f) return;
    for (t = 0; t < 3; ++t)
        for (k = 0; k < (int)(sizeof sample_idx / sizeof sample_idx[0]); ++k)
            if (sample_idx[k] < n[t]) fprintf(f, "W %s %d %d %d %a\n", name, R, t, sample_idx[k], w[t][sample_idx[k]]);
    fclose(f);
}

static void join_case(const char *name, int flat, int by_active, int use_loader) {
    static double store[N0 + N1 + N2], w0[N0], w1[N1], w2[N2];
    double *g[3], *w[3];
    int n[3], t, i, nb, k, step;
    accel_coll *c;
    accel_ddp *red;
    accel_ddp_desc rd;
    accel_ddp_join_desc jd;
    accel_tensor gt[3], pt[3];
    accel_data_shard sh;
    char ctx[64];
    snprintf(ctx, sizeof ctx, "join %s", name);
    at_context = ctx;
    n[0] = N0; n[1] = N1; n[2] = N2;
    g[0] = store; g[1] = store + N0; g[2] = store + N0 + N1;
    w[0] = w0; w[1] = w1; w[2] = w2;
    for (t = 0; t < 3; ++t)
        for (i = 0; i < n[t]; ++i) w[t][i] = 1.0 + 0.001 * i - t;
    memset(gt, 0, sizeof gt);
    memset(pt, 0, sizeof pt);
    for (t = 0; t < 3; ++t) {
        gt[t].name = "grad"; gt[t].ptr = g[t]; gt[t].dtype = ACCEL_F64; gt[t].ndim = 1; gt[t].shape[0] = n[t];
        pt[t] = gt[t];
        pt[t].name = "weight"; pt[t].ptr = w[t];
    }
    AT_EQ_INT(accel_coll_create(&acc, NULL, &c), ACCEL_OK);
    memset(&rd, 0, sizeof rd);
    rd.first_bucket_mb = 1e-5;
    rd.bucket_cap_mb = 1e-5;
    rd.flat = flat ? ACCEL_ON : ACCEL_OFF;
    AT_EQ_INT(accel_ddp_create(c, &rd, &red), ACCEL_OK);
    AT_EQ_INT(accel_ddp_add(red, gt, 3), ACCEL_OK);
    memset(&jd, 0, sizeof jd);
    jd.no_divide_by_initial_world_size = by_active;
    AT_EQ_INT(accel_ddp_join_begin(red, &jd), ACCEL_OK);
    if (!flat) AT_CHECK(accel_ddp_num_buckets(red) >= 3);
    else AT_EQ_INT(accel_ddp_is_flat(red), 1);
    nb = 3 + 2 * R; /* 3, 5, 7 batches */
    if (use_loader) { /* even_batches=false: N=10, B=2 on 3 ranks gives 2, 2, 1 batches */
        accel_data_shard_desc dd;
        memset(&dd, 0, sizeof dd);
        dd.dataset_len = 10; dd.batch_size = 2; dd.no_even_batches = 1;
        AT_EQ_INT(accel_data_shard_init(&acc, &sh, &dd), ACCEL_OK);
        nb = (int)accel_data_shard_len(&sh);
    }
    acc.sync_gradients = 1;
    for (step = 0; step < nb; ++step) {
        double extra = 0;
        if (use_loader) {
            int64_t idx[2], cnt = 0;
            AT_EQ_INT(accel_data_shard_next(&sh, idx, &cnt), ACCEL_OK);
            for (k = 0; k < cnt; ++k) extra += (double)(idx[k] + 1) * 0.01;
        }
        for (t = 0; t < 3; ++t)
            for (i = 0; i < n[t]; ++i) g[t][i] = 0.5 * w[t][i] + coef(R, step, t, i) + extra;
        for (t = 2; t >= 0; --t) AT_EQ_INT(accel_ddp_grad_ready(red, t), ACCEL_OK); /* backward order */
        AT_EQ_INT(accel_ddp_wait(red), ACCEL_OK);
        if (!use_loader) { /* ranks with more than `step` batches: 3 while step < 3, then 2, then 1 */
            int want = step < 3 ? 3 : step < 5 ? 2 : 1;
            AT_EQ_INT(accel_ddp_join_active(red), want);
        }
        for (t = 0; t < 3; ++t)
            for (i = 0; i < n[t]; ++i) w[t][i] -= 0.1 * g[t][i];
    }
    if (use_loader) {
        int64_t idx[2], cnt = 1;
        AT_EQ_INT(accel_data_shard_next(&sh, idx, &cnt), ACCEL_OK); /* ends the epoch */
        AT_EQ_INT(cnt, 0);
        accel_data_shard_deinit(&sh);
    }
    /* out of batches: the others' remaining steps are shadowed here; my gradients stay as my last step left them */
    {
        double before = g[1][997];
        AT_EQ_INT(accel_ddp_join_end(red, pt, 3), ACCEL_OK);
        AT_NEAR(g[1][997], before, 0);
    }
    AT_EQ_INT(accel_ddp_join_active(red), P);
    AT_EQ_INT(accel_ddp_join_end(red, pt, 3), ACCEL_ERR_STATE); /* not in join mode any more */
    print_weights(name, w, n);
    accel_ddp_destroy(red);
    accel_coll_destroy(c);
    at_context = "";
}

/* the last rank stalls without joining: the others' next round times out (1 s) instead of hanging */
static void join_fault(void) {
    accel_coll *c;
    accel_coll_desc cd;
    accel_ddp *red;
    accel_tensor gt;
    double g[4] = {1, 2, 3, 4}, t0, dt;
    accel_result r;
    memset(&cd, 0, sizeof cd);
    cd.timeout_ms = 1000;
    AT_EQ_INT(accel_coll_create(&acc, &cd, &c), ACCEL_OK);
    memset(&gt, 0, sizeof gt);
    gt.ptr = g; gt.dtype = ACCEL_F64; gt.ndim = 1; gt.shape[0] = 4;
    AT_EQ_INT(accel_ddp_create(c, NULL, &red), ACCEL_OK);
    AT_EQ_INT(accel_ddp_add(red, &gt, 1), ACCEL_OK);
    AT_EQ_INT(accel_ddp_join_begin(red, NULL), ACCEL_OK);
    acc.sync_gradients = 1;
    AT_EQ_INT(accel_ddp_wait(red), ACCEL_OK); /* one healthy step everywhere */
    if (R == P - 1) {
        sleep(3); /* "dead": neither reduces nor joins within the others' deadline */
    } else {
        t0 = accel_now();
        r = R == 0 ? accel_ddp_join_end(red, NULL, 0) : accel_ddp_wait(red);
        dt = accel_now() - t0;
        AT_EQ_INT(r, ACCEL_ERR_TIMEOUT);
        AT_CHECK_MSG(dt >= 0.9 && dt < 2.5, "timed out close to the 1 s deadline");
        AT_CONTAINS(accel_last_error(&acc), "join");
    }
    AT_EQ_INT(accel_wait_for_everyone(&acc), ACCEL_OK); /* the core's own communicator still works */
    accel_ddp_destroy(red);
    accel_coll_destroy(c);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "join";
    int rc;
    if (at_init_cpu(&acc, 0, &P, &R) != 0) return 1;
    if (!strcmp(mode, "join")) {
        if (P != 3) { fprintf(stderr, "join needs 3 ranks\n"); return 1; }
        join_case("buckets", 0, 0, 0);
        join_case("flat_by_active", 1, 1, 0);
        join_case("loader", 0, 0, 1);
        join_case("loader_by_active", 1, 1, 1);
    } else if (!strcmp(mode, "joinfault")) {
        join_fault();
    } else {
        fprintf(stderr, "usage: test_ddp_join join|joinfault\n");
        return 2;
    }
    rc = at_finish("ddp_join");
    accel_shutdown(&acc);
    return rc;
}
