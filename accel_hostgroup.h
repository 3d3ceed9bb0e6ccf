/* accel_hostgroup.h — the host process group of accel: the one group every module and accel_init use for barriers,
   broadcasts, all-gathers, small all-reduces and agreement checks. MPI, or a TCP store of its own under torchrun /
   `accel launch` / srun without MPI; every call has a deadline and a header that turns mismatched calls into errors.
   Also here: the admission that decides who may join a job (the store and accel_collectives.h's NCCL bootstraps),
   TCP sockets with deadlines, and the flight recorder's ring (its manual and dump are accel_collectives.h's). Part of
   the core: accel.h includes this header, so a program that includes accel.h has all of it (HOW IT IS INCLUDED).

   CONTENTS
     USAGE
     HOW IT IS INCLUDED           accel.h and this header include each other; why
     THE HOST PROCESS GROUP       MPI or a TCP store, with deadlines and agreement checks
     SECURITY                     who may join a job (the store's admission, ACCEL_STORE_SECRET)
     CALL SITES                   ACCEL_FR_SITE, ACCEL_NO_CALL_SITES
     THREADS

   USAGE (every call here but accel_host_group_name, accel_blobs_*, accel_free_port and accel_host_rendezvous is
   collective: every process makes it, in the same order; one process gets the local result at once)
       accel acc;  accel_desc d = {0};
       if (accel_init(&acc, &d) != ACCEL_OK) die(accel_last_error(&acc));   // joins the group (MPI or the store)
       accel_print(&acc, "host group: %s\n", accel_host_group_name(&acc));   // "mpi", "tcp", "nccl" or "none"
       double sums[2] = {loss_sum, (double)n_samples};
       accel_host_allreduce_f64(&acc, sums, 2, ACCEL_HOST_SUM);             // the same bits on every rank
       accel_host_broadcast(&acc, &vocab_size, sizeof vocab_size, 0);       // rank 0's bytes everywhere
       accel_blobs all = {0};
       accel_gather_object(&acc, report, strlen(report), &all);            // one object per rank, sizes may differ
       for (int i = 0; i < all.count; ++i)
           fwrite(all.data + all.offsets[i], 1, all.offsets[i + 1] - all.offsets[i], stdout);
       accel_blobs_deinit(&all);
       accel_wait_for_everyone(&acc);                                        // a barrier
       accel_shutdown(&acc);

   HOW IT IS INCLUDED
     accel_init sets the group up and the core's own collectives (main_process_first, check_trigger,
     synchronize_rng_state, the init agreement) run on it, while the group uses the core's errors, allocators,
     environment and deadlines: the two are one module in two files. So they include each other. accel.h includes
     this header at the end of its declarations and again at §6 of its implementation, between the environment and
     accel_init; this header includes accel.h before anything else (so accel.h's POSIX feature macros still precede
     every system header). Either may come first in a TU, with or without ACCEL_IMPLEMENTATION, and either emits the
     implementation of both. Whichever comes first, every declaration precedes every definition: accel.h's
     implementation waits until this header's declarations are in (it is gated on ACCEL_HOSTGROUP_H_INCLUDED), and
     this header's implementation is emitted only from inside accel.h's, at §6 (gated on ACCEL__CORE_IMPL_DONE); the
     include guards end the cycle after one turn.

   THE HOST PROCESS GROUP
     The core owns the one host process group every module uses (barrier, broadcast, all-gather, small all-reduce,
     agreement checks): MPI when accel was launched under MPI (or MPI was initialized by the program); otherwise,
     under torchrun / `accel launch` (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), a TCP store: rank 0 listens on
     MASTER_PORT (MASTER_PORT + 1 when torchrun's agent serves its own store there, TORCHELASTIC_USE_AGENT_STORE;
     ACCEL_STORE_PORT overrides) of MASTER_ADDR's interface — of loopback when every rank is on this node
     (LOCAL_WORLD_SIZE == WORLD_SIZE) — and the others connect, retrying until the deadline. Under srun without MPI
     the same store runs at the step's first node (SLURM_STEP_NODELIST; MASTER_ADDR overrides) on a port derived
     from the job and step ids (15000 + (16 job + step) mod 20000; MASTER_PORT / ACCEL_STORE_PORT override), its run
     id "slurm-JOB.STEP" unless TORCHELASTIC_RUN_ID / ACCEL_RUN_ID name one. A process joins only
     after the admission in SECURITY; one that is refused (wrong secret, another run's TORCHELASTIC_RUN_ID /
     ACCEL_RUN_ID, a wrong WORLD_SIZE, a RANK that has joined already: "the job is full") gets the reason and the job
     goes on (rank 0's timeout message names the last refusal).
     accel_host_group_name says which ("mpi", "tcp", or a collectives backend that installed itself). Every host
     collective: (1) has a deadline (desc.collective_timeout_ms, default 1800000 = Accelerate's 30 min): a peer that
     never arrives gives ACCEL_ERR_TIMEOUT, after which the group refuses further calls (shut down); (2) first
     all-gathers a small header (what the call is, its size, root and this rank's status), so ranks calling
     different collectives or sizes get ACCEL_ERR_MISMATCH listing each rank's call, and a rank whose arguments were
     bad makes every rank fail (ACCEL_ERR_REMOTE with that rank's message) instead of a hang.

   SECURITY (who may join a job: the TCP store, and accel_collectives.h's NCCL TCP and file bootstraps)
     ACCEL_STORE_SECRET            the job's secret, the same for every process (`accel launch` makes a random one
                                   per single-node job and hands it to its processes in the environment; torchrun and
                                   Slurm users set it, e.g. to `openssl rand -hex 32`; at most 1024 bytes)
     ACCEL_STORE_TRUSTED_NETWORK   boolean: a store that cannot check a secret may use a non-loopback address
     Rank 0 sends each connection a fresh nonce; a peer answers with HMAC-SHA256(secret, both nonces, its world size,
     rank and run id) and rank 0 answers with its own proof, so a stray — no secret, a wrong one, a replayed handshake
     — is refused ("not admitted: wrong secret") before anything it says counts, never takes a rank or sees the NCCL
     unique id, and cannot fail or stall setup: connections are served at once, each with its own 5 s deadline.
     The MAC is OpenSSL's libcrypto (ACCEL_WITH_OPENSSL; link -lcrypto). Without a secret, or without the MAC in this
     build, nobody can be checked: only the run id is compared, and the store and the TCP bootstrap refuse a
     non-loopback address unless ACCEL_STORE_TRUSTED_NETWORK=1. Not protected: the traffic after admission is neither
     encrypted nor authenticated (an on-path attacker can read and change it, as with PyTorch's and NCCL's own
     traffic): run multi-node jobs on a network only the job's hosts use. The sockets of the store and the bootstraps
     are close-on-exec: a program the trainer runs (system(), fork + exec) inherits none of them.
     accel_host_rendezvous admits the members of a one-off meeting the same way (`accel launch`'s node launchers,
     before any process starts): its own label in the MAC, so no store or bootstrap proof opens it.

   CALL SITES
     accel_wait_for_everyone and the accel_host_* collectives are also macros that pass __FILE__:__LINE__ of the
     outermost call to the flight recorder (ACCEL_FR_SITE), as accel_collectives.h's data operations do; define
     ACCEL_NO_CALL_SITES before including accel.h to get plain functions. (name)(args) always calls the function.

   THREADS
     The group belongs to its Accelerator, which one thread uses at a time. Host collectives synchronize nothing on
     the device. accel_free_port may be called from any thread, without an Accelerator.
*/
#include "accel.h" /* the core; it includes this header back (HOW IT IS INCLUDED) */

#ifndef ACCEL_HOSTGROUP_H_INCLUDED
#define ACCEL_HOSTGROUP_H_INCLUDED

#ifdef __cplusplus
extern "C" {
#endif

/* ----------------------------------------------------------------------------------------------- host process group */
typedef enum accel_host_op { ACCEL_HOST_SUM = 0, ACCEL_HOST_MAX, ACCEL_HOST_MIN } accel_host_op;

/* "mpi", a collectives backend that installed itself ("nccl", ...), or "none" (one process, or no group). */
ACCEL_API const char *accel_host_group_name(const accel *acc);
ACCEL_API accel_result (accel_wait_for_everyone)(accel *acc);  /* barrier; no-op for one process */
/* In-place all-reduce of a few values (flags, counters, norms), reduced in rank order on every rank (so the
   result is bit-identical everywhere). */
ACCEL_API accel_result (accel_host_allreduce_i64)(accel *acc, int64_t *values, int count, accel_host_op op);
ACCEL_API accel_result (accel_host_allreduce_f64)(accel *acc, double *values, int count, accel_host_op op);
/* Broadcast bytes from root to all. */
ACCEL_API accel_result (accel_host_broadcast)(accel *acc, void *data, size_t bytes, int root);
/* Every rank contributes `bytes` bytes; out receives num_processes * bytes in rank order. */
ACCEL_API accel_result (accel_host_allgather)(accel *acc, const void *in, void *out, size_t bytes);
/* The flight recorder's call sites (accel_collectives.h, FLIGHT RECORDER): the collectives are also macros that
   note __FILE__:__LINE__ of the outermost call around the function (define ACCEL_NO_CALL_SITES to drop them). */
ACCEL_API void accel_fr_site_enter(const char *file, int line);
ACCEL_API accel_result accel_fr_site_leave(accel_result r);
#define ACCEL_FR_SITE(call) (accel_fr_site_enter(__FILE__, __LINE__), accel_fr_site_leave(call))

/* Objects — Accelerate's gather_object / broadcast_object_list — as byte blobs the caller serializes. A list of
   `count` objects: object i is data[offsets[i] .. offsets[i+1]). Blobs live in acc's host allocator. */
typedef struct accel_blobs {
    accel *acc;
    int count;
    size_t *offsets; /* count + 1 entries */
    unsigned char *data;
} accel_blobs;
/* Replaces b's content with copies of items (count may be 0); b must be zeroed or hold blobs. */
ACCEL_API accel_result accel_blobs_set(accel *acc, accel_blobs *b, int count, const void *const *items,
                                       const size_t *sizes);
ACCEL_API void accel_blobs_deinit(accel_blobs *b); /* safe on a zeroed list; the list is empty afterwards */
/* gather_object (collective): every rank contributes `bytes` bytes (sizes may differ); *out (zeroed, or holding
   blobs, which are replaced) gets one object per rank in rank order — concatenating them is Accelerate's one-level
   flatten. */
ACCEL_API accel_result accel_gather_object(accel *acc, const void *data, size_t bytes, accel_blobs *out);
/* broadcast_object_list (collective): from_process's list replaces every other rank's list (in place, as
   Accelerate). */
ACCEL_API accel_result accel_broadcast_object_list(accel *acc, accel_blobs *list, int from_process);

/* ------------------------------------------------------------------------------------------------------- free ports */
/* A TCP port of the loopback interface that was free a moment ago (the kernel's choice), for a launcher's
   MASTER_PORT or a test's store; 0 when none could be had. Another process may take it before it is used. */
ACCEL_API int accel_free_port(void);

/* ----------------------------------------------------------------------------------------------------- rendezvous */
/* A one-off meeting of `size` processes that have no host group (launchers: `accel launch`'s node launchers agree on
   the world size and each node's first rank through it; SECURITY's admission, nothing new): member `rank` of `size`
   (at most 65536) contributes `bytes` bytes (at most 65536) and `out` receives size * bytes, every member's in rank
   order. Member 0 listens on addr:port (the address it is reached at; no loopback shortcut) and admits the others
   exactly as the store admits ranks — ACCEL_STORE_SECRET's challenge-response (its own label, so a store's proof
   opens no rendezvous), the run id (run_id, or NULL: TORCHELASTIC_RUN_ID / ACCEL_RUN_ID as the store), the
   member count, a free member number — and refuses anyone else with the reason ("not admitted: wrong secret",
   "... node 1 has already joined", "it expects 3 nodes, this meeting has 2"). Every connection is closed on return,
   so the port can serve the job's store next. timeout_s (> 0) bounds it all: member 0 fails naming the members that
   never came ("node(s) 2 did not connect within 5.0 s") and tells the members that did; a member that cannot reach
   member 0 fails naming it. `what` and `member` name the meeting and its members in messages ("accel launch
   rendezvous", "node"). acc: an initialized Accelerator or a zeroed struct (a launcher's: only its error and
   logging are used); the error is in accel_last_error(acc). Not collective over any group: a group of its own. */
ACCEL_API accel_result accel_host_rendezvous(accel *acc, const char *what, const char *member, const char *addr,
                                             int port, int rank, int size, const char *run_id, const void *in,
                                             void *out, size_t bytes, double timeout_s);

#ifdef __cplusplus
}
#endif
#ifndef ACCEL_NO_CALL_SITES
#define accel_wait_for_everyone(acc) ACCEL_FR_SITE((accel_wait_for_everyone)(acc))
#define accel_host_allreduce_i64(...) ACCEL_FR_SITE((accel_host_allreduce_i64)(__VA_ARGS__))
#define accel_host_allreduce_f64(...) ACCEL_FR_SITE((accel_host_allreduce_f64)(__VA_ARGS__))
#define accel_host_broadcast(...) ACCEL_FR_SITE((accel_host_broadcast)(__VA_ARGS__))
#define accel_host_allgather(...) ACCEL_FR_SITE((accel_host_allgather)(__VA_ARGS__))
#endif
#endif /* ACCEL_HOSTGROUP_H_INCLUDED */

/* ========================================================================================== implementation */
#if defined(ACCEL_IMPLEMENTATION) && defined(ACCEL__CORE_IMPL_DONE) && !defined(ACCEL__HOSTGROUP_IMPL_DONE)
#define ACCEL__HOSTGROUP_IMPL_DONE
/* CONTENTS — emitted inside accel.h's implementation, at its §6 (after the environment, before accel_init), so it
   uses the core's services (errors, allocators, byte order, deadlines, the environment parsers) and the core's
   accel_init / accel_shutdown use it (accel__store_start, accel__store_close, the MPI transport, accel__fr_setup,
   accel__fr_release, accel__agree_values):
     1. includes: sockets, OpenSSL's MAC
     2. the flight recorder's ring (group 0 = this group; accel_collectives.h writes the dump)
     3. TCP sockets with deadlines
     4. the group: the MPI transport, the TCP store and its admission, sealed blobs, the header protocol, agreement
        checks, host collectives, objects
     5. joining the store: where it is (MASTER_ADDR/MASTER_PORT, Slurm's first node and derived port)
     6. free ports
   LENT to the modules, whose implementations follow in the same TU: accel__agree, accel__agree_values,
   accel__host_allgatherv (amp, data, safetensors, ckpt, trackers, profile); to accel_collectives.h also the
   ring (accel__fr_entry, accel__fr_group, _host_group, _post, _done, _tick, _now, accel__g_fr*), the sockets
   (accel__sock_*), the admission (accel__admit, accel__admit_init, _policy, _serve, _join, _seal, _unseal,
   _put_welcome, accel__store_send2), accel__mpi_comm, accel__mpi_wait, accel__group_install / _uninstall. */

/* ------------------------------------------------------------------------------------------------------ 1. includes */
#if !defined(_WIN32)
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#endif
#ifdef ACCEL_WITH_OPENSSL
/* the MAC of the store's admission (HMAC-SHA256, CRYPTO_memcmp): libcrypto's one-shot calls, in 1.1 and 3.x */
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#endif

/* ------------------------------------------------------------------------------------ 2. the flight recorder's ring */
/* ---- the flight recorder's ring (accel_collectives.h: its manual, the dump; tools/cli_fr.c: `accel fr`). One per
   process: the last accel__g_fr_cap collective calls of every group (0 = the host group, then each accel_coll
   context), written where the calls are issued. Recording costs a slot write and two clock reads per call. */
#define ACCEL__FR_POSTED 1
#define ACCEL__FR_DONE 2
#define ACCEL__FR_FAILED 3
typedef struct accel__fr_entry {
    uint64_t id, seq;      /* id: the process's call index + 1 (0: empty slot); seq: the call's number in its group */
    double posted, done;   /* accel__fr_now() */
    int64_t count, bytes;  /* elements (-1: none) and bytes of this rank's contribution */
    const char *file;      /* the call site: a string literal from ACCEL_FR_SITE, NULL when unknown */
    int line, group, root;
    signed char op, dtype, state; /* op: accel_coll_op or -1; dtype: accel_dtype or -1 */
    char what[21];         /* "all_reduce", "barrier", an agreement check's name, ... (cut to 20) */
} accel__fr_entry;
#define ACCEL__FR_MAX_GROUPS 64
typedef struct accel__fr_group_info { char name[32]; int rank, size; } accel__fr_group_info;
static accel__fr_entry *accel__g_fr;
static uint64_t accel__g_fr_cap, accel__g_fr_n; /* capacity (0: not set up / off), calls recorded */
static uint64_t accel__g_fr_waiting;            /* id of the newest call still in flight (0: none) */
static accel__fr_group_info accel__g_fr_groups[ACCEL__FR_MAX_GROUPS];
static int accel__g_fr_ngroups;
static const char *accel__g_fr_file;            /* the pending call site (ACCEL_FR_SITE), outermost call only */
static int accel__g_fr_line, accel__g_fr_depth;
static uint64_t accel__g_fr_note_id, accel__g_fr_note_n; /* "waiting for" lines printed for call note_id */
/* the dump writer (accel_collectives.h installs it; it is async-signal-safe, so SIGUSR1 calls it too) */
static void (*accel__g_fr_dump)(const char *reason);

