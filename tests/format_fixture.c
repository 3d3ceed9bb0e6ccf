/* Fixture for the Python interop checks of the file formats (safetensors: check_interop.py, check_safetensors_ref.py;
   bigmodel: check_offload.py):
     format_fixture write DIR       writes DIR/all.safetensors (every dtype, 0-rank, empty, Unicode/escaped names,
                                    metadata), DIR/model (sharded save_model) and DIR/state (save_state)
     format_fixture write-ref DIR   writes DIR/ref.safetensors: w_<dtype> [2, 3+i] for 12 dtypes, "" (U8 [3]), scalar
                                    (F32 []), z_BF16 [2, 2], pattern(i) each, metadata {"format": "pt"}
     format_fixture read FILE       loads every tensor of FILE through accel and prints, per tensor:
                                    hex(name) dtype dims… nbytes xxh64(bytes) — then "meta hex(key) hex(value)" lines
                                    (whole keys and values, U+0000 included)
     format_fixture meta-get FILE KEY   hex of accel_st_file_metadata_get(KEY), exit 1 when absent
     format_fixture write-offload DIR   accel_bm_offload_save of the OFFLOAD_* tensors below (pattern(i) each) into DIR
     format_fixture read-offload DIR    as read, of an offload folder (index.json + .dat) through accel_bm_offload_open
   (check_offload.py: both directions against Accelerate's offload_state_dict / load_offloaded_weight) */
#include "accel_safetensors.h"
#include "accel_ckpt.h"
#include "accel_bigmodel.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void hex(const char *s) {
    for (; *s; ++s) printf("%02x", (unsigned char)*s);
}
static void hexn(const char *s, size_t n) {
    size_t i;
    for (i = 0; i < n; ++i) printf("%02x", (unsigned char)s[i]);
}
static void pattern(unsigned char *b, size_t n, unsigned k) {
    size_t i;
    for (i = 0; i < n; ++i) b[i] = (unsigned char)((i * 131u + k * 17u + (i >> 8)) & 255u);
}

static int do_write(const char *dir) {
    accel_tensor t[32];
    static char names[32][64];
    void *bufs[32];
    int n = 0, d, i;
    char path[1024];
    const char *meta[4] = {"format", "pt", "note", "caf\xc3\xa9 \"q\" \\ \n \xf0\x9f\x98\x80"};
    accel acc;
    accel_desc ad;
    accel_ckpt *ck = NULL;
    memset(t, 0, sizeof t);
    for (d = 1; d < ACCEL_DTYPE_COUNT; ++d) {
        size_t es = accel_dtype_size((accel_dtype)d), nb = es * 2 * (size_t)(3 + d);
        snprintf(names[n], sizeof names[n], "t_%s", accel_dtype_name((accel_dtype)d));
        t[n].name = names[n]; t[n].dtype = (accel_dtype)d; t[n].ndim = 2; t[n].shape[0] = 2; t[n].shape[1] = 3 + d;
        bufs[n] = malloc(nb); pattern((unsigned char *)bufs[n], nb, (unsigned)n); t[n].ptr = bufs[n]; ++n;
    }
    snprintf(names[n], sizeof names[n], "scalar");
    t[n].name = names[n]; t[n].dtype = ACCEL_F32; t[n].ndim = 0; bufs[n] = malloc(4); pattern((unsigned char *)bufs[n], 4, (unsigned)n); t[n].ptr = bufs[n]; ++n;
    snprintf(names[n], sizeof names[n], "empty");
    t[n].name = names[n]; t[n].dtype = ACCEL_BF16; t[n].ndim = 2; t[n].shape[0] = 0; t[n].shape[1] = 5; bufs[n] = NULL; ++n;
    snprintf(names[n], sizeof names[n], "\xce\xb1\xce\xb2/\"x\"\\y\t\x01\xf0\x9f\x98\x80");
    t[n].name = names[n]; t[n].dtype = ACCEL_U8; t[n].ndim = 1; t[n].shape[0] = 3; bufs[n] = malloc(3); pattern((unsigned char *)bufs[n], 3, (unsigned)n); t[n].ptr = bufs[n]; ++n;
    snprintf(path, sizeof path, "%s/all.safetensors", dir);
    if (accel_st_save(NULL, path, t, n, meta, 2) != ACCEL_OK) { fprintf(stderr, "%s\n", accel_last_error(NULL)); return 1; }
    snprintf(path, sizeof path, "%s/model", dir);
    if (accel_st_save_model(NULL, path, t, n, "150") != ACCEL_OK) { fprintf(stderr, "%s\n", accel_last_error(NULL)); return 1; }
    memset(&ad, 0, sizeof ad);
    ad.no_mpi = 1;
    if (accel_init(&acc, &ad) != ACCEL_OK) return 1;
    accel_set_seed(&acc, 0xFFFFFFFFFFFFFFF0ull, 0);
    acc.rng.offset = 12345;
    if (accel_ckpt_create(&acc, NULL, &ck) != ACCEL_OK || accel_ckpt_register_model(ck, t, 5) != ACCEL_OK ||
        accel_ckpt_register_optimizer(ck, t + 5, 4) != ACCEL_OK) return 1;
    snprintf(path, sizeof path, "%s/state", dir);
    if (accel_ckpt_save_state(ck, path, NULL, 0) != ACCEL_OK) { fprintf(stderr, "%s\n", accel_last_error(&acc)); return 1; }
    accel_ckpt_destroy(ck);
    accel_shutdown(&acc);
    for (i = 0; i < n; ++i) free(bufs[i]);
    printf("%d tensors\n", n);
    return 0;
}

