/* accel.h — the core of accel, a header-only C99 training runtime.

   accel gives hand-written C/CUDA trainers what Hugging Face Accelerate gives PyTorch users: launcher-agnostic
   distributed setup, sharded sampling, loss scaling, gradient accumulation, collectives and checkpoints, with
   Accelerate's semantics. It is tensor-agnostic: it describes memory; your kernels do the math.

   CONTENTS
     USAGE                        the implementation TU; a run from init to shutdown
     THE TRAINING STEP            Accelerate's five changes, in C
     COLLECTIVE CALLS             what every process must call, module by module
     COMPILE-TIME OPTIONS
     ENVIRONMENT                  launcher detection; Accelerate's variables
     THE HOST PROCESS GROUP       accel_hostgroup.h, which this header includes (MPI or a TCP store, security)
     PREEMPTION                   SIGTERM / SIGUSR1 → every rank stops at one step, saves, exits for a requeue
     DIFFERENCES FROM ACCELERATE
     THREADS AND STREAMS
     ERRORS AND LOGGING
     MEMORY                       the allocator hooks
   The core is two files: this one and accel_hostgroup.h (the host process group), which it includes.
   The modules, one concern each: accel_collectives.h (the communicator), accel_ddp.h (DDP's reducer, join),
   accel_zero.h (ZeRO), accel_data.h, accel_amp.h, accel_optim.h, accel_safetensors.h (the file format),
   accel_ckpt.h (save_state/load_state), accel_bigmodel.h (device maps, dispatch), accel_trackers.h, accel_profile.h.

   USAGE
     In exactly one translation unit (a .cu file when you want GPU kernels):
         #define ACCEL_IMPLEMENTATION
         #include "accel.h"            // first: its POSIX feature macros must precede every system header
         #include "accel_data.h"       // ...and the module headers you use
     Everywhere else just #include the headers. The implementation needs stb_ds.h on the include path (Debian:
     libstb-dev, `pkg-config --cflags stb` = -I/usr/include/stb); link MPI when ACCEL_WITH_MPI, cudart/NCCL when used.

         accel acc;
         accel_desc d = {0};                            // zero = default everywhere (C++: accel_desc d = {};)
         d.mixed_precision = ACCEL_PRECISION_BF16;
         d.gradient_accumulation_steps = 4;
         if (accel_init(&acc, &d) != ACCEL_OK) { fprintf(stderr, "%s\n", accel_last_error(&acc)); return 1; }
         accel_set_seed(&acc, 1234, 0);
         accel_print(&acc, "training on %d processes\n", acc.num_processes);   // main process only
         accel_main_process_first_begin(&acc);  prepare_dataset();  accel_main_process_first_end(&acc);
         ...training loop (see "THE TRAINING STEP" below)...
         accel_wait_for_everyone(&acc);
         accel_shutdown(&acc);

   THE TRAINING STEP — Accelerate's "quick adaptation" in C (the five changes; examples/train_digits.c is this loop
   in full, with the same math as examples/train_digits_raw.c which has none of them)
     1. accel_init(&acc, &desc)                         ~ accelerator = Accelerator(...)
     2. shard the data (accel_data.h)                   ~ accelerator.prepare(dataloader)
     3. register gradients with the reducer (accel_ddp.h), create the loss scaler (accel_amp.h) and register
        everything that must survive a restart with the checkpointer (accel_ckpt.h)
                                                        ~ accelerator.prepare(model, optimizer, scheduler)
     4. multiply the loss by scale / accumulation steps ~ accelerator.backward(loss)
     5. accel_accumulate_begin/_end around each micro-batch; step only on sync steps that were not skipped; ask the
        scheduler bookkeeping on EVERY micro-batch     ~ with accelerator.accumulate(model): ... scheduler.step()

     The loop resumes where a checkpoint left it: the epoch and the position inside it belong to the shard, the
     step counters and the RNG to the Accelerator, and load_state restores both. Never count epochs yourself.

         accel_data_shard sh;  accel_data_shard_desc dd = {0};   dd.dataset_len = N; dd.batch_size = B; dd.shuffle = 1;
         accel_data_shard_init(&acc, &sh, &dd);                   // collective: ranks must agree on the config
         accel_coll *coll;     accel_coll_create(&acc, NULL, &coll);
         accel_ddp *red;       accel_ddp_create(coll, NULL, &red);
         accel_ddp_add(red, grads, ngrads);                       // accel_tensor[]
         accel_amp_scaler sc;  accel_amp_scaler_init(&acc, &sc, NULL);   // scales only in fp16
         accel_ckpt *ck;       accel_ckpt_create(&acc, &cd, &ck);        // cd.automatic_checkpoint_naming = 1
         accel_ckpt_register_model(ck, params, nparams);
         accel_ckpt_register(ck, "sampler", accel_data_shard_state_save, accel_data_shard_state_load, &sh);
         accel_ckpt_register(ck, "scaler", accel_amp_scaler_state_save, accel_amp_scaler_state_load, &sc);
         accel_result lr = accel_ckpt_load_state(ck, NULL);      // ACCEL_ERR_NOT_FOUND: no checkpoint yet, start fresh
         if (lr != ACCEL_OK && lr != ACCEL_ERR_NOT_FOUND) die(accel_last_error(&acc));
         while (accel_data_shard_epoch(&sh) < epochs) {
             int64_t n;
             while (accel_data_shard_next(&sh, idx, &n) == ACCEL_OK && n > 0) {   // n == 0: epoch over, next epoch
                 accel_accumulate_begin(&acc);                    // acc.sync_gradients
                 forward_backward(idx, n, accel_amp_loss_scale(&sc) / accel_loss_divisor(&acc));
                 if (accel_should_reduce(&acc)) accel_ddp_wait(red);   // or grad_ready per bucket
                 if (acc.sync_gradients) {
                     int found_inf = 0;
                     accel_amp_unscale_and_check(&sc, grads, ngrads, &found_inf);
                     if (!found_inf) { accel_amp_clip_grad_norm(&acc, grads, ngrads, 1.0, 2.0, 0, NULL);
                                       optimizer_step(lr_at(acc.scheduler_steps)); }
                     accel_amp_update(&sc);
                     accel_optimizer_step_done(&acc, found_inf);
                     zero_grad();
                 }
                 accel_scheduler_steps(&acc, 0);                  // every micro-batch: P per taken step, 0 otherwise
                 accel_accumulate_end(&acc);
                 if (acc.sync_gradients && acc.optimizer_steps % 100 == 0) accel_ckpt_save_state(ck, NULL, NULL, 0);
             }
         }

   COLLECTIVE CALLS — every process must make these calls, in the same order (a missing one is caught by the
   deadline, collective_timeout_ms, default 30 min, then ACCEL_ERR_TIMEOUT):
     core          accel_init, accel_wait_for_everyone, accel_host_* , accel_check_trigger, accel_should_stop,
                   accel_main_process_first_begin/_end, accel_local_main_process_first_begin/_end,
                   accel_synchronize_rng_state, accel_gather_object, accel_broadcast_object_list
     collectives   accel_coll_create, every accel_coll_* data operation, accel_coll_mesh_create/_destroy
     ddp           accel_ddp_finalize (or the first grad_ready/wait), accel_ddp_wait on a step that reduces,
                   accel_ddp_join_begin/_end
     zero          accel_zero_create, accel_zero_wait on a step that reduces, accel_zero_gather, accel_zero_export
     data          accel_data_shard_init, accel_data_seq_init (their configuration agreement check)
     amp           accel_amp_unscale_and_check (found_inf is OR-ed), accel_amp_clip_grad_norm/_grad_norm with
                   ACCEL_AMP_CLIP_SHARDED
     safetensors   accel_st_save_model
     ckpt          accel_ckpt_save_state, accel_ckpt_load_state
     trackers      accel_track_init_trackers
     profile       accel_prof_merge_trace
   Everything else is local.

   COMPILE-TIME OPTIONS
     ACCEL_IMPLEMENTATION   emit definitions in this TU (stb style; the header may be included again afterwards)
     ACCEL_STATIC           make every definition static (single-TU embedding; stb_ds's functions too)
     ACCEL_WITH_MPI         the implementation TU may call MPI (meson defines it when MPI is found)
     ACCEL_WITH_CUDA        the implementation TU may call the CUDA runtime even when compiled by a C compiler
                            (nvcc, i.e. __CUDACC__, implies it); kernels need nvcc
     ACCEL_WITH_NCCL        NCCL is available (used by accel_collectives.h)
     ACCEL_WITH_OPENSSL     the implementation TU may call OpenSSL's libcrypto (link -lcrypto; meson defines it when
                            libcrypto is found): the store and the NCCL bootstraps then admit peers by a secret
                            (accel_hostgroup.h: SECURITY); without it they cannot check one
     ACCEL_NO_STB_DS_IMPLEMENTATION  your program compiles stb_ds's implementation itself (then accel's containers
                            use your STBDS_REALLOC/FREE); otherwise accel emits it once, routed to the allocator hooks
     ACCEL_ASSERT(x)        programmer-bug checks (default: assert); never used for runtime errors
     ACCEL_CHECK(acc, call) for programs that want to die loudly: prints accel_last_error and exit(1)s on failure
                            (define it yourself first to change that)
     ACCEL_API              decoration of every public declaration
     None of these changes the layout of a public struct.
   Symbols: the implementation exports accel_* names only, plus stb_ds's stbds_* functions when it emits stb_ds
   (stbds_arrgrowf, stbds_arrfreef, stbds_hmget_key, stbds_hmget_key_ts, stbds_hmput_default, stbds_hmput_key,
   stbds_hmdel_key, stbds_hmfree_func, stbds_shmode_func, stbds_hash_bytes, stbds_hash_string, stbds_rand_seed,
   stbds_stralloc, stbds_strreset). With ACCEL_STATIC nothing at all is exported.

   ENVIRONMENT (read by accel_init; first match wins for the launcher)
     explicit desc (desc.num_processes > 0)
       → MPI:      OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE} | PMI_RANK,PMI_SIZE (+MPI_LOCALRANKID,
                   MPI_LOCALNRANKS: MPICH/Hydra) | MV2_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE}
       → SLURM:    only inside an srun step (SLURM_STEP_ID): SLURM_PROCID, SLURM_STEP_NUM_TASKS, SLURM_LOCALID,
                   local size = SLURM_STEP_TASKS_PER_NODE ("2(x3),1") at SLURM_NODEID. In an sbatch script or a
                   salloc shell the job's variables describe the allocation, not this process, and are ignored; a
                   launcher started inside a step (mpirun, torchrun, accel launch) wins over the step's layout,
                   and so over PMI_RANK/PMI_SIZE equal to the step's (set by srun --mpi=pmi2 for the step).
                   Under srun without an MPI plugin (no PMIx/PMI variables), or with pmi2 for an Open MPI build, an
                   MPI build fails before MPI_Init, naming the plugin it needs (Open MPI: srun --mpi=pmix; MPICH:
                   srun --mpi=pmi2) — except for a single task, which runs without MPI. Without MPI (a build
                   without it, or desc.no_mpi) the tasks of a step form a TCP store (accel_hostgroup.h).
       → torchrun / accelerate launch: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT
       → single process.
     Every source that is present is parsed; a garbage value (non-integer, negative, rank >= size) is an error that
     names the variable, and two present sources that disagree are an error naming both (Accelerate silently takes
     the first; accel does not guess). When MPI is initialized, MPI's rank/size are the truth and the environment
     is checked against them.
     ACCELERATE_MIXED_PRECISION (no|fp16|bf16|fp8)   used only when desc.mixed_precision is unset (as Accelerate)
     ACCELERATE_GRADIENT_ACCUMULATION_STEPS           overrides desc.gradient_accumulation_steps (as Accelerate)
     ACCELERATE_USE_CPU, ACCELERATE_DEBUG_MODE        flags, parsed like Accelerate's str_to_bool:
                                                      y/yes/t/true/on/1 and n/no/f/false/off/0, any case;
                                                      anything else is an error (not a silent default)
     ACCEL_LOG_LEVEL (error|warn|info|debug|0..3)     the log level when desc.log_level is ACCEL_LOG_DEFAULT
                                                      (default warn)
     ACCEL_COLLECTIVE_TIMEOUT, ACCEL_TRAIN_TIMEOUT    seconds (decimals allowed) when desc.collective_timeout_ms /
                                                      train_timeout_ms are 0; the train deadline applies from this
                                                      process's first completed optimizer step (default: off)
     ACCEL_FLIGHT_RECORDER_SIZE                       collective calls the flight recorder keeps (default 2000,
                                                      0 = off; accel_collectives.h: FLIGHT RECORDER)
   A wait of 30 s or more logs one WARN line a minute naming the call and whom it waits for. accel_shutdown after a
   failure (an error recorded since the last successful collective) meets the other ranks in a barrier for 10 s at
   most and then calls MPI_Abort instead of blocking in MPI_Finalize while they wait out their deadline.

   THE HOST PROCESS GROUP
     The group every collective call above runs on, and its calls (accel_wait_for_everyone, accel_host_*,
     accel_gather_object, accel_broadcast_object_list, accel_free_port), are accel_hostgroup.h's: MPI or a TCP store
     with deadlines and agreement checks, the store's admission (SECURITY: ACCEL_STORE_SECRET) and the flight
     recorder's ring; its manual is there. accel_init sets the group up, so accel.h includes accel_hostgroup.h (at the
     end of its declarations and at §6 of its implementation) and including accel.h gives you both; accel_hostgroup.h
     includes accel.h, so it also compiles alone (accel_hostgroup.h: HOW IT IS INCLUDED).

   PREEMPTION (Slurm's notice before the time limit, sbatch --signal=USR1@90; SIGTERM from scancel, a preempting job
   or the node's shutdown)
     accel_preemption_install(&acc, ACCEL_PREEMPT_SIGNALS) after accel_init, on every rank: from then until
     accel_shutdown, SIGTERM and SIGUSR1 no longer end the process but set its stop flag. At each step boundary
     accel_should_stop(&acc, &stop) — a collective: one small host all-reduce, accel_check_trigger's — tells every
     rank, at the same step, whether any rank got one (*stop: 0, or the signal's number). Then save (synchronously,
     or accel_ckpt_wait for an async save), print a line and return ACCEL_EXIT_REQUEUE (75) from main; the job script
     requeues on that code and the next run resumes (README.md: "Preemption and requeue under Slurm"). The flag
     stays set: later calls agree on stopping too.
         if (acc.sync_gradients) {                              // after the step's optimizer step and counters
             int stop = 0;
             if (accel_should_stop(&acc, &stop) != ACCEL_OK) goto fail;
             if (stop) { save(ck); accel_ckpt_wait(ck); printf("preempted: saved, exiting for a requeue\n");
                         rc = ACCEL_EXIT_REQUEUE; goto done; }  // done: the normal cleanup and accel_shutdown
         }
     A call rather than a desc field: a signal's disposition is the process's, not an Accelerator's — the program
     chooses whether (a run without checkpoints has nothing to save and should still die on SIGTERM) and when (after
     its own handlers, so that accel's chains to them).
     The handler stores the signal's number (a volatile sig_atomic_t, nothing else), then on SIGUSR1 writes the flight
     recorder's dump where one is set up (accel_collectives.h: FLIGHT RECORDER; the same handler serves both, in
     either order of setup), then calls the handler it replaced when that was the program's own (plain or
     SA_SIGINFO; SIG_DFL's action, ending the process, and SIG_IGN are not taken). It is installed with SA_RESTART;
     accel's own waits retry on EINTR, and a rank blocked in a collective when its signal arrives completes it and
     stops at the next boundary with the others. accel_shutdown restores the replaced dispositions (unless a handler
     installed later has replaced accel's: that one is left in place, with a WARN). One Accelerator at a time may
     install them (another gets ACCEL_ERR_STATE). Library code never exits: the program returns the code.

   DIFFERENCES FROM ACCELERATE (deliberate, see docs/semantics.md "Policies")
     - Multi-process CPU runs are MULTI_CPU whenever P > 1 and no GPU is used; Accelerate additionally requires
       cpu=True and otherwise silently runs P independent single-process jobs.
     - Conflicting launcher environments are an error instead of "first wins".
     - adjust_scheduler is honoured (policy 3); Accelerate drops the setting.
     - find_executable_batch_size retries on ACCEL_ERR_OUT_OF_MEMORY returned by the step (accel_attempt_*_alloc
       report it), not on a matched exception message; the default reduction is Accelerate 1.x's int(0.9 * size).

   THREADS AND STREAMS
     An accel is used by one thread at a time. Device work is enqueued on acc.stream (user-settable; NULL = the
     legacy default stream). Host collectives synchronize nothing on the device.

   ERRORS AND LOGGING
     Every fallible call returns accel_result; accel_last_error(acc) holds the detailed message (what failed,
     file:line of the failing MPI/CUDA/NCCL call, rank). Errors are returned, not printed: print the message once
     yourself (or use ACCEL_CHECK). The log callback sees every failure at ACCEL_LOG_DEBUG (ACCEL_LOG_LEVEL=debug
     shows them as they happen), expected outcomes (no checkpoint to resume from) at INFO, and problems that cannot
     be returned (cleanup failures, fallbacks) at WARN. Library code never exits. A call that fails changes nothing it
     was asked to change.

   MEMORY
     Every host allocation of accel and its modules goes through desc.host_allocator (default malloc/free), every
     device allocation through desc.device_allocator (default cudaMalloc/cudaFree) and every pinned host buffer
     (staging for device copies) through desc.pinned_allocator (default cudaHostAlloc/cudaFreeHost). stb_ds has no
     per-call context, so accel's stb_ds containers use the host allocator of the most recently initialized
     Accelerator that set one (process-wide: set it before starting threads); every block remembers the allocator
     that made it, so it is always freed by the same one. accel_free_memory (Accelerate's free_memory / clear)
     returns the Accelerator's own scratch between two trainings and restarts acc->step.
*/
#ifndef ACCEL_H_INCLUDED
#define ACCEL_H_INCLUDED

/* The implementation uses POSIX (clock_gettime, mmap, fsync, sockets). Under -std=c99 those need a feature macro
   before the first system header: include accel.h first in the ACCEL_IMPLEMENTATION TU, or define them yourself. */
#if defined(ACCEL_IMPLEMENTATION) && !defined(_GNU_SOURCE) && !defined(_DEFAULT_SOURCE) && !defined(_WIN32)
#define _DEFAULT_SOURCE 1
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#endif

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h> /* exit() in ACCEL_CHECK, which expands in user code */
#include <string.h> /* memcpy in the bit-cast helpers below */

#define ACCEL_VERSION_MAJOR 0
#define ACCEL_VERSION_MINOR 2
#define ACCEL_VERSION_PATCH 0
#define ACCEL_VERSION_NUMBER (ACCEL_VERSION_MAJOR * 10000 + ACCEL_VERSION_MINOR * 100 + ACCEL_VERSION_PATCH)

#ifndef ACCEL_API
#ifdef ACCEL_STATIC
#define ACCEL_API static
#else
#define ACCEL_API extern
#endif
#endif

#ifndef ACCEL_HD
#ifdef __CUDACC__
#define ACCEL_HD __host__ __device__
#else
#define ACCEL_HD
#endif
#endif

/* Element-wise helpers shared by the CPU path and CUDA kernels are `static ACCEL_INLINE ACCEL_HD`. */
#ifndef ACCEL_INLINE
#if defined(__cplusplus) || (defined(__STDC_VERSION__) && __STDC_VERSION__ >= 199901L)
#define ACCEL_INLINE inline
#else
#define ACCEL_INLINE
#endif
#endif

#ifndef ACCEL_RESTRICT
#if defined(__CUDACC__) || defined(__cplusplus)
#define ACCEL_RESTRICT __restrict__
#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 199901L
#define ACCEL_RESTRICT restrict
#else
#define ACCEL_RESTRICT
#endif
#endif

#ifndef ACCEL_ASSERT
#include <assert.h>
#define ACCEL_ASSERT(x) assert(x)
#endif

/* printf-format checking where the compiler supports it. */
#if defined(__GNUC__) || defined(__clang__)
#define ACCEL__PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define ACCEL__PRINTF(a, b)
#endif

