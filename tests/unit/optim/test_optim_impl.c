/* accel_optim.h's private math in a TU of its own (it defines ACCEL_IMPLEMENTATION to reach the static helpers):
   - the exact fused multiply-add emulation against the C library's fmaf (glibc's is correctly rounded), on random
     triples, near-cancellations and double-rounding cases;
   - every way a step can run gives the same bits: the blocked CPU loop (generic, and its AVX2+FMA twin when the
     CPU has it), the per-element function (accel__optim_elem) with the hardware fma and with the emulation, and the
     CUDA kernels' per-thread work (accel__optim_vec_thread / _gen_thread, with the launch grouping, chunk numbering
     and job lookup of the launcher) run here for every (block, thread) of the grid, with 256 and with 32 threads
     per block — for AdamW (mul+add and lerp, amsgrad, F32 and BF16 moments), SGD (momentum, nesterov, weight decay,
     first step), F32/BF16/F16 gradients, unscale and clip coefficients, maximize, and BF16/F16 model copies (nearest
     and stochastic). NaN compares equal to NaN (payloads may differ);
   - the vector path at every alignment (parameter, gradient and copy offsets of 0..7 elements, mutually aligned or
     not), lengths around the vector and chunk sizes, and a mixed list in one step: every 16-byte vector access (and
     8-byte half of a 16-bit stream in the split layout) is aligned (counted through the ACCEL__OPTIM_VEC_CHECK
     hooks), the vector path is taken where the streams allow it, and the bits equal the per-element function's (the
     split layout's permutation included: an element updated twice or never differs);
   - the draws of 8 and of 4 elements (accel__optim_bits8, _bits4) at every index modulo 4 equal
     accel_optim_sr_bits, and the job
     lookup equals a linear count. So the kernels' index, tail and alignment logic is checked on the CPU before any
     GPU runs it. */
