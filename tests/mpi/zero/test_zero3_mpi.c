/* ZeRO-3 / FSDP (accel_zero.h section 4) under mpirun (np 1..4), host buffers.
   Equivalence: 50 optimizer steps (gradient accumulation 2, a dynamic loss scaler with one injected overflow, global
   norm clipping, AdamW with two parameter groups) of a model in 7 units equal the unsharded run — DDP's reducer over
   the whole gradients and one optimizer over the whole parameters — for every strategy (FULL_SHARD, SHARD_GRAD_OP,
   NO_SHARD, HYBRID_SHARD, HYBRID_SHARD_ZERO2), F32 and BF16 gathers, F32 and BF16 reductions, with and without CPU
   offload. The gradients of the test model depend on the gathered parameters of the forward and of the backward
   pass, so a wrong gather shows. Bit for bit wherever the sums have the reducer's order (accel's reduce-scatter and
   all-reduce are rank-order sums: every strategy at every P, except hybrid sharding with both groups > 1, whose sum
   ((x0 + x1) + (x2 + x3)) is associated differently: ≤ 1e-6 relative to the tensor's scale after 50 steps).
   Offload equals no offload bit for bit. Prefetch: the trace of the second step is the expected sequence (forward
   and backward orders, BACKWARD_PRE / BACKWARD_POST / NO_PREFETCH, forward_prefetch), at most two units gathered
   and two gradient buffers live; per-rank memory through the allocator hooks = the shards + at most two units'
   buffers (+ the communicator's scratch). Errors: a unit waited on twice, released unused, a third gather, a rank
   that skips a gather or names another unit (same size or not), a bad unit on one rank: an error on every rank,
   no hang; debug mode fills a released buffer with NaN.
   Checkpoints through accel_ckpt: saved on 4 ranks, continued bit for bit on 2, 3 and 1 (modes save DIR / load DIR);
   the consolidated export through an async save equals the synchronous one (mode export DIR) and survives kill -9
   during the background writes (mode exportloop DIR).
   usage: test_zero3_mpi [basic | save DIR | load DIR | export DIR | exportloop DIR] */
#include "accel.h"
#include "accel_amp.h"
#include "accel_ckpt.h"
#include "accel_collectives.h"
#include "accel_ddp.h"
#include "accel_optim.h"
#include "accel_zero.h"
#include "accel_test.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <mpi.h>

static accel acc;
static int P, R;

/* host allocator hooks that count live bytes, keep the peak, and poison new blocks (0xA5); all_*: host and pinned */
static long long live_bytes, peak_bytes, all_live, all_peak, pinned_live;
static void *count_alloc(size_t n, void *u) {
    size_t *p = (size_t *)malloc(n + 16);
    (void)u;
    if (!p) return NULL;
    p[0] = n;
    live_bytes += (long long)n;
    if (live_bytes > peak_bytes) peak_bytes = live_bytes;
    all_live += (long long)n;
    if (all_live > all_peak) all_peak = all_live;
    memset((unsigned char *)p + 16, 0xA5, n);
    return (unsigned char *)p + 16;
}
static void count_free(void *q, void *u) {
    size_t *p;
    (void)u;
    if (!q) return;
    p = (size_t *)((unsigned char *)q - 16);
    live_bytes -= (long long)p[0];
    all_live -= (long long)p[0];
    free(p);
}
static void quiet_log(void *user, accel_log_level level, const char *msg) { (void)level; (void)msg; (void)user; }
/* pinned allocator hooks that remember the blocks, so that a view can be told to point into pinned memory */
#define MAX_PINNED 64
static unsigned char *pinned_lo[MAX_PINNED], *pinned_hi[MAX_PINNED];
static void *pinned_alloc(size_t n, void *u) {
    unsigned char *p = (unsigned char *)malloc(n);
    int i;
    (void)u;
    for (i = 0; p && i < MAX_PINNED; ++i)
        if (!pinned_lo[i]) { pinned_lo[i] = p; pinned_hi[i] = p + n; break; }
    if (p) {
        pinned_live += (long long)n;
        all_live += (long long)n;
        if (all_live > all_peak) all_peak = all_live;
    }
    return p;
}
static void pinned_free(void *q, void *u) {
    int i;
    (void)u;
    for (i = 0; q && i < MAX_PINNED; ++i)
        if (pinned_lo[i] == (unsigned char *)q) {
            pinned_live -= (long long)(pinned_hi[i] - pinned_lo[i]);
            all_live -= (long long)(pinned_hi[i] - pinned_lo[i]);
            pinned_lo[i] = pinned_hi[i] = NULL;
        }
    free(q);
}
static int in_pinned(const void *q) {
    int i;
    for (i = 0; i < MAX_PINNED; ++i)
        if (pinned_lo[i] && (const unsigned char *)q >= pinned_lo[i] && (const unsigned char *)q < pinned_hi[i])
            return 1;
    return 0;
}

/* ------------------------------------------------------------------------------------------------- the model */
#define NU 7
#define NP 13
/* unit of each parameter, names, shapes: units of different sizes (one smaller than P, one empty tensor, two blocks
   of equal size for the same-size skip check) */
static const int UNIT_OF[NP] = {0, 0, 1, 1, 1, 2, 2, 3, 4, 4, 5, 5, 6};
static const char *NAMES[NP] = {"wte", "wpe", "h.0.w", "h.0.b", "h.0.empty", "h.1.w", "h.1.b", "tiny",
                                "h.2.w", "h.2.b", "h.3.w", "h.3.b", "head"};
static const int64_t SHAPES[NP][2] = {{37, 3}, {5, 2}, {8, 9}, {9, 1}, {0, 4}, {8, 9}, {9, 1}, {2, 1},
                                      {11, 7}, {7, 1}, {11, 7}, {7, 1}, {50, 1}};
static int64_t numel(int p) { return SHAPES[p][0] * SHAPES[p][1]; }
static int unit_first(int u) {
    int p = 0;
    while (p < NP && UNIT_OF[p] < u) ++p;
    return p;
}
static int unit_n(int u) {
    int p, k = 0;
    for (p = 0; p < NP; ++p) k += UNIT_OF[p] == u;
    return k;
}
static float init_value(int p, int64_t e) { return (float)(0.5 * sin(0.3 * (double)e + (double)p)); }

static accel_tensor tensor(int p, void *ptr, accel_dtype dt) {
    accel_tensor t;
    memset(&t, 0, sizeof t);
    t.name = NAMES[p];
    t.ptr = ptr;
    t.dtype = dt;
    t.ndim = 2;
    t.shape[0] = SHAPES[p][0];
    t.shape[1] = SHAPES[p][1];
    return t;
}
static double elem(const void *buf, accel_dtype dt, int64_t e) {
    if (dt == ACCEL_BF16) return accel_bf16_to_f32(((const uint16_t *)buf)[e]);
    return ((const float *)buf)[e];
}
/* buf[e] += g in the buffer's dtype (what a backward kernel does) */
static void accum(void *buf, accel_dtype dt, int64_t e, float g) {
    if (dt == ACCEL_BF16) ((uint16_t *)buf)[e] = accel_f32_to_bf16(accel_bf16_to_f32(((uint16_t *)buf)[e]) + g);
    else ((float *)buf)[e] += g;
}
/* "forward" of unit u: the sum of its parameters as computed (the activation backward uses) */
static float unit_forward(const accel_tensor *w, int n) {
    double s = 0;
    int j;
    int64_t e;
    for (j = 0; j < n; ++j)
        for (e = 0; e < accel_tensor_numel(&w[j]); ++e) s += elem(w[j].ptr, w[j].dtype, e);
    return (float)s;
}
static int solo_grads;
/* "backward" of unit u: gradients (× the loss scale) that depend on the backward's parameters and the forward's
   activation; inf_at: rank 0 writes an Inf into its first element (an overflow) */
static void unit_backward(const accel_tensor *w, const accel_tensor *g, int first, int n, float act, int micro,
                          float scale, int inf) {
    int j;
    int64_t e;
    if (solo_grads && R != 0) return; /* checkpoint modes: rank 0's gradients alone, summed (P-independent sums) */
    for (j = 0; j < n; ++j) {
        int p = first + j;
        for (e = 0; e < accel_tensor_numel(&w[j]); ++e) {
            float v = (float)(0.01 * (p + 1) * sin(0.37 * (double)(e + 1) + 1.3 * R + 0.7 * micro) +
                              0.05 * elem(w[j].ptr, w[j].dtype, e) + 1e-3 * (double)act);
            accum(g[j].ptr, g[j].dtype, e, inf && e == 0 && R == 0 ? INFINITY : v * scale);
        }
    }
}

static accel_optim_group GROUPS[2] = {{8, 0.0, 0.1}, {5, 0.0, 0.0}};
/* offload: the optimizer's state in pinned host memory and its step on the CPU (accel_optim_desc.offload), as an
   offloaded ZeRO-3 model's optimizer is made */
static accel_optim *make_opt(const accel_tensor *p, const accel_tensor *g, const accel_tensor *m, int offload) {
    accel_optim_desc od;
    accel_optim *o = NULL;
    memset(&od, 0, sizeof od);
    od.algorithm = ACCEL_OPTIM_ADAMW;
    od.lr = 1e-2;
    od.params = p; od.grads = g; od.model = m; od.nparams = NP;
    od.groups = GROUPS; od.ngroups = 2;
    od.offload = offload;
    if (accel_optim_create(&acc, &od, &o) != ACCEL_OK) fprintf(stderr, "optim_create: %s\n", accel_last_error(&acc));
    return o;
}
static accel_result make_scaler(accel_amp_scaler *s) {
    accel_amp_scaler_desc sd;
    memset(&sd, 0, sizeof sd);
    sd.init_scale = 1024.0f;
    sd.growth_interval = 3;
    sd.enabled = ACCEL_ON;
    return accel_amp_scaler_init(&acc, s, &sd);
}
#define MAX_NORM 0.05
#define INF_MICRO 21 /* the micro-batch whose gradient overflows on rank 0 */

/* ------------------------------------------------------------------------------- the unsharded reference */
typedef struct refrun {
    float *p[NP], *g32[NP];
    void *g[NP], *m[NP];
    accel_tensor tp[NP], tg[NP], tg32[NP], tm[NP];
    accel_dtype pdt, rdt;
    accel_ddp *red;
    accel_optim *opt;
    accel_amp_scaler sc;
    int skipped;
} refrun;

static int ref_make(refrun *rf, accel_coll *c, accel_dtype pdt, accel_dtype rdt) {
    accel_ddp_desc rd;
    int p;
    int64_t e;
    memset(rf, 0, sizeof *rf);
    rf->pdt = pdt;
    rf->rdt = rdt;
    for (p = 0; p < NP; ++p) {
        int64_t n = numel(p);
        rf->p[p] = (float *)calloc((size_t)n + 1, 4);
        rf->g32[p] = (float *)calloc((size_t)n + 1, 4);
        rf->g[p] = calloc((size_t)n + 1, 4);
        rf->m[p] = calloc((size_t)n + 1, 4);
        for (e = 0; e < n; ++e) rf->p[p][e] = init_value(p, e);
        if (pdt == ACCEL_BF16)
            for (e = 0; e < n; ++e) ((uint16_t *)rf->m[p])[e] = accel_f32_to_bf16(rf->p[p][e]);
        rf->tp[p] = tensor(p, rf->p[p], ACCEL_F32);
        rf->tg[p] = tensor(p, rf->g[p], rdt);
        rf->tg32[p] = tensor(p, rf->g32[p], ACCEL_F32);
        rf->tm[p] = tensor(p, pdt == ACCEL_BF16 ? rf->m[p] : NULL, ACCEL_BF16);
    }
    memset(&rd, 0, sizeof rd);
    rd.bucket_cap_mb = 0.0003; /* several buckets */
    rd.flat = ACCEL_OFF;
    if (accel_ddp_create(c, &rd, &rf->red) != ACCEL_OK || accel_ddp_add(rf->red, rf->tg, NP) != ACCEL_OK ||
        accel_ddp_finalize(rf->red) != ACCEL_OK)
        return 0;
    rf->opt = make_opt(rf->tp, rf->tg32, rf->tm, 0);
    return rf->opt && make_scaler(&rf->sc) == ACCEL_OK;
}
static void ref_free(refrun *rf) {
    int p;
    accel_optim_destroy(rf->opt);
    accel_ddp_destroy(rf->red);
    for (p = 0; p < NP; ++p) { free(rf->p[p]); free(rf->g32[p]); free(rf->g[p]); free(rf->m[p]); }
}
/* the weights the model computes with: the BF16 copy, or the master */
static accel_tensor ref_w(const refrun *rf, int p) {
    return rf->pdt == ACCEL_BF16 ? tensor(p, rf->m[p], ACCEL_BF16) : rf->tp[p];
}
static accel_result ref_micro(refrun *rf, int micro) {
    float act[NU];
    int u, p;
    int64_t e;
    accel_result r = ACCEL_OK;
    float scale = accel_amp_loss_scale(&rf->sc);
    for (u = 0; u < NU; ++u) {
        accel_tensor w[4];
        int j, f = unit_first(u), n = unit_n(u);
        for (j = 0; j < n; ++j) w[j] = ref_w(rf, f + j);
        act[u] = unit_forward(w, n);
    }
    for (u = NU - 1; u >= 0; --u) {
        accel_tensor w[4];
        int j, f = unit_first(u), n = unit_n(u);
        for (j = 0; j < n; ++j) w[j] = ref_w(rf, f + j);
        unit_backward(w, rf->tg + f, f, n, act[u], micro, scale, micro == INF_MICRO && u == 1);
        for (j = n - 1; j >= 0 && r == ACCEL_OK; --j) r = accel_ddp_grad_ready(rf->red, f + j);
    }
    if (r == ACCEL_OK) r = accel_ddp_wait(rf->red);
    if (r != ACCEL_OK || !acc.sync_gradients) return r;
    for (p = 0; p < NP; ++p) /* the F32 gradients the step reads (FSDP casts the reduced gradient to F32) */
        for (e = 0; e < numel(p); ++e) rf->g32[p][e] = (float)elem(rf->g[p], rf->rdt, e);
    {
        int found = 0;
        double norm = 0;
        float coef;
        accel_optim_step_args sa;
        r = accel_amp_unscale_and_check(&rf->sc, rf->tg32, NP, &found);
        if (r == ACCEL_OK && !found) r = accel_amp_grad_norm(&acc, rf->tg32, NP, 2.0, 0, &norm);
        coef = accel_optim_clip_coef(norm, MAX_NORM);
        memset(&sa, 0, sizeof sa);
        sa.clip_coef = &coef;
        if (r == ACCEL_OK && !found) r = accel_optim_step(rf->opt, &sa);
        if (r == ACCEL_OK) r = accel_amp_update(&rf->sc);
        rf->skipped += found;
    }
    for (p = 0; p < NP; ++p) memset(rf->g[p], 0, (size_t)numel(p) * 4);
    return r;
}