ACCEL__DEF void accel_fr_site_enter(const char *file, int line) {
    if (accel__g_fr_depth++ == 0) { accel__g_fr_file = file; accel__g_fr_line = line; }
}
ACCEL__DEF accel_result accel_fr_site_leave(accel_result r) {
    if (accel__g_fr_depth > 0 && --accel__g_fr_depth == 0) accel__g_fr_file = NULL;
    return r;
}
static int accel__g_fr_ready;   /* the ring is set up (or off) */
static accel *accel__g_fr_owner; /* whose allocator holds it: freed by that Accelerator's accel_shutdown */
/* The ring, at accel_init of the first Accelerator of several processes (from its allocator;
   ACCEL_FLIGHT_RECORDER_SIZE calls, default 2000, 0 = off; one process has no peer to diverge from). A diagnostic:
   without the memory it stays off, with a WARN. */
static accel_result accel__fr_setup(accel *acc) {
    const char *e = getenv("ACCEL_FLIGHT_RECORDER_SIZE");
    long v = 2000;
    if (accel__g_fr_ready) return ACCEL_OK;
    if (e && *e && (accel__parse_nonneg(e, &v) != 0 || v > 1000000)) {
        accel_log(acc, ACCEL_LOG_WARN, "ACCEL_FLIGHT_RECORDER_SIZE=\"%.40s\" is not a count in [0, 1000000]: 2000", e);
        v = 2000;
    }
    if (v > 0) {
        accel__g_fr = (accel__fr_entry *)accel_host_alloc(acc, (size_t)v * sizeof *accel__g_fr);
        if (!accel__g_fr) {
            accel_log(acc, ACCEL_LOG_WARN, "flight recorder off: no memory for %ld calls (%zu bytes)", v,
                      (size_t)v * sizeof *accel__g_fr);
            v = 0;
        } else {
            memset(accel__g_fr, 0, (size_t)v * sizeof *accel__g_fr);
        }
    }
    accel__g_fr_cap = (uint64_t)v;
    accel__g_fr_owner = acc;
    accel__g_fr_ready = 1;
    return ACCEL_OK;
}
/* accel_shutdown of the owner: the ring goes (a signal handler sees capacity 0 first); the next accel_init makes a
   new one. */
static void accel__fr_release(accel *acc) {
    accel__fr_entry *ring = accel__g_fr;
    if (!accel__g_fr_ready || accel__g_fr_owner != acc) return;
    accel__g_fr_cap = 0;
    accel__g_fr = NULL;
    accel__g_fr_n = accel__g_fr_waiting = 0;
    accel__g_fr_ngroups = 0;
    accel__g_fr_owner = NULL;
    accel__g_fr_ready = 0;
    accel_host_free(acc, ring);
}
/* The recorder's clock: Linux's coarse monotonic clock (a few ns to read, a few ms of resolution — enough to say how
   long a call has waited), else accel_now. */
static double accel__fr_now(void) {
#if defined(CLOCK_MONOTONIC_COARSE)
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC_COARSE, &ts) == 0) return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
#endif
    return accel_now();
}
/* A group's number in the dump (0 is the host group): its name ([A-Za-z0-9_:.,()-] kept), this rank and size. */
ACCEL__PRIVATE int accel__fr_group(const char *name, int rank, int size) {
    accel__fr_group_info *g;
    size_t i, k = 0;
    if (accel__g_fr_ngroups >= ACCEL__FR_MAX_GROUPS) return ACCEL__FR_MAX_GROUPS - 1; /* shares the last slot */
    g = &accel__g_fr_groups[accel__g_fr_ngroups];
    for (i = 0; name[i] && k + 1 < sizeof g->name; ++i)
        g->name[k++] = (isalnum((unsigned char)name[i]) || strchr("_:.,()-", name[i])) ? name[i] : '_';
    g->name[k] = 0;
    g->rank = rank;
    g->size = size;
    return accel__g_fr_ngroups++;
}
/* The host group is group 0 of the dump (set up by the first host collective or accel_coll context). */
ACCEL__PRIVATE void accel__fr_host_group(accel *acc) {
    if (!accel__g_fr_ngroups) accel__fr_group("host", acc->process_index, acc->num_processes);
    accel__g_fr_groups[0].rank = acc->process_index;
    accel__g_fr_groups[0].size = acc->num_processes;
}
/* Records a call as posted; returns its id for accel__fr_done (0 when the recorder is off). */
ACCEL__PRIVATE uint64_t accel__fr_post(int group, uint64_t seq, const char *what, int op, int dtype, int64_t count,
                                       int64_t bytes, int root) {
    accel__fr_entry *e;
    size_t i;
    if (!accel__g_fr_cap) return 0;
    e = &accel__g_fr[accel__g_fr_n % accel__g_fr_cap];
    e->id = 0; /* a dump from a signal handler skips the slot while it is rewritten */
    e->seq = seq;
    e->posted = accel__fr_now();
    e->done = 0;
    e->count = count;
    e->bytes = bytes;
    e->file = accel__g_fr_file;
    e->line = accel__g_fr_line;
    e->group = group;
    e->root = root;
    e->op = (signed char)op;
    e->dtype = (signed char)dtype;
    e->state = ACCEL__FR_POSTED;
    for (i = 0; what[i] && i + 1 < sizeof e->what; ++i) e->what[i] = what[i];
    e->what[i] = 0;
    e->id = ++accel__g_fr_n;
    accel__g_fr_waiting = e->id;
    return e->id;
}
/* Ends a call: completed (r == ACCEL_OK) or failed. A deadline, a mismatch or an MPI/NCCL failure dumps the ring. */
ACCEL__PRIVATE void accel__fr_done(accel *acc, uint64_t id, accel_result r) {
    accel__fr_entry *e = id && accel__g_fr_cap ? &accel__g_fr[(id - 1) % accel__g_fr_cap] : NULL;
    if (e && e->id == id) {
        e->done = accel__fr_now();
        e->state = r == ACCEL_OK ? ACCEL__FR_DONE : ACCEL__FR_FAILED;
    }
    if (id && id == accel__g_fr_waiting) accel__g_fr_waiting = 0;
    if (r == ACCEL_OK) {
        if (acc && acc->impl) acc->impl->err_seq_ok = accel__g_error_seq;
    } else if ((r == ACCEL_ERR_TIMEOUT || r == ACCEL_ERR_MISMATCH || r == ACCEL_ERR_MPI || r == ACCEL_ERR_NCCL) &&
               accel__g_fr_dump) {
        accel__g_fr_dump(accel_result_string(r));
    }
}
/* Called by every wait loop at least once a second: a call in flight for 30 s or more gets one WARN line a minute
   naming it ("waiting for rank 3 in all_reduce #1042 (F32, 31000000 elements) at train.c:88 for 90 s"). `peer`
   names whom this rank waits for when the loop knows (NULL: the other ranks). */
ACCEL__PRIVATE void accel__fr_tick(accel *acc, const char *peer) {
    const accel__fr_entry *e;
    double now;
    if (!accel__g_fr_waiting || !accel__g_fr_cap) return;
    e = &accel__g_fr[(accel__g_fr_waiting - 1) % accel__g_fr_cap];
    if (e->id != accel__g_fr_waiting) return;
    now = accel__fr_now();
    if (accel__g_fr_note_id != e->id) { accel__g_fr_note_id = e->id; accel__g_fr_note_n = 0; }
    if (now - e->posted < 30.0 + 60.0 * (double)accel__g_fr_note_n) return; /* at 30 s, then once a minute */
    ++accel__g_fr_note_n;
    accel_log(acc, ACCEL_LOG_WARN, "[rank %d] waiting for %s in %s #%llu (%s, %lld elements, group %s) at %s:%d for "
              "%.0f s", accel__g_fr_ngroups ? accel__g_fr_groups[0].rank : -1, peer ? peer : "the other ranks",
              e->what, (unsigned long long)e->seq,
              e->dtype > 0 ? accel_dtype_name((accel_dtype)e->dtype) : "-", (long long)e->count,
              e->group < accel__g_fr_ngroups ? accel__g_fr_groups[e->group].name : "?", e->file ? e->file : "?",
              e->line, now - e->posted);
}

