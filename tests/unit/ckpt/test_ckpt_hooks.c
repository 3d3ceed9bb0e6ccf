/* Save and load pre-hooks (accel_ckpt.h PRE-HOOKS; Accelerate's register_save_state_pre_hook /
   register_load_state_pre_hook), one process:
     - a save pre-hook's files (tokenizer.json, notes.txt) are in the published checkpoint with the bytes it wrote, in
       the marker with their sizes, and verified: a flipped byte in one makes load_state fail naming it (and
       load_state(NULL) fall back to the previous checkpoint); synchronous and async saves alike;
     - the load pre-hook gets the checkpoint's directory after verification and before anything is applied (the
       tensor is still untouched when it runs), and reads the file the save hook wrote;
     - rotation (total_limit) removes an old checkpoint with its hook files;
     - a failing save hook fails save_state with its message, publishes nothing and leaves the iteration; a hook that
       writes a name accel uses (model.safetensors), a hidden file or a directory is refused; a failing load hook
       fails load_state with nothing applied;
     - removal by handle (Accelerate's RemovableHandle): a removed hook no longer runs and its file is not in the
       next checkpoint, the others keep their order; a second removal, a zeroed, unknown or foreign handle fail
       naming the hook; registering or removing from inside a running hook is refused and the pass goes on;
     - kill -9 at random moments of a child saving in a loop (20 trials): the newest complete checkpoint always loads,
       and its hook file holds exactly what the hook wrote for that checkpoint. */
#include "accel_ckpt.h"
#include "accel_test.h"
#include "accel_test_fs.h"
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char g_root[256];
static void quiet(void *u, accel_log_level l, const char *m) { (void)u; (void)l; (void)m; }

typedef struct {
    float w[256];
    accel_tensor t;
    accel_ckpt *ck;
    int save_mode;        /* 0 ok, 1 fail, 2 write model.safetensors, 3 a hidden file, 4 a directory */
    int load_fail, save_calls, load_calls;
    float w_at_load_hook; /* w[0] when the load hook ran */
    char loaded_tok[200];
    size_t big;           /* the crash test: tokenizer.json's size */
} run;

static void tok_text(char *out, size_t cap, float w0) {
    snprintf(out, cap, "{\"vocab\": %d, \"w0\": %.1f}", 50257, (double)w0);
}

static accel_result save_hook(void *user, const char *dir) {
    run *r = (run *)user;
    char p[1200], txt[200];
    r->save_calls++;
    if (r->save_mode == 1) return accel_set_error(NULL, ACCEL_ERR_IO, "the tokenizer is not ready");
    tok_text(txt, sizeof txt, r->w[0]);
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    if (r->big) {
        char *b = (char *)malloc(r->big);
        size_t k;
        if (!b) return accel_set_error(NULL, ACCEL_ERR_OUT_OF_MEMORY, "hook");
        for (k = 0; k < r->big; ++k) b[k] = (char)('a' + (int)((k + (size_t)r->w[0]) % 26));
        memcpy(b, txt, strlen(txt));
        at_write_file(p, b, r->big);
        free(b);
    } else {
        at_write_file(p, txt, strlen(txt));
    }
    snprintf(p, sizeof p, "%s/notes.txt", dir);
    at_write_file(p, "hello", 5);
    if (r->save_mode == 2) {
        snprintf(p, sizeof p, "%s/model.safetensors", dir);
        at_write_file(p, "x", 1);
    } else if (r->save_mode == 3) {
        snprintf(p, sizeof p, "%s/.secret", dir);
        at_write_file(p, "x", 1);
    } else if (r->save_mode == 4) {
        snprintf(p, sizeof p, "%s/sub", dir);
        mkdir(p, 0777);
    }
    return ACCEL_OK;
}
static accel_result load_hook(void *user, const char *dir) {
    run *r = (run *)user;
    char p[1200];
    unsigned char *b;
    size_t n = 0;
    r->load_calls++;
    r->w_at_load_hook = r->w[0];
    if (r->load_fail) return accel_set_error(NULL, ACCEL_ERR_FORMAT, "tokenizer.json is from another model");
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    b = at_read_file(p, &n);
    if (!b) return accel_set_error(NULL, ACCEL_ERR_IO, "no %s", p);
    snprintf(r->loaded_tok, sizeof r->loaded_tok, "%.*s", (int)(n < 150 ? n : 150), (const char *)b);
    free(b);
    return ACCEL_OK;
}

