/* Big models (accel_bigmodel.h, docs/semantics.md §9) on the CPU:
     - worked cases: sizes (bool = 1/8 byte, a target dtype), the largest layer, balanced memory (low_zero) and device
       maps (GPU 0 left empty, tied parameters, no_split classes, disk) — expected values printed by Accelerate 1.15's
       own functions on the same torch modules (tests/unit/bigmodel/check_device_map.py compares random trees);
     - the builder and the JSON form give the same model;
     - properties on random trees: every tensor covered by exactly one entry of the map;
     - dispatch of a sharded safetensors checkpoint onto a cpu / "GPU" / disk map: every tensor's bytes, aliases, dtype
       conversion, an offload folder; mismatched names / shapes / devices → errors naming the tensor, nothing kept
       (every block returned to a counting allocator);
     - end to end: a model whose weights exceed the memory budget runs layer by layer with the rest on disk through the
       just-in-time fetch, with and without prefetch, and gives the bit-identical output of the all-in-memory run. */
#include "accel_safetensors.h"
#include "accel_bigmodel.h"
#include "accel_test.h"
#include "accel_test_fs.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_root[256];
static void quiet(void *u, accel_log_level l, const char *m) { (void)u; (void)l; (void)m; }

/* ------------------------------------------------------------------------------------- counting allocator */
typedef at_counter counter;
static void init_counting(accel *acc, counter *c) { AT_EQ_INT(at_init_counting(acc, c, quiet), ACCEL_OK); }

static accel_tensor tens(const char *name, accel_dtype dt, int64_t n0, int64_t n1) {
    accel_tensor t;
    memset(&t, 0, sizeof t);
    t.name = name;
    t.dtype = dt;
    t.ndim = n1 ? 2 : 1;
    t.shape[0] = n0;
    t.shape[1] = n1;
    return t;
}

/* The worked model of Accelerate's docs style: embed (Linear [32] f32), h0..h2 (Block: l1, l2 Linear [16] f32),
   head (Linear, weight tied to embed.weight), a root buffer mask [3] bool. */
static accel_bm_model *worked_model(accel *acc) {
    accel_bm_model *m = NULL;
    accel_bm_model_desc md;
    accel_tensor t;
    char name[64];
    int h;
    md.class_name = "Net";
    AT_EQ_INT(accel_bm_model_create(acc, &md, &m), ACCEL_OK);
    AT_EQ_INT(accel_bm_model_add_module(m, "embed", "Linear"), ACCEL_OK);
    t = tens("embed.weight", ACCEL_F32, 32, 0);
    AT_EQ_INT(accel_bm_model_add_tensor(m, &t, 0), ACCEL_OK);
    for (h = 0; h < 3; ++h) {
        snprintf(name, sizeof name, "h%d", h);
        AT_EQ_INT(accel_bm_model_add_module(m, name, "Block"), ACCEL_OK);
        snprintf(name, sizeof name, "h%d.l1", h);
        AT_EQ_INT(accel_bm_model_add_module(m, name, "Linear"), ACCEL_OK);
        snprintf(name, sizeof name, "h%d.l1.weight", h);
        t = tens(name, ACCEL_F32, 16, 0);
        AT_EQ_INT(accel_bm_model_add_tensor(m, &t, 0), ACCEL_OK);
        snprintf(name, sizeof name, "h%d.l2", h);
        AT_EQ_INT(accel_bm_model_add_module(m, name, "Linear"), ACCEL_OK);
        snprintf(name, sizeof name, "h%d.l2.weight", h);
        t = tens(name, ACCEL_F32, 16, 0);
        AT_EQ_INT(accel_bm_model_add_tensor(m, &t, 0), ACCEL_OK);
    }
    AT_EQ_INT(accel_bm_model_add_module(m, "head", "Linear"), ACCEL_OK);
    AT_EQ_INT(accel_bm_model_tie(m, "embed.weight", "head.weight"), ACCEL_OK);
    t = tens("mask", ACCEL_BOOL, 3, 0);
    AT_EQ_INT(accel_bm_model_add_tensor(m, &t, 1), ACCEL_OK);
    return m;
}
static const char *WORKED_JSON =
    "{\"modules\": [[\"\", \"Net\", [\"embed\", \"h0\", \"h1\", \"h2\", \"head\"], [], [\"mask\"]],"
    " [\"embed\", \"Linear\", [], [\"weight\"], []],"
    " [\"h0\", \"Block\", [\"l1\", \"l2\"], [], []], [\"h0.l1\", \"Linear\", [], [\"weight\"], []], [\"h0.l2\", \"Linear\", [], [\"weight\"], []],"
    " [\"h1\", \"Block\", [\"l1\", \"l2\"], [], []], [\"h1.l1\", \"Linear\", [], [\"weight\"], []], [\"h1.l2\", \"Linear\", [], [\"weight\"], []],"
    " [\"h2\", \"Block\", [\"l1\", \"l2\"], [], []], [\"h2.l1\", \"Linear\", [], [\"weight\"], []], [\"h2.l2\", \"Linear\", [], [\"weight\"], []],"
    " [\"head\", \"Linear\", [], [\"weight\"], []]],"
    " \"tensors\": [[\"embed.weight\", [32], \"torch.float32\"], [\"h0.l1.weight\", [16], \"torch.float32\"],"
    " [\"h0.l2.weight\", [16], \"F32\"], [\"h1.l1.weight\", [16], \"torch.float32\"], [\"h1.l2.weight\", [16], \"torch.float32\"],"
    " [\"h2.l1.weight\", [16], \"torch.float32\"], [\"h2.l2.weight\", [16], \"torch.float32\"], [\"mask\", [3], \"torch.bool\"]],"
    " \"tied\": [[\"embed.weight\", \"head.weight\"]]}";

