/* Checkpoint throughput: accel_ckpt vs plain write()+fsync / read() of the same bytes and vs torch.save/torch.load,
   all measured in this run (best of REPS, alternating order). Prints one JSON line per measurement.
     bench_ckpt [BYTES]   default 1 GiB in 16 F32 tensors; files go to $ACCEL_BENCH_DIR (default: the cwd)
   Load is compared like with like: both read into the same user buffers; "warm" = both files in the page cache,
   "cold" = both dropped from it with posix_fadvise(DONTNEED) after fsync (clean pages) right before reading. */
#include "accel_safetensors.h"
#include "accel_ckpt.h"
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NT 16
#define REPS 5

static void die(const char *what) { fprintf(stderr, "bench_ckpt: %s: %s\n", what, accel_last_error(NULL)); exit(1); }

static double ref_write(const char *path, void **bufs, size_t each) {
    double t0 = accel_now();
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644), i;
    if (fd < 0) die("open");
    for (i = 0; i < NT; ++i) {
        size_t done = 0;
        while (done < each) {
            ssize_t w = write(fd, (char *)bufs[i] + done, each - done);
            if (w <= 0) die("write");
            done += (size_t)w;
        }
    }
    if (fsync(fd) != 0) die("fsync");
    close(fd);
    return accel_now() - t0;
}
static double ref_read(const char *path, void **bufs, size_t each) {
    double t0 = accel_now();
    int fd = open(path, O_RDONLY), i;
    if (fd < 0) die("open");
    for (i = 0; i < NT; ++i) {
        size_t done = 0;
        while (done < each) {
            ssize_t r = read(fd, (char *)bufs[i] + done, each - done);
            if (r <= 0) die("read");
            done += (size_t)r;
        }
    }
    close(fd);
    return accel_now() - t0;
}
static void drop_cache(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return;
    fdatasync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
}
static double acc_load(const char *path, accel_tensor *dst) {
    double t0 = accel_now();
    accel_st_file *f = NULL;
    if (accel_st_file_open(NULL, path, &f) != ACCEL_OK) die("accel_st_file_open");
    if (accel_st_file_load_all(f, dst, NT) != ACCEL_OK) die("load_all");
    accel_st_file_destroy(f);
    return accel_now() - t0;
}
static void line(const char *bench, const char *params, double bytes, double t_acc, double t_ref, const char *ref_name, double goal) {
    double a = bytes / t_acc / 1e9, r = bytes / t_ref / 1e9;
    printf("{\"bench\": \"%s\", \"params\": {%s}, \"unit\": \"GB/s\", \"accel\": %.3f, \"reference\": %.3f, "
           "\"reference_name\": \"%s\", \"ratio\": %.3f, \"goal\": %.1f}\n", bench, params, a, r, ref_name, a / r, goal);
    fflush(stdout);
}
static double mn(double a, double b) { return a < b ? a : b; }

