/* accel_amp_fp8 across ranks: every rank quantizes its own shard of each step's tensors; after accel_amp_fp8_update
   the scales, scale_invs and amax histories are bit-identical on every rank and equal to those of one process that
   quantized the whole batch (computed on every rank with desc.local_amax, from the same generated data). Steps with a
   spike on one rank only, an Inf on one rank, a NaN recorded on the last rank (NaN wins everywhere), zero steps.
   desc.local_amax keeps the ranks apart. */
#include "accel.h"
#include "accel_amp.h"
#include "accel_test.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

enum { STEPS = 12, N = 3000, SLOTS = 3 };

static void quiet_log(void *user, accel_log_level level, const char *msg) { (void)user; (void)level; (void)msg; }

/* a host allocator that fails once when asked to (the update's amax buffer on one rank) */
static int fail_next;
static void *flaky_alloc(size_t n, void *u) {
    (void)u;
    if (fail_next) { fail_next = 0; return NULL; }
    return malloc(n);
}
static void flaky_free(void *p, void *u) { (void)u; free(p); }

/* element i of slot k's tensor on rank r at step s: a deterministic function every rank can evaluate */
static float gen(int s, int k, int r, int i) {
    uint64_t x = ((uint64_t)s * 1000003u + (uint64_t)k * 7919u + (uint64_t)r * 104729u + (uint64_t)i) * 0x9e3779b97f4a7c15ull;
    float v;
    x ^= x >> 29; x *= 0xbf58476d1ce4e5b9ull; x ^= x >> 32;
    v = ((float)(x & 0xffffff) / 16777216.0f * 2.0f - 1.0f) * (k == 2 ? 1e-4f : 3.0f);
    if (s == 4 && r == 1 && i == 17) v = 900.0f;        /* a spike on rank 1 only */
    if (s == 7 && r == 2 && i == 5) v = INFINITY;       /* an Inf on rank 2 (np 3) */
    if ((s == 2 || s == 9) && k == 1) v = 0.0f;         /* zero steps for slot 1 */
    return v;
}

static accel_tensor tens(void *p, accel_dtype t, int64_t n) {
    accel_tensor x;
    memset(&x, 0, sizeof x);
    x.ptr = p; x.dtype = t; x.ndim = 1; x.shape[0] = n;
    return x;
}

