/* accel_trackers.h — experiment tracking from C: TensorBoard event files and JSONL metrics, written by the main
   process (Accelerate's log_with / init_trackers / log / end_training).

   WHAT IT WRITES (under <logging_dir>/<project_name>/, on the main process only)
     events.out.tfevents.<unix seconds>.<hostname>   TensorBoard: TFRecord framing with masked CRC32C; Event protos
                                                     encoded by hand: file_version "brain.Event:2" first, then one
                                                     Event per log() call whose Summary holds every value as a
                                                     scalar (simple_value, float32). Open it with `tensorboard
                                                     --logdir <logging_dir>`.
     metrics.jsonl                                   one JSON object per log() call, one line each:
                                                     {"step": 3, "time": 1763771234.123456, "loss": 0.25, ...}
                                                     "time" = Unix seconds (wall clock); "step" = null for NO_STEP.
     config.json                                     init_trackers' hyperparameters (when count > 0) as one JSON
                                                     object, laid out as Python's json.dumps(config, indent=2,
                                                     ensure_ascii=False) + "\n" (written to a temp name, fsync'd,
                                                     then renamed). TensorBoard also gets them as a text summary
                                                     with tag "hparams" (a markdown table, Text tab).

   USAGE
       accel_track trk;
       accel_track_desc td = {0};                            // C++: accel_track_desc td = {};
       td.log_with = ACCEL_TRACK_ALL;                        // or 0: ACCEL_LOG_WITH, else no tracker (Accelerate)
       if (accel_track_init(&acc, &trk, &td) != ACCEL_OK) die(accel_last_error(&acc));
       accel_track_param cfg[3];
       cfg[0] = accel_track_param_number("lr", 3e-4);
       cfg[1] = accel_track_param_int("batch_size", 64);
       cfg[2] = accel_track_param_string("model", "gpt2-124M");
       if (accel_track_init_trackers(&trk, "gpt2", cfg, 3) != ACCEL_OK) die(...);  // every rank calls it
       for (step = 0; step < steps; ++step) {
           ...train...
           accel_track_value v[2];
           v[0] = accel_track_scalar("train/loss", loss);
           v[1] = accel_track_scalar("lr", lr);
           accel_track_log(&trk, v, 2, step);              // an error is returned, never fatal
       }
       accel_print(&acc, "logs in %s\n", trk.run_dir);       // run_dir is set on the main process
       accel_track_deinit(&trk);                             // Accelerate's end_training(): flush, close, free

   OPTIONS (accel_track_desc, zero = default)
     log_with     ACCEL_TRACK_TENSORBOARD | ACCEL_TRACK_JSONL, ACCEL_TRACK_ALL, ACCEL_TRACK_NONE.
                  0 → the ACCEL_LOG_WITH environment variable → no tracker (Accelerate's log_with=None).
                  ACCEL_LOG_WITH: "tensorboard", "jsonl", "all", "none" or a comma list ("tensorboard,jsonl"), any
                  case; anything else is ACCEL_ERR_ENVIRONMENT naming the variable (no silent default).
     logging_dir  base directory; NULL → acc->desc.logging_dir (the core: desc.logging_dir → project_dir → ".").
     flush_secs   the TensorBoard records are buffered (64 KiB) and written out on the first log() at least
                  flush_secs after the previous write-out, when the buffer is full, by accel_track_flush and by
                  accel_track_deinit. 0 → 120 (torch's SummaryWriter); negative → after every log().
                  metrics.jsonl is not buffered: each log() line goes out in one write() before log() returns, so a
                  crash loses at most the line being written.

   LIFECYCLE
     accel_track_init (no I/O) → accel_track_init_trackers (creates the files) → accel_track_log ... →
     accel_track_deinit (writes out, fsyncs and closes the files, frees everything; idempotent; safe on a zeroed
     tracker and on one whose accel_track_init failed). After deinit the fields (run_dir, event_file, ...) stay
     readable; log(), flush() and init_trackers() return ACCEL_ERR_STATE. A new run on the same tracker starts with
     accel_track_init again (a new event file; metrics.jsonl is appended to). A failed init_trackers leaves the
     tracker as before the call (retry allowed).

   PROCESSES
     Only the main process (acc->is_main_process) creates directories and files; log() elsewhere validates its
     arguments and returns ACCEL_OK. accel_track_init_trackers is collective (every process calls it, as in
     Accelerate, where it is called everywhere and runs on the main process): its result goes through the host
     process group's agreement check, so every rank gets an error if any rank failed — the main process its own
     (e.g. ACCEL_ERR_IO for an unwritable logging_dir), the others ACCEL_ERR_REMOTE carrying the failed rank's
     message ("rank 0 failed in init_trackers: cannot create logging directory ...") — instead of training on
     without logs or hanging later. It has the collective deadline (desc.collective_timeout_ms). Without a host
     process group (P > 1 launched without MPI and no collectives context yet) the check is local.
     log(), flush and deinit are local (no communication).

   ERRORS (never fatal; the training loop keeps going)
     - init_trackers: an unwritable or uncreatable directory → ACCEL_ERR_IO naming the path and the component that
       could not be created (or "exists and is not a directory"); nothing is left open, no partial event file or
       config.json is left behind, the tracker stays ready for a retry.
     - log(): a write error (disk full, quota, EFBIG) → ACCEL_ERR_IO naming the file and the system's error text;
       that writer is then disabled (its file stays readable up to the last complete record or line) and later
       log() calls return ACCEL_ERR_IO with the same error text without writing again; the other writer keeps
       working. Since the TensorBoard records are buffered, their write errors surface at the next write-out.
     - log() before init_trackers or after deinit → ACCEL_ERR_STATE; bad values (NULL/empty/non-UTF-8 name, a name
       used twice in one call, the reserved names "step" and "time") → ACCEL_ERR_INVALID_ARGUMENT and nothing is
       written to any tracker.
     - deinit returns the first write-out/fsync/close error of a writer that had not failed before (the files are
       closed and the memory freed in any case).

   VALUES
     TensorBoard stores scalars as float32 (simple_value); metrics.jsonl keeps the double: the shortest decimal that
     reads back to the same double, laid out like Python's repr (positional for 1e-4 <= |v| < 1e16, integral
     values with ".0" so Python reads floats, else 1.5e-07). NaN and ±inf are written as the tokens NaN, Infinity,
     -Infinity — what Python's json.dumps writes and json.loads reads by default (not strict JSON: jq and
     browsers reject them). Names are escaped as json.dumps(name, ensure_ascii=False) does (", \, control
     characters as \n, \t, \u00XX); other UTF-8 is written as is.

   THREADS AND MEMORY
     An accel_track is used by one thread at a time (the one that uses its accel). Every allocation goes through
     acc's host allocator (the files are written with write(2) from those buffers; no stdio).

   DIFFERENCES FROM ACCELERATE
     - Trackers: tensorboard and jsonl (accel's own; Accelerate has no JSONL tracker). wandb, mlflow, comet, aim,
       clearml, dvclive are not available; naming one is an error.
     - Hyperparameters: config.json plus a "hparams" text summary, instead of SummaryWriter.add_hparams (HParams
       plugin protos in a separate timestamped run) and hparams.yml.
     - log() takes scalars only (Accelerate also accepts strings and dicts: use one name per scalar, e.g.
       "eval/acc"). All values of one call go into one Event (torch writes one Event per scalar); readers see the
       same (tag, step, value) triples.
     - init_trackers is collective and every rank gets the same verdict (see PROCESSES); Accelerate's runs on the
       main process only, and a failure there leaves the other ranks training.
     - end_training() is accel_track_deinit(); it also frees the tracker (a new run needs accel_track_init).
     - metrics.jsonl is appended to (a resumed run continues it); a new event file is created per init_trackers.
   Accelerate's semantics that the other headers follow, and accel's deliberate differences, are in
   docs/semantics.md.
*/
#ifndef ACCEL_TRACKERS_H_INCLUDED
#define ACCEL_TRACKERS_H_INCLUDED
#include "accel.h"
#include <stdint.h>

#define ACCEL_TRACK_TENSORBOARD 0x1
#define ACCEL_TRACK_JSONL 0x2
#define ACCEL_TRACK_ALL (ACCEL_TRACK_TENSORBOARD | ACCEL_TRACK_JSONL)
#define ACCEL_TRACK_NONE 0x100          /* explicitly no tracker (0 means "default") */
#define ACCEL_TRACK_NO_STEP INT64_MIN   /* log() without a step: TensorBoard step 0 (as torch), JSONL "step": null */
#define ACCEL_TRACK_PATH_CAPACITY 1024

