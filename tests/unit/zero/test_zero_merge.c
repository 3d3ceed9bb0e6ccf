/* accel_zero_fsdp_merge (`accel ckpt merge`) on saved ranks' files written here by hand from the documented layout
   (accel_zero.h, accel_zero_fsdp_state_save: "ASF3", version, n, k, element counts, pieces, version 2's names
   block, values, state) — not by the library's writer — with known values:
   - a 4.2 MB model over 3 ranks merges into model.safetensors whose tensors are the known values, while the host
     memory the merge holds (a byte-counting allocator: live bytes at their peak) stays under 1.2 MiB: streaming;
   - --max-shard-size: shards + index, loadable by accel_st_load_model, the same values; a replica's file (empty
     pieces, as hybrid strategies save) adds nothing;
   - the files written here load through accel_zero_fsdp_state_load_all into a one-process model, version 2 and
     version 1 (no names: what accel wrote before merge existed) alike: the loader reads this layout, and old
     checkpoints still load;
   - refused, nothing written: pieces that overlap (another partition), a rank missing, another model in one file,
     a version-1 file (no names), a truncated file, trailing bytes, a shape that is not the element count,
     duplicate names, an output directory that holds a model. */
#define ACCEL_IMPLEMENTATION
#include "accel.h"
#include "accel_collectives.h"
#include "accel_zero.h"
#include "accel_safetensors.h"
#include "accel_test.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- a byte-counting host allocator: the merge's memory at its peak */
typedef struct { size_t live, peak; } bytes_counter;
static void *count_alloc(size_t n, void *u) {
    bytes_counter *c = (bytes_counter *)u;
    size_t *h = (size_t *)malloc(n + 16);
    if (!h) return NULL;
    h[0] = n;
    c->live += n;
    if (c->live > c->peak) c->peak = c->live;
    return (char *)h + 16;
}
static void count_free(void *p, void *u) {
    bytes_counter *c = (bytes_counter *)u;
    size_t *h;
    if (!p) return;
    h = (size_t *)((char *)p - 16);
    c->live -= h[0];
    free(h);
}
static void quiet(void *u, accel_log_level l, const char *m) { (void)u; (void)l; (void)m; }

/* ---- the model: 3 parameters, their whole values known */
#define NP 3
static const char *g_names[NP] = {"h.0.weight", "h.0.bias", "wte"};
static const int g_ndim[NP] = {2, 1, 2};
static const int64_t g_shape[NP][2] = {{1024, 1024}, {1024, 0}, {3, 5}};
static int64_t numel(int i) { return g_ndim[i] == 1 ? g_shape[i][0] : g_shape[i][0] * g_shape[i][1]; }
static float value(int i, int64_t e) { return (float)(i + 1) * 0.25f + (float)(e % 4099) * 0.001f; }

static void put32(FILE *f, uint32_t v) {
    unsigned char b[4];
    int k;
    for (k = 0; k < 4; ++k) b[k] = (unsigned char)(v >> (8 * k));
    fwrite(b, 1, 4, f);
}
static void put64(FILE *f, uint64_t v) {
    unsigned char b[8];
    int k;
    for (k = 0; k < 8; ++k) b[k] = (unsigned char)(v >> (8 * k));
    fwrite(b, 1, 8, f);
}

/* What a file says (edits for the bad cases). */
typedef struct {
    int version;
    int64_t off[NP], cnt[NP];
    const char *names[NP];
    int64_t dim0[NP];  /* shape[0] as written (the element count comes from numel()) */
    int trailing;      /* bytes appended */
    int truncate;      /* bytes cut */
} spec;

/* Rank r of P: FSDP's per-parameter piece of a flat partition is any contiguous piece; here [r*S, (r+1)*S). */
static spec rank_spec(int r, int P) {
    spec s;
    int i;
    memset(&s, 0, sizeof s);
    s.version = 2;
    for (i = 0; i < NP; ++i) {
        int64_t S = (numel(i) + P - 1) / P, lo = r * S < numel(i) ? r * S : numel(i);
        s.off[i] = lo;
        s.cnt[i] = (lo + S < numel(i) ? lo + S : numel(i)) - lo;
        s.names[i] = g_names[i];
        s.dim0[i] = g_shape[i][0];
    }
    return s;
}

