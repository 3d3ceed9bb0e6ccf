/* ZeRO-1/2 (accel_collectives.h section 16 + accel_optim.h) under mpirun (np 1..4): 50 AdamW steps with gradient
   accumulation equal the unsharded run (the reducer + one optimizer over the whole list) — ZeRO-1 bit for bit (same
   reducer), ZeRO-2 bit for bit at P <= 2 (a reduce and an all-reduce of two addends agree) and within 1e-6 relative
   otherwise; the BF16 stochastic-rounding model copies too (index_offset); optimizer-state memory per rank (through
   the host allocator hooks); mismatched / bad lists on one rank fail every rank; sharded checkpoints: the state
   saved on one P continues bit for bit on another (modes save DIR / load DIR, driven by zero_save_load.sh).
   usage: test_zero_mpi [basic | save DIR | load DIR] */
#include "accel.h"
#include "accel_ckpt.h"
#include "accel_collectives.h"
#include "accel_ddp.h"
#include "accel_zero.h"
#include "accel_optim.h"
#include "accel_test.h"
#include <sys/stat.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static accel acc;
static int P, R;

/* host allocator hooks that count live bytes and poison new blocks (0xA5: uninitialized reads show up) */
static long long live_bytes;
static void *count_alloc(size_t n, void *u) {
    size_t *p = (size_t *)malloc(n + 16);
    (void)u;
    if (!p) return NULL;
    p[0] = n;
    live_bytes += (long long)n;
    memset((unsigned char *)p + 16, 0xA5, n);
    return (unsigned char *)p + 16;
}
static void count_free(void *q, void *u) {
    size_t *p;
    (void)u;
    if (!q) return;
    p = (size_t *)((unsigned char *)q - 16);
    live_bytes -= (long long)p[0];
    free(p);
}
static void quiet_log(void *user, accel_log_level level, const char *msg) { (void)level; (void)msg; (void)user; }

#define NP 6
static const int64_t SHAPES[NP][2] = {{37, 1}, {8, 9}, {1, 1}, {0, 1}, {50, 1}, {13, 3}};
static const char *NAMES[NP] = {"w0", "w1", "b1", "empty", "w2", "w3"};

typedef struct model {
    float *p[NP], *g[NP];
    uint16_t *m[NP];
    accel_tensor tp[NP], tg[NP], tm[NP];
} model;

static void model_make(model *md) {
    int i;
    int64_t e;
    memset(md, 0, sizeof *md);
    for (i = 0; i < NP; ++i) {
        int64_t n = SHAPES[i][0] * SHAPES[i][1];
        md->p[i] = (float *)calloc((size_t)n + 1, 4);
        md->g[i] = (float *)calloc((size_t)n + 1, 4);
        md->m[i] = (uint16_t *)calloc((size_t)n + 1, 2);
        for (e = 0; e < n; ++e) md->p[i][e] = (float)(0.5 * sin(0.3 * (double)e + (double)i));
        md->tp[i].name = NAMES[i]; md->tp[i].ptr = md->p[i]; md->tp[i].dtype = ACCEL_F32;
        md->tp[i].ndim = 2; md->tp[i].shape[0] = SHAPES[i][0]; md->tp[i].shape[1] = SHAPES[i][1];
        md->tg[i] = md->tp[i]; md->tg[i].ptr = md->g[i];
        md->tm[i] = md->tp[i]; md->tm[i].ptr = md->m[i]; md->tm[i].dtype = ACCEL_BF16;
    }
}
static void model_free(model *md) {
    int i;
    for (i = 0; i < NP; ++i) { free(md->p[i]); free(md->g[i]); free(md->m[i]); }
}
/* one micro-batch's local gradient, accumulated; only_rank0: rank 0 alone contributes (P-independent sums) */
static void add_grads(model *md, int micro, int only_rank0) {
    int i;
    int64_t e;
    for (i = 0; i < NP; ++i)
        for (e = 0; e < SHAPES[i][0] * SHAPES[i][1]; ++e)
            md->g[i][e] += (only_rank0 && R != 0) ? 0.0f
                           : (float)(0.01 * (i + 1) * sin(0.37 * (double)(e + 1) + 1.3 * R + 0.7 * micro));
}
static void zero_grads(model *md) {
    int i;
    for (i = 0; i < NP; ++i) memset(md->g[i], 0, (size_t)(SHAPES[i][0] * SHAPES[i][1]) * 4);
}

