/* libFuzzer target: size strings (accel_ckpt_parse_size: "10GB", "1.5 GiB", "123") and max-memory strings
   (accel_ckpt_parse_max_memory: "0=10GiB,cpu=30GiB,disk=1TB"), the first line of the input and the rest. Invariants:
   a plain decimal integer parses to strtoull's value; the count query and the fill agree; entries come in
   Accelerate's order (GPUs ascending, then mps, cpu, disk), each device once, no negative size; a failure writes
   nothing. */
#define ACCEL_IMPLEMENTATION
#include "accel.h"
#include "accel_ckpt.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void quiet(void *u, accel_log_level l, const char *m) { (void)u; (void)l; (void)m; }
static int rank_of(int d) { return d >= 0 ? d : d == ACCEL_CKPT_MPS ? 1 << 20 : d == ACCEL_CKPT_CPU ? (1 << 20) + 1 : (1 << 20) + 2; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char a[256], *b;
    size_t na = 0, i;
    uint64_t v = 12345;
    accel_ckpt_memory mem[64];
    int n = -1, n2 = -1;
    accel_set_default_logger(quiet, NULL);
    while (na < size && na < sizeof a - 1 && data[na] != '\n') { a[na] = (char)data[na]; ++na; }
    a[na] = 0;
    if (accel_ckpt_parse_size(NULL, a, &v) == ACCEL_OK) {
        int digits = na > 0 && na <= 19;
        for (i = 0; i < na; ++i) digits &= a[i] >= '0' && a[i] <= '9';
        if (digits && strlen(a) == na && v != strtoull(a, NULL, 10)) __builtin_trap();
    } else if (v != 12345) {
        __builtin_trap(); /* a failure wrote the output */
    }
    b = (char *)malloc(size + 1);
    if (!b) return 0;
    if (size > na) memcpy(b, data + na, size - na);
    b[size > na ? size - na : 0] = 0;
    if (accel_ckpt_parse_max_memory(NULL, b, NULL, 0, &n) == ACCEL_OK) {
        if (n < 0) __builtin_trap();
        if (n <= 64) {
            for (i = 0; i < 64; ++i) { mem[i].device = 99999; mem[i].bytes = -7; }
            if (accel_ckpt_parse_max_memory(NULL, b, mem, 64, &n2) != ACCEL_OK || n2 != n) __builtin_trap();
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