#ifdef __cplusplus
extern "C" {
#endif

struct CUstream_st; /* cudaStream_t without CUDA headers */
typedef struct accel accel;

/* ---------------------------------------------------------------------------------------------------- results */
typedef enum accel_result {
    ACCEL_OK = 0,
    ACCEL_ERR_INVALID_ARGUMENT, /* NULL, wrong size/dtype, bad option value */
    ACCEL_ERR_OUT_OF_MEMORY,    /* an allocator returned NULL */
    ACCEL_ERR_UNSUPPORTED,      /* not available in this build or configuration */
    ACCEL_ERR_ENVIRONMENT,      /* a launcher/ACCELERATE_* variable is malformed or inconsistent */
    ACCEL_ERR_MISMATCH,         /* ranks disagree (configuration, collective arguments) */
    ACCEL_ERR_STATE,            /* call made in the wrong state/order (e.g. unscale twice in a step) */
    ACCEL_ERR_MPI,              /* an MPI call failed */
    ACCEL_ERR_CUDA,             /* a CUDA runtime call failed */
    ACCEL_ERR_NCCL,             /* an NCCL call failed */
    ACCEL_ERR_IO,               /* open/read/write/fsync/rename failed */
    ACCEL_ERR_FORMAT,           /* corrupt or malformed file / bytes */
    ACCEL_ERR_NOT_FOUND,        /* a named thing does not exist */
    ACCEL_ERR_TIMEOUT,          /* a deadline passed (peer dead or stuck) */
    ACCEL_ERR_REMOTE,           /* another rank failed */
    ACCEL_RESULT_COUNT
} accel_result;

ACCEL_API const char *accel_result_string(accel_result r);

/* -------------------------------------------------------------------------------------------------- version */
ACCEL_API int accel_version(void);             /* ACCEL_VERSION_NUMBER of the implementation */
ACCEL_API const char *accel_version_string(void); /* "0.2.0" */

/* ------------------------------------------------------------------------------------------- errors, logging */
typedef enum accel_log_level {
    ACCEL_LOG_DEFAULT = 0, /* desc: ACCEL_LOG_LEVEL, else warn */
    ACCEL_LOG_ERROR,
    ACCEL_LOG_WARN,
    ACCEL_LOG_INFO,
    ACCEL_LOG_DEBUG
} accel_log_level;

typedef void (*accel_log_fn)(void *user_data, accel_log_level level, const char *message);

/* The process-wide logger used when no Accelerator is at hand (and by accel_init before the desc's logger is known).
   fn NULL restores the default (stderr, level from ACCEL_LOG_LEVEL). */
ACCEL_API void accel_set_default_logger(accel_log_fn fn, void *user_data);
/* Through acc's logger (acc NULL: the process-wide one), if level is within acc's log level. */
ACCEL_API void accel_log(const accel *acc, accel_log_level level, const char *fmt, ...) ACCEL__PRINTF(3, 4);
/* Records a failure as accel does for its own (acc's last error, or the process-wide one when acc is NULL; logged at
   debug level) and returns r — for user callbacks (e.g. a checkpoint load function) whose message should reach
   the caller intact. */
ACCEL_API accel_result accel_set_error(accel *acc, accel_result r, const char *fmt, ...) ACCEL__PRINTF(3, 4);
ACCEL_API const char *accel_last_error(const accel *acc); /* acc NULL → the process-wide last error */
/* Prints "file:line: call failed: <last error>" to stderr (what ACCEL_CHECK does before exiting). */
ACCEL_API void accel_check_failed(const accel *acc, const char *call, const char *file, int line, accel_result r);
#ifndef ACCEL_CHECK
#define ACCEL_CHECK(acc, call)                                                                                        \
    do {                                                                                                               \
        accel_result accel_check_r_ = (call);                                                                          \
        if (accel_check_r_ != ACCEL_OK) {                                                                              \
            accel_check_failed((acc), #call, __FILE__, __LINE__, accel_check_r_);                                      \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)
#endif

/* Monotonic seconds (CLOCK_MONOTONIC). */
ACCEL_API double accel_now(void);

/* --------------------------------------------------------------------------------------------------- allocators */
/* Both functions set, or neither. */
typedef struct accel_allocator {
    void *(*alloc)(size_t size, void *user_data);
    void (*free)(void *ptr, void *user_data);
    void *user_data;
} accel_allocator;

/* ----------------------------------------------------------------------------------------------------- dtypes */
/* Named as safetensors names them. */
typedef enum accel_dtype {
    ACCEL_DTYPE_INVALID = 0,
    ACCEL_F64, ACCEL_F32, ACCEL_F16, ACCEL_BF16, ACCEL_F8_E4M3, ACCEL_F8_E5M2,
    ACCEL_I64, ACCEL_I32, ACCEL_I16, ACCEL_I8,
    ACCEL_U64, ACCEL_U32, ACCEL_U16, ACCEL_U8, ACCEL_BOOL,
    ACCEL_DTYPE_COUNT
} accel_dtype;

ACCEL_API size_t accel_dtype_size(accel_dtype t);            /* bytes per element; 0 for invalid */
ACCEL_API const char *accel_dtype_name(accel_dtype t);       /* "F32"; NULL for invalid */
ACCEL_API accel_dtype accel_dtype_from_name(const char *name); /* exact, case-sensitive; INVALID if unknown */
/* PyTorch's names ("torch.float16", "float16", "half", "bfloat16", "long", "bool", ...) or safetensors' ("F16");
   INVALID if unknown. */
ACCEL_API accel_dtype accel_dtype_from_torch(const char *name);
ACCEL_API int accel_dtype_is_float(accel_dtype t);

#define ACCEL_MAX_DIMS 8
typedef struct accel_tensor {
    const char *name;
    void *ptr;
    accel_dtype dtype;
    int ndim;                       /* 0 = scalar */
    int64_t shape[ACCEL_MAX_DIMS];
} accel_tensor;

ACCEL_API int64_t accel_tensor_numel(const accel_tensor *t);  /* product of shape; 1 for ndim 0; -1 if invalid */
ACCEL_API int64_t accel_tensor_nbytes(const accel_tensor *t); /* -1 if invalid or overflowing */
/* A piece of a tensor of a list: elements [offset, offset + count) of tensor `tensor` (flattened, row-major), held at
   ptr in the tensor's dtype (acc's memory). What a rank holds of a sharded model (accel_zero.h gives them, and its
   sharded checkpoints are written as pieces): the form in which a writer of one consolidated file can take a
   model that no rank holds whole. */
typedef struct accel_tensor_piece {
    int tensor;
    int64_t offset, count;
    void *ptr;
} accel_tensor_piece;

/* ------------------------------------------------------------------------------- 16-bit floats (CPU and GPU) */
/* One codec for every module and for your kernels. fp32 → fp16/bf16 round to nearest even, bit-exact with the host
   and device versions of cuda_fp16.h's __float2half_rn and cuda_bf16.h's __float2bfloat16 for all 2^32 inputs,
   NaN included: every NaN becomes CUDA's canonical quiet NaN 0x7FFF (PyTorch's CPU kernels give sign|0x7E00 for
   fp16 and 0x7FC0 for bf16 instead). fp16/bf16 → fp32 is exact (bf16 keeps a NaN's payload; fp16 NaNs are quieted
   with sign and payload kept, as x86 F16C). */
static ACCEL_INLINE ACCEL_HD uint32_t accel_f32_bits(float f) {
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
#endif
}
static ACCEL_INLINE ACCEL_HD float accel_bits_f32(uint32_t u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}
/* fp32 → bf16; overflow rounds to ±Inf. */
static ACCEL_INLINE ACCEL_HD uint16_t accel_f32_to_bf16(float f) {
    uint32_t u = accel_f32_bits(f);
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    return (uint16_t)(((u & 0x7fffffffu) > 0x7f800000u) ? 0x7fffu : r);
}
static ACCEL_INLINE ACCEL_HD float accel_bf16_to_f32(uint16_t h) { return accel_bits_f32((uint32_t)h << 16); }
/* fp32 → fp16: |x| >= 65520 → ±Inf, subnormal results rounded correctly. */
static ACCEL_INLINE ACCEL_HD uint16_t accel_f32_to_f16(float f) {
    uint32_t x = accel_f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t u = x & 0x7fffffffu;
    uint32_t res, rem;
    if (u >= 0x7f800000u) return (uint16_t)(u == 0x7f800000u ? (sign | 0x7c00u) : 0x7fffu);
    if (u > 0x477fefffu) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds up past 65504 */
    if (u >= 0x38800000u) {                                 /* normal fp16 result */
        rem = u << 19;
        res = sign | ((u - 0x38000000u) >> 13);
    } else if (u <= 0x33000000u) {                          /* <= 2^-25: rounds to ±0 (2^-25 is a tie → even 0) */
        return (uint16_t)sign;
    } else {                                                /* subnormal fp16 result */
        uint32_t shift = 0x7eu - (u >> 23);
        uint32_t mant = (u & 0x7fffffu) | 0x800000u;
        rem = mant << (32u - shift);
        res = sign | (mant >> shift);
    }
    if (rem > 0x80000000u || (rem == 0x80000000u && (res & 1u))) ++res;
    return (uint16_t)res;
}
static ACCEL_INLINE ACCEL_HD float accel_f16_to_f32(uint16_t h) {
    uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
    uint32_t e = ((uint32_t)h >> 10) & 0x1fu;
    uint32_t m = (uint32_t)h & 0x3ffu;
    if (e == 0x1fu) return accel_bits_f32(sign | 0x7f800000u | (m ? (0x400000u | (m << 13)) : 0u));
    if (e == 0u) {
        float v = (float)m * 5.9604644775390625e-08f; /* m · 2^-24, exact */
        return accel_bits_f32(accel_f32_bits(v) | sign);
    }
    return accel_bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

/* -------------------------------------------------------------------------------------------------------- RNG */
/* Philox4x32-10 (Salmon et al., SC'11 "Parallel random numbers: as easy as 1, 2, 3"), counter-based: the same
   (key, counter) gives the same numbers on CPU and GPU. */
typedef struct accel_rng_state {
    uint64_t seed;    /* the key */
    uint64_t offset;  /* how many 128-bit blocks the host-side stream has used */
} accel_rng_state;

static ACCEL_INLINE ACCEL_HD void accel_philox4x32_10(const uint32_t ctr_in[4], const uint32_t key_in[2],
                                                      uint32_t out[4]) {
    uint32_t c0 = ctr_in[0], c1 = ctr_in[1], c2 = ctr_in[2], c3 = ctr_in[3];
    uint32_t k0 = key_in[0], k1 = key_in[1];
    int round;
    for (round = 0; round < 10; ++round) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0;
        uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
        c0 = n0; c1 = n1; c2 = n2; c3 = n3;
        k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
    }
    out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

/* Four 32-bit draws for (seed, stream, index): counter = {index lo, index hi, stream lo, stream hi}. Kernels call
   this with the element index; the CPU calls it with the same numbers. */
static ACCEL_INLINE ACCEL_HD void accel_rng_draw4(uint64_t seed, uint64_t stream, uint64_t index, uint32_t out[4]) {
    uint32_t ctr[4], key[2];
    ctr[0] = (uint32_t)index; ctr[1] = (uint32_t)(index >> 32);
    ctr[2] = (uint32_t)stream; ctr[3] = (uint32_t)(stream >> 32);
    key[0] = (uint32_t)seed; key[1] = (uint32_t)(seed >> 32);
    accel_philox4x32_10(ctr, key, out);
}

/* Uniform float in [0, 1) from 24 high bits. */
static ACCEL_INLINE ACCEL_HD float accel_rng_u32_to_unit_float(uint32_t x) {
    return (float)(x >> 8) * (1.0f / 16777216.0f);
}

/* ---------------------------------------------------------------------------------------------- configuration */
typedef enum accel_precision {
    ACCEL_PRECISION_DEFAULT = 0, /* ACCELERATE_MIXED_PRECISION, else "no" */
    ACCEL_PRECISION_NO,          /* fp32 */
    ACCEL_PRECISION_FP16,        /* fp16 with dynamic loss scaling */
    ACCEL_PRECISION_BF16,
    ACCEL_PRECISION_FP8          /* reserved: modules answer ACCEL_ERR_UNSUPPORTED */
} accel_precision;
ACCEL_API const char *accel_precision_name(accel_precision p); /* "no" "fp16" "bf16" "fp8" */

typedef enum accel_distributed_type {
    ACCEL_DISTRIBUTED_NO = 0,    /* one process */
    ACCEL_DISTRIBUTED_MULTI_CPU, /* several processes, host buffers (MPI) */
    ACCEL_DISTRIBUTED_MULTI_GPU  /* several processes, one CUDA device each */
} accel_distributed_type;
ACCEL_API const char *accel_distributed_type_name(accel_distributed_type t); /* "NO" "MULTI_CPU" "MULTI_GPU" */

typedef enum accel_launcher {
    ACCEL_LAUNCHER_NONE = 0, /* single process, no launcher variables */
    ACCEL_LAUNCHER_EXPLICIT, /* desc.num_processes > 0 */
    ACCEL_LAUNCHER_OPENMPI,
    ACCEL_LAUNCHER_MPICH,    /* PMI_RANK/PMI_SIZE (MPICH Hydra, Intel MPI) */
    ACCEL_LAUNCHER_MVAPICH,
    ACCEL_LAUNCHER_SLURM,
    ACCEL_LAUNCHER_TORCHRUN, /* torchrun / accelerate launch */
    ACCEL_LAUNCHER_COUNT
} accel_launcher;
ACCEL_API const char *accel_launcher_name(accel_launcher l);

/* For desc fields whose default is not simply "off" but "inherit" (from the Accelerator, a policy, detection):
   0 = default, ACCEL_ON, ACCEL_OFF. Fields whose default is "on" are named for turning it off (no_...). */
typedef enum accel_toggle { ACCEL_OFF = -1, ACCEL_DEFAULT = 0, ACCEL_ON = 1 } accel_toggle;

typedef struct accel_desc {
    /* explicit process layout (num_processes > 0 selects it; otherwise the launcher environment decides) */
    int num_processes;
    int process_index;
    int local_process_index;
    int local_num_processes;           /* 0 → num_processes */

    accel_precision mixed_precision;   /* 0 → ACCELERATE_MIXED_PRECISION → "no" */
    int gradient_accumulation_steps;   /* 0 → 1; ACCELERATE_GRADIENT_ACCUMULATION_STEPS overrides */
    int cpu;                           /* nonzero: never use a GPU (also ACCELERATE_USE_CPU) */
    int debug;                         /* nonzero: check collective arguments across ranks (ACCELERATE_DEBUG_MODE) */
    int no_mpi;                        /* nonzero: do not initialize MPI even when launched by mpirun */

    /* gradient accumulation plugin (Accelerate's GradientAccumulationPlugin; all default on, as Accelerate) */
    int no_sync_with_dataloader;       /* nonzero: the step counter runs across epochs (no sync at a loader's end) */
    int no_adjust_scheduler;           /* nonzero: non-sync steps are not counted in the scheduler (policy 3) */
    int sync_each_batch;               /* nonzero: reduce on every micro-batch */
    int no_step_scheduler_with_optimizer; /* nonzero: the scheduler steps once per call, not with the optimizer */
    int split_batches;                 /* nonzero: the loader batch size is the global batch size */

    int collective_timeout_ms;         /* 0 → ACCEL_COLLECTIVE_TIMEOUT (s) → 1800000 (Accelerate's 30 min) */
    int train_timeout_ms;              /* 0 → ACCEL_TRAIN_TIMEOUT (s) → off; the deadline after the first step */
    struct CUstream_st *stream;        /* device work goes here; NULL = default stream */

    accel_log_fn log_fn;               /* NULL → the default logger (stderr) */
    void *log_user_data;
    accel_log_level log_level;         /* above it: dropped; ACCEL_LOG_DEFAULT → ACCEL_LOG_LEVEL → warn */

    accel_allocator host_allocator;    /* zero → malloc/free */
    accel_allocator device_allocator;  /* zero → cudaMalloc/cudaFree */
    accel_allocator pinned_allocator;  /* zero → cudaHostAlloc/cudaFreeHost (page-locked staging buffers) */

    /* project / tracking (used by accel_ckpt.h and the trackers) */
    const char *project_dir;           /* NULL → "." */
    const char *logging_dir;           /* NULL → project_dir */
} accel_desc;

#define ACCEL_ERROR_CAPACITY 1024
#define ACCEL_ADDR_CAPACITY 256

struct accel__impl; /* backend handles, the process group, the dataloader stack; private */

/* The Accelerator. Fields are readable; change them only through functions. */
struct accel {
    int process_index;
    int local_process_index;
    int num_processes;
    int local_num_processes;
    int is_main_process;
    int is_local_main_process;
    int use_distributed;                   /* distributed_type != NO && num_processes > 1 */
    accel_distributed_type distributed_type;
    accel_precision mixed_precision;
    int device;                            /* -1 = CPU, else CUDA ordinal */
    int gradient_accumulation_steps;
    int debug;
    accel_launcher launcher;
    char master_addr[ACCEL_ADDR_CAPACITY]; /* from MASTER_ADDR ("" if unset) */
    int master_port;                       /* MASTER_PORT, default 29500 */
    int mpi_active;                        /* MPI carries the host process group */
    struct CUstream_st *stream;
    accel_desc desc;                       /* the resolved configuration (all defaults filled in) */

    /* gradient accumulation state (Accelerate's GradientState) */
    int sync_gradients;                    /* starts 1 */
    int step;                              /* micro-step counter inside the accumulation window */
    int end_of_dataloader;                 /* of the innermost active dataloader (0 when none) */
    int remainder;                         /* of the innermost active dataloader (-1 when none or unknown) */
    int optimizer_step_was_skipped;
    int64_t optimizer_steps;               /* optimizer steps taken (not skipped) */
    int64_t scheduler_steps;               /* scheduler steps the rule asked for */
    int64_t scheduler_adjusted_steps;      /* non-sync calls counted by adjust_scheduler (torch's _step_count) */

    accel_rng_state rng;                   /* host-side RNG stream; set by accel_set_seed */
    int trigger;                           /* local flag for set_trigger/check_trigger */

    accel_result last_result;
    char last_error[ACCEL_ERROR_CAPACITY];
    struct accel__impl *impl;
};

/* --------------------------------------------------------------------------------------------- lifecycle */
/* Resolves the configuration, joins the process group (initializing MPI when launched under MPI and not yet
   initialized), selects the device and checks on every rank that all ranks agree on world size, precision,
   accumulation steps, split_batches and library version. On failure every rank returns an error (no rank hangs)
   and acc holds the message; accel_shutdown is still safe to call. */
ACCEL_API accel_result accel_init(accel *acc, const accel_desc *desc);
/* Frees everything and finalizes MPI only if accel_init initialized it. Safe on a failed or zeroed accel. */
ACCEL_API void accel_shutdown(accel *acc);

/* Resolve desc + environment without joining anything (what accel_init would do first). out_launcher may be NULL.
   Used by `accel env` and by tests of the detection table. err receives a message on failure; when the failure
   comes after the process layout was determined (a bad ACCELERATE_* variable), out and out_launcher still hold
   the layout, so the process can join its group to report the failure. */
ACCEL_API accel_result accel_resolve_config(const accel_desc *desc, accel_desc *out, accel_launcher *out_launcher,
                                            char *err, size_t err_capacity);

/* Accelerate's str_to_bool: 1 true, 0 false, -1 not a boolean. */
ACCEL_API int accel_parse_bool(const char *s);

/* ------------------------------------------------------------------------------------- allocation helpers */
/* Through acc's allocators; on failure NULL and acc's error says what could not be allocated. acc NULL → the
   defaults. The device pair falls back to the host pair on a CPU run; the pinned pair to the host pair without
   CUDA. */
ACCEL_API void *accel_host_alloc(accel *acc, size_t size);
ACCEL_API void accel_host_free(accel *acc, void *ptr);
ACCEL_API void *accel_device_alloc(accel *acc, size_t size);
ACCEL_API void accel_device_free(accel *acc, void *ptr);
ACCEL_API void *accel_pinned_alloc(accel *acc, size_t size);
ACCEL_API void accel_pinned_free(accel *acc, void *ptr);

/* --------------------------------------------------------------------------------------- process helpers */
/* printf on the main process only (Accelerate's accelerator.print). Returns chars written, 0 elsewhere. */
ACCEL_API int accel_print(accel *acc, const char *fmt, ...) ACCEL__PRINTF(2, 3);
/* main_process_first: non-main ranks wait before the block, the main rank waits after it (a global barrier). */
ACCEL_API accel_result accel_main_process_first_begin(accel *acc);
ACCEL_API accel_result accel_main_process_first_end(accel *acc);
ACCEL_API accel_result accel_local_main_process_first_begin(accel *acc);
ACCEL_API accel_result accel_local_main_process_first_end(accel *acc);
/* on_main_process / on_local_main_process / on_process(i) / on_last_process: should this rank run the block?
   As in Accelerate, everything runs when not distributed. */
ACCEL_API int accel_on_main_process(const accel *acc);
ACCEL_API int accel_on_local_main_process(const accel *acc);
ACCEL_API int accel_on_process(const accel *acc, int process_index);
ACCEL_API int accel_on_local_process(const accel *acc, int local_process_index);
ACCEL_API int accel_on_last_process(const accel *acc);
/* set_trigger sets this rank's flag; check_trigger sums the flags over ranks (a collective) and, when any is
   set, resets every rank's flag and stores 1 in *fired. */
ACCEL_API void accel_set_trigger(accel *acc);
ACCEL_API accel_result accel_check_trigger(accel *acc, int *fired);

/* Preemption (PREEMPTION in the manual above). install: from now until acc's accel_shutdown, the chosen signals set
   this process's stop flag instead of ending it (local; call it on every rank). should_stop: every rank learns
   whether any rank's flag is set (a collective, one small all-reduce) and *stop gets 0 or the signal's number. */
#define ACCEL_PREEMPT_SIGTERM 1 /* scancel, a preempting job (PreemptMode=REQUEUE), the node's shutdown */
#define ACCEL_PREEMPT_SIGUSR1 2 /* Slurm's notice before the time limit: sbatch --signal=USR1@90 */
#define ACCEL_PREEMPT_SIGNALS (ACCEL_PREEMPT_SIGTERM | ACCEL_PREEMPT_SIGUSR1)
/* The exit status of a trainer that saved and stopped because it was preempted: the job script requeues on it.
   75 is sysexits.h's EX_TEMPFAIL ("temporary failure; the user is invited to retry"): not 1/2 (errors, usage), not
   126/127 (the shell's), not 128 + n (killed by signal n), and what mail systems already mean by "queue it again". */
#define ACCEL_EXIT_REQUEUE 75
ACCEL_API accel_result accel_preemption_install(accel *acc, int signals);
ACCEL_API accel_result (accel_should_stop)(accel *acc, int *stop);
#ifndef ACCEL_NO_CALL_SITES
#define accel_should_stop(...) ACCEL_FR_SITE((accel_should_stop)(__VA_ARGS__))
#endif

/* ------------------------------------------------------------------- gradient accumulation (GradientState) */
/* Call at the start of every micro-batch (Accelerate's `with accelerator.accumulate(model):` entry, _do_sync):
     sync_with_dataloader && end_of_dataloader → step = 0, sync_gradients = 1
     otherwise                                 → step += 1, sync_gradients = (step % gradient_accumulation_steps == 0)
   So the counter restarts at every epoch end and a short final window still syncs on the last batch; with
   no_sync_with_dataloader the counter runs across epochs. acc->end_of_dataloader is that of the innermost active
   dataloader (below) and must be current *before* this call for the last batch (loaders look one batch ahead, like
   DataLoaderShard). */
ACCEL_API void accel_accumulate_begin(accel *acc);
/* End of the micro-batch. Nothing to undo today (Accelerate's exit restores no_sync); kept so loops written now stay
   correct when it gains work. optimizer_step_was_skipped is refreshed only on sync steps, as in Accelerate. */
ACCEL_API void accel_accumulate_end(accel *acc);
/* Should gradients be all-reduced on this micro-batch? sync_gradients || (use_distributed && sync_each_batch).
   Otherwise the reducer skips (DDP no_sync). */
ACCEL_API int accel_should_reduce(const accel *acc);
/* The divisor accelerator.backward applies to the loss: always the full gradient_accumulation_steps, also in a
   short final window (as Accelerate). */
ACCEL_API float accel_loss_divisor(const accel *acc);
/* Record the outcome of the optimizer step on a sync step (skipped = the loss scaler found inf/NaN). On non-sync
   steps it does nothing, as AcceleratedOptimizer.step does nothing there. */
ACCEL_API void accel_optimizer_step_done(accel *acc, int skipped);
/* AcceleratedScheduler.step — call it on EVERY micro-batch, as Accelerate's loop calls scheduler.step() every
   batch. Returns how many scheduler steps to take now and adds them to acc->scheduler_steps:
   no_step_scheduler_with_optimizer → 1; not a sync step → 0 (unless no_adjust_scheduler, the scheduler's internal
   counter moves: acc->scheduler_adjusted_steps); optimizer step skipped → 0; split_batches → 1; else num_processes.
   total_steps > 0 caps the scheduler's total like OneCycleLR (torch's _step_count, which adjust_scheduler bumps too,
   stays <= total_steps); as in Accelerate the cap is not applied with no_step_scheduler_with_optimizer. A schedule
   that is a function of acc->scheduler_steps resumes correctly (load_state restores it). */
ACCEL_API int accel_scheduler_steps(accel *acc, int64_t total_steps);
/* Accelerate's free_memory() / clear(), between two trainings: waits for acc->stream, frees the Accelerator's own
   scratch (the device buffer kernels' argument lists are staged in; the next use allocates it again) and sets
   acc->step to 0 (Accelerator.step; sync_gradients and the optimizer/scheduler counters stay). What Accelerate drops
   by reference (prepared models, optimizers, loaders) is the caller's: destroy those objects; objects still alive
   keep working. ACCEL_ERR_STATE on an Accelerator that is not initialized. accel_clear is the same call. */
ACCEL_API accel_result accel_free_memory(accel *acc);
ACCEL_API accel_result accel_clear(accel *acc);

/* GradientState.dataloader_references: the dataloaders being iterated, innermost last, kept in acc. `loader`
   identifies one (any stable address, e.g. the loader object); acc->end_of_dataloader and acc->remainder mirror the
   innermost (0 / -1 when none). accel_data.h calls these; other loaders call them the same way:
     begin(remainder) when the first batch of an epoch is taken (remainder = real samples in the last global batch,
     0 = full, -1 unknown), last_batch() when the last batch is handed out (one batch ahead), end() after the epoch
     or when abandoning it. A loader begun twice is moved to the top. At most 64 at once. */
ACCEL_API accel_result accel_dataloader_begin(accel *acc, const void *loader, int remainder);
ACCEL_API void accel_dataloader_last_batch(accel *acc, const void *loader);
ACCEL_API void accel_dataloader_end(accel *acc, const void *loader);

/* -------------------------------------------------------------------------------------------- RNG state */
/* Accelerate's set_seed: with device_specific the seed becomes seed + process_index. */
ACCEL_API void accel_set_seed(accel *acc, uint64_t seed, int device_specific);
ACCEL_API accel_rng_state accel_get_rng_state(const accel *acc);
ACCEL_API void accel_set_rng_state(accel *acc, accel_rng_state state);
/* Rank 0's state to every rank (Accelerate's synchronize_rng_states). */
ACCEL_API accel_result accel_synchronize_rng_state(accel *acc);
/* Next 4 draws of the host stream (advances offset). */
ACCEL_API void accel_rng_next4(accel *acc, uint32_t out[4]);

/* ------------------------------------------------------------------------------------------- saved state */
/* The one state contract of every module (a scaler, a sampler, an optimizer), so each registers with the
   checkpointer directly: accel_ckpt_register(ck, "scaler", accel_amp_scaler_state_save,
   accel_amp_scaler_state_load, &scaler).
     save: buf NULL or cap smaller than the state → *size = bytes needed, ACCEL_OK, nothing written; else the state
           is written to buf and *size = bytes written.
     load: validates all n bytes first; a bad buffer returns an error (the object's acc holds the root cause) and
           leaves the object unchanged. */
typedef accel_result (*accel_state_save_fn)(void *obj, void *buf, size_t cap, size_t *size);
typedef accel_result (*accel_state_load_fn)(void *obj, const void *buf, size_t size);

/* A finished span of work one module reports for another to record (accel_ckpt.h: an async save's snapshot and its
   background write, for accel_profile.h's accel_prof_record_range): begin and end are accel_now() seconds. It may be
   called from a module's helper thread, so an implementation must be thread-safe. */
typedef void (*accel_range_fn)(void *user, const char *name, double begin, double end);

/* The Accelerator's own training state — every counter above (step, sync_gradients, optimizer_step_was_skipped,
   optimizer_steps, scheduler_steps, scheduler_adjusted_steps) and this rank's RNG — as 80 little-endian bytes:
   "ACST", u32 version 1, i32 num_processes, i32 process_index, i32 step, i32 sync_gradients,
   i32 optimizer_step_was_skipped, i32 gradient_accumulation_steps, i64 optimizer_steps, i64 scheduler_steps,
   i64 scheduler_adjusted_steps, u64 rng seed, u64 rng offset, 8 zero bytes. accel_ckpt.h saves it on every rank
   (random_states_<rank>.bin). */
#define ACCEL_STATE_BYTES 80
ACCEL_API accel_result accel_state_save(accel *acc, void *buf, size_t cap, size_t *size);
/* Restores everything from a state saved by the same rank of a run with the same number of processes. */
ACCEL_API accel_result accel_state_load(accel *acc, const void *buf, size_t size);
/* Resume on any number of processes: states[i] (sizes[i] bytes) is what rank i of the saving run (count ranks)
   saved. The counters come from rank 0's state; this rank's RNG from states[rank] when rank < count, else
   re-derived: every saved RNG state identical → that state; seeds seed0 + i (accel_set_seed(..., 1)) →
   seed0 + rank with rank 0's offset; otherwise splitmix64(seed[rank mod count] ^ rank) with that rank's offset.
   All states are validated before anything changes. */
ACCEL_API accel_result accel_state_load_resharded(accel *acc, const void *const *states, const size_t *sizes,
                                                  int count);
/* The bytes decoded without applying them (tools: `accel ckpt ls`): the same parser and checks as accel_state_load
   (magic, version, sizes, reserved bytes, ranges), ACCEL_ERR_FORMAT naming the problem. acc may be NULL. */
typedef struct accel_state_info {
    int32_t num_processes, process_index, step, sync_gradients, optimizer_step_was_skipped;
    int32_t gradient_accumulation_steps;
    int64_t optimizer_steps, scheduler_steps, scheduler_adjusted_steps;
    uint64_t rng_seed, rng_offset;
} accel_state_info;
ACCEL_API accel_result accel_state_decode(accel *acc, const void *buf, size_t size, accel_state_info *out);

/* ------------------------------------------------------------------------------------------------------ sizes */
/* docs/semantics.md policy 6: a plain unsigned integer (bytes), or a decimal number, optional spaces and a unit
   KB/MB/GB/TB (10^3..10^12) or KiB/MiB/GiB/TiB (2^10..2^40), case-insensitive, truncated toward zero.
   acc may be NULL (the message then goes to accel_last_error(NULL)). */
ACCEL_API accel_result accel_parse_size(accel *acc, const char *s, uint64_t *out);

/* ---------------------------------------------------------------------------------- find_executable_batch_size */
/* step(user, batch_size, attempt) runs with starting_batch_size, and again with a smaller one while it returns
   ACCEL_ERR_OUT_OF_MEMORY; memory it took through the attempt's allocators is freed when it returns.
   ACCEL_ERR_OUT_OF_MEMORY with "No executable batch size found, reached zero." when the size reaches 0; any other
   error ends the search. *batch_size (may be NULL) receives the size that succeeded. Local. */
typedef struct accel_attempt accel_attempt;
typedef accel_result (*accel_batch_step_fn)(void *user, int64_t batch_size, accel_attempt *attempt);
typedef struct accel_batch_size_desc {
    int64_t starting_batch_size;                       /* 0 → 128 */
    int64_t (*reduce)(int64_t batch_size, void *user); /* NULL → int(batch_size * 0.9), Accelerate's default */
    void *reduce_user;
} accel_batch_size_desc;
ACCEL_API accel_result accel_find_executable_batch_size(accel *acc, const accel_batch_size_desc *desc,
                                                        accel_batch_step_fn step, void *user, int64_t *batch_size);
/* The attempt's allocations (acc's allocators), freed when step returns. NULL: ACCEL_ERR_OUT_OF_MEMORY. */
ACCEL_API void *accel_attempt_host_alloc(accel_attempt *a, size_t size);
ACCEL_API void *accel_attempt_device_alloc(accel_attempt *a, size_t size);
ACCEL_API void *accel_attempt_pinned_alloc(accel_attempt *a, size_t size);

#ifdef __cplusplus
}
#endif
/* The host process group (barrier, broadcast, all-gather, all-reduce, objects; the TCP store, its admission and the
   flight recorder's ring behind them): accel_init sets it up, so it comes with the core (accel_hostgroup.h). */
#include "accel_hostgroup.h"
#endif /* ACCEL_H_INCLUDED */

/* ========================================================================================== implementation */
/* Only once accel_hostgroup.h's declarations are in: that header includes this one at its top, before them, and the
   implementation must not start there (accel_hostgroup.h: HOW IT IS INCLUDED). */
#if defined(ACCEL_IMPLEMENTATION) && !defined(ACCEL__CORE_IMPL_DONE) && defined(ACCEL_HOSTGROUP_H_INCLUDED)
#define ACCEL__CORE_IMPL_DONE
/* CONTENTS — the core is also the private services layer of every module (they follow it in the same TU, so what
   is `static` here is shared without being exported):
     1. platform, private macros (ACCEL__DEF, ACCEL__PRIVATE, ACCEL__FAIL, ACCEL__CUDA_CHECK, ACCEL__MPI_CHECK)
     2. errors and logging
     3. allocation (the only calls to malloc/free/cudaMalloc/cudaHostAlloc) and stb_ds
     4. shared helpers: byte order, UTF-8, string builder + JSON strings, files (mkdir -p, atomic writes, rmtree),
        deadlines, x86 CPU features (accel__cpu_has) and the 8-lane AVX2 16-bit codec (accel__v8_*)
     5. dtypes, names, environment, accel_resolve_config
     6. the host process group: accel_hostgroup.h's implementation, included here (the MPI transport, the TCP store
        and its admission, sockets, the flight recorder's ring, host collectives, agreement checks, free ports); what
        it lends the modules is listed in its own contents
     7. accel_init / accel_shutdown
     8. process helpers, triggers, preemption (the signal handler, accel_should_stop)
     9. gradient accumulation, scheduler bookkeeping, the dataloader stack
    10. RNG and the saved training state
    11. sizes (policy 6), PyTorch dtype names, find_executable_batch_size */

/* ------------------------------------------------------------------------------------ 1. platform, macros */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <time.h>
#if !defined(_WIN32)
#include <sched.h>
#include <fcntl.h>
#include <unistd.h>
#include <dirent.h>
#include <sys/types.h>
#include <sys/stat.h>
#endif

#if defined(__CUDACC__) && !defined(ACCEL_WITH_CUDA)
#define ACCEL_WITH_CUDA 1
#endif
#ifdef ACCEL_WITH_CUDA
#include <cuda_runtime_api.h>
#endif
#ifdef ACCEL_WITH_MPI
/* the C API only: Open MPI's / MPICH's C++ bindings don't build warning-free as C++17/CUDA */
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>
#endif

#if defined(__GNUC__) || defined(__clang__)
#define ACCEL__UNUSED __attribute__((unused))
#else
#define ACCEL__UNUSED
#endif
#ifdef ACCEL_STATIC
#define ACCEL__DEF static ACCEL__UNUSED /* an embedder uses only part of the API */
#else
#define ACCEL__DEF
#endif
/* Private helpers of the services layer: a TU that includes only some modules uses only some of them. */
#define ACCEL__PRIVATE static ACCEL__UNUSED

#define ACCEL__FAIL(acc, r, ...) accel__fail((acc), (r), __FILE__, __LINE__, __VA_ARGS__)

#define ACCEL__MAX_LOADERS 64

typedef struct accel__loader_entry {
    const void *key;
    int end_of_dataloader, remainder;
} accel__loader_entry;

/* A host process-group transport: moves bytes between all ranks of the group within a deadline. Each call returns
   ACCEL_OK or an error already recorded on acc (ACCEL_ERR_TIMEOUT when the deadline passed). The group is marked
   broken after any failure: messages may be left in flight, so nothing else may use it. */
typedef struct accel__transport {
    const char *name;
    accel_result (*allgather)(void *ctx, accel *acc, const void *in, void *out, size_t bytes, double deadline);
    accel_result (*allgatherv)(void *ctx, accel *acc, const void *in, void *out, const size_t *counts, double deadline);
    accel_result (*bcast)(void *ctx, accel *acc, void *buf, size_t bytes, int root, double deadline);
} accel__transport;

struct accel__impl {
#ifdef ACCEL_WITH_MPI
    MPI_Comm comm;
    int comm_valid;
    int we_initialized_mpi;
#endif
    const accel__transport *tp; /* the host process group (NULL: none yet, or one process) */
    void *tp_ctx;
    accel_result broken;        /* nonzero after a transport failure */
    char broken_why[200];
    accel__loader_entry loaders[ACCEL__MAX_LOADERS]; /* GradientState.dataloader_references, innermost last */
    int nloaders;
    void *store;                /* the TCP store (accel__store) when it is the host group */
    void *scratch;              /* device scratch for kernel arguments (accel__device_scratch) */
    size_t scratch_bytes;
    unsigned long err_seq_ok;   /* accel__g_error_seq after the last successful collective (accel_shutdown) */
    uint64_t fr_seq;            /* host collectives made (the flight recorder's call numbers of group 0) */
    int stepped;                /* an optimizer step completed in this process: train_timeout_ms applies */
    void *pinned_scratch;       /* page-locked host scratch for small read-backs (accel__pinned_scratch) */
    size_t pinned_scratch_bytes;
};

/* ------------------------------------------------------------------------------------- 2. errors, logging */
static accel_log_fn accel__g_log_fn = NULL;
static void *accel__g_log_user = NULL;
static char accel__g_last_error[ACCEL_ERROR_CAPACITY];
static unsigned long accel__g_error_seq = 0; /* failures recorded so far (any Accelerator or none) */

static accel_log_level accel__env_log_level(void) {
    const char *s = getenv("ACCEL_LOG_LEVEL");
    if (!s || !*s) return ACCEL_LOG_WARN;
    if (!strcmp(s, "error") || !strcmp(s, "ERROR") || !strcmp(s, "0")) return ACCEL_LOG_ERROR;
    if (!strcmp(s, "warn") || !strcmp(s, "WARN") || !strcmp(s, "warning") || !strcmp(s, "WARNING") || !strcmp(s, "1"))
        return ACCEL_LOG_WARN;
    if (!strcmp(s, "info") || !strcmp(s, "INFO") || !strcmp(s, "2")) return ACCEL_LOG_INFO;
    if (!strcmp(s, "debug") || !strcmp(s, "DEBUG") || !strcmp(s, "3")) return ACCEL_LOG_DEBUG;
    return ACCEL_LOG_WARN;
}

static void accel__default_log(void *user, accel_log_level level, const char *msg) {
    static const char *names[] = {"log", "error", "warn", "info", "debug"};
    (void)user;
    fprintf(stderr, "accel %s: %s\n", names[((int)level >= 0 && (int)level <= 4) ? (int)level : 0], msg);
}

ACCEL__DEF void accel_set_default_logger(accel_log_fn fn, void *user_data) {
    accel__g_log_fn = fn;
    accel__g_log_user = user_data;
}

static void accel__vlog(const accel *acc, accel_log_level level, const char *fmt, va_list ap) {
    char buf[ACCEL_ERROR_CAPACITY + 64];
    accel_log_fn fn = accel__g_log_fn;
    void *user = accel__g_log_user;
    accel_log_level limit =
            acc && acc->desc.log_level != ACCEL_LOG_DEFAULT ? acc->desc.log_level : accel__env_log_level();
    if ((int)level > (int)limit) return;
    if (acc && acc->desc.log_fn) {
        fn = acc->desc.log_fn;
        user = acc->desc.log_user_data;
    }
    vsnprintf(buf, sizeof buf, fmt, ap);
    if (fn) fn(user, level, buf);
    else accel__default_log(NULL, level, buf);
}

ACCEL__DEF void accel_log(const accel *acc, accel_log_level level, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    accel__vlog(acc, level, fmt, ap);
    va_end(ap);
}

/* Records "[rank r] message (ACCEL_ERR_X: file:line)" (file NULL: without the location) and logs it at debug level:
   errors are returned, the caller decides whether to print them. */
static accel_result accel__vfail(accel *acc, accel_result r, const char *file, int line, const char *fmt, va_list ap) {
    char msg[ACCEL_ERROR_CAPACITY], where[200];
    char *dst = acc ? acc->last_error : accel__g_last_error;
    const char *base = file ? strrchr(file, '/') : NULL;
    base = base ? base + 1 : file;
    if (!fmt) fmt = "(no message)"; /* accel_set_error(acc, r, NULL) from user code: a message, not a crash */
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (base) snprintf(where, sizeof where, " (%.80s: %.100s:%d)", accel_result_string(r), base, line);
    else snprintf(where, sizeof where, " (%.80s)", accel_result_string(r));
    if (acc && acc->num_processes > 1)
        snprintf(dst, ACCEL_ERROR_CAPACITY, "[rank %d] %.760s%s", acc->process_index, msg, where);
    else
        snprintf(dst, ACCEL_ERROR_CAPACITY, "%.760s%s", msg, where);
    if (acc) acc->last_result = r;
    ++accel__g_error_seq;
    accel_log(acc, ACCEL_LOG_DEBUG, "%s", dst);
    return r;
}

/* Changes whenever a failure is recorded (by accel or by accel_set_error in a user callback): a caller that must know
   whether a callee recorded its own message compares the values before and after the call. */
ACCEL__PRIVATE unsigned long accel__error_seq(void) { return accel__g_error_seq; }

ACCEL__PRIVATE accel_result accel__fail(accel *acc, accel_result r, const char *file, int line, const char *fmt, ...)
    ACCEL__PRINTF(5, 6);
ACCEL__PRIVATE accel_result accel__fail(accel *acc, accel_result r, const char *file, int line, const char *fmt, ...) {
    va_list ap;
    accel_result out;
    va_start(ap, fmt);
    out = accel__vfail(acc, r, file, line, fmt, ap);
    va_end(ap);
    return out;
}

ACCEL__DEF accel_result accel_set_error(accel *acc, accel_result r, const char *fmt, ...) {
    va_list ap;
    accel_result out;
    va_start(ap, fmt);
    out = accel__vfail(acc, r, NULL, 0, fmt, ap);
    va_end(ap);
    return out;
}

/* Puts context in front of the error a callee recorded, so the root cause stays in accel_last_error:
   "[rank 1] load_state: sampler.bin: shard state: saved with num_processes 2, this run has 1 (...)". */
ACCEL__PRIVATE accel_result accel__fail_wrap(accel *acc, accel_result r, const char *fmt, ...) ACCEL__PRINTF(3, 4);
ACCEL__PRIVATE accel_result accel__fail_wrap(accel *acc, accel_result r, const char *fmt, ...) {
    char ctx[400], old[ACCEL_ERROR_CAPACITY];
    char *dst = acc ? acc->last_error : accel__g_last_error;
    const char *rest = old;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx, sizeof ctx, fmt, ap);
    va_end(ap);
    memcpy(old, dst, ACCEL_ERROR_CAPACITY);
    old[ACCEL_ERROR_CAPACITY - 1] = 0;
    if (!old[0]) return accel__fail(acc, r, NULL, 0, "%s", ctx);
    if (!strncmp(rest, "[rank ", 6)) {
        const char *e = strstr(rest, "] ");
        if (e) rest = e + 2;
    }
    if (acc && acc->num_processes > 1)
        snprintf(dst, ACCEL_ERROR_CAPACITY, "[rank %d] %.380s: %.600s", acc->process_index, ctx, rest);
    else
        snprintf(dst, ACCEL_ERROR_CAPACITY, "%.380s: %.600s", ctx, rest);
    if (acc) acc->last_result = r;
    ++accel__g_error_seq;
    accel_log(acc, ACCEL_LOG_DEBUG, "%s", dst);
    return r;
}

ACCEL__DEF const char *accel_last_error(const accel *acc) {
    return acc ? acc->last_error : accel__g_last_error;
}

ACCEL__DEF void accel_check_failed(const accel *acc, const char *call, const char *file, int line, accel_result r) {
    const char *msg = accel_last_error(acc);
    fprintf(stderr, "%s:%d: %s failed: %s\n", file ? file : "?", line, call ? call : "?",
            msg && *msg ? msg : accel_result_string(r));
    fflush(stderr);
}

ACCEL__DEF const char *accel_result_string(accel_result r) {
    switch (r) {
    case ACCEL_OK: return "ACCEL_OK: success";
    case ACCEL_ERR_INVALID_ARGUMENT: return "ACCEL_ERR_INVALID_ARGUMENT: invalid argument";
    case ACCEL_ERR_OUT_OF_MEMORY: return "ACCEL_ERR_OUT_OF_MEMORY: allocation failed";
    case ACCEL_ERR_UNSUPPORTED: return "ACCEL_ERR_UNSUPPORTED: not supported in this build or configuration";
    case ACCEL_ERR_ENVIRONMENT: return "ACCEL_ERR_ENVIRONMENT: malformed or inconsistent environment";
    case ACCEL_ERR_MISMATCH: return "ACCEL_ERR_MISMATCH: processes disagree";
    case ACCEL_ERR_STATE: return "ACCEL_ERR_STATE: call made in the wrong state";
    case ACCEL_ERR_MPI: return "ACCEL_ERR_MPI: MPI call failed";
    case ACCEL_ERR_CUDA: return "ACCEL_ERR_CUDA: CUDA call failed";
    case ACCEL_ERR_NCCL: return "ACCEL_ERR_NCCL: NCCL call failed";
    case ACCEL_ERR_IO: return "ACCEL_ERR_IO: I/O error";
    case ACCEL_ERR_FORMAT: return "ACCEL_ERR_FORMAT: malformed data";
    case ACCEL_ERR_NOT_FOUND: return "ACCEL_ERR_NOT_FOUND: not found";
    case ACCEL_ERR_TIMEOUT: return "ACCEL_ERR_TIMEOUT: deadline exceeded";
    case ACCEL_ERR_REMOTE: return "ACCEL_ERR_REMOTE: another process failed";
    case ACCEL_RESULT_COUNT: break;
    }
    return "ACCEL_ERR_?: unknown result code";
}

ACCEL__DEF int accel_version(void) { return ACCEL_VERSION_NUMBER; }
ACCEL__DEF const char *accel_version_string(void) {
#define ACCEL__STR2(x) #x
#define ACCEL__STR(x) ACCEL__STR2(x)
    return ACCEL__STR(ACCEL_VERSION_MAJOR) "." ACCEL__STR(ACCEL_VERSION_MINOR) "." ACCEL__STR(ACCEL_VERSION_PATCH);
}

ACCEL__DEF double accel_now(void) {
    struct timespec ts;
#if defined(CLOCK_MONOTONIC)
    clock_gettime(CLOCK_MONOTONIC, &ts);
#else
    timespec_get(&ts, TIME_UTC);
#endif
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#ifdef ACCEL_WITH_CUDA
#define ACCEL__CUDA_CHECK(acc, call)                                                                                  \
    do {                                                                                                               \
        cudaError_t accel__ce = (call);                                                                                \
        if (accel__ce != cudaSuccess)                                                                                  \
            return accel__fail((acc), ACCEL_ERR_CUDA, __FILE__, __LINE__, "%s failed: %s", #call,                      \
                               cudaGetErrorString(accel__ce));                                                         \
    } while (0)
#endif
#ifdef ACCEL_WITH_MPI
ACCEL__PRIVATE accel_result accel__mpi_fail(accel *acc, int rc, const char *what, const char *file, int line) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    msg[0] = 0;
    MPI_Error_string(rc, msg, &len);
    return accel__fail(acc, ACCEL_ERR_MPI, file, line, "%s failed: %s", what, msg);
}
#define ACCEL__MPI_CHECK(acc, call)                                                                                   \
    do {                                                                                                               \
        int accel__rc = (call);                                                                                        \
        if (accel__rc != MPI_SUCCESS) return accel__mpi_fail((acc), accel__rc, #call, __FILE__, __LINE__);             \
    } while (0)
#endif

static accel_result accel__need_acc(const accel *acc, const char *what) {
    if (acc) return ACCEL_OK;
    return accel__fail(NULL, ACCEL_ERR_INVALID_ARGUMENT, __FILE__, __LINE__, "%s: accel is NULL", what);
}

/* ------------------------------------------------------------------------------------------- 3. allocation */
/* The only places accel calls malloc/free (tests/lint checks it): every other allocation goes through the hooks. */
static void *accel__raw_alloc(const accel_allocator *a, size_t size) {
    if (a && a->alloc) return a->alloc(size, a->user_data);
    return malloc(size);
}
static void accel__raw_free(const accel_allocator *a, void *p) {
    if (!p) return;
    if (a && a->free) a->free(p, a->user_data);
    else free(p);
}

ACCEL__DEF void *accel_host_alloc(accel *acc, size_t size) {
    void *p = accel__raw_alloc(acc ? &acc->desc.host_allocator : NULL, size ? size : 1);
    if (!p) ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "host allocation of %zu bytes failed", size);
    return p;
}
ACCEL__DEF void accel_host_free(accel *acc, void *ptr) { accel__raw_free(acc ? &acc->desc.host_allocator : NULL, ptr); }

ACCEL__DEF void *accel_device_alloc(accel *acc, size_t size) {
    void *p = NULL;
    if (!acc || acc->device < 0) return accel_host_alloc(acc, size);
    if (acc->desc.device_allocator.alloc) {
        p = acc->desc.device_allocator.alloc(size ? size : 1, acc->desc.device_allocator.user_data);
        if (!p)
            ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "device allocation of %zu bytes failed (user allocator)", size);
        return p;
    }
#ifdef ACCEL_WITH_CUDA
    {
        cudaError_t e = cudaMalloc(&p, size ? size : 1);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "cudaMalloc(%zu) failed: %s", size, cudaGetErrorString(e));
            return NULL;
        }
    }
    return p;
#else
    ACCEL__FAIL(acc, ACCEL_ERR_UNSUPPORTED,
                "device allocation needs CUDA: compile the ACCEL_IMPLEMENTATION TU with nvcc");
    return NULL;
#endif
}
ACCEL__DEF void accel_device_free(accel *acc, void *ptr) {
    if (!ptr) return;
    if (!acc || acc->device < 0) { accel_host_free(acc, ptr); return; }
    if (acc->desc.device_allocator.free) {
        acc->desc.device_allocator.free(ptr, acc->desc.device_allocator.user_data);
        return;
    }
#ifdef ACCEL_WITH_CUDA
    (void)cudaFree(ptr);
#endif
}

