/* Using accel from a plain Makefile project: the headers are vendored (here: -I../..), one TU defines
   ACCEL_IMPLEMENTATION, no meson, no MPI (a single process; build with `make MPI=1` to let accel use MPI).
   It prints how Accelerate would shard 10 samples in batches of 3 over 2 processes, and a few loss-scaler steps. */
#define ACCEL_IMPLEMENTATION
#include "accel.h"
#include "accel_data.h"
#include "accel_amp.h"
#include <math.h>
#include <stdio.h>

int main(void) {
    accel acc;
    accel_desc d = {0};
    int p, step;
    if (accel_init(&acc, &d) != ACCEL_OK) {
        fprintf(stderr, "accel_init: %s\n", accel_last_error(&acc));
        return 1;
    }
    printf("accel %s, %d process(es)\n", accel_version_string(), acc.num_processes);
    for (p = 0; p < 2; ++p) { /* the shard of process p of 2, computed locally */
        accel_data_shard sh;
        accel_data_shard_desc sd = {0};
        int64_t idx[3], n, k, i;
        sd.dataset_len = 10;
        sd.batch_size = 3;
        sd.num_processes = 2;
        sd.process_index = p;
        if (accel_data_shard_init(NULL, &sh, &sd) != ACCEL_OK) return 1;
        printf("process %d:", p);
        for (k = 0; k < accel_data_shard_len(&sh); ++k) {
            if (accel_data_shard_get_batch(&sh, k, idx, &n) != ACCEL_OK) return 1;
            printf(" [");
            for (i = 0; i < n; ++i) printf(i ? ",%lld" : "%lld", (long long)idx[i]);
            printf("]");
        }
        printf("\n");
    }
    {
        accel_amp_scaler sc;
        accel_amp_scaler_desc sd = {0};
        float g[2] = {1.0f, 2.0f};
        accel_tensor t = {0};
        sd.init_scale = 4.0f;
        sd.growth_interval = 2;
        sd.enabled = ACCEL_ON;
        t.name = "g";
        t.ptr = g;
        t.dtype = ACCEL_F32;
        t.ndim = 1;
        t.shape[0] = 2;
        if (accel_amp_scaler_init(&acc, &sc, &sd) != ACCEL_OK) return 1;
        for (step = 0; step < 4; ++step) {
            int inf = 0;
            g[0] = step == 1 ? INFINITY : 8.0f; /* an overflow on step 1 */
            if (accel_amp_unscale_and_check(&sc, &t, 1, &inf) != ACCEL_OK || accel_amp_update(&sc) != ACCEL_OK)
                return 1;
            printf("step %d: found_inf=%d skipped=%d scale=%g\n", step, inf, accel_amp_step_was_skipped(&sc),
                   (double)accel_amp_loss_scale(&sc));
        }
        accel_amp_scaler_deinit(&sc);
    }
    accel_shutdown(&acc);
    return 0;
}
