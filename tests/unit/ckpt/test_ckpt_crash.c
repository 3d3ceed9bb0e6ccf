/* Crash test of save_state: children resume from the newest complete checkpoint and then train and save in a loop
   (automatic naming, total_limit 3) until the parent SIGKILLs them at a random moment. "Training" is a deterministic
   step of the whole state (tensors, a sampler, a custom object, a per-rank sharded object, the Accelerator's RNG and
   counters), so the state after k steps is known: the parent runs the same steps synchronously as the reference.
   After every kill the parent checks that
     - accel_ckpt_latest() returns a checkpoint at least as new as the last one a child reported published,
     - that checkpoint loads, holds exactly the reference state of its iteration, and the run continued from it for
       three more steps is bit for bit the uninterrupted synchronous run,
     - every visible checkpoint_<N> directory passes the full verification (no partial checkpoint is visible).
   Modes: sync (save_state writes before it returns), async (the writer thread writes while the child trains on: a
   kill lands during background writes), async2 (two processes over the TCP store, each with its own shard; the
   parent loads their checkpoint on one process).
   usage: test_ckpt_crash TRIALS MAX_SECONDS [sync|async|async2]   (fails if fewer than 50 trials fit) */
#include "accel_ckpt.h"
#include "accel_test.h"
#include "accel_test_fs.h"
#include "ckpt_workers.h"
#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NW (256 * 1024) /* 1 MiB of fp32 model weights */
#define NM 4096
#define NSH (2 << 20)   /* the most bytes of a rank's shard: rank 1 writes more than the owner (rank 0) */
#define SH(q) ((q) == 0 ? 3000 : NSH)
#define MAXR 2

typedef struct { int64_t it, pos; } sampler_state;
typedef struct { char text[48]; } custom_obj;
typedef struct {
    float w[NW], m[NM];
    sampler_state s;
    custom_obj c;
    unsigned char shard[MAXR][NSH];
} train_state;
static train_state g; /* what the checkpoint registers */
static int g_rank;

static accel_result s_save(void *u, void *buf, size_t cap, size_t *n) {
    *n = sizeof(sampler_state);
    if (buf && cap >= *n) memcpy(buf, u, *n);
    return ACCEL_OK;
}
static accel_result s_load(void *u, const void *buf, size_t n) {
    if (n != sizeof(sampler_state)) return ACCEL_ERR_FORMAT;
    memcpy(u, buf, n);
    return ACCEL_OK;
}
static accel_result c_save(void *u, void *buf, size_t cap, size_t *n) {
    *n = strlen(((custom_obj *)u)->text);
    if (buf && cap >= *n) memcpy(buf, ((custom_obj *)u)->text, *n);
    return ACCEL_OK;
}
static accel_result c_load(void *u, const void *buf, size_t n) {
    if (n >= sizeof(custom_obj)) return ACCEL_ERR_FORMAT;
    memcpy(((custom_obj *)u)->text, buf, n);
    ((custom_obj *)u)->text[n] = 0;
    return ACCEL_OK;
}
/* this process's shard: g.shard[g_rank]; a load takes every saved rank's */
static accel_result sh_save(void *u, void *buf, size_t cap, size_t *n) {
    (void)u;
    *n = SH(g_rank);
    if (buf && cap >= *n) memcpy(buf, g.shard[g_rank], *n);
    return ACCEL_OK;
}
static accel_result sh_load_all(void *u, const void *const *bufs, const size_t *sizes, int count) {
    int q;
    (void)u;
    if (count < 1 || count > MAXR) return ACCEL_ERR_FORMAT;
    for (q = 0; q < count; ++q)
        if (sizes[q] != SH(q)) return ACCEL_ERR_FORMAT;
    for (q = 0; q < count; ++q) memcpy(g.shard[q], bufs[q], SH(q));
    return ACCEL_OK;
}
static void quiet(void *u, accel_log_level l, const char *m) { (void)u; (void)l; (void)m; }

/* The initial state and one training step (the RNG of acc drives it; every process computes every rank's shard,
   so the state is the same everywhere). */
