/* Unit tests of accel.h: launcher detection table, ACCELERATE_* overrides, results, dtypes, Philox KATs,
   allocator hooks, logger capture, single-process helpers. */
#include "accel.h"
#include "accel_test.h"

/* What a loader does around its batches (accel_dataloader_*): the last batch is flagged one batch ahead. */
static const int test_loader_key = 0;
static void set_loader(accel *acc, int last, int remainder) {
    accel_dataloader_begin(acc, &test_loader_key, remainder);
    if (last) accel_dataloader_last_batch(acc, &test_loader_key);
}
#include <stdlib.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

static const char *all_vars[] = {
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
    "PMI_RANK", "PMI_SIZE", "PMI_FD", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE",
    "MV2_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
    "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_STEP_ID", "SLURM_STEP_NUM_TASKS",
    "SLURM_STEP_TASKS_PER_NODE", "SLURM_NODEID", "SLURM_JOB_ID", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
    "MASTER_ADDR", "MASTER_PORT", "ACCELERATE_MIXED_PRECISION", "ACCELERATE_GRADIENT_ACCUMULATION_STEPS",
    "ACCELERATE_USE_CPU", "ACCELERATE_DEBUG_MODE", NULL};

static void clear_env(void) {
    int i;
    for (i = 0; all_vars[i]; ++i) unsetenv(all_vars[i]);
}

/* "K=V K=V" → environment */
static void set_env(const char *spec) {
    char buf[512], *tok, *save = NULL;
    clear_env();
    snprintf(buf, sizeof buf, "%s", spec);
    for (tok = strtok_r(buf, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq) continue;
        *eq = 0;
        setenv(tok, eq + 1, 1);
    }
}

typedef struct {
    const char *env;
    accel_result expect;
    accel_launcher launcher;
    int rank, size, local_rank, local_size;
    const char *msg; /* substring of the error */
} launch_case;

