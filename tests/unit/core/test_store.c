/* The core's host group without MPI: fork()ed processes with exactly the environment torchrun gives --no-python
   workers (torch/distributed/elastic/agent/server/local_elastic_agent.py: LOCAL_RANK RANK GROUP_RANK ROLE_RANK
   ROLE_NAME LOCAL_WORLD_SIZE WORLD_SIZE GROUP_WORLD_SIZE ROLE_WORLD_SIZE MASTER_ADDR MASTER_PORT
   TORCHELASTIC_RESTART_COUNT TORCHELASTIC_MAX_RESTARTS TORCHELASTIC_RUN_ID TORCHELASTIC_USE_AGENT_STORE
   NCCL_ASYNC_ERROR_HANDLING) and no MPI variables. Every core helper must work over the TCP store with the results an
   independent computation gives, and every fault (a rank that exits, never connects, sends garbage, belongs to
   another run or disagrees on the configuration) must end on every rank with an error naming the culprit within the
   deadline. Children are bounded by alarm(); the parent kills stragglers. */
#include "accel.h"
#include "accel_test.h"
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#define MAXP 6

static void set_int(const char *k, int v) {
    char b[32];
    snprintf(b, sizeof b, "%d", v);
    setenv(k, b, 1);
}

/* torchrun's worker environment (one node, static rendezvous: the agent's own store is on MASTER_PORT, so accel's
   is on MASTER_PORT + 1 — the test reserves both by picking ports from the kernel) */
