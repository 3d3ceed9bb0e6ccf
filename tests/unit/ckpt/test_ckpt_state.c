/* save_state / load_state and the core's training state, errors and logging:
     - every counter of the Accelerator (step, sync_gradients, optimizer_step_was_skipped, optimizer_steps,
       scheduler_steps, scheduler_adjusted_steps) and the RNG survive save/load; the scheduler's total-steps cap then
       behaves as in the uninterrupted run (the reference: the original Accelerator driven further);
     - random_states_<rank>.bin holds exactly what accel_state_save gives; accelerator_state.json only ckpt's fields;
     - a failing registered save/load callback keeps its own message (root cause) in accel_last_error;
     - "no checkpoint yet" is ACCEL_ERR_NOT_FOUND with one INFO line and nothing at WARN/ERROR, and a checkpoint that
       lacks a registered file is not mistaken for "no checkpoint";
     - one flipped byte anywhere in any file of a checkpoint is caught (that file's checksum) and nothing is applied. */
#include "accel_ckpt.h"
#include "accel_test.h"
#include "accel_test_fs.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <dirent.h>
#include <stdio.h>

static char g_root[256];

/* ------------------------------------------------------------------------------------ a capturing logger */
#define MAX_LINES 256
typedef struct { int n; accel_log_level level[MAX_LINES]; char text[MAX_LINES][1100]; } log_capture;
static void capture(void *u, accel_log_level level, const char *msg) {
    log_capture *c = (log_capture *)u;
    if (c->n >= MAX_LINES) return;
    c->level[c->n] = level;
    snprintf(c->text[c->n], sizeof c->text[c->n], "%s", msg);
    c->n++;
}
static int count_level(const log_capture *c, accel_log_level level) {
    int i, k = 0;
    for (i = 0; i < c->n; ++i) k += c->level[i] == level;
    return k;
}
static const char *first_at(const log_capture *c, accel_log_level level) {
    int i;
    for (i = 0; i < c->n; ++i)
        if (c->level[i] == level) return c->text[i];
    return "";
}

static void init_acc(accel *acc, log_capture *cap) {
    accel_desc d;
    memset(&d, 0, sizeof d);
    d.no_mpi = 1;
    d.gradient_accumulation_steps = 3;
    d.log_fn = capture;
    d.log_user_data = cap;
    d.log_level = ACCEL_LOG_DEBUG;
    memset(cap, 0, sizeof *cap);
    AT_EQ_INT(accel_init(acc, &d), ACCEL_OK);
}

/* One micro-batch of the documented loop; the optimizer step of sync step number `skip_at` (counted in *syncs) is
   skipped. Returns the scheduler steps to take. */
static int micro_batch(accel *acc, int *syncs, int skip_at, int64_t total_steps) {
    int taken;
    accel_accumulate_begin(acc);
    if (acc->sync_gradients) {
        ++*syncs;
        accel_optimizer_step_done(acc, *syncs == skip_at);
    }
    taken = accel_scheduler_steps(acc, total_steps);
    accel_accumulate_end(acc);
    return taken;
}

/* a registered object whose callbacks can be told to fail */
typedef struct { accel *acc; int64_t value; int fail_save, fail_load; } obj;
static accel_result obj_save(void *o, void *buf, size_t cap, size_t *size) {
    obj *x = (obj *)o;
    if (x->fail_save == 1) return accel_set_error(x->acc, ACCEL_ERR_STATE, "scaler has unscaled gradients in flight");
    *size = sizeof x->value;
    if (buf && cap >= sizeof x->value) memcpy(buf, &x->value, sizeof x->value);
    return ACCEL_OK;
}
static accel_result obj_load(void *o, const void *buf, size_t size) {
    obj *x = (obj *)o;
    if (x->fail_load == 1) return accel_set_error(x->acc, ACCEL_ERR_MISMATCH, "saved with num_processes 2, this run has 1");
    if (x->fail_load == 2) return ACCEL_ERR_FORMAT; /* no message recorded anywhere */
    if (x->fail_load == 3) return accel_set_error(NULL, ACCEL_ERR_FORMAT, "shard state: dataset_len 104, saved 103");
    if (size != sizeof x->value) return accel_set_error(x->acc, ACCEL_ERR_FORMAT, "obj: %zu bytes", size);
    memcpy(&x->value, buf, size);
    return ACCEL_OK;
}