static void test_launchers(void) {
    static const launch_case cases[] = {
        {"", ACCEL_OK, ACCEL_LAUNCHER_NONE, 0, 1, 0, 1, NULL},
        {"OMPI_COMM_WORLD_RANK=3 OMPI_COMM_WORLD_SIZE=4 OMPI_COMM_WORLD_LOCAL_RANK=1 OMPI_COMM_WORLD_LOCAL_SIZE=2",
         ACCEL_OK, ACCEL_LAUNCHER_OPENMPI, 3, 4, 1, 2, NULL},
        {"PMI_RANK=2 PMI_SIZE=3 MPI_LOCALRANKID=2 MPI_LOCALNRANKS=3", ACCEL_OK, ACCEL_LAUNCHER_MPICH, 2, 3, 2, 3, NULL},
        {"PMI_RANK=1 PMI_SIZE=2", ACCEL_OK, ACCEL_LAUNCHER_MPICH, 1, 2, 1, 2, NULL},
        {"MV2_COMM_WORLD_RANK=5 MV2_COMM_WORLD_SIZE=8 MV2_COMM_WORLD_LOCAL_RANK=1 MV2_COMM_WORLD_LOCAL_SIZE=4",
         ACCEL_OK, ACCEL_LAUNCHER_MVAPICH, 5, 8, 1, 4, NULL},
        /* Slurm counts only inside an srun step; the step's own size and per-node layout (real srun -N 2 -n 3:
           SLURM_STEP_TASKS_PER_NODE=2,1, node 1 has one task) */
        {"SLURM_STEP_ID=0 SLURM_PROCID=6 SLURM_STEP_NUM_TASKS=8 SLURM_NTASKS=8 SLURM_LOCALID=2 SLURM_NODEID=1 "
         "SLURM_STEP_TASKS_PER_NODE=4(x2)", ACCEL_OK, ACCEL_LAUNCHER_SLURM, 6, 8, 2, 4, NULL},
        {"SLURM_STEP_ID=0 SLURM_PROCID=2 SLURM_STEP_NUM_TASKS=3 SLURM_NTASKS=3 SLURM_LOCALID=0 SLURM_NODEID=1 "
         "SLURM_STEP_TASKS_PER_NODE=2,1 SLURM_TASKS_PER_NODE=2,1", ACCEL_OK, ACCEL_LAUNCHER_SLURM, 2, 3, 0, 1, NULL},
        {"SLURM_STEP_ID=0 SLURM_PROCID=4 SLURM_STEP_NUM_TASKS=7 SLURM_LOCALID=1 SLURM_NODEID=2 "
         "SLURM_STEP_TASKS_PER_NODE=2(x3),1", ACCEL_OK, ACCEL_LAUNCHER_SLURM, 4, 7, 1, 2, NULL},
        /* a one-task step of a 4-task job inherits the job's SLURM_NTASKS / SLURM_NTASKS_PER_NODE: the step decides */
        {"SLURM_STEP_ID=1 SLURM_PROCID=0 SLURM_NTASKS=4 SLURM_NTASKS_PER_NODE=4 SLURM_STEP_NUM_TASKS=1 SLURM_LOCALID=0 "
         "SLURM_NODEID=0 SLURM_STEP_TASKS_PER_NODE=1", ACCEL_OK, ACCEL_LAUNCHER_SLURM, 0, 1, 0, 1, NULL},
        /* an sbatch script (the job's variables, no step) and a salloc shell are a single process */
        {"SLURM_JOB_ID=5 SLURM_PROCID=0 SLURM_NTASKS=2 SLURM_LOCALID=0 SLURM_NODEID=0 SLURM_TASKS_PER_NODE=2", ACCEL_OK,
         ACCEL_LAUNCHER_NONE, 0, 1, 0, 1, NULL},
        {"SLURM_JOB_ID=5 SLURM_NTASKS=2 SLURM_TASKS_PER_NODE=2", ACCEL_OK, ACCEL_LAUNCHER_NONE, 0, 1, 0, 1, NULL},
        /* ... and never conflict with a launcher started there (mpirun in an sbatch script) */
        {"SLURM_JOB_ID=5 SLURM_PROCID=0 SLURM_NTASKS=2 OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2 "
         "OMPI_COMM_WORLD_LOCAL_RANK=1 OMPI_COMM_WORLD_LOCAL_SIZE=2", ACCEL_OK, ACCEL_LAUNCHER_OPENMPI, 1, 2, 1, 2, NULL},
        /* a launcher started inside an srun step wins over the step's layout (mpirun / torchrun in `srun -n 1`) */
        {"SLURM_STEP_ID=0 SLURM_PROCID=0 SLURM_STEP_NUM_TASKS=1 SLURM_LOCALID=0 SLURM_NODEID=0 SLURM_STEP_TASKS_PER_NODE=1 "
         "RANK=2 WORLD_SIZE=4 LOCAL_RANK=2 LOCAL_WORLD_SIZE=4", ACCEL_OK, ACCEL_LAUNCHER_TORCHRUN, 2, 4, 2, 4, NULL},
        {"SLURM_STEP_ID=0 SLURM_PROCID=0 SLURM_STEP_NUM_TASKS=2 SLURM_STEP_TASKS_PER_NODE=2(x", ACCEL_ERR_ENVIRONMENT, 0,
         0, 0, 0, 0, "SLURM_STEP_TASKS_PER_NODE=\"2(x\""},
        {"SLURM_STEP_ID=0 SLURM_PROCID=0 SLURM_STEP_NUM_TASKS=2 SLURM_NODEID=3 SLURM_STEP_TASKS_PER_NODE=1,1",
         ACCEL_ERR_ENVIRONMENT, 0, 0, 0, 0, 0, "no entry for SLURM_NODEID"},
        {"RANK=1 WORLD_SIZE=4 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 MASTER_ADDR=10.0.0.1 MASTER_PORT=1234", ACCEL_OK,
         ACCEL_LAUNCHER_TORCHRUN, 1, 4, 1, 2, NULL},
        /* srun --mpi=pmi2 (what a real step sets, two nodes): PMI equal to the step's is Slurm's plugin speaking for
           the step — the launcher is slurm, as under --mpi=pmix (issue 30 item 14) */
        {"PMI_RANK=1 PMI_SIZE=2 SLURM_STEP_ID=0 SLURM_PROCID=1 SLURM_STEP_NUM_TASKS=2 SLURM_NTASKS=2 SLURM_LOCALID=0 "
         "SLURM_NODEID=1 SLURM_STEP_TASKS_PER_NODE=1(x2)", ACCEL_OK, ACCEL_LAUNCHER_SLURM, 1, 2, 0, 1, NULL},
        /* torchrun inside an srun --mpi=pmi2 step: its workers inherit the step's PMI_RANK=0 PMI_SIZE=1, and the
           launcher started inside the step wins over both (item 2) */
        {"PMI_RANK=0 PMI_SIZE=1 PMI_FD=11 SLURM_STEP_ID=0 SLURM_PROCID=0 SLURM_STEP_NUM_TASKS=1 SLURM_LOCALID=0 "
         "SLURM_NODEID=0 SLURM_STEP_TASKS_PER_NODE=1 RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2", ACCEL_OK,
         ACCEL_LAUNCHER_TORCHRUN, 1, 2, 1, 2, NULL},
        /* mpiexec (Hydra) inside a one-task step: its PMI layout is not the step's, and wins */
        {"PMI_RANK=2 PMI_SIZE=4 SLURM_STEP_ID=0 SLURM_PROCID=0 SLURM_STEP_NUM_TASKS=1 SLURM_LOCALID=0 SLURM_NODEID=0 "
         "SLURM_STEP_TASKS_PER_NODE=1", ACCEL_OK, ACCEL_LAUNCHER_MPICH, 2, 4, 2, 4, NULL},
        /* accelerate launch under mpirun sets RANK too: agreeing is fine */
        {"OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2 RANK=1 WORLD_SIZE=2", ACCEL_OK, ACCEL_LAUNCHER_OPENMPI, 1, 2, 1, 2,
         NULL},
        /* conflicts */
        {"OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2 RANK=0 WORLD_SIZE=2", ACCEL_ERR_ENVIRONMENT, 0, 0, 0, 0, 0,
         "OMPI_COMM_WORLD_RANK=1"},
        {"PMI_RANK=0 PMI_SIZE=4 RANK=0 WORLD_SIZE=2", ACCEL_ERR_ENVIRONMENT, 0, 0, 0, 0, 0, "WORLD_SIZE=2"},
        /* garbage */
        {"RANK=abc WORLD_SIZE=2", ACCEL_ERR_ENVIRONMENT, 0, 0, 0, 0, 0, "RANK=\"abc\""},
        {"RANK=-1 WORLD_SIZE=2", ACCEL_ERR_ENVIRONMENT, 0, 0, 0, 0, 0, "RANK"},
        {"RANK=2 WORLD_SIZE=2", ACCEL_ERR_ENVIRONMENT, 0, 0, 0, 0, 0, "not a valid rank"},
        {"RANK=0 WORLD_SIZE=0", ACCEL_ERR_ENVIRONMENT, 0, 0, 0, 0, 0, "WORLD_SIZE=0"},
        {"RANK=1", ACCEL_ERR_ENVIRONMENT, 0, 0, 0, 0, 0, "WORLD_SIZE is not"},
        {"RANK=0 WORLD_SIZE=4 LOCAL_RANK=3 LOCAL_WORLD_SIZE=2", ACCEL_ERR_ENVIRONMENT, 0, 0, 0, 0, 0, "LOCAL_RANK=3"},
        {"RANK=1x WORLD_SIZE=2", ACCEL_ERR_ENVIRONMENT, 0, 0, 0, 0, 0, "RANK=\"1x\""},
        {"OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=99999999999", ACCEL_ERR_ENVIRONMENT, 0, 0, 0, 0, 0,
         "OMPI_COMM_WORLD_SIZE"},
    };
    size_t i;
    for (i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        accel_desc out;
        accel_launcher l = ACCEL_LAUNCHER_COUNT;
        char err[512];
        accel_result r;
        set_env(cases[i].env);
        at_context = cases[i].env;
        r = accel_resolve_config(NULL, &out, &l, err, sizeof err);
        AT_EQ_INT(r, cases[i].expect);
        if (r == ACCEL_OK && cases[i].expect == ACCEL_OK) {
            AT_EQ_INT(l, cases[i].launcher);
            AT_EQ_INT(out.process_index, cases[i].rank);
            AT_EQ_INT(out.num_processes, cases[i].size);
            AT_EQ_INT(out.local_process_index, cases[i].local_rank);
            AT_EQ_INT(out.local_num_processes, cases[i].local_size);
        } else if (cases[i].msg) {
            AT_CONTAINS(err, cases[i].msg);
        }
    }
    at_context = "";
    clear_env();
}

