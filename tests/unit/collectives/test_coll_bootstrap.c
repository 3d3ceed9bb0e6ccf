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
#include <sys/stat.h>
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

typedef struct { int port, size, timeout_ms, delay0, delay_peers; const char *path; size_t bytes; } targ;
static int tcp_fn(int rank, void *a) {
    targ *t = (targ *)a;
    return child_tcp(rank, t->size, t->port, t->timeout_ms, rank == 0 ? t->delay0 : t->delay_peers);
}
static int file_fn(int rank, void *a) {
    targ *t = (targ *)a;
    return child_file(rank, t->path, t->timeout_ms, rank == 0 ? t->delay0 : 0, t->bytes);
}

/* ---- strangers (issue 26): the job's ranks have a secret; strays try to get the id or to stall the bootstrap */
static const char *job_secret = "bootstrap-secret";
static int tcp_secret_fn(int rank, void *a) {
    setenv("ACCEL_STORE_SECRET", job_secret, 1);
    return tcp_fn(rank, a);
}
/* a stray calling the bootstrap as rank 1 with the wrong secret (or none): refused, and its buffer never holds the
   id; exit 0 when so */
static int tcp_stray_fn(int kind, void *a) {
    targ *t = (targ *)a;
    unsigned char buf[IDBYTES], want[IDBYTES];
    accel_result r;
    if (kind == 0) setenv("ACCEL_STORE_SECRET", "wrong", 1);
    else unsetenv("ACCEL_STORE_SECRET");
    pattern(want, 5);
    memset(buf, 0, sizeof buf);
    r = accel_coll_tcp_broadcast(NULL, "127.0.0.1", t->port, 1, t->size, buf, IDBYTES, 3000);
    if (memcmp(buf, want, IDBYTES) == 0) return 7; /* it read the id */
    if (r == ACCEL_ERR_ENVIRONMENT && strstr(accel_last_error(NULL), "not admitted: wrong secret")) return 0;
    return 10 + (int)r;
}
/* a raw stray: speaks the protocol with a guessed proof, then reads everything rank 0 sends; the id must not be in
   it */
