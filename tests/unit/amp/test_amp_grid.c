/* The CUDA list kernels of accel_amp.h without a GPU: everything a kernel thread does is ACCEL_HD code (the buffer
   plan, the chunks of B x U units, the block's walk over its chunks, the aligned fast path and the bounded last chunk
   of a buffer, the element-wise heads and tails, the element work), so this TU (its own ACCEL_IMPLEMENTATION, to
   reach the private functions) runs that code for every (block, thread) of small grids, launch by launch as
   accel__amp_run splits a list, and folds the per-block results as the kernel's epilogue does (warp butterflies, then
   the warps in order; unscale's flag from any block). The results are compared with the CPU path (accel__amp_cpu_*),
   which the public functions run on the host:
   - every kind (unscale, convert, stochastic rounding, norm, scale, clamp, fp8 cast + amax, dequantize) bit for bit,
     and the instance each list would get on the device (fp32 specialised, generic);
   - every element phase 0..7 of source and destination, sizes 0..33 and larger ones with tails, mixed dtypes in one
     list, empty buffers, more buffers than one launch takes (ACCEL__AMP_CAP), a 148-buffer GPT-2-shaped list;
   - every launch shape the macros can select (bench/amp/sweep_gpu.sh's variants among them): U = 1, 2, 4, 8 units a
     thread (ACCEL__AMP_U_* only take these), blocks of 32..1024 threads (ACCEL_AMP_CUDA_BLOCK: powers of two in
     [32, 1024]; 96 too), a block per chunk (ACCEL__AMP_WAVES_* = 0) and grids of 1..13 blocks walking the chunks
     (WAVES > 0: any grid size), including more blocks than chunks;
   - guard bytes around every buffer (nothing written outside);
   - norms against a long-double reference: the fp32 compensated sums within 1e-12 relative (the bound the GPU test
     holds the device to), p = inf exactly, and the float64 rerun where the fp32 sums leave their range (Inf, NaN,
     squares past 2^128, totals below n * 2^-100, all zeros). */
#include <stddef.h>
/* every access of the emulated thread code must lie inside a buffer of the case (ACCEL__AMP_ACCESS_HOOK) */
static void grid_access(const void *p, size_t nb);
#define ACCEL__AMP_ACCESS_HOOK(p, nb) grid_access((p), (nb))
#define ACCEL_IMPLEMENTATION
#include "accel.h"
#include "accel_amp.h"
#include "accel_test.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static accel cpu;
static uint64_t rs = 0x5EED0F6A1DULL;
static uint32_t rnd32(void) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return (uint32_t)(rs >> 16); }
static float rndf(float lo, float hi) { return lo + (hi - lo) * (float)(rnd32() & 0xffffff) / 16777216.0f; }
static int esz(int dt) { return (int)accel_dtype_size((accel_dtype)dt); }

/* ------------------------------------------------------------------------------------------ buffers */
enum { GUARD = 64 };
typedef struct {
    unsigned char *mem; /* GUARD bytes, the elements, GUARD bytes (malloc: 16-byte aligned) */
    unsigned char *p;   /* the first element: mem + GUARD + phase * size */
    size_t bytes;       /* everything allocated */
} tbuf;
static void tb_make(tbuf *t, int dt, long long n, int phase) {
    t->bytes = 2 * GUARD + (size_t)(n + phase) * (size_t)esz(dt) + 16;
    t->mem = (unsigned char *)malloc(t->bytes);
    memset(t->mem, 0xA5, t->bytes);
    t->p = t->mem + GUARD + (size_t)phase * (size_t)esz(dt);
}
static void tb_copy(tbuf *d, const tbuf *s) {
    d->bytes = s->bytes;
    d->mem = (unsigned char *)malloc(s->bytes);
    memcpy(d->mem, s->mem, s->bytes);
    d->p = d->mem + (s->p - s->mem);
}
/* random elements; specials: NaN, +-Inf, subnormals, -0, huge values now and then */
static void tb_fill(tbuf *t, int dt, long long n, float range, int specials) {
    long long i;
    for (i = 0; i < n; ++i) {
        float v = rndf(-range, range);
        uint32_t r = rnd32() % 97;
        if (specials && r == 0) v = NAN;
        else if (specials && r == 1) v = (rnd32() & 1) ? INFINITY : -INFINITY;
        else if (specials && r == 2) v = 1e-41f;
        else if (specials && r == 3) v = -0.0f;
        else if (specials && r == 4) v = 7e4f;
        if (dt == ACCEL_F32) memcpy(t->p + 4 * i, &v, 4);
        else if (dt == ACCEL_BF16 || dt == ACCEL_F16) {
            uint16_t h = dt == ACCEL_BF16 ? accel_f32_to_bf16(v) : accel_f32_to_f16(v);
            if (specials && r == 5) h = (uint16_t)rnd32(); /* any code, NaN payloads too */
            memcpy(t->p + 2 * i, &h, 2);
        } else {
            t->p[i] = (specials && r == 5) ? (uint8_t)rnd32() : accel_amp_f32_to_fp8(v, dt == ACCEL_F8_E5M2, 1);
        }
    }
}

