/* accel_ckpt.h — checkpoints for accel: safetensors files, sharded save_model, save_state/load_state with
   crash-safe writes, automatic naming and rotation. Depends only on accel.h; the ACCEL_IMPLEMENTATION TU needs
   stb_ds.h on the include path, as the core does (Debian: libstb-dev, -I/usr/include/stb).

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
       accel_ckpt_save_model(&acc, "out", params, n_params, "10GB");  // model.safetensors or shards + index
       accel_ckpt_destroy(ck);

       accel_ckpt_file *f;                                  // read any safetensors file (mmap; all checks first)
       accel_ckpt_file_open(NULL, "model.safetensors", &f);
       accel_ckpt_file_load(f, &params[0]);                 // dtype/shape checked; host or device destination
       accel_ckpt_file_destroy(f);

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
               return accel_set_error(NULL, ACCEL_ERR_FORMAT, "my_state: %zu bytes, expected %zu", size, sizeof(my_state));
           memcpy(obj, buf, size);
           return ACCEL_OK;
       }
       accel_ckpt_register(ck, "my", my_save, my_load, &state);   // → my.bin
     A failing callback records why with accel_set_error (on its object's Accelerator, or NULL as here); load_state
     and save_state keep that message and put the file in front of it: "load_state: my.bin: my_state: 12 bytes, …".

   FILES OF A CHECKPOINT DIRECTORY (Accelerate's names, safetensors/JSON/bytes instead of pickles)
     model.safetensors, model_1.safetensors, …   registered models (metadata {"format":"pt"})        main process
     optimizer.safetensors, optimizer_1…          registered optimizer tensors (Accelerate: optimizer.bin)   main
     <name>.bin                                   the bytes of accel_ckpt_register(ck, "<name>", …): e.g.
                                                  scaler.bin (Accelerate: scaler.pt), sampler.bin, scheduler.bin main
     custom_checkpoint_<i>.bin                    accel_ckpt_register(ck, NULL, …) objects, i in registration order
                                                  (Accelerate: custom_checkpoint_<i>.pkl)                       main
     <name>_<rank>.bin                            every process: accel_ckpt_register_sharded objects (e.g. a ZeRO
                                                  shard of the optimizer state, accel_coll_zero_state_save)
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
     automatic save. accel_ckpt_latest() returns the newest complete checkpoint. Single files (save_model,
     save_safetensors) are written to "<path>.tmp.<pid>", fsync'd and renamed (the core's atomic write).

   OPTIONS
     Sizes ("10GB", "5MiB", "1000") go through accel_ckpt_parse_size (docs/semantics.md policy 6).
     Memory: every allocation goes through the Accelerator's allocators (accel.h "MEMORY"): host memory through
     desc.host_allocator, the staging buffers of device tensors through desc.pinned_allocator. A function called
     with acc NULL uses the defaults; an accel_ckpt_file remembers the acc it was opened with.

   ERRORS
     Every reader checks everything before it copies a byte (all-or-nothing). load_state verifies the whole
     checkpoint (marker, sizes, checksums, every tensor's name/dtype/shape, object files, counts, the training
     states) on every process and agrees on the verdict before applying anything. It then copies the tensors and
     calls the registered load callbacks, and only when every process succeeded restores the Accelerator's training
     state (accel_state_load, or accel_state_load_resharded on another number of processes; validated in the
     checks, so it cannot fail). Only a registered load callback that fails after the tensors were copied can leave a
     partial state (its error is returned; the Accelerator's counters and RNG are then untouched). Callbacks
     therefore run before the counters and the RNG are restored (Accelerate restores the RNG before custom objects).
     accel_ckpt_load_state(ck, NULL) returns ACCEL_ERR_NOT_FOUND only when there is no complete checkpoint yet: an
     expected outcome, logged once at info level by the main process ("no checkpoint under <dir>: starting
     fresh"); a checkpoint that exists but lacks something registered is ACCEL_ERR_INVALID_ARGUMENT or
     ACCEL_ERR_FORMAT. A failed callback's own message stays in accel_last_error (see above). An explicit
     save_state directory that exists is replaced (atomically swapped) only when it is empty or an accel checkpoint.
     A completed save whose rotation (total_limit) fails still succeeds; the failure is logged at warn level.

   THREADS AND STREAMS
     One thread at a time per accel / accel_ckpt / accel_ckpt_file. save_state hashes host data in a helper pthread
     while the calling thread writes, and verification hashes two files at a time (link with -pthread where libc
     needs it); the helper threads neither allocate nor record errors. Device buffers (detected with
     cudaPointerGetAttributes in CUDA builds) are staged through two pinned 8 MiB buffers on acc->stream (NULL acc:
     the default stream); a load to a device preads each staging chunk with up to 4 threads (as many as CPUs: one
     thread copies from the page cache at 5-8 GB/s, far below a pinned host-to-device copy), started with the
     buffers and joined before the call returns; the call returns when the data is on disk / in the destination.
     save_state, load_state and save_model are collectives: every process calls them. Everything else is local.

   DIFFERENCES FROM ACCELERATE (deliberate; docs/semantics.md §5, §6 and "Policies")
     - load_state restores the iteration (policy 5): the next automatic save goes to checkpoint_<saved + 1>.
     - load_state restores every counter of the Accelerator (accel_state_load), not only `step`.
     - total_limit rotation happens after the new checkpoint is complete and only counts complete checkpoints, so a
       crash never leaves fewer than the newest complete one (Accelerate deletes first).
     - One size parser (policy 6); sharding is huggingface_hub's greedy algorithm (§6, policy 7). Tensors that share
       storage are not detected (accel_tensor has no storage identity): every entry is saved.
     - save_model also removes a stale model.safetensors.index.json (single-file save) or a stale
       model.safetensors (sharded save) so a loader never mixes generations.
     - Global state (scaler, sampler, scheduler, custom objects) is written once by the main process (Accelerate
       writes scaler.pt on every process).
     - Resuming on a different number of processes works: every rank reads every saved random_states_<i>.bin and
       accel_state_load_resharded (accel.h) restores the counters from rank 0's state and this rank's RNG from its
       own file, or re-derives it when the saving run had fewer processes. Accelerate requires the same number.
     - JSON is read strictly: duplicate keys, invalid UTF-8, lone surrogates and trailing garbage are errors.
     - safetensors files are written as the reference writer writes them: tensors in its Dtype enum order
       (descending: U64 I64 F64 F32 U32 I32 BF16 F16 U16 I16 F8_E4M3 F8_E5M2 I8 U8 BOOL), then by name; the header
       padded with spaces so the data section, and every tensor, is aligned (padding between tensors would be a hole
       that the reference reader rejects). A tensor may be named "" (only "__metadata__" is reserved). Metadata keys
       and values are read whole, U+0000 included (accel_ckpt_file_metadata gives their lengths); the writer takes C
       strings, so it cannot write a NUL.

   BIG MODELS (docs/semantics.md §9: Accelerate's big-model inference utilities, in the checkpoint module because
   dispatch is a loader; it uses the core alone, like the rest of this header)
       accel_ckpt_model *m;                                 // the module tree: built in code or from JSON
       accel_ckpt_model_open(&acc, "model.json", &m);       // (`accel device-map --structure` reads the same form)
       accel_ckpt_memory mm[8]; int nmm, n;
       accel_ckpt_parse_max_memory(&acc, "0=10GiB,cpu=30GiB", mm, 8, &nmm);
       const char *no_split[] = {"GPT2Block"};
       accel_ckpt_map_desc md = {0};
       md.max_memory = mm; md.n_max_memory = nmm; md.no_split_module_classes = no_split; md.n_no_split = 1;
       accel_ckpt_placement map[256];
       accel_ckpt_infer_device_map(m, &md, map, 256, &n);  // = infer_auto_device_map(model, max_memory, ...)
       accel_ckpt_dispatch_desc dd = {0};
       dd.checkpoint = "ckpt_dir";                           // model.safetensors or shards + index, or an offload folder
       dd.device_map = map; dd.n_device_map = n;
       dd.dtype = ACCEL_BF16;                                // floating tensors converted on load (0: as the model)
       accel_ckpt_dispatch *x;
       accel_ckpt_dispatch_create(m, &dd, &x);               // GPU / cpu tensors loaded, "disk" ones left mapped
       accel_ckpt_fetch_desc fd = {0};
       fd.layers = layer_names; fd.n_layers = L; fd.device = 0;
       accel_ckpt_fetch *f;
       accel_ckpt_fetch_create(x, &fd, &f);                  // two buffers: layer i+1 fetched while layer i runs
       for (i = 0; i < L; ++i) {
           const accel_tensor *w; int nw;
           accel_ckpt_fetch_begin(f, i, &w, &nw);            // layer i's tensors on device 0 (ordered on fd.stream)
           run_layer(i, w, nw);                              // enqueue its work on fd.stream
           accel_ckpt_fetch_end(f, i);                       // its buffer may be refilled once that work is done
       }
       accel_ckpt_fetch_destroy(f); accel_ckpt_dispatch_destroy(x); accel_ckpt_model_destroy(m);
     Sizes and maps are Accelerate's algorithms step by step (compared with Accelerate 1.15 on random module trees by
     tests/unit/ckpt/check_device_map.py), quirks included: GPU 0 may receive nothing, the reserve for the largest
     layer is taken on the main devices, clean_device_map collapses prefixes. Dispatch validates everything (every
     tensor of the model found once in the checkpoint with its shape, every key of the map a module or tensor of the
     model, every tensor under a device) before it allocates, then loads: GPU tensors through pinned staging on
     streams[d] (or acc->stream / the legacy default stream), CPU tensors into host (desc.pin_cpu: pinned) buffers,
     "disk" tensors stay in the read-only mapping of the checkpoint (offload_folder: copied there in Accelerate's
     format). Tied parameters share one storage. Fetches convert disk tensors to the dispatch dtype on the way.
     accel_ckpt_offload_save / accel_ckpt_file_open_offload write and read Accelerate's offload folder (index.json
     + <name>.dat, byte-identical to offload_state_dict's). accel_ckpt_find_executable_batch_size retries a step
     with int(0.9 * size) (Accelerate >= 1.x's default; older releases halved) while it returns
     ACCEL_ERR_OUT_OF_MEMORY, freeing what the attempt allocated through accel_ckpt_attempt_*_alloc.
     Threads: one thread at a time per model / dispatch / fetch; a fetch fills its host buffers in a helper pthread
     (which neither allocates nor records errors); on a GPU it copies on its own stream, and the layer's stream waits
     for the copy with an event (the host never waits for the GPU). All of these calls are local (no collective).
     Differences from Accelerate (deliberate, in the policies' style):
     - Python's set order in clean_device_map: Accelerate's order of collapsed entries changes from run to run;
       accel's is the order of first appearance (entries clean_device_map keeps are in Accelerate's order).
     - fallback_allocation with a fractional limit (a model with bool tensors: sizes in eighths of a byte):
       Accelerate raises AttributeError from convert_file_size_to_int(float); accel compares the numbers.
     - Dispatch refuses what Accelerate only warns about: a device_map key that names nothing of the model, a
       checkpoint tensor the model lacks (desc.ignore_unexpected skips those, as Accelerate does).
     - Out of memory is ACCEL_ERR_OUT_OF_MEMORY from the step, not a matched exception message.
     - accel queries no device: the devices are max_memory's keys (none: everything goes to "disk"), where Accelerate
       fills a missing max_memory with get_max_memory() of the devices it sees.
*/
#ifndef ACCEL_CKPT_H_INCLUDED
#define ACCEL_CKPT_H_INCLUDED
#include "accel.h"
#ifdef __cplusplus
extern "C" {
#endif

/* -------------------------------------------------------------------------------------------------------- sizes */
/* docs/semantics.md policy 6: a plain unsigned integer (bytes), or a decimal number, optional spaces and a unit
   KB/MB/GB/TB (10^3..10^12) or KiB/MiB/GiB/TiB (2^10..2^40), case-insensitive, truncated toward zero.
   acc may be NULL (the message then goes to accel_last_error(NULL)). */
ACCEL_API accel_result accel_ckpt_parse_size(accel *acc, const char *s, uint64_t *out);

/* -------------------------------------------------------------------------------------------------- safetensors */
/* Writes `path` atomically (temporary name, fsync, rename, directory fsync). metadata: nmeta (key, value) pairs
   stored as __metadata__ (NULL/0 for none). Tensors may live on the host or (CUDA builds) the device. */
ACCEL_API accel_result accel_ckpt_save_safetensors(accel *acc, const char *path, const accel_tensor *tensors, int n,
                                                   const char *const *metadata, int nmeta);

typedef struct accel_ckpt_file accel_ckpt_file;
typedef struct accel_ckpt_entry {
    const char *name;
    accel_dtype dtype;
    int ndim;
    int64_t shape[ACCEL_MAX_DIMS];
    uint64_t begin, end;      /* data_offsets, relative to the data section */
    const void *data;         /* zero-copy view (mmap) of the bytes */
} accel_ckpt_entry;

/* Opens and fully validates a file (every check of the reference reader, in its order, before any byte is
   trusted). Errors: ACCEL_ERR_IO, ACCEL_ERR_NOT_FOUND, ACCEL_ERR_FORMAT (the message names the problem),
   ACCEL_ERR_UNSUPPORTED (a valid dtype or rank accel does not handle). *out is NULL on failure. The file object
   remembers acc (NULL: the default allocator, errors in accel_last_error(NULL)). */
ACCEL_API accel_result accel_ckpt_file_open(accel *acc, const char *path, accel_ckpt_file **out);
/* Same checks on bytes in memory (not copied: they must outlive the file object). */
ACCEL_API accel_result accel_ckpt_file_open_memory(accel *acc, const void *bytes, size_t size, accel_ckpt_file **out);
ACCEL_API void accel_ckpt_file_destroy(accel_ckpt_file *f); /* NULL ok */
ACCEL_API int accel_ckpt_file_count(const accel_ckpt_file *f);                 /* tensors (entries sorted by offset) */
ACCEL_API const accel_ckpt_entry *accel_ckpt_file_entry(const accel_ckpt_file *f, int i);
ACCEL_API int accel_ckpt_file_find(const accel_ckpt_file *f, const char *name); /* index or -1 */
ACCEL_API int accel_ckpt_file_metadata_count(const accel_ckpt_file *f);
/* Entry i of __metadata__ (in the file's order). Keys and values are NUL-terminated, and may contain U+0000 as the
   reference writer allows: *key_len / *value_len (each may be NULL) give the whole length. */
ACCEL_API accel_result accel_ckpt_file_metadata(const accel_ckpt_file *f, int i, const char **key, size_t *key_len,
                                                const char **value, size_t *value_len);
/* The value of the key that equals `key` as a whole (a stored "k\0x" is not "k"); NULL if absent. */
ACCEL_API const char *accel_ckpt_file_metadata_get(const accel_ckpt_file *f, const char *key);
/* Copies the tensor named dst->name into dst->ptr (host or device) after checking dtype and shape; a mismatch is
   ACCEL_ERR_INVALID_ARGUMENT naming the tensor, expected vs found. */
ACCEL_API accel_result accel_ckpt_file_load(accel_ckpt_file *f, const accel_tensor *dst);
/* All or nothing: every destination is checked before the first byte is copied. */
ACCEL_API accel_result accel_ckpt_file_load_all(accel_ckpt_file *f, const accel_tensor *dst, int n);

/* ----------------------------------------------------------------------------------------------- sharded models */
/* The huggingface_hub plan (docs/semantics.md §6, policy 7): shard_of[i] = shard of tensor i (0-based), shard_bytes[s],
   *n_shards. shard_of must hold n ints, shard_bytes n uint64 (n_shards <= n). Shards are numbered in the order
   they are appended, so an oversize tensor can precede earlier small ones. */
ACCEL_API accel_result accel_ckpt_plan_shards(accel *acc, const uint64_t *sizes, int n, uint64_t max_shard_size,
                                              int *shard_of, uint64_t *shard_bytes, int *n_shards);
/* "model.safetensors" (n_shards == 1) or "model-00001-of-00003.safetensors" (shard is 0-based). */
ACCEL_API void accel_ckpt_shard_name(int shard, int n_shards, char *out, size_t cap);
/* Accelerate's save_model: a single model.safetensors when it fits, else shards + model.safetensors.index.json
   (json.dumps(indent=2, sort_keys=True) layout). max_shard_size NULL → "10GB". Stale shards of the prefix are
   removed. An empty list writes nothing. Collective: the main process writes (each local main process with
   save_on_each_node), every process returns the same verdict. */
ACCEL_API accel_result accel_ckpt_save_model(accel *acc, const char *dir, const accel_tensor *tensors, int n,
                                             const char *max_shard_size);
ACCEL_API accel_result accel_ckpt_save_model_bytes(accel *acc, const char *dir, const accel_tensor *tensors, int n,
                                                   uint64_t max_shard_size, int save_on_each_node);
/* Loads dir/model.safetensors.index.json (sharded) or dir/model.safetensors; every tensor must be present with
   the same dtype/shape and the files must hold no other tensors; all checked before anything is copied. Local. */
ACCEL_API accel_result accel_ckpt_load_model(accel *acc, const char *dir, const accel_tensor *tensors, int n);

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
ACCEL_API accel_result accel_ckpt_register_optimizer(accel_ckpt *ck, const accel_tensor *tensors, int n);
/* Any object's state as bytes, through the core's contract (accel_state_save_fn / accel_state_load_fn, accel.h).
   name: file stem ([A-Za-z0-9_.-], e.g. "scheduler", "scaler", "sampler") → <name>.bin; NULL → the next
   custom_checkpoint_<i>.bin (Accelerate's register_for_checkpointing). */
ACCEL_API accel_result accel_ckpt_register(accel_ckpt *ck, const char *name, accel_state_save_fn save,
                                           accel_state_load_fn load, void *obj);
/* Loads state that every rank saved separately: bufs[i] / sizes[i] are saved rank i's bytes, count = the number of
   processes of the saving run (it may differ from this run's: re-partition here). Validate everything, then apply. */
typedef accel_result (*accel_ckpt_load_all_fn)(void *obj, const void *const *bufs, const size_t *sizes, int count);
/* Per-rank state (e.g. ZeRO optimizer shards, accel_coll_zero_state_save / _load_all): EVERY process writes
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

/* XXH64 (the checksum of the marker), exposed for tools and tests. */
ACCEL_API uint64_t accel_ckpt_xxh64(const void *data, size_t n, uint64_t seed);

/* ------------------------------------------------------------------------------------------------- big models */
/* docs/semantics.md §9: Accelerate's compute_module_sizes, get_max_layer_size, get_balanced_memory and
   infer_auto_device_map (with clean_device_map), then dispatch of a checkpoint onto the map, a just-in-time fetch of
   offloaded layers, Accelerate's offload folder, and find_executable_batch_size. See "BIG MODELS" in the manual. */

/* Devices of a max_memory list and a device map: a GPU ordinal (>= 0) or one of these. */
#define ACCEL_CKPT_CPU (-1)
#define ACCEL_CKPT_DISK (-2)
#define ACCEL_CKPT_MPS (-3)
/* "0", "cpu", "disk", "mps" (Accelerate's keys); "?" for anything else. */
ACCEL_API void accel_ckpt_device_name(int device, char *out, size_t cap);
/* A dtype by PyTorch's name ("torch.float16", "float16", "half", "bfloat16", "long", "bool", …) or safetensors' ("F16");
   ACCEL_DTYPE_INVALID when unknown. */
ACCEL_API accel_dtype accel_ckpt_dtype_from_torch(const char *name);

/* The model: modules in order with class names, children, parameters and buffers (named as named_parameters names
   them), and tied parameters. Built in code or read from JSON (the CLI's and the tests' form):
     {"modules": [[name, class, [child names], [param names], [buffer names]], …],
      "tensors": [[full name, [shape], "torch.float32" | "F32" …], …],
      "tied": [[name, alias, …], …]}                                               ("tied" is optional)
   Module "" is the root; children, parameters and buffers are listed in registration order, by local name (or by
   full name); a tied group's first name is in "tensors", its aliases share its storage and are listed only as
   parameters of their modules (named_parameters deduplicates them). */
typedef struct accel_ckpt_model accel_ckpt_model;
typedef struct accel_ckpt_model_desc {
    const char *class_name;                  /* the root module's class; NULL → "Module" */
} accel_ckpt_model_desc;
ACCEL_API accel_result accel_ckpt_model_create(accel *acc, const accel_ckpt_model_desc *desc, accel_ckpt_model **out);
ACCEL_API accel_result accel_ckpt_model_open(accel *acc, const char *json_path, accel_ckpt_model **out);
ACCEL_API accel_result accel_ckpt_model_open_memory(accel *acc, const void *json, size_t n, accel_ckpt_model **out);
ACCEL_API void accel_ckpt_model_destroy(accel_ckpt_model *m); /* NULL ok */
/* Appends module `name` ("a.b": a child "b" of module "a", which must exist) of class `class_name`. */
ACCEL_API accel_result accel_ckpt_model_add_module(accel_ckpt_model *m, const char *name, const char *class_name);
/* Appends a parameter (is_buffer 0) or buffer of the module its name's prefix names: t's name, dtype and shape
   (t->ptr is not used). */
ACCEL_API accel_result accel_ckpt_model_add_tensor(accel_ckpt_model *m, const accel_tensor *t, int is_buffer);
/* Appends parameter `alias` (of the module its prefix names) sharing the storage of parameter `param`. */
ACCEL_API accel_result accel_ckpt_model_tie(accel_ckpt_model *m, const char *param, const char *alias);
/* Tensors in state_dict order (modules depth-first, each module's parameters then buffers), aliases included:
   *t (ptr NULL), *is_buffer, *tied_to (the parameter whose storage an alias shares, else NULL); any may be NULL. */
ACCEL_API int accel_ckpt_model_tensor_count(const accel_ckpt_model *m);
ACCEL_API accel_result accel_ckpt_model_tensor(const accel_ckpt_model *m, int i, accel_tensor *t, int *is_buffer,
                                               const char **tied_to);

typedef struct accel_ckpt_memory { int device; double bytes; } accel_ckpt_memory; /* one max_memory entry */
typedef struct accel_ckpt_placement { const char *name; int device; } accel_ckpt_placement; /* one device-map entry */
typedef struct accel_ckpt_size { const char *name; double bytes; } accel_ckpt_size;         /* one module size */
typedef struct accel_ckpt_dtype_override { const char *name; accel_dtype dtype; } accel_ckpt_dtype_override;

/* Options of the sizing and placement functions (Accelerate's keyword arguments; zero = Accelerate's default). */
typedef struct accel_ckpt_map_desc {
    const accel_ckpt_memory *max_memory;     /* balanced memory and device maps need it (accel queries no device) */
    int n_max_memory;
    const char *const *no_split_module_classes;
    int n_no_split;
    accel_dtype dtype;                       /* ACCEL_DTYPE_INVALID: every tensor in its own dtype */
    const accel_ckpt_dtype_override *special_dtypes;
    int n_special_dtypes;
    int low_zero;                            /* get_balanced_memory(low_zero=True) */
    int fallback_allocation;                 /* infer_auto_device_map(fallback_allocation=True) */
    int no_clean_result;                     /* infer_auto_device_map(clean_result=False) */
} accel_ckpt_map_desc;

/* Parses Accelerate's max_memory keys and policy-6 sizes: "0=10GiB,1=10GiB,cpu=30GiB,disk=1TB" (keys: GPU ordinals,
   cpu, disk, mps). out: the entries in Accelerate's order (GPUs ascending, then mps, cpu, disk); cap too small →
   *n = needed, ACCEL_OK, nothing written. */
ACCEL_API accel_result accel_ckpt_parse_max_memory(accel *acc, const char *s, accel_ckpt_memory *out, int cap, int *n);
/* compute_module_sizes: every key of Accelerate's dict ("" = the total, then each module and tensor) in its insertion
   order, bytes as multiples of 1/8 (a bool counts 1/8 byte). cap too small → *n = needed, ACCEL_OK. Names point into
   the model. */
ACCEL_API accel_result accel_ckpt_module_sizes(accel_ckpt_model *m, const accel_ckpt_map_desc *d, accel_ckpt_size *out,
                                               int cap, int *n);
/* get_max_layer_size over the root's parameters, children and buffers (calculate_maximum_sizes): the size and the
   names that reach it (names may be NULL; cap too small → *n = needed). */
ACCEL_API accel_result accel_ckpt_max_layer_size(accel_ckpt_model *m, const accel_ckpt_map_desc *d, double *bytes,
                                                 const char **names, int cap, int *n);
/* get_balanced_memory: d->max_memory rebalanced over the GPUs (same keys, Accelerate's order). */
ACCEL_API accel_result accel_ckpt_balanced_memory(accel_ckpt_model *m, const accel_ckpt_map_desc *d,
                                                  accel_ckpt_memory *out, int cap, int *n);
/* infer_auto_device_map (+ clean_device_map unless d->no_clean_result): the map in Accelerate's order. cap too small →
   *n = needed, ACCEL_OK. Names point into the model. */
ACCEL_API accel_result accel_ckpt_infer_device_map(accel_ckpt_model *m, const accel_ckpt_map_desc *d,
                                                   accel_ckpt_placement *out, int cap, int *n);

/* Dispatch: a (sharded) safetensors checkpoint loaded onto the devices of a device map. */
typedef struct accel_ckpt_dispatch_desc {
    const char *checkpoint;                  /* a .safetensors file, a model.safetensors.index.json, a directory with
                                                either, or an offload folder (index.json + .dat files) */
    const accel_ckpt_placement *device_map;  /* any map whose keys are module or tensor names ("" = everything) */
    int n_device_map;
    accel_dtype dtype;                       /* 0: each tensor in the model's dtype; else floating tensors in this one */
    const char *offload_folder;              /* NULL: "disk" tensors stay in the checkpoint's mapping; else they are
                                                written there in Accelerate's offload format and served from it */
    struct CUstream_st *const *streams;      /* streams[d]: loads onto GPU d (NULL or d >= n_streams: acc->stream on
                                                acc->device, else the device's legacy default stream) */
    int n_streams;
    int pin_cpu;                             /* nonzero: CPU tensors in pinned memory (faster fetches to a GPU) */
    int ignore_unexpected;                   /* nonzero: checkpoint tensors the model lacks are skipped, not errors */
} accel_ckpt_dispatch_desc;
typedef struct accel_ckpt_dispatch accel_ckpt_dispatch;
ACCEL_API accel_result accel_ckpt_dispatch_create(accel_ckpt_model *m, const accel_ckpt_dispatch_desc *desc,
                                                  accel_ckpt_dispatch **out);
ACCEL_API void accel_ckpt_dispatch_destroy(accel_ckpt_dispatch *x); /* NULL ok */
/* Where tensor `name` (an alias: its parameter's storage) lives: *t (name, ptr, dtype, shape) and *device. A "disk"
   tensor's ptr points into a read-only mapping, in its stored dtype (fetches convert it). Either may be NULL. */
ACCEL_API accel_result accel_ckpt_dispatch_tensor(const accel_ckpt_dispatch *x, const char *name, accel_tensor *t,
                                                  int *device);

/* Just-in-time fetch for layer-by-layer execution (Accelerate's AlignDevicesHook): layer i's tensors on the execution
   device while layer i+1's are fetched into the other of two buffers. */
typedef struct accel_ckpt_fetch_desc {
    const char *const *layers;               /* execution order: module (or tensor) names, each fetched as a unit */
    int n_layers;
    int device;                              /* the execution device: a GPU ordinal or ACCEL_CKPT_CPU */
    struct CUstream_st *stream;              /* the stream the layers run on (GPU; NULL: acc->stream) */
    int no_prefetch;                         /* nonzero: fetch a layer only when it begins */
} accel_ckpt_fetch_desc;
typedef struct accel_ckpt_fetch accel_ckpt_fetch;
ACCEL_API accel_result accel_ckpt_fetch_create(accel_ckpt_dispatch *x, const accel_ckpt_fetch_desc *desc,
                                               accel_ckpt_fetch **out);
ACCEL_API void accel_ckpt_fetch_destroy(accel_ckpt_fetch *f); /* NULL ok; waits for a prefetch in flight */
/* Layer i's tensors (state_dict order, aliases included) on the execution device, valid until fetch_end(i); starts
   fetching layer i+1. GPU: the copies are ordered before work enqueued on desc.stream afterwards (no host wait). */
ACCEL_API accel_result accel_ckpt_fetch_begin(accel_ckpt_fetch *f, int i, const accel_tensor **tensors, int *n);
/* Layer i's work is enqueued (GPU) or done (CPU): its buffer may be refilled. */
ACCEL_API accel_result accel_ckpt_fetch_end(accel_ckpt_fetch *f, int i);

/* Accelerate's offload folder (offload_state_dict): one raw <name>.dat per tensor and index.json ({name: {"dtype":
   numpy's name or "bfloat16", "shape": […]}}, merged into an existing index as json.dump(indent=2) writes it).
   Tensors may live on the host or (CUDA builds) the device. Read one with accel_ckpt_file_open_offload. */
ACCEL_API accel_result accel_ckpt_offload_save(accel *acc, const char *folder, const accel_tensor *tensors, int n);
/* An offload folder (Accelerate's or accel's) as an accel_ckpt_file: every entry mapped from its .dat file (entries
   that name a safetensors_file are mapped from it, in its stored dtype). */
ACCEL_API accel_result accel_ckpt_file_open_offload(accel *acc, const char *folder, accel_ckpt_file **out);

/* find_executable_batch_size: step(user, batch_size, attempt) runs with starting_batch_size, and again with a smaller
   one while it returns ACCEL_ERR_OUT_OF_MEMORY; memory it took through the attempt's allocators is freed when it
   returns. ACCEL_ERR_OUT_OF_MEMORY with "No executable batch size found, reached zero." when the size reaches 0;
   any other error ends the search. *batch_size (may be NULL) receives the size that succeeded. Local. */
typedef struct accel_ckpt_attempt accel_ckpt_attempt;
typedef accel_result (*accel_ckpt_step_fn)(void *user, int64_t batch_size, accel_ckpt_attempt *attempt);
typedef struct accel_ckpt_batch_desc {
    int64_t starting_batch_size;             /* 0 → 128 */
    int64_t (*reduce)(int64_t batch_size, void *user); /* NULL → int(batch_size * 0.9), Accelerate's default */
    void *reduce_user;
} accel_ckpt_batch_desc;
ACCEL_API accel_result accel_ckpt_find_executable_batch_size(accel *acc, const accel_ckpt_batch_desc *desc,
                                                             accel_ckpt_step_fn step, void *user, int64_t *batch_size);
ACCEL_API void *accel_ckpt_attempt_host_alloc(accel_ckpt_attempt *a, size_t size);   /* NULL: ACCEL_ERR_OUT_OF_MEMORY */
ACCEL_API void *accel_ckpt_attempt_device_alloc(accel_ckpt_attempt *a, size_t size);
ACCEL_API void *accel_ckpt_attempt_pinned_alloc(accel_ckpt_attempt *a, size_t size);

#ifdef __cplusplus
}
#endif
#endif /* ACCEL_CKPT_H_INCLUDED */

/* ========================================================================================== implementation */
#if defined(ACCEL_IMPLEMENTATION) && !defined(ACCEL__CKPT_IMPL_DONE)
#define ACCEL__CKPT_IMPL_DONE
/* CONTENTS (the core's private services — allocation, errors, byte order, UTF-8, string builder, files, agreement —
   come from accel.h's implementation section, which precedes this one in the same TU)
     1. size parser (policy 6)
     2. XXH64
     3. JSON reader (strict)
     4. device staging (two pinned buffers)
     5. safetensors writer
     6. safetensors reader (accel_ckpt_file)
     7. sharded models: plan, save_model, the index, load_model
     8. the checkpointer: create/destroy, registration, callbacks' root causes
     9. completion marker and verification
    10. listing and rotation
    11. save_state
    12. load_state
    13. the model description (builder, JSON form)
    14. module sizes, max layer, balanced memory (docs/semantics.md §9)
    15. infer_auto_device_map, clean_device_map
    16. dtype conversion on load
    17. dispatch
    18. just-in-time fetch of offloaded layers (AlignDevicesHook)
    19. the offload folder (index.json + .dat)
    20. find_executable_batch_size */

#include <stdarg.h>
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

/* stb_ds.h: the core's implementation section included it (and emitted its implementation through the hooks). */

/* Allocation shorthands over acc's host allocator (NULL with the allocator's error recorded on acc). */
static char *accel__ckpt_strndup(accel *acc, const char *s, size_t n) { /* s[0..n) + NUL */
    char *p = (char *)accel_host_alloc(acc, n + 1);
    if (p) { memcpy(p, s, n); p[n] = 0; }
    return p;
}
static void *accel__ckpt_zalloc(accel *acc, size_t n, size_t size) { /* n zeroed elements (at least one) */
    void *p;
    if (n == 0) n = 1;
    if (size && n > (size_t)-1 / size) {
        ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "%zu elements of %zu bytes do not fit in memory", n, size);
        return NULL;
    }
    p = accel_host_alloc(acc, n * size);
    if (p) memset(p, 0, n * size);
    return p;
}

/* ----------------------------------------------------------------------------------------------- 1. size parser */
/* Locale-independent on purpose (isspace/tolower follow setlocale). */
static int accel__ckpt_isspace(int c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
static int accel__ckpt_lower(int c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

ACCEL__DEF accel_result accel_ckpt_parse_size(accel *acc, const char *s, uint64_t *out) {
    static const char *units[] = {"kb", "mb", "gb", "tb", "kib", "mib", "gib", "tib"};
    static const uint64_t mult[] = {1000ull, 1000000ull, 1000000000ull, 1000000000000ull,
                                    1ull << 10, 1ull << 20, 1ull << 30, 1ull << 40};
    const char *b, *e, *p, *ip, *fp = NULL, *ue;
    size_t ni = 0, nf = 0, nu, k;
    uint64_t unit = 0, ival = 0, fval = 0;
    int u;
    if (!s || !out) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "parse_size: NULL argument");
    b = s;
    e = s + strlen(s);
    while (b < e && accel__ckpt_isspace((unsigned char)*b)) ++b;
    while (e > b && accel__ckpt_isspace((unsigned char)e[-1])) --e;
    p = b;
    ip = p;
    while (p < e && *p >= '0' && *p <= '9') ++p, ++ni;
    if (p < e && *p == '.') {
        fp = ++p;
        while (p < e && *p >= '0' && *p <= '9') ++p, ++nf;
    }
    if (ni == 0 && nf == 0) goto bad;
    for (k = 0; k < ni; ++k) {
        unsigned d = (unsigned)(ip[k] - '0');
        if (ival > (UINT64_MAX - d) / 10) goto big;
        ival = ival * 10 + d;
    }
    if (p == e) {
        if (fp) goto bad; /* a decimal needs a unit */
        *out = ival;
        return ACCEL_OK;
    }
    while (p < e && *p == ' ') ++p;
    nu = (size_t)(e - p);
    ue = p;
    for (u = 0; u < 8; ++u) {
        if (strlen(units[u]) != nu) continue;
        for (k = 0; k < nu; ++k)
            if (accel__ckpt_lower((unsigned char)ue[k]) != units[u][k]) break;
        if (k == nu) { unit = mult[u]; break; }
    }
    if (!unit) goto bad;
    if (ival != 0 && ival > UINT64_MAX / unit) goto big;
    /* exact floor(unit * 0.f1f2...fk): multiply the decimal digit string by unit, drop the last k digits */
    if (nf > 0) {
        unsigned char *dig;
        size_t len, i;
        uint64_t carry = 0;
        if (nf > 4096) goto bad;
        len = nf + 24;
        dig = (unsigned char *)accel_host_alloc(acc, len);
        if (!dig) return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "parse_size");
        memset(dig, 0, len);
        for (i = 0; i < nf; ++i) dig[i] = (unsigned char)(fp[nf - 1 - i] - '0'); /* little-endian base 10 */
        for (i = 0; i < len; ++i) {
            uint64_t v = (uint64_t)dig[i] * unit + carry;
            dig[i] = (unsigned char)(v % 10);
            carry = v / 10;
        }
        for (i = len; i > nf; --i) fval = fval * 10 + dig[i - 1];
        accel_host_free(acc, dig);
    }
    if (ival * unit > UINT64_MAX - fval) goto big;
    *out = ival * unit + fval;
    return ACCEL_OK;
bad:
    return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                       "invalid size \"%.200s\": expected an unsigned integer (bytes) or a number with a unit "
                       "KB/MB/GB/TB or KiB/MiB/GiB/TiB (e.g. \"10GB\", \"5MiB\", \"1.5GB\")",
                       s);