static accel_ckpt *make_ck(accel *acc, const char *project, obj *o) {
    accel_ckpt *ck = NULL;
    accel_ckpt_desc cd;
    memset(&cd, 0, sizeof cd);
    cd.project_dir = project;
    cd.automatic_checkpoint_naming = 1;
    AT_EQ_INT(accel_ckpt_create(acc, &cd, &ck), ACCEL_OK);
    if (ck && o) AT_EQ_INT(accel_ckpt_register(ck, "sampler", obj_save, obj_load, o), ACCEL_OK);
    return ck;
}

/* ------------------------------------------------------------------------------ counters and RNG survive */
static void test_counters(void) {
    accel a, b;
    log_capture ca, cb;
    accel_ckpt *cka, *ckb;
    obj oa, ob;
    char proj[400], path[700];
    unsigned char sa[ACCEL_STATE_BYTES], sb[ACCEL_STATE_BYTES], *file;
    size_t na = 0, nb = 0, nf = 0;
    int i, syncs_a = 0, syncs_b = 0;
    init_acc(&a, &ca);
    init_acc(&b, &cb);
    accel_set_seed(&a, 777, 0);
    for (i = 0; i < 9; ++i) { uint32_t r[4]; accel_rng_next4(&a, r); }
    for (i = 0; i < 7; ++i) micro_batch(&a, &syncs_a, 2, 0);
    /* the state is not the default one in any field (else the test could not fail) */
    AT_EQ_INT(a.step, 7);
    AT_EQ_INT(a.sync_gradients, 0);
    AT_EQ_INT(a.optimizer_step_was_skipped, 1);
    AT_EQ_INT(a.optimizer_steps, 1);
    AT_EQ_INT(a.scheduler_steps, 1);
    AT_EQ_INT(a.scheduler_adjusted_steps, 5);
    AT_CHECK(a.rng.seed == 777 && a.rng.offset == 9);

    snprintf(proj, sizeof proj, "%s/counters", g_root);
    memset(&oa, 0, sizeof oa); oa.acc = &a; oa.value = 42;
    memset(&ob, 0, sizeof ob); ob.acc = &b;
    cka = make_ck(&a, proj, &oa);
    ckb = make_ck(&b, proj, &ob);
    AT_EQ_INT(accel_ckpt_save_state(cka, NULL, NULL, 0), ACCEL_OK);

    /* the files: random_states_0.bin is accel_state_save's bytes, accelerator_state.json ckpt's own fields only */
    AT_EQ_INT(accel_state_save(&a, sa, sizeof sa, &na), ACCEL_OK);
    snprintf(path, sizeof path, "%s/checkpoints/checkpoint_0/random_states_0.bin", proj);
    file = at_read_file(path, &nf);
    AT_CHECK(file && nf == na && !memcmp(file, sa, na));
    free(file);
    snprintf(path, sizeof path, "%s/checkpoints/checkpoint_0/random_states_0.json", proj);
    AT_CHECK(access(path, F_OK) != 0);
    snprintf(path, sizeof path, "%s/checkpoints/checkpoint_0/accelerator_state.json", proj);
    file = at_read_file(path, &nf);
    AT_CHECK(file != NULL);
    if (file) {
        file[nf] = 0;
        AT_EQ_STR((char *)file, "{\"format\": \"accel\", \"iteration\": 0, \"num_processes\": 1, \"version\": 1}\n");
        free(file);
    }

    /* a fresh Accelerator resumes: every field equal, and the same bytes from accel_state_save */
    AT_EQ_INT(accel_ckpt_load_state(ckb, NULL), ACCEL_OK);
    AT_EQ_INT(b.step, a.step);
    AT_EQ_INT(b.sync_gradients, a.sync_gradients);
    AT_EQ_INT(b.optimizer_step_was_skipped, a.optimizer_step_was_skipped);
    AT_EQ_INT(b.optimizer_steps, a.optimizer_steps);
    AT_EQ_INT(b.scheduler_steps, a.scheduler_steps);
    AT_EQ_INT(b.scheduler_adjusted_steps, a.scheduler_adjusted_steps);
    AT_CHECK(b.rng.seed == a.rng.seed && b.rng.offset == a.rng.offset);
    AT_EQ_INT(ob.value, 42);
    AT_EQ_INT(accel_state_save(&b, sb, sizeof sb, &nb), ACCEL_OK);
    AT_CHECK(na == nb && !memcmp(sa, sb, na));
    AT_EQ_INT(accel_ckpt_iteration(ckb), 1);

    /* the scheduler's total-steps cap (torch's _step_count counts the adjusted steps too) after the resume is the
       uninterrupted run's: drive both on, micro-batch by micro-batch */
    {
        int ta, tb, differ = 0, total_a = 0, syncs0;
        syncs_b = syncs_a;
        syncs0 = syncs_a;
        for (i = 0; i < 30; ++i) {
            ta = micro_batch(&a, &syncs_a, -1, 12);
            tb = micro_batch(&b, &syncs_b, -1, 12);
            differ += ta != tb;
            total_a += ta;
        }
        AT_EQ_INT(differ, 0);
        /* the cap was reached: fewer steps taken than optimizer steps */
        AT_CHECK(total_a > 0 && total_a < syncs_a - syncs0 && a.scheduler_steps + a.scheduler_adjusted_steps >= 12);
        AT_EQ_INT(b.scheduler_steps, a.scheduler_steps);
    }
    /* nothing above warn level was logged by a successful save/load */
    AT_EQ_INT(count_level(&ca, ACCEL_LOG_WARN) + count_level(&ca, ACCEL_LOG_ERROR), 0);
    AT_EQ_INT(count_level(&cb, ACCEL_LOG_WARN) + count_level(&cb, ACCEL_LOG_ERROR), 0);
    accel_ckpt_destroy(cka);
    accel_ckpt_destroy(ckb);
    accel_shutdown(&a);
    accel_shutdown(&b);
}

