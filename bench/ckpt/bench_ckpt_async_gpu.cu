/* Async checkpoints from device memory (issue 32), GPU: GPT-2 124M + AdamW (params, exp_avg, exp_avg_sq: 3 x 148
   fp32 tensors, 1.49 GB) in device memory, saved with accel_ckpt_desc.async. The stall a training loop sees is
   save_state's return plus the snapshot's device-to-host copies on acc->stream (the next kernels on that stream queue
   behind them), so it is timed as save_state + cudaStreamSynchronize, against the same bytes copied by
   cudaMemcpyAsync into one pinned buffer (the copy at pinned bandwidth: the issue's floor) and against a synchronous
   save_state (async off), all in this run, best of REPS, host clock. Goal: stall <= 1.2 x the copy (ratio = copy /
   stall >= 0.83, higher is better as gpu_bench.h's gb_line has it for times). Files go to DIR (default $TMPDIR or
   /tmp), fsync'd. Exits 77 without a device.
     usage: bench_ckpt_async_gpu [REPS] [DIR] */
#include "accel.h"
#include "accel_ckpt.h"
#include "../gpu_bench.h"
#include <time.h>
#include <unistd.h>

static double wall(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void fail(accel *acc, const char *what) {
    fprintf(stderr, "bench_ckpt_async_gpu: %s: %s\n", what, accel_last_error(acc));
    exit(1);
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 3, i, g, r;
    const char *base = argc > 2 ? argv[2] : (getenv("TMPDIR") && getenv("TMPDIR")[0] ? getenv("TMPDIR") : "/tmp");
    int64_t sizes[GB_NT], n = gb_gpt2_sizes(sizes);
    static char names[3 * GB_NT][24];
    accel_tensor model[GB_NT], optim[2 * GB_NT];
    accel acc;
    accel_desc d;
    accel_ckpt *ca = NULL, *cs = NULL;
    accel_ckpt_desc cd;
    float *buf[3];
    unsigned char *pinned;
    char dir[512], pa[600], ps[600], prm[256], cmd[700];
    double bytes = 3.0 * 4.0 * (double)n, t_copy = 1e30, t_async = 1e30, t_sync = 1e30, t_ret = 1e30;
    cudaStream_t st;

    gb_need_device("bench_ckpt_async_gpu");
    if (reps < 1) reps = 1;
    snprintf(dir, sizeof dir, "%s/bench_ckpt_async_gpu.XXXXXX", base);
    if (!mkdtemp(dir)) { perror(dir); return 1; }
    snprintf(pa, sizeof pa, "%s/async", dir);
    snprintf(ps, sizeof ps, "%s/sync", dir);
    memset(&d, 0, sizeof d);
    d.no_mpi = 1;
    if (accel_init(&acc, &d) != ACCEL_OK || acc.device < 0) fail(&acc, "accel_init");
    st = (cudaStream_t)acc.stream;
    for (g = 0; g < 3; ++g) {
        GB_CK(cudaMalloc((void **)&buf[g], 4 * (size_t)n));
        gb_fill(buf[g], (size_t)n, 11u + (uint32_t)g, st);
    }
    GB_CK(cudaMallocHost((void **)&pinned, (size_t)bytes));
    memset(pinned, 1, (size_t)bytes);
    GB_CK(cudaStreamSynchronize(st));
    for (g = 0; g < 3; ++g) {
        int64_t off = 0;
        for (i = 0; i < GB_NT; ++i) {
            accel_tensor *t = g == 0 ? &model[i] : &optim[(g - 1) * GB_NT + i];
            char *nm = names[g * GB_NT + i];
            snprintf(nm, sizeof names[0], "%s%03d", g == 0 ? "w" : g == 1 ? "exp_avg." : "exp_avg_sq.", i);
            memset(t, 0, sizeof *t);
            t->name = nm; t->ptr = buf[g] + off; t->dtype = ACCEL_F32; t->ndim = 1; t->shape[0] = sizes[i];
            off += sizes[i];
        }
    }
    for (i = 0; i < 2; ++i) {
        accel_ckpt **ck = i ? &cs : &ca;
        memset(&cd, 0, sizeof cd);
        cd.project_dir = i ? ps : pa;
        cd.automatic_checkpoint_naming = 1;
        cd.total_limit = 1;
        cd.async = i ? ACCEL_OFF : ACCEL_ON;
        if (accel_ckpt_create(&acc, &cd, ck) != ACCEL_OK || accel_ckpt_register_model(*ck, model, GB_NT) != ACCEL_OK ||
            accel_ckpt_register_optimizer(*ck, optim, 2 * GB_NT) != ACCEL_OK)
            fail(&acc, "checkpointer");
    }
    /* the first async save makes the pinned snapshot (a run's first save does); not timed */
    if (accel_ckpt_save_state(ca, NULL, NULL, 0) != ACCEL_OK || accel_ckpt_wait(ca) != ACCEL_OK)
        fail(&acc, "first save");
    for (r = 0; r < reps; ++r) {
        double t0 = wall(), t1;
        size_t off = 0;
        for (g = 0; g < 3; ++g, off += 4 * (size_t)n)
            GB_CK(cudaMemcpyAsync(pinned + off, buf[g], 4 * (size_t)n, cudaMemcpyDeviceToHost, st));
        GB_CK(cudaStreamSynchronize(st));
        t0 = wall() - t0;
        if (t0 < t_copy) t_copy = t0;
        t0 = wall();
        if (accel_ckpt_save_state(ca, NULL, NULL, 0) != ACCEL_OK) fail(&acc, "async save");
        t1 = wall();
        GB_CK(cudaStreamSynchronize(st)); /* the snapshot's copies are on acc->stream: the loop waits for them */
        if (wall() - t0 < t_async) t_async = wall() - t0;
        if (t1 - t0 < t_ret) t_ret = t1 - t0;
        if (accel_ckpt_wait(ca) != ACCEL_OK) fail(&acc, "async wait");
        t0 = wall();
        if (accel_ckpt_save_state(cs, NULL, NULL, 0) != ACCEL_OK) fail(&acc, "sync save");
        t0 = wall() - t0;
        if (t0 < t_sync) t_sync = t0;
    }
    snprintf(prm, sizeof prm, "\"tensors\": %d, \"bytes\": %.0f, \"state\": \"GPT-2 124M + AdamW m, v (fp32)\", "
             "\"fsync\": true", 3 * GB_NT, bytes);
    gb_line("ckpt_async_stall_gpu", prm, "s", t_async, t_copy, "cudaMemcpyAsync D2H into pinned memory", 1 / 1.2);
    gb_line("ckpt_async_vs_sync_gpu", prm, "s", t_async, t_sync, "accel_ckpt_save_state, async off", 0);
    fprintf(stderr, "bench_ckpt_async_gpu: save_state itself returned after %.4f s (the copies still queued)\n", t_ret);
    accel_ckpt_destroy(ca);
    accel_ckpt_destroy(cs);
    for (g = 0; g < 3; ++g) cudaFree(buf[g]);
    cudaFreeHost(pinned);
    accel_shutdown(&acc);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "cleanup of %s failed\n", dir);
    return 0;
}
