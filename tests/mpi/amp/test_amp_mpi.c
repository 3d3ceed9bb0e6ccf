/* accel_amp.h across ranks: a gradient norm over shards equals the single-process norm of the whole set (and a
   float64 reference), sharded clipping scales every shard like single-process clipping, found_inf on one rank makes
   every rank skip, and a rank that fails locally makes the others fail (ACCEL_ERR_REMOTE with its message) instead
   of hang, with nothing changed on any rank. */
#include "accel.h"
#include "accel_amp.h"
#include "accel_test.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

enum { NBUF = 7 };

static void quiet_log(void *user, accel_log_level level, const char *msg) { (void)user; (void)level; (void)msg; }

static uint64_t st = 12345;
static float rndf(void) {
    st ^= st << 13; st ^= st >> 7; st ^= st << 17;
    return (float)((st >> 40) & 0xffffff) / 16777216.0f * 4.0f - 2.0f;
}

int main(void) {
    accel acc;
    accel_desc d;
    float *full[NBUF], *shard[NBUF];
    size_t n[NBUF], off[NBUF], cnt[NBUF];
    accel_tensor tf[NBUF], ts[NBUF];
    static const double ps[] = {2.0, 1.0, HUGE_VAL};
    int k, P, R, pi;
    size_t i;
    memset(&d, 0, sizeof d);
    d.cpu = 1;
    d.mixed_precision = ACCEL_PRECISION_FP16;
    d.log_fn = quiet_log;
    if (accel_init(&acc, &d) != ACCEL_OK) { fprintf(stderr, "init: %s\n", accel_last_error(&acc)); return 1; }
    P = acc.num_processes;
    R = acc.process_index;
    memset(tf, 0, sizeof tf);
    memset(ts, 0, sizeof ts);
    /* the same global gradients on every rank; rank R owns the slice [off, off+cnt) of each buffer */
    for (k = 0; k < NBUF; ++k) {
        n[k] = (size_t)(1 + k * 4099 % 9001);
        full[k] = (float *)malloc(n[k] * 4);
        shard[k] = (float *)malloc(n[k] * 4 + 4);
        for (i = 0; i < n[k]; ++i) full[k][i] = rndf() * (float)(k + 1);
        off[k] = n[k] * (size_t)R / (size_t)P;
        cnt[k] = n[k] * (size_t)(R + 1) / (size_t)P - off[k];
        tf[k].ptr = full[k]; tf[k].dtype = ACCEL_F32; tf[k].ndim = 1; tf[k].shape[0] = (int64_t)n[k];
        ts[k].ptr = shard[k]; ts[k].dtype = ACCEL_F32; ts[k].ndim = 1; ts[k].shape[0] = (int64_t)cnt[k];
    }
    for (pi = 0; pi < 3; ++pi) {
        double single = -1, sharded = -2, ref = 0, clipped_total = 0;
        int bad = 0;
        for (k = 0; k < NBUF; ++k) {
            memcpy(shard[k], full[k] + off[k], cnt[k] * 4);
            for (i = 0; i < n[k]; ++i) {
                double a = fabs((double)full[k][i]);
                if (isinf(ps[pi])) ref = a > ref ? a : ref;
                else ref += ps[pi] == 2.0 ? a * a : a;
            }
        }
        if (ps[pi] == 2.0) ref = sqrt(ref);
        AT_EQ_INT(accel_amp_grad_norm(&acc, tf, NBUF, ps[pi], 0, &single), ACCEL_OK);
        AT_EQ_INT(accel_amp_grad_norm(&acc, ts, NBUF, ps[pi], ACCEL_AMP_CLIP_SHARDED, &sharded), ACCEL_OK);
        AT_NEAR(single, ref, ref * 1e-12);
        AT_NEAR(sharded, single, single * 1e-12);
        /* sharded clipping scales each shard exactly as single-process clipping scales the whole set */
        AT_EQ_INT(accel_amp_clip_grad_norm(&acc, ts, NBUF, 1.0, ps[pi], ACCEL_AMP_CLIP_SHARDED, &clipped_total), ACCEL_OK);
        {
            float coef = (1.0f / ((float)single + 1e-6f)) * 1.0f;
            for (k = 0; k < NBUF; ++k)
                for (i = 0; i < cnt[k]; ++i) bad += shard[k][i] != full[k][off[k] + i] * coef;
        }
        AT_EQ_INT(bad, 0);
    }
    /* a NaN in one rank's shard makes the total NaN everywhere */
    {
        double t = 0;
        for (k = 0; k < NBUF; ++k) memcpy(shard[k], full[k] + off[k], cnt[k] * 4);
        if (R == P - 1) shard[NBUF - 1][cnt[NBUF - 1] - 1] = NAN;
        AT_EQ_INT(accel_amp_grad_norm(&acc, ts, NBUF, 2.0, ACCEL_AMP_CLIP_SHARDED, &t), ACCEL_OK);
        AT_CHECK(isnan(t));
        AT_EQ_INT(accel_amp_grad_norm(&acc, ts, NBUF, HUGE_VAL, ACCEL_AMP_CLIP_SHARDED, &t), ACCEL_OK);
        AT_CHECK(isnan(t));
        AT_EQ_INT(accel_amp_clip_grad_norm(&acc, ts, NBUF, 1.0, 2.0, ACCEL_AMP_CLIP_SHARDED | ACCEL_AMP_CLIP_ERROR_IF_NONFINITE, &t),
                  ACCEL_ERR_STATE);
        AT_NEAR(shard[1][0], full[1][off[1]], 0); /* nothing changed on any rank */
    }
    /* found_inf on the last rank only: every rank skips and backs off */
    {
        accel_amp_scaler sc, sl;
        accel_amp_scaler_desc sd;
        int f = -1, step;
        AT_EQ_INT(accel_amp_scaler_init(&acc, &sc, NULL), ACCEL_OK);
        memset(&sd, 0, sizeof sd);
        sd.local_found_inf = 1;
        AT_EQ_INT(accel_amp_scaler_init(&acc, &sl, &sd), ACCEL_OK);
        for (step = 0; step < 3; ++step) {
            for (k = 0; k < NBUF; ++k) memcpy(shard[k], full[k] + off[k], cnt[k] * 4);
            if (step == 1 && R == P - 1) shard[2][cnt[2] / 2] = INFINITY;
            AT_EQ_INT(accel_amp_unscale_and_check(&sc, ts, NBUF, &f), ACCEL_OK);
            AT_EQ_INT(f, step == 1);
            AT_EQ_INT(accel_amp_update(&sc), ACCEL_OK);
            AT_EQ_INT(acc.optimizer_step_was_skipped, step == 1);
            /* local mode: only the rank that saw it */
            for (k = 0; k < NBUF; ++k) memcpy(shard[k], full[k] + off[k], cnt[k] * 4);
            if (step == 1 && R == P - 1) shard[2][0] = NAN;
            AT_EQ_INT(accel_amp_unscale_and_check(&sl, ts, NBUF, &f), ACCEL_OK);
            AT_EQ_INT(f, step == 1 && R == P - 1);
            AT_EQ_INT(accel_amp_update(&sl), ACCEL_OK);
        }
        AT_NEAR(sc.scale, 32768.0, 0);
        AT_EQ_INT(sc.growth_tracker, 1);
        AT_EQ_INT(sc.skipped_steps, 1);
        /* rank 0 passes a bad list: it gets the argument error, every other rank ACCEL_ERR_REMOTE carrying rank 0's
           message (no hang), and no rank changed its gradients */
        ts[3].dtype = R == 0 ? ACCEL_I32 : ACCEL_F32;
        {
            accel_result r;
            int changed = 0;
            for (k = 0; k < NBUF; ++k) memcpy(shard[k], full[k] + off[k], cnt[k] * 4);
            r = accel_amp_unscale_and_check(&sc, ts, NBUF, &f);
            if (R == 0) AT_EQ_INT(r, ACCEL_ERR_INVALID_ARGUMENT);
            else AT_EQ_INT(r, P > 1 ? ACCEL_ERR_REMOTE : ACCEL_OK);
            if (R != 0 && P > 1) {
                AT_CONTAINS(accel_last_error(&acc), "rank 0");
                AT_CONTAINS(accel_last_error(&acc), "buffer 3"); /* rank 0's own message, not "see its log" */
                AT_CONTAINS(accel_last_error(&acc), "I32");
            }
            for (k = 0; k < NBUF; ++k) changed += memcmp(shard[k], full[k] + off[k], cnt[k] * 4) != 0;
            AT_EQ_INT(changed, 0);
            AT_EQ_INT(sc.unscaled, 0);
            /* every rank is still in step: the next collective works everywhere */
            AT_EQ_INT(accel_wait_for_everyone(&acc), ACCEL_OK);
            r = accel_amp_grad_norm(&acc, ts, NBUF, 2.0, ACCEL_AMP_CLIP_SHARDED, NULL);
            if (R == 0) AT_EQ_INT(r, ACCEL_ERR_INVALID_ARGUMENT);
            else AT_EQ_INT(r, P > 1 ? ACCEL_ERR_REMOTE : ACCEL_OK);
            if (R != 0 && P > 1) AT_CONTAINS(accel_last_error(&acc), "I32");
            /* a bad max_norm on rank 0 only: every rank fails (no rank waits for rank 0 until the deadline) */
            ts[3].dtype = ACCEL_F32;
            r = accel_amp_clip_grad_norm(&acc, ts, NBUF, R == 0 ? (double)NAN : 1.0, 2.0, ACCEL_AMP_CLIP_SHARDED, NULL);
            if (R == 0) AT_EQ_INT(r, ACCEL_ERR_INVALID_ARGUMENT);
            else AT_EQ_INT(r, P > 1 ? ACCEL_ERR_REMOTE : ACCEL_OK);
            if (R != 0 && P > 1) AT_CONTAINS(accel_last_error(&acc), "max_norm is NaN");
            changed = 0;
            for (k = 0; k < NBUF; ++k) changed += memcmp(shard[k], full[k] + off[k], cnt[k] * 4) != 0;
            AT_EQ_INT(changed, 0);
            /* a scaler unscaled twice on one rank only: that rank gets ACCEL_ERR_STATE, the others ACCEL_ERR_REMOTE */
            ts[3].dtype = ACCEL_F32;
            if (R == 0) sc.unscaled = 1; /* as if rank 0 had already unscaled in this step */
            for (k = 0; k < NBUF; ++k) memcpy(shard[k], full[k] + off[k], cnt[k] * 4);
            r = accel_amp_unscale_and_check(&sc, ts, NBUF, &f);
            if (R == 0) AT_EQ_INT(r, ACCEL_ERR_STATE);
            else AT_EQ_INT(r, P > 1 ? ACCEL_ERR_REMOTE : ACCEL_OK);
            if (R != 0 && P > 1) AT_CONTAINS(accel_last_error(&acc), "already been called");
            changed = 0;
            for (k = 0; k < NBUF; ++k) changed += memcmp(shard[k], full[k] + off[k], cnt[k] * 4) != 0;
            AT_EQ_INT(changed, 0);
        }
        ts[3].dtype = ACCEL_F32;
    }
    for (k = 0; k < NBUF; ++k) { free(full[k]); free(shard[k]); }
    AT_EQ_INT(accel_wait_for_everyone(&acc), ACCEL_OK);
    accel_shutdown(&acc);
    {
        char name[32];
        snprintf(name, sizeof name, "amp_mpi_rank%d", R);
        return at_finish(name);
    }
}