static int do_read_any(const char *file, int offload) {
    accel_st_file *f = NULL;
    int i, k;
    if ((offload ? accel_bm_offload_open(NULL, file, &f) : accel_st_file_open(NULL, file, &f)) != ACCEL_OK) { fprintf(stderr, "%s\n", accel_last_error(NULL)); return 1; }
    for (i = 0; i < accel_st_file_count(f); ++i) {
        const accel_st_entry *e = accel_st_file_entry(f, i);
        accel_tensor t;
        uint64_t nb = e->end - e->begin;
        void *buf = malloc(nb ? nb : 1);
        memset(&t, 0, sizeof t);
        t.name = e->name; t.dtype = e->dtype; t.ndim = e->ndim;
        memcpy(t.shape, e->shape, sizeof t.shape);
        t.ptr = buf;
        if (accel_st_file_load(f, &t) != ACCEL_OK) { fprintf(stderr, "%s\n", accel_last_error(NULL)); return 1; }
        hex(e->name);
        printf(" %s %d", accel_dtype_name(e->dtype), e->ndim);
        for (k = 0; k < e->ndim; ++k) printf(" %lld", (long long)e->shape[k]);
        printf(" %llu %016llx\n", (unsigned long long)nb, (unsigned long long)accel_st_xxh64(buf, (size_t)nb, 0));
        free(buf);
    }
    for (i = 0; i < accel_st_file_metadata_count(f); ++i) {
        const char *key, *val;
        size_t kn = 0, vn = 0;
        accel_st_file_metadata(f, i, &key, &kn, &val, &vn);
        printf("meta ");
        hexn(key, kn);
        printf(" ");
        hexn(val, vn);
        printf("\n");
    }
    accel_st_file_destroy(f);
    return 0;
}

static int do_read(const char *file) { return do_read_any(file, 0); }

/* the offload interop set: name, dtype, shape (ndim -1 ends) */
static const struct { const char *name; accel_dtype dt; int ndim; int64_t shape[3]; } OFFLOAD_T[] = {
    {"embed.weight", ACCEL_F32, 2, {2, 3}}, {"h.0.attn.bias", ACCEL_F16, 1, {5}}, {"h.0.mlp.w", ACCEL_BF16, 2, {2, 2}},
    {"d", ACCEL_F64, 1, {3}}, {"pos_ids", ACCEL_I64, 2, {1, 4}}, {"i32", ACCEL_I32, 1, {2}}, {"i16", ACCEL_I16, 1, {2}},
    {"i8", ACCEL_I8, 1, {3}}, {"u8", ACCEL_U8, 1, {3}}, {"mask", ACCEL_BOOL, 3, {1, 1, 5}}, {"scale", ACCEL_F32, 0, {0}},
    {"caf\xc3\xa9", ACCEL_F32, 1, {1}}};
