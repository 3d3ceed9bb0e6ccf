/* accel_profile.h — step profiling for accel trainers: named ranges (host wall clock, CUDA events on acc's stream,
   NVTX), a per-step phase table, and Chrome trace / Perfetto JSON files per rank, merged on request — Accelerate's
   accelerator.profile() with ProfileKwargs(schedule_option=..., output_trace_dir=...), for C/CUDA loops.

   Depends only on accel.h. One translation unit defines ACCEL_IMPLEMENTATION before including it (compile that TU
   with nvcc, or define ACCEL_WITH_CUDA, to get CUDA events and NVTX ranges; a C build times the host only).

   CONTENTS
     USAGE
     RANGES                       phases and named ranges; host, CUDA events, NVTX
     REPORTED RANGES              ranges other modules report from their threads (async checkpoints)
     STEPS AND THE SCHEDULE       torch.profiler.schedule's wait/warmup/active/repeat
     THE PHASE TABLE
     THE TRACE FILE               Chrome trace / Perfetto, merged across ranks
     OPTIONS                      accel_prof_desc
     NVTX
     ERRORS
     THREADS AND MEMORY
     DIFFERENCES FROM ACCELERATE / torch.profiler

   USAGE
       accel_prof *prof;
       accel_prof_desc pd = {0};                    // C++: accel_prof_desc pd = {};
       pd.disabled = !want_profile;                 // disabled: begin/end/step cost a flag test and do nothing
       pd.trace_dir = "prof";                       // prof/profile_<rank>.json (NULL: the phase table only)
       pd.wait = 1; pd.warmup = 1; pd.active = 3; pd.repeat = 2;   // ProfileKwargs.schedule_option (0: every step)
       if (accel_prof_create(&acc, &pd, &prof) != ACCEL_OK) die(accel_last_error(&acc));
       int fb;  accel_prof_range_id(prof, "forward_backward", &fb);   // user-named ranges next to the phases
       for (step = 0; step < steps; ++step) {
           accel_prof_begin(prof, ACCEL_PROF_DATA);      next_batch();       accel_prof_end(prof, ACCEL_PROF_DATA);
           accel_prof_begin(prof, fb);                   forward_backward(); accel_prof_end(prof, fb);
           accel_prof_begin(prof, ACCEL_PROF_GRAD_SYNC); reduce();           accel_prof_end(prof, ACCEL_PROF_GRAD_SYNC);
           accel_prof_begin(prof, ACCEL_PROF_OPTIMIZER); optimizer_step();   accel_prof_end(prof, ACCEL_PROF_OPTIMIZER);
           accel_prof_step(prof);                         // torch's prof.step(): the step boundary
       }
       if (acc.is_main_process) accel_prof_print_table(prof, stdout);     // this rank's phase table
       accel_prof_write_trace(prof);                      // local: prof/profile_<rank>.json (atomic write)
       accel_prof_merge_trace(prof, NULL);                // collective: rank 0 writes prof/profile_merged.json
       accel_prof_destroy(prof);

   RANGES
     A range is an id: the phases (accel_prof_phase: data, forward, backward, grad_sync, optimizer, checkpoint,
     logging) or a user name interned by accel_prof_range_id (at most ACCEL_PROF_MAX_NAMES names in all). Ranges nest
     (at most ACCEL_PROF_MAX_DEPTH deep); accel_prof_end(prof, id) must close the innermost open range, and every
     range must be closed before accel_prof_step: a range does not span a step boundary. On a recorded step a range
     records
       host     accel_now() (CLOCK_MONOTONIC) at begin and end;
       device   when acc uses a CUDA device (and desc.no_device_timing is 0): a CUDA event recorded on acc->stream at
                begin and at end. Events are read later without waiting (cudaEventQuery at accel_prof_step), and
                waited for only by the calls that report (accel_prof_phase_stats, _print_table, _write_trace,
                _merge_trace): nothing synchronizes inside the step. Device times are chained event to event from one
                reference event (recorded on an idle stream at create and waited for there), so a timestamp keeps
                sub-microsecond precision over hours of training;
       NVTX     nvtxRangePushA(name) / nvtxRangePop() when the implementation TU has NVTX (below), plus one
                "ProfilerStep#<k>" range per recorded step, so Nsight Systems shows the same ranges.
     accel_prof_begin/_end are static inline: a disabled profiler answers ACCEL_OK after a NULL test, one load and one
     branch (bench/profile measures it); otherwise they call accel_prof_range_begin/_end. On steps the schedule does not
     record, ranges are only checked for balance (no clock, no events). The first ACCEL_PROF_DEFAULT_MAX_RANGES ranges
     (desc.max_ranges) are kept for the trace and for device timing; later ones still count in the phase table (host
     time) and are dropped from the trace (dropped_ranges counts them; one warning is logged).

   STEPS AND THE SCHEDULE (Accelerate's ProfileKwargs.schedule_option = torch.profiler.schedule's arguments)
     Steps are numbered from 0: step k is everything between the k-th call of accel_prof_step (accel_prof_create for
     k = 0) and the next call. With n = wait + warmup + active and s = k - skip_first, step k's action is
       NONE             when k < skip_first, or repeat > 0 and s >= repeat * n, or s mod n < wait;
       WARMUP           when wait <= s mod n < wait + warmup;
       RECORD           when wait + warmup <= s mod n < n - 1;
       RECORD_AND_SAVE  when s mod n == n - 1 (a cycle's last active step)
     — torch.profiler.schedule (torch 1.13's source), evaluated at the same step numbers as torch.profiler.profile
     evaluates it (schedule(0) at start, schedule(step_num) after each prof.step()). Steps whose action is RECORD or
     RECORD_AND_SAVE are recorded; NONE and WARMUP steps are not (accel has no tracer to warm up). active = 0 (with
     wait = warmup = repeat = skip_first = 0) is "no schedule_option": every step is recorded, as
     torch.profiler.profile(schedule=None). accel_prof_schedule_action evaluates the rule for any step.
     desc.on_trace_ready(prof, user_data) runs in the accel_prof_step that ends a RECORD_AND_SAVE step, as torch
     calls on_trace_ready when a cycle ends; the next step's clock starts after the callback returns (torch opens
     ProfilerStep#k+1 after its export too), so writing a trace is not charged to a step.

   THE PHASE TABLE (accel_prof_print_table, accel_prof_phase_stats)
     Over the recorded steps that are complete (the step after the final accel_prof_step is not): the step itself,
     then every range that ran, in the order they first ran, then "(other)" = step time outside every top-level
     range. Per row: the host time per step (a range's outermost occurrences in the step summed; a step without it
     counts 0) as mean, min and max; share = its total / the steps' total; steps = the steps it ran in; and, with
     device timing, "device ms" = the mean CUDA event time per step of the same ranges. Nested ranges are indented
     and overlap their parents: the top-level rows and (other) add up to the step. This rank's figures only (print
     it on the main process, or on each). examples/train_digits.c --profile, 2 processes, accumulation 2:
       accel profile (rank 0): 100 recorded steps (steps 0-99)
       range                         mean ms     min ms     max ms   share   steps
       step                            1.272      0.468     34.983  100.0%     100
       data                            0.001      0.001      0.009    0.1%     100
       forward_backward                0.212      0.152      4.234   16.7%     100
       grad_sync                       0.517      0.048      5.379   40.6%     100
       optimizer                       0.012      0.011      0.018    1.0%     100
       logging                         0.141      0.070      5.256   11.1%     100
       checkpoint                      0.386      0.000     34.477   30.4%       2
       (other)                         0.002      0.001      0.040    0.2%     100

   THE TRACE FILE (Chrome trace event format: open it in https://ui.perfetto.dev or chrome://tracing)
     accel_prof_write_trace writes <trace_dir>/profile_<rank>.json (Accelerate's PROFILE_PATTERN_NAME) through the
     core's atomic write (temp name, fsync, rename): one JSON object
       {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}
     with metadata events ("ph": "M": process_name "rank <r>", process_sort_index, thread_name "host" for tid 0 and
     "cuda stream" for tid 1) and complete events ("ph": "X", "ts"/"dur" in microseconds, "pid" = rank):
       "ProfilerStep#<k>"  cat "step",   tid 0: the whole recorded step k (as torch names its step events);
       the range's name    cat "phase" (the enum) or "range" (user names), tid 0, args {"step": k};
       the same name       cat "device", tid 1: the range's CUDA event interval on acc->stream.
     ts counts from the profiler's creation on that rank; otherData holds "rank", "num_processes", "start_unix_us"
     (CLOCK_REALTIME at creation), "steps", "recorded_steps", "dropped_ranges", "dropped_reported", "schedule" and
     "accel_version".
     Events of one thread appear in begin order (ts non-decreasing), nested ranges inside their parents.
     accel_prof_merge_trace (collective: every rank calls it, enabled or not) gathers every rank's events over the
     host process group and rank 0 writes one file (path, NULL → <trace_dir>/profile_merged.json) with each rank's
     events under pid = rank, shifted by that rank's start_unix_us minus the earliest one (exact on one host; across
     hosts as good as their clock sync). A failure anywhere (no path, unwritable file) fails every rank; it has the
     collective deadline.

   REPORTED RANGES
     accel_prof_record_range(prof, name, begin, end) implements accel.h's accel_range_fn, the contract through which
     another module reports a finished range from any thread: accel_ckpt.h's async saves report "checkpoint_snapshot"
     (the stall in save_state) and "checkpoint_write" (the writer thread's work, which spans steps) when
     accel_ckpt_desc.on_range = accel_prof_record_range and .range_user = prof. Such ranges go to the trace only, as
     complete events on their own track (tid 2, "reported", cat "reported", in begin order), not to the phase table
     and not to NVTX (they are reported after the fact); the first ACCEL_PROF_MAX_REPORTED are kept (otherData's
     "dropped_reported" counts the rest). Recording takes a mutex and copies the name (at most 39 bytes kept).

   OPTIONS (accel_prof_desc, zero = default)
     disabled          nonzero: the profiler records nothing and writes nothing (begin/end/step are flag tests)
     trace_dir         directory of the trace files, created (mkdir -p) by create when enabled; NULL: no per-rank
                       file (write_trace is ACCEL_ERR_STATE) and merge_trace needs a path
     wait, warmup, active, repeat, skip_first   the schedule above (all 0: every step)
     max_ranges        ranges kept for the trace and device timing; 0 → ACCEL_PROF_DEFAULT_MAX_RANGES
     no_device_timing  nonzero: no CUDA events even when acc uses a device (host times only)
     no_nvtx           nonzero: no NVTX ranges
     on_trace_ready, user_data   see the schedule

   NVTX
     The implementation uses NVTX v3 (header-only, nvtx3/nvToolsExt.h, shipped in the CUDA toolkit's include
     directory, which nvcc and the cudart pkg-config put on the include path) when it is built with CUDA
     (ACCEL_WITH_CUDA, implied by nvcc) and __has_include(<nvtx3/nvToolsExt.h>) finds the header. Define
     ACCEL_NO_NVTX to leave it out, or ACCEL_WITH_NVTX=1 to include it without __has_include. No library to link:
     NVTX calls are no-ops until a tool (nsys) injects itself.

   ERRORS
     NULL objects and unknown ids → ACCEL_ERR_INVALID_ARGUMENT; an end that does not close the innermost open range,
     an end without an open range, a step with open ranges, nesting deeper than ACCEL_PROF_MAX_DEPTH →
     ACCEL_ERR_STATE (nothing changes: the open ranges stay open), as is write_trace without trace_dir; an
     uncreatable trace_dir or unwritable file →
     ACCEL_ERR_IO naming the path; an allocation failure → ACCEL_ERR_OUT_OF_MEMORY. A disabled profiler checks
     nothing (that is its cost). A CUDA error while reading events later (a sticky error of the context) turns device
     timing off with a warning; the host figures stay.

   THREADS AND MEMORY
     A profiler is used by the thread that uses its accel, one at a time (tid 0 is that thread), except
     accel_prof_record_range, which any thread may call until accel_prof_destroy. Every allocation goes through the
     host allocator: acc's for the object, names and files' text; the records are stb_ds arrays
     (the allocator accel.h's MEMORY section describes), grown with the core's checked growth, so an allocation
     failure is ACCEL_ERR_OUT_OF_MEMORY, never a crash. CUDA events are created with cudaEventCreate and destroyed
     by accel_prof_destroy.

   DIFFERENCES FROM ACCELERATE / torch.profiler
     - accel records the ranges you mark (and their CUDA event times), not every operator and kernel (no CUPTI):
       activities, record_shapes, profile_memory, with_stack, with_flops and with_modules have no counterpart.
     - The trace file holds every recorded step of every cycle; torch's export_chrome_trace after a schedule holds
       only the last cycle (on_trace_ready sees each). WARMUP steps are simply not recorded. on_trace_ready runs at
       cycle ends only: torch also runs it when the profiler stops inside a cycle (accel has no stop; call
       accel_prof_write_trace).
     - Accelerate writes profile_<rank>.json on leaving the context manager and then waits for everyone; here
       accel_prof_write_trace is local and accel_prof_merge_trace is the collective (and the merged file is accel's).
     - The phase table is accel's (torch prints key_averages() of operators).
*/
#ifndef ACCEL_PROFILE_H_INCLUDED
#define ACCEL_PROFILE_H_INCLUDED
#include "accel.h"
#include <stdint.h>
#include <stdio.h> /* FILE for accel_prof_print_table */

