/* `accel test` — Accelerate's `accelerate test` for accel: run it under the launcher the job will use (mpirun -np N,
   accel launch -n N, srun, or as one plain process) and it checks the job end to end, printing one verdict line per
   check on the main process (PASS / FAIL / SKIP and why; a FAIL names the rank that failed and what differed):
     host-group      barrier, host all-gather of the ranks, broadcast, i64/f64 all-reduce (sum, max, min) against
                     values computed long-hand here (f64 sums in rank order, bit for bit: accel.h's promise)
     collectives     accel_collectives.h on host buffers: F32 sum all-reduce (80 KB: the ring on 2 ranks), F64 avg,
                     I64 max, I32 all-gather, F32 reduce-scatter, U8 broadcast from the last rank, each against the
                     long-hand result (integer-valued floats: exact whatever the summation order); SKIP without MPI
     device-collectives  with CUDA and NCCL and a device per local process: NCCL all_reduce, all_gather and broadcast
                     of F32 against long-hand results; SKIP otherwise (no device, a cpu run, more processes than
                     devices on a node, a build without them)
     rng             accel_set_seed(s, 0) gives every rank the same draws; (s, device_specific) the draws of seed
                     s + rank; accel_synchronize_rng_state makes them agree again
     shards          accel_data.h shuffled shards: with even_batches off every index of the dataset exactly once over
                     all ranks; with it on every index at least once and the same number of batches everywhere
     checkpoint      accel_ckpt.h save_state / load_state in a fresh temporary directory (--dir DIR, default $TMPDIR or
                     /tmp; on several nodes a directory every node sees) restores tensors, an object and the RNG bit
                     for bit; the directory is removed afterwards
     timings         every rank's time per check; names the slowest rank
   Exit status: 0 every check passed or was skipped, 1 a check failed, 2 usage error.
   Test hook: ACCEL_TEST_FAULT=CHECK:RANK (CHECK one of host-group, collectives, rng, shards, checkpoint) injects a
   fault into RANK's part of that check — a changed contribution, another seed, a duplicated index, a flipped byte in
   the saved checkpoint — so that a test can show the check fails. Never set it otherwise. */
#define _POSIX_C_SOURCE 200809L
#define _XOPEN_SOURCE 700
#include "accel.h"
#include "accel_ckpt.h"
#include "accel_collectives.h"
#include "accel_data.h"
#include "cli.h"
#include <errno.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#if defined(ACCEL_WITH_CUDA) && defined(ACCEL_WITH_NCCL)
#include <cuda_runtime_api.h>
#include <nccl.h>
#endif

enum { T_PASS = 0, T_SKIP = 1, T_FAIL = 2 };
#define T_MSG 240
#define T_MAX_CHECKS 8

typedef struct {
    int status;
    double secs;
    char msg[T_MSG];
} test_verdict;

typedef struct {
    accel *acc;
    int group_ok;   /* host collectives still work: verdicts are agreed; otherwise each rank prints its own */
    int failed;
    int nchecks;
    const char *names[T_MAX_CHECKS];
    double *secs;   /* [check * P + rank] */
    char fault_check[32];
    int fault_rank;
} test_ctx;

static int test_fault(const test_ctx *t, const char *check) {
    return t->fault_rank == t->acc->process_index && !strcmp(t->fault_check, check);
}

static const char *test_status_name(int s) { return s == T_FAIL ? "FAIL" : s == T_SKIP ? "SKIP" : "PASS"; }

/* Every rank's verdict of one check to the main process, which prints the combined one: FAIL when any rank failed
   (naming the first such rank), SKIP when every rank skipped, PASS otherwise. */
static void test_verdict_line(test_ctx *t, const char *name, int status, double secs, const char *fmt, ...)
    ACCEL__PRINTF(5, 6);
static void test_verdict_line(test_ctx *t, const char *name, int status, double secs, const char *fmt, ...) {
    accel *acc = t->acc;
    int P = acc->num_processes, r, worst = T_PASS, first = -1, slow = 0;
    test_verdict mine, *all = NULL;
    va_list ap;
    memset(&mine, 0, sizeof mine);
    mine.status = status;
    mine.secs = secs;
    va_start(ap, fmt);
    vsnprintf(mine.msg, sizeof mine.msg, fmt, ap);
    va_end(ap);
    if (t->nchecks < T_MAX_CHECKS) t->names[t->nchecks] = name;
    if (t->group_ok) all = (test_verdict *)calloc((size_t)P, sizeof *all);
    if (all && accel_host_allgather(acc, &mine, all, sizeof mine) != ACCEL_OK) {
        fprintf(stderr, "accel test: [rank %d] cannot gather the verdicts: %s\n", acc->process_index,
                accel_last_error(acc));
        t->group_ok = 0;
        free(all);
        all = NULL;
    }
    if (!all) { /* no group to agree over: this rank's own line */
        printf("%s  %-18s [rank %d] %s\n", test_status_name(status), name, acc->process_index, mine.msg);
        fflush(stdout);
        if (status == T_FAIL) t->failed = 1;
        if (t->nchecks < T_MAX_CHECKS) ++t->nchecks;
        return;
    }
    worst = T_SKIP;
    for (r = 0; r < P; ++r) {
        if (all[r].status == T_FAIL && first < 0) first = r;
        if (all[r].status == T_PASS && worst == T_SKIP) worst = T_PASS;
        if (all[r].secs > all[slow].secs) slow = r;
        if (t->nchecks < T_MAX_CHECKS) t->secs[t->nchecks * P + r] = all[r].secs;
    }
    if (first >= 0) worst = T_FAIL;
    if (worst == T_FAIL) t->failed = 1;
    if (acc->is_main_process) {
        if (worst == T_FAIL) {
            int nf = 0;
            for (r = 0; r < P; ++r) nf += all[r].status == T_FAIL;
            if (P == 1) printf("FAIL  %-18s %s\n", name, all[first].msg);
            else if (nf == P) printf("FAIL  %-18s %s (seen on every rank)\n", name, all[first].msg);
            else printf("FAIL  %-18s rank %d: %s (%d of %d ranks failed)\n", name, first, all[first].msg, nf, P);
        }
        else if (worst == T_SKIP || P == 1)
            printf("%s  %-18s %s\n", test_status_name(worst), name, worst == T_SKIP ? all[0].msg : mine.msg);
        else
            printf("PASS  %-18s %s (slowest: rank %d, %.1f ms)\n", name, mine.msg, slow, all[slow].secs * 1e3);
        fflush(stdout);
    }
    if (t->nchecks < T_MAX_CHECKS) ++t->nchecks;
    free(all);
}

