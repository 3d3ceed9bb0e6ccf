/* accel.h — the core of accel, a header-only C99 training runtime.

   accel gives hand-written C/CUDA trainers what Hugging Face Accelerate gives PyTorch users: launcher-agnostic
   distributed setup, sharded sampling, loss scaling, gradient accumulation, collectives and checkpoints, with
   Accelerate's semantics. It is tensor-agnostic: it describes memory; your kernels do the math.

   USAGE
     In exactly one translation unit (a .cu file when you want GPU kernels):
         #define ACCEL_IMPLEMENTATION
         #include "accel.h"            // and the module headers you use
     Everywhere else just #include "accel.h". Link MPI (when ACCEL_WITH_MPI), cudart/NCCL (when used).

         accel acc;
         accel_desc d = {0};                            // zero = default everywhere
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
     3. register gradients with the reducer (accel_collectives.h) and create the loss scaler (accel_amp.h)
                                                        ~ accelerator.prepare(model, optimizer)
     4. multiply the loss by scale / accumulation steps ~ accelerator.backward(loss)
     5. accel_accumulate_begin/_end around each micro-batch; step only on sync steps that were not skipped
                                                        ~ with accelerator.accumulate(model): ...

         accel_data_shard sh;  accel_data_shard_desc dd = {0};   dd.dataset_len = N; dd.batch_size = B; dd.shuffle = 1;
         accel_data_shard_init(&acc, &sh, &dd);                   // sets acc.end_of_dataloader on the last batch
         accel_coll *coll;     accel_coll_create(&acc, NULL, &coll);
         accel_coll_reducer *red;  accel_coll_reducer_create(coll, NULL, &red);
         for (i = 0; i < ngrads; ++i) accel_coll_reducer_add(red, grad[i].ptr, numel[i], ACCEL_F32, grad[i].name, NULL);
         accel_amp_scaler sc;  accel_amp_scaler_init(&acc, &sc, NULL);   // scales only in fp16
         for (epoch = 0; epoch < epochs; ++epoch) {
             accel_data_shard_set_epoch(&sh, epoch);
             while (accel_data_shard_next(&sh, idx, &n) == ACCEL_OK && n > 0) {
                 accel_accumulate_begin(&acc);                    // acc.sync_gradients
                 forward_backward(idx, n, accel_amp_loss_scale(&sc) / accel_loss_divisor(&acc));
                 if (accel_should_reduce(&acc)) accel_coll_reducer_wait(red);   // or grad_ready per bucket
                 if (acc.sync_gradients) {
                     int found_inf = 0;
                     double norm;
                     accel_amp_unscale_and_check(&acc, &sc, grad, ngrads, &found_inf);
                     if (!found_inf) { accel_amp_clip_grad_norm(&acc, grad, ngrads, 1.0, 2.0, 0, &norm);
                                       optimizer_step(); }
                     accel_amp_update(&acc, &sc);
                     accel_optimizer_step_done(&acc, found_inf);
                     lr_position += accel_scheduler_steps(&acc, 0);  // P per taken step, 0 when skipped
                     zero_grad();
                 }
                 accel_accumulate_end(&acc);
             }
         }

   COMPILE-TIME OPTIONS
     ACCEL_IMPLEMENTATION   emit definitions in this TU (stb style; the header may be included again afterwards)
     ACCEL_STATIC           make every definition static (single-TU embedding)
     ACCEL_WITH_MPI         the implementation TU may call MPI (meson defines it when MPI is found)
     ACCEL_WITH_CUDA        the implementation TU may call the CUDA runtime even when compiled by a C compiler
                            (nvcc, i.e. __CUDACC__, implies it); kernels need nvcc
     ACCEL_WITH_NCCL        NCCL is available (used by accel_collectives.h)
     ACCEL_ASSERT(x)        programmer-bug checks (default: assert); never used for runtime errors
     ACCEL_API              decoration of every public declaration
     None of these changes the layout of a public struct.

   ENVIRONMENT (read by accel_init; first match wins for the launcher)
     explicit desc (desc.num_processes > 0)
       → MPI:      OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE} | PMI_RANK,PMI_SIZE (+MPI_LOCALRANKID,
                   MPI_LOCALNRANKS: MPICH/Hydra) | MV2_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE}
       → SLURM:    SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID (+SLURM_NTASKS_PER_NODE / SLURM_TASKS_PER_NODE)
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
     ACCEL_LOG_LEVEL (error|warn|info|debug|0..3)     default logger's level (default warn)

   DIFFERENCES FROM ACCELERATE (deliberate, see SEMANTICS.md "Policy")
     - Multi-process CPU runs are MULTI_CPU whenever P > 1 and no GPU is used; Accelerate additionally requires
       cpu=True and otherwise silently runs P independent single-process jobs.
     - Conflicting launcher environments are an error instead of "first wins".
     - A torchrun-style environment with P > 1 but no MPI has no host process group in the core: host collectives
       (barrier, triggers, the init agreement check) return ACCEL_ERR_UNSUPPORTED. Launch with mpirun/srun, or let
       accel_collectives.h bootstrap NCCL over TCP/file.

   THREADS AND STREAMS
     An accel is used by one thread at a time. Device work is enqueued on acc.stream (user-settable; NULL = the
     legacy default stream). Host collectives synchronize nothing on the device.

   ERRORS
     Every fallible call returns accel_result. accel_last_error(acc) holds the detailed message (what failed,
     file:line of the failing MPI/CUDA/NCCL call, rank); the log callback receives it too. Library code never
     exits. A call that fails changes nothing it was asked to change.
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

#define ACCEL_VERSION_MAJOR 0
#define ACCEL_VERSION_MINOR 1
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
ACCEL_API const char *accel_version_string(void); /* "0.1.0" */

