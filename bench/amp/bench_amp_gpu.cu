/* accel_amp GPU benchmark (issues 13, 27): every amp hot path over the GPT-2 124M gradient list (148 fp32 tensors,
   124,439,808 elements, 498 MB) and one flat 1 GiB buffer, timed with CUDA events as a trainer whose host runs ahead
   of the GPU pays for them: the jobs that synchronize (unscale_and_check reads found_inf back, the norms their sums)
   one call at a time behind 300 us of other GPU work (gpu_bench.h's GB_TIME_BUSY: the host's preparation is hidden,
   the GPU work, the read-back and the wake-up are not; best of REPS); the conversions, which do not synchronize, as
   the GPU time per call of back-to-back calls (best of 3 runs of REPS calls), as the limits' kernels are timed.
   Against, in the same run:
     - the limits (bench_limits.cuh, each the best of a sweep, printed as limit_* lines next to cudaMemcpyAsync and the
       nominal peak): read + write = the faster of cudaMemcpyAsync device-to-device and a 16-byte-vector copy kernel
       (bytes read + written: a copy of B bytes moves 2B); read only = a 16-byte-vector sum-of-squares kernel (bytes
       read), the limit of the norm; clip_grad_norm's limit is one read-only pass plus one copy pass;
     - PyTorch with CUDA when `import torch` works with `python3` from PATH (ACCEL_BENCH_PYTHON overrides it) and
       torch.cuda.is_available() (torch_peer_gpu.py, same shapes): torch._amp_foreach_non_finite_check_and_unscale_,
       Tensor.copy_ into bf16/fp16, torch.nn.utils.get_total_norm (foreach) and clip_grad_norm_(foreach=True).
   Bytes counted per element: unscale 8 (read + write fp32), fp32 -> 16-bit 6, stochastic rounding 6, norm 4 (read),
   clip_grad_norm 12 (norm pass read + scale pass read and write).
   Jobs: unscale_and_check (scale 2 and 0.5 alternating, static: the data stays finite), accel_amp_convert F32 -> BF16
   and F32 -> F16, accel_amp_master_to_model BF16 with stochastic rounding, accel_amp_grad_norm (p = 2),
   accel_amp_clip_grad_norm (max_norm 1e30: coef clamps to 1, the data stays unchanged, the work is the same).
   Every job is one JSON line against its limit with issue 27's goal (and issue 13's 0.97 for the conversions), and
   one against torch where torch has the job. Exits 77 without a device. usage: bench_amp_gpu [TORCH_PEER_GPU_PY] [REPS] */
#include "accel.h"
#include "accel_amp.h"
#include "../gpu_bench.h"
#include "bench_limits.cuh"

static accel_tensor tens(const char *name, void *p, accel_dtype dt, int64_t n) {
    accel_tensor t;
    memset(&t, 0, sizeof t);
    t.name = name; t.ptr = p; t.dtype = dt; t.ndim = 1; t.shape[0] = n;
    return t;
}

#define ACK(call) do { if ((call) != ACCEL_OK) { fprintf(stderr, "%s: %s\n", #call, accel_last_error(&acc)); return 1; } } while (0)