/* A host collective failed: the group is unusable from here on (accel.h shuts it down after a timeout). */
static int test_host_failed(test_ctx *t, accel_result r) {
    if (r == ACCEL_OK) return 0;
    t->group_ok = 0;
    return 1;
}

/* ------------------------------------------------------------------------------------------------ host group */
static int64_t test_i64(int r, int i) {
    return (int64_t)(r + 1) * 1000003 + (int64_t)i * 7 - (i == 2 ? (int64_t)r * r : 0);
}
static double test_f64(int r, int i) { return 0.1 * (r + 1) + i / 3.0; }

static void test_host_group(test_ctx *t) {
    accel *acc = t->acc;
    int P = acc->num_processes, me = acc->process_index, r, i, k;
    double t0 = accel_now(), tb;
    int64_t iv[3][4], ie[3][4], *ranks = NULL;
    double fv[3][4], fe[3][4];
    unsigned char bc[64];
    accel_result res = ACCEL_OK;
    char why[T_MSG] = "";
    for (k = 0; k < 3; ++k)
        for (i = 0; i < 4; ++i) {
            iv[k][i] = test_i64(me, i);
            fv[k][i] = test_f64(me, i);
            if (test_fault(t, "host-group") && i == 0) { iv[k][i] += 1; fv[k][i] += 1e-9; }
            ie[k][i] = test_i64(0, i);
            fe[k][i] = test_f64(0, i);
        }
    /* long-hand: sum in rank order, max, min */
    for (r = 1; r < P; ++r)
        for (i = 0; i < 4; ++i) {
            int64_t x = test_i64(r, i);
            double y = test_f64(r, i);
            ie[0][i] += x;
            fe[0][i] += y;
            if (x > ie[1][i]) ie[1][i] = x;
            if (y > fe[1][i]) fe[1][i] = y;
            if (x < ie[2][i]) ie[2][i] = x;
            if (y < fe[2][i]) fe[2][i] = y;
        }
    tb = accel_now();
    for (k = 0; k < 20 && res == ACCEL_OK; ++k) res = accel_wait_for_everyone(acc);
    tb = (accel_now() - tb) / 20;
    if (res != ACCEL_OK) { snprintf(why, sizeof why, "barrier: %s", accel_last_error(acc)); goto done; }
    ranks = (int64_t *)calloc((size_t)P, sizeof *ranks);
    if (!ranks) { snprintf(why, sizeof why, "out of memory"); res = ACCEL_ERR_OUT_OF_MEMORY; goto done; }
    {
        int64_t mine = me;
        if ((res = accel_host_allgather(acc, &mine, ranks, sizeof mine)) != ACCEL_OK) {
            snprintf(why, sizeof why, "all-gather: %s", accel_last_error(acc));
            goto done;
        }
        for (r = 0; r < P; ++r)
            if (ranks[r] != r) {
                snprintf(why, sizeof why, "all-gather: slot %d holds rank %lld", r, (long long)ranks[r]);
                break;
            }
    }
    for (i = 0; i < (int)sizeof bc; ++i) bc[i] = me == P - 1 ? (unsigned char)(i * 37 + 11) : 0;
    if ((res = accel_host_broadcast(acc, bc, sizeof bc, P - 1)) != ACCEL_OK) {
        snprintf(why, sizeof why, "broadcast: %s", accel_last_error(acc));
        goto done;
    }
    for (i = 0; i < (int)sizeof bc && !why[0]; ++i)
        if (bc[i] != (unsigned char)(i * 37 + 11))
            snprintf(why, sizeof why, "broadcast from rank %d: byte %d differs", P - 1, i);
    for (k = 0; k < 3 && res == ACCEL_OK; ++k) {
        static const accel_host_op ops[3] = {ACCEL_HOST_SUM, ACCEL_HOST_MAX, ACCEL_HOST_MIN};
        static const char *names[3] = {"sum", "max", "min"};
        if ((res = accel_host_allreduce_i64(acc, iv[k], 4, ops[k])) != ACCEL_OK ||
            (res = accel_host_allreduce_f64(acc, fv[k], 4, ops[k])) != ACCEL_OK) {
            snprintf(why, sizeof why, "all-reduce %s: %s", names[k], accel_last_error(acc));
            break;
        }
        for (i = 0; i < 4 && !why[0]; ++i) {
            if (iv[k][i] != ie[k][i])
                snprintf(why, sizeof why, "i64 all-reduce %s [%d]: %lld, long-hand %lld", names[k], i,
                         (long long)iv[k][i], (long long)ie[k][i]);
            else if (memcmp(&fv[k][i], &fe[k][i], sizeof(double)))
                snprintf(why, sizeof why, "f64 all-reduce %s [%d]: %.17g, long-hand (rank order) %.17g", names[k], i,
                         fv[k][i], fe[k][i]);
        }
    }
done:
    free(ranks);
    if (test_host_failed(t, res) || why[0])
        test_verdict_line(t, "host-group", T_FAIL, accel_now() - t0, "%s", why);
    else
        test_verdict_line(t, "host-group", T_PASS, accel_now() - t0, "%s group of %d, barrier %.1f us",
                          accel_host_group_name(acc), P, tb * 1e6);
}

/* ----------------------------------------------------------------------------------------------- collectives */
static float test_x(int r, size_t i) { return (float)((r + 1) * (int)(i % 101) - (int)(i % 7)); }

