/* accel_optim against torch.optim itself (/usr/bin/python3 + Debian python3-torch 1.13, CPU, foreach=False; exit 77
   = skip when torch is missing): AdamW and SGD over random parameter lists of odd sizes, 20 steps, two parameter
   groups with different lr / weight_decay, amsgrad, maximize, nesterov, momentum/dampening, steps where a parameter
   has no gradient, learning rates from transformers' schedules through LambdaLR. Every element of the parameters and
   of the state must be within 1e-6 relative of torch's (the bar); the output also says how many are
   bit-identical. The learning rates must be identical, the step counts equal.
   usage: test_optim_torch TORCH_ORACLE_PY */
#include "accel.h"
#include "accel_optim.h"
#include "accel_test.h"
#include "accel_test_fs.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#define NT 7
#define STEPS 20
static const int nd[NT] = {2, 1, 1, 1, 2, 3, 1};
static const int64_t shp[NT][3] = {{3, 5, 0}, {7, 0, 0}, {1, 0, 0}, {129, 0, 0}, {33, 3, 0}, {2, 2, 5}, {1003, 0, 0}};
static const float gscale[NT] = {1.0f, 0.1f, 1e-3f, 3.0f, 0.01f, 0.5f, 0.2f};

typedef struct {
    const char *name;
    accel_optim_algorithm algo;
    int count0;                 /* params in group 0; the rest in group 1 */
    double lr0, wd0, lr1, wd1;
    double b1, b2, eps;         /* as passed in the desc (0 = default, ACCEL_OPTIM_ZERO) */
    double tb1, tb2, teps;      /* what torch gets */
    int amsgrad, maximize, lerp;
    double mom, damp;
    int nesterov;
    int sched;                  /* -1 none, else accel_optim_schedule_kind */
    int64_t warmup, total;
    double min_ratio;
    int nograd;                 /* steps 3, 4 and 11 without a gradient for params 1 and 5 (step 4: only 5) */
} tcase;

static const tcase cases[] = {
    {"adamw-groups-cosine", ACCEL_OPTIM_ADAMW, 4, 0.05, 0.1, 0.02, 0.0, 0, 0, 0, 0.9, 0.999, 1e-8, 0, 0, 0, 0, 0, 0,
     ACCEL_OPTIM_SCHEDULE_COSINE, 3, 20, 0.1, 1},
    {"adamw-amsgrad-maximize-linear", ACCEL_OPTIM_ADAMW, 3, 0.03, 0.05, 0.1, 0.2, 0.8, 0.99, 1e-3, 0.8, 0.99, 1e-3, 1, 1,
     0, 0, 0, 0, ACCEL_OPTIM_SCHEDULE_LINEAR, 2, 20, 0, 0},
    {"adamw-torch2-lerp-amsgrad", ACCEL_OPTIM_ADAMW, 5, 0.04, 0.1, 0.01, 0.3, 0, 0, 0, 0.9, 0.999, 1e-8, 1, 0, 1, 0, 0,
     0, -1, 0, 0, 0, 1},
    {"adamw-torch2-lerp-beta1-0.3", ACCEL_OPTIM_ADAMW, 2, 0.05, 0.0, 0.05, 0.1, 0.3, 0.95, 1e-6, 0.3, 0.95, 1e-6, 0, 1, 1,
     0, 0, 0, -1, 0, 0, 0, 0},
    {"adamw-beta1-zero-eps-zero", ACCEL_OPTIM_ADAMW, 4, 0.01, 0.01, 0.01, 0.0, ACCEL_OPTIM_ZERO, 0.9, ACCEL_OPTIM_ZERO, 0.0,
     0.9, 0.0, 0, 0, 0, 0, 0, 0, -1, 0, 0, 0, 0},
    {"sgd-momentum-dampening-constant", ACCEL_OPTIM_SGD, 4, 0.05, 0.01, 0.1, 0.0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0.9, 0.3, 0,
     ACCEL_OPTIM_SCHEDULE_CONSTANT, 2, 0, 0, 1},
    {"sgd-nesterov-maximize", ACCEL_OPTIM_SGD, 3, 0.02, 0.05, 0.05, 0.05, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0.8, 0.0, 1, -1, 0,
     0, 0, 0},
    {"sgd-plain-weight-decay", ACCEL_OPTIM_SGD, 6, 0.1, 0.1, 0.05, 0.0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0.0, 0.0, 0,
     ACCEL_OPTIM_SCHEDULE_COSINE, 5, 20, 0.0, 1},
};

