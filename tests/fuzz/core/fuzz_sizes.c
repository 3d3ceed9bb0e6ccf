/* libFuzzer target: size strings (accel_parse_size: "10GB", "1.5 GiB", "123"), the input up to its first newline.
   Invariants: a plain decimal integer parses to strtoull's value; a failure writes nothing. (Max-memory strings,
   which are built of these, are accel_bigmodel.h's: tests/fuzz/bigmodel/fuzz_max_memory.c.) */
#define ACCEL_IMPLEMENTATION
#include "accel.h"
#include <stdlib.h>
#include <string.h>

static void quiet(void *u, accel_log_level l, const char *m) { (void)u; (void)l; (void)m; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char a[256];
    size_t na = 0, i;
    uint64_t v = 12345;
    accel_set_default_logger(quiet, NULL);
    while (na < size && na < sizeof a - 1 && data[na] != '\n') { a[na] = (char)data[na]; ++na; }
    a[na] = 0;
    if (accel_parse_size(NULL, a, &v) == ACCEL_OK) {
        int digits = na > 0 && na <= 19;
        for (i = 0; i < na; ++i) digits &= a[i] >= '0' && a[i] <= '9';
        if (digits && strlen(a) == na && v != strtoull(a, NULL, 10)) __builtin_trap();
    } else if (v != 12345) {
        __builtin_trap(); /* a failure wrote the output */
    }
    return 0;
}
