/* accel_bigmodel.h — big models for accel (docs/semantics.md §9: Accelerate's big-model inference utilities): a
   model description, module sizes, the largest layer, balanced memory, infer_auto_device_map and clean_device_map,
   dispatch of a safetensors checkpoint onto a device map, a just-in-time fetch of offloaded layers, and Accelerate's
   offload folder. Builds on accel_safetensors.h (the files it loads); the ACCEL_IMPLEMENTATION TU needs stb_ds.h
   on the include path, as the core does (Debian: libstb-dev, -I/usr/include/stb).

   CONTENTS
     USAGE
     SIZES AND DEVICE MAPS        Accelerate's algorithms, quirks included
     DISPATCH AND FETCH           a checkpoint onto the map; layer by layer
     OFFLOAD FOLDER
     OPTIONS                      accel_bm_map_desc, accel_bm_dispatch_desc, accel_bm_fetch_desc
     THREADS AND STREAMS
     DIFFERENCES FROM ACCELERATE

   USAGE
       accel_bm_model *m;                                   // the module tree: built in code or from JSON
       accel_bm_model_open(&acc, "model.json", &m);         // (`accel device-map --structure` reads the same form)
       accel_bm_memory mm[8]; int nmm, n;
       accel_bm_parse_max_memory(&acc, "0=10GiB,cpu=30GiB", mm, 8, &nmm);
       const char *no_split[] = {"GPT2Block"};
       accel_bm_map_desc md = {0};
       md.max_memory = mm; md.n_max_memory = nmm; md.no_split_module_classes = no_split; md.n_no_split = 1;
       accel_bm_placement map[256];
       accel_bm_infer_device_map(m, &md, map, 256, &n);    // = infer_auto_device_map(model, max_memory, ...)
       accel_bm_dispatch_desc dd = {0};
       dd.checkpoint = "ckpt_dir";                          // model.safetensors or shards + index, or an offload folder
       dd.device_map = map; dd.n_device_map = n;
       dd.dtype = ACCEL_BF16;                               // floating tensors converted on load (0: as the model)
       accel_bm_dispatch *x;
       accel_bm_dispatch_create(m, &dd, &x);                // GPU / cpu tensors loaded, "disk" ones left mapped
       accel_bm_fetch_desc fd = {0};
       fd.layers = layer_names; fd.n_layers = L; fd.device = 0;
       accel_bm_fetch *f;
       accel_bm_fetch_create(x, &fd, &f);                   // two buffers: layer i+1 fetched while layer i runs
       for (i = 0; i < L; ++i) {
           const accel_tensor *w; int nw;
           accel_bm_fetch_begin(f, i, &w, &nw);             // layer i's tensors on device 0 (ordered on fd.stream)
           run_layer(i, w, nw);                             // enqueue its work on fd.stream
           accel_bm_fetch_end(f, i);                        // its buffer may be refilled once that work is done
       }
       accel_bm_fetch_destroy(f); accel_bm_dispatch_destroy(x); accel_bm_model_destroy(m);

   SIZES AND DEVICE MAPS
     Sizes and maps are Accelerate's algorithms step by step (compared with Accelerate 1.15 on random module trees by
     tests/unit/bigmodel/check_device_map.py), quirks included: GPU 0 may receive nothing, the reserve for the
     largest layer is taken on the main devices, clean_device_map collapses prefixes. Devices are GPU ordinals and
     ACCEL_BM_CPU / _DISK / _MPS, Accelerate's keys 0, 1, …, "cpu", "disk", "mps".

   DISPATCH AND FETCH
     Dispatch validates everything (every tensor of the model found once in the checkpoint with its shape, every key
     of the map a module or tensor of the model, every tensor under a device) before it allocates, then loads: GPU
     tensors through pinned staging on streams[d] (or acc->stream / the legacy default stream), CPU tensors into host
     (pin_cpu: pinned) buffers, "disk" tensors stay in the read-only mapping of the checkpoint (offload_folder: copied
     there in Accelerate's format). Tied parameters share one storage. A fetch brings a layer's tensors to the
     execution device in one of two buffers, converting disk tensors to the dispatch dtype on the way.

   OFFLOAD FOLDER
     accel_bm_offload_save / accel_bm_offload_open write and read Accelerate's offload folder (index.json +
     <name>.dat, byte-identical to offload_state_dict's); an opened folder is an accel_st_file. index.json, every
     .dat and every safetensors_file it names must be regular files: a FIFO or device there is refused at once
     ("is not a regular file"), never opened blocking.

   OPTIONS (zero = Accelerate's default)
     accel_bm_map_desc
       max_memory, n_max_memory      the devices and their budgets (accel queries no device); none: all on "disk".
       no_split_module_classes, n_no_split   classes whose modules stay on one device.
       dtype, special_dtypes          the size of every tensor in dtype (0: its own), per-name exceptions.
       low_zero                       get_balanced_memory(low_zero=True): as little as possible on GPU 0.
       fallback_allocation            infer_auto_device_map(fallback_allocation=True).
       no_clean_result                infer_auto_device_map(clean_result=False): no clean_device_map pass.
     accel_bm_dispatch_desc
       checkpoint                     a .safetensors file, an index, a directory with either, or an offload folder.
       device_map, n_device_map       any map whose keys are module or tensor names ("" = everything).
       dtype                          0: each tensor in the model's dtype; else floating tensors in this one.
       offload_folder                 NULL: "disk" tensors stay in the checkpoint's mapping; else copied there.
       streams, n_streams             streams[d] loads GPU d (else acc->stream on acc->device, else the default).
       pin_cpu                        nonzero: CPU tensors in pinned memory (faster fetches to a GPU).
       ignore_unexpected              nonzero: checkpoint tensors the model lacks are skipped, not errors.
     accel_bm_fetch_desc
       layers, n_layers               execution order: module (or tensor) names, each fetched as a unit.
       device                         the execution device: a GPU ordinal or ACCEL_BM_CPU.
       stream                         the stream the layers run on (GPU; NULL: acc->stream).
       no_prefetch                    nonzero: fetch a layer only when it begins.

   THREADS AND STREAMS
     One thread at a time per model / dispatch / fetch; a fetch fills its host buffers in a helper pthread (which
     neither allocates nor records errors); on a GPU it copies on its own stream, and the layer's stream waits for
     the copy with an event (the host never waits for the GPU). Every call is local (no collective).

   DIFFERENCES FROM ACCELERATE (deliberate, in the policies' style)
     - Python's set order in clean_device_map: Accelerate's order of collapsed entries changes from run to run;
       accel's is the order of first appearance (entries clean_device_map keeps are in Accelerate's order).
     - fallback_allocation with a fractional limit (a model with bool tensors: sizes in eighths of a byte):
       Accelerate raises AttributeError from convert_file_size_to_int(float); accel compares the numbers.
     - Dispatch refuses what Accelerate only warns about: a device_map key that names nothing of the model, a
       checkpoint tensor the model lacks (ignore_unexpected skips those, as Accelerate does).
     - accel queries no device: the devices are max_memory's keys (none: everything goes to "disk"), where Accelerate
       fills a missing max_memory with get_max_memory() of the devices it sees.
*/
#ifndef ACCEL_BIGMODEL_H_INCLUDED
#define ACCEL_BIGMODEL_H_INCLUDED
#include "accel.h"
#include "accel_safetensors.h" /* the checkpoints it dispatches, the accel_st_file of an offload folder */
#ifdef __cplusplus
extern "C" {
#endif

/* Devices of a max_memory list and a device map: a GPU ordinal (>= 0) or one of these. */
#define ACCEL_BM_CPU (-1)
#define ACCEL_BM_DISK (-2)
#define ACCEL_BM_MPS (-3)
/* "0", "cpu", "disk", "mps" (Accelerate's keys); "?" for anything else. */
ACCEL_API void accel_bm_device_name(int device, char *out, size_t cap);

/* The model: modules in order with class names, children, parameters and buffers (named as named_parameters names
   them), and tied parameters. Built in code or read from JSON (the CLI's and the tests' form):
     {"modules": [[name, class, [child names], [param names], [buffer names]], …],
      "tensors": [[full name, [shape], "torch.float32" | "F32" …], …],
      "tied": [[name, alias, …], …]}                                               ("tied" is optional)
   Module "" is the root; children, parameters and buffers are listed in registration order, by local name (or by
   full name); a tied group's first name is in "tensors", its aliases share its storage and are listed only as
   parameters of their modules (named_parameters deduplicates them). */
typedef struct accel_bm_model accel_bm_model;
typedef struct accel_bm_model_desc {
    const char *class_name;                  /* the root module's class; NULL → "Module" */
} accel_bm_model_desc;
ACCEL_API accel_result accel_bm_model_create(accel *acc, const accel_bm_model_desc *desc, accel_bm_model **out);
ACCEL_API accel_result accel_bm_model_open(accel *acc, const char *json_path, accel_bm_model **out);
ACCEL_API accel_result accel_bm_model_open_memory(accel *acc, const void *json, size_t n, accel_bm_model **out);
ACCEL_API void accel_bm_model_destroy(accel_bm_model *m); /* NULL ok */
/* Appends module `name` ("a.b": a child "b" of module "a", which must exist) of class `class_name`. */
ACCEL_API accel_result accel_bm_model_add_module(accel_bm_model *m, const char *name, const char *class_name);
/* Appends a parameter (is_buffer 0) or buffer of the module its name's prefix names: t's name, dtype and shape
   (t->ptr is not used). */
ACCEL_API accel_result accel_bm_model_add_tensor(accel_bm_model *m, const accel_tensor *t, int is_buffer);
/* Appends parameter `alias` (of the module its prefix names) sharing the storage of parameter `param`. */
ACCEL_API accel_result accel_bm_model_tie(accel_bm_model *m, const char *param, const char *alias);
/* Tensors in state_dict order (modules depth-first, each module's parameters then buffers), aliases included:
   *t (ptr NULL), *is_buffer, *tied_to (the parameter whose storage an alias shares, else NULL); any may be NULL. */
ACCEL_API int accel_bm_model_tensor_count(const accel_bm_model *m);
ACCEL_API accel_result accel_bm_model_tensor(const accel_bm_model *m, int i, accel_tensor *t, int *is_buffer,
                                               const char **tied_to);

typedef struct accel_bm_memory { int device; double bytes; } accel_bm_memory; /* one max_memory entry */
typedef struct accel_bm_placement { const char *name; int device; } accel_bm_placement; /* one device-map entry */
typedef struct accel_bm_size { const char *name; double bytes; } accel_bm_size;         /* one module size */
typedef struct accel_bm_dtype_override { const char *name; accel_dtype dtype; } accel_bm_dtype_override;

/* Options of the sizing and placement functions (Accelerate's keyword arguments; zero = Accelerate's default). */
typedef struct accel_bm_map_desc {
    const accel_bm_memory *max_memory;     /* balanced memory and device maps need it (accel queries no device) */
    int n_max_memory;
    const char *const *no_split_module_classes;
    int n_no_split;
    accel_dtype dtype;                       /* ACCEL_DTYPE_INVALID: every tensor in its own dtype */
    const accel_bm_dtype_override *special_dtypes;
    int n_special_dtypes;
    int low_zero;                            /* get_balanced_memory(low_zero=True) */
    int fallback_allocation;                 /* infer_auto_device_map(fallback_allocation=True) */
    int no_clean_result;                     /* infer_auto_device_map(clean_result=False) */
} accel_bm_map_desc;

/* Parses Accelerate's max_memory keys and policy-6 sizes: "0=10GiB,1=10GiB,cpu=30GiB,disk=1TB" (keys: GPU ordinals,
   cpu, disk, mps). out: the entries in Accelerate's order (GPUs ascending, then mps, cpu, disk); cap too small →
   *n = needed, ACCEL_OK, nothing written. */
ACCEL_API accel_result accel_bm_parse_max_memory(accel *acc, const char *s, accel_bm_memory *out, int cap, int *n);
/* compute_module_sizes: every key of Accelerate's dict ("" = the total, then each module and tensor) in its insertion
   order, bytes as multiples of 1/8 (a bool counts 1/8 byte). cap too small → *n = needed, ACCEL_OK. Names point into
   the model. */
ACCEL_API accel_result accel_bm_module_sizes(accel_bm_model *m, const accel_bm_map_desc *d, accel_bm_size *out,
                                               int cap, int *n);
/* get_max_layer_size over the root's parameters, children and buffers (calculate_maximum_sizes): the size and the
   names that reach it (names may be NULL; cap too small → *n = needed). */
ACCEL_API accel_result accel_bm_max_layer_size(accel_bm_model *m, const accel_bm_map_desc *d, double *bytes,
                                                 const char **names, int cap, int *n);
/* get_balanced_memory: d->max_memory rebalanced over the GPUs (same keys, Accelerate's order). */
ACCEL_API accel_result accel_bm_balanced_memory(accel_bm_model *m, const accel_bm_map_desc *d,
                                                  accel_bm_memory *out, int cap, int *n);
/* infer_auto_device_map (+ clean_device_map unless d->no_clean_result): the map in Accelerate's order. cap too small →
   *n = needed, ACCEL_OK. Names point into the model. */
ACCEL_API accel_result accel_bm_infer_device_map(accel_bm_model *m, const accel_bm_map_desc *d,
                                                   accel_bm_placement *out, int cap, int *n);

/* Dispatch: a (sharded) safetensors checkpoint loaded onto the devices of a device map. */
typedef struct accel_bm_dispatch_desc {
    const char *checkpoint;                  /* a .safetensors file, a model.safetensors.index.json, a directory with
                                                either, or an offload folder (index.json + .dat files) */
    const accel_bm_placement *device_map;  /* any map whose keys are module or tensor names ("" = everything) */
    int n_device_map;
    accel_dtype dtype; /* 0: each tensor in the model's dtype; else floating tensors in this one */
    const char *offload_folder;              /* NULL: "disk" tensors stay in the checkpoint's mapping; else they are
                                                written there in Accelerate's offload format and served from it */
    struct CUstream_st *const *streams;      /* streams[d]: loads onto GPU d (NULL or d >= n_streams: acc->stream on
                                                acc->device, else the device's legacy default stream) */
    int n_streams;
    int pin_cpu;                             /* nonzero: CPU tensors in pinned memory (faster fetches to a GPU) */
    int ignore_unexpected;                   /* nonzero: checkpoint tensors the model lacks are skipped, not errors */
} accel_bm_dispatch_desc;
typedef struct accel_bm_dispatch accel_bm_dispatch;
ACCEL_API accel_result accel_bm_dispatch_create(accel_bm_model *m, const accel_bm_dispatch_desc *desc,
                                                  accel_bm_dispatch **out);
ACCEL_API void accel_bm_dispatch_destroy(accel_bm_dispatch *x); /* NULL ok */
/* Where tensor `name` (an alias: its parameter's storage) lives: *t (name, ptr, dtype, shape) and *device. A "disk"
   tensor's ptr points into a read-only mapping, in its stored dtype (fetches convert it). Either may be NULL. */
ACCEL_API accel_result accel_bm_dispatch_tensor(const accel_bm_dispatch *x, const char *name, accel_tensor *t,
                                                  int *device);

/* Just-in-time fetch for layer-by-layer execution (Accelerate's AlignDevicesHook): layer i's tensors on the execution
   device while layer i+1's are fetched into the other of two buffers. */
typedef struct accel_bm_fetch_desc {
    const char *const *layers;               /* execution order: module (or tensor) names, each fetched as a unit */
    int n_layers;
    int device;                              /* the execution device: a GPU ordinal or ACCEL_BM_CPU */
    struct CUstream_st *stream;              /* the stream the layers run on (GPU; NULL: acc->stream) */
    int no_prefetch;                         /* nonzero: fetch a layer only when it begins */
} accel_bm_fetch_desc;
typedef struct accel_bm_fetch accel_bm_fetch;
ACCEL_API accel_result accel_bm_fetch_create(accel_bm_dispatch *x, const accel_bm_fetch_desc *desc,
                                               accel_bm_fetch **out);
ACCEL_API void accel_bm_fetch_destroy(accel_bm_fetch *f); /* NULL ok; waits for a prefetch in flight */
/* Layer i's tensors (state_dict order, aliases included) on the execution device, valid until fetch_end(i); starts
   fetching layer i+1. GPU: the copies are ordered before work enqueued on desc.stream afterwards (no host wait). */
ACCEL_API accel_result accel_bm_fetch_begin(accel_bm_fetch *f, int i, const accel_tensor **tensors, int *n);
/* Layer i's work is enqueued (GPU) or done (CPU): its buffer may be refilled. */
ACCEL_API accel_result accel_bm_fetch_end(accel_bm_fetch *f, int i);

/* Accelerate's offload folder (offload_state_dict): one raw <name>.dat per tensor and index.json ({name: {"dtype":
   numpy's name or "bfloat16", "shape": […]}}, merged into an existing index as json.dump(indent=2) writes it).
   Tensors may live on the host or (CUDA builds) the device. Read one with accel_bm_offload_open. */
ACCEL_API accel_result accel_bm_offload_save(accel *acc, const char *folder, const accel_tensor *tensors, int n);
/* An offload folder (Accelerate's or accel's) as an accel_st_file: every entry mapped from its .dat file (entries
   that name a safetensors_file are mapped from it, in its stored dtype). */
ACCEL_API accel_result accel_bm_offload_open(accel *acc, const char *folder, accel_st_file **out);

#ifdef __cplusplus
}
#endif
#endif /* ACCEL_BIGMODEL_H_INCLUDED */

/* ========================================================================================== implementation */
#if defined(ACCEL_IMPLEMENTATION) && !defined(ACCEL__BIGMODEL_IMPL_DONE)
#define ACCEL__BIGMODEL_IMPL_DONE
#include "accel_safetensors.h" /* its implementation first, when this TU included the header before */
/* CONTENTS (the core's private services — allocation, errors, byte order, UTF-8, string builder, files, agreement —
   come from accel.h's implementation section, and the safetensors layer's (accel__st_*: JSON, staging, the reader,
   the writer's checks) from accel_safetensors.h's; both precede this one in the same TU)
     1. the model description (builder, JSON form)
     2. module sizes, max layer, balanced memory (docs/semantics.md §9)
     3. infer_auto_device_map, clean_device_map
     4. dtype conversion on load
     5. dispatch
     6. just-in-time fetch of offloaded layers (AlignDevicesHook)
     7. the offload folder (index.json + .dat) */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/types.h>
#include <sys/stat.h>
#include <sys/mman.h>
#include <pthread.h>

/* ------------------------------------------------------------------------------------- 1. the model description */
#define ACCEL__BM_MOD 0
#define ACCEL__BM_TEN 1

typedef struct accel__bm_mmod {
    char *name, *cls;
    int parent;
    int *children, *params, *buffers; /* stb_ds arrays of indices, registration order (params: aliases included) */
} accel__bm_mmod;
typedef struct accel__bm_mten {
    accel_tensor t;  /* t.name owned (acc's allocator); ptr unused */
    int module, is_buffer;
    int storage;     /* the tensor whose storage it is: itself, or the parameter an alias is tied to (-1: pending) */
} accel__bm_mten;
typedef struct accel__bm_mname { const char *name; int kind, idx; } accel__bm_mname;
struct accel_bm_model {
    accel *acc;
    accel__bm_mmod *mods;   /* stb_ds; 0 is the root "" */
    accel__bm_mten *tens;   /* stb_ds */
    accel__bm_mname *names; /* stb_ds, sorted by name: every module and tensor */
    int *groups;              /* stb_ds: the storage of every tied group, in the order the groups were made */
    int *sd_order;            /* stb_ds: tensors in state_dict order (rebuilt when sd_dirty) */
    int sd_dirty;
};
typedef struct accel__bm_ref { int kind, idx; } accel__bm_ref;

static const char *accel__bm_ref_name(const accel_bm_model *m, accel__bm_ref r) {
    return r.kind == ACCEL__BM_MOD ? m->mods[r.idx].name : m->tens[r.idx].t.name;
}
static int accel__bm_mfind(const accel_bm_model *m, const char *name, int *kind) {
    size_t lo = 0, hi = (size_t)stbds_arrlen(m->names);
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(m->names[mid].name, name);
        if (c == 0) {
            if (kind) *kind = m->names[mid].kind;
            return m->names[mid].idx;
        }
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}
static accel_result accel__bm_mname_insert(accel_bm_model *m, const char *name, int kind, int idx) {
    size_t lo = 0, hi = (size_t)stbds_arrlen(m->names), n = hi;
    accel__bm_mname e;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(m->names[mid].name, name) < 0) lo = mid + 1;
        else hi = mid;
    }
    if (accel__arr_reserve((void **)&m->names, sizeof *m->names, 1) != 0)
        return ACCEL__FAIL(m->acc, ACCEL_ERR_OUT_OF_MEMORY, "model: out of memory");
    e.name = name;
    e.kind = kind;
    e.idx = idx;
    (void)ACCEL__ARR_PUT(m->names, e); /* reserved: grows the length by one */
    memmove(&m->names[lo + 1], &m->names[lo], (n - lo) * sizeof *m->names);
    m->names[lo] = e;
    return ACCEL_OK;
}
/* The module a dotted name belongs to ("a.b.c" → "a.b", "c" → ""); -1 (error recorded) when it is not a module or the
   name is malformed. */