static uint64_t rs = 0x9E3779B97F4A7C15ull;
static uint32_t rnd32(void) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return (uint32_t)(rs >> 16); }
static float rndu(void) { return (float)(rnd32() & 0xffffff) / 8388608.0f - 1.0f; } /* [-1, 1) */

static int has_grad(const tcase *c, int step, int i) {
    if (!c->nograd) return 1;
    if ((step == 3 || step == 11) && (i == 1 || i == 5)) return 0;
    if (step == 4 && i == 5) return 0;
    return 1;
}

static int64_t numel(int i) {
    int64_t n = 1;
    int d;
    for (d = 0; d < nd[i]; ++d) n *= shp[i][d];
    return n;
}

/* |a - b| <= 1e-6 |b| (b is torch's); counts the bit-identical ones */
static void compare(const char *what, const float *a, const float *b, int64_t n, double *max_rel, int64_t *same,
                    int64_t *total, int64_t *bad) {
    int64_t i;
    for (i = 0; i < n; ++i) {
        double d = fabs((double)a[i] - (double)b[i]), rel = d == 0.0 ? 0.0 : d / fabs((double)b[i]);
        if (memcmp(&a[i], &b[i], 4) == 0) ++*same;
        ++*total;
        if (rel > *max_rel) *max_rel = rel;
        if (!(d <= 1e-6 * fabs((double)b[i]))) {
            if (*bad < 5) fprintf(stderr, "  %s[%lld]: accel %.9g torch %.9g (rel %.3g)\n", what, (long long)i, (double)a[i],
                                  (double)b[i], rel);
            ++*bad;
        }
    }
}

typedef struct { char dir[64]; float *init, *grads; } tdata;

/* Writes the case for the oracle (DIR/case.json, DIR/in.bin). */
static int prepare_case(const tcase *c, tdata *td) {
    char path[sizeof td->dir + 16];
    FILE *f;
    int i, k, s;
    int64_t total = 0, off;
    float *init, *grads;
    for (i = 0; i < NT; ++i) total += numel(i);
    strcpy(td->dir, "/tmp/accel_optim_torchXXXXXX");
    if (!mkdtemp(td->dir)) { perror("mkdtemp"); return 1; }
    init = td->init = (float *)malloc(sizeof(float) * (size_t)total);
    grads = td->grads = (float *)malloc(sizeof(float) * (size_t)total * STEPS);
    for (i = 0; i < total; ++i) init[i] = rndu();
    for (k = 0; k < STEPS; ++k)
        for (i = 0, off = 0; i < NT; off += numel(i), ++i) {
            int64_t j;
            float sc = gscale[i] * (1.0f + 0.1f * (float)(k % 5));
            for (j = 0; j < numel(i); ++j) grads[(int64_t)k * total + off + j] = rndu() * sc;
        }
    snprintf(path, sizeof path, "%.63s/in.bin", td->dir);
    f = fopen(path, "wb");
    if (!f) { perror(path); return 1; }
    fwrite(init, 4, (size_t)total, f);
    fwrite(grads, 4, (size_t)total * STEPS, f);
    fclose(f);
    snprintf(path, sizeof path, "%.63s/case.json", td->dir);
    f = fopen(path, "w");
    if (!f) { perror(path); return 1; }
    fprintf(f, "{\"algorithm\": \"%s\", \"steps\": %d, \"shapes\": [", c->algo == ACCEL_OPTIM_ADAMW ? "adamw" : "sgd", STEPS);
    for (i = 0; i < NT; ++i) {
        int d;
        fprintf(f, "%s[", i ? ", " : "");
        for (d = 0; d < nd[i]; ++d) fprintf(f, "%s%lld", d ? ", " : "", (long long)shp[i][d]);
        fprintf(f, "]");
    }
    fprintf(f, "], \"groups\": [{\"count\": %d, \"lr\": %.17g, \"weight_decay\": %.17g}, {\"count\": %d, \"lr\": %.17g, "
               "\"weight_decay\": %.17g}], ", c->count0, c->lr0, c->wd0, NT - c->count0, c->lr1, c->wd1);
    fprintf(f, "\"betas\": [%.17g, %.17g], \"eps\": %.17g, \"amsgrad\": %s, \"maximize\": %s, \"rule\": \"%s\", ", c->tb1,
            c->tb2, c->teps, c->amsgrad ? "true" : "false", c->maximize ? "true" : "false", c->lerp ? "lerp" : "muladd");
    fprintf(f, "\"momentum\": %.17g, \"dampening\": %.17g, \"nesterov\": %s, ", c->mom, c->damp, c->nesterov ? "true" : "false");
    if (c->sched < 0) fprintf(f, "\"schedule\": null, ");
    else fprintf(f, "\"schedule\": {\"kind\": \"%s\", \"warmup\": %lld, \"total\": %lld, \"min_lr_ratio\": %.17g}, ",
                 c->sched == ACCEL_OPTIM_SCHEDULE_CONSTANT ? "constant" : c->sched == ACCEL_OPTIM_SCHEDULE_LINEAR ? "linear" : "cosine",
                 (long long)c->warmup, (long long)c->total, c->min_ratio);
    fprintf(f, "\"nograd\": [");
    for (k = 0, s = 0; k < STEPS; ++k)
        for (i = 0; i < NT; ++i)
            if (!has_grad(c, k, i)) fprintf(f, "%s[%d, %d]", s++ ? ", " : "", k, i);
    fprintf(f, "]}\n");
    fclose(f);
    return 0;
}

