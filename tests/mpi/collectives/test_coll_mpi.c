/* accel_collectives.h under mpirun (np 1..4): every op x dtype x size against a reference each rank computes
   itself from every rank's deterministic inputs; 16-bit float sums against fp64; async handles; Accelerate helpers
   (pad_across_processes, gather_for_metrics, objects); debug-mode mismatches; sub-communicators; local failures.
   usage: test_coll_mpi [basic|fault|fault-large|fault-seg|mismatch] (fault-large: the stall in a 256 KiB
   all-reduce; fault-seg: in a 10 MiB one (the 2-rank ring in segments); mismatch: another count, dtype or op on the
   last rank without debug mode; all_gather's and reduce's on the first, middle and last rank) */
#include "accel.h"
#include "accel_collectives.h"
#include "accel_test.h"
#include "accel_test_coll.h"
#include <math.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <mpi.h>

static accel acc;
static int P, R;

/* caches: the f16 decode table and the codes of small integers (the typed-op inputs), built from the functions above */
static double f16_table[65536];
static uint16_t small_code[2][513];
static void init_tables(void) {
    int k;
    for (k = 0; k < 65536; ++k) f16_table[k] = at_dec16((uint16_t)k, 0);
    for (k = -256; k <= 256; ++k) { small_code[0][k + 256] = at_code16(k, 0); small_code[1][k + 256] = at_code16(k, 1); }
}

static double get(const void *buf, size_t i, accel_dtype dt) {
    switch (dt) {
    case ACCEL_F64: return ((const double *)buf)[i];
    case ACCEL_F32: return ((const float *)buf)[i];
    case ACCEL_F16: return f16_table[((const uint16_t *)buf)[i]];
    case ACCEL_BF16: return at_dec16(((const uint16_t *)buf)[i], 1);
    case ACCEL_I64: return (double)((const int64_t *)buf)[i];
    case ACCEL_I32: return ((const int32_t *)buf)[i];
    case ACCEL_U8: return ((const uint8_t *)buf)[i];
    default: return NAN;
    }
}
/* values used here are exactly representable in every dtype */
static void put(void *buf, size_t i, accel_dtype dt, double v) {
    switch (dt) {
    case ACCEL_F64: ((double *)buf)[i] = v; break;
    case ACCEL_F32: ((float *)buf)[i] = (float)v; break;
    case ACCEL_F16: ((uint16_t *)buf)[i] = small_code[0][(int)v + 256]; break; /* v: an integer in [-256, 256] */
    case ACCEL_BF16: ((uint16_t *)buf)[i] = small_code[1][(int)v + 256]; break;
    case ACCEL_I64: ((int64_t *)buf)[i] = (int64_t)v; break;
    case ACCEL_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case ACCEL_U8: ((uint8_t *)buf)[i] = (uint8_t)(int)v; break;
    default: break;
    }
}

/* rank r's element i: small integers; products use {1,2} (or {-1,1,2} for signed) so nothing overflows */
static double val(int r, size_t i, accel_dtype dt, accel_coll_op op) {
    int uns = dt == ACCEL_U8;
    if (op == ACCEL_COLL_PROD) {
        int k = (int)((i * 5 + (size_t)r * 3) % (uns ? 2 : 3));
        return k == 0 ? 1 : k == 1 ? 2 : -1;
    }
    if (uns) return (double)((i * 7 + (size_t)r * 13) % 11);
    return (double)((int)((i * 7 + (size_t)r * 13) % 11) - 5);
}

static double expect_reduce(size_t i, accel_dtype dt, accel_coll_op op) {
    double a = val(0, i, dt, op);
    int r;
    for (r = 1; r < P; ++r) {
        double v = val(r, i, dt, op);
        if (op == ACCEL_COLL_MAX) a = v > a ? v : a;
        else if (op == ACCEL_COLL_MIN) a = v < a ? v : a;
        else if (op == ACCEL_COLL_PROD) a *= v;
        else a += v;
    }
    if (op == ACCEL_COLL_AVG) a /= P;
    return a;
}
/* exact except AVG, whose division rounds */
static double tol_for(double ref, accel_dtype dt, accel_coll_op op) {
    if (op != ACCEL_COLL_AVG) return 0;
    switch (dt) {
    case ACCEL_F16: return fabs(ref) / 1024 + 1e-7;
    case ACCEL_BF16: return fabs(ref) / 128 + 1e-7;
    case ACCEL_F32: return fabs(ref) * 1e-6 + 1e-12;
    default: return fabs(ref) * 1e-14;
    }
}

static int mismatches;
static void check_elem(double got, double want, double tol, const char *what, accel_dtype dt, size_t n, size_t i) {
    if (fabs(got - want) <= tol) return;
    if (mismatches++ < 5)
        fprintf(stderr, "[rank %d] %s %s n=%zu: element %zu is %.17g, want %.17g\n", R, what, accel_dtype_name(dt), n, i, got, want);
}

static void typed_ops(accel_coll *c, accel_dtype dt, size_t n) {
    size_t es = accel_dtype_size(dt), i;
    unsigned char *a = (unsigned char *)calloc((size_t)P * n + 1, es), *b = (unsigned char *)calloc((size_t)P * n + 1, es);
    int op, root = P - 1, r;
    char ctx[96];
    snprintf(ctx, sizeof ctx, "%s n=%zu", accel_dtype_name(dt), n);
    at_context = ctx;
    mismatches = 0;
    for (op = 0; op < ACCEL_COLL_OP_COUNT; ++op) {
        int inplace;
        if (n > 4096 && (op == ACCEL_COLL_MIN || op == ACCEL_COLL_PROD)) continue; /* large size: sum, avg, max (time) */
        if (op == ACCEL_COLL_AVG && !accel_dtype_is_float(dt)) {
            AT_EQ_INT(accel_coll_all_reduce(c, a, b, n, dt, (accel_coll_op)op), ACCEL_ERR_INVALID_ARGUMENT);
            continue;
        }
        for (inplace = 0; inplace < 2; ++inplace) {
            for (i = 0; i < n; ++i) put(a, i, dt, val(R, i, dt, (accel_coll_op)op));
            AT_EQ_INT(accel_coll_all_reduce(c, a, inplace ? a : b, n, dt, (accel_coll_op)op), ACCEL_OK);
            for (i = 0; i < n; ++i) {
                double w = expect_reduce(i, dt, (accel_coll_op)op);
                check_elem(get(inplace ? a : b, i, dt), w, tol_for(w, dt, (accel_coll_op)op), accel_coll_op_name((accel_coll_op)op), dt, n, i);
            }
        }
        /* reduce to a root */
        for (i = 0; i < n; ++i) put(a, i, dt, val(R, i, dt, (accel_coll_op)op));
        memset(b, 0x5a, n * es);
        AT_EQ_INT(accel_coll_reduce(c, a, R == root ? b : NULL, n, dt, (accel_coll_op)op, root), ACCEL_OK);
        if (R == root)
            for (i = 0; i < n; ++i) {
                double w = expect_reduce(i, dt, (accel_coll_op)op);
                check_elem(get(b, i, dt), w, tol_for(w, dt, (accel_coll_op)op), "reduce", dt, n, i);
            }
        /* reduce_scatter: block r of everybody's send, reduced, lands on rank r */
        for (i = 0; i < (size_t)P * n; ++i) put(a, i, dt, val(R, i, dt, (accel_coll_op)op));
        {
            unsigned char *rs = (unsigned char *)malloc(n * es + 1);
            AT_EQ_INT(accel_coll_reduce_scatter(c, a, rs, n, dt, (accel_coll_op)op), ACCEL_OK);
            for (i = 0; i < n; ++i) {
                double w = expect_reduce((size_t)R * n + i, dt, (accel_coll_op)op);
                check_elem(get(rs, i, dt), w, tol_for(w, dt, (accel_coll_op)op), "reduce_scatter", dt, n, i);
            }
            free(rs);
        }
    }
    /* broadcast from the middle rank */
    for (i = 0; i < n; ++i) put(a, i, dt, val(R, i, dt, ACCEL_COLL_SUM));
    AT_EQ_INT(accel_coll_broadcast(c, a, n, dt, P / 2), ACCEL_OK);
    for (i = 0; i < n; ++i) check_elem(get(a, i, dt), val(P / 2, i, dt, ACCEL_COLL_SUM), 0, "broadcast", dt, n, i);
    /* all_gather, out of place and in place */
    for (i = 0; i < n; ++i) put(a, i, dt, val(R, i, dt, ACCEL_COLL_SUM));
    AT_EQ_INT(accel_coll_all_gather(c, a, b, n, dt), ACCEL_OK);
    for (r = 0; r < P; ++r)
        for (i = 0; i < n; ++i) check_elem(get(b, (size_t)r * n + i, dt), val(r, i, dt, ACCEL_COLL_SUM), 0, "all_gather", dt, n, i);
    memset(b, 0, (size_t)P * n * es);
    for (i = 0; i < n; ++i) put(b, (size_t)R * n + i, dt, val(R, i, dt, ACCEL_COLL_SUM));
    AT_EQ_INT(accel_coll_all_gather(c, b + (size_t)R * n * es, b, n, dt), ACCEL_OK);
    for (r = 0; r < P; ++r)
        for (i = 0; i < n; ++i) check_elem(get(b, (size_t)r * n + i, dt), val(r, i, dt, ACCEL_COLL_SUM), 0, "all_gather in place", dt, n, i);
    /* gather to rank 0 */
    memset(b, 0, (size_t)P * n * es);
    AT_EQ_INT(accel_coll_gather(c, a, R == 0 ? b : NULL, n, dt, 0), ACCEL_OK);
    if (R == 0)
        for (r = 0; r < P; ++r)
            for (i = 0; i < n; ++i) check_elem(get(b, (size_t)r * n + i, dt), val(r, i, dt, ACCEL_COLL_SUM), 0, "gather", dt, n, i);
    AT_EQ_INT(mismatches, 0);
    at_context = "";
    free(a);
    free(b);
}

