/* Unit tests of accel_trackers.h that need no reader: CRC32C against RFC 3720 B.4 and the standard check value,
   log_with parsing and ACCEL_LOG_WITH, the tracker state machine (log before init / after deinit, deinit on zeroed
   and failed trackers), bad arguments changing nothing, unwritable directories, a full disk (RLIMIT_FSIZE in a
   child) and the logging_dir default. The file contents are checked by check_events.py / check_tensorboard.py,
   the allocations by test_trackers_alloc.c. */
#include "accel.h"
#include "accel_trackers.h"
#include "accel_test.h"
#include "accel_test_fs.h"
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char last_msg[2048];
static int nlogged;
static void capture(void *user, accel_log_level level, const char *msg) {
    (void)user;
    /* failures reach the logger at debug level (errors are returned, not printed) */
    if (level == ACCEL_LOG_DEBUG) { snprintf(last_msg, sizeof last_msg, "%s", msg); nlogged++; }
}


static long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

static int count_lines(const char *path) {
    FILE *f = fopen(path, "rb");
    int c, n = 0;
    if (!f) return -1;
    while ((c = fgetc(f)) != EOF) n += c == '\n';
    fclose(f);
    return n;
}

static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    if (!d) return -1;
    while ((e = readdir(d)) != NULL) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

static char tmpdir[256];

static void init_acc(accel *acc, const char *project_dir) {
    accel_desc d;
    memset(&d, 0, sizeof d);
    d.no_mpi = 1;
    d.log_fn = capture;
    d.log_level = ACCEL_LOG_DEBUG;
    d.project_dir = project_dir;
    AT_EQ_INT(accel_init(acc, &d), ACCEL_OK);
}

static void test_crc32c(void) {
    unsigned char buf[32];
    int i;
    uint32_t c;
    memset(buf, 0, 32);
    AT_EQ_INT(accel_track_crc32c(buf, 32), 0x8A9136AAu);
    memset(buf, 0xFF, 32);
    AT_EQ_INT(accel_track_crc32c(buf, 32), 0x62A8AB43u);
    for (i = 0; i < 32; ++i) buf[i] = (unsigned char)i;
    AT_EQ_INT(accel_track_crc32c(buf, 32), 0x46DD794Eu);
    for (i = 0; i < 32; ++i) buf[i] = (unsigned char)(31 - i);
    AT_EQ_INT(accel_track_crc32c(buf, 32), 0x113FDB5Cu);
    AT_EQ_INT(accel_track_crc32c("123456789", 9), 0xE3069283u);
    AT_EQ_INT(accel_track_crc32c("", 0), 0u);
    /* TFRecord masking, from the formula in tensorboard's record_writer */
    c = 0xE3069283u;
    AT_EQ_INT(accel_track_masked_crc32c("123456789", 9), (uint32_t)(((c >> 15) | (c << 17)) + 0xA282EAD8u));
}

static void test_parse(void) {
    AT_EQ_INT(accel_track_parse_log_with("tensorboard"), ACCEL_TRACK_TENSORBOARD);
    AT_EQ_INT(accel_track_parse_log_with("JSONL"), ACCEL_TRACK_JSONL);
    AT_EQ_INT(accel_track_parse_log_with("all"), ACCEL_TRACK_ALL);
    AT_EQ_INT(accel_track_parse_log_with(" TensorBoard , jsonl "), ACCEL_TRACK_ALL);
    AT_EQ_INT(accel_track_parse_log_with("none"), ACCEL_TRACK_NONE);
    AT_EQ_INT(accel_track_parse_log_with("wandb"), -1);
    AT_EQ_INT(accel_track_parse_log_with("tensorboard,wandb"), -1);
    AT_EQ_INT(accel_track_parse_log_with(""), -1);
    AT_EQ_INT(accel_track_parse_log_with(","), -1);
    AT_EQ_INT(accel_track_parse_log_with("none,jsonl"), -1);
    AT_EQ_INT(accel_track_parse_log_with(NULL), -1);
}