/* ---------------------------------------------------------------------------------------------------- logging */
typedef enum accel_log_level {
    ACCEL_LOG_ERROR = 0,
    ACCEL_LOG_WARN = 1,
    ACCEL_LOG_INFO = 2,
    ACCEL_LOG_DEBUG = 3
} accel_log_level;

typedef void (*accel_log_fn)(void *user_data, accel_log_level level, const char *message);

/* The process-wide logger used when no Accelerator is at hand (and by accel_init before the desc's logger is known).
   fn NULL restores the default (stderr, level from ACCEL_LOG_LEVEL). */
ACCEL_API void accel_set_default_logger(accel_log_fn fn, void *user_data);

/* --------------------------------------------------------------------------------------------------- allocators */
/* Both functions set, or neither (defaults: malloc/free for host, cudaMalloc/cudaFree for device). */
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

/* Tri-state for flags whose default is not "off": 0 = default, ACCEL_ON, ACCEL_OFF. */
#define ACCEL_ON 1
#define ACCEL_OFF (-1)

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

    /* gradient accumulation plugin (Accelerate's GradientAccumulationPlugin) */
    int sync_with_dataloader;          /* ACCEL_ON (default) / ACCEL_OFF */
    int adjust_scheduler;              /* ACCEL_ON (default) / ACCEL_OFF; honoured (Accelerate drops it: policy 3) */
    int sync_each_batch;               /* nonzero: reduce on every micro-batch */
    int step_scheduler_with_optimizer; /* ACCEL_ON (default) / ACCEL_OFF */
    int split_batches;                 /* nonzero: the loader batch size is the global batch size */

    int collective_timeout_ms;         /* 0 → 1800000 (Accelerate's 30 min); used by collectives and the watchdog */
    struct CUstream_st *stream;        /* device work goes here; NULL = default stream */

    accel_log_fn log_fn;               /* NULL → default logger */
    void *log_user_data;
    int log_level;                     /* 0 → ACCEL_LOG_LEVEL env → warn; else accel_log_level + 1 */

    accel_allocator host_allocator;    /* zero → malloc/free */
    accel_allocator device_allocator;  /* zero → cudaMalloc/cudaFree */

    /* project / tracking (used by accel_ckpt.h and the trackers) */
    const char *project_dir;           /* NULL → "." */
    const char *logging_dir;           /* NULL → project_dir */
} accel_desc;

#define ACCEL_ERROR_CAPACITY 1024
#define ACCEL_ADDR_CAPACITY 256

struct accel__impl; /* backend handles (MPI communicator, CUDA state); private */

/* The Accelerator. Fields are readable; change them only through functions. */
typedef struct accel {
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
    int mpi_active;                        /* MPI is the host process group */
    struct CUstream_st *stream;
    accel_desc desc;                       /* the resolved configuration (all defaults filled in) */

    /* gradient accumulation state (Accelerate's GradientState) */
    int sync_gradients;                    /* starts 1 */
    int step;                              /* micro-step counter inside the accumulation window */
    int end_of_dataloader;
    int remainder;                         /* -1 unless a dataloader with a known remainder is active */
    int optimizer_step_was_skipped;
    int64_t optimizer_steps;               /* optimizer steps taken (not skipped) */
    int64_t scheduler_steps;               /* scheduler steps the rule asked for */
    int64_t scheduler_adjusted_steps;      /* non-sync calls counted by adjust_scheduler (torch's _step_count) */

    accel_rng_state rng;                   /* host-side RNG stream; set by accel_set_seed */
    int trigger;                           /* local flag for set_trigger/check_trigger */

    accel_result last_result;
    char last_error[ACCEL_ERROR_CAPACITY];
    struct accel__impl *impl;
} accel;

/* --------------------------------------------------------------------------------------------- lifecycle */
/* Resolves the configuration, joins the process group (initializing MPI when launched under MPI and not yet
   initialized), selects the device and checks on every rank that all ranks agree on world size, precision,
   accumulation steps and library version. On failure every rank returns an error (no rank hangs) and acc holds
   the message; accel_shutdown is still safe to call. */
ACCEL_API accel_result accel_init(accel *acc, const accel_desc *desc);
/* Frees everything and finalizes MPI only if accel_init initialized it. Safe on a failed or zeroed accel. */
ACCEL_API void accel_shutdown(accel *acc);

ACCEL_API const char *accel_last_error(const accel *acc); /* acc NULL → the process-wide last error */

/* Resolve desc + environment without joining anything (what accel_init would do first). out_launcher may be NULL.
   Used by `accel env` and by tests of the detection table. err receives a message on failure. */
ACCEL_API accel_result accel_resolve_config(const accel_desc *desc, accel_desc *out, accel_launcher *out_launcher,
                                            char *err, size_t err_capacity);

/* Accelerate's str_to_bool: 1 true, 0 false, -1 not a boolean. */
ACCEL_API int accel_parse_bool(const char *s);

/* ------------------------------------------------------------------------------------- allocation helpers */
ACCEL_API void *accel_host_alloc(accel *acc, size_t size);    /* NULL acc → malloc; sets the error on failure */
ACCEL_API void accel_host_free(accel *acc, void *ptr);
ACCEL_API void *accel_device_alloc(accel *acc, size_t size);  /* CPU device → host allocator */
ACCEL_API void accel_device_free(accel *acc, void *ptr);

/* --------------------------------------------------------------------------------- host process group */
typedef enum accel_host_op { ACCEL_HOST_SUM = 0, ACCEL_HOST_MAX, ACCEL_HOST_MIN } accel_host_op;

