/* Crash test of save_state: a child process resumes from the newest complete checkpoint and saves checkpoints in a
   loop (automatic naming, total_limit 3) until the parent SIGKILLs it at a random moment. After every kill the
   parent checks that
     - accel_ckpt_latest() returns a checkpoint at least as new as the last one the child reported finished,
     - that checkpoint loads and holds exactly what was saved for its iteration (tensors, objects, RNG, iteration),
     - every visible checkpoint_<N> directory passes the full verification (no partial checkpoint is visible).
   usage: test_ckpt_crash TRIALS MAX_SECONDS   (fails if fewer than 50 trials fit in MAX_SECONDS) */
#include "accel_ckpt.h"
#include "accel_test.h"
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

typedef struct { int64_t it, pos; } sampler_state;
typedef struct { char text[32]; } custom_obj;
static float g_w[NW], g_m[NM];
static sampler_state g_s;
static custom_obj g_c;

static accel_result s_save(void *u, void *buf, size_t cap, size_t *n) {
    *n = sizeof(sampler_state);
    if (cap >= *n) memcpy(buf, u, *n);
    return ACCEL_OK;
}
static accel_result s_load(void *u, const void *buf, size_t n) {
    if (n != sizeof(sampler_state)) return ACCEL_ERR_FORMAT;
    memcpy(u, buf, n);
    return ACCEL_OK;
}
static accel_result c_save(void *u, void *buf, size_t cap, size_t *n) {
    *n = strlen(((custom_obj *)u)->text);
    if (cap >= *n) memcpy(buf, ((custom_obj *)u)->text, *n);
    return ACCEL_OK;
}
static accel_result c_load(void *u, const void *buf, size_t n) {
    if (n >= sizeof(custom_obj)) return ACCEL_ERR_FORMAT;
    memcpy(((custom_obj *)u)->text, buf, n);
    ((custom_obj *)u)->text[n] = 0;
    return ACCEL_OK;
}
static void quiet(void *u, accel_log_level l, const char *m) { (void)u; (void)l; (void)m; }

static void fill(int it) {
    int i;
    for (i = 0; i < NW; ++i) g_w[i] = (float)(it * 1000 + (i % 1000));
    for (i = 0; i < NM; ++i) g_m[i] = -(float)it - 0.5f * (float)(i % 64);
    g_s.it = it;
    g_s.pos = (int64_t)it * 7;
    snprintf(g_c.text, sizeof g_c.text, "iter %d", it);
}

static accel_ckpt *make(accel *acc, const char *project) {
    accel_ckpt *ck = NULL;
    accel_ckpt_desc cd;
    accel_tensor t[2];
    memset(&cd, 0, sizeof cd);
    cd.project_dir = project;
    cd.automatic_checkpoint_naming = 1;
    cd.total_limit = 3;
    memset(t, 0, sizeof t);
    t[0].name = "w"; t[0].dtype = ACCEL_F32; t[0].ndim = 1; t[0].shape[0] = NW; t[0].ptr = g_w;
    t[1].name = "m"; t[1].dtype = ACCEL_F32; t[1].ndim = 2; t[1].shape[0] = 64; t[1].shape[1] = NM / 64; t[1].ptr = g_m;
    if (accel_ckpt_create(acc, &cd, &ck) != ACCEL_OK) return NULL;
    accel_ckpt_register_model(ck, t, 1);
    accel_ckpt_register_optimizer(ck, t + 1, 1);
    accel_ckpt_register(ck, "sampler", s_save, s_load, &g_s);
    accel_ckpt_register(ck, NULL, c_save, c_load, &g_c);
    return ck;
}