static void test_env_and_desc(void) {
    accel acc;
    accel_track t;
    accel_track_desc td;
    init_acc(&acc, tmpdir);
    memset(&td, 0, sizeof td);
    unsetenv("ACCEL_LOG_WITH");
    AT_EQ_INT(accel_track_init(&acc, &t, &td), ACCEL_OK);
    AT_EQ_INT(t.log_with, 0); /* Accelerate's log_with=None */
    AT_EQ_INT(t.flush_secs, 120);
    setenv("ACCEL_LOG_WITH", "jsonl", 1);
    AT_EQ_INT(accel_track_init(&acc, &t, &td), ACCEL_OK);
    AT_EQ_INT(t.log_with, ACCEL_TRACK_JSONL);
    td.log_with = ACCEL_TRACK_TENSORBOARD; /* the desc wins over the environment */
    AT_EQ_INT(accel_track_init(&acc, &t, &td), ACCEL_OK);
    AT_EQ_INT(t.log_with, ACCEL_TRACK_TENSORBOARD);
    td.log_with = ACCEL_TRACK_NONE;
    AT_EQ_INT(accel_track_init(&acc, &t, &td), ACCEL_OK);
    AT_EQ_INT(t.log_with, 0);
    td.log_with = 0;
    setenv("ACCEL_LOG_WITH", "wandb", 1);
    AT_EQ_INT(accel_track_init(&acc, &t, &td), ACCEL_ERR_ENVIRONMENT);
    AT_CONTAINS(accel_last_error(&acc), "ACCEL_LOG_WITH=\"wandb\"");
    unsetenv("ACCEL_LOG_WITH");
    td.log_with = 0x40;
    AT_EQ_INT(accel_track_init(&acc, &t, &td), ACCEL_ERR_INVALID_ARGUMENT);
    AT_CONTAINS(accel_last_error(&acc), "log_with");
    td.log_with = ACCEL_TRACK_ALL;
    td.flush_secs = strtod("nan", NULL);
    AT_EQ_INT(accel_track_init(&acc, &t, &td), ACCEL_ERR_INVALID_ARGUMENT);
    td.flush_secs = -1;
    AT_EQ_INT(accel_track_init(&acc, &t, &td), ACCEL_OK);
    AT_CHECK(t.flush_secs < 0);
    /* logging_dir: the core resolved desc.project_dir into acc.desc.logging_dir */
    AT_EQ_STR(t.logging_dir, tmpdir);
    td.logging_dir = "/somewhere/else";
    AT_EQ_INT(accel_track_init(&acc, &t, &td), ACCEL_OK);
    AT_EQ_STR(t.logging_dir, "/somewhere/else");
    AT_EQ_INT(accel_track_init(&acc, NULL, &td), ACCEL_ERR_INVALID_ARGUMENT);
    AT_EQ_INT(accel_track_init(NULL, &t, &td), ACCEL_ERR_INVALID_ARGUMENT);
    AT_CONTAINS(accel_last_error(NULL), "acc is NULL");
    /* a failed init leaves a zeroed tracker, and deinit is fine on it (and on NULL, and twice) */
    AT_EQ_INT(t.state, ACCEL_TRACK_STATE_UNSET);
    AT_CHECK(t.acc == NULL);
    AT_EQ_INT(accel_track_deinit(&t), ACCEL_OK);
    AT_EQ_INT(accel_track_deinit(&t), ACCEL_OK);
    AT_EQ_INT(accel_track_deinit(NULL), ACCEL_OK);
    {
        accel_track z;
        memset(&z, 0, sizeof z);
        AT_EQ_INT(accel_track_deinit(&z), ACCEL_OK);
        AT_EQ_INT(accel_track_log(&z, NULL, 0, 0), ACCEL_ERR_INVALID_ARGUMENT); /* not initialized: no crash */
        AT_EQ_INT(accel_track_init_trackers(&z, "p", NULL, 0), ACCEL_ERR_STATE);
    }
    /* a ready tracker that never started a run: deinit ends it */
    AT_EQ_INT(accel_track_init(&acc, &t, &td), ACCEL_OK);
    AT_EQ_INT(accel_track_deinit(&t), ACCEL_OK);
    AT_EQ_INT(t.state, ACCEL_TRACK_STATE_ENDED);
    AT_EQ_INT(accel_track_init_trackers(&t, "p", NULL, 0), ACCEL_ERR_STATE);
    AT_CONTAINS(accel_last_error(&acc), "after accel_track_deinit");
    accel_shutdown(&acc);
}