static accel_optim_group GROUPS[2] = {{3, 0.0, 0.1}, {3, 0.0, 0.0}};
static accel_optim *make_opt(const accel_tensor *p, const accel_tensor *g, const accel_tensor *m, uint64_t index_offset) {
    accel_optim_desc od;
    accel_optim *o = NULL;
    memset(&od, 0, sizeof od);
    od.algorithm = ACCEL_OPTIM_ADAMW;
    od.lr = 1e-2;
    od.params = p; od.grads = g; od.model = m; od.nparams = NP;
    od.groups = GROUPS; od.ngroups = 2;
    od.model_rounding = ACCEL_OPTIM_ROUND_STOCHASTIC;
    od.sr_seed = 7;
    od.index_offset = index_offset;
    if (accel_optim_create(&acc, &od, &o) != ACCEL_OK) fprintf(stderr, "optim_create: %s\n", accel_last_error(&acc));
    return o;
}

/* a ZeRO run: the object, the shard optimizer and the views */
typedef struct zrun {
    model md;
    accel_zero *z;
    accel_optim *opt;
    accel_tensor vp[NP], vg[NP], vm[NP];
} zrun;

static int zrun_make(zrun *zr, accel_coll *c, int stage, double cap_mb, int no_average) {
    accel_zero_desc zd;
    model_make(&zr->md);
    memset(&zd, 0, sizeof zd);
    zd.stage = stage;
    zd.params = zr->md.tp; zd.grads = zr->md.tg; zd.n = NP;
    zd.bucket_cap_mb = cap_mb;
    zd.no_average = no_average;
    if (accel_zero_create(c, &zd, &zr->z) != ACCEL_OK) { fprintf(stderr, "zero_create: %s\n", accel_last_error(&acc)); return 0; }
    if (accel_zero_views(zr->z, zr->md.tp, NP, zr->vp) != ACCEL_OK) return 0;
    if (accel_zero_views(zr->z, zr->md.tm, NP, zr->vm) != ACCEL_OK) return 0;
    if (accel_zero_grad_views(zr->z, zr->vg, NP) != ACCEL_OK) return 0;
    zr->opt = make_opt(zr->vp, zr->vg, zr->vm, (uint64_t)accel_zero_get_partition(zr->z)->begin);
    return zr->opt != NULL;
}
static void zrun_free(zrun *zr) {
    accel_optim_destroy(zr->opt);
    accel_zero_destroy(zr->z);
    model_free(&zr->md);
}
/* one micro-batch of a ZeRO run (backward order: last parameter first) */
static accel_result zrun_micro(zrun *zr, int micro, int only_rank0) {
    int i;
    accel_result r = ACCEL_OK;
    add_grads(&zr->md, micro, only_rank0);
    for (i = NP - 1; i >= 0 && r == ACCEL_OK; --i) r = accel_zero_grad_ready(zr->z, i);
    if (r == ACCEL_OK) r = accel_zero_wait(zr->z);
    if (r == ACCEL_OK && acc.sync_gradients) {
        r = accel_optim_step(zr->opt, NULL);
        if (r == ACCEL_OK) r = accel_zero_gather(zr->z, zr->md.tp, NP);
        if (r == ACCEL_OK) r = accel_zero_gather(zr->z, zr->md.tm, NP);
        zero_grads(&zr->md);
    }
    return r;
}

/* The largest difference of a parameter relative to its tensor's scale (max |y| over the tensor): where the
   reductions sum in another order the gradients differ in the last bits, and 50 AdamW steps carry that into the
   parameters; an element close to zero (MPICH at np4: -0.00979 in a tensor of larger values, 19 ulps apart) makes a
   purely element-wise relative error meaningless, so the scale is the tensor's (a normwise bound, as torch's
   assert_close uses rtol together with an atol). */
