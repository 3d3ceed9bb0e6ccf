/* accel_optim.h on CUDA against the CPU path, bit for bit (parameters, model copies, every state tensor, step
   counts, the saved state bytes). NaN compares equal to NaN (payloads may differ). Exits 77 (skip) without a device.
   1. A list with small, empty, misaligned and multi-chunk tensors, F32/BF16/F16 gradients, BF16/F16 model copies:
      AdamW (mul+add and lerp, amsgrad, BF16 moments) and SGD (momentum, nesterov), nearest and stochastic copies,
      unscale and clip coefficients, a step skipped by a found_inf flag that lives on the device, a parameter
      without a gradient for one step, then the saved state bytes.
   2. The vector path at every alignment and tail: 96 tensors whose parameter, gradient and copy start 0..7 elements
      past a 256-byte boundary (mostly the same offset; some mutually misaligned, which take the generic kernel),
      lengths 8k + 0..7 around the vector and chunk sizes, F32 and BF16 gradients mixed with F16 ones, copies or
      none, in one list: F32 and BF16 moments, nearest and stochastic copies, found_inf, unscale, clip.
   3. The GPT-2 124M list (148 tensors, one flat buffer as llm.c lays it out): BF16 gradients with a stochastic BF16
      copy and clipping, and F32 gradients with BF16 moments.
   4. Checkpoints of device moments: F32 moments saved, loaded into BF16 ones (round to nearest even) and back
      (exact), through accel_ckpt's device staging.
   Every list also clips from a total norm in device memory (step_args.grad_norm: the coefficient computed on the
   device) against the CPU's accel_optim_clip_coef of the same norm, and run_clip_norms does so for zero, tiny,
   huge, Inf and NaN norms. */
#include "accel.h"
#include "accel_ckpt.h"
#include "accel_optim.h"
#include "accel_test.h"
#include "accel_test_fs.h"
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

/* One parameter of a list: its length, gradient and copy dtypes (copy 0: none), and the offsets in elements of its
   parameter, gradient and copy from their buffers' starts (cudaMalloc: 256-byte aligned), or its place in one flat
   buffer (flat >= 0). */
typedef struct {
    int64_t n;
    accel_dtype gt, mt;
    int op, og, om;
} pspec;

typedef struct {
    int np;
    const pspec *ps;
    float **hp;
    void **hg;
    uint16_t **hm;
    float **dp;
    void **dg;
    uint16_t **dm;
    accel_tensor *cp, *cg, *cm, *gp, *gg, *gm;
    float *flat_p;  /* flat lists: one allocation each */
    void *flat_g;
    uint16_t *flat_m;
} plist;