/* Page-locked memory is what makes host<->device copies asynchronous; without CUDA (or on a CPU run) the host pair
   serves. A NULL acc in a CUDA build means "a device may be in use" (ckpt reads without an Accelerator). */
static int accel__pinned_uses_cuda(const accel *acc) {
#ifdef ACCEL_WITH_CUDA
    return !acc || acc->device >= 0;
#else
    (void)acc;
    return 0;
#endif
}
ACCEL__DEF void *accel_pinned_alloc(accel *acc, size_t size) {
    void *p = NULL;
    if (acc && acc->desc.pinned_allocator.alloc) {
        p = acc->desc.pinned_allocator.alloc(size ? size : 1, acc->desc.pinned_allocator.user_data);
        if (!p)
            ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "pinned allocation of %zu bytes failed (user allocator)", size);
        return p;
    }
    if (!accel__pinned_uses_cuda(acc)) return accel_host_alloc(acc, size);
#ifdef ACCEL_WITH_CUDA
    {
        cudaError_t e = cudaHostAlloc(&p, size ? size : 1, cudaHostAllocDefault);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "cudaHostAlloc(%zu) failed: %s", size, cudaGetErrorString(e));
            return NULL;
        }
    }
#endif
    return p;
}
ACCEL__DEF void accel_pinned_free(accel *acc, void *ptr) {
    if (!ptr) return;
    if (acc && acc->desc.pinned_allocator.free) {
        acc->desc.pinned_allocator.free(ptr, acc->desc.pinned_allocator.user_data);
        return;
    }
    if (!accel__pinned_uses_cuda(acc)) { accel_host_free(acc, ptr); return; }
#ifdef ACCEL_WITH_CUDA
    (void)cudaFreeHost(ptr);
#endif
}