static void counting_free(void *p, void *u);
static void test_explicit_desc(void) {
    accel_desc d, out;
    accel_launcher l;
    char err[512];
    memset(&d, 0, sizeof d);
    d.num_processes = 4; d.process_index = 2; d.local_process_index = 0; d.local_num_processes = 2;
    clear_env();
    AT_EQ_INT(accel_resolve_config(&d, &out, &l, err, sizeof err), ACCEL_OK);
    AT_EQ_INT(l, ACCEL_LAUNCHER_EXPLICIT);
    AT_EQ_INT(out.process_index, 2);
    AT_EQ_INT(out.local_num_processes, 2);
    /* explicit desc that contradicts the launcher is an error, not a silent pick */
    set_env("RANK=1 WORLD_SIZE=4");
    AT_EQ_INT(accel_resolve_config(&d, &out, &l, err, sizeof err), ACCEL_ERR_ENVIRONMENT);
    AT_CONTAINS(err, "desc says rank 2 of 4");
    clear_env();
    d.process_index = 4;
    AT_EQ_INT(accel_resolve_config(&d, &out, &l, err, sizeof err), ACCEL_ERR_INVALID_ARGUMENT);
    memset(&d, 0, sizeof d);
    d.host_allocator.alloc = NULL; /* free without alloc */
    d.host_allocator.free = counting_free;
    AT_EQ_INT(accel_resolve_config(&d, &out, &l, err, sizeof err), ACCEL_ERR_INVALID_ARGUMENT);
    AT_CONTAINS(err, "both alloc and free");
}