/* "name=bytes,..." of the sizes, for one comparison */
static void sizes_str(accel_bm_model *m, const accel_bm_map_desc *d, char *out, size_t cap) {
    accel_bm_size s[64];
    int n = 0, i;
    size_t o = 0;
    out[0] = 0;
    AT_EQ_INT(accel_bm_module_sizes(m, d, s, 64, &n), ACCEL_OK);
    for (i = 0; i < n && i < 64 && o < cap; ++i)
        o += (size_t)snprintf(out + o, cap - o, "%s%s=%g", i ? "," : "", s[i].name, s[i].bytes);
}
static void map_str(accel_bm_model *m, const accel_bm_map_desc *d, char *out, size_t cap, accel_result want) {
    accel_bm_placement p[64];
    int n = 0, i;
    size_t o = 0;
    out[0] = 0;
    AT_EQ_INT(accel_bm_infer_device_map(m, d, p, 64, &n), want);
    if (want != ACCEL_OK) return;
    for (i = 0; i < n && i < 64 && o < cap; ++i) {
        char dev[16];
        accel_bm_device_name(p[i].device, dev, sizeof dev);
        o += (size_t)snprintf(out + o, cap - o, "%s%s:%s", i ? "," : "", p[i].name, dev);
    }
}
static void mem_str(accel_bm_model *m, const accel_bm_map_desc *d, char *out, size_t cap) {
    accel_bm_memory mm[8];
    int n = 0, i;
    size_t o = 0;
    out[0] = 0;
    AT_EQ_INT(accel_bm_balanced_memory(m, d, mm, 8, &n), ACCEL_OK);
    for (i = 0; i < n && i < 8 && o < cap; ++i) {
        char dev[16];
        accel_bm_device_name(mm[i].device, dev, sizeof dev);
        o += (size_t)snprintf(out + o, cap - o, "%s%s=%g", i ? "," : "", dev, mm[i].bytes);
    }
}
static int parse_mm(const char *s, accel_bm_memory *mm) {
    int n = 0;
    AT_EQ_INT(accel_bm_parse_max_memory(NULL, s, mm, 8, &n), ACCEL_OK);
    return n;
}

static void test_worked(void) {
    static const char *no_split[] = {"Block"};
    accel_bm_model *m, *j = NULL;
    accel_bm_map_desc d;
    accel_bm_memory mm[8];
    char got[2048], got2[2048];
    const char *names[8];
    double big = 0;
    int n = 0;
    /* §9 "GPU 0 can get nothing": caps 100/100, largest layer 100 → {'a': 1, 'b': 'cpu'} */
    {
        accel_tensor t;
        accel_bm_model_desc md;
        md.class_name = "Net";
        m = NULL;
        AT_EQ_INT(accel_bm_model_create(NULL, &md, &m), ACCEL_OK);
        AT_EQ_INT(accel_bm_model_add_module(m, "a", "Linear"), ACCEL_OK);
        t = tens("a.weight", ACCEL_F32, 25, 0);
        AT_EQ_INT(accel_bm_model_add_tensor(m, &t, 0), ACCEL_OK);
        AT_EQ_INT(accel_bm_model_add_module(m, "b", "Linear"), ACCEL_OK);
        t = tens("b.weight", ACCEL_F32, 25, 0);
        AT_EQ_INT(accel_bm_model_add_tensor(m, &t, 0), ACCEL_OK);
        memset(&d, 0, sizeof d);
        d.max_memory = mm;
        d.n_max_memory = parse_mm("cpu=1000,1=100,0=100", mm);
        AT_EQ_INT(d.n_max_memory, 3);
        AT_EQ_INT(mm[0].device, 0); AT_EQ_INT(mm[1].device, 1); AT_EQ_INT(mm[2].device, ACCEL_BM_CPU); /* Accelerate's key order */
        sizes_str(m, &d, got, sizeof got);
        AT_EQ_STR(got, "=200,a=100,a.weight=100,b=100,b.weight=100");
        map_str(m, &d, got, sizeof got, ACCEL_OK);
        AT_EQ_STR(got, "a:1,b:cpu");
        accel_bm_model_destroy(m);
    }
    m = worked_model(NULL);
    AT_EQ_INT(accel_bm_model_open_memory(NULL, WORKED_JSON, strlen(WORKED_JSON), &j), ACCEL_OK);
    memset(&d, 0, sizeof d);
    d.no_split_module_classes = no_split;
    d.n_no_split = 1;
    sizes_str(m, &d, got, sizeof got);
    AT_EQ_STR(got, "=512.375,embed=128,embed.weight=128,h0=128,h0.l1=64,h0.l1.weight=64,h0.l2=64,h0.l2.weight=64,h1=128,"
                   "h1.l1=64,h1.l1.weight=64,h1.l2=64,h1.l2.weight=64,h2=128,h2.l1=64,h2.l1.weight=64,h2.l2=64,"
                   "h2.l2.weight=64,mask=0.375");
    sizes_str(j, &d, got2, sizeof got2);
    AT_EQ_STR(got2, got); /* the JSON form is the same model */
    d.dtype = ACCEL_F16;
    sizes_str(m, &d, got, sizeof got);
    AT_EQ_STR(got, "=256.375,embed=64,embed.weight=64,h0=64,h0.l1=32,h0.l1.weight=32,h0.l2=32,h0.l2.weight=32,h1=64,"
                   "h1.l1=32,h1.l1.weight=32,h1.l2=32,h1.l2.weight=32,h2=64,h2.l1=32,h2.l1.weight=32,h2.l2=32,"
                   "h2.l2.weight=32,mask=0.375");
    d.dtype = ACCEL_DTYPE_INVALID;
    AT_EQ_INT(accel_bm_max_layer_size(m, &d, &big, names, 8, &n), ACCEL_OK);
    AT_CHECK(big == 128);
    AT_EQ_INT(n, 4);
    if (n == 4) { AT_EQ_STR(names[0], "embed"); AT_EQ_STR(names[1], "h0"); AT_EQ_STR(names[3], "h2"); }
    /* device maps (Accelerate: the same with and without clean_result here) */
    d.max_memory = mm;
    d.n_max_memory = parse_mm("0=200,1=200,cpu=400", mm);
    map_str(m, &d, got, sizeof got, ACCEL_OK);
    AT_EQ_STR(got, "embed:1,head:1,h0:cpu,h1:cpu,h2:cpu,mask:cpu");
    map_str(j, &d, got2, sizeof got2, ACCEL_OK);
    AT_EQ_STR(got2, got);
    d.no_clean_result = 1;
    map_str(m, &d, got, sizeof got, ACCEL_OK);
    AT_EQ_STR(got, "embed:1,head:1,h0:cpu,h1:cpu,h2:cpu,mask:cpu");
    d.no_clean_result = 0;
    d.n_max_memory = parse_mm("0=300,cpu=300", mm);
    map_str(m, &d, got, sizeof got, ACCEL_OK);
    AT_EQ_STR(got, "embed:0,head:0,h0:cpu,h1:disk,h2:disk,mask:disk");
    d.n_max_memory = parse_mm("0=150,1=150", mm);
    map_str(m, &d, got, sizeof got, ACCEL_OK);
    AT_EQ_STR(got, "embed:1,head:1,h0:disk,h1:disk,h2:disk,mask:disk");
    /* get_balanced_memory */
    d.n_max_memory = parse_mm("0=1000,1=1000,cpu=1000", mm);
    mem_str(m, &d, got, sizeof got);
    AT_EQ_STR(got, "0=416,1=1000,cpu=1000");
    d.n_max_memory = parse_mm("0=1000,1=1000,2=1000,cpu=1000", mm);
    d.low_zero = 1;
    mem_str(m, &d, got, sizeof got);
    AT_EQ_STR(got, "0=0,1=416,2=1000,cpu=1000");
    d.low_zero = 0;
    /* invalid input: a "disk" key in get_balanced_memory, an unknown key, a bad size */
    {
        accel_bm_memory o[8];
        d.n_max_memory = parse_mm("0=100,disk=10", mm);
        AT_EQ_INT(accel_bm_balanced_memory(m, &d, o, 8, &n), ACCEL_ERR_INVALID_ARGUMENT);
        AT_CONTAINS(accel_last_error(NULL), "disk");
        AT_EQ_INT(accel_bm_parse_max_memory(NULL, "gpu0=10GiB", mm, 8, &n), ACCEL_ERR_INVALID_ARGUMENT);
        AT_CONTAINS(accel_last_error(NULL), "gpu0");
        AT_EQ_INT(accel_bm_parse_max_memory(NULL, "0=10XB", mm, 8, &n), ACCEL_ERR_INVALID_ARGUMENT);
    }
    accel_bm_model_destroy(m);
    accel_bm_model_destroy(j);
}