static void plist_make(plist *l, const pspec *ps, int np, int flat) {
    int i;
    int64_t off = 0, total = 0;
    memset(l, 0, sizeof *l);
    l->np = np;
    l->ps = ps;
#define ALLOC_(f, T) l->f = (T *)calloc((size_t)np, sizeof(T))
    ALLOC_(hp, float *); ALLOC_(hg, void *); ALLOC_(hm, uint16_t *); ALLOC_(dp, float *); ALLOC_(dg, void *);
    ALLOC_(dm, uint16_t *); ALLOC_(cp, accel_tensor); ALLOC_(cg, accel_tensor); ALLOC_(cm, accel_tensor);
    ALLOC_(gp, accel_tensor); ALLOC_(gg, accel_tensor); ALLOC_(gm, accel_tensor);
#undef ALLOC_
    for (i = 0; i < np; ++i) total += ps[i].n;
    if (flat) { /* every tensor of one dtype in one buffer, as llm.c lays out its parameters */
        AT_CHECK(cudaMalloc((void **)&l->flat_p, 4 * (size_t)total) == cudaSuccess);
        AT_CHECK(cudaMalloc(&l->flat_g, 4 * (size_t)total) == cudaSuccess);
        AT_CHECK(cudaMalloc((void **)&l->flat_m, 2 * (size_t)total) == cudaSuccess);
    }
    for (i = 0; i < np; ++i) {
        const pspec *s = &ps[i];
        size_t n = (size_t)s->n + 8, es = accel_dtype_size(s->gt), j;
        l->hp[i] = (float *)malloc(4 * n);
        l->hg[i] = malloc(4 * n);
        l->hm[i] = (uint16_t *)calloc(n, 2);
        for (j = 0; j < n; ++j) l->hp[i][j] = rndu();
        if (flat) {
            l->dp[i] = l->flat_p + off;
            l->dg[i] = (unsigned char *)l->flat_g + es * (size_t)off;
            l->dm[i] = l->flat_m + off;
        } else {
            AT_CHECK(cudaMalloc((void **)&l->dp[i], 4 * n) == cudaSuccess);
            AT_CHECK(cudaMalloc(&l->dg[i], es * n) == cudaSuccess);
            AT_CHECK(cudaMalloc((void **)&l->dm[i], 2 * n) == cudaSuccess);
        }
        AT_CHECK(cudaMemcpy(l->dp[i], l->hp[i], 4 * (flat ? (size_t)s->n : n), cudaMemcpyHostToDevice) == cudaSuccess);
        AT_CHECK(cudaMemset(l->dm[i], 0, 2 * (flat ? (size_t)s->n : n)) == cudaSuccess);
        memset(&l->cp[i], 0, sizeof l->cp[i]);
        l->cp[i].name = "w"; l->cp[i].ptr = l->hp[i] + s->op; l->cp[i].dtype = ACCEL_F32; l->cp[i].ndim = 1;
        l->cp[i].shape[0] = s->n;
        l->cg[i] = l->cp[i]; l->cg[i].ptr = (unsigned char *)l->hg[i] + es * (size_t)s->og; l->cg[i].dtype = s->gt;
        l->cm[i] = l->cp[i]; l->cm[i].ptr = s->mt ? (void *)(l->hm[i] + s->om) : NULL;
        l->cm[i].dtype = s->mt ? s->mt : ACCEL_BF16;
        l->gp[i] = l->cp[i]; l->gp[i].ptr = l->dp[i] + s->op;
        l->gg[i] = l->cg[i]; l->gg[i].ptr = (unsigned char *)l->dg[i] + es * (size_t)s->og;
        l->gm[i] = l->cm[i]; l->gm[i].ptr = s->mt ? (void *)(l->dm[i] + s->om) : NULL;
        off += s->n;
    }
}

static void plist_free(plist *l) {
    int i;
    for (i = 0; i < l->np; ++i) {
        free(l->hp[i]); free(l->hg[i]); free(l->hm[i]);
        if (!l->flat_p) { cudaFree(l->dp[i]); cudaFree(l->dg[i]); cudaFree(l->dm[i]); }
    }
    if (l->flat_p) { cudaFree(l->flat_p); cudaFree(l->flat_g); cudaFree(l->flat_m); }
    free(l->hp); free(l->hg); free(l->hm); free(l->dp); free(l->dg); free(l->dm);
    free(l->cp); free(l->cg); free(l->cm); free(l->gp); free(l->gg); free(l->gm);
}

/* Fresh gradients (a NaN now and then) on the host and the same bytes on the device. */
static void plist_grads(plist *l, float scale) {
    int i;
    for (i = 0; i < l->np; ++i) {
        const pspec *s = &l->ps[i];
        size_t n = (size_t)s->n, es = accel_dtype_size(s->gt), j;
        unsigned char *h = (unsigned char *)l->hg[i] + es * (size_t)s->og; /* cg[i].ptr may be NULL (no gradient) */
        for (j = 0; j < n; ++j) {
            float g = rndu() * scale;
            if (j % 1009 == 3) g = NAN;
            if (s->gt == ACCEL_F32) ((float *)h)[j] = g;
            else if (s->gt == ACCEL_BF16) ((uint16_t *)h)[j] = accel_f32_to_bf16(g);
            else ((uint16_t *)h)[j] = accel_f32_to_f16(g);
        }
        AT_CHECK(cudaMemcpy((unsigned char *)l->dg[i] + es * (size_t)s->og, h, es * n, cudaMemcpyHostToDevice) ==
                 cudaSuccess);
    }
}