big:
    return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "size \"%.200s\" does not fit in 64 bits", s);
}

/* ----------------------------------------------------------------------------------------------------- 2. XXH64 */
#define ACCEL__CKPT_XP1 11400714785074694791ull
#define ACCEL__CKPT_XP2 14029467366897019727ull
#define ACCEL__CKPT_XP3 1609587929392839161ull
#define ACCEL__CKPT_XP4 9650029242287828579ull
#define ACCEL__CKPT_XP5 2870177450012600261ull

typedef struct accel__ckpt_xxh64 {
    uint64_t v[4], total;
    unsigned char buf[32];
    size_t nbuf;
    uint64_t seed;
} accel__ckpt_xxh64;

/* XXH64 reads its input as little-endian words: the core's accel__get_u64/u32. */
static ACCEL_INLINE uint64_t accel__ckpt_rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
static ACCEL_INLINE uint64_t accel__ckpt_xround(uint64_t acc, uint64_t in) {
    acc += in * ACCEL__CKPT_XP2;
    acc = accel__ckpt_rotl64(acc, 31);
    return acc * ACCEL__CKPT_XP1;
}
static ACCEL_INLINE uint64_t accel__ckpt_xmerge(uint64_t acc, uint64_t val) {
    acc ^= accel__ckpt_xround(0, val);
    return acc * ACCEL__CKPT_XP1 + ACCEL__CKPT_XP4;
}
static void accel__ckpt_xxh64_init(accel__ckpt_xxh64 *h, uint64_t seed) {
    memset(h, 0, sizeof *h);
    h->seed = seed;
    h->v[0] = seed + ACCEL__CKPT_XP1 + ACCEL__CKPT_XP2;
    h->v[1] = seed + ACCEL__CKPT_XP2;
    h->v[2] = seed;
    h->v[3] = seed - ACCEL__CKPT_XP1;
}
static void accel__ckpt_xxh64_update(accel__ckpt_xxh64 *h, const void *data, size_t n) {
    const unsigned char *p = (const unsigned char *)data, *end = p + n;
    h->total += n;
    if (h->nbuf + n < 32) {
        if (n) memcpy(h->buf + h->nbuf, p, n);
        h->nbuf += n;
        return;
    }
    if (h->nbuf) {
        size_t take = 32 - h->nbuf;
        memcpy(h->buf + h->nbuf, p, take);
        p += take;
        h->v[0] = accel__ckpt_xround(h->v[0], accel__get_u64(h->buf));
        h->v[1] = accel__ckpt_xround(h->v[1], accel__get_u64(h->buf + 8));
        h->v[2] = accel__ckpt_xround(h->v[2], accel__get_u64(h->buf + 16));
        h->v[3] = accel__ckpt_xround(h->v[3], accel__get_u64(h->buf + 24));
        h->nbuf = 0;
    }
    {
        uint64_t v0 = h->v[0], v1 = h->v[1], v2 = h->v[2], v3 = h->v[3];
        while ((size_t)(end - p) >= 32) {
            v0 = accel__ckpt_xround(v0, accel__get_u64(p));
            v1 = accel__ckpt_xround(v1, accel__get_u64(p + 8));
            v2 = accel__ckpt_xround(v2, accel__get_u64(p + 16));
            v3 = accel__ckpt_xround(v3, accel__get_u64(p + 24));
            p += 32;
        }
        h->v[0] = v0; h->v[1] = v1; h->v[2] = v2; h->v[3] = v3;
    }
    if (p < end) {
        memcpy(h->buf, p, (size_t)(end - p));
        h->nbuf = (size_t)(end - p);
    }
}
static uint64_t accel__ckpt_xxh64_final(const accel__ckpt_xxh64 *h) {
    uint64_t r;
    const unsigned char *p = h->buf, *end = h->buf + h->nbuf;
    if (h->total >= 32) {
        r = accel__ckpt_rotl64(h->v[0], 1) + accel__ckpt_rotl64(h->v[1], 7) + accel__ckpt_rotl64(h->v[2], 12) + accel__ckpt_rotl64(h->v[3], 18);
        r = accel__ckpt_xmerge(r, h->v[0]);
        r = accel__ckpt_xmerge(r, h->v[1]);
        r = accel__ckpt_xmerge(r, h->v[2]);
        r = accel__ckpt_xmerge(r, h->v[3]);
    } else {
        r = h->seed + ACCEL__CKPT_XP5;
    }
    r += h->total;
    while (end - p >= 8) {
        r ^= accel__ckpt_xround(0, accel__get_u64(p));
        r = accel__ckpt_rotl64(r, 27) * ACCEL__CKPT_XP1 + ACCEL__CKPT_XP4;
        p += 8;
    }
    if (end - p >= 4) {
        r ^= (uint64_t)accel__get_u32(p) * ACCEL__CKPT_XP1;
        r = accel__ckpt_rotl64(r, 23) * ACCEL__CKPT_XP2 + ACCEL__CKPT_XP3;
        p += 4;
    }
    while (p < end) {
        r ^= (uint64_t)(*p) * ACCEL__CKPT_XP5;
        r = accel__ckpt_rotl64(r, 11) * ACCEL__CKPT_XP1;
        ++p;
    }
    r ^= r >> 33;
    r *= ACCEL__CKPT_XP2;
    r ^= r >> 29;
    r *= ACCEL__CKPT_XP3;
    r ^= r >> 32;
    return r;
}
ACCEL__DEF uint64_t accel_ckpt_xxh64(const void *data, size_t n, uint64_t seed) {
    accel__ckpt_xxh64 h;
    accel__ckpt_xxh64_init(&h, seed);
    accel__ckpt_xxh64_update(&h, data, n);
    return accel__ckpt_xxh64_final(&h);
}

/* ----------------------------------------------------------------------------------------------- 3. JSON reader */
/* (JSON is written with the core's accel__sb; this is the one number format it needs.) */
static void accel__ckpt_sb_u64(accel__sb *b, uint64_t v) { accel__sb_printf(b, "%llu", (unsigned long long)v); }

enum { ACCEL__CKPT_J_NULL = 1, ACCEL__CKPT_J_FALSE, ACCEL__CKPT_J_TRUE, ACCEL__CKPT_J_NUM, ACCEL__CKPT_J_STR, ACCEL__CKPT_J_ARR, ACCEL__CKPT_J_OBJ };
#define ACCEL__CKPT_JSON_MAX_DEPTH 64

typedef struct accel__ckpt_jnode {
    int type;
    int first, last, next, count; /* children (arrays, objects), next sibling */
    size_t key, keylen;           /* member key (offset into the arena) */
    size_t str, len;              /* decoded string, or number text */
} accel__ckpt_jnode;

typedef struct accel__ckpt_json {
    accel *acc;          /* allocator of the temporary key array */
    accel__ckpt_jnode *nodes; /* stb_ds array */
    char *arena;         /* stb_ds array of NUL-terminated strings */
    const unsigned char *beg, *p, *end;
    int depth;
    int oom;             /* the failure was an allocation, not the document: 1 recorded on acc, 2 an array's growth */
    char err[256];
} accel__ckpt_json;

static void accel__ckpt_json_free(accel__ckpt_json *j) {
    stbds_arrfree(j->nodes);
    stbds_arrfree(j->arena);
    j->nodes = NULL;
    j->arena = NULL;
}
static int accel__ckpt_json_error(accel__ckpt_json *j, const char *what) {
    if (!j->err[0]) snprintf(j->err, sizeof j->err, "%s at byte %lu", what, (unsigned long)(j->p - j->beg));
    return -1;
}
static void accel__ckpt_json_ws(accel__ckpt_json *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) ++j->p;
}
static int accel__ckpt_json_new(accel__ckpt_json *j, int type) {
    accel__ckpt_jnode nd;
    memset(&nd, 0, sizeof nd);
    nd.type = type;
    nd.first = nd.last = nd.next = -1;
    if (ACCEL__ARR_PUT(j->nodes, nd) != 0) {
        j->oom = 2;
        return accel__ckpt_json_error(j, "out of memory");
    }
    return (int)stbds_arrlen(j->nodes) - 1;
}
/* One byte into the arena. A failed growth sets j->oom (the arena is unchanged); the string parsers check it once at
   the end, so the bytes in between go nowhere. */
static void accel__ckpt_json_putc(accel__ckpt_json *j, char c) {
    if (!j->oom && ACCEL__ARR_PUT(j->arena, c) != 0) j->oom = 2;
}
static void accel__ckpt_json_put_cp(accel__ckpt_json *j, uint32_t cp) {
    if (cp < 0x80) accel__ckpt_json_putc(j, (char)cp);
    else if (cp < 0x800) {
        accel__ckpt_json_putc(j, (char)(0xC0 | (cp >> 6)));
        accel__ckpt_json_putc(j, (char)(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        accel__ckpt_json_putc(j, (char)(0xE0 | (cp >> 12)));
        accel__ckpt_json_putc(j, (char)(0x80 | ((cp >> 6) & 0x3F)));
        accel__ckpt_json_putc(j, (char)(0x80 | (cp & 0x3F)));
    } else {
        accel__ckpt_json_putc(j, (char)(0xF0 | (cp >> 18)));
        accel__ckpt_json_putc(j, (char)(0x80 | ((cp >> 12) & 0x3F)));
        accel__ckpt_json_putc(j, (char)(0x80 | ((cp >> 6) & 0x3F)));
        accel__ckpt_json_putc(j, (char)(0x80 | (cp & 0x3F)));
    }
}
static int accel__ckpt_json_hex4(accel__ckpt_json *j, uint32_t *out) {
    uint32_t v = 0;
    int i;
    if (j->end - j->p < 4) return accel__ckpt_json_error(j, "truncated \\u escape");
    for (i = 0; i < 4; ++i) {
        unsigned c = j->p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= c - '0';
        else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
        else return accel__ckpt_json_error(j, "bad hex digit in \\u escape");
    }
    j->p += 4;
    *out = v;
    return 0;
}
/* Parses a string at j->p (the opening quote); appends the decoded bytes + NUL to the arena. */
static int accel__ckpt_json_string(accel__ckpt_json *j, size_t *off, size_t *len) {
    size_t start = (size_t)stbds_arrlen(j->arena);
    ++j->p;
    for (;;) {
        unsigned c;
        if (j->p >= j->end) return accel__ckpt_json_error(j, "unterminated string");
        c = *j->p;
        if (c == '"') { ++j->p; break; }
        if (c < 0x20) return accel__ckpt_json_error(j, "control character in string");
        if (c == '\\') {
            uint32_t cp;
            ++j->p;
            if (j->p >= j->end) return accel__ckpt_json_error(j, "unterminated escape");
            c = *j->p++;
            switch (c) {
            case '"': accel__ckpt_json_putc(j, '"'); break;
            case '\\': accel__ckpt_json_putc(j, '\\'); break;
            case '/': accel__ckpt_json_putc(j, '/'); break;
            case 'b': accel__ckpt_json_putc(j, '\b'); break;
            case 'f': accel__ckpt_json_putc(j, '\f'); break;
            case 'n': accel__ckpt_json_putc(j, '\n'); break;
            case 'r': accel__ckpt_json_putc(j, '\r'); break;
            case 't': accel__ckpt_json_putc(j, '\t'); break;
            case 'u':
                if (accel__ckpt_json_hex4(j, &cp)) return -1;
                if (cp >= 0xDC00 && cp <= 0xDFFF) return accel__ckpt_json_error(j, "lone low surrogate in \\u escape");
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    uint32_t lo;
                    if (j->end - j->p < 2 || j->p[0] != '\\' || j->p[1] != 'u')
                        return accel__ckpt_json_error(j, "high surrogate not followed by a low surrogate");
                    j->p += 2;
                    if (accel__ckpt_json_hex4(j, &lo)) return -1;
                    if (lo < 0xDC00 || lo > 0xDFFF) return accel__ckpt_json_error(j, "high surrogate not followed by a low surrogate");
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                }
                accel__ckpt_json_put_cp(j, cp);
                break;
            default: --j->p; return accel__ckpt_json_error(j, "invalid escape");
            }
            continue;
        }
        if (c >= 0x80) {
            uint32_t cp;
            size_t l = accel__utf8_decode(j->p, j->end, &cp), k;
            if (!l) return accel__ckpt_json_error(j, "invalid UTF-8 in string");
            for (k = 0; k < l; ++k) accel__ckpt_json_putc(j, (char)j->p[k]);
            j->p += l;
            continue;
        }
        accel__ckpt_json_putc(j, (char)c);
        ++j->p;
    }
    *off = start;
    *len = (size_t)stbds_arrlen(j->arena) - start;
    accel__ckpt_json_putc(j, 0);
    if (j->oom) return accel__ckpt_json_error(j, "out of memory");
    return 0;
}
static int accel__ckpt_json_value(accel__ckpt_json *j);

typedef struct accel__ckpt_jkey { const char *s; size_t n; } accel__ckpt_jkey;
static int accel__ckpt_jkey_cmp(const void *a, const void *b) {
    const accel__ckpt_jkey *x = (const accel__ckpt_jkey *)a, *y = (const accel__ckpt_jkey *)b;
    size_t m = x->n < y->n ? x->n : y->n;
    int c = memcmp(x->s, y->s, m);
    if (c) return c;
    return x->n < y->n ? -1 : x->n > y->n;
}
static void accel__ckpt_json_link(accel__ckpt_json *j, int parent, int child) {
    if (j->nodes[parent].last < 0) j->nodes[parent].first = child;
    else j->nodes[j->nodes[parent].last].next = child;
    j->nodes[parent].last = child;
    j->nodes[parent].count++;
}
static int accel__ckpt_json_object(accel__ckpt_json *j) {
    int obj = accel__ckpt_json_new(j, ACCEL__CKPT_J_OBJ);
    if (obj < 0) return -1;
    ++j->p;
    accel__ckpt_json_ws(j);
    if (j->p < j->end && *j->p == '}') { ++j->p; return obj; }
    for (;;) {
        size_t ko, kl;
        int v;
        accel__ckpt_json_ws(j);
        if (j->p >= j->end || *j->p != '"') return accel__ckpt_json_error(j, "expected a string key");
        if (accel__ckpt_json_string(j, &ko, &kl)) return -1;
        accel__ckpt_json_ws(j);
        if (j->p >= j->end || *j->p != ':') return accel__ckpt_json_error(j, "expected ':'");
        ++j->p;
        v = accel__ckpt_json_value(j);
        if (v < 0) return -1;
        j->nodes[v].key = ko;
        j->nodes[v].keylen = kl;
        accel__ckpt_json_link(j, obj, v);
        accel__ckpt_json_ws(j);
        if (j->p < j->end && *j->p == ',') { ++j->p; continue; }
        if (j->p < j->end && *j->p == '}') { ++j->p; break; }
        return accel__ckpt_json_error(j, "expected ',' or '}'");
    }
    if (j->nodes[obj].count > 1) { /* duplicate keys are an error (safetensors forbids them) */
        int n = j->nodes[obj].count, i = 0, c;
        accel__ckpt_jkey *keys = (accel__ckpt_jkey *)accel_host_alloc(j->acc, sizeof(accel__ckpt_jkey) * (size_t)n);
        if (!keys) {
            j->oom = 1;
            return accel__ckpt_json_error(j, "out of memory");
        }
        for (c = j->nodes[obj].first; c >= 0; c = j->nodes[c].next, ++i) {
            keys[i].s = j->arena + j->nodes[c].key;
            keys[i].n = j->nodes[c].keylen;
        }
        qsort(keys, (size_t)n, sizeof *keys, accel__ckpt_jkey_cmp);
        for (i = 1; i < n; ++i) {
            if (!accel__ckpt_jkey_cmp(&keys[i - 1], &keys[i])) {
                char m[200];
                snprintf(m, sizeof m, "duplicate key \"%.120s\"", keys[i].s);
                accel_host_free(j->acc, keys);
                return accel__ckpt_json_error(j, m);
            }
        }
        accel_host_free(j->acc, keys);
    }
    return obj;
}
static int accel__ckpt_json_array(accel__ckpt_json *j) {
    int arr = accel__ckpt_json_new(j, ACCEL__CKPT_J_ARR);
    if (arr < 0) return -1;
    ++j->p;
    accel__ckpt_json_ws(j);
    if (j->p < j->end && *j->p == ']') { ++j->p; return arr; }
    for (;;) {
        int v = accel__ckpt_json_value(j);
        if (v < 0) return -1;
        accel__ckpt_json_link(j, arr, v);
        accel__ckpt_json_ws(j);
        if (j->p < j->end && *j->p == ',') { ++j->p; continue; }
        if (j->p < j->end && *j->p == ']') { ++j->p; break; }
        return accel__ckpt_json_error(j, "expected ',' or ']'");
    }
    return arr;
}
static int accel__ckpt_json_number(accel__ckpt_json *j) {
    const unsigned char *s = j->p;
    int nd;
    size_t off, k;
    if (j->p < j->end && *j->p == '-') ++j->p;
    if (j->p >= j->end || *j->p < '0' || *j->p > '9') return accel__ckpt_json_error(j, "invalid number");
    if (*j->p == '0') ++j->p;
    else while (j->p < j->end && *j->p >= '0' && *j->p <= '9') ++j->p;
    if (j->p < j->end && *j->p == '.') {
        ++j->p;
        if (j->p >= j->end || *j->p < '0' || *j->p > '9') return accel__ckpt_json_error(j, "invalid number");
        while (j->p < j->end && *j->p >= '0' && *j->p <= '9') ++j->p;
    }
    if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
        ++j->p;
        if (j->p < j->end && (*j->p == '+' || *j->p == '-')) ++j->p;
        if (j->p >= j->end || *j->p < '0' || *j->p > '9') return accel__ckpt_json_error(j, "invalid number");
        while (j->p < j->end && *j->p >= '0' && *j->p <= '9') ++j->p;
    }
    nd = accel__ckpt_json_new(j, ACCEL__CKPT_J_NUM);
    off = (size_t)stbds_arrlen(j->arena);
    for (k = 0; k < (size_t)(j->p - s); ++k) accel__ckpt_json_putc(j, (char)s[k]);
    accel__ckpt_json_putc(j, 0);
    if (nd < 0 || j->oom) return accel__ckpt_json_error(j, "out of memory");
    j->nodes[nd].str = off;
    j->nodes[nd].len = (size_t)(j->p - s);
    return nd;
}
static int accel__ckpt_json_lit(accel__ckpt_json *j, const char *lit, int type) {
    size_t n = strlen(lit);
    if ((size_t)(j->end - j->p) < n || memcmp(j->p, lit, n)) return accel__ckpt_json_error(j, "invalid literal");
    j->p += n;
    return accel__ckpt_json_new(j, type);
}
static int accel__ckpt_json_value(accel__ckpt_json *j) {
    int r;
    accel__ckpt_json_ws(j);
    if (j->p >= j->end) return accel__ckpt_json_error(j, "unexpected end of input");
    switch (*j->p) {
    case '{':
    case '[':
        if (++j->depth > ACCEL__CKPT_JSON_MAX_DEPTH) return accel__ckpt_json_error(j, "nesting deeper than 64");
        r = *j->p == '{' ? accel__ckpt_json_object(j) : accel__ckpt_json_array(j);
        --j->depth;
        return r;
    case '"': {
        size_t o, l;
        int nd;
        if (accel__ckpt_json_string(j, &o, &l)) return -1;
        nd = accel__ckpt_json_new(j, ACCEL__CKPT_J_STR);
        if (nd < 0) return -1;
        j->nodes[nd].str = o;
        j->nodes[nd].len = l;
        return nd;
    }
    case 't': return accel__ckpt_json_lit(j, "true", ACCEL__CKPT_J_TRUE);
    case 'f': return accel__ckpt_json_lit(j, "false", ACCEL__CKPT_J_FALSE);
    case 'n': return accel__ckpt_json_lit(j, "null", ACCEL__CKPT_J_NULL);
    default:
        if (*j->p == '-' || (*j->p >= '0' && *j->p <= '9')) return accel__ckpt_json_number(j);
        return accel__ckpt_json_error(j, "unexpected character");
    }
}
/* Parses a whole document: one value, whitespace around it, nothing else. Returns the root or -1 (j->err; report
   it with accel__ckpt_json_failed). The caller frees j (also on failure). */
static int accel__ckpt_json_parse(accel__ckpt_json *j, accel *acc, const void *data, size_t n) {
    int root;
    memset(j, 0, sizeof *j);
    j->acc = acc;
    j->beg = j->p = (const unsigned char *)data;
    j->end = j->beg + n;
    root = accel__ckpt_json_value(j);
    if (root < 0) return -1;
    accel__ckpt_json_ws(j);
    if (j->p != j->end) return accel__ckpt_json_error(j, "trailing data after the JSON value");
    return root;
}
/* The error of a failed parse of `what`: ACCEL_ERR_OUT_OF_MEMORY (the allocator's message kept) or ACCEL_ERR_FORMAT. */
static accel_result accel__ckpt_json_failed(accel *acc, const accel__ckpt_json *j, const char *what) {
    if (j->oom == 1) return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "parsing %.400s", what);
    if (j->oom) return ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "parsing %.400s: out of memory", what);
    return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.400s is not valid JSON: %s", what, j->err);
}
static const char *accel__ckpt_jstr(const accel__ckpt_json *j, int nd) { return j->arena + j->nodes[nd].str; }
static const char *accel__ckpt_jkeyp(const accel__ckpt_json *j, int nd) { return j->arena + j->nodes[nd].key; }
static int accel__ckpt_jget(const accel__ckpt_json *j, int obj, const char *key) {
    int c;
    size_t kl = strlen(key);
    if (obj < 0 || j->nodes[obj].type != ACCEL__CKPT_J_OBJ) return -1;
    for (c = j->nodes[obj].first; c >= 0; c = j->nodes[c].next)
        if (j->nodes[c].keylen == kl && !memcmp(j->arena + j->nodes[c].key, key, kl)) return c;
    return -1;
}
/* A JSON integer 0..UINT64_MAX written without sign, fraction or exponent. */
static int accel__ckpt_ju64(const accel__ckpt_json *j, int nd, uint64_t *out) {
    const char *s;
    uint64_t v = 0;
    if (nd < 0 || j->nodes[nd].type != ACCEL__CKPT_J_NUM) return -1;
    s = accel__ckpt_jstr(j, nd);
    if (!*s || *s == '-') return -1;
    for (; *s; ++s) {
        unsigned d;
        if (*s < '0' || *s > '9') return -1;
        d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10) return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

/* -------------------------------------------------------------------------------------------- 4. device staging */
static int accel__ckpt_is_device_ptr(const void *p) {
#ifdef ACCEL_WITH_CUDA
    struct cudaPointerAttributes a;
    cudaError_t e;
    if (!p) return 0;
    e = cudaPointerGetAttributes(&a, p);
    if (e != cudaSuccess) { (void)cudaGetLastError(); return 0; }
    return a.type == cudaMemoryTypeDevice;
#else
    (void)p;
    return 0;
#endif
}

#define ACCEL__CKPT_STAGE_BYTES ((size_t)8 << 20)
#define ACCEL__CKPT_IO_CHUNK ((size_t)1 << 20)

/* Readers of one staging chunk: the caller and up to 3 helper threads, each pread-ing a slice. One thread copies
   from the page cache at 5-8 GB/s, below what pinned host-to-device copies take (~50 GB/s): a 1 GiB tensor loaded
   at 0.75x safetensors.torch (whose pageable copy is done by the driver) until the reads were split. */
#define ACCEL__CKPT_READERS 4
#define ACCEL__CKPT_SPLIT_MIN ((size_t)1 << 20) /* below this a chunk is read by the caller alone */

struct accel__ckpt_stage;
typedef struct accel__ckpt_reader { struct accel__ckpt_stage *s; int k; } accel__ckpt_reader;

/* Created empty (nothing allocated until a device tensor needs it); the buffers come from acc's pinned allocator. */
typedef struct accel__ckpt_stage {
    accel *acc;
    void *buf[2]; /* pinned host buffers */
    void *ev[2];  /* cudaEvent_t */
    int ready;
    /* the helper readers (started with the buffers, stopped in stage_end) */
    int nhelp, sync_ok, quit, busy, err;
    unsigned long gen;
    pthread_t th[ACCEL__CKPT_READERS - 1];
    accel__ckpt_reader arg[ACCEL__CKPT_READERS - 1];
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    int fd;
    unsigned char *dst;
    uint64_t off;
    size_t len;
} accel__ckpt_stage;

/* Only device loads use the readers (through pinned buffers); plain POSIX, so a CPU test drives them too. */
/* Slice k of P of [0, len): 4 KiB-aligned cuts, the last slice takes the rest. */
static ACCEL__UNUSED void accel__ckpt_slice(size_t len, int k, int P, size_t *lo, size_t *hi) {
    *lo = k == 0 ? 0 : (size_t)((uint64_t)len * (uint64_t)k / (uint64_t)P) & ~(size_t)4095;
    *hi = k == P - 1 ? len : (size_t)((uint64_t)len * (uint64_t)(k + 1) / (uint64_t)P) & ~(size_t)4095;
}
static ACCEL__UNUSED void *accel__ckpt_reader_main(void *p) {
    accel__ckpt_reader *a = (accel__ckpt_reader *)p;
    accel__ckpt_stage *s = a->s;
    unsigned long seen = 0;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        int fd, rc;
        unsigned char *dst;
        uint64_t off;
        size_t lo, hi;
        while (!s->quit && s->gen == seen) pthread_cond_wait(&s->go, &s->mu);
        if (s->quit) break;
        seen = s->gen;
        fd = s->fd; dst = s->dst; off = s->off;
        accel__ckpt_slice(s->len, a->k, s->nhelp + 1, &lo, &hi);
        pthread_mutex_unlock(&s->mu);
        rc = hi > lo ? accel__pread_all(fd, dst + lo, hi - lo, off + lo) : 0;
        pthread_mutex_lock(&s->mu);
        if (rc != 0) s->err = errno ? errno : EIO;
        if (--s->busy == 0) pthread_cond_signal(&s->done);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}
/* pread of len bytes at off into dst, split among the readers; 0 or -1 with errno set. */
static ACCEL__UNUSED int accel__ckpt_stage_pread(accel__ckpt_stage *s, int fd, void *dst, size_t len, uint64_t off) {
    size_t lo, hi;
    int rc, err;
    if (s->nhelp == 0 || len < ACCEL__CKPT_SPLIT_MIN) return accel__pread_all(fd, dst, len, off);
    pthread_mutex_lock(&s->mu);
    s->fd = fd; s->dst = (unsigned char *)dst; s->off = off; s->len = len;
    s->err = 0; s->busy = s->nhelp; ++s->gen;
    pthread_cond_broadcast(&s->go);
    pthread_mutex_unlock(&s->mu);
    accel__ckpt_slice(len, 0, s->nhelp + 1, &lo, &hi);
    rc = accel__pread_all(fd, dst, hi - lo, off); /* slice 0 starts at 0 */
    err = rc != 0 ? (errno ? errno : EIO) : 0;
    pthread_mutex_lock(&s->mu);
    while (s->busy > 0) pthread_cond_wait(&s->done, &s->mu); /* never leave a helper writing into the buffer */
    if (!err) err = s->err;
    pthread_mutex_unlock(&s->mu);
    if (err) { errno = err; return -1; }
    return 0;
}
static void accel__ckpt_readers_stop(accel__ckpt_stage *s) {
    int k;
    if (!s->sync_ok) return;
    pthread_mutex_lock(&s->mu);
    s->quit = 1;
    pthread_cond_broadcast(&s->go);
    pthread_mutex_unlock(&s->mu);
    for (k = 0; k < s->nhelp; ++k) pthread_join(s->th[k], NULL);
    pthread_cond_destroy(&s->go);
    pthread_cond_destroy(&s->done);
    pthread_mutex_destroy(&s->mu);
    s->nhelp = 0;
    s->sync_ok = 0;
}
/* readers - 1 helper threads (fewer if a thread cannot be started: the caller then reads more itself). */
static ACCEL__UNUSED void accel__ckpt_readers_start(accel__ckpt_stage *s, int readers) {
    int want = (readers > ACCEL__CKPT_READERS ? ACCEL__CKPT_READERS : readers) - 1, k;
    if (want <= 0 || s->sync_ok) return;
    if (pthread_mutex_init(&s->mu, NULL) != 0) return;
    if (pthread_cond_init(&s->go, NULL) != 0) { pthread_mutex_destroy(&s->mu); return; }
    if (pthread_cond_init(&s->done, NULL) != 0) { pthread_cond_destroy(&s->go); pthread_mutex_destroy(&s->mu); return; }
    s->sync_ok = 1;
    for (k = 0; k < want; ++k) {
        s->arg[k].s = s;
        s->arg[k].k = k + 1;
        if (pthread_create(&s->th[k], NULL, accel__ckpt_reader_main, &s->arg[k]) != 0) break;
        s->nhelp = k + 1;
    }
}

static void accel__ckpt_stage_begin(accel__ckpt_stage *s, accel *acc) {
    memset(s, 0, sizeof *s);
    s->acc = acc;
}
static void accel__ckpt_stage_end(accel__ckpt_stage *s) {
    int i;
    accel__ckpt_readers_stop(s);
    for (i = 0; i < 2; ++i) {
        accel_pinned_free(s->acc, s->buf[i]);
#ifdef ACCEL_WITH_CUDA
        if (s->ev[i]) cudaEventDestroy((cudaEvent_t)s->ev[i]);
#endif
    }
    accel__ckpt_stage_begin(s, s->acc);
}
#ifdef ACCEL_WITH_CUDA
static accel_result accel__ckpt_stage_init(accel *acc, accel__ckpt_stage *s) {
    int i;
    cudaError_t e;
    if (s->ready) return ACCEL_OK;
    for (i = 0; i < 2; ++i) {
        cudaEvent_t ev;
        s->buf[i] = accel_pinned_alloc(s->acc, ACCEL__CKPT_STAGE_BYTES);
        if (!s->buf[i]) {
            accel__ckpt_stage_end(s);
            return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "staging buffer for device tensors");
        }
        e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
        if (e != cudaSuccess) {
            accel__ckpt_stage_end(s);
            return ACCEL__FAIL(acc, ACCEL_ERR_CUDA, "cudaEventCreate: %s", cudaGetErrorString(e));
        }
        s->ev[i] = (void *)ev;
    }
    { /* as many readers as CPUs, up to ACCEL__CKPT_READERS (none extra on a single CPU) */
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        accel__ckpt_readers_start(s, ncpu < 1 ? 1 : ncpu > ACCEL__CKPT_READERS ? ACCEL__CKPT_READERS : (int)ncpu);
    }
    s->ready = 1;
    return ACCEL_OK;
}
#endif

/* Device → file, double-buffered: the copy of chunk i+1 overlaps the hash + write of chunk i. */
static accel_result accel__ckpt_write_from_device(accel *acc, accel__ckpt_stage *s, int fd, const char *path, const void *src,
                                             uint64_t n, accel__ckpt_xxh64 *h) {
#ifdef ACCEL_WITH_CUDA
    cudaStream_t st = acc ? (cudaStream_t)acc->stream : (cudaStream_t)0;
    uint64_t off = 0, nchunks = (n + ACCEL__CKPT_STAGE_BYTES - 1) / ACCEL__CKPT_STAGE_BYTES, i;
    cudaError_t e;
    accel_result r = accel__ckpt_stage_init(acc, s);
    if (r != ACCEL_OK) return r;
    if (n == 0) return ACCEL_OK;
    e = cudaMemcpyAsync(s->buf[0], src, (size_t)(n < ACCEL__CKPT_STAGE_BYTES ? n : ACCEL__CKPT_STAGE_BYTES), cudaMemcpyDeviceToHost, st);
    if (e == cudaSuccess) e = cudaEventRecord((cudaEvent_t)s->ev[0], st);
    if (e != cudaSuccess) return ACCEL__FAIL(acc, ACCEL_ERR_CUDA, "device-to-host copy for %.300s: %s", path, cudaGetErrorString(e));
    for (i = 0; i < nchunks; ++i) {
        size_t len = (size_t)((n - off) < ACCEL__CKPT_STAGE_BYTES ? (n - off) : ACCEL__CKPT_STAGE_BYTES);
        int b = (int)(i & 1);
        if (i + 1 < nchunks) {
            uint64_t noff = off + len;
            size_t nlen = (size_t)((n - noff) < ACCEL__CKPT_STAGE_BYTES ? (n - noff) : ACCEL__CKPT_STAGE_BYTES);
            e = cudaMemcpyAsync(s->buf[b ^ 1], (const char *)src + noff, nlen, cudaMemcpyDeviceToHost, st);
            if (e == cudaSuccess) e = cudaEventRecord((cudaEvent_t)s->ev[b ^ 1], st);
            if (e != cudaSuccess) return ACCEL__FAIL(acc, ACCEL_ERR_CUDA, "device-to-host copy for %.300s: %s", path, cudaGetErrorString(e));
        }
        e = cudaEventSynchronize((cudaEvent_t)s->ev[b]);
        if (e != cudaSuccess) return ACCEL__FAIL(acc, ACCEL_ERR_CUDA, "device-to-host copy for %.300s: %s", path, cudaGetErrorString(e));
        if (h) accel__ckpt_xxh64_update(h, s->buf[b], len);
        if (accel__write_all(fd, s->buf[b], len) != 0) {
            (void)cudaStreamSynchronize(st);
            return accel__io_fail(acc, "cannot write", path);
        }
        off += len;
    }
    return ACCEL_OK;
#else
    (void)s; (void)fd; (void)src; (void)n; (void)h;
    return ACCEL__FAIL(acc, ACCEL_ERR_UNSUPPORTED, "writing %.300s from a device buffer needs CUDA: compile the ACCEL_IMPLEMENTATION TU with nvcc", path);
#endif
}

/* File (or memory) → device, double-buffered: the read of chunk i+1 overlaps the copy of chunk i. */
static accel_result accel__ckpt_read_to_device(accel *acc, accel__ckpt_stage *s, int fd, const unsigned char *mem, uint64_t off0,
                                          void *dst, uint64_t n, const char *what) {
#ifdef ACCEL_WITH_CUDA
    cudaStream_t st = acc ? (cudaStream_t)acc->stream : (cudaStream_t)0;
    uint64_t off = 0;
    int i = 0, used[2] = {0, 0};
    cudaError_t e;
    accel_result r = accel__ckpt_stage_init(acc, s);
    if (r != ACCEL_OK) return r;
    while (off < n) {
        size_t len = (size_t)((n - off) < ACCEL__CKPT_STAGE_BYTES ? (n - off) : ACCEL__CKPT_STAGE_BYTES);
        int b = i & 1;
        if (used[b]) {
            e = cudaEventSynchronize((cudaEvent_t)s->ev[b]);
            if (e != cudaSuccess) return ACCEL__FAIL(acc, ACCEL_ERR_CUDA, "host-to-device copy of %.300s: %s", what, cudaGetErrorString(e));
        }
        if (fd >= 0) {
            if (accel__ckpt_stage_pread(s, fd, s->buf[b], len, off0 + off) != 0) {
                (void)cudaStreamSynchronize(st);
                return accel__io_fail(acc, "cannot read", what);
            }
        } else {
            memcpy(s->buf[b], mem + off0 + off, len);
        }
        e = cudaMemcpyAsync((char *)dst + off, s->buf[b], len, cudaMemcpyHostToDevice, st);
        if (e == cudaSuccess) e = cudaEventRecord((cudaEvent_t)s->ev[b], st);
        if (e != cudaSuccess) return ACCEL__FAIL(acc, ACCEL_ERR_CUDA, "host-to-device copy of %.300s: %s", what, cudaGetErrorString(e));
        used[b] = 1;
        off += len;
        ++i;
    }
    e = cudaStreamSynchronize(st);
    if (e != cudaSuccess) return ACCEL__FAIL(acc, ACCEL_ERR_CUDA, "host-to-device copy of %.300s: %s", what, cudaGetErrorString(e));
    return ACCEL_OK;
#else
    (void)s; (void)fd; (void)mem; (void)off0; (void)dst; (void)n;
    return ACCEL__FAIL(acc, ACCEL_ERR_UNSUPPORTED, "loading %.300s into a device buffer needs CUDA: compile the ACCEL_IMPLEMENTATION TU with nvcc", what);
#endif
}