/* k = 1 F32 state tensor per parameter (a momentum), values -1 */
static int write_state(const char *path, const spec *s) {
    FILE *f = fopen(path, "wb");
    int i, d;
    long size;
    if (!f) return -1;
    fwrite("ASF3", 1, 4, f);
    put32(f, (uint32_t)s->version);
    put32(f, NP);
    put32(f, 1);
    for (i = 0; i < NP; ++i) put64(f, (uint64_t)numel(i));
    for (i = 0; i < NP; ++i) { put64(f, (uint64_t)s->off[i]); put64(f, (uint64_t)s->cnt[i]); }
    if (s->version == 2) {
        uint64_t L = 0;
        for (i = 0; i < NP; ++i) L += 4 + 8 * (uint64_t)g_ndim[i] + 4 + strlen(s->names[i]) + 1;
        put64(f, L);
        for (i = 0; i < NP; ++i) {
            put32(f, (uint32_t)g_ndim[i]);
            for (d = 0; d < g_ndim[i]; ++d) put64(f, (uint64_t)(d == 0 ? s->dim0[i] : g_shape[i][d]));
            put32(f, (uint32_t)strlen(s->names[i]));
            fwrite(s->names[i], 1, strlen(s->names[i]) + 1, f);
        }
    }
    for (i = 0; i < NP; ++i) {
        int64_t e;
        for (e = s->off[i]; e < s->off[i] + s->cnt[i]; ++e) {
            float v = value(i, e);
            fwrite(&v, 4, 1, f); /* little-endian host (as the library's raw copies) */
        }
    }
    for (i = 0; i < NP; ++i) {
        int64_t e;
        float v = -1.0f;
        put32(f, (uint32_t)ACCEL_F32);
        for (e = 0; e < s->cnt[i]; ++e) fwrite(&v, 4, 1, f);
    }
    for (i = 0; i < s->trailing; ++i) fputc(0, f);
    size = ftell(f);
    if (fclose(f) != 0) return -1;
    if (s->truncate && truncate(path, size - s->truncate) != 0) return -1;
    return 0;
}

static char g_dir[256];
static char g_path[8][300];
static const char *g_files[8];

/* writes specs[0..count) as rank files; returns the path list */
static const char *const *write_ranks(const spec *specs, int count) {
    int q;
    for (q = 0; q < count; ++q) {
        snprintf(g_path[q], sizeof g_path[q], "%s/fsdp_state_%d.bin", g_dir, q);
        if (write_state(g_path[q], &specs[q]) != 0) { AT_CHECK_MSG(0, "cannot write a rank file"); return NULL; }
        g_files[q] = g_path[q];
    }
    return g_files;
}

static int exists(const char *dir, const char *name) {
    char p[600];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return stat(p, &st) == 0;
}

/* every tensor of the merged model equals the known values */
static void check_model(accel *acc, const char *out) {
    accel_tensor t[NP];
    float *buf[NP];
    int i, ok = 1;
    for (i = 0; i < NP; ++i) {
        memset(&t[i], 0, sizeof t[i]);
        t[i].name = g_names[i];
        t[i].dtype = ACCEL_F32;
        t[i].ndim = g_ndim[i];
        t[i].shape[0] = g_shape[i][0];
        t[i].shape[1] = g_shape[i][1];
        buf[i] = (float *)malloc((size_t)numel(i) * 4);
        t[i].ptr = buf[i];
    }
    AT_EQ_INT(accel_st_load_model(acc, out, t, NP), ACCEL_OK);
    for (i = 0; i < NP; ++i) {
        int64_t e;
        for (e = 0; e < numel(i) && ok; ++e) ok = buf[i][e] == value(i, e);
        free(buf[i]);
    }
    AT_CHECK_MSG(ok, "merged values equal the known ones");
}

/* a bad case: refused with `what` in the message, no model written */
static void refused(accel *acc, const spec *specs, int count, const char *what, const char *label) {
    char out[300];
    const char *const *files = write_ranks(specs, count);
    accel_result r;
    at_context = label;
    snprintf(out, sizeof out, "%s/out_bad", g_dir);
    r = accel_zero_fsdp_merge(acc, files, count, out, 0, NULL);
    AT_CHECK(r != ACCEL_OK);
    AT_CONTAINS(accel_last_error(acc), what);
    AT_CHECK(!exists(out, "model.safetensors"));
    at_context = "";
}

/* The three rank files (version 2, then version 1) loaded into a one-process FULL_SHARD model of the same
   parameters: its master shard (the whole model here) holds the known values, its state tensor the -1s. */
