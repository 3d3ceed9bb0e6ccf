/* The process mesh and join with device buffers (NCCL between ranks: ncclCommSplit sub-communicators; one process:
   NONE contexts): every group's all-reduce of a device rank mask equals the members computed here; join with device
   gradients (the zero shadows and the pre-scaling kernel) against host arithmetic, and the final broadcast from the
   last joiner. Exits 77 (meson: skipped) without a device, or with fewer devices than local ranks. */
#include "accel.h"
#include "accel_collectives.h"
#include "accel_test.h"
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <string.h>

static accel acc;
static int P, R;

static void coords(const int *sz, int rank, int *co) {
    for (int d = 4; d >= 0; --d) { co[d] = rank % sz[d]; rank /= sz[d]; }
}
static int in_group(int g, int d) {
    static const int dims[ACCEL_COLL_MESH_COUNT][5] = {{1, 0, 0, 0, 0}, {0, 1, 0, 0, 0}, {0, 0, 1, 0, 0}, {0, 0, 0, 1, 0},
                                                      {0, 0, 0, 0, 1}, {0, 1, 1, 0, 0}, {0, 0, 1, 1, 0}, {0, 1, 1, 1, 0}};
    return dims[g][d];
}

static void mesh_groups(accel_coll *world) {
    accel_coll_mesh *m = NULL;
    accel_coll_mesh_desc md;
    int sz[5] = {1, 1, 1, 1, 1}, me[5], co[5];
    int64_t *dv = NULL;
    memset(&md, 0, sizeof md);
    md.tp_size = P % 2 == 0 ? 2 : 1;
    md.dp_shard_size = P / md.tp_size;
    sz[2] = md.dp_shard_size; sz[4] = md.tp_size;
    AT_EQ_INT(accel_coll_mesh_create(world, &md, &m), ACCEL_OK);
    if (!m) return;
    coords(sz, R, me);
    AT_EQ_INT(cudaMalloc((void **)&dv, sizeof *dv), cudaSuccess);
    for (int g = 0; g < ACCEL_COLL_MESH_COUNT; ++g) {
        accel_coll *c = accel_coll_mesh_comm(m, (accel_coll_mesh_dim)g);
        int64_t mask = (int64_t)1 << R, want = 0;
        for (int r = 0; r < P; ++r) {
            int same = 1;
            coords(sz, r, co);
            for (int d = 0; d < 5; ++d)
                if (!in_group(g, d) && co[d] != me[d]) same = 0;
            if (same) want |= (int64_t)1 << r;
        }
        AT_EQ_INT(cudaMemcpy(dv, &mask, sizeof mask, cudaMemcpyHostToDevice), cudaSuccess);
        AT_EQ_INT(accel_coll_all_reduce(c, dv, dv, 1, ACCEL_I64, ACCEL_COLL_SUM), ACCEL_OK);
        AT_EQ_INT(accel_coll_synchronize(c), ACCEL_OK);
        AT_EQ_INT(cudaMemcpy(&mask, dv, sizeof mask, cudaMemcpyDeviceToHost), cudaSuccess);
        AT_EQ_INT(mask, want);
    }
    cudaFree(dv);
    accel_coll_mesh_destroy(m);
}

/* rank r has r + 1 steps; gradient element i at step s = r + 1 + s + i; DDP's default divisor P */
static void join_device(accel_coll *world) {
    accel_coll_reducer *red = NULL;
    accel_tensor gt, pt;
    float *dg = NULL, *dp = NULL, h[4];
    memset(&gt, 0, sizeof gt);
    AT_EQ_INT(cudaMalloc((void **)&dg, sizeof h), cudaSuccess);
    AT_EQ_INT(cudaMalloc((void **)&dp, sizeof h), cudaSuccess);
    gt.name = "g"; gt.ptr = dg; gt.dtype = ACCEL_F32; gt.ndim = 1; gt.shape[0] = 4;
    pt = gt;
    pt.name = "w"; pt.ptr = dp;
    for (int i = 0; i < 4; ++i) h[i] = 10.0f * R;
    AT_EQ_INT(cudaMemcpy(dp, h, sizeof h, cudaMemcpyHostToDevice), cudaSuccess);
    AT_EQ_INT(accel_coll_reducer_create(world, NULL, &red), ACCEL_OK);
    AT_EQ_INT(accel_coll_reducer_add(red, &gt, 1), ACCEL_OK);
    AT_EQ_INT(accel_coll_reducer_join_begin(red, NULL), ACCEL_OK);
    acc.sync_gradients = 1;
    for (int s = 0; s < R + 1; ++s) {
        for (int i = 0; i < 4; ++i) h[i] = (float)(R + 1 + s + i);
        AT_EQ_INT(cudaMemcpy(dg, h, sizeof h, cudaMemcpyHostToDevice), cudaSuccess);
        AT_EQ_INT(accel_coll_reducer_wait(red), ACCEL_OK);
        AT_EQ_INT(accel_coll_synchronize(world), ACCEL_OK);
        AT_EQ_INT(cudaMemcpy(h, dg, sizeof h, cudaMemcpyDeviceToHost), cudaSuccess);
        for (int i = 0; i < 4; ++i) {
            float want = 0.0f;
            for (int q = s; q < P; ++q) want += (float)(q + 1 + s + i) * (float)(1.0 / P); /* ranks q >= s reduce */
            AT_NEAR(h[i], want, 1e-5 * (1 + want));
        }
        AT_EQ_INT(accel_coll_reducer_join_active(red), P - s);
    }
    AT_EQ_INT(accel_coll_reducer_join_end(red, &pt, 1), ACCEL_OK);
    AT_EQ_INT(accel_coll_synchronize(world), ACCEL_OK);
    AT_EQ_INT(cudaMemcpy(h, dp, sizeof h, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int i = 0; i < 4; ++i) AT_NEAR(h[i], 10.0f * (P - 1), 0); /* the last joiner: rank P-1 */
    accel_coll_reducer_destroy(red);
    cudaFree(dg);
    cudaFree(dp);
}

int main(void) {
    accel_desc d;
    accel_coll *world = NULL;
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        printf("no CUDA device: skipped\n");
        return 77;
    }
    memset(&d, 0, sizeof d);
    if (accel_init(&acc, &d) != ACCEL_OK) {
        fprintf(stderr, "accel_init: %s\n", accel_last_error(&acc));
        return 1;
    }
    P = acc.num_processes;
    R = acc.process_index;
    if (count < acc.local_num_processes) {
        printf("%d devices for %d local ranks: skipped\n", count, acc.local_num_processes);
        accel_shutdown(&acc);
        return 77;
    }
    AT_EQ_INT(accel_coll_create(&acc, NULL, &world), ACCEL_OK);
    AT_CHECK(P == 1 || accel_coll_get_backend(world) != ACCEL_COLL_BACKEND_NONE);
    if (world) {
        mesh_groups(world);
        join_device(world);
        accel_coll_destroy(world);
    }
    int rc = at_finish("collectives_mesh_gpu");
    accel_shutdown(&acc);
    return rc;
}