/* got[i] against the long-hand sum over ranks of test_x(r, first + i); the first difference goes into why */
static void test_sum_f32(const float *got, size_t n, int P, size_t first, const char *what, char *why, size_t cap) {
    size_t i;
    int r;
    for (i = 0; i < n && !why[0]; ++i) {
        double e = 0;
        for (r = 0; r < P; ++r) e += test_x(r, first + i);
        if (got[i] != (float)e) snprintf(why, cap, "%s [%zu]: %.9g, long-hand %.9g", what, i, (double)got[i], e);
    }
}

static void test_collectives(test_ctx *t) {
    accel *acc = t->acc;
    int P = acc->num_processes, me = acc->process_index, r;
    double t0 = accel_now();
    accel_coll *c = NULL;
    accel_coll_desc cd;
    accel_result res;
    char why[T_MSG] = "";
    const size_t n = 20000, m = 1000;
    size_t i;
    float *x = NULL, *rs_send = NULL, *rs = NULL;
    double *a = NULL;
    int64_t mx[16];
    int32_t *g = NULL;
    unsigned char bc[100];
    if (P > 1 && !acc->mpi_active) {
        test_verdict_line(t, "collectives", T_SKIP, accel_now() - t0, "skipped: needs MPI (the host group is %s; "
                          "run under mpirun or srun with MPI)", accel_host_group_name(acc));
        return;
    }
    memset(&cd, 0, sizeof cd);
    cd.host_buffers = 1;
    if ((res = accel_coll_create(acc, &cd, &c)) != ACCEL_OK) {
        snprintf(why, sizeof why, "accel_coll_create: %s", accel_last_error(acc));
        goto done;
    }
    x = (float *)malloc(n * sizeof *x);
    a = (double *)malloc(m * sizeof *a);
    g = (int32_t *)malloc((size_t)P * 50 * sizeof *g);
    rs_send = (float *)malloc((size_t)P * m * sizeof *rs_send);
    rs = (float *)malloc(m * sizeof *rs);
    if (!x || !a || !g || !rs_send || !rs) { snprintf(why, sizeof why, "out of memory"); goto done; }
    /* F32 sum: integer values, so the long-hand sum is exact in any order */
    for (i = 0; i < n; ++i) x[i] = test_x(me, i);
    if (test_fault(t, "collectives")) x[5] += 1.0f;
    if ((res = accel_coll_all_reduce(c, x, x, n, ACCEL_F32, ACCEL_COLL_SUM)) != ACCEL_OK) {
        snprintf(why, sizeof why, "all_reduce F32 sum: %s", accel_last_error(acc));
        goto done;
    }
    test_sum_f32(x, n, P, 0, "all_reduce F32 sum", why, sizeof why);
    if (why[0]) goto done;
    /* F64 avg: the sum / P */
    for (i = 0; i < m; ++i) a[i] = (double)test_x(me, i * 3) * 0.5;
    if ((res = accel_coll_all_reduce(c, a, a, m, ACCEL_F64, ACCEL_COLL_AVG)) != ACCEL_OK) {
        snprintf(why, sizeof why, "all_reduce F64 avg: %s", accel_last_error(acc));
        goto done;
    }
    for (i = 0; i < m && !why[0]; ++i) {
        double s = 0;
        for (r = 0; r < P; ++r) s += (double)test_x(r, i * 3) * 0.5;
        if (a[i] != s / P)
            snprintf(why, sizeof why, "all_reduce F64 avg [%zu]: %.17g, long-hand %.17g", i, a[i], s / P);
    }
    if (why[0]) goto done;
    /* I64 max */
    for (i = 0; i < 16; ++i) mx[i] = (int64_t)((me * 7919 + (int)i * 104729) % 1009) - 500 + ((int64_t)1 << 40);
    if ((res = accel_coll_all_reduce(c, mx, mx, 16, ACCEL_I64, ACCEL_COLL_MAX)) != ACCEL_OK) {
        snprintf(why, sizeof why, "all_reduce I64 max: %s", accel_last_error(acc));
        goto done;
    }
    for (i = 0; i < 16 && !why[0]; ++i) {
        int64_t e = INT64_MIN;
        for (r = 0; r < P; ++r) {
            int64_t v = (int64_t)((r * 7919 + (int)i * 104729) % 1009) - 500 + ((int64_t)1 << 40);
            if (v > e) e = v;
        }
        if (mx[i] != e) snprintf(why, sizeof why, "all_reduce I64 max [%zu]: %lld, long-hand %lld", i,
                                 (long long)mx[i], (long long)e);
    }
    if (why[0]) goto done;
    /* I32 all-gather, in place */
    for (i = 0; i < 50; ++i) g[(size_t)me * 50 + i] = me * 100000 + (int32_t)i;
    if ((res = accel_coll_all_gather(c, g + (size_t)me * 50, g, 50, ACCEL_I32)) != ACCEL_OK) {
        snprintf(why, sizeof why, "all_gather I32: %s", accel_last_error(acc));
        goto done;
    }
    for (r = 0; r < P && !why[0]; ++r)
        for (i = 0; i < 50 && !why[0]; ++i)
            if (g[(size_t)r * 50 + i] != r * 100000 + (int32_t)i)
                snprintf(why, sizeof why, "all_gather I32: rank %d's element %zu is %d", r, i, g[(size_t)r * 50 + i]);
    if (why[0]) goto done;
    /* F32 reduce-scatter: rank q gets the sum of block q */
    for (i = 0; i < (size_t)P * m; ++i) rs_send[i] = test_x(me, i + 17);
    if ((res = accel_coll_reduce_scatter(c, rs_send, rs, m, ACCEL_F32, ACCEL_COLL_SUM)) != ACCEL_OK) {
        snprintf(why, sizeof why, "reduce_scatter F32 sum: %s", accel_last_error(acc));
        goto done;
    }
    test_sum_f32(rs, m, P, (size_t)me * m + 17, "reduce_scatter F32 sum", why, sizeof why);
    if (why[0]) goto done;
    /* U8 broadcast from the last rank */
    for (i = 0; i < sizeof bc; ++i) bc[i] = me == P - 1 ? (unsigned char)(i * 13 + 5) : 0xEE;
    if ((res = accel_coll_broadcast(c, bc, sizeof bc, ACCEL_U8, P - 1)) != ACCEL_OK) {
        snprintf(why, sizeof why, "broadcast U8: %s", accel_last_error(acc));
        goto done;
    }
    for (i = 0; i < sizeof bc && !why[0]; ++i)
        if (bc[i] != (unsigned char)(i * 13 + 5))
            snprintf(why, sizeof why, "broadcast U8 from rank %d: byte %zu differs", P - 1, i);
done:
    free(x);
    free(a);
    free(g);
    free(rs_send);
    free(rs);
    if (why[0])
        test_verdict_line(t, "collectives", T_FAIL, accel_now() - t0, "%s", why);
    else
        test_verdict_line(t, "collectives", T_PASS, accel_now() - t0,
                          "%s backend: all_reduce sum/avg/max, all_gather, reduce_scatter, broadcast match long-hand",
                          accel_coll_backend_name(accel_coll_get_backend(c)));
    accel_coll_destroy(c);
}

