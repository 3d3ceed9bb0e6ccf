/* accel_zero.h's ZeRO-3 / FSDP on CUDA devices: the gathers (the BF16 model copy made by the cast kernel, gathered
   over NCCL or MPI with device buffers) equal the host rounding of the initial values bit for bit; the reductions
   (pre-scaling kernel, reduce-scatter, the accumulate kernel: put, then add on a second reducing micro-batch) equal
   a float64 long-hand sum over ranks and micro-batches of g * fl(1/P) within 1e-6 of the largest (F32 reductions;
   NCCL's sum order is its own); export gives back the F32 initial values bit for bit; with and without CPU offload
   (shards in pinned memory, staged per unit). Then one AdamW step over the shard views: on the device, or with
   offload on the host (accel_optim_desc.offload: the moments in pinned memory, the CPU loop over the pinned shard);
   the offloaded step's F32 master and BF16 copy equal the device step's bit for bit. Every device and pinned block
   goes back (counting allocators).
   Units of 13, 1 and 1000 elements: padding to P, a unit smaller than P. One process (NCCL of size 1, or NONE) or
   under mpirun. Exits 77 (meson: skipped) without a device, or with fewer devices than local ranks. */
#include "accel.h"
#include "accel_collectives.h"
#include "accel_zero.h"
#include "accel_optim.h"
#include "accel_test.h"
#include "accel_test_gpu.h"
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static accel acc;
static int P, R;
static at_gpu_count g_dev, g_pin;

enum { K = 3 };
static const int64_t SZ[K] = {13, 1, 1000};
static float init_value(int u, int64_t e) { return (float)(0.75 * sin(0.21 * (double)e + 1.7 * u) + 0.01 * u); }
static float grad_value(int r, int m, int u, int64_t e) {
    return (float)(sin(0.13 * (double)e + 0.9 * r + 0.31 * m + (double)u) * (1.0 + u));
}

/* the device step's results (offload off), which the host step (offload on, same backend) must equal */
static float ref32[K][1000];
static uint16_t ref16[K][1000];

/* One AdamW step over f's shard views (after the reductions: the gradient shard holds their sum), on the device or,
   with offload, on the host; compares the results of the two. */
static void step(accel_zero_fsdp *f, accel_toggle offload) {
    accel_tensor vp[K], vg[K], vm[K];
    accel_tensor_piece pp[K], pm[K];
    accel_optim_desc od;
    accel_optim *opt = NULL;
    const accel_tensor *mom = NULL;
    int nm = 0, i, u, bad = 0;
    AT_EQ_INT(accel_zero_fsdp_views(f, ACCEL_ZERO_VIEW_PARAMS, vp, K), ACCEL_OK);
    AT_EQ_INT(accel_zero_fsdp_views(f, ACCEL_ZERO_VIEW_GRADS, vg, K), ACCEL_OK);
    AT_EQ_INT(accel_zero_fsdp_views(f, ACCEL_ZERO_VIEW_MODEL, vm, K), ACCEL_OK);
    memset(&od, 0, sizeof od);
    od.algorithm = ACCEL_OPTIM_ADAMW;
    od.lr = 1e-2;
    od.weight_decay = 0.1;
    od.params = vp;
    od.grads = vg;
    od.model = vm;
    od.nparams = K;
    od.offload = offload == ACCEL_ON;
    AT_EQ_INT(accel_optim_create(&acc, &od, &opt), ACCEL_OK);
    if (!opt) return;
    AT_EQ_INT(accel_optim_state_tensors(opt, &mom, &nm), ACCEL_OK);
    for (i = 0; i < nm; ++i) { /* the moments: pinned host memory when offloaded, else the device's */
        cudaPointerAttributes pa;
        if (accel_tensor_numel(&mom[i]) == 0) continue;
        AT_CHECK(cudaPointerGetAttributes(&pa, mom[i].ptr) == cudaSuccess);
        AT_EQ_INT((int)pa.type, offload == ACCEL_ON ? (int)cudaMemoryTypeHost : (int)cudaMemoryTypeDevice);
    }
    AT_EQ_INT(accel_optim_step(opt, NULL), ACCEL_OK);
    AT_CHECK(cudaDeviceSynchronize() == cudaSuccess);
    AT_EQ_INT(accel_zero_fsdp_pieces(f, ACCEL_ZERO_VIEW_PARAMS, 0, pp, K), ACCEL_OK);
    AT_EQ_INT(accel_zero_fsdp_pieces(f, ACCEL_ZERO_VIEW_MODEL, 0, pm, K), ACCEL_OK);
    for (u = 0; u < K; ++u) {
        float h32[1000];
        uint16_t h16[1000];
        long long cnt = pp[u].count;
        AT_CHECK(cnt >= 0 && cnt <= 1000 && pm[u].count == cnt);
        if (cnt <= 0 || cnt > 1000 || pm[u].count != cnt) continue;
        AT_CHECK(cudaMemcpy(h32, pp[u].ptr, (size_t)cnt * 4, cudaMemcpyDefault) == cudaSuccess);
        AT_CHECK(cudaMemcpy(h16, pm[u].ptr, (size_t)cnt * 2, cudaMemcpyDefault) == cudaSuccess);
        if (offload != ACCEL_ON) {
            memcpy(ref32[u], h32, (size_t)cnt * 4);
            memcpy(ref16[u], h16, (size_t)cnt * 2);
        } else {
            bad += memcmp(ref32[u], h32, (size_t)cnt * 4) != 0 || memcmp(ref16[u], h16, (size_t)cnt * 2) != 0;
        }
        if (accel_bf16_to_f32(h16[0]) != accel_bf16_to_f32(accel_f32_to_bf16(h32[0]))) ++bad; /* copy = master */
    }
    AT_CHECK_MSG(bad == 0, "the offloaded host step differs from the device step (or the copy from the master)");
    accel_optim_destroy(opt);
    /* the device step's tensor list lives in acc's device scratch (kept for the next step) until free_memory:
       release it so that the allocation count at the end balances */
    AT_EQ_INT(accel_free_memory(&acc), ACCEL_OK);
}

