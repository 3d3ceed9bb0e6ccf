/* accel_amp fp8 GPU benchmark (issues 17, 27): the fused cast + amax (accel_amp_fp8_quantize, fp32 -> E4M3 with a
   scale, the amax kept on the device) and the dequantize (E4M3 -> fp32 times scale_inv) over BYTES of fp32 (default
   256 MiB), in the same run against:
     - the copy limit of the bytes they move (bench_limits.cuh: the faster of cudaMemcpyAsync device-to-device and a
       16-byte-vector copy kernel swept over depth and grid; printed as limit_* lines with the nominal peak). Bandwidth
       counts bytes read + written: the cast reads B and writes B/4, a copy of 0.625 B moves the same;
     - PyTorch (torch_fp8_peer.py with `python3` from PATH, when torch has CUDA and float8):
       x.to(torch.float8_e4m3fn) + x.abs().amax() for the cast, y.to(torch.float32) * scale_inv for the dequantize.
   CUDA events around back-to-back calls (neither job synchronizes: the GPU time per call a trainer pays), the best of
   3 runs of REPS calls. Exits 77 without a device. usage: bench_fp8_gpu TORCH_PEER_PY|"" [BYTES] [REPS] */
#include "accel.h"
#include "accel_amp.h"
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench_limits.cuh"

static void line(const char *bench, size_t bytes, const char *dev, double accel_gbs, double ref_gbs, const char *ref_name,
                 double goal, const char *extra) {
    printf("{\"bench\": \"%s\", \"params\": {\"bytes\": %zu, \"device\": \"%s\", \"counted\": \"bytes read + written\"%s}, "
           "\"unit\": \"GB/s\", \"accel\": %.1f, \"reference\": %.1f, \"reference_name\": \"%s\", \"ratio\": %.3f, "
           "\"goal\": %.1f}\n",
           bench, bytes, dev, extra, accel_gbs, ref_gbs, ref_name, accel_gbs / ref_gbs, goal);
}

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); return 1; } } while (0)