/* ------------------------------------------------------------------------------ root causes of callbacks */
static void test_root_causes(void) {
    accel a;
    log_capture ca;
    accel_ckpt *ck;
    obj o;
    char proj[400], dir[600];
    accel_result r;
    init_acc(&a, &ca);
    snprintf(proj, sizeof proj, "%s/causes", g_root);
    snprintf(dir, sizeof dir, "%s/explicit", proj);
    memset(&o, 0, sizeof o);
    o.acc = &a;
    o.value = 5;
    ck = make_ck(&a, proj, &o);
    /* save: the callback's message, behind what was being saved */
    o.fail_save = 1;
    AT_EQ_INT(accel_ckpt_save_state(ck, dir, NULL, 0), ACCEL_ERR_STATE);
    AT_CONTAINS(accel_last_error(&a), "scaler has unscaled gradients in flight");
    AT_CONTAINS(accel_last_error(&a), "sampler.bin");
    AT_CHECK(access(dir, F_OK) != 0); /* nothing published */
    o.fail_save = 0;
    AT_EQ_INT(accel_ckpt_save_state(ck, dir, NULL, 0), ACCEL_OK);
    /* load: the callback's message (the root cause), not a vaguer one */
    o.fail_load = 1;
    AT_EQ_INT(accel_ckpt_load_state(ck, dir), ACCEL_ERR_MISMATCH);
    AT_CONTAINS(accel_last_error(&a), "saved with num_processes 2, this run has 1");
    AT_CONTAINS(accel_last_error(&a), "load_state: sampler.bin");
    /* an object without an Accelerator records its message in the process-wide buffer: it is kept too */
    o.fail_load = 3;
    AT_EQ_INT(accel_ckpt_load_state(ck, dir), ACCEL_ERR_FORMAT);
    AT_CONTAINS(accel_last_error(&a), "shard state: dataset_len 104, saved 103");
    AT_CONTAINS(accel_last_error(&a), "sampler.bin");
    /* a callback that records nothing: the message says so and does not pass off an older error as the cause */
    AT_EQ_INT(accel_set_error(&a, ACCEL_ERR_IO, "an unrelated older error"), ACCEL_ERR_IO);
    accel_set_error(NULL, ACCEL_ERR_IO, "another unrelated older error");
    o.fail_load = 2;
    r = accel_ckpt_load_state(ck, dir);
    AT_EQ_INT(r, ACCEL_ERR_FORMAT);
    AT_CONTAINS(accel_last_error(&a), "sampler.bin");
    AT_CONTAINS(accel_last_error(&a), "without a message");
    AT_CHECK(!strstr(accel_last_error(&a), "unrelated"));
    o.fail_load = 0;
    o.value = 0;
    AT_EQ_INT(accel_ckpt_load_state(ck, dir), ACCEL_OK);
    AT_EQ_INT(o.value, 5);
    /* errors are returned, not printed: no failure above was logged at warn or error */
    AT_EQ_INT(count_level(&ca, ACCEL_LOG_WARN) + count_level(&ca, ACCEL_LOG_ERROR), 0);
    accel_ckpt_destroy(ck);
    accel_shutdown(&a);
}