/* ---------------------------------------------------------------------------------------- 5. safetensors writer */
static void accel__ckpt_shape_str(char *out, size_t cap, int ndim, const int64_t *shape) {
    size_t o = 0;
    int i;
    o += (size_t)accel__fmt(out + o, cap - o, "[");
    for (i = 0; i < ndim && o < cap; ++i) o += (size_t)accel__fmt(out + o, cap - o, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (o < cap) accel__fmt(out + o, cap - o, "]");
}

/* The reference writer's order (safetensors `prepare`): its Dtype enum order, descending, then the name (bytes).
   The enum: BOOL U8 I8 F8_E5M2 F8_E4M3 I16 U16 F16 BF16 I32 U32 F32 F64 I64 U64 — so F32 precedes U32 and I32,
   BF16 precedes F16, and every tensor stays aligned to its element size. */
static int accel__ckpt_st_rank(accel_dtype d) {
    switch (d) {
    case ACCEL_BOOL: return 0;
    case ACCEL_U8: return 1;
    case ACCEL_I8: return 2;
    case ACCEL_F8_E5M2: return 3;
    case ACCEL_F8_E4M3: return 4;
    case ACCEL_I16: return 5;
    case ACCEL_U16: return 6;
    case ACCEL_F16: return 7;
    case ACCEL_BF16: return 8;
    case ACCEL_I32: return 9;
    case ACCEL_U32: return 10;
    case ACCEL_F32: return 11;
    case ACCEL_F64: return 12;
    case ACCEL_I64: return 13;
    case ACCEL_U64: return 14;
    default: return -1;
    }
}
typedef struct accel__ckpt_st_item { const accel_tensor *t; uint64_t nbytes; int rank; } accel__ckpt_st_item;
static int accel__ckpt_st_item_cmp(const void *a, const void *b) {
    const accel__ckpt_st_item *x = (const accel__ckpt_st_item *)a, *y = (const accel__ckpt_st_item *)b;
    if (x->rank != y->rank) return x->rank > y->rank ? -1 : 1;
    return strcmp(x->t->name, y->t->name);
}

static int accel__ckpt_strp_cmp(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

static accel_result accel__ckpt_check_tensors(accel *acc, const accel_tensor *t, int n, const char *what) {
    int i;
    const char **names;
    accel_result r = ACCEL_OK;
    if (n < 0 || (n > 0 && !t)) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "%.300s: bad tensor list (n=%d)", what, n);
    for (i = 0; i < n; ++i) {
        int64_t nb;
        size_t bad = 0;
        if (!t[i].name) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "%.300s: tensor %d has no name", what, i);
        if (!strcmp(t[i].name, "__metadata__")) /* "" is a valid name, as for the reference writer */
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "%.300s: tensor %d has the reserved name \"__metadata__\"", what, i);
        if (!accel__utf8_valid((const unsigned char *)t[i].name, strlen(t[i].name), &bad))
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "%.300s: tensor %d's name is not valid UTF-8 (byte %lu)", what, i, (unsigned long)bad);
        if (!accel_dtype_name(t[i].dtype))
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "%.300s: tensor '%.200s' has an invalid dtype %d", what, t[i].name, (int)t[i].dtype);
        nb = accel_tensor_nbytes(&t[i]);
        if (nb < 0) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "%.300s: tensor '%.200s' has an invalid shape (ndim %d)", what, t[i].name, t[i].ndim);
        if (nb > 0 && !t[i].ptr) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "%.300s: tensor '%.200s' has no data pointer", what, t[i].name);
    }
    if (n < 2) return ACCEL_OK;
    /* duplicates: the names sorted, neighbours compared */
    names = (const char **)accel_host_alloc(acc, sizeof(const char *) * (size_t)n);
    if (!names) return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "%.300s", what);
    for (i = 0; i < n; ++i) names[i] = t[i].name;
    qsort(names, (size_t)n, sizeof *names, accel__ckpt_strp_cmp);
    for (i = 1; i < n && r == ACCEL_OK; ++i)
        if (!strcmp(names[i - 1], names[i])) r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "%.300s: duplicate tensor name '%.200s'", what, names[i]);
    accel_host_free(acc, names);
    return r;
}

typedef struct accel__ckpt_hash_job { const accel__ckpt_st_item *items; int n; accel__ckpt_xxh64 *h; } accel__ckpt_hash_job;
static void *accel__ckpt_hash_items(void *arg) {
    accel__ckpt_hash_job *j = (accel__ckpt_hash_job *)arg;
    int i;
    for (i = 0; i < j->n; ++i)
        if (j->items[i].nbytes) accel__ckpt_xxh64_update(j->h, j->items[i].t->ptr, (size_t)j->items[i].nbytes);
    return NULL;
}

/* Writes a complete safetensors file to fd; *out_bytes / *out_hash (when not NULL: computed) describe it. */
static accel_result accel__ckpt_st_write_fd(accel *acc, int fd, const char *path, const accel_tensor *t, int n,
                                       const char *const *meta, int nmeta, uint64_t *out_bytes, uint64_t *out_hash) {
    accel__ckpt_st_item *items = NULL;
    accel__sb hb;
    accel__ckpt_xxh64 h;
    accel__ckpt_stage stage;
    uint64_t off = 0, hlen;
    unsigned char len8[8];
    accel_result r = ACCEL_OK;
    int i, first = 1, any_device = 0, threaded = 0;
    pthread_t hasher;
    accel__ckpt_hash_job hj;
    accel__sb_init(&hb, acc);
    accel__ckpt_stage_begin(&stage, acc);
    memset(&hj, 0, sizeof hj);
    if (n > 0) {
        items = (accel__ckpt_st_item *)accel_host_alloc(acc, sizeof(accel__ckpt_st_item) * (size_t)n);
        if (!items) return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "writing %.300s", path);
    }
    for (i = 0; i < n; ++i) {
        items[i].t = &t[i];
        items[i].nbytes = (uint64_t)accel_tensor_nbytes(&t[i]);
        items[i].rank = accel__ckpt_st_rank(t[i].dtype);
    }
    if (n > 1) qsort(items, (size_t)n, sizeof *items, accel__ckpt_st_item_cmp);
    accel__sb_puts(&hb, "{");
    if (nmeta > 0) {
        accel__sb_puts(&hb, "\"__metadata__\":{");
        for (i = 0; i < nmeta; ++i) {
            if (i) accel__sb_puts(&hb, ",");
            accel__sb_json_str(&hb, meta[2 * i], strlen(meta[2 * i]), 1);
            accel__sb_puts(&hb, ":");
            accel__sb_json_str(&hb, meta[2 * i + 1], strlen(meta[2 * i + 1]), 1);
        }
        accel__sb_puts(&hb, "}");
        first = 0;
    }
    for (i = 0; i < n; ++i) {
        const accel_tensor *x = items[i].t;
        int d;
        if (!first) accel__sb_puts(&hb, ",");
        first = 0;
        accel__sb_json_str(&hb, x->name, strlen(x->name), 1);
        accel__sb_puts(&hb, ":{\"dtype\":\"");
        accel__sb_puts(&hb, accel_dtype_name(x->dtype));
        accel__sb_puts(&hb, "\",\"shape\":[");
        for (d = 0; d < x->ndim; ++d) {
            if (d) accel__sb_puts(&hb, ",");
            accel__ckpt_sb_u64(&hb, (uint64_t)x->shape[d]);
        }
        accel__sb_puts(&hb, "],\"data_offsets\":[");
        accel__ckpt_sb_u64(&hb, off);
        accel__sb_puts(&hb, ",");
        off += items[i].nbytes;
        accel__ckpt_sb_u64(&hb, off);
        accel__sb_puts(&hb, "]}");
    }
    accel__sb_puts(&hb, "}");
    while (hb.n % 8) accel__sb_puts(&hb, " "); /* the data section starts 8-byte aligned */
    if (hb.oom) {
        accel_host_free(acc, items);
        accel__sb_free(&hb);
        return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "header of %.300s", path);
    }
    hlen = hb.n;
    accel__put_u64(len8, hlen);
    accel__ckpt_xxh64_init(&h, 0);
    accel__ckpt_xxh64_update(&h, len8, 8);
    accel__ckpt_xxh64_update(&h, hb.p, hb.n);
    if (accel__write_all(fd, len8, 8) != 0 || accel__write_all(fd, hb.p, hb.n) != 0) r = accel__io_fail(acc, "cannot write", path);
    accel__sb_free(&hb);
    /* The checksum of host data is computed by a second thread while this one writes (hashing runs at about memcpy
       speed: done inline it would cost as much as the write itself). Device data is hashed from the staging buffer. */
    for (i = 0; i < n; ++i)
        if (items[i].nbytes && accel__ckpt_is_device_ptr(items[i].t->ptr)) any_device = 1;
    if (out_hash && !any_device && off >= ACCEL__CKPT_IO_CHUNK) {
        hj.items = items;
        hj.n = n;
        hj.h = &h;
        if (pthread_create(&hasher, NULL, accel__ckpt_hash_items, &hj) == 0) threaded = 1;
    }
    for (i = 0; i < n && r == ACCEL_OK; ++i) {
        const unsigned char *src = (const unsigned char *)items[i].t->ptr;
        uint64_t nb = items[i].nbytes, done = 0;
        if (nb == 0) continue;
        if (any_device && accel__ckpt_is_device_ptr(src)) {
            r = accel__ckpt_write_from_device(acc, &stage, fd, path, src, nb, out_hash ? &h : NULL);
            continue;
        }
        if (!out_hash || threaded) {
            if (accel__write_all(fd, src, (size_t)nb) != 0) r = accel__io_fail(acc, "cannot write", path);
            continue;
        }
        while (done < nb) { /* hash a cache-sized chunk, then write it while it is still hot */
            size_t len = (size_t)((nb - done) < ACCEL__CKPT_IO_CHUNK ? (nb - done) : ACCEL__CKPT_IO_CHUNK);
            accel__ckpt_xxh64_update(&h, src + done, len);
            if (accel__write_all(fd, src + done, len) != 0) { r = accel__io_fail(acc, "cannot write", path); break; }
            done += len;
        }
    }
    if (threaded) pthread_join(hasher, NULL);
    accel__ckpt_stage_end(&stage);
    accel_host_free(acc, items);
    if (r != ACCEL_OK) return r;
    if (out_bytes) *out_bytes = 8 + hlen + off;
    if (out_hash) *out_hash = accel__ckpt_xxh64_final(&h);
    return ACCEL_OK;
}

static accel_result accel__ckpt_check_meta(accel *acc, const char *const *meta, int nmeta) {
    int i, k;
    if (nmeta < 0 || (nmeta > 0 && !meta)) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "metadata: bad list (n=%d)", nmeta);
    for (i = 0; i < 2 * nmeta; ++i)
        if (!meta[i] || !accel__utf8_valid((const unsigned char *)meta[i], strlen(meta[i]), NULL))
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "metadata entry %d is NULL or not valid UTF-8", i / 2);
    for (i = 0; i < nmeta; ++i)
        for (k = 0; k < i; ++k)
            if (!strcmp(meta[2 * i], meta[2 * k])) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "duplicate metadata key '%.200s'", meta[2 * i]);
    return ACCEL_OK;
}

/* Writes path: atomic through the core's pair (accel__atomic_open/_commit: "<path>.tmp.<pid>", fsync, rename,
   directory fsync), else directly (inside a checkpoint's hidden directory, which is itself published atomically),
   fsync'd. */
static accel_result accel__ckpt_st_save(accel *acc, const char *path, const accel_tensor *t, int n, const char *const *meta,
                                   int nmeta, int atomic, uint64_t *out_bytes, uint64_t *out_hash) {
    char tmp[4200];
    int fd;
    accel_result r = accel__ckpt_check_tensors(acc, t, n, path);
    if (r == ACCEL_OK) r = accel__ckpt_check_meta(acc, meta, nmeta);
    if (r != ACCEL_OK) return r;
    if (atomic) {
        r = accel__atomic_open(acc, path, tmp, sizeof tmp, &fd);
        if (r != ACCEL_OK) return r;
        r = accel__ckpt_st_write_fd(acc, fd, tmp, t, n, meta, nmeta, out_bytes, out_hash);
        if (r != ACCEL_OK) {
            (void)accel__atomic_commit(acc, fd, tmp, path, 0); /* removes the temporary; r is the cause */
            return r;
        }
        return accel__atomic_commit(acc, fd, tmp, path, 1);
    }
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return accel__io_fail(acc, "cannot create", path);
    r = accel__ckpt_st_write_fd(acc, fd, path, t, n, meta, nmeta, out_bytes, out_hash);
    if (r == ACCEL_OK && fsync(fd) != 0) r = accel__io_fail(acc, "cannot fsync", path);
    if (close(fd) != 0 && r == ACCEL_OK) r = accel__io_fail(acc, "cannot close", path);
    return r;
}

ACCEL__DEF accel_result accel_ckpt_save_safetensors(accel *acc, const char *path, const accel_tensor *tensors, int n,
                                                    const char *const *metadata, int nmeta) {
    if (!path) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "save_safetensors: path is NULL");
    return accel__ckpt_st_save(acc, path, tensors, n, metadata, nmeta, 1, NULL, NULL);
}

/* ---------------------------------------------------------------------------------------- 6. safetensors reader */
struct accel_ckpt_file {
    accel *acc;
    int fd;
    const unsigned char *map;
    size_t size;
    int mapped;
    uint64_t data_start;
    accel_ckpt_entry *entries; /* stb_ds array, sorted by offset */
    char **meta;               /* stb_ds array: key, value, key, value … (strings from acc's allocator, NUL-terminated) */
    size_t *meta_len;          /* stb_ds array: their lengths (a key or value may contain U+0000) */
    char *names;               /* the JSON arena (entry names point into it) */
    const accel_ckpt_entry **by_name; /* the entries sorted by name (acc's allocator), for binary search */
    struct accel__ckpt_piece *pieces; /* stb_ds: an offload folder's mapped .dat files */
    accel_ckpt_file **subs;    /* stb_ds: safetensors files an offload folder's index points into */
    char path[512];
};
typedef struct accel__ckpt_piece { void *p; size_t n; } accel__ckpt_piece;

static int accel__ckpt_entryp_name_cmp(const void *a, const void *b) {
    return strcmp((*(const accel_ckpt_entry *const *)a)->name, (*(const accel_ckpt_entry *const *)b)->name);
}
static int accel__ckpt_entry_cmp(const void *a, const void *b) {
    const accel_ckpt_entry *x = (const accel_ckpt_entry *)a, *y = (const accel_ckpt_entry *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

ACCEL__DEF void accel_ckpt_file_destroy(accel_ckpt_file *f) {
    int i;
    if (!f) return;
    for (i = 0; i < (int)stbds_arrlen(f->meta); ++i) accel_host_free(f->acc, f->meta[i]);
    stbds_arrfree(f->meta);
    stbds_arrfree(f->meta_len);
    stbds_arrfree(f->entries);
    stbds_arrfree(f->names);
    accel_host_free(f->acc, (void *)f->by_name);
    for (i = 0; i < (int)stbds_arrlen(f->pieces); ++i) munmap(f->pieces[i].p, f->pieces[i].n);
    stbds_arrfree(f->pieces);
    for (i = 0; i < (int)stbds_arrlen(f->subs); ++i) accel_ckpt_file_destroy(f->subs[i]);
    stbds_arrfree(f->subs);
    if (f->mapped && f->map) munmap((void *)f->map, f->size);
    if (f->fd >= 0) close(f->fd);
    accel_host_free(f->acc, f);
}

/* Every check of the reference reader, in its order. */
static accel_result accel__ckpt_st_parse(accel_ckpt_file *f) {
    accel *acc = f->acc;
    const char *path = f->path;
    uint64_t n = 0, data_len, cursor = 0;
    size_t bad = 0;
    accel__ckpt_json j;
    int root, c, i, cnt;
    accel_result r = ACCEL_OK;
    if (f->size < 8)
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.300s: truncated: %lu bytes, shorter than the 8-byte header length", path, (unsigned long)f->size);
    n = accel__get_u64(f->map);
    if (n > 100000000u)
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.300s: header size %llu exceeds the 100000000-byte limit", path, (unsigned long long)n);
    if (n > (uint64_t)f->size - 8)
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.300s: header size %llu is larger than the file (%lu bytes)", path, (unsigned long long)n, (unsigned long)f->size);
    if (!accel__utf8_valid(f->map + 8, (size_t)n, &bad))
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.300s: header is not valid UTF-8 (byte %lu)", path, (unsigned long)bad);
    root = accel__ckpt_json_parse(&j, acc, f->map + 8, (size_t)n);
    if (root < 0) {
        char what[400];
        accel__fmt(what, sizeof what, "%.300s: header", path);
        r = accel__ckpt_json_failed(acc, &j, what);
        accel__ckpt_json_free(&j);
        return r;
    }
    if (j.nodes[root].type != ACCEL__CKPT_J_OBJ) {
        accel__ckpt_json_free(&j);
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.300s: header is not a JSON object", path);
    }
    f->data_start = 8 + n;
    data_len = (uint64_t)f->size - 8 - n;
    for (c = j.nodes[root].first; c >= 0 && r == ACCEL_OK; c = j.nodes[c].next) {
        const char *key = accel__ckpt_jkeyp(&j, c);
        accel_ckpt_entry e;
        int dt, sh, off, m, d;
        if (j.nodes[c].keylen == 12 && !strcmp(key, "__metadata__")) {
            if (j.nodes[c].type != ACCEL__CKPT_J_OBJ) { r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.300s: __metadata__ is not an object", path); break; }
            for (m = j.nodes[c].first; m >= 0; m = j.nodes[m].next) {
                char *k2, *v2;
                if (j.nodes[m].type != ACCEL__CKPT_J_STR) {
                    r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.300s: __metadata__ value of '%.200s' is not a string", path, accel__ckpt_jkeyp(&j, m));
                    break;
                }
                k2 = (char *)accel_host_alloc(acc, j.nodes[m].keylen + 1);
                v2 = (char *)accel_host_alloc(acc, j.nodes[m].len + 1);
                if (!k2 || !v2) {
                    accel_host_free(acc, k2);
                    accel_host_free(acc, v2);
                    r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "%.300s: metadata", path);
                    break;
                }
                memcpy(k2, accel__ckpt_jkeyp(&j, m), j.nodes[m].keylen + 1);
                memcpy(v2, accel__ckpt_jstr(&j, m), j.nodes[m].len + 1);
                if (accel__arr_reserve((void **)&f->meta, sizeof *f->meta, 2) ||
                    accel__arr_reserve((void **)&f->meta_len, sizeof *f->meta_len, 2)) {
                    accel_host_free(acc, k2);
                    accel_host_free(acc, v2);
                    r = ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "%.300s: metadata: out of memory", path);
                    break;
                }
                (void)ACCEL__ARR_PUT(f->meta, k2); /* reserved above: cannot fail */
                (void)ACCEL__ARR_PUT(f->meta, v2);
                (void)ACCEL__ARR_PUT(f->meta_len, j.nodes[m].keylen);
                (void)ACCEL__ARR_PUT(f->meta_len, j.nodes[m].len);
            }
            continue;
        }
        memset(&e, 0, sizeof e);
        if (strlen(key) != j.nodes[c].keylen) { r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.300s: a tensor name contains a NUL character", path); break; }
        if (j.nodes[c].type != ACCEL__CKPT_J_OBJ) { r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.300s: entry '%.200s' is not an object", path, key); break; }
        dt = accel__ckpt_jget(&j, c, "dtype");
        sh = accel__ckpt_jget(&j, c, "shape");
        off = accel__ckpt_jget(&j, c, "data_offsets");
        if (j.nodes[c].count != 3 || dt < 0 || sh < 0 || off < 0) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.300s: tensor '%.200s' must have exactly dtype, shape and data_offsets", path, key);
            break;
        }
        if (j.nodes[dt].type != ACCEL__CKPT_J_STR) { r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.300s: tensor '%.200s': dtype is not a string", path, key); break; }
        e.dtype = accel_dtype_from_name(accel__ckpt_jstr(&j, dt));
        if (e.dtype == ACCEL_DTYPE_INVALID) {
            static const char *other[] = {"C64", "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "F4", "F6_E2M3", "F6_E3M2", NULL};
            int k, known = 0;
            for (k = 0; other[k]; ++k)
                if (!strcmp(other[k], accel__ckpt_jstr(&j, dt))) known = 1;
            r = ACCEL__FAIL(acc, known ? ACCEL_ERR_UNSUPPORTED : ACCEL_ERR_FORMAT, "%.300s: tensor '%.200s': %s dtype \"%.40s\"", path, key,
                            known ? "accel does not support the" : "bad", accel__ckpt_jstr(&j, dt));
            break;
        }
        if (j.nodes[sh].type != ACCEL__CKPT_J_ARR) { r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.300s: tensor '%.200s': shape is not an array", path, key); break; }
        if (j.nodes[sh].count > ACCEL_MAX_DIMS) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_UNSUPPORTED, "%.300s: tensor '%.200s' has %d dimensions (accel supports %d)", path, key, j.nodes[sh].count, ACCEL_MAX_DIMS);
            break;
        }
        e.ndim = j.nodes[sh].count;
        for (d = 0, m = j.nodes[sh].first; m >= 0; m = j.nodes[m].next, ++d) {
            uint64_t v;
            if (accel__ckpt_ju64(&j, m, &v) || v > (uint64_t)INT64_MAX) {
                r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.300s: tensor '%.200s': shape entries must be non-negative integers", path, key);
                break;
            }
            e.shape[d] = (int64_t)v;
        }
        if (r != ACCEL_OK) break;
        if (j.nodes[off].type != ACCEL__CKPT_J_ARR || j.nodes[off].count != 2 || accel__ckpt_ju64(&j, j.nodes[off].first, &e.begin) ||
            accel__ckpt_ju64(&j, j.nodes[j.nodes[off].first].next, &e.end)) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.300s: tensor '%.200s': data_offsets must be two non-negative integers", path, key);
            break;
        }
        e.name = (const char *)(uintptr_t)j.nodes[c].key; /* an arena offset until the arena is final */
        if (ACCEL__ARR_PUT(f->entries, e) != 0) { r = ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "%.300s: out of memory", path); break; }
    }
    if (r != ACCEL_OK) { accel__ckpt_json_free(&j); return r; }
    f->names = j.arena; /* the arena is final: offsets become pointers */
    j.arena = NULL;
    accel__ckpt_json_free(&j);
    cnt = (int)stbds_arrlen(f->entries);
    for (i = 0; i < cnt; ++i) f->entries[i].name = f->names + (size_t)(uintptr_t)f->entries[i].name;
    if (cnt > 1) qsort(f->entries, (size_t)cnt, sizeof *f->entries, accel__ckpt_entry_cmp);
    for (i = 0; i < cnt; ++i) {
        accel_ckpt_entry *e = &f->entries[i];
        accel_tensor t;
        int64_t nb;
        if (e->begin != cursor || e->end < e->begin) {
            if (e->begin == cursor)
                return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.300s: tensor '%.200s': data_offsets [%llu, %llu] end before they begin", path,
                                   e->name, (unsigned long long)e->begin, (unsigned long long)e->end);
            return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT,
                               "%.300s: tensor '%.200s': data_offsets [%llu, %llu] %s (expected to begin at %llu): offsets must tile the data section",
                               path, e->name, (unsigned long long)e->begin, (unsigned long long)e->end,
                               e->begin < cursor ? "overlap the previous tensor" : "leave a hole", (unsigned long long)cursor);
        }
        memset(&t, 0, sizeof t);
        t.dtype = e->dtype;
        t.ndim = e->ndim;
        memcpy(t.shape, e->shape, sizeof t.shape);
        nb = accel_tensor_nbytes(&t);
        if (nb < 0) return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.300s: tensor '%.200s': shape product overflows", path, e->name);
        if ((uint64_t)nb != e->end - e->begin) {
            char s[200];
            accel__ckpt_shape_str(s, sizeof s, e->ndim, e->shape);
            return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.300s: tensor '%.200s': %s %s needs %lld bytes but data_offsets span %llu", path,
                               e->name, accel_dtype_name(e->dtype), s, (long long)nb, (unsigned long long)(e->end - e->begin));
        }
        cursor = e->end;
    }
    if (cursor != data_len)
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.300s: the data section is %llu bytes but the tensors cover %llu (%s)", path,
                           (unsigned long long)data_len, (unsigned long long)cursor,
                           cursor > data_len ? "offsets point past the end of the file: truncated?" : "trailing bytes");
    f->by_name = (const accel_ckpt_entry **)accel_host_alloc(acc, sizeof(accel_ckpt_entry *) * (size_t)(cnt ? cnt : 1));
    if (!f->by_name) return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "%.300s: name index", path);
    for (i = 0; i < cnt; ++i) {
        f->entries[i].data = f->map + f->data_start + f->entries[i].begin;
        f->by_name[i] = &f->entries[i];
    }
    if (cnt > 1) qsort((void *)f->by_name, (size_t)cnt, sizeof *f->by_name, accel__ckpt_entryp_name_cmp);
    return ACCEL_OK;
}

static accel_result accel__ckpt_st_new(accel *acc, const char *path, accel_ckpt_file **out) {
    accel_ckpt_file *f = (accel_ckpt_file *)accel_host_alloc(acc, sizeof *f);
    if (!f) return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "open %.300s", path);
    memset(f, 0, sizeof *f);
    f->acc = acc;
    f->fd = -1;
    accel__fmt(f->path, sizeof f->path, "%s", path);
    *out = f;
    return ACCEL_OK;
}

/* open + read-only mapping, not parsed yet (accel_ckpt_file_open parses at once; load_state hashes first). */
static accel_result accel__ckpt_st_map(accel *acc, const char *path, accel_ckpt_file **out) {
    accel_ckpt_file *f = NULL;
    struct stat st;
    accel_result r;
    *out = NULL;
    r = accel__ckpt_st_new(acc, path, &f);
    if (r != ACCEL_OK) return r;
    f->fd = open(path, O_RDONLY);
    if (f->fd < 0) {
        r = errno == ENOENT ? ACCEL__FAIL(acc, ACCEL_ERR_NOT_FOUND, "%.400s does not exist", path) : accel__io_fail(acc, "cannot open", path);
        accel_ckpt_file_destroy(f);
        return r;
    }
    if (fstat(f->fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        r = ACCEL__FAIL(acc, ACCEL_ERR_IO, "%.400s is not a regular file", path);
        accel_ckpt_file_destroy(f);
        return r;
    }
    f->size = (size_t)st.st_size;
    if (f->size > 0) {
        void *m = mmap(NULL, f->size, PROT_READ, MAP_SHARED, f->fd, 0);
        if (m == MAP_FAILED) {
            r = accel__io_fail(acc, "cannot mmap", path);
            accel_ckpt_file_destroy(f);
            return r;
        }
        f->map = (const unsigned char *)m;
        f->mapped = 1;
    } else {
        f->map = (const unsigned char *)"";
    }
    *out = f;
    return ACCEL_OK;
}
ACCEL__DEF accel_result accel_ckpt_file_open(accel *acc, const char *path, accel_ckpt_file **out) {
    accel_ckpt_file *f = NULL;
    accel_result r;
    if (!path || !out) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_ckpt_file_open: NULL argument");
    r = accel__ckpt_st_map(acc, path, &f);
    if (r != ACCEL_OK) return r;
    r = accel__ckpt_st_parse(f);
    if (r != ACCEL_OK) { accel_ckpt_file_destroy(f); return r; }
    *out = f;
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_ckpt_file_open_memory(accel *acc, const void *bytes, size_t size, accel_ckpt_file **out) {
    accel_ckpt_file *f = NULL;
    accel_result r;
    if ((!bytes && size) || !out) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_ckpt_file_open_memory: NULL argument");
    *out = NULL;
    r = accel__ckpt_st_new(acc, "<memory>", &f);
    if (r != ACCEL_OK) return r;
    f->map = bytes ? (const unsigned char *)bytes : (const unsigned char *)"";
    f->size = size;
    r = accel__ckpt_st_parse(f);
    if (r != ACCEL_OK) { accel_ckpt_file_destroy(f); return r; }
    *out = f;
    return ACCEL_OK;
}

ACCEL__DEF int accel_ckpt_file_count(const accel_ckpt_file *f) { return f ? (int)stbds_arrlen(f->entries) : 0; }
ACCEL__DEF const accel_ckpt_entry *accel_ckpt_file_entry(const accel_ckpt_file *f, int i) {
    if (!f || i < 0 || i >= (int)stbds_arrlen(f->entries)) return NULL;
    return &f->entries[i];
}
ACCEL__DEF int accel_ckpt_file_find(const accel_ckpt_file *f, const char *name) {
    size_t lo = 0, hi;
    if (!f || !name || !f->by_name) return -1;
    hi = (size_t)stbds_arrlen(f->entries);
    while (lo < hi) { /* binary search of the sorted names */
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(f->by_name[mid]->name, name);
        if (c == 0) return (int)(f->by_name[mid] - f->entries);
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}
ACCEL__DEF int accel_ckpt_file_metadata_count(const accel_ckpt_file *f) { return f ? (int)stbds_arrlen(f->meta) / 2 : 0; }
ACCEL__DEF accel_result accel_ckpt_file_metadata(const accel_ckpt_file *f, int i, const char **key, size_t *key_len,
                                                 const char **value, size_t *value_len) {
    if (!f || i < 0 || i >= accel_ckpt_file_metadata_count(f))
        return ACCEL__FAIL(f ? f->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, "metadata index %d out of range", i);
    if (key) *key = f->meta[2 * i];
    if (key_len) *key_len = f->meta_len[2 * i];
    if (value) *value = f->meta[2 * i + 1];
    if (value_len) *value_len = f->meta_len[2 * i + 1];
    return ACCEL_OK;
}
ACCEL__DEF const char *accel_ckpt_file_metadata_get(const accel_ckpt_file *f, const char *key) {
    int i;
    size_t n;
    if (!f || !key) return NULL;
    n = strlen(key);
    for (i = 0; i < accel_ckpt_file_metadata_count(f); ++i) /* the whole key: "k\0x" is not "k" */
        if (f->meta_len[2 * i] == n && !memcmp(f->meta[2 * i], key, n)) return f->meta[2 * i + 1];
    return NULL;
}

/* dtype/shape check of one destination against the file. */
static accel_result accel__ckpt_st_check_dst(accel_ckpt_file *f, const accel_tensor *dst, int *idx) {
    const accel_ckpt_entry *e;
    int k, same;
    if (!dst || !dst->name) return ACCEL__FAIL(f->acc, ACCEL_ERR_INVALID_ARGUMENT, "load: destination tensor or its name is NULL");
    k = accel_ckpt_file_find(f, dst->name);
    if (k < 0) return ACCEL__FAIL(f->acc, ACCEL_ERR_NOT_FOUND, "tensor '%.200s' is not in %.300s", dst->name, f->path);
    e = &f->entries[k];
    same = e->dtype == dst->dtype && e->ndim == dst->ndim && dst->ndim >= 0 && dst->ndim <= ACCEL_MAX_DIMS;
    if (same && e->ndim > 0) same = !memcmp(e->shape, dst->shape, sizeof(int64_t) * (size_t)e->ndim);
    if (!same) {
        char se[200], sf[200];
        const char *dn = accel_dtype_name(dst->dtype);
        accel__ckpt_shape_str(se, sizeof se, dst->ndim < 0 || dst->ndim > ACCEL_MAX_DIMS ? 0 : dst->ndim, dst->shape);
        accel__ckpt_shape_str(sf, sizeof sf, e->ndim, e->shape);
        return ACCEL__FAIL(f->acc, ACCEL_ERR_INVALID_ARGUMENT, "tensor '%.200s': expected %s %s, found %s %s in %.300s", dst->name,
                           dn ? dn : "?", se, accel_dtype_name(e->dtype), sf, f->path);
    }
    if (e->end > e->begin && !dst->ptr) return ACCEL__FAIL(f->acc, ACCEL_ERR_INVALID_ARGUMENT, "tensor '%.200s': destination pointer is NULL", dst->name);
    *idx = k;
    return ACCEL_OK;
}
static accel_result accel__ckpt_st_copy(accel_ckpt_file *f, int k, void *dst, accel__ckpt_stage *stage) {
    const accel_ckpt_entry *e = &f->entries[k];
    uint64_t nb = e->end - e->begin;
    if (nb == 0) return ACCEL_OK;
    if (accel__ckpt_is_device_ptr(dst)) /* from the file (pread), or from the entry's bytes in memory */
        return accel__ckpt_read_to_device(f->acc, stage, f->fd, f->fd >= 0 ? f->map : (const unsigned char *)e->data,
                                          f->fd >= 0 ? f->data_start + e->begin : 0, dst, nb, e->name);
    if (f->fd >= 0) {
        if (accel__pread_all(f->fd, dst, (size_t)nb, f->data_start + e->begin) != 0) return accel__io_fail(f->acc, "cannot read", f->path);
    } else {
        memcpy(dst, e->data, (size_t)nb);
    }
    return ACCEL_OK;
}
/* The same copy from the file's mapping (load_state: the bytes its checksum was just computed from). */
static accel_result accel__ckpt_st_copy_mapped(accel_ckpt_file *f, int k, void *dst, accel__ckpt_stage *stage) {
    const accel_ckpt_entry *e = &f->entries[k];
    uint64_t nb = e->end - e->begin;
    if (nb == 0) return ACCEL_OK;
    if (accel__ckpt_is_device_ptr(dst)) return accel__ckpt_read_to_device(f->acc, stage, -1, (const unsigned char *)e->data, 0, dst, nb, e->name);
    memcpy(dst, e->data, (size_t)nb);
    return ACCEL_OK;
}
ACCEL__DEF accel_result accel_ckpt_file_load(accel_ckpt_file *f, const accel_tensor *dst) { return accel_ckpt_file_load_all(f, dst, 1); }
ACCEL__DEF accel_result accel_ckpt_file_load_all(accel_ckpt_file *f, const accel_tensor *dst, int n) {
    int i, *idx;
    accel__ckpt_stage stage;
    accel_result r = ACCEL_OK;
    if (!f || n < 0 || (n > 0 && !dst)) return ACCEL__FAIL(f ? f->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, "load: bad arguments");
    if (n == 0) return ACCEL_OK;
    idx = (int *)accel_host_alloc(f->acc, sizeof(int) * (size_t)n);
    if (!idx) return accel__fail_wrap(f->acc, ACCEL_ERR_OUT_OF_MEMORY, "load from %.300s", f->path);
    for (i = 0; i < n && r == ACCEL_OK; ++i) r = accel__ckpt_st_check_dst(f, &dst[i], &idx[i]);
    accel__ckpt_stage_begin(&stage, f->acc);
    for (i = 0; i < n && r == ACCEL_OK; ++i) r = accel__ckpt_st_copy(f, idx[i], dst[i].ptr, &stage);
    accel__ckpt_stage_end(&stage);
    accel_host_free(f->acc, idx);
    return r;
}

/* -------------------------------------------------------------------------- 7. sharded models: plan, save, load */
ACCEL__DEF accel_result accel_ckpt_plan_shards(accel *acc, const uint64_t *sizes, int n, uint64_t max, int *shard_of,
                                               uint64_t *shard_bytes, int *n_shards) {
    int i, j, ns = 0, cur_first = -1;
    uint64_t cur_size = 0;
    if (n < 0 || (n > 0 && (!sizes || !shard_of || !shard_bytes)) || !n_shards)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "plan_shards: bad arguments");
    /* huggingface_hub split_state_dict_into_shards_factory: an oversize tensor is appended to the shard list at
       once, as its own shard, without closing the current one; otherwise a tensor that does not fit closes the
       current shard. Shard numbers are positions in that list. Members of the open shard are marked -2. */
    for (i = 0; i < n; ++i) {
        if (sizes[i] > max) {
            shard_of[i] = ns;
            shard_bytes[ns++] = sizes[i];
            continue;
        }
        if (cur_first >= 0 && cur_size + sizes[i] > max) {
            for (j = cur_first; j < i; ++j)
                if (shard_of[j] == -2) shard_of[j] = ns;
            shard_bytes[ns++] = cur_size;
            cur_first = -1;
            cur_size = 0;
        }
        if (cur_first < 0) cur_first = i;
        shard_of[i] = -2;
        cur_size += sizes[i];
    }
    if (cur_first >= 0) {
        for (j = cur_first; j < n; ++j)
            if (shard_of[j] == -2) shard_of[j] = ns;
        shard_bytes[ns++] = cur_size;
    }
    *n_shards = ns;
    return ACCEL_OK;
}

ACCEL__DEF void accel_ckpt_shard_name(int shard, int n_shards, char *out, size_t cap) {
    if (!out || cap == 0) return;
    if (n_shards <= 1) accel__fmt(out, cap, "model.safetensors");
    else accel__fmt(out, cap, "model-%05d-of-%05d.safetensors", shard + 1, n_shards);
}

static int accel__ckpt_is_shard_name(const char *s) { /* model-NNNNN-of-NNNNN.safetensors */
    int i;
    if (strlen(s) != strlen("model-00001-of-00001.safetensors") || strncmp(s, "model-", 6)) return 0;
    for (i = 6; i < 11; ++i)
        if (s[i] < '0' || s[i] > '9') return 0;
    if (strncmp(s + 11, "-of-", 4)) return 0;
    for (i = 15; i < 20; ++i)
        if (s[i] < '0' || s[i] > '9') return 0;
    return !strcmp(s + 20, ".safetensors");
}

typedef struct accel__ckpt_name_file { const char *name; int shard; } accel__ckpt_name_file;
static int accel__ckpt_name_file_cmp(const void *a, const void *b) {
    return strcmp(((const accel__ckpt_name_file *)a)->name, ((const accel__ckpt_name_file *)b)->name);
}
/* The index exactly as json.dumps(obj, indent=2, sort_keys=True) + "\n". */
static void accel__ckpt_index_json(accel__sb *b, const accel_tensor *t, int n, const int *shard_of, int ns, uint64_t total) {
    accel__ckpt_name_file *nf = (accel__ckpt_name_file *)accel_host_alloc(b->acc, sizeof(accel__ckpt_name_file) * (size_t)(n ? n : 1));
    int i;
    char fname[64];
    if (!nf) { b->oom = 1; return; }
    for (i = 0; i < n; ++i) { nf[i].name = t[i].name; nf[i].shard = shard_of[i]; }
    qsort(nf, (size_t)n, sizeof *nf, accel__ckpt_name_file_cmp);
    accel__sb_puts(b, "{\n  \"metadata\": {\n    \"total_size\": ");
    accel__ckpt_sb_u64(b, total);
    accel__sb_puts(b, "\n  },\n  \"weight_map\": {");
    for (i = 0; i < n; ++i) {
        accel__sb_puts(b, i ? ",\n    " : "\n    ");
        accel__sb_json_str(b, nf[i].name, strlen(nf[i].name), 1);
        accel__sb_puts(b, ": ");
        accel_ckpt_shard_name(nf[i].shard, ns, fname, sizeof fname);
        accel__sb_json_str(b, fname, strlen(fname), 1);
    }
    accel__sb_puts(b, n ? "\n  }\n}\n" : "}\n}\n");
    accel_host_free(b->acc, nf);
}


static accel_result accel__ckpt_save_model_local(accel *acc, const char *dir, const accel_tensor *t, int n, uint64_t max) {
    int *shard_of = NULL, ns = 0, s, i;
    uint64_t *sizes = NULL, *shard_bytes = NULL, total = 0;
    accel_tensor *sub = NULL;
    const char *meta[2] = {"format", "pt"};
    char path[4200], fname[64];
    accel_result r = accel__ckpt_check_tensors(acc, t, n, "save_model");
    DIR *d;
    struct dirent *de;
    if (r != ACCEL_OK) return r;
    if (n == 0) return ACCEL_OK; /* Accelerate writes nothing for an empty state dict */
    if (accel__mkdir_p(dir, NULL, 0) != 0) return accel__io_fail(acc, "cannot create directory", dir);
    sizes = (uint64_t *)accel_host_alloc(acc, sizeof(uint64_t) * (size_t)n);
    shard_bytes = (uint64_t *)accel_host_alloc(acc, sizeof(uint64_t) * (size_t)n);
    shard_of = (int *)accel_host_alloc(acc, sizeof(int) * (size_t)n);
    sub = (accel_tensor *)accel_host_alloc(acc, sizeof(accel_tensor) * (size_t)n);
    if (!sizes || !shard_bytes || !shard_of || !sub) { r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "save_model"); goto done; }
    for (i = 0; i < n; ++i) { sizes[i] = (uint64_t)accel_tensor_nbytes(&t[i]); total += sizes[i]; }
    r = accel_ckpt_plan_shards(acc, sizes, n, max, shard_of, shard_bytes, &ns);
    for (s = 0; s < ns && r == ACCEL_OK; ++s) {
        int m = 0;
        for (i = 0; i < n; ++i)
            if (shard_of[i] == s) sub[m++] = t[i];
        accel_ckpt_shard_name(s, ns, fname, sizeof fname);
        accel__fmt(path, sizeof path, "%s/%s", dir, fname);
        r = accel__ckpt_st_save(acc, path, sub, m, meta, 1, 1, NULL, NULL);
    }
    if (r != ACCEL_OK) goto done;
    accel__fmt(path, sizeof path, "%s/model.safetensors.index.json", dir);
    if (ns > 1) {
        accel__sb b;
        accel__sb_init(&b, acc);
        accel__ckpt_index_json(&b, t, n, shard_of, ns, total);
        if (b.oom) r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "%.300s", path);
        else r = accel__write_file(acc, path, b.p, b.n, 1);
        accel__sb_free(&b);
        if (r != ACCEL_OK) goto done;
        accel__fmt(path, sizeof path, "%s/model.safetensors", dir);
    }
    /* the other layout's file is stale: the index for a single file, model.safetensors for shards */
    if (unlink(path) != 0 && errno != ENOENT) { r = accel__io_fail(acc, "cannot remove stale", path); goto done; }
    /* stale shards of the prefix that are not part of this save */
    d = opendir(dir);
    if (!d) { r = accel__io_fail(acc, "cannot list", dir); goto done; }
    while ((de = readdir(d)) != NULL) {
        int keep = 0;
        if (!accel__ckpt_is_shard_name(de->d_name)) continue;
        if (ns > 1)
            for (s = 0; s < ns && !keep; ++s) {
                accel_ckpt_shard_name(s, ns, fname, sizeof fname);
                keep = !strcmp(fname, de->d_name);
            }
        if (keep) continue;
        accel__fmt(path, sizeof path, "%s/%s", dir, de->d_name);
        if (accel__is_file(path) && unlink(path) != 0) { r = accel__io_fail(acc, "cannot remove stale shard", path); break; }
    }
    closedir(d);
    if (r == ACCEL_OK && accel__fsync_dir(dir) != 0) r = accel__io_fail(acc, "cannot fsync directory", dir);
done:
    accel_host_free(acc, sizes);
    accel_host_free(acc, shard_bytes);
    accel_host_free(acc, shard_of);
    accel_host_free(acc, sub);
    return r;
}