/* ------------------------------------------------------------------------ properties on random module trees */
static unsigned g_rng = 12345u;
static unsigned rnd(unsigned n) { g_rng = g_rng * 1103515245u + 12345u; return (g_rng >> 8) % n; }
static void random_tree(accel_bm_model *m, const char *prefix, int depth, char (*names)[48], int *nn) {
    int k, nc = depth < 3 ? (int)rnd(depth ? 3 : 4) + (depth ? 0 : 1) : 0, np = (int)rnd(3);
    static const accel_dtype dts[] = {ACCEL_F32, ACCEL_F16, ACCEL_BF16, ACCEL_I64, ACCEL_BOOL};
    for (k = 0; k < np; ++k) {
        accel_tensor t;
        char *nm = names[(*nn)++];
        snprintf(nm, 48, "%s%sp%d", prefix, *prefix ? "." : "", k);
        t = tens(nm, dts[rnd(5)], (int64_t)rnd(9), 0);
        AT_EQ_INT(accel_bm_model_add_tensor(m, &t, 0), ACCEL_OK);
    }
    for (k = 0; k < nc; ++k) {
        char child[48];
        static const char *cls[] = {"Block", "Linear", "Seq"};
        snprintf(child, sizeof child, "%s%sc%d", prefix, *prefix ? "." : "", k);
        AT_EQ_INT(accel_bm_model_add_module(m, child, cls[rnd(3)]), ACCEL_OK);
        random_tree(m, child, depth + 1, names, nn);
    }
}
static int covered_by(const char *tensor, const char *prefix) {
    size_t n = strlen(prefix);
    return n == 0 || (!strncmp(tensor, prefix, n) && (tensor[n] == 0 || tensor[n] == '.'));
}
static void test_random_properties(void) {
    int c, bad = 0, cases = 0;
    for (c = 0; c < 300; ++c) {
        accel_bm_model *m = NULL;
        accel_bm_map_desc d;
        accel_bm_memory mm[4];
        accel_bm_placement p[256];
        static char names[256][48];
        static const char *no_split[] = {"Block"};
        int nn = 0, np = 0, i, k;
        AT_EQ_INT(accel_bm_model_create(NULL, NULL, &m), ACCEL_OK);
        random_tree(m, "", 0, names, &nn);
        memset(&d, 0, sizeof d);
        mm[0].device = 0; mm[0].bytes = rnd(300);
        mm[1].device = 1; mm[1].bytes = rnd(300);
        mm[2].device = ACCEL_BM_CPU; mm[2].bytes = rnd(300);
        d.max_memory = mm;
        d.n_max_memory = 3;
        d.no_split_module_classes = no_split;
        d.n_no_split = (int)rnd(2);
        d.no_clean_result = (int)rnd(2);
        d.fallback_allocation = (int)rnd(2);
        if (accel_bm_infer_device_map(m, &d, p, 256, &np) != ACCEL_OK) { accel_bm_model_destroy(m); continue; }
        ++cases;
        for (i = 0; i < nn; ++i) { /* every tensor under exactly one entry */
            int hits = 0;
            for (k = 0; k < np; ++k) hits += covered_by(names[i], p[k].name);
            if (hits != 1) { ++bad; fprintf(stderr, "case %d: %s covered %d times\n", c, names[i], hits); }
        }
        accel_bm_model_destroy(m);
    }
    AT_EQ_INT(bad, 0);
    AT_CHECK(cases > 100);
}

