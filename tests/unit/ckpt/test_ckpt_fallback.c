/* load_state(NULL)'s fallback (accel_ckpt.h FALLBACK), one process. Two checkpoints are saved (checkpoint_0 with
   w[0] = 100, checkpoint_1 with w[0] = 101), then checkpoint_1 is damaged in one of four ways:
     truncated     model.safetensors loses its last 3 bytes (the marker's size no longer matches)
     no marker     checkpoint_complete.json is deleted
     missing file  sampler.bin is deleted
     bad checksum  one byte of model.safetensors is flipped (same size: only the XXH64 sees it)
   For each: a fresh checkpointer's load_state(NULL) returns ACCEL_OK with checkpoint_0's state (tensors, object,
   counters), exactly one WARN naming checkpoint_1 and the damage, and the next automatic save succeeds as
   checkpoint_2 (the skipped directory stays untouched), which the next load takes without a WARN. With
   desc.no_fallback the damaged newest checkpoint is an error (ACCEL_ERR_FORMAT naming it) and nothing is applied.
   Controls: every checkpoint damaged → ACCEL_ERR_NOT_FOUND after a WARN per directory, nothing applied, the next
   save goes past them; a registration that does not match the (intact) newest checkpoint is an error, not a
   fallback to an older one; an explicit input_dir that is damaged is an error.
     test_ckpt_fallback make PROJ   writes PROJ/checkpoints with checkpoint_8 and _9 intact, _10 with a bad checksum
                                    and an empty _11 (check_ckpt_ls.py runs `accel ckpt ls` on it) */
#include "accel_ckpt.h"
#include "accel_test.h"
#include "accel_test_fs.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_root[256];

/* Every WARN (and above) line, captured. */
static char g_warn[8][1200];
static int g_nwarn;
static void capture(void *u, accel_log_level l, const char *m) {
    (void)u;
    if (l < ACCEL_LOG_WARN) return;
    if (g_nwarn < 8) snprintf(g_warn[g_nwarn], sizeof g_warn[0], "%s", m);
    g_nwarn++;
}

typedef struct { int64_t pos; } sampler;
static accel_result s_save(void *o, void *buf, size_t cap, size_t *n) {
    *n = sizeof(sampler);
    if (buf && cap >= *n) memcpy(buf, o, *n);
    return ACCEL_OK;
}
static accel_result s_load(void *o, const void *buf, size_t n) {
    if (n != sizeof(sampler)) return accel_set_error(NULL, ACCEL_ERR_FORMAT, "sampler: %zu bytes", n);
    memcpy(o, buf, n);
    return ACCEL_OK;
}

typedef struct {
    float w[64];
    sampler s;
    accel_tensor t;
    accel_ckpt *ck;
} run;

static void run_open(accel *acc, run *r, const char *proj, int no_fallback, accel_dtype dtype) {
    accel_ckpt_desc cd;
    memset(r, 0, sizeof *r);
    r->t.name = "w";
    r->t.dtype = dtype;
    r->t.ndim = 1;
    r->t.shape[0] = dtype == ACCEL_F32 ? 64 : 128;
    r->t.ptr = r->w;
    memset(&cd, 0, sizeof cd);
    cd.project_dir = proj;
    cd.automatic_checkpoint_naming = 1;
    cd.no_fallback = no_fallback;
    AT_EQ_INT(accel_ckpt_create(acc, &cd, &r->ck), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_register_model(r->ck, &r->t, 1), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_register(r->ck, "sampler", s_save, s_load, &r->s), ACCEL_OK);
}

/* project with checkpoint_0 (w[0] = 100, pos 7, step 10) and checkpoint_1 (w[0] = 101, pos 8, step 11) */
static void make_two(accel *acc, const char *proj) {
    run r;
    int i;
    run_open(acc, &r, proj, 0, ACCEL_F32);
    for (i = 0; i < 2; ++i) {
        int k;
        for (k = 0; k < 64; ++k) r.w[k] = (float)(k + 1);
        r.w[0] = (float)(100 + i);
        r.s.pos = 7 + i;
        acc->step = 10 + i;
        AT_EQ_INT(accel_ckpt_save_state(r.ck, NULL, NULL, 0), ACCEL_OK);
    }
    accel_ckpt_destroy(r.ck);
}

enum { TRUNCATED, NO_MARKER, MISSING_FILE, BAD_CHECKSUM, NKINDS };
static const char *const kind_name[NKINDS] = {"truncated", "no marker", "missing file", "bad checksum"};
/* what the WARN must say about each damage (the verification's own message) */
static const char *const kind_why[NKINDS] = {"model.safetensors is", "no checkpoint_complete.json",
                                             "sampler.bin is missing", "checksum of model.safetensors"};

