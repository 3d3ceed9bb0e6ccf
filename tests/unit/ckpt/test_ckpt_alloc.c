/* accel_safetensors.h and accel_ckpt.h allocate through the Accelerator's host allocator (accel.h "MEMORY"):
     - a counting allocator sees the allocations of every call that must allocate, every block it hands out comes
       back to it (none freed elsewhere, none freed by it that it did not make), and nothing leaks;
     - an allocator that fails at the k-th call, for every k up to the last allocation of a whole save/load cycle,
       makes the call that needed the memory fail with ACCEL_ERR_OUT_OF_MEMORY — no crash, no leak — except where
       save_state has already published the checkpoint and only its rotation (total_limit) failed: that save
       succeeds and the failure is logged at warn level.
   stb_ds follows the host allocator of the Accelerator initialized last (accel.h "MEMORY"), so the failing one
   also fails stb_ds's growth: the module grows its arrays through the core's checked ACCEL__ARR_PUT and uses no
   stb_ds hash map (whose growth cannot be checked), so those failures are errors too. */
#include "accel_safetensors.h"
#include "accel_ckpt.h"
#include "accel_test.h"
#include "accel_test_fs.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef at_counter counter;

static void quiet(void *u, accel_log_level l, const char *m) { (void)u; (void)l; (void)m; }
/* counts warnings that report a failed rotation (the one failure save_state cannot return: the save is done) */
static int g_rotation_warnings, g_other_warnings;
static void count_warnings(void *u, accel_log_level l, const char *m) {
    (void)u;
    if (l > ACCEL_LOG_WARN) return;
    if (l == ACCEL_LOG_WARN && strstr(m, "save_state: rotation (total_limit 1)")) g_rotation_warnings++;
    else g_other_warnings++;
}

static void init_with(accel *acc, counter *c) { AT_EQ_INT(at_init_counting(acc, c, count_warnings), ACCEL_OK); }

static float g_w[64], g_m[32];
static int64_t g_pos;
static accel_result pos_save(void *o, void *buf, size_t cap, size_t *size) {
    *size = sizeof(int64_t);
    if (buf && cap >= *size) memcpy(buf, o, *size);
    return ACCEL_OK;
}
static accel_result pos_load(void *o, const void *buf, size_t size) {
    if (size != sizeof(int64_t)) return ACCEL_ERR_FORMAT;
    memcpy(o, buf, size);
    return ACCEL_OK;
}
static void tensors(accel_tensor *t) {
    memset(t, 0, sizeof(accel_tensor) * 2);
    t[0].name = "layer.weight"; t[0].dtype = ACCEL_F32; t[0].ndim = 2; t[0].shape[0] = 8; t[0].shape[1] = 8; t[0].ptr = g_w;
    t[1].name = "layer.weight.exp_avg"; t[1].dtype = ACCEL_F32; t[1].ndim = 1; t[1].shape[0] = 32; t[1].ptr = g_m;
}

/* Counting: which calls allocate through the hook, and everything comes back. */
static void test_counting(const char *root) {
    accel acc;
    counter c;
    accel_ckpt *ck = NULL;
    accel_st_file *f = NULL;
    accel_tensor t[2];
    accel_ckpt_desc cd;
    char proj[400], dir[600], path[700];
    long before, base;
    uint64_t v = 0;
    memset(&c, 0, sizeof c);
    init_with(&acc, &c);
    tensors(t);
    base = c.live;
#define ALLOCATES(call, what)                                                                                        \
    do {                                                                                                               \
        long a0 = c.allocs;                                                                                            \
        AT_EQ_INT((call), ACCEL_OK);                                                                                   \
        AT_CHECK_MSG(c.allocs > a0, what " allocates through the host allocator");                                    \
    } while (0)
    snprintf(proj, sizeof proj, "%s/counting", root);
    memset(&cd, 0, sizeof cd);
    cd.project_dir = proj;
    ALLOCATES(accel_ckpt_create(&acc, &cd, &ck), "accel_ckpt_create");
    ALLOCATES(accel_ckpt_register_model(ck, t, 1), "register_model");
    ALLOCATES(accel_ckpt_register_optimizer(ck, t + 1, 1), "register_optimizer");
    ALLOCATES(accel_ckpt_register(ck, "sampler", pos_save, pos_load, &g_pos), "register");
    before = c.live;
    ALLOCATES(accel_parse_size(&acc, "1.5GB", &v), "parse_size of a decimal");
    AT_CHECK(v == 1500000000ull);
    snprintf(path, sizeof path, "%s/one.safetensors", root);
    ALLOCATES(accel_st_save(&acc, path, t, 2, NULL, 0), "save_safetensors");
    ALLOCATES(accel_st_file_open(&acc, path, &f), "file_open");
    ALLOCATES(accel_st_file_load_all(f, t, 2), "file_load_all");
    accel_st_file_destroy(f);
    snprintf(dir, sizeof dir, "%s/state", proj);
    ALLOCATES(accel_ckpt_save_state(ck, dir, NULL, 0), "save_state");
    ALLOCATES(accel_ckpt_load_state(ck, dir), "load_state");
    ALLOCATES(accel_ckpt_verify(&acc, dir), "verify");
    snprintf(dir, sizeof dir, "%s/model", proj);
    ALLOCATES(accel_st_save_model(&acc, dir, t, 2, "300"), "save_model (sharded)");
    ALLOCATES(accel_st_load_model(&acc, dir, t, 2), "load_model (sharded)");
    AT_EQ_INT(c.live, before); /* every call freed what it allocated */
    accel_ckpt_destroy(ck);
    AT_EQ_INT(c.live, base);
    AT_EQ_INT(c.foreign, 0);
    accel_shutdown(&acc);
    AT_EQ_INT(c.live, 0);
    AT_EQ_INT(c.foreign, 0);
#undef ALLOCATES
}

