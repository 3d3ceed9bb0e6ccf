/* The services layer's private helpers, compiled into this TU (ACCEL_STATIC) so they are visible:
   - ACCEL__ARR_PUT grows stb_ds arrays with a checked allocation: a failing allocator gives -1 and leaves the array
     exactly as it was (stbds_arrput alone would write through NULL);
   - accel__error_seq moves with every recorded failure, also accel_set_error's;
   - accel__atomic_open/_commit: a committed file appears whole, an abandoned one leaves nothing behind;
   - accel__state_check validates like accel_state_load_resharded without changing anything;
   - the flight recorder's ring (wraps, keeps the call site of the outermost wrapped call, states) and its "waiting
     for" lines: one after 30 s in flight, then one a minute, none once the call completed;
   - ACCEL_COLLECTIVE_TIMEOUT / ACCEL_TRAIN_TIMEOUT: parsed, the desc wins, garbage is an error naming the variable,
     and the train deadline applies once an optimizer step completed;
   - accel__slurm_first_host reads the first host of a Slurm host list (where srun without MPI puts the store). */
#define ACCEL_IMPLEMENTATION
#define ACCEL_STATIC
#include "accel.h"
#include "accel_test.h"
#include <sys/stat.h>
#include <unistd.h>

typedef struct { long fail_at, seen, live; } budget;
static void *b_alloc(size_t n, void *u) {
    budget *b = (budget *)u;
    if (b->fail_at >= 0 && b->seen++ >= b->fail_at) return NULL;
    b->live++;
    return malloc(n);
}
static void b_free(void *p, void *u) {
    if (!p) return;
    ((budget *)u)->live--;
    free(p);
}

static void test_arr_put(void) {
    accel acc;
    accel_desc d;
    budget b = {-1, 0, 0};
    int *a = NULL, i, ok = 1;
    memset(&d, 0, sizeof d);
    d.no_mpi = 1;
    d.host_allocator.alloc = b_alloc;
    d.host_allocator.free = b_free;
    d.host_allocator.user_data = &b;
    AT_EQ_INT(accel_init(&acc, &d), ACCEL_OK);
    for (i = 0; i < 100; ++i) ok &= ACCEL__ARR_PUT(a, i * 3) == 0;
    AT_CHECK(ok);
    AT_EQ_INT(stbds_arrlen(a), 100);
    /* the next growth fails: -1, and length, capacity and contents stay */
    {
        size_t cap = stbds_arrcap(a), len = stbds_arrlen(a);
        int *before = a;
        while ((size_t)stbds_arrlen(a) < stbds_arrcap(a)) ok &= ACCEL__ARR_PUT(a, 7) == 0;
        len = stbds_arrlen(a);
        b.fail_at = b.seen; /* every allocation from now on fails */
        AT_EQ_INT(ACCEL__ARR_PUT(a, 12345), -1);
        AT_EQ_INT(stbds_arrlen(a), (long long)len);
        AT_EQ_INT(stbds_arrcap(a), (long long)cap);
        AT_CHECK(a == before);
        for (i = 0; i < 100; ++i) ok &= a[i] == i * 3;
        AT_CHECK(ok);
        b.fail_at = -1;
        AT_EQ_INT(ACCEL__ARR_PUT(a, 12345), 0); /* and works again afterwards */
        AT_EQ_INT(a[len], 12345);
    }
    /* a first allocation that fails leaves the array NULL */
    {
        int *c = NULL;
        b.fail_at = b.seen;
        AT_EQ_INT(ACCEL__ARR_PUT(c, 1), -1);
        AT_CHECK(c == NULL);
        b.fail_at = -1;
    }
    stbds_arrfree(a);
    accel_shutdown(&acc);
    AT_EQ_INT(b.live, 0); /* every block came back through the same allocator */
}

static void test_error_seq(void) {
    unsigned long s0 = accel__error_seq();
    accel acc;
    accel_desc d;
    memset(&d, 0, sizeof d);
    d.no_mpi = 1;
    AT_EQ_INT(accel_init(&acc, &d), ACCEL_OK);
    AT_CHECK(accel__error_seq() == s0);
    accel_set_error(&acc, ACCEL_ERR_MISMATCH, "same text");
    AT_CHECK(accel__error_seq() == s0 + 1);
    accel_set_error(&acc, ACCEL_ERR_MISMATCH, "same text"); /* the same message still counts */
    AT_CHECK(accel__error_seq() == s0 + 2);
    AT_EQ_INT(accel_host_broadcast(&acc, NULL, 4, 0), ACCEL_ERR_INVALID_ARGUMENT);
    AT_CHECK(accel__error_seq() == s0 + 3);
    accel_shutdown(&acc);
}