/* ------------------------------------------------------------------------------------------ a ZeRO-3 run */
typedef struct z3run {
    accel_zero_fsdp *f;
    accel_optim *opt;
    accel_amp_scaler sc;
    accel_tensor vp[NP], vg[NP], vm[NP], vn[NP];
    float *init[NP];
    int skipped;
    /* trace */
    int ev[4096][2], nev, tracing;
} z3run;

static void on_event(void *user, accel_zero_event ev, int unit) {
    z3run *z = (z3run *)user;
    if (z->tracing && z->nev < 4096) {
        z->ev[z->nev][0] = (int)ev;
        z->ev[z->nev][1] = unit;
        z->nev++;
    }
}

typedef struct z3cfg {
    accel_zero_strategy strategy;
    accel_dtype pdt, rdt;
    accel_toggle offload, fwd_prefetch;
    accel_zero_prefetch bwd_prefetch;
    accel_coll_mesh *mesh;
    int no_average;
} z3cfg;

static int z3_make(z3run *z, accel_coll *c, const z3cfg *cfg) {
    accel_zero_unit units[NU];
    accel_tensor t[NP];
    accel_zero_fsdp_desc fd;
    int u, p;
    int64_t e;
    memset(z, 0, sizeof *z);
    for (p = 0; p < NP; ++p) {
        z->init[p] = (float *)calloc((size_t)numel(p) + 1, 4);
        for (e = 0; e < numel(p); ++e) z->init[p][e] = init_value(p, e);
        t[p] = tensor(p, z->init[p], ACCEL_F32);
    }
    for (u = 0; u < NU; ++u) {
        units[u].name = NULL;
        units[u].params = t + unit_first(u);
        units[u].n = unit_n(u);
    }
    memset(&fd, 0, sizeof fd);
    fd.strategy = cfg->strategy;
    fd.units = units;
    fd.nunits = NU;
    fd.param_dtype = cfg->pdt;
    fd.reduce_dtype = cfg->rdt;
    fd.mesh = cfg->mesh;
    fd.cpu_offload = cfg->offload;
    fd.forward_prefetch = cfg->fwd_prefetch;
    fd.backward_prefetch = cfg->bwd_prefetch;
    fd.no_average = cfg->no_average;
    fd.trace = on_event;
    fd.trace_user = z;
    if (accel_zero_fsdp_create(c, &fd, &z->f) != ACCEL_OK) {
        fprintf(stderr, "[%d] fsdp_create: %s\n", R, accel_last_error(&acc));
        return 0;
    }
    for (p = 0; p < NP; ++p) { free(z->init[p]); z->init[p] = NULL; } /* create copied this rank's shard */
    if (accel_zero_fsdp_views(z->f, ACCEL_ZERO_VIEW_PARAMS, z->vp, NP) != ACCEL_OK ||
        accel_zero_fsdp_views(z->f, ACCEL_ZERO_VIEW_GRADS, z->vg, NP) != ACCEL_OK ||
        accel_zero_fsdp_views(z->f, ACCEL_ZERO_VIEW_MODEL, z->vm, NP) != ACCEL_OK ||
        accel_zero_fsdp_views(z->f, ACCEL_ZERO_VIEW_NORM_GRADS, z->vn, NP) != ACCEL_OK)
        return 0;
    z->opt = make_opt(z->vp, z->vg, z->vm, cfg->offload == ACCEL_ON);
    if (z->opt) { /* the moments live with the shards: pinned host memory under offload, else the optimizer's */
        const accel_tensor *mom = NULL;
        int nm = 0, i;
        AT_EQ_INT(accel_optim_state_tensors(z->opt, &mom, &nm), ACCEL_OK);
        AT_EQ_INT(nm, 2 * NP);
        for (i = 0; i < nm; ++i)
            if (accel_tensor_numel(&mom[i]) > 0)
                AT_CHECK_MSG(in_pinned(mom[i].ptr) == (cfg->offload == ACCEL_ON),
                             "an offloaded model's optimizer state is pinned host memory, else not");
    }
    return z->opt && make_scaler(&z->sc) == ACCEL_OK;
}
static void z3_free(z3run *z) {
    accel_optim_destroy(z->opt);
    accel_zero_fsdp_destroy(z->f);
}

/* One micro-batch: forward over the units, backward in reverse (FSDP's order: gather, compute, release; then the
   gradients' reduction), the step on sync micro-batches. */
static accel_result z3_micro(z3run *z, int micro) {
    float act[NU];
    accel_tensor w[4], g[4];
    int u;
    accel_result r;
    float scale = accel_amp_loss_scale(&z->sc);
    if ((r = accel_zero_fsdp_begin_forward(z->f)) != ACCEL_OK) return r;
    for (u = 0; u < NU; ++u) {
        if ((r = accel_zero_fsdp_wait(z->f, u, w, unit_n(u))) != ACCEL_OK) return r;
        act[u] = unit_forward(w, unit_n(u));
        if ((r = accel_zero_fsdp_release(z->f, u)) != ACCEL_OK) return r;
    }
    if ((r = accel_zero_fsdp_begin_backward(z->f)) != ACCEL_OK) return r;
    for (u = NU - 1; u >= 0; --u) {
        if ((r = accel_zero_fsdp_wait(z->f, u, w, unit_n(u))) != ACCEL_OK) return r;
        if ((r = accel_zero_fsdp_grads(z->f, u, g, unit_n(u))) != ACCEL_OK) return r;
        unit_backward(w, g, unit_first(u), unit_n(u), act[u], micro, scale, micro == INF_MICRO && u == 1);
        if ((r = accel_zero_fsdp_release(z->f, u)) != ACCEL_OK) return r;
        if ((r = accel_zero_fsdp_reduce_scatter(z->f, u)) != ACCEL_OK) return r;
    }
    if ((r = accel_zero_fsdp_end_backward(z->f)) != ACCEL_OK) return r;
    if (!acc.sync_gradients) return ACCEL_OK;
    {
        int found = 0;
        double norm = 0;
        float coef;
        accel_optim_step_args sa;
        r = accel_amp_unscale_and_check(&z->sc, z->vg, NP, &found);
        if (r == ACCEL_OK && !found) r = accel_amp_grad_norm(&acc, z->vn, NP, 2.0, ACCEL_AMP_CLIP_SHARDED, &norm);
        coef = accel_optim_clip_coef(norm, MAX_NORM);
        memset(&sa, 0, sizeof sa);
        sa.clip_coef = &coef;
        if (r == ACCEL_OK && !found) r = accel_optim_step(z->opt, &sa);
        if (r == ACCEL_OK) r = accel_amp_update(&z->sc);
        z->skipped += found;
    }
    if (r == ACCEL_OK) r = accel_zero_fsdp_zero_grad(z->f);
    return r;
}

/* The whole F32 parameters of a run, from every rank's pieces (an OR of disjoint bit patterns; replicas agree). */
static void z3_full(z3run *z, float **out) {
    accel_tensor_piece pc[NP];
    int p;
    for (p = 0; p < NP; ++p) memset(out[p], 0, (size_t)numel(p) * 4 + 4);
    AT_EQ_INT(accel_zero_fsdp_pieces(z->f, ACCEL_ZERO_VIEW_PARAMS, 1, pc, NP), ACCEL_OK);
    for (p = 0; p < NP; ++p) {
        AT_EQ_INT(pc[p].tensor, p);
        AT_CHECK(pc[p].offset >= 0 && pc[p].offset + pc[p].count <= numel(p));
        if (pc[p].count) memcpy(out[p] + pc[p].offset, pc[p].ptr, (size_t)pc[p].count * 4);
        MPI_Allreduce(MPI_IN_PLACE, out[p], (int)numel(p), MPI_UINT32_T, MPI_BOR, MPI_COMM_WORLD);
    }
}

/* the largest difference relative to the tensor's scale (as test_zero_mpi), and whether all bits agree */
static double compare(float **a, float **b, int *bitwise) {
    double worst = 0;
    int p;
    int64_t e;
    *bitwise = 1;
    for (p = 0; p < NP; ++p) {
        double scale = 1e-30;
        for (e = 0; e < numel(p); ++e)
            if (fabs((double)b[p][e]) > scale) scale = fabs((double)b[p][e]);
        for (e = 0; e < numel(p); ++e) {
            double d = fabs((double)a[p][e] - (double)b[p][e]) / scale;
            if (memcmp(&a[p][e], &b[p][e], 4) != 0) *bitwise = 0;
            if (d > worst) worst = d;
        }
    }
    return worst;
}

/* 100 micro-batches (accumulation 2: 50 optimizer steps) of a ZeRO-3 run and of the reference; the final parameters
   compared. exact: bit for bit required. out (optional): the final parameters. */
static void equivalence(accel_coll *c, const z3cfg *cfg, int exact, float **out) {
    refrun rf;
    z3run *z = (z3run *)calloc(1, sizeof *z);
    float *full[NP];
    int mb, p, bw;
    int64_t steps = -1;
    double rel;
    char ctx[160];
    snprintf(ctx, sizeof ctx, "%s param %s reduce %s%s%s", accel_zero_strategy_name(cfg->strategy),
             accel_dtype_name(cfg->pdt), accel_dtype_name(cfg->rdt), cfg->offload == ACCEL_ON ? " offload" : "",
             cfg->mesh ? " (mesh)" : "");
    at_context = ctx;
    AT_CHECK(ref_make(&rf, c, cfg->pdt, cfg->rdt));
    AT_CHECK(z3_make(z, cfg->mesh ? accel_coll_mesh_comm(cfg->mesh, ACCEL_COLL_MESH_DP_CP) : c, cfg));
    for (mb = 0; mb < 100; ++mb) {
        accel_accumulate_begin(&acc);
        AT_EQ_INT(ref_micro(&rf, mb), ACCEL_OK);
        AT_EQ_INT(z3_micro(z, mb), ACCEL_OK);
        accel_accumulate_end(&acc);
    }
    AT_EQ_INT(accel_optim_step_count(z->opt, &steps), ACCEL_OK);
    AT_EQ_INT((int)steps, 49); /* one step skipped: the overflow */
    AT_EQ_INT(z->skipped, 1);
    AT_EQ_INT(rf.skipped, 1);
    for (p = 0; p < NP; ++p) full[p] = (float *)malloc((size_t)numel(p) * 4 + 4);
    z3_full(z, full);
    rel = compare(full, rf.p, &bw);
    if (exact) AT_CHECK_MSG(bw, "ZeRO-3 parameters differ from the unsharded run's bits");
    AT_CHECK_MSG(rel <= 1e-6, "ZeRO-3 parameters beyond 1e-6 relative to their tensor's scale");
    if (R == 0)
        printf("zero3 np%d %s: after 50 steps max rel %.3g (%s)\n", P, ctx, rel, bw ? "bit-identical" : "not bitwise");
    for (p = 0; p < NP; ++p) {
        if (out) memcpy(out[p], full[p], (size_t)numel(p) * 4);
        free(full[p]);
    }
    z3_free(z);
    free(z);
    ref_free(&rf);
}

