/* Unit tests of accel_safetensors.h: XXH64 vectors, safetensors round trips for every dtype, the atomic writer,
   hand-built reference-layout files, every malformed-file rule of the reference reader (each a specific error,
   nothing loaded), sharding plans (docs/semantics.md §6 cases), save_model/load_model. */
#include "accel_safetensors.h"
#include "accel_test.h"
#include "accel_test_fs.h"
#include <dirent.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_root[256];

static void quiet(void *u, accel_log_level l, const char *m) { (void)u; (void)l; (void)m; }

static void test_xxh64(void) {
    /* published XXH64 test vectors (seed 0) */
    AT_CHECK(accel_st_xxh64("", 0, 0) == 0xEF46DB3751D8E999ull);
    AT_CHECK(accel_st_xxh64("a", 1, 0) == 0xD24EC4F1A98C6E5Bull);
    AT_CHECK(accel_st_xxh64("abc", 3, 0) == 0x44BC2CF5AD770999ull);
}

/* --------------------------------------------------------------------------------- safetensors round trips */
static void fill(void *p, size_t n, unsigned seed) {
    unsigned char *b = (unsigned char *)p;
    size_t i;
    for (i = 0; i < n; ++i) b[i] = (unsigned char)(i * 131u + seed * 17u + (i >> 8));
}

