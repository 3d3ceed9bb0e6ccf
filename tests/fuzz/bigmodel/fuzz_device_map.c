/* libFuzzer target: the model description JSON that `accel device-map` reads (accel_bm_model_open_memory) and,
   when it is accepted, everything computed from it: module sizes, the largest layer, balanced memory and the device
   map for a max_memory given by the input's first line (or a fixed one). Invariants: the count queries and the
   fills agree; every placement names a module or tensor of the model and a device of max_memory or "disk"; the
   module sizes' total ("") is at least every module's size. */
#define ACCEL_IMPLEMENTATION
#include "accel.h"
#include "accel_bigmodel.h"
#include <stdlib.h>
#include <string.h>

static void quiet(void *u, accel_log_level l, const char *m) { (void)u; (void)l; (void)m; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char line[200];
    size_t nl = 0;
    accel_bm_model *m = NULL;
    accel_bm_memory mem[16];
    accel_bm_map_desc d;
    int nmem = 0, n = 0, n2 = 0, i, k;
    const char *cls[2] = {"Block", "Layer"};
    accel_set_default_logger(quiet, NULL);
    while (nl < size && nl < sizeof line - 1 && data[nl] != '\n') { line[nl] = (char)data[nl]; ++nl; }
    line[nl] = 0;
    if (nl < size) ++nl; /* the newline */
    if (accel_bm_parse_max_memory(NULL, line, mem, 16, &nmem) != ACCEL_OK || nmem > 16 || nmem == 0) {
        mem[0].device = 0; mem[0].bytes = 1000;
        mem[1].device = 1; mem[1].bytes = 5000;
        mem[2].device = ACCEL_BM_CPU; mem[2].bytes = 20000;
        nmem = 3;
    }
    if (accel_bm_model_open_memory(NULL, data + nl, size - nl, &m) != ACCEL_OK) return 0;
    memset(&d, 0, sizeof d);
    d.max_memory = mem;
    d.n_max_memory = nmem;
    d.no_split_module_classes = cls;
    d.n_no_split = 2;
    d.low_zero = (int)(size & 1);
    d.fallback_allocation = (int)((size >> 1) & 1);
    {
        int nt = accel_bm_model_tensor_count(m);
        for (i = 0; i < nt; ++i) {
            accel_tensor t;
            int isb = 0;
            const char *tied = NULL;
            if (accel_bm_model_tensor(m, i, &t, &isb, &tied) != ACCEL_OK || !t.name) __builtin_trap();
        }
    }
    if (accel_bm_module_sizes(m, &d, NULL, 0, &n) == ACCEL_OK && n > 0) {
        accel_bm_size *sz = (accel_bm_size *)malloc(sizeof *sz * (size_t)n);
        if (sz && accel_bm_module_sizes(m, &d, sz, n, &n2) == ACCEL_OK) {
            if (n2 != n || strcmp(sz[0].name, "") != 0) __builtin_trap();
            for (i = 1; i < n; ++i)
                if (!(sz[i].bytes >= 0) || sz[i].bytes > sz[0].bytes) __builtin_trap();
        }
        free(sz);
    }
    {
        double bytes = 0;
        int nn = 0;
        (void)accel_bm_max_layer_size(m, &d, &bytes, NULL, 0, &nn);
    }
    if (accel_bm_balanced_memory(m, &d, NULL, 0, &n) == ACCEL_OK && n > 0 && n <= 64) {
        accel_bm_memory bal[64];
        if (accel_bm_balanced_memory(m, &d, bal, 64, &n2) != ACCEL_OK || n2 != n) __builtin_trap();
    }
    if (accel_bm_infer_device_map(m, &d, NULL, 0, &n) == ACCEL_OK && n > 0) {
        accel_bm_placement *map = (accel_bm_placement *)malloc(sizeof *map * (size_t)n);
        if (map && accel_bm_infer_device_map(m, &d, map, n, &n2) == ACCEL_OK) {
            if (n2 != n) __builtin_trap();
            for (i = 0; i < n; ++i) {
                int known = map[i].device == ACCEL_BM_DISK;
                for (k = 0; k < nmem; ++k) known |= mem[k].device == map[i].device;
                if (!known || !map[i].name) __builtin_trap();
            }
        }
        free(map);
    }
    accel_bm_model_destroy(m);
    return 0;
}