static z3cfg cfg_of(accel_zero_strategy s, accel_dtype pdt, accel_dtype rdt) {
    z3cfg k;
    memset(&k, 0, sizeof k);
    k.strategy = s;
    k.pdt = pdt;
    k.rdt = rdt;
    k.offload = ACCEL_OFF;
    k.fwd_prefetch = ACCEL_ON;
    k.bwd_prefetch = ACCEL_ZERO_BACKWARD_PRE;
    return k;
}

static void strategies(accel_coll *c) {
    float *a[NP], *b[NP];
    z3cfg k;
    int p, bw;
    for (p = 0; p < NP; ++p) {
        a[p] = (float *)malloc((size_t)numel(p) * 4 + 4);
        b[p] = (float *)malloc((size_t)numel(p) * 4 + 4);
    }
    k = cfg_of(ACCEL_ZERO_FULL_SHARD, ACCEL_F32, ACCEL_F32);
    equivalence(c, &k, 1, a);
    k.offload = ACCEL_ON; /* offload equals no offload, bit for bit */
    equivalence(c, &k, 1, b);
    at_context = "offload";
    compare(a, b, &bw);
    AT_CHECK_MSG(bw, "offload differs from no offload");
    k = cfg_of(ACCEL_ZERO_FULL_SHARD, ACCEL_BF16, ACCEL_F32);
    equivalence(c, &k, 1, NULL);
    k = cfg_of(ACCEL_ZERO_FULL_SHARD, ACCEL_BF16, ACCEL_BF16);
    k.bwd_prefetch = ACCEL_ZERO_BACKWARD_POST;
    equivalence(c, &k, 1, a);
    k.offload = ACCEL_ON;
    k.bwd_prefetch = ACCEL_ZERO_NO_PREFETCH;
    k.fwd_prefetch = ACCEL_OFF;
    equivalence(c, &k, 1, b);
    at_context = "offload bf16";
    compare(a, b, &bw);
    AT_CHECK_MSG(bw, "offload differs from no offload (BF16)");
    k = cfg_of(ACCEL_ZERO_SHARD_GRAD_OP, ACCEL_BF16, ACCEL_F32);
    equivalence(c, &k, 1, NULL);
    k = cfg_of(ACCEL_ZERO_NO_SHARD, ACCEL_BF16, ACCEL_BF16);
    equivalence(c, &k, 1, NULL);
    {   /* hybrid sharding over a mesh: every factorization of P into dp_replicate x dp_shard */
        int rep;
        for (rep = 1; rep <= P; ++rep) {
            accel_coll_mesh_desc md;
            accel_coll_mesh *mesh = NULL;
            if (P % rep) continue;
            memset(&md, 0, sizeof md);
            md.dp_replicate_size = rep;
            md.dp_shard_size = P / rep;
            AT_EQ_INT(accel_coll_mesh_create(c, &md, &mesh), ACCEL_OK);
            /* both groups > 1: ((x0 + x1) + (x2 + x3)) against the reducer's ((x0 + x1) + x2) + x3, F32 weights
               (a BF16 forward would turn a last-bit difference of a master weight into a BF16 ulp of the next
               gradients) */
            k = cfg_of(ACCEL_ZERO_HYBRID_SHARD, rep == 1 || rep == P ? ACCEL_BF16 : ACCEL_F32, ACCEL_F32);
            k.mesh = mesh;
            equivalence(c, &k, rep == 1 || rep == P, NULL);
            k.strategy = ACCEL_ZERO_HYBRID_SHARD_ZERO2;
            k.offload = ACCEL_ON;
            equivalence(c, &k, rep == 1 || rep == P, NULL);
            accel_coll_mesh_destroy(mesh);
        }
    }
    for (p = 0; p < NP; ++p) { free(a[p]); free(b[p]); }
}

/* ------------------------------------------------------------------------------- prefetch, lifetime, memory */
static int count_ev(const z3run *z, accel_zero_event ev) {
    int i, k = 0;
    for (i = 0; i < z->nev; ++i) k += z->ev[i][0] == (int)ev;
    return k;
}
/* the units of the events of one kind, in order, as a string "0 1 2" */
static void ev_units(const z3run *z, accel_zero_event ev, int from, int to, char *out, size_t cap) {
    size_t n = 0;
    int i;
    out[0] = 0;
    for (i = from; i < to && n + 8 < cap; ++i)
        if (z->ev[i][0] == (int)ev) n += (size_t)snprintf(out + n, cap - n, "%s%d", n ? " " : "", z->ev[i][1]);
}
static int find_ev(const z3run *z, accel_zero_event ev, int unit, int from) {
    int i;
    for (i = from; i < z->nev; ++i)
        if (z->ev[i][0] == (int)ev && z->ev[i][1] == unit) return i;
    return -1;
}

static void prefetch_order(accel_coll *c) {
    z3run *z = (z3run *)calloc(1, sizeof *z);
    z3cfg k = cfg_of(ACCEL_ZERO_FULL_SHARD, ACCEL_BF16, ACCEL_BF16);
    accel_zero_fsdp_stats st;
    char got[256];
    int mb, i, pos_ok, mark = 0, end;
    at_context = "prefetch order";
    AT_CHECK(z3_make(z, c, &k));
    for (mb = 0; mb < 4; ++mb) { /* 2 steps; traced: micro-batches 2 (accumulation) and 3 (the reducing one) */
        accel_accumulate_begin(&acc);
        z->tracing = mb >= 2;
        if (mb == 3) mark = z->nev;
        AT_EQ_INT(z3_micro(z, mb), ACCEL_OK);
        accel_accumulate_end(&acc);
    }
    end = z->nev;
    z->nev = mark; /* micro-batch 2 alone */
    if (P > 1) {
        /* forward: begin_forward prefetches unit 0, wait(u) prefetches u + 1; backward: begin_backward prefetches
           6, wait(u) (BACKWARD_PRE) prefetches u - 1; nothing is gathered without a prefetch */
        ev_units(z, ACCEL_ZERO_EV_PREFETCH, 0, z->nev, got, sizeof got);
        AT_EQ_STR(got, "0 1 2 3 4 5 6 6 5 4 3 2 1 0");
        AT_EQ_INT(count_ev(z, ACCEL_ZERO_EV_GATHER), 0);
        /* each prefetch of u + 1 comes before u's release (it overlaps u's compute) */
        pos_ok = 1;
        for (i = 0; i + 1 < NU; ++i) {
            int pf = find_ev(z, ACCEL_ZERO_EV_PREFETCH, i + 1, 0), rel = find_ev(z, ACCEL_ZERO_EV_RELEASE, i, 0);
            if (!(pf >= 0 && rel >= 0 && pf < rel)) pos_ok = 0;
        }
        AT_CHECK_MSG(pos_ok, "a forward prefetch did not overlap the previous unit");
    }
    /* micro-batch 2 is an accumulation step: every unit held, nothing reduced */
    AT_EQ_INT(count_ev(z, ACCEL_ZERO_EV_HOLD), NU);
    AT_EQ_INT(count_ev(z, ACCEL_ZERO_EV_REDUCE), 0);
    AT_EQ_INT(accel_zero_fsdp_get_stats(z->f, &st), ACCEL_OK);
    AT_CHECK_MSG(st.peak_gathers <= 2, "more than two units gathered at once");
    AT_EQ_INT(st.live_gathers, 0);
    /* the reducing micro-batch: units reduce in backward order, one in flight */
    ev_units(z, ACCEL_ZERO_EV_REDUCE, mark, end, got, sizeof got);
    AT_EQ_STR(got, "6 5 4 3 2 1 0");
    ev_units(z, ACCEL_ZERO_EV_REDUCED, mark, end, got, sizeof got);
    AT_EQ_STR(got, "6 5 4 3 2 1 0");
    z->nev = end;
    if (P > 1) { /* reduction u finished before reduction u - 1 started: at most one in flight */
        pos_ok = 1;
        for (i = NU - 1; i >= 1; --i) {
            int done = find_ev(z, ACCEL_ZERO_EV_REDUCED, i, mark), next = find_ev(z, ACCEL_ZERO_EV_REDUCE, i - 1, mark);
            if (!(done >= 0 && next >= 0 && done < next)) pos_ok = 0;
        }
        AT_CHECK_MSG(pos_ok, "two reductions were in flight");
    }
    AT_EQ_INT(accel_zero_fsdp_get_stats(z->f, &st), ACCEL_OK);
    AT_EQ_INT(st.live_grads, 0);
    z3_free(z);
    /* BACKWARD_POST: the unit before u is gathered when u's gradients are reduced, not when u is waited on;
       NO_PREFETCH and no forward prefetch: every gather is on demand */
    k.bwd_prefetch = ACCEL_ZERO_BACKWARD_POST;
    k.fwd_prefetch = ACCEL_OFF;
    AT_CHECK(z3_make(z, c, &k));
    for (mb = 0; mb < 3; ++mb) {
        accel_accumulate_begin(&acc);
        z->tracing = mb == 2;
        AT_EQ_INT(z3_micro(z, mb), ACCEL_OK);
        accel_accumulate_end(&acc);
    }
    if (P > 1) {
        ev_units(z, ACCEL_ZERO_EV_PREFETCH, 0, z->nev, got, sizeof got);
        AT_EQ_STR(got, "6 5 4 3 2 1 0"); /* backward only (begin_backward, then each reduce_scatter) */
        ev_units(z, ACCEL_ZERO_EV_GATHER, 0, z->nev, got, sizeof got);
        AT_EQ_STR(got, "0 1 2 3 4 5 6");  /* the forward, on demand */
        pos_ok = 1;
        for (i = NU - 1; i >= 1; --i) { /* the prefetch of i - 1 follows wait(i) (and i's release) */
            int w = find_ev(z, ACCEL_ZERO_EV_WAIT, i, find_ev(z, ACCEL_ZERO_EV_PREFETCH, 6, 0));
            int pf = find_ev(z, ACCEL_ZERO_EV_PREFETCH, i - 1, 0);
            if (!(w >= 0 && pf > w)) pos_ok = 0;
        }
        AT_CHECK_MSG(pos_ok, "BACKWARD_POST prefetched before the unit's gradients");
    }
    z3_free(z);
    k.bwd_prefetch = ACCEL_ZERO_NO_PREFETCH;
    AT_CHECK(z3_make(z, c, &k));
    for (mb = 0; mb < 3; ++mb) {
        accel_accumulate_begin(&acc);
        z->tracing = mb == 2;
        AT_EQ_INT(z3_micro(z, mb), ACCEL_OK);
        accel_accumulate_end(&acc);
    }
    if (P > 1) {
        AT_EQ_INT(count_ev(z, ACCEL_ZERO_EV_PREFETCH), 0);
        AT_EQ_INT(count_ev(z, ACCEL_ZERO_EV_GATHER), 2 * NU);
    }
    z3_free(z);
    /* SHARD_GRAD_OP: gathered once per micro-batch (kept from forward to backward) */
    k = cfg_of(ACCEL_ZERO_SHARD_GRAD_OP, ACCEL_BF16, ACCEL_BF16);
    AT_CHECK(z3_make(z, c, &k));
    for (mb = 0; mb < 3; ++mb) {
        accel_accumulate_begin(&acc);
        z->tracing = mb == 2;
        AT_EQ_INT(z3_micro(z, mb), ACCEL_OK);
        accel_accumulate_end(&acc);
    }
    if (P > 1) AT_EQ_INT(count_ev(z, ACCEL_ZERO_EV_PREFETCH) + count_ev(z, ACCEL_ZERO_EV_GATHER), NU);
    AT_EQ_INT(accel_zero_fsdp_get_stats(z->f, &st), ACCEL_OK);
    AT_EQ_INT(st.live_gathers, 0);
    z3_free(z);
    free(z);
}

/* FSDP's rule (root kept, two units rotate): a trainer that holds the root (unit 0: embeddings and the final norm
   + tied LM head) from its first use to its last in each pass, as GPT-2's do, still gets every block's gather in
   flight while the block before it computes (forward_prefetch, BACKWARD_PRE): the root's buffer does not take one
   of the two places. Checked on the events of a later micro-batch: every unit's gather is a prefetch, each issued
   before the previous unit's release; at most the root + two units live (a third rotating gather is an error);
   the gather pool's peak is the estimate's gather_buffers (the root's + the two largest other units'). */