ACCEL_API accel_result accel_wait_for_everyone(accel *acc);  /* barrier; no-op for one process */
/* In-place all-reduce of a few int64 values (flags, counters). */
ACCEL_API accel_result accel_host_allreduce_i64(accel *acc, int64_t *values, int count, accel_host_op op);
ACCEL_API accel_result accel_host_allreduce_f64(accel *acc, double *values, int count, accel_host_op op);
/* Broadcast bytes from root to all. */
ACCEL_API accel_result accel_host_broadcast(accel *acc, void *data, size_t bytes, int root);
/* Every rank contributes `bytes` bytes; out receives num_processes * bytes in rank order. */
ACCEL_API accel_result accel_host_allgather(accel *acc, const void *in, void *out, size_t bytes);

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

/* ------------------------------------------------------------------- gradient accumulation (GradientState) */
/* Call at the start of every micro-batch (Accelerate's `with accelerator.accumulate(model):` entry, _do_sync):
     sync_with_dataloader && end_of_dataloader → step = 0, sync_gradients = 1
     otherwise                                 → step += 1, sync_gradients = (step % gradient_accumulation_steps == 0)
   So the counter restarts at every epoch end and a short final window still syncs on the last batch; with
   sync_with_dataloader off the counter runs across epochs. acc->end_of_dataloader is kept by accel_data.h (or set
   with accel_set_dataloader_state) and must be current *before* this call for the last batch (the data module
   looks one batch ahead, like DataLoaderShard). */
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
/* How many LR-scheduler steps to take now (AcceleratedScheduler.step): step_scheduler_with_optimizer off → 1;
   not a sync step → 0 (with adjust_scheduler the scheduler's internal counter moves: acc->scheduler_adjusted_steps);
   optimizer step skipped → 0; split_batches → 1; else num_processes. total_steps > 0 caps the scheduler's total
   like OneCycleLR (torch's _step_count, which adjust_scheduler bumps too, stays <= total_steps); as in Accelerate the
   cap is not applied when step_scheduler_with_optimizer is off. Adds the result to acc->scheduler_steps. */
ACCEL_API int accel_scheduler_steps(accel *acc, int64_t total_steps);
/* For loaders other than accel_data.h: the innermost dataloader's state (GradientState.end_of_dataloader,
   remainder). remainder = -1 when unknown. */
ACCEL_API void accel_set_dataloader_state(accel *acc, int end_of_dataloader, int remainder);

/* -------------------------------------------------------------------------------------------- RNG state */
/* Accelerate's set_seed: with device_specific the seed becomes seed + process_index. */
ACCEL_API void accel_set_seed(accel *acc, uint64_t seed, int device_specific);
ACCEL_API accel_rng_state accel_get_rng_state(const accel *acc);
ACCEL_API void accel_set_rng_state(accel *acc, accel_rng_state state);
/* Rank 0's state to every rank (Accelerate's synchronize_rng_states). */
ACCEL_API accel_result accel_synchronize_rng_state(accel *acc);
/* Next 4 draws of the host stream (advances offset). */
ACCEL_API void accel_rng_next4(accel *acc, uint32_t out[4]);

/* ------------------------------------------------------------ internals shared with the module headers */
/* Set acc's error (or the process-wide one when acc is NULL), log it, return r. file/line name the failing call. */
ACCEL_API accel_result accel__fail(accel *acc, accel_result r, const char *file, int line, const char *fmt, ...)
    ACCEL__PRINTF(5, 6);
ACCEL_API void accel__log(const accel *acc, accel_log_level level, const char *fmt, ...) ACCEL__PRINTF(3, 4);
/* Backend handle for module implementations: a pointer to the MPI_Comm the process group uses, or NULL. */
ACCEL_API void *accel__mpi_comm(accel *acc);
/* stb_ds hooks that use the process-wide host allocator (define STBDS_REALLOC/STBDS_FREE with these). */
ACCEL_API void *accel__stbds_realloc(void *context, void *ptr, size_t size);
ACCEL_API void accel__stbds_free(void *context, void *ptr);
/* Monotonic seconds. */
ACCEL_API double accel__now(void);

#define ACCEL__FAIL(acc, r, ...) accel__fail((acc), (r), __FILE__, __LINE__, __VA_ARGS__)

#ifdef __cplusplus
}
#endif
#endif /* ACCEL_H_INCLUDED */

/* ========================================================================================== implementation */
#if defined(ACCEL_IMPLEMENTATION) && !defined(ACCEL__CORE_IMPL_DONE)
#define ACCEL__CORE_IMPL_DONE

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <time.h>

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

#ifdef ACCEL_STATIC
#if defined(__GNUC__) || defined(__clang__)
#define ACCEL__DEF static __attribute__((unused)) /* an embedder uses only part of the API */
#else
#define ACCEL__DEF static
#endif
#else
#define ACCEL__DEF
#endif

struct accel__impl {
#ifdef ACCEL_WITH_MPI
    MPI_Comm comm;
    int comm_valid;
    int we_initialized_mpi;
#else
    int unused;
#endif
};

/* ------------------------------------------------------------------------------- process-wide state */
static accel_log_fn accel__g_log_fn = NULL;
static void *accel__g_log_user = NULL;
static char accel__g_last_error[ACCEL_ERROR_CAPACITY];
static accel_allocator accel__g_host_alloc = {NULL, NULL, NULL};

static int accel__env_log_level(void) {
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
    static const char *names[] = {"error", "warn", "info", "debug"};
    (void)user;
    if ((int)level > accel__env_log_level()) return;
    fprintf(stderr, "accel %s: %s\n", names[(int)level & 3], msg);
}

