/* The core's host process group carried by a collectives context — what an NCCL context does when the core has no
   group (several processes without MPI or torchrun's TCP store). On the CPU the test removes the core's MPI transport and installs an MPI context's instead (the
   installation is the same for every backend; accel_coll_create does it for NCCL), then runs accel.h's host
   collectives through it: results, the header protocol (a failed rank → ACCEL_ERR_REMOTE everywhere, different
   calls → ACCEL_ERR_MISMATCH), the core's deadline, and the removal by accel_coll_destroy.
   The implementation is compiled into this TU (ACCEL_STATIC) to reach the private install function and acc.impl. */
#define ACCEL_IMPLEMENTATION
#define ACCEL_STATIC
#include "accel.h"
#include "accel_collectives.h"
#include "accel_test.h"
#include <unistd.h>

static accel acc;
static int P, R;

static void quiet_log(void *u, accel_log_level l, const char *m) { (void)u; (void)l; (void)m; }

static void host_collectives(void) {
    double f[2];
    int64_t v[2], *all64;
    unsigned char b[100], g[8], *gv;
    size_t counts[16], i;
    void *out = NULL;
    int r, bad = 0;
    static const char *const names[1] = {"batch_size"};
    AT_EQ_INT(accel_wait_for_everyone(&acc), ACCEL_OK);
    f[0] = R + 0.5; f[1] = -R;
    AT_EQ_INT(accel_host_allreduce_f64(&acc, f, 2, ACCEL_HOST_SUM), ACCEL_OK);
    AT_NEAR(f[0], P * (P - 1) / 2.0 + 0.5 * P, 0);
    AT_NEAR(f[1], -(P * (P - 1) / 2.0), 0);
    v[0] = R; v[1] = -R;
    AT_EQ_INT(accel_host_allreduce_i64(&acc, v, 2, ACCEL_HOST_MAX), ACCEL_OK);
    AT_EQ_INT(v[0], P - 1);
    AT_EQ_INT(v[1], 0);
    for (i = 0; i < sizeof b; ++i) b[i] = (unsigned char)(R * 31 + (int)i);
    AT_EQ_INT(accel_host_broadcast(&acc, b, sizeof b, P - 1), ACCEL_OK);
    for (i = 0; i < sizeof b; ++i) bad += b[i] != (unsigned char)((P - 1) * 31 + (int)i);
    AT_EQ_INT(bad, 0);
    all64 = (int64_t *)malloc(sizeof(int64_t) * (size_t)P);
    memset(g, 0, sizeof g);
    g[0] = (unsigned char)(R + 1);
    AT_EQ_INT(accel_host_allgather(&acc, g, all64, sizeof g), ACCEL_OK);
    for (r = 0; r < P; ++r) AT_EQ_INT(all64[r], r + 1);
    free(all64);
    /* variable sizes: rank r gives 3r + 1 bytes of value r */
    gv = (unsigned char *)malloc(3 * (size_t)R + 1);
    memset(gv, R, 3 * (size_t)R + 1);
    AT_EQ_INT(accel__host_allgatherv(&acc, gv, 3 * (size_t)R + 1, &out, counts), ACCEL_OK);
    for (r = 0, i = 0; r < P; ++r) {
        size_t k;
        AT_EQ_INT(counts[r], 3 * r + 1);
        for (k = 0; k < counts[r]; ++k, ++i) bad += ((unsigned char *)out)[i] != (unsigned char)r;
    }
    AT_EQ_INT(bad, 0);
    accel_host_free(&acc, out);
    free(gv);
    /* a local failure on rank 1 becomes every rank's, with its message */
    {
        accel_result local = R == 1 ? ACCEL__FAIL(&acc, ACCEL_ERR_INVALID_ARGUMENT, "rank one's own reason") : ACCEL_OK;
        accel_result got = accel__agree(&acc, local, "host group test");
        AT_EQ_INT(got, R == 1 ? ACCEL_ERR_INVALID_ARGUMENT : ACCEL_ERR_REMOTE);
        if (R != 1) AT_CONTAINS(accel_last_error(&acc), "rank one's own reason");
    }
    /* configuration agreement and different calls */
    v[0] = R == 0 ? 7 : 8;
    AT_EQ_INT(accel__agree_values(&acc, ACCEL_OK, "shard", names, v, 1), ACCEL_ERR_MISMATCH);
    AT_CONTAINS(accel_last_error(&acc), "processes disagree on batch_size");
    if (R == 0) AT_EQ_INT(accel_wait_for_everyone(&acc), ACCEL_ERR_MISMATCH);
    else AT_EQ_INT(accel_host_broadcast(&acc, b, 4, 0), ACCEL_ERR_MISMATCH);
    AT_CONTAINS(accel_last_error(&acc), "different host collective calls");
    AT_EQ_INT(accel_wait_for_everyone(&acc), ACCEL_OK); /* still usable */
}

