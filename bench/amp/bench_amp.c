/* accel_amp CPU benchmark: unscale_and_check (in place, fp32) and fp32 → bf16 conversion over BYTES of fp32
   (default 256 MiB), against memcpy of the same bytes and PyTorch CPU doing the same job, all in the same run.
   Bandwidth counts bytes read + written by the job: unscale 2·B (read and write the buffer), fp32→bf16 1.5·B
   (read B, write B/2), memcpy of B bytes 2·B. Best of REPS runs each, interleaved. A third peer for the conversion
   is a loop with its access pattern and no arithmetic (read B, write B/2: the high half of every word), with plain
   stores (the goal line: accel's AVX2 cast streams outputs of 4 MiB and more past the caches, as memcpy does for
   large copies) and, for information, with streaming stores.
   usage: bench_amp TORCH_PEER_PY [BYTES] [REPS]
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

/* The access pattern of fp32 → 16-bit with no arithmetic: keep the high half of every word. A data-movement peer
   for the conversion (same bytes read, same bytes written), since a memcpy reads twice what it writes less. */
static void high_halves(const uint32_t *s, uint16_t *d, size_t n) {
    size_t i = 0, j;
    for (; i + 16 <= n; i += 16)
        for (j = 0; j < 16; ++j) d[i + j] = (uint16_t)(s[i + j] >> 16);
    for (; i < n; ++i) d[i] = (uint16_t)(s[i] >> 16);
}

#if defined(__x86_64__)
#include <emmintrin.h>
#define HAVE_NT_PEER 1
/* The same pattern with streaming (non-temporal) stores, as accel's AVX2 cast uses for outputs of 4 MiB and more:
   without it the plain-store peer pays a read of every destination line that accel does not (SSE2: baseline x86-64,
   no target attribute needed). */
static void high_halves_nt(const uint32_t *s, uint16_t *d, size_t n) {
    size_t i = 0;
    while (i < n && ((uintptr_t)(d + i) & 15u)) { d[i] = (uint16_t)(s[i] >> 16); ++i; }
    for (; i + 8 <= n; i += 8) {
        __m128i a = _mm_srai_epi32(_mm_loadu_si128((const __m128i *)(const void *)(s + i)), 16);
        __m128i b = _mm_srai_epi32(_mm_loadu_si128((const __m128i *)(const void *)(s + i + 4)), 16);
        _mm_stream_si128((__m128i *)(void *)(d + i), _mm_packs_epi32(a, b)); /* in range: no saturation */
    }
    _mm_sfence();
    for (; i < n; ++i) d[i] = (uint16_t)(s[i] >> 16);
}
#endif

static void line(const char *bench, size_t bytes, double accel_gbs, double ref_gbs, const char *ref_name, double goal,
                 const char *extra) {
    char g[32];
    if (goal > 0) snprintf(g, sizeof g, "%.2f", goal);
    else snprintf(g, sizeof g, "null"); /* information only */
    printf("{\"bench\": \"%s\", \"params\": {\"bytes\": %zu, \"build\": \"%s\", \"counted\": \"bytes read + written\"%s}, "
           "\"unit\": \"GB/s\", \"accel\": %.3f, \"reference\": %.3f, \"reference_name\": \"%s\", \"ratio\": %.3f, "
           "\"goal\": %s}\n",
           bench, bytes, BENCH_BUILD, extra, accel_gbs, ref_gbs, ref_name, accel_gbs / ref_gbs, g);
}

