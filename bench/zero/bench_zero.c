/* ZeRO-2 (and ZeRO-1) step time and per-rank memory vs the unsharded step (the reducer's all-reduce + one AdamW over
   the whole list), same run, same process count. A GPT-2-shaped list at half width (48 tensors, 21.2 M fp32
   parameters). Per-rank memory: "state+comm" = the bytes this rank allocated for the step (optimizer state and
   communication buffers, counted through the host allocator hooks, the largest over the ranks); "total" adds the
   full parameters and gradients every rank holds in every mode (2 x 4 N bytes).
   usage: mpirun -np P bench_zero [steps]   (prints a table on rank 0 and JSON lines, DESIGN.md → Testing) */
#include "accel.h"
#include "accel_collectives.h"
#include "accel_ddp.h"
#include "accel_zero.h"
#include "accel_optim.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long long live_bytes;
static void *count_alloc(size_t n, void *u) {
    size_t *p = (size_t *)malloc(n + 16);
    (void)u;
    if (!p) return NULL;
    p[0] = n;
    live_bytes += (long long)n;
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

#define NT 48
static accel acc;
static accel_tensor params[NT], grads[NT];
static float *pbuf, *gbuf;
static int64_t N;

static void fill_grads(int step) {
    int64_t e;
    for (e = 0; e < N; ++e) gbuf[e] = (float)(1e-3 * sin(0.001 * (double)e + 0.5 * acc.process_index + step));
}
static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
#define CK(call) do { accel_result r_ = (call); if (r_ != ACCEL_OK) { fprintf(stderr, "%s: %s\n", #call, accel_last_error(&acc)); exit(1); } } while (0)

/* median seconds per step of `mode` (0 unsharded, 1 ZeRO-1, 2 ZeRO-2) and the bytes it allocated */
static double run(accel_coll *c, int mode, int steps, long long *bytes) {
    accel_ddp *red = NULL;
    accel_zero *z = NULL;
    accel_optim *opt = NULL;
    accel_optim_desc od;
    accel_tensor vp[NT], vg[NT];
    double *t = (double *)calloc((size_t)steps, sizeof(double)), med;
    long long before = live_bytes;
    int s, i;
    memset(&od, 0, sizeof od);
    od.lr = 1e-4;
    od.nparams = NT;
    if (mode == 0) {
        CK(accel_ddp_create(c, NULL, &red));
        CK(accel_ddp_add(red, grads, NT));
        CK(accel_ddp_finalize(red));
        od.params = params; od.grads = grads;
    } else {
        accel_zero_desc zd;
        memset(&zd, 0, sizeof zd);
        zd.stage = mode; zd.params = params; zd.grads = grads; zd.n = NT;
        CK(accel_zero_create(c, &zd, &z));
        CK(accel_zero_views(z, params, NT, vp));
        CK(accel_zero_grad_views(z, vg, NT));
        od.params = vp; od.grads = vg; od.index_offset = (uint64_t)accel_zero_get_partition(z)->begin;
    }
    CK(accel_optim_create(&acc, &od, &opt));
    for (s = -2; s < steps; ++s) { /* two warm-up steps (the gather staging is allocated by the first) */
        double t0;
        fill_grads(s);
        accel_wait_for_everyone(&acc);
        t0 = accel_now();
        for (i = NT - 1; i >= 0; --i) CK(mode == 0 ? accel_ddp_grad_ready(red, i) : accel_zero_grad_ready(z, i));
        CK(mode == 0 ? accel_ddp_wait(red) : accel_zero_wait(z));
        CK(accel_optim_step(opt, NULL));
        if (mode) CK(accel_zero_gather(z, params, NT));
        if (s >= 0) t[s] = accel_now() - t0;
    }
    *bytes = live_bytes - before;
    CK(accel_host_allreduce_f64(&acc, t, steps, ACCEL_HOST_MAX)); /* the slowest rank per step */
    qsort(t, (size_t)steps, sizeof(double), cmp_d);
    med = t[steps / 2];
    accel_optim_destroy(opt);
    accel_zero_destroy(z);
    accel_ddp_destroy(red);
    free(t);
    return med;
}

int main(int argc, char **argv) {
    accel_desc d;
    accel_coll *c;
    int steps = argc > 1 ? atoi(argv[1]) : 10, i, m;
    int64_t off = 0;
    double sec[3];
    long long bytes[3], maxb[3];
    static const char *names[3] = {"unsharded (reducer + AdamW)", "ZeRO-1", "ZeRO-2"};
    memset(&d, 0, sizeof d);
    d.cpu = 1;
    d.host_allocator.alloc = count_alloc;
    d.host_allocator.free = count_free;
    if (accel_init(&acc, &d) != ACCEL_OK) { fprintf(stderr, "accel_init: %s\n", accel_last_error(&acc)); return 1; }
    if (steps < 1) steps = 1;
    /* 4 kinds per "layer" x 12 layers: 768x2304, 768x768, 768x3072, 3072x768 scaled by 1/2 per dim */
    for (i = 0; i < NT; ++i) {
        static const int64_t shp[4][2] = {{384, 1152}, {384, 384}, {384, 1536}, {1536, 384}};
        N += shp[i % 4][0] * shp[i % 4][1];
    }
    pbuf = (float *)calloc((size_t)N, 4);
    gbuf = (float *)calloc((size_t)N, 4);
    for (i = 0; i < NT; ++i) {
        static const int64_t shp[4][2] = {{384, 1152}, {384, 384}, {384, 1536}, {1536, 384}};
        memset(&params[i], 0, sizeof params[i]);
        params[i].name = "p"; params[i].dtype = ACCEL_F32; params[i].ndim = 2;
        params[i].shape[0] = shp[i % 4][0]; params[i].shape[1] = shp[i % 4][1];
        params[i].ptr = pbuf + off;
        grads[i] = params[i];
        grads[i].ptr = gbuf + off;
        off += shp[i % 4][0] * shp[i % 4][1];
    }
    CK(accel_coll_create(&acc, NULL, &c));
    for (m = 0; m < 3; ++m) {
        double b;
        sec[m] = run(c, m, steps, &bytes[m]);
        b = (double)bytes[m];
        CK(accel_host_allreduce_f64(&acc, &b, 1, ACCEL_HOST_MAX));
        maxb[m] = (long long)b;
    }
    if (acc.is_main_process) {
        printf("ZeRO bench: %d process(es), %d tensors, %lld fp32 parameters (%.1f MiB), AdamW, median of %d steps\n",
               acc.num_processes, NT, (long long)N, (double)N * 4 / 1048576.0, steps);
        printf("%-28s %10s %8s %16s %8s %12s %8s\n", "mode", "step ms", "ratio", "state+comm MiB", "ratio", "total MiB",
               "ratio");
        for (m = 0; m < 3; ++m)
            printf("%-28s %10.2f %7.2fx %16.2f %7.3fx %12.2f %7.3fx\n", names[m], sec[m] * 1e3, sec[m] / sec[0],
                   (double)maxb[m] / 1048576.0, (double)maxb[m] / (double)maxb[0], (double)(maxb[m] + 8 * N) / 1048576.0,
                   (double)(maxb[m] + 8 * N) / (double)(maxb[0] + 8 * N));
        for (m = 1; m < 3; ++m) {
            printf("{\"bench\": \"zero%d-step\", \"params\": {\"np\": %d, \"elements\": %lld}, \"unit\": \"s\", \"accel\": %.6g, "
                   "\"reference\": %.6g, \"reference_name\": \"unsharded reducer + AdamW\", \"ratio\": %.4g, \"goal\": null}\n",
                   m, acc.num_processes, (long long)N, sec[m], sec[0], sec[0] / sec[m]);
            printf("{\"bench\": \"zero%d-memory\", \"params\": {\"np\": %d, \"elements\": %lld}, \"unit\": \"bytes\", \"accel\": %lld, "
                   "\"reference\": %lld, \"reference_name\": \"unsharded reducer + AdamW\", \"ratio\": %.4g, \"goal\": null}\n",
                   m, acc.num_processes, (long long)N, maxb[m], maxb[0], (double)maxb[0] / (double)maxb[m]);
        }
    }
    accel_coll_destroy(c);
    free(pbuf);
    free(gbuf);
    accel_shutdown(&acc);
    return 0;
}
