/* accel_ckpt GPU benchmark (issue 13): safetensors save from device memory (accel_st_save: atomic,
   fsync'd) and load into device memory (accel_st_file_open + accel_st_file_load_all, page cache warm), for the
   GPT-2 124M parameter list (148 fp32 tensors, 497,759,232 bytes) and one flat 1 GiB tensor, timed by the host clock
   (best of REPS, load followed by a device synchronize), against PyTorch in the same run when torch has CUDA
   (torch_peer_gpu.py, same shapes, same directory): safetensors.torch.save_file + fsync and torch.save + fsync;
   safetensors.torch.load_file(device="cuda") and torch.load(map_location="cuda"), each on its own file. The peer
   also loads accel's file with safetensors.torch and checks it bit for bit against accel's bytes (a file another
   parser reads). Goal: load ≥ 1.0 × safetensors.torch; save is reported against both peers.
   Exits 77 without a device. usage: bench_ckpt_gpu [TORCH_PEER_GPU_PY] [REPS] [DIR] */
#include "accel.h"
#include "accel_safetensors.h"
#include "../gpu_bench.h"
#include <time.h>
#include <unistd.h>

static double wall(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    const char *peer_py = argc > 1 ? argv[1] : "";
    int reps = argc > 2 ? atoi(argv[2]) : 3, i, r, set;
    const char *base = argc > 3 ? argv[3] : (getenv("TMPDIR") && getenv("TMPDIR")[0] ? getenv("TMPDIR") : "/tmp");
    int64_t sizes[GB_NT], n = gb_gpt2_sizes(sizes);
    static char names[GB_NT][16];
    accel_tensor t[GB_NT], flat;
    accel acc;
    accel_desc d;
    float *buf, *fbuf;
    char dir[512], path[600], peer[4096], args[700], prm[256];
    int have_peer;
    cudaStream_t st;

    gb_need_device("bench_ckpt_gpu");
    if (reps < 1) reps = 1;
    snprintf(dir, sizeof dir, "%s/bench_ckpt_gpu.XXXXXX", base);
    if (!mkdtemp(dir)) { perror(dir); return 1; }
    memset(&d, 0, sizeof d);
    d.no_mpi = 1;
    if (accel_init(&acc, &d) != ACCEL_OK || acc.device < 0) {
        fprintf(stderr, "accel_init: %s\n", accel_last_error(&acc));
        return 1;
    }
    st = (cudaStream_t)acc.stream;
    GB_CK(cudaMalloc((void **)&buf, 4 * (size_t)n));
    GB_CK(cudaMalloc((void **)&fbuf, GB_FLAT_BYTES));
    gb_fill(buf, (size_t)n, 5u, st);
    gb_fill(fbuf, GB_FLAT_BYTES / 4, 6u, st);
    GB_CK(cudaStreamSynchronize(st));
    {
        int64_t off = 0;
        for (i = 0; i < GB_NT; ++i) {
            snprintf(names[i], sizeof names[i], "t%03d", i);
            memset(&t[i], 0, sizeof t[i]);
            t[i].name = names[i]; t[i].ptr = buf + off; t[i].dtype = ACCEL_F32; t[i].ndim = 1; t[i].shape[0] = sizes[i];
            off += sizes[i];
        }
    }
    memset(&flat, 0, sizeof flat);
    flat.name = "flat"; flat.ptr = fbuf; flat.dtype = ACCEL_F32; flat.ndim = 1; flat.shape[0] = (int64_t)(GB_FLAT_BYTES / 4);

    for (set = 0; set < 2; ++set) {
        const accel_tensor *ts = set ? &flat : t;
        int nt = set ? 1 : GB_NT;
        double bytes = set ? (double)GB_FLAT_BYTES : 4.0 * (double)n, best_save = 1e30, best_load = 1e30;
        const char *tag = set ? "flat" : "gpt2";
        snprintf(path, sizeof path, "%s/accel_%s.safetensors", dir, tag);
        for (r = 0; r < reps; ++r) {
            double t0 = wall();
            if (accel_st_save(&acc, path, ts, nt, NULL, 0) != ACCEL_OK) {
                fprintf(stderr, "save: %s\n", accel_last_error(&acc));
                return 1;
            }
            t0 = wall() - t0;
            if (t0 < best_save) best_save = t0;
        }
        for (r = 0; r < reps + 1; ++r) { /* the first load warms the page cache and is not counted */
            accel_st_file *f = NULL;
            double t0 = wall();
            if (accel_st_file_open(&acc, path, &f) != ACCEL_OK || accel_st_file_load_all(f, ts, nt) != ACCEL_OK) {
                fprintf(stderr, "load: %s\n", accel_last_error(&acc));
                return 1;
            }
            GB_CK(cudaDeviceSynchronize());
            accel_st_file_destroy(f);
            t0 = wall() - t0;
            if (r > 0 && t0 < best_load) best_load = t0;
        }
        snprintf(args, sizeof args, "'%s' %s %d", dir, tag, reps);
        have_peer = gb_run_peer(peer_py, args, peer, sizeof peer);
        snprintf(prm, sizeof prm, "\"tensors\": %d, \"bytes\": %.0f, \"fsync\": true%s", nt, bytes,
                 set ? "" : ", \"shapes\": \"GPT-2 124M parameters\"");
        if (have_peer) {
            double v;
            if (strstr(peer, "\"accel_file_matches\": false")) {
                fprintf(stderr, "bench_ckpt_gpu: safetensors.torch read accel's file differently: %s", peer);
                return 1;
            }
            if ((v = gb_json_num(peer, "save_st_s")) > 0)
                gb_line("ckpt_save_from_gpu", prm, "GB/s", bytes * 1e-9 / best_save, bytes * 1e-9 / v,
                        "safetensors.torch.save_file", 1.0);
            if ((v = gb_json_num(peer, "save_pt_s")) > 0)
                gb_line("ckpt_save_from_gpu", prm, "GB/s", bytes * 1e-9 / best_save, bytes * 1e-9 / v, "torch.save", 1.0);
            if ((v = gb_json_num(peer, "load_st_s")) > 0)
                gb_line("ckpt_load_to_gpu", prm, "GB/s", bytes * 1e-9 / best_load, bytes * 1e-9 / v,
                        "safetensors.torch.load_file(device=cuda)", 1.0);
            if ((v = gb_json_num(peer, "load_pt_s")) > 0)
                gb_line("ckpt_load_to_gpu", prm, "GB/s", bytes * 1e-9 / best_load, bytes * 1e-9 / v,
                        "torch.load(map_location=cuda)", 1.0);
        } else {
            /* no peer: report against 0 (ratio 0) so the figure is still printed */
            fprintf(stderr, "bench_ckpt_gpu: no torch with CUDA / safetensors (%s): peer lines skipped\n",
                    peer[0] ? peer : "no peer output");
            gb_line("ckpt_save_from_gpu", prm, "GB/s", bytes * 1e-9 / best_save, 0, "none (no torch with CUDA)", 1.0);
            gb_line("ckpt_load_to_gpu", prm, "GB/s", bytes * 1e-9 / best_load, 0, "none (no torch with CUDA)", 1.0);
        }
        unlink(path);
    }
    {
        char cmd[700];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    }
    cudaFree(buf); cudaFree(fbuf);
    accel_shutdown(&acc);
    return 0;
}
