/* Async checkpoints on two processes (fork()ed workers over the core's TCP store):
     - identical: an async checkpoint of two ranks (global files by the owner, a shard per rank) is byte for byte the
       synchronous one, with the whole state snapshotted and with a budget that leaves the owner's tensors to the
       calling thread;
     - a write error on one rank (RLIMIT_FSIZE: "File too large" from write(2) on that rank only) comes back on both
       ranks, from accel_ckpt_wait or else from the next save_state — the failed rank's own error, the other rank's
       ACCEL_ERR_REMOTE naming it — and that checkpoint never becomes the newest; the owner (rank 0) failing is
       reported the same way; the next save works;
     - load_state where one rank's object refuses its bytes: nothing stays applied on either rank (objects put back,
       the sharded one through every rank's kept state), no tensor copied;
     - fallback (accel_ckpt.h FALLBACK): the newest checkpoint's shard_1.bin damaged (one byte flipped by rank 1):
       load_state(NULL) loads the previous checkpoint on both ranks, one WARN on rank 0 naming the skipped directory
       and the file, and the next save (async) goes past it on both. */
#include "accel_ckpt.h"
#include "accel_test.h"
#include "accel_test_fs.h"
#include "ckpt_workers.h"
#include <signal.h>
#include <stdint.h>
#include <sys/resource.h>

#define NW (1 << 20)
#define SHMAX (2 << 20)
#define SH(rank) ((rank) == 0 ? 5000 : SHMAX) /* rank 1's shard file is 2 MiB */

static float g_w[NW], g_m[NW];
typedef struct { int64_t a, b; int loads; } pair_obj;
typedef struct { int64_t value, limit; int loads; } limited;
static pair_obj g_s;
static limited g_l;
static unsigned char g_sh[SHMAX];
static int g_rank, g_sh_loads, g_sh_refuse;
static char g_root[256];

static accel_result p_save(void *o, void *buf, size_t cap, size_t *n) {
    *n = 16;
    if (buf && cap >= 16) memcpy(buf, o, 16);
    return ACCEL_OK;
}
static accel_result p_load(void *o, const void *buf, size_t n) {
    if (n != 16) return accel_set_error(NULL, ACCEL_ERR_FORMAT, "pair: %zu bytes", n);
    memcpy(o, buf, 16);
    ((pair_obj *)o)->loads++;
    return ACCEL_OK;
}
static accel_result l_save(void *o, void *buf, size_t cap, size_t *n) {
    *n = 8;
    if (buf && cap >= 8) memcpy(buf, &((limited *)o)->value, 8);
    return ACCEL_OK;
}
static accel_result l_load(void *o, const void *buf, size_t n) {
    limited *l = (limited *)o;
    int64_t v;
    if (n != 8) return accel_set_error(NULL, ACCEL_ERR_FORMAT, "limited: %zu bytes", n);
    memcpy(&v, buf, 8);
    if (v > l->limit)
        return accel_set_error(NULL, ACCEL_ERR_FORMAT, "limited: %lld is above %lld", (long long)v, (long long)l->limit);
    l->value = v;
    l->loads++;
    return ACCEL_OK;
}
/* each rank's shard: its own bytes; load_all takes this rank's part of a two-rank checkpoint */
static accel_result sh_save(void *o, void *buf, size_t cap, size_t *n) {
    (void)o;
    *n = SH(g_rank);
    if (buf && cap >= *n) memcpy(buf, g_sh, *n);
    return ACCEL_OK;
}
static accel_result sh_load_all(void *o, const void *const *bufs, const size_t *sizes, int count) {
    (void)o;
    if (count != 2 || sizes[0] != SH(0) || sizes[1] != SH(1))
        return accel_set_error(NULL, ACCEL_ERR_FORMAT, "shard: %d ranks", count);
    if (g_sh_refuse) return accel_set_error(NULL, ACCEL_ERR_FORMAT, "shard: refused");
    memcpy(g_sh, bufs[g_rank], sizes[g_rank]);
    g_sh_loads++;
    return ACCEL_OK;
}

