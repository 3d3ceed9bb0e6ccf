/* accel — command-line companion: `accel env`, `accel shards …`, `accel ckpt …`, `accel size …`, `accel device-map …`,
   `accel launch …`, `accel config …`,
   `accel fr DIR`, `accel test`, `accel estimate MODEL`. */
#include "accel.h"
#include "cli.h"
#include <stdio.h>
#include <string.h>

typedef struct { const char *name; int (*fn)(int, char **); const char *help; } cli_cmd;

static const cli_cmd cmds[] = {
    {"env", cli_env, "report version, toolchain, CUDA/NCCL/MPI, launcher and the resolved configuration"},
    {"shards", cli_shards, "print which dataset indices each process sees (JSON)"},
    {"ckpt", cli_ckpt, "inspect, verify, plan or merge checkpoints: ls FILE|DIR, verify DIR, plan ..., merge DIR OUT"},
    {"size", cli_size, "parse a size string (\"10GB\", \"5MiB\") and print the byte count"},
    {"device-map", cli_device_map, "Accelerate's module sizes, balanced memory and device map of a model (JSON)"},
    {"launch", cli_launch, "start N processes of a program the way torchrun does (accel launch -n N -- PROGRAM ARGS)"},
    {"fr", cli_fr, "read every rank's flight recorder dump in DIR and name the first divergence (accel fr DIR)"},
    {"test", cli_test, "check the job end to end under its launcher (host group, collectives, RNG, shards, ckpt)"},
    {"estimate", cli_estimate, "per-rank bytes of a model under DDP, ZeRO-1/2/3, hybrid, offload (estimate-memory)"},
    {"config", cli_config, "write Accelerate's default config file (accel config --default [--mixed-precision M] [FILE])"},
};

static void usage(FILE *f) {
    size_t i;
    fprintf(f, "usage: accel <command> [options]\n\ncommands:\n");
    for (i = 0; i < sizeof cmds / sizeof cmds[0]; ++i) fprintf(f, "  %-10s %s\n", cmds[i].name, cmds[i].help);
}

int main(int argc, char **argv) {
    size_t i;
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) { printf("accel %s\n", accel_version_string()); return 0; }
    for (i = 0; i < sizeof cmds / sizeof cmds[0]; ++i)
        if (!strcmp(argv[1], cmds[i].name)) return cmds[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "accel: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