ACCEL__DEF void accel_set_default_logger(accel_log_fn fn, void *user_data) {
    accel__g_log_fn = fn;
    accel__g_log_user = user_data;
}

static void accel__vlog(const accel *acc, accel_log_level level, const char *fmt, va_list ap) {
    char buf[ACCEL_ERROR_CAPACITY + 64];
    accel_log_fn fn = accel__g_log_fn;
    void *user = accel__g_log_user;
    if (acc && acc->desc.log_fn) {
        fn = acc->desc.log_fn;
        user = acc->desc.log_user_data;
        if (acc->desc.log_level > 0 && (int)level > acc->desc.log_level - 1) return;
    }
    vsnprintf(buf, sizeof buf, fmt, ap);
    if (fn) fn(user, level, buf);
    else accel__default_log(NULL, level, buf);
}

ACCEL__DEF void accel__log(const accel *acc, accel_log_level level, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    accel__vlog(acc, level, fmt, ap);
    va_end(ap);
}

ACCEL__DEF accel_result accel__fail(accel *acc, accel_result r, const char *file, int line, const char *fmt, ...) {
    char msg[ACCEL_ERROR_CAPACITY];
    char *dst = acc ? acc->last_error : accel__g_last_error;
    const char *base = file ? strrchr(file, '/') : NULL;
    va_list ap;
    base = base ? base + 1 : file;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (acc && acc->num_processes > 1)
        snprintf(dst, ACCEL_ERROR_CAPACITY, "[rank %d] %.760s (%.80s: %.100s:%d)", acc->process_index, msg,
                 accel_result_string(r), base ? base : "?", line);
    else
        snprintf(dst, ACCEL_ERROR_CAPACITY, "%.760s (%.80s: %.100s:%d)", msg, accel_result_string(r), base ? base : "?", line);
    if (acc) acc->last_result = r;
    accel__log(acc, ACCEL_LOG_ERROR, "%s", dst);
    return r;
}

ACCEL__DEF const char *accel_last_error(const accel *acc) {
    return acc ? acc->last_error : accel__g_last_error;
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

ACCEL__DEF double accel__now(void) {
    struct timespec ts;
#if defined(CLOCK_MONOTONIC)
    clock_gettime(CLOCK_MONOTONIC, &ts);
#else
    timespec_get(&ts, TIME_UTC);
#endif
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ------------------------------------------------------------------------------------------------ dtypes */
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

/* ------------------------------------------------------------------------------------------- allocation */
static void *accel__alloc_with(const accel_allocator *a, size_t size) {
    if (a && a->alloc) return a->alloc(size, a->user_data);
    return malloc(size);
}
static void accel__free_with(const accel_allocator *a, void *p) {
    if (!p) return;
    if (a && a->free) a->free(p, a->user_data);
    else free(p);
}

ACCEL__DEF void *accel_host_alloc(accel *acc, size_t size) {
    void *p = accel__alloc_with(acc ? &acc->desc.host_allocator : &accel__g_host_alloc, size ? size : 1);
    if (!p) ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "host allocation of %zu bytes failed", size);
    return p;
}
ACCEL__DEF void accel_host_free(accel *acc, void *ptr) {
    accel__free_with(acc ? &acc->desc.host_allocator : &accel__g_host_alloc, ptr);
}

ACCEL__DEF void *accel_device_alloc(accel *acc, size_t size) {
    void *p = NULL;
    if (!acc || acc->device < 0) return accel_host_alloc(acc, size);
    if (acc->desc.device_allocator.alloc) {
        p = acc->desc.device_allocator.alloc(size ? size : 1, acc->desc.device_allocator.user_data);
        if (!p) ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "device allocation of %zu bytes failed (user allocator)", size);
        return p;
    }
#ifdef ACCEL_WITH_CUDA
    {
        cudaError_t e = cudaMalloc(&p, size ? size : 1);
        if (e != cudaSuccess) {
            ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "cudaMalloc(%zu) failed: %s", size, cudaGetErrorString(e));
            return NULL;
        }
    }
    return p;
#else
    ACCEL__FAIL(acc, ACCEL_ERR_UNSUPPORTED, "device allocation needs CUDA: compile the ACCEL_IMPLEMENTATION TU with nvcc");
    return NULL;
#endif
}
ACCEL__DEF void accel_device_free(accel *acc, void *ptr) {
    if (!ptr) return;
    if (!acc || acc->device < 0) { accel_host_free(acc, ptr); return; }
    if (acc->desc.device_allocator.free) { acc->desc.device_allocator.free(ptr, acc->desc.device_allocator.user_data); return; }
#ifdef ACCEL_WITH_CUDA
    cudaFree(ptr);
#endif
}

/* stb_ds reallocs without the old size: keep it in a header so an alloc/free-only allocator works. */
ACCEL__DEF void *accel__stbds_realloc(void *context, void *ptr, size_t size) {
    const size_t hdr = 16;
    unsigned char *old = ptr ? (unsigned char *)ptr - hdr : NULL;
    unsigned char *nw;
    size_t old_size = 0;
    (void)context;
    if (size == 0) { accel__free_with(&accel__g_host_alloc, old); return NULL; }
    nw = (unsigned char *)accel__alloc_with(&accel__g_host_alloc, size + hdr);
    if (!nw) return NULL;
    memcpy(nw, &size, sizeof size);
    if (old) {
        memcpy(&old_size, old, sizeof old_size);
        memcpy(nw + hdr, old + hdr, old_size < size ? old_size : size);
        accel__free_with(&accel__g_host_alloc, old);
    }
    return nw + hdr;
}
ACCEL__DEF void accel__stbds_free(void *context, void *ptr) {
    (void)context;
    if (ptr) accel__free_with(&accel__g_host_alloc, (unsigned char *)ptr - 16);
}