static void damage(const char *ckdir, int kind) {
    char p[1200];
    size_t n = 0;
    unsigned char *b;
    switch (kind) {
    case TRUNCATED:
        snprintf(p, sizeof p, "%s/model.safetensors", ckdir);
        b = at_read_file(p, &n);
        AT_CHECK(b && n > 3);
        if (b) at_write_file(p, b, n - 3);
        free(b);
        break;
    case NO_MARKER:
        snprintf(p, sizeof p, "%s/checkpoint_complete.json", ckdir);
        AT_CHECK(unlink(p) == 0);
        break;
    case MISSING_FILE:
        snprintf(p, sizeof p, "%s/sampler.bin", ckdir);
        AT_CHECK(unlink(p) == 0);
        break;
    default:
        snprintf(p, sizeof p, "%s/model.safetensors", ckdir);
        b = at_read_file(p, &n);
        AT_CHECK(b && n > 1);
        if (b) {
            b[n - 1] ^= 0x10; /* a tensor byte: the header still parses, only the checksum differs */
            at_write_file(p, b, n);
        }
        free(b);
        break;
    }
}

static void test_kind(accel *acc, int kind) {
    char proj[512], ck1[700], ck2[700], out[1200];
    run r;
    int k;
    snprintf(proj, sizeof proj, "%s/kind%d", g_root, kind);
    make_two(acc, proj);
    snprintf(ck1, sizeof ck1, "%s/checkpoints/checkpoint_1", proj);
    damage(ck1, kind);

    /* desc.no_fallback: an error naming the damaged checkpoint, nothing applied */
    run_open(acc, &r, proj, 1, ACCEL_F32);
    acc->step = 0;
    g_nwarn = 0;
    AT_EQ_INT(accel_ckpt_load_state(r.ck, NULL), ACCEL_ERR_FORMAT);
    AT_CONTAINS(accel_last_error(acc), "checkpoint_1");
    AT_CONTAINS(accel_last_error(acc), "no_fallback");
    AT_CONTAINS(accel_last_error(acc), kind_why[kind]);
    AT_CHECK(r.w[0] == 0.0f && r.s.pos == 0 && acc->step == 0);
    accel_ckpt_destroy(r.ck);

    /* the default: checkpoint_0 with one WARN naming checkpoint_1 and why */
    run_open(acc, &r, proj, 0, ACCEL_F32);
    g_nwarn = 0;
    AT_EQ_INT(accel_ckpt_load_state(r.ck, NULL), ACCEL_OK);
    AT_CHECK(r.w[0] == 100.0f && r.s.pos == 7 && acc->step == 10);
    for (k = 1; k < 64; ++k) AT_CHECK(r.w[k] == (float)(k + 1));
    AT_EQ_INT(g_nwarn, 1);
    AT_CONTAINS(g_warn[0], "skipping");
    AT_CONTAINS(g_warn[0], ck1);
    AT_CONTAINS(g_warn[0], kind_why[kind]);
    if (at_failed) fprintf(stderr, "  (damage: %s; WARN: %s)\n", kind_name[kind], g_nwarn ? g_warn[0] : "none");
    /* the next save does not collide with the skipped directory, which stays as it was */
    AT_EQ_INT(accel_ckpt_iteration(r.ck), 2);
    r.w[0] = 102.0f;
    r.s.pos = 9;
    AT_EQ_INT(accel_ckpt_save_state(r.ck, NULL, out, sizeof out), ACCEL_OK);
    snprintf(ck2, sizeof ck2, "%s/checkpoints/checkpoint_2", proj);
    AT_EQ_STR(out, ck2);
    AT_CHECK(at_exists(ck1));
    AT_EQ_INT(accel_ckpt_verify(acc, ck1), ACCEL_ERR_FORMAT);
    accel_ckpt_destroy(r.ck);
    /* and the next load takes it, without a WARN */
    run_open(acc, &r, proj, 0, ACCEL_F32);
    g_nwarn = 0;
    AT_EQ_INT(accel_ckpt_load_state(r.ck, NULL), ACCEL_OK);
    AT_CHECK(r.w[0] == 102.0f && r.s.pos == 9);
    AT_EQ_INT(g_nwarn, 0);
    accel_ckpt_destroy(r.ck);
}