/* --------------------------------------------------------------------------------------------------- 3. TCP sockets */
#if !defined(_WIN32)
/* ---- TCP sockets with deadlines (the host store, NCCL's TCP bootstrap). Every call gives up at the deadline. */
/* Sends or receives exactly n bytes. 0 ok, -1 error/EOF (errno: 0 on EOF), -2 deadline. */
ACCEL__PRIVATE int accel__sock_io(int fd, void *buf, size_t n, int sending, double deadline) {
    unsigned char *p = (unsigned char *)buf;
    while (n > 0) {
        struct pollfd pfd;
        ssize_t k;
        int left = accel__ms_left(deadline), pr;
        if (left == 0) return -2;
        pfd.fd = fd;
        pfd.events = sending ? POLLOUT : POLLIN;
        pfd.revents = 0;
        pr = poll(&pfd, 1, left > 1000 ? 1000 : left); /* a second at most: the flight recorder's wait lines */
        if (pr < 0 && errno == EINTR) continue;
        if (pr < 0) return -1;
        if (pr == 0 && left > 1000) { accel__fr_tick(NULL, "rank 0 (the host store's hub)"); continue; }
        if (pr == 0) return -2;
        k = sending ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
        if (k < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
        if (k == 0) errno = 0;
        if (k <= 0) return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}
ACCEL__PRIVATE int accel__sock_resolve(const char *addr, int port, struct sockaddr_storage *ss, socklen_t *len) {
    struct addrinfo hints, *res = NULL;
    char ps[16];
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    snprintf(ps, sizeof ps, "%d", port);
    if (getaddrinfo(addr, ps, &hints, &res) != 0 || !res) return -1;
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len = (socklen_t)res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}
/* Every socket of the store and the bootstraps is close-on-exec: a program the trainer runs (a data tool, a shell)
   must not inherit the store's listener or a rank's connection (it would keep the port and the job's stream open
   after the trainer is gone, and could talk on them). */
ACCEL__PRIVATE int accel__sock_new(int family) {
#ifdef SOCK_CLOEXEC
    return socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
#else
    int fd = socket(family, SOCK_STREAM, 0);
    if (fd >= 0) (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
    return fd;
#endif
}
/* accept, close-on-exec (atomically with accept4 where it is declared; otherwise at once after accept). */
ACCEL__PRIVATE int accel__sock_accept(int lfd) {
#if defined(_GNU_SOURCE) && defined(SOCK_CLOEXEC)
    return accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
#else
    int fd = accept(lfd, NULL, NULL);
    if (fd >= 0) (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
    return fd;
#endif
}
/* A listening socket on exactly ss (address and port: the interface MASTER_ADDR names, not every interface, so a
   network the job does not use cannot reach it). -1 with errno on failure. */
ACCEL__PRIVATE int accel__sock_listen(const struct sockaddr_storage *ss, int backlog) {
    socklen_t len = ss->ss_family == AF_INET6 ? (socklen_t)sizeof(struct sockaddr_in6)
                                              : (socklen_t)sizeof(struct sockaddr_in);
    int fd = accel__sock_new(ss->ss_family), one = 1;
    if (fd < 0) return -1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (const struct sockaddr *)ss, len) != 0 || listen(fd, backlog) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}
/* 1 when ss is a loopback address (127.0.0.0/8, ::1, ::ffff:127.x): reachable from this host only. */
ACCEL__PRIVATE int accel__sock_is_loopback(const struct sockaddr_storage *ss) {
    if (ss->ss_family == AF_INET) return (ntohl(((const struct sockaddr_in *)ss)->sin_addr.s_addr) >> 24) == 127;
    if (ss->ss_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)ss)->sin6_addr;
        return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
    }
    return 0;
}
/* Connects, retrying every 50 ms until the deadline (the listener may start later). -1 at the deadline. */
ACCEL__PRIVATE int accel__sock_connect(const struct sockaddr_storage *ss, socklen_t sl, double deadline) {
    for (;;) {
        int fd, rc, err = 0, flags, left = accel__ms_left(deadline), one = 1;
        socklen_t el = sizeof err;
        struct pollfd pfd;
        if (left == 0) return -1;
        fd = accel__sock_new(ss->ss_family);
        if (fd < 0) return -1;
        flags = fcntl(fd, F_GETFL, 0);
        fcntl(fd, F_SETFL, flags | O_NONBLOCK);
        rc = connect(fd, (const struct sockaddr *)ss, sl);
        if (rc != 0 && errno == EINPROGRESS) {
            pfd.fd = fd; pfd.events = POLLOUT; pfd.revents = 0;
            rc = poll(&pfd, 1, left < 1000 ? left : 1000) == 1 ? 0 : -1;
            if (rc == 0 && (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0 || err != 0)) rc = -1;
        }
        if (rc == 0) {
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            return fd;
        }
        close(fd);
        left = accel__ms_left(deadline);
        accel__sleep_ms(left < 50 ? left : 50);
    }
}
#endif /* !_WIN32 */

/* ----------------------------------------------------------------------------------------------------- 4. the group */
static accel_result accel__group_failed(accel *acc, accel_result r) {
    if (acc->impl && !acc->impl->broken) {
        acc->impl->broken = r;
        accel__fmt(acc->impl->broken_why, sizeof acc->impl->broken_why, "%.190s", acc->last_error);
    }
    return r;
}

#ifdef ACCEL_WITH_MPI
/* Completes a nonblocking MPI call by polling, so the deadline holds whatever MPI does. */
static accel_result accel__mpi_wait(accel *acc, MPI_Request *q, double deadline, const char *what) {
    int done = 0, spins = 0;
    for (;;) {
        int rc = MPI_Test(q, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return accel__mpi_fail(acc, rc, what, __FILE__, __LINE__);
        if (done) return ACCEL_OK;
        if ((spins & 1023) == 0) accel__fr_tick(acc, NULL);
        if (accel_now() > deadline)
            return ACCEL__FAIL(acc, ACCEL_ERR_TIMEOUT,
                               "host %s did not complete within %.1f s on rank %d of %d: a peer is "
                               "dead, stuck, or not making the same call",
                               what, accel__timeout_s(acc), acc->process_index, acc->num_processes);
        if (++spins > 64) sched_yield(); /* oversubscribed ranks: let the peer run */
    }
}
static accel_result accel__mpi_tp_allgather(void *ctx, accel *acc, const void *in, void *out, size_t bytes,
                                            double deadline) {
    MPI_Request q;
    ACCEL__MPI_CHECK(acc, MPI_Iallgather(in, (int)bytes, MPI_BYTE, out, (int)bytes, MPI_BYTE, *(MPI_Comm *)ctx, &q));
    return accel__mpi_wait(acc, &q, deadline, "all-gather");
}
static accel_result accel__mpi_tp_allgatherv(void *ctx, accel *acc, const void *in, void *out, const size_t *counts,
                                             double deadline) {
    int P = acc->num_processes, i, *iv = (int *)accel_host_alloc(acc, sizeof(int) * 2 * (size_t)P);
    size_t total = 0;
    MPI_Request q;
    int rc;
    accel_result r;
    if (!iv) return ACCEL_ERR_OUT_OF_MEMORY;
    for (i = 0; i < P; ++i) {
        iv[i] = (int)counts[i];
        iv[P + i] = (int)total;
        total += counts[i];
    }
    rc = MPI_Iallgatherv(in, iv[acc->process_index], MPI_BYTE, out, iv, iv + P, MPI_BYTE, *(MPI_Comm *)ctx, &q);
    r = rc == MPI_SUCCESS ? accel__mpi_wait(acc, &q, deadline, "all-gather-v")
                          : accel__mpi_fail(acc, rc, "MPI_Iallgatherv", __FILE__, __LINE__);
    accel_host_free(acc, iv);
    return r;
}
static accel_result accel__mpi_tp_bcast(void *ctx, accel *acc, void *buf, size_t bytes, int root, double deadline) {
    MPI_Request q;
    ACCEL__MPI_CHECK(acc, MPI_Ibcast(buf, (int)bytes, MPI_BYTE, root, *(MPI_Comm *)ctx, &q));
    return accel__mpi_wait(acc, &q, deadline, "broadcast");
}
static const accel__transport accel__mpi_transport = {"mpi", accel__mpi_tp_allgather, accel__mpi_tp_allgatherv,
                                                      accel__mpi_tp_bcast};
#endif

#if !defined(_WIN32)
/* ---- the TCP store: the host group without MPI (torchrun, accel launch), in the role of torch's TCPStore.
   Rank 0 is the hub; every other rank holds one connection to it. Frames are a 24-byte little-endian header
   (u32 magic "ACS1", u16 kind, u16 op, u32 rank, u32 seq, u64 len) and len payload bytes. A collective: every rank
   sends its contribution (an OP frame) to the hub; the hub checks each frame (kind, op, sender, sequence number,
   length) and answers every rank with the RESULT, or with an ERROR frame naming the rank that failed (closed its
   connection, sent garbage, missed the deadline) so every rank fails with the same cause. Setup is the admission
   below: a rank joins only after it proved that it knows the job's secret; anyone else is refused and the job goes
   on. */
#define ACCEL__ST_MAGIC 0x31534341u /* "ACS1" */
#define ACCEL__ST_HDR 24
#define ACCEL__ST_VERSION 2u        /* 2: the challenge-response admission */
#define ACCEL__ST_MAX_PAYLOAD ((uint64_t)1 << 30)
#define ACCEL__ST_MAX_TOKEN 256u
enum { ACCEL__ST_HELLO = 1, ACCEL__ST_WELCOME, ACCEL__ST_OP, ACCEL__ST_RESULT, ACCEL__ST_ERROR, ACCEL__ST_CHALLENGE };
enum { ACCEL__ST_OP_ALLGATHER = 1, ACCEL__ST_OP_ALLGATHERV, ACCEL__ST_OP_BCAST };
#define ACCEL__ST_ERR_REFUSED 1     /* op of an ERROR frame that refuses admission (the other ERRORs fail a job) */

/* ---- admission: who may join a rendezvous (the store; accel_collectives.h's NCCL TCP and file bootstraps).
   The processes of a job share a secret (ACCEL_STORE_SECRET: `accel launch` makes one per job; torchrun/Slurm users
   set it) and a run id. Rank 0 sends every connection a CHALLENGE (a fresh 32-byte nonce); the peer answers with a
   HELLO (version, world size, rank, its own nonce, run id and a proof: HMAC-SHA256(secret, "client", label, both
   nonces, world size, rank, run id)); rank 0 checks the proof before anything else the peer says, and its WELCOME
   carries rank 0's own proof ("server", the same values and the payload) so a process squatting rank 0's port can
   neither pose as rank 0 nor learn anything. A fresh nonce per connection makes a recorded handshake worthless; the
   label keeps a store proof from opening a bootstrap. Rank 0 serves all connections at once (poll), each with its
   own deadline, so idle or slow strays delay nobody; a refused peer is told why ("not admitted: wrong secret", "the
   job is full") and the job goes on. Without a secret, or in a build without ACCEL_WITH_OPENSSL, peers cannot be
   checked: only the run id is compared (a peer of another run is refused), and only a loopback address may be used
   unless ACCEL_STORE_TRUSTED_NETWORK declares the network trusted. Not protected: the traffic after admission is
   neither encrypted nor authenticated — an on-path attacker can read and change it (as with PyTorch's and NCCL's own
   traffic: use a trusted network). */
#define ACCEL__ADMIT_NONCE 32
#define ACCEL__ADMIT_MAC 32
#define ACCEL__ADMIT_MAX_SECRET 1024
#define ACCEL__ADMIT_HELLO_FIXED (20 + 2 * ACCEL__ADMIT_NONCE) /* 5 u32, nonce, proof; then the run id */
#define ACCEL__ADMIT_GREET 5.0    /* seconds a connection has for its HELLO (real ranks answer in microseconds) */
#define ACCEL__ADMIT_PENDING 256  /* handshakes at once; a newer connection evicts the oldest (floods cannot starve) */
#define ACCEL__ADMIT_BACKLOG 4096 /* the listen queue (the kernel caps it at net.core.somaxconn) */
#define ACCEL__RDZV_MAX 65536       /* members of an accel_host_rendezvous (accel launch's node limit) */
#define ACCEL__RDZV_MAX_BYTES 65536 /* bytes each contributes */

typedef struct accel__st_frame {
    uint32_t magic;
    uint16_t kind, op;
    uint32_t rank, seq;
    uint64_t len;
} accel__st_frame;

/* Untrusted bytes (fuzzed): 0 when b[0..n) starts with a well-formed header, else -1 and the reason in why. */
ACCEL__PRIVATE int accel__store_parse_header(const unsigned char *b, size_t n, accel__st_frame *f, char *why,
                                             size_t cap) {
    if (n < ACCEL__ST_HDR) {
        accel__fmt(why, cap, "a truncated frame header (%zu of %d bytes)", n, ACCEL__ST_HDR);
        return -1;
    }
    f->magic = accel__get_u32(b);
    f->kind = accel__get_u16(b + 4);
    f->op = accel__get_u16(b + 6);
    f->rank = accel__get_u32(b + 8);
    f->seq = accel__get_u32(b + 12);
    f->len = accel__get_u64(b + 16);
    if (f->magic != ACCEL__ST_MAGIC) {
        accel__fmt(why, cap, "bytes that are not an accel store frame (magic 0x%08x)", (unsigned)f->magic);
        return -1;
    }
    if (f->kind < ACCEL__ST_HELLO || f->kind > ACCEL__ST_CHALLENGE) {
        accel__fmt(why, cap, "an unknown frame kind %u", (unsigned)f->kind);
        return -1;
    }
    if (f->len > ACCEL__ST_MAX_PAYLOAD) {
        accel__fmt(why, cap, "a frame of %llu bytes (the limit is 1 GiB)", (unsigned long long)f->len);
        return -1;
    }
    if (f->kind == ACCEL__ST_OP && (f->op < ACCEL__ST_OP_ALLGATHER || f->op > ACCEL__ST_OP_BCAST)) {
        accel__fmt(why, cap, "an unknown operation %u", (unsigned)f->op);
        return -1;
    }
    if (f->kind == ACCEL__ST_HELLO &&
        (f->len < ACCEL__ADMIT_HELLO_FIXED || f->len > ACCEL__ADMIT_HELLO_FIXED + ACCEL__ST_MAX_TOKEN)) {
        accel__fmt(why, cap, "a HELLO of %llu bytes", (unsigned long long)f->len);
        return -1;
    }
    if (f->kind == ACCEL__ST_CHALLENGE && f->len != 4 + ACCEL__ADMIT_NONCE) {
        accel__fmt(why, cap, "a CHALLENGE of %llu bytes", (unsigned long long)f->len);
        return -1;
    }
    return 0;
}
static void accel__store_put_header(unsigned char *b, int kind, int op, uint32_t rank, uint32_t seq, uint64_t len) {
    accel__put_u32(b, ACCEL__ST_MAGIC);
    accel__put_u16(b + 4, (uint16_t)kind);
    accel__put_u16(b + 6, (uint16_t)op);
    accel__put_u32(b + 8, rank);
    accel__put_u32(b + 12, seq);
    accel__put_u64(b + 16, len);
}

/* The run id both sides must share: a process of another job (on the same port, with the same secret) is refused.
   TORCHELASTIC_RUN_ID, else ACCEL_RUN_ID, else inside an srun step the step ("slurm-JOB.STEP", the same for every
   task of it). "none" (what `accelerate launch` always passes as torchrun's run id) names no run: the next applies. */
static const char *accel__store_run_id(char *buf, size_t cap) {
    const char *s = getenv("TORCHELASTIC_RUN_ID"), *job = getenv("SLURM_JOB_ID"), *step = getenv("SLURM_STEP_ID");
    if (s && *s && strcmp(s, "none") != 0) return s;
    if (getenv("ACCEL_RUN_ID") && *getenv("ACCEL_RUN_ID")) return getenv("ACCEL_RUN_ID");
    if (job && *job && step && *step && strlen(job) + strlen(step) + 8 < cap) {
        snprintf(buf, cap, "slurm-%s.%s", job, step);
        return buf;
    }
    return s ? s : "";
}

typedef struct accel__admit {
    const char *label;                       /* "store", "nccl-tcp", "nccl-file": a proof is valid for one only */
    char secret[ACCEL__ADMIT_MAX_SECRET + 1]; /* ACCEL_STORE_SECRET, copied (the program may change its environment) */
    size_t secret_len;
    char run_id[ACCEL__ST_MAX_TOKEN + 1];
    size_t run_len;
    int keyed;   /* a secret is set and this build has the MAC: peers are checked */
    int trusted; /* ACCEL_STORE_TRUSTED_NETWORK: an unchecked rendezvous may use a non-loopback address */
} accel__admit;

/* The job's secret, run id and trust setting, from the environment. */
ACCEL__PRIVATE accel_result accel__admit_init(accel *acc, accel__admit *a, const char *label) {
    char slurm_run[64];
    const char *s = getenv("ACCEL_STORE_SECRET"), *run = accel__store_run_id(slurm_run, sizeof slurm_run);
    const char *t = getenv("ACCEL_STORE_TRUSTED_NETWORK");
    memset(a, 0, sizeof *a);
    a->label = label;
    if (strlen(run) > ACCEL__ST_MAX_TOKEN)
        return ACCEL__FAIL(acc, ACCEL_ERR_ENVIRONMENT, "the run id (TORCHELASTIC_RUN_ID / ACCEL_RUN_ID) is longer than "
                           "%u bytes", ACCEL__ST_MAX_TOKEN);
    a->run_len = strlen(run);
    memcpy(a->run_id, run, a->run_len + 1);
    if (t && *t) {
        int b = accel_parse_bool(t);
        if (b < 0)
            return ACCEL__FAIL(acc, ACCEL_ERR_ENVIRONMENT, "ACCEL_STORE_TRUSTED_NETWORK=\"%.100s\" is not a boolean",
                               t);
        a->trusted = b;
    }
    if (s && *s) {
        if (strlen(s) > ACCEL__ADMIT_MAX_SECRET)
            return ACCEL__FAIL(acc, ACCEL_ERR_ENVIRONMENT, "ACCEL_STORE_SECRET is longer than %d bytes",
                               ACCEL__ADMIT_MAX_SECRET);
        a->secret_len = strlen(s);
        memcpy(a->secret, s, a->secret_len + 1);
#ifdef ACCEL_WITH_OPENSSL
        a->keyed = 1;
#else
        accel_log(acc, ACCEL_LOG_DEBUG, "ACCEL_STORE_SECRET is set but this build has no MAC library "
                  "(ACCEL_WITH_OPENSSL): peers are not checked");
#endif
    }
    return ACCEL_OK;
}

/* An unchecked rendezvous (no secret, or no MAC in this build) stays on loopback unless the network is trusted. */
ACCEL__PRIVATE accel_result accel__admit_policy(accel *acc, const accel__admit *a, const struct sockaddr_storage *ss,
                                                const char *what, const char *where) {
    if (a->keyed || a->trusted || accel__sock_is_loopback(ss)) return ACCEL_OK;
    return ACCEL__FAIL(acc, ACCEL_ERR_ENVIRONMENT, "%s (%s): refusing a non-loopback address without admission "
                       "control: %s, or set ACCEL_STORE_TRUSTED_NETWORK=1 if only trusted hosts can reach this network "
                       "(README: Security)", what, where,
                       a->secret_len ? "ACCEL_STORE_SECRET is set but this build cannot check it (compile the "
                                       "ACCEL_IMPLEMENTATION TU with -DACCEL_WITH_OPENSSL and link -lcrypto)"
                                     : "set ACCEL_STORE_SECRET to the same random value for every process of the job");
}

/* Nonces: the kernel's random bytes. 0 ok. */
ACCEL__PRIVATE int accel__random_bytes(void *buf, size_t n) {
    unsigned char *p = (unsigned char *)buf;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    while (n > 0) {
        ssize_t k = read(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) { close(fd); return -1; }
        p += k;
        n -= (size_t)k;
    }
    close(fd);
    return 0;
}

/* proof = HMAC-SHA256(secret, every field length-prefixed: role, label, n1, n2, world, rank, run id, body); NULL
   nonces count as zeros. 0 ok, -1 when this build has no MAC (or libcrypto failed). */
ACCEL__PRIVATE int accel__admit_mac(const accel__admit *a, const char *role, const unsigned char *n1,
                                    const unsigned char *n2, uint32_t world, uint32_t rank, const unsigned char *run,
                                    size_t run_len, const void *body, size_t blen,
                                    unsigned char out[ACCEL__ADMIT_MAC]) {
#ifdef ACCEL_WITH_OPENSSL
    unsigned char small[1024], *t = small;
    size_t rl = strlen(role), ll = strlen(a->label), n = 0;
    size_t need = 4 + rl + 4 + ll + 2 * ACCEL__ADMIT_NONCE + 8 + 4 + run_len + 8 + blen;
    unsigned int ol = 0;
    int ok;
    if (need > sizeof small) {
        t = (unsigned char *)accel_host_alloc(NULL, need);
        if (!t) return -1;
    }
    accel__put_u32(t + n, (uint32_t)rl); memcpy(t + n + 4, role, rl); n += 4 + rl;
    accel__put_u32(t + n, (uint32_t)ll); memcpy(t + n + 4, a->label, ll); n += 4 + ll;
    if (n1) memcpy(t + n, n1, ACCEL__ADMIT_NONCE); else memset(t + n, 0, ACCEL__ADMIT_NONCE);
    n += ACCEL__ADMIT_NONCE;
    if (n2) memcpy(t + n, n2, ACCEL__ADMIT_NONCE); else memset(t + n, 0, ACCEL__ADMIT_NONCE);
    n += ACCEL__ADMIT_NONCE;
    accel__put_u32(t + n, world); accel__put_u32(t + n + 4, rank); n += 8;
    accel__put_u32(t + n, (uint32_t)run_len); if (run_len) memcpy(t + n + 4, run, run_len); n += 4 + run_len;
    accel__put_u64(t + n, (uint64_t)blen); if (blen) memcpy(t + n + 8, body, blen); n += 8 + blen;
    ok = HMAC(EVP_sha256(), a->secret, (int)a->secret_len, t, n, out, &ol) != NULL && ol == ACCEL__ADMIT_MAC;
    if (t != small) accel_host_free(NULL, t);
    return ok ? 0 : -1;
#else
    (void)a; (void)role; (void)n1; (void)n2; (void)world; (void)rank; (void)run; (void)run_len; (void)body; (void)blen;
    memset(out, 0, ACCEL__ADMIT_MAC);
    return -1;
#endif
}
/* Constant-time comparison of two proofs. 1 when equal. */
ACCEL__PRIVATE int accel__admit_same(const unsigned char *x, const unsigned char *y) {
#ifdef ACCEL_WITH_OPENSSL
    return CRYPTO_memcmp(x, y, ACCEL__ADMIT_MAC) == 0;
#else
    unsigned d = 0;
    int i;
    for (i = 0; i < ACCEL__ADMIT_MAC; ++i) d |= (unsigned)(x[i] ^ y[i]);
    return d == 0;
#endif
}

/* Rank 0's CHALLENGE frame for one connection (out: ACCEL__ST_HDR + 4 + nonce bytes). */
ACCEL__PRIVATE size_t accel__admit_challenge(const unsigned char *nonce, unsigned char *out) {
    accel__store_put_header(out, ACCEL__ST_CHALLENGE, 0, 0, 0, 4 + ACCEL__ADMIT_NONCE);
    accel__put_u32(out + ACCEL__ST_HDR, ACCEL__ST_VERSION);
    memcpy(out + ACCEL__ST_HDR + 4, nonce, ACCEL__ADMIT_NONCE);
    return ACCEL__ST_HDR + 4 + ACCEL__ADMIT_NONCE;
}
/* A peer reads a CHALLENGE payload (untrusted: it may come from whoever holds the port). 0 and the nonce, or -1. */
ACCEL__PRIVATE int accel__admit_parse_challenge(const unsigned char *p, uint64_t len, unsigned char *nonce, char *why,
                                                size_t cap) {
    if (len != 4 + ACCEL__ADMIT_NONCE) {
        accel__fmt(why, cap, "a CHALLENGE of %llu bytes", (unsigned long long)len);
        return -1;
    }
    if (accel__get_u32(p) != ACCEL__ST_VERSION) {
        accel__fmt(why, cap, "protocol version %u (this build speaks %u)", (unsigned)accel__get_u32(p),
                   ACCEL__ST_VERSION);
        return -1;
    }
    memcpy(nonce, p + 4, ACCEL__ADMIT_NONCE);
    return 0;
}
/* The peer's HELLO frame answering srv_nonce (out: ACCEL__ST_HDR + HELLO_FIXED + MAX_TOKEN bytes); its length. */
ACCEL__PRIVATE size_t accel__admit_put_hello(const accel__admit *a, uint32_t world, uint32_t rank,
                                             const unsigned char *srv_nonce, const unsigned char *cli_nonce,
                                             unsigned char *out) {
    unsigned char *p = out + ACCEL__ST_HDR;
    size_t len = ACCEL__ADMIT_HELLO_FIXED + a->run_len;
    accel__store_put_header(out, ACCEL__ST_HELLO, 0, rank, 0, len);
    accel__put_u32(p, ACCEL__ST_VERSION);
    accel__put_u32(p + 4, world);
    accel__put_u32(p + 8, rank);
    accel__put_u32(p + 12, (uint32_t)a->keyed);
    accel__put_u32(p + 16, (uint32_t)a->run_len);
    memcpy(p + 20, cli_nonce, ACCEL__ADMIT_NONCE);
    memset(p + 20 + ACCEL__ADMIT_NONCE, 0, ACCEL__ADMIT_MAC);
    if (a->keyed && accel__admit_mac(a, "client", srv_nonce, cli_nonce, world, rank, (const unsigned char *)a->run_id,
                                     a->run_len, NULL, 0, p + 20 + ACCEL__ADMIT_NONCE) != 0)
        memset(p + 20 + ACCEL__ADMIT_NONCE, 0, ACCEL__ADMIT_MAC); /* refused by rank 0 as a wrong secret */
    memcpy(p + ACCEL__ADMIT_HELLO_FIXED, a->run_id, a->run_len);
    return ACCEL__ST_HDR + len;
}
/* Rank 0's WELCOME payload prefix for an admitted peer (u32 flags, then rank 0's proof over body when keyed; out:
   4 + ACCEL__ADMIT_MAC bytes): its length, or 0 when the MAC failed. The body follows it in the same frame. */
ACCEL__PRIVATE size_t accel__admit_put_welcome(const accel__admit *a, uint32_t world, uint32_t rank,
                                           const unsigned char *srv_nonce, const unsigned char *cli_nonce,
                                           const void *body, size_t blen, unsigned char *out) {
    accel__put_u32(out, (uint32_t)a->keyed);
    if (!a->keyed) return 4;
    if (accel__admit_mac(a, "server", cli_nonce, srv_nonce, world, rank, (const unsigned char *)a->run_id, a->run_len,
                         body, blen, out + 4) != 0)
        return 0;
    return 4 + ACCEL__ADMIT_MAC;
}
/* A peer checks rank 0's WELCOME payload (untrusted): 0 with the body that follows the proof, or -1 and why. */
ACCEL__PRIVATE int accel__admit_check_welcome(const accel__admit *a, const unsigned char *p, uint64_t len,
                                              const unsigned char *srv_nonce, const unsigned char *cli_nonce,
                                              uint32_t world, uint32_t rank, const unsigned char **body, size_t *blen,
                                              char *why, size_t cap) {
    uint32_t flags;
    unsigned char want[ACCEL__ADMIT_MAC];
    size_t off;
    if (len < 4) { accel__fmt(why, cap, "a WELCOME of %llu bytes", (unsigned long long)len); return -1; }
    flags = accel__get_u32(p);
    if (flags > 1 || (flags && len < 4 + ACCEL__ADMIT_MAC)) {
        accel__fmt(why, cap, "a malformed WELCOME (flags %u, %llu bytes)", (unsigned)flags, (unsigned long long)len);
        return -1;
    }
    off = flags ? 4 + ACCEL__ADMIT_MAC : 4;
    if (a->keyed) {
        if (!flags || accel__admit_mac(a, "server", cli_nonce, srv_nonce, world, rank, (const unsigned char *)a->run_id,
                                       a->run_len, p + off, (size_t)len - off, want) != 0 ||
            !accel__admit_same(want, p + 4)) {
            accel__fmt(why, cap, "rank 0 could not prove that it knows the job's secret (not this job's rank 0, or its "
                       "ACCEL_STORE_SECRET differs)");
            return -1;
        }
    }
    *body = p + off;
    *blen = (size_t)len - off;
    return 0;
}

/* ---- a sealed blob: what rank 0 leaves for the others on a shared filesystem (the NCCL file bootstrap): "ACCELNB2",
   u32 flags (1: keyed), nonce, proof, u32 run id length, run id, u64 size, the bytes. The proof is rank 0's MAC over
   the nonce, the run id and the bytes: a file that someone without the secret wrote, or one of another run, is
   not this job's. The writer also makes it readable by its own user only (0600). */
#define ACCEL__SEAL_MAGIC "ACCELNB2"
#define ACCEL__SEAL_FIXED (8 + 4 + ACCEL__ADMIT_NONCE + ACCEL__ADMIT_MAC + 4)
ACCEL__PRIVATE accel_result accel__admit_seal(accel *acc, const accel__admit *a, const void *data, size_t n,
                                              unsigned char **out, size_t *len) {
    unsigned char *b, *p;
    size_t total = ACCEL__SEAL_FIXED + a->run_len + 8 + n;
    *out = NULL;
    *len = 0;
    b = (unsigned char *)accel_host_alloc(acc, total);
    if (!b) return ACCEL_ERR_OUT_OF_MEMORY;
    memcpy(b, ACCEL__SEAL_MAGIC, 8);
    accel__put_u32(b + 8, (uint32_t)a->keyed);
    p = b + 12;
    if (accel__random_bytes(p, ACCEL__ADMIT_NONCE) != 0) {
        accel_host_free(acc, b);
        return ACCEL__FAIL(acc, ACCEL_ERR_IO, "%s: cannot read /dev/urandom", a->label);
    }
    memset(p + ACCEL__ADMIT_NONCE, 0, ACCEL__ADMIT_MAC);
    if (a->keyed && accel__admit_mac(a, "server", p, NULL, 0, 0, (const unsigned char *)a->run_id, a->run_len, data, n,
                                     p + ACCEL__ADMIT_NONCE) != 0) {
        accel_host_free(acc, b);
        return ACCEL__FAIL(acc, ACCEL_ERR_IO, "%s: the MAC failed", a->label);
    }
    p += ACCEL__ADMIT_NONCE + ACCEL__ADMIT_MAC;
    accel__put_u32(p, (uint32_t)a->run_len);
    memcpy(p + 4, a->run_id, a->run_len);
    p += 4 + a->run_len;
    accel__put_u64(p, (uint64_t)n);
    if (n) memcpy(p + 8, data, n);
    *out = b;
    *len = total;
    return ACCEL_OK;
}
/* Reads a sealed blob (untrusted bytes, fuzzed): 0 with its bytes in *body, *blen; -1 and why when it is not this
   job's (not a sealed blob, another run's, sealed without this job's secret). */
ACCEL__PRIVATE int accel__admit_unseal(const accel__admit *a, const unsigned char *b, size_t n,
                                       const unsigned char **body, size_t *blen, char *why, size_t cap) {
    const unsigned char *nonce, *proof, *p;
    uint32_t flags, rl;
    uint64_t sz;
    if (n < ACCEL__SEAL_FIXED + 8 || memcmp(b, ACCEL__SEAL_MAGIC, 8) != 0) {
        accel__fmt(why, cap, "not an accel bootstrap file");
        return -1;
    }
    flags = accel__get_u32(b + 8);
    nonce = b + 12;
    proof = nonce + ACCEL__ADMIT_NONCE;
    rl = accel__get_u32(proof + ACCEL__ADMIT_MAC);
    if (flags > 1 || rl > ACCEL__ST_MAX_TOKEN || (size_t)rl > n - ACCEL__SEAL_FIXED - 8) {
        accel__fmt(why, cap, "a malformed accel bootstrap file");
        return -1;
    }
    p = b + ACCEL__SEAL_FIXED;
    sz = accel__get_u64(p + rl);
    if (sz != (uint64_t)(n - ACCEL__SEAL_FIXED - rl - 8)) {
        accel__fmt(why, cap, "an accel bootstrap file of %zu bytes that says it holds %llu", n, (unsigned long long)sz);
        return -1;
    }
    if ((size_t)rl != a->run_len || memcmp(p, a->run_id, rl) != 0) {
        accel__fmt(why, cap, "a file of another run (its TORCHELASTIC_RUN_ID / ACCEL_RUN_ID differs from this job's)");
        return -1;
    }
    if (a->keyed) {
        unsigned char want[ACCEL__ADMIT_MAC];
        if (!flags || accel__admit_mac(a, "server", nonce, NULL, 0, 0, p, rl, p + rl + 8, (size_t)sz, want) != 0 ||
            !accel__admit_same(want, proof)) {
            accel__fmt(why, cap, "a file not written with this job's secret (ACCEL_STORE_SECRET)");
            return -1;
        }
    } else if (flags) {
        accel__fmt(why, cap, "a file sealed with a secret, and this process has none (ACCEL_STORE_SECRET)");
        return -1;
    }
    *body = p + rl + 8;
    *blen = (size_t)sz;
    return 0;
}

/* Rank 0's side of one connection: the HELLO arrives in pieces (bytes are fed as they come, never waited for). */
typedef struct accel__admit_conn {
    int fd;
    double deadline;
    unsigned char nonce[ACCEL__ADMIT_NONCE]; /* the challenge sent to it */
    size_t got;
    unsigned char in[ACCEL__ST_HDR + ACCEL__ADMIT_HELLO_FIXED + ACCEL__ST_MAX_TOKEN];
} accel__admit_conn;
typedef struct accel__admit_hello {
    uint32_t world, rank;
    const unsigned char *nonce; /* the peer's (inside the connection's buffer) */
} accel__admit_hello;
enum { ACCEL__ADMIT_OK = 0, ACCEL__ADMIT_DROP, ACCEL__ADMIT_REFUSE, ACCEL__ADMIT_MORE, ACCEL__ADMIT_KEPT,
       ACCEL__ADMIT_DONE };

/* Bytes the connection's HELLO still needs (0: complete), or -1 when what came is not a HELLO. */
ACCEL__PRIVATE long accel__admit_need(const accel__admit_conn *c) {
    accel__st_frame f;
    char why[8];
    if (c->got < ACCEL__ST_HDR) return (long)(ACCEL__ST_HDR - c->got);
    if (accel__store_parse_header(c->in, ACCEL__ST_HDR, &f, why, sizeof why) != 0 || f.kind != ACCEL__ST_HELLO)
        return -1;
    return (long)(ACCEL__ST_HDR + (size_t)f.len - c->got); /* the header check bounds a HELLO's length */
}
/* Feeds n received bytes; returns how many it took (never past the HELLO). */
ACCEL__PRIVATE size_t accel__admit_feed(accel__admit_conn *c, const unsigned char *b, size_t n) {
    size_t took = 0;
    for (;;) {
        long need = accel__admit_need(c);
        size_t k;
        if (need <= 0 || took == n) return took;
        k = (size_t)need < n - took ? (size_t)need : n - took;
        memcpy(c->in + c->got, b + took, k);
        c->got += k;
        took += k;
    }
}
/* A complete HELLO, checked (untrusted bytes, fuzzed). The proof first: nothing else a peer says counts before it.
   ACCEL__ADMIT_OK (h filled), _DROP (not an accel peer: close silently) or _REFUSE (why goes back to the peer; it
   never contains what rank 0 expected). */
ACCEL__PRIVATE int accel__admit_check(const accel__admit *a, const accel__admit_conn *c, accel__admit_hello *h,
                                      char *why, size_t cap) {
    const unsigned char *p = c->in + ACCEL__ST_HDR;
    uint32_t version, flags, tlen;
    if (accel__admit_need(c) != 0) { accel__fmt(why, cap, "an incomplete HELLO"); return ACCEL__ADMIT_DROP; }
    version = accel__get_u32(p);
    h->world = accel__get_u32(p + 4);
    h->rank = accel__get_u32(p + 8);
    flags = accel__get_u32(p + 12);
    tlen = accel__get_u32(p + 16);
    h->nonce = p + 20;
    if (version != ACCEL__ST_VERSION) {
        accel__fmt(why, cap, "not admitted: protocol version %u (this build speaks %u)", (unsigned)version,
                   ACCEL__ST_VERSION);
        return ACCEL__ADMIT_REFUSE;
    }
    if (flags > 1 || (size_t)tlen != c->got - ACCEL__ST_HDR - ACCEL__ADMIT_HELLO_FIXED) {
        accel__fmt(why, cap, "a malformed HELLO (flags %u, run id of %u bytes)", (unsigned)flags, (unsigned)tlen);
        return ACCEL__ADMIT_DROP;
    }
    if (a->keyed) {
        unsigned char want[ACCEL__ADMIT_MAC];
        if (!flags) {
            accel__fmt(why, cap, "not admitted: wrong secret (none given: set ACCEL_STORE_SECRET to the job's secret)");
            return ACCEL__ADMIT_REFUSE;
        }
        if (accel__admit_mac(a, "client", c->nonce, h->nonce, h->world, h->rank, p + ACCEL__ADMIT_HELLO_FIXED, tlen,
                             NULL, 0, want) != 0 ||
            !accel__admit_same(want, p + 20 + ACCEL__ADMIT_NONCE)) {
            accel__fmt(why, cap, "not admitted: wrong secret");
            return ACCEL__ADMIT_REFUSE;
        }
    } else if (flags) {
        accel__fmt(why, cap, "not admitted: this rank has a secret and rank 0 has none (ACCEL_STORE_SECRET set on some "
                   "processes only%s)", a->secret_len ? ", or rank 0 was built without ACCEL_WITH_OPENSSL" : "");
        return ACCEL__ADMIT_REFUSE;
    }
    if ((size_t)tlen != a->run_len || memcmp(p + ACCEL__ADMIT_HELLO_FIXED, a->run_id, tlen) != 0) {
        accel__fmt(why, cap, "not admitted: the connection belongs to another run (its TORCHELASTIC_RUN_ID / "
                   "ACCEL_RUN_ID differs from this job's; accel launch --nnodes: pass the same --run-id to every "
                   "node)");
        return ACCEL__ADMIT_REFUSE;
    }
    return ACCEL__ADMIT_OK;
}

typedef struct accel__store {
    int rank, size;
    int *fd;       /* hub: fd[r] for r = 1..size-1; other ranks: fd[0] = the hub */
    uint32_t seq;  /* collectives so far: every frame of one collective carries the same number */
    char where[300];
    const char *member; /* what its members are called in setup's messages: NULL = ranks (accel_host_rendezvous) */
} accel__store;

/* One frame whose payload is a (an bytes) then b (bn bytes). */
static int accel__store_send2(int fd, int kind, int op, uint32_t rank, uint32_t seq, const void *a, size_t an,
                              const void *b, size_t bn, double deadline) {
    unsigned char h[ACCEL__ST_HDR];
    int rc;
    accel__store_put_header(h, kind, op, rank, seq, an + bn);
    rc = accel__sock_io(fd, h, sizeof h, 1, deadline);
    if (rc == 0 && an) rc = accel__sock_io(fd, (void *)a, an, 1, deadline);
    if (rc == 0 && bn) rc = accel__sock_io(fd, (void *)b, bn, 1, deadline);
    return rc;
}
static int accel__store_send(int fd, int kind, int op, uint32_t rank, uint32_t seq, const void *data, size_t n,
                             double deadline) {
    return accel__store_send2(fd, kind, op, rank, seq, data, n, NULL, 0, deadline);
}
/* Ranks other than the hub wait this much longer than the deadline: when a peer is stuck, the hub's verdict (an
   ERROR frame naming it) arrives just after the hub's own deadline. */
#define ACCEL__ST_GRACE 2.0

/* The reason a receive failed, for messages. */
static const char *accel__store_rc_text(int rc) {
    return rc == -2 ? "the deadline passed"
           : errno  ? strerror(errno)
                    : "the connection was closed (the process exited?)";
}
/* Reads one frame: header checked, payload (len bytes, at most max) into *payload from acc's allocator. what
   (where): who reads, for messages ("host store", "127.0.0.1:29500"). */
static accel_result accel__store_recv_max(accel *acc, const char *what, const char *where, int fd, int from,
                                          accel__st_frame *f, unsigned char **payload, double deadline,
                                          uint64_t max) {
    unsigned char h[ACCEL__ST_HDR];
    char why[160];
    int rc = accel__sock_io(fd, h, sizeof h, 0, deadline);
    *payload = NULL;
    if (rc != 0) {
        return ACCEL__FAIL(acc, rc == -2 ? ACCEL_ERR_TIMEOUT : ACCEL_ERR_REMOTE, "%s (%s): no frame from rank %d: %s",
                           what, where, from, accel__store_rc_text(rc));
    }
    if (accel__store_parse_header(h, sizeof h, f, why, sizeof why) != 0)
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%s (%s): rank %d sent %s", what, where, from, why);
    if (f->len > max) /* before admission: whoever holds the port must not make us allocate a GiB */
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%s (%s): rank %d sent a frame of %llu bytes, at most %llu expected",
                           what, where, from, (unsigned long long)f->len, (unsigned long long)max);
    *payload = (unsigned char *)accel_host_alloc(acc, (size_t)f->len + 1);
    if (!*payload) return ACCEL_ERR_OUT_OF_MEMORY;
    if (f->len && (rc = accel__sock_io(fd, *payload, (size_t)f->len, 0, deadline)) != 0) {
        accel_host_free(acc, *payload);
        *payload = NULL;
        return ACCEL__FAIL(acc, rc == -2 ? ACCEL_ERR_TIMEOUT : ACCEL_ERR_REMOTE,
                           "%s (%s): rank %d's frame was cut short: %s", what, where, from, accel__store_rc_text(rc));
    }
    (*payload)[f->len] = 0;
    return ACCEL_OK;
}
static accel_result accel__store_recv(accel *acc, const char *what, const char *where, int fd, int from,
                                      accel__st_frame *f, unsigned char **payload, double deadline) {
    return accel__store_recv_max(acc, what, where, fd, from, f, payload, deadline, ACCEL__ST_MAX_PAYLOAD);
}
/* The hub tells every other rank why the collective failed (best effort: a dead peer does not delay the rest). */
static void accel__store_broadcast_error(accel__store *st, const char *msg) {
    int r;
    double deadline = accel_now() + 2.0;
    for (r = 1; r < st->size; ++r)
        if (st->fd[r] >= 0)
            (void)accel__store_send(st->fd[r], ACCEL__ST_ERROR, 0, 0, st->seq, msg, strlen(msg), deadline);
}

/* Hub: is f rank r's contribution to collective st->seq of kind op, want bytes long (UINT64_MAX: any)? Pure (fuzzed):
   0, or -1 and why. */
ACCEL__PRIVATE int accel__store_check_op(const accel__store *st, const accel__st_frame *f, int op, int r, uint64_t want,
                                         char *why, size_t cap) {
    if (f->kind != ACCEL__ST_OP || f->rank != (uint32_t)r || f->seq != st->seq || f->op != (uint16_t)op) {
        accel__fmt(why, cap, "rank %d sent frame kind %u op %u from rank %u for collective #%u; expected op %d from "
                   "rank %d for collective #%u", r, (unsigned)f->kind, (unsigned)f->op, (unsigned)f->rank,
                   (unsigned)f->seq, op, r, (unsigned)st->seq);
        return -1;
    }
    if (want != UINT64_MAX && f->len != want) {
        accel__fmt(why, cap, "rank %d contributed %llu bytes, expected %llu", r, (unsigned long long)f->len,
                   (unsigned long long)want);
        return -1;
    }
    return 0;
}
/* Hub: the result of a collective from every rank's contribution (rank 0's is in; the others' bufs[r], want[r]
   bytes each): all-gathers in rank order, a broadcast the root's bytes. Its size, and the bytes into out when out is
   not NULL. Pure (fuzzed). */
ACCEL__PRIVATE size_t accel__store_combine(int op, int P, int root, const void *in, size_t in_len,
                                           unsigned char *const *bufs, const uint64_t *want, unsigned char *out) {
    size_t total = 0, off;
    int r;
    if (op == ACCEL__ST_OP_BCAST) {
        total = root == 0 ? in_len : (size_t)want[root];
        if (out && total) memcpy(out, root == 0 ? (const unsigned char *)in : bufs[root], total);
        return total;
    }
    for (total = in_len, r = 1; r < P; ++r) total += (size_t)want[r];
    if (!out) return total;
    if (in_len) memcpy(out, in, in_len);
    off = in_len;
    for (r = 1; r < P; ++r) {
        size_t k = (size_t)want[r];
        if (k) memcpy(out + off, bufs[r], k);
        off += k;
    }
    return total;
}

/* Hub: one contribution from every other rank, in any order (a dead rank is noticed whenever it happens).
   want[r] is the expected length (UINT64_MAX: any). */
static accel_result accel__store_collect(accel *acc, accel__store *st, int op, unsigned char **bufs,
                                         const uint64_t *want, double deadline) {
    struct pollfd stack_pfd[64], *pfd = stack_pfd;
    int *who, P = st->size, pending = P - 1, i, r;
    accel_result res = ACCEL_OK;
    if (P > 64) {
        pfd = (struct pollfd *)accel_host_alloc(acc, sizeof(struct pollfd) * (size_t)P);
        if (!pfd) return ACCEL_ERR_OUT_OF_MEMORY;
    }
    who = (int *)accel_host_alloc(acc, sizeof(int) * (size_t)P);
    if (!who) { if (pfd != stack_pfd) accel_host_free(acc, pfd); return ACCEL_ERR_OUT_OF_MEMORY; }
    while (pending > 0 && res == ACCEL_OK) {
        int n = 0, pr, left = accel__ms_left(deadline);
        for (r = 1; r < P; ++r)
            if (!bufs[r]) { pfd[n].fd = st->fd[r]; pfd[n].events = POLLIN; pfd[n].revents = 0; who[n++] = r; }
        pr = left ? poll(pfd, (nfds_t)n, left > 1000 ? 1000 : left) : 0;
        if (pr < 0 && errno == EINTR) continue;
        if (pr == 0 && left > 1000) {
            char list[120];
            size_t off = (size_t)accel__fmt(list, sizeof list, "rank(s)");
            for (i = 0; i < n && off < sizeof list - 16; ++i)
                off += (size_t)accel__fmt(list + off, sizeof list - off, " %d", who[i]);
            accel__fr_tick(acc, list);
            continue;
        }
        if (pr <= 0) {
            char list[200];
            size_t off = 0;
            list[0] = 0;
            for (i = 0; i < n && off < sizeof list - 16; ++i)
                off += (size_t)accel__fmt(list + off, sizeof list - off, "%s%d", i ? ", " : "", who[i]);
            res = ACCEL__FAIL(acc, pr < 0 ? ACCEL_ERR_IO : ACCEL_ERR_TIMEOUT,
                              "host store (%s): rank(s) %s did not reach the "
                              "collective within %.1f s (dead, stuck, or not making the same call)",
                              st->where, list, accel__timeout_s(acc));
            break;
        }
        for (i = 0; i < n && res == ACCEL_OK; ++i) {
            accel__st_frame f;
            char why[300];
            if (!pfd[i].revents) continue;
            r = who[i];
            res = accel__store_recv(acc, "host store", st->where, st->fd[r], r, &f, &bufs[r], deadline);
            if (res != ACCEL_OK) break;
            if (accel__store_check_op(st, &f, op, r, want[r], why, sizeof why) != 0)
                res = ACCEL__FAIL(acc, ACCEL_ERR_MISMATCH, "host store (%s): %s", st->where, why);
            else
                --pending;
        }
    }
    if (pfd != stack_pfd) accel_host_free(acc, pfd);
    accel_host_free(acc, who);
    return res;
}

/* One collective through the hub: this rank's contribution `in` (in_len bytes) and, on return, *out (acc's
   allocator) = the result the hub computed: allgather/allgatherv: everything in rank order; bcast: the root's bytes. */
static accel_result accel__store_op(accel *acc, accel__store *st, int op, const void *in, size_t in_len,
                                    const uint64_t *want, int root, unsigned char **out, size_t *out_len,
                                    double deadline) {
    accel_result res = ACCEL_OK;
    int P = st->size, r, rc;
    *out = NULL;
    *out_len = 0;
    st->seq++;
    if (st->rank != 0) {
        accel__st_frame f;
        unsigned char *p = NULL;
        rc = accel__store_send(st->fd[0], ACCEL__ST_OP, op, (uint32_t)st->rank, st->seq, in, in_len, deadline);
        if (rc != 0) {
            /* the hub may have failed this collective and exited before we sent: its verdict can still be waiting in
               our receive buffer — prefer it to "broken pipe" */
            int e = errno;
            if (rc == -1 &&
                accel__store_recv(acc, "host store", st->where, st->fd[0], 0, &f, &p, accel_now() + 0.5) == ACCEL_OK &&
                f.kind == ACCEL__ST_ERROR) {
                res = ACCEL__FAIL(acc, ACCEL_ERR_REMOTE, "%.700s (reported by rank 0, the store)", (const char *)p);
                accel_host_free(acc, p);
                return res;
            }
            accel_host_free(acc, p);
            errno = e;
            return ACCEL__FAIL(acc, rc == -2 ? ACCEL_ERR_TIMEOUT : ACCEL_ERR_REMOTE,
                               "host store (%s): cannot reach rank 0: %s", st->where, accel__store_rc_text(rc));
        }
        res = accel__store_recv(acc, "host store", st->where, st->fd[0], 0, &f, &p, deadline + ACCEL__ST_GRACE);
        if (res != ACCEL_OK) return res;
        if (f.kind == ACCEL__ST_ERROR) {
            res = ACCEL__FAIL(acc, ACCEL_ERR_REMOTE, "%.700s (reported by rank 0, the store)", (const char *)p);
            accel_host_free(acc, p);
            return res;
        }
        if (f.kind != ACCEL__ST_RESULT || f.seq != st->seq) {
            accel_host_free(acc, p);
            return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT,
                               "host store (%s): rank 0 answered collective #%u with frame kind %u "
                               "for #%u",
                               st->where, (unsigned)st->seq, (unsigned)f.kind, (unsigned)f.seq);
        }
        *out = p;
        *out_len = (size_t)f.len;
        return ACCEL_OK;
    } else {
        unsigned char **bufs = (unsigned char **)accel_host_alloc(acc, sizeof(unsigned char *) * (size_t)P);
        unsigned char *result = NULL;
        size_t total = 0;
        if (!bufs) return ACCEL_ERR_OUT_OF_MEMORY;
        memset(bufs, 0, sizeof(unsigned char *) * (size_t)P);
        res = accel__store_collect(acc, st, op, bufs, want, deadline);
        if (res == ACCEL_OK) {
            total = accel__store_combine(op, P, root, in, in_len, bufs, want, NULL);
            result = (unsigned char *)accel_host_alloc(acc, total + 1);
            if (!result) res = ACCEL_ERR_OUT_OF_MEMORY;
        }
        if (res == ACCEL_OK) {
            (void)accel__store_combine(op, P, root, in, in_len, bufs, want, result);
            for (r = 1; r < P && res == ACCEL_OK; ++r) {
                rc = accel__store_send(st->fd[r], ACCEL__ST_RESULT, op, 0, st->seq, result, total, deadline);
                if (rc != 0)
                    res = ACCEL__FAIL(acc, rc == -2 ? ACCEL_ERR_TIMEOUT : ACCEL_ERR_REMOTE,
                                      "host store (%s): cannot send "
                                      "the result to rank %d: %s",
                                      st->where, r, accel__store_rc_text(rc));
            }
        }
        if (res != ACCEL_OK) {
            const char *m = acc->last_error;
            if (!strncmp(m, "[rank ", 6) && strstr(m, "] ")) m = strstr(m, "] ") + 2;
            accel__store_broadcast_error(st, m);
            accel_host_free(acc, result);
            result = NULL;
        }
        for (r = 0; r < P; ++r) accel_host_free(acc, bufs[r]);
        accel_host_free(acc, bufs);
        *out = result;
        *out_len = total;
        return res;
    }
}