/* ------------------------------------------------------------------------------------------- device collectives */
#if defined(ACCEL_WITH_CUDA) && defined(ACCEL_WITH_NCCL)
/* NCCL on this job's devices, straight through the CUDA runtime and NCCL (the CLI links accel's CPU implementation,
   whose communicator has no device path): one device per local process, the unique id over accel's host group, then
   all_reduce (sum), all_gather (in place) and broadcast (from the last rank) of F32 against long-hand results. Every
   local step that can fail (device, stream, memory, copies) is agreed on before the communicator is made, so a rank
   that cannot take part makes every rank fail instead of leaving the others inside ncclCommInitRank. */
static void test_device(test_ctx *t) {
    accel *acc = t->acc;
    int P = acc->num_processes, me = acc->process_index, ndev = 0, r;
    double t0 = accel_now();
    const size_t n = 4096;
    size_t i;
    int64_t v[2];
    float *d = NULL, *h = NULL;
    cudaStream_t st = NULL;
    ncclComm_t comm = NULL;
    ncclResult_t nr = ncclSuccess;
    struct { int64_t ok; ncclUniqueId id; } boot;
    char why[T_MSG] = "", where[32] = "";
    accel_result res;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess) ndev = 0;
    (void)cudaGetLastError();
    v[0] = acc->desc.cpu ? 0 : ndev;                                /* the fewest devices of any rank */
    v[1] = acc->desc.cpu || ndev == 0 ? 1 : acc->local_num_processes > ndev; /* more processes than devices */
    if (test_host_failed(t, res = accel_host_allreduce_i64(acc, v, 1, ACCEL_HOST_MIN)) ||
        test_host_failed(t, res = accel_host_allreduce_i64(acc, v + 1, 1, ACCEL_HOST_MAX))) {
        test_verdict_line(t, "device-collectives", T_FAIL, accel_now() - t0, "all-reduce: %s", accel_last_error(acc));
        return;
    }
    if (v[0] == 0) {
        test_verdict_line(t, "device-collectives", T_SKIP, accel_now() - t0, "skipped: %s",
                          acc->desc.cpu ? "cpu run (ACCELERATE_USE_CPU)" : "no CUDA device on some rank");
        return;
    }
    if (v[1]) {
        test_verdict_line(t, "device-collectives", T_SKIP, accel_now() - t0, "skipped: more processes than CUDA "
                          "devices on a node (NCCL needs one device per process)");
        return;
    }
    snprintf(where, sizeof where, "cuda:%d", acc->local_process_index);
    h = (float *)malloc((size_t)P * n * sizeof *h);
    if (!h) snprintf(why, sizeof why, "out of memory");
    else if (cudaSetDevice(acc->local_process_index) != cudaSuccess || cudaStreamCreate(&st) != cudaSuccess ||
             cudaMalloc((void **)&d, (size_t)P * n * sizeof *d) != cudaSuccess)
        snprintf(why, sizeof why, "%s: %s", where, cudaGetErrorString(cudaGetLastError()));
    if (!why[0]) {
        for (i = 0; i < n; ++i) h[i] = test_x(me, i);
        if (cudaMemcpy(d, h, n * sizeof *h, cudaMemcpyHostToDevice) != cudaSuccess)
            snprintf(why, sizeof why, "%s: copy to the device: %s", where, cudaGetErrorString(cudaGetLastError()));
    }
    memset(&boot, 0, sizeof boot);
    boot.ok = !why[0];
    if (me == 0 && boot.ok && (nr = ncclGetUniqueId(&boot.id)) != ncclSuccess) {
        snprintf(why, sizeof why, "ncclGetUniqueId: %s", ncclGetErrorString(nr));
        boot.ok = 0;
    }
    v[0] = boot.ok;
    if (test_host_failed(t, res = accel_host_allreduce_i64(acc, v, 1, ACCEL_HOST_MIN)) ||
        test_host_failed(t, res = accel_host_broadcast(acc, &boot, sizeof boot, 0))) {
        snprintf(why, sizeof why, "host group: %s", accel_last_error(acc));
        goto done;
    }
    if (!v[0]) {
        if (!why[0]) snprintf(why, sizeof why, "another rank could not set up its device");
        goto done;
    }
    if ((nr = ncclCommInitRank(&comm, P, boot.id, me)) != ncclSuccess) {
        snprintf(why, sizeof why, "ncclCommInitRank on %s: %s", where, ncclGetErrorString(nr));
        comm = NULL;
        goto done;
    }
    /* all_reduce sum (integer-valued floats: exact in any order) */
    if ((nr = ncclAllReduce(d, d, n, ncclFloat, ncclSum, comm, st)) != ncclSuccess ||
        cudaStreamSynchronize(st) != cudaSuccess ||
        cudaMemcpy(h, d, n * sizeof *h, cudaMemcpyDeviceToHost) != cudaSuccess) {
        snprintf(why, sizeof why, "all_reduce on %s: %s", where,
                 nr != ncclSuccess ? ncclGetErrorString(nr) : cudaGetErrorString(cudaGetLastError()));
        goto done;
    }
    test_sum_f32(h, n, P, 0, "NCCL all_reduce F32 sum", why, sizeof why);
    if (why[0]) goto done;
    /* all_gather in place: this rank's block at d + me * n */
    for (i = 0; i < n; ++i) h[i] = (float)(me * 10000 + (int)(i % 9973));
    if (cudaMemcpy(d + (size_t)me * n, h, n * sizeof *h, cudaMemcpyHostToDevice) != cudaSuccess ||
        (nr = ncclAllGather(d + (size_t)me * n, d, n, ncclFloat, comm, st)) != ncclSuccess ||
        cudaStreamSynchronize(st) != cudaSuccess ||
        cudaMemcpy(h, d, (size_t)P * n * sizeof *h, cudaMemcpyDeviceToHost) != cudaSuccess) {
        snprintf(why, sizeof why, "all_gather on %s: %s", where,
                 nr != ncclSuccess ? ncclGetErrorString(nr) : cudaGetErrorString(cudaGetLastError()));
        goto done;
    }
    for (r = 0; r < P && !why[0]; ++r)
        for (i = 0; i < n && !why[0]; ++i)
            if (h[(size_t)r * n + i] != (float)(r * 10000 + (int)(i % 9973)))
                snprintf(why, sizeof why, "all_gather F32: rank %d's element %zu is %.9g", r, i,
                         (double)h[(size_t)r * n + i]);
    if (why[0]) goto done;
    /* broadcast from the last rank */
    for (i = 0; i < n; ++i) h[i] = me == P - 1 ? (float)(i * 3 + 1) : -1.0f;
    if (cudaMemcpy(d, h, n * sizeof *h, cudaMemcpyHostToDevice) != cudaSuccess ||
        (nr = ncclBroadcast(d, d, n, ncclFloat, P - 1, comm, st)) != ncclSuccess ||
        cudaStreamSynchronize(st) != cudaSuccess ||
        cudaMemcpy(h, d, n * sizeof *h, cudaMemcpyDeviceToHost) != cudaSuccess) {
        snprintf(why, sizeof why, "broadcast on %s: %s", where,
                 nr != ncclSuccess ? ncclGetErrorString(nr) : cudaGetErrorString(cudaGetLastError()));
        goto done;
    }
    for (i = 0; i < n && !why[0]; ++i)
        if (h[i] != (float)(i * 3 + 1))
            snprintf(why, sizeof why, "broadcast F32 from rank %d: element %zu differs", P - 1, i);