/* A reduce is the point-to-point all-reduce kept on the root (the manual, REDUCE ON MPI): the root's sum has the
   all-reduce's bits (rank-order sum on 3+ ranks) for values whose float sum depends on the order, at sizes of every
   algorithm (one round / exchange, two phases / ring, 2-rank segments), in place and out of place, on every root;
   and it is within P-1 roundings of the float64 sum computed here. */
static void reduce_bits(accel_coll *c) {
    static const size_t sizes[] = {1, 5, 1031, 70001, 2621441};
    size_t si, i;
    for (si = 0; si < sizeof sizes / sizeof sizes[0]; ++si) {
        size_t n = sizes[si];
        float *x = (float *)malloc(n * 4), *ar = (float *)malloc(n * 4), *rd = (float *)malloc(n * 4);
        int root, bad = 0, far = 0, r;
        for (i = 0; i < n; ++i) x[i] = (float)(sin(0.731 * (double)i + 2.1 * R) * 1e3 / (1.0 + (double)(i % 13)));
        AT_EQ_INT(accel_coll_all_reduce(c, x, ar, n, ACCEL_F32, ACCEL_COLL_SUM), ACCEL_OK);
        for (root = 0; root < P; ++root) {
            int inplace = root % 2;
            if (inplace) memcpy(rd, x, n * 4);
            else memset(rd, 0, n * 4);
            AT_EQ_INT(accel_coll_reduce(c, inplace ? rd : x, R == root ? rd : NULL, n, ACCEL_F32, ACCEL_COLL_SUM, root),
                      ACCEL_OK);
            if (R == root) bad += memcmp(rd, ar, n * 4) != 0;
        }
        for (i = 0; i < n; ++i) {
            double ref = 0, mag = 0;
            for (r = 0; r < P; ++r) {
                double v = (float)(sin(0.731 * (double)i + 2.1 * r) * 1e3 / (1.0 + (double)(i % 13)));
                ref += v;
                mag += fabs(v);
            }
            if (fabs((double)ar[i] - ref) > (P - 1) * mag * 6e-8 + 1e-30) far++;
        }
        AT_EQ_INT(bad, 0);
        AT_EQ_INT(far, 0);
        free(x);
        free(ar);
        free(rd);
    }
}

/* bf16/fp16 sums of non-integer values: exactly RNE(a + b) for 2 ranks; within P-1 float-add roundings otherwise */
static double hval(size_t i, int r) { return sin(0.37 * (double)i + 1.3 * r) * (1.0 + (double)(i % 7)); }
static void half_sums(accel_coll *c) {
    int bf;
    size_t n = 4099, i;
    for (bf = 0; bf < 2; ++bf) {
        uint16_t *x = (uint16_t *)malloc(n * 2);
        int bad = 0, r;
        for (i = 0; i < n; ++i) x[i] = at_enc16(hval(i, R), bf);
        AT_EQ_INT(accel_coll_all_reduce(c, x, x, n, bf ? ACCEL_BF16 : ACCEL_F16, ACCEL_COLL_SUM), ACCEL_OK);
        for (i = 0; i < n; ++i) {
            double ref = 0, mag = 0, got = at_dec16(x[i], bf), eps = bf ? 1.0 / 256 : 1.0 / 2048;
            for (r = 0; r < P; ++r) {
                double v = at_dec16(at_enc16(hval(i, r), bf), bf);
                ref += v;
                mag += fabs(v);
            }
            if (P == 2) {
                if (x[i] != at_enc16(ref, bf) && !(ref == 0 && (x[i] & 0x7fff) == 0)) bad++;
            } else if (fabs(got - ref) > (P - 1) * eps * mag + 1e-12) bad++;
        }
        AT_EQ_INT(bad, 0);
        free(x);
    }
    /* a NaN on one rank, with its sign and payload: every rank gets CUDA's canonical 0x7FFF (the core's codec) */
    if (P > 1) {
        uint16_t y[4];
        for (bf = 0; bf < 2; ++bf) {
            y[0] = (uint16_t)(R == 0 ? (bf ? 0xffc1 : 0xfe01) : (bf ? 0x3f80 : 0x3c00)); /* -NaN with a payload, or 1 */
            y[1] = (uint16_t)(bf ? 0x3f80 : 0x3c00);
            y[2] = (uint16_t)(R == P - 1 ? (bf ? 0x7f80 : 0x7c00) : (R == 0 ? (bf ? 0xff80 : 0xfc00) : 0)); /* inf - inf */
            y[3] = 0;
            AT_EQ_INT(accel_coll_all_reduce(c, y, y, 4, bf ? ACCEL_BF16 : ACCEL_F16, ACCEL_COLL_SUM), ACCEL_OK);
            AT_EQ_INT(y[0], 0x7fff);
            AT_EQ_INT(y[1], at_code16(P, bf));
            AT_EQ_INT(y[2], 0x7fff);
            AT_EQ_INT(y[3], 0);
        }
    }
}

static void async_ops(accel_coll *c) {
    size_t n = 100003, i;
    float *a = (float *)malloc(n * 4), *b = (float *)malloc(n * 4 * (size_t)P);
    int32_t *g = (int32_t *)malloc(n * 4 * (size_t)P);
    accel_coll_request *q1 = NULL, *q2 = NULL;
    int done = 0, polls = 0, bad = 0, r;
    for (i = 0; i < n; ++i) { a[i] = (float)(R + 1) * 0.5f; g[(size_t)R * n + i] = (int32_t)(R * 1000 + (int)(i % 1000)); }
    AT_EQ_INT(accel_coll_all_reduce_async(c, a, a, n, ACCEL_F32, ACCEL_COLL_AVG, &q1), ACCEL_OK);
    AT_EQ_INT(accel_coll_all_gather_async(c, g + (size_t)R * n, g, n, ACCEL_I32, &q2), ACCEL_OK);
    while (!done && polls < 100000000) {
        if (accel_coll_test(q1, &done) != ACCEL_OK) break;
        ++polls;
        if (!done) sched_yield();
    }
    AT_EQ_INT(done, 1);
    AT_EQ_INT(accel_coll_wait(q2), ACCEL_OK);
    for (i = 0; i < n; ++i)
        if (a[i] != (float)(0.5 * (P + 1) / 2.0)) bad++;
    for (r = 0; r < P; ++r)
        for (i = 0; i < n; ++i)
            if (g[(size_t)r * n + i] != (int32_t)(r * 1000 + (int)(i % 1000))) bad++;
    /* reduce_scatter / broadcast / reduce async */
    for (i = 0; i < n * (size_t)P; ++i) b[i] = (float)(i % 17) + (float)R;
    AT_EQ_INT(accel_coll_reduce_scatter_async(c, b, a, n, ACCEL_F32, ACCEL_COLL_SUM, &q1), ACCEL_OK);
    AT_EQ_INT(accel_coll_wait(q1), ACCEL_OK);
    for (i = 0; i < n; ++i)
        if (a[i] != (float)(P * (int)(((size_t)R * n + i) % 17) + P * (P - 1) / 2)) bad++;
    a[0] = (float)R;
    AT_EQ_INT(accel_coll_broadcast_async(c, a, 1, ACCEL_F32, P - 1, &q1), ACCEL_OK);
    AT_EQ_INT(accel_coll_wait(q1), ACCEL_OK);
    AT_EQ_INT((int)a[0], P - 1);
    a[0] = (float)R;
    AT_EQ_INT(accel_coll_reduce_async(c, a, b, 1, ACCEL_F32, ACCEL_COLL_MAX, 0, &q1), ACCEL_OK);
    AT_EQ_INT(accel_coll_wait(q1), ACCEL_OK);
    if (R == 0) AT_EQ_INT((int)b[0], P - 1);
    /* zero elements still gives a handle */
    AT_EQ_INT(accel_coll_all_reduce_async(c, a, a, 0, ACCEL_F32, ACCEL_COLL_SUM, &q1), ACCEL_OK);
    AT_EQ_INT(accel_coll_wait(q1), ACCEL_OK);
    AT_EQ_INT(bad, 0);
    free(a); free(b); free(g);
}

