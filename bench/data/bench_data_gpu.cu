/* accel_data stager GPU benchmark (issue 13): accel_data_stager (two pinned host buffers, cudaMemcpyAsync on
   acc.stream, an event per buffer) moving BATCHES batches to the device, against the limit in the same run: the same
   number of back-to-back pinned cudaMemcpyAsync host-to-device copies of the same size on the same stream (no
   double-buffer bookkeeping, no waits). Batch sizes: 64 KiB (a GPT-2 batch of 8 × 1024 int32 tokens, inputs +
   targets), 1, 16 and 256 MiB, and 1 GiB. The host buffer is not refilled between batches (the fill is the
   user's and costs the same either way). A third peer when torch has CUDA: Tensor.pin_memory() once, then
   .to("cuda", non_blocking=True) per batch (torch_peer_gpu.py). Goal: stager ≥ 0.9 × pinned copy bandwidth.
   Exits 77 without a device. usage: bench_data_gpu [TORCH_PEER_GPU_PY] [ROUNDS] */
#include "accel.h"
#include "accel_data.h"
#include "../gpu_bench.h"

int main(int argc, char **argv) {
    const char *peer_py = argc > 1 ? argv[1] : "";
    int rounds = argc > 2 ? atoi(argv[2]) : 5, si, r, k;
    size_t sizes[] = {(size_t)64 << 10, (size_t)1 << 20, (size_t)16 << 20, (size_t)256 << 20, GB_FLAT_BYTES};
    accel acc;
    accel_desc d;
    cudaStream_t st;
    void *pinned, *dev;
    char peer[2048], args[64];
    int have_peer;

    gb_need_device("bench_data_gpu");
    if (rounds < 1) rounds = 1;
    memset(&d, 0, sizeof d);
    d.no_mpi = 1;
    if (accel_init(&acc, &d) != ACCEL_OK || acc.device < 0) {
        fprintf(stderr, "accel_init: %s\n", accel_last_error(&acc));
        return 1;
    }
    st = (cudaStream_t)acc.stream;
    /* the raw peer's buffers (plain CUDA: this is the reference, not accel) */
    GB_CK(cudaMallocHost(&pinned, GB_FLAT_BYTES));
    GB_CK(cudaMalloc(&dev, GB_FLAT_BYTES));
    memset(pinned, 1, GB_FLAT_BYTES);
    snprintf(args, sizeof args, "%d", rounds);
    have_peer = gb_run_peer(peer_py, args, peer, sizeof peer);
    if (!have_peer)
        fprintf(stderr, "bench_data_gpu: no torch with CUDA (%s): the torch lines are skipped\n",
                peer[0] ? peer : "no peer output");
    for (si = 0; si < (int)(sizeof sizes / sizeof sizes[0]); ++si) {
        size_t bytes = sizes[si];
        int batches = bytes <= ((size_t)1 << 20) ? 2000 : bytes <= ((size_t)16 << 20) ? 100 : 8;
        double best_s = 1e30, best_c = 1e30;
        accel_data_stager sg;
        char prm[256], key[64];
        if (accel_data_stager_init(&acc, &sg, bytes) != ACCEL_OK) {
            fprintf(stderr, "stager_init: %s\n", accel_last_error(&acc));
            return 1;
        }
        for (k = 0; k < 2; ++k) { /* touch both pinned buffers */
            void *h, *dv;
            if (accel_data_stager_host(&sg, &h) != ACCEL_OK) return 1;
            memset(h, 1, bytes);
            if (accel_data_stager_submit(&sg, &dv) != ACCEL_OK) return 1;
        }
        GB_CK(cudaStreamSynchronize(st));
        for (r = 0; r < rounds; ++r) {
            double t;
            GB_TIME(t, st, 1, {
                for (k = 0; k < batches; ++k) {
                    void *h, *dv;
                    if (accel_data_stager_host(&sg, &h) != ACCEL_OK || accel_data_stager_submit(&sg, &dv) != ACCEL_OK) {
                        fprintf(stderr, "stager: %s\n", accel_last_error(&acc));
                        return 1;
                    }
                }
            });
            if (t < best_s) best_s = t;
            GB_TIME(t, st, 1, {
                for (k = 0; k < batches; ++k)
                    GB_CK(cudaMemcpyAsync(dev, pinned, bytes, cudaMemcpyHostToDevice, st));
            });
            if (t < best_c) best_c = t;
        }
        accel_data_stager_deinit(&sg);
        snprintf(prm, sizeof prm, "\"batch_bytes\": %zu, \"batches\": %d, \"counted\": \"bytes copied host to device\"",
                 bytes, batches);
        gb_line("data_stager_h2d_gpu", prm, "GB/s", (double)bytes * batches * 1e-9 / best_s,
                (double)bytes * batches * 1e-9 / best_c, "pinned cudaMemcpyAsync H2D", 0.9);
        snprintf(key, sizeof key, "s_%zu", bytes);
        if (have_peer && gb_json_num(peer, key) > 0) {
            double tt = gb_json_num(peer, key); /* seconds per batch */
            char ver[64] = "?";
            const char *v = strstr(peer, "\"torch\": \"");
            if (v) { snprintf(ver, sizeof ver, "%s", v + 10); if (strchr(ver, '"')) *strchr(ver, '"') = 0; }
            snprintf(prm, sizeof prm, "\"batch_bytes\": %zu, \"batches\": %d, \"torch\": \"%s\"", bytes, batches, ver);
            gb_line("data_stager_h2d_gpu", prm, "GB/s", (double)bytes * batches * 1e-9 / best_s, (double)bytes * 1e-9 / tt,
                    "torch pinned .to(cuda, non_blocking=True)", 1.0);
        }
    }
    cudaFreeHost(pinned);
    cudaFree(dev);
    accel_shutdown(&acc);
    return 0;
}