static void test_roundtrip_all_dtypes(void) {
    accel_tensor t[ACCEL_DTYPE_COUNT + 3];
    void *bufs[ACCEL_DTYPE_COUNT + 3];
    char names[ACCEL_DTYPE_COUNT + 3][64];
    int n = 0, d, i;
    char path[400];
    accel_st_file *f = NULL;
    const char *meta[4] = {"format", "pt", "note", "quote\" backslash\\ newline\n \xc3\xa9 \xf0\x9f\x98\x80"};
    memset(t, 0, sizeof t);
    for (d = 1; d < ACCEL_DTYPE_COUNT; ++d) {
        size_t es = accel_dtype_size((accel_dtype)d);
        snprintf(names[n], sizeof names[n], "w.%s", accel_dtype_name((accel_dtype)d));
        t[n].name = names[n];
        t[n].dtype = (accel_dtype)d;
        t[n].ndim = 2;
        t[n].shape[0] = 3;
        t[n].shape[1] = 5 + d;
        bufs[n] = malloc(es * 3 * (size_t)(5 + d));
        fill(bufs[n], es * 3 * (size_t)(5 + d), (unsigned)d);
        t[n].ptr = bufs[n];
        ++n;
    }
    /* 0-rank scalar, empty tensor, unicode + JSON-escaped name */
    snprintf(names[n], sizeof names[n], "scalar");
    t[n].name = names[n]; t[n].dtype = ACCEL_F64; t[n].ndim = 0; bufs[n] = malloc(8); fill(bufs[n], 8, 99); t[n].ptr = bufs[n]; ++n;
    snprintf(names[n], sizeof names[n], "empty");
    t[n].name = names[n]; t[n].dtype = ACCEL_F32; t[n].ndim = 3; t[n].shape[0] = 4; t[n].shape[1] = 0; t[n].shape[2] = 2;
    bufs[n] = NULL; t[n].ptr = NULL; ++n;
    snprintf(names[n], sizeof names[n], "caf\xc3\xa9/\"q\"\\\t\x01/\xf0\x9f\x98\x80");
    t[n].name = names[n]; t[n].dtype = ACCEL_I16; t[n].ndim = 1; t[n].shape[0] = 7; bufs[n] = malloc(14); fill(bufs[n], 14, 5); t[n].ptr = bufs[n]; ++n;

    snprintf(path, sizeof path, "%s/all.safetensors", g_root);
    AT_EQ_INT(accel_st_save(NULL, path, t, n, meta, 2), ACCEL_OK);
    AT_CHECK(!at_exists("all.safetensors.tmp"));
    AT_EQ_INT(accel_st_file_open(NULL, path, &f), ACCEL_OK);
    if (!f) return;
    AT_EQ_INT(accel_st_file_count(f), n);
    AT_EQ_STR(accel_st_file_metadata_get(f, "format"), "pt");
    AT_EQ_STR(accel_st_file_metadata_get(f, "note"), meta[3]);
    /* every tensor aligned to its element size (the data section starts 8-aligned) */
    for (i = 0; i < accel_st_file_count(f); ++i) {
        const accel_st_entry *e = accel_st_file_entry(f, i);
        AT_CHECK(((uintptr_t)e->data % accel_dtype_size(e->dtype)) == 0 || e->end == e->begin);
    }
    for (i = 0; i < n; ++i) {
        accel_tensor dst = t[i];
        int64_t nb = accel_tensor_nbytes(&t[i]);
        void *out = malloc((size_t)nb + 1);
        int k = accel_st_file_find(f, t[i].name);
        at_context = t[i].name;
        AT_CHECK(k >= 0);
        dst.ptr = out;
        memset(out, 0xEE, (size_t)nb + 1);
        AT_EQ_INT(accel_st_file_load(f, &dst), ACCEL_OK);
        AT_CHECK(nb == 0 || memcmp(out, t[i].ptr, (size_t)nb) == 0);
        AT_EQ_INT(((unsigned char *)out)[nb], 0xEE); /* nothing past the end */
        if (k >= 0) {
            const accel_st_entry *e = accel_st_file_entry(f, k);
            AT_EQ_INT(e->dtype, t[i].dtype);
            AT_EQ_INT(e->ndim, t[i].ndim);
            AT_EQ_INT((int64_t)(e->end - e->begin), nb);
        }
        free(out);
    }
    at_context = "";
    /* dtype / shape mismatch: clear error naming the tensor, expected vs found */
    {
        accel_tensor dst = t[0];
        float tmp[64];
        dst.dtype = ACCEL_F32;
        dst.ptr = tmp;
        AT_EQ_INT(accel_st_file_load(f, &dst), ACCEL_ERR_INVALID_ARGUMENT);
        AT_CONTAINS(accel_last_error(NULL), "tensor 'w.F64': expected F32 [3, 6], found F64 [3, 6]");
        dst = t[1];
        dst.shape[1] = 99;
        AT_EQ_INT(accel_st_file_load(f, &dst), ACCEL_ERR_INVALID_ARGUMENT);
        AT_CONTAINS(accel_last_error(NULL), "expected F32 [3, 99], found F32 [3, 7]");
        dst.name = "nope";
        AT_EQ_INT(accel_st_file_load(f, &dst), ACCEL_ERR_NOT_FOUND);
        AT_CONTAINS(accel_last_error(NULL), "'nope'");
    }
    /* all-or-nothing: the second destination is wrong, so the first is not written */
    {
        accel_tensor two[2];
        unsigned char *out0 = (unsigned char *)malloc(8 * 3 * 6);
        float junk[4];
        memset(out0, 0x5A, 8 * 3 * 6);
        two[0] = t[0]; two[0].ptr = out0;
        two[1] = t[1]; two[1].ptr = junk; two[1].dtype = ACCEL_I8;
        AT_EQ_INT(accel_st_file_load_all(f, two, 2), ACCEL_ERR_INVALID_ARGUMENT);
        AT_EQ_INT(out0[0], 0x5A);
        AT_EQ_INT(out0[8 * 3 * 6 - 1], 0x5A);
        free(out0);
    }
    accel_st_file_destroy(f);
    /* the written header: N % 8 == 0, padded with spaces, data section = sum of sizes */
    {
        size_t sz = 0, k;
        unsigned char *b = at_read_file(path, &sz);
        uint64_t hn = 0;
        for (k = 0; k < 8; ++k) hn |= (uint64_t)b[k] << (8 * k);
        AT_EQ_INT(hn % 8, 0);
        AT_EQ_INT(b[0] != 0, 1);
        AT_EQ_INT(b[8], '{');
        AT_CHECK(b[8 + hn - 1] == ' ' || b[8 + hn - 1] == '}');
        free(b);
    }
    /* writer refuses bad input, writes nothing */
    {
        accel_tensor dup[2];
        char p2[400];
        dup[0] = t[0]; dup[1] = t[1]; dup[1].name = t[0].name;
        snprintf(p2, sizeof p2, "%s/dup.safetensors", g_root);
        AT_EQ_INT(accel_st_save(NULL, p2, dup, 2, NULL, 0), ACCEL_ERR_INVALID_ARGUMENT);
        AT_CONTAINS(accel_last_error(NULL), "duplicate tensor name");
        AT_CHECK(!at_exists(p2));
        dup[1].name = "__metadata__";
        AT_EQ_INT(accel_st_save(NULL, p2, dup, 2, NULL, 0), ACCEL_ERR_INVALID_ARGUMENT);
        dup[1].name = "bad\xff";
        AT_EQ_INT(accel_st_save(NULL, p2, dup, 2, NULL, 0), ACCEL_ERR_INVALID_ARGUMENT);
        AT_CONTAINS(accel_last_error(NULL), "UTF-8");
        AT_CHECK(!at_exists(p2));
    }
    for (i = 0; i < n; ++i) free(bufs[i]);
}

/* ------------------------------------------------------------------------- the atomic single-file write */
/* save_safetensors streams into the core's atomic pair (accel__atomic_open/_commit: "<path>.tmp.<pid>", fsync,
   rename): a file of the user's that happens to be called "<path>.tmp" is neither truncated nor renamed over the
   target, and a failed write leaves no temporary behind. */
