/* save_state / save_model on P ranks, load_state / load_model on the same or a different number of ranks.
     test_ckpt_mpi fresh DIR      load_state(NULL) with no checkpoint: ACCEL_ERR_NOT_FOUND everywhere, one INFO line on
                                  the main process, nothing at warn/error level on any rank
     test_ckpt_mpi save DIR       every rank: seed 100 + rank (device_specific), same model/optimizer/sampler state,
                                  the same step counters (driven through the accumulation/scheduler calls)
     test_ckpt_mpi load DIR       model, optimizer, sampler and custom state identical to what was saved, on every
                                  rank; every counter restored; RNG: own state where the saving run had this rank,
                                  else seed0 + rank (accel_state_load_resharded's re-derivation)
     test_ckpt_mpi loadbad DIR    rank 1 registers a wrong shape: every rank fails, nothing is applied anywhere (the
                                  counters and RNG included) */
#include "accel_safetensors.h"
#include "accel_ckpt.h"
#include "accel_test.h"
#include <stdlib.h>
#include <string.h>

#define NW 1000
#define NO 300
typedef struct { int64_t epoch, position; } sampler_state;
static float w[NW], o[NO];
static uint16_t h[17];
static sampler_state ss;
static char custom[32];

static accel_result s_save(void *u, void *buf, size_t cap, size_t *n) {
    *n = sizeof(sampler_state);
    if (cap >= *n) memcpy(buf, u, *n);
    return ACCEL_OK;
}
static accel_result s_load(void *u, const void *buf, size_t n) {
    if (n != sizeof(sampler_state)) return ACCEL_ERR_FORMAT;
    memcpy(u, buf, n);
    return ACCEL_OK;
}
static accel_result c_save(void *u, void *buf, size_t cap, size_t *n) {
    *n = strlen((const char *)u);
    if (buf && cap >= *n) memcpy(buf, u, *n); /* the contract: buf NULL asks for the size */
    return ACCEL_OK;
}
static accel_result c_load(void *u, const void *buf, size_t n) {
    if (n >= sizeof custom) return ACCEL_ERR_FORMAT;
    memcpy(u, buf, n);
    ((char *)u)[n] = 0;
    return ACCEL_OK;
}
static void expected(void) {
    int i;
    for (i = 0; i < NW; ++i) w[i] = 0.25f * (float)i - 7.0f;
    for (i = 0; i < NO; ++i) o[i] = 1.0f / (float)(i + 1);
    for (i = 0; i < 17; ++i) h[i] = (uint16_t)(0x3c00 + i);
    ss.epoch = 2;
    ss.position = 40;
    snprintf(custom, sizeof custom, "custom-state");
}
static void tensors(accel_tensor *t, int bad) {
    memset(t, 0, sizeof(accel_tensor) * 3);
    t[0].name = "layer.w"; t[0].dtype = ACCEL_F32; t[0].ndim = 2; t[0].shape[0] = 10; t[0].shape[1] = bad ? 99 : 100; t[0].ptr = w;
    t[1].name = "layer.h"; t[1].dtype = ACCEL_F16; t[1].ndim = 1; t[1].shape[0] = 17; t[1].ptr = h;
    t[2].name = "opt.m"; t[2].dtype = ACCEL_F32; t[2].ndim = 1; t[2].shape[0] = NO; t[2].ptr = o;
}
/* the same counters on every rank: accumulation 3, split_batches (one scheduler step per optimizer step, whatever P),
   7 micro-batches, the second optimizer step skipped → step 7, sync 0, skipped 1, optimizer 1, scheduler 1,
   adjusted 5 */
