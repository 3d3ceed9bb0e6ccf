/* accel_ckpt.h — checkpoints for accel: save_state / load_state of everything a run needs to resume, written
   crash-safe with a checksummed completion marker, automatic naming and rotation, resumable on another number of
   processes. Builds on accel_safetensors.h (the files a checkpoint is made of); the ACCEL_IMPLEMENTATION TU needs
   stb_ds.h on the include path, as the core does (Debian: libstb-dev, -I/usr/include/stb).

   CONTENTS
     USAGE
     STATE OF OTHER OBJECTS           the core's contract; your own objects
     FILES OF A CHECKPOINT DIRECTORY  Accelerate's names
     CRASH SAFETY
     OPTIONS                          accel_ckpt_desc
     ERRORS
     THREADS AND STREAMS
     DIFFERENCES FROM ACCELERATE

   USAGE
       accel_ckpt *ck;
       accel_ckpt_desc cd = {0};
       cd.automatic_checkpoint_naming = 1;                // project_dir/checkpoints/checkpoint_<iteration>
       cd.total_limit = 3;                                // keep the 3 newest complete checkpoints
       accel_ckpt_create(&acc, &cd, &ck);
       accel_ckpt_register_model(ck, params, n_params);   // accel_tensor[]: name, ptr (host or device), dtype, shape
       accel_ckpt_register_optimizer(ck, adam_m_v, n_mv);
       accel_ckpt_register(ck, "scaler", accel_amp_scaler_state_save, accel_amp_scaler_state_load, &sc);
       accel_ckpt_register(ck, "sampler", accel_data_shard_state_save, accel_data_shard_state_load, &sh);
       accel_result r = accel_ckpt_load_state(ck, NULL);  // the newest complete checkpoint, if there is one
       if (r != ACCEL_OK && r != ACCEL_ERR_NOT_FOUND) die(accel_last_error(&acc));  // NOT_FOUND: start fresh
       for (...) { ...train...; if (step % 1000 == 0) accel_ckpt_save_state(ck, NULL, NULL, 0); }  // collective
       accel_ckpt_destroy(ck);
     The model alone, for inference or the Hub, is accel_st_save_model (accel_safetensors.h).

   STATE OF OTHER OBJECTS
     accel_ckpt_register takes the core's state contract (accel.h "saved state": accel_state_save_fn /
     accel_state_load_fn), which every module's state functions implement, so they register directly, as above.
     Your own objects implement the same two functions:
       static accel_result my_save(void *obj, void *buf, size_t cap, size_t *size) {
           *size = sizeof(my_state);                        // buf NULL or cap too small: report the size only
           if (buf && cap >= sizeof(my_state)) memcpy(buf, obj, sizeof(my_state));
           return ACCEL_OK;
       }
       static accel_result my_load(void *obj, const void *buf, size_t size) {
           if (size != sizeof(my_state))                    // validate everything first, then apply
               return accel_set_error(NULL, ACCEL_ERR_FORMAT, "my_state: %zu bytes, not %zu", size, sizeof(my_state));
           memcpy(obj, buf, size);
           return ACCEL_OK;
       }
       accel_ckpt_register(ck, "my", my_save, my_load, &state);   // → my.bin
     A failing callback records why with accel_set_error (on its object's Accelerator, or NULL as here); load_state
     and save_state keep that message and put the file in front of it: "load_state: my.bin: my_state: 12 bytes, …".
     State that every rank saves separately (a ZeRO shard: accel_zero.h) registers with accel_ckpt_register_sharded.

   FILES OF A CHECKPOINT DIRECTORY (Accelerate's names, safetensors/JSON/bytes instead of pickles)
     model.safetensors, model_1.safetensors, …   registered models (metadata {"format":"pt"})        main process
     optimizer.safetensors, optimizer_1…          registered optimizer tensors (Accelerate: optimizer.bin)   main
     <name>.bin                                   the bytes of accel_ckpt_register(ck, "<name>", …): e.g.
                                                  scaler.bin (Accelerate: scaler.pt), sampler.bin, scheduler.bin main
     custom_checkpoint_<i>.bin                    accel_ckpt_register(ck, NULL, …) objects, i in registration order
                                                  (Accelerate: custom_checkpoint_<i>.pkl)                       main
     <name>_<rank>.bin                            every process: accel_ckpt_register_sharded objects (e.g. a ZeRO
                                                  shard of the optimizer state, accel_zero_state_save)
     random_states_<rank>.bin                     every process: its accel_state_save() bytes (ACCEL_STATE_BYTES:
                                                  step and optimizer/scheduler counters, sync flags, RNG seed and
                                                  offset; Accelerate: random_states_<rank>.pkl)
     accelerator_state.json                       {"format": "accel", "iteration": i, "num_processes": P,
                                                  "version": 1}                                                 main
     checkpoint_complete.json                     completion marker written last: {"files": {name: {"bytes": n,
                                                  "xxh64": "<16 hex>"}}, "format": "accel-checkpoint", "version": 1}
     "main" = the main process, or each local main process with save_on_each_node.

   CRASH SAFETY
     A checkpoint is written into the hidden sibling `.<name>.tmp`, every file fsync'd, the marker written, the
     directory fsync'd and renamed into place (then the parent fsync'd). A visible checkpoint directory is therefore
     always complete; load verifies the marker, sizes and XXH64 checksums of every file before applying anything,
     on the bytes it applies: each file is read once — a small file (objects, sharded objects' <name>_<rank>.bin,
     accelerator_state.json, random_states_*.bin) into the buffer that is hashed and later handed to its load
     callback, a safetensors file through one read-only mapping that is hashed and, once every checksum matched,
     copied from into the tensors; files of the marker the registration does not use are hashed from disk. (A
     checkpoint must not be truncated in place while it loads: a mapping past the end of a file raises SIGBUS; accel
     never modifies a published one.)
     Rotation renames a victim to a hidden name before deleting it. Stale hidden directories are removed by the next
     automatic save. accel_ckpt_latest() returns the newest complete checkpoint.

   OPTIONS (accel_ckpt_desc, zero = default)
     project_dir                  NULL → acc->desc.project_dir; automatic names go to project_dir/checkpoints.
     automatic_checkpoint_naming  nonzero: save_state(ck, NULL) writes checkpoint_<iteration>.
     total_limit                  keep this many newest complete checkpoints (0: all; automatic naming only).
     iteration                    the first iteration number (ProjectConfiguration.iteration).
     save_on_each_node            nonzero: each node's local main process writes the global files.
     Memory: every allocation goes through the Accelerator's allocators (accel.h "MEMORY"), staging buffers of device
     tensors through desc.pinned_allocator.

   ERRORS
     load_state verifies the whole checkpoint (marker, sizes, checksums, every tensor's name/dtype/shape, object
     files, counts, the training states) on every process and agrees on the verdict before applying anything. It
     then copies the tensors and calls the registered load callbacks, and only when every process succeeded restores
     the Accelerator's training state (accel_state_load, or accel_state_load_resharded on another number of
     processes; validated in the checks, so it cannot fail). Only a registered load callback that fails after the
     tensors were copied can leave a partial state (its error is returned; the Accelerator's counters and RNG are
     then untouched). Callbacks therefore run before the counters and the RNG are restored (Accelerate restores the
     RNG before custom objects).
     accel_ckpt_load_state(ck, NULL) returns ACCEL_ERR_NOT_FOUND only when there is no complete checkpoint yet: an
     expected outcome, logged once at info level by the main process ("no checkpoint under <dir>: starting
     fresh"); a checkpoint that exists but lacks something registered is ACCEL_ERR_INVALID_ARGUMENT or
     ACCEL_ERR_FORMAT. A failed callback's own message stays in accel_last_error (see above). An explicit
     save_state directory that exists is replaced (atomically swapped) only when it is empty or an accel checkpoint.
     A completed save whose rotation (total_limit) fails still succeeds; the failure is logged at warn level.

   THREADS AND STREAMS
     One thread at a time per accel / accel_ckpt. save_state hashes host data in a helper pthread while the calling
     thread writes, and verification hashes two files at a time (link with -pthread where libc needs it); the helper
     threads neither allocate nor record errors. Device tensors are staged as accel_safetensors.h stages them (on
     acc->stream); a call returns when the data is on disk / in the destination. save_state and load_state are
     collectives: every process calls them. Everything else is local.

   DIFFERENCES FROM ACCELERATE (deliberate; docs/semantics.md §5 and "Policies")
     - load_state restores the iteration (policy 5): the next automatic save goes to checkpoint_<saved + 1>.
     - load_state restores every counter of the Accelerator (accel_state_load), not only `step`.
     - total_limit rotation happens after the new checkpoint is complete and only counts complete checkpoints, so a
       crash never leaves fewer than the newest complete one (Accelerate deletes first).
     - Global state (scaler, sampler, scheduler, custom objects) is written once by the main process (Accelerate
       writes scaler.pt on every process).
     - Resuming on a different number of processes works: every rank reads every saved random_states_<i>.bin and
       accel_state_load_resharded (accel.h) restores the counters from rank 0's state and this rank's RNG from its
       own file, or re-derives it when the saving run had fewer processes. Accelerate requires the same number.
     - The files themselves follow accel_safetensors.h (its DIFFERENCES: strict JSON, the reference writer's layout).

*/
#ifndef ACCEL_CKPT_H_INCLUDED
#define ACCEL_CKPT_H_INCLUDED
#include "accel.h"
#include "accel_safetensors.h" /* the files a checkpoint is made of */
#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------- save/load state */
typedef struct accel_ckpt_desc {
    const char *project_dir;          /* NULL → acc->desc.project_dir */
    int automatic_checkpoint_naming;  /* nonzero: save_state(NULL) → project_dir/checkpoints/checkpoint_<iteration> */
    int total_limit;                  /* 0 = keep all (automatic naming only) */
    int iteration;                    /* first iteration number (ProjectConfiguration.iteration) */
    int save_on_each_node;            /* nonzero: each node's local main process writes the global files */
} accel_ckpt_desc;

typedef struct accel_ckpt accel_ckpt;
ACCEL_API accel_result accel_ckpt_create(accel *acc, const accel_ckpt_desc *desc, accel_ckpt **out);
ACCEL_API void accel_ckpt_destroy(accel_ckpt *ck); /* NULL ok; before accel_shutdown of its acc (it frees through it) */
/* Descriptors (and names) are copied; the data stays the caller's and must be valid at save/load time. */
ACCEL_API accel_result accel_ckpt_register_model(accel_ckpt *ck, const accel_tensor *tensors, int n);
/* load_state converts optimizer tensors saved as F32 into registered BF16 ones and back (accel_optim's moment_dtype):
   widening is exact, narrowing rounds to nearest even; every other dtype difference is an error. */