static void test_accelerate_env(void) {
    accel_desc d, out;
    char err[512];
    memset(&d, 0, sizeof d);
    /* ACCELERATE_MIXED_PRECISION applies only when the desc leaves precision unset (SEMANTICS §8) */
    set_env("ACCELERATE_MIXED_PRECISION=bf16");
    AT_EQ_INT(accel_resolve_config(&d, &out, NULL, err, sizeof err), ACCEL_OK);
    AT_EQ_INT(out.mixed_precision, ACCEL_PRECISION_BF16);
    d.mixed_precision = ACCEL_PRECISION_FP16;
    AT_EQ_INT(accel_resolve_config(&d, &out, NULL, err, sizeof err), ACCEL_OK);
    AT_EQ_INT(out.mixed_precision, ACCEL_PRECISION_FP16);
    d.mixed_precision = ACCEL_PRECISION_DEFAULT;
    clear_env();
    AT_EQ_INT(accel_resolve_config(&d, &out, NULL, err, sizeof err), ACCEL_OK);
    AT_EQ_INT(out.mixed_precision, ACCEL_PRECISION_NO);
    set_env("ACCELERATE_MIXED_PRECISION=fp32");
    AT_EQ_INT(accel_resolve_config(&d, &out, NULL, err, sizeof err), ACCEL_ERR_ENVIRONMENT);
    AT_CONTAINS(err, "ACCELERATE_MIXED_PRECISION=\"fp32\"");
    /* ACCELERATE_GRADIENT_ACCUMULATION_STEPS overrides the desc */
    set_env("ACCELERATE_GRADIENT_ACCUMULATION_STEPS=8");
    d.gradient_accumulation_steps = 2;
    AT_EQ_INT(accel_resolve_config(&d, &out, NULL, err, sizeof err), ACCEL_OK);
    AT_EQ_INT(out.gradient_accumulation_steps, 8);
    set_env("ACCELERATE_GRADIENT_ACCUMULATION_STEPS=0");
    AT_EQ_INT(accel_resolve_config(&d, &out, NULL, err, sizeof err), ACCEL_ERR_ENVIRONMENT);
    set_env("ACCELERATE_GRADIENT_ACCUMULATION_STEPS=two");
    AT_EQ_INT(accel_resolve_config(&d, &out, NULL, err, sizeof err), ACCEL_ERR_ENVIRONMENT);
    AT_CONTAINS(err, "ACCELERATE_GRADIENT_ACCUMULATION_STEPS");
    clear_env();
    AT_EQ_INT(accel_resolve_config(&d, &out, NULL, err, sizeof err), ACCEL_OK);
    AT_EQ_INT(out.gradient_accumulation_steps, 2);
    d.gradient_accumulation_steps = 0;
    AT_EQ_INT(accel_resolve_config(&d, &out, NULL, err, sizeof err), ACCEL_OK);
    AT_EQ_INT(out.gradient_accumulation_steps, 1);
    /* flags parse like str_to_bool; garbage is an error */
    set_env("ACCELERATE_USE_CPU=YeS ACCELERATE_DEBUG_MODE=off");
    AT_EQ_INT(accel_resolve_config(&d, &out, NULL, err, sizeof err), ACCEL_OK);
    AT_EQ_INT(out.cpu, 1);
    AT_EQ_INT(out.debug, 0);
    set_env("ACCELERATE_DEBUG_MODE=maybe");
    AT_EQ_INT(accel_resolve_config(&d, &out, NULL, err, sizeof err), ACCEL_ERR_ENVIRONMENT);
    AT_CONTAINS(err, "ACCELERATE_DEBUG_MODE=\"maybe\"");
    set_env("ACCELERATE_USE_CPU=2");
    AT_EQ_INT(accel_resolve_config(&d, &out, NULL, err, sizeof err), ACCEL_ERR_ENVIRONMENT);
    clear_env();
    /* defaults of the accumulation plugin */
    AT_EQ_INT(accel_resolve_config(&d, &out, NULL, err, sizeof err), ACCEL_OK);
    AT_EQ_INT(out.no_sync_with_dataloader, 0);
    AT_EQ_INT(out.no_adjust_scheduler, 0);
    AT_EQ_INT(out.log_level, ACCEL_LOG_WARN);
    AT_EQ_INT(out.collective_timeout_ms, 1800000);
}