static void accelerate_reduce(accel_coll *c) {
    int32_t v[3];
    double d = R + 1;
    v[0] = R + 1; v[1] = R; v[2] = -R;
    AT_EQ_INT(accel_coll_reduce_tensor(c, v, 3, ACCEL_I32, NULL), ACCEL_OK); /* default "sum" */
    AT_EQ_INT(v[0], P * (P + 1) / 2);
    AT_EQ_INT(accel_coll_reduce_tensor(c, v, 3, ACCEL_I32, "none"), ACCEL_OK); /* "none" sums too */
    AT_EQ_INT(v[0], P * P * (P + 1) / 2);
    AT_EQ_INT(accel_coll_reduce_tensor(c, v, 3, ACCEL_I32, "mean"), ACCEL_ERR_INVALID_ARGUMENT);
    AT_CONTAINS(accel_last_error(&acc), "integer");
    AT_EQ_INT(accel_coll_reduce_tensor(c, v, 3, ACCEL_I32, "average"), ACCEL_ERR_INVALID_ARGUMENT);
    AT_EQ_INT(accel_coll_reduce_tensor(c, &d, 1, ACCEL_F64, "mean"), ACCEL_OK);
    AT_NEAR(d, (P + 1) / 2.0, 1e-12);
    d = R;
    AT_EQ_INT(accel_coll_reduce_tensor(c, &d, 1, ACCEL_F64, "max"), ACCEL_OK);
    AT_NEAR(d, P - 1, 0);
}

/* docs/semantics.md §7 pad_across_processes: rank r holds [r+1, 3] (or [2, r+1] for dim 1) */
static void pad_tests(accel_coll *c) {
    float in[64], *o;
    accel_tensor t, out;
    int i, j, first;
    for (first = 0; first < 2; ++first) {
        memset(&t, 0, sizeof t);
        t.name = "x"; t.ptr = in; t.dtype = ACCEL_F32; t.ndim = 2; t.shape[0] = R + 1; t.shape[1] = 3;
        for (i = 0; i < (R + 1) * 3; ++i) in[i] = (float)(100 * R + i);
        AT_EQ_INT(accel_coll_pad_across_processes(c, &t, first ? -2 : 0, -1.0, first, &out), ACCEL_OK);
        AT_EQ_INT(out.ndim, 2); AT_EQ_INT(out.shape[0], P); AT_EQ_INT(out.shape[1], 3);
        o = (float *)out.ptr;
        for (i = 0; i < P; ++i)
            for (j = 0; j < 3; ++j) {
                int pad_rows = P - (R + 1), data_row = first ? i - pad_rows : i;
                float want = (data_row >= 0 && data_row < R + 1) ? (float)(100 * R + data_row * 3 + j) : -1.0f;
                AT_NEAR(o[i * 3 + j], want, 0);
            }
        accel_coll_free(c, out.ptr);
    }
    /* dim 1: [2, r+1] → [2, P], padding at the end of each row */
    t.shape[0] = 2; t.shape[1] = R + 1;
    for (i = 0; i < 2 * (R + 1); ++i) in[i] = (float)(i + 1);
    AT_EQ_INT(accel_coll_pad_across_processes(c, &t, 1, 0.0, 0, &out), ACCEL_OK);
    AT_EQ_INT(out.shape[0], 2); AT_EQ_INT(out.shape[1], P);
    o = (float *)out.ptr;
    for (i = 0; i < 2; ++i)
        for (j = 0; j < P; ++j) AT_NEAR(o[i * P + j], j <= R ? (float)(i * (R + 1) + j + 1) : 0.0f, 0);
    accel_coll_free(c, out.ptr);
    /* out-of-range dim: unchanged (no communication) */
    AT_EQ_INT(accel_coll_pad_across_processes(c, &t, 2, 9.0, 0, &out), ACCEL_OK);
    AT_EQ_INT(out.shape[1], R + 1);
    AT_CHECK(memcmp(out.ptr, in, sizeof(float) * 2 * (size_t)(R + 1)) == 0);
    accel_coll_free(c, out.ptr);
    /* a non-padded dim that differs: every rank fails (P > 1) */
    if (P > 1) {
        AT_EQ_INT(accel_coll_pad_across_processes(c, &t, 0, 0.0, 0, &out), ACCEL_ERR_MISMATCH);
        AT_CONTAINS(accel_last_error(&acc), "rank 1: F32[2,2]");
    }
    /* int64 rows padded with pad_index 7 */
    {
        int64_t li[8], *lo;
        accel_tensor lt;
        memset(&lt, 0, sizeof lt);
        lt.ptr = li; lt.dtype = ACCEL_I64; lt.ndim = 1; lt.shape[0] = R;
        for (i = 0; i < R; ++i) li[i] = R;
        AT_EQ_INT(accel_coll_pad_across_processes(c, &lt, 0, 7.0, 0, &out), ACCEL_OK);
        AT_EQ_INT(out.shape[0], P - 1);
        lo = (int64_t *)out.ptr;
        for (i = 0; i < P - 1; ++i) AT_EQ_INT(lo[i], i < R ? R : 7);
        accel_coll_free(c, out.ptr);
    }
}

static void gather_metrics(accel_coll *c) {
    int64_t x[16], *o;
    accel_tensor t, out;
    int i, r, k, total = P * (P + 1) / 2;
    memset(&t, 0, sizeof t);
    t.ptr = x; t.dtype = ACCEL_I64; t.ndim = 2; t.shape[0] = R + 1; t.shape[1] = 2;
    for (i = 0; i < (R + 1) * 2; ++i) x[i] = 100 * R + i;
    AT_EQ_INT(accel_coll_gather_rows(c, &t, &out), ACCEL_OK);
    AT_EQ_INT(out.shape[0], total); AT_EQ_INT(out.shape[1], 2);
    o = (int64_t *)out.ptr;
    for (r = 0, k = 0; r < P; ++r)
        for (i = 0; i < (r + 1) * 2; ++i, ++k) AT_EQ_INT(o[k], 100 * r + i);
    accel_coll_free(c, out.ptr);
    /* gather_for_metrics drops the padding of the last batch: remainder real samples are kept (docs/semantics.md §3) */
    acc.end_of_dataloader = 1;
    acc.remainder = 2;
    AT_EQ_INT(accel_coll_gather_for_metrics(c, &t, &out), ACCEL_OK);
    AT_EQ_INT(out.shape[0], total > 2 ? 2 : total);
    accel_coll_free(c, out.ptr);
    acc.remainder = 0; /* a full last batch: everything */
    AT_EQ_INT(accel_coll_gather_for_metrics(c, &t, &out), ACCEL_OK);
    AT_EQ_INT(out.shape[0], total);
    accel_coll_free(c, out.ptr);
    acc.end_of_dataloader = 0;
    acc.remainder = 2; /* not at the end: unchanged */
    AT_EQ_INT(accel_coll_gather_for_metrics(c, &t, &out), ACCEL_OK);
    AT_EQ_INT(out.shape[0], total);
    accel_coll_free(c, out.ptr);
    acc.remainder = -1;
    /* a 0-d tensor counts as [1] per rank with several processes; with one, gather returns it unchanged (Accelerate
       returns the input when not distributed) */
    {
        double s = R * 1.5 + 0.25;
        double *so;
        accel_tensor st;
        memset(&st, 0, sizeof st);
        st.ptr = &s; st.dtype = ACCEL_F64; st.ndim = 0;
        AT_EQ_INT(accel_coll_gather_rows(c, &st, &out), ACCEL_OK);
        AT_EQ_INT(out.ndim, P > 1 ? 1 : 0);
        AT_EQ_INT(out.shape[0], P > 1 ? P : 0);
        so = (double *)out.ptr;
        for (r = 0; r < P; ++r) AT_NEAR(so[r], r * 1.5 + 0.25, 0);
        accel_coll_free(c, out.ptr);
        /* gather_for_metrics at the end of a loader: the remainder cuts rows, never a 0-d result's shape */
        acc.end_of_dataloader = 1;
        acc.remainder = 1;
        AT_EQ_INT(accel_coll_gather_for_metrics(c, &st, &out), ACCEL_OK);
        AT_EQ_INT(out.ndim, P > 1 ? 1 : 0);
        AT_EQ_INT(out.shape[0], P > 1 ? 1 : 0);
        accel_coll_free(c, out.ptr);
        acc.end_of_dataloader = 0;
        acc.remainder = -1;
    }
}

