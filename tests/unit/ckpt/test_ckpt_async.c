/* Async checkpoints (accel_ckpt_desc.async), one process:
     - an async checkpoint is byte for byte the synchronous one (every file, the marker included), with the whole
       state snapshotted, with none of it (a budget smaller than any piece), and with a budget that splits a file
       (its first tensors written before save_state returns, the rest by the writer thread); the pinned snapshot never
       exceeds async_max_bytes;
     - the snapshot is the state at the call: tensors, objects and the RNG changed right after save_state returns
       (while the write is in flight) do not reach the checkpoint;
     - a save while one is in flight waits for it: the first is published when the second save_state returns, and the
       second's snapshot starts after the first's write ended (the on_range times); load_state and destroy wait too;
     - the writer thread allocates nothing and records no error (the host and pinned allocators check the thread);
     - a write error (RLIMIT_FSIZE: the kernel's "File too large", a real failing write(2)) comes back from
       accel_ckpt_wait, or else from the next save_state / load_state, once; that checkpoint is never visible and the
       previous one stays the newest; the next save works;
     - load_state applies nothing when a registered object refuses its (verified) bytes: objects applied before it
       get their state back (also a sharded object, through its load_all), the tensors and counters stay. */
#include "accel_ckpt.h"
#include "accel_test.h"
#include "accel_test_fs.h"
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define NW (1 << 20) /* 4 MiB of F32 */
#define NE 5000
#define NB 17

static float g_w[NW], g_m[NW], g_v[NW], g_e[NE];
static uint16_t g_b[NB];
typedef struct { int64_t epoch, pos; int loads; } sampler;
typedef struct { char text[40]; int loads; } custom;
typedef struct { unsigned char bytes[3000]; size_t n; int loads; } shard;
typedef struct { int64_t value, limit; int loads; } limited; /* its load refuses a value above limit */
static sampler g_s;
static custom g_c;
static shard g_sh;

static accel_result s_save(void *o, void *buf, size_t cap, size_t *n) {
    *n = 16;
    if (buf && cap >= 16) memcpy(buf, o, 16);
    return ACCEL_OK;
}
static accel_result s_load(void *o, const void *buf, size_t n) {
    if (n != 16) return accel_set_error(NULL, ACCEL_ERR_FORMAT, "sampler: %zu bytes", n);
    memcpy(o, buf, 16);
    ((sampler *)o)->loads++;
    return ACCEL_OK;
}
static accel_result c_save(void *o, void *buf, size_t cap, size_t *n) {
    *n = strlen(((custom *)o)->text);
    if (buf && cap >= *n) memcpy(buf, ((custom *)o)->text, *n);
    return ACCEL_OK;
}
static accel_result c_load(void *o, const void *buf, size_t n) {
    custom *c = (custom *)o;
    if (n >= sizeof c->text) return accel_set_error(NULL, ACCEL_ERR_FORMAT, "custom: %zu bytes", n);
    memcpy(c->text, buf, n);
    c->text[n] = 0;
    c->loads++;
    return ACCEL_OK;
}
static accel_result sh_save(void *o, void *buf, size_t cap, size_t *n) {
    shard *s = (shard *)o;
    *n = s->n;
    if (buf && cap >= s->n) memcpy(buf, s->bytes, s->n);
    return ACCEL_OK;
}
static accel_result sh_load_all(void *o, const void *const *bufs, const size_t *sizes, int count) {
    shard *s = (shard *)o;
    if (count != 1 || sizes[0] > sizeof s->bytes) return accel_set_error(NULL, ACCEL_ERR_FORMAT, "shard: bad");
    memcpy(s->bytes, bufs[0], sizes[0]);
    s->n = sizes[0];
    s->loads++;
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
    if (v > l->limit) return accel_set_error(NULL, ACCEL_ERR_FORMAT, "limited: %lld is above %lld", (long long)v,
                                             (long long)l->limit);
    l->value = v;
    l->loads++;
    return ACCEL_OK;
}
static accel_result l_load_all(void *o, const void *const *bufs, const size_t *sizes, int count) {
    if (count != 1) return accel_set_error(NULL, ACCEL_ERR_FORMAT, "limited: %d ranks", count);
    return l_load(o, bufs[0], sizes[0]);
}

