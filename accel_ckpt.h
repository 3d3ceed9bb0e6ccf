/* accel_ckpt.h — checkpoints for accel: save_state / load_state of everything a run needs to resume, written
   crash-safe with a checksummed completion marker, automatic naming and rotation, resumable on another number of
   processes. Builds on accel_safetensors.h (the files a checkpoint is made of); the ACCEL_IMPLEMENTATION TU needs
   stb_ds.h on the include path, as the core does (Debian: libstb-dev, -I/usr/include/stb).

   CONTENTS
     USAGE
     STATE OF OTHER OBJECTS           the core's contract; your own objects
     PRE-HOOKS                        extra files of your own (a tokenizer, a config) in every checkpoint
     FILES OF A CHECKPOINT DIRECTORY  Accelerate's names
     CRASH SAFETY
     FALLBACK                         a damaged newest checkpoint: the one before it, with a WARN
     ASYNC SAVES                      desc.async: the loop stalls for the snapshot only
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

   PRE-HOOKS (Accelerate's register_save_state_pre_hook / register_load_state_pre_hook)
       static accel_result save_tok(void *user, const char *dir) {   // dir: where the checkpoint is being written
           char p[4096]; snprintf(p, sizeof p, "%s/tokenizer.json", dir);
           return write_my_file(p, user) ? ACCEL_OK : accel_set_error(NULL, ACCEL_ERR_IO, "cannot write %s", p);
       }
       accel_ckpt_hook_handle h;                                 // Accelerate's RemovableHandle
       accel_ckpt_register_save_pre_hook(ck, save_tok, &tok, &h); // and _load_pre_hook(ck, load_tok, &tok, NULL)
       ... accel_ckpt_hook_remove(ck, h);                        // handle.remove(): the next saves run without it
     A save pre-hook runs on every process in save_state, after the temporary directory exists and before accel's
     own files are written (an async save: before the snapshot, so it adds to the stall). The files it writes there
     (any process's, on a shared filesystem) become part of the checkpoint: listed with their size and checksum in
     the marker, fsync'd before it, renamed into place with the rest, removed by rotation with the rest, verified by
     load_state (a damaged one makes the checkpoint damaged: FALLBACK). They must be regular files whose names accel's
     own files do not use and that do not start with '.' (else save_state fails with ACCEL_ERR_INVALID_ARGUMENT). A
     load pre-hook runs on every process in load_state with the chosen checkpoint directory, after every file of it
     was verified and before anything is applied (Accelerate calls it before loading too), so it reads verified
     files. A failing hook fails save_state / load_state on every process: no checkpoint is published, nothing is
     loaded; its message is kept ("save_state: save pre-hook 0: <its message>"). Accelerate's hooks also receive
     the models and their state dicts; here the hook's user pointer carries whatever it needs.
     Removal: each registration gives a handle (Accelerate's RemovableHandle); accel_ckpt_hook_remove(ck, h) takes
     the hook out before the next save_state / load_state. A second removal, or a stale or foreign handle, is
     ACCEL_ERR_NOT_FOUND naming the hook (Accelerate silently does nothing); registering or removing from inside a
     running pre-hook is ACCEL_ERR_STATE (the pass runs the hooks it started with — Python would raise "OrderedDict
     mutated during iteration"); an async save in flight is not affected (its pre-hooks ran before save_state
     returned).

   FILES OF A CHECKPOINT DIRECTORY (Accelerate's names, safetensors/JSON/bytes instead of pickles)
     model.safetensors, model_1.safetensors, …   registered models (metadata {"format":"pt"})        main process
     optimizer.safetensors, optimizer_1…          registered optimizer tensors (Accelerate: optimizer.bin)   main
     <name>.bin                                   the bytes of accel_ckpt_register(ck, "<name>", …): e.g.
                                                  scaler.bin (Accelerate: scaler.pt), sampler.bin, scheduler.bin main
     custom_checkpoint_<i>.bin                    accel_ckpt_register(ck, NULL, …) objects, i in registration order
                                                  (Accelerate: custom_checkpoint_<i>.pkl)                       main
     <name>_<rank>.bin                            every process: accel_ckpt_register_sharded objects (e.g. a ZeRO
                                                  shard of the optimizer state, accel_zero_state_save)
     any other name                               files of save pre-hooks (PRE-HOOKS)
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

   FALLBACK (load_state(ck, NULL), one policy)
     The candidates are every checkpoint_<N> directory under project_dir/checkpoints, newest first. When the newest
     is damaged — no completion marker or an unreadable one, a file of the marker missing, truncated or grown, a
     checksum mismatch (all ACCEL_ERR_FORMAT, on any process) — load_state logs a WARN on the main process naming
     the directory and why ("load_state: skipping <dir> (<the verification's message>); loading the newest complete
     checkpoint before it") and tries the next older one, until one verifies (it is loaded, ACCEL_OK) or none is
     left (ACCEL_ERR_NOT_FOUND, "starting fresh" as without checkpoints). Nothing is modified on disk: the skipped
     directories stay for inspection (`accel ckpt ls` marks them), and the iteration continues past the newest
     skipped one, so the next automatic save never collides with it. Failures that are not the checkpoint's damage —
     a registration that does not match it (a tensor's dtype, a missing object file), I/O errors such as EACCES,
     memory — are returned at once, without fallback. desc.no_fallback makes a damaged newest checkpoint an error
     (its verification message, ACCEL_ERR_FORMAT) instead. An explicit input_dir is never substituted.

   ASYNC SAVES (desc.async = ACCEL_ON)
       cd.async = ACCEL_ON;                   // optional: cd.async_max_bytes = 2ull << 30; cd.on_range = ...
       accel_ckpt_save_state(ck, NULL, NULL, 0);   // returns after the snapshot; a writer thread does the rest
       ... train ...
       accel_ckpt_wait(ck);                   // optional: the next save / load_state / destroy wait anyway
     save_state takes a snapshot and returns: every registered tensor is copied into one pinned host buffer
     (desc.pinned_allocator; device tensors by cudaMemcpyAsync on acc->stream, then one event the writer waits for,
     host tensors by memcpy) and every object's state is captured (its save callback runs in save_state, as in a
     synchronous save). A writer thread (one per accel_ckpt, started by the first async save) then writes, hashes,
     fsyncs, seals, renames and rotates exactly as a synchronous save does: the files are byte-identical, and the
     CRASH SAFETY above holds (a kill during the background write leaves the previous checkpoint the newest complete
     one). The tensors may change as soon as save_state returns.
     - One write in flight: the next save_state, load_state, accel_ckpt_wait and accel_ckpt_destroy first wait for it
       (collectives, as save_state is). Two saves never interleave.
     - Errors of the background write (ENOSPC, EIO, a failed rename, another process's failure) are kept and returned
       by that next call on every process ("save_state: the background write of <dir> failed: ..."), once; that
       checkpoint was not published, so the previous one stays the newest. The iteration has advanced (the next
       automatic save does not reuse the failed name). destroy logs such an error at error level.
     - Memory: the snapshot is allocated by the first save and reused (grown when the state grows).
       desc.async_max_bytes bounds it: the longest tail of the state, in file order, that fits is snapshotted, and
       save_state writes the part before it synchronously from the live tensors before returning — the stall grows,
       the memory never exceeds the budget. 0: the whole state.
     - Consolidated exports (accel_zero.h: accel_zero_export of the moments, accel_zero_fsdp_export — FSDP's
       FULL_STATE_DICT — of the parameters, into whole tensors registered here) need nothing else: call the export,
       then save_state. The export is a collective that ends when the whole tensors are filled (device ones on
       acc->stream, which the snapshot's copies follow), so the stall is the export plus the snapshot copy of the
       main process (the other processes' whole tensors are not written, so not copied); the whole tensors may be
       refilled or freed once save_state returns, and the files are a synchronous save's, byte for byte.
     - Several processes: each process's writer writes its own files (random_states_<rank>.bin, sharded state such as
       ZeRO shards) into the shared temporary directory and leaves a .done_<rank> there; the owner's writer seals and
       publishes once every process's .done_ is present (or the calling threads agree that one failed).
     - desc.on_range (accel.h's accel_range_fn; accel_prof_record_range with range_user = the profiler) is told
       "checkpoint_snapshot" (the time save_state stalled) on the calling thread and "checkpoint_write" (the
       background work, which spans training steps) on the writer thread.
     - The writer thread neither allocates nor records errors (its first failure waits in the job); the calling
       thread must not call accel_ckpt functions concurrently, as everywhere (THREADS AND STREAMS).

   OPTIONS (accel_ckpt_desc, zero = default)
     project_dir                  NULL → acc->desc.project_dir; automatic names go to project_dir/checkpoints.
     automatic_checkpoint_naming  nonzero: save_state(ck, NULL) writes checkpoint_<iteration>.
     total_limit                  keep this many newest complete checkpoints (0: all; automatic naming only).
     iteration                    the first iteration number (ProjectConfiguration.iteration).
     save_on_each_node            nonzero: each node's local main process writes the global files.
     no_fallback                  nonzero: a damaged newest checkpoint fails load_state(NULL) instead (FALLBACK).
     async                        ACCEL_ON: save_state snapshots and a writer thread writes (ASYNC SAVES).
     async_max_bytes              async: the snapshot's budget in bytes (0: the whole state).
     on_range, range_user         NULL, or a range callback told about the snapshot and the background write.
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
     fresh"); damaged ones were skipped with a WARN each (FALLBACK). A checkpoint that exists but lacks something
     registered is ACCEL_ERR_INVALID_ARGUMENT or ACCEL_ERR_FORMAT. A failed callback's own message stays in
     accel_last_error (see above). An explicit
     save_state directory that exists is replaced (atomically swapped) only when it is empty or an accel checkpoint.
     A completed save whose rotation (total_limit) fails still succeeds; the failure is logged at warn level.

   THREADS AND STREAMS
     One thread at a time per accel / accel_ckpt. save_state hashes host data in a helper pthread while the calling
     thread writes, and verification hashes two files at a time (link with -pthread where libc needs it); the helper
     threads neither allocate nor record errors. Device tensors are staged as accel_safetensors.h stages them (on
     acc->stream); a call returns when the data is on disk / in the destination (async saves: when the snapshot is
     taken, ASYNC SAVES). save_state and load_state are
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
    accel_toggle async;               /* ACCEL_ON: save_state snapshots and returns, a writer thread writes (ASYNC) */
    uint64_t async_max_bytes;         /* async: the snapshot's budget (0: the whole state); the rest is written first */
    accel_range_fn on_range;          /* NULL, or told "checkpoint_snapshot" / "checkpoint_write" and their times */
    void *range_user;                 /* on_range's first argument (accel_prof_record_range: the accel_prof *) */
    int no_fallback;                  /* nonzero: load_state(NULL) fails on a damaged newest checkpoint (FALLBACK) */
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
/* Accelerate's register_save_state_pre_hook / register_load_state_pre_hook (PRE-HOOKS): hook(user, dir) runs on
   every process in save_state before accel's files are written, dir = the checkpoint's temporary directory (files it
   writes there become part of the checkpoint: in the marker, verified on load, renamed into place with the rest), and
   in load_state once the checkpoint dir is chosen and verified, before anything is applied. A failure (recorded with
   accel_set_error) fails the call on every process. Hooks run in registration order; every process registers the
   same ones. *out (may be NULL) receives the hook's handle, Accelerate's RemovableHandle: pass it to
   accel_ckpt_hook_remove. Registering or removing from inside a running pre-hook is refused (ACCEL_ERR_STATE). */