/* --------------------------------------------------------------------------------------------- dispatch */
static float g_src[7][32];
static const char *g_src_names[7] = {"embed.weight", "h0.l1.weight", "h0.l2.weight", "h1.l1.weight", "h1.l2.weight",
                                     "h2.l1.weight", "h2.l2.weight"};
static unsigned char g_mask[3] = {1, 0, 1};
static void write_worked_checkpoint(const char *dir, const char *max_shard) {
    accel_tensor t[8];
    int i;
    for (i = 0; i < 7; ++i) {
        int k;
        t[i] = tens(g_src_names[i], ACCEL_F32, i ? 16 : 32, 0);
        for (k = 0; k < 32; ++k) g_src[i][k] = (float)(i * 100 + k) / 7.0f;
        t[i].ptr = g_src[i];
    }
    t[7] = tens("mask", ACCEL_BOOL, 3, 0);
    t[7].ptr = g_mask;
    AT_EQ_INT(accel_st_save_model(NULL, dir, t, 8, max_shard), ACCEL_OK);
}
static void check_tensor(accel_bm_dispatch *x, const char *name, int want_dev, accel_dtype want_dt, const void *src,
                         accel_dtype src_dt, size_t numel) {
    accel_tensor t;
    int dev = -99;
    size_t i;
    at_context = name;
    AT_EQ_INT(accel_bm_dispatch_tensor(x, name, &t, &dev), ACCEL_OK);
    AT_EQ_INT(dev, want_dev);
    AT_EQ_INT(t.dtype, want_dt);
    AT_CHECK(t.ptr != NULL);
    if (!t.ptr) return;
    for (i = 0; i < numel; ++i) {
        if (src_dt == ACCEL_BOOL) { AT_EQ_INT(((const unsigned char *)t.ptr)[i], ((const unsigned char *)src)[i]); continue; }
        {
            float s = ((const float *)src)[i];
            if (want_dt == ACCEL_F32) AT_CHECK(((const float *)t.ptr)[i] == s);
            else if (want_dt == ACCEL_BF16) AT_EQ_INT(((const uint16_t *)t.ptr)[i], accel_f32_to_bf16(s));
            else if (want_dt == ACCEL_F16) AT_EQ_INT(((const uint16_t *)t.ptr)[i], accel_f32_to_f16(s));
        }
    }
    at_context = "";
}
/* The worked model without modules' classes of interest and without the tie: one tensor may get another shape. */
static accel_bm_model *plain_model(accel *acc, int bad, int with_mask) {
    static const char *mods[] = {"embed", "h0", "h0.l1", "h0.l2", "h1", "h1.l1", "h1.l2", "h2", "h2.l1", "h2.l2"};
    accel_bm_model *m = NULL;
    accel_tensor t;
    int i;
    AT_EQ_INT(accel_bm_model_create(acc, NULL, &m), ACCEL_OK);
    for (i = 0; i < 10; ++i) AT_EQ_INT(accel_bm_model_add_module(m, mods[i], "Linear"), ACCEL_OK);
    for (i = 0; i < 7; ++i) {
        t = tens(g_src_names[i], ACCEL_F32, i ? 16 : 32, 0);
        if (i == bad) t = tens(g_src_names[i], ACCEL_F32, 4, 4);
        AT_EQ_INT(accel_bm_model_add_tensor(m, &t, 0), ACCEL_OK);
    }
    t = tens("mask", ACCEL_BOOL, 3, 0);
    if (with_mask) AT_EQ_INT(accel_bm_model_add_tensor(m, &t, 1), ACCEL_OK);
    return m;
}
static void test_dispatch(void) {
    char dir[400], off[400];
    accel acc;
    counter cnt = {0, 0, 0, 0, 0, 0, 0};
    accel_bm_model *m;
    accel_bm_dispatch *x = NULL;
    accel_bm_dispatch_desc dd;
    accel_bm_placement map[6];
    snprintf(dir, sizeof dir, "%s/ck", g_root);
    write_worked_checkpoint(dir, "100"); /* several shards + model.safetensors.index.json */
    long base;
    init_counting(&acc, &cnt);
    base = cnt.live;
    m = worked_model(&acc);
    map[0].name = "embed"; map[0].device = ACCEL_BM_CPU;
    map[1].name = "head"; map[1].device = ACCEL_BM_CPU;
    map[2].name = "h0"; map[2].device = 0; /* no GPU: device memory is host memory here */
    map[3].name = "h1"; map[3].device = ACCEL_BM_DISK;
    map[4].name = "h2.l1"; map[4].device = ACCEL_BM_CPU;
    map[5].name = "h2.l2"; map[5].device = ACCEL_BM_DISK;
    memset(&dd, 0, sizeof dd);
    dd.checkpoint = dir;
    dd.device_map = map;
    dd.n_device_map = 6;
    /* "mask" has no device: Accelerate's error */
    AT_EQ_INT(accel_bm_dispatch_create(m, &dd, &x), ACCEL_ERR_INVALID_ARGUMENT);
    AT_CONTAINS(accel_last_error(&acc), "mask doesn't have any device set.");
    AT_CHECK(x == NULL);
    {
        accel_bm_placement map2[7];
        memcpy(map2, map, sizeof map);
        map2[6].name = "mask"; map2[6].device = ACCEL_BM_CPU;
        dd.device_map = map2;
        dd.n_device_map = 7;
        AT_EQ_INT(accel_bm_dispatch_create(m, &dd, &x), ACCEL_OK);
        check_tensor(x, "embed.weight", ACCEL_BM_CPU, ACCEL_F32, g_src[0], ACCEL_F32, 32);
        check_tensor(x, "head.weight", ACCEL_BM_CPU, ACCEL_F32, g_src[0], ACCEL_F32, 32);
        {
            accel_tensor a, b;
            AT_EQ_INT(accel_bm_dispatch_tensor(x, "embed.weight", &a, NULL), ACCEL_OK);
            AT_EQ_INT(accel_bm_dispatch_tensor(x, "head.weight", &b, NULL), ACCEL_OK);
            AT_CHECK(a.ptr == b.ptr); /* tied: one storage */
            AT_EQ_STR(b.name, "head.weight");
        }
        check_tensor(x, "h0.l1.weight", 0, ACCEL_F32, g_src[1], ACCEL_F32, 16);
        check_tensor(x, "h0.l2.weight", 0, ACCEL_F32, g_src[2], ACCEL_F32, 16);
        check_tensor(x, "h1.l1.weight", ACCEL_BM_DISK, ACCEL_F32, g_src[3], ACCEL_F32, 16);
        check_tensor(x, "h1.l2.weight", ACCEL_BM_DISK, ACCEL_F32, g_src[4], ACCEL_F32, 16);
        check_tensor(x, "h2.l1.weight", ACCEL_BM_CPU, ACCEL_F32, g_src[5], ACCEL_F32, 16);
        check_tensor(x, "h2.l2.weight", ACCEL_BM_DISK, ACCEL_F32, g_src[6], ACCEL_F32, 16);
        check_tensor(x, "mask", ACCEL_BM_CPU, ACCEL_BOOL, g_mask, ACCEL_BOOL, 3);
        AT_EQ_INT(accel_bm_dispatch_tensor(x, "nope", NULL, NULL), ACCEL_ERR_NOT_FOUND);
        accel_bm_dispatch_destroy(x);
        x = NULL;
        /* dtype conversion on load: floating tensors in bf16 (disk ones stay in their stored dtype), bool kept */
        dd.dtype = ACCEL_BF16;
        AT_EQ_INT(accel_bm_dispatch_create(m, &dd, &x), ACCEL_OK);
        check_tensor(x, "embed.weight", ACCEL_BM_CPU, ACCEL_BF16, g_src[0], ACCEL_F32, 32);
        check_tensor(x, "h0.l2.weight", 0, ACCEL_BF16, g_src[2], ACCEL_F32, 16);
        check_tensor(x, "h1.l1.weight", ACCEL_BM_DISK, ACCEL_F32, g_src[3], ACCEL_F32, 16);
        check_tensor(x, "mask", ACCEL_BM_CPU, ACCEL_BOOL, g_mask, ACCEL_BOOL, 3);
        accel_bm_dispatch_destroy(x);
        x = NULL;
        /* an offload folder: the disk tensors written in Accelerate's format and served from it */
        dd.dtype = ACCEL_F16;
        snprintf(off, sizeof off, "%s/offload", g_root);
        dd.offload_folder = off;
        AT_EQ_INT(accel_bm_dispatch_create(m, &dd, &x), ACCEL_OK);
        check_tensor(x, "h1.l2.weight", ACCEL_BM_DISK, ACCEL_F32, g_src[4], ACCEL_F32, 16);
        check_tensor(x, "h2.l2.weight", ACCEL_BM_DISK, ACCEL_F32, g_src[6], ACCEL_F32, 16);
        check_tensor(x, "h2.l1.weight", ACCEL_BM_CPU, ACCEL_F16, g_src[5], ACCEL_F32, 16);
        accel_bm_dispatch_destroy(x);
        x = NULL;
        {
            char p[600];
            struct stat st;
            snprintf(p, sizeof p, "%s/index.json", off);
            AT_CHECK(stat(p, &st) == 0);
            snprintf(p, sizeof p, "%s/h1.l2.weight.dat", off);
            AT_CHECK(stat(p, &st) == 0 && st.st_size == 64);
            snprintf(p, sizeof p, "%s/h0.l1.weight.dat", off);
            AT_CHECK(stat(p, &st) != 0); /* only disk tensors */
        }
        /* the offload folder is itself a checkpoint (index.json + .dat) for the tensors it holds */
        {
            accel_st_file *f = NULL;
            int e;
            AT_EQ_INT(accel_bm_offload_open(&acc, off, &f), ACCEL_OK);
            AT_EQ_INT(accel_st_file_count(f), 3);
            e = accel_st_file_find(f, "h1.l1.weight");
            AT_CHECK(e >= 0);
            if (e >= 0) AT_CHECK(!memcmp(accel_st_file_entry(f, e)->data, g_src[3], 64));
            accel_st_file_destroy(f);
        }
        dd.offload_folder = NULL;
        dd.dtype = ACCEL_DTYPE_INVALID;
        /* errors name the tensor, nothing is kept */
        {
            accel_tensor t = tens("extra.w", ACCEL_F32, 4, 0);
            accel_bm_model *m2 = worked_model(&acc);
            accel_bm_placement map3[8];
            memcpy(map3, map2, sizeof map2);
            map3[7].name = "extra"; map3[7].device = ACCEL_BM_CPU;
            AT_EQ_INT(accel_bm_model_add_module(m2, "extra", "Linear"), ACCEL_OK);
            AT_EQ_INT(accel_bm_model_add_tensor(m2, &t, 0), ACCEL_OK);
            dd.device_map = map3;
            dd.n_device_map = 8;
            x = (accel_bm_dispatch *)&dd;
            AT_EQ_INT(accel_bm_dispatch_create(m2, &dd, &x), ACCEL_ERR_NOT_FOUND);
            AT_CONTAINS(accel_last_error(&acc), "\"extra.w\" is not in the checkpoint");
            AT_CHECK(x == NULL);
            accel_bm_model_destroy(m2);
            dd.device_map = map2;
            dd.n_device_map = 7;
        }
        {   /* a shape differs: Accelerate's message */
            accel_bm_model *m3 = plain_model(&acc, 4, 1);
            dd.device_map = map2 + 6; /* "" would be simpler; mask alone does not cover the rest */
            dd.n_device_map = 1;
            AT_EQ_INT(accel_bm_dispatch_create(m3, &dd, &x), ACCEL_ERR_INVALID_ARGUMENT);
            AT_CONTAINS(accel_last_error(&acc), "doesn't have any device set");
            {
                accel_bm_placement all;
                all.name = "";
                all.device = ACCEL_BM_CPU;
                dd.device_map = &all;
                AT_EQ_INT(accel_bm_dispatch_create(m3, &dd, &x), ACCEL_ERR_INVALID_ARGUMENT);
                AT_CONTAINS(accel_last_error(&acc), "Trying to set a tensor of shape [16] in \"h1.l2.weight\" (which has shape [4, 4])");
                AT_CHECK(x == NULL);
                /* a checkpoint tensor the model lacks: an error, or skipped with ignore_unexpected */
                accel_bm_model_destroy(m3);
                m3 = NULL;
                m3 = plain_model(&acc, -1, 0);
                AT_EQ_INT(accel_bm_dispatch_create(m3, &dd, &x), ACCEL_ERR_INVALID_ARGUMENT);
                AT_CONTAINS(accel_last_error(&acc), "\"mask\" is not in the model");
                dd.ignore_unexpected = 1;
                AT_EQ_INT(accel_bm_dispatch_create(m3, &dd, &x), ACCEL_OK);
                check_tensor(x, "h2.l2.weight", ACCEL_BM_CPU, ACCEL_F32, g_src[6], ACCEL_F32, 16);
                accel_bm_dispatch_destroy(x);
                x = NULL;
                dd.ignore_unexpected = 0;
                /* a device map key that is not in the model */
                all.name = "h9";
                AT_EQ_INT(accel_bm_dispatch_create(m3, &dd, &x), ACCEL_ERR_INVALID_ARGUMENT);
                AT_CONTAINS(accel_last_error(&acc), "\"h9\" matches no module or tensor");
            }
            accel_bm_model_destroy(m3);
        }
    }
    accel_bm_model_destroy(m);
    AT_EQ_INT(cnt.live, base); /* every block returned, the failed dispatches' included */
    AT_CHECK(cnt.allocs > 0);
    accel_shutdown(&acc);
}