#define ACCEL_PROF_MAX_NAMES 256                 /* range ids: the phases and user names together */
#define ACCEL_PROF_MAX_DEPTH 64                  /* open ranges at once */
#define ACCEL_PROF_DEFAULT_MAX_RANGES 262144     /* ranges kept for the trace (about 56 bytes each) */
#define ACCEL_PROF_PATH_CAPACITY 1024
#define ACCEL_PROF_MAX_REPORTED 4096             /* ranges reported by other modules, kept for the trace */
#define ACCEL_PROF_STEP (-1)                     /* accel_prof_phase_stats: the step itself */
#define ACCEL_PROF_OTHER (-2)                    /* accel_prof_phase_stats: step time outside top-level ranges */

#ifdef __cplusplus
extern "C" {
#endif

/* The phases of a training step; their names are what the table and the trace show. */
typedef enum accel_prof_phase {
    ACCEL_PROF_DATA = 0,   /* "data": fetching, sharding, staging the batch */
    ACCEL_PROF_FORWARD,    /* "forward" */
    ACCEL_PROF_BACKWARD,   /* "backward" */
    ACCEL_PROF_GRAD_SYNC,  /* "grad_sync": the gradient all-reduce (reducer wait) */
    ACCEL_PROF_OPTIMIZER,  /* "optimizer": unscale/check, clipping, the update, the scaler update */
    ACCEL_PROF_CHECKPOINT, /* "checkpoint": save_state */
    ACCEL_PROF_LOGGING,    /* "logging": metrics reductions, trackers, printing */
    ACCEL_PROF_PHASE_COUNT
} accel_prof_phase;

/* torch.profiler.ProfilerAction. */
typedef enum accel_prof_action {
    ACCEL_PROF_NONE = 0,
    ACCEL_PROF_WARMUP,
    ACCEL_PROF_RECORD,
    ACCEL_PROF_RECORD_AND_SAVE
} accel_prof_action;

typedef struct accel_prof accel_prof;
typedef void (*accel_prof_trace_ready_fn)(accel_prof *prof, void *user_data);

typedef struct accel_prof_desc {
    int disabled;                /* nonzero: record nothing (begin/end/step are flag tests) */
    const char *trace_dir;       /* <trace_dir>/profile_<rank>.json; NULL: no per-rank trace file */
    int wait, warmup, active, repeat, skip_first; /* ProfileKwargs.schedule_option; all 0: every step recorded */
    int64_t max_ranges;          /* ranges kept for the trace; 0 → ACCEL_PROF_DEFAULT_MAX_RANGES */
    int no_device_timing;        /* nonzero: no CUDA events */
    int no_nvtx;                 /* nonzero: no NVTX ranges */
    accel_prof_trace_ready_fn on_trace_ready; /* at the end of each schedule cycle; NULL: none */
    void *user_data;
} accel_prof_desc;

/* Figures of one range id (or ACCEL_PROF_STEP / ACCEL_PROF_OTHER) over the complete recorded steps. */
typedef struct accel_prof_stats {
    const char *name;            /* the range's name, "step" or "(other)" */
    int64_t steps;               /* complete recorded steps covered */
    int64_t steps_with;          /* of them, steps in which the range ran */
    int64_t calls;               /* outermost occurrences in those steps */
    double mean_ms, min_ms, max_ms, total_ms; /* host time per step (0 in a step without the range) */
    double share;                /* total_ms / the steps' total time, 0..1 */
    double device_mean_ms, device_total_ms;   /* CUDA event time; -1 without device timing (and for step/other) */
} accel_prof_stats;

struct accel__prof_impl; /* records, the phase table, CUDA events; private */

/* The profiler. Fields are readable; change them only through functions. */
struct accel_prof {
    accel *acc;
    int enabled;                 /* !desc.disabled: what accel_prof_begin/_end test */
    int recording;               /* the current step is recorded (the schedule's RECORD / RECORD_AND_SAVE) */
    int depth;                   /* ranges open now */
    int device_timing;           /* CUDA events on acc->stream */
    int nvtx;                    /* NVTX ranges are emitted */
    int64_t step;                /* the current step's number */
    int64_t recorded_steps;      /* complete recorded steps (the phase table's rows) */
    int64_t dropped_ranges;      /* recorded ranges beyond max_ranges (in the table, not in the trace) */
    char trace_file[ACCEL_PROF_PATH_CAPACITY]; /* <trace_dir>/profile_<rank>.json, "" without trace_dir */
    struct accel__prof_impl *impl;
};

/* Creates a profiler (desc NULL: enabled, every step recorded, no trace file). Validates the schedule, creates
   trace_dir, and with device timing records and waits for a reference event on acc->stream (the stream is
   synchronized once, here). Local (no communication). *out is NULL on failure. */
ACCEL_API accel_result accel_prof_create(accel *acc, const accel_prof_desc *desc, accel_prof **out);
/* Frees everything (CUDA events included; pops an open NVTX step range). NULL is fine. */
ACCEL_API void accel_prof_destroy(accel_prof *prof);

/* The id of a user-named range (interned: the same name gives the same id; a phase's name gives the phase).
   Names are 1..200 bytes of UTF-8. Works on a disabled profiler too. */
ACCEL_API accel_result accel_prof_range_id(accel_prof *prof, const char *name, int *id);
/* The name of id ("data", a user name), or NULL for an unknown id. */
ACCEL_API const char *accel_prof_range_name(const accel_prof *prof, int id);

/* What accel_prof_begin/_end call when the profiler is enabled (or NULL: an error). */
ACCEL_API accel_result accel_prof_range_begin(accel_prof *prof, int id);
ACCEL_API accel_result accel_prof_range_end(accel_prof *prof, int id);

/* Opens range id (an accel_prof_phase or an id from accel_prof_range_id). Disabled: ACCEL_OK at once. */
static ACCEL_INLINE accel_result accel_prof_begin(accel_prof *prof, int id) {
    if (prof && !prof->enabled) return ACCEL_OK;
    return accel_prof_range_begin(prof, id);
}
/* Closes range id, which must be the innermost open range. Disabled: ACCEL_OK at once. */
static ACCEL_INLINE accel_result accel_prof_end(accel_prof *prof, int id) {
    if (prof && !prof->enabled) return ACCEL_OK;
    return accel_prof_range_end(prof, id);
}

/* The step boundary (torch's prof.step()): ends step `step` (its row joins the table when it was recorded),
   starts the next, reads finished CUDA events without waiting, runs on_trace_ready after a cycle's last step.
   Fails with ACCEL_ERR_STATE (and changes nothing) while ranges are open. */
ACCEL_API accel_result accel_prof_step(accel_prof *prof);

/* The schedule's action for a step (see STEPS AND THE SCHEDULE); desc NULL or all-zero schedule: RECORD.
   A schedule create would reject (negative values, active 0 with other fields set) gives ACCEL_PROF_NONE. */
ACCEL_API accel_prof_action accel_prof_schedule_action(const accel_prof_desc *desc, int64_t step);

/* Figures of range id, ACCEL_PROF_STEP or ACCEL_PROF_OTHER (waits for pending CUDA events). A range that never ran
   gives zeros (steps_with 0). */
ACCEL_API accel_result accel_prof_phase_stats(accel_prof *prof, int id, accel_prof_stats *out);
/* Prints this rank's phase table to out (NULL: stdout); waits for pending CUDA events. Disabled: prints nothing. */
ACCEL_API accel_result accel_prof_print_table(accel_prof *prof, FILE *out);

/* Writes <trace_dir>/profile_<rank>.json (atomic). Local. Disabled: ACCEL_OK, nothing written. Without trace_dir:
   ACCEL_ERR_STATE. Waits for pending CUDA events. */
ACCEL_API accel_result accel_prof_write_trace(accel_prof *prof);
/* Collective: every rank calls it (enabled or not); rank 0 writes the merged trace to path (NULL:
   <trace_dir>/profile_merged.json, trace_dir of rank 0). Every rank returns the same verdict. */
ACCEL_API accel_result accel_prof_merge_trace(accel_prof *prof, const char *path);
/* accel.h's accel_range_fn (prof = an accel_prof *): a finished range that another module reports, from any thread —
   accel_ckpt.h's async saves report "checkpoint_snapshot" and "checkpoint_write" through accel_ckpt_desc.on_range.
   begin/end are accel_now() seconds. Kept for the trace only (REPORTED RANGES); thread-safe; disabled: nothing. */
ACCEL_API void accel_prof_record_range(void *prof, const char *name, double begin, double end);

#ifdef __cplusplus
}
#endif
#endif /* ACCEL_PROFILE_H_INCLUDED */