ACCEL__DEF accel_result accel_ckpt_save_model_bytes(accel *acc, const char *dir, const accel_tensor *tensors, int n,
                                                    uint64_t max_shard_size, int save_on_each_node) {
    accel_result r = ACCEL_OK;
    int writer = !acc || acc->num_processes <= 1 || (save_on_each_node ? acc->is_local_main_process : acc->is_main_process);
    if (!dir) r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "save_model: dir is NULL");
    else if (writer) r = accel__ckpt_save_model_local(acc, dir, tensors, n, max_shard_size);
    return accel__agree(acc, r, "save_model");
}
ACCEL__DEF accel_result accel_ckpt_save_model(accel *acc, const char *dir, const accel_tensor *tensors, int n,
                                              const char *max_shard_size) {
    uint64_t max = 0;
    accel_result r = accel_ckpt_parse_size(acc, max_shard_size ? max_shard_size : "10GB", &max);
    if (r != ACCEL_OK) return accel__agree(acc, r, "save_model");
    return accel_ckpt_save_model_bytes(acc, dir, tensors, n, max, 0);
}

/* model.safetensors.index.json → weight_map as parallel stb_ds arrays of strings from acc's allocator. */
typedef struct accel__ckpt_index { accel *acc; char **names; char **files; } accel__ckpt_index;
static void accel__ckpt_index_free(accel__ckpt_index *x) {
    int i;
    for (i = 0; i < (int)stbds_arrlen(x->names); ++i) {
        accel_host_free(x->acc, x->names[i]);
        accel_host_free(x->acc, x->files[i]);
    }
    stbds_arrfree(x->names);
    stbds_arrfree(x->files);
    x->names = x->files = NULL;
}
static int accel__ckpt_safe_file_name(const char *s) {
    return *s && strcmp(s, ".") && strcmp(s, "..") && !strchr(s, '/') && strlen(s) <= 255;
}
static accel_result accel__ckpt_index_parse(accel *acc, const char *what, const void *data, size_t n, accel__ckpt_index *out) {
    accel__ckpt_json j;
    int root, wm, md, c;
    size_t bad = 0;
    accel_result r = ACCEL_OK;
    memset(out, 0, sizeof *out);
    out->acc = acc;
    if (!accel__utf8_valid((const unsigned char *)data, n, &bad))
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.300s is not valid UTF-8 (byte %lu)", what, (unsigned long)bad);
    root = accel__ckpt_json_parse(&j, acc, data, n);
    if (root < 0) { r = accel__ckpt_json_failed(acc, &j, what); accel__ckpt_json_free(&j); return r; }
    wm = accel__ckpt_jget(&j, root, "weight_map");
    md = accel__ckpt_jget(&j, root, "metadata");
    if (j.nodes[root].type != ACCEL__CKPT_J_OBJ || wm < 0 || j.nodes[wm].type != ACCEL__CKPT_J_OBJ || (md >= 0 && j.nodes[md].type != ACCEL__CKPT_J_OBJ)) {
        accel__ckpt_json_free(&j);
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.300s: expected an object with a \"weight_map\" object (and an optional \"metadata\" object)", what);
    }
    for (c = j.nodes[wm].first; c >= 0; c = j.nodes[c].next) {
        char *a, *b;
        if (j.nodes[c].type != ACCEL__CKPT_J_STR || strlen(accel__ckpt_jstr(&j, c)) != j.nodes[c].len || !accel__ckpt_safe_file_name(accel__ckpt_jstr(&j, c))) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.300s: weight_map entry '%.200s' is not a plain file name", what, accel__ckpt_jkeyp(&j, c));
            break;
        }
        if (strlen(accel__ckpt_jkeyp(&j, c)) != j.nodes[c].keylen) { r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.300s: a tensor name contains NUL", what); break; }
        a = accel__ckpt_strndup(acc, accel__ckpt_jkeyp(&j, c), j.nodes[c].keylen);
        b = accel__ckpt_strndup(acc, accel__ckpt_jstr(&j, c), j.nodes[c].len);
        if (!a || !b) {
            accel_host_free(acc, a);
            accel_host_free(acc, b);
            r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "%.300s", what);
            break;
        }
        if (accel__arr_reserve((void **)&out->names, sizeof *out->names, 1) ||
            accel__arr_reserve((void **)&out->files, sizeof *out->files, 1)) {
            accel_host_free(acc, a);
            accel_host_free(acc, b);
            r = ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "%.300s: out of memory", what);
            break;
        }
        (void)ACCEL__ARR_PUT(out->names, a); /* reserved above: cannot fail */
        (void)ACCEL__ARR_PUT(out->files, b);
    }
    accel__ckpt_json_free(&j);
    if (r != ACCEL_OK) accel__ckpt_index_free(out);
    return r;
}

ACCEL__DEF accel_result accel_ckpt_load_model(accel *acc, const char *dir, const accel_tensor *t, int n) {
    char path[4200];
    accel__ckpt_index ix;
    accel_ckpt_file **files = NULL;
    char **fnames = NULL;
    int *file_of = NULL, *idx = NULL, nf = 0, i, k, sharded, total = 0;
    char *data = NULL;
    size_t dn = 0;
    accel_result r;
    accel__ckpt_stage stage;
    if (!dir) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "load_model: dir is NULL");
    r = accel__ckpt_check_tensors(acc, t, n, "load_model");
    if (r != ACCEL_OK) return r;
    memset(&ix, 0, sizeof ix);
    ix.acc = acc;
    accel__ckpt_stage_begin(&stage, acc);
    accel__fmt(path, sizeof path, "%s/model.safetensors.index.json", dir);
    sharded = accel__is_file(path);
    if (sharded) {
        r = accel__read_file(acc, path, &data, &dn, (size_t)100000000);
        if (r == ACCEL_OK) r = accel__ckpt_index_parse(acc, path, data, dn, &ix);
        accel_host_free(acc, data);
        if (r != ACCEL_OK) return r;
        for (i = 0; i < (int)stbds_arrlen(ix.files); ++i) {
            for (k = 0; k < nf; ++k)
                if (!strcmp(fnames[k], ix.files[i])) break;
            if (k == nf) {
                if (ACCEL__ARR_PUT(fnames, ix.files[i]) != 0) { r = ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "load_model: out of memory"); goto done; }
                ++nf;
            }
        }
    } else {
        if (ACCEL__ARR_PUT(fnames, (char *)"model.safetensors") != 0) { r = ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "load_model: out of memory"); goto done; }
        nf = 1;
    }
    files = (accel_ckpt_file **)accel__ckpt_zalloc(acc, (size_t)nf, sizeof *files);
    file_of = (int *)accel_host_alloc(acc, sizeof(int) * (size_t)(n ? n : 1));
    idx = (int *)accel_host_alloc(acc, sizeof(int) * (size_t)(n ? n : 1));
    if (!files || !file_of || !idx) { r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "load_model"); goto done; }
    for (k = 0; k < nf && r == ACCEL_OK; ++k) {
        accel__fmt(path, sizeof path, "%s/%s", dir, fnames[k]);
        r = accel_ckpt_file_open(acc, path, &files[k]);
        if (r == ACCEL_OK) total += accel_ckpt_file_count(files[k]);
    }
    /* every requested tensor found with the right dtype/shape; nothing else in the files */
    for (i = 0; i < n && r == ACCEL_OK; ++i) {
        file_of[i] = 0;
        if (sharded) {
            int w, nw = (int)stbds_arrlen(ix.names);
            for (w = 0; w < nw; ++w)
                if (!strcmp(ix.names[w], t[i].name)) break;
            if (w == nw) { r = ACCEL__FAIL(acc, ACCEL_ERR_NOT_FOUND, "tensor '%.200s' is not in the weight_map of %.300s", t[i].name, dir); break; }
            for (k = 0; k < nf; ++k)
                if (!strcmp(fnames[k], ix.files[w])) file_of[i] = k;
        }
        r = accel__ckpt_st_check_dst(files[file_of[i]], &t[i], &idx[i]);
    }
    if (r == ACCEL_OK && total != n)
        r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "%.300s holds %d tensors but %d were requested (unexpected tensors in the checkpoint)", dir, total, n);
    if (r == ACCEL_OK && sharded && (int)stbds_arrlen(ix.names) != n)
        r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.300s: the weight_map lists %d tensors but the shards hold %d", dir, (int)stbds_arrlen(ix.names), n);
    for (i = 0; i < n && r == ACCEL_OK; ++i) r = accel__ckpt_st_copy(files[file_of[i]], idx[i], t[i].ptr, &stage);
done:
    accel__ckpt_stage_end(&stage);
    if (files)
        for (k = 0; k < nf; ++k) accel_ckpt_file_destroy(files[k]);
    accel_host_free(acc, files);
    accel_host_free(acc, file_of);
    accel_host_free(acc, idx);
    stbds_arrfree(fnames);
    accel__ckpt_index_free(&ix);
    return r;
}

/* ----------------------------------------------- 8. the checkpointer: create/destroy, registration, root causes */
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
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_ckpt_desc: total_limit=%d and iteration=%d must be >= 0", desc->total_limit, desc->iteration);
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

static accel_result accel__ckpt_register_group(accel_ckpt *ck, accel__ckpt_group **arr, const accel_tensor *t, int n, const char *what) {
    accel__ckpt_group g;
    int i;
    accel_result r;
    if (!ck) return ACCEL__FAIL(NULL, ACCEL_ERR_INVALID_ARGUMENT, "%s: ck is NULL", what);
    r = accel__ckpt_check_tensors(ck->acc, t, n, what);
    if (r != ACCEL_OK) return r;
    g.n = n;
    g.t = (accel_tensor *)accel_host_alloc(ck->acc, sizeof(accel_tensor) * (size_t)(n ? n : 1));
    if (!g.t) return accel__fail_wrap(ck->acc, ACCEL_ERR_OUT_OF_MEMORY, "%s", what);
    for (i = 0; i < n; ++i) {
        g.t[i] = t[i];
        g.t[i].name = accel__ckpt_strndup(ck->acc, t[i].name, strlen(t[i].name));
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
    static const char *reserved[] = {"model", "optimizer", "random_states", "accelerator_state", "checkpoint_complete", "custom_checkpoint", NULL};
    size_t k, len = strlen(name);
    if (len == 0 || len > 64) return ACCEL__FAIL(ck->acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: a name must have 1..64 characters", what);
    for (k = 0; k < len; ++k) {
        char c = name[k];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.'))
            return ACCEL__FAIL(ck->acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: name \"%.64s\" may only use [A-Za-z0-9_.-]", what, name);
    }
    if (name[0] == '.') return ACCEL__FAIL(ck->acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: name \"%.64s\" may not start with '.'", what, name);
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
    if (!ck || !save || !load) return ACCEL__FAIL(ck ? ck->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, "register: NULL ck, save or load");
    if (name) {
        if ((r = accel__ckpt_check_name(ck, name, "register")) != ACCEL_OK) return r;
        accel__fmt(buf, sizeof buf, "%s.bin", name);
    } else {
        accel__fmt(buf, sizeof buf, "custom_checkpoint_%d.bin", ck->n_custom);
    }
    for (i = 0; i < (int)stbds_arrlen(ck->objs); ++i)
        if (!strcmp(ck->objs[i].name, buf)) return ACCEL__FAIL(ck->acc, ACCEL_ERR_INVALID_ARGUMENT, "register: \"%s\" is already registered", buf);
    for (i = 0; i < (int)stbds_arrlen(ck->sobjs); ++i)
        if (accel__ckpt_is_sharded_file(buf, ck->sobjs[i].name))
            return ACCEL__FAIL(ck->acc, ACCEL_ERR_INVALID_ARGUMENT, "register: \"%s\" is a file of the sharded \"%s\"", buf, ck->sobjs[i].name);
    o.name = accel__ckpt_strndup(ck->acc, buf, strlen(buf));
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
        return ACCEL__FAIL(ck ? ck->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, "register_sharded: NULL ck, name, save or load");
    if ((r = accel__ckpt_check_name(ck, name, "register_sharded")) != ACCEL_OK) return r;
    for (i = 0; i < (int)stbds_arrlen(ck->sobjs); ++i)
        if (!strcmp(ck->sobjs[i].name, name))
            return ACCEL__FAIL(ck->acc, ACCEL_ERR_INVALID_ARGUMENT, "register_sharded: \"%s\" collides with the sharded \"%s\"", name, ck->sobjs[i].name);
    for (i = 0; i < (int)stbds_arrlen(ck->objs); ++i)
        if (accel__ckpt_is_sharded_file(ck->objs[i].name, name))
            return ACCEL__FAIL(ck->acc, ACCEL_ERR_INVALID_ARGUMENT, "register_sharded: \"%s\" would collide with the registered \"%s\"", name, ck->objs[i].name);
    o.name = accel__ckpt_strndup(ck->acc, name, strlen(name));
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
    if (memcmp(before->own, accel_last_error(acc), ACCEL_ERROR_CAPACITY)) return accel__fail_wrap(acc, r, "%s: %s", what, file);
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
    if (ACCEL__ARR_PUT(*list, *w) != 0) return ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "save_state: %s: out of memory", w->name);
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

/* ------------------------------------------------------------------------ 9. completion marker and verification */
/* Hashes a whole file through a read-only mapping (no copy out of the page cache), read() into a stack buffer as a
   fallback. Returns 0 or an errno. Runs in verification threads: it neither allocates nor records errors. */
static int accel__ckpt_hash_file_raw(const char *path, uint64_t *bytes, uint64_t *hash) {
    int fd = open(path, O_RDONLY), e;
    accel__ckpt_xxh64 h;
    unsigned char buf[64 * 1024];
    uint64_t total = 0;
    struct stat st;
    if (fd < 0) return errno ? errno : EIO;
    accel__ckpt_xxh64_init(&h, 0);
    if (fstat(fd, &st) == 0 && st.st_size > 0) {
        void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
        if (m != MAP_FAILED) {
#ifdef MADV_SEQUENTIAL
            madvise(m, (size_t)st.st_size, MADV_SEQUENTIAL);
#endif
            accel__ckpt_xxh64_update(&h, m, (size_t)st.st_size);
            munmap(m, (size_t)st.st_size);
            close(fd);
            *bytes = (uint64_t)st.st_size;
            *hash = accel__ckpt_xxh64_final(&h);
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
        accel__ckpt_xxh64_update(&h, buf, (size_t)r);
        total += (uint64_t)r;
    }
    close(fd);
    *bytes = total;
    *hash = accel__ckpt_xxh64_final(&h);
    return 0;
}
static accel_result accel__ckpt_hash_file(accel *acc, const char *path, uint64_t *bytes, uint64_t *hash) {
    int e = accel__ckpt_hash_file_raw(path, bytes, hash);
    if (e == 0) return ACCEL_OK;
    errno = e;
    if (e == ENOENT) return ACCEL__FAIL(acc, ACCEL_ERR_NOT_FOUND, "%.400s does not exist", path);
    return accel__io_fail(acc, "cannot read", path);
}

/* "Not a complete checkpoint" outcomes: recorded as ACCEL_ERR_FORMAT, or only returned when `quiet` (listing probes
   many directories, most of them legitimately incomplete; real failures — I/O, memory — are always recorded). */
#define ACCEL__CKPT_INCOMPLETE(acc, quiet, ...) ((quiet) ? ACCEL_ERR_FORMAT : ACCEL__FAIL((acc), ACCEL_ERR_FORMAT, __VA_ARGS__))

/* The completion marker: file list with sizes and checksums. */
typedef struct accel__ckpt_marker { accel__ckpt_written *files; } accel__ckpt_marker;
static accel_result accel__ckpt_marker_read(accel *acc, const char *dir, int quiet, accel__ckpt_marker *m) {
    char path[4200], *data = NULL;
    size_t n = 0;
    accel__ckpt_json j;
    int root, fl, c;
    accel_result r;
    memset(m, 0, sizeof *m);
    accel__fmt(path, sizeof path, "%s/" ACCEL__CKPT_MARKER, dir);
    if (!accel__is_file(path)) return ACCEL__CKPT_INCOMPLETE(acc, quiet, "%.400s is not a complete checkpoint: no " ACCEL__CKPT_MARKER, dir);
    r = accel__read_file(acc, path, &data, &n, (size_t)16 << 20);
    if (r != ACCEL_OK) return r;
    if (!accel__utf8_valid((const unsigned char *)data, n, NULL)) {
        accel_host_free(acc, data);
        return ACCEL__CKPT_INCOMPLETE(acc, quiet, "%.400s is not valid UTF-8", path);
    }
    root = accel__ckpt_json_parse(&j, acc, data, n);
    accel_host_free(acc, data);
    if (root < 0) {
        r = j.oom || !quiet ? accel__ckpt_json_failed(acc, &j, path) : ACCEL_ERR_FORMAT;
        accel__ckpt_json_free(&j);
        return r;
    }
    fl = accel__ckpt_jget(&j, root, "files");
    if (fl < 0 || j.nodes[fl].type != ACCEL__CKPT_J_OBJ) {
        accel__ckpt_json_free(&j);
        return ACCEL__CKPT_INCOMPLETE(acc, quiet, "%.400s has no \"files\" object", path);
    }
    for (c = j.nodes[fl].first; c >= 0; c = j.nodes[c].next) {
        accel__ckpt_written w;
        int b = accel__ckpt_jget(&j, c, "bytes"), h = accel__ckpt_jget(&j, c, "xxh64"), k, okhex = 1;
        const char *hs;
        memset(&w, 0, sizeof w);
        if (j.nodes[c].keylen >= sizeof w.name || strlen(accel__ckpt_jkeyp(&j, c)) != j.nodes[c].keylen || !accel__ckpt_safe_file_name(accel__ckpt_jkeyp(&j, c)) ||
            b < 0 || h < 0 || accel__ckpt_ju64(&j, b, &w.bytes) || j.nodes[h].type != ACCEL__CKPT_J_STR || j.nodes[h].len != 16)
            okhex = 0;
        if (okhex) {
            hs = accel__ckpt_jstr(&j, h);
            for (k = 0; k < 16; ++k) {
                char ch = hs[k];
                unsigned v = (ch >= '0' && ch <= '9') ? (unsigned)(ch - '0') : (ch >= 'a' && ch <= 'f') ? (unsigned)(ch - 'a' + 10) : 99u;
                if (v > 15) { okhex = 0; break; }
                w.hash = (w.hash << 4) | v;
            }
        }
        if (!okhex) {
            r = ACCEL__CKPT_INCOMPLETE(acc, quiet, "%.400s: malformed entry for '%.100s'", path, accel__ckpt_jkeyp(&j, c));
            accel__ckpt_json_free(&j);
            stbds_arrfree(m->files);
            return r;
        }
        memcpy(w.name, accel__ckpt_jkeyp(&j, c), j.nodes[c].keylen + 1);
        if (ACCEL__ARR_PUT(m->files, w) != 0) {
            accel__ckpt_json_free(&j);
            stbds_arrfree(m->files);
            m->files = NULL;
            return ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "%.400s: out of memory", path);
        }
    }
    accel__ckpt_json_free(&j);
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
            j->hash[i] = accel_ckpt_xxh64(j->mem[i], j->mem_n[i], 0);
            j->err[i] = 0;
            continue;
        }
        accel__fmt(path, sizeof path, "%s/%s", j->dir, j->files[i].name);
        j->err[i] = accel__ckpt_hash_file_raw(path, &j->bytes[i], &j->hash[i]);
    }
    return NULL;
}
/* Every checksum of the marker m (sizes included) against the files' bytes: mem/mem_n as in the job (may be NULL). */
static accel_result accel__ckpt_verify_files(accel *acc, const char *dir, const accel__ckpt_marker *m, const unsigned char *const *mem,
                                             const size_t *mem_n) {
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
            if (j.err[i]) {
                errno = j.err[i];
                r = accel__io_fail(acc, "cannot verify", path);
            } else if (j.bytes[i] != m->files[i].bytes) {
                r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "corrupt checkpoint %.400s: %s is %llu bytes, the marker says %llu", dir,
                                m->files[i].name, (unsigned long long)j.bytes[i], (unsigned long long)m->files[i].bytes);
            } else if (j.hash[i] != m->files[i].hash) {
                r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "corrupt checkpoint %.400s: checksum of %s is %016llx, the marker says %016llx", dir,
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
static accel_result accel__ckpt_check_complete(accel *acc, const char *dir, int full, int quiet, accel__ckpt_marker *keep) {
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
            r = ACCEL__CKPT_INCOMPLETE(acc, quiet, "corrupt checkpoint %.400s: %s is %llu bytes, the marker says %llu", dir,
                                       m.files[i].name, (unsigned long long)st.st_size, (unsigned long long)m.files[i].bytes);
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
    accel__ckpt_name_file *order;
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
        if (r == ACCEL_OK && ACCEL__ARR_PUT(*written, w) != 0) r = ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "writing " ACCEL__CKPT_MARKER ": out of memory");
    }
    closedir(d);
    if (r != ACCEL_OK) return r;
    nw = (int)stbds_arrlen(*written);
    order = (accel__ckpt_name_file *)accel_host_alloc(acc, sizeof(accel__ckpt_name_file) * (size_t)(nw ? nw : 1));
    if (!order) return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "writing " ACCEL__CKPT_MARKER);
    for (i = 0; i < nw; ++i) { order[i].name = (*written)[i].name; order[i].shard = i; }
    qsort(order, (size_t)nw, sizeof *order, accel__ckpt_name_file_cmp);
    accel__sb_init(&b, acc);
    accel__sb_puts(&b, "{\"files\": {");
    for (i = 0; i < nw; ++i) {
        char hx[24];
        const accel__ckpt_written *w = &(*written)[order[i].shard];
        if (i) accel__sb_puts(&b, ", ");
        accel__sb_json_str(&b, w->name, strlen(w->name), 1);
        accel__sb_puts(&b, ": {\"bytes\": ");
        accel__ckpt_sb_u64(&b, w->bytes);
        accel__fmt(hx, sizeof hx, "%016llx", (unsigned long long)w->hash);
        accel__sb_puts(&b, ", \"xxh64\": \"");
        accel__sb_puts(&b, hx);
        accel__sb_puts(&b, "\"}");
    }
    accel__sb_puts(&b, "}, \"format\": \"accel-checkpoint\", \"version\": 1}\n");
    accel_host_free(acc, order);
    accel__fmt(path, sizeof path, "%s/" ACCEL__CKPT_MARKER, tmp);
    r = b.oom ? accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "writing " ACCEL__CKPT_MARKER) : accel__write_file(acc, path, b.p, b.n, 0);
    accel__sb_free(&b);
    if (r == ACCEL_OK && accel__fsync_dir(tmp) != 0) r = accel__io_fail(acc, "cannot fsync directory", tmp);
    return r;
}

/* ------------------------------------------------------------------------------------- 10. listing and rotation */
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
        accel_log(acc, ACCEL_LOG_WARN, "save_state: rotation (total_limit %d) skipped: %s", total_limit, accel_last_error(acc));
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
        if (strcmp(de->d_name + l - 4, ".tmp") && strcmp(de->d_name + l - 4, ".del") && strcmp(de->d_name + l - 4, ".old")) continue;
        memcpy(inner, de->d_name + 1, l - 5);
        inner[l - 5] = 0;
        if (!accel__ckpt_number(inner, &num)) continue;
        accel__fmt(path, sizeof path, "%s/%s", parent, de->d_name);
        accel__rmtree(path);
    }
    if (d) closedir(d);
}

/* ----------------------------------------------------------------------------------------------- 11. save_state */
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
    sp->owner = acc->num_processes <= 1 || (ck->d.save_on_each_node ? acc->is_local_main_process : acc->is_main_process);
    if (sp->automatic && !ck->d.automatic_checkpoint_naming)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "save_state: output_dir is NULL and automatic_checkpoint_naming is off");
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
        return ACCEL__FAIL(acc, ACCEL_ERR_STATE, "checkpoint directory %.400s already exists (iteration %d); set the iteration or load_state first",
                           sp->target, ck->iteration);
    if (!sp->automatic && accel__is_dir(sp->target) && !accel__ckpt_replaceable(sp->target))
        return ACCEL__FAIL(acc, ACCEL_ERR_STATE, "%.400s exists and is neither empty nor an accel checkpoint (no " ACCEL__CKPT_MARKER "): refusing to replace it", sp->target);
    if (!sp->automatic && accel__ckpt_exists_not_dir(sp->target))
        return ACCEL__FAIL(acc, ACCEL_ERR_STATE, "%.400s exists and is not a directory", sp->target);
    if (accel__mkdir_p(sp->parent, NULL, 0) != 0) return accel__io_fail(acc, "cannot create directory", sp->parent);
    if (accel__rmtree(sp->tmp) != 0) return accel__io_fail(acc, "cannot remove stale", sp->tmp);
    if (mkdir(sp->tmp, 0777) != 0) return accel__io_fail(acc, "cannot create directory", sp->tmp);
    return ACCEL_OK;
}

