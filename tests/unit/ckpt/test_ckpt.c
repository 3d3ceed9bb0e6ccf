/* Unit tests of accel_ckpt.h: save_state/load_state of models, optimizers, registered and custom objects and the
   Accelerator's training state; automatic naming, rotation, explicit directories, corruption detection. */
#include "accel_ckpt.h"
#include "accel_test.h"
#include "accel_test_fs.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_root[256];

static void quiet(void *u, accel_log_level l, const char *m) { (void)u; (void)l; (void)m; }

/* A checkpoint file replaced by a FIFO: load_state and verify refuse it at once, naming it (the marker's size check
   comes first; a FIFO must never be opened blocking). */
typedef struct { accel *acc; accel_ckpt *ck; const char *dir; } fifo_load;
static int fifo_load_child(void *arg) {
    const fifo_load *f = (const fifo_load *)arg;
    accel_result r = accel_ckpt_load_state(f->ck, f->dir);
    if (r == ACCEL_OK || !strstr(accel_last_error(f->acc), "model.safetensors")) {
        fprintf(stderr, "load_state with a FIFO: %d: %s\n", (int)r, accel_last_error(f->acc));
        return 1;
    }
    r = accel_ckpt_verify(f->acc, f->dir);
    if (r == ACCEL_OK || !strstr(accel_last_error(f->acc), "model.safetensors")) {
        fprintf(stderr, "verify with a FIFO: %d: %s\n", (int)r, accel_last_error(f->acc));
        return 2;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------ save/load state */
typedef struct { int64_t epoch, position; } sampler_state;
static accel_result sampler_save(void *user, void *buf, size_t cap, size_t *written) {
    *written = sizeof(sampler_state);
    if (cap >= sizeof(sampler_state)) memcpy(buf, user, sizeof(sampler_state));
    return ACCEL_OK;
}
static accel_result sampler_load(void *user, const void *buf, size_t n) {
    if (n != sizeof(sampler_state)) return ACCEL_ERR_FORMAT;
    memcpy(user, buf, n);
    return ACCEL_OK;
}
typedef struct { char text[32]; } custom_obj;
static accel_result custom_save(void *user, void *buf, size_t cap, size_t *written) {
    size_t n = strlen(((custom_obj *)user)->text);
    *written = n;
    if (buf && cap >= n) memcpy(buf, ((custom_obj *)user)->text, n); /* buf NULL asks for the size */
    return ACCEL_OK;
}
static accel_result custom_load(void *user, const void *buf, size_t n) {
    if (n >= sizeof(((custom_obj *)user)->text)) return ACCEL_ERR_FORMAT;
    memcpy(((custom_obj *)user)->text, buf, n);
    ((custom_obj *)user)->text[n] = 0;
    return ACCEL_OK;
}

static void test_state(void) {
    accel acc;
    accel_desc d;
    accel_ckpt *ck = NULL, *ck2 = NULL;
    accel_ckpt_desc cd;
    float w[6] = {1, 2, 3, 4, 5, 6}, m[6] = {0.5f, 0.25f, 0, 0, 0, 0};
    uint16_t h[3] = {0x3c00, 0x4000, 0x4200};
    accel_tensor mt[2], ot[1];
    sampler_state ss = {3, 17};
    custom_obj co;
    char out[1200], p[800], latest[1200];
    int i;
    memset(&d, 0, sizeof d);
    d.no_mpi = 1;
    d.log_fn = quiet;
    AT_EQ_INT(accel_init(&acc, &d), ACCEL_OK);
    accel_set_seed(&acc, 1234, 0);
    acc.rng.offset = 77;
    snprintf(co.text, sizeof co.text, "hello");
    memset(mt, 0, sizeof mt);
    memset(ot, 0, sizeof ot);
    mt[0].name = "w"; mt[0].dtype = ACCEL_F32; mt[0].ndim = 2; mt[0].shape[0] = 2; mt[0].shape[1] = 3; mt[0].ptr = w;
    mt[1].name = "h"; mt[1].dtype = ACCEL_F16; mt[1].ndim = 1; mt[1].shape[0] = 3; mt[1].ptr = h;
    ot[0].name = "w.exp_avg"; ot[0].dtype = ACCEL_F32; ot[0].ndim = 2; ot[0].shape[0] = 2; ot[0].shape[1] = 3; ot[0].ptr = m;
    memset(&cd, 0, sizeof cd);
    snprintf(p, sizeof p, "%s/proj", g_root);
    cd.project_dir = p;
    cd.automatic_checkpoint_naming = 1;
    cd.total_limit = 2;
    AT_EQ_INT(accel_ckpt_create(&acc, &cd, &ck), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_register_model(ck, mt, 2), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_register_optimizer(ck, ot, 1), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_register(ck, "sampler", sampler_save, sampler_load, &ss), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_register(ck, NULL, custom_save, custom_load, &co), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_register(ck, "sampler", sampler_save, sampler_load, &ss), ACCEL_ERR_INVALID_ARGUMENT);
    AT_EQ_INT(accel_ckpt_register(ck, "../x", sampler_save, sampler_load, &ss), ACCEL_ERR_INVALID_ARGUMENT);
    AT_EQ_INT(accel_ckpt_register(ck, "model", sampler_save, sampler_load, &ss), ACCEL_ERR_INVALID_ARGUMENT);
    /* no checkpoint yet */
    AT_EQ_INT(accel_ckpt_load_state(ck, NULL), ACCEL_ERR_NOT_FOUND);
    /* three saves with total_limit 2 → checkpoint_1, checkpoint_2 remain */
    for (i = 0; i < 3; ++i) {
        w[0] = (float)(100 + i);
        ss.position = 17 + i;
        AT_EQ_INT(accel_ckpt_save_state(ck, NULL, out, sizeof out), ACCEL_OK);
    }
    AT_EQ_INT(accel_ckpt_iteration(ck), 3);
    AT_CONTAINS(out, "checkpoints/checkpoint_2");
    snprintf(latest, sizeof latest, "%s/checkpoints/checkpoint_0", p); AT_CHECK(!at_exists(latest));
    snprintf(latest, sizeof latest, "%s/checkpoints/checkpoint_1", p); AT_CHECK(at_exists(latest));
    snprintf(latest, sizeof latest, "%s/checkpoints/checkpoint_2/random_states_0.bin", p); AT_EQ_INT(at_file_size(latest), ACCEL_STATE_BYTES);
    snprintf(latest, sizeof latest, "%s/checkpoints/checkpoint_2/custom_checkpoint_0.bin", p); AT_CHECK(at_exists(latest));
    snprintf(latest, sizeof latest, "%s/checkpoints/checkpoint_2/sampler.bin", p); AT_EQ_INT(at_file_size(latest), 16);
    snprintf(latest, sizeof latest, "%s/checkpoints/.checkpoint_2.tmp", p); AT_CHECK(!at_exists(latest));
    snprintf(latest, sizeof latest, "%s/checkpoints", p);
    AT_EQ_INT(accel_ckpt_latest(&acc, latest, out, sizeof out), ACCEL_OK);
    AT_CONTAINS(out, "checkpoint_2");
    AT_EQ_INT(accel_ckpt_verify(&acc, out), ACCEL_OK);

    /* a new process: fresh state, load the latest → everything restored, iteration 3 (policy 5) */
    {
        float w2[6] = {0}, m2[6] = {0};
        uint16_t h2[3] = {0};
        sampler_state ss2 = {0, 0};
        custom_obj co2;
        accel_tensor mt2[2], ot2[1];
        memcpy(mt2, mt, sizeof mt2); memcpy(ot2, ot, sizeof ot2);
        mt2[0].ptr = w2; mt2[1].ptr = h2; ot2[0].ptr = m2;
        co2.text[0] = 0;
        accel_set_seed(&acc, 1, 0);
        acc.step = 0;
        AT_EQ_INT(accel_ckpt_create(&acc, &cd, &ck2), ACCEL_OK);
        accel_ckpt_register_model(ck2, mt2, 2);
        accel_ckpt_register_optimizer(ck2, ot2, 1);
        accel_ckpt_register(ck2, "sampler", sampler_save, sampler_load, &ss2);
        /* custom object count mismatch → error, nothing applied */
        AT_EQ_INT(accel_ckpt_load_state(ck2, NULL), ACCEL_ERR_INVALID_ARGUMENT);
        AT_CONTAINS(accel_last_error(&acc), "custom_checkpoint");
        AT_CHECK(w2[0] == 0.0f && ss2.position == 0);
        accel_ckpt_register(ck2, NULL, custom_save, custom_load, &co2);
        AT_EQ_INT(accel_ckpt_load_state(ck2, NULL), ACCEL_OK);
        AT_CHECK(w2[0] == 102.0f && w2[5] == 6.0f);
        AT_CHECK(!memcmp(h2, h, sizeof h) && !memcmp(m2, m, sizeof m));
        AT_EQ_INT(ss2.position, 19);
        AT_EQ_INT(ss2.epoch, 3);
        AT_EQ_STR(co2.text, "hello");
        AT_CHECK(acc.rng.seed == 1234 && acc.rng.offset == 77);
        AT_EQ_INT(accel_ckpt_iteration(ck2), 3);
        /* the next automatic save does not collide */
        AT_EQ_INT(accel_ckpt_save_state(ck2, NULL, out, sizeof out), ACCEL_OK);
        AT_CONTAINS(out, "checkpoint_3");
        /* explicit directory, saved twice (replaced atomically) */
        snprintf(latest, sizeof latest, "%s/explicit", g_root);
        AT_EQ_INT(accel_ckpt_save_state(ck2, latest, NULL, 0), ACCEL_OK);
        w2[1] = 55;
        AT_EQ_INT(accel_ckpt_save_state(ck2, latest, NULL, 0), ACCEL_OK);
        w2[1] = 0;
        AT_EQ_INT(accel_ckpt_load_state(ck2, latest), ACCEL_OK);
        AT_CHECK(w2[1] == 55.0f);
        /* an explicit directory that exists but is not a checkpoint is never replaced */
        {
            char other[1300], keep[1400];
            snprintf(other, sizeof other, "%s/not_a_checkpoint", g_root);
            mkdir(other, 0777);
            snprintf(keep, sizeof keep, "%s/precious.txt", other);
            at_write_file(keep, "data", 4);
            AT_EQ_INT(accel_ckpt_save_state(ck2, other, NULL, 0), ACCEL_ERR_STATE);
            AT_CONTAINS(accel_last_error(&acc), "refusing to replace");
            AT_EQ_INT(at_file_size(keep), 4);
        }
        /* dtype mismatch between registration and checkpoint: error names the tensor, nothing applied */
        {
            accel_ckpt *ck3 = NULL;
            accel_tensor bad[2];
            float wb[6] = {0};
            uint16_t hb[3] = {0};
            memcpy(bad, mt, sizeof bad);
            bad[0].ptr = wb; bad[1].ptr = hb; bad[1].dtype = ACCEL_BF16;
            accel_ckpt_create(&acc, &cd, &ck3);
            accel_ckpt_register_model(ck3, bad, 2);
            accel_ckpt_register_optimizer(ck3, ot2, 1);
            accel_ckpt_register(ck3, "sampler", sampler_save, sampler_load, &ss2);
            accel_ckpt_register(ck3, NULL, custom_save, custom_load, &co2);
            AT_EQ_INT(accel_ckpt_load_state(ck3, latest), ACCEL_ERR_INVALID_ARGUMENT);
            AT_CONTAINS(accel_last_error(&acc), "tensor 'h': expected BF16 [3], found F16 [3]");
            AT_CHECK(wb[0] == 0.0f);
            accel_ckpt_destroy(ck3);
        }
        /* corruption: flip one byte of the model → checksum error; truncation → size error; no marker → incomplete */
        {
            char mp[1600];
            size_t n = 0;
            unsigned char *b;
            snprintf(mp, sizeof mp, "%s/model.safetensors", latest);
            b = at_read_file(mp, &n);
            b[n - 1] ^= 0x40;
            at_write_file(mp, b, n);
            w2[0] = -1;
            AT_EQ_INT(accel_ckpt_load_state(ck2, latest), ACCEL_ERR_FORMAT);
            AT_CONTAINS(accel_last_error(&acc), "checksum of model.safetensors");
            AT_CHECK(w2[0] == -1.0f);
            AT_EQ_INT(accel_ckpt_verify(&acc, latest), ACCEL_ERR_FORMAT);
            at_write_file(mp, b, n - 3);
            AT_EQ_INT(accel_ckpt_load_state(ck2, latest), ACCEL_ERR_FORMAT);
            AT_CONTAINS(accel_last_error(&acc), "model.safetensors is");
            b[n - 1] ^= 0x40;
            {   /* model.safetensors replaced by a FIFO */
                fifo_load fl;
                fl.acc = &acc;
                fl.ck = ck2;
                fl.dir = latest;
                unlink(mp);
                AT_CHECK(mkfifo(mp, 0600) == 0);
                AT_EQ_INT(at_bounded(fifo_load_child, &fl, 10), 0);
                unlink(mp);
            }
            at_write_file(mp, b, n);
            free(b);
            AT_EQ_INT(accel_ckpt_verify(&acc, latest), ACCEL_OK);
            snprintf(mp, sizeof mp, "%s/checkpoint_complete.json", latest);
            unlink(mp);
            AT_EQ_INT(accel_ckpt_load_state(ck2, latest), ACCEL_ERR_FORMAT);
            AT_CONTAINS(accel_last_error(&acc), "not a complete checkpoint");
        }
        /* latest skips an incomplete newer directory */
        {
            char cp[1600];
            snprintf(cp, sizeof cp, "%s/checkpoints/checkpoint_9", p);
            mkdir(cp, 0777);
            snprintf(cp, sizeof cp, "%s/checkpoints", p);
            AT_EQ_INT(accel_ckpt_latest(&acc, cp, out, sizeof out), ACCEL_OK);
            AT_CONTAINS(out, "checkpoint_3");
        }
        accel_ckpt_destroy(ck2);
    }
    /* automatic naming with an existing target is an error (as Accelerate) */
    {
        accel_ckpt *ck4 = NULL;
        cd.iteration = 3;
        accel_ckpt_create(&acc, &cd, &ck4);
        AT_EQ_INT(accel_ckpt_save_state(ck4, NULL, NULL, 0), ACCEL_ERR_STATE);
        AT_CONTAINS(accel_last_error(&acc), "already exists");
        accel_ckpt_destroy(ck4);
    }
    accel_ckpt_destroy(ck);
    accel_shutdown(&acc);
}

int main(void) {
    char tmpl[] = "/tmp/accel_ckpt_unit_XXXXXX";
    if (!mkdtemp(tmpl)) { perror("mkdtemp"); return 1; }
    snprintf(g_root, sizeof g_root, "%s", tmpl);
    accel_set_default_logger(quiet, NULL);
    test_state();
    at_rm_rf(g_root);
    return at_finish("ckpt-unit");
}