/* ----------------------------------------------------------------------------------------- names */
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
    {ACCEL_LAUNCHER_SLURM, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
    {ACCEL_LAUNCHER_TORCHRUN, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
};
#define ACCEL__NSOURCES ((int)(sizeof accel__sources / sizeof accel__sources[0]))

typedef struct accel__layout { int present, rank, size, local_rank, local_size; } accel__layout;

/* Reads one source. present=0 when neither rank nor size is set. */
static int accel__read_source(const accel__source *s, accel__layout *out, char *err, size_t cap) {
    const char *names[4];
    long vals[4];
    int i, rc;
    names[0] = s->rank; names[1] = s->size; names[2] = s->local_rank; names[3] = s->local_size;
    memset(out, 0, sizeof *out);
    for (i = 0; i < 4; ++i) {
        vals[i] = -1;
        rc = accel__parse_nonneg(getenv(names[i]), &vals[i]);
        if (rc == -2) {
            snprintf(err, cap, "environment variable %s=\"%s\" is not a non-negative integer", names[i], getenv(names[i]));
            return -1;
        }
    }
    if (s->launcher == ACCEL_LAUNCHER_SLURM && vals[3] < 0) {
        /* SLURM_TASKS_PER_NODE looks like "2(x3),1": the first count is this node's when nodes are uniform. */
        const char *t = getenv("SLURM_TASKS_PER_NODE");
        if (t && isdigit((unsigned char)*t)) vals[3] = strtol(t, NULL, 10);
    }
    if (vals[0] < 0 && vals[1] < 0) return 0;
    if (vals[0] < 0 || vals[1] < 0) {
        snprintf(err, cap, "%s is set but %s is not", vals[0] < 0 ? names[1] : names[0], vals[0] < 0 ? names[0] : names[1]);
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
    accel__layout found, lay;
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
        snprintf(err, cap, "desc.process_index=%d is not valid for desc.num_processes=%d", d.process_index, d.num_processes);
        return ACCEL_ERR_INVALID_ARGUMENT;
    }
    if (d.gradient_accumulation_steps < 0) {
        snprintf(err, cap, "desc.gradient_accumulation_steps=%d must be >= 1 (0 = default)", d.gradient_accumulation_steps);
        return ACCEL_ERR_INVALID_ARGUMENT;
    }
    if ((int)d.mixed_precision < 0 || (int)d.mixed_precision > (int)ACCEL_PRECISION_FP8) {
        snprintf(err, cap, "desc.mixed_precision=%d is not an accel_precision", (int)d.mixed_precision);
        return ACCEL_ERR_INVALID_ARGUMENT;
    }
    if ((!d.host_allocator.alloc) != (!d.host_allocator.free) || (!d.device_allocator.alloc) != (!d.device_allocator.free)) {
        snprintf(err, cap, "an allocator needs both alloc and free (or neither)");
        return ACCEL_ERR_INVALID_ARGUMENT;
    }
    if (d.collective_timeout_ms < 0) {
        snprintf(err, cap, "desc.collective_timeout_ms=%d must be >= 0", d.collective_timeout_ms);
        return ACCEL_ERR_INVALID_ARGUMENT;
    }

    /* launcher table: every present source is parsed; the first wins; disagreement is an error */
    memset(&found, 0, sizeof found);
    for (i = 0; i < ACCEL__NSOURCES; ++i) {
        int rc = accel__read_source(&accel__sources[i], &lay, err, cap);
        if (rc < 0) return ACCEL_ERR_ENVIRONMENT;
        if (rc == 0) continue;
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
    if (d.num_processes > 0) {
        if (found.present && (found.rank != d.process_index || found.size != d.num_processes)) {
            snprintf(err, cap, "desc says rank %d of %d but the %s environment says %s=%d %s=%d", d.process_index,
                     d.num_processes, accel_launcher_name(launcher), found_src->rank, found.rank, found_src->size, found.size);
            return ACCEL_ERR_ENVIRONMENT;
        }
        launcher = ACCEL_LAUNCHER_EXPLICIT;
    } else if (found.present) {
        d.num_processes = found.size;
        d.process_index = found.rank;
        d.local_process_index = found.local_rank >= 0 ? found.local_rank : (found.local_size > 0 ? found.rank % found.local_size : found.rank);
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
            return ACCEL_ERR_ENVIRONMENT;
        }
        if (d.mixed_precision == ACCEL_PRECISION_DEFAULT) d.mixed_precision = p;
    }
    if (d.mixed_precision == ACCEL_PRECISION_DEFAULT) d.mixed_precision = ACCEL_PRECISION_NO;

    s = getenv("ACCELERATE_GRADIENT_ACCUMULATION_STEPS");
    if (s && *s) {
        long v = 0;
        if (accel__parse_nonneg(s, &v) != 0 || v < 1) {
            snprintf(err, cap, "ACCELERATE_GRADIENT_ACCUMULATION_STEPS=\"%s\" is not a positive integer", s);
            return ACCEL_ERR_ENVIRONMENT;
        }
        d.gradient_accumulation_steps = (int)v;
    }
    if (d.gradient_accumulation_steps == 0) d.gradient_accumulation_steps = 1;

    s = getenv("ACCELERATE_USE_CPU");
    if (s && *s) {
        b = accel_parse_bool(s);
        if (b < 0) { snprintf(err, cap, "ACCELERATE_USE_CPU=\"%s\" is not a boolean (y/yes/t/true/on/1 or n/no/f/false/off/0)", s); return ACCEL_ERR_ENVIRONMENT; }
        if (b) d.cpu = 1;
    }
    s = getenv("ACCELERATE_DEBUG_MODE");
    if (s && *s) {
        b = accel_parse_bool(s);
        if (b < 0) { snprintf(err, cap, "ACCELERATE_DEBUG_MODE=\"%s\" is not a boolean (y/yes/t/true/on/1 or n/no/f/false/off/0)", s); return ACCEL_ERR_ENVIRONMENT; }
        if (b) d.debug = 1;
    }
    if (d.cpu) d.cpu = 1;
    if (d.debug) d.debug = 1;
    if (d.sync_with_dataloader == 0) d.sync_with_dataloader = ACCEL_ON;
    if (d.adjust_scheduler == 0) d.adjust_scheduler = ACCEL_ON;
    if (d.step_scheduler_with_optimizer == 0) d.step_scheduler_with_optimizer = ACCEL_ON;
    if (d.collective_timeout_ms == 0) d.collective_timeout_ms = 1800000;
    if (d.log_level == 0) d.log_level = accel__env_log_level() + 1;
    if (!d.project_dir) d.project_dir = ".";
    if (!d.logging_dir) d.logging_dir = d.project_dir;
    *out = d;
    if (out_launcher) *out_launcher = launcher;
    return ACCEL_OK;
}

/* ------------------------------------------------------------------------------------------ MPI plumbing */
#ifdef ACCEL_WITH_MPI
static accel_result accel__mpi_fail(accel *acc, int rc, const char *what, const char *file, int line) {
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

ACCEL__DEF void *accel__mpi_comm(accel *acc) {
#ifdef ACCEL_WITH_MPI
    if (acc && acc->impl && acc->impl->comm_valid) return &acc->impl->comm;
#else
    (void)acc;
#endif
    return NULL;
}

static accel_result accel__need_group(accel *acc) {
    if (!acc) return accel__fail(NULL, ACCEL_ERR_INVALID_ARGUMENT, __FILE__, __LINE__, "accel is NULL");
    if (acc->num_processes <= 1 || acc->mpi_active) return ACCEL_OK;
    return ACCEL__FAIL(acc, ACCEL_ERR_UNSUPPORTED,
                       "host collectives across %d processes need MPI (launched by %s without MPI; build with "
                       "ACCEL_WITH_MPI and launch with mpirun/srun)",
                       acc->num_processes, accel_launcher_name(acc->launcher));
}

ACCEL__DEF accel_result accel_wait_for_everyone(accel *acc) {
    accel_result r = accel__need_group(acc);
    if (r != ACCEL_OK || acc->num_processes <= 1) return r;
#ifdef ACCEL_WITH_MPI
    ACCEL__MPI_CHECK(acc, MPI_Barrier(acc->impl->comm));
#endif
    return ACCEL_OK;
}

/* is_f64 picks the element type: the two public entry points differ only in it */
static accel_result accel__host_allreduce(accel *acc, void *values, int count, accel_host_op op, int is_f64) {
    accel_result r = accel__need_group(acc);
    if (r != ACCEL_OK) return r;
    if (count < 0 || (count > 0 && !values))
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "host all-reduce: bad buffer (count %d)", count);
    if (acc->num_processes <= 1 || count == 0) return ACCEL_OK;
#ifdef ACCEL_WITH_MPI
    ACCEL__MPI_CHECK(acc, MPI_Allreduce(MPI_IN_PLACE, values, count, is_f64 ? MPI_DOUBLE : MPI_INT64_T,
                                        op == ACCEL_HOST_SUM ? MPI_SUM : op == ACCEL_HOST_MAX ? MPI_MAX : MPI_MIN,
                                        acc->impl->comm));
#else
    (void)op;
    (void)is_f64;
#endif
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_host_allreduce_i64(accel *acc, int64_t *values, int count, accel_host_op op) {
    return accel__host_allreduce(acc, values, count, op, 0);
}

ACCEL__DEF accel_result accel_host_allreduce_f64(accel *acc, double *values, int count, accel_host_op op) {
    return accel__host_allreduce(acc, values, count, op, 1);
}

ACCEL__DEF accel_result accel_host_broadcast(accel *acc, void *data, size_t bytes, int root) {
    accel_result r = accel__need_group(acc);
    if (r != ACCEL_OK) return r;
    if (root < 0 || root >= acc->num_processes)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "broadcast root %d is not a rank of %d", root, acc->num_processes);
    if (bytes > 0 && !data) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "broadcast: data is NULL");
    if (bytes > (size_t)INT_MAX) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "broadcast: %zu bytes is too large for a host broadcast", bytes);
    if (acc->num_processes <= 1 || bytes == 0) return ACCEL_OK;