static void state_init(accel *acc) {
    int i, q;
    memset(&g, 0, sizeof g);
    for (i = 0; i < NW; ++i) g.w[i] = (float)(i % 1000);
    for (i = 0; i < NM; ++i) g.m[i] = 0.5f * (float)(i % 64);
    for (q = 0; q < MAXR; ++q)
        for (i = 0; i < SH(q); ++i) g.shard[q][i] = (unsigned char)(i * (q + 3));
    snprintf(g.c.text, sizeof g.c.text, "start");
    accel_set_seed(acc, 1234, 0);
}
static void state_step(accel *acc, train_state *s) {
    uint32_t r[4];
    int i, q;
    accel_rng_next4(acc, r);
    for (i = 0; i < NW; ++i) s->w[i] = s->w[i] * 0.75f + (float)((r[i & 3] >> (i & 7)) & 0xff);
    for (i = 0; i < NM; ++i) s->m[i] = s->m[i] * 0.5f - (float)(r[(i + 1) & 3] & 0xf);
    for (q = 0; q < MAXR; ++q)
        for (i = 0; i < SH(q); ++i) s->shard[q][i] = (unsigned char)(s->shard[q][i] * 5 + (r[q] >> (i & 15)) + q);
    s->s.it += 1;
    s->s.pos += (int64_t)(r[0] & 7);
    snprintf(s->c.text, sizeof s->c.text, "it %lld w0 %.1f", (long long)s->s.it, (double)s->w[0]);
}

static accel_ckpt *make(accel *acc, const char *project, int async) {
    accel_ckpt *ck = NULL;
    accel_ckpt_desc cd;
    accel_tensor t[2];
    memset(&cd, 0, sizeof cd);
    cd.project_dir = project;
    cd.automatic_checkpoint_naming = 1;
    cd.total_limit = 3;
    cd.async = async ? ACCEL_ON : ACCEL_OFF;
    memset(t, 0, sizeof t);
    t[0].name = "w"; t[0].dtype = ACCEL_F32; t[0].ndim = 1; t[0].shape[0] = NW; t[0].ptr = g.w;
    t[1].name = "m"; t[1].dtype = ACCEL_F32; t[1].ndim = 2; t[1].shape[0] = 64; t[1].shape[1] = NM / 64; t[1].ptr = g.m;
    if (accel_ckpt_create(acc, &cd, &ck) != ACCEL_OK) return NULL;
    accel_ckpt_register_model(ck, t, 1);
    accel_ckpt_register_optimizer(ck, t + 1, 1);
    accel_ckpt_register(ck, "sampler", s_save, s_load, &g.s);
    accel_ckpt_register(ck, NULL, c_save, c_load, &g.c);
    accel_ckpt_register_sharded(ck, "shard", sh_save, sh_load_all, &g);
    return ck;
}

/* A child: resume, then step + save forever; after each save_state it reports the newest iteration that is
   certainly published (sync: this one; async: the previous one — this save_state waited for it). */
static void child(const char *project, int fd, int async, int P, int rank) {
    accel acc;
    accel_desc d;
    accel_ckpt *ck;
    accel_result r;
    memset(&d, 0, sizeof d);
    d.no_mpi = 1;
    d.log_fn = quiet;
    d.collective_timeout_ms = 20000;
    if (accel_init(&acc, &d) != ACCEL_OK) _exit(4);
    g_rank = acc.process_index;
    (void)rank;
    state_init(&acc);
    ck = make(&acc, project, async);
    if (!ck) _exit(4);
    r = accel_ckpt_load_state(ck, NULL);
    if (r != ACCEL_OK && r != ACCEL_ERR_NOT_FOUND) {
        fprintf(stderr, "child: resume failed: %s\n", accel_last_error(&acc));
        _exit(3);
    }
    for (;;) {
        int it = accel_ckpt_iteration(ck), done;
        state_step(&acc, &g);
        if (accel_ckpt_save_state(ck, NULL, NULL, 0) != ACCEL_OK) {
            fprintf(stderr, "child: save failed: %s\n", accel_last_error(&acc));
            _exit(5);
        }
        done = async ? it - 1 : it;
        if (done >= 0 && acc.is_main_process && write(fd, &done, sizeof done) != (ssize_t)sizeof done) _exit(6);
    }
    (void)P;
}