/* ------------------------------------------------------------------ a failed load applies no training state */
/* The Accelerator's state is validated first and applied only after everything else succeeded on every process, so
   a load that fails changes none of it — nor says that it did: the warning accel_state_load gives for a different
   gradient_accumulation_steps appears only for a load that succeeded. */
static void test_failed_load_applies_nothing(void) {
    accel a, b;
    log_capture ca, cb;
    accel_ckpt *cka, *ckb;
    obj oa, ob;
    accel_desc d;
    char proj[400];
    unsigned char before[ACCEL_STATE_BYTES], after[ACCEL_STATE_BYTES];
    size_t nb = 0, na = 0;
    int i, syncs = 0, warns;
    init_acc(&a, &ca);
    memset(&d, 0, sizeof d);
    d.no_mpi = 1;
    d.gradient_accumulation_steps = 2; /* the checkpoint was saved with 3 */
    d.log_fn = capture;
    d.log_user_data = &cb;
    d.log_level = ACCEL_LOG_DEBUG;
    memset(&cb, 0, sizeof cb);
    AT_EQ_INT(accel_init(&b, &d), ACCEL_OK);
    accel_set_seed(&a, 99, 0);
    for (i = 0; i < 5; ++i) micro_batch(&a, &syncs, -1, 0);
    snprintf(proj, sizeof proj, "%s/failed_load", g_root);
    memset(&oa, 0, sizeof oa); oa.acc = &a; oa.value = 7;
    memset(&ob, 0, sizeof ob); ob.acc = &b; ob.fail_load = 1;
    cka = make_ck(&a, proj, &oa);
    ckb = make_ck(&b, proj, &ob);
    AT_EQ_INT(accel_ckpt_save_state(cka, NULL, NULL, 0), ACCEL_OK);
    accel_set_seed(&b, 5, 0);
    AT_EQ_INT(accel_state_save(&b, before, sizeof before, &nb), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_load_state(ckb, NULL), ACCEL_ERR_MISMATCH);
    AT_EQ_INT(accel_state_save(&b, after, sizeof after, &na), ACCEL_OK);
    AT_CHECK(na == nb && !memcmp(before, after, nb));
    AT_EQ_INT(count_level(&cb, ACCEL_LOG_WARN), 0);
    AT_EQ_INT(accel_ckpt_iteration(ckb), 0);
    /* the same load succeeds once the callback does: now the state is applied and the warning given, once */
    ob.fail_load = 0;
    AT_EQ_INT(accel_ckpt_load_state(ckb, NULL), ACCEL_OK);
    AT_EQ_INT(b.step, a.step);
    AT_EQ_INT(ob.value, 7);
    warns = count_level(&cb, ACCEL_LOG_WARN);
    AT_EQ_INT(warns, 1);
    AT_CONTAINS(first_at(&cb, ACCEL_LOG_WARN), "gradient_accumulation_steps=3");
    accel_ckpt_destroy(cka);
    accel_ckpt_destroy(ckb);
    accel_shutdown(&a);
    accel_shutdown(&b);
}

