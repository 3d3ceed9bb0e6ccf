/* accel_collectives.h on CUDA devices: the NCCL backend (and, under mpirun, the MPI backend with device buffers:
   CUDA-aware or pinned-host staging) against references computed on the host from every rank's inputs. Exits 77
   (meson: skipped) without a device, or with fewer devices than ranks (NCCL needs one GPU per rank).
   Runs as one process (an NCCL communicator of size 1) or under mpirun. */
#include "accel.h"
#include "accel_collectives.h"
#include "accel_test.h"
#include "accel_test_gpu.h"
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>

static accel acc;
static int P, R;

static double dec16(uint16_t h, int bf) {
    if (bf) {
        uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m + 1024, e - 25);
    return s ? -v : v;
}
/* code of a small integer (exact in both 16-bit formats) */
static uint16_t code16(int v, int bf) {
    if (bf) {
        float f = (float)v;
        uint32_t u;
        memcpy(&u, &f, 4);
        return (uint16_t)(u >> 16);
    }
    if (v == 0) return 0;
    uint16_t s = (uint16_t)(v < 0 ? 0x8000 : 0);
    int a = v < 0 ? -v : v, e = 0;
    while ((a >> e) > 1) ++e;
    return (uint16_t)(s | ((e + 15) << 10) | (((a << 10) >> e) & 1023));
}
static double get(const void *b, size_t i, accel_dtype dt) {
    switch (dt) {
    case ACCEL_F64: return ((const double *)b)[i];
    case ACCEL_F32: return ((const float *)b)[i];
    case ACCEL_F16: return dec16(((const uint16_t *)b)[i], 0);
    case ACCEL_BF16: return dec16(((const uint16_t *)b)[i], 1);
    case ACCEL_I64: return (double)((const int64_t *)b)[i];
    case ACCEL_I32: return ((const int32_t *)b)[i];
    default: return ((const uint8_t *)b)[i];
    }
}
static void put(void *b, size_t i, accel_dtype dt, int v) {
    switch (dt) {
    case ACCEL_F64: ((double *)b)[i] = v; break;
    case ACCEL_F32: ((float *)b)[i] = (float)v; break;
    case ACCEL_F16: ((uint16_t *)b)[i] = code16(v, 0); break;
    case ACCEL_BF16: ((uint16_t *)b)[i] = code16(v, 1); break;
    case ACCEL_I64: ((int64_t *)b)[i] = v; break;
    case ACCEL_I32: ((int32_t *)b)[i] = v; break;
    default: ((uint8_t *)b)[i] = (uint8_t)v; break;
    }
}
static int val(int r, size_t i, accel_dtype dt) {
    return dt == ACCEL_U8 ? (int)((i * 7 + (size_t)r * 13) % 11) : (int)((i * 7 + (size_t)r * 13) % 11) - 5;
}
static double expect(size_t i, accel_dtype dt, accel_coll_op op) {
    double a = val(0, i, dt);
    for (int r = 1; r < P; ++r) {
        double v = val(r, i, dt);
        a = op == ACCEL_COLL_MAX ? (v > a ? v : a) : op == ACCEL_COLL_MIN ? (v < a ? v : a) : a + v;
    }
    return op == ACCEL_COLL_AVG ? a / P : a;
}

static void check_ops(accel_coll *c, accel_dtype dt, size_t n) {
    size_t es = accel_dtype_size(dt), i;
    unsigned char *h = (unsigned char *)calloc((size_t)P * n + 1, es), *o = (unsigned char *)calloc((size_t)P * n + 1, es);
    void *d = NULL, *e = NULL;
    int bad = 0, r;
    AT_EQ_INT(cudaMalloc(&d, (size_t)P * n * es + 1), cudaSuccess);
    AT_EQ_INT(cudaMalloc(&e, (size_t)P * n * es + 1), cudaSuccess);
    for (int op = 0; op < 4; ++op) {
        if (op == ACCEL_COLL_AVG && !accel_dtype_is_float(dt)) continue;
        for (i = 0; i < n; ++i) put(h, i, dt, val(R, i, dt));
        cudaMemcpy(d, h, n * es, cudaMemcpyHostToDevice);
        AT_EQ_INT(accel_coll_all_reduce(c, d, e, n, dt, (accel_coll_op)op), ACCEL_OK);
        AT_EQ_INT(accel_coll_synchronize(c), ACCEL_OK);
        cudaMemcpy(o, e, n * es, cudaMemcpyDeviceToHost);
        for (i = 0; i < n; ++i) {
            double w = expect(i, dt, (accel_coll_op)op);
            if (fabs(get(o, i, dt) - w) > (op == ACCEL_COLL_AVG ? fabs(w) / 100 + 1e-6 : 0)) bad++;
        }
    }
    /* broadcast, all_gather, reduce_scatter (sum), gather */
    for (i = 0; i < n; ++i) put(h, i, dt, val(R, i, dt));
    cudaMemcpy(d, h, n * es, cudaMemcpyHostToDevice);
    AT_EQ_INT(accel_coll_broadcast(c, d, n, dt, P - 1), ACCEL_OK);
    AT_EQ_INT(accel_coll_all_gather(c, d, e, n, dt), ACCEL_OK);
    AT_EQ_INT(accel_coll_synchronize(c), ACCEL_OK);
    cudaMemcpy(o, e, (size_t)P * n * es, cudaMemcpyDeviceToHost);
    for (r = 0; r < P; ++r)
        for (i = 0; i < n; ++i) bad += get(o, (size_t)r * n + i, dt) != val(P - 1, i, dt);
    for (i = 0; i < (size_t)P * n; ++i) put(h, i, dt, val(R, i, dt));
    cudaMemcpy(d, h, (size_t)P * n * es, cudaMemcpyHostToDevice);
    AT_EQ_INT(accel_coll_reduce_scatter(c, d, e, n, dt, ACCEL_COLL_SUM), ACCEL_OK);
    AT_EQ_INT(accel_coll_synchronize(c), ACCEL_OK);
    cudaMemcpy(o, e, n * es, cudaMemcpyDeviceToHost);
    for (i = 0; i < n; ++i) bad += get(o, i, dt) != expect((size_t)R * n + i, dt, ACCEL_COLL_SUM);
    AT_EQ_INT(accel_coll_gather(c, d, e, n, dt, 0), ACCEL_OK);
    AT_EQ_INT(accel_coll_synchronize(c), ACCEL_OK);
    if (R == 0) {
        cudaMemcpy(o, e, (size_t)P * n * es, cudaMemcpyDeviceToHost);
        for (r = 0; r < P; ++r)
            for (i = 0; i < n; ++i) bad += get(o, (size_t)r * n + i, dt) != val(r, i, dt);
    }
    AT_EQ_INT(bad, 0);
    cudaFree(d);
    cudaFree(e);
    free(h);
    free(o);
}

