/* The process mesh and join under mpirun.
   usage: test_coll_mesh mesh   every sub-group of several meshes (np 4, 8) sums exactly its members, computed here
                                from this file's own rank <-> coordinate rule; coordinates round-trip; a mesh that
                                differs on one rank, a product != world size, negative and environment sizes fail on
                                every rank; the data shard by the mesh's dp group.
          test_coll_mesh join   (np 3) ranks with 3, 5 and 7 batches (and an even_batches=false loader): prints the
                                final weights as "W case rank idx hexfloat" lines for join_reference.py, which
                                checks them against DDP's rule in float64; checks here what each rank sees per step.
          test_coll_mesh joinfault  (np 3) a rank that stalls without joining: the others get ACCEL_ERR_TIMEOUT. */
#include "accel.h"
#include "accel_collectives.h"
#include "accel_data.h"
#include "accel_test.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static accel acc;
static int P, R;

static void quiet_log(void *u, accel_log_level l, const char *m) { (void)u; (void)l; (void)m; }

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
            accel_coll_reducer *red;
            accel_tensor t;
            double gr[3];
            memset(&t, 0, sizeof t);
            t.name = "g"; t.ptr = gr; t.dtype = ACCEL_F64; t.ndim = 1; t.shape[0] = 3;
            for (k = 0; k < 3; ++k) gr[k] = (double)(R + k);
            AT_EQ_INT(accel_coll_reducer_create(c, NULL, &red), ACCEL_OK);
            AT_EQ_INT(accel_coll_reducer_add(red, &t, 1), ACCEL_OK);
            AT_EQ_INT(accel_coll_reducer_wait(red), ACCEL_OK);
            for (k = 0; k < 3; ++k) {
                double w = 0;
                int j;
                for (j = 0; j < n; ++j) w += (order[j] + k) * (1.0 / want_size);
                AT_NEAR(gr[k], w, 1e-12);
            }
            accel_coll_reducer_destroy(red);
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

/* ------------------------------------------------------------------------------------------------------- join */
/* Three gradient tensors (F64); each element is independent: grad_i = 0.5 w_i + c(rank, step, i), SGD lr 0.1. The
   middle one is >= 1 MiB (reduced directly on MPI), the others packed; first_bucket_mb tiny: several buckets. Case
   "flat" uses one contiguous buffer (flat mode) and divide_by_initial_world_size=False. */
#define N0 5
#define N1 140000
#define N2 7
static double coef(int rank, int64_t step, int tensor, int i) {
    return (rank + 1) * 0.25 + (double)step * 0.125 + (i % 7) * 0.0625 - tensor * 0.5;
}
static const int sample_idx[] = {0, 1, 2, 3, 4, 6, 997, 65536, 139999};

/* one file per rank in $ACCEL_JOIN_OUT (mpirun's merged stdout could interleave lines) */
static void print_weights(const char *name, double *const *w, const int *n) {
    const char *dir = getenv("ACCEL_JOIN_OUT");
    char path[512];
    FILE *f;
    int t, k;
    if (!dir || !*dir) return;
    snprintf(path, sizeof path, "%s/rank%d.txt", dir, R);
    f = fopen(path, "a");
    AT_CHECK(f != NULL);
    if (!f) return;
    for (t = 0; t < 3; ++t)
        for (k = 0; k < (int)(sizeof sample_idx / sizeof sample_idx[0]); ++k)
            if (sample_idx[k] < n[t]) fprintf(f, "W %s %d %d %d %a\n", name, R, t, sample_idx[k], w[t][sample_idx[k]]);
    fclose(f);
}