/* Runs accel on the same case and compares with the oracle's DIR/out.bin. */
static int check_case(const tcase *c, tdata *td) {
    char path[sizeof td->dir + 16];
    int i, k, s, rc, ret = 0;
    int64_t total = 0, off;
    float *init = td->init, *grads = td->grads, *params[NT];
    double lrs[STEPS][2];
    size_t outn = 0;
    unsigned char *ob;
    accel acc;
    accel_desc ad;
    accel_optim *opt = NULL;
    accel_optim_desc od;
    accel_optim_group gr[2];
    accel_tensor pt[NT], gt[NT];
    accel_optim_schedule sch;
    int64_t gcount[NT];
    const accel_tensor *st;
    int nst, nkeys;
    double max_rel = 0;
    int64_t same = 0, cnt = 0, bad = 0;
    at_context = c->name;
    for (i = 0; i < NT; ++i) total += numel(i);
    snprintf(path, sizeof path, "%.63s/out.bin", td->dir);
    ob = at_read_file(path, &outn);
    at_rm_rf(td->dir);

    /* accel */
    memset(&ad, 0, sizeof ad);
    ad.cpu = 1;
    ad.no_mpi = 1;
    AT_EQ_INT(accel_init(&acc, &ad), ACCEL_OK);
    for (i = 0, off = 0; i < NT; off += numel(i), ++i) {
        params[i] = (float *)malloc(sizeof(float) * (size_t)numel(i));
        memcpy(params[i], init + off, sizeof(float) * (size_t)numel(i));
        memset(&pt[i], 0, sizeof pt[i]);
        pt[i].name = "p";
        pt[i].ptr = params[i];
        pt[i].dtype = ACCEL_F32;
        pt[i].ndim = nd[i];
        memcpy(pt[i].shape, shp[i], sizeof shp[i]);
        gt[i] = pt[i];
        gcount[i] = 0;
    }
    memset(&od, 0, sizeof od);
    memset(gr, 0, sizeof gr);
    gr[0].count = c->count0; gr[0].lr = c->lr0; gr[0].weight_decay = c->wd0;
    gr[1].count = NT - c->count0; gr[1].lr = c->lr1; gr[1].weight_decay = c->wd1;
    od.algorithm = c->algo;
    od.params = pt;
    od.nparams = NT;
    od.groups = gr;
    od.ngroups = 2;
    od.beta1 = c->b1; od.beta2 = c->b2; od.eps = c->eps;
    od.amsgrad = c->amsgrad;
    od.maximize = c->maximize;
    od.moment_rule = c->lerp ? ACCEL_OPTIM_MOMENT_LERP : ACCEL_OPTIM_MOMENT_DEFAULT;
    od.momentum = c->mom; od.dampening = c->damp; od.nesterov = c->nesterov;
    rc = accel_optim_create(&acc, &od, &opt);
    AT_EQ_INT(rc, ACCEL_OK);
    if (rc != ACCEL_OK) { fprintf(stderr, "%s\n", accel_last_error(&acc)); return 1; }
    memset(&sch, 0, sizeof sch);
    sch.kind = (accel_optim_schedule_kind)(c->sched < 0 ? 0 : c->sched);
    sch.warmup_steps = c->warmup; sch.total_steps = c->total; sch.min_lr_ratio = c->min_ratio;
    for (k = 0; k < STEPS; ++k) {
        for (i = 0, off = 0; i < NT; off += numel(i), ++i) {
            gt[i].ptr = has_grad(c, k, i) ? (void *)(grads + (int64_t)k * total + off) : NULL;
            gcount[i] += has_grad(c, k, i);
        }
        AT_EQ_INT(accel_optim_set_grads(opt, gt, NT), ACCEL_OK);
        if (c->sched >= 0) AT_EQ_INT(accel_optim_apply_schedule(opt, &sch, k), ACCEL_OK);
        lrs[k][0] = accel_optim_lr(opt, 0);
        lrs[k][1] = accel_optim_lr(opt, 1);
        AT_EQ_INT(accel_optim_step(opt, NULL), ACCEL_OK);
    }

    /* compare */
    AT_EQ_INT(accel_optim_state_tensors(opt, &st, &nst), ACCEL_OK);
    nkeys = nst / NT;
    AT_EQ_INT(nkeys, c->algo == ACCEL_OPTIM_ADAMW ? 2 + c->amsgrad : c->mom != 0.0);
    AT_EQ_INT(outn, sizeof(float) * (size_t)total * (size_t)(1 + nkeys) + 8u * NT + 16u * STEPS);
    if (ob && outn == sizeof(float) * (size_t)total * (size_t)(1 + nkeys) + 8u * NT + 16u * STEPS) {
        const float *tp = (const float *)ob, *ts = tp + total;
        const unsigned char *tail = ob + sizeof(float) * (size_t)total * (size_t)(1 + nkeys);
        int64_t steps[NT];
        char what[64];
        for (i = 0, off = 0; i < NT; off += numel(i), ++i) {
            snprintf(what, sizeof what, "param %d", i);
            compare(what, params[i], tp + off, numel(i), &max_rel, &same, &cnt, &bad);
        }
        for (i = 0; i < NT; ++i)
            for (s = 0; s < nkeys; ++s) {
                snprintf(what, sizeof what, "%s", st[i * nkeys + s].name);
                compare(what, (const float *)st[i * nkeys + s].ptr, ts, numel(i), &max_rel, &same, &cnt, &bad);
                ts += numel(i);
            }
        AT_EQ_INT(accel_optim_param_steps(opt, steps, NT), ACCEL_OK);
        for (i = 0; i < NT; ++i) {
            double tn;
            memcpy(&tn, tail + 8 * i, 8);
            AT_EQ_INT(steps[i], gcount[i]);
            if (c->algo == ACCEL_OPTIM_ADAMW) AT_EQ_INT(steps[i], (int64_t)tn);
        }
        for (k = 0; k < STEPS; ++k) {
            double tl[2];
            memcpy(tl, tail + 8 * NT + 16 * k, 16);
            if (memcmp(&tl[0], &lrs[k][0], 8) || memcmp(&tl[1], &lrs[k][1], 8)) {
                fprintf(stderr, "  lr at step %d: accel %.17g %.17g torch %.17g %.17g\n", k, lrs[k][0], lrs[k][1], tl[0], tl[1]);
                ret = 1;
            }
            AT_CHECK(!memcmp(&tl[0], &lrs[k][0], 8) && !memcmp(&tl[1], &lrs[k][1], 8));
        }
    }
    AT_EQ_INT(bad, 0);
    printf("%-34s max relative difference %.3g, %lld of %lld values bit-identical to torch\n", c->name, max_rel,
           (long long)same, (long long)cnt);
    accel_optim_destroy(opt);
    accel_shutdown(&acc);
    for (i = 0; i < NT; ++i) free(params[i]);
    free(init); free(grads); free(ob);
    return ret;
}

