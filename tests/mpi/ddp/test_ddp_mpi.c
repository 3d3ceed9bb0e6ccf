/* accel_ddp.h under mpirun (np 1..4): the reducer against per-tensor all-reduces (every bucket layout, dtypes, flat
   mode, a rank with another list); DDP's averaging order, bit for bit, against PyTorch's DDP (the DDP_REF values,
   rechecked with torch by ddp_reference.py); a local failure in finalize fails every rank at once.
   usage: test_ddp_mpi [basic|fault-reducer] (fault-reducer: a stalled rank while a bucket is in flight) */
#include "accel.h"
#include "accel_collectives.h"
#include "accel_ddp.h"
#include "accel_test.h"
#include "accel_test_coll.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static accel acc;
static int P, R;

/* gradients: tensor t element i on rank r = (t + 1) * 0.25 * (r + 1) + (i % 5) * 0.5 (sums exact in fp32) */
static float gval(int t, size_t i, int r) { return (float)((t + 1) * 0.25 * (r + 1) + (double)(i % 5) * 0.5); }

static void reducer_tests(accel_coll *c) {
    enum { NT = 40 };
    static const int mult[4] = {1, 3, 7, 9}; /* coprime with NT: a permutation per rank */
    size_t sizes[NT];
    float *g[NT], *ref[NT];
    accel_tensor gt[NT];
    char names[NT][16];
    accel_ddp *red;
    accel_ddp_desc rd;
    int t, k, b, nb, idx[NT], bad = 0;
    size_t i;
    for (t = 0; t < NT; ++t) {
        sizes[t] = t % 9 == 3 ? (size_t)400000 + (size_t)t : (size_t)(t * 1531 % 9000 + 1); /* a few > 1 MiB */
        g[t] = (float *)malloc(sizes[t] * 4);
        ref[t] = (float *)malloc(sizes[t] * 4);
        snprintf(names[t], sizeof names[t], "p%d", t);
        /* the reference: DDP's average per tensor by hand, each rank's values times fl(1/P), then one plain SUM */
        for (i = 0; i < sizes[t]; ++i) {
            g[t][i] = gval(t, i, R);
            ref[t][i] = g[t][i] * (float)(1.0 / P);
        }
        AT_EQ_INT(accel_coll_all_reduce(c, ref[t], ref[t], sizes[t], ACCEL_F32, ACCEL_COLL_SUM), ACCEL_OK);
    }
    memset(&rd, 0, sizeof rd);
    rd.bucket_cap_mb = 2.0; /* several buckets at this scale */
    AT_EQ_INT(accel_ddp_create(c, &rd, &red), ACCEL_OK);
    for (t = 0; t < NT; ++t) gt[t] = at_vec(names[t], g[t], ACCEL_F32, (int64_t)(sizes[t]));
    /* two calls: the indices continue across them (registration order) */
    AT_EQ_INT(accel_ddp_add(red, gt, 15), ACCEL_OK);
    AT_EQ_INT(accel_ddp_add(red, gt + 15, NT - 15), ACCEL_OK);
    AT_EQ_INT(accel_ddp_finalize(red), ACCEL_OK);
    AT_EQ_INT(accel_ddp_is_flat(red), 0);
    nb = accel_ddp_num_buckets(red);
    AT_CHECK(nb > 2);
    /* bucket layout (DDP): reverse registration order; a bucket closes at the first tensor that reaches its cap */
    {
        int expect_next = NT - 1;
        for (b = 0; b < nb; ++b) {
            int n = accel_ddp_bucket(red, b, idx, NT);
            double cap = (b == 0 ? 1.0 : 2.0) * 1048576.0, bytes = 0;
            for (k = 0; k < n; ++k) {
                AT_EQ_INT(idx[k], expect_next);
                expect_next--;
                if (k < n - 1) AT_CHECK(bytes + 4.0 * (double)sizes[idx[k]] < cap);
                bytes += 4.0 * (double)sizes[idx[k]];
            }
            if (b < nb - 1) AT_CHECK(bytes >= cap);
        }
        AT_EQ_INT(expect_next, -1);
    }
    /* two steps; grads become ready in a rank-dependent order */
    for (k = 0; k < 2; ++k) {
        for (t = 0; t < NT; ++t)
            for (i = 0; i < sizes[t]; ++i) g[t][i] = gval(t, i, R);
        for (t = 0; t < NT; ++t) AT_EQ_INT(accel_ddp_grad_ready(red, (t * mult[R % 4] + R) % NT), ACCEL_OK);
        AT_EQ_INT(accel_ddp_wait(red), ACCEL_OK);
        for (t = 0; t < NT; ++t)
            if (memcmp(g[t], ref[t], sizes[t] * 4) != 0) bad++;
        AT_EQ_INT(bad, 0);
    }
    /* marking twice is an error */
    AT_EQ_INT(accel_ddp_grad_ready(red, 0), ACCEL_OK);
    AT_EQ_INT(accel_ddp_grad_ready(red, 0), ACCEL_ERR_STATE);
    AT_EQ_INT(accel_ddp_wait(red), ACCEL_OK);
    /* no_sync: nothing moves */
    for (t = 0; t < NT; ++t)
        for (i = 0; i < sizes[t]; ++i) g[t][i] = gval(t, i, R);
    acc.sync_gradients = 0;
    for (t = 0; t < NT; ++t) AT_EQ_INT(accel_ddp_grad_ready(red, t), ACCEL_OK);
    AT_EQ_INT(accel_ddp_wait(red), ACCEL_OK);
    acc.sync_gradients = 1;
    for (t = 0, bad = 0; t < NT; ++t)
        for (i = 0; i < sizes[t]; ++i) bad += g[t][i] != gval(t, i, R);
    AT_EQ_INT(bad, 0);
    /* sync_each_batch: with several processes Accelerate skips no_sync, so a non-sync micro-batch is reduced too */
    acc.desc.sync_each_batch = 1;
    acc.sync_gradients = 0;
    AT_EQ_INT(accel_should_reduce(&acc), acc.use_distributed);
    for (t = 0; t < NT; ++t) AT_EQ_INT(accel_ddp_grad_ready(red, t), ACCEL_OK);
    AT_EQ_INT(accel_ddp_wait(red), ACCEL_OK);
    for (t = 0, bad = 0; t < NT; ++t)
        bad += acc.use_distributed ? memcmp(g[t], ref[t], sizes[t] * 4) != 0 : 0;
    AT_EQ_INT(bad, 0);
    acc.desc.sync_each_batch = 0;
    acc.sync_gradients = 1;
    for (t = 0; t < NT; ++t)
        for (i = 0; i < sizes[t]; ++i) g[t][i] = gval(t, i, R);
    /* wait without grad_ready: everything reduced */
    AT_EQ_INT(accel_ddp_wait(red), ACCEL_OK);
    for (t = 0, bad = 0; t < NT; ++t) bad += memcmp(g[t], ref[t], sizes[t] * 4) != 0;
    AT_EQ_INT(bad, 0);
    accel_ddp_destroy(red);

    /* flat mode: the same tensors carved out of one contiguous buffer → one in-place all-reduce */
    {
        size_t total = 0, off = 0;
        float *flat;
        for (t = 0; t < NT; ++t) total += sizes[t];
        flat = (float *)malloc(total * 4);
        AT_EQ_INT(accel_ddp_create(c, NULL, &red), ACCEL_OK);
        for (t = 0; t < NT; ++t) {
            for (i = 0; i < sizes[t]; ++i) flat[off + i] = gval(t, i, R);
            gt[t] = at_vec("f", flat + off, ACCEL_F32, (int64_t)(sizes[t]));
            off += sizes[t];
        }
        AT_EQ_INT(accel_ddp_add(red, gt, NT), ACCEL_OK);
        for (t = NT - 1; t >= 0; --t) AT_EQ_INT(accel_ddp_grad_ready(red, t), ACCEL_OK);
        AT_EQ_INT(accel_ddp_is_flat(red), 1);
        AT_EQ_INT(accel_ddp_num_buckets(red), 1);
        AT_EQ_INT(accel_ddp_wait(red), ACCEL_OK);
        for (t = 0, off = 0, bad = 0; t < NT; ++t) { bad += memcmp(flat + off, ref[t], sizes[t] * 4) != 0; off += sizes[t]; }
        AT_EQ_INT(bad, 0);
        accel_ddp_destroy(red);
        free(flat);
    }
    /* ranks that registered different lists: every rank fails at finalize */
    if (P > 1) {
        AT_EQ_INT(accel_ddp_create(c, NULL, &red), ACCEL_OK);
        gt[0] = at_vec("a", g[0], ACCEL_F32, (int64_t)(sizes[0] - (R == 1)));
        AT_EQ_INT(accel_ddp_add(red, gt, 1), ACCEL_OK);
        AT_EQ_INT(accel_ddp_finalize(red), ACCEL_ERR_MISMATCH);
        AT_CONTAINS(accel_last_error(&acc), "rank 1:");
        accel_ddp_destroy(red);
    }
    for (t = 0; t < NT; ++t) { free(g[t]); free(ref[t]); }
}

