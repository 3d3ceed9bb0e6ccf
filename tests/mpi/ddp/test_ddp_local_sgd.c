/* accel_ddp.h's LocalSGD under mpirun (np 1..4) against a long-hand float64 reference of accelerate/local_sgd.py:
   each rank trains its own copy of two F64 parameter tensors (a nonlinear gradient, 0.25 w^2 + c: with a linear one
   local SGD and DDP end at the same mean) with SGD and gradient accumulation (an optimizer step
   every ACC micro-batches and at the last), local_sgd_step after every micro-batch; while LocalSGD is open and
   enabled the reducer does not reduce (model.no_sync) even on sync steps; the parameters are replaced by their mean
   (sum, then / P) after every K-th step and at the end. Disabled (enabled=OFF, or one process: distributed_type NO)
   nothing is averaged and DDP's gradient average runs on every sync step. The reference simulates every rank. */
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

enum { NA = 37, NB = 5, STEPS = 11, ACC = 2, K = 3, MAXP = 8 };
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
        int sync = (s + 1) % ACC == 0 || s == STEPS - 1;
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
        int sync = (s + 1) % ACC == 0 || s == STEPS - 1;
        for (t = 0; t < 2; ++t)
            for (i = 0; i < sizes[t]; ++i) g[t][i] += 0.25 * w[t][i] * w[t][i] + coef(R, s, t, i);
        accel_accumulate_begin(&acc); /* gradient_accumulation_steps 1: every micro-batch is a sync step */
        AT_CHECK(accel_should_reduce(&acc));
        if (sync) AT_EQ_INT(accel_ddp_wait(red), ACCEL_OK); /* reduces only when LocalSGD is off */
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
    if (at_init_cpu(&acc, 0, &P, &R) != 0) return 1;
    if (P > MAXP) return 77;
    AT_EQ_INT(accel_coll_create(&acc, NULL, &c), ACCEL_OK);
    train(c, ACCEL_DEFAULT);
    train(c, ACCEL_OFF);
    bad_input(c);
    accel_coll_destroy(c);
    rc = at_finish("ddp_local_sgd");
    accel_shutdown(&acc);
    return rc;
}
