/* `accel launch` — torchrun's single-node / static multi-node launcher for native programs — and `accel config`
   (Accelerate's write_basic_config).

   accel launch [-n|--nproc-per-node N] [--nnodes K --node-rank R --master-addr A --master-port P]
                [--mixed-precision no|fp16|bf16|fp8] [--gradient-accumulation-steps S] [--cpu] [--debug]
                [--run-id ID] [--config-file F] [--tee] [--] PROGRAM ARGS...
     Starts N copies of PROGRAM with the environment torchrun gives its workers (RANK, LOCAL_RANK, WORLD_SIZE,
     LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, ROLE_RANK, ROLE_WORLD_SIZE, ROLE_NAME, MASTER_ADDR, MASTER_PORT)
     plus Accelerate's (ACCELERATE_MIXED_PRECISION, ACCELERATE_GRADIENT_ACCUMULATION_STEPS, ACCELERATE_USE_CPU,
     ACCELERATE_DEBUG_MODE) and ACCEL_RUN_ID; accel's core then forms its host group over a TCP store on
     MASTER_PORT. Single node: MASTER_ADDR 127.0.0.1 and a free port unless given. Multi-node (--nnodes > 1): run it
     once per node with the same --master-addr / --master-port (default 29500) and that node's --node-rank.
     The store admits only processes that know the job's secret (accel.h: SECURITY): on one node accel launch makes
     a random one per job and hands it to its processes in the environment (ACCEL_STORE_SECRET; never on a command
     line); across nodes every node's launcher passes on the ACCEL_STORE_SECRET it was started with (set the same
     random value on every node), or the store refuses a non-loopback address unless ACCEL_STORE_TRUSTED_NETWORK=1.
     Counts are bounded before anything is allocated or started: at most 1024 processes a node (-n or the config's
     num_processes / num_machines), at most 65536 nodes.
     SIGINT / SIGTERM are forwarded to every process (each runs in its own process group, so their children get
     them too). When one process fails, the others get SIGTERM (SIGKILL 5 s later) and accel launch exits with the
     failed process's code (128 + signal number when it was killed), naming its rank. --tee prefixes every output
     line with "[rank<R>]: " (torchrun's format).
     --config-file reads the keys of an Accelerate config file that apply here (YAML or JSON, parsed with libyaml):
     num_processes (all machines), num_machines, machine_rank, main_process_ip, main_process_port, mixed_precision,
     gradient_accumulation_steps, use_cpu, debug; others are ignored. Without --config-file, Accelerate's default
     config file is read when it exists ($HF_HOME/accelerate/default_config.yaml, else
     ${XDG_CACHE_HOME:-~/.cache}/huggingface/accelerate/default_config.yaml). Command-line options override the
     file.

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
#include <netinet/in.h>
#include <arpa/inet.h>
#ifndef ACCEL_CLI_NO_YAML
#include <yaml.h>
#endif
#ifdef ACCEL_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

#define LAUNCH_MAX 1024        /* processes a node (the --tee poll set is sized by it) */
#define LAUNCH_MAX_NODES 65536
#define LAUNCH_MAX_CONFIG (1 << 20) /* bytes of a config file */

typedef struct launch_cfg {
    int nproc, nnodes, node_rank, master_port, accum, use_cpu, debug, tee, total; /* -1 / 0: unset */
    char master_addr[256], precision[16], run_id[320];
    char secret[72]; /* ACCEL_STORE_SECRET made for this job ("" when the launcher's own environment has one) */
} launch_cfg;

