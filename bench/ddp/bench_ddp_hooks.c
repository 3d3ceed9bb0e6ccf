/* DDP communication hooks benchmark (issue 33; run under mpirun): the bucketed reducer (DDP's 25 MiB buckets) with
   no hook, the FP16 hook and the BF16 hook, on GPT-2 small's 148 fp32 gradients (124,439,808 parameters), against one
   raw MPI_Allreduce(MPI_IN_PLACE, SUM) of the same fp32 bytes in the same run. One JSON line per hook:
     accel      gradient throughput of the reducer with the hook: fp32 gradient bytes / step seconds (GB/s)
     reference  the same for the raw fp32 MPI_Allreduce
     goal       the issue's: >= 1.6x the fp32 all-reduce's throughput where the link is the bottleneck. On one host
                (shared-memory MPI, CPU conversion on the same cores) the link is memory bandwidth. The hook's
                cast/divide/cast-back passes are one AVX2 pass each way (seconds_accel - seconds_allreduce16_alone);
                the rest is the 16-bit all-reduce, whose MPI user op (accel_collectives.h) adds in AVX2 lanes on such
                a CPU (scalar elsewhere): compare seconds_allreduce16_alone with seconds_mpi_half_bytes.
     wire_bytes the bytes each rank hands to the all-reduce per step (the hook's are half of fp32's).
   Also: seconds of an MPI_Allreduce of half the fp32 bytes (the ideal of halving the wire, the hook's bound here)
   and of accel_coll_all_reduce of the hook's 16-bit copy alone (the wire part of a hook step; the rest of the step
   is the cast/divide/cast-back passes).
   Step = grad_ready for every tensor in backward order, then wait; best of ACCEL_BENCH_REPS (default 3) steps, each
   the slowest rank's time. ACCEL_BENCH_DDP_SCALE=k (default 1) divides every tensor's size by k (less memory). */
#include "accel.h"
#include "accel_collectives.h"
#include "accel_ddp.h"
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NT 148

static accel acc;
static int P, R;

static void die(const char *what) {
    fprintf(stderr, "bench_ddp_hooks: %s: %s\n", what, accel_last_error(&acc));
    MPI_Abort(MPI_COMM_WORLD, 1);
}

/* GPT-2 small's parameter list: wte (V x C), wpe (T x C), 12 layers of (ln_1 w b, c_attn w b, attn c_proj w b,
   ln_2 w b, c_fc w b, mlp c_proj w b), ln_f w b; each size divided by scale (at least 1). */
static size_t gpt2_list(size_t *sz, size_t scale) {
    const size_t C = 768, layer[12] = {C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C};
    size_t total = 0;
    int n = 0, l, k;
    sz[n++] = 50257 * C;
    sz[n++] = 1024 * C;
    for (l = 0; l < 12; ++l)
        for (k = 0; k < 12; ++k) sz[n++] = layer[k];
    sz[n++] = C;
    sz[n++] = C;
    for (k = 0; k < n; ++k) {
        sz[k] = sz[k] / scale ? sz[k] / scale : 1;
        total += sz[k];
    }
    return total;
}

static double max_time(double t) {
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return t;
}

static double reducer_step(accel_ddp *red) {
    double t0;
    int t;
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = accel_now();
    for (t = NT - 1; t >= 0; --t)
        if (accel_ddp_grad_ready(red, t) != ACCEL_OK) die("grad_ready");
    if (accel_ddp_wait(red) != ACCEL_OK) die("wait");
    return max_time(accel_now() - t0);
}

/* the 16-bit all-reduce alone, on a copy of the same values each time (repeated in-place sums would overflow) */
static double coll16_step(accel_coll *c, uint16_t *buf, const uint16_t *src, size_t n, accel_dtype dt) {
    double t0;
    memcpy(buf, src, n * 2);
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = accel_now();
    if (accel_coll_all_reduce(c, buf, buf, n, dt, ACCEL_COLL_SUM) != ACCEL_OK) die("all_reduce 16");
    return max_time(accel_now() - t0);
}

static double mpi_step(float *buf, size_t n) {
    double t0;
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = accel_now();
    MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    return max_time(accel_now() - t0);
}