#ifdef __cplusplus
extern "C" {
#endif

typedef struct accel_track_desc {
    int log_with;            /* ACCEL_TRACK_* flags; 0 → ACCEL_LOG_WITH → none */
    const char *logging_dir; /* NULL → acc->desc.logging_dir */
    double flush_secs;       /* TensorBoard write-out interval; 0 → 120 s; < 0 → every log() */
} accel_track_desc;

/* One scalar of a log() call. */
typedef struct accel_track_value {
    const char *name;
    double value;
} accel_track_value;

typedef enum accel_track_param_type {
    ACCEL_TRACK_PARAM_NUMBER = 0, /* number (double) */
    ACCEL_TRACK_PARAM_INT,        /* integer (int64, exact) */
    ACCEL_TRACK_PARAM_STRING,     /* string (UTF-8) */
    ACCEL_TRACK_PARAM_BOOL        /* integer != 0 */
} accel_track_param_type;

/* One hyperparameter of init_trackers' config (name → number/int/string/bool). */
typedef struct accel_track_param {
    const char *name;
    accel_track_param_type type;
    double number;
    int64_t integer;
    const char *string;
} accel_track_param;

/* UNSET: zeroed or accel_track_init failed; READY: initialized; ACTIVE: init_trackers succeeded; ENDED: deinit. */
enum { ACCEL_TRACK_STATE_UNSET = 0, ACCEL_TRACK_STATE_READY, ACCEL_TRACK_STATE_ACTIVE, ACCEL_TRACK_STATE_ENDED };

struct accel__track_impl; /* open files and buffers; private */

/* The tracker set. Fields are readable; change them only through functions. */
typedef struct accel_track {
    accel *acc;
    int log_with;      /* resolved ACCEL_TRACK_TENSORBOARD/JSONL bits (0 = none) */
    int is_writer;     /* this process writes (the main process) */
    int state;         /* ACCEL_TRACK_STATE_* */
    double flush_secs; /* resolved */
    int64_t logged;    /* log() calls accepted since init_trackers */
    char logging_dir[ACCEL_TRACK_PATH_CAPACITY]; /* resolved base directory */
    char run_dir[ACCEL_TRACK_PATH_CAPACITY];     /* <logging_dir>/<project_name> ("" until init_trackers / off main) */
    char event_file[ACCEL_TRACK_PATH_CAPACITY];  /* "" unless TensorBoard writes here */
    char jsonl_file[ACCEL_TRACK_PATH_CAPACITY];  /* "" unless JSONL writes here */
    char config_file[ACCEL_TRACK_PATH_CAPACITY]; /* "" unless a config was written */
    struct accel__track_impl *impl;
} accel_track;

/* Resolves desc (NULL = all defaults; + ACCEL_LOG_WITH) into t; no I/O. acc must outlive t. t is overwritten
   (deinit a tracker in use before initializing it again); on failure t is zeroed (deinit is still safe). */
ACCEL_API accel_result accel_track_init(accel *acc, accel_track *t, const accel_track_desc *desc);
/* Creates <logging_dir>/<project_name>/ and the files, records config (may be NULL when count is 0). Collective:
   every process calls it; see PROCESSES. project_name is joined to logging_dir as a path. */
ACCEL_API accel_result accel_track_init_trackers(accel_track *t, const char *project_name,
                                                 const accel_track_param *config, int count);
/* Logs count scalars at step (ACCEL_TRACK_NO_STEP: none). count 0 is a no-op. */
ACCEL_API accel_result accel_track_log(accel_track *t, const accel_track_value *values, int count, int64_t step);
/* Writes the buffered TensorBoard records to the file now. */
ACCEL_API accel_result accel_track_flush(accel_track *t);
/* Accelerate's end_training: writes out, fsyncs and closes every file and frees the buffers; later log() calls
   fail with ACCEL_ERR_STATE. Idempotent; NULL, zeroed and failed trackers are fine (ACCEL_OK). Returns the first
   I/O error (everything is closed and freed anyway). */
ACCEL_API accel_result accel_track_deinit(accel_track *t);

/* "tensorboard", "jsonl", "all", "none" or a comma list, any case → ACCEL_TRACK_* flags; -1 if not understood. */
ACCEL_API int accel_track_parse_log_with(const char *s);
/* CRC32C (Castagnoli, reflected polynomial 0x82F63B78) and TFRecord's masked form
   ((crc >> 15 | crc << 17) + 0xA282EAD8). */
ACCEL_API uint32_t accel_track_crc32c(const void *data, size_t size);
ACCEL_API uint32_t accel_track_masked_crc32c(const void *data, size_t size);

static ACCEL_INLINE accel_track_value accel_track_scalar(const char *name, double value) {
    accel_track_value v;
    v.name = name;
    v.value = value;
    return v;
}
static ACCEL_INLINE accel_track_param accel_track_param_number(const char *name, double value) {
    accel_track_param p;
    p.name = name; p.type = ACCEL_TRACK_PARAM_NUMBER; p.number = value; p.integer = 0; p.string = 0;
    return p;
}
static ACCEL_INLINE accel_track_param accel_track_param_int(const char *name, int64_t value) {
    accel_track_param p;
    p.name = name; p.type = ACCEL_TRACK_PARAM_INT; p.number = 0; p.integer = value; p.string = 0;
    return p;
}
static ACCEL_INLINE accel_track_param accel_track_param_string(const char *name, const char *value) {
    accel_track_param p;
    p.name = name; p.type = ACCEL_TRACK_PARAM_STRING; p.number = 0; p.integer = 0; p.string = value;
    return p;
}
static ACCEL_INLINE accel_track_param accel_track_param_bool(const char *name, int value) {
    accel_track_param p;
    p.name = name; p.type = ACCEL_TRACK_PARAM_BOOL; p.number = 0; p.integer = value != 0; p.string = 0;
    return p;
}

#ifdef __cplusplus
}
#endif
#endif /* ACCEL_TRACKERS_H_INCLUDED */