static void test_lifecycle(void) {
    accel acc;
    accel_track t;
    accel_track_desc td;
    accel_track_value v[3];
    accel_track_param cfg[2];
    char path[512];
    long ev_size;
    int lines;
    init_acc(&acc, tmpdir);
    memset(&td, 0, sizeof td);
    td.log_with = ACCEL_TRACK_ALL;
    td.flush_secs = -1; /* every record reaches the file: sizes below are exact */
    AT_EQ_INT(accel_track_init(&acc, &t, &td), ACCEL_OK);
    v[0] = accel_track_scalar("loss", 1.5);
    v[1] = accel_track_scalar("lr", 0.1);
    v[2] = accel_track_scalar("loss", 2.0);
    AT_EQ_INT(accel_track_log(&t, v, 1, 0), ACCEL_ERR_STATE); /* before init_trackers */
    AT_CONTAINS(accel_last_error(&acc), "before init_trackers");
    AT_EQ_INT(accel_track_init_trackers(&t, "", NULL, 0), ACCEL_ERR_INVALID_ARGUMENT);
    AT_EQ_INT(accel_track_init_trackers(&t, NULL, NULL, 0), ACCEL_ERR_INVALID_ARGUMENT);
    AT_EQ_INT(accel_track_init_trackers(&t, "p", NULL, 2), ACCEL_ERR_INVALID_ARGUMENT);
    cfg[0] = accel_track_param_number("lr", 0.1);
    cfg[1] = accel_track_param_string("lr", "dup");
    AT_EQ_INT(accel_track_init_trackers(&t, "life", cfg, 2), ACCEL_ERR_INVALID_ARGUMENT);
    AT_CONTAINS(accel_last_error(&acc), "same name");
    cfg[1] = accel_track_param_string("model", NULL);
    AT_EQ_INT(accel_track_init_trackers(&t, "life", cfg, 2), ACCEL_ERR_INVALID_ARGUMENT);
    snprintf(path, sizeof path, "%s/life", tmpdir);
    AT_EQ_INT(file_size(path), -1); /* nothing created by the failed calls */
    AT_EQ_INT(t.state, ACCEL_TRACK_STATE_READY);

    cfg[1] = accel_track_param_string("model", "m");
    AT_EQ_INT(accel_track_init_trackers(&t, "life", cfg, 2), ACCEL_OK);
    AT_EQ_STR(t.run_dir, path);
    AT_CHECK(strstr(t.event_file, "/life/events.out.tfevents.") != NULL);
    AT_CHECK(strstr(t.jsonl_file, "/life/metrics.jsonl") != NULL);
    AT_CHECK(strstr(t.config_file, "/life/config.json") != NULL);
    AT_EQ_INT(count_entries(path), 3);
    AT_EQ_INT(accel_track_init_trackers(&t, "life", cfg, 2), ACCEL_ERR_STATE); /* twice */
    AT_EQ_INT(accel_track_log(&t, v, 2, 1), ACCEL_OK);
    AT_EQ_INT(accel_track_log(&t, v, 0, 2), ACCEL_OK); /* nothing to log: no line */
    ev_size = file_size(t.event_file);
    lines = count_lines(t.jsonl_file);
    AT_EQ_INT(lines, 1);
    /* bad values: an error, and no tracker writes anything */
    AT_EQ_INT(accel_track_log(&t, v, 3, 3), ACCEL_ERR_INVALID_ARGUMENT);
    AT_CONTAINS(accel_last_error(&acc), "same name \"loss\"");
    v[2] = accel_track_scalar("step", 1.0);
    AT_EQ_INT(accel_track_log(&t, v, 3, 3), ACCEL_ERR_INVALID_ARGUMENT);
    AT_CONTAINS(accel_last_error(&acc), "reserved");
    v[2] = accel_track_scalar("bad\xff", 1.0);
    AT_EQ_INT(accel_track_log(&t, v, 3, 3), ACCEL_ERR_INVALID_ARGUMENT);
    AT_CONTAINS(accel_last_error(&acc), "UTF-8");
    v[2] = accel_track_scalar("\xed\xa0\x80", 1.0); /* a UTF-16 surrogate encoded in UTF-8 */
    AT_EQ_INT(accel_track_log(&t, v, 3, 3), ACCEL_ERR_INVALID_ARGUMENT);
    v[2] = accel_track_scalar("", 1.0);
    AT_EQ_INT(accel_track_log(&t, v, 3, 3), ACCEL_ERR_INVALID_ARGUMENT);
    v[2] = accel_track_scalar(NULL, 1.0);
    AT_EQ_INT(accel_track_log(&t, v, 3, 3), ACCEL_ERR_INVALID_ARGUMENT);
    { /* more names than the fast duplicate check handles */
        static char nm[40][16];
        accel_track_value many[40];
        int k;
        for (k = 0; k < 40; ++k) { snprintf(nm[k], sizeof nm[k], "n%d", k); many[k] = accel_track_scalar(nm[k], k); }
        many[39].name = "n7";
        AT_EQ_INT(accel_track_log(&t, many, 40, 3), ACCEL_ERR_INVALID_ARGUMENT);
        AT_CONTAINS(accel_last_error(&acc), "values[7] and values[39]");
        many[5].name = "n7";
        AT_EQ_INT(accel_track_log(&t, many, 8, 3), ACCEL_ERR_INVALID_ARGUMENT);
        AT_CONTAINS(accel_last_error(&acc), "values[5] and values[7]");
    }
    AT_EQ_INT(accel_track_log(&t, NULL, 1, 3), ACCEL_ERR_INVALID_ARGUMENT);
    AT_EQ_INT(accel_track_log(&t, v, -1, 3), ACCEL_ERR_INVALID_ARGUMENT);
    AT_EQ_INT(file_size(t.event_file), ev_size);
    AT_EQ_INT(count_lines(t.jsonl_file), 1);
    AT_EQ_INT(t.logged, 1);
    AT_EQ_INT(accel_track_flush(&t), ACCEL_OK);

    AT_EQ_INT(accel_track_deinit(&t), ACCEL_OK);
    AT_EQ_INT(t.state, ACCEL_TRACK_STATE_ENDED);
    AT_CHECK(t.impl == NULL);
    AT_EQ_INT(accel_track_log(&t, v, 2, 4), ACCEL_ERR_STATE); /* after deinit: an error, no crash */
    AT_CONTAINS(accel_last_error(&acc), "after accel_track_deinit");
    AT_EQ_INT(accel_track_flush(&t), ACCEL_ERR_STATE);
    AT_EQ_INT(accel_track_deinit(&t), ACCEL_OK); /* idempotent */
    AT_EQ_INT(count_lines(t.jsonl_file), 1);
    AT_EQ_INT(file_size(t.event_file), ev_size);

    AT_EQ_INT(accel_track_init_trackers(&t, "life", NULL, 0), ACCEL_ERR_STATE); /* deinit ended the tracker */
    AT_EQ_INT(count_entries(path), 3);

    /* a second run in the same project: a new event file, metrics.jsonl continues */
    AT_EQ_INT(accel_track_init(&acc, &t, &td), ACCEL_OK);
    AT_EQ_INT(accel_track_init_trackers(&t, "life", NULL, 0), ACCEL_OK);
    AT_EQ_INT(accel_track_log(&t, v, 2, 5), ACCEL_OK);
    AT_EQ_INT(accel_track_deinit(&t), ACCEL_OK);
    AT_EQ_INT(count_entries(path), 4);
    AT_EQ_INT(count_lines(t.jsonl_file), 2);
    accel_shutdown(&acc);
}

