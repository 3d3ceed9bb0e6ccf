/* accel.h under mpirun: ranks, local ranks, helpers, barrier, triggers, RNG sync, and the init agreement check.
   usage: test_core_mpi [basic|mismatch|env_error|precedence|different_calls|stall|train_timeout|missing_file] */
#include "accel.h"
#include "accel_data.h"
#include "accel_test.h"
#include <stdlib.h>
#include <unistd.h>

static int env_int(const char *a, const char *b) {
    const char *s = getenv(a);
    if (!s) s = getenv(b);
    return s ? atoi(s) : -1;
}

static void basic(void) {
    accel acc;
    accel_desc d;
    int fired = -1, i, expect_size;
    int64_t v[3];
    double f;
    memset(&d, 0, sizeof d);
    d.cpu = 1;
    AT_EQ_INT(accel_init(&acc, &d), ACCEL_OK);
    expect_size = env_int("OMPI_COMM_WORLD_SIZE", "PMI_SIZE");
    AT_EQ_INT(acc.num_processes, expect_size);
    AT_EQ_INT(acc.process_index, env_int("OMPI_COMM_WORLD_RANK", "PMI_RANK"));
    AT_EQ_INT(acc.local_process_index, acc.process_index); /* one node */
    AT_EQ_INT(acc.local_num_processes, acc.num_processes);
    AT_EQ_INT(acc.is_main_process, acc.process_index == 0);
    AT_EQ_INT(acc.is_local_main_process, acc.process_index == 0);
    AT_EQ_INT(acc.distributed_type, acc.num_processes > 1 ? ACCEL_DISTRIBUTED_MULTI_CPU : ACCEL_DISTRIBUTED_NO);
    AT_EQ_INT(accel_on_main_process(&acc), acc.num_processes == 1 || acc.process_index == 0);
    AT_EQ_INT(accel_on_last_process(&acc), acc.num_processes == 1 || acc.process_index == acc.num_processes - 1);
    AT_EQ_INT(accel_on_process(&acc, 1), acc.num_processes == 1 || acc.process_index == 1);

    /* small all-reduce: every rank can compute the expected values itself */
    v[0] = acc.process_index + 1; v[1] = -acc.process_index; v[2] = acc.process_index * 7 % 5;
    AT_EQ_INT(accel_host_allreduce_i64(&acc, v, 1, ACCEL_HOST_SUM), ACCEL_OK);
    AT_EQ_INT(v[0], (int64_t)acc.num_processes * (acc.num_processes + 1) / 2);
    AT_EQ_INT(accel_host_allreduce_i64(&acc, v + 1, 1, ACCEL_HOST_MIN), ACCEL_OK);
    AT_EQ_INT(v[1], -(acc.num_processes - 1));
    {
        int64_t mx = 0;
        for (i = 0; i < acc.num_processes; ++i) if (i * 7 % 5 > mx) mx = i * 7 % 5;
        AT_EQ_INT(accel_host_allreduce_i64(&acc, v + 2, 1, ACCEL_HOST_MAX), ACCEL_OK);
        AT_EQ_INT(v[2], mx);
    }
    f = 0.5 * acc.process_index;
    AT_EQ_INT(accel_host_allreduce_f64(&acc, &f, 1, ACCEL_HOST_SUM), ACCEL_OK);
    AT_NEAR(f, 0.25 * acc.num_processes * (acc.num_processes - 1), 1e-12);

    /* main_process_first: the main rank's side effect is visible to the others after begin */
    {
        char path[256];
        FILE *fp;
        snprintf(path, sizeof path, "/tmp/accel_mpf_%d", (int)getppid());
        AT_EQ_INT(accel_main_process_first_begin(&acc), ACCEL_OK);
        if (acc.is_main_process) {
            fp = fopen(path, "w");
            if (fp) { fputs("main", fp); fclose(fp); }
        } else {
            fp = fopen(path, "r");
            AT_CHECK_MSG(fp != NULL, "main process wrote first");
            if (fp) fclose(fp);
        }
        AT_EQ_INT(accel_main_process_first_end(&acc), ACCEL_OK);
        AT_EQ_INT(accel_wait_for_everyone(&acc), ACCEL_OK);
        if (acc.is_main_process) remove(path);
    }

    /* triggers: nobody set → no; the last rank sets → everybody sees it, and it resets */
    AT_EQ_INT(accel_check_trigger(&acc, &fired), ACCEL_OK);
    AT_EQ_INT(fired, 0);
    if (acc.process_index == acc.num_processes - 1) accel_set_trigger(&acc);
    AT_EQ_INT(accel_check_trigger(&acc, &fired), ACCEL_OK);
    AT_EQ_INT(fired, 1);
    AT_EQ_INT(acc.trigger, 0);
    AT_EQ_INT(accel_check_trigger(&acc, &fired), ACCEL_OK);
    AT_EQ_INT(fired, 0);

    /* set_seed(device_specific) differs per rank; synchronize gives everyone rank 0's state */
    accel_set_seed(&acc, 1000, 1);
    AT_EQ_INT(acc.rng.seed, 1000 + (uint64_t)acc.process_index);
    {
        uint32_t draws[4], all[4 * 16];
        accel_rng_next4(&acc, draws);
        AT_EQ_INT(accel_synchronize_rng_state(&acc), ACCEL_OK);
        AT_EQ_INT(acc.rng.seed, 1000);
        AT_EQ_INT(acc.rng.offset, 1);
        accel_rng_next4(&acc, draws);
        AT_EQ_INT(accel_host_allgather(&acc, draws, all, sizeof draws), ACCEL_OK);
        for (i = 1; i < acc.num_processes && i < 16; ++i) AT_CHECK(memcmp(all, all + 4 * i, sizeof draws) == 0);
    }
    /* broadcast of bytes from the last rank */
    {
        char msg[32];
        snprintf(msg, sizeof msg, "from %d", acc.process_index);
        AT_EQ_INT(accel_host_broadcast(&acc, msg, sizeof msg, acc.num_processes - 1), ACCEL_OK);
        {
            char want[32];
            snprintf(want, sizeof want, "from %d", acc.num_processes - 1);
            AT_EQ_STR(msg, want);
        }
    }
    accel_shutdown(&acc);
}