typedef accel_result (*accel_ckpt_hook_fn)(void *user, const char *dir);
typedef struct accel_ckpt_hook_handle {
    const accel_ckpt *ck; /* the checkpointer it was registered on */
    uint64_t id;          /* 1, 2, ... per checkpointer, never reused; 0: no hook (a zeroed handle) */
    int kind;             /* 1 save pre-hook, 2 load pre-hook */
} accel_ckpt_hook_handle;
ACCEL_API accel_result accel_ckpt_register_save_pre_hook(accel_ckpt *ck, accel_ckpt_hook_fn hook, void *user,
                                                         accel_ckpt_hook_handle *out);
ACCEL_API accel_result accel_ckpt_register_load_pre_hook(accel_ckpt *ck, accel_ckpt_hook_fn hook, void *user,
                                                         accel_ckpt_hook_handle *out);
/* RemovableHandle.remove(): the hook no longer runs; the others keep their order. A handle removed already, a zeroed
   one or another checkpointer's is ACCEL_ERR_NOT_FOUND naming it ("save pre-hook #2 was removed already"), where
   Accelerate's second remove() is silently nothing. Local: every process removes the same hooks before the next
   save_state / load_state. During save_state / load_state: from inside a running pre-hook ACCEL_ERR_STATE (the pass
   in progress runs the hooks it started with); after save_state returned, an async save in flight is not affected
   (its pre-hooks ran before the snapshot). */
ACCEL_API accel_result accel_ckpt_hook_remove(accel_ckpt *ck, accel_ckpt_hook_handle handle);
/* Collective. output_dir NULL → automatic naming (an existing target is an error). out_dir (may be NULL)
   receives the final directory. iteration += 1 after a successful save (as Accelerate). */
ACCEL_API accel_result accel_ckpt_save_state(accel_ckpt *ck, const char *output_dir, char *out_dir, size_t cap);
/* Collective. Waits for the async save in flight (ASYNC SAVES): ACCEL_OK once it is published, else its error, on
   every process (returned once; that checkpoint was not published). ACCEL_OK at once when none is in flight. */
ACCEL_API accel_result accel_ckpt_wait(accel_ckpt *ck);
/* Collective. input_dir NULL → the newest complete checkpoint under project_dir/checkpoints, skipping damaged newer
   ones with a WARN (FALLBACK; desc.no_fallback: an error instead); ACCEL_ERR_NOT_FOUND (logged at info level, not
   an error to print) when there is none yet. Verifies everything (marker, sizes,
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

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <limits.h>
#include <time.h>
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

struct accel__ckpt_hook { accel_ckpt_hook_fn fn; void *user; uint64_t id; };
struct accel_ckpt {
    accel *acc;
    accel_ckpt_desc d;
    char project_dir[2048];
    accel__ckpt_group *models, *optims; /* stb_ds arrays */
    accel__ckpt_obj *objs;
    accel__ckpt_sobj *sobjs;            /* accel_ckpt_register_sharded */
    int n_custom;
    int iteration;
    struct accel__ckpt_hook *save_hooks, *load_hooks; /* stb_ds arrays: pre-hooks (PRE-HOOKS) */
    uint64_t hook_ids;                  /* the last handle id given (ids are never reused) */
    int hooks_running;                  /* inside accel__ckpt_run_hooks: the arrays must not change */
    int hook_files;                     /* save_state, owner: the files the save pre-hooks wrote (the marker's room) */
    struct accel__ckpt_async *as;       /* async saves: the writer thread and the snapshot (4. save_state) */
};
typedef struct accel__ckpt_async accel__ckpt_async;
static void accel__ckpt_async_end(accel_ckpt *ck);

#define ACCEL__CKPT_MARKER "checkpoint_complete.json"
/* The most bytes one file's entry takes in the marker (a name of < 96 bytes JSON-escaped, its size and checksum). */
#define ACCEL__CKPT_MARKER_ENTRY 720

static void accel__ckpt_group_free(accel *acc, accel__ckpt_group *g) {
    int i;
    for (i = 0; i < g->n; ++i) accel_host_free(acc, (void *)g->t[i].name);
    accel_host_free(acc, g->t);
}
ACCEL__DEF void accel_ckpt_destroy(accel_ckpt *ck) {
    int i;
    if (!ck) return;
    accel__ckpt_async_end(ck); /* the write in flight first (collective then) */
    for (i = 0; i < (int)stbds_arrlen(ck->models); ++i) accel__ckpt_group_free(ck->acc, &ck->models[i]);
    for (i = 0; i < (int)stbds_arrlen(ck->optims); ++i) accel__ckpt_group_free(ck->acc, &ck->optims[i]);
    for (i = 0; i < (int)stbds_arrlen(ck->objs); ++i) accel_host_free(ck->acc, ck->objs[i].name);
    for (i = 0; i < (int)stbds_arrlen(ck->sobjs); ++i) accel_host_free(ck->acc, ck->sobjs[i].name);
    stbds_arrfree(ck->models);
    stbds_arrfree(ck->optims);
    stbds_arrfree(ck->objs);
    stbds_arrfree(ck->sobjs);
    stbds_arrfree(ck->save_hooks);
    stbds_arrfree(ck->load_hooks);
    accel_host_free(ck->acc, ck);
}
ACCEL__DEF accel_result accel_ckpt_create(accel *acc, const accel_ckpt_desc *desc, accel_ckpt **out) {
    accel_ckpt *ck;
    const char *pd;
    if (!acc || !out) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_ckpt_create: NULL argument");
    *out = NULL;
    if (desc && (desc->async < ACCEL_OFF || desc->async > ACCEL_ON))
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_ckpt_desc: async=%d is not an accel_toggle",
                           (int)desc->async);
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
static accel_result accel__ckpt_add_hook(accel_ckpt *ck, int kind, accel_ckpt_hook_fn fn, void *user,
                                         accel_ckpt_hook_handle *out, const char *what) {
    struct accel__ckpt_hook h, **arr;
    if (out) memset(out, 0, sizeof *out);
    if (!ck || !fn) return ACCEL__FAIL(ck ? ck->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, "%s: NULL argument", what);
    arr = kind == 1 ? &ck->save_hooks : &ck->load_hooks;
    if (ck->hooks_running) /* the running pass iterates the array: growing it would move it under the loop */
        return ACCEL__FAIL(ck->acc, ACCEL_ERR_STATE, "%s: called from inside a running pre-hook (register before "
                           "save_state / load_state)", what);
    h.fn = fn;
    h.user = user;
    h.id = ck->hook_ids + 1;
    if (ACCEL__ARR_PUT(*arr, h) != 0)
        return ACCEL__FAIL(ck->acc, ACCEL_ERR_OUT_OF_MEMORY, "%s: out of memory", what);
    ck->hook_ids = h.id;
    if (out) { out->ck = ck; out->id = h.id; out->kind = kind; }
    return ACCEL_OK;
}
ACCEL__DEF accel_result accel_ckpt_register_save_pre_hook(accel_ckpt *ck, accel_ckpt_hook_fn hook, void *user,
                                                          accel_ckpt_hook_handle *out) {
    return accel__ckpt_add_hook(ck, 1, hook, user, out, "register_save_pre_hook");
}
ACCEL__DEF accel_result accel_ckpt_register_load_pre_hook(accel_ckpt *ck, accel_ckpt_hook_fn hook, void *user,
                                                          accel_ckpt_hook_handle *out) {
    return accel__ckpt_add_hook(ck, 2, hook, user, out, "register_load_pre_hook");
}
ACCEL__DEF accel_result accel_ckpt_hook_remove(accel_ckpt *ck, accel_ckpt_hook_handle h) {
    struct accel__ckpt_hook *arr;
    const char *kind = h.kind == 1 ? "save pre-hook" : h.kind == 2 ? "load pre-hook" : "pre-hook";
    ptrdiff_t i, n;
    if (!ck) return ACCEL__FAIL(NULL, ACCEL_ERR_INVALID_ARGUMENT, "hook_remove: ck is NULL");
    if (h.id == 0 || (h.kind != 1 && h.kind != 2))
        return ACCEL__FAIL(ck->acc, ACCEL_ERR_NOT_FOUND, "hook_remove: the handle (id %llu, kind %d) names no hook "
                           "(zeroed, or not from a register_*_pre_hook)", (unsigned long long)h.id, h.kind);
    if (h.ck != ck)
        return ACCEL__FAIL(ck->acc, ACCEL_ERR_NOT_FOUND, "hook_remove: %s #%llu was registered on another "
                           "checkpointer", kind, (unsigned long long)h.id);
    if (ck->hooks_running)
        return ACCEL__FAIL(ck->acc, ACCEL_ERR_STATE, "hook_remove: %s #%llu: called from inside a running pre-hook "
                           "(remove it after save_state / load_state returns)", kind, (unsigned long long)h.id);
    arr = h.kind == 1 ? ck->save_hooks : ck->load_hooks;
    n = (ptrdiff_t)stbds_arrlen(arr);
    for (i = 0; i < n && arr[i].id != h.id; ++i) {}
    if (i == n)
        return ACCEL__FAIL(ck->acc, ACCEL_ERR_NOT_FOUND, "hook_remove: %s #%llu %s", kind, (unsigned long long)h.id,
                           h.id <= ck->hook_ids ? "was removed already" : "was never registered on this checkpointer");
    stbds_arrdel(arr, i); /* keeps the registration order; shrinking never allocates */
    return ACCEL_OK;
}

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

