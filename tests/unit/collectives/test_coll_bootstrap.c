/* The NCCL bootstrap byte exchanges on the CPU: 4 fork()ed processes on 127.0.0.1 (TCP) and through a file, plus
   the failure cases (nobody listening on the port, rank 0 alone, missing file, wrong size) that must end with an
   error within the timeout. Every child is bounded by its own timeout and the parent kills stragglers. */
#include "accel.h"
#include "accel_collectives.h"
#include "accel_test.h"
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <time.h>
#include <unistd.h>

#define NPROC 4
#define IDBYTES 128

static void pattern(unsigned char *b, int seed) {
    int i;
    for (i = 0; i < IDBYTES; ++i) b[i] = (unsigned char)(i * 31 + seed * 7 + 1);
}

/* child exit codes: 0 ok (data matched), 10 + accel_result otherwise */
static int child_tcp(int rank, int size, int port, int timeout_ms, int delay_ms) {
    unsigned char buf[IDBYTES], want[IDBYTES];
    accel_result r;
    pattern(want, 5);
    if (rank == 0) memcpy(buf, want, IDBYTES);
    else memset(buf, 0, IDBYTES);
    if (delay_ms) usleep((useconds_t)delay_ms * 1000u);
    r = accel_coll_tcp_broadcast(NULL, "127.0.0.1", port, rank, size, buf, IDBYTES, timeout_ms);
    if (r != ACCEL_OK) return 10 + (int)r;
    return memcmp(buf, want, IDBYTES) == 0 ? 0 : 3;
}
static int child_file(int rank, const char *path, int timeout_ms, int delay_ms, size_t bytes) {
    unsigned char buf[IDBYTES * 2], want[IDBYTES];
    accel_result r;
    pattern(want, 9);
    if (rank == 0) memcpy(buf, want, IDBYTES);
    else memset(buf, 0, sizeof buf);
    if (delay_ms) usleep((useconds_t)delay_ms * 1000u);
    r = accel_coll_file_broadcast(NULL, path, rank, buf, bytes, timeout_ms);
    if (r != ACCEL_OK) return 10 + (int)r;
    return memcmp(buf, want, IDBYTES) == 0 ? 0 : 3;
}

/* runs fn for ranks [first, first+n) in children; codes[i] = exit code (or 99 if killed) */
typedef int (*child_fn)(int rank, void *arg);
static double run_children(int first, int n, child_fn fn, void *arg, int *codes) {
    pid_t pids[NPROC];
    int i, left = n;
    double t0 = accel_now();
    for (i = 0; i < n; ++i) {
        pids[i] = fork();
        if (pids[i] == 0) _exit(fn(first + i, arg));
        codes[i] = 99;
    }
    while (left > 0 && accel_now() - t0 < 20.0) {
        for (i = 0; i < n; ++i) {
            int st;
            if (pids[i] > 0 && waitpid(pids[i], &st, WNOHANG) == pids[i]) {
                codes[i] = WIFEXITED(st) ? WEXITSTATUS(st) : 98;
                pids[i] = -1;
                --left;
            }
        }
        usleep(5000);
    }
    for (i = 0; i < n; ++i)
        if (pids[i] > 0) { kill(pids[i], SIGKILL); waitpid(pids[i], NULL, 0); }
    return accel_now() - t0;
}

typedef struct { int port, size, timeout_ms, delay0; const char *path; size_t bytes; } targ;
static int tcp_fn(int rank, void *a) {
    targ *t = (targ *)a;
    return child_tcp(rank, t->size, t->port, t->timeout_ms, rank == 0 ? t->delay0 : 0);
}
static int file_fn(int rank, void *a) {
    targ *t = (targ *)a;
    return child_file(rank, t->path, t->timeout_ms, rank == 0 ? t->delay0 : 0, t->bytes);
}

int main(void) {
    int codes[NPROC], i;
    double dt;
    targ t;
    char path[256];
    accel_set_default_logger(NULL, NULL);
    setenv("ACCEL_LOG_LEVEL", "error", 0);

    /* TCP: 4 processes, rank 0 starts late (the others retry connecting) */
    memset(&t, 0, sizeof t);
    t.port = accel_free_port();
    t.size = NPROC;
    t.timeout_ms = 8000;
    t.delay0 = 300;
    AT_CHECK(t.port > 0);
    dt = run_children(0, NPROC, tcp_fn, &t, codes);
    for (i = 0; i < NPROC; ++i) AT_EQ_INT(codes[i], 0);
    AT_CHECK(dt < 8.0);

    /* wrong port: nobody listens → the 3 peers time out after ~0.5 s */
    t.port = accel_free_port();
    t.timeout_ms = 500;
    t.delay0 = 0;
    dt = run_children(1, NPROC - 1, tcp_fn, &t, codes);
    for (i = 0; i < NPROC - 1; ++i) AT_EQ_INT(codes[i], 10 + ACCEL_ERR_TIMEOUT);
    AT_CHECK(dt < 3.0);
    /* rank 0 alone: nobody connects → timeout */
    dt = run_children(0, 1, tcp_fn, &t, codes);
    AT_EQ_INT(codes[0], 10 + ACCEL_ERR_TIMEOUT);
    AT_CHECK(dt < 3.0);
    /* bad arguments fail at once */
    AT_EQ_INT(accel_coll_tcp_broadcast(NULL, "127.0.0.1", 0, 1, 4, codes, 4, 100), ACCEL_ERR_INVALID_ARGUMENT);
    AT_EQ_INT(accel_coll_tcp_broadcast(NULL, "no.such.host.invalid", 29500, 1, 4, codes, 4, 100), ACCEL_ERR_ENVIRONMENT);

    /* file: readers start first and poll; rank 0 writes atomically */
    snprintf(path, sizeof path, "/tmp/accel_coll_boot_%ld", (long)getpid());
    remove(path);
    t.path = path;
    t.timeout_ms = 8000;
    t.delay0 = 300;
    t.bytes = IDBYTES;
    dt = run_children(0, NPROC, file_fn, &t, codes);
    for (i = 0; i < NPROC; ++i) AT_EQ_INT(codes[i], 0);
    AT_CHECK(dt < 8.0);
    /* a reader expecting a different size: format error, not garbage */
    t.bytes = IDBYTES * 2;
    dt = run_children(1, 1, file_fn, &t, codes);
    AT_EQ_INT(codes[0], 10 + ACCEL_ERR_FORMAT);
    remove(path);
    /* missing file: timeout */
    t.bytes = IDBYTES;
    t.timeout_ms = 400;
    dt = run_children(1, NPROC - 1, file_fn, &t, codes);
    for (i = 0; i < NPROC - 1; ++i) AT_EQ_INT(codes[i], 10 + ACCEL_ERR_TIMEOUT);
    AT_CHECK(dt < 3.0);
    /* a file that is not ours */
    {
        FILE *f = fopen(path, "wb");
        if (f) { fputs("not a bootstrap file at all", f); fclose(f); }
        dt = run_children(1, 1, file_fn, &t, codes);
        AT_EQ_INT(codes[0], 10 + ACCEL_ERR_FORMAT);
        remove(path);
    }
    return at_finish("collectives_bootstrap");
}
