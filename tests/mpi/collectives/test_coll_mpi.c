/* accel_collectives.h under mpirun (np 1..4): every op x dtype x size against a reference each rank computes
   itself from every rank's deterministic inputs; 16-bit float sums against fp64; async handles; Accelerate helpers
   (pad_across_processes, gather_for_metrics, objects); the reducer against per-tensor all-reduces; debug-mode
   mismatches; sub-communicators.
   usage: test_coll_mpi [basic|fault|fault-large|fault-seg|fault-reducer] (fault-large: the stall in a 256 KiB
   all-reduce; fault-seg: in a 10 MiB one (the 2-rank ring in segments);
   fault-reducer: the stall while the DDP reducer has a bucket in flight) */
#include "accel.h"
#include "accel_collectives.h"
#include "accel_test.h"
#include <math.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <mpi.h>

static accel acc;
static int P, R;

/* ---- test-local 16-bit codecs (written independently of the library's) */
static double dec16(uint16_t h, int bf) {
    if (bf) {
        uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    } else {
        int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
        double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m + 1024, e - 25);
        return s ? -v : v;
    }
}
/* the code of an exactly representable 16-bit value */
static uint16_t code16(double r, int bf) {
    uint16_t s = (uint16_t)(r < 0 ? 0x8000 : 0);
    double a = fabs(r);
    int e;
    if (bf) {
        float f = (float)r;
        uint32_t u;
        memcpy(&u, &f, 4);
        return (uint16_t)(u >> 16);
    }
    if (a == 0) return s;
    if (a < ldexp(1, -14)) return (uint16_t)(s | (uint16_t)ldexp(a, 24)); /* subnormal */
    (void)frexp(a, &e);                                                       /* a = m 2^e, m in [0.5, 1) */
    return (uint16_t)(s | (uint16_t)((e - 1 + 15) << 10) | (uint16_t)((int)ldexp(ldexp(a, 1 - e) - 1, 10) & 1023));
}
/* round a double to the nearest 16-bit value, ties to even, by arithmetic on doubles (rint) */
static uint16_t enc16(double x, int bf) {
    int mant_bits = bf ? 7 : 10, e;
    double r;
    if (x == 0) return 0;
    e = (int)floor(log2(fabs(x)));
    if (!bf && e < -14) e = -14;
    r = ldexp(rint(ldexp(x, mant_bits - e)), e - mant_bits);
    return code16(r, bf);
}

/* caches: the f16 decode table and the codes of small integers (the typed-op inputs), built from the functions above */
static double f16_table[65536];
static uint16_t small_code[2][513];
static void init_tables(void) {
    int k;
    for (k = 0; k < 65536; ++k) f16_table[k] = dec16((uint16_t)k, 0);
    for (k = -256; k <= 256; ++k) { small_code[0][k + 256] = code16(k, 0); small_code[1][k + 256] = code16(k, 1); }
}