/* Parameters, copies, state tensors, counts and state bytes of the two optimizers, bit for bit. */
static void compare(const plist *l, accel_optim *oc, accel_optim *og) {
    const accel_tensor *tc, *tg;
    int nc, ng, k, i;
    int64_t *sc = (int64_t *)malloc(sizeof(int64_t) * (size_t)l->np);
    int64_t *sgp = (int64_t *)malloc(sizeof(int64_t) * (size_t)l->np);
    int64_t cc = -1, cgc = -2;
    size_t bc = 0, bg = 0, bad_p = 0, bad_m = 0, bad_s = 0;
    unsigned char *stc, *stg;
    AT_CHECK(cudaDeviceSynchronize() == cudaSuccess);
    for (i = 0; i < l->np; ++i) {
        size_t n = (size_t)l->ps[i].n, d;
        float *back = (float *)malloc(4 * n + 4);
        uint16_t *mb = (uint16_t *)malloc(2 * n + 2);
        AT_CHECK(cudaMemcpy(back, l->gp[i].ptr, 4 * n, cudaMemcpyDeviceToHost) == cudaSuccess);
        d = count_diff_f32((const float *)l->cp[i].ptr, back, n);
        if (d && bad_p < 3)
            fprintf(stderr, "  param %d (n %lld, offsets %d %d %d): %zu values differ\n", i, (long long)n, l->ps[i].op,
                    l->ps[i].og, l->ps[i].om, d);
        bad_p += d;
        if (l->gm[i].ptr) {
            AT_CHECK(cudaMemcpy(mb, l->gm[i].ptr, 2 * n, cudaMemcpyDeviceToHost) == cudaSuccess);
            d = count_diff_u16((const uint16_t *)l->cm[i].ptr, mb, n);
            if (d && bad_m < 3) fprintf(stderr, "  model copy %d: %zu values differ\n", i, d);
            bad_m += d;
        }
        free(back); free(mb);
    }
    AT_EQ_INT(bad_p, 0);
    AT_EQ_INT(bad_m, 0);
    AT_EQ_INT(accel_optim_state_tensors(oc, &tc, &nc), ACCEL_OK);
    AT_EQ_INT(accel_optim_state_tensors(og, &tg, &ng), ACCEL_OK);
    AT_EQ_INT(nc, ng);
    for (k = 0; k < nc && k < ng; ++k) {
        size_t n = (size_t)accel_tensor_numel(&tc[k]), nb = (size_t)accel_tensor_nbytes(&tc[k]), d;
        unsigned char *back = (unsigned char *)malloc(nb + 4);
        AT_EQ_STR(tc[k].name, tg[k].name);
        AT_EQ_INT(tc[k].dtype, tg[k].dtype);
        AT_CHECK(cudaMemcpy(back, tg[k].ptr, nb, cudaMemcpyDeviceToHost) == cudaSuccess);
        d = tc[k].dtype == ACCEL_F32 ? count_diff_f32((const float *)tc[k].ptr, (const float *)back, n)
                                     : count_diff_u16((const uint16_t *)tc[k].ptr, (const uint16_t *)back, n);
        if (d && bad_s < 3) fprintf(stderr, "  %s: %zu values differ\n", tc[k].name, d);
        bad_s += d;
        free(back);
    }
    AT_EQ_INT(bad_s, 0);
    AT_EQ_INT(accel_optim_param_steps(oc, sc, l->np), ACCEL_OK);
    AT_EQ_INT(accel_optim_param_steps(og, sgp, l->np), ACCEL_OK);
    AT_CHECK(!memcmp(sc, sgp, sizeof(int64_t) * (size_t)l->np));
    AT_EQ_INT(accel_optim_step_count(oc, &cc), ACCEL_OK);
    AT_EQ_INT(accel_optim_step_count(og, &cgc), ACCEL_OK);
    AT_EQ_INT(cc, cgc);
    accel_optim_state_save(oc, NULL, 0, &bc);
    accel_optim_state_save(og, NULL, 0, &bg);
    stc = (unsigned char *)malloc(bc); stg = (unsigned char *)malloc(bg);
    AT_EQ_INT(accel_optim_state_save(oc, stc, bc, &bc), ACCEL_OK);
    AT_EQ_INT(accel_optim_state_save(og, stg, bg, &bg), ACCEL_OK);
    AT_CHECK(bc == bg && !memcmp(stc, stg, bc));
    AT_EQ_INT(accel_optim_state_load(og, stc, bc), ACCEL_OK); /* writes the counts back to the device */
    free(stc); free(stg); free(sc); free(sgp);
}

