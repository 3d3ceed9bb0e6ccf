/* accel_data.h on a GPU: (1) the shuffled-sampler permutation computed by a kernel (the ACCEL_HD helper) equals
   the CPU's, index for index; (2) the double-buffered stager copies batches to the device on acc.stream — the
   device bytes equal what was written to the pinned host buffers, also when the next batch is filled while the
   previous copy may still be in flight; its pinned and device buffers come from the Accelerator's pinned and device
   allocators (counting ones here, which see every buffer come back). Exits 77 (meson skip) without a device. */
#include "accel_data.h"
#include "accel_test.h"
#include "accel_test_gpu.h"
#include <cuda_runtime.h>

static __global__ void perm_kernel(accel_data_sampler s, int64_t n, int64_t *out) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = accel_data_sampler_index(&s, i);
}

int main(void) {
    int count = 0;
    AT_SKIP_WITHOUT_GPU(count);
    {
        accel_data_sampler s;
        int64_t n = 1000003, i, *d_out = NULL;
        int64_t *h = (int64_t *)malloc(sizeof(int64_t) * (size_t)n);
        int same = 1;
        AT_EQ_INT(accel_data_sampler_init(NULL, &s, n, 1, 42), ACCEL_OK);
        accel_data_sampler_set_epoch(&s, 3);
        AT_EQ_INT(cudaMalloc(&d_out, sizeof(int64_t) * (size_t)n), cudaSuccess);
        perm_kernel<<<(unsigned)((n + 255) / 256), 256>>>(s, n, d_out);
        AT_EQ_INT(cudaGetLastError(), cudaSuccess);
        AT_EQ_INT(cudaMemcpy(h, d_out, sizeof(int64_t) * (size_t)n, cudaMemcpyDeviceToHost), cudaSuccess);
        for (i = 0; i < n; ++i)
            if (h[i] != accel_data_sampler_index(&s, i)) { same = 0; break; }
        AT_CHECK_MSG(same, "GPU permutation == CPU permutation");
        cudaFree(d_out);
        free(h);
    }
    {
        accel acc;
        accel_desc d;
        accel_data_stager st;
        const size_t bytes = (size_t)8 << 20;
        unsigned char *check = (unsigned char *)malloc(bytes);
        int step, ok = 1;
        at_gpu_count pc = {0, 0}, dc = {0, 0};
        at_gpu_counting_desc(&d, &dc, &pc);
        d.no_mpi = 1;
        AT_EQ_INT(accel_init(&acc, &d), ACCEL_OK);
        AT_CHECK(acc.device >= 0);
        AT_EQ_INT(accel_data_stager_init(&acc, &st, bytes), ACCEL_OK);
        AT_EQ_INT(pc.allocs, 2);
        AT_EQ_INT(dc.allocs, 2);
        for (step = 0; step < 6; ++step) {
            void *host = NULL, *dev = NULL;
            AT_EQ_INT(accel_data_stager_host(&st, &host), ACCEL_OK);
            memset(host, step + 1, bytes);
            AT_EQ_INT(accel_data_stager_submit(&st, &dev), ACCEL_OK);
            AT_CHECK(dev != host);
            if (step % 2 == 1) { /* read back on the same stream: ordered after the copy */
                AT_EQ_INT(cudaMemcpyAsync(check, dev, bytes, cudaMemcpyDeviceToHost, (cudaStream_t)acc.stream), cudaSuccess);
                AT_EQ_INT(cudaStreamSynchronize((cudaStream_t)acc.stream), cudaSuccess);
                if (check[0] != step + 1 || check[bytes - 1] != step + 1) ok = 0;
            }
        }
        AT_CHECK_MSG(ok, "staged device bytes == host bytes");
        accel_data_stager_deinit(&st);
        AT_EQ_INT(pc.frees, 2);
        AT_EQ_INT(dc.frees, 2);
        /* a small batch gets a ring of 8 slots: copies queue without the host waiting; each batch's device copy
           holds its own bytes when read back, and stays intact for the next 7 submits (read back all 8 at the end) */
        {
            const size_t small = (size_t)64 << 10;
            void *devs[24];
            int s8;
            AT_EQ_INT(accel_data_stager_init(&acc, &st, small), ACCEL_OK);
            AT_EQ_INT(st.nslots, 8);
            AT_EQ_INT(pc.allocs, 2 + 8);
            for (step = 0; step < 24; ++step) {
                void *host = NULL;
                AT_EQ_INT(accel_data_stager_host(&st, &host), ACCEL_OK);
                memset(host, 0x40 + step, small);
                AT_EQ_INT(accel_data_stager_submit(&st, &devs[step]), ACCEL_OK);
            }
            for (s8 = 16; s8 < 24; ++s8) {
                AT_EQ_INT(cudaMemcpyAsync(check, devs[s8], small, cudaMemcpyDeviceToHost, (cudaStream_t)acc.stream), cudaSuccess);
                AT_EQ_INT(cudaStreamSynchronize((cudaStream_t)acc.stream), cudaSuccess);
                AT_CHECK_MSG(check[0] == 0x40 + s8 && check[small - 1] == 0x40 + s8, "each ring slot holds its own batch");
            }
            AT_CHECK(devs[16] == devs[8] && devs[16] != devs[17]); /* the ring wraps after 8 */
            accel_data_stager_deinit(&st);
            AT_EQ_INT(pc.frees, 2 + 8);
            AT_EQ_INT(dc.frees, 2 + 8);
        }
        accel_shutdown(&acc);
        free(check);
    }
    return at_finish("data-gpu");
}
