/* accel_trackers.h — experiment tracking from C: TensorBoard event files and JSONL metrics, written by the main
   process (Accelerate's log_with / init_trackers / log / end_training).

   CONTENTS
     WHAT IT WRITES
     USAGE
     OPTIONS                      accel_track_desc
     LIFECYCLE
     PROCESSES
     ERRORS                       never fatal
     VALUES                       float32 events, shortest-decimal JSON
     THREADS AND MEMORY
     DIFFERENCES FROM ACCELERATE

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
     log_with     ACCEL_TRACK_TENSORBOARD | ACCEL_TRACK_JSONL, ACCEL_TRACK_ALL, ACCEL_TRACK_NONE; 0 → ACCEL_LOG_WITH
                  ("tensorboard", "jsonl", "all", "none" or a comma list, any case; anything else is
                  ACCEL_ERR_ENVIRONMENT naming it) → no tracker (Accelerate's log_with=None).
     logging_dir  base directory; NULL → acc->desc.logging_dir (the core: desc.logging_dir → project_dir → ".").
     flush_secs   TensorBoard records (64 KiB buffered) go out at the first log() flush_secs after the last write-out,
                  when the buffer is full, at accel_track_flush and deinit; 0 → 120 (SummaryWriter's); < 0: every log().
                  metrics.jsonl is never buffered: one write() per log() line (a crash loses at most that line).

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
     reads back to the same double, laid out like Python's repr (positional for 1e-4 <= |v| < 1e16, integral values with
     ".0" so Python reads floats, else 1.5e-07), computed without printf or strtod (no locale; bench/trackers measures
     it). NaN and ±inf are written as the tokens NaN, Infinity, -Infinity — what Python's json.dumps writes and
     json.loads reads by default (not strict JSON: jq and browsers reject them). Names are escaped as json.dumps(name,
     ensure_ascii=False) does (", \, control characters as \n, \t, \u00XX); other UTF-8 is written as is.

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
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                           "accel_track_desc.flush_secs = %g is not a number of seconds", d.flush_secs);
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
    if (!name || !*name)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "%s[%d]: the name is NULL or empty", what, i);
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

/* Shortest decimal that reads back to v (what Python's repr picks), with no printf and no strtod: the Schubfach
   construction (R. Giulietti, "The Schubfach way to render doubles", 2020), written for accel. v = c * 2^q lies
   in a rounding interval R of width 2^q (or 3/4 of it below v when c is a power of two): every real in R reads
   back as v (its ends too when c is even: round-half-even). With k = floor(log10 of the interval's width), R
   scaled by 10^-k is between 1 and 10 wide, so it holds an integer (s or s + 1, s = floor(v*10^-k)) and at
   most one multiple of ten. That multiple of ten, when R holds it, is the unique shortest decimal; otherwise the
   shortest have the digits of s or s + 1 and the one nearer v wins (ties: the even one). The scaled interval
   ends and v are computed in quarter units from a 126-bit over-estimate of 10^-k, rounded to odd: an even
   result means exact, so each comparison with an integer comes out as with exact arithmetic (the paper's
   theorem for this table precision; checked here against printf + strtod on millions of doubles, see
   tests/unit/trackers/test_trackers_fmt.c). Table: scripts/gen_track_pow10.py. */