/* Runs `steps` steps of the same optimizer on the CPU and on the GPU. Step 3 is skipped by found_inf (the flag in
   device memory for the GPU), parameter nograd (>= 0) has no gradient in step 2, unscale on odd steps, clipping on
   every step: by clip_coef on steps not divisible by 3, on the others by the total norm in device memory
   (grad_norm, max_norm: the coefficient computed on the device) against the CPU's clip_coef =
   accel_optim_clip_coef(norm, max_norm). Two groups: the first half with weight decay. */
static void run_list(plist *l, const accel_optim_desc *base, int steps, int nograd, float gscale) {
    accel_optim_group gr[2];
    accel_optim_desc d = *base;
    accel_optim *oc = NULL, *og = NULL;
    int32_t hfound = 0, *dfound = NULL, one = 1, zero = 0;
    double *dnorm = NULL;
    int step;
    AT_CHECK(cudaMalloc((void **)&dfound, 4) == cudaSuccess);
    AT_CHECK(cudaMalloc((void **)&dnorm, sizeof(double)) == cudaSuccess);
    memset(gr, 0, sizeof gr);
    gr[0].count = l->np / 2; gr[0].lr = 0.02; gr[0].weight_decay = 0.1;
    gr[1].count = l->np - l->np / 2; gr[1].lr = 0.05;
    d.nparams = l->np;
    d.groups = gr; d.ngroups = 2;
    d.params = l->cp; d.grads = l->cg; d.model = l->cm;
    AT_EQ_INT(accel_optim_create(&cpu, &d, &oc), ACCEL_OK);
    d.params = l->gp; d.grads = l->gg; d.model = l->gm;
    AT_EQ_INT(accel_optim_create(&gpu, &d, &og), ACCEL_OK);
    for (step = 0; step < steps && oc && og; ++step) {
        accel_optim_step_args sc, sg;
        float coef = 0.8f - 0.05f * (float)step;
        const double norm = 2.5 + 0.37 * (double)step;
        plist_grads(l, gscale);
        if (nograd >= 0) {
            const pspec *s = &l->ps[nograd];
            size_t es = accel_dtype_size(s->gt);
            l->cg[nograd].ptr = step == 2 ? NULL : (unsigned char *)l->hg[nograd] + es * (size_t)s->og;
            l->gg[nograd].ptr = step == 2 ? NULL : (unsigned char *)l->dg[nograd] + es * (size_t)s->og;
            AT_EQ_INT(accel_optim_set_grads(oc, l->cg, l->np), ACCEL_OK);
            AT_EQ_INT(accel_optim_set_grads(og, l->gg, l->np), ACCEL_OK);
        }
        memset(&sc, 0, sizeof sc);
        sc.inv_scale = step % 2 ? 0.3f : 0.0f;
        if (step % 3 == 0) coef = accel_optim_clip_coef(norm, 1.5);
        sc.clip_coef = &coef;
        hfound = step == 3;
        AT_CHECK(cudaMemcpy(dfound, step == 3 ? &one : &zero, 4, cudaMemcpyHostToDevice) == cudaSuccess);
        AT_CHECK(cudaMemcpy(dnorm, &norm, sizeof norm, cudaMemcpyHostToDevice) == cudaSuccess);
        sc.found_inf = &hfound;
        sg = sc;
        sg.found_inf = dfound;
        if (step % 3 == 0) {
            sg.clip_coef = NULL;
            sg.grad_norm = dnorm;
            sg.max_norm = 1.5;
        }
        AT_EQ_INT(accel_optim_step(oc, &sc), ACCEL_OK);
        AT_EQ_INT(accel_optim_step(og, &sg), ACCEL_OK);
    }
    if (oc && og) compare(l, oc, og);
    if (oc && og && steps > 3) {
        int64_t c = -1;
        AT_EQ_INT(accel_optim_step_count(og, &c), ACCEL_OK);
        AT_EQ_INT(c, steps - 1); /* one skipped */
    }
    accel_optim_destroy(oc);
    accel_optim_destroy(og);
    cudaFree(dfound);
    cudaFree(dnorm);
}

