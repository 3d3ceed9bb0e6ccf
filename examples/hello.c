/* The smallest accel program: each rank reports its state; the main process prints first. Run it with
   `mpirun -np 2 ./hello` (or srun, or torchrun-style env). */
#include "accel.h"
#include <stdio.h>

int main(void) {
    accel acc;
    accel_desc desc = {0};
    int fired = 0, i;
    if (accel_init(&acc, &desc) != ACCEL_OK) {
        fprintf(stderr, "hello: %s\n", accel_last_error(&acc));
        accel_shutdown(&acc);
        return 1;
    }
    accel_print(&acc, "accel %s: %d process(es), launcher %s, %s\n", accel_version_string(), acc.num_processes,
                accel_launcher_name(acc.launcher), accel_distributed_type_name(acc.distributed_type));
    for (i = 0; i < acc.num_processes; ++i) {
        if (i == acc.process_index)
            printf("  rank %d: local %d/%d main=%d local_main=%d device=%s precision=%s accumulation=%d\n",
                   acc.process_index, acc.local_process_index, acc.local_num_processes, acc.is_main_process,
                   acc.is_local_main_process, acc.device < 0 ? "cpu" : "cuda", accel_precision_name(acc.mixed_precision),
                   acc.gradient_accumulation_steps);
        fflush(stdout);
        accel_wait_for_everyone(&acc);
    }
    if (acc.process_index == acc.num_processes - 1) accel_set_trigger(&acc); /* the last rank raises a flag... */
    if (accel_check_trigger(&acc, &fired) == ACCEL_OK)                       /* ...and every rank sees it */
        accel_print(&acc, "trigger from the last rank seen by all: %s\n", fired ? "yes" : "no");
    accel_shutdown(&acc);
    return 0;
}