static accel_result accel__store_tp_allgather(void *ctx, accel *acc, const void *in, void *out, size_t bytes,
                                              double deadline) {
    accel__store *st = (accel__store *)ctx;
    uint64_t *want = (uint64_t *)accel_host_alloc(acc, sizeof(uint64_t) * (size_t)st->size);
    unsigned char *res = NULL;
    size_t n = 0;
    int r;
    accel_result rr;
    if (!want) return ACCEL_ERR_OUT_OF_MEMORY;
    for (r = 0; r < st->size; ++r) want[r] = bytes;
    rr = accel__store_op(acc, st, ACCEL__ST_OP_ALLGATHER, in, bytes, want, 0, &res, &n, deadline);
    accel_host_free(acc, want);
    if (rr == ACCEL_OK && n != bytes * (size_t)st->size)
        rr = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "host store (%s): an all-gather result of %zu bytes, expected %zu",
                         st->where, n, bytes * (size_t)st->size);
    if (rr == ACCEL_OK && n) memcpy(out, res, n);
    accel_host_free(acc, res);
    return rr;
}
static accel_result accel__store_tp_allgatherv(void *ctx, accel *acc, const void *in, void *out, const size_t *counts,
                                               double deadline) {
    accel__store *st = (accel__store *)ctx;
    uint64_t *want = (uint64_t *)accel_host_alloc(acc, sizeof(uint64_t) * (size_t)st->size);
    unsigned char *res = NULL;
    size_t n = 0, total = 0;
    int r;
    accel_result rr;
    if (!want) return ACCEL_ERR_OUT_OF_MEMORY;
    for (r = 0; r < st->size; ++r) { want[r] = counts[r]; total += counts[r]; }
    rr = accel__store_op(acc, st, ACCEL__ST_OP_ALLGATHERV, in, counts[st->rank], want, 0, &res, &n, deadline);
    accel_host_free(acc, want);
    if (rr == ACCEL_OK && n != total)
        rr = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "host store (%s): an all-gather-v result of %zu bytes, expected %zu",
                         st->where, n, total);
    if (rr == ACCEL_OK && n) memcpy(out, res, n);
    accel_host_free(acc, res);
    return rr;
}
static accel_result accel__store_tp_bcast(void *ctx, accel *acc, void *buf, size_t bytes, int root, double deadline) {
    accel__store *st = (accel__store *)ctx;
    uint64_t *want = (uint64_t *)accel_host_alloc(acc, sizeof(uint64_t) * (size_t)st->size);
    unsigned char *res = NULL;
    size_t n = 0;
    int r;
    accel_result rr;
    if (!want) return ACCEL_ERR_OUT_OF_MEMORY;
    for (r = 0; r < st->size; ++r) want[r] = r == root ? bytes : 0;
    rr = accel__store_op(acc, st, ACCEL__ST_OP_BCAST, buf, st->rank == root ? bytes : 0, want, root, &res, &n,
                         deadline);
    accel_host_free(acc, want);
    if (rr == ACCEL_OK && n != bytes)
        rr = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "host store (%s): a broadcast of %zu bytes, expected %zu", st->where, n,
                         bytes);
    if (rr == ACCEL_OK && n && st->rank != root) memcpy(buf, res, n);
    accel_host_free(acc, res);
    return rr;
}
static const accel__transport accel__store_transport = {"tcp", accel__store_tp_allgather, accel__store_tp_allgatherv,
                                                        accel__store_tp_bcast};

