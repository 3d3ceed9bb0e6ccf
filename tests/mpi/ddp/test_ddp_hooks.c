/* accel_ddp.h's communication hooks (Accelerate's DDPCommunicationHookType FP16/BF16, comm_wrapper) under mpirun:
   each rank reduces the same gradients under every hook/wrapper pair and layout and writes its inputs and results
   to ACCEL_HOOKS_OUT/rank<R>.bin; hooks_reference.py checks them bit for bit against PyTorch's own hooks. The checks
   here need no reference: every rank holds the same bits, the packed layouts give what a bucket of one gives, and
   bad descs fail with a message. usage: test_ddp_hooks (ACCEL_HOOKS_OUT set) */
#include "accel.h"
#include "accel_collectives.h"
#include "accel_ddp.h"
#include "accel_test.h"
#include "accel_test_coll.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static accel acc;
static int P, R;

enum { NT = 5 };
static const int sizes[NT] = {1000, 3, 50, 77, 5000};
static const accel_dtype dts[NT] = {ACCEL_F32, ACCEL_F32, ACCEL_F16, ACCEL_BF16, ACCEL_F32};

/* a spread of magnitudes: fp16 subnormals, ordinary values, values past fp16's range (inf on the wire), ties */
static double gval(int t, int i, int r) {
    uint32_t h = (uint32_t)(t * 7919 + i * 104729 + r * 1299709) * 2654435761u;
    double m = (double)(h >> 8) / 16777216.0 - 0.5, e;
    switch (h % 8) {
    case 0: e = ldexp(1, -20); break;
    case 1: e = ldexp(1, -14); break;
    case 2: e = 140000.0; break;
    case 3: return (double)((int)(h >> 20) % 2048) / 1024.0; /* exact in fp16: rounding only in the division */
    default: e = ldexp(1, (int)(h % 13) - 4); break;
    }
    return m * e;
}

/* this rank's gradient element, exactly as stored in dt (16-bit tensors stay inside fp16's range) */
static double inval(accel_dtype dt, int t, int i) {
    double v = gval(t, i, R);
    if (dt == ACCEL_F32) return (float)v;
    v = v > 60000 ? 60000 : v < -60000 ? -60000 : v;
    return at_dec16(at_enc16(v, dt == ACCEL_BF16), dt == ACCEL_BF16);
}

static void fill(void *p, accel_dtype dt, int n, int t) {
    int i;
    for (i = 0; i < n; ++i) {
        if (dt == ACCEL_F32) ((float *)p)[i] = (float)inval(dt, t, i);
        else ((uint16_t *)p)[i] = at_enc16(inval(dt, t, i), dt == ACCEL_BF16);
    }
}