/* The clip coefficient from a device norm over the norms where its float arithmetic matters (below, at and above
   max_norm, zero, a double that is Inf as a float, Inf, NaN last): each GPU step (grad_norm in device memory) equals
   the CPU step given accel_optim_clip_coef(norm, max_norm), F32 gradients (every bit of the coefficient shows). */
static void run_clip_norms(void) {
    static const double norms[] = {0.0, 1e-9, 0.3, 1.5, 1.5000001, 2.0, 7.25, 1e10, 1e300, INFINITY, NAN};
    static const pspec ps[3] = {{5000, ACCEL_F32, ACCEL_BF16, 0, 0, 0}, {77, ACCEL_F32, ACCEL_DTYPE_INVALID, 1, 1, 1},
                                {4096 * 3 + 8, ACCEL_F32, ACCEL_BF16, 0, 0, 0}};
    plist l;
    accel_optim_desc d;
    accel_optim *oc = NULL, *og = NULL;
    double *dnorm = NULL;
    int k;
    at_context = "clip coefficient from the device norm";
    AT_CHECK(cudaMalloc((void **)&dnorm, sizeof(double)) == cudaSuccess);
    plist_make(&l, ps, 3, 0);
    memset(&d, 0, sizeof d);
    d.lr = 0.01; d.weight_decay = 0.1; d.nparams = 3;
    d.params = l.cp; d.grads = l.cg; d.model = l.cm;
    AT_EQ_INT(accel_optim_create(&cpu, &d, &oc), ACCEL_OK);
    d.params = l.gp; d.grads = l.gg; d.model = l.gm;
    AT_EQ_INT(accel_optim_create(&gpu, &d, &og), ACCEL_OK);
    for (k = 0; k < (int)(sizeof norms / sizeof norms[0]) && oc && og; ++k) {
        accel_optim_step_args sc, sg;
        const float coef = accel_optim_clip_coef(norms[k], 1.5);
        plist_grads(&l, 3.0f);
        memset(&sc, 0, sizeof sc);
        memset(&sg, 0, sizeof sg);
        sc.clip_coef = &coef;
        AT_CHECK(cudaMemcpy(dnorm, &norms[k], sizeof(double), cudaMemcpyHostToDevice) == cudaSuccess);
        sg.grad_norm = dnorm;
        sg.max_norm = 1.5;
        AT_EQ_INT(accel_optim_step(oc, &sc), ACCEL_OK);
        AT_EQ_INT(accel_optim_step(og, &sg), ACCEL_OK);
        compare(&l, oc, og);
    }
    accel_optim_destroy(oc);
    accel_optim_destroy(og);
    plist_free(&l);
    cudaFree(dnorm);
}

/* ----------------------------------------------------------------------------------- 1. the mixed list */
#define NP 7
static const pspec mixed[NP] = {
    {1, ACCEL_F32, ACCEL_BF16, 0, 0, 0},           {3000, ACCEL_BF16, ACCEL_BF16, 0, 0, 0},
    {0, ACCEL_F32, ACCEL_BF16, 0, 0, 0},           {65536 * 2 + 5, ACCEL_F32, ACCEL_F16, 1, 1, 1},
    {17, ACCEL_F16, ACCEL_BF16, 0, 0, 0},          {200003, ACCEL_BF16, ACCEL_BF16, 1, 1, 1},
    {64, ACCEL_F32, ACCEL_F16, 0, 0, 0}};