static int accel__bm_parent_module(accel_bm_model *m, const char *name, const char *what) {
    const char *dot = strrchr(name, '.');
    int kind = -1, idx;
    char *pname;
    size_t utf8_bad = 0;
    if (!accel__utf8_valid((const unsigned char *)name, strlen(name), &utf8_bad)) {
        ACCEL__FAIL(m->acc, ACCEL_ERR_INVALID_ARGUMENT, "model: %s name is not valid UTF-8 (byte %lu)", what,
                    (unsigned long)utf8_bad);
        return -1;
    }
    if (!*name || (dot && (dot == name || !dot[1]))) {
        ACCEL__FAIL(m->acc, ACCEL_ERR_INVALID_ARGUMENT, "model: %s name \"%.200s\" has an empty component", what, name);
        return -1;
    }
    if (accel__bm_mfind(m, name, NULL) >= 0) {
        ACCEL__FAIL(m->acc, ACCEL_ERR_INVALID_ARGUMENT, "model: \"%.200s\" exists already", name);
        return -1;
    }
    if (!dot) return 0;
    pname = accel__st_strndup(m->acc, name, (size_t)(dot - name));
    if (!pname) {
        accel__fail_wrap(m->acc, ACCEL_ERR_OUT_OF_MEMORY, "model");
        return -1;
    }
    idx = accel__bm_mfind(m, pname, &kind);
    if (idx < 0 || kind != ACCEL__BM_MOD)
        ACCEL__FAIL(m->acc, ACCEL_ERR_INVALID_ARGUMENT,
                    "model: %s \"%.200s\": \"%.200s\" is not a module (add modules before "
                    "what they hold)",
                    what, name, pname);
    accel_host_free(m->acc, pname);
    return idx >= 0 && kind == ACCEL__BM_MOD ? idx : -1;
}

static void accel__bm_mmod_free(accel *acc, accel__bm_mmod *d) {
    accel_host_free(acc, d->name);
    accel_host_free(acc, d->cls);
    stbds_arrfree(d->children);
    stbds_arrfree(d->params);
    stbds_arrfree(d->buffers);
}
ACCEL__DEF void accel_bm_model_destroy(accel_bm_model *m) {
    int i;
    if (!m) return;
    for (i = 0; i < (int)stbds_arrlen(m->mods); ++i) accel__bm_mmod_free(m->acc, &m->mods[i]);
    for (i = 0; i < (int)stbds_arrlen(m->tens); ++i) accel_host_free(m->acc, (void *)m->tens[i].t.name);
    stbds_arrfree(m->mods);
    stbds_arrfree(m->tens);
    stbds_arrfree(m->names);
    stbds_arrfree(m->groups);
    stbds_arrfree(m->sd_order);
    accel_host_free(m->acc, m);
}

static accel_result accel__bm_model_add_mod(accel_bm_model *m, const char *name, const char *cls, int parent) {
    accel__bm_mmod d;
    int idx = (int)stbds_arrlen(m->mods);
    memset(&d, 0, sizeof d);
    d.parent = parent;
    d.name = accel__st_strndup(m->acc, name, strlen(name));
    d.cls = accel__st_strndup(m->acc, cls, strlen(cls));
    if (!d.name || !d.cls) {
        accel__bm_mmod_free(m->acc, &d);
        return accel__fail_wrap(m->acc, ACCEL_ERR_OUT_OF_MEMORY, "model");
    }
    if ((parent >= 0 && accel__arr_reserve((void **)&m->mods[parent].children, sizeof(int), 1) != 0) ||
        ACCEL__ARR_PUT(m->mods, d) != 0) {
        accel__bm_mmod_free(m->acc, &d);
        return ACCEL__FAIL(m->acc, ACCEL_ERR_OUT_OF_MEMORY, "model: out of memory");
    }
    if (accel__bm_mname_insert(m, m->mods[idx].name, ACCEL__BM_MOD, idx) != ACCEL_OK) {
        accel__bm_mmod_free(m->acc, &m->mods[idx]);
        (void)stbds_arrpop(m->mods);
        return ACCEL_ERR_OUT_OF_MEMORY;
    }
    if (parent >= 0) (void)ACCEL__ARR_PUT(m->mods[parent].children, idx); /* reserved above */
    m->sd_dirty = 1;
    return ACCEL_OK;
}
/* A tensor record (storage -1: an alias whose parameter is not known yet). */
static accel_result accel__bm_model_add_ten(accel_bm_model *m, const accel_tensor *t, int is_buffer, int module,
                                            int storage) {
    accel__bm_mten x;
    int idx = (int)stbds_arrlen(m->tens), **list = is_buffer ? &m->mods[module].buffers : &m->mods[module].params;
    memset(&x, 0, sizeof x);
    x.t = *t;
    x.t.ptr = NULL;
    x.module = module;
    x.is_buffer = is_buffer;
    x.storage = storage == -2 ? idx : storage;
    x.t.name = accel__st_strndup(m->acc, t->name, strlen(t->name));
    if (!x.t.name) return accel__fail_wrap(m->acc, ACCEL_ERR_OUT_OF_MEMORY, "model");
    if (accel__arr_reserve((void **)list, sizeof(int), 1) != 0 || ACCEL__ARR_PUT(m->tens, x) != 0) {
        accel_host_free(m->acc, (void *)x.t.name);
        return ACCEL__FAIL(m->acc, ACCEL_ERR_OUT_OF_MEMORY, "model: out of memory");
    }
    if (accel__bm_mname_insert(m, m->tens[idx].t.name, ACCEL__BM_TEN, idx) != ACCEL_OK) {
        accel_host_free(m->acc, (void *)m->tens[idx].t.name);
        (void)stbds_arrpop(m->tens);
        return ACCEL_ERR_OUT_OF_MEMORY;
    }
    (void)ACCEL__ARR_PUT(*list, idx); /* reserved above */
    m->sd_dirty = 1;
    return ACCEL_OK;
}
static accel_result accel__bm_model_new(accel *acc, const char *cls, accel_bm_model **out) {
    accel_bm_model *m = (accel_bm_model *)accel_host_alloc(acc, sizeof *m);
    accel_result r;
    *out = NULL;
    if (!m) return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "model");
    memset(m, 0, sizeof *m);
    m->acc = acc;
    r = accel__bm_model_add_mod(m, "", cls, -1);
    if (r != ACCEL_OK) {
        accel_bm_model_destroy(m);
        return r;
    }
    *out = m;
    return ACCEL_OK;
}
ACCEL__DEF accel_result accel_bm_model_create(accel *acc, const accel_bm_model_desc *desc, accel_bm_model **out) {
    if (!out) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_bm_model_create: out is NULL");
    return accel__bm_model_new(acc, desc && desc->class_name ? desc->class_name : "Module", out);
}
ACCEL__DEF accel_result accel_bm_model_add_module(accel_bm_model *m, const char *name, const char *class_name) {
    int parent;
    if (!m || !name || !class_name)
        return ACCEL__FAIL(m ? m->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, "model_add_module: NULL argument");
    parent = accel__bm_parent_module(m, name, "module");
    if (parent < 0) return m->acc ? m->acc->last_result : ACCEL_ERR_INVALID_ARGUMENT;
    return accel__bm_model_add_mod(m, name, class_name, parent);
}
static accel_result accel__bm_check_model_tensor(accel_bm_model *m, const accel_tensor *t) {
    int d;
    if (!accel_dtype_name(t->dtype))
        return ACCEL__FAIL(m->acc, ACCEL_ERR_INVALID_ARGUMENT, "model: tensor \"%.200s\" has an invalid dtype %d",
                           t->name, (int)t->dtype);
    if (t->ndim < 0 || t->ndim > ACCEL_MAX_DIMS)
        return ACCEL__FAIL(m->acc, ACCEL_ERR_INVALID_ARGUMENT, "model: tensor \"%.200s\" has %d dimensions (0..%d)",
                           t->name, t->ndim, ACCEL_MAX_DIMS);
    for (d = 0; d < t->ndim; ++d)
        if (t->shape[d] < 0)
            return ACCEL__FAIL(m->acc, ACCEL_ERR_INVALID_ARGUMENT, "model: tensor \"%.200s\" has a negative dimension",
                               t->name);
    if (accel_tensor_nbytes(t) < 0)
        return ACCEL__FAIL(m->acc, ACCEL_ERR_INVALID_ARGUMENT, "model: tensor \"%.200s\" is too large", t->name);
    return ACCEL_OK;
}
/* The first error recorded on the model's Accelerator (or the process-wide one). */
#define ACCEL__BM_LAST(m) ((m)->acc ? (m)->acc->last_result : ACCEL_ERR_INVALID_ARGUMENT)
ACCEL__DEF accel_result accel_bm_model_add_tensor(accel_bm_model *m, const accel_tensor *t, int is_buffer) {
    int module;
    accel_result r;
    if (!m || !t || !t->name)
        return ACCEL__FAIL(m ? m->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, "model_add_tensor: NULL argument");
    r = accel__bm_check_model_tensor(m, t);
    if (r != ACCEL_OK) return r;
    module = accel__bm_parent_module(m, t->name, is_buffer ? "buffer" : "parameter");
    if (module < 0) return ACCEL__BM_LAST(m);
    return accel__bm_model_add_ten(m, t, is_buffer ? 1 : 0, module, -2);
}
static accel_result accel__bm_model_group(accel_bm_model *m, int storage) {
    int i;
    for (i = 0; i < (int)stbds_arrlen(m->groups); ++i)
        if (m->groups[i] == storage) return ACCEL_OK;
    if (ACCEL__ARR_PUT(m->groups, storage) != 0)
        return ACCEL__FAIL(m->acc, ACCEL_ERR_OUT_OF_MEMORY, "model: out of memory");
    return ACCEL_OK;
}
ACCEL__DEF accel_result accel_bm_model_tie(accel_bm_model *m, const char *param, const char *alias) {
    int kind = -1, p, module;
    accel_tensor t;
    accel_result r;
    if (!m || !param || !alias)
        return ACCEL__FAIL(m ? m->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, "model_tie: NULL argument");
    p = accel__bm_mfind(m, param, &kind);
    if (p < 0 || kind != ACCEL__BM_TEN || m->tens[p].is_buffer)
        return ACCEL__FAIL(m->acc, ACCEL_ERR_INVALID_ARGUMENT, "model_tie: \"%.200s\" is not a parameter of the model",
                           param);
    module = accel__bm_parent_module(m, alias, "parameter");
    if (module < 0) return ACCEL__BM_LAST(m);
    t = m->tens[p].t;
    t.name = alias;
    r = accel__bm_model_group(m, m->tens[p].storage);
    if (r == ACCEL_OK) r = accel__bm_model_add_ten(m, &t, 0, module, m->tens[p].storage);
    return r;
}

/* state_dict order: modules depth-first, each one's parameters (aliases too) then its buffers. */
static accel_result accel__bm_model_sd(accel_bm_model *m) {
    int *stack = NULL, i;
    accel_result r = ACCEL_OK;
    if (!m->sd_dirty && m->sd_order) return ACCEL_OK;
    if (m->sd_order) stbds_header(m->sd_order)->length = 0;
    if (ACCEL__ARR_PUT(stack, 0) != 0) return ACCEL__FAIL(m->acc, ACCEL_ERR_OUT_OF_MEMORY, "model: out of memory");
    while (stbds_arrlen(stack) > 0 && r == ACCEL_OK) {
        int mi = stbds_arrpop(stack);
        const accel__bm_mmod *d = &m->mods[mi];
        for (i = 0; i < (int)stbds_arrlen(d->params) && r == ACCEL_OK; ++i)
            if (ACCEL__ARR_PUT(m->sd_order, d->params[i]) != 0) r = ACCEL_ERR_OUT_OF_MEMORY;
        for (i = 0; i < (int)stbds_arrlen(d->buffers) && r == ACCEL_OK; ++i)
            if (ACCEL__ARR_PUT(m->sd_order, d->buffers[i]) != 0) r = ACCEL_ERR_OUT_OF_MEMORY;
        for (i = (int)stbds_arrlen(d->children) - 1; i >= 0 && r == ACCEL_OK; --i)
            if (ACCEL__ARR_PUT(stack, d->children[i]) != 0) r = ACCEL_ERR_OUT_OF_MEMORY;
    }
    stbds_arrfree(stack);
    if (r != ACCEL_OK) {
        stbds_arrfree(m->sd_order);
        m->sd_order = NULL;
        return ACCEL__FAIL(m->acc, ACCEL_ERR_OUT_OF_MEMORY, "model: out of memory");
    }
    m->sd_dirty = 0;
    return ACCEL_OK;
}
ACCEL__DEF int accel_bm_model_tensor_count(const accel_bm_model *m) { return m ? (int)stbds_arrlen(m->tens) : 0; }
ACCEL__DEF accel_result accel_bm_model_tensor(const accel_bm_model *m, int i, accel_tensor *t, int *is_buffer,
                                                const char **tied_to) {
    accel_bm_model *mm = (accel_bm_model *)m; /* the order is a cache */
    const accel__bm_mten *x;
    accel_result r;
    if (!m || i < 0 || i >= (int)stbds_arrlen(m->tens))
        return ACCEL__FAIL(m ? m->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, "model_tensor: index %d out of range", i);
    r = accel__bm_model_sd(mm);
    if (r != ACCEL_OK) return r;
    x = &m->tens[m->sd_order[i]];
    if (t) *t = x->t;
    if (is_buffer) *is_buffer = x->is_buffer;
    if (tied_to) *tied_to = x->storage != m->sd_order[i] ? m->tens[x->storage].t.name : NULL;
    return ACCEL_OK;
}


/* ---- the JSON form */
typedef struct accel__bm_jname { const char *name; int node; } accel__bm_jname;
static int accel__bm_jname_cmp(const void *a, const void *b) {
    return strcmp(((const accel__bm_jname *)a)->name, ((const accel__bm_jname *)b)->name);
}
static int accel__bm_jname_find(const accel__bm_jname *v, int n, const char *name) {
    accel__bm_jname key, *hit;
    if (n <= 0) return -1;
    key.name = name;
    key.node = 0;
    hit = (accel__bm_jname *)bsearch(&key, v, (size_t)n, sizeof *v, accel__bm_jname_cmp);
    return hit ? (int)(hit - v) : -1;
}
static int accel__bm_jchild(const accel__st_json *j, int nd, int k) { /* k-th element of an array, -1 if none */
    int c = j->nodes[nd].first;
    while (c >= 0 && k-- > 0) c = j->nodes[c].next;
    return c;
}
static int accel__bm_jis_str(const accel__st_json *j, int nd) {
    return nd >= 0 && j->nodes[nd].type == ACCEL__ST_J_STR && strlen(accel__st_jstr(j, nd)) == j->nodes[nd].len;
}

typedef struct accel__bm_mload {
    accel_bm_model *m;
    accel__st_json *j;
    accel__bm_jname *mods, *tens, *alias; /* sorted views of "modules", "tensors", aliases (node = their param) */
    int nmods, ntens, nalias;
    int *mod_used, *ten_used;
    int *pending;                           /* stb_ds: tensors waiting for the parameter they alias */
    const char **pending_of;                /* stb_ds: that parameter's name */
    accel__sb full;
} accel__bm_mload;