ACCEL_API accel_result accel_ckpt_register_optimizer(accel_ckpt *ck, const accel_tensor *tensors, int n);
/* Any object's state as bytes, through the core's contract (accel_state_save_fn / accel_state_load_fn, accel.h).
   name: file stem ([A-Za-z0-9_.-], e.g. "scheduler", "scaler", "sampler") → <name>.bin; NULL → the next
   custom_checkpoint_<i>.bin (Accelerate's register_for_checkpointing). */
ACCEL_API accel_result accel_ckpt_register(accel_ckpt *ck, const char *name, accel_state_save_fn save,
                                           accel_state_load_fn load, void *obj);
/* Loads state that every rank saved separately: bufs[i] / sizes[i] are saved rank i's bytes, count = the number of
   processes of the saving run (it may differ from this run's: re-partition here). Validate everything, then apply. */
typedef accel_result (*accel_ckpt_load_all_fn)(void *obj, const void *const *bufs, const size_t *sizes, int count);
/* Per-rank state (e.g. ZeRO optimizer shards, accel_zero_state_save / _load_all): EVERY process writes
   <name>_<rank>.bin with save(obj, ...); load_state reads every saved rank's file on every process and calls
   load(obj, bufs, sizes, count) — the saving run's process count may differ. name as for accel_ckpt_register
   (required). */
ACCEL_API accel_result accel_ckpt_register_sharded(accel_ckpt *ck, const char *name, accel_state_save_fn save,
                                                   accel_ckpt_load_all_fn load, void *obj);
/* Collective. output_dir NULL → automatic naming (an existing target is an error). out_dir (may be NULL)
   receives the final directory. iteration += 1 after a successful save (as Accelerate). */
ACCEL_API accel_result accel_ckpt_save_state(accel_ckpt *ck, const char *output_dir, char *out_dir, size_t cap);
/* Collective. input_dir NULL → the newest complete checkpoint under project_dir/checkpoints; ACCEL_ERR_NOT_FOUND
   (logged at info level, not an error to print) when there is none yet. Verifies everything (marker, sizes,
   checksums, tensor names/dtypes/shapes, object files, training states) on every process before applying; restores
   the Accelerator's training state with accel_state_load (accel_state_load_resharded on another number of
   processes), the registered objects and the iteration (policy 5). */
ACCEL_API accel_result accel_ckpt_load_state(accel_ckpt *ck, const char *input_dir);
ACCEL_API int accel_ckpt_iteration(const accel_ckpt *ck);
/* Newest complete checkpoint_<N> under checkpoints_dir (marker present, every listed file present with its size).
   ACCEL_ERR_NOT_FOUND when none (also when checkpoints_dir does not exist). Local. */
ACCEL_API accel_result accel_ckpt_latest(accel *acc, const char *checkpoints_dir, char *out, size_t cap);
/* Full check of a checkpoint directory: marker, sizes, XXH64 of every file. Local. */
ACCEL_API accel_result accel_ckpt_verify(accel *acc, const char *dir);

#ifdef __cplusplus
}
#endif
#endif /* ACCEL_CKPT_H_INCLUDED */

/* ========================================================================================== implementation */
#if defined(ACCEL_IMPLEMENTATION) && !defined(ACCEL__CKPT_IMPL_DONE)
#define ACCEL__CKPT_IMPL_DONE
#include "accel_safetensors.h" /* its implementation first, when this TU included the header before */
/* CONTENTS (the core's private services — allocation, errors, byte order, UTF-8, string builder, files, agreement —
   come from accel.h's implementation section, and the safetensors layer's (accel__st_*: JSON, XXH64, staging, the
   writer and the reader) from accel_safetensors.h's; both precede this one in the same TU)
     1. the checkpointer: create/destroy, registration, callbacks' root causes
     2. completion marker and verification
     3. listing and rotation
     4. save_state
     5. load_state */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <unistd.h>
#include <dirent.h>
#include <sys/types.h>
#include <sys/stat.h>
#include <sys/mman.h>
#include <pthread.h>

/* ----------------------------------------------- 1. the checkpointer: create/destroy, registration, root causes */
typedef struct accel__ckpt_group { accel_tensor *t; int n; } accel__ckpt_group;
typedef struct accel__ckpt_obj {
    char *name; /* the file name: "<name>.bin", "custom_checkpoint_<i>.bin", "random_states_<rank>.bin" */
    accel_state_save_fn save;
    accel_state_load_fn load;
    void *obj;
} accel__ckpt_obj;

typedef struct accel__ckpt_sobj {
    char *name; /* the stem: files are "<name>_<rank>.bin" */
    accel_state_save_fn save;
    accel_ckpt_load_all_fn load;
    void *obj;
} accel__ckpt_sobj;

struct accel_ckpt {
    accel *acc;
    accel_ckpt_desc d;
    char project_dir[2048];
    accel__ckpt_group *models, *optims; /* stb_ds arrays */
    accel__ckpt_obj *objs;
    accel__ckpt_sobj *sobjs;            /* accel_ckpt_register_sharded */
    int n_custom;
    int iteration;
};

#define ACCEL__CKPT_MARKER "checkpoint_complete.json"

static void accel__ckpt_group_free(accel *acc, accel__ckpt_group *g) {
    int i;
    for (i = 0; i < g->n; ++i) accel_host_free(acc, (void *)g->t[i].name);
    accel_host_free(acc, g->t);
}
ACCEL__DEF void accel_ckpt_destroy(accel_ckpt *ck) {
    int i;
    if (!ck) return;
    for (i = 0; i < (int)stbds_arrlen(ck->models); ++i) accel__ckpt_group_free(ck->acc, &ck->models[i]);
    for (i = 0; i < (int)stbds_arrlen(ck->optims); ++i) accel__ckpt_group_free(ck->acc, &ck->optims[i]);
    for (i = 0; i < (int)stbds_arrlen(ck->objs); ++i) accel_host_free(ck->acc, ck->objs[i].name);
    for (i = 0; i < (int)stbds_arrlen(ck->sobjs); ++i) accel_host_free(ck->acc, ck->sobjs[i].name);
    stbds_arrfree(ck->models);
    stbds_arrfree(ck->optims);
    stbds_arrfree(ck->objs);
    stbds_arrfree(ck->sobjs);
    accel_host_free(ck->acc, ck);
}
ACCEL__DEF accel_result accel_ckpt_create(accel *acc, const accel_ckpt_desc *desc, accel_ckpt **out) {
    accel_ckpt *ck;
    const char *pd;
    if (!acc || !out) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_ckpt_create: NULL argument");
    *out = NULL;
    if (desc && (desc->total_limit < 0 || desc->iteration < 0))
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                           "accel_ckpt_desc: total_limit=%d and iteration=%d must be >= 0", desc->total_limit,
                           desc->iteration);
    pd = desc && desc->project_dir ? desc->project_dir : (acc->desc.project_dir ? acc->desc.project_dir : ".");
    if (strlen(pd) >= 2000) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "project_dir is too long");
    ck = (accel_ckpt *)accel_host_alloc(acc, sizeof *ck);
    if (!ck) return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "accel_ckpt_create");
    memset(ck, 0, sizeof *ck);
    ck->acc = acc;
    if (desc) ck->d = *desc;
    accel__fmt(ck->project_dir, sizeof ck->project_dir, "%s", pd);
    ck->d.project_dir = ck->project_dir;
    ck->iteration = ck->d.iteration;
    *out = ck;
    return ACCEL_OK;
}
ACCEL__DEF int accel_ckpt_iteration(const accel_ckpt *ck) { return ck ? ck->iteration : -1; }

static accel_result accel__ckpt_register_group(accel_ckpt *ck, accel__ckpt_group **arr, const accel_tensor *t, int n,
                                               const char *what) {
    accel__ckpt_group g;
    int i;
    accel_result r;
    if (!ck) return ACCEL__FAIL(NULL, ACCEL_ERR_INVALID_ARGUMENT, "%s: ck is NULL", what);
    r = accel__st_check_tensors(ck->acc, t, n, what);
    if (r != ACCEL_OK) return r;
    g.n = n;
    g.t = (accel_tensor *)accel_host_alloc(ck->acc, sizeof(accel_tensor) * (size_t)(n ? n : 1));
    if (!g.t) return accel__fail_wrap(ck->acc, ACCEL_ERR_OUT_OF_MEMORY, "%s", what);
    for (i = 0; i < n; ++i) {
        g.t[i] = t[i];
        g.t[i].name = accel__st_strndup(ck->acc, t[i].name, strlen(t[i].name));
        if (!g.t[i].name) {
            g.n = i;
            accel__ckpt_group_free(ck->acc, &g);
            return accel__fail_wrap(ck->acc, ACCEL_ERR_OUT_OF_MEMORY, "%s", what);
        }
    }
    if (ACCEL__ARR_PUT(*arr, g) != 0) {
        accel__ckpt_group_free(ck->acc, &g);
        return ACCEL__FAIL(ck->acc, ACCEL_ERR_OUT_OF_MEMORY, "%s: out of memory", what);
    }
    return ACCEL_OK;
}
ACCEL__DEF accel_result accel_ckpt_register_model(accel_ckpt *ck, const accel_tensor *t, int n) {
    return accel__ckpt_register_group(ck, ck ? &ck->models : NULL, t, n, "register_model");
}
ACCEL__DEF accel_result accel_ckpt_register_optimizer(accel_ckpt *ck, const accel_tensor *t, int n) {
    return accel__ckpt_register_group(ck, ck ? &ck->optims : NULL, t, n, "register_optimizer");
}
static accel_result accel__ckpt_check_name(accel_ckpt *ck, const char *name, const char *what) {
    static const char *reserved[] = {
        "model", "optimizer", "random_states", "accelerator_state", "checkpoint_complete", "custom_checkpoint", NULL};
    size_t k, len = strlen(name);
    if (len == 0 || len > 64)
        return ACCEL__FAIL(ck->acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: a name must have 1..64 characters", what);
    for (k = 0; k < len; ++k) {
        char c = name[k];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
              c == '.'))
            return ACCEL__FAIL(ck->acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: name \"%.64s\" may only use [A-Za-z0-9_.-]",
                               what, name);
    }
    if (name[0] == '.')
        return ACCEL__FAIL(ck->acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: name \"%.64s\" may not start with '.'", what,
                           name);
    for (k = 0; reserved[k]; ++k)
        if (!strncmp(name, reserved[k], strlen(reserved[k])))
            return ACCEL__FAIL(ck->acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: name \"%.64s\" is reserved", what, name);
    return ACCEL_OK;
}
/* Is file name fn ("x.bin") one of sharded stem's files ("<stem>_<digits>.bin")? */
static int accel__ckpt_is_sharded_file(const char *fn, const char *stem) {
    size_t ls = strlen(stem), lf = strlen(fn), k;
    if (lf < ls + 6 || strncmp(fn, stem, ls) != 0 || fn[ls] != '_' || strcmp(fn + lf - 4, ".bin") != 0) return 0;
    for (k = ls + 1; k < lf - 4; ++k)
        if (fn[k] < '0' || fn[k] > '9') return 0;
    return 1;
}