#if defined(ACCEL_IMPLEMENTATION) && !defined(ACCEL__TRACKERS_IMPL_DONE)
#define ACCEL__TRACKERS_IMPL_DONE
/* CONTENTS (the core's services layer precedes this in the same TU: UTF-8, the string builder and JSON strings,
   mkdir -p, atomic file writes, byte order, errors, the agreement check)
     1. CRC32C
     2. private state, log_with, accel_track_init
     3. validation
     4. protobuf encoding of TensorBoard Event records
     5. numbers as Python writes them
     6. files: the run directory, the event file's buffer, config.json, the hparams summary
     7. init_trackers (collective)
     8. log, flush, deinit */

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------------------------------ 1. CRC32C */
static const uint32_t accel__track_crc32c_table[256] = {
    0x00000000u, 0xF26B8303u, 0xE13B70F7u, 0x1350F3F4u, 0xC79A971Fu, 0x35F1141Cu, 0x26A1E7E8u, 0xD4CA64EBu,
    0x8AD958CFu, 0x78B2DBCCu, 0x6BE22838u, 0x9989AB3Bu, 0x4D43CFD0u, 0xBF284CD3u, 0xAC78BF27u, 0x5E133C24u,
    0x105EC76Fu, 0xE235446Cu, 0xF165B798u, 0x030E349Bu, 0xD7C45070u, 0x25AFD373u, 0x36FF2087u, 0xC494A384u,
    0x9A879FA0u, 0x68EC1CA3u, 0x7BBCEF57u, 0x89D76C54u, 0x5D1D08BFu, 0xAF768BBCu, 0xBC267848u, 0x4E4DFB4Bu,
    0x20BD8EDEu, 0xD2D60DDDu, 0xC186FE29u, 0x33ED7D2Au, 0xE72719C1u, 0x154C9AC2u, 0x061C6936u, 0xF477EA35u,
    0xAA64D611u, 0x580F5512u, 0x4B5FA6E6u, 0xB93425E5u, 0x6DFE410Eu, 0x9F95C20Du, 0x8CC531F9u, 0x7EAEB2FAu,
    0x30E349B1u, 0xC288CAB2u, 0xD1D83946u, 0x23B3BA45u, 0xF779DEAEu, 0x05125DADu, 0x1642AE59u, 0xE4292D5Au,
    0xBA3A117Eu, 0x4851927Du, 0x5B016189u, 0xA96AE28Au, 0x7DA08661u, 0x8FCB0562u, 0x9C9BF696u, 0x6EF07595u,
    0x417B1DBCu, 0xB3109EBFu, 0xA0406D4Bu, 0x522BEE48u, 0x86E18AA3u, 0x748A09A0u, 0x67DAFA54u, 0x95B17957u,
    0xCBA24573u, 0x39C9C670u, 0x2A993584u, 0xD8F2B687u, 0x0C38D26Cu, 0xFE53516Fu, 0xED03A29Bu, 0x1F682198u,
    0x5125DAD3u, 0xA34E59D0u, 0xB01EAA24u, 0x42752927u, 0x96BF4DCCu, 0x64D4CECFu, 0x77843D3Bu, 0x85EFBE38u,
    0xDBFC821Cu, 0x2997011Fu, 0x3AC7F2EBu, 0xC8AC71E8u, 0x1C661503u, 0xEE0D9600u, 0xFD5D65F4u, 0x0F36E6F7u,
    0x61C69362u, 0x93AD1061u, 0x80FDE395u, 0x72966096u, 0xA65C047Du, 0x5437877Eu, 0x4767748Au, 0xB50CF789u,
    0xEB1FCBADu, 0x197448AEu, 0x0A24BB5Au, 0xF84F3859u, 0x2C855CB2u, 0xDEEEDFB1u, 0xCDBE2C45u, 0x3FD5AF46u,
    0x7198540Du, 0x83F3D70Eu, 0x90A324FAu, 0x62C8A7F9u, 0xB602C312u, 0x44694011u, 0x5739B3E5u, 0xA55230E6u,
    0xFB410CC2u, 0x092A8FC1u, 0x1A7A7C35u, 0xE811FF36u, 0x3CDB9BDDu, 0xCEB018DEu, 0xDDE0EB2Au, 0x2F8B6829u,
    0x82F63B78u, 0x709DB87Bu, 0x63CD4B8Fu, 0x91A6C88Cu, 0x456CAC67u, 0xB7072F64u, 0xA457DC90u, 0x563C5F93u,
    0x082F63B7u, 0xFA44E0B4u, 0xE9141340u, 0x1B7F9043u, 0xCFB5F4A8u, 0x3DDE77ABu, 0x2E8E845Fu, 0xDCE5075Cu,
    0x92A8FC17u, 0x60C37F14u, 0x73938CE0u, 0x81F80FE3u, 0x55326B08u, 0xA759E80Bu, 0xB4091BFFu, 0x466298FCu,
    0x1871A4D8u, 0xEA1A27DBu, 0xF94AD42Fu, 0x0B21572Cu, 0xDFEB33C7u, 0x2D80B0C4u, 0x3ED04330u, 0xCCBBC033u,
    0xA24BB5A6u, 0x502036A5u, 0x4370C551u, 0xB11B4652u, 0x65D122B9u, 0x97BAA1BAu, 0x84EA524Eu, 0x7681D14Du,
    0x2892ED69u, 0xDAF96E6Au, 0xC9A99D9Eu, 0x3BC21E9Du, 0xEF087A76u, 0x1D63F975u, 0x0E330A81u, 0xFC588982u,
    0xB21572C9u, 0x407EF1CAu, 0x532E023Eu, 0xA145813Du, 0x758FE5D6u, 0x87E466D5u, 0x94B49521u, 0x66DF1622u,
    0x38CC2A06u, 0xCAA7A905u, 0xD9F75AF1u, 0x2B9CD9F2u, 0xFF56BD19u, 0x0D3D3E1Au, 0x1E6DCDEEu, 0xEC064EEDu,
    0xC38D26C4u, 0x31E6A5C7u, 0x22B65633u, 0xD0DDD530u, 0x0417B1DBu, 0xF67C32D8u, 0xE52CC12Cu, 0x1747422Fu,
    0x49547E0Bu, 0xBB3FFD08u, 0xA86F0EFCu, 0x5A048DFFu, 0x8ECEE914u, 0x7CA56A17u, 0x6FF599E3u, 0x9D9E1AE0u,
    0xD3D3E1ABu, 0x21B862A8u, 0x32E8915Cu, 0xC083125Fu, 0x144976B4u, 0xE622F5B7u, 0xF5720643u, 0x07198540u,
    0x590AB964u, 0xAB613A67u, 0xB831C993u, 0x4A5A4A90u, 0x9E902E7Bu, 0x6CFBAD78u, 0x7FAB5E8Cu, 0x8DC0DD8Fu,
    0xE330A81Au, 0x115B2B19u, 0x020BD8EDu, 0xF0605BEEu, 0x24AA3F05u, 0xD6C1BC06u, 0xC5914FF2u, 0x37FACCF1u,
    0x69E9F0D5u, 0x9B8273D6u, 0x88D28022u, 0x7AB90321u, 0xAE7367CAu, 0x5C18E4C9u, 0x4F48173Du, 0xBD23943Eu,
    0xF36E6F75u, 0x0105EC76u, 0x12551F82u, 0xE03E9C81u, 0x34F4F86Au, 0xC69F7B69u, 0xD5CF889Du, 0x27A40B9Eu,
    0x79B737BAu, 0x8BDCB4B9u, 0x988C474Du, 0x6AE7C44Eu, 0xBE2DA0A5u, 0x4C4623A6u, 0x5F16D052u, 0xAD7D5351u,
};

ACCEL__DEF uint32_t accel_track_crc32c(const void *data, size_t size) {
    const unsigned char *p = (const unsigned char *)data;
    uint32_t crc = 0xFFFFFFFFu;
    size_t i;
    for (i = 0; i < size; ++i) crc = accel__track_crc32c_table[(crc ^ p[i]) & 0xFFu] ^ (crc >> 8);
    return crc ^ 0xFFFFFFFFu;
}