static int do_write_offload(const char *dir) {
    accel_tensor t[16];
    void *bufs[16];
    int n = (int)(sizeof OFFLOAD_T / sizeof OFFLOAD_T[0]), i, k, rc = 0;
    memset(t, 0, sizeof t);
    for (i = 0; i < n; ++i) {
        size_t nb = accel_dtype_size(OFFLOAD_T[i].dt);
        t[i].name = OFFLOAD_T[i].name;
        t[i].dtype = OFFLOAD_T[i].dt;
        t[i].ndim = OFFLOAD_T[i].ndim;
        for (k = 0; k < t[i].ndim; ++k) { t[i].shape[k] = OFFLOAD_T[i].shape[k]; nb *= (size_t)OFFLOAD_T[i].shape[k]; }
        bufs[i] = malloc(nb);
        pattern((unsigned char *)bufs[i], nb, (unsigned)i);
        if (OFFLOAD_T[i].dt == ACCEL_BOOL) for (k = 0; k < (int)nb; ++k) ((unsigned char *)bufs[i])[k] &= 1;
        t[i].ptr = bufs[i];
    }
    if (accel_bm_offload_save(NULL, dir, t, n) != ACCEL_OK) { fprintf(stderr, "%s\n", accel_last_error(NULL)); rc = 1; }
    for (i = 0; i < n; ++i) free(bufs[i]);
    return rc;
}

static int do_write_ref(const char *dir) {
    static const accel_dtype dts[12] = {ACCEL_F64, ACCEL_F32, ACCEL_F16, ACCEL_I64, ACCEL_I32, ACCEL_I16,
                                        ACCEL_I8, ACCEL_U64, ACCEL_U32, ACCEL_U16, ACCEL_U8, ACCEL_BOOL};
    accel_tensor t[16];
    static char names[16][32];
    void *bufs[16];
    const char *meta[2] = {"format", "pt"};
    char path[1024];
    int n = 0, i, rc = 0;
    memset(t, 0, sizeof t);
    for (i = 0; i < 12; ++i, ++n) {
        snprintf(names[n], sizeof names[n], "w_%s", accel_dtype_name(dts[i]));
        t[n].name = names[n]; t[n].dtype = dts[i]; t[n].ndim = 2; t[n].shape[0] = 2; t[n].shape[1] = 3 + i;
    }
    t[n].name = ""; t[n].dtype = ACCEL_U8; t[n].ndim = 1; t[n].shape[0] = 3; ++n;
    t[n].name = "scalar"; t[n].dtype = ACCEL_F32; t[n].ndim = 0; ++n;
    t[n].name = "z_BF16"; t[n].dtype = ACCEL_BF16; t[n].ndim = 2; t[n].shape[0] = 2; t[n].shape[1] = 2; ++n;
    for (i = 0; i < n; ++i) {
        size_t nb = (size_t)accel_tensor_nbytes(&t[i]), k;
        bufs[i] = malloc(nb);
        pattern((unsigned char *)bufs[i], nb, (unsigned)i);
        if (t[i].dtype == ACCEL_BOOL)
            for (k = 0; k < nb; ++k) ((unsigned char *)bufs[i])[k] &= 1;
        t[i].ptr = bufs[i];
    }
    snprintf(path, sizeof path, "%s/ref.safetensors", dir);
    if (accel_st_save(NULL, path, t, n, meta, 1) != ACCEL_OK) {
        fprintf(stderr, "%s\n", accel_last_error(NULL));
        rc = 1;
    }
    for (i = 0; i < n; ++i) free(bufs[i]);
    return rc;
}

static int do_meta_get(const char *file, const char *key) {
    accel_st_file *f = NULL;
    const char *v;
    if (accel_st_file_open(NULL, file, &f) != ACCEL_OK) { fprintf(stderr, "%s\n", accel_last_error(NULL)); return 2; }
    v = accel_st_file_metadata_get(f, key);
    if (v) { hex(v); printf("\n"); }
    accel_st_file_destroy(f);
    return v ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "write")) return do_write(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "write-ref")) return do_write_ref(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "read")) return do_read(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "read-offload")) return do_read_any(argv[2], 1);
    if (argc == 3 && !strcmp(argv[1], "write-offload")) return do_write_offload(argv[2]);
    if (argc == 4 && !strcmp(argv[1], "meta-get")) return do_meta_get(argv[2], argv[3]);
    fprintf(stderr, "usage: format_fixture write DIR | write-ref DIR | read FILE | meta-get FILE KEY\n");
    return 2;
}