static int count_prefixed(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    struct dirent *e;
    int k = 0;
    while (d && (e = readdir(d)) != NULL) k += !strncmp(e->d_name, prefix, strlen(prefix));
    if (d) closedir(d);
    return k;
}
static void test_atomic_writer(void) {
    char dir[400], path[500], user[520];
    float w[4] = {1, 2, 3, 4};
    accel_tensor t;
    unsigned char *b;
    size_t n = 0;
    accel_st_file *f = NULL;
    snprintf(dir, sizeof dir, "%s/atomic", g_root);
    AT_EQ_INT(mkdir(dir, 0777), 0);
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
    snprintf(user, sizeof user, "%s.tmp", path);
    at_write_file(user, "the user's own file", 19);
    memset(&t, 0, sizeof t);
    t.name = "w"; t.dtype = ACCEL_F32; t.ndim = 1; t.shape[0] = 4; t.ptr = w;
    AT_EQ_INT(accel_st_save(NULL, path, &t, 1, NULL, 0), ACCEL_OK);
    b = at_read_file(user, &n);
    AT_CHECK(b && n == 19 && !memcmp(b, "the user's own file", 19));
    free(b);
    AT_EQ_INT(accel_st_file_open(NULL, path, &f), ACCEL_OK);
    AT_EQ_INT(accel_st_file_count(f), 1);
    accel_st_file_destroy(f);
    AT_EQ_INT(count_prefixed(dir, "w.safetensors.tmp."), 0);
    /* a write that fails half-way (the file-size limit: EFBIG) leaves nothing, neither the target nor a temporary */
    {
        static float big[4096];
        struct rlimit old, lim;
        void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
        snprintf(path, sizeof path, "%s/x.safetensors", dir);
        t.ptr = big;
        t.shape[0] = 4096;
        AT_EQ_INT(getrlimit(RLIMIT_FSIZE, &old), 0);
        lim = old;
        lim.rlim_cur = 1000;
        AT_EQ_INT(setrlimit(RLIMIT_FSIZE, &lim), 0);
        AT_EQ_INT(accel_st_save(NULL, path, &t, 1, NULL, 0), ACCEL_ERR_IO);
        AT_EQ_INT(setrlimit(RLIMIT_FSIZE, &old), 0);
        signal(SIGXFSZ, prev);
        AT_CHECK(!at_exists(path));
        AT_EQ_INT(count_prefixed(dir, "x.safetensors"), 0);
    }
}

/* -------------------------------------------------------------------- hand-built reference-layout bytes */
/* Builds: u64 N | header (padded to pad) | data. */
static size_t build(unsigned char *out, const char *header, size_t pad_to, const void *data, size_t dn) {
    size_t hn = strlen(header), k, n;
    n = hn;
    if (pad_to) while (n % pad_to) ++n;
    for (k = 0; k < 8; ++k) out[k] = (unsigned char)((uint64_t)n >> (8 * k));
    memcpy(out + 8, header, hn);
    for (k = hn; k < n; ++k) out[8 + k] = ' ';
    if (dn) memcpy(out + 8 + n, data, dn);
    return 8 + n + dn;
}