ACCEL__DEF uint32_t accel_track_masked_crc32c(const void *data, size_t size) {
    uint32_t crc = accel_track_crc32c(data, size);
    return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

/* Slice-by-8 (8 bytes per step) for the writer's hot path; the tables live in each writer (no shared mutable
   state) and are derived from the byte table above. */
static void accel__track_crc32c_tables(uint32_t tab[8][256]) {
    int i, k;
    for (i = 0; i < 256; ++i) tab[0][i] = accel__track_crc32c_table[i];
    for (k = 1; k < 8; ++k)
        for (i = 0; i < 256; ++i) tab[k][i] = (tab[k - 1][i] >> 8) ^ tab[0][tab[k - 1][i] & 0xFFu];
}

static uint32_t accel__track_crc32c_masked8(const uint32_t tab[8][256], const unsigned char *p, size_t n) {
    uint32_t crc = 0xFFFFFFFFu;
    while (n >= 8) {
        uint32_t lo = crc ^ accel__get_u32(p), hi = accel__get_u32(p + 4);
        crc = tab[7][lo & 0xFFu] ^ tab[6][(lo >> 8) & 0xFFu] ^ tab[5][(lo >> 16) & 0xFFu] ^ tab[4][lo >> 24] ^
              tab[3][hi & 0xFFu] ^ tab[2][(hi >> 8) & 0xFFu] ^ tab[1][(hi >> 16) & 0xFFu] ^ tab[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) crc = tab[0][(crc ^ *p++) & 0xFFu] ^ (crc >> 8);
    crc ^= 0xFFFFFFFFu;
    return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

/* ------------------------------------------------------------------------------ 2. private state, init */
#define ACCEL__TRACK_TB_BUFFER ((size_t)1 << 16) /* the event file's write buffer */

struct accel__track_impl {
    int tb_fd, jl_fd;        /* -1: not open */
    int tb_errno, jl_errno;  /* nonzero: that writer failed with this error and is disabled */
    int jl_created;          /* this init_trackers created metrics.jsonl */
    double last_flush;       /* wall time of the last write-out of the event file's buffer */
    unsigned char *tbuf;     /* event records not written yet (ACCEL__TRACK_TB_BUFFER bytes) */
    size_t tlen;
    unsigned char *buf;      /* scratch for a record larger than tbuf */
    size_t cap;
    accel__sb line;          /* one metrics.jsonl line (the buffer is reused) */
    uint32_t crc[8][256];    /* slice-by-8 CRC32C tables */
};

static int accel__track_ieq(const char *a, const char *b, size_t n) {
    size_t i;
    if (strlen(b) != n) return 0;
    for (i = 0; i < n; ++i) {
        char c = a[i];
        if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
        if (c != b[i]) return 0;
    }
    return 1;
}

ACCEL__DEF int accel_track_parse_log_with(const char *s) {
    int flags = 0, any = 0;
    if (!s) return -1;
    while (*s) {
        const char *b, *e;
        while (*s == ' ' || *s == '\t' || *s == ',') ++s;
        if (!*s) break;
        b = s;
        while (*s && *s != ',') ++s;
        e = s;
        while (e > b && (e[-1] == ' ' || e[-1] == '\t')) --e;
        any = 1;
        if (accel__track_ieq(b, "tensorboard", (size_t)(e - b))) flags |= ACCEL_TRACK_TENSORBOARD;
        else if (accel__track_ieq(b, "jsonl", (size_t)(e - b))) flags |= ACCEL_TRACK_JSONL;
        else if (accel__track_ieq(b, "all", (size_t)(e - b))) flags |= ACCEL_TRACK_ALL;
        else if (accel__track_ieq(b, "none", (size_t)(e - b))) flags |= ACCEL_TRACK_NONE;
        else return -1;
    }
    if (!any) return -1;
    if ((flags & ACCEL_TRACK_NONE) && (flags & ACCEL_TRACK_ALL)) return -1; /* "none,jsonl" is a contradiction */
    return flags;
}

ACCEL__DEF accel_result accel_track_init(accel *acc, accel_track *t, const accel_track_desc *desc) {
    accel_track_desc d;
    const char *dir;
    int flags;
    if (t) memset(t, 0, sizeof *t); /* a failed init leaves a zeroed tracker: deinit is safe on it */
    if (!acc) return ACCEL__FAIL(NULL, ACCEL_ERR_INVALID_ARGUMENT, "accel_track_init: acc is NULL");
    if (!t) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_track_init: t is NULL");
    memset(&d, 0, sizeof d);
    if (desc) d = *desc;
    flags = d.log_with;
    if (flags == 0) {
        const char *env = getenv("ACCEL_LOG_WITH");
        if (env && *env) {
            flags = accel_track_parse_log_with(env);
            if (flags < 0)
                return ACCEL__FAIL(acc, ACCEL_ERR_ENVIRONMENT,
                                   "ACCEL_LOG_WITH=\"%.200s\" is not a tracker list (accel has tensorboard, jsonl; or "
                                   "all, none; comma-separated)", env);
        } else {
            flags = ACCEL_TRACK_NONE;
        }
    } else if ((flags & ~(ACCEL_TRACK_ALL | ACCEL_TRACK_NONE)) != 0 ||
               ((flags & ACCEL_TRACK_NONE) && (flags & ACCEL_TRACK_ALL))) {
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                           "accel_track_desc.log_with = 0x%x is not a combination of ACCEL_TRACK_TENSORBOARD, "
                           "ACCEL_TRACK_JSONL, or ACCEL_TRACK_NONE", (unsigned)flags);
    }
    if (d.flush_secs != d.flush_secs || d.flush_secs > 1e9)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_track_desc.flush_secs = %g is not a number of seconds",
                           d.flush_secs);
    dir = d.logging_dir ? d.logging_dir : acc->desc.logging_dir;
    if (!dir || !*dir) dir = ".";
    if (strlen(dir) + 1 > ACCEL_TRACK_PATH_CAPACITY - 128)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "logging_dir is longer than %d bytes",
                           ACCEL_TRACK_PATH_CAPACITY - 128);
    t->acc = acc;
    t->log_with = flags & ACCEL_TRACK_ALL;
    t->is_writer = acc->is_main_process ? 1 : 0;
    t->flush_secs = d.flush_secs == 0 ? 120.0 : d.flush_secs;
    accel__fmt(t->logging_dir, sizeof t->logging_dir, "%s", dir);
    t->state = ACCEL_TRACK_STATE_READY;
    return ACCEL_OK;
}

/* --------------------------------------------------------------------------------------------- 3. validation */
static int accel__track_utf8_ok(const char *s, size_t n) {
    return accel__utf8_valid((const unsigned char *)s, n, NULL);
}

/* *len (may be NULL) receives strlen(name) when the name is acceptable. */
static accel_result accel__track_check_name(accel *acc, const char *what, int i, const char *name, int reserve,
                                            size_t *len) {
    size_t n;
    if (!name || !*name) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "%s[%d]: the name is NULL or empty", what, i);
    n = strlen(name);
    if (!accel__track_utf8_ok(name, n))
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "%s[%d]: the name is not valid UTF-8", what, i);
    if (len) *len = n;
    if (reserve && n == 4 && (!memcmp(name, "step", 4) || !memcmp(name, "time", 4)))
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                           "%s[%d]: \"%s\" is reserved (it is a key of every metrics.jsonl line)", what, i, name);
    return ACCEL_OK;
}

/* Names must be distinct within one call: a JSON object with a duplicate key is ambiguous. */
static accel_result accel__track_check_dups(accel *acc, const char *what, const char *const *names, size_t stride,
                                            int count) {
    int i, j;
    for (i = 1; i < count; ++i) {
        const char *a = *(const char *const *)((const char *)names + stride * (size_t)i);
        for (j = 0; j < i; ++j) {
            const char *b = *(const char *const *)((const char *)names + stride * (size_t)j);
            if (!strcmp(a, b))
                return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "%s[%d] and %s[%d] have the same name \"%.200s\"",
                                   what, j, what, i, a);
        }
    }
    return ACCEL_OK;
}

static void accel__track_wall_clock(struct timespec *ts) {
    if (clock_gettime(CLOCK_REALTIME, ts) != 0) { ts->tv_sec = time(NULL); ts->tv_nsec = 0; }
}
static double accel__track_seconds(const struct timespec *ts) {
    return (double)ts->tv_sec + 1e-9 * (double)ts->tv_nsec;
}
static double accel__track_wall_time(void) {
    struct timespec ts;
    accel__track_wall_clock(&ts);
    return accel__track_seconds(&ts);
}

/* ------------------------------------------------------------------------ 4. protobuf (TensorBoard Events) */
static size_t accel__track_pb_varint_len(uint64_t v) {
    size_t n = 1;
    while (v >= 0x80) { v >>= 7; ++n; }
    return n;
}
static unsigned char *accel__track_pb_varint(unsigned char *p, uint64_t v) {
    while (v >= 0x80) { *p++ = (unsigned char)(v | 0x80); v >>= 7; }
    *p++ = (unsigned char)v;
    return p;
}
/* key + length + bytes */
static unsigned char *accel__track_pb_bytes(unsigned char *p, unsigned key, const void *data, size_t n) {
    *p++ = (unsigned char)key;
    p = accel__track_pb_varint(p, (uint64_t)n);
    if (n) memcpy(p, data, n);
    return p + n;
}
static size_t accel__track_pb_field_len(size_t n) { return 1 + accel__track_pb_varint_len((uint64_t)n) + n; }

/* Event header fields: wall_time (1, fixed64) and step (2, varint; omitted for 0 / NO_STEP as proto3 does). */
static size_t accel__track_tb_head_len(int64_t step) {
    return 9 + ((step != 0 && step != ACCEL_TRACK_NO_STEP) ? 1 + accel__track_pb_varint_len((uint64_t)step) : 0);
}
static unsigned char *accel__track_tb_head(unsigned char *p, double wall, int64_t step) {
    uint64_t bits;
    memcpy(&bits, &wall, sizeof bits);
    *p++ = 0x09;
    accel__put_u64(p, bits);
    p += 8;
    if (step != 0 && step != ACCEL_TRACK_NO_STEP) {
        *p++ = 0x10;
        p = accel__track_pb_varint(p, (uint64_t)step);
    }
    return p;
}

static int accel__track_reserve(accel_track *t, size_t need) {
    struct accel__track_impl *im = t->impl;
    unsigned char *nb;
    size_t cap;
    if (need <= im->cap) return 1;
    cap = im->cap ? im->cap : 4096;
    while (cap < need) cap *= 2;
    nb = (unsigned char *)accel_host_alloc(t->acc, cap);
    if (!nb) return 0;
    accel_host_free(t->acc, im->buf);
    im->buf = nb;
    im->cap = cap;
    return 1;
}