/* The state of "iteration" k: every byte depends on k. */
static void fill(int k) {
    int i;
    for (i = 0; i < NW; ++i) {
        g_w[i] = (float)(k * 1000 + (i % 997));
        g_m[i] = -0.5f * (float)(i % 61) - (float)k;
        g_v[i] = (float)((i ^ k) & 1023);
    }
    for (i = 0; i < NE; ++i) g_e[i] = (float)i / (float)(k + 1);
    for (i = 0; i < NB; ++i) g_b[i] = (uint16_t)(0x3f80 + i + k);
    g_s.epoch = k;
    g_s.pos = 3 * k + 1;
    snprintf(g_c.text, sizeof g_c.text, "custom %d", k);
    g_sh.n = 1000 + (size_t)k % 7;
    for (i = 0; i < (int)g_sh.n; ++i) g_sh.bytes[i] = (unsigned char)(i * 7 + k);
}

/* The allocators: every call must come from the thread that created the Accelerator (the writer thread allocates
   nothing); the pinned one also records its largest block (the snapshot's size). */
static pthread_t g_main;
static int g_foreign_thread;
static size_t g_pinned_max, g_pinned_live;
static void *h_alloc(size_t n, void *u) {
    (void)u;
    if (!pthread_equal(pthread_self(), g_main)) g_foreign_thread++;
    return malloc(n);
}
static void h_free(void *p, void *u) {
    (void)u;
    if (p && !pthread_equal(pthread_self(), g_main)) g_foreign_thread++;
    free(p);
}
static void *p_alloc(size_t n, void *u) {
    (void)u;
    if (!pthread_equal(pthread_self(), g_main)) g_foreign_thread++;
    if (n > g_pinned_max) g_pinned_max = n;
    g_pinned_live++;
    return malloc(n);
}
static void p_free(void *p, void *u) {
    (void)u;
    if (!pthread_equal(pthread_self(), g_main)) g_foreign_thread++;
    if (p) g_pinned_live--;
    free(p);
}
static int g_warns;
static void logger(void *u, accel_log_level l, const char *m) {
    (void)u;
    if (l <= ACCEL_LOG_WARN) {
        g_warns++;
        fprintf(stderr, "log: %s\n", m);
    }
}

/* Ranges reported through on_range. */
typedef struct { char name[32]; double t0, t1; int tid_main; } range_rec;
static range_rec g_ranges[64];
static int g_nranges;
static pthread_mutex_t g_range_mu = PTHREAD_MUTEX_INITIALIZER;
static void on_range(void *u, const char *name, double t0, double t1) {
    (void)u;
    pthread_mutex_lock(&g_range_mu);
    if (g_nranges < 64) {
        snprintf(g_ranges[g_nranges].name, sizeof g_ranges[0].name, "%s", name);
        g_ranges[g_nranges].t0 = t0;
        g_ranges[g_nranges].t1 = t1;
        g_ranges[g_nranges].tid_main = pthread_equal(pthread_self(), g_main);
        g_nranges++;
    }
    pthread_mutex_unlock(&g_range_mu);
}

static char g_root[256];

static void init_acc(accel *acc) {
    accel_desc d;
    memset(&d, 0, sizeof d);
    d.no_mpi = 1;
    d.log_fn = logger;
    d.host_allocator.alloc = h_alloc;
    d.host_allocator.free = h_free;
    d.pinned_allocator.alloc = p_alloc;
    d.pinned_allocator.free = p_free;
    AT_EQ_INT(accel_init(acc, &d), ACCEL_OK);
}

static accel_tensor tens(const char *name, void *p, accel_dtype dt, int64_t d0, int64_t d1) {
    accel_tensor t;
    memset(&t, 0, sizeof t);
    t.name = name;
    t.ptr = p;
    t.dtype = dt;
    t.ndim = d1 ? 2 : 1;
    t.shape[0] = d0;
    t.shape[1] = d1;
    return t;
}