ACCEL__DEF accel_result accel_ckpt_register(accel_ckpt *ck, const char *name, accel_state_save_fn save,
                                            accel_state_load_fn load, void *obj) {
    accel__ckpt_obj o;
    char buf[96];
    int i;
    accel_result r;
    if (!ck || !save || !load)
        return ACCEL__FAIL(ck ? ck->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, "register: NULL ck, save or load");
    if (name) {
        if ((r = accel__ckpt_check_name(ck, name, "register")) != ACCEL_OK) return r;
        accel__fmt(buf, sizeof buf, "%s.bin", name);
    } else {
        accel__fmt(buf, sizeof buf, "custom_checkpoint_%d.bin", ck->n_custom);
    }
    for (i = 0; i < (int)stbds_arrlen(ck->objs); ++i)
        if (!strcmp(ck->objs[i].name, buf))
            return ACCEL__FAIL(ck->acc, ACCEL_ERR_INVALID_ARGUMENT, "register: \"%s\" is already registered", buf);
    for (i = 0; i < (int)stbds_arrlen(ck->sobjs); ++i)
        if (accel__ckpt_is_sharded_file(buf, ck->sobjs[i].name))
            return ACCEL__FAIL(ck->acc, ACCEL_ERR_INVALID_ARGUMENT, "register: \"%s\" is a file of the sharded \"%s\"",
                               buf, ck->sobjs[i].name);
    o.name = accel__st_strndup(ck->acc, buf, strlen(buf));
    if (!o.name) return accel__fail_wrap(ck->acc, ACCEL_ERR_OUT_OF_MEMORY, "register %s", buf);
    o.save = save;
    o.load = load;
    o.obj = obj;
    if (ACCEL__ARR_PUT(ck->objs, o) != 0) {
        accel_host_free(ck->acc, o.name);
        return ACCEL__FAIL(ck->acc, ACCEL_ERR_OUT_OF_MEMORY, "register %s: out of memory", buf);
    }
    if (!name) ck->n_custom++;
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_ckpt_register_sharded(accel_ckpt *ck, const char *name, accel_state_save_fn save,
                                                    accel_ckpt_load_all_fn load, void *obj) {
    accel__ckpt_sobj o;
    accel_result r;
    int i;
    if (!ck || !name || !save || !load)
        return ACCEL__FAIL(ck ? ck->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT,
                           "register_sharded: NULL ck, name, save or load");
    if ((r = accel__ckpt_check_name(ck, name, "register_sharded")) != ACCEL_OK) return r;
    for (i = 0; i < (int)stbds_arrlen(ck->sobjs); ++i)
        if (!strcmp(ck->sobjs[i].name, name))
            return ACCEL__FAIL(ck->acc, ACCEL_ERR_INVALID_ARGUMENT,
                               "register_sharded: \"%s\" collides with the sharded \"%s\"", name, ck->sobjs[i].name);
    for (i = 0; i < (int)stbds_arrlen(ck->objs); ++i)
        if (accel__ckpt_is_sharded_file(ck->objs[i].name, name))
            return ACCEL__FAIL(ck->acc, ACCEL_ERR_INVALID_ARGUMENT,
                               "register_sharded: \"%s\" would collide with the registered \"%s\"", name,
                               ck->objs[i].name);
    o.name = accel__st_strndup(ck->acc, name, strlen(name));
    if (!o.name) return accel__fail_wrap(ck->acc, ACCEL_ERR_OUT_OF_MEMORY, "register_sharded %s", name);
    o.save = save;
    o.load = load;
    o.obj = obj;
    if (ACCEL__ARR_PUT(ck->sobjs, o) != 0) {
        accel_host_free(ck->acc, o.name);
        return ACCEL__FAIL(ck->acc, ACCEL_ERR_OUT_OF_MEMORY, "register_sharded %s: out of memory", name);
    }
    return ACCEL_OK;
}

/* Root causes of registered callbacks. Whether a callback recorded a message at all is the core's error sequence
   (accel__error_seq: it moves with every failure recorded anywhere); where: on its object's Accelerator (normally
   ck->acc: its buffer changed) or, for an object without one, in the process-wide buffer (the manual's two places). */
typedef struct accel__ckpt_errmark { unsigned long seq; char own[ACCEL_ERROR_CAPACITY]; } accel__ckpt_errmark;
static void accel__ckpt_errmark_now(const accel *acc, accel__ckpt_errmark *m) {
    m->seq = accel__error_seq();
    memcpy(m->own, accel_last_error(acc), ACCEL_ERROR_CAPACITY);
}
/* After a callback failed with r: "<what>: <file>: <the callback's message>" in acc. */
static accel_result accel__ckpt_callback_failed(accel *acc, accel_result r, const accel__ckpt_errmark *before,
                                                const char *what, const char *file) {
    const char *m;
    if (accel__error_seq() == before->seq)
        return ACCEL__FAIL(acc, r, "%s: %s: the callback returned %s without a message (accel_set_error records one)",
                           what, file, accel_result_string(r));
    if (memcmp(before->own, accel_last_error(acc), ACCEL_ERROR_CAPACITY))
        return accel__fail_wrap(acc, r, "%s: %s", what, file);
    m = accel_last_error(NULL);
    if (!strncmp(m, "[rank ", 6) && strstr(m, "] ")) m = strstr(m, "] ") + 2;
    return ACCEL__FAIL(acc, r, "%s: %s: %.700s", what, file, m);
}

/* The Accelerator's own training state as a registered-like object (accel_state_save has the contract's shape). */
static accel_result accel__ckpt_core_state_save(void *acc, void *buf, size_t cap, size_t *size) {
    return accel_state_save((accel *)acc, buf, cap, size);
}

typedef struct accel__ckpt_written { char name[96]; uint64_t bytes, hash; } accel__ckpt_written;
static accel_result accel__ckpt_put_written(accel *acc, accel__ckpt_written **list, const accel__ckpt_written *w) {
    if (ACCEL__ARR_PUT(*list, *w) != 0)
        return ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "save_state: %s: out of memory", w->name);
    return ACCEL_OK;
}

static void accel__ckpt_group_file(char *out, size_t cap, const char *stem, int i) {
    if (i == 0) accel__fmt(out, cap, "%s.safetensors", stem);
    else accel__fmt(out, cap, "%s_%d.safetensors", stem, i);
}

static int accel__ckpt_number(const char *name, long *num) { /* "checkpoint_<digits>" */
    const char *p;
    long v = 0;
    if (strncmp(name, "checkpoint_", 11)) return 0;
    p = name + 11;
    if (!*p) return 0;
    for (; *p; ++p) {
        if (*p < '0' || *p > '9' || v > (LONG_MAX - 9) / 10) return 0;
        v = v * 10 + (*p - '0');
    }
    *num = v;
    return 1;
}

/* ------------------------------------------------------------------------ 2. completion marker and verification */
/* Hashes a whole file through a read-only mapping (no copy out of the page cache), read() into a stack buffer as a
   fallback. Returns 0 or an errno. Runs in verification threads: it neither allocates nor records errors. */
static int accel__ckpt_hash_file_raw(const char *path, uint64_t *bytes, uint64_t *hash) {
    struct stat st;
    int fd = accel__open_regular_fd(path, &st), e; /* EINVAL: not a regular file (a FIFO would hang the open) */
    accel__st_xxh64 h;
    unsigned char buf[64 * 1024];
    uint64_t total = 0;
    if (fd < 0) return errno ? errno : EIO;
    accel__st_xxh64_init(&h, 0);
    if (st.st_size > 0) {
        void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
        if (m != MAP_FAILED) {
#ifdef MADV_SEQUENTIAL
            madvise(m, (size_t)st.st_size, MADV_SEQUENTIAL);
#endif
            accel__st_xxh64_update(&h, m, (size_t)st.st_size);
            munmap(m, (size_t)st.st_size);
            close(fd);
            *bytes = (uint64_t)st.st_size;
            *hash = accel__st_xxh64_final(&h);
            return 0;
        }
    }
    for (;;) {
        ssize_t r = read(fd, buf, sizeof buf);
        if (r < 0) {
            if (errno == EINTR) continue;
            e = errno;
            close(fd);
            return e ? e : EIO;
        }
        if (r == 0) break;
        accel__st_xxh64_update(&h, buf, (size_t)r);
        total += (uint64_t)r;
    }
    close(fd);
    *bytes = total;
    *hash = accel__st_xxh64_final(&h);
    return 0;
}
static accel_result accel__ckpt_hash_file(accel *acc, const char *path, uint64_t *bytes, uint64_t *hash) {
    int e = accel__ckpt_hash_file_raw(path, bytes, hash);
    if (e == 0) return ACCEL_OK;
    errno = e;
    if (e == ENOENT) return ACCEL__FAIL(acc, ACCEL_ERR_NOT_FOUND, "%.400s does not exist", path);
    if (e == EINVAL) return ACCEL__FAIL(acc, ACCEL_ERR_IO, "%.400s is not a regular file", path);
    return accel__io_fail(acc, "cannot read", path);
}

/* "Not a complete checkpoint" outcomes: recorded as ACCEL_ERR_FORMAT, or only returned when `quiet` (listing probes
   many directories, most of them legitimately incomplete; real failures — I/O, memory — are always recorded). */
#define ACCEL__CKPT_INCOMPLETE(acc, quiet, ...)                                                                        \
    ((quiet) ? ACCEL_ERR_FORMAT : ACCEL__FAIL((acc), ACCEL_ERR_FORMAT, __VA_ARGS__))