/* A device buffer of at least `bytes` that lives as long as acc (grown through the device allocator, freed by
   accel_shutdown), for small per-call data such as kernels' tensor lists. Work that uses it must be enqueued on
   acc->stream: the next call may overwrite it, and stream order makes that safe. NULL (error set) on failure. */
ACCEL__PRIVATE void *accel__device_scratch(accel *acc, size_t bytes) {
    if (!acc || !acc->impl) {
        ACCEL__FAIL(acc, ACCEL_ERR_STATE, "device scratch: the Accelerator is not initialized");
        return NULL;
    }
    if (acc->impl->scratch_bytes < bytes) {
        size_t want = acc->impl->scratch_bytes ? acc->impl->scratch_bytes : 4096;
        void *p;
        while (want < bytes) want *= 2;
        p = accel_device_alloc(acc, want);
        if (!p) return NULL;
        if (acc->impl->scratch) {
#ifdef ACCEL_WITH_CUDA
            if (acc->device >= 0)
                (void)cudaStreamSynchronize((cudaStream_t)acc->stream); /* the old one may be in use */
#endif
            accel_device_free(acc, acc->impl->scratch);
        }
        acc->impl->scratch = p;
        acc->impl->scratch_bytes = want;
    }
    return acc->impl->scratch;
}

/* Page-locked host memory of at least `bytes` that lives as long as acc (through the pinned allocator, freed by
   accel_shutdown), the destination of small device-to-host read-backs: a copy into page-locked memory is one DMA,
   into pageable memory a staged copy with its own wait. The caller synchronizes before reading it and before the
   next call reuses it. NULL (error set) on failure. */
ACCEL__PRIVATE void *accel__pinned_scratch(accel *acc, size_t bytes) {
    if (!acc || !acc->impl) {
        ACCEL__FAIL(acc, ACCEL_ERR_STATE, "pinned scratch: the Accelerator is not initialized");
        return NULL;
    }
    if (acc->impl->pinned_scratch_bytes < bytes) {
        size_t want = acc->impl->pinned_scratch_bytes ? acc->impl->pinned_scratch_bytes : 4096;
        void *p;
        while (want < bytes) want *= 2;
        p = accel_pinned_alloc(acc, want);
        if (!p) return NULL;
        accel_pinned_free(acc, acc->impl->pinned_scratch); /* (its last reader synchronized) */
        acc->impl->pinned_scratch = p;
        acc->impl->pinned_scratch_bytes = want;
    }
    return acc->impl->pinned_scratch;
}

/* stb_ds reallocs without the old size and without a context: every block carries its size and the allocator that
   made it (so a block is freed by its own allocator even if the process-wide one changed since). */
static accel_allocator accel__g_stbds_alloc = {NULL, NULL, NULL};
static const accel *accel__g_stbds_owner = NULL;
typedef struct accel__stbds_hdr { size_t size; accel_allocator a; } accel__stbds_hdr;
#define ACCEL__STBDS_HDR ((sizeof(accel__stbds_hdr) + 15u) & ~(size_t)15u)

ACCEL__PRIVATE void *accel__stbds_realloc(void *context, void *ptr, size_t size) {
    unsigned char *old = ptr ? (unsigned char *)ptr - ACCEL__STBDS_HDR : NULL;
    unsigned char *nw;
    accel__stbds_hdr oh, nh;
    (void)context;
    if (old) memcpy(&oh, old, sizeof oh);
    if (size == 0) {
        if (old) accel__raw_free(&oh.a, old);
        return NULL;
    }
    nh.size = size;
    nh.a = accel__g_stbds_alloc;
    nw = (unsigned char *)accel__raw_alloc(&nh.a, size + ACCEL__STBDS_HDR);
    if (!nw) return NULL;
    memcpy(nw, &nh, sizeof nh);
    if (old) {
        memcpy(nw + ACCEL__STBDS_HDR, old + ACCEL__STBDS_HDR, oh.size < size ? oh.size : size);
        accel__raw_free(&oh.a, old);
    }
    return nw + ACCEL__STBDS_HDR;
}
ACCEL__PRIVATE void accel__stbds_free(void *context, void *ptr) {
    accel__stbds_hdr h;
    (void)context;
    if (!ptr) return;
    memcpy(&h, (unsigned char *)ptr - ACCEL__STBDS_HDR, sizeof h);
    accel__raw_free(&h.a, (unsigned char *)ptr - ACCEL__STBDS_HDR);
}

#if !defined(ACCEL_NO_STB_DS_IMPLEMENTATION) && !defined(INCLUDE_STB_DS_H)
#ifdef ACCEL_STATIC
/* stb_ds has no static option. A first declaration with `static` gives the later (extern) declarations and the
   definitions internal linkage (C99 6.2.2p4, C++ [dcl.stc]), so an ACCEL_STATIC program exports nothing. */
#ifdef __cplusplus
extern "C" {
#endif
struct stbds_string_arena;
static ACCEL__UNUSED void stbds_rand_seed(size_t seed);
static ACCEL__UNUSED size_t stbds_hash_bytes(void *p, size_t len, size_t seed);
static ACCEL__UNUSED size_t stbds_hash_string(char *str, size_t seed);
static ACCEL__UNUSED char *stbds_stralloc(struct stbds_string_arena *a, char *str);
static ACCEL__UNUSED void stbds_strreset(struct stbds_string_arena *a);
static ACCEL__UNUSED void *stbds_arrgrowf(void *a, size_t elemsize, size_t addlen, size_t min_cap);
static ACCEL__UNUSED void stbds_arrfreef(void *a);
static ACCEL__UNUSED void stbds_hmfree_func(void *p, size_t elemsize);
static ACCEL__UNUSED void *stbds_hmget_key(void *a, size_t elemsize, void *key, size_t keysize, int mode);
static ACCEL__UNUSED void *stbds_hmget_key_ts(void *a, size_t elemsize, void *key, size_t keysize, ptrdiff_t *temp,
                                              int mode);
static ACCEL__UNUSED void *stbds_hmput_default(void *a, size_t elemsize);
static ACCEL__UNUSED void *stbds_hmput_key(void *a, size_t elemsize, void *key, size_t keysize, int mode);
static ACCEL__UNUSED void *stbds_hmdel_key(void *a, size_t elemsize, void *key, size_t keysize, size_t keyoffset,
                                           int mode);
static ACCEL__UNUSED void *stbds_shmode_func(size_t elemsize, int mode);
#ifdef __cplusplus
}
#endif
#endif /* ACCEL_STATIC */
#define STBDS_REALLOC(ctx, p, s) accel__stbds_realloc((ctx), (p), (s))
#define STBDS_FREE(ctx, p) accel__stbds_free((ctx), (p))
#define STB_DS_IMPLEMENTATION
#if defined(__GNUC__) || defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#endif
#ifdef __NVCC__
#pragma nv_diag_suppress 550
#endif
#include "stb_ds.h"
#undef STB_DS_IMPLEMENTATION /* stb_ds.h emits its implementation on every inclusion that defines this */
#ifdef __NVCC__
#pragma nv_diag_default 550
#endif
#if defined(__GNUC__) || defined(__clang__)
#pragma GCC diagnostic pop
#endif
#else
#include "stb_ds.h"
#endif

/* stb_ds writes through the pointer its allocation returned, also when that is NULL: a failing allocator would
   crash inside stbds_arrput. Every accel push goes through ACCEL__ARR_PUT instead, which first grows the array with
   a checked allocation (doubling, as stb_ds does): -1 and the array unchanged when it fails, else 0. accel uses
   no stb_ds hash maps (their growth cannot be checked): sorted arrays and bsearch serve instead. */
ACCEL__PRIVATE int accel__arr_reserve(void **arr, size_t elem, size_t add) {
    void *a = *arr;
    size_t len = a ? stbds_header(a)->length : 0, cap = a ? stbds_header(a)->capacity : 0, need = len + add, ncap;
    stbds_array_header *b;
    if (need <= cap) return 0;
    ncap = cap ? 2 * cap : 4;
    if (ncap < need) ncap = need;
    if (ncap > ((size_t)-1 - sizeof(stbds_array_header)) / (elem ? elem : 1)) return -1;
    b = (stbds_array_header *)STBDS_REALLOC(NULL, a ? (void *)stbds_header(a) : NULL,
                                            elem * ncap + sizeof(stbds_array_header));
    if (!b) return -1;
    if (!a) {
        b->length = 0;
        b->hash_table = NULL;
        b->temp = 0;
    }
    b->capacity = ncap;
    *arr = (void *)(b + 1);
    return 0;
}
#define ACCEL__ARR_PUT(a, v) (accel__arr_reserve((void **)&(a), sizeof *(a), 1) ? -1 : (stbds_arrput((a), (v)), 0))