/* One rank asks for a different accumulation: every rank fails with a message naming the field and the ranks. */
static void mismatch(void) {
    accel acc;
    accel_desc d;
    int rank = env_int("OMPI_COMM_WORLD_RANK", "PMI_RANK");
    double t0 = accel_now();
    memset(&d, 0, sizeof d);
    d.cpu = 1;
    d.gradient_accumulation_steps = rank == 1 ? 3 : 2;
    d.log_level = ACCEL_LOG_ERROR; /* keep expected errors quiet */
    AT_EQ_INT(accel_init(&acc, &d), ACCEL_ERR_MISMATCH);
    AT_CONTAINS(accel_last_error(&acc), "gradient_accumulation_steps");
    AT_CONTAINS(accel_last_error(&acc), "rank 1=3");
    AT_CONTAINS(accel_last_error(&acc), "rank 0=2");
    AT_CHECK(accel_now() - t0 < 10.0);
    accel_shutdown(&acc);
}

/* One rank has a malformed env: it fails with its message, the others fail naming it — nobody hangs. */
static void env_error(void) {
    accel acc;
    accel_desc d;
    int rank = env_int("OMPI_COMM_WORLD_RANK", "PMI_RANK");
    memset(&d, 0, sizeof d);
    d.cpu = 1;
    d.log_level = ACCEL_LOG_ERROR;
    if (rank == 1) setenv("ACCELERATE_MIXED_PRECISION", "fp13", 1);
    if (rank == 1) {
        AT_EQ_INT(accel_init(&acc, &d), ACCEL_ERR_ENVIRONMENT);
        AT_CONTAINS(accel_last_error(&acc), "fp13");
    } else {
        AT_EQ_INT(accel_init(&acc, &d), ACCEL_ERR_REMOTE);
        AT_CONTAINS(accel_last_error(&acc), "rank 1 failed");
    }
    accel_shutdown(&acc);
}