#ifdef ACCEL_WITH_MPI
    ACCEL__MPI_CHECK(acc, MPI_Bcast(data, (int)bytes, MPI_BYTE, root, acc->impl->comm));
#endif
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_host_allgather(accel *acc, const void *in, void *out, size_t bytes) {
    accel_result r = accel__need_group(acc);
    if (r != ACCEL_OK) return r;
    if (bytes > 0 && (!in || !out)) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "allgather: NULL buffer");
    if (bytes > (size_t)INT_MAX) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "allgather: %zu bytes is too large", bytes);
    if (bytes == 0) return ACCEL_OK;
    if (acc->num_processes <= 1) { memmove(out, in, bytes); return ACCEL_OK; }
#ifdef ACCEL_WITH_MPI
    ACCEL__MPI_CHECK(acc, MPI_Allgather(in, (int)bytes, MPI_BYTE, out, (int)bytes, MPI_BYTE, acc->impl->comm));
#endif
    return ACCEL_OK;
}

/* ----------------------------------------------------------------------------------------- init / shutdown */
/* What every rank must agree on. Fixed-size, compared field by field. */
typedef struct accel__agreement {
    int32_t status;              /* accel_result of this rank's local setup */
    int32_t num_processes;
    int32_t mixed_precision;
    int32_t accumulation_steps;
    int32_t version;
    int32_t split_batches;
} accel__agreement;

