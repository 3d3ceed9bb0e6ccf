/* accel_ddp.h's LocalSGD under mpirun (np 1..4) against a long-hand float64 reference of accelerate/local_sgd.py:
   each rank trains its own copy of two F64 parameter tensors (a nonlinear gradient, 0.25 w^2 + c: with a linear one
   local SGD and DDP end at the same mean) with SGD and gradient accumulation (an optimizer step
   every ACC micro-batches and at the last), local_sgd_step after every micro-batch; while LocalSGD is open and
   enabled the reducer does not reduce (model.no_sync) even on sync steps; the parameters are replaced by their mean
   (sum, then / P) after every K-th step and at the end. Disabled (enabled=OFF, or one process: distributed_type NO)
   nothing is averaged and DDP's gradient average runs on every sync step. The reference simulates every rank.
   Also trigger_sync_in_backward: the reducer reduces on a micro-batch accumulate does not sync, only when
   distributed, nested, and inside an open LocalSGD. */
#include "accel.h"
#include "accel_collectives.h"
#include "accel_ddp.h"
#include "accel_test.h"
#include "accel_test_coll.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static accel acc;
static int P, R;

enum { NA = 37, NB = 5, STEPS = 12, ACC = 2, K = 5, MAXP = 8 }; /* ACC: the Accelerator's accumulation steps */
static const int sizes[2] = {NA, NB};

static double coef(int r, int s, int t, int i) { return (r + 1) * 0.25 + s * 0.125 + (i % 7) * 0.0625 - t * 0.5; }
static double winit(int r, int t, int i) { return 1.0 + 0.001 * i - t + 0.01 * r; } /* ranks start apart */

/* the reference, every rank at once: w[r][t][i] */
static void reference(int enabled, double w[MAXP][2][NA]) {
    double g[MAXP][2][NA];
    int r, t, i, s;
    for (r = 0; r < P; ++r)
        for (t = 0; t < 2; ++t)
            for (i = 0; i < sizes[t]; ++i) { w[r][t][i] = winit(r, t, i); g[r][t][i] = 0; }
    for (s = 0; s < STEPS; ++s) {
        int sync = (s + 1) % ACC == 0;
        for (t = 0; t < 2; ++t)
            for (i = 0; i < sizes[t]; ++i) {
                double avg = 0;
                for (r = 0; r < P; ++r) g[r][t][i] += 0.25 * w[r][t][i] * w[r][t][i] + coef(r, s, t, i);
                if (!enabled && sync) { /* DDP's average of the accumulated gradients */
                    for (r = 0; r < P; ++r) avg += g[r][t][i] * (1.0 / P);
                    for (r = 0; r < P; ++r) g[r][t][i] = avg;
                }
                if (sync)
                    for (r = 0; r < P; ++r) { w[r][t][i] -= 0.1 * g[r][t][i]; g[r][t][i] = 0; }
            }
        if (enabled && (s + 1) % K == 0)
            for (t = 0; t < 2; ++t)
                for (i = 0; i < sizes[t]; ++i) {
                    double sum = 0;
                    for (r = 0; r < P; ++r) sum += w[r][t][i];
                    for (r = 0; r < P; ++r) w[r][t][i] = sum / P;
                }
    }
    if (enabled)
        for (t = 0; t < 2; ++t)
            for (i = 0; i < sizes[t]; ++i) {
                double sum = 0;
                for (r = 0; r < P; ++r) sum += w[r][t][i];
                for (r = 0; r < P; ++r) w[r][t][i] = sum / P;
            }
}

