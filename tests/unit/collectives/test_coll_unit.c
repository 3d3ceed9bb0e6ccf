/* accel_collectives.h on one process: the 16-bit math of the MPI user ops, AVG and pad values (the core's codec,
   against double arithmetic), the NONE backend, split_between_processes (docs/semantics.md §7), pad/gather/objects on
   one rank. The implementation is compiled into this TU (ACCEL_STATIC) so the private ACCEL_HD helpers are visible. */
#define ACCEL_IMPLEMENTATION
#define ACCEL_STATIC
#include "accel.h"
#include "accel_collectives.h"
#include "accel_test.h"
#include <math.h>

static double ref_f16(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m + 1024, e - 25);
    return s ? -v : v;
}
static double ref_bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static double ref16(uint16_t h, int bf) { return bf ? ref_bf16(h) : ref_f16(h); }
/* got is x rounded to the nearest 16-bit value, ties to the even code: checked by scanning the neighbours in double
   (independent of the library's bit tricks) */
static int nearest_even_ok(double x, uint16_t got, int bf) {
    double g = ref16(got, bf);
    double maxv = bf ? 3.3895313892515355e38 : 65504.0;
    uint16_t lo, hi;
    double dl, dh;
    if (isnan(x)) return got == 0x7fff;
    if (fabs(x) > maxv) {
        /* beyond the largest finite: inf only at or above the midpoint to the next binade step */
        double step = bf ? ldexp(1, 127 - 7) : 32.0, mid = maxv + step / 2;
        if (fabs(x) >= mid) return isinf(g) && (g > 0) == (x > 0);
        return g == (x > 0 ? maxv : -maxv);
    }
    if (isinf(g)) return 0;
    if (g == x) return 1;
    lo = (uint16_t)(got - 1);
    hi = (uint16_t)(got + 1);
    dl = ref16(lo, bf);
    dh = ref16(hi, bf);
    if (fabs(g - x) > fabs(dl - x) && !isnan(dl) && (got & 0x7fff) != 0) return 0;
    if (fabs(g - x) > fabs(dh - x) && !isnan(dh) && !isinf(dh)) return 0;
    if ((fabs(g - x) == fabs(dl - x) && (got & 0x7fff) != 0) || (fabs(g - x) == fabs(dh - x) && !isinf(dh)))
        return (got & 1) == 0; /* tie: even code */
    return 1;
}

/* The MPI user ops for F16/BF16 (accel__coll_combine16), AVG's division and the pad value use the core's codec: float
   math, one rounding to nearest even, and CUDA's NaN (0x7FFF, whatever the sign or payload). */