/* Writes one object's bytes through the state contract's two calls (size, then bytes). */
static accel_result accel__ckpt_save_obj(accel *acc, const accel__ckpt_obj *o, const char *dir, accel__ckpt_written *w) {
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
        r = ACCEL__FAIL(acc, ACCEL_ERR_STATE, "save_state: %s: the state grew from %zu to %zu bytes between the save callback's "
                        "two calls", o->name, need, got);
    if (r == ACCEL_OK) {
        accel__fmt(path, sizeof path, "%s/%s", dir, o->name);
        r = accel__write_file(acc, path, buf, got, 0);
        accel__fmt(w->name, sizeof w->name, "%s", o->name);
        w->bytes = got;
        w->hash = accel_ckpt_xxh64(buf, got, 0);
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
            r = accel__ckpt_st_save(acc, path, ck->models[i].t, ck->models[i].n, meta, 1, 0, &w.bytes, &w.hash);
            if (r == ACCEL_OK) r = accel__ckpt_put_written(acc, written, &w);
        }
        for (i = 0; i < (int)stbds_arrlen(ck->optims) && r == ACCEL_OK; ++i) {
            accel__ckpt_group_file(w.name, sizeof w.name, "optimizer", i);
            accel__fmt(path, sizeof path, "%s/%s", tmp, w.name);
            r = accel__ckpt_st_save(acc, path, ck->optims[i].t, ck->optims[i].n, NULL, 0, 0, &w.bytes, &w.hash);
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
                w.hash = accel_ckpt_xxh64(b.p, b.n, 0);
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
static accel_result accel__ckpt_save_publish(accel *acc, const accel__ckpt_save_paths *sp, accel__ckpt_written **written) {
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
        r = ACCEL__FAIL(acc, ACCEL_ERR_IO, "checkpoint directory %.400s is not visible on this process (save_state needs a shared filesystem, or save_on_each_node)", sp.tmp);
    /* 2. the files */
    if (r == ACCEL_OK) r = accel__ckpt_save_files(ck, sp.tmp, sp.owner, &written);
    r = accel__agree(acc, r, "save_state (write)");
    /* 3. the owner seals and publishes, then rotates */
    if (r == ACCEL_OK) {
        if (sp.owner) r = accel__ckpt_save_publish(acc, &sp, &written);
        if (r == ACCEL_OK && sp.owner && sp.automatic && ck->d.total_limit > 0) accel__ckpt_rotate(acc, sp.parent, sp.target, ck->d.total_limit);
        if (r == ACCEL_OK && sp.owner && sp.automatic) accel__ckpt_clean_hidden(sp.parent);
        r = accel__agree(acc, r, "save_state (commit)");
    }
    stbds_arrfree(written);
    if (r != ACCEL_OK) return r;
    if (out_dir && cap) accel__fmt(out_dir, cap, "%s", sp.target);
    ck->iteration += 1;
    return ACCEL_OK;
}

/* ----------------------------------------------------------------------------------------------- 12. load_state */
/* Everything load_state reads and checks before it applies anything. Verification is done on the bytes that are
   applied: a small file (objects, accelerator_state.json, random_states_*.bin) is read once into memory and hashed
   there; a safetensors file is mapped once, hashed through the mapping, and its tensors are copied from that same
   mapping. Files of the marker that this load does not use are hashed from disk. */
typedef struct accel__ckpt_load {
    accel *acc;
    char dir[2300];
    accel__ckpt_marker marker;
    accel_ckpt_file **mf, **of;  /* per registered model / optimizer group (mapped, parsed after verification) */
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
    for (i = 0; ld->mf && i < (int)stbds_arrlen(ck->models); ++i) accel_ckpt_file_destroy(ld->mf[i]);
    for (i = 0; ld->of && i < (int)stbds_arrlen(ck->optims); ++i) accel_ckpt_file_destroy(ld->of[i]);
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
static accel_result accel__ckpt_load_groups_map(accel__ckpt_load *ld, const char *kind, int n, accel_ckpt_file **files) {
    accel_result r = ACCEL_OK;
    int i;
    char path[2500]; /* dir (< 2300) + "/" + file name (< 96) */
    for (i = 0; i < n && r == ACCEL_OK; ++i) {
        char fname[96];
        int m;
        accel__ckpt_group_file(fname, sizeof fname, kind, i);
        accel__fmt(path, sizeof path, "%s/%s", ld->dir, fname);
        m = accel__ckpt_marker_index(&ld->marker, fname);
        if (m < 0) return ACCEL__FAIL(ld->acc, ACCEL_ERR_INVALID_ARGUMENT, "%.400s has no %s (%s %d is registered)", ld->dir, fname, kind, i);
        r = accel__ckpt_st_map(ld->acc, path, &files[i]);
        if (r != ACCEL_OK) break;
        ld->mem[m] = files[i]->map;
        ld->mem_n[m] = files[i]->size;
    }
    return r;
}
/* After verification: parses each group's file and checks every registered tensor against it (count, names,
   dtypes, shapes) before anything is applied. */
static accel_result accel__ckpt_load_groups_check(accel__ckpt_load *ld, const char *kind, const accel__ckpt_group *groups, int n,
                                                  accel_ckpt_file **files) {
    accel *acc = ld->acc;
    accel_result r = ACCEL_OK;
    int i, k;
    for (i = 0; i < n && r == ACCEL_OK; ++i) {
        r = accel__ckpt_st_parse(files[i]);
        if (r == ACCEL_OK && accel_ckpt_file_count(files[i]) != groups[i].n)
            r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "%.400s holds %d tensors but %s %d registers %d", files[i]->path,
                            accel_ckpt_file_count(files[i]), kind, i, groups[i].n);
        for (k = 0; k < groups[i].n && r == ACCEL_OK; ++k) {
            int ix;
            r = accel__ckpt_st_check_dst(files[i], &groups[i].t[k], &ix);
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
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "%.400s has %d custom_checkpoint files but %d custom objects are registered",
                           ld->dir, n_custom_files, ck->n_custom);
    for (i = 0; i < nobj && r == ACCEL_OK; ++i)
        r = accel__ckpt_load_hold(ld, ck->objs[i].name, ACCEL_ERR_INVALID_ARGUMENT, " (a registered object)", &ld->blobs[i],
                                  &ld->blob_n[i], (size_t)1 << 40);
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
    accel__ckpt_json j;
    int root;
    accel_result r = accel__ckpt_load_hold(ld, "accelerator_state.json", ACCEL_ERR_FORMAT, "", &data, &n, 1 << 20);
    if (r != ACCEL_OK) return r;
    root = accel__ckpt_json_parse(&j, ld->acc, data, n);
    if (root < 0) r = accel__ckpt_json_failed(ld->acc, &j, "accelerator_state.json");
    else if (accel__ckpt_ju64(&j, accel__ckpt_jget(&j, root, "iteration"), &ld->iteration) ||
             accel__ckpt_ju64(&j, accel__ckpt_jget(&j, root, "num_processes"), &ld->saved_np) || ld->saved_np < 1 ||
             ld->saved_np > 1000000 || ld->iteration > (uint64_t)INT_MAX - 1)
        r = ACCEL__FAIL(ld->acc, ACCEL_ERR_FORMAT, "%.400s/accelerator_state.json is malformed (iteration, num_processes)", ld->dir);
    accel__ckpt_json_free(&j);
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
    ld->states = (const char **)accel__ckpt_zalloc(acc, (size_t)count, sizeof(char *));
    ld->state_n = (size_t *)accel__ckpt_zalloc(acc, (size_t)count, sizeof(size_t));
    if (!ld->states || !ld->state_n) return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "load_state: training states");
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
    ld->sblobs = (const char **)accel__ckpt_zalloc(acc, (size_t)ns * (size_t)count, sizeof(char *));
    ld->sblob_n = (size_t *)accel__ckpt_zalloc(acc, (size_t)ns * (size_t)count, sizeof(size_t));
    if (!ld->sblobs || !ld->sblob_n) return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "load_state: sharded objects");
    ld->nsobj = ns;
    for (s = 0; s < ns && r == ACCEL_OK; ++s)
        for (i = 0; i < count && r == ACCEL_OK; ++i) {
            char name[96];
            accel__fmt(name, sizeof name, "%s_%d.bin", ck->sobjs[s].name, i);
            r = accel__ckpt_load_hold(ld, name, ACCEL_ERR_INVALID_ARGUMENT, " (a registered sharded object; the checkpoint "
                                      "has one per saving process)", &ld->sblobs[s * count + i], &ld->sblob_n[s * count + i],
                                        (size_t)1 << 40);
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
    accel__ckpt_stage stage;
    accel_result r = ACCEL_OK;
    int i, k;
    accel__ckpt_stage_begin(&stage, acc);
    for (i = 0; i < (int)stbds_arrlen(ck->models) && r == ACCEL_OK; ++i)
        for (k = 0; k < ck->models[i].n && r == ACCEL_OK; ++k)
            r = accel__ckpt_st_copy_mapped(ld->mf[i], accel_ckpt_file_find(ld->mf[i], ck->models[i].t[k].name), ck->models[i].t[k].ptr, &stage);
    for (i = 0; i < (int)stbds_arrlen(ck->optims) && r == ACCEL_OK; ++i)
        for (k = 0; k < ck->optims[i].n && r == ACCEL_OK; ++k)
            r = accel__ckpt_st_copy_mapped(ld->of[i], accel_ckpt_file_find(ld->of[i], ck->optims[i].t[k].name), ck->optims[i].t[k].ptr, &stage);
    accel__ckpt_stage_end(&stage);
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
        r = o->load(o->obj, (const void *const *)(ld->sblobs + (size_t)i * (size_t)count), ld->sblob_n + (size_t)i * (size_t)count, count);
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
        if (strlen(input_dir) >= 2000) r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "load_state: input_dir is too long");
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
        ld.mf = (accel_ckpt_file **)accel__ckpt_zalloc(acc, (size_t)stbds_arrlen(ck->models), sizeof *ld.mf);
        ld.of = (accel_ckpt_file **)accel__ckpt_zalloc(acc, (size_t)stbds_arrlen(ck->optims), sizeof *ld.of);
        ld.blobs = (const char **)accel__ckpt_zalloc(acc, (size_t)stbds_arrlen(ck->objs), sizeof *ld.blobs);
        ld.blob_n = (size_t *)accel__ckpt_zalloc(acc, (size_t)stbds_arrlen(ck->objs), sizeof *ld.blob_n);
        ld.read = (char **)accel__ckpt_zalloc(acc, nf, sizeof *ld.read);
        ld.mem = (const unsigned char **)accel__ckpt_zalloc(acc, nf, sizeof *ld.mem);
        ld.mem_n = (size_t *)accel__ckpt_zalloc(acc, nf, sizeof *ld.mem_n);
        if (!ld.mf || !ld.of || !ld.blobs || !ld.blob_n || !ld.read || !ld.mem || !ld.mem_n)
            r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "load_state");
    }
    if (r == ACCEL_OK) r = accel__ckpt_load_groups_map(&ld, "model", (int)stbds_arrlen(ck->models), ld.mf);
    if (r == ACCEL_OK) r = accel__ckpt_load_groups_map(&ld, "optimizer", (int)stbds_arrlen(ck->optims), ld.of);
    if (r == ACCEL_OK) r = accel__ckpt_load_objects(ck, &ld);
    if (r == ACCEL_OK) r = accel__ckpt_load_read_state_files(ck, &ld);
    if (r == ACCEL_OK) r = accel__ckpt_verify_files(acc, ld.dir, &ld.marker, ld.mem, ld.mem_n);
    if (r == ACCEL_OK) r = accel__ckpt_load_groups_check(&ld, "model", ck->models, (int)stbds_arrlen(ck->models), ld.mf);
    if (r == ACCEL_OK) r = accel__ckpt_load_groups_check(&ld, "optimizer", ck->optims, (int)stbds_arrlen(ck->optims), ld.of);
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


/* ------------------------------------------------------------------------------------ 13. the model description */
#define ACCEL__CKPT_MOD 0
#define ACCEL__CKPT_TEN 1

typedef struct accel__ckpt_mmod {
    char *name, *cls;
    int parent;
    int *children, *params, *buffers; /* stb_ds arrays of indices, registration order (params: aliases included) */
} accel__ckpt_mmod;
typedef struct accel__ckpt_mten {
    accel_tensor t;  /* t.name owned (acc's allocator); ptr unused */
    int module, is_buffer;
    int storage;     /* the tensor whose storage it is: itself, or the parameter an alias is tied to (-1: pending) */
} accel__ckpt_mten;
typedef struct accel__ckpt_mname { const char *name; int kind, idx; } accel__ckpt_mname;
struct accel_ckpt_model {
    accel *acc;
    accel__ckpt_mmod *mods;   /* stb_ds; 0 is the root "" */
    accel__ckpt_mten *tens;   /* stb_ds */
    accel__ckpt_mname *names; /* stb_ds, sorted by name: every module and tensor */
    int *groups;              /* stb_ds: the storage of every tied group, in the order the groups were made */
    int *sd_order;            /* stb_ds: tensors in state_dict order (rebuilt when sd_dirty) */
    int sd_dirty;
};
typedef struct accel__ckpt_ref { int kind, idx; } accel__ckpt_ref;

static const char *accel__ckpt_ref_name(const accel_ckpt_model *m, accel__ckpt_ref r) {
    return r.kind == ACCEL__CKPT_MOD ? m->mods[r.idx].name : m->tens[r.idx].t.name;
}
static int accel__ckpt_mfind(const accel_ckpt_model *m, const char *name, int *kind) {
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
static accel_result accel__ckpt_mname_insert(accel_ckpt_model *m, const char *name, int kind, int idx) {
    size_t lo = 0, hi = (size_t)stbds_arrlen(m->names), n = hi;
    accel__ckpt_mname e;
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
static int accel__ckpt_parent_module(accel_ckpt_model *m, const char *name, const char *what) {
    const char *dot = strrchr(name, '.');
    int kind = -1, idx;
    char *pname;
    size_t utf8_bad = 0;
    if (!accel__utf8_valid((const unsigned char *)name, strlen(name), &utf8_bad)) {
        ACCEL__FAIL(m->acc, ACCEL_ERR_INVALID_ARGUMENT, "model: %s name is not valid UTF-8 (byte %lu)", what, (unsigned long)utf8_bad);
        return -1;
    }
    if (!*name || (dot && (dot == name || !dot[1]))) {
        ACCEL__FAIL(m->acc, ACCEL_ERR_INVALID_ARGUMENT, "model: %s name \"%.200s\" has an empty component", what, name);
        return -1;
    }
    if (accel__ckpt_mfind(m, name, NULL) >= 0) {
        ACCEL__FAIL(m->acc, ACCEL_ERR_INVALID_ARGUMENT, "model: \"%.200s\" exists already", name);
        return -1;
    }
    if (!dot) return 0;
    pname = accel__ckpt_strndup(m->acc, name, (size_t)(dot - name));
    if (!pname) {
        accel__fail_wrap(m->acc, ACCEL_ERR_OUT_OF_MEMORY, "model");
        return -1;
    }
    idx = accel__ckpt_mfind(m, pname, &kind);
    if (idx < 0 || kind != ACCEL__CKPT_MOD)
        ACCEL__FAIL(m->acc, ACCEL_ERR_INVALID_ARGUMENT, "model: %s \"%.200s\": \"%.200s\" is not a module (add modules before "
                    "what they hold)", what, name, pname);
    accel_host_free(m->acc, pname);
    return idx >= 0 && kind == ACCEL__CKPT_MOD ? idx : -1;
}

static void accel__ckpt_mmod_free(accel *acc, accel__ckpt_mmod *d) {
    accel_host_free(acc, d->name);
    accel_host_free(acc, d->cls);
    stbds_arrfree(d->children);
    stbds_arrfree(d->params);
    stbds_arrfree(d->buffers);
}
ACCEL__DEF void accel_ckpt_model_destroy(accel_ckpt_model *m) {
    int i;
    if (!m) return;
    for (i = 0; i < (int)stbds_arrlen(m->mods); ++i) accel__ckpt_mmod_free(m->acc, &m->mods[i]);
    for (i = 0; i < (int)stbds_arrlen(m->tens); ++i) accel_host_free(m->acc, (void *)m->tens[i].t.name);
    stbds_arrfree(m->mods);
    stbds_arrfree(m->tens);
    stbds_arrfree(m->names);
    stbds_arrfree(m->groups);
    stbds_arrfree(m->sd_order);
    accel_host_free(m->acc, m);
}

static accel_result accel__ckpt_model_add_mod(accel_ckpt_model *m, const char *name, const char *cls, int parent) {
    accel__ckpt_mmod d;
    int idx = (int)stbds_arrlen(m->mods);
    memset(&d, 0, sizeof d);
    d.parent = parent;
    d.name = accel__ckpt_strndup(m->acc, name, strlen(name));
    d.cls = accel__ckpt_strndup(m->acc, cls, strlen(cls));
    if (!d.name || !d.cls) {
        accel__ckpt_mmod_free(m->acc, &d);
        return accel__fail_wrap(m->acc, ACCEL_ERR_OUT_OF_MEMORY, "model");
    }
    if ((parent >= 0 && accel__arr_reserve((void **)&m->mods[parent].children, sizeof(int), 1) != 0) ||
        ACCEL__ARR_PUT(m->mods, d) != 0) {
        accel__ckpt_mmod_free(m->acc, &d);
        return ACCEL__FAIL(m->acc, ACCEL_ERR_OUT_OF_MEMORY, "model: out of memory");
    }
    if (accel__ckpt_mname_insert(m, m->mods[idx].name, ACCEL__CKPT_MOD, idx) != ACCEL_OK) {
        accel__ckpt_mmod_free(m->acc, &m->mods[idx]);
        (void)stbds_arrpop(m->mods);
        return ACCEL_ERR_OUT_OF_MEMORY;
    }
    if (parent >= 0) (void)ACCEL__ARR_PUT(m->mods[parent].children, idx); /* reserved above */
    m->sd_dirty = 1;
    return ACCEL_OK;
}
/* A tensor record (storage -1: an alias whose parameter is not known yet). */
static accel_result accel__ckpt_model_add_ten(accel_ckpt_model *m, const accel_tensor *t, int is_buffer, int module, int storage) {
    accel__ckpt_mten x;
    int idx = (int)stbds_arrlen(m->tens), **list = is_buffer ? &m->mods[module].buffers : &m->mods[module].params;
    memset(&x, 0, sizeof x);
    x.t = *t;
    x.t.ptr = NULL;
    x.module = module;
    x.is_buffer = is_buffer;
    x.storage = storage == -2 ? idx : storage;
    x.t.name = accel__ckpt_strndup(m->acc, t->name, strlen(t->name));
    if (!x.t.name) return accel__fail_wrap(m->acc, ACCEL_ERR_OUT_OF_MEMORY, "model");
    if (accel__arr_reserve((void **)list, sizeof(int), 1) != 0 || ACCEL__ARR_PUT(m->tens, x) != 0) {
        accel_host_free(m->acc, (void *)x.t.name);
        return ACCEL__FAIL(m->acc, ACCEL_ERR_OUT_OF_MEMORY, "model: out of memory");
    }
    if (accel__ckpt_mname_insert(m, m->tens[idx].t.name, ACCEL__CKPT_TEN, idx) != ACCEL_OK) {
        accel_host_free(m->acc, (void *)m->tens[idx].t.name);
        (void)stbds_arrpop(m->tens);
        return ACCEL_ERR_OUT_OF_MEMORY;
    }
    (void)ACCEL__ARR_PUT(*list, idx); /* reserved above */
    m->sd_dirty = 1;
    return ACCEL_OK;
}
static accel_result accel__ckpt_model_new(accel *acc, const char *cls, accel_ckpt_model **out) {
    accel_ckpt_model *m = (accel_ckpt_model *)accel_host_alloc(acc, sizeof *m);
    accel_result r;
    *out = NULL;
    if (!m) return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "model");
    memset(m, 0, sizeof *m);
    m->acc = acc;
    r = accel__ckpt_model_add_mod(m, "", cls, -1);
    if (r != ACCEL_OK) {
        accel_ckpt_model_destroy(m);
        return r;
    }
    *out = m;
    return ACCEL_OK;
}
ACCEL__DEF accel_result accel_ckpt_model_create(accel *acc, const accel_ckpt_model_desc *desc, accel_ckpt_model **out) {
    if (!out) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_ckpt_model_create: out is NULL");
    return accel__ckpt_model_new(acc, desc && desc->class_name ? desc->class_name : "Module", out);
}
ACCEL__DEF accel_result accel_ckpt_model_add_module(accel_ckpt_model *m, const char *name, const char *class_name) {
    int parent;
    if (!m || !name || !class_name) return ACCEL__FAIL(m ? m->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, "model_add_module: NULL argument");
    parent = accel__ckpt_parent_module(m, name, "module");
    if (parent < 0) return m->acc ? m->acc->last_result : ACCEL_ERR_INVALID_ARGUMENT;
    return accel__ckpt_model_add_mod(m, name, class_name, parent);
}
static accel_result accel__ckpt_check_model_tensor(accel_ckpt_model *m, const accel_tensor *t) {
    int d;
    if (!accel_dtype_name(t->dtype)) return ACCEL__FAIL(m->acc, ACCEL_ERR_INVALID_ARGUMENT, "model: tensor \"%.200s\" has an invalid dtype %d", t->name, (int)t->dtype);
    if (t->ndim < 0 || t->ndim > ACCEL_MAX_DIMS)
        return ACCEL__FAIL(m->acc, ACCEL_ERR_INVALID_ARGUMENT, "model: tensor \"%.200s\" has %d dimensions (0..%d)", t->name, t->ndim, ACCEL_MAX_DIMS);
    for (d = 0; d < t->ndim; ++d)
        if (t->shape[d] < 0) return ACCEL__FAIL(m->acc, ACCEL_ERR_INVALID_ARGUMENT, "model: tensor \"%.200s\" has a negative dimension", t->name);
    if (accel_tensor_nbytes(t) < 0) return ACCEL__FAIL(m->acc, ACCEL_ERR_INVALID_ARGUMENT, "model: tensor \"%.200s\" is too large", t->name);
    return ACCEL_OK;
}
/* The first error recorded on the model's Accelerator (or the process-wide one). */
#define ACCEL__CKPT_LAST(m) ((m)->acc ? (m)->acc->last_result : ACCEL_ERR_INVALID_ARGUMENT)
ACCEL__DEF accel_result accel_ckpt_model_add_tensor(accel_ckpt_model *m, const accel_tensor *t, int is_buffer) {
    int module;
    accel_result r;
    if (!m || !t || !t->name) return ACCEL__FAIL(m ? m->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, "model_add_tensor: NULL argument");
    r = accel__ckpt_check_model_tensor(m, t);
    if (r != ACCEL_OK) return r;
    module = accel__ckpt_parent_module(m, t->name, is_buffer ? "buffer" : "parameter");
    if (module < 0) return ACCEL__CKPT_LAST(m);
    return accel__ckpt_model_add_ten(m, t, is_buffer ? 1 : 0, module, -2);
}
static accel_result accel__ckpt_model_group(accel_ckpt_model *m, int storage) {
    int i;
    for (i = 0; i < (int)stbds_arrlen(m->groups); ++i)
        if (m->groups[i] == storage) return ACCEL_OK;
    if (ACCEL__ARR_PUT(m->groups, storage) != 0) return ACCEL__FAIL(m->acc, ACCEL_ERR_OUT_OF_MEMORY, "model: out of memory");
    return ACCEL_OK;
}
ACCEL__DEF accel_result accel_ckpt_model_tie(accel_ckpt_model *m, const char *param, const char *alias) {
    int kind = -1, p, module;
    accel_tensor t;
    accel_result r;
    if (!m || !param || !alias) return ACCEL__FAIL(m ? m->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, "model_tie: NULL argument");
    p = accel__ckpt_mfind(m, param, &kind);
    if (p < 0 || kind != ACCEL__CKPT_TEN || m->tens[p].is_buffer)
        return ACCEL__FAIL(m->acc, ACCEL_ERR_INVALID_ARGUMENT, "model_tie: \"%.200s\" is not a parameter of the model", param);
    module = accel__ckpt_parent_module(m, alias, "parameter");
    if (module < 0) return ACCEL__CKPT_LAST(m);
    t = m->tens[p].t;
    t.name = alias;
    r = accel__ckpt_model_group(m, m->tens[p].storage);
    if (r == ACCEL_OK) r = accel__ckpt_model_add_ten(m, &t, 0, module, m->tens[p].storage);
    return r;
}

/* state_dict order: modules depth-first, each one's parameters (aliases too) then its buffers. */
static accel_result accel__ckpt_model_sd(accel_ckpt_model *m) {
    int *stack = NULL, i;
    accel_result r = ACCEL_OK;
    if (!m->sd_dirty && m->sd_order) return ACCEL_OK;
    if (m->sd_order) stbds_header(m->sd_order)->length = 0;
    if (ACCEL__ARR_PUT(stack, 0) != 0) return ACCEL__FAIL(m->acc, ACCEL_ERR_OUT_OF_MEMORY, "model: out of memory");
    while (stbds_arrlen(stack) > 0 && r == ACCEL_OK) {
        int mi = stbds_arrpop(stack);
        const accel__ckpt_mmod *d = &m->mods[mi];
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
ACCEL__DEF int accel_ckpt_model_tensor_count(const accel_ckpt_model *m) { return m ? (int)stbds_arrlen(m->tens) : 0; }
ACCEL__DEF accel_result accel_ckpt_model_tensor(const accel_ckpt_model *m, int i, accel_tensor *t, int *is_buffer,
                                                const char **tied_to) {
    accel_ckpt_model *mm = (accel_ckpt_model *)m; /* the order is a cache */
    const accel__ckpt_mten *x;
    accel_result r;
    if (!m || i < 0 || i >= (int)stbds_arrlen(m->tens))
        return ACCEL__FAIL(m ? m->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, "model_tensor: index %d out of range", i);
    r = accel__ckpt_model_sd(mm);
    if (r != ACCEL_OK) return r;
    x = &m->tens[m->sd_order[i]];
    if (t) *t = x->t;
    if (is_buffer) *is_buffer = x->is_buffer;
    if (tied_to) *tied_to = x->storage != m->sd_order[i] ? m->tens[x->storage].t.name : NULL;
    return ACCEL_OK;
}

ACCEL__DEF accel_dtype accel_ckpt_dtype_from_torch(const char *s) {
    static const struct { const char *name; accel_dtype d; } map[] = {
        {"float32", ACCEL_F32}, {"float", ACCEL_F32}, {"float64", ACCEL_F64}, {"double", ACCEL_F64},
        {"float16", ACCEL_F16}, {"half", ACCEL_F16}, {"bfloat16", ACCEL_BF16}, {"int64", ACCEL_I64},
        {"long", ACCEL_I64}, {"int32", ACCEL_I32}, {"int", ACCEL_I32}, {"int16", ACCEL_I16}, {"short", ACCEL_I16},
        {"int8", ACCEL_I8}, {"uint8", ACCEL_U8}, {"uint16", ACCEL_U16}, {"uint32", ACCEL_U32}, {"uint64", ACCEL_U64},
        {"bool", ACCEL_BOOL}, {"float8_e4m3fn", ACCEL_F8_E4M3}, {"float8_e5m2", ACCEL_F8_E5M2}};
    size_t i;
    if (!s) return ACCEL_DTYPE_INVALID;
    if (accel_dtype_from_name(s) != ACCEL_DTYPE_INVALID) return accel_dtype_from_name(s);
    if (!strncmp(s, "torch.", 6)) s += 6;
    for (i = 0; i < sizeof map / sizeof map[0]; ++i)
        if (!strcmp(map[i].name, s)) return map[i].d;
    return ACCEL_DTYPE_INVALID;
}

/* ---- the JSON form */
typedef struct accel__ckpt_jname { const char *name; int node; } accel__ckpt_jname;
static int accel__ckpt_jname_cmp(const void *a, const void *b) {
    return strcmp(((const accel__ckpt_jname *)a)->name, ((const accel__ckpt_jname *)b)->name);
}
static int accel__ckpt_jname_find(const accel__ckpt_jname *v, int n, const char *name) {
    accel__ckpt_jname key, *hit;
    if (n <= 0) return -1;
    key.name = name;
    key.node = 0;
    hit = (accel__ckpt_jname *)bsearch(&key, v, (size_t)n, sizeof *v, accel__ckpt_jname_cmp);
    return hit ? (int)(hit - v) : -1;
}
static int accel__ckpt_jchild(const accel__ckpt_json *j, int nd, int k) { /* k-th element of an array, -1 if none */
    int c = j->nodes[nd].first;
    while (c >= 0 && k-- > 0) c = j->nodes[c].next;
    return c;
}
static int accel__ckpt_jis_str(const accel__ckpt_json *j, int nd) {
    return nd >= 0 && j->nodes[nd].type == ACCEL__CKPT_J_STR && strlen(accel__ckpt_jstr(j, nd)) == j->nodes[nd].len;
}

typedef struct accel__ckpt_mload {
    accel_ckpt_model *m;
    accel__ckpt_json *j;
    accel__ckpt_jname *mods, *tens, *alias; /* sorted views of "modules", "tensors", aliases (node = their param) */
    int nmods, ntens, nalias;
    int *mod_used, *ten_used;
    int *pending;                           /* stb_ds: tensors waiting for the parameter they alias */
    const char **pending_of;                /* stb_ds: that parameter's name */
    accel__sb full;
} accel__ckpt_mload;

/* The full name of a child listed by `parent`: a local name, or a full name under the parent. */
static accel_result accel__ckpt_mload_full(accel__ckpt_mload *L, const char *parent, const char *entry, const char *what) {
    size_t pl = strlen(parent);
    L->full.n = 0;
    if (strchr(entry, '.')) {
        if (!pl || strncmp(entry, parent, pl) || entry[pl] != '.' || strchr(entry + pl + 1, '.'))
            return ACCEL__FAIL(L->m->acc, ACCEL_ERR_FORMAT, "model JSON: %s \"%.200s\" of module \"%.200s\" is neither a local "
                               "name nor a name directly under it", what, entry, parent);
        accel__sb_puts(&L->full, entry);
    } else {
        if (!*entry) return ACCEL__FAIL(L->m->acc, ACCEL_ERR_FORMAT, "model JSON: module \"%.200s\" lists an empty %s name", parent, what);
        accel__sb_puts(&L->full, parent);
        if (pl) accel__sb_puts(&L->full, ".");
        accel__sb_puts(&L->full, entry);
    }
    if (L->full.oom) return accel__fail_wrap(L->m->acc, ACCEL_ERR_OUT_OF_MEMORY, "model JSON");
    return ACCEL_OK;
}
/* A tensor of "tensors" as an accel_tensor. */
static accel_result accel__ckpt_mload_tensor(accel__ckpt_mload *L, int k, const char *name, accel_tensor *t) {
    const accel__ckpt_json *j = L->j;
    int nd = L->tens[k].node, sh = accel__ckpt_jchild(j, nd, 1), dt = accel__ckpt_jchild(j, nd, 2), c, d = 0;
    memset(t, 0, sizeof *t);
    t->name = name;
    if (sh < 0 || j->nodes[sh].type != ACCEL__CKPT_J_ARR || !accel__ckpt_jis_str(j, dt) || j->nodes[nd].count != 3)
        return ACCEL__FAIL(L->m->acc, ACCEL_ERR_FORMAT, "model JSON: tensor \"%.200s\" is not [name, [shape], dtype]", name);
    if (j->nodes[sh].count > ACCEL_MAX_DIMS)
        return ACCEL__FAIL(L->m->acc, ACCEL_ERR_UNSUPPORTED, "model JSON: tensor \"%.200s\" has %d dimensions (accel supports %d)",
                           name, j->nodes[sh].count, ACCEL_MAX_DIMS);
    for (c = j->nodes[sh].first; c >= 0; c = j->nodes[c].next, ++d) {
        uint64_t v;
        if (accel__ckpt_ju64(j, c, &v) || v > (uint64_t)INT64_MAX)
            return ACCEL__FAIL(L->m->acc, ACCEL_ERR_FORMAT, "model JSON: tensor \"%.200s\": the shape holds non-negative integers", name);
        t->shape[d] = (int64_t)v;
    }
    t->ndim = d;
    t->dtype = accel_ckpt_dtype_from_torch(accel__ckpt_jstr(j, dt));
    if (t->dtype == ACCEL_DTYPE_INVALID)
        return ACCEL__FAIL(L->m->acc, ACCEL_ERR_FORMAT, "model JSON: tensor \"%.200s\": unknown dtype \"%.60s\"", name, accel__ckpt_jstr(j, dt));
    return ACCEL_OK;
}
/* Adds module `mi` (a JSON node of "modules") named `name` under `parent`, then everything it lists, depth-first. */
static accel_result accel__ckpt_mload_module(accel__ckpt_mload *L, int k, int model_idx, int depth) {
    const accel__ckpt_json *j = L->j;
    int nd = L->mods[k].node, lists[3], li, c;
    const char *name = L->mods[k].name;
    accel_result r = ACCEL_OK;
    if (depth > 10000) return ACCEL__FAIL(L->m->acc, ACCEL_ERR_FORMAT, "model JSON: modules nested deeper than 10000");
    if (L->mod_used[k]++) return ACCEL__FAIL(L->m->acc, ACCEL_ERR_FORMAT, "model JSON: module \"%.200s\" is listed as a child twice", name);
    for (li = 0; li < 3; ++li) {
        lists[li] = accel__ckpt_jchild(j, nd, 2 + li);
        if (lists[li] < 0 || j->nodes[lists[li]].type != ACCEL__CKPT_J_ARR)
            return ACCEL__FAIL(L->m->acc, ACCEL_ERR_FORMAT, "model JSON: module \"%.200s\" is not [name, class, [children], [params], "
                               "[buffers]]", name);
    }
    /* parameters, then buffers, of this module; then its children */
    for (li = 1; li < 3 && r == ACCEL_OK; ++li) {
        for (c = j->nodes[lists[li]].first; c >= 0 && r == ACCEL_OK; c = j->nodes[c].next) {
            int tk, ak;
            if (!accel__ckpt_jis_str(j, c)) return ACCEL__FAIL(L->m->acc, ACCEL_ERR_FORMAT, "model JSON: module \"%.200s\": names are strings", name);
            r = accel__ckpt_mload_full(L, name, accel__ckpt_jstr(j, c), li == 1 ? "parameter" : "buffer");
            if (r != ACCEL_OK) break;
            tk = accel__ckpt_jname_find(L->tens, L->ntens, L->full.p);
            ak = accel__ckpt_jname_find(L->alias, L->nalias, L->full.p);
            if (tk >= 0) {
                accel_tensor t;
                if (L->ten_used[tk]++) return ACCEL__FAIL(L->m->acc, ACCEL_ERR_FORMAT, "model JSON: tensor \"%.200s\" is listed twice", L->full.p);
                r = accel__ckpt_mload_tensor(L, tk, L->full.p, &t);
                if (r == ACCEL_OK) r = accel__ckpt_check_model_tensor(L->m, &t);
                if (r == ACCEL_OK && accel__ckpt_mfind(L->m, t.name, NULL) >= 0)
                    r = ACCEL__FAIL(L->m->acc, ACCEL_ERR_FORMAT, "model JSON: \"%.200s\" is both a module and a tensor", t.name);
                if (r == ACCEL_OK) r = accel__ckpt_model_add_ten(L->m, &t, li == 2, model_idx, -2);
            } else if (ak >= 0 && li == 1) {
                accel_tensor t;
                memset(&t, 0, sizeof t);
                t.name = L->full.p;
                t.dtype = ACCEL_U8; /* until its parameter is known */
                if (accel__ckpt_mfind(L->m, t.name, NULL) >= 0)
                    return ACCEL__FAIL(L->m->acc, ACCEL_ERR_FORMAT, "model JSON: \"%.200s\" is listed twice", t.name);
                if (accel__arr_reserve((void **)&L->pending, sizeof(int), 1) != 0 ||
                    accel__arr_reserve((void **)&L->pending_of, sizeof(char *), 1) != 0)
                    return ACCEL__FAIL(L->m->acc, ACCEL_ERR_OUT_OF_MEMORY, "model JSON: out of memory");
                r = accel__ckpt_model_add_ten(L->m, &t, 0, model_idx, -1);
                if (r == ACCEL_OK) {
                    (void)ACCEL__ARR_PUT(L->pending, (int)stbds_arrlen(L->m->tens) - 1);
                    (void)ACCEL__ARR_PUT(L->pending_of, L->alias[ak].name); /* the alias; its parameter is looked up later */
                }
            } else {
                return ACCEL__FAIL(L->m->acc, ACCEL_ERR_FORMAT, "model JSON: %s \"%.200s\" of module \"%.200s\" is not in \"tensors\"%s",
                                   li == 1 ? "parameter" : "buffer", L->full.p, name, li == 1 ? " nor a tied alias" : "");
            }
        }
    }
    for (c = j->nodes[lists[0]].first; c >= 0 && r == ACCEL_OK; c = j->nodes[c].next) {
        int ck, cls, cidx;
        if (!accel__ckpt_jis_str(j, c)) return ACCEL__FAIL(L->m->acc, ACCEL_ERR_FORMAT, "model JSON: module \"%.200s\": names are strings", name);
        r = accel__ckpt_mload_full(L, name, accel__ckpt_jstr(j, c), "child");
        if (r != ACCEL_OK) break;
        ck = accel__ckpt_jname_find(L->mods, L->nmods, L->full.p);
        if (ck < 0) return ACCEL__FAIL(L->m->acc, ACCEL_ERR_FORMAT, "model JSON: child \"%.200s\" of \"%.200s\" is not in \"modules\"", L->full.p, name);
        cls = accel__ckpt_jchild(j, L->mods[ck].node, 1);
        if (!accel__ckpt_jis_str(j, cls)) return ACCEL__FAIL(L->m->acc, ACCEL_ERR_FORMAT, "model JSON: module \"%.200s\" has no class name", L->full.p);
        if (accel__ckpt_mfind(L->m, L->full.p, NULL) >= 0)
            return ACCEL__FAIL(L->m->acc, ACCEL_ERR_FORMAT, "model JSON: \"%.200s\" is listed twice", L->full.p);
        cidx = (int)stbds_arrlen(L->m->mods);
        r = accel__ckpt_model_add_mod(L->m, L->full.p, accel__ckpt_jstr(j, cls), model_idx);
        if (r == ACCEL_OK) r = accel__ckpt_mload_module(L, ck, cidx, depth + 1);
    }
    return r;
}
static accel_result accel__ckpt_mload_names(accel__ckpt_mload *L, int arr, accel__ckpt_jname **out, int *n, const char *what) {
    const accel__ckpt_json *j = L->j;
    int c, k = 0;
    if (arr < 0 || j->nodes[arr].type != ACCEL__CKPT_J_ARR)
        return ACCEL__FAIL(L->m->acc, ACCEL_ERR_FORMAT, "model JSON: \"%s\" is not an array", what);
    *out = (accel__ckpt_jname *)accel__ckpt_zalloc(L->m->acc, (size_t)j->nodes[arr].count, sizeof **out);
    if (!*out) return accel__fail_wrap(L->m->acc, ACCEL_ERR_OUT_OF_MEMORY, "model JSON");
    for (c = j->nodes[arr].first; c >= 0; c = j->nodes[c].next, ++k) {
        int nm = j->nodes[c].type == ACCEL__CKPT_J_ARR ? j->nodes[c].first : -1;
        if (!accel__ckpt_jis_str(j, nm)) return ACCEL__FAIL(L->m->acc, ACCEL_ERR_FORMAT, "model JSON: entry %d of \"%s\" does not start with a name", k, what);
        (*out)[k].name = accel__ckpt_jstr(j, nm);
        (*out)[k].node = c;
    }
    *n = k;
    qsort(*out, (size_t)k, sizeof **out, accel__ckpt_jname_cmp);
    for (k = 1; k < *n; ++k)
        if (!strcmp((*out)[k - 1].name, (*out)[k].name))
            return ACCEL__FAIL(L->m->acc, ACCEL_ERR_FORMAT, "model JSON: \"%.200s\" appears twice in \"%s\"", (*out)[k].name, what);
    return ACCEL_OK;
}
ACCEL__DEF accel_result accel_ckpt_model_open_memory(accel *acc, const void *json, size_t n, accel_ckpt_model **out) {
    accel__ckpt_json j;
    accel__ckpt_mload L;
    int root, tied, c, k, rootk;
    size_t bad = 0;
    accel_result r;
    if (!out || (!json && n)) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "model_open: NULL argument");
    *out = NULL;
    if (!accel__utf8_valid((const unsigned char *)json, n, &bad))
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "model JSON is not valid UTF-8 (byte %lu)", (unsigned long)bad);
    memset(&L, 0, sizeof L);
    root = accel__ckpt_json_parse(&j, acc, json, n);
    if (root < 0) {
        r = accel__ckpt_json_failed(acc, &j, "model JSON");
        accel__ckpt_json_free(&j);
        return r;
    }
    L.j = &j;
    accel__sb_init(&L.full, acc);
    r = accel__ckpt_model_new(acc, "Module", &L.m);
    if (r == ACCEL_OK && j.nodes[root].type != ACCEL__CKPT_J_OBJ)
        r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "model JSON: expected an object with \"modules\" and \"tensors\"");
    if (r == ACCEL_OK) r = accel__ckpt_mload_names(&L, accel__ckpt_jget(&j, root, "modules"), &L.mods, &L.nmods, "modules");
    if (r == ACCEL_OK) r = accel__ckpt_mload_names(&L, accel__ckpt_jget(&j, root, "tensors"), &L.tens, &L.ntens, "tensors");
    tied = r == ACCEL_OK ? accel__ckpt_jget(&j, root, "tied") : -1;
    if (r == ACCEL_OK && tied >= 0 && j.nodes[tied].type != ACCEL__CKPT_J_ARR)
        r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "model JSON: \"tied\" is not an array of name lists");
    if (r == ACCEL_OK && tied >= 0) { /* aliases: every name of a group but the first (node = the group's first name) */
        int total = 0, g;
        for (g = j.nodes[tied].first; g >= 0; g = j.nodes[g].next) total += j.nodes[g].type == ACCEL__CKPT_J_ARR ? j.nodes[g].count : 0;
        L.alias = (accel__ckpt_jname *)accel__ckpt_zalloc(acc, (size_t)total, sizeof *L.alias);
        if (!L.alias) r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "model JSON");
        for (g = j.nodes[tied].first; g >= 0 && r == ACCEL_OK; g = j.nodes[g].next) {
            int first = j.nodes[g].type == ACCEL__CKPT_J_ARR ? j.nodes[g].first : -1;
            if (!accel__ckpt_jis_str(&j, first) || j.nodes[g].count < 2) {
                r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "model JSON: each \"tied\" group is a list of two or more names");
                break;
            }
            for (c = j.nodes[first].next; c >= 0; c = j.nodes[c].next) {
                if (!accel__ckpt_jis_str(&j, c)) { r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "model JSON: \"tied\" holds names"); break; }
                L.alias[L.nalias].name = accel__ckpt_jstr(&j, c);
                L.alias[L.nalias++].node = first;
            }
        }
        if (r == ACCEL_OK) {
            qsort(L.alias, (size_t)L.nalias, sizeof *L.alias, accel__ckpt_jname_cmp);
            for (k = 1; k < L.nalias; ++k)
                if (!strcmp(L.alias[k - 1].name, L.alias[k].name))
                    r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "model JSON: \"%.200s\" is tied twice", L.alias[k].name);
            for (k = 0; k < L.nalias && r == ACCEL_OK; ++k)
                if (accel__ckpt_jname_find(L.tens, L.ntens, L.alias[k].name) >= 0)
                    r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "model JSON: the alias \"%.200s\" is also in \"tensors\" (only a group's first "
                                    "name is)", L.alias[k].name);
        }
    }
    if (r == ACCEL_OK) {
        L.mod_used = (int *)accel__ckpt_zalloc(acc, (size_t)L.nmods, sizeof(int));
        L.ten_used = (int *)accel__ckpt_zalloc(acc, (size_t)L.ntens, sizeof(int));
        if (!L.mod_used || !L.ten_used) r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "model JSON");
    }
    rootk = r == ACCEL_OK ? accel__ckpt_jname_find(L.mods, L.nmods, "") : -1;
    if (r == ACCEL_OK && rootk < 0) r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "model JSON: no root module \"\" in \"modules\"");
    if (r == ACCEL_OK) {
        int cls = accel__ckpt_jchild(&j, L.mods[rootk].node, 1);
        if (!accel__ckpt_jis_str(&j, cls)) r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "model JSON: the root module has no class name");
        else {
            char *cn = accel__ckpt_strndup(acc, accel__ckpt_jstr(&j, cls), j.nodes[cls].len);
            if (!cn) r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "model JSON");
            else {
                accel_host_free(acc, L.m->mods[0].cls);
                L.m->mods[0].cls = cn;
            }
        }
    }
    if (r == ACCEL_OK) r = accel__ckpt_mload_module(&L, rootk, 0, 0);
    for (k = 0; k < L.nmods && r == ACCEL_OK; ++k)
        if (!L.mod_used[k]) r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "model JSON: module \"%.200s\" is nobody's child", L.mods[k].name);
    for (k = 0; k < L.ntens && r == ACCEL_OK; ++k)
        if (!L.ten_used[k]) r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "model JSON: tensor \"%.200s\" is in no module's lists", L.tens[k].name);
    /* aliases: their parameter (the first name of their group) */
    for (k = 0; k < (int)stbds_arrlen(L.pending) && r == ACCEL_OK; ++k) {
        int ak = accel__ckpt_jname_find(L.alias, L.nalias, L.pending_of[k]), kind = -1, p;
        const char *pname = accel__ckpt_jstr(&j, L.alias[ak].node);
        accel__ckpt_mten *x = &L.m->tens[L.pending[k]];
        p = accel__ckpt_mfind(L.m, pname, &kind);
        if (p < 0 || kind != ACCEL__CKPT_TEN || L.m->tens[p].is_buffer || L.m->tens[p].storage != p) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "model JSON: \"%.200s\" is tied to \"%.200s\", which is not a parameter in \"tensors\"",
                            x->t.name, pname);
            break;
        }
        x->storage = p;
        x->t.dtype = L.m->tens[p].t.dtype;
        x->t.ndim = L.m->tens[p].t.ndim;
        memcpy(x->t.shape, L.m->tens[p].t.shape, sizeof x->t.shape);
    }
    for (k = 0; k < L.nalias && r == ACCEL_OK; ++k) {
        int kind = -1, a = accel__ckpt_mfind(L.m, L.alias[k].name, &kind);
        if (a < 0 || kind != ACCEL__CKPT_TEN)
            r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "model JSON: the tied alias \"%.200s\" is no module's parameter", L.alias[k].name);
    }
    if (r == ACCEL_OK && tied >= 0) /* the groups in the order they are listed */
        for (c = j.nodes[tied].first; c >= 0 && r == ACCEL_OK; c = j.nodes[c].next)
            r = accel__ckpt_model_group(L.m, accel__ckpt_mfind(L.m, accel__ckpt_jstr(&j, j.nodes[c].first), NULL));
    accel__sb_free(&L.full);
    accel_host_free(acc, L.mods);
    accel_host_free(acc, L.tens);
    accel_host_free(acc, L.alias);
    accel_host_free(acc, L.mod_used);
    accel_host_free(acc, L.ten_used);
    stbds_arrfree(L.pending);
    stbds_arrfree(L.pending_of);
    accel__ckpt_json_free(&j);
    if (r != ACCEL_OK) {
        accel_ckpt_model_destroy(L.m);
        return r;
    }
    *out = L.m;
    return ACCEL_OK;
}
ACCEL__DEF accel_result accel_ckpt_model_open(accel *acc, const char *path, accel_ckpt_model **out) {
    char *data = NULL;
    size_t n = 0;
    accel_result r;
    if (!path || !out) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "model_open: NULL argument");
    *out = NULL;
    r = accel__read_file(acc, path, &data, &n, (size_t)1 << 30);
    if (r != ACCEL_OK) return r;
    r = accel_ckpt_model_open_memory(acc, data, n, out);
    if (r != ACCEL_OK) r = accel__fail_wrap(acc, r, "%.400s", path);
    accel_host_free(acc, data);
    return r;
}

