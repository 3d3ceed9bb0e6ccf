/* GPU paths of accel_safetensors.h and accel_ckpt.h against the CPU path: a safetensors file written from device
   buffers (staged through pinned memory, double-buffered, chunks larger than the staging buffer) must be byte-identical
   to the file written from the same data on the host; loading into device buffers must give back the bytes;
   save_state/load_state with device-resident model tensors round-trips; an async save_state from device memory
   (issue 32: the snapshot is cudaMemcpyAsync on acc->stream + an event the writer thread waits for) holds the values
   at the call although the tensor is overwritten on acc->stream right after it returns, and its files are
   byte-identical to the synchronous save's — with the whole state snapshotted and with a budget that leaves half of
   it to the calling thread; the staging buffers and the snapshot come from desc.pinned_allocator (a counting one
   here) and all go back to it. Exits 77 (skip) without a CUDA device. */
#include "accel_safetensors.h"
#include "accel_ckpt.h"
#include "accel_test.h"
#include "accel_test_gpu.h"
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static unsigned char *slurp(const char *p, size_t *n) {
    FILE *f = fopen(p, "rb");
    unsigned char *b;
    long sz;
    if (!f) return NULL;
    fseek(f, 0, SEEK_END); sz = ftell(f); fseek(f, 0, SEEK_SET);
    b = (unsigned char *)malloc((size_t)sz + 1);
    if (fread(b, 1, (size_t)sz, f) != (size_t)sz) sz = 0;
    fclose(f);
    *n = (size_t)sz;
    return b;
}