done:
    if (comm) ncclCommDestroy(comm);
    if (d) cudaFree(d);
    if (st) cudaStreamDestroy(st);
    free(h);
    if (why[0])
        test_verdict_line(t, "device-collectives", T_FAIL, accel_now() - t0, "%s", why);
    else
        test_verdict_line(t, "device-collectives", T_PASS, accel_now() - t0,
                          "NCCL all_reduce, all_gather, broadcast on one device per process match long-hand");
}
#endif

/* ------------------------------------------------------------------------------------------------------- rng */
static void test_rng(test_ctx *t) {
    accel *acc = t->acc;
    int P = acc->num_processes, r, k;
    double t0 = accel_now();
    const uint64_t seed = 20260527;
    uint32_t mine[8], *all = NULL, ref[8];
    char why[T_MSG] = "";
    accel_result res = ACCEL_OK;
    all = (uint32_t *)malloc((size_t)P * sizeof mine);
    if (!all) { test_verdict_line(t, "rng", T_FAIL, 0, "out of memory"); return; }
    for (k = 0; k < 3 && !why[0]; ++k) {
        /* 0: set_seed(seed) → equal; 1: device_specific → the draws of seed + rank; 2: synchronize → rank 0's */
        if (k == 0) accel_set_seed(acc, seed + (test_fault(t, "rng") ? 1u : 0u), 0);
        if (k == 1) accel_set_seed(acc, seed, 1);
        if (k == 2 && (res = accel_synchronize_rng_state(acc)) != ACCEL_OK) {
            snprintf(why, sizeof why, "synchronize_rng_state: %s", accel_last_error(acc));
            break;
        }
        accel_rng_next4(acc, mine);
        accel_rng_next4(acc, mine + 4);
        if ((res = accel_host_allgather(acc, mine, all, sizeof mine)) != ACCEL_OK) {
            snprintf(why, sizeof why, "all-gather of the draws: %s", accel_last_error(acc));
            break;
        }
        for (r = 0; r < P && !why[0]; ++r) {
            if (k == 1) { /* rank r's draws are those of seed + r, computed here */
                accel_rng_state keep = accel_get_rng_state(acc);
                accel_set_seed(acc, seed + (uint64_t)r, 0);
                accel_rng_next4(acc, ref);
                accel_rng_next4(acc, ref + 4);
                accel_set_rng_state(acc, keep);
                if (memcmp(ref, all + (size_t)r * 8, sizeof ref))
                    snprintf(why, sizeof why,
                             "set_seed(%llu, device_specific): rank %d's draws are not those of seed %llu",
                             (unsigned long long)seed, r, (unsigned long long)(seed + (uint64_t)r));
            } else if (memcmp(all, all + (size_t)r * 8, sizeof mine)) {
                snprintf(why, sizeof why, "%s: rank %d draws %08x..., rank 0 %08x...",
                         k == 0 ? "set_seed" : "synchronize_rng_state", r, all[(size_t)r * 8], all[0]);
            }
        }
    }
    free(all);
    if (test_host_failed(t, res) || why[0])
        test_verdict_line(t, "rng", T_FAIL, accel_now() - t0, "%s", why);
    else
        test_verdict_line(t, "rng", T_PASS, accel_now() - t0,
                          "set_seed agrees on %d ranks; device_specific = seed + rank; synchronize_rng_state "
                          "agrees", P);
}