static void child(const char *project, int fd) {
    accel acc;
    accel_desc d;
    accel_ckpt *ck;
    accel_result r;
    memset(&d, 0, sizeof d);
    d.no_mpi = 1;
    d.log_fn = quiet;
    if (accel_init(&acc, &d) != ACCEL_OK) _exit(4);
    ck = make(&acc, project);
    if (!ck) _exit(4);
    r = accel_ckpt_load_state(ck, NULL);
    if (r != ACCEL_OK && r != ACCEL_ERR_NOT_FOUND) {
        fprintf(stderr, "child: resume failed: %s\n", accel_last_error(&acc));
        _exit(3);
    }
    for (;;) {
        int it = accel_ckpt_iteration(ck);
        fill(it);
        acc.rng.seed = (uint64_t)it * 3 + 1;
        acc.rng.offset = (uint64_t)it;
        if (accel_ckpt_save_state(ck, NULL, NULL, 0) != ACCEL_OK) {
            fprintf(stderr, "child: save failed: %s\n", accel_last_error(&acc));
            _exit(5);
        }
        if (write(fd, &it, sizeof it) != (ssize_t)sizeof it) _exit(6);
    }
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

int main(int argc, char **argv) {
    int trials = argc > 1 ? atoi(argv[1]) : 60, max_s = argc > 2 ? atoi(argv[2]) : 25, t, done = 0;
    int last_reported = -1, saves = 0, kills_mid_run = 0;
    char tmpl[] = "/tmp/accel_ckpt_crash_XXXXXX", project[256], cdir[300];
    double t0 = accel_now();
    unsigned seed = (unsigned)time(NULL);
    accel acc;
    accel_desc d;
    if (!mkdtemp(tmpl)) { perror("mkdtemp"); return 1; }
    snprintf(project, sizeof project, "%s/proj", tmpl);
    snprintf(cdir, sizeof cdir, "%s/checkpoints", project);
    accel_set_default_logger(quiet, NULL);
    memset(&d, 0, sizeof d);
    d.no_mpi = 1;
    d.log_fn = quiet;
    AT_EQ_INT(accel_init(&acc, &d), ACCEL_OK);
    srand(seed);
    printf("seed %u\n", seed);
    for (t = 0; t < trials && accel_now() - t0 < max_s; ++t) {
        int fds[2], status = 0, it;
        pid_t pid;
        char latest[1024];
        accel_result r;
        if (pipe(fds) != 0) { perror("pipe"); return 1; }
        pid = fork();
        if (pid == 0) {
            close(fds[0]);
            child(project, fds[1]);
            _exit(7);
        }
        close(fds[1]);
        usleep((useconds_t)(rand() % 300000)); /* 0..300 ms: the kill lands anywhere in resume/save/rotate */
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        if (!(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)) {
            AT_CHECK_MSG(0, "the child exited by itself (resume or save failed)");
            fprintf(stderr, "child status %d\n", status);
        }
        while (read(fds[0], &it, sizeof it) == (ssize_t)sizeof it) {
            if (it > last_reported) last_reported = it;
            ++saves;
            ++kills_mid_run;
        }
        close(fds[0]);
        ++done;
        /* the newest complete checkpoint */
        r = accel_ckpt_latest(&acc, cdir, latest, sizeof latest);
        if (last_reported < 0) {
            AT_CHECK(r == ACCEL_OK || r == ACCEL_ERR_NOT_FOUND);
        } else {
            AT_EQ_INT(r, ACCEL_OK);
        }
        if (r == ACCEL_OK) {
            const char *num = strrchr(latest, '_');
            int n = num ? atoi(num + 1) : -1;
            accel_ckpt *ck;
            float w0;
            AT_CHECK_MSG(n >= last_reported, "latest is older than a finished save");
            /* load it in this process and compare with what the child saved for iteration n */
            memset(g_w, 0, sizeof g_w);
            memset(g_m, 0, sizeof g_m);
            memset(&g_s, 0, sizeof g_s);
            g_c.text[0] = 0;
            ck = make(&acc, project);
            AT_EQ_INT(accel_ckpt_load_state(ck, latest), ACCEL_OK);
            AT_EQ_INT(accel_ckpt_iteration(ck), n + 1);
            w0 = g_w[NW - 1];
            fill(n); /* the expected values, compared against what was loaded */
            {
                static float w[NW], m[NM];
                sampler_state s = g_s;
                custom_obj c = g_c;
                memcpy(w, g_w, sizeof w);
                memcpy(m, g_m, sizeof m);
                memset(g_w, 0, sizeof g_w);
                memset(g_m, 0, sizeof g_m);
                AT_EQ_INT(accel_ckpt_load_state(ck, latest), ACCEL_OK);
                AT_CHECK(!memcmp(w, g_w, sizeof w));
                AT_CHECK(!memcmp(m, g_m, sizeof m));
                AT_CHECK(g_s.it == s.it && g_s.pos == s.pos);
                AT_EQ_STR(g_c.text, c.text);
                AT_CHECK(acc.rng.seed == (uint64_t)n * 3 + 1 && acc.rng.offset == (uint64_t)n);
            }
            (void)w0;
            accel_ckpt_destroy(ck);
        }
        AT_EQ_INT(verify_all_visible(cdir), 0);
    }
    printf("crash trials: %d, checkpoints completed across all children: %d, newest iteration %d, %.1f s\n", done,
           saves, last_reported, accel_now() - t0);
    (void)kills_mid_run;
    AT_CHECK_MSG(done >= 50, "fewer than 50 crash trials ran in the time limit");
    AT_CHECK_MSG(saves > 0, "no checkpoint was ever completed (kill delays too short for this disk?)");
    accel_shutdown(&acc);
    {
        char cmd[400];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpl);
        if (system(cmd) != 0) fprintf(stderr, "cleanup failed\n");
    }
    return at_finish("ckpt-crash");
}
