/* libFuzzer target: the safetensors reader (accel_st_file_open_memory) on arbitrary bytes. A file that opens must be
   self-consistent: offsets tile the data section, every tensor loads (host path) into a buffer of its size. */
#define ACCEL_IMPLEMENTATION
#include "accel.h"
#include "accel_safetensors.h"
#include <stdlib.h>
#include <string.h>

static void quiet(void *u, accel_log_level l, const char *m) { (void)u; (void)l; (void)m; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    accel_st_file *f = NULL;
    int i, n;
    uint64_t cursor = 0;
    accel_set_default_logger(quiet, NULL);
    if (accel_st_file_open_memory(NULL, data, size, &f) != ACCEL_OK) {
        if (f) abort(); /* must be NULL on failure */
        return 0;
    }
    n = accel_st_file_count(f);
    for (i = 0; i < n; ++i) {
        const accel_st_entry *e = accel_st_file_entry(f, i);
        accel_tensor t;
        void *buf;
        if (e->begin != cursor || e->end < e->begin) abort();
        cursor = e->end;
        if (accel_st_file_find(f, e->name) != i) abort();
        memset(&t, 0, sizeof t);
        t.name = e->name; t.dtype = e->dtype; t.ndim = e->ndim;
        memcpy(t.shape, e->shape, sizeof t.shape);
        if (accel_tensor_nbytes(&t) != (int64_t)(e->end - e->begin)) abort();
        buf = malloc((size_t)(e->end - e->begin) + 1);
        t.ptr = buf;
        if (accel_st_file_load(f, &t) != ACCEL_OK) abort();
        if (e->end > e->begin && memcmp(buf, e->data, (size_t)(e->end - e->begin))) abort();
        free(buf);
    }
    for (i = 0; i < accel_st_file_metadata_count(f); ++i) {
        const char *k, *v;
        size_t kn = 0, vn = 0;
        if (accel_st_file_metadata(f, i, &k, &kn, &v, &vn) != ACCEL_OK || !k || !v || k[kn] || v[vn]) abort();
    }
    accel_st_file_destroy(f);
    return 0;
}