static void fill(int k) {
    int i;
    for (i = 0; i < NW; ++i) {
        g_w[i] = (float)(k * 100 + i % 313);
        g_m[i] = (float)(i % 17) - (float)k;
    }
    for (i = 0; i < SH(g_rank); ++i) g_sh[i] = (unsigned char)(i * 3 + k + g_rank);
    g_s.a = k;
    g_s.b = 10 * k + g_rank; /* only rank 0's is saved (a global object) */
    g_l.value = k;
}

static void quiet(void *u, accel_log_level l, const char *m) { (void)u; (void)l; (void)m; }
static int init(accel *acc) {
    accel_desc d;
    memset(&d, 0, sizeof d);
    d.log_fn = quiet;
    d.collective_timeout_ms = 30000;
    if (accel_init(acc, &d) != ACCEL_OK) {
        fprintf(stderr, "init: %s\n", accel_last_error(acc));
        return 0;
    }
    g_rank = acc->process_index;
    g_l.limit = 1000;
    AT_EQ_INT(acc->num_processes, 2);
    return 1;
}
static accel_ckpt *make(accel *acc, const char *project, int async, uint64_t budget) {
    accel_ckpt *ck = NULL;
    accel_ckpt_desc cd;
    accel_tensor t[2];
    memset(&cd, 0, sizeof cd);
    cd.project_dir = project;
    cd.automatic_checkpoint_naming = 1;
    cd.async = async ? ACCEL_ON : ACCEL_OFF;
    cd.async_max_bytes = budget;
    t[0] = at_vec("w", g_w, ACCEL_F32, NW);
    t[1] = at_vec("w.exp_avg", g_m, ACCEL_F32, NW);
    AT_EQ_INT(accel_ckpt_create(acc, &cd, &ck), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_register_model(ck, t, 1), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_register_optimizer(ck, t + 1, 1), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_register(ck, "pair", p_save, p_load, &g_s), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_register(ck, "limited", l_save, l_load, &g_l), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_register_sharded(ck, "shard", sh_save, sh_load_all, NULL), ACCEL_OK);
    return ck;
}
static int done(const char *what) {
    char ctx[64];
    snprintf(ctx, sizeof ctx, "%s rank %d", what, g_rank);
    at_context = ctx;
    return at_failed ? 1 : 0;
}

/* --------------------------------------------------------------------------------------------- identical */
static int sc_identical(int rank, int P, void *arg) {
    static const uint64_t budgets[] = {0, 3 << 20};
    accel acc;
    accel_ckpt *cs, *ca;
    char ps[600], pa[600], out_s[900], out_a[900];
    size_t k;
    (void)P;
    (void)arg;
    if (!init(&acc)) return 2;
    fill(4);
    snprintf(ps, sizeof ps, "%s/identical_sync", g_root);
    cs = make(&acc, ps, 0, 0);
    AT_EQ_INT(accel_ckpt_save_state(cs, NULL, out_s, sizeof out_s), ACCEL_OK);
    for (k = 0; k < 2; ++k) {
        snprintf(pa, sizeof pa, "%s/identical_async_%zu", g_root, k);
        ca = make(&acc, pa, 1, budgets[k]);
        AT_EQ_INT(accel_ckpt_save_state(ca, NULL, out_a, sizeof out_a), ACCEL_OK);
        fill(5); /* the run goes on */
        AT_EQ_INT(accel_ckpt_wait(ca), ACCEL_OK);
        fill(4);
        if (rank == 0) { /* every file: 2 tensor files, 2 objects, 2 shards, 2 states, json, marker */
            DIR *d = opendir(out_s);
            struct dirent *e;
            int n = 0;
            while (d && (e = readdir(d)) != NULL) {
                char a[2048], b[2048];
                size_t na = 0, nb = 0;
                unsigned char *x, *y;
                if (e->d_name[0] == '.') continue;
                snprintf(a, sizeof a, "%s/%s", out_s, e->d_name);
                snprintf(b, sizeof b, "%s/%s", out_a, e->d_name);
                x = at_read_file(a, &na);
                y = at_read_file(b, &nb);
                AT_CHECK_MSG(x && y && na == nb && !memcmp(x, y, na), e->d_name);
                free(x);
                free(y);
                ++n;
            }
            if (d) closedir(d);
            AT_EQ_INT(n, 10);
            AT_EQ_INT(accel_ckpt_verify(&acc, out_a), ACCEL_OK);
        }
        AT_EQ_INT(accel_wait_for_everyone(&acc), ACCEL_OK);
        accel_ckpt_destroy(ca);
    }
    accel_ckpt_destroy(cs);
    accel_shutdown(&acc);
    return done("identical");
}