#if defined(ACCEL_IMPLEMENTATION) && !defined(ACCEL__PROFILE_IMPL_DONE)
#define ACCEL__PROFILE_IMPL_DONE
/* CONTENTS (the core's services layer precedes this in the same TU: errors, the host allocator, the string builder
   and JSON strings, mkdir -p, atomic writes, the host process group)
     1. NVTX, clocks, private state, checked growth
     2. the schedule
     3. create / destroy, names
     4. CUDA events: the pool, the pending queue, reading them
     5. ranges and steps
     6. the phase table
     7. trace files and the merge (collective) */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <pthread.h>

/* ------------------------------------------------------------------- 1. NVTX, clocks, state, checked growth */
#if defined(ACCEL_WITH_CUDA) && !defined(ACCEL_NO_NVTX) && !defined(ACCEL_WITH_NVTX)
#if defined(__has_include)
#if __has_include(<nvtx3/nvToolsExt.h>)
#define ACCEL_WITH_NVTX 1
#endif
#endif
#endif
#if defined(ACCEL_WITH_NVTX) && !defined(ACCEL_NO_NVTX)
#define ACCEL__PROF_NVTX 1
#if defined(__GNUC__) || defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic" /* nvtx3 casts dlsym's object pointer to a function pointer */
#endif
#include <nvtx3/nvToolsExt.h>
#if defined(__GNUC__) || defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

static const char *const accel__prof_phase_names[ACCEL_PROF_PHASE_COUNT] = {
    "data", "forward", "backward", "grad_sync", "optimizer", "checkpoint", "logging"};

/* microseconds of CLOCK_MONOTONIC (accel_now's clock) */
static ACCEL_INLINE double accel__prof_now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

typedef struct accel__prof_rec {  /* one recorded range */
    double t0, t1;                /* host µs since creation */
    double d0, d1;                /* device µs since creation (-1: none / not read yet) */
    int64_t step;
    int32_t id, depth, row, outer; /* row: the table row of its step; outer: outermost of its id */
} accel__prof_rec;
typedef struct accel__prof_row {  /* one complete recorded step */
    int64_t step;
    double t0, t1, top;           /* µs; top = time in top-level ranges */
    size_t first, n;              /* its entries */
} accel__prof_row;
typedef struct accel__prof_ent {  /* one range id's time in one row */
    int32_t id, calls;
    double host, dev;             /* µs */
} accel__prof_ent;
typedef struct accel__prof_open { /* an open range */
    int32_t id, rec, outer, pad;
    double t0;
} accel__prof_open;
#ifdef ACCEL_WITH_CUDA
typedef struct accel__prof_evq {  /* a recorded CUDA event not read yet */
    cudaEvent_t ev;
    int32_t rec, is_end;
} accel__prof_evq;
#endif

struct accel__prof_rep { double t0, t1; char name[40]; }; /* a reported range: µs since creation */
struct accel__prof_impl {
    accel_prof_desc desc;         /* resolved; trace_dir points into dir */
    char dir[ACCEL_PROF_PATH_CAPACITY];
    double unix0_us;              /* CLOCK_REALTIME at creation */
    double mono0_us;              /* CLOCK_MONOTONIC at creation: host times count from here */
    double step_t0;               /* start of the current step (µs since creation) */
    char *names[ACCEL_PROF_MAX_NAMES];
    int nnames;
    int name_depth[ACCEL_PROF_MAX_NAMES]; /* depth at first recorded use (-1: never), for the table's indent */
    int name_order[ACCEL_PROF_MAX_NAMES]; /* ids in the order of their first recorded use: the table's rows */
    int nused;
    accel__prof_open stack[ACCEL_PROF_MAX_DEPTH];
    int open_count[ACCEL_PROF_MAX_NAMES];
    double cur_host[ACCEL_PROF_MAX_NAMES]; /* the current step's per-id sums */
    int32_t cur_calls[ACCEL_PROF_MAX_NAMES];
    int cur_ids[ACCEL_PROF_MAX_NAMES];     /* ids touched in the current step, first use first */
    int ncur;
    double cur_top;
    accel__prof_rec *recs;        /* stb_ds arrays, grown with the core's checked accel__arr_reserve */
    size_t max_ranges;
    accel__prof_row *rows;
    accel__prof_ent *ents;
    int dev_dirty;                /* device sums of the entries need recomputing */
    int nvtx_step_open;
    /* ranges reported by other modules (accel_prof_record_range, any thread): a fixed array under a mutex, so the
       reporting thread neither allocates nor waits for more than a copy */
    pthread_mutex_t rep_mu;
    int rep_mu_ok;
    struct accel__prof_rep *rep;  /* ACCEL_PROF_MAX_REPORTED of them, acc's allocator */
    int nrep;
    int64_t rep_dropped;
#ifdef ACCEL_WITH_CUDA
    cudaEvent_t *pool;            /* stb_ds: events ready for reuse */
    accel__prof_evq *q;           /* stb_ds: recorded events, read from qhead on, in record order */
    size_t qhead;
    cudaEvent_t anchor;           /* the last event read (the reference at first) */
    double anchor_us;             /* its device time, µs since creation */
#endif
};

