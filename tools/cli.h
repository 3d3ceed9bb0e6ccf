/* Subcommands of the `accel` CLI (tools/cli_main.c dispatches). Each lives in its own file (tools/cli_<name>.c) and
   returns the exit code: 0 success, 1 failure, 2 usage error. The CLI is a program that uses the library, not part of
   it: its names stay out of the library's accel_ namespace. */
#ifndef ACCEL_TOOLS_CLI_H
#define ACCEL_TOOLS_CLI_H
#include <stdio.h>
/* s (UTF-8) as a JSON string with ensure_ascii (Python json.dumps); cli_ckpt.c, shared by the subcommands */
void cli_put_json_str(FILE *f, const char *s);
char *cli_dup_str(const char *s); /* malloc'd copy (C99 has no strdup); cli_ckpt.c */
int cli_env(int argc, char **argv);
int cli_shards(int argc, char **argv); /* cli_shards.c (accel_data.h) */
int cli_ckpt(int argc, char **argv);   /* cli_ckpt.c: ls | verify | plan | merge */
int cli_size(int argc, char **argv);   /* cli_ckpt.c: size string → bytes */
int cli_device_map(int argc, char **argv); /* cli_device_map.c (accel_bigmodel.h): module sizes and device maps */
int cli_launch(int argc, char **argv); /* cli_launch.c: torchrun-style launcher */
int cli_config(int argc, char **argv); /* cli_launch.c: Accelerate's write_basic_config */
int cli_fr(int argc, char **argv);     /* cli_fr.c: the flight recorder's dumps, first divergence between ranks */
int cli_test(int argc, char **argv);   /* cli_test.c: Accelerate's `accelerate test`, under any launcher */
int cli_estimate(int argc, char **argv); /* cli_estimate.c: Accelerate's estimate-memory */
#endif