static void quiet(void *u, accel_log_level l, const char *m) { (void)u; (void)l; (void)m; }

/* mpirun and a torchrun-style environment together (what `accelerate launch` under mpirun gives): MPI wins and
   carries the host group; no TCP store is started. */
static void precedence(void) {
    accel acc;
    accel_desc d;
    char v[32];
    int rank = env_int("OMPI_COMM_WORLD_RANK", "PMI_RANK"), size = env_int("OMPI_COMM_WORLD_SIZE", "PMI_SIZE");
    snprintf(v, sizeof v, "%d", rank); setenv("RANK", v, 1); setenv("LOCAL_RANK", v, 1);
    snprintf(v, sizeof v, "%d", size); setenv("WORLD_SIZE", v, 1); setenv("LOCAL_WORLD_SIZE", v, 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", "1", 1); /* nothing may listen there: a store would fail */
    memset(&d, 0, sizeof d);
    d.cpu = 1;
    d.log_fn = quiet;
    AT_EQ_INT(accel_init(&acc, &d), ACCEL_OK);
    AT_CHECK(acc.launcher == ACCEL_LAUNCHER_OPENMPI || acc.launcher == ACCEL_LAUNCHER_MPICH);
    AT_EQ_STR(accel_host_group_name(&acc), size > 1 ? "mpi" : "none");
    AT_EQ_INT(accel_wait_for_everyone(&acc), ACCEL_OK);
    accel_shutdown(&acc);
}

/* Ranks in different host collectives: every rank fails with ACCEL_ERR_MISMATCH listing each rank's call (instead
   of exchanging garbage or hanging), and the group stays usable. */
static void different_calls(void) {
    accel acc;
    accel_desc d;
    accel_result r;
    int64_t v = 1;
    char buf[8] = "abc";
    memset(&d, 0, sizeof d);
    d.cpu = 1;
    d.log_fn = quiet;
    AT_EQ_INT(accel_init(&acc, &d), ACCEL_OK);
    if (acc.process_index == 0) r = accel_wait_for_everyone(&acc);
    else if (acc.process_index == 1) r = accel_host_allreduce_i64(&acc, &v, 1, ACCEL_HOST_SUM);
    else r = accel_host_broadcast(&acc, buf, sizeof buf, 0);
    AT_EQ_INT(r, ACCEL_ERR_MISMATCH);
    AT_CONTAINS(accel_last_error(&acc), "rank 0: barrier");
    AT_CONTAINS(accel_last_error(&acc), "rank 1: all_reduce(i64)");
    AT_EQ_INT(accel_wait_for_everyone(&acc), ACCEL_OK);
    accel_shutdown(&acc);
}

/* A peer that does not arrive: the others' barrier ends with ACCEL_ERR_TIMEOUT at the 1 s deadline (no hang), and
   the group then refuses work at once. The late rank arrives after 3 s (so that MPI can still finalize). */
static void stall_round(accel *acc) {
    double t0, dt;
    if (acc->process_index == acc->num_processes - 1) {
        accel_result r;
        sleep(3);
        /* Open MPI completes the abandoned exchange; MPICH has no asynchronous progress while the others sleep, so
           the late rank may reach its own deadline instead — either way it must not hang */
        r = accel_wait_for_everyone(acc);
        AT_CHECK(r == ACCEL_OK || r == ACCEL_ERR_TIMEOUT);
    } else {
        t0 = accel_now();
        AT_EQ_INT(accel_wait_for_everyone(acc), ACCEL_ERR_TIMEOUT);
        dt = accel_now() - t0;
        AT_CHECK_MSG(dt >= 0.9 && dt < 2.5, "timed out close to the 1 s deadline");
        AT_CONTAINS(accel_last_error(acc), "did not complete within 1.0 s");
        t0 = accel_now();
        AT_EQ_INT(accel_wait_for_everyone(acc), ACCEL_ERR_STATE);
        AT_CONTAINS(accel_last_error(acc), "failed earlier");
        AT_CHECK(accel_now() - t0 < 0.5);
        sleep(3); /* let the late rank complete the exchange before finalizing */
    }
}

static void stall(void) {
    accel acc;
    accel_desc d;
    memset(&d, 0, sizeof d);
    d.cpu = 1;
    d.log_fn = quiet;
    d.collective_timeout_ms = 1000;
    AT_EQ_INT(accel_init(&acc, &d), ACCEL_OK);
    AT_EQ_INT(accel_wait_for_everyone(&acc), ACCEL_OK);
    stall_round(&acc);
    accel_shutdown(&acc);
}

/* ACCEL_TRAIN_TIMEOUT: the deadline is collective_timeout_ms (ACCEL_COLLECTIVE_TIMEOUT=8 s from the environment)
   until this process completes an optimizer step, then 1 s: the same stall fails after ~1 s instead of ~8 s. */
static void train_timeout(void) {
    accel acc;
    accel_desc d;
    double t0;
    setenv("ACCEL_COLLECTIVE_TIMEOUT", "8", 1);
    setenv("ACCEL_TRAIN_TIMEOUT", "1", 1);
    memset(&d, 0, sizeof d);
    d.cpu = 1;
    d.log_fn = quiet;
    AT_EQ_INT(accel_init(&acc, &d), ACCEL_OK);
    AT_EQ_INT(acc.desc.collective_timeout_ms, 8000);
    AT_EQ_INT(acc.desc.train_timeout_ms, 1000);
    AT_EQ_INT(accel_wait_for_everyone(&acc), ACCEL_OK);
    if (acc.process_index == acc.num_processes - 1) sleep(2); /* before the first step: within the 8 s deadline */
    t0 = accel_now();
    AT_EQ_INT(accel_wait_for_everyone(&acc), ACCEL_OK);
    if (acc.process_index != acc.num_processes - 1) AT_CHECK(accel_now() - t0 > 1.5);
    accel_optimizer_step_done(&acc, 0);
    stall_round(&acc); /* now the 1 s train deadline */
    unsetenv("ACCEL_COLLECTIVE_TIMEOUT");
    unsetenv("ACCEL_TRAIN_TIMEOUT");
    accel_shutdown(&acc);
}

/* A data file missing on the last rank (issue 29): that rank fails and calls accel_shutdown while the others wait in
   a barrier with a 300 s deadline (ACCEL_COLLECTIVE_TIMEOUT, set by the test). accel_shutdown must end the job
   (MPI_Abort after 10 s, with a message) instead of blocking in MPI_Finalize while the others wait out their
   deadline. Run by expect_abort.sh, which checks the time, the exit status and the message. */
static void missing_file(void) {
    accel acc;
    accel_desc d;
    memset(&d, 0, sizeof d);
    d.cpu = 1;
    AT_EQ_INT(accel_init(&acc, &d), ACCEL_OK);
    AT_EQ_INT(acc.desc.collective_timeout_ms, 300000);
    if (acc.process_index == acc.num_processes - 1) {
        accel_data_token_file f;
        accel_result r = accel_data_token_file_open(&acc, &f, "/nonexistent/accel-test/train_000.bin");
        AT_CHECK(r != ACCEL_OK);
        fprintf(stderr, "rank %d: %s\n", acc.process_index, accel_last_error(&acc));
    } else {
        accel_result r = accel_wait_for_everyone(&acc); /* never returns: MPI_Abort ends it */
        fprintf(stderr, "rank %d: wait_for_everyone returned %d\n", acc.process_index, (int)r);
    }
    accel_shutdown(&acc);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "basic";
    if (!strcmp(mode, "mismatch")) mismatch();
    else if (!strcmp(mode, "env_error")) env_error();
    else if (!strcmp(mode, "precedence")) precedence();
    else if (!strcmp(mode, "different_calls")) different_calls();
    else if (!strcmp(mode, "stall")) stall();
    else if (!strcmp(mode, "train_timeout")) train_timeout();
    else if (!strcmp(mode, "missing_file")) missing_file();
    else basic();
    return at_finish("core_mpi");
}