/* ------------------------------------------------------------------------------------- 4. shared helpers */
/* byte order: every file and state format of accel is little-endian, whatever the host */
static ACCEL_INLINE void accel__put_u16(unsigned char *p, uint16_t v) {
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}
static ACCEL_INLINE void accel__put_u32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}
static ACCEL_INLINE void accel__put_u64(unsigned char *p, uint64_t v) {
    accel__put_u32(p, (uint32_t)v);
    accel__put_u32(p + 4, (uint32_t)(v >> 32));
}
static ACCEL_INLINE uint16_t accel__get_u16(const unsigned char *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static ACCEL_INLINE uint32_t accel__get_u32(const unsigned char *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static ACCEL_INLINE uint64_t accel__get_u64(const unsigned char *p) {
    return (uint64_t)accel__get_u32(p) | ((uint64_t)accel__get_u32(p + 4) << 32);
}

/* FNV-1a: small fingerprints for agreement checks (not for files). */
static ACCEL_INLINE uint64_t accel__fnv1a(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = (const unsigned char *)data;
    size_t i;
    for (i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}
#define ACCEL__FNV_INIT 1469598103934665603ull

/* Decodes one UTF-8 sequence; returns its length (0 if invalid: overlong, surrogate, > U+10FFFF, truncated). */
ACCEL__PRIVATE size_t accel__utf8_decode(const unsigned char *s, const unsigned char *end, uint32_t *cp) {
    unsigned c = s[0];
    if (c < 0x80) { *cp = c; return 1; }
    if (c >= 0xC2 && c <= 0xDF) {
        if (end - s < 2 || (s[1] & 0xC0) != 0x80) return 0;
        *cp = ((c & 0x1Fu) << 6) | (s[1] & 0x3Fu);
        return 2;
    }
    if (c >= 0xE0 && c <= 0xEF) {
        unsigned lo = 0x80, hi = 0xBF;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
        if (end - s < 3 || s[1] < lo || s[1] > hi || (s[2] & 0xC0) != 0x80) return 0;
        *cp = ((c & 0x0Fu) << 12) | ((s[1] & 0x3Fu) << 6) | (s[2] & 0x3Fu);
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        unsigned lo = 0x80, hi = 0xBF;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
        if (end - s < 4 || s[1] < lo || s[1] > hi || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80) return 0;
        *cp = ((c & 0x07u) << 18) | ((s[1] & 0x3Fu) << 12) | ((s[2] & 0x3Fu) << 6) | (s[3] & 0x3Fu);
        return 4;
    }
    return 0;
}
/* 1 when s[0..n) is valid UTF-8; otherwise 0 and *bad (may be NULL) = offset of the first invalid byte. */
ACCEL__PRIVATE int accel__utf8_valid(const unsigned char *s, size_t n, size_t *bad) {
    size_t i = 0;
    uint32_t cp;
    while (i < n) {
        size_t l;
        if (s[i] < 0x80) { ++i; continue; }
        l = accel__utf8_decode(s + i, s + n, &cp);
        if (!l) { if (bad) *bad = i; return 0; }
        i += l;
    }
    return 1;
}

/* A growable string through acc's allocator. After an allocation failure `oom` is set and further appends do
   nothing; the caller checks oom once at the end. */
typedef struct accel__sb { accel *acc; char *p; size_t n, cap; int oom; } accel__sb;

ACCEL__PRIVATE void accel__sb_init(accel__sb *b, accel *acc) {
    memset(b, 0, sizeof *b);
    b->acc = acc;
}
ACCEL__PRIVATE int accel__sb_reserve(accel__sb *b, size_t extra) {
    size_t need, nc;
    char *np;
    if (b->oom) return -1;
    need = b->n + extra + 1;
    if (need <= b->cap) return 0;
    nc = b->cap ? b->cap * 2 : 256;
    while (nc < need) nc *= 2;
    np = (char *)accel_host_alloc(b->acc, nc);
    if (!np) { b->oom = 1; return -1; }
    if (b->n) memcpy(np, b->p, b->n);
    np[b->n] = 0;
    accel_host_free(b->acc, b->p);
    b->p = np;
    b->cap = nc;
    return 0;
}
ACCEL__PRIVATE void accel__sb_add(accel__sb *b, const char *s, size_t n) {
    if (accel__sb_reserve(b, n)) return;
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
ACCEL__PRIVATE void accel__sb_puts(accel__sb *b, const char *s) { accel__sb_add(b, s, strlen(s)); }
ACCEL__PRIVATE void accel__sb_printf(accel__sb *b, const char *fmt, ...) ACCEL__PRINTF(2, 3);
ACCEL__PRIVATE void accel__sb_printf(accel__sb *b, const char *fmt, ...) {
    va_list ap;
    int n;
    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || accel__sb_reserve(b, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->n, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)n;
}
ACCEL__PRIVATE void accel__sb_free(accel__sb *b) {
    accel_host_free(b->acc, b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}
/* A JSON string (with quotes) as Python's json.dumps writes it: ascii_only = ensure_ascii=True (non-ASCII as \uXXXX,
   astral characters as surrogate pairs, invalid UTF-8 as U+FFFD), else ensure_ascii=False (UTF-8 as is). Both
   escape " \ and control characters (\b \f \n \r \t, others \u00XX). */
ACCEL__PRIVATE void accel__sb_json_str(accel__sb *b, const char *str, size_t n, int ascii_only) {
    const unsigned char *s = (const unsigned char *)str, *end = s + n;
    static const char hex[] = "0123456789abcdef";
    accel__sb_add(b, "\"", 1);
    while (s < end) {
        uint32_t cp;
        size_t l;
        char t[12];
        if (*s >= 0x20 && *s < 0x7F && *s != '"' && *s != '\\') { /* the common case: a run of plain ASCII */
            const unsigned char *r = s;
            while (r < end && *r >= 0x20 && *r < 0x7F && *r != '"' && *r != '\\') ++r;
            accel__sb_add(b, (const char *)s, (size_t)(r - s));
            s = r;
            continue;
        }
        if (*s >= 0x7F && !ascii_only) { accel__sb_add(b, (const char *)s, 1); ++s; continue; }
        l = accel__utf8_decode(s, end, &cp);
        if (!l) { cp = 0xFFFD; l = 1; }
        s += l;
        switch (cp) {
        case '"': accel__sb_add(b, "\\\"", 2); continue;
        case '\\': accel__sb_add(b, "\\\\", 2); continue;
        case '\n': accel__sb_add(b, "\\n", 2); continue;
        case '\r': accel__sb_add(b, "\\r", 2); continue;
        case '\t': accel__sb_add(b, "\\t", 2); continue;
        case '\b': accel__sb_add(b, "\\b", 2); continue;
        case '\f': accel__sb_add(b, "\\f", 2); continue;
        default: break;
        }
        if (cp >= 0x10000) {
            uint32_t v = cp - 0x10000, hi = 0xD800 + (v >> 10), lo = 0xDC00 + (v & 0x3FF);
            t[0] = '\\';
            t[1] = 'u';
            t[2] = hex[(hi >> 12) & 15];
            t[3] = hex[(hi >> 8) & 15];
            t[4] = hex[(hi >> 4) & 15];
            t[5] = hex[hi & 15];
            accel__sb_add(b, t, 6);
            t[2] = hex[(lo >> 12) & 15]; t[3] = hex[(lo >> 8) & 15]; t[4] = hex[(lo >> 4) & 15]; t[5] = hex[lo & 15];
            accel__sb_add(b, t, 6);
        } else {
            t[0] = '\\';
            t[1] = 'u';
            t[2] = hex[(cp >> 12) & 15];
            t[3] = hex[(cp >> 8) & 15];
            t[4] = hex[(cp >> 4) & 15];
            t[5] = hex[cp & 15];
            accel__sb_add(b, t, 6);
        }
    }
    accel__sb_add(b, "\"", 1);
}

/* snprintf whose truncation is not a warning (lengths are checked where it matters). */
ACCEL__PRIVATE int accel__fmt(char *out, size_t cap, const char *fmt, ...) ACCEL__PRINTF(3, 4);
ACCEL__PRIVATE int accel__fmt(char *out, size_t cap, const char *fmt, ...) {
    va_list ap;
    int n;
    va_start(ap, fmt);
    n = vsnprintf(out, cap, fmt, ap);
    va_end(ap);
    return n;
}

#if !defined(_WIN32)
/* ---- files. Paths are limited to 4095 bytes (PATH_MAX). */
ACCEL__PRIVATE accel_result accel__io_fail(accel *acc, const char *what, const char *path) {
    int e = errno;
    return ACCEL__FAIL(acc, ACCEL_ERR_IO, "%s %.400s: %s", what, path, strerror(e));
}
ACCEL__PRIVATE int accel__write_all(int fd, const void *buf, size_t n) {
    const char *p = (const char *)buf;
    while (n > 0) {
        size_t chunk = n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n;
        ssize_t w = write(fd, p, chunk);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (w == 0) { errno = EIO; return -1; } /* no progress: do not spin */
        p += w;
        n -= (size_t)w;
    }
    return 0;
}
ACCEL__PRIVATE int accel__pread_all(int fd, void *buf, size_t n, uint64_t off) {
    char *p = (char *)buf;
    while (n > 0) {
        size_t chunk = n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n;
        ssize_t r = pread(fd, p, chunk, (off_t)off);
        if (r < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (r == 0) { errno = EIO; return -1; }
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}
ACCEL__PRIVATE int accel__fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY), rc;
    if (fd < 0) return -1;
    rc = fsync(fd);
    close(fd);
    return rc;
}
ACCEL__PRIVATE void accel__dirname(const char *path, char *out, size_t cap) {
    const char *s = strrchr(path, '/');
    if (!s) accel__fmt(out, cap, ".");
    else if (s == path) accel__fmt(out, cap, "/");
    else accel__fmt(out, cap, "%.*s", (int)(s - path), path);
}
ACCEL__PRIVATE int accel__is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}
ACCEL__PRIVATE int accel__is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}
/* mkdir -p. On failure returns -1 with errno set and `failed` (may be NULL) naming the component that could not be
   created or is not a directory. */
ACCEL__PRIVATE int accel__mkdir_p(const char *path, char *failed, size_t cap) {
    char buf[4096];
    size_t i, n = strlen(path);
    if (failed && cap) failed[0] = 0;
    if (n == 0 || n >= sizeof buf) {
        if (failed && cap) accel__fmt(failed, cap, "%.200s", path);
        errno = n ? ENAMETOOLONG : ENOENT;
        return -1;
    }
    memcpy(buf, path, n + 1);
    for (i = 1; i <= n; ++i) {
        if (buf[i] != '/' && buf[i] != 0) continue;
        if (buf[i - 1] == '/') continue;
        buf[i] = 0;
        if (mkdir(buf, 0777) != 0 && errno != EEXIST) {
            int e = errno;
            if (failed && cap) accel__fmt(failed, cap, "%s", buf);
            errno = e;
            return -1;
        }
        if (!accel__is_dir(buf)) {
            if (failed && cap) accel__fmt(failed, cap, "%s", buf);
            errno = ENOTDIR;
            return -1;
        }
        if (i < n) buf[i] = '/';
    }
    return 0;
}
ACCEL__PRIVATE int accel__rmtree(const char *path) {
    struct stat st;
    DIR *d;
    struct dirent *e;
    int rc = 0;
    if (lstat(path, &st) != 0) return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(st.st_mode)) return unlink(path);
    d = opendir(path);
    if (!d) return -1;
    while ((e = readdir(d)) != NULL) {
        char sub[4096];
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if ((size_t)accel__fmt(sub, sizeof sub, "%s/%s", path, e->d_name) >= sizeof sub) { rc = -1; continue; }
        if (accel__rmtree(sub) != 0) rc = -1;
    }
    closedir(d);
    if (rmdir(path) != 0) rc = -1;
    return rc;
}
/* Opens a file that must be a regular file for reading (close-on-exec), st its fstat. O_NONBLOCK because open() of
   a FIFO waits for a writer: a folder or an index from elsewhere can put one where a file is expected, and the
   load would hang; a FIFO, device or directory is refused after the open, which then cannot block. Returns the
   descriptor, or -1 with errno: the open's, or EINVAL for "not a regular file". Records nothing (thread-safe). */
ACCEL__PRIVATE int accel__open_regular_fd(const char *path, struct stat *st) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC), flags;
    if (fd < 0) return -1;
    if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {
        close(fd);
        errno = EINVAL;
        return -1;
    }
    flags = fcntl(fd, F_GETFL, 0);
    if (flags >= 0) (void)fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    return fd;
}
/* The same with the message recorded: ACCEL_ERR_NOT_FOUND, ACCEL_ERR_IO (cannot open, not a regular file). */
ACCEL__PRIVATE accel_result accel__open_regular(accel *acc, const char *path, struct stat *st, int *fd) {
    *fd = accel__open_regular_fd(path, st);
    if (*fd >= 0) return ACCEL_OK;
    if (errno == ENOENT) return ACCEL__FAIL(acc, ACCEL_ERR_NOT_FOUND, "%.400s does not exist", path);
    if (errno == EINVAL) return ACCEL__FAIL(acc, ACCEL_ERR_IO, "%.400s is not a regular file", path);
    return accel__io_fail(acc, "cannot open", path);
}
/* Reads a whole regular file of at most `limit` bytes into *out (NUL-terminated, acc's allocator). */
ACCEL__PRIVATE accel_result accel__read_file(accel *acc, const char *path, char **out, size_t *n, size_t limit) {
    int fd;
    struct stat st;
    char *buf;
    accel_result r = accel__open_regular(acc, path, &st, &fd);
    if (r != ACCEL_OK) return r;
    if ((uint64_t)st.st_size > (uint64_t)limit) {
        close(fd);
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.400s is %llu bytes, more than the %llu allowed", path,
                           (unsigned long long)st.st_size, (unsigned long long)limit);
    }
    buf = (char *)accel_host_alloc(acc, (size_t)st.st_size + 1);
    if (!buf) { close(fd); return ACCEL_ERR_OUT_OF_MEMORY; }
    if (accel__pread_all(fd, buf, (size_t)st.st_size, 0) != 0) {
        accel_result r = accel__io_fail(acc, "cannot read", path);
        accel_host_free(acc, buf);
        close(fd);
        return r;
    }
    close(fd);
    buf[st.st_size] = 0;
    *out = buf;
    *n = (size_t)st.st_size;
    return ACCEL_OK;
}
/* An atomic file write in two halves, for writers that stream into a descriptor: open creates "<path>.tmp.<pid>"
   (tmp receives its name, cap >= strlen(path) + 32); commit fsyncs and closes it and, when ok, renames it over path
   and fsyncs the directory — a reader sees the old file or the new one, never a part; when !ok (or anything fails)
   the temporary is removed. commit returns the first error (ACCEL_OK when ok and everything worked). */
ACCEL__PRIVATE accel_result accel__atomic_open(accel *acc, const char *path, char *tmp, size_t cap, int *fd) {
    *fd = -1;
    if (strlen(path) >= 4000 || cap < strlen(path) + 32)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "path too long: %.200s...", path);
    accel__fmt(tmp, cap, "%s.tmp.%ld", path, (long)getpid());
    *fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (*fd < 0) return accel__io_fail(acc, "cannot create", tmp);
    return ACCEL_OK;
}
ACCEL__PRIVATE accel_result accel__atomic_commit(accel *acc, int fd, const char *tmp, const char *path, int ok) {
    char dir[4096];
    accel_result r = ACCEL_OK;
    if (ok && fsync(fd) != 0) r = accel__io_fail(acc, "cannot write", tmp);
    if (close(fd) != 0 && ok && r == ACCEL_OK) r = accel__io_fail(acc, "cannot close", tmp);
    if (!ok || r != ACCEL_OK) {
        unlink(tmp);
        return r;
    }
    if (rename(tmp, path) != 0) {
        r = accel__io_fail(acc, "cannot rename into", path);
        unlink(tmp);
        return r;
    }
    accel__dirname(path, dir, sizeof dir);
    if (accel__fsync_dir(dir) != 0) return accel__io_fail(acc, "cannot fsync directory", dir);
    return ACCEL_OK;
}
/* Writes bytes to path and fsyncs them; atomic: through accel__atomic_open/_commit. */
ACCEL__PRIVATE accel_result accel__write_file(accel *acc, const char *path, const void *data, size_t n, int atomic) {
    char tmp[4200];
    int fd;
    accel_result r;
    if (atomic) {
        r = accel__atomic_open(acc, path, tmp, sizeof tmp, &fd);
        if (r != ACCEL_OK) return r;
        if (accel__write_all(fd, data, n) != 0) {
            r = accel__io_fail(acc, "cannot write", tmp);
            (void)accel__atomic_commit(acc, fd, tmp, path, 0);
            return r;
        }
        return accel__atomic_commit(acc, fd, tmp, path, 1);
    }
    if (strlen(path) >= 4000) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "path too long: %.200s...", path);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return accel__io_fail(acc, "cannot create", path);
    if (accel__write_all(fd, data, n) != 0 || fsync(fd) != 0) {
        r = accel__io_fail(acc, "cannot write", path);
        close(fd);
        return r;
    }
    if (close(fd) != 0) return accel__io_fail(acc, "cannot close", path);
    return ACCEL_OK;
}
#endif /* !_WIN32 */

/* ---- deadlines */
/* The deadline of a collective starting now: collective_timeout_ms, or train_timeout_ms once this process completed
   an optimizer step (torchtitan's init / train timeouts). */
ACCEL__PRIVATE double accel__timeout_s(const accel *acc) {
    int ms = acc && acc->desc.collective_timeout_ms > 0 ? acc->desc.collective_timeout_ms : 1800000;
    if (acc && acc->impl && acc->impl->stepped && acc->desc.train_timeout_ms > 0) ms = acc->desc.train_timeout_ms;
    return 1e-3 * (double)ms;
}
ACCEL__PRIVATE double accel__deadline(const accel *acc) { return accel_now() + accel__timeout_s(acc); }
ACCEL__PRIVATE int accel__ms_left(double deadline) {
    double left = (deadline - accel_now()) * 1000.0;
    return left <= 0 ? 0 : left > 1e9 ? 1000000000 : (int)left;
}
ACCEL__PRIVATE void accel__sleep_ms(int ms) {
    struct timespec ts;
    ts.tv_sec = ms / 1000;
    ts.tv_nsec = (long)(ms % 1000) * 1000000L;
    nanosleep(&ts, NULL);
}

/* ---- x86 CPU features and the 8-lane 16-bit codec (the modules' run-time chosen AVX2 loops) */
/* The modules' hot host loops have AVX2 twins compiled with target attributes and chosen at run time, so a baseline
   -O2 build runs 256-bit code on a machine that has it (each module keeps its own ..._NO_DISPATCH macro: then only a
   build whose -march has the features uses them). accel__cpu_has(ACCEL__CPU_AVX2 | ACCEL__CPU_F16C) is 1 when the CPU
   has every feature asked: at compile time when -march has them, else asked once (__builtin_cpu_supports("avx2"),
   which also checks that the OS saves the YMM registers; F16C and FMA from CPUID.1:ECX bits 29 and 12, because
   clang 14's __builtin_cpu_supports does not know "f16c"). */
#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__)) && !defined(__CUDACC__)
#define ACCEL__X86 1
#include <immintrin.h>
#include <cpuid.h>
#define ACCEL__CPU_AVX2 1
#define ACCEL__CPU_F16C 2
#define ACCEL__CPU_FMA 4
#define ACCEL__TARGET_AVX2 __attribute__((target("avx2")))
#define ACCEL__TARGET_F16C __attribute__((target("avx2,f16c")))
ACCEL__PRIVATE int accel__cpu_has(int want) {
    static int known; /* 0: not asked yet, else 8 | the features (a race only writes the same value twice) */
    int built = 0;
#ifdef __AVX2__
    built |= ACCEL__CPU_AVX2;
#endif
#ifdef __F16C__
    built |= ACCEL__CPU_F16C;
#endif
#ifdef __FMA__
    built |= ACCEL__CPU_FMA;
#endif
    if ((built & want) == want) return 1;
    if (!known) {
        unsigned a, b, c = 0, d;
        int k = 8 | (__builtin_cpu_supports("avx2") ? ACCEL__CPU_AVX2 : 0);
        if (__get_cpuid(1, &a, &b, &c, &d))
            k |= (c & bit_F16C ? ACCEL__CPU_F16C : 0) | (c & bit_FMA ? ACCEL__CPU_FMA : 0);
        known = k;
    }
    return (known & want) == want;
}
/* The core's 16-bit codec on 8 lanes, lane for lane the same bits (every fp32 input: tests/unit/ddp/test_ddp_vec.c).
   fp32 → bf16: the rule (u + 0x7fff + lsb) >> 16 on integer lanes (AVX2 only), NaN → 0x7FFF. */
ACCEL__TARGET_AVX2 static ACCEL_INLINE __m128i accel__v8_f32_to_bf16(__m256 x) {
    const __m256i u = _mm256_castps_si256(x);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                           _mm256_set1_epi32(0x7f800000));
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
    r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7fff), nan);
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1)); /* lanes <= 0xffff */
}
/* bf16 → fp32, exact (a NaN's payload kept, as accel_bf16_to_f32) */
ACCEL__TARGET_AVX2 static ACCEL_INLINE __m256 accel__v8_bf16_to_f32(__m128i h) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
/* fp32 → fp16: F16C's round-to-nearest-even conversion (the codec's rounding, overflow and subnormals), then every
   NaN lane replaced by 0x7FFF (F16C keeps the payload; the codec does not) */
ACCEL__TARGET_F16C static ACCEL_INLINE __m128i accel__v8_f32_to_f16(__m256 x) {
    const __m256i u = _mm256_castps_si256(x);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                           _mm256_set1_epi32(0x7f800000));
    const __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT);
    const __m128i m = _mm_packs_epi32(_mm256_castsi256_si128(nan), _mm256_extracti128_si256(nan, 1));
    return _mm_blendv_epi8(h, _mm_set1_epi16(0x7fff), m);
}
/* fp16 → fp32, exact (accel_f16_to_f32 is F16C's rule, a NaN quieted with sign and payload kept) */
ACCEL__TARGET_F16C static ACCEL_INLINE __m256 accel__v8_f16_to_f32(__m128i h) { return _mm256_cvtph_ps(h); }
#endif

/* ------------------------------------------------------------------- 5. dtypes, names, environment */
static const struct { const char *name; size_t size; int is_float; } accel__dtypes[ACCEL_DTYPE_COUNT] = {
    {NULL, 0, 0},      {"F64", 8, 1},  {"F32", 4, 1},     {"F16", 2, 1},     {"BF16", 2, 1},
    {"F8_E4M3", 1, 1}, {"F8_E5M2", 1, 1}, {"I64", 8, 0},  {"I32", 4, 0},     {"I16", 2, 0},
    {"I8", 1, 0},      {"U64", 8, 0},  {"U32", 4, 0},     {"U16", 2, 0},     {"U8", 1, 0},
    {"BOOL", 1, 0}};

ACCEL__DEF size_t accel_dtype_size(accel_dtype t) {
    return ((int)t > 0 && (int)t < ACCEL_DTYPE_COUNT) ? accel__dtypes[t].size : 0;
}
ACCEL__DEF const char *accel_dtype_name(accel_dtype t) {
    return ((int)t > 0 && (int)t < ACCEL_DTYPE_COUNT) ? accel__dtypes[t].name : NULL;
}
ACCEL__DEF int accel_dtype_is_float(accel_dtype t) {
    return ((int)t > 0 && (int)t < ACCEL_DTYPE_COUNT) ? accel__dtypes[t].is_float : 0;
}
ACCEL__DEF accel_dtype accel_dtype_from_name(const char *name) {
    int i;
    if (!name) return ACCEL_DTYPE_INVALID;
    for (i = 1; i < ACCEL_DTYPE_COUNT; ++i)
        if (!strcmp(name, accel__dtypes[i].name)) return (accel_dtype)i;
    return ACCEL_DTYPE_INVALID;
}

ACCEL__DEF int64_t accel_tensor_numel(const accel_tensor *t) {
    int64_t n = 1;
    int i;
    if (!t || t->ndim < 0 || t->ndim > ACCEL_MAX_DIMS) return -1;
    for (i = 0; i < t->ndim; ++i) {
        if (t->shape[i] < 0) return -1;
        if (t->shape[i] != 0 && n > INT64_MAX / t->shape[i]) return -1;
        n *= t->shape[i];
    }
    return n;
}
ACCEL__DEF int64_t accel_tensor_nbytes(const accel_tensor *t) {
    int64_t n = accel_tensor_numel(t);
    size_t es = t ? accel_dtype_size(t->dtype) : 0;
    if (n < 0 || es == 0) return -1;
    if (n > INT64_MAX / (int64_t)es) return -1;
    return n * (int64_t)es;
}

ACCEL__DEF const char *accel_precision_name(accel_precision p) {
    switch (p) {
    case ACCEL_PRECISION_NO: return "no";
    case ACCEL_PRECISION_FP16: return "fp16";
    case ACCEL_PRECISION_BF16: return "bf16";
    case ACCEL_PRECISION_FP8: return "fp8";
    default: return "default";
    }
}
ACCEL__DEF const char *accel_distributed_type_name(accel_distributed_type t) {
    switch (t) {
    case ACCEL_DISTRIBUTED_MULTI_CPU: return "MULTI_CPU";
    case ACCEL_DISTRIBUTED_MULTI_GPU: return "MULTI_GPU";
    default: return "NO";
    }
}
ACCEL__DEF const char *accel_launcher_name(accel_launcher l) {
    static const char *names[ACCEL_LAUNCHER_COUNT] = {"none", "explicit", "openmpi", "mpich", "mvapich", "slurm",
                                                      "torchrun"};
    return ((int)l >= 0 && (int)l < ACCEL_LAUNCHER_COUNT) ? names[l] : "?";
}

/* ------------------------------------------------------------------------------- environment parsing */
ACCEL__DEF int accel_parse_bool(const char *s) {
    static const char *yes[] = {"y", "yes", "t", "true", "on", "1"};
    static const char *no[] = {"n", "no", "f", "false", "off", "0"};
    char low[8];
    size_t i, n;
    if (!s) return -1;
    n = strlen(s);
    if (n == 0 || n >= sizeof low) return -1;
    for (i = 0; i < n; ++i) low[i] = (char)tolower((unsigned char)s[i]);
    low[n] = 0;
    for (i = 0; i < 6; ++i) {
        if (!strcmp(low, yes[i])) return 1;
        if (!strcmp(low, no[i])) return 0;
    }
    return -1;
}

/* Strict non-negative int: digits only (surrounding spaces allowed), fits in int. -1 unset, -2 garbage. */
static int accel__parse_nonneg(const char *s, long *out) {
    char *end;
    long v;
    if (!s) return -1;
    while (*s == ' ' || *s == '\t') ++s;
    if (!isdigit((unsigned char)*s)) return -2;
    errno = 0;
    v = strtol(s, &end, 10);
    while (*end == ' ' || *end == '\t') ++end;
    if (errno || *end || v > INT_MAX) return -2;
    *out = v;
    return 0;
}

typedef struct accel__source {
    accel_launcher launcher;
    const char *rank, *size, *local_rank, *local_size;
} accel__source;

