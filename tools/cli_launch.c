/* `accel launch` — torchrun's single-node / static multi-node launcher for native programs — and `accel config`
   (Accelerate's write_basic_config).

   accel launch [-n|--nproc-per-node N] [--nnodes K --node-rank R --master-addr A --master-port P]
                [--mixed-precision no|fp16|bf16|fp8] [--gradient-accumulation-steps S] [--cpu] [--debug]
                [--run-id ID] [--config-file F] [--gpu-ids LIST] [--num-cpu-threads-per-process T]
                [--max-restarts N] [--rdzv-timeout S] [--tee] [--] PROGRAM ARGS...
     Starts N copies of PROGRAM with the environment torchrun gives its workers (RANK, LOCAL_RANK, WORLD_SIZE,
     LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, ROLE_RANK, ROLE_WORLD_SIZE, ROLE_NAME, MASTER_ADDR, MASTER_PORT)
     plus Accelerate's (ACCELERATE_MIXED_PRECISION, ACCELERATE_GRADIENT_ACCUMULATION_STEPS, ACCELERATE_USE_CPU,
     ACCELERATE_DEBUG_MODE) and ACCEL_RUN_ID; accel's core then forms its host group over a TCP store on
     MASTER_PORT. Single node: MASTER_ADDR 127.0.0.1 and a free port unless given. Multi-node (--nnodes > 1): run it
     once per node with the same --nnodes, --master-addr / --master-port (default 29500) and that node's --node-rank;
     -n may differ between nodes (torchrun's --nproc-per-node with its c10d rendezvous). Before anything starts, the
     nodes' launchers meet at --master-addr:--master-port (node 0 listens; accel_host_rendezvous: the store's
     admission with the job's secret, under the run id + "/launchers") and exchange their process counts and
     settings; ranks follow node ranks, torchrun's rule (_assign_worker_ranks): node g's processes get RANK
     offset .. offset + n_g - 1, offset = n_0 + ... + n_(g-1), WORLD_SIZE = the sum over all nodes, LOCAL_WORLD_SIZE =
     n_g, GROUP_RANK = g, ROLE_RANK = RANK. E.g. -n 1, 2, 3 on nodes 0, 1, 2: ranks 0 | 1 2 | 3 4 5, world 6.
     Then the port is free again for the job's store. Every launcher exits 1, printing why, when the nodes do not
     all arrive within --rdzv-timeout S (default 600, torchrun's join timeout: node 0 names the nodes that did not
     come, and tells those that did; a node that cannot reach node 0 names node 0), when a launcher is refused (a
     wrong ACCEL_STORE_SECRET: "not admitted: wrong secret"; another --nnodes; a --node-rank already taken; another
     --run-id) — it says so and the others name it as missing —, or when a setting that every node must share
     differs (--mixed-precision, --gradient-accumulation-steps, --cpu, --debug, --max-restarts: "node 1 has
     --mixed-precision bf16 and node 0 has unset"). No process starts on any node in these cases.
     The store admits only processes that know the job's secret (accel_hostgroup.h: SECURITY): on one node accel launch
     makes a random one per job and hands it to its processes in the environment (ACCEL_STORE_SECRET; never on a command
     line); across nodes every node's launcher passes on the ACCEL_STORE_SECRET it was started with (set the same random
     value on every node), or the store refuses a non-loopback address unless ACCEL_STORE_TRUSTED_NETWORK=1.
     Counts are bounded before anything is allocated or started: at most 1024 processes a node (-n or the config's
     num_processes / num_machines), at most 65536 nodes.
     SIGINT, SIGTERM, SIGHUP and SIGQUIT are forwarded to every process, as torchrun does; each process runs in a
     session of its own (torchrun's start_new_session: their children get the signals too, and a process reading the
     terminal is not stopped by SIGTTIN) and dies with the launcher if the launcher is killed (PR_SET_PDEATHSIG,
     Linux). When one process fails, the others get SIGTERM (SIGKILL 5 s later) and accel launch exits with the
     failed process's code (128 + signal number when it was killed), naming its rank — a rank killed by a signal
     rather than one that then failed in a collective, when both have ended by the time the launcher looks.
     --max-restarts N (torchrun's, default 0): after a failure the node's processes are all stopped and started
     again, up to N times, with TORCHELASTIC_RESTART_COUNT / ACCEL_RESTART_COUNT = the attempt (0 first) and
     TORCHELASTIC_MAX_RESTARTS = N; a trainer resumes from its newest complete checkpoint (examples/quickstart.c).
     A signal to the launcher ends the job instead, and so does a preemption (every process exiting with
     ACCEL_EXIT_REQUEUE: accel launch exits with it, for the job script to requeue). SIGUSR1 (Slurm's
     --signal=USR1@90) is passed on to every process without ending anything. Across nodes each node's launcher
     restarts its own processes with the ranks the rendezvous gave (the others fail on the broken store and restart
     too, given the same N, which the rendezvous checks).
     --cpu (or use_cpu: true) with several processes on one node, in an accel built with MPI: the node's processes
     are started by this build's mpirun (accelerate launch --multi_cpu's rule: CPU data collectives need MPI) — one
     child, mpirun -np N PROGRAM, under the same signals, session and restarts, with Accelerate's variables and no
     torchrun ones; --tee is not applied there.
     --tee prefixes every output line with "[rank<R>]: " (torchrun's format).
     --gpu-ids 0,1 sets CUDA_VISIBLE_DEVICES ("all": left alone), --num-cpu-threads-per-process T sets
     OMP_NUM_THREADS (otherwise 1 when a node runs several processes and it is unset, as torchrun), as accelerate
     launch does.
     --config-file reads an Accelerate config file (YAML or JSON, parsed with libyaml). Applied: num_processes (all
     machines: divided by num_machines or --nnodes, unless -n gives the count a node), num_machines, machine_rank,
     main_process_ip, main_process_port, mixed_precision (and the older fp16: true), gpu_ids, use_cpu, debug, and
     accel's own gradient_accumulation_steps. Accepted with no effect: compute_environment LOCAL_MACHINE,
     distributed_type NO / MULTI_CPU / MULTI_GPU, rdzv_backend static / c10d, same_network, main_training_function,
     downcast_bf16 and the TPU keys. Refused, naming the key and what to use instead, when they ask for something:
     distributed_type DEEPSPEED / FSDP / ..., deepspeed_config, fsdp_config, megatron_lm_config,
     parallelism_config, fp8_config, mpirun_config, dynamo_config (dynamo_backend other than NO),
     enable_cpu_affinity: true. Any other key is refused as Accelerate refuses it (a typo would otherwise launch
     without the setting). Without --config-file, Accelerate's default config file is read when it exists
     ($HF_HOME/accelerate/default_config.yaml, else ${XDG_CACHE_HOME:-~/.cache}/huggingface/accelerate/
     default_config.yaml). Command-line options override the file; errors name the flag or the file's key.

   accel config --default [--mixed-precision no|fp16|bf16] [FILE]
     Writes Accelerate's basic config (write_basic_config: this machine, every CUDA device or the CPU) as JSON to
     FILE (default: the default config file above). An existing file is left alone, as Accelerate does.

   Exit codes: the program's (launch), 0 ok, 1 failure, 2 usage error. */
#define _DEFAULT_SOURCE 1 /* setenv, unsetenv, kill(-pgid) under -std=c99 */
#include "accel.h"
#include "cli.h"
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <netinet/in.h>
#include <arpa/inet.h>
#include <netdb.h>
#ifndef ACCEL_CLI_NO_YAML
#include <yaml.h>
#endif
#ifdef ACCEL_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

#define LAUNCH_MAX 1024        /* processes a node (the --tee poll set is sized by it) */
#define LAUNCH_MAX_NODES 65536
#define LAUNCH_MAX_CONFIG (1 << 20) /* bytes of a config file */
#define LAUNCH_BLAME_S 0.5          /* how long a failure by exit code waits for a rank killed by a signal */