/* Two model files, one optimizer file, two objects and a sharded one. */
static accel_ckpt *make(accel *acc, const char *project, int async, uint64_t budget, int limit) {
    accel_ckpt *ck = NULL;
    accel_ckpt_desc cd;
    accel_tensor m0[2], m1[1], o[2];
    memset(&cd, 0, sizeof cd);
    cd.project_dir = project;
    cd.automatic_checkpoint_naming = 1;
    cd.total_limit = limit;
    cd.async = async ? ACCEL_ON : ACCEL_DEFAULT;
    cd.async_max_bytes = budget;
    cd.on_range = on_range;
    m0[0] = tens("w", g_w, ACCEL_F32, 1024, NW / 1024);
    m0[1] = tens("b", g_b, ACCEL_BF16, NB, 0);
    m1[0] = tens("emb", g_e, ACCEL_F32, NE, 0);
    o[0] = tens("w.exp_avg", g_m, ACCEL_F32, NW, 0);
    o[1] = tens("w.exp_avg_sq", g_v, ACCEL_F32, NW, 0);
    AT_EQ_INT(accel_ckpt_create(acc, &cd, &ck), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_register_model(ck, m0, 2), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_register_model(ck, m1, 1), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_register_optimizer(ck, o, 2), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_register(ck, "sampler", s_save, s_load, &g_s), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_register(ck, NULL, c_save, c_load, &g_c), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_register_sharded(ck, "shard", sh_save, sh_load_all, &g_sh), ACCEL_OK);
    return ck;
}

/* Every file of a and b (the same names, the same bytes); returns the number of files compared. */
static int same_dirs(const char *a, const char *b) {
    DIR *d = opendir(a);
    struct dirent *e;
    int n = 0, nb = 0;
    if (!d) { AT_CHECK_MSG(0, "a checkpoint directory is missing"); return 0; }
    while ((e = readdir(d)) != NULL) {
        char pa[2048], pb[2048];
        size_t na = 0, nbb = 0;
        unsigned char *x, *y;
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(pa, sizeof pa, "%s/%s", a, e->d_name);
        snprintf(pb, sizeof pb, "%s/%s", b, e->d_name);
        x = at_read_file(pa, &na);
        y = at_read_file(pb, &nbb);
        if (!x || !y || na != nbb || memcmp(x, y, na)) {
            fprintf(stderr, "differs: %s vs %s\n", pa, pb);
            AT_CHECK_MSG(0, "a file of the async checkpoint differs from the synchronous one");
        }
        free(x);
        free(y);
        ++n;
    }
    closedir(d);
    d = opendir(b);
    while (d && (e = readdir(d)) != NULL) nb += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    if (d) closedir(d);
    AT_EQ_INT(nb, n);
    return n;
}

/* ------------------------------------------------------------------------------------- byte-identical, budgets */
static void test_identical(void) {
    static const uint64_t budgets[] = {0, 1, 9000000, (uint64_t)NW * 4 + 100};
    accel acc;
    accel_ckpt *cs, *ca;
    char ps[600], out_s[900], out_a[900];
    size_t k;
    init_acc(&acc);
    snprintf(ps, sizeof ps, "%s/identical_sync", g_root);
    fill(3);
    cs = make(&acc, ps, 0, 0, 0);
    AT_EQ_INT(accel_ckpt_save_state(cs, NULL, out_s, sizeof out_s), ACCEL_OK);
    for (k = 0; k < sizeof budgets / sizeof budgets[0]; ++k) {
        char pa[600], ctx[64];
        snprintf(ctx, sizeof ctx, "budget %llu", (unsigned long long)budgets[k]);
        at_context = ctx;
        snprintf(pa, sizeof pa, "%s/identical_async_%zu", g_root, k);
        g_pinned_max = 0;
        ca = make(&acc, pa, 1, budgets[k], 0);
        AT_EQ_INT(accel_ckpt_save_state(ca, NULL, out_a, sizeof out_a), ACCEL_OK);
        AT_EQ_INT(accel_ckpt_wait(ca), ACCEL_OK);
        AT_EQ_INT(same_dirs(out_s, out_a), 9); /* 2 model + 1 optimizer, 2 objects, shard, states, json, marker */
        AT_EQ_INT(accel_ckpt_verify(&acc, out_a), ACCEL_OK);
        if (budgets[k] == 0) AT_CHECK(g_pinned_max >= (size_t)NW * 12); /* the whole state */
        else AT_CHECK_MSG(g_pinned_max <= budgets[k], "the snapshot stays within async_max_bytes");
        if (budgets[k] == 1) AT_EQ_INT((long)g_pinned_max, 0); /* nothing fits: all written before the call returned */
        if (budgets[k] == 9000000) /* splits optimizer.safetensors: one of its 4 MiB tensors (at least) is snapshotted */
            AT_CHECK(g_pinned_max >= (size_t)NW * 4 && g_pinned_max < (size_t)NW * 8 + 200000);
        accel_ckpt_destroy(ca);
        AT_EQ_INT((long)g_pinned_live, 0);
    }
    at_context = "";
    accel_ckpt_destroy(cs);
    accel_shutdown(&acc);
}