/* The completion marker: file list with sizes and checksums. */
typedef struct accel__ckpt_marker { accel__ckpt_written *files; } accel__ckpt_marker;
static accel_result accel__ckpt_marker_read(accel *acc, const char *dir, int quiet, accel__ckpt_marker *m) {
    char path[4200], *data = NULL;
    size_t n = 0;
    accel__st_json j;
    int root, fl, c;
    accel_result r;
    memset(m, 0, sizeof *m);
    accel__fmt(path, sizeof path, "%s/" ACCEL__CKPT_MARKER, dir);
    if (!accel__is_file(path))
        return ACCEL__CKPT_INCOMPLETE(acc, quiet, "%.400s is not a complete checkpoint: no " ACCEL__CKPT_MARKER, dir);
    r = accel__read_file(acc, path, &data, &n, (size_t)16 << 20);
    if (r != ACCEL_OK) return r;
    if (!accel__utf8_valid((const unsigned char *)data, n, NULL)) {
        accel_host_free(acc, data);
        return ACCEL__CKPT_INCOMPLETE(acc, quiet, "%.400s is not valid UTF-8", path);
    }
    root = accel__st_json_parse(&j, acc, data, n);
    accel_host_free(acc, data);
    if (root < 0) {
        r = j.oom || !quiet ? accel__st_json_failed(acc, &j, path) : ACCEL_ERR_FORMAT;
        accel__st_json_free(&j);
        return r;
    }
    fl = accel__st_jget(&j, root, "files");
    if (fl < 0 || j.nodes[fl].type != ACCEL__ST_J_OBJ) {
        accel__st_json_free(&j);
        return ACCEL__CKPT_INCOMPLETE(acc, quiet, "%.400s has no \"files\" object", path);
    }
    for (c = j.nodes[fl].first; c >= 0; c = j.nodes[c].next) {
        accel__ckpt_written w;
        int b = accel__st_jget(&j, c, "bytes"), h = accel__st_jget(&j, c, "xxh64"), k, okhex = 1;
        const char *hs;
        memset(&w, 0, sizeof w);
        if (j.nodes[c].keylen >= sizeof w.name || strlen(accel__st_jkeyp(&j, c)) != j.nodes[c].keylen ||
            !accel__st_safe_file_name(accel__st_jkeyp(&j, c)) || b < 0 || h < 0 || accel__st_ju64(&j, b, &w.bytes) ||
            j.nodes[h].type != ACCEL__ST_J_STR || j.nodes[h].len != 16)
            okhex = 0;
        if (okhex) {
            hs = accel__st_jstr(&j, h);
            for (k = 0; k < 16; ++k) {
                char ch = hs[k];
                unsigned v = (ch >= '0' && ch <= '9')   ? (unsigned)(ch - '0')
                             : (ch >= 'a' && ch <= 'f') ? (unsigned)(ch - 'a' + 10)
                                                        : 99u;
                if (v > 15) { okhex = 0; break; }
                w.hash = (w.hash << 4) | v;
            }
        }
        if (!okhex) {
            r = ACCEL__CKPT_INCOMPLETE(acc, quiet, "%.400s: malformed entry for '%.100s'", path,
                                       accel__st_jkeyp(&j, c));
            accel__st_json_free(&j);
            stbds_arrfree(m->files);
            return r;
        }
        memcpy(w.name, accel__st_jkeyp(&j, c), j.nodes[c].keylen + 1);
        if (ACCEL__ARR_PUT(m->files, w) != 0) {
            accel__st_json_free(&j);
            stbds_arrfree(m->files);
            m->files = NULL;
            return ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "%.400s: out of memory", path);
        }
    }
    accel__st_json_free(&j);
    return ACCEL_OK;
}
/* Parallel checksum verification: the calling thread and one helper take files in turn. A file whose bytes the
   caller already holds (mem[i] non-NULL: load_state's read buffers and tensor mappings) is hashed there, in memory;
   any other file is hashed from disk. */
typedef struct accel__ckpt_verify_job {
    const char *dir;
    const accel__ckpt_written *files;
    const unsigned char *const *mem; /* NULL, or per file: its bytes (NULL: hash the file) */
    const size_t *mem_n;
    int n, next;
    uint64_t *bytes, *hash;
    int *err;
    pthread_mutex_t lock;
} accel__ckpt_verify_job;
static void *accel__ckpt_verify_worker(void *arg) {
    accel__ckpt_verify_job *j = (accel__ckpt_verify_job *)arg;
    for (;;) {
        int i;
        char path[4200];
        pthread_mutex_lock(&j->lock);
        i = j->next++;
        pthread_mutex_unlock(&j->lock);
        if (i >= j->n) break;
        if (j->mem && j->mem[i]) {
            j->bytes[i] = (uint64_t)j->mem_n[i];
            j->hash[i] = accel_st_xxh64(j->mem[i], j->mem_n[i], 0);
            j->err[i] = 0;
            continue;
        }
        accel__fmt(path, sizeof path, "%s/%s", j->dir, j->files[i].name);
        j->err[i] = accel__ckpt_hash_file_raw(path, &j->bytes[i], &j->hash[i]);
    }
    return NULL;
}
/* Every checksum of the marker m (sizes included) against the files' bytes: mem/mem_n as in the job (may be NULL). */
static accel_result accel__ckpt_verify_files(accel *acc, const char *dir, const accel__ckpt_marker *m,
                                             const unsigned char *const *mem, const size_t *mem_n) {
    accel__ckpt_verify_job j;
    pthread_t helper;
    int threaded = 0, i, nf = (int)stbds_arrlen(m->files);
    accel_result r = ACCEL_OK;
    if (nf == 0) return ACCEL_OK;
    memset(&j, 0, sizeof j);
    j.dir = dir;
    j.files = m->files;
    j.mem = mem;
    j.mem_n = mem_n;
    j.n = nf;
    j.bytes = (uint64_t *)accel_host_alloc(acc, sizeof(uint64_t) * (size_t)nf);
    j.hash = (uint64_t *)accel_host_alloc(acc, sizeof(uint64_t) * (size_t)nf);
    j.err = (int *)accel_host_alloc(acc, sizeof(int) * (size_t)nf);
    if (!j.bytes || !j.hash || !j.err) r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "verifying %.400s", dir);
    else if (pthread_mutex_init(&j.lock, NULL) != 0) r = ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "verify: mutex");
    else {
        if (nf > 1 && pthread_create(&helper, NULL, accel__ckpt_verify_worker, &j) == 0) threaded = 1;
        accel__ckpt_verify_worker(&j);
        if (threaded) pthread_join(helper, NULL);
        pthread_mutex_destroy(&j.lock);
        for (i = 0; i < nf && r == ACCEL_OK; ++i) {
            char path[4200];
            accel__fmt(path, sizeof path, "%s/%s", dir, m->files[i].name);
            if (j.err[i] == EINVAL) {
                r = ACCEL__FAIL(acc, ACCEL_ERR_IO, "%.400s is not a regular file", path);
            } else if (j.err[i]) {
                errno = j.err[i];
                r = accel__io_fail(acc, "cannot verify", path);
            } else if (j.bytes[i] != m->files[i].bytes) {
                r = ACCEL__FAIL(
                    acc, ACCEL_ERR_FORMAT, "corrupt checkpoint %.400s: %s is %llu bytes, the marker says %llu", dir,
                    m->files[i].name, (unsigned long long)j.bytes[i], (unsigned long long)m->files[i].bytes);
            } else if (j.hash[i] != m->files[i].hash) {
                r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT,
                                "corrupt checkpoint %.400s: checksum of %s is %016llx, the marker says %016llx", dir,
                                m->files[i].name, (unsigned long long)j.hash[i], (unsigned long long)m->files[i].hash);
            }
        }
    }
    accel_host_free(acc, j.bytes);
    accel_host_free(acc, j.hash);
    accel_host_free(acc, j.err);
    return r;
}
/* Marker present, every listed file with its size; full: also every checksum. keep (may be NULL) receives the
   marker on success. quiet: see ACCEL__CKPT_INCOMPLETE. */
static accel_result accel__ckpt_check_complete(accel *acc, const char *dir, int full, int quiet,
                                               accel__ckpt_marker *keep) {
    accel__ckpt_marker m;
    int i, nf;
    accel_result r = accel__ckpt_marker_read(acc, dir, quiet, &m);
    if (r != ACCEL_OK) return r;
    nf = (int)stbds_arrlen(m.files);
    for (i = 0; i < nf && r == ACCEL_OK; ++i) {
        char path[4200];
        struct stat st;
        accel__fmt(path, sizeof path, "%s/%s", dir, m.files[i].name);
        if (stat(path, &st) != 0) {
            r = ACCEL__CKPT_INCOMPLETE(acc, quiet, "incomplete checkpoint %.400s: %s is missing", dir, m.files[i].name);
            break;
        }
        if ((uint64_t)st.st_size != m.files[i].bytes) {
            r = ACCEL__CKPT_INCOMPLETE(acc, quiet, "corrupt checkpoint %.400s: %s is %llu bytes, the marker says %llu",
                                       dir, m.files[i].name, (unsigned long long)st.st_size,
                                       (unsigned long long)m.files[i].bytes);
            break;
        }
    }
    if (r == ACCEL_OK && full) r = accel__ckpt_verify_files(acc, dir, &m, NULL, NULL);
    if (r == ACCEL_OK && keep) *keep = m;
    else stbds_arrfree(m.files);
    return r;
}
ACCEL__DEF accel_result accel_ckpt_verify(accel *acc, const char *dir) {
    if (!dir) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "verify: dir is NULL");
    if (!accel__is_dir(dir)) return ACCEL__FAIL(acc, ACCEL_ERR_NOT_FOUND, "%.400s is not a directory", dir);
    return accel__ckpt_check_complete(acc, dir, 1, 0, NULL);
}

/* The owner's part of sealing a checkpoint: hash the files it did not write, write the marker, fsync. */
static accel_result accel__ckpt_write_marker(accel *acc, const char *tmp, accel__ckpt_written **written) {
    DIR *d = opendir(tmp);
    struct dirent *de;
    char path[4200];
    accel_result r = ACCEL_OK;
    accel__sb b;
    accel__st_name_file *order;
    int nw, i;
    if (!d) return accel__io_fail(acc, "cannot list", tmp);
    while (r == ACCEL_OK && (de = readdir(d)) != NULL) {
        accel__ckpt_written w;
        int k, mine = 0;
        if (de->d_name[0] == '.' || !strcmp(de->d_name, ACCEL__CKPT_MARKER)) continue;
        for (k = 0; k < (int)stbds_arrlen(*written); ++k)
            if (!strcmp((*written)[k].name, de->d_name)) mine = 1;
        if (mine || strlen(de->d_name) >= sizeof w.name) continue;
        accel__fmt(w.name, sizeof w.name, "%s", de->d_name);
        accel__fmt(path, sizeof path, "%s/%s", tmp, de->d_name);
        r = accel__ckpt_hash_file(acc, path, &w.bytes, &w.hash);
        if (r == ACCEL_OK && ACCEL__ARR_PUT(*written, w) != 0)
            r = ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "writing " ACCEL__CKPT_MARKER ": out of memory");
    }
    closedir(d);
    if (r != ACCEL_OK) return r;
    nw = (int)stbds_arrlen(*written);
    order = (accel__st_name_file *)accel_host_alloc(acc, sizeof(accel__st_name_file) * (size_t)(nw ? nw : 1));
    if (!order) return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "writing " ACCEL__CKPT_MARKER);
    for (i = 0; i < nw; ++i) { order[i].name = (*written)[i].name; order[i].shard = i; }
    qsort(order, (size_t)nw, sizeof *order, accel__st_name_file_cmp);
    accel__sb_init(&b, acc);
    accel__sb_puts(&b, "{\"files\": {");
    for (i = 0; i < nw; ++i) {
        char hx[24];
        const accel__ckpt_written *w = &(*written)[order[i].shard];
        if (i) accel__sb_puts(&b, ", ");
        accel__sb_json_str(&b, w->name, strlen(w->name), 1);
        accel__sb_puts(&b, ": {\"bytes\": ");
        accel__st_sb_u64(&b, w->bytes);
        accel__fmt(hx, sizeof hx, "%016llx", (unsigned long long)w->hash);
        accel__sb_puts(&b, ", \"xxh64\": \"");
        accel__sb_puts(&b, hx);
        accel__sb_puts(&b, "\"}");
    }
    accel__sb_puts(&b, "}, \"format\": \"accel-checkpoint\", \"version\": 1}\n");
    accel_host_free(acc, order);
    accel__fmt(path, sizeof path, "%s/" ACCEL__CKPT_MARKER, tmp);
    r = b.oom ? accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "writing " ACCEL__CKPT_MARKER)
              : accel__write_file(acc, path, b.p, b.n, 0);
    accel__sb_free(&b);
    if (r == ACCEL_OK && accel__fsync_dir(tmp) != 0) r = accel__io_fail(acc, "cannot fsync directory", tmp);
    return r;
}