/* the byte ranges of the case's buffers (g_nreg of them; 0: no check), and the accesses that fell outside */
enum { MAXREG = 700 };
static const unsigned char *g_lo[MAXREG], *g_hi[MAXREG];
static int g_nreg;
static long long g_outside;
static void grid_access(const void *p, size_t nb) {
    const unsigned char *q = (const unsigned char *)p;
    int i;
    if (!g_nreg) return;
    for (i = 0; i < g_nreg; ++i)
        if (q >= g_lo[i] && q + nb <= g_hi[i]) return;
    ++g_outside;
}
static void reg_add(const void *p, size_t bytes) {
    g_lo[g_nreg] = (const unsigned char *)p;
    g_hi[g_nreg] = (const unsigned char *)p + bytes;
    ++g_nreg;
}

/* ------------------------------------------------------------------------------------------ the emulation */
/* What accel__amp_run does on a device, with G blocks of B threads a launch (G = 0: a block per chunk, as the read +
   write kinds launch) and U units a thread (0: the instance's, ACCEL__AMP_U_*) */
static int g_launches; /* launches of the last emulate() */
/* the kernel's epilogue: the block's norm record (its sum, or max |x| bits for p = inf) */
static double block_fold(int mode, const accel__amp_acc *s, int B) {
    double w[32], sum = 0.0;
    uint32_t bits = 0;
    int wp, l, o;
    for (wp = 0; wp < B / 32; ++wp) {
        for (l = 0; l < 32; ++l) w[l] = s[wp * 32 + l].sum;
        for (o = 16; o > 0; o >>= 1) { /* __shfl_xor_sync butterflies: every lane adds its partner's old value */
            double nw[32];
            for (l = 0; l < 32; ++l) nw[l] = w[l] + w[l ^ o];
            memcpy(w, nw, sizeof w);
        }
        sum = wp == 0 ? w[0] : sum + w[0];
        for (l = 0; l < 32; ++l) bits = s[wp * 32 + l].bits > bits ? s[wp * 32 + l].bits : bits;
    }
    return mode == ACCEL__AMP_NORM_INF ? (double)bits : sum;
}
static accel_result emulate(int kind, const accel__amp_mt *h0, int count, const accel__amp_kp *kp, int G, int B, int U,
                            accel__amp_part *res, int *instance) {
    accel__amp_mt *h = (accel__amp_mt *)malloc(sizeof *h * (size_t)(count + 1)); /* prepare compacts its list */
    accel__amp_args *A = (accel__amp_args *)malloc(sizeof *A);
    accel__amp_acc *s = (accel__amp_acc *)malloc(sizeof(accel__amp_acc) * (size_t)B);
    accel_result r;
    int n = 0, j, tid;
    memset(res, 0, sizeof *res);
    g_launches = 0;
    memcpy(h, h0, sizeof *h * (size_t)count);
    r = accel__amp_prepare(&cpu, kind, h, count, kp, &n, "emulate");
    for (j = 0; r == ACCEL_OK && j * ACCEL__AMP_CAP < n; ++j) {
        int nt = n - j * ACCEL__AMP_CAP < ACCEL__AMP_CAP ? n - j * ACCEL__AMP_CAP : ACCEL__AMP_CAP, ta, tb, u;
        accel__amp_cfg c;
        long long g, b;
        double *parts;
        accel__amp_common(h + j * ACCEL__AMP_CAP, nt, &ta, &tb);
        accel__amp_pick(kind, kp->mode, ta, tb, &c);
        accel__amp_pick_big(kind, h + j * ACCEL__AMP_CAP, nt, &c);
        u = U > 0 ? U : c.u;
        A->k = *kp;
        A->part = NULL;
        A->flag = NULL;
        accel__amp_fill(A, h + j * ACCEL__AMP_CAP, nt, (long long)u * B);
        if (instance) *instance = c.id;
        g = G > 0 ? G : A->chunks;
        parts = (double *)malloc(sizeof(double) * (size_t)g);
        for (b = 0; b < g; ++b) {
            for (tid = 0; tid < B; ++tid) {
                accel__amp_acc_init(&s[tid]);
                accel__amp_thread(A, kind, c.ta, c.tb, c.vwl, c.mode, u, b, g, tid, B, &s[tid]);
                if (kind == ACCEL__AMP_K_FP8Q) accel__amp_amax_flush(kp->amax, s[tid].slot, s[tid].bits);
                if (kind == ACCEL__AMP_K_UNSCALE && s[tid].bits == 0x7f800000u) res->flag = 1;
            }
            parts[b] = block_fold(c.mode >= 0 ? c.mode : kp->mode, s, B);
        }
        if (kind == ACCEL__AMP_K_NORM) accel__amp_fold(kp->mode, parts, (int)g, res);
        free(parts);
        ++g_launches;
    }
    free(h); free(A); free(s);
    return r;
}