static accel_result accel__track_io_fail(accel_track *t, int *failed, const char *what, const char *path, int e) {
    if (!e) e = EIO;
    if (failed) *failed = e;
    return ACCEL__FAIL(t->acc, ACCEL_ERR_IO, "%s: writing \"%.400s\" failed: %s", what, path, strerror(e));
}

/* Later calls on a writer that already failed: the same root cause, nothing written. */
static accel_result accel__track_disabled(accel_track *t, const char *what, const char *path, int e) {
    return ACCEL__FAIL(t->acc, ACCEL_ERR_IO,
                       "%s: the writer of \"%.400s\" is disabled since an earlier write failed: %s", what, path,
                       strerror(e));
}

/* The buffered event records → the file (what fflush was for a FILE). */
static accel_result accel__track_tb_write_out(accel_track *t) {
    struct accel__track_impl *im = t->impl;
    size_t n = im->tlen;
    im->tlen = 0;
    if (n && accel__write_all(im->tb_fd, im->tbuf, n) != 0)
        return accel__track_io_fail(t, &im->tb_errno, "tensorboard", t->event_file, errno);
    return ACCEL_OK;
}

/* Room for one record of `need` bytes: the end of the buffer (written out first when the record does not fit), or
   for a record larger than the buffer the scratch, written directly by accel__track_tb_commit. NULL: *r says why. */
static unsigned char *accel__track_tb_room(accel_track *t, size_t need, accel_result *r) {
    struct accel__track_impl *im = t->impl;
    *r = ACCEL_OK;
    if (im->tlen + need > ACCEL__TRACK_TB_BUFFER && im->tlen > 0) {
        *r = accel__track_tb_write_out(t);
        if (*r != ACCEL_OK) return NULL;
    }
    if (need <= ACCEL__TRACK_TB_BUFFER) return im->tbuf + im->tlen;
    if (!accel__track_reserve(t, need)) { *r = ACCEL_ERR_OUT_OF_MEMORY; return NULL; }
    return im->buf;
}

/* Frames the Event at rec + 12 (payload_len bytes) as a TFRecord in place and keeps it (or writes it, when it is
   in the scratch). */
static accel_result accel__track_tb_commit(accel_track *t, unsigned char *rec, size_t payload_len) {
    struct accel__track_impl *im = t->impl;
    const uint32_t(*crc)[256] = (const uint32_t(*)[256])im->crc;
    size_t len = payload_len + 16;
    accel__put_u64(rec, (uint64_t)payload_len);
    accel__put_u32(rec + 8, accel__track_crc32c_masked8(crc, rec, 8));
    accel__put_u32(rec + 12 + payload_len, accel__track_crc32c_masked8(crc, rec + 12, payload_len));
    if (rec == im->tbuf + im->tlen) {
        im->tlen += len;
        return ACCEL_OK;
    }
    if (accel__write_all(im->tb_fd, rec, len) != 0)
        return accel__track_io_fail(t, &im->tb_errno, "tensorboard", t->event_file, errno);
    return ACCEL_OK;
}

/* Event{wall_time, step, summary{value{tag, simple_value}...}}. */
static accel_result accel__track_tb_scalars(accel_track *t, const accel_track_value *v, int count, int64_t step,
                                            double wall) {
    size_t summary = 0, event, i;
    unsigned char *rec, *p;
    accel_result r;
    for (i = 0; i < (size_t)count; ++i)
        summary += accel__track_pb_field_len(accel__track_pb_field_len(strlen(v[i].name)) + 5);
    event = accel__track_tb_head_len(step) + accel__track_pb_field_len(summary);
    rec = accel__track_tb_room(t, event + 16, &r);
    if (!rec) return r;
    p = accel__track_tb_head(rec + 12, wall, step);
    *p++ = 0x2A; /* summary, field 5 */
    p = accel__track_pb_varint(p, (uint64_t)summary);
    for (i = 0; i < (size_t)count; ++i) {
        size_t n = strlen(v[i].name);
        float f = (float)v[i].value;
        uint32_t bits;
        memcpy(&bits, &f, sizeof bits);
        *p++ = 0x0A; /* Summary.value, field 1 */
        p = accel__track_pb_varint(p, (uint64_t)(accel__track_pb_field_len(n) + 5));
        p = accel__track_pb_bytes(p, 0x0A, v[i].name, n); /* Value.tag, field 1 */
        *p++ = 0x15;                                     /* Value.simple_value, field 2, fixed32 */
        accel__put_u32(p, bits);
        p += 4;
    }
    return accel__track_tb_commit(t, rec, event);
}

/* Event{wall_time, file_version = "brain.Event:2"}: the first record of every event file. */
static accel_result accel__track_tb_version(accel_track *t, double wall) {
    static const char ver[] = "brain.Event:2";
    size_t event = accel__track_tb_head_len(0) + accel__track_pb_field_len(sizeof ver - 1);
    accel_result r;
    unsigned char *rec = accel__track_tb_room(t, event + 16, &r);
    if (!rec) return r;
    accel__track_pb_bytes(accel__track_tb_head(rec + 12, wall, 0), 0x1A, ver, sizeof ver - 1); /* file_version (3) */
    return accel__track_tb_commit(t, rec, event);
}

/* A text summary (what tf.summary.text / SummaryWriter.add_text write): Value{tag, tensor = TensorProto{dtype
   DT_STRING (7), tensor_shape {} (a scalar), string_val [text]}, metadata = {plugin_data {plugin_name "text"}}}. */
static accel_result accel__track_tb_text(accel_track *t, const char *tag, const char *text, size_t text_len,
                                         double wall) {
    size_t tag_len = strlen(tag);
    size_t plugin = accel__track_pb_field_len(4);                /* PluginData{plugin_name "text"} */
    size_t meta = accel__track_pb_field_len(plugin);             /* SummaryMetadata{plugin_data} */
    size_t tensor = 2 + 2 + accel__track_pb_field_len(text_len); /* dtype, empty shape, string_val */
    size_t value =
        accel__track_pb_field_len(tag_len) + accel__track_pb_field_len(tensor) + accel__track_pb_field_len(meta);
    size_t summary = accel__track_pb_field_len(value);
    size_t event = accel__track_tb_head_len(0) + accel__track_pb_field_len(summary);
    accel_result r;
    unsigned char *rec = accel__track_tb_room(t, event + 16, &r), *p;
    if (!rec) return r;
    p = accel__track_tb_head(rec + 12, wall, 0);
    *p++ = 0x2A; p = accel__track_pb_varint(p, (uint64_t)summary); /* Event.summary (5) */
    *p++ = 0x0A; p = accel__track_pb_varint(p, (uint64_t)value);   /* Summary.value (1) */
    p = accel__track_pb_bytes(p, 0x0A, tag, tag_len);               /* Value.tag (1) */
    *p++ = 0x42; p = accel__track_pb_varint(p, (uint64_t)tensor);  /* Value.tensor (8) */
    *p++ = 0x08; *p++ = 7;                                          /* TensorProto.dtype (1) = DT_STRING */
    *p++ = 0x12; *p++ = 0;                                          /* TensorProto.tensor_shape (2) = {} */
    p = accel__track_pb_bytes(p, 0x42, text, text_len);             /* TensorProto.string_val (8) */
    *p++ = 0x4A; p = accel__track_pb_varint(p, (uint64_t)meta);    /* Value.metadata (9) */
    *p++ = 0x0A; p = accel__track_pb_varint(p, (uint64_t)plugin);  /* SummaryMetadata.plugin_data (1) */
    accel__track_pb_bytes(p, 0x0A, "text", 4);                      /* PluginData.plugin_name (1) */
    return accel__track_tb_commit(t, rec, event);
}

/* ------------------------------------------------------------------------------- 5. numbers as Python writes */
/* Decimal integer; returns the end. */
static char *accel__track_i64(char *p, long long v) {
    char tmp[24];
    int n = 0;
    unsigned long long u = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
    if (v < 0) *p++ = '-';
    do { tmp[n++] = (char)('0' + (int)(u % 10)); u /= 10; } while (u);
    while (n) *p++ = tmp[--n];
    return p;
}

/* digits (no dot, no trailing zeros) × 10^(exp10 - ndigits + 1) as JSON text in Python's repr style: positional
   for -4 <= exp10 < 16 (integral values get ".0"), else d.ddde±XX. Returns the end. */
