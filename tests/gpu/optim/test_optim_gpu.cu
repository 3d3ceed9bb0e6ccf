/* accel_optim.h on CUDA against the CPU path, bit for bit: AdamW (mul+add and lerp, amsgrad) and SGD (momentum,
   nesterov) over a list with small, empty, misaligned and multi-chunk tensors, F32/BF16/F16 gradients, BF16/F16 model
   copies (nearest and stochastic), unscale and clip coefficients, a step skipped by a found_inf flag that lives on the
   device, a parameter without a gradient, then the saved state bytes. NaN compares equal to NaN (payloads may differ).
   Exits 77 (skip) without a device. */
#include "accel.h"
#include "accel_optim.h"
#include "accel_test.h"
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static accel cpu, gpu;
static uint64_t rs = 0x5EED5EED5EEDull;
static uint32_t rnd32(void) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return (uint32_t)(rs >> 16); }
static float rndu(void) { return (float)(rnd32() & 0xffffff) / 8388608.0f - 1.0f; }

#define NP 7
static const int64_t psz[NP] = {1, 3000, 0, 65536 * 2 + 5, 17, 200003, 64};
static const accel_dtype gdt[NP] = {ACCEL_F32, ACCEL_BF16, ACCEL_F32, ACCEL_F32, ACCEL_F16, ACCEL_BF16, ACCEL_F32};
static const accel_dtype mdt[NP] = {ACCEL_BF16, ACCEL_BF16, ACCEL_BF16, ACCEL_F16, ACCEL_BF16, ACCEL_BF16, ACCEL_F16};
static const int mis[NP] = {0, 0, 0, 1, 0, 1, 0}; /* misaligned by one element */

static size_t count_diff_f32(const float *a, const float *b, size_t n) {
    size_t i, d = 0;
    for (i = 0; i < n; ++i) d += !((a[i] != a[i] && b[i] != b[i]) || !memcmp(&a[i], &b[i], 4));
    return d;
}
static size_t count_diff_u16(const uint16_t *a, const uint16_t *b, size_t n) {
    size_t i, d = 0;
    for (i = 0; i < n; ++i) d += a[i] != b[i];
    return d;
}