int main(void) {
    accel acc;
    accel_desc d;
    accel_amp_fp8 f, single, local;
    accel_amp_fp8_desc fd;
    float *x = (float *)malloc(sizeof(float) * N * SLOTS);
    uint8_t *q = (uint8_t *)malloc(N * SLOTS);
    accel_tensor src[SLOTS], dst[SLOTS];
    int P, R, s, k, r, i, bad = 0, differ_local = 0;
    size_t cells;
    float *all;
    memset(&d, 0, sizeof d);
    d.cpu = 1;
    d.mixed_precision = ACCEL_PRECISION_FP8;
    d.log_fn = quiet_log;
    d.host_allocator.alloc = flaky_alloc;
    d.host_allocator.free = flaky_free;
    if (accel_init(&acc, &d) != ACCEL_OK) { fprintf(stderr, "init: %s\n", accel_last_error(&acc)); return 1; }
    P = acc.num_processes;
    R = acc.process_index;
    memset(&fd, 0, sizeof fd);
    fd.num_forward = 2; fd.num_backward = 1; fd.amax_history_len = 5; fd.amax_compute_algo = ACCEL_AMP_AMAX_MAX;
    AT_EQ_INT(accel_amp_fp8_init(&acc, &f, &fd), ACCEL_OK);
    fd.local_amax = 1;
    AT_EQ_INT(accel_amp_fp8_init(&acc, &single, &fd), ACCEL_OK);
    AT_EQ_INT(accel_amp_fp8_init(&acc, &local, &fd), ACCEL_OK);
    cells = (size_t)SLOTS * (2 + 5);
    all = (float *)malloc(sizeof(float) * cells * (size_t)P);
    for (k = 0; k < SLOTS; ++k) {
        src[k] = tens(x + (size_t)k * N, ACCEL_F32, N);
        dst[k] = tens(q + (size_t)k * N, accel_amp_fp8_dtype(&f, k), N);
    }
    for (s = 0; s < STEPS; ++s) {
        /* this rank's shard into the collective object and the rank-local one */
        for (k = 0; k < SLOTS; ++k)
            for (i = 0; i < N; ++i) x[(size_t)k * N + (size_t)i] = gen(s, k, R, i);
        AT_EQ_INT(accel_amp_fp8_quantize(&f, NULL, src, dst, SLOTS), ACCEL_OK);
        AT_EQ_INT(accel_amp_fp8_quantize(&local, NULL, src, dst, SLOTS), ACCEL_OK);
        /* every rank's shard into the single-process object */
        for (r = 0; r < P; ++r) {
            for (k = 0; k < SLOTS; ++k)
                for (i = 0; i < N; ++i) x[(size_t)k * N + (size_t)i] = gen(s, k, r, i);
            AT_EQ_INT(accel_amp_fp8_quantize(&single, NULL, src, dst, SLOTS), ACCEL_OK);
        }
        if (s == 10) { /* a NaN recorded on the last rank: the step's amax is NaN everywhere */
            if (R == P - 1) AT_EQ_INT(accel_amp_fp8_record_amax(&f, 0, NAN), ACCEL_OK);
            if (R == P - 1) AT_EQ_INT(accel_amp_fp8_record_amax(&local, 0, NAN), ACCEL_OK);
            AT_EQ_INT(accel_amp_fp8_record_amax(&single, 0, NAN), ACCEL_OK);
        }
        AT_EQ_INT(accel_amp_fp8_update(&f), ACCEL_OK);
        AT_EQ_INT(accel_amp_fp8_update(&single), ACCEL_OK);
        AT_EQ_INT(accel_amp_fp8_update(&local), ACCEL_OK);
        /* scale, scale_inv and history laid out contiguously: compare the bytes */
        if (memcmp(f.scale, single.scale, sizeof(float) * cells) != 0) {
            if (bad++ < 3)
                fprintf(stderr, "rank %d step %d: scales %g %g %g vs single-process %g %g %g\n", R, s, (double)f.scale[0],
                        (double)f.scale[1], (double)f.scale[2], (double)single.scale[0], (double)single.scale[1],
                        (double)single.scale[2]);
        }
        if (P > 1 && memcmp(f.scale, local.scale, sizeof(float) * 2 * SLOTS) != 0) differ_local++;
        /* and identical on every rank */
        AT_EQ_INT(accel_host_allgather(&acc, f.scale, all, sizeof(float) * cells), ACCEL_OK);
        for (r = 1; r < P; ++r) AT_CHECK(memcmp(all, all + (size_t)r * cells, sizeof(float) * cells) == 0);
    }
    AT_EQ_INT(bad, 0);
    AT_CHECK(P == 1 || differ_local > 0); /* local_amax: the ranks' own amaxes, not the reduced ones */
    AT_CHECK(isnan(f.amax_history[3 * SLOTS + 0])); /* step 10's NaN, one row older after step 11, on every rank */
    AT_CHECK(f.updates == STEPS);
    if (P == 1) AT_CHECK(memcmp(f.scale, local.scale, sizeof(float) * cells) == 0);
    /* a rank that cannot allocate in update still joins the collective, so every rank fails instead of waiting for
       it until the deadline; nothing changes anywhere (last: the group may refuse calls after the mismatch) */
    if (P > 1) {
        float before = f.scale[0];
        accel_result ur;
        AT_EQ_INT(accel_amp_fp8_record_amax(&f, 0, 1.0f), ACCEL_OK);
        if (R == 1) fail_next = 1;
        ur = accel_amp_fp8_update(&f);
        AT_CHECK(ur != ACCEL_OK);
        AT_EQ_INT(ur, R == 1 ? ACCEL_ERR_OUT_OF_MEMORY : ACCEL_ERR_MISMATCH);
        AT_CHECK(f.scale[0] == before);
        AT_EQ_INT(f.updates, STEPS);
    }
    accel_amp_fp8_deinit(&f);
    accel_amp_fp8_deinit(&single);
    accel_amp_fp8_deinit(&local);
    free(x); free(q); free(all);
    {
        char name[32];
        int rc;
        snprintf(name, sizeof name, "amp_fp8_mpi[%d/%d]", R, P);
        rc = at_finish(name);
        accel_shutdown(&acc);
        return rc;
    }
}