static int verify_all_visible(const char *cdir) {
    DIR *d = opendir(cdir);
    struct dirent *e;
    int bad = 0;
    if (!d) return 0;
    while ((e = readdir(d)) != NULL) {
        char p[1024];
        if (strncmp(e->d_name, "checkpoint_", 11)) continue;
        snprintf(p, sizeof p, "%s/%s", cdir, e->d_name);
        if (accel_ckpt_verify(NULL, p) != ACCEL_OK) {
            fprintf(stderr, "visible but not complete: %s: %s\n", p, accel_last_error(NULL));
            bad++;
        }
    }
    closedir(d);
    return bad;
}

/* The reference: the synchronous run — the checksum of its state and RNG after k steps, k = 0.. (extended as
   needed from its current state). */
static uint64_t state_hash(const train_state *s, accel_rng_state rng, int P) {
    uint64_t h = accel_st_xxh64(s->w, sizeof s->w, 0);
    int q;
    h = accel_st_xxh64(s->m, sizeof s->m, h);
    h = accel_st_xxh64(&s->s, sizeof s->s, h);
    h = accel_st_xxh64(s->c.text, strlen(s->c.text), h);
    for (q = 0; q < P; ++q) h = accel_st_xxh64(s->shard[q], SH(q), h);
    h = accel_st_xxh64(&rng.seed, sizeof rng.seed, h);
    return accel_st_xxh64(&rng.offset, sizeof rng.offset, h);
}
typedef struct { train_state cur; accel_rng_state rng; uint64_t *hash; int n, P; } reference;
static uint64_t ref_hash(reference *ref, accel *acc, int k) {
    while (ref->n <= k) {
        train_state keep = g;
        if (ref->n == 0) {
            state_init(acc);
            ref->cur = g;
        } else {
            accel_set_rng_state(acc, ref->rng);
            state_step(acc, &ref->cur);
        }
        ref->rng = accel_get_rng_state(acc);
        g = keep;
        ref->hash = (uint64_t *)realloc(ref->hash, sizeof(uint64_t) * (size_t)(ref->n + 1));
        if (!ref->hash) { perror("realloc"); exit(1); }
        ref->hash[ref->n++] = state_hash(&ref->cur, ref->rng, ref->P);
    }
    return ref->hash[k];
}