int main(int argc, char **argv) {
    static const char *names[3] = {"none", "fp16", "bf16"};
    size_t sz[NT], total, i, scale = 1;
    const char *ss = getenv("ACCEL_BENCH_DDP_SCALE"), *rs = getenv("ACCEL_BENCH_REPS");
    int reps = rs ? atoi(rs) : 3, h, t, rep;
    float *g[NT], *ref;
    uint16_t *w16, *src16[2];
    accel_tensor gt[NT];
    accel_coll *c;
    accel_ddp *red[3];
    double best[3] = {1e30, 1e30, 1e30}, best_mpi = 1e30, best_half = 1e30, best16[2] = {1e30, 1e30}, bytes;
    accel_desc d;
    (void)argc;
    (void)argv;
    memset(&d, 0, sizeof d);
    d.cpu = 1;
    if (accel_init(&acc, &d) != ACCEL_OK) {
        fprintf(stderr, "bench_ddp_hooks: %s\n", accel_last_error(&acc));
        return 1;
    }
    P = acc.num_processes;
    R = acc.process_index;
    if (P < 2) {
        if (R == 0) fprintf(stderr, "bench_ddp_hooks needs >= 2 ranks\n");
        accel_shutdown(&acc);
        return 0;
    }
    if (ss && atol(ss) > 0) scale = (size_t)atol(ss);
    if (reps < 1) reps = 1;
    if (accel_coll_create(&acc, NULL, &c) != ACCEL_OK) die("coll_create");
    total = gpt2_list(sz, scale);
    bytes = (double)total * 4;
    for (t = 0; t < NT; ++t) {
        g[t] = (float *)malloc(sz[t] * 4);
        if (!g[t]) die("malloc");
        /* values in [-1, 1): the same on every rank, so the average keeps them (finite, no subnormal drift) */
        for (i = 0; i < sz[t]; ++i) g[t][i] = (float)((i * 2654435761u + (size_t)t) % 2048) / 1024.0f - 1.0f;
        memset(&gt[t], 0, sizeof gt[t]);
        gt[t].name = "g";
        gt[t].ptr = g[t];
        gt[t].dtype = ACCEL_F32;
        gt[t].ndim = 1;
        gt[t].shape[0] = (int64_t)sz[t];
    }
    ref = (float *)calloc(total, 4);
    w16 = (uint16_t *)malloc(total * 2);
    src16[0] = (uint16_t *)malloc(total * 2);
    src16[1] = (uint16_t *)malloc(total * 2);
    if (!ref || !w16 || !src16[0] || !src16[1]) die("calloc");
    for (i = 0; i < total; ++i) { /* gradient-like values, as the hook's copy holds them (g / P, rounded) */
        float x = ((float)(i % 2048) / 1024.0f - 1.0f) / (float)P;
        src16[0][i] = accel_f32_to_f16(x);
        src16[1][i] = accel_f32_to_bf16(x);
    }
    for (h = 0; h < 3; ++h) {
        accel_ddp_desc rd;
        memset(&rd, 0, sizeof rd);
        rd.flat = ACCEL_OFF; /* separate tensors: DDP's buckets */
        rd.comm_hook = (accel_ddp_comm_hook)h;
        if (accel_ddp_create(c, &rd, &red[h]) != ACCEL_OK) die("ddp_create");
        if (accel_ddp_add(red[h], gt, NT) != ACCEL_OK) die("ddp_add");
        if (accel_ddp_finalize(red[h]) != ACCEL_OK) die("finalize");
        reducer_step(red[h]); /* warm-up: scratch, first touch of the 16-bit copies */
    }
    mpi_step(ref, total);
    mpi_step(ref, total / 2);
    for (rep = 0; rep < reps; ++rep) /* interleaved so that drift in the machine's load hits every variant */
        for (h = 0; h < 7; ++h) {
            int k = (h + rep) % 7;
            double s = k < 3    ? reducer_step(red[k])
                       : k < 5  ? mpi_step(ref, k == 3 ? total : total / 2)
                                : coll16_step(c, w16, src16[k - 5], total, k == 5 ? ACCEL_F16 : ACCEL_BF16);
            double *b = k < 3 ? &best[k] : k == 3 ? &best_mpi : k == 4 ? &best_half : &best16[k - 5];
            if (s < *b) *b = s;
        }
    for (h = 0; h < 3 && R == 0; ++h) {
        double wire = h ? bytes / 2 : bytes;
        char s16[32];
        if (h) snprintf(s16, sizeof s16, "%.4f", best16[h - 1]);
        else snprintf(s16, sizeof s16, "null");
        printf("{\"bench\": \"ddp_comm_hook\", \"params\": {\"model\": \"gpt2-124M\", \"scale\": %zu, \"tensors\": %d, "
               "\"params\": %zu, \"ranks\": %d, \"bucket_cap_mb\": 25, \"comm_hook\": \"%s\", \"wire_bytes\": %.0f}, "
               "\"unit\": \"GB/s\", \"accel\": %.4f, \"reference\": %.4f, \"reference_name\": \"MPI_Allreduce fp32 "
               "in place, same bytes\", \"ratio\": %.4f, \"goal\": %s, \"seconds_accel\": %.4f, "
               "\"seconds_reference\": %.4f, \"seconds_mpi_half_bytes\": %.4f, \"seconds_reducer_fp32\": %.4f, "
               "\"seconds_allreduce16_alone\": %s, "
               "\"wire_ratio\": %.2f, \"host\": \"one host, shared-memory MPI: memory is the link\"}\n",
               scale, NT, total, P, names[h], wire, bytes / best[h] / 1e9, bytes / best_mpi / 1e9,
               best_mpi / best[h], h ? "1.6" : "null", best[h], best_mpi, best_half, best[0], s16, wire / bytes);
    }
    fflush(stdout);
    for (h = 0; h < 3; ++h) accel_ddp_destroy(red[h]);
    for (t = 0; t < NT; ++t) free(g[t]);
    free(ref);
    free(w16);
    free(src16[0]);
    free(src16[1]);
    accel_coll_destroy(c);
    accel_shutdown(&acc);
    return 0;
}
