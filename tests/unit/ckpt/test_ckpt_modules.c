/* save_state / load_state with the real loss scaler (accel_amp.h) and data shard (accel_data.h) state, registered
   directly through the core's state contract (accel_state_save_fn / accel_state_load_fn): no adapters. */
#include "accel_ckpt.h"
#include "accel_amp.h"
#include "accel_data.h"
#include "accel_test.h"
#include <stdlib.h>
#include <string.h>

static void quiet(void *u, accel_log_level l, const char *m) { (void)u; (void)l; (void)m; }

int main(void) {
    accel acc;
    accel_desc d;
    accel_amp_scaler sc, sc2;
    accel_amp_scaler_desc sd;
    accel_data_shard sh, sh2;
    accel_data_shard_desc dd;
    accel_ckpt *ck = NULL, *ck2 = NULL;
    int64_t idx[8], idx2[8], cnt = 0, cnt2 = 0;
    float w[4] = {1, 2, 3, 4}, w2[4] = {0};
    accel_tensor t;
    char tmpl[] = "/tmp/accel_ckpt_modules_XXXXXX", dir[300];
    int i;
    memset(&d, 0, sizeof d);
    d.no_mpi = 1;
    d.log_fn = quiet;
    AT_EQ_INT(accel_init(&acc, &d), ACCEL_OK);
    if (!mkdtemp(tmpl)) return 1;
    snprintf(dir, sizeof dir, "%s/ckpt", tmpl);
    memset(&sd, 0, sizeof sd);
    sd.enabled = ACCEL_ON;
    sd.init_scale = 1024.0f;
    sd.growth_interval = 7;
    AT_EQ_INT(accel_amp_scaler_init(&acc, &sc, &sd), ACCEL_OK);
    sc.scale = 256.0f; /* as if it had backed off twice and grown for 3 steps */
    sc.growth_tracker = 3;
    memset(&dd, 0, sizeof dd);
    dd.dataset_len = 103;
    dd.batch_size = 4;
    dd.shuffle = 1;
    dd.seed = 42;
    AT_EQ_INT(accel_data_shard_init(NULL, &sh, &dd), ACCEL_OK);
    for (i = 0; i < 5; ++i) AT_EQ_INT(accel_data_shard_next(&sh, idx, &cnt), ACCEL_OK);
    memset(&t, 0, sizeof t);
    t.name = "w"; t.dtype = ACCEL_F32; t.ndim = 1; t.shape[0] = 4; t.ptr = w;
    AT_EQ_INT(accel_ckpt_create(&acc, NULL, &ck), ACCEL_OK);
    accel_ckpt_register_model(ck, &t, 1);
    AT_EQ_INT(accel_ckpt_register(ck, "scaler", accel_amp_scaler_state_save, accel_amp_scaler_state_load, &sc), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_register(ck, "sampler", accel_data_shard_state_save, accel_data_shard_state_load, &sh), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_save_state(ck, dir, NULL, 0), ACCEL_OK);

    /* a fresh process: default-initialized objects of the same configuration */
    AT_EQ_INT(accel_amp_scaler_init(&acc, &sc2, &sd), ACCEL_OK);
    AT_EQ_INT(accel_data_shard_init(NULL, &sh2, &dd), ACCEL_OK);
    t.ptr = w2;
    AT_EQ_INT(accel_ckpt_create(&acc, NULL, &ck2), ACCEL_OK);
    accel_ckpt_register_model(ck2, &t, 1);
    accel_ckpt_register(ck2, "scaler", accel_amp_scaler_state_save, accel_amp_scaler_state_load, &sc2);
    accel_ckpt_register(ck2, "sampler", accel_data_shard_state_save, accel_data_shard_state_load, &sh2);
    AT_EQ_INT(accel_ckpt_load_state(ck2, dir), ACCEL_OK);
    AT_CHECK(!memcmp(w, w2, sizeof w));
    AT_NEAR(sc2.scale, 256.0, 0);
    AT_EQ_INT(sc2.growth_tracker, 3);
    AT_EQ_INT(sc2.growth_interval, 7);
    AT_EQ_INT(sh2.epoch, sh.epoch);
    AT_EQ_INT(sh2.position, sh.position);
    /* the resumed sampler continues with the very batch the original would produce next */
    AT_EQ_INT(accel_data_shard_next(&sh, idx, &cnt), ACCEL_OK);
    AT_EQ_INT(accel_data_shard_next(&sh2, idx2, &cnt2), ACCEL_OK);
    AT_EQ_INT(cnt, cnt2);
    AT_CHECK(cnt > 0 && !memcmp(idx, idx2, sizeof(int64_t) * (size_t)cnt));
    /* a shard of another configuration refuses the bytes: load_state fails and nothing is applied */
    {
        accel_data_shard sh3;
        accel_ckpt *ck3 = NULL;
        float w3[4] = {0};
        dd.dataset_len = 104;
        AT_EQ_INT(accel_data_shard_init(NULL, &sh3, &dd), ACCEL_OK);
        t.ptr = w3;
        accel_ckpt_create(&acc, NULL, &ck3);
        accel_ckpt_register_model(ck3, &t, 1);
        accel_ckpt_register(ck3, "scaler", accel_amp_scaler_state_save, accel_amp_scaler_state_load, &sc2);
        accel_ckpt_register(ck3, "sampler", accel_data_shard_state_save, accel_data_shard_state_load, &sh3);
        /* state before the load: everything must still be this afterwards (the scaler is registered first, so its
           bytes are applied before the sampler refuses its own: they must be put back; the tensor untouched) */
        w3[2] = -5.0f;
        sc2.scale = 8.0f;
        sc2.growth_tracker = 1;
        acc.step = 4;
        AT_EQ_INT(accel_ckpt_load_state(ck3, dir), ACCEL_ERR_MISMATCH);
        /* the shard's own message (the root cause) behind the file it came from */
        AT_CONTAINS(accel_last_error(&acc), "load_state: sampler.bin: shard state: saved for dataset_len 103, this shard has 104");
        AT_CHECK(w3[0] == 0.0f && w3[1] == 0.0f && w3[2] == -5.0f && w3[3] == 0.0f);
        AT_NEAR(sc2.scale, 8.0, 0);
        AT_EQ_INT(sc2.growth_tracker, 1);
        AT_EQ_INT(sh3.position, 0);
        AT_EQ_INT(acc.step, 4);
        accel_ckpt_destroy(ck3);
    }
    accel_ckpt_destroy(ck);
    accel_ckpt_destroy(ck2);
    accel_amp_scaler_deinit(&sc);
    accel_amp_scaler_deinit(&sc2);
    accel_shutdown(&acc);
    {
        char cmd[400];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpl);
        if (system(cmd) != 0) fprintf(stderr, "cleanup failed\n");
    }
    return at_finish("ckpt-modules");
}