#include <stdint.h>
static long vec_access, vec_misaligned, fallbacks;
#define ACCEL__OPTIM_VEC_CHECK(ptr) (++vec_access, vec_misaligned += ((uintptr_t)(ptr) & 15u) != 0)
#define ACCEL__OPTIM_VEC_CHECK8(ptr) (++vec_access, vec_misaligned += ((uintptr_t)(ptr) & 7u) != 0)
#define ACCEL__OPTIM_FALLBACK_NOTE() (++fallbacks)
#ifndef OPTIM_VARIANT
#define OPTIM_VARIANT "default"
#endif
#define ACCEL_IMPLEMENTATION
#include "accel.h"
#include "accel_optim.h"
#include "accel_test.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rs = 0xC0FFEE1234567ull;
static uint32_t rnd32(void) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return (uint32_t)(rs >> 16); }
static float bitsf(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t fbits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static int same_f(float a, float b) { return (a != a && b != b) || fbits(a) == fbits(b); }

static void test_fma(void) {
    long i, bad = 0, n = 4000000;
    at_context = "fma emulation";
    for (i = 0; i < n; ++i) {
        float a, b, c, x, y;
        int mode = (int)(i % 5);
        a = bitsf((rnd32() & 0x807fffffu) | ((uint32_t)(64 + rnd32() % 128) << 23));
        b = bitsf((rnd32() & 0x807fffffu) | ((uint32_t)(64 + rnd32() % 128) << 23));
        c = bitsf((rnd32() & 0x807fffffu) | ((uint32_t)(64 + rnd32() % 128) << 23));
        if (mode == 1) c = nextafterf(-(float)((double)a * b), (rnd32() & 1) ? INFINITY : -INFINITY); /* cancellation */
        if (mode == 2) { /* integer products: where rounding twice differs */
            a = (float)(1 + (rnd32() & 0xffffff)); b = (float)(1 + (rnd32() & 0xfff));
            c = ldexpf((float)(rnd32() & 0xffffff), -(int)(rnd32() % 40)) * ((rnd32() & 1) ? 1.0f : -1.0f);
        }
        if (mode == 3) c = bitsf(rnd32()); /* anything: subnormals, Inf, NaN */
        if (mode == 4) { a = bitsf(rnd32()); b = bitsf(rnd32()); }
        x = fmaf(a, b, c);
        y = accel__optim_fma_emu(a, b, c);
        if (!same_f(x, y)) {
            if (bad < 5) fprintf(stderr, "fma(%a, %a, %a): libm %a, emulation %a\n", (double)a, (double)b, (double)c,
                                 (double)x, (double)y);
            ++bad;
        }
    }
    AT_EQ_INT(bad, 0);
    printf("fma emulation: %ld triples, %ld differences from fmaf\n", n, bad);
}

/* ------------------------------------------------------------------ the CUDA launch, run on the CPU */
/* What accel__optim_cuda_step enqueues, launch by launch, block by block and thread by thread: the jobs grouped by
   class, each class cut into launches of at most ACCEL__OPTIM_CAP jobs (accel__optim_launch_fill: the kernel
   parameter), each chunk's job found by the kernels' lookup, then each thread's work (accel__optim_chunk) with the
   flags the launcher passes as template arguments. The coefficients live in the grouped job array, as the
   coefficient kernel leaves them on the device (skip: found_inf). The threads of a block run one after the other
   here: the result equals the GPU's only if no two threads touch the same element, which the bit comparison then
   checks. */
static long sim_launches;
static void sim_launch(const accel__optim_job *jobs, int nj, const accel__optim_hyper *hy, const accel__optim_in *in,
                       int bd, int skip) {
    accel__optim_job *sorted = (accel__optim_job *)malloc(sizeof(accel__optim_job) * (size_t)(nj + 1));
    accel__optim_largs *L = (accel__optim_largs *)malloc(sizeof *L);
    int first[ACCEL__OPTIM_CLASSES + 1], q, a, b, i, tid, bad_lookup = 0;
    long long nch[ACCEL__OPTIM_CLASSES], c;
    accel__optim_classify(jobs, nj, hy, sorted, first, nch);
    AT_EQ_INT(first[ACCEL__OPTIM_CLASSES], nj);
    for (i = 0; i < nj; ++i) {
        AT_EQ_INT(sorted[i].d.kj, i);
        sorted[i].k.skip = skip;
    }
    for (q = 0; q < ACCEL__OPTIM_CLASSES; ++q) {
        int vec, gt, model, sr;
        long long covered = 0;
        accel__optim_class_args(q, hy, &vec, &gt, &model, &sr);
        for (a = first[q]; a < first[q + 1]; a = b) {
            b = accel__optim_launch_fill(L, sorted, first, nch, q, a, sorted, hy, in);
            AT_CHECK(b > a && b - a <= ACCEL__OPTIM_CAP && L->nj == b - a);
            ++sim_launches;
            covered += L->nchunks;
            for (c = 0; c < L->nchunks; ++c) {
                int t = accel__optim_find(L->begins, L->nj, c), k, count = 0;
                const accel__optim_dj *d = &L->d[t];
                for (k = 0; k < L->nj; ++k) count += L->begins[k] <= c; /* the lookup's definition */
                bad_lookup += t != count - 1 || accel__optim_class(d) != q || d->kj != a + t || c < L->begins[t] ||
                              L->chunk != (sr || hy->mom_bf16 ? ACCEL_OPTIM_CHUNK_SR : ACCEL_OPTIM_CHUNK) ||
                              c >= L->begins[t] + (d->n + L->chunk - 1) / L->chunk;
                for (tid = 0; tid < bd; ++tid)
                    accel__optim_chunk(L, c, tid, bd, vec, gt, model, sr, hy->mom_bf16, NULL);
            }
        }
        AT_EQ_INT(covered, nch[q]); /* the launches of a class cover its chunks once */
    }
    AT_EQ_INT(bad_lookup, 0);
    free(sorted);
    free(L);
}

/* -------------------------------------------------------------------------------- the step paths */
enum { NV = 6 }; /* generic loop, AVX2 loop, element (hw fma), element (emulated fma), launch with 256 / 32 threads */
typedef struct {
    float *p, *m, *v, *vm;
    uint16_t *m16, *v16, *model;
} bufs;

static void *alloc16(size_t bytes) { /* 64-byte aligned, so that offsets in elements are offsets from a boundary */
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 1) != 0) { fprintf(stderr, "out of memory\n"); exit(1); }
    return p;
}
static void bufs_alloc(bufs *b, size_t n) {
    b->p = (float *)alloc16(4 * n); b->m = (float *)alloc16(4 * n); b->v = (float *)alloc16(4 * n);
    b->vm = (float *)alloc16(4 * n); b->model = (uint16_t *)alloc16(2 * n);
    b->m16 = (uint16_t *)alloc16(2 * n); b->v16 = (uint16_t *)alloc16(2 * n);
}
static void bufs_free(bufs *b) {
    free(b->p); free(b->m); free(b->v); free(b->vm); free(b->model); free(b->m16); free(b->v16);
}
static void bufs_copy(bufs *d, const bufs *s, size_t n) {
    memcpy(d->p, s->p, 4 * n); memcpy(d->m, s->m, 4 * n); memcpy(d->v, s->v, 4 * n); memcpy(d->vm, s->vm, 4 * n);
    memcpy(d->model, s->model, 2 * n); memcpy(d->m16, s->m16, 2 * n); memcpy(d->v16, s->v16, 2 * n);
}
static size_t bufs_diff(const bufs *a, const bufs *b, size_t n) {
    size_t i, d = 0;
    for (i = 0; i < n; ++i)
        d += !same_f(a->p[i], b->p[i]) + !same_f(a->m[i], b->m[i]) + !same_f(a->v[i], b->v[i]) +
             !same_f(a->vm[i], b->vm[i]) + (a->model[i] != b->model[i]) + (a->m16[i] != b->m16[i]) +
             (a->v16[i] != b->v16[i]);
    return d;
}