static accel_result root_held_micro(z3run *z) {
    accel_tensor w0[4], w[4], g0[4], g[4];
    accel_result r;
    int u;
    if ((r = accel_zero_fsdp_begin_forward(z->f)) != ACCEL_OK) return r;
    if ((r = accel_zero_fsdp_wait(z->f, 0, w0, unit_n(0))) != ACCEL_OK) return r;
    for (u = 1; u < NU; ++u) {
        if ((r = accel_zero_fsdp_wait(z->f, u, w, unit_n(u))) != ACCEL_OK) return r;
        if ((r = accel_zero_fsdp_release(z->f, u)) != ACCEL_OK) return r;
    }
    if ((r = accel_zero_fsdp_release(z->f, 0)) != ACCEL_OK) return r;
    if ((r = accel_zero_fsdp_begin_backward(z->f)) != ACCEL_OK) return r;
    if ((r = accel_zero_fsdp_wait(z->f, 0, w0, unit_n(0))) != ACCEL_OK) return r;
    if ((r = accel_zero_fsdp_grads(z->f, 0, g0, unit_n(0))) != ACCEL_OK) return r;
    for (u = NU - 1; u >= 1; --u) {
        if ((r = accel_zero_fsdp_wait(z->f, u, w, unit_n(u))) != ACCEL_OK) return r;
        if ((r = accel_zero_fsdp_grads(z->f, u, g, unit_n(u))) != ACCEL_OK) return r;
        if ((r = accel_zero_fsdp_release(z->f, u)) != ACCEL_OK) return r;
        if ((r = accel_zero_fsdp_reduce_scatter(z->f, u)) != ACCEL_OK) return r;
    }
    if ((r = accel_zero_fsdp_release(z->f, 0)) != ACCEL_OK) return r;
    if ((r = accel_zero_fsdp_reduce_scatter(z->f, 0)) != ACCEL_OK) return r;
    if ((r = accel_zero_fsdp_end_backward(z->f)) != ACCEL_OK) return r;
    return accel_zero_fsdp_zero_grad(z->f);
}
static void root_held(accel_coll *c) {
    z3run *z = (z3run *)calloc(1, sizeof *z);
    z3cfg k = cfg_of(ACCEL_ZERO_FULL_SHARD, ACCEL_BF16, ACCEL_F32);
    accel_zero_fsdp_stats st;
    accel_zero_fsdp_memory em;
    accel_zero_fsdp_desc rd;
    accel_zero_unit units[NU];
    accel_tensor t[NP], w0[4], w[4];
    char got[256];
    int mb, u, p, pos_ok;
    at_context = "root held, two units rotate";
    AT_CHECK(z3_make(z, c, &k));
    for (mb = 0; mb < 3; ++mb) { /* outside accumulate: every micro-batch reduces; the third one traced */
        z->tracing = mb == 2;
        AT_EQ_INT(root_held_micro(z), ACCEL_OK);
    }
    AT_EQ_INT(accel_zero_fsdp_get_stats(z->f, &st), ACCEL_OK);
    if (P > 1) {
        ev_units(z, ACCEL_ZERO_EV_PREFETCH, 0, z->nev, got, sizeof got);
        AT_EQ_STR(got, "0 1 2 3 4 5 6 0 6 5 4 3 2 1");
        AT_EQ_INT(count_ev(z, ACCEL_ZERO_EV_GATHER), 0);
        pos_ok = 1; /* forward: u + 1's gather issued before u's release (while u computes) */
        for (u = 0; u + 1 < NU; ++u) {
            int pf = find_ev(z, ACCEL_ZERO_EV_PREFETCH, u + 1, 0), rel = find_ev(z, ACCEL_ZERO_EV_RELEASE, u, 0);
            if (!(pf >= 0 && rel >= 0 && pf < rel)) pos_ok = 0;
        }
        AT_CHECK_MSG(pos_ok, "a forward prefetch did not overlap the previous unit with the root held");
        pos_ok = 1; /* backward: u - 1's gather issued before u's release */
        for (u = NU - 1; u >= 2; --u) {
            int bw = find_ev(z, ACCEL_ZERO_EV_PREFETCH, 0, 1); /* begin_backward's (the forward's is event 0) */
            int pf = find_ev(z, ACCEL_ZERO_EV_PREFETCH, u - 1, bw), rel = find_ev(z, ACCEL_ZERO_EV_RELEASE, u, bw);
            if (!(bw >= 0 && pf >= 0 && rel >= 0 && pf < rel)) pos_ok = 0;
        }
        AT_CHECK_MSG(pos_ok, "a backward prefetch did not overlap the previous unit with the root held");
        AT_EQ_INT(st.peak_gathers, 3); /* the root + two */
    }
    AT_EQ_INT(st.live_gathers, 0);
    /* the gather pool's peak is the estimate's figure: the root's buffer + the two largest other units' */
    AT_EQ_INT(accel_zero_fsdp_get_desc(z->f, &rd), ACCEL_OK);
    for (p = 0; p < NP; ++p) t[p] = tensor(p, NULL, ACCEL_F32);
    for (u = 0; u < NU; ++u) {
        units[u].name = NULL;
        units[u].params = t + unit_first(u);
        units[u].n = unit_n(u);
    }
    rd.units = units;
    AT_EQ_INT(accel_zero_fsdp_estimate(&acc, &rd, P, 0, ACCEL_F32, 0, &em), ACCEL_OK);
    AT_EQ_INT((long long)st.peak_gather_bytes, (long long)em.gather_buffers);
    if (P > 1) { /* with the root and two units live, a third unit's gather is refused on every rank */
        AT_EQ_INT(accel_zero_fsdp_wait(z->f, 0, w0, unit_n(0)), ACCEL_OK);
        AT_EQ_INT(accel_zero_fsdp_wait(z->f, 1, w, unit_n(1)), ACCEL_OK);
        AT_EQ_INT(accel_zero_fsdp_gather(z->f, 2), ACCEL_OK);
        AT_EQ_INT(accel_zero_fsdp_gather(z->f, 3), ACCEL_ERR_STATE);
        AT_CONTAINS(accel_last_error(&acc), "besides the root");
        AT_EQ_INT(accel_zero_fsdp_release(z->f, 1), ACCEL_OK);
        AT_EQ_INT(accel_zero_fsdp_wait(z->f, 2, w, unit_n(2)), ACCEL_OK);
        AT_EQ_INT(accel_zero_fsdp_release(z->f, 2), ACCEL_OK);
        AT_EQ_INT(accel_zero_fsdp_release(z->f, 0), ACCEL_OK);
    }
    z3_free(z);
    free(z);
    at_context = "";
}

/* One micro-batch of a model of K one-tensor units without compute: forward (wait, release), backward (wait, grads,
   release, reduce_scatter), end_backward. */
static void one_pass(accel_zero_fsdp *f, int K) {
    accel_tensor w[1], g[1];
    int u;
    AT_EQ_INT(accel_zero_fsdp_begin_forward(f), ACCEL_OK);
    for (u = 0; u < K; ++u) {
        AT_EQ_INT(accel_zero_fsdp_wait(f, u, w, 1), ACCEL_OK);
        AT_EQ_INT(accel_zero_fsdp_release(f, u), ACCEL_OK);
    }
    AT_EQ_INT(accel_zero_fsdp_begin_backward(f), ACCEL_OK);
    for (u = K - 1; u >= 0; --u) {
        AT_EQ_INT(accel_zero_fsdp_wait(f, u, w, 1), ACCEL_OK);
        AT_EQ_INT(accel_zero_fsdp_grads(f, u, g, 1), ACCEL_OK);
        AT_EQ_INT(accel_zero_fsdp_release(f, u), ACCEL_OK);
        AT_EQ_INT(accel_zero_fsdp_reduce_scatter(f, u), ACCEL_OK);
    }
    AT_EQ_INT(accel_zero_fsdp_end_backward(f), ACCEL_OK);
}

/* Per-rank memory through the host allocator: the shards plus at most the root's and two units' gather buffers and
   two gradient buffers. A model of 12 equal blocks (the case the bound is about) with BF16 gathers and F32
   reductions. */
static void memory(accel_coll *c) {
    enum { K = 12, E = 40000 };
    float *init = (float *)calloc(E, 4);
    accel_tensor t[K];
    accel_zero_unit units[K];
    accel_zero_fsdp_desc fd;
    accel_zero_fsdp *f = NULL;
    accel_zero_fsdp_stats st;
    long long base, after_create, peak, S = (E + P - 1) / P;
    long long shards, unit_gather = (long long)P * S * 2, unit_grad = (long long)P * S * 4 + S * 4, bound;
    int u, mb;
    at_context = "memory";
    for (u = 0; u < K; ++u) {
        t[u] = at_vec("w", init, ACCEL_F32, E);
        units[u].name = NULL;
        units[u].params = &t[u];
        units[u].n = 1;
    }
    memset(&fd, 0, sizeof fd);
    fd.strategy = ACCEL_ZERO_FULL_SHARD;
    fd.units = units;
    fd.nunits = K;
    fd.param_dtype = ACCEL_BF16;
    fd.reduce_dtype = ACCEL_F32;
    fd.forward_prefetch = ACCEL_ON;
    base = live_bytes;
    AT_EQ_INT(accel_zero_fsdp_create(c, &fd, &f), ACCEL_OK);
    after_create = live_bytes - base;
    shards = (long long)K * S * (4 + 4 + 2);
    AT_EQ_INT(accel_zero_fsdp_get_stats(f, &st), ACCEL_OK);
    AT_EQ_INT((long long)st.shard_bytes, shards);
    /* the shards, and bookkeeping under 16 KiB */
    AT_CHECK(after_create >= shards && after_create <= shards + 16384);
    peak_bytes = live_bytes;
    for (mb = 0; mb < 4 || !acc.sync_gradients; ++mb) { /* ends after a reducing micro-batch */
        accel_accumulate_begin(&acc);
        one_pass(f, K);
        accel_accumulate_end(&acc);
    }
    peak = peak_bytes - base;
    AT_EQ_INT(accel_zero_fsdp_get_stats(f, &st), ACCEL_OK);
    AT_CHECK(st.peak_gathers <= 2);
    /* no_sync (gradient_accumulation_steps 2) holds every unit's gradients between micro-batches: FSDP's no_sync
       memory; the sync micro-batches then reduce them one at a time */
    AT_EQ_INT(st.peak_grads, K);
    /* the root's gather buffer (unit 0, made once and kept) + two rotating ones */
    bound = shards + (P > 1 ? 3 * unit_gather : 0) + (long long)K * (P > 1 ? unit_grad : (long long)S * 4);
    /* + the reduce-scatter's scratch (P - 1 blocks of S) and the collective's bookkeeping */
    AT_CHECK_MSG(peak <= bound + (long long)(P - 1) * (S + 1) * 4 + 65536, "more than the shards + root + two units");
    {   /* the estimate states the same bytes: the shards as allocated, the bound computed by hand above */
        accel_zero_fsdp_memory em;
        AT_EQ_INT(accel_zero_fsdp_estimate(&acc, &fd, P, 2, ACCEL_F32, 1, &em), ACCEL_OK);
        AT_EQ_INT((long long)em.shards, (long long)st.shard_bytes);
        AT_EQ_INT((long long)em.optimizer, (long long)K * S * 8);
        AT_EQ_INT((long long)(em.shards + em.gather_buffers + em.grad_buffers), bound);
        AT_EQ_INT((long long)em.unsharded, (long long)K * E * (4 + 4 + 2 + 8));
        fd.strategy = ACCEL_ZERO_SHARD_GRAD_OP; /* every unit stays gathered from forward to backward */
        AT_EQ_INT(accel_zero_fsdp_estimate(&acc, &fd, P, 0, ACCEL_F32, 0, &em), ACCEL_OK);
        AT_EQ_INT((long long)em.gather_buffers, P > 1 ? (long long)K * unit_gather : 0);
        fd.strategy = ACCEL_ZERO_FULL_SHARD;
        AT_EQ_INT(accel_zero_fsdp_estimate(&acc, &fd, 0, 0, ACCEL_F32, 0, &em), ACCEL_ERR_INVALID_ARGUMENT);
        AT_CONTAINS(accel_last_error(&acc), "dp_shard 0");
    }
    if (R == 0)
        printf("zero3 np%d memory (accumulation, no_sync): peak %lld bytes, shards %lld, bound %lld (%.3f)\n", P, peak,
               shards, bound, (double)peak / (double)bound);
    accel_zero_fsdp_destroy(f);
    /* every micro-batch reduces (outside accumulate, after a sync step): the root's and two units' gather buffers
       and two gradient buffers at most */
    AT_CHECK(accel_should_reduce(&acc));
    AT_EQ_INT(accel_zero_fsdp_create(c, &fd, &f), ACCEL_OK);
    peak_bytes = live_bytes;
    for (mb = 0; mb < 2; ++mb) { /* outside accumulate: every micro-batch reduces */
        one_pass(f, K);
        AT_EQ_INT(accel_zero_fsdp_zero_grad(f), ACCEL_OK);
    }
    peak = peak_bytes - base;
    AT_EQ_INT(accel_zero_fsdp_get_stats(f, &st), ACCEL_OK);
    AT_CHECK(st.peak_gathers <= 2);
    AT_CHECK(st.peak_grads <= 2);
    bound = shards + (P > 1 ? 3 * unit_gather + 2 * unit_grad : 2LL * S * 4);
    AT_CHECK_MSG(peak <= bound + (long long)(P - 1) * (S + 1) * 4 + 65536, "more than the shards + root + two units");
    AT_CHECK(peak >= shards);
    {
        accel_zero_fsdp_memory em;
        AT_EQ_INT(accel_zero_fsdp_estimate(&acc, &fd, P, 0, ACCEL_F32, 0, &em), ACCEL_OK);
        AT_EQ_INT((long long)em.total, bound);
    }
    if (R == 0)
        printf("zero3 np%d memory (every micro-batch reduces): peak %lld bytes = shards %lld + buffers %lld; bound "
               "shards + root + two units %lld (%.3f)\n", P, peak, shards, peak - shards, bound,
               (double)peak / (double)bound);
    accel_zero_fsdp_destroy(f);
    free(init);
}