/* ---------------------------------------------------------------------------------------------------- shards */
static void test_shards(test_ctx *t) {
    accel *acc = t->acc;
    int P = acc->num_processes, even, r;
    double t0 = accel_now();
    const int64_t N = 1003, B = 8;
    char why[T_MSG] = "";
    accel_result res = ACCEL_OK;
    for (even = 0; even < 2 && !why[0] && res == ACCEL_OK; ++even) {
        accel_data_shard sh;
        accel_data_shard_desc d;
        int64_t *mine = NULL, n = 0, k, nb, cnt, *counts = NULL, *per = NULL;
        accel_blobs all;
        memset(&d, 0, sizeof d);
        memset(&sh, 0, sizeof sh);
        memset(&all, 0, sizeof all);
        d.dataset_len = N;
        d.batch_size = B;
        d.shuffle = 1;
        d.seed = 7;
        d.no_even_batches = !even;
        d.batch_sampler_shard = 1; /* shard with one process too */
        if (accel_data_shard_init(acc, &sh, &d) != ACCEL_OK) {
            snprintf(why, sizeof why, "accel_data_shard_init: %s", accel_last_error(acc));
            break;
        }
        nb = accel_data_shard_len(&sh);
        mine = (int64_t *)malloc((size_t)(nb * B + 1) * sizeof *mine);
        for (k = 0; mine && k < nb; ++k) {
            if (accel_data_shard_get_batch(&sh, k, mine + n, &cnt) != ACCEL_OK) {
                snprintf(why, sizeof why, "batch %lld: %s", (long long)k, accel_last_error(acc));
                break;
            }
            n += cnt;
        }
        if (test_fault(t, "shards") && n > 1) mine[1] = mine[0];
        res = accel_gather_object(acc, mine, mine ? (size_t)n * sizeof *mine : 0, &all);
        if (res != ACCEL_OK) snprintf(why, sizeof why, "gather_object: %s", accel_last_error(acc));
        per = (int64_t *)calloc((size_t)P, sizeof *per);
        if (res == ACCEL_OK && per) res = accel_host_allgather(acc, &nb, per, sizeof nb);
        if (res == ACCEL_OK && !why[0]) {
            counts = (int64_t *)calloc((size_t)N, sizeof *counts);
            for (r = 0; counts && r < P && !why[0]; ++r) {
                const int64_t *idx = (const int64_t *)(all.data + all.offsets[r]);
                size_t j, len = (all.offsets[r + 1] - all.offsets[r]) / sizeof *idx;
                for (j = 0; j < len && !why[0]; ++j) {
                    if (idx[j] < 0 || idx[j] >= N)
                        snprintf(why, sizeof why, "rank %d got index %lld outside [0, %lld)", r, (long long)idx[j],
                                 (long long)N);
                    else if (++counts[idx[j]] > 1 && !even)
                        snprintf(why, sizeof why, "even_batches off: index %lld seen twice (again on rank %d)",
                                 (long long)idx[j], r);
                }
                if (even && per[r] != per[0])
                    snprintf(why, sizeof why, "even_batches: rank %d has %lld batches, rank 0 %lld", r,
                             (long long)per[r], (long long)per[0]);
            }
            for (k = 0; counts && k < N && !why[0]; ++k)
                if (!counts[k]) snprintf(why, sizeof why, "even_batches %s: index %lld on no rank", even ? "on" : "off",
                                         (long long)k);
            if (!counts) snprintf(why, sizeof why, "out of memory");
        }
        free(counts);
        free(per);
        free(mine);
        accel_blobs_deinit(&all);
        accel_data_shard_deinit(&sh);
    }
    if (test_host_failed(t, res) || why[0])
        test_verdict_line(t, "shards", T_FAIL, accel_now() - t0, "%s", why);
    else
        test_verdict_line(t, "shards", T_PASS, accel_now() - t0, "%lld shuffled samples, batch %lld: disjoint and "
                          "covering on %d ranks", (long long)N, (long long)B, P);
}

/* ------------------------------------------------------------------------------------------------ checkpoint */
static int test_rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st; (void)flag; (void)ftw;
    return remove(path);
}

typedef struct { unsigned char bytes[48]; } test_obj;
static accel_result test_obj_save(void *obj, void *buf, size_t cap, size_t *size) {
    *size = sizeof(test_obj);
    if (buf && cap >= sizeof(test_obj)) memcpy(buf, obj, sizeof(test_obj));
    return ACCEL_OK;
}
static accel_result test_obj_load(void *obj, const void *buf, size_t size) {
    if (size != sizeof(test_obj)) return accel_set_error(NULL, ACCEL_ERR_FORMAT, "test object: %zu bytes", size);
    memcpy(obj, buf, size);
    return ACCEL_OK;
}

