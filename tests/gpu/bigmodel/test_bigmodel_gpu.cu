/* Big models on a GPU (accel_bigmodel.h): a sharded checkpoint dispatched onto GPU 0 / cpu / disk, with and
   without dtype conversion (bf16 on load): every GPU tensor copied back equals the source (or accel_f32_to_bf16 of
   it); then the just-in-time fetch runs the layers on GPU 0 (most of them on disk) with and without prefetch, and
   each layer's fetched tensors, copied back on the compute stream, give the bit-identical output of the
   all-in-memory run on the host; the pinned staging buffers all go back to desc.pinned_allocator. Exits 77 (skip)
   without a CUDA device. */
#include "accel_safetensors.h"
#include "accel_bigmodel.h"
#include "accel_test.h"
#include "accel_test_gpu.h"
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define H 256
#define L 8
static float w[L][H * H], b[L][H];
static void layer_fwd(const float *lw, const float *lb, const float *x, float *y) {
    for (int i = 0; i < H; ++i) {
        float s = lb[i];
        for (int k = 0; k < H; ++k) s += lw[i * H + k] * x[k];
        y[i] = s > 0 ? s : 0.01f * s;
    }
}
static accel_tensor tens(const char *name, accel_dtype dt, int64_t n0, int64_t n1, void *p) {
    accel_tensor t;
    memset(&t, 0, sizeof t);
    t.name = name; t.dtype = dt; t.ndim = n1 ? 2 : 1; t.shape[0] = n0; t.shape[1] = n1; t.ptr = p;
    return t;
}