/* The full name of a child listed by `parent`: a local name, or a full name under the parent. */
static accel_result accel__bm_mload_full(accel__bm_mload *L, const char *parent, const char *entry, const char *what) {
    size_t pl = strlen(parent);
    L->full.n = 0;
    if (strchr(entry, '.')) {
        if (!pl || strncmp(entry, parent, pl) || entry[pl] != '.' || strchr(entry + pl + 1, '.'))
            return ACCEL__FAIL(L->m->acc, ACCEL_ERR_FORMAT,
                               "model JSON: %s \"%.200s\" of module \"%.200s\" is neither a local "
                               "name nor a name directly under it",
                               what, entry, parent);
        accel__sb_puts(&L->full, entry);
    } else {
        if (!*entry)
            return ACCEL__FAIL(L->m->acc, ACCEL_ERR_FORMAT, "model JSON: module \"%.200s\" lists an empty %s name",
                               parent, what);
        accel__sb_puts(&L->full, parent);
        if (pl) accel__sb_puts(&L->full, ".");
        accel__sb_puts(&L->full, entry);
    }
    if (L->full.oom) return accel__fail_wrap(L->m->acc, ACCEL_ERR_OUT_OF_MEMORY, "model JSON");
    return ACCEL_OK;
}
/* A tensor of "tensors" as an accel_tensor. */
static accel_result accel__bm_mload_tensor(accel__bm_mload *L, int k, const char *name, accel_tensor *t) {
    const accel__st_json *j = L->j;
    int nd = L->tens[k].node, sh = accel__bm_jchild(j, nd, 1), dt = accel__bm_jchild(j, nd, 2), c, d = 0;
    memset(t, 0, sizeof *t);
    t->name = name;
    if (sh < 0 || j->nodes[sh].type != ACCEL__ST_J_ARR || !accel__bm_jis_str(j, dt) || j->nodes[nd].count != 3)
        return ACCEL__FAIL(L->m->acc, ACCEL_ERR_FORMAT, "model JSON: tensor \"%.200s\" is not [name, [shape], dtype]",
                           name);
    if (j->nodes[sh].count > ACCEL_MAX_DIMS)
        return ACCEL__FAIL(L->m->acc, ACCEL_ERR_UNSUPPORTED,
                           "model JSON: tensor \"%.200s\" has %d dimensions (accel supports %d)", name,
                           j->nodes[sh].count, ACCEL_MAX_DIMS);
    for (c = j->nodes[sh].first; c >= 0; c = j->nodes[c].next, ++d) {
        uint64_t v;
        if (accel__st_ju64(j, c, &v) || v > (uint64_t)INT64_MAX)
            return ACCEL__FAIL(L->m->acc, ACCEL_ERR_FORMAT,
                               "model JSON: tensor \"%.200s\": the shape holds non-negative integers", name);
        t->shape[d] = (int64_t)v;
    }
    t->ndim = d;
    t->dtype = accel_dtype_from_torch(accel__st_jstr(j, dt));
    if (t->dtype == ACCEL_DTYPE_INVALID)
        return ACCEL__FAIL(L->m->acc, ACCEL_ERR_FORMAT, "model JSON: tensor \"%.200s\": unknown dtype \"%.60s\"", name,
                           accel__st_jstr(j, dt));
    return ACCEL_OK;
}
/* Adds module `mi` (a JSON node of "modules") named `name` under `parent`, then everything it lists, depth-first. */
static accel_result accel__bm_mload_module(accel__bm_mload *L, int k, int model_idx, int depth) {
    const accel__st_json *j = L->j;
    int nd = L->mods[k].node, lists[3], li, c;
    const char *name = L->mods[k].name;
    accel_result r = ACCEL_OK;
    if (depth > 10000) return ACCEL__FAIL(L->m->acc, ACCEL_ERR_FORMAT, "model JSON: modules nested deeper than 10000");
    if (L->mod_used[k]++)
        return ACCEL__FAIL(L->m->acc, ACCEL_ERR_FORMAT, "model JSON: module \"%.200s\" is listed as a child twice",
                           name);
    for (li = 0; li < 3; ++li) {
        lists[li] = accel__bm_jchild(j, nd, 2 + li);
        if (lists[li] < 0 || j->nodes[lists[li]].type != ACCEL__ST_J_ARR)
            return ACCEL__FAIL(L->m->acc, ACCEL_ERR_FORMAT,
                               "model JSON: module \"%.200s\" is not [name, class, [children], [params], "
                               "[buffers]]",
                               name);
    }
    /* parameters, then buffers, of this module; then its children */
    for (li = 1; li < 3 && r == ACCEL_OK; ++li) {
        for (c = j->nodes[lists[li]].first; c >= 0 && r == ACCEL_OK; c = j->nodes[c].next) {
            int tk, ak;
            if (!accel__bm_jis_str(j, c))
                return ACCEL__FAIL(L->m->acc, ACCEL_ERR_FORMAT, "model JSON: module \"%.200s\": names are strings",
                                   name);
            r = accel__bm_mload_full(L, name, accel__st_jstr(j, c), li == 1 ? "parameter" : "buffer");
            if (r != ACCEL_OK) break;
            tk = accel__bm_jname_find(L->tens, L->ntens, L->full.p);
            ak = accel__bm_jname_find(L->alias, L->nalias, L->full.p);
            if (tk >= 0) {
                accel_tensor t;
                if (L->ten_used[tk]++)
                    return ACCEL__FAIL(L->m->acc, ACCEL_ERR_FORMAT, "model JSON: tensor \"%.200s\" is listed twice",
                                       L->full.p);
                r = accel__bm_mload_tensor(L, tk, L->full.p, &t);
                if (r == ACCEL_OK) r = accel__bm_check_model_tensor(L->m, &t);
                if (r == ACCEL_OK && accel__bm_mfind(L->m, t.name, NULL) >= 0)
                    r = ACCEL__FAIL(L->m->acc, ACCEL_ERR_FORMAT, "model JSON: \"%.200s\" is both a module and a tensor",
                                    t.name);
                if (r == ACCEL_OK) r = accel__bm_model_add_ten(L->m, &t, li == 2, model_idx, -2);
            } else if (ak >= 0 && li == 1) {
                accel_tensor t;
                memset(&t, 0, sizeof t);
                t.name = L->full.p;
                t.dtype = ACCEL_U8; /* until its parameter is known */
                if (accel__bm_mfind(L->m, t.name, NULL) >= 0)
                    return ACCEL__FAIL(L->m->acc, ACCEL_ERR_FORMAT, "model JSON: \"%.200s\" is listed twice", t.name);
                if (accel__arr_reserve((void **)&L->pending, sizeof(int), 1) != 0 ||
                    accel__arr_reserve((void **)&L->pending_of, sizeof(char *), 1) != 0)
                    return ACCEL__FAIL(L->m->acc, ACCEL_ERR_OUT_OF_MEMORY, "model JSON: out of memory");
                r = accel__bm_model_add_ten(L->m, &t, 0, model_idx, -1);
                if (r == ACCEL_OK) {
                    (void)ACCEL__ARR_PUT(L->pending, (int)stbds_arrlen(L->m->tens) - 1);
                    (void)ACCEL__ARR_PUT(L->pending_of,
                                         L->alias[ak].name); /* the alias; its parameter is looked up later */
                }
            } else {
                return ACCEL__FAIL(L->m->acc, ACCEL_ERR_FORMAT,
                                   "model JSON: %s \"%.200s\" of module \"%.200s\" is not in \"tensors\"%s",
                                   li == 1 ? "parameter" : "buffer", L->full.p, name,
                                   li == 1 ? " nor a tied alias" : "");
            }
        }
    }
    for (c = j->nodes[lists[0]].first; c >= 0 && r == ACCEL_OK; c = j->nodes[c].next) {
        int ck, cls, cidx;
        if (!accel__bm_jis_str(j, c))
            return ACCEL__FAIL(L->m->acc, ACCEL_ERR_FORMAT, "model JSON: module \"%.200s\": names are strings", name);
        r = accel__bm_mload_full(L, name, accel__st_jstr(j, c), "child");
        if (r != ACCEL_OK) break;
        ck = accel__bm_jname_find(L->mods, L->nmods, L->full.p);
        if (ck < 0)
            return ACCEL__FAIL(L->m->acc, ACCEL_ERR_FORMAT,
                               "model JSON: child \"%.200s\" of \"%.200s\" is not in \"modules\"", L->full.p, name);
        cls = accel__bm_jchild(j, L->mods[ck].node, 1);
        if (!accel__bm_jis_str(j, cls))
            return ACCEL__FAIL(L->m->acc, ACCEL_ERR_FORMAT, "model JSON: module \"%.200s\" has no class name",
                               L->full.p);
        if (accel__bm_mfind(L->m, L->full.p, NULL) >= 0)
            return ACCEL__FAIL(L->m->acc, ACCEL_ERR_FORMAT, "model JSON: \"%.200s\" is listed twice", L->full.p);
        cidx = (int)stbds_arrlen(L->m->mods);
        r = accel__bm_model_add_mod(L->m, L->full.p, accel__st_jstr(j, cls), model_idx);
        if (r == ACCEL_OK) r = accel__bm_mload_module(L, ck, cidx, depth + 1);
    }
    return r;
}
static accel_result accel__bm_mload_names(accel__bm_mload *L, int arr, accel__bm_jname **out, int *n,
                                          const char *what) {
    const accel__st_json *j = L->j;
    int c, k = 0;
    if (arr < 0 || j->nodes[arr].type != ACCEL__ST_J_ARR)
        return ACCEL__FAIL(L->m->acc, ACCEL_ERR_FORMAT, "model JSON: \"%s\" is not an array", what);
    *out = (accel__bm_jname *)accel__st_zalloc(L->m->acc, (size_t)j->nodes[arr].count, sizeof **out);
    if (!*out) return accel__fail_wrap(L->m->acc, ACCEL_ERR_OUT_OF_MEMORY, "model JSON");
    for (c = j->nodes[arr].first; c >= 0; c = j->nodes[c].next, ++k) {
        int nm = j->nodes[c].type == ACCEL__ST_J_ARR ? j->nodes[c].first : -1;
        if (!accel__bm_jis_str(j, nm))
            return ACCEL__FAIL(L->m->acc, ACCEL_ERR_FORMAT, "model JSON: entry %d of \"%s\" does not start with a name",
                               k, what);
        (*out)[k].name = accel__st_jstr(j, nm);
        (*out)[k].node = c;
    }
    *n = k;
    qsort(*out, (size_t)k, sizeof **out, accel__bm_jname_cmp);
    for (k = 1; k < *n; ++k)
        if (!strcmp((*out)[k - 1].name, (*out)[k].name))
            return ACCEL__FAIL(L->m->acc, ACCEL_ERR_FORMAT, "model JSON: \"%.200s\" appears twice in \"%s\"",
                               (*out)[k].name, what);
    return ACCEL_OK;
}
ACCEL__DEF accel_result accel_bm_model_open_memory(accel *acc, const void *json, size_t n, accel_bm_model **out) {
    accel__st_json j;
    accel__bm_mload L;
    int root, tied, c, k, rootk;
    size_t bad = 0;
    accel_result r;
    if (!out || (!json && n)) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "model_open: NULL argument");
    *out = NULL;
    if (!accel__utf8_valid((const unsigned char *)json, n, &bad))
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "model JSON is not valid UTF-8 (byte %lu)", (unsigned long)bad);
    memset(&L, 0, sizeof L);
    root = accel__st_json_parse(&j, acc, json, n);
    if (root < 0) {
        r = accel__st_json_failed(acc, &j, "model JSON");
        accel__st_json_free(&j);
        return r;
    }
    L.j = &j;
    accel__sb_init(&L.full, acc);
    r = accel__bm_model_new(acc, "Module", &L.m);
    if (r == ACCEL_OK && j.nodes[root].type != ACCEL__ST_J_OBJ)
        r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "model JSON: expected an object with \"modules\" and \"tensors\"");
    if (r == ACCEL_OK) r = accel__bm_mload_names(&L, accel__st_jget(&j, root, "modules"), &L.mods, &L.nmods, "modules");
    if (r == ACCEL_OK) r = accel__bm_mload_names(&L, accel__st_jget(&j, root, "tensors"), &L.tens, &L.ntens, "tensors");
    tied = r == ACCEL_OK ? accel__st_jget(&j, root, "tied") : -1;
    if (r == ACCEL_OK && tied >= 0 && j.nodes[tied].type != ACCEL__ST_J_ARR)
        r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "model JSON: \"tied\" is not an array of name lists");
    if (r == ACCEL_OK && tied >= 0) { /* aliases: every name of a group but the first (node = the group's first name) */
        int total = 0, g;
        for (g = j.nodes[tied].first; g >= 0; g = j.nodes[g].next)
            total += j.nodes[g].type == ACCEL__ST_J_ARR ? j.nodes[g].count : 0;
        L.alias = (accel__bm_jname *)accel__st_zalloc(acc, (size_t)total, sizeof *L.alias);
        if (!L.alias) r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "model JSON");
        for (g = j.nodes[tied].first; g >= 0 && r == ACCEL_OK; g = j.nodes[g].next) {
            int first = j.nodes[g].type == ACCEL__ST_J_ARR ? j.nodes[g].first : -1;
            if (!accel__bm_jis_str(&j, first) || j.nodes[g].count < 2) {
                r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT,
                                "model JSON: each \"tied\" group is a list of two or more names");
                break;
            }
            for (c = j.nodes[first].next; c >= 0; c = j.nodes[c].next) {
                if (!accel__bm_jis_str(&j, c)) {
                    r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "model JSON: \"tied\" holds names");
                    break;
                }
                L.alias[L.nalias].name = accel__st_jstr(&j, c);
                L.alias[L.nalias++].node = first;
            }
        }
        if (r == ACCEL_OK) {
            qsort(L.alias, (size_t)L.nalias, sizeof *L.alias, accel__bm_jname_cmp);
            for (k = 1; k < L.nalias; ++k)
                if (!strcmp(L.alias[k - 1].name, L.alias[k].name))
                    r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "model JSON: \"%.200s\" is tied twice", L.alias[k].name);
            for (k = 0; k < L.nalias && r == ACCEL_OK; ++k)
                if (accel__bm_jname_find(L.tens, L.ntens, L.alias[k].name) >= 0)
                    r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT,
                                    "model JSON: the alias \"%.200s\" is also in \"tensors\" (only a group's first "
                                    "name is)",
                                    L.alias[k].name);
        }
    }
    if (r == ACCEL_OK) {
        L.mod_used = (int *)accel__st_zalloc(acc, (size_t)L.nmods, sizeof(int));
        L.ten_used = (int *)accel__st_zalloc(acc, (size_t)L.ntens, sizeof(int));
        if (!L.mod_used || !L.ten_used) r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "model JSON");
    }
    rootk = r == ACCEL_OK ? accel__bm_jname_find(L.mods, L.nmods, "") : -1;
    if (r == ACCEL_OK && rootk < 0)
        r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "model JSON: no root module \"\" in \"modules\"");
    if (r == ACCEL_OK) {
        int cls = accel__bm_jchild(&j, L.mods[rootk].node, 1);
        if (!accel__bm_jis_str(&j, cls))
            r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "model JSON: the root module has no class name");
        else {
            char *cn = accel__st_strndup(acc, accel__st_jstr(&j, cls), j.nodes[cls].len);
            if (!cn) r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "model JSON");
            else {
                accel_host_free(acc, L.m->mods[0].cls);
                L.m->mods[0].cls = cn;
            }
        }
    }
    if (r == ACCEL_OK) r = accel__bm_mload_module(&L, rootk, 0, 0);
    for (k = 0; k < L.nmods && r == ACCEL_OK; ++k)
        if (!L.mod_used[k])
            r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "model JSON: module \"%.200s\" is nobody's child", L.mods[k].name);
    for (k = 0; k < L.ntens && r == ACCEL_OK; ++k)
        if (!L.ten_used[k])
            r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "model JSON: tensor \"%.200s\" is in no module's lists",
                            L.tens[k].name);
    /* aliases: their parameter (the first name of their group) */
    for (k = 0; k < (int)stbds_arrlen(L.pending) && r == ACCEL_OK; ++k) {
        int ak = accel__bm_jname_find(L.alias, L.nalias, L.pending_of[k]), kind = -1, p;
        const char *pname = accel__st_jstr(&j, L.alias[ak].node);
        accel__bm_mten *x = &L.m->tens[L.pending[k]];
        p = accel__bm_mfind(L.m, pname, &kind);
        if (p < 0 || kind != ACCEL__BM_TEN || L.m->tens[p].is_buffer || L.m->tens[p].storage != p) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT,
                            "model JSON: \"%.200s\" is tied to \"%.200s\", which is not a parameter in \"tensors\"",
                            x->t.name, pname);
            break;
        }
        x->storage = p;
        x->t.dtype = L.m->tens[p].t.dtype;
        x->t.ndim = L.m->tens[p].t.ndim;
        memcpy(x->t.shape, L.m->tens[p].t.shape, sizeof x->t.shape);
    }
    for (k = 0; k < L.nalias && r == ACCEL_OK; ++k) {
        int kind = -1, a = accel__bm_mfind(L.m, L.alias[k].name, &kind);
        if (a < 0 || kind != ACCEL__BM_TEN)
            r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "model JSON: the tied alias \"%.200s\" is no module's parameter",
                            L.alias[k].name);
    }
    if (r == ACCEL_OK && tied >= 0) /* the groups in the order they are listed */
        for (c = j.nodes[tied].first; c >= 0 && r == ACCEL_OK; c = j.nodes[c].next)
            r = accel__bm_model_group(L.m, accel__bm_mfind(L.m, accel__st_jstr(&j, j.nodes[c].first), NULL));
    accel__sb_free(&L.full);
    accel_host_free(acc, L.mods);
    accel_host_free(acc, L.tens);
    accel_host_free(acc, L.alias);
    accel_host_free(acc, L.mod_used);
    accel_host_free(acc, L.ten_used);
    stbds_arrfree(L.pending);
    stbds_arrfree(L.pending_of);
    accel__st_json_free(&j);
    if (r != ACCEL_OK) {
        accel_bm_model_destroy(L.m);
        return r;
    }
    *out = L.m;
    return ACCEL_OK;
}
ACCEL__DEF accel_result accel_bm_model_open(accel *acc, const char *path, accel_bm_model **out) {
    char *data = NULL;
    size_t n = 0;
    accel_result r;
    if (!path || !out) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "model_open: NULL argument");
    *out = NULL;
    r = accel__read_file(acc, path, &data, &n, (size_t)1 << 30);
    if (r != ACCEL_OK) return r;
    r = accel_bm_model_open_memory(acc, data, n, out);
    if (r != ACCEL_OK) r = accel__fail_wrap(acc, r, "%.400s", path);
    accel_host_free(acc, data);
    return r;
}

/* ----------------------------------------------- 2. module sizes, max layer, balanced memory (docs/semantics.md §9) */
/* Sizes are counted in bits: Accelerate counts a bool as 1/8 byte, so its sizes are multiples of 1/8. */
static int64_t accel__bm_dtype_bits(accel_dtype d) { return d == ACCEL_BOOL ? 1 : (int64_t)accel_dtype_size(d) * 8; }
static int accel__bm_dtype_is_int(
    accel_dtype d) { /* Accelerate: str(dtype).startswith(("torch.uint", "torch.int", "torch.bool")) */
    return d == ACCEL_I64 || d == ACCEL_I32 || d == ACCEL_I16 || d == ACCEL_I8 || d == ACCEL_U64 || d == ACCEL_U32 ||
           d == ACCEL_U16 || d == ACCEL_U8 || d == ACCEL_BOOL;
}

typedef struct accel__bm_sz {
    int64_t *mod_bits, *ten_bits; /* per module / tensor (an alias that named_parameters skips: 0) */
    accel__bm_ref *keys;        /* compute_module_sizes' keys in insertion order (acc's allocator) */
    int nkeys;
} accel__bm_sz;
static void accel__bm_sz_free(accel *acc, accel__bm_sz *s) {
    accel_host_free(acc, s->mod_bits);
    accel_host_free(acc, s->ten_bits);
    accel_host_free(acc, s->keys);
    memset(s, 0, sizeof *s);
}
static int accel__bm_class_in(const char *cls, const char *const *list, int n) {
    int i;
    for (i = 0; i < n; ++i)
        if (list[i] && !strcmp(list[i], cls)) return 1;
    return 0;
}
/* compute_module_sizes: named_parameters (storages deduplicated, depth-first) then named_buffers; each tensor's size is
   added to every prefix of its name, "" included. */
/* The largest model the sizing accepts, in bits (2^57 bytes = 128 PiB): its sums and margins then fit in int64. */
#define ACCEL__BM_MAX_MODEL_BITS ((int64_t)1 << 60)
static accel_result accel__bm_sizes(accel_bm_model *m, const accel_bm_map_desc *d, accel__bm_sz *s) {
    accel *acc = m->acc;
    int nm = (int)stbds_arrlen(m->mods), nt = (int)stbds_arrlen(m->tens), pass, i, k;
    unsigned char *mseen, *sseen;
    int *chain, *stack = NULL;
    accel_result r = ACCEL_OK;
    memset(s, 0, sizeof *s);
    if (d && d->dtype != ACCEL_DTYPE_INVALID && !accel_dtype_name(d->dtype))
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "module sizes: invalid dtype %d", (int)d->dtype);
    for (i = 0; d && i < d->n_special_dtypes; ++i)
        if (!d->special_dtypes || !d->special_dtypes[i].name || !accel_dtype_name(d->special_dtypes[i].dtype))
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "module sizes: special_dtypes entry %d is invalid", i);
    s->mod_bits = (int64_t *)accel__st_zalloc(acc, (size_t)nm, sizeof(int64_t));
    s->ten_bits = (int64_t *)accel__st_zalloc(acc, (size_t)nt, sizeof(int64_t));
    s->keys = (accel__bm_ref *)accel__st_zalloc(acc, (size_t)(nm + nt), sizeof(accel__bm_ref));
    mseen = (unsigned char *)accel__st_zalloc(acc, (size_t)nm, 1);
    sseen = (unsigned char *)accel__st_zalloc(acc, (size_t)nt, 1);
    chain = (int *)accel__st_zalloc(acc, (size_t)nm, sizeof(int));
    if (!s->mod_bits || !s->ten_bits || !s->keys || !mseen || !sseen || !chain)
        r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "module sizes");
    for (pass = 0; pass < 2 && r == ACCEL_OK; ++pass) { /* 0: parameters, 1: buffers; modules depth-first */
        if (stack) stbds_header(stack)->length = 0;
        if (ACCEL__ARR_PUT(stack, 0) != 0) r = ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "module sizes: out of memory");
        while (r == ACCEL_OK && stbds_arrlen(stack) > 0) {
            int mi = stbds_arrpop(stack);
            const int *list = pass ? m->mods[mi].buffers : m->mods[mi].params;
            for (i = 0; i < (int)stbds_arrlen(list) && r == ACCEL_OK; ++i) {
                int ti = list[i], st = m->tens[ti].storage, nc = 0, c;
                const accel_tensor *t = &m->tens[ti].t;
                int64_t numel = accel_tensor_numel(t), bits = accel__bm_dtype_bits(t->dtype), per;
                if (sseen[st]) continue; /* named_parameters yields a shared parameter once, under its first name */
                sseen[st] = 1;
                for (k = 0; d && k < d->n_special_dtypes; ++k)
                    if (!strcmp(d->special_dtypes[k].name, t->name)) break;
                if (d && k < d->n_special_dtypes) per = accel__bm_dtype_bits(d->special_dtypes[k].dtype);
                else if (!d || d->dtype == ACCEL_DTYPE_INVALID || accel__bm_dtype_is_int(t->dtype)) per = bits;
                else per = accel__bm_dtype_bits(d->dtype) < bits ? accel__bm_dtype_bits(d->dtype) : bits;
                /* sizes are bits in int64: a model is kept under 2^60 bits (128 PiB) so that the placement's sums
                   and 1.25x margins of them stay in range (a description could claim exabytes) */
                if (numel < 0 || (per && numel > ACCEL__BM_MAX_MODEL_BITS / per)) {
                    r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                                    "module sizes: \"%.200s\" is too large (more than 2^57 bytes)", t->name);
                    break;
                }
                bits = numel * per;
                s->ten_bits[ti] = bits;
                for (c = m->tens[ti].module; c >= 0; c = m->mods[c].parent) chain[nc++] = c;
                while (nc > 0) {
                    c = chain[--nc];
                    if (s->mod_bits[c] > ACCEL__BM_MAX_MODEL_BITS - bits) {
                        r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                                        "module sizes: the total is more than 2^57 bytes");
                        break;
                    }
                    s->mod_bits[c] += bits;
                    if (!mseen[c]) {
                        mseen[c] = 1;
                        s->keys[s->nkeys].kind = ACCEL__BM_MOD;
                        s->keys[s->nkeys++].idx = c;
                    }
                }
                s->keys[s->nkeys].kind = ACCEL__BM_TEN;
                s->keys[s->nkeys++].idx = ti;
            }
            for (i = (int)stbds_arrlen(m->mods[mi].children) - 1; i >= 0 && r == ACCEL_OK; --i)
                if (ACCEL__ARR_PUT(stack, m->mods[mi].children[i]) != 0)
                    r = ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "module sizes: out of memory");
        }
    }
    stbds_arrfree(stack);
    accel_host_free(acc, mseen);
    accel_host_free(acc, sseen);
    accel_host_free(acc, chain);
    if (r != ACCEL_OK) accel__bm_sz_free(acc, s);
    return r;
}
static int64_t accel__bm_ref_bits(const accel__bm_sz *s, accel__bm_ref r) {
    return r.kind == ACCEL__BM_MOD ? s->mod_bits[r.idx] : s->ten_bits[r.idx];
}
static double accel__bm_bits_bytes(int64_t bits) { return (double)bits / 8.0; }