/* ---- DDP's average: every rank's gradient is multiplied by fl(1/P) before the sum (torch's Reducer copies a gradient
   into its bucket as grad * (1.0 / world_size), the scalar rounded to the compute type), where the old reducer
   summed and then divided (Accelerate's reduce("mean") order, still the order of accel_coll_all_reduce(AVG)).
   DDP_REF(dtype, x, grad): every one of 3 ranks has gradient x; grad is what PyTorch's DDP leaves (torch 1.13,
   gloo, default gradient_as_bucket_view=False). ddp_reference.py --check (meson test collectives-ddp-torch)
   recomputes each line with PyTorch. With identical terms any summation order gives the same sum at P = 3. */
typedef struct { const char *dt; uint64_t x, grad; } ddp_ref;
#define DDP_REF(dt, x, g) {dt, x, g}
static const ddp_ref ddp_refs[] = {
    DDP_REF("F32", 0x3fc4aa2fu, 0x3fc4aa30u),
    DDP_REF("F64", 0x3ffd00d7879547f5ull, 0x3ffd00d7879547f4ull),
    DDP_REF("F16", 0x3d56u, 0x3d56u),
};

/* test-local arithmetic (independent of the library): element of dtype dt as a double, and back */
static double ddp_dec(uint64_t b, accel_dtype dt) {
    if (dt == ACCEL_F64) { double d; memcpy(&d, &b, 8); return d; }
    if (dt == ACCEL_F32) { uint32_t u = (uint32_t)b; float f; memcpy(&f, &u, 4); return f; }
    return at_dec16((uint16_t)b, dt == ACCEL_BF16);
}
static uint64_t ddp_enc(double v, accel_dtype dt) { /* v exactly representable in dt */
    if (dt == ACCEL_F64) { uint64_t b; memcpy(&b, &v, 8); return b; }
    if (dt == ACCEL_F32) { float f = (float)v; uint32_t u; memcpy(&u, &f, 4); return u; }
    return at_enc16(v, dt == ACCEL_BF16);
}
/* the float-width rounding of each step: double for F64, float for the others (then to 16 bits) */
static double ddp_round(double v, accel_dtype dt) {
    if (dt == ACCEL_F64) return v;
    if (dt == ACCEL_F32) return (float)v;
    return ddp_dec(at_enc16((double)(float)v, dt == ACCEL_BF16), dt);
}
/* three identical terms: pre-scaled (DDP), summed then divided (the old reducer), divided then summed */
static uint64_t ddp_expect(uint64_t xb, accel_dtype dt, int how) {
    double x = ddp_dec(xb, dt), inv = dt == ACCEL_F64 ? 1.0 / 3 : (double)(float)(1.0 / 3), a, s;
    if (how == 0) a = ddp_round(x * inv, dt);
    else if (how == 2) a = ddp_round(x / 3, dt);
    else a = x;
    s = ddp_round(ddp_round(a + a, dt) + a, dt);
    if (how == 1) s = ddp_round(s / 3, dt);
    return ddp_enc(s, dt);
}
static accel_dtype ddp_dtype(const char *n) { return accel_dtype_from_name(n); }