/* ------------------------------------------------------------- a flipped byte anywhere: caught, nothing applied */
static void put_bytes(const char *path, const unsigned char *b, size_t n) {
    FILE *f = fopen(path, "wb");
    AT_CHECK(f != NULL);
    if (!f) return;
    AT_CHECK(fwrite(b, 1, n, f) == n);
    fclose(f);
}
static accel_result shard_load_all(void *o, const void *const *bufs, const size_t *sizes, int count) {
    obj *x = (obj *)o;
    if (count != 1 || sizes[0] != sizeof x->value) return accel_set_error(x->acc, ACCEL_ERR_FORMAT, "shard: %d files", count);
    memcpy(&x->value, bufs[0], sizeof x->value);
    return ACCEL_OK;
}
/* Every file of the checkpoint (tensor files, registered, sharded and unregistered objects, custom objects, the
   training state, accelerator_state.json), one byte flipped at its start, middle and end: load_state fails with the
   file's checksum and applies nothing (tensors, objects, counters/RNG, iteration); then the intact checkpoint loads
   and changes all of them (so the "nothing applied" checks can fail). */
static void test_corrupt_any_file(void) {
    accel a, b;
    log_capture ca, cb;
    accel_ckpt *cka, *ckb;
    obj sa, sb, ca_obj, cb_obj, extra, sha, shb;
    accel_tensor mt[2], ot[1], mtb[2], otb[1];
    float w[6] = {1, 2, 3, 4, 5, 6}, w2[6], m[4] = {-1.5f, 2.5f, 8, 9}, m2[4];
    uint16_t h[3] = {0x3c00, 0x4000, 0x4200}, h2[3];
    char proj[400], dir[500], path[800];
    unsigned char before[ACCEL_STATE_BYTES], after[ACCEL_STATE_BYTES];
    size_t nb = 0, na = 0;
    int i, syncs = 0, nfiles = 0, it_before;
    DIR *d;
    struct dirent *e;
    init_acc(&a, &ca);
    init_acc(&b, &cb);
    accel_set_seed(&a, 1234, 0);
    for (i = 0; i < 7; ++i) micro_batch(&a, &syncs, -1, 0);
    memset(mt, 0, sizeof mt);
    mt[0].name = "w"; mt[0].dtype = ACCEL_F32; mt[0].ndim = 2; mt[0].shape[0] = 2; mt[0].shape[1] = 3; mt[0].ptr = w;
    mt[1].name = "h"; mt[1].dtype = ACCEL_F16; mt[1].ndim = 1; mt[1].shape[0] = 3; mt[1].ptr = h;
    memset(ot, 0, sizeof ot);
    ot[0].name = "exp_avg"; ot[0].dtype = ACCEL_F32; ot[0].ndim = 1; ot[0].shape[0] = 4; ot[0].ptr = m;
    memcpy(mtb, mt, sizeof mt); mtb[0].ptr = w2; mtb[1].ptr = h2;
    memcpy(otb, ot, sizeof ot); otb[0].ptr = m2;
    memset(&sa, 0, sizeof sa); sa.acc = &a; sa.value = 7;
    memset(&ca_obj, 0, sizeof ca_obj); ca_obj.acc = &a; ca_obj.value = 11;
    memset(&extra, 0, sizeof extra); extra.acc = &a; extra.value = 13;
    memset(&sha, 0, sizeof sha); sha.acc = &a; sha.value = 17;
    memset(&shb, 0, sizeof shb); shb.acc = &b;
    memset(&sb, 0, sizeof sb); sb.acc = &b;
    memset(&cb_obj, 0, sizeof cb_obj); cb_obj.acc = &b;
    snprintf(proj, sizeof proj, "%s/corrupt_any", g_root);
    snprintf(dir, sizeof dir, "%s/ckpt", proj);
    cka = make_ck(&a, proj, &sa);
    AT_EQ_INT(accel_ckpt_register_model(cka, mt, 2), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_register_optimizer(cka, ot, 1), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_register(cka, NULL, obj_save, obj_load, &ca_obj), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_register(cka, "extra", obj_save, obj_load, &extra), ACCEL_OK); /* not registered by b */
    AT_EQ_INT(accel_ckpt_register_sharded(cka, "zero", obj_save, shard_load_all, &sha), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_save_state(cka, dir, NULL, 0), ACCEL_OK);
    ckb = make_ck(&b, proj, &sb);
    AT_EQ_INT(accel_ckpt_register_model(ckb, mtb, 2), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_register_optimizer(ckb, otb, 1), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_register(ckb, NULL, obj_save, obj_load, &cb_obj), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_register_sharded(ckb, "zero", obj_save, shard_load_all, &shb), ACCEL_OK);
    accel_set_seed(&b, 5, 0);
    AT_EQ_INT(accel_state_save(&b, before, sizeof before, &nb), ACCEL_OK);
    it_before = accel_ckpt_iteration(ckb);
    d = opendir(dir);
    AT_CHECK(d != NULL);
    while (d && (e = readdir(d)) != NULL) {
        unsigned char *bytes;
        size_t n = 0, pos[3];
        int k;
        if (e->d_name[0] == '.' || !strcmp(e->d_name, "checkpoint_complete.json")) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        bytes = at_read_file(path, &n);
        AT_CHECK(bytes != NULL && n > 0);
        if (!bytes || !n) continue;
        ++nfiles;
        pos[0] = 0; pos[1] = n / 2; pos[2] = n - 1;
        for (k = 0; k < 3; ++k) {
            char want[300];
            memset(w2, 0xff, sizeof w2); memset(h2, 0xff, sizeof h2); memset(m2, 0xff, sizeof m2);
            sb.value = -5; cb_obj.value = -6; shb.value = -7;
            bytes[pos[k]] ^= 0x01;
            put_bytes(path, bytes, n);
            bytes[pos[k]] ^= 0x01;
            AT_EQ_INT(accel_ckpt_load_state(ckb, dir), ACCEL_ERR_FORMAT);
            snprintf(want, sizeof want, "checksum of %s", e->d_name);
            AT_CONTAINS(accel_last_error(&b), want);
            {   /* nothing applied */
                unsigned char ff[sizeof w2];
                memset(ff, 0xff, sizeof ff);
                AT_CHECK(!memcmp(w2, ff, sizeof w2) && !memcmp(h2, ff, sizeof h2) && !memcmp(m2, ff, sizeof m2));
            }
            AT_EQ_INT(sb.value, -5);
            AT_EQ_INT(cb_obj.value, -6);
            AT_EQ_INT(shb.value, -7);
            AT_EQ_INT(accel_state_save(&b, after, sizeof after, &na), ACCEL_OK);
            AT_CHECK(na == nb && !memcmp(before, after, nb));
            AT_EQ_INT(accel_ckpt_iteration(ckb), it_before);
        }
        put_bytes(path, bytes, n);
        free(bytes);
    }
    if (d) closedir(d);
    AT_EQ_INT(nfiles, 8); /* model, optimizer, sampler, custom_checkpoint_0, extra, zero_0, random_states_0, accelerator_state */
    /* the intact checkpoint loads and changes everything the failed loads left alone */
    AT_EQ_INT(accel_ckpt_load_state(ckb, dir), ACCEL_OK);
    AT_CHECK(!memcmp(w2, w, sizeof w) && !memcmp(h2, h, sizeof h) && !memcmp(m2, m, sizeof m));
    AT_EQ_INT(sb.value, 7);
    AT_EQ_INT(cb_obj.value, 11);
    AT_EQ_INT(shb.value, 17);
    AT_EQ_INT(b.step, a.step);
    AT_EQ_INT(accel_state_save(&b, after, sizeof after, &na), ACCEL_OK);
    AT_CHECK(memcmp(before, after, nb) != 0);
    AT_EQ_INT(accel_ckpt_iteration(ckb), 1);
    accel_ckpt_destroy(cka);
    accel_ckpt_destroy(ckb);
    accel_shutdown(&a);
    accel_shutdown(&b);
}