static void run(accel_optim_algorithm algo, int ams, int lerp, int nesterov, int stochastic) {
    float *hp[NP], *dpbase[NP];
    void *hg[NP], *dgbase[NP];
    uint16_t *hm[NP], *dmbase[NP];
    accel_tensor cp[NP], cg[NP], cm[NP], gp[NP], gg[NP], gm[NP];
    accel_optim_group gr[2];
    accel_optim_desc d;
    accel_optim *oc = NULL, *og = NULL;
    int32_t hfound = 0, *dfound = NULL, one = 1, zero = 0;
    int i, step;
    char ctx[96];
    snprintf(ctx, sizeof ctx, "%s ams %d lerp %d nesterov %d sr %d", algo == ACCEL_OPTIM_ADAMW ? "adamw" : "sgd", ams, lerp,
             nesterov, stochastic);
    at_context = ctx;
    for (i = 0; i < NP; ++i) {
        size_t n = (size_t)psz[i] + 1, es = accel_dtype_size(gdt[i]), j;
        hp[i] = (float *)malloc(4 * n);
        hg[i] = malloc(4 * n);
        hm[i] = (uint16_t *)calloc(n, 2);
        for (j = 0; j < n; ++j) hp[i][j] = rndu();
        AT_CHECK(cudaMalloc((void **)&dpbase[i], 4 * n) == cudaSuccess);
        AT_CHECK(cudaMalloc(&dgbase[i], es * n) == cudaSuccess);
        AT_CHECK(cudaMalloc((void **)&dmbase[i], 2 * n) == cudaSuccess);
        AT_CHECK(cudaMemcpy(dpbase[i], hp[i], 4 * n, cudaMemcpyHostToDevice) == cudaSuccess);
        AT_CHECK(cudaMemset(dmbase[i], 0, 2 * n) == cudaSuccess);
        memset(&cp[i], 0, sizeof cp[i]);
        cp[i].name = "w"; cp[i].ptr = hp[i] + mis[i]; cp[i].dtype = ACCEL_F32; cp[i].ndim = 1; cp[i].shape[0] = psz[i];
        cg[i] = cp[i]; cg[i].ptr = (unsigned char *)hg[i] + es * (size_t)mis[i]; cg[i].dtype = gdt[i];
        cm[i] = cp[i]; cm[i].ptr = hm[i] + mis[i]; cm[i].dtype = mdt[i];
        if (stochastic && mdt[i] != ACCEL_BF16) cm[i].ptr = NULL;
        gp[i] = cp[i]; gp[i].ptr = dpbase[i] + mis[i];
        gg[i] = cg[i]; gg[i].ptr = (unsigned char *)dgbase[i] + es * (size_t)mis[i];
        gm[i] = cm[i]; gm[i].ptr = cm[i].ptr ? (void *)(dmbase[i] + mis[i]) : NULL;
    }
    AT_CHECK(cudaMalloc((void **)&dfound, 4) == cudaSuccess);
    memset(gr, 0, sizeof gr);
    gr[0].count = 4; gr[0].lr = 0.02; gr[0].weight_decay = 0.1;
    gr[1].count = NP - 4; gr[1].lr = 0.05;
    memset(&d, 0, sizeof d);
    d.algorithm = algo;
    d.nparams = NP;
    d.groups = gr; d.ngroups = 2;
    d.amsgrad = ams;
    d.moment_rule = lerp ? ACCEL_OPTIM_MOMENT_LERP : ACCEL_OPTIM_MOMENT_DEFAULT;
    if (algo == ACCEL_OPTIM_SGD) { d.momentum = 0.9; d.nesterov = nesterov; d.dampening = nesterov ? 0.0 : 0.25; }
    d.maximize = nesterov;
    d.model_rounding = stochastic ? ACCEL_OPTIM_ROUND_STOCHASTIC : ACCEL_OPTIM_ROUND_NEAREST;
    d.sr_seed = 31337; d.index_offset = 5;
    d.params = cp; d.grads = cg; d.model = cm;
    AT_EQ_INT(accel_optim_create(&cpu, &d, &oc), ACCEL_OK);
    d.params = gp; d.grads = gg; d.model = gm;
    AT_EQ_INT(accel_optim_create(&gpu, &d, &og), ACCEL_OK);
    for (step = 0; step < 6; ++step) {
        accel_optim_step_args sc, sg;
        float coef = 0.8f - 0.05f * (float)step;
        for (i = 0; i < NP; ++i) {
            size_t n = (size_t)psz[i] + 1, j, es = accel_dtype_size(gdt[i]);
            for (j = 0; j < n; ++j) {
                float g = rndu() * 40.0f;
                if (j % 1009 == 3) g = NAN;
                if (gdt[i] == ACCEL_F32) ((float *)hg[i])[j] = g;
                else if (gdt[i] == ACCEL_BF16) ((uint16_t *)hg[i])[j] = accel_f32_to_bf16(g);
                else ((uint16_t *)hg[i])[j] = accel_f32_to_f16(g);
            }
            AT_CHECK(cudaMemcpy(dgbase[i], hg[i], es * n, cudaMemcpyHostToDevice) == cudaSuccess);
        }
        cg[4].ptr = step == 2 ? NULL : (unsigned char *)hg[4] + 2 * (size_t)mis[4]; /* no gradient for one step */
        gg[4].ptr = step == 2 ? NULL : (unsigned char *)dgbase[4] + 2 * (size_t)mis[4];
        AT_EQ_INT(accel_optim_set_grads(oc, cg, NP), ACCEL_OK);
        AT_EQ_INT(accel_optim_set_grads(og, gg, NP), ACCEL_OK);
        memset(&sc, 0, sizeof sc);
        sc.inv_scale = step % 2 ? 0.3f : 0.0f;
        sc.clip_coef = step % 3 ? &coef : NULL;
        hfound = step == 3;
        AT_CHECK(cudaMemcpy(dfound, step == 3 ? &one : &zero, 4, cudaMemcpyHostToDevice) == cudaSuccess);
        sc.found_inf = &hfound;
        sg = sc;
        sg.found_inf = dfound;
        AT_EQ_INT(accel_optim_step(oc, &sc), ACCEL_OK);
        AT_EQ_INT(accel_optim_step(og, &sg), ACCEL_OK);
    }
    AT_CHECK(cudaDeviceSynchronize() == cudaSuccess);
    {
        const accel_tensor *tc, *tg;
        int nc, ng, k;
        int64_t sc[NP], sgp[NP], cc = -1, cgc = -2;
        size_t bc = 0, bg = 0;
        unsigned char *stc, *stg;
        for (i = 0; i < NP; ++i) {
            size_t n = (size_t)psz[i];
            float *back = (float *)malloc(4 * n + 4);
            uint16_t *mb = (uint16_t *)malloc(2 * n + 2);
            AT_CHECK(cudaMemcpy(back, gp[i].ptr, 4 * n, cudaMemcpyDeviceToHost) == cudaSuccess);
            if (count_diff_f32(hp[i] + mis[i], back, n)) fprintf(stderr, "param %d differs\n", i);
            AT_EQ_INT(count_diff_f32(hp[i] + mis[i], back, n), 0);
            if (gm[i].ptr) {
                AT_CHECK(cudaMemcpy(mb, gm[i].ptr, 2 * n, cudaMemcpyDeviceToHost) == cudaSuccess);
                AT_EQ_INT(count_diff_u16(hm[i] + mis[i], mb, n), 0);
            }
            free(back); free(mb);
        }
        AT_EQ_INT(accel_optim_state_tensors(oc, &tc, &nc), ACCEL_OK);
        AT_EQ_INT(accel_optim_state_tensors(og, &tg, &ng), ACCEL_OK);
        AT_EQ_INT(nc, ng);
        for (k = 0; k < nc && k < ng; ++k) {
            size_t n = (size_t)accel_tensor_numel(&tc[k]);
            float *back = (float *)malloc(4 * n + 4);
            AT_EQ_STR(tc[k].name, tg[k].name);
            AT_CHECK(cudaMemcpy(back, tg[k].ptr, 4 * n, cudaMemcpyDeviceToHost) == cudaSuccess);
            AT_EQ_INT(count_diff_f32((const float *)tc[k].ptr, back, n), 0);
            free(back);
        }
        AT_EQ_INT(accel_optim_param_steps(oc, sc, NP), ACCEL_OK);
        AT_EQ_INT(accel_optim_param_steps(og, sgp, NP), ACCEL_OK);
        AT_CHECK(!memcmp(sc, sgp, sizeof sc));
        AT_EQ_INT(sc[4], 4); /* 6 steps, one skipped by found_inf, one without a gradient */
        AT_EQ_INT(accel_optim_step_count(oc, &cc), ACCEL_OK);
        AT_EQ_INT(accel_optim_step_count(og, &cgc), ACCEL_OK);
        AT_EQ_INT(cc, 5);
        AT_EQ_INT(cgc, 5);
        accel_optim_state_save(oc, NULL, 0, &bc);
        accel_optim_state_save(og, NULL, 0, &bg);
        stc = (unsigned char *)malloc(bc); stg = (unsigned char *)malloc(bg);
        AT_EQ_INT(accel_optim_state_save(oc, stc, bc, &bc), ACCEL_OK);
        AT_EQ_INT(accel_optim_state_save(og, stg, bg, &bg), ACCEL_OK);
        AT_CHECK(bc == bg && !memcmp(stc, stg, bc));
        AT_EQ_INT(accel_optim_state_load(og, stc, bc), ACCEL_OK); /* writes the counts back to the device */
        free(stc); free(stg);
    }
    accel_optim_destroy(oc);
    accel_optim_destroy(og);
    for (i = 0; i < NP; ++i) {
        free(hp[i]); free(hg[i]); free(hm[i]);
        cudaFree(dpbase[i]); cudaFree(dgbase[i]); cudaFree(dmbase[i]);
    }
    cudaFree(dfound);
}

