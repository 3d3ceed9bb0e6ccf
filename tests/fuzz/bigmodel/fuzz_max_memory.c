/* libFuzzer target: max-memory strings (accel_bm_parse_max_memory: "0=10GiB,cpu=30GiB,disk=1TB"), the whole input.
   Invariants: the count query and the fill agree; entries come in Accelerate's order (GPUs ascending, then mps, cpu,
   disk), each device once, no negative size; nothing is written past the count. (The size strings inside are
   accel.h's accel_parse_size: tests/fuzz/core/fuzz_sizes.c.) */
#define ACCEL_IMPLEMENTATION
#include "accel.h"
#include "accel_bigmodel.h"
#include <stdlib.h>
#include <string.h>

static void quiet(void *u, accel_log_level l, const char *m) { (void)u; (void)l; (void)m; }
static int rank_of(int d) {
    return d >= 0 ? d : d == ACCEL_BM_MPS ? 1 << 20 : d == ACCEL_BM_CPU ? (1 << 20) + 1 : (1 << 20) + 2;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *b;
    size_t i;
    accel_bm_memory mem[64];
    int n = -1, n2 = -1;
    accel_set_default_logger(quiet, NULL);
    b = (char *)malloc(size + 1);
    if (!b) return 0;
    if (size) memcpy(b, data, size);
    b[size] = 0;
    if (accel_bm_parse_max_memory(NULL, b, NULL, 0, &n) == ACCEL_OK) {
        if (n < 0) __builtin_trap();
        if (n <= 64) {
            for (i = 0; i < 64; ++i) { mem[i].device = 99999; mem[i].bytes = -7; }
            if (accel_bm_parse_max_memory(NULL, b, mem, 64, &n2) != ACCEL_OK || n2 != n) __builtin_trap();
            for (i = 0; i < (size_t)n; ++i) {
                if (!(mem[i].bytes >= 0)) __builtin_trap();
                if (i > 0 && rank_of(mem[i - 1].device) >= rank_of(mem[i].device)) __builtin_trap(); /* order, once */
            }
            for (; i < 64; ++i)
                if (mem[i].device != 99999) __builtin_trap(); /* nothing past n */
        }
    }
    free(b);
    return 0;
}