static void sixteen_bit_math(void) {
    uint32_t x = 12345u;
    int i, bad = 0, bf;
    unsigned char pat[8];
    uint16_t h;
    /* random sums/products of 16-bit values over a moderate exponent range: the float result rounded once */
    for (i = 0; i < 200000; ++i) {
        uint16_t a, b;
        double fa, fb;
        int op = i % 2 ? ACCEL_COLL_SUM : ACCEL_COLL_PROD;
        bf = (i / 2) % 2;
        x = x * 1664525u + 1013904223u;
        a = (uint16_t)(x >> 16);
        b = (uint16_t)x;
        if (bf) { a = (uint16_t)((a & 0x807f) | (0x3800 + ((a >> 7) & 0x0f) * 0x80)); b = (uint16_t)((b & 0x807f) | (0x3800 + ((b >> 7) & 0x0f) * 0x80)); }
        else { a = (uint16_t)((a & 0x83ff) | (((a >> 10) % 30 + 1) << 10)); b = (uint16_t)((b & 0x83ff) | (((b >> 10) % 30 + 1) << 10)); }
        fa = ref16(a, bf);
        fb = ref16(b, bf);
        if (!nearest_even_ok((double)(float)(op == ACCEL_COLL_SUM ? fa + fb : fa * fb), accel__coll_combine16(b, a, op, bf), bf))
            bad++;
    }
    AT_EQ_INT(bad, 0);
    AT_EQ_INT(accel__coll_combine16(0x3f80, 0x3b80, ACCEL_COLL_SUM, 1), 0x3f80); /* 1 + 2^-8 → 1 (tie to even) */
    AT_EQ_INT(accel__coll_combine16(0x3c00, 0x3c00, ACCEL_COLL_SUM, 0), 0x4000); /* 1 + 1 = 2 in fp16 */
    AT_EQ_INT(accel__coll_combine16(0x4000, 0x4200, ACCEL_COLL_PROD, 0), 0x4600); /* 2 * 3 = 6 */
    AT_EQ_INT(accel__coll_combine16(0xc000, 0x4200, ACCEL_COLL_MAX, 0), 0x4200);
    AT_EQ_INT(accel__coll_combine16(0xc000, 0x4200, ACCEL_COLL_MIN, 1), 0xc000);
    AT_EQ_INT(accel__coll_combine16(0x7bff, 0x7bff, ACCEL_COLL_SUM, 0), 0x7c00); /* overflow → inf */
    /* NaN in any encoding comes out as 0x7FFF (the module's old codec kept the sign: 0xfe00 / 0xffc1) */
    AT_EQ_INT(accel__coll_combine16(0xfe01, 0x3c00, ACCEL_COLL_SUM, 0), 0x7fff);
    AT_EQ_INT(accel__coll_combine16(0x3c00, 0x7c01, ACCEL_COLL_PROD, 0), 0x7fff);
    AT_EQ_INT(accel__coll_combine16(0xffc1, 0x3f80, ACCEL_COLL_SUM, 1), 0x7fff);
    AT_EQ_INT(accel__coll_combine16(0x7f81, 0x3f80, ACCEL_COLL_SUM, 1), 0x7fff);
    AT_EQ_INT(accel__coll_combine16(0x7c00, 0xfc00, ACCEL_COLL_SUM, 0), 0x7fff); /* inf - inf */
    /* AVG's division of a 16-bit buffer, and the pad value */
    for (bf = 0; bf < 2; ++bf) {
        h = bf ? 0x4040 : 0x4200; /* 3 */
        accel__coll_div_elem(&h, 0, bf ? ACCEL_BF16 : ACCEL_F16, 3.0);
        AT_EQ_INT(h, bf ? 0x3f80 : 0x3c00);
        h = bf ? 0xffc1 : 0xfe01;
        accel__coll_div_elem(&h, 0, bf ? ACCEL_BF16 : ACCEL_F16, 2.0);
        AT_EQ_INT(h, 0x7fff);
        accel__coll_value_bytes(NAN, bf ? ACCEL_BF16 : ACCEL_F16, pat);
        AT_EQ_INT(pat[0] | (pat[1] << 8), 0x7fff);
        accel__coll_value_bytes(-1.0, bf ? ACCEL_BF16 : ACCEL_F16, pat);
        AT_EQ_INT(pat[0] | (pat[1] << 8), bf ? 0xbf80 : 0xbc00);
    }
}

static void split(void) {
    accel_coll_range r;
    int p;
    /* Accelerate: q, r = divmod(10, 3) → [0,4) [4,7) [7,10) */
    static const int64_t starts[3] = {0, 4, 7}, ends[3] = {4, 7, 10};
    for (p = 0; p < 3; ++p) {
        AT_EQ_INT(accel_coll_split_between_processes(10, 3, p, 1, &r), ACCEL_OK);
        AT_EQ_INT(r.start, starts[p]);
        AT_EQ_INT(r.end, ends[p]);
        AT_EQ_INT(r.pad_count, p == 0 ? 0 : 1); /* padded to q + 1 = 4 with the last item */
        AT_EQ_INT(r.pad_index, 9);
    }
    /* fewer items than processes: 2 over 4 → [0,1) [1,2) [] [] ; padding gives everyone one item */
    for (p = 0; p < 4; ++p) {
        AT_EQ_INT(accel_coll_split_between_processes(2, 4, p, 1, &r), ACCEL_OK);
        AT_EQ_INT(r.end - r.start, p < 2 ? 1 : 0);
        AT_EQ_INT(r.pad_count, p < 2 ? 0 : 1);
    }
    /* even split: no padding */
    AT_EQ_INT(accel_coll_split_between_processes(8, 4, 3, 1, &r), ACCEL_OK);
    AT_EQ_INT(r.start, 6); AT_EQ_INT(r.end, 8); AT_EQ_INT(r.pad_count, 0);
    /* one process: unchanged */
    AT_EQ_INT(accel_coll_split_between_processes(5, 1, 0, 1, &r), ACCEL_OK);
    AT_EQ_INT(r.start, 0); AT_EQ_INT(r.end, 5); AT_EQ_INT(r.pad_count, 0);
    /* errors: empty with padding (IndexError), bad rank */
    AT_EQ_INT(accel_coll_split_between_processes(0, 2, 0, 1, &r), ACCEL_ERR_INVALID_ARGUMENT);
    AT_EQ_INT(accel_coll_split_between_processes(0, 2, 1, 0, &r), ACCEL_OK);
    AT_EQ_INT(r.end - r.start, 0);
    AT_EQ_INT(accel_coll_split_between_processes(5, 2, 2, 0, &r), ACCEL_ERR_INVALID_ARGUMENT);
}