static void helpers(accel_coll *c) {
    /* pad_across_processes on a device tensor [R+1, 3] → [P, 3] (fill kernel + 2-D copy) */
    float hin[12], hout[12];
    void *d = NULL;
    accel_tensor t, out;
    int i, j;
    for (i = 0; i < (R + 1) * 3; ++i) hin[i] = (float)(10 * R + i);
    cudaMalloc(&d, sizeof hin);
    cudaMemcpy(d, hin, sizeof hin, cudaMemcpyHostToDevice);
    memset(&t, 0, sizeof t);
    t.ptr = d; t.dtype = ACCEL_F32; t.ndim = 2; t.shape[0] = R + 1; t.shape[1] = 3;
    AT_EQ_INT(accel_coll_pad_across_processes(c, &t, 0, -1.0, 1, &out), ACCEL_OK);
    AT_EQ_INT(out.shape[0], P);
    cudaMemcpy(hout, out.ptr, sizeof(float) * 3 * (size_t)P, cudaMemcpyDeviceToHost);
    for (i = 0; i < P; ++i)
        for (j = 0; j < 3; ++j) {
            int row = i - (P - (R + 1));
            AT_NEAR(hout[i * 3 + j], row >= 0 ? (float)(10 * R + row * 3 + j) : -1.0f, 0);
        }
    accel_coll_free(c, out.ptr);
    AT_EQ_INT(accel_coll_gather_rows(c, &t, &out), ACCEL_OK);
    AT_EQ_INT(out.shape[0], P * (P + 1) / 2);
    accel_coll_free(c, out.ptr);
    cudaFree(d);
    /* objects are host blobs even on the device backend */
    {
        accel_blobs b;
        memset(&b, 0, sizeof b);
        AT_EQ_INT(accel_gather_object(&acc, "xyz", (size_t)(R % 3) + 1, &b), ACCEL_OK);
        AT_EQ_INT(b.count, P);
        accel_blobs_deinit(&b);
    }
}

/* The module's staging and scratch buffers go through the Accelerator's allocators: counted. */
static at_gpu_count g_dev, g_pin;

static void run(accel_coll_backend be) {
    static const accel_dtype dts[] = {ACCEL_F64, ACCEL_F32, ACCEL_F16, ACCEL_BF16, ACCEL_I64, ACCEL_I32, ACCEL_U8};
    accel_coll *c = at_gpu_comm(&acc, be);
    if (!c) return;
    for (int k = 0; k < 7; ++k) {
        check_ops(c, dts[k], 1);
        check_ops(c, dts[k], 1031);
        check_ops(c, dts[k], (size_t)1048576 / accel_dtype_size(dts[k]) + 1);
    }
    helpers(c);
    /* NCCL stages host data (objects, shapes) in device memory and keeps a device scratch; MPI without CUDA-aware
       support stages device data in pinned host memory: all of it through acc's allocators, all of it freed */
    if (be == ACCEL_COLL_BACKEND_NCCL) AT_CHECK(g_dev.allocs > 0);
    at_gpu_comm_end(c, &g_dev, &g_pin);
}

int main(void) {
    accel_desc d;
    int rc, count = 0;
    AT_SKIP_WITHOUT_GPU(count);
    at_gpu_counting_desc(&d, &g_dev, &g_pin);
    if ((rc = at_gpu_init(&acc, &d, count, &P, &R)) != 0) return rc;
    at_gpu_each_backend(&acc, run);
    rc = at_finish("collectives_gpu");
    accel_shutdown(&acc);
    return rc;
}