/* ------------------------------------------------------------------------------------------ one case */
typedef struct {
    int kind, mode;
    float f0, f1;
    double p;
    unsigned long long index_offset;
    int sat;
} job;

enum { MAXT = 340 };
typedef struct {
    int n;
    int ta[MAXT], tb[MAXT], slot[MAXT];
    long long len[MAXT];
    int pa[MAXT], pb[MAXT]; /* element phases */
} list;

static const char *kind_name(int k) {
    static const char *names[] = {"unscale", "convert", "sr", "norm", "scale", "clamp", "fp8q", "fp8d"};
    return names[k];
}

/* Runs job j over list L on both sides: the emulated kernels (grid G x B) and the CPU path; compares every byte of
   every buffer (guards included), found_inf, the norm, the fp8 amaxes. Returns the instance the list got. */
static int run_case(const job *jb, const list *L, int G, int B, int U, int specials, float range) {
    static tbuf ra[MAXT], rb[MAXT], ea[MAXT], eb[MAXT];
    accel__amp_mt *h = (accel__amp_mt *)calloc((size_t)L->n + 1, sizeof *h);
    const int in_place = accel__amp_in_place(jb->kind);
    unsigned int amax_e[8] = {0}, amax_c[8] = {0};
    accel__amp_kp kp;
    accel__amp_part res;
    accel_amp_sr sr;
    double cpu_sum = 0.0;
    long double ref = 0.0L;
    long long n_all = 0;
    uint32_t cpu_bad = 0;
    int i, inst = -1, fails0 = at_failed;
    char ctx[160];
    snprintf(ctx, sizeof ctx, "%s mode %d, %d buffers, grid %d x %d, U %d", kind_name(jb->kind), jb->mode, L->n, G, B,
             U);
    at_context = ctx;
    memset(&kp, 0, sizeof kp);
    kp.mode = jb->kind == ACCEL__AMP_K_FP8Q ? jb->sat : jb->mode;
    kp.f0 = jb->f0; kp.f1 = jb->f1; kp.p = jb->p;
    kp.seed = 0x1234abcdULL; kp.step = 7; kp.index_offset = jb->index_offset;
    kp.amax = amax_e;
    sr.seed = kp.seed; sr.step = kp.step; sr.index_offset = jb->index_offset;
    for (i = 0; i < L->n; ++i) {
        tb_make(&ra[i], L->ta[i], L->len[i], L->pa[i]);
        tb_fill(&ra[i], L->ta[i], L->len[i], range, specials);
        tb_copy(&ea[i], &ra[i]);
        if (!in_place) {
            tb_make(&rb[i], L->tb[i], L->len[i], L->pb[i]);
            tb_copy(&eb[i], &rb[i]);
        }
        h[i].a = ea[i].p; h[i].b = in_place ? NULL : eb[i].p; h[i].n = L->len[i];
        h[i].ta = (unsigned char)L->ta[i]; h[i].tb = (unsigned char)(in_place ? L->ta[i] : L->tb[i]);
        h[i].slot = L->slot[i];
        h[i].scale = jb->kind == ACCEL__AMP_K_FP8Q ? 3.5f : 0.375f;
        n_all += L->len[i];
    }
    /* the CPU path */
    for (i = 0; i < L->n; ++i) {
        size_t n = (size_t)L->len[i];
        void *a = ra[i].p;
        int ta = L->ta[i], tb = L->tb[i];
        long long e;
        switch (jb->kind) {
        case ACCEL__AMP_K_UNSCALE:
            cpu_bad |= ta == ACCEL_F32 ? accel__amp_cpu_unscale_f32((float *)a, n, jb->f0)
                                       : accel__amp_cpu_unscale_16((uint16_t *)a, n, jb->f0, ta == ACCEL_BF16);
            break;
        case ACCEL__AMP_K_CONVERT: accel__amp_cpu_convert(a, (accel_dtype)ta, rb[i].p, (accel_dtype)tb, n, NULL); break;
        case ACCEL__AMP_K_SR: accel__amp_cpu_convert(a, ACCEL_F32, rb[i].p, ACCEL_BF16, n, &sr); break;
        case ACCEL__AMP_K_NORM:
            accel__amp_cpu_norm(a, (accel_dtype)ta, n, jb->mode == ACCEL__AMP_NORM_INF ? HUGE_VAL : jb->p,
                                jb->mode == ACCEL__AMP_NORM_INF, &cpu_sum);
            for (e = 0; e < (long long)n; ++e) { /* long double, the independent reference (finite p = 1, 2) */
                float x = accel__amp_load(a, (accel_dtype)ta, (size_t)e);
                ref += jb->mode == ACCEL__AMP_NORM_P1 ? fabsl((long double)x) : (long double)x * (long double)x;
            }
            break;
        case ACCEL__AMP_K_SCALE: accel__amp_cpu_scale(a, (accel_dtype)ta, n, jb->f0); break;
        case ACCEL__AMP_K_CLAMP: accel__amp_cpu_clamp(a, (accel_dtype)ta, n, jb->f0, jb->f1); break;
        case ACCEL__AMP_K_FP8Q: {
            uint32_t m = accel__amp_cpu_fp8q(a, (accel_dtype)ta, rb[i].p, n, 3.5f, tb == ACCEL_F8_E5M2, jb->sat);
            if (m > amax_c[L->slot[i]]) amax_c[L->slot[i]] = m;
            break;
        }
        case ACCEL__AMP_K_FP8D:
            accel__amp_cpu_fp8d((const uint8_t *)a, ta == ACCEL_F8_E5M2, rb[i].p, (accel_dtype)tb, n, 0.375f);
            break;
        default: break;
        }
    }
    /* the kernels, every access inside a buffer */
    g_nreg = 0;
    g_outside = 0;
    for (i = 0; i < L->n; ++i) {
        reg_add(ea[i].p, (size_t)L->len[i] * (size_t)esz(L->ta[i]));
        if (!in_place) reg_add(eb[i].p, (size_t)L->len[i] * (size_t)esz(L->tb[i]));
    }
    AT_EQ_INT(emulate(jb->kind, h, L->n, &kp, G, B, U, &res, &inst), ACCEL_OK);
    if (jb->kind == ACCEL__AMP_K_NORM && accel__amp_norm_again(kp.mode, &res, (double)n_all)) {
        kp.mode = ACCEL__AMP_NORM_F64;
        kp.p = jb->mode == ACCEL__AMP_NORM_P1 ? 1.0 : 2.0;
        AT_EQ_INT(emulate(jb->kind, h, L->n, &kp, G, B, U, &res, NULL), ACCEL_OK);
    }
    AT_EQ_INT(g_outside, 0);
    g_nreg = 0;
    for (i = 0; i < L->n; ++i) {
        AT_CHECK(memcmp(ra[i].mem, ea[i].mem, ra[i].bytes) == 0);
        if (!in_place) AT_CHECK(memcmp(rb[i].mem, eb[i].mem, rb[i].bytes) == 0);
    }
    if (jb->kind == ACCEL__AMP_K_UNSCALE) AT_EQ_INT(res.flag, cpu_bad != 0);
    if (jb->kind == ACCEL__AMP_K_FP8Q) AT_CHECK(memcmp(amax_c, amax_e, sizeof amax_c) == 0);
    if (jb->kind == ACCEL__AMP_K_NORM) {
        double got = kp.mode == ACCEL__AMP_NORM_INF ? (double)accel_bits_f32(res.bits) : res.sum;
        if (cpu_sum != cpu_sum || got != got) AT_CHECK(cpu_sum != cpu_sum && got != got); /* NaN on both sides */
        else if (jb->mode == ACCEL__AMP_NORM_INF || isinf(cpu_sum)) AT_CHECK(got == cpu_sum);
        else {
            AT_NEAR(got, cpu_sum, 1e-12 * cpu_sum);
            if (jb->mode != ACCEL__AMP_NORM_F64) AT_NEAR(got, (double)ref, 1e-12 * (double)ref);
        }
    }
    for (i = 0; i < L->n; ++i) {
        free(ra[i].mem); free(ea[i].mem);
        if (!in_place) { free(rb[i].mem); free(eb[i].mem); }
    }
    free(h);
    if (at_failed != fails0) {
        fprintf(stderr, "  (failing case: %s, instance %d, buffers:", kind_name(jb->kind), inst);
        for (i = 0; i < L->n && i < 8; ++i)
            fprintf(stderr, " [%s->%s n=%lld phase %d/%d]", accel_dtype_name((accel_dtype)L->ta[i]),
                    accel_dtype_name((accel_dtype)L->tb[i]), L->len[i], L->pa[i], L->pb[i]);
        fprintf(stderr, ")\n");
    }
    at_context = "";
    return inst;
}