static void fsdp(accel_coll *c, accel_toggle offload) {
    accel_tensor t[K], w[1], g[1], full[K];
    accel_tensor_piece pc[K];
    accel_zero_unit units[K];
    accel_zero_fsdp_desc fd;
    accel_zero_fsdp *f = NULL;
    void *dinit[K], *dfull[K];
    float host[1000];
    uint16_t hb[1000];
    float s = 1.0f / (float)P;
    int u, m, rr, bad = 0;
    int64_t e;
    at_context = offload == ACCEL_ON ? "zero3 gpu offload" : "zero3 gpu";
    for (u = 0; u < K; ++u) {
        for (e = 0; e < SZ[u]; ++e) host[e] = init_value(u, e);
        dinit[u] = at_dev_copy(host, (size_t)SZ[u] * 4);
        dfull[u] = at_dev_copy(host, (size_t)SZ[u] * 4); /* overwritten by export */
        AT_CHECK(cudaMemset(dfull[u], 0, (size_t)SZ[u] * 4) == cudaSuccess);
        memset(&t[u], 0, sizeof t[u]);
        t[u].name = "w";
        t[u].ptr = dinit[u];
        t[u].dtype = ACCEL_F32;
        t[u].ndim = 1;
        t[u].shape[0] = SZ[u];
        full[u] = t[u];
        full[u].ptr = dfull[u];
        units[u].name = NULL;
        units[u].params = &t[u];
        units[u].n = 1;
    }
    memset(&fd, 0, sizeof fd);
    fd.strategy = ACCEL_ZERO_FULL_SHARD;
    fd.units = units;
    fd.nunits = K;
    fd.param_dtype = ACCEL_BF16;
    fd.reduce_dtype = ACCEL_F32;
    fd.cpu_offload = offload;
    fd.forward_prefetch = ACCEL_ON;
    AT_EQ_INT(accel_zero_fsdp_create(c, &fd, &f), ACCEL_OK);
    if (!f) return;
    /* forward: every unit's gathered BF16 parameters are the host rounding of the initial values */
    AT_EQ_INT(accel_zero_fsdp_begin_forward(f), ACCEL_OK);
    for (u = 0; u < K; ++u) {
        AT_EQ_INT(accel_zero_fsdp_wait(f, u, w, 1), ACCEL_OK);
        AT_EQ_INT((int)w[0].dtype, (int)ACCEL_BF16);
        AT_EQ_INT((long long)accel_tensor_numel(&w[0]), (long long)SZ[u]);
        /* a gather buffer on the device, also with offload on one process (the pinned shard staged into it):
           the compute's kernels get device memory */
        {
            cudaPointerAttributes pa;
            AT_CHECK(cudaPointerGetAttributes(&pa, w[0].ptr) == cudaSuccess && pa.type == cudaMemoryTypeDevice);
        }
        AT_CHECK(cudaDeviceSynchronize() == cudaSuccess);
        AT_CHECK(cudaMemcpy(hb, w[0].ptr, (size_t)SZ[u] * 2, cudaMemcpyDefault) == cudaSuccess);
        for (e = 0; e < SZ[u]; ++e) bad += hb[e] != accel_f32_to_bf16(init_value(u, e));
        AT_EQ_INT(accel_zero_fsdp_release(f, u), ACCEL_OK);
    }
    AT_EQ_INT(bad, 0);
    /* two reducing micro-batches (outside accumulate): the shard holds the sum of both */
    for (m = 0; m < 2; ++m) {
        AT_EQ_INT(accel_zero_fsdp_begin_backward(f), ACCEL_OK);
        for (u = K - 1; u >= 0; --u) {
            AT_EQ_INT(accel_zero_fsdp_wait(f, u, w, 1), ACCEL_OK);
            AT_EQ_INT(accel_zero_fsdp_grads(f, u, g, 1), ACCEL_OK);
            AT_EQ_INT((int)g[0].dtype, (int)ACCEL_F32);
            for (e = 0; e < SZ[u]; ++e) host[e] = grad_value(R, m, u, e);
            AT_CHECK(cudaMemcpy(g[0].ptr, host, (size_t)SZ[u] * 4, cudaMemcpyHostToDevice) == cudaSuccess);
            AT_EQ_INT(accel_zero_fsdp_release(f, u), ACCEL_OK);
            AT_EQ_INT(accel_zero_fsdp_reduce_scatter(f, u), ACCEL_OK);
        }
        AT_EQ_INT(accel_zero_fsdp_end_backward(f), ACCEL_OK);
    }
    AT_EQ_INT(accel_zero_fsdp_pieces(f, ACCEL_ZERO_VIEW_GRADS, 0, pc, K), ACCEL_OK);
    for (u = 0; u < K; ++u) {
        double worst = 0, scale = 1e-30, want[1000];
        long long cnt = pc[u].count;
        for (e = 0; e < SZ[u]; ++e) {
            want[e] = 0;
            for (m = 0; m < 2; ++m)
                for (rr = 0; rr < P; ++rr) want[e] += (double)grad_value(rr, m, u, e) * (double)s;
            if (fabs(want[e]) > scale) scale = fabs(want[e]);
        }
        AT_CHECK(pc[u].offset >= 0 && cnt >= 0 && pc[u].offset + cnt <= SZ[u]);
        if (cnt > 0) { /* device shards, or pinned host memory under offload: cudaMemcpy reads both */
            AT_CHECK(cudaDeviceSynchronize() == cudaSuccess);
            AT_CHECK(cudaMemcpy(host, pc[u].ptr, (size_t)cnt * 4, cudaMemcpyDefault) == cudaSuccess);
        }
        for (e = 0; e < cnt; ++e) {
            double d = fabs((double)host[e] - want[pc[u].offset + e]) / scale;
            if (d > worst) worst = d;
        }
        AT_CHECK_MSG(worst <= 1e-6, "the gradient shard is not the sum over ranks and micro-batches");
    }
    AT_EQ_INT(accel_zero_fsdp_zero_grad(f), ACCEL_OK);
    /* export: the whole F32 parameters, bit for bit the initial values (no step was taken) */
    AT_EQ_INT(accel_zero_fsdp_export(f, full, K), ACCEL_OK);
    for (u = 0; u < K; ++u) {
        at_host_copy(host, dfull[u], (size_t)SZ[u] * 4);
        for (e = 0; e < SZ[u]; ++e) {
            float x = init_value(u, e);
            bad += memcmp(&host[e], &x, 4) != 0;
        }
    }
    AT_EQ_INT(bad, 0);
    step(f, offload);
    accel_zero_fsdp_destroy(f);
    for (u = 0; u < K; ++u) {
        cudaFree(dinit[u]);
        cudaFree(dfull[u]);
    }
}

static void run(accel_coll_backend be) {
    accel_coll *c = at_gpu_comm(&acc, be);
    if (!c) return;
    fsdp(c, ACCEL_OFF);
    fsdp(c, ACCEL_ON);
    at_gpu_comm_end(c, &g_dev, &g_pin);
}

int main(void) {
    accel_desc d;
    int rc, count = 0;
    AT_SKIP_WITHOUT_GPU(count);
    at_gpu_counting_desc(&d, &g_dev, &g_pin);
    if ((rc = at_gpu_init(&acc, &d, count, &P, &R)) != 0) return rc;
    at_gpu_each_backend(&acc, run);
    run(ACCEL_COLL_BACKEND_AUTO);
    rc = at_finish("zero3_gpu");
    accel_shutdown(&acc);
    return rc;
}