#define ACCEL__TRACK_POW10_MIN (-292)
/* e = -292..324: {g >> 63, g mod 2^63}, g = floor(10^e * 2^(125 - floor(log2 10^e))) + 1 */
static const uint64_t accel__track_pow10[617][2] = {
    {0x7FBBD8FE5F5E6E27U, 0x497A3A2704EEC3DFU}, {0x4FD5679EFB9B04D8U, 0x5DEC645863153A6CU},
    {0x63CAC186BA81C60EU, 0x75677D6E7BDA8906U}, {0x7CBD71E869223792U, 0x52C15CCA1AD12B48U},
    {0x4DF6673141B562BBU, 0x53B8D9FE50C2BB0DU}, {0x617400FD9222BB6AU, 0x48A7107DE4F369D0U},
    {0x79D1013CF6AB6A45U, 0x1AD0D49D5E304444U}, {0x4C22A0C61A2B226BU, 0x20C284E25ADE2AABU},
    {0x5F2B48F7A0B5EB06U, 0x08F3261AF195B555U}, {0x76F61B3588E365C7U, 0x4B2FEFA1ADFB22ABU},
    {0x4A59D101758E1F9CU, 0x5EFDF5C50CBCF5ABU}, {0x5CF04541D2F1A783U, 0x76BD73364FEC3315U},
    {0x742C569247AE1164U, 0x746CD003E3E73FDBU}, {0x489BB61B6CCCCADFU, 0x08C402026E7087E9U},
    {0x5AC2A3A247FFFD96U, 0x6AF502830A0CA9E3U}, {0x71734C8AD9FFFCFCU, 0x45B24323CC8FD45CU},
    {0x46E80FD6C83FFE1DU, 0x6B8F69F65FD9E4B9U}, {0x58A213CC7A4FFDA5U, 0x26734473F7D05DE8U},
    {0x6ECA98BF98E3FD0EU, 0x50101590F5C47561U}, {0x453E9F77BF8E7E29U, 0x120A0D7A999AC95DU},
    {0x568E4755AF721DB3U, 0x368C90D940017BB4U}, {0x6C31D92B1B4EA520U, 0x242FB50F9001DAA1U},
    {0x439F27BAF1112734U, 0x169DD129BA0128A5U}, {0x5486F1A9AD557101U, 0x1C454574288172CEU},
    {0x69A8AE1418AACD41U, 0x435696D132A1CF81U}, {0x42096CCC8F6AC048U, 0x7A161E42BFA521B1U},
    {0x528BC7FFB345705BU, 0x189BA5D36F8E6A1DU}, {0x672EB9FFA016CC71U, 0x7EC28F484B7204A4U},
    {0x407D343FC40E3FC7U, 0x1F39998D2F2742E7U}, {0x509C814FB511CFB9U, 0x0707FFF07AF113A1U},
    {0x64C3A1A3A25643A7U, 0x28C9FFEC99AD5889U}, {0x7DF48A0C8AEBD491U, 0x12FC7FE7C018AEABU},
    {0x4EB8D647D6D364DAU, 0x5BDDCFF0D80F6D2BU}, {0x62670BD9CC883E11U, 0x32D543ED0E134875U},
    {0x7B00CED03FAA4D95U, 0x5F8A94E851981A93U}, {0x4CE0814227CA707DU, 0x4BB69D1132FF109CU},
    {0x6018A192B1BD0C9CU, 0x7EA444557FBED4C3U}, {0x781EC9F75E2C4FC4U, 0x1E4D556ADFAE89F3U},
    {0x4B133E3A9ADBB1DAU, 0x52F05562CBCD1638U}, {0x5DD80DC941929E51U, 0x27AC6ABB7EC05BC6U},
    {0x754E113B91F745E5U, 0x5197856A5E7072B8U}, {0x4950CAC53B3A8BAFU, 0x42FEB3627B0647B3U},
    {0x5BA4FD768A092E9BU, 0x33BE603B19C7D99FU}, {0x728E3CD42C8B7A42U, 0x20ADF849E039D007U},
    {0x4798E6049BD72C69U, 0x346CBB2E2C242205U}, {0x597F1F85C2CCF783U, 0x6187E9F9B72D2A86U},
    {0x6FDEE76733803564U, 0x59E9E47824F87527U}, {0x45EB50A08030215EU, 0x78322ECB171B4939U},
    {0x576624C8A03C29B6U, 0x563EBA7DDCE21B87U}, {0x6D3FADFAC84B3424U, 0x2BCE691D541AA268U},
    {0x4447CCBCBD2F0096U, 0x5B6101B25490A581U}, {0x5559BFEBEC7AC0BCU, 0x3239421EE9B4CEE1U},
    {0x6AB02FE6E79970EBU, 0x3EC792A6A422029AU}, {0x42AE1DF050BFE693U, 0x173CBBA8269541A0U},
    {0x5359A56C64EFE037U, 0x7D0BEA92303A9208U}, {0x68300EC77E2BD845U, 0x7C4EE536BC49368AU},
    {0x411E093CAEDB672BU, 0x5DB14F4235ADC217U}, {0x51658B8BDA9240F6U, 0x551DA312C319329CU},
    {0x65BEEE6ED136D134U, 0x2A650BD773DF7F43U}, {0x7F2EAA0A85848581U, 0x34FE4ECD50D75F14U},
    {0x4F7D2A469372D370U, 0x711EF14052869B6CU}, {0x635C74D8384F884DU, 0x0D66AD9067284247U},
    {0x7C33920E46636A60U, 0x30C058F480F252D9U}, {0x4DA03B48EBFE227CU, 0x1E783798D09773C8U},
    {0x61084A1B26FDAB1BU, 0x2616457F04BD50BAU}, {0x794A5CA1F0BD15E2U, 0x0F9BD6DEC5ECA4E8U},
    {0x4BCE79E536762DADU, 0x29C1664B3BB3E711U}, {0x5EC2185E8413B918U, 0x5431BFDE0AA0E0D5U},
    {0x76729E762518A75EU, 0x693E2FD58D49190BU}, {0x4A07A309D72F689BU, 0x21C6DDE5784DAFA7U},
    {0x5C898BCC4CFB42C2U, 0x0A38955ED6611B90U}, {0x73ABEEBF603A1372U, 0x4CC6BAB68BF96274U},
    {0x484B75379C244C27U, 0x4FFC34B2177BDD89U}, {0x5A5E5285832D5F31U, 0x43FB41DE9D5AD4EBU},
    {0x70F5E726E3F8B6FDU, 0x74FA125644B18A26U}, {0x4699B0784E7B725EU, 0x591C4B75EAEEF658U},
    {0x58401C96621A4EF6U, 0x2F635E5365AAB3EDU}, {0x6E5023BBFAA0E2B3U, 0x7B3C35E83F1560E9U},
    {0x44F216557CA48DB0U, 0x3D05A1B1276D5C92U}, {0x562E9BEADBCDB11CU, 0x4C470A1D7148B3B6U},
    {0x6BBA42E592C11D63U, 0x5F58CCA4CD9AE0A3U}, {0x435469CF7BB8B25EU, 0x2B977FE70080CC66U},
    {0x542984435AA6DEF5U, 0x767D5FE0C0A0FF80U}, {0x6933E554315096B3U, 0x341CB7D8F0C93F5FU},
    {0x41C06F549ED25E30U, 0x1091F2E7967DC79CU}, {0x52308B29C686F5BCU, 0x14B66FA17C1D3983U},
    {0x66BCADF43828B32BU, 0x19E40B89DB2487E3U}, {0x4035ECB8A3196FFBU, 0x002E873628F6D4EEU},
    {0x504367E6CBDFCBF9U, 0x603A2903B3348A2AU}, {0x645441E07ED7BEF8U, 0x1848B344A001ACB4U},
    {0x7D6952589E8DAEB6U, 0x1E5AE015C80217E1U}, {0x4E61D37763188D31U, 0x72F8CC0D9D014EEDU},
    {0x61FA48553BDEB07EU, 0x2FB6FF110441A2A8U}, {0x7A78DA6A8AD65C9DU, 0x7BA4BED545520B52U},
    {0x4C8B888296C5F9E2U, 0x5D46F7454B534713U}, {0x5FAE6AA33C77785BU, 0x3498B5169E2818D8U},
    {0x779A054C0B955672U, 0x21BEE25C45B21F0EU}, {0x4AC0434F873D5607U, 0x35174D79AB8F5369U},
    {0x5D705423690CAB89U, 0x225D20D816732843U}, {0x74CC692C434FD66BU, 0x4AF4690E1C0FF253U},
    {0x48FFC1BBAA11E603U, 0x1ED8C1A8D189F774U}, {0x5B3FB22A94965F84U, 0x068EF21305EC7551U},
    {0x720F9EB539BBF765U, 0x0832AE97C76792A5U}, {0x4749C33144157A9FU, 0x151FAD1EDCA0BBA8U},
    {0x591C33FD951AD946U, 0x7A67986693C8EA91U}, {0x6F6340FCFA618F98U, 0x59017E8038BB2536U},
    {0x459E089E1C7CF9BFU, 0x37A0EF102374F742U}, {0x57058AC5A39C382FU, 0x25892AD42C523512U},
    {0x6CC6ED770C83463BU, 0x0EEB75893766C256U}, {0x43FC546A67D20BE4U, 0x79532975C2A03976U},
    {0x54FB698501C68EDEU, 0x17A7F3D3334847D4U}, {0x6A3A43E642383295U, 0x5D91F0C8001A59C8U},
    {0x42646A6FE9631F9DU, 0x4A7B367D0010781DU}, {0x52FD850BE3BBE784U, 0x7D1A041C40149625U},
    {0x67BCE64EDCAAE166U, 0x1C6085235019BBAEU}, {0x40D60FF149EACCDFU, 0x71BC53361210154DU},
    {0x510B93ED9C658017U, 0x6E2B680396941AA0U}, {0x654E78E9037EE01DU, 0x69B642047C392148U},
    {0x7EA21723445E9825U, 0x2423D2859B476999U}, {0x4F254E760ABB1F17U, 0x26966393810CA200U},
    {0x62EEA2138D69E6DDU, 0x103BFC78614FCA80U}, {0x7BAA4A9870C46094U, 0x344AFB9679A3BD20U},
    {0x4D4A6E9F467ABC5CU, 0x60AEDD3E0C065634U}, {0x609D0A4718196B73U, 0x78DA948D8F07EBC1U},
    {0x78C44CD8DE1FC650U, 0x771139B0F2C9E6B1U}, {0x4B7AB0078AD3DBF2U, 0x4A6AC40E97BE302FU},
    {0x5E595C096D88D2EFU, 0x1D0575123DADBC3AU}, {0x75EFB30BC8EB07ABU, 0x0446D256CD192B49U},
    {0x49B5CFE75D92E4CAU, 0x72AC4376402FBB0EU}, {0x5C2343E134F79DFDU, 0x4F575453D03BA9D1U},
    {0x732C14D98235857DU, 0x032D2968C44A9445U}, {0x47FB8D07F161736EU, 0x11FC39E17AAE9CABU},
    {0x59FA7049EDB9D049U, 0x567B4859D95A43D6U}, {0x70790C5C6928445CU, 0x0C1A1A704FB0D4CCU},
    {0x464BA7B9C1B92AB9U, 0x4790508631CE84FFU}, {0x57DE91A832277567U, 0x797464A7BE42263FU},
    {0x6DD636123EB152C1U, 0x77D17DD1ADD2AFCFU}, {0x44A5E1CB672ED3B9U, 0x1AE2EEA30CA3ADE1U},
    {0x55CF5A3E40FA88A7U, 0x419BAA4BCFCC995AU}, {0x6B4330CDD1392AD1U, 0x320294DEC3BFBFB0U},
    {0x4309FE80A2C3BAC2U, 0x6F419D0B3A57D7CEU}, {0x53CC7E20CB74A973U, 0x4B12044E08EDCDC2U},
    {0x68BF9DA8FE51D3D0U, 0x3DD685618B294132U}, {0x4177C2899EF32462U, 0x26A6135CF6F9C8BFU},
    {0x51D5B32C06AFED7AU, 0x704F983434B83AEFU}, {0x664B1FF7085BE8D9U, 0x4C637E4141E649ABU},
    {0x7FDDE7F4CA72E30FU, 0x7F7C5DD1925FDC15U}, {0x4FEAB0F8FE87CDE9U, 0x7FADBAA2FB7BE98DU},
    {0x63E55D373E29C164U, 0x3F99294BBA5AE3F1U}, {0x7CDEB4850DB431BDU, 0x4F7F739EA8F19CEDU},
    {0x4E0B30D328909F16U, 0x41AFA84329970214U}, {0x618DFD07F2B4C6DCU, 0x121B9253F3FCC299U},
    {0x79F17C49EF61F893U, 0x16A276E8F0FBF33FU}, {0x4C36EDAE359D3B5BU, 0x7E258A51969D7808U},
    {0x5F44A919C3048A32U, 0x7DAEECE5FC44D609U}, {0x7715D36033C5ACBFU, 0x5D1AA81F7B560B8CU},
    {0x4A6DA41C205B8BF7U, 0x6A30A913AD15C738U}, {0x5D090D2328726EF5U, 0x64BCD358985B3905U},
    {0x744B506BF28F0AB3U, 0x1DEC082EBE720746U}, {0x48AF1243779966B0U, 0x02B3851D3707448CU},
    {0x5ADAD6D4557FC05CU, 0x0360666484C915AFU}, {0x71918C896ADFB073U, 0x04387FFDA5FB5B1BU},
    {0x46FAF7D5E2CBCE47U, 0x72A34FFE87BD18F1U}, {0x58B9B5CB5B7EC1D9U, 0x6F4C23FE29AC5F2DU},
    {0x6EE8233E325E7250U, 0x2B1F2CFDB41776F8U}, {0x45511606DF7B0772U, 0x1AF37C1E908EAA5BU},
    {0x56A55B889759C94EU, 0x61B05B2634B254F2U}, {0x6C4EB26ABD303BA2U, 0x3A1C71EFC1DEEA2EU},
    {0x43B12F82B63E2545U, 0x4451C735D92B525DU}, {0x549D7B6363CDAE96U, 0x756639034F7626F4U},
    {0x69C4DA3C3CC11A3CU, 0x52BFC7442353B0B1U}, {0x421B0865A5F8B065U, 0x73B7DC8A96144E6FU},
    {0x52A1CA7F0F76DC7FU, 0x30A5D3AD3B99620BU}, {0x674A3D1ED354939FU, 0x1CCF48988A7FBA8DU},
    {0x408E66334414DC43U, 0x42018D5F568FD498U}, {0x50B1FFC0151A1354U, 0x3281F0B72C33C9BEU},
    {0x64DE7FB01A609829U, 0x3F226CE4F740BC2EU}, {0x7E161F9C20F8BE33U, 0x6EEB081E3510EB39U},
    {0x4ECDD3C1949B76E0U, 0x3552E512E12A9304U}, {0x628148B1F9C25498U, 0x42A79E57997537C5U},
    {0x7B219ADE7832E9BEU, 0x535185ED7FD285B6U}, {0x4CF500CB0B1FD217U, 0x1412F3B46FE39392U},
    {0x603240FDCDE7C69CU, 0x7917B0A18BDC7876U}, {0x783ED13D4161B844U, 0x175D9CC9EED39694U},
    {0x4B2742C648DD132AU, 0x4E9A81FE35443E1CU}, {0x5DF11377DB1457F5U, 0x2241227DC2954DA3U},
    {0x756D5855D1D96DF2U, 0x4AD16B1D333AA10CU}, {0x49645735A327E4B7U, 0x4EC2E2F24004A4A8U},
    {0x5BBD6D030BF1DDE5U, 0x42739BAED005CDD2U}, {0x72ACC843CEEE555EU, 0x7310829A84074146U},
    {0x47ABFD2A6154F55BU, 0x27EA51A0928488CCU}, {0x5996FC74F9AA32B2U, 0x11E4E608B725AAFFU},
    {0x6FFCBB923814BF5EU, 0x565E1F8AE4EF15BEU}, {0x45FDF53B630CF79BU, 0x15FAD3B6CF156D97U},
    {0x577D728A3BD03581U, 0x7B7988A482DAC8FDU}, {0x6D5CCF2CCAC442E2U, 0x3A57EACDA3917B3CU},
    {0x445A017BFEBAA9CDU, 0x4476F2C0863AED06U}, {0x557081DAFE695440U, 0x7594AF70A7C9A847U},
    {0x6ACCA251BE03A951U, 0x12F9DB4CD1BC1258U}, {0x42BFE57316C249D2U, 0x5BDC291003158B77U},
    {0x536FDECFDC72DC47U, 0x32D3335403DAEE55U}, {0x684BD683D38F9359U, 0x1F88002904D1A9EAU},
    {0x412F66126439BC17U, 0x63B50019A3030A33U}, {0x517B3F96FD482B1DU, 0x5CA240200BC3CCBFU},
    {0x65DA0F7CBC9A35E5U, 0x13CAD0280EB4BFEFU}, {0x7F50935BEBC0C35EU, 0x38BD84321261EFEBU},
    {0x4F925C1973587A1BU, 0x0376729F4B7D35F3U}, {0x6376F31FD02E98A1U, 0x64540F471E5C836FU},
    {0x7C54AFE7C43A3ECAU, 0x1D691318E5F3A44BU}, {0x4DB4EDF0DAA4673EU, 0x3261ABEF8FB846AFU},
    {0x6122296D114D810DU, 0x7EFA16EB73A6585BU}, {0x796AB3C855A0E151U, 0x3EB89CA6508FEE71U},
    {0x4BE2B05D35848CD2U, 0x773361E7F259F507U}, {0x5EDB5C7482E5B007U, 0x55003A61EEF07249U},
    {0x76923391A39F1C09U, 0x4A4048FA6AAC8EDBU}, {0x4A1B603B06437185U, 0x7E682D9C82ABD949U},
    {0x5CA23849C7D44DE7U, 0x3E023903A356CF9BU}, {0x73CAC65C39C96161U, 0x2D82C7448C2C8382U},
    {0x485EBBF9A41DDCDCU, 0x6C71BC8AD79BD231U}, {0x5A766AF80D255414U, 0x078E2BAD8D82C6BDU},
    {0x711405B6106EA919U, 0x0971B698F0E3786DU}, {0x46AC8391CA4529AFU, 0x55E7121F968E2B44U},
    {0x5857A4763CD6741BU, 0x4B60D6A77C31B615U}, {0x6E6D8D93CC0C1122U, 0x3E390C515B3E239AU},
    {0x4504787C5F878AB5U, 0x46E3A7B2D906D640U}, {0x5645969B77696D62U, 0x789C919F8F488BD0U},
    {0x6BD6FC425543C8BBU, 0x56C3B607731AAEC4U}, {0x43665DA9754A5D75U, 0x263A51C4A7F0AD3BU},
    {0x543FF513D29CF4D2U, 0x4FC8E635D1ECD88AU}, {0x694FF258C7443207U, 0x23BB1FC346680EACU},
    {0x41D1F7777C8A9F44U, 0x4654F3DA0C01092CU}, {0x524675555BAD4715U, 0x57EA30D08F014B76U},
    {0x66D812AAB29898DBU, 0x0DE4BD04B2C19E54U}, {0x40470BAAAF9F5F88U, 0x78AEF622EFB902F5U},
    {0x5058CE955B87376BU, 0x16DAB3ABABA743B2U}, {0x646F023AB2690545U, 0x7C9160969691149EU},
    {0x7D8AC2C95F034697U, 0x3BB5B8BC3C3559C5U}, {0x4E76B9BDDB620C1EU, 0x55519375A5A1581BU},
    {0x6214682D523A8F26U, 0x2AA5F8530F09AE22U}, {0x7A998238A6C932EFU, 0x754F7667D2CC19ABU},
    {0x4C9FF163683DBFD5U, 0x7951AA00E3BF900BU}, {0x5FC7EDBC424D2FCBU, 0x37A614811CAF740DU},
    {0x77B9E92B52E07BBEU, 0x258F99A163DB5111U}, {0x4AD431BB13CC4D56U, 0x7779C004DE6912ABU},
    {0x5D893E29D8BF60ACU, 0x5558300616035755U}, {0x74EB8DB44EEF38D7U, 0x6AAE3C079B842D2AU},
    {0x49133890B1558386U, 0x72ACE584C1329C3BU}, {0x5B5806B4DDAAE468U, 0x4F581EE5F17F4349U},
    {0x722E086215159D82U, 0x632E269F6DDF141BU}, {0x475CC53D4D2D8271U, 0x5DFCD823A4AB6C91U},
    {0x5933F68CA078E30EU, 0x157C0E2C8DD647B5U}, {0x6F80F42FC8971BD1U, 0x5ADB11B7B14BD9A3U},
    {0x45B0989DDD5E7163U, 0x08C8EB12CECF6806U}, {0x571CBEC554B60DBBU, 0x6AFB25D782834207U},
    {0x6CE3EE76A9E3912AU, 0x65B9EF4D63241289U}, {0x440E750A2A2E3ABAU, 0x5F9435905DF68B96U},
    {0x5512124CB4B9C969U, 0x377942F475742E7BU}, {0x6A5696DFE1E83BC3U, 0x655793B192D13A1AU},
    {0x42761E4BED31255AU, 0x2F56BC4EFBC2C450U}, {0x5313A5DEE87D6EB0U, 0x7B2C6B62BAB37564U},
    {0x67D88F56A29CCA5DU, 0x19F7863B696052BDU}, {0x40E7599625A1FE7AU, 0x203AB3E521DC33B6U},
    {0x51212FFBAF0A7E18U, 0x684960DE6A5340A4U}, {0x65697BFA9ACD1D9FU, 0x025BB91604E810CDU},
    {0x7EC3DAF941806506U, 0x62F2A75B86221500U}, {0x4F3A68DBC8F03F24U, 0x1DD7A89933D54D20U},
    {0x63090312BB2C4EEDU, 0x254D92BF80CAA068U}, {0x7BCB43D769F762A8U, 0x4EA0F76F60FD4882U},
    {0x4D5F0A66A23A9DA9U, 0x31249AA59C9E4D51U}, {0x60B6CD004AC94513U, 0x5D6DC14F03C5E0A5U},
    {0x78E480405D7B9658U, 0x54C931A2C4B758CFU}, {0x4B8ED0283A6D3DF7U, 0x34FDBF05BAF29781U},
    {0x5E72843249088D75U, 0x223D2EC729AF3D62U}, {0x760F253EDB4AB0D2U, 0x4ACC7A78F41B0CBAU},
    {0x49C97747490EAE83U, 0x4EBFCC8B9890E7F4U}, {0x5C3BD5191B525A24U, 0x426FBFAE7EB521F1U},
    {0x734ACA5F6226F0ADU, 0x530BAF9A1E626A6DU}, {0x480EBE7B9D58566CU, 0x43E74DC052FD8285U},
    {0x5A126E1A84AE6C07U, 0x54E1213067BCE326U}, {0x709709A125DA0709U, 0x4A19697C81AC1BEFU},
    {0x465E6604B7A84465U, 0x7E4FE1EDD10B9175U}, {0x57F5FF85E592557FU, 0x3DE3DA69454E75D3U},
    {0x6DF37F675EF6EADFU, 0x2D5CD10396A21347U}, {0x44B82FA09B5A52CBU, 0x4C5A02A23E254C0DU},
    {0x55E63B88C230E77EU, 0x3F70834ACDAE9F10U}, {0x6B5FCA6AF2BD215EU, 0x0F4CA41D811A46D4U},
    {0x431BDE82D7B634DAU, 0x698FE69270B06C44U}, {0x53E2D6238DA3C211U, 0x43F3E0370CDC8755U},
    {0x68DB8BAC710CB295U, 0x74F0D844D013A92BU}, {0x4189374BC6A7EF9DU, 0x5916872B020C49BBU},
    {0x51EB851EB851EB85U, 0x0F5C28F5C28F5C29U}, {0x6666666666666666U, 0x3333333333333334U},
    {0x4000000000000000U, 0x0000000000000001U}, {0x5000000000000000U, 0x0000000000000001U},
    {0x6400000000000000U, 0x0000000000000001U}, {0x7D00000000000000U, 0x0000000000000001U},
    {0x4E20000000000000U, 0x0000000000000001U}, {0x61A8000000000000U, 0x0000000000000001U},
    {0x7A12000000000000U, 0x0000000000000001U}, {0x4C4B400000000000U, 0x0000000000000001U},
    {0x5F5E100000000000U, 0x0000000000000001U}, {0x7735940000000000U, 0x0000000000000001U},
    {0x4A817C8000000000U, 0x0000000000000001U}, {0x5D21DBA000000000U, 0x0000000000000001U},
    {0x746A528800000000U, 0x0000000000000001U}, {0x48C2739500000000U, 0x0000000000000001U},
    {0x5AF3107A40000000U, 0x0000000000000001U}, {0x71AFD498D0000000U, 0x0000000000000001U},
    {0x470DE4DF82000000U, 0x0000000000000001U}, {0x58D15E1762800000U, 0x0000000000000001U},
    {0x6F05B59D3B200000U, 0x0000000000000001U}, {0x4563918244F40000U, 0x0000000000000001U},
    {0x56BC75E2D6310000U, 0x0000000000000001U}, {0x6C6B935B8BBD4000U, 0x0000000000000001U},
    {0x43C33C1937564800U, 0x0000000000000001U}, {0x54B40B1F852BDA00U, 0x0000000000000001U},
    {0x69E10DE76676D080U, 0x0000000000000001U}, {0x422CA8B0A00A4250U, 0x0000000000000001U},
    {0x52B7D2DCC80CD2E4U, 0x0000000000000001U}, {0x6765C793FA10079DU, 0x0000000000000001U},
    {0x409F9CBC7C4A04C2U, 0x1000000000000001U}, {0x50C783EB9B5C85F2U, 0x5400000000000001U},
    {0x64F964E68233A76FU, 0x2900000000000001U}, {0x7E37BE2022C0914BU, 0x1340000000000001U},
    {0x4EE2D6D415B85ACEU, 0x7C08000000000001U}, {0x629B8C891B267182U, 0x5B0A000000000001U},
    {0x7B426FAB61F00DE3U, 0x31CC800000000001U}, {0x4D0985CB1D3608AEU, 0x0F1FD00000000001U},
    {0x604BE73DE4838AD9U, 0x52E7C40000000001U}, {0x785EE10D5DA46D90U, 0x07A1B50000000001U},
    {0x4B3B4CA85A86C47AU, 0x04C5112000000001U}, {0x5E0A1FD271287598U, 0x45F6556800000001U},
    {0x758CA7C70D7292FEU, 0x5773EAC200000001U}, {0x4977E8DC68679BDFU, 0x16A872B940000001U},
    {0x5BD5E313828182D6U, 0x7C528F6790000001U}, {0x72CB5BD86321E38CU, 0x5B67334174000001U},
    {0x47BF19673DF52E37U, 0x79208008E8800001U}, {0x59AEDFC10D7279C5U, 0x7768A00B22A00001U},
    {0x701A97B150CF1837U, 0x3542C80DEB480001U}, {0x46109ECED2816F22U, 0x5149BD08B30D0001U},
    {0x5794C6828721CAEBU, 0x259C2C4ADFD04001U}, {0x6D79F82328EA3DA6U, 0x0F03375D97C45001U},
    {0x446C3B15F9926687U, 0x6962029A7EDAB201U}, {0x558749DB77F70029U, 0x63BA83411E915E81U},
    {0x6AE91C5255F4C034U, 0x1CA924116635B621U}, {0x42D1B1B375B8F820U, 0x51E9B68ADFE191D5U},
    {0x53861E2053273628U, 0x6664242D97D9F64AU}, {0x6867A5A867F103B2U, 0x7FFD2D38FDD073DCU},
    {0x4140C78940F6A24FU, 0x6FFE3C439EA2486AU}, {0x5190F96B91344AE3U, 0x6BFDCB54864ADA84U},
    {0x65F537C675815D9CU, 0x66FD3E29A7DD9125U}, {0x7F7285B812E1B504U, 0x00BC8DB411D4F56EU},
    {0x4FA793930BCD1122U, 0x4075D8908B251965U}, {0x63917877CEC0556BU, 0x10934EB4ADEE5FBEU},
    {0x7C75D695C2706AC5U, 0x74B82261D969F7ADU}, {0x4DC9A61D998642BBU, 0x58F3157D27E23ACCU},
    {0x613C0FA4FFE7D36AU, 0x4F2FDADC71DAC97FU}, {0x798B138E3FE1C845U, 0x22FBD1938E517BDFU},
    {0x4BF6EC38E7ED1D2BU, 0x25DD62FC38F2ED6CU}, {0x5EF4A74721E86476U, 0x0F54BBBB472FA8C6U},
    {0x76B1D118EA627D93U, 0x5329EAAA18FB92F8U}, {0x4A2F22AF927D8E7CU, 0x23FA32AA4F9D3BDBU},
    {0x5CBAEB5B771CF21BU, 0x2CF8BF54E3848AD2U}, {0x73E9A63254E42EA2U, 0x1836EF2A1C65AD86U},
    {0x487207DF750E9D25U, 0x2F22557A51BF8C74U}, {0x5A8E89D75252446EU, 0x5AEAEAD8E62F6F91U},
    {0x71322C4D26E6D58AU, 0x31A5A58F1FBB4B75U}, {0x46BF5BB038504576U, 0x3F07877973D50F29U},
    {0x586F329C466456D4U, 0x0EC96957D0CA52F3U}, {0x6E8AFF4357FD6C89U, 0x127BC3ADC4FCE7B0U},
    {0x4516DF8A16FE63D5U, 0x5B8D5A4C9B1E10CEU}, {0x565C976C9CBDFCCBU, 0x1270B0DFC1E59502U},
    {0x6BF3BD47C3ED7BFDU, 0x770CDD17B25EFA42U}, {0x4378564CDA746D7EU, 0x5A680A2ECF7B5C69U},
    {0x54566BE0111188DEU, 0x31020CBA835A3384U}, {0x696C06D81555EB15U, 0x7D428FE92430C065U},
    {0x41E384470D55B2EDU, 0x5E4999F1B69E783FU}, {0x525C6558D0AB1FA9U, 0x15DC006E2446164FU},
    {0x66F37EAF04D5E793U, 0x3B530089AD579BE2U}, {0x40582F2D6305B0BCU, 0x1513E0560C56C16EU},
    {0x506E3AF8BBC71CEBU, 0x1A58D86B8F6C71C9U}, {0x6489C9B6EAB8E426U, 0x00EF0E8673478E3BU},
    {0x7DAC3C24A5671D2FU, 0x412AD228101971C9U}, {0x4E8BA596E760723DU, 0x58BAC3590A0FE71EU},
    {0x622E8EFCA1388ECDU, 0x0EE9742F4C93E0E6U}, {0x7ABA32BBC986B280U, 0x32A3D13B1FB8D91FU},
    {0x4CB45FB55DF42F90U, 0x1FA662C4F3D387B3U}, {0x5FE177A2B5713B74U, 0x278FFB7630C869A0U},
    {0x77D9D58B62CD8A51U, 0x3173FA53BCFA8408U}, {0x4AE825771DC07672U, 0x6EE87C74561C9285U},
    {0x5DA22ED4E530940FU, 0x4AA29B916BA3B726U}, {0x750ABA8A1E7CB913U, 0x3D4B4275C68CA4F0U},
    {0x4926B496530DF3ACU, 0x164F09899C17E716U}, {0x5B7061BBE7D17097U, 0x1BE2CBEC031DE0DCU},
    {0x724C7A2AE1C5CCBDU, 0x02DB7EE703E55912U}, {0x476FCC5ACD1B9FF6U, 0x11C92F50626F57ACU},
    {0x594BBF71806287F3U, 0x563B7B247B0B2D96U}, {0x6F9EAF4DE07B29F0U, 0x4BCA59ED99CDF8FCU},
    {0x45C32D90AC4CFA36U, 0x2F5E78348020BB9EU}, {0x5733F8F4D76038C3U, 0x7B361641A028EA85U},
    {0x6D00F7320D3846F4U, 0x7A039BD208332526U}, {0x44209A7F48432C59U, 0x0C424163451FF738U},
    {0x5528C11F1A53F76FU, 0x2F52D1BC1667F506U}, {0x6A72F166E0E8F54BU, 0x1B27862B1C01F247U},
    {0x4287D6E04C91994FU, 0x00F8B3DAF181376DU}, {0x5329CC985FB5FFA2U, 0x6136E0D1ADE18548U},
    {0x67F43FBE77A37F8BU, 0x398499061959E699U}, {0x40F8A7D70AC62FB7U, 0x13F2DFA3CFD83020U},
    {0x5136D1CCCD77BBA4U, 0x78EF978CC3CE3C28U}, {0x6584864000D5AA8EU, 0x172B7D6FF4C1CB32U},
    {0x7EE5A7D0010B1531U, 0x5CF65CCBF1F23DFEU}, {0x4F4F88E200A6ED3FU, 0x0A19F9FF773766BFU},
    {0x63236B1A80D0A88EU, 0x6CA0787F5505406FU}, {0x7BEC45E12104D2B2U, 0x47C8969F2A46908AU},
    {0x4D73ABACB4A303AFU, 0x4CDD5E237A6C1A57U}, {0x60D09697E1CBC49BU, 0x4014B5AC590720ECU},
    {0x7904BC3DDA3EB5C2U, 0x3019E3176F48E927U}, {0x4BA2F5A6A8673199U, 0x3E102DEEA58D91B9U},
    {0x5E8BB3105280FDFFU, 0x6D94396A4EF0F627U}, {0x762E9FD467213D7FU, 0x68F947C4E2AD33B0U},
    {0x49DD23E4C074C66FU, 0x719BCCDB0DAC404EU}, {0x5C546CDDF091F80BU, 0x6E02C011D1175062U},
    {0x736988156CB6760EU, 0x69837016455D247AU}, {0x4821F50D63F209C9U, 0x21F2260DEB5A36CCU},
    {0x5A2A7250BCEE8C3BU, 0x4A6EAF916630C47FU}, {0x70B50EE4EC2A2F4AU, 0x3D0A5B75BFBCF59FU},
    {0x4671294F139A5D8EU, 0x4626792997D61984U}, {0x580D73A2D880F4F2U, 0x17B01773FDCB9FE4U},
    {0x6E10D08B8EA1322EU, 0x5D9C1D50FD3E87DDU}, {0x44CA82573924BF5DU, 0x1A8192529E4714EBU},
    {0x55FD22ED076DEF34U, 0x4121F6E745D8DA25U}, {0x6B7C6BA849496B01U, 0x516A74A1174F10AEU},
    {0x432DC3492DCDE2E1U, 0x02E288E4AE916A6DU}, {0x53F9341B79415B99U, 0x239B2B1DDA35C508U},
    {0x68F781225791B27FU, 0x4C81F5E550C3364AU}, {0x419AB0B576BB0F8FU, 0x5FD139AF527A01EFU},
    {0x52015CE2D469D373U, 0x57C5881B2718826AU}, {0x6681B41B89844850U, 0x4DB6EA21F0DEA304U},
    {0x4011109135F2AD32U, 0x30925255368B25E3U}, {0x501554B5836F587EU, 0x7CB6E6EA842DEF5CU},
    {0x641AA9E2E44B2E9EU, 0x5BE4A0A525396B32U}, {0x7D21545B9D5DFA46U, 0x32DDC8CE6E87C5FFU},
    {0x4E34D4B9425ABC6BU, 0x7FCA9D810514DBBFU}, {0x61C209E792F16B86U, 0x7FBD44E1465A12AFU},
    {0x7A328C6177ADC668U, 0x5FAC961997F0975BU}, {0x4C5F97BCEACC9C01U, 0x3BCBDDCFFEF65E99U},
    {0x5F777DAC257FC301U, 0x6ABED543FEB3F63FU}, {0x77555D172EDFB3C2U, 0x256E8A94FE60F3CFU},
    {0x4A955A2E7D4BD059U, 0x3765169D1EFC9861U}, {0x5D3AB0BA1C9EC46FU, 0x653E5C4466BBBE7AU},
    {0x74895CE8A3C6758BU, 0x5E8DF355806AAE18U}, {0x48D5DA11665C0977U, 0x2B18B8157042ACCFU},
    {0x5B0B5095BFF30BD5U, 0x15DEE61ACC535803U}, {0x71CE24BB2FEFCECAU, 0x3B569FA17F682E03U},
    {0x4720D6F4FDF5E13EU, 0x451623C4EFA11CC2U}, {0x58E90CB23D73598EU, 0x165BACB62B8963F3U},
    {0x6F234FDECCD02FF1U, 0x5BF297E3B66BBCEFU}, {0x457611EB40021DF7U, 0x09779EEE52035616U},
    {0x56D396661002A574U, 0x6BD586A9E6842B9BU}, {0x6C887BFF94034ED2U, 0x06CAE85460253682U},
    {0x43D54D7FBC821143U, 0x243ED134BC174211U}, {0x54CAA0DFABA29594U, 0x0D4E8581EB1D1295U},
    {0x69FD4917968B3AF9U, 0x10A226E265E4573BU}, {0x423E4DAEBE1704DBU, 0x5A65584D7FAEB685U},
    {0x52CDE11A6D9CC612U, 0x50FEAE60DF9A6426U}, {0x678159610903F797U, 0x253E59F91780FD2FU},
    {0x40B0D7DCA5A27ABEU, 0x4746F83BAEB09E3EU}, {0x50DD0DD3CF0B196EU, 0x1918B64A9A5CC5CDU},
    {0x65145148C2CDDFC9U, 0x5F5EE3DD40F3F740U}, {0x7E59659AF38157BCU, 0x17369CD49130F510U},
    {0x4EF7DF80D830D6D5U, 0x4E822204DABE992AU}, {0x62B5D7610E3D0C8BU, 0x0222AA86116E3F75U},
    {0x7B634D3951CC4FADU, 0x62AB552795C9CF52U}, {0x4D1E1043D31FB1CCU, 0x4DAB1538BD9E2193U},
    {0x60659454C7E79E3FU, 0x6115DA86ED05A9F8U}, {0x787EF969F9E185CFU, 0x595B5128A8471476U},
    {0x4B4F5BE23C2CF3A1U, 0x67D912B9692C6CCAU}, {0x5E2332DACB38308AU, 0x21CF5767C37787FCU},
    {0x75ABFF917E063CACU, 0x6A432D41B45569FBU}, {0x498B7FBAEEC3E5ECU, 0x0269FC4910B5623DU},
    {0x5BEE5FA9AA74DF67U, 0x03047B5B54E2BACCU}, {0x72E9F79415121740U, 0x63C59A322A1B697FU},
    {0x47D23ABC8D2B4E88U, 0x3E5B805F5A5121F0U}, {0x59C6C96BB076222AU, 0x4DF2607730E56A6CU},
    {0x70387BC69C93AAB5U, 0x216EF894FD1EC506U}, {0x46234D5C21DC4AB1U, 0x24E55B5D1E333B24U},
    {0x57AC20B32A535D5DU, 0x4E1EB23465C009EDU}, {0x6D9728DFF4E834B5U, 0x01A65EC17F300C68U},
    {0x447E798BF91120F1U, 0x1107FB38EF7E07C1U}, {0x559E17EEF755692DU, 0x3549FA072B5D89B1U},
    {0x6B059DEAB52AC378U, 0x629C7888F634EC1EU}, {0x42E382B2B13ABA2BU, 0x3DA1CB5599E11393U},
    {0x539C635F5D8968B6U, 0x2D0A3E2B00595877U}, {0x68837C3734EBC2E3U, 0x784CCDB5C06FAE95U},
    {0x41522DA2811359CEU, 0x3B3000919845CD1DU}, {0x51A6B90B21583042U, 0x09FC00B5FE574065U},
    {0x6610674DE9AE3C52U, 0x4C7B00E37DED107EU}, {0x7F9481216419CB67U, 0x1F99C11C5D68549DU},
    {0x4FBCD0B4DE901F20U, 0x43C018B1BA6134E2U}, {0x63AC04E2163426E8U, 0x54B01EDE28F9821BU},
    {0x7C97061A9BC130A2U, 0x69DC2695B337E2A1U}, {0x4DDE63D0A158BE65U, 0x6229981D9002EDA5U},
    {0x6155FCC4C9AEEDFFU, 0x1AB3FE24F403A90EU}, {0x79AB7BF5FC1AA97FU, 0x0160FDAE31049351U},
    {0x4C0B2D79BD90A9EFU, 0x30DC9E8CDEA2DC13U}, {0x5F0DF8D82CF4D46BU, 0x1D13C630164B9318U},
    {0x76D1770E38320986U, 0x0458B7BC1BDE77DDU}, {0x4A42EA68E31F45F3U, 0x62B772D5916B0AEBU},
    {0x5CD3A5031BE71770U, 0x5B654F8AF5C5CDA5U}, {0x74088E43E2E0DD4CU, 0x723EA36DB337410EU},
    {0x488558EA6DCC8A50U, 0x07672624900288A9U}, {0x5AA6AF25093FACE4U, 0x0940EFADB4032AD3U},
    {0x71505AEE4B8F981DU, 0x0B912B992103F588U}, {0x46D238D4EF39BF12U, 0x173ABB3FB4A27975U},
    {0x5886C70A2B082ED6U, 0x5D096A0FA1CB17D2U}, {0x6EA878CCB5CA3A8CU, 0x344BC4938A3DDDC7U},
    {0x45294B7FF19E6497U, 0x60AF5ADC3666AA9CU}, {0x56739E5FEE05FDBDU, 0x58DB319344005543U},
    {0x6C1085F7E9877D2DU, 0x0F11FDF815006A94U}, {0x438A53BAF1F4AE3CU, 0x196B3EBB0D20429DU},
    {0x546CE8A9AE71D9CBU, 0x1FC60E69D0685344U}, {0x698822D41A0E503EU, 0x07B7920444826815U},
    {0x41F515C49048F226U, 0x64D2BB42AAD1810DU}, {0x52725B35B45B2EB0U, 0x3E076A135585E150U},
    {0x670EF2032171FA5CU, 0x4D8944982AE759A4U}, {0x40695741F4E73C79U, 0x7075CADF1AD09807U},
    {0x5083AD1272210B98U, 0x2C933D96E184BE08U}, {0x64A498570EA94E7EU, 0x37B80CFC99E5ED8AU},
    {0x7DCDBE6CD253A21EU, 0x05A6103BC05F68EDU}, {0x4EA0970403744552U, 0x6387CA25583BA194U},
    {0x6248BCC5045156A7U, 0x3C69BCAEAE4A89F9U}, {0x7ADAEBF64565AC51U, 0x2B842BDA59DD2C77U},
    {0x4CC8D379EB5F8BB2U, 0x6B329B68782A3BCBU}, {0x5FFB085866376E9FU, 0x45FF42429634CABDU},
    {0x77F9CA6E7FC54A47U, 0x377F12D33BC1FD6DU}, {0x4AFC1E850FDB4E6CU, 0x52AF6BC405593E64U},
    {0x5DBB262653D22207U, 0x675B46B506AF8DFDU}, {0x7529EFAFE8C6AA89U, 0x61321862485B717CU},
    {0x493A35CDF17C2A96U, 0x0CBF4F3D6D3926EEU}, {0x5B88C3416DDB353BU, 0x4FEF230CC88770A9U},
    {0x726AF411C952028AU, 0x43EAEBCFFAA94CD3U}, {0x4782D88B1DD34196U, 0x4A72D361FCA9D004U},
    {0x59638EADE54811FCU, 0x1D0F883A7BD44405U}, {0x6FBC72595E9A167BU, 0x24536A491AC95506U},
    {0x45D5C777DB204E0DU, 0x06B4226DB0BDD524U}, {0x574B3955D1E86190U, 0x28612B091CED4A6DU},
    {0x6D1E07AB466279F4U, 0x327975CB64289D08U}, {0x4432C4CB0BFD8C38U, 0x5F8BE99F1E996225U},
    {0x553F75FDCEFCEF46U, 0x776EE406E63FBAAEU}, {0x6A8F537D42BC2B18U, 0x554A9D089FCFA95AU},
    {0x4299942E49B59AEFU, 0x354EA22563E1C9D8U}, {0x533FF939DC2301ABU, 0x22A24AAEBCDA3C4EU},
    {0x680FF788532BC216U, 0x0B4ADD5A6C10CB62U}, {0x4109FAB533FB594DU, 0x670ECA58838A7F1DU},
    {0x514C796280FA2FA1U, 0x20D27CEEA46D1EE4U}, {0x659F97BB2138BB89U, 0x49071C2A4D88669DU},
    {0x7F077DA9E986EA6BU, 0x7B48E334E0EA8045U}, {0x4F64AE8A31F45283U, 0x3D0D8E010C92902BU},
    {0x633DDA2CBE716724U, 0x2C50F1814FB73436U}, {0x7C0D50B7EE0DC0EDU, 0x37652DE1A3A50143U},
    {0x4D885272F4C89894U, 0x329F3CAD064720CAU}, {0x60EA670FB1FABEB9U, 0x3F470BD847D8E8FDU},
    {0x792500D39E796E67U, 0x6F18CECE59CF233CU}, {0x4BB72084430BE500U, 0x756F8140F8217605U},
    {0x5EA4E8A553CEDE41U, 0x12CB61913629D387U}, {0x764E22CEA8C295D1U, 0x377E39F583B44868U},
    {0x49F0D5C129799DA2U, 0x72AEE4397250AD41U}, {0x5C6D0B3173D8050BU, 0x4F5A9D47CEE4D891U},
    {0x73884DFDD0CE064EU, 0x43314499C29E0EB6U}, {0x483530BEA280C3F1U, 0x09FECAE019A2C932U},
    {0x5A427CEE4B20F4EDU, 0x2C7E7D98200B7B7EU}, {0x70D31C29DDE93228U, 0x579E1CFE280E5A5DU},
    {0x4683F19A2AB1BF59U, 0x36C2D21ED908F87BU}, {0x5824EE00B55E2F2FU, 0x647386A68F4B3699U},
    {0x6E2E2980E2B5BAFBU, 0x5D906850331E043FU}, {0x44DCD9F08DB194DDU, 0x2A7A41321FF2C2A8U},
    {0x5614106CB11DFA14U, 0x5518D17EA7EF7352U}, {0x6B991487DD657899U, 0x6A5F05DE51EB5026U},
    {0x433FACD4EA5F6B60U, 0x127B63AAF3331218U}, {0x540F980A24F74638U, 0x171A3C95AFFFD69EU},
    {0x69137E0CAE3517C6U, 0x1CE0CBBB1BFFCC45U}, {0x41AC2EC7ECE12EDBU, 0x720C7F54F17FDFABU},
    {0x52173A79E8197A92U, 0x6E8F9F2A2DDFD796U}, {0x669D0918621FD937U, 0x4A3386F4B957CD7BU},
    {0x402225AF3D53E7C2U, 0x5E603458F3D6E06DU}, {0x502AAF1B0CA8E1B3U, 0x35F8416F30CC9888U},
    {0x64355AE1CFD31A20U, 0x237651CAFCFFBEAAU}, {0x7D42B19A43C7E0A8U, 0x2C53E63DBC3FAE55U},
    {0x4E49AF006A5CEC69U, 0x1BB46FE695A7CCF5U}, {0x61DC1AC084F42783U, 0x42A18BE03B11C033U},
    {0x7A532170A6313164U, 0x3349EED849D6303FU}, {0x4C73F4E667DEBEDEU, 0x600E35472E25DE28U},
    {0x5F90F22001D66E96U, 0x3811C298F9AF55B1U}, {0x77752EA8024C0A3CU, 0x0616333F381B2B1EU},
    {0x4AA93D29016F8665U, 0x43CDE0078310FAF3U}, {0x5D538C7341CB67FEU, 0x74C1580963D539AFU},
    {0x74A86F90123E41FEU, 0x51F1AE0BBCCA881BU}, {0x48E945BA0B66E93FU, 0x13370CC755FE9511U},
    {0x5B2397288E40A38EU, 0x7804CFF92B7E3A55U}, {0x71EC7CF2B1D0CC72U, 0x560603F7765DC8EAU},
    {0x4733CE17AF227FC7U, 0x55C3C27AA9FA9D93U}, {0x5900C19D9AEB1FB9U, 0x4B34B319547944F7U},
    {0x6F40F20501A5E7A7U, 0x7E01DFDFA9979635U}, {0x458897432107B0C8U, 0x7EC12BEBC9FEBDE1U},
    {0x56EABD13E9499CFBU, 0x1E7176E6BC7E6D59U}, {0x6CA56C58E39C043AU, 0x060DD4A06B9E08B0U},
    {0x43E763B78E4182A4U, 0x23C8A4E44342C56EU}, {0x54E13CA571D1E34DU, 0x2CBACE1D541376C9U},
    {0x6A198BCECE465C20U, 0x57E981A4A918547BU}, {0x424FF76140EBF994U, 0x36F1F106E9AF34CDU},
    {0x52E3F5399126F7F9U, 0x44AE6D48A41B0201U}, {0x679CF287F570B5F7U, 0x75DA089ACD21C281U},
    {0x40C21794F96671BAU, 0x79A84560C0351991U}, {0x50F29D7A37C00E29U, 0x581256B8F0425FF5U},
    {0x652F44D8C5B011B4U, 0x0E16EC672C52F7F2U}, {0x7E7B160EF71C1621U, 0x119CA780F767B5EEU},
    {0x4F0CEDC95A718DD4U, 0x5B01E8B09AA0D1B5U},
};