static void run_mixed(accel_optim_algorithm algo, int ams, int lerp, int nesterov, int stochastic, int mom16) {
    pspec ps[NP];
    plist l;
    accel_optim_desc d;
    char ctx[128];
    int i;
    snprintf(ctx, sizeof ctx, "mixed list: %s ams %d lerp %d nesterov %d sr %d bf16 moments %d",
             algo == ACCEL_OPTIM_ADAMW ? "adamw" : "sgd", ams, lerp, nesterov, stochastic, mom16);
    at_context = ctx;
    memcpy(ps, mixed, sizeof ps);
    for (i = 0; i < NP; ++i)
        if (stochastic && ps[i].mt != ACCEL_BF16) ps[i].mt = ACCEL_DTYPE_INVALID; /* SR writes BF16 only */
    plist_make(&l, ps, NP, 0);
    memset(&d, 0, sizeof d);
    d.algorithm = algo;
    d.amsgrad = ams;
    d.moment_rule = lerp ? ACCEL_OPTIM_MOMENT_LERP : ACCEL_OPTIM_MOMENT_DEFAULT;
    if (algo == ACCEL_OPTIM_SGD) { d.momentum = 0.9; d.nesterov = nesterov; d.dampening = nesterov ? 0.0 : 0.25; }
    d.maximize = nesterov;
    d.model_rounding = stochastic ? ACCEL_OPTIM_ROUND_STOCHASTIC : ACCEL_OPTIM_ROUND_NEAREST;
    d.sr_seed = 31337; d.index_offset = 5;
    d.moment_dtype = mom16 ? ACCEL_BF16 : ACCEL_DTYPE_INVALID;
    run_list(&l, &d, 6, 4, 40.0f);
    plist_free(&l);
}

/* ------------------------------------------------------------------------- 2. alignments and tails */
static void run_alignment(int stochastic, int mom16, int lerp) {
    enum { NA = 96 };
    pspec ps[NA];
    plist l;
    accel_optim_desc d;
    char ctx[96];
    int i;
    snprintf(ctx, sizeof ctx, "alignment: sr %d bf16 moments %d lerp %d", stochastic, mom16, lerp);
    at_context = ctx;
    rs = 0xA11A11A1ull + (uint64_t)(stochastic * 4 + mom16 * 2 + lerp);
    for (i = 0; i < NA; ++i) {
        pspec *s = &ps[i];
        static const int64_t bases[] = {0, 8, 16, 64, 4096 - 8, 4096, 4096 + 8, 3 * 4096 + 64};
        int same = i % 8 != 7; /* every 8th: mutually misaligned streams (the generic kernel) */
        s->n = bases[(i / 8) % 8] + (i % 8); /* every tail length 0..7 */
        if (s->n == 0) s->n = 1;
        s->op = (i * 5) % 8;
        s->og = same ? s->op : (s->op + 1 + i % 3) % 8;
        s->om = same ? s->op : (s->op + 3) % 8;
        s->gt = i % 11 == 10 ? ACCEL_F16 : (i % 2 ? ACCEL_BF16 : ACCEL_F32);
        s->mt = i % 3 == 2 ? ACCEL_DTYPE_INVALID : ACCEL_BF16;
    }
    plist_make(&l, ps, NA, 0);
    memset(&d, 0, sizeof d);
    d.algorithm = ACCEL_OPTIM_ADAMW;
    d.moment_rule = lerp ? ACCEL_OPTIM_MOMENT_LERP : ACCEL_OPTIM_MOMENT_DEFAULT;
    d.model_rounding = stochastic ? ACCEL_OPTIM_ROUND_STOCHASTIC : ACCEL_OPTIM_ROUND_NEAREST;
    d.sr_seed = 4711; d.index_offset = 3; /* the draws' indices start unaligned */
    d.moment_dtype = mom16 ? ACCEL_BF16 : ACCEL_F32;
    run_list(&l, &d, 5, 9, 2.0f);
    plist_free(&l);
}