ACCEL__DEF accel_result accel_bm_module_sizes(accel_bm_model *m, const accel_bm_map_desc *d, accel_bm_size *out,
                                                int cap, int *n) {
    accel__bm_sz s;
    accel_result r;
    int i;
    if (!m || !n || cap < 0 || (cap > 0 && !out))
        return ACCEL__FAIL(m ? m->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, "module_sizes: bad arguments");
    r = accel__bm_sizes(m, d, &s);
    if (r != ACCEL_OK) return r;
    *n = s.nkeys;
    if (cap >= s.nkeys)
        for (i = 0; i < s.nkeys; ++i) {
            out[i].name = accel__bm_ref_name(m, s.keys[i]);
            out[i].bytes = accel__bm_bits_bytes(accel__bm_ref_bits(&s, s.keys[i]));
        }
    accel__bm_sz_free(m->acc, &s);
    return ACCEL_OK;
}

/* A growable list of refs (the queue of infer_auto_device_map), every growth checked. */
typedef struct accel__bm_q { accel__bm_ref *v; int n, cap; accel *acc; int oom; } accel__bm_q;
static void accel__bm_q_free(accel__bm_q *q) {
    accel_host_free(q->acc, q->v);
    q->v = NULL;
    q->n = q->cap = 0;
}
static int accel__bm_q_insert(accel__bm_q *q, int pos, const accel__bm_ref *items, int k) {
    if (q->oom) return -1;
    if (q->n + k > q->cap) {
        int nc = q->cap ? q->cap : 16;
        accel__bm_ref *nv;
        while (nc < q->n + k) nc *= 2;
        nv = (accel__bm_ref *)accel_host_alloc(q->acc, sizeof *nv * (size_t)nc);
        if (!nv) { q->oom = 1; return -1; }
        if (q->n) memcpy(nv, q->v, sizeof *nv * (size_t)q->n);
        accel_host_free(q->acc, q->v);
        q->v = nv;
        q->cap = nc;
    }
    memmove(q->v + pos + k, q->v + pos, sizeof *q->v * (size_t)(q->n - pos));
    if (k) memcpy(q->v + pos, items, sizeof *items * (size_t)k);
    q->n += k;
    return 0;
}
static accel__bm_ref accel__bm_q_take(accel__bm_q *q, int pos) {
    accel__bm_ref r = q->v[pos];
    memmove(q->v + pos, q->v + pos + 1, sizeof *q->v * (size_t)(q->n - pos - 1));
    --q->n;
    return r;
}
/* The entries a split replaces a module with: named_parameters(recurse=False) (a storage once) + named_children(). */
static int accel__bm_q_split(const accel_bm_model *m, accel__bm_q *out, int mi) {
    const accel__bm_mmod *d = &m->mods[mi];
    int i, k;
    out->n = 0;
    for (i = 0; i < (int)stbds_arrlen(d->params); ++i) {
        accel__bm_ref r;
        for (k = 0; k < i; ++k)
            if (m->tens[d->params[k]].storage == m->tens[d->params[i]].storage) break;
        if (k < i) continue;
        r.kind = ACCEL__BM_TEN;
        r.idx = d->params[i];
        if (accel__bm_q_insert(out, out->n, &r, 1)) return -1;
    }
    for (i = 0; i < (int)stbds_arrlen(d->children); ++i) {
        accel__bm_ref r;
        r.kind = ACCEL__BM_MOD;
        r.idx = d->children[i];
        if (accel__bm_q_insert(out, out->n, &r, 1)) return -1;
    }
    return 0;
}
static int accel__bm_has_children(const accel_bm_model *m, accel__bm_ref r) {
    return r.kind == ACCEL__BM_MOD && stbds_arrlen(m->mods[r.idx].children) > 0;
}
static int accel__bm_no_split(const accel_bm_model *m, const accel_bm_map_desc *d, accel__bm_ref r) {
    return r.kind == ACCEL__BM_MOD && d &&
           accel__bm_class_in(m->mods[r.idx].cls, d->no_split_module_classes, d->n_no_split);
}
/* get_max_layer_size: the largest "layer" (no children, or a no-split class) under the given entries; only modules'
   children are descended into. names (may be NULL) receives the layers reaching it. */
static accel_result accel__bm_max_layer(const accel_bm_model *m, const accel_bm_map_desc *d, const accel__bm_sz *s,
                                          const accel__bm_ref *start, int nstart, int modules_only, int64_t *max,
                                          accel__bm_q *names) {
    accel__bm_q q;
    int i;
    memset(&q, 0, sizeof q);
    q.acc = m->acc;
    *max = 0;
    if (names) names->n = 0;
    for (i = 0; i < nstart; ++i)
        if ((!modules_only || start[i].kind == ACCEL__BM_MOD) && accel__bm_q_insert(&q, q.n, &start[i], 1)) break;
    while (q.n > 0 && !q.oom && !(names && names->oom)) {
        accel__bm_ref r = accel__bm_q_take(&q, 0);
        if (accel__bm_has_children(m, r) && !accel__bm_no_split(m, d, r)) {
            const accel__bm_mmod *md = &m->mods[r.idx];
            int k;
            for (k = (int)stbds_arrlen(md->children) - 1; k >= 0; --k) {
                accel__bm_ref c;
                c.kind = ACCEL__BM_MOD;
                c.idx = md->children[k];
                if (accel__bm_q_insert(&q, 0, &c, 1)) break;
            }
        } else {
            int64_t sz = accel__bm_ref_bits(s, r);
            if (sz > *max) {
                *max = sz;
                if (names) names->n = 0;
            }
            if (sz == *max && names) accel__bm_q_insert(names, names->n, &r, 1);
        }
    }
    i = q.oom || (names && names->oom);
    accel__bm_q_free(&q);
    return i ? ACCEL__FAIL(m->acc, ACCEL_ERR_OUT_OF_MEMORY, "max layer size: out of memory") : ACCEL_OK;
}
/* The root's named_parameters(recurse=False) + named_children() + named_buffers(recurse=False). */
static int accel__bm_root_entries(const accel_bm_model *m, accel__bm_q *q) {
    int i;
    if (accel__bm_q_split(m, q, 0)) return -1;
    for (i = 0; i < (int)stbds_arrlen(m->mods[0].buffers); ++i) {
        accel__bm_ref r;
        r.kind = ACCEL__BM_TEN;
        r.idx = m->mods[0].buffers[i];
        if (accel__bm_q_insert(q, q->n, &r, 1)) return -1;
    }
    return 0;
}
ACCEL__DEF accel_result accel_bm_max_layer_size(accel_bm_model *m, const accel_bm_map_desc *d, double *bytes,
                                                  const char **names, int cap, int *n) {
    accel__bm_sz s;
    accel__bm_q roots, layer;
    int64_t max = 0;
    accel_result r;
    int i;
    if (!m || !bytes || cap < 0 || (cap > 0 && (!names || !n)))
        return ACCEL__FAIL(m ? m->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, "max_layer_size: bad arguments");
    r = accel__bm_sizes(m, d, &s);
    if (r != ACCEL_OK) return r;
    memset(&roots, 0, sizeof roots);
    memset(&layer, 0, sizeof layer);
    roots.acc = layer.acc = m->acc;
    if (accel__bm_root_entries(m, &roots))
        r = ACCEL__FAIL(m->acc, ACCEL_ERR_OUT_OF_MEMORY, "max_layer_size: out of memory");
    if (r == ACCEL_OK) r = accel__bm_max_layer(m, d, &s, roots.v, roots.n, 0, &max, &layer);
    if (r == ACCEL_OK) {
        *bytes = accel__bm_bits_bytes(max);
        if (n) *n = layer.n;
        if (names && cap >= layer.n)
            for (i = 0; i < layer.n; ++i) names[i] = accel__bm_ref_name(m, layer.v[i]);
    }
    accel__bm_q_free(&roots);
    accel__bm_q_free(&layer);
    accel__bm_sz_free(m->acc, &s);
    return r;
}

/* get_max_memory for a given dict: sizes in bits, keys checked and put in Accelerate's order (GPUs ascending, mps,
   cpu, disk). */
typedef struct accel__bm_dev { int device; int64_t bits; } accel__bm_dev;
static int accel__bm_dev_rank(int d) { return d >= 0 ? 0 : d == ACCEL_BM_MPS ? 1 : d == ACCEL_BM_CPU ? 2 : 3; }
static int accel__bm_dev_cmp(const void *a, const void *b) {
    const accel__bm_dev *x = (const accel__bm_dev *)a, *y = (const accel__bm_dev *)b;
    int rx = accel__bm_dev_rank(x->device), ry = accel__bm_dev_rank(y->device);
    if (rx != ry) return rx < ry ? -1 : 1;
    return x->device < y->device ? -1 : x->device > y->device;
}
ACCEL__DEF void accel_bm_device_name(int device, char *out, size_t cap) {
    if (!out || !cap) return;
    if (device >= 0) accel__fmt(out, cap, "%d", device);
    else
        accel__fmt(out, cap, "%s",
                   device == ACCEL_BM_CPU    ? "cpu"
                   : device == ACCEL_BM_DISK ? "disk"
                   : device == ACCEL_BM_MPS  ? "mps"
                                             : "?");
}
static accel_result accel__bm_norm_memory(accel *acc, const accel_bm_map_desc *d, accel__bm_dev **out, int *nout) {
    int i, k, n = d ? d->n_max_memory : 0;
    accel__bm_dev *v;
    *out = NULL;
    *nout = 0;
    if (n < 0 || (n > 0 && !d->max_memory))
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "max_memory: bad list (n=%d)", n);
    v = (accel__bm_dev *)accel__st_zalloc(acc, (size_t)n, sizeof *v);
    if (!v) return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "max_memory");
    for (i = 0; i < n; ++i) {
        const accel_bm_memory *e = &d->max_memory[i];
        double b = e->bytes * 8.0;
        if (e->device < 0 && e->device != ACCEL_BM_CPU && e->device != ACCEL_BM_DISK && e->device != ACCEL_BM_MPS) {
            accel_host_free(acc, v);
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                               "Device %d is not recognized, available devices are integers(for "
                               "GPU/XPU), 'mps', 'cpu' and 'disk'",
                               e->device);
        }
        if (!(b >= -4.0e18 && b <= 4.0e18)) { /* also NaN */
            accel_host_free(acc, v);
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "max_memory: %g bytes for device %d is out of range",
                               e->bytes, e->device);
        }
        for (k = 0; k < i; ++k)
            if (v[k].device == e->device) {
                char nm[32];
                accel_host_free(acc, v);
                accel_bm_device_name(e->device, nm, sizeof nm);
                return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "max_memory lists device %s twice", nm);
            }
        v[i].device = e->device;
        v[i].bits = (int64_t)b;
        if ((double)v[i].bits > b) --v[i].bits; /* floor */
    }
    if (n > 1) qsort(v, (size_t)n, sizeof *v, accel__bm_dev_cmp);
    *out = v;
    *nout = n;
    return ACCEL_OK;
}
static int accel__bm_dev_find(const accel__bm_dev *v, int n, int device) {
    int i;
    for (i = 0; i < n; ++i)
        if (v[i].device == device) return i;
    return -1;
}
static int accel__bm_parent_key(const accel_bm_model *m, accel__bm_ref r) { /* the module a dotted key's rsplit gives */
    if (r.kind == ACCEL__BM_MOD) return r.idx == 0 || m->mods[r.idx].parent == 0 ? -1 : m->mods[r.idx].parent;
    return m->tens[r.idx].module == 0 ? -1 : m->tens[r.idx].module;
}

ACCEL__DEF accel_result accel_bm_balanced_memory(accel_bm_model *m, const accel_bm_map_desc *d,
                                                   accel_bm_memory *out, int cap, int *n) {
    accel *acc = m ? m->acc : NULL;
    accel__bm_dev *mem = NULL;
    accel__bm_sz s;
    int nmem = 0, i, k, num = 0, low_zero, *count = NULL, nfound = 0, ncls;
    int64_t total, per_gpu, buffer = 0, leaf_sum = 0, nleaves = 0, mean, big;
    accel_result r;
    if (!m || !n || cap < 0 || (cap > 0 && !out))
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "balanced_memory: bad arguments");
    memset(&s, 0, sizeof s);
    r = accel__bm_norm_memory(acc, d, &mem, &nmem);
    if (r != ACCEL_OK) return r;
    if (accel__bm_dev_find(mem, nmem, ACCEL_BM_DISK) >= 0) {
        accel_host_free(acc, mem);
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                           "get_balanced_memory: max_memory has a \"disk\" key (Accelerate raises "
                           "RuntimeError: Expected one of cpu, cuda, ... device type at start of device string: disk)");
    }
    for (i = 0; i < nmem; ++i) num += mem[i].device >= 0 && mem[i].bits > 0;
    low_zero = d && d->low_zero && num > 1; /* one GPU: no low_zero (and accel never defaults max_memory: no 90%) */
    if (num > 0) r = accel__bm_sizes(m, d, &s);
    if (num > 0 && r == ACCEL_OK) {
        total = s.mod_bits[0];
        per_gpu = total / (8 * (int64_t)(low_zero ? num - 1 : num)) * 8; /* module_sizes[""] // n, in bytes */
        /* the first module of each no-split class, in the dict's order (a tensor's class is Parameter or Tensor) */
        ncls = d ? d->n_no_split : 0;
        count = (int *)accel__st_zalloc(acc, (size_t)stbds_arrlen(m->mods), sizeof(int));
        if (!count) r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "balanced_memory");
        if (r == ACCEL_OK && ncls > 0) {
            const char **fcls = (const char **)accel__st_zalloc(acc, (size_t)ncls, sizeof(char *));
            int distinct = 0;
            for (k = 0; k < ncls; ++k) {
                int j2;
                for (j2 = 0; j2 < k; ++j2)
                    if (d->no_split_module_classes[j2] && d->no_split_module_classes[k] &&
                        !strcmp(d->no_split_module_classes[j2], d->no_split_module_classes[k])) break;
                distinct += j2 == k && d->no_split_module_classes[k];
            }
            if (!fcls) r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "balanced_memory");
            for (i = 0; fcls && i < s.nkeys && nfound < distinct; ++i) {
                accel__bm_ref key = s.keys[i];
                const char *cls;
                if (key.kind == ACCEL__BM_MOD && key.idx == 0) continue;
                cls = key.kind == ACCEL__BM_MOD    ? m->mods[key.idx].cls
                      : m->tens[key.idx].is_buffer ? "Tensor"
                                                   : "Parameter";
                if (!accel__bm_class_in(cls, d->no_split_module_classes, ncls) || accel__bm_class_in(cls, fcls, nfound))
                    continue;
                fcls[nfound++] = cls;
                if (accel__bm_ref_bits(&s, key) > buffer) buffer = accel__bm_ref_bits(&s, key);
            }
            accel_host_free(acc, (void *)fcls);
        }
        if (r == ACCEL_OK) {
            /* get_module_leaves twice: the tensors are the first leaves; the final modules are the module keys left
               without a module key below them */
            for (i = 0; i < s.nkeys; ++i)
                if (s.keys[i].kind == ACCEL__BM_MOD && s.keys[i].idx != 0) {
                    int p = accel__bm_parent_key(m, s.keys[i]);
                    if (p >= 0) count[p]++;
                }
            for (i = 0; i < s.nkeys; ++i)
                if (s.keys[i].kind == ACCEL__BM_MOD && s.keys[i].idx != 0 && count[s.keys[i].idx] == 0) {
                    leaf_sum += s.mod_bits[s.keys[i].idx];
                    ++nleaves;
                }
            mean = leaf_sum / (8 * (nleaves > 0 ? nleaves : 1)) * 8; /* int(sum / max(len, 1)) bytes */
            big = buffer > mean ? buffer : mean;
            per_gpu += (5 * big) / 32 * 8; /* int(1.25 * max(buffer, mean)) bytes */
            /* every GPU with memory but the last: min(per_gpu, its max); with low_zero GPU 0 keeps its max here */
            for (i = 0, k = -1; i < nmem; ++i)
                if (mem[i].device >= 0 && mem[i].bits > 0) k = i; /* the last one */
            for (i = 0; i < nmem; ++i) {
                int64_t want;
                if (mem[i].device < 0 || mem[i].bits <= 0 || i == k) continue;
                want = low_zero && mem[i].device == 0 ? mem[i].bits : per_gpu;
                if (want < mem[i].bits) mem[i].bits = want;
            }
            if (low_zero) {
                int64_t sum = 0, min_zero;
                int z = accel__bm_dev_find(mem, nmem, 0);
                for (k = 1; k < num && r == ACCEL_OK; ++k) {
                    int at = accel__bm_dev_find(mem, nmem, k);
                    if (at < 0)
                        r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                                        "get_balanced_memory(low_zero): max_memory has no GPU %d "
                                        "(Accelerate sums GPUs 1..n-1 by number and raises KeyError: %d)",
                                        k, k);
                    else sum += mem[at].bits;
                }
                if (r == ACCEL_OK && z < 0)
                    r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                                    "get_balanced_memory(low_zero): max_memory has no GPU 0 (Accelerate "
                                    "raises KeyError: 0)");
                if (r == ACCEL_OK) {
                    min_zero = total - sum > 0 ? total - sum : 0;
                    if (min_zero < mem[z].bits) mem[z].bits = min_zero;
                }
            }
        }
    }
    if (r == ACCEL_OK) {
        *n = nmem;
        if (cap >= nmem)
            for (i = 0; i < nmem; ++i) {
                out[i].device = mem[i].device;
                out[i].bytes = accel__bm_bits_bytes(mem[i].bits);
            }
    }
    accel_host_free(acc, count);
    accel_host_free(acc, mem);
    accel__bm_sz_free(acc, &s);
    return r;
}

/* ------------------------------------------------------------- 3. infer_auto_device_map, clean_device_map (§9) */
/* "name." is a substring of "k." (Accelerate's test of whether a tied parameter is inside a module: a substring, not a
   prefix, test — kept, quirk included). */
static int accel__bm_dotin(const char *name, const char *k) {
    size_t ln = strlen(name), lk = strlen(k), p;
    if (ln > lk) return 0;
    for (p = 0; p + ln <= lk; ++p)
        if (!memcmp(k + p, name, ln) && (p + ln == lk || k[p + ln] == '.')) return 1;
    return 0;
}
static int accel__bm_startswith_dot(const char *s, const char *prefix) { /* s.startswith(prefix + ".") */
    size_t l = strlen(prefix);
    return !strncmp(s, prefix, l) && s[l] == '.';
}

/* The ordered dict device_map. */
typedef struct accel__bm_dmap { accel_bm_placement *v; int n, cap; accel *acc; int oom; } accel__bm_dmap;
static int accel__bm_dmap_find(const accel__bm_dmap *dm, const char *name) {
    int i;
    for (i = 0; i < dm->n; ++i)
        if (!strcmp(dm->v[i].name, name)) return i;
    return -1;
}
static void accel__bm_dmap_set(accel__bm_dmap *dm, const char *name, int device) { /* d[name] = device */
    int i = accel__bm_dmap_find(dm, name);
    if (i >= 0) { dm->v[i].device = device; return; }
    if (dm->oom) return;
    if (dm->n == dm->cap) {
        int nc = dm->cap ? dm->cap * 2 : 16;
        accel_bm_placement *nv = (accel_bm_placement *)accel_host_alloc(dm->acc, sizeof *nv * (size_t)nc);
        if (!nv) { dm->oom = 1; return; }
        if (dm->n) memcpy(nv, dm->v, sizeof *nv * (size_t)dm->n);
        accel_host_free(dm->acc, dm->v);
        dm->v = nv;
        dm->cap = nc;
    }
    dm->v[dm->n].name = name;
    dm->v[dm->n++].device = device;
}
/* clean_device_map(device_map, module_name): a prefix whose entries share one device becomes one entry (appended at
   the end, as a Python dict does), then the same for each child prefix. Accelerate walks the children as a Python set
   (an order that changes from run to run); accel takes them in the order they first appear in the map. `module` is
   a name owned by the model (every prefix of a key is one of its modules). */