static void accel__store_close(accel *acc, accel__store *st) {
    int r;
    if (!st) return;
    if (st->fd)
        for (r = 0; r < st->size; ++r)
            if (st->fd[r] >= 0) close(st->fd[r]);
    accel_host_free(acc, st->fd);
    accel_host_free(acc, st);
}

/* What a rendezvous does with a peer that passed accel__admit_check: 0 keeps it (fd is now the callback's), 1
   refuses it (why goes back to the peer), 2 keeps it and ends the serving (everyone is in). */
typedef int (*accel__admit_fn)(void *ctx, int fd, const accel__admit_hello *h, const accel__admit_conn *c, char *why,
                               size_t cap);

/* One step of rank 0's side of a handshake, without I/O (the serve loop's path, and the fuzzers'): feeds the n bytes
   that arrived (what accel__admit_need asked for at most) and, once the HELLO is complete, checks it and asks fn.
   ACCEL__ADMIT_MORE (wait for bytes), _DROP (close silently), _REFUSE (why goes back, then close), _KEPT (fn owns
   the connection now) or _DONE (fn owns it and everyone is in). */
ACCEL__PRIVATE int accel__admit_step(const accel__admit *a, accel__admit_conn *c, const unsigned char *b, size_t n,
                                     accel__admit_fn fn, void *ctx, char *why, size_t cap) {
    accel__admit_hello h;
    long need;
    int kept, verdict;
    (void)accel__admit_feed(c, b, n);
    need = accel__admit_need(c);
    if (need > 0) return ACCEL__ADMIT_MORE;
    if (need < 0) { accel__fmt(why, cap, "not an accel peer"); return ACCEL__ADMIT_DROP; }
    verdict = accel__admit_check(a, c, &h, why, cap);
    if (verdict != ACCEL__ADMIT_OK) return verdict;
    kept = fn(ctx, c->fd, &h, c, why, cap);
    return kept == 2 ? ACCEL__ADMIT_DONE : kept == 0 ? ACCEL__ADMIT_KEPT : ACCEL__ADMIT_REFUSE;
}
static void accel__admit_drop(accel__admit_conn *conns, int *n, int i) {
    close(conns[i].fd);
    conns[i] = conns[--*n];
}
/* Rank 0's side: accepts on lfd and runs every handshake at once until fn returns 2 or the deadline passes.
   held[0..nheld) are the descriptors kept so far (-1: none): admitted peers send nothing until setup ends, so one
   that becomes readable has left (or broke the protocol) — it is closed and set to -1, and its rank may join again.
   refusal receives the last reason a peer was refused (for the caller's timeout message). ACCEL_OK; ACCEL_ERR_TIMEOUT
   with nothing recorded (the caller names who is missing); or an error. */