static void objects(void) {
    unsigned char mine[64];
    accel_blobs all, list;
    size_t n = (size_t)(R * 5 + (R == 1 ? 0 : 1)), i;
    int r, from = 1 % P;
    memset(&all, 0, sizeof all);
    memset(&list, 0, sizeof list);
    for (i = 0; i < n; ++i) mine[i] = (unsigned char)('a' + R);
    AT_EQ_INT(accel_gather_object(&acc, mine, n, &all), ACCEL_OK);
    AT_EQ_INT(all.count, P);
    for (r = 0; r < P; ++r) {
        size_t want = (size_t)(r * 5 + (r == 1 ? 0 : 1)), bad = 0;
        AT_EQ_INT(all.offsets[r + 1] - all.offsets[r], want);
        for (i = all.offsets[r]; i < all.offsets[r + 1]; ++i) bad += all.data[i] != (unsigned char)('a' + r);
        AT_EQ_INT(bad, 0);
    }
    accel_blobs_deinit(&all);
    /* broadcast_object_list: the source's list (sizes 0, 5, 17) replaces everybody's */
    if (R == from) {
        const void *items[3];
        size_t sizes[3] = {0, 5, 17};
        items[0] = ""; items[1] = "hello"; items[2] = "seventeen bytes!!";
        AT_EQ_INT(accel_blobs_set(&acc, &list, 3, items, sizes), ACCEL_OK);
    } else {
        const void *items[1];
        size_t sizes[1] = {4};
        items[0] = "junk";
        AT_EQ_INT(accel_blobs_set(&acc, &list, 1, items, sizes), ACCEL_OK);
    }
    AT_EQ_INT(accel_broadcast_object_list(&acc, &list, from), ACCEL_OK);
    AT_EQ_INT(list.count, 3);
    AT_EQ_INT(list.offsets[1], 0);
    AT_EQ_INT(list.offsets[2], 5);
    AT_EQ_INT(list.offsets[3], 22);
    AT_CHECK(memcmp(list.data, "helloseventeen bytes!!", 22) == 0);
    accel_blobs_deinit(&list);
}

static void debug_mode(void) {
    accel_coll *c;
    accel_coll_desc cd;
    float x[8];
    double t0;
    memset(&cd, 0, sizeof cd);
    cd.debug = ACCEL_ON;
    cd.timeout_ms = 20000;
    AT_EQ_INT(accel_coll_create(&acc, &cd, &c), ACCEL_OK);
    memset(x, 0, sizeof x);
    AT_EQ_INT(accel_coll_all_reduce(c, x, x, 8, ACCEL_F32, ACCEL_COLL_SUM), ACCEL_OK);
    if (P > 1) {
        t0 = accel_now();
        AT_EQ_INT(accel_coll_all_reduce(c, x, x, R == 0 ? 5 : 6, ACCEL_F32, ACCEL_COLL_SUM), ACCEL_ERR_MISMATCH);
        AT_CONTAINS(accel_last_error(&acc), "rank 0: all_reduce(dtype=F32, op=sum, count=5");
        AT_CONTAINS(accel_last_error(&acc), "rank 1: all_reduce(dtype=F32, op=sum, count=6");
        /* different dtype / different collective */
        AT_EQ_INT(accel_coll_all_reduce(c, x, x, 2, R == 1 ? ACCEL_I32 : ACCEL_F32, ACCEL_COLL_MAX), ACCEL_ERR_MISMATCH);
        AT_CONTAINS(accel_last_error(&acc), "rank 1: all_reduce(dtype=I32");
        if (R == 0) AT_EQ_INT(accel_coll_broadcast(c, x, 4, ACCEL_F32, 0), ACCEL_ERR_MISMATCH);
        else AT_EQ_INT(accel_coll_all_gather(c, x, x, 0, ACCEL_F32), ACCEL_ERR_MISMATCH);
        AT_CONTAINS(accel_last_error(&acc), "rank 0: broadcast(");
        AT_CONTAINS(accel_last_error(&acc), "rank 1: all_gather(");
        AT_CHECK(accel_now() - t0 < 10.0);
        /* the context is still usable afterwards */
        x[0] = 1;
        AT_EQ_INT(accel_coll_all_reduce(c, x, x, 1, ACCEL_F32, ACCEL_COLL_SUM), ACCEL_OK);
        AT_NEAR(x[0], P, 0);
    }
    accel_coll_destroy(c);
}

/* a sub-communicator (even / odd ranks): the same API over a group handle */
static void sub_group(void) {
    MPI_Comm sub;
    accel_coll *c;
    accel_coll_desc cd;
    int64_t v;
    MPI_Comm_split(MPI_COMM_WORLD, R % 2, R, &sub);
    memset(&cd, 0, sizeof cd);
    cd.mpi_comm = &sub;
    cd.backend = ACCEL_COLL_BACKEND_MPI;
    AT_EQ_INT(accel_coll_create(&acc, &cd, &c), ACCEL_OK);
    AT_EQ_INT(accel_coll_size(c), R % 2 ? P / 2 : (P + 1) / 2);
    AT_EQ_INT(accel_coll_rank(c), R / 2);
    v = R;
    AT_EQ_INT(accel_coll_all_reduce(c, &v, &v, 1, ACCEL_I64, ACCEL_COLL_SUM), ACCEL_OK);
    {
        int64_t want = 0;
        int r;
        for (r = R % 2; r < P; r += 2) want += r;
        AT_EQ_INT(v, want);
    }
    accel_coll_destroy(c);
    MPI_Comm_free(&sub);
}

/* ---- a local failure on one rank fails every rank at once (the failed rank keeps its error, the others get
   ACCEL_ERR_REMOTE naming it) instead of leaving them blocked in the next exchange */