static void test_atomic(void) {
    char dir[] = "/tmp/accel_atomic_XXXXXX", path[256], tmp[400], buf[16];
    struct stat st;
    int fd;
    FILE *f;
    AT_CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/file.bin", dir);
    AT_EQ_INT(accel__write_file(NULL, path, "old", 3, 1), ACCEL_OK);
    /* abandoned: the old file stays, no temporary is left */
    AT_EQ_INT(accel__atomic_open(NULL, path, tmp, sizeof tmp, &fd), ACCEL_OK);
    AT_CHECK(write(fd, "half", 4) == 4);
    AT_EQ_INT(accel__atomic_commit(NULL, fd, tmp, path, 0), ACCEL_OK);
    AT_CHECK(stat(tmp, &st) != 0);
    f = fopen(path, "rb");
    AT_CHECK(f && fread(buf, 1, sizeof buf, f) == 3 && !memcmp(buf, "old", 3));
    if (f) fclose(f);
    /* committed: the new content, whole */
    AT_EQ_INT(accel__atomic_open(NULL, path, tmp, sizeof tmp, &fd), ACCEL_OK);
    AT_CHECK(write(fd, "newer", 5) == 5);
    AT_EQ_INT(accel__atomic_commit(NULL, fd, tmp, path, 1), ACCEL_OK);
    AT_CHECK(stat(tmp, &st) != 0);
    f = fopen(path, "rb");
    AT_CHECK(f && fread(buf, 1, sizeof buf, f) == 5 && !memcmp(buf, "newer", 5));
    if (f) fclose(f);
    /* a directory that does not exist: an error naming the temporary, nothing created */
    snprintf(path, sizeof path, "%s/missing/file.bin", dir);
    AT_EQ_INT(accel__atomic_open(NULL, path, tmp, sizeof tmp, &fd), ACCEL_ERR_IO);
    AT_CONTAINS(accel_last_error(NULL), "missing/file.bin.tmp.");
    snprintf(path, sizeof path, "%s/file.bin", dir);
    unlink(path);
    rmdir(dir);
}

static void test_state_check(void) {
    accel acc;
    accel_desc d;
    unsigned char s0[ACCEL_STATE_BYTES], s1[ACCEL_STATE_BYTES];
    const void *st[2];
    size_t sz[2] = {ACCEL_STATE_BYTES, ACCEL_STATE_BYTES}, n;
    accel_rng_state before;
    memset(&d, 0, sizeof d);
    d.num_processes = 2; /* explicit layout: rank 1 of 2, no group needed for this */
    d.process_index = 1;
    d.no_mpi = 1;
    d.log_level = ACCEL_LOG_ERROR; /* the expected "no host group" warning */
    AT_EQ_INT(accel_init(&acc, &d), ACCEL_OK);
    accel_set_seed(&acc, 5, 1);
    acc.optimizer_steps = 9;
    AT_EQ_INT(accel_state_save(&acc, s1, sizeof s1, &n), ACCEL_OK);
    acc.process_index = 0;
    acc.rng.seed = 5;
    AT_EQ_INT(accel_state_save(&acc, s0, sizeof s0, &n), ACCEL_OK);
    acc.process_index = 1;
    acc.optimizer_steps = 2;
    acc.rng.seed = 77;
    before = acc.rng;
    st[0] = s0;
    st[1] = s1;
    AT_EQ_INT(accel__state_check(&acc, st, sz, 2), ACCEL_OK);
    AT_EQ_INT(acc.optimizer_steps, 2); /* nothing applied */
    AT_CHECK(acc.rng.seed == before.seed);
    s1[20] = 7; /* sync_gradients = 7: corrupt */
    AT_EQ_INT(accel__state_check(&acc, st, sz, 2), ACCEL_ERR_FORMAT);
    AT_EQ_INT(accel_state_load_resharded(&acc, st, sz, 2), ACCEL_ERR_FORMAT);
    AT_EQ_INT(acc.optimizer_steps, 2);
    s1[20] = 1;
    AT_EQ_INT(accel_state_load_resharded(&acc, st, sz, 2), ACCEL_OK);
    AT_EQ_INT(acc.optimizer_steps, 9);
    AT_CHECK(acc.rng.seed == 6);
    acc.num_processes = 1; /* explicit 2-process layout without a group: shut down as one */
    accel_shutdown(&acc);
}

