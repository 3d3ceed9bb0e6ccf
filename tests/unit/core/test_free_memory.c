/* accel_free_memory / accel_clear (Accelerate's free_memory): the Accelerator's scratch goes back to its allocator,
   the next use allocates a fresh one (built with AddressSanitizer: a stale pointer kept anywhere would be a
   use-after-free), acc->step restarts the accumulation window while sync_gradients and the counters stay, and a
   reducer and a data shard created before keep working. The implementation is compiled into this TU (ACCEL_STATIC)
   so the private scratch is visible. */
#define ACCEL_IMPLEMENTATION
#define ACCEL_STATIC
#include "accel.h"
#include "accel_collectives.h"
#include "accel_ddp.h"
#include "accel_data.h"
#include "accel_test.h"
#include <string.h>

static long live;
static void *c_alloc(size_t n, void *u) { (void)u; live++; return malloc(n); }
static void c_free(void *p, void *u) { (void)u; if (p) { live--; free(p); } }

int main(void) {
    accel acc, zero;
    accel_desc d;
    accel_coll *c;
    accel_ddp *red;
    accel_data_shard sh;
    accel_data_shard_desc sd;
    float g[4] = {1, 2, 3, 4};
    accel_tensor gt;
    int64_t idx[8], cnt = 0;
    int i;
    long before;
    unsigned char *s1, *s2;
    memset(&d, 0, sizeof d);
    d.cpu = 1;
    d.no_mpi = 1;
    d.gradient_accumulation_steps = 4;
    d.host_allocator.alloc = c_alloc;
    d.host_allocator.free = c_free;
    AT_EQ_INT(accel_init(&acc, &d), ACCEL_OK);
    AT_EQ_INT(accel_coll_create(&acc, NULL, &c), ACCEL_OK);
    AT_EQ_INT(accel_ddp_create(c, NULL, &red), ACCEL_OK);
    gt = at_vec("g", g, ACCEL_F32, 4);
    AT_EQ_INT(accel_ddp_add(red, &gt, 1), ACCEL_OK);
    memset(&sd, 0, sizeof sd);
    sd.dataset_len = 10;
    sd.batch_size = 3;
    AT_EQ_INT(accel_data_shard_init(&acc, &sh, &sd), ACCEL_OK);
    AT_EQ_INT(accel_data_shard_next(&sh, idx, &cnt), ACCEL_OK);
    AT_EQ_INT((int)cnt, 3);

    s1 = (unsigned char *)accel__device_scratch(&acc, 10000);
    AT_CHECK(s1 != NULL);
    memset(s1, 0xab, 10000);
    for (i = 0; i < 3; ++i) accel_accumulate_begin(&acc);
    AT_EQ_INT(acc.step, 3);
    AT_EQ_INT(acc.sync_gradients, 0);
    before = live;
    AT_EQ_INT(accel_free_memory(&acc), ACCEL_OK);
    AT_EQ_INT(live, before - 1); /* the scratch went back to the allocator */
    AT_EQ_INT(acc.step, 0);
    AT_EQ_INT(acc.sync_gradients, 0); /* Accelerate resets only Accelerator.step */
    AT_EQ_INT(accel_clear(&acc), ACCEL_OK); /* twice: nothing left to free */
    AT_EQ_INT(live, before - 1);
    s2 = (unsigned char *)accel__device_scratch(&acc, 100); /* a fresh block, written whole (ASan checks) */
    AT_CHECK(s2 != NULL);
    memset(s2, 0xcd, 100);
    AT_EQ_INT(live, before);
    /* the accumulation window restarts: three non-sync micro-batches, then a sync one */
    for (i = 1; i <= 4; ++i) {
        accel_accumulate_begin(&acc);
        AT_EQ_INT(acc.sync_gradients, i == 4);
    }
    /* objects made before keep working */
    AT_EQ_INT(accel_ddp_wait(red), ACCEL_OK);
    AT_CHECK(g[0] == 1 && g[3] == 4); /* one process: DDP's average of one */
    AT_EQ_INT(accel_data_shard_next(&sh, idx, &cnt), ACCEL_OK);
    AT_EQ_INT((int)cnt, 3);
    AT_EQ_INT((int)idx[0], 3);
    accel_data_shard_deinit(&sh);
    accel_ddp_destroy(red);
    accel_coll_destroy(c);
    accel_shutdown(&acc);
    AT_EQ_INT(live, 0);
    /* an Accelerator that was never initialized: a message, nothing done */
    memset(&zero, 0, sizeof zero);
    AT_EQ_INT(accel_free_memory(&zero), ACCEL_ERR_STATE);
    AT_CONTAINS(accel_last_error(&zero), "not initialized");
    AT_EQ_INT(accel_free_memory(NULL), ACCEL_ERR_STATE);
    return at_finish("free_memory");
}