/* ------------------------------------------------------------------------------------------ the cases */
/* launch shapes: {G, B} (G = 0: a block per chunk) and U (0: the instance's) */
static const int grids[][2] = {{1, 32}, {2, 32}, {3, 64}, {7, 32}, {5, 96}, {13, 64}, {4, 256}, {0, 32}, {0, 64},
                               {0, 128}, {0, 256}};
enum { NGRID = (int)(sizeof grids / sizeof grids[0]) };
static const int us[] = {0, 1, 2, 4, 8};
enum { NU = (int)(sizeof us / sizeof us[0]) };
static const long long small_sizes[] = {0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 100, 257, 1000, 4097};
enum { NSMALL = (int)(sizeof small_sizes / sizeof small_sizes[0]) };

static const int f16s[3] = {ACCEL_F32, ACCEL_BF16, ACCEL_F16};
static const int all5[5] = {ACCEL_F32, ACCEL_BF16, ACCEL_F16, ACCEL_F8_E4M3, ACCEL_F8_E5M2};

/* dtypes a kind takes: source (and destination) of buffer i, drawn at random; uniform = 1 keeps the first pick */
static void pick_types(int kind, int *ta, int *tb) {
    switch (kind) {
    case ACCEL__AMP_K_CONVERT:
        do { *ta = all5[rnd32() % 5]; *tb = all5[rnd32() % 5]; } while (*ta == *tb);
        break;
    case ACCEL__AMP_K_SR: *ta = ACCEL_F32; *tb = ACCEL_BF16; break;
    case ACCEL__AMP_K_FP8Q: *ta = f16s[rnd32() % 3]; *tb = (rnd32() & 1) ? ACCEL_F8_E5M2 : ACCEL_F8_E4M3; break;
    case ACCEL__AMP_K_FP8D: *ta = (rnd32() & 1) ? ACCEL_F8_E5M2 : ACCEL_F8_E4M3; *tb = f16s[rnd32() % 3]; break;
    default: *ta = *tb = f16s[rnd32() % 3]; break;
    }
}
static void make_job(job *jb, int kind) {
    static const float invs[] = {0.5f, 1.0f, 3.0f, 1.0f / 65536.0f};
    memset(jb, 0, sizeof *jb);
    jb->kind = kind;
    jb->f0 = kind == ACCEL__AMP_K_UNSCALE ? invs[rnd32() % 4] : kind == ACCEL__AMP_K_CLAMP ? -0.25f : 0.37f;
    jb->f1 = 0.25f;
    jb->sat = (int)(rnd32() & 1);
    jb->index_offset = rnd32() % 9;
    if (kind == ACCEL__AMP_K_NORM) {
        static const double ps[] = {2.0, 1.0, HUGE_VAL, 3.0};
        int m = (int)(rnd32() % 4);
        jb->mode = m == 0 ? ACCEL__AMP_NORM_P2 : m == 1 ? ACCEL__AMP_NORM_P1 : m == 2 ? ACCEL__AMP_NORM_INF
                                                                            : ACCEL__AMP_NORM_F64;
        jb->p = ps[m];
    }
}