static double max_rel(const model *a, const model *b, int *bitwise) {
    double worst = 0;
    int i;
    int64_t e;
    *bitwise = 1;
    for (i = 0; i < NP; ++i) {
        double scale = 1e-30;
        for (e = 0; e < SHAPES[i][0] * SHAPES[i][1]; ++e)
            if (fabs((double)b->p[i][e]) > scale) scale = fabs((double)b->p[i][e]);
        for (e = 0; e < SHAPES[i][0] * SHAPES[i][1]; ++e) {
            double x = a->p[i][e], y = b->p[i][e], d = fabs(x - y) / (fabs(y) > scale ? fabs(y) : scale);
            if (memcmp(&a->p[i][e], &b->p[i][e], 4) != 0) *bitwise = 0;
            if (d > worst) worst = d;
        }
    }
    return worst;
}
static int models_equal_bf16(const model *a, const model *b) {
    int i;
    for (i = 0; i < NP; ++i)
        if (memcmp(a->m[i], b->m[i], (size_t)(SHAPES[i][0] * SHAPES[i][1]) * 2) != 0) return 0;
    return 1;
}

static void equivalence(accel_coll *c, double cap_mb) {
    model ref;
    zrun z1, z2;
    accel_ddp *red = NULL;
    accel_ddp_desc rd;
    accel_optim *ropt;
    int mb, i, bw;
    int64_t steps = -1;
    double rel;
    char ctx[64];
    snprintf(ctx, sizeof ctx, "equivalence cap %g", cap_mb);
    at_context = ctx;
    model_make(&ref);
    memset(&rd, 0, sizeof rd);
    rd.bucket_cap_mb = cap_mb;
    AT_EQ_INT(accel_ddp_create(c, &rd, &red), ACCEL_OK);
    AT_EQ_INT(accel_ddp_add(red, ref.tg, NP), ACCEL_OK);
    ropt = make_opt(ref.tp, ref.tg, ref.tm, 0);
    AT_CHECK(zrun_make(&z1, c, 1, cap_mb, 0));
    AT_CHECK(zrun_make(&z2, c, 2, cap_mb, 0));
    for (mb = 0; mb < 100; ++mb) { /* gradient_accumulation_steps 2: 50 optimizer steps */
        accel_accumulate_begin(&acc);
        add_grads(&ref, mb, 0);
        for (i = NP - 1; i >= 0; --i) AT_EQ_INT(accel_ddp_grad_ready(red, i), ACCEL_OK);
        AT_EQ_INT(accel_ddp_wait(red), ACCEL_OK);
        AT_EQ_INT(zrun_micro(&z1, mb, 0), ACCEL_OK);
        AT_EQ_INT(zrun_micro(&z2, mb, 0), ACCEL_OK);
        if (acc.sync_gradients) {
            if (mb == 1 && P == 2) { /* ZeRO-2's shard gradients equal the reducer's average there (P 1: no copy) */
                const accel_zero_partition *pt = accel_zero_get_partition(z2.z);
                int ok = 1;
                for (i = 0; i < NP; ++i)
                    if (z2.vg[i].shape[0] > 0 &&
                        memcmp(z2.vg[i].ptr, (const float *)ref.g[i] + ((const float *)z2.vp[i].ptr - z2.md.p[i]),
                               (size_t)z2.vg[i].shape[0] * 4) != 0) ok = 0;
                AT_CHECK_MSG(ok, "ZeRO-2 shard gradients differ from the reducer's");
                (void)pt;
            }
            AT_EQ_INT(accel_optim_step(ropt, NULL), ACCEL_OK);
            zero_grads(&ref);
        }
        accel_accumulate_end(&acc);
    }
    AT_EQ_INT(accel_optim_step_count(z2.opt, &steps), ACCEL_OK);
    AT_EQ_INT((int)steps, 50);
    rel = max_rel(&z1.md, &ref, &bw);
    AT_CHECK_MSG(bw, "ZeRO-1 parameters differ from the unsharded run");
    AT_CHECK_MSG(models_equal_bf16(&z1.md, &ref), "ZeRO-1 BF16 model copies differ");
    rel = max_rel(&z2.md, &ref, &bw);
    if (P <= 2) {
        AT_CHECK_MSG(bw, "ZeRO-2 parameters differ from the unsharded run at P <= 2");
        AT_CHECK_MSG(models_equal_bf16(&z2.md, &ref), "ZeRO-2 BF16 model copies differ");
    }
    AT_CHECK_MSG(rel <= 1e-6, "ZeRO-2 parameters beyond 1e-6 relative to their tensor's scale");
    if (R == 0) printf("zero np%d cap %g MiB: ZeRO-2 vs unsharded after 50 steps: max rel %.3g (%s)\n", P, cap_mb, rel,
                       bw ? "bit-identical" : "not bit-identical");
    zrun_free(&z1);
    zrun_free(&z2);
    accel_optim_destroy(ropt);
    accel_ddp_destroy(red);
    model_free(&ref);
}