static void open_run(accel *acc, run *r, const char *proj, int async, int limit) {
    accel_ckpt_desc cd;
    memset(r, 0, sizeof *r);
    r->t.name = "w";
    r->t.dtype = ACCEL_F32;
    r->t.ndim = 1;
    r->t.shape[0] = 256;
    r->t.ptr = r->w;
    memset(&cd, 0, sizeof cd);
    cd.project_dir = proj;
    cd.automatic_checkpoint_naming = 1;
    cd.total_limit = limit;
    cd.async = async ? ACCEL_ON : ACCEL_OFF;
    AT_EQ_INT(accel_ckpt_create(acc, &cd, &r->ck), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_register_model(r->ck, &r->t, 1), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_register_save_pre_hook(r->ck, save_hook, r, NULL), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_register_load_pre_hook(r->ck, load_hook, r, NULL), ACCEL_OK);
}

static void test_files(accel *acc, int async) {
    char proj[400], ck0[600], ck1[600], ck2[600], p[800], want[200];
    unsigned char *b;
    size_t n = 0;
    run r, q;
    snprintf(proj, sizeof proj, "%s/files%d", g_root, async);
    open_run(acc, &r, proj, async, 2);
    AT_EQ_INT(accel_ckpt_register_save_pre_hook(r.ck, NULL, NULL, NULL), ACCEL_ERR_INVALID_ARGUMENT);
    r.w[0] = 100;
    AT_EQ_INT(accel_ckpt_save_state(r.ck, NULL, NULL, 0), ACCEL_OK);
    r.w[0] = 101;
    AT_EQ_INT(accel_ckpt_save_state(r.ck, NULL, NULL, 0), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_wait(r.ck), ACCEL_OK);
    AT_EQ_INT(r.save_calls, 2);
    snprintf(ck0, sizeof ck0, "%s/checkpoints/checkpoint_0", proj);
    snprintf(ck1, sizeof ck1, "%s/checkpoints/checkpoint_1", proj);
    snprintf(ck2, sizeof ck2, "%s/checkpoints/checkpoint_2", proj);
    /* the hook's files, with its bytes, listed in the marker with their sizes */
    snprintf(p, sizeof p, "%s/tokenizer.json", ck1);
    b = at_read_file(p, &n);
    tok_text(want, sizeof want, 101);
    AT_CHECK(b && n == strlen(want) && !memcmp(b, want, n));
    free(b);
    snprintf(p, sizeof p, "%s/notes.txt", ck1);
    AT_EQ_INT(at_file_size(p), 5);
    snprintf(p, sizeof p, "%s/checkpoint_complete.json", ck1);
    b = at_read_file(p, &n);
    AT_CHECK(b != NULL);
    if (b) {
        char *m = (char *)realloc(b, n + 1), entry[80];
        m[n] = 0;
        snprintf(entry, sizeof entry, "\"tokenizer.json\": {\"bytes\": %zu,", strlen(want));
        AT_CONTAINS(m, entry);
        AT_CONTAINS(m, "\"notes.txt\": {\"bytes\": 5,");
        free(m);
    }
    AT_EQ_INT(accel_ckpt_verify(acc, ck1), ACCEL_OK);
    /* rotation (total_limit 2): a third save removes checkpoint_0 with its hook files */
    r.w[0] = 102;
    AT_EQ_INT(accel_ckpt_save_state(r.ck, NULL, NULL, 0), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_wait(r.ck), ACCEL_OK);
    AT_CHECK(!at_exists(ck0) && at_exists(ck1) && at_exists(ck2));
    accel_ckpt_destroy(r.ck);

    /* the load hook: verified dir, before anything is applied */
    open_run(acc, &q, proj, async, 2);
    AT_EQ_INT(accel_ckpt_load_state(q.ck, NULL), ACCEL_OK);
    AT_EQ_INT(q.load_calls, 1);
    AT_CHECK(q.w_at_load_hook == 0.0f && q.w[0] == 102.0f);
    tok_text(want, sizeof want, 102);
    AT_EQ_STR(q.loaded_tok, want);
    /* a failing load hook: an error with its message, nothing applied */
    memset(q.w, 0, sizeof q.w);
    q.load_fail = 1;
    AT_EQ_INT(accel_ckpt_load_state(q.ck, ck1), ACCEL_ERR_FORMAT);
    AT_CONTAINS(accel_last_error(acc), "load pre-hook 0");
    AT_CONTAINS(accel_last_error(acc), "from another model");
    AT_CHECK(q.w[0] == 0.0f);
    q.load_fail = 0;
    /* a flipped byte in a hook's file: the checkpoint is damaged (verified like accel's own files) */
    snprintf(p, sizeof p, "%s/tokenizer.json", ck2);
    b = at_read_file(p, &n);
    AT_CHECK(b && n > 2);
    if (b) {
        b[1] ^= 0x20;
        at_write_file(p, b, n);
        free(b);
    }
    AT_EQ_INT(accel_ckpt_load_state(q.ck, ck2), ACCEL_ERR_FORMAT);
    AT_CONTAINS(accel_last_error(acc), "checksum of tokenizer.json");
    AT_CHECK(q.w[0] == 0.0f);
    AT_EQ_INT(accel_ckpt_load_state(q.ck, NULL), ACCEL_OK); /* falls back to checkpoint_1 */
    AT_CHECK(q.w[0] == 101.0f);
    accel_ckpt_destroy(q.ck);
}

