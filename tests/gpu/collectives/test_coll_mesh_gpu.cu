/* The process mesh with device buffers (NCCL between ranks: ncclCommSplit sub-communicators; one process: NONE
   contexts): every group's all-reduce of a device rank mask equals the members computed here. Exits 77 (meson:
   skipped) without a device, or with fewer devices than local ranks. */
#include "accel.h"
#include "accel_collectives.h"
#include "accel_test.h"
#include "accel_test_gpu.h"
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

int main(void) {
    accel_desc d;
    int rc;
    accel_coll *world = NULL;
    int count = 0;
    AT_SKIP_WITHOUT_GPU(count);
    memset(&d, 0, sizeof d);
    if ((rc = at_gpu_init(&acc, &d, count, &P, &R)) != 0) return rc;
    AT_EQ_INT(accel_coll_create(&acc, NULL, &world), ACCEL_OK);
    AT_CHECK(P == 1 || accel_coll_get_backend(world) != ACCEL_COLL_BACKEND_NONE);
    if (world) {
        mesh_groups(world);
        accel_coll_destroy(world);
    }
    rc = at_finish("collectives_mesh_gpu");
    accel_shutdown(&acc);
    return rc;
}