/* optimizer-state memory per rank through the host allocator: ceil(N/P) elements per moment, not N */
static void memory(accel_coll *c) {
    enum { K = 4 };
    static const int64_t sizes[K] = {300007, 1 << 18, 77, 500000};
    float *buf[K];
    accel_tensor t[K], v[K];
    accel_zero *z = NULL;
    accel_zero_desc zd;
    accel_optim_desc od;
    accel_optim *o = NULL;
    const accel_zero_partition *pt;
    long long before, sharded, full;
    int64_t N = 0, mine;
    int i;
    at_context = "memory";
    for (i = 0; i < K; ++i) {
        buf[i] = (float *)calloc((size_t)sizes[i], 4);
        memset(&t[i], 0, sizeof t[i]);
        t[i].name = "p"; t[i].ptr = buf[i]; t[i].dtype = ACCEL_F32; t[i].ndim = 1; t[i].shape[0] = sizes[i];
        N += sizes[i];
    }
    memset(&zd, 0, sizeof zd);
    zd.stage = 2; zd.params = t; zd.grads = t; zd.n = K;
    AT_EQ_INT(accel_zero_create(c, &zd, &z), ACCEL_OK);
    pt = accel_zero_get_partition(z);
    AT_EQ_INT((long long)pt->shard, (long long)((N + P - 1) / P));
    AT_CHECK(pt->end - pt->begin <= pt->shard);
    AT_EQ_INT(accel_zero_views(z, t, K, v), ACCEL_OK);
    mine = pt->end - pt->begin;
    memset(&od, 0, sizeof od);
    od.params = v; od.nparams = K; od.index_offset = (uint64_t)pt->begin;
    before = live_bytes;
    AT_EQ_INT(accel_optim_create(&acc, &od, &o), ACCEL_OK);
    sharded = live_bytes - before;
    accel_optim_destroy(o);
    od.params = t;
    before = live_bytes;
    AT_EQ_INT(accel_optim_create(&acc, &od, &o), ACCEL_OK);
    full = live_bytes - before;
    accel_optim_destroy(o);
    /* two moments of ceil(N/P) floats at most, plus bookkeeping (alignment, stagger, descriptors) under 64 KiB */
    AT_CHECK(sharded >= 8LL * mine);
    AT_CHECK(sharded <= 8LL * pt->shard + 65536);
    AT_CHECK(full >= 8LL * N);
    if (R == 0) printf("zero np%d memory: N %lld, shard %lld; AdamW state bytes per rank %lld sharded vs %lld unsharded (%.3f)\n", P,
                       (long long)N, (long long)pt->shard, sharded, full, (double)sharded / (double)full);
    accel_zero_destroy(z);
    for (i = 0; i < K; ++i) free(buf[i]);
}