static void fill_grads(void *g, int gt, size_t n) {
    size_t i;
    for (i = 0; i < n; ++i) {
        float gv = (float)((int)(rnd32() % 20001) - 10000) * 1e-3f;
        if (i % 97 == 5) gv = NAN;
        if (i % 89 == 7) gv = INFINITY;
        if (i % 83 == 11) gv = 0.0f; /* with zero moments: the fast sequences' zero cases */
        if (i % 79 == 13) gv = -1e-30f; /* its square underflows */
        if (gt == (int)ACCEL_F32) ((float *)g)[i] = gv;
        else if (gt == (int)ACCEL_BF16) ((uint16_t *)g)[i] = accel_f32_to_bf16(gv);
        else ((uint16_t *)g)[i] = accel_f32_to_f16(gv);
    }
}
static void fill_state(bufs *b, size_t n) {
    size_t i;
    for (i = 0; i < n; ++i) {
        b->p[i] = (float)((int)(rnd32() % 2001) - 1000) * 1e-3f;
        b->m[i] = (float)((int)(rnd32() % 2001) - 1000) * 1e-4f;
        b->v[i] = (float)(rnd32() % 1000) * 1e-6f;
        if (i % 83 == 11) b->m[i] = b->v[i] = 0.0f;
        if (i % 71 == 17) { b->m[i] = -3e-35f; b->v[i] = 1e-39f; } /* outside the fast sequences' range */
        b->vm[i] = (float)(rnd32() % 1000) * 1e-6f;
        b->m16[i] = accel_f32_to_bf16(b->m[i] * 0.7f);
        b->v16[i] = accel_f32_to_bf16(b->v[i] * 1.3f);
        b->model[i] = 0;
    }
}