/* -------------------------------------------------------------------------------------- 3. listing and rotation */
/* Complete checkpoints under dir, sorted ascending by number. */
typedef struct accel__ckpt_ent { long num; char name[64]; } accel__ckpt_ent;
static int accel__ckpt_ent_cmp(const void *a, const void *b) {
    long x = ((const accel__ckpt_ent *)a)->num, y = ((const accel__ckpt_ent *)b)->num;
    return x < y ? -1 : x > y;
}
/* *out: stb_ds array of the complete checkpoint_<N> directories (empty when dir does not exist). Incomplete ones are
   skipped silently; anything else that goes wrong (an unreadable directory or marker, memory) is an error. */
static accel_result accel__ckpt_list_ckpts(accel *acc, const char *dir, accel__ckpt_ent **out) {
    DIR *d = opendir(dir);
    struct dirent *de;
    accel__ckpt_ent *list = NULL;
    accel_result r = ACCEL_OK;
    *out = NULL;
    if (!d) return errno == ENOENT ? ACCEL_OK : accel__io_fail(acc, "cannot list", dir);
    while (r == ACCEL_OK && (de = readdir(d)) != NULL) {
        accel__ckpt_ent e;
        char path[4200];
        if (!accel__ckpt_number(de->d_name, &e.num) || strlen(de->d_name) >= sizeof e.name) continue;
        accel__fmt(path, sizeof path, "%s/%s", dir, de->d_name);
        if (!accel__is_dir(path)) continue;
        r = accel__ckpt_check_complete(acc, path, 0, 1, NULL);
        if (r == ACCEL_ERR_FORMAT) { r = ACCEL_OK; continue; } /* incomplete: not a checkpoint (yet) */
        if (r != ACCEL_OK) break;
        accel__fmt(e.name, sizeof e.name, "%s", de->d_name);
        if (ACCEL__ARR_PUT(list, e) != 0) r = ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "out of memory");
    }
    closedir(d);
    if (r != ACCEL_OK) {
        stbds_arrfree(list);
        return accel__fail_wrap(acc, r, "listing checkpoints under %.400s", dir);
    }
    if (list) qsort(list, (size_t)stbds_arrlen(list), sizeof *list, accel__ckpt_ent_cmp);
    *out = list;
    return ACCEL_OK;
}
ACCEL__DEF accel_result accel_ckpt_latest(accel *acc, const char *dir, char *out, size_t cap) {
    accel__ckpt_ent *list;
    accel_result r;
    int n;
    if (!dir || !out || cap == 0) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "latest: NULL argument");
    out[0] = 0;
    r = accel__ckpt_list_ckpts(acc, dir, &list);
    if (r != ACCEL_OK) return r;
    n = (int)stbds_arrlen(list);
    if (n == 0) r = ACCEL__FAIL(acc, ACCEL_ERR_NOT_FOUND, "no complete checkpoint under %.400s", dir);
    else if ((size_t)accel__fmt(out, cap, "%s/%s", dir, list[n - 1].name) >= cap) {
        out[0] = 0;
        r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "latest: output buffer too small");
    }
    stbds_arrfree(list);
    return r;
}

/* total_limit: the oldest complete checkpoints beyond the limit go, never the one just written. Each is renamed to
   a hidden name first, so none is ever half-deleted in view. The new checkpoint is already published: a failure here
   cannot undo the save, so it is logged (warn) instead of returned. */
static void accel__ckpt_rotate(accel *acc, const char *parent, const char *keep, int total_limit) {
    accel__ckpt_ent *list = NULL;
    int n, k;
    if (accel__ckpt_list_ckpts(acc, parent, &list) != ACCEL_OK) {
        accel_log(acc, ACCEL_LOG_WARN, "save_state: rotation (total_limit %d) skipped: %s", total_limit,
                  accel_last_error(acc));
        return;
    }
    n = (int)stbds_arrlen(list);
    for (k = 0; k + total_limit < n; ++k) {
        char victim[4200], hidden[4200];
        accel__fmt(victim, sizeof victim, "%s/%s", parent, list[k].name);
        if (!strcmp(victim, keep)) continue;
        accel__fmt(hidden, sizeof hidden, "%s/.%s.del", parent, list[k].name);
        accel__rmtree(hidden);
        if (rename(victim, hidden) != 0 || accel__rmtree(hidden) != 0)
            accel_log(acc, ACCEL_LOG_WARN, "save_state: rotation (total_limit %d) could not remove %s: %s", total_limit,
                      victim, strerror(errno));
    }
    stbds_arrfree(list);
    accel__fsync_dir(parent);
}

/* Removes hidden leftovers (.checkpoint_N.tmp/.del/.old) of interrupted saves under parent. */
static void accel__ckpt_clean_hidden(const char *parent) {
    DIR *d = opendir(parent);
    struct dirent *de;
    char path[4200];
    while (d && (de = readdir(d)) != NULL) {
        size_t l = strlen(de->d_name);
        long num;
        char inner[256];
        if (de->d_name[0] != '.' || l < 6 || l >= sizeof inner) continue;
        if (strcmp(de->d_name + l - 4, ".tmp") && strcmp(de->d_name + l - 4, ".del") &&
            strcmp(de->d_name + l - 4, ".old"))
            continue;
        memcpy(inner, de->d_name + 1, l - 5);
        inner[l - 5] = 0;
        if (!accel__ckpt_number(inner, &num)) continue;
        accel__fmt(path, sizeof path, "%s/%s", parent, de->d_name);
        accel__rmtree(path);
    }
    if (d) closedir(d);
}

/* ------------------------------------------------------------------------------------------------ 4. save_state */
/* Where a save goes: the target, its parent, the hidden temporary sibling, the hidden name of a replaced target. */
typedef struct accel__ckpt_save_paths {
    char target[2300], parent[2300], tmp[2400], old[2400];
    int automatic, owner;
} accel__ckpt_save_paths;

static accel_result accel__ckpt_save_resolve(accel_ckpt *ck, const char *output_dir, accel__ckpt_save_paths *sp) {
    accel *acc = ck->acc;
    const char *base;
    memset(sp, 0, sizeof *sp);
    sp->automatic = !output_dir;
    sp->owner =
        acc->num_processes <= 1 || (ck->d.save_on_each_node ? acc->is_local_main_process : acc->is_main_process);
    if (sp->automatic && !ck->d.automatic_checkpoint_naming)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                           "save_state: output_dir is NULL and automatic_checkpoint_naming is off");
    if (sp->automatic) {
        accel__fmt(sp->parent, sizeof sp->parent, "%s/checkpoints", ck->project_dir);
        accel__fmt(sp->target, sizeof sp->target, "%s/checkpoint_%d", sp->parent, ck->iteration);
    } else {
        size_t l = strlen(output_dir);
        while (l > 1 && output_dir[l - 1] == '/') --l;
        if (l == 0 || l >= 2000) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "save_state: bad output_dir");
        accel__fmt(sp->target, sizeof sp->target, "%.*s", (int)l, output_dir);
        accel__dirname(sp->target, sp->parent, sizeof sp->parent);
    }
    base = strrchr(sp->target, '/');
    base = base ? base + 1 : sp->target;
    if (!*base || !strcmp(base, ".") || !strcmp(base, ".."))
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "save_state: output_dir must name a directory");
    accel__fmt(sp->tmp, sizeof sp->tmp, "%s/.%s.tmp", sp->parent, base);
    accel__fmt(sp->old, sizeof sp->old, "%s/.%s.old", sp->parent, base);
    return ACCEL_OK;
}

/* An existing explicit output directory is replaced only when it is empty or a checkpoint (it is swapped out). */
static int accel__ckpt_replaceable(const char *dir) {
    char path[4200];
    DIR *d;
    struct dirent *de;
    int empty = 1;
    accel__fmt(path, sizeof path, "%s/" ACCEL__CKPT_MARKER, dir);
    if (accel__is_file(path)) return 1;
    d = opendir(dir);
    if (!d) return 0;
    while ((de = readdir(d)) != NULL)
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) empty = 0;
    closedir(d);
    return empty;
}
static int accel__ckpt_exists_not_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && !S_ISDIR(st.st_mode);
}

/* The owner checks the target and creates the empty temporary sibling. */
static accel_result accel__ckpt_save_prepare(accel_ckpt *ck, const accel__ckpt_save_paths *sp) {
    accel *acc = ck->acc;
    if (sp->automatic && accel__is_dir(sp->target))
        return ACCEL__FAIL(
            acc, ACCEL_ERR_STATE,
            "checkpoint directory %.400s already exists (iteration %d); set the iteration or load_state first",
            sp->target, ck->iteration);
    if (!sp->automatic && accel__is_dir(sp->target) && !accel__ckpt_replaceable(sp->target))
        return ACCEL__FAIL(acc, ACCEL_ERR_STATE,
                           "%.400s exists and is neither empty nor an accel checkpoint (no " ACCEL__CKPT_MARKER
                           "): refusing to replace it",
                           sp->target);
    if (!sp->automatic && accel__ckpt_exists_not_dir(sp->target))
        return ACCEL__FAIL(acc, ACCEL_ERR_STATE, "%.400s exists and is not a directory", sp->target);
    if (accel__mkdir_p(sp->parent, NULL, 0) != 0) return accel__io_fail(acc, "cannot create directory", sp->parent);
    if (accel__rmtree(sp->tmp) != 0) return accel__io_fail(acc, "cannot remove stale", sp->tmp);
    if (mkdir(sp->tmp, 0777) != 0) return accel__io_fail(acc, "cannot create directory", sp->tmp);
    return ACCEL_OK;
}