int main(int argc, char **argv) {
    int trials = argc > 1 ? atoi(argv[1]) : 60, max_s = argc > 2 ? atoi(argv[2]) : 25, t, done = 0;
    const char *mode = argc > 3 ? argv[3] : "sync";
    int async = strcmp(mode, "sync") != 0, P = !strcmp(mode, "async2") ? 2 : 1;
    int last_reported = -1, saves = 0, kills_mid_write = 0, max_delay_us = P > 1 ? 600000 : 300000;
    char tmpl[] = "/tmp/accel_ckpt_crash_XXXXXX", project[256], cdir[300];
    double t0 = accel_now();
    unsigned seed = (unsigned)time(NULL);
    static reference ref;
    accel acc;
    accel_desc d;
    if (!mkdtemp(tmpl)) { perror("mkdtemp"); return 1; }
    snprintf(project, sizeof project, "%s/proj", tmpl);
    snprintf(cdir, sizeof cdir, "%s/checkpoints", project);
    accel_set_default_logger(quiet, NULL);
    ref.P = P;
    memset(&d, 0, sizeof d);
    d.no_mpi = 1;
    d.log_fn = quiet;
    AT_EQ_INT(accel_init(&acc, &d), ACCEL_OK);
    srand(seed);
    printf("mode %s, seed %u\n", mode, seed);
    signal(SIGPIPE, SIG_IGN);
    for (t = 0; t < trials && accel_now() - t0 < max_s; ++t) {
        int fds[2], status = 0, it, r0, port = 0;
        pid_t pid[MAXR];
        char latest[1024], run_id[64];
        accel_result r;
        if (pipe(fds) != 0) { perror("pipe"); return 1; }
        while (P > 1 && port < 2) port = accel_free_port();
        snprintf(run_id, sizeof run_id, "crash-%d-%d", (int)getpid(), t);
        for (r0 = 0; r0 < P; ++r0) {
            pid[r0] = fork();
            if (pid[r0] == 0) {
                close(fds[0]);
                if (P > 1) ckpt_worker_env(r0, P, port, run_id);
                child(project, fds[1], async, P, r0);
                _exit(7);
            }
        }
        close(fds[1]);
        usleep((useconds_t)(rand() % max_delay_us)); /* the kill lands anywhere in resume/step/save/write/rotate */
        for (r0 = 0; r0 < P; ++r0) kill(pid[r0], SIGKILL);
        for (r0 = 0; r0 < P; ++r0) {
            waitpid(pid[r0], &status, 0);
            if (!(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)) {
                AT_CHECK_MSG(0, "a child exited by itself (resume or save failed)");
                fprintf(stderr, "child status %d\n", status);
            }
        }
        { /* a hidden .checkpoint_<N>.tmp left behind: the kill landed while a save was being written */
            DIR *dd = opendir(cdir);
            struct dirent *de;
            int mid = 0;
            while (dd && (de = readdir(dd)) != NULL) {
                size_t l = strlen(de->d_name);
                mid |= de->d_name[0] == '.' && l > 4 && !strcmp(de->d_name + l - 4, ".tmp");
            }
            if (dd) closedir(dd);
            kills_mid_write += mid;
        }
        while (read(fds[0], &it, sizeof it) == (ssize_t)sizeof it) {
            if (it > last_reported) last_reported = it;
            ++saves;
        }
        close(fds[0]);
        ++done;
        /* the newest complete checkpoint */
        r = accel_ckpt_latest(&acc, cdir, latest, sizeof latest);
        if (last_reported < 0) AT_CHECK(r == ACCEL_OK || r == ACCEL_ERR_NOT_FOUND);
        else AT_EQ_INT(r, ACCEL_OK);
        if (r == ACCEL_OK) {
            const char *num = strrchr(latest, '_');
            int n = num ? atoi(num + 1) : -1, k;
            accel_ckpt *ck;
            AT_CHECK_MSG(n >= last_reported, "latest is older than a published save");
            /* load it on one process: checkpoint n holds the state after n + 1 steps */
            memset(&g, 0, sizeof g);
            accel_set_seed(&acc, 5, 0);
            g_rank = 0;
            ck = make(&acc, project, 0);
            AT_EQ_INT(accel_ckpt_load_state(ck, latest), ACCEL_OK);
            AT_EQ_INT(accel_ckpt_iteration(ck), n + 1);
            AT_CHECK_MSG(state_hash(&g, accel_get_rng_state(&acc), P) == ref_hash(&ref, &acc, n + 1),
                         "the checkpoint holds the reference state of its iteration");
            /* the continuation: three more steps from the loaded state are the uninterrupted run's */
            for (k = 0; k < 3; ++k) state_step(&acc, &g);
            AT_CHECK_MSG(state_hash(&g, accel_get_rng_state(&acc), P) == ref_hash(&ref, &acc, n + 4),
                         "the continuation is bit for bit the synchronous run's");
            accel_ckpt_destroy(ck);
        }
        AT_EQ_INT(verify_all_visible(cdir), 0);
    }
    printf("%s crash trials: %d (%d of them during a write), saves reported published: %d, newest iteration %d, "
           "%.1f s\n", mode, done, kills_mid_write, saves, last_reported, accel_now() - t0);
    AT_CHECK_MSG(kills_mid_write >= done / 5, "too few kills landed during a write to test anything");
    AT_CHECK_MSG(done >= 50, "fewer than 50 crash trials ran in the time limit");
    AT_CHECK_MSG(saves > 0, "no checkpoint was ever completed (kill delays too short for this disk?)");
    accel_shutdown(&acc);
    free(ref.hash);
    at_rm_rf(tmpl);
    return at_finish("ckpt-crash");
}
