/* Big-model placement throughput, every figure against a peer measured in this run (best of REPS):
     dispatch-cpu       accel_bm_dispatch_create of a sharded F32 checkpoint onto a cpu map (new host buffers,
                        pread) vs read() of the same shard files into as many newly malloc'd buffers (warm cache)
     dispatch-cpu-bf16  the same with dtype conversion to bf16 on load vs read() + a plain f32→bf16 loop (round to
                        nearest even, no NaN handling) over the same bytes
     fetch-disk         a layer-by-layer run (a matrix-vector product per layer) with every layer on "disk" through
                        the just-in-time fetch, with and without prefetch, vs the same run with the weights in memory
   Both sides of each comparison get their buffers from malloc; on glibc the mmap threshold is fixed at 64 KiB so that
   every large buffer is new memory on both sides (glibc's dynamic threshold otherwise hands one side recycled, already
   faulted-in heap pages and the other fresh ones: a factor of 4 either way that has nothing to do with the loader).
   Prints one JSON line per measurement.
     bench_bigmodel [LAYERS] [HIDDEN]   default 32 layers of 2048×2048 F32 (512 MiB); files under $ACCEL_BENCH_DIR
                                        (default: the cwd) */
#include "accel_safetensors.h"
#include "accel_bigmodel.h"
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#define REPS 3
static void die(const char *what) { fprintf(stderr, "bench_bigmodel: %s: %s\n", what, accel_last_error(NULL)); exit(1); }
static int g_l = 32, g_h = 2048;
static float **g_w;

static double read_files(const char *dir, void **bufs, size_t each) {
    double t0 = accel_now();
    int i;
    for (i = 0; i < g_l; ++i) { /* new buffers, as a loader allocates them (all freed first, as dispatch_destroy does) */
        free(bufs[i]);
        bufs[i] = NULL;
    }
    for (i = 0; i < g_l; ++i)
        if (!(bufs[i] = malloc(each))) die("malloc");
    for (i = 0; i < g_l; ++i) {
        char p[1024];
        int fd;
        size_t done = 0;
        snprintf(p, sizeof p, "%s/model-%05d-of-%05d.safetensors", dir, i + 1, g_l);
        fd = open(p, O_RDONLY);
        if (fd < 0) die(p);
        while (done < each) {
            ssize_t r = read(fd, (char *)bufs[i] + done, each - done);
            if (r <= 0) break;
            done += (size_t)r;
        }
        close(fd);
    }
    return accel_now() - t0;
}
static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
static void matvec(const float *w, const float *x, float *y) {
    int i, k;
    for (i = 0; i < g_h; ++i) {
        float s = 0;
        for (k = 0; k < g_h; ++k) s += w[(size_t)i * g_h + k] * x[k];
        y[i] = s / (float)g_h;
    }
}