typedef struct launch_cfg {
    int nproc, nnodes, node_rank, master_port, accum, use_cpu, debug, tee, total; /* -1 / 0: unset */
    int threads;                 /* --num-cpu-threads-per-process: OMP_NUM_THREADS (0: torchrun's default) */
    int max_restarts, restart;   /* --max-restarts, and which attempt this is (0 = the first) */
    int mpirun_np;               /* > 0: the one process started is mpirun, starting this many (--cpu, MPI built in) */
    int rank_base, world;        /* this node's first RANK and WORLD_SIZE (several nodes: from the rendezvous) */
    int rdzv_timeout;            /* --rdzv-timeout: seconds the nodes' launchers wait for each other */
    char master_addr[256], precision[16], run_id[320];
    char gpu_ids[256];           /* the config's gpu_ids (or --gpu-ids): CUDA_VISIBLE_DEVICES, "" = all */
    char secret[72]; /* ACCEL_STORE_SECRET made for this job ("" when the launcher's own environment has one) */
} launch_cfg;

static void launch_usage(FILE *f) {
    fprintf(f,
            "usage: accel launch [-n|--nproc-per-node N] [--nnodes K --node-rank R --master-addr A --master-port P]\n"
            "                    [--mixed-precision no|fp16|bf16|fp8] [--gradient-accumulation-steps S] [--cpu] [--debug]\n"
            "                    [--run-id ID] [--config-file F] [--gpu-ids LIST] [--num-cpu-threads-per-process T]\n"
            "                    [--max-restarts N] [--rdzv-timeout S] [--tee] [--] PROGRAM ARGS...\n"
            "       accel config --default [--mixed-precision no|fp16|bf16] [FILE]\n");
}

static int launch_int(const char *opt, const char *s, long lo, long hi, int *out) {
    char *end = NULL;
    long v;
    if (!s) { fprintf(stderr, "accel launch: %s needs a value\n", opt); return 0; }
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "accel launch: %s: '%s' is not an integer in [%ld, %ld]\n", opt, s, lo, hi);
        return 0;
    }
    *out = (int)v;
    return 1;
}

static int launch_precision_ok(const char *s) {
    return !strcmp(s, "no") || !strcmp(s, "fp16") || !strcmp(s, "bf16") || !strcmp(s, "fp8");
}

