/* Harness helpers of the CUDA tests (tests/gpu): the skip without a device, allocators that count what a module takes
   from desc.pinned_allocator / desc.device_allocator, host <-> device copies that check their CUDA calls, and a small
   deterministic generator. Include after accel_test.h, in a .cu file. */
#ifndef ACCEL_TEST_GPU_H
#define ACCEL_TEST_GPU_H
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* In main: exits 77 (meson: skipped) when no CUDA device is present; count receives the number of devices. */
#define AT_SKIP_WITHOUT_GPU(count)                                                                                  \
    do {                                                                                                            \
        if (cudaGetDeviceCount(&(count)) != cudaSuccess || (count) == 0) {                                          \
            printf("no CUDA device: skipped\n");                                                                    \
            return 77;                                                                                              \
        }                                                                                                           \
    } while (0)
/* Pinned and device allocators (user_data: an at_gpu_count) that count the blocks they hand out and take back. */
typedef struct at_gpu_count { long allocs, frees; } at_gpu_count;
static inline void *at_pinned_count_alloc(size_t n, void *u) {
    void *p = NULL;
    if (cudaHostAlloc(&p, n, cudaHostAllocDefault) != cudaSuccess) return NULL;
    ((at_gpu_count *)u)->allocs++;
    return p;
}
static inline void at_pinned_count_free(void *p, void *u) { ((at_gpu_count *)u)->frees++; cudaFreeHost(p); }
static inline void *at_device_count_alloc(size_t n, void *u) {
    void *p = NULL;
    if (cudaMalloc(&p, n) != cudaSuccess) return NULL;
    ((at_gpu_count *)u)->allocs++;
    return p;
}
static inline void at_device_count_free(void *p, void *u) { ((at_gpu_count *)u)->frees++; cudaFree(p); }

#ifdef ACCEL_H_INCLUDED
/* A zeroed desc whose device and pinned allocators are the counting ones above (dev or pin NULL: the default). */
static inline void at_gpu_counting_desc(accel_desc *d, at_gpu_count *dev, at_gpu_count *pin) {
    memset(d, 0, sizeof *d);
    if (dev) {
        d->device_allocator.alloc = at_device_count_alloc;
        d->device_allocator.free = at_device_count_free;
        d->device_allocator.user_data = dev;
    }
    if (pin) {
        d->pinned_allocator.alloc = at_pinned_count_alloc;
        d->pinned_allocator.free = at_pinned_count_free;
        d->pinned_allocator.user_data = pin;
    }
}
/* accel_init for a GPU test (count: the devices AT_SKIP_WITHOUT_GPU found) with one device per local rank: 0, or
   main's exit code — 1 when accel_init failed, 77 (skipped) when the node has fewer devices than local ranks. *size
   and *rank (either may be NULL) receive the process count and index. */
static inline int at_gpu_init(accel *acc, const accel_desc *d, int count, int *size, int *rank) {
    if (accel_init(acc, d) != ACCEL_OK) {
        fprintf(stderr, "accel_init: %s\n", accel_last_error(acc));
        return 1;
    }
    if (count < acc->local_num_processes) {
        printf("%d devices for %d local ranks: skipped\n", count, acc->local_num_processes);
        accel_shutdown(acc);
        return 77;
    }
    if (size) *size = acc->num_processes;
    if (rank) *rank = acc->process_index;
    return 0;
}
#endif
#ifdef ACCEL_COLLECTIVES_H_INCLUDED
/* run(be) for each backend that moves device buffers here: NCCL (an nvcc build with ACCEL_WITH_NCCL) and, with
   several processes under MPI, MPI (CUDA-aware or staged through pinned memory). */
static inline void at_gpu_each_backend(const accel *acc, void (*run)(accel_coll_backend)) {
#ifdef ACCEL_WITH_NCCL
    run(ACCEL_COLL_BACKEND_NCCL);
#endif
    if (acc->num_processes > 1 && acc->mpi_active) run(ACCEL_COLL_BACKEND_MPI);
}
/* A communicator of backend be over acc's group with device buffers and a 60 s deadline (checked); NULL if not. */
static inline accel_coll *at_gpu_comm(accel *acc, accel_coll_backend be) {
    accel_coll *c = NULL;
    accel_coll_desc cd;
    memset(&cd, 0, sizeof cd);
    cd.backend = be;
    cd.timeout_ms = 60000;
    AT_EQ_INT(accel_coll_create(acc, &cd, &c), ACCEL_OK);
    AT_CHECK_MSG(c != NULL, accel_last_error(acc));
    if (c) AT_EQ_INT(accel_coll_uses_device_buffers(c), 1);
    return c;
}
/* Ends what at_gpu_comm began: a barrier, the communicator destroyed, and every device (dev) and pinned (pin) block
   the counting allocators handed out given back. */
static inline void at_gpu_comm_end(accel_coll *c, const at_gpu_count *dev, const at_gpu_count *pin) {
    AT_EQ_INT(accel_coll_barrier(c), ACCEL_OK);
    accel_coll_destroy(c);
    AT_EQ_INT(dev->allocs, dev->frees);
    AT_EQ_INT(pin->allocs, pin->frees);
}
#endif

/* A device copy of bytes of host memory (at least one byte is allocated); free it with cudaFree. */
static inline void *at_dev_copy(const void *h, size_t bytes) {
    void *d = NULL;
    AT_CHECK(cudaMalloc(&d, bytes ? bytes : 1) == cudaSuccess);
    if (bytes) AT_CHECK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice) == cudaSuccess);
    return d;
}
/* Device → host after every queued kernel finished. */
static inline void at_host_copy(void *h, const void *d, size_t bytes) {
    AT_CHECK(cudaDeviceSynchronize() == cudaSuccess);
    if (bytes) AT_CHECK(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
}

/* xorshift64 on a caller's state: 32 random bits, and a float uniform in [lo, hi). */
static inline uint32_t at_rnd32(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return (uint32_t)(*s >> 20);
}
static inline float at_rndf(uint64_t *s, float lo, float hi) {
    return lo + (hi - lo) * (float)(at_rnd32(s) & 0xffffff) / 16777216.0f;
}
#endif
