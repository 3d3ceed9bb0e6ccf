/* Subcommands of the `accel` CLI. Each lives in its own file (tools/cli_<name>.c) and returns the exit code:
   0 success, 1 failure, 2 usage error. */
#ifndef ACCEL_CLI_H
#define ACCEL_CLI_H
int accel_cli_env(int argc, char **argv);
int accel_cli_shards(int argc, char **argv); /* cli_shards.c (accel_data.h) */
int accel_cli_ckpt(int argc, char **argv);   /* cli_ckpt.c (accel_ckpt.h): ls | verify | plan */
int accel_cli_size(int argc, char **argv);   /* cli_ckpt.c: size string → bytes */
int accel_cli_device_map(int argc, char **argv); /* cli_device_map.c (accel_ckpt.h): sizes and device maps */
int cli_launch(int argc, char **argv);       /* cli_launch.c: torchrun-style launcher */
int cli_config(int argc, char **argv);       /* cli_launch.c: Accelerate's write_basic_config */
#endif
