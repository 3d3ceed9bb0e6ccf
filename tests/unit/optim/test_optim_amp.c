/* accel_optim.h next to accel_amp.h (this TU includes both; the headers never include each other):
   - accel_optim's stochastic-rounding helpers equal accel_amp's (the same documented bit rule, written twice);
   - the fused model copy equals accel_amp_master_to_model after the step (round to nearest, and stochastic with
     sr = {seed, the step count, the element offset}), bit for bit;
   - the fused clip coefficient (accel_optim_clip_coef of accel_amp_grad_norm's norm) equals clipping in place with
     accel_amp_clip_grad_norm and then stepping, bit for bit. */
#include "accel.h"
#include "accel_amp.h"
#include "accel_optim.h"
#include "accel_test.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static accel acc;
static uint64_t rs = 0xABCDEF0123456789ull;
static uint32_t rnd32(void) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return (uint32_t)(rs >> 16); }
static float rndu(void) { return (float)(rnd32() & 0xffffff) / 8388608.0f - 1.0f; }

static void test_sr_rule(void) {
    long i, bad_bits = 0, bad_round = 0;
    at_context = "sr rule";
    for (i = 0; i < 2000000; ++i) {
        uint64_t seed = ((uint64_t)rnd32() << 32) | rnd32(), step = rnd32() % 100000, index = ((uint64_t)rnd32() << 20) ^ rnd32();
        uint32_t u = rnd32() | ((uint32_t)(i & 1) << 31), r = rnd32();
        float f;
        memcpy(&f, &u, 4);
        if (i % 1000 == 0) f = NAN;
        if (i % 1000 == 1) f = -INFINITY;
        if (i % 1000 == 2) f = 3.3895313892515355e38f; /* may round up to Inf */
        bad_bits += accel_optim_sr_bits(seed, step, index) != accel_amp_sr_bits(seed, step, index);
        bad_round += accel_optim_f32_to_bf16_sr(f, r) != accel_amp_f32_to_bf16_sr(f, r);
    }
    AT_EQ_INT(bad_bits, 0);
    AT_EQ_INT(bad_round, 0);
}

#define NP 4
static const int64_t psz[NP] = {5, 1001, 64, 3};

static void test_model_and_clip(int stochastic) {
    float *p[NP], *q[NP], *g[NP], *g2[NP];
    uint16_t *mf[NP], *mu[NP];
    accel_tensor pt[NP], qt[NP], gt[NP], g2t[NP], mt[NP];
    accel_optim_desc d;
    accel_optim *oa = NULL, *ob = NULL;
    int i, step;
    uint64_t off = 777;
    at_context = stochastic ? "model copy sr + clip" : "model copy rne + clip";
    for (i = 0; i < NP; ++i) {
        int64_t j;
        size_t n = (size_t)psz[i];
        p[i] = (float *)malloc(4 * n); q[i] = (float *)malloc(4 * n);
        g[i] = (float *)malloc(4 * n); g2[i] = (float *)malloc(4 * n);
        mf[i] = (uint16_t *)malloc(2 * n); mu[i] = (uint16_t *)malloc(2 * n);
        for (j = 0; j < psz[i]; ++j) p[i][j] = q[i][j] = rndu();
        memset(&pt[i], 0, sizeof pt[i]);
        pt[i].name = "w"; pt[i].ptr = p[i]; pt[i].dtype = ACCEL_F32; pt[i].ndim = 1; pt[i].shape[0] = psz[i];
        qt[i] = pt[i]; qt[i].ptr = q[i];
        gt[i] = pt[i]; gt[i].ptr = g[i];
        g2t[i] = pt[i]; g2t[i].ptr = g2[i];
        mt[i] = pt[i]; mt[i].ptr = mf[i]; mt[i].dtype = ACCEL_BF16;
    }
    memset(&d, 0, sizeof d);
    d.lr = 0.02; d.weight_decay = 0.1;
    d.params = pt; d.grads = gt; d.model = mt; d.nparams = NP;
    d.model_rounding = stochastic ? ACCEL_OPTIM_ROUND_STOCHASTIC : ACCEL_OPTIM_ROUND_NEAREST;
    d.sr_seed = 2026; d.index_offset = off;
    AT_EQ_INT(accel_optim_create(&acc, &d, &oa), ACCEL_OK);
    d.params = qt; d.grads = g2t; d.model = NULL;
    AT_EQ_INT(accel_optim_create(&acc, &d, &ob), ACCEL_OK);
    for (step = 0; step < 5; ++step) {
        double norm = 0;
        float coef;
        accel_optim_step_args sa;
        uint64_t o = off;
        for (i = 0; i < NP; ++i) {
            int64_t j;
            for (j = 0; j < psz[i]; ++j) g[i][j] = g2[i][j] = rndu() * 3.0f;
        }
        /* fused: the coefficient from the norm, applied inside the step */
        AT_EQ_INT(accel_amp_grad_norm(&acc, gt, NP, 2.0, 0, &norm), ACCEL_OK);
        coef = accel_optim_clip_coef(norm, 1.5);
        AT_CHECK(coef < 1.0f);
        memset(&sa, 0, sizeof sa);
        sa.clip_coef = &coef;
        AT_EQ_INT(accel_optim_step(oa, &sa), ACCEL_OK);
        /* unfused: amp clips in place, the optimizer steps, amp writes the bf16 copy */
        AT_EQ_INT(accel_amp_clip_grad_norm(&acc, g2t, NP, 1.5, 2.0, 0, NULL), ACCEL_OK);
        AT_EQ_INT(accel_optim_step(ob, NULL), ACCEL_OK);
        for (i = 0; i < NP; ++i) {
            accel_amp_sr sr;
            sr.seed = 2026; sr.step = (uint64_t)step + 1; sr.index_offset = o;
            AT_EQ_INT(accel_amp_master_to_model(&acc, q[i], mu[i], ACCEL_BF16, (size_t)psz[i], stochastic ? &sr : NULL), ACCEL_OK);
            o += (uint64_t)psz[i];
            AT_CHECK(!memcmp(p[i], q[i], 4 * (size_t)psz[i]));
            AT_CHECK(!memcmp(mf[i], mu[i], 2 * (size_t)psz[i]));
        }
    }
    accel_optim_destroy(oa);
    accel_optim_destroy(ob);
    for (i = 0; i < NP; ++i) { free(p[i]); free(q[i]); free(g[i]); free(g2[i]); free(mf[i]); free(mu[i]); }
}

int main(void) {
    accel_desc ad;
    memset(&ad, 0, sizeof ad);
    ad.cpu = 1;
    ad.no_mpi = 1;
    if (accel_init(&acc, &ad) != ACCEL_OK) { fprintf(stderr, "%s\n", accel_last_error(&acc)); return 1; }
    test_sr_rule();
    test_model_and_clip(0);
    test_model_and_clip(1);
    accel_shutdown(&acc);
    at_context = "";
    return at_finish("optim-amp");
}