/* ----------------------------------------------- 14. module sizes, max layer, balanced memory (docs/semantics.md §9) */
/* Sizes are counted in bits: Accelerate counts a bool as 1/8 byte, so its sizes are multiples of 1/8. */
static int64_t accel__ckpt_dtype_bits(accel_dtype d) { return d == ACCEL_BOOL ? 1 : (int64_t)accel_dtype_size(d) * 8; }
static int accel__ckpt_dtype_is_int(accel_dtype d) { /* Accelerate: str(dtype).startswith(("torch.uint", "torch.int", "torch.bool")) */
    return d == ACCEL_I64 || d == ACCEL_I32 || d == ACCEL_I16 || d == ACCEL_I8 || d == ACCEL_U64 || d == ACCEL_U32 ||
           d == ACCEL_U16 || d == ACCEL_U8 || d == ACCEL_BOOL;
}

typedef struct accel__ckpt_sz {
    int64_t *mod_bits, *ten_bits; /* per module / tensor (an alias that named_parameters skips: 0) */
    accel__ckpt_ref *keys;        /* compute_module_sizes' keys in insertion order (acc's allocator) */
    int nkeys;
} accel__ckpt_sz;
static void accel__ckpt_sz_free(accel *acc, accel__ckpt_sz *s) {
    accel_host_free(acc, s->mod_bits);
    accel_host_free(acc, s->ten_bits);
    accel_host_free(acc, s->keys);
    memset(s, 0, sizeof *s);
}
static int accel__ckpt_class_in(const char *cls, const char *const *list, int n) {
    int i;
    for (i = 0; i < n; ++i)
        if (list[i] && !strcmp(list[i], cls)) return 1;
    return 0;
}
/* compute_module_sizes: named_parameters (storages deduplicated, depth-first) then named_buffers; each tensor's size is
   added to every prefix of its name, "" included. */
/* The largest model the sizing accepts, in bits (2^57 bytes = 128 PiB): its sums and margins then fit in int64. */
#define ACCEL__CKPT_MAX_MODEL_BITS ((int64_t)1 << 60)
static accel_result accel__ckpt_sizes(accel_ckpt_model *m, const accel_ckpt_map_desc *d, accel__ckpt_sz *s) {
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
    s->mod_bits = (int64_t *)accel__ckpt_zalloc(acc, (size_t)nm, sizeof(int64_t));
    s->ten_bits = (int64_t *)accel__ckpt_zalloc(acc, (size_t)nt, sizeof(int64_t));
    s->keys = (accel__ckpt_ref *)accel__ckpt_zalloc(acc, (size_t)(nm + nt), sizeof(accel__ckpt_ref));
    mseen = (unsigned char *)accel__ckpt_zalloc(acc, (size_t)nm, 1);
    sseen = (unsigned char *)accel__ckpt_zalloc(acc, (size_t)nt, 1);
    chain = (int *)accel__ckpt_zalloc(acc, (size_t)nm, sizeof(int));
    if (!s->mod_bits || !s->ten_bits || !s->keys || !mseen || !sseen || !chain) r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "module sizes");
    for (pass = 0; pass < 2 && r == ACCEL_OK; ++pass) { /* 0: parameters, 1: buffers; modules depth-first */
        if (stack) stbds_header(stack)->length = 0;
        if (ACCEL__ARR_PUT(stack, 0) != 0) r = ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "module sizes: out of memory");
        while (r == ACCEL_OK && stbds_arrlen(stack) > 0) {
            int mi = stbds_arrpop(stack);
            const int *list = pass ? m->mods[mi].buffers : m->mods[mi].params;
            for (i = 0; i < (int)stbds_arrlen(list) && r == ACCEL_OK; ++i) {
                int ti = list[i], st = m->tens[ti].storage, nc = 0, c;
                const accel_tensor *t = &m->tens[ti].t;
                int64_t numel = accel_tensor_numel(t), bits = accel__ckpt_dtype_bits(t->dtype), per;
                if (sseen[st]) continue; /* named_parameters yields a shared parameter once, under its first name */
                sseen[st] = 1;
                for (k = 0; d && k < d->n_special_dtypes; ++k)
                    if (!strcmp(d->special_dtypes[k].name, t->name)) break;
                if (d && k < d->n_special_dtypes) per = accel__ckpt_dtype_bits(d->special_dtypes[k].dtype);
                else if (!d || d->dtype == ACCEL_DTYPE_INVALID || accel__ckpt_dtype_is_int(t->dtype)) per = bits;
                else per = accel__ckpt_dtype_bits(d->dtype) < bits ? accel__ckpt_dtype_bits(d->dtype) : bits;
                /* sizes are bits in int64: a model is kept under 2^60 bits (128 PiB) so that the placement's sums
                   and 1.25x margins of them stay in range (a description could claim exabytes) */
                if (numel < 0 || (per && numel > ACCEL__CKPT_MAX_MODEL_BITS / per)) { r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "module sizes: \"%.200s\" is too large (more than 2^57 bytes)", t->name); break; }
                bits = numel * per;
                s->ten_bits[ti] = bits;
                for (c = m->tens[ti].module; c >= 0; c = m->mods[c].parent) chain[nc++] = c;
                while (nc > 0) {
                    c = chain[--nc];
                    if (s->mod_bits[c] > ACCEL__CKPT_MAX_MODEL_BITS - bits) { r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "module sizes: the total is more than 2^57 bytes"); break; }
                    s->mod_bits[c] += bits;
                    if (!mseen[c]) {
                        mseen[c] = 1;
                        s->keys[s->nkeys].kind = ACCEL__CKPT_MOD;
                        s->keys[s->nkeys++].idx = c;
                    }
                }
                s->keys[s->nkeys].kind = ACCEL__CKPT_TEN;
                s->keys[s->nkeys++].idx = ti;
            }
            for (i = (int)stbds_arrlen(m->mods[mi].children) - 1; i >= 0 && r == ACCEL_OK; --i)
                if (ACCEL__ARR_PUT(stack, m->mods[mi].children[i]) != 0) r = ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "module sizes: out of memory");
        }
    }
    stbds_arrfree(stack);
    accel_host_free(acc, mseen);
    accel_host_free(acc, sseen);
    accel_host_free(acc, chain);
    if (r != ACCEL_OK) accel__ckpt_sz_free(acc, s);
    return r;
}
static int64_t accel__ckpt_ref_bits(const accel__ckpt_sz *s, accel__ckpt_ref r) {
    return r.kind == ACCEL__CKPT_MOD ? s->mod_bits[r.idx] : s->ten_bits[r.idx];
}
static double accel__ckpt_bits_bytes(int64_t bits) { return (double)bits / 8.0; }

ACCEL__DEF accel_result accel_ckpt_module_sizes(accel_ckpt_model *m, const accel_ckpt_map_desc *d, accel_ckpt_size *out,
                                                int cap, int *n) {
    accel__ckpt_sz s;
    accel_result r;
    int i;
    if (!m || !n || cap < 0 || (cap > 0 && !out)) return ACCEL__FAIL(m ? m->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, "module_sizes: bad arguments");
    r = accel__ckpt_sizes(m, d, &s);
    if (r != ACCEL_OK) return r;
    *n = s.nkeys;
    if (cap >= s.nkeys)
        for (i = 0; i < s.nkeys; ++i) {
            out[i].name = accel__ckpt_ref_name(m, s.keys[i]);
            out[i].bytes = accel__ckpt_bits_bytes(accel__ckpt_ref_bits(&s, s.keys[i]));
        }
    accel__ckpt_sz_free(m->acc, &s);
    return ACCEL_OK;
}

/* A growable list of refs (the queue of infer_auto_device_map), every growth checked. */
typedef struct accel__ckpt_q { accel__ckpt_ref *v; int n, cap; accel *acc; int oom; } accel__ckpt_q;
static void accel__ckpt_q_free(accel__ckpt_q *q) {
    accel_host_free(q->acc, q->v);
    q->v = NULL;
    q->n = q->cap = 0;
}
static int accel__ckpt_q_insert(accel__ckpt_q *q, int pos, const accel__ckpt_ref *items, int k) {
    if (q->oom) return -1;
    if (q->n + k > q->cap) {
        int nc = q->cap ? q->cap : 16;
        accel__ckpt_ref *nv;
        while (nc < q->n + k) nc *= 2;
        nv = (accel__ckpt_ref *)accel_host_alloc(q->acc, sizeof *nv * (size_t)nc);
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
static accel__ckpt_ref accel__ckpt_q_take(accel__ckpt_q *q, int pos) {
    accel__ckpt_ref r = q->v[pos];
    memmove(q->v + pos, q->v + pos + 1, sizeof *q->v * (size_t)(q->n - pos - 1));
    --q->n;
    return r;
}
/* The entries a split replaces a module with: named_parameters(recurse=False) (a storage once) + named_children(). */
static int accel__ckpt_q_split(const accel_ckpt_model *m, accel__ckpt_q *out, int mi) {
    const accel__ckpt_mmod *d = &m->mods[mi];
    int i, k;
    out->n = 0;
    for (i = 0; i < (int)stbds_arrlen(d->params); ++i) {
        accel__ckpt_ref r;
        for (k = 0; k < i; ++k)
            if (m->tens[d->params[k]].storage == m->tens[d->params[i]].storage) break;
        if (k < i) continue;
        r.kind = ACCEL__CKPT_TEN;
        r.idx = d->params[i];
        if (accel__ckpt_q_insert(out, out->n, &r, 1)) return -1;
    }
    for (i = 0; i < (int)stbds_arrlen(d->children); ++i) {
        accel__ckpt_ref r;
        r.kind = ACCEL__CKPT_MOD;
        r.idx = d->children[i];
        if (accel__ckpt_q_insert(out, out->n, &r, 1)) return -1;
    }
    return 0;
}
static int accel__ckpt_has_children(const accel_ckpt_model *m, accel__ckpt_ref r) {
    return r.kind == ACCEL__CKPT_MOD && stbds_arrlen(m->mods[r.idx].children) > 0;
}
static int accel__ckpt_no_split(const accel_ckpt_model *m, const accel_ckpt_map_desc *d, accel__ckpt_ref r) {
    return r.kind == ACCEL__CKPT_MOD && d && accel__ckpt_class_in(m->mods[r.idx].cls, d->no_split_module_classes, d->n_no_split);
}
/* get_max_layer_size: the largest "layer" (no children, or a no-split class) under the given entries; only modules'
   children are descended into. names (may be NULL) receives the layers reaching it. */
static accel_result accel__ckpt_max_layer(const accel_ckpt_model *m, const accel_ckpt_map_desc *d, const accel__ckpt_sz *s,
                                          const accel__ckpt_ref *start, int nstart, int modules_only, int64_t *max,
                                          accel__ckpt_q *names) {
    accel__ckpt_q q;
    int i;
    memset(&q, 0, sizeof q);
    q.acc = m->acc;
    *max = 0;
    if (names) names->n = 0;
    for (i = 0; i < nstart; ++i)
        if ((!modules_only || start[i].kind == ACCEL__CKPT_MOD) && accel__ckpt_q_insert(&q, q.n, &start[i], 1)) break;
    while (q.n > 0 && !q.oom && !(names && names->oom)) {
        accel__ckpt_ref r = accel__ckpt_q_take(&q, 0);
        if (accel__ckpt_has_children(m, r) && !accel__ckpt_no_split(m, d, r)) {
            const accel__ckpt_mmod *md = &m->mods[r.idx];
            int k;
            for (k = (int)stbds_arrlen(md->children) - 1; k >= 0; --k) {
                accel__ckpt_ref c;
                c.kind = ACCEL__CKPT_MOD;
                c.idx = md->children[k];
                if (accel__ckpt_q_insert(&q, 0, &c, 1)) break;
            }
        } else {
            int64_t sz = accel__ckpt_ref_bits(s, r);
            if (sz > *max) {
                *max = sz;
                if (names) names->n = 0;
            }
            if (sz == *max && names) accel__ckpt_q_insert(names, names->n, &r, 1);
        }
    }
    i = q.oom || (names && names->oom);
    accel__ckpt_q_free(&q);
    return i ? ACCEL__FAIL(m->acc, ACCEL_ERR_OUT_OF_MEMORY, "max layer size: out of memory") : ACCEL_OK;
}
/* The root's named_parameters(recurse=False) + named_children() + named_buffers(recurse=False). */
static int accel__ckpt_root_entries(const accel_ckpt_model *m, accel__ckpt_q *q) {
    int i;
    if (accel__ckpt_q_split(m, q, 0)) return -1;
    for (i = 0; i < (int)stbds_arrlen(m->mods[0].buffers); ++i) {
        accel__ckpt_ref r;
        r.kind = ACCEL__CKPT_TEN;
        r.idx = m->mods[0].buffers[i];
        if (accel__ckpt_q_insert(q, q->n, &r, 1)) return -1;
    }
    return 0;
}
ACCEL__DEF accel_result accel_ckpt_max_layer_size(accel_ckpt_model *m, const accel_ckpt_map_desc *d, double *bytes,
                                                  const char **names, int cap, int *n) {
    accel__ckpt_sz s;
    accel__ckpt_q roots, layer;
    int64_t max = 0;
    accel_result r;
    int i;
    if (!m || !bytes || cap < 0 || (cap > 0 && (!names || !n))) return ACCEL__FAIL(m ? m->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, "max_layer_size: bad arguments");
    r = accel__ckpt_sizes(m, d, &s);
    if (r != ACCEL_OK) return r;
    memset(&roots, 0, sizeof roots);
    memset(&layer, 0, sizeof layer);
    roots.acc = layer.acc = m->acc;
    if (accel__ckpt_root_entries(m, &roots)) r = ACCEL__FAIL(m->acc, ACCEL_ERR_OUT_OF_MEMORY, "max_layer_size: out of memory");
    if (r == ACCEL_OK) r = accel__ckpt_max_layer(m, d, &s, roots.v, roots.n, 0, &max, &layer);
    if (r == ACCEL_OK) {
        *bytes = accel__ckpt_bits_bytes(max);
        if (n) *n = layer.n;
        if (names && cap >= layer.n)
            for (i = 0; i < layer.n; ++i) names[i] = accel__ckpt_ref_name(m, layer.v[i]);
    }
    accel__ckpt_q_free(&roots);
    accel__ckpt_q_free(&layer);
    accel__ckpt_sz_free(m->acc, &s);
    return r;
}

/* get_max_memory for a given dict: sizes in bits, keys checked and put in Accelerate's order (GPUs ascending, mps,
   cpu, disk). */
typedef struct accel__ckpt_dev { int device; int64_t bits; } accel__ckpt_dev;
static int accel__ckpt_dev_rank(int d) { return d >= 0 ? 0 : d == ACCEL_CKPT_MPS ? 1 : d == ACCEL_CKPT_CPU ? 2 : 3; }
static int accel__ckpt_dev_cmp(const void *a, const void *b) {
    const accel__ckpt_dev *x = (const accel__ckpt_dev *)a, *y = (const accel__ckpt_dev *)b;
    int rx = accel__ckpt_dev_rank(x->device), ry = accel__ckpt_dev_rank(y->device);
    if (rx != ry) return rx < ry ? -1 : 1;
    return x->device < y->device ? -1 : x->device > y->device;
}
ACCEL__DEF void accel_ckpt_device_name(int device, char *out, size_t cap) {
    if (!out || !cap) return;
    if (device >= 0) accel__fmt(out, cap, "%d", device);
    else accel__fmt(out, cap, "%s", device == ACCEL_CKPT_CPU ? "cpu" : device == ACCEL_CKPT_DISK ? "disk" : device == ACCEL_CKPT_MPS ? "mps" : "?");
}
static accel_result accel__ckpt_norm_memory(accel *acc, const accel_ckpt_map_desc *d, accel__ckpt_dev **out, int *nout) {
    int i, k, n = d ? d->n_max_memory : 0;
    accel__ckpt_dev *v;
    *out = NULL;
    *nout = 0;
    if (n < 0 || (n > 0 && !d->max_memory)) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "max_memory: bad list (n=%d)", n);
    v = (accel__ckpt_dev *)accel__ckpt_zalloc(acc, (size_t)n, sizeof *v);
    if (!v) return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "max_memory");
    for (i = 0; i < n; ++i) {
        const accel_ckpt_memory *e = &d->max_memory[i];
        double b = e->bytes * 8.0;
        if (e->device < 0 && e->device != ACCEL_CKPT_CPU && e->device != ACCEL_CKPT_DISK && e->device != ACCEL_CKPT_MPS) {
            accel_host_free(acc, v);
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "Device %d is not recognized, available devices are integers(for "
                               "GPU/XPU), 'mps', 'cpu' and 'disk'", e->device);
        }
        if (!(b >= -4.0e18 && b <= 4.0e18)) { /* also NaN */
            accel_host_free(acc, v);
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "max_memory: %g bytes for device %d is out of range", e->bytes, e->device);
        }
        for (k = 0; k < i; ++k)
            if (v[k].device == e->device) {
                char nm[32];
                accel_host_free(acc, v);
                accel_ckpt_device_name(e->device, nm, sizeof nm);
                return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "max_memory lists device %s twice", nm);
            }
        v[i].device = e->device;
        v[i].bits = (int64_t)b;
        if ((double)v[i].bits > b) --v[i].bits; /* floor */
    }
    if (n > 1) qsort(v, (size_t)n, sizeof *v, accel__ckpt_dev_cmp);
    *out = v;
    *nout = n;
    return ACCEL_OK;
}
static int accel__ckpt_dev_find(const accel__ckpt_dev *v, int n, int device) {
    int i;
    for (i = 0; i < n; ++i)
        if (v[i].device == device) return i;
    return -1;
}
static int accel__ckpt_parent_key(const accel_ckpt_model *m, accel__ckpt_ref r) { /* the module a dotted key's rsplit gives */
    if (r.kind == ACCEL__CKPT_MOD) return r.idx == 0 || m->mods[r.idx].parent == 0 ? -1 : m->mods[r.idx].parent;
    return m->tens[r.idx].module == 0 ? -1 : m->tens[r.idx].module;
}

ACCEL__DEF accel_result accel_ckpt_balanced_memory(accel_ckpt_model *m, const accel_ckpt_map_desc *d,
                                                   accel_ckpt_memory *out, int cap, int *n) {
    accel *acc = m ? m->acc : NULL;
    accel__ckpt_dev *mem = NULL;
    accel__ckpt_sz s;
    int nmem = 0, i, k, num = 0, low_zero, *count = NULL, nfound = 0, ncls;
    int64_t total, per_gpu, buffer = 0, leaf_sum = 0, nleaves = 0, mean, big;
    accel_result r;
    if (!m || !n || cap < 0 || (cap > 0 && !out)) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "balanced_memory: bad arguments");
    memset(&s, 0, sizeof s);
    r = accel__ckpt_norm_memory(acc, d, &mem, &nmem);
    if (r != ACCEL_OK) return r;
    if (accel__ckpt_dev_find(mem, nmem, ACCEL_CKPT_DISK) >= 0) {
        accel_host_free(acc, mem);
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "get_balanced_memory: max_memory has a \"disk\" key (Accelerate raises "
                           "RuntimeError: Expected one of cpu, cuda, ... device type at start of device string: disk)");
    }
    for (i = 0; i < nmem; ++i) num += mem[i].device >= 0 && mem[i].bits > 0;
    low_zero = d && d->low_zero && num > 1; /* one GPU: no low_zero (and accel never defaults max_memory: no 90%) */
    if (num > 0) r = accel__ckpt_sizes(m, d, &s);
    if (num > 0 && r == ACCEL_OK) {
        total = s.mod_bits[0];
        per_gpu = total / (8 * (int64_t)(low_zero ? num - 1 : num)) * 8; /* module_sizes[""] // n, in bytes */
        /* the first module of each no-split class, in the dict's order (a tensor's class is Parameter or Tensor) */
        ncls = d ? d->n_no_split : 0;
        count = (int *)accel__ckpt_zalloc(acc, (size_t)stbds_arrlen(m->mods), sizeof(int));
        if (!count) r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "balanced_memory");
        if (r == ACCEL_OK && ncls > 0) {
            const char **fcls = (const char **)accel__ckpt_zalloc(acc, (size_t)ncls, sizeof(char *));
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
                accel__ckpt_ref key = s.keys[i];
                const char *cls;
                if (key.kind == ACCEL__CKPT_MOD && key.idx == 0) continue;
                cls = key.kind == ACCEL__CKPT_MOD ? m->mods[key.idx].cls : m->tens[key.idx].is_buffer ? "Tensor" : "Parameter";
                if (!accel__ckpt_class_in(cls, d->no_split_module_classes, ncls) || accel__ckpt_class_in(cls, fcls, nfound)) continue;
                fcls[nfound++] = cls;
                if (accel__ckpt_ref_bits(&s, key) > buffer) buffer = accel__ckpt_ref_bits(&s, key);
            }
            accel_host_free(acc, (void *)fcls);
        }
        if (r == ACCEL_OK) {
            /* get_module_leaves twice: the tensors are the first leaves; the final modules are the module keys left
               without a module key below them */
            for (i = 0; i < s.nkeys; ++i)
                if (s.keys[i].kind == ACCEL__CKPT_MOD && s.keys[i].idx != 0) {
                    int p = accel__ckpt_parent_key(m, s.keys[i]);
                    if (p >= 0) count[p]++;
                }
            for (i = 0; i < s.nkeys; ++i)
                if (s.keys[i].kind == ACCEL__CKPT_MOD && s.keys[i].idx != 0 && count[s.keys[i].idx] == 0) {
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
                int z = accel__ckpt_dev_find(mem, nmem, 0);
                for (k = 1; k < num && r == ACCEL_OK; ++k) {
                    int at = accel__ckpt_dev_find(mem, nmem, k);
                    if (at < 0) r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "get_balanced_memory(low_zero): max_memory has no GPU %d "
                                                "(Accelerate sums GPUs 1..n-1 by number and raises KeyError: %d)", k, k);
                    else sum += mem[at].bits;
                }
                if (r == ACCEL_OK && z < 0)
                    r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "get_balanced_memory(low_zero): max_memory has no GPU 0 (Accelerate "
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
                out[i].bytes = accel__ckpt_bits_bytes(mem[i].bits);
            }
    }
    accel_host_free(acc, count);
    accel_host_free(acc, mem);
    accel__ckpt_sz_free(acc, &s);
    return r;
}

/* ------------------------------------------------------------ 15. infer_auto_device_map, clean_device_map (§9) */
/* "name." is a substring of "k." (Accelerate's test of whether a tied parameter is inside a module: a substring, not a
   prefix, test — kept, quirk included). */
static int accel__ckpt_dotin(const char *name, const char *k) {
    size_t ln = strlen(name), lk = strlen(k), p;
    if (ln > lk) return 0;
    for (p = 0; p + ln <= lk; ++p)
        if (!memcmp(k + p, name, ln) && (p + ln == lk || k[p + ln] == '.')) return 1;
    return 0;
}
static int accel__ckpt_startswith_dot(const char *s, const char *prefix) { /* s.startswith(prefix + ".") */
    size_t l = strlen(prefix);
    return !strncmp(s, prefix, l) && s[l] == '.';
}

