/* accel_data.h under mpirun: every rank iterates one epoch of its shard (P and p from the Accelerator); per step the
   ranks all-gather their batches in rank order, and on the last step keep accel_data_gather_real_rows(&acc, rows)
   rows (gather_for_metrics). The union of the kept samples must be exactly the dataset, each index once — for
   sequential and shuffled samplers, with and without split_batches, map-style and iterable. Without even_batches
   (processes get different counts) the per-index counts are all-gathered instead.
   Configuration agreement (P >= 2): one rank changes one field of the shard's (and the sequence loader's) desc;
   init must fail on every rank with ACCEL_ERR_MISMATCH naming the field and every rank's value, leave the object
   unchanged, and leave the process group usable; a rank whose desc is invalid makes every rank fail. */
#include "accel_data.h"
#include "accel_test.h"
#include <stdlib.h>
#include <unistd.h>

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
    d.no_even_batches = !even;
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
            /* several processes: every batch full; one process: prepare()'s plain DataLoader, the last one short */
            AT_EQ_INT(count, P > 1 ? b : (n - step * b < b ? n - step * b : b));
            r = accel_host_allgather(acc, idx, gathered, sizeof(int64_t) * (size_t)b);
            AT_EQ_INT(r, ACCEL_OK);
            rows = count * P;
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

static accel_data_shard_desc base_desc(void) {
    accel_data_shard_desc d;
    memset(&d, 0, sizeof d);
    d.dataset_len = 37; d.batch_size = 12; d.seed = 5; /* 12: a multiple of P = 3 and 4 (split_batches is valid) */
    return d;
}

static void expect_disagreement(accel *acc, accel_result r, const char *field, const char *rank0, const char *odd) {
    char want[128];
    AT_EQ_INT(r, ACCEL_ERR_MISMATCH);
    snprintf(want, sizeof want, "processes disagree on %s:", field);
    AT_CONTAINS(accel_last_error(acc), want);
    AT_CONTAINS(accel_last_error(acc), rank0);   /* every rank's value */
    AT_CONTAINS(accel_last_error(acc), odd);
}

static void test_shard_agreement(accel *acc) {
    static const char *const fields[8] = {"dataset_len", "batch_size", "split_batches", "even_batches",
                                          "drop_last",   "iterable",   "shuffle",       "seed"};
    static const char *const rank0[8] = {"rank 0=37", "rank 0=12", "rank 0=0", "rank 0=1",
                                         "rank 0=0",  "rank 0=0",  "rank 0=0", "rank 0=5"};
    static const char *const odd[8] = {"rank 1=38", "rank 1=24", "rank 1=1", "rank 1=0",
                                       "rank 1=1",  "rank 1=1",  "rank 1=1", "rank 1=99"};
    accel_data_shard sh, before;
    accel_data_shard_desc d;
    int f;
    char ctx[64];
    d = base_desc();
    AT_EQ_INT(accel_data_shard_init(acc, &sh, &d), ACCEL_OK); /* the same everywhere: fine */
    before = sh;
    for (f = 0; f < 8; ++f) {
        accel_result r;
        snprintf(ctx, sizeof ctx, "agreement on %s", fields[f]);
        at_context = ctx;
        d = base_desc();
        if (acc->process_index == 1) {
            switch (f) {
            case 0: d.dataset_len = 38; break;
            case 1: d.batch_size = 24; break;
            case 2: d.split_batches = ACCEL_ON; break;
            case 3: d.no_even_batches = 1; break;
            case 4: d.drop_last = 1; break;
            case 5: d.iterable = 1; break;
            case 6: d.shuffle = 1; break;
            default: d.seed = 99; break;
            }
        }
        r = accel_data_shard_init(acc, &sh, &d);
        expect_disagreement(acc, r, fields[f], rank0[f], odd[f]);
        AT_CHECK_MSG(!memcmp(&sh, &before, sizeof sh), "a failed init leaves the shard unchanged");
    }
    /* a rank whose desc is invalid: it reports its own error, every other rank ACCEL_ERR_REMOTE with that message */
    at_context = "invalid desc on rank 1";
    d = base_desc();
    if (acc->process_index == 1) d.batch_size = 0;
    {
        accel_result r = accel_data_shard_init(acc, &sh, &d);
        AT_EQ_INT(r, acc->process_index == 1 ? ACCEL_ERR_INVALID_ARGUMENT : ACCEL_ERR_REMOTE);
        AT_CONTAINS(accel_last_error(acc), "batch_size 0 must be in [1, 2^40]");
    }
    /* explicit num_processes: computed locally (no collective), so ranks may differ */
    at_context = "explicit num_processes";
    d = base_desc();
    d.num_processes = 2; d.process_index = 0;
    if (acc->process_index == 1) d.batch_size = 3;
    AT_EQ_INT(accel_data_shard_init(acc, &sh, &d), ACCEL_OK);
    /* the group is still usable after all that */
    AT_EQ_INT(accel_wait_for_everyone(acc), ACCEL_OK);
    d = base_desc();
    AT_EQ_INT(accel_data_shard_init(acc, &sh, &d), ACCEL_OK);
    accel_data_shard_deinit(&sh);
    at_context = "";
}