static char *accel__track_layout(char *p, int neg, const char *dig, int nd, int e10) {
    int i;
    if (neg) *p++ = '-';
    if (e10 < -4 || e10 >= 16) {
        *p++ = dig[0];
        if (nd > 1) { *p++ = '.'; for (i = 1; i < nd; ++i) *p++ = dig[i]; }
        *p++ = 'e';
        *p++ = e10 < 0 ? '-' : '+';
        if (e10 < 0) e10 = -e10;
        if (e10 < 10) *p++ = '0';
        return accel__track_i64(p, e10);
    }
    if (e10 < 0) {
        *p++ = '0'; *p++ = '.';
        for (i = -1; i > e10; --i) *p++ = '0';
        for (i = 0; i < nd; ++i) *p++ = dig[i];
        return p;
    }
    for (i = 0; i <= e10; ++i) *p++ = i < nd ? dig[i] : '0';
    *p++ = '.';
    if (nd <= e10 + 1) *p++ = '0';
    for (i = e10 + 1; i < nd; ++i) *p++ = dig[i];
    return p;
}

/* Shortest decimal (15, 16 or 17 significant digits) that reads back to v, from one "%.16e" rendering rounded in
   decimal and checked with strtod. NaN/Infinity/-Infinity as Python's json module writes them. out must hold
   40 bytes. Returns the length. */
static size_t accel__track_fmt_double(char *out, double v) {
    char sci[48], dig[20], cand[20];
    int nd = 0, e10 = 0, neg, prec, last2;
    const char *q;
    char *end;
    if (v != v) { memcpy(out, "NaN", 4); return 3; }
    if (v > DBL_MAX) { memcpy(out, "Infinity", 9); return 8; }
    if (v < -DBL_MAX) { memcpy(out, "-Infinity", 10); return 9; }
    if (v == 0) { end = accel__track_layout(out, 1.0 / v < 0, "0", 1, 0); *end = 0; return (size_t)(end - out); }
    snprintf(sci, sizeof sci, "%.16e", v);
    neg = sci[0] == '-';
    for (q = sci + neg; *q && *q != 'e' && *q != 'E'; ++q) /* digits, skipping the locale's decimal point */
        if (*q >= '0' && *q <= '9' && nd < 17) dig[nd++] = *q;
    if (*q) e10 = atoi(q + 1);
    /* A normal v is within half an ulp (< 12 units of the 17th digit) of any 15-digit decimal that reads back to
       it, and every decimal of <= 15 digits reads back through its 15-digit rounding (DBL_DIG): so 15 digits are
       tried only when the last two are near 00. Subnormals have fewer bits: every length is tried. */
    last2 = (dig[15] - '0') * 10 + (dig[16] - '0');
    prec = (v < DBL_MIN && v > -DBL_MIN) ? 1 : (last2 <= 12 || last2 >= 88) ? 15 : 16;
    for (; prec < 17; ++prec) {
        int up, pass;
        /* The nearest prec-digit decimal; the other neighbour only when the 17-digit rendering sits exactly on the
           half (…5000): rounding it again may then pick the wrong side (double rounding). */
        int half = dig[prec] == '5', j;
        for (j = prec + 1; j < 17; ++j) half &= dig[j] == '0';
        for (pass = 0; pass < 1 + half; ++pass) {
            int n = prec, e = e10, i;
            up = (dig[prec] >= '5') != (pass == 1);
            memcpy(cand, dig, (size_t)prec);
            if (up) {
                for (i = prec - 1; i >= 0 && cand[i] == '9'; --i) cand[i] = '0';
                if (i >= 0) cand[i]++;
                else { cand[0] = '1'; e++; }
            }
            while (n > 1 && cand[n - 1] == '0') --n;
            end = accel__track_layout(out, neg, cand, n, e);
            *end = 0;
            if (strtod(out, NULL) == v) return (size_t)(end - out);
        }
    }
    while (nd > 1 && dig[nd - 1] == '0') --nd;
    end = accel__track_layout(out, neg, dig, nd, e10);
    *end = 0;
    return (size_t)(end - out);
}


/* Numbers are formatted straight into the builder's reserved tail (the hot path of every JSONL line). */
static void accel__track_sb_i64(accel__sb *b, long long v) {
    if (accel__sb_reserve(b, 24)) return;
    b->n = (size_t)(accel__track_i64(b->p + b->n, v) - b->p);
    b->p[b->n] = 0;
}
static void accel__track_sb_double(accel__sb *b, double v) {
    if (accel__sb_reserve(b, 48)) return;
    b->n += accel__track_fmt_double(b->p + b->n, v); /* NUL-terminated */
}

/* Markdown table cell: '|' escaped, line breaks become spaces. */
static void accel__track_sb_md_cell(accel__sb *b, const char *s) {
    for (; *s; ++s) {
        if (*s == '|') accel__sb_add(b, "\\|", 2);
        else if (*s == '\n' || *s == '\r') accel__sb_add(b, " ", 1);
        else accel__sb_add(b, s, 1);
    }
}

/* The config value as JSON text (strings quoted and escaped as json.dumps does) or as plain text (markdown). */
static void accel__track_sb_param(accel__sb *b, const accel_track_param *c, int json) {
    switch (c->type) {
    case ACCEL_TRACK_PARAM_NUMBER: accel__track_sb_double(b, c->number); return;
    case ACCEL_TRACK_PARAM_INT: accel__track_sb_i64(b, (long long)c->integer); return;
    case ACCEL_TRACK_PARAM_BOOL: accel__sb_puts(b, c->integer ? "true" : "false"); return;
    case ACCEL_TRACK_PARAM_STRING:
        if (json) accel__sb_json_str(b, c->string, strlen(c->string), 0);
        else accel__track_sb_md_cell(b, c->string);
        return;
    }
}

/* ------------------------------------------------------------------------------------------------- 6. files */
/* dst = dir + "/" + name; run_dir is at most ACCEL_TRACK_PATH_CAPACITY - 128 bytes, so short names always fit. */
static void accel__track_path(char *dst, const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    if (a + b + 2 > ACCEL_TRACK_PATH_CAPACITY) b = ACCEL_TRACK_PATH_CAPACITY - 2 - a;
    memcpy(dst, dir, a);
    dst[a] = '/';
    memcpy(dst + a + 1, name, b);
    dst[a + 1 + b] = 0;
}

/* mkdir -p run_dir, then a writability check (so the error names the directory, not a file in it). */
static accel_result accel__track_make_run_dir(accel_track *t) {
    char failed[ACCEL_TRACK_PATH_CAPACITY];
    struct stat st;
    if (accel__mkdir_p(t->run_dir, failed, sizeof failed) != 0) {
        int e = errno;
        if (stat(failed, &st) == 0 && !S_ISDIR(st.st_mode))
            return ACCEL__FAIL(t->acc, ACCEL_ERR_IO,
                               "cannot create logging directory \"%.400s\": \"%.400s\" exists and is not a directory",
                               t->run_dir, failed);
        return ACCEL__FAIL(t->acc, ACCEL_ERR_IO, "cannot create logging directory \"%.400s\": mkdir \"%.400s\": %s",
                           t->run_dir, failed, strerror(e));
    }
    if (access(t->run_dir, W_OK | X_OK) != 0) {
        int e = errno;
        return ACCEL__FAIL(t->acc, ACCEL_ERR_IO, "logging directory \"%.400s\" is not writable: %s", t->run_dir,
                           strerror(e));
    }
    return ACCEL_OK;
}

/* fsync + close; the first error as errno (0 = fine). A file system without fsync (EINVAL, EROFS) is fine. */
static int accel__track_finish_fd(int fd) {
    int e = 0;
    if (fsync(fd) != 0 && errno != EINVAL && errno != EROFS) e = errno;
    if (close(fd) != 0 && !e) e = errno ? errno : EIO;
    return e;
}

/* Closes both files and frees everything. discard: an init_trackers that failed (nothing is written out; the event
   file, and metrics.jsonl if this call created it, are removed); otherwise the buffered records are written out,
   each healthy file is fsync'd, and the first error is returned. */