static accel_result accel__check_agreement(accel *acc, accel_result local) {
    accel__agreement mine, *all;
    int n = acc->num_processes, i, f;
    char *msg;
    size_t off = 0;
    static const char *field_names[] = {"status", "num_processes", "mixed_precision", "gradient_accumulation_steps",
                                        "library version", "split_batches"};
    memset(&mine, 0, sizeof mine);
    mine.status = (int32_t)local;
    mine.num_processes = acc->num_processes;
    mine.mixed_precision = (int32_t)acc->mixed_precision;
    mine.accumulation_steps = acc->gradient_accumulation_steps;
    mine.version = ACCEL_VERSION_NUMBER;
    mine.split_batches = acc->desc.split_batches ? 1 : 0;
    all = (accel__agreement *)malloc(sizeof(accel__agreement) * (size_t)n);
    msg = (char *)malloc(ACCEL_ERROR_CAPACITY);
    if (!all || !msg) {
        free(all); free(msg);
        /* cannot take part: every peer would hang, so this is the one place where a failure can't be made
           collective; it only happens when a few hundred bytes cannot be allocated */
        return ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "init agreement buffer");
    }
    {
        accel_result r = accel_host_allgather(acc, &mine, all, sizeof mine);
        if (r != ACCEL_OK) { free(all); free(msg); return r; }
    }
    /* a rank that failed locally: everyone fails, naming it */
    for (i = 0; i < n; ++i) {
        if (all[i].status != ACCEL_OK) {
            if (local != ACCEL_OK) { free(all); free(msg); return local; }
            ACCEL__FAIL(acc, ACCEL_ERR_REMOTE, "rank %d failed during accel_init (%s); see its log", i,
                        accel_result_string((accel_result)all[i].status));
            free(all); free(msg);
            return ACCEL_ERR_REMOTE;
        }
    }
    for (f = 1; f < 6; ++f) {
        const int32_t *first = (const int32_t *)&all[0];
        int differ = 0;
        for (i = 1; i < n; ++i)
            if (((const int32_t *)&all[i])[f] != first[f]) differ = 1;
        if (!differ) continue;
        off = (size_t)snprintf(msg, ACCEL_ERROR_CAPACITY, "processes disagree on %s:", field_names[f]);
        for (i = 0; i < n && off < ACCEL_ERROR_CAPACITY - 32; ++i)
            off += (size_t)snprintf(msg + off, ACCEL_ERROR_CAPACITY - off, " rank %d=%d%s", i, (int)((const int32_t *)&all[i])[f],
                                    i + 1 < n ? "," : "");
        ACCEL__FAIL(acc, ACCEL_ERR_MISMATCH, "%s", msg);
        free(all); free(msg);
        return ACCEL_ERR_MISMATCH;
    }
    free(all); free(msg);
    return ACCEL_OK;
}

static int accel__select_device(accel *acc) {
#ifdef ACCEL_WITH_CUDA
    int count = 0;
    cudaError_t e;
    if (acc->desc.cpu) return -1;
    e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count <= 0) {
        (void)cudaGetLastError();
        accel__log(acc, ACCEL_LOG_INFO, "no CUDA device (%s): using the CPU", e != cudaSuccess ? cudaGetErrorString(e) : "count 0");
        return -1;
    }
    return acc->local_process_index % count;
#else
    (void)acc;
    return -1;
#endif
}

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
    r = accel_resolve_config(desc, &d, &launcher, err, sizeof err);
    if (desc) { acc->desc.log_fn = desc->log_fn; acc->desc.log_user_data = desc->log_user_data; acc->desc.log_level = desc->log_level; }
    if (r == ACCEL_OK) acc->desc = d;
    acc->impl = (struct accel__impl *)calloc(1, sizeof(struct accel__impl));
    if (!acc->impl) return ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "accel_init: impl");
    acc->launcher = launcher;
    acc->num_processes = r == ACCEL_OK ? d.num_processes : 1;
    acc->process_index = r == ACCEL_OK ? d.process_index : 0;
    acc->local_process_index = r == ACCEL_OK ? d.local_process_index : 0;
    acc->local_num_processes = r == ACCEL_OK ? d.local_num_processes : 1;

#ifdef ACCEL_WITH_MPI
    /* Join MPI even when the local config failed, so the failure can be made collective instead of a hang. */
    {
        int inited = 0, finalized = 0, want;
        MPI_Initialized(&inited);
        MPI_Finalized(&finalized);
        want = !(desc && desc->no_mpi) && !finalized &&
               (inited || launcher == ACCEL_LAUNCHER_OPENMPI || launcher == ACCEL_LAUNCHER_MPICH ||
                launcher == ACCEL_LAUNCHER_MVAPICH || launcher == ACCEL_LAUNCHER_SLURM ||
                (launcher == ACCEL_LAUNCHER_NONE && r != ACCEL_OK));
        if (want) {
            int mrc, rank = 0, size = 1;
            if (!inited) {
                int provided = 0;
                mrc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
                if (mrc != MPI_SUCCESS) return accel__mpi_fail(acc, mrc, "MPI_Init_thread", __FILE__, __LINE__);
                acc->impl->we_initialized_mpi = 1;
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
                    snprintf(err, sizeof err, "MPI says rank %d of %d but the %s environment says rank %d of %d", rank,
                             size, accel_launcher_name(launcher), d.process_index, d.num_processes);
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
        }
    }
#endif
#ifdef ACCEL_WITH_MPI
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
            if (e != cudaSuccess) r = ACCEL__FAIL(acc, ACCEL_ERR_CUDA, "cudaSetDevice(%d) failed: %s", acc->device, cudaGetErrorString(e));
        }