/* ------------------------------------------------------------------------------- 3. the GPT-2 list */
#define NT 148
static void run_gpt2(int bf16) {
    pspec ps[NT];
    plist l;
    accel_optim_desc d;
    int i = 0, k;
    static const int64_t layer[12] = {768, 768, 768LL * 2304, 2304, 768LL * 768, 768, 768, 768, 768LL * 3072, 3072,
                                      3072LL * 768, 768};
    at_context = bf16 ? "gpt2: BF16 gradients, stochastic BF16 copy" : "gpt2: F32 gradients, BF16 moments";
    memset(ps, 0, sizeof ps);
    ps[i++].n = 50257LL * 768;
    ps[i++].n = 1024LL * 768;
    for (k = 0; k < 12 * 12; ++k) ps[i++].n = layer[k % 12];
    ps[i++].n = 768;
    ps[i++].n = 768;
    for (i = 0; i < NT; ++i) {
        ps[i].gt = bf16 ? ACCEL_BF16 : ACCEL_F32;
        ps[i].mt = bf16 ? ACCEL_BF16 : ACCEL_DTYPE_INVALID;
    }
    plist_make(&l, ps, NT, 1);
    memset(&d, 0, sizeof d);
    d.algorithm = ACCEL_OPTIM_ADAMW;
    d.model_rounding = bf16 ? ACCEL_OPTIM_ROUND_STOCHASTIC : ACCEL_OPTIM_ROUND_NEAREST;
    d.sr_seed = 1234;
    d.moment_dtype = bf16 ? ACCEL_F32 : ACCEL_BF16;
    run_list(&l, &d, 3, -1, 1.0f);
    plist_free(&l);
}

