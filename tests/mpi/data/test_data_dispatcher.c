/* accel_data.h's dispatcher (Accelerate's DataLoaderDispatcher, dispatch_batches=True) under mpirun: the main process
   reads an underlying loader of given batch lengths (fixed with a short last batch, or variable) and every process
   writes what it is handed (per batch its rows (sample ids), acc's end_of_dataloader and remainder) for two epochs
   of each case (split_batches x drop_last x skip_batches x lengths) to ACCEL_DISPATCH_OUT/rank<R>.txt.
   dispatcher_reference.py compares them with a literal transcription of Accelerate's DataLoaderDispatcher. */
#include "accel.h"
#include "accel_data.h"
#include "accel_test.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct loader {
    const int *lens;
    int nlens, next;
    int64_t base, rows[64];
} loader;

/* batch k holds consecutive sample ids; the epoch starts over after the end */
static accel_result fetch(void *user, const void **rows, int64_t *nrows, int *end) {
    loader *l = (loader *)user;
    int i;
    if (l->next >= l->nlens) {
        l->next = 0;
        l->base = 0;
        *end = 1;
        return ACCEL_OK;
    }
    for (i = 0; i < l->lens[l->next]; ++i) l->rows[i] = l->base + i;
    l->base += l->lens[l->next];
    *rows = l->rows;
    *nrows = l->lens[l->next++];
    return ACCEL_OK;
}

/* the cases, also read by dispatcher_reference.py: lengths lists */
static const int L0[] = {4, 4, 4};
static const int L1[] = {4, 4, 1};
static const int L2[] = {4, 4, 3};
static const int L3[] = {4, 4, 4, 4, 2};
static const int L4[] = {3, 5, 2, 7, 1};
static const int L5[] = {1};
static const int L6[] = {6, 6, 6, 6};
static const int L7[] = {2, 0, 3};
static const int L8[] = {5};
static const struct { const int *l; int n; } LENS[] = {{L0, 3}, {L1, 3}, {L2, 3}, {L3, 5}, {L4, 5}, {L5, 1},
                                                       {L6, 4}, {L7, 3}, {L8, 1}};

/* the main process's loader fails at its third batch: that process gets the error, the others ACCEL_ERR_REMOTE */
static accel_result failing_fetch(void *user, const void **rows, int64_t *nrows, int *end) {
    static int64_t r[2] = {7, 8};
    int *calls = (int *)user;
    (void)end;
    if (++*calls == 3) return ACCEL_ERR_IO;
    *rows = r;
    *nrows = 2;
    return ACCEL_OK;
}

static void failures(accel *acc) {
    accel_data_dispatcher *d = NULL;
    accel_data_dispatcher_desc desc;
    int64_t ids[16], n;
    int end, calls = 0, got = 0;
    accel_result r = ACCEL_OK;
    memset(&desc, 0, sizeof desc);
    desc.fetch = failing_fetch;
    desc.user = &calls;
    AT_EQ_INT(accel_data_dispatcher_create(acc, &desc, &d), ACCEL_ERR_INVALID_ARGUMENT); /* row_bytes 0 */
    AT_CONTAINS(accel_last_error(acc), "row_bytes");
    AT_CHECK(d == NULL);
    desc.row_bytes = 8;
    desc.fetch = NULL;
    if (acc->process_index == 0) {
        AT_EQ_INT(accel_data_dispatcher_create(acc, &desc, &d), ACCEL_ERR_INVALID_ARGUMENT);
        AT_CONTAINS(accel_last_error(acc), "desc.fetch");
    }
    desc.fetch = failing_fetch;
    desc.device_out = 1; /* device buffers on a CPU run */
    AT_EQ_INT(accel_data_dispatcher_create(acc, &desc, &d), ACCEL_ERR_INVALID_ARGUMENT);
    AT_CONTAINS(accel_last_error(acc), "CUDA device");
    desc.device_out = 0;
    desc.device_rows = 1;
    AT_EQ_INT(accel_data_dispatcher_create(acc, &desc, &d), ACCEL_ERR_INVALID_ARGUMENT);
    AT_CHECK(d == NULL);
    desc.device_rows = 0;
    desc.split_batches = ACCEL_ON;
    AT_EQ_INT(accel_data_dispatcher_create(acc, &desc, &d), ACCEL_OK);
    AT_EQ_INT(accel_data_dispatcher_next(d, ids, 16, NULL, &end), ACCEL_ERR_INVALID_ARGUMENT);
    while (got < 5 && (r = accel_data_dispatcher_next(d, ids, 16, &n, &end)) == ACCEL_OK && !end) ++got;
    AT_EQ_INT(got, 1); /* batch 1 is handed out; reading batch 3 ahead of batch 2 fails */
    AT_EQ_INT(r, acc->process_index == 0 ? ACCEL_ERR_IO : ACCEL_ERR_REMOTE);
    AT_CHECK(acc->end_of_dataloader == 0);
    accel_data_dispatcher_destroy(d);
}

