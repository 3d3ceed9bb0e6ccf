/* libFuzzer target: the strict JSON reader (through the model.safetensors.index.json parser and the raw document
   parser). Every document it accepts must round-trip through the writer's string escaping. */
#define ACCEL_IMPLEMENTATION
#include "accel.h"
#include "accel_safetensors.h"
#include <stdlib.h>
#include <string.h>

static void quiet(void *u, accel_log_level l, const char *m) { (void)u; (void)l; (void)m; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    accel__st_index ix;
    accel__st_json j;
    int root;
    accel_set_default_logger(quiet, NULL);
    if (accel__st_index_parse(NULL, "<fuzz>", data, size, &ix) == ACCEL_OK) {
        int i;
        for (i = 0; i < (int)stbds_arrlen(ix.names); ++i) {
            /* a weight_map name written back by the JSON writer parses to the same string */
            accel__sb b;
            accel__st_json j2;
            int r2;
            accel__sb_init(&b, NULL);
            accel__sb_json_str(&b, ix.names[i], strlen(ix.names[i]), 1);
            r2 = accel__st_json_parse(&j2, NULL, b.p, b.n);
            if (r2 < 0 || j2.nodes[r2].type != ACCEL__ST_J_STR || strcmp(accel__st_jstr(&j2, r2), ix.names[i])) abort();
            accel__st_json_free(&j2);
            accel__sb_free(&b);
        }
        accel__st_index_free(&ix);
    }
    root = accel__st_json_parse(&j, NULL, data, size);
    (void)root;
    accel__st_json_free(&j);
    return 0;
}
