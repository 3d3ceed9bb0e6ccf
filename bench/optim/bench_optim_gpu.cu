/* accel_optim GPU benchmark: fused AdamW over the GPT-2 124M parameter list (148 tensors, 124,439,808 parameters;
   fp32 master weights, fp32 gradients), timed with CUDA events, against (1) a device-to-device copy in the same run —
   bytes read + written: the step moves 28 bytes per parameter, a copy of B bytes moves 2B — goal 0.85; (2)
   torch.optim.AdamW(fused=True) on the same list when the local torch has CUDA (torch_peer_gpu.py) — goal 1.0.
   A second line times the mixed-precision form (bf16 gradients, bf16 model copy written in the same pass: 26 bytes).
   Exits 77 without a device. usage: bench_optim_gpu [TORCH_PEER_GPU_PY] [REPS] */
#include "accel.h"
#include "accel_optim.h"
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NT 148
static int64_t sizes[NT];

static void gpt2_sizes(void) { /* wte, wpe, 12 × (ln_1 w b, c_attn w b, attn c_proj w b, ln_2 w b, c_fc w b, mlp c_proj w b), ln_f w b */
    int i = 0, l;
    sizes[i++] = 50257LL * 768; sizes[i++] = 1024LL * 768;
    for (l = 0; l < 12; ++l) {
        sizes[i++] = 768; sizes[i++] = 768;
        sizes[i++] = 768LL * 2304; sizes[i++] = 2304;
        sizes[i++] = 768LL * 768; sizes[i++] = 768;
        sizes[i++] = 768; sizes[i++] = 768;
        sizes[i++] = 768LL * 3072; sizes[i++] = 3072;
        sizes[i++] = 3072LL * 768; sizes[i++] = 768;
    }
    sizes[i++] = 768; sizes[i++] = 768;
}

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); return 1; } } while (0)

static double time_steps(accel_optim *opt, cudaStream_t st, int reps) {
    cudaEvent_t a, b;
    float ms = 0, best = 1e30f;
    int r;
    cudaEventCreate(&a); cudaEventCreate(&b);
    for (r = 0; r < reps; ++r) {
        cudaEventRecord(a, st);
        accel_optim_step(opt, NULL);
        cudaEventRecord(b, st);
        cudaEventSynchronize(b);
        cudaEventElapsedTime(&ms, a, b);
        if (ms < best) best = ms;
    }
    cudaEventDestroy(a); cudaEventDestroy(b);
    return best * 1e-3;
}