static const accel__source accel__sources[] = {
    {ACCEL_LAUNCHER_OPENMPI, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {ACCEL_LAUNCHER_MPICH, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
    {ACCEL_LAUNCHER_MVAPICH, "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_LOCAL_RANK",
     "MV2_COMM_WORLD_LOCAL_SIZE"},
    {ACCEL_LAUNCHER_SLURM, "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", "SLURM_STEP_TASKS_PER_NODE"},
    {ACCEL_LAUNCHER_TORCHRUN, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
};
#define ACCEL__NSOURCES ((int)(sizeof accel__sources / sizeof accel__sources[0]))

typedef struct accel__layout { int present, rank, size, local_rank, local_size; } accel__layout;

/* Slurm's task counts per node, "2(x3),1" = 2,2,2,1: the count of node `node`. 0 ok, -1 malformed, -2 no such node. */
static int accel__slurm_tasks_on_node(const char *spec, long node, long *out) {
    const char *p = spec;
    long seen = 0;
    while (*p) {
        char *e;
        long n, rep = 1;
        if (!isdigit((unsigned char)*p)) return -1;
        n = strtol(p, &e, 10);
        p = e;
        if (p[0] == '(' && p[1] == 'x') {
            if (!isdigit((unsigned char)p[2])) return -1;
            rep = strtol(p + 2, &e, 10);
            if (*e != ')' || rep < 1) return -1;
            p = e + 1;
        }
        if (n < 1) return -1;
        if (node >= seen && node < seen + rep) { *out = n; return 0; }
        seen += rep;
        if (*p == ',') ++p;
        else if (*p) return -1;
    }
    return -2;
}

/* Reads one source. present=0 when neither rank nor size is set. Slurm's variables count only inside an srun step
   (SLURM_STEP_ID): in an sbatch script or a salloc shell they describe the allocation, not this process. The
   step's own size and per-node layout are used (SLURM_STEP_NUM_TASKS, SLURM_STEP_TASKS_PER_NODE at SLURM_NODEID),
   not the job's, which a smaller step inherits. */
static int accel__read_source(const accel__source *s, accel__layout *out, char *err, size_t cap) {
    const char *names[4];
    long vals[4];
    int i, rc, slurm = s->launcher == ACCEL_LAUNCHER_SLURM;
    names[0] = s->rank; names[1] = s->size; names[2] = s->local_rank; names[3] = s->local_size;
    memset(out, 0, sizeof *out);
    if (slurm && !getenv("SLURM_STEP_ID")) return 0;
    if (slurm && !getenv(names[1])) names[1] = "SLURM_NTASKS"; /* Slurm < 20.11 has no SLURM_STEP_NUM_TASKS */
    for (i = 0; i < 4; ++i) {
        vals[i] = -1;
        if (slurm && i == 3) continue;
        rc = accel__parse_nonneg(getenv(names[i]), &vals[i]);
        if (rc == -2) {
            snprintf(err, cap, "environment variable %s=\"%s\" is not a non-negative integer", names[i],
                     getenv(names[i]));
            return -1;
        }
    }
    if (slurm) {
        const char *t = getenv("SLURM_STEP_TASKS_PER_NODE"), *nid = getenv("SLURM_NODEID");
        long node = 0;
        if (!t) { t = getenv("SLURM_TASKS_PER_NODE"); names[3] = "SLURM_TASKS_PER_NODE"; }
        if (t && accel__parse_nonneg(nid, &node) == -2) {
            snprintf(err, cap, "environment variable SLURM_NODEID=\"%s\" is not a non-negative integer", nid);
            return -1;
        }
        if (t) {
            int k = accel__slurm_tasks_on_node(t, node, &vals[3]);
            if (k != 0) {
                snprintf(err, cap, "%s=\"%s\" %s", names[3], t,
                         k == -1 ? "is not a Slurm task count list (e.g. \"2(x3),1\")"
                                 : "has no entry for SLURM_NODEID");
                return -1;
            }
        }
    }
    if (vals[0] < 0 && vals[1] < 0) return 0;
    if (vals[0] < 0 || vals[1] < 0) {
        snprintf(err, cap, "%s is set but %s is not", vals[0] < 0 ? names[1] : names[0],
                 vals[0] < 0 ? names[0] : names[1]);
        return -1;
    }
    if (vals[1] < 1 || vals[0] >= vals[1]) {
        snprintf(err, cap, "%s=%ld is not a valid rank for %s=%ld", names[0], vals[0], names[1], vals[1]);
        return -1;
    }
    if (vals[3] == 0 || (vals[3] > 0 && vals[3] > vals[1])) {
        snprintf(err, cap, "%s=%ld is not a valid local size for %s=%ld", names[3], vals[3], names[1], vals[1]);
        return -1;
    }
    if (vals[2] >= 0 && vals[3] > 0 && vals[2] >= vals[3]) {
        snprintf(err, cap, "%s=%ld is not a valid local rank for %s=%ld", names[2], vals[2], names[3], vals[3]);
        return -1;
    }
    out->present = 1;
    out->rank = (int)vals[0];
    out->size = (int)vals[1];
    out->local_rank = vals[2] >= 0 ? (int)vals[2] : -1;
    out->local_size = vals[3] > 0 ? (int)vals[3] : -1;
    return 1;
}

ACCEL__DEF accel_result accel_resolve_config(const accel_desc *desc, accel_desc *out, accel_launcher *out_launcher,
                                             char *err, size_t cap) {
    accel_desc d;
    accel__layout found, lay, slurm;
    accel_launcher launcher = ACCEL_LAUNCHER_NONE;
    const accel__source *found_src = NULL;
    const char *s;
    int i, b;
    char dummy[8];
    if (!err || cap == 0) { err = dummy; cap = sizeof dummy; }
    err[0] = 0;
    if (!out) { snprintf(err, cap, "accel_resolve_config: out is NULL"); return ACCEL_ERR_INVALID_ARGUMENT; }
    if (desc) d = *desc;
    else memset(&d, 0, sizeof d);

    /* validate the desc itself */
    if (d.num_processes < 0 || (d.num_processes > 0 && (d.process_index < 0 || d.process_index >= d.num_processes))) {
        snprintf(err, cap, "desc.process_index=%d is not valid for desc.num_processes=%d", d.process_index,
                 d.num_processes);
        return ACCEL_ERR_INVALID_ARGUMENT;
    }
    if (d.gradient_accumulation_steps < 0) {
        snprintf(err, cap, "desc.gradient_accumulation_steps=%d must be >= 1 (0 = default)",
                 d.gradient_accumulation_steps);
        return ACCEL_ERR_INVALID_ARGUMENT;
    }
    if ((int)d.log_level < 0 || (int)d.log_level > (int)ACCEL_LOG_DEBUG) {
        snprintf(err, cap, "desc.log_level=%d is not an accel_log_level", (int)d.log_level);
        return ACCEL_ERR_INVALID_ARGUMENT;
    }
    if ((int)d.mixed_precision < 0 || (int)d.mixed_precision > (int)ACCEL_PRECISION_FP8) {
        snprintf(err, cap, "desc.mixed_precision=%d is not an accel_precision", (int)d.mixed_precision);
        return ACCEL_ERR_INVALID_ARGUMENT;
    }
    if ((!d.host_allocator.alloc) != (!d.host_allocator.free) ||
        (!d.device_allocator.alloc) != (!d.device_allocator.free) ||
        (!d.pinned_allocator.alloc) != (!d.pinned_allocator.free)) {
        snprintf(err, cap, "desc.%s_allocator needs both alloc and free (or neither)",
                 (!d.host_allocator.alloc) != (!d.host_allocator.free) ? "host"
                 : (!d.device_allocator.alloc) != (!d.device_allocator.free) ? "device" : "pinned");
        return ACCEL_ERR_INVALID_ARGUMENT;
    }
    if (d.collective_timeout_ms < 0) {
        snprintf(err, cap, "desc.collective_timeout_ms=%d must be >= 0", d.collective_timeout_ms);
        return ACCEL_ERR_INVALID_ARGUMENT;
    }

    /* launcher table: every present source is parsed; the first wins; disagreement is an error — except that an
       srun step's layout gives way to a launcher started inside it (mpirun / torchrun / accel launch in an srun
       step): Slurm is read first but applied last, and only fills in what agrees. PMI_RANK/PMI_SIZE equal to the
       step's are Slurm's pmi2 plugin speaking for the step (srun --mpi=pmi2), not a launcher of their own */
    memset(&found, 0, sizeof found);
    memset(&slurm, 0, sizeof slurm);
    if (accel__read_source(&accel__sources[3], &slurm, err, cap) < 0) return ACCEL_ERR_ENVIRONMENT;
    for (i = 0; i < ACCEL__NSOURCES; ++i) {
        int rc = accel__sources[i].launcher == ACCEL_LAUNCHER_SLURM
                     ? 0 : accel__read_source(&accel__sources[i], &lay, err, cap);
        if (rc < 0) return ACCEL_ERR_ENVIRONMENT;
        if (rc == 0) continue;
        if (accel__sources[i].launcher == ACCEL_LAUNCHER_MPICH && slurm.present && lay.rank == slurm.rank &&
            lay.size == slurm.size)
            continue;
        if (!found.present) {
            found = lay;
            found_src = &accel__sources[i];
            launcher = accel__sources[i].launcher;
        } else if (lay.rank != found.rank || lay.size != found.size) {
            snprintf(err, cap, "launcher environments disagree: %s=%d %s=%d (%s) vs %s=%d %s=%d (%s)", found_src->rank,
                     found.rank, found_src->size, found.size, accel_launcher_name(found_src->launcher),
                     accel__sources[i].rank, lay.rank, accel__sources[i].size, lay.size,
                     accel_launcher_name(accel__sources[i].launcher));
            return ACCEL_ERR_ENVIRONMENT;
        } else {
            if (found.local_rank < 0) found.local_rank = lay.local_rank;
            if (found.local_size < 0) found.local_size = lay.local_size;
        }
    }
    if (slurm.present && !found.present) {
        found = slurm;
        found_src = &accel__sources[3];
        launcher = ACCEL_LAUNCHER_SLURM;
    } else if (slurm.present && slurm.rank == found.rank && slurm.size == found.size) {
        if (found.local_rank < 0) found.local_rank = slurm.local_rank;
        if (found.local_size < 0) found.local_size = slurm.local_size;
    }
    if (d.num_processes > 0) {
        if (found.present && (found.rank != d.process_index || found.size != d.num_processes)) {
            snprintf(err, cap, "desc says rank %d of %d but the %s environment says %s=%d %s=%d", d.process_index,
                     d.num_processes, accel_launcher_name(launcher), found_src->rank, found.rank, found_src->size,
                     found.size);
            return ACCEL_ERR_ENVIRONMENT;
        }
        launcher = ACCEL_LAUNCHER_EXPLICIT;
    } else if (found.present) {
        d.num_processes = found.size;
        d.process_index = found.rank;
        d.local_process_index = found.local_rank >= 0
                                        ? found.local_rank
                                        : (found.local_size > 0 ? found.rank % found.local_size : found.rank);
        d.local_num_processes = found.local_size > 0 ? found.local_size : found.size;
    } else {
        d.num_processes = 1;
        d.process_index = 0;
        d.local_process_index = 0;
        d.local_num_processes = 1;
    }
    if (d.local_num_processes <= 0) d.local_num_processes = d.num_processes;
    if (d.local_process_index < 0 || d.local_process_index >= d.local_num_processes) {
        snprintf(err, cap, "local process index %d is not valid for %d local processes", d.local_process_index,
                 d.local_num_processes);
        return ACCEL_ERR_INVALID_ARGUMENT;
    }

    /* ACCELERATE_* variables, as Accelerate applies them */
    s = getenv("ACCELERATE_MIXED_PRECISION");
    if (s && *s) {
        accel_precision p = ACCEL_PRECISION_DEFAULT;
        if (!strcmp(s, "no")) p = ACCEL_PRECISION_NO;
        else if (!strcmp(s, "fp16")) p = ACCEL_PRECISION_FP16;
        else if (!strcmp(s, "bf16")) p = ACCEL_PRECISION_BF16;
        else if (!strcmp(s, "fp8")) p = ACCEL_PRECISION_FP8;
        else {
            snprintf(err, cap, "ACCELERATE_MIXED_PRECISION=\"%s\" is not one of no, fp16, bf16, fp8", s);
            { *out = d; if (out_launcher) *out_launcher = launcher; return ACCEL_ERR_ENVIRONMENT; }
        }
        if (d.mixed_precision == ACCEL_PRECISION_DEFAULT) d.mixed_precision = p;
    }
    if (d.mixed_precision == ACCEL_PRECISION_DEFAULT) d.mixed_precision = ACCEL_PRECISION_NO;

    s = getenv("ACCELERATE_GRADIENT_ACCUMULATION_STEPS");
    if (s && *s) {
        long v = 0;
        if (accel__parse_nonneg(s, &v) != 0 || v < 1) {
            snprintf(err, cap, "ACCELERATE_GRADIENT_ACCUMULATION_STEPS=\"%s\" is not a positive integer", s);
            { *out = d; if (out_launcher) *out_launcher = launcher; return ACCEL_ERR_ENVIRONMENT; }
        }
        d.gradient_accumulation_steps = (int)v;
    }
    if (d.gradient_accumulation_steps == 0) d.gradient_accumulation_steps = 1;

    s = getenv("ACCELERATE_USE_CPU");
    if (s && *s) {
        b = accel_parse_bool(s);
        if (b < 0) {
            snprintf(err, cap, "ACCELERATE_USE_CPU=\"%s\" is not a boolean (y/yes/t/true/on/1 or n/no/f/false/off/0)",
                     s);
            {
                *out = d;
                if (out_launcher) *out_launcher = launcher;
                return ACCEL_ERR_ENVIRONMENT;
            }
        }
        if (b) d.cpu = 1;
    }
    s = getenv("ACCELERATE_DEBUG_MODE");
    if (s && *s) {
        b = accel_parse_bool(s);
        if (b < 0) {
            snprintf(err, cap,
                     "ACCELERATE_DEBUG_MODE=\"%s\" is not a boolean (y/yes/t/true/on/1 or n/no/f/false/off/0)", s);
            {
                *out = d;
                if (out_launcher) *out_launcher = launcher;
                return ACCEL_ERR_ENVIRONMENT;
            }
        }
        if (b) d.debug = 1;
    }
    if (d.cpu) d.cpu = 1;
    if (d.debug) d.debug = 1;
    if (d.no_sync_with_dataloader) d.no_sync_with_dataloader = 1;
    if (d.no_adjust_scheduler) d.no_adjust_scheduler = 1;
    if (d.no_step_scheduler_with_optimizer) d.no_step_scheduler_with_optimizer = 1;
    if (d.sync_each_batch) d.sync_each_batch = 1;
    if (d.split_batches) d.split_batches = 1;
    if (d.no_mpi) d.no_mpi = 1;
    {
        static const char *const tenv[2] = {"ACCEL_COLLECTIVE_TIMEOUT", "ACCEL_TRAIN_TIMEOUT"};
        int *field[2], i;
        field[0] = &d.collective_timeout_ms;
        field[1] = &d.train_timeout_ms;
        for (i = 0; i < 2; ++i) {
            char *end = NULL;
            double v;
            if (*field[i] < 0) {
                snprintf(err, cap, "desc.%s=%d must be >= 0", i ? "train_timeout_ms" : "collective_timeout_ms",
                         *field[i]);
                { *out = d; if (out_launcher) *out_launcher = launcher; return ACCEL_ERR_INVALID_ARGUMENT; }
            }
            s = getenv(tenv[i]);
            if (*field[i] || !s || !*s) continue; /* the desc wins over the environment */
            errno = 0;
            v = strtod(s, &end);
            if (end == s || *end || errno || !(v > 0) || v > 2e6) {
                snprintf(err, cap, "%s=\"%.100s\" is not a number of seconds in (0, 2000000]", tenv[i], s);
                { *out = d; if (out_launcher) *out_launcher = launcher; return ACCEL_ERR_ENVIRONMENT; }
            }
            *field[i] = v * 1000.0 < 1.0 ? 1 : (int)(v * 1000.0 + 0.5);
        }
    }
    if (d.collective_timeout_ms == 0) d.collective_timeout_ms = 1800000;
    if (d.log_level == ACCEL_LOG_DEFAULT) d.log_level = accel__env_log_level();
    if (!d.project_dir) d.project_dir = ".";
    if (!d.logging_dir) d.logging_dir = d.project_dir;
    *out = d;
    if (out_launcher) *out_launcher = launcher;
    return ACCEL_OK;
}

/* ------------------------------------------------------------------------------- 6. the host process group */
/* accel_hostgroup.h's implementation: after the environment it reads, before accel_init, which joins the group */
#include "accel_hostgroup.h"

/* --------------------------------------------------------------------------------- 7. init / shutdown */
static int accel__select_device(accel *acc) {
#ifdef ACCEL_WITH_CUDA
    int count = 0;
    cudaError_t e;
    if (acc->desc.cpu) return -1;
    e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count <= 0) {
        (void)cudaGetLastError();
        accel_log(acc, ACCEL_LOG_INFO, "no CUDA device (%s): using the CPU",
                  e != cudaSuccess ? cudaGetErrorString(e) : "count 0");
        return -1;
    }
    return acc->local_process_index % count;
#else
    (void)acc;
    return -1;
#endif
}

/* What every rank must agree on at init (field names as the desc/Accelerator calls them). */
static accel_result accel__init_agreement(accel *acc, accel_result local) {
    static const char *names[] = {"num_processes", "mixed_precision", "gradient_accumulation_steps", "library version",
                                  "split_batches"};
    int64_t v[5];
    v[0] = acc->num_processes;
    v[1] = (int64_t)acc->mixed_precision;
    v[2] = acc->gradient_accumulation_steps;
    v[3] = ACCEL_VERSION_NUMBER;
    v[4] = acc->desc.split_batches ? 1 : 0;
    return accel__agree_values(acc, local, "accel_init", names, v, 5);
}

#if defined(ACCEL_WITH_MPI) && !defined(_WIN32)
#include <signal.h>
static void accel__sig_note_mpi(const struct sigaction *before); /* PREEMPTION's state, below */
#endif
ACCEL__DEF accel_result accel_init(accel *acc, const accel_desc *desc) {
    char err[ACCEL_ERROR_CAPACITY];
    accel_desc d;
    accel_launcher launcher = ACCEL_LAUNCHER_NONE;
    accel_result r;
    const char *s;
    if (!acc) return accel__fail(NULL, ACCEL_ERR_INVALID_ARGUMENT, __FILE__, __LINE__, "accel_init: acc is NULL");
    memset(acc, 0, sizeof *acc);
    acc->device = -1;
    acc->remainder = -1;
    acc->sync_gradients = 1;
    memset(&d, 0, sizeof d);
    r = accel_resolve_config(desc, &d, &launcher, err, sizeof err);
    if (desc) { /* enough of the desc to report a failed configuration through the user's logger */
        acc->desc.log_fn = desc->log_fn;
        acc->desc.log_user_data = desc->log_user_data;
        acc->desc.log_level = ((int)desc->log_level >= 0 && (int)desc->log_level <= (int)ACCEL_LOG_DEBUG)
                                      ? desc->log_level
                                      : ACCEL_LOG_DEFAULT;
        if ((!desc->host_allocator.alloc) == (!desc->host_allocator.free))
            acc->desc.host_allocator = desc->host_allocator;
    }
    if (r == ACCEL_OK) acc->desc = d;
    acc->impl = (struct accel__impl *)accel_host_alloc(acc, sizeof(struct accel__impl));
    if (!acc->impl)
        return ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "accel_init: %zu bytes", sizeof(struct accel__impl));
    memset(acc->impl, 0, sizeof *acc->impl);
    if (r == ACCEL_OK && d.host_allocator.alloc) { /* stb_ds has no context: the newest Accelerator's allocator */
        accel__g_stbds_alloc = d.host_allocator;
        accel__g_stbds_owner = acc;
    }
    acc->launcher = launcher;
    /* the layout is known even when a later part of the configuration failed: the process still joins its group */
    acc->num_processes = d.num_processes > 0 ? d.num_processes : 1;
    acc->process_index = d.num_processes > 0 ? d.process_index : 0;
    acc->local_process_index = d.num_processes > 0 ? d.local_process_index : 0;
    acc->local_num_processes = d.num_processes > 0 ? d.local_num_processes : 1;

#ifdef ACCEL_WITH_MPI
    /* Join MPI even when the local config failed, so the failure can be made collective instead of a hang. */
    {
        int inited = 0, finalized = 0, want, mpi_env, slurm_pmi, unfit;
        MPI_Initialized(&inited);
        MPI_Finalized(&finalized);
#if defined(OPEN_MPI) && OPEN_MPI
#define ACCEL__SRUN_MPI "--mpi=pmix (this build's MPI is Open MPI)"
#elif defined(MPICH_VERSION) || defined(MPICH)
#define ACCEL__SRUN_MPI "--mpi=pmi2 (this build's MPI is MPICH)"
#else
#define ACCEL__SRUN_MPI "--mpi=pmix or --mpi=pmi2 (whichever this build's MPI supports)"
#endif
        /* a failed configuration joins MPI (to fail collectively) only where MPI's own variables say MPI started
           this process: with torchrun's too (launchers that disagree) MPI_Init may abort before the message */
        mpi_env = getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK") ||
                  getenv("MV2_COMM_WORLD_SIZE");
        /* srun's plugin: none (no PMIx/PMI variables), or PMI-2 (Slurm's pmi2) that Open MPI cannot use (≥ 5 has
           no PMI-2 at all; Debian's 4.1 and most builds direct-launch through PMIx only) */
        slurm_pmi = getenv("PMIX_RANK") ? 2 : (getenv("PMI_RANK") || getenv("PMI_FD")) ? 1 : 0;
        unfit = slurm_pmi == 0;
#if defined(OPEN_MPI) && OPEN_MPI
        unfit = slurm_pmi < 2;
#endif
        want = !(desc && desc->no_mpi) && !finalized &&
               (inited || launcher == ACCEL_LAUNCHER_OPENMPI || launcher == ACCEL_LAUNCHER_MPICH ||
                launcher == ACCEL_LAUNCHER_MVAPICH || launcher == ACCEL_LAUNCHER_SLURM ||
                (launcher == ACCEL_LAUNCHER_NONE && r != ACCEL_OK && mpi_env && !getenv("WORLD_SIZE")));
        if (want && !inited && launcher == ACCEL_LAUNCHER_SLURM && unfit && acc->num_processes == 1)
            want = 0; /* srun -n 1 without a plugin MPI can use: one process needs no MPI (Open MPI would abort) */
        if (want && !inited && launcher == ACCEL_LAUNCHER_SLURM && unfit) {
            /* MPI_Init would die inside the MPI library (Open MPI) or make every task a job of its own (MPICH) —
               say what to do instead */
            if (slurm_pmi == 0)
                return ACCEL__FAIL(acc, ACCEL_ERR_ENVIRONMENT, "srun started %d tasks without an MPI plugin (no "
                                   "PMIx/PMI variables: srun --mpi=none, or Slurm's MpiDefault=none), so MPI cannot "
                                   "connect them; launch with srun " ACCEL__SRUN_MPI, acc->num_processes);
            return ACCEL__FAIL(acc, ACCEL_ERR_ENVIRONMENT, "srun started %d tasks with its pmi2 plugin (PMI_RANK, no "
                               "PMIX_RANK), which this build's Open MPI cannot connect through; launch with srun "
                               ACCEL__SRUN_MPI, acc->num_processes);
        }
        if (want) {
            int mrc, rank = 0, size = 1;
            if (!inited) {
                int provided = 0;
#if !defined(_WIN32)
                struct sigaction usr1; /* SIGUSR1 before MPI_Init: a change is the MPI library's (MPICH's) */
                int usr1_ok = sigaction(SIGUSR1, NULL, &usr1) == 0;
#endif
                mrc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
                if (mrc != MPI_SUCCESS) return accel__mpi_fail(acc, mrc, "MPI_Init_thread", __FILE__, __LINE__);
                acc->impl->we_initialized_mpi = 1;
#if !defined(_WIN32)
                if (usr1_ok) accel__sig_note_mpi(&usr1);
#endif
            }
            mrc = MPI_Comm_dup(MPI_COMM_WORLD, &acc->impl->comm);
            if (mrc != MPI_SUCCESS) return accel__mpi_fail(acc, mrc, "MPI_Comm_dup", __FILE__, __LINE__);
            acc->impl->comm_valid = 1;
            MPI_Comm_set_errhandler(acc->impl->comm, MPI_ERRORS_RETURN);
            MPI_Comm_rank(acc->impl->comm, &rank);
            MPI_Comm_size(acc->impl->comm, &size);
            if (r == ACCEL_OK && (size != d.num_processes || rank != d.process_index)) {
                /* a singleton MPI under a multi-process launcher (srun without PMI support) would make every
                   process rank 0 of 1: refuse instead */
                if (launcher == ACCEL_LAUNCHER_NONE) {
                    /* MPI was initialized by the user with no launcher variables: MPI is the truth */
                    d.num_processes = size; d.process_index = rank; d.local_process_index = rank;
                    d.local_num_processes = size;
                    acc->desc = d;
                } else {
                    snprintf(err, sizeof err, "MPI says rank %d of %d but the %s environment says rank %d of %d%s",
                             rank, size, accel_launcher_name(launcher), d.process_index, d.num_processes,
                             launcher == ACCEL_LAUNCHER_SLURM && size == 1
                                 ? ": this MPI did not connect through srun's plugin; launch with srun " ACCEL__SRUN_MPI
                                 : "");
                    r = ACCEL_ERR_ENVIRONMENT;
                }
            }
            acc->num_processes = size;
            acc->process_index = rank;
            if (r == ACCEL_OK) {
                acc->local_process_index = d.local_process_index;
                acc->local_num_processes = d.local_num_processes;
            }
            acc->mpi_active = size > 1;
            if (acc->mpi_active) {
                acc->impl->tp = &accel__mpi_transport;
                acc->impl->tp_ctx = &acc->impl->comm;
            }
        }
    }
    if (r == ACCEL_OK && !acc->mpi_active && acc->num_processes > 1 && !(desc && desc->no_mpi) &&
        launcher != ACCEL_LAUNCHER_TORCHRUN && launcher != ACCEL_LAUNCHER_EXPLICIT) {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (finalized) {
            snprintf(err, sizeof err, "launched by %s with %d processes but MPI was already finalized (an earlier "
                     "accel_shutdown finalizes the MPI it initialized: initialize MPI yourself to create several "
                     "Accelerators in one process)", accel_launcher_name(launcher), acc->num_processes);
            r = ACCEL_ERR_STATE;
        }
    }
#endif
    if (r != ACCEL_OK) ACCEL__FAIL(acc, r, "%s", err);
#if !defined(_WIN32)
    /* joined even when this rank's own setup failed: the init agreement then tells the others */
    if (acc->num_processes > 1 && !acc->mpi_active &&
        (launcher == ACCEL_LAUNCHER_TORCHRUN || launcher == ACCEL_LAUNCHER_SLURM)) {
        accel_result sr = accel__store_start(acc);
        if (sr != ACCEL_OK) return r != ACCEL_OK ? r : sr;
    }
#endif

    if (r == ACCEL_OK) {
        acc->mixed_precision = d.mixed_precision;
        acc->gradient_accumulation_steps = d.gradient_accumulation_steps;
        acc->debug = d.debug;
        acc->stream = d.stream;
        acc->is_main_process = acc->process_index == 0;
        acc->is_local_main_process = acc->local_process_index == 0;
        s = getenv("MASTER_ADDR");
        if (s) snprintf(acc->master_addr, sizeof acc->master_addr, "%s", s);
        acc->master_port = 29500;
        s = getenv("MASTER_PORT");
        if (s && *s) {
            long v = 0;
            if (accel__parse_nonneg(s, &v) != 0 || v < 1 || v > 65535)
                r = ACCEL__FAIL(acc, ACCEL_ERR_ENVIRONMENT, "MASTER_PORT=\"%s\" is not a TCP port", s);
            else acc->master_port = (int)v;
        }
    }
    if (r == ACCEL_OK) {
        acc->device = accel__select_device(acc);
#ifdef ACCEL_WITH_CUDA
        if (acc->device >= 0) {
            cudaError_t e = cudaSetDevice(acc->device);
            if (e != cudaSuccess)
                r = ACCEL__FAIL(acc, ACCEL_ERR_CUDA, "cudaSetDevice(%d) failed: %s", acc->device,
                                cudaGetErrorString(e));
        }
#endif
        acc->distributed_type = acc->num_processes <= 1 ? ACCEL_DISTRIBUTED_NO
                                : acc->device >= 0      ? ACCEL_DISTRIBUTED_MULTI_GPU
                                                        : ACCEL_DISTRIBUTED_MULTI_CPU;
        acc->use_distributed = acc->distributed_type != ACCEL_DISTRIBUTED_NO && acc->num_processes > 1;
    }
    if (acc->num_processes > 1) (void)accel__fr_setup(acc); /* before the first host collective (it cannot fail) */
    if (acc->num_processes > 1 && acc->impl->tp) {
        r = accel__init_agreement(acc, r);
        if (r != ACCEL_OK) return r;
    } else if (r == ACCEL_OK && acc->num_processes > 1) {
        accel_log(acc, ACCEL_LOG_WARN,
                  "%d processes without a host process group (no MPI): the init agreement check is "
                  "skipped",
                  acc->num_processes);
    }
    if (r == ACCEL_OK) {
        acc->last_result = ACCEL_OK;
        acc->last_error[0] = 0;
        acc->impl->err_seq_ok = accel__g_error_seq;
        accel_log(acc, ACCEL_LOG_DEBUG, "rank %d/%d local %d/%d launcher %s device %d host group %s",
                  acc->process_index, acc->num_processes, acc->local_process_index, acc->local_num_processes,
                  accel_launcher_name(launcher), acc->device, accel_host_group_name(acc));
    }
    return r;
}

/* accel_shutdown "after a failure": the host group failed, or this process recorded an error after its last
   successful collective (a trainer that fails on its own records it with accel_set_error first). */
#ifdef ACCEL_WITH_MPI
static int accel__shutdown_failed(const accel *acc) {
    return acc->impl->broken || accel__g_error_seq != acc->impl->err_seq_ok;
}
#endif

static void accel__signals_release(accel *acc); /* section 8 */
ACCEL__DEF void accel_shutdown(accel *acc) {
    if (!acc || !acc->impl) return;
    accel__signals_release(acc); /* first: this run's preemption handlers go back to what they replaced */
#ifdef ACCEL_WITH_MPI
    if (acc->impl->comm_valid) {
        int finalized = 0;
        MPI_Finalized(&finalized);
        /* after a timeout a request may still be pending on the communicator: leave it (freeing could block) */
        if (!finalized && !acc->impl->broken) MPI_Comm_free(&acc->impl->comm);
        acc->impl->comm_valid = 0;
    }
    if (acc->impl->we_initialized_mpi) {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized && acc->num_processes > 1) {
            /* MPI_Finalize waits for every rank to reach it: after a failure the peers may be waiting for this rank in
               a collective until their deadline (30 min), and this rank in MPI_Finalize for them. So every rank meets
               the others in a barrier first: a healthy rank waits as MPI_Finalize would, one after a failure 10 s at
               most (the peers may have failed too and be on their way) and then ends the job (mpirun kills every
               rank, and says so) instead of hanging. */
            MPI_Request q;
            int done = 0, failed = accel__shutdown_failed(acc);
            double until = accel_now() + 10.0;
            if (MPI_Ibarrier(MPI_COMM_WORLD, &q) == MPI_SUCCESS)
                while (!done && (!failed || accel_now() < until) &&
                       MPI_Test(&q, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS)
                    if (!done) accel__sleep_ms(1);
            if (!done && failed) {
                accel_log(acc, ACCEL_LOG_ERROR, "[rank %d] accel_shutdown after a failure (%.300s): the other ranks "
                          "did not reach accel_shutdown within 10 s; aborting the MPI job (MPI_Abort) instead of "
                          "blocking in MPI_Finalize", acc->process_index,
                          acc->impl->broken ? acc->impl->broken_why : acc->last_error);
                if (accel__g_fr_dump) accel__g_fr_dump("accel_shutdown after a failure");
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        }
        if (!finalized) MPI_Finalize();
    }
#endif
#if !defined(_WIN32)
    if (acc->impl->store) {
        accel__store_close(acc, (accel__store *)acc->impl->store);
        acc->impl->store = NULL;
        acc->impl->tp = NULL;
    }
#endif
    if (acc->impl->scratch) {
#ifdef ACCEL_WITH_CUDA
        if (acc->device >= 0) (void)cudaStreamSynchronize((cudaStream_t)acc->stream);
#endif
        accel_device_free(acc, acc->impl->scratch);
        acc->impl->scratch = NULL;
    }
    accel__fr_release(acc);
    if (acc->impl->pinned_scratch) {
        accel_pinned_free(acc, acc->impl->pinned_scratch);
        acc->impl->pinned_scratch = NULL;
    }
    if (accel__g_stbds_owner == acc) {
        accel__g_stbds_owner = NULL;
        memset(&accel__g_stbds_alloc, 0, sizeof accel__g_stbds_alloc);
    }
    accel_host_free(acc, acc->impl);
    acc->impl = NULL;
    acc->mpi_active = 0;
}

/* ------------------------------------------------------------------------------------ 8. process helpers */
ACCEL__DEF int accel_print(accel *acc, const char *fmt, ...) {
    va_list ap;
    int n;
    if (!acc || !fmt || !acc->is_main_process) return 0;
    va_start(ap, fmt);
    n = vprintf(fmt, ap);
    va_end(ap);
    fflush(stdout);
    return n;
}

ACCEL__DEF accel_result accel_main_process_first_begin(accel *acc) {
    accel_result r = accel__need_acc(acc, "main_process_first_begin");
    if (r != ACCEL_OK) return r;
    return acc->is_main_process ? ACCEL_OK : accel_wait_for_everyone(acc);
}
ACCEL__DEF accel_result accel_main_process_first_end(accel *acc) {
    accel_result r = accel__need_acc(acc, "main_process_first_end");
    if (r != ACCEL_OK) return r;
    return acc->is_main_process ? accel_wait_for_everyone(acc) : ACCEL_OK;
}
ACCEL__DEF accel_result accel_local_main_process_first_begin(accel *acc) {
    accel_result r = accel__need_acc(acc, "local_main_process_first_begin");
    if (r != ACCEL_OK) return r;
    return acc->is_local_main_process ? ACCEL_OK : accel_wait_for_everyone(acc);
}
ACCEL__DEF accel_result accel_local_main_process_first_end(accel *acc) {
    accel_result r = accel__need_acc(acc, "local_main_process_first_end");
    if (r != ACCEL_OK) return r;
    return acc->is_local_main_process ? accel_wait_for_everyone(acc) : ACCEL_OK;
}

ACCEL__DEF int accel_on_main_process(const accel *acc) {
    return acc && (acc->is_main_process || !acc->use_distributed);
}
ACCEL__DEF int accel_on_local_main_process(const accel *acc) {
    return acc && (acc->is_local_main_process || !acc->use_distributed);
}
ACCEL__DEF int accel_on_process(const accel *acc, int i) {
    return acc && (acc->process_index == i || !acc->use_distributed);
}
ACCEL__DEF int accel_on_local_process(const accel *acc, int i) {
    return acc && (acc->local_process_index == i || !acc->use_distributed);
}
ACCEL__DEF int accel_on_last_process(const accel *acc) {
    return acc && (acc->process_index == acc->num_processes - 1 || !acc->use_distributed);
}

ACCEL__DEF void accel_set_trigger(accel *acc) {
    if (acc) acc->trigger = 1;
}
/* A flag of some rank made every rank's: *v (this rank's) becomes op over the ranks, with one small host all-reduce.
   check_trigger and should_stop are this call. */
static accel_result accel__agree_flag(accel *acc, const char *what, const void *out, int64_t *v, accel_host_op op) {
    accel_result r = accel__need_group(acc, what);
    if (r != ACCEL_OK) return r;
    if (!out) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: the output pointer is NULL", what);
    return accel_host_allreduce_i64(acc, v, 1, op);
}
ACCEL__DEF accel_result accel_check_trigger(accel *acc, int *fired) {
    int64_t v = acc ? acc->trigger : 0;
    accel_result r = accel__agree_flag(acc, "check_trigger", fired, &v, ACCEL_HOST_SUM);
    if (r != ACCEL_OK) return r;
    *fired = v >= 1;
    if (*fired) acc->trigger = 0;
    return ACCEL_OK;
}

/* Preemption. A signal's disposition belongs to the process, so this state is process-wide: slot 0 is SIGTERM, slot 1
   SIGUSR1. accel's one handler serves both uses of SIGUSR1 — the stop flag (accel_preemption_install) and the flight
   recorder's dump (accel_collectives.h, through accel__signal_dump) — so neither hides the other, whichever is set up
   first. The handler, in this order: (1) stores the signal in the stop flag when the slot stops (a volatile
   sig_atomic_t: the only thing a handler may portably write), (2) SIGUSR1: the flight recorder's dump (its writer
   uses async-signal-safe calls only), (3) calls the handler it replaced (a program's own, plain or SA_SIGINFO; not
   SIG_DFL, whose action — ending the process — is what it replaces, nor SIG_IGN). accel_shutdown of the Accelerator
   that installed a use removes it; with no use left the replaced disposition is restored. */
#if !defined(_WIN32)
#include <signal.h>
static volatile sig_atomic_t accel__g_stop_sig;                /* the stopping signal that arrived; 0: none */
static volatile sig_atomic_t accel__g_sig_stops[2];            /* the slot's signal sets accel__g_stop_sig */
static void (*volatile accel__g_sig_dump)(const char *reason); /* SIGUSR1's flight recorder dump; NULL: none */
static struct sigaction accel__g_sig_prev[2];                  /* what accel's handler replaced (chained, restored) */
static int accel__g_sig_ours[2];                               /* accel's handler is (or was left) installed */
static accel *accel__g_sig_stop_owner, *accel__g_sig_dump_owner;
static int accel__g_stop_logged;
static struct sigaction accel__g_sig_mpi_usr1; /* the SIGUSR1 handler MPI_Init installed (accel's call of it) */
static int accel__g_sig_mpi_usr1_set;
static const int accel__g_sig_num[2] = {SIGTERM, SIGUSR1};
static const char *const accel__g_sig_name[2] = {"SIGTERM", "SIGUSR1"};

static void accel__on_signal(int sig, siginfo_t *info, void *uc) {
    int saved = errno, k = sig == SIGUSR1;
    void (*dump)(const char *) = accel__g_sig_dump;
    const struct sigaction *prev = &accel__g_sig_prev[k];
    if (accel__g_sig_stops[k]) accel__g_stop_sig = sig;
    if (k && dump) dump("SIGUSR1");
    if (prev->sa_flags & SA_SIGINFO) {
        if (prev->sa_sigaction) prev->sa_sigaction(sig, info, uc);
    } else if (prev->sa_handler != SIG_DFL && prev->sa_handler != SIG_IGN) {
        prev->sa_handler(sig);
    }
    errno = saved;
}
static int accel__sig_is_ours(const struct sigaction *a) {
    return (a->sa_flags & SA_SIGINFO) && a->sa_sigaction == accel__on_signal;
}
/* accel's handler on slot k (0, or -1 with errno). The replaced disposition is read before ours goes in, so a signal
   arriving in between never sees a half-written one. */
static int accel__sig_claim(int k) {
    struct sigaction sa;
    if (accel__g_sig_ours[k]) return 0;
    if (sigaction(accel__g_sig_num[k], NULL, &accel__g_sig_prev[k]) != 0) return -1;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = accel__on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_SIGINFO | SA_RESTART; /* accel's own waits retry on EINTR; SA_RESTART spares the program's */
    if (sigaction(accel__g_sig_num[k], &sa, NULL) != 0) return -1;
    accel__g_sig_ours[k] = 1;
    return 0;
}
/* Slot k without a use: the replaced disposition back — unless another handler has since replaced accel's (it may
   chain to accel's, which then only passes the signal on: left in place, with a WARN). */
static void accel__sig_unclaim(accel *acc, int k) {
    struct sigaction cur;
    if (!accel__g_sig_ours[k] || accel__g_sig_stops[k] || (k == 1 && accel__g_sig_dump)) return;
    if (sigaction(accel__g_sig_num[k], NULL, &cur) == 0 && !accel__sig_is_ours(&cur)) {
        accel_log(acc, ACCEL_LOG_WARN, "%s: its handler was replaced after accel installed its own; left as it is (a "
                  "handler installed over accel's should chain to it)", accel__g_sig_name[k]);
        return;
    }
    if (sigaction(accel__g_sig_num[k], &accel__g_sig_prev[k], NULL) == 0) accel__g_sig_ours[k] = 0;
    else accel_log(acc, ACCEL_LOG_WARN, "%s: restoring its handler failed: %s", accel__g_sig_name[k], strerror(errno));
}
static int accel__sig_same(const struct sigaction *a, const struct sigaction *b) {
    if ((a->sa_flags & SA_SIGINFO) != (b->sa_flags & SA_SIGINFO)) return 0;
    return (a->sa_flags & SA_SIGINFO) ? a->sa_sigaction == b->sa_sigaction : a->sa_handler == b->sa_handler;
}
/* accel_init, right after its own MPI_Init: a SIGUSR1 disposition that MPI_Init changed is the MPI library's, not the
   program's (MPICH 4 installs a plain handler for its failure notices and MPI_Finalize leaves it). */
#if defined(ACCEL_WITH_MPI)
static void accel__sig_note_mpi(const struct sigaction *before) {
    struct sigaction cur;
    if (sigaction(SIGUSR1, NULL, &cur) != 0 || accel__sig_same(&cur, before) || accel__sig_is_ours(&cur)) return;
    accel__g_sig_mpi_usr1 = cur;
    accel__g_sig_mpi_usr1_set = 1;
}
#endif
/* The flight recorder's SIGUSR1 dump (accel_collectives.h), until acc's accel_shutdown: through accel's handler when
   SIGUSR1 has the default disposition, accel's handler already, or the MPI library's from the MPI_Init accel called
   (accel's handler then chains to it, as to any handler it replaces); a program's own SIGUSR1 handler is left alone.
   Without the MPI library's case a recorder set up under MPICH never dumped on SIGUSR1. */
ACCEL__PRIVATE void accel__signal_dump(accel *acc, void (*fn)(const char *reason)) {
    struct sigaction cur;
    if (!accel__g_sig_ours[1]) {
        int free_ = 0;
        if (sigaction(SIGUSR1, NULL, &cur) != 0) return;
        free_ = !(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == SIG_DFL;
        if (!free_ && !(accel__g_sig_mpi_usr1_set && accel__sig_same(&cur, &accel__g_sig_mpi_usr1))) return;
        if (accel__sig_claim(1) != 0) return;
    }
    accel__g_sig_dump = fn;
    accel__g_sig_dump_owner = acc;
}
/* accel_shutdown: the uses acc installed go, and the dispositions nobody uses any more are restored. */
static void accel__signals_release(accel *acc) {
    int k;
    if (accel__g_sig_stop_owner == acc) { /* its stop was this run's: the next Accelerator starts unstopped */
        accel__g_sig_stops[0] = accel__g_sig_stops[1] = 0;
        accel__g_stop_sig = 0;
        accel__g_stop_logged = 0;
        accel__g_sig_stop_owner = NULL;
    }
    if (accel__g_sig_dump_owner == acc) {
        accel__g_sig_dump = NULL;
        accel__g_sig_dump_owner = NULL;
    }
    for (k = 0; k < 2; ++k) accel__sig_unclaim(acc, k);
}
#else
static void accel__signals_release(accel *acc) { (void)acc; }
#endif

ACCEL__DEF accel_result accel_preemption_install(accel *acc, int signals) {
    accel_result r = accel__need_acc(acc, "preemption_install");
    if (r != ACCEL_OK) return r;
    if (!acc->impl)
        return ACCEL__FAIL(acc, ACCEL_ERR_STATE, "preemption_install: the Accelerator is not initialized (accel_init) "
                           "or was shut down");
    if (signals <= 0 || (signals & ~ACCEL_PREEMPT_SIGNALS))
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "preemption_install: signals %d is not a nonempty set of "
                           "ACCEL_PREEMPT_SIGTERM (1) and ACCEL_PREEMPT_SIGUSR1 (2)", signals);
#if defined(_WIN32)
    return ACCEL__FAIL(acc, ACCEL_ERR_UNSUPPORTED, "preemption_install: no POSIX signals on this platform");
#else
    {
        int k, claimed[2] = {0, 0};
        if (accel__g_sig_stop_owner && accel__g_sig_stop_owner != acc)
            return ACCEL__FAIL(acc, ACCEL_ERR_STATE, "preemption_install: another Accelerator of this process "
                               "installed them (signals belong to the process); shut it down first");
        for (k = 0; k < 2; ++k) {
            if (!(signals & (1 << k)) || accel__g_sig_ours[k]) continue;
            if (accel__sig_claim(k) != 0) {
                int e = errno;
                if (claimed[0]) accel__sig_unclaim(acc, 0); /* nothing half-applied */
                return ACCEL__FAIL(acc, ACCEL_ERR_UNSUPPORTED, "preemption_install: sigaction(%s): %s",
                                   accel__g_sig_name[k], strerror(e));
            }
            claimed[k] = 1;
        }
        accel__g_sig_stop_owner = acc;
        for (k = 0; k < 2; ++k)
            if (signals & (1 << k)) accel__g_sig_stops[k] = 1;
        accel_log(acc, ACCEL_LOG_INFO, "preemption: %s%s%s stop the run at the next accel_should_stop",
                  (signals & 1) ? "SIGTERM" : "", signals == 3 ? " and " : "", (signals & 2) ? "SIGUSR1" : "");
        return ACCEL_OK;
    }
#endif
}

ACCEL__DEF accel_result (accel_should_stop)(accel *acc, int *stop) {
    int64_t v = 0;
    accel_result r;
#if !defined(_WIN32)
    v = accel__g_stop_sig; /* sticky: once set, every later call agrees on stopping too */
#endif
    r = accel__agree_flag(acc, "should_stop", stop, &v, ACCEL_HOST_MAX);
    if (r != ACCEL_OK) return r;
    *stop = (int)v;
#if !defined(_WIN32)
    if (v && !accel__g_stop_logged) {
        accel__g_stop_logged = 1;
        accel_log(acc, ACCEL_LOG_INFO, "[rank %d] stopping: %s reached %s", acc->process_index,
                  v == SIGTERM ? "SIGTERM" : v == SIGUSR1 ? "SIGUSR1" : "a signal",
                  accel__g_stop_sig ? "this process" : "another rank");
    }
#endif
    return ACCEL_OK;
}

/* ------------------------------------------------------------- 9. gradient accumulation, dataloader stack */
ACCEL__DEF void accel_accumulate_begin(accel *acc) {
    int n;
    if (!acc) return;
    n = acc->gradient_accumulation_steps > 0 ? acc->gradient_accumulation_steps : 1;
    if (!acc->desc.no_sync_with_dataloader && acc->end_of_dataloader) {
        acc->step = 0;
        acc->sync_gradients = 1;
    } else {
        acc->step += 1;
        acc->sync_gradients = (acc->step % n) == 0;
    }
}
ACCEL__DEF void accel_accumulate_end(accel *acc) { (void)acc; }
ACCEL__DEF int accel_should_reduce(const accel *acc) {
    return acc && (acc->sync_gradients || (acc->use_distributed && acc->desc.sync_each_batch));
}
ACCEL__DEF float accel_loss_divisor(const accel *acc) {
    return (acc && acc->gradient_accumulation_steps > 0) ? (float)acc->gradient_accumulation_steps : 1.0f;
}
ACCEL__DEF void accel_optimizer_step_done(accel *acc, int skipped) {
    if (!acc || !acc->sync_gradients) return;
    acc->optimizer_step_was_skipped = skipped ? 1 : 0;
    if (!skipped) acc->optimizer_steps++;
    if (acc->impl) acc->impl->stepped = 1; /* train_timeout_ms from now on */
}
ACCEL__DEF int accel_scheduler_steps(accel *acc, int64_t total_steps) {
    int n, i, taken = 0;
    if (!acc) return 0;
    if (acc->desc.no_step_scheduler_with_optimizer) {
        acc->scheduler_steps++; /* Accelerate steps unconditionally here: no total_steps guard */
        return 1;
    } else if (!acc->sync_gradients) {
        if (!acc->desc.no_adjust_scheduler) acc->scheduler_adjusted_steps++;
        return 0;
    } else if (acc->optimizer_step_was_skipped) {
        return 0;
    } else {
        n = acc->desc.split_batches ? 1 : acc->num_processes;
    }
    for (i = 0; i < n; ++i) {
        /* torch's _step_count is 1 + every step() + every adjust_scheduler bump; Accelerate steps while it is
           <= total_steps */
        if (total_steps > 0 && acc->scheduler_steps + acc->scheduler_adjusted_steps >= total_steps) break;
        acc->scheduler_steps++;
        taken++;
    }
    return taken;
}

ACCEL__DEF accel_result accel_free_memory(accel *acc) {
    if (!acc || !acc->impl) return ACCEL__FAIL(acc, ACCEL_ERR_STATE, "free_memory: the Accelerator is not initialized");
    if (acc->impl->scratch) {
#ifdef ACCEL_WITH_CUDA
        if (acc->device >= 0) {
            cudaError_t e = cudaStreamSynchronize((cudaStream_t)acc->stream); /* kernels may still read it */
            if (e != cudaSuccess)
                return ACCEL__FAIL(acc, ACCEL_ERR_CUDA, "free_memory: cudaStreamSynchronize: %s (nothing freed)",
                                   cudaGetErrorString(e));
        }
#endif
        accel_device_free(acc, acc->impl->scratch);
        acc->impl->scratch = NULL;
        acc->impl->scratch_bytes = 0;
    }
    acc->step = 0;
    return ACCEL_OK;
}
ACCEL__DEF accel_result accel_clear(accel *acc) { return accel_free_memory(acc); }

static void accel__loaders_mirror(accel *acc) {
    struct accel__impl *im = acc->impl;
    if (im && im->nloaders > 0) {
        acc->end_of_dataloader = im->loaders[im->nloaders - 1].end_of_dataloader;
        acc->remainder = im->loaders[im->nloaders - 1].remainder;
    } else {
        acc->end_of_dataloader = 0;
        acc->remainder = -1;
    }
}
static int accel__loader_find(const accel *acc, const void *loader) {
    int i;
    if (!acc->impl) return -1;
    for (i = acc->impl->nloaders - 1; i >= 0; --i)
        if (acc->impl->loaders[i].key == loader) return i;
    return -1;
}
ACCEL__DEF void accel_dataloader_end(accel *acc, const void *loader) {
    int i;
    if (!acc || !acc->impl || (i = accel__loader_find(acc, loader)) < 0) return;
    memmove(&acc->impl->loaders[i], &acc->impl->loaders[i + 1],
            sizeof(accel__loader_entry) * (size_t)(acc->impl->nloaders - i - 1));
    acc->impl->nloaders--;
    accel__loaders_mirror(acc);
}
ACCEL__DEF accel_result accel_dataloader_begin(accel *acc, const void *loader, int remainder) {
    accel__loader_entry *e;
    accel_result r = accel__need_acc(acc, "dataloader_begin");
    if (r != ACCEL_OK) return r;
    if (!acc->impl) return ACCEL__FAIL(acc, ACCEL_ERR_STATE, "dataloader_begin: the Accelerator is not initialized");
    if (!loader) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "dataloader_begin: loader is NULL");
    accel_dataloader_end(acc, loader);
    if (acc->impl->nloaders >= ACCEL__MAX_LOADERS)
        return ACCEL__FAIL(acc, ACCEL_ERR_STATE,
                           "more than %d dataloaders are being iterated at once (end abandoned ones: "
                           "accel_data_shard_end / accel_dataloader_end)",
                           ACCEL__MAX_LOADERS);
    e = &acc->impl->loaders[acc->impl->nloaders++];
    e->key = loader;
    e->end_of_dataloader = 0;
    e->remainder = remainder < -1 ? -1 : remainder;
    accel__loaders_mirror(acc);
    return ACCEL_OK;
}
ACCEL__DEF void accel_dataloader_last_batch(accel *acc, const void *loader) {
    int i;
    if (!acc || (i = accel__loader_find(acc, loader)) < 0) return;
    acc->impl->loaders[i].end_of_dataloader = 1;
    accel__loaders_mirror(acc);
}

/* ----------------------------------------------------------------------------------- 10. RNG, saved state */
ACCEL__DEF void accel_set_seed(accel *acc, uint64_t seed, int device_specific) {
    if (!acc) return;
    acc->rng.seed = seed + (device_specific ? (uint64_t)acc->process_index : 0u);
    acc->rng.offset = 0;
}
ACCEL__DEF accel_rng_state accel_get_rng_state(const accel *acc) {
    accel_rng_state z = {0, 0};
    return acc ? acc->rng : z;
}
ACCEL__DEF void accel_set_rng_state(accel *acc, accel_rng_state state) {
    if (acc) acc->rng = state;
}
ACCEL__DEF accel_result accel_synchronize_rng_state(accel *acc) {
    accel_rng_state s;
    accel_result r = accel__need_group(acc, "synchronize_rng_state");
    if (r != ACCEL_OK) return r;
    s = acc->rng;
    r = accel_host_broadcast(acc, &s, sizeof s, 0);
    if (r == ACCEL_OK) acc->rng = s;
    return r;
}
/* The host stream uses stream id 0xffffffff'ffffffff so it never collides with kernels' per-purpose streams. */
ACCEL__DEF void accel_rng_next4(accel *acc, uint32_t out[4]) {
    if (!acc || !out) return;
    accel_rng_draw4(acc->rng.seed, ~(uint64_t)0, acc->rng.offset++, out);
}

typedef struct accel__saved {
    int32_t num_processes, process_index, step, sync_gradients, skipped, accum;
    int64_t optimizer_steps, scheduler_steps, scheduler_adjusted_steps;
    accel_rng_state rng;
} accel__saved;

ACCEL__DEF accel_result accel_state_save(accel *acc, void *buf, size_t cap, size_t *size) {
    unsigned char *p = (unsigned char *)buf;
    accel_result r = accel__need_acc(acc, "accel_state_save");
    if (r != ACCEL_OK) return r;
    if (!size) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_state_save: size is NULL");
    *size = ACCEL_STATE_BYTES;
    if (!buf || cap < ACCEL_STATE_BYTES) return ACCEL_OK;
    memset(p, 0, ACCEL_STATE_BYTES);
    memcpy(p, "ACST", 4);
    accel__put_u32(p + 4, 1);
    accel__put_u32(p + 8, (uint32_t)acc->num_processes);
    accel__put_u32(p + 12, (uint32_t)acc->process_index);
    accel__put_u32(p + 16, (uint32_t)acc->step);
    accel__put_u32(p + 20, (uint32_t)acc->sync_gradients);
    accel__put_u32(p + 24, (uint32_t)acc->optimizer_step_was_skipped);
    accel__put_u32(p + 28, (uint32_t)acc->gradient_accumulation_steps);
    accel__put_u64(p + 32, (uint64_t)acc->optimizer_steps);
    accel__put_u64(p + 40, (uint64_t)acc->scheduler_steps);
    accel__put_u64(p + 48, (uint64_t)acc->scheduler_adjusted_steps);
    accel__put_u64(p + 56, acc->rng.seed);
    accel__put_u64(p + 64, acc->rng.offset);
    return ACCEL_OK;
}

static accel_result accel__state_parse(accel *acc, const void *buf, size_t size, int which, accel__saved *out) {
    const unsigned char *p = (const unsigned char *)buf;
    char tag[40]; /* "training state <which>", or without a number (which < 0: accel_state_decode) */
    int k;
    if (which >= 0) snprintf(tag, sizeof tag, "training state %d", which);
    else snprintf(tag, sizeof tag, "training state");
    if (!buf || size != ACCEL_STATE_BYTES || memcmp(p, "ACST", 4) != 0)
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT,
                           "%s: not an accel state (%zu bytes, want %d starting \"ACST\")", tag, size,
                           ACCEL_STATE_BYTES);
    if (accel__get_u32(p + 4) != 1)
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%s: unsupported version %u (this build reads 1)",
                           tag, (unsigned)accel__get_u32(p + 4));
    out->num_processes = (int32_t)accel__get_u32(p + 8);
    out->process_index = (int32_t)accel__get_u32(p + 12);
    out->step = (int32_t)accel__get_u32(p + 16);
    out->sync_gradients = (int32_t)accel__get_u32(p + 20);
    out->skipped = (int32_t)accel__get_u32(p + 24);
    out->accum = (int32_t)accel__get_u32(p + 28);
    out->optimizer_steps = (int64_t)accel__get_u64(p + 32);
    out->scheduler_steps = (int64_t)accel__get_u64(p + 40);
    out->scheduler_adjusted_steps = (int64_t)accel__get_u64(p + 48);
    out->rng.seed = accel__get_u64(p + 56);
    out->rng.offset = accel__get_u64(p + 64);
    for (k = 72; k < ACCEL_STATE_BYTES; ++k)
        if (p[k])
            return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%s: corrupt (reserved bytes are not zero)", tag);
    if (out->num_processes < 1 || out->process_index < 0 || out->process_index >= out->num_processes || out->step < 0 ||
        (out->sync_gradients & ~1) || (out->skipped & ~1) || out->accum < 1 || out->optimizer_steps < 0 ||
        out->scheduler_steps < 0 || out->scheduler_adjusted_steps < 0)
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT,
                           "%s: corrupt (rank %d of %d, step %d, counters %lld/%lld/%lld)", tag,
                           (int)out->process_index, (int)out->num_processes, (int)out->step,
                           (long long)out->optimizer_steps, (long long)out->scheduler_steps,
                           (long long)out->scheduler_adjusted_steps);
    return ACCEL_OK;
}