static char note[512];
static int notes;
static void note_log(void *u, accel_log_level l, const char *m) {
    (void)u;
    if (l == ACCEL_LOG_WARN) { snprintf(note, sizeof note, "%s", m); ++notes; }
}
static void test_flight_recorder(void) {
    uint64_t id, first;
    int i;
    setenv("ACCEL_FLIGHT_RECORDER_SIZE", "4", 1);
    AT_EQ_INT(accel__fr_setup(NULL), ACCEL_OK);
    unsetenv("ACCEL_FLIGHT_RECORDER_SIZE");
    AT_EQ_INT(accel__g_fr_cap, 4);
    AT_EQ_INT(accel__fr_group("host", 0, 2), 0);
    AT_EQ_INT(accel__fr_group("coll1:mpi \"x\"", 0, 2), 1); /* names keep only safe characters */
    AT_CHECK(!strcmp(accel__g_fr_groups[1].name, "coll1:mpi__x_"));
    /* the outermost call site wins; none outside a wrapped call */
    accel_fr_site_enter("user.c", 10);
    accel_fr_site_enter("accel_ddp.h", 500);
    first = accel__fr_post(1, 0, "all_reduce", 0, (int)ACCEL_F32, 4, 16, 0);
    (void)accel_fr_site_leave(ACCEL_OK);
    AT_EQ_INT(accel_fr_site_leave(ACCEL_ERR_TIMEOUT), ACCEL_ERR_TIMEOUT);
    AT_CHECK(accel__g_fr[(first - 1) % 4].file && !strcmp(accel__g_fr[(first - 1) % 4].file, "user.c"));
    AT_EQ_INT(accel__g_fr[(first - 1) % 4].line, 10);
    accel__fr_done(NULL, first, ACCEL_OK);
    AT_EQ_INT(accel__g_fr[(first - 1) % 4].state, ACCEL__FR_DONE);
    id = accel__fr_post(1, 1, "a_name_longer_than_twenty_chars", -1, -1, 0, 0, 0);
    AT_CHECK(accel__g_fr[(id - 1) % 4].file == NULL);
    AT_EQ_INT((int)strlen(accel__g_fr[(id - 1) % 4].what), 20);
    accel__fr_done(NULL, id, ACCEL_ERR_INVALID_ARGUMENT);
    AT_EQ_INT(accel__g_fr[(id - 1) % 4].state, ACCEL__FR_FAILED);
    for (i = 0; i < 4; ++i) accel__fr_done(NULL, accel__fr_post(1, 2 + (uint64_t)i, "x", -1, -1, 0, 0, 0), ACCEL_OK);
    AT_CHECK(accel__g_fr[(first - 1) % 4].id != first); /* wrapped: the oldest slot was reused */
    accel__fr_done(NULL, first, ACCEL_ERR_TIMEOUT);      /* a stale id changes nothing */
    AT_EQ_INT(accel__g_fr[(first - 1) % 4].state, ACCEL__FR_DONE);
    /* the waiting lines: a call in flight since 31 s ago gets one now, the next one a minute later */
    {
        accel acc;
        accel_desc d;
        memset(&d, 0, sizeof d);
        d.log_fn = note_log;
        d.log_level = ACCEL_LOG_WARN;
        AT_EQ_INT(accel_init(&acc, &d), ACCEL_OK);
        accel_fr_site_enter("train.c", 88);
        id = accel__fr_post(1, 1042, "all_reduce", 0, (int)ACCEL_F32, 31000000, 124000000, 0);
        (void)accel_fr_site_leave(ACCEL_OK);
        notes = 0;
        accel__fr_tick(&acc, "rank 3");
        AT_EQ_INT(notes, 0); /* just posted */
        accel__g_fr[(id - 1) % 4].posted -= 31.0;
        accel__fr_tick(&acc, "rank 3");
        AT_EQ_INT(notes, 1);
        AT_CONTAINS(note, "waiting for rank 3 in all_reduce #1042 (F32, 31000000 elements, group coll1:mpi__x_) at "
                          "train.c:88 for 31 s");
        accel__fr_tick(&acc, "rank 3");
        AT_EQ_INT(notes, 1); /* once a minute */
        accel__g_fr[(id - 1) % 4].posted -= 60.0;
        accel__fr_tick(&acc, NULL);
        AT_EQ_INT(notes, 2);
        AT_CONTAINS(note, "waiting for the other ranks in all_reduce #1042");
        accel__fr_done(&acc, id, ACCEL_OK);
        accel__g_fr[(id - 1) % 4].posted -= 60.0;
        accel__fr_tick(&acc, NULL);
        AT_EQ_INT(notes, 2); /* completed: no line */
        accel_shutdown(&acc);
    }
}