/* ------------------------------------------------------------------------------------------- write errors */
static void set_fsize(rlim_t limit) {
    struct rlimit rl;
    getrlimit(RLIMIT_FSIZE, &rl);
    rl.rlim_cur = limit;
    AT_EQ_INT(setrlimit(RLIMIT_FSIZE, &rl), 0);
}
static int sc_errors(int rank, int P, void *arg) {
    int bad_rank = *(const int *)arg; /* the rank whose writes fail (1: a shard of 2 MiB; 0: the 4 MiB tensors) */
    accel acc;
    accel_ckpt *ck;
    char proj[600], cdir[700], latest[900], gone[900], out[900];
    struct rlimit rl0;
    (void)P;
    if (!init(&acc)) return 2;
    signal(SIGXFSZ, SIG_IGN);
    getrlimit(RLIMIT_FSIZE, &rl0);
    snprintf(proj, sizeof proj, "%s/errors_%d", g_root, bad_rank);
    snprintf(cdir, sizeof cdir, "%s/checkpoints", proj);
    ck = make(&acc, proj, 1, 0);
    fill(1);
    AT_EQ_INT(accel_ckpt_save_state(ck, NULL, NULL, 0), ACCEL_OK); /* checkpoint_0 */
    AT_EQ_INT(accel_ckpt_wait(ck), ACCEL_OK);
    /* 1. from accel_ckpt_wait, on both ranks */
    fill(2);
    if (rank == bad_rank) set_fsize(1 << 20);
    AT_EQ_INT(accel_ckpt_save_state(ck, NULL, gone, sizeof gone), ACCEL_OK); /* checkpoint_1: snapshot taken */
    fill(3);
    if (rank == bad_rank) {
        AT_EQ_INT(accel_ckpt_wait(ck), ACCEL_ERR_IO);
        AT_CONTAINS(accel_last_error(&acc), "File too large");
        set_fsize(rl0.rlim_cur);
    } else {
        char who[32];
        AT_EQ_INT(accel_ckpt_wait(ck), ACCEL_ERR_REMOTE);
        snprintf(who, sizeof who, "rank %d", bad_rank);
        AT_CONTAINS(accel_last_error(&acc), who);
        AT_CONTAINS(accel_last_error(&acc), "File too large");
    }
    AT_CONTAINS(accel_last_error(&acc), "checkpoint_1");
    AT_EQ_INT(accel_wait_for_everyone(&acc), ACCEL_OK);
    AT_CHECK(!at_exists(gone));
    AT_EQ_INT(accel_ckpt_latest(&acc, cdir, latest, sizeof latest), ACCEL_OK);
    AT_CONTAINS(latest, "checkpoint_0");
    AT_EQ_INT(accel_ckpt_wait(ck), ACCEL_OK); /* returned once */
    /* 2. from the next save_state (which saves nothing) */
    if (rank == bad_rank) set_fsize(1 << 20);
    AT_EQ_INT(accel_ckpt_save_state(ck, NULL, gone, sizeof gone), ACCEL_OK); /* checkpoint_2 */
    AT_CHECK(accel_ckpt_save_state(ck, NULL, out, sizeof out) == (rank == bad_rank ? ACCEL_ERR_IO : ACCEL_ERR_REMOTE));
    if (rank == bad_rank) set_fsize(rl0.rlim_cur);
    AT_CONTAINS(accel_last_error(&acc), "checkpoint_2");
    AT_EQ_INT(accel_wait_for_everyone(&acc), ACCEL_OK);
    AT_CHECK(!at_exists(gone));
    AT_EQ_INT(accel_ckpt_latest(&acc, cdir, latest, sizeof latest), ACCEL_OK);
    AT_CONTAINS(latest, "checkpoint_0");
    /* 3. the next save works and is the newest */
    fill(6);
    AT_EQ_INT(accel_ckpt_save_state(ck, NULL, out, sizeof out), ACCEL_OK);
    AT_CONTAINS(out, "checkpoint_3");
    AT_EQ_INT(accel_ckpt_wait(ck), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_latest(&acc, cdir, latest, sizeof latest), ACCEL_OK);
    AT_EQ_STR(latest, out);
    fill(0);
    AT_EQ_INT(accel_ckpt_load_state(ck, NULL), ACCEL_OK);
    AT_CHECK(g_w[5] == 605.0f && g_s.a == 6 && g_sh[7] == (unsigned char)(21 + 6 + rank));
    accel_ckpt_destroy(ck);
    accel_shutdown(&acc);
    signal(SIGXFSZ, SIG_DFL);
    return done(bad_rank ? "errors on rank 1" : "errors on rank 0");
}