static void launch_usage(FILE *f) {
    fprintf(f,
            "usage: accel launch [-n|--nproc-per-node N] [--nnodes K --node-rank R --master-addr A --master-port P]\n"
            "                    [--mixed-precision no|fp16|bf16|fp8] [--gradient-accumulation-steps S] [--cpu] [--debug]\n"
            "                    [--run-id ID] [--config-file F] [--tee] [--] PROGRAM ARGS...\n"
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

/* The applicable keys of an Accelerate config file (YAML, or JSON which libyaml reads as YAML flow syntax), from its
   n bytes (untrusted: fuzzed by tests/fuzz/tools). path names it in messages. */
static int config_parse(const unsigned char *buf, size_t n, const char *path, launch_cfg *c) {
    yaml_parser_t p;
    yaml_document_t doc;
    yaml_node_t *root;
    yaml_node_pair_t *pair;
    int ok = 1, machines = -1;
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
        const char *key, *val;
        if (!k || k->type != YAML_SCALAR_NODE || !v) continue;
        key = (const char *)k->data.scalar.value;
        if (v->type != YAML_SCALAR_NODE) continue; /* nested sections (deepspeed_config, ...) do not apply */
        val = (const char *)v->data.scalar.value;
        if (!strcmp(val, "null") || !strcmp(val, "~")) continue;
        if (!strcmp(key, "num_processes"))
            ok = launch_int("num_processes", val, 1, (long)LAUNCH_MAX * LAUNCH_MAX_NODES, &c->total);
        else if (!strcmp(key, "num_machines")) ok = launch_int("num_machines", val, 1, LAUNCH_MAX_NODES, &machines);
        else if (!strcmp(key, "machine_rank"))
            ok = launch_int("machine_rank", val, 0, LAUNCH_MAX_NODES - 1, &c->node_rank);
        else if (!strcmp(key, "main_process_ip")) snprintf(c->master_addr, sizeof c->master_addr, "%s", val);
        else if (!strcmp(key, "main_process_port")) ok = launch_int("main_process_port", val, 1, 65535, &c->master_port);
        else if (!strcmp(key, "gradient_accumulation_steps")) ok = launch_int("gradient_accumulation_steps", val, 1, 1 << 30, &c->accum);
        else if (!strcmp(key, "use_cpu")) ok = config_bool(key, val, &c->use_cpu);
        else if (!strcmp(key, "debug")) ok = config_bool(key, val, &c->debug);
        else if (!strcmp(key, "mixed_precision")) {
            if (!launch_precision_ok(val)) { fprintf(stderr, "accel launch: config mixed_precision '%s' is not no|fp16|bf16|fp8\n", val); ok = 0; }
            else snprintf(c->precision, sizeof c->precision, "%s", val);
        }
    }
    if (ok && machines > 0) c->nnodes = machines;
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

/* The job's secret: 32 bytes from the kernel, as hex (the store's MAC key; accel.h SECURITY). 1 ok. */
static int launch_make_secret(char *out, size_t cap) {
    unsigned char b[32];
    size_t i, got = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    if (f) { got = fread(b, 1, sizeof b, f); fclose(f); }
    if (got != sizeof b || cap < 2 * sizeof b + 1) return 0;
    for (i = 0; i < sizeof b; ++i) snprintf(out + 2 * i, 3, "%02x", b[i]);
    return 1;
}

/* ------------------------------------------------------------------------------------------ processes */
static volatile sig_atomic_t launch_signal = 0;
static void launch_on_signal(int s) { launch_signal = s; }

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

/* In the child, before exec: torchrun's worker variables, Accelerate's, and no other launcher's. */
static void launch_child_env(const launch_cfg *c, int local) {
    static const char *drop[] = {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                                 "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID",
                                 "MPI_LOCALNRANKS", "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE",
                                 "MV2_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_SIZE", "TORCHELASTIC_USE_AGENT_STORE",
                                 "TORCHELASTIC_RUN_ID", "ACCEL_STORE_PORT"};
    int rank = c->node_rank * c->nproc + local, world = c->nnodes * c->nproc;
    size_t i;
    for (i = 0; i < sizeof drop / sizeof drop[0]; ++i) unsetenv(drop[i]);
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
    if (c->precision[0]) setenv("ACCELERATE_MIXED_PRECISION", c->precision, 1);
    if (c->accum > 0) launch_setenv_int("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", c->accum);
    if (c->use_cpu >= 0) setenv("ACCELERATE_USE_CPU", c->use_cpu ? "true" : "false", 1);
    if (c->debug >= 0) setenv("ACCELERATE_DEBUG_MODE", c->debug ? "true" : "false", 1);
    if (c->nproc > 1 && !getenv("OMP_NUM_THREADS")) setenv("OMP_NUM_THREADS", "1", 1); /* as torchrun */
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
    int i, alive = 0, failed = -1, code = 0, forwarded = 0;
    double stop_at = 0;
    struct sigaction sa;
    if (c->nproc < 1 || c->nproc > LAUNCH_MAX) { /* cli_launch bounds it; the poll set below is sized by it */
        free(ps);
        fprintf(stderr, "accel launch: %d processes a node (1..%d)\n", c->nproc, LAUNCH_MAX);
        return 2;
    }
    if (!ps) { fprintf(stderr, "accel launch: out of memory\n"); return 1; }
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = launch_on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
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
            signal(SIGPIPE, SIG_DFL);
            setpgid(0, 0);
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
        setpgid(ps[i].pid, ps[i].pid); /* also from here: no race with an early kill */
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
        struct pollfd pf[2 * LAUNCH_MAX];
        int who[2 * LAUNCH_MAX], np = 0, k;
        pid_t pid;
        int st;
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
                n = read(pf[k].fd, buf, sizeof buf);
                if (n > 0) launch_tee(&ps[r], c->node_rank * c->nproc + r, s, buf, (size_t)n, 0);
                else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
                    launch_tee(&ps[r], c->node_rank * c->nproc + r, s, "", 0, 1);
                    close(ps[r].fd[s]);
                    ps[r].fd[s] = -1;
                }
            }
        }
        if (launch_signal && !forwarded) {
            forwarded = 1;
            fprintf(stderr, "accel launch: got signal %d, forwarding it to %d process(es)\n", (int)launch_signal, alive);
            launch_kill_all(ps, c->nproc, (int)launch_signal);
            if (!stop_at) stop_at = launch_now() + 10.0;
            if (!code) code = 128 + (int)launch_signal;
        }
        while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
            for (k = 0; k < c->nproc; ++k) {
                if (ps[k].pid != pid || !ps[k].alive) continue;
                ps[k].alive = 0;
                ps[k].status = st;
                --alive;
                if ((!WIFEXITED(st) || WEXITSTATUS(st) != 0) && failed == -1 && !forwarded) {
                    failed = k;
                    code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
                    if (alive > 0) {
                        launch_kill_all(ps, c->nproc, SIGTERM);
                        stop_at = launch_now() + 5.0;
                    }
                }
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
            while ((n = read(ps[i].fd[s], buf, sizeof buf)) > 0) launch_tee(&ps[i], c->node_rank * c->nproc + i, s, buf, (size_t)n, 0);
            launch_tee(&ps[i], c->node_rank * c->nproc + i, s, "", 0, 1);
            close(ps[i].fd[s]);
        }
    }
    if (failed >= 0) {
        int st = ps[failed].status;
        if (WIFEXITED(st))
            fprintf(stderr, "accel launch: rank %d (local rank %d, pid %ld) exited with code %d; stopped the other %d process(es)\n",
                    c->node_rank * c->nproc + failed, failed, (long)ps[failed].pid, WEXITSTATUS(st), c->nproc - 1);
        else
            fprintf(stderr, "accel launch: rank %d (local rank %d, pid %ld) was killed by signal %d; stopped the other %d process(es)\n",
                    c->node_rank * c->nproc + failed, failed, (long)ps[failed].pid, WTERMSIG(st), c->nproc - 1);
    }
    for (i = 0; i < c->nproc; ++i) { free(ps[i].line[0]); free(ps[i].line[1]); }
    free(ps);
    return code;
}