ACCEL__PRIVATE accel_result accel__admit_serve(accel *acc, const accel__admit *a, int lfd, const char *what,
                                               const char *where, double deadline, int *held, int nheld,
                                               accel__admit_fn fn, void *ctx, char *refusal, size_t rcap) {
    accel__admit_conn *conns = (accel__admit_conn *)accel_host_alloc(acc, sizeof *conns * ACCEL__ADMIT_PENDING);
    size_t npfd = (size_t)(1 + ACCEL__ADMIT_PENDING + nheld);
    struct pollfd *pfd = (struct pollfd *)accel_host_alloc(acc, sizeof *pfd * npfd);
    int *hix = (int *)accel_host_alloc(acc, sizeof(int) * (size_t)(nheld + 1));
    int nconn = 0, done = 0, i;
    unsigned long refused = 0;
    accel_result res = ACCEL_OK;
    if (refusal && rcap) refusal[0] = 0;
    if (!conns || !pfd || !hix) {
        accel_host_free(acc, conns); accel_host_free(acc, pfd); accel_host_free(acc, hix);
        return ACCEL_ERR_OUT_OF_MEMORY;
    }
    fcntl(lfd, F_SETFL, fcntl(lfd, F_GETFL, 0) | O_NONBLOCK);
    while (!done) {
        double now = accel_now(), wake = deadline;
        int n = 1, nh = 0, pr, left, accepted = 0;
        if (now >= deadline) { res = ACCEL_ERR_TIMEOUT; break; }
        pfd[0].fd = lfd; pfd[0].events = POLLIN; pfd[0].revents = 0;
        for (i = 0; i < nconn; ++i) {
            pfd[n].fd = conns[i].fd; pfd[n].events = POLLIN; pfd[n].revents = 0; ++n;
            if (conns[i].deadline < wake) wake = conns[i].deadline;
        }
        for (i = 0; i < nheld; ++i)
            if (held[i] >= 0) { pfd[n].fd = held[i]; pfd[n].events = POLLIN; pfd[n].revents = 0; ++n; hix[nh++] = i; }
        left = accel__ms_left(wake);
        pr = poll(pfd, (nfds_t)n, left);
        if (pr < 0) {
            if (errno == EINTR) continue;
            res = ACCEL__FAIL(acc, ACCEL_ERR_IO, "%s (%s): poll: %s", what, where, strerror(errno));
            break;
        }
        now = accel_now();
        for (i = 0; i < nh; ++i)
            if (pfd[1 + nconn + i].revents) {
                close(held[hix[i]]);
                held[hix[i]] = -1;
                accel_log(acc, ACCEL_LOG_WARN, "%s (%s): an admitted peer left before setup ended; its rank may join "
                          "again", what, where);
            }
        /* handshakes in progress, from the last: dropping i moves the last one (already seen) into i */
        for (i = nconn - 1; i >= 0; --i) {
            accel__admit_conn *c = &conns[i];
            char why[300];
            int verdict;
            long need;
            if (!pfd[1 + i].revents) {
                if (now >= c->deadline) accel__admit_drop(conns, &nconn, i); /* too slow to say who it is */
                continue;
            }
            need = accel__admit_need(c);
            if (need > 0) {
                unsigned char buf[sizeof c->in];
                ssize_t k = recv(c->fd, buf, (size_t)need, 0);
                if (k < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
                if (k <= 0) { accel__admit_drop(conns, &nconn, i); continue; }
                verdict = accel__admit_step(a, c, buf, (size_t)k, fn, ctx, why, sizeof why);
            } else {
                verdict = ACCEL__ADMIT_DROP;
            }
            if (verdict == ACCEL__ADMIT_MORE) continue;
            if (verdict == ACCEL__ADMIT_KEPT || verdict == ACCEL__ADMIT_DONE) {
                conns[i] = conns[--nconn]; /* the descriptor is the callback's now */
                if (verdict == ACCEL__ADMIT_DONE) done = 1;
                continue;
            }
            ++refused;
            if (verdict == ACCEL__ADMIT_REFUSE) {
                accel_log(acc, ACCEL_LOG_WARN, "%s (%s): refused a connection: %s", what, where, why);
                if (refusal && rcap) accel__fmt(refusal, rcap, "%s", why);
                (void)accel__store_send(c->fd, ACCEL__ST_ERROR, ACCEL__ST_ERR_REFUSED, 0, 0, why, strlen(why),
                                        now + 0.05);
            }
            accel__admit_drop(conns, &nconn, i);
        }
        /* new connections: each gets its challenge at once; when too many are pending, the oldest goes */
        while (!done && (pfd[0].revents & POLLIN) && accepted < 64) {
            unsigned char ch[ACCEL__ST_HDR + 4 + ACCEL__ADMIT_NONCE];
            int one = 1, cfd = accel__sock_accept(lfd);
            size_t chn;
            if (cfd < 0) break;
            ++accepted;
            if (nconn == ACCEL__ADMIT_PENDING) {
                int oldest = 0;
                for (i = 1; i < nconn; ++i)
                    if (conns[i].deadline < conns[oldest].deadline) oldest = i;
                accel__admit_drop(conns, &nconn, oldest);
            }
            fcntl(cfd, F_SETFL, fcntl(cfd, F_GETFL, 0) | O_NONBLOCK);
            setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            memset(&conns[nconn], 0, sizeof conns[nconn]);
            conns[nconn].fd = cfd;
            conns[nconn].deadline = now + ACCEL__ADMIT_GREET < deadline ? now + ACCEL__ADMIT_GREET : deadline;
            if (accel__random_bytes(conns[nconn].nonce, ACCEL__ADMIT_NONCE) != 0) {
                close(cfd);
                res = ACCEL__FAIL(acc, ACCEL_ERR_IO, "%s (%s): cannot read /dev/urandom for a challenge", what, where);
                done = 1;
                break;
            }
            chn = accel__admit_challenge(conns[nconn].nonce, ch);
            if (send(cfd, ch, chn, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)chn) { close(cfd); continue; }
            ++nconn;
        }
    }
    for (i = 0; i < nconn; ++i) close(conns[i].fd);
    if (refused)
        accel_log(acc, ACCEL_LOG_INFO, "%s (%s): %lu connection(s) refused during setup", what, where, refused);
    accel_host_free(acc, conns);
    accel_host_free(acc, pfd);
    accel_host_free(acc, hix);
    return res;
}

/* A peer's side: connects to ss (retrying until the deadline), answers rank 0's CHALLENGE and waits until
   reply_deadline for its answer. ACCEL_OK: *fd is admitted and *payload (acc's allocator) holds the WELCOME, whose
   body (after rank 0's proof, checked; at most max_body bytes) is *body, *blen. A connection that rank 0 closes without
   a word (it evicted us during a flood, or restarted) is tried again; a refusal ("not admitted: ...") is final.
   member: what the meeting's members are called in messages (NULL: ranks, the store, whose deadline is
   desc.collective_timeout_ms; else accel_host_rendezvous's, whose deadline is its caller's timeout). */
ACCEL__PRIVATE accel_result accel__admit_join(accel *acc, const accel__admit *a, const char *member,
                                              const struct sockaddr_storage *ss, socklen_t sl, const char *what,
                                              const char *where, uint32_t world,
                                              uint32_t rank, double deadline, double reply_deadline, size_t max_body,
                                              int *fd, unsigned char **payload, const unsigned char **body,
                                              size_t *blen) {
    /* say so once when rank 0 is not there yet after a while (the deadline may be Accelerate's 30 min) */
    double quiet_until = accel_now() + (deadline - accel_now() > 240.0 ? 30.0 : (deadline - accel_now()) / 8.0);
    const char *m = member ? member : "rank";
    *fd = -1;
    *payload = NULL;
    for (;;) {
        unsigned char hello[ACCEL__ST_HDR + ACCEL__ADMIT_HELLO_FIXED + ACCEL__ST_MAX_TOKEN];
        unsigned char srv[ACCEL__ADMIT_NONCE], cli[ACCEL__ADMIT_NONCE], *p = NULL;
        accel__st_frame f;
        char why[300];
        size_t n;
        int s = accel__sock_connect(ss, sl, quiet_until < deadline ? quiet_until : deadline), rc;
        accel_result r;
        if (s < 0 && quiet_until < deadline) {
            accel_log(acc, ACCEL_LOG_WARN, "%s (%s): %s %u is waiting for %s 0 to listen; it goes on trying for "
                      "%.0f s more (%s)", what, where, m, (unsigned)rank, m, deadline - accel_now(),
                      member ? "the rendezvous timeout" : "desc.collective_timeout_ms");
            quiet_until = deadline;
            s = accel__sock_connect(ss, sl, deadline);
        }
        if (s < 0)
            return ACCEL__FAIL(acc, ACCEL_ERR_TIMEOUT, "%s (%s): %s %u could not connect to %s 0 before the "
                               "deadline (%s 0 not started, or the address/port is wrong)", what, where, m,
                               (unsigned)rank, m, m);
        r = accel__store_recv_max(acc, what, where, s, 0, &f, &p, deadline, 4 + ACCEL__ADMIT_NONCE);
        if (r == ACCEL_OK && f.kind == ACCEL__ST_CHALLENGE) {
            if (accel__admit_parse_challenge(p, f.len, srv, why, sizeof why) != 0)
                r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%s (%s): rank 0 sent %s", what, where, why);
            else if (accel__random_bytes(cli, sizeof cli) != 0)
                r = ACCEL__FAIL(acc, ACCEL_ERR_IO, "%s (%s): cannot read /dev/urandom", what, where);
            accel_host_free(acc, p);
            p = NULL;
            if (r == ACCEL_OK) {
                n = accel__admit_put_hello(a, world, rank, srv, cli, hello);
                rc = accel__sock_io(s, hello, n, 1, deadline);
                r = rc == 0 ? accel__store_recv_max(acc, what, where, s, 0, &f, &p, reply_deadline,
                                                    4 + ACCEL__ADMIT_MAC + (uint64_t)max_body + 1024)
                            : ACCEL__FAIL(acc, rc == -2 ? ACCEL_ERR_TIMEOUT : ACCEL_ERR_REMOTE, "%s (%s): cannot greet "
                                          "rank 0: %s", what, where, accel__store_rc_text(rc));
            }
        }
        if (r == ACCEL_OK && f.kind == ACCEL__ST_ERROR) {
            r = ACCEL__FAIL(acc, f.op == ACCEL__ST_ERR_REFUSED ? ACCEL_ERR_ENVIRONMENT : ACCEL_ERR_REMOTE,
                            "%.700s (reported by %s 0 at %s)", (const char *)p, m, where);
        } else if (r == ACCEL_OK && f.kind != ACCEL__ST_WELCOME) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%s (%s): rank 0 answered with frame kind %u (not accel's rank 0?)",
                            what, where, (unsigned)f.kind);
        } else if (r == ACCEL_OK) {
            if (accel__admit_check_welcome(a, p, f.len, srv, cli, world, rank, body, blen, why, sizeof why) == 0) {
                *fd = s;
                *payload = p;
                return ACCEL_OK;
            }
            r = ACCEL__FAIL(acc, ACCEL_ERR_ENVIRONMENT, "%s (%s): %s", what, where, why);
        } else if (r == ACCEL_ERR_REMOTE && accel_now() < deadline) {
            accel_host_free(acc, p);
            close(s);
            accel__sleep_ms(50); /* closed without a word: try again */
            continue;
        }
        accel_host_free(acc, p);
        close(s);
        return r;
    }
}

/* Rank 0's admission rule for the store: the right world size, a rank of the job, a free slot. */
typedef struct accel__store_setup {
    accel__store *st;
    unsigned char *nonces; /* per rank: rank 0's challenge, then the peer's nonce (for the WELCOME's proof) */
} accel__store_setup;
static int accel__store_admit(void *ctx, int fd, const accel__admit_hello *h, const accel__admit_conn *c, char *why,
                              size_t cap) {
    accel__store_setup *su = (accel__store_setup *)ctx;
    accel__store *st = su->st;
    int r, joined = 0;
    if (h->world != (uint32_t)st->size && st->member) {
        accel__fmt(why, cap, "not admitted: it expects %u %ss, this meeting has %d", (unsigned)h->world, st->member,
                   st->size);
        return 1;
    }
    if (h->world != (uint32_t)st->size) {
        accel__fmt(why, cap, "not admitted: WORLD_SIZE=%u is not the job's (%d): the processes were started with "
                   "different world sizes (torchrun: the same --nnodes and --nproc-per-node everywhere; accel launch: "
                   "the same --nnodes on every node)", (unsigned)h->world, st->size);
        return 1;
    }
    if (h->rank == 0 || h->rank >= (uint32_t)st->size) {
        if (st->member) accel__fmt(why, cap, "not admitted: %s %u is not one of this meeting", st->member,
                                   (unsigned)h->rank);
        else accel__fmt(why, cap, "not admitted: RANK=%u is not a rank of this job", (unsigned)h->rank);
        return 1;
    }
    if (st->fd[h->rank] >= 0) {
        accel__fmt(why, cap, "not admitted: the job is full (%s %u has already joined)",
                   st->member ? st->member : "rank", (unsigned)h->rank);
        return 1;
    }
    st->fd[h->rank] = fd;
    memcpy(su->nonces + (size_t)h->rank * 2 * ACCEL__ADMIT_NONCE, c->nonce, ACCEL__ADMIT_NONCE);
    memcpy(su->nonces + ((size_t)h->rank * 2 + 1) * ACCEL__ADMIT_NONCE, h->nonce, ACCEL__ADMIT_NONCE);
    for (r = 1; r < st->size; ++r) joined += st->fd[r] >= 0;
    return joined == st->size - 1 ? 2 : 0;
}

/* Process `me` of P joins the store at addr:port: rank 0 listens there (on loopback when `single`: every member on
   this host) and admits the others (SECURITY: the proof is bound to `label` and the run id — run_id, or NULL for the
   environment's); they connect to it. `what` and `member` name it and its members in messages ("host store",
   NULL = ranks; accel_host_rendezvous's are the caller's). timeout_s bounds the whole setup. */
static accel_result accel__store_open_x(accel *acc, const char *label, const char *what, const char *member, int me,
                                        int P, int single, const char *run_id, const char *addr, int port,
                                        double timeout_s, accel__store **out) {
    accel__store *st;
    accel__admit adm;
    struct sockaddr_storage ss;
    socklen_t sl = 0;
    int r;
    double deadline = accel_now() + timeout_s;
    const char *noun = member ? member : "rank";
    accel_result res;
    *out = NULL;
    res = accel__admit_init(acc, &adm, label);
    if (res != ACCEL_OK) return res;
    if (run_id) {
        if (strlen(run_id) > ACCEL__ST_MAX_TOKEN)
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: the run id is longer than %u bytes", what,
                               ACCEL__ST_MAX_TOKEN);
        adm.run_len = strlen(run_id);
        memcpy(adm.run_id, run_id, adm.run_len + 1);
    }
    st = (accel__store *)accel_host_alloc(acc, sizeof *st);
    if (!st) return ACCEL_ERR_OUT_OF_MEMORY;
    memset(st, 0, sizeof *st);
    st->rank = me;
    st->size = P;
    st->member = member;
    st->fd = (int *)accel_host_alloc(acc, sizeof(int) * (size_t)P);
    if (!st->fd) { accel_host_free(acc, st); return ACCEL_ERR_OUT_OF_MEMORY; }
    for (r = 0; r < P; ++r) st->fd[r] = -1;
    /* every rank on this host (LOCAL_WORLD_SIZE == WORLD_SIZE): meet on loopback, whatever MASTER_ADDR names */
    if (accel__sock_resolve(single ? "127.0.0.1" : addr, port, &ss, &sl) != 0) {
        accel__store_close(acc, st);
        return ACCEL__FAIL(acc, ACCEL_ERR_ENVIRONMENT, "%s: cannot resolve \"%s\"", what, addr);
    }
    if (single) accel__fmt(st->where, sizeof st->where, "127.0.0.1:%d, single node", port);
    else accel__fmt(st->where, sizeof st->where, "%s:%d", addr, port);
    res = accel__admit_policy(acc, &adm, &ss, what, st->where);
    if (res != ACCEL_OK) {
        accel__store_close(acc, st);
        return res;
    }
    if (me != 0) {
        unsigned char *p = NULL;
        const unsigned char *body;
        size_t blen;
        res = accel__admit_join(acc, &adm, member, &ss, sl, what, st->where, (uint32_t)P, (uint32_t)me, deadline,
                                deadline + ACCEL__ST_GRACE, 0, &st->fd[0], &p, &body, &blen);
        accel_host_free(acc, p);
    } else {
        accel__store_setup su;
        char refusal[300];
        int lfd = accel__sock_listen(&ss, ACCEL__ADMIT_BACKLOG);
        if (lfd < 0) {
            int e = errno;
            accel__store_close(acc, st);
            return ACCEL__FAIL(acc, ACCEL_ERR_IO, "%s: %s 0 cannot listen on %s: %s", what, noun, st->where,
                               strerror(e));
        }
        if (!single && accel__sock_is_loopback(&ss))
            accel_log(acc, ACCEL_LOG_WARN, "%s: \"%s\"%s is a loopback address on %s 0 but the job spans several "
                      "nodes: %ss on other hosts cannot reach it", what, addr, member ? "" : " (MASTER_ADDR)", noun,
                      noun);
        su.st = st;
        su.nonces = (unsigned char *)accel_host_alloc(acc, (size_t)P * 2 * ACCEL__ADMIT_NONCE);
        res = su.nonces ? accel__admit_serve(acc, &adm, lfd, what, st->where, deadline, st->fd + 1, P - 1,
                                             accel__store_admit, &su, refusal, sizeof refusal)
                        : ACCEL_ERR_OUT_OF_MEMORY;
        close(lfd);
        if (res == ACCEL_ERR_TIMEOUT) {
            char list[200];
            size_t off = 0;
            list[0] = 0;
            for (r = 1; r < P && off < sizeof list - 16; ++r)
                if (st->fd[r] < 0) off += (size_t)accel__fmt(list + off, sizeof list - off, "%s%d", off ? ", " : "", r);
            res = ACCEL__FAIL(acc, ACCEL_ERR_TIMEOUT, "%s (%s): %s(s) %s did not connect within %.1f s%s%s", what,
                              st->where, noun, list, timeout_s,
                              refusal[0] ? "; the last connection refused: " : "", refusal);
        }
        for (r = 1; r < P && res == ACCEL_OK; ++r) {
            unsigned char pre[4 + ACCEL__ADMIT_MAC];
            const unsigned char *nn = su.nonces + (size_t)r * 2 * ACCEL__ADMIT_NONCE;
            size_t pn = accel__admit_put_welcome(&adm, (uint32_t)P, (uint32_t)r, nn, nn + ACCEL__ADMIT_NONCE, NULL, 0,
                                                 pre);
            int rc = pn ? accel__store_send(st->fd[r], ACCEL__ST_WELCOME, 0, 0, 0, pre, pn, deadline) : -1;
            if (rc != 0)
                res = ACCEL__FAIL(acc, ACCEL_ERR_REMOTE, "%s (%s): %s %d left during setup: %s", what, st->where, noun,
                                  r, pn ? accel__store_rc_text(rc) : "the MAC failed");
        }
        accel_host_free(acc, su.nonces);
        if (res != ACCEL_OK) {
            const char *m = acc->last_error;
            if (!strncmp(m, "[rank ", 6) && strstr(m, "] ")) m = strstr(m, "] ") + 2;
            accel__store_broadcast_error(st, m);
        }
    }
    if (res != ACCEL_OK) {
        accel__store_close(acc, st);
        return res;
    }
    *out = st;
    return ACCEL_OK;
}
/* The core's store: this process's rank among WORLD_SIZE, the deadline from desc.collective_timeout_ms. */
static accel_result accel__store_open(accel *acc, const char *addr, int port, accel__store **out) {
    return accel__store_open_x(acc, "store", "host store", NULL, acc->process_index, acc->num_processes,
                               acc->local_num_processes == acc->num_processes, NULL, addr, port, accel__timeout_s(acc),
                               out);
}