/* Writes one object's bytes through the state contract's two calls (size, then bytes). */
static accel_result accel__ckpt_save_obj(accel *acc, const accel__ckpt_obj *o, const char *dir,
                                         accel__ckpt_written *w) {
    size_t need = 0, got = 0;
    void *buf;
    char path[4200];
    accel__ckpt_errmark mark;
    accel_result r;
    accel__ckpt_errmark_now(acc, &mark);
    r = o->save(o->obj, NULL, 0, &need);
    if (r != ACCEL_OK) return accel__ckpt_callback_failed(acc, r, &mark, "save_state", o->name);
    buf = accel_host_alloc(acc, need ? need : 1);
    if (!buf) return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "save_state: %s (%zu bytes)", o->name, need);
    accel__ckpt_errmark_now(acc, &mark);
    r = o->save(o->obj, buf, need, &got);
    if (r != ACCEL_OK) r = accel__ckpt_callback_failed(acc, r, &mark, "save_state", o->name);
    else if (got > need)
        r = ACCEL__FAIL(acc, ACCEL_ERR_STATE,
                        "save_state: %s: the state grew from %zu to %zu bytes between the save callback's "
                        "two calls",
                        o->name, need, got);
    if (r == ACCEL_OK) {
        accel__fmt(path, sizeof path, "%s/%s", dir, o->name);
        r = accel__write_file(acc, path, buf, got, 0);
        accel__fmt(w->name, sizeof w->name, "%s", o->name);
        w->bytes = got;
        w->hash = accel_st_xxh64(buf, got, 0);
    }
    accel_host_free(acc, buf);
    return r;
}

/* The files: the global ones by the owner, random_states_<rank>.bin (accel_state_save) by every process. */
static accel_result accel__ckpt_save_files(accel_ckpt *ck, const char *tmp, int owner, accel__ckpt_written **written) {
    accel *acc = ck->acc;
    char path[4200], name[64];
    accel__ckpt_obj core;
    accel__ckpt_written w;
    accel_result r = ACCEL_OK;
    int i;
    if (owner) {
        const char *meta[2] = {"format", "pt"};
        for (i = 0; i < (int)stbds_arrlen(ck->models) && r == ACCEL_OK; ++i) {
            accel__ckpt_group_file(w.name, sizeof w.name, "model", i);
            accel__fmt(path, sizeof path, "%s/%s", tmp, w.name);
            r = accel__st_save(acc, path, ck->models[i].t, ck->models[i].n, meta, 1, 0, &w.bytes, &w.hash);
            if (r == ACCEL_OK) r = accel__ckpt_put_written(acc, written, &w);
        }
        for (i = 0; i < (int)stbds_arrlen(ck->optims) && r == ACCEL_OK; ++i) {
            accel__ckpt_group_file(w.name, sizeof w.name, "optimizer", i);
            accel__fmt(path, sizeof path, "%s/%s", tmp, w.name);
            r = accel__st_save(acc, path, ck->optims[i].t, ck->optims[i].n, NULL, 0, 0, &w.bytes, &w.hash);
            if (r == ACCEL_OK) r = accel__ckpt_put_written(acc, written, &w);
        }
        for (i = 0; i < (int)stbds_arrlen(ck->objs) && r == ACCEL_OK; ++i) {
            r = accel__ckpt_save_obj(acc, &ck->objs[i], tmp, &w);
            if (r == ACCEL_OK) r = accel__ckpt_put_written(acc, written, &w);
        }
        if (r == ACCEL_OK) { /* ckpt's own fields only: the counters are in random_states_<rank>.bin */
            accel__sb b;
            accel__sb_init(&b, acc);
            accel__sb_printf(&b, "{\"format\": \"accel\", \"iteration\": %d, \"num_processes\": %d, \"version\": 1}\n",
                             ck->iteration, acc->num_processes);
            accel__fmt(w.name, sizeof w.name, "accelerator_state.json");
            accel__fmt(path, sizeof path, "%s/%s", tmp, w.name);
            r = b.oom ? accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "save_state: %s", w.name)
                      : accel__write_file(acc, path, b.p, b.n, 0);
            if (r == ACCEL_OK) {
                w.bytes = b.n;
                w.hash = accel_st_xxh64(b.p, b.n, 0);
                r = accel__ckpt_put_written(acc, written, &w);
            }
            accel__sb_free(&b);
        }
    }
    if (r == ACCEL_OK) {
        accel__fmt(name, sizeof name, "random_states_%d.bin", acc->process_index);
        core.name = name;
        core.save = accel__ckpt_core_state_save;
        core.load = NULL;
        core.obj = acc;
        r = accel__ckpt_save_obj(acc, &core, tmp, &w);
        if (r == ACCEL_OK) r = accel__ckpt_put_written(acc, written, &w);
    }
    for (i = 0; i < (int)stbds_arrlen(ck->sobjs) && r == ACCEL_OK; ++i) { /* per-rank state: every process */
        char sname[96];
        accel__ckpt_obj so;
        accel__fmt(sname, sizeof sname, "%s_%d.bin", ck->sobjs[i].name, acc->process_index);
        so.name = sname;
        so.save = ck->sobjs[i].save;
        so.load = NULL;
        so.obj = ck->sobjs[i].obj;
        r = accel__ckpt_save_obj(acc, &so, tmp, &w);
        if (r == ACCEL_OK) r = accel__ckpt_put_written(acc, written, &w);
    }
    return r;
}