static void test_checkpoint(test_ctx *t, const char *base) {
    accel *acc = t->acc;
    int me = acc->process_index, i;
    double t0 = accel_now();
    char dir[4096], ck_dir[4200], why[T_MSG] = "";
    int64_t ok;
    accel_result res = ACCEL_OK; /* of the host collectives only */
    accel_ckpt *ck = NULL;
    accel_ckpt_desc cd;
    float w[257], w0[257];
    uint16_t h[33], h0[33];
    int64_t q[5], q0[5];
    test_obj obj, obj0;
    accel_rng_state rng0, rng1;
    accel_tensor ts[3];
    struct stat st;
    memset(dir, 0, sizeof dir);
    /* the main process makes the directory; every rank must see it */
    ok = 1;
    if (acc->is_main_process) {
        snprintf(dir, sizeof dir, "%s/accel-test-XXXXXX", base);
        if (!mkdtemp(dir)) {
            snprintf(why, sizeof why, "cannot make a temporary directory in %s: %s", base, strerror(errno));
            dir[0] = 0;
        }
    }
    if ((res = accel_host_broadcast(acc, dir, sizeof dir, 0)) != ACCEL_OK) {
        snprintf(why, sizeof why, "broadcast: %s", accel_last_error(acc));
        goto done;
    }
    if (!dir[0]) {
        if (!why[0]) snprintf(why, sizeof why, "rank 0 could not make a temporary directory in %s", base);
        goto done;
    }
    ok = stat(dir, &st) == 0 && S_ISDIR(st.st_mode);
    if ((res = accel_host_allreduce_i64(acc, &ok, 1, ACCEL_HOST_MIN)) != ACCEL_OK) {
        snprintf(why, sizeof why, "all-reduce: %s", accel_last_error(acc));
        goto done;
    }
    if (!ok) {
        if (stat(dir, &st) != 0)
            snprintf(why, sizeof why, "%s (rank 0's) is not visible here: on several nodes pass --dir on a shared "
                     "filesystem", dir);
        else
            snprintf(why, sizeof why, "%s is not visible on every rank", dir);
        goto clean;
    }
    snprintf(ck_dir, sizeof ck_dir, "%s/checkpoint", dir);
    /* bit patterns a round trip must keep: signed zero, subnormals, NaN payloads, infinities, extremes */
    for (i = 0; i < 257; ++i) {
        uint32_t u = (uint32_t)i * 2654435761u ^ 0x5bd1e995u;
        memcpy(&w[i], &u, 4);
    }
    {
        uint32_t sp[6] = {0x80000000u, 0x00000001u, 0x7fc00123u, 0xff800000u, 0x7f7fffffu, 0x807fffffu};
        memcpy(w, sp, sizeof sp);
    }
    for (i = 0; i < 33; ++i) h[i] = (uint16_t)(i * 2017 + 3);
    for (i = 0; i < 5; ++i) q[i] = -((int64_t)1 << 62) + i * 999999937LL;
    for (i = 0; i < (int)sizeof obj.bytes; ++i) obj.bytes[i] = (unsigned char)(i * 7 + 1);
    memcpy(w0, w, sizeof w);
    memcpy(h0, h, sizeof h);
    memcpy(q0, q, sizeof q);
    obj0 = obj;
    memset(ts, 0, sizeof ts);
    ts[0].name = "test.weight"; ts[0].ptr = w; ts[0].dtype = ACCEL_F32; ts[0].ndim = 1; ts[0].shape[0] = 257;
    ts[1].name = "test.bf16"; ts[1].ptr = h; ts[1].dtype = ACCEL_BF16; ts[1].ndim = 2;
    ts[1].shape[0] = 3; ts[1].shape[1] = 11;
    ts[2].name = "test.step"; ts[2].ptr = q; ts[2].dtype = ACCEL_I64; ts[2].ndim = 1; ts[2].shape[0] = 5;
    memset(&cd, 0, sizeof cd);
    cd.project_dir = dir;
    accel_set_seed(acc, 4242, 1);
    {
        uint32_t d4[4];
        accel_rng_next4(acc, d4); /* a state with an offset */
    }
    rng0 = accel_get_rng_state(acc);
    if (accel_ckpt_create(acc, &cd, &ck) != ACCEL_OK || accel_ckpt_register_model(ck, ts, 3) != ACCEL_OK ||
        accel_ckpt_register(ck, "accel_test", test_obj_save, test_obj_load, &obj) != ACCEL_OK) {
        snprintf(why, sizeof why, "setting up the checkpointer: %s", accel_last_error(acc));
        goto clean;
    }
    if (accel_ckpt_save_state(ck, ck_dir, NULL, 0) != ACCEL_OK) {
        snprintf(why, sizeof why, "save_state: %s", accel_last_error(acc));
        goto clean;
    }
    if (test_fault(t, "checkpoint")) { /* flip the last byte of the model file: the load must notice */
        char mf[4300];
        FILE *f;
        snprintf(mf, sizeof mf, "%s/model.safetensors", ck_dir);
        if ((f = fopen(mf, "r+b")) != NULL) {
            int c;
            fseek(f, -1, SEEK_END);
            c = fgetc(f);
            fseek(f, -1, SEEK_END);
            fputc(c ^ 0x01, f);
            fclose(f);
        }
    }
    if ((res = accel_wait_for_everyone(acc)) != ACCEL_OK) {
        snprintf(why, sizeof why, "barrier: %s", accel_last_error(acc));
        goto clean;
    }
    /* clobber everything, then load */
    memset(w, 0xA5, sizeof w);
    memset(h, 0xA5, sizeof h);
    memset(q, 0xA5, sizeof q);
    memset(&obj, 0xA5, sizeof obj);
    accel_set_seed(acc, 99, 0);
    if (accel_ckpt_load_state(ck, ck_dir) != ACCEL_OK) {
        snprintf(why, sizeof why, "load_state: %s", accel_last_error(acc));
        goto clean;
    }
    rng1 = accel_get_rng_state(acc);
    if (memcmp(w, w0, sizeof w)) snprintf(why, sizeof why, "F32 tensor differs after the round trip");
    else if (memcmp(h, h0, sizeof h)) snprintf(why, sizeof why, "BF16 tensor differs after the round trip");
    else if (memcmp(q, q0, sizeof q)) snprintf(why, sizeof why, "I64 tensor differs after the round trip");
    else if (memcmp(&obj, &obj0, sizeof obj))
        snprintf(why, sizeof why, "registered object differs after the round trip");
    else if (memcmp(&rng0, &rng1, sizeof rng0))
        snprintf(why, sizeof why, "rank %d's RNG state differs after the round trip", me);
clean:
    accel_ckpt_destroy(ck);
    if (!test_host_failed(t, res)) test_host_failed(t, accel_wait_for_everyone(acc)); /* all done with the dir */
    if (acc->is_main_process && dir[0] && nftw(dir, test_rm_one, 16, FTW_DEPTH | FTW_PHYS) != 0)
        fprintf(stderr, "accel test: could not remove %s: %s\n", dir, strerror(errno));
done:
    test_host_failed(t, res);
    if (why[0])
        test_verdict_line(t, "checkpoint", T_FAIL, accel_now() - t0, "%s", why);
    else
        test_verdict_line(t, "checkpoint", T_PASS, accel_now() - t0, "save_state/load_state round trip in %s: "
                          "tensors, object and RNG bit-identical", base);
}