static void load_back(accel *acc) {
    accel_coll *coll = NULL;
    accel_zero_fsdp *f = NULL;
    accel_zero_fsdp_desc fd;
    accel_zero_unit units[2];
    accel_tensor t[NP], st[NP], vp[NP];
    float *mom[NP];
    int i, v, q;
    AT_EQ_INT(accel_coll_create(acc, NULL, &coll), ACCEL_OK);
    for (i = 0; i < NP; ++i) {
        memset(&t[i], 0, sizeof t[i]);
        t[i].name = g_names[i];
        t[i].dtype = ACCEL_F32;
        t[i].ndim = g_ndim[i];
        t[i].shape[0] = g_shape[i][0];
        t[i].shape[1] = g_shape[i][1];
        st[i] = at_vec("m", NULL, ACCEL_F32, numel(i));
        mom[i] = (float *)calloc((size_t)numel(i), 4);
        st[i].ptr = mom[i];
    }
    units[0].name = "h.0"; units[0].params = t; units[0].n = 2;
    units[1].name = "root"; units[1].params = t + 2; units[1].n = 1;
    memset(&fd, 0, sizeof fd);
    fd.strategy = ACCEL_ZERO_FULL_SHARD;
    fd.units = units;
    fd.nunits = 2;
    AT_EQ_INT(accel_zero_fsdp_create(coll, &fd, &f), ACCEL_OK);
    for (v = 2; f && v >= 1; --v) {
        spec sp[3];
        void *bufs[3];
        size_t sizes[3];
        accel_zero_fsdp_state fs;
        int ok = 1;
        for (q = 0; q < 3; ++q) {
            sp[q] = rank_spec(q, 3);
            sp[q].version = v;
        }
        write_ranks(sp, 3);
        for (q = 0; q < 3; ++q) { /* the bytes, as accel_ckpt hands them to load_all */
            FILE *fp = fopen(g_path[q], "rb");
            long n;
            if (!fp) { AT_CHECK(0); return; }
            fseek(fp, 0, SEEK_END);
            n = ftell(fp);
            fseek(fp, 0, SEEK_SET);
            bufs[q] = malloc((size_t)n);
            sizes[q] = fread(bufs[q], 1, (size_t)n, fp);
            fclose(fp);
        }
        fs.fsdp = f;
        fs.state = st;
        fs.m = NP;
        at_context = v == 2 ? "load version 2" : "load version 1";
        AT_EQ_INT(accel_zero_fsdp_state_load_all(&fs, (const void *const *)bufs, sizes, 3), ACCEL_OK);
        AT_EQ_INT(accel_zero_fsdp_views(f, ACCEL_ZERO_VIEW_PARAMS, vp, NP), ACCEL_OK);
        for (i = 0; i < NP; ++i) {
            int64_t e;
            for (e = 0; e < numel(i) && ok; ++e)
                ok = ((const float *)vp[i].ptr)[e] == value(i, e) && mom[i][e] == -1.0f;
            for (e = 0; e < numel(i); ++e) { /* the next version must write them again */
                mom[i][e] = 0;
                ((float *)vp[i].ptr)[e] = 0;
            }
        }
        AT_CHECK_MSG(ok, "the loaded shard holds the files' values and moments");
        for (q = 0; q < 3; ++q) free(bufs[q]);
        at_context = "";
    }
    accel_zero_fsdp_destroy(f);
    accel_coll_destroy(coll);
    for (i = 0; i < NP; ++i) free(mom[i]);
}