static void test_refusals(accel *acc) {
    char proj[400], p[600];
    int mode;
    run r;
    snprintf(proj, sizeof proj, "%s/refuse", g_root);
    open_run(acc, &r, proj, 0, 0);
    for (mode = 1; mode <= 4; ++mode) {
        r.save_mode = mode;
        AT_EQ_INT(accel_ckpt_save_state(r.ck, NULL, NULL, 0), mode == 1 ? ACCEL_ERR_IO : ACCEL_ERR_INVALID_ARGUMENT);
        AT_CONTAINS(accel_last_error(acc), mode == 1 ? "save pre-hook 0" : "pre-hook");
        if (mode == 1) AT_CONTAINS(accel_last_error(acc), "the tokenizer is not ready");
        if (mode == 2) AT_CONTAINS(accel_last_error(acc), "model.safetensors");
        if (mode == 3) AT_CONTAINS(accel_last_error(acc), ".secret");
        if (mode == 4) AT_CONTAINS(accel_last_error(acc), "/sub");
        snprintf(p, sizeof p, "%s/checkpoints/checkpoint_0", proj);
        AT_CHECK(!at_exists(p)); /* nothing published */
        AT_EQ_INT(accel_ckpt_iteration(r.ck), 0);
    }
    r.save_mode = 0;
    AT_EQ_INT(accel_ckpt_save_state(r.ck, NULL, NULL, 0), ACCEL_OK); /* the stale temporary directory is replaced */
    snprintf(p, sizeof p, "%s/checkpoints/checkpoint_0/sub", proj);
    AT_CHECK(!at_exists(p));
    snprintf(p, sizeof p, "%s/checkpoints/checkpoint_0", proj);
    AT_EQ_INT(accel_ckpt_verify(acc, p), ACCEL_OK);
    accel_ckpt_destroy(r.ck);
}

/* ---- removal handles */
typedef struct {
    char log[64];             /* which hooks ran, in order */
    accel_ckpt *ck;
    accel_ckpt_hook_handle self, other;
    accel_result inside_remove, inside_register;
    char inside_msg[ACCEL_ERROR_CAPACITY];
    accel *acc;
} hooklog;
static hooklog g_hl;
static accel_result hook_letter(const char *dir, char c) {
    char p[1200], name[8];
    size_t n = strlen(g_hl.log);
    if (n + 1 < sizeof g_hl.log) { g_hl.log[n] = c; g_hl.log[n + 1] = 0; }
    snprintf(name, sizeof name, "%c.txt", c);
    snprintf(p, sizeof p, "%s/%s", dir, name);
    at_write_file(p, name, 1);
    return ACCEL_OK;
}
static accel_result hook_a(void *u, const char *dir) { (void)u; return hook_letter(dir, 'a'); }
static accel_result hook_b(void *u, const char *dir) { (void)u; return hook_letter(dir, 'b'); }
static accel_result hook_c(void *u, const char *dir) { (void)u; return hook_letter(dir, 'c'); }
static accel_result hook_l(void *u, const char *dir) { (void)u; (void)dir; strcat(g_hl.log, "L"); return ACCEL_OK; }
/* tries to remove itself and to register another hook while the pass runs: both refused, the pass goes on */
static accel_result hook_meddler(void *u, const char *dir) {
    (void)u;
    g_hl.inside_remove = accel_ckpt_hook_remove(g_hl.ck, g_hl.self);
    snprintf(g_hl.inside_msg, sizeof g_hl.inside_msg, "%s", accel_last_error(g_hl.acc));
    g_hl.inside_register = accel_ckpt_register_save_pre_hook(g_hl.ck, hook_c, NULL, NULL);
    return hook_letter(dir, 'm');
}