static void test_controls(accel *acc) {
    char proj[512], p[700];
    run r;
    /* every checkpoint damaged: NOT_FOUND after a WARN per directory; the next save goes past them */
    snprintf(proj, sizeof proj, "%s/all", g_root);
    make_two(acc, proj);
    snprintf(p, sizeof p, "%s/checkpoints/checkpoint_1", proj);
    damage(p, BAD_CHECKSUM);
    snprintf(p, sizeof p, "%s/checkpoints/checkpoint_0", proj);
    damage(p, NO_MARKER);
    run_open(acc, &r, proj, 0, ACCEL_F32);
    acc->step = 0;
    g_nwarn = 0;
    AT_EQ_INT(accel_ckpt_load_state(r.ck, NULL), ACCEL_ERR_NOT_FOUND);
    AT_EQ_INT(g_nwarn, 2);
    AT_CONTAINS(g_warn[0], "checkpoint_1");
    AT_CONTAINS(g_warn[1], "checkpoint_0");
    AT_CHECK(r.w[0] == 0.0f && r.s.pos == 0 && acc->step == 0);
    AT_EQ_INT(accel_ckpt_iteration(r.ck), 2);
    AT_EQ_INT(accel_ckpt_save_state(r.ck, NULL, NULL, 0), ACCEL_OK);
    accel_ckpt_destroy(r.ck);

    /* the newest checkpoint is intact but does not match the registration (F16 [128] vs F32 [64]): an error, not a
       fallback (the older one would not match either, and silently loading it would hide the real problem) */
    snprintf(proj, sizeof proj, "%s/mismatch", g_root);
    make_two(acc, proj);
    run_open(acc, &r, proj, 0, ACCEL_F16);
    g_nwarn = 0;
    AT_EQ_INT(accel_ckpt_load_state(r.ck, NULL), ACCEL_ERR_INVALID_ARGUMENT);
    AT_CONTAINS(accel_last_error(acc), "checkpoint_1");
    AT_EQ_INT(g_nwarn, 0);
    accel_ckpt_destroy(r.ck);

    /* an explicit damaged input_dir is an error (never replaced by another checkpoint) */
    snprintf(p, sizeof p, "%s/checkpoints/checkpoint_1", proj);
    damage(p, TRUNCATED);
    run_open(acc, &r, proj, 0, ACCEL_F32);
    g_nwarn = 0;
    AT_EQ_INT(accel_ckpt_load_state(r.ck, p), ACCEL_ERR_FORMAT);
    AT_CHECK(r.w[0] == 0.0f);
    AT_EQ_INT(g_nwarn, 0);
    accel_ckpt_destroy(r.ck);
}

static int make_folder(const char *proj) {
    accel acc;
    accel_desc d;
    accel_ckpt_desc cd;
    accel_ckpt *ck = NULL;
    run r;
    char p[1200];
    int i;
    memset(&d, 0, sizeof d);
    d.no_mpi = 1;
    if (accel_init(&acc, &d) != ACCEL_OK) return 1;
    run_open(&acc, &r, proj, 0, ACCEL_F32);
    accel_ckpt_destroy(r.ck);
    memset(&cd, 0, sizeof cd);
    cd.project_dir = proj;
    cd.automatic_checkpoint_naming = 1;
    cd.iteration = 8;
    if (accel_ckpt_create(&acc, &cd, &ck) != ACCEL_OK || accel_ckpt_register_model(ck, &r.t, 1) != ACCEL_OK ||
        accel_ckpt_register(ck, "sampler", s_save, s_load, &r.s) != ACCEL_OK)
        return 1;
    for (i = 0; i < 3; ++i) {
        r.w[0] = (float)i;
        if (accel_ckpt_save_state(ck, NULL, NULL, 0) != ACCEL_OK) return 1;
    }
    accel_ckpt_destroy(ck);
    snprintf(p, sizeof p, "%s/checkpoints/checkpoint_10", proj);
    damage(p, BAD_CHECKSUM);
    snprintf(p, sizeof p, "%s/checkpoints/checkpoint_11", proj);
    if (mkdir(p, 0777) != 0) return 1;
    accel_shutdown(&acc);
    return at_failed ? 1 : 0;
}

int main(int argc, char **argv) {
    char tmpl[] = "/tmp/accel_ckpt_fallback_XXXXXX";
    accel acc;
    accel_desc d;
    int k;
    if (argc == 3 && !strcmp(argv[1], "make")) return make_folder(argv[2]);
    if (!mkdtemp(tmpl)) { perror("mkdtemp"); return 1; }
    snprintf(g_root, sizeof g_root, "%s", tmpl);
    memset(&d, 0, sizeof d);
    d.no_mpi = 1;
    d.log_fn = capture;
    accel_set_default_logger(capture, NULL);
    AT_EQ_INT(accel_init(&acc, &d), ACCEL_OK);
    for (k = 0; k < NKINDS; ++k) test_kind(&acc, k);
    test_controls(&acc);
    accel_shutdown(&acc);
    at_rm_rf(g_root);
    return at_finish("ckpt-fallback");
}