static void accel__state_apply(accel *acc, const accel__saved *s, accel_rng_state rng) {
    acc->step = s->step;
    acc->sync_gradients = s->sync_gradients;
    acc->optimizer_step_was_skipped = s->skipped;
    acc->optimizer_steps = s->optimizer_steps;
    acc->scheduler_steps = s->scheduler_steps;
    acc->scheduler_adjusted_steps = s->scheduler_adjusted_steps;
    acc->rng = rng;
    if (s->accum != acc->gradient_accumulation_steps)
        accel_log(acc, ACCEL_LOG_WARN,
                  "the training state was saved with gradient_accumulation_steps=%d, this run uses %d "
                  "(the step counter inside the window is kept)",
                  (int)s->accum, acc->gradient_accumulation_steps);
}

ACCEL__DEF accel_result accel_state_load(accel *acc, const void *buf, size_t size) {
    accel__saved s;
    accel_result r = accel__need_acc(acc, "accel_state_load");
    if (r != ACCEL_OK) return r;
    r = accel__state_parse(acc, buf, size, acc->process_index, &s);
    if (r != ACCEL_OK) return r;
    if (s.num_processes != acc->num_processes || s.process_index != acc->process_index)
        return ACCEL__FAIL(acc, ACCEL_ERR_MISMATCH, "training state saved by rank %d of %d, this is rank %d of %d (use "
                           "accel_state_load_resharded to resume on another number of processes)", (int)s.process_index,
                           (int)s.num_processes, acc->process_index, acc->num_processes);
    accel__state_apply(acc, &s, s.rng);
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_state_decode(accel *acc, const void *buf, size_t size, accel_state_info *out) {
    accel__saved s;
    accel_result r;
    if (!out) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_state_decode: out is NULL");
    r = accel__state_parse(acc, buf, size, -1, &s);
    if (r != ACCEL_OK) return r;
    out->num_processes = s.num_processes;
    out->process_index = s.process_index;
    out->step = s.step;
    out->sync_gradients = s.sync_gradients;
    out->optimizer_step_was_skipped = s.skipped;
    out->gradient_accumulation_steps = s.accum;
    out->optimizer_steps = s.optimizer_steps;
    out->scheduler_steps = s.scheduler_steps;
    out->scheduler_adjusted_steps = s.scheduler_adjusted_steps;
    out->rng_seed = s.rng.seed;
    out->rng_offset = s.rng.offset;
    return ACCEL_OK;
}

static uint64_t accel__splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* The whole resharded load without side effects: every state validated, the counters (rank 0's) in *base and this
   rank's RNG in *rng (*derived = 1 when re-derived because this rank did not exist in the saving run). */
static accel_result accel__state_prepare(accel *acc, const void *const *states, const size_t *sizes, int count,
                                         accel__saved *base, accel_rng_state *rng, int *derived) {
    accel__saved si;
    accel_result r;
    int i, same = 1, pattern = 1;
    *derived = 0;
    if (!states || !sizes || count < 1)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_state_load_resharded: no states given");
    r = accel__state_parse(acc, states[0], sizes[0], 0, base);
    if (r != ACCEL_OK) return r;
    if (base->num_processes != count || base->process_index != 0)
        return ACCEL__FAIL(acc, ACCEL_ERR_MISMATCH,
                           "training state 0 was saved by rank %d of %d, but %d states were given",
                           (int)base->process_index, (int)base->num_processes, count);
    *rng = base->rng;
    for (i = 1; i < count; ++i) {
        r = accel__state_parse(acc, states[i], sizes[i], i, &si);
        if (r != ACCEL_OK) return r;
        if (si.num_processes != count || si.process_index != i)
            return ACCEL__FAIL(acc, ACCEL_ERR_MISMATCH, "training state %d was saved by rank %d of %d", i,
                               (int)si.process_index, (int)si.num_processes);
        if (si.rng.seed != base->rng.seed || si.rng.offset != base->rng.offset) same = 0;
        if (si.rng.seed != base->rng.seed + (uint64_t)i || si.rng.offset != base->rng.offset) pattern = 0;
        if (i == acc->process_index) *rng = si.rng;
    }
    if (acc->process_index >= count) {
        *derived = 1;
        if (same) *rng = base->rng;
        else if (pattern) {
            rng->seed = base->rng.seed + (uint64_t)acc->process_index;
            rng->offset = base->rng.offset;
        } else {
            int src = acc->process_index % count;
            r = accel__state_parse(acc, states[src], sizes[src], src, &si);
            if (r != ACCEL_OK) return r;
            rng->seed = accel__splitmix64(si.rng.seed ^ (uint64_t)acc->process_index);
            rng->offset = si.rng.offset;
        }
    }
    return ACCEL_OK;
}

/* Validate-only form of accel_state_load_resharded (nothing changes, nothing is logged but errors), so a caller that
   must apply several things all-or-nothing can check this one first. */
ACCEL__PRIVATE accel_result accel__state_check(accel *acc, const void *const *states, const size_t *sizes, int count) {
    accel__saved base;
    accel_rng_state rng = {0, 0};
    int derived;
    accel_result r = accel__need_acc(acc, "accel_state_check");
    if (r != ACCEL_OK) return r;
    return accel__state_prepare(acc, states, sizes, count, &base, &rng, &derived);
}

ACCEL__DEF accel_result accel_state_load_resharded(accel *acc, const void *const *states, const size_t *sizes,
                                                   int count) {
    accel__saved base;
    accel_rng_state rng = {0, 0};
    int derived = 0;
    accel_result r = accel__need_acc(acc, "accel_state_load_resharded");
    if (r != ACCEL_OK) return r;
    r = accel__state_prepare(acc, states, sizes, count, &base, &rng, &derived);
    if (r != ACCEL_OK) return r;
    if (derived)
        accel_log(acc, ACCEL_LOG_INFO, "training state saved on %d processes: rank %d's RNG state re-derived", count,
                  acc->process_index);
    accel__state_apply(acc, &base, rng);
    return ACCEL_OK;
}

/* ------------------------------------------------- 11. sizes (policy 6), PyTorch dtype names,
 * find_executable_batch_size */
/* Locale-independent on purpose (isspace/tolower follow setlocale). */
static int accel__ascii_isspace(int c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
static int accel__ascii_lower(int c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

ACCEL__DEF accel_result accel_parse_size(accel *acc, const char *s, uint64_t *out) {
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
    while (b < e && accel__ascii_isspace((unsigned char)*b)) ++b;
    while (e > b && accel__ascii_isspace((unsigned char)e[-1])) --e;
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
            if (accel__ascii_lower((unsigned char)ue[k]) != units[u][k]) break;
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

ACCEL__DEF accel_dtype accel_dtype_from_torch(const char *s) {
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

struct accel_attempt {
    accel *acc;
    void **mem; /* stb_ds: what the attempt allocated */
    int *kind;  /* stb_ds: 1 host, 2 device, 3 pinned */
};
static void *accel__attempt_alloc(accel_attempt *a, size_t size, int kind) {
    void *p;
    if (!a) return NULL;
    if (accel__arr_reserve((void **)&a->mem, sizeof(void *), 1) != 0 ||
        accel__arr_reserve((void **)&a->kind, sizeof(int), 1) != 0) {
        ACCEL__FAIL(a->acc, ACCEL_ERR_OUT_OF_MEMORY, "find_executable_batch_size: out of memory");
        return NULL;
    }
    p = kind == 1   ? accel_host_alloc(a->acc, size)
        : kind == 2 ? accel_device_alloc(a->acc, size)
                    : accel_pinned_alloc(a->acc, size);
    if (!p) return NULL;
    (void)ACCEL__ARR_PUT(a->mem, p); /* reserved above */
    (void)ACCEL__ARR_PUT(a->kind, kind);
    return p;
}
ACCEL__DEF void *accel_attempt_host_alloc(accel_attempt *a, size_t size) { return accel__attempt_alloc(a, size, 1); }
ACCEL__DEF void *accel_attempt_device_alloc(accel_attempt *a, size_t size) { return accel__attempt_alloc(a, size, 2); }
ACCEL__DEF void *accel_attempt_pinned_alloc(accel_attempt *a, size_t size) { return accel__attempt_alloc(a, size, 3); }
static void accel__attempt_free(accel_attempt *a) {
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
ACCEL__DEF accel_result accel_find_executable_batch_size(accel *acc, const accel_batch_size_desc *desc,
                                                         accel_batch_step_fn step, void *user, int64_t *batch_size) {
    int64_t bs = desc && desc->starting_batch_size ? desc->starting_batch_size : 128;
    if (!step || bs < 0)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                           "find_executable_batch_size: no step function or a negative batch size");
    for (;;) {
        accel_attempt a;
        accel_result r;
        int64_t next;
        if (bs == 0)
            return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY,
                                    "No executable batch size found, reached zero. The last attempt");
        memset(&a, 0, sizeof a);
        a.acc = acc;
        r = step(user, bs, &a);
        accel__attempt_free(&a);
        if (r == ACCEL_OK) {
            if (batch_size) *batch_size = bs;
            return ACCEL_OK;
        }
        if (r != ACCEL_ERR_OUT_OF_MEMORY) return r;
        next = desc && desc->reduce ? desc->reduce(bs, desc->reduce_user) : (int64_t)((double)bs * 0.9);
        if (next < 0 || next >= bs)
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                               "find_executable_batch_size: the reduce function turned %lld into %lld "
                               "(it must give a smaller size, >= 0)",
                               (long long)bs, (long long)next);
        accel_log(acc, ACCEL_LOG_INFO, "find_executable_batch_size: batch size %lld ran out of memory, trying %lld",
                  (long long)bs, (long long)next);
        bs = next;
    }
}

#endif /* ACCEL_IMPLEMENTATION */

/* accel is released under the MIT licence. Copyright (c) 2026 the accel authors. */