/* The owner seals and publishes: marker, fsync, rename into place (swapping out a replaced target). */
static accel_result accel__ckpt_save_publish(accel *acc, const accel__ckpt_save_paths *sp,
                                             accel__ckpt_written **written) {
    int had_old = 0;
    accel_result r = accel__ckpt_write_marker(acc, sp->tmp, written);
    if (r != ACCEL_OK) return r;
    if (accel__is_dir(sp->target)) { /* an explicit directory that exists: swap it out */
        if (accel__rmtree(sp->old) != 0 || rename(sp->target, sp->old) != 0)
            return accel__io_fail(acc, "cannot move the previous checkpoint aside:", sp->target);
        had_old = 1;
    }
    if (rename(sp->tmp, sp->target) != 0) return accel__io_fail(acc, "cannot rename the checkpoint into", sp->target);
    if (accel__fsync_dir(sp->parent) != 0) return accel__io_fail(acc, "cannot fsync directory", sp->parent);
    if (had_old) accel__rmtree(sp->old);
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_ckpt_save_state(accel_ckpt *ck, const char *output_dir, char *out_dir, size_t cap) {
    accel *acc;
    accel__ckpt_save_paths sp;
    accel__ckpt_written *written = NULL;
    accel_result r;
    if (!ck) return ACCEL__FAIL(NULL, ACCEL_ERR_INVALID_ARGUMENT, "save_state: ck is NULL");
    acc = ck->acc;
    r = accel__ckpt_save_resolve(ck, output_dir, &sp);
    /* 1. the owner prepares the temporary sibling directory */
    if (r == ACCEL_OK && sp.owner) r = accel__ckpt_save_prepare(ck, &sp);
    r = accel__agree(acc, r, "save_state (prepare)");
    if (r != ACCEL_OK) return r;
    if (!accel__is_dir(sp.tmp))
        r = ACCEL__FAIL(acc, ACCEL_ERR_IO,
                        "checkpoint directory %.400s is not visible on this process (save_state needs a shared "
                        "filesystem, or save_on_each_node)",
                        sp.tmp);
    /* 2. the files */
    if (r == ACCEL_OK) r = accel__ckpt_save_files(ck, sp.tmp, sp.owner, &written);
    r = accel__agree(acc, r, "save_state (write)");
    /* 3. the owner seals and publishes, then rotates */
    if (r == ACCEL_OK) {
        if (sp.owner) r = accel__ckpt_save_publish(acc, &sp, &written);
        if (r == ACCEL_OK && sp.owner && sp.automatic && ck->d.total_limit > 0)
            accel__ckpt_rotate(acc, sp.parent, sp.target, ck->d.total_limit);
        if (r == ACCEL_OK && sp.owner && sp.automatic) accel__ckpt_clean_hidden(sp.parent);
        r = accel__agree(acc, r, "save_state (commit)");
    }
    stbds_arrfree(written);
    if (r != ACCEL_OK) return r;
    if (out_dir && cap) accel__fmt(out_dir, cap, "%s", sp.target);
    ck->iteration += 1;
    return ACCEL_OK;
}

/* ------------------------------------------------------------------------------------------------ 5. load_state */
/* Everything load_state reads and checks before it applies anything. Verification is done on the bytes that are
   applied: a small file (objects, accelerator_state.json, random_states_*.bin) is read once into memory and hashed
   there; a safetensors file is mapped once, hashed through the mapping, and its tensors are copied from that same
   mapping. Files of the marker that this load does not use are hashed from disk. */
typedef struct accel__ckpt_load {
    accel *acc;
    char dir[2300];
    accel__ckpt_marker marker;
    accel_st_file **mf, **of;  /* per registered model / optimizer group (mapped, parsed after verification) */
    char **read;                 /* per marker file: its bytes when read into memory (acc's allocator), else NULL */
    const unsigned char **mem;   /* per marker file: the bytes its checksum is computed from (NULL: from disk) */
    size_t *mem_n;
    const char **blobs;          /* per registered object: its file's bytes (in read[]) */
    size_t *blob_n;
    uint64_t iteration, saved_np;
    const char **states;         /* every saved rank's random_states_<i>.bin (in read[]; validated, applied last) */
    size_t *state_n;
    const char **sblobs;        /* per sharded object s, saved rank i: sblobs[s * saved_np + i] (in read[]) */
    size_t *sblob_n;
    int nsobj;
} accel__ckpt_load;

static void accel__ckpt_load_free(accel_ckpt *ck, accel__ckpt_load *ld) {
    int i;
    for (i = 0; ld->mf && i < (int)stbds_arrlen(ck->models); ++i) accel_st_file_destroy(ld->mf[i]);
    for (i = 0; ld->of && i < (int)stbds_arrlen(ck->optims); ++i) accel_st_file_destroy(ld->of[i]);
    for (i = 0; ld->read && i < (int)stbds_arrlen(ld->marker.files); ++i) accel_host_free(ld->acc, ld->read[i]);
    accel_host_free(ld->acc, ld->mf);
    accel_host_free(ld->acc, ld->of);
    accel_host_free(ld->acc, ld->read);
    accel_host_free(ld->acc, (void *)ld->mem);
    accel_host_free(ld->acc, ld->mem_n);
    accel_host_free(ld->acc, (void *)ld->blobs);
    accel_host_free(ld->acc, ld->blob_n);
    accel_host_free(ld->acc, (void *)ld->states);
    accel_host_free(ld->acc, ld->state_n);
    accel_host_free(ld->acc, (void *)ld->sblobs);
    accel_host_free(ld->acc, ld->sblob_n);
    stbds_arrfree(ld->marker.files);
}

static int accel__ckpt_marker_index(const accel__ckpt_marker *m, const char *name) {
    int i;
    for (i = 0; i < (int)stbds_arrlen(m->files); ++i)
        if (!strcmp(m->files[i].name, name)) return i;
    return -1;
}
/* The bytes of a file the marker lists, read into memory once (later calls return the same buffer); `missing` is
   the error when it is not listed. Verified by accel__ckpt_verify_files before anything uses them. */
static accel_result accel__ckpt_load_hold(accel__ckpt_load *ld, const char *name, accel_result missing, const char *why,
                                          const char **buf, size_t *n, size_t limit) {
    char path[4200];
    int i = accel__ckpt_marker_index(&ld->marker, name);
    if (i < 0) return ACCEL__FAIL(ld->acc, missing, "%.400s has no %s%s", ld->dir, name, why);
    if (!ld->read[i]) {
        accel_result r;
        accel__fmt(path, sizeof path, "%s/%s", ld->dir, name);
        r = accel__read_file(ld->acc, path, &ld->read[i], &ld->mem_n[i], limit);
        if (r != ACCEL_OK) return r;
        ld->mem[i] = (const unsigned char *)ld->read[i];
    }
    if (buf) *buf = ld->read[i];
    if (n) *n = ld->mem_n[i];
    return ACCEL_OK;
}

/* Maps <dir>/<kind>[_i].safetensors for each registered group (not parsed: its checksum comes first). A file the
   registration needs but the checkpoint lacks is ACCEL_ERR_INVALID_ARGUMENT (never NOT_FOUND: "no checkpoint yet"). */
static accel_result accel__ckpt_load_groups_map(accel__ckpt_load *ld, const char *kind, int n, accel_st_file **files) {
    accel_result r = ACCEL_OK;
    int i;
    char path[2500]; /* dir (< 2300) + "/" + file name (< 96) */
    for (i = 0; i < n && r == ACCEL_OK; ++i) {
        char fname[96];
        int m;
        accel__ckpt_group_file(fname, sizeof fname, kind, i);
        accel__fmt(path, sizeof path, "%s/%s", ld->dir, fname);
        m = accel__ckpt_marker_index(&ld->marker, fname);
        if (m < 0)
            return ACCEL__FAIL(ld->acc, ACCEL_ERR_INVALID_ARGUMENT, "%.400s has no %s (%s %d is registered)", ld->dir,
                               fname, kind, i);
        r = accel__st_map(ld->acc, path, &files[i]);
        if (r != ACCEL_OK) break;
        ld->mem[m] = files[i]->map;
        ld->mem_n[m] = files[i]->size;
    }
    return r;
}
/* Optimizer tensors convert between F32 and BF16 on load (accel_optim's moment_dtype: a state saved with F32 moments
   resumes with BF16 ones and back): widening is exact, narrowing rounds to nearest even (accel_f32_to_bf16). 1 when
   entry k of f and dst differ only in that way. */
static int accel__ckpt_f32_bf16(const accel_st_file *f, int k, const accel_tensor *dst) {
    const accel_st_entry *e = &f->entries[k];
    return ((e->dtype == ACCEL_F32 && dst->dtype == ACCEL_BF16) ||
            (e->dtype == ACCEL_BF16 && dst->dtype == ACCEL_F32)) &&
           e->ndim == dst->ndim && (e->ndim == 0 || !memcmp(e->shape, dst->shape, sizeof(int64_t) * (size_t)e->ndim)) &&
           (e->end == e->begin || dst->ptr);
}
/* The converting copy from the file's mapping: in place into host memory, through a host buffer of at most 4 MiB per
   round into device memory. */
static accel_result accel__ckpt_copy_f32_bf16(accel_st_file *f, int k, const accel_tensor *dst,
                                              accel__st_stage *stage) {
    const accel_st_entry *e = &f->entries[k];
    const size_t n = (size_t)((e->end - e->begin) / accel_dtype_size(e->dtype)), per = (size_t)1 << 20;
    const int widen = e->dtype == ACCEL_BF16, dev = n && accel__st_is_device_ptr(dst->ptr);
    const unsigned char *s = (const unsigned char *)e->data;
    unsigned char *buf = dev ? (unsigned char *)accel_host_alloc(f->acc, 4 * (n < per ? n : per)) : NULL;
    accel_result r = ACCEL_OK;
    size_t off, i;
    if (dev && !buf)
        return accel__fail_wrap(f->acc, ACCEL_ERR_OUT_OF_MEMORY, "tensor '%.200s': converting %s to %s", e->name,
                                accel_dtype_name(e->dtype), accel_dtype_name(dst->dtype));
    for (off = 0; off < n && r == ACCEL_OK; off += per) {
        size_t cnt = n - off < per ? n - off : per;
        unsigned char *o = dev ? buf : (unsigned char *)dst->ptr + off * (widen ? 4u : 2u);
        for (i = 0; i < cnt; ++i)
            if (widen) accel__put_u32(o + 4 * i, (uint32_t)accel__get_u16(s + 2 * (off + i)) << 16);
            else accel__put_u16(o + 2 * i, accel_f32_to_bf16(accel_bits_f32(accel__get_u32(s + 4 * (off + i)))));
        if (dev)
            r = accel__st_read_to_device(f->acc, stage, -1, buf, 0,
                                           (unsigned char *)dst->ptr + off * (widen ? 4u : 2u), cnt * (widen ? 4u : 2u),
                                           e->name);
    }
    accel_host_free(f->acc, buf);
    return r;
}

/* After verification: parses each group's file and checks every registered tensor against it (count, names,
   dtypes, shapes) before anything is applied. f32_bf16: F32 and BF16 tensors load into each other. */
static accel_result accel__ckpt_load_groups_check(accel__ckpt_load *ld, const char *kind,
                                                  const accel__ckpt_group *groups, int n, accel_st_file **files,
                                                  int f32_bf16) {
    accel *acc = ld->acc;
    accel_result r = ACCEL_OK;
    int i, k;
    for (i = 0; i < n && r == ACCEL_OK; ++i) {
        r = accel__st_parse(files[i]);
        if (r == ACCEL_OK && accel_st_file_count(files[i]) != groups[i].n)
            r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "%.400s holds %d tensors but %s %d registers %d",
                            files[i]->path, accel_st_file_count(files[i]), kind, i, groups[i].n);
        for (k = 0; k < groups[i].n && r == ACCEL_OK; ++k) {
            int ix = f32_bf16 && groups[i].t[k].name ? accel_st_file_find(files[i], groups[i].t[k].name) : -1;
            if (ix >= 0 && accel__ckpt_f32_bf16(files[i], ix, &groups[i].t[k])) continue;
            r = accel__st_check_dst(files[i], &groups[i].t[k], &ix);
            if (r == ACCEL_ERR_NOT_FOUND) r = accel__fail_wrap(acc, ACCEL_ERR_INVALID_ARGUMENT, "load_state");
        }
    }
    return r;
}

/* The registered objects' files (read, not applied) and the count of custom objects (as Accelerate checks it). */
static accel_result accel__ckpt_load_objects(accel_ckpt *ck, accel__ckpt_load *ld) {
    accel *acc = ld->acc;
    int i, n_custom_files = 0, nobj = (int)stbds_arrlen(ck->objs);
    accel_result r = ACCEL_OK;
    for (i = 0; i < (int)stbds_arrlen(ld->marker.files); ++i) {
        const char *fn = ld->marker.files[i].name;
        size_t l = strlen(fn);
        if (!strncmp(fn, "custom_checkpoint_", 18) && l > 22 && !strcmp(fn + l - 4, ".bin")) ++n_custom_files;
    }
    if (n_custom_files != ck->n_custom)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                           "%.400s has %d custom_checkpoint files but %d custom objects are registered", ld->dir,
                           n_custom_files, ck->n_custom);
    for (i = 0; i < nobj && r == ACCEL_OK; ++i)
        r = accel__ckpt_load_hold(ld, ck->objs[i].name, ACCEL_ERR_INVALID_ARGUMENT, " (a registered object)",
                                  &ld->blobs[i], &ld->blob_n[i], (size_t)1 << 40);
    return r;
}

/* Reads accelerator_state.json, every random_states_<i>.bin and every file of a registered sharded object the marker
   lists (which of them are used depends on the saving run's number of processes: known after verification). */
static accel_result accel__ckpt_load_read_state_files(accel_ckpt *ck, accel__ckpt_load *ld) {
    int i, s;
    accel_result r = accel__ckpt_load_hold(ld, "accelerator_state.json", ACCEL_ERR_FORMAT, "", NULL, NULL, 1 << 20);
    for (i = 0; i < (int)stbds_arrlen(ld->marker.files) && r == ACCEL_OK; ++i) {
        const char *fn = ld->marker.files[i].name;
        size_t l = strlen(fn);
        if (!strncmp(fn, "random_states_", 14) && l > 18 && !strcmp(fn + l - 4, ".bin"))
            r = accel__ckpt_load_hold(ld, fn, ACCEL_ERR_FORMAT, "", NULL, NULL, 1 << 20);
        for (s = 0; s < (int)stbds_arrlen(ck->sobjs) && r == ACCEL_OK; ++s)
            if (accel__ckpt_is_sharded_file(fn, ck->sobjs[s].name))
                r = accel__ckpt_load_hold(ld, fn, ACCEL_ERR_INVALID_ARGUMENT, "", NULL, NULL, (size_t)1 << 40);
    }
    return r;
}

/* accelerator_state.json: the iteration and the number of processes of the saving run. */
static accel_result accel__ckpt_load_accelerator_json(accel__ckpt_load *ld) {
    const char *data = NULL;
    size_t n = 0;
    accel__st_json j;
    int root;
    accel_result r = accel__ckpt_load_hold(ld, "accelerator_state.json", ACCEL_ERR_FORMAT, "", &data, &n, 1 << 20);
    if (r != ACCEL_OK) return r;
    root = accel__st_json_parse(&j, ld->acc, data, n);
    if (root < 0) r = accel__st_json_failed(ld->acc, &j, "accelerator_state.json");
    else if (accel__st_ju64(&j, accel__st_jget(&j, root, "iteration"), &ld->iteration) ||
             accel__st_ju64(&j, accel__st_jget(&j, root, "num_processes"), &ld->saved_np) || ld->saved_np < 1 ||
             ld->saved_np > 1000000 || ld->iteration > (uint64_t)INT_MAX - 1)
        r = ACCEL__FAIL(ld->acc, ACCEL_ERR_FORMAT,
                        "%.400s/accelerator_state.json is malformed (iteration, num_processes)", ld->dir);
    accel__st_json_free(&j);
    return r;
}

/* The Accelerator's training state, by the core. Every saved rank's file (read and verified above) is validated with
   accel__state_check; nothing is applied here: accel__ckpt_load_training_state_apply runs once every process has
   applied everything else. */