/* flush_secs: records stay in the buffer until the interval has passed, then the next log() pushes them out. */
static void test_flush_interval(void) {
    accel acc;
    accel_track t;
    accel_track_desc td;
    accel_track_value v = accel_track_scalar("loss", 1.0);
    long header, after1, after2;
    double t0;
    init_acc(&acc, tmpdir);
    memset(&td, 0, sizeof td);
    td.log_with = ACCEL_TRACK_TENSORBOARD;
    td.flush_secs = 0.5;
    AT_EQ_INT(accel_track_init(&acc, &t, &td), ACCEL_OK);
    AT_EQ_INT(accel_track_init_trackers(&t, "flush", NULL, 0), ACCEL_OK);
    t0 = accel_now();
    header = file_size(t.event_file); /* init_trackers flushes the file_version record */
    AT_CHECK(header > 16);
    AT_EQ_INT(accel_track_log(&t, &v, 1, 1), ACCEL_OK);
    after1 = file_size(t.event_file);
    if (accel_now() - t0 < 0.4) AT_EQ_INT(after1, header); /* still buffered (unless this machine stalled) */
    usleep(600000);
    AT_EQ_INT(accel_track_log(&t, &v, 1, 2), ACCEL_OK);
    after2 = file_size(t.event_file);
    AT_CHECK(after2 > after1 && after2 > header);
    AT_EQ_INT(accel_track_deinit(&t), ACCEL_OK);
    AT_EQ_INT(file_size(t.event_file), after2); /* both records were out already */
    accel_shutdown(&acc);
}