/* a bad or a different list on one rank fails every rank, without a hang */
static void mismatches(accel_coll *c) {
    model md;
    accel_zero_desc zd;
    accel_zero *z = NULL;
    accel_tensor bad[NP];
    accel_result r;
    at_context = "mismatches";
    model_make(&md);
    memcpy(bad, md.tp, sizeof bad);
    memset(&zd, 0, sizeof zd);
    zd.stage = 2; zd.params = md.tp; zd.grads = md.tg; zd.n = NP;
    /* a different shape on the last rank */
    if (R == P - 1) { bad[4].shape[0] = 49; zd.params = bad; zd.grads = bad; }
    r = accel_zero_create(c, &zd, &z);
    if (P > 1) {
        AT_EQ_INT(r, ACCEL_ERR_MISMATCH);
        AT_CONTAINS(accel_last_error(&acc), "ranks gave different lists");
        AT_CHECK(z == NULL);
    } else {
        AT_EQ_INT(r, ACCEL_OK);
        accel_zero_destroy(z);
        z = NULL;
    }
    /* a bad list on the last rank (a gradient of the wrong size): that rank names it, the others ACCEL_ERR_REMOTE */
    zd.params = md.tp; zd.grads = md.tg;
    if (R == P - 1) { memcpy(bad, md.tg, sizeof bad); bad[1].shape[1] = 8; zd.grads = bad; }
    r = accel_zero_create(c, &zd, &z);
    if (R == P - 1) {
        AT_EQ_INT(r, ACCEL_ERR_INVALID_ARGUMENT);
        AT_CONTAINS(accel_last_error(&acc), "grads[1] has 64 elements");
    } else {
        AT_EQ_INT(r, ACCEL_ERR_REMOTE);
    }
    /* a stage that differs */
    zd.grads = md.tg;
    zd.stage = R == P - 1 ? 1 : 2;
    r = accel_zero_create(c, &zd, &z);
    AT_EQ_INT(r, P > 1 ? ACCEL_ERR_MISMATCH : ACCEL_OK);
    accel_zero_destroy(z);
    z = NULL;
    /* gather with a wrong list on one rank */
    zd.stage = 2;
    AT_EQ_INT(accel_zero_create(c, &zd, &z), ACCEL_OK);
    memcpy(bad, md.tp, sizeof bad);
    if (R == P - 1) bad[0].shape[0] = 36;
    r = accel_zero_gather(z, bad, NP);
    AT_EQ_INT(r, R == P - 1 ? ACCEL_ERR_INVALID_ARGUMENT : (P > 1 ? ACCEL_ERR_REMOTE : ACCEL_ERR_INVALID_ARGUMENT));
    /* the object still works afterwards; a reducing step first thing (outside accumulate: sync) */
    AT_EQ_INT(accel_zero_gather(z, md.tp, NP), ACCEL_OK);
    AT_CHECK(accel_should_reduce(&acc) || P == 1);
    {
        int i;
        for (i = NP - 1; i >= 0; --i) AT_EQ_INT(accel_zero_grad_ready(z, i), ACCEL_OK);
        AT_EQ_INT(accel_zero_wait(z), ACCEL_OK);
        AT_EQ_INT(accel_zero_grad_ready(z, NP - 1), ACCEL_OK);
        AT_EQ_INT(accel_zero_grad_ready(z, NP - 1), P > 1 && accel_should_reduce(&acc) ? ACCEL_ERR_STATE : ACCEL_OK); /* P 1: nothing to track */
        AT_EQ_INT(accel_zero_wait(z), ACCEL_OK);
    }
    /* partition: argument errors */
    {
        accel_zero_partition pt;
        AT_EQ_INT(accel_zero_partition_list(&acc, md.tp, NP, 0, 0, &pt), ACCEL_ERR_INVALID_ARGUMENT);
        AT_EQ_INT(accel_zero_partition_list(&acc, md.tp, NP, 3, 3, &pt), ACCEL_ERR_INVALID_ARGUMENT);
        AT_EQ_INT(accel_zero_partition_list(&acc, md.tp, NP, 7, 6, &pt), ACCEL_OK);
        /* N = 199 over 7: S = 29; rank 6 owns [174, 199) */
        AT_EQ_INT((int)pt.total, 199);
        AT_EQ_INT((int)pt.shard, 29);
        AT_EQ_INT((int)pt.begin, 174);
        AT_EQ_INT((int)pt.end, 199);
        AT_EQ_INT(accel_zero_partition_list(&acc, md.tp, 2, 200, 199, &pt), ACCEL_OK); /* 109 elements over 200 */
        AT_EQ_INT((int)pt.shard, 1);
        AT_EQ_INT((int)pt.begin, 109);
        AT_EQ_INT((int)pt.end, 109);
        {
            accel_tensor v[NP];
            AT_EQ_INT(accel_zero_partition_list(&acc, md.tp, NP, 4, 1, &pt), ACCEL_OK); /* S = 50: [50, 100) */
            AT_EQ_INT(accel_zero_partition_views(&pt, md.tp, NP, v), 1);   /* w1 [37, 109): its elements [13, 63) */
            AT_EQ_INT((int)v[0].shape[0], 0);
            AT_EQ_INT((int)v[1].shape[0], 50);
            AT_CHECK(v[1].ptr == (void *)(md.p[1] + 13));
            AT_EQ_INT((int)v[2].shape[0], 0);
            AT_CHECK(v[2].ptr == (void *)md.p[2]);
            AT_EQ_INT((int)v[4].shape[0], 0);
        }
    }
    accel_zero_destroy(z);
    model_free(&md);
}