static void run_config(int kind, int ams, int nesterov, int gt, int mt, int stochastic, int has_inv, int has_coef,
                       int neg, double wd, unsigned long long t, int mom16) {
    static const size_t sizes[] = {1, 15, 16, 17, 1000, 4099, 8192 + 13};
    size_t si;
    for (si = 0; si < sizeof sizes / sizeof sizes[0]; ++si) {
        size_t n = sizes[si];
        bufs b[NV];
        void *g = alloc16(4 * n);
        accel__optim_hyper hy;
        accel__optim_in in;
        accel__optim_job jb;
        int w;
        memset(&hy, 0, sizeof hy);
        hy.beta1 = kind == ACCEL__OPTIM_K_ADAMW_LERP && t == 3 ? 0.3 : 0.9; /* the large-weight lerp branch too */
        hy.beta2 = 0.999;
        hy.eps = 1e-8;
        hy.momentum = kind >= ACCEL__OPTIM_K_SGD ? 0.9 : 0.0;
        hy.dampening = nesterov ? 0.0 : 0.2;
        hy.kind = kind;
        hy.amsgrad = ams;
        hy.nesterov = nesterov;
        hy.maximize = neg;
        hy.stochastic = stochastic;
        hy.mom_bf16 = mom16;
        hy.sr_seed = 4242;
        memset(&in, 0, sizeof in);
        in.has_inv = has_inv; in.inv = 0.0123f;
        in.has_coef = has_coef;
        in.neg = neg;
        for (w = 0; w < NV; ++w) bufs_alloc(&b[w], n);
        fill_grads(g, gt, n);
        fill_state(&b[0], n);
        for (w = 1; w < NV; ++w) bufs_copy(&b[w], &b[0], n);
        memset(&jb, 0, sizeof jb);
        jb.d.g = g;
        jb.d.gt = gt;
        jb.d.mt = mt;
        jb.d.n = (long long)n;
        jb.lr = 0.01;
        jb.wd = wd;
        jb.d.index = 12345 + (unsigned long long)(t & 3u); /* the draws at every index modulo 4 */
        accel__optim_host_coefs(&hy, jb.lr, jb.wd, t, 0.77f, &jb.k);
        for (w = 0; w < NV; ++w) {
            jb.d.p = b[w].p;
            jb.d.m = kind == ACCEL__OPTIM_K_SGD ? NULL : mom16 ? (void *)b[w].m16 : (void *)b[w].m;
            jb.d.v = kind <= ACCEL__OPTIM_K_ADAMW_LERP ? (mom16 ? (void *)b[w].v16 : (void *)b[w].v) : NULL;
            jb.d.vmax = ams ? b[w].vm : NULL;
            jb.d.model = mt ? (void *)b[w].model : NULL;
            jb.d.head = accel__optim_vec_head(&jb.d, &hy);
            if (w == 0) accel__optim_cpu_generic(&jb, 1, &hy, &in);
            else if (w == 1) {
#ifdef ACCEL__OPTIM_X86_DISPATCH
                if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
                    accel__optim_cpu_avx2(&jb, 1, &hy, &in);
                else accel__optim_cpu_generic(&jb, 1, &hy, &in);
#else
                accel__optim_cpu_generic(&jb, 1, &hy, &in);
#endif
            } else if (w <= 3) {
                long long e;
                for (e = 0; e < jb.d.n; ++e) accel__optim_elem(&jb.d, &jb.k, &hy, &in, e, w == 2);
            } else {
                long va = vec_access;
                int vec_expected = (kind == ACCEL__OPTIM_K_ADAMW || kind == ACCEL__OPTIM_K_ADAMW_LERP) && !ams &&
                                   gt != (int)ACCEL_F16 && mt != (int)ACCEL_F16; /* 64-byte aligned buffers */
                AT_EQ_INT(jb.d.head >= 0, vec_expected);
                sim_launch(&jb, 1, &hy, &in, w == 4 ? 256 : 32, 0);
                if (vec_expected && n >= 8) AT_CHECK(vec_access > va);
            }
        }
        for (w = 1; w < NV; ++w) {
            size_t d = bufs_diff(&b[0], &b[w], n);
            if (d)
                fprintf(stderr, "kind %d ams %d nest %d gt %d mt %d sr %d inv %d coef %d neg %d wd %g t %llu mom16 %d "
                        "n %zu: path %d differs in %zu values\n", kind, ams, nesterov, gt, mt, stochastic, has_inv,
                        has_coef, neg, wd, t, mom16, n, w, d);
            AT_EQ_INT(d, 0);
        }
        for (w = 0; w < NV; ++w) bufs_free(&b[w]);
        free(g);
    }
}