/* -------------------------------------------------------------- the snapshot is the state at the call; waiting */
static void test_snapshot_and_wait(void) {
    accel acc;
    accel_ckpt *ck;
    char proj[600], out1[900], out2[900];
    int i, w1 = -1, s2 = -1;
    float *keep_w = (float *)malloc(sizeof g_w);
    init_acc(&acc);
    snprintf(proj, sizeof proj, "%s/snapshot", g_root);
    ck = make(&acc, proj, 1, 0, 0);
    fill(5);
    accel_set_seed(&acc, 77, 0);
    memcpy(keep_w, g_w, sizeof g_w);
    g_nranges = 0;
    AT_EQ_INT(accel_ckpt_save_state(ck, NULL, out1, sizeof out1), ACCEL_OK);
    /* "training" goes on while the write is in flight: first the data the writer reaches last (the optimizer's
       second moment, from its end), so a checkpoint that read the live tensors instead of the snapshot shows it */
    for (i = NW - 1; i >= 0; --i) g_v[i] = -1.0f;
    fill(6);
    accel_set_seed(&acc, 99, 0);
    AT_EQ_INT(accel_ckpt_save_state(ck, NULL, out2, sizeof out2), ACCEL_OK);
    for (i = NW - 1; i >= 0; --i) g_v[i] = -2.0f;
    /* the second save waited: the first is published, complete, when it returns */
    AT_EQ_INT(accel_ckpt_verify(&acc, out1), ACCEL_OK);
    fill(7);
    AT_EQ_INT(accel_ckpt_wait(ck), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_wait(ck), ACCEL_OK); /* nothing in flight */
    for (i = 0; i < g_nranges; ++i) {
        if (!strcmp(g_ranges[i].name, "checkpoint_write") && w1 < 0) w1 = i;
        if (!strcmp(g_ranges[i].name, "checkpoint_snapshot") && i > 0) s2 = i;
    }
    AT_CHECK(w1 >= 0 && s2 >= 0);
    if (w1 >= 0 && s2 >= 0) {
        AT_CHECK_MSG(g_ranges[s2].t0 >= g_ranges[w1].t1, "the second snapshot starts after the first write ended");
        AT_CHECK(!g_ranges[w1].tid_main && g_ranges[s2].tid_main);
    }
    /* load each into changed state: exactly what each save_state saw */
    fill(8);
    AT_EQ_INT(accel_ckpt_load_state(ck, out1), ACCEL_OK);
    AT_CHECK(!memcmp(keep_w, g_w, sizeof g_w));
    AT_CHECK(g_v[NW - 1] == (float)(((NW - 1) ^ 5) & 1023) && g_v[NW / 2] == (float)(((NW / 2) ^ 5) & 1023));
    AT_EQ_INT((int)g_s.epoch, 5);
    AT_EQ_STR(g_c.text, "custom 5");
    AT_CHECK(acc.rng.seed == 77);
    AT_EQ_INT(accel_ckpt_iteration(ck), 1);
    fill(5);
    AT_CHECK(!memcmp(keep_w, g_w, sizeof g_w)); /* fill is deterministic: keep_w is fill(5) */
    fill(9);
    AT_EQ_INT(accel_ckpt_load_state(ck, out2), ACCEL_OK);
    {
        float w6 = g_w[12345], m6 = g_m[999], v6 = g_v[NW - 1];
        fill(6);
        AT_CHECK(g_w[12345] == w6 && g_m[999] == m6 && g_v[NW - 1] == v6);
    }
    AT_CHECK(acc.rng.seed == 99);
    /* a save in flight: load_state waits for it and loads it (the newest) */
    fill(10);
    AT_EQ_INT(accel_ckpt_save_state(ck, NULL, out1, sizeof out1), ACCEL_OK);
    AT_CONTAINS(out1, "checkpoint_2");
    fill(11);
    AT_EQ_INT(accel_ckpt_load_state(ck, NULL), ACCEL_OK);
    AT_EQ_INT((int)g_s.epoch, 10);
    AT_EQ_INT(accel_ckpt_iteration(ck), 3);
    /* destroy with a save in flight publishes it */
    AT_EQ_INT(accel_ckpt_save_state(ck, NULL, out2, sizeof out2), ACCEL_OK);
    accel_ckpt_destroy(ck);
    AT_EQ_INT(accel_ckpt_verify(&acc, out2), ACCEL_OK);
    AT_EQ_INT(g_foreign_thread, 0);
    AT_EQ_INT(g_warns, 0);
    accel_shutdown(&acc);
    free(keep_w);
}