/* ------------------------------------------------------------------ load_state: all objects or none, both ranks */
static int sc_transaction(int rank, int P, void *arg) {
    accel acc;
    accel_ckpt *ck;
    char proj[600], out[900];
    float w0;
    (void)P;
    (void)arg;
    if (!init(&acc)) return 2;
    snprintf(proj, sizeof proj, "%s/transaction", g_root);
    ck = make(&acc, proj, 1, 0);
    g_l.limit = 1000;
    fill(7);
    AT_EQ_INT(accel_ckpt_save_state(ck, NULL, out, sizeof out), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_wait(ck), ACCEL_OK);
    fill(8);
    w0 = g_w[3];
    g_l.limit = rank == 1 ? 5 : 1000; /* rank 1 refuses the checkpoint's 7 */
    g_s.loads = g_l.loads = g_sh_loads = 0;
    AT_EQ_INT(accel_ckpt_load_state(ck, out), rank == 1 ? ACCEL_ERR_FORMAT : ACCEL_ERR_REMOTE);
    AT_CONTAINS(accel_last_error(&acc), "limited: 7 is above 5");
    AT_CHECK(g_w[3] == w0);
    AT_EQ_INT((int)g_s.a, 8);
    AT_EQ_INT((int)g_l.value, 8);
    AT_EQ_INT(g_s.loads, 2); /* applied, then put back: on both ranks */
    AT_EQ_INT(g_l.loads, rank == 1 ? 0 : 2);
    AT_EQ_INT(g_sh_loads, rank == 0 ? 2 : 0); /* rank 0 went on to its shard before the ranks agreed: put back */
    AT_CHECK(g_sh[11] == (unsigned char)(33 + 8 + rank));
    AT_EQ_INT(accel_ckpt_iteration(ck), 1);
    /* rank 1's shard refuses (a sharded object is applied after the plain ones): rank 0's, applied, gets its own
       state back through both ranks' kept states (its load_all takes every rank's) */
    g_l.limit = 1000;
    g_s.loads = g_l.loads = g_sh_loads = 0;
    g_sh_refuse = rank == 1;
    AT_EQ_INT(accel_ckpt_load_state(ck, out), rank == 1 ? ACCEL_ERR_FORMAT : ACCEL_ERR_REMOTE);
    AT_CONTAINS(accel_last_error(&acc), "shard: refused");
    AT_EQ_INT(g_sh_loads, rank == 0 ? 2 : 0);
    AT_CHECK(g_sh[11] == (unsigned char)(33 + 8 + rank) && g_sh[SH(rank) - 1] == (unsigned char)((SH(rank) - 1) * 3 + 8 + rank));
    AT_EQ_INT(g_s.loads, 2);
    AT_EQ_INT(g_l.loads, 2);
    AT_EQ_INT((int)g_s.a, 8);
    AT_EQ_INT((int)g_l.value, 8);
    AT_CHECK(g_w[3] == w0);
    /* accepted everywhere: applied everywhere */
    g_sh_refuse = 0;
    AT_EQ_INT(accel_ckpt_load_state(ck, out), ACCEL_OK);
    AT_EQ_INT((int)g_s.a, 7);
    AT_CHECK(g_sh[11] == (unsigned char)(33 + 7 + rank) && g_w[3] != w0);
    accel_ckpt_destroy(ck);
    accel_shutdown(&acc);
    return done("transaction");
}