int main(void) {
    int count = 0;
    accel acc;
    accel_desc d;
    at_gpu_count pc = {0, 0};
    char tmpl[] = "/tmp/accel_bigmodel_gpu_XXXXXX", dir[512], names[2 * L][32], lname[L][16];
    const char *layers[L];
    accel_tensor t[2 * L];
    accel_bm_model *m = NULL;
    accel_bm_placement map[L + 1];
    accel_bm_dispatch_desc dd;
    accel_bm_dispatch *x = NULL;
    static float ref[H], x0[H], a[H], y[H], hw[H * H], hb[H];
    unsigned s = 11;
    AT_SKIP_WITHOUT_GPU(count);
    at_gpu_counting_desc(&d, NULL, &pc);
    d.no_mpi = 1;
    if (accel_init(&acc, &d) != ACCEL_OK) { fprintf(stderr, "%s\n", accel_last_error(&acc)); return 1; }
    if (!mkdtemp(tmpl)) return 1;
    for (int i = 0; i < L; ++i) {
        for (int k = 0; k < H * H; ++k) { s = s * 1664525u + 1013904223u; w[i][k] = ((float)(s >> 9) / 8388608.0f - 0.5f) * 0.1f; }
        for (int k = 0; k < H; ++k) { s = s * 1664525u + 1013904223u; b[i][k] = ((float)(s >> 9) / 8388608.0f - 0.5f) * 0.1f; }
    }
    for (int k = 0; k < H; ++k) x0[k] = (float)k / H - 0.5f;
    memcpy(a, x0, sizeof a);
    for (int i = 0; i < L; ++i) { layer_fwd(w[i], b[i], a, y); memcpy(a, y, sizeof a); }
    memcpy(ref, a, sizeof ref);
    AT_EQ_INT(accel_bm_model_create(&acc, NULL, &m), ACCEL_OK);
    AT_EQ_INT(accel_bm_model_add_module(m, "layers", "ModuleList"), ACCEL_OK);
    for (int i = 0; i < L; ++i) {
        snprintf(lname[i], sizeof lname[i], "layers.%d", i);
        layers[i] = lname[i];
        AT_EQ_INT(accel_bm_model_add_module(m, lname[i], "Linear"), ACCEL_OK);
        snprintf(names[2 * i], 32, "layers.%d.weight", i);
        snprintf(names[2 * i + 1], 32, "layers.%d.bias", i);
        t[2 * i] = tens(names[2 * i], ACCEL_F32, H, H, w[i]);
        t[2 * i + 1] = tens(names[2 * i + 1], ACCEL_F32, H, 0, b[i]);
        AT_EQ_INT(accel_bm_model_add_tensor(m, &t[2 * i], 0), ACCEL_OK);
        AT_EQ_INT(accel_bm_model_add_tensor(m, &t[2 * i + 1], 0), ACCEL_OK);
        map[i].name = lname[i];
        map[i].device = i < 2 ? 0 : i < 4 ? ACCEL_BM_CPU : ACCEL_BM_DISK; /* 2 on the GPU, 2 on the CPU, 4 on disk */
    }
    snprintf(dir, sizeof dir, "%s/ck", tmpl);
    AT_EQ_INT(accel_st_save_model(&acc, dir, t, 2 * L, "300KB"), ACCEL_OK);
    memset(&dd, 0, sizeof dd);
    dd.checkpoint = dir;
    dd.device_map = map;
    dd.n_device_map = L;
    for (int conv = 0; conv < 2; ++conv) { /* as stored; bf16 on load */
        dd.dtype = conv ? ACCEL_BF16 : ACCEL_DTYPE_INVALID;
        AT_EQ_INT(accel_bm_dispatch_create(m, &dd, &x), ACCEL_OK);
        if (!x) break;
        for (int i = 0; i < 2; ++i) {
            accel_tensor g;
            int dev = -9;
            AT_EQ_INT(accel_bm_dispatch_tensor(x, names[2 * i], &g, &dev), ACCEL_OK);
            AT_EQ_INT(dev, 0);
            if (!conv) {
                AT_EQ_INT(cudaMemcpy(hw, g.ptr, sizeof hw, cudaMemcpyDeviceToHost), cudaSuccess);
                AT_CHECK(!memcmp(hw, w[i], sizeof hw));
            } else {
                static uint16_t h16[H * H];
                AT_EQ_INT(g.dtype, ACCEL_BF16);
                AT_EQ_INT(cudaMemcpy(h16, g.ptr, sizeof h16, cudaMemcpyDeviceToHost), cudaSuccess);
                int bad = 0;
                for (int k = 0; k < H * H; ++k) bad += h16[k] != accel_f32_to_bf16(w[i][k]);
                AT_EQ_INT(bad, 0);
            }
        }
        if (!conv) {
            for (int pass = 0; pass < 2; ++pass) {
                accel_bm_fetch *f = NULL;
                accel_bm_fetch_desc fd;
                cudaStream_t cs;
                cudaStreamCreate(&cs);
                memset(&fd, 0, sizeof fd);
                fd.layers = layers;
                fd.n_layers = L;
                fd.device = 0;
                fd.stream = (struct CUstream_st *)cs;
                fd.no_prefetch = pass;
                AT_EQ_INT(accel_bm_fetch_create(x, &fd, &f), ACCEL_OK);
                memcpy(a, x0, sizeof a);
                for (int i = 0; i < L && f; ++i) {
                    const accel_tensor *lt = NULL;
                    int n = 0;
                    AT_EQ_INT(accel_bm_fetch_begin(f, i, &lt, &n), ACCEL_OK);
                    AT_EQ_INT(n, 2);
                    if (n != 2) break;
                    /* "the layer's work": copies on the compute stream, ordered after the fetch's copies */
                    cudaMemcpyAsync(hw, lt[0].ptr, sizeof hw, cudaMemcpyDeviceToHost, cs);
                    cudaMemcpyAsync(hb, lt[1].ptr, sizeof hb, cudaMemcpyDeviceToHost, cs);
                    AT_EQ_INT(accel_bm_fetch_end(f, i), ACCEL_OK);
                    cudaStreamSynchronize(cs);
                    layer_fwd(hw, hb, a, y);
                    memcpy(a, y, sizeof a);
                }
                AT_CHECK(!memcmp(a, ref, sizeof ref));
                accel_bm_fetch_destroy(f);
                cudaStreamDestroy(cs);
            }
        }
        accel_bm_dispatch_destroy(x);
        x = NULL;
    }
    accel_bm_model_destroy(m);
    AT_CHECK(pc.allocs > 0 && pc.allocs == pc.frees);
    accel_shutdown(&acc);
    {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpl);
        if (system(cmd) != 0) fprintf(stderr, "rm failed\n");
    }
    return at_finish("ckpt-bigmodel-gpu");
}