/* Accelerate's default config file location (config_args.py). */
static void launch_default_config(char *out, size_t cap) {
    const char *hf = getenv("HF_HOME"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (hf && *hf) snprintf(out, cap, "%s/accelerate/default_config.yaml", hf);
    else if (xdg && *xdg) snprintf(out, cap, "%s/huggingface/accelerate/default_config.yaml", xdg);
    else snprintf(out, cap, "%s/.cache/huggingface/accelerate/default_config.yaml", home ? home : ".");
}

/* gpu_ids: "all" or a comma-separated list of device numbers (Accelerate passes it to CUDA_VISIBLE_DEVICES). */
static int config_gpu_ids(const char *where, const char *v, char *out, size_t cap) {
    const char *p = v;
    if (!strcmp(v, "all")) { out[0] = 0; return 1; }
    while (*p) {
        if (!((*p >= '0' && *p <= '9') || (*p == ',' && p != v && p[1] && p[-1] != ','))) {
            fprintf(stderr, "accel launch: %s gpu_ids '%s' is not \"all\" or a list of device numbers (\"0,1\")\n",
                    where, v);
            return 0;
        }
        ++p;
    }
    if (!*v || strlen(v) >= cap) {
        fprintf(stderr, "accel launch: %s gpu_ids '%s' is not valid\n", where, v);
        return 0;
    }
    snprintf(out, cap, "%s", v);
    return 1;
}

/* ------------------------------------------------------------------------------------------ config files */
#ifdef ACCEL_CLI_NO_YAML
/* Built without libyaml: a config file that would be read is an error, never silently skipped (its keys would change
   the launch). */
static int config_parse(const unsigned char *buf, size_t n, const char *path, launch_cfg *c) {
    (void)buf; (void)n; (void)c;
    fprintf(stderr, "accel launch: cannot read config file %s: this accel was built without libyaml "
                    "(install libyaml-dev and rebuild)\n", path);
    return 0;
}
#else
static int config_bool(const char *key, const char *v, int *out) {
    int b = accel_parse_bool(v);
    if (!strcmp(v, "null") || !strcmp(v, "~") || !*v) return 1;
    if (b < 0) { fprintf(stderr, "accel launch: config key %s: '%s' is not a boolean\n", key, v); return 0; }
    *out = b;
    return 1;
}

/* Edit distance of two short keys (for "did you mean"); capped at 9. */
static int config_distance(const char *a, const char *b) {
    int d[40][40];
    size_t i, j, n = strlen(a), m = strlen(b);
    if (n >= 40 || m >= 40) return 9;
    for (i = 0; i <= n; ++i) d[i][0] = (int)i;
    for (j = 0; j <= m; ++j) d[0][j] = (int)j;
    for (i = 1; i <= n; ++i)
        for (j = 1; j <= m; ++j) {
            int x = d[i - 1][j] + 1, y = d[i][j - 1] + 1, z = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            d[i][j] = x < y ? (x < z ? x : z) : (y < z ? y : z);
        }
    return d[n][m] < 9 ? d[n][m] : 9;
}

/* 1 when a nested section is empty or says nothing (null, {}, [], or, for dynamo_config, only dynamo_backend: NO) */
static int config_empty(yaml_document_t *doc, yaml_node_t *v, const char *key) {
    yaml_node_pair_t *q;
    if (v->type == YAML_SCALAR_NODE) {
        const char *x = (const char *)v->data.scalar.value;
        return !*x || !strcmp(x, "null") || !strcmp(x, "~") || (!strcmp(key, "dynamo_backend") && !strcmp(x, "NO"));
    }
    if (v->type == YAML_SEQUENCE_NODE) return v->data.sequence.items.start == v->data.sequence.items.top;
    if (v->type != YAML_MAPPING_NODE) return 0;
    for (q = v->data.mapping.pairs.start; q < v->data.mapping.pairs.top; ++q) {
        yaml_node_t *k = yaml_document_get_node(doc, q->key), *x = yaml_document_get_node(doc, q->value);
        const char *ks = k && k->type == YAML_SCALAR_NODE ? (const char *)k->data.scalar.value : "";
        if (!strcmp(key, "dynamo_config") && !strcmp(ks, "dynamo_backend") && x && x->type == YAML_SCALAR_NODE &&
            (!strcmp((const char *)x->data.scalar.value, "NO") || !strcmp((const char *)x->data.scalar.value, "no")))
            continue;
        return 0;
    }
    return 1;
}

/* Every key of Accelerate's ClusterConfig (commands/config/config_args.py, 1.15) and what accel launch does with it:
   applied, accepted with no effect here (TPU pods, SageMaker-only or informational keys), or refused when it asks for
   something accel cannot do — then the message names the key and what to use. Accelerate refuses keys it does not
   know, and so does accel launch (a typo such as num_proceses would otherwise launch without the setting). */
static const char *const config_keys[] = {
    "compute_environment", "distributed_type", "mixed_precision", "use_cpu", "debug", "num_processes",
    "machine_rank", "num_machines", "gpu_ids", "main_process_ip", "main_process_port", "rdzv_backend", "same_network",
    "main_training_function", "enable_cpu_affinity", "fp8_config", "deepspeed_config", "fsdp_config",
    "parallelism_config", "megatron_lm_config", "mpirun_config", "downcast_bf16", "tpu_name", "tpu_zone",
    "tpu_use_cluster", "tpu_use_sudo", "command_file", "commands", "tpu_vm", "tpu_env", "dynamo_config",
    "fp16", "dynamo_backend",            /* older files: Accelerate converts them (process_config) */
    "gradient_accumulation_steps",       /* accel's own key (accelerate launch takes it on the command line) */
    NULL};

/* Keys whose non-empty value asks for what accel does not have, and what to use instead. */
static const char *config_refusal(const char *key) {
    static const char *const r[][2] = {
        {"deepspeed_config", "accel has no DeepSpeed: shard optimizer states and gradients with accel_zero.h in "
                             "the program (its gradient_accumulation_steps: --gradient-accumulation-steps)"},
        {"fsdp_config", "accel has no FSDP: shard optimizer states and gradients with accel_zero.h in the program"},
        {"megatron_lm_config", "accel has no Megatron-LM tensor/pipeline parallelism"},
        {"parallelism_config", "accel has data parallelism only (accel_ddp.h, accel_zero.h)"},
        {"fp8_config", "accel's fp8 recipe is chosen in the program (accel_amp.h); mixed_precision: fp8 selects it"},
        {"dynamo_config", "torch.compile (dynamo) has no counterpart in a C program"},
        {"dynamo_backend", "torch.compile (dynamo) has no counterpart in a C program"},
        {"mpirun_config", "accel launch does not run mpirun: start the program with mpirun yourself"},
    };
    size_t i;
    for (i = 0; i < sizeof r / sizeof r[0]; ++i)
        if (!strcmp(key, r[i][0])) return r[i][1];
    return NULL;
}

/* The keys of an Accelerate config file (YAML, or JSON which libyaml reads as YAML flow syntax), from its n bytes
   (untrusted: fuzzed by tests/fuzz/core). path names it in messages. */
static int config_parse(const unsigned char *buf, size_t n, const char *path, launch_cfg *c) {
    yaml_parser_t p;
    yaml_document_t doc;
    yaml_node_t *root;
    yaml_node_pair_t *pair;
    int ok = 1, machines = -1, fp16 = -1;
    char where[1100];
    snprintf(where, sizeof where, "%s:", path);
    if (!yaml_parser_initialize(&p)) { fprintf(stderr, "accel launch: libyaml init failed\n"); return 0; }
    yaml_parser_set_input_string(&p, buf, n);
    if (!yaml_parser_load(&p, &doc)) {
        fprintf(stderr, "accel launch: %s is not valid YAML/JSON: %s at line %lu\n", path, p.problem ? p.problem : "?",
                (unsigned long)p.problem_mark.line + 1);
        yaml_parser_delete(&p);
        return 0;
    }
    root = yaml_document_get_root_node(&doc);
    if (!root || root->type != YAML_MAPPING_NODE) {
        fprintf(stderr, "accel launch: %s: the config must be a mapping of keys to values\n", path);
        ok = 0;
    }
    for (pair = root && ok ? root->data.mapping.pairs.start : NULL; ok && pair && pair < root->data.mapping.pairs.top; ++pair) {
        yaml_node_t *k = yaml_document_get_node(&doc, pair->key), *v = yaml_document_get_node(&doc, pair->value);
        const char *key, *val, *why;
        size_t i;
        if (!k || k->type != YAML_SCALAR_NODE || !v) {
            fprintf(stderr, "accel launch: %s a key that is not a plain name\n", where);
            ok = 0;
            break;
        }
        key = (const char *)k->data.scalar.value;
        for (i = 0; config_keys[i] && strcmp(config_keys[i], key); ++i) {}
        if (!config_keys[i]) {
            const char *best = NULL;
            int bd = 3;
            for (i = 0; config_keys[i]; ++i) {
                int d = config_distance(key, config_keys[i]);
                if (d < bd) { bd = d; best = config_keys[i]; }
            }
            if (!strcmp(key, "num_cpu_threads_per_process"))
                fprintf(stderr, "accel launch: %s unknown key 'num_cpu_threads_per_process': it is an option of "
                        "accelerate launch, not a config key (use --num-cpu-threads-per-process N)\n", where);
            else
                fprintf(stderr, "accel launch: %s unknown key '%.100s' (not one of Accelerate's config keys)%s%s%s\n",
                        where, key, best ? "; did you mean " : "", best ? best : "", best ? "?" : "");
            ok = 0;
            break;
        }
        why = config_refusal(key);
        if (why) {
            if (!config_empty(&doc, v, key)) {
                fprintf(stderr, "accel launch: %s %s is not supported: %s (remove the key)\n", where, key, why);
                ok = 0;
            }
            continue;
        }
        if (v->type != YAML_SCALAR_NODE) {
            if (!config_empty(&doc, v, key) && strcmp(key, "commands") && strcmp(key, "tpu_vm") &&
                strcmp(key, "tpu_env")) {
                fprintf(stderr, "accel launch: %s %s must be a single value\n", where, key);
                ok = 0;
            }
            continue;
        }
        val = (const char *)v->data.scalar.value;
        if (!strcmp(val, "null") || !strcmp(val, "~")) continue;
        if (!strcmp(key, "num_processes")) {
            /* -1: Accelerate's "not set" (the dataclass default, e.g. under SLURM) */
            if (strcmp(val, "-1") != 0)
                ok = launch_int("num_processes", val, 1, (long)LAUNCH_MAX * LAUNCH_MAX_NODES, &c->total);
        } else if (!strcmp(key, "num_machines")) ok = launch_int("num_machines", val, 1, LAUNCH_MAX_NODES, &machines);
        else if (!strcmp(key, "machine_rank"))
            ok = launch_int("machine_rank", val, 0, LAUNCH_MAX_NODES - 1, &c->node_rank);
        else if (!strcmp(key, "main_process_ip")) snprintf(c->master_addr, sizeof c->master_addr, "%s", val);
        else if (!strcmp(key, "main_process_port")) ok = launch_int("main_process_port", val, 1, 65535, &c->master_port);
        else if (!strcmp(key, "gradient_accumulation_steps")) ok = launch_int("gradient_accumulation_steps", val, 1, 1 << 30, &c->accum);
        else if (!strcmp(key, "use_cpu")) ok = config_bool(key, val, &c->use_cpu);
        else if (!strcmp(key, "debug")) ok = config_bool(key, val, &c->debug);
        else if (!strcmp(key, "fp16")) ok = config_bool(key, val, &fp16);
        else if (!strcmp(key, "gpu_ids")) ok = config_gpu_ids(where, val, c->gpu_ids, sizeof c->gpu_ids);
        else if (!strcmp(key, "mixed_precision")) {
            if (!launch_precision_ok(val)) { fprintf(stderr, "accel launch: config mixed_precision '%s' is not no|fp16|bf16|fp8\n", val); ok = 0; }
            else snprintf(c->precision, sizeof c->precision, "%s", val);
        } else if (!strcmp(key, "distributed_type")) {
            if (strcmp(val, "NO") && strcmp(val, "MULTI_CPU") && strcmp(val, "MULTI_GPU")) {
                fprintf(stderr, "accel launch: %s distributed_type %.40s is not supported: accel runs data parallel "
                        "(NO, MULTI_CPU, MULTI_GPU)%s\n", where, val,
                        !strcmp(val, "DEEPSPEED") || !strcmp(val, "FSDP")
                            ? "; shard optimizer states and gradients with accel_zero.h in the program" : "");
                ok = 0;
            }
        } else if (!strcmp(key, "compute_environment")) {
            if (strcmp(val, "LOCAL_MACHINE")) {
                fprintf(stderr, "accel launch: %s compute_environment %.40s is not supported (LOCAL_MACHINE)\n", where,
                        val);
                ok = 0;
            }
        } else if (!strcmp(key, "enable_cpu_affinity")) {
            int b = 0;
            ok = config_bool(key, val, &b);
            if (ok && b) {
                fprintf(stderr, "accel launch: %s enable_cpu_affinity is not supported: accel launch does not bind "
                        "processes to CPUs (start them under numactl or taskset)\n", where);
                ok = 0;
            }
        } else if (!strcmp(key, "rdzv_backend")) {
            if (strcmp(val, "static") && strcmp(val, "c10d")) {
                fprintf(stderr, "accel launch: %s rdzv_backend %.40s is not supported (static, c10d)\n", where, val);
                ok = 0;
            }
        }
        /* same_network, main_training_function, downcast_bf16, tpu_*, command_file: nothing to do off a TPU pod */
    }
    if (ok && machines > 0) c->nnodes = machines;
    if (ok && fp16 == 1 && !c->precision[0]) snprintf(c->precision, sizeof c->precision, "fp16");
    yaml_document_delete(&doc);
    yaml_parser_delete(&p);
    return ok;
}
#endif

/* Reads a config file (at most LAUNCH_MAX_CONFIG bytes) and parses it. */
static int config_read(const char *path, launch_cfg *c) {
    FILE *f = fopen(path, "rb");
    unsigned char *buf;
    size_t n;
    int ok;
    if (!f) { fprintf(stderr, "accel launch: cannot open config file %s: %s\n", path, strerror(errno)); return 0; }
    buf = (unsigned char *)malloc(LAUNCH_MAX_CONFIG + 1);
    if (!buf) { fclose(f); fprintf(stderr, "accel launch: out of memory\n"); return 0; }
    n = fread(buf, 1, LAUNCH_MAX_CONFIG + 1, f);
    ok = !ferror(f);
    fclose(f);
    if (!ok || n > LAUNCH_MAX_CONFIG) {
        fprintf(stderr, "accel launch: cannot read config file %s: %s\n", path,
                ok ? "larger than 1 MiB (not an Accelerate config)" : strerror(errno));
        free(buf);
        return 0;
    }
    ok = config_parse(buf, n, path, c);
    free(buf);
    return ok;
}

/* The master address as every node names it the same way, for the default run id: its first IPv4 address (else
   IPv6) numerically, and "loopback" for any loopback address — so "localhost" on one node and "127.0.0.1" on another
   make one run, as torchrun canonicalises the rendezvous host. Unresolvable: the text as given. */
static void launch_canonical_host(const char *addr, char *out, size_t cap) {
    struct addrinfo hints, *res = NULL;
    int fam;
    snprintf(out, cap, "%s", addr);
    for (fam = 0; fam < 2; ++fam) {
        memset(&hints, 0, sizeof hints);
        hints.ai_family = fam == 0 ? AF_INET : AF_INET6;
        hints.ai_socktype = SOCK_STREAM;
        if (getaddrinfo(addr, NULL, &hints, &res) != 0 || !res) continue;
        if (res->ai_family == AF_INET) {
            const struct sockaddr_in *in = (const struct sockaddr_in *)res->ai_addr;
            if ((ntohl(in->sin_addr.s_addr) >> 24) == 127) snprintf(out, cap, "loopback");
            else inet_ntop(AF_INET, &in->sin_addr, out, (socklen_t)cap);
        } else {
            const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)res->ai_addr;
            if (IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr)) snprintf(out, cap, "loopback");
            else inet_ntop(AF_INET6, &in6->sin6_addr, out, (socklen_t)cap);
        }
        freeaddrinfo(res);
        return;
    }
}

