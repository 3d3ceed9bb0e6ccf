/* libFuzzer target: an offload folder as accel_bm_offload_open reads it (Accelerate's offload_state_dict
   format: index.json {name: {"dtype", "shape"}} with one raw <name>.dat each, or {name: {"safetensors_file": path,
   "weight_name": ..., "dtype": ...}} pointing at a safetensors file anywhere). The folder holds a.dat (24 bytes),
   b.dat (0 bytes) and w.safetensors (two tensors); index.json is the input, or a template whose dtype, shape,
   weight name and safetensors_file path (the folder's file, a missing one, a directory, /dev/null, the folder's
   .dat as if it were safetensors, an arbitrary string) the input picks. Invariants: an accepted folder's entries
   each have a known dtype and exactly the bytes their shape needs, inside the mapping. */
#define ACCEL_IMPLEMENTATION
#include "accel.h"
#include "accel_bigmodel.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "../../accel_test_fs.h"

static void quiet(void *u, accel_log_level l, const char *m) { (void)u; (void)l; (void)m; }
static char dir[200];
static void cleanup(void) { accel__rmtree(dir); }
static int setup(void) {
    float x[6] = {1, 2, 3, 4, 5, 6};
    uint16_t h[3] = {0x3c00, 0x4000, 0x4200};
    accel_tensor t[2];
    char p[400];
    snprintf(dir, sizeof dir, "/dev/shm/accel_fuzz_offload_%d", (int)getpid());
    accel__rmtree(dir);
    if (mkdir(dir, 0755) != 0) return -1;
    snprintf(p, sizeof p, "%s/a.dat", dir);
    at_write_file(p, x, sizeof x);
    snprintf(p, sizeof p, "%s/b.dat", dir);
    at_write_file(p, "", 0);
    memset(t, 0, sizeof t);
    t[0].name = "w1"; t[0].dtype = ACCEL_F32; t[0].ndim = 2; t[0].shape[0] = 2; t[0].shape[1] = 3; t[0].ptr = x;
    t[1].name = "w2"; t[1].dtype = ACCEL_F16; t[1].ndim = 1; t[1].shape[0] = 3; t[1].ptr = h;
    snprintf(p, sizeof p, "%s/w.safetensors", dir);
    if (accel_st_save(NULL, p, t, 2, NULL, 0) != ACCEL_OK) return -2;
    atexit(cleanup);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int ready = 0;
    accel_st_file *f = NULL;
    char *idx, path[300];
    size_t n;
    if (!ready) {
        accel_set_default_logger(quiet, NULL);
        if (setup() != 0) abort();
        ready = 1;
    }
    if (size && (data[0] & 1)) { /* a template */
        static const char *dts[] = {"float32", "float16", "bfloat16", "int64", "bool", "uint8", "float64", "weird", ""};
        static const char *shapes[] = {"[2, 3]", "[6]", "[]", "[0]", "[3, 0]", "[1, 1, 1, 1, 1, 1, 1, 1, 1]",
                                       "[18446744073709551615, 2]", "[4611686018427387904, 4]", "[\"2\"]", "7"};
        static const char *wn[] = {"w1", "w2", "w3", "", "a"};
        char stf[300];
        unsigned k = size > 1 ? data[1] : 0, pk = size > 2 ? data[2] % 8 : 0;
        switch (pk) {
        case 0: snprintf(stf, sizeof stf, "%s/w.safetensors", dir); break;
        case 1: snprintf(stf, sizeof stf, "%s/missing.safetensors", dir); break;
        case 2: snprintf(stf, sizeof stf, "%s", dir); break;
        case 3: snprintf(stf, sizeof stf, "/dev/null"); break;
        case 4: snprintf(stf, sizeof stf, "%s/a.dat", dir); break;
        case 5: snprintf(stf, sizeof stf, "../../w.safetensors"); break;
        case 6: snprintf(stf, sizeof stf, "%s", ""); break;
        default: {
            size_t m = size > 3 ? size - 3 : 0, i;
            if (m > 100) m = 100;
            for (i = 0; i < m; ++i) stf[i] = (char)(data[3 + i] >= 32 && data[3 + i] < 127 && data[3 + i] != '"' &&
                                                     data[3 + i] != '\\' ? data[3 + i] : 'x');
            stf[m] = 0;
        }
        }
        idx = (char *)malloc(2048);
        n = (size_t)snprintf(idx, 2048,
                             "{\"a\": {\"dtype\": \"%s\", \"shape\": %s}, \"b\": {\"dtype\": \"%s\", \"shape\": %s}, "
                             "\"c\": {\"safetensors_file\": \"%s\", \"weight_name\": \"%s\", \"dtype\": \"%s\"}}",
                             dts[k % 9], shapes[(k / 9) % 10], dts[(k / 3) % 9], shapes[(k / 7) % 10], stf,
                             wn[(k / 5) % 5], dts[(k / 11) % 9]);
    } else {
        idx = (char *)malloc(size + 1);
        memcpy(idx, data, size);
        n = size;
    }
    snprintf(path, sizeof path, "%s/index.json", dir);
    at_write_file(path, idx, n);
    free(idx);
    if (accel_bm_offload_open(NULL, dir, &f) == ACCEL_OK) {
        int i, cnt = accel_st_file_count(f);
        for (i = 0; i < cnt; ++i) {
            const accel_st_entry *e = accel_st_file_entry(f, i);
            accel_tensor t;
            volatile unsigned char sink = 0;
            uint64_t b;
            if (!e || accel_dtype_size(e->dtype) == 0 || e->ndim < 0 || e->ndim > ACCEL_MAX_DIMS) __builtin_trap();
            memset(&t, 0, sizeof t);
            t.dtype = e->dtype;
            t.ndim = e->ndim;
            memcpy(t.shape, e->shape, sizeof t.shape);
            if (accel_tensor_nbytes(&t) < 0 || (uint64_t)accel_tensor_nbytes(&t) != e->end - e->begin)
                __builtin_trap();
            for (b = 0; b < e->end - e->begin; ++b) sink ^= ((const unsigned char *)e->data)[b]; /* inside the mapping */
            (void)sink;
        }
        accel_st_file_destroy(f);
    }
    return 0;
}