static void test_timeouts_env(void) {
    accel_desc d, out;
    char err[256];
    memset(&d, 0, sizeof d);
    setenv("ACCEL_COLLECTIVE_TIMEOUT", "2.5", 1);
    setenv("ACCEL_TRAIN_TIMEOUT", "100", 1);
    AT_EQ_INT(accel_resolve_config(&d, &out, NULL, err, sizeof err), ACCEL_OK);
    AT_EQ_INT(out.collective_timeout_ms, 2500);
    AT_EQ_INT(out.train_timeout_ms, 100000);
    d.collective_timeout_ms = 7000; /* the desc wins */
    AT_EQ_INT(accel_resolve_config(&d, &out, NULL, err, sizeof err), ACCEL_OK);
    AT_EQ_INT(out.collective_timeout_ms, 7000);
    d.collective_timeout_ms = 0;
    setenv("ACCEL_COLLECTIVE_TIMEOUT", "30min", 1);
    AT_EQ_INT(accel_resolve_config(&d, &out, NULL, err, sizeof err), ACCEL_ERR_ENVIRONMENT);
    AT_CONTAINS(err, "ACCEL_COLLECTIVE_TIMEOUT=\"30min\" is not a number of seconds");
    setenv("ACCEL_COLLECTIVE_TIMEOUT", "-1", 1);
    AT_EQ_INT(accel_resolve_config(&d, &out, NULL, err, sizeof err), ACCEL_ERR_ENVIRONMENT);
    unsetenv("ACCEL_COLLECTIVE_TIMEOUT");
    unsetenv("ACCEL_TRAIN_TIMEOUT");
    AT_EQ_INT(accel_resolve_config(&d, &out, NULL, err, sizeof err), ACCEL_OK);
    AT_EQ_INT(out.collective_timeout_ms, 1800000);
    AT_EQ_INT(out.train_timeout_ms, 0);
    /* the train deadline from the first completed optimizer step on */
    {
        accel acc;
        d.collective_timeout_ms = 60000;
        d.train_timeout_ms = 5000;
        AT_EQ_INT(accel_init(&acc, &d), ACCEL_OK);
        AT_CHECK(accel__timeout_s(&acc) == 60.0);
        accel_optimizer_step_done(&acc, 1); /* a skipped step is still a completed step */
        AT_CHECK(accel__timeout_s(&acc) == 5.0);
        accel_shutdown(&acc);
    }
}

/* expected values written by hand from Slurm's hostlist syntax (scontrol show hostnames gives the same first name) */
static void test_slurm_first_host(void) {
    static const char *cases[][2] = {
        {"vm", "vm"}, {"vm,vm2", "vm"}, {"node[01-04,07]", "node01"}, {"gpu[3,5-7],cpu1", "gpu3"},
        {"a[009-010]-ib,b1", "a009-ib"}, {"n[2]", "n2"}, {"", NULL}, {"[1-2]", NULL}, {"n[", NULL}, {"n[x-y]", NULL},
        {"n[1-2", NULL}, {",n1", NULL},
    };
    char out[16];
    size_t i;
    for (i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        int rc = accel__slurm_first_host(cases[i][0], out, sizeof out);
        at_context = cases[i][0];
        AT_EQ_INT(rc, cases[i][1] ? 0 : -1);
        if (cases[i][1] && rc == 0) AT_EQ_STR(out, cases[i][1]);
    }
    at_context = "too long for the buffer";
    AT_EQ_INT(accel__slurm_first_host("averyveryverylongname", out, sizeof out), -1);
    AT_EQ_INT(accel__slurm_first_host("n[00000000000000001-2]", out, sizeof out), -1);
    at_context = NULL;
}

int main(void) {
    test_flight_recorder();
    test_timeouts_env();
    test_slurm_first_host();
    test_arr_put();
    test_error_seq();
    test_atomic();
    test_state_check();
    return at_finish("core-private");
}