/* ------------------------------------------------------------------------------------------- write errors */
static void set_fsize(rlim_t limit) {
    struct rlimit rl;
    getrlimit(RLIMIT_FSIZE, &rl);
    rl.rlim_cur = limit;
    AT_EQ_INT(setrlimit(RLIMIT_FSIZE, &rl), 0);
}
static void test_write_error(void) {
    accel acc;
    accel_ckpt *ck;
    char proj[600], cdir[700], out[900], latest[900], gone[900];
    struct rlimit rl0;
    init_acc(&acc);
    signal(SIGXFSZ, SIG_IGN); /* write(2) then fails with EFBIG */
    getrlimit(RLIMIT_FSIZE, &rl0);
    snprintf(proj, sizeof proj, "%s/errors", g_root);
    snprintf(cdir, sizeof cdir, "%s/checkpoints", proj);
    ck = make(&acc, proj, 1, 0, 2);
    fill(1);
    AT_EQ_INT(accel_ckpt_save_state(ck, NULL, NULL, 0), ACCEL_OK); /* checkpoint_0 */
    AT_EQ_INT(accel_ckpt_wait(ck), ACCEL_OK);
    /* 1. the error comes back from wait */
    fill(2);
    set_fsize(1 << 20); /* model.safetensors is 4 MiB */
    AT_EQ_INT(accel_ckpt_save_state(ck, NULL, gone, sizeof gone), ACCEL_OK); /* the snapshot: checkpoint_1 */
    AT_EQ_INT(accel_ckpt_wait(ck), ACCEL_ERR_IO);
    set_fsize(rl0.rlim_cur);
    AT_CONTAINS(accel_last_error(&acc), "checkpoint_1");
    AT_CONTAINS(accel_last_error(&acc), "File too large");
    AT_CHECK(!at_exists(gone));
    AT_EQ_INT(accel_ckpt_latest(&acc, cdir, latest, sizeof latest), ACCEL_OK);
    AT_CONTAINS(latest, "checkpoint_0");
    AT_EQ_INT(accel_ckpt_wait(ck), ACCEL_OK); /* returned once */
    /* 2. ... or from the next save_state, which then saves nothing */
    set_fsize(1 << 20);
    AT_EQ_INT(accel_ckpt_save_state(ck, NULL, gone, sizeof gone), ACCEL_OK); /* checkpoint_2 */
    AT_EQ_INT(accel_ckpt_save_state(ck, NULL, out, sizeof out), ACCEL_ERR_IO); /* (it would fail itself too) */
    set_fsize(rl0.rlim_cur);
    AT_CONTAINS(accel_last_error(&acc), "checkpoint_2");
    AT_CHECK(!at_exists(gone));
    AT_EQ_INT(accel_ckpt_iteration(ck), 3);
    AT_EQ_INT(accel_ckpt_latest(&acc, cdir, latest, sizeof latest), ACCEL_OK);
    AT_CONTAINS(latest, "checkpoint_0");
    /* 3. ... or from load_state, which then loads nothing */
    set_fsize(1 << 20);
    fill(4);
    AT_EQ_INT(accel_ckpt_save_state(ck, NULL, gone, sizeof gone), ACCEL_OK); /* checkpoint_3 */
    fill(5);
    AT_EQ_INT(accel_ckpt_load_state(ck, NULL), ACCEL_ERR_IO);
    set_fsize(rl0.rlim_cur);
    AT_CONTAINS(accel_last_error(&acc), "checkpoint_3");
    AT_EQ_INT((int)g_s.epoch, 5);
    AT_EQ_INT(accel_ckpt_load_state(ck, NULL), ACCEL_OK); /* the newest complete one: checkpoint_0 */
    AT_EQ_INT((int)g_s.epoch, 1);
    AT_EQ_INT(accel_ckpt_iteration(ck), 1);
    /* the next save works and becomes the newest (checkpoint_1 again, after the load) */
    fill(6);
    AT_EQ_INT(accel_ckpt_save_state(ck, NULL, out, sizeof out), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_wait(ck), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_latest(&acc, cdir, latest, sizeof latest), ACCEL_OK);
    AT_EQ_STR(latest, out);
    AT_EQ_INT(accel_ckpt_verify(&acc, out), ACCEL_OK);
    accel_ckpt_destroy(ck);
    AT_EQ_INT(g_foreign_thread, 0);
    accel_shutdown(&acc);
    signal(SIGXFSZ, SIG_DFL);
}