static void accel__bm_clean(const accel_bm_model *m, accel__bm_dmap *dm, const char *module, int depth) {
    size_t ml = strlen(module);
    int i, k, nvals = 0, dev = 0, same = 1, nkids = 0;
    const char **kids;
    for (i = 0; i < dm->n; ++i) {
        if (ml && !accel__bm_startswith_dot(dm->v[i].name, module)) continue;
        if (nvals++ == 0) dev = dm->v[i].device;
        else if (dm->v[i].device != dev) same = 0;
    }
    if (same && nvals > 1) {
        for (i = k = 0; i < dm->n; ++i)
            if (ml && !accel__bm_startswith_dot(dm->v[i].name, module)) dm->v[k++] = dm->v[i];
        dm->n = k;
        accel__bm_dmap_set(dm, module, dev);
    }
    if (dm->oom || depth > 10000) return;
    /* the children: every key under module (longer than it), cut one component below it, first appearance first */
    kids = (const char **)accel_host_alloc(dm->acc, sizeof(char *) * (size_t)(dm->n ? dm->n : 1));
    if (!kids) { dm->oom = 1; return; }
    for (i = 0; i < dm->n; ++i) {
        const char *key = dm->v[i].name, *end;
        size_t cl;
        char *child;
        int idx;
        if (ml ? !accel__bm_startswith_dot(key, module) : !*key) continue;
        end = strchr(key + (ml ? ml + 1 : 0), '.');
        cl = end ? (size_t)(end - key) : strlen(key);
        for (k = 0; k < nkids; ++k)
            if (strlen(kids[k]) == cl && !strncmp(kids[k], key, cl)) break;
        if (k < nkids) continue;
        child = accel__st_strndup(dm->acc, key, cl);
        if (!child) { dm->oom = 1; break; }
        idx = accel__bm_mfind(m, child, &k);
        accel_host_free(dm->acc, child);
        if (idx >= 0) kids[nkids++] = k == ACCEL__BM_MOD ? m->mods[idx].name : m->tens[idx].t.name;
    }
    for (k = 0; k < nkids && !dm->oom; ++k) accel__bm_clean(m, dm, kids[k], depth + 1);
    accel_host_free(dm->acc, (void *)kids);
}

/* Tied groups as Accelerate's find_tied_parameters gives them: per group its names sorted; groups in model order. */
typedef struct accel__bm_ties { const char ***g; int *gn; int n; } accel__bm_ties;
static void accel__bm_ties_free(accel *acc, accel__bm_ties *t) {
    int i;
    for (i = 0; i < t->n; ++i) accel_host_free(acc, (void *)t->g[i]);
    accel_host_free(acc, (void *)t->g);
    accel_host_free(acc, t->gn);
    memset(t, 0, sizeof *t);
}
static accel_result accel__bm_ties_make(const accel_bm_model *m, accel__bm_ties *t) {
    int ng = (int)stbds_arrlen(m->groups), nt = (int)stbds_arrlen(m->tens), i, k;
    memset(t, 0, sizeof *t);
    if (!ng) return ACCEL_OK;
    t->g = (const char ***)accel__st_zalloc(m->acc, (size_t)ng, sizeof(char **));
    t->gn = (int *)accel__st_zalloc(m->acc, (size_t)ng, sizeof(int));
    if (!t->g || !t->gn) return accel__fail_wrap(m->acc, ACCEL_ERR_OUT_OF_MEMORY, "tied parameters");
    t->n = ng;
    for (i = 0; i < ng; ++i) {
        int c = 0;
        for (k = 0; k < nt; ++k) c += m->tens[k].storage == m->groups[i];
        t->g[i] = (const char **)accel__st_zalloc(m->acc, (size_t)c, sizeof(char *));
        if (!t->g[i]) return accel__fail_wrap(m->acc, ACCEL_ERR_OUT_OF_MEMORY, "tied parameters");
        for (k = 0; k < nt; ++k)
            if (m->tens[k].storage == m->groups[i]) t->g[i][t->gn[i]++] = m->tens[k].t.name;
        qsort((void *)t->g[i], (size_t)t->gn[i], sizeof(char *), accel__st_strp_cmp);
    }
    return ACCEL_OK;
}
/* The tied parameters that matter for `name`: of every group with a member inside it and one outside, the members
   outside ("name." in "k." per member). Appended to *out (a list of names, acc's allocator, grown by doubling). */
typedef struct accel__bm_names { const char **v; int n, cap; } accel__bm_names;
static int accel__bm_names_add(accel *acc, accel__bm_names *l, const char *s) {
    if (l->n == l->cap) {
        int nc = l->cap ? 2 * l->cap : 8;
        const char **nv = (const char **)accel_host_alloc(acc, sizeof(char *) * (size_t)nc);
        if (!nv) return -1;
        if (l->n) memcpy((void *)nv, (const void *)l->v, sizeof(char *) * (size_t)l->n);
        accel_host_free(acc, (void *)l->v);
        l->v = nv;
        l->cap = nc;
    }
    l->v[l->n++] = s;
    return 0;
}
static int accel__bm_tied_params(accel *acc, const accel__bm_ties *t, const char *name, accel__bm_names *out) {
    int g, k;
    out->n = 0;
    for (g = 0; g < t->n; ++g) {
        int any = 0, all = 1;
        for (k = 0; k < t->gn[g]; ++k) {
            int in = accel__bm_dotin(name, t->g[g][k]);
            any |= in;
            all &= in;
        }
        if (!any || all) continue;
        for (k = 0; k < t->gn[g]; ++k)
            if (!accel__bm_dotin(name, t->g[g][k]) && accel__bm_names_add(acc, out, t->g[g][k])) return -1;
    }
    return 0;
}
/* get_module_size_with_ties: the module plus, per tied parameter, the first listed entry holding it (minus the
   parameter itself). Accelerate raises IndexError when no listed entry holds one; so does accel (an error). */
static accel_result accel__bm_size_with_ties(const accel_bm_model *m, const accel__bm_sz *s,
                                             const accel__bm_names *tied, int64_t size, const accel__bm_q *list,
                                             int64_t *with, accel__bm_q *mods, const char *who) {
    int i, k;
    *with = size;
    mods->n = 0;
    for (i = 0; i < tied->n; ++i) {
        int kind = -1, idx;
        for (k = 0; k < list->n; ++k)
            if (accel__bm_startswith_dot(tied->v[i], accel__bm_ref_name(m, list->v[k]))) break;
        if (k == list->n)
            return ACCEL__FAIL(m->acc, ACCEL_ERR_INVALID_ARGUMENT,
                               "infer_auto_device_map: \"%.200s\" is tied to \"%.200s\", which no "
                               "module left to place holds (Accelerate raises IndexError here)",
                               who, tied->v[i]);
        if (accel__bm_q_insert(mods, mods->n, &list->v[k], 1))
            return ACCEL__FAIL(m->acc, ACCEL_ERR_OUT_OF_MEMORY, "out of memory");
        idx = accel__bm_mfind(m, tied->v[i], &kind);
        *with += accel__bm_ref_bits(s, list->v[k]) - (idx >= 0 && kind == ACCEL__BM_TEN ? s->ten_bits[idx] : 0);
    }
    return ACCEL_OK;
}

/* fallback_allocate: a depth-first search of the entries left for one (with its ties) that fits `limit`; the entries
   above it are expanded (parameters + children) so it can be taken out. found = 0 when none fits. */
static accel_result accel__bm_fallback(const accel_bm_model *m, const accel_bm_map_desc *d, const accel__bm_sz *s,
                                         const accel__bm_ties *ties, accel__bm_q *list, int64_t limit, int *found,
                                         accel__bm_ref *hit) {
    accel__bm_q search, kids, tmods;
    accel__bm_names tied;
    accel_result r = ACCEL_OK;
    const char *name = NULL;
    int i, k;
    *found = 0;
    if (limit < 0) return ACCEL_OK; /* convert_file_size_to_int raises ValueError: no fallback */
    memset(&search, 0, sizeof search);
    memset(&kids, 0, sizeof kids);
    memset(&tmods, 0, sizeof tmods);
    memset(&tied, 0, sizeof tied);
    search.acc = kids.acc = tmods.acc = m->acc;
    if (accel__bm_q_insert(&search, 0, list->v, list->n))
        r = ACCEL__FAIL(m->acc, ACCEL_ERR_OUT_OF_MEMORY, "fallback: out of memory");
    while (r == ACCEL_OK && search.n > 0) {
        accel__bm_ref e = accel__bm_q_take(&search, 0);
        int64_t with = 0;
        name = accel__bm_ref_name(m, e);
        if (accel__bm_tied_params(m->acc, ties, name, &tied)) {
            r = ACCEL__FAIL(m->acc, ACCEL_ERR_OUT_OF_MEMORY, "fallback: out of memory");
            break;
        }
        r = accel__bm_size_with_ties(m, s, &tied, accel__bm_ref_bits(s, e), &search, &with, &tmods, name);
        if (r != ACCEL_OK) break;
        if (with <= limit) {
            *found = 1;
            *hit = e;
            break;
        }
        if (!accel__bm_has_children(m, e) || accel__bm_no_split(m, d, e)) continue;
        if (accel__bm_q_split(m, &kids, e.idx) || accel__bm_q_insert(&search, 0, kids.v, kids.n))
            r = ACCEL__FAIL(m->acc, ACCEL_ERR_OUT_OF_MEMORY, "fallback: out of memory");
    }
    if (r == ACCEL_OK && *found) {
        /* expand every prefix of the found name that is in the list, outermost first, then take the found entry */
        const char *p;
        for (p = strchr(name, '.'); p && r == ACCEL_OK; p = strchr(p + 1, '.')) {
            size_t pl = (size_t)(p - name);
            for (i = 0; i < list->n; ++i) {
                const char *ln = accel__bm_ref_name(m, list->v[i]);
                if (strlen(ln) == pl && !strncmp(ln, name, pl)) break;
            }
            if (i == list->n) continue;
            if (list->v[i].kind != ACCEL__BM_MOD) continue; /* a tensor has nothing inside it */
            k = list->v[i].idx;
            (void)accel__bm_q_take(list, i);
            if (accel__bm_q_split(m, &kids, k) || accel__bm_q_insert(list, i, kids.v, kids.n))
                r = ACCEL__FAIL(m->acc, ACCEL_ERR_OUT_OF_MEMORY, "fallback: out of memory");
        }
        for (i = 0; r == ACCEL_OK && i < list->n; ++i)
            if (list->v[i].kind == hit->kind && list->v[i].idx == hit->idx) break;
        if (r == ACCEL_OK && i == list->n)
            r = ACCEL__FAIL(m->acc, ACCEL_ERR_STATE, "fallback: \"%.200s\" not found after expansion", name);
        if (r == ACCEL_OK) (void)accel__bm_q_take(list, i);
    }
    accel__bm_q_free(&search);
    accel__bm_q_free(&kids);
    accel__bm_q_free(&tmods);
    accel_host_free(m->acc, (void *)tied.v);
    return r;
}

/* infer_auto_device_map, line by line (docs/semantics.md §9). */
static accel_result accel__bm_infer(accel_bm_model *m, const accel_bm_map_desc *d, accel__bm_dmap *dm) {
    accel *acc = m->acc;
    accel__bm_dev *mem = NULL, *devs = NULL;
    accel__bm_sz s;
    accel__bm_ties ties;
    accel__bm_q q, maxn, kids, tmods, tmp;
    accel__bm_names tied;
    int64_t *used = NULL, max_layer = 0;
    int nmem = 0, ndev, i, k, cur = 0, main0 = -100, main1 = -100; /* -100: no device */
    long guard = 0, guard_max;
    accel_result r;
    memset(&s, 0, sizeof s);
    memset(&ties, 0, sizeof ties);
    memset(&q, 0, sizeof q);
    memset(&maxn, 0, sizeof maxn);
    memset(&kids, 0, sizeof kids);
    memset(&tmods, 0, sizeof tmods);
    memset(&tmp, 0, sizeof tmp);
    memset(&tied, 0, sizeof tied);
    q.acc = maxn.acc = kids.acc = tmods.acc = tmp.acc = acc;
    r = accel__bm_norm_memory(acc, d, &mem, &nmem);
    /* devices: max_memory's keys plus "disk"; main devices: the first GPU and the CPU (or mps alone, or the CPU) */
    if (r == ACCEL_OK) {
        devs = (accel__bm_dev *)accel__st_zalloc(acc, (size_t)nmem + 1, sizeof *devs);
        used = (int64_t *)accel__st_zalloc(acc, (size_t)nmem + 1, sizeof(int64_t));
        if (!devs || !used) r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "infer_auto_device_map");
    }
    if (r != ACCEL_OK) goto done;
    memcpy(devs, mem, sizeof *devs * (size_t)nmem);
    ndev = nmem;
    if (accel__bm_dev_find(devs, ndev, ACCEL_BM_DISK) < 0) devs[ndev++].device = ACCEL_BM_DISK;
    if (accel__bm_dev_find(devs, ndev, ACCEL_BM_MPS) >= 0) main0 = ACCEL_BM_MPS;
    else {
        for (i = 0; i < ndev; ++i)
            if (devs[i].device >= 0) break;
        if (i < ndev) { main0 = devs[i].device; main1 = ACCEL_BM_CPU; }
        else main0 = ACCEL_BM_CPU; /* no GPU: the CPU alone */
    }
    r = accel__bm_sizes(m, d, &s);
    if (r == ACCEL_OK) r = accel__bm_ties_make(m, &ties);
    if (r == ACCEL_OK && accel__bm_root_entries(m, &q))
        r = ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "infer_auto_device_map: out of memory");
    /* the reserve: the largest layer of the initial entries (tensors included, this once) */
    if (r == ACCEL_OK) r = accel__bm_max_layer(m, d, &s, q.v, q.n, 0, &max_layer, &maxn);
    guard_max = 64L * (long)(stbds_arrlen(m->mods) + stbds_arrlen(m->tens) + 16) * (long)(ndev + 1);
    while (r == ACCEL_OK && q.n > 0) {
        accel__bm_ref e = accel__bm_q_take(&q, 0);
        const char *name = accel__bm_ref_name(m, e);
        int64_t size = accel__bm_ref_bits(&s, e), cap = 0, reserve = 0, with = 0;
        int dev, is_disk, is_main, split;
        if (++guard > guard_max) { r = ACCEL__FAIL(acc, ACCEL_ERR_STATE, "infer_auto_device_map: no progress"); break; }
        /* the largest remaining layer: drop the names taken; recompute (modules only) when none is left */
        for (i = k = 0; i < maxn.n; ++i) {
            const char *nn = accel__bm_ref_name(m, maxn.v[i]);
            if (strcmp(nn, name) && !accel__bm_startswith_dot(nn, name)) maxn.v[k++] = maxn.v[i];
        }
        maxn.n = k;
        if (maxn.n == 0) r = accel__bm_max_layer(m, d, &s, q.v, q.n, 1, &max_layer, &maxn);
        if (r != ACCEL_OK) break;
        if (accel__bm_tied_params(acc, &ties, name, &tied)) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "out of memory");
            break;
        }
        dev = devs[cur].device;
        is_disk = dev == ACCEL_BM_DISK;
        if (!is_disk) cap = devs[cur].bits;
        is_main = dev == main0 || dev == main1;
        if (is_main && !is_disk) {
            cap -= max_layer;
            reserve = max_layer;
        }
        r = accel__bm_size_with_ties(m, &s, &tied, size, &q, &with, &tmods, name);
        if (r != ACCEL_OK) break;
        /* 1. it fits with its tied modules */
        if (is_disk || used[cur] + with <= cap) {
            used[cur] += with;
            accel__bm_dmap_set(dm, name, dev);
            for (i = 0; i < tmods.n; ++i) {
                const char *tn = accel__bm_ref_name(m, tmods.v[i]);
                for (k = 0; k < q.n; ++k)
                    if (!strcmp(accel__bm_ref_name(m, q.v[k]), tn)) break;
                if (k < q.n) (void)accel__bm_q_take(&q, k);
                accel__bm_dmap_set(dm, tn, dev);
            }
            if (dm->oom) r = ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "infer_auto_device_map: out of memory");
            continue;
        }
        /* 2. it fits alone: split one of its tied modules */
        if (tied.n > 0 && used[cur] + size <= cap) {
            split = 0;
            for (i = 0; i < tmods.n && !split; ++i) {
                accel__bm_ref t = tmods.v[i];
                const char *tn = accel__bm_ref_name(m, t);
                if (!accel__bm_has_children(m, t) || accel__bm_no_split(m, d, t)) continue;
                for (k = 0; k < q.n; ++k)
                    if (!strcmp(accel__bm_ref_name(m, q.v[k]), tn)) break;
                if (k == q.n) {
                    r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                                    "infer_auto_device_map: tied module \"%.200s\" is not "
                                    "in the queue (Accelerate raises IndexError here)",
                                    tn);
                    break;
                }
                /* [module] + queue[:k] + children + queue[k+1:] */
                (void)accel__bm_q_take(&q, k);
                if (accel__bm_q_split(m, &kids, t.idx) || accel__bm_q_insert(&q, k, kids.v, kids.n) ||
                    accel__bm_q_insert(&q, 0, &e, 1)) {
                    r = ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "out of memory");
                    break;
                }
                r = accel__bm_max_layer(m, d, &s, q.v, q.n, 1, &max_layer, &maxn);
                split = 1;
            }
            if (r != ACCEL_OK) break;
            if (split) continue;
        }
        /* 3. it does not fit: split it if it can be split */
        if (used[cur] + size >= cap && accel__bm_has_children(m, e) && !accel__bm_no_split(m, d, e)) {
            if (accel__bm_q_split(m, &kids, e.idx) || accel__bm_q_insert(&q, 0, kids.v, kids.n)) {
                r = ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "out of memory");
                break;
            }
            r = accel__bm_max_layer(m, d, &s, q.v, q.n, 1, &max_layer, &maxn);
            continue;
        }
        /* 4. nothing on this device yet: look for a smaller entry that fits (fallback_allocation) */
        if (used[cur] == 0 && d && d->fallback_allocation && !is_disk) {
            int found = 0;
            accel__bm_ref hit;
            int64_t limit = devs[cur].bits - (max_layer > with ? max_layer : with);
            r = accel__bm_fallback(m, d, &s, &ties, &q, limit - used[cur], &found, &hit);
            if (r != ACCEL_OK) break;
            if (found) {
                if (accel__bm_q_insert(&q, 0, &e, 1) || accel__bm_q_insert(&q, 0, &hit, 1)) {
                    r = ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "out of memory");
                    break;
                }
                continue;
            }
        }
        if (used[cur] == 0) {
            char nm[32];
            accel_bm_device_name(dev, nm, sizeof nm);
            accel_log(acc, ACCEL_LOG_INFO,
                      "infer_auto_device_map: nothing fits on device %s: it needs at least %.0f bytes", nm,
                      accel__bm_bits_bytes(with + reserve));
        }
        /* 5. the next device; the reserve counts as used on the one left behind */
        used[cur] += reserve;
        ++cur;
        if (cur >= ndev) { r = ACCEL__FAIL(acc, ACCEL_ERR_STATE, "infer_auto_device_map: ran out of devices"); break; }
        if (accel__bm_q_insert(&q, 0, &e, 1)) r = ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "out of memory");
    }
    if (r == ACCEL_OK && (q.oom || maxn.oom || dm->oom))
        r = ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "infer_auto_device_map: out of memory");
    if (r == ACCEL_OK && !(d && d->no_clean_result)) {
        accel__bm_clean(m, dm, "", 0);
        if (dm->oom) r = ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "clean_device_map: out of memory");
    }
done:
    accel_host_free(acc, mem);
    accel_host_free(acc, devs);
    accel_host_free(acc, used);
    accel__bm_sz_free(acc, &s);
    accel__bm_ties_free(acc, &ties);
    accel__bm_q_free(&q);
    accel__bm_q_free(&maxn);
    accel__bm_q_free(&kids);
    accel__bm_q_free(&tmods);
    accel__bm_q_free(&tmp);
    accel_host_free(acc, (void *)tied.v);
    return r;
}
ACCEL__DEF accel_result accel_bm_infer_device_map(accel_bm_model *m, const accel_bm_map_desc *d,
                                                    accel_bm_placement *out, int cap, int *n) {
    accel__bm_dmap dm;
    accel_result r;
    if (!m || !n || cap < 0 || (cap > 0 && !out))
        return ACCEL__FAIL(m ? m->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, "infer_device_map: bad arguments");
    memset(&dm, 0, sizeof dm);
    dm.acc = m->acc;
    r = accel__bm_infer(m, d, &dm);
    if (r == ACCEL_OK) {
        *n = dm.n;
        if (cap >= dm.n && dm.n) memcpy(out, dm.v, sizeof *out * (size_t)dm.n);
    }
    accel_host_free(m->acc, dm.v);
    return r;
}