int main(int argc, char **argv) {
    size_t bytes = argc > 2 ? (size_t)strtoull(argv[2], NULL, 10) : ((size_t)256 << 20);
    int reps = argc > 3 ? atoi(argv[3]) : 20, count = 0;
    size_t n = bytes / 4, cbytes = (bytes / 8) * 5;
    double moved = 1.25 * (double)bytes * 1e-9, best_q = 1e30, best_d = 1e30, best_c = 1e30, t_torch = 0, t_torch_d = 0;
    double memcpy_gbs, copy_gbs;
    bl_best copy_best, read_best;
    float *x, *back;
    unsigned char *q, *c1, *c2;
    accel acc;
    accel_desc d;
    accel_amp_fp8 f;
    accel_amp_fp8_desc fd;
    accel_tensor ts, tq, tb;
    struct cudaDeviceProp prop;
    char extra[256], tv[64] = "";
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) { printf("no CUDA device: skipped\n"); return 77; }
    memset(&d, 0, sizeof d);
    d.no_mpi = 1;
    d.mixed_precision = ACCEL_PRECISION_FP8;
    if (accel_init(&acc, &d) != ACCEL_OK || acc.device < 0) { fprintf(stderr, "%s\n", accel_last_error(&acc)); return 1; }
    CK(cudaGetDeviceProperties(&prop, acc.device));
    memset(&fd, 0, sizeof fd);
    fd.num_forward = 1;
    if (accel_amp_fp8_init(&acc, &f, &fd) != ACCEL_OK) { fprintf(stderr, "%s\n", accel_last_error(&acc)); return 1; }
    f.scale[0] = 100.0f;
    f.scale_inv[0] = 0.01f;
    CK(cudaMalloc(&x, bytes));
    CK(cudaMalloc(&back, bytes));
    CK(cudaMalloc(&q, n));
    CK(cudaMalloc(&c1, cbytes));
    CK(cudaMalloc(&c2, cbytes));
    {
        float *h = (float *)malloc(bytes);
        size_t i;
        for (i = 0; i < n; ++i) h[i] = (float)((i * 2654435761u) & 0xffff) / 16384.0f - 2.0f;
        CK(cudaMemcpy(x, h, bytes, cudaMemcpyHostToDevice));
        free(h);
    }
    CK(cudaMemset(c1, 1, cbytes));
    memset(&ts, 0, sizeof ts);
    ts.ptr = x; ts.dtype = ACCEL_F32; ts.ndim = 1; ts.shape[0] = (int64_t)n;
    tq = ts; tq.ptr = q; tq.dtype = ACCEL_F8_E4M3;
    tb = ts; tb.ptr = back;
    { /* the jobs do not synchronize: GPU time per call of back-to-back calls (bench_limits.cuh's bl_time), as a
         trainer pays for them and as the limits are timed */
        cudaStream_t s = (cudaStream_t)acc.stream;
        int bad = 0;
        best_q = bl_time(s, reps, [&] { bad |= accel_amp_fp8_quantize(&f, NULL, &ts, &tq, 1) != ACCEL_OK; });
        best_d = bl_time(s, reps, [&] { bad |= accel_amp_fp8_dequantize(&f, NULL, &tq, &tb, 1) != ACCEL_OK; });
        best_c = bl_time(s, reps, [&] {
            bad |= cudaMemcpyAsync(c2, c1, cbytes, cudaMemcpyDeviceToDevice, s) != cudaSuccess;
        });
        if (bad) { fprintf(stderr, "%s\n", accel_last_error(&acc)); return 1; }
    }
    /* the limits: cudaMemcpyAsync (timed above) vs the swept copy kernel, and the read limit */
    memcpy_gbs = moved / best_c;
    copy_best = bl_copy_best(c2, c1, cbytes, (cudaStream_t)acc.stream, reps);
    read_best = bl_read_best(x, bytes, back, (cudaStream_t)acc.stream, reps);
    copy_gbs = copy_best.gbs > memcpy_gbs ? copy_best.gbs : memcpy_gbs;
    if (accel_amp_fp8_update(&f) != ACCEL_OK || f.amax_history[f.amax_history_len - 1] != 2.0f) {
        fprintf(stderr, "amax %g, expected 2 (%s)\n", (double)f.amax_history[f.amax_history_len - 1], accel_last_error(&acc));
        return 1;
    }
    if (argc > 1 && argv[1][0]) { /* PyTorch, same sizes, same run ("" skips it) */
        char cmd[1024], out[512];
        FILE *p;
        snprintf(cmd, sizeof cmd, "python3 '%s' %zu %d 2>/dev/null", argv[1], bytes, reps);
        p = popen(cmd, "r");
        if (p) {
            if (fgets(out, sizeof out, p)) {
                const char *a = strstr(out, "\"cast_amax_s\": "), *v = strstr(out, "\"torch\": \"");
                const char *dq = strstr(out, "\"dequantize_s\": ");
                if (a) t_torch = atof(a + 15);
                if (dq) t_torch_d = atof(dq + 16);
                if (v) { size_t k = 0; v += 10; while (v[k] && v[k] != '"' && k < sizeof tv - 1) { tv[k] = v[k]; ++k; } tv[k] = 0; }
            }
            pclose(p);
        }
    }
    {
        char what[64];
        snprintf(what, sizeof what, "\"bytes\": %zu", cbytes);
        bl_print_limits(what, prop.name, memcpy_gbs, copy_best, read_best);
    }
    line("fp8_cast_amax_e4m3", bytes, prop.name, moved / best_q, copy_gbs,
         "copy limit: max(cudaMemcpyAsync D2D, 16-byte copy kernel)", 0.9, "");
    line("fp8_dequantize_e4m3", bytes, prop.name, moved / best_d, copy_gbs,
         "copy limit: max(cudaMemcpyAsync D2D, 16-byte copy kernel)", 0.9, "");
    if (t_torch > 0) {
        snprintf(extra, sizeof extra, ", \"torch\": \"%s\", \"torch_op\": \"x.to(float8_e4m3fn); x.abs().amax()\"", tv);
        line("fp8_cast_amax_e4m3", bytes, prop.name, moved / best_q, moved / t_torch, "torch-cuda", 1.0, extra);
    } else {
        fprintf(stderr, "bench_fp8_gpu: python3 with CUDA torch and float8 not available: torch lines skipped\n");
    }
    if (t_torch_d > 0) {
        snprintf(extra, sizeof extra, ", \"torch\": \"%s\", \"torch_op\": \"y.to(float32) * scale_inv\"", tv);
        line("fp8_dequantize_e4m3", bytes, prop.name, moved / best_d, moved / t_torch_d, "torch-cuda", 1.0, extra);
    }
    accel_amp_fp8_deinit(&f);
    cudaFree(x); cudaFree(back); cudaFree(q); cudaFree(c1); cudaFree(c2);
    accel_shutdown(&acc);
    return 0;
}