/* torch's own schedulers (chained, recursive forms) against accel's closed forms: 1e-9 relative */
static const struct { int T; double r; } sgrid[] = {{10, 0.0}, {10, 0.1}, {100, 0.0}, {100, 0.25}, {1000, 0.1}};
#define SBASE 0.003
static int prepare_schedules(char *dir) {
    char path[96];
    FILE *f;
    size_t q;
    strcpy(dir, "/tmp/accel_optim_schedXXXXXX");
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    snprintf(path, sizeof path, "%.63s/case.json", dir);
    f = fopen(path, "w");
    if (!f) { perror(path); return 1; }
    fprintf(f, "{\"kind\": \"schedules\", \"base\": %.17g, \"grid\": [", SBASE);
    for (q = 0; q < sizeof sgrid / sizeof sgrid[0]; ++q) fprintf(f, "%s[%d, %.17g]", q ? ", " : "", sgrid[q].T, sgrid[q].r);
    fprintf(f, "]}\n");
    fclose(f);
    return 0;
}
static void check_schedules(const char *dir) {
    char path[96];
    size_t n = 0, at = 0, q;
    unsigned char *b;
    int kind;
    double worst = 0;
    at_context = "torch schedulers";
    snprintf(path, sizeof path, "%.63s/out.bin", dir);
    b = at_read_file(path, &n);
    at_rm_rf(dir);
    AT_CHECK(b != NULL);
    if (!b) return;
    for (kind = 0; kind < 2; ++kind)
        for (q = 0; q < sizeof sgrid / sizeof sgrid[0]; ++q) {
            accel_optim_schedule s;
            int64_t k;
            if (kind == 1 && sgrid[q].r != 0.0) continue;
            memset(&s, 0, sizeof s);
            s.kind = kind ? ACCEL_OPTIM_SCHEDULE_LINEAR : ACCEL_OPTIM_SCHEDULE_COSINE;
            s.total_steps = sgrid[q].T;
            s.min_lr_ratio = sgrid[q].r;
            for (k = 0; k < sgrid[q].T + 6; ++k, at += 8) {
                double t, a = SBASE * accel_optim_schedule_factor(&s, k), d; /* past T: both keep following the cosine */
                if (at + 8 > n) { AT_CHECK(!"short schedule output"); free(b); return; }
                memcpy(&t, b + at, 8);
                d = fabs(a - t) / (t > 1e-300 ? t : 1.0);
                if (d > worst) worst = d;
                if (!(d <= 1e-9)) fprintf(stderr, "  %s T=%d r=%g step %lld: accel %.17g torch %.17g\n", kind ? "linear" : "cosine",
                                          sgrid[q].T, sgrid[q].r, (long long)k, a, t);
                AT_CHECK(d <= 1e-9);
            }
        }
    AT_EQ_INT(at, n);
    printf("%-34s max relative difference %.3g (torch.optim.lr_scheduler CosineAnnealingLR, LinearLR)\n", "schedules", worst);
    free(b);
}

