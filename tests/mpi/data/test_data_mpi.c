/* accel_data.h under mpirun: every rank iterates one epoch of its shard (P and p from the Accelerator); per step the
   ranks all-gather their batches in rank order, and on the last step keep accel_data_gather_real_rows(&acc, rows)
   rows (gather_for_metrics). The union of the kept samples must be exactly the dataset, each index once — for
   sequential and shuffled samplers, with and without split_batches, map-style and iterable. Without even_batches
   (processes get different counts) the per-index counts are all-gathered instead. */
#include "accel_data.h"
#include "accel_test.h"
#include <stdlib.h>

static void run_case(accel *acc, int64_t n, int64_t B, int split, int even, int iterable, int shuffle) {
    accel_data_shard sh;
    accel_data_shard_desc d;
    int P = acc->num_processes, step = 0, r, i;
    int64_t *idx, *gathered, count, b, steps_local, steps_max;
    int *seen;
    char ctx[160];
    snprintf(ctx, sizeof ctx, "N=%lld B=%lld split=%d even=%d iterable=%d shuffle=%d", (long long)n, (long long)B, split,
             even, iterable, shuffle);
    at_context = ctx;
    memset(&d, 0, sizeof d);
    d.dataset_len = n; d.batch_size = B;
    d.split_batches = split ? ACCEL_ON : ACCEL_OFF;
    d.even_batches = even ? ACCEL_ON : ACCEL_OFF;
    d.iterable = iterable; d.shuffle = shuffle; d.seed = 1234;
    if (accel_data_shard_init(acc, &sh, &d) != ACCEL_OK) { AT_CHECK_MSG(0, accel_last_error(acc)); return; }
    AT_EQ_INT(sh.num_processes, P);
    AT_EQ_INT(sh.process_index, acc->process_index);
    accel_data_shard_set_epoch(&sh, 2);
    b = accel_data_shard_batch_size(&sh);
    idx = (int64_t *)malloc(sizeof(int64_t) * (size_t)b);
    gathered = (int64_t *)malloc(sizeof(int64_t) * (size_t)(b * P));
    seen = (int *)calloc((size_t)n + 1, sizeof(int));
    steps_local = accel_data_shard_len(&sh);
    steps_max = steps_local;
    accel_host_allreduce_i64(acc, &steps_max, 1, ACCEL_HOST_MAX);
    if (even || iterable) {
        int64_t mn = steps_local;
        accel_host_allreduce_i64(acc, &mn, 1, ACCEL_HOST_MIN);
        AT_EQ_INT(mn, steps_max); /* even_batches: every process the same number of batches */
        while (accel_data_shard_next(&sh, idx, &count) == ACCEL_OK && count > 0) {
            int64_t rows, keep;
            AT_EQ_INT(count, b);
            r = accel_host_allgather(acc, idx, gathered, sizeof(int64_t) * (size_t)b);
            AT_EQ_INT(r, ACCEL_OK);
            rows = b * P;
            keep = accel_data_gather_real_rows(acc, rows);
            AT_EQ_INT(acc->end_of_dataloader, step == steps_local - 1);
            for (i = 0; i < keep; ++i)
                if (gathered[i] >= 0 && gathered[i] < n) seen[gathered[i]]++;
            ++step;
        }
        for (i = 0; i < n; ++i)
            if (seen[i] != 1) { AT_EQ_INT(seen[i], 1); break; }
        AT_CHECK(i == n);
    } else {
        int *all = (int *)calloc((size_t)(n + 1) * (size_t)P, sizeof(int));
        while (accel_data_shard_next(&sh, idx, &count) == ACCEL_OK && count > 0)
            for (i = 0; i < count; ++i) seen[idx[i]]++;
        AT_EQ_INT(accel_host_allgather(acc, seen, all, sizeof(int) * (size_t)(n + 1)), ACCEL_OK);
        for (i = 0; i < n; ++i) {
            int s = 0, p;
            for (p = 0; p < P; ++p) s += all[(size_t)p * (size_t)(n + 1) + (size_t)i];
            if (s != 1) { AT_EQ_INT(s, 1); break; }
        }
        AT_CHECK(i == n);
        free(all);
    }
    AT_EQ_INT(acc->end_of_dataloader, 0);
    AT_EQ_INT(acc->remainder, -1);
    free(idx); free(gathered); free(seen);
    at_context = "";
}

int main(void) {
    accel acc;
    accel_desc d;
    int64_t ns[] = {0, 1, 7, 10, 23, 97, 240, 241};
    int ni, split, even, it, sh;
    memset(&d, 0, sizeof d);
    d.cpu = 1;
    if (accel_init(&acc, &d) != ACCEL_OK) { fprintf(stderr, "%s\n", accel_last_error(&acc)); return 1; }
    for (ni = 0; ni < (int)(sizeof ns / sizeof ns[0]); ++ni)
        for (split = 0; split < 2; ++split)
            for (even = 0; even < 2; ++even)
                for (it = 0; it < 2; ++it)
                    for (sh = 0; sh < 2; ++sh) {
                        int64_t B = split ? 2 * acc.num_processes : 3;
                        if (it && !even) continue; /* iterable shards ignore even_batches */
                        run_case(&acc, ns[ni], B, split, even, it, sh);
                    }
    accel_shutdown(&acc);
    {
        char name[32];
        snprintf(name, sizeof name, "data-mpi-rank%d", acc.process_index);
        return at_finish(name);
    }
}
