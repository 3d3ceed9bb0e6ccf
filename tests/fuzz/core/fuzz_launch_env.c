/* libFuzzer target: the launcher environment accel_init reads (accel_resolve_config: MPI's, Slurm's, torchrun's and
   Accelerate's variables, SLURM_STEP_TASKS_PER_NODE's "2(x3),1" form) and the store's (ACCEL_STORE_SECRET,
   ACCEL_STORE_TRUSTED_NETWORK, the run id: accel__admit_init). Each input line is "<k>VALUE": byte k picks the
   variable. Invariants: a resolved configuration is consistent (1 <= P, 0 <= rank < P, 0 <= local rank < local
   size, accumulation steps >= 1); a refusal has a message; the admission settings stay in their bounds. */
#define ACCEL_IMPLEMENTATION
#include "accel.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char *keys[] = {
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
    "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE",
    "MV2_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_SIZE", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID",
    "SLURM_STEP_ID", "SLURM_STEP_TASKS_PER_NODE", "SLURM_NODEID", "SLURM_NTASKS", "RANK", "WORLD_SIZE", "LOCAL_RANK",
    "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "ACCELERATE_MIXED_PRECISION",
    "ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "ACCELERATE_USE_CPU", "ACCELERATE_DEBUG_MODE", "ACCEL_LOG_LEVEL",
    "ACCEL_STORE_SECRET", "ACCEL_STORE_TRUSTED_NETWORK", "ACCEL_STORE_PORT", "TORCHELASTIC_USE_AGENT_STORE",
    "TORCHELASTIC_RUN_ID", "ACCEL_RUN_ID"};
#define NKEYS (sizeof keys / sizeof keys[0])

static void quiet(void *u, accel_log_level l, const char *m) { (void)u; (void)l; (void)m; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t i = 0, k;
    accel_desc out;
    accel_launcher launcher;
    accel__admit adm;
    char err[512], val[2048];
    accel_set_default_logger(quiet, NULL);
    for (k = 0; k < NKEYS; ++k) unsetenv(keys[k]);
    while (i < size) {
        size_t key = data[i++] % NKEYS, n = 0;
        while (i < size && data[i] != '\n' && n < sizeof val - 1) {
            val[n++] = data[i] ? (char)data[i] : ' '; /* an environment value has no NUL */
            ++i;
        }
        val[n] = 0;
        if (i < size) ++i;
        setenv(keys[key], val, 1);
    }
    memset(err, 0x55, sizeof err);
    if (accel_resolve_config(NULL, &out, &launcher, err, sizeof err) == ACCEL_OK) {
        if (out.num_processes < 1 || out.process_index < 0 || out.process_index >= out.num_processes) __builtin_trap();
        if (out.local_num_processes < 1 || out.local_process_index < 0 ||
            out.local_process_index >= out.local_num_processes)
            __builtin_trap();
        if (out.gradient_accumulation_steps < 1) __builtin_trap();
    } else if (!err[0] || !memchr(err, 0, sizeof err)) {
        __builtin_trap(); /* a refusal says why, NUL-terminated */
    }
    if (accel__admit_init(NULL, &adm, "store") == ACCEL_OK) {
        if (adm.secret_len > ACCEL__ADMIT_MAX_SECRET || adm.run_len > ACCEL__ST_MAX_TOKEN) __builtin_trap();
        if (adm.secret[adm.secret_len] != 0 || adm.run_id[adm.run_len] != 0) __builtin_trap();
        if (adm.keyed && !adm.secret_len) __builtin_trap();
    }
    return 0;
}
