/* `accel device-map` (accel_bigmodel.h, docs/semantics.md §9): Accelerate's compute_module_sizes,
   get_balanced_memory and infer_auto_device_map on a model description.
     accel device-map --structure MODEL.json --max-memory 0=10GiB,1=10GiB,cpu=30GiB [--no-split Block,...]
                      [--dtype float16] [--balanced [--low-zero]] [--fallback-allocation] [--no-clean]
   prints one JSON object, as json.dumps prints it:
     {"module_sizes": {name: bytes, …}, "balanced_memory": {device: bytes, …}, "device_map": [[prefix, device], …]}
   (balanced_memory only with --balanced, which places the model with that max_memory, as device_map="balanced"
   does; --low-zero is "balanced_low_0"). Entries are in Accelerate's order; a device is a GPU number or "cpu",
   "disk", "mps"; sizes are bytes (a bool counts 1/8 byte: a fractional size prints as a decimal).
   Exit codes: 0 ok, 1 the model file cannot be read, 2 invalid input (the message is Accelerate's where it raises). */
#include "accel_bigmodel.h"
#include "cli.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void quiet_log(void *user, accel_log_level level, const char *msg) { (void)user; (void)level; (void)msg; }

/* A size in bytes, a multiple of 1/8: an integer, or its exact decimal. */
static void put_bytes(double b) {
    long long whole = (long long)b;
    double frac = b - (double)whole;
    if (frac == 0) { printf("%lld", whole); return; }
    {
        char buf[64];
        size_t n;
        snprintf(buf, sizeof buf, "%.3f", b); /* exact: at most three decimals for eighths */
        n = strlen(buf);
        while (n > 0 && buf[n - 1] == '0') buf[--n] = 0;
        fputs(buf, stdout);
    }
}
static void put_device(int d, int as_key) {
    char nm[32];
    accel_bm_device_name(d, nm, sizeof nm);
    if (d >= 0 && !as_key) printf("%d", d);
    else printf("\"%s\"", nm);
}

static int usage(void) {
    fprintf(stderr, "usage: accel device-map --structure MODEL.json --max-memory DEV=SIZE[,DEV=SIZE...] [--no-split CLASS,...]\n"
                    "                        [--dtype DTYPE] [--balanced [--low-zero]] [--fallback-allocation] [--no-clean]\n");
    return 2;
}
static int fail(int code, const char *what) {
    fprintf(stderr, "accel device-map: %s%s%s\n", what ? what : "", what ? ": " : "", accel_last_error(NULL));
    return code;
}