int main(int argc, char **argv) {
    enum { NC = sizeof cases / sizeof cases[0] };
    tdata td[NC];
    char sdir[64];
    char *cmd;
    size_t q, len;
    int rc;
    if (argc < 2) { fprintf(stderr, "usage: %s TORCH_ORACLE_PY\n", argv[0]); return 2; }
    if (system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
        printf("/usr/bin/python3 with torch not available: skipped\n");
        return 77;
    }
    len = strlen(argv[1]) + 64 + (NC + 1) * 80;
    cmd = (char *)malloc(len);
    snprintf(cmd, len, "/usr/bin/python3 '%s'", argv[1]);
    for (q = 0; q < NC; ++q) {
        if (prepare_case(&cases[q], &td[q])) return 1;
        strcat(cmd, " ");
        strcat(cmd, td[q].dir);
    }
    if (prepare_schedules(sdir)) return 1;
    strcat(cmd, " ");
    strcat(cmd, sdir);
    rc = system(cmd); /* one interpreter for every case: importing torch is the slow part */
    free(cmd);
    if (rc != 0) {
        int code = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
        for (q = 0; q < NC; ++q) at_rm_rf(td[q].dir);
        at_rm_rf(sdir);
        if (code == 77) { printf("torch not available: skipped\n"); return 77; }
        fprintf(stderr, "the oracle failed (exit %d)\n", code);
        return 1;
    }
    for (q = 0; q < NC; ++q) check_case(&cases[q], &td[q]);
    check_schedules(sdir);
    at_context = "";
    return at_finish("optim-torch");
}