/* One whole cycle on acc; returns the first error (and stops there), ACCEL_OK when everything worked. */
static accel_result cycle(accel *acc, const char *root, int k) {
    accel_ckpt *ck = NULL;
    accel_st_file *f = NULL;
    accel_tensor t[2];
    accel_ckpt_desc cd;
    char proj[400], dir[600], path[700];
    uint64_t v = 0;
    accel_result r;
    tensors(t);
    snprintf(proj, sizeof proj, "%s/oom_%d", root, k);
    memset(&cd, 0, sizeof cd);
    cd.project_dir = proj;
    cd.automatic_checkpoint_naming = 1;
    cd.total_limit = 1;
    if ((r = accel_ckpt_create(acc, &cd, &ck)) != ACCEL_OK) return r;
    if ((r = accel_ckpt_register_model(ck, t, 1)) != ACCEL_OK) goto out;
    if ((r = accel_ckpt_register_optimizer(ck, t + 1, 1)) != ACCEL_OK) goto out;
    if ((r = accel_ckpt_register(ck, NULL, pos_save, pos_load, &g_pos)) != ACCEL_OK) goto out;
    r = accel_ckpt_load_state(ck, NULL);
    if (r != ACCEL_ERR_NOT_FOUND) { if (r == ACCEL_OK) r = ACCEL_ERR_STATE; goto out; }
    if ((r = accel_ckpt_save_state(ck, NULL, NULL, 0)) != ACCEL_OK) goto out;
    if ((r = accel_ckpt_save_state(ck, NULL, dir, sizeof dir)) != ACCEL_OK) goto out; /* rotation */
    if ((r = accel_ckpt_load_state(ck, NULL)) != ACCEL_OK) goto out;
    if ((r = accel_parse_size(acc, "2.5KiB", &v)) != ACCEL_OK) goto out;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if ((r = accel_st_file_open(acc, path, &f)) != ACCEL_OK) goto out;
    r = accel_st_file_load_all(f, t, 1);
    accel_st_file_destroy(f);
    if (r != ACCEL_OK) goto out;
    snprintf(path, sizeof path, "%s/model", proj);
    if ((r = accel_st_save_model(acc, path, t, 2, "300")) != ACCEL_OK) goto out;
    r = accel_st_load_model(acc, path, t, 2);
out:
    accel_ckpt_destroy(ck);
    return r;
}

static void test_failing(const char *root) {
    accel acc;
    counter c;
    int k, hit = 0, done = 0;
    memset(&c, 0, sizeof c);
    init_with(&acc, &c); /* initialized last: stb_ds allocates through c too (see the top of the file) */
    for (k = 1; k < 4000 && !done; ++k) {
        long live0 = c.live, failed0 = c.failed, rot0 = g_rotation_warnings;
        accel_result r;
        char ctx[32];
        snprintf(ctx, sizeof ctx, "fail at %d", k);
        at_context = ctx;
        c.fail_at = c.calls + k;
        r = cycle(&acc, root, k);
        c.fail_at = 0;
        if (c.failed == failed0) { /* the cycle needed fewer than k allocations: every failure point was tried */
            AT_EQ_INT(r, ACCEL_OK);
            done = 1;
        } else if (g_rotation_warnings > rot0) { /* the failure hit the rotation of a completed save */
            AT_EQ_INT(r, ACCEL_OK);
            AT_EQ_INT(g_rotation_warnings, rot0 + 1);
        } else {
            ++hit;
            AT_EQ_INT(r, ACCEL_ERR_OUT_OF_MEMORY);
        }
        AT_EQ_INT(c.live, live0); /* no leak on any path */
    }
    at_context = "";
    AT_CHECK(done);
    AT_CHECK_MSG(hit >= 20, "the cycle allocates through the hook at many points");
    AT_CHECK(g_rotation_warnings > 0);
    AT_EQ_INT(g_other_warnings, 0);
    AT_EQ_INT(c.foreign, 0);
    accel_shutdown(&acc);
    AT_EQ_INT(c.live, 0);
}

int main(void) {
    /* the sweep saves hundreds of checkpoints: on tmpfs (when there is one) their fsyncs cost nothing */
    char shm[] = "/dev/shm/accel_ckpt_alloc_XXXXXX", tmp[] = "/tmp/accel_ckpt_alloc_XXXXXX", *tmpl = mkdtemp(shm);
    if (!tmpl) tmpl = mkdtemp(tmp);
    if (!tmpl) { perror("mkdtemp"); return 1; }
    accel_set_default_logger(quiet, NULL);
    test_counting(tmpl);
    test_failing(tmpl);
    at_rm_rf(tmpl);
    return at_finish("ckpt-alloc");
}
