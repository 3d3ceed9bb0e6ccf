/* accel_data.h's dispatcher when a process is killed (SIGKILL, as `kill -9`) in the middle of an epoch: every other
   process must get an error naming the dead rank within the deadline — no hang, and no epoch that ends early as if
   the data were exhausted (a "silent short epoch").
     test_data_dispatch_death VICTIM            under mpirun (one process per rank; dispatch_death.sh judges the job)
     test_data_dispatch_death VICTIM store P [stop]  forks P ranks over accel's TCP store (torchrun's environment)
                                                and judges them itself; stop: the victim stops (SIGSTOP, a hung
                                                node: its sockets stay open) and the error comes at the deadline
   VICTIM 0 is the main (dispatching) process: it dies inside its loader's fetch, while the others wait for the next
   batch; any other VICTIM dies between two next() calls, while the main process broadcasts. Each surviving process
   prints "rank R pid N" after init and then one line: "rank R: ERROR after B batches in T s: <code>: <message>" or
   "rank R: EPOCH COMPLETE ..." (a failure).
   The deadline is ACCEL_COLLECTIVE_TIMEOUT (the callers set a few seconds). */
#include "accel.h"
#include "accel_data.h"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define BATCHES 40 /* the loader's batches per epoch: the victim dies long before the end */
#define ROWS 6
#define DIE_AT 4 /* the victim dies at its 5th next() */

static int g_sig = SIGKILL; /* SIGSTOP: the victim hangs instead (sockets open: only the deadline can tell) */

typedef struct loader {
    int next, die; /* die: raise g_sig at the next fetch */
    int64_t rows[ROWS];
} loader;

static accel_result fetch(void *user, const void **rows, int64_t *nrows, int *end) {
    loader *l = (loader *)user;
    int i;
    if (l->die) { l->die = 0; raise(g_sig); }
    if (l->next >= BATCHES) { l->next = 0; *end = 1; return ACCEL_OK; }
    for (i = 0; i < ROWS; ++i) l->rows[i] = (int64_t)l->next * ROWS + i;
    l->next++;
    *rows = l->rows;
    *nrows = ROWS;
    return ACCEL_OK;
}

/* Does msg name rank v ("rank 1", "from rank 1:", "rank(s) 1 did not ...")? */
static int names_rank(const char *msg, int v) {
    static const char *pre[] = {"rank ", "rank(s) "};
    char want[32];
    size_t i;
    for (i = 0; i < 2; ++i) {
        const char *p = msg;
        size_t n = (size_t)snprintf(want, sizeof want, "%s%d", pre[i], v);
        while ((p = strstr(p, want)) != NULL) {
            if (p[n] < '0' || p[n] > '9') return 1;
            p += n;
        }
    }
    return 0;
}

static void quiet(void *u, accel_log_level lvl, const char *m) { (void)u; (void)lvl; (void)m; }

/* One process: iterate an epoch; the victim dies part-way. Returns 0 when this surviving process got an error that
   names the victim within deadline + 5 s, else 1. */
static int run_rank(int victim, char *line, size_t cap) {
    accel acc;
    accel_desc dd;
    accel_data_dispatcher *d = NULL;
    accel_data_dispatcher_desc desc;
    loader l;
    int64_t out[ROWS], n;
    int end = 0, batches = 0, rank, ok;
    accel_result r;
    double t0, dt, limit;
    const char *msg;
    memset(&dd, 0, sizeof dd);
    dd.cpu = 1;
    dd.log_fn = quiet;
    if (accel_init(&acc, &dd) != ACCEL_OK) {
        snprintf(line, cap, "accel_init: %s", accel_last_error(&acc));
        return 1;
    }
    rank = acc.process_index;
    printf("rank %d pid %ld\n", rank, (long)getpid()); /* MPICH's launcher names the dead process by pid */
    memset(&l, 0, sizeof l);
    memset(&desc, 0, sizeof desc);
    desc.row_bytes = sizeof(int64_t);
    desc.fetch = fetch;
    desc.user = &l;
    if (accel_data_dispatcher_create(&acc, &desc, &d) != ACCEL_OK) {
        snprintf(line, cap, "rank %d: dispatcher_create: %s", rank, accel_last_error(&acc));
        accel_shutdown(&acc);
        return 1;
    }
    t0 = accel_now();
    for (;;) {
        if (rank == victim && batches == DIE_AT) {
            if (victim == 0) l.die = 1; /* inside the read-ahead of the next batch */
            else raise(g_sig);
        }
        t0 = accel_now();
        r = accel_data_dispatcher_next(d, out, ROWS, &n, &end);
        if (r != ACCEL_OK || end) break;
        batches++;
    }
    dt = accel_now() - t0;
    limit = acc.desc.collective_timeout_ms / 1000.0 + 5.0;
    msg = accel_last_error(&acc);
    if (!strncmp(msg, "[rank ", 6) && strstr(msg, "] ")) msg = strstr(msg, "] ") + 2; /* our own prefix */
    if (r == ACCEL_OK)
        snprintf(line, cap, "rank %d: EPOCH COMPLETE after %d batches (the victim, rank %d, is dead: a short epoch)",
                 rank, batches, victim);
    else
        snprintf(line, cap, "rank %d: ERROR after %d batches in %.1f s: %s: %s", rank, batches, dt,
                 accel_result_string(r), msg);
    ok = r != ACCEL_OK && names_rank(msg, victim) && dt < limit;
    printf("%s%s\n", line, ok ? "" : "   <-- expected an error naming the dead rank within the deadline");
    fflush(stdout);
    accel_data_dispatcher_destroy(d);
    accel_shutdown(&acc);
    return ok ? 0 : 1;
}