int main(int argc, char **argv) {
    size_t total = argc > 1 ? (size_t)strtoull(argv[1], NULL, 10) : ((size_t)1 << 30), each, k;
    const char *base = getenv("ACCEL_BENCH_DIR") ? getenv("ACCEL_BENCH_DIR") : ".";
    char dir[512], pa[700], pr[700], ps[700], pt[700], params[256], cmd[2000];
    void *src[NT], *dst[NT];
    accel_tensor ts[NT], td[NT];
    static char names[NT][16];
    double ta_s = 1e9, tr_s = 1e9, ta_lw = 1e9, tr_lw = 1e9, ta_lc = 1e9, tr_lc = 1e9, ts_s = 1e9, ts_l = 1e9, tr_s2 = 1e9, tr_l2 = 1e9;
    int i, rep;
    accel acc;
    accel_desc d;
    accel_ckpt *ck = NULL;
    FILE *py;
    each = total / NT / 4 * 4;
    total = each * NT;
    snprintf(dir, sizeof dir, "%s/accel_bench_ckpt_XXXXXX", base);
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    snprintf(pa, sizeof pa, "%s/accel.safetensors", dir);
    snprintf(pr, sizeof pr, "%s/plain.bin", dir);
    snprintf(ps, sizeof ps, "%s/state", dir);
    snprintf(pt, sizeof pt, "%s/torch.pt", dir);
    for (i = 0; i < NT; ++i) {
        src[i] = malloc(each);
        dst[i] = malloc(each);
        if (!src[i] || !dst[i]) die("malloc");
        for (k = 0; k < each / 4; ++k) ((float *)src[i])[k] = (float)(k * 7 + (size_t)i);
        memset(dst[i], 1, each); /* fault the pages in once, for both loaders */
        snprintf(names[i], sizeof names[i], "layer%02d.w", i);
        memset(&ts[i], 0, sizeof ts[i]);
        ts[i].name = names[i]; ts[i].dtype = ACCEL_F32; ts[i].ndim = 2; ts[i].shape[0] = (int64_t)(each / 4 / 1024);
        ts[i].shape[1] = 1024; ts[i].ptr = src[i];
        if ((size_t)ts[i].shape[0] * 1024 * 4 != each) { ts[i].ndim = 1; ts[i].shape[0] = (int64_t)(each / 4); }
        td[i] = ts[i];
        td[i].ptr = dst[i];
    }
    snprintf(params, sizeof params, "\"bytes\": %zu, \"tensors\": %d, \"fsync\": true", total, NT);
    for (rep = 0; rep < REPS; ++rep) { /* save: accel (tmp + fsync + rename + dir fsync) vs write()+fsync */
        double t0;
        if (rep & 1) tr_s = mn(tr_s, ref_write(pr, src, each));
        t0 = accel_now();
        if (accel_st_save(NULL, pa, ts, NT, NULL, 0) != ACCEL_OK) die("save");
        ta_s = mn(ta_s, accel_now() - t0);
        if (!(rep & 1)) tr_s = mn(tr_s, ref_write(pr, src, each));
    }
    line("ckpt_save_safetensors", params, (double)total, ta_s, tr_s, "write+fsync", 0.8);
    for (rep = 0; rep < REPS; ++rep) { /* warm load */
        ref_read(pr, dst, each);
        acc_load(pa, td);
        if (rep & 1) { ta_lw = mn(ta_lw, acc_load(pa, td)); tr_lw = mn(tr_lw, ref_read(pr, dst, each)); }
        else { tr_lw = mn(tr_lw, ref_read(pr, dst, each)); ta_lw = mn(ta_lw, acc_load(pa, td)); }
    }
    for (i = 0; i < NT; ++i)
        if (memcmp(src[i], dst[i], each)) die("loaded bytes differ");
    snprintf(params, sizeof params, "\"bytes\": %zu, \"tensors\": %d, \"page_cache\": \"warm\", \"into\": \"user buffers\"", total, NT);
    line("ckpt_load_safetensors", params, (double)total, ta_lw, tr_lw, "read", 0.9);
    for (rep = 0; rep < REPS; ++rep) { /* cold load */
        drop_cache(pa); drop_cache(pr);
        if (rep & 1) { ta_lc = mn(ta_lc, acc_load(pa, td)); drop_cache(pr); tr_lc = mn(tr_lc, ref_read(pr, dst, each)); }
        else { tr_lc = mn(tr_lc, ref_read(pr, dst, each)); drop_cache(pa); ta_lc = mn(ta_lc, acc_load(pa, td)); }
    }
    snprintf(params, sizeof params, "\"bytes\": %zu, \"tensors\": %d, \"page_cache\": \"cold\", \"into\": \"user buffers\"", total, NT);
    line("ckpt_load_safetensors", params, (double)total, ta_lc, tr_lc, "read", 0.9);

    /* save_state / load_state: the same bytes as one registered model, plus checksums and the marker */
    memset(&d, 0, sizeof d);
    d.no_mpi = 1;
    if (accel_init(&acc, &d) != ACCEL_OK) die("accel_init");
    if (accel_ckpt_create(&acc, NULL, &ck) != ACCEL_OK || accel_ckpt_register_model(ck, ts, NT) != ACCEL_OK) die("ckpt");
    for (rep = 0; rep < REPS; ++rep) { /* interleaved with its own reference measurements */
        double t0 = accel_now();
        if (accel_ckpt_save_state(ck, ps, NULL, 0) != ACCEL_OK) die("save_state");
        ts_s = mn(ts_s, accel_now() - t0);
        tr_s2 = mn(tr_s2, ref_write(pr, src, each));
    }
    accel_ckpt_destroy(ck);
    if (accel_ckpt_create(&acc, NULL, &ck) != ACCEL_OK || accel_ckpt_register_model(ck, td, NT) != ACCEL_OK) die("ckpt");
    for (rep = 0; rep < REPS; ++rep) {
        double t0 = accel_now();
        if (accel_ckpt_load_state(ck, ps) != ACCEL_OK) die("load_state");
        ts_l = mn(ts_l, accel_now() - t0);
        tr_l2 = mn(tr_l2, ref_read(pr, dst, each));
    }
    accel_ckpt_destroy(ck);
    accel_shutdown(&acc);
    snprintf(params, sizeof params, "\"bytes\": %zu, \"tensors\": %d, \"fsync\": true, \"checksums\": \"xxh64\"", total, NT);
    line("ckpt_save_state", params, (double)total, ts_s, tr_s2, "write+fsync", 0.8);
    snprintf(params, sizeof params, "\"bytes\": %zu, \"tensors\": %d, \"page_cache\": \"warm\", \"checksums\": \"verified\"", total, NT);
    line("ckpt_load_state", params, (double)total, ts_l, tr_l2, "read", 0.9);

    /* torch.save / torch.load of the same tensors, in this run (Debian's python3-torch under /usr/bin/python3) */
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 -c '\n"
             "import os, sys, time\n"
             "try:\n"
             "    import torch\n"
             "except Exception:\n"
             "    print(\"none\"); sys.exit(0)\n"
             "n, each, path = %d, %zu, sys.argv[1]\n"
             "sd = {\"layer%%02d.w\" %% i: (torch.arange(each // 4, dtype=torch.float32) * 7 + i) for i in range(n)}\n"
             "best_s = best_l = 1e9\n"
             "for rep in range(%d):\n"
             "    t0 = time.perf_counter()\n"
             "    with open(path, \"wb\") as f:\n"
             "        torch.save(sd, f); f.flush(); os.fsync(f.fileno())\n"
             "    best_s = min(best_s, time.perf_counter() - t0)\n"
             "    t0 = time.perf_counter()\n"
             "    back = torch.load(path, map_location=\"cpu\", weights_only=True)\n"
             "    best_l = min(best_l, time.perf_counter() - t0)\n"
             "    del back\n"
             "print(best_s, best_l)\n"
             "' '%s' 2>/dev/null",
             NT, each, REPS, pt);
    py = popen(cmd, "r");
    if (py) {
        double s = 0, l = 0;
        char out[256] = {0};
        if (fgets(out, sizeof out, py) && sscanf(out, "%lf %lf", &s, &l) == 2 && s > 0 && l > 0) {
            snprintf(params, sizeof params, "\"bytes\": %zu, \"tensors\": %d, \"fsync\": true", total, NT);
            line("ckpt_save_vs_torch", params, (double)total, ta_s, s, "torch.save+fsync", 2.0);
            snprintf(params, sizeof params, "\"bytes\": %zu, \"tensors\": %d, \"page_cache\": \"warm\"", total, NT);
            line("ckpt_load_vs_torch", params, (double)total, ta_lw, l, "torch.load", 2.0);
        } else {
            fprintf(stderr, "bench_ckpt: python3-torch not available under /usr/bin/python3: torch lines skipped\n");
        }
        pclose(py);
    }
    for (i = 0; i < NT; ++i) { free(src[i]); free(dst[i]); }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "cleanup of %s failed\n", dir);
    return 0;
}