/* one buffer of every small size at every source / destination phase, each kind with its fp32 (specialised) dtypes and
   a generic pair, on two grids */
static void sweep_single(void) {
    int kind, si, pa, pb, gi, pass;
    for (kind = ACCEL__AMP_K_UNSCALE; kind <= ACCEL__AMP_K_FP8D; ++kind)
        for (pass = 0; pass < 2; ++pass)
            for (si = 0; si < NSMALL; ++si)
                for (pa = 0; pa < 8; ++pa)
                    for (pb = 0; pb < 8; ++pb) {
                        job jb;
                        list L;
                        if (accel__amp_in_place(kind) && pb) continue;
                        make_job(&jb, kind);
                        if (kind == ACCEL__AMP_K_NORM && pass == 0) { jb.mode = ACCEL__AMP_NORM_P2; jb.p = 2.0; }
                        L.n = 1;
                        L.len[0] = small_sizes[si];
                        L.pa[0] = pa; L.pb[0] = pb; L.slot[0] = 0;
                        if (pass == 0) { /* the fp32 specialised instances */
                            L.ta[0] = kind == ACCEL__AMP_K_FP8D ? ACCEL_F8_E4M3 : ACCEL_F32;
                            L.tb[0] = kind == ACCEL__AMP_K_CONVERT || kind == ACCEL__AMP_K_SR ? ACCEL_BF16
                                    : kind == ACCEL__AMP_K_FP8Q ? ACCEL_F8_E5M2 : ACCEL_F32;
                        } else {
                            pick_types(kind, &L.ta[0], &L.tb[0]);
                        }
                        gi = (si + pa + pb) % NGRID;
                        run_case(&jb, &L, grids[gi][0], grids[gi][1], us[(si + 2 * pa + pb + pass) % NU],
                                 (pa + pb + si) % 3 == 0, 3.0f);
                    }
}

/* random lists: 1..12 buffers of mixed sizes, dtypes and phases (or all one dtype) */
static void random_lists(int trials) {
    int t;
    for (t = 0; t < trials; ++t) {
        int kind = (int)(rnd32() % 8), uniform = (int)(rnd32() & 1), i, gi = (int)(rnd32() % NGRID);
        job jb;
        list L;
        make_job(&jb, kind);
        L.n = 1 + (int)(rnd32() % 12);
        for (i = 0; i < L.n; ++i) {
            if (i == 0 || !uniform) pick_types(kind, &L.ta[i], &L.tb[i]);
            else { L.ta[i] = L.ta[0]; L.tb[i] = L.tb[0]; }
            L.len[i] = (rnd32() % 5 == 0) ? 0 : (rnd32() & 1) ? (long long)(rnd32() % 40) : (long long)(rnd32() % 9000);
            L.pa[i] = (int)(rnd32() % 8);
            L.pb[i] = (rnd32() & 1) ? L.pa[i] : (int)(rnd32() % 8);
            L.slot[i] = (int)(rnd32() % 3);
        }
        run_case(&jb, &L, grids[gi][0], grids[gi][1], us[rnd32() % NU], (int)(rnd32() % 3 == 0), 1000.0f);
    }
}