static void train(accel_coll *c, accel_toggle enabled) {
    double w[2][NA], g[2][NA], ref[MAXP][2][NA];
    accel_tensor pt[2], gt[2];
    accel_ddp *red;
    accel_ddp_local_sgd *l;
    accel_ddp_local_sgd_desc ld;
    int t, i, s, bad = 0, on = enabled != ACCEL_OFF && P > 1;
    for (t = 0; t < 2; ++t) {
        for (i = 0; i < sizes[t]; ++i) { w[t][i] = winit(R, t, i); g[t][i] = 0; }
        pt[t] = at_vec("w", w[t], ACCEL_F64, sizes[t]);
        gt[t] = at_vec("g", g[t], ACCEL_F64, sizes[t]);
    }
    AT_EQ_INT(accel_ddp_create(c, NULL, &red), ACCEL_OK);
    AT_EQ_INT(accel_ddp_add(red, gt, 2), ACCEL_OK);
    memset(&ld, 0, sizeof ld);
    ld.local_sgd_steps = K;
    ld.enabled = enabled;
    AT_EQ_INT(accel_ddp_local_sgd_begin(red, pt, 2, &ld, &l), ACCEL_OK);
    AT_EQ_INT(accel_ddp_local_sgd_enabled(l), on);
    for (s = 0; s < STEPS; ++s) {
        int sync;
        for (t = 0; t < 2; ++t)
            for (i = 0; i < sizes[t]; ++i) g[t][i] += 0.25 * w[t][i] * w[t][i] + coef(R, s, t, i);
        accel_accumulate_begin(&acc);
        sync = acc.sync_gradients;
        AT_EQ_INT(sync, (s + 1) % ACC == 0);
        AT_EQ_INT(accel_ddp_wait(red), ACCEL_OK); /* reduces only on sync steps, and only when LocalSGD is off */
        if (sync)
            for (t = 0; t < 2; ++t)
                for (i = 0; i < sizes[t]; ++i) { w[t][i] -= 0.1 * g[t][i]; g[t][i] = 0; }
        accel_accumulate_end(&acc);
        AT_EQ_INT(accel_ddp_local_sgd_step(l), ACCEL_OK);
    }
    AT_EQ_INT(accel_ddp_local_sgd_num_steps(l), STEPS);
    AT_EQ_INT(accel_ddp_local_sgd_end(l), ACCEL_OK);
    reference(on, ref);
    for (t = 0; t < 2; ++t)
        for (i = 0; i < sizes[t]; ++i)
            if (fabs(w[t][i] - ref[R][t][i]) > 1e-12 * fmax(1.0, fabs(ref[R][t][i]))) {
                if (bad++ < 5)
                    fprintf(stderr, "rank %d enabled %d tensor %d [%d]: %.17g != reference %.17g\n", R, (int)enabled,
                            t, i, w[t][i], ref[R][t][i]);
            }
    AT_EQ_INT(bad, 0);
    /* after end the reducer synchronises again: DDP's average of this step's gradients */
    for (t = 0; t < 2; ++t)
        for (i = 0; i < sizes[t]; ++i) g[t][i] = (double)(R + 1);
    AT_EQ_INT(accel_ddp_wait(red), ACCEL_OK);
    for (t = 0; t < 2; ++t)
        for (i = 0; i < sizes[t]; ++i) bad += fabs(g[t][i] - (P + 1) / 2.0) > 1e-12;
    AT_EQ_INT(bad, 0);
    accel_ddp_destroy(red);
}

/* trigger_sync_in_backward: a step accumulate would not sync is reduced (distributed only), also under LocalSGD */
static void trigger_sync(accel_coll *c) {
    enum { N = 6 };
    double g[N], w[N];
    accel_tensor gt = at_vec("g", g, ACCEL_F64, N), wt = at_vec("w", w, ACCEL_F64, N);
    accel_ddp *red;
    accel_ddp_local_sgd *l;
    accel_ddp_local_sgd_desc ld;
    int i, round, bad = 0;
    AT_EQ_INT(accel_ddp_create(c, NULL, &red), ACCEL_OK);
    AT_EQ_INT(accel_ddp_add(red, &gt, 1), ACCEL_OK);
    AT_EQ_INT(accel_ddp_trigger_sync_in_backward_end(red), ACCEL_ERR_STATE);
    AT_CONTAINS(accel_last_error(&acc), "without a begin");
    memset(&ld, 0, sizeof ld);
    ld.local_sgd_steps = 100;
    for (i = 0; i < N; ++i) w[i] = R;
    for (round = 0; round < 5; ++round) {
        /* 0: no trigger; 1: trigger; 2: nested, inner end (still forced); 3: after the outer end; 4: in a LocalSGD */
        int forced = (round == 1 || round == 2 || round == 4) && P > 1;
        do accel_accumulate_begin(&acc);
        while (acc.sync_gradients); /* a micro-batch accumulate does not sync */
        for (i = 0; i < N; ++i) g[i] = R + 1 + i;
        if (round == 4) AT_EQ_INT(accel_ddp_local_sgd_begin(red, &wt, 1, &ld, &l), ACCEL_OK);
        if (round == 1 || round == 4) AT_EQ_INT(accel_ddp_trigger_sync_in_backward_begin(red), ACCEL_OK);
        if (round == 2) {
            AT_EQ_INT(accel_ddp_trigger_sync_in_backward_begin(red), ACCEL_OK);
            AT_EQ_INT(accel_ddp_trigger_sync_in_backward_begin(red), ACCEL_OK);
            AT_EQ_INT(accel_ddp_trigger_sync_in_backward_end(red), ACCEL_OK);
        }
        AT_EQ_INT(accel_ddp_grad_ready(red, 0), ACCEL_OK);
        AT_EQ_INT(accel_ddp_wait(red), ACCEL_OK);
        AT_CHECK(!acc.sync_gradients); /* trigger_sync_in_backward leaves GradientState alone */
        if (round == 1 || round == 2 || round == 4) AT_EQ_INT(accel_ddp_trigger_sync_in_backward_end(red), ACCEL_OK);
        if (round == 4) AT_EQ_INT(accel_ddp_local_sgd_end(l), ACCEL_OK);
        for (i = 0; i < N; ++i) bad += g[i] != (forced ? (P + 1) / 2.0 + i : R + 1 + i) && (P <= 2 || !forced);
        for (i = 0; i < N; ++i) bad += forced && fabs(g[i] - ((P + 1) / 2.0 + i)) > 1e-12;
        AT_EQ_INT(bad, 0);
        accel_accumulate_end(&acc);
    }
    accel_ddp_destroy(red);
}