/* Runs the pre-hooks of save_state or load_state (what) on dir, in registration order; the first failure is the
   result, its message kept as a callback's ("save_state: save pre-hook 1: <its message>"). */
static accel_result accel__ckpt_run_hooks(accel_ckpt *ck, const struct accel__ckpt_hook *hooks, const char *dir,
                                          const char *what, const char *kind) {
    int i;
    ck->hooks_running = 1;
    for (i = 0; i < (int)stbds_arrlen(hooks); ++i) {
        accel__ckpt_errmark mark;
        accel_result r;
        char which[48];
        accel__ckpt_errmark_now(ck->acc, &mark);
        r = hooks[i].fn(hooks[i].user, dir);
        if (r != ACCEL_OK) {
            ck->hooks_running = 0;
            accel__fmt(which, sizeof which, "%s pre-hook %d", kind, i);
            return accel__ckpt_callback_failed(ck->acc, r, &mark, what, which);
        }
    }
    ck->hooks_running = 0;
    return ACCEL_OK;
}

/* The Accelerator's own training state as a registered-like object (accel_state_save has the contract's shape). */
static accel_result accel__ckpt_core_state_save(void *acc, void *buf, size_t cap, size_t *size) {
    return accel_state_save((accel *)acc, buf, cap, size);
}

typedef struct accel__ckpt_written { char name[96]; uint64_t bytes, hash; } accel__ckpt_written;
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

/* -------------------------------------------------------------------------------------- 3. listing and rotation */
/* Complete checkpoints under dir, sorted ascending by number. */
typedef struct accel__ckpt_ent { long num; char name[64]; } accel__ckpt_ent;
static int accel__ckpt_ent_cmp(const void *a, const void *b) {
    long x = ((const accel__ckpt_ent *)a)->num, y = ((const accel__ckpt_ent *)b)->num;
    return x < y ? -1 : x > y;
}
/* *out: stb_ds array of the complete checkpoint_<N> directories (empty when dir does not exist), or with `all` of
   every checkpoint_<N> directory (load_state's candidates: it checks them itself). Incomplete ones are skipped
   silently; anything else that goes wrong (an unreadable directory or marker, memory) is an error. */
static accel_result accel__ckpt_list(accel *acc, const char *dir, int all, accel__ckpt_ent **out) {
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
        if (!all) r = accel__ckpt_check_complete(acc, path, 0, 1, NULL);
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
    r = accel__ckpt_list(acc, dir, 0, &list);
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

/* A name accel's own files of a checkpoint use (or may use on another process): a pre-hook must not write it. */
static int accel__ckpt_reserved_name(const accel_ckpt *ck, const char *n) {
    size_t l = strlen(n);
    int i, st = l > 12 && !strcmp(n + l - 12, ".safetensors");
    if (!strcmp(n, ACCEL__CKPT_MARKER) || !strcmp(n, "accelerator_state.json") || !strncmp(n, "random_states_", 14))
        return 1;
    if (st && (!strncmp(n, "model", 5) || !strncmp(n, "optimizer", 9))) return 1;
    for (i = 0; i < (int)stbds_arrlen(ck->objs); ++i)
        if (!strcmp(n, ck->objs[i].name)) return 1;
    for (i = 0; i < (int)stbds_arrlen(ck->sobjs); ++i)
        if (accel__ckpt_is_sharded_file(n, ck->sobjs[i].name)) return 1;
    return !strncmp(n, "custom_checkpoint_", 18);
}
/* Owner, after every process's save pre-hooks ran: what they wrote into tmp must be plain files with names accel's
   own files do not use (those would be overwritten); their count makes room in the marker (ck->hook_files). */
static accel_result accel__ckpt_hook_files(accel_ckpt *ck, const char *tmp) {
    DIR *d = opendir(tmp);
    struct dirent *de;
    accel_result r = ACCEL_OK;
    ck->hook_files = 0;
    if (!d) return accel__io_fail(ck->acc, "cannot list", tmp);
    while (r == ACCEL_OK && (de = readdir(d)) != NULL) {
        char path[4200];
        struct stat st;
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        accel__fmt(path, sizeof path, "%s/%s", tmp, de->d_name);
        if (de->d_name[0] == '.' || lstat(path, &st) != 0 || !S_ISREG(st.st_mode) || strlen(de->d_name) >= 96)
            r = ACCEL__FAIL(ck->acc, ACCEL_ERR_INVALID_ARGUMENT, "save_state: a save pre-hook left %.400s: only "
                            "regular files with names of < 96 bytes not starting with '.' can be part of a checkpoint",
                            path);
        else if (accel__ckpt_reserved_name(ck, de->d_name))
            r = ACCEL__FAIL(ck->acc, ACCEL_ERR_INVALID_ARGUMENT, "save_state: a save pre-hook wrote %s, a name the "
                            "checkpoint's own files use", de->d_name);
        else ck->hook_files++;
    }
    closedir(d);
    return r;
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

/* A save is a job: the files this process writes, in order — each a head (a safetensors header, or an object's
   whole state) followed by spans of tensor data — built on the calling thread, and the steps that write them, seal
   the checkpoint (the marker), publish it (the rename) and rotate. A synchronous save runs the steps on the calling
   thread; an async one copies the spans into its pinned snapshot and runs the same steps on the writer thread. The
   steps never allocate (the job holds all they need) and, on the writer thread (job->bg), record no error: the first
   failure waits in the job (res, msg) until the calling thread records it at the next checkpoint call. */
typedef struct accel__ckpt_span { const void *p; uint64_t n; int dev; } accel__ckpt_span; /* dev: live device data */
typedef struct accel__ckpt_file {
    char name[96];
    char *head;               /* acc's allocator */
    size_t head_n;
    accel__ckpt_span *spans;  /* acc's allocator */
    int nspans, next;         /* next: spans written so far (a file the caller began, the writer thread finishes) */
    int fd, done;             /* fd >= 0 while the file is open */
    accel__st_xxh64 h;
    uint64_t bytes;
} accel__ckpt_file;

typedef struct accel__ckpt_job {
    accel_ckpt *ck;
    accel__ckpt_save_paths sp;
    accel__ckpt_file *files;
    int nfiles;
    int bg;                       /* the steps run on the writer thread */
    int peers;                    /* async owner: the other processes writing into sp.tmp (it awaits their .done_*) */
    int sentinel;                 /* async, not the owner: create .done_<rank> once this process's files are written */
    int bg_file;                  /* the writer thread starts at this file (at its span `next`) */
    int device_copy;              /* the snapshot holds device data: the writer thread waits for the event first */
    accel__ckpt_written *written; /* capacity cap_written: this process's files, then (owner) the other processes' */
    int nwritten, cap_written;
    accel__sb marker;             /* owner: reserved when the job is built, so sealing never grows it */
    accel__ckpt_ent *victims;     /* owner: stb_ds list of the complete checkpoints before this save */
    int nvictims;                 /* the first nvictims of them go once the new one is published (total_limit) */
    accel_result res;             /* writer thread: the first failure and its message */
    char msg[ACCEL_ERROR_CAPACITY];
    char warn[600];               /* writer thread: a rotation failure, logged by the calling thread */
} accel__ckpt_job;

static accel_result accel__ckpt_job_fail(accel__ckpt_job *job, accel_result r, const char *fmt, ...)
    ACCEL__PRINTF(3, 4);
static accel_result accel__ckpt_job_fail(accel__ckpt_job *job, accel_result r, const char *fmt, ...) {
    char m[ACCEL_ERROR_CAPACITY];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    if (!job->bg) return ACCEL__FAIL(job->ck->acc, r, "%s", m);
    if (job->res == ACCEL_OK) {
        job->res = r;
        accel__fmt(job->msg, sizeof job->msg, "%s", m);
    }
    return r;
}
static accel_result accel__ckpt_job_io(accel__ckpt_job *job, const char *what, const char *path) {
    int e = errno;
    return accel__ckpt_job_fail(job, ACCEL_ERR_IO, "%s %.400s: %s", what, path, strerror(e));
}

static void accel__ckpt_job_free(accel__ckpt_job *job) {
    accel *acc = job->ck->acc;
    int i;
    for (i = 0; job->files && i < job->nfiles; ++i) {
        if (job->files[i].fd >= 0) close(job->files[i].fd);
        accel_host_free(acc, job->files[i].head);
        accel_host_free(acc, job->files[i].spans);
    }
    accel_host_free(acc, job->files);
    accel_host_free(acc, job->written);
    accel__sb_free(&job->marker);
    stbds_arrfree(job->victims);
    memset(job, 0, sizeof *job);
}

/* The bytes of an object's state through the contract's two calls (size, then bytes): *buf from acc's allocator. */
static accel_result accel__ckpt_capture(accel *acc, const char *what, accel_state_save_fn save, void *obj,
                                        const char *name, char **buf, size_t *n) {
    size_t need = 0, got = 0;
    accel__ckpt_errmark mark;
    accel_result r;
    *buf = NULL;
    accel__ckpt_errmark_now(acc, &mark);
    r = save(obj, NULL, 0, &need);
    if (r != ACCEL_OK) return accel__ckpt_callback_failed(acc, r, &mark, what, name);
    *buf = (char *)accel_host_alloc(acc, need ? need : 1);
    if (!*buf) return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "%s: %s (%zu bytes)", what, name, need);
    accel__ckpt_errmark_now(acc, &mark);
    r = save(obj, *buf, need, &got);
    if (r != ACCEL_OK) r = accel__ckpt_callback_failed(acc, r, &mark, what, name);
    else if (got > need)
        r = ACCEL__FAIL(acc, ACCEL_ERR_STATE,
                        "%s: %s: the state grew from %zu to %zu bytes between the save callback's two calls", what,
                        name, need, got);
    if (r != ACCEL_OK) {
        accel_host_free(acc, *buf);
        *buf = NULL;
        return r;
    }
    *n = got;
    return ACCEL_OK;
}

/* A registered tensor group as a file: the safetensors layout's head, and one span per tensor in file order. */
static accel_result accel__ckpt_job_group(accel *acc, accel__ckpt_file *f, const accel__ckpt_group *g, int meta) {
    static const char *const pt[2] = {"format", "pt"};
    accel__st_item *items = NULL;
    accel__sb hb;
    uint64_t data = 0;
    int i;
    accel_result r = accel__st_layout(acc, f->name, g->t, g->n, meta ? pt : NULL, meta ? 1 : 0, &hb, &items, &data);
    if (r != ACCEL_OK) return r;
    f->head = hb.p;
    f->head_n = hb.n;
    f->spans = (accel__ckpt_span *)accel__st_zalloc(acc, (size_t)g->n, sizeof *f->spans);
    if (!f->spans) {
        accel_host_free(acc, items);
        return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "save_state: %s", f->name);
    }
    for (i = 0; i < g->n; ++i) {
        f->spans[i].p = items[i].t->ptr;
        f->spans[i].n = items[i].nbytes;
        f->spans[i].dev = items[i].nbytes && accel__st_is_device_ptr(items[i].t->ptr);
    }
    f->nspans = g->n;
    accel_host_free(acc, items);
    return ACCEL_OK;
}