/* The ordered dict device_map. */
typedef struct accel__ckpt_dmap { accel_ckpt_placement *v; int n, cap; accel *acc; int oom; } accel__ckpt_dmap;
static int accel__ckpt_dmap_find(const accel__ckpt_dmap *dm, const char *name) {
    int i;
    for (i = 0; i < dm->n; ++i)
        if (!strcmp(dm->v[i].name, name)) return i;
    return -1;
}
static void accel__ckpt_dmap_set(accel__ckpt_dmap *dm, const char *name, int device) { /* d[name] = device */
    int i = accel__ckpt_dmap_find(dm, name);
    if (i >= 0) { dm->v[i].device = device; return; }
    if (dm->oom) return;
    if (dm->n == dm->cap) {
        int nc = dm->cap ? dm->cap * 2 : 16;
        accel_ckpt_placement *nv = (accel_ckpt_placement *)accel_host_alloc(dm->acc, sizeof *nv * (size_t)nc);
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
static void accel__ckpt_clean(const accel_ckpt_model *m, accel__ckpt_dmap *dm, const char *module, int depth) {
    size_t ml = strlen(module);
    int i, k, nvals = 0, dev = 0, same = 1, nkids = 0;
    const char **kids;
    for (i = 0; i < dm->n; ++i) {
        if (ml && !accel__ckpt_startswith_dot(dm->v[i].name, module)) continue;
        if (nvals++ == 0) dev = dm->v[i].device;
        else if (dm->v[i].device != dev) same = 0;
    }
    if (same && nvals > 1) {
        for (i = k = 0; i < dm->n; ++i)
            if (ml && !accel__ckpt_startswith_dot(dm->v[i].name, module)) dm->v[k++] = dm->v[i];
        dm->n = k;
        accel__ckpt_dmap_set(dm, module, dev);
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
        if (ml ? !accel__ckpt_startswith_dot(key, module) : !*key) continue;
        end = strchr(key + (ml ? ml + 1 : 0), '.');
        cl = end ? (size_t)(end - key) : strlen(key);
        for (k = 0; k < nkids; ++k)
            if (strlen(kids[k]) == cl && !strncmp(kids[k], key, cl)) break;
        if (k < nkids) continue;
        child = accel__ckpt_strndup(dm->acc, key, cl);
        if (!child) { dm->oom = 1; break; }
        idx = accel__ckpt_mfind(m, child, &k);
        accel_host_free(dm->acc, child);
        if (idx >= 0) kids[nkids++] = k == ACCEL__CKPT_MOD ? m->mods[idx].name : m->tens[idx].t.name;
    }
    for (k = 0; k < nkids && !dm->oom; ++k) accel__ckpt_clean(m, dm, kids[k], depth + 1);
    accel_host_free(dm->acc, (void *)kids);
}

/* Tied groups as Accelerate's find_tied_parameters gives them: per group its names sorted; groups in model order. */
typedef struct accel__ckpt_ties { const char ***g; int *gn; int n; } accel__ckpt_ties;
static void accel__ckpt_ties_free(accel *acc, accel__ckpt_ties *t) {
    int i;
    for (i = 0; i < t->n; ++i) accel_host_free(acc, (void *)t->g[i]);
    accel_host_free(acc, (void *)t->g);
    accel_host_free(acc, t->gn);
    memset(t, 0, sizeof *t);
}
static accel_result accel__ckpt_ties_make(const accel_ckpt_model *m, accel__ckpt_ties *t) {
    int ng = (int)stbds_arrlen(m->groups), nt = (int)stbds_arrlen(m->tens), i, k;
    memset(t, 0, sizeof *t);
    if (!ng) return ACCEL_OK;
    t->g = (const char ***)accel__ckpt_zalloc(m->acc, (size_t)ng, sizeof(char **));
    t->gn = (int *)accel__ckpt_zalloc(m->acc, (size_t)ng, sizeof(int));
    if (!t->g || !t->gn) return accel__fail_wrap(m->acc, ACCEL_ERR_OUT_OF_MEMORY, "tied parameters");
    t->n = ng;
    for (i = 0; i < ng; ++i) {
        int c = 0;
        for (k = 0; k < nt; ++k) c += m->tens[k].storage == m->groups[i];
        t->g[i] = (const char **)accel__ckpt_zalloc(m->acc, (size_t)c, sizeof(char *));
        if (!t->g[i]) return accel__fail_wrap(m->acc, ACCEL_ERR_OUT_OF_MEMORY, "tied parameters");
        for (k = 0; k < nt; ++k)
            if (m->tens[k].storage == m->groups[i]) t->g[i][t->gn[i]++] = m->tens[k].t.name;
        qsort((void *)t->g[i], (size_t)t->gn[i], sizeof(char *), accel__ckpt_strp_cmp);
    }
    return ACCEL_OK;
}
/* The tied parameters that matter for `name`: of every group with a member inside it and one outside, the members
   outside ("name." in "k." per member). Appended to *out (a list of names, acc's allocator, grown by doubling). */
typedef struct accel__ckpt_names { const char **v; int n, cap; } accel__ckpt_names;
static int accel__ckpt_names_add(accel *acc, accel__ckpt_names *l, const char *s) {
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
static int accel__ckpt_tied_params(accel *acc, const accel__ckpt_ties *t, const char *name, accel__ckpt_names *out) {
    int g, k;
    out->n = 0;
    for (g = 0; g < t->n; ++g) {
        int any = 0, all = 1;
        for (k = 0; k < t->gn[g]; ++k) {
            int in = accel__ckpt_dotin(name, t->g[g][k]);
            any |= in;
            all &= in;
        }
        if (!any || all) continue;
        for (k = 0; k < t->gn[g]; ++k)
            if (!accel__ckpt_dotin(name, t->g[g][k]) && accel__ckpt_names_add(acc, out, t->g[g][k])) return -1;
    }
    return 0;
}
/* get_module_size_with_ties: the module plus, per tied parameter, the first listed entry holding it (minus the
   parameter itself). Accelerate raises IndexError when no listed entry holds one; so does accel (an error). */
static accel_result accel__ckpt_size_with_ties(const accel_ckpt_model *m, const accel__ckpt_sz *s, const accel__ckpt_names *tied,
                                               int64_t size, const accel__ckpt_q *list, int64_t *with, accel__ckpt_q *mods,
                                               const char *who) {
    int i, k;
    *with = size;
    mods->n = 0;
    for (i = 0; i < tied->n; ++i) {
        int kind = -1, idx;
        for (k = 0; k < list->n; ++k)
            if (accel__ckpt_startswith_dot(tied->v[i], accel__ckpt_ref_name(m, list->v[k]))) break;
        if (k == list->n)
            return ACCEL__FAIL(m->acc, ACCEL_ERR_INVALID_ARGUMENT, "infer_auto_device_map: \"%.200s\" is tied to \"%.200s\", which no "
                               "module left to place holds (Accelerate raises IndexError here)", who, tied->v[i]);
        if (accel__ckpt_q_insert(mods, mods->n, &list->v[k], 1)) return ACCEL__FAIL(m->acc, ACCEL_ERR_OUT_OF_MEMORY, "out of memory");
        idx = accel__ckpt_mfind(m, tied->v[i], &kind);
        *with += accel__ckpt_ref_bits(s, list->v[k]) - (idx >= 0 && kind == ACCEL__CKPT_TEN ? s->ten_bits[idx] : 0);
    }
    return ACCEL_OK;
}

/* fallback_allocate: a depth-first search of the entries left for one (with its ties) that fits `limit`; the entries
   above it are expanded (parameters + children) so it can be taken out. found = 0 when none fits. */
static accel_result accel__ckpt_fallback(const accel_ckpt_model *m, const accel_ckpt_map_desc *d, const accel__ckpt_sz *s,
                                         const accel__ckpt_ties *ties, accel__ckpt_q *list, int64_t limit, int *found,
                                         accel__ckpt_ref *hit) {
    accel__ckpt_q search, kids, tmods;
    accel__ckpt_names tied;
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
    if (accel__ckpt_q_insert(&search, 0, list->v, list->n)) r = ACCEL__FAIL(m->acc, ACCEL_ERR_OUT_OF_MEMORY, "fallback: out of memory");
    while (r == ACCEL_OK && search.n > 0) {
        accel__ckpt_ref e = accel__ckpt_q_take(&search, 0);
        int64_t with = 0;
        name = accel__ckpt_ref_name(m, e);
        if (accel__ckpt_tied_params(m->acc, ties, name, &tied)) { r = ACCEL__FAIL(m->acc, ACCEL_ERR_OUT_OF_MEMORY, "fallback: out of memory"); break; }
        r = accel__ckpt_size_with_ties(m, s, &tied, accel__ckpt_ref_bits(s, e), &search, &with, &tmods, name);
        if (r != ACCEL_OK) break;
        if (with <= limit) {
            *found = 1;
            *hit = e;
            break;
        }
        if (!accel__ckpt_has_children(m, e) || accel__ckpt_no_split(m, d, e)) continue;
        if (accel__ckpt_q_split(m, &kids, e.idx) || accel__ckpt_q_insert(&search, 0, kids.v, kids.n))
            r = ACCEL__FAIL(m->acc, ACCEL_ERR_OUT_OF_MEMORY, "fallback: out of memory");
    }
    if (r == ACCEL_OK && *found) {
        /* expand every prefix of the found name that is in the list, outermost first, then take the found entry */
        const char *p;
        for (p = strchr(name, '.'); p && r == ACCEL_OK; p = strchr(p + 1, '.')) {
            size_t pl = (size_t)(p - name);
            for (i = 0; i < list->n; ++i) {
                const char *ln = accel__ckpt_ref_name(m, list->v[i]);
                if (strlen(ln) == pl && !strncmp(ln, name, pl)) break;
            }
            if (i == list->n) continue;
            if (list->v[i].kind != ACCEL__CKPT_MOD) continue; /* a tensor has nothing inside it */
            k = list->v[i].idx;
            (void)accel__ckpt_q_take(list, i);
            if (accel__ckpt_q_split(m, &kids, k) || accel__ckpt_q_insert(list, i, kids.v, kids.n))
                r = ACCEL__FAIL(m->acc, ACCEL_ERR_OUT_OF_MEMORY, "fallback: out of memory");
        }
        for (i = 0; r == ACCEL_OK && i < list->n; ++i)
            if (list->v[i].kind == hit->kind && list->v[i].idx == hit->idx) break;
        if (r == ACCEL_OK && i == list->n) r = ACCEL__FAIL(m->acc, ACCEL_ERR_STATE, "fallback: \"%.200s\" not found after expansion", name);
        if (r == ACCEL_OK) (void)accel__ckpt_q_take(list, i);
    }
    accel__ckpt_q_free(&search);
    accel__ckpt_q_free(&kids);
    accel__ckpt_q_free(&tmods);
    accel_host_free(m->acc, (void *)tied.v);
    return r;
}

/* infer_auto_device_map, line by line (docs/semantics.md §9). */
static accel_result accel__ckpt_infer(accel_ckpt_model *m, const accel_ckpt_map_desc *d, accel__ckpt_dmap *dm) {
    accel *acc = m->acc;
    accel__ckpt_dev *mem = NULL, *devs = NULL;
    accel__ckpt_sz s;
    accel__ckpt_ties ties;
    accel__ckpt_q q, maxn, kids, tmods, tmp;
    accel__ckpt_names tied;
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
    r = accel__ckpt_norm_memory(acc, d, &mem, &nmem);
    /* devices: max_memory's keys plus "disk"; main devices: the first GPU and the CPU (or mps alone, or the CPU) */
    if (r == ACCEL_OK) {
        devs = (accel__ckpt_dev *)accel__ckpt_zalloc(acc, (size_t)nmem + 1, sizeof *devs);
        used = (int64_t *)accel__ckpt_zalloc(acc, (size_t)nmem + 1, sizeof(int64_t));
        if (!devs || !used) r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "infer_auto_device_map");
    }
    if (r != ACCEL_OK) goto done;
    memcpy(devs, mem, sizeof *devs * (size_t)nmem);
    ndev = nmem;
    if (accel__ckpt_dev_find(devs, ndev, ACCEL_CKPT_DISK) < 0) devs[ndev++].device = ACCEL_CKPT_DISK;
    if (accel__ckpt_dev_find(devs, ndev, ACCEL_CKPT_MPS) >= 0) main0 = ACCEL_CKPT_MPS;
    else {
        for (i = 0; i < ndev; ++i)
            if (devs[i].device >= 0) break;
        if (i < ndev) { main0 = devs[i].device; main1 = ACCEL_CKPT_CPU; }
        else main0 = ACCEL_CKPT_CPU; /* no GPU: the CPU alone */
    }
    r = accel__ckpt_sizes(m, d, &s);
    if (r == ACCEL_OK) r = accel__ckpt_ties_make(m, &ties);
    if (r == ACCEL_OK && accel__ckpt_root_entries(m, &q)) r = ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "infer_auto_device_map: out of memory");
    /* the reserve: the largest layer of the initial entries (tensors included, this once) */
    if (r == ACCEL_OK) r = accel__ckpt_max_layer(m, d, &s, q.v, q.n, 0, &max_layer, &maxn);
    guard_max = 64L * (long)(stbds_arrlen(m->mods) + stbds_arrlen(m->tens) + 16) * (long)(ndev + 1);
    while (r == ACCEL_OK && q.n > 0) {
        accel__ckpt_ref e = accel__ckpt_q_take(&q, 0);
        const char *name = accel__ckpt_ref_name(m, e);
        int64_t size = accel__ckpt_ref_bits(&s, e), cap = 0, reserve = 0, with = 0;
        int dev, is_disk, is_main, split;
        if (++guard > guard_max) { r = ACCEL__FAIL(acc, ACCEL_ERR_STATE, "infer_auto_device_map: no progress"); break; }
        /* the largest remaining layer: drop the names taken; recompute (modules only) when none is left */
        for (i = k = 0; i < maxn.n; ++i) {
            const char *nn = accel__ckpt_ref_name(m, maxn.v[i]);
            if (strcmp(nn, name) && !accel__ckpt_startswith_dot(nn, name)) maxn.v[k++] = maxn.v[i];
        }
        maxn.n = k;
        if (maxn.n == 0) r = accel__ckpt_max_layer(m, d, &s, q.v, q.n, 1, &max_layer, &maxn);
        if (r != ACCEL_OK) break;
        if (accel__ckpt_tied_params(acc, &ties, name, &tied)) { r = ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "out of memory"); break; }
        dev = devs[cur].device;
        is_disk = dev == ACCEL_CKPT_DISK;
        if (!is_disk) cap = devs[cur].bits;
        is_main = dev == main0 || dev == main1;
        if (is_main && !is_disk) {
            cap -= max_layer;
            reserve = max_layer;
        }
        r = accel__ckpt_size_with_ties(m, &s, &tied, size, &q, &with, &tmods, name);
        if (r != ACCEL_OK) break;
        /* 1. it fits with its tied modules */
        if (is_disk || used[cur] + with <= cap) {
            used[cur] += with;
            accel__ckpt_dmap_set(dm, name, dev);
            for (i = 0; i < tmods.n; ++i) {
                const char *tn = accel__ckpt_ref_name(m, tmods.v[i]);
                for (k = 0; k < q.n; ++k)
                    if (!strcmp(accel__ckpt_ref_name(m, q.v[k]), tn)) break;
                if (k < q.n) (void)accel__ckpt_q_take(&q, k);
                accel__ckpt_dmap_set(dm, tn, dev);
            }
            if (dm->oom) r = ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "infer_auto_device_map: out of memory");
            continue;
        }
        /* 2. it fits alone: split one of its tied modules */
        if (tied.n > 0 && used[cur] + size <= cap) {
            split = 0;
            for (i = 0; i < tmods.n && !split; ++i) {
                accel__ckpt_ref t = tmods.v[i];
                const char *tn = accel__ckpt_ref_name(m, t);
                if (!accel__ckpt_has_children(m, t) || accel__ckpt_no_split(m, d, t)) continue;
                for (k = 0; k < q.n; ++k)
                    if (!strcmp(accel__ckpt_ref_name(m, q.v[k]), tn)) break;
                if (k == q.n) { r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "infer_auto_device_map: tied module \"%.200s\" is not "
                                                "in the queue (Accelerate raises IndexError here)", tn); break; }
                /* [module] + queue[:k] + children + queue[k+1:] */
                (void)accel__ckpt_q_take(&q, k);
                if (accel__ckpt_q_split(m, &kids, t.idx) || accel__ckpt_q_insert(&q, k, kids.v, kids.n) ||
                    accel__ckpt_q_insert(&q, 0, &e, 1)) { r = ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "out of memory"); break; }
                r = accel__ckpt_max_layer(m, d, &s, q.v, q.n, 1, &max_layer, &maxn);
                split = 1;
            }
            if (r != ACCEL_OK) break;
            if (split) continue;
        }
        /* 3. it does not fit: split it if it can be split */
        if (used[cur] + size >= cap && accel__ckpt_has_children(m, e) && !accel__ckpt_no_split(m, d, e)) {
            if (accel__ckpt_q_split(m, &kids, e.idx) || accel__ckpt_q_insert(&q, 0, kids.v, kids.n)) {
                r = ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "out of memory");
                break;
            }
            r = accel__ckpt_max_layer(m, d, &s, q.v, q.n, 1, &max_layer, &maxn);
            continue;
        }
        /* 4. nothing on this device yet: look for a smaller entry that fits (fallback_allocation) */
        if (used[cur] == 0 && d && d->fallback_allocation && !is_disk) {
            int found = 0;
            accel__ckpt_ref hit;
            int64_t limit = devs[cur].bits - (max_layer > with ? max_layer : with);
            r = accel__ckpt_fallback(m, d, &s, &ties, &q, limit - used[cur], &found, &hit);
            if (r != ACCEL_OK) break;
            if (found) {
                if (accel__ckpt_q_insert(&q, 0, &e, 1) || accel__ckpt_q_insert(&q, 0, &hit, 1)) {
                    r = ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "out of memory");
                    break;
                }
                continue;
            }
        }
        if (used[cur] == 0) {
            char nm[32];
            accel_ckpt_device_name(dev, nm, sizeof nm);
            accel_log(acc, ACCEL_LOG_INFO, "infer_auto_device_map: nothing fits on device %s: it needs at least %.0f bytes",
                      nm, accel__ckpt_bits_bytes(with + reserve));
        }
        /* 5. the next device; the reserve counts as used on the one left behind */
        used[cur] += reserve;
        ++cur;
        if (cur >= ndev) { r = ACCEL__FAIL(acc, ACCEL_ERR_STATE, "infer_auto_device_map: ran out of devices"); break; }
        if (accel__ckpt_q_insert(&q, 0, &e, 1)) r = ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "out of memory");
    }
    if (r == ACCEL_OK && (q.oom || maxn.oom || dm->oom)) r = ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "infer_auto_device_map: out of memory");
    if (r == ACCEL_OK && !(d && d->no_clean_result)) {
        accel__ckpt_clean(m, dm, "", 0);
        if (dm->oom) r = ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "clean_device_map: out of memory");
    }
done:
    accel_host_free(acc, mem);
    accel_host_free(acc, devs);
    accel_host_free(acc, used);
    accel__ckpt_sz_free(acc, &s);
    accel__ckpt_ties_free(acc, &ties);
    accel__ckpt_q_free(&q);
    accel__ckpt_q_free(&maxn);
    accel__ckpt_q_free(&kids);
    accel__ckpt_q_free(&tmods);
    accel__ckpt_q_free(&tmp);
    accel_host_free(acc, (void *)tied.v);
    return r;
}
ACCEL__DEF accel_result accel_ckpt_infer_device_map(accel_ckpt_model *m, const accel_ckpt_map_desc *d,
                                                    accel_ckpt_placement *out, int cap, int *n) {
    accel__ckpt_dmap dm;
    accel_result r;
    if (!m || !n || cap < 0 || (cap > 0 && !out)) return ACCEL__FAIL(m ? m->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, "infer_device_map: bad arguments");
    memset(&dm, 0, sizeof dm);
    dm.acc = m->acc;
    r = accel__ckpt_infer(m, d, &dm);
    if (r == ACCEL_OK) {
        *n = dm.n;
        if (cap >= dm.n && dm.n) memcpy(out, dm.v, sizeof *out * (size_t)dm.n);
    }
    accel_host_free(m->acc, dm.v);
    return r;
}

ACCEL__DEF accel_result accel_ckpt_parse_max_memory(accel *acc, const char *s, accel_ckpt_memory *out, int cap, int *n) {
    accel_ckpt_memory *v = NULL;
    accel_ckpt_map_desc d;
    accel__ckpt_dev *norm = NULL;
    const char *p;
    int cnt = 0, k = 0, nn = 0, i;
    accel_result r = ACCEL_OK;
    if (!s || !n || cap < 0 || (cap > 0 && !out)) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "parse_max_memory: bad arguments");
    for (p = s; *p; ++p) cnt += *p == ',';
    v = (accel_ckpt_memory *)accel__ckpt_zalloc(acc, (size_t)cnt + 1, sizeof *v);
    if (!v) return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "parse_max_memory");
    for (p = s; r == ACCEL_OK && *s;) { /* "" is the empty dict */
        const char *end = strchr(p, ','), *eq;
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char key[64], val[128];
        uint64_t bytes = 0;
        eq = (const char *)memchr(p, '=', len);
        if (!eq || (size_t)(eq - p) >= sizeof key || len - (size_t)(eq - p) - 1 >= sizeof val) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "max_memory \"%.200s\": expected DEVICE=SIZE[,DEVICE=SIZE...] (DEVICE: a GPU "
                            "number, cpu, disk or mps)", s);
            break;
        }
        memcpy(key, p, (size_t)(eq - p));
        key[eq - p] = 0;
        memcpy(val, eq + 1, len - (size_t)(eq - p) - 1);
        val[len - (size_t)(eq - p) - 1] = 0;
        if (!strcmp(key, "cpu")) v[k].device = ACCEL_CKPT_CPU;
        else if (!strcmp(key, "disk")) v[k].device = ACCEL_CKPT_DISK;
        else if (!strcmp(key, "mps")) v[k].device = ACCEL_CKPT_MPS;
        else {
            char *e2 = NULL;
            long g = key[0] >= '0' && key[0] <= '9' ? strtol(key, &e2, 10) : -1;
            if (g < 0 || !e2 || *e2 || g > 1000000) {
                r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "Device %.60s is not recognized, available devices are integers(for "
                                "GPU/XPU), 'mps', 'cpu' and 'disk'", key);
                break;
            }
            v[k].device = (int)g;
        }
        r = accel_ckpt_parse_size(acc, val, &bytes);
        if (r != ACCEL_OK) break;
        v[k++].bytes = (double)bytes;
        if (!end) break;
        p = end + 1;
    }
    if (r == ACCEL_OK) {
        memset(&d, 0, sizeof d);
        d.max_memory = v;
        d.n_max_memory = k;
        r = accel__ckpt_norm_memory(acc, &d, &norm, &nn);
    }
    if (r == ACCEL_OK) {
        *n = nn;
        if (cap >= nn)
            for (i = 0; i < nn; ++i) {
                out[i].device = norm[i].device;
                out[i].bytes = accel__ckpt_bits_bytes(norm[i].bits);
            }
    }
    accel_host_free(acc, v);
    accel_host_free(acc, norm);
    return r;
}

/* ---------------------------------------------------------------------------------- 16. dtype conversion on load */
/* Between F64, F32, F16 and BF16 through the core's codec (CUDA's rounding; F64 → a 16-bit type goes through F32, as
   PyTorch's conversion does); any other pair only to itself. */
static int accel__ckpt_convertible(accel_dtype from, accel_dtype to) {
    int ff = from == ACCEL_F64 || from == ACCEL_F32 || from == ACCEL_F16 || from == ACCEL_BF16;
    int tf = to == ACCEL_F64 || to == ACCEL_F32 || to == ACCEL_F16 || to == ACCEL_BF16;
    return from == to || (ff && tf);
}
static void accel__ckpt_convert(void *dst, accel_dtype to, const void *src, accel_dtype from, size_t n) {
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
static int accel__ckpt_real_gpu(const accel *acc) {
#ifdef ACCEL_WITH_CUDA
    return acc && acc->device >= 0;
#else
    (void)acc;
    return 0;
#endif
}
#ifdef ACCEL_WITH_CUDA
/* Host bytes (src, dtype from) → device (dst, dtype to) through two pinned buffers on `stream`: the conversion of
   chunk i+1 overlaps the copy of chunk i. The stage's events and buffers belong to the current device. */
static accel_result accel__ckpt_upload(accel *acc, accel__ckpt_stage *s, cudaStream_t st, const void *src, accel_dtype from,
                                       void *dst, accel_dtype to, int64_t numel, const char *what) {
    size_t es = accel_dtype_size(from) > accel_dtype_size(to) ? accel_dtype_size(from) : accel_dtype_size(to);
    size_t per = ACCEL__CKPT_STAGE_BYTES / es, off = 0;
    int i = 0, used[2] = {0, 0};
    cudaError_t e;
    accel_result r = accel__ckpt_stage_init(acc, s);
    if (r != ACCEL_OK) return r;
    while (off < (size_t)numel) {
        size_t cnt = (size_t)numel - off < per ? (size_t)numel - off : per;
        int b = i & 1;
        if (used[b]) {
            e = cudaEventSynchronize((cudaEvent_t)s->ev[b]);
            if (e != cudaSuccess) return ACCEL__FAIL(acc, ACCEL_ERR_CUDA, "host-to-device copy of %.300s: %s", what, cudaGetErrorString(e));
        }
        accel__ckpt_convert(s->buf[b], to, (const unsigned char *)src + off * accel_dtype_size(from), from, cnt);
        e = cudaMemcpyAsync((char *)dst + off * accel_dtype_size(to), s->buf[b], cnt * accel_dtype_size(to), cudaMemcpyHostToDevice, st);
        if (e == cudaSuccess) e = cudaEventRecord((cudaEvent_t)s->ev[b], st);
        if (e != cudaSuccess) return ACCEL__FAIL(acc, ACCEL_ERR_CUDA, "host-to-device copy of %.300s: %s", what, cudaGetErrorString(e));
        used[b] = 1;
        off += cnt;
        ++i;
    }
    e = cudaStreamSynchronize(st);
    if (e != cudaSuccess) return ACCEL__FAIL(acc, ACCEL_ERR_CUDA, "host-to-device copy of %.300s: %s", what, cudaGetErrorString(e));
    return ACCEL_OK;
}
#endif

/* ------------------------------------------------------------------------------------------------- 17. dispatch */
typedef struct accel__ckpt_place {
    void *ptr;          /* device or host buffer, or the mapping of a "disk" tensor */
    int device;
    accel_dtype dtype;  /* what ptr holds */
    accel_dtype target; /* what a fetch delivers */
    int own;            /* 0: a mapping, 1: host, 2: pinned, 3: device */
    int64_t numel;
} accel__ckpt_place;
struct accel_ckpt_dispatch {
    accel *acc;
    accel_ckpt_model *m;
    accel__ckpt_place *pl;   /* per model tensor (an alias uses its storage's) */
    accel_ckpt_file **files; /* stb_ds: the checkpoint's files, kept open for "disk" tensors */
    accel_ckpt_file *offload;
};
static void accel__ckpt_place_free(accel *acc, accel__ckpt_place *p) {
    if (p->own == 1) accel_host_free(acc, p->ptr);
    else if (p->own == 2) accel_pinned_free(acc, p->ptr);
    else if (p->own == 3) {
#ifdef ACCEL_WITH_CUDA
        int prev = -1;
        if (accel__ckpt_real_gpu(acc) && cudaGetDevice(&prev) == cudaSuccess && cudaSetDevice(p->device) == cudaSuccess) {
            accel_device_free(acc, p->ptr);
            (void)cudaSetDevice(prev);
        } else
#endif
            accel_device_free(acc, p->ptr);
    }
    p->ptr = NULL;
    p->own = 0;
}
ACCEL__DEF void accel_ckpt_dispatch_destroy(accel_ckpt_dispatch *x) {
    int i;
    if (!x) return;
    for (i = 0; x->pl && i < (int)stbds_arrlen(x->m->tens); ++i) accel__ckpt_place_free(x->acc, &x->pl[i]);
    for (i = 0; i < (int)stbds_arrlen(x->files); ++i) accel_ckpt_file_destroy(x->files[i]);
    stbds_arrfree(x->files);
    accel_ckpt_file_destroy(x->offload);
    accel_host_free(x->acc, x->pl);
    accel_host_free(x->acc, x);
}

/* The checkpoint's files, as Accelerate's load_checkpoint_in_model finds them. */
static accel_result accel__ckpt_open_index(accel *acc, const char *index_path, accel_ckpt_file ***files) {
    char *data = NULL, dir[4096], path[8400];
    size_t n = 0, bad = 0;
    accel__ckpt_json j;
    int root, wm, c, k;
    const char **names = NULL;
    int nn = 0;
    accel_result r = accel__read_file(acc, index_path, &data, &n, (size_t)100000000);
    if (r != ACCEL_OK) return r;
    if (!accel__utf8_valid((const unsigned char *)data, n, &bad)) {
        accel_host_free(acc, data);
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.400s is not valid UTF-8 (byte %lu)", index_path, (unsigned long)bad);
    }
    root = accel__ckpt_json_parse(&j, acc, data, n);
    if (root < 0) r = accel__ckpt_json_failed(acc, &j, index_path);
    wm = r == ACCEL_OK ? accel__ckpt_jget(&j, root, "weight_map") : -1;
    if (r == ACCEL_OK && wm < 0) wm = root; /* Accelerate: index["weight_map"] if present, else the index itself */
    if (r == ACCEL_OK && j.nodes[wm].type != ACCEL__CKPT_J_OBJ) r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.400s: no weight_map object", index_path);
    if (r == ACCEL_OK) {
        names = (const char **)accel__ckpt_zalloc(acc, (size_t)j.nodes[wm].count, sizeof(char *));
        if (!names) r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "%.400s", index_path);
    }
    for (c = r == ACCEL_OK ? j.nodes[wm].first : -1; c >= 0 && r == ACCEL_OK; c = j.nodes[c].next) {
        if (!accel__ckpt_jis_str(&j, c) || !accel__ckpt_safe_file_name(accel__ckpt_jstr(&j, c))) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.400s: weight_map entry '%.200s' is not a plain file name", index_path, accel__ckpt_jkeyp(&j, c));
            break;
        }
        for (k = 0; k < nn; ++k)
            if (!strcmp(names[k], accel__ckpt_jstr(&j, c))) break;
        if (k == nn) names[nn++] = accel__ckpt_jstr(&j, c);
    }
    if (r == ACCEL_OK) qsort((void *)names, (size_t)nn, sizeof *names, accel__ckpt_strp_cmp); /* sorted(set(values)) */
    accel__dirname(index_path, dir, sizeof dir);
    for (k = 0; k < nn && r == ACCEL_OK; ++k) {
        accel_ckpt_file *f = NULL;
        accel__fmt(path, sizeof path, "%s/%s", dir, names[k]);
        r = accel_ckpt_file_open(acc, path, &f);
        if (r == ACCEL_OK && ACCEL__ARR_PUT(*files, f) != 0) {
            accel_ckpt_file_destroy(f);
            r = ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "dispatch: out of memory");
        }
    }
    accel_host_free(acc, (void *)names);
    accel__ckpt_json_free(&j);
    accel_host_free(acc, data);
    return r;
}
static accel_result accel__ckpt_open_checkpoint(accel *acc, const char *ck, accel_ckpt_file ***files) {
    char path[4200];
    size_t l = strlen(ck);
    accel_ckpt_file *f = NULL;
    accel_result r;
    if (accel__is_file(ck)) {
        if (l >= 5 && !strcmp(ck + l - 5, ".json")) return accel__ckpt_open_index(acc, ck, files);
        r = accel_ckpt_file_open(acc, ck, &f);
    } else if (accel__is_dir(ck)) {
        DIR *d;
        struct dirent *de;
        int nidx = 0;
        char idx[4200];
        accel__fmt(path, sizeof path, "%s/model.safetensors", ck);
        if (accel__is_file(path)) r = accel_ckpt_file_open(acc, path, &f);
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
            if (nidx > 1) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "%.400s containing more than one `.index.json` file, delete the irrelevant ones.", ck);
            if (nidx == 1) return accel__ckpt_open_index(acc, idx, files);
            accel__fmt(path, sizeof path, "%s/index.json", ck);
            if (!accel__is_file(path))
                return ACCEL__FAIL(acc, ACCEL_ERR_NOT_FOUND, "%.400s is not a folder containing a `.index.json` file or a pytorch_model.bin "
                                   "or a model.safetensors file (accel reads safetensors, and offload folders with an index.json)", ck);
            r = accel_ckpt_file_open_offload(acc, ck, &f);
        }
    } else {
        return ACCEL__FAIL(acc, ACCEL_ERR_NOT_FOUND, "`checkpoint` should be the path to a file containing a whole state dict, or the index "
                           "of a sharded checkpoint, or a folder containing a sharded checkpoint or the whole state dict, but got %.400s.", ck);
    }
    if (r == ACCEL_OK && ACCEL__ARR_PUT(*files, f) != 0) {
        accel_ckpt_file_destroy(f);
        r = ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "dispatch: out of memory");
    }
    return r;
}

static int accel__ckpt_placement_cmp(const void *a, const void *b) {
    return strcmp(((const accel_ckpt_placement *)a)->name, ((const accel_ckpt_placement *)b)->name);
}
/* The device of a name in a device map: its longest prefix that is a key (Accelerate's lookup). -100: none. */
static int accel__ckpt_map_device(const accel_ckpt_placement *sorted, int n, const char *name, char *buf, size_t cap) {
    accel_ckpt_placement key, *hit;
    accel__fmt(buf, cap, "%s", name);
    key.device = 0;
    for (;;) {
        char *dot;
        key.name = buf;
        hit = n ? (accel_ckpt_placement *)bsearch(&key, sorted, (size_t)n, sizeof *sorted, accel__ckpt_placement_cmp) : NULL;
        if (hit) return hit->device;
        if (!*buf) return -100;
        dot = strrchr(buf, '.');
        if (dot) *dot = 0;
        else buf[0] = 0;
    }
}
static void accel__ckpt_shape_of(char *out, size_t cap, const accel_tensor *t) { accel__ckpt_shape_str(out, cap, t->ndim, t->shape); }

ACCEL__DEF accel_result accel_ckpt_dispatch_create(accel_ckpt_model *m, const accel_ckpt_dispatch_desc *desc, accel_ckpt_dispatch **out) {
    accel *acc = m ? m->acc : NULL;
    accel_ckpt_dispatch *x = NULL;
    accel_ckpt_placement *sorted = NULL;
    const accel_ckpt_entry **src = NULL;
    accel_ckpt_file **srcf = NULL;
    int *nclaimed = NULL, nt, nf, i, k, ndisk = 0;
    char *buf = NULL;
    accel_tensor *disk = NULL;
    accel_result r = ACCEL_OK;
#ifdef ACCEL_WITH_CUDA
    int prev_dev = -1;
#endif
    if (!m || !desc || !out || !desc->checkpoint || desc->n_device_map < 0 || (desc->n_device_map > 0 && !desc->device_map))
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "dispatch_create: bad arguments");
    *out = NULL;
    if (desc->dtype != ACCEL_DTYPE_INVALID && !accel_dtype_name(desc->dtype))
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "dispatch: invalid dtype %d", (int)desc->dtype);
    nt = (int)stbds_arrlen(m->tens);
    x = (accel_ckpt_dispatch *)accel__ckpt_zalloc(acc, 1, sizeof *x);
    if (!x) return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "dispatch");
    x->acc = acc;
    x->m = m;
    x->pl = (accel__ckpt_place *)accel__ckpt_zalloc(acc, (size_t)nt, sizeof *x->pl);
    sorted = (accel_ckpt_placement *)accel__ckpt_zalloc(acc, (size_t)desc->n_device_map, sizeof *sorted);
    src = (const accel_ckpt_entry **)accel__ckpt_zalloc(acc, (size_t)nt, sizeof *src);
    srcf = (accel_ckpt_file **)accel__ckpt_zalloc(acc, (size_t)nt, sizeof *srcf);
    disk = (accel_tensor *)accel__ckpt_zalloc(acc, (size_t)nt, sizeof *disk);
    buf = (char *)accel_host_alloc(acc, 4096);
    if (!x->pl || !sorted || !src || !srcf || !disk || !buf) { r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "dispatch"); goto fail; }
    /* 1. the map: names of the model, known devices, no duplicates */
    for (i = 0; i < desc->n_device_map; ++i) {
        const accel_ckpt_placement *e = &desc->device_map[i];
        int dev = e->device;
        if (!e->name || (*e->name && accel__ckpt_mfind(m, e->name, NULL) < 0)) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "dispatch: the device_map key \"%.200s\" matches no module or tensor of the "
                            "model (Accelerate warns and ignores it)", e->name ? e->name : "(null)");
            goto fail;
        }
        if (dev < 0 && dev != ACCEL_CKPT_CPU && dev != ACCEL_CKPT_DISK) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_UNSUPPORTED, "dispatch: device %d of \"%.200s\" (accel dispatches to GPUs, cpu and disk)", dev, e->name);
            goto fail;
        }
        sorted[i] = *e;
    }
    if (desc->n_device_map > 1) qsort(sorted, (size_t)desc->n_device_map, sizeof *sorted, accel__ckpt_placement_cmp);
    for (i = 1; i < desc->n_device_map; ++i)
        if (!strcmp(sorted[i - 1].name, sorted[i].name)) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "dispatch: the device_map lists \"%.200s\" twice", sorted[i].name);
            goto fail;
        }
    for (i = 0; i < nt; ++i) {
        if (m->tens[i].storage != i) continue;
        x->pl[i].device = accel__ckpt_map_device(sorted, desc->n_device_map, m->tens[i].t.name, buf, 4096);
        if (x->pl[i].device == -100) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "%.200s doesn't have any device set.", m->tens[i].t.name);
            goto fail;
        }
    }
    /* 2. the checkpoint: every tensor found once, shapes equal, dtypes convertible; nothing unexpected */
    r = accel__ckpt_open_checkpoint(acc, desc->checkpoint, &x->files);
    if (r != ACCEL_OK) goto fail;
    nf = (int)stbds_arrlen(x->files);
    for (k = 0; k < nf; ++k) {
        int e;
        for (e = 0; e < accel_ckpt_file_count(x->files[k]); ++e) {
            const accel_ckpt_entry *en = accel_ckpt_file_entry(x->files[k], e);
            int kind = -1, ti = accel__ckpt_mfind(m, en->name, &kind), st;
            if (ti < 0 || kind != ACCEL__CKPT_TEN) {
                if (desc->ignore_unexpected) continue;
                r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "dispatch: the checkpoint's tensor \"%.200s\" is not in the model "
                                "(ignore_unexpected skips such tensors, as Accelerate does with a warning)", en->name);
                goto fail;
            }
            st = m->tens[ti].storage;
            if (src[st] && (ti == st || !strcmp(src[st]->name, en->name))) {
                r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "dispatch: tensor \"%.200s\" is in more than one file of the checkpoint", en->name);
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
            r = ACCEL__FAIL(acc, ACCEL_ERR_NOT_FOUND, "dispatch: tensor \"%.200s\" is not in the checkpoint %.300s", t->name, desc->checkpoint);
            goto fail;
        }
        if (src[i]->ndim != t->ndim || (t->ndim && memcmp(src[i]->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim))) {
            accel__ckpt_shape_str(a, sizeof a, src[i]->ndim, src[i]->shape);
            accel__ckpt_shape_of(b, sizeof b, t);
            r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "Trying to set a tensor of shape %s in \"%.200s\" (which has shape %s), this "
                            "looks incorrect.", a, t->name, b);
            goto fail;
        }
        target = desc->dtype != ACCEL_DTYPE_INVALID && accel_dtype_is_float(src[i]->dtype) ? desc->dtype : t->dtype;
        if (!accel__ckpt_convertible(src[i]->dtype, target)) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_UNSUPPORTED, "dispatch: tensor \"%.200s\" is %s in the checkpoint and %s in the model (accel "
                            "converts only between F64, F32, F16 and BF16)", t->name, accel_dtype_name(src[i]->dtype), accel_dtype_name(target));
            goto fail;
        }
        x->pl[i].target = target;
        x->pl[i].numel = accel_tensor_numel(t);
    }
    /* 3. every buffer first, then the bytes */
#ifdef ACCEL_WITH_CUDA
    if (accel__ckpt_real_gpu(acc) && cudaGetDevice(&prev_dev) != cudaSuccess) { r = ACCEL__FAIL(acc, ACCEL_ERR_CUDA, "cudaGetDevice failed"); goto fail; }
#endif
    for (i = 0; i < nt && r == ACCEL_OK; ++i) {
        accel__ckpt_place *p = &x->pl[i];
        size_t nb = (size_t)p->numel * accel_dtype_size(p->target);
        if (m->tens[i].storage != i) continue;
        if (p->device == ACCEL_CKPT_DISK) {
            p->ptr = (void *)src[i]->data;
            p->dtype = src[i]->dtype;
            disk[ndisk] = m->tens[i].t;
            disk[ndisk].dtype = src[i]->dtype;
            disk[ndisk++].ptr = (void *)src[i]->data;
            continue;
        }
        p->dtype = p->target;
        if (p->device == ACCEL_CKPT_CPU) {
            p->ptr = desc->pin_cpu ? accel_pinned_alloc(acc, nb) : accel_host_alloc(acc, nb);
            p->own = desc->pin_cpu ? 2 : 1;
        } else {
#ifdef ACCEL_WITH_CUDA
            if (accel__ckpt_real_gpu(acc)) {
                cudaError_t e = cudaSetDevice(p->device);
                if (e != cudaSuccess) { r = ACCEL__FAIL(acc, ACCEL_ERR_CUDA, "cudaSetDevice(%d): %s", p->device, cudaGetErrorString(e)); break; }
            }
#endif
            p->ptr = accel_device_alloc(acc, nb); /* a run without a GPU: host memory (accel.h "allocation helpers") */
            p->own = 3;
        }
        if (!p->ptr) {
            p->own = 0;
            r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "dispatch: \"%.200s\" (%zu bytes)", m->tens[i].t.name, nb);
        }
    }
    for (i = 0; i < nt && r == ACCEL_OK; ++i) {
        accel__ckpt_place *p = &x->pl[i];
        if (m->tens[i].storage != i || p->device == ACCEL_CKPT_DISK) continue;
#ifdef ACCEL_WITH_CUDA
        if (p->device >= 0 && accel__ckpt_real_gpu(acc)) {
            accel__ckpt_stage st;
            cudaStream_t stream = p->device < desc->n_streams && desc->streams && desc->streams[p->device]
                                      ? (cudaStream_t)desc->streams[p->device]
                                      : p->device == acc->device ? (cudaStream_t)acc->stream : (cudaStream_t)0;
            cudaError_t e = cudaSetDevice(p->device);
            if (e != cudaSuccess) { r = ACCEL__FAIL(acc, ACCEL_ERR_CUDA, "cudaSetDevice(%d): %s", p->device, cudaGetErrorString(e)); break; }
            accel__ckpt_stage_begin(&st, acc);
            r = accel__ckpt_upload(acc, &st, stream, src[i]->data, src[i]->dtype, p->ptr, p->target, p->numel, m->tens[i].t.name);
            accel__ckpt_stage_end(&st);
            continue;
        }
#endif
        if (p->target == src[i]->dtype) { /* as stored: pread into the buffer (no page faults on the mapping) */
            r = accel__ckpt_st_copy(srcf[i], (int)(src[i] - srcf[i]->entries), p->ptr, NULL);
            continue;
        }
        accel__ckpt_convert(p->ptr, p->target, src[i]->data, src[i]->dtype, (size_t)p->numel);
    }
#ifdef ACCEL_WITH_CUDA
    if (prev_dev >= 0) (void)cudaSetDevice(prev_dev);