static void put_bits(void *buf, size_t i, accel_dtype dt, uint64_t b) {
    size_t es = accel_dtype_size(dt);
    unsigned char *p = (unsigned char *)buf + i * es;
    size_t k;
    for (k = 0; k < es; ++k) p[k] = (unsigned char)(b >> (8 * k));
}
static uint64_t get_bits(const void *buf, size_t i, accel_dtype dt) {
    size_t es = accel_dtype_size(dt), k;
    const unsigned char *p = (const unsigned char *)buf + i * es;
    uint64_t b = 0;
    for (k = 0; k < es; ++k) b |= (uint64_t)p[k] << (8 * k);
    return b;
}

/* One reducer per case, every path of the reducer: a bucket of one gradient (all-reduced in place), a packed bucket,
   a >= 1 MiB host gradient reduced directly (MPI), and flat mode (one contiguous buffer). */
static void ddp_average_case(accel_coll *c, accel_dtype dt, uint64_t xb, uint64_t want, int no_average) {
    enum { NG = 5, SMALL = 37 };
    size_t es = accel_dtype_size(dt), big = ((size_t)1 << 20) / es + 3, sizes[NG], total = 0, i, off;
    unsigned char *buf[NG], *flat;
    accel_tensor t[NG];
    accel_ddp *red;
    accel_ddp_desc rd;
    int k, bad = 0, flatmode;
    sizes[0] = big; sizes[1] = SMALL; sizes[2] = 1; sizes[3] = SMALL + 2; sizes[4] = SMALL;
    for (k = 0; k < NG; ++k) total += sizes[k];
    for (flatmode = 0; flatmode < 2; ++flatmode) {
        flat = (unsigned char *)malloc(total * es);
        memset(&rd, 0, sizeof rd);
        rd.no_average = no_average;
        if (!flatmode) {
            rd.first_bucket_mb = 1e-6; /* the last registered gradient alone: reduced in place */
            rd.flat = ACCEL_OFF;
        }
        AT_EQ_INT(accel_ddp_create(c, &rd, &red), ACCEL_OK);
        for (k = 0, off = 0; k < NG; ++k) {
            buf[k] = flatmode ? flat + off * es : (unsigned char *)malloc(sizes[k] * es);
            off += sizes[k];
            for (i = 0; i < sizes[k]; ++i) put_bits(buf[k], i, dt, xb);
            memset(&t[k], 0, sizeof t[k]);
            t[k].ptr = buf[k]; t[k].dtype = dt; t[k].ndim = 1; t[k].shape[0] = (int64_t)sizes[k];
        }
        AT_EQ_INT(accel_ddp_add(red, t, NG), ACCEL_OK);
        AT_EQ_INT(accel_ddp_finalize(red), ACCEL_OK);
        AT_EQ_INT(accel_ddp_is_flat(red), flatmode);
        if (!flatmode) AT_EQ_INT(accel_ddp_num_buckets(red), 2);
        for (k = NG - 1; k >= 0; --k) AT_EQ_INT(accel_ddp_grad_ready(red, k), ACCEL_OK);
        AT_EQ_INT(accel_ddp_wait(red), ACCEL_OK);
        for (k = 0; k < NG; ++k)
            for (i = 0; i < sizes[k]; ++i)
                if (get_bits(buf[k], i, dt) != want && bad++ < 3)
                    fprintf(stderr, "[rank %d] %s%s %s grad %d[%zu] = %#llx, want %#llx\n", R, flatmode ? "flat " : "",
                            no_average ? "sum" : "average", accel_dtype_name(dt), k, i,
                            (unsigned long long)get_bits(buf[k], i, dt), (unsigned long long)want);
        accel_ddp_destroy(red);
        for (k = 0; k < NG && !flatmode; ++k) free(buf[k]);
        free(flat);
    }
    AT_EQ_INT(bad, 0);
}

