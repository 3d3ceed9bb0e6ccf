/* The process mesh under mpirun.
   usage: test_coll_mesh mesh   every sub-group of several meshes (np 4, 8) sums exactly its members, computed here
                                from this file's own rank <-> coordinate rule; coordinates round-trip; a mesh that
                                differs on one rank, a product != world size, negative and environment sizes fail on
                                every rank; a DDP reducer on the dp group; the data shard by the mesh's dp group. */
#include "accel.h"
#include "accel_collectives.h"
#include "accel_ddp.h"
#include "accel_data.h"
#include "accel_test.h"
#include "accel_test_coll.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static accel acc;
static int P, R;

/* ------------------------------------------------------------------------------------------------------- mesh */
/* sizes in mesh order: pp, dp_replicate, dp_shard, cp, tp (tp fastest) */
static void my_coords(const int *sz, int rank, int *co) {
    int d;
    for (d = 4; d >= 0; --d) { co[d] = rank % sz[d]; rank /= sz[d]; }
}
/* the dimensions of each group, written out here (not the library's table) */
static int in_group(int g, int d) {
    switch (g) {
    case ACCEL_COLL_MESH_PP: return d == 0;
    case ACCEL_COLL_MESH_DP_REPLICATE: return d == 1;
    case ACCEL_COLL_MESH_DP_SHARD: return d == 2;
    case ACCEL_COLL_MESH_CP: return d == 3;
    case ACCEL_COLL_MESH_TP: return d == 4;
    case ACCEL_COLL_MESH_DP: return d == 1 || d == 2;
    case ACCEL_COLL_MESH_DP_SHARD_CP: return d == 2 || d == 3;
    case ACCEL_COLL_MESH_DP_CP: return d == 1 || d == 2 || d == 3;
    default: return 0;
    }
}