/* ------------------------------------------------------------------------------------ no checkpoint yet */
/* skipped: NULL, or the one damaged checkpoint directory load_state must skip with a WARN (FALLBACK) */
static void expect_fresh(accel *a, log_capture *ca, accel_ckpt *ck, const char *cdir, const char *skipped) {
    char want[700];
    int before = ca->n, k;
    log_capture tail;
    accel_result r = accel_ckpt_load_state(ck, NULL);
    AT_EQ_INT(r, ACCEL_ERR_NOT_FOUND);
    AT_CONTAINS(accel_last_error(a), cdir);
    memset(&tail, 0, sizeof tail);
    for (k = before; k < ca->n; ++k) capture(&tail, ca->level[k], ca->text[k]);
    AT_EQ_INT(count_level(&tail, ACCEL_LOG_INFO), 1);
    AT_EQ_INT(count_level(&tail, ACCEL_LOG_WARN), skipped ? 1 : 0);
    if (skipped) {
        snprintf(want, sizeof want, "load_state: skipping %s (", skipped);
        AT_CONTAINS(first_at(&tail, ACCEL_LOG_WARN), want);
        AT_CONTAINS(first_at(&tail, ACCEL_LOG_WARN), "no checkpoint_complete.json");
    }
    AT_EQ_INT(count_level(&tail, ACCEL_LOG_ERROR), 0);
    snprintf(want, sizeof want, "no checkpoint under %s: starting fresh", cdir);
    AT_EQ_STR(first_at(&tail, ACCEL_LOG_INFO), want);
}