/* ---------------------------------------------------------------- end to end: layer by layer with offload */
#define E_H 48
#define E_L 6
static float e_w[E_L][E_H * E_H], e_b[E_L][E_H];
static void layer_fwd(const float *w, const float *b, const float *x, float *y) {
    int i, k;
    for (i = 0; i < E_H; ++i) {
        float s = b[i];
        for (k = 0; k < E_H; ++k) s += w[i * E_H + k] * x[k];
        y[i] = s > 0 ? s : 0.01f * s;
    }
}
static void test_layer_by_layer(void) {
    char dir[400], names[E_L * 2][32], lname[E_L][16];
    const char *layers[E_L];
    accel_tensor t[E_L * 2];
    accel_bm_model *m = NULL;
    accel_bm_map_desc d;
    accel_bm_memory mm[2];
    accel_bm_placement p[32];
    accel_bm_dispatch_desc dd;
    accel_bm_dispatch *x = NULL;
    float ref[E_H], x0[E_H], a[E_H], b[E_H];
    int i, k, np = 0, ndisk = 0, pass;
    unsigned s = 7;
    for (i = 0; i < E_L; ++i) {
        for (k = 0; k < E_H * E_H; ++k) { s = s * 1664525u + 1013904223u; e_w[i][k] = ((float)(s >> 9) / 8388608.0f - 0.5f) * 0.3f; }
        for (k = 0; k < E_H; ++k) { s = s * 1664525u + 1013904223u; e_b[i][k] = ((float)(s >> 9) / 8388608.0f - 0.5f) * 0.1f; }
    }
    for (k = 0; k < E_H; ++k) x0[k] = (float)k / E_H - 0.5f;
    /* all in memory */
    memcpy(a, x0, sizeof a);
    for (i = 0; i < E_L; ++i) { layer_fwd(e_w[i], e_b[i], a, b); memcpy(a, b, sizeof a); }
    memcpy(ref, a, sizeof ref);
    /* the checkpoint and the model */
    AT_EQ_INT(accel_bm_model_create(NULL, NULL, &m), ACCEL_OK);
    AT_EQ_INT(accel_bm_model_add_module(m, "layers", "ModuleList"), ACCEL_OK);
    for (i = 0; i < E_L; ++i) {
        snprintf(lname[i], sizeof lname[i], "layers.%d", i);
        layers[i] = lname[i];
        AT_EQ_INT(accel_bm_model_add_module(m, lname[i], "Linear"), ACCEL_OK);
        snprintf(names[2 * i], 32, "layers.%d.weight", i);
        snprintf(names[2 * i + 1], 32, "layers.%d.bias", i);
        t[2 * i] = tens(names[2 * i], ACCEL_F32, E_H, E_H);
        t[2 * i].ptr = e_w[i];
        t[2 * i + 1] = tens(names[2 * i + 1], ACCEL_F32, E_H, 0);
        t[2 * i + 1].ptr = e_b[i];
        AT_EQ_INT(accel_bm_model_add_tensor(m, &t[2 * i], 0), ACCEL_OK);
        AT_EQ_INT(accel_bm_model_add_tensor(m, &t[2 * i + 1], 0), ACCEL_OK);
    }
    snprintf(dir, sizeof dir, "%s/e2e", g_root);
    AT_EQ_INT(accel_st_save_model(NULL, dir, t, E_L * 2, "20KB"), ACCEL_OK);
    /* a budget of 2.5 layers: infer_auto_device_map puts the rest on disk */
    memset(&d, 0, sizeof d);
    mm[0].device = ACCEL_BM_CPU;
    mm[0].bytes = 2.5 * (E_H * E_H + E_H) * 4;
    d.max_memory = mm;
    d.n_max_memory = 1;
    AT_EQ_INT(accel_bm_infer_device_map(m, &d, p, 32, &np), ACCEL_OK);
    for (i = 0; i < np; ++i) ndisk += p[i].device == ACCEL_BM_DISK;
    AT_CHECK(ndisk >= 3); /* the weights exceed the budget */
    memset(&dd, 0, sizeof dd);
    dd.checkpoint = dir;
    dd.device_map = p;
    dd.n_device_map = np;
    AT_EQ_INT(accel_bm_dispatch_create(m, &dd, &x), ACCEL_OK);
    for (pass = 0; pass < 3; ++pass) { /* prefetch, no prefetch, prefetch reused twice */
        accel_bm_fetch *f = NULL;
        accel_bm_fetch_desc fd;
        int rep;
        memset(&fd, 0, sizeof fd);
        fd.layers = layers;
        fd.n_layers = E_L;
        fd.device = ACCEL_BM_CPU;
        fd.no_prefetch = pass == 1;
        AT_EQ_INT(accel_bm_fetch_create(x, &fd, &f), ACCEL_OK);
        for (rep = 0; rep < (pass == 2 ? 2 : 1); ++rep) {
            memcpy(a, x0, sizeof a);
            for (i = 0; i < E_L; ++i) {
                const accel_tensor *lt = NULL;
                int n = 0;
                AT_EQ_INT(accel_bm_fetch_begin(f, i, &lt, &n), ACCEL_OK);
                AT_EQ_INT(n, 2);
                if (n != 2 || !lt) break;
                AT_EQ_STR(lt[0].name, names[2 * i]);
                AT_EQ_STR(lt[1].name, names[2 * i + 1]);
                if (i + 2 < E_L) { /* layer i holds its buffer: layer i+2 (the same buffer) waits for fetch_end(i) */
                    const accel_tensor *l2;
                    int n2;
                    AT_EQ_INT(accel_bm_fetch_begin(f, i + 2, &l2, &n2), ACCEL_ERR_STATE);
                }
                layer_fwd((const float *)lt[0].ptr, (const float *)lt[1].ptr, a, b);
                memcpy(a, b, sizeof a);
                AT_EQ_INT(accel_bm_fetch_end(f, i), ACCEL_OK);
            }
            AT_CHECK(!memcmp(a, ref, sizeof ref)); /* bit-identical to the all-in-memory run */
        }
        accel_bm_fetch_destroy(f);
    }
    accel_bm_dispatch_destroy(x);
    accel_bm_model_destroy(m);
}