/* ---- store mode: P fork()ed ranks with the environment torchrun gives its workers, no MPI variables */
static int free_port(void) {
    struct sockaddr_in a;
    socklen_t al = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;
    if (fd < 0) return -1;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &al) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

static void set_int(const char *k, int v) {
    char b[32];
    snprintf(b, sizeof b, "%d", v);
    setenv(k, b, 1);
}

static int store_mode(int victim, int P) {
    static const char *mpi[] = {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                                "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID",
                                "MPI_LOCALNRANKS", "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE", "SLURM_PROCID",
                                "SLURM_STEP_ID", "ACCEL_STORE_PORT", "TORCHELASTIC_USE_AGENT_STORE"};
    pid_t pid[8];
    int fds[8][2], r, status, fail = 0, port = free_port();
    size_t i;
    if (port <= 0 || P > 8) { fprintf(stderr, "no free port / P > 8\n"); return 1; }
    for (i = 0; i < sizeof mpi / sizeof mpi[0]; ++i) unsetenv(mpi[i]);
    for (r = 0; r < P; ++r) {
        if (pipe(fds[r]) != 0) return 1;
        pid[r] = fork();
        if (pid[r] < 0) return 1;
        if (pid[r] == 0) {
            char line[2048] = "";
            int code;
            close(fds[r][0]);
            alarm(60); /* a hang ends as SIGALRM, which the parent reports */
            set_int("RANK", r);
            set_int("LOCAL_RANK", r);
            set_int("WORLD_SIZE", P);
            set_int("LOCAL_WORLD_SIZE", P);
            setenv("MASTER_ADDR", "127.0.0.1", 1);
            set_int("MASTER_PORT", port);
            code = run_rank(victim, line, sizeof line);
            if (write(fds[r][1], line, strlen(line)) < 0) code = 2;
            _exit(code);
        }
        close(fds[r][1]);
    }
    for (r = 0; r < P; ++r) {
        char buf[2048];
        ssize_t k;
        if (r == victim) continue; /* last: a stopped victim never closes its pipe */
        k = read(fds[r][0], buf, sizeof buf - 1);
        buf[k > 0 ? k : 0] = 0;
        close(fds[r][0]);
        waitpid(pid[r], &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "FAIL: rank %d: %s %d: %s\n", r, WIFEXITED(status) ? "exit" : "signal",
                    WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), buf);
            fail = 1;
        }
    }
    if (g_sig == SIGSTOP) { /* it must still be stopped, not dead */
        if (waitpid(pid[victim], &status, WNOHANG | WUNTRACED) != pid[victim] || !WIFSTOPPED(status)) {
            fprintf(stderr, "FAIL: the victim (rank %d) is not stopped\n", victim);
            fail = 1;
        }
        kill(pid[victim], SIGKILL);
    }
    waitpid(pid[victim], &status, 0);
    close(fds[victim][0]);
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL) {
        fprintf(stderr, "FAIL: the victim (rank %d) did not die of SIGKILL: status %d\n", victim, status);
        fail = 1;
    }
    printf("%s: store, %d ranks, rank %d %s mid-epoch\n", fail ? "FAIL" : "OK", P, victim,
           g_sig == SIGSTOP ? "stopped" : "killed");
    return fail;
}

int main(int argc, char **argv) {
    char line[2048];
    int victim;
    if (argc < 2) {
        fprintf(stderr, "usage: test_data_dispatch_death VICTIM [store P]\n");
        return 2;
    }
    victim = atoi(argv[1]);
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 5 && !strcmp(argv[4], "stop")) g_sig = SIGSTOP;
    if (argc >= 4 && !strcmp(argv[2], "store")) return store_mode(victim, atoi(argv[3]));
    return run_rank(victim, line, sizeof line);
}