/* The job's secret: 32 bytes from the kernel, as hex (the store's MAC key; accel_hostgroup.h SECURITY). 1 ok. */
static int launch_make_secret(char *out, size_t cap) {
    unsigned char b[32];
    size_t i, got = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    if (f) { got = fread(b, 1, sizeof b, f); fclose(f); }
    if (got != sizeof b || cap < 2 * sizeof b + 1) return 0;
    for (i = 0; i < sizeof b; ++i) snprintf(out + 2 * i, 3, "%02x", b[i]);
    return 1;
}

/* ------------------------------------------------------------------------------------------ the nodes' rendezvous */
/* What a node's launcher tells the others (fixed-size, little-endian): its node rank and count, its process count,
   and the settings every node must share. */
#define RDZV_MAGIC 0x31524c41u /* "ALR1" */
#define RDZV_BYTES 48
static void rdzv_put(unsigned char *b, int v) {
    uint32_t u = (uint32_t)v;
    b[0] = (unsigned char)u;
    b[1] = (unsigned char)(u >> 8);
    b[2] = (unsigned char)(u >> 16);
    b[3] = (unsigned char)(u >> 24);
}
static int rdzv_get(const unsigned char *b) {
    return (int)((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24);
}
enum { RDZV_MAGIC_AT = 0, RDZV_NODE = 4, RDZV_NNODES = 8, RDZV_NPROC = 12, RDZV_ACCUM = 16, RDZV_CPU = 20,
       RDZV_DEBUG = 24, RDZV_RESTARTS = 28, RDZV_PRECISION = 32 /* 16 bytes, NUL-padded */ };
/* A shared setting as the user gave it, for messages. */
static void rdzv_value(int f, int v, char *out, size_t cap) {
    if ((f == RDZV_ACCUM && v == 0) || ((f == RDZV_CPU || f == RDZV_DEBUG) && v < 0)) snprintf(out, cap, "unset");
    else if (f == RDZV_CPU || f == RDZV_DEBUG) snprintf(out, cap, "%s", v ? "true" : "false");
    else snprintf(out, cap, "%d", v);
}
static void rdzv_record(const launch_cfg *c, unsigned char *b) {
    memset(b, 0, RDZV_BYTES);
    rdzv_put(b + RDZV_MAGIC_AT, (int)RDZV_MAGIC);
    rdzv_put(b + RDZV_NODE, c->node_rank);
    rdzv_put(b + RDZV_NNODES, c->nnodes);
    rdzv_put(b + RDZV_NPROC, c->nproc);
    rdzv_put(b + RDZV_ACCUM, c->accum);
    rdzv_put(b + RDZV_CPU, c->use_cpu);
    rdzv_put(b + RDZV_DEBUG, c->debug);
    rdzv_put(b + RDZV_RESTARTS, c->max_restarts);
    memcpy(b + RDZV_PRECISION, c->precision, strlen(c->precision) < 15 ? strlen(c->precision) : 15);
}

/* Several nodes: the launchers meet at --master-addr:--master-port before any process starts (accel_host_rendezvous:
   the store's admission, ACCEL_STORE_SECRET), each with its record; every launcher then reads the same table, so
   they all reach the same verdict. Ranks follow node ranks (torchrun's rule, _assign_worker_ranks: a node's first
   rank is the sum of the process counts of the nodes below it), so nodes may run different counts. 1 ok (rank_base,
   world set), 0 after a message: a node that never came, a launcher refused (wrong secret, another run, a node rank
   taken twice, another --nnodes), or a setting that differs between nodes — named. */
static int launch_rendezvous(launch_cfg *c) {
    static const char *const names[] = {"", "", "", "", "--gradient-accumulation-steps", "--cpu", "--debug",
                                        "--max-restarts"};
    unsigned char mine[RDZV_BYTES], *all;
    char run[sizeof c->run_id + 16], what[400];
    accel ra; /* no Accelerator here: the rendezvous's error only */
    long world = 0, base = 0;
    int n, f, ok = 1;
    memset(&ra, 0, sizeof ra);
    all = (unsigned char *)malloc((size_t)c->nnodes * RDZV_BYTES);
    if (!all) { fprintf(stderr, "accel launch: out of memory\n"); return 0; }
    rdzv_record(c, mine);
    /* a run id of their own: a launcher arriving late can never take a worker's place in the job's store */
    snprintf(run, sizeof run, "%s/launchers", c->run_id);
    snprintf(what, sizeof what, "accel launch rendezvous of %d nodes", c->nnodes);
    if (accel_host_rendezvous(&ra, what, "node", c->master_addr, c->master_port, c->node_rank, c->nnodes, run, mine,
                              all, RDZV_BYTES, (double)c->rdzv_timeout) != ACCEL_OK) {
        fprintf(stderr, "accel launch: node %d: the nodes' launchers did not meet (--rdzv-timeout %d s): %s%s\n",
                c->node_rank, c->rdzv_timeout, accel_last_error(&ra),
                ra.last_result == ACCEL_ERR_TIMEOUT && c->node_rank != 0
                    ? " [node 0 never answered at --master-addr:--master-port: not started, or another address]" : "");
        free(all);
        return 0;
    }
    for (n = 0; n < c->nnodes && ok; ++n) {
        const unsigned char *b = all + (size_t)n * RDZV_BYTES;
        int nproc = rdzv_get(b + RDZV_NPROC);
        if ((uint32_t)rdzv_get(b) != RDZV_MAGIC || rdzv_get(b + RDZV_NODE) != n ||
            rdzv_get(b + RDZV_NNODES) != c->nnodes || nproc < 1 || nproc > LAUNCH_MAX) {
            fprintf(stderr, "accel launch: node %d: node %d's launcher sent a record this one cannot read (another "
                    "accel version?)\n", c->node_rank, n);
            ok = 0;
            break;
        }
        if (n == c->node_rank) base = world;
        world += nproc;
        /* the settings every node must share: compared with node 0's, so every launcher names the same node */
        for (f = RDZV_ACCUM; f <= RDZV_RESTARTS && n > 0; f += 4) {
            char v[16], v0[16];
            if (rdzv_get(b + f) == rdzv_get(all + f)) continue;
            rdzv_value(f, rdzv_get(b + f), v, sizeof v);
            rdzv_value(f, rdzv_get(all + f), v0, sizeof v0);
            fprintf(stderr, "accel launch: node %d: node %d has %s %s and node 0 has %s; every node must be given the "
                    "same settings\n", c->node_rank, n, names[f / 4], v, v0);
            ok = 0;
        }
        if (n > 0 && memcmp(b + RDZV_PRECISION, all + RDZV_PRECISION, 16) != 0) {
            const char *p = (const char *)b + RDZV_PRECISION, *p0 = (const char *)all + RDZV_PRECISION;
            fprintf(stderr, "accel launch: node %d: node %d has --mixed-precision %.15s and node 0 has %.15s; every "
                    "node must be given the same settings\n", c->node_rank, n, *p ? p : "unset", *p0 ? p0 : "unset");
            ok = 0;
        }
    }
    if (ok) {
        c->rank_base = (int)base;
        c->world = (int)world;
    }
    free(all);
    return ok;
}

/* ------------------------------------------------------------------------------------------ processes */
static volatile sig_atomic_t launch_signal = 0;
static volatile sig_atomic_t launch_usr1 = 0; /* SIGUSR1s to pass on (Slurm's preemption notice) */
static int launch_wake[2] = {-1, -1}; /* self-pipe: a signal (SIGCHLD too) wakes the poll loop at once */
static void launch_on_signal(int s) {
    int e = errno;
    if (s == SIGUSR1) launch_usr1 = 1;
    else if (s != SIGCHLD) launch_signal = s;
    if (launch_wake[1] >= 0) (void)!write(launch_wake[1], "", 1);
    errno = e;
}

static double launch_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void launch_setenv_int(const char *k, int v) {
    char b[32];
    snprintf(b, sizeof b, "%d", v);
    setenv(k, b, 1);
}

static void launch_accelerate_env(const launch_cfg *c, int nproc);
/* In the child, before exec: torchrun's worker variables, Accelerate's, and no other launcher's. */
static void launch_child_env(const launch_cfg *c, int local) {
    static const char *drop[] = {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                                 "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID",
                                 "MPI_LOCALNRANKS", "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE",
                                 "MV2_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_SIZE", "TORCHELASTIC_USE_AGENT_STORE",
                                 "TORCHELASTIC_RUN_ID", "ACCEL_STORE_PORT"};
    int rank = c->rank_base + local, world = c->world;
    size_t i;
    static const char *torchrun[] = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                                     "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME"};
    for (i = 0; i < sizeof drop / sizeof drop[0]; ++i) unsetenv(drop[i]);
    launch_setenv_int("TORCHELASTIC_RESTART_COUNT", c->restart); /* torchrun's names, and accel's */
    launch_setenv_int("TORCHELASTIC_MAX_RESTARTS", c->max_restarts);
    launch_setenv_int("ACCEL_RESTART_COUNT", c->restart);
    if (c->mpirun_np > 0) { /* mpirun gives the layout: no torchrun variables that would contradict it */
        for (i = 0; i < sizeof torchrun / sizeof torchrun[0]; ++i) unsetenv(torchrun[i]);
        launch_accelerate_env(c, c->mpirun_np);
        return;
    }
    launch_setenv_int("RANK", rank);
    launch_setenv_int("LOCAL_RANK", local);
    launch_setenv_int("WORLD_SIZE", world);
    launch_setenv_int("LOCAL_WORLD_SIZE", c->nproc);
    launch_setenv_int("GROUP_RANK", c->node_rank);
    launch_setenv_int("GROUP_WORLD_SIZE", c->nnodes);
    launch_setenv_int("ROLE_RANK", rank);
    launch_setenv_int("ROLE_WORLD_SIZE", world);
    setenv("ROLE_NAME", "default", 1);
    setenv("MASTER_ADDR", c->master_addr, 1);
    launch_setenv_int("MASTER_PORT", c->master_port);
    setenv("ACCEL_RUN_ID", c->run_id, 1);
    if (c->secret[0]) setenv("ACCEL_STORE_SECRET", c->secret, 1); /* the environment: never a command line */
    launch_accelerate_env(c, c->nproc);
}

