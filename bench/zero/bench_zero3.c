/* ZeRO-3 / FSDP communication per training step against raw MPI moving the same bytes, same run, same process
   count. A model of K equal units (E F32 elements each, FULL_SHARD, F32 gathers and reductions, every micro-batch
   reducing, prefetch on, no compute): a step gathers every unit in forward (wait + release), again in backward, and
   reduce-scatters its gradients (wait, grads, release, reduce_scatter; end_backward; zero_grad). The reference is
   the same traffic as blocking MPI calls into preallocated buffers: per unit two MPI_Allgather of S elements and
   one MPI_Reduce_scatter_block of Ps*S elements. Throughput = the bytes those collectives receive per step / the
   median step time (higher is better; ratio = accel / MPI; goal 0.9: the bookkeeping, the pre-scaling, the F32
   shard accumulation and the per-call agreement check cost at most 10 %). Memory: the object's live bytes at their
   peak through the host allocator hooks against the shards + the root's and two gather buffers + two gradient
   buffers (ratio = bound / peak, goal 0.95: the "within 5 % of shards + two units", with FSDP's root kept:
   unit 0's gather buffer is its own, beside the two rotating ones — accel_zero.h UNITS, SHARDS AND BUFFERS).
   usage: mpirun -np P bench_zero3 [steps] [units] [elements]   (JSON lines on rank 0, DESIGN.md → Testing) */
#include "accel.h"
#include "accel_collectives.h"
#include "accel_zero.h"
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long long live_bytes, peak_bytes;
static void *count_alloc(size_t n, void *u) {
    size_t *p = (size_t *)malloc(n + 16);
    (void)u;
    if (!p) return NULL;
    p[0] = n;
    live_bytes += (long long)n;
    if (live_bytes > peak_bytes) peak_bytes = live_bytes;
    return (unsigned char *)p + 16;
}
static void count_free(void *q, void *u) {
    size_t *p;
    (void)u;
    if (!q) return;
    p = (size_t *)((unsigned char *)q - 16);
    live_bytes -= (long long)p[0];
    free(p);
}