#define ACCEL__PROF_N(a) ((size_t)stbds_arrlen(a))
/* Room for `add` more elements in a stb_ds array (the core's checked growth: stbds_arrput itself cannot fail
   softly); an allocation failure is ACCEL_ERR_OUT_OF_MEMORY with the array unchanged. */
static accel_result accel__prof_room(accel_prof *p, void **arr, size_t elem, size_t add, const char *what) {
    if (accel__arr_reserve(arr, elem, add) == 0) return ACCEL_OK;
    return ACCEL__FAIL(p->acc, ACCEL_ERR_OUT_OF_MEMORY, "%s: out of host memory (profiler records)", what);
}
#define ACCEL__PROF_ROOM(p, arr, add, what) accel__prof_room((p), (void **)&(arr), sizeof *(arr), (size_t)(add), (what))

/* -------------------------------------------------------------------------------------------- 2. schedule */
static int accel__prof_schedule_valid(const accel_prof_desc *d) {
    if (d->wait < 0 || d->warmup < 0 || d->active < 0 || d->repeat < 0 || d->skip_first < 0) return 0;
    if (d->active == 0 && (d->wait || d->warmup || d->repeat || d->skip_first)) return 0;
    return 1;
}

ACCEL__DEF accel_prof_action accel_prof_schedule_action(const accel_prof_desc *desc, int64_t step) {
    int64_t n, s, m;
    if (!desc || (!desc->wait && !desc->warmup && !desc->active && !desc->repeat && !desc->skip_first))
        return ACCEL_PROF_RECORD; /* torch's default schedule: always RECORD */
    if (!accel__prof_schedule_valid(desc) || step < 0) return ACCEL_PROF_NONE;
    if (step < desc->skip_first) return ACCEL_PROF_NONE;
    s = step - desc->skip_first;
    n = (int64_t)desc->wait + desc->warmup + desc->active;
    if (desc->repeat > 0 && s / n >= desc->repeat) return ACCEL_PROF_NONE; /* s >= repeat * n, without overflow */
    m = s % n;
    if (m < desc->wait) return ACCEL_PROF_NONE;
    if (m < (int64_t)desc->wait + desc->warmup) return ACCEL_PROF_WARMUP;
    return m < n - 1 ? ACCEL_PROF_RECORD : ACCEL_PROF_RECORD_AND_SAVE;
}

static int accel__prof_records(const accel_prof *p, int64_t step) {
    accel_prof_action a = accel_prof_schedule_action(&p->impl->desc, step);
    return a == ACCEL_PROF_RECORD || a == ACCEL_PROF_RECORD_AND_SAVE;
}

/* ---------------------------------------------------------------------------------- 3. create / destroy */
static accel_result accel__prof_need(accel_prof *p, const char *what) {
    if (!p || !p->acc || !p->impl)
        return ACCEL__FAIL(p ? p->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, "%s: profiler is NULL or not created", what);
    return ACCEL_OK;
}

static accel_result accel__prof_add_name(accel_prof *p, const char *name, int *id) {
    struct accel__prof_impl *im = p->impl;
    size_t n = strlen(name);
    char *copy;
    if (im->nnames >= ACCEL_PROF_MAX_NAMES)
        return ACCEL__FAIL(p->acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_prof_range_id(\"%.200s\"): already %d names "
                           "(ACCEL_PROF_MAX_NAMES)", name, ACCEL_PROF_MAX_NAMES);
    copy = (char *)accel_host_alloc(p->acc, n + 1);
    if (!copy) return accel__fail_wrap(p->acc, ACCEL_ERR_OUT_OF_MEMORY, "accel_prof_range_id");
    memcpy(copy, name, n + 1);
    im->names[im->nnames] = copy;
    im->name_depth[im->nnames] = -1;
    *id = im->nnames++;
    return ACCEL_OK;
}

#ifdef ACCEL_WITH_CUDA
static accel_result accel__prof_cuda_start(accel_prof *p);
static void accel__prof_cuda_free(accel_prof *p);
#endif

ACCEL__DEF accel_result accel_prof_create(accel *acc, const accel_prof_desc *desc, accel_prof **out) {
    accel_prof_desc d;
    accel_prof *p;
    struct accel__prof_impl *im;
    struct timespec rt;
    accel_result r;
    int i;
    if (out) *out = NULL;
    if (!acc) return ACCEL__FAIL(NULL, ACCEL_ERR_INVALID_ARGUMENT, "accel_prof_create: acc is NULL");
    if (!out) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_prof_create: out is NULL");
    if (acc->num_processes < 1)
        return ACCEL__FAIL(acc, ACCEL_ERR_STATE, "accel_prof_create: the Accelerator is not initialized (accel_init)");
    memset(&d, 0, sizeof d);
    if (desc) d = *desc;
    if (!accel__prof_schedule_valid(&d))
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                           "accel_prof_desc schedule wait=%d warmup=%d active=%d repeat=%d skip_first=%d: every value "
                           "must be >= 0 and active > 0 when any is set (torch.profiler.schedule's rule)",
                           d.wait, d.warmup, d.active, d.repeat, d.skip_first);
    if (d.max_ranges < 0)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_prof_desc.max_ranges = %lld is negative",
                           (long long)d.max_ranges);
    if (d.trace_dir && (!*d.trace_dir || strlen(d.trace_dir) > ACCEL_PROF_PATH_CAPACITY - 64))
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                           "accel_prof_desc.trace_dir is empty or longer than %d bytes", ACCEL_PROF_PATH_CAPACITY - 64);
    p = (accel_prof *)accel_host_alloc(acc, sizeof *p);
    if (!p) return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "accel_prof_create");
    memset(p, 0, sizeof *p);
    im = (struct accel__prof_impl *)accel_host_alloc(acc, sizeof *im);
    if (!im) {
        accel_host_free(acc, p);
        return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "accel_prof_create");
    }
    memset(im, 0, sizeof *im);
    p->acc = acc;
    p->impl = im;
    im->desc = d;
    im->max_ranges = d.max_ranges > 0 ? (size_t)d.max_ranges : (size_t)ACCEL_PROF_DEFAULT_MAX_RANGES;
    for (i = 0; i < ACCEL_PROF_PHASE_COUNT; ++i) {
        int id;
        if ((r = accel__prof_add_name(p, accel__prof_phase_names[i], &id)) != ACCEL_OK) {
            accel_prof_destroy(p);
            return r;
        }
    }
    if (d.trace_dir) {
        accel__fmt(im->dir, sizeof im->dir, "%s", d.trace_dir);
        im->desc.trace_dir = im->dir;
        accel__fmt(p->trace_file, sizeof p->trace_file, "%s/profile_%d.json", im->dir, acc->process_index);
    } else {
        im->desc.trace_dir = NULL;
    }
    p->enabled = !d.disabled;
    if (p->enabled) {
        /* Room up front, so growing the record arrays (a realloc and a copy) does not land inside the first
           recorded steps as unaccounted time; later growth doubles and is rare. */
        size_t nrec = im->max_ranges < 1024 ? im->max_ranges : 1024;
        if ((r = ACCEL__PROF_ROOM(p, im->recs, nrec, "accel_prof_create")) != ACCEL_OK ||
            (r = ACCEL__PROF_ROOM(p, im->rows, 64, "accel_prof_create")) != ACCEL_OK ||
            (r = ACCEL__PROF_ROOM(p, im->ents, 512, "accel_prof_create")) != ACCEL_OK) {
            accel_prof_destroy(p);
            return r;
        }
        im->rep = (struct accel__prof_rep *)accel_host_alloc(acc, sizeof *im->rep * ACCEL_PROF_MAX_REPORTED);
        if (!im->rep) {
            accel_prof_destroy(p);
            return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "accel_prof_create");
        }
        if (pthread_mutex_init(&im->rep_mu, NULL) != 0) {
            accel_prof_destroy(p);
            return ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "accel_prof_create: a mutex");
        }
        im->rep_mu_ok = 1;
    }
    if (p->enabled && d.trace_dir) {
        char failed[512];
        if (accel__mkdir_p(im->dir, failed, sizeof failed) != 0) {
            int e = errno;
            r = ACCEL__FAIL(acc, ACCEL_ERR_IO, "accel_prof_create: cannot create trace_dir %.400s (%.300s: %s)",
                            im->dir, failed[0] ? failed : im->dir,
                            e == ENOTDIR ? "exists and is not a directory" : strerror(e));
            accel_prof_destroy(p);
            return r;
        }
    }
#ifdef ACCEL_WITH_CUDA
    if (p->enabled && acc->device >= 0 && !d.no_device_timing) {
        if ((r = accel__prof_cuda_start(p)) != ACCEL_OK) {
            accel_prof_destroy(p);
            return r;
        }
        p->device_timing = 1;
    }