int main(int argc, char **argv) {
    size_t bytes = argc > 2 ? (size_t)strtoull(argv[2], NULL, 10) : ((size_t)256 << 20);
    int reps = argc > 3 ? atoi(argv[3]) : 7, r;
    size_t n = bytes / 4, i;
    float *g, *dst;
    uint16_t *h;
    double best_u = 1e30, best_b = 1e30, best_m = 1e30, best_h = 1e30, best_hn = 1e30, t_u_torch = 0, t_b_torch = 0;
    accel acc;
    accel_desc d;
    accel_amp_scaler sc[2];
    accel_amp_scaler_desc sd;
    accel_tensor t;
    char torch_ver[64] = "", extra[160];
    int torch_threads = 0, have_torch = 0;
    memset(&d, 0, sizeof d);
    d.cpu = 1;
    d.no_mpi = 1;
    d.mixed_precision = ACCEL_PRECISION_FP16;
    if (accel_init(&acc, &d) != ACCEL_OK) { fprintf(stderr, "%s\n", accel_last_error(&acc)); return 1; }
    g = (float *)malloc(bytes);
    dst = (float *)malloc(bytes);
    h = (uint16_t *)malloc(bytes / 2);
    if (!g || !dst || !h) { fprintf(stderr, "out of memory\n"); return 1; }
    for (i = 0; i < n; ++i) g[i] = (float)((i * 2654435761u) & 0xffff) / 32768.0f - 1.0f;
    memset(dst, 1, bytes);
    memset(h, 1, bytes / 2);
    memset(&sd, 0, sizeof sd);
    sd.init_scale = 0.5f; /* inv = 2 and 0.5 alternately: values stay normal */
    accel_amp_scaler_init(&acc, &sc[0], &sd);
    sd.init_scale = 2.0f;
    accel_amp_scaler_init(&acc, &sc[1], &sd);
    memset(&t, 0, sizeof t);
    t.ptr = g; t.dtype = ACCEL_F32; t.ndim = 1; t.shape[0] = (int64_t)n;
    for (r = 0; r < reps; ++r) {
        double t0;
        int found = 0;
        t0 = now();
        memcpy(dst, g, bytes);
        t0 = now() - t0;
        if (t0 < best_m) best_m = t0;
        t0 = now();
        if (accel_amp_unscale_and_check(&sc[r % 2], &t, 1, &found) != ACCEL_OK || found) {
            fprintf(stderr, "unscale failed: %s\n", accel_last_error(&acc));
            return 1;
        }
        t0 = now() - t0;
        accel_amp_update(&sc[r % 2]);
        if (t0 < best_u) best_u = t0;
        t0 = now();
        accel_amp_convert(&acc, g, ACCEL_F32, h, ACCEL_BF16, n, NULL);
        t0 = now() - t0;
        if (t0 < best_b) best_b = t0;
        t0 = now();
        high_halves((const uint32_t *)(const void *)dst, h, n);
        t0 = now() - t0;
        if (t0 < best_h) best_h = t0;
#ifdef HAVE_NT_PEER
        t0 = now();
        high_halves_nt((const uint32_t *)(const void *)dst, h, n);
        t0 = now() - t0;
        if (t0 < best_hn) best_hn = t0;
#endif
    }
    if (dst[n / 3] == 12345.0f || h[n / 5] == 1) printf("#\n"); /* keep the results alive */

    /* PyTorch, same sizes, same run */
    if (argc > 1) {
        char cmd[1024], out[512];
        FILE *p;
        snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' %zu %d 2>/dev/null", argv[1], bytes, reps);
        p = popen(cmd, "r");
        if (p) {
            if (fgets(out, sizeof out, p)) {
                const char *a = strstr(out, "\"unscale_s\": "), *b = strstr(out, "\"bf16_s\": "), *v = strstr(out, "\"torch\": \"");
                const char *th = strstr(out, "\"threads\": ");
                if (a && b) {
                    t_u_torch = atof(a + 13);
                    t_b_torch = atof(b + 10);
                    have_torch = t_u_torch > 0 && t_b_torch > 0;
                }
                if (v) { size_t k = 0; v += 10; while (v[k] && v[k] != '"' && k < sizeof torch_ver - 1) { torch_ver[k] = v[k]; ++k; } torch_ver[k] = 0; }
                if (th) torch_threads = atoi(th + 11);
            }
            pclose(p);
        }
    }

    {
        double gb = 1e-9;
        double m_gbs = 2.0 * (double)bytes * gb / best_m;
        double u_gbs = 2.0 * (double)bytes * gb / best_u;
        double b_gbs = 1.5 * (double)bytes * gb / best_b;
        line("unscale_and_check", bytes, u_gbs, m_gbs, "memcpy", 0.9, "");
        line("f32_to_bf16", bytes, b_gbs, m_gbs, "memcpy", 0.9, "");
        line("f32_to_bf16", bytes, b_gbs, 1.5 * (double)bytes * gb / best_h, "same-pattern-copy", 0.95, "");
        if (best_hn < 1e30) /* information: the pattern with the store kind accel uses for this size */
            line("f32_to_bf16", bytes, b_gbs, 1.5 * (double)bytes * gb / best_hn, "same-pattern-copy-streaming", 0.0, "");
        if (have_torch) {
            snprintf(extra, sizeof extra, ", \"torch\": \"%s\", \"torch_threads\": %d, \"accel_threads\": 1", torch_ver, torch_threads);
            line("unscale_and_check", bytes, u_gbs, 2.0 * (double)bytes * gb / t_u_torch, "torch-cpu", 2.0, extra);
            line("f32_to_bf16", bytes, b_gbs, 1.5 * (double)bytes * gb / t_b_torch, "torch-cpu", 2.0, extra);
        } else {
            fprintf(stderr, "bench_amp: /usr/bin/python3 with torch not available: torch lines skipped\n");
        }
    }
    free(g); free(dst); free(h);
    accel_shutdown(&acc);
    return 0;
}