static void check_mesh(int pp, int rep, int shard, int cp, int tp) {
    accel_coll *world, *c;
    accel_coll_mesh *m;
    accel_coll_mesh_desc md;
    int sz[5], me[5], co[5], g, r, d;
    char ctx[96];
    sz[0] = pp; sz[1] = rep; sz[2] = shard; sz[3] = cp; sz[4] = tp;
    snprintf(ctx, sizeof ctx, "mesh pp%d rep%d shard%d cp%d tp%d", pp, rep, shard, cp, tp);
    at_context = ctx;
    AT_EQ_INT(accel_coll_create(&acc, NULL, &world), ACCEL_OK);
    memset(&md, 0, sizeof md);
    md.pp_size = pp; md.dp_replicate_size = rep; md.dp_shard_size = shard; md.cp_size = cp; md.tp_size = tp;
    AT_EQ_INT(accel_coll_mesh_create(world, &md, &m), ACCEL_OK);
    if (!m) { accel_coll_destroy(world); at_context = ""; return; }
    my_coords(sz, R, me);
    /* coordinates: this file's rule, and the round trip for every rank */
    for (r = 0; r < P; ++r) {
        int lib[5];
        my_coords(sz, r, co);
        AT_EQ_INT(accel_coll_mesh_coords(m, r, lib), ACCEL_OK);
        for (d = 0; d < 5; ++d) AT_EQ_INT(lib[d], co[d]);
        AT_EQ_INT(accel_coll_mesh_rank_of(m, lib), r);
    }
    AT_EQ_INT(accel_coll_mesh_coords(m, P, co), ACCEL_ERR_INVALID_ARGUMENT);
    co[0] = co[1] = co[2] = co[3] = co[4] = 0;
    co[4] = tp; /* one past the end of tp */
    AT_EQ_INT(accel_coll_mesh_rank_of(m, co), -1);
    for (g = 0; g < ACCEL_COLL_MESH_COUNT; ++g) {
        int64_t mask = (int64_t)1 << R, want_mask = 0, got[64];
        double x = 1.0 + R * R, want_x = 0;
        int want_size = 0, want_rank = 0, order[64], n = 0, k;
        c = accel_coll_mesh_comm(m, (accel_coll_mesh_dim)g);
        AT_CHECK(c != NULL);
        if (!c) continue;
        /* the members: every rank whose coordinates outside the group equal mine, in row-major order of the inside */
        for (r = 0; r < P; ++r) {
            int same = 1;
            my_coords(sz, r, co);
            for (d = 0; d < 5; ++d)
                if (!in_group(g, d) && co[d] != me[d]) same = 0;
            if (!same) continue;
            want_mask |= (int64_t)1 << r;
            want_x += 1.0 + r * r;
            if (r == R) want_rank = want_size;
            order[n++] = r;
            want_size++;
        }
        at_context = ctx;
        AT_EQ_INT(accel_coll_size(c), want_size);
        AT_EQ_INT(accel_coll_mesh_size(m, (accel_coll_mesh_dim)g), want_size);
        AT_EQ_INT(accel_coll_rank(c), want_rank);
        AT_EQ_INT(accel_coll_mesh_coord(m, (accel_coll_mesh_dim)g), want_rank);
        AT_EQ_INT(accel_coll_all_reduce(c, &mask, &mask, 1, ACCEL_I64, ACCEL_COLL_SUM), ACCEL_OK);
        AT_EQ_INT(mask, want_mask);
        AT_EQ_INT(accel_coll_all_reduce(c, &x, &x, 1, ACCEL_F64, ACCEL_COLL_SUM), ACCEL_OK);
        AT_NEAR(x, want_x, 0);
        /* all_gather in group-rank order = the members in row-major order */
        {
            int64_t mine = R;
            AT_EQ_INT(accel_coll_all_gather(c, &mine, got, 1, ACCEL_I64), ACCEL_OK);
            for (k = 0; k < n; ++k) AT_EQ_INT(got[k], order[k]);
        }
        /* broadcast from the group's last rank */
        {
            int64_t b = R;
            AT_EQ_INT(accel_coll_broadcast(c, &b, 1, ACCEL_I64, want_size - 1), ACCEL_OK);
            AT_EQ_INT(b, order[n - 1]);
        }
        /* the reducer on the group: DDP's average over its members */
        {
            accel_ddp *red;
            accel_tensor t;
            double gr[3];
            memset(&t, 0, sizeof t);
            t.name = "g"; t.ptr = gr; t.dtype = ACCEL_F64; t.ndim = 1; t.shape[0] = 3;
            for (k = 0; k < 3; ++k) gr[k] = (double)(R + k);
            AT_EQ_INT(accel_ddp_create(c, NULL, &red), ACCEL_OK);
            AT_EQ_INT(accel_ddp_add(red, &t, 1), ACCEL_OK);
            AT_EQ_INT(accel_ddp_wait(red), ACCEL_OK);
            for (k = 0; k < 3; ++k) {
                double w = 0;
                int j;
                for (j = 0; j < n; ++j) w += (order[j] + k) * (1.0 / want_size);
                AT_NEAR(gr[k], w, 1e-12);
            }
            accel_ddp_destroy(red);
        }
    }
    /* the data shard by the dp group: ranks with the same dp coordinate get the same batches, dp ranks disjoint ones */
    {
        accel_coll *dp = accel_coll_mesh_comm(m, ACCEL_COLL_MESH_DP);
        accel_data_shard sh;
        accel_data_shard_desc dd;
        int64_t idx[4], cnt = 0, first, all[64];
        memset(&dd, 0, sizeof dd);
        dd.dataset_len = 64; dd.batch_size = 4;
        dd.num_processes = accel_coll_size(dp); dd.process_index = accel_coll_rank(dp); dd.collective = 1;
        AT_EQ_INT(accel_data_shard_init(&acc, &sh, &dd), ACCEL_OK);
        AT_EQ_INT(accel_data_shard_get_batch(&sh, 0, idx, &cnt), ACCEL_OK);
        AT_EQ_INT(cnt, 4);
        first = idx[0];
        AT_EQ_INT(first, (int64_t)(me[1] * shard + me[2]) * 4); /* sequential: dp rank q starts at q*b */
        AT_EQ_INT(accel_host_allgather(&acc, &first, all, sizeof first), ACCEL_OK);
        for (r = 0; r < P; ++r) {
            my_coords(sz, r, co);
            AT_EQ_INT(all[r], (int64_t)(co[1] * shard + co[2]) * 4);
        }
        accel_data_shard_deinit(&sh);
        /* collective: a rank with another batch size fails every rank, even with explicit num_processes */
        if (P > 1) {
            dd.batch_size = R == P - 1 ? 8 : 4;
            AT_EQ_INT(accel_data_shard_init(&acc, &sh, &dd), ACCEL_ERR_MISMATCH);
            AT_CONTAINS(accel_last_error(&acc), "batch_size");
        }
    }
    accel_coll_mesh_destroy(m);
    accel_coll_destroy(world);
    at_context = "";
}