/* more buffers than a launch takes: the list is split into launches, results folded across them */
static void many_buffers(void) {
    int kind;
    for (kind = ACCEL__AMP_K_UNSCALE; kind <= ACCEL__AMP_K_FP8D; ++kind) {
        job jb;
        list L;
        int i;
        make_job(&jb, kind);
        if (kind == ACCEL__AMP_K_NORM) { jb.mode = ACCEL__AMP_NORM_P2; jb.p = 2.0; }
        L.n = 2 * ACCEL__AMP_CAP + 7;
        for (i = 0; i < L.n; ++i) {
            pick_types(kind, &L.ta[i], &L.tb[i]);
            L.len[i] = 1 + (long long)(rnd32() % 300);
            L.pa[i] = (int)(rnd32() % 8); L.pb[i] = L.pa[i];
            L.slot[i] = i % 5;
        }
        run_case(&jb, &L, kind & 1 ? 3 : 0, 64, us[kind % NU], 0, 2.0f);
        AT_EQ_INT(g_launches, 3);
    }
}

/* GPT-2 124M's 148 gradient shapes (sizes / 64, so the CPU gets through): one launch, the fp32 instance */
static void gpt2_list(void) {
    int kind, i, l;
    list L;
    memset(&L, 0, sizeof L);
    L.len[L.n++] = 50257LL * 768 / 64; L.len[L.n++] = 1024LL * 768 / 64;
    for (l = 0; l < 12; ++l) {
        static const long long s[12] = {768, 768, 768LL * 2304, 2304, 768LL * 768, 768, 768, 768, 768LL * 3072, 3072,
                                        3072LL * 768, 768};
        for (i = 0; i < 12; ++i) L.len[L.n++] = s[i] / 64 + (i & 1); /* odd sizes: heads and tails in the list */
    }
    L.len[L.n++] = 768 / 64; L.len[L.n++] = 768 / 64;
    AT_EQ_INT(L.n, 148);
    for (i = 0; i < L.n; ++i) { L.pa[i] = L.pb[i] = 0; L.slot[i] = 0; }
    for (kind = ACCEL__AMP_K_UNSCALE; kind <= ACCEL__AMP_K_FP8Q; ++kind) {
        job jb;
        int inst;
        if (kind == ACCEL__AMP_K_FP8D) continue;
        make_job(&jb, kind);
        if (kind == ACCEL__AMP_K_NORM) { jb.mode = ACCEL__AMP_NORM_P2; jb.p = 2.0; }
        for (i = 0; i < L.n; ++i) {
            L.ta[i] = ACCEL_F32;
            L.tb[i] = kind == ACCEL__AMP_K_FP8Q ? ACCEL_F8_E4M3 : kind == ACCEL__AMP_K_CONVERT || kind == ACCEL__AMP_K_SR
                                                                      ? ACCEL_BF16 : ACCEL_F32;
        }
        inst = run_case(&jb, &L, kind & 1 ? 5 : 0, 256, 0, 0, 1.0f);
        AT_CHECK(inst != ACCEL__AMP_I_GENERIC || kind == ACCEL__AMP_K_CLAMP);
        AT_EQ_INT(g_launches, 1);
    }
}