/* total_limit: the complete checkpoints the rotation removes once this save is published, chosen as the listing after
   the publish would choose them (the oldest beyond the limit, never the new one) from the listing before it — the
   writer thread cannot list (it would allocate). A failed listing skips the rotation (warn), not the save. */
static void accel__ckpt_job_victims(accel_ckpt *ck, accel__ckpt_job *job) {
    accel *acc = ck->acc;
    int n, k, limit = ck->d.total_limit;
    if (!job->sp.owner || !job->sp.automatic || limit <= 0) return;
    if (accel__ckpt_list(acc, job->sp.parent, 0, &job->victims) != ACCEL_OK) {
        accel_log(acc, ACCEL_LOG_WARN, "save_state: rotation (total_limit %d) skipped: %s", limit,
                  accel_last_error(acc));
        job->victims = NULL;
        return;
    }
    n = (int)stbds_arrlen(job->victims); /* after the publish there are n + 1; position = index among those */
    for (k = 0; k < n; ++k) {
        int pos = k + (job->victims[k].num > (long)ck->iteration ? 1 : 0);
        if (pos + limit < n + 1) job->nvictims = k + 1;
    }
}

/* The files of this save: the global ones by the owner (models, optimizers, objects, accelerator_state.json), this
   rank's training state (accel_state_save) and its sharded objects' bytes by every process. Objects' bytes are
   captured here; tensor data stays where it is (spans) until written or snapshotted. */
static accel_result accel__ckpt_job_build(accel_ckpt *ck, const accel__ckpt_save_paths *sp, int async,
                                          accel__ckpt_job *job) {
    accel *acc = ck->acc;
    int nm = (int)stbds_arrlen(ck->models), no = (int)stbds_arrlen(ck->optims), nobj = (int)stbds_arrlen(ck->objs);
    int ns = (int)stbds_arrlen(ck->sobjs), i, f = 0;
    accel_result r = ACCEL_OK;
    memset(job, 0, sizeof *job);
    job->ck = ck;
    job->sp = *sp;
    job->nfiles = (sp->owner ? nm + no + nobj + 1 : 0) + 1 + ns;
    job->files = (accel__ckpt_file *)accel__st_zalloc(acc, (size_t)job->nfiles, sizeof *job->files);
    if (!job->files) return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "save_state");
    for (i = 0; i < job->nfiles; ++i) job->files[i].fd = -1;
    if (sp->owner) {
        for (i = 0; i < nm && r == ACCEL_OK; ++i, ++f) {
            accel__ckpt_group_file(job->files[f].name, sizeof job->files[f].name, "model", i);
            r = accel__ckpt_job_group(acc, &job->files[f], &ck->models[i], 1);
        }
        for (i = 0; i < no && r == ACCEL_OK; ++i, ++f) {
            accel__ckpt_group_file(job->files[f].name, sizeof job->files[f].name, "optimizer", i);
            r = accel__ckpt_job_group(acc, &job->files[f], &ck->optims[i], 0);
        }
        for (i = 0; i < nobj && r == ACCEL_OK; ++i, ++f) {
            accel__fmt(job->files[f].name, sizeof job->files[f].name, "%s", ck->objs[i].name);
            r = accel__ckpt_capture(acc, "save_state", ck->objs[i].save, ck->objs[i].obj, ck->objs[i].name,
                                    &job->files[f].head, &job->files[f].head_n);
        }
        if (r == ACCEL_OK) { /* ckpt's own fields only: the counters are in random_states_<rank>.bin */
            accel__sb b;
            accel__sb_init(&b, acc);
            accel__sb_printf(&b, "{\"format\": \"accel\", \"iteration\": %d, \"num_processes\": %d, \"version\": 1}\n",
                             ck->iteration, acc->num_processes);
            accel__fmt(job->files[f].name, sizeof job->files[f].name, "accelerator_state.json");
            if (b.oom) r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "save_state: accelerator_state.json");
            job->files[f].head = b.p;
            job->files[f].head_n = b.n;
            ++f;
        }
    }
    if (r == ACCEL_OK) {
        accel__fmt(job->files[f].name, sizeof job->files[f].name, "random_states_%d.bin", acc->process_index);
        r = accel__ckpt_capture(acc, "save_state", accel__ckpt_core_state_save, acc, job->files[f].name,
                                &job->files[f].head, &job->files[f].head_n);
        ++f;
    }
    for (i = 0; i < ns && r == ACCEL_OK; ++i, ++f) { /* per-rank state: every process */
        accel__fmt(job->files[f].name, sizeof job->files[f].name, "%s_%d.bin", ck->sobjs[i].name, acc->process_index);
        r = accel__ckpt_capture(acc, "save_state", ck->sobjs[i].save, ck->sobjs[i].obj, job->files[f].name,
                                &job->files[f].head, &job->files[f].head_n);
    }
    /* the marker lists every process's files: room for this one's and (1 + ns) per process */
    job->cap_written = job->nfiles + acc->num_processes * (1 + ns) + 16 + ck->hook_files;
    if (r == ACCEL_OK) {
        job->written = (accel__ckpt_written *)accel__st_zalloc(acc, (size_t)job->cap_written, sizeof *job->written);
        if (!job->written) r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "save_state");
    }
    accel__sb_init(&job->marker, acc);
    if (r == ACCEL_OK && sp->owner &&
        accel__sb_reserve(&job->marker, 128 + (size_t)job->cap_written * ACCEL__CKPT_MARKER_ENTRY) != 0)
        r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "save_state: " ACCEL__CKPT_MARKER);
    if (r == ACCEL_OK && async && acc->num_processes > 1) {
        job->sentinel = !sp->owner;
        if (sp->owner) job->peers = (ck->d.save_on_each_node ? acc->local_num_processes : acc->num_processes) - 1;
    }
    if (r == ACCEL_OK) accel__ckpt_job_victims(ck, job);
    if (r != ACCEL_OK) accel__ckpt_job_free(job);
    return r;
}

/* Host spans hashed by a helper thread while the calling thread writes them (hashing runs at about memcpy speed:
   inline it would cost about as much as the write). */
typedef struct accel__ckpt_hasher { const accel__ckpt_span *s; int n; accel__st_xxh64 *h; } accel__ckpt_hasher;
static void *accel__ckpt_hash_spans(void *arg) {
    accel__ckpt_hasher *j = (accel__ckpt_hasher *)arg;
    int i;
    for (i = 0; i < j->n; ++i)
        if (j->s[i].n) accel__st_xxh64_update(j->h, j->s[i].p, (size_t)j->s[i].n);
    return NULL;
}

/* Writes file f's head (opening it) and its spans [f->next, upto); after its last span it is fsync'd, closed and
   listed in job->written. stage: the calling thread's staging for live device spans (NULL on the writer thread,
   whose spans are host memory). On the calling thread 1 MiB or more of host spans are hashed by a helper thread
   while this one writes; the writer thread hashes each 1 MiB chunk, then writes it (one core). */
static accel_result accel__ckpt_file_write(accel__ckpt_job *job, accel__ckpt_file *f, int upto,
                                           accel__st_stage *stage) {
    char path[2600];
    accel__ckpt_hasher hj;
    pthread_t hasher;
    uint64_t host = 0;
    int i, threaded = 0, any_dev = 0;
    accel_result r = ACCEL_OK;
    if (f->done) return ACCEL_OK;
    accel__fmt(path, sizeof path, "%s/%s", job->sp.tmp, f->name);
    if (f->fd < 0) {
        f->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (f->fd < 0) return accel__ckpt_job_io(job, "cannot create", path);
        accel__st_xxh64_init(&f->h, 0);
        accel__st_xxh64_update(&f->h, f->head, f->head_n);
        if (accel__write_all(f->fd, f->head, f->head_n) != 0) return accel__ckpt_job_io(job, "cannot write", path);
        f->bytes = f->head_n;
    }
    for (i = f->next; i < upto; ++i) {
        if (f->spans[i].dev) any_dev = 1;
        else host += f->spans[i].n;
    }
    if (!job->bg && !any_dev && host >= ACCEL__ST_IO_CHUNK) {
        hj.s = f->spans + f->next;
        hj.n = upto - f->next;
        hj.h = &f->h;
        if (pthread_create(&hasher, NULL, accel__ckpt_hash_spans, &hj) == 0) threaded = 1;
    }
    for (i = f->next; i < upto && r == ACCEL_OK; ++i) {
        const unsigned char *src = (const unsigned char *)f->spans[i].p;
        uint64_t n = f->spans[i].n, done = 0;
        if (n == 0) continue;
        if (f->spans[i].dev) {
            r = stage ? accel__st_write_from_device(job->ck->acc, stage, f->fd, path, src, n, &f->h)
                      : accel__ckpt_job_fail(job, ACCEL_ERR_STATE, "%.400s: device data on the writer thread", path);
        } else if (threaded) {
            if (accel__write_all(f->fd, src, (size_t)n) != 0) r = accel__ckpt_job_io(job, "cannot write", path);
        } else {
            while (done < n && r == ACCEL_OK) { /* hash a cache-sized chunk, then write it while it is still hot */
                size_t len = (size_t)((n - done) < ACCEL__ST_IO_CHUNK ? (n - done) : ACCEL__ST_IO_CHUNK);
                accel__st_xxh64_update(&f->h, src + done, len);
                if (accel__write_all(f->fd, src + done, len) != 0) r = accel__ckpt_job_io(job, "cannot write", path);
                done += len;
            }
        }
        f->bytes += n;
    }
    if (threaded) pthread_join(hasher, NULL);
    if (r != ACCEL_OK) return r;
    f->next = upto;
    if (upto < f->nspans) return ACCEL_OK;
    if (fsync(f->fd) != 0) return accel__ckpt_job_io(job, "cannot fsync", path);
    i = close(f->fd);
    f->fd = -1;
    if (i != 0) return accel__ckpt_job_io(job, "cannot close", path);
    f->done = 1;
    accel__fmt(job->written[job->nwritten].name, sizeof job->written[0].name, "%s", f->name);
    job->written[job->nwritten].bytes = f->bytes;
    job->written[job->nwritten].hash = accel__st_xxh64_final(&f->h);
    job->nwritten++;
    return ACCEL_OK;
}
/* Files [from, nfiles), the first one from its span `next` on. */
static accel_result accel__ckpt_job_write(accel__ckpt_job *job, int from, accel__st_stage *stage) {
    accel_result r = ACCEL_OK;
    int i;
    for (i = from; i < job->nfiles && r == ACCEL_OK; ++i)
        r = accel__ckpt_file_write(job, &job->files[i], job->files[i].nspans, stage);
    return r;
}