static void test_paths(void) {
    static const int gts[3] = {ACCEL_F32, ACCEL_BF16, ACCEL_F16};
    static const int mts[4][2] = {{0, 0}, {ACCEL_BF16, 0}, {ACCEL_BF16, 1}, {ACCEL_F16, 0}};
    int kind, ams, nest, gi, mi, flags, mom16;
    unsigned long long t;
    at_context = "step paths";
    vec_misaligned = 0;
    for (kind = ACCEL__OPTIM_K_ADAMW; kind <= ACCEL__OPTIM_K_SGD_MOM; ++kind)
        for (ams = 0; ams < 2; ++ams) {
            if (ams && kind >= ACCEL__OPTIM_K_SGD) continue;
            for (nest = 0; nest < 2; ++nest) {
                if (nest && kind != ACCEL__OPTIM_K_SGD_MOM) continue;
                for (mom16 = 0; mom16 < 2; ++mom16) {
                    if (mom16 && (kind >= ACCEL__OPTIM_K_SGD || ams)) continue;
                    for (gi = 0; gi < 3; ++gi)
                        for (mi = 0; mi < 4; ++mi)
                            for (t = 1; t <= 3; t += 2) {
                                flags = (int)(rnd32() % 8);
                                run_config(kind, ams, nest, gts[gi], mts[mi][0], mts[mi][1], flags & 1,
                                           (flags >> 1) & 1, (flags >> 2) & 1, (gi + mi) % 2 ? 0.1 : 0.0, t, mom16);
                            }
                }
            }
        }
    AT_EQ_INT(vec_misaligned, 0);
#ifdef ACCEL__OPTIM_X86_DISPATCH
    printf("step paths: generic loop, AVX2+FMA loop (%s on this CPU), per-element with hardware fma and with "
           "emulation, the CUDA launch (256 and 32 threads per block)\n",
           __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? "run" : "not available");
#else
    printf("step paths: generic loop, per-element with hardware fma and with emulation, the CUDA launch (no x86 "
           "dispatch in this build)\n");
#endif
}

/* ------------------------------------------------------------------ alignments, lengths, mixed lists */
/* A list of AdamW jobs in one launch: each job's parameter, gradient and copy start at offsets 0..7 elements from
   a 64-byte boundary (mostly the same offset, sometimes not), its moments at the parameter's offset modulo 8
   (accel_optim_create's layout), lengths 0 and around the vector (8) and chunk (ACCEL_OPTIM_CHUNK, _SR) sizes;
   F32/BF16/F16 gradients, BF16/F16/no copies, F32 or BF16 moments, with and without unscale, clip, maximize, stochastic
   rounding. The launch with 256 and with 32 threads per block, each against accel__optim_elem on every element. */
enum { NJ = 24, NCOPY = 5 }; /* copies: the element function, the launch with 256 and with 32 threads, the launch
                                 of a skipped step (found_inf), the untouched values */
static const size_t align_lens[] = {0, 1, 5, 7, 8, 9, 15, 16, 23, 100, ACCEL_OPTIM_CHUNK - 3, ACCEL_OPTIM_CHUNK,
                                    ACCEL_OPTIM_CHUNK + 5, ACCEL_OPTIM_CHUNK + 11, 2 * ACCEL_OPTIM_CHUNK + 1,
                                    ACCEL_OPTIM_CHUNK_SR - 3, ACCEL_OPTIM_CHUNK_SR + 5, 2 * ACCEL_OPTIM_CHUNK_SR + 1};
typedef struct {
    int op, og, om;                 /* element offsets of the parameter, gradient and copy from a 64-byte boundary */
    unsigned char *mem[NCOPY][5];   /* per copy: p, m, v, model, g */
} ajob;

/* Copy k of job j: its own buffers at the job's offsets, holding the same values as copy 0. */
static void ajob_place(ajob *a, accel__optim_dj *j, int k, size_t ms, const accel__optim_dj *from) {
    size_t n = (size_t)j->n, gs = j->gt == (int)ACCEL_F32 ? 4u : 2u;
    int q;
    for (q = 0; q < 5; ++q) a->mem[k][q] = (unsigned char *)alloc16(4 * (n + 16));
    j->p = (float *)a->mem[k][0] + a->op;
    j->m = a->mem[k][1] + ms * (size_t)(a->op % 8);
    j->v = a->mem[k][2] + ms * (size_t)(a->op % 8);
    j->model = j->mt ? (void *)((uint16_t *)a->mem[k][3] + a->om) : NULL;
    j->g = a->mem[k][4] + gs * (size_t)a->og;
    if (from) {
        memcpy(j->p, from->p, 4 * n);
        memcpy(j->m, from->m, ms * n);
        memcpy(j->v, from->v, ms * n);
        memcpy((void *)j->g, from->g, gs * n);
        if (j->model) memset(j->model, 0, 2 * n);
    }
}