static void test_no_tracker(void) {
    accel acc;
    accel_track t;
    accel_track_desc td;
    accel_track_value v = accel_track_scalar("x", 1);
    char path[512];
    init_acc(&acc, tmpdir);
    memset(&td, 0, sizeof td);
    td.log_with = ACCEL_TRACK_NONE;
    AT_EQ_INT(accel_track_init(&acc, &t, &td), ACCEL_OK);
    AT_EQ_INT(accel_track_init_trackers(&t, "nothing", NULL, 0), ACCEL_OK);
    AT_EQ_INT(accel_track_log(&t, &v, 1, 0), ACCEL_OK);
    AT_EQ_INT(accel_track_deinit(&t), ACCEL_OK);
    AT_EQ_INT(accel_track_log(&t, &v, 1, 0), ACCEL_ERR_STATE);
    snprintf(path, sizeof path, "%s/nothing", tmpdir);
    AT_EQ_INT(file_size(path), -1);
    AT_EQ_STR(t.run_dir, "");
    accel_shutdown(&acc);
}

static void test_unwritable(void) {
    accel acc;
    accel_track t;
    accel_track_desc td;
    accel_track_value v = accel_track_scalar("x", 1);
    char file[512], dir[600];
    FILE *f;
    init_acc(&acc, tmpdir);
    snprintf(file, sizeof file, "%s/a_file", tmpdir);
    f = fopen(file, "w");
    AT_CHECK(f != NULL);
    if (f) fclose(f);
    snprintf(dir, sizeof dir, "%s/sub", file); /* a directory below a regular file cannot exist */
    memset(&td, 0, sizeof td);
    td.log_with = ACCEL_TRACK_ALL;
    td.logging_dir = dir;
    AT_EQ_INT(accel_track_init(&acc, &t, &td), ACCEL_OK);
    nlogged = 0;
    AT_EQ_INT(accel_track_init_trackers(&t, "proj", NULL, 0), ACCEL_ERR_IO);
    AT_CONTAINS(accel_last_error(&acc), "cannot create logging directory");
    AT_CONTAINS(accel_last_error(&acc), "a_file/sub");
    AT_CONTAINS(accel_last_error(&acc), "not a directory");
    AT_CHECK(nlogged >= 1); /* reported through the log callback (debug level) too */
    AT_CONTAINS(last_msg, "not a directory");
    AT_EQ_INT(t.state, ACCEL_TRACK_STATE_READY);
    AT_EQ_INT(accel_track_log(&t, &v, 1, 0), ACCEL_ERR_STATE); /* no crash, a clear state error */
    AT_EQ_INT(accel_track_deinit(&t), ACCEL_OK);
    if (geteuid() != 0) { /* permissions mean nothing to root */
        char ro[600];
        snprintf(ro, sizeof ro, "%s/readonly", tmpdir);
        mkdir(ro, 0555);
        td.logging_dir = ro;
        AT_EQ_INT(accel_track_init(&acc, &t, &td), ACCEL_OK);
        AT_EQ_INT(accel_track_init_trackers(&t, "proj", NULL, 0), ACCEL_ERR_IO);
        AT_CONTAINS(accel_last_error(&acc), "Permission denied");
        chmod(ro, 0755);
    }
    /* retry elsewhere works: the failed call left the tracker re-usable */
    td.logging_dir = tmpdir;
    AT_EQ_INT(accel_track_init(&acc, &t, &td), ACCEL_OK);
    AT_EQ_INT(accel_track_init_trackers(&t, "retry", NULL, 0), ACCEL_OK);
    AT_EQ_INT(accel_track_log(&t, &v, 1, 0), ACCEL_OK);
    AT_EQ_INT(accel_track_deinit(&t), ACCEL_OK);
    accel_shutdown(&acc);
}

