/* libFuzzer target: the strict JSON reader (through the model.safetensors.index.json parser and the raw document
   parser). Every document it accepts must round-trip through the writer's string escaping. */
#define ACCEL_IMPLEMENTATION
#include "accel.h"
#include "accel_ckpt.h"
#include <stdlib.h>
#include <string.h>

static void quiet(void *u, accel_log_level l, const char *m) { (void)u; (void)l; (void)m; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    accel__index ix;
    accel__json j;
    int root;
    accel_set_default_logger(quiet, NULL);
    if (accel__index_parse(NULL, "<fuzz>", data, size, &ix) == ACCEL_OK) {
        int i;
        for (i = 0; i < (int)stbds_arrlen(ix.names); ++i) {
            /* a weight_map name written back by the JSON writer parses to the same string */
            accel__sb b;
            accel__json j2;
            int r2;
            memset(&b, 0, sizeof b);
            accel__sb_json_str(&b, ix.names[i], strlen(ix.names[i]), 1);
            r2 = accel__json_parse(&j2, b.p, b.n);
            if (r2 < 0 || j2.nodes[r2].type != ACCEL__J_STR || strcmp(accel__jstr(&j2, r2), ix.names[i])) abort();
            accel__json_free(&j2);
            accel__sb_free(&b);
        }
        accel__index_free(&ix);
    }
    root = accel__json_parse(&j, data, size);
    (void)root;
    accel__json_free(&j);
    return 0;
}