static void test_reference_bytes(void) {
    unsigned char buf[1024];
    float a[2] = {1.5f, -2.25f};
    int64_t b = -7;
    unsigned char data[24];
    size_t n;
    accel_st_file *f = NULL;
    const accel_st_entry *e;
    memcpy(data, &b, 8);
    memcpy(data + 8, a, 8);
    data[16] = 1; /* bool */
    /* keys in any order, leading whitespace, the reference writer's sort (I64 first): offsets by hand */
    n = build(buf, "  {\"b\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[0,8]},"
                   "\"__metadata__\":{\"format\":\"pt\"},"
                   "\"flag\":{\"shape\":[1],\"dtype\":\"BOOL\",\"data_offsets\":[16,17]},"
                   "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
              8, data, 17);
    AT_EQ_INT(accel_st_file_open_memory(NULL, buf, n, &f), ACCEL_OK);
    if (!f) return;
    AT_EQ_INT(accel_st_file_count(f), 3);
    e = accel_st_file_entry(f, accel_st_file_find(f, "a"));
    AT_CHECK(e && e->dtype == ACCEL_F32 && e->ndim == 1 && e->shape[0] == 2 && e->begin == 8 && e->end == 16);
    {
        float got[2] = {0, 0};
        int64_t gb = 0;
        unsigned char gf = 9;
        accel_tensor t;
        memset(&t, 0, sizeof t);
        t.name = "a"; t.dtype = ACCEL_F32; t.ndim = 1; t.shape[0] = 2; t.ptr = got;
        AT_EQ_INT(accel_st_file_load(f, &t), ACCEL_OK);
        AT_NEAR(got[0], 1.5, 0);
        AT_NEAR(got[1], -2.25, 0);
        t.name = "b"; t.dtype = ACCEL_I64; t.ndim = 0; t.ptr = &gb;
        AT_EQ_INT(accel_st_file_load(f, &t), ACCEL_OK);
        AT_EQ_INT(gb, -7);
        t.name = "flag"; t.dtype = ACCEL_BOOL; t.ndim = 1; t.shape[0] = 1; t.ptr = &gf;
        AT_EQ_INT(accel_st_file_load(f, &t), ACCEL_OK);
        AT_EQ_INT(gf, 1);
    }
    AT_EQ_STR(accel_st_file_metadata_get(f, "format"), "pt");
    accel_st_file_destroy(f);
    /* an unpadded header (N not a multiple of 8) is valid too */
    n = build(buf, "{\"x\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]}}", 0, "abc", 3);
    AT_EQ_INT(accel_st_file_open_memory(NULL, buf, n, &f), ACCEL_OK);
    accel_st_file_destroy(f);
    /* empty header object, no tensors */
    n = build(buf, "{}", 8, NULL, 0);
    AT_EQ_INT(accel_st_file_open_memory(NULL, buf, n, &f), ACCEL_OK);
    AT_EQ_INT(accel_st_file_count(f), 0);
    accel_st_file_destroy(f);
    /* escapes in names: \u00e9, a surrogate pair, \/ */
    n = build(buf, "{\"caf\\u00e9\\/\\ud83d\\ude00\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 8, "z", 1);
    AT_EQ_INT(accel_st_file_open_memory(NULL, buf, n, &f), ACCEL_OK);
    AT_CHECK(accel_st_file_find(f, "caf\xc3\xa9/\xf0\x9f\x98\x80") == 0);
    accel_st_file_destroy(f);
}

/* The reference writer's rules (issue 15's three defects, each checked against files of the reference safetensors
   package in check_safetensors_ref.py):
   (a) tensor order = its Dtype enum order, descending, then the name: F32 before U32 before I32, BF16 before F16;
   (b) a __metadata__ key or value may contain U+0000: read whole, with its length; "k\0x" does not shadow "k";
   (c) a tensor named "" is written (and read). */
static void test_reference_rules(void) {
    char path[400];
    float f32 = 1.0f;
    int32_t i32 = 2;
    uint32_t u32 = 3;
    uint16_t bf = 0x3f80, h = 0x3c00;
    unsigned char u8[3] = {7, 8, 9}, buf[512], back[3] = {0, 0, 0};
    accel_tensor t[6];
    accel_st_file *f = NULL;
    const char *k, *v;
    size_t kn = 0, vn = 0, n;
    int i;
    memset(t, 0, sizeof t);
    t[0].name = "a"; t[0].dtype = ACCEL_I32; t[0].ndim = 0; t[0].ptr = &i32;
    t[1].name = "b"; t[1].dtype = ACCEL_U32; t[1].ndim = 0; t[1].ptr = &u32;
    t[2].name = "c"; t[2].dtype = ACCEL_F32; t[2].ndim = 0; t[2].ptr = &f32;
    t[3].name = "d"; t[3].dtype = ACCEL_F16; t[3].ndim = 0; t[3].ptr = &h;
    t[4].name = "e"; t[4].dtype = ACCEL_BF16; t[4].ndim = 0; t[4].ptr = &bf;
    t[5].name = ""; t[5].dtype = ACCEL_U8; t[5].ndim = 1; t[5].shape[0] = 3; t[5].ptr = u8;
    snprintf(path, sizeof path, "%s/rules.safetensors", g_root);
    AT_EQ_INT(accel_st_save(NULL, path, t, 6, NULL, 0), ACCEL_OK); /* (c) */
    AT_EQ_INT(accel_st_file_open(NULL, path, &f), ACCEL_OK);
    if (f) {
        static const char *order[6] = {"c", "b", "a", "e", "d", ""}; /* (a): F32 U32 I32 BF16 F16 U8 */
        AT_EQ_INT(accel_st_file_count(f), 6);
        for (i = 0; i < 6 && i < accel_st_file_count(f); ++i) AT_EQ_STR(accel_st_file_entry(f, i)->name, order[i]);
        AT_EQ_INT(accel_st_file_find(f, ""), 5);
        t[5].ptr = back;
        AT_EQ_INT(accel_st_file_load(f, &t[5]), ACCEL_OK);
        AT_CHECK(!memcmp(back, u8, 3));
        accel_st_file_destroy(f);
        f = NULL;
    }
    /* (b): the reference writes "k" and "k\0x" as two keys */
    n = build(buf, "{\"__metadata__\":{\"k\\u0000x\":\"v\\u0000w\",\"k\":\"plain\",\"z\":\"\\u0000\"},"
                   "\"\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 8, "q", 1);
    AT_EQ_INT(accel_st_file_open_memory(NULL, buf, n, &f), ACCEL_OK);
    if (!f) return;
    AT_EQ_INT(accel_st_file_metadata_count(f), 3);
    AT_EQ_INT(accel_st_file_metadata(f, 0, &k, &kn, &v, &vn), ACCEL_OK);
    AT_CHECK(kn == 3 && !memcmp(k, "k\0x", 4) && vn == 3 && !memcmp(v, "v\0w", 4));
    AT_EQ_INT(accel_st_file_metadata(f, 2, &k, &kn, &v, &vn), ACCEL_OK);
    AT_CHECK(kn == 1 && vn == 1 && v[0] == 0 && v[1] == 0);
    AT_EQ_STR(accel_st_file_metadata_get(f, "k"), "plain");
    AT_CHECK(accel_st_file_metadata_get(f, "k\0x") == accel_st_file_metadata_get(f, "k")); /* C strings end at NUL */
    AT_EQ_INT(accel_st_file_find(f, ""), 0);
    accel_st_file_destroy(f);
}

typedef struct { const char *what; const char *header; size_t data_len; int truncate_by; accel_result expect; const char *msg; } bad_case;

static void test_malformed(void) {
    static const bad_case cases[] = {
        {"truncated below 8 bytes", NULL, 0, 0, ACCEL_ERR_FORMAT, "shorter than the 8-byte header length"},
        {"header size > file", "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4, -100, ACCEL_ERR_FORMAT, "larger than the file"},
        {"truncated data", "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4, 2, ACCEL_ERR_FORMAT, "past the end"},
        {"trailing bytes", "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 6, 0, ACCEL_ERR_FORMAT, "trailing bytes"},
        {"overlap", "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[2,6]}}", 6, 0, ACCEL_ERR_FORMAT, "overlap"},
        {"hole", "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[6,10]}}", 10, 0, ACCEL_ERR_FORMAT, "leave a hole"},
        {"first tensor not at 0", "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[2,6]}}", 6, 0, ACCEL_ERR_FORMAT, "leave a hole"},
        {"end before begin", "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},\"c\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[4,2]}}", 4, 0, ACCEL_ERR_FORMAT, "end before they begin"},
        {"offsets past the end", "{\"a\":{\"dtype\":\"U8\",\"shape\":[40],\"data_offsets\":[0,40]}}", 4, 0, ACCEL_ERR_FORMAT, "past the end"},
        {"bad dtype", "{\"a\":{\"dtype\":\"F33\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4, 0, ACCEL_ERR_FORMAT, "bad dtype \"F33\""},
        {"unsupported dtype", "{\"a\":{\"dtype\":\"C64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8, 0, ACCEL_ERR_UNSUPPORTED, "does not support"},
        {"shape/size mismatch", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,12]}}", 12, 0, ACCEL_ERR_FORMAT, "needs 16 bytes but data_offsets span 12"},
        {"shape overflow", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}", 4, 0, ACCEL_ERR_FORMAT, "overflows"},
        {"negative shape", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, 0, ACCEL_ERR_FORMAT, "non-negative integers"},
        {"float offset", "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4.0]}}", 4, 0, ACCEL_ERR_FORMAT, "data_offsets"},
        {"duplicate names", "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2,4]}}", 4, 0, ACCEL_ERR_FORMAT, "duplicate key \"a\""},
        {"invalid UTF-8", "{\"a\xff\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4, 0, ACCEL_ERR_FORMAT, "not valid UTF-8"},
        {"overlong UTF-8", "{\"a\xc0\xaf\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4, 0, ACCEL_ERR_FORMAT, "not valid UTF-8"},
        {"UTF-8 surrogate", "{\"a\xed\xa0\x80\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4, 0, ACCEL_ERR_FORMAT, "not valid UTF-8"},
        {"lone surrogate escape", "{\"a\\ud800\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4, 0, ACCEL_ERR_FORMAT, "surrogate"},
        {"invalid JSON", "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}", 4, 0, ACCEL_ERR_FORMAT, "not valid JSON"},
        {"trailing garbage", "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}} x", 4, 0, ACCEL_ERR_FORMAT, "trailing data"},
        {"trailing comma", "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4],}}", 4, 0, ACCEL_ERR_FORMAT, "not valid JSON"},
        {"control char in string", "{\"a\tb\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4, 0, ACCEL_ERR_FORMAT, "control character"},
        {"not an object", "[1,2]", 0, 0, ACCEL_ERR_FORMAT, "not a JSON object"},
        {"missing field", "{\"a\":{\"dtype\":\"U8\",\"shape\":[4]}}", 4, 0, ACCEL_ERR_FORMAT, "exactly dtype, shape and data_offsets"},
        {"extra field", "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4],\"x\":1}}", 4, 0, ACCEL_ERR_FORMAT, "exactly dtype"},
        {"metadata not strings", "{\"__metadata__\":{\"k\":1}}", 0, 0, ACCEL_ERR_FORMAT, "__metadata__"},
        {"too many dims", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1, 0, ACCEL_ERR_UNSUPPORTED, "dimensions"},
    };
    static unsigned char buf[8192];
    size_t i, n;
    char path[400];
    for (i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        const bad_case *c = &cases[i];
        accel_st_file *f = (accel_st_file *)&buf; /* must be reset to NULL on failure */
        unsigned char data[64];
        at_context = c->what;
        memset(data, 7, sizeof data);
        if (!c->header) n = 5, memset(buf, 0, 5);
        else n = build(buf, c->header, 8, data, c->data_len);
        if (c->truncate_by > 0) n -= (size_t)c->truncate_by;
        if (c->truncate_by < 0) n = 8 + 10; /* header length claims more than the file holds */
        AT_EQ_INT(accel_st_file_open_memory(NULL, buf, n, &f), c->expect);
        AT_CHECK(f == NULL);
        AT_CONTAINS(accel_last_error(NULL), c->msg);
        /* the same bytes through a real file */
        snprintf(path, sizeof path, "%s/bad.safetensors", g_root);
        at_write_file(path, buf, n);
        f = NULL;
        AT_EQ_INT(accel_st_file_open(NULL, path, &f), c->expect);
        AT_CHECK(f == NULL);
    }
    /* nesting deeper than 64 */
    {
        char h[400];
        size_t k, o = 0;
        accel_st_file *f = NULL;
        o += (size_t)snprintf(h + o, sizeof h - o, "{\"__metadata__\":");
        for (k = 0; k < 70; ++k) h[o++] = '[';
        for (k = 0; k < 70; ++k) h[o++] = ']';
        h[o++] = '}';
        h[o] = 0;
        at_context = "deep nesting";
        n = build(buf, h, 8, NULL, 0);
        AT_EQ_INT(accel_st_file_open_memory(NULL, buf, n, &f), ACCEL_ERR_FORMAT);
        AT_CONTAINS(accel_last_error(NULL), "deeper than 64");
    }
    /* header > 100 MB: refused from the 8-byte length alone */
    {
        unsigned char hb[16];
        uint64_t big = 100000001ull;
        int k;
        accel_st_file *f = NULL;
        at_context = "header > 100MB";
        for (k = 0; k < 8; ++k) hb[k] = (unsigned char)(big >> (8 * k));
        memset(hb + 8, ' ', 8);
        AT_EQ_INT(accel_st_file_open_memory(NULL, hb, 16, &f), ACCEL_ERR_FORMAT);
        AT_CONTAINS(accel_last_error(NULL), "exceeds the 100000000-byte limit");
        big = ~(uint64_t)0; /* 8 + N overflows */
        for (k = 0; k < 8; ++k) hb[k] = (unsigned char)(big >> (8 * k));
        AT_EQ_INT(accel_st_file_open_memory(NULL, hb, 16, &f), ACCEL_ERR_FORMAT);
    }
    at_context = "";
}

/* --------------------------------------------------------------------------- sharding (docs/semantics.md §6) */
static void plan(const uint64_t *sizes, int n, uint64_t max, int *shard_of, int *ns) {
    uint64_t sb[64];
    AT_EQ_INT(accel_st_plan_shards(NULL, sizes, n, max, shard_of, sb, ns), ACCEL_OK);
}
static void test_plans(void) {
    const uint64_t G = 1000000000ull;
    int so[16], ns = 0;
    char name[64];
    {   /* doc example [6,6,2,6,2,2]GB @10GB → [6], [6,2], [6,2,2] */
        uint64_t s[6] = {6 * G, 6 * G, 2 * G, 6 * G, 2 * G, 2 * G};
        int want[6] = {0, 1, 1, 2, 2, 2};
        int i;
        plan(s, 6, 10 * G, so, &ns);
        AT_EQ_INT(ns, 3);
        for (i = 0; i < 6; ++i) AT_EQ_INT(so[i], want[i]);
    }
    {   /* [2,12,2]GB @10GB → 00001:[b], 00002:[a,c] */
        uint64_t s[3] = {2 * G, 12 * G, 2 * G};
        plan(s, 3, 10 * G, so, &ns);
        AT_EQ_INT(ns, 2);
        AT_EQ_INT(so[0], 1);
        AT_EQ_INT(so[1], 0);
        AT_EQ_INT(so[2], 1);
    }
    {   /* first tensor oversize: no empty shard (policy 7) */
        uint64_t s[2] = {20, 5};
        plan(s, 2, 10, so, &ns);
        AT_EQ_INT(ns, 2);
        AT_EQ_INT(so[0], 0);
        AT_EQ_INT(so[1], 1);
    }
    {   /* exact fit stays together; one byte more splits */
        uint64_t s[3] = {4, 6, 1};
        plan(s, 3, 10, so, &ns);
        AT_EQ_INT(ns, 2);
        AT_EQ_INT(so[0], 0); AT_EQ_INT(so[1], 0); AT_EQ_INT(so[2], 1);
    }
    {   /* two oversize in a row around an open shard: [1, 50, 2, 60, 3] @10 → [50], [60], [1,2,3] */
        uint64_t s[5] = {1, 50, 2, 60, 3};
        plan(s, 5, 10, so, &ns);
        AT_EQ_INT(ns, 3);
        AT_EQ_INT(so[1], 0); AT_EQ_INT(so[3], 1); AT_EQ_INT(so[0], 2); AT_EQ_INT(so[2], 2); AT_EQ_INT(so[4], 2);
    }
    {   /* empty state dict: no shard */
        plan(NULL, 0, 10, so, &ns);
        AT_EQ_INT(ns, 0);
    }
    accel_st_shard_name(0, 1, name, sizeof name);
    AT_EQ_STR(name, "model.safetensors");
    accel_st_shard_name(1, 3, name, sizeof name);
    AT_EQ_STR(name, "model-00002-of-00003.safetensors");
}

static void test_save_model(void) {
    char dir[400], p[600];
    float a[4] = {1, 2, 3, 4}, b[8], c[2] = {9, 10}, ra[4], rb[8], rc[2];
    accel_tensor t[3], r[3];
    size_t n = 0;
    unsigned char *idx;
    int i;
    for (i = 0; i < 8; ++i) b[i] = (float)(i * 3);
    memset(t, 0, sizeof t);
    t[0].name = "a"; t[0].dtype = ACCEL_F32; t[0].ndim = 1; t[0].shape[0] = 4; t[0].ptr = a;
    t[1].name = "b\xc3\xa9\"x"; t[1].dtype = ACCEL_F32; t[1].ndim = 2; t[1].shape[0] = 2; t[1].shape[1] = 4; t[1].ptr = b;
    t[2].name = "c"; t[2].dtype = ACCEL_F32; t[2].ndim = 1; t[2].shape[0] = 2; t[2].ptr = c;
    memcpy(r, t, sizeof r);
    r[0].ptr = ra; r[1].ptr = rb; r[2].ptr = rc;
    snprintf(dir, sizeof dir, "%s/model", g_root);
    /* 16 + 32 + 8 bytes, max 20 → [a], [b] (oversize, own shard appended first), … : plan [a]? compute by rule:
       a(16) → cur; b(32) > 20 → shard 0 = [b]; c(8): 16+8 > 20 → close cur → shard 1 = [a]; shard 2 = [c] */
    AT_EQ_INT(accel_st_save_model(NULL, dir, t, 3, "20"), ACCEL_OK);
    snprintf(p, sizeof p, "%s/model-00001-of-00003.safetensors", dir); AT_CHECK(at_exists(p));
    snprintf(p, sizeof p, "%s/model-00003-of-00003.safetensors", dir); AT_CHECK(at_exists(p));
    snprintf(p, sizeof p, "%s/model.safetensors", dir); AT_CHECK(!at_exists(p));
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    idx = at_read_file(p, &n);
    AT_CHECK(idx != NULL);
    if (idx) {
        /* json.dumps(obj, indent=2, sort_keys=True) + "\n", written out by hand */
        const char *want = "{\n  \"metadata\": {\n    \"total_size\": 56\n  },\n  \"weight_map\": {\n"
                           "    \"a\": \"model-00002-of-00003.safetensors\",\n"
                           "    \"b\\u00e9\\\"x\": \"model-00001-of-00003.safetensors\",\n"
                           "    \"c\": \"model-00003-of-00003.safetensors\"\n  }\n}\n";
        AT_EQ_INT(n, strlen(want));
        AT_CHECK(n == strlen(want) && !memcmp(idx, want, n));
        free(idx);
    }
    memset(ra, 0, sizeof ra); memset(rb, 0, sizeof rb); memset(rc, 0, sizeof rc);
    AT_EQ_INT(accel_st_load_model(NULL, dir, r, 3), ACCEL_OK);
    AT_CHECK(!memcmp(ra, a, sizeof a) && !memcmp(rb, b, sizeof b) && !memcmp(rc, c, sizeof c));
    /* missing tensor in the request → strict error, nothing copied */
    memset(ra, 0, sizeof ra);
    AT_EQ_INT(accel_st_load_model(NULL, dir, r, 2), ACCEL_ERR_INVALID_ARGUMENT);
    AT_EQ_INT(ra[0] == 0.0f, 1);
    /* re-save as a single file: stale shards and index removed */
    AT_EQ_INT(accel_st_save_model(NULL, dir, t, 3, "10GB"), ACCEL_OK);
    snprintf(p, sizeof p, "%s/model.safetensors", dir); AT_CHECK(at_exists(p));
    snprintf(p, sizeof p, "%s/model-00001-of-00003.safetensors", dir); AT_CHECK(!at_exists(p));
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir); AT_CHECK(!at_exists(p));
    memset(rb, 0, sizeof rb);
    AT_EQ_INT(accel_st_load_model(NULL, dir, r, 3), ACCEL_OK);
    AT_CHECK(!memcmp(rb, b, sizeof b));
    /* metadata {"format": "pt"} */
    {
        accel_st_file *f = NULL;
        snprintf(p, sizeof p, "%s/model.safetensors", dir);
        AT_EQ_INT(accel_st_file_open(NULL, p, &f), ACCEL_OK);
        AT_EQ_STR(accel_st_file_metadata_get(f, "format"), "pt");
        accel_st_file_destroy(f);
    }
    /* 2 shards after 3: the third is stale and removed; an unrelated file stays */
    snprintf(p, sizeof p, "%s/notes-00001-of-00002.txt", dir);
    at_write_file(p, "x", 1);
    AT_EQ_INT(accel_st_save_model(NULL, dir, t, 3, "20"), ACCEL_OK);
    AT_EQ_INT(accel_st_save_model(NULL, dir, t, 3, "48"), ACCEL_OK); /* [a,b], [c] */
    snprintf(p, sizeof p, "%s/model-00003-of-00003.safetensors", dir); AT_CHECK(!at_exists(p));
    snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", dir); AT_CHECK(at_exists(p));
    snprintf(p, sizeof p, "%s/notes-00001-of-00002.txt", dir); AT_CHECK(at_exists(p));
    memset(rc, 0, sizeof rc);
    AT_EQ_INT(accel_st_load_model(NULL, dir, r, 3), ACCEL_OK);
    AT_CHECK(!memcmp(rc, c, sizeof c));
    /* invalid size string and empty state dict */
    AT_EQ_INT(accel_st_save_model(NULL, dir, t, 3, "5B"), ACCEL_ERR_INVALID_ARGUMENT);
    snprintf(dir, sizeof dir, "%s/model_empty", g_root);
    AT_EQ_INT(accel_st_save_model(NULL, dir, t, 0, NULL), ACCEL_OK);
    snprintf(p, sizeof p, "%s/model.safetensors", dir); AT_CHECK(!at_exists(p));
}

/* A FIFO where a safetensors file is expected is refused as not a regular file, at once (opened blocking it would
   wait forever for a writer): accel_st_file_open, and accel_st_load_model of a folder whose model.safetensors is
   one. The calls run in a child bounded by 10 s (a hang fails the check). */
static int fifo_child(void *arg) {
    const char *dir = (const char *)arg;
    char p[600];
    accel_st_file *f = NULL;
    float w[2] = {0, 0};
    accel_tensor t = at_vec("w", w, ACCEL_F32, 2);
    accel_result r;
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    r = accel_st_file_open(NULL, p, &f);
    if (r != ACCEL_ERR_IO || f || !strstr(accel_last_error(NULL), "model.safetensors is not a regular file")) {
        fprintf(stderr, "file_open of a FIFO: %d: %s\n", (int)r, accel_last_error(NULL));
        return 1;
    }
    r = accel_st_load_model(NULL, dir, &t, 1);
    if (r != ACCEL_ERR_IO || !strstr(accel_last_error(NULL), "model.safetensors is not a regular file")) {
        fprintf(stderr, "load_model with a FIFO: %d: %s\n", (int)r, accel_last_error(NULL));
        return 2;
    }
    return 0;
}
static void test_fifo(void) {
    char dir[400], p[600];
    snprintf(dir, sizeof dir, "%s/fifo", g_root);
    AT_CHECK(mkdir(dir, 0755) == 0);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    AT_CHECK(mkfifo(p, 0600) == 0);
    AT_EQ_INT(at_bounded(fifo_child, dir, 10), 0);
}

int main(void) {
    char tmpl[] = "/tmp/accel_st_unit_XXXXXX";
    if (!mkdtemp(tmpl)) { perror("mkdtemp"); return 1; }
    snprintf(g_root, sizeof g_root, "%s", tmpl);
    accel_set_default_logger(quiet, NULL);
    test_xxh64();
    test_roundtrip_all_dtypes();
    test_atomic_writer();
    test_reference_bytes();
    test_reference_rules();
    test_malformed();
    test_plans();
    test_save_model();
    test_fifo();
    at_rm_rf(g_root);
    return at_finish("safetensors-unit");
}