/* --------------------------------------------------------------------------------------------------- timings */
static void test_timings(test_ctx *t) {
    accel *acc = t->acc;
    int P = acc->num_processes, r, k, slow = 0, kslow = 0;
    double *tot = (double *)calloc((size_t)P, sizeof *tot);
    if (!tot || !t->group_ok) {
        free(tot);
        return;
    }
    for (r = 0; r < P; ++r)
        for (k = 0; k < t->nchecks; ++k) tot[r] += t->secs[k * P + r];
    for (r = 1; r < P; ++r)
        if (tot[r] > tot[slow]) slow = r;
    for (k = 1; k < t->nchecks; ++k)
        if (t->secs[k * P + slow] > t->secs[kslow * P + slow]) kslow = k;
    if (acc->is_main_process) {
        printf("PASS  %-18s slowest rank %d: %.1f ms (most in %s, %.1f ms); per rank:", "timings", slow,
               tot[slow] * 1e3, t->nchecks ? t->names[kslow] : "-", t->nchecks ? t->secs[kslow * P + slow] * 1e3 : 0.0);
        for (r = 0; r < P && r < 64; ++r) printf(" %d=%.1f", r, tot[r] * 1e3);
        printf("%s ms\n", P > 64 ? " ..." : "");
        fflush(stdout);
    }
    free(tot);
}

static void test_usage(FILE *f) {
    fprintf(f, "usage: accel test [--dir DIR]\n"
               "  Run under the job's launcher (mpirun -np N accel test, accel launch -n N accel test,\n"
               "  srun accel test, or plain): checks the host group, the data collectives, RNG agreement,\n"
               "  disjoint shards, a checkpoint round trip and per-rank timings, one PASS/FAIL/SKIP line each.\n"
               "  Exit status 1 when any check fails.\n"
               "  --dir DIR  where the checkpoint round trip makes its temporary directory (default $TMPDIR, else\n"
               "             /tmp); on several nodes a directory every node sees\n"
               "  Test hook: ACCEL_TEST_FAULT=CHECK:RANK injects a fault into RANK's part of CHECK.\n");
}

int cli_test(int argc, char **argv) {
    accel acc;
    accel_desc d;
    test_ctx t;
    const char *base = getenv("TMPDIR");
    const char *fault = getenv("ACCEL_TEST_FAULT");
    accel_result r;
    int i, failed;
    if (!base || !base[0]) base = "/tmp";
    for (i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { test_usage(stdout); return 0; }
        if (!strcmp(argv[i], "--dir") && i + 1 < argc && argv[i + 1][0]) { base = argv[++i]; continue; }
        fprintf(stderr, "accel test: %s '%s'\n", strcmp(argv[i], "--dir") ? "unknown option" : "needs a directory",
                argv[i]);
        test_usage(stderr);
        return 2;
    }
    memset(&t, 0, sizeof t);
    t.fault_rank = -1;
    if (fault && fault[0]) {
        const char *colon = strchr(fault, ':');
        char *end = NULL;
        long fr = colon ? strtol(colon + 1, &end, 10) : -1;
        if (!colon || (size_t)(colon - fault) >= sizeof t.fault_check || !end || *end || end == colon + 1 || fr < 0) {
            fprintf(stderr, "accel test: ACCEL_TEST_FAULT='%s' is not CHECK:RANK\n", fault);
            return 2;
        }
        memcpy(t.fault_check, fault, (size_t)(colon - fault));
        t.fault_rank = (int)fr;
        if (strcmp(t.fault_check, "host-group") && strcmp(t.fault_check, "collectives") &&
            strcmp(t.fault_check, "rng") && strcmp(t.fault_check, "shards") && strcmp(t.fault_check, "checkpoint")) {
            fprintf(stderr, "accel test: ACCEL_TEST_FAULT: no check '%s' takes a fault (host-group, collectives, rng, "
                    "shards, checkpoint)\n", t.fault_check);
            return 2;
        }
    }
    memset(&d, 0, sizeof d);
    r = accel_init(&acc, &d);
    if (r != ACCEL_OK) {
        printf("FAIL  %-18s %s\n", "init", accel_last_error(&acc));
        accel_shutdown(&acc);
        return 1;
    }
    t.acc = &acc;
    t.group_ok = 1;
    t.secs = (double *)calloc((size_t)T_MAX_CHECKS * (size_t)acc.num_processes, sizeof *t.secs);
    if (!t.secs) {
        printf("FAIL  %-18s out of memory\n", "init");
        accel_shutdown(&acc);
        return 1;
    }
    if (acc.is_main_process) {
        printf("accel test: %d process%s, launcher %s, host group %s\n", acc.num_processes,
               acc.num_processes == 1 ? "" : "es", accel_launcher_name(acc.launcher), accel_host_group_name(&acc));
        fflush(stdout);
    }
    test_host_group(&t);
    if (t.group_ok) test_collectives(&t);
    if (t.group_ok) {
#if defined(ACCEL_WITH_CUDA) && defined(ACCEL_WITH_NCCL)
        test_device(&t);
#else
        test_verdict_line(&t, "device-collectives", T_SKIP, 0, "skipped: built without CUDA and NCCL");
#endif
    }
    if (t.group_ok) test_rng(&t);
    if (t.group_ok) test_shards(&t);
    if (t.group_ok) test_checkpoint(&t, base);
    if (t.group_ok) test_timings(&t);
    else printf("FAIL  %-18s [rank %d] the host group failed; the remaining checks did not run\n", "(stopped)",
                acc.process_index);
    failed = t.failed || !t.group_ok;
    free(t.secs);
    accel_shutdown(&acc);
    return failed ? 1 : 0;
}
