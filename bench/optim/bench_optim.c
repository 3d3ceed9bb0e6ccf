/* accel_optim CPU benchmark: one fused AdamW step over BYTES of fp32 parameters (default 256 MiB, as 64 tensors) with
   fp32 gradients, against (1) memcpy of BYTES in the same run — the memory-traffic bound: the step reads the parameter,
   gradient and both moments and writes the parameter and both moments, 28 bytes per parameter, a memcpy moves 2 × BYTES;
   (2) a loop with the step's access pattern and no arithmetic (4 streams read, 3 written); (3) torch.optim.AdamW
   (foreach=True) on the CPU, same sizes, same run (torch_peer.py). Best of REPS, interleaved.
   usage: bench_optim TORCH_PEER_PY [BYTES] [REPS]
   Built twice by meson: against the project's implementation TU (its default flags) and with its own
   ACCEL_IMPLEMENTATION TU compiled -O3 -march=native. */
#ifdef BENCH_OWN_IMPL
#define ACCEL_IMPLEMENTATION
#endif
#include "accel.h"
#include "accel_optim.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef BENCH_BUILD
#define BENCH_BUILD "default"
#endif
#define NT 64

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* the step's streams without its arithmetic */
static void same_pattern(float *p, const float *g, float *m, float *v, size_t n) {
    size_t i = 0, j;
    for (; i + 16 <= n; i += 16)
        for (j = 0; j < 16; ++j) {
            float x = g[i + j];
            p[i + j] += x; m[i + j] += x; v[i + j] += x;
        }
    for (; i < n; ++i) { p[i] += g[i]; m[i] += g[i]; v[i] += g[i]; }
}

static void line(const char *bench, size_t bytes, const char *unit, double a, double ref, const char *ref_name, double goal,
                 const char *extra) {
    printf("{\"bench\": \"%s\", \"params\": {\"bytes\": %zu, \"tensors\": %d, \"build\": \"%s\"%s}, \"unit\": \"%s\", "
           "\"accel\": %.4g, \"reference\": %.4g, \"reference_name\": \"%s\", \"ratio\": %.3f, \"goal\": %.1f}\n",
           bench, bytes, NT, BENCH_BUILD, extra, unit, a, ref, ref_name, a / ref, goal);
}

int main(int argc, char **argv) {
    size_t bytes = argc > 2 ? (size_t)strtoull(argv[2], NULL, 10) : ((size_t)256 << 20);
    int reps = argc > 3 ? atoi(argv[3]) : 5, r, i;
    size_t n = bytes / 4, per = n / NT, k;
    float *p, *g, *m2, *v2, *dst;
    double best_a = 1e30, best_m = 1e30, best_s = 1e30, t_torch = 0;
    accel acc;
    accel_desc d;
    accel_optim *opt = NULL;
    accel_optim_desc od;
    accel_tensor pt[NT], gt[NT];
    char torch_ver[64] = "", extra[200];
    int torch_threads = 0, have_torch = 0;
    memset(&d, 0, sizeof d);
    d.cpu = 1;
    d.no_mpi = 1;
    if (accel_init(&acc, &d) != ACCEL_OK) { fprintf(stderr, "%s\n", accel_last_error(&acc)); return 1; }
    n = per * NT;
    bytes = n * 4;
    p = (float *)malloc(bytes); g = (float *)malloc(bytes); dst = (float *)malloc(bytes);
    m2 = (float *)malloc(bytes); v2 = (float *)malloc(bytes);
    if (!p || !g || !dst || !m2 || !v2) { fprintf(stderr, "out of memory\n"); return 1; }
    for (k = 0; k < n; ++k) {
        p[k] = (float)((k * 2654435761u) & 0xffff) / 32768.0f - 1.0f;
        g[k] = (float)((k * 40503u) & 0xffff) / 3276800.0f - 0.01f;
    }
    memset(dst, 1, bytes); memset(m2, 0, bytes); memset(v2, 0, bytes);
    for (i = 0; i < NT; ++i) {
        memset(&pt[i], 0, sizeof pt[i]);
        pt[i].name = "w"; pt[i].ptr = p + (size_t)i * per; pt[i].dtype = ACCEL_F32; pt[i].ndim = 1; pt[i].shape[0] = (int64_t)per;
        gt[i] = pt[i]; gt[i].ptr = g + (size_t)i * per;
    }
    memset(&od, 0, sizeof od);
    od.lr = 1e-4; od.weight_decay = 0.1;
    od.params = pt; od.grads = gt; od.nparams = NT;
    if (accel_optim_create(&acc, &od, &opt) != ACCEL_OK) { fprintf(stderr, "%s\n", accel_last_error(&acc)); return 1; }
    accel_optim_step(opt, NULL); /* first touch of the moments */
    for (r = 0; r < reps; ++r) {
        double t0 = now();
        memcpy(dst, p, bytes);
        t0 = now() - t0;
        if (t0 < best_m) best_m = t0;
        t0 = now();
        if (accel_optim_step(opt, NULL) != ACCEL_OK) { fprintf(stderr, "%s\n", accel_last_error(&acc)); return 1; }
        t0 = now() - t0;
        if (t0 < best_a) best_a = t0;
        t0 = now();
        same_pattern(dst, g, m2, v2, n);
        t0 = now() - t0;
        if (t0 < best_s) best_s = t0;
    }
    if (dst[n / 3] == 12345.0f || m2[n / 7] == 12345.0f) printf("#\n"); /* keep the results alive */

    if (argc > 1) { /* PyTorch, same sizes, same run */
        char cmd[1024], out[512];
        FILE *pp;
        snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' %zu %d %d 2>/dev/null", argv[1], bytes, NT, reps);
        pp = popen(cmd, "r");
        if (pp) {
            if (fgets(out, sizeof out, pp)) {
                const char *a = strstr(out, "\"step_s\": "), *v = strstr(out, "\"torch\": \""), *th = strstr(out, "\"threads\": ");
                if (a) { t_torch = atof(a + 10); have_torch = t_torch > 0; }
                if (v) { size_t q = 0; v += 10; while (v[q] && v[q] != '"' && q < sizeof torch_ver - 1) { torch_ver[q] = v[q]; ++q; } torch_ver[q] = 0; }
                if (th) torch_threads = atoi(th + 11);
            }
            pclose(pp);
        }
    }
    {
        double a_gbs = 28.0 * (double)n * 1e-9 / best_a, m_gbs = 2.0 * (double)bytes * 1e-9 / best_m;
        double s_gbs = 28.0 * (double)n * 1e-9 / best_s;
        const char *cnt = ", \"counted\": \"bytes read + written: 28 per parameter; memcpy 2 x bytes\", \"accel_threads\": 1";
        line("adamw_step_cpu", bytes, "GB/s", a_gbs, m_gbs, "memcpy", 0.8, cnt);
        line("adamw_step_cpu", bytes, "GB/s", a_gbs, s_gbs, "same-pattern-loop", 0.8, cnt);
        if (have_torch) {
            snprintf(extra, sizeof extra, ", \"torch\": \"%s\", \"torch_threads\": %d, \"accel_threads\": 1", torch_ver,
                     torch_threads);
            line("adamw_step_cpu", bytes, "steps/s", 1.0 / best_a, 1.0 / t_torch, "torch.optim.AdamW(foreach=True)", 3.0, extra);
        } else {
            fprintf(stderr, "bench_optim: /usr/bin/python3 with torch not available: the torch line is skipped\n");
        }
    }
    accel_optim_destroy(opt);
    free(p); free(g); free(dst); free(m2); free(v2);
    accel_shutdown(&acc);
    return 0;
}