static void test_parse_bool(void) {
    static const char *t[] = {"y", "Y", "yes", "YES", "t", "true", "True", "on", "ON", "1"};
    static const char *f[] = {"n", "no", "NO", "f", "false", "FALSE", "off", "Off", "0"};
    static const char *bad[] = {"", "2", "yess", "tru", " 1", "enable", "-1"};
    size_t i;
    for (i = 0; i < sizeof t / sizeof *t; ++i) AT_EQ_INT(accel_parse_bool(t[i]), 1);
    for (i = 0; i < sizeof f / sizeof *f; ++i) AT_EQ_INT(accel_parse_bool(f[i]), 0);
    for (i = 0; i < sizeof bad / sizeof *bad; ++i) AT_EQ_INT(accel_parse_bool(bad[i]), -1);
    AT_EQ_INT(accel_parse_bool(NULL), -1);
}

static void test_results_and_dtypes(void) {
    int r;
    static const struct { const char *name; size_t size; } st[] = {
        {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"I64", 8}, {"I32", 4},
        {"I16", 2}, {"I8", 1}, {"U64", 8}, {"U32", 4}, {"U16", 2}, {"U8", 1}, {"BOOL", 1}};
    size_t i;
    const char *seen[ACCEL_RESULT_COUNT];
    for (r = 0; r < ACCEL_RESULT_COUNT; ++r) {
        int j;
        seen[r] = accel_result_string((accel_result)r);
        AT_CHECK(seen[r] && strncmp(seen[r], "ACCEL_", 6) == 0);
        for (j = 0; j < r; ++j) AT_CHECK(strcmp(seen[j], seen[r]) != 0);
    }
    AT_CONTAINS(accel_result_string((accel_result)999), "unknown");
    AT_CONTAINS(accel_result_string(ACCEL_ERR_TIMEOUT), "TIMEOUT");
    /* the safetensors names and sizes (REFERENCE.md) */
    for (i = 0; i < sizeof st / sizeof *st; ++i) {
        accel_dtype t = accel_dtype_from_name(st[i].name);
        at_context = st[i].name;
        AT_CHECK(t != ACCEL_DTYPE_INVALID);
        AT_EQ_INT(accel_dtype_size(t), st[i].size);
        AT_EQ_STR(accel_dtype_name(t), st[i].name);
    }
    at_context = "";
    AT_EQ_INT(accel_dtype_from_name("f32"), ACCEL_DTYPE_INVALID);
    AT_EQ_INT(accel_dtype_from_name("F128"), ACCEL_DTYPE_INVALID);
    AT_EQ_INT(accel_dtype_from_name(NULL), ACCEL_DTYPE_INVALID);
    AT_EQ_INT(accel_dtype_size(ACCEL_DTYPE_INVALID), 0);
    AT_CHECK(accel_dtype_name((accel_dtype)77) == NULL);
    AT_EQ_INT(accel_dtype_is_float(ACCEL_BF16), 1);
    AT_EQ_INT(accel_dtype_is_float(ACCEL_I32), 0);
    {
        accel_tensor t;
        memset(&t, 0, sizeof t);
        t.dtype = ACCEL_BF16;
        AT_EQ_INT(accel_tensor_numel(&t), 1); /* 0-rank */
        AT_EQ_INT(accel_tensor_nbytes(&t), 2);
        t.ndim = 3; t.shape[0] = 2; t.shape[1] = 0; t.shape[2] = 5;
        AT_EQ_INT(accel_tensor_nbytes(&t), 0);
        t.shape[1] = 3;
        AT_EQ_INT(accel_tensor_nbytes(&t), 60);
        t.shape[0] = INT64_MAX / 2;
        AT_EQ_INT(accel_tensor_nbytes(&t), -1); /* overflow detected */
        t.ndim = 9;
        AT_EQ_INT(accel_tensor_numel(&t), -1);
    }
}

