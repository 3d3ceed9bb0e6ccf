/* The core's sizes and batch-size search (accel.h "sizes", "find_executable_batch_size"; docs/semantics.md policy
   6): the size parser against hand-computed values and every malformed form; PyTorch's dtype names; the batch-size
   sequence of Accelerate 1.15 (int(bs * 0.9)), its error at zero, and every block of an attempt returned. */
#include "accel.h"
#include "accel_test.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void quiet(void *u, accel_log_level l, const char *m) { (void)u; (void)l; (void)m; }

static void init_counting(accel *acc, at_counter *c) { AT_EQ_INT(at_init_counting(acc, c, quiet), ACCEL_OK); }

/* ------------------------------------------------------------------------------------------- sizes */
static void test_sizes(void) {
    static const struct { const char *s; unsigned long long v; } ok[] = {
        {"0", 0}, {"1000", 1000}, {"  42 \n", 42}, {"10GB", 10000000000ull}, {"10 GB", 10000000000ull},
        {"10gb", 10000000000ull}, {"1.5GB", 1500000000ull}, {"3.999999KB", 3999}, {"7kb", 7000}, {"7kB", 7000},
        {"5MiB", 5242880}, {"1GiB", 1073741824ull}, {"1gib", 1073741824ull}, {"2TiB", 2199023255552ull},
        {"1TB", 1000000000000ull}, {".5GB", 500000000}, {"5.GB", 5000000000ull}, {"0.1KiB", 102},
        {"1.9999999999999999999999KiB", 2047}, {"18446744073709551615", 18446744073709551615ull},
        {"0.000000000001TB", 1}, {"1  MB", 1000000}};
    static const char *bad[] = {"5B", "GB", "-5MB", "", "   ", "1e3MB", "1.5", "0x10", "inf", "nanGB", "+5MB",
                                "5 M B", "5MBs", "1,5GB", "18446744073709551616", "20000000TB", "5KiBB", "..5GB", "5..GB"};
    size_t i;
    for (i = 0; i < sizeof ok / sizeof ok[0]; ++i) {
        uint64_t v = 12345;
        at_context = ok[i].s;
        AT_EQ_INT(accel_parse_size(NULL, ok[i].s, &v), ACCEL_OK);
        AT_CHECK(v == ok[i].v);
    }
    for (i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
        uint64_t v = 777;
        at_context = bad[i];
        AT_EQ_INT(accel_parse_size(NULL, bad[i], &v), ACCEL_ERR_INVALID_ARGUMENT);
        AT_EQ_INT(v, 777);
        AT_CONTAINS(accel_last_error(NULL), "size");
    }
    at_context = "";
}

/* ------------------------------------------------------------------------------------ PyTorch's dtype names */
static void test_dtype_from_torch(void) {
    /* torch's dtype names and aliases (str(torch.float16) == "torch.float16", torch.half is torch.float16, ...) */
    static const struct { const char *name; accel_dtype dt; } ok[] = {
        {"torch.float32", ACCEL_F32}, {"float", ACCEL_F32}, {"torch.float64", ACCEL_F64}, {"double", ACCEL_F64},
        {"torch.float16", ACCEL_F16}, {"half", ACCEL_F16}, {"torch.bfloat16", ACCEL_BF16}, {"long", ACCEL_I64},
        {"torch.int32", ACCEL_I32}, {"int", ACCEL_I32}, {"short", ACCEL_I16}, {"torch.int8", ACCEL_I8},
        {"torch.uint8", ACCEL_U8}, {"torch.bool", ACCEL_BOOL}, {"torch.float8_e4m3fn", ACCEL_F8_E4M3},
        {"float8_e5m2", ACCEL_F8_E5M2}, {"F16", ACCEL_F16}, {"BF16", ACCEL_BF16}};
    static const char *bad[] = {"", "torch.", "Float32", "torch.complex64", "fp16", "torch.float8_e4m3fnuz"};
    size_t i;
    for (i = 0; i < sizeof ok / sizeof ok[0]; ++i) {
        at_context = ok[i].name;
        AT_EQ_INT(accel_dtype_from_torch(ok[i].name), ok[i].dt);
    }
    for (i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
        at_context = bad[i];
        AT_EQ_INT(accel_dtype_from_torch(bad[i]), ACCEL_DTYPE_INVALID);
    }
    at_context = "";
    AT_EQ_INT(accel_dtype_from_torch(NULL), ACCEL_DTYPE_INVALID);
}

/* ------------------------------------------------------------------------------- find_executable_batch_size */
static int64_t g_seen[64];
static int g_nseen;
static accel_result step_oom_above_50(void *user, int64_t bs, accel_attempt *a) {
    (void)user;
    if (g_nseen < 64) g_seen[g_nseen++] = bs;
    if (!accel_attempt_host_alloc(a, 1000)) return ACCEL_ERR_OUT_OF_MEMORY;
    return bs > 50 ? ACCEL_ERR_OUT_OF_MEMORY : ACCEL_OK;
}
static accel_result step_always_oom(void *user, int64_t bs, accel_attempt *a) {
    (void)user;
    if (g_nseen < 64) g_seen[g_nseen++] = bs;
    (void)accel_attempt_host_alloc(a, 64);
    return ACCEL_ERR_OUT_OF_MEMORY;
}
static accel_result step_other_error(void *user, int64_t bs, accel_attempt *a) {
    (void)user; (void)bs; (void)a;
    return ACCEL_ERR_FORMAT;
}
static void test_batch_size(void) {
    /* Accelerate 1.15: [128, 115, 103, 92, 82, 73, 65, 58, 52, 46] → 46; from 3: [3, 2, 1] then its error */
    static const int64_t want[] = {128, 115, 103, 92, 82, 73, 65, 58, 52, 46};
    accel acc;
    at_counter cnt;
    int64_t bs = 0;
    int i;
    long base;
    memset(&cnt, 0, sizeof cnt);
    init_counting(&acc, &cnt);
    base = cnt.live;
    g_nseen = 0;
    AT_EQ_INT(accel_find_executable_batch_size(&acc, NULL, step_oom_above_50, NULL, &bs), ACCEL_OK);
    AT_EQ_INT(bs, 46);
    AT_EQ_INT(g_nseen, 10);
    for (i = 0; i < 10 && i < g_nseen; ++i) AT_EQ_INT(g_seen[i], want[i]);
    AT_EQ_INT(cnt.live, base);
    {
        accel_batch_size_desc bd;
        memset(&bd, 0, sizeof bd);
        bd.starting_batch_size = 3;
        g_nseen = 0;
        AT_EQ_INT(accel_find_executable_batch_size(&acc, &bd, step_always_oom, NULL, &bs), ACCEL_ERR_OUT_OF_MEMORY);
        AT_CONTAINS(accel_last_error(&acc), "No executable batch size found, reached zero.");
        AT_EQ_INT(g_nseen, 3);
        if (g_nseen == 3) { AT_EQ_INT(g_seen[0], 3); AT_EQ_INT(g_seen[1], 2); AT_EQ_INT(g_seen[2], 1); }
        AT_EQ_INT(cnt.live, base);
        AT_EQ_INT(accel_find_executable_batch_size(&acc, &bd, step_other_error, NULL, &bs), ACCEL_ERR_FORMAT);
    }
    accel_shutdown(&acc);
}

int main(void) {
    accel_set_default_logger(quiet, NULL);
    test_sizes();
    test_dtype_from_torch();
    test_batch_size();
    return at_finish("core-sizes");
}