static void none_backend(void) {
    accel acc;
    accel_desc d;
    accel_coll *c;
    accel_coll_desc cd;
    float x[5] = {1, 2, 3, 4, 5}, y[5];
    int32_t iv[3] = {1, 2, 3};
    memset(&d, 0, sizeof d);
    d.cpu = 1;
    d.no_mpi = 1;
    d.log_level = 1;
    AT_EQ_INT(accel_init(&acc, &d), ACCEL_OK);
    AT_EQ_INT(accel_coll_create(&acc, NULL, &c), ACCEL_OK);
    AT_EQ_INT(accel_coll_get_backend(c), ACCEL_COLL_BACKEND_NONE);
    AT_EQ_INT(accel_coll_size(c), 1);
    AT_EQ_INT(accel_coll_all_reduce(c, x, y, 5, ACCEL_F32, ACCEL_COLL_AVG), ACCEL_OK);
    AT_CHECK(memcmp(x, y, sizeof x) == 0);
    AT_EQ_INT(accel_coll_all_gather(c, x, y, 5, ACCEL_F32), ACCEL_OK);
    AT_EQ_INT(accel_coll_broadcast(c, x, 5, ACCEL_F32, 0), ACCEL_OK);
    AT_EQ_INT(accel_coll_barrier(c), ACCEL_OK);
    /* argument errors change nothing */
    memset(y, 0, sizeof y);
    AT_EQ_INT(accel_coll_all_reduce(c, iv, iv, 3, ACCEL_I32, ACCEL_COLL_AVG), ACCEL_ERR_INVALID_ARGUMENT);
    AT_CONTAINS(accel_last_error(&acc), "integer");
    AT_EQ_INT(iv[0], 1);
    AT_EQ_INT(accel_coll_all_reduce(c, x, y, 5, ACCEL_BOOL, ACCEL_COLL_SUM), ACCEL_ERR_UNSUPPORTED);
    AT_EQ_INT(accel_coll_all_reduce(c, x, y, 5, (accel_dtype)99, ACCEL_COLL_SUM), ACCEL_ERR_INVALID_ARGUMENT);
    AT_EQ_INT(accel_coll_all_reduce(c, x, y, 5, ACCEL_F32, (accel_coll_op)9), ACCEL_ERR_INVALID_ARGUMENT);
    AT_EQ_INT(accel_coll_all_reduce(c, NULL, y, 5, ACCEL_F32, ACCEL_COLL_SUM), ACCEL_ERR_INVALID_ARGUMENT);
    AT_EQ_INT(accel_coll_broadcast(c, x, 5, ACCEL_F32, 1), ACCEL_ERR_INVALID_ARGUMENT);
    AT_CONTAINS(accel_last_error(&acc), "root 1");
    AT_EQ_INT(accel_coll_reduce_scatter(c, x, x + 1, 2, ACCEL_F32, ACCEL_COLL_SUM), ACCEL_ERR_INVALID_ARGUMENT);
    AT_CHECK(y[0] == 0);
    /* async on one process completes at once */
    {
        accel_coll_request *q;
        int done = 0;
        AT_EQ_INT(accel_coll_all_reduce_async(c, x, y, 5, ACCEL_F32, ACCEL_COLL_SUM, &q), ACCEL_OK);
        AT_EQ_INT(accel_coll_test(q, &done), ACCEL_OK);
        AT_EQ_INT(done, 1);
        AT_CHECK(memcmp(x, y, sizeof x) == 0);
    }
    /* pad (nothing to pad on one rank) and gather_for_metrics with a remainder */
    {
        int64_t rows[6] = {0, 1, 2, 3, 4, 5};
        accel_tensor t, out;
        memset(&t, 0, sizeof t);
        t.ptr = rows; t.dtype = ACCEL_I64; t.ndim = 2; t.shape[0] = 3; t.shape[1] = 2;
        AT_EQ_INT(accel_coll_pad_across_processes(c, &t, 0, 0, 0, &out), ACCEL_OK);
        AT_EQ_INT(out.shape[0], 3);
        AT_CHECK(memcmp(out.ptr, rows, sizeof rows) == 0);
        accel_coll_free(c, out.ptr);
        acc.end_of_dataloader = 1;
        acc.remainder = 1;
        AT_EQ_INT(accel_coll_gather_for_metrics(c, &t, &out), ACCEL_OK);
        AT_EQ_INT(out.shape[0], 1);
        accel_coll_free(c, out.ptr);
        acc.end_of_dataloader = 0;
        t.ndim = 9;
        AT_EQ_INT(accel_coll_gather_rows(c, &t, &out), ACCEL_ERR_INVALID_ARGUMENT);
        /* one process: gather returns a 0-d tensor unchanged (Accelerate returns the input when not distributed),
           a copy in the context's memory */
        t.ndim = 0;
        t.name = "loss";
        AT_EQ_INT(accel_coll_gather_rows(c, &t, &out), ACCEL_OK);
        AT_EQ_INT(out.ndim, 0);
        AT_EQ_INT(accel_tensor_numel(&out), 1);
        AT_CHECK(out.ptr != t.ptr && *(int64_t *)out.ptr == 0);
        AT_EQ_STR(out.name, "loss");
        accel_coll_free(c, out.ptr);
        acc.end_of_dataloader = 1;
        acc.remainder = 1;
        AT_EQ_INT(accel_coll_gather_for_metrics(c, &t, &out), ACCEL_OK);
        AT_EQ_INT(out.ndim, 0);
        AT_EQ_INT(out.shape[0], 3); /* unchanged, as the input's (unused) shape entries */
        accel_coll_free(c, out.ptr);
        acc.end_of_dataloader = 0;
    }
    /* objects */
    {
        accel_blobs b, l;
        memset(&b, 0, sizeof b);
        memset(&l, 0, sizeof l);
        AT_EQ_INT(accel_gather_object(&acc, "abc", 3, &b), ACCEL_OK);
        AT_EQ_INT(b.count, 1);
        AT_EQ_INT(b.offsets[1], 3);
        AT_CHECK(memcmp(b.data, "abc", 3) == 0);
        accel_blobs_deinit(&b);
        AT_EQ_INT(accel_broadcast_object_list(&acc, &l, 0), ACCEL_OK); /* an empty list is a list */
        AT_EQ_INT(l.count, 0);
        AT_EQ_INT(accel_broadcast_object_list(&acc, &l, 1), ACCEL_ERR_INVALID_ARGUMENT);
    }
    accel_coll_destroy(c);
    /* bad desc values; backend mpi without MPI */
    memset(&cd, 0, sizeof cd);
    cd.timeout_ms = -5;
    AT_EQ_INT(accel_coll_create(&acc, &cd, &c), ACCEL_ERR_INVALID_ARGUMENT);
    cd.timeout_ms = 0;
    cd.debug = (accel_toggle)7;
    AT_EQ_INT(accel_coll_create(&acc, &cd, &c), ACCEL_ERR_INVALID_ARGUMENT);
    AT_CONTAINS(accel_last_error(&acc), "debug=7");
    cd.debug = ACCEL_DEFAULT;
    cd.cuda_aware_mpi = (accel_toggle)-2;
    AT_EQ_INT(accel_coll_create(&acc, &cd, &c), ACCEL_ERR_INVALID_ARGUMENT);
    cd.cuda_aware_mpi = ACCEL_DEFAULT;
    /* zero is the default everywhere: a zeroed desc and NULL give the same context */
    AT_EQ_INT(accel_coll_create(&acc, &cd, &c), ACCEL_OK);
    AT_EQ_INT(accel_coll_get_backend(c), ACCEL_COLL_BACKEND_NONE);
    accel_coll_destroy(c);
    cd.backend = ACCEL_COLL_BACKEND_MPI;
    AT_EQ_INT(accel_coll_create(&acc, &cd, &c), ACCEL_ERR_UNSUPPORTED);
    cd.backend = ACCEL_COLL_BACKEND_NCCL;
    AT_EQ_INT(accel_coll_create(&acc, &cd, &c), ACCEL_ERR_UNSUPPORTED);
    AT_CONTAINS(accel_last_error(&acc), "nvcc");
    AT_EQ_STR(accel_coll_backend_name(ACCEL_COLL_BACKEND_NCCL), "nccl");
    AT_EQ_STR(accel_coll_op_name(ACCEL_COLL_MEAN), "avg");
    accel_shutdown(&acc);
}

int main(void) {
    sixteen_bit_math();
    split();
    none_backend();
    return at_finish("collectives_unit");
}