static void join_case(const char *name, int flat, int by_active, int use_loader) {
    static double store[N0 + N1 + N2], w0[N0], w1[N1], w2[N2];
    double *g[3], *w[3];
    int n[3], t, i, nb, k, step;
    accel_coll *c;
    accel_coll_reducer *red;
    accel_coll_reducer_desc rd;
    accel_coll_join_desc jd;
    accel_tensor gt[3], pt[3];
    accel_data_shard sh;
    char ctx[64];
    snprintf(ctx, sizeof ctx, "join %s", name);
    at_context = ctx;
    n[0] = N0; n[1] = N1; n[2] = N2;
    g[0] = store; g[1] = store + N0; g[2] = store + N0 + N1;
    w[0] = w0; w[1] = w1; w[2] = w2;
    for (t = 0; t < 3; ++t)
        for (i = 0; i < n[t]; ++i) w[t][i] = 1.0 + 0.001 * i - t;
    memset(gt, 0, sizeof gt);
    memset(pt, 0, sizeof pt);
    for (t = 0; t < 3; ++t) {
        gt[t].name = "grad"; gt[t].ptr = g[t]; gt[t].dtype = ACCEL_F64; gt[t].ndim = 1; gt[t].shape[0] = n[t];
        pt[t] = gt[t];
        pt[t].name = "weight"; pt[t].ptr = w[t];
    }
    AT_EQ_INT(accel_coll_create(&acc, NULL, &c), ACCEL_OK);
    memset(&rd, 0, sizeof rd);
    rd.first_bucket_mb = 1e-5;
    rd.bucket_cap_mb = 1e-5;
    rd.flat = flat ? ACCEL_ON : ACCEL_OFF;
    AT_EQ_INT(accel_coll_reducer_create(c, &rd, &red), ACCEL_OK);
    AT_EQ_INT(accel_coll_reducer_add(red, gt, 3), ACCEL_OK);
    memset(&jd, 0, sizeof jd);
    jd.no_divide_by_initial_world_size = by_active;
    AT_EQ_INT(accel_coll_reducer_join_begin(red, &jd), ACCEL_OK);
    if (!flat) AT_CHECK(accel_coll_reducer_num_buckets(red) >= 3);
    else AT_EQ_INT(accel_coll_reducer_is_flat(red), 1);
    nb = 3 + 2 * R; /* 3, 5, 7 batches */
    if (use_loader) { /* even_batches=false: N=10, B=2 on 3 ranks gives 2, 2, 1 batches */
        accel_data_shard_desc dd;
        memset(&dd, 0, sizeof dd);
        dd.dataset_len = 10; dd.batch_size = 2; dd.no_even_batches = 1;
        AT_EQ_INT(accel_data_shard_init(&acc, &sh, &dd), ACCEL_OK);
        nb = (int)accel_data_shard_len(&sh);
    }
    acc.sync_gradients = 1;
    for (step = 0; step < nb; ++step) {
        double extra = 0;
        if (use_loader) {
            int64_t idx[2], cnt = 0;
            AT_EQ_INT(accel_data_shard_next(&sh, idx, &cnt), ACCEL_OK);
            for (k = 0; k < cnt; ++k) extra += (double)(idx[k] + 1) * 0.01;
        }
        for (t = 0; t < 3; ++t)
            for (i = 0; i < n[t]; ++i) g[t][i] = 0.5 * w[t][i] + coef(R, step, t, i) + extra;
        for (t = 2; t >= 0; --t) AT_EQ_INT(accel_coll_grad_ready(red, t), ACCEL_OK); /* backward order */
        AT_EQ_INT(accel_coll_reducer_wait(red), ACCEL_OK);
        if (!use_loader) { /* ranks with more than `step` batches: 3 while step < 3, then 2, then 1 */
            int want = step < 3 ? 3 : step < 5 ? 2 : 1;
            AT_EQ_INT(accel_coll_reducer_join_active(red), want);
        }
        for (t = 0; t < 3; ++t)
            for (i = 0; i < n[t]; ++i) w[t][i] -= 0.1 * g[t][i];
    }
    if (use_loader) {
        int64_t idx[2], cnt = 1;
        AT_EQ_INT(accel_data_shard_next(&sh, idx, &cnt), ACCEL_OK); /* ends the epoch */
        AT_EQ_INT(cnt, 0);
        accel_data_shard_deinit(&sh);
    }
    /* out of batches: the others' remaining steps are shadowed here; my gradients stay as my last step left them */
    {
        double before = g[1][997];
        AT_EQ_INT(accel_coll_reducer_join_end(red, pt, 3), ACCEL_OK);
        AT_NEAR(g[1][997], before, 0);
    }
    AT_EQ_INT(accel_coll_reducer_join_active(red), P);
    AT_EQ_INT(accel_coll_reducer_join_end(red, pt, 3), ACCEL_ERR_STATE); /* not in join mode any more */
    print_weights(name, w, n);
    accel_coll_reducer_destroy(red);
    accel_coll_destroy(c);
    at_context = "";
}

/* the last rank stalls without joining: the others' next round times out (1 s) instead of hanging */
static void join_fault(void) {
    accel_coll *c;
    accel_coll_desc cd;
    accel_coll_reducer *red;
    accel_tensor gt;
    double g[4] = {1, 2, 3, 4}, t0, dt;
    accel_result r;
    memset(&cd, 0, sizeof cd);
    cd.timeout_ms = 1000;
    AT_EQ_INT(accel_coll_create(&acc, &cd, &c), ACCEL_OK);
    memset(&gt, 0, sizeof gt);
    gt.ptr = g; gt.dtype = ACCEL_F64; gt.ndim = 1; gt.shape[0] = 4;
    AT_EQ_INT(accel_coll_reducer_create(c, NULL, &red), ACCEL_OK);
    AT_EQ_INT(accel_coll_reducer_add(red, &gt, 1), ACCEL_OK);
    AT_EQ_INT(accel_coll_reducer_join_begin(red, NULL), ACCEL_OK);
    acc.sync_gradients = 1;
    AT_EQ_INT(accel_coll_reducer_wait(red), ACCEL_OK); /* one healthy step everywhere */
    if (R == P - 1) {
        sleep(3); /* "dead": neither reduces nor joins within the others' deadline */
    } else {
        t0 = accel_now();
        r = R == 0 ? accel_coll_reducer_join_end(red, NULL, 0) : accel_coll_reducer_wait(red);
        dt = accel_now() - t0;
        AT_EQ_INT(r, ACCEL_ERR_TIMEOUT);
        AT_CHECK_MSG(dt >= 0.9 && dt < 2.5, "timed out close to the 1 s deadline");
        AT_CONTAINS(accel_last_error(&acc), "join");
    }
    AT_EQ_INT(accel_wait_for_everyone(&acc), ACCEL_OK); /* the core's own communicator still works */
    accel_coll_reducer_destroy(red);
    accel_coll_destroy(c);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "mesh";
    accel_desc d;
    int rc;
    memset(&d, 0, sizeof d);
    d.cpu = 1;
    d.log_fn = quiet_log; /* expected errors are checked through accel_last_error */
    if (accel_init(&acc, &d) != ACCEL_OK) {
        fprintf(stderr, "accel_init: %s\n", accel_last_error(&acc));
        return 1;
    }
    P = acc.num_processes;
    R = acc.process_index;
    if (!strcmp(mode, "join")) {
        if (P != 3) { fprintf(stderr, "join needs 3 ranks\n"); return 1; }
        join_case("buckets", 0, 0, 0);
        join_case("flat_by_active", 1, 1, 0);
        join_case("loader", 0, 0, 1);
        join_case("loader_by_active", 1, 1, 1);
    } else if (!strcmp(mode, "joinfault")) {
        join_fault();
    } else {
        mesh_mode();
    }
    rc = at_finish("collectives_mesh");
    accel_shutdown(&acc);
    return rc;
}