static double get(const void *buf, size_t i, accel_dtype dt) {
    switch (dt) {
    case ACCEL_F64: return ((const double *)buf)[i];
    case ACCEL_F32: return ((const float *)buf)[i];
    case ACCEL_F16: return f16_table[((const uint16_t *)buf)[i]];
    case ACCEL_BF16: return dec16(((const uint16_t *)buf)[i], 1);
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

/* bf16/fp16 sums of non-integer values: exactly RNE(a + b) for 2 ranks; within P-1 float-add roundings otherwise */
static double hval(size_t i, int r) { return sin(0.37 * (double)i + 1.3 * r) * (1.0 + (double)(i % 7)); }
static void half_sums(accel_coll *c) {
    int bf;
    size_t n = 4099, i;
    for (bf = 0; bf < 2; ++bf) {
        uint16_t *x = (uint16_t *)malloc(n * 2);
        int bad = 0, r;
        for (i = 0; i < n; ++i) x[i] = enc16(hval(i, R), bf);
        AT_EQ_INT(accel_coll_all_reduce(c, x, x, n, bf ? ACCEL_BF16 : ACCEL_F16, ACCEL_COLL_SUM), ACCEL_OK);
        for (i = 0; i < n; ++i) {
            double ref = 0, mag = 0, got = dec16(x[i], bf), eps = bf ? 1.0 / 256 : 1.0 / 2048;
            for (r = 0; r < P; ++r) {
                double v = dec16(enc16(hval(i, r), bf), bf);
                ref += v;
                mag += fabs(v);
            }
            if (P == 2) {
                if (x[i] != enc16(ref, bf) && !(ref == 0 && (x[i] & 0x7fff) == 0)) bad++;
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
            AT_EQ_INT(y[1], code16(P, bf));
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

/* gradients: tensor t element i on rank r = (t + 1) * 0.25 * (r + 1) + (i % 5) * 0.5 (sums exact in fp32) */
static float gval(int t, size_t i, int r) { return (float)((t + 1) * 0.25 * (r + 1) + (double)(i % 5) * 0.5); }

static accel_tensor f32_tensor(const char *name, float *p, size_t n) {
    accel_tensor t;
    memset(&t, 0, sizeof t);
    t.name = name;
    t.ptr = p;
    t.dtype = ACCEL_F32;
    t.ndim = 1;
    t.shape[0] = (int64_t)n;
    return t;
}

static void reducer_tests(accel_coll *c) {
    enum { NT = 40 };
    static const int mult[4] = {1, 3, 7, 9}; /* coprime with NT: a permutation per rank */
    size_t sizes[NT];
    float *g[NT], *ref[NT];
    accel_tensor gt[NT];
    char names[NT][16];
    accel_coll_reducer *red;
    accel_coll_reducer_desc rd;
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
    AT_EQ_INT(accel_coll_reducer_create(c, &rd, &red), ACCEL_OK);
    for (t = 0; t < NT; ++t) gt[t] = f32_tensor(names[t], g[t], sizes[t]);
    /* two calls: the indices continue across them (registration order) */
    AT_EQ_INT(accel_coll_reducer_add(red, gt, 15), ACCEL_OK);
    AT_EQ_INT(accel_coll_reducer_add(red, gt + 15, NT - 15), ACCEL_OK);
    AT_EQ_INT(accel_coll_reducer_finalize(red), ACCEL_OK);
    AT_EQ_INT(accel_coll_reducer_is_flat(red), 0);
    nb = accel_coll_reducer_num_buckets(red);
    AT_CHECK(nb > 2);
    /* bucket layout (DDP): reverse registration order; a bucket closes at the first tensor that reaches its cap */
    {
        int expect_next = NT - 1;
        for (b = 0; b < nb; ++b) {
            int n = accel_coll_reducer_bucket(red, b, idx, NT);
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
        for (t = 0; t < NT; ++t) AT_EQ_INT(accel_coll_grad_ready(red, (t * mult[R % 4] + R) % NT), ACCEL_OK);
        AT_EQ_INT(accel_coll_reducer_wait(red), ACCEL_OK);
        for (t = 0; t < NT; ++t)
            if (memcmp(g[t], ref[t], sizes[t] * 4) != 0) bad++;
        AT_EQ_INT(bad, 0);
    }
    /* marking twice is an error */
    AT_EQ_INT(accel_coll_grad_ready(red, 0), ACCEL_OK);
    AT_EQ_INT(accel_coll_grad_ready(red, 0), ACCEL_ERR_STATE);
    AT_EQ_INT(accel_coll_reducer_wait(red), ACCEL_OK);
    /* no_sync: nothing moves */
    for (t = 0; t < NT; ++t)
        for (i = 0; i < sizes[t]; ++i) g[t][i] = gval(t, i, R);
    acc.sync_gradients = 0;
    for (t = 0; t < NT; ++t) AT_EQ_INT(accel_coll_grad_ready(red, t), ACCEL_OK);
    AT_EQ_INT(accel_coll_reducer_wait(red), ACCEL_OK);
    acc.sync_gradients = 1;
    for (t = 0, bad = 0; t < NT; ++t)
        for (i = 0; i < sizes[t]; ++i) bad += g[t][i] != gval(t, i, R);
    AT_EQ_INT(bad, 0);
    /* sync_each_batch: with several processes Accelerate skips no_sync, so a non-sync micro-batch is reduced too */
    acc.desc.sync_each_batch = 1;
    acc.sync_gradients = 0;
    AT_EQ_INT(accel_should_reduce(&acc), acc.use_distributed);
    for (t = 0; t < NT; ++t) AT_EQ_INT(accel_coll_grad_ready(red, t), ACCEL_OK);
    AT_EQ_INT(accel_coll_reducer_wait(red), ACCEL_OK);
    for (t = 0, bad = 0; t < NT; ++t)
        bad += acc.use_distributed ? memcmp(g[t], ref[t], sizes[t] * 4) != 0 : 0;
    AT_EQ_INT(bad, 0);
    acc.desc.sync_each_batch = 0;
    acc.sync_gradients = 1;
    for (t = 0; t < NT; ++t)
        for (i = 0; i < sizes[t]; ++i) g[t][i] = gval(t, i, R);
    /* wait without grad_ready: everything reduced */
    AT_EQ_INT(accel_coll_reducer_wait(red), ACCEL_OK);
    for (t = 0, bad = 0; t < NT; ++t) bad += memcmp(g[t], ref[t], sizes[t] * 4) != 0;
    AT_EQ_INT(bad, 0);
    accel_coll_reducer_destroy(red);

    /* flat mode: the same tensors carved out of one contiguous buffer → one in-place all-reduce */
    {
        size_t total = 0, off = 0;
        float *flat;
        for (t = 0; t < NT; ++t) total += sizes[t];
        flat = (float *)malloc(total * 4);
        AT_EQ_INT(accel_coll_reducer_create(c, NULL, &red), ACCEL_OK);
        for (t = 0; t < NT; ++t) {
            for (i = 0; i < sizes[t]; ++i) flat[off + i] = gval(t, i, R);
            gt[t] = f32_tensor("f", flat + off, sizes[t]);
            off += sizes[t];
        }
        AT_EQ_INT(accel_coll_reducer_add(red, gt, NT), ACCEL_OK);
        for (t = NT - 1; t >= 0; --t) AT_EQ_INT(accel_coll_grad_ready(red, t), ACCEL_OK);
        AT_EQ_INT(accel_coll_reducer_is_flat(red), 1);
        AT_EQ_INT(accel_coll_reducer_num_buckets(red), 1);
        AT_EQ_INT(accel_coll_reducer_wait(red), ACCEL_OK);
        for (t = 0, off = 0, bad = 0; t < NT; ++t) { bad += memcmp(flat + off, ref[t], sizes[t] * 4) != 0; off += sizes[t]; }
        AT_EQ_INT(bad, 0);
        accel_coll_reducer_destroy(red);
        free(flat);
    }
    /* ranks that registered different lists: every rank fails at finalize */
    if (P > 1) {
        AT_EQ_INT(accel_coll_reducer_create(c, NULL, &red), ACCEL_OK);
        gt[0] = f32_tensor("a", g[0], sizes[0] - (R == 1));
        AT_EQ_INT(accel_coll_reducer_add(red, gt, 1), ACCEL_OK);
        AT_EQ_INT(accel_coll_reducer_finalize(red), ACCEL_ERR_MISMATCH);
        AT_CONTAINS(accel_last_error(&acc), "rank 1:");
        accel_coll_reducer_destroy(red);
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
    return dec16((uint16_t)b, dt == ACCEL_BF16);
}
static uint64_t ddp_enc(double v, accel_dtype dt) { /* v exactly representable in dt */
    if (dt == ACCEL_F64) { uint64_t b; memcpy(&b, &v, 8); return b; }
    if (dt == ACCEL_F32) { float f = (float)v; uint32_t u; memcpy(&u, &f, 4); return u; }
    return enc16(v, dt == ACCEL_BF16);
}
/* the float-width rounding of each step: double for F64, float for the others (then to 16 bits) */
static double ddp_round(double v, accel_dtype dt) {
    if (dt == ACCEL_F64) return v;
    if (dt == ACCEL_F32) return (float)v;
    return ddp_dec(enc16((double)(float)v, dt == ACCEL_BF16), dt);
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
    accel_coll_reducer *red;
    accel_coll_reducer_desc rd;
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
        AT_EQ_INT(accel_coll_reducer_create(c, &rd, &red), ACCEL_OK);
        for (k = 0, off = 0; k < NG; ++k) {
            buf[k] = flatmode ? flat + off * es : (unsigned char *)malloc(sizes[k] * es);
            off += sizes[k];
            for (i = 0; i < sizes[k]; ++i) put_bits(buf[k], i, dt, xb);
            memset(&t[k], 0, sizeof t[k]);
            t[k].ptr = buf[k]; t[k].dtype = dt; t[k].ndim = 1; t[k].shape[0] = (int64_t)sizes[k];
        }
        AT_EQ_INT(accel_coll_reducer_add(red, t, NG), ACCEL_OK);
        AT_EQ_INT(accel_coll_reducer_finalize(red), ACCEL_OK);
        AT_EQ_INT(accel_coll_reducer_is_flat(red), flatmode);
        if (!flatmode) AT_EQ_INT(accel_coll_reducer_num_buckets(red), 2);
        for (k = NG - 1; k >= 0; --k) AT_EQ_INT(accel_coll_grad_ready(red, k), ACCEL_OK);
        AT_EQ_INT(accel_coll_reducer_wait(red), ACCEL_OK);
        for (k = 0; k < NG; ++k)
            for (i = 0; i < sizes[k]; ++i)
                if (get_bits(buf[k], i, dt) != want && bad++ < 3)
                    fprintf(stderr, "[rank %d] %s%s %s grad %d[%zu] = %#llx, want %#llx\n", R, flatmode ? "flat " : "",
                            no_average ? "sum" : "average", accel_dtype_name(dt), k, i,
                            (unsigned long long)get_bits(buf[k], i, dt), (unsigned long long)want);
        accel_coll_reducer_destroy(red);
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
static size_t g_fail_min_bytes; /* nonzero: the host allocator refuses blocks at least this large */
static void *test_alloc(size_t n, void *u) { (void)u; return g_fail_min_bytes && n >= g_fail_min_bytes ? NULL : malloc(n); }
static void test_free(void *p, void *u) { (void)u; free(p); }

static void expect_collective_failure(accel_result r, int failing_rank, accel_result local, double t0) {
    char want[32];
    if (R == failing_rank) AT_EQ_INT(r, local);
    else {
        AT_EQ_INT(r, ACCEL_ERR_REMOTE);
        snprintf(want, sizeof want, "rank %d", failing_rank);
        AT_CONTAINS(accel_last_error(&acc), want);
    }
    AT_CHECK_MSG(accel_now() - t0 < 10.0, "failed at once, not at the 60 s deadline");
}

static void local_failures(void) {
    accel_coll *c = NULL;
    accel_coll_desc cd;
    accel_coll_reducer *red;
    accel_coll_reducer_desc rd;
    accel_tensor t, out;
    accel_blobs blobs;
    float rows[8], *g, *g2;
    double t0;
    int k;
    memset(&cd, 0, sizeof cd);
    /* create: a bad desc on rank 1 (the others used to block in MPI_Comm_dup forever) */
    cd.timeout_ms = R == 1 ? -5 : 60000;
    t0 = accel_now();
    expect_collective_failure(accel_coll_create(&acc, &cd, &c), 1, ACCEL_ERR_INVALID_ARGUMENT, t0);
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
    expect_collective_failure(accel_coll_gather_rows(c, &t, &out), 0, ACCEL_ERR_INVALID_ARGUMENT, t0);
    t.ndim = 1;
    t0 = accel_now();
    expect_collective_failure(accel_coll_pad_across_processes(c, &t, 0, 0.0, 0, R == P - 1 ? NULL : &out), P - 1,
                              ACCEL_ERR_INVALID_ARGUMENT, t0);
    AT_EQ_INT(accel_coll_gather_rows(c, &t, &out), ACCEL_OK); /* the context is fine afterwards */
    AT_EQ_INT(out.shape[0], 2 * P);
    accel_coll_free(c, out.ptr);
    /* objects: a NULL buffer on rank 1, a bad source rank on rank 0 */
    memset(&blobs, 0, sizeof blobs);
    t0 = accel_now();
    expect_collective_failure(accel_gather_object(&acc, R == 1 ? NULL : "abc", 3, &blobs), 1, ACCEL_ERR_INVALID_ARGUMENT, t0);
    t0 = accel_now();
    expect_collective_failure(accel_broadcast_object_list(&acc, &blobs, R == 0 ? P : 0), 0, ACCEL_ERR_INVALID_ARGUMENT, t0);
    /* the reducer: flat mode required but rank 1's gradients are not contiguous */
    g = (float *)calloc(4 * 20000 + 16, sizeof(float));
    g2 = (float *)calloc(20000, sizeof(float));
    memset(&rd, 0, sizeof rd);
    rd.flat = ACCEL_ON;
    AT_EQ_INT(accel_coll_reducer_create(c, &rd, &red), ACCEL_OK);
    for (k = 0; k < 2; ++k) {
        memset(&t, 0, sizeof t);
        t.dtype = ACCEL_F32; t.ndim = 1; t.shape[0] = 20000;
        t.ptr = k == 1 && R == 1 ? (void *)g2 : (void *)(g + 20000 * k);
        AT_EQ_INT(accel_coll_reducer_add(red, &t, 1), ACCEL_OK);
    }
    t0 = accel_now();
    expect_collective_failure(accel_coll_reducer_finalize(red), 1, ACCEL_ERR_INVALID_ARGUMENT, t0);
    accel_coll_reducer_destroy(red);
    /* the reducer: rank 1 cannot allocate its bucket (4 x 80 KB in one bucket); then it can, and finalize works */
    AT_EQ_INT(accel_coll_reducer_create(c, NULL, &red), ACCEL_OK);
    for (k = 0; k < 4; ++k) {
        memset(&t, 0, sizeof t);
        t.dtype = ACCEL_F32; t.ndim = 1; t.shape[0] = 20000;
        t.ptr = g + 20000 * k + (k ? 1 : 0); /* not contiguous: buckets */
        AT_EQ_INT(accel_coll_reducer_add(red, &t, 1), ACCEL_OK);
    }
    if (R == 1) g_fail_min_bytes = 64 << 10;
    t0 = accel_now();
    expect_collective_failure(accel_coll_reducer_finalize(red), 1, ACCEL_ERR_OUT_OF_MEMORY, t0);
    g_fail_min_bytes = 0;
    AT_EQ_INT(accel_coll_reducer_num_buckets(red), -1);
    AT_EQ_INT(accel_coll_reducer_finalize(red), ACCEL_OK);
    AT_EQ_INT(accel_coll_reducer_num_buckets(red), 1);
    AT_EQ_INT(accel_coll_reducer_wait(red), ACCEL_OK);
    accel_coll_reducer_destroy(red);
    free(g);
    free(g2);
    accel_coll_destroy(c);
}

static void quiet_log(void *u, accel_log_level l, const char *m) { (void)u; (void)l; (void)m; }

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
    async_ops(c);
    ring_concurrent(c);
    exchange_small(c);
    accelerate_reduce(c);
    pad_tests(c);
    gather_metrics(c);
    objects();
    reducer_tests(c);
    ddp_average(c);
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
    accel_coll_reducer *red;
    accel_coll_reducer_desc rd;
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
    AT_EQ_INT(accel_coll_reducer_create(c, &rd, &red), ACCEL_OK);
    for (t = 0; t < NT; ++t) {
        snprintf(names[t], sizeof names[t], "w%d", t);
        gt[t] = f32_tensor(names[t], g[t], N);
    }
    AT_EQ_INT(accel_coll_reducer_add(red, gt, NT), ACCEL_OK);
    AT_EQ_INT(accel_coll_reducer_finalize(red), ACCEL_OK);
    AT_EQ_INT(accel_coll_reducer_is_flat(red), 0);
    AT_EQ_INT(accel_coll_reducer_num_buckets(red), 2);
    n0 = accel_coll_reducer_bucket(red, 0, idx, NT);
    AT_CHECK(n0 >= 2 && n0 < NT);
    memset(in0, 0, sizeof in0);
    for (i = 0; i < n0; ++i) in0[idx[i]] = 1;
    /* a healthy step first: every rank's values averaged */
    for (t = 0; t < NT; ++t)
        for (i = 0; i < N; ++i) g[t][i] = (float)(R + 1);
    for (t = NT - 1; t >= 0; --t) AT_EQ_INT(accel_coll_grad_ready(red, t), ACCEL_OK);
    AT_EQ_INT(accel_coll_reducer_wait(red), ACCEL_OK);
    for (t = 0; t < NT; ++t)
        for (i = 0; i < N; ++i) bad += g[t][i] != (float)(P + 1) / 2.0f;
    AT_EQ_INT(bad, 0);
    for (t = 0; t < NT; ++t)
        for (i = 0; i < N; ++i) g[t][i] = (float)(10 * (R + 1)) + (float)i;
    if (R == P - 1) {
        sleep(3); /* stalled: no grad_ready, no MPI call, past the others' deadline */
        t0 = accel_now();
        for (t = NT - 1; t >= 0; --t)
            if (accel_coll_grad_ready(red, t) != ACCEL_OK) break;
        r = accel_coll_reducer_wait(red);
        dt = accel_now() - t0;
        AT_CHECK_MSG(dt < 2.5, "the late rank's step ends within its own deadline");
        (void)r; /* OK (a collective matched the others' abandoned op) or an error: never a hang */
    } else {
        for (t = 0; t < NT; ++t)
            if (in0[t]) AT_EQ_INT(accel_coll_grad_ready(red, t), ACCEL_OK); /* the last one launches bucket 0 */
        t0 = accel_now();
        while (accel_now() - t0 < 1.6) { /* "computing" past the deadline, with no MPI call */
        }
        t = 0;
        while (in0[t]) ++t; /* the first gradient of bucket 1 */
        AT_EQ_INT(accel_coll_grad_ready(red, t), ACCEL_ERR_TIMEOUT); /* bucket 1's first gradient: the poll */
        dt = accel_now() - t0;
        AT_CHECK_MSG(dt < 2.0, "the timeout is reported by the first grad_ready after the deadline");
        AT_CONTAINS(accel_last_error(&acc), "within 1.0 s");
        for (t = 0; t < NT; ++t)
            if (in0[t])
                for (i = 0; i < N; ++i) bad += g[t][i] != (float)(10 * (R + 1)) + (float)i;
        AT_EQ_INT(bad, 0); /* nothing unpacked from the failed reduction */
        t0 = accel_now();
        AT_CHECK(accel_coll_reducer_wait(red) != ACCEL_OK); /* the step fails at once, no second deadline */
        AT_EQ_INT(accel_coll_barrier(c), ACCEL_ERR_STATE);
        AT_CHECK(accel_now() - t0 < 0.5);
        for (t = 0; t < NT; ++t)
            if (in0[t])
                for (i = 0; i < N; ++i) bad += g[t][i] != (float)(10 * (R + 1)) + (float)i;
        AT_EQ_INT(bad, 0); /* and not by the failed wait either */
    }
    AT_EQ_INT(accel_wait_for_everyone(&acc), ACCEL_OK); /* the core's own communicator still works */
    accel_coll_reducer_destroy(red);
    accel_coll_destroy(c);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "basic";
    accel_desc d;
    int rc;
    memset(&d, 0, sizeof d);
    d.cpu = 1;
    d.log_fn = quiet_log; /* expected errors are checked through accel_last_error */
    d.host_allocator.alloc = test_alloc; /* malloc/free that local_failures() can make refuse large blocks */
    d.host_allocator.free = test_free;
    if (accel_init(&acc, &d) != ACCEL_OK) {
        fprintf(stderr, "accel_init: %s\n", accel_last_error(&acc));
        return 1;
    }
    P = acc.num_processes;
    R = acc.process_index;
    init_tables();
    if (!strcmp(mode, "fault")) fault(1024);
    else if (!strcmp(mode, "fault-large")) fault(65536);
    else if (!strcmp(mode, "fault-seg")) fault(2621440);
    else if (!strcmp(mode, "fault-reducer")) fault_reducer();
    else basic();
    rc = at_finish("collectives_mpi");
    accel_shutdown(&acc);
    return rc;
}