/* high 64 bits of a * b */
static uint64_t accel__track_mulhi(uint64_t a, uint64_t b, uint64_t *lo) {
#if defined(__SIZEOF_INT128__) && !defined(__CUDACC__)
    __extension__ typedef unsigned __int128 accel__track_u128;
    accel__track_u128 p = (accel__track_u128)a * b;
    *lo = (uint64_t)p;
    return (uint64_t)(p >> 64);
#else /* four 32x32 products */
    uint64_t a0 = a & 0xFFFFFFFFu, a1 = a >> 32, b0 = b & 0xFFFFFFFFu, b1 = b >> 32;
    uint64_t p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
    uint64_t mid = (p00 >> 32) + (p01 & 0xFFFFFFFFu) + (p10 & 0xFFFFFFFFu);
    *lo = (mid << 32) | (p00 & 0xFFFFFFFFu);
    return p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
#endif
}

/* g * cp / 2^127 rounded to odd (g = g1 * 2^63 + g0, g0 < 2^63) */
static uint64_t accel__track_rop(const uint64_t *g, uint64_t cp) {
    uint64_t x0, y0, x1 = accel__track_mulhi(g[1], cp, &x0), y1 = accel__track_mulhi(g[0], cp, &y0);
    uint64_t z = (y0 >> 1) + x1;
    (void)x0;
    return (y1 + (z >> 63)) | (((z & 0x7FFFFFFFFFFFFFFFu) + 0x7FFFFFFFFFFFFFFFu) >> 63);
}