static accel_result accel__track_close(accel_track *t, int discard) {
    struct accel__track_impl *im = t->impl;
    accel_result r = ACCEL_OK, r2;
    int e;
    if (!im) return ACCEL_OK;
    if (im->tb_fd >= 0) {
        if (discard || im->tb_errno) close(im->tb_fd);
        else {
            r = accel__track_tb_write_out(t);
            e = accel__track_finish_fd(im->tb_fd);
            if (r == ACCEL_OK && e) r = accel__track_io_fail(t, NULL, "tensorboard", t->event_file, e);
        }
        if (discard && t->event_file[0]) unlink(t->event_file);
        im->tb_fd = -1;
    }
    if (im->jl_fd >= 0) {
        if (discard || im->jl_errno) close(im->jl_fd);
        else if ((e = accel__track_finish_fd(im->jl_fd)) != 0) {
            r2 = accel__track_io_fail(t, NULL, "jsonl", t->jsonl_file, e);
            if (r == ACCEL_OK) r = r2;
        }
        if (discard && im->jl_created) unlink(t->jsonl_file);
        im->jl_fd = -1;
    }
    accel__sb_free(&im->line);
    accel_host_free(t->acc, im->tbuf);
    accel_host_free(t->acc, im->buf);
    accel_host_free(t->acc, im);
    t->impl = NULL;
    return r;
}

/* config.json: json.dumps(config, indent=2, ensure_ascii=False) + "\n", written atomically. */
static accel_result accel__track_write_config(accel_track *t, const accel_track_param *cfg, int count) {
    accel__sb b;
    accel_result r;
    int i;
    accel__sb_init(&b, t->acc);
    accel__sb_add(&b, "{", 1);
    for (i = 0; i < count; ++i) {
        accel__sb_add(&b, i ? ",\n  " : "\n  ", i ? 4 : 3);
        accel__sb_json_str(&b, cfg[i].name, strlen(cfg[i].name), 0);
        accel__sb_add(&b, ": ", 2);
        accel__track_sb_param(&b, &cfg[i], 1);
    }
    accel__sb_add(&b, "\n}\n", 3);
    if (b.oom) { accel__sb_free(&b); return ACCEL_ERR_OUT_OF_MEMORY; }
    accel__track_path(t->config_file, t->run_dir, "config.json");
    r = accel__write_file(t->acc, t->config_file, b.p, b.n, 1);
    accel__sb_free(&b);
    if (r != ACCEL_OK) {
        t->config_file[0] = 0;
        return accel__fail_wrap(t->acc, r, "config.json");
    }
    return ACCEL_OK;
}

/* The hparams markdown table as a TensorBoard text summary. */
static accel_result accel__track_write_hparams(accel_track *t, const accel_track_param *cfg, int count, double wall) {
    accel__sb b;
    accel_result r;
    int i;
    accel__sb_init(&b, t->acc);
    accel__sb_puts(&b, "| name | value |\n|---|---|\n");
    for (i = 0; i < count; ++i) {
        accel__sb_add(&b, "| ", 2);
        accel__track_sb_md_cell(&b, cfg[i].name);
        accel__sb_add(&b, " | ", 3);
        accel__track_sb_param(&b, &cfg[i], 0);
        accel__sb_add(&b, " |\n", 3);
    }
    r = b.oom ? ACCEL_ERR_OUT_OF_MEMORY : accel__track_tb_text(t, "hparams", b.p, b.n, wall);
    accel__sb_free(&b);
    return r;
}

static accel_result accel__track_open_event_file(accel_track *t) {
    char host[256];
    long long secs = (long long)time(NULL);
    int fd = -1, i, e;
    size_t k;
    if (gethostname(host, sizeof host) != 0 || !host[0]) accel__fmt(host, sizeof host, "localhost");
    host[sizeof host - 1] = 0;
    for (k = 0; host[k]; ++k)
        if (host[k] == '/') host[k] = '_';
    host[64] = 0; /* keeps the name within the 128 bytes reserved after run_dir */
    for (i = 0; i < 100 && fd < 0; ++i) {
        char name[128];
        if (i == 0) accel__fmt(name, sizeof name, "events.out.tfevents.%lld.%.64s", secs, host);
        else accel__fmt(name, sizeof name, "events.out.tfevents.%lld.%.64s.%d", secs, host, i);
        accel__track_path(t->event_file, t->run_dir, name);
        fd = open(t->event_file, O_WRONLY | O_CREAT | O_EXCL, 0666);
        if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0) {
        e = errno;
        ACCEL__FAIL(t->acc, ACCEL_ERR_IO, "tensorboard: cannot create \"%.400s\": %s", t->event_file, strerror(e));
        t->event_file[0] = 0;
        return ACCEL_ERR_IO;
    }
    t->impl->tb_fd = fd;
    return ACCEL_OK;
}

/* The main process's part of init_trackers. On failure nothing stays open and no event file or config is left. */
static accel_result accel__track_open(accel_track *t, const char *project, const accel_track_param *cfg, int count) {
    struct accel__track_impl *im;
    accel_result r;
    double wall = accel__track_wall_time();
    size_t a = strlen(t->logging_dir), b = strlen(project);
    if (a + b + 2 > ACCEL_TRACK_PATH_CAPACITY - 128)
        return ACCEL__FAIL(t->acc, ACCEL_ERR_INVALID_ARGUMENT, "init_trackers: \"%.200s/%.200s\" is too long a path",
                           t->logging_dir, project);
    memcpy(t->run_dir, t->logging_dir, a);
    t->run_dir[a] = '/';
    memcpy(t->run_dir + a + 1, project, b + 1);
    r = accel__track_make_run_dir(t);
    if (r != ACCEL_OK) { t->run_dir[0] = 0; return r; }
    im = (struct accel__track_impl *)accel_host_alloc(t->acc, sizeof(struct accel__track_impl));
    if (!im) { t->run_dir[0] = 0; return ACCEL_ERR_OUT_OF_MEMORY; }
    memset(im, 0, sizeof *im);
    im->tb_fd = im->jl_fd = -1;
    accel__sb_init(&im->line, t->acc);
    accel__track_crc32c_tables(im->crc);
    t->impl = im;
    if (count > 0) r = accel__track_write_config(t, cfg, count);
    if (r == ACCEL_OK && (t->log_with & ACCEL_TRACK_TENSORBOARD)) {
        im->tbuf = (unsigned char *)accel_host_alloc(t->acc, ACCEL__TRACK_TB_BUFFER);
        r = im->tbuf ? accel__track_open_event_file(t) : ACCEL_ERR_OUT_OF_MEMORY;
        if (r == ACCEL_OK) r = accel__track_tb_version(t, wall);
        if (r == ACCEL_OK && count > 0) r = accel__track_write_hparams(t, cfg, count, wall);
        if (r == ACCEL_OK) r = accel__track_tb_write_out(t);
    }
    if (r == ACCEL_OK && (t->log_with & ACCEL_TRACK_JSONL)) {
        accel__track_path(t->jsonl_file, t->run_dir, "metrics.jsonl");
        im->jl_fd = open(t->jsonl_file, O_WRONLY | O_APPEND); /* a resumed run continues the file */
        if (im->jl_fd < 0 && errno == ENOENT) {
            im->jl_fd = open(t->jsonl_file, O_WRONLY | O_APPEND | O_CREAT | O_EXCL, 0666);
            im->jl_created = im->jl_fd >= 0; /* removed again if init_trackers fails */
        }
        if (im->jl_fd < 0) {
            int e = errno;
            r = ACCEL__FAIL(t->acc, ACCEL_ERR_IO, "jsonl: cannot open \"%.400s\": %s", t->jsonl_file, strerror(e));
            t->jsonl_file[0] = 0;
        }
    }
    if (r != ACCEL_OK) {
        accel__track_close(t, 1);
        if (t->config_file[0]) unlink(t->config_file);
        t->run_dir[0] = t->event_file[0] = t->jsonl_file[0] = t->config_file[0] = 0;
        return r;
    }
    im->last_flush = wall;
    return ACCEL_OK;
}