static void drive(accel *acc) {
    int i, syncs = 0;
    for (i = 0; i < 7; ++i) {
        accel_accumulate_begin(acc);
        if (acc->sync_gradients) accel_optimizer_step_done(acc, ++syncs == 2);
        accel_scheduler_steps(acc, 0);
        accel_accumulate_end(acc);
    }
}
static void counters_are(const accel *acc, int step, int sync, int skipped, long long opt, long long sch, long long adj) {
    AT_EQ_INT(acc->step, step);
    AT_EQ_INT(acc->sync_gradients, sync);
    AT_EQ_INT(acc->optimizer_step_was_skipped, skipped);
    AT_EQ_INT(acc->optimizer_steps, opt);
    AT_EQ_INT(acc->scheduler_steps, sch);
    AT_EQ_INT(acc->scheduler_adjusted_steps, adj);
}

typedef struct { int info, warn_or_error; char first_info[600]; } log_count;
static void count_log(void *u, accel_log_level level, const char *msg) {
    log_count *c = (log_count *)u;
    if (level == ACCEL_LOG_INFO && c->info++ == 0) snprintf(c->first_info, sizeof c->first_info, "%s", msg);
    if (level == ACCEL_LOG_WARN || level == ACCEL_LOG_ERROR) c->warn_or_error++;
}

static accel_ckpt *make(accel *acc, int bad) {
    accel_ckpt *ck = NULL;
    accel_tensor t[3];
    tensors(t, bad);
    if (accel_ckpt_create(acc, NULL, &ck) != ACCEL_OK) return NULL;
    AT_EQ_INT(accel_ckpt_register_model(ck, t, 2), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_register_optimizer(ck, t + 2, 1), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_register(ck, "sampler", s_save, s_load, &ss), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_register(ck, NULL, c_save, c_load, custom), ACCEL_OK);
    return ck;
}