/* Random123 tests/kat_vectors, "philox4x32 10" lines: ctr[4] key[2] → out[4] */
static void test_philox(void) {
    static const uint32_t v[3][10] = {
        {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d, 0x41c83b0e, 0xa20bc7c6,
         0x6d5451fd},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09, 0x94fdcceb, 0x5001e420,
         0x24126ea1}};
    int i, j;
    for (i = 0; i < 3; ++i) {
        uint32_t out[4];
        accel_philox4x32_10(v[i], v[i] + 4, out);
        for (j = 0; j < 4; ++j) AT_EQ_INT(out[j], v[i][6 + j]);
    }
    /* draw4 maps (seed, stream, index) onto the counter as documented */
    {
        uint32_t a[4], b[4];
        uint32_t ctr[4] = {5, 0, 7, 0}, key[2] = {0x12345678u, 0x9abcdef0u};
        accel_rng_draw4(0x9abcdef012345678ull, 7, 5, a);
        accel_philox4x32_10(ctr, key, b);
        for (j = 0; j < 4; ++j) AT_EQ_INT(a[j], b[j]);
    }
    /* uniform floats: in [0,1), mean ~ 0.5 */
    {
        double sum = 0;
        int bad = 0;
        uint32_t o[4];
        for (i = 0; i < 25000; ++i) {
            accel_rng_draw4(42, 0, (uint64_t)i, o);
            for (j = 0; j < 4; ++j) {
                float u = accel_rng_u32_to_unit_float(o[j]);
                if (!(u >= 0.0f && u < 1.0f)) bad++;
                sum += u;
            }
        }
        AT_EQ_INT(bad, 0);
        AT_NEAR(sum / 100000.0, 0.5, 0.005);
        AT_CHECK(accel_rng_u32_to_unit_float(0xffffffffu) < 1.0f);
    }
}

/* allocator hooks: counted, and a failing one gives an error, not a crash */
static int n_alloc, n_free, fail_alloc;
static void *counting_alloc(size_t n, void *u) {
    (void)u;
    if (fail_alloc) return NULL;
    n_alloc++;
    return malloc(n);
}
static void counting_free(void *p, void *u) {
    (void)u;
    n_free++;
    free(p);
}

typedef struct { int count; accel_log_level last_level; char last[1024]; } log_capture;
static void capture_log(void *u, accel_log_level level, const char *msg) {
    log_capture *c = (log_capture *)u;
    c->count++;
    c->last_level = level;
    snprintf(c->last, sizeof c->last, "%s", msg);
}

static void test_accelerator_single(void) {
    accel acc;
    accel_desc d;
    log_capture cap;
    int fired = -1;
    void *p;
    uint32_t a[4], b[4];
    accel_rng_state st;
    memset(&d, 0, sizeof d);
    memset(&cap, 0, sizeof cap);
    clear_env();
    d.host_allocator.alloc = counting_alloc;
    d.host_allocator.free = counting_free;
    d.log_fn = capture_log;
    d.log_user_data = &cap;
    d.log_level = ACCEL_LOG_DEBUG;
    d.no_mpi = 1;
    d.cpu = 1;
    AT_EQ_INT(accel_init(&acc, &d), ACCEL_OK);
    AT_EQ_INT(n_alloc, 1); /* the Accelerator's private state came from the user's allocator */
    n_alloc = n_free = 0;
    memset(&cap, 0, sizeof cap);
    AT_EQ_INT(acc.num_processes, 1);
    AT_EQ_INT(acc.is_main_process, 1);
    AT_EQ_INT(acc.is_local_main_process, 1);
    AT_EQ_INT(acc.distributed_type, ACCEL_DISTRIBUTED_NO);
    AT_EQ_INT(acc.use_distributed, 0);
    AT_EQ_INT(acc.device, -1);
    AT_EQ_INT(acc.sync_gradients, 1);
    AT_EQ_INT(acc.master_port, 29500);
    p = accel_host_alloc(&acc, 100);
    AT_CHECK(p != NULL);
    accel_host_free(&acc, p);
    AT_EQ_INT(n_alloc, 1);
    AT_EQ_INT(n_free, 1);
    fail_alloc = 1;
    p = accel_host_alloc(&acc, 1 << 20);
    AT_CHECK(p == NULL);
    AT_EQ_INT(acc.last_result, ACCEL_ERR_OUT_OF_MEMORY);
    AT_CONTAINS(accel_last_error(&acc), "1048576 bytes");
    AT_EQ_INT(cap.count, 1); /* the failure went to the user's logger, at debug level (it is returned) */
    AT_EQ_INT(cap.last_level, ACCEL_LOG_DEBUG);
    AT_CONTAINS(cap.last, "host allocation");
    fail_alloc = 0;
    /* single process: helpers are local and correct */
    AT_EQ_INT(accel_wait_for_everyone(&acc), ACCEL_OK);
    AT_EQ_INT(accel_check_trigger(&acc, &fired), ACCEL_OK);
    AT_EQ_INT(fired, 0);
    accel_set_trigger(&acc);
    AT_EQ_INT(accel_check_trigger(&acc, &fired), ACCEL_OK);
    AT_EQ_INT(fired, 1);
    AT_EQ_INT(accel_check_trigger(&acc, &fired), ACCEL_OK);
    AT_EQ_INT(fired, 0); /* reset after firing */
    AT_EQ_INT(accel_on_main_process(&acc), 1);
    AT_EQ_INT(accel_on_process(&acc, 3), 1); /* not distributed: everything runs, as in Accelerate */
    AT_EQ_INT(accel_main_process_first_begin(&acc), ACCEL_OK);
    AT_EQ_INT(accel_main_process_first_end(&acc), ACCEL_OK);
    {
        int64_t v[2] = {3, -4};
        AT_EQ_INT(accel_host_allreduce_i64(&acc, v, 2, ACCEL_HOST_SUM), ACCEL_OK);
        AT_EQ_INT(v[0], 3);
        AT_EQ_INT(accel_host_broadcast(&acc, v, sizeof v, 1), ACCEL_ERR_INVALID_ARGUMENT);
        AT_CONTAINS(accel_last_error(&acc), "root 1");
    }
    /* RNG: seed → reproducible stream; state round trip; device_specific adds the rank (0 here) */
    accel_set_seed(&acc, 99, 1);
    AT_EQ_INT(acc.rng.seed, 99);
    accel_rng_next4(&acc, a);
    st = accel_get_rng_state(&acc);
    accel_rng_next4(&acc, b);
    accel_set_rng_state(&acc, st);
    accel_rng_next4(&acc, a);
    AT_CHECK(memcmp(a, b, sizeof a) == 0);
    AT_EQ_INT(accel_synchronize_rng_state(&acc), ACCEL_OK);
    accel_shutdown(&acc);
    accel_shutdown(&acc); /* twice is safe */
    AT_EQ_INT(n_alloc + 1, n_free); /* + the private state allocated before the counters were reset */

    /* init failure: a clear message, and shutdown still safe */
    setenv("ACCELERATE_MIXED_PRECISION", "fp64", 1);
    memset(&cap, 0, sizeof cap);
    AT_EQ_INT(accel_init(&acc, &d), ACCEL_ERR_ENVIRONMENT);
    AT_CONTAINS(accel_last_error(&acc), "fp64");
    AT_CHECK(cap.count >= 1);
    accel_shutdown(&acc);
    clear_env();
    AT_EQ_INT(accel_init(NULL, &d), ACCEL_ERR_INVALID_ARGUMENT);
    AT_CONTAINS(accel_last_error(NULL), "NULL");
}