/* Accelerate's variables and the thread count, for nproc processes on this node. */
static void launch_accelerate_env(const launch_cfg *c, int nproc) {
    if (c->precision[0]) setenv("ACCELERATE_MIXED_PRECISION", c->precision, 1);
    if (c->accum > 0) launch_setenv_int("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", c->accum);
    if (c->use_cpu >= 0) setenv("ACCELERATE_USE_CPU", c->use_cpu ? "true" : "false", 1);
    if (c->debug >= 0) setenv("ACCELERATE_DEBUG_MODE", c->debug ? "true" : "false", 1);
    if (c->gpu_ids[0]) setenv("CUDA_VISIBLE_DEVICES", c->gpu_ids, 1); /* as accelerate launch does with gpu_ids */
    if (c->threads > 0) launch_setenv_int("OMP_NUM_THREADS", c->threads); /* --num_cpu_threads_per_process */
    else if (nproc > 1 && !getenv("OMP_NUM_THREADS")) setenv("OMP_NUM_THREADS", "1", 1); /* as torchrun */
}

typedef struct launch_proc {
    pid_t pid;
    int alive, status;
    int fd[2];           /* --tee: stdout, stderr pipes (read ends) */
    char *line[2];       /* partial line per stream */
    size_t nline[2];
} launch_proc;

#define LAUNCH_LINE 65536
/* Writes complete lines of buf with the rank prefix; keeps the partial tail. flush: write the tail too. */
static void launch_tee(launch_proc *p, int rank, int s, const char *buf, size_t n, int flush) {
    FILE *out = s ? stderr : stdout;
    size_t i;
    for (i = 0; i < n; ++i) {
        if (p->nline[s] < LAUNCH_LINE - 1) p->line[s][p->nline[s]++] = buf[i];
        if (buf[i] == '\n' || p->nline[s] >= LAUNCH_LINE - 1) {
            fprintf(out, "[rank%d]: %.*s%s", rank, (int)p->nline[s], p->line[s], buf[i] == '\n' ? "" : "\n");
            p->nline[s] = 0;
        }
    }
    if (flush && p->nline[s]) {
        fprintf(out, "[rank%d]: %.*s\n", rank, (int)p->nline[s], p->line[s]);
        p->nline[s] = 0;
    }
    fflush(out);
}

static void launch_kill_all(launch_proc *ps, int n, int sig) {
    int i;
    for (i = 0; i < n; ++i)
        if (ps[i].alive && kill(-ps[i].pid, sig) != 0) (void)kill(ps[i].pid, sig);
}

