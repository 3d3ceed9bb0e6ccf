/* The program tests/unit/core/test_launch.sh starts under `accel launch`: checks what the launcher promised
   (torchrun's worker environment, accel's host group over the TCP store) and acts out the faults.
   usage: launch_child ok|rdzv|fail RANK CODE|sigkill RANK|sleep|preempt|echo|config PRECISION ACCUM|secret FILE
   rdzv: ok, and first one line "env: RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE GROUP_RANK GROUP_WORLD_SIZE ROLE_RANK
   ROLE_WORLD_SIZE" for tests/unit/core/launch_rdzv.py to compare with torchrun's assignment. */
#define _DEFAULT_SOURCE 1
#include "accel.h"
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

static int geti(const char *k) { const char *s = getenv(k); return s ? atoi(s) : -1; }

/* 1 when the file (a /proc cmdline: NUL-separated) contains needle */
static int file_has(const char *path, const char *needle) {
    char buf[65536];
    size_t n, i, k = strlen(needle);
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    for (i = 0; i + k <= n; ++i)
        if (!memcmp(buf + i, needle, k)) return 1;
    return 0;
}
/* the job's secret: 64 hex digits in the environment, on no command line (ours, the launcher's) */
static int secret_ok(void) {
    const char *s = getenv("ACCEL_STORE_SECRET");
    char pp[64];
    size_t i;
    if (!s || strlen(s) != 64) return 0;
    for (i = 0; i < 64; ++i)
        if (!strchr("0123456789abcdef", s[i])) return 0;
    snprintf(pp, sizeof pp, "/proc/%ld/cmdline", (long)getppid());
    return !file_has("/proc/self/cmdline", s) && !file_has(pp, s);
}

int main(int argc, char **argv) {
    accel acc;
    accel_desc d;
    const char *mode = argc > 1 ? argv[1] : "ok";
    int rank = geti("RANK"), world = geti("WORLD_SIZE"), bad = 0;
    int64_t v;
    memset(&d, 0, sizeof d);
    d.collective_timeout_ms = 20000;
    if (!strcmp(mode, "rdzv")) {
        printf("env: %d %d %d %d %d %d %d %d\n", rank, geti("LOCAL_RANK"), world, geti("LOCAL_WORLD_SIZE"),
               geti("GROUP_RANK"), geti("GROUP_WORLD_SIZE"), geti("ROLE_RANK"), geti("ROLE_WORLD_SIZE"));
        fflush(stdout);
    }
    if (!strcmp(mode, "echo")) {
        printf("hello from %d\npartial line without newline", rank);
        fflush(stdout);
        fprintf(stderr, "err from %d\n", rank);
        return 0;
    }
    if (accel_init(&acc, &d) != ACCEL_OK) { fprintf(stderr, "rank %d: accel_init: %s\n", rank, accel_last_error(&acc)); return 10; }
    /* torchrun's variables, consistent with each other and with what accel resolved */
    if (acc.launcher != ACCEL_LAUNCHER_TORCHRUN || acc.process_index != rank || acc.num_processes != world) bad |= 1;
    if (geti("LOCAL_RANK") != acc.local_process_index || geti("LOCAL_WORLD_SIZE") != acc.local_num_processes) bad |= 2;
    if (geti("ROLE_RANK") != rank || geti("ROLE_WORLD_SIZE") != world || !getenv("ROLE_NAME") || geti("GROUP_RANK") < 0 ||
        geti("GROUP_WORLD_SIZE") < 1)
        bad |= 4;
    if (world > 0 && world <= 4096) {
        /* torchrun's layout, from what every rank was given (nodes may run different counts): a rank is the number
           of ranks on lower nodes plus its local rank, and a node's LOCAL_WORLD_SIZE is how many ranks it has */
        int64_t mine[3], *all = (int64_t *)calloc((size_t)world * 3, sizeof *all);
        int i, below = 0, same = 0;
        mine[0] = geti("GROUP_RANK"); mine[1] = geti("LOCAL_RANK"); mine[2] = geti("LOCAL_WORLD_SIZE");
        if (!all || accel_host_allgather(&acc, mine, all, sizeof mine) != ACCEL_OK) bad |= 4;
        for (i = 0; all && i < world; ++i) {
            below += all[3 * i] < mine[0];
            same += all[3 * i] == mine[0] && all[3 * i + 2] == mine[2];
        }
        if (below + mine[1] != rank || same != mine[2]) bad |= 4;
        free(all);
    }
    if (!getenv("MASTER_ADDR") || geti("MASTER_PORT") < 1 || !getenv("ACCEL_RUN_ID")) bad |= 8;
    if (world > 1 && strcmp(accel_host_group_name(&acc), "tcp") != 0) bad |= 16;
    v = rank;
    if (accel_host_allreduce_i64(&acc, &v, 1, ACCEL_HOST_SUM) != ACCEL_OK || v != (int64_t)world * (world - 1) / 2) bad |= 32;
    if (!strcmp(mode, "config")) {
        accel_precision want = !strcmp(argv[2], "bf16") ? ACCEL_PRECISION_BF16 : !strcmp(argv[2], "fp16") ? ACCEL_PRECISION_FP16
                                                                                                        : ACCEL_PRECISION_NO;
        if (acc.mixed_precision != want || acc.gradient_accumulation_steps != atoi(argv[3])) bad |= 64;
    }
    if (!strcmp(mode, "secret")) {
        if (!secret_ok()) bad |= 256;
        if (rank == 0) {
            FILE *f = fopen(argv[2], "w");
            if (f) { fputs(getenv("ACCEL_STORE_SECRET") ? getenv("ACCEL_STORE_SECRET") : "", f); fclose(f); }
        }
    }
    if (!strcmp(mode, "fail") && rank == atoi(argv[2])) {
        fprintf(stderr, "rank %d: failing on purpose with code %s\n", rank, argv[3]);
        return atoi(argv[3]);
    }
    if (!strcmp(mode, "sigkill") && rank == atoi(argv[2])) raise(SIGKILL); /* the others fail in the barrier */
    if (!strcmp(mode, "sigkill")) return accel_wait_for_everyone(&acc) == ACCEL_OK ? 0 : 1;
    if (!strcmp(mode, "preempt")) { /* preemptible steps of 20 ms until every rank agrees to stop: exit 75 */
        int stop = 0, step = 0;
        if (accel_preemption_install(&acc, ACCEL_PREEMPT_SIGNALS) != ACCEL_OK) bad |= 512;
        printf("rank %d: waiting\n", rank);
        fflush(stdout);
        while (!bad && !stop && step < 3000) {
            usleep(20000);
            ++step;
            if (accel_should_stop(&acc, &stop) != ACCEL_OK) bad |= 1024;
        }
        printf("rank %d: stopped at step %d by signal %d (bad=%d)\n", rank, step, stop, bad);
        accel_shutdown(&acc);
        return bad ? 1 : stop ? ACCEL_EXIT_REQUEUE : 0;
    }
    if (!strcmp(mode, "fail") || !strcmp(mode, "sleep")) {
        printf("rank %d: waiting\n", rank);
        fflush(stdout);
        for (;;) pause(); /* only the launcher ends this */
    }
    if (accel_wait_for_everyone(&acc) != ACCEL_OK) bad |= 128;
    printf("rank %d of %d: %s (bad=%d)\n", rank, world, bad ? "FAILED" : "ok", bad);
    accel_shutdown(&acc);
    return bad ? 1 : 0;
}