int main(void) {
    accel acc;
    accel_desc dd;
    const char *dir = getenv("ACCEL_DISPATCH_OUT");
    char path[4096];
    FILE *out;
    int li, split, drop, skip, epoch, rc;
    if (!dir) { fprintf(stderr, "set ACCEL_DISPATCH_OUT (run by dispatcher_reference.py)\n"); return 1; }
    memset(&dd, 0, sizeof dd);
    dd.cpu = 1;
    if (accel_init(&acc, &dd) != ACCEL_OK) { fprintf(stderr, "accel_init: %s\n", accel_last_error(&acc)); return 1; }
    snprintf(path, sizeof path, "%s/rank%d.txt", dir, acc.process_index);
    out = fopen(path, "w");
    if (!out) return 1;
    for (li = 0; li < (int)(sizeof LENS / sizeof LENS[0]); ++li)
        for (split = 0; split <= 1; ++split)
            for (drop = 0; drop <= 1; ++drop)
                for (skip = 0; skip <= 1; ++skip) {
                    loader l;
                    accel_data_dispatcher *d;
                    accel_data_dispatcher_desc desc;
                    memset(&l, 0, sizeof l);
                    l.lens = LENS[li].l;
                    l.nlens = LENS[li].n;
                    memset(&desc, 0, sizeof desc);
                    desc.row_bytes = 8;
                    desc.split_batches = split ? ACCEL_ON : ACCEL_OFF;
                    desc.drop_last = drop;
                    desc.skip_batches = skip;
                    desc.fetch = fetch;
                    desc.user = &l;
                    AT_EQ_INT(accel_data_dispatcher_create(&acc, &desc, &d), ACCEL_OK);
                    fprintf(out, "case %d %d %d %d\n", li, split, drop, skip);
                    for (epoch = 0; epoch < 2; ++epoch) {
                        for (;;) {
                            int64_t ids[64], n = -1;
                            int end = -1, i;
                            accel_result r = accel_data_dispatcher_next(d, ids, 64, &n, &end);
                            if (r != ACCEL_OK) { fprintf(out, "error\n"); break; }
                            if (end) { fprintf(out, "end %d\n", acc.end_of_dataloader); break; }
                            fprintf(out, "batch %d %d :", acc.end_of_dataloader,
                                    acc.end_of_dataloader ? acc.remainder : -1);
                            for (i = 0; i < n; ++i) fprintf(out, " %lld", (long long)ids[i]);
                            fprintf(out, "\n");
                        }
                    }
                    accel_data_dispatcher_destroy(d);
                }
    AT_CHECK(acc.end_of_dataloader == 0); /* no loader left in acc's list */
    failures(&acc);
    fclose(out);
    rc = at_finish("data_dispatcher");
    accel_shutdown(&acc);
    return rc;
}