/* -------------------------------------------------------------------- load_state: all objects or none */
static void test_load_transaction(void) {
    accel acc;
    accel_ckpt *ck;
    limited lim, slim;
    char proj[600], out[900];
    float w0 = 0;
    init_acc(&acc);
    snprintf(proj, sizeof proj, "%s/transaction", g_root);
    ck = make(&acc, proj, 1, 0, 0);
    memset(&lim, 0, sizeof lim);
    memset(&slim, 0, sizeof slim);
    lim.limit = slim.limit = 1000;
    AT_EQ_INT(accel_ckpt_register(ck, "limited", l_save, l_load, &lim), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_register_sharded(ck, "zlimited", l_save, l_load_all, &slim), ACCEL_OK);
    fill(12);
    lim.value = 100;
    slim.value = 200;
    AT_EQ_INT(accel_ckpt_save_state(ck, NULL, out, sizeof out), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_wait(ck), ACCEL_OK);
    /* a different state everywhere; then "limited" refuses the checkpoint's 100 (its bytes verify: the checksum
       proves they are what was saved, not that this object accepts them) */
    fill(13);
    w0 = g_w[7];
    lim.value = 1;
    lim.limit = 50;
    slim.value = 2;
    acc.step = 2;
    g_s.loads = g_c.loads = g_sh.loads = lim.loads = slim.loads = 0;
    AT_EQ_INT(accel_ckpt_load_state(ck, out), ACCEL_ERR_FORMAT);
    AT_CONTAINS(accel_last_error(&acc), "limited.bin: limited: 100 is above 50");
    AT_CHECK(g_w[7] == w0);                            /* no tensor was copied */
    AT_EQ_INT((int)g_s.epoch, 13);                     /* sampler: applied, then put back */
    AT_EQ_INT(g_s.loads, 2);
    AT_EQ_STR(g_c.text, "custom 13");                  /* the custom object: likewise */
    AT_EQ_INT(g_c.loads, 2);
    AT_EQ_INT(lim.value, 1);
    AT_EQ_INT(g_sh.loads, 0);                          /* sharded objects come after the plain ones */
    AT_EQ_INT(acc.step, 2);
    AT_EQ_INT(accel_ckpt_iteration(ck), 1);
    /* a sharded object refuses: the one applied before it (load_all) gets its state back */
    lim.limit = 1000;
    slim.limit = 150;
    g_s.loads = g_c.loads = g_sh.loads = lim.loads = slim.loads = 0;
    AT_EQ_INT(accel_ckpt_load_state(ck, out), ACCEL_ERR_FORMAT);
    AT_CONTAINS(accel_last_error(&acc), "zlimited_*.bin: limited: 200 is above 150");
    AT_EQ_INT(g_sh.loads, 2);
    AT_EQ_INT((int)g_sh.n, 1000 + 13 % 7);
    AT_EQ_INT((int)g_sh.bytes[5], (unsigned char)(5 * 7 + 13));
    AT_EQ_INT(lim.loads, 2);
    AT_EQ_INT(lim.value, 1);
    AT_CHECK(g_w[7] == w0);
    AT_EQ_INT(slim.value, 2);
    /* accepted: everything is applied */
    slim.limit = 1000;
    AT_EQ_INT(accel_ckpt_load_state(ck, out), ACCEL_OK);
    AT_EQ_INT(lim.value, 100);
    AT_EQ_INT(slim.value, 200);
    AT_EQ_INT((int)g_s.epoch, 12);
    AT_CHECK(g_w[7] != w0);
    accel_ckpt_destroy(ck);
    AT_EQ_INT(g_foreign_thread, 0);
    accel_shutdown(&acc);
}

int main(void) {
    char tmpl[] = "/tmp/accel_ckpt_async_XXXXXX";
    g_main = pthread_self();
    if (!mkdtemp(tmpl)) { perror("mkdtemp"); return 1; }
    snprintf(g_root, sizeof g_root, "%s", tmpl);
    accel_set_default_logger(logger, NULL);
    test_identical();
    test_snapshot_and_wait();
    test_write_error();
    test_load_transaction();
    at_rm_rf(g_root);
    return at_finish("ckpt-async");
}