/* ----------------------------------------------------------------------------------------------- errors */
static void errors(accel_coll *c) {
    z3run *z = (z3run *)calloc(1, sizeof *z);
    z3cfg k = cfg_of(ACCEL_ZERO_FULL_SHARD, ACCEL_BF16, ACCEL_F32);
    accel_tensor w[4], w2[4];
    accel_result r;
    at_context = "errors";
    AT_CHECK(z3_make(z, c, &k));
    /* lifetime: a unit waited twice without release, a release of a unit not in use */
    AT_EQ_INT(accel_zero_fsdp_wait(z->f, 1, w, 3), ACCEL_OK);
    AT_EQ_INT(accel_zero_fsdp_wait(z->f, 1, w2, 3), ACCEL_ERR_STATE);
    AT_CONTAINS(accel_last_error(&acc), "in use already");
    AT_EQ_INT(accel_zero_fsdp_release(z->f, 1), ACCEL_OK);
    AT_EQ_INT(accel_zero_fsdp_release(z->f, 1), ACCEL_ERR_STATE);
    AT_CONTAINS(accel_last_error(&acc), "not in use");
    /* a third unit gathered while two besides the root are live: an error on every rank (the state is the same
       everywhere) */
    AT_EQ_INT(accel_zero_fsdp_wait(z->f, 0, w, 2), ACCEL_OK);
    AT_EQ_INT(accel_zero_fsdp_gather(z->f, 2), ACCEL_OK);
    AT_EQ_INT(accel_zero_fsdp_gather(z->f, 4), ACCEL_OK); /* the root does not take a place */
    r = accel_zero_fsdp_gather(z->f, 3);
    AT_EQ_INT(r, P > 1 ? ACCEL_ERR_STATE : ACCEL_OK); /* one process: nothing to gather, no buffer */
    r = accel_zero_fsdp_wait(z->f, 5, w, 2);
    AT_EQ_INT(r, P > 1 ? ACCEL_ERR_STATE : ACCEL_OK);
    if (P == 1) AT_EQ_INT(accel_zero_fsdp_release(z->f, 5), ACCEL_OK);
    AT_EQ_INT(accel_zero_fsdp_wait(z->f, 2, w, 2), ACCEL_OK);
    AT_EQ_INT(accel_zero_fsdp_release(z->f, 2), ACCEL_OK);
    AT_EQ_INT(accel_zero_fsdp_wait(z->f, 4, w, 2), ACCEL_OK);
    AT_EQ_INT(accel_zero_fsdp_release(z->f, 4), ACCEL_OK);
    AT_EQ_INT(accel_zero_fsdp_release(z->f, 0), ACCEL_OK);
    /* reduce_scatter without gradients */
    r = accel_zero_fsdp_reduce_scatter(z->f, 3);
    AT_EQ_INT(r, ACCEL_ERR_STATE);
    AT_CONTAINS(accel_last_error(&acc), "grads(3) first");
    /* a bad unit on the last rank: that rank names it, the others ACCEL_ERR_REMOTE */
    r = accel_zero_fsdp_gather(z->f, R == P - 1 ? 99 : 3);
    if (R == P - 1) {
        AT_EQ_INT(r, ACCEL_ERR_INVALID_ARGUMENT);
        AT_CONTAINS(accel_last_error(&acc), "unit 99 is not a unit");
    } else {
        AT_EQ_INT(r, ACCEL_ERR_REMOTE);
    }
    if (P > 1) {
        /* a rank that names another unit of the same size (h.0 / h.1) at the same call: every rank fails */
        r = accel_zero_fsdp_wait(z->f, R == P - 1 ? 2 : 1, w, unit_n(R == P - 1 ? 2 : 1));
        AT_EQ_INT(r, ACCEL_ERR_MISMATCH);
        AT_CONTAINS(accel_last_error(&acc), "ranks made different calls");
        AT_CONTAINS(accel_last_error(&acc), "wait(unit 2)");
        /* the object is unusable afterwards, on every rank */
        AT_EQ_INT(accel_zero_fsdp_gather(z->f, 1), ACCEL_ERR_STATE);
        z3_free(z);
        /* a rank that skips a gather: the others' gather meets its wait of another size */
        AT_CHECK(z3_make(z, c, &k));
        if (R != 0) AT_EQ_INT(accel_zero_fsdp_gather(z->f, 0), ACCEL_ERR_MISMATCH);
        else AT_EQ_INT(accel_zero_fsdp_wait(z->f, 4, w, 2), ACCEL_ERR_MISMATCH);
        z3_free(z);
        /* a rank that creates with another param_dtype: every rank fails create, naming each rank's settings */
        {
            z3cfg k2 = k;
            int p;
            if (R == P - 1) k2.pdt = ACCEL_F16;
            AT_CHECK(!z3_make(z, c, &k2));
            AT_CONTAINS(accel_last_error(&acc), "ranks gave different models or settings");
            AT_CONTAINS(accel_last_error(&acc), "param F16");
            for (p = 0; p < NP; ++p) free(z->init[p]);
            z3_free(z);
        }
        /* a rank that released a unit the others kept: the next collective call sees different states */
        AT_CHECK(z3_make(z, c, &k));
        AT_EQ_INT(accel_zero_fsdp_wait(z->f, 0, w, 2), ACCEL_OK);
        if (R == 0) AT_EQ_INT(accel_zero_fsdp_release(z->f, 0), ACCEL_OK);
        r = accel_zero_fsdp_gather(z->f, 1);
        AT_EQ_INT(r, ACCEL_ERR_MISMATCH);
        AT_CONTAINS(accel_last_error(&acc), "state");
    }
    z3_free(z);
    free(z);
}

/* Gradients summed over micro-batches in the F32 shard (Accelerate's sync_each_batch, or no accumulation without
   zero_grad between steps): every micro-batch reduces and the shard adds what it already holds; zero_grad starts
   over. Unit sizes that P does not divide (padding to P) and a unit smaller than P. Against a float64 long-hand sum
   over ranks and micro-batches of g/P: within 1e-6 of each tensor's largest gradient (3 micro-batches x 4 ranks of
   F32 adds, each rounding by 2^-24). */