static void bad_input(accel_coll *c) {
    accel_ddp *red;
    accel_ddp_local_sgd *l = NULL, *l2 = NULL;
    accel_ddp_local_sgd_desc ld;
    int32_t ints[3] = {1, 2, 3};
    double d[3] = {1, 2, 3};
    accel_tensor ti = at_vec("step", ints, ACCEL_I32, 3), td = at_vec("w", d, ACCEL_F64, 3);
    AT_EQ_INT(accel_ddp_create(c, NULL, &red), ACCEL_OK);
    memset(&ld, 0, sizeof ld);
    AT_EQ_INT(accel_ddp_local_sgd_begin(red, &td, 1, &ld, &l), ACCEL_ERR_INVALID_ARGUMENT);
    AT_CONTAINS(accel_last_error(&acc), "local_sgd_steps");
    ld.local_sgd_steps = 2;
    AT_EQ_INT(accel_ddp_local_sgd_begin(red, &ti, 1, &ld, &l), ACCEL_ERR_INVALID_ARGUMENT);
    AT_CONTAINS(accel_last_error(&acc), "'step'");
    AT_CHECK(l == NULL);
    AT_EQ_INT(accel_ddp_local_sgd_begin(red, &td, 1, &ld, &l), ACCEL_OK);
    if (P > 1) {
        AT_EQ_INT(accel_ddp_local_sgd_begin(red, &td, 1, &ld, &l2), ACCEL_ERR_STATE);
        AT_CONTAINS(accel_last_error(&acc), "already open");
    }
    AT_EQ_INT(accel_ddp_local_sgd_end(l), ACCEL_OK);
    AT_EQ_INT(accel_ddp_local_sgd_end(NULL), ACCEL_OK);
    AT_EQ_INT(accel_ddp_local_sgd_step(NULL), ACCEL_ERR_INVALID_ARGUMENT);
    AT_EQ_INT((int)accel_ddp_local_sgd_num_steps(NULL), -1);
    accel_ddp_destroy(red);
}

int main(void) {
    accel_coll *c;
    int rc;
    accel_desc d;
    memset(&d, 0, sizeof d);
    d.cpu = 1;
    d.log_fn = at_quiet_log;
    d.gradient_accumulation_steps = ACC;
    if (accel_init(&acc, &d) != ACCEL_OK) { fprintf(stderr, "accel_init: %s\n", accel_last_error(&acc)); return 1; }
    P = acc.num_processes;
    R = acc.process_index;
    if (P > MAXP) return 77;
    AT_EQ_INT(accel_coll_create(&acc, NULL, &c), ACCEL_OK);
    train(c, ACCEL_DEFAULT);
    train(c, ACCEL_OFF);
    bad_input(c);
    trigger_sync(c);
    accel_coll_destroy(c);
    rc = at_finish("ddp_local_sgd");
    accel_shutdown(&acc);
    return rc;
}