#endif
        acc->distributed_type = acc->num_processes <= 1 ? ACCEL_DISTRIBUTED_NO
                                : acc->device >= 0      ? ACCEL_DISTRIBUTED_MULTI_GPU
                                                        : ACCEL_DISTRIBUTED_MULTI_CPU;
        acc->use_distributed = acc->distributed_type != ACCEL_DISTRIBUTED_NO && acc->num_processes > 1;
    }
    if (acc->num_processes > 1 && acc->mpi_active) {
        accel_result ar = accel__check_agreement(acc, r);
        if (ar != ACCEL_OK) return ar;
    } else if (r == ACCEL_OK && acc->num_processes > 1) {
        accel__log(acc, ACCEL_LOG_WARN, "%d processes without MPI: the init agreement check is skipped", acc->num_processes);
    }
    if (r == ACCEL_OK) {
        acc->last_result = ACCEL_OK;
        acc->last_error[0] = 0;
        accel__log(acc, ACCEL_LOG_DEBUG, "rank %d/%d local %d/%d launcher %s device %d", acc->process_index,
                   acc->num_processes, acc->local_process_index, acc->local_num_processes, accel_launcher_name(launcher),
                   acc->device);
    }
    return r;
}

ACCEL__DEF void accel_shutdown(accel *acc) {
    if (!acc || !acc->impl) return;
#ifdef ACCEL_WITH_MPI
    if (acc->impl->comm_valid) {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized) MPI_Comm_free(&acc->impl->comm);
        acc->impl->comm_valid = 0;
    }
    if (acc->impl->we_initialized_mpi) {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized) MPI_Finalize();
    }
#endif
    free(acc->impl);
    acc->impl = NULL;
    acc->mpi_active = 0;
}

/* ------------------------------------------------------------------------------------------ process helpers */
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
    if (!acc) return accel__fail(NULL, ACCEL_ERR_INVALID_ARGUMENT, __FILE__, __LINE__, "accel is NULL");
    return acc->is_main_process ? ACCEL_OK : accel_wait_for_everyone(acc);
}
ACCEL__DEF accel_result accel_main_process_first_end(accel *acc) {
    if (!acc) return accel__fail(NULL, ACCEL_ERR_INVALID_ARGUMENT, __FILE__, __LINE__, "accel is NULL");
    return acc->is_main_process ? accel_wait_for_everyone(acc) : ACCEL_OK;
}
ACCEL__DEF accel_result accel_local_main_process_first_begin(accel *acc) {
    if (!acc) return accel__fail(NULL, ACCEL_ERR_INVALID_ARGUMENT, __FILE__, __LINE__, "accel is NULL");
    return acc->is_local_main_process ? ACCEL_OK : accel_wait_for_everyone(acc);
}
ACCEL__DEF accel_result accel_local_main_process_first_end(accel *acc) {
    if (!acc) return accel__fail(NULL, ACCEL_ERR_INVALID_ARGUMENT, __FILE__, __LINE__, "accel is NULL");
    return acc->is_local_main_process ? accel_wait_for_everyone(acc) : ACCEL_OK;
}

ACCEL__DEF int accel_on_main_process(const accel *acc) { return acc && (acc->is_main_process || !acc->use_distributed); }
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
ACCEL__DEF accel_result accel_check_trigger(accel *acc, int *fired) {
    int64_t v;
    accel_result r;
    if (!acc || !fired) return accel__fail(acc, ACCEL_ERR_INVALID_ARGUMENT, __FILE__, __LINE__, "check_trigger: NULL argument");
    v = acc->trigger;
    r = accel_host_allreduce_i64(acc, &v, 1, ACCEL_HOST_SUM);
    if (r != ACCEL_OK) return r;
    *fired = v >= 1;
    if (*fired) acc->trigger = 0;
    return ACCEL_OK;
}


/* ---------------------------------------------------------------------------------- gradient accumulation */
ACCEL__DEF void accel_accumulate_begin(accel *acc) {
    int n;
    if (!acc) return;
    n = acc->gradient_accumulation_steps > 0 ? acc->gradient_accumulation_steps : 1;
    if (acc->desc.sync_with_dataloader != ACCEL_OFF && acc->end_of_dataloader) {
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
}
ACCEL__DEF int accel_scheduler_steps(accel *acc, int64_t total_steps) {
    int n, i, taken = 0;
    if (!acc) return 0;
    if (acc->desc.step_scheduler_with_optimizer == ACCEL_OFF) {
        acc->scheduler_steps++; /* Accelerate steps unconditionally here: no total_steps guard */
        return 1;
    } else if (!acc->sync_gradients) {
        if (acc->desc.adjust_scheduler != ACCEL_OFF) acc->scheduler_adjusted_steps++;
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
ACCEL__DEF void accel_set_dataloader_state(accel *acc, int end_of_dataloader, int remainder) {
    if (!acc) return;
    acc->end_of_dataloader = end_of_dataloader ? 1 : 0;
    acc->remainder = remainder;
}
/* ---------------------------------------------------------------------------------------------------- RNG */
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
    accel_result r;
    if (!acc) return accel__fail(NULL, ACCEL_ERR_INVALID_ARGUMENT, __FILE__, __LINE__, "accel is NULL");
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

#endif /* ACCEL_IMPLEMENTATION */

/* accel is released under the MIT licence. Copyright (c) 2026 the accel authors. */