/* ------------------------------------------------------------------------------------------------ fallback */
static char g_warn[1200];
static int g_nwarn;
static void capture_warn(void *u, accel_log_level l, const char *m) {
    (void)u;
    if (l < ACCEL_LOG_WARN) return;
    if (!g_nwarn++) snprintf(g_warn, sizeof g_warn, "%s", m);
}
static int sc_fallback(int rank, int P, void *arg) {
    accel acc;
    accel_desc d;
    accel_ckpt *ck;
    char proj[600], p[900];
    unsigned char *b;
    size_t n = 0;
    (void)P;
    (void)arg;
    memset(&d, 0, sizeof d);
    d.log_fn = capture_warn;
    d.collective_timeout_ms = 30000;
    if (accel_init(&acc, &d) != ACCEL_OK) return 2;
    g_rank = acc.process_index;
    g_l.limit = 1000;
    snprintf(proj, sizeof proj, "%s/fallback", g_root);
    ck = make(&acc, proj, 0, 0);
    fill(1);
    AT_EQ_INT(accel_ckpt_save_state(ck, NULL, NULL, 0), ACCEL_OK);
    fill(2);
    AT_EQ_INT(accel_ckpt_save_state(ck, NULL, NULL, 0), ACCEL_OK);
    accel_ckpt_destroy(ck);
    if (rank == 1) { /* rank 1's shard of the newest checkpoint loses a bit: every rank reads it, both must agree */
        snprintf(p, sizeof p, "%s/checkpoints/checkpoint_1/shard_1.bin", proj);
        b = at_read_file(p, &n);
        AT_CHECK(b && n > 4);
        if (b) {
            b[3] ^= 1;
            at_write_file(p, b, n);
            free(b);
        }
    }
    AT_EQ_INT(accel_wait_for_everyone(&acc), ACCEL_OK);
    fill(9);
    g_nwarn = 0;
    ck = make(&acc, proj, 1, 0);
    AT_EQ_INT(accel_ckpt_load_state(ck, NULL), ACCEL_OK);
    AT_EQ_INT((int)g_s.a, 1);
    AT_CHECK(g_w[3] == (float)(100 + 3) && g_sh[11] == (unsigned char)(33 + 1 + rank));
    AT_EQ_INT(g_nwarn, rank == 0 ? 1 : 0);
    if (rank == 0) {
        snprintf(p, sizeof p, "skipping %s/checkpoints/checkpoint_1", proj);
        AT_CONTAINS(g_warn, p);
        AT_CONTAINS(g_warn, "shard_1.bin");
    }
    AT_EQ_INT(accel_ckpt_iteration(ck), 2);
    AT_EQ_INT(accel_ckpt_save_state(ck, NULL, p, sizeof p), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_wait(ck), ACCEL_OK);
    AT_CONTAINS(p, "checkpoint_2");
    accel_ckpt_destroy(ck);
    accel_shutdown(&acc);
    return done("fallback");
}

int main(void) {
    char tmpl[] = "/tmp/accel_ckpt_async_ranks_XXXXXX";
    int bad0 = 0, bad1 = 1, i = 0;
    struct { const char *name; int (*fn)(int, int, void *); void *arg; } sc[] = {
        {"identical", sc_identical, NULL},
        {"errors-rank1", sc_errors, &bad1},
        {"errors-rank0", sc_errors, &bad0},
        {"transaction", sc_transaction, NULL},
        {"fallback", sc_fallback, NULL},
    };
    if (!mkdtemp(tmpl)) { perror("mkdtemp"); return 1; }
    snprintf(g_root, sizeof g_root, "%s", tmpl);
    accel_set_default_logger(quiet, NULL);
    signal(SIGPIPE, SIG_IGN);
    for (i = 0; i < (int)(sizeof sc / sizeof sc[0]); ++i) {
        char run_id[64];
        int port = 0;
        while (port < 2) port = accel_free_port();
        snprintf(run_id, sizeof run_id, "async-ranks-%d-%d", (int)getpid(), i);
        at_context = sc[i].name;
        AT_EQ_INT(ckpt_run_workers(2, sc[i].fn, sc[i].arg, port, run_id, 60), 0);
    }
    at_context = "";
    at_rm_rf(g_root);
    return at_finish("ckpt-async-ranks");
}