int main(void) {
    int count = 0;
    accel_desc d;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        printf("no CUDA device: skipped\n");
        return 77;
    }
    memset(&d, 0, sizeof d);
    d.cpu = 1; d.no_mpi = 1;
    if (accel_init(&cpu, &d) != ACCEL_OK) { fprintf(stderr, "%s\n", accel_last_error(&cpu)); return 1; }
    d.cpu = 0;
    if (accel_init(&gpu, &d) != ACCEL_OK) { fprintf(stderr, "%s\n", accel_last_error(&gpu)); return 1; }
    AT_CHECK(gpu.device >= 0);
    if (gpu.device < 0) return at_finish("optim_gpu");
    run(ACCEL_OPTIM_ADAMW, 0, 0, 0, 0);
    run(ACCEL_OPTIM_ADAMW, 1, 0, 0, 1);
    run(ACCEL_OPTIM_ADAMW, 1, 1, 0, 0);
    run(ACCEL_OPTIM_SGD, 0, 0, 0, 1);
    run(ACCEL_OPTIM_SGD, 0, 0, 1, 0);
    AT_CHECK(cudaDeviceSynchronize() == cudaSuccess);
    accel_shutdown(&cpu);
    accel_shutdown(&gpu);
    at_context = "";
    return at_finish("optim_gpu");
}