static void test_removal(accel *acc) {
    char proj[400], p[800];
    accel_ckpt_desc cd;
    accel_ckpt *ck2 = NULL;
    accel_ckpt_hook_handle ha, hb, hc, hl, zero, bogus, foreign;
    float w = 1;
    accel_tensor t;
    memset(&g_hl, 0, sizeof g_hl);
    memset(&zero, 0, sizeof zero);
    memset(&t, 0, sizeof t);
    t.name = "w"; t.dtype = ACCEL_F32; t.ndim = 1; t.shape[0] = 1; t.ptr = &w;
    snprintf(proj, sizeof proj, "%s/remove", g_root);
    memset(&cd, 0, sizeof cd);
    cd.project_dir = proj;
    cd.automatic_checkpoint_naming = 1;
    AT_EQ_INT(accel_ckpt_create(acc, &cd, &g_hl.ck), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_create(acc, &cd, &ck2), ACCEL_OK);
    g_hl.acc = acc;
    AT_EQ_INT(accel_ckpt_register_model(g_hl.ck, &t, 1), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_register_save_pre_hook(g_hl.ck, hook_a, NULL, &ha), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_register_save_pre_hook(g_hl.ck, hook_b, NULL, &hb), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_register_save_pre_hook(g_hl.ck, hook_c, NULL, &hc), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_register_load_pre_hook(g_hl.ck, hook_l, NULL, &hl), ACCEL_OK);
    AT_CHECK(ha.id != hb.id && hb.id != hc.id && hc.id != hl.id && ha.kind == 1 && hl.kind == 2);
    AT_EQ_INT(accel_ckpt_save_state(g_hl.ck, NULL, NULL, 0), ACCEL_OK);
    AT_EQ_STR(g_hl.log, "abc");
    /* b out: a and c still run, in order; b's file is not in the next checkpoint, which verifies */
    AT_EQ_INT(accel_ckpt_hook_remove(g_hl.ck, hb), ACCEL_OK);
    g_hl.log[0] = 0;
    AT_EQ_INT(accel_ckpt_save_state(g_hl.ck, NULL, NULL, 0), ACCEL_OK);
    AT_EQ_STR(g_hl.log, "ac");
    snprintf(p, sizeof p, "%s/checkpoints/checkpoint_1/b.txt", proj);
    AT_CHECK(!at_exists(p));
    snprintf(p, sizeof p, "%s/checkpoints/checkpoint_1/c.txt", proj);
    AT_CHECK(at_exists(p));
    snprintf(p, sizeof p, "%s/checkpoints/checkpoint_1", proj);
    AT_EQ_INT(accel_ckpt_verify(acc, p), ACCEL_OK);
    /* bad handles: each names the hook and changes nothing */
    AT_EQ_INT(accel_ckpt_hook_remove(g_hl.ck, hb), ACCEL_ERR_NOT_FOUND);
    AT_CONTAINS(accel_last_error(acc), "save pre-hook #2 was removed already");
    AT_EQ_INT(accel_ckpt_hook_remove(g_hl.ck, zero), ACCEL_ERR_NOT_FOUND);
    AT_CONTAINS(accel_last_error(acc), "names no hook");
    bogus = hc;
    bogus.id = 99;
    AT_EQ_INT(accel_ckpt_hook_remove(g_hl.ck, bogus), ACCEL_ERR_NOT_FOUND);
    AT_CONTAINS(accel_last_error(acc), "save pre-hook #99 was never registered");
    AT_EQ_INT(accel_ckpt_register_save_pre_hook(ck2, hook_b, NULL, &foreign), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_hook_remove(g_hl.ck, foreign), ACCEL_ERR_NOT_FOUND);
    AT_CONTAINS(accel_last_error(acc), "another checkpointer");
    AT_EQ_INT(accel_ckpt_hook_remove(NULL, ha), ACCEL_ERR_INVALID_ARGUMENT);
    /* the load pre-hook: runs, then removed does not */
    g_hl.log[0] = 0;
    AT_EQ_INT(accel_ckpt_load_state(g_hl.ck, NULL), ACCEL_OK);
    AT_EQ_STR(g_hl.log, "L");
    AT_EQ_INT(accel_ckpt_hook_remove(g_hl.ck, hl), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_hook_remove(g_hl.ck, hl), ACCEL_ERR_NOT_FOUND);
    AT_CONTAINS(accel_last_error(acc), "load pre-hook #4 was removed already");
    g_hl.log[0] = 0;
    AT_EQ_INT(accel_ckpt_load_state(g_hl.ck, NULL), ACCEL_OK);
    AT_EQ_STR(g_hl.log, "");
    /* from inside a running hook: refused, the pass runs what it started with and the save succeeds */
    AT_EQ_INT(accel_ckpt_hook_remove(g_hl.ck, ha), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_register_save_pre_hook(g_hl.ck, hook_meddler, NULL, &g_hl.self), ACCEL_OK);
    g_hl.log[0] = 0;
    AT_EQ_INT(accel_ckpt_save_state(g_hl.ck, NULL, NULL, 0), ACCEL_OK);
    AT_EQ_STR(g_hl.log, "cm");
    AT_EQ_INT(g_hl.inside_remove, ACCEL_ERR_STATE);
    AT_CONTAINS(g_hl.inside_msg, "inside a running pre-hook");
    AT_EQ_INT(g_hl.inside_register, ACCEL_ERR_STATE);
    /* afterwards both removals work and a save runs no hook at all */
    AT_EQ_INT(accel_ckpt_hook_remove(g_hl.ck, g_hl.self), ACCEL_OK);
    AT_EQ_INT(accel_ckpt_hook_remove(g_hl.ck, hc), ACCEL_OK);
    g_hl.log[0] = 0;
    AT_EQ_INT(accel_ckpt_save_state(g_hl.ck, NULL, NULL, 0), ACCEL_OK);
    AT_EQ_STR(g_hl.log, "");
    snprintf(p, sizeof p, "%s/checkpoints/checkpoint_3", proj);
    AT_EQ_INT(accel_ckpt_verify(acc, p), ACCEL_OK);
    snprintf(p, sizeof p, "%s/checkpoints/checkpoint_3/c.txt", proj);
    AT_CHECK(!at_exists(p));
    accel_ckpt_destroy(ck2);
    accel_ckpt_destroy(g_hl.ck);
}

