/* libFuzzer target: `accel launch`'s config file reader (tools/cli_launch.c, config_parse: an Accelerate config in
   YAML or JSON, through libyaml). The input is the file's bytes. Invariants: an accepted file leaves every count in
   its bounds (num_processes 1..1024*65536, num_machines 1..65536, machine_rank 0..65535, a TCP port, accumulation
   steps >= 1) and a known precision; a refused one may have set nothing that is then used (accel launch exits). */
#define ACCEL_IMPLEMENTATION
#include "../../../tools/cli_launch.c"
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    launch_cfg c;
    memset(&c, 0, sizeof c);
    c.use_cpu = c.debug = -1;
    c.node_rank = -1;
    if (config_parse(data, size, "<fuzz>", &c)) {
        if (c.total < 0 || c.total > LAUNCH_MAX * LAUNCH_MAX_NODES) __builtin_trap();
        if (c.nnodes < 0 || c.nnodes > LAUNCH_MAX_NODES) __builtin_trap();
        if (c.node_rank < -1 || c.node_rank >= LAUNCH_MAX_NODES) __builtin_trap();
        if (c.master_port < 0 || c.master_port > 65535 || c.accum < 0) __builtin_trap();
        if (c.precision[0] && !launch_precision_ok(c.precision)) __builtin_trap();
        if (c.use_cpu < -1 || c.use_cpu > 1 || c.debug < -1 || c.debug > 1) __builtin_trap();
        if (memchr(c.master_addr, 0, sizeof c.master_addr) == NULL) __builtin_trap();
    }
    return 0;
}