/* The digits of the shortest decimal d * 10^*k that reads back to the finite nonzero |v|: d in [1, 10^17). */
static uint64_t accel__track_shortest(double v, int *k_out) {
    uint64_t bits, c, cb, cbl, cbr, vb, vbl, vbr, s, sp10, out;
    const uint64_t *g;
    int be, q, k, h;
    memcpy(&bits, &v, 8);
    be = (int)((bits >> 52) & 0x7FF);
    c = bits & 0xFFFFFFFFFFFFFu;
    if (be) { c |= (uint64_t)1 << 52; q = be - 1075; }
    else q = -1074;
    out = c & 1; /* odd c: the interval's ends read back as the even neighbour, so they are excluded */
    cb = c << 2;
    cbr = cb + 2;
    if (c != (uint64_t)1 << 52 || be <= 1) { cbl = cb - 2; k = (q * 315653) >> 20; }          /* floor(log10 2^q) */
    else { cbl = cb - 1; k = (q * 315653 - 131237) >> 20; }                                  /* floor(log10(3/4 2^q)) */
    h = q + ((-k * 1741647) >> 19) + 2;                                                      /* floor(log2 10^-k) */
    g = accel__track_pow10[-k - ACCEL__TRACK_POW10_MIN];
    vb = accel__track_rop(g, cb << h);  /* 4 v 10^-k, and the interval's ends, in quarter units */
    vbl = accel__track_rop(g, cbl << h);
    vbr = accel__track_rop(g, cbr << h);
    s = vb >> 2;
    sp10 = s / 10 * 10;
    { /* one digit shorter: the only multiple of ten R can hold is sp10 or sp10 + 10 */
        int u = vbl + out <= sp10 << 2, w = ((sp10 + 10) << 2) + out <= vbr;
        if (u != w) { *k_out = k; return u ? sp10 : sp10 + 10; }
    }
    {
        int u = vbl + out <= s << 2, w = ((s + 1) << 2) + out <= vbr;
        *k_out = k;
        if (u != w) return u ? s : s + 1;
        /* both in: the nearer to v; on the midpoint (vb exact) the even one */
        if (vb < (s << 2) + 2 || (vb == (s << 2) + 2 && !(s & 1))) return s;
        return s + 1;
    }
}

