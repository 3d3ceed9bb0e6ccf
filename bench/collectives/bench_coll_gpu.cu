/* accel_collectives NCCL benchmark (issue 13): accel_coll_all_reduce through the NCCL backend against raw
   ncclAllReduce on the same stream, one rank on one GPU (NCCL's single-rank path: what is measured is the cost per
   call — the wrapper's validation, request bookkeeping and error polling — on top of NCCL's own), fp32 sum,
   out-of-place, sizes 4 B … 1 GiB plus the GPT-2 124M gradient list as one flat buffer (497,759,232 bytes).
   Two modes, both timed by the host clock (best of ROUNDS rounds of ITERS calls):
     pipelined  ITERS calls enqueued back to back, one cudaStreamSynchronize at the end: time per call
     latency    every call followed by cudaStreamSynchronize (what a blocking training step sees)
   Goals (issue 13): ≤ 2 % over raw at ≥ 1 MiB (ratio ≥ 0.98) and ≤ 3 µs added per call below (the line's goal is
   the ratio raw / (raw + 3 µs), and params.added_us says what was added).
   Exits 77 without a device or without NCCL. usage: bench_coll_gpu [ROUNDS] */
#include "accel.h"
#include "accel_collectives.h"
#include "../gpu_bench.h"
#include <time.h>
#ifdef ACCEL_WITH_NCCL
#include <nccl.h>
#endif

static double wall(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
#ifndef ACCEL_WITH_NCCL
    (void)argc; (void)argv;
    gb_need_device("bench_coll_gpu");
    printf("bench_coll_gpu: built without NCCL: skipped\n");
    return 77;
#else
    int rounds = argc > 1 ? atoi(argv[1]) : 5, si, mode, r, it, dev = 0;
    int64_t sizes[GB_NT];
    size_t gpt2_bytes = 4 * (size_t)gb_gpt2_sizes(sizes);
    size_t bytes_list[16];
    int nsizes = 0;
    accel acc;
    accel_desc d;
    accel_coll_desc cd;
    accel_coll *coll = NULL;
    ncclComm_t comm;
    float *send, *recv;
    cudaStream_t st;
    size_t b;

    gb_need_device("bench_coll_gpu");
    if (rounds < 1) rounds = 1;
    for (b = 4; b <= ((size_t)1 << 20); b *= 16) bytes_list[nsizes++] = b;    /* 4 B, 64 B, 1 KiB, 16 KiB, 256 KiB */
    for (b = (size_t)1 << 20; b <= ((size_t)64 << 20); b *= 4) bytes_list[nsizes++] = b; /* 1, 4, 16, 64 MiB */
    bytes_list[nsizes++] = gpt2_bytes;
    bytes_list[nsizes++] = (size_t)256 << 20;
    bytes_list[nsizes++] = GB_FLAT_BYTES;
    memset(&d, 0, sizeof d);
    d.no_mpi = 1;
    if (accel_init(&acc, &d) != ACCEL_OK || acc.device < 0) {
        fprintf(stderr, "accel_init: %s\n", accel_last_error(&acc));
        return 1;
    }
    st = (cudaStream_t)acc.stream;
    memset(&cd, 0, sizeof cd);
    cd.backend = ACCEL_COLL_BACKEND_NCCL;
    if (accel_coll_create(&acc, &cd, &coll) != ACCEL_OK) {
        fprintf(stderr, "accel_coll_create(NCCL): %s\n", accel_last_error(&acc));
        return 1;
    }
    dev = acc.device;
    if (ncclCommInitAll(&comm, 1, &dev) != ncclSuccess) { fprintf(stderr, "ncclCommInitAll failed\n"); return 1; }
    GB_CK(cudaMalloc((void **)&send, GB_FLAT_BYTES));
    GB_CK(cudaMalloc((void **)&recv, GB_FLAT_BYTES));
    gb_fill(send, GB_FLAT_BYTES / 4, 3u, st);
    GB_CK(cudaStreamSynchronize(st));

    for (si = 0; si < nsizes; ++si) {
        size_t bytes = bytes_list[si], count = bytes / 4;
        int iters = bytes <= ((size_t)1 << 20) ? 1000 : bytes <= ((size_t)64 << 20) ? 50 : 5;
        for (mode = 0; mode < 2; ++mode) {
            double best_a = 1e30, best_r = 1e30;
            char prm[256];
            for (r = 0; r < rounds; ++r) {
                double t0, t;
                /* raw NCCL */
                GB_CK(cudaStreamSynchronize(st));
                t0 = wall();
                for (it = 0; it < iters; ++it) {
                    if (ncclAllReduce(send, recv, count, ncclFloat, ncclSum, comm, st) != ncclSuccess) {
                        fprintf(stderr, "ncclAllReduce failed\n");
                        return 1;
                    }
                    if (mode) GB_CK(cudaStreamSynchronize(st));
                }
                GB_CK(cudaStreamSynchronize(st));
                t = (wall() - t0) / iters;
                if (t < best_r) best_r = t;
                /* accel */
                t0 = wall();
                for (it = 0; it < iters; ++it) {
                    if (accel_coll_all_reduce(coll, send, recv, count, ACCEL_F32, ACCEL_COLL_SUM) != ACCEL_OK) {
                        fprintf(stderr, "accel_coll_all_reduce: %s\n", accel_last_error(&acc));
                        return 1;
                    }
                    if (mode) GB_CK(cudaStreamSynchronize(st));
                }
                GB_CK(cudaStreamSynchronize(st));
                t = (wall() - t0) / iters;
                if (t < best_a) best_a = t;
            }
            snprintf(prm, sizeof prm, "\"bytes\": %zu, \"dtype\": \"F32\", \"op\": \"sum\", \"ranks\": 1, \"mode\": \"%s\", "
                     "\"iters\": %d, \"added_us\": %.2f%s", bytes, mode ? "latency" : "pipelined", iters,
                     (best_a - best_r) * 1e6, bytes == gpt2_bytes ? ", \"shapes\": \"GPT-2 124M gradients, flat\"" : "");
            gb_line("all_reduce_nccl_gpu", prm, "us/call", best_a * 1e6, best_r * 1e6, "ncclAllReduce",
                    bytes >= ((size_t)1 << 20) ? 0.98 : best_r / (best_r + 3e-6));
        }
    }
    ncclCommDestroy(comm);
    accel_coll_destroy(coll);
    cudaFree(send); cudaFree(recv);
    accel_shutdown(&acc);
    return 0;
#endif
}