/* --------------------------------------------------------------------- every allocation failing in turn */
/* model_open_memory → infer_device_map → dispatch_create (with an offload folder) → fetch → destroy, with the k-th
   allocation failing for every k up to the last: each call returns ACCEL_OK or ACCEL_ERR_OUT_OF_MEMORY, and every
   block goes back (nothing half-built is kept). */
static int oom_cycle(accel *acc, const char *ck, const char *off) {
    accel_bm_model *m = NULL;
    accel_bm_map_desc d;
    accel_bm_memory mm[2];
    accel_bm_placement p[32];
    accel_bm_dispatch_desc dd;
    accel_bm_dispatch *x = NULL;
    accel_bm_fetch *f = NULL;
    accel_bm_fetch_desc fd;
    static const char *layers[] = {"embed", "h0", "h1", "h2"};
    int n = 0, i, bad = 0;
    accel_result r = accel_bm_model_open_memory(acc, WORKED_JSON, strlen(WORKED_JSON), &m);
    if (r != ACCEL_OK) return r == ACCEL_ERR_OUT_OF_MEMORY ? 2 : 1;
    memset(&d, 0, sizeof d);
    mm[0].device = ACCEL_BM_CPU; mm[0].bytes = 300;
    d.max_memory = mm;
    d.n_max_memory = 1;
    r = accel_bm_infer_device_map(m, &d, p, 32, &n);
    if (r == ACCEL_OK) {
        memset(&dd, 0, sizeof dd);
        dd.checkpoint = ck;
        dd.device_map = p;
        dd.n_device_map = n;
        dd.offload_folder = off;
        dd.dtype = ACCEL_BF16;
        r = accel_bm_dispatch_create(m, &dd, &x);
    }
    if (r == ACCEL_OK) {
        memset(&fd, 0, sizeof fd);
        fd.layers = layers;
        fd.n_layers = 4;
        fd.device = ACCEL_BM_CPU;
        r = accel_bm_fetch_create(x, &fd, &f);
        for (i = 0; i < 4 && r == ACCEL_OK; ++i) {
            const accel_tensor *t;
            int nt;
            r = accel_bm_fetch_begin(f, i, &t, &nt);
            if (r == ACCEL_OK) r = accel_bm_fetch_end(f, i);
        }
    }
    if (r != ACCEL_OK && r != ACCEL_ERR_OUT_OF_MEMORY) {
        fprintf(stderr, "oom cycle: %d %s\n", (int)r, accel_last_error(acc));
        bad = 1;
    }
    if (r == ACCEL_OK && x == NULL) bad = 1;
    if (r == ACCEL_ERR_OUT_OF_MEMORY) bad = 2;
    accel_bm_fetch_destroy(f);
    accel_bm_dispatch_destroy(x);
    accel_bm_model_destroy(m);
    return bad;
}
static void test_oom(void) {
    char ck[400], off[400];
    accel acc;
    counter cnt = {0, 0, 0, 0, 0, 0, 0};
    long base, total, k;
    int i, bad = 0, leaks = 0, ooms = 0;
    snprintf(ck, sizeof ck, "%s/ck_oom", g_root);
    write_worked_checkpoint(ck, "100");
    init_counting(&acc, &cnt);
    base = cnt.live;
    cnt.calls = 0;
    snprintf(off, sizeof off, "%s/off_oom", g_root);
    AT_EQ_INT(oom_cycle(&acc, ck, off), 0); /* a clean run counts the allocations */
    total = cnt.calls;
    AT_EQ_INT(cnt.live, base);
    for (k = 1; k <= total; ++k) {
        cnt.calls = 0;
        cnt.fail_at = k;
        i = oom_cycle(&acc, ck, off);
        ooms += i == 2;
        bad += i == 1;
        if (cnt.live != base) { ++leaks; cnt.live = base; }
    }
    cnt.fail_at = 0;
    AT_EQ_INT(bad, 0);
    AT_EQ_INT(leaks, 0);
    AT_CHECK(total > 20);
    AT_CHECK(ooms >= total / 2); /* the failures were seen (a cycle that no longer reaches an allocation succeeds) */
    accel_shutdown(&acc);
}