/* checkpoints: mode save runs 20 steps (ZeRO-2, rank 0's gradients only, summed: the sums do not depend on P),
   saves, runs 10 more and writes the final parameters; mode load continues from the checkpoint on this P. */
static void ckpt_mode(accel_coll *c, const char *mode, const char *dir, int sharded) {
    zrun zr;
    accel_zero_state zs;
    accel_ckpt *ck = NULL;
    accel_ckpt_desc cd;
    const accel_tensor *st;
    accel_tensor full[NP * 2];
    float *fbuf[NP * 2];
    accel_optim_shard_state ss;
    char path[512];
    int nst = 0, i, mb, first_mb;
    at_context = mode;
    AT_CHECK(zrun_make(&zr, c, 2, 0.0002, 1));
    AT_EQ_INT(accel_optim_state_tensors(zr.opt, &st, &nst), ACCEL_OK);
    AT_EQ_INT(nst, NP * 2);
    for (i = 0; i < nst; ++i) { /* the consolidated moments: full-size buffers named as the optimizer's keys */
        full[i] = zr.md.tp[i / 2];
        full[i].name = st[i].name;
        fbuf[i] = (float *)calloc((size_t)accel_tensor_numel(&full[i]) + 1, 4);
        full[i].ptr = fbuf[i];
    }
    ss.opt = zr.opt;
    ss.full = zr.md.tp;
    memset(&cd, 0, sizeof cd);
    cd.project_dir = dir;
    AT_EQ_INT(accel_ckpt_create(&acc, &cd, &ck), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_register_model(ck, zr.md.tp, NP), ACCEL_OK);
    if (sharded) { /* each rank saves its own shard: zero_state_<rank>.bin, re-partitioned at load */
        zs.zero = zr.z;
        zs.shard = st;
        zs.m = nst;
        AT_EQ_INT(accel_ckpt_register_sharded(ck, "zero_state", accel_zero_state_save, accel_zero_state_load_all, &zs),
                  ACCEL_OK);
    } else {          /* consolidated: full-size moments in optimizer.safetensors */
        AT_EQ_INT(accel_ckpt_register_optimizer(ck, full, nst), ACCEL_OK);
    }
    AT_EQ_INT(accel_ckpt_register(ck, "optim_state", accel_optim_shard_state_save, accel_optim_shard_state_load, &ss), ACCEL_OK);
    snprintf(path, sizeof path, "%s/ckpt", dir);
    first_mb = 0;
    if (!strcmp(mode, "load")) {
        AT_EQ_INT(accel_ckpt_load_state(ck, path), ACCEL_OK);
        if (!sharded) AT_EQ_INT(accel_zero_import(zr.z, full, st, nst), ACCEL_OK);
        first_mb = 40;
    }
    for (mb = first_mb; mb < 60; ++mb) {
        accel_accumulate_begin(&acc);
        AT_EQ_INT(zrun_micro(&zr, mb, 1), ACCEL_OK);
        accel_accumulate_end(&acc);
        if (mb == 39 && !strcmp(mode, "save")) {
            if (!sharded) AT_EQ_INT(accel_zero_export(zr.z, st, full, nst), ACCEL_OK);
            AT_EQ_INT(accel_ckpt_save_state(ck, path, NULL, 0), ACCEL_OK);
            if (sharded) { /* this rank's file holds its shard only: about 1/P of the moments, never all of them */
                char f[600];
                struct stat sb;
                int64_t mine = 0, all = 0;
                for (i = 0; i < nst; ++i) { mine += accel_tensor_numel(&st[i]); all += accel_tensor_numel(&full[i]); }
                snprintf(f, sizeof f, "%s/zero_state_%d.bin", path, R);
                AT_CHECK_MSG(stat(f, &sb) == 0, "every rank wrote its zero_state_<rank>.bin");
                AT_CHECK_MSG((int64_t)sb.st_size >= mine * 4 && (int64_t)sb.st_size < mine * 4 + 4096 &&
                             (P == 1 || (int64_t)sb.st_size < all * 4), "a rank's file holds its shard, not the whole state");
                snprintf(f, sizeof f, "%s/optimizer.safetensors", path);
                AT_CHECK_MSG(stat(f, &sb) != 0, "no consolidated optimizer file in a sharded checkpoint");
            }
        }
    }
    snprintf(path, sizeof path, "%s/final_params.bin", dir);
    if (!strcmp(mode, "save")) {
        if (R == 0) {
            FILE *f = fopen(path, "wb");
            AT_CHECK(f != NULL);
            for (i = 0; f && i < NP; ++i) fwrite(zr.md.p[i], 4, (size_t)(SHAPES[i][0] * SHAPES[i][1]), f);
            if (f) fclose(f);
        }
    } else {
        FILE *f = fopen(path, "rb");
        int same = f != NULL;
        for (i = 0; f && i < NP; ++i) {
            size_t n = (size_t)(SHAPES[i][0] * SHAPES[i][1]);
            float *x = (float *)calloc(n + 1, 4);
            if (fread(x, 4, n, f) != n || memcmp(x, zr.md.p[i], n * 4) != 0) same = 0;
            free(x);
        }
        if (f) fclose(f);
        AT_CHECK_MSG(same, "the continuation after loading differs from the saving run's");
        if (R == 0 && same) printf("zero np%d: continued a checkpoint bit for bit\n", P);
        {
            int64_t steps = -1;
            AT_EQ_INT(accel_optim_step_count(zr.opt, &steps), ACCEL_OK);
            AT_EQ_INT((int)steps, 30);
        }
    }
    accel_ckpt_destroy(ck);
    for (i = 0; i < nst; ++i) free(fbuf[i]);
    zrun_free(&zr);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "basic";
    accel_desc d;
    accel_coll *c = NULL;
    int rc;
    memset(&d, 0, sizeof d);
    d.cpu = 1;
    d.log_fn = quiet_log;
    d.gradient_accumulation_steps = 2;
    d.host_allocator.alloc = count_alloc;
    d.host_allocator.free = count_free;
    if (accel_init(&acc, &d) != ACCEL_OK) {
        fprintf(stderr, "accel_init: %s\n", accel_last_error(&acc));
        return 1;
    }
    P = acc.num_processes;
    R = acc.process_index;
    if (accel_coll_create(&acc, NULL, &c) != ACCEL_OK) {
        fprintf(stderr, "coll_create: %s\n", accel_last_error(&acc));
        return 1;
    }
    if (!strcmp(mode, "basic")) {
        equivalence(c, 0.0002); /* ~200-byte buckets and gather chunks: many of each */
        equivalence(c, 0);      /* the defaults: one bucket, one chunk */
        memory(c);
        mismatches(c);
    } else if (argc > 2 && (!strcmp(mode, "save") || !strcmp(mode, "load"))) {
        ckpt_mode(c, mode, argv[2], 0);
    } else if (argc > 2 && (!strcmp(mode, "ssave") || !strcmp(mode, "sload"))) {
        ckpt_mode(c, mode[1] == 's' ? "save" : "load", argv[2], 1);
    } else {
        fprintf(stderr, "usage: test_zero_mpi [basic | save DIR | load DIR | ssave DIR | sload DIR]\n");
        return 2;
    }
    accel_coll_destroy(c);
    rc = at_finish("zero_mpi");
    accel_shutdown(&acc);
    return rc;
}