static int launch_run(const launch_cfg *c, char **prog) {
    launch_proc *ps = (launch_proc *)calloc((size_t)c->nproc, sizeof *ps);
    int i, alive = 0, failed = -1, code = 0, forwarded = 0, stopped = 0, cand = -1;
    double cand_until = 0;
    double stop_at = 0;
    struct sigaction sa;
    pid_t launcher = getpid();
    if (c->nproc < 1 || c->nproc > LAUNCH_MAX) { /* cli_launch bounds it; the poll set below is sized by it */
        free(ps);
        fprintf(stderr, "accel launch: %d processes a node (1..%d)\n", c->nproc, LAUNCH_MAX);
        return 2;
    }
    if (!ps) { fprintf(stderr, "accel launch: out of memory\n"); return 1; }
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = launch_on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART; /* SIGCHLD must not cut the --tee writes short */
    /* torchrun's set: SIGINT, SIGTERM, SIGHUP (terminal or ssh closed), SIGQUIT are forwarded */
    if (pipe(launch_wake) == 0) {
        fcntl(launch_wake[0], F_SETFL, fcntl(launch_wake[0], F_GETFL, 0) | O_NONBLOCK);
        fcntl(launch_wake[1], F_SETFL, fcntl(launch_wake[1], F_GETFL, 0) | O_NONBLOCK);
        fcntl(launch_wake[0], F_SETFD, FD_CLOEXEC);
        fcntl(launch_wake[1], F_SETFD, FD_CLOEXEC);
    }
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sigaction(SIGQUIT, &sa, NULL);
    /* SIGUSR1 (Slurm's --signal=USR1@90 notice reaches every process of the step, the launcher too): passed on
       without ending the job — preemptible workers stop at a step, save and exit ACCEL_EXIT_REQUEUE */
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGCHLD, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    fflush(stdout);
    fflush(stderr);
    for (i = 0; i < c->nproc; ++i) {
        int out[2] = {-1, -1}, err[2] = {-1, -1};
        if (c->tee && (pipe(out) != 0 || pipe(err) != 0)) { fprintf(stderr, "accel launch: pipe: %s\n", strerror(errno)); break; }
        ps[i].pid = fork();
        if (ps[i].pid < 0) { fprintf(stderr, "accel launch: fork: %s\n", strerror(errno)); break; }
        if (ps[i].pid == 0) {
            signal(SIGINT, SIG_DFL);
            signal(SIGTERM, SIG_DFL);
            signal(SIGHUP, SIG_DFL);
            signal(SIGQUIT, SIG_DFL);
            signal(SIGUSR1, SIG_DFL);
            signal(SIGCHLD, SIG_DFL);
            signal(SIGPIPE, SIG_DFL);
            /* a session of its own, as torchrun's workers: a worker that reads the terminal is not stopped by
               SIGTTIN (it is in no job-control group of the terminal), and kill(-pid) reaches its children */
            (void)setsid();
#ifdef __linux__
            /* the launcher killed by SIGKILL (or dying any way) takes its workers with it */
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != launcher) _exit(128 + SIGKILL); /* it died before the prctl */
#endif
            if (c->tee) {
                dup2(out[1], 1);
                dup2(err[1], 2);
                close(out[0]); close(out[1]); close(err[0]); close(err[1]);
            }
            launch_child_env(c, i);
            execvp(prog[0], prog);
            fprintf(stderr, "accel launch: cannot run %s: %s\n", prog[0], strerror(errno));
            _exit(127);
        }
        ps[i].alive = 1;
        ++alive;
        if (c->tee) {
            close(out[1]);
            close(err[1]);
            ps[i].fd[0] = out[0];
            ps[i].fd[1] = err[0];
            ps[i].line[0] = (char *)malloc(LAUNCH_LINE);
            ps[i].line[1] = (char *)malloc(LAUNCH_LINE);
            if (!ps[i].line[0] || !ps[i].line[1]) { fprintf(stderr, "accel launch: out of memory\n"); break; }
        } else {
            ps[i].fd[0] = ps[i].fd[1] = -1;
        }
    }
    if (i < c->nproc) { /* could not start everything: stop what runs */
        failed = -2;
        code = 1;
        launch_kill_all(ps, c->nproc, SIGTERM);
        stop_at = launch_now() + 5.0;
    }
    while (alive > 0) {
        struct pollfd pf[2 * LAUNCH_MAX + 1];
        int who[2 * LAUNCH_MAX + 1], np = 0, k;
        pid_t pid;
        int st;
        if (launch_wake[0] >= 0) {
            pf[np].fd = launch_wake[0]; pf[np].events = POLLIN; pf[np].revents = 0; who[np++] = -1;
        }
        for (k = 0; c->tee && k < c->nproc; ++k) {
            int s;
            for (s = 0; s < 2; ++s)
                if (ps[k].fd[s] >= 0) { pf[np].fd = ps[k].fd[s]; pf[np].events = POLLIN; pf[np].revents = 0; who[np++] = 2 * k + s; }
        }
        if (poll(np ? pf : NULL, (nfds_t)np, 50) > 0) {
            for (k = 0; k < np; ++k) {
                char buf[8192];
                ssize_t n;
                int r = who[k] / 2, s = who[k] % 2;
                if (!pf[k].revents) continue;
                if (who[k] < 0) { while (read(pf[k].fd, buf, sizeof buf) > 0) {} continue; }
                n = read(pf[k].fd, buf, sizeof buf);
                if (n > 0) launch_tee(&ps[r], c->rank_base + r, s, buf, (size_t)n, 0);
                else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
                    launch_tee(&ps[r], c->rank_base + r, s, "", 0, 1);
                    close(ps[r].fd[s]);
                    ps[r].fd[s] = -1;
                }
            }
        }
        if (launch_usr1) {
            launch_usr1 = 0;
            fprintf(stderr, "accel launch: got SIGUSR1, passing it on to %d process(es)\n", alive);
            launch_kill_all(ps, c->nproc, SIGUSR1);
        }
        if (launch_signal && !forwarded) {
            forwarded = 1;
            fprintf(stderr, "accel launch: got signal %d, forwarding it to %d process(es)\n", (int)launch_signal, alive);
            launch_kill_all(ps, c->nproc, (int)launch_signal);
            if (!stop_at) stop_at = launch_now() + 10.0;
            if (!code) code = 128 + (int)launch_signal;
        }
        /* reap everything that has ended, then name the failure. A rank killed by a signal is the cause rather than
           one that exited with an error after it: waitpid returns children in fork order, so when rank 1 is killed
           and rank 0 exits 1 on noticing, both may be here at once — or rank 0 even first (a killed process closes
           its sockets before it becomes a zombie). So a failure by exit code waits up to LAUNCH_BLAME_S for a
           killed rank before it is named and the others are stopped. */
        while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
            for (k = 0; k < c->nproc; ++k) {
                if (ps[k].pid != pid || !ps[k].alive) continue;
                ps[k].alive = 0;
                ps[k].status = st;
                --alive;
                if (failed != -1 || forwarded || (WIFEXITED(st) && WEXITSTATUS(st) == 0)) continue;
                if (cand < 0) cand_until = launch_now() + LAUNCH_BLAME_S;
                if (cand < 0 || (WIFSIGNALED(st) && !WIFSIGNALED(ps[cand].status))) cand = k;
            }
        }
        if (cand >= 0 && failed == -1 && !forwarded &&
            (WIFSIGNALED(ps[cand].status) || alive == 0 || launch_now() >= cand_until)) {
            failed = cand;
            st = ps[cand].status;
            code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            stopped = alive;
            if (alive > 0) {
                launch_kill_all(ps, c->nproc, SIGTERM);
                stop_at = launch_now() + 5.0;
            }
        }
        if (stop_at && launch_now() > stop_at && alive > 0) {
            launch_kill_all(ps, c->nproc, SIGKILL);
            stop_at = launch_now() + 3600.0;
        }
    }
    /* the rest of the tee'd output */
    for (i = 0; c->tee && i < c->nproc; ++i) {
        int s;
        for (s = 0; s < 2; ++s) {
            char buf[8192];
            ssize_t n;
            if (ps[i].fd[s] < 0) continue;
            while ((n = read(ps[i].fd[s], buf, sizeof buf)) > 0) launch_tee(&ps[i], c->rank_base + i, s, buf, (size_t)n, 0);
            launch_tee(&ps[i], c->rank_base + i, s, "", 0, 1);
            close(ps[i].fd[s]);
        }
    }
    if (failed >= 0 && c->mpirun_np > 0) {
        int st = ps[failed].status;
        fprintf(stderr, "accel launch: mpirun (%d processes) %s %d\n", c->mpirun_np,
                WIFEXITED(st) ? "exited with code" : "was killed by signal",
                WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
    } else if (failed >= 0) {
        int st = ps[failed].status;
        if (WIFEXITED(st))
            fprintf(stderr, "accel launch: rank %d (local rank %d, pid %ld) exited with code %d; stopped the other %d "
                    "process(es) still running\n", c->rank_base + failed, failed, (long)ps[failed].pid,
                    WEXITSTATUS(st), stopped);
        else
            fprintf(stderr, "accel launch: rank %d (local rank %d, pid %ld) was killed by signal %d (%s); stopped the "
                    "other %d process(es) still running\n", c->rank_base + failed, failed,
                    (long)ps[failed].pid, WTERMSIG(st), strsignal(WTERMSIG(st)), stopped);
    }
    /* every process stopped for a requeue (preempted: saved at one step, accel.h PREEMPTION), also after a forwarded
       SIGTERM: the job's code is theirs, so that the job script requeues */
    for (i = 0; i < c->nproc && ps[i].pid > 0 && WIFEXITED(ps[i].status) &&
                WEXITSTATUS(ps[i].status) == ACCEL_EXIT_REQUEUE; ++i) {}
    if (i == c->nproc && failed != -2) {
        code = ACCEL_EXIT_REQUEUE;
        fprintf(stderr, "accel launch: every process stopped for a requeue (exit %d)\n", ACCEL_EXIT_REQUEUE);
    }
    for (i = 0; i < c->nproc; ++i) { free(ps[i].line[0]); free(ps[i].line[1]); }
    free(ps);
    if (launch_wake[0] >= 0) { close(launch_wake[0]); close(launch_wake[1]); launch_wake[0] = launch_wake[1] = -1; }
    return code;
}