int main(int argc, char **argv) {
    const char *root = getenv("ACCEL_BENCH_DIR");
    char dir[1024], lname[256][24], tname[256][32];
    const char *layers[256];
    accel_tensor t[256];
    accel_bm_model *m = NULL;
    accel_bm_placement all;
    accel_bm_dispatch_desc dd;
    size_t each, nb;
    void **bufs;
    float *x, *y;
    double best[8];
    int i, r;
#ifdef __GLIBC__
    mallopt(M_MMAP_THRESHOLD, 64 * 1024);
#endif
    if (argc > 1) g_l = atoi(argv[1]);
    if (argc > 2) g_h = atoi(argv[2]);
    if (g_l < 2 || g_l > 256 || g_h < 16) { fprintf(stderr, "usage: bench_bigmodel [LAYERS<=256] [HIDDEN]\n"); return 2; }
    each = (size_t)g_h * g_h * sizeof(float);
    nb = each * (size_t)g_l;
    snprintf(dir, sizeof dir, "%s/accel_bench_bigmodel", root && *root ? root : ".");
    g_w = (float **)malloc(sizeof(float *) * (size_t)g_l);
    bufs = (void **)malloc(sizeof(void *) * (size_t)g_l);
    x = (float *)malloc(sizeof(float) * (size_t)g_h);
    y = (float *)malloc(sizeof(float) * (size_t)g_h);
    if (accel_bm_model_create(NULL, NULL, &m) != ACCEL_OK) die("model");
    if (accel_bm_model_add_module(m, "layers", "ModuleList") != ACCEL_OK) die("model");
    for (i = 0; i < g_l; ++i) {
        size_t k;
        g_w[i] = (float *)malloc(each);
        bufs[i] = malloc(each + 4096);
        for (k = 0; k < (size_t)g_h * g_h; ++k) g_w[i][k] = (float)((k * 2654435761u + (size_t)i) % 1000) / 1000.0f - 0.5f;
        snprintf(lname[i], sizeof lname[i], "layers.%d", i);
        snprintf(tname[i], sizeof tname[i], "layers.%d.weight", i);
        layers[i] = lname[i];
        memset(&t[i], 0, sizeof t[i]);
        t[i].name = tname[i];
        t[i].dtype = ACCEL_F32;
        t[i].ndim = 2;
        t[i].shape[0] = t[i].shape[1] = g_h;
        t[i].ptr = g_w[i];
        if (accel_bm_model_add_module(m, lname[i], "Linear") != ACCEL_OK || accel_bm_model_add_tensor(m, &t[i], 0) != ACCEL_OK) die("model");
    }
    {   /* one tensor per shard */
        char max[32];
        snprintf(max, sizeof max, "%zu", each);
        if (accel_st_save_model(NULL, dir, t, g_l, max) != ACCEL_OK) die("save_model");
    }
    all.name = "";
    all.device = ACCEL_BM_CPU;
    memset(&dd, 0, sizeof dd);
    dd.checkpoint = dir;
    dd.device_map = &all;
    dd.n_device_map = 1;
    for (i = 0; i < 8; ++i) best[i] = 1e30;
    (void)read_files(dir, bufs, each + 4096); /* warm the page cache */
    for (r = 0; r < REPS; ++r) {
        accel_bm_dispatch *xd = NULL;
        double t0, tt;
        size_t k;
        int l;
        tt = read_files(dir, bufs, each + 4096);
        if (tt < best[0]) best[0] = tt;
        t0 = accel_now();
        dd.dtype = ACCEL_DTYPE_INVALID;
        if (accel_bm_dispatch_create(m, &dd, &xd) != ACCEL_OK) die("dispatch");
        tt = accel_now() - t0;
        if (tt < best[1]) best[1] = tt;
        accel_bm_dispatch_destroy(xd);
        /* bf16 on load vs read + convert */
        t0 = accel_now();
        (void)read_files(dir, bufs, each + 4096);
        for (l = 0; l < g_l; ++l) {
            uint16_t *o = (uint16_t *)g_w[l]; /* scratch: g_w is rewritten below */
            const float *src = (const float *)((char *)bufs[l] + 4096); /* as many floats (the header's length aside) */
            for (k = 0; k < (size_t)g_h * g_h; ++k) o[k] = to_bf16(src[k]);
        }
        tt = accel_now() - t0;
        if (tt < best[2]) best[2] = tt;
        t0 = accel_now();
        dd.dtype = ACCEL_BF16;
        if (accel_bm_dispatch_create(m, &dd, &xd) != ACCEL_OK) die("dispatch bf16");
        tt = accel_now() - t0;
        if (tt < best[3]) best[3] = tt;
        accel_bm_dispatch_destroy(xd);
    }
    /* layer by layer: weights in memory vs all on disk through the fetch */
    {
        accel_bm_placement disk;
        accel_bm_dispatch *xd = NULL;
        int mode;
        for (i = 0; i < g_l; ++i) { /* restore the weights the bf16 scratch overwrote */
            size_t k;
            for (k = 0; k < (size_t)g_h * g_h; ++k) g_w[i][k] = (float)((k * 2654435761u + (size_t)i) % 1000) / 1000.0f - 0.5f;
        }
        disk.name = "";
        disk.device = ACCEL_BM_DISK;
        dd.device_map = &disk;
        dd.dtype = ACCEL_DTYPE_INVALID;
        if (accel_bm_dispatch_create(m, &dd, &xd) != ACCEL_OK) die("dispatch disk");
        for (r = 0; r < REPS; ++r)
            for (mode = 0; mode < 3; ++mode) {
                double t0 = accel_now(), tt;
                accel_bm_fetch *f = NULL;
                accel_bm_fetch_desc fd;
                for (i = 0; i < g_h; ++i) x[i] = 1.0f;
                if (mode > 0) {
                    memset(&fd, 0, sizeof fd);
                    fd.layers = layers;
                    fd.n_layers = g_l;
                    fd.device = ACCEL_BM_CPU;
                    fd.no_prefetch = mode == 2;
                    if (accel_bm_fetch_create(xd, &fd, &f) != ACCEL_OK) die("fetch");
                }
                for (i = 0; i < g_l; ++i) {
                    const float *w = g_w[i];
                    if (f) {
                        const accel_tensor *lt;
                        int n;
                        if (accel_bm_fetch_begin(f, i, &lt, &n) != ACCEL_OK) die("fetch_begin");
                        w = (const float *)lt[0].ptr;
                    }
                    matvec(w, x, y);
                    memcpy(x, y, sizeof(float) * (size_t)g_h);
                    if (f && accel_bm_fetch_end(f, i) != ACCEL_OK) die("fetch_end");
                }
                accel_bm_fetch_destroy(f);
                tt = accel_now() - t0;
                if (tt < best[4 + mode]) best[4 + mode] = tt;
            }
        accel_bm_dispatch_destroy(xd);
    }
    printf("{\"bench\": \"dispatch-cpu\", \"bytes\": %zu, \"accel_s\": %.4f, \"read_s\": %.4f, \"accel_GBps\": %.2f, \"ratio_vs_read\": %.2f}\n",
           nb, best[1], best[0], nb / best[1] / 1e9, best[0] / best[1]);
    printf("{\"bench\": \"dispatch-cpu-bf16\", \"bytes\": %zu, \"accel_s\": %.4f, \"read_convert_s\": %.4f, \"ratio_vs_read_convert\": %.2f}\n",
           nb, best[3], best[2], best[2] / best[3]);
    printf("{\"bench\": \"fetch-disk\", \"layers\": %d, \"hidden\": %d, \"in_memory_s\": %.4f, \"prefetch_s\": %.4f, \"no_prefetch_s\": %.4f, "
           "\"prefetch_over_in_memory\": %.3f, \"no_prefetch_over_in_memory\": %.3f}\n",
           g_l, g_h, best[4], best[5], best[6], best[5] / best[4], best[6] / best[4]);
    {
        char cmd[1100];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) fprintf(stderr, "rm failed\n");
    }
    accel_bm_model_destroy(m);
    for (i = 0; i < g_l; ++i) { free(g_w[i]); free(bufs[i]); }
    free(g_w); free(bufs); free(x); free(y);
    return 0;
}