#endif /* !_WIN32 */

/* The rendezvous of processes without a group (declaration: its manual). */
ACCEL__DEF accel_result accel_host_rendezvous(accel *acc, const char *what, const char *member, const char *addr,
                                              int port, int rank, int size, const char *run_id, const void *in,
                                              void *out, size_t bytes, double timeout_s) {
    accel__store *st = NULL;
    accel_result r;
    if (!what || !*what) what = "rendezvous";
    if (!member || !*member) member = "member";
    if (!addr || !*addr || port < 1 || port > 65535 || size < 1 || size > ACCEL__RDZV_MAX || rank < 0 ||
        rank >= size || (bytes && (!in || !out)) || bytes > ACCEL__RDZV_MAX_BYTES || !(timeout_s > 0))
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: %s %d of %d at \"%s\":%d, %zu bytes, %.1f s: not a "
                           "valid meeting (1..%d members, a TCP port, at most %d bytes each, a timeout)", what, member,
                           rank, size, addr ? addr : "(null)", port, bytes, timeout_s, ACCEL__RDZV_MAX,
                           ACCEL__RDZV_MAX_BYTES);
    if (size == 1) {
        if (bytes) memmove(out, in, bytes);
        return ACCEL_OK;
    }
#if defined(_WIN32)
    (void)st; (void)r; (void)run_id;
    return ACCEL__FAIL(acc, ACCEL_ERR_UNSUPPORTED, "%s: needs POSIX sockets", what);
#else
    r = accel__store_open_x(acc, "rendezvous", what, member, rank, size, 0, run_id, addr, port, timeout_s, &st);
    if (r == ACCEL_OK) r = accel__store_tp_allgather(st, acc, in, out, bytes, accel_now() + timeout_s);
    accel__store_close(acc, st);
    return r;
#endif
}

/* The MPI communicator of the host group (a pointer to MPI_Comm), or NULL: accel_collectives.h dups it. */
ACCEL__PRIVATE void *accel__mpi_comm(accel *acc) {
#ifdef ACCEL_WITH_MPI
    if (acc && acc->impl && acc->impl->comm_valid) return &acc->impl->comm;
#else
    (void)acc;
#endif
    return NULL;
}

/* A collectives context (accel_collectives.h) can serve as the host group when the core has none (e.g. NCCL under
   torchrun without MPI). Returns 1 when installed. */
ACCEL__PRIVATE int accel__group_install(accel *acc, const accel__transport *tp, void *ctx) {
    if (!acc || !acc->impl || acc->impl->tp || acc->num_processes <= 1) return 0;
    acc->impl->tp = tp;
    acc->impl->tp_ctx = ctx;
    acc->impl->broken = ACCEL_OK;
    return 1;
}
ACCEL__PRIVATE void accel__group_uninstall(accel *acc, void *ctx) {
    if (acc && acc->impl && acc->impl->tp && acc->impl->tp_ctx == ctx) {
        acc->impl->tp = NULL;
        acc->impl->tp_ctx = NULL;
    }
}
ACCEL__DEF const char *accel_host_group_name(const accel *acc) {
    if (!acc || !acc->impl || !acc->impl->tp || acc->num_processes <= 1) return "none";
    return acc->impl->tp->name;
}

/* Every host collective starts with this header, all-gathered: what the call is, its size and root, this rank's
   status. So a rank whose arguments were bad fails every rank (instead of leaving them waiting), and ranks in
   different calls (or sizes) fail with a message listing each rank's call instead of exchanging garbage. */
enum { ACCEL__G_BARRIER = 1, ACCEL__G_ALLREDUCE_I64, ACCEL__G_ALLREDUCE_F64, ACCEL__G_BCAST, ACCEL__G_ALLGATHER,
       ACCEL__G_ALLGATHERV, ACCEL__G_AGREE, ACCEL__G_VALUES, ACCEL__G_KINDS };
static const char *accel__group_kind_name(int k) {
    static const char *n[ACCEL__G_KINDS] = {"?", "barrier", "all_reduce(i64)", "all_reduce(f64)", "broadcast",
                                            "all_gather", "all_gather_v", "agreement", "value check"};
    return (k > 0 && k < ACCEL__G_KINDS) ? n[k] : "(not an accel host collective)";
}
typedef struct accel__ghdr {
    int32_t magic, kind, status, root;
    int64_t size, aux;
} accel__ghdr;
#define ACCEL__G_MAGIC 0x41434731 /* "ACG1" */
#define ACCEL__G_MSG 240

/* Runs the header exchange. Returns ACCEL_OK when every rank is OK and made the same call; local when this rank
   failed; ACCEL_ERR_REMOTE naming a failed rank (with its message); ACCEL_ERR_MISMATCH; or a transport error. */
static accel_result accel__group_begin_x(accel *acc, int kind, accel_result local, int64_t size, int root,
                                         int64_t aux, const char *what, double deadline);
/* The recorded form: every host collective is one flight-recorder call of group 0, from its header exchange. */
static accel_result accel__group_begin(accel *acc, int kind, accel_result local, int64_t size, int root, int64_t aux,
                                       const char *what, double deadline) {
    uint64_t id = 0;
    accel_result r;
    int rec = acc->num_processes > 1 && acc->impl && acc->impl->tp;
    if (rec) {
        accel__fr_host_group(acc);
        id = accel__fr_post(0, acc->impl->fr_seq++, what, -1, -1, size, kind == ACCEL__G_BARRIER ? 0 : size, root);
    }
    r = accel__group_begin_x(acc, kind, local, size, root, aux, what, deadline);
    if (rec) accel__fr_done(acc, id, r);
    return r;
}
static accel_result accel__group_begin_x(accel *acc, int kind, accel_result local, int64_t size, int root,
                                         int64_t aux, const char *what, double deadline) {
    struct accel__impl *im = acc->impl;
    accel__ghdr mine, stack_all[16], *all;
    accel_result r = ACCEL_OK;
    int P = acc->num_processes, i, failed = -1, mismatch = 0;
    if (P <= 1) return local;
    if (!im || !im->tp) {
        if (local != ACCEL_OK) return local;
        return ACCEL__FAIL(acc, ACCEL_ERR_UNSUPPORTED,
                           "%s across %d processes needs a host process group: launched by %s without MPI (build with "
                           "ACCEL_WITH_MPI and launch with mpirun/srun, or create an accel_coll over NCCL first)",
                           what, P, accel_launcher_name(acc->launcher));
    }
    if (im->broken) {
        if (local != ACCEL_OK) return local;
        return ACCEL__FAIL(acc, ACCEL_ERR_STATE, "%s refused: the host process group failed earlier (%s) and cannot be "
                           "used any more; shut down", what, im->broken_why);
    }
    memset(&mine, 0, sizeof mine);
    mine.magic = ACCEL__G_MAGIC;
    mine.kind = kind;
    mine.status = (int32_t)local;
    mine.root = root;
    mine.size = size;
    mine.aux = aux;
    all = P <= 16 ? stack_all : (accel__ghdr *)accel_host_alloc(acc, sizeof(accel__ghdr) * (size_t)P);
    if (!all) return ACCEL_ERR_OUT_OF_MEMORY; /* a few KiB: the peers then reach their deadline */
    r = im->tp->allgather(im->tp_ctx, acc, &mine, all, sizeof mine, deadline);
    if (r != ACCEL_OK) {
        accel__group_failed(acc, r);
        if (all != stack_all) accel_host_free(acc, all);
        return r;
    }
    for (i = 0; i < P; ++i) {
        if (all[i].magic != ACCEL__G_MAGIC) { mismatch = 1; continue; }
        if (all[i].status != ACCEL_OK && failed < 0) failed = i;
        if (all[i].kind != kind || all[i].size != size || all[i].root != root || all[i].aux != aux) mismatch = 1;
    }
    if (failed >= 0) {
        /* a second exchange carries the failed ranks' messages (every rank knows one is needed) */
        char *msgs = (char *)accel_host_alloc(acc, (size_t)ACCEL__G_MSG * (size_t)(P + 1));
        if (msgs) {
            char *own = msgs + (size_t)ACCEL__G_MSG * (size_t)P;
            memset(own, 0, ACCEL__G_MSG);
            if (local != ACCEL_OK) {
                const char *m = acc->last_error;
                if (!strncmp(m, "[rank ", 6) && strstr(m, "] ")) m = strstr(m, "] ") + 2;
                accel__fmt(own, ACCEL__G_MSG, "%s", m);
            }
            r = im->tp->allgather(im->tp_ctx, acc, own, msgs, ACCEL__G_MSG, deadline);
            if (r != ACCEL_OK) accel__group_failed(acc, r);
        }
        if (local != ACCEL_OK) r = local;
        else if (r == ACCEL_OK || !msgs)
            r = ACCEL__FAIL(acc, ACCEL_ERR_REMOTE, "rank %d failed in %s: %.600s", failed, what,
                            msgs ? msgs + (size_t)ACCEL__G_MSG * (size_t)failed
                                 : accel_result_string((accel_result)all[failed].status));
        accel_host_free(acc, msgs);
        if (all != stack_all) accel_host_free(acc, all);
        return r;
    }
    if (mismatch) {
        char msg[ACCEL_ERROR_CAPACITY];
        size_t off = (size_t)accel__fmt(msg, sizeof msg,
                                        "processes made different host collective calls (this rank: %s):", what);
        for (i = 0; i < P && off < sizeof msg - 64; ++i) {
            if (all[i].magic != ACCEL__G_MAGIC)
                off += (size_t)accel__fmt(msg + off, sizeof msg - off, " rank %d: garbage;", i);
            else
                off += (size_t)accel__fmt(msg + off, sizeof msg - off, " rank %d: %s(size=%lld, root=%d, tag=%llx);", i,
                                          accel__group_kind_name(all[i].kind), (long long)all[i].size, (int)all[i].root,
                                          (unsigned long long)all[i].aux & 0xffffffull);
        }
        if (all != stack_all) accel_host_free(acc, all);
        /* every rank saw the same headers and stops here, so the group stays usable */
        return ACCEL__FAIL(acc, ACCEL_ERR_MISMATCH, "%s", msg);
    }
    if (all != stack_all) accel_host_free(acc, all);
    return ACCEL_OK;
}

static uint64_t accel__tag(const char *what) { return accel__fnv1a(ACCEL__FNV_INIT, what, strlen(what)) >> 1; }

/* The collective form of a local result: every rank returns an error when any rank failed (local: its own error;
   elsewhere ACCEL_ERR_REMOTE with the failed rank's message). `what` also tags the call: ranks in different
   agreements fail with ACCEL_ERR_MISMATCH. Without a host group (several processes, no MPI, no installed
   collectives context) it is local: accel_init already warned that agreement checks are skipped. */
ACCEL__PRIVATE accel_result accel__agree(accel *acc, accel_result local, const char *what) {
    if (!acc || !acc->impl || !acc->impl->tp) return local; /* no host group (yet): nothing to agree with */
    return accel__group_begin(acc, ACCEL__G_AGREE, local, 0, 0, (int64_t)accel__tag(what), what, accel__deadline(acc));
}

/* Every rank must hold the same n values (a configuration): a difference fails on every rank with
   "<what>: processes disagree on <names[f]>: rank 0=.., rank 1=..". local as in accel__agree. */
ACCEL__PRIVATE accel_result accel__agree_values(accel *acc, accel_result local, const char *what,
                                                const char *const *names, const int64_t *values, int n) {
    int P, i, f;
    int64_t *all;
    double deadline;
    accel_result r;
    if (!acc || !acc->impl || !acc->impl->tp) return local; /* no host group (yet): a local check only */
    P = acc->num_processes;
    if (P <= 1) return local;
    deadline = accel__deadline(acc);
    all = (int64_t *)accel_host_alloc(acc, sizeof(int64_t) * (size_t)n * (size_t)P + 1);
    if (!all && local == ACCEL_OK) local = ACCEL_ERR_OUT_OF_MEMORY;
    r = accel__group_begin(acc, ACCEL__G_VALUES, local, n, 0, (int64_t)accel__tag(what), what, deadline);
    if (r == ACCEL_OK && n > 0) {
        r = acc->impl->tp->allgather(acc->impl->tp_ctx, acc, values, all, sizeof(int64_t) * (size_t)n, deadline);
        if (r != ACCEL_OK) accel__group_failed(acc, r);
    }
    for (f = 0; r == ACCEL_OK && f < n; ++f) {
        char msg[ACCEL_ERROR_CAPACITY];
        size_t off;
        int differ = 0;
        for (i = 1; i < P; ++i)
            if (all[(size_t)i * (size_t)n + (size_t)f] != all[f]) differ = 1;
        if (!differ) continue;
        off = (size_t)accel__fmt(msg, sizeof msg, "%s: processes disagree on %s:", what, names[f]);
        for (i = 0; i < P && off < sizeof msg - 40; ++i)
            off += (size_t)accel__fmt(msg + off, sizeof msg - off, " rank %d=%lld%s", i,
                                      (long long)all[(size_t)i * (size_t)n + (size_t)f], i + 1 < P ? "," : "");
        r = ACCEL__FAIL(acc, ACCEL_ERR_MISMATCH, "%s", msg);
    }
    accel_host_free(acc, all);
    return r;
}

/* A host collective needs an initialized Accelerator: a zeroed one would "succeed" as a single process. */
static accel_result accel__need_group(accel *acc, const char *what) {
    accel_result r = accel__need_acc(acc, what);
    if (r != ACCEL_OK || acc->impl) return r;
    return ACCEL__FAIL(acc, ACCEL_ERR_STATE, "%s: the Accelerator is not initialized (accel_init) or was shut down",
                       what);
}

ACCEL__DEF accel_result (accel_wait_for_everyone)(accel *acc) {
    accel_result r = accel__need_group(acc, "wait_for_everyone");
    if (r != ACCEL_OK) return r;
    return accel__group_begin(acc, ACCEL__G_BARRIER, ACCEL_OK, 0, 0, 0, "barrier", accel__deadline(acc));
}

/* is_f64 picks the element type: the two public entry points differ only in it. Reduced here in rank order after an
   all-gather, so every rank gets bit-identical results. */
static accel_result accel__host_allreduce(accel *acc, void *values, int count, accel_host_op op, int is_f64) {
    accel_result local = ACCEL_OK, r;
    int P, i, k;
    unsigned char *all = NULL;
    double deadline;
    if ((r = accel__need_group(acc, "host all-reduce")) != ACCEL_OK) return r;
    P = acc->num_processes;
    if (count < 0 || (count > 0 && !values) || count > (1 << 20))
        local = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "host all-reduce: bad buffer (count %d)", count);
    else if ((int)op < (int)ACCEL_HOST_SUM || (int)op > (int)ACCEL_HOST_MIN)
        local = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "host all-reduce: op %d is not an accel_host_op", (int)op);
    if (P <= 1) return local;
    deadline = accel__deadline(acc);
    if (local == ACCEL_OK && count > 0) {
        all = (unsigned char *)accel_host_alloc(acc, (size_t)8 * (size_t)count * (size_t)P);
        if (!all) local = ACCEL_ERR_OUT_OF_MEMORY;
    }
    r = accel__group_begin(acc, is_f64 ? ACCEL__G_ALLREDUCE_F64 : ACCEL__G_ALLREDUCE_I64, local, count, 0, (int64_t)op,
                           is_f64 ? "all_reduce(f64)" : "all_reduce(i64)", deadline);
    if (r == ACCEL_OK && count > 0) {
        r = acc->impl->tp->allgather(acc->impl->tp_ctx, acc, values, all, (size_t)8 * (size_t)count, deadline);
        if (r != ACCEL_OK) accel__group_failed(acc, r);
    }
    if (r == ACCEL_OK) {
        for (k = 0; k < count; ++k) {
            if (is_f64) {
                double v, x;
                memcpy(&v, all + (size_t)8 * (size_t)k, 8);
                for (i = 1; i < P; ++i) {
                    memcpy(&x, all + (size_t)8 * ((size_t)i * (size_t)count + (size_t)k), 8);
                    if (op == ACCEL_HOST_SUM) v += x;
                    else if (v != v) continue; /* a NaN max/min stays NaN */
                    else if (x != x) v = x;
                    else if (op == ACCEL_HOST_MAX) v = x > v ? x : v;
                    else v = x < v ? x : v;
                }
                ((double *)values)[k] = v;
            } else {
                int64_t v, x;
                memcpy(&v, all + (size_t)8 * (size_t)k, 8);
                for (i = 1; i < P; ++i) {
                    memcpy(&x, all + (size_t)8 * ((size_t)i * (size_t)count + (size_t)k), 8);
                    if (op == ACCEL_HOST_SUM) v = (int64_t)((uint64_t)v + (uint64_t)x); /* wraps like MPI, no UB */
                    else if (op == ACCEL_HOST_MAX) v = x > v ? x : v;
                    else v = x < v ? x : v;
                }
                ((int64_t *)values)[k] = v;
            }
        }
    }
    accel_host_free(acc, all);
    return r;
}