/* The owner seals: the other processes' files are hashed from disk, the marker lists every file (sorted by name),
   is written and fsync'd, then the directory. Async: the processes' .done_<rank> files are removed first. */
static int accel__ckpt_written_cmp(const void *a, const void *b) {
    return strcmp(((const accel__ckpt_written *)a)->name, ((const accel__ckpt_written *)b)->name);
}
static accel_result accel__ckpt_job_seal(accel__ckpt_job *job) {
    const char *tmp = job->sp.tmp;
    char path[2600];
    DIR *d = opendir(tmp);
    struct dirent *de;
    accel__sb *b = &job->marker;
    accel_result r = ACCEL_OK;
    int i, own = job->nwritten, fd;
    if (!d) return accel__ckpt_job_io(job, "cannot list", tmp);
    while ((de = readdir(d)) != NULL) /* removing entries while listing is allowed (POSIX) */
        if (!strncmp(de->d_name, ".done_", 6)) {
            accel__fmt(path, sizeof path, "%s/%s", tmp, de->d_name);
            if (unlink(path) != 0 && r == ACCEL_OK) r = accel__ckpt_job_io(job, "cannot remove", path);
        }
    rewinddir(d);
    while (r == ACCEL_OK && (de = readdir(d)) != NULL) {
        accel__ckpt_written *w;
        int k, mine = 0, e;
        if (de->d_name[0] == '.' || !strcmp(de->d_name, ACCEL__CKPT_MARKER)) continue;
        for (k = 0; k < own; ++k)
            if (!strcmp(job->written[k].name, de->d_name)) mine = 1;
        if (mine || strlen(de->d_name) >= sizeof job->written[0].name) continue;
        if (job->nwritten >= job->cap_written) {
            r = accel__ckpt_job_fail(job, ACCEL_ERR_STATE, "%.400s holds more files than this job's %d processes "
                                     "write", tmp, job->ck->acc->num_processes);
            break;
        }
        w = &job->written[job->nwritten];
        accel__fmt(w->name, sizeof w->name, "%s", de->d_name);
        accel__fmt(path, sizeof path, "%s/%s", tmp, de->d_name);
        e = accel__ckpt_hash_file_raw(path, &w->bytes, &w->hash);
        if (e == 0) { /* another process's file (durable already) or a pre-hook's (maybe not): fsync it first */
            int f = open(path, O_RDONLY | O_CLOEXEC);
            e = f < 0 ? errno : fsync(f) != 0 ? errno : 0;
            if (f >= 0) close(f);
        }
        if (e != 0) {
            errno = e;
            r = accel__ckpt_job_io(job, "cannot read", path);
        } else {
            job->nwritten++;
        }
    }
    closedir(d);
    if (r != ACCEL_OK) return r;
    qsort(job->written, (size_t)job->nwritten, sizeof *job->written, accel__ckpt_written_cmp);
    b->n = 0; /* reserved for cap_written entries of at most ACCEL__CKPT_MARKER_ENTRY bytes: never grows */
    accel__sb_puts(b, "{\"files\": {");
    for (i = 0; i < job->nwritten; ++i) {
        char hx[24];
        const accel__ckpt_written *w = &job->written[i];
        if (i) accel__sb_puts(b, ", ");
        accel__sb_json_str(b, w->name, strlen(w->name), 1);
        accel__sb_puts(b, ": {\"bytes\": ");
        accel__st_sb_u64(b, w->bytes);
        accel__fmt(hx, sizeof hx, "%016llx", (unsigned long long)w->hash);
        accel__sb_puts(b, ", \"xxh64\": \"");
        accel__sb_puts(b, hx);
        accel__sb_puts(b, "\"}");
    }
    accel__sb_puts(b, "}, \"format\": \"accel-checkpoint\", \"version\": 1}\n");
    if (b->oom) return accel__ckpt_job_fail(job, ACCEL_ERR_OUT_OF_MEMORY, "writing " ACCEL__CKPT_MARKER);
    accel__fmt(path, sizeof path, "%s/" ACCEL__CKPT_MARKER, tmp);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return accel__ckpt_job_io(job, "cannot create", path);
    if (accel__write_all(fd, b->p, b->n) != 0 || fsync(fd) != 0) {
        r = accel__ckpt_job_io(job, "cannot write", path);
        close(fd);
        return r;
    }
    if (close(fd) != 0) return accel__ckpt_job_io(job, "cannot close", path);
    if (accel__fsync_dir(tmp) != 0) return accel__ckpt_job_io(job, "cannot fsync directory", tmp);
    return ACCEL_OK;
}

/* The owner publishes: rename into place (swapping out a replaced explicit target), then fsync the parent. */
static accel_result accel__ckpt_job_publish(accel__ckpt_job *job) {
    const accel__ckpt_save_paths *sp = &job->sp;
    int had_old = 0;
    if (accel__is_dir(sp->target)) { /* an explicit directory that exists: swap it out */
        if (accel__rmtree(sp->old) != 0 || rename(sp->target, sp->old) != 0)
            return accel__ckpt_job_io(job, "cannot move the previous checkpoint aside:", sp->target);
        had_old = 1;
    }
    if (rename(sp->tmp, sp->target) != 0)
        return accel__ckpt_job_io(job, "cannot rename the checkpoint into", sp->target);
    if (accel__fsync_dir(sp->parent) != 0) return accel__ckpt_job_io(job, "cannot fsync directory", sp->parent);
    if (had_old) accel__rmtree(sp->old);
    return ACCEL_OK;
}

/* After the publish: total_limit rotation — each victim renamed to a hidden name first, so none is ever half-deleted
   in view — and the hidden leftovers of interrupted saves. The checkpoint is published: a failure cannot undo it, so
   it is a warning (logged at once, or from the writer thread's job by the next checkpoint call). */
static void accel__ckpt_job_rotate(accel__ckpt_job *job) {
    const char *parent = job->sp.parent;
    int k;
    for (k = 0; k < job->nvictims; ++k) {
        char victim[2400], hidden[2400];
        accel__fmt(victim, sizeof victim, "%s/%s", parent, job->victims[k].name);
        if (!strcmp(victim, job->sp.target)) continue;
        accel__fmt(hidden, sizeof hidden, "%s/.%s.del", parent, job->victims[k].name);
        accel__rmtree(hidden);
        if (rename(victim, hidden) != 0 || accel__rmtree(hidden) != 0) {
            char w[600];
            accel__fmt(w, sizeof w, "save_state: rotation (total_limit %d) could not remove %.400s: %s",
                       job->ck->d.total_limit, victim, strerror(errno));
            if (!job->bg) accel_log(job->ck->acc, ACCEL_LOG_WARN, "%s", w);
            else if (!job->warn[0]) accel__fmt(job->warn, sizeof job->warn, "%s", w);
        }
    }
    if (job->nvictims) accel__fsync_dir(parent);
    if (job->sp.automatic) accel__ckpt_clean_hidden(parent);
}

/* ------------------------------------------------------------------------------------- async: the writer thread */
enum { ACCEL__CKPT_IDLE, ACCEL__CKPT_QUEUED, ACCEL__CKPT_RUNNING, ACCEL__CKPT_LOCAL_DONE, ACCEL__CKPT_DONE };
/* The writer thread and the pinned snapshot of async saves (made by the first one). The job is the calling thread's
   until it is queued, the writer thread's until DONE (the mutex orders the hand-overs). */
struct accel__ckpt_async {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int state;        /* ACCEL__CKPT_*: LOCAL_DONE = this process's files are written (the owner then waits for the
                         others' before it seals) */
    int abort_, quit; /* abort_: another process failed, the owner stops waiting for it */
    int active;       /* a job was queued and its result not yet collected */
    accel__ckpt_job job;
    void *arena;      /* the snapshot (desc.pinned_allocator), reused by the next save */
    size_t arena_cap;
    void *ev;         /* cudaEvent_t recorded after the device-to-host copies */
};

static void accel__ckpt_async_state(accel__ckpt_async *as, int state) {
    pthread_mutex_lock(&as->mu);
    as->state = state;
    pthread_cond_broadcast(&as->cv);
    pthread_mutex_unlock(&as->mu);
}

/* Owner, several processes: wait until every other process writing into tmp has created its .done_<rank> (its files
   are written and fsync'd), or until the calling thread reports that one of them failed (abort_). */
static accel_result accel__ckpt_job_wait_peers(accel__ckpt_job *job, accel__ckpt_async *as) {
    long pause_ns = 1000000;
    for (;;) {
        DIR *d = opendir(job->sp.tmp);
        struct dirent *de;
        struct timespec ts;
        int n = 0, ab;
        if (!d) return accel__ckpt_job_io(job, "cannot list", job->sp.tmp);
        while ((de = readdir(d)) != NULL) n += !strncmp(de->d_name, ".done_", 6);
        closedir(d);
        if (n >= job->peers) return ACCEL_OK;
        pthread_mutex_lock(&as->mu);
        ab = as->abort_;
        pthread_mutex_unlock(&as->mu);
        if (ab)
            return accel__ckpt_job_fail(job, ACCEL_ERR_REMOTE, "another process failed to write its files of %.400s",
                                        job->sp.target);
        ts.tv_sec = 0;
        ts.tv_nsec = pause_ns;
        nanosleep(&ts, NULL);
        if (pause_ns < 16000000) pause_ns *= 2;
    }
}

/* The writer thread's part of a job: the snapshot's files, then the .done_<rank> (not the owner), or — once every
   process's files are there — seal, publish, rotate (the owner). */