int main(void) {
    int count = 0, i;
    accel acc;
    accel_desc d;
    char tmpl[] = "/tmp/accel_ckpt_gpu_XXXXXX", ph[512], pd[512], sdir[512];
    const size_t n_big = (size_t)5 * 1000 * 1000 + 3; /* > 2 staging buffers of 8 MiB, odd tail */
    float *hbig, *dbig, *back;
    uint16_t hsmall[7], *dsmall;
    accel_tensor th[2], td[2];
    size_t nh = 0, nd = 0;
    unsigned char *bh, *bd;
    accel_st_file *f = NULL;
    at_gpu_count pc = {0, 0};
    AT_SKIP_WITHOUT_GPU(count);
    at_gpu_counting_desc(&d, NULL, &pc);
    d.no_mpi = 1;
    if (accel_init(&acc, &d) != ACCEL_OK) { fprintf(stderr, "%s\n", accel_last_error(&acc)); return 1; }
    if (!mkdtemp(tmpl)) return 1;
    hbig = (float *)malloc(n_big * sizeof(float));
    back = (float *)malloc(n_big * sizeof(float));
    for (i = 0; i < (int)n_big; ++i) hbig[i] = (float)i * 0.5f - 3.0f;
    for (i = 0; i < 7; ++i) hsmall[i] = (uint16_t)(0x3c00 + i);
    AT_EQ_INT(cudaMalloc((void **)&dbig, n_big * sizeof(float)), cudaSuccess);
    AT_EQ_INT(cudaMalloc((void **)&dsmall, sizeof hsmall), cudaSuccess);
    cudaMemcpy(dbig, hbig, n_big * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemcpy(dsmall, hsmall, sizeof hsmall, cudaMemcpyHostToDevice);
    memset(th, 0, sizeof th);
    th[0].name = "big"; th[0].dtype = ACCEL_F32; th[0].ndim = 1; th[0].shape[0] = (int64_t)n_big; th[0].ptr = hbig;
    th[1].name = "small"; th[1].dtype = ACCEL_F16; th[1].ndim = 1; th[1].shape[0] = 7; th[1].ptr = hsmall;
    memcpy(td, th, sizeof td);
    td[0].ptr = dbig; td[1].ptr = dsmall;
    snprintf(ph, sizeof ph, "%s/host.safetensors", tmpl);
    snprintf(pd, sizeof pd, "%s/device.safetensors", tmpl);
    AT_EQ_INT(accel_st_save(&acc, ph, th, 2, NULL, 0), ACCEL_OK);
    AT_EQ_INT(accel_st_save(&acc, pd, td, 2, NULL, 0), ACCEL_OK);
    bh = slurp(ph, &nh);
    bd = slurp(pd, &nd);
    AT_CHECK(bh && bd && nh == nd && !memcmp(bh, bd, nh));
    free(bh); free(bd);
    AT_CHECK(pc.allocs >= 2 && pc.frees == pc.allocs); /* two staging buffers, through the hook, returned */
    /* load into device buffers (zeroed first), compare on the host */
    cudaMemset(dbig, 0, n_big * sizeof(float));
    cudaMemset(dsmall, 0, sizeof hsmall);
    AT_EQ_INT(accel_st_file_open(&acc, ph, &f), ACCEL_OK);
    AT_EQ_INT(accel_st_file_load_all(f, td, 2), ACCEL_OK);
    accel_st_file_destroy(f);
    cudaMemcpy(back, dbig, n_big * sizeof(float), cudaMemcpyDeviceToHost);
    AT_CHECK(!memcmp(back, hbig, n_big * sizeof(float)));
    {
        uint16_t s2[7];
        cudaMemcpy(s2, dsmall, sizeof s2, cudaMemcpyDeviceToHost);
        AT_CHECK(!memcmp(s2, hsmall, sizeof s2));
    }
    /* save_state / load_state with device tensors */
    {
        accel_ckpt *ck = NULL;
        snprintf(sdir, sizeof sdir, "%s/state", tmpl);
        AT_EQ_INT(accel_ckpt_create(&acc, NULL, &ck), ACCEL_OK);
        AT_EQ_INT(accel_ckpt_register_model(ck, td, 2), ACCEL_OK);
        AT_EQ_INT(accel_ckpt_save_state(ck, sdir, NULL, 0), ACCEL_OK);
        cudaMemset(dbig, 0, n_big * sizeof(float));
        AT_EQ_INT(accel_ckpt_load_state(ck, sdir), ACCEL_OK);
        cudaMemcpy(back, dbig, n_big * sizeof(float), cudaMemcpyDeviceToHost);
        AT_CHECK(!memcmp(back, hbig, n_big * sizeof(float)));
        accel_ckpt_destroy(ck);
    }
    /* async save_state from device memory */
    for (i = 0; i < 2; ++i) {
        accel_ckpt *ck = NULL;
        accel_ckpt_desc cd;
        char adir[512], pa[700], ps[700];
        const char *files[2] = {"model.safetensors", "checkpoint_complete.json"};
        int k;
        memset(&cd, 0, sizeof cd);
        cd.async = ACCEL_ON;
        cd.async_max_bytes = i ? (uint64_t)(n_big * sizeof(float) / 2) : 0;
        snprintf(adir, sizeof adir, "%s/async%d", tmpl, i);
        AT_EQ_INT(cudaMemcpy(dbig, hbig, n_big * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
        AT_EQ_INT(accel_ckpt_create(&acc, &cd, &ck), ACCEL_OK);
        AT_EQ_INT(accel_ckpt_register_model(ck, td, 2), ACCEL_OK);
        AT_EQ_INT(accel_ckpt_save_state(ck, adir, NULL, 0), ACCEL_OK);
        /* the next step's writes, queued behind the snapshot's copies on the same stream */
        AT_EQ_INT(cudaMemsetAsync(dbig, 0xff, n_big * sizeof(float), (cudaStream_t)acc.stream), cudaSuccess);
        AT_EQ_INT(accel_ckpt_wait(ck), ACCEL_OK);
        for (k = 0; k < 2; ++k) {
            size_t na = 0, ns = 0;
            unsigned char *ba, *bs;
            snprintf(pa, sizeof pa, "%s/%s", adir, files[k]);
            snprintf(ps, sizeof ps, "%s/%s", sdir, files[k]);
            ba = slurp(pa, &na);
            bs = slurp(ps, &ns);
            AT_CHECK(ba && bs && na == ns && !memcmp(ba, bs, na));
            free(ba);
            free(bs);
        }
        AT_EQ_INT(cudaMemset(dbig, 0, n_big * sizeof(float)), cudaSuccess);
        AT_EQ_INT(accel_ckpt_load_state(ck, adir), ACCEL_OK);
        cudaMemcpy(back, dbig, n_big * sizeof(float), cudaMemcpyDeviceToHost);
        AT_CHECK(!memcmp(back, hbig, n_big * sizeof(float)));
        accel_ckpt_destroy(ck);
    }
    AT_EQ_INT(pc.frees, pc.allocs);
    cudaFree(dbig);
    cudaFree(dsmall);
    free(hbig);
    free(back);
    {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpl);
        if (system(cmd) != 0) fprintf(stderr, "cleanup failed\n");
    }
    accel_shutdown(&acc);
    return at_finish("ckpt-gpu");
}