int cli_launch(int argc, char **argv) {
    launch_cfg c, cli;
    char cfgpath[1024] = "";
    char **prog = NULL;
    int i, explicit_config = 0, file_nnodes, file_rank;
    memset(&c, 0, sizeof c);
    c.use_cpu = c.debug = -1;
    c.node_rank = -1;
    c.nnodes = 0;
    cli = c;
    for (i = 1; i < argc; ++i) {
        const char *a = argv[i], *v = NULL, *eq = strchr(a, '=');
        char name[64];
        if (!strcmp(a, "--")) { prog = argv + i + 1; break; }
        if (a[0] != '-') { prog = argv + i; break; }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { launch_usage(stdout); return 0; }
        snprintf(name, sizeof name, "%.*s", eq && a[1] == '-' ? (int)(eq - a) : (int)strlen(a), a);
        { char *u; for (u = name; *u; ++u) if (*u == '_') *u = '-'; }
        if (!strcmp(name, "--tee")) { cli.tee = 1; continue; }
        if (!strcmp(name, "--cpu")) { cli.use_cpu = 1; continue; }
        if (!strcmp(name, "--debug")) { cli.debug = 1; continue; }
        v = eq && a[1] == '-' ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!v) { fprintf(stderr, "accel launch: %s needs a value\n", name); return 2; }
        if (!strcmp(name, "-n") || !strcmp(name, "--nproc-per-node")) { if (!launch_int(name, v, 1, LAUNCH_MAX, &cli.nproc)) return 2; }
        else if (!strcmp(name, "--nnodes")) { if (!launch_int(name, v, 1, LAUNCH_MAX_NODES, &cli.nnodes)) return 2; }
        else if (!strcmp(name, "--node-rank")) {
            if (!launch_int(name, v, 0, LAUNCH_MAX_NODES - 1, &cli.node_rank)) return 2;
        }
        else if (!strcmp(name, "--master-addr")) snprintf(cli.master_addr, sizeof cli.master_addr, "%s", v);
        else if (!strcmp(name, "--master-port")) { if (!launch_int(name, v, 1, 65535, &cli.master_port)) return 2; }
        else if (!strcmp(name, "--gradient-accumulation-steps")) { if (!launch_int(name, v, 1, 1 << 30, &cli.accum)) return 2; }
        else if (!strcmp(name, "--mixed-precision")) {
            if (!launch_precision_ok(v)) { fprintf(stderr, "accel launch: --mixed-precision '%s' is not no|fp16|bf16|fp8\n", v); return 2; }
            snprintf(cli.precision, sizeof cli.precision, "%s", v);
        } else if (!strcmp(name, "--run-id")) snprintf(cli.run_id, sizeof cli.run_id, "%s", v);
        else if (!strcmp(name, "--config-file")) { snprintf(cfgpath, sizeof cfgpath, "%s", v); explicit_config = 1; }
        else if (!strcmp(name, "--num-cpu-threads-per-process")) {
            if (!launch_int(name, v, 1, 1 << 16, &cli.threads)) return 2;
        } else if (!strcmp(name, "--max-restarts")) {
            if (!launch_int(name, v, 0, 1 << 20, &cli.max_restarts)) return 2;
        } else if (!strcmp(name, "--rdzv-timeout")) {
            if (!launch_int(name, v, 1, 7 * 86400, &cli.rdzv_timeout)) return 2;
        } else if (!strcmp(name, "--gpu-ids")) {
            if (!config_gpu_ids("--gpu-ids:", v, cli.gpu_ids, sizeof cli.gpu_ids)) return 2;
            if (!cli.gpu_ids[0]) snprintf(cli.gpu_ids, sizeof cli.gpu_ids, "all");
        }
        else { fprintf(stderr, "accel launch: unknown option %s\n", name); launch_usage(stderr); return 2; }
    }
    if (!prog || !prog[0]) { fprintf(stderr, "accel launch: no program given\n"); launch_usage(stderr); return 2; }
    /* the config file first, then the command line over it (as accelerate launch) */
    if (!explicit_config) launch_default_config(cfgpath, sizeof cfgpath);
    if (explicit_config || access(cfgpath, R_OK) == 0) {
        if (!config_read(cfgpath, &c)) return 2;
    }
    /* the file's num_processes counts every machine (Accelerate): divided by the number of machines in the end,
       --nnodes included, unless -n gives the count a node */
    file_nnodes = c.nnodes > 0;
    file_rank = c.node_rank >= 0;
    if (cli.nnodes) c.nnodes = cli.nnodes;
    if (cli.node_rank >= 0) c.node_rank = cli.node_rank;
    if (cli.nproc) c.nproc = cli.nproc;
    else if (c.total > 0) {
        int machines = c.nnodes > 0 ? c.nnodes : 1;
        if (c.total % machines) {
            fprintf(stderr, "accel launch: %s: num_processes %d (all machines) is not a multiple of %s %d\n", cfgpath,
                    c.total, cli.nnodes ? "--nnodes" : "num_machines", machines);
            return 2;
        }
        c.nproc = c.total / machines;
    }
    if (cli.threads) c.threads = cli.threads;
    c.max_restarts = cli.max_restarts;
    c.rdzv_timeout = cli.rdzv_timeout ? cli.rdzv_timeout : 600; /* torchrun's c10d join_timeout */
    if (cli.gpu_ids[0]) snprintf(c.gpu_ids, sizeof c.gpu_ids, "%s", strcmp(cli.gpu_ids, "all") ? cli.gpu_ids : "");
    if (cli.master_addr[0]) snprintf(c.master_addr, sizeof c.master_addr, "%s", cli.master_addr);
    if (cli.master_port) c.master_port = cli.master_port;
    if (cli.accum) c.accum = cli.accum;
    if (cli.precision[0]) snprintf(c.precision, sizeof c.precision, "%s", cli.precision);
    if (cli.use_cpu >= 0) c.use_cpu = cli.use_cpu;
    if (cli.debug >= 0) c.debug = cli.debug;
    if (cli.run_id[0]) snprintf(c.run_id, sizeof c.run_id, "%s", cli.run_id);
    c.tee = cli.tee;
    if (c.nproc < 1) c.nproc = 1;
    if (c.nnodes < 1) c.nnodes = 1;
    if (c.nproc > LAUNCH_MAX) { /* a config's num_processes / num_machines: bounded before anything is allocated */
        fprintf(stderr, "accel launch: %s: %d processes a node is more than the %d accel launch starts "
                        "(num_processes / num_machines)\n", cfgpath, c.nproc, LAUNCH_MAX);
        return 2;
    }
    if (c.node_rank < 0) c.node_rank = 0;
    if (c.node_rank >= c.nnodes) {
        /* name where each value came from: the command line's flag or the config file's key */
        fprintf(stderr, "accel launch: %s %d is not below %s %d%s%s\n",
                cli.node_rank >= 0 ? "--node-rank" : "machine_rank", c.node_rank,
                cli.nnodes ? "--nnodes" : file_nnodes ? "num_machines" : "the number of nodes", c.nnodes,
                (cli.node_rank < 0 && file_rank) || (!cli.nnodes && file_nnodes) ? " in " : "",
                (cli.node_rank < 0 && file_rank) || (!cli.nnodes && file_nnodes) ? cfgpath : "");
        return 2;
    }
    if (c.nnodes > 1) {
        if (!c.master_addr[0]) {
            fprintf(stderr, "accel launch: %s %d needs %s (node 0's address)\n",
                    cli.nnodes ? "--nnodes" : "num_machines", c.nnodes,
                    cli.nnodes ? "--master-addr" : "--master-addr or main_process_ip");
            return 2;
        }
        if (!c.master_port) c.master_port = 29500;
        if (!c.run_id[0]) {
            char host[256];
            launch_canonical_host(c.master_addr, host, sizeof host);
            snprintf(c.run_id, sizeof c.run_id, "accel-launch-%s:%d", host, c.master_port);
        }
    } else {
        if (!c.master_addr[0]) snprintf(c.master_addr, sizeof c.master_addr, "127.0.0.1");
        if (!c.master_port) c.master_port = accel_free_port();
        if (!c.master_port) { fprintf(stderr, "accel launch: found no free TCP port\n"); return 1; }
        if (!c.run_id[0]) snprintf(c.run_id, sizeof c.run_id, "accel-launch-%ld-%ld", (long)getpid(), (long)time(NULL));
        /* one node: a fresh secret per job, unless the launcher was given one */
        if (!getenv("ACCEL_STORE_SECRET") || !*getenv("ACCEL_STORE_SECRET")) {
            if (!launch_make_secret(c.secret, sizeof c.secret)) {
                fprintf(stderr, "accel launch: cannot read /dev/urandom for the job's secret\n");
                return 1;
            }
        }
    }
    /* torchrun's layout: one node's ranks follow the other; across nodes the launchers meet first and ranks follow
       node ranks, so nodes may run different counts (launch_rendezvous) */
    c.rank_base = 0;
    c.world = c.nproc;
    if (c.nnodes > 1 && !launch_rendezvous(&c)) return 1;