int main(void) {
    accel acc;
    accel_desc d;
    bytes_counter bc = {0, 0};
    accel_zero_fsdp_merge_info info;
    spec s[3];
    char out[300], out2[700];
    const char *const *files;
    int q;
    size_t model_bytes = 0;
    snprintf(g_dir, sizeof g_dir, "/tmp/accel_zero_merge_XXXXXX");
    if (!mkdtemp(g_dir)) { perror("mkdtemp"); return 1; }
    memset(&d, 0, sizeof d);
    d.no_mpi = 1;
    d.log_fn = quiet;
    d.host_allocator.alloc = count_alloc;
    d.host_allocator.free = count_free;
    d.host_allocator.user_data = &bc;
    if (accel_init(&acc, &d) != ACCEL_OK) return 1;
    for (q = 0; q < NP; ++q) model_bytes += (size_t)numel(q) * 4;

    /* 1. three ranks → model.safetensors, streaming */
    for (q = 0; q < 3; ++q) s[q] = rank_spec(q, 3);
    files = write_ranks(s, 3);
    snprintf(out, sizeof out, "%s/out", g_dir);
    bc.peak = bc.live;
    {
        size_t base = bc.live;
        AT_EQ_INT(accel_zero_fsdp_merge(&acc, files, 3, out, 0, &info), ACCEL_OK);
        AT_EQ_INT(info.saved_ranks, 3);
        AT_EQ_INT(info.tensors, NP);
        AT_EQ_INT(info.files, 1);
        AT_EQ_INT(info.bytes, model_bytes);
        /* the bound: 1 MiB buffer + headers, far below the 4.2 MB model; and what info reports is what was held */
        AT_CHECK_MSG(bc.peak - base < ((size_t)1 << 20) + (64u << 10), "peak host memory < 1 MiB + 64 KiB");
        AT_CHECK_MSG(bc.peak - base < model_bytes / 3, "the merge never held the model");
        AT_CHECK_MSG(info.memory >= ((uint64_t)1 << 20) && info.memory <= (uint64_t)(bc.peak - base) + 4096,
                     "info.memory is the memory held");
        AT_EQ_INT(bc.live, base);
        printf("merge of a %zu-byte model over 3 ranks: peak %zu bytes held (info.memory %llu)\n", model_bytes,
               bc.peak - base, (unsigned long long)info.memory);
    }
    AT_CHECK(exists(out, "model.safetensors") && !exists(out, "model.safetensors.index.json"));
    check_model(&acc, out);
    {   /* the file as save_model writes it: the tensors and {"format": "pt"} */
        accel_st_file *f = NULL;
        snprintf(out2, sizeof out2, "%s/model.safetensors", out);
        AT_EQ_INT(accel_st_file_open(&acc, out2, &f), ACCEL_OK);
        if (f) {
            AT_EQ_INT(accel_st_file_count(f), NP);
            AT_EQ_STR(accel_st_file_metadata_get(f, "format"), "pt");
            accel_st_file_destroy(f);
        }
    }
    /* the same output directory again: refused, the model kept */
    AT_EQ_INT(accel_zero_fsdp_merge(&acc, files, 3, out, 0, NULL), ACCEL_ERR_INVALID_ARGUMENT);
    AT_CONTAINS(accel_last_error(&acc), "already holds model.safetensors");
    check_model(&acc, out);

    /* 2. above max_shard_size: shards + index (the 4 MiB weight alone, the rest together) */
    snprintf(out2, sizeof out2, "%s/out_sharded", g_dir);
    AT_EQ_INT(accel_zero_fsdp_merge(&acc, files, 3, out2, (uint64_t)1 << 20, &info), ACCEL_OK);
    AT_EQ_INT(info.files, 2);
    AT_CHECK(exists(out2, "model.safetensors.index.json") && exists(out2, "model-00001-of-00002.safetensors") &&
             exists(out2, "model-00002-of-00002.safetensors") && !exists(out2, "model.safetensors"));
    check_model(&acc, out2);

    /* a hybrid strategy's replica saves empty pieces (each element once): a fourth file with none merges the same */
    {
        spec t[4];
        for (q = 0; q < 3; ++q) t[q] = rank_spec(q, 3);
        t[3] = rank_spec(0, 3);
        for (q = 0; q < NP; ++q) t[3].off[q] = t[3].cnt[q] = 0;
        files = write_ranks(t, 4);
        snprintf(out2, sizeof out2, "%s/out_replica", g_dir);
        AT_EQ_INT(accel_zero_fsdp_merge(&acc, files, 4, out2, 0, &info), ACCEL_OK);
        AT_EQ_INT(info.saved_ranks, 4);
        check_model(&acc, out2);
    }

    load_back(&acc);

    /* 3. refused */
    {
        spec t[3];
        for (q = 0; q < 3; ++q) t[q] = rank_spec(q, 3);
        t[1].off[2] -= 1; /* rank 1's piece starts inside rank 0's: two partitions mixed */
        t[1].cnt[2] += 1;
        refused(&acc, t, 3, "in two saved ranks' files (the partitions do not match)", "overlap");
        for (q = 0; q < 3; ++q) t[q] = rank_spec(q, 3);
        refused(&acc, t, 2, "in no saved rank's file (a shard is missing)", "a rank missing");
        t[1].names[0] = "h.1.weight";
        refused(&acc, t, 3, "differs from saved rank 0's", "another model");
        for (q = 0; q < 3; ++q) t[q] = rank_spec(q, 3);
        t[0].version = 1;
        refused(&acc, t, 3, "version 1", "version 1");
        for (q = 0; q < 3; ++q) t[q] = rank_spec(q, 3);
        t[2].truncate = 3;
        refused(&acc, t, 3, "truncated", "truncated");
        for (q = 0; q < 3; ++q) t[q] = rank_spec(q, 3);
        t[2].trailing = 5;
        refused(&acc, t, 3, "bytes after its state", "trailing bytes");
        for (q = 0; q < 3; ++q) { t[q] = rank_spec(q, 3); t[q].dim0[0] = 1023; }
        refused(&acc, t, 3, "shape has", "shape vs element count");
        for (q = 0; q < 3; ++q) { t[q] = rank_spec(q, 3); t[q].names[2] = "h.0.bias"; }
        refused(&acc, t, 3, "duplicate tensor name", "duplicate names");
    }
    accel_shutdown(&acc);
    {   /* clean up */
        char cmd[400];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    }
    return at_finish("zero-merge");
}