ACCEL__DEF accel_result accel_bm_parse_max_memory(accel *acc, const char *s, accel_bm_memory *out, int cap, int *n) {
    accel_bm_memory *v = NULL;
    accel_bm_map_desc d;
    accel__bm_dev *norm = NULL;
    const char *p;
    int cnt = 0, k = 0, nn = 0, i;
    accel_result r = ACCEL_OK;
    if (!s || !n || cap < 0 || (cap > 0 && !out))
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "parse_max_memory: bad arguments");
    for (p = s; *p; ++p) cnt += *p == ',';
    v = (accel_bm_memory *)accel__st_zalloc(acc, (size_t)cnt + 1, sizeof *v);
    if (!v) return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "parse_max_memory");
    for (p = s; r == ACCEL_OK && *s;) { /* "" is the empty dict */
        const char *end = strchr(p, ','), *eq;
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char key[64], val[128];
        uint64_t bytes = 0;
        eq = (const char *)memchr(p, '=', len);
        if (!eq || (size_t)(eq - p) >= sizeof key || len - (size_t)(eq - p) - 1 >= sizeof val) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                            "max_memory \"%.200s\": expected DEVICE=SIZE[,DEVICE=SIZE...] (DEVICE: a GPU "
                            "number, cpu, disk or mps)",
                            s);
            break;
        }
        memcpy(key, p, (size_t)(eq - p));
        key[eq - p] = 0;
        memcpy(val, eq + 1, len - (size_t)(eq - p) - 1);
        val[len - (size_t)(eq - p) - 1] = 0;
        if (!strcmp(key, "cpu")) v[k].device = ACCEL_BM_CPU;
        else if (!strcmp(key, "disk")) v[k].device = ACCEL_BM_DISK;
        else if (!strcmp(key, "mps")) v[k].device = ACCEL_BM_MPS;
        else {
            char *e2 = NULL;
            long g = key[0] >= '0' && key[0] <= '9' ? strtol(key, &e2, 10) : -1;
            if (g < 0 || !e2 || *e2 || g > 1000000) {
                r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                                "Device %.60s is not recognized, available devices are integers(for "
                                "GPU/XPU), 'mps', 'cpu' and 'disk'",
                                key);
                break;
            }
            v[k].device = (int)g;
        }
        r = accel_parse_size(acc, val, &bytes);
        if (r != ACCEL_OK) break;
        v[k++].bytes = (double)bytes;
        if (!end) break;
        p = end + 1;
    }
    if (r == ACCEL_OK) {
        memset(&d, 0, sizeof d);
        d.max_memory = v;
        d.n_max_memory = k;
        r = accel__bm_norm_memory(acc, &d, &norm, &nn);
    }
    if (r == ACCEL_OK) {
        *n = nn;
        if (cap >= nn)
            for (i = 0; i < nn; ++i) {
                out[i].device = norm[i].device;
                out[i].bytes = accel__bm_bits_bytes(norm[i].bits);
            }
    }
    accel_host_free(acc, v);
    accel_host_free(acc, norm);
    return r;
}

/* ----------------------------------------------------------------------------------- 4. dtype conversion on load */
/* Between F64, F32, F16 and BF16 through the core's codec (CUDA's rounding; F64 → a 16-bit type goes through F32, as
   PyTorch's conversion does); any other pair only to itself. */
static int accel__bm_convertible(accel_dtype from, accel_dtype to) {
    int ff = from == ACCEL_F64 || from == ACCEL_F32 || from == ACCEL_F16 || from == ACCEL_BF16;
    int tf = to == ACCEL_F64 || to == ACCEL_F32 || to == ACCEL_F16 || to == ACCEL_BF16;
    return from == to || (ff && tf);
}
static void accel__bm_convert(void *dst, accel_dtype to, const void *src, accel_dtype from, size_t n) {
    const unsigned char *s = (const unsigned char *)src;
    unsigned char *o = (unsigned char *)dst;
    size_t i, si = accel_dtype_size(from), so = accel_dtype_size(to);
    if (from == to) {
        if (n) memcpy(dst, src, n * si);
        return;
    }
    for (i = 0; i < n; ++i, s += si, o += so) {
        double dv = 0;
        float f;
        uint64_t u64;
        if (from == ACCEL_F64) {
            u64 = accel__get_u64(s);
            memcpy(&dv, &u64, 8);
            f = (float)dv;
        } else if (from == ACCEL_F32) f = accel_bits_f32(accel__get_u32(s));
        else if (from == ACCEL_F16) f = accel_f16_to_f32(accel__get_u16(s));
        else f = accel_bf16_to_f32(accel__get_u16(s));
        if (to == ACCEL_F64) {
            if (from != ACCEL_F64) dv = (double)f;
            memcpy(&u64, &dv, 8);
            accel__put_u64(o, u64);
        } else if (to == ACCEL_F32) accel__put_u32(o, accel_f32_bits(f));
        else if (to == ACCEL_F16) accel__put_u16(o, accel_f32_to_f16(f));
        else accel__put_u16(o, accel_f32_to_bf16(f));
    }
}
static int accel__bm_real_gpu(const accel *acc) {
#ifdef ACCEL_WITH_CUDA
    return acc && acc->device >= 0;
#else
    (void)acc;
    return 0;
#endif
}
/* -------------------------------------------------------------------------------------------------- 5. dispatch */
typedef struct accel__bm_place {
    void *ptr;          /* device or host buffer, or the mapping of a "disk" tensor */
    int device;
    accel_dtype dtype;  /* what ptr holds */
    accel_dtype target; /* what a fetch delivers */
    int own;            /* 0: a mapping, 1: host, 2: pinned, 3: device */
    int64_t numel;
} accel__bm_place;
struct accel_bm_dispatch {
    accel *acc;
    accel_bm_model *m;
    accel__bm_place *pl;   /* per model tensor (an alias uses its storage's) */
    accel_st_file **files; /* stb_ds: the checkpoint's files, kept open for "disk" tensors */
    accel_st_file *offload;
};
static void accel__bm_place_free(accel *acc, accel__bm_place *p) {
    if (p->own == 1) accel_host_free(acc, p->ptr);
    else if (p->own == 2) accel_pinned_free(acc, p->ptr);
    else if (p->own == 3) {
#ifdef ACCEL_WITH_CUDA
        int prev = -1;
        if (accel__bm_real_gpu(acc) && cudaGetDevice(&prev) == cudaSuccess && cudaSetDevice(p->device) == cudaSuccess) {
            accel_device_free(acc, p->ptr);
            (void)cudaSetDevice(prev);
        } else
#endif
            accel_device_free(acc, p->ptr);
    }
    p->ptr = NULL;
    p->own = 0;
}
ACCEL__DEF void accel_bm_dispatch_destroy(accel_bm_dispatch *x) {
    int i;
    if (!x) return;
    for (i = 0; x->pl && i < (int)stbds_arrlen(x->m->tens); ++i) accel__bm_place_free(x->acc, &x->pl[i]);
    for (i = 0; i < (int)stbds_arrlen(x->files); ++i) accel_st_file_destroy(x->files[i]);
    stbds_arrfree(x->files);
    accel_st_file_destroy(x->offload);
    accel_host_free(x->acc, x->pl);
    accel_host_free(x->acc, x);
}

/* The checkpoint's files, as Accelerate's load_checkpoint_in_model finds them. */
static accel_result accel__bm_open_index(accel *acc, const char *index_path, accel_st_file ***files) {
    char *data = NULL, dir[4096], path[8400];
    size_t n = 0, bad = 0;
    accel__st_json j;
    int root, wm, c, k;
    const char **names = NULL;
    int nn = 0;
    accel_result r = accel__read_file(acc, index_path, &data, &n, (size_t)100000000);
    if (r != ACCEL_OK) return r;
    if (!accel__utf8_valid((const unsigned char *)data, n, &bad)) {
        accel_host_free(acc, data);
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.400s is not valid UTF-8 (byte %lu)", index_path,
                           (unsigned long)bad);
    }
    root = accel__st_json_parse(&j, acc, data, n);
    if (root < 0) r = accel__st_json_failed(acc, &j, index_path);
    wm = r == ACCEL_OK ? accel__st_jget(&j, root, "weight_map") : -1;
    if (r == ACCEL_OK && wm < 0) wm = root; /* Accelerate: index["weight_map"] if present, else the index itself */
    if (r == ACCEL_OK && j.nodes[wm].type != ACCEL__ST_J_OBJ)
        r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.400s: no weight_map object", index_path);
    if (r == ACCEL_OK) {
        names = (const char **)accel__st_zalloc(acc, (size_t)j.nodes[wm].count, sizeof(char *));
        if (!names) r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "%.400s", index_path);
    }
    for (c = r == ACCEL_OK ? j.nodes[wm].first : -1; c >= 0 && r == ACCEL_OK; c = j.nodes[c].next) {
        if (!accel__bm_jis_str(&j, c) || !accel__st_safe_file_name(accel__st_jstr(&j, c))) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.400s: weight_map entry '%.200s' is not a plain file name",
                            index_path, accel__st_jkeyp(&j, c));
            break;
        }
        for (k = 0; k < nn; ++k)
            if (!strcmp(names[k], accel__st_jstr(&j, c))) break;
        if (k == nn) names[nn++] = accel__st_jstr(&j, c);
    }
    if (r == ACCEL_OK) qsort((void *)names, (size_t)nn, sizeof *names, accel__st_strp_cmp); /* sorted(set(values)) */
    accel__dirname(index_path, dir, sizeof dir);
    for (k = 0; k < nn && r == ACCEL_OK; ++k) {
        accel_st_file *f = NULL;
        accel__fmt(path, sizeof path, "%s/%s", dir, names[k]);
        r = accel_st_file_open(acc, path, &f);
        if (r == ACCEL_OK && ACCEL__ARR_PUT(*files, f) != 0) {
            accel_st_file_destroy(f);
            r = ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "dispatch: out of memory");
        }
    }
    accel_host_free(acc, (void *)names);
    accel__st_json_free(&j);
    accel_host_free(acc, data);
    return r;
}
static accel_result accel__bm_open_checkpoint(accel *acc, const char *ck, accel_st_file ***files) {
    char path[4200];
    size_t l = strlen(ck);
    accel_st_file *f = NULL;
    accel_result r;
    if (accel__is_file(ck)) {
        if (l >= 5 && !strcmp(ck + l - 5, ".json")) return accel__bm_open_index(acc, ck, files);
        r = accel_st_file_open(acc, ck, &f);
    } else if (accel__is_dir(ck)) {
        DIR *d;
        struct dirent *de;
        int nidx = 0;
        char idx[4200];
        accel__fmt(path, sizeof path, "%s/model.safetensors", ck);
        if (accel__is_file(path)) r = accel_st_file_open(acc, path, &f);
        else {
            d = opendir(ck);
            if (!d) return accel__io_fail(acc, "cannot list", ck);
            while ((de = readdir(d)) != NULL) {
                size_t dl = strlen(de->d_name);
                if (dl > 11 && !strcmp(de->d_name + dl - 11, ".index.json")) {
                    ++nidx;
                    accel__fmt(idx, sizeof idx, "%s/%s", ck, de->d_name);
                }
            }
            closedir(d);
            if (nidx > 1)
                return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                                   "%.400s containing more than one `.index.json` file, delete the irrelevant ones.",
                                   ck);
            if (nidx == 1) return accel__bm_open_index(acc, idx, files);
            accel__fmt(path, sizeof path, "%s/index.json", ck);
            if (!accel__is_file(path))
                return ACCEL__FAIL(
                    acc, ACCEL_ERR_NOT_FOUND,
                    "%.400s is not a folder containing a `.index.json` file or a pytorch_model.bin "
                    "or a model.safetensors file (accel reads safetensors, and offload folders with an index.json)",
                    ck);
            r = accel_bm_offload_open(acc, ck, &f);
        }
    } else {
        return ACCEL__FAIL(acc, ACCEL_ERR_NOT_FOUND,
                           "`checkpoint` should be the path to a file containing a whole state dict, or the index "
                           "of a sharded checkpoint, or a folder containing a sharded checkpoint or the whole state "
                           "dict, but got %.400s.",
                           ck);
    }
    if (r == ACCEL_OK && ACCEL__ARR_PUT(*files, f) != 0) {
        accel_st_file_destroy(f);
        r = ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "dispatch: out of memory");
    }
    return r;
}

static int accel__bm_placement_cmp(const void *a, const void *b) {
    return strcmp(((const accel_bm_placement *)a)->name, ((const accel_bm_placement *)b)->name);
}
/* The device of a name in a device map: its longest prefix that is a key (Accelerate's lookup). -100: none. */
static int accel__bm_map_device(const accel_bm_placement *sorted, int n, const char *name, char *buf, size_t cap) {
    accel_bm_placement key, *hit;
    accel__fmt(buf, cap, "%s", name);
    key.device = 0;
    for (;;) {
        char *dot;
        key.name = buf;
        hit =
            n ? (accel_bm_placement *)bsearch(&key, sorted, (size_t)n, sizeof *sorted, accel__bm_placement_cmp) : NULL;
        if (hit) return hit->device;
        if (!*buf) return -100;
        dot = strrchr(buf, '.');
        if (dot) *dot = 0;
        else buf[0] = 0;
    }
}
static void accel__bm_shape_of(char *out, size_t cap, const accel_tensor *t) {
    accel__st_shape_str(out, cap, t->ndim, t->shape);
}

ACCEL__DEF accel_result accel_bm_dispatch_create(accel_bm_model *m, const accel_bm_dispatch_desc *desc,
                                                 accel_bm_dispatch **out) {
    accel *acc = m ? m->acc : NULL;
    accel_bm_dispatch *x = NULL;
    accel_bm_placement *sorted = NULL;
    const accel_st_entry **src = NULL;
    accel_st_file **srcf = NULL;
    int *nclaimed = NULL, nt, nf, i, k, ndisk = 0;
    char *buf = NULL;
    accel_tensor *disk = NULL;
    accel_result r = ACCEL_OK;
#ifdef ACCEL_WITH_CUDA
    int prev_dev = -1;
#endif
    if (!m || !desc || !out || !desc->checkpoint || desc->n_device_map < 0 ||
        (desc->n_device_map > 0 && !desc->device_map))
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "dispatch_create: bad arguments");
    *out = NULL;
    if (desc->dtype != ACCEL_DTYPE_INVALID && !accel_dtype_name(desc->dtype))
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "dispatch: invalid dtype %d", (int)desc->dtype);
    nt = (int)stbds_arrlen(m->tens);
    x = (accel_bm_dispatch *)accel__st_zalloc(acc, 1, sizeof *x);
    if (!x) return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "dispatch");
    x->acc = acc;
    x->m = m;
    x->pl = (accel__bm_place *)accel__st_zalloc(acc, (size_t)nt, sizeof *x->pl);
    sorted = (accel_bm_placement *)accel__st_zalloc(acc, (size_t)desc->n_device_map, sizeof *sorted);
    src = (const accel_st_entry **)accel__st_zalloc(acc, (size_t)nt, sizeof *src);
    srcf = (accel_st_file **)accel__st_zalloc(acc, (size_t)nt, sizeof *srcf);
    disk = (accel_tensor *)accel__st_zalloc(acc, (size_t)nt, sizeof *disk);
    buf = (char *)accel_host_alloc(acc, 4096);
    if (!x->pl || !sorted || !src || !srcf || !disk || !buf) {
        r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "dispatch");
        goto fail;
    }
    /* 1. the map: names of the model, known devices, no duplicates */
    for (i = 0; i < desc->n_device_map; ++i) {
        const accel_bm_placement *e = &desc->device_map[i];
        int dev = e->device;
        if (!e->name || (*e->name && accel__bm_mfind(m, e->name, NULL) < 0)) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                            "dispatch: the device_map key \"%.200s\" matches no module or tensor of the "
                            "model (Accelerate warns and ignores it)",
                            e->name ? e->name : "(null)");
            goto fail;
        }
        if (dev < 0 && dev != ACCEL_BM_CPU && dev != ACCEL_BM_DISK) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_UNSUPPORTED,
                            "dispatch: device %d of \"%.200s\" (accel dispatches to GPUs, cpu and disk)", dev, e->name);
            goto fail;
        }
        sorted[i] = *e;
    }
    if (desc->n_device_map > 1) qsort(sorted, (size_t)desc->n_device_map, sizeof *sorted, accel__bm_placement_cmp);
    for (i = 1; i < desc->n_device_map; ++i)
        if (!strcmp(sorted[i - 1].name, sorted[i].name)) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "dispatch: the device_map lists \"%.200s\" twice",
                            sorted[i].name);
            goto fail;
        }
    for (i = 0; i < nt; ++i) {
        if (m->tens[i].storage != i) continue;
        x->pl[i].device = accel__bm_map_device(sorted, desc->n_device_map, m->tens[i].t.name, buf, 4096);
        if (x->pl[i].device == -100) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "%.200s doesn't have any device set.", m->tens[i].t.name);
            goto fail;
        }
    }
    /* 2. the checkpoint: every tensor found once, shapes equal, dtypes convertible; nothing unexpected */
    r = accel__bm_open_checkpoint(acc, desc->checkpoint, &x->files);
    if (r != ACCEL_OK) goto fail;
    nf = (int)stbds_arrlen(x->files);
    for (k = 0; k < nf; ++k) {
        int e;
        for (e = 0; e < accel_st_file_count(x->files[k]); ++e) {
            const accel_st_entry *en = accel_st_file_entry(x->files[k], e);
            int kind = -1, ti = accel__bm_mfind(m, en->name, &kind), st;
            if (ti < 0 || kind != ACCEL__BM_TEN) {
                if (desc->ignore_unexpected) continue;
                r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                                "dispatch: the checkpoint's tensor \"%.200s\" is not in the model "
                                "(ignore_unexpected skips such tensors, as Accelerate does with a warning)",
                                en->name);
                goto fail;
            }
            st = m->tens[ti].storage;
            if (src[st] && (ti == st || !strcmp(src[st]->name, en->name))) {
                r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT,
                                "dispatch: tensor \"%.200s\" is in more than one file of the checkpoint", en->name);
                goto fail;
            }
            if (!src[st] || ti == st) { /* a parameter's own name wins over an alias's */
                src[st] = en;
                srcf[st] = x->files[k];
            }
        }
    }
    for (i = 0; i < nt; ++i) {
        const accel_tensor *t = &m->tens[i].t;
        accel_dtype target;
        char a[200], b[200];
        if (m->tens[i].storage != i) continue;
        if (!src[i]) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_NOT_FOUND, "dispatch: tensor \"%.200s\" is not in the checkpoint %.300s",
                            t->name, desc->checkpoint);
            goto fail;
        }
        if (src[i]->ndim != t->ndim ||
            (t->ndim && memcmp(src[i]->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim))) {
            accel__st_shape_str(a, sizeof a, src[i]->ndim, src[i]->shape);
            accel__bm_shape_of(b, sizeof b, t);
            r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                            "Trying to set a tensor of shape %s in \"%.200s\" (which has shape %s), this "
                            "looks incorrect.",
                            a, t->name, b);
            goto fail;
        }
        target = desc->dtype != ACCEL_DTYPE_INVALID && accel_dtype_is_float(src[i]->dtype) ? desc->dtype : t->dtype;
        if (!accel__bm_convertible(src[i]->dtype, target)) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_UNSUPPORTED,
                            "dispatch: tensor \"%.200s\" is %s in the checkpoint and %s in the model (accel "
                            "converts only between F64, F32, F16 and BF16)",
                            t->name, accel_dtype_name(src[i]->dtype), accel_dtype_name(target));
            goto fail;
        }
        x->pl[i].target = target;
        x->pl[i].numel = accel_tensor_numel(t);
    }
    /* 3. every buffer first, then the bytes */
#ifdef ACCEL_WITH_CUDA
    if (accel__bm_real_gpu(acc) && cudaGetDevice(&prev_dev) != cudaSuccess) {
        r = ACCEL__FAIL(acc, ACCEL_ERR_CUDA, "cudaGetDevice failed");
        goto fail;
    }