static void check_mesh_errors(void) {
    accel_coll *world;
    accel_coll_mesh *m = NULL;
    accel_coll_mesh_desc md;
    double t0;
    at_context = "mesh errors";
    AT_EQ_INT(accel_coll_create(&acc, NULL, &world), ACCEL_OK);
    /* product != world size everywhere */
    memset(&md, 0, sizeof md);
    md.tp_size = P + 1;
    AT_EQ_INT(accel_coll_mesh_create(world, &md, &m), ACCEL_ERR_INVALID_ARGUMENT);
    AT_CONTAINS(accel_last_error(&acc), "does not match");
    AT_CHECK(m == NULL);
    /* negative size on one rank: that rank's error, ACCEL_ERR_REMOTE naming it elsewhere */
    memset(&md, 0, sizeof md);
    md.tp_size = R == 1 ? -2 : 2;
    md.dp_shard_size = P / 2;
    t0 = accel_now();
    {
        accel_result r = accel_coll_mesh_create(world, &md, &m);
        if (R == 1) {
            AT_EQ_INT(r, ACCEL_ERR_INVALID_ARGUMENT);
            AT_CONTAINS(accel_last_error(&acc), "tp_size=-2");
        } else {
            AT_EQ_INT(r, ACCEL_ERR_REMOTE);
            AT_CONTAINS(accel_last_error(&acc), "rank 1");
            AT_CONTAINS(accel_last_error(&acc), "tp_size=-2");
        }
    }
    AT_CHECK_MSG(accel_now() - t0 < 10.0, "failed at once");
    /* a valid mesh on every rank, but a different one on the last rank: ACCEL_ERR_MISMATCH everywhere, naming it */
    memset(&md, 0, sizeof md);
    if (R == P - 1) md.dp_shard_size = P;
    else { md.dp_shard_size = P / 2; md.tp_size = 2; }
    AT_EQ_INT(accel_coll_mesh_create(world, &md, &m), ACCEL_ERR_MISMATCH);
    AT_CONTAINS(accel_last_error(&acc), "dp_shard_size");
    AT_CHECK(m == NULL);
    /* the environment, as Accelerate's PARALLELISM_CONFIG_*: 0 there is an error, a number a size */
    setenv("PARALLELISM_CONFIG_TP_SIZE", "0", 1);
    memset(&md, 0, sizeof md);
    AT_EQ_INT(accel_coll_mesh_create(world, &md, &m), ACCEL_ERR_INVALID_ARGUMENT);
    AT_CONTAINS(accel_last_error(&acc), "PARALLELISM_CONFIG_TP_SIZE=0");
    setenv("PARALLELISM_CONFIG_TP_SIZE", "2", 1);
    if (P != 2) AT_EQ_INT(accel_coll_mesh_create(world, &md, &m), ACCEL_ERR_INVALID_ARGUMENT); /* tp 2 x 1 != P */
    {
        char half[16];
        snprintf(half, sizeof half, "%d", P / 2);
        setenv("PARALLELISM_CONFIG_DP_SHARD_SIZE", half, 1);
    }
    AT_EQ_INT(accel_coll_mesh_create(world, &md, &m), ACCEL_OK);
    AT_EQ_INT(accel_coll_mesh_size(m, ACCEL_COLL_MESH_TP), 2);
    AT_EQ_INT(accel_coll_mesh_size(m, ACCEL_COLL_MESH_DP), P / 2);
    accel_coll_mesh_destroy(m);
    unsetenv("PARALLELISM_CONFIG_TP_SIZE");
    unsetenv("PARALLELISM_CONFIG_DP_SHARD_SIZE");
    /* all default: Accelerate's plain DDP (dp_replicate = world size) */
    memset(&md, 0, sizeof md);
    AT_EQ_INT(accel_coll_mesh_create(world, &md, &m), ACCEL_OK);
    AT_EQ_INT(accel_coll_mesh_size(m, ACCEL_COLL_MESH_DP_REPLICATE), P);
    AT_EQ_INT(accel_coll_mesh_size(m, ACCEL_COLL_MESH_DP), P);
    AT_EQ_INT(accel_coll_mesh_size(m, ACCEL_COLL_MESH_TP), 1);
    AT_EQ_STR(accel_coll_mesh_dim_name(ACCEL_COLL_MESH_DP_SHARD_CP), "dp_shard_cp");
    AT_CHECK(accel_coll_mesh_comm(m, ACCEL_COLL_MESH_COUNT) == NULL);
    accel_coll_mesh_destroy(m);
    /* the world context still works after all that */
    {
        int64_t v = 1;
        AT_EQ_INT(accel_coll_all_reduce(world, &v, &v, 1, ACCEL_I64, ACCEL_COLL_SUM), ACCEL_OK);
        AT_EQ_INT(v, P);
    }
    accel_coll_destroy(world);
    at_context = "";
}

static void mesh_mode(void) {
    if (P == 4) {
        check_mesh(1, 1, 2, 1, 2); /* 2x2: dp_shard x tp */
        check_mesh(1, 2, 2, 1, 1); /* 2x2: dp_replicate x dp_shard (HSDP) */
        check_mesh(1, 1, 1, 1, 4); /* 1x4: tp only */
        check_mesh(1, 1, 4, 1, 1); /* 4x1: dp_shard only */
        check_mesh(2, 1, 1, 2, 1); /* pp x cp */
    } else if (P == 8) {
        check_mesh(1, 2, 2, 1, 2); /* 2x2x2: dp_replicate x dp_shard x tp */
        check_mesh(1, 1, 2, 2, 2); /* dp_shard x cp x tp */
        check_mesh(2, 1, 2, 2, 1); /* pp x dp_shard x cp */
        check_mesh(1, 2, 1, 4, 1); /* dp_replicate x cp */
        check_mesh(2, 2, 2, 1, 1); /* pp x dp_replicate x dp_shard */
    } else {
        check_mesh(1, 1, P, 1, 1);
    }
    if (P % 2 == 0) check_mesh_errors();
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "mesh";
    int rc;
    if (at_init_cpu(&acc, 0, &P, &R) != 0) return 1;
    if (strcmp(mode, "mesh") != 0) { fprintf(stderr, "usage: test_coll_mesh [mesh]\n"); return 2; }
    mesh_mode();
    rc = at_finish("collectives_mesh");
    accel_shutdown(&acc);
    return rc;
}