/* ------------------------------------------------------------------ 4. checkpoints, F32 <-> BF16 moments */
/* The device state tensors of opt, copied to the host (nbytes each, concatenated). */
static unsigned char *state_to_host(accel_optim *opt, size_t *total) {
    const accel_tensor *t;
    int n, k;
    size_t at = 0;
    unsigned char *h;
    accel_optim_state_tensors(opt, &t, &n);
    for (k = 0, *total = 0; k < n; ++k) *total += (size_t)accel_tensor_nbytes(&t[k]);
    h = (unsigned char *)malloc(*total + 1);
    for (k = 0; k < n; ++k) {
        size_t nb = (size_t)accel_tensor_nbytes(&t[k]);
        AT_CHECK(cudaMemcpy(h + at, t[k].ptr, nb, cudaMemcpyDeviceToHost) == cudaSuccess);
        at += nb;
    }
    return h;
}
static void ckpt_round(accel_optim *from, accel_optim *to, const char *dir) {
    accel_ckpt *ck = NULL;
    accel_ckpt_desc cd;
    const accel_tensor *mom;
    int nmom;
    memset(&cd, 0, sizeof cd);
    AT_EQ_INT(accel_ckpt_create(&gpu, &cd, &ck), ACCEL_OK);
    accel_optim_state_tensors(from, &mom, &nmom);
    AT_EQ_INT(accel_ckpt_register_optimizer(ck, mom, nmom), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_register(ck, "optim_state", accel_optim_state_save, accel_optim_state_load, from), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_save_state(ck, dir, NULL, 0), ACCEL_OK);
    accel_ckpt_destroy(ck);
    AT_EQ_INT(accel_ckpt_create(&gpu, &cd, &ck), ACCEL_OK);
    accel_optim_state_tensors(to, &mom, &nmom);
    AT_EQ_INT(accel_ckpt_register_optimizer(ck, mom, nmom), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_register(ck, "optim_state", accel_optim_state_save, accel_optim_state_load, to), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_load_state(ck, dir), ACCEL_OK);
    accel_ckpt_destroy(ck);
}
static void run_ckpt(void) {
    char dir[] = "/tmp/accel_optim_gpu_ckptXXXXXX", sub[96];
    pspec ps[NP];
    plist l;
    accel_optim_desc d;
    accel_optim *o32 = NULL, *o16 = NULL, *o32b = NULL;
    unsigned char *h32, *h16, *h32b;
    size_t n32, n16, n32b, i, bad = 0;
    int step;
    at_context = "checkpoints of device moments, F32 <-> BF16";
    if (!mkdtemp(dir)) { perror("mkdtemp"); at_failed++; return; }
    memcpy(ps, mixed, sizeof ps);
    plist_make(&l, ps, NP, 0);
    memset(&d, 0, sizeof d);
    d.lr = 0.01; d.nparams = NP; d.params = l.gp; d.grads = l.gg;
    AT_EQ_INT(accel_optim_create(&gpu, &d, &o32), ACCEL_OK);
    AT_EQ_INT(accel_optim_create(&gpu, &d, &o32b), ACCEL_OK);
    d.moment_dtype = ACCEL_BF16;
    AT_EQ_INT(accel_optim_create(&gpu, &d, &o16), ACCEL_OK);
    for (step = 0; step < 3 && o32 && o16 && o32b; ++step) {
        plist_grads(&l, 3.0f);
        AT_EQ_INT(accel_optim_step(o32, NULL), ACCEL_OK);
    }
    if (o32 && o16 && o32b) {
        snprintf(sub, sizeof sub, "%s/f32", dir);
        ckpt_round(o32, o16, sub); /* F32 → BF16: round to nearest even */
        h32 = state_to_host(o32, &n32);
        h16 = state_to_host(o16, &n16);
        AT_EQ_INT(n16 * 2, n32);
        for (i = 0; i < n16 / 2 && i < n32 / 4; ++i) {
            float f;
            uint16_t b;
            memcpy(&f, h32 + 4 * i, 4);
            memcpy(&b, h16 + 2 * i, 2);
            bad += b != accel_f32_to_bf16(f);
        }
        AT_EQ_INT(bad, 0);
        AT_EQ_INT(accel_optim_step(o16, NULL), ACCEL_OK); /* moments that are no rounded F32 values any more */
        free(h16);
        h16 = state_to_host(o16, &n16);
        snprintf(sub, sizeof sub, "%s/bf16", dir);
        ckpt_round(o16, o32b, sub); /* BF16 → F32: exact */
        h32b = state_to_host(o32b, &n32b);
        AT_EQ_INT(n32b, n32);
        for (i = 0, bad = 0; i < n16 / 2 && i < n32b / 4; ++i) {
            uint32_t u;
            uint16_t b;
            memcpy(&u, h32b + 4 * i, 4);
            memcpy(&b, h16 + 2 * i, 2);
            bad += u != (uint32_t)b << 16;
        }
        AT_EQ_INT(bad, 0);
        free(h32); free(h16); free(h32b);
    }
    accel_optim_destroy(o32);
    accel_optim_destroy(o16);
    accel_optim_destroy(o32b);
    plist_free(&l);
    at_rm_rf(dir);
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
    run_mixed(ACCEL_OPTIM_ADAMW, 0, 0, 0, 0, 0);
    run_mixed(ACCEL_OPTIM_ADAMW, 1, 0, 0, 1, 0);
    run_mixed(ACCEL_OPTIM_ADAMW, 1, 1, 0, 0, 0);
    run_mixed(ACCEL_OPTIM_ADAMW, 0, 0, 0, 1, 1);
    run_mixed(ACCEL_OPTIM_ADAMW, 0, 1, 0, 0, 1);
    run_mixed(ACCEL_OPTIM_SGD, 0, 0, 0, 1, 0);
    run_mixed(ACCEL_OPTIM_SGD, 0, 0, 1, 0, 0);
    run_alignment(0, 0, 0);
    run_alignment(1, 0, 1);
    run_alignment(1, 1, 0);
    run_alignment(0, 1, 1);
    run_clip_norms();
    run_gpt2(1);
    run_gpt2(0);
    run_ckpt();
    AT_CHECK(cudaDeviceSynchronize() == cudaSuccess);
    accel_shutdown(&cpu);
    accel_shutdown(&gpu);
    at_context = "";
    return at_finish("optim_gpu");
}