/* llm.c GPT-2 token shard of ntok tokens, token i = i (plain stdio) */
static void write_tokens(const char *path, int ntok) {
    int32_t header[256];
    FILE *f = fopen(path, "wb");
    int i;
    if (!f) { perror(path); return; }
    memset(header, 0, sizeof header);
    header[0] = 20240520; header[1] = 1; header[2] = ntok;
    fwrite(header, sizeof header, 1, f);
    for (i = 0; i < ntok; ++i) { uint16_t u = (uint16_t)i; fwrite(&u, 2, 1, f); }
    fclose(f);
}

static void test_seq_agreement(accel *acc) {
    static const char *const fields[6] = {"num_files", "total_tokens", "batch_size", "seq_len", "shuffle", "seed"};
    static const char *const rank0[6] = {"rank 0=2", "rank 0=202", "rank 0=2", "rank 0=4", "rank 0=0", "rank 0=7"};
    static const char *const odd[6] = {"rank 1=1", "rank 1=203", "rank 1=3", "rank 1=5", "rank 1=1", "rank 1=8"};
    char dir[256], a[300], b[300], c[300];
    const char *files[2], *t = getenv("TMPDIR");
    accel_data_seq_loader ld;
    accel_data_seq_desc d;
    int f;
    char ctx[64];
    snprintf(dir, sizeof dir, "%s/accel_data_mpi_XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(dir)) { perror("mkdtemp"); AT_CHECK(0); return; }
    snprintf(a, sizeof a, "%s/a.bin", dir);
    snprintf(b, sizeof b, "%s/b.bin", dir);
    snprintf(c, sizeof c, "%s/c.bin", dir);
    write_tokens(a, 101);
    write_tokens(b, 101);
    write_tokens(c, 102);
    memset(&ld, 0, sizeof ld);
    for (f = 0; f < 6; ++f) {
        snprintf(ctx, sizeof ctx, "seq agreement on %s", fields[f]);
        at_context = ctx;
        memset(&d, 0, sizeof d);
        files[0] = a; files[1] = b;
        d.files = files; d.num_files = 2; d.batch_size = 2; d.seq_len = 4; d.seed = 7;
        if (acc->process_index == 1) {
            switch (f) {
            case 0: d.num_files = 1; break;
            case 1: files[1] = c; break;
            case 2: d.batch_size = 3; break;
            case 3: d.seq_len = 5; break;
            case 4: d.shuffle = 1; break;
            default: d.seed = 8; break;
            }
        }
        expect_disagreement(acc, accel_data_seq_init(acc, &ld, &d), fields[f], rank0[f], odd[f]);
        AT_CHECK(ld.files == NULL); /* nothing was kept open */
    }
    at_context = "seq agreement: same config";
    memset(&d, 0, sizeof d);
    files[0] = a; files[1] = b;
    d.files = files; d.num_files = 2; d.batch_size = 2; d.seq_len = 4; d.seed = 7;
    AT_EQ_INT(accel_data_seq_init(acc, &ld, &d), ACCEL_OK);
    AT_EQ_INT(ld.num_processes, acc->num_processes);
    accel_data_seq_deinit(&ld);
    at_context = "seq: a missing file on rank 1";
    if (acc->process_index == 1) files[1] = "/nonexistent/accel/x.bin";
    {
        accel_result r = accel_data_seq_init(acc, &ld, &d);
        AT_EQ_INT(r, acc->process_index == 1 ? ACCEL_ERR_NOT_FOUND : ACCEL_ERR_REMOTE);
        AT_CONTAINS(accel_last_error(acc), "/nonexistent/accel/x.bin");
    }
    at_context = "";
    unlink(a); unlink(b); unlink(c);
    rmdir(dir);
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
    if (acc.num_processes >= 2) {
        test_shard_agreement(&acc);
        test_seq_agreement(&acc);
    }
    accel_shutdown(&acc);
    {
        char name[32];
        snprintf(name, sizeof name, "data-mpi-rank%d", acc.process_index);
        return at_finish(name);
    }
}