/* SEMANTICS.md §4: _do_sync at the entry of every accumulate() */
static void test_accumulation(void) {
    accel acc;
    accel_desc d;
    int i, syncs[16];
    memset(&d, 0, sizeof d);
    d.no_mpi = 1;
    d.gradient_accumulation_steps = 3;
    clear_env();
    AT_EQ_INT(accel_init(&acc, &d), ACCEL_OK);
    AT_NEAR(accel_loss_divisor(&acc), 3.0, 0);
    /* 7 batches, 3 steps, sync_with_dataloader: windows 3,3,1 — the last batch syncs (end_of_dataloader is set
       when the last batch is yielded) and the counter restarts for the next epoch */
    {
        static const int want[14] = {0, 0, 1, 0, 0, 1, 1, 0, 0, 1, 0, 0, 1, 1};
        int e, b, k = 0;
        for (e = 0; e < 2; ++e)
            for (b = 0; b < 7; ++b) {
                set_loader(&acc, b == 6, -1);
                accel_accumulate_begin(&acc);
                syncs[k] = acc.sync_gradients;
                AT_EQ_INT(acc.sync_gradients, want[k]);
                AT_EQ_INT(accel_should_reduce(&acc), want[k]);
                accel_accumulate_end(&acc);
                ++k;
            }
        AT_EQ_INT(acc.step, 0);
        set_loader(&acc, 0, -1);
    }
    accel_shutdown(&acc);
    /* without sync_with_dataloader the counter runs across epochs: 7+7 batches sync at 3,6,9,12 */
    d.no_sync_with_dataloader = 1;
    AT_EQ_INT(accel_init(&acc, &d), ACCEL_OK);
    for (i = 0; i < 14; ++i) {
        set_loader(&acc, i % 7 == 6, -1);
        accel_accumulate_begin(&acc);
        AT_EQ_INT(acc.sync_gradients, (i + 1) % 3 == 0);
    }
    accel_shutdown(&acc);
    (void)syncs;

    /* scheduler rule: P steps per optimizer step unless split_batches; none when not syncing or skipped */
    memset(&d, 0, sizeof d);
    d.no_mpi = 1;
    d.num_processes = 1; /* explicit layout, but pretend P=4 for the rule below */
    d.gradient_accumulation_steps = 2;
    AT_EQ_INT(accel_init(&acc, &d), ACCEL_OK);
    acc.num_processes = 4; /* the rule reads num_processes; a single-process test can't launch 4 */
    accel_accumulate_begin(&acc); /* step 1: no sync */
    AT_EQ_INT(acc.sync_gradients, 0);
    accel_optimizer_step_done(&acc, 0); /* ignored: not a sync step */
    AT_EQ_INT(acc.optimizer_steps, 0);
    AT_EQ_INT(accel_scheduler_steps(&acc, 0), 0);
    AT_EQ_INT(acc.scheduler_adjusted_steps, 1); /* adjust_scheduler (default on, honoured: policy 3) */
    accel_accumulate_begin(&acc); /* step 2: sync */
    AT_EQ_INT(acc.sync_gradients, 1);
    accel_optimizer_step_done(&acc, 0);
    AT_EQ_INT(acc.optimizer_steps, 1);
    AT_EQ_INT(accel_scheduler_steps(&acc, 0), 4);
    accel_accumulate_begin(&acc);
    accel_accumulate_begin(&acc);
    accel_optimizer_step_done(&acc, 1); /* the scaler skipped */
    AT_EQ_INT(acc.optimizer_step_was_skipped, 1);
    AT_EQ_INT(accel_scheduler_steps(&acc, 0), 0);
    AT_EQ_INT(acc.scheduler_steps, 4);
    accel_accumulate_begin(&acc);
    accel_accumulate_begin(&acc);
    accel_optimizer_step_done(&acc, 0);
    AT_EQ_INT(acc.optimizer_step_was_skipped, 0);
    /* OneCycle-style cap: torch's _step_count = 1 + 4 steps + 1 adjusted bump = 6; stepping continues while it is
       <= total_steps = 8, so 3 of the 4 steps happen */
    AT_EQ_INT(accel_scheduler_steps(&acc, 8), 3);
    AT_EQ_INT(accel_scheduler_steps(&acc, 8), 0);
    acc.desc.split_batches = 1;
    AT_EQ_INT(accel_scheduler_steps(&acc, 0), 1);
    acc.desc.no_step_scheduler_with_optimizer = 1;
    accel_accumulate_begin(&acc); /* not syncing, but stepping per call */
    AT_EQ_INT(accel_scheduler_steps(&acc, 0), 1);
    acc.num_processes = 1;
    accel_shutdown(&acc);
}

