/* Two-process checkpoint tests without MPI: fork()ed workers with a launcher's environment join the core's TCP store
   (rank 0 listens on MASTER_PORT). */
#ifndef CKPT_WORKERS_H
#define CKPT_WORKERS_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* What worker `rank` of a P-process job on one node sees; run_id keeps jobs apart. */
static inline void ckpt_worker_env(int rank, int P, int port, const char *run_id) {
    static const char *other[] = {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                                  "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_RANK", "PMI_SIZE", "SLURM_PROCID", "SLURM_NTASKS",
                                  "SLURM_LOCALID", "TORCHELASTIC_USE_AGENT_STORE", "ACCEL_STORE_PORT"};
    char v[32];
    size_t i;
    for (i = 0; i < sizeof other / sizeof other[0]; ++i) unsetenv(other[i]);
    snprintf(v, sizeof v, "%d", rank);
    setenv("RANK", v, 1);
    setenv("LOCAL_RANK", v, 1);
    snprintf(v, sizeof v, "%d", P);
    setenv("WORLD_SIZE", v, 1);
    setenv("LOCAL_WORLD_SIZE", v, 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    snprintf(v, sizeof v, "%d", port);
    setenv("MASTER_PORT", v, 1);
    setenv("ACCEL_RUN_ID", run_id, 1);
}

/* Runs fn(rank, P, arg) in P forked workers (each bounded by alarm(timeout_s)); returns how many did not exit 0. */
static inline int ckpt_run_workers(int P, int (*fn)(int rank, int P, void *arg), void *arg, int port,
                                   const char *run_id, unsigned timeout_s) {
    pid_t pid[16];
    int r, bad = 0, status;
    for (r = 0; r < P && r < 16; ++r) {
        pid[r] = fork();
        if (pid[r] == 0) {
            alarm(timeout_s);
            ckpt_worker_env(r, P, port, run_id);
            _exit(fn(r, P, arg));
        }
    }
    for (r = 0; r < P && r < 16; ++r) {
        waitpid(pid[r], &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "worker %d: %s %d\n", r, WIFEXITED(status) ? "exit" : "signal",
                    WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
            bad++;
        }
    }
    return bad;
}
#endif