int cli_launch(int argc, char **argv) {
    launch_cfg c, cli;
    char cfgpath[1024] = "";
    char **prog = NULL;
    int i, explicit_config = 0;
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
        else { fprintf(stderr, "accel launch: unknown option %s\n", name); launch_usage(stderr); return 2; }
    }
    if (!prog || !prog[0]) { fprintf(stderr, "accel launch: no program given\n"); launch_usage(stderr); return 2; }
    /* the config file first, then the command line over it (as accelerate launch) */
    if (!explicit_config) launch_default_config(cfgpath, sizeof cfgpath);
    if (explicit_config || access(cfgpath, R_OK) == 0) {
        if (!config_read(cfgpath, &c)) return 2;
    }
    if (c.total > 0) { /* num_processes counts every machine */
        int machines = c.nnodes > 0 ? c.nnodes : 1;
        if (c.total % machines) {
            fprintf(stderr, "accel launch: %s: num_processes %d is not a multiple of num_machines %d\n", cfgpath, c.total, machines);
            return 2;
        }
        c.nproc = c.total / machines;
    }
    if (cli.nproc) c.nproc = cli.nproc;
    if (cli.nnodes) c.nnodes = cli.nnodes;
    if (cli.node_rank >= 0) c.node_rank = cli.node_rank;
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
        fprintf(stderr, "accel launch: --node-rank %d is not below --nnodes %d\n", c.node_rank, c.nnodes);
        return 2;
    }
    if (c.nnodes > 1) {
        if (!c.master_addr[0]) { fprintf(stderr, "accel launch: --nnodes %d needs --master-addr (node 0's address)\n", c.nnodes); return 2; }
        if (!c.master_port) c.master_port = 29500;
        if (!c.run_id[0]) snprintf(c.run_id, sizeof c.run_id, "accel-launch-%s:%d", c.master_addr, c.master_port);
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
    return launch_run(&c, prog);
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
