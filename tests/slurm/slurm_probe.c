/* What tests/slurm/test_slurm.sh runs under srun / salloc / sbatch: accel's view of the launch.
   usage: slurm_probe [layout | fail RANK | nompi]
     (none)  accel_init, then one line "rank R of P local L of N launcher X group G sum S" (S = all-reduced ranks)
     nompi   the same with desc.no_mpi (as a build without MPI: the host group is the TCP store)
     layout  the resolved layout only (no MPI): "rank R of P local L of N launcher X"
     fail R  rank R exits with code 3 after accel_init; the others wait in a barrier (ended by srun -K) */
#include "accel.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    accel acc;
    accel_desc d;
    int64_t v;
    memset(&d, 0, sizeof d);
    d.cpu = 1;
    if (!strcmp(mode, "layout")) {
        accel_desc out;
        accel_launcher l;
        char err[512];
        if (accel_resolve_config(&d, &out, &l, err, sizeof err) != ACCEL_OK) { printf("error: %s\n", err); return 1; }
        printf("rank %d of %d local %d of %d launcher %s\n", out.process_index, out.num_processes, out.local_process_index,
               out.local_num_processes, accel_launcher_name(l));
        return 0;
    }
    d.collective_timeout_ms = 120000;
    d.no_mpi = !strcmp(mode, "nompi");
    if (accel_init(&acc, &d) != ACCEL_OK) {
        printf("error: %s\n", accel_last_error(&acc));
        fflush(stdout);
        accel_shutdown(&acc);
        return 1;
    }
    if (!strcmp(mode, "fail") && argc > 2 && acc.process_index == atoi(argv[2])) {
        printf("rank %d: failing on purpose\n", acc.process_index);
        fflush(stdout);
        exit(3);
    }
    if (!strcmp(mode, "fail")) { (void)accel_wait_for_everyone(&acc); return 4; } /* srun -K ends this first */
    v = acc.process_index;
    if (accel_host_allreduce_i64(&acc, &v, 1, ACCEL_HOST_SUM) != ACCEL_OK) { printf("error: %s\n", accel_last_error(&acc)); return 1; }
    printf("rank %d of %d local %d of %d launcher %s group %s sum %lld\n", acc.process_index, acc.num_processes,
           acc.local_process_index, acc.local_num_processes, accel_launcher_name(acc.launcher), accel_host_group_name(&acc),
           (long long)v);
    accel_shutdown(&acc);
    return 0;
}