#endif
    for (i = 0; i < nt && r == ACCEL_OK; ++i) {
        accel__bm_place *p = &x->pl[i];
        size_t nb = (size_t)p->numel * accel_dtype_size(p->target);
        if (m->tens[i].storage != i) continue;
        if (p->device == ACCEL_BM_DISK) {
            p->ptr = (void *)src[i]->data;
            p->dtype = src[i]->dtype;
            disk[ndisk] = m->tens[i].t;
            disk[ndisk].dtype = src[i]->dtype;
            disk[ndisk++].ptr = (void *)src[i]->data;
            continue;
        }
        p->dtype = p->target;
        if (p->device == ACCEL_BM_CPU) {
            p->ptr = desc->pin_cpu ? accel_pinned_alloc(acc, nb) : accel_host_alloc(acc, nb);
            p->own = desc->pin_cpu ? 2 : 1;
        } else {
#ifdef ACCEL_WITH_CUDA
            if (accel__bm_real_gpu(acc)) {
                cudaError_t e = cudaSetDevice(p->device);
                if (e != cudaSuccess) {
                    r = ACCEL__FAIL(acc, ACCEL_ERR_CUDA, "cudaSetDevice(%d): %s", p->device, cudaGetErrorString(e));
                    break;
                }
            }
#endif
            p->ptr = accel_device_alloc(acc, nb); /* a run without a GPU: host memory (accel.h "allocation helpers") */
            p->own = 3;
        }
        if (!p->ptr) {
            p->own = 0;
            r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "dispatch: \"%.200s\" (%zu bytes)", m->tens[i].t.name,
                                 nb);
        }
    }
    for (i = 0; i < nt && r == ACCEL_OK; ++i) {
        accel__bm_place *p = &x->pl[i];
        if (m->tens[i].storage != i || p->device == ACCEL_BM_DISK) continue;
#ifdef ACCEL_WITH_CUDA
        if (p->device >= 0 && accel__bm_real_gpu(acc)) {
            accel__st_stage st;
            cudaStream_t stream = p->device < desc->n_streams && desc->streams && desc->streams[p->device]
                                      ? (cudaStream_t)desc->streams[p->device]
                                      : p->device == acc->device ? (cudaStream_t)acc->stream : (cudaStream_t)0;
            cudaError_t e = cudaSetDevice(p->device);
            if (e != cudaSuccess) {
                r = ACCEL__FAIL(acc, ACCEL_ERR_CUDA, "cudaSetDevice(%d): %s", p->device, cudaGetErrorString(e));
                break;
            }
            accel__st_stage_begin(&st, acc);
            r = accel__st_stage_to_device(acc, &st, stream, -1, (const unsigned char *)src[i]->data, 0, src[i]->dtype,
                                          p->ptr, p->target, (uint64_t)p->numel, accel__bm_convert, m->tens[i].t.name);
            accel__st_stage_end(&st);
            continue;
        }
#endif
        if (p->target == src[i]->dtype) { /* as stored: pread into the buffer (no page faults on the mapping) */
            r = accel__st_copy(srcf[i], (int)(src[i] - srcf[i]->entries), p->ptr, NULL);
            continue;
        }
        accel__bm_convert(p->ptr, p->target, src[i]->data, src[i]->dtype, (size_t)p->numel);
    }
#ifdef ACCEL_WITH_CUDA
    if (prev_dev >= 0) (void)cudaSetDevice(prev_dev);
#endif
    /* 4. "disk": left in the checkpoint's mapping, or copied to an offload folder (Accelerate's format) */
    if (r == ACCEL_OK && ndisk > 0 && desc->offload_folder) {
        r = accel_bm_offload_save(acc, desc->offload_folder, disk, ndisk);
        if (r == ACCEL_OK) r = accel_bm_offload_open(acc, desc->offload_folder, &x->offload);
        for (i = 0; i < nt && r == ACCEL_OK; ++i) {
            int e;
            if (m->tens[i].storage != i || x->pl[i].device != ACCEL_BM_DISK) continue;
            e = accel_st_file_find(x->offload, m->tens[i].t.name);
            if (e < 0)
                r = ACCEL__FAIL(acc, ACCEL_ERR_STATE, "dispatch: %.200s is missing from the offload folder",
                                m->tens[i].t.name);
            else x->pl[i].ptr = (void *)accel_st_file_entry(x->offload, e)->data;
        }
    }
    if (r == ACCEL_OK && (ndisk == 0 || desc->offload_folder)) { /* nothing points into the checkpoint any more */
        for (k = 0; k < (int)stbds_arrlen(x->files); ++k) accel_st_file_destroy(x->files[k]);
        stbds_arrfree(x->files);
        x->files = NULL;
    }
    if (r != ACCEL_OK) goto fail;
    accel_host_free(acc, sorted);
    accel_host_free(acc, (void *)src);
    accel_host_free(acc, (void *)srcf);
    accel_host_free(acc, disk);
    accel_host_free(acc, buf);
    accel_host_free(acc, nclaimed);
    *out = x;
    return ACCEL_OK;
fail:
    accel_host_free(acc, sorted);
    accel_host_free(acc, (void *)src);
    accel_host_free(acc, (void *)srcf);
    accel_host_free(acc, disk);
    accel_host_free(acc, buf);
    accel_host_free(acc, nclaimed);
    accel_bm_dispatch_destroy(x);
    return r;
}
ACCEL__DEF accel_result accel_bm_dispatch_tensor(const accel_bm_dispatch *x, const char *name, accel_tensor *t,
                                                 int *device) {
    int kind = -1, i;
    const accel__bm_place *p;
    if (!x || !name)
        return ACCEL__FAIL(x ? x->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, "dispatch_tensor: NULL argument");
    i = accel__bm_mfind(x->m, name, &kind);
    if (i < 0 || kind != ACCEL__BM_TEN)
        return ACCEL__FAIL(x->acc, ACCEL_ERR_NOT_FOUND, "dispatch: no tensor \"%.200s\" in the model", name);
    p = &x->pl[x->m->tens[i].storage];
    if (t) {
        *t = x->m->tens[i].t;
        t->ptr = p->ptr;
        t->dtype = p->dtype;
    }
    if (device) *device = p->device;
    return ACCEL_OK;
}

/* ------------------------------------------------------------------------ 6. just-in-time fetch of offloaded layers */
/* Two slots, each as large as the largest layer's offloaded bytes. A helper thread fills the host side of a slot
   (converting "disk" bytes out of the mapping, or CPU tensors into the execution dtype); on a real GPU the calling
   thread then copies it to the device slot on a copy stream that waits for the layer that used the slot before and
   that the compute stream waits for — the host never waits for the GPU. The helper neither allocates nor records
   errors: it leaves an errno, which the calling thread reports. */
#define ACCEL__BM_SLOT_ALIGN 256
enum { ACCEL__BM_SLOT_FREE = 0, ACCEL__BM_SLOT_FILLING, ACCEL__BM_SLOT_READY, ACCEL__BM_SLOT_IN_USE };
typedef struct accel__bm_slot {
    void *host;  /* filled by the helper: pinned on a real GPU, the execution buffer itself otherwise */
    void *dev;   /* real GPU: the device buffer */
    void *copied, *computed; /* real GPU: cudaEvent_t (the H2D copy out of host / the layer's work on dev) */
    int state, layer, recorded_copy, recorded_compute;
} accel__bm_slot;
struct accel_bm_fetch {
    accel_bm_dispatch *x;
    accel *acc;
    int device, real_gpu, nlayers, no_prefetch;
    void *copy_stream, *compute_stream;
    int **tens;               /* per layer: tensor indices in state_dict order (acc's allocator, -1 terminated) */
    int64_t **off;            /* per layer and tensor: offset in the slot, -1 when it is used where it lives */
    accel_tensor **views;     /* per layer: what fetch_begin hands out */
    int *nt;
    size_t slot_bytes;
    accel__bm_slot slot[2];
    pthread_t helper;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int helper_started, quit, job_layer, job_slot, err;
};
static int accel__bm_resident(const accel_bm_fetch *f, const accel__bm_place *p) {
    return p->device == f->device && p->dtype == p->target;
}
/* Fills slot s's host side with layer l's offloaded tensors (helper thread: no allocation, no error recording). */
static int accel__bm_fill(accel_bm_fetch *f, int l, int s) {
    const accel_bm_model *m = f->x->m;
    int k;
#ifdef ACCEL_WITH_CUDA
    if (f->real_gpu && f->slot[s].recorded_copy) { /* the previous copy out of this host buffer is done */
        if (cudaSetDevice(f->device) != cudaSuccess ||
            cudaEventSynchronize((cudaEvent_t)f->slot[s].copied) != cudaSuccess)
            return EIO;
    }
#endif
    for (k = 0; k < f->nt[l]; ++k) {
        const accel__bm_place *p = &f->x->pl[m->tens[f->tens[l][k]].storage];
        if (f->off[l][k] < 0) continue;
        accel__bm_convert((char *)f->slot[s].host + f->off[l][k], p->target, p->ptr, p->dtype, (size_t)p->numel);
    }
    return 0;
}
static void *accel__bm_helper(void *arg) {
    accel_bm_fetch *f = (accel_bm_fetch *)arg;
    pthread_mutex_lock(&f->mu);
    for (;;) {
        int l, s, e;
        while (!f->quit && f->job_layer < 0) pthread_cond_wait(&f->cv, &f->mu);
        if (f->quit) break;
        l = f->job_layer;
        s = f->job_slot;
        pthread_mutex_unlock(&f->mu);
        e = accel__bm_fill(f, l, s);
        pthread_mutex_lock(&f->mu);
        if (e && !f->err) f->err = e;
        f->slot[s].state = ACCEL__BM_SLOT_READY;
        f->job_layer = -1;
        pthread_cond_broadcast(&f->cv);
    }
    pthread_mutex_unlock(&f->mu);
    return NULL;
}
/* Hands layer l to the helper (slot l % 2 must be free; the helper must be idle). Caller holds f->mu. */
static void accel__bm_request(accel_bm_fetch *f, int l) {
    int s = l & 1;
    f->slot[s].state = ACCEL__BM_SLOT_FILLING;
    f->slot[s].layer = l;
    f->job_layer = l;
    f->job_slot = s;
    pthread_cond_broadcast(&f->cv);
}
ACCEL__DEF void accel_bm_fetch_destroy(accel_bm_fetch *f) {
    int i;
    if (!f) return;
    if (f->helper_started) {
        pthread_mutex_lock(&f->mu);
        while (f->job_layer >= 0) pthread_cond_wait(&f->cv, &f->mu); /* a prefetch in flight */
        f->quit = 1;
        pthread_cond_broadcast(&f->cv);
        pthread_mutex_unlock(&f->mu);
        pthread_join(f->helper, NULL);
        pthread_mutex_destroy(&f->mu);
        pthread_cond_destroy(&f->cv);
    }
    for (i = 0; i < 2; ++i) {
#ifdef ACCEL_WITH_CUDA
        if (f->real_gpu) {
            (void)cudaSetDevice(f->device);
            if (f->slot[i].copied) cudaEventSynchronize((cudaEvent_t)f->slot[i].copied);
            if (f->slot[i].computed) cudaEventSynchronize((cudaEvent_t)f->slot[i].computed);
            if (f->slot[i].copied) cudaEventDestroy((cudaEvent_t)f->slot[i].copied);
            if (f->slot[i].computed) cudaEventDestroy((cudaEvent_t)f->slot[i].computed);
            accel_device_free(f->acc, f->slot[i].dev);
            accel_pinned_free(f->acc, f->slot[i].host);
            continue;
        }
#endif
        accel_device_free(f->acc, f->slot[i].host); /* the execution device's buffer (host memory without a GPU) */
    }
#ifdef ACCEL_WITH_CUDA
    if (f->copy_stream) cudaStreamDestroy((cudaStream_t)f->copy_stream);
#endif
    for (i = 0; i < f->nlayers; ++i) {
        if (f->tens) accel_host_free(f->acc, f->tens[i]);
        if (f->off) accel_host_free(f->acc, f->off[i]);
        if (f->views) accel_host_free(f->acc, f->views[i]);
    }
    accel_host_free(f->acc, (void *)f->tens);
    accel_host_free(f->acc, (void *)f->off);
    accel_host_free(f->acc, (void *)f->views);
    accel_host_free(f->acc, f->nt);
    accel_host_free(f->acc, f);
}
ACCEL__DEF accel_result accel_bm_fetch_create(accel_bm_dispatch *x, const accel_bm_fetch_desc *desc,
                                              accel_bm_fetch **out) {
    accel *acc = x ? x->acc : NULL;
    accel_bm_fetch *f;
    const accel_bm_model *m;
    accel_result r = ACCEL_OK;
    int l, i, nsd;
    if (!x || !desc || !out || desc->n_layers < 1 || !desc->layers)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "fetch_create: bad arguments");
    *out = NULL;
    m = x->m;
    if (desc->device < 0 && desc->device != ACCEL_BM_CPU)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                           "fetch_create: the execution device is a GPU or ACCEL_BM_CPU, not %d", desc->device);
    r = accel__bm_model_sd(x->m);
    if (r != ACCEL_OK) return r;
    nsd = (int)stbds_arrlen(m->sd_order);
    f = (accel_bm_fetch *)accel__st_zalloc(acc, 1, sizeof *f);
    if (!f) return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "fetch_create");
    f->x = x;
    f->acc = acc;
    f->device = desc->device;
    f->real_gpu = desc->device >= 0 && accel__bm_real_gpu(acc);
    f->nlayers = desc->n_layers;
    f->no_prefetch = desc->no_prefetch;
    f->job_layer = -1;
    f->compute_stream = desc->stream ? (void *)desc->stream : acc ? (void *)acc->stream : NULL;
    f->tens = (int **)accel__st_zalloc(acc, (size_t)f->nlayers, sizeof(int *));
    f->off = (int64_t **)accel__st_zalloc(acc, (size_t)f->nlayers, sizeof(int64_t *));
    f->views = (accel_tensor **)accel__st_zalloc(acc, (size_t)f->nlayers, sizeof(accel_tensor *));
    f->nt = (int *)accel__st_zalloc(acc, (size_t)f->nlayers, sizeof(int));
    if (!f->tens || !f->off || !f->views || !f->nt) {
        r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "fetch_create");
        goto fail;
    }
    /* each layer: the tensors under its name (state_dict order); their slot offsets (a storage once per layer) */
    for (l = 0; l < f->nlayers && r == ACCEL_OK; ++l) {
        const char *ln = desc->layers[l];
        int kind = -1, c = 0;
        size_t bytes = 0;
        if (!ln || (*ln && accel__bm_mfind(m, ln, &kind) < 0)) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                            "fetch_create: layer %d \"%.200s\" is no module or tensor of the model", l,
                            ln ? ln : "(null)");
            break;
        }
        f->tens[l] = (int *)accel__st_zalloc(acc, (size_t)nsd, sizeof(int));
        f->off[l] = (int64_t *)accel__st_zalloc(acc, (size_t)nsd, sizeof(int64_t));
        f->views[l] = (accel_tensor *)accel__st_zalloc(acc, (size_t)nsd, sizeof(accel_tensor));
        if (!f->tens[l] || !f->off[l] || !f->views[l]) {
            r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "fetch_create");
            break;
        }
        for (i = 0; i < nsd && r == ACCEL_OK; ++i) {
            int ti = m->sd_order[i], k;
            const char *tn = m->tens[ti].t.name;
            const accel__bm_place *p = &x->pl[m->tens[ti].storage];
            if (*ln && strcmp(tn, ln) && !accel__bm_startswith_dot(tn, ln)) continue;
            f->tens[l][c] = ti;
            f->off[l][c] = -1;
            if (p->device >= 0 && p->device != f->device && accel__bm_real_gpu(acc)) {
                r = ACCEL__FAIL(acc, ACCEL_ERR_UNSUPPORTED,
                                "fetch_create: \"%.200s\" is on GPU %d; the fetch brings CPU and disk tensors "
                                "to the execution device",
                                tn, p->device);
                break;
            }
            if (!accel__bm_resident(f, p)) {
                for (k = 0; k < c; ++k) /* an alias of a tensor already in this layer shares its copy */
                    if (m->tens[f->tens[l][k]].storage == m->tens[ti].storage) break;
                if (k < c) f->off[l][c] = f->off[l][k];
                else {
                    f->off[l][c] = (int64_t)bytes;
                    bytes += ((size_t)p->numel * accel_dtype_size(p->target) + ACCEL__BM_SLOT_ALIGN - 1) /
                             ACCEL__BM_SLOT_ALIGN * ACCEL__BM_SLOT_ALIGN;
                }
            }
            ++c;
        }
        f->nt[l] = c;
        if (bytes > f->slot_bytes) f->slot_bytes = bytes;
    }
    if (r != ACCEL_OK) goto fail;
    for (i = 0; i < 2 && r == ACCEL_OK; ++i) {
#ifdef ACCEL_WITH_CUDA
        if (f->real_gpu) {
            cudaError_t e = cudaSetDevice(f->device);
            if (e == cudaSuccess)
                e = cudaEventCreateWithFlags((cudaEvent_t *)&f->slot[i].copied, cudaEventDisableTiming);
            if (e == cudaSuccess)
                e = cudaEventCreateWithFlags((cudaEvent_t *)&f->slot[i].computed, cudaEventDisableTiming);
            if (e == cudaSuccess && !f->copy_stream)
                e = cudaStreamCreateWithFlags((cudaStream_t *)&f->copy_stream, cudaStreamNonBlocking);
            if (e != cudaSuccess) {
                r = ACCEL__FAIL(acc, ACCEL_ERR_CUDA, "fetch_create: %s", cudaGetErrorString(e));
                break;
            }
            f->slot[i].host = accel_pinned_alloc(acc, f->slot_bytes);
            f->slot[i].dev = f->slot[i].host ? accel_device_alloc(acc, f->slot_bytes) : NULL;
            if (!f->slot[i].dev)
                r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "fetch_create: two slots of %zu bytes",
                                     f->slot_bytes);
            continue;
        }
#endif
        f->slot[i].host = accel_device_alloc(acc, f->slot_bytes); /* the execution device: host memory without a GPU */
        if (!f->slot[i].host)
            r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "fetch_create: two slots of %zu bytes", f->slot_bytes);
    }
    if (r != ACCEL_OK) goto fail;
    if (pthread_mutex_init(&f->mu, NULL) != 0) {
        r = ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "fetch_create: mutex");
        goto fail;
    }
    if (pthread_cond_init(&f->cv, NULL) != 0) {
        pthread_mutex_destroy(&f->mu);
        r = ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "fetch_create: condition variable");
        goto fail;
    }
    if (pthread_create(&f->helper, NULL, accel__bm_helper, f) != 0) {
        pthread_mutex_destroy(&f->mu);
        pthread_cond_destroy(&f->cv);
        r = ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "fetch_create: cannot start the prefetch thread");
        goto fail;
    }
    f->helper_started = 1;
    *out = f;
    return ACCEL_OK;