static void test_alignment(void) {
    int round, mom16;
    long vec_jobs = 0, gen_jobs = 0;
    at_context = "alignment";
    vec_misaligned = 0;
    for (round = 0; round < (ACCEL_OPTIM_CHUNK_SR > 8192 ? 32 : 64); ++round) /* rounds & 31: every flag combination */
        for (mom16 = 0; mom16 < 2; ++mom16) {
            ajob aj[NJ];
            accel__optim_job jobs[NCOPY][NJ];
            accel__optim_hyper hy;
            accel__optim_in in;
            const size_t ms = mom16 ? 2u : 4u;
            const int sr = round & 1;
            int i, k, q;
            size_t diffs = 0;
            memset(&hy, 0, sizeof hy);
            hy.beta1 = 0.9; hy.beta2 = 0.999; hy.eps = 1e-8;
            hy.kind = (round & 2) ? ACCEL__OPTIM_K_ADAMW_LERP : ACCEL__OPTIM_K_ADAMW;
            hy.stochastic = sr;
            hy.mom_bf16 = mom16;
            hy.maximize = (round & 4) != 0;
            hy.sr_seed = 0x5151u + (unsigned)round;
            memset(&in, 0, sizeof in);
            in.has_coef = (round & 8) != 0;
            in.has_inv = (round & 16) != 0; in.inv = 1.0f / 1024.0f;
            for (i = 0; i < NJ; ++i) {
                ajob *a = &aj[i];
                accel__optim_job *jj = &jobs[0][i];
                accel__optim_dj *j = &jj->d;
                const int same = rnd32() % 3 != 0; /* mostly mutually aligned streams: the vector path */
                size_t n, e;
                memset(jj, 0, sizeof *jj);
                j->n = (long long)(n = align_lens[rnd32() % (sizeof align_lens / sizeof align_lens[0])]);
                a->op = (int)(rnd32() % 8);
                a->og = same ? a->op : (int)(rnd32() % 8);
                a->om = same ? a->op : (int)(rnd32() % 8);
                j->gt = rnd32() % 5 == 0 ? (int)ACCEL_F16 : rnd32() % 2 ? (int)ACCEL_BF16 : (int)ACCEL_F32;
                j->mt = rnd32() % 4 == 0 ? 0 : (rnd32() % 6 == 0 && !sr) ? (int)ACCEL_F16 : (int)ACCEL_BF16;
                ajob_place(a, j, 0, ms, NULL);
                for (e = 0; e < n; ++e) {
                    j->p[e] = (float)((int)(rnd32() % 2001) - 1000) * 1e-3f;
                    float mv = (float)((int)(rnd32() % 2001) - 1000) * 1e-4f, vv = (float)(rnd32() % 1000) * 1e-6f;
                    if (e % 83 == 11) mv = vv = 0.0f;
                    if (e % 307 == 17) { mv = 2e-36f; vv = 3e-39f; } /* outside the fast sequences' range */
                    if (mom16) {
                        ((uint16_t *)j->m)[e] = accel_f32_to_bf16(mv);
                        ((uint16_t *)j->v)[e] = accel_f32_to_bf16(vv);
                    } else {
                        ((float *)j->m)[e] = mv;
                        ((float *)j->v)[e] = vv;
                    }
                }
                if (j->model) memset(j->model, 0, 2 * n);
                fill_grads((void *)j->g, j->gt, n);
                j->index = 777 + (unsigned long long)(rnd32() % 64);
                jj->param = i;
                accel__optim_host_coefs(&hy, 0.01 + 0.001 * i, i % 2 ? 0.1 : 0.0, 2 + (unsigned long long)(i % 3),
                                        0.625f, &jj->k);
                j->head = accel__optim_vec_head(j, &hy);
                if (same && j->gt != (int)ACCEL_F16 && j->mt != (int)ACCEL_F16) /* the first element where all align */
                    AT_EQ_INT(j->head, (j->gt != (int)ACCEL_F32 || j->mt || mom16) ? (8 - a->op) % 8 : (8 - a->op) % 4);
                if (j->head >= 0) ++vec_jobs;
                else ++gen_jobs;
                for (k = 1; k < NCOPY; ++k) {
                    jobs[k][i] = *jj;
                    ajob_place(a, &jobs[k][i].d, k, ms, j);
                }
            }
            for (i = 0; i < NJ; ++i) { /* copy 0: the element function on every element */
                long long e;
                for (e = 0; e < jobs[0][i].d.n; ++e) accel__optim_elem(&jobs[0][i].d, &jobs[0][i].k, &hy, &in, e, 1);
            }
            sim_launch(jobs[1], NJ, &hy, &in, 256, 0);
            sim_launch(jobs[2], NJ, &hy, &in, 32, 0);
            sim_launch(jobs[3], NJ, &hy, &in, 64, 1);
            for (k = 1; k < NCOPY - 1; ++k)
                for (i = 0; i < NJ; ++i) {
                    const accel__optim_dj *r = &jobs[k < 3 ? 0 : 4][i].d, *s = &jobs[k][i].d;
                    size_t n = (size_t)r->n, e, d = 0;
                    for (e = 0; e < n; ++e) d += !same_f(s->p[e], r->p[e]);
                    d += memcmp(s->m, r->m, ms * n) != 0;
                    d += memcmp(s->v, r->v, ms * n) != 0;
                    if (r->model) d += memcmp(s->model, r->model, 2 * n) != 0;
                    if (d)
                        fprintf(stderr, "round %d mom16 %d launch %d job %d (n %zu, offsets p %d g %d copy %d, gt %d "
                                "mt %d, head %d): %zu differences\n", round, mom16, k, i, n, aj[i].op, aj[i].og,
                                aj[i].om, r->gt, r->mt, r->head, d);
                    diffs += d;
                }
            AT_EQ_INT(diffs, 0);
            for (i = 0; i < NJ; ++i)
                for (k = 0; k < NCOPY; ++k)
                    for (q = 0; q < 5; ++q) free(aj[i].mem[k][q]);
        }
    AT_EQ_INT(vec_misaligned, 0);
    AT_CHECK(vec_jobs > 0 && gen_jobs > 0);
    /* both sides of the fast sequences' range were taken (the host's fast result is wrong where the range is left,
       so a fallback that did not happen shows as a difference above) */
    AT_CHECK(!ACCEL_OPTIM_CUDA_FAST || (fallbacks > 0 && fallbacks * 8 < vec_access));
    printf("alignment: %ld jobs on the vector path, %ld on the generic one, %ld vector accesses, %ld misaligned, "
           "%ld vectors computed again with the IEEE operations, %ld launches\n", vec_jobs, gen_jobs, vec_access,
           vec_misaligned, fallbacks, sim_launches);
}