static void local_failures(void) {
    accel_coll *c = NULL;
    accel_coll_desc cd;
    accel_tensor t, out;
    accel_blobs blobs;
    float rows[8];
    double t0;
    memset(&cd, 0, sizeof cd);
    /* create: a bad desc on rank 1 (the others used to block in MPI_Comm_dup forever) */
    cd.timeout_ms = R == 1 ? -5 : 60000;
    t0 = accel_now();
    at_expect_collective_failure(&acc, R, accel_coll_create(&acc, &cd, &c), 1, ACCEL_ERR_INVALID_ARGUMENT, t0);
    AT_CHECK(c == NULL);
    if (R != 1) AT_CONTAINS(accel_last_error(&acc), "timeout_ms=-5");
    /* the same on a sub-communicator (even / odd ranks): rank 2's bad desc fails the even group only */
    if (P >= 3) {
        MPI_Comm sub;
        accel_coll *cs = NULL;
        accel_result got;
        MPI_Comm_split(MPI_COMM_WORLD, R % 2, R, &sub);
        cd.mpi_comm = &sub;
        cd.timeout_ms = R == 2 ? -5 : 60000;
        t0 = accel_now();
        got = accel_coll_create(&acc, &cd, &cs);
        if (R % 2) AT_EQ_INT(got, ACCEL_OK);
        else if (R == 2) AT_EQ_INT(got, ACCEL_ERR_INVALID_ARGUMENT);
        else {
            AT_EQ_INT(got, ACCEL_ERR_REMOTE);
            AT_CONTAINS(accel_last_error(&acc), "rank 1 of this communicator failed in accel_coll_create");
        }
        AT_CHECK(accel_now() - t0 < 10.0);
        accel_coll_destroy(cs);
        MPI_Comm_free(&sub);
        cd.mpi_comm = NULL;
    }
    cd.timeout_ms = 60000;
    AT_EQ_INT(accel_coll_create(&acc, &cd, &c), ACCEL_OK);
    /* gather / pad: a bad tensor on one rank */
    memset(&t, 0, sizeof t);
    memset(rows, 0, sizeof rows);
    t.ptr = rows; t.dtype = ACCEL_F32; t.ndim = R == 0 ? 9 : 1; t.shape[0] = 2;
    t0 = accel_now();
    at_expect_collective_failure(&acc, R, accel_coll_gather_rows(c, &t, &out), 0, ACCEL_ERR_INVALID_ARGUMENT, t0);
    t.ndim = 1;
    t0 = accel_now();
    at_expect_collective_failure(&acc, R, accel_coll_pad_across_processes(c, &t, 0, 0.0, 0, R == P - 1 ? NULL : &out), P - 1,
                              ACCEL_ERR_INVALID_ARGUMENT, t0);
    AT_EQ_INT(accel_coll_gather_rows(c, &t, &out), ACCEL_OK); /* the context is fine afterwards */
    AT_EQ_INT(out.shape[0], 2 * P);
    accel_coll_free(c, out.ptr);
    /* objects: a NULL buffer on rank 1, a bad source rank on rank 0 */
    memset(&blobs, 0, sizeof blobs);
    t0 = accel_now();
    at_expect_collective_failure(&acc, R, accel_gather_object(&acc, R == 1 ? NULL : "abc", 3, &blobs), 1, ACCEL_ERR_INVALID_ARGUMENT, t0);
    t0 = accel_now();
    at_expect_collective_failure(&acc, R, accel_broadcast_object_list(&acc, &blobs, R == 0 ? P : 0), 0, ACCEL_ERR_INVALID_ARGUMENT, t0);
    accel_coll_destroy(c);
}

/* Large all-reduces of the polled path (a ring over point-to-point messages on 2 ranks, the direct rank-order
   all-reduce on 3+): three in flight at once with different contents and odd counts, completed in reverse order.
   References: the sum every rank computes long-hand from every rank's inputs, in rank order (x0 + x1) + x2 + ...
   in float — bitwise, for every P (on 2 ranks also MPI_Allreduce itself, bitwise: one commutative add); the same
   data at another offset of a longer buffer gives the same bits (a tensor in a bucket = the tensor alone); MAX
   bitwise against MPI; the send buffer is not written. */
static float ring_input(size_t i, int k, int r) {
    return (float)((double)((i * 2654435761u + (size_t)k) % 1000003) / 7919.0 * (r + 1) + 0.1 * k + 1e-3 * r);
}