int main(int argc, char **argv) {
    const char *peer_py = argc > 1 ? argv[1] : "";
    int reps = argc > 2 ? atoi(argv[2]) : 10, i, k;
    int64_t sizes[GB_NT], n = gb_gpt2_sizes(sizes);
    size_t nf = GB_FLAT_BYTES / 4;
    accel acc;
    accel_desc d;
    accel_amp_scaler sc[2];
    accel_amp_scaler_desc sd;
    accel_amp_sr sr;
    accel_tensor g[GB_NT], flat;
    float *gbuf, *cbuf, *fbuf, *fcopy, *red;
    uint16_t *h16, *hflat;
    double t_un, t_un_f, t_bf, t_bf_f, t_fp16, t_sr, t_norm, t_clip, norm = 0, memcpy_gbs, memcpy_f_gbs;
    bl_best copy_best, copy_f_best, read_best, read_f_best;
    char peer[2048], args[64], prm[256];
    int have_peer, found = 0;
    cudaStream_t st;

    gb_need_device("bench_amp_gpu");
    if (reps < 1) reps = 1;
    memset(&d, 0, sizeof d);
    d.no_mpi = 1;
    if (accel_init(&acc, &d) != ACCEL_OK || acc.device < 0) {
        fprintf(stderr, "accel_init: %s\n", accel_last_error(&acc));
        return 1;
    }
    st = (cudaStream_t)acc.stream;
    GB_CK(cudaMalloc((void **)&gbuf, 4 * (size_t)n)); GB_CK(cudaMalloc((void **)&cbuf, 4 * (size_t)n));
    GB_CK(cudaMalloc((void **)&fbuf, GB_FLAT_BYTES)); GB_CK(cudaMalloc((void **)&fcopy, GB_FLAT_BYTES));
    GB_CK(cudaMalloc((void **)&h16, 2 * (size_t)n)); GB_CK(cudaMalloc((void **)&hflat, GB_FLAT_BYTES / 2));
    GB_CK(cudaMalloc((void **)&red, sizeof(float)));
    gb_fill(gbuf, (size_t)n, 1u, st);
    gb_fill(fbuf, nf, 2u, st);
    {
        int64_t off = 0;
        for (i = 0; i < GB_NT; ++i) { g[i] = tens("g", gbuf + off, ACCEL_F32, sizes[i]); off += sizes[i]; }
    }
    flat = tens("flat", fbuf, ACCEL_F32, (int64_t)nf);
    for (k = 0; k < 2; ++k) {
        memset(&sd, 0, sizeof sd);
        sd.init_scale = k ? 0.5f : 2.0f;
        sd.static_scale = 1;
        sd.enabled = ACCEL_ON;
        sd.local_found_inf = 1;
        ACK(accel_amp_scaler_init(&acc, &sc[k], &sd));
    }
    memset(&sr, 0, sizeof sr);
    sr.seed = 1234;
    GB_CK(cudaStreamSynchronize(st));

    /* warm-up: one of each (first launches, scratch allocation) */
    ACK(accel_amp_unscale_and_check(&sc[0], g, GB_NT, &found)); ACK(accel_amp_update(&sc[0]));
    ACK(accel_amp_convert(&acc, gbuf, ACCEL_F32, h16, ACCEL_BF16, (size_t)n, NULL));
    ACK(accel_amp_master_to_model(&acc, gbuf, h16, ACCEL_BF16, (size_t)n, &sr));
    ACK(accel_amp_grad_norm(&acc, g, GB_NT, 2.0, 0, &norm));
    ACK(accel_amp_clip_grad_norm(&acc, g, GB_NT, 1e30, 2.0, 0, &norm));
    GB_CK(cudaStreamSynchronize(st));

    /* limits: the best of cudaMemcpyAsync and the swept kernels (bench_limits.cuh) */
    memcpy_gbs = bl_memcpy_gbs(cbuf, gbuf, 4 * (size_t)n, st, reps);
    copy_best = bl_copy_best(cbuf, gbuf, 4 * (size_t)n, st, reps);
    read_best = bl_read_best(gbuf, 4 * (size_t)n, red, st, reps);
    memcpy_f_gbs = bl_memcpy_gbs(fcopy, fbuf, GB_FLAT_BYTES, st, reps);
    copy_f_best = bl_copy_best(fcopy, fbuf, GB_FLAT_BYTES, st, reps);
    read_f_best = bl_read_best(fbuf, GB_FLAT_BYTES, red, st, reps);
    GB_CK(cudaStreamSynchronize(st));
    /* accel */
    /* unscale: an update between calls (not timed); two scalers alternate 2 and 0.5 so the data stays put */
    t_un = 1e30;
    for (i = 0; i < 2 * reps; ++i) {
        double t;
        k = i & 1;
        GB_TIME_BUSY(t, st, 1, ACK(accel_amp_unscale_and_check(&sc[k], g, GB_NT, &found)));
        ACK(accel_amp_update(&sc[k]));
        if (found) { fprintf(stderr, "unexpected found_inf\n"); return 1; }
        if (t < t_un) t_un = t;
    }
    t_un_f = 1e30;
    for (i = 0; i < 2 * reps; ++i) {
        double t;
        k = i & 1;
        GB_TIME_BUSY(t, st, 1, ACK(accel_amp_unscale_and_check(&sc[k], &flat, 1, &found)));
        ACK(accel_amp_update(&sc[k]));
        if (t < t_un_f) t_un_f = t;
    }
    GB_TIME_BATCH(t_bf, st, 3, reps, ACK(accel_amp_convert(&acc, gbuf, ACCEL_F32, h16, ACCEL_BF16, (size_t)n, NULL)));
    GB_TIME_BATCH(t_bf_f, st, 3, reps, ACK(accel_amp_convert(&acc, fbuf, ACCEL_F32, hflat, ACCEL_BF16, nf, NULL)));
    GB_TIME_BATCH(t_fp16, st, 3, reps, ACK(accel_amp_convert(&acc, gbuf, ACCEL_F32, h16, ACCEL_F16, (size_t)n, NULL)));
    GB_TIME_BATCH(t_sr, st, 3, reps,
                  { ++sr.step; ACK(accel_amp_master_to_model(&acc, gbuf, h16, ACCEL_BF16, (size_t)n, &sr)); });
    GB_TIME_BUSY(t_norm, st, reps, ACK(accel_amp_grad_norm(&acc, g, GB_NT, 2.0, 0, &norm)));
    GB_TIME_BUSY(t_clip, st, reps, ACK(accel_amp_clip_grad_norm(&acc, g, GB_NT, 1e30, 2.0, 0, &norm)));

    snprintf(args, sizeof args, "%d", reps);
    have_peer = gb_run_peer(peer_py, args, peer, sizeof peer);
    {
        double nb = (double)n;
        double copy_gbs = copy_best.gbs > memcpy_gbs ? copy_best.gbs : memcpy_gbs;
        double copy_f_gbs = copy_f_best.gbs > memcpy_f_gbs ? copy_f_best.gbs : memcpy_f_gbs;
        double red_gbs = read_best.gbs;
        double clip_limit_s = 4.0 * nb * 1e-9 / red_gbs + 8.0 * nb * 1e-9 / copy_gbs; /* a read pass + a copy pass */
        const char *ln = "\"tensors\": 148, \"elements\": 124439808, \"shapes\": \"GPT-2 124M gradients\"";
        const char *cn = "copy limit: max(cudaMemcpyAsync D2D, 16-byte copy kernel)";
        bl_print_limits("\"bytes\": 497759232, \"shapes\": \"the GPT-2 list's storage\"", gb_device_name(), memcpy_gbs,
                        copy_best, read_best);
        bl_print_limits("\"bytes\": 1073741824", gb_device_name(), memcpy_f_gbs, copy_f_best, read_f_best);
        snprintf(prm, sizeof prm, "%s, \"counted\": \"8 B/element; copy 8\", \"timed\": \"behind GPU work\"", ln);
        gb_line("unscale_and_check_gpu", prm, "GB/s", 8.0 * nb * 1e-9 / t_un, copy_gbs, cn, 0.95);
        snprintf(prm, sizeof prm, "\"tensors\": 1, \"bytes\": %zu, \"counted\": \"8 B/element; copy 8\", "
                 "\"timed\": \"behind GPU work\"", GB_FLAT_BYTES);
        gb_line("unscale_and_check_gpu", prm, "GB/s", 8.0 * nf * 1e-9 / t_un_f, copy_f_gbs, cn, 0.95);
        snprintf(prm, sizeof prm, "\"tensors\": 1, \"elements\": %lld, \"counted\": \"6 B/element; copy 8\", "
                 "\"timed\": \"back to back\"", (long long)n);
        gb_line("fp32_to_bf16_gpu", prm, "GB/s", 6.0 * nb * 1e-9 / t_bf, copy_gbs, cn, 0.97);
        gb_line("fp32_to_fp16_gpu", prm, "GB/s", 6.0 * nb * 1e-9 / t_fp16, copy_gbs, cn, 0.97);
        snprintf(prm, sizeof prm, "\"tensors\": 1, \"bytes\": %zu, \"counted\": \"6 B/element; copy 8\", \"timed\": "
                 "\"back to back\"", GB_FLAT_BYTES);
        gb_line("fp32_to_bf16_gpu", prm, "GB/s", 6.0 * nf * 1e-9 / t_bf_f, copy_f_gbs, cn, 0.97);
        snprintf(prm, sizeof prm, "\"tensors\": 1, \"elements\": %lld, \"counted\": \"6 B/element; copy 8\", "
                 "\"timed\": \"back to back\"", (long long)n);
        gb_line("master_to_model_bf16_sr_gpu", prm, "GB/s", 6.0 * nb * 1e-9 / t_sr, copy_gbs, cn, 0.95);
        snprintf(prm, sizeof prm, "%s, \"norm_type\": 2, \"counted\": \"4 B/element read\", "
                 "\"timed\": \"behind GPU work\"", ln);
        gb_line("grad_norm_gpu", prm, "GB/s", 4.0 * nb * 1e-9 / t_norm, red_gbs,
                "read limit: 16-byte sum-of-squares kernel", 0.90);
        snprintf(prm, sizeof prm, "%s, \"norm_type\": 2, \"counted\": \"12 B/element; limit = read pass + copy pass\", "
                 "\"timed\": \"behind GPU work\"", ln);
        gb_line("clip_grad_norm_gpu", prm, "GB/s", 12.0 * nb * 1e-9 / t_clip, 12.0 * nb * 1e-9 / clip_limit_s,
                "read limit + copy limit", 0.90);
        if (have_peer) {
            struct { const char *bench, *key, *name; double t, bytes_per; double goal; } rows[] = {
                {"unscale_and_check_gpu", "unscale_s", "torch._amp_foreach_non_finite_check_and_unscale_", t_un, 8, 1.0},
                {"fp32_to_bf16_gpu", "bf16_s", "Tensor.copy_ (fp32 -> bf16)", t_bf, 6, 1.0},
                {"fp32_to_fp16_gpu", "fp16_s", "Tensor.copy_ (fp32 -> fp16)", t_fp16, 6, 1.0},
                {"grad_norm_gpu", "norm_s", "torch.nn.utils.get_total_norm(foreach=True)", t_norm, 4, 1.0},
                {"clip_grad_norm_gpu", "clip_s", "torch.nn.utils.clip_grad_norm_(foreach=True)", t_clip, 12, 1.0},
            };
            char ver[64] = "?";
            const char *v = strstr(peer, "\"torch\": \"");
            if (v) { snprintf(ver, sizeof ver, "%s", v + 10); if (strchr(ver, '"')) *strchr(ver, '"') = 0; }
            for (i = 0; i < (int)(sizeof rows / sizeof rows[0]); ++i) {
                double tt = gb_json_num(peer, rows[i].key);
                if (tt <= 0) continue;
                snprintf(prm, sizeof prm, "%s, \"torch\": \"%s\"", i == 1 || i == 2 ? "\"tensors\": 1, \"elements\": 124439808" : ln, ver);
                gb_line(rows[i].bench, prm, "GB/s", rows[i].bytes_per * nb * 1e-9 / rows[i].t,
                        rows[i].bytes_per * nb * 1e-9 / tt, rows[i].name, rows[i].goal);
            }
            {
                double tt = gb_json_num(peer, "bf16_flat_s");
                if (tt > 0) {
                    snprintf(prm, sizeof prm, "\"tensors\": 1, \"bytes\": %zu, \"torch\": \"%s\"", GB_FLAT_BYTES, ver);
                    gb_line("fp32_to_bf16_gpu", prm, "GB/s", 6.0 * nf * 1e-9 / t_bf_f, 6.0 * nf * 1e-9 / tt,
                            "Tensor.copy_ (fp32 -> bf16)", 1.0);
                }
            }
        } else {
            fprintf(stderr, "bench_amp_gpu: no torch with CUDA (%s): the torch lines are skipped\n",
                    peer[0] ? peer : "no peer output");
        }
    }
    accel_amp_scaler_deinit(&sc[0]);
    accel_amp_scaler_deinit(&sc[1]);
    cudaFree(gbuf); cudaFree(cbuf); cudaFree(fbuf); cudaFree(fcopy); cudaFree(h16); cudaFree(hflat); cudaFree(red);
    accel_shutdown(&acc);
    return 0;
}
