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
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <time.h>
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

/* rank 0 starts late: the others say once, while they wait, where they wait (the store's address and port) */
static char late_log[512];
static void keep_wait(void *u, accel_log_level l, const char *m) {
    (void)u;
    if (l == ACCEL_LOG_WARN && strstr(m, "waiting for rank 0")) snprintf(late_log, sizeof late_log, "%s", m);
}
static int sc_late0(int rank, int P, char *msg, size_t cap) {
    accel acc;
    accel_desc d;
    accel_result r;
    char where[32];
    (void)P;
    snprintf(where, sizeof where, "127.0.0.1:%d", atoi(getenv("MASTER_PORT")) + 1); /* TORCHELASTIC_USE_AGENT_STORE */
    if (rank == 0) usleep(2500000);
    memset(&d, 0, sizeof d);
    d.collective_timeout_ms = 12000; /* the note comes after an eighth of it */
    d.log_fn = keep_wait;
    r = accel_init(&acc, &d);
    snprintf(msg, cap, "%s | %s", accel_last_error(&acc), late_log);
    accel_shutdown(&acc);
    if (rank == 0) return r == ACCEL_OK ? 0 : 1;
    return r == ACCEL_OK && strstr(late_log, "waiting for rank 0") && strstr(late_log, where) ? 0 : 1;
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

/* reads exactly n bytes (2 s at most); 0 ok */
static int read_n(int fd, unsigned char *b, size_t n) {
    double t0 = accel_now();
    while (n > 0 && accel_now() - t0 < 2.0) {
        ssize_t k = read(fd, b, n);
        if (k <= 0) return -1;
        b += k;
        n -= (size_t)k;
    }
    return n ? -1 : 0;
}
/* a raw connection to the store's port on 127.0.0.1 (retrying while rank 0 starts) */
static int connect_store(int port) {
    struct sockaddr_in a;
    int fd = socket(AF_INET, SOCK_STREAM, 0), tries = 0;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((unsigned short)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    while (connect(fd, (struct sockaddr *)&a, sizeof a) != 0 && tries++ < 1000) {
        close(fd);
        fd = socket(AF_INET, SOCK_STREAM, 0);
        usleep(5000);
    }
    return fd;
}
static int store_port(void) { return atoi(getenv("MASTER_PORT")) + 1; }

/* a stranger connects to the store's port and sends garbage: dropped, the job goes on */
static int sc_stranger(int rank, int P, char *msg, size_t cap) {
    accel acc;
    int bad = 0;
    if (rank == P - 1) { /* send junk first, then join normally */
        int fd = connect_store(store_port());
        if (write(fd, "GET / HTTP/1.0\r\n\r\nxxxxxxxxxxxxxxxxxxxxxxxxxxxx", 46) < 0) bad |= 1;
        close(fd);
    }
    if (init(&acc, 20000) != ACCEL_OK) { snprintf(msg, cap, "init: %s", accel_last_error(&acc)); return 1; }
    if (accel_wait_for_everyone(&acc) != ACCEL_OK) bad |= 2;
    snprintf(msg, cap, "bad=%d %s", bad, bad ? accel_last_error(&acc) : "");
    accel_shutdown(&acc);
    return bad ? 1 : 0;
}

/* rank 2 is an impostor speaking the protocol (no secret is set in this job, so it is admitted like any rank): a
   correct handshake, then garbage in the first collective. The store names rank 2 and every other rank fails with
   that message. */
static void put32(unsigned char *p, uint32_t v) { p[0] = (unsigned char)v; p[1] = (unsigned char)(v >> 8); p[2] = (unsigned char)(v >> 16); p[3] = (unsigned char)(v >> 24); }
static uint32_t get32(const unsigned char *p) {
    return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static int sc_garbage(int rank, int P, char *msg, size_t cap) {
    accel acc;
    accel_result r;
    if (rank == 2) {
        unsigned char frame[24 + 84 + 64], junk[64], ch[60];
        const char *run = getenv("TORCHELASTIC_RUN_ID");
        uint32_t tl = (uint32_t)strlen(run);
        int fd = connect_store(store_port());
        if (read_n(fd, ch, sizeof ch) != 0 || get32(ch + 4) != 6) _exit(6); /* the CHALLENGE */
        memset(frame, 0, sizeof frame);
        /* HELLO v2: version, world, rank, flags = 0, run id length, nonce, proof, run id */
        put32(frame, 0x31534341u); frame[4] = 1;
        put32(frame + 8, 2);
        put32(frame + 16, 84 + tl);
        put32(frame + 24, 2); put32(frame + 28, (uint32_t)P); put32(frame + 32, 2); put32(frame + 40, tl);
        memcpy(frame + 24 + 84, run, tl);
        if (write(fd, frame, 24 + 84 + tl) < 0) _exit(3);
        if (read_n(fd, junk, 28) != 0 || get32(junk + 4) != 2) _exit(4); /* WELCOME (flags 0: no secret) */
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

/* ---- close-on-exec: a program the trainer runs (fork + exec, as system() does) inherits none of the store's
   sockets (the listener, rank 0's accepted connections, a rank's connection to rank 0). The exec'd program is this
   test again with --count-sockets: its exit status is the number of sockets it has open, compared with what a
   child exec'd before accel_init has (sockets the test harness itself passes down are not the store's). */
static int count_sockets(void) {
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    char p[300], l[300];
    int n = 0;
    if (!d) return -1;
    while ((e = readdir(d)) != NULL) {
        ssize_t k;
        snprintf(p, sizeof p, "/proc/self/fd/%s", e->d_name);
        k = readlink(p, l, sizeof l - 1);
        if (k > 0 && (l[k] = 0, !strncmp(l, "socket:", 7))) ++n;
    }
    closedir(d);
    return n;
}
static int exec_count_sockets(void) {
    int st = -1;
    pid_t c = fork();
    if (c == 0) {
        execl("/proc/self/exe", "test_store", "--count-sockets", (char *)NULL);
        _exit(200);
    }
    if (c < 0 || waitpid(c, &st, 0) != c || !WIFEXITED(st)) return -1;
    return WEXITSTATUS(st);
}
static int sc_cloexec(int rank, int P, char *msg, size_t cap) {
    accel acc;
    int before = count_sockets(), child_before = exec_count_sockets(), mine, child, bad = 0;
    (void)P;
    if (init(&acc, 15000) != ACCEL_OK) { snprintf(msg, cap, "init: %s", accel_last_error(&acc)); return 1; }
    mine = count_sockets(); /* the store's sockets are open here now... */
    child = exec_count_sockets(); /* ...and must not be in the exec'd child */
    if (child_before < 0 || child_before > 99 || child != child_before) bad |= 1;
    if (mine <= before) bad |= 2; /* the check would prove nothing */
    if (accel_wait_for_everyone(&acc) != ACCEL_OK) bad |= 4;
    snprintf(msg, cap, "rank %d: bad=%d: sockets here %d (before init %d), in an exec'd child %d (before init %d)",
             rank, bad, mine, before, child, child_before);
    accel_shutdown(&acc);
    return bad ? 1 : 0;
}

/* ---- strangers (issue 26). The job has a secret (ACCEL_STORE_SECRET); strays run beside it. */
/* every rank: an all-reduce whose result a stray would change, then a barrier; the ranks other than 0 start
   delay_us late so that the strays are first in line */
static int secret_sum(int rank, int P, int delay_us, char *msg, size_t cap) {
    accel acc;
    int64_t v[2];
    double t0;
    int bad = 0;
    if (delay_us) usleep((useconds_t)delay_us);
    t0 = accel_now();
    if (init(&acc, 15000) != ACCEL_OK) { snprintf(msg, cap, "init: %s", accel_last_error(&acc)); return 1; }
    v[0] = rank + 1;
    v[1] = (int64_t)1 << (rank * 4);
    if (accel_host_allreduce_i64(&acc, v, 2, ACCEL_HOST_SUM) != ACCEL_OK || v[0] != P * (P + 1) / 2 ||
        v[1] != (((int64_t)1 << (4 * P)) - 1) / 15)
        bad |= 1;
    if (accel_wait_for_everyone(&acc) != ACCEL_OK) bad |= 2;
    snprintf(msg, cap, "bad=%d init=%.3f %s", bad, accel_now() - t0, bad ? accel_last_error(&acc) : "");
    accel_shutdown(&acc);
    return bad ? 1 : 0;
}
static int sc_secret_sum(int rank, int P, char *msg, size_t cap) {
    return secret_sum(rank, P, rank == 0 ? 0 : 800000, msg, cap);
}
/* the replaying stray records a handshake first: the ranks come later still */
static int sc_late_ranks(int rank, int P, char *msg, size_t cap) {
    return secret_sum(rank, P, rank == 0 ? 0 : 2500000, msg, cap);
}
/* a stray runs accel_init as RANK=1 of the job: it must be refused at once with the reason, and never join */
static int stray_init(const char *expect, char *msg, size_t cap) {
    accel acc;
    accel_result r;
    double t0 = accel_now();
    r = (accel_result)init(&acc, 8000);
    snprintf(msg, cap, "stray: %s (%.1f s)", accel_last_error(&acc), accel_now() - t0);
    accel_shutdown(&acc);
    return r == ACCEL_ERR_ENVIRONMENT && strstr(msg, expect) && accel_now() - t0 < 5.0 ? 0 : 1;
}
static int st_wrong_secret(int k, int P, char *msg, size_t cap) {
    (void)k; (void)P;
    setenv("ACCEL_STORE_SECRET", "not-the-secret", 1);
    return stray_init("not admitted: wrong secret", msg, cap);
}
static int st_no_secret(int k, int P, char *msg, size_t cap) { /* the right run id, no secret */
    (void)k; (void)P;
    unsetenv("ACCEL_STORE_SECRET");
    return stray_init("not admitted: wrong secret", msg, cap);
}
static int st_nothing(int k, int P, char *msg, size_t cap) { /* neither the secret nor the run id */
    (void)k; (void)P;
    unsetenv("ACCEL_STORE_SECRET");
    setenv("TORCHELASTIC_RUN_ID", "a-guess", 1);
    return stray_init("not admitted", msg, cap);
}
/* a process claiming WORLD_SIZE=99 (the job has no secret: the run id is all it needs to know): refused, the job
   goes on (it used to fail rank 0 at once and the others after the deadline) */
static int st_world99(int k, int P, char *msg, size_t cap) {
    (void)k; (void)P;
    setenv("WORLD_SIZE", "99", 1);
    setenv("LOCAL_WORLD_SIZE", "99", 1);
    setenv("ROLE_WORLD_SIZE", "99", 1);
    return stray_init("not admitted: WORLD_SIZE=99 is not the job's", msg, cap);
}
/* A recorded handshake replayed: the stray plays rank 0 to a real rank-1 process of the job (its secret, on another
   port), records the HELLO it answers with, then replays those bytes to the real store. Refused: the store's
   challenge differs from the one the recording answered. */
static int st_replay(int k, int P, char *msg, size_t cap) {
    unsigned char rec[24 + 84 + 64], ch[60], reply[24 + 300];
    struct sockaddr_in a;
    socklen_t al = sizeof a;
    int lfd = socket(AF_INET, SOCK_STREAM, 0), cfd, fd, i, fake_port;
    pid_t child;
    uint32_t len;
    (void)k; (void)P;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(lfd, (struct sockaddr *)&a, sizeof a) != 0 || listen(lfd, 4) != 0 ||
        getsockname(lfd, (struct sockaddr *)&a, &al) != 0) { snprintf(msg, cap, "replay: listen"); return 1; }
    fake_port = ntohs(a.sin_port);
    child = fork();
    if (child == 0) { /* a genuine rank 1 with the job's secret, pointed at the fake rank 0 */
        accel acc;
        char p[16];
        snprintf(p, sizeof p, "%d", fake_port);
        setenv("ACCEL_STORE_PORT", p, 1);
        (void)init(&acc, 3000);
        _exit(0);
    }
    cfd = accept(lfd, NULL, NULL);
    memset(ch, 0, sizeof ch);
    put32(ch, 0x31534341u); ch[4] = 6; put32(ch + 16, 36); put32(ch + 24, 2);
    for (i = 0; i < 32; ++i) ch[28 + i] = (unsigned char)(i * 37 + 11); /* the challenge the recording answers */
    if (cfd < 0 || write(cfd, ch, sizeof ch) != (ssize_t)sizeof ch || read_n(cfd, rec, 24) != 0) {
        snprintf(msg, cap, "replay: no HELLO recorded"); kill(child, SIGKILL); waitpid(child, NULL, 0); return 1;
    }
    len = get32(rec + 16);
    if (len > sizeof rec - 24 || read_n(cfd, rec + 24, len) != 0 || get32(rec + 24 + 12) != 1) {
        snprintf(msg, cap, "replay: the recorded HELLO carries no proof");
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
        return 1;
    }
    close(cfd); close(lfd);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    /* the replay, to the real store */
    fd = connect_store(store_port());
    if (read_n(fd, ch, sizeof ch) != 0 || get32(ch + 4) != 6) { snprintf(msg, cap, "replay: no challenge"); return 1; }
    if (write(fd, rec, 24 + len) != (ssize_t)(24 + len)) { snprintf(msg, cap, "replay: write"); return 1; }
    memset(reply, 0, sizeof reply);
    if (read_n(fd, reply, 24) != 0) { snprintf(msg, cap, "replay: no answer"); return 1; }
    len = get32(reply + 16);
    if (len > 300 || read_n(fd, reply + 24, len) != 0) { snprintf(msg, cap, "replay: short answer"); return 1; }
    snprintf(msg, cap, "replay: kind %u: %.200s", (unsigned)reply[4], (const char *)reply + 24);
    close(fd);
    return reply[4] == 5 && strstr((const char *)reply + 24, "not admitted: wrong secret") ? 0 : 1; /* ERROR */
}
/* 50 connections that never say a word, open before the ranks arrive and held through setup */
static int st_idle(int k, int P, char *msg, size_t cap) {
    int fds[50], i, n = 0;
    (void)k; (void)P;
    for (i = 0; i < 50; ++i) if ((fds[i] = connect_store(store_port())) >= 0) ++n;
    snprintf(msg, cap, "idle: %d connected", n);
    sleep(4);
    for (i = 0; i < 50; ++i) if (fds[i] >= 0) close(fds[i]);
    return n == 50 ? 0 : 1;
}
/* rank 0 of a single-node job: its store must not be reachable through the host's other addresses. The probe waits
   until the store listens on loopback, then tries every non-loopback IPv4 address of the host. */
static char host_ip[64];
static int st_probe(int k, int P, char *msg, size_t cap) {
    struct sockaddr_in a;
    int lo = connect_store(store_port()), fd, rc;
    (void)k; (void)P;
    if (lo < 0) { snprintf(msg, cap, "probe: the store never listened on loopback"); return 1; }
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((unsigned short)store_port());
    inet_pton(AF_INET, host_ip, &a.sin_addr);
    fd = socket(AF_INET, SOCK_STREAM, 0);
    rc = connect(fd, (struct sockaddr *)&a, sizeof a);
    snprintf(msg, cap, "probe: connect to %s:%d: %s", host_ip, store_port(), rc == 0 ? "reachable" : strerror(errno));
    close(fd);
    close(lo);
    return rc != 0 && errno == ECONNREFUSED ? 0 : 1;
}
/* A second process with the job's secret claims RANK=1 first: it is rank 1; the real rank 1, later, is told the job
   is full (and the job's results are the twin's, a process of the job). */
static int st_twin(int k, int P, char *msg, size_t cap) {
    (void)k;
    return secret_sum(1, P, 0, msg, cap);
}
static int sc_twin_job(int rank, int P, char *msg, size_t cap) {
    if (rank == 1) { /* after the twin, while rank 2 has not arrived yet (setup still open) */
        usleep(300000);
        return stray_init("not admitted: the job is full", msg, cap);
    }
    return secret_sum(rank, P, rank ? 1000000 : 0, msg, cap);
}

/* the idle-strays check: rank 0's setup time without strays (the baseline, same shape) and with 50 of them */
static char idle_file[128];
static int idle_job(int rank, int P, int with_strays, char *msg, size_t cap) {
    double t0;
    int rc;
    if (rank != 0) return secret_sum(rank, P, 300000, msg, cap);
    t0 = accel_now();
    rc = secret_sum(rank, P, 0, msg, cap);
    if (!with_strays) {
        FILE *f = fopen(idle_file, "w");
        if (f) { fprintf(f, "%.6f\n", accel_now() - t0); fclose(f); }
        return rc;
    } else {
        double base = 1e9, t = accel_now() - t0;
        FILE *f = fopen(idle_file, "r");
        if (!f || fscanf(f, "%lf", &base) != 1) base = 1e9;
        if (f) fclose(f);
        snprintf(msg + strlen(msg), cap - strlen(msg), " setup %.3f s with 50 idle strays, %.3f s without", t, base);
        return rc == 0 && t <= base + 1.0 ? 0 : 1;
    }
}
static int sc_idle_base(int rank, int P, char *msg, size_t cap) { return idle_job(rank, P, 0, msg, cap); }
static int sc_idle_strays(int rank, int P, char *msg, size_t cap) { return idle_job(rank, P, 1, msg, cap); }
/* rank 1 arrives 1.5 s late: the probe looks at the store while it waits */
static int sc_slow1(int rank, int P, char *msg, size_t cap) {
    return secret_sum(rank, P, rank ? 1500000 : 0, msg, cap);
}
/* a multi-node job on a non-loopback address without a secret: every rank refuses at once */
static int sc_policy_refused(int rank, int P, char *msg, size_t cap) {
    accel acc;
    accel_result r;
    double t0 = accel_now();
    (void)rank; (void)P;
    r = (accel_result)init(&acc, 8000);
    snprintf(msg, cap, "%s", accel_last_error(&acc));
    accel_shutdown(&acc);
    return r == ACCEL_ERR_ENVIRONMENT && strstr(msg, "non-loopback") && strstr(msg, "ACCEL_STORE_SECRET") &&
           accel_now() - t0 < 2.0 ? 0 : 1;
}

typedef struct {
    const char *name;
    scenario fn;
    int P;
    const char *secret; /* the job's ACCEL_STORE_SECRET (NULL: none) */
    scenario stray;     /* processes started beside the job with rank 1's environment (NULL: none) */
    int multinode;      /* 1: LOCAL_WORLD_SIZE=1 and MASTER_ADDR = the host's non-loopback address; 2: also trusted */
} job;

static void run(const job *j, int port, const char *run_id) {
    pid_t pid[MAXP + 1];
    int fds[MAXP + 1][2], r, status, n = j->P + (j->stray ? 1 : 0);
    char ctx[64];
    snprintf(ctx, sizeof ctx, "%s", j->name);
    at_context = ctx;
    for (r = 0; r < n; ++r) {
        if (pipe(fds[r]) != 0) { AT_CHECK(0); return; }
        pid[r] = fork();
        if (pid[r] == 0) {
            char msg[2048] = "";
            int code;
            close(fds[r][0]);
            alarm(40);
            torchrun_env(r < j->P ? r : 1, j->P, port, run_id);
            if (j->secret) setenv("ACCEL_STORE_SECRET", j->secret, 1);
            else unsetenv("ACCEL_STORE_SECRET");
            unsetenv("ACCEL_STORE_TRUSTED_NETWORK");
            if (j->multinode) {
                setenv("LOCAL_WORLD_SIZE", "1", 1);
                setenv("LOCAL_RANK", "0", 1);
                setenv("MASTER_ADDR", host_ip, 1);
                if (j->multinode == 2) setenv("ACCEL_STORE_TRUSTED_NETWORK", "1", 1);
            }
            code = r < j->P ? j->fn(r, j->P, msg, sizeof msg) : j->stray(r - j->P, j->P, msg, sizeof msg);
            if (write(fds[r][1], msg, strlen(msg)) < 0) code = 2;
            _exit(code);
        }
        close(fds[r][1]);
    }
    for (r = 0; r < n; ++r) {
        char buf[2048];
        ssize_t k = read(fds[r][0], buf, sizeof buf - 1);
        buf[k > 0 ? k : 0] = 0;
        close(fds[r][0]);
        waitpid(pid[r], &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            fprintf(stderr, "%s: %s %d status %d: %s\n", j->name, r < j->P ? "rank" : "stray", r,
                    WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status), buf);
        else if (getenv("ACCEL_TEST_VERBOSE"))
            fprintf(stderr, "%s: %s %d: %s\n", j->name, r < j->P ? "rank" : "stray", r, buf);
        AT_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    at_context = "";
}

/* the first non-loopback IPv4 address of this host ("" when it has none) */
static void find_host_ip(void) {
    struct ifaddrs *ifs = NULL, *i;
    host_ip[0] = 0;
    if (getifaddrs(&ifs) != 0) return;
    for (i = ifs; i && !host_ip[0]; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && (i->ifa_flags & IFF_UP) &&
            !(i->ifa_flags & IFF_LOOPBACK))
            inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, host_ip, sizeof host_ip);
    freeifaddrs(ifs);
}

/* accel_host_rendezvous (accel launch's node launchers; the multi-node cases run in launch_rdzv.py): bad arguments
   are refused naming the meeting, one member only copies, and a store's proof does not open a rendezvous (its own MAC
   label): a store rank with the job's secret and run id is refused as a wrong secret and named missing. */
static void rendezvous_checks(const char *secret) {
    accel a;
    unsigned char in[4] = {1, 2, 3, 4}, out[8] = {0};
    memset(&a, 0, sizeof a);
    AT_EQ_INT(accel_host_rendezvous(&a, "meet", "node", "127.0.0.1", 1234, 2, 2, NULL, in, out, 4, 1.0),
              ACCEL_ERR_INVALID_ARGUMENT);
    AT_CONTAINS(accel_last_error(&a), "meet: node 2 of 2");
    AT_EQ_INT(accel_host_rendezvous(&a, "meet", "node", "127.0.0.1", 0, 0, 2, NULL, in, out, 4, 1.0),
              ACCEL_ERR_INVALID_ARGUMENT);
    AT_EQ_INT(accel_host_rendezvous(&a, "meet", "node", "127.0.0.1", 1234, 0, 1, NULL, in, out, 4, 1.0), ACCEL_OK);
    AT_CHECK(memcmp(in, out, 4) == 0);
#ifdef ACCEL_WITH_OPENSSL
    {
        int port = accel_free_port(), st = 0;
        pid_t pid;
        char run_id[64];
        snprintf(run_id, sizeof run_id, "rdzv-label-%d", (int)getpid());
        setenv("ACCEL_STORE_SECRET", secret, 1);
        pid = fork();
        if (pid == 0) { /* rank 1 of a 2-rank store aimed at the rendezvous's port: the right secret and run id */
            accel acc;
            alarm(30);
            torchrun_env(1, 2, port, run_id);
            _exit(init(&acc, 3000) == ACCEL_OK ? 0 : 1);
        }
        memset(&a, 0, sizeof a);
        AT_EQ_INT(accel_host_rendezvous(&a, "meet", "node", "127.0.0.1", port, 0, 2, run_id, in, out, 4, 3.0),
                  ACCEL_ERR_TIMEOUT);
        AT_CONTAINS(accel_last_error(&a), "node(s) 1 did not connect within 3.0 s");
        AT_CONTAINS(accel_last_error(&a), "not admitted: wrong secret");
        waitpid(pid, &st, 0);
        AT_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1); /* refused: the store rank fails too */
        unsetenv("ACCEL_STORE_SECRET");
    }
#endif
}

int main(int argc, char **argv) {
    static char secret[64];
    static const job jobs[] = {
        {"helpers-3", sc_helpers, 3, NULL, NULL, 0},      {"helpers-5", sc_helpers, 5, NULL, NULL, 0},
        {"main-first", sc_main_first, 4, NULL, NULL, 0},  {"mismatch", sc_mismatch, 3, NULL, NULL, 0},
        {"local-error", sc_local_error, 3, NULL, NULL, 0}, {"exit-early", sc_exit_early, 3, NULL, NULL, 0},
        {"never-connects", sc_never, 3, NULL, NULL, 0},   {"other-run", sc_other_run, 3, NULL, NULL, 0},
        {"rank0-late", sc_late0, 3, NULL, NULL, 0},
        {"stranger", sc_stranger, 3, NULL, NULL, 0},      {"garbage", sc_garbage, 3, NULL, NULL, 0},
        /* issue 26: the job has a secret */
        {"secret-helpers", sc_helpers, 3, secret, NULL, 0},
        {"stray-wrong-secret", sc_secret_sum, 3, secret, st_wrong_secret, 0},
        {"stray-no-secret", sc_secret_sum, 3, secret, st_no_secret, 0},
        {"stray-nothing", sc_secret_sum, 3, secret, st_nothing, 0},
        {"stray-replay", sc_late_ranks, 3, secret, st_replay, 0},
        {"stray-world-99", sc_secret_sum, 3, NULL, st_world99, 0},
        {"twin-rank", sc_twin_job, 3, secret, st_twin, 0},
        {"idle-baseline", sc_idle_base, 3, secret, NULL, 0},
        {"idle-strays", sc_idle_strays, 3, secret, st_idle, 0},
        {"loopback-only", sc_slow1, 2, NULL, st_probe, 0},
        {"multinode-no-secret", sc_policy_refused, 2, NULL, NULL, 1},
        {"multinode-trusted", sc_secret_sum, 2, NULL, NULL, 2},
        {"multinode-secret", sc_secret_sum, 2, secret, NULL, 1},
        {"cloexec", sc_cloexec, 3, secret, NULL, 0},
    };
    size_t i;
    if (argc == 2 && !strcmp(argv[1], "--count-sockets")) { /* sc_cloexec's exec'd child */
        int n = count_sockets();
        return n < 0 ? 255 : n > 100 ? 100 : n;
    }
    signal(SIGPIPE, SIG_IGN);
    snprintf(secret, sizeof secret, "test-secret-%d-%ld", (int)getpid(), (long)time(NULL));
    snprintf(idle_file, sizeof idle_file, "/tmp/accel_store_idle_%d", (int)getpid());
    find_host_ip();
    for (i = 0; i < sizeof jobs / sizeof jobs[0]; ++i) {
        char run_id[64];
        int port = 0;
        if ((jobs[i].multinode || jobs[i].stray == st_probe) && !host_ip[0]) {
            printf("%s: skipped (this host has no non-loopback IPv4 address)\n", jobs[i].name);
            continue;
        }
        while (port < 2) port = accel_free_port(); /* accel's store listens on MASTER_PORT + 1 = this port */
        snprintf(run_id, sizeof run_id, "run%d-%zu", (int)getpid(), i);
        run(&jobs[i], port, run_id);
    }
    unlink(idle_file);
    rendezvous_checks(secret);
    return at_finish("core-store");
}