static void ddp_average(accel_coll *c) {
    size_t k;
    int bf;
    for (k = 0; k < sizeof ddp_refs / sizeof ddp_refs[0]; ++k) {
        accel_dtype dt = ddp_dtype(ddp_refs[k].dt);
        uint64_t x = ddp_refs[k].x;
        /* PyTorch's value is the test-local formula, and the old order (sum, then divide) differs from it */
        AT_EQ_INT(ddp_expect(x, dt, 0), ddp_refs[k].grad);
        if (dt != ACCEL_F16) AT_CHECK(ddp_expect(x, dt, 1) != ddp_refs[k].grad);
        if (dt != ACCEL_F16) AT_CHECK(ddp_expect(x, dt, 2) != ddp_refs[k].grad); /* nor is it "divide, then sum" */
        if (P == 3) ddp_average_case(c, dt, x, ddp_refs[k].grad, 0);
        else if (P <= 2) ddp_average_case(c, dt, x, x, 0); /* x * 1 or (x * 0.5) * 2: exact */
    }
    /* 16-bit: the pre-scaled product rounds to fp16/bf16 before the sum (DDP scales the fp16 bucket) */
    for (bf = 0; bf < 2; ++bf) {
        accel_dtype dt = bf ? ACCEL_BF16 : ACCEL_F16;
        uint64_t x = bf ? 0x3fae : 0x3d56;
        AT_CHECK(ddp_expect(x, dt, 0) != ddp_expect(x, dt, 1)); /* 0x3d56 vs 0x3d55, 0x3fae vs 0x3fad */
        if (P == 3) ddp_average_case(c, dt, x, ddp_expect(x, dt, 0), 0);
    }
    /* no_average: the plain sum */
    if (P == 3) {
        uint64_t x = ddp_refs[0].x;
        double v = ddp_dec(x, ACCEL_F32);
        ddp_average_case(c, ACCEL_F32, x, ddp_enc((float)((float)(v + v) + v), ACCEL_F32), 1);
    }
}

