/* accel_amp fp8 CPU benchmark: the fused cast + amax (accel_amp_fp8_quantize, fp32 → E4M3 with a scale, the amax
   recorded) over BYTES of fp32 (default 256 MiB), against memcpy of the bytes it moves, in the same run. Bandwidth
   counts bytes read + written: the cast reads B and writes B/4 (1.25·B); a memcpy of 0.625·B bytes moves the same
   1.25·B. A second peer has the cast's access pattern and no arithmetic (read B, write B/4: the top byte of every
   word). The reverse (dequantize E4M3 → fp32, 1.25·B) is measured too, against the same memcpy. Best of REPS runs
   each, interleaved. (The CPU PyTorch of this machine, 1.13, has no float8 dtype: no torch peer here; the GPU
   benchmark has one.)
   usage: bench_fp8 [BYTES] [REPS]
   Built twice by meson: against the project's implementation TU (its default flags) and with BENCH_OWN_IMPL, a TU
   of its own compiled -O3 -march=native. */
#ifdef BENCH_OWN_IMPL
#define ACCEL_IMPLEMENTATION
#endif
#include "accel.h"
#include "accel_amp.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef BENCH_BUILD
#define BENCH_BUILD "default"
#endif

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* the cast's access pattern without its arithmetic: keep the top byte of every word */
static void top_bytes(const uint32_t *s, uint8_t *d, size_t n) {
    size_t i = 0, j;
    for (; i + 16 <= n; i += 16)
        for (j = 0; j < 16; ++j) d[i + j] = (uint8_t)(s[i + j] >> 24);
    for (; i < n; ++i) d[i] = (uint8_t)(s[i] >> 24);
}

static void line(const char *bench, size_t bytes, double accel_gbs, double ref_gbs, const char *ref_name, double goal) {
    printf("{\"bench\": \"%s\", \"params\": {\"bytes\": %zu, \"build\": \"%s\", \"counted\": \"bytes read + written\", "
           "\"threads\": 1}, \"unit\": \"GB/s\", \"accel\": %.3f, \"reference\": %.3f, \"reference_name\": \"%s\", "
           "\"ratio\": %.3f, \"goal\": %.1f}\n",
           bench, bytes, BENCH_BUILD, accel_gbs, ref_gbs, ref_name, accel_gbs / ref_gbs, goal);
}

int main(int argc, char **argv) {
    size_t bytes = argc > 1 ? (size_t)strtoull(argv[1], NULL, 10) : ((size_t)256 << 20);
    int reps = argc > 2 ? atoi(argv[2]) : 7, r;
    size_t n = bytes / 4, i, cbytes = (bytes / 8) * 5; /* a memcpy moving what the cast moves (2 x 0.625 B) */
    float *x, *back;
    uint8_t *q, *q2, *msrc, *mdst;
    double best_q = 1e30, best_d = 1e30, best_m = 1e30, best_t = 1e30, moved = 1.25 * (double)bytes * 1e-9;
    accel acc;
    accel_desc d;
    accel_amp_fp8 f;
    accel_amp_fp8_desc fd;
    accel_tensor ts, tq, tb;
    memset(&d, 0, sizeof d);
    d.cpu = 1;
    d.no_mpi = 1;
    d.mixed_precision = ACCEL_PRECISION_FP8;
    if (accel_init(&acc, &d) != ACCEL_OK) { fprintf(stderr, "%s\n", accel_last_error(&acc)); return 1; }
    memset(&fd, 0, sizeof fd);
    fd.num_forward = 1;
    if (accel_amp_fp8_init(&acc, &f, &fd) != ACCEL_OK) { fprintf(stderr, "%s\n", accel_last_error(&acc)); return 1; }
    x = (float *)malloc(bytes);
    back = (float *)malloc(bytes);
    q = (uint8_t *)malloc(n);
    q2 = (uint8_t *)malloc(n);
    msrc = (uint8_t *)malloc(cbytes);
    mdst = (uint8_t *)malloc(cbytes);
    if (!x || !back || !q || !q2 || !msrc || !mdst) { fprintf(stderr, "out of memory\n"); return 1; }
    for (i = 0; i < n; ++i) x[i] = (float)((i * 2654435761u) & 0xffff) / 16384.0f - 2.0f;
    memset(back, 1, bytes);
    memset(q, 1, n);
    memset(q2, 1, n);
    memset(msrc, 2, cbytes);
    memset(mdst, 3, cbytes);
    memset(&ts, 0, sizeof ts);
    ts.ptr = x; ts.dtype = ACCEL_F32; ts.ndim = 1; ts.shape[0] = (int64_t)n;
    tq = ts; tq.ptr = q; tq.dtype = ACCEL_F8_E4M3;
    tb = ts; tb.ptr = back;
    f.scale[0] = 100.0f; /* a scale that makes the values use the format's range */
    f.scale_inv[0] = 1.0f / 100.0f;
    for (r = 0; r < reps; ++r) {
        double t0 = now();
        memcpy(mdst, msrc, cbytes);
        t0 = now() - t0;
        if (t0 < best_m) best_m = t0;
        t0 = now();
        if (accel_amp_fp8_quantize(&f, NULL, &ts, &tq, 1) != ACCEL_OK) { fprintf(stderr, "%s\n", accel_last_error(&acc)); return 1; }
        t0 = now() - t0;
        if (t0 < best_q) best_q = t0;
        t0 = now();
        top_bytes((const uint32_t *)(const void *)x, q2, n);
        t0 = now() - t0;
        if (t0 < best_t) best_t = t0;
        t0 = now();
        if (accel_amp_fp8_dequantize(&f, NULL, &tq, &tb, 1) != ACCEL_OK) { fprintf(stderr, "%s\n", accel_last_error(&acc)); return 1; }
        t0 = now() - t0;
        if (t0 < best_d) best_d = t0;
    }
    if (f.amax_history[0] != 2.0f) { fprintf(stderr, "amax %g, expected 2\n", (double)f.amax_history[0]); return 1; }
    if (back[n / 3] == 12345.0f || mdst[cbytes / 5] == 7 || q2[n / 7] == 0xff) printf("#\n"); /* keep the results alive */
    line("fp8_cast_amax_e4m3", bytes, moved / best_q, moved / best_m, "memcpy", 0.8);
    line("fp8_cast_amax_e4m3", bytes, moved / best_q, moved / best_t, "same-pattern-copy", 0.8);
    line("fp8_dequantize_e4m3", bytes, moved / best_d, moved / best_m, "memcpy", 0.8);
    accel_amp_fp8_deinit(&f);
    free(x); free(back); free(q); free(q2); free(msrc); free(mdst);
    accel_shutdown(&acc);
    return 0;
}