/* ------------------------------------------------------------------- a FIFO where the offload folder has a file */
/* A FIFO as <name>.dat, as a safetensors_file or as index.json is refused as not a regular file, at once (opened
   blocking it would wait forever for a writer). Each open runs in a child bounded by 10 s; its exit status is 0 when
   the result is what `expect` says (NULL: ACCEL_OK; otherwise ACCEL_ERR_IO, a message with expect in it). */
typedef struct { const char *dir, *expect; } fifo_case;
static int offload_open_child(void *arg) {
    const fifo_case *c = (const fifo_case *)arg;
    accel acc;
    counter cnt;
    accel_st_file *f = NULL;
    accel_result r;
    memset(&cnt, 0, sizeof cnt);
    if (at_init_counting(&acc, &cnt, quiet) != ACCEL_OK) return 2;
    r = accel_bm_offload_open(&acc, c->dir, &f);
    if (c->expect ? r == ACCEL_ERR_IO && !f && strstr(accel_last_error(&acc), c->expect) &&
                        strstr(accel_last_error(&acc), "is not a regular file")
                  : r == ACCEL_OK && f && accel_st_file_count(f) == 1)
        return 0;
    fprintf(stderr, "offload folder %s: result %d: %s\n", c->dir, (int)r, accel_last_error(&acc));
    return 1;
}
static void test_offload_fifo(void) {
    char dir[400], p[600], idx[1200];
    const float x[2] = {1, 2};
    fifo_case c;
    int k;
    for (k = 0; k < 4; ++k) {
        snprintf(dir, sizeof dir, "%s/fifo%d", g_root, k);
        AT_CHECK(mkdir(dir, 0755) == 0);
        c.dir = dir;
        c.expect = NULL;
        snprintf(p, sizeof p, "%s/index.json", dir);
        if (k == 0 || k == 1) { /* a.dat: a regular file (the control) or a FIFO */
            snprintf(idx, sizeof idx, "{\"a\": {\"dtype\": \"float32\", \"shape\": [2]}}");
            at_write_file(p, idx, strlen(idx));
            snprintf(p, sizeof p, "%s/a.dat", dir);
            if (k == 0) at_write_file(p, x, sizeof x);
            else AT_CHECK(mkfifo(p, 0600) == 0);
            c.expect = k == 0 ? NULL : "a.dat";
        } else if (k == 2) { /* the safetensors_file of an entry */
            snprintf(idx, sizeof idx, "{\"c\": {\"safetensors_file\": \"%s/w.safetensors\", \"weight_name\": \"w\", "
                     "\"dtype\": \"float32\"}}", dir);
            at_write_file(p, idx, strlen(idx));
            snprintf(p, sizeof p, "%s/w.safetensors", dir);
            AT_CHECK(mkfifo(p, 0600) == 0);
            c.expect = "w.safetensors";
        } else { /* index.json itself */
            AT_CHECK(mkfifo(p, 0600) == 0);
            c.expect = "index.json";
        }
        AT_EQ_INT(at_bounded(offload_open_child, &c, 10), 0);
    }
}

int main(void) {
    char tmpl[] = "/tmp/accel_bigmodel_XXXXXX";
    char cmd[300];
    if (!mkdtemp(tmpl)) { perror("mkdtemp"); return 1; }
    snprintf(g_root, sizeof g_root, "%s", tmpl);
    accel_set_default_logger(quiet, NULL);
    test_worked();
    test_random_properties();
    test_dispatch();
    test_layer_by_layer();
    test_oom();
    test_offload_fifo();
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_root);
    if (system(cmd) != 0) fprintf(stderr, "rm failed\n");
    return at_finish("bigmodel-unit");
}