#endif
#ifdef ACCEL__PROF_NVTX
    p->nvtx = p->enabled && !d.no_nvtx;
#endif
    clock_gettime(CLOCK_REALTIME, &rt);
    im->mono0_us = accel__prof_now_us();
    im->unix0_us = (double)rt.tv_sec * 1e6 + (double)rt.tv_nsec * 1e-3;
#ifdef ACCEL_WITH_CUDA
    if (p->device_timing) im->anchor_us -= im->mono0_us; /* absolute → µs since creation (<= 0) */
#endif
    im->step_t0 = 0.0;
    p->step = 0;
    p->recording = p->enabled && accel__prof_records(p, 0);
#ifdef ACCEL__PROF_NVTX
    if (p->nvtx && p->recording) {
        nvtxRangePushA("ProfilerStep#0");
        im->nvtx_step_open = 1;
    }
#endif
    *out = p;
    return ACCEL_OK;
}

ACCEL__DEF void accel_prof_destroy(accel_prof *p) {
    accel *acc;
    struct accel__prof_impl *im;
    int i;
    if (!p) return;
    acc = p->acc;
    im = p->impl;
    if (im) {
#ifdef ACCEL__PROF_NVTX
        for (i = 0; p->nvtx && p->recording && i < p->depth; ++i) nvtxRangePop();
        if (im->nvtx_step_open) nvtxRangePop();
#endif
#ifdef ACCEL_WITH_CUDA
        accel__prof_cuda_free(p);
#endif
        for (i = 0; i < im->nnames; ++i) accel_host_free(acc, im->names[i]);
        if (im->rep_mu_ok) pthread_mutex_destroy(&im->rep_mu);
        accel_host_free(acc, im->rep);
        stbds_arrfree(im->recs);
        stbds_arrfree(im->rows);
        stbds_arrfree(im->ents);
        accel_host_free(acc, im);
    }
    accel_host_free(acc, p);
}

ACCEL__DEF accel_result accel_prof_range_id(accel_prof *p, const char *name, int *id) {
    accel_result r;
    size_t n, bad;
    int i;
    if ((r = accel__prof_need(p, "accel_prof_range_id")) != ACCEL_OK) return r;
    if (!name || !id) return ACCEL__FAIL(p->acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_prof_range_id: name or id is NULL");
    n = strlen(name);
    if (n == 0 || n > 200)
        return ACCEL__FAIL(p->acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_prof_range_id: a name is 1..200 bytes (got %zu)",
                           n);
    if (!accel__utf8_valid((const unsigned char *)name, n, &bad))
        return ACCEL__FAIL(p->acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_prof_range_id: name is not UTF-8 (byte %zu)",
                           bad);
    for (i = 0; i < p->impl->nnames; ++i)
        if (!strcmp(p->impl->names[i], name)) { *id = i; return ACCEL_OK; }
    return accel__prof_add_name(p, name, id);
}

ACCEL__DEF const char *accel_prof_range_name(const accel_prof *p, int id) {
    if (!p || !p->impl || id < 0 || id >= p->impl->nnames) return NULL;
    return p->impl->names[id];
}

/* ------------------------------------------------------------------------------------------ 4. CUDA events */
#ifdef ACCEL_WITH_CUDA
static accel_result accel__prof_cuda_start(accel_prof *p) {
    struct accel__prof_impl *im = p->impl;
    accel *acc = p->acc;
    cudaStream_t s = (cudaStream_t)acc->stream;
    ACCEL__CUDA_CHECK(acc, cudaStreamSynchronize(s)); /* an idle stream: the reference event runs at once */
    ACCEL__CUDA_CHECK(acc, cudaEventCreate(&im->anchor));
    {
        cudaError_t e = cudaEventRecord(im->anchor, s);
        if (e == cudaSuccess) e = cudaEventSynchronize(im->anchor);
        if (e != cudaSuccess) {
            (void)cudaEventDestroy(im->anchor);
            im->anchor = NULL;
            return ACCEL__FAIL(acc, ACCEL_ERR_CUDA, "accel_prof_create: reference event on acc->stream: %s",
                               cudaGetErrorString(e));
        }
    }
    /* The reference event ran before this host time (create turns it into µs since creation): every later device
       time is then placed no earlier than the host moment its event really ran, which is after creation, so device
       timestamps are >= 0 (late by at most the wake-up latency of the synchronize above). */
    im->anchor_us = accel__prof_now_us();
    return ACCEL_OK;
}

static void accel__prof_cuda_free(accel_prof *p) {
    struct accel__prof_impl *im = p->impl;
    size_t i;
    for (i = im->qhead; i < ACCEL__PROF_N(im->q); ++i) (void)cudaEventDestroy(im->q[i].ev);
    for (i = 0; i < ACCEL__PROF_N(im->pool); ++i) (void)cudaEventDestroy(im->pool[i]);
    if (im->anchor) (void)cudaEventDestroy(im->anchor);
    im->anchor = NULL;
    im->qhead = 0;
    stbds_arrfree(im->q);
    stbds_arrfree(im->pool);
}

/* Device timing failed after create (a sticky CUDA error): turn it off and say so once; the host figures stay. */
static void accel__prof_cuda_broken(accel_prof *p, const char *what, cudaError_t e) {
    accel_log(p->acc, ACCEL_LOG_WARN, "profiler: %s failed (%s): device timing is off from here on", what,
              cudaGetErrorString(e));
    (void)cudaGetLastError();
    p->device_timing = 0;
}

/* Records an event for record `rec` (begin or end) on acc->stream; the queue has room (reserved by the caller). */
static accel_result accel__prof_cuda_mark(accel_prof *p, int32_t rec, int is_end) {
    struct accel__prof_impl *im = p->impl;
    accel__prof_evq item;
    cudaEvent_t ev;
    cudaError_t e;
    if (ACCEL__PROF_N(im->pool) > 0) {
        ev = stbds_arrpop(im->pool);
    } else {
        e = cudaEventCreate(&ev);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            return ACCEL__FAIL(p->acc, ACCEL_ERR_CUDA, "profiler: cudaEventCreate failed: %s", cudaGetErrorString(e));
        }
    }
    e = cudaEventRecord(ev, (cudaStream_t)p->acc->stream);
    if (e != cudaSuccess) {
        stbds_arrput(im->pool, ev); /* no growth: the pool has room for every event (accel__prof_cuda_reserve) */
        (void)cudaGetLastError();
        return ACCEL__FAIL(p->acc, ACCEL_ERR_CUDA, "profiler: cudaEventRecord on acc->stream failed: %s",
                           cudaGetErrorString(e));
    }
    item.ev = ev;
    item.rec = rec;
    item.is_end = is_end;
    stbds_arrput(im->q, item); /* no growth: reserved */
    return ACCEL_OK;
}

/* Room for one more queued event and for returning every event to the pool. */
static accel_result accel__prof_cuda_reserve(accel_prof *p) {
    struct accel__prof_impl *im = p->impl;
    accel_result r;
    if (im->qhead > 0 && ACCEL__PROF_N(im->q) == stbds_arrcap(im->q)) { /* slide the unread tail to the front */
        stbds_arrdeln(im->q, 0, im->qhead);
        im->qhead = 0;
    }
    if ((r = ACCEL__PROF_ROOM(p, im->q, 1, "profiler")) != ACCEL_OK) return r;
    return ACCEL__PROF_ROOM(p, im->pool, ACCEL__PROF_N(im->q) - im->qhead + 2, "profiler");
}

/* Reads queued events in record order: wait = 0 stops at the first one not finished (cudaEventQuery), wait = 1
   waits for each. Each device time is the previous event's plus the elapsed time between the two. */
static void accel__prof_cuda_read(accel_prof *p, int wait) {
    struct accel__prof_impl *im = p->impl;
    while (p->device_timing && im->qhead < ACCEL__PROF_N(im->q)) {
        accel__prof_evq *e = &im->q[im->qhead];
        cudaError_t ce = wait ? cudaEventSynchronize(e->ev) : cudaEventQuery(e->ev);
        float ms = 0.0f;
        double t;
        if (ce == cudaErrorNotReady) break;
        if (ce == cudaSuccess) ce = cudaEventElapsedTime(&ms, im->anchor, e->ev);
        if (ce != cudaSuccess) {
            accel__prof_cuda_broken(p, wait ? "cudaEventSynchronize" : "cudaEventQuery", ce);
            return;
        }
        t = im->anchor_us + (double)ms * 1000.0;
        if (e->is_end) im->recs[e->rec].d1 = t;
        else im->recs[e->rec].d0 = t;
        stbds_arrput(im->pool, im->anchor); /* no growth: reserved */
        im->anchor = e->ev;
        im->anchor_us = t;
        im->qhead++;
        im->dev_dirty = 1;
    }
    if (im->q && im->qhead == ACCEL__PROF_N(im->q)) {
        stbds_arrdeln(im->q, 0, im->qhead); /* all read: empty it (no allocation) */
        im->qhead = 0;
    }
}
#endif

