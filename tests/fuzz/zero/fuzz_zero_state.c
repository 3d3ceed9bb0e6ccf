/* libFuzzer target: accel_zero_fsdp_state_load_all (a ZeRO-3 sharded checkpoint's bytes, untrusted) on one process.
   The input edits a valid saved file, so that changes reach the checks behind the header: byte 0 picks how many
   files are handed over (1: the edited file alone; 2: it and the valid one, overlapping; 3: the valid one and the
   edited one as another rank), bytes 1-2 change the edited file's length (signed, bytes), then (u16 offset, byte)
   pairs XOR into it. Anything may come back but a crash, a sanitizer report, or a success where the pieces cannot
   tile the parameters (two whole files). The same files, written to disk, go through accel_zero_fsdp_merge (`accel
   ckpt merge`: its own reads of the header and layout); a merge that succeeds must have written a safetensors file
   that accel_st_file_open accepts, with the three parameters. */
#define ACCEL_IMPLEMENTATION
#include "accel.h"
#include "accel_collectives.h"
#include "accel_zero.h"
#include "accel_safetensors.h"
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

static void quiet(void *u, accel_log_level l, const char *m) { (void)u; (void)l; (void)m; }

static accel acc;
static accel_coll *coll;
static accel_zero_fsdp *fsdp;
static accel_tensor st[3];
static float stbuf[3][64];
static unsigned char *valid;
static size_t valid_n;
static char dir[64], paths[2][96], outp[96], model[128];

static void cleanup(void) { /* the merge's scratch files, at exit */
    (void)unlink(model);
    (void)rmdir(outp);
    (void)unlink(paths[0]);
    (void)unlink(paths[1]);
    (void)rmdir(dir);
}

static int setup(void) {
    static float init[64];
    static accel_tensor t[3];
    static const int64_t n[3] = {13, 0, 40};
    static const char *names[3] = {"a.w", "a.b", "b.w"}; /* distinct: a merge can write them */
    accel_zero_unit units[2];
    accel_zero_fsdp_desc fd;
    accel_desc d;
    accel_zero_fsdp_state fs;
    accel_tensor_piece pc[3];
    int i;
    memset(&d, 0, sizeof d);
    d.cpu = 1;
    d.log_fn = quiet;
    if (accel_init(&acc, &d) != ACCEL_OK || accel_coll_create(&acc, NULL, &coll) != ACCEL_OK) return 0;
    for (i = 0; i < 64; ++i) init[i] = (float)i;
    for (i = 0; i < 3; ++i) {
        memset(&t[i], 0, sizeof t[i]);
        t[i].name = names[i];
        t[i].ptr = init;
        t[i].dtype = ACCEL_F32;
        t[i].ndim = 1;
        t[i].shape[0] = n[i];
    }
    units[0].name = "a"; units[0].params = t; units[0].n = 2;
    units[1].name = "b"; units[1].params = t + 2; units[1].n = 1;
    memset(&fd, 0, sizeof fd);
    fd.strategy = ACCEL_ZERO_FULL_SHARD;
    fd.units = units;
    fd.nunits = 2;
    fd.param_dtype = ACCEL_BF16;
    if (accel_zero_fsdp_create(coll, &fd, &fsdp) != ACCEL_OK) return 0;
    if (accel_zero_fsdp_pieces(fsdp, ACCEL_ZERO_VIEW_PARAMS, 0, pc, 3) != ACCEL_OK) return 0;
    for (i = 0; i < 3; ++i) { /* one F32 state tensor per parameter, the size of its piece (an optimizer's moment) */
        st[i] = t[i];
        st[i].ptr = stbuf[i];
        st[i].shape[0] = pc[i].count;
    }
    fs.fsdp = fsdp;
    fs.state = st;
    fs.m = 3;
    snprintf(dir, sizeof dir, "/tmp/fuzz_zero_%ld", (long)getpid());
    snprintf(paths[0], sizeof paths[0], "%s/r0.bin", dir);
    snprintf(paths[1], sizeof paths[1], "%s/r1.bin", dir);
    snprintf(outp, sizeof outp, "%s/out", dir);
    snprintf(model, sizeof model, "%s/model.safetensors", outp);
    atexit(cleanup);
    if (accel_zero_fsdp_state_save(&fs, NULL, 0, &valid_n) != ACCEL_OK) return 0;
    valid = (unsigned char *)malloc(valid_n);
    return valid && accel_zero_fsdp_state_save(&fs, valid, valid_n, &valid_n) == ACCEL_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int ready = -1;
    accel_zero_fsdp_state fs;
    const void *bufs[2];
    size_t sizes[2], n, i;
    unsigned char *e;
    int files, delta;
    accel_result r;
    accel_set_default_logger(quiet, NULL);
    if (ready < 0) ready = setup();
    if (!ready) __builtin_trap();
    if (size < 3) return 0;
    files = 1 + data[0] % 3;
    delta = (int)(int16_t)(uint16_t)(data[1] | data[2] << 8);
    n = delta < 0 && (size_t)-delta > valid_n ? 0 : (size_t)((long)valid_n + delta);
    if (n > valid_n + 4096) n = valid_n + 4096;
    e = (unsigned char *)malloc(n + 1); /* exactly n bytes are read: ASan sees an overrun past them */
    for (i = 0; i < n; ++i) e[i] = i < valid_n ? valid[i] : (unsigned char)i;
    for (i = 3; i + 2 < size && n > 0; i += 3) e[(data[i] | data[i + 1] << 8) % n] ^= data[i + 2];
    fs.fsdp = fsdp;
    fs.state = st;
    fs.m = 3;
    bufs[0] = files == 3 ? valid : e;
    sizes[0] = files == 3 ? valid_n : n;
    bufs[1] = files == 3 ? e : valid;
    sizes[1] = files == 3 ? n : valid_n;
    r = accel_zero_fsdp_state_load_all(&fs, bufs, sizes, files == 1 ? 1 : 2);
    /* the valid file covers every element: a second file can only overlap it unless it has no pieces at all */
    if (r == ACCEL_OK && files > 1 && n > 16 && e[8] == 3) {
        size_t p;
        uint64_t total = 0;
        for (p = 0; p < 3 && 16 + 24 * 3 <= n; ++p) {
            uint64_t c = 0;
            int b;
            for (b = 0; b < 8; ++b) c |= (uint64_t)e[16 + 3 * 8 + p * 16 + 8 + b] << (8 * b);
            total += c;
        }
        if (total != 0) __builtin_trap();
    }
    {   /* the same bytes as saved ranks' files, merged */
        const char *fl[2] = {paths[0], paths[1]};
        accel_zero_fsdp_merge_info info;
        int k;
        FILE *f;
        (void)mkdir(dir, 0700);
        for (k = 0; k < (files == 1 ? 1 : 2); ++k) {
            f = fopen(paths[k], "wb");
            if (!f) __builtin_trap();
            if (sizes[k] && fwrite(bufs[k], 1, sizes[k], f) != sizes[k]) __builtin_trap();
            fclose(f);
        }
        if (accel_zero_fsdp_merge(NULL, fl, files == 1 ? 1 : 2, outp, 0, &info) == ACCEL_OK) {
            accel_st_file *sf = NULL;
            if (accel_st_file_open(NULL, model, &sf) != ACCEL_OK || accel_st_file_count(sf) != 3 || info.tensors != 3)
                __builtin_trap();
            accel_st_file_destroy(sf);
            (void)unlink(model);
        }
    }
    free(e);
    return 0;
}