/* ---- a local failure in finalize on one rank fails every rank at once (the failed rank keeps its error, the others
   get ACCEL_ERR_REMOTE naming it) instead of leaving them blocked in the next exchange */
static void local_failures(void) {
    accel_coll *c = NULL;
    accel_coll_desc cd;
    accel_ddp *red;
    accel_ddp_desc rd;
    accel_tensor t;
    float *g, *g2;
    double t0;
    int k;
    memset(&cd, 0, sizeof cd);
    cd.timeout_ms = 60000; /* a failure not agreed at once would show as a 60 s wait (the check below) */
    AT_EQ_INT(accel_coll_create(&acc, &cd, &c), ACCEL_OK);
    /* the reducer: flat mode required but rank 1's gradients are not contiguous */
    g = (float *)calloc(4 * 20000 + 16, sizeof(float));
    g2 = (float *)calloc(20000, sizeof(float));
    memset(&rd, 0, sizeof rd);
    rd.flat = ACCEL_ON;
    AT_EQ_INT(accel_ddp_create(c, &rd, &red), ACCEL_OK);
    for (k = 0; k < 2; ++k) {
        memset(&t, 0, sizeof t);
        t.dtype = ACCEL_F32; t.ndim = 1; t.shape[0] = 20000;
        t.ptr = k == 1 && R == 1 ? (void *)g2 : (void *)(g + 20000 * k);
        AT_EQ_INT(accel_ddp_add(red, &t, 1), ACCEL_OK);
    }
    t0 = accel_now();
    at_expect_collective_failure(&acc, R, accel_ddp_finalize(red), 1, ACCEL_ERR_INVALID_ARGUMENT, t0);
    accel_ddp_destroy(red);
    /* the reducer: rank 1 cannot allocate its bucket (4 x 80 KB in one bucket); then it can, and finalize works */
    AT_EQ_INT(accel_ddp_create(c, NULL, &red), ACCEL_OK);
    for (k = 0; k < 4; ++k) {
        memset(&t, 0, sizeof t);
        t.dtype = ACCEL_F32; t.ndim = 1; t.shape[0] = 20000;
        t.ptr = g + 20000 * k + (k ? 1 : 0); /* not contiguous: buckets */
        AT_EQ_INT(accel_ddp_add(red, &t, 1), ACCEL_OK);
    }
    if (R == 1) at_fail_min_bytes = 64 << 10;
    t0 = accel_now();
    at_expect_collective_failure(&acc, R, accel_ddp_finalize(red), 1, ACCEL_ERR_OUT_OF_MEMORY, t0);
    at_fail_min_bytes = 0;
    AT_EQ_INT(accel_ddp_num_buckets(red), -1);
    AT_EQ_INT(accel_ddp_finalize(red), ACCEL_OK);
    AT_EQ_INT(accel_ddp_num_buckets(red), 1);
    AT_EQ_INT(accel_ddp_wait(red), ACCEL_OK);
    accel_ddp_destroy(red);
    free(g);
    free(g2);
    accel_coll_destroy(c);
}