int cli_device_map(int argc, char **argv) {
    const char *structure = NULL, *max_memory = NULL, *no_split = NULL, *dtype = NULL;
    int balanced = 0, low_zero = 0, fallback = 0, no_clean = 0, i, n = 0, rc = 0;
    accel_bm_model *m = NULL;
    accel_bm_memory *mem = NULL, *bal = NULL;
    accel_bm_size *sizes = NULL;
    accel_bm_placement *map = NULL;
    accel_bm_map_desc d;
    char *classes = NULL;
    const char **cls = NULL;
    int ncls = 0, nmem = 0, nsizes = 0, nmap = 0;
    accel_result r;
    for (i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--structure") && i + 1 < argc) structure = argv[++i];
        else if (!strcmp(argv[i], "--max-memory") && i + 1 < argc) max_memory = argv[++i];
        else if (!strcmp(argv[i], "--no-split") && i + 1 < argc) no_split = argv[++i];
        else if (!strcmp(argv[i], "--dtype") && i + 1 < argc) dtype = argv[++i];
        else if (!strcmp(argv[i], "--balanced")) balanced = 1;
        else if (!strcmp(argv[i], "--low-zero")) low_zero = 1;
        else if (!strcmp(argv[i], "--fallback-allocation")) fallback = 1;
        else if (!strcmp(argv[i], "--no-clean")) no_clean = 1;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { usage(); return 0; }
        else { fprintf(stderr, "accel device-map: unknown or incomplete option '%s'\n", argv[i]); return usage(); }
    }
    if (!structure || !max_memory || (low_zero && !balanced)) return usage();
    accel_set_default_logger(quiet_log, NULL);
    memset(&d, 0, sizeof d);
    if (dtype) {
        d.dtype = accel_dtype_from_torch(dtype);
        if (d.dtype == ACCEL_DTYPE_INVALID) {
            const char *t = strncmp(dtype, "torch.", 6) ? dtype : dtype + 6;
            fprintf(stderr, "accel device-map: module 'torch' has no attribute '%s'\n", t);
            return 2;
        }
    }
    if (no_split && *no_split) { /* a comma-separated list */
        char *p;
        size_t l = strlen(no_split);
        classes = (char *)malloc(l + 1);
        cls = (const char **)malloc(sizeof(char *) * (l + 1));
        if (!classes || !cls) { rc = 1; goto out; }
        memcpy(classes, no_split, l + 1);
        for (p = classes;;) {
            char *c = strchr(p, ',');
            if (c) *c = 0;
            if (*p) cls[ncls++] = p;
            if (!c) break;
            p = c + 1;
        }
        d.no_split_module_classes = cls;
        d.n_no_split = ncls;
    }
    r = accel_bm_parse_max_memory(NULL, max_memory, NULL, 0, &nmem);
    if (r != ACCEL_OK) { rc = fail(2, "--max-memory"); goto out; }
    mem = (accel_bm_memory *)malloc(sizeof *mem * (size_t)(nmem + 1));
    if (!mem || accel_bm_parse_max_memory(NULL, max_memory, mem, nmem, &nmem) != ACCEL_OK) { rc = fail(2, "--max-memory"); goto out; }
    r = accel_bm_model_open(NULL, structure, &m);
    if (r != ACCEL_OK) { rc = fail(r == ACCEL_ERR_IO || r == ACCEL_ERR_NOT_FOUND ? 1 : 2, NULL); goto out; }
    d.max_memory = mem;
    d.n_max_memory = nmem;
    d.low_zero = low_zero;
    d.fallback_allocation = fallback;
    d.no_clean_result = no_clean;
    /* the sizes (with the dtype) */
    if (accel_bm_module_sizes(m, &d, NULL, 0, &nsizes) != ACCEL_OK) { rc = fail(2, NULL); goto out; }
    sizes = (accel_bm_size *)malloc(sizeof *sizes * (size_t)(nsizes + 1));
    if (!sizes || accel_bm_module_sizes(m, &d, sizes, nsizes, &nsizes) != ACCEL_OK) { rc = fail(2, NULL); goto out; }
    if (balanced) {
        bal = (accel_bm_memory *)malloc(sizeof *bal * (size_t)(nmem + 1));
        if (!bal || accel_bm_balanced_memory(m, &d, bal, nmem, &n) != ACCEL_OK) { rc = fail(2, NULL); goto out; }
        d.max_memory = bal; /* device_map="balanced": infer_auto_device_map with the balanced max_memory */
        d.n_max_memory = n;
    }
    if (accel_bm_infer_device_map(m, &d, NULL, 0, &nmap) != ACCEL_OK) { rc = fail(2, NULL); goto out; }
    map = (accel_bm_placement *)malloc(sizeof *map * (size_t)(nmap + 1));
    if (!map || accel_bm_infer_device_map(m, &d, map, nmap, &nmap) != ACCEL_OK) { rc = fail(2, NULL); goto out; }
    printf("{\"module_sizes\": {");
    for (i = 0; i < nsizes; ++i) {
        if (i) printf(", ");
        cli_put_json_str(stdout, sizes[i].name);
        printf(": ");
        put_bytes(sizes[i].bytes);
    }
    printf("}");
    if (balanced) {
        printf(", \"balanced_memory\": {");
        for (i = 0; i < n; ++i) {
            if (i) printf(", ");
            put_device(bal[i].device, 1);
            printf(": ");
            put_bytes(bal[i].bytes);
        }
        printf("}");
    }
    printf(", \"device_map\": [");
    for (i = 0; i < nmap; ++i) {
        if (i) printf(", ");
        printf("[");
        cli_put_json_str(stdout, map[i].name);
        printf(", ");
        put_device(map[i].device, 0);
        printf("]");
    }
    printf("]}\n");
out:
    accel_bm_model_destroy(m);
    free(mem);
    free(bal);
    free(sizes);
    free(map);
    free(classes);
    free((void *)cls);
    return rc;
}
