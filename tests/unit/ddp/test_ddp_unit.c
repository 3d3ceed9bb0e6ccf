/* accel_ddp.h on one process (a NONE communicator): registration order and its argument errors (nothing of a bad
   list is registered), DDP's reverse-order bucket, an average over one rank that leaves the gradients as they are, a
   growing registration, the flat mode's contiguity requirement and bad desc values. */
#include "accel.h"
#include "accel_collectives.h"
#include "accel_ddp.h"
#include "accel_test.h"
#include "accel_test_coll.h"
#include <string.h>

int main(void) {
    accel acc;
    accel_coll *c;
    int32_t iv[3] = {1, 2, 3};
    if (at_init_cpu(&acc, AT_INIT_NO_MPI, NULL, NULL) != 0) return 1;
    AT_EQ_INT(accel_coll_create(&acc, NULL, &c), ACCEL_OK);
/* reducer on one process: average over one rank leaves the grads as they are; errors */
{
    accel_ddp *r;
    float g1[300], g2[7], g3[6];
    int i, idx[4];
    accel_tensor t[3];
    for (i = 0; i < 300; ++i) g1[i] = (float)i;
    for (i = 0; i < 7; ++i) g2[i] = (float)-i;
    for (i = 0; i < 6; ++i) g3[i] = 0.5f * (float)i;
    t[0] = at_vec("w", g1, ACCEL_F32, 300);
    t[1] = at_vec("b", g2, ACCEL_F32, 7);
    t[2] = at_vec("i", iv, ACCEL_I32, 3);
    AT_EQ_INT(accel_ddp_create(c, NULL, &r), ACCEL_OK);
    AT_EQ_INT(accel_ddp_num_buckets(r), -1);
    AT_EQ_INT(accel_ddp_add(r, t, 1), ACCEL_OK);     /* index 0 */
    AT_EQ_INT(accel_ddp_add(r, t, 0), ACCEL_OK);     /* nothing */
    /* a bad tensor anywhere in the list: an error naming it, and none of the list is registered */
    AT_EQ_INT(accel_ddp_add(r, t + 1, 2), ACCEL_ERR_INVALID_ARGUMENT);
    AT_CONTAINS(accel_last_error(&acc), "tensor 1 ('i')");
    AT_EQ_INT(accel_ddp_add(r, t, -1), ACCEL_ERR_INVALID_ARGUMENT);
    AT_EQ_INT(accel_ddp_add(r, NULL, 2), ACCEL_ERR_INVALID_ARGUMENT);
    t[2] = at_vec(NULL, NULL, ACCEL_F32, 6);
    AT_EQ_INT(accel_ddp_add(r, t + 2, 1), ACCEL_ERR_INVALID_ARGUMENT); /* no data pointer */
    t[2].ptr = g3;
    t[2].ndim = 2; t[2].shape[0] = 2; t[2].shape[1] = 3;             /* any shape: numel elements */
    AT_EQ_INT(accel_ddp_add(r, t + 1, 2), ACCEL_OK);         /* indices 1 and 2 */
    AT_EQ_INT(accel_ddp_grad_ready(r, 3), ACCEL_ERR_INVALID_ARGUMENT);
    AT_CONTAINS(accel_last_error(&acc), "0..2");
    AT_EQ_INT(accel_ddp_grad_ready(r, 1), ACCEL_OK);
    AT_EQ_INT(accel_ddp_add(r, t, 1), ACCEL_ERR_STATE); /* the buckets are built */
    AT_EQ_INT(accel_ddp_num_buckets(r), 1);
    AT_EQ_INT(accel_ddp_bucket(r, 0, idx, 4), 3);
    AT_EQ_INT(idx[0], 2); /* reverse registration order */
    AT_EQ_INT(idx[1], 1);
    AT_EQ_INT(idx[2], 0);
    AT_EQ_INT(accel_ddp_wait(r), ACCEL_OK);
    AT_EQ_INT((int)g1[299], 299);
    AT_EQ_INT((int)g2[6], -6);
    AT_CHECK(g3[5] == 2.5f);
    accel_ddp_destroy(r);
    /* many single-tensor calls: indices keep counting (the stb_ds array grows) */
    AT_EQ_INT(accel_ddp_create(c, NULL, &r), ACCEL_OK);
    for (i = 0; i < 100; ++i) AT_EQ_INT(accel_ddp_add(r, t + (i % 2), 1), ACCEL_OK);
    AT_EQ_INT(accel_ddp_grad_ready(r, 99), ACCEL_OK);
    AT_EQ_INT(accel_ddp_grad_ready(r, 100), ACCEL_ERR_INVALID_ARGUMENT);
    accel_ddp_destroy(r);
    /* flat requested but not contiguous */
    {
        accel_ddp_desc rd;
        memset(&rd, 0, sizeof rd);
        rd.flat = ACCEL_ON;
        AT_EQ_INT(accel_ddp_create(c, &rd, &r), ACCEL_OK);
        AT_EQ_INT(accel_ddp_add(r, t, 2), ACCEL_OK);
        AT_EQ_INT(accel_ddp_finalize(r), ACCEL_ERR_INVALID_ARGUMENT);
        accel_ddp_destroy(r);
        rd.flat = (accel_toggle)2; /* not a toggle */
        AT_EQ_INT(accel_ddp_create(c, &rd, &r), ACCEL_ERR_INVALID_ARGUMENT);
        AT_CONTAINS(accel_last_error(&acc), "flat=2");
        rd.flat = ACCEL_DEFAULT;
        rd.bucket_cap_mb = -1;
        AT_EQ_INT(accel_ddp_create(c, &rd, &r), ACCEL_ERR_INVALID_ARGUMENT);
    }
}
    accel_coll_destroy(c);
    accel_shutdown(&acc);
    return at_finish("ddp-unit");
}