#ifdef ACCEL_WITH_MPI
#ifndef ACCEL_CLI_MPIRUN
#define ACCEL_CLI_MPIRUN "mpirun"
#endif
    if (c.use_cpu == 1 && c.nnodes == 1 && c.nproc > 1) {
        /* accelerate launch --multi_cpu runs mpirun: CPU data collectives (accel_coll_* on host buffers) need MPI,
           which this accel is built with. One child, mpirun, under the same signals, session and restarts. */
        static char np[16];
        char **argv2;
        int n = 0;
        while (prog[n]) ++n;
        argv2 = (char **)calloc((size_t)n + 4, sizeof *argv2);
        if (!argv2) { fprintf(stderr, "accel launch: out of memory\n"); return 1; }
        snprintf(np, sizeof np, "%d", c.nproc);
        argv2[0] = (char *)ACCEL_CLI_MPIRUN;
        argv2[1] = (char *)"-np";
        argv2[2] = np;
        memcpy(argv2 + 3, prog, sizeof *argv2 * (size_t)n);
        prog = argv2; /* freed at exit */
        c.mpirun_np = c.nproc;
        c.nproc = 1;
        c.tee = 0; /* one pipe for every rank: the prefixes would all say rank 0 */
    }
#endif
    /* torchrun's --max-restarts: after a failure every process is stopped and all are started again, up to N times;
       a signal to the launcher (forwarded) ends the job instead */
    for (;;) {
        int code = launch_run(&c, prog);
        if (code == 0 || code == ACCEL_EXIT_REQUEUE || launch_signal || c.restart >= c.max_restarts) return code;
        ++c.restart;
        fprintf(stderr, "accel launch: restarting all %d process(es) of this node (restart %d of %d)\n", c.nproc,
                c.restart, c.max_restarts);
    }
}

/* ------------------------------------------------------------------------------------------ accel config */
int cli_config(int argc, char **argv) {
    char path[1024] = "", dir[1024], *slash;
    const char *mp = "no";
    int i, dflt = 0, ngpu = 0;
    FILE *f;
    for (i = 1; i < argc; ++i) {
        const char *a = argv[i];
        if (!strcmp(a, "--default")) dflt = 1;
        else if (!strcmp(a, "--mixed-precision") || !strcmp(a, "--mixed_precision")) {
            if (i + 1 >= argc) { fprintf(stderr, "accel config: --mixed-precision needs a value\n"); return 2; }
            mp = argv[++i];
        } else if (!strncmp(a, "--mixed-precision=", 18)) mp = a + 18;
        else if (!strncmp(a, "--mixed_precision=", 18)) mp = a + 18;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { launch_usage(stdout); return 0; }
        else if (a[0] == '-') { fprintf(stderr, "accel config: unknown option %s\n", a); return 2; }
        else snprintf(path, sizeof path, "%s", a);
    }
    if (!dflt) { fprintf(stderr, "accel config: only `accel config --default` is available (no interactive questions)\n"); return 2; }
    if (strcmp(mp, "no") && strcmp(mp, "fp16") && strcmp(mp, "bf16")) {
        fprintf(stderr, "accel config: --mixed-precision '%s' is not no|fp16|bf16\n", mp);
        return 2;
    }
    if (!path[0]) launch_default_config(path, sizeof path);
    if (access(path, F_OK) == 0) {
        printf("Configuration already exists at %s, will not override. Pass a different FILE.\n", path);
        return 0;
    }
    snprintf(dir, sizeof dir, "%s", path);
    slash = strrchr(dir, '/');
    if (slash && slash != dir) { /* mkdir -p of the parent */
        char *p;
        *slash = 0;
        for (p = dir + 1; *p; ++p)
            if (*p == '/') { *p = 0; mkdir(dir, 0777); *p = '/'; }
        mkdir(dir, 0777);
    }
#ifdef ACCEL_WITH_CUDA
    if (cudaGetDeviceCount(&ngpu) != cudaSuccess) ngpu = 0;
    (void)cudaGetLastError();
#endif
    f = fopen(path, "w");
    if (!f) { fprintf(stderr, "accel config: cannot write %s: %s\n", path, strerror(errno)); return 1; }
    /* ClusterConfig.to_json_file: json.dumps(to_dict(), indent=2, sort_keys=True) + "\n", None and {} dropped */
    fprintf(f,
            "{\n  \"compute_environment\": \"LOCAL_MACHINE\",\n  \"debug\": false,\n  \"distributed_type\": \"%s\",\n"
            "  \"downcast_bf16\": false,\n  \"enable_cpu_affinity\": false,\n  \"machine_rank\": 0,\n"
            "  \"main_training_function\": \"main\",\n  \"mixed_precision\": \"%s\",\n  \"num_machines\": 1,\n"
            "  \"num_processes\": %d,\n  \"rdzv_backend\": \"static\",\n  \"same_network\": false,\n"
            "  \"tpu_use_cluster\": false,\n  \"tpu_use_sudo\": false,\n  \"use_cpu\": %s\n}\n",
            ngpu > 1 ? "MULTI_GPU" : "NO", mp, ngpu > 0 ? ngpu : 1, ngpu > 0 ? "false" : "true");
    if (fclose(f) != 0) { fprintf(stderr, "accel config: cannot write %s: %s\n", path, strerror(errno)); return 1; }
    printf("accelerate configuration saved at %s\n", path);
    return 0;
}