/* one case: the five tensors (separate, several buckets) or one F32 buffer cut in three (flat) */
static void run_case(accel_coll *c, FILE *out, int hook, int wrap, int flat) {
    void *g[NT];
    accel_tensor gt[NT];
    accel_ddp *red;
    accel_ddp_desc rd;
    int t, nt = flat ? 3 : NT, k;
    float *base = NULL;
    memset(&rd, 0, sizeof rd);
    rd.comm_hook = (accel_ddp_comm_hook)hook;
    rd.comm_wrapper = (accel_ddp_comm_hook)wrap;
    rd.first_bucket_mb = 0.004; /* several buckets: the packed offsets matter */
    rd.bucket_cap_mb = 0.01;
    rd.flat = flat ? ACCEL_ON : ACCEL_OFF;
    if (flat) base = (float *)malloc((size_t)(sizes[0] + sizes[1] + sizes[4]) * 4);
    for (t = 0, k = 0; t < NT; ++t) {
        int n = sizes[t];
        if (flat && dts[t] != ACCEL_F32) continue;
        g[k] = flat ? (void *)(base + (t == 0 ? 0 : t == 1 ? sizes[0] : sizes[0] + sizes[1]))
                    : malloc((size_t)n * accel_dtype_size(dts[t]));
        gt[k] = at_vec("g", g[k], dts[t], n);
        ++k;
    }
    AT_EQ_INT(accel_ddp_create(c, &rd, &red), ACCEL_OK);
    AT_EQ_INT(accel_ddp_add(red, gt, nt), ACCEL_OK);
    AT_EQ_INT(accel_ddp_finalize(red), ACCEL_OK);
    AT_EQ_INT(accel_ddp_is_flat(red), flat);
    if (!flat) AT_CHECK(accel_ddp_num_buckets(red) >= 3);
    for (t = 0; t < 2; ++t) { /* two steps: the second reuses the compressed buffers */
        int j;
        for (j = 0, k = 0; j < NT; ++j)
            if (!flat || dts[j] == ACCEL_F32) { fill(g[k], dts[j], sizes[j], j); ++k; }
        if (t == 1 && !flat)
            for (k = nt - 1; k >= 0; --k) AT_EQ_INT(accel_ddp_grad_ready(red, k), ACCEL_OK);
        AT_EQ_INT(accel_ddp_wait(red), ACCEL_OK);
    }
    /* record: case header, then per tensor its dtype code, count, this rank's input, the result */
    fprintf(out, "case %d %d %d %d\n", hook, wrap, flat, nt);
    for (t = 0, k = 0; t < NT; ++t) {
        int i, n = sizes[t];
        if (flat && dts[t] != ACCEL_F32) continue;
        fprintf(out, "tensor %s %d\n", accel_dtype_name(dts[t]), n);
        for (i = 0; i < n; ++i) {
            double got = dts[t] == ACCEL_F32 ? (double)((float *)g[k])[i]
                                             : at_dec16(((uint16_t *)g[k])[i], dts[t] == ACCEL_BF16);
            fprintf(out, "%a %a\n", inval(dts[t], t, i), got);
        }
        ++k;
    }
    /* every rank holds the same bits */
    for (k = 0; k < nt; ++k) {
        size_t bytes = (size_t)gt[k].shape[0] * accel_dtype_size(gt[k].dtype);
        unsigned char *mine = (unsigned char *)g[k], *r0 = (unsigned char *)malloc(bytes);
        memcpy(r0, mine, bytes);
        AT_EQ_INT(accel_coll_broadcast(c, r0, bytes, ACCEL_U8, 0), ACCEL_OK);
        AT_CHECK_MSG(memcmp(r0, mine, bytes) == 0, "every rank holds rank 0's result");
        free(r0);
    }
    accel_ddp_destroy(red);
    for (k = 0; k < nt && !flat; ++k) free(g[k]);
    free(base);
}

static void bad_descs(accel_coll *c) {
    accel_ddp_desc rd;
    accel_ddp *red = NULL;
    double d[2] = {1, 2};
    accel_tensor t = at_vec("w64", d, ACCEL_F64, 2);
    memset(&rd, 0, sizeof rd);
    rd.comm_hook = (accel_ddp_comm_hook)7;
    AT_EQ_INT(accel_ddp_create(c, &rd, &red), ACCEL_ERR_INVALID_ARGUMENT);
    AT_CONTAINS(accel_last_error(&acc), "comm_hook=7");
    rd.comm_hook = ACCEL_DDP_COMM_HOOK_FP16;
    rd.no_average = 1;
    AT_EQ_INT(accel_ddp_create(c, &rd, &red), ACCEL_ERR_INVALID_ARGUMENT);
    AT_CONTAINS(accel_last_error(&acc), "no_average");
    rd.no_average = 0;
    AT_EQ_INT(accel_ddp_create(c, &rd, &red), ACCEL_OK);
    AT_EQ_INT(accel_ddp_add(red, &t, 1), ACCEL_ERR_INVALID_ARGUMENT);
    AT_CONTAINS(accel_last_error(&acc), "F64");
    AT_EQ_INT(accel_ddp_finalize(red), ACCEL_OK); /* nothing was registered */
    AT_EQ_INT(accel_ddp_num_buckets(red), 0);
    accel_ddp_destroy(red);
}

int main(void) {
    const char *dir = getenv("ACCEL_HOOKS_OUT");
    char path[4096];
    FILE *out;
    accel_coll *c;
    int rc, hook, wrap, flat;
    if (!dir) { fprintf(stderr, "test_ddp_hooks: set ACCEL_HOOKS_OUT (run by hooks_reference.py)\n"); return 1; }
    if (at_init_cpu(&acc, 0, &P, &R) != 0) return 1;
    snprintf(path, sizeof path, "%s/rank%d.txt", dir, R);
    out = fopen(path, "w");
    if (!out) { fprintf(stderr, "cannot write %s\n", path); return 1; }
    AT_EQ_INT(accel_coll_create(&acc, NULL, &c), ACCEL_OK);
    for (hook = 1; hook <= 2; ++hook)
        for (wrap = 0; wrap <= 2; ++wrap)
            for (flat = 0; flat <= 1; ++flat) run_case(c, out, hook, wrap, flat);
    bad_descs(c);
    fclose(out);
    accel_coll_destroy(c);
    rc = at_finish("ddp_hooks");
    accel_shutdown(&acc);
    return rc;
}