/* kill -9 while a child saves in a loop (async, a 2 MiB hook file whose bytes depend on w[0] = the save's number) */
static void test_crash(void) {
    int trial, loaded = 0;
    srand((unsigned)time(NULL));
    for (trial = 0; trial < 20; ++trial) {
        char proj[400];
        pid_t pid;
        int st;
        snprintf(proj, sizeof proj, "%s/crash%d", g_root, trial);
        pid = fork();
        if (pid == 0) {
            accel a;
            accel_desc d;
            run r;
            int k;
            memset(&d, 0, sizeof d);
            d.no_mpi = 1;
            d.log_fn = quiet;
            if (accel_init(&a, &d) != ACCEL_OK) _exit(3);
            open_run(&a, &r, proj, trial % 2, 2);
            r.big = (size_t)2 << 20;
            for (k = 0; k < 1000; ++k) {
                r.w[0] = (float)k;
                if (accel_ckpt_save_state(r.ck, NULL, NULL, 0) != ACCEL_OK) _exit(4);
            }
            _exit(0);
        }
        usleep((useconds_t)(20000 + rand() % 200000));
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        AT_CHECK(WIFSIGNALED(st)); /* killed, not a failed save */
        {
            accel a;
            accel_desc d;
            run q;
            accel_result res;
            memset(&d, 0, sizeof d);
            d.no_mpi = 1;
            d.log_fn = quiet;
            AT_EQ_INT(accel_init(&a, &d), ACCEL_OK);
            open_run(&a, &q, proj, 0, 2);
            res = accel_ckpt_load_state(q.ck, NULL);
            AT_CHECK(res == ACCEL_OK || res == ACCEL_ERR_NOT_FOUND);
            if (res == ACCEL_OK) {
                char want[200];
                ++loaded;
                tok_text(want, sizeof want, q.w[0]); /* the hook file of the very save that wrote these tensors */
                AT_CHECK(!strncmp(q.loaded_tok, want, strlen(want)));
            }
            accel_ckpt_destroy(q.ck);
            accel_shutdown(&a);
        }
    }
    AT_CHECK(loaded >= 10); /* most kills come after a first checkpoint: the check above ran */
    printf("crash: %d of 20 trials loaded a checkpoint\n", loaded);
}

int main(void) {
    char tmpl[] = "/tmp/accel_ckpt_hooks_XXXXXX";
    accel acc;
    accel_desc d;
    if (!mkdtemp(tmpl)) { perror("mkdtemp"); return 1; }
    snprintf(g_root, sizeof g_root, "%s", tmpl);
    accel_set_default_logger(quiet, NULL);
    memset(&d, 0, sizeof d);
    d.no_mpi = 1;
    d.log_fn = quiet;
    AT_EQ_INT(accel_init(&acc, &d), ACCEL_OK);
    test_files(&acc, 0);
    test_files(&acc, 1);
    test_refusals(&acc);
    test_removal(&acc);
    accel_shutdown(&acc);
    test_crash();
    at_rm_rf(g_root);
    return at_finish("ckpt-hooks");
}