/* The reducer's poll inside grad_ready: the last rank stalls before its backward; the others mark the first bucket's
   gradients ready (its all-reduce starts), compute past the 1 s deadline without any MPI call, and mark a gradient of
   the second bucket. That grad_ready's poll finds the in-flight bucket timed out and returns ACCEL_ERR_TIMEOUT there;
   the failed bucket unpacks nothing into its gradients (they keep this rank's own values, not the 1/P-scaled packed
   copy); reducer_wait then fails at once and the context refuses further work. The stalled rank's late step ends
   within its own deadline. */
static void fault_reducer(void) {
    enum { NT = 8, N = 50000 }; /* 200 KB each, 1 MiB buckets: bucket 0 = w7..w2, bucket 1 = w1, w0 */
    static float g[NT][N];
    accel_coll *c;
    accel_coll_desc cd;
    accel_ddp *red;
    accel_ddp_desc rd;
    accel_tensor gt[NT];
    char names[NT][8];
    double t0, dt;
    int t, i, bad = 0, n0, idx[NT], in0[NT];
    accel_result r;
    memset(&cd, 0, sizeof cd);
    cd.timeout_ms = 1000;
    AT_EQ_INT(accel_coll_create(&acc, &cd, &c), ACCEL_OK);
    memset(&rd, 0, sizeof rd);
    rd.bucket_cap_mb = 1.0;
    rd.flat = ACCEL_OFF; /* the rows are contiguous: buckets, not the flat in-place all-reduce */
    AT_EQ_INT(accel_ddp_create(c, &rd, &red), ACCEL_OK);
    for (t = 0; t < NT; ++t) {
        snprintf(names[t], sizeof names[t], "w%d", t);
        gt[t] = at_vec(names[t], g[t], ACCEL_F32, (int64_t)(N));
    }
    AT_EQ_INT(accel_ddp_add(red, gt, NT), ACCEL_OK);
    AT_EQ_INT(accel_ddp_finalize(red), ACCEL_OK);
    AT_EQ_INT(accel_ddp_is_flat(red), 0);
    AT_EQ_INT(accel_ddp_num_buckets(red), 2);
    n0 = accel_ddp_bucket(red, 0, idx, NT);
    AT_CHECK(n0 >= 2 && n0 < NT);
    memset(in0, 0, sizeof in0);
    for (i = 0; i < n0; ++i) in0[idx[i]] = 1;
    /* a healthy step first: every rank's values averaged */
    for (t = 0; t < NT; ++t)
        for (i = 0; i < N; ++i) g[t][i] = (float)(R + 1);
    for (t = NT - 1; t >= 0; --t) AT_EQ_INT(accel_ddp_grad_ready(red, t), ACCEL_OK);
    AT_EQ_INT(accel_ddp_wait(red), ACCEL_OK);
    for (t = 0; t < NT; ++t)
        for (i = 0; i < N; ++i) bad += g[t][i] != (float)(P + 1) / 2.0f;
    AT_EQ_INT(bad, 0);
    for (t = 0; t < NT; ++t)
        for (i = 0; i < N; ++i) g[t][i] = (float)(10 * (R + 1)) + (float)i;
    if (R == P - 1) {
        sleep(3); /* stalled: no grad_ready, no MPI call, past the others' deadline */
        t0 = accel_now();
        for (t = NT - 1; t >= 0; --t)
            if (accel_ddp_grad_ready(red, t) != ACCEL_OK) break;
        r = accel_ddp_wait(red);
        dt = accel_now() - t0;
        AT_CHECK_MSG(dt < 2.5, "the late rank's step ends within its own deadline");
        (void)r; /* OK (a collective matched the others' abandoned op) or an error: never a hang */
    } else {
        for (t = 0; t < NT; ++t)
            if (in0[t]) AT_EQ_INT(accel_ddp_grad_ready(red, t), ACCEL_OK); /* the last one launches bucket 0 */
        t0 = accel_now();
        while (accel_now() - t0 < 1.6) { /* "computing" past the deadline, with no MPI call */
        }
        t = 0;
        while (in0[t]) ++t; /* the first gradient of bucket 1 */
        AT_EQ_INT(accel_ddp_grad_ready(red, t), ACCEL_ERR_TIMEOUT); /* bucket 1's first gradient: the poll */
        dt = accel_now() - t0;
        AT_CHECK_MSG(dt < 2.0, "the timeout is reported by the first grad_ready after the deadline");
        AT_CONTAINS(accel_last_error(&acc), "within 1.0 s");
        for (t = 0; t < NT; ++t)
            if (in0[t])
                for (i = 0; i < N; ++i) bad += g[t][i] != (float)(10 * (R + 1)) + (float)i;
        AT_EQ_INT(bad, 0); /* nothing unpacked from the failed reduction */
        t0 = accel_now();
        AT_CHECK(accel_ddp_wait(red) != ACCEL_OK); /* the step fails at once, no second deadline */
        AT_EQ_INT(accel_coll_barrier(c), ACCEL_ERR_STATE);
        AT_CHECK(accel_now() - t0 < 0.5);
        for (t = 0; t < NT; ++t)
            if (in0[t])
                for (i = 0; i < N; ++i) bad += g[t][i] != (float)(10 * (R + 1)) + (float)i;
        AT_EQ_INT(bad, 0); /* and not by the failed wait either */
    }
    AT_EQ_INT(accel_wait_for_everyone(&acc), ACCEL_OK); /* the core's own communicator still works */
    accel_ddp_destroy(red);
    accel_coll_destroy(c);
}

static void basic(void) {
    accel_coll *c;
    AT_EQ_INT(accel_coll_create(&acc, NULL, &c), ACCEL_OK);
    reducer_tests(c);
    ddp_average(c);
    AT_EQ_INT(accel_coll_barrier(c), ACCEL_OK);
    accel_coll_destroy(c);
    if (P > 1) local_failures();
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "basic";
    int rc;
    if (at_init_cpu(&acc, AT_INIT_REFUSING, &P, &R) != 0) return 1; /* local_failures() makes the allocator refuse large blocks */
    if (!strcmp(mode, "fault-reducer")) fault_reducer();
    else basic();
    rc = at_finish("ddp_mpi");
    accel_shutdown(&acc);
    return rc;
}