/* Everything recorded so far, device times included (waits for the events: only reporting calls do this). */
static void accel__prof_settle(accel_prof *p) {
#ifdef ACCEL_WITH_CUDA
    if (p->device_timing) accel__prof_cuda_read(p, 1);
#else
    (void)p;
#endif
}

/* ------------------------------------------------------------------------------------ 5. ranges and steps */
static accel_result accel__prof_bad_id(accel_prof *p, const char *what, int id) {
    return ACCEL__FAIL(p->acc, ACCEL_ERR_INVALID_ARGUMENT, "%s(%d): not a range id (phases 0..%d, user ids from "
                       "accel_prof_range_id; %d ids exist)", what, id, ACCEL_PROF_PHASE_COUNT - 1, p->impl->nnames);
}

ACCEL__DEF accel_result accel_prof_range_begin(accel_prof *p, int id) {
    struct accel__prof_impl *im;
    accel__prof_open *o;
    accel_result r;
    int32_t rec = -1;
    double t;
    if ((r = accel__prof_need(p, "accel_prof_begin")) != ACCEL_OK) return r;
    if (!p->enabled) return ACCEL_OK;
    im = p->impl;
    if (id < 0 || id >= im->nnames) return accel__prof_bad_id(p, "accel_prof_begin", id);
    if (p->depth >= ACCEL_PROF_MAX_DEPTH)
        return ACCEL__FAIL(p->acc, ACCEL_ERR_STATE, "accel_prof_begin(%s): %d ranges are open already "
                           "(ACCEL_PROF_MAX_DEPTH; is an accel_prof_end missing?)", im->names[id], p->depth);
    o = &im->stack[p->depth];
    if (!p->recording) { /* checked for balance only */
        o->id = id;
        o->rec = -1;
        o->outer = 0;
        p->depth++;
        return ACCEL_OK;
    }
    if (ACCEL__PROF_N(im->recs) < im->max_ranges) {
        if ((r = ACCEL__PROF_ROOM(p, im->recs, 1, "accel_prof_begin")) != ACCEL_OK) return r;
#ifdef ACCEL_WITH_CUDA
        if (p->device_timing) {
            if ((r = accel__prof_cuda_reserve(p)) != ACCEL_OK) return r;
            if ((r = accel__prof_cuda_mark(p, (int32_t)ACCEL__PROF_N(im->recs), 0)) != ACCEL_OK) return r;
        }
#endif
        rec = (int32_t)ACCEL__PROF_N(im->recs);
        stbds_arrsetlen(im->recs, (size_t)rec + 1); /* no growth: reserved */
    } else if (p->dropped_ranges++ == 0) {
        accel_log(p->acc, ACCEL_LOG_WARN, "profiler: more than %zu ranges recorded (max_ranges): later ranges count in "
                  "the phase table but are left out of the trace", im->max_ranges);
    }
    t = accel__prof_now_us() - im->mono0_us;
    o->id = id;
    o->rec = rec;
    o->outer = im->open_count[id] == 0;
    o->t0 = t;
    if (rec >= 0) {
        accel__prof_rec *R = &im->recs[rec];
        R->t0 = t;
        R->t1 = -1.0;
        R->d0 = R->d1 = -1.0;
        R->step = p->step;
        R->id = id;
        R->depth = p->depth;
        R->row = (int32_t)ACCEL__PROF_N(im->rows); /* the row this step gets if it completes */
        R->outer = o->outer;
    }
    if (im->name_depth[id] < 0) {
        im->name_depth[id] = p->depth;
        im->name_order[im->nused++] = id;
    }
    im->open_count[id]++;
    p->depth++;
#ifdef ACCEL__PROF_NVTX
    if (p->nvtx) nvtxRangePushA(im->names[id]);
#endif
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_prof_range_end(accel_prof *p, int id) {
    struct accel__prof_impl *im;
    accel__prof_open *o;
    accel_result r;
    double t, dur;
    if ((r = accel__prof_need(p, "accel_prof_end")) != ACCEL_OK) return r;
    if (!p->enabled) return ACCEL_OK;
    im = p->impl;
    if (id < 0 || id >= im->nnames) return accel__prof_bad_id(p, "accel_prof_end", id);
    if (p->depth == 0)
        return ACCEL__FAIL(p->acc, ACCEL_ERR_STATE, "accel_prof_end(%s): no range is open", im->names[id]);
    o = &im->stack[p->depth - 1];
    if (o->id != id)
        return ACCEL__FAIL(p->acc, ACCEL_ERR_STATE, "accel_prof_end(%s): the innermost open range is %s (ranges close "
                           "innermost first)", im->names[id], im->names[o->id]);
    if (!p->recording) {
        p->depth--;
        return ACCEL_OK;
    }
#ifdef ACCEL_WITH_CUDA
    if (p->device_timing && o->rec >= 0) {
        if ((r = accel__prof_cuda_reserve(p)) != ACCEL_OK) return r;
        if ((r = accel__prof_cuda_mark(p, o->rec, 1)) != ACCEL_OK) return r;
    }
#endif
    t = accel__prof_now_us() - im->mono0_us;
    dur = t - o->t0;
    p->depth--;
    im->open_count[id]--;
    if (o->outer) {
        if (im->cur_calls[id] == 0) im->cur_ids[im->ncur++] = id;
        im->cur_host[id] += dur;
        im->cur_calls[id]++;
    }
    if (p->depth == 0) im->cur_top += dur;
    if (o->rec >= 0) im->recs[o->rec].t1 = t;
#ifdef ACCEL__PROF_NVTX
    if (p->nvtx) nvtxRangePop();
#endif
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_prof_step(accel_prof *p) {
    struct accel__prof_impl *im;
    accel_result r;
    accel_prof_action ended;
    double t;
    int k;
    if ((r = accel__prof_need(p, "accel_prof_step")) != ACCEL_OK) return r;
    if (!p->enabled) return ACCEL_OK;
    im = p->impl;
    if (p->depth > 0)
        return ACCEL__FAIL(p->acc, ACCEL_ERR_STATE, "accel_prof_step: %d range(s) still open (innermost %s): close "
                           "them first (a range does not span a step boundary)", p->depth,
                           im->names[im->stack[p->depth - 1].id]);
    if (p->recording) { /* before the boundary's clock read: growth is not charged to the next step */
        if ((r = ACCEL__PROF_ROOM(p, im->rows, 1, "accel_prof_step")) != ACCEL_OK) return r;
        if ((r = ACCEL__PROF_ROOM(p, im->ents, im->ncur, "accel_prof_step")) != ACCEL_OK) return r;
    }
    t = accel__prof_now_us() - im->mono0_us;
    if (p->recording) {
        accel__prof_row row;
        row.step = p->step;
        row.t0 = im->step_t0;
        row.t1 = t;
        row.top = im->cur_top;
        row.first = ACCEL__PROF_N(im->ents);
        row.n = (size_t)im->ncur;
        for (k = 0; k < im->ncur; ++k) { /* no growth below: reserved */
            accel__prof_ent e;
            int id = im->cur_ids[k];
            e.id = id;
            e.calls = im->cur_calls[id];
            e.host = im->cur_host[id];
            e.dev = 0.0;
            stbds_arrput(im->ents, e);
            im->cur_host[id] = 0.0;
            im->cur_calls[id] = 0;
        }
        stbds_arrput(im->rows, row);
        im->ncur = 0;
        im->cur_top = 0.0;
        im->dev_dirty = 1;
        p->recorded_steps = (int64_t)ACCEL__PROF_N(im->rows);
#ifdef ACCEL__PROF_NVTX
        if (im->nvtx_step_open) {
            nvtxRangePop();
            im->nvtx_step_open = 0;
        }
#endif
    }
    ended = accel_prof_schedule_action(&im->desc, p->step);
    p->step++;
    im->step_t0 = t;
    p->recording = accel__prof_records(p, p->step);
#ifdef ACCEL__PROF_NVTX
    if (p->nvtx && p->recording) {
        char nm[48];
        accel__fmt(nm, sizeof nm, "ProfilerStep#%lld", (long long)p->step);
        nvtxRangePushA(nm);
        im->nvtx_step_open = 1;
    }
#endif
#ifdef ACCEL_WITH_CUDA
    if (p->device_timing) accel__prof_cuda_read(p, 0);
#endif
    if (ended == ACCEL_PROF_RECORD_AND_SAVE && im->desc.on_trace_ready) {
        im->desc.on_trace_ready(p, im->desc.user_data);
        /* as torch's step(): the next ProfilerStep range opens after the export, which it does not include */
        im->step_t0 = accel__prof_now_us() - im->mono0_us;
    }
    return ACCEL_OK;
}

/* ------------------------------------------------------------------------------------- 6. the phase table */
/* Device sums of every (row, id) entry from the records (after the events were read). */
static void accel__prof_dev_sums(accel_prof *p) {
    struct accel__prof_impl *im = p->impl;
    size_t i, k;
    if (!im->dev_dirty) return;
    for (i = 0; i < ACCEL__PROF_N(im->ents); ++i) im->ents[i].dev = 0.0;
    for (i = 0; i < ACCEL__PROF_N(im->recs); ++i) {
        const accel__prof_rec *R = &im->recs[i];
        const accel__prof_row *row;
        if (!R->outer || R->row < 0 || (size_t)R->row >= ACCEL__PROF_N(im->rows) || R->d0 < 0 || R->d1 < 0) continue;
        row = &im->rows[R->row];
        for (k = row->first; k < row->first + row->n; ++k)
            if (im->ents[k].id == R->id) { im->ents[k].dev += R->d1 - R->d0; break; }
    }
    im->dev_dirty = 0;
}

static void accel__prof_stats_of(accel_prof *p, int id, accel_prof_stats *s) {
    struct accel__prof_impl *im = p->impl;
    double total_step = 0.0, dev_total = 0.0;
    size_t i, k, nrows = ACCEL__PROF_N(im->rows);
    memset(s, 0, sizeof *s);
    s->name = id == ACCEL_PROF_STEP ? "step" : id == ACCEL_PROF_OTHER ? "(other)" : im->names[id];
    s->steps = (int64_t)nrows;
    s->device_mean_ms = s->device_total_ms = -1.0;
    for (i = 0; i < nrows; ++i) {
        const accel__prof_row *row = &im->rows[i];
        double step_us = row->t1 - row->t0, v = 0.0, dv = 0.0;
        int seen = 0, calls = 0;
        total_step += step_us;
        if (id == ACCEL_PROF_STEP) { v = step_us; seen = 1; calls = 1; }
        else if (id == ACCEL_PROF_OTHER) { v = step_us - row->top; if (v < 0) v = 0; seen = 1; calls = 1; }
        else {
            for (k = row->first; k < row->first + row->n; ++k)
                if (im->ents[k].id == id) {
                    v = im->ents[k].host;
                    dv = im->ents[k].dev;
                    calls = im->ents[k].calls;
                    seen = 1;
                    break;
                }
        }
        s->total_ms += v * 1e-3;
        dev_total += dv * 1e-3;
        if (i == 0 || v * 1e-3 < s->min_ms) s->min_ms = v * 1e-3;
        if (i == 0 || v * 1e-3 > s->max_ms) s->max_ms = v * 1e-3;
        s->steps_with += seen;
        s->calls += calls;
    }
    if (nrows > 0) s->mean_ms = s->total_ms / (double)nrows;
    s->share = total_step > 0 ? s->total_ms / (total_step * 1e-3) : 0.0;
    if (p->device_timing && id >= 0) {
        s->device_total_ms = dev_total;
        s->device_mean_ms = nrows > 0 ? dev_total / (double)nrows : 0.0;
    }
}

ACCEL__DEF accel_result accel_prof_phase_stats(accel_prof *p, int id, accel_prof_stats *out) {
    accel_result r;
    if ((r = accel__prof_need(p, "accel_prof_phase_stats")) != ACCEL_OK) return r;
    if (!out) return ACCEL__FAIL(p->acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_prof_phase_stats: out is NULL");
    if (id != ACCEL_PROF_STEP && id != ACCEL_PROF_OTHER && (id < 0 || id >= p->impl->nnames))
        return accel__prof_bad_id(p, "accel_prof_phase_stats", id);
    accel__prof_settle(p);
    accel__prof_dev_sums(p);
    accel__prof_stats_of(p, id, out);
    return ACCEL_OK;
}

static void accel__prof_table_line(accel__sb *b, const accel_prof_stats *s, int indent, int device) {
    char name[64];
    accel__fmt(name, sizeof name, "%*s%.*s", indent, "", 60 - indent, s->name);
    accel__sb_printf(b, "%-26s %10.3f %10.3f %10.3f %6.1f%% %7lld", name, s->mean_ms, s->min_ms, s->max_ms,
                     100.0 * s->share, (long long)s->steps_with);
    if (device && s->device_mean_ms >= 0) accel__sb_printf(b, " %10.3f", s->device_mean_ms);
    accel__sb_puts(b, "\n");
}

ACCEL__DEF accel_result accel_prof_print_table(accel_prof *p, FILE *out) {
    struct accel__prof_impl *im;
    accel_prof_stats s;
    accel__sb b;
    accel_result r;
    int id, k;
    if ((r = accel__prof_need(p, "accel_prof_print_table")) != ACCEL_OK) return r;
    if (!p->enabled) return ACCEL_OK;
    im = p->impl;
    if (!out) out = stdout;
    accel__prof_settle(p);
    accel__prof_dev_sums(p);
    accel__sb_init(&b, p->acc);
    accel__sb_printf(&b, "accel profile (rank %d): %lld recorded steps (", p->acc->process_index,
                     (long long)p->recorded_steps);
    if (p->step > 0) accel__sb_printf(&b, "steps 0-%lld", (long long)(p->step - 1));
    else accel__sb_printf(&b, "no step ended yet"); /* not "steps 0-0": that would claim one step */
    if (im->desc.active > 0)
        accel__sb_printf(&b, "; schedule wait %d, warmup %d, active %d, repeat %d, skip_first %d", im->desc.wait,
                         im->desc.warmup, im->desc.active, im->desc.repeat, im->desc.skip_first);
    accel__sb_printf(&b, ")%s\n", p->dropped_ranges ? " [some ranges left out of the trace: max_ranges]" : "");
    accel__sb_printf(&b, "%-26s %10s %10s %10s %7s %7s%s\n", "range", "mean ms", "min ms", "max ms", "share", "steps",
                     p->device_timing ? "  device ms" : "");
    accel__prof_stats_of(p, ACCEL_PROF_STEP, &s);
    accel__prof_table_line(&b, &s, 0, 0);
    for (k = 0; k < im->nused; ++k) { /* in the order they first ran */
        id = im->name_order[k];
        accel__prof_stats_of(p, id, &s);
        if (s.steps_with == 0) continue;
        accel__prof_table_line(&b, &s, 2 * (im->name_depth[id] > 0 ? im->name_depth[id] : 0), p->device_timing);
    }
    accel__prof_stats_of(p, ACCEL_PROF_OTHER, &s);
    accel__prof_table_line(&b, &s, 0, 0);
    if (b.oom) {
        accel__sb_free(&b);
        return accel__fail_wrap(p->acc, ACCEL_ERR_OUT_OF_MEMORY, "accel_prof_print_table");
    }
    r = fwrite(b.p, 1, b.n, out) == b.n && fflush(out) == 0
            ? ACCEL_OK
            : ACCEL__FAIL(p->acc, ACCEL_ERR_IO, "accel_prof_print_table: cannot write the table: %s", strerror(errno));
    accel__sb_free(&b);
    return r;
}

/* ------------------------------------------------------------------------------ 7. trace files, the merge */
static void accel__prof_event(accel__sb *b, const char *name, const char *cat, double ts, double dur, int pid, int tid,
                              int64_t step) {
    accel__sb_puts(b, ",\n{\"name\":");
    accel__sb_json_str(b, name, strlen(name), 0);
    accel__sb_printf(
        b, ",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,\"tid\":%d,\"args\":{\"step\":%lld}}", cat,
        ts, dur < 0 ? 0.0 : dur, pid, tid, (long long)step);
}

static int accel__prof_rep_cmp(const void *a, const void *b) {
    double x = ((const struct accel__prof_rep *)a)->t0, y = ((const struct accel__prof_rep *)b)->t0;
    return x < y ? -1 : x > y;
}
/* This rank's events (each preceded by ",\n"), times shifted by offset_us. */
static void accel__prof_events_json(accel_prof *p, accel__sb *b, double offset_us) {
    struct accel__prof_impl *im = p->impl;
    int pid = p->acc->process_index;
    size_t i, row = 0, nrecs = ACCEL__PROF_N(im->recs), nrows = ACCEL__PROF_N(im->rows);
    char nm[48];
    accel__sb_printf(b,
                     ",\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"rank %d\"}}",
                     pid, pid);
    accel__sb_printf(
        b, ",\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"sort_index\":%d}}", pid,
        pid);
    accel__sb_printf(b, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"host\"}}",
                     pid);
    if (p->device_timing)
        accel__sb_printf(
            b, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":1,\"args\":{\"name\":\"cuda stream\"}}",
            pid);
    /* host: the step spans and the ranges, merged in begin order (a step starts before its ranges) */
    for (i = 0; i <= nrecs; ++i) {
        const accel__prof_rec *R = i < nrecs ? &im->recs[i] : NULL;
        while (row < nrows && (!R || im->rows[row].t0 <= R->t0)) {
            const accel__prof_row *w = &im->rows[row++];
            accel__fmt(nm, sizeof nm, "ProfilerStep#%lld", (long long)w->step);
            accel__prof_event(b, nm, "step", w->t0 + offset_us, w->t1 - w->t0, pid, 0, w->step);
        }
        if (!R || R->t1 < 0) continue; /* still open (profiler reported mid-range) */
        accel__prof_event(b, im->names[R->id], R->id < ACCEL_PROF_PHASE_COUNT ? "phase" : "range", R->t0 + offset_us,
                          R->t1 - R->t0, pid, 0, R->step);
    }
    for (i = 0; p->device_timing && i < nrecs; ++i) {
        const accel__prof_rec *R = &im->recs[i];
        if (R->d0 < 0 || R->d1 < 0) continue;
        accel__prof_event(b, im->names[R->id], "device", R->d0 + offset_us, R->d1 - R->d0, pid, 1, R->step);
    }
    if (im->rep_mu_ok) { /* reported ranges: their own track, in begin order */
        pthread_mutex_lock(&im->rep_mu);
        if (im->nrep > 1) qsort(im->rep, (size_t)im->nrep, sizeof *im->rep, accel__prof_rep_cmp);
        if (im->nrep)
            accel__sb_printf(
                b, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":2,\"args\":{\"name\":\"reported\"}}",
                pid);
        for (i = 0; i < (size_t)im->nrep; ++i) {
            const struct accel__prof_rep *R = &im->rep[i];
            accel__sb_puts(b, ",\n{\"name\":");
            accel__sb_json_str(b, R->name, strlen(R->name), 0);
            accel__sb_printf(b, ",\"cat\":\"reported\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,\"tid\":2}",
                             R->t0 + offset_us, R->t1 > R->t0 ? R->t1 - R->t0 : 0.0, pid);
        }
        pthread_mutex_unlock(&im->rep_mu);
    }
}

/* ------------------------------------------------------------------------------------- reported ranges */
ACCEL__DEF void accel_prof_record_range(void *prof, const char *name, double begin, double end) {
    accel_prof *p = (accel_prof *)prof;
    struct accel__prof_impl *im;
    if (!p || !p->enabled || !p->impl || !p->impl->rep_mu_ok || !name) return;
    im = p->impl;
    pthread_mutex_lock(&im->rep_mu);
    if (im->nrep < ACCEL_PROF_MAX_REPORTED) {
        struct accel__prof_rep *R = &im->rep[im->nrep++];
        R->t0 = begin * 1e6 - im->mono0_us; /* accel_now's clock, µs since creation */
        R->t1 = end * 1e6 - im->mono0_us;
        accel__fmt(R->name, sizeof R->name, "%s", name);
    } else {
        im->rep_dropped++;
    }
    pthread_mutex_unlock(&im->rep_mu);
}

static void accel__prof_other_data(accel_prof *p, accel__sb *b, int merged, int nprocs, double start_us) {
    const accel_prof_desc *d = &p->impl->desc;
    accel__sb_printf(b, "\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":{\"accel_version\":\"%s\",",
                     accel_version_string());
    if (merged) accel__sb_printf(b, "\"merged\":true,\"num_processes\":%d,", nprocs);
    else
        accel__sb_printf(
            b, "\"rank\":%d,\"num_processes\":%d,\"steps\":%lld,\"recorded_steps\":%lld,\"dropped_ranges\":%lld,"
            "\"dropped_reported\":%lld,",
            p->acc->process_index, p->acc->num_processes, (long long)p->step, (long long)p->recorded_steps,
            (long long)p->dropped_ranges, (long long)p->impl->rep_dropped);
    accel__sb_printf(b, "\"start_unix_us\":%.3f,\"schedule\":{\"wait\":%d,\"warmup\":%d,\"active\":%d,\"repeat\":%d,"
                     "\"skip_first\":%d}}}\n", start_us, d->wait, d->warmup, d->active, d->repeat, d->skip_first);
}

/* {"traceEvents":[ + the events (text of ",\n{...}" items: the first comma is dropped) */
static void accel__prof_open_json(accel__sb *b, const char *events, size_t n) {
    accel__sb_puts(b, "{\"traceEvents\":[\n");
    if (n >= 2) accel__sb_add(b, events + 2, n - 2);
}

ACCEL__DEF accel_result accel_prof_write_trace(accel_prof *p) {
    accel__sb b, ev;
    accel_result r;
    if ((r = accel__prof_need(p, "accel_prof_write_trace")) != ACCEL_OK) return r;
    if (!p->enabled) return ACCEL_OK;
    if (!p->impl->desc.trace_dir)
        return ACCEL__FAIL(p->acc, ACCEL_ERR_STATE, "accel_prof_write_trace: the profiler has no trace_dir");
    accel__prof_settle(p);
    accel__sb_init(&ev, p->acc);
    accel__prof_events_json(p, &ev, 0.0);
    accel__sb_init(&b, p->acc);
    accel__prof_open_json(&b, ev.p, ev.n);
    accel__prof_other_data(p, &b, 0, 0, p->impl->unix0_us);
    if (ev.oom) b.oom = 1;
    accel__sb_free(&ev);
    if (b.oom) {
        accel__sb_free(&b);
        return accel__fail_wrap(p->acc, ACCEL_ERR_OUT_OF_MEMORY, "accel_prof_write_trace");
    }
    r = accel__write_file(p->acc, p->trace_file, b.p, b.n, 1);
    accel__sb_free(&b);
    if (r != ACCEL_OK) return accel__fail_wrap(p->acc, r, "accel_prof_write_trace");
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_prof_merge_trace(accel_prof *p, const char *path) {
    accel *acc;
    accel__sb b, all;
    accel_result local = ACCEL_OK, r;
    char target[ACCEL_PROF_PATH_CAPACITY + 64];
    double mine[1], *starts = NULL, start_min;
    void *gathered = NULL;
    size_t *counts = NULL;
    int P, i;
    if ((r = accel__prof_need(p, "accel_prof_merge_trace")) != ACCEL_OK) return r; /* no acc: cannot take part */
    acc = p->acc;
    P = acc->num_processes;
    target[0] = 0;
    if (acc->process_index == 0) {
        if (path && *path) {
            if (strlen(path) >= ACCEL_PROF_PATH_CAPACITY)
                local = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                                    "accel_prof_merge_trace: path longer than %d bytes", ACCEL_PROF_PATH_CAPACITY - 1);
            else accel__fmt(target, sizeof target, "%s", path);
        } else if (p->impl->desc.trace_dir) {
            accel__fmt(target, sizeof target, "%s/profile_merged.json", p->impl->desc.trace_dir);
        } else {
            local = ACCEL__FAIL(acc, ACCEL_ERR_STATE, "accel_prof_merge_trace: no path and no trace_dir on rank 0");
        }
    }
    starts = (double *)accel_host_alloc(acc, sizeof(double) * (size_t)P);
    counts = (size_t *)accel_host_alloc(acc, sizeof(size_t) * (size_t)P);
    if ((!starts || !counts) && local == ACCEL_OK) local = ACCEL_ERR_OUT_OF_MEMORY;
    r = accel__agree(acc, local, "accel_prof_merge_trace");
    if (r != ACCEL_OK) goto done;
    /* 1. the earliest start: every rank shifts its events by its own start minus that */
    mine[0] = p->enabled ? p->impl->unix0_us : -1.0;
    if ((r = accel_host_allgather(acc, mine, starts, sizeof mine)) != ACCEL_OK) goto done;
    start_min = -1.0;
    for (i = 0; i < P; ++i)
        if (starts[i] >= 0 && (start_min < 0 || starts[i] < start_min)) start_min = starts[i];
    /* 2. every rank's events as JSON text, gathered in rank order */
    accel__sb_init(&b, acc);
    if (p->enabled) {
        accel__prof_settle(p);
        accel__prof_events_json(p, &b, p->impl->unix0_us - start_min);
    }
    r = accel__agree(acc, b.oom ? ACCEL_ERR_OUT_OF_MEMORY : ACCEL_OK, "accel_prof_merge_trace (events)");
    if (r == ACCEL_OK) r = accel__host_allgatherv(acc, b.p, b.n, &gathered, counts);
    accel__sb_free(&b);
    if (r != ACCEL_OK) goto done;
    /* 3. rank 0 writes the file; every rank learns the outcome */
    local = ACCEL_OK;
    if (acc->process_index == 0) {
        size_t total = 0;
        for (i = 0; i < P; ++i) total += counts[i];
        accel__sb_init(&all, acc);
        accel__prof_open_json(&all, (const char *)gathered, total);
        accel__prof_other_data(p, &all, 1, P, start_min < 0 ? 0.0 : start_min);
        if (all.oom) local = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "accel_prof_merge_trace");
        else if ((local = accel__write_file(acc, target, all.p, all.n, 1)) != ACCEL_OK)
            local = accel__fail_wrap(acc, local, "accel_prof_merge_trace");
        accel__sb_free(&all);
    }
    r = accel__agree(acc, local, "accel_prof_merge_trace (write)");
done:
    accel_host_free(acc, gathered);
    accel_host_free(acc, starts);
    accel_host_free(acc, counts);
    return r;
}

#endif /* ACCEL_IMPLEMENTATION */

/* accel is released under the MIT licence. Copyright (c) 2026 the accel authors. */