static accel acc;
#define CK(call)                                                                                                   \
    do {                                                                                                           \
        accel_result r_ = (call);                                                                                  \
        if (r_ != ACCEL_OK) {                                                                                      \
            fprintf(stderr, "%s: %s\n", #call, accel_last_error(&acc));                                            \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                                          \
        }                                                                                                          \
    } while (0)

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
/* the median of n step times, the same on every rank (the slowest rank's, as a step is as slow as its slowest) */
static double median_max(double *t, int n) {
    qsort(t, (size_t)n, sizeof *t, cmp_d);
    MPI_Allreduce(MPI_IN_PLACE, &t[n / 2], 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return t[n / 2];
}

int main(int argc, char **argv) {
    accel_desc d;
    accel_coll *c = NULL;
    int steps = argc > 1 ? atoi(argv[1]) : 10, K = argc > 2 ? atoi(argv[2]) : 8, i, s, u;
    long long E = argc > 3 ? atoll(argv[3]) : 262144, S, base, shards, bound, peak;
    int P;
    float *init, *send, *recv, *rs;
    double *ta, *tr, accel_s, mpi_s, bytes;
    accel_tensor *t, w[1], g[1];
    accel_zero_unit *units;
    accel_zero_fsdp_desc fd;
    accel_zero_fsdp *f = NULL;
    memset(&d, 0, sizeof d);
    d.cpu = 1;
    d.host_allocator.alloc = count_alloc;
    d.host_allocator.free = count_free;
    if (accel_init(&acc, &d) != ACCEL_OK) {
        fprintf(stderr, "accel_init: %s\n", accel_last_error(&acc));
        return 1;
    }
    if (steps < 3) steps = 3;
    if (K < 1) K = 1;
    if (E < 1) E = 1;
    P = acc.num_processes;
    S = (E + P - 1) / P;
    CK(accel_coll_create(&acc, NULL, &c));
    init = (float *)malloc((size_t)E * 4);
    t = (accel_tensor *)calloc((size_t)K, sizeof *t);
    units = (accel_zero_unit *)calloc((size_t)K, sizeof *units);
    ta = (double *)calloc((size_t)steps, sizeof(double));
    tr = (double *)calloc((size_t)steps, sizeof(double));
    for (i = 0; i < E; ++i) init[i] = (float)sin(0.001 * i);
    for (u = 0; u < K; ++u) {
        memset(&t[u], 0, sizeof t[u]);
        t[u].name = "w";
        t[u].ptr = init;
        t[u].dtype = ACCEL_F32;
        t[u].ndim = 1;
        t[u].shape[0] = E;
        units[u].params = &t[u];
        units[u].n = 1;
    }
    memset(&fd, 0, sizeof fd);
    fd.strategy = ACCEL_ZERO_FULL_SHARD;
    fd.units = units;
    fd.nunits = K;
    fd.param_dtype = ACCEL_F32;
    fd.reduce_dtype = ACCEL_F32;
    fd.forward_prefetch = ACCEL_ON;
    fd.backward_prefetch = ACCEL_ZERO_BACKWARD_PRE;
    base = live_bytes;
    CK(accel_zero_fsdp_create(c, &fd, &f));
    shards = live_bytes - base;
    peak_bytes = live_bytes;
    for (s = 0; s < steps; ++s) {
        double t0;
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = MPI_Wtime();
        CK(accel_zero_fsdp_begin_forward(f));
        for (u = 0; u < K; ++u) {
            CK(accel_zero_fsdp_wait(f, u, w, 1));
            CK(accel_zero_fsdp_release(f, u));
        }
        CK(accel_zero_fsdp_begin_backward(f));
        for (u = K - 1; u >= 0; --u) {
            CK(accel_zero_fsdp_wait(f, u, w, 1));
            CK(accel_zero_fsdp_grads(f, u, g, 1));
            ((float *)g[0].ptr)[0] += 1.0f; /* what a backward kernel does: write the unit's gradients */
            CK(accel_zero_fsdp_release(f, u));
            CK(accel_zero_fsdp_reduce_scatter(f, u));
        }
        CK(accel_zero_fsdp_end_backward(f));
        CK(accel_zero_fsdp_zero_grad(f));
        ta[s] = MPI_Wtime() - t0;
    }
    peak = peak_bytes - base;
    accel_zero_fsdp_destroy(f);
    /* the same traffic, raw MPI, buffers allocated once */
    send = (float *)calloc((size_t)S * (size_t)P, 4);
    recv = (float *)calloc((size_t)S * (size_t)P, 4);
    rs = (float *)calloc((size_t)S, 4);
    for (s = 0; s < steps; ++s) {
        double t0;
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = MPI_Wtime();
        for (u = 0; u < 2 * K; ++u) MPI_Allgather(send, (int)S, MPI_FLOAT, recv, (int)S, MPI_FLOAT, MPI_COMM_WORLD);
        for (u = 0; u < K; ++u) MPI_Reduce_scatter_block(send, rs, (int)S, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        tr[s] = MPI_Wtime() - t0;
    }
    accel_s = median_max(ta, steps);
    mpi_s = median_max(tr, steps);
    {
        double pk = (double)peak;
        MPI_Allreduce(MPI_IN_PLACE, &pk, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        peak = (long long)pk;
    }
    /* shards (master + gradient: S each per unit) + the root's and two gather buffers (P*S) + two gradient buffers
       (P*S + S) */
    bound = shards + (P > 1 ? 3 * (P * S * 4) + 2 * (P * S * 4 + S * 4) : 2 * S * 4);
    bytes = (double)K * 3.0 * (double)(P * S) * 4.0;
    if (acc.is_main_process) {
        printf("{\"bench\": \"zero3-step-comm\", \"params\": {\"np\": %d, \"units\": %d, \"elements_per_unit\": %lld, "
               "\"dtype\": \"f32\", \"steps\": %d}, \"unit\": \"GB/s\", \"accel\": %.4g, \"reference\": %.4g, "
               "\"reference_name\": \"MPI_Allgather x2 + MPI_Reduce_scatter_block per unit\", \"ratio\": %.4g, "
               "\"goal\": 0.9}\n",
               P, K, E, steps, bytes / accel_s / 1e9, bytes / mpi_s / 1e9, mpi_s / accel_s);
        printf("{\"bench\": \"zero3-memory\", \"params\": {\"np\": %d, \"units\": %d, \"elements_per_unit\": %lld}, "
               "\"unit\": \"bytes\", \"accel\": %lld, \"reference\": %lld, \"reference_name\": \"shards + root and two "
               "gather + two gradient buffers\", \"ratio\": %.4g, \"goal\": 0.95}\n",
               P, K, E, peak, bound, (double)bound / (double)peak);
    }
    free(send);
    free(recv);
    free(rs);
    free(init);
    free(t);
    free(units);
    free(ta);
    free(tr);
    accel_coll_destroy(c);
    accel_shutdown(&acc);
    return 0;
}