static void torchrun_env(int rank, int P, int port, const char *run_id) {
    static const char *mpi[] = {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                                "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID",
                                "MPI_LOCALNRANKS", "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE", "SLURM_PROCID",
                                "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_STEP_ID", "ACCELERATE_MIXED_PRECISION",
                                "ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "ACCEL_STORE_PORT", "ACCEL_RUN_ID"};
    size_t i;
    for (i = 0; i < sizeof mpi / sizeof mpi[0]; ++i) unsetenv(mpi[i]);
    set_int("LOCAL_RANK", rank);
    set_int("RANK", rank);
    setenv("GROUP_RANK", "0", 1);
    set_int("ROLE_RANK", rank);
    setenv("ROLE_NAME", "default", 1);
    set_int("LOCAL_WORLD_SIZE", P);
    set_int("WORLD_SIZE", P);
    setenv("GROUP_WORLD_SIZE", "1", 1);
    set_int("ROLE_WORLD_SIZE", P);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    set_int("MASTER_PORT", port - 1);
    setenv("TORCHELASTIC_RESTART_COUNT", "0", 1);
    setenv("TORCHELASTIC_MAX_RESTARTS", "0", 1);
    setenv("TORCHELASTIC_RUN_ID", run_id, 1);
    setenv("TORCHELASTIC_USE_AGENT_STORE", "True", 1);
    setenv("NCCL_ASYNC_ERROR_HANDLING", "1", 1);
}

static void quiet(void *u, accel_log_level l, const char *m) { (void)u; (void)l; (void)m; }

static int init(accel *acc, int timeout_ms) {
    accel_desc d;
    memset(&d, 0, sizeof d);
    d.collective_timeout_ms = timeout_ms;
    d.log_fn = quiet;
    return (int)accel_init(acc, &d);
}

/* Each child writes "code message" to its pipe and exits with 0 (all checks passed) or 1. */
typedef int (*scenario)(int rank, int P, char *msg, size_t cap);

static int sc_helpers(int rank, int P, char *msg, size_t cap) {
    accel acc;
    int64_t iv[3];
    double dv[2];
    unsigned char bc[40], ag[MAXP * 8], mine[8];
    int i, fired = 0, bad = 0;
    if (init(&acc, 20000) != ACCEL_OK) { snprintf(msg, cap, "init: %s", accel_last_error(&acc)); return 1; }
    if (acc.launcher != ACCEL_LAUNCHER_TORCHRUN || strcmp(accel_host_group_name(&acc), "tcp") != 0 ||
        acc.num_processes != P || acc.process_index != rank || acc.distributed_type != ACCEL_DISTRIBUTED_MULTI_CPU)
        bad |= 1;
    if (accel_wait_for_everyone(&acc) != ACCEL_OK) bad |= 2;
    /* sums, maxima, minima against the closed forms */
    iv[0] = rank + 1; iv[1] = rank * rank; iv[2] = -rank;
    if (accel_host_allreduce_i64(&acc, iv, 3, ACCEL_HOST_SUM) != ACCEL_OK || iv[0] != P * (P + 1) / 2 ||
        iv[1] != (int64_t)(P - 1) * P * (2 * P - 1) / 6 || iv[2] != -(int64_t)P * (P - 1) / 2)
        bad |= 4;
    dv[0] = 0.5 * rank; dv[1] = -1.5 * rank;
    if (accel_host_allreduce_f64(&acc, dv, 2, ACCEL_HOST_MAX) != ACCEL_OK || dv[0] != 0.5 * (P - 1) || dv[1] != 0.0) bad |= 8;
    dv[0] = 0.5 * rank;
    if (accel_host_allreduce_f64(&acc, dv, 1, ACCEL_HOST_MIN) != ACCEL_OK || dv[0] != 0.0) bad |= 8;
    /* broadcast from a non-zero root */
    for (i = 0; i < 40; ++i) bc[i] = (unsigned char)(rank == 1 ? i * 7 + 3 : 0xEE);
    if (accel_host_broadcast(&acc, bc, sizeof bc, 1) != ACCEL_OK) bad |= 16;
    for (i = 0; i < 40; ++i) if (bc[i] != (unsigned char)(i * 7 + 3)) bad |= 16;
    /* all-gather in rank order */
    for (i = 0; i < 8; ++i) mine[i] = (unsigned char)(rank * 16 + i);
    if (accel_host_allgather(&acc, mine, ag, 8) != ACCEL_OK) bad |= 32;
    for (i = 0; i < 8 * P; ++i) if (ag[i] != (unsigned char)((i / 8) * 16 + i % 8)) bad |= 32;
    /* triggers: one rank sets, every rank fires once */
    if (rank == P - 1) accel_set_trigger(&acc);
    if (accel_check_trigger(&acc, &fired) != ACCEL_OK || !fired) bad |= 64;
    if (accel_check_trigger(&acc, &fired) != ACCEL_OK || fired) bad |= 64;
    /* RNG: rank 0's state everywhere */
    accel_set_seed(&acc, 1000 + (uint64_t)rank, 0);
    if (accel_synchronize_rng_state(&acc) != ACCEL_OK || acc.rng.seed != 1000) bad |= 128;
    /* objects over the store: ragged sizes (rank 1 sends nothing), then a list from the last rank replaces ours */
    {
        accel_blobs all, list;
        unsigned char obj[64];
        size_t n = (size_t)(rank == 1 ? 0 : rank * 7 + 1), k;
        int r;
        memset(&all, 0, sizeof all);
        memset(&list, 0, sizeof list);
        for (k = 0; k < n; ++k) obj[k] = (unsigned char)(rank * 31 + (int)k);
        if (accel_gather_object(&acc, obj, n, &all) != ACCEL_OK || all.count != P) bad |= 1024;
        else
            for (r = 0; r < P; ++r) {
                size_t want = (size_t)(r == 1 ? 0 : r * 7 + 1);
                if (all.offsets[r + 1] - all.offsets[r] != want) bad |= 1024;
                else
                    for (k = 0; k < want; ++k)
                        if (all.data[all.offsets[r] + k] != (unsigned char)(r * 31 + (int)k)) bad |= 1024;
            }
        accel_blobs_deinit(&all);
        {
            const void *items[2] = {"first", "second item"};
            size_t sizes[2] = {5, 11};
            if (accel_blobs_set(&acc, &list, rank == P - 1 ? 2 : 1, items, sizes) != ACCEL_OK) bad |= 2048;
        }
        if (accel_broadcast_object_list(&acc, &list, P - 1) != ACCEL_OK || list.count != 2 || list.offsets[1] != 5 ||
            list.offsets[2] != 16 || memcmp(list.data, "firstsecond item", 16) != 0)
            bad |= 2048;
        accel_blobs_deinit(&list);
    }
    /* a bad argument on one rank fails every rank (and names it) instead of leaving the others waiting */
    {
        accel_result r = accel_host_broadcast(&acc, bc, sizeof bc, rank == 2 ? P + 5 : 0);
        if (rank == 2 ? r != ACCEL_ERR_INVALID_ARGUMENT : (r != ACCEL_ERR_REMOTE || !strstr(accel_last_error(&acc), "rank 2")))
            bad |= 256;
    }
    if (accel_wait_for_everyone(&acc) != ACCEL_OK) bad |= 512; /* the group is still usable afterwards */
    snprintf(msg, cap, "bad=%d %s", bad, bad ? accel_last_error(&acc) : "");
    accel_shutdown(&acc);
    return bad ? 1 : 0;
}

/* main_process_first: rank 0 writes a file inside its block; every other rank must see it when its block starts */
static int sc_main_first(int rank, int P, char *msg, size_t cap) {
    accel acc;
    char path[256];
    int bad = 0;
    (void)P;
    snprintf(path, sizeof path, "/tmp/accel_store_first_%s", getenv("TORCHELASTIC_RUN_ID"));
    if (init(&acc, 20000) != ACCEL_OK) { snprintf(msg, cap, "init: %s", accel_last_error(&acc)); return 1; }
    if (accel_main_process_first_begin(&acc) != ACCEL_OK) bad |= 1;
    if (rank == 0) {
        FILE *f;
        usleep(200000);
        f = fopen(path, "w");
        if (f) fclose(f);
    } else if (access(path, F_OK) != 0) bad |= 2;
    if (accel_main_process_first_end(&acc) != ACCEL_OK) bad |= 4;
    if (accel_wait_for_everyone(&acc) != ACCEL_OK) bad |= 8;
    if (rank == 0) unlink(path);
    snprintf(msg, cap, "bad=%d", bad);
    accel_shutdown(&acc);
    return bad ? 1 : 0;
}

/* the init agreement catches a mismatched configuration on one rank, on every rank */
static int sc_mismatch(int rank, int P, char *msg, size_t cap) {
    accel acc;
    accel_result r;
    (void)P;
    if (rank == 1) setenv("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "3", 1);
    r = (accel_result)init(&acc, 20000);
    snprintf(msg, cap, "%s", accel_last_error(&acc));
    accel_shutdown(&acc);
    return r == ACCEL_ERR_MISMATCH && strstr(msg, "gradient_accumulation_steps") && strstr(msg, "rank 1=3") ? 0 : 1;
}

/* a rank whose own configuration is broken still joins, so the others learn it at once */
static int sc_local_error(int rank, int P, char *msg, size_t cap) {
    accel acc;
    accel_result r;
    (void)P;
    if (rank == 2) setenv("ACCELERATE_MIXED_PRECISION", "fp13", 1);
    r = (accel_result)init(&acc, 20000);
    snprintf(msg, cap, "%s", accel_last_error(&acc));
    accel_shutdown(&acc);
    if (rank == 2) return r == ACCEL_ERR_ENVIRONMENT && strstr(msg, "fp13") ? 0 : 1;
    return r == ACCEL_ERR_REMOTE && strstr(msg, "rank 2") && strstr(msg, "fp13") ? 0 : 1;
}

/* rank 2 exits right after init: the next collective fails on the others, naming it, within the deadline */
static int sc_exit_early(int rank, int P, char *msg, size_t cap) {
    accel acc;
    accel_result r;
    double t0;
    (void)P;
    if (init(&acc, 4000) != ACCEL_OK) { snprintf(msg, cap, "init: %s", accel_last_error(&acc)); return 1; }
    if (rank == 2) _exit(0);
    t0 = accel_now();
    r = accel_wait_for_everyone(&acc);
    snprintf(msg, cap, "%.1fs %s", accel_now() - t0, accel_last_error(&acc));
    accel_shutdown(&acc);
    return r != ACCEL_OK && strstr(msg, "rank") && strstr(msg, "2") && accel_now() - t0 < 8.0 ? 0 : 1;
}

/* rank 2 never starts accel: init fails everywhere else within the deadline, naming it */
static int sc_never(int rank, int P, char *msg, size_t cap) {
    accel acc;
    accel_result r;
    (void)P;
    if (rank == 2) { sleep(6); _exit(0); }
    r = (accel_result)init(&acc, 3000);
    snprintf(msg, cap, "%s", accel_last_error(&acc));
    accel_shutdown(&acc);
    if (rank == 0) return r == ACCEL_ERR_TIMEOUT && strstr(msg, "rank(s) 2 did not connect") ? 0 : 1;
    return r != ACCEL_OK && strstr(msg, "rank(s) 2") ? 0 : 1; /* rank 1 hears it from the store */
}

/* rank 1 belongs to another run (torchrun's run id): refused on every rank */
static int sc_other_run(int rank, int P, char *msg, size_t cap) {
    accel acc;
    accel_result r;
    (void)P;
    if (rank == 1) setenv("TORCHELASTIC_RUN_ID", "someone-else", 1);
    r = (accel_result)init(&acc, 4000);
    snprintf(msg, cap, "%s", accel_last_error(&acc));
    accel_shutdown(&acc);
    if (rank == 2) return r != ACCEL_OK ? 0 : 1; /* told by the store, or timed out waiting for it */
    return r != ACCEL_OK && strstr(msg, "another run") ? 0 : 1;
}

/* a stranger connects to the store's port and sends garbage: dropped, the job goes on */
static int sc_stranger(int rank, int P, char *msg, size_t cap) {
    accel acc;
    int bad = 0;
    if (rank == P - 1) { /* send junk first, then join normally */
        struct sockaddr_in a;
        int fd = socket(AF_INET, SOCK_STREAM, 0), port = atoi(getenv("MASTER_PORT")) + 1, tries = 0;
        memset(&a, 0, sizeof a);
        a.sin_family = AF_INET;
        a.sin_port = htons((unsigned short)port);
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        while (connect(fd, (struct sockaddr *)&a, sizeof a) != 0 && tries++ < 200) {
            close(fd);
            fd = socket(AF_INET, SOCK_STREAM, 0);
            usleep(20000);
        }
        if (write(fd, "GET / HTTP/1.0\r\n\r\nxxxxxxxxxxxxxxxxxxxxxxxxxxxx", 46) < 0) bad |= 1;
        close(fd);
    }
    if (init(&acc, 20000) != ACCEL_OK) { snprintf(msg, cap, "init: %s", accel_last_error(&acc)); return 1; }
    if (accel_wait_for_everyone(&acc) != ACCEL_OK) bad |= 2;
    snprintf(msg, cap, "bad=%d %s", bad, bad ? accel_last_error(&acc) : "");
    accel_shutdown(&acc);
    return bad ? 1 : 0;
}

/* rank 2 is an impostor speaking the protocol: a correct greeting, then garbage in the first collective. The store
   names rank 2 and every other rank fails with that message. */
static void put32(unsigned char *p, uint32_t v) { p[0] = (unsigned char)v; p[1] = (unsigned char)(v >> 8); p[2] = (unsigned char)(v >> 16); p[3] = (unsigned char)(v >> 24); }
static int sc_garbage(int rank, int P, char *msg, size_t cap) {
    accel acc;
    accel_result r;
    if (rank == 2) {
        struct sockaddr_in a;
        unsigned char frame[24 + 16 + 64], junk[64];
        const char *run = getenv("TORCHELASTIC_RUN_ID");
        uint32_t tl = (uint32_t)strlen(run);
        int fd = socket(AF_INET, SOCK_STREAM, 0), tries = 0;
        memset(&a, 0, sizeof a);
        a.sin_family = AF_INET;
        a.sin_port = htons((unsigned short)(atoi(getenv("MASTER_PORT")) + 1));
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        while (connect(fd, (struct sockaddr *)&a, sizeof a) != 0 && tries++ < 200) {
            close(fd);
            fd = socket(AF_INET, SOCK_STREAM, 0);
            usleep(20000);
        }
        memset(frame, 0, sizeof frame);
        put32(frame, 0x31534341u); frame[4] = 1; /* HELLO */
        put32(frame + 8, 2);
        put32(frame + 16, 16 + tl);
        put32(frame + 24, 1); put32(frame + 28, (uint32_t)P); put32(frame + 32, 2); put32(frame + 36, tl);
        memcpy(frame + 40, run, tl);
        if (write(fd, frame, 40 + tl) < 0) _exit(3);
        if (read(fd, junk, 24) != 24) _exit(4); /* WELCOME */
        memset(junk, 0x5A, sizeof junk);    /* not a frame */
        if (write(fd, junk, sizeof junk) < 0) _exit(5);
        sleep(2);
        _exit(0);
    }
    r = (accel_result)init(&acc, 6000); /* the init agreement is the first collective */
    snprintf(msg, cap, "%s", accel_last_error(&acc));
    accel_shutdown(&acc);
    return r != ACCEL_OK && strstr(msg, "rank 2") && strstr(msg, "not an accel store frame") ? 0 : 1;
}

typedef struct { const char *name; scenario fn; int P; } job;

static void run(const job *j, int port, const char *run_id) {
    pid_t pid[MAXP];
    int fds[MAXP][2], r, status;
    char ctx[64];
    snprintf(ctx, sizeof ctx, "%s", j->name);
    at_context = ctx;
    for (r = 0; r < j->P; ++r) {
        if (pipe(fds[r]) != 0) { AT_CHECK(0); return; }
        pid[r] = fork();
        if (pid[r] == 0) {
            char msg[2048] = "";
            int code;
            close(fds[r][0]);
            alarm(40);
            torchrun_env(r, j->P, port, run_id);
            code = j->fn(r, j->P, msg, sizeof msg);
            if (write(fds[r][1], msg, strlen(msg)) < 0) code = 2;
            _exit(code);
        }
        close(fds[r][1]);
    }
    for (r = 0; r < j->P; ++r) {
        char buf[2048];
        ssize_t n = read(fds[r][0], buf, sizeof buf - 1);
        buf[n > 0 ? n : 0] = 0;
        close(fds[r][0]);
        waitpid(pid[r], &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            fprintf(stderr, "%s: rank %d status %d: %s\n", j->name, r, WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status), buf);
        AT_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    at_context = "";
}

int main(void) {
    static const job jobs[] = {
        {"helpers-3", sc_helpers, 3},     {"helpers-5", sc_helpers, 5},     {"main-first", sc_main_first, 4},
        {"mismatch", sc_mismatch, 3},     {"local-error", sc_local_error, 3}, {"exit-early", sc_exit_early, 3},
        {"never-connects", sc_never, 3},  {"other-run", sc_other_run, 3},   {"stranger", sc_stranger, 3},
        {"garbage", sc_garbage, 3},
    };
    size_t i;
    signal(SIGPIPE, SIG_IGN);
    for (i = 0; i < sizeof jobs / sizeof jobs[0]; ++i) {
        char run_id[64];
        int port = 0;
        while (port < 2) port = accel_free_port(); /* accel's store listens on MASTER_PORT + 1 = this port */
        snprintf(run_id, sizeof run_id, "run%d-%zu", (int)getpid(), i);
        run(&jobs[i], port, run_id);
    }
    return at_finish("core-store");
}