static void accel__ckpt_background(accel_ckpt *ck) {
    accel__ckpt_async *as = ck->as;
    accel__ckpt_job *job = &as->job;
    double t0 = accel_now();
#ifdef ACCEL_WITH_CUDA
    if (job->device_copy) {
        cudaError_t e = ck->acc->device >= 0 ? cudaSetDevice(ck->acc->device) : cudaSuccess;
        if (e == cudaSuccess) e = cudaEventSynchronize((cudaEvent_t)as->ev);
        if (e != cudaSuccess)
            accel__ckpt_job_fail(job, ACCEL_ERR_CUDA, "the snapshot's device-to-host copy failed: %s",
                                 cudaGetErrorString(e));
    }
#endif
    if (job->res == ACCEL_OK) accel__ckpt_job_write(job, job->bg_file, NULL);
    if (job->res == ACCEL_OK && job->sentinel) {
        char path[2600];
        int fd;
        accel__fmt(path, sizeof path, "%s/.done_%d", job->sp.tmp, ck->acc->process_index);
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0 || close(fd) != 0) accel__ckpt_job_io(job, "cannot create", path);
    }
    accel__ckpt_async_state(as, ACCEL__CKPT_LOCAL_DONE);
    if (job->res == ACCEL_OK && job->sp.owner) {
        if (job->peers == 0 || accel__ckpt_job_wait_peers(job, as) == ACCEL_OK)
            if (accel__ckpt_job_seal(job) == ACCEL_OK && accel__ckpt_job_publish(job) == ACCEL_OK)
                accel__ckpt_job_rotate(job);
    }
    if (ck->d.on_range) ck->d.on_range(ck->d.range_user, "checkpoint_write", t0, accel_now());
    accel__ckpt_async_state(as, ACCEL__CKPT_DONE);
}

static void *accel__ckpt_writer_main(void *arg) {
    accel_ckpt *ck = (accel_ckpt *)arg;
    accel__ckpt_async *as = ck->as;
    pthread_mutex_lock(&as->mu);
    for (;;) {
        while (!as->quit && as->state != ACCEL__CKPT_QUEUED) pthread_cond_wait(&as->cv, &as->mu);
        if (as->quit) break;
        as->state = ACCEL__CKPT_RUNNING;
        pthread_mutex_unlock(&as->mu);
        accel__ckpt_background(ck);
        pthread_mutex_lock(&as->mu);
    }
    pthread_mutex_unlock(&as->mu);
    return NULL;
}

/* The writer thread, started by the first async save. */
static accel_result accel__ckpt_async_start(accel_ckpt *ck) {
    accel *acc = ck->acc;
    accel__ckpt_async *as;
    if (ck->as) return ACCEL_OK;
    as = (accel__ckpt_async *)accel__st_zalloc(acc, 1, sizeof *as);
    if (!as) return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "save_state: the async writer");
    if (pthread_mutex_init(&as->mu, NULL) != 0) {
        accel_host_free(acc, as);
        return ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "save_state: the async writer's mutex");
    }
    if (pthread_cond_init(&as->cv, NULL) != 0) {
        pthread_mutex_destroy(&as->mu);
        accel_host_free(acc, as);
        return ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "save_state: the async writer's condition variable");
    }
    ck->as = as;
    if (pthread_create(&as->th, NULL, accel__ckpt_writer_main, ck) != 0) {
        int e = errno;
        pthread_cond_destroy(&as->cv);
        pthread_mutex_destroy(&as->mu);
        accel_host_free(acc, as);
        ck->as = NULL;
        return ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "save_state: cannot start the async writer thread: %s",
                           strerror(e));
    }
    return ACCEL_OK;
}

/* The next checkpoint call's first step (save_state, load_state, wait; destroy): wait for the write in flight and
   agree on its outcome. Every process first waits until its own files are written and the processes agree on that
   (a failure anywhere stops the owner, which may be waiting for the failed process's files), then until the owner has
   published, and they agree again. A failure is returned (once) on every process; the checkpoint was not published. */
static accel_result accel__ckpt_collect(accel_ckpt *ck) {
    accel *acc = ck->acc;
    accel__ckpt_async *as = ck->as;
    accel__ckpt_job *job;
    accel_result r, local;
    if (!as || !as->active) return ACCEL_OK;
    job = &as->job;
    pthread_mutex_lock(&as->mu);
    while (as->state < ACCEL__CKPT_LOCAL_DONE) pthread_cond_wait(&as->cv, &as->mu);
    local = job->res;
    pthread_mutex_unlock(&as->mu);
    if (local != ACCEL_OK)
        ACCEL__FAIL(acc, local, "save_state: the background write of %.400s failed: %s", job->sp.target, job->msg);
    r = accel__agree(acc, local, "save_state (background write)");
    pthread_mutex_lock(&as->mu);
    if (r != ACCEL_OK) as->abort_ = 1;
    while (as->state < ACCEL__CKPT_DONE) pthread_cond_wait(&as->cv, &as->mu);
    local = job->res;
    as->state = ACCEL__CKPT_IDLE;
    as->abort_ = 0;
    as->active = 0;
    pthread_mutex_unlock(&as->mu);
    if (r == ACCEL_OK) {
        if (local != ACCEL_OK)
            ACCEL__FAIL(acc, local, "save_state: the background write of %.400s failed: %s", job->sp.target,
                        job->msg);
        r = accel__agree(acc, local, "save_state (background commit)");
    }
    if (job->warn[0]) accel_log(acc, ACCEL_LOG_WARN, "%s", job->warn);
    accel__ckpt_job_free(job);
    return r;
}

/* The snapshot of an async save. The budget (async_max_bytes) keeps the longest tail of the job's bytes (objects'
   states and tensor spans, in write order) that fits; the calling thread writes the rest first, from the live
   tensors. The tail's tensor spans are copied into the reused pinned arena: host data by memcpy, device data on
   acc's stream followed by one event the writer thread waits for; objects' bytes were captured when the job was
   built. */
static accel_result accel__ckpt_snapshot(accel_ckpt *ck, accel__ckpt_job *job, accel__st_stage *stage) {
    accel *acc = ck->acc;
    accel__ckpt_async *as = ck->as;
    uint64_t budget = ck->d.async_max_bytes, total = 0, pre = 0, need = 0;
    int fi, si, bf = job->nfiles, bs = 0, found = 0, any_dev = 0;
    size_t off = 0;
    accel_result r = ACCEL_OK;
    for (fi = 0; fi < job->nfiles; ++fi) {
        total += job->files[fi].nspans ? 0 : job->files[fi].head_n;
        for (si = 0; si < job->files[fi].nspans; ++si) total += job->files[fi].spans[si].n;
    }
    if (budget == 0 || total <= budget) { bf = 0; found = 1; }
    for (fi = 0; fi < job->nfiles && !found; ++fi) { /* the boundary: the first element after `total - budget` bytes */
        const accel__ckpt_file *f = &job->files[fi];
        if (f->nspans == 0) {
            if (pre >= total - budget) { bf = fi; found = 1; }
            pre += f->head_n;
        }
        for (si = 0; si < f->nspans && !found; ++si) {
            if (pre >= total - budget) { bf = fi; bs = si; found = 1; }
            pre += f->spans[si].n;
        }
    }
    /* the part beyond the budget: written now */
    for (fi = 0; fi < bf && r == ACCEL_OK; ++fi) {
        r = accel__ckpt_file_write(job, &job->files[fi], job->files[fi].nspans, stage);
        accel_host_free(acc, job->files[fi].head); /* its bytes are on disk: not held during the background write */
        job->files[fi].head = NULL;
    }
    if (r == ACCEL_OK && bf < job->nfiles && bs > 0) r = accel__ckpt_file_write(job, &job->files[bf], bs, stage);
    job->bg_file = bf;
    if (r != ACCEL_OK) return r;
    /* the rest: into the arena (each span 64-byte aligned) */
    for (fi = bf; fi < job->nfiles; ++fi)
        for (si = fi == bf ? bs : 0; si < job->files[fi].nspans; ++si)
            need += (job->files[fi].spans[si].n + 63) & ~(uint64_t)63;
    if (need > (uint64_t)(size_t)-1)
        return ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "save_state: a snapshot of %llu bytes",
                           (unsigned long long)need);
    if (need > as->arena_cap) {
        accel_pinned_free(acc, as->arena);
        as->arena_cap = 0;
        as->arena = accel_pinned_alloc(acc, (size_t)need);
        if (!as->arena)
            return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY,
                                    "save_state: the async snapshot (%llu bytes; desc.async_max_bytes bounds it)",
                                    (unsigned long long)need);
        as->arena_cap = (size_t)need;
    }
    for (fi = bf; fi < job->nfiles && r == ACCEL_OK; ++fi)
        for (si = fi == bf ? bs : 0; si < job->files[fi].nspans && r == ACCEL_OK; ++si) {
            accel__ckpt_span *s = &job->files[fi].spans[si];
            unsigned char *dst = (unsigned char *)as->arena + off;
            if (s->dev) {
#ifdef ACCEL_WITH_CUDA
                cudaError_t e = cudaMemcpyAsync(dst, s->p, (size_t)s->n, cudaMemcpyDeviceToHost,
                                                (cudaStream_t)acc->stream);
                if (e != cudaSuccess)
                    r = ACCEL__FAIL(acc, ACCEL_ERR_CUDA, "save_state: snapshot of %s: cudaMemcpyAsync: %s",
                                    job->files[fi].name, cudaGetErrorString(e));
                any_dev = 1;
#endif
            } else if (s->n) {
                memcpy(dst, s->p, (size_t)s->n);
            }
            s->p = dst;
            s->dev = 0;
            off += (size_t)((s->n + 63) & ~(uint64_t)63);
        }
#ifdef ACCEL_WITH_CUDA
    if (r == ACCEL_OK && any_dev) {
        cudaError_t e = cudaSuccess;
        if (!as->ev) {
            cudaEvent_t ev;
            e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
            if (e == cudaSuccess) as->ev = (void *)ev;
        }
        if (e == cudaSuccess) e = cudaEventRecord((cudaEvent_t)as->ev, (cudaStream_t)acc->stream);
        if (e != cudaSuccess)
            r = ACCEL__FAIL(acc, ACCEL_ERR_CUDA, "save_state: the snapshot's event: %s", cudaGetErrorString(e));
        job->device_copy = 1;
    }