int main(int argc, char **argv) {
    accel acc;
    accel_desc d;
    accel_ckpt *ck;
    const char *mode = argc > 2 ? argv[1] : "", *dir = argc > 2 ? argv[2] : "";
    char sdir[1024], mdir[1024];
    static char name[64];
    log_count lc;
    memset(&d, 0, sizeof d);
    memset(&lc, 0, sizeof lc);
    d.gradient_accumulation_steps = 3;
    d.split_batches = 1;
    d.log_fn = count_log;
    d.log_user_data = &lc;
    d.log_level = ACCEL_LOG_DEBUG;
    if (accel_init(&acc, &d) != ACCEL_OK) { fprintf(stderr, "%s\n", accel_last_error(&acc)); return 1; }
    lc.info = 0; /* accel_init's own messages */
    snprintf(name, sizeof name, "ckpt-mpi-%s-rank%d", mode, acc.process_index);
    snprintf(sdir, sizeof sdir, "%s/state", dir);
    snprintf(mdir, sizeof mdir, "%s/model", dir);
    if (!strcmp(mode, "fresh")) {
        accel_ckpt_desc cd;
        char pdir[1024], want[1200];
        memset(&cd, 0, sizeof cd);
        snprintf(pdir, sizeof pdir, "%s/fresh", dir);
        cd.project_dir = pdir;
        cd.automatic_checkpoint_naming = 1;
        AT_EQ_INT(accel_ckpt_create(&acc, &cd, &ck), ACCEL_OK);
        lc.warn_or_error = 0;
        AT_EQ_INT(accel_ckpt_load_state(ck, NULL), ACCEL_ERR_NOT_FOUND);
        AT_CONTAINS(accel_last_error(&acc), pdir);
        AT_EQ_INT(lc.warn_or_error, 0);
        AT_EQ_INT(lc.info, acc.is_main_process ? 1 : 0);
        snprintf(want, sizeof want, "no checkpoint under %s/checkpoints: starting fresh", pdir);
        if (acc.is_main_process) AT_EQ_STR(lc.first_info, want);
        counters_are(&acc, 0, 1, 0, 0, 0, 0);
        accel_ckpt_destroy(ck);
    } else if (!strcmp(mode, "save")) {
        accel_tensor t[3];
        expected();
        accel_set_seed(&acc, 100, 1);
        acc.rng.offset = 5;
        drive(&acc);
        ck = make(&acc, 0);
        AT_EQ_INT(accel_ckpt_save_state(ck, sdir, NULL, 0), ACCEL_OK);
        AT_EQ_INT(accel_ckpt_iteration(ck), 1);
        tensors(t, 0);
        AT_EQ_INT(accel_st_save_model(&acc, mdir, t, 3, "4KB"), ACCEL_OK); /* 4000 + 34 + 1200 bytes: 2 shards */
        accel_ckpt_destroy(ck);
        AT_EQ_INT(accel_ckpt_verify(&acc, sdir), ACCEL_OK);
    } else if (!strcmp(mode, "load") || !strcmp(mode, "loadbad")) {
        int bad = !strcmp(mode, "loadbad") && acc.process_index == 1;
        float ew[NW], eo[NO];
        uint16_t eh[17];
        sampler_state es;
        char ec[32];
        accel_result r;
        accel_tensor t[3];
        expected();
        memcpy(ew, w, sizeof w); memcpy(eo, o, sizeof o); memcpy(eh, h, sizeof h); es = ss; memcpy(ec, custom, sizeof ec);
        memset(w, 0, sizeof w); memset(o, 0, sizeof o); memset(h, 0, sizeof h); memset(&ss, 0, sizeof ss); custom[0] = 0;
        accel_set_seed(&acc, 1, 0);
        ck = make(&acc, bad);
        r = accel_ckpt_load_state(ck, sdir);
        if (!strcmp(mode, "loadbad")) {
            AT_EQ_INT(r, acc.process_index == 1 ? ACCEL_ERR_INVALID_ARGUMENT : (acc.num_processes > 1 ? ACCEL_ERR_REMOTE : ACCEL_OK));
            AT_CHECK(w[1] == 0.0f && ss.position == 0 && acc.rng.seed == 1); /* nothing applied anywhere */
            counters_are(&acc, 0, 1, 0, 0, 0, 0);
        } else {
            uint64_t sums[2], *all;
            int i;
            AT_EQ_INT(r, ACCEL_OK);
            AT_CHECK(!memcmp(w, ew, sizeof w));
            AT_CHECK(!memcmp(o, eo, sizeof o));
            AT_CHECK(!memcmp(h, eh, sizeof h));
            AT_CHECK(ss.epoch == es.epoch && ss.position == es.position);
            AT_EQ_STR(custom, ec);
            AT_EQ_INT(accel_ckpt_iteration(ck), 1); /* policy 5 */
            /* saved on 2 ranks with seeds 100, 101: ranks 0 and 1 get theirs, others 100 + rank */
            AT_EQ_INT((long long)acc.rng.seed, 100 + acc.process_index);
            AT_EQ_INT((long long)acc.rng.offset, 5);
            counters_are(&acc, 7, 0, 1, 1, 1, 5); /* from rank 0's state, whatever the number of processes */
            /* identical on every rank */
            sums[0] = accel_st_xxh64(w, sizeof w, 0) ^ accel_st_xxh64(o, sizeof o, 1);
            sums[1] = accel_st_xxh64(&ss, sizeof ss, 2);
            all = (uint64_t *)calloc((size_t)acc.num_processes * 2, sizeof(uint64_t));
            AT_EQ_INT(accel_host_allgather(&acc, sums, all, sizeof sums), ACCEL_OK);
            for (i = 1; i < acc.num_processes; ++i) AT_CHECK(all[2 * i] == all[0] && all[2 * i + 1] == all[1]);
            free(all);
            /* the sharded model loads on any number of ranks */
            memset(w, 0, sizeof w); memset(o, 0, sizeof o); memset(h, 0, sizeof h);
            tensors(t, 0);
            AT_EQ_INT(accel_st_load_model(&acc, mdir, t, 3), ACCEL_OK);
            AT_CHECK(!memcmp(w, ew, sizeof w) && !memcmp(o, eo, sizeof o) && !memcmp(h, eh, sizeof h));
        }
        accel_ckpt_destroy(ck);
    } else {
        fprintf(stderr, "usage: test_ckpt_mpi fresh|save|load|loadbad DIR\n");
        accel_shutdown(&acc);
        return 2;
    }
    accel_shutdown(&acc);
    return at_finish(name);
}