/* The draws of 8 and of 4 consecutive elements against the documented per-element rule, at every index modulo 4. */
static void test_bits8(void) {
    long bad = 0;
    int i, q;
    at_context = "bits8";
    for (i = 0; i < 4000; ++i) {
        unsigned long long seed = ((unsigned long long)rnd32() << 32) | rnd32(), stream = rnd32() % 1000;
        unsigned long long index = (((unsigned long long)rnd32() << 24) ^ rnd32()) + (unsigned long long)(i % 4);
        uint32_t r[8], r4[4];
        if (i % 3 == 0) stream |= ACCEL__OPTIM_MOMENT_STREAM;
        accel__optim_bits8(seed, stream, index, r);
        for (q = 0; q < 8; ++q) bad += r[q] != accel_optim_sr_bits(seed, stream, index + (unsigned long long)q);
        accel__optim_bits4(seed, stream, index, r4);
        for (q = 0; q < 4; ++q) bad += r4[q] != accel_optim_sr_bits(seed, stream, index + (unsigned long long)q);
    }
    AT_EQ_INT(bad, 0);
}

/* argv[1] "--launch-only": the launch simulation only (the builds of bench/optim/variants.txt's launch shapes) */
int main(int argc, char **argv) {
    const int launch_only = argc > 1 && strcmp(argv[1], "--launch-only") == 0;
    AT_CHECK(same_f(NAN, -NAN) && !same_f(0.0f, -0.0f));
    printf("launch shape %s: chunk %d (%d with a Philox stream), block %d, %d vector(s) in flight, fast sequences %d, "
           "%d jobs per launch\n", OPTIM_VARIANT, ACCEL_OPTIM_CHUNK, ACCEL_OPTIM_CHUNK_SR, ACCEL_OPTIM_CUDA_BLOCK,
           ACCEL_OPTIM_CUDA_U, ACCEL_OPTIM_CUDA_FAST, ACCEL__OPTIM_CAP);
    if (!launch_only) test_fma();
    test_bits8();
    test_paths();
    test_alignment();
    at_context = "";
    return at_finish("optim-impl");
}