static int tcp_raw_stray_fn(int unused, void *a) {
    targ *t = (targ *)a;
    struct sockaddr_in sa;
    unsigned char hello[24 + 84], got[4096], want[IDBYTES];
    size_t n = 0;
    ssize_t k;
    int fd, tries = 0, i;
    (void)unused;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((unsigned short)t->port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    fd = socket(AF_INET, SOCK_STREAM, 0);
    while (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0 && tries++ < 400) {
        close(fd);
        fd = socket(AF_INET, SOCK_STREAM, 0);
        usleep(5000);
    }
    memset(hello, 0, sizeof hello);
    hello[0] = 0x41; hello[1] = 0x43; hello[2] = 0x53; hello[3] = 0x31; hello[4] = 1; /* "ACS1", HELLO */
    hello[16] = 84;
    hello[24] = 2; hello[28] = (unsigned char)t->size; hello[32] = 1; hello[36] = 1; /* v2, world, rank 1, keyed */
    for (i = 0; i < 64; ++i) hello[44 + i] = (unsigned char)(i * 13); /* nonce and a guessed proof */
    if (write(fd, hello, sizeof hello) != (ssize_t)sizeof hello) return 3;
    while (n < sizeof got && (k = read(fd, got + n, sizeof got - n)) > 0) n += (size_t)k;
    close(fd);
    pattern(want, 5);
    for (i = 0; i + IDBYTES <= (int)n; ++i)
        if (memcmp(got + i, want, IDBYTES) == 0) return 7;
    return n > 60 && strstr((const char *)got + 60 + 24, "not admitted: wrong secret") ? 0 : 4;
}
/* 20 connections that say nothing, held for 3 s */
static int tcp_idle_fn(int unused, void *a) {
    targ *t = (targ *)a;
    struct sockaddr_in sa;
    int fds[20], i, n = 0;
    (void)unused;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((unsigned short)t->port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (i = 0; i < 20; ++i) {
        int tries = 0;
        fds[i] = socket(AF_INET, SOCK_STREAM, 0);
        while (connect(fds[i], (struct sockaddr *)&sa, sizeof sa) != 0 && tries++ < 400) {
            close(fds[i]);
            fds[i] = socket(AF_INET, SOCK_STREAM, 0);
            usleep(5000);
        }
        n += tries <= 400;
    }
    sleep(3);
    for (i = 0; i < 20; ++i) close(fds[i]);
    return n == 20 ? 0 : 5;
}
static int file_secret_fn(int rank, void *a) {
    setenv("ACCEL_STORE_SECRET", job_secret, 1);
    return file_fn(rank, a);
}
static int file_other_secret_fn(int rank, void *a) {
    setenv("ACCEL_STORE_SECRET", "another-secret", 1);
    return file_fn(rank, a);
}
/* A process squatting rank 0's port (kind 0: it sends a challenge, then a WELCOME with a made-up id and no valid
   proof; kind 1: a header announcing a 1 GiB frame). The real rank 1 must refuse both at once, keep its buffer,
   and say why. Returns 0 when so. */
static int squatter_case(int kind) {
    struct sockaddr_in a;
    socklen_t al = sizeof a;
    int lfd = socket(AF_INET, SOCK_STREAM, 0), cfd, port, st;
    unsigned char buf[IDBYTES], fake[24 + 4 + 32 + IDBYTES], ch[60];
    pid_t pid;
    double t0;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(lfd, (struct sockaddr *)&a, sizeof a) != 0 || listen(lfd, 4) != 0 ||
        getsockname(lfd, (struct sockaddr *)&a, &al) != 0)
        return 1;
    port = ntohs(a.sin_port);
    pid = fork();
    if (pid == 0) { /* the squatter */
        cfd = accept(lfd, NULL, NULL);
        memset(ch, 0, sizeof ch);
        ch[0] = 0x41; ch[1] = 0x43; ch[2] = 0x53; ch[3] = 0x31; ch[4] = 6; ch[16] = 36; ch[24] = 2; /* CHALLENGE */
        if (kind == 0 && write(cfd, ch, sizeof ch) != (ssize_t)sizeof ch) _exit(1);
        memset(fake, 0x77, sizeof fake);
        memcpy(fake, ch, 24);
        fake[4] = 2; /* WELCOME */
        memset(fake + 8, 0, 16);
        if (kind == 0) { fake[16] = (unsigned char)(4 + 32 + IDBYTES); fake[24] = 1; fake[25] = fake[26] = fake[27] = 0; }
        else { fake[16] = 0; fake[19] = 0x40; } /* a WELCOME of 2^30 bytes, before any challenge */
        if (write(cfd, fake, kind == 0 ? sizeof fake : 24) < 0) _exit(1);
        sleep(3);
        _exit(0);
    }
    close(lfd);
    setenv("ACCEL_STORE_SECRET", job_secret, 1);
    memset(buf, 0, sizeof buf);
    t0 = accel_now();
    st = (int)accel_coll_tcp_broadcast(NULL, "127.0.0.1", port, 1, 2, buf, IDBYTES, 3000);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    if (accel_now() - t0 > 1.5) return 2;
    if (buf[0] == 0x77) return 3; /* took the squatter's bytes */
    if (kind == 0) return st == ACCEL_ERR_ENVIRONMENT && strstr(accel_last_error(NULL), "could not prove") ? 0 : 4;
    return st == ACCEL_ERR_FORMAT ? 0 : 5;
}

/* runs the job's ranks and the strays together: codes[0..NPROC) the ranks', codes[NPROC] the stray's */
typedef struct { child_fn job, stray; targ *t; int stray_arg; } mix;
static int mix_fn(int i, void *a) {
    mix *m = (mix *)a;
    return i < NPROC ? m->job(i, m->t) : m->stray(m->stray_arg, m->t);
}
static void strangers(const char *path) {
    static const child_fn strays[] = {tcp_stray_fn, tcp_stray_fn, tcp_raw_stray_fn, tcp_idle_fn};
    int codes[NPROC + 1], i, k;
    targ t;
    mix m;
    double dt;
#ifndef ACCEL_WITH_OPENSSL
    printf("strangers: skipped (built without ACCEL_WITH_OPENSSL: no secret can be checked)\n");
    return;
#endif
    memset(&t, 0, sizeof t);
    t.size = NPROC;
    t.timeout_ms = 8000;
    t.delay0 = 0;
    for (k = 0; k < 4; ++k) {
        pid_t pids[NPROC + 1];
        char ctx[64];
        snprintf(ctx, sizeof ctx, "tcp stray %d", k);
        at_context = ctx;
        t.port = accel_free_port();
        m.job = tcp_secret_fn;
        m.stray = strays[k];
        m.t = &t;
        m.stray_arg = k; /* tcp_stray_fn: 0 wrong secret, 1 none */
        /* rank 0 and the stray at once, the job's other ranks 400 ms later: the stray is served while rank 0 waits */
        t.delay_peers = 400;
        pids[NPROC] = fork();
        if (pids[NPROC] == 0) _exit(mix_fn(NPROC, &m));
        dt = run_children(0, NPROC, tcp_secret_fn, &t, codes);
        t.delay_peers = 0;
        for (i = 0; i < NPROC; ++i) AT_EQ_INT(codes[i], 0);
        AT_CHECK(dt < (k == 3 ? 1.9 : 4.0)); /* idle strays delay nobody (the peers start 0.4 s late) */
        {
            int st;
            waitpid(pids[NPROC], &st, 0);
            AT_EQ_INT(WIFEXITED(st) ? WEXITSTATUS(st) : 99, 0);
        }
    }
    at_context = "squatter on rank 0's port";
    AT_EQ_INT(squatter_case(0), 0);
    AT_EQ_INT(squatter_case(1), 0);
    /* file: garbage and a file sealed with another secret are there before rank 0 writes; the readers ignore them and
       read rank 0's, which only its user may read */
    for (k = 0; k < 2; ++k) {
        struct stat sb;
        at_context = k ? "file, another secret's file first" : "file, garbage first";
        remove(path);
        t.path = path;
        t.bytes = IDBYTES;
        t.timeout_ms = 8000;
        if (k == 0) {
            FILE *f = fopen(path, "wb");
            if (f) { fputs("ACCELNB2 but garbage after it", f); fclose(f); }
        } else {
            t.timeout_ms = 2000;
            run_children(0, 1, file_other_secret_fn, &t, codes); /* "rank 0" of someone else */
            AT_EQ_INT(codes[0], 0);
            t.timeout_ms = 600; /* alone, a reader of this job must not take it */
            run_children(1, 1, file_secret_fn, &t, codes);
            AT_EQ_INT(codes[0], 10 + ACCEL_ERR_TIMEOUT);
            t.timeout_ms = 8000;
        }
        t.delay0 = 300;
        dt = run_children(0, NPROC, file_secret_fn, &t, codes);
        for (i = 0; i < NPROC; ++i) AT_EQ_INT(codes[i], 0);
        AT_CHECK(stat(path, &sb) == 0 && (sb.st_mode & 0777) == 0600);
        t.delay0 = 0;
    }
    remove(path);
    at_context = "";
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
    /* a file that is not ours is ignored (whoever can write there cannot fail the job): the readers wait for rank
       0's and time out without it */
    {
        FILE *f = fopen(path, "wb");
        if (f) { fputs("not a bootstrap file at all", f); fclose(f); }
        dt = run_children(1, 1, file_fn, &t, codes);
        AT_EQ_INT(codes[0], 10 + ACCEL_ERR_TIMEOUT);
        remove(path);
    }
    strangers(path);
    return at_finish("collectives_bootstrap");
}
