/* `accel ckpt` and `accel size` — owned by the accel_ckpt.h issue. */
#include "accel_ckpt.h"
#include "accel_cli.h"
#include <stdio.h>
int accel_cli_ckpt(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "accel ckpt: not built yet (accel_ckpt.h issue)\n");
    return 1;
}
int accel_cli_size(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "accel size: not built yet (accel_ckpt.h issue)\n");
    return 1;
}