int main(int argc, char **argv) {
    int count = 0, reps = argc > 2 ? atoi(argv[2]) : 20, i, r;
    int64_t n = 0;
    accel acc;
    accel_desc d;
    accel_optim_desc od;
    accel_optim *o32 = NULL, *o16 = NULL;
    accel_tensor pt[NT], gt[NT], g16[NT], mt[NT];
    float *p, *g, *cp;
    uint16_t *gb, *mb;
    double t32, t16, tcopy = 1e30, ttorch = 0;
    char peer[512] = "";
    cudaEvent_t a, b;
    cudaStream_t st;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) { printf("no CUDA device: skipped\n"); return 77; }
    gpt2_sizes();
    for (i = 0; i < NT; ++i) n += sizes[i];
    memset(&d, 0, sizeof d);
    d.no_mpi = 1;
    if (accel_init(&acc, &d) != ACCEL_OK || acc.device < 0) { fprintf(stderr, "%s\n", accel_last_error(&acc)); return 1; }
    st = (cudaStream_t)acc.stream;
    CK(cudaMalloc((void **)&p, 4 * (size_t)n)); CK(cudaMalloc((void **)&g, 4 * (size_t)n));
    CK(cudaMalloc((void **)&cp, 4 * (size_t)n));
    CK(cudaMalloc((void **)&gb, 2 * (size_t)n)); CK(cudaMalloc((void **)&mb, 2 * (size_t)n));
    CK(cudaMemset(p, 0, 4 * (size_t)n)); CK(cudaMemset(g, 0, 4 * (size_t)n)); CK(cudaMemset(gb, 0, 2 * (size_t)n));
    {
        int64_t off = 0;
        for (i = 0; i < NT; ++i) {
            memset(&pt[i], 0, sizeof pt[i]);
            pt[i].name = "w"; pt[i].ptr = p + off; pt[i].dtype = ACCEL_F32; pt[i].ndim = 1; pt[i].shape[0] = sizes[i];
            gt[i] = pt[i]; gt[i].ptr = g + off;
            g16[i] = pt[i]; g16[i].ptr = gb + off; g16[i].dtype = ACCEL_BF16;
            mt[i] = g16[i]; mt[i].ptr = mb + off;
            off += sizes[i];
        }
    }
    memset(&od, 0, sizeof od);
    od.lr = 6e-4; od.weight_decay = 0.1;
    od.params = pt; od.grads = gt; od.nparams = NT;
    if (accel_optim_create(&acc, &od, &o32) != ACCEL_OK) { fprintf(stderr, "%s\n", accel_last_error(&acc)); return 1; }
    od.grads = g16; od.model = mt;
    if (accel_optim_create(&acc, &od, &o16) != ACCEL_OK) { fprintf(stderr, "%s\n", accel_last_error(&acc)); return 1; }
    accel_optim_step(o32, NULL);
    accel_optim_step(o16, NULL);
    CK(cudaStreamSynchronize(st));
    t32 = time_steps(o32, st, reps);
    t16 = time_steps(o16, st, reps);
    cudaEventCreate(&a); cudaEventCreate(&b);
    for (r = 0; r < reps; ++r) {
        float ms = 0;
        cudaEventRecord(a, st);
        cudaMemcpyAsync(cp, p, 4 * (size_t)n, cudaMemcpyDeviceToDevice, st);
        cudaEventRecord(b, st);
        cudaEventSynchronize(b);
        cudaEventElapsedTime(&ms, a, b);
        if (ms * 1e-3 < tcopy) tcopy = ms * 1e-3;
    }
    CK(cudaGetLastError());
    if (argc > 1) {
        char cmd[1024], out[512];
        FILE *pp;
        const char *py = getenv("ACCEL_BENCH_PYTHON"); /* a venv with torch + CUDA; default the system python */
        snprintf(cmd, sizeof cmd, "'%s' '%s' %d 2>/dev/null", py && py[0] ? py : "/usr/bin/python3", argv[1], reps);
        pp = popen(cmd, "r");
        if (pp) {
            if (fgets(out, sizeof out, pp)) {
                const char *s = strstr(out, "\"step_s\": ");
                if (s) ttorch = atof(s + 10);
                snprintf(peer, sizeof peer, "%s", out);
            }
            pclose(pp);
        }
    }
    {
        cudaDeviceProp prop;
        double copy_gbs = 8.0 * (double)n * 1e-9 / tcopy;
        cudaGetDeviceProperties(&prop, acc.device);
        printf("{\"bench\": \"adamw_step_gpu\", \"params\": {\"parameters\": %lld, \"tensors\": %d, \"grads\": \"F32\", "
               "\"device\": \"%s\", \"counted\": \"28 bytes per parameter; copy 8\"}, \"unit\": \"GB/s\", \"accel\": %.1f, "
               "\"reference\": %.1f, \"reference_name\": \"cudaMemcpy D2D\", \"ratio\": %.3f, \"goal\": 0.85}\n",
               (long long)n, NT, prop.name, 28.0 * (double)n * 1e-9 / t32, copy_gbs, 28.0 * (double)n * 1e-9 / t32 / copy_gbs);
        printf("{\"bench\": \"adamw_step_gpu_bf16\", \"params\": {\"parameters\": %lld, \"tensors\": %d, \"grads\": \"BF16\", "
               "\"model_copy\": \"BF16\", \"device\": \"%s\", \"counted\": \"26 bytes per parameter; copy 8\"}, \"unit\": \"GB/s\", "
               "\"accel\": %.1f, \"reference\": %.1f, \"reference_name\": \"cudaMemcpy D2D\", \"ratio\": %.3f, \"goal\": 0.85}\n",
               (long long)n, NT, prop.name, 26.0 * (double)n * 1e-9 / t16, copy_gbs, 26.0 * (double)n * 1e-9 / t16 / copy_gbs);
        if (ttorch > 0)
            printf("{\"bench\": \"adamw_step_gpu\", \"params\": {\"parameters\": %lld, \"tensors\": %d, \"device\": \"%s\"}, "
                   "\"unit\": \"steps/s\", \"accel\": %.2f, \"reference\": %.2f, \"reference_name\": "
                   "\"torch.optim.AdamW(fused=True)\", \"ratio\": %.3f, \"goal\": 1.0}\n",
                   (long long)n, NT, prop.name, 1.0 / t32, 1.0 / ttorch, ttorch / t32);
        else
            fprintf(stderr, "bench_optim_gpu: no torch with CUDA here (%s): the torch line is skipped\n", peer[0] ? peer : "no output");
    }
    accel_optim_destroy(o32);
    accel_optim_destroy(o16);
    cudaFree(p); cudaFree(g); cudaFree(cp); cudaFree(gb); cudaFree(mb);
    accel_shutdown(&acc);
    return 0;
}