/* --------------------------------------------------------------------------------------- 7. init_trackers */
ACCEL__DEF accel_result accel_track_init_trackers(accel_track *t, const char *project_name,
                                                  const accel_track_param *config, int count) {
    accel *acc;
    accel_result local = ACCEL_OK, r;
    int i, opened = 0;
    if (!t || !t->acc)
        return ACCEL__FAIL(t ? t->acc : NULL, ACCEL_ERR_STATE, "init_trackers: call accel_track_init first");
    acc = t->acc;
    /* every check is local; every rank still takes part in the agreement below, so none is left waiting */
    if (t->state == ACCEL_TRACK_STATE_ACTIVE)
        local = ACCEL__FAIL(acc, ACCEL_ERR_STATE, "init_trackers was already called (accel_track_deinit ends a run)");
    else if (t->state != ACCEL_TRACK_STATE_READY)
        local = ACCEL__FAIL(acc, ACCEL_ERR_STATE, "init_trackers after accel_track_deinit: call accel_track_init for "
                            "a new run");
    else if (!project_name || !*project_name || !accel__track_utf8_ok(project_name, strlen(project_name)))
        local = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "init_trackers: project_name is NULL, empty or not UTF-8");
    else if (count < 0 || (count > 0 && !config))
        local = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "init_trackers: config is NULL with count %d", count);
    for (i = 0; local == ACCEL_OK && i < count; ++i) {
        local = accel__track_check_name(acc, "config", i, config[i].name, 0, NULL);
        if (local != ACCEL_OK) break;
        if ((int)config[i].type < 0 || (int)config[i].type > ACCEL_TRACK_PARAM_BOOL)
            local = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "config[%d] \"%.200s\": unknown type %d", i,
                                config[i].name, (int)config[i].type);
        else if (config[i].type == ACCEL_TRACK_PARAM_STRING &&
                 (!config[i].string || !accel__track_utf8_ok(config[i].string, strlen(config[i].string))))
            local = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "config[%d] \"%.200s\": the string is NULL or not UTF-8",
                                i, config[i].name);
    }
    if (local == ACCEL_OK && count > 1)
        local = accel__track_check_dups(acc, "config", &config[0].name, sizeof config[0], count);
    if (local == ACCEL_OK && t->is_writer && t->log_with) {
        local = accel__track_open(t, project_name, config, count);
        opened = local == ACCEL_OK;
    }
    /* the collective verdict: a failed rank fails every rank (the others get ACCEL_ERR_REMOTE with its message) */
    r = accel__agree(acc, local, "init_trackers");
    if (r != ACCEL_OK) {
        if (opened) { /* this rank's files are fine but another rank failed: take them back */
            accel__track_close(t, 1);
            if (t->config_file[0]) unlink(t->config_file);
            t->run_dir[0] = t->event_file[0] = t->jsonl_file[0] = t->config_file[0] = 0;
        }
        return r;
    }
    t->state = ACCEL_TRACK_STATE_ACTIVE;
    t->logged = 0;
    return ACCEL_OK;
}

/* --------------------------------------------------------------------------------- 8. log, flush, deinit */
static accel_result accel__track_state_error(accel_track *t, const char *what) {
    if (t->state == ACCEL_TRACK_STATE_ENDED)
        return ACCEL__FAIL(t->acc, ACCEL_ERR_STATE, "%s after accel_track_deinit: the trackers are closed", what);
    return ACCEL__FAIL(t->acc, ACCEL_ERR_STATE, "%s before init_trackers", what);
}

static accel_result accel__track_tb_flush(accel_track *t) {
    accel_result r = accel__track_tb_write_out(t);
    if (r == ACCEL_OK) t->impl->last_flush = accel__track_wall_time();
    return r;
}

static accel_result accel__track_log_tb(accel_track *t, const accel_track_value *v, int count, int64_t step,
                                        double wall) {
    struct accel__track_impl *im = t->impl;
    accel_result r;
    if (im->tb_errno) return accel__track_disabled(t, "tensorboard", t->event_file, im->tb_errno);
    r = accel__track_tb_scalars(t, v, count, step, wall);
    if (r != ACCEL_OK) return r;
    /* wall clock (already read for the record): a clock stepped backwards writes out early, never late */
    if (t->flush_secs < 0 || wall - im->last_flush >= t->flush_secs || wall < im->last_flush)
        return accel__track_tb_flush(t);
    return ACCEL_OK;
}

static accel_result accel__track_log_jsonl(accel_track *t, const accel_track_value *v, int count, int64_t step,
                                           const struct timespec *ts) {
    struct accel__track_impl *im = t->impl;
    accel__sb *b = &im->line;
    char frac[8];
    long us = (long)(ts->tv_nsec / 1000), div = 100000;
    int i, k = 0;
    if (im->jl_errno) return accel__track_disabled(t, "jsonl", t->jsonl_file, im->jl_errno);
    b->n = 0; /* the line's buffer is reused */
    b->oom = 0;
    if (step == ACCEL_TRACK_NO_STEP) accel__sb_add(b, "{\"step\": null", 13);
    else {
        accel__sb_add(b, "{\"step\": ", 9);
        accel__track_sb_i64(b, (long long)step);
    }
    accel__sb_add(b, ", \"time\": ", 10);
    accel__track_sb_i64(b, (long long)ts->tv_sec);
    frac[k++] = '.';
    for (; div; div /= 10) frac[k++] = (char)('0' + (int)(us / div % 10));
    accel__sb_add(b, frac, (size_t)k);
    for (i = 0; i < count; ++i) {
        accel__sb_add(b, ", ", 2);
        accel__sb_json_str(b, v[i].name, strlen(v[i].name), 0);
        accel__sb_add(b, ": ", 2);
        accel__track_sb_double(b, v[i].value);
    }
    accel__sb_add(b, "}\n", 2);
    if (b->oom) return ACCEL_ERR_OUT_OF_MEMORY;
    if (accel__write_all(im->jl_fd, b->p, b->n) != 0)
        return accel__track_io_fail(t, &im->jl_errno, "jsonl", t->jsonl_file, errno);
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_track_log(accel_track *t, const accel_track_value *values, int count, int64_t step) {
    accel_result r = ACCEL_OK, r2;
    struct timespec ts;
    size_t lens[32];
    double wall;
    int i;
    if (!t || !t->acc) return ACCEL__FAIL(NULL, ACCEL_ERR_INVALID_ARGUMENT, "accel_track_log: tracker not initialized");
    if (t->state != ACCEL_TRACK_STATE_ACTIVE) return accel__track_state_error(t, "log()");
    if (count < 0 || (count > 0 && !values))
        return ACCEL__FAIL(t->acc, ACCEL_ERR_INVALID_ARGUMENT, "log(): values is NULL with count %d", count);
    for (i = 0; i < count; ++i) {
        r = accel__track_check_name(t->acc, "values", i, values[i].name, 1, i < 32 ? &lens[i] : NULL);
        if (r != ACCEL_OK) return r;
    }
    if (count > 32) {
        r = accel__track_check_dups(t->acc, "values", &values[0].name, sizeof values[0], count);
        if (r != ACCEL_OK) return r;
    } else { /* the usual few names: lengths first */
        int j;
        for (i = 1; i < count; ++i)
            for (j = 0; j < i; ++j)
                if (lens[i] == lens[j] && !memcmp(values[i].name, values[j].name, lens[i]))
                    return ACCEL__FAIL(t->acc, ACCEL_ERR_INVALID_ARGUMENT,
                                       "values[%d] and values[%d] have the same name \"%.200s\"", j, i, values[i].name);
    }
    if (count == 0) return ACCEL_OK;
    t->logged++;
    if (!t->is_writer || !t->impl) return ACCEL_OK;
    accel__track_wall_clock(&ts);
    wall = accel__track_seconds(&ts);
    if (t->impl->tb_fd >= 0) r = accel__track_log_tb(t, values, count, step, wall);
    if (t->impl->jl_fd >= 0) {
        r2 = accel__track_log_jsonl(t, values, count, step, &ts);
        if (r == ACCEL_OK) r = r2;
    }
    return r;
}

ACCEL__DEF accel_result accel_track_flush(accel_track *t) {
    if (!t || !t->acc) return ACCEL__FAIL(NULL, ACCEL_ERR_INVALID_ARGUMENT, "accel_track_flush: tracker not initialized");
    if (t->state != ACCEL_TRACK_STATE_ACTIVE) return accel__track_state_error(t, "flush()");
    if (!t->impl || t->impl->tb_fd < 0) return ACCEL_OK;
    if (t->impl->tb_errno) return accel__track_disabled(t, "tensorboard", t->event_file, t->impl->tb_errno);
    return accel__track_tb_flush(t);
}

ACCEL__DEF accel_result accel_track_deinit(accel_track *t) {
    accel_result r;
    if (!t || !t->acc) return ACCEL_OK; /* NULL, zeroed, or accel_track_init failed */
    r = accel__track_close(t, 0);
    t->state = ACCEL_TRACK_STATE_ENDED;
    return r;
}

#endif /* ACCEL_IMPLEMENTATION */

/* accel is released under the MIT licence. Copyright (c) 2026 the accel authors. */