static accel_result accel__ckpt_load_training_state(accel__ckpt_load *ld) {
    accel *acc = ld->acc;
    int count = (int)ld->saved_np, same = count == acc->num_processes, i;
    char name[64], why[160];
    accel_result r = ACCEL_OK;
    ld->states = (const char **)accel__st_zalloc(acc, (size_t)count, sizeof(char *));
    ld->state_n = (size_t *)accel__st_zalloc(acc, (size_t)count, sizeof(size_t));
    if (!ld->states || !ld->state_n)
        return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "load_state: training states");
    if (same) why[0] = 0;
    else accel__fmt(why, sizeof why, " (resuming %d processes from a checkpoint of %d reads every saved rank's state)",
                    acc->num_processes, count);
    for (i = 0; i < count && r == ACCEL_OK; ++i) {
        accel__fmt(name, sizeof name, "random_states_%d.bin", i);
        r = accel__ckpt_load_hold(ld, name, ACCEL_ERR_FORMAT, why, &ld->states[i], &ld->state_n[i], 1 << 20);
    }
    if (r == ACCEL_OK) {
        r = accel__state_check(acc, (const void *const *)ld->states, ld->state_n, count);
        if (r != ACCEL_OK) r = accel__fail_wrap(acc, r, "load_state: random_states_*.bin");
    }
    return r;
}
/* Every saved rank's <name>_<i>.bin of every sharded object (read, not applied). */
static accel_result accel__ckpt_load_sharded(accel_ckpt *ck, accel__ckpt_load *ld) {
    accel *acc = ld->acc;
    int ns = (int)stbds_arrlen(ck->sobjs), count = (int)ld->saved_np, s, i;
    accel_result r = ACCEL_OK;
    if (ns == 0) return ACCEL_OK;
    ld->sblobs = (const char **)accel__st_zalloc(acc, (size_t)ns * (size_t)count, sizeof(char *));
    ld->sblob_n = (size_t *)accel__st_zalloc(acc, (size_t)ns * (size_t)count, sizeof(size_t));
    if (!ld->sblobs || !ld->sblob_n)
        return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "load_state: sharded objects");
    ld->nsobj = ns;
    for (s = 0; s < ns && r == ACCEL_OK; ++s)
        for (i = 0; i < count && r == ACCEL_OK; ++i) {
            char name[96];
            accel__fmt(name, sizeof name, "%s_%d.bin", ck->sobjs[s].name, i);
            r = accel__ckpt_load_hold(ld, name, ACCEL_ERR_INVALID_ARGUMENT,
                                      " (a registered sharded object; the checkpoint "
                                      "has one per saving process)",
                                      &ld->sblobs[s * count + i], &ld->sblob_n[s * count + i], (size_t)1 << 40);
        }
    return r;
}

/* Checked above on this process, so it cannot fail: this rank's own state on the same number of processes, the
   resharded form otherwise. */
static accel_result accel__ckpt_load_training_state_apply(accel__ckpt_load *ld) {
    accel *acc = ld->acc;
    int count = (int)ld->saved_np;
    accel_result r = count == acc->num_processes
                         ? accel_state_load(acc, ld->states[acc->process_index], ld->state_n[acc->process_index])
                         : accel_state_load_resharded(acc, (const void *const *)ld->states, ld->state_n, count);
    return r == ACCEL_OK ? r : accel__fail_wrap(acc, r, "load_state: random_states_*.bin");
}

/* Copies the tensors (from the verified mappings) and hands each object its bytes (the verified buffers). */
static accel_result accel__ckpt_load_apply(accel_ckpt *ck, accel__ckpt_load *ld) {
    accel *acc = ld->acc;
    accel__ckpt_errmark mark;
    accel__st_stage stage;
    accel_result r = ACCEL_OK;
    int i, k;
    accel__st_stage_begin(&stage, acc);
    for (i = 0; i < (int)stbds_arrlen(ck->models) && r == ACCEL_OK; ++i)
        for (k = 0; k < ck->models[i].n && r == ACCEL_OK; ++k)
            r = accel__st_copy_mapped(ld->mf[i], accel_st_file_find(ld->mf[i], ck->models[i].t[k].name),
                                      ck->models[i].t[k].ptr, &stage);
    for (i = 0; i < (int)stbds_arrlen(ck->optims) && r == ACCEL_OK; ++i)
        for (k = 0; k < ck->optims[i].n && r == ACCEL_OK; ++k) {
            int ix = accel_st_file_find(ld->of[i], ck->optims[i].t[k].name);
            r = accel__ckpt_f32_bf16(ld->of[i], ix, &ck->optims[i].t[k])
                    ? accel__ckpt_copy_f32_bf16(ld->of[i], ix, &ck->optims[i].t[k], &stage)
                    : accel__st_copy_mapped(ld->of[i], ix, ck->optims[i].t[k].ptr, &stage);
        }
    accel__st_stage_end(&stage);
    for (i = 0; i < (int)stbds_arrlen(ck->objs) && r == ACCEL_OK; ++i) {
        const accel__ckpt_obj *o = &ck->objs[i];
        accel__ckpt_errmark_now(acc, &mark);
        r = o->load(o->obj, ld->blobs[i], ld->blob_n[i]);
        if (r != ACCEL_OK) r = accel__ckpt_callback_failed(acc, r, &mark, "load_state", o->name);
    }
    for (i = 0; i < ld->nsobj && r == ACCEL_OK; ++i) {
        const accel__ckpt_sobj *o = &ck->sobjs[i];
        int count = (int)ld->saved_np;
        char what[96];
        accel__ckpt_errmark_now(acc, &mark);
        r = o->load(o->obj, (const void *const *)(ld->sblobs + (size_t)i * (size_t)count),
                    ld->sblob_n + (size_t)i * (size_t)count, count);
        accel__fmt(what, sizeof what, "%s_*.bin", o->name);
        if (r != ACCEL_OK) r = accel__ckpt_callback_failed(acc, r, &mark, "load_state", what);
    }
    return r;
}

ACCEL__DEF accel_result accel_ckpt_load_state(accel_ckpt *ck, const char *input_dir) {
    accel *acc;
    accel__ckpt_load ld;
    char cdir[2200];
    accel_result r = ACCEL_OK;
    int none_yet = 0;
    if (!ck) return ACCEL__FAIL(NULL, ACCEL_ERR_INVALID_ARGUMENT, "load_state: ck is NULL");
    acc = ck->acc;
    memset(&ld, 0, sizeof ld);
    ld.acc = acc;
    accel__fmt(cdir, sizeof cdir, "%s/checkpoints", ck->project_dir);
    /* 1. which checkpoint */
    if (input_dir) {
        if (strlen(input_dir) >= 2000)
            r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "load_state: input_dir is too long");
        else accel__fmt(ld.dir, sizeof ld.dir, "%s", input_dir);
    } else {
        r = accel_ckpt_latest(acc, cdir, ld.dir, sizeof ld.dir);
        none_yet = r == ACCEL_ERR_NOT_FOUND;
    }
    /* 2. marker and sizes; read (small files) or map (safetensors) what is applied; verify every checksum on those
       bytes (files not used here: from disk); then parse and check everything against the registration */
    if (r == ACCEL_OK) r = accel__ckpt_check_complete(acc, ld.dir, 0, 0, &ld.marker);
    if (r == ACCEL_OK) {
        size_t nf = (size_t)stbds_arrlen(ld.marker.files);
        ld.mf = (accel_st_file **)accel__st_zalloc(acc, (size_t)stbds_arrlen(ck->models), sizeof *ld.mf);
        ld.of = (accel_st_file **)accel__st_zalloc(acc, (size_t)stbds_arrlen(ck->optims), sizeof *ld.of);
        ld.blobs = (const char **)accel__st_zalloc(acc, (size_t)stbds_arrlen(ck->objs), sizeof *ld.blobs);
        ld.blob_n = (size_t *)accel__st_zalloc(acc, (size_t)stbds_arrlen(ck->objs), sizeof *ld.blob_n);
        ld.read = (char **)accel__st_zalloc(acc, nf, sizeof *ld.read);
        ld.mem = (const unsigned char **)accel__st_zalloc(acc, nf, sizeof *ld.mem);
        ld.mem_n = (size_t *)accel__st_zalloc(acc, nf, sizeof *ld.mem_n);
        if (!ld.mf || !ld.of || !ld.blobs || !ld.blob_n || !ld.read || !ld.mem || !ld.mem_n)
            r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "load_state");
    }
    if (r == ACCEL_OK) r = accel__ckpt_load_groups_map(&ld, "model", (int)stbds_arrlen(ck->models), ld.mf);
    if (r == ACCEL_OK) r = accel__ckpt_load_groups_map(&ld, "optimizer", (int)stbds_arrlen(ck->optims), ld.of);
    if (r == ACCEL_OK) r = accel__ckpt_load_objects(ck, &ld);
    if (r == ACCEL_OK) r = accel__ckpt_load_read_state_files(ck, &ld);
    if (r == ACCEL_OK) r = accel__ckpt_verify_files(acc, ld.dir, &ld.marker, ld.mem, ld.mem_n);
    if (r == ACCEL_OK)
        r = accel__ckpt_load_groups_check(&ld, "model", ck->models, (int)stbds_arrlen(ck->models), ld.mf, 0);
    if (r == ACCEL_OK)
        r = accel__ckpt_load_groups_check(&ld, "optimizer", ck->optims, (int)stbds_arrlen(ck->optims), ld.of, 1);
    if (r == ACCEL_OK) r = accel__ckpt_load_accelerator_json(&ld);
    if (r == ACCEL_OK) r = accel__ckpt_load_training_state(&ld);
    if (r == ACCEL_OK) r = accel__ckpt_load_sharded(ck, &ld);
    r = accel__agree(acc, r, "load_state (verify)");
    /* 3. apply (every process got this far): tensors and objects, then — once every process applied those — the
       Accelerator's training state, which was checked in step 2 and cannot fail */
    if (r == ACCEL_OK) {
        r = accel__ckpt_load_apply(ck, &ld);
        r = accel__agree(acc, r, "load_state (apply)");
    }
    if (r == ACCEL_OK) r = accel__ckpt_load_training_state_apply(&ld);
    if (r == ACCEL_OK) ck->iteration = (int)ld.iteration + 1; /* policy 5: the next save does not collide */
    accel__ckpt_load_free(ck, &ld);
    if (none_yet && r == ACCEL_ERR_NOT_FOUND && acc->is_main_process)
        accel_log(acc, ACCEL_LOG_INFO, "no checkpoint under %s: starting fresh", cdir);
    return r;
}


#endif /* ACCEL_IMPLEMENTATION && !ACCEL__CKPT_IMPL_DONE */

/* accel is released under the MIT licence. Copyright (c) 2026 the accel authors. */