/* norms where the fp32 sums leave their range, and an accuracy case fp32 alone would fail */
static void norm_ranges(void) {
    static const float scales[] = {1e-30f, 1e-22f, 3e19f, 1e30f, 1.0f};
    int si, sp, m;
    for (m = 0; m < 2; ++m)
        for (si = 0; si < 5; ++si)
            for (sp = 0; sp < 2; ++sp) {
                job jb;
                list L;
                make_job(&jb, ACCEL__AMP_K_NORM);
                jb.mode = m ? ACCEL__AMP_NORM_P1 : ACCEL__AMP_NORM_P2;
                jb.p = m ? 1.0 : 2.0;
                L.n = 2;
                L.ta[0] = L.tb[0] = ACCEL_F32; L.ta[1] = L.tb[1] = ACCEL_F32;
                L.len[0] = 5000; L.len[1] = 301;
                L.pa[0] = L.pb[0] = 1; L.pa[1] = L.pb[1] = 0; L.slot[0] = L.slot[1] = 0;
                run_case(&jb, &L, 7, 64, us[(si + sp) % NU], sp, scales[si]);
            }
    { /* all zeros: the total is below n * 2^-100, so the float64 pass runs, and gives 0 */
        accel__amp_mt h;
        accel__amp_kp kp;
        accel__amp_part res;
        float *z = (float *)calloc(1000, sizeof(float));
        memset(&h, 0, sizeof h);
        memset(&kp, 0, sizeof kp);
        h.a = z; h.n = 1000; h.ta = h.tb = ACCEL_F32;
        kp.mode = ACCEL__AMP_NORM_P2;
        AT_EQ_INT(emulate(ACCEL__AMP_K_NORM, &h, 1, &kp, 2, 32, 0, &res, NULL), ACCEL_OK);
        AT_CHECK(res.sum == 0.0 && accel__amp_norm_again(ACCEL__AMP_NORM_P2, &res, 1000.0));
        free(z);
    }
    { /* 2^20 equal values whose squares fp32 alone cannot add up (1 + 2^-12 each): the exact total within 1e-12 */
        enum { N = 1 << 20 };
        float *x = (float *)malloc(sizeof(float) * N);
        accel__amp_mt h;
        accel__amp_kp kp;
        accel__amp_part res;
        long double want = (long double)N * (1.0L + 0x1p-13L) * (1.0L + 0x1p-13L);
        int i;
        for (i = 0; i < N; ++i) x[i] = 1.0f + 0x1p-13f;
        memset(&h, 0, sizeof h);
        memset(&kp, 0, sizeof kp);
        h.a = x; h.n = N; h.ta = h.tb = ACCEL_F32;
        kp.mode = ACCEL__AMP_NORM_P2;
        AT_EQ_INT(emulate(ACCEL__AMP_K_NORM, &h, 1, &kp, 3, 64, 0, &res, NULL), ACCEL_OK);
        AT_CHECK(!accel__amp_norm_again(ACCEL__AMP_NORM_P2, &res, (double)N));
        AT_NEAR(res.sum, (double)want, 1e-13 * (double)want);
        free(x);
    }
}

/* every launch shape the macros can select: U in {1, 2, 4, 8} x blocks of 32..1024 threads x (a block per chunk,
   grids of 1, 3 and 7 blocks), each over random lists whose buffers span up to three chunks of that shape (so the
   unchecked fast path, the bounded last chunk and the walk across buffers all run) */
static void shapes(void) {
    static const int uu[] = {1, 2, 4, 8}, bb[] = {32, 64, 128, 256, 512, 1024}, gg[] = {0, 1, 3, 7};
    int ui, bi, gi;
    for (ui = 0; ui < 4; ++ui)
        for (bi = 0; bi < 6; ++bi)
            for (gi = 0; gi < 4; ++gi) {
                int kind = (int)(rnd32() % 8), uniform = (int)(rnd32() & 1), i;
                long long span = 3LL * uu[ui] * bb[bi] * 4 + 50; /* three chunks of fp32 units, and a bit */
                job jb;
                list L;
                make_job(&jb, kind);
                L.n = 1 + (int)(rnd32() % 6);
                for (i = 0; i < L.n; ++i) {
                    if (i == 0 || !uniform) pick_types(kind, &L.ta[i], &L.tb[i]);
                    else { L.ta[i] = L.ta[0]; L.tb[i] = L.tb[0]; }
                    L.len[i] = (rnd32() % 6 == 0) ? (long long)(rnd32() % 40) : (long long)(rnd32() % span);
                    L.pa[i] = (rnd32() & 1) ? 0 : (int)(rnd32() % 8);
                    L.pb[i] = (rnd32() & 1) ? L.pa[i] : (int)(rnd32() % 8);
                    L.slot[i] = (int)(rnd32() % 3);
                }
                run_case(&jb, &L, gg[gi], bb[bi], uu[ui], (int)(rnd32() % 3 == 0), 100.0f);
            }
}