int main(void) {
    accel_desc d;
    accel_coll *c = NULL;
    const accel__transport *mpi_tp;
    void *mpi_ctx;
    double t0;
    int rc;
    memset(&d, 0, sizeof d);
    d.cpu = 1;
    d.collective_timeout_ms = 1500;
    d.log_fn = quiet_log; /* expected errors are checked through accel_last_error */
    if (accel_init(&acc, &d) != ACCEL_OK) {
        fprintf(stderr, "accel_init: %s\n", accel_last_error(&acc));
        return 1;
    }
    P = acc.num_processes;
    R = acc.process_index;
    AT_EQ_INT(accel_coll_create(&acc, NULL, &c), ACCEL_OK);
    mpi_tp = acc.impl->tp;
    mpi_ctx = acc.impl->tp_ctx;
    AT_EQ_INT(c->host_group, 0); /* the core has its MPI group: an MPI context does not replace it */
    /* no host group (several processes without MPI or a store): the context becomes it */
    acc.impl->tp = NULL;
    acc.impl->tp_ctx = NULL;
    accel__coll_host_group_install(c);
    AT_EQ_INT(c->host_group, P > 1);
    if (P > 1) {
        AT_CHECK(acc.impl->tp == &c->tp && acc.impl->tp_ctx == c);
        AT_EQ_STR(accel_host_group_name(&acc), "mpi");
        host_collectives();
        /* the bytes really go through the context: a failed context fails the host group */
        c->broken = ACCEL_ERR_TIMEOUT;
        AT_EQ_INT(accel_wait_for_everyone(&acc), ACCEL_ERR_STATE);
        AT_CONTAINS(accel_last_error(&acc), "this collective context failed earlier");
        c->broken = ACCEL_OK;
        acc.impl->broken = ACCEL_OK;
        AT_EQ_INT(accel_wait_for_everyone(&acc), ACCEL_OK);
        /* the core's deadline (1.5 s) holds: the last rank is late, the others time out instead of hanging */
        if (R == P - 1) {
            sleep(3);
            AT_EQ_INT(accel_wait_for_everyone(&acc), ACCEL_OK); /* matches the others' posted exchange */
        } else {
            t0 = accel_now();
            AT_EQ_INT(accel_wait_for_everyone(&acc), ACCEL_ERR_TIMEOUT);
            AT_CHECK_MSG(accel_now() - t0 > 1.2 && accel_now() - t0 < 3.0, "timed out at the core's 1.5 s deadline");
            AT_CONTAINS(accel_last_error(&acc), "did not complete within 1.5 s");
            AT_EQ_INT(accel_wait_for_everyone(&acc), ACCEL_ERR_STATE); /* the group refuses further calls */
        }
    }
    /* destroy removes it: several processes and no group again */
    accel_coll_destroy(c);
    AT_CHECK(acc.impl->tp == NULL);
    AT_EQ_STR(accel_host_group_name(&acc), "none");
    if (P > 1) AT_EQ_INT(accel_wait_for_everyone(&acc), ACCEL_ERR_UNSUPPORTED);
    /* the core's own group back, for a clean exit */
    acc.impl->tp = mpi_tp;
    acc.impl->tp_ctx = mpi_ctx;
    acc.impl->broken = ACCEL_OK;
    AT_EQ_INT(accel_wait_for_everyone(&acc), ACCEL_OK);
    rc = at_finish("collectives_hostgroup");
    accel_shutdown(&acc);
    return rc;
}