ACCEL__DEF accel_result (accel_host_allreduce_i64)(accel *acc, int64_t *values, int count, accel_host_op op) {
    return accel__host_allreduce(acc, values, count, op, 0);
}
ACCEL__DEF accel_result (accel_host_allreduce_f64)(accel *acc, double *values, int count, accel_host_op op) {
    return accel__host_allreduce(acc, values, count, op, 1);
}

ACCEL__DEF accel_result (accel_host_broadcast)(accel *acc, void *data, size_t bytes, int root) {
    accel_result local = ACCEL_OK, r;
    double deadline;
    if ((r = accel__need_group(acc, "host broadcast")) != ACCEL_OK) return r;
    if (root < 0 || root >= acc->num_processes)
        local = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "broadcast root %d is not a rank of %d", root,
                            acc->num_processes);
    else if (bytes > 0 && !data) local = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "broadcast: data is NULL");
    else if (bytes > (size_t)INT_MAX)
        local = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "broadcast: %zu bytes is too large for a host broadcast",
                            bytes);
    if (acc->num_processes <= 1) return local;
    deadline = accel__deadline(acc);
    r = accel__group_begin(acc, ACCEL__G_BCAST, local, local == ACCEL_OK ? (int64_t)bytes : -1,
                           local == ACCEL_OK ? root : -1, 0, "broadcast", deadline);
    if (r == ACCEL_OK && bytes > 0) {
        r = acc->impl->tp->bcast(acc->impl->tp_ctx, acc, data, bytes, root, deadline);
        if (r != ACCEL_OK) accel__group_failed(acc, r);
    }
    return r;
}

ACCEL__DEF accel_result (accel_host_allgather)(accel *acc, const void *in, void *out, size_t bytes) {
    accel_result local = ACCEL_OK, r;
    double deadline;
    if ((r = accel__need_group(acc, "host all-gather")) != ACCEL_OK) return r;
    if (bytes > 0 && (!in || !out)) local = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "allgather: NULL buffer");
    else if (bytes > (size_t)INT_MAX / (size_t)acc->num_processes)
        local = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "allgather: %zu bytes per rank is too large", bytes);
    if (acc->num_processes <= 1) {
        if (local == ACCEL_OK && bytes) memmove(out, in, bytes);
        return local;
    }
    deadline = accel__deadline(acc);
    r = accel__group_begin(acc, ACCEL__G_ALLGATHER, local, local == ACCEL_OK ? (int64_t)bytes : -1, 0, 0, "all_gather",
                           deadline);
    if (r == ACCEL_OK && bytes > 0) {
        r = acc->impl->tp->allgather(acc->impl->tp_ctx, acc, in, out, bytes, deadline);
        if (r != ACCEL_OK) accel__group_failed(acc, r);
    }
    return r;
}

/* Variable-size all-gather for modules (objects, messages): every rank contributes in_bytes; *out (acc's
   allocator, free with accel_host_free) receives the concatenation in rank order and counts[P] each rank's size. */
ACCEL__PRIVATE accel_result accel__host_allgatherv(accel *acc, const void *in, size_t in_bytes, void **out,
                                                   size_t *counts) {
    accel_result local = ACCEL_OK, r;
    int P, i;
    int64_t *sizes = NULL, mine = (int64_t)in_bytes;
    size_t total = 0;
    double deadline;
    *out = NULL;
    P = acc->num_processes;
    if (in_bytes > 0 && !in) local = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "all_gather_v: NULL buffer");
    if (P <= 1) {
        if (local != ACCEL_OK) return local;
        *out = accel_host_alloc(acc, in_bytes);
        if (!*out) return ACCEL_ERR_OUT_OF_MEMORY;
        if (in_bytes) memcpy(*out, in, in_bytes);
        counts[0] = in_bytes;
        return ACCEL_OK;
    }
    deadline = accel__deadline(acc);
    sizes = (int64_t *)accel_host_alloc(acc, sizeof(int64_t) * (size_t)P);
    if (!sizes && local == ACCEL_OK) local = ACCEL_ERR_OUT_OF_MEMORY;
    r = accel__group_begin(acc, ACCEL__G_ALLGATHERV, local, 0, 0, 0, "all_gather_v", deadline);
    if (r == ACCEL_OK) {
        r = acc->impl->tp->allgather(acc->impl->tp_ctx, acc, &mine, sizes, sizeof mine, deadline);
        if (r != ACCEL_OK) accel__group_failed(acc, r);
    }
    for (i = 0; r == ACCEL_OK && i < P; ++i) {
        if (sizes[i] < 0 || (uint64_t)sizes[i] > (uint64_t)INT_MAX - total)
            r = accel__group_failed(acc,
                                    ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                                                "all_gather_v: %lld bytes in total is too large", (long long)sizes[i]));
        else {
            counts[i] = (size_t)sizes[i];
            total += counts[i];
        }
    }
    /* every rank must take part in the data exchange even if its allocation failed (then it fails afterwards) */
    if (r == ACCEL_OK) {
        void *buf = accel_host_alloc(acc, total);
        r = accel__agree(acc, buf ? ACCEL_OK : ACCEL_ERR_OUT_OF_MEMORY, "all_gather_v (buffers)");
        if (r == ACCEL_OK) {
            r = acc->impl->tp->allgatherv(acc->impl->tp_ctx, acc, in, buf, counts, deadline);
            if (r != ACCEL_OK) accel__group_failed(acc, r);
        }
        if (r == ACCEL_OK) *out = buf;
        else accel_host_free(acc, buf);
    }
    accel_host_free(acc, sizes);
    return r;
}

/* ---- objects */
ACCEL__DEF void accel_blobs_deinit(accel_blobs *b) {
    if (!b) return;
    accel_host_free(b->acc, b->offsets);
    accel_host_free(b->acc, b->data);
    b->offsets = NULL;
    b->data = NULL;
    b->count = 0;
}

/* Takes ownership of offsets/data (acc's allocator) as b's new content. */
static void accel__blobs_adopt(accel *acc, accel_blobs *b, int count, size_t *offsets, unsigned char *data) {
    accel_blobs_deinit(b);
    b->acc = acc;
    b->count = count;
    b->offsets = offsets;
    b->data = data;
}

ACCEL__DEF accel_result accel_blobs_set(accel *acc, accel_blobs *b, int count, const void *const *items,
                                        const size_t *sizes) {
    size_t total = 0, *off;
    unsigned char *data;
    int i;
    if (!b || count < 0 || (count > 0 && (!items || !sizes)))
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "blobs_set: NULL argument or negative count");
    for (i = 0; i < count; ++i) {
        if (sizes[i] && !items[i]) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "blobs_set: item %d is NULL", i);
        if (sizes[i] > (size_t)INT_MAX - total)
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "blobs_set: more than INT_MAX bytes in total");
        total += sizes[i];
    }
    off = (size_t *)accel_host_alloc(acc, sizeof(size_t) * ((size_t)count + 1));
    data = (unsigned char *)accel_host_alloc(acc, total);
    if (!off || !data) {
        accel_host_free(acc, off);
        accel_host_free(acc, data);
        return ACCEL_ERR_OUT_OF_MEMORY;
    }
    off[0] = 0;
    for (i = 0; i < count; ++i) {
        if (sizes[i]) memcpy(data + off[i], items[i], sizes[i]);
        off[i + 1] = off[i] + sizes[i];
    }
    accel__blobs_adopt(acc, b, count, off, data);
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_gather_object(accel *acc, const void *data, size_t bytes, accel_blobs *out) {
    accel_result r = accel__need_group(acc, "gather_object"), local = ACCEL_OK;
    size_t *counts = NULL, *off = NULL;
    void *all = NULL;
    int P, i;
    if (r != ACCEL_OK) return r;
    P = acc->num_processes;
    if (!out || (bytes && !data)) local = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "gather_object: NULL argument");
    else if (bytes > (size_t)INT_MAX)
        local = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "gather_object: %zu bytes", bytes);
    if (local == ACCEL_OK) {
        counts = (size_t *)accel_host_alloc(acc, sizeof(size_t) * (size_t)P);
        off = (size_t *)accel_host_alloc(acc, sizeof(size_t) * ((size_t)P + 1));
        if (!counts || !off) local = ACCEL_ERR_OUT_OF_MEMORY;
    }
    r = accel__agree(acc, local, "gather_object");
    if (r == ACCEL_OK) r = accel__host_allgatherv(acc, data, bytes, &all, counts);
    if (r == ACCEL_OK) {
        off[0] = 0;
        for (i = 0; i < P; ++i) off[i + 1] = off[i] + counts[i];
        accel__blobs_adopt(acc, out, P, off, (unsigned char *)all);
        off = NULL;
    }
    accel_host_free(acc, counts);
    accel_host_free(acc, off);
    return r;
}

ACCEL__DEF accel_result accel_broadcast_object_list(accel *acc, accel_blobs *list, int from) {
    accel_result r = accel__need_group(acc, "broadcast_object_list"), local = ACCEL_OK;
    int64_t head[2] = {0, 0}, *sizes = NULL; /* count, total bytes */
    size_t *off = NULL;
    unsigned char *data = NULL;
    int i, me;
    if (r != ACCEL_OK) return r;
    me = acc->process_index;
    if (!list) local = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "broadcast_object_list: list is NULL");
    else if (from < 0 || from >= acc->num_processes)
        local = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                            "broadcast_object_list: from_process %d is not a rank of %d", from, acc->num_processes);
    else if (me == from && (list->count < 0 || (list->count > 0 && !list->offsets)))
        local = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "broadcast_object_list: the list on rank %d is invalid "
                            "(negative count or no offsets)", from);
    else if (me == from && list->count > 0 && list->offsets[list->count] > (size_t)INT_MAX)
        local = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "broadcast_object_list: more than INT_MAX bytes");
    r = accel__agree(acc, local, "broadcast_object_list");
    if (r != ACCEL_OK || acc->num_processes <= 1) return r;
    if (me == from) {
        head[0] = list->count;
        head[1] = list->count ? (int64_t)list->offsets[list->count] : 0;
    }
    r = accel_host_broadcast(acc, head, sizeof head, from);
    if (r != ACCEL_OK) return r;
    sizes = (int64_t *)accel_host_alloc(acc, sizeof(int64_t) * ((size_t)head[0] + 1));
    if (me != from) {
        off = (size_t *)accel_host_alloc(acc, sizeof(size_t) * ((size_t)head[0] + 1));
        data = (unsigned char *)accel_host_alloc(acc, (size_t)head[1]);
    }
    r = accel__agree(acc, sizes && (me == from || (off && data)) ? ACCEL_OK : ACCEL_ERR_OUT_OF_MEMORY,
                     "broadcast_object_list (buffers)");
    if (r == ACCEL_OK && me == from)
        for (i = 0; i < (int)head[0]; ++i) sizes[i] = (int64_t)(list->offsets[i + 1] - list->offsets[i]);
    if (r == ACCEL_OK && head[0] > 0) r = accel_host_broadcast(acc, sizes, sizeof(int64_t) * (size_t)head[0], from);
    if (r == ACCEL_OK && head[1] > 0)
        r = accel_host_broadcast(acc, me == from ? list->data : data, (size_t)head[1], from);
    if (r == ACCEL_OK && me != from) {
        off[0] = 0;
        for (i = 0; i < (int)head[0]; ++i) off[i + 1] = off[i] + (size_t)sizes[i];
        accel__blobs_adopt(acc, list, (int)head[0], off, data);
        off = NULL;
        data = NULL;
    }
    accel_host_free(acc, sizes);
    accel_host_free(acc, off);
    accel_host_free(acc, data);
    return r;
}

/* --------------------------------------------------------------------------------------------- 5. joining the store */
#if !defined(_WIN32)
/* The first host of a Slurm host list ("gpu[03-05,9],cpu1" → "gpu03"). 0 ok, -1 malformed or too long. */
static int accel__slurm_first_host(const char *list, char *out, size_t cap) {
    size_t n = strcspn(list, ",["), k, t;
    if (n == 0 || n >= cap) return -1;
    memcpy(out, list, n);
    out[n] = 0;
    if (list[n] != '[') return 0;
    k = strcspn(list + n + 1, ",-]"); /* the first number of the range, as written (zero padding kept) */
    if (k == 0 || !strchr(list + n + 1, ']')) return -1;
    for (t = 0; t < k; ++t)
        if (!isdigit((unsigned char)list[n + 1 + t])) return -1;
    t = strcspn(strchr(list + n + 1, ']') + 1, ","); /* a suffix after the brackets ("a[1-2]-ib") */
    if (n + k + t >= cap) return -1;
    memcpy(out + n, list + n + 1, k);
    memcpy(out + n + k, strchr(list + n + 1, ']') + 1, t);
    out[n + k + t] = 0;
    return 0;
}

/* torchrun / accel launch without MPI, and srun without MPI (a build without it, or desc.no_mpi): the TCP store
   becomes the host group. Rank 0 listens on MASTER_PORT (+1 when torchrun's agent already serves its own store
   there: TORCHELASTIC_USE_AGENT_STORE), ACCEL_STORE_PORT overrides. Under srun, unless MASTER_ADDR/MASTER_PORT are
   set: at the step's first node (SLURM_STEP_NODELIST, where block and cyclic distributions put task 0) on a port
   derived from the job and step ids (15000 + (16 job + step) mod 20000, as Lightning derives one from the job id),
   so every task finds it without being told. */
static accel_result accel__store_start(accel *acc) {
    const char *addr = getenv("MASTER_ADDR"), *s;
    char first[256];
    long v = 0;
    int port = 29500;
    accel__store *st = NULL;
    accel_result r;
    if ((!addr || !*addr) && acc->launcher == ACCEL_LAUNCHER_SLURM) {
        const char *nl = getenv("SLURM_STEP_NODELIST");
        if (!nl || !*nl) nl = getenv("SLURM_JOB_NODELIST");
        if (!nl || accel__slurm_first_host(nl, first, sizeof first) != 0)
            return ACCEL__FAIL(acc, ACCEL_ERR_ENVIRONMENT, "srun started %d tasks without MPI: the host store needs "
                               "the step's first node, but SLURM_STEP_NODELIST=\"%.200s\" does not name one (set "
                               "MASTER_ADDR)", acc->num_processes, nl ? nl : "");
        addr = first;
    }
    if (acc->launcher == ACCEL_LAUNCHER_SLURM && (!getenv("MASTER_PORT") || !*getenv("MASTER_PORT"))) {
        long job = 0, step = 0;
        (void)accel__parse_nonneg(getenv("SLURM_JOB_ID"), &job);
        (void)accel__parse_nonneg(getenv("SLURM_STEP_ID"), &step);
        port = 15000 + (int)((16 * (job % 100000) + step % 16) % 20000);
    }
    if (!addr || !*addr)
        return ACCEL__FAIL(acc, ACCEL_ERR_ENVIRONMENT, "%d processes launched by %s without MPI need MASTER_ADDR (and "
                           "MASTER_PORT) for the host store", acc->num_processes, accel_launcher_name(acc->launcher));
    s = getenv("MASTER_PORT");
    if (s && *s) {
        if (accel__parse_nonneg(s, &v) != 0 || v < 1 || v > 65535)
            return ACCEL__FAIL(acc, ACCEL_ERR_ENVIRONMENT, "MASTER_PORT=\"%s\" is not a TCP port", s);
        port = (int)v;
    }
    s = getenv("TORCHELASTIC_USE_AGENT_STORE");
    if (s && accel_parse_bool(s) == 1) port = port < 65535 ? port + 1 : port - 1;
    s = getenv("ACCEL_STORE_PORT");
    if (s && *s) {
        if (accel__parse_nonneg(s, &v) != 0 || v < 1 || v > 65535)
            return ACCEL__FAIL(acc, ACCEL_ERR_ENVIRONMENT, "ACCEL_STORE_PORT=\"%s\" is not a TCP port", s);
        port = (int)v;
    }
    r = accel__store_open(acc, addr, port, &st);
    if (r != ACCEL_OK) return r;
    acc->impl->store = st;
    acc->impl->tp = &accel__store_transport;
    acc->impl->tp_ctx = st;
    return ACCEL_OK;
}
#endif

/* ---------------------------------------------------------------------------------------------------- 6. free ports */
ACCEL__DEF int accel_free_port(void) {
#if !defined(_WIN32)
    struct sockaddr_in a;
    socklen_t l = sizeof a;
    int fd = accel__sock_new(AF_INET), port = 0;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &l) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0) close(fd);
    return port;
#else
    return 0;
#endif
}

#endif /* ACCEL_IMPLEMENTATION */

/* accel is released under the MIT licence. Copyright (c) 2026 the accel authors. */