static void test_version(void) {
    char buf[32];
    snprintf(buf, sizeof buf, "%d.%d.%d", ACCEL_VERSION_MAJOR, ACCEL_VERSION_MINOR, ACCEL_VERSION_PATCH);
    AT_EQ_STR(accel_version_string(), buf);
    AT_EQ_INT(accel_version(), ACCEL_VERSION_MAJOR * 10000 + ACCEL_VERSION_MINOR * 100 + ACCEL_VERSION_PATCH);
}

/* issue 26: host collectives on a zeroed, never initialised Accelerator are errors (were: OK, as one process) */
static void test_zeroed_accel(void) {
    accel acc;
    double v = 1.5;
    int64_t w = 3;
    unsigned char b[8] = {0};
    memset(&acc, 0, sizeof acc);
    AT_EQ_INT(accel_host_allreduce_f64(&acc, &v, 1, ACCEL_HOST_SUM), ACCEL_ERR_STATE);
    AT_CONTAINS(accel_last_error(&acc), "not initialized");
    AT_EQ_INT(accel_host_allreduce_i64(&acc, &w, 1, ACCEL_HOST_SUM), ACCEL_ERR_STATE);
    AT_EQ_INT(accel_host_broadcast(&acc, b, sizeof b, 0), ACCEL_ERR_STATE);
    AT_EQ_INT(accel_wait_for_everyone(&acc), ACCEL_ERR_STATE);
    AT_CHECK(v == 1.5 && w == 3);
}

/* accel_free_port: a loopback port that this process can then listen on (and not 0). */
static void test_free_port(void) {
    struct sockaddr_in a;
    int port = accel_free_port(), fd = socket(AF_INET, SOCK_STREAM, 0);
    AT_CHECK(port > 0 && port < 65536);
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    AT_CHECK(fd >= 0);
    AT_CHECK_MSG(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && listen(fd, 1) == 0, "the port is free");
    if (fd >= 0) close(fd);
}

int main(void) {
    test_version();
    test_zeroed_accel();
    test_launchers();
    test_explicit_desc();
    test_accelerate_env();
    test_parse_bool();
    test_results_and_dtypes();
    test_philox();
    test_accelerator_single();
    test_accumulation();
    test_free_port();
    return at_finish("core");
}