/* NaN/Infinity/-Infinity as Python's json module writes them; else the shortest round-trip decimal in repr's
   layout. out must hold 32 bytes; NUL-terminated; returns the length. */
static const char accel__track_pairs[201] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879808182838485868788899091929394"
    "9596979899";

/* the decimal digits of d, written backwards so that they end at end; returns their start */
static char *accel__track_digits(char *end, uint64_t d) {
    uint32_t x;
    while (d >= 100000000u) { /* eight digits at a time: two independent chains of 32-bit pairs */
        uint32_t lo = (uint32_t)(d % 100000000u), a = lo / 10000u, b = lo % 10000u;
        d /= 100000000u;
        end -= 8;
        memcpy(end, accel__track_pairs + 2 * (a / 100u), 2);
        memcpy(end + 2, accel__track_pairs + 2 * (a % 100u), 2);
        memcpy(end + 4, accel__track_pairs + 2 * (b / 100u), 2);
        memcpy(end + 6, accel__track_pairs + 2 * (b % 100u), 2);
    }
    x = (uint32_t)d;
    while (x >= 100u) { end -= 2; memcpy(end, accel__track_pairs + 2 * (x % 100u), 2); x /= 100u; }
    if (x >= 10u) { end -= 2; memcpy(end, accel__track_pairs + 2 * x, 2); }
    else *--end = (char)('0' + x);
    return end;
}

static size_t accel__track_fmt_double(char *out, double v) {
    char buf[24], *dig, *end;
    uint64_t d;
    int k, nd;
    if (v != v) { memcpy(out, "NaN", 4); return 3; }
    if (v > DBL_MAX) { memcpy(out, "Infinity", 9); return 8; }
    if (v < -DBL_MAX) { memcpy(out, "-Infinity", 10); return 9; }
    if (v == 0) { end = accel__track_layout(out, 1.0 / v < 0, "0", 1, 0); *end = 0; return (size_t)(end - out); }
    d = accel__track_shortest(v, &k);
    while (d % 10000u == 0) { d /= 10000u; k += 4; } /* trailing zeros (d >= 1) */
    while (d % 10u == 0) { d /= 10u; ++k; }
    dig = accel__track_digits(buf + sizeof buf, d);
    nd = (int)(buf + sizeof buf - dig);
    end = accel__track_layout(out, v < 0, dig, nd, k + nd - 1);
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
            local = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                                "config[%d] \"%.200s\": the string is NULL or not UTF-8", i, config[i].name);
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
    if (!t || !t->acc)
        return ACCEL__FAIL(NULL, ACCEL_ERR_INVALID_ARGUMENT, "accel_track_flush: tracker not initialized");
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