#endif
    /* 4. "disk": left in the checkpoint's mapping, or copied to an offload folder (Accelerate's format) */
    if (r == ACCEL_OK && ndisk > 0 && desc->offload_folder) {
        r = accel_ckpt_offload_save(acc, desc->offload_folder, disk, ndisk);
        if (r == ACCEL_OK) r = accel_ckpt_file_open_offload(acc, desc->offload_folder, &x->offload);
        for (i = 0; i < nt && r == ACCEL_OK; ++i) {
            int e;
            if (m->tens[i].storage != i || x->pl[i].device != ACCEL_CKPT_DISK) continue;
            e = accel_ckpt_file_find(x->offload, m->tens[i].t.name);
            if (e < 0) r = ACCEL__FAIL(acc, ACCEL_ERR_STATE, "dispatch: %.200s is missing from the offload folder", m->tens[i].t.name);
            else x->pl[i].ptr = (void *)accel_ckpt_file_entry(x->offload, e)->data;
        }
    }
    if (r == ACCEL_OK && (ndisk == 0 || desc->offload_folder)) { /* nothing points into the checkpoint any more */
        for (k = 0; k < (int)stbds_arrlen(x->files); ++k) accel_ckpt_file_destroy(x->files[k]);
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
    accel_ckpt_dispatch_destroy(x);
    return r;
}
ACCEL__DEF accel_result accel_ckpt_dispatch_tensor(const accel_ckpt_dispatch *x, const char *name, accel_tensor *t, int *device) {
    int kind = -1, i;
    const accel__ckpt_place *p;
    if (!x || !name) return ACCEL__FAIL(x ? x->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, "dispatch_tensor: NULL argument");
    i = accel__ckpt_mfind(x->m, name, &kind);
    if (i < 0 || kind != ACCEL__CKPT_TEN) return ACCEL__FAIL(x->acc, ACCEL_ERR_NOT_FOUND, "dispatch: no tensor \"%.200s\" in the model", name);
    p = &x->pl[x->m->tens[i].storage];
    if (t) {
        *t = x->m->tens[i].t;
        t->ptr = p->ptr;
        t->dtype = p->dtype;
    }
    if (device) *device = p->device;
    return ACCEL_OK;
}

/* ------------------------------------------------------------------------- 18. just-in-time fetch of offloaded layers */
/* Two slots, each as large as the largest layer's offloaded bytes. A helper thread fills the host side of a slot
   (converting "disk" bytes out of the mapping, or CPU tensors into the execution dtype); on a real GPU the calling
   thread then copies it to the device slot on a copy stream that waits for the layer that used the slot before and
   that the compute stream waits for — the host never waits for the GPU. The helper neither allocates nor records
   errors: it leaves an errno, which the calling thread reports. */
#define ACCEL__CKPT_SLOT_ALIGN 256
enum { ACCEL__CKPT_SLOT_FREE = 0, ACCEL__CKPT_SLOT_FILLING, ACCEL__CKPT_SLOT_READY, ACCEL__CKPT_SLOT_IN_USE };
typedef struct accel__ckpt_slot {
    void *host;  /* filled by the helper: pinned on a real GPU, the execution buffer itself otherwise */
    void *dev;   /* real GPU: the device buffer */
    void *copied, *computed; /* real GPU: cudaEvent_t (the H2D copy out of host / the layer's work on dev) */
    int state, layer, recorded_copy, recorded_compute;
} accel__ckpt_slot;
struct accel_ckpt_fetch {
    accel_ckpt_dispatch *x;
    accel *acc;
    int device, real_gpu, nlayers, no_prefetch;
    void *copy_stream, *compute_stream;
    int **tens;               /* per layer: tensor indices in state_dict order (acc's allocator, -1 terminated) */
    int64_t **off;            /* per layer and tensor: offset in the slot, -1 when it is used where it lives */
    accel_tensor **views;     /* per layer: what fetch_begin hands out */
    int *nt;
    size_t slot_bytes;
    accel__ckpt_slot slot[2];
    pthread_t helper;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int helper_started, quit, job_layer, job_slot, err;
};
static int accel__ckpt_resident(const accel_ckpt_fetch *f, const accel__ckpt_place *p) {
    return p->device == f->device && p->dtype == p->target;
}
/* Fills slot s's host side with layer l's offloaded tensors (helper thread: no allocation, no error recording). */
static int accel__ckpt_fill(accel_ckpt_fetch *f, int l, int s) {
    const accel_ckpt_model *m = f->x->m;
    int k;
#ifdef ACCEL_WITH_CUDA
    if (f->real_gpu && f->slot[s].recorded_copy) { /* the previous copy out of this host buffer is done */
        if (cudaSetDevice(f->device) != cudaSuccess || cudaEventSynchronize((cudaEvent_t)f->slot[s].copied) != cudaSuccess) return EIO;
    }
#endif
    for (k = 0; k < f->nt[l]; ++k) {
        const accel__ckpt_place *p = &f->x->pl[m->tens[f->tens[l][k]].storage];
        if (f->off[l][k] < 0) continue;
        accel__ckpt_convert((char *)f->slot[s].host + f->off[l][k], p->target, p->ptr, p->dtype, (size_t)p->numel);
    }
    return 0;
}
static void *accel__ckpt_helper(void *arg) {
    accel_ckpt_fetch *f = (accel_ckpt_fetch *)arg;
    pthread_mutex_lock(&f->mu);
    for (;;) {
        int l, s, e;
        while (!f->quit && f->job_layer < 0) pthread_cond_wait(&f->cv, &f->mu);
        if (f->quit) break;
        l = f->job_layer;
        s = f->job_slot;
        pthread_mutex_unlock(&f->mu);
        e = accel__ckpt_fill(f, l, s);
        pthread_mutex_lock(&f->mu);
        if (e && !f->err) f->err = e;
        f->slot[s].state = ACCEL__CKPT_SLOT_READY;
        f->job_layer = -1;
        pthread_cond_broadcast(&f->cv);
    }
    pthread_mutex_unlock(&f->mu);
    return NULL;
}
/* Hands layer l to the helper (slot l % 2 must be free; the helper must be idle). Caller holds f->mu. */
static void accel__ckpt_request(accel_ckpt_fetch *f, int l) {
    int s = l & 1;
    f->slot[s].state = ACCEL__CKPT_SLOT_FILLING;
    f->slot[s].layer = l;
    f->job_layer = l;
    f->job_slot = s;
    pthread_cond_broadcast(&f->cv);
}
ACCEL__DEF void accel_ckpt_fetch_destroy(accel_ckpt_fetch *f) {
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
ACCEL__DEF accel_result accel_ckpt_fetch_create(accel_ckpt_dispatch *x, const accel_ckpt_fetch_desc *desc, accel_ckpt_fetch **out) {
    accel *acc = x ? x->acc : NULL;
    accel_ckpt_fetch *f;
    const accel_ckpt_model *m;
    accel_result r = ACCEL_OK;
    int l, i, nsd;
    if (!x || !desc || !out || desc->n_layers < 1 || !desc->layers) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "fetch_create: bad arguments");
    *out = NULL;
    m = x->m;
    if (desc->device < 0 && desc->device != ACCEL_CKPT_CPU)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "fetch_create: the execution device is a GPU or ACCEL_CKPT_CPU, not %d", desc->device);
    r = accel__ckpt_model_sd(x->m);
    if (r != ACCEL_OK) return r;
    nsd = (int)stbds_arrlen(m->sd_order);
    f = (accel_ckpt_fetch *)accel__ckpt_zalloc(acc, 1, sizeof *f);
    if (!f) return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "fetch_create");
    f->x = x;
    f->acc = acc;
    f->device = desc->device;
    f->real_gpu = desc->device >= 0 && accel__ckpt_real_gpu(acc);
    f->nlayers = desc->n_layers;
    f->no_prefetch = desc->no_prefetch;
    f->job_layer = -1;
    f->compute_stream = desc->stream ? (void *)desc->stream : acc ? (void *)acc->stream : NULL;
    f->tens = (int **)accel__ckpt_zalloc(acc, (size_t)f->nlayers, sizeof(int *));
    f->off = (int64_t **)accel__ckpt_zalloc(acc, (size_t)f->nlayers, sizeof(int64_t *));
    f->views = (accel_tensor **)accel__ckpt_zalloc(acc, (size_t)f->nlayers, sizeof(accel_tensor *));
    f->nt = (int *)accel__ckpt_zalloc(acc, (size_t)f->nlayers, sizeof(int));
    if (!f->tens || !f->off || !f->views || !f->nt) { r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "fetch_create"); goto fail; }
    /* each layer: the tensors under its name (state_dict order); their slot offsets (a storage once per layer) */
    for (l = 0; l < f->nlayers && r == ACCEL_OK; ++l) {
        const char *ln = desc->layers[l];
        int kind = -1, c = 0;
        size_t bytes = 0;
        if (!ln || (*ln && accel__ckpt_mfind(m, ln, &kind) < 0)) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "fetch_create: layer %d \"%.200s\" is no module or tensor of the model", l, ln ? ln : "(null)");
            break;
        }
        f->tens[l] = (int *)accel__ckpt_zalloc(acc, (size_t)nsd, sizeof(int));
        f->off[l] = (int64_t *)accel__ckpt_zalloc(acc, (size_t)nsd, sizeof(int64_t));
        f->views[l] = (accel_tensor *)accel__ckpt_zalloc(acc, (size_t)nsd, sizeof(accel_tensor));
        if (!f->tens[l] || !f->off[l] || !f->views[l]) { r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "fetch_create"); break; }
        for (i = 0; i < nsd && r == ACCEL_OK; ++i) {
            int ti = m->sd_order[i], k;
            const char *tn = m->tens[ti].t.name;
            const accel__ckpt_place *p = &x->pl[m->tens[ti].storage];
            if (*ln && strcmp(tn, ln) && !accel__ckpt_startswith_dot(tn, ln)) continue;
            f->tens[l][c] = ti;
            f->off[l][c] = -1;
            if (p->device >= 0 && p->device != f->device && accel__ckpt_real_gpu(acc)) {
                r = ACCEL__FAIL(acc, ACCEL_ERR_UNSUPPORTED, "fetch_create: \"%.200s\" is on GPU %d; the fetch brings CPU and disk tensors "
                                "to the execution device", tn, p->device);
                break;
            }
            if (!accel__ckpt_resident(f, p)) {
                for (k = 0; k < c; ++k) /* an alias of a tensor already in this layer shares its copy */
                    if (m->tens[f->tens[l][k]].storage == m->tens[ti].storage) break;
                if (k < c) f->off[l][c] = f->off[l][k];
                else {
                    f->off[l][c] = (int64_t)bytes;
                    bytes += ((size_t)p->numel * accel_dtype_size(p->target) + ACCEL__CKPT_SLOT_ALIGN - 1) / ACCEL__CKPT_SLOT_ALIGN * ACCEL__CKPT_SLOT_ALIGN;
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
            if (e == cudaSuccess) e = cudaEventCreateWithFlags((cudaEvent_t *)&f->slot[i].copied, cudaEventDisableTiming);
            if (e == cudaSuccess) e = cudaEventCreateWithFlags((cudaEvent_t *)&f->slot[i].computed, cudaEventDisableTiming);
            if (e == cudaSuccess && !f->copy_stream) e = cudaStreamCreateWithFlags((cudaStream_t *)&f->copy_stream, cudaStreamNonBlocking);
            if (e != cudaSuccess) { r = ACCEL__FAIL(acc, ACCEL_ERR_CUDA, "fetch_create: %s", cudaGetErrorString(e)); break; }
            f->slot[i].host = accel_pinned_alloc(acc, f->slot_bytes);
            f->slot[i].dev = f->slot[i].host ? accel_device_alloc(acc, f->slot_bytes) : NULL;
            if (!f->slot[i].dev) r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "fetch_create: two slots of %zu bytes", f->slot_bytes);
            continue;
        }
#endif
        f->slot[i].host = accel_device_alloc(acc, f->slot_bytes); /* the execution device: host memory without a GPU */
        if (!f->slot[i].host) r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "fetch_create: two slots of %zu bytes", f->slot_bytes);
    }
    if (r != ACCEL_OK) goto fail;
    if (pthread_mutex_init(&f->mu, NULL) != 0) { r = ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "fetch_create: mutex"); goto fail; }
    if (pthread_cond_init(&f->cv, NULL) != 0) {
        pthread_mutex_destroy(&f->mu);
        r = ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "fetch_create: condition variable");
        goto fail;
    }
    if (pthread_create(&f->helper, NULL, accel__ckpt_helper, f) != 0) {
        pthread_mutex_destroy(&f->mu);
        pthread_cond_destroy(&f->cv);
        r = ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "fetch_create: cannot start the prefetch thread");
        goto fail;
    }
    f->helper_started = 1;
    *out = f;
    return ACCEL_OK;
fail:
    accel_ckpt_fetch_destroy(f);
    return r;
}
ACCEL__DEF accel_result accel_ckpt_fetch_begin(accel_ckpt_fetch *f, int i, const accel_tensor **tensors, int *n) {
    const accel_ckpt_model *m;
    accel__ckpt_slot *sl;
    int s, k, err;
    if (!f || i < 0 || i >= (f ? f->nlayers : 0) || !tensors || !n)
        return ACCEL__FAIL(f ? f->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, "fetch_begin: bad arguments (layer %d)", i);
    m = f->x->m;
    s = i & 1;
    sl = &f->slot[s];
    pthread_mutex_lock(&f->mu);
    if (!((sl->state == ACCEL__CKPT_SLOT_FILLING || sl->state == ACCEL__CKPT_SLOT_READY) && sl->layer == i)) {
        if (sl->state == ACCEL__CKPT_SLOT_IN_USE) {
            int busy = sl->layer;
            pthread_mutex_unlock(&f->mu);
            return ACCEL__FAIL(f->acc, ACCEL_ERR_STATE, "fetch_begin(%d): layer %d holds its buffer (call fetch_end(%d) first)", i, busy, busy);
        }
        while (f->job_layer >= 0) pthread_cond_wait(&f->cv, &f->mu); /* the helper finishes a prefetch of another layer */
        accel__ckpt_request(f, i);
    }
    while (sl->state != ACCEL__CKPT_SLOT_READY) pthread_cond_wait(&f->cv, &f->mu);
    err = f->err;
    f->err = 0;
    sl->state = ACCEL__CKPT_SLOT_IN_USE;
    /* prefetch layer i+1 into the other slot while layer i runs */
    if (!err && !f->no_prefetch && i + 1 < f->nlayers && f->slot[s ^ 1].state == ACCEL__CKPT_SLOT_FREE && f->job_layer < 0)
        accel__ckpt_request(f, i + 1);
    pthread_mutex_unlock(&f->mu);
    if (err) {
        sl->state = ACCEL__CKPT_SLOT_FREE;
        errno = err;
        return accel__io_fail(f->acc, "fetch: cannot read the offloaded tensors of", "a layer");
    }
#ifdef ACCEL_WITH_CUDA
    if (f->real_gpu) {
        cudaStream_t cs = (cudaStream_t)f->copy_stream;
        cudaError_t e = cudaSetDevice(f->device);
        if (e == cudaSuccess && sl->recorded_compute) e = cudaStreamWaitEvent(cs, (cudaEvent_t)sl->computed, 0);
        if (e == cudaSuccess && f->slot_bytes) e = cudaMemcpyAsync(sl->dev, sl->host, f->slot_bytes, cudaMemcpyHostToDevice, cs);
        if (e == cudaSuccess) e = cudaEventRecord((cudaEvent_t)sl->copied, cs);
        if (e == cudaSuccess) e = cudaStreamWaitEvent((cudaStream_t)f->compute_stream, (cudaEvent_t)sl->copied, 0);
        if (e != cudaSuccess) {
            sl->state = ACCEL__CKPT_SLOT_FREE;
            return ACCEL__FAIL(f->acc, ACCEL_ERR_CUDA, "fetch_begin(%d): %s", i, cudaGetErrorString(e));
        }
        sl->recorded_copy = 1;
    }
#endif
    for (k = 0; k < f->nt[i]; ++k) {
        int ti = f->tens[i][k];
        const accel__ckpt_place *p = &f->x->pl[m->tens[ti].storage];
        accel_tensor *v = &f->views[i][k];
        *v = m->tens[ti].t;
        v->dtype = p->target;
        v->ptr = f->off[i][k] < 0 ? p->ptr : (char *)(f->real_gpu ? sl->dev : sl->host) + f->off[i][k];
    }
    *tensors = f->views[i];
    *n = f->nt[i];
    return ACCEL_OK;
}
ACCEL__DEF accel_result accel_ckpt_fetch_end(accel_ckpt_fetch *f, int i) {
    accel__ckpt_slot *sl;
    if (!f || i < 0 || i >= f->nlayers) return ACCEL__FAIL(f ? f->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, "fetch_end: bad arguments (layer %d)", i);
    sl = &f->slot[i & 1];
    if (sl->state != ACCEL__CKPT_SLOT_IN_USE || sl->layer != i)
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
    sl->state = ACCEL__CKPT_SLOT_FREE;
    if (!f->no_prefetch && f->job_layer < 0) { /* a prefetch that could not start while this buffer was taken */
        accel__ckpt_slot *other = &f->slot[(i + 1) & 1];
        int next = other->state == ACCEL__CKPT_SLOT_IN_USE && other->layer == i + 1 ? i + 2 : i + 1;
        if (next < f->nlayers && f->slot[next & 1].state == ACCEL__CKPT_SLOT_FREE) accel__ckpt_request(f, next);
    }
    pthread_mutex_unlock(&f->mu);
    return ACCEL_OK;
}

/* ------------------------------------------------------------------------------------------ 19. the offload folder */
static const char *accel__ckpt_np_name(accel_dtype d) { /* numpy's names, as Accelerate's offload_weight records them */
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
static accel_dtype accel__ckpt_np_dtype(const char *s) {
    int d;
    for (d = 1; d < ACCEL_DTYPE_COUNT; ++d)
        if (!strcmp(accel__ckpt_np_name((accel_dtype)d), s)) return (accel_dtype)d;
    return ACCEL_DTYPE_INVALID;
}
/* A JSON value as Python's json.dump(indent=2) writes it (ensure_ascii); numbers keep their text. */
static void accel__ckpt_json_emit(accel__sb *b, const accel__ckpt_json *j, int nd, int level) {
    int c, k, first = 1;
    switch (j->nodes[nd].type) {
    case ACCEL__CKPT_J_NULL: accel__sb_puts(b, "null"); return;
    case ACCEL__CKPT_J_TRUE: accel__sb_puts(b, "true"); return;
    case ACCEL__CKPT_J_FALSE: accel__sb_puts(b, "false"); return;
    case ACCEL__CKPT_J_NUM: accel__sb_add(b, accel__ckpt_jstr(j, nd), j->nodes[nd].len); return;
    case ACCEL__CKPT_J_STR: accel__sb_json_str(b, accel__ckpt_jstr(j, nd), j->nodes[nd].len, 1); return;
    default: break;
    }
    if (j->nodes[nd].count == 0) {
        accel__sb_puts(b, j->nodes[nd].type == ACCEL__CKPT_J_OBJ ? "{}" : "[]");
        return;
    }
    accel__sb_puts(b, j->nodes[nd].type == ACCEL__CKPT_J_OBJ ? "{" : "[");
    for (c = j->nodes[nd].first; c >= 0; c = j->nodes[c].next) {
        accel__sb_puts(b, first ? "\n" : ",\n");
        first = 0;
        for (k = 0; k < level + 1; ++k) accel__sb_puts(b, "  ");
        if (j->nodes[nd].type == ACCEL__CKPT_J_OBJ) {
            accel__sb_json_str(b, accel__ckpt_jkeyp(j, c), j->nodes[c].keylen, 1);
            accel__sb_puts(b, ": ");
        }
        accel__ckpt_json_emit(b, j, c, level + 1);
    }
    accel__sb_puts(b, "\n");
    for (k = 0; k < level; ++k) accel__sb_puts(b, "  ");
    accel__sb_puts(b, j->nodes[nd].type == ACCEL__CKPT_J_OBJ ? "}" : "]");
}
/* One index entry: {"dtype": …, "shape": […]} at indent level 1. */
static void accel__ckpt_offload_entry(accel__sb *b, const accel_tensor *t) {
    int d;
    accel__sb_puts(b, "{\n    \"dtype\": ");
    accel__sb_json_str(b, accel__ckpt_np_name(t->dtype), strlen(accel__ckpt_np_name(t->dtype)), 1);
    accel__sb_puts(b, ",\n    \"shape\": ");
    if (t->ndim == 0) accel__sb_puts(b, "[]");
    else {
        accel__sb_puts(b, "[");
        for (d = 0; d < t->ndim; ++d) {
            accel__sb_puts(b, d ? ",\n      " : "\n      ");
            accel__ckpt_sb_u64(b, (uint64_t)t->shape[d]);
        }
        accel__sb_puts(b, "\n    ]");
    }
    accel__sb_puts(b, "\n  }");
}
ACCEL__DEF accel_result accel_ckpt_offload_save(accel *acc, const char *folder, const accel_tensor *t, int n) {
    char path[8400], *old = NULL;
    size_t oldn = 0;
    accel__ckpt_json j;
    accel__sb b;
    accel__ckpt_stage stage;
    int root = -1, i, c, first = 1;
    unsigned char *done = NULL;
    accel_result r;
    if (!folder) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "offload_save: folder is NULL");
    r = accel__ckpt_check_tensors(acc, t, n, "offload_save");
    for (i = 0; i < n && r == ACCEL_OK; ++i)
        if (strchr(t[i].name, '/') || strlen(t[i].name) > 250)
            r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "offload_save: \"%.200s\" cannot be a file name (<name>.dat)", t[i].name);
    if (r != ACCEL_OK) return r;
    if (n == 0) return ACCEL_OK; /* Accelerate's save_offload_index writes nothing for an empty index */
    if (accel__mkdir_p(folder, NULL, 0) != 0) return accel__io_fail(acc, "cannot create directory", folder);
    memset(&j, 0, sizeof j);
    accel__ckpt_stage_begin(&stage, acc);
    /* the .dat files: the raw bytes (a 0-rank tensor as one element, as numpy's memmap stores it) */
    for (i = 0; i < n && r == ACCEL_OK; ++i) {
        char tmp[8500];
        int fd;
        uint64_t nb = (uint64_t)accel_tensor_nbytes(&t[i]);
        accel__fmt(path, sizeof path, "%s/%s.dat", folder, t[i].name);
        r = accel__atomic_open(acc, path, tmp, sizeof tmp, &fd);
        if (r != ACCEL_OK) break;
        if (nb && accel__ckpt_is_device_ptr(t[i].ptr)) r = accel__ckpt_write_from_device(acc, &stage, fd, tmp, t[i].ptr, nb, NULL);
        else if (nb && accel__write_all(fd, t[i].ptr, (size_t)nb) != 0) r = accel__io_fail(acc, "cannot write", tmp);
        if (r != ACCEL_OK) (void)accel__atomic_commit(acc, fd, tmp, path, 0);
        else r = accel__atomic_commit(acc, fd, tmp, path, 1);
    }
    accel__ckpt_stage_end(&stage);
    if (r != ACCEL_OK) return r;
    /* index.json: the existing one updated (its keys keep their places, new ones are appended), json.dump(indent=2) */
    accel__fmt(path, sizeof path, "%s/index.json", folder);
    if (accel__is_file(path)) {
        r = accel__read_file(acc, path, &old, &oldn, (size_t)100000000);
        if (r == ACCEL_OK && !accel__utf8_valid((const unsigned char *)old, oldn, NULL))
            r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.400s is not valid UTF-8", path);
        if (r == ACCEL_OK) {
            root = accel__ckpt_json_parse(&j, acc, old, oldn);
            if (root < 0) r = accel__ckpt_json_failed(acc, &j, path);
            else if (j.nodes[root].type != ACCEL__CKPT_J_OBJ) r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.400s is not a JSON object", path);
        }
    }
    done = (unsigned char *)accel__ckpt_zalloc(acc, (size_t)n, 1);
    if (r == ACCEL_OK && !done) r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "offload_save");
    accel__sb_init(&b, acc);
    if (r == ACCEL_OK) {
        accel__sb_puts(&b, "{");
        for (c = root >= 0 ? j.nodes[root].first : -1; c >= 0; c = j.nodes[c].next) {
            const char *key = accel__ckpt_jkeyp(&j, c);
            for (i = 0; i < n; ++i) /* names are unique (checked above) */
                if (strlen(t[i].name) == j.nodes[c].keylen && !memcmp(t[i].name, key, j.nodes[c].keylen)) break;
            accel__sb_puts(&b, first ? "\n  " : ",\n  ");
            first = 0;
            accel__sb_json_str(&b, key, j.nodes[c].keylen, 1);
            accel__sb_puts(&b, ": ");
            if (i < n) { /* dict.update: the new value, at the old place */
                done[i] = 1;
                accel__ckpt_offload_entry(&b, &t[i]);
            } else {
                accel__ckpt_json_emit(&b, &j, c, 1);
            }
        }
        for (i = 0; i < n; ++i) {
            if (done[i]) continue;
            accel__sb_puts(&b, first ? "\n  " : ",\n  ");
            first = 0;
            accel__sb_json_str(&b, t[i].name, strlen(t[i].name), 1);
            accel__sb_puts(&b, ": ");
            accel__ckpt_offload_entry(&b, &t[i]);
        }
        accel__sb_puts(&b, "\n}");
        r = b.oom ? accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "%.400s", path) : accel__write_file(acc, path, b.p, b.n, 1);
    }
    accel__sb_free(&b);
    accel_host_free(acc, done);
    accel__ckpt_json_free(&j);
    accel_host_free(acc, old);
    return r;
}

ACCEL__DEF accel_result accel_ckpt_file_open_offload(accel *acc, const char *folder, accel_ckpt_file **out) {
    char path[8400], *data = NULL;
    size_t n = 0;
    accel__ckpt_json j;
    accel_ckpt_file *f = NULL;
    int root, c, i, cnt;
    accel_result r;
    if (!folder || !out) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "file_open_offload: NULL argument");
    *out = NULL;
    memset(&j, 0, sizeof j);
    accel__fmt(path, sizeof path, "%s/index.json", folder);
    r = accel__read_file(acc, path, &data, &n, (size_t)100000000);
    if (r != ACCEL_OK) return r;
    if (!accel__utf8_valid((const unsigned char *)data, n, NULL)) r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.400s is not valid UTF-8", path);
    root = r == ACCEL_OK ? accel__ckpt_json_parse(&j, acc, data, n) : -1;
    if (r == ACCEL_OK && root < 0) r = accel__ckpt_json_failed(acc, &j, path);
    if (r == ACCEL_OK && j.nodes[root].type != ACCEL__CKPT_J_OBJ) r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.400s is not a JSON object", path);
    if (r == ACCEL_OK) r = accel__ckpt_st_new(acc, folder, &f);
    for (c = r == ACCEL_OK ? j.nodes[root].first : -1; c >= 0 && r == ACCEL_OK; c = j.nodes[c].next) {
        const char *key = accel__ckpt_jkeyp(&j, c);
        int stf = accel__ckpt_jget(&j, c, "safetensors_file"), dt = accel__ckpt_jget(&j, c, "dtype"), sh = accel__ckpt_jget(&j, c, "shape"), m2, d = 0;
        accel_ckpt_entry e;
        accel_tensor t;
        memset(&e, 0, sizeof e);
        e.name = (const char *)(uintptr_t)j.nodes[c].key; /* an arena offset until the arena is final */
        if (strlen(key) != j.nodes[c].keylen || strchr(key, '/') || j.nodes[c].type != ACCEL__CKPT_J_OBJ) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.400s: entry \"%.200s\" is not {dtype, shape} or {safetensors_file, …}", path, key);
            break;
        }
        if (stf >= 0 && j.nodes[stf].type != ACCEL__CKPT_J_NULL) { /* the weight stays in a safetensors file */
            accel_ckpt_file *sub = NULL;
            int wn = accel__ckpt_jget(&j, c, "weight_name"), k;
            const char *wname = wn >= 0 && accel__ckpt_jis_str(&j, wn) ? accel__ckpt_jstr(&j, wn) : key;
            if (!accel__ckpt_jis_str(&j, stf)) { r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.400s: \"%.200s\": safetensors_file is not a path", path, key); break; }
            for (k = 0; k < (int)stbds_arrlen(f->subs); ++k)
                if (!strcmp(f->subs[k]->path, accel__ckpt_jstr(&j, stf))) sub = f->subs[k];
            if (!sub) {
                r = accel_ckpt_file_open(acc, accel__ckpt_jstr(&j, stf), &sub);
                if (r == ACCEL_OK && ACCEL__ARR_PUT(f->subs, sub) != 0) {
                    accel_ckpt_file_destroy(sub);
                    r = ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "%.400s: out of memory", path);
                }
                if (r != ACCEL_OK) break;
            }
            k = accel_ckpt_file_find(sub, wname);
            if (k < 0) { r = ACCEL__FAIL(acc, ACCEL_ERR_NOT_FOUND, "%.400s: \"%.200s\" is not in %.300s", path, wname, sub->path); break; }
            e.dtype = sub->entries[k].dtype;
            e.ndim = sub->entries[k].ndim;
            memcpy(e.shape, sub->entries[k].shape, sizeof e.shape);
            e.end = sub->entries[k].end - sub->entries[k].begin;
            e.data = sub->entries[k].data;
        } else {
            int fd;
            struct stat st;
            if (!accel__ckpt_jis_str(&j, dt) || sh < 0 || j.nodes[sh].type != ACCEL__CKPT_J_ARR || j.nodes[sh].count > ACCEL_MAX_DIMS) {
                r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.400s: \"%.200s\" needs a dtype string and a shape of at most %d dimensions", path, key, ACCEL_MAX_DIMS);
                break;
            }
            e.dtype = accel__ckpt_np_dtype(accel__ckpt_jstr(&j, dt));
            if (e.dtype == ACCEL_DTYPE_INVALID) { r = ACCEL__FAIL(acc, ACCEL_ERR_UNSUPPORTED, "%.400s: \"%.200s\": dtype \"%.40s\"", path, key, accel__ckpt_jstr(&j, dt)); break; }
            for (m2 = j.nodes[sh].first; m2 >= 0; m2 = j.nodes[m2].next, ++d) {
                uint64_t v;
                if (accel__ckpt_ju64(&j, m2, &v) || v > (uint64_t)INT64_MAX) { r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.400s: \"%.200s\": bad shape", path, key); break; }
                e.shape[d] = (int64_t)v;
            }
            if (r != ACCEL_OK) break;
            e.ndim = d;
            memset(&t, 0, sizeof t);
            t.dtype = e.dtype;
            t.ndim = e.ndim;
            memcpy(t.shape, e.shape, sizeof t.shape);
            if (accel_tensor_nbytes(&t) < 0) { r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.400s: \"%.200s\": shape product overflows", path, key); break; }
            e.end = (uint64_t)accel_tensor_nbytes(&t);
            accel__fmt(path, sizeof path, "%s/%s.dat", folder, key);
            fd = open(path, O_RDONLY);
            if (fd < 0) { r = errno == ENOENT ? ACCEL__FAIL(acc, ACCEL_ERR_NOT_FOUND, "%.400s does not exist", path) : accel__io_fail(acc, "cannot open", path); break; }
            if (fstat(fd, &st) != 0 || (uint64_t)st.st_size != e.end) {
                close(fd);
                r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.400s is %lld bytes, its index entry (%s %d dims) needs %llu", path,
                                (long long)st.st_size, accel_dtype_name(e.dtype), e.ndim, (unsigned long long)e.end);
                break;
            }
            if (e.end > 0) {
                void *mp = mmap(NULL, (size_t)e.end, PROT_READ, MAP_SHARED, fd, 0);
                accel__ckpt_piece pc;
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
        if (ACCEL__ARR_PUT(f->entries, e) != 0) r = ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "%.400s: out of memory", path);
    }
    if (r == ACCEL_OK) { /* the arena is final: names become pointers; the name index */
        f->names = j.arena;
        j.arena = NULL;
        cnt = (int)stbds_arrlen(f->entries);
        f->by_name = (const accel_ckpt_entry **)accel_host_alloc(acc, sizeof(accel_ckpt_entry *) * (size_t)(cnt ? cnt : 1));
        if (!f->by_name) r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "%.400s: name index", path);
        for (i = 0; r == ACCEL_OK && i < cnt; ++i) {
            f->entries[i].name = f->names + (size_t)(uintptr_t)f->entries[i].name;
            f->by_name[i] = &f->entries[i];
        }
        if (r == ACCEL_OK && cnt > 1) qsort((void *)f->by_name, (size_t)cnt, sizeof *f->by_name, accel__ckpt_entryp_name_cmp);
    }
    accel__ckpt_json_free(&j);
    accel_host_free(acc, data);
    if (r != ACCEL_OK) {
        if (f && !f->names && f->entries) stbds_header(f->entries)->length = 0; /* names are still offsets */
        accel_ckpt_file_destroy(f);
        return r;
    }
    *out = f;
    return ACCEL_OK;
}

/* ---------------------------------------------------------------------------- 20. find_executable_batch_size */
struct accel_ckpt_attempt {
    accel *acc;
    void **mem; /* stb_ds: what the attempt allocated */
    int *kind;  /* stb_ds: 1 host, 2 device, 3 pinned */
};
static void *accel__ckpt_attempt_alloc(accel_ckpt_attempt *a, size_t size, int kind) {
    void *p;
    if (!a) return NULL;
    if (accel__arr_reserve((void **)&a->mem, sizeof(void *), 1) != 0 || accel__arr_reserve((void **)&a->kind, sizeof(int), 1) != 0) {
        ACCEL__FAIL(a->acc, ACCEL_ERR_OUT_OF_MEMORY, "find_executable_batch_size: out of memory");
        return NULL;
    }
    p = kind == 1 ? accel_host_alloc(a->acc, size) : kind == 2 ? accel_device_alloc(a->acc, size) : accel_pinned_alloc(a->acc, size);
    if (!p) return NULL;
    (void)ACCEL__ARR_PUT(a->mem, p); /* reserved above */
    (void)ACCEL__ARR_PUT(a->kind, kind);
    return p;
}
ACCEL__DEF void *accel_ckpt_attempt_host_alloc(accel_ckpt_attempt *a, size_t size) { return accel__ckpt_attempt_alloc(a, size, 1); }
ACCEL__DEF void *accel_ckpt_attempt_device_alloc(accel_ckpt_attempt *a, size_t size) { return accel__ckpt_attempt_alloc(a, size, 2); }
ACCEL__DEF void *accel_ckpt_attempt_pinned_alloc(accel_ckpt_attempt *a, size_t size) { return accel__ckpt_attempt_alloc(a, size, 3); }
static void accel__ckpt_attempt_free(accel_ckpt_attempt *a) {
    int i;
    for (i = (int)stbds_arrlen(a->mem) - 1; i >= 0; --i) {
        if (a->kind[i] == 1) accel_host_free(a->acc, a->mem[i]);
        else if (a->kind[i] == 2) accel_device_free(a->acc, a->mem[i]);
        else accel_pinned_free(a->acc, a->mem[i]);
    }
    stbds_arrfree(a->mem);
    stbds_arrfree(a->kind);
    a->mem = NULL;
    a->kind = NULL;
}
ACCEL__DEF accel_result accel_ckpt_find_executable_batch_size(accel *acc, const accel_ckpt_batch_desc *desc, accel_ckpt_step_fn step,
                                                              void *user, int64_t *batch_size) {
    int64_t bs = desc && desc->starting_batch_size ? desc->starting_batch_size : 128;
    if (!step || bs < 0) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "find_executable_batch_size: no step function or a negative batch size");
    for (;;) {
        accel_ckpt_attempt a;
        accel_result r;
        int64_t next;
        if (bs == 0) return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "No executable batch size found, reached zero. The last attempt");
        memset(&a, 0, sizeof a);
        a.acc = acc;
        r = step(user, bs, &a);
        accel__ckpt_attempt_free(&a);
        if (r == ACCEL_OK) {
            if (batch_size) *batch_size = bs;
            return ACCEL_OK;
        }
        if (r != ACCEL_ERR_OUT_OF_MEMORY) return r;
        next = desc && desc->reduce ? desc->reduce(bs, desc->reduce_user) : (int64_t)((double)bs * 0.9);
        if (next < 0 || next >= bs)
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "find_executable_batch_size: the reduce function turned %lld into %lld "
                               "(it must give a smaller size, >= 0)", (long long)bs, (long long)next);
        accel_log(acc, ACCEL_LOG_INFO, "find_executable_batch_size: batch size %lld ran out of memory, trying %lld", (long long)bs, (long long)next);
        bs = next;
    }
}

#endif /* ACCEL_IMPLEMENTATION && !ACCEL__CKPT_IMPL_DONE */

/* accel is released under the MIT licence. Copyright (c) 2026 the accel authors. */
