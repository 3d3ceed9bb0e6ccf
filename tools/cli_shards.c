/* `accel shards` — owned by the accel_data.h issue. */
#include "accel_data.h"
#include "accel_cli.h"
#include <stdio.h>
int accel_cli_shards(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "accel shards: not built yet (accel_data.h issue)\n");
    return 1;
}