fail:
    accel_bm_fetch_destroy(f);
    return r;
}
ACCEL__DEF accel_result accel_bm_fetch_begin(accel_bm_fetch *f, int i, const accel_tensor **tensors, int *n) {
    const accel_bm_model *m;
    accel__bm_slot *sl;
    int s, k, err;
    if (!f || i < 0 || i >= (f ? f->nlayers : 0) || !tensors || !n)
        return ACCEL__FAIL(f ? f->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, "fetch_begin: bad arguments (layer %d)", i);
    m = f->x->m;
    s = i & 1;
    sl = &f->slot[s];
    pthread_mutex_lock(&f->mu);
    if (!((sl->state == ACCEL__BM_SLOT_FILLING || sl->state == ACCEL__BM_SLOT_READY) && sl->layer == i)) {
        if (sl->state == ACCEL__BM_SLOT_IN_USE) {
            int busy = sl->layer;
            pthread_mutex_unlock(&f->mu);
            return ACCEL__FAIL(f->acc, ACCEL_ERR_STATE,
                               "fetch_begin(%d): layer %d holds its buffer (call fetch_end(%d) first)", i, busy, busy);
        }
        while (f->job_layer >= 0)
            pthread_cond_wait(&f->cv, &f->mu); /* the helper finishes a prefetch of another layer */
        accel__bm_request(f, i);
    }
    while (sl->state != ACCEL__BM_SLOT_READY) pthread_cond_wait(&f->cv, &f->mu);
    err = f->err;
    f->err = 0;
    sl->state = ACCEL__BM_SLOT_IN_USE;
    /* prefetch layer i+1 into the other slot while layer i runs */
    if (!err && !f->no_prefetch && i + 1 < f->nlayers && f->slot[s ^ 1].state == ACCEL__BM_SLOT_FREE &&
        f->job_layer < 0)
        accel__bm_request(f, i + 1);
    pthread_mutex_unlock(&f->mu);
    if (err) {
        sl->state = ACCEL__BM_SLOT_FREE;
        errno = err;
        return accel__io_fail(f->acc, "fetch: cannot read the offloaded tensors of", "a layer");
    }
#ifdef ACCEL_WITH_CUDA
    if (f->real_gpu) {
        cudaStream_t cs = (cudaStream_t)f->copy_stream;
        cudaError_t e = cudaSetDevice(f->device);
        if (e == cudaSuccess && sl->recorded_compute) e = cudaStreamWaitEvent(cs, (cudaEvent_t)sl->computed, 0);
        if (e == cudaSuccess && f->slot_bytes)
            e = cudaMemcpyAsync(sl->dev, sl->host, f->slot_bytes, cudaMemcpyHostToDevice, cs);
        if (e == cudaSuccess) e = cudaEventRecord((cudaEvent_t)sl->copied, cs);
        if (e == cudaSuccess) e = cudaStreamWaitEvent((cudaStream_t)f->compute_stream, (cudaEvent_t)sl->copied, 0);
        if (e != cudaSuccess) {
            sl->state = ACCEL__BM_SLOT_FREE;
            return ACCEL__FAIL(f->acc, ACCEL_ERR_CUDA, "fetch_begin(%d): %s", i, cudaGetErrorString(e));
        }
        sl->recorded_copy = 1;
    }
#endif
    for (k = 0; k < f->nt[i]; ++k) {
        int ti = f->tens[i][k];
        const accel__bm_place *p = &f->x->pl[m->tens[ti].storage];
        accel_tensor *v = &f->views[i][k];
        *v = m->tens[ti].t;
        v->dtype = p->target;
        v->ptr = f->off[i][k] < 0 ? p->ptr : (char *)(f->real_gpu ? sl->dev : sl->host) + f->off[i][k];
    }
    *tensors = f->views[i];
    *n = f->nt[i];
    return ACCEL_OK;
}
ACCEL__DEF accel_result accel_bm_fetch_end(accel_bm_fetch *f, int i) {
    accel__bm_slot *sl;
    if (!f || i < 0 || i >= f->nlayers)
        return ACCEL__FAIL(f ? f->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, "fetch_end: bad arguments (layer %d)", i);
    sl = &f->slot[i & 1];
    if (sl->state != ACCEL__BM_SLOT_IN_USE || sl->layer != i)
        return ACCEL__FAIL(f->acc, ACCEL_ERR_STATE, "fetch_end(%d): layer %d was not begun", i, i);
#ifdef ACCEL_WITH_CUDA
    if (f->real_gpu) {
        cudaError_t e = cudaSetDevice(f->device);
        if (e == cudaSuccess) e = cudaEventRecord((cudaEvent_t)sl->computed, (cudaStream_t)f->compute_stream);
        if (e != cudaSuccess) return ACCEL__FAIL(f->acc, ACCEL_ERR_CUDA, "fetch_end(%d): %s", i, cudaGetErrorString(e));
        sl->recorded_compute = 1;
    }
#endif
    pthread_mutex_lock(&f->mu);
    sl->state = ACCEL__BM_SLOT_FREE;
    if (!f->no_prefetch && f->job_layer < 0) { /* a prefetch that could not start while this buffer was taken */
        accel__bm_slot *other = &f->slot[(i + 1) & 1];
        int next = other->state == ACCEL__BM_SLOT_IN_USE && other->layer == i + 1 ? i + 2 : i + 1;
        if (next < f->nlayers && f->slot[next & 1].state == ACCEL__BM_SLOT_FREE) accel__bm_request(f, next);
    }
    pthread_mutex_unlock(&f->mu);
    return ACCEL_OK;
}

/* ------------------------------------------------------------------------------------------- 7. the offload folder */
static const char *accel__bm_np_name(accel_dtype d) { /* numpy's names, as Accelerate's offload_weight records them */
    switch (d) {
    case ACCEL_F64: return "float64";
    case ACCEL_F32: return "float32";
    case ACCEL_F16: return "float16";
    case ACCEL_BF16: return "bfloat16";
    case ACCEL_F8_E4M3: return "float8_e4m3fn";
    case ACCEL_F8_E5M2: return "float8_e5m2";
    case ACCEL_I64: return "int64";
    case ACCEL_I32: return "int32";
    case ACCEL_I16: return "int16";
    case ACCEL_I8: return "int8";
    case ACCEL_U64: return "uint64";
    case ACCEL_U32: return "uint32";
    case ACCEL_U16: return "uint16";
    case ACCEL_U8: return "uint8";
    case ACCEL_BOOL: return "bool";
    default: return NULL;
    }
}
static accel_dtype accel__bm_np_dtype(const char *s) {
    int d;
    for (d = 1; d < ACCEL_DTYPE_COUNT; ++d)
        if (!strcmp(accel__bm_np_name((accel_dtype)d), s)) return (accel_dtype)d;
    return ACCEL_DTYPE_INVALID;
}
/* A JSON value as Python's json.dump(indent=2) writes it (ensure_ascii); numbers keep their text. */
static void accel__bm_json_emit(accel__sb *b, const accel__st_json *j, int nd, int level) {
    int c, k, first = 1;
    switch (j->nodes[nd].type) {
    case ACCEL__ST_J_NULL: accel__sb_puts(b, "null"); return;
    case ACCEL__ST_J_TRUE: accel__sb_puts(b, "true"); return;
    case ACCEL__ST_J_FALSE: accel__sb_puts(b, "false"); return;
    case ACCEL__ST_J_NUM: accel__sb_add(b, accel__st_jstr(j, nd), j->nodes[nd].len); return;
    case ACCEL__ST_J_STR: accel__sb_json_str(b, accel__st_jstr(j, nd), j->nodes[nd].len, 1); return;
    default: break;
    }
    if (j->nodes[nd].count == 0) {
        accel__sb_puts(b, j->nodes[nd].type == ACCEL__ST_J_OBJ ? "{}" : "[]");
        return;
    }
    accel__sb_puts(b, j->nodes[nd].type == ACCEL__ST_J_OBJ ? "{" : "[");
    for (c = j->nodes[nd].first; c >= 0; c = j->nodes[c].next) {
        accel__sb_puts(b, first ? "\n" : ",\n");
        first = 0;
        for (k = 0; k < level + 1; ++k) accel__sb_puts(b, "  ");
        if (j->nodes[nd].type == ACCEL__ST_J_OBJ) {
            accel__sb_json_str(b, accel__st_jkeyp(j, c), j->nodes[c].keylen, 1);
            accel__sb_puts(b, ": ");
        }
        accel__bm_json_emit(b, j, c, level + 1);
    }
    accel__sb_puts(b, "\n");
    for (k = 0; k < level; ++k) accel__sb_puts(b, "  ");
    accel__sb_puts(b, j->nodes[nd].type == ACCEL__ST_J_OBJ ? "}" : "]");
}
/* One index entry: {"dtype": …, "shape": […]} at indent level 1. */
static void accel__bm_offload_entry(accel__sb *b, const accel_tensor *t) {
    int d;
    accel__sb_puts(b, "{\n    \"dtype\": ");
    accel__sb_json_str(b, accel__bm_np_name(t->dtype), strlen(accel__bm_np_name(t->dtype)), 1);
    accel__sb_puts(b, ",\n    \"shape\": ");
    if (t->ndim == 0) accel__sb_puts(b, "[]");
    else {
        accel__sb_puts(b, "[");
        for (d = 0; d < t->ndim; ++d) {
            accel__sb_puts(b, d ? ",\n      " : "\n      ");
            accel__st_sb_u64(b, (uint64_t)t->shape[d]);
        }
        accel__sb_puts(b, "\n    ]");
    }
    accel__sb_puts(b, "\n  }");
}
ACCEL__DEF accel_result accel_bm_offload_save(accel *acc, const char *folder, const accel_tensor *t, int n) {
    char path[8400], *old = NULL;
    size_t oldn = 0;
    accel__st_json j;
    accel__sb b;
    accel__st_stage stage;
    int root = -1, i, c, first = 1;
    unsigned char *done = NULL;
    accel_result r;
    if (!folder) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "offload_save: folder is NULL");
    r = accel__st_check_tensors(acc, t, n, "offload_save");
    for (i = 0; i < n && r == ACCEL_OK; ++i)
        if (strchr(t[i].name, '/') || strlen(t[i].name) > 250)
            r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                            "offload_save: \"%.200s\" cannot be a file name (<name>.dat)", t[i].name);
    if (r != ACCEL_OK) return r;
    if (n == 0) return ACCEL_OK; /* Accelerate's save_offload_index writes nothing for an empty index */
    if (accel__mkdir_p(folder, NULL, 0) != 0) return accel__io_fail(acc, "cannot create directory", folder);
    memset(&j, 0, sizeof j);
    accel__st_stage_begin(&stage, acc);
    /* the .dat files: the raw bytes (a 0-rank tensor as one element, as numpy's memmap stores it) */
    for (i = 0; i < n && r == ACCEL_OK; ++i) {
        char tmp[8500];
        int fd;
        uint64_t nb = (uint64_t)accel_tensor_nbytes(&t[i]);
        accel__fmt(path, sizeof path, "%s/%s.dat", folder, t[i].name);
        r = accel__atomic_open(acc, path, tmp, sizeof tmp, &fd);
        if (r != ACCEL_OK) break;
        if (nb && accel__st_is_device_ptr(t[i].ptr))
            r = accel__st_write_from_device(acc, &stage, fd, tmp, t[i].ptr, nb, NULL);
        else if (nb && accel__write_all(fd, t[i].ptr, (size_t)nb) != 0) r = accel__io_fail(acc, "cannot write", tmp);
        if (r != ACCEL_OK) (void)accel__atomic_commit(acc, fd, tmp, path, 0);
        else r = accel__atomic_commit(acc, fd, tmp, path, 1);
    }
    accel__st_stage_end(&stage);
    if (r != ACCEL_OK) return r;
    /* index.json: the existing one updated (its keys keep their places, new ones are appended), json.dump(indent=2) */
    accel__fmt(path, sizeof path, "%s/index.json", folder);
    if (accel__is_file(path)) {
        r = accel__read_file(acc, path, &old, &oldn, (size_t)100000000);
        if (r == ACCEL_OK && !accel__utf8_valid((const unsigned char *)old, oldn, NULL))
            r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.400s is not valid UTF-8", path);
        if (r == ACCEL_OK) {
            root = accel__st_json_parse(&j, acc, old, oldn);
            if (root < 0) r = accel__st_json_failed(acc, &j, path);
            else if (j.nodes[root].type != ACCEL__ST_J_OBJ)
                r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.400s is not a JSON object", path);
        }
    }
    done = (unsigned char *)accel__st_zalloc(acc, (size_t)n, 1);
    if (r == ACCEL_OK && !done) r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "offload_save");
    accel__sb_init(&b, acc);
    if (r == ACCEL_OK) {
        accel__sb_puts(&b, "{");
        for (c = root >= 0 ? j.nodes[root].first : -1; c >= 0; c = j.nodes[c].next) {
            const char *key = accel__st_jkeyp(&j, c);
            for (i = 0; i < n; ++i) /* names are unique (checked above) */
                if (strlen(t[i].name) == j.nodes[c].keylen && !memcmp(t[i].name, key, j.nodes[c].keylen)) break;
            accel__sb_puts(&b, first ? "\n  " : ",\n  ");
            first = 0;
            accel__sb_json_str(&b, key, j.nodes[c].keylen, 1);
            accel__sb_puts(&b, ": ");
            if (i < n) { /* dict.update: the new value, at the old place */
                done[i] = 1;
                accel__bm_offload_entry(&b, &t[i]);
            } else {
                accel__bm_json_emit(&b, &j, c, 1);
            }
        }
        for (i = 0; i < n; ++i) {
            if (done[i]) continue;
            accel__sb_puts(&b, first ? "\n  " : ",\n  ");
            first = 0;
            accel__sb_json_str(&b, t[i].name, strlen(t[i].name), 1);
            accel__sb_puts(&b, ": ");
            accel__bm_offload_entry(&b, &t[i]);
        }
        accel__sb_puts(&b, "\n}");
        r = b.oom ? accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "%.400s", path)
                  : accel__write_file(acc, path, b.p, b.n, 1);
    }
    accel__sb_free(&b);
    accel_host_free(acc, done);
    accel__st_json_free(&j);
    accel_host_free(acc, old);
    return r;
}

ACCEL__DEF accel_result accel_bm_offload_open(accel *acc, const char *folder, accel_st_file **out) {
    char path[8400], *data = NULL;
    size_t n = 0;
    accel__st_json j;
    accel_st_file *f = NULL;
    int root, c, i, cnt;
    accel_result r;
    if (!folder || !out) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "file_open_offload: NULL argument");
    *out = NULL;
    memset(&j, 0, sizeof j);
    accel__fmt(path, sizeof path, "%s/index.json", folder);
    r = accel__read_file(acc, path, &data, &n, (size_t)100000000);
    if (r != ACCEL_OK) return r;
    if (!accel__utf8_valid((const unsigned char *)data, n, NULL))
        r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.400s is not valid UTF-8", path);
    root = r == ACCEL_OK ? accel__st_json_parse(&j, acc, data, n) : -1;
    if (r == ACCEL_OK && root < 0) r = accel__st_json_failed(acc, &j, path);
    if (r == ACCEL_OK && j.nodes[root].type != ACCEL__ST_J_OBJ)
        r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.400s is not a JSON object", path);
    if (r == ACCEL_OK) r = accel__st_new(acc, folder, &f);
    for (c = r == ACCEL_OK ? j.nodes[root].first : -1; c >= 0 && r == ACCEL_OK; c = j.nodes[c].next) {
        const char *key = accel__st_jkeyp(&j, c);
        int stf = accel__st_jget(&j, c, "safetensors_file"), dt = accel__st_jget(&j, c, "dtype"),
            sh = accel__st_jget(&j, c, "shape"), m2, d = 0;
        accel_st_entry e;
        accel_tensor t;
        memset(&e, 0, sizeof e);
        e.name = (const char *)(uintptr_t)j.nodes[c].key; /* an arena offset until the arena is final */
        if (strlen(key) != j.nodes[c].keylen || strchr(key, '/') || j.nodes[c].type != ACCEL__ST_J_OBJ) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT,
                            "%.400s: entry \"%.200s\" is not {dtype, shape} or {safetensors_file, …}", path, key);
            break;
        }
        if (stf >= 0 && j.nodes[stf].type != ACCEL__ST_J_NULL) { /* the weight stays in a safetensors file */
            accel_st_file *sub = NULL;
            int wn = accel__st_jget(&j, c, "weight_name"), k;
            const char *wname = wn >= 0 && accel__bm_jis_str(&j, wn) ? accel__st_jstr(&j, wn) : key;
            if (!accel__bm_jis_str(&j, stf)) {
                r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.400s: \"%.200s\": safetensors_file is not a path", path, key);
                break;
            }
            for (k = 0; k < (int)stbds_arrlen(f->subs); ++k)
                if (!strcmp(f->subs[k]->path, accel__st_jstr(&j, stf))) sub = f->subs[k];
            if (!sub) {
                r = accel_st_file_open(acc, accel__st_jstr(&j, stf), &sub);
                if (r == ACCEL_OK && ACCEL__ARR_PUT(f->subs, sub) != 0) {
                    accel_st_file_destroy(sub);
                    r = ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "%.400s: out of memory", path);
                }
                if (r != ACCEL_OK) break;
            }
            k = accel_st_file_find(sub, wname);
            if (k < 0) {
                r = ACCEL__FAIL(acc, ACCEL_ERR_NOT_FOUND, "%.400s: \"%.200s\" is not in %.300s", path, wname,
                                sub->path);
                break;
            }
            e.dtype = sub->entries[k].dtype;
            e.ndim = sub->entries[k].ndim;
            memcpy(e.shape, sub->entries[k].shape, sizeof e.shape);
            e.end = sub->entries[k].end - sub->entries[k].begin;
            e.data = sub->entries[k].data;
        } else {
            int fd;
            struct stat st;
            if (!accel__bm_jis_str(&j, dt) || sh < 0 || j.nodes[sh].type != ACCEL__ST_J_ARR ||
                j.nodes[sh].count > ACCEL_MAX_DIMS) {
                r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT,
                                "%.400s: \"%.200s\" needs a dtype string and a shape of at most %d dimensions", path,
                                key, ACCEL_MAX_DIMS);
                break;
            }
            e.dtype = accel__bm_np_dtype(accel__st_jstr(&j, dt));
            if (e.dtype == ACCEL_DTYPE_INVALID) {
                r = ACCEL__FAIL(acc, ACCEL_ERR_UNSUPPORTED, "%.400s: \"%.200s\": dtype \"%.40s\"", path, key,
                                accel__st_jstr(&j, dt));
                break;
            }
            for (m2 = j.nodes[sh].first; m2 >= 0; m2 = j.nodes[m2].next, ++d) {
                uint64_t v;
                if (accel__st_ju64(&j, m2, &v) || v > (uint64_t)INT64_MAX) {
                    r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.400s: \"%.200s\": bad shape", path, key);
                    break;
                }
                e.shape[d] = (int64_t)v;
            }
            if (r != ACCEL_OK) break;
            e.ndim = d;
            memset(&t, 0, sizeof t);
            t.dtype = e.dtype;
            t.ndim = e.ndim;
            memcpy(t.shape, e.shape, sizeof t.shape);
            if (accel_tensor_nbytes(&t) < 0) {
                r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.400s: \"%.200s\": shape product overflows", path, key);
                break;
            }
            e.end = (uint64_t)accel_tensor_nbytes(&t);
            accel__fmt(path, sizeof path, "%s/%s.dat", folder, key);
            r = accel__open_regular(acc, path, &st, &fd); /* a FIFO as <name>.dat must not hang the open */
            if (r != ACCEL_OK) break;
            if ((uint64_t)st.st_size != e.end) {
                close(fd);
                r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.400s is %lld bytes, its index entry (%s %d dims) needs %llu",
                                path, (long long)st.st_size, accel_dtype_name(e.dtype), e.ndim,
                                (unsigned long long)e.end);
                break;
            }
            if (e.end > 0) {
                void *mp = mmap(NULL, (size_t)e.end, PROT_READ, MAP_SHARED, fd, 0);
                accel__st_piece pc;
                if (mp == MAP_FAILED) { r = accel__io_fail(acc, "cannot mmap", path); close(fd); break; }
                pc.p = mp;
                pc.n = (size_t)e.end;
                if (ACCEL__ARR_PUT(f->pieces, pc) != 0) {
                    munmap(mp, (size_t)e.end);
                    close(fd);
                    r = ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "%.400s: out of memory", path);
                    break;
                }
                e.data = mp;
            } else {
                e.data = "";
            }
            close(fd);
            accel__fmt(path, sizeof path, "%s/index.json", folder);
        }
        if (ACCEL__ARR_PUT(f->entries, e) != 0)
            r = ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "%.400s: out of memory", path);
    }
    if (r == ACCEL_OK) { /* the arena is final: names become pointers; the name index */
        f->names = j.arena;
        j.arena = NULL;
        cnt = (int)stbds_arrlen(f->entries);
        f->by_name = (const accel_st_entry **)accel_host_alloc(acc, sizeof(accel_st_entry *) * (size_t)(cnt ? cnt : 1));
        if (!f->by_name) r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "%.400s: name index", path);
        for (i = 0; r == ACCEL_OK && i < cnt; ++i) {
            f->entries[i].name = f->names + (size_t)(uintptr_t)f->entries[i].name;
            f->by_name[i] = &f->entries[i];
        }
        if (r == ACCEL_OK && cnt > 1)
            qsort((void *)f->by_name, (size_t)cnt, sizeof *f->by_name, accel__st_entryp_name_cmp);
    }
    accel__st_json_free(&j);
    accel_host_free(acc, data);
    if (r != ACCEL_OK) {
        if (f && !f->names && f->entries) stbds_header(f->entries)->length = 0; /* names are still offsets */
        accel_st_file_destroy(f);
        return r;
    }
    *out = f;
    return ACCEL_OK;
}

#endif /* ACCEL_IMPLEMENTATION && !ACCEL__BIGMODEL_IMPL_DONE */

/* accel is released under the MIT licence. Copyright (c) 2026 the accel authors. */