#endif
    (void)any_dev;
    return r;
}

/* Stops the writer thread (after collecting the write in flight) and frees the snapshot. */
static void accel__ckpt_async_end(accel_ckpt *ck) {
    accel *acc = ck->acc;
    accel__ckpt_async *as = ck->as;
    if (!as) return;
    if (as->active && accel__ckpt_collect(ck) != ACCEL_OK)
        accel_log(acc, ACCEL_LOG_ERROR, "accel_ckpt_destroy: %s", accel_last_error(acc));
    pthread_mutex_lock(&as->mu);
    as->quit = 1;
    pthread_cond_broadcast(&as->cv);
    pthread_mutex_unlock(&as->mu);
    pthread_join(as->th, NULL);
    pthread_cond_destroy(&as->cv);
    pthread_mutex_destroy(&as->mu);
    accel_pinned_free(acc, as->arena);
#ifdef ACCEL_WITH_CUDA
    if (as->ev) cudaEventDestroy((cudaEvent_t)as->ev);
#endif
    accel_host_free(acc, as);
    ck->as = NULL;
}

ACCEL__DEF accel_result accel_ckpt_wait(accel_ckpt *ck) {
    if (!ck) return ACCEL__FAIL(NULL, ACCEL_ERR_INVALID_ARGUMENT, "accel_ckpt_wait: ck is NULL");
    return accel__ckpt_collect(ck);
}

ACCEL__DEF accel_result accel_ckpt_save_state(accel_ckpt *ck, const char *output_dir, char *out_dir, size_t cap) {
    accel *acc;
    accel__ckpt_save_paths sp;
    accel__ckpt_job sync_job, *job;
    accel__st_stage stage;
    accel_result r;
    int async;
    double t0;
    if (!ck) return ACCEL__FAIL(NULL, ACCEL_ERR_INVALID_ARGUMENT, "save_state: ck is NULL");
    acc = ck->acc;
    async = ck->d.async == ACCEL_ON;
    /* 0. the write in flight (async): its failure is this call's result */
    r = accel__ckpt_collect(ck);
    if (r != ACCEL_OK) return r;
    t0 = accel_now();
    /* 1. the owner prepares the temporary sibling directory */
    r = accel__ckpt_save_resolve(ck, output_dir, &sp);
    if (r == ACCEL_OK && async) r = accel__ckpt_async_start(ck);
    if (r == ACCEL_OK && sp.owner) r = accel__ckpt_save_prepare(ck, &sp);
    r = accel__agree(acc, r, "save_state (prepare)");
    if (r != ACCEL_OK) return r;
    if (!accel__is_dir(sp.tmp))
        r = ACCEL__FAIL(acc, ACCEL_ERR_IO,
                        "checkpoint directory %.400s is not visible on this process (save_state needs a shared "
                        "filesystem, or save_on_each_node)",
                        sp.tmp);
    /* 1b. save pre-hooks (every process) write into tmp; once all ran, the owner checks what they wrote */
    ck->hook_files = 0;
    if (stbds_arrlen(ck->save_hooks)) {
        if (r == ACCEL_OK) r = accel__ckpt_run_hooks(ck, ck->save_hooks, sp.tmp, "save_state", "save");
        r = accel__agree(acc, r, "save_state (pre-hooks)");
        if (r == ACCEL_OK && sp.owner) r = accel__ckpt_hook_files(ck, sp.tmp);
        r = accel__agree(acc, r, "save_state (pre-hook files)");
        if (r != ACCEL_OK) return r;
    }
    /* 2. the files: written now, or snapshotted and handed to the writer thread */
    job = async ? &ck->as->job : &sync_job;
    if (r == ACCEL_OK) r = accel__ckpt_job_build(ck, &sp, async, job);
    else memset(job, 0, sizeof *job);
    accel__st_stage_begin(&stage, acc);
    if (async) {
        if (r == ACCEL_OK) r = accel__ckpt_snapshot(ck, job, &stage);
        accel__st_stage_end(&stage);
        r = accel__agree(acc, r, "save_state (snapshot)");
        if (r != ACCEL_OK) {
            if (job->ck) accel__ckpt_job_free(job);
            return r;
        }
        job->bg = 1;
        ck->as->active = 1;
        accel__ckpt_async_state(ck->as, ACCEL__CKPT_QUEUED);
        if (ck->d.on_range) ck->d.on_range(ck->d.range_user, "checkpoint_snapshot", t0, accel_now());
    } else {
        if (r == ACCEL_OK) r = accel__ckpt_job_write(job, 0, &stage);
        accel__st_stage_end(&stage);
        r = accel__agree(acc, r, "save_state (write)");
        /* 3. the owner seals and publishes, then rotates */
        if (r == ACCEL_OK) {
            if (sp.owner) r = accel__ckpt_job_seal(job);
            if (r == ACCEL_OK && sp.owner) r = accel__ckpt_job_publish(job);
            if (r == ACCEL_OK && sp.owner) accel__ckpt_job_rotate(job);
            r = accel__agree(acc, r, "save_state (commit)");
        }
        if (job->ck) accel__ckpt_job_free(job);
        if (r != ACCEL_OK) return r;
    }
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
    char **undo;                 /* per object, then per sharded object: its state before the load (save's bytes) */
    size_t *undo_n, *undo_counts; /* undo_counts: a sharded object's states of every process (num_processes) */
    int applied, sapplied;       /* objects, sharded objects whose load callback succeeded */
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
    for (i = 0; ld->undo && i < (int)(stbds_arrlen(ck->objs) + stbds_arrlen(ck->sobjs)); ++i)
        accel_host_free(ld->acc, ld->undo[i]);
    accel_host_free(ld->acc, ld->undo);
    accel_host_free(ld->acc, ld->undo_n);
    accel_host_free(ld->acc, ld->undo_counts);
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

/* The registered objects are applied first and as a transaction: their load callbacks validate their bytes (a
   checkpoint's checksums prove the bytes are what was saved, not that this object accepts them), so before any is
   called every object's current state is kept (its save callback's bytes), and when any callback fails on any
   process every process puts those back: nothing of the checkpoint stays applied. Only then are tensors copied. */
static accel_result accel__ckpt_load_backup(accel_ckpt *ck, accel__ckpt_load *ld) {
    accel *acc = ld->acc;
    int nobj = (int)stbds_arrlen(ck->objs), ns = (int)stbds_arrlen(ck->sobjs), i;
    accel_result r = ACCEL_OK;
    ld->undo = (char **)accel__st_zalloc(acc, (size_t)(nobj + ns), sizeof *ld->undo);
    ld->undo_n = (size_t *)accel__st_zalloc(acc, (size_t)(nobj + ns), sizeof *ld->undo_n);
    ld->undo_counts = (size_t *)accel__st_zalloc(acc, (size_t)acc->num_processes, sizeof *ld->undo_counts);
    if (!ld->undo || !ld->undo_n || !ld->undo_counts)
        return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "load_state: the objects' current state");
    for (i = 0; i < nobj && r == ACCEL_OK; ++i)
        r = accel__ckpt_capture(acc, "load_state (keeping the current state)", ck->objs[i].save, ck->objs[i].obj,
                                ck->objs[i].name, &ld->undo[i], &ld->undo_n[i]);
    for (i = 0; i < ns && r == ACCEL_OK; ++i)
        r = accel__ckpt_capture(acc, "load_state (keeping the current state)", ck->sobjs[i].save, ck->sobjs[i].obj,
                                ck->sobjs[i].name, &ld->undo[nobj + i], &ld->undo_n[nobj + i]);
    return r;
}
/* Hands each object its verified bytes, in registration order, then each sharded object every saved rank's. */
static accel_result accel__ckpt_load_apply_objects(accel_ckpt *ck, accel__ckpt_load *ld) {
    accel *acc = ld->acc;
    accel__ckpt_errmark mark;
    accel_result r = ACCEL_OK;
    int i;
    for (i = 0; i < (int)stbds_arrlen(ck->objs) && r == ACCEL_OK; ++i) {
        const accel__ckpt_obj *o = &ck->objs[i];
        accel__ckpt_errmark_now(acc, &mark);
        r = o->load(o->obj, ld->blobs[i], ld->blob_n[i]);
        if (r != ACCEL_OK) r = accel__ckpt_callback_failed(acc, r, &mark, "load_state", o->name);
        else ld->applied = i + 1;
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
        else ld->sapplied = i + 1;
    }
    return r;
}
/* After a failure on any process (every process calls it): the objects applied here get their kept state back. A
   sharded object takes every process's state (load_all), so those are gathered first, on every process. r: the
   failure; its message stays, extended when putting something back fails too. */
static void accel__ckpt_load_undo(accel_ckpt *ck, accel__ckpt_load *ld, accel_result r) {
    accel *acc = ld->acc;
    int nobj = (int)stbds_arrlen(ck->objs), ns = (int)stbds_arrlen(ck->sobjs), P = acc->num_processes, i, q;
    char cause[ACCEL_ERROR_CAPACITY], back[ACCEL_ERROR_CAPACITY];
    const char *c = cause;
    accel_result e, first = ACCEL_OK;
    accel__fmt(cause, sizeof cause, "%s", accel_last_error(acc));
    back[0] = 0;
    for (i = 0; i < ns; ++i) {
        void *all = NULL;
        const void *bufs[64], **bp = P <= 64 ? bufs : NULL;
        size_t off = 0;
        e = accel__host_allgatherv(acc, ld->undo[nobj + i], ld->undo_n[nobj + i], &all, ld->undo_counts);
        if (e == ACCEL_OK && i < ld->sapplied) {
            if (!bp) bp = (const void **)accel__st_zalloc(acc, (size_t)P, sizeof *bp);
            if (!bp) e = ACCEL_ERR_OUT_OF_MEMORY;
            for (q = 0; bp && q < P; ++q) {
                bp[q] = (const char *)all + off;
                off += ld->undo_counts[q];
            }
            if (bp) e = ck->sobjs[i].load(ck->sobjs[i].obj, bp, ld->undo_counts, P);
            if (bp != bufs) accel_host_free(acc, (void *)bp);
        }
        accel_host_free(acc, all);
        if (e != ACCEL_OK && first == ACCEL_OK) {
            first = e;
            accel__fmt(back, sizeof back, "%s: %s", ck->sobjs[i].name, accel_last_error(acc));
        }
    }
    for (i = ld->applied - 1; i >= 0; --i) {
        e = ck->objs[i].load(ck->objs[i].obj, ld->undo[i], ld->undo_n[i]);
        if (e != ACCEL_OK && first == ACCEL_OK) {
            first = e;
            accel__fmt(back, sizeof back, "%s: %s", ck->objs[i].name, accel_last_error(acc));
        }
    }
    if (first == ACCEL_OK) return;
    if (!strncmp(c, "[rank ", 6) && strstr(c, "] ")) c = strstr(c, "] ") + 2;
    ACCEL__FAIL(acc, r, "%.500s; putting the previous state back failed too (%.400s)", c, back);
}