static float each_grad(int r, int m, int p, int64_t e) {
    return (float)(sin(0.11 * (double)e + 0.9 * r + 0.37 * m + (double)p) * (1.0 + p));
}
static void accumulate_each(accel_coll *c) {
    enum { K = 3 };
    static const int64_t SZ[K] = {13, 2, 29};
    float *init[K];
    accel_tensor t[K], w[1], g[1];
    accel_tensor_piece pc[K];
    accel_zero_unit units[K];
    accel_zero_fsdp_desc fd;
    accel_zero_fsdp *f = NULL;
    int u, m, rr, round;
    int64_t e;
    at_context = "accumulate each micro-batch";
    AT_CHECK(accel_should_reduce(&acc)); /* outside accumulate: every backward reduces */
    for (u = 0; u < K; ++u) {
        init[u] = (float *)calloc((size_t)SZ[u], 4);
        t[u] = at_vec("w", init[u], ACCEL_F32, SZ[u]);
        units[u].name = NULL;
        units[u].params = &t[u];
        units[u].n = 1;
    }
    memset(&fd, 0, sizeof fd);
    fd.strategy = ACCEL_ZERO_FULL_SHARD;
    fd.units = units;
    fd.nunits = K;
    fd.param_dtype = ACCEL_F32;
    fd.reduce_dtype = ACCEL_F32;
    AT_EQ_INT(accel_zero_fsdp_create(c, &fd, &f), ACCEL_OK);
    /* round 0: three micro-batches summed; round 1: after zero_grad, one micro-batch (m = 3) alone */
    for (round = 0; round < 2; ++round) {
        int m0 = round == 0 ? 0 : 3, m1 = round == 0 ? 3 : 4;
        for (m = m0; m < m1; ++m) {
            AT_EQ_INT(accel_zero_fsdp_begin_backward(f), ACCEL_OK);
            for (u = K - 1; u >= 0; --u) {
                AT_EQ_INT(accel_zero_fsdp_wait(f, u, w, 1), ACCEL_OK);
                AT_EQ_INT(accel_zero_fsdp_grads(f, u, g, 1), ACCEL_OK);
                for (e = 0; e < SZ[u]; ++e) ((float *)g[0].ptr)[e] += each_grad(R, m, u, e);
                AT_EQ_INT(accel_zero_fsdp_release(f, u), ACCEL_OK);
                AT_EQ_INT(accel_zero_fsdp_reduce_scatter(f, u), ACCEL_OK);
            }
            AT_EQ_INT(accel_zero_fsdp_end_backward(f), ACCEL_OK);
        }
        AT_EQ_INT(accel_zero_fsdp_pieces(f, ACCEL_ZERO_VIEW_GRADS, 0, pc, K), ACCEL_OK);
        for (u = 0; u < K; ++u) {
            double worst = 0, scale = 1e-30;
            double *want = (double *)calloc((size_t)SZ[u], sizeof(double));
            for (e = 0; e < SZ[u]; ++e) {
                for (m = m0; m < m1; ++m)
                    for (rr = 0; rr < P; ++rr) want[e] += (double)each_grad(rr, m, u, e) / P;
                if (fabs(want[e]) > scale) scale = fabs(want[e]);
            }
            AT_EQ_INT(pc[u].tensor, u);
            AT_CHECK(pc[u].offset >= 0 && pc[u].count >= 0 && pc[u].offset + pc[u].count <= SZ[u]);
            for (e = 0; e < pc[u].count; ++e) {
                double d = fabs((double)((const float *)pc[u].ptr)[e] - want[pc[u].offset + e]) / scale;
                if (d > worst) worst = d;
            }
            AT_CHECK_MSG(worst <= 1e-6, "the gradient shard is not the sum over micro-batches and ranks");
            {   /* the pieces of all ranks cover the tensor once */
                long long cnt = pc[u].count;
                MPI_Allreduce(MPI_IN_PLACE, &cnt, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
                AT_EQ_INT((int)cnt, (int)SZ[u]);
            }
            free(want);
        }
        AT_EQ_INT(accel_zero_fsdp_zero_grad(f), ACCEL_OK);
    }
    accel_zero_fsdp_destroy(f);
    for (u = 0; u < K; ++u) free(init[u]);
}

/* Sharded checkpoints: this rank's bytes and every rank's, as accel_ckpt's load_all gets them */
static unsigned char **all_bytes(const unsigned char *mine, size_t n, size_t *sizes) {
    unsigned char **b = (unsigned char **)calloc((size_t)P, sizeof *b);
    long long me = (long long)n, *all = (long long *)calloc((size_t)P, sizeof(long long));
    int q;
    MPI_Allgather(&me, 1, MPI_LONG_LONG, all, 1, MPI_LONG_LONG, MPI_COMM_WORLD);
    for (q = 0; q < P; ++q) {
        int root = q;
        sizes[q] = (size_t)all[q];
        b[q] = (unsigned char *)malloc(sizes[q] + 1);
        if (q == R) memcpy(b[q], mine, n);
        MPI_Bcast(b[q], (int)sizes[q], MPI_BYTE, root, MPI_COMM_WORLD);
    }
    free(all);
    return b;
}
static unsigned char *save_bytes(z3run *z, size_t *n) {
    const accel_tensor *mom = NULL;
    int nm = 0;
    accel_zero_fsdp_state fs;
    unsigned char *b;
    AT_EQ_INT(accel_optim_state_tensors(z->opt, &mom, &nm), ACCEL_OK);
    fs.fsdp = z->f;
    fs.state = mom;
    fs.m = nm;
    *n = 0;
    AT_EQ_INT(accel_zero_fsdp_state_save(&fs, NULL, 0, n), ACCEL_OK);
    b = (unsigned char *)malloc(*n + 1);
    AT_EQ_INT(accel_zero_fsdp_state_save(&fs, b, *n, n), ACCEL_OK);
    return b;
}
static accel_result load_bytes(z3run *z, unsigned char **b, const size_t *sizes, int count) {
    const accel_tensor *mom = NULL;
    int nm = 0;
    accel_zero_fsdp_state fs;
    AT_EQ_INT(accel_optim_state_tensors(z->opt, &mom, &nm), ACCEL_OK);
    fs.fsdp = z->f;
    fs.state = mom;
    fs.m = nm;
    return accel_zero_fsdp_state_load_all(&fs, (const void *const *)b, sizes, count);
}
/* the step counts and hyperparameters (a global file: the whole parameters' sizes), saved from one run and loaded
   into another */
static unsigned char *save_optim(z3run *z, size_t *n) {
    accel_tensor full[NP];
    accel_optim_shard_state ss;
    unsigned char *b;
    AT_EQ_INT(accel_zero_fsdp_full_tensors(z->f, full, NP), ACCEL_OK);
    ss.opt = z->opt;
    ss.full = full;
    *n = 0;
    AT_EQ_INT(accel_optim_shard_state_save(&ss, NULL, 0, n), ACCEL_OK);
    b = (unsigned char *)malloc(*n + 1);
    AT_EQ_INT(accel_optim_shard_state_save(&ss, b, *n, n), ACCEL_OK);
    return b;
}
static void load_optim(z3run *z, const unsigned char *b, size_t n) {
    accel_tensor full[NP];
    accel_optim_shard_state ss;
    AT_EQ_INT(accel_zero_fsdp_full_tensors(z->f, full, NP), ACCEL_OK);
    ss.opt = z->opt;
    ss.full = full;
    AT_EQ_INT(accel_optim_shard_state_load(&ss, b, n), ACCEL_OK);
}
static void free_all(unsigned char **b) {
    int q;
    for (q = 0; q < P; ++q) free(b[q]);
    free(b);
}

/* Save a FULL_SHARD run after 10 steps, load it into NO_SHARD (each rank the whole model; P pieces per tensor
   re-partitioned into one) and from there (replicas save nothing) back into FULL_SHARD: both continuations equal
   the original's 10 further steps bit for bit. Bad checkpoints fail before anything is copied. */
static void checkpoint(accel_coll *c) {
    z3run *a = (z3run *)calloc(1, sizeof *a), *b = (z3run *)calloc(1, sizeof *b), *d = (z3run *)calloc(1, sizeof *d);
    z3cfg ka = cfg_of(ACCEL_ZERO_FULL_SHARD, ACCEL_BF16, ACCEL_F32), kb = ka;
    float *fa[NP], *fb[NP];
    unsigned char *mine, **all, **allb, *ob;
    size_t n, on, *sizes = (size_t *)calloc((size_t)P, sizeof(size_t)), *sizesb = (size_t *)calloc((size_t)P, 8);
    accel_amp_scaler snap;
    int mb, p, bw;
    double rel;
    at_context = "checkpoint";
    kb.strategy = ACCEL_ZERO_NO_SHARD;
    kb.offload = ACCEL_ON; /* B's optimizer steps on the host: its pinned state is loaded, then saved for D */
    for (p = 0; p < NP; ++p) {
        fa[p] = (float *)malloc((size_t)numel(p) * 4 + 4);
        fb[p] = (float *)malloc((size_t)numel(p) * 4 + 4);
    }
    AT_CHECK(z3_make(a, c, &ka));
    for (mb = 0; mb < 20; ++mb) {
        accel_accumulate_begin(&acc);
        AT_EQ_INT(z3_micro(a, mb), ACCEL_OK);
        accel_accumulate_end(&acc);
    }
    mine = save_bytes(a, &n);
    all = all_bytes(mine, n, sizes);
    free(mine);
    ob = save_optim(a, &on);
    snap = a->sc;
    AT_CHECK(z3_make(b, c, &kb));
    load_optim(b, ob, on);
    for (mb = 20; mb < 40; ++mb) {
        accel_accumulate_begin(&acc);
        AT_EQ_INT(z3_micro(a, mb), ACCEL_OK);
        accel_accumulate_end(&acc);
    }
    z3_full(a, fa);
    {   /* consolidated: export A's whole parameters on every rank (equal to its pieces put together), import them
           into a SHARD_GRAD_OP object; a bad tensor on the last rank fails every rank */
        float *ex[NP];
        accel_tensor full[NP];
        z3run *e = (z3run *)calloc(1, sizeof *e);
        z3cfg ke = cfg_of(ACCEL_ZERO_SHARD_GRAD_OP, ACCEL_BF16, ACCEL_F32);
        int ok = 1;
        for (p = 0; p < NP; ++p) {
            ex[p] = (float *)malloc((size_t)numel(p) * 4 + 4);
            full[p] = tensor(p, ex[p], ACCEL_F32);
        }
        if (R == P - 1) full[3].dtype = ACCEL_BF16;
        AT_EQ_INT(accel_zero_fsdp_export(a->f, full, NP), R == P - 1 ? ACCEL_ERR_INVALID_ARGUMENT : ACCEL_ERR_REMOTE);
        if (R == P - 1) AT_CONTAINS(accel_last_error(&acc), "tensor 3 is BF16");
        full[3].dtype = ACCEL_F32;
        AT_EQ_INT(accel_zero_fsdp_export(a->f, full, NP), ACCEL_OK);
        for (p = 0; p < NP; ++p) ok &= !memcmp(ex[p], fa[p], (size_t)numel(p) * 4);
        AT_CHECK_MSG(ok, "export differs from the shards put together");
        AT_CHECK(z3_make(e, c, &ke));
        AT_EQ_INT(accel_zero_fsdp_import(e->f, full, NP), ACCEL_OK);
        z3_full(e, fb);
        for (p = 0; p < NP; ++p) ok &= !memcmp(ex[p], fb[p], (size_t)numel(p) * 4);
        AT_CHECK_MSG(ok, "import of the exported parameters differs");
        z3_free(e);
        free(e);
        for (p = 0; p < NP; ++p) free(ex[p]);
    }
    /* bad checkpoints first: each fails with its message and leaves b's parameters as they were (the initial ones) */
    {
        float *before[NP];
        unsigned char *keep;
        size_t ks;
        for (p = 0; p < NP; ++p) before[p] = (float *)malloc((size_t)numel(p) * 4 + 4);
        z3_full(b, before);
        AT_EQ_INT(load_bytes(b, all, sizes, P - 1 > 0 ? P - 1 : 1), P > 1 ? ACCEL_ERR_FORMAT : ACCEL_OK);
        if (P > 1) AT_CONTAINS(accel_last_error(&acc), "in no saved rank's file");
        ks = sizes[0];
        sizes[0] = ks - 1; /* truncated */
        AT_EQ_INT(load_bytes(b, all, sizes, P), ACCEL_ERR_FORMAT);
        AT_CONTAINS(accel_last_error(&acc), "truncated");
        sizes[0] = ks;
        keep = all[P - 1];
        ks = sizes[P - 1];
        all[P - 1] = all[0]; /* rank 0's file twice: its pieces overlap, the last rank's are missing */
        sizes[P - 1] = sizes[0];
        AT_EQ_INT(load_bytes(b, all, sizes, P), P > 1 ? ACCEL_ERR_FORMAT : ACCEL_OK);
        if (P > 1) AT_CONTAINS(accel_last_error(&acc), "two saved ranks' files");
        all[P - 1] = keep;
        sizes[P - 1] = ks;
        all[0][8] ^= 1; /* another parameter count */
        AT_EQ_INT(load_bytes(b, all, sizes, P), ACCEL_ERR_MISMATCH);
        AT_CONTAINS(accel_last_error(&acc), "parameters");
        all[0][8] ^= 1;
        all[0][0] ^= 0x20; /* not the magic */
        AT_EQ_INT(load_bytes(b, all, sizes, P), ACCEL_ERR_FORMAT);
        AT_CONTAINS(accel_last_error(&acc), "not a ZeRO-3 shard state");
        all[0][0] ^= 0x20;
        {   /* another model with the same element counts (version 2 names and shapes every parameter): wte saved as
               [3, 37], then h.0.w saved as h.0.v, in the last rank's file → refused, naming the tensor */
            unsigned char *nb = all[P - 1] + 16 + (size_t)NP * 24 + 8, *at = nb;
            int q;
            for (q = 0; q < 2; ++q) { /* wte's dims: u32 ndim, then u64 37, u64 3 */
                unsigned char t[8];
                memcpy(t, nb + 4, 8);
                memcpy(nb + 4, nb + 12, 8);
                memcpy(nb + 12, t, 8);
                if (q == 1) break;
                AT_EQ_INT(load_bytes(b, all, sizes, P), ACCEL_ERR_MISMATCH);
                AT_CONTAINS(accel_last_error(&acc), "parameter 0 is wte [3, 37], here wte [37, 3]");
            }
            for (q = 0; q < 2; ++q) /* past wte and wpe: ndim, dims, name length, name, NUL */
                at += 4 + 8 * (size_t)at[0] + 4 + (size_t)at[4 + 8 * (size_t)at[0]] + 1;
            at += 4 + 8 * (size_t)at[0] + 4; /* h.0.w's name */
            AT_CHECK(!memcmp(at, "h.0.w", 6));
            at[4] = 'v';
            AT_EQ_INT(load_bytes(b, all, sizes, P), ACCEL_ERR_MISMATCH);
            AT_CONTAINS(accel_last_error(&acc), "parameter 2 is h.0.v [8, 9], here h.0.w [8, 9] (a different model)");
            at[4] = 'w';
        }
        if (P == 1) { /* the one-rank loads above succeeded: start again from a fresh object */
            z3_free(b);
            AT_CHECK(z3_make(b, c, &kb));
            load_optim(b, ob, on);
        }
        z3_full(b, fb);
        for (p = 0; p < NP; ++p)
            AT_CHECK_MSG(!memcmp(before[p], fb[p], (size_t)numel(p) * 4), "a failed load changed the parameters");
        for (p = 0; p < NP; ++p) free(before[p]);
    }
    AT_EQ_INT(load_bytes(b, all, sizes, P), ACCEL_OK);
    b->sc = snap;
    /* NO_SHARD's bytes (replicas save empty pieces) into a new FULL_SHARD run, before b continues */
    mine = save_bytes(b, &n);
    allb = all_bytes(mine, n, sizesb);
    free(mine);
    AT_CHECK(z3_make(d, c, &ka));
    load_optim(d, ob, on);
    AT_EQ_INT(load_bytes(d, allb, sizesb, P), ACCEL_OK);
    d->sc = snap;
    for (mb = 20; mb < 40; ++mb) {
        accel_accumulate_begin(&acc);
        AT_EQ_INT(z3_micro(b, mb), ACCEL_OK);
        accel_accumulate_end(&acc);
    }
    z3_full(b, fb);
    rel = compare(fb, fa, &bw);
    AT_CHECK_MSG(bw, "FULL_SHARD saved, NO_SHARD loaded: the continuation differs from the original's");
    for (mb = 20; mb < 40; ++mb) {
        accel_accumulate_begin(&acc);
        AT_EQ_INT(z3_micro(d, mb), ACCEL_OK);
        accel_accumulate_end(&acc);
    }
    z3_full(d, fb);
    rel += compare(fb, fa, &bw);
    AT_CHECK_MSG(bw, "NO_SHARD saved, FULL_SHARD loaded: the continuation differs from the original's");
    if (R == 0) printf("zero3 np%d checkpoint: FULL_SHARD -> NO_SHARD -> FULL_SHARD continuations max rel %.3g (%s)\n",
                       P, rel, rel == 0 ? "bit-identical" : "differ");
    free_all(all);
    free_all(allb);
    free(ob);
    free(sizes);
    free(sizesb);
    for (p = 0; p < NP; ++p) { free(fa[p]); free(fb[p]); }
    z3_free(a); z3_free(b); z3_free(d);
    free(a); free(b); free(d);
}

/* Debug mode (ACCELERATE_DEBUG_MODE): a released buffer is filled with NaN, so a stale view computes NaN instead of
   silently reading the previous unit's weights (the buffer stays allocated in the pool: never freed memory). */
/* Two one-tensor units of 64 floats each, initial values 1..64 (init: 64 floats). */
static void two_units(float *init, accel_tensor t[2], accel_zero_unit units[2]) {
    int i;
    for (i = 0; i < 64; ++i) init[i] = 1.0f + (float)i;
    for (i = 0; i < 2; ++i) {
        t[i] = at_vec("w", init, ACCEL_F32, 64);
        units[i].name = NULL;
        units[i].params = &t[i];
        units[i].n = 1;
    }
}

static void poison(accel_coll *c) {
    accel_zero_fsdp *f = NULL;
    accel_zero_fsdp_desc fd;
    accel_zero_unit units[2];
    float *init = (float *)calloc(64, 4);
    accel_tensor t[2], w[1];
    int i, nan = 1;
    at_context = "poison";
    two_units(init, t, units);
    memset(&fd, 0, sizeof fd);
    fd.units = units;
    fd.nunits = 2;
    fd.param_dtype = ACCEL_BF16;
    acc.debug = 1; /* as ACCELERATE_DEBUG_MODE=1 would set it (the object reads it at create) */
    AT_EQ_INT(accel_zero_fsdp_create(c, &fd, &f), ACCEL_OK);
    acc.debug = 0;
    AT_EQ_INT(accel_zero_fsdp_wait(f, 0, w, 1), ACCEL_OK);
    AT_CHECK(accel_bf16_to_f32(((uint16_t *)w[0].ptr)[5]) == 6.0f);
    AT_EQ_INT(accel_zero_fsdp_release(f, 0), ACCEL_OK);
    if (P > 1) { /* one process reads the shard itself (no gather buffer to poison) */
        for (i = 0; i < 64; ++i) {
            float x = accel_bf16_to_f32(((uint16_t *)w[0].ptr)[i]);
            nan &= x != x;
        }
        AT_CHECK_MSG(nan, "a released buffer still holds the weights in debug mode");
    }
    accel_zero_fsdp_destroy(f);
    free(init);
}

/* accel_zero_fsdp_estimate (what `accel estimate` prints) against what the allocator hooks count in real runs of
   FULL_SHARD, SHARD_GRAD_OP, NO_SHARD and FULL_SHARD with offload (BF16 gathers, F32 reductions), driven into the
   estimate's worst case: forward_prefetch keeps two gathers live besides the root's kept buffer, accumulation
   (no_sync) holds every unit's gradient buffer. Equal units (a transformer's blocks): after create the pinned bytes
   are exactly `offloaded` and all bytes the shards (+ staging) plus the object's bookkeeping (< 16 KiB); the
   object's peak of buffers (counted through the same allocators) is exactly gather_buffers + grad_buffers; the peak
   of all bytes is the total plus at most the collective's scratch ((P - 1) blocks of ceil(E / P) elements) and
   bookkeeping. Units of different sizes (FULL_SHARD, with and without offload): the same, exactly — each pool's peak
   is its figure (gather_buffers: the root's + the two largest other units, grad_buffers: every unit's) and they
   coincide — with the collective's scratch sized by the largest unit. */
static void estimate_vs_hooks(accel_coll *c) {
    enum { K = 5 };
    static const int EQ[K] = {40000, 40000, 40000, 40000, 40000}, UNEQ[K] = {30000, 41000, 52000, 63000, 24000};
    static const accel_zero_strategy strat[4] = {ACCEL_ZERO_FULL_SHARD, ACCEL_ZERO_SHARD_GRAD_OP, ACCEL_ZERO_NO_SHARD,
                                                 ACCEL_ZERO_FULL_SHARD};
    float *init = (float *)calloc(63000, 4);
    accel_tensor t[K];
    accel_zero_unit units[K];
    int u, s, mb, eq;
    for (eq = 1; eq >= 0; --eq)
        for (s = 0; s < 4; ++s) {
            const int *E = eq ? EQ : UNEQ;
            accel_zero_fsdp *f = NULL;
            accel_zero_fsdp_desc fd;
            accel_zero_fsdp_memory em;
            accel_zero_fsdp_stats st;
            long long base = all_live, pbase = pinned_live, created, peak, slack;
            char ctx[80];
            if (!eq && s != 0 && s != 3) continue;
            for (u = 0; u < K; ++u) {
                t[u] = at_vec("w", init, ACCEL_F32, E[u]);
                units[u].name = NULL;
                units[u].params = &t[u];
                units[u].n = 1;
            }
            snprintf(ctx, sizeof ctx, "estimate vs hooks, %s units: %s%s", eq ? "equal" : "unequal",
                     accel_zero_strategy_name(strat[s]), s == 3 ? " + offload" : "");
            at_context = ctx;
            memset(&fd, 0, sizeof fd);
            fd.strategy = strat[s];
            fd.units = units;
            fd.nunits = K;
            fd.param_dtype = ACCEL_BF16;
            fd.reduce_dtype = ACCEL_F32;
            fd.forward_prefetch = ACCEL_ON;
            fd.cpu_offload = s == 3 ? ACCEL_ON : ACCEL_OFF;
            AT_EQ_INT(accel_zero_fsdp_estimate(&acc, &fd, P, 0, ACCEL_F32, 1, &em), ACCEL_OK);
            all_peak = all_live;
            AT_EQ_INT(accel_zero_fsdp_create(c, &fd, &f), ACCEL_OK);
            if (!f) continue;
            created = all_live - base;
            AT_EQ_INT(pinned_live - pbase, (long long)em.offloaded);
            AT_CHECK_MSG(created >= (long long)(em.shards + em.staging) &&
                         created <= (long long)(em.shards + em.staging) + 16384, "after create: shards + bookkeeping");
            for (mb = 0; mb < 4 || !acc.sync_gradients; ++mb) { /* accumulation 2: no_sync, then the sync step */
                accel_accumulate_begin(&acc);
                one_pass(f, K);
                accel_accumulate_end(&acc);
                if (acc.sync_gradients) AT_EQ_INT(accel_zero_fsdp_zero_grad(f), ACCEL_OK);
            }
            peak = all_peak - base;
            AT_EQ_INT(accel_zero_fsdp_get_stats(f, &st), ACCEL_OK);
            AT_EQ_INT((long long)st.shard_bytes, (long long)em.shards);
            slack = (long long)(P - 1) * ((E[3] + P - 1) / P + 1) * 4 + 65536;
            /* each pool's peak is the estimate's figure exactly (units of one size or not: cached buffers are
               reused by units of their own size only, so a pool never holds more than the largest units') */
            AT_EQ_INT((long long)st.peak_gather_bytes, (long long)em.gather_buffers);
            AT_EQ_INT((long long)st.peak_grad_bytes, (long long)em.grad_buffers);
            AT_EQ_INT((long long)em.cache, 0);
            /* and together (the backward's prefetch holds the two largest gathers while every gradient buffer is
               held or cached: deterministic, whenever the reductions finish): the allocator's peak is the total */
            AT_EQ_INT((long long)st.peak_buffer_bytes, (long long)(em.gather_buffers + em.grad_buffers));
            AT_CHECK_MSG(peak >= (long long)em.total && peak <= (long long)em.total + slack,
                         "the peak is the estimate's total (+ the collective's scratch and bookkeeping)");
            if (R == 0)
                printf("zero3 np%d %s: estimate %llu (offloaded %llu), allocator peak %lld (%+lld), object's buffers "
                       "%llu, estimated %llu\n", P, ctx, (unsigned long long)em.total,
                       (unsigned long long)em.offloaded, peak, peak - (long long)em.total,
                       (unsigned long long)st.peak_buffer_bytes,
                       (unsigned long long)(em.gather_buffers + em.grad_buffers));
            accel_zero_fsdp_destroy(f);
        }
    at_context = "";
    free(init);
}

/* CPU offload hands the compute what a gather hands it: wait's views are the gather pool's memory (the device's
   with a device communicator, the host's here), never the pinned host shard — also when the shard group is one
   process (np 1, NO_SHARD at any np), where there is nothing to gather but the shard must still be staged; the
   views hold the weights, and release returns the buffer. */
static void offload_views(accel_coll *c) {
    static const accel_zero_strategy strat[2] = {ACCEL_ZERO_FULL_SHARD, ACCEL_ZERO_NO_SHARD};
    static const accel_dtype pdt[2] = {ACCEL_F32, ACCEL_BF16};
    float *init = (float *)calloc(64, 4);
    accel_tensor t[2], w[1], g[1];
    accel_zero_unit units[2];
    int i, s, k, u;
    at_context = "offload views";
    two_units(init, t, units);
    for (s = 0; s < 2; ++s)
        for (k = 0; k < 2; ++k) {
            accel_zero_fsdp *f = NULL;
            accel_zero_fsdp_desc fd;
            accel_zero_fsdp_stats st;
            accel_tensor vp[2];
            memset(&fd, 0, sizeof fd);
            fd.strategy = strat[s];
            fd.units = units;
            fd.nunits = 2;
            fd.param_dtype = pdt[k];
            fd.cpu_offload = ACCEL_ON;
            AT_EQ_INT(accel_zero_fsdp_create(c, &fd, &f), ACCEL_OK);
            if (!f) continue;
            AT_EQ_INT(accel_zero_fsdp_views(f, ACCEL_ZERO_VIEW_PARAMS, vp, 2), ACCEL_OK);
            AT_CHECK_MSG(accel_tensor_numel(&vp[0]) == 0 || in_pinned(vp[0].ptr), "the offloaded shard is pinned");
            AT_EQ_INT(accel_zero_fsdp_begin_forward(f), ACCEL_OK);
            for (u = 0; u < 2; ++u) {
                int ok = 1;
                AT_EQ_INT(accel_zero_fsdp_wait(f, u, w, 1), ACCEL_OK);
                AT_CHECK_MSG(!in_pinned(w[0].ptr), "wait's view points into the pinned shard (offload)");
                for (i = 0; i < 64; ++i)
                    ok &= (pdt[k] == ACCEL_F32 ? ((const float *)w[0].ptr)[i]
                                               : accel_bf16_to_f32(((const uint16_t *)w[0].ptr)[i])) == init[i];
                AT_CHECK_MSG(ok, "wait's view holds the weights");
                AT_EQ_INT(accel_zero_fsdp_release(f, u), ACCEL_OK);
            }
            AT_EQ_INT(accel_zero_fsdp_begin_backward(f), ACCEL_OK);
            for (u = 1; u >= 0; --u) {
                AT_EQ_INT(accel_zero_fsdp_wait(f, u, w, 1), ACCEL_OK);
                AT_CHECK(!in_pinned(w[0].ptr));
                AT_EQ_INT(accel_zero_fsdp_grads(f, u, g, 1), ACCEL_OK);
                AT_CHECK_MSG(!in_pinned(g[0].ptr), "grads' view points into pinned memory (offload)");
                AT_EQ_INT(accel_zero_fsdp_release(f, u), ACCEL_OK);
                AT_EQ_INT(accel_zero_fsdp_reduce_scatter(f, u), ACCEL_OK);
            }
            AT_EQ_INT(accel_zero_fsdp_end_backward(f), ACCEL_OK);
            AT_EQ_INT(accel_zero_fsdp_get_stats(f, &st), ACCEL_OK);
            AT_EQ_INT(st.live_gathers, 0);
            AT_CHECK(st.peak_gathers >= 1 && st.peak_gathers <= 2);
            {   /* the estimate counts the staging buffers offload uses */
                accel_zero_fsdp_memory em;
                accel_zero_fsdp_desc rd;
                AT_EQ_INT(accel_zero_fsdp_get_desc(f, &rd), ACCEL_OK);
                rd.units = units;
                AT_EQ_INT(accel_zero_fsdp_estimate(&acc, &rd, P, 0, ACCEL_F32, 0, &em), ACCEL_OK);
                AT_EQ_INT((long long)em.shards, (long long)st.shard_bytes);
                AT_CHECK_MSG(em.gather_buffers > 0, "offload stages every unit into a gather buffer");
            }
            accel_zero_fsdp_destroy(f);
        }
    at_context = "";
    free(init);
}

/* Checkpoints through accel_ckpt at another world size (modes save DIR / load DIR, driven by zero_save_load.sh):
   save runs 10 steps of FULL_SHARD (rank 0's gradients alone, summed: the sums do not depend on P), saves its
   shard pieces (fsdp_state_<rank>.bin), the step counts and the scaler, runs 10 more and writes the final
   parameters; load re-partitions the pieces onto this P, continues, and must end bit for bit the same. */
static void ckpt_mode(accel_coll *c, const char *mode, const char *dir) {
    z3run *z = (z3run *)calloc(1, sizeof *z);
    z3cfg k = cfg_of(ACCEL_ZERO_FULL_SHARD, ACCEL_BF16, ACCEL_F32);
    accel_ckpt *ck = NULL;
    accel_ckpt_desc cd;
    accel_zero_fsdp_state fs;
    accel_optim_shard_state ss;
    accel_tensor full[NP];
    const accel_tensor *mom = NULL;
    float *fin[NP];
    char path[512];
    int nm = 0, mb, first = 0, p, load = !strcmp(mode, "load");
    at_context = mode;
    solo_grads = 1;
    k.no_average = 1;
    AT_CHECK(z3_make(z, c, &k));
    AT_EQ_INT(accel_optim_state_tensors(z->opt, &mom, &nm), ACCEL_OK);
    AT_EQ_INT(accel_zero_fsdp_full_tensors(z->f, full, NP), ACCEL_OK);
    fs.fsdp = z->f;
    fs.state = mom;
    fs.m = nm;
    ss.opt = z->opt;
    ss.full = full;
    memset(&cd, 0, sizeof cd);
    cd.project_dir = dir;
    AT_EQ_INT(accel_ckpt_create(&acc, &cd, &ck), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_register_sharded(ck, "fsdp_state", accel_zero_fsdp_state_save,
                                          accel_zero_fsdp_state_load_all, &fs), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_register(ck, "optim_state", accel_optim_shard_state_save, accel_optim_shard_state_load, &ss),
              ACCEL_OK);
    AT_EQ_INT(accel_ckpt_register(ck, "scaler", accel_amp_scaler_state_save, accel_amp_scaler_state_load, &z->sc),
              ACCEL_OK);
    snprintf(path, sizeof path, "%s/ckpt", dir);
    if (load) {
        AT_EQ_INT(accel_ckpt_load_state(ck, path), ACCEL_OK);
        first = 20;
    }
    for (mb = first; mb < 40; ++mb) {
        accel_accumulate_begin(&acc);
        AT_EQ_INT(z3_micro(z, mb), ACCEL_OK);
        accel_accumulate_end(&acc);
        if (mb == 19 && !load) {
            char f[600];
            struct stat sb;
            int64_t whole = 0;
            AT_EQ_INT(accel_ckpt_save_state(ck, path, NULL, 0), ACCEL_OK);
            for (p = 0; p < NP; ++p) whole += numel(p);
            snprintf(f, sizeof f, "%s/fsdp_state_%d.bin", path, R);
            AT_CHECK_MSG(stat(f, &sb) == 0, "every rank wrote its fsdp_state_<rank>.bin");
            /* master + two moments of this rank's pieces: never the whole model's 12 bytes per element */
            AT_CHECK_MSG(P == 1 || (int64_t)sb.st_size < whole * 12, "a rank's file holds its pieces only");
        }
    }
    for (p = 0; p < NP; ++p) fin[p] = (float *)calloc((size_t)numel(p) + 1, 4);
    z3_full(z, fin);
    snprintf(path, sizeof path, "%s/final_params.bin", dir);
    if (!load) {
        if (R == 0) {
            FILE *f = fopen(path, "wb");
            AT_CHECK(f != NULL);
            for (p = 0; f && p < NP; ++p) fwrite(fin[p], 4, (size_t)numel(p), f);
            if (f) fclose(f);
        }
    } else {
        FILE *f = fopen(path, "rb");
        int same = f != NULL;
        for (p = 0; f && p < NP; ++p) {
            float *x = (float *)calloc((size_t)numel(p) + 1, 4);
            if (fread(x, 4, (size_t)numel(p), f) != (size_t)numel(p) || memcmp(x, fin[p], (size_t)numel(p) * 4))
                same = 0;
            free(x);
        }
        if (f) fclose(f);
        AT_CHECK_MSG(same, "the continuation after loading differs from the saving run's");
        if (R == 0 && same) printf("zero3 np%d: continued a checkpoint bit for bit\n", P);
    }
    for (p = 0; p < NP; ++p) free(fin[p]);
    accel_ckpt_destroy(ck);
    z3_free(z);
    free(z);
    solo_grads = 0;
}

/* The consolidated export (FSDP's FULL_STATE_DICT) through an async save (mode export DIR, driven by
   zero_export_async.sh): after 20 steps of FULL_SHARD, accel_zero_fsdp_export fills whole tensors on every rank and
   two checkpointers with the same registrations save them, one synchronously (DIR/sync), one with desc.async
   (DIR/async). As soon as the async save_state returns, poison is written over the whole tensors and the run goes
   on as a trainer would — two more micro-batches, a new export into the same whole tensors — and only then waits. The
   script compares both directories byte for byte and reads model.safetensors with a second parser against
   DIR/expected.f32: the parameters put together from every rank's pieces (z3_full, not the export). */
static void export_mode(accel_coll *c, const char *dir) {
    z3run *z = (z3run *)calloc(1, sizeof *z);
    z3cfg k = cfg_of(ACCEL_ZERO_FULL_SHARD, ACCEL_BF16, ACCEL_F32);
    accel_ckpt *cks = NULL, *cka = NULL;
    accel_ckpt_desc cd;
    accel_optim_shard_state ss;
    accel_tensor whole[NP], desc_full[NP];
    float *wbuf[NP], *fin[NP];
    char path[512];
    int mb, p;
    int64_t e;
    at_context = "export";
    solo_grads = 1;
    k.no_average = 1;
    AT_CHECK(z3_make(z, c, &k));
    AT_EQ_INT(accel_zero_fsdp_full_tensors(z->f, desc_full, NP), ACCEL_OK);
    for (p = 0; p < NP; ++p) {
        whole[p] = desc_full[p];
        wbuf[p] = (float *)calloc((size_t)numel(p) + 1, 4);
        fin[p] = (float *)calloc((size_t)numel(p) + 1, 4);
        whole[p].ptr = wbuf[p];
    }
    ss.opt = z->opt;
    ss.full = desc_full;
    memset(&cd, 0, sizeof cd);
    cd.project_dir = dir;
    AT_EQ_INT(accel_ckpt_create(&acc, &cd, &cks), ACCEL_OK);
    cd.async = ACCEL_ON;
    AT_EQ_INT(accel_ckpt_create(&acc, &cd, &cka), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_register_model(cks, whole, NP), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_register_model(cka, whole, NP), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_register(cks, "optim_state", accel_optim_shard_state_save, accel_optim_shard_state_load, &ss),
              ACCEL_OK);
    AT_EQ_INT(accel_ckpt_register(cka, "optim_state", accel_optim_shard_state_save, accel_optim_shard_state_load, &ss),
              ACCEL_OK);
    for (mb = 0; mb < 20; ++mb) {
        accel_accumulate_begin(&acc);
        AT_EQ_INT(z3_micro(z, mb), ACCEL_OK);
        accel_accumulate_end(&acc);
    }
    z3_full(z, fin);
    if (R == 0) { /* the expected values, from the pieces */
        FILE *f;
        snprintf(path, sizeof path, "%s/expected.f32", dir);
        f = fopen(path, "wb");
        AT_CHECK(f != NULL);
        for (p = 0; f && p < NP; ++p) fwrite(fin[p], 4, (size_t)numel(p), f);
        if (f) fclose(f);
    }
    AT_EQ_INT(accel_zero_fsdp_export(z->f, whole, NP), ACCEL_OK);
    snprintf(path, sizeof path, "%s/sync", dir);
    AT_EQ_INT(accel_ckpt_save_state(cks, path, NULL, 0), ACCEL_OK);
    snprintf(path, sizeof path, "%s/async", dir);
    AT_EQ_INT(accel_ckpt_save_state(cka, path, NULL, 0), ACCEL_OK);
    /* at once, before the writer thread (woken by a condition variable) reaches the tensors: a save that read the
       live tensors instead of its snapshot writes the poison */
    for (p = 0; p < NP; ++p)
        for (e = 0; e < numel(p); ++e) wbuf[p][e] = -1e30f;
    for (mb = 20; mb < 22; ++mb) { /* the write may be in flight: training and the next export go on */
        accel_accumulate_begin(&acc);
        AT_EQ_INT(z3_micro(z, mb), ACCEL_OK);
        accel_accumulate_end(&acc);
    }
    AT_EQ_INT(accel_zero_fsdp_export(z->f, whole, NP), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_wait(cka), ACCEL_OK);
    accel_ckpt_destroy(cka);
    accel_ckpt_destroy(cks);
    for (p = 0; p < NP; ++p) { free(wbuf[p]); free(fin[p]); }
    z3_free(z);
    free(z);
    solo_grads = 0;
}

/* kill -9 during async saves of the export (mode exportloop DIR, driven by zero_export_async.sh --kill): every rank
   writes its pid to DIR/pid_<rank>; then, step after step, rank 0 writes the parameters put together from the pieces
   (z3_full) to DIR/expected_<iteration>.f32 (temp + rename), the export fills the whole tensors, an async save_state
   writes checkpoint_<iteration> (automatic naming, total_limit 3) and poison goes over the whole tensors at once.
   The script kills both ranks at a random moment; the newest complete checkpoint must hold expected_<N>.f32. */
static void exportloop_mode(accel_coll *c, const char *dir) {
    z3run *z = (z3run *)calloc(1, sizeof *z);
    z3cfg k = cfg_of(ACCEL_ZERO_FULL_SHARD, ACCEL_BF16, ACCEL_F32);
    accel_ckpt *ck = NULL;
    accel_ckpt_desc cd;
    accel_tensor whole[NP];
    float *wbuf[NP], *fin[NP];
    char path[600], tmp[640];
    int mb, p, it;
    int64_t e;
    FILE *f;
    at_context = "exportloop";
    solo_grads = 1;
    k.no_average = 1;
    snprintf(path, sizeof path, "%s/pid_%d", dir, R);
    f = fopen(path, "w");
    AT_CHECK(f != NULL);
    if (f) { fprintf(f, "%d\n", (int)getpid()); fclose(f); }
    AT_CHECK(z3_make(z, c, &k));
    AT_EQ_INT(accel_zero_fsdp_full_tensors(z->f, whole, NP), ACCEL_OK);
    for (p = 0; p < NP; ++p) {
        wbuf[p] = (float *)calloc((size_t)numel(p) + 1, 4);
        fin[p] = (float *)calloc((size_t)numel(p) + 1, 4);
        whole[p].ptr = wbuf[p];
    }
    memset(&cd, 0, sizeof cd);
    cd.project_dir = dir;
    cd.automatic_checkpoint_naming = 1;
    cd.total_limit = 3;
    cd.async = ACCEL_ON;
    AT_EQ_INT(accel_ckpt_create(&acc, &cd, &ck), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_register_model(ck, whole, NP), ACCEL_OK);
    for (it = 0, mb = 0; it < 3000 && at_failed == 0; ++it) { /* ends when killed (or after 3000 saves) */
        for (; mb < 2 * (it + 1); ++mb) {
            accel_accumulate_begin(&acc);
            AT_EQ_INT(z3_micro(z, mb), ACCEL_OK);
            accel_accumulate_end(&acc);
        }
        z3_full(z, fin);
        if (R == 0) {
            snprintf(tmp, sizeof tmp, "%s/.expected.tmp", dir);
            snprintf(path, sizeof path, "%s/expected_%d.f32", dir, accel_ckpt_iteration(ck));
            f = fopen(tmp, "wb");
            AT_CHECK(f != NULL);
            for (p = 0; f && p < NP; ++p) fwrite(fin[p], 4, (size_t)numel(p), f);
            if (f) fclose(f);
            AT_EQ_INT(rename(tmp, path), 0);
        }
        AT_EQ_INT(accel_zero_fsdp_export(z->f, whole, NP), ACCEL_OK);
        AT_EQ_INT(accel_ckpt_save_state(ck, NULL, NULL, 0), ACCEL_OK);
        for (p = 0; p < NP; ++p)
            for (e = 0; e < numel(p); ++e) wbuf[p][e] = -1e30f;
    }
    accel_ckpt_destroy(ck);
    for (p = 0; p < NP; ++p) { free(wbuf[p]); free(fin[p]); }
    z3_free(z);
    free(z);
    solo_grads = 0;
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
    d.pinned_allocator.alloc = pinned_alloc;
    d.pinned_allocator.free = pinned_free;
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
        strategies(c);
        prefetch_order(c);
        root_held(c);
        memory(c);
        accumulate_each(c);
        checkpoint(c);
        errors(c);
        poison(c);
        offload_views(c);
        estimate_vs_hooks(c);
    } else if (argc > 2 && (!strcmp(mode, "save") || !strcmp(mode, "load"))) {
        ckpt_mode(c, mode, argv[2]);
    } else if (argc > 2 && !strcmp(mode, "export")) {
        export_mode(c, argv[2]);
    } else if (argc > 2 && !strcmp(mode, "exportloop")) {
        exportloop_mode(c, argv[2]);
    } else {
        fprintf(stderr, "usage: test_zero3_mpi [basic | save DIR | load DIR | export DIR | exportloop DIR]\n");
        return 2;
    }
    accel_coll_destroy(c);
    rc = at_finish("zero3_mpi");
    accel_shutdown(&acc);
    return rc;
}