/* the plan: heads, vector flags, unit counts, and every element in exactly one unit */
static void plan_cover(void) {
    int pa, pb, kind, dti;
    long long n;
    for (kind = ACCEL__AMP_K_UNSCALE; kind <= ACCEL__AMP_K_FP8D; ++kind)
        for (dti = 0; dti < 3; ++dti)
            for (pa = 0; pa < 8; ++pa)
                for (pb = 0; pb < 8; ++pb)
                    for (n = 0; n < 70; n += 1 + n / 8) {
                        static unsigned char mem_a[2048], mem_b[2048];
                        accel__amp_mt d;
                        long long units, q, e, i;
                        unsigned char *seen = (unsigned char *)calloc((size_t)n + 1, 1);
                        int c, vwl, ta, tb, in_place = accel__amp_in_place(kind), sr = kind == ACCEL__AMP_K_SR;
                        uintptr_t base_a = ((uintptr_t)mem_a + 63) & ~(uintptr_t)63, base_b = ((uintptr_t)mem_b + 63) & ~(uintptr_t)63;
                        memset(&d, 0, sizeof d);
                        ta = kind == ACCEL__AMP_K_FP8D ? ACCEL_F8_E4M3 : f16s[dti];
                        tb = in_place ? ta : sr ? ACCEL_BF16 : kind == ACCEL__AMP_K_FP8Q ? ACCEL_F8_E5M2
                           : kind == ACCEL__AMP_K_FP8D ? f16s[dti] : all5[(dti + 1) % 5];
                        if (sr) ta = ACCEL_F32;
                        d.a = (void *)(base_a + (uintptr_t)(pa * esz(ta)));
                        d.b = (void *)(base_b + (uintptr_t)(pb * esz(tb)));
                        d.n = n; d.ta = (unsigned char)ta; d.tb = (unsigned char)tb;
                        units = accel__amp_plan(&d, in_place, sr, (unsigned long long)pb);
                        vwl = d.vwl & 0x7f;
                        AT_EQ_INT(1 << vwl, 16 / (esz(ta) > esz(tb) || in_place ? esz(ta) : esz(tb)));
                        for (q = 0; q < units; ++q) {
                            accel__amp_unit(&d, vwl, q, &e, &c);
                            AT_CHECK(c >= 1 && c <= (1 << vwl) && e >= 0 && e + c <= n);
                            for (i = e; i < e + c && i < n; ++i) seen[i]++;
                            if (q < accel__amp_nv(&d, vwl) && (d.vwl & 0x80)) { /* a vector unit: aligned streams */
                                AT_EQ_INT(((uintptr_t)d.a + (uintptr_t)(e * esz(ta))) % (uintptr_t)(esz(ta) << vwl), 0);
                                if (!in_place)
                                    AT_EQ_INT(((uintptr_t)d.b + (uintptr_t)(e * esz(tb))) % (uintptr_t)(esz(tb) << vwl), 0);
                                if (sr) AT_EQ_INT(((unsigned long long)pb + (unsigned long long)e) & 3u, 0);
                            }
                        }
                        for (i = 0; i < n; ++i) AT_EQ_INT(seen[i], 1);
                        /* aligned whenever the phases allow it (in place: always) */
                        if (in_place || (pa % (1 << vwl) == pb % (1 << vwl) && esz(ta) == esz(tb)))
                            if (!sr) AT_CHECK((d.vwl & 0x80) != 0);
                        free(seen);
                    }
}

int main(int argc, char **argv) {
    accel_desc d;
    int trials = argc > 1 ? atoi(argv[1]) : 1500;
    memset(&d, 0, sizeof d);
    d.cpu = 1; d.no_mpi = 1;
    if (accel_init(&cpu, &d) != ACCEL_OK) { fprintf(stderr, "%s\n", accel_last_error(&cpu)); return 1; }
    plan_cover();
    sweep_single();
    random_lists(trials);
    many_buffers();
    shapes();
    gpt2_list();
    norm_ranges();
    { /* a buffer not aligned to its element size is refused, and nothing is planned */
        accel__amp_mt h;
        accel__amp_kp kp;
        int k = -1;
        float f[4];
        memset(&h, 0, sizeof h);
        memset(&kp, 0, sizeof kp);
        h.a = (unsigned char *)f + 2; h.n = 1; h.ta = h.tb = ACCEL_F32;
        AT_EQ_INT(accel__amp_prepare(&cpu, ACCEL__AMP_K_SCALE, &h, 1, &kp, &k, "x"), ACCEL_ERR_INVALID_ARGUMENT);
        AT_CONTAINS(accel_last_error(&cpu), "not aligned to its element size");
        AT_EQ_INT(k, 0);
    }
    { /* the unscale shape for large buffers: by the launch's mean unit count, only for the F32 unscale instance */
        accel__amp_mt h[3];
        accel__amp_cfg c;
        memset(h, 0, sizeof h);
        h[0].nu = 3 * ACCEL__AMP_BIG_UNITS - 2; h[1].nu = 1; h[2].nu = 0; /* mean: BIG_UNITS - 1/3 */
        accel__amp_pick(ACCEL__AMP_K_UNSCALE, 0, ACCEL_F32, ACCEL_F32, &c);
        accel__amp_pick_big(ACCEL__AMP_K_UNSCALE, h, 3, &c);
        AT_EQ_INT(c.u, ACCEL__AMP_U_UNSCALE);
        h[1].nu = 2;
        accel__amp_pick_big(ACCEL__AMP_K_UNSCALE, h, 3, &c);
        AT_EQ_INT(c.u, ACCEL__AMP_U_UNSCALE_BIG);
        accel__amp_pick(ACCEL__AMP_K_UNSCALE, 0, ACCEL_F16, ACCEL_F16, &c); /* the generic instance keeps its U */
        accel__amp_pick_big(ACCEL__AMP_K_UNSCALE, h, 3, &c);
        AT_EQ_INT(c.u, ACCEL__AMP_U_ANY);
        accel__amp_pick(ACCEL__AMP_K_SCALE, 0, ACCEL_F32, ACCEL_F32, &c);
        accel__amp_pick_big(ACCEL__AMP_K_SCALE, h, 3, &c);
        AT_EQ_INT(c.u, ACCEL__AMP_U_FAST);
    }
    accel_shutdown(&cpu);
    return at_finish("amp_grid");
}