static void test_fresh(void) {
    accel a;
    log_capture ca;
    accel_ckpt *ck;
    obj o, extra;
    char proj[400], cdir[600], p[800];
    init_acc(&a, &ca);
    snprintf(proj, sizeof proj, "%s/fresh", g_root);
    snprintf(cdir, sizeof cdir, "%s/checkpoints", proj);
    memset(&o, 0, sizeof o);
    o.acc = &a;
    ck = make_ck(&a, proj, &o);
    /* no checkpoints directory at all */
    expect_fresh(&a, &ca, ck, cdir, NULL);
    /* a checkpoints directory with only an incomplete checkpoint (no marker): skipped with a WARN, then fresh */
    AT_EQ_INT(mkdir(proj, 0777), 0);
    AT_EQ_INT(mkdir(cdir, 0777), 0);
    snprintf(p, sizeof p, "%s/checkpoint_0", cdir);
    AT_EQ_INT(mkdir(p, 0777), 0);
    expect_fresh(&a, &ca, ck, cdir, p);
    AT_EQ_INT(accel_ckpt_iteration(ck), 1); /* the next save goes past it */
    AT_EQ_INT(rmdir(p), 0);
    ca.n = 0;
    /* a real checkpoint that lacks a registered object is an error of the checkpoint, not "no checkpoint yet" */
    AT_EQ_INT(accel_ckpt_save_state(ck, NULL, NULL, 0), ACCEL_OK);
    memset(&extra, 0, sizeof extra);
    extra.acc = &a;
    AT_EQ_INT(accel_ckpt_register(ck, "extra", obj_save, obj_load, &extra), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_load_state(ck, NULL), ACCEL_ERR_INVALID_ARGUMENT);
    AT_CONTAINS(accel_last_error(&a), "extra.bin");
    AT_EQ_INT(count_level(&ca, ACCEL_LOG_WARN) + count_level(&ca, ACCEL_LOG_ERROR), 0);
    accel_ckpt_destroy(ck);
    accel_shutdown(&a);
}

int main(void) {
    char tmpl[] = "/tmp/accel_ckpt_state_XXXXXX";
    if (!mkdtemp(tmpl)) { perror("mkdtemp"); return 1; }
    snprintf(g_root, sizeof g_root, "%s", tmpl);
    test_counters();
    test_root_causes();
    test_failed_load_applies_nothing();
    test_corrupt_any_file();
    test_fresh();
    at_rm_rf(g_root);
    return at_finish("ckpt-state");
}