/* Copies the tensors from the verified mappings. */
static accel_result accel__ckpt_load_apply_tensors(accel_ckpt *ck, accel__ckpt_load *ld) {
    accel__st_stage stage;
    accel_result r = ACCEL_OK;
    int i, k;
    accel__st_stage_begin(&stage, ld->acc);
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
    return r;
}

/* load_state's step 2 on this process for ld->dir: marker and sizes; read (small files) or map (safetensors) what is
   applied; verify every checksum on those bytes (files not used here: from disk); then parse and check everything
   against the registration. *damaged: the failure is the checkpoint's own (no or a bad marker, a missing or
   truncated file, a checksum mismatch), which load_state(NULL) falls back from; any other failure (the registration,
   I/O, memory) is not. */
static accel_result accel__ckpt_load_check(accel_ckpt *ck, accel__ckpt_load *ld, int *damaged) {
    accel *acc = ck->acc;
    accel_result r = accel__ckpt_check_complete(acc, ld->dir, 0, 0, &ld->marker);
    *damaged = r == ACCEL_ERR_FORMAT;
    if (r == ACCEL_OK) {
        size_t nf = (size_t)stbds_arrlen(ld->marker.files);
        ld->mf = (accel_st_file **)accel__st_zalloc(acc, (size_t)stbds_arrlen(ck->models), sizeof *ld->mf);
        ld->of = (accel_st_file **)accel__st_zalloc(acc, (size_t)stbds_arrlen(ck->optims), sizeof *ld->of);
        ld->blobs = (const char **)accel__st_zalloc(acc, (size_t)stbds_arrlen(ck->objs), sizeof *ld->blobs);
        ld->blob_n = (size_t *)accel__st_zalloc(acc, (size_t)stbds_arrlen(ck->objs), sizeof *ld->blob_n);
        ld->read = (char **)accel__st_zalloc(acc, nf, sizeof *ld->read);
        ld->mem = (const unsigned char **)accel__st_zalloc(acc, nf, sizeof *ld->mem);
        ld->mem_n = (size_t *)accel__st_zalloc(acc, nf, sizeof *ld->mem_n);
        if (!ld->mf || !ld->of || !ld->blobs || !ld->blob_n || !ld->read || !ld->mem || !ld->mem_n)
            r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "load_state");
    }
    if (r == ACCEL_OK) r = accel__ckpt_load_groups_map(ld, "model", (int)stbds_arrlen(ck->models), ld->mf);
    if (r == ACCEL_OK) r = accel__ckpt_load_groups_map(ld, "optimizer", (int)stbds_arrlen(ck->optims), ld->of);
    if (r == ACCEL_OK) r = accel__ckpt_load_objects(ck, ld);
    if (r == ACCEL_OK) r = accel__ckpt_load_read_state_files(ck, ld);
    if (r == ACCEL_OK) {
        r = accel__ckpt_verify_files(acc, ld->dir, &ld->marker, ld->mem, ld->mem_n);
        *damaged = r == ACCEL_ERR_FORMAT;
    }
    if (r == ACCEL_OK)
        r = accel__ckpt_load_groups_check(ld, "model", ck->models, (int)stbds_arrlen(ck->models), ld->mf, 0);
    if (r == ACCEL_OK)
        r = accel__ckpt_load_groups_check(ld, "optimizer", ck->optims, (int)stbds_arrlen(ck->optims), ld->of, 1);
    if (r == ACCEL_OK) r = accel__ckpt_load_accelerator_json(ld);
    if (r == ACCEL_OK) r = accel__ckpt_load_training_state(ld);
    if (r == ACCEL_OK) r = accel__ckpt_load_sharded(ck, ld);
    return r;
}

/* load_state(NULL)'s choice (FALLBACK): after the candidate ld->dir failed verification on some process, whether that
   was damage anywhere (agreed), and then either the error (desc.no_fallback) or a WARN and the candidate before it.
   Returns ACCEL_OK with ld reset to the next candidate, or the result to return (the agreed error, NOT_FOUND when
   none is left). */
static accel_result accel__ckpt_load_fallback(accel_ckpt *ck, accel__ckpt_load *ld, accel_result r, int damaged,
                                              const char *cdir, const accel__ckpt_ent *cands, int *ci,
                                              long *skipped_num, int *none_left) {
    accel *acc = ck->acc;
    char why[ACCEL_ERROR_CAPACITY];
    int64_t any = damaged;
    accel_result r2 = accel_host_allreduce_i64(acc, &any, 1, ACCEL_HOST_MAX);
    if (r2 != ACCEL_OK) return r2;
    if (!any) return r; /* the registration, I/O, memory: not the checkpoint's damage */
    accel__fmt(why, sizeof why, "%s", accel_last_error(acc));
    if (ck->d.no_fallback)
        return ACCEL__FAIL(acc, r, "load_state: the newest checkpoint %.400s failed verification and "
                           "desc.no_fallback is set: %.600s", ld->dir, why);
    if (acc->is_main_process)
        accel_log(acc, ACCEL_LOG_WARN, "load_state: skipping %s (%s); loading the newest complete checkpoint before it",
                  ld->dir, why);
    if (cands[*ci].num > *skipped_num) *skipped_num = cands[*ci].num;
    accel__ckpt_load_free(ck, ld);
    memset(ld, 0, sizeof *ld);
    ld->acc = acc;
    if (--*ci < 0) {
        *none_left = 1;
        return ACCEL__FAIL(acc, ACCEL_ERR_NOT_FOUND, "no complete checkpoint under %.400s (damaged ones skipped)",
                           cdir);
    }
    accel__fmt(ld->dir, sizeof ld->dir, "%s/%s", cdir, cands[*ci].name);
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_ckpt_load_state(accel_ckpt *ck, const char *input_dir) {
    accel *acc;
    accel__ckpt_load ld;
    accel__ckpt_ent *cands = NULL;
    char cdir[2200];
    accel_result r = ACCEL_OK;
    int none_yet = 0, ci = -1, damaged = 0;
    long skipped_num = -1;
    if (!ck) return ACCEL__FAIL(NULL, ACCEL_ERR_INVALID_ARGUMENT, "load_state: ck is NULL");
    acc = ck->acc;
    if ((r = accel__ckpt_collect(ck)) != ACCEL_OK) return r; /* an async save in flight first */
    memset(&ld, 0, sizeof ld);
    ld.acc = acc;
    accel__fmt(cdir, sizeof cdir, "%s/checkpoints", ck->project_dir);
    /* 1. which checkpoint: the given one, or the newest checkpoint_<N> (FALLBACK: older ones when it is damaged) */
    if (input_dir) {
        if (strlen(input_dir) >= 2000)
            r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "load_state: input_dir is too long");
        else accel__fmt(ld.dir, sizeof ld.dir, "%s", input_dir);
    } else {
        r = accel__ckpt_list(acc, cdir, 1, &cands);
        if (r == ACCEL_OK) ci = (int)stbds_arrlen(cands) - 1;
        if (r == ACCEL_OK && ci < 0) {
            none_yet = 1;
            r = ACCEL__FAIL(acc, ACCEL_ERR_NOT_FOUND, "no complete checkpoint under %.400s", cdir);
        } else if (r == ACCEL_OK) {
            accel__fmt(ld.dir, sizeof ld.dir, "%s/%s", cdir, cands[ci].name);
        }
    }
    /* 2. check the candidate on every process (accel__ckpt_load_check); agree; fall back while it is damaged */
    for (;;) {
        if (r == ACCEL_OK) r = accel__ckpt_load_check(ck, &ld, &damaged);
        r = accel__agree(acc, r, "load_state (verify)");
        if (r == ACCEL_OK || ci < 0 || none_yet) break;
        r = accel__ckpt_load_fallback(ck, &ld, r, damaged, cdir, cands, &ci, &skipped_num, &none_yet);
        if (r != ACCEL_OK) break;
        damaged = 0;
    }
    stbds_arrfree(cands);
    /* 2b. load pre-hooks (every process), on the verified checkpoint, before anything is applied */
    if (r == ACCEL_OK && stbds_arrlen(ck->load_hooks)) {
        r = accel__ckpt_run_hooks(ck, ck->load_hooks, ld.dir, "load_state", "load");
        r = accel__agree(acc, r, "load_state (pre-hooks)");
    }
    /* 3. apply (every process got this far): the objects as a transaction (all of them on every process, or none
       anywhere), then the tensors, then — once every process applied those — the Accelerator's training state,
       which was checked in step 2 and cannot fail */
    if (r == ACCEL_OK) {
        r = accel__ckpt_load_backup(ck, &ld);
        r = accel__agree(acc, r, "load_state (keep)");
    }
    if (r == ACCEL_OK) {
        r = accel__ckpt_load_apply_objects(ck, &ld);
        r = accel__agree(acc, r, "load_state (apply objects)");
        if (r != ACCEL_OK) accel__ckpt_load_undo(ck, &ld, r);
    }
    if (r == ACCEL_OK) {
        r = accel__ckpt_load_apply_tensors(ck, &ld);
        r = accel__agree(acc, r, "load_state (apply)");
    }
    if (r == ACCEL_OK) r = accel__ckpt_load_training_state_apply(&ld);
    if (r == ACCEL_OK) ck->iteration = (int)ld.iteration + 1; /* policy 5: the next save does not collide */
    if (skipped_num >= ck->iteration && skipped_num < INT_MAX) ck->iteration = (int)skipped_num + 1; /* nor skipped */
    accel__ckpt_load_free(ck, &ld);
    if (none_yet && r == ACCEL_ERR_NOT_FOUND && acc->is_main_process)
        accel_log(acc, ACCEL_LOG_INFO, "no checkpoint under %s: starting fresh", cdir);
    return r;
}


#endif /* ACCEL_IMPLEMENTATION && !ACCEL__CKPT_IMPL_DONE */

/* accel is released under the MIT licence. Copyright (c) 2026 the accel authors. */