/* The child fills a "disk" (RLIMIT_FSIZE: writes past the limit fail with EFBIG) and reports through its exit
   code: bit set = expectation broken. The parent then reads what was written. */
static int disk_full_child(const char *dir) {
    accel acc;
    accel_track t;
    accel_track_desc td;
    accel_track_value v[2];
    struct rlimit rl;
    int i, first_tb = -1, first_jl = -1, bad = 0, n_err = 0;
    accel_result r;
    signal(SIGXFSZ, SIG_IGN);
    init_acc(&acc, dir);
    memset(&td, 0, sizeof td);
    td.log_with = ACCEL_TRACK_ALL;
    td.flush_secs = -1;
    if (accel_track_init(&acc, &t, &td) != ACCEL_OK) return 64;
    if (accel_track_init_trackers(&t, "full", NULL, 0) != ACCEL_OK) return 65;
    rl.rlim_cur = rl.rlim_max = 4096;
    if (setrlimit(RLIMIT_FSIZE, &rl) != 0) return 66;
    for (i = 0; i < 2000; ++i) {
        v[0] = accel_track_scalar("train/loss", 1.0 / (i + 1));
        v[1] = accel_track_scalar("train/accuracy", i * 0.001);
        nlogged = 0;
        r = accel_track_log(&t, v, 2, i);
        if (r != ACCEL_OK) {
            n_err++;
            if (r != ACCEL_ERR_IO) bad |= 1;
            if (nlogged && !strstr(last_msg, "File too large")) bad |= 2;
            if (first_tb < 0 && strstr(acc.last_error, "tensorboard")) first_tb = i;
            if (first_jl < 0 && strstr(acc.last_error, "jsonl")) first_jl = i;
        }
    }
    if (n_err < 1900) bad |= 4;   /* once disabled, every call reports the error */
    if (first_tb < 0 && first_jl < 0) bad |= 8;
    r = accel_track_deinit(&t);
    if (r != ACCEL_OK && r != ACCEL_ERR_IO) bad |= 16;
    if (accel_track_log(&t, v, 2, 0) != ACCEL_ERR_STATE) bad |= 32;
    accel_shutdown(&acc);
    return bad;
}

static void test_disk_full(void) {
    char dir[512], jl[600];
    pid_t pid;
    int status = 0;
    snprintf(dir, sizeof dir, "%s/diskfull", tmpdir);
    mkdir(dir, 0755);
    fflush(NULL);
    pid = fork();
    if (pid == 0) _exit(disk_full_child(dir));
    AT_CHECK(pid > 0);
    AT_CHECK(waitpid(pid, &status, 0) == pid);
    AT_CHECK(WIFEXITED(status));
    AT_EQ_INT(WEXITSTATUS(status), 0);
    snprintf(jl, sizeof jl, "%s/full/metrics.jsonl", dir);
    AT_CHECK(file_size(jl) > 0 && file_size(jl) <= 4096);
    AT_CHECK(count_lines(jl) > 10); /* the lines before the disk filled are there */
}

int main(void) {
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/accel-trk-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 1; }
    accel_set_default_logger(capture, NULL); /* errors without an accel (acc NULL) are expected here too */
    test_crc32c();
    test_parse();
    test_env_and_desc();
    test_lifecycle();
    test_flush_interval();
    test_no_tracker();
    test_unwritable();
    test_disk_full();
    at_rm_rf(tmpdir);
    return at_finish("trackers-unit");
}
