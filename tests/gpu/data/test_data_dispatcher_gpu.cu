/* accel_data.h's dispatcher with device buffers (desc.device_rows / desc.device_out), one process on a GPU: a loader
   whose rows are written by a kernel into one device buffer it reuses for every batch, and device outputs that are
   read back only after several next() calls (each copy is asynchronous on acc.stream; the host buffer it reads must
   not be refilled before it is done). Every batch of two epochs (variable lengths, batches of ~0.5-3 MiB) equals, byte
   for byte, what the host-buffer dispatcher hands out for the same loader computed on the host, with the same counts
   and end flags; and the device path's buffers come back (destroy waits for the last copy). Exits 77 without a
   device. */
#include "accel_data.h"
#include "accel_test.h"
#include "accel_test_gpu.h"
#include <cuda_runtime.h>

#define ROW 1024 /* floats per row: 4 KiB */
#define NB 6
static const int lens[NB] = {500, 300, 800, 1, 600, 77};

static ACCEL_HD float value(int batch, int row, int col) { return (float)(batch * 1000003 + row * 1031 + col); }

static __global__ void fill_kernel(float *rows, int batch, int n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (int64_t)n * ROW) rows[i] = value(batch, (int)(i / ROW), (int)(i % ROW));
}

typedef struct loader {
    int next, device;
    float *rows;        /* device (one buffer, rewritten every batch) or host */
    cudaStream_t stream;
} loader;

static accel_result fetch(void *user, const void **rows, int64_t *nrows, int *end) {
    loader *l = (loader *)user;
    int b = l->next, n, i, c;
    if (b >= NB) { l->next = 0; *end = 1; return ACCEL_OK; }
    n = lens[b];
    if (l->device) {
        fill_kernel<<<(unsigned)(((int64_t)n * ROW + 255) / 256), 256, 0, l->stream>>>(l->rows, b, n);
        if (cudaGetLastError() != cudaSuccess) return accel_set_error(NULL, ACCEL_ERR_CUDA, "fill_kernel");
    } else {
        for (i = 0; i < n; ++i)
            for (c = 0; c < ROW; ++c) l->rows[(size_t)i * ROW + c] = value(b, i, c);
    }
    l->next++;
    *rows = l->rows;
    *nrows = n;
    return ACCEL_OK;
}

int main(void) {
    int count = 0;
    AT_SKIP_WITHOUT_GPU(count);
    {
        accel acc;
        accel_desc d;
        accel_data_dispatcher *dh = NULL, *dd = NULL;
        accel_data_dispatcher_desc desc;
        loader lh, ld;
        const size_t maxrows = 800, bytes = maxrows * ROW * sizeof(float);
        float *outs[3] = {NULL, NULL, NULL}, *host_out = (float *)malloc(bytes), *back = (float *)malloc(bytes);
        float *want[3] = {(float *)malloc(bytes), (float *)malloc(bytes), (float *)malloc(bytes)};
        int64_t nh, nd, wn[3];
        int eh, ed, epoch, k, same = 1, batches = 0;
        memset(&d, 0, sizeof d);
        d.no_mpi = 1;
        AT_EQ_INT(accel_init(&acc, &d), ACCEL_OK);
        AT_CHECK(acc.device >= 0);
        memset(&lh, 0, sizeof lh);
        memset(&ld, 0, sizeof ld);
        lh.rows = (float *)malloc(bytes);
        ld.device = 1;
        ld.stream = (cudaStream_t)acc.stream;
        AT_EQ_INT(cudaMalloc((void **)&ld.rows, bytes), cudaSuccess);
        for (k = 0; k < 3; ++k) AT_EQ_INT(cudaMalloc((void **)&outs[k], bytes), cudaSuccess);
        memset(&desc, 0, sizeof desc);
        desc.row_bytes = ROW * sizeof(float);
        desc.fetch = fetch;
        desc.user = &lh;
        AT_EQ_INT(accel_data_dispatcher_create(&acc, &desc, &dh), ACCEL_OK);
        desc.user = &ld;
        desc.device_rows = 1;
        desc.device_out = 1;
        AT_EQ_INT(accel_data_dispatcher_create(&acc, &desc, &dd), ACCEL_OK);
        for (epoch = 0; epoch < 2; ++epoch)
            for (k = 0;; ++k) {
                /* three device batches in flight before the first is read back */
                AT_EQ_INT(accel_data_dispatcher_next(dh, host_out, (int64_t)maxrows, &nh, &eh), ACCEL_OK);
                AT_EQ_INT(accel_data_dispatcher_next(dd, outs[k % 3], (int64_t)maxrows, &nd, &ed), ACCEL_OK);
                AT_EQ_INT(nd, nh);
                AT_EQ_INT(ed, eh);
                if (eh || ed) break;
                memcpy(want[k % 3], host_out, (size_t)nh * ROW * sizeof(float));
                wn[k % 3] = nh;
                batches++;
                if (k % 3 == 2 || k == NB - 1) {
                    int j;
                    for (j = k - k % 3; j <= k; ++j) {
                        size_t n = (size_t)wn[j % 3] * ROW * sizeof(float);
                        AT_EQ_INT(cudaMemcpyAsync(back, outs[j % 3], n, cudaMemcpyDeviceToHost,
                                                  (cudaStream_t)acc.stream), cudaSuccess);
                        AT_EQ_INT(cudaStreamSynchronize((cudaStream_t)acc.stream), cudaSuccess);
                        if (memcmp(back, want[j % 3], n)) same = 0;
                    }
                }
            }
        AT_EQ_INT(batches, 2 * NB);
        AT_CHECK_MSG(same, "device slices == host slices, byte for byte");
        accel_data_dispatcher_destroy(dd);
        accel_data_dispatcher_destroy(dh);
        for (k = 0; k < 3; ++k) { cudaFree(outs[k]); free(want[k]); }
        cudaFree(ld.rows);
        free(lh.rows);
        free(host_out);
        free(back);
        accel_shutdown(&acc);
    }
    return at_finish("data-dispatcher-gpu");
}