static void ring_concurrent(accel_coll *c) {
    enum { NQ = 5, SHIFT = 12345 };
    /* 2500007 and 2500008: 10 MiB, the 2-rank ring in 256 KiB segments (out of place and in place) */
    static const size_t ns[NQ] = {16385, 262147, 65536 * 3 + 1, 2500007, 2500008};
    float *x[NQ], *y[NQ], *ref[NQ], *big, *bigout;
    accel_coll_request *q[NQ];
    size_t i;
    int k, r, bad = 0;
    for (k = 0; k < NQ; ++k) {
        x[k] = (float *)malloc(ns[k] * 4);
        y[k] = (float *)malloc(ns[k] * 4);
        ref[k] = (float *)malloc(ns[k] * 4);
        for (i = 0; i < ns[k]; ++i) {
            float sum = ring_input(i, k, 0);
            for (r = 1; r < P; ++r) sum += ring_input(i, k, r); /* left to right, rounded to float each time */
            ref[k][i] = sum;
            x[k][i] = ring_input(i, k, R);
        }
        if (P == 2) { /* one add per element: MPI's own result is the same bits */
            MPI_Allreduce(x[k], y[k], (int)ns[k], MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            bad += memcmp(y[k], ref[k], ns[k] * 4) != 0;
        }
    }
    AT_EQ_INT(bad, 0);
    /* odd k in place, the others into y */
    for (k = 0; k < NQ; ++k)
        AT_EQ_INT(accel_coll_all_reduce_async(c, x[k], k % 2 ? x[k] : y[k], ns[k], ACCEL_F32, ACCEL_COLL_SUM, &q[k]), ACCEL_OK);
    for (k = NQ - 1; k >= 0; --k) AT_EQ_INT(accel_coll_wait(q[k]), ACCEL_OK);
    for (k = 0; k < NQ; ++k) {
        const float *got = k % 2 ? x[k] : y[k];
        for (i = 0; i < ns[k]; ++i) bad += memcmp(&got[i], &ref[k][i], 4) != 0;
        if (k % 2 == 0)
            for (i = 0; i < ns[k]; ++i) bad += x[k][i] != ring_input(i, k, R); /* the send buffer is read only */
    }
    AT_EQ_INT(bad, 0);
    /* position: buffer 2's data at element SHIFT of a longer buffer (as in a bucket), out of place and in place */
    big = (float *)malloc((ns[2] + 2 * SHIFT) * 4);
    bigout = (float *)malloc((ns[2] + 2 * SHIFT) * 4);
    for (i = 0; i < ns[2] + 2 * SHIFT; ++i) big[i] = (float)(i % 7) * (R + 1);
    for (i = 0; i < ns[2]; ++i) big[SHIFT + i] = ring_input(i, 2, R);
    AT_EQ_INT(accel_coll_all_reduce(c, big, bigout, ns[2] + 2 * SHIFT, ACCEL_F32, ACCEL_COLL_SUM), ACCEL_OK);
    AT_EQ_INT(accel_coll_all_reduce(c, big, big, ns[2] + 2 * SHIFT, ACCEL_F32, ACCEL_COLL_SUM), ACCEL_OK);
    AT_EQ_INT(memcmp(bigout + SHIFT, ref[2], ns[2] * 4), 0);
    AT_EQ_INT(memcmp(big + SHIFT, ref[2], ns[2] * 4), 0);
    free(big);
    free(bigout);
    /* blocking, out of place then in place, max */
    for (k = 0; k < NQ; ++k) {
        for (i = 0; i < ns[k]; ++i) x[k][i] = (float)(((i + (size_t)R * 7) * 31) % 977) - 400.0f;
        MPI_Allreduce(x[k], ref[k], (int)ns[k], MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD);
        AT_EQ_INT(accel_coll_all_reduce(c, x[k], y[k], ns[k], ACCEL_F32, ACCEL_COLL_MAX), ACCEL_OK);
        AT_EQ_INT(accel_coll_all_reduce(c, x[k], x[k], ns[k], ACCEL_F32, ACCEL_COLL_MAX), ACCEL_OK);
        bad += memcmp(y[k], ref[k], ns[k] * 4) != 0;
        bad += memcmp(x[k], ref[k], ns[k] * 4) != 0;
    }
    AT_EQ_INT(bad, 0);
    for (k = 0; k < NQ; ++k) { free(x[k]); free(y[k]); free(ref[k]); }
}

/* Reduce-scatters of the polled path (the first phase of the direct all-reduce on 2+ ranks): block r of the sum lands
   on rank r as the long-hand rank-order sum (x0 + x1) + x2 + ... in float, bitwise — the same bits the all-reduce
   gives that element, also checked against the all-reduce itself; BF16 against its float-rounded rank-order sum
   (accel.h's codec); several in flight, completed in reverse order; the send buffer is not written. */
static void reduce_scatter_order(accel_coll *c) {
    enum { NQ = 3 };
    static const size_t ns[NQ] = {1, 1000, 70001}; /* per rank: one element, one eager round, rendezvous messages */
    float *x[NQ], *y[NQ], *all;
    uint16_t *xb, *yb;
    accel_coll_request *q[NQ];
    size_t i;
    int k, r, bad = 0, bad_send = 0, bad_ar = 0, bad_bf = 0;
    at_context = "reduce_scatter rank order";
    for (k = 0; k < NQ; ++k) {
        x[k] = (float *)malloc((size_t)P * ns[k] * 4);
        y[k] = (float *)malloc(ns[k] * 4);
        for (i = 0; i < (size_t)P * ns[k]; ++i) x[k][i] = ring_input(i, k + 7, R);
        AT_EQ_INT(accel_coll_reduce_scatter_async(c, x[k], y[k], ns[k], ACCEL_F32, ACCEL_COLL_SUM, &q[k]), ACCEL_OK);
    }
    for (k = NQ - 1; k >= 0; --k) AT_EQ_INT(accel_coll_wait(q[k]), ACCEL_OK);
    for (k = 0; k < NQ; ++k) {
        for (i = 0; i < ns[k]; ++i) {
            size_t g = (size_t)R * ns[k] + i;
            float sum = ring_input(g, k + 7, 0);
            for (r = 1; r < P; ++r) sum += ring_input(g, k + 7, r);
            bad += memcmp(&y[k][i], &sum, 4) != 0;
        }
        for (i = 0; i < (size_t)P * ns[k]; ++i) bad_send += x[k][i] != ring_input(i, k + 7, R);
    }
    /* the all-reduce of the same buffer: this rank's block equals the reduce-scatter's, bit for bit */
    all = (float *)malloc((size_t)P * ns[2] * 4);
    AT_EQ_INT(accel_coll_all_reduce(c, x[2], all, (size_t)P * ns[2], ACCEL_F32, ACCEL_COLL_SUM), ACCEL_OK);
    bad_ar = memcmp(all + (size_t)R * ns[2], y[2], ns[2] * 4) != 0;
    /* BF16: each addition rounds to bf16, rank order */
    xb = (uint16_t *)malloc((size_t)P * ns[1] * 2);
    yb = (uint16_t *)malloc(ns[1] * 2);
    for (i = 0; i < (size_t)P * ns[1]; ++i) xb[i] = accel_f32_to_bf16(ring_input(i, 3, R) - 60.0f);
    AT_EQ_INT(accel_coll_reduce_scatter(c, xb, yb, ns[1], ACCEL_BF16, ACCEL_COLL_SUM), ACCEL_OK);
    for (i = 0; i < ns[1]; ++i) {
        size_t g = (size_t)R * ns[1] + i;
        uint16_t s = accel_f32_to_bf16(ring_input(g, 3, 0) - 60.0f);
        for (r = 1; r < P; ++r)
            s = accel_f32_to_bf16(accel_bf16_to_f32(s) + accel_bf16_to_f32(accel_f32_to_bf16(ring_input(g, 3, r) - 60.0f)));
        bad_bf += s != yb[i];
    }
    AT_EQ_INT(bad, 0);
    AT_EQ_INT(bad_send, 0);
    AT_EQ_INT(bad_ar, 0);
    AT_EQ_INT(bad_bf, 0);
    for (k = 0; k < NQ; ++k) { free(x[k]); free(y[k]); }
    free(all);
    free(xb);
    free(yb);
}

/* Small all-reduces (< 64 KiB: on 2 ranks one exchange, on 3+ the direct all-reduce): sums bitwise equal to
   MPI_Allreduce on 2 ranks and to the long-hand rank-order sum on 3+, several in flight at once; MAX and MIN over NaN, -0.0 and +0.0 (where "a op b" depends on the operand
   order) give every rank the same bits — checked by gathering each rank's result, not by trusting the algorithm. */
static float small_input(size_t i, int k, int r) {
    return (float)((double)((i * 40503u + (size_t)k * 17u) % 100003) / 977.0 * (r + 1) - 13.7 * r);
}

static void exchange_small(accel_coll *c) {
    enum { NQ = 4 };
    static const size_t ns[NQ] = {1, 7, 4096, 16383};
    float *x[NQ], *y[NQ], *ref[NQ], *all;
    accel_coll_request *q[NQ];
    size_t i;
    int k, r, bad = 0, op;
    for (k = 0; k < NQ; ++k) {
        x[k] = (float *)malloc(ns[k] * 4);
        y[k] = (float *)malloc(ns[k] * 4);
        ref[k] = (float *)malloc(ns[k] * 4);
        for (i = 0; i < ns[k]; ++i) x[k][i] = small_input(i, k, R);
        if (P <= 2) MPI_Allreduce(x[k], ref[k], (int)ns[k], MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        else /* 3+ ranks: the rank-order sum, long-hand */
            for (i = 0; i < ns[k]; ++i) {
                float sum = small_input(i, k, 0);
                for (r = 1; r < P; ++r) sum += small_input(i, k, r);
                ref[k][i] = sum;
            }
    }
    for (k = 0; k < NQ; ++k)
        AT_EQ_INT(accel_coll_all_reduce_async(c, x[k], k % 2 ? x[k] : y[k], ns[k], ACCEL_F32, ACCEL_COLL_SUM, &q[k]), ACCEL_OK);
    for (k = 0; k < NQ; ++k) AT_EQ_INT(accel_coll_wait(q[k]), ACCEL_OK);
    for (k = 0; k < NQ; ++k) {
        const float *got = k % 2 ? x[k] : y[k];
        bad += memcmp(got, ref[k], ns[k] * 4) != 0;
    }
    AT_EQ_INT(bad, 0);
    /* MAX / MIN with NaN and signed zeros at every position pattern: the ranks must agree bitwise */
    all = (float *)malloc(4096 * 4 * (size_t)P);
    for (op = 0; op < 4; ++op) { /* 4096 and 1000 elements: above and below the eager limit */
        size_t n = op < 2 ? 4096 : 1000;
        for (i = 0; i < n; ++i) {
            unsigned v = (unsigned)((i / 4 + (size_t)R * (i % 4)) % 6);
            x[2][i] = v == 0 ? NAN : v == 1 ? -0.0f : v == 2 ? 0.0f : v == 3 ? 1.5f : v == 4 ? -2.0f : (float)i;
        }
        AT_EQ_INT(accel_coll_all_reduce(c, x[2], y[2], n, ACCEL_F32, op % 2 ? ACCEL_COLL_MIN : ACCEL_COLL_MAX), ACCEL_OK);
        MPI_Allgather(y[2], (int)n * 4, MPI_BYTE, all, (int)n * 4, MPI_BYTE, MPI_COMM_WORLD);
        for (r = 1; r < P; ++r) bad += memcmp(all, all + (size_t)r * n, n * 4) != 0;
    }
    AT_EQ_INT(bad, 0);
    free(all);
    for (k = 0; k < NQ; ++k) { free(x[k]); free(y[k]); free(ref[k]); }
}

static void basic(void) {
    accel_coll *c;
    accel_coll_desc cd;
    static const accel_dtype dts[] = {ACCEL_F64, ACCEL_F32, ACCEL_F16, ACCEL_BF16, ACCEL_I64, ACCEL_I32, ACCEL_U8};
    int k, w;
    AT_EQ_INT(accel_coll_create(&acc, NULL, &c), ACCEL_OK);
    AT_EQ_INT(accel_coll_size(c), P);
    AT_EQ_INT(accel_coll_rank(c), R);
    AT_EQ_INT(accel_coll_get_backend(c), P > 1 ? ACCEL_COLL_BACKEND_MPI : ACCEL_COLL_BACKEND_NONE);
    for (k = 0; k < 7; ++k) {
        size_t sizes[5];
        int s;
        sizes[0] = 0; sizes[1] = 1; sizes[2] = 7; sizes[3] = 1031;
        sizes[4] = (size_t)1048576 / accel_dtype_size(dts[k]) + 1; /* 1 MiB + 1 element */
        for (s = 0; s < 5; ++s) typed_ops(c, dts[k], sizes[s]);
    }
    half_sums(c);
    reduce_bits(c);
    async_ops(c);
    ring_concurrent(c);
    reduce_scatter_order(c);
    exchange_small(c);
    accelerate_reduce(c);
    pad_tests(c);
    gather_metrics(c);
    objects();
    AT_EQ_INT(accel_coll_barrier(c), ACCEL_OK);
    accel_coll_destroy(c);
    /* the plain blocking MPI path (no watchdog) */
    memset(&cd, 0, sizeof cd);
    cd.no_watchdog = 1;
    AT_EQ_INT(accel_coll_create(&acc, &cd, &c), ACCEL_OK);
    for (w = 0; w < 2; ++w) typed_ops(c, w ? ACCEL_BF16 : ACCEL_F32, 1031);
    objects();
    gather_metrics(c);
    AT_EQ_INT(accel_coll_barrier(c), ACCEL_OK);
    accel_coll_destroy(c);
    debug_mode();
    sub_group();
    if (P > 1) local_failures();
}

/* The last rank stalls (sleeps) in the middle of training: the others must get ACCEL_ERR_TIMEOUT within the deadline
   instead of hanging. Afterwards the sleeper catches up so the job ends cleanly. */
static void fault(size_t n) {
    accel_coll *c;
    accel_coll_desc cd;
    float *x = (float *)malloc(n * sizeof(float));
    double t0, dt;
    int i;
    accel_result r;
    AT_CHECK(x != NULL);
    if (!x) return;
    memset(&cd, 0, sizeof cd);
    cd.timeout_ms = 1000;
    AT_EQ_INT(accel_coll_create(&acc, &cd, &c), ACCEL_OK);
    for (i = 0; i < (int)n; ++i) x[i] = 1;
    AT_EQ_INT(accel_coll_all_reduce(c, x, x, n, ACCEL_F32, ACCEL_COLL_SUM), ACCEL_OK); /* healthy first */
    if (R == P - 1) {
        sleep(3);
        r = accel_coll_all_reduce(c, x, x, n, ACCEL_F32, ACCEL_COLL_SUM);
        /* late: the 2-rank exchange is one step, which matches the others' abandoned op and completes; the later
           steps of the 2-rank ring and the second phase of the 3+-rank direct all-reduce were abandoned by the peers,
           so the late rank's own deadline ends it instead: never a hang */
        if ((n * 4 >= 65536 && P == 2) || P >= 3) AT_CHECK(r == ACCEL_OK || r == ACCEL_ERR_TIMEOUT);
        else AT_EQ_INT(r, ACCEL_OK);
    } else {
        t0 = accel_now();
        AT_EQ_INT(accel_coll_all_reduce(c, x, x, n, ACCEL_F32, ACCEL_COLL_SUM), ACCEL_ERR_TIMEOUT);
        dt = accel_now() - t0;
        AT_CHECK_MSG(dt >= 0.9 && dt < 2.5, "timed out close to the 1 s deadline");
        AT_CONTAINS(accel_last_error(&acc), "did not complete within 1.0 s");
        /* the context refuses further work instead of hanging again */
        t0 = accel_now();
        AT_EQ_INT(accel_coll_all_reduce(c, x, x, n, ACCEL_F32, ACCEL_COLL_SUM), ACCEL_ERR_STATE);
        AT_EQ_INT(accel_coll_barrier(c), ACCEL_ERR_STATE);
        AT_CHECK(accel_now() - t0 < 0.5);
    }
    AT_EQ_INT(accel_wait_for_everyone(&acc), ACCEL_OK); /* the core's own communicator still works */
    accel_coll_destroy(c);
    /* x is not freed: the abandoned operation's requests may still name it until MPI_Finalize */
}

/* An all-gather, reduce, gather or broadcast with another count, dtype, op (reduce) or root (gather, broadcast) on
   one rank (the first, the middle, the last) without debug mode: ACCEL_ERR_MISMATCH on every rank at once, naming the
   peer and what differs (before, Open MPI's MPI_Iallgather / MPI_Ibcast raised MPI_ERR_TRUNCATE on MPI_COMM_WORLD and
   ended the job, and a reduce or gather gave ACCEL_OK and a wrong result). Each case on a fresh context (a mismatch
   breaks it, as the all-reduce's). */
static void mismatch_ops(float *x, float *y) {
    static const struct {
        size_t n, n_odd; accel_dtype dt, dt_odd; accel_coll_op op, op_odd; int root_shift; const char *says;
    } cases[] = {{4, 3, ACCEL_F32, ACCEL_F32, ACCEL_COLL_SUM, ACCEL_COLL_SUM, 0, "element"},
                 {16384, 16383, ACCEL_F32, ACCEL_F32, ACCEL_COLL_SUM, ACCEL_COLL_SUM, 0, "element"},
                 {16, 16, ACCEL_F32, ACCEL_I32, ACCEL_COLL_SUM, ACCEL_COLL_SUM, 0, "dtype"},
                 {16, 16, ACCEL_F32, ACCEL_F32, ACCEL_COLL_SUM, ACCEL_COLL_MAX, 0, "op"},
                 {16, 16, ACCEL_F32, ACCEL_F32, ACCEL_COLL_SUM, ACCEL_COLL_SUM, 1, "root"}};
    static const char *whats[] = {"all_gather", "reduce", "gather", "broadcast"};
    int odd_ranks[3], w, kind;
    size_t i;
    odd_ranks[0] = 0; odd_ranks[1] = P / 2; odd_ranks[2] = P - 1;
    for (kind = 0; kind < 4; ++kind)
        for (w = 0; w < 3; ++w) {
            int odd = odd_ranks[w];
            if (w > 0 && odd == odd_ranks[w - 1]) continue;
            for (i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
                accel_coll *c;
                accel_coll_desc cd;
                double t0;
                accel_result r;
                char ctx[96], want[96];
                size_t n = R == odd ? cases[i].n_odd : cases[i].n;
                accel_dtype dt = R == odd ? cases[i].dt_odd : cases[i].dt;
                const char *what = whats[kind];
                int root = P / 2, rooted = kind >= 2;
                if (R == odd) root = (root + cases[i].root_shift) % P;
                if (cases[i].op != cases[i].op_odd && kind != 1) continue; /* an op: reduce alone */
                if (cases[i].root_shift && kind == 0) continue;            /* a root: reduce, gather, broadcast */
                snprintf(ctx, sizeof ctx, "%s mismatch on rank %d, case %zu", what, odd, i);
                at_context = ctx;
                memset(&cd, 0, sizeof cd);
                cd.timeout_ms = 20000; /* a missed mismatch would end in ACCEL_ERR_TIMEOUT after 20 s */
                AT_EQ_INT(accel_coll_create(&acc, &cd, &c), ACCEL_OK);
                AT_EQ_INT(accel_coll_all_gather(c, x, y, 8, ACCEL_F32), ACCEL_OK); /* healthy first */
                t0 = accel_now();
                if (kind == 0) r = accel_coll_all_gather(c, x, y, n, dt);
                else if (kind == 1)
                    r = accel_coll_reduce(c, x, R == root ? y : NULL, n, dt, R == odd ? cases[i].op_odd : cases[i].op,
                                          root);
                else if (kind == 2) r = accel_coll_gather(c, x, R == root ? y : NULL, n, dt, root);
                else r = accel_coll_broadcast(c, x, n, dt, root);
                AT_EQ_INT(r, ACCEL_ERR_MISMATCH);
                AT_CHECK_MSG(accel_now() - t0 < 5.0, "the mismatch was found at once, not at the deadline");
                snprintf(want, sizeof want, "%s: rank ", what);
                AT_CONTAINS(accel_last_error(&acc), want);
                AT_CONTAINS(accel_last_error(&acc), cases[i].says);
                if (R != odd) { /* the others name the odd rank and its count, dtype or op */
                    want[0] = 0;
                    if (cases[i].root_shift && kind == 1 && cases[i].n < 64)
                        snprintf(want, sizeof want, "rank %d called it with another root than rank %d", odd, R);
                    else if ((cases[i].n != cases[i].n_odd || cases[i].root_shift) &&
                             (rooted || (kind == 1 && cases[i].n >= 64)))
                        snprintf(want, sizeof want, "rank %d called it with another element count or root than rank %d",
                                 odd, R);
                    else if (cases[i].n != cases[i].n_odd && (kind == 0 || cases[i].n < 64))
                        snprintf(want, sizeof want, "rank %d called it with %zu elements, rank %d with %zu", odd,
                                 cases[i].n_odd, R, cases[i].n);
                    else if (cases[i].n != cases[i].n_odd)
                        snprintf(want, sizeof want, "rank %d called it with another element count than rank %d", odd,
                                 R);
                    else if (cases[i].dt != cases[i].dt_odd)
                        snprintf(want, sizeof want, "rank %d called it with dtype %s, rank %d with %s", odd,
                                 accel_dtype_name(cases[i].dt_odd), R, accel_dtype_name(cases[i].dt));
                    else
                        snprintf(want, sizeof want, "rank %d called it with op %s, rank %d with op %s", odd,
                                 accel_coll_op_name(cases[i].op_odd), R, accel_coll_op_name(cases[i].op));
                    AT_CONTAINS(accel_last_error(&acc), want);
                }
                AT_EQ_INT(accel_coll_all_gather(c, x, y, 4, ACCEL_F32), ACCEL_ERR_STATE); /* broken now */
                AT_EQ_INT(accel_wait_for_everyone(&acc), ACCEL_OK);
                accel_coll_destroy(c);
            }
        }
    at_context = "";
}

/* A broadcast whose root would send more than 16 MiB in the checked point-to-point form is MPI's, checked first by
   the signature all-gather (accel_collectives.h ACCEL__COLL_BCAST_FANOUT_MAX): the values arrive (formula, every
   element), and a count or root differing on the last rank is ACCEL_ERR_MISMATCH on every rank, naming it. */
static void big_bcast(void) {
    const size_t n = ((size_t)16 << 20) / 4 + 1024; /* over the bound for any P >= 2 */
    float *b = (float *)malloc(n * sizeof(float));
    int k;
    AT_CHECK(b != NULL);
    if (!b || P < 2) { free(b); return; }
    for (k = 0; k < 3; ++k) {
        accel_coll *c;
        accel_coll_desc cd;
        size_t i, bad = 0, cnt = n;
        int root = P / 2, last = R == P - 1;
        accel_result r;
        at_context = k == 0 ? "big broadcast" : k == 1 ? "big broadcast, count mismatch" : "big broadcast, root";
        if (k == 1 && last) cnt = n - 1;
        if (k == 2 && last) root = (root + 1) % P;
        for (i = 0; i < n; ++i) b[i] = R == P / 2 ? (float)(i % 1000003) * 0.5f : -1.0f;
        memset(&cd, 0, sizeof cd);
        cd.timeout_ms = 20000;
        AT_EQ_INT(accel_coll_create(&acc, &cd, &c), ACCEL_OK);
        r = accel_coll_broadcast(c, b, cnt, ACCEL_F32, root);
        if (k == 0) {
            AT_EQ_INT(r, ACCEL_OK);
            for (i = 0; i < n; ++i) bad += b[i] != (float)(i % 1000003) * 0.5f;
            AT_EQ_INT((long long)bad, 0LL);
        } else {
            char want[96];
            AT_EQ_INT(r, ACCEL_ERR_MISMATCH);
            AT_CONTAINS(accel_last_error(&acc), "broadcast: ranks called different collectives");
            snprintf(want, sizeof want, "rank %d: broadcast(dtype=F32, op=-, count=%zu, root=%d)", P - 1,
                     k == 1 ? n - 1 : n, k == 2 ? (P / 2 + 1) % P : P / 2);
            AT_CONTAINS(accel_last_error(&acc), want);
        }
        AT_EQ_INT(accel_wait_for_everyone(&acc), ACCEL_OK);
        accel_coll_destroy(c);
    }
    at_context = "";
    free(b);
}

/* The last rank calls an all-reduce with another count, dtype or op than the others, without debug mode: every rank
   must get ACCEL_ERR_MISMATCH at once (before the tag carried the call's signature, rank 0 of 2 got ACCEL_OK and a
   wrong sum for counts 4 vs 3, and the others an MPI error or the deadline). Each case on a fresh context (a
   mismatch breaks it); whole-buffer sizes (4 elements), the 2-rank ring / 3+-rank direct chunks (64 Ki elements). */
static void mismatch(void) {
    static const struct { size_t n, n_last; accel_dtype dt, dt_last; accel_coll_op op, op_last; const char *says; }
        cases[] = {{4, 3, ACCEL_F32, ACCEL_F32, ACCEL_COLL_SUM, ACCEL_COLL_SUM, "elements"},
                   {65536, 65530, ACCEL_F32, ACCEL_F32, ACCEL_COLL_SUM, ACCEL_COLL_SUM, "element"},
                   {16, 16, ACCEL_F32, ACCEL_I32, ACCEL_COLL_SUM, ACCEL_COLL_SUM, "dtype"},
                   {16, 16, ACCEL_F32, ACCEL_F32, ACCEL_COLL_SUM, ACCEL_COLL_MAX, "op"}};
    size_t i, k;
    float *x = (float *)malloc(65536 * sizeof(float));
    AT_CHECK(x != NULL);
    if (!x || P < 2) { free(x); return; }
    for (i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        accel_coll *c;
        accel_coll_desc cd;
        int last = R == P - 1;
        double t0;
        accel_result r;
        memset(&cd, 0, sizeof cd);
        cd.timeout_ms = 20000; /* a missed mismatch would end in ACCEL_ERR_TIMEOUT after 20 s */
        AT_EQ_INT(accel_coll_create(&acc, &cd, &c), ACCEL_OK);
        for (k = 0; k < 65536; ++k) x[k] = 1;
        AT_EQ_INT(accel_coll_all_reduce(c, x, x, 8, ACCEL_F32, ACCEL_COLL_SUM), ACCEL_OK); /* healthy first */
        t0 = accel_now();
        r = accel_coll_all_reduce(c, x, x, last ? cases[i].n_last : cases[i].n, last ? cases[i].dt_last : cases[i].dt,
                                  last ? cases[i].op_last : cases[i].op);
        AT_EQ_INT(r, ACCEL_ERR_MISMATCH);
        AT_CHECK_MSG(accel_now() - t0 < 5.0, "the mismatch was found at once, not at the deadline");
        AT_CONTAINS(accel_last_error(&acc), cases[i].says);
        if (r == ACCEL_ERR_MISMATCH && cases[i].n != cases[i].n_last && cases[i].n < 64 && !last) {
            char want[64];
            snprintf(want, sizeof want, "rank %d called it with %zu elements", P - 1, cases[i].n_last);
            AT_CONTAINS(accel_last_error(&acc), want);
        }
        AT_EQ_INT(accel_coll_all_reduce(c, x, x, 4, ACCEL_F32, ACCEL_COLL_SUM), ACCEL_ERR_STATE); /* broken now */
        AT_EQ_INT(accel_wait_for_everyone(&acc), ACCEL_OK);
        accel_coll_destroy(c);
    }
    { /* a reduce-scatter (the direct algorithm's first phase) with another count names itself, not all_reduce */
        static float y[64];
        accel_coll *c;
        accel_coll_desc cd;
        accel_result r;
        memset(&cd, 0, sizeof cd);
        cd.timeout_ms = 20000;
        AT_EQ_INT(accel_coll_create(&acc, &cd, &c), ACCEL_OK);
        r = accel_coll_reduce_scatter(c, x, y, R == P - 1 ? 15 : 16, ACCEL_F32, ACCEL_COLL_SUM);
        AT_EQ_INT(r, ACCEL_ERR_MISMATCH);
        AT_CONTAINS(accel_last_error(&acc), "reduce_scatter: rank");
        AT_EQ_INT(accel_wait_for_everyone(&acc), ACCEL_OK);
        accel_coll_destroy(c);
    }
    { /* different collectives at one point with the same count and dtype: an all_gather on the last rank against an
         all_reduce elsewhere (their messages would match without the kind in the signature) */
        static float y[64 * 4];
        accel_coll *c;
        accel_coll_desc cd;
        accel_result r;
        memset(&cd, 0, sizeof cd);
        cd.timeout_ms = 20000;
        AT_EQ_INT(accel_coll_create(&acc, &cd, &c), ACCEL_OK);
        r = R == P - 1 ? accel_coll_all_gather(c, x, y, 4, ACCEL_F32)
                       : accel_coll_all_reduce(c, x, x, 4, ACCEL_F32, ACCEL_COLL_SUM);
        AT_EQ_INT(r, ACCEL_ERR_MISMATCH);
        if (R != P - 1) {
            char want[64];
            snprintf(want, sizeof want, "rank %d called all_gather at this point", P - 1);
            AT_CONTAINS(accel_last_error(&acc), want);
        }
        AT_EQ_INT(accel_wait_for_everyone(&acc), ACCEL_OK);
        accel_coll_destroy(c);
    }
    { /* all_gather: recv for 4 ranks of 16384 floats; neither buffer is freed (below) */
        float *y = (float *)malloc((size_t)P * 16384 * sizeof(float));
        AT_CHECK(y != NULL);
        if (y) mismatch_ops(x, y);
    }
    big_bcast();
    /* x is not freed: the unmatched messages' requests may still name it until MPI_Finalize */
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "basic";
    int rc;
    if (at_init_cpu(&acc, AT_INIT_REFUSING, &P, &R) != 0) return 1; /* local_failures() makes the allocator refuse large blocks */
    init_tables();
    if (!strcmp(mode, "fault")) fault(1024);
    else if (!strcmp(mode, "fault-large")) fault(65536);
    else if (!strcmp(mode, "fault-seg")) fault(2621440);
    else if (!strcmp(mode, "mismatch")) mismatch();
    else basic();
    rc = at_finish("collectives_mpi");
    accel_shutdown(&acc);
    return rc;
}
