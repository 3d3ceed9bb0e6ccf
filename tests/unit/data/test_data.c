/* Unit tests of accel_data.h: docs/semantics.md's worked sharding cases, grid properties (coverage, duplicates only
   where even_batches pads, equal lengths, lengths == iteration, skip == stream minus k), the one-process rule
   (prepare() does not shard), prepare()'s error order, the random sampler (a permutation, a function of (seed,
   epoch) only, world-size independent), GradientState bookkeeping through acc's list of loaders and
   gather_for_metrics rows, resume-safe epochs (state round trips, set_epoch keeping a restored position, the
   documented loop interrupted at random batches), llm.c token shards (good GPT-2/Llama-3 files written here with
   plain fwrite; corrupt, truncated, wrong magic; a sparse > 4 GiB file), the sequence loader and the CPU stager. The
   exact Accelerate iteration is checked separately against a literal Python transcription of Accelerate's
   generators (ref_shards.py). */
#include "accel_data.h"
#include "accel_test.h"
#include "accel_test_fs.h"
#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

static void quiet_log(void *u, accel_log_level l, const char *m) { (void)u; (void)l; (void)m; }

/* ------------------------------------------------------------------------------------------ helpers */
/* The shard classes themselves (batch_sampler_shard: BatchSamplerShard / IterableDatasetShard also at P = 1), as
   docs/semantics.md §1-§2 describe them; mk_prepare: what prepare() hands a trainer (the default). */
static accel_data_shard_desc mk(int64_t n, int64_t b, int P, int p, int split, int even, int drop, int iterable) {
    accel_data_shard_desc d;
    memset(&d, 0, sizeof d);
    d.dataset_len = n; d.batch_size = b; d.num_processes = P; d.process_index = p;
    d.split_batches = split ? ACCEL_ON : ACCEL_OFF;
    d.no_even_batches = !even;
    d.drop_last = drop; d.iterable = iterable;
    d.batch_sampler_shard = 1;
    return d;
}
static accel_data_shard_desc mk_prepare(int64_t n, int64_t b, int P, int p, int split, int even, int drop, int iterable) {
    accel_data_shard_desc d = mk(n, b, P, p, split, even, drop, iterable);
    d.batch_sampler_shard = 0;
    return d;
}

/* "[a,b,c][d,e]": all batches of process p */
static void shard_str(const accel_data_shard_desc *d0, int p, char *out, size_t cap) {
    accel_data_shard sh;
    accel_data_shard_desc d = *d0;
    int64_t buf[64], count, k, j;
    size_t off = 0;
    d.process_index = p;
    out[0] = 0;
    if (accel_data_shard_init(NULL, &sh, &d) != ACCEL_OK) { snprintf(out, cap, "error"); return; }
    for (k = 0; k < accel_data_shard_len(&sh); ++k) {
        if (accel_data_shard_get_batch(&sh, k, buf, &count) != ACCEL_OK) { snprintf(out, cap, "error"); return; }
        off += (size_t)snprintf(out + off, cap - off, "[");
        for (j = 0; j < count; ++j) off += (size_t)snprintf(out + off, cap - off, j ? ",%lld" : "%lld", (long long)buf[j]);
        off += (size_t)snprintf(out + off, cap - off, "]");
    }
}

static void expect_shards(const char *name, accel_data_shard_desc d, const char *const *want) {
    char got[4096];
    int p;
    for (p = 0; p < d.num_processes; ++p) {
        at_context = name;
        shard_str(&d, p, got, sizeof got);
        AT_EQ_STR(got, want[p]);
    }
    at_context = "";
}

/* ------------------------------------------------------------------------------------- worked cases */
static void test_worked_cases(void) {
    {   /* SEMANTICS §1: N=10,B=3,P=2 */
        const char *w[] = {"[0,1,2][6,7,8]", "[3,4,5][9,0,1]"};
        expect_shards("N10B3P2", mk(10, 3, 2, 0, 0, 1, 0, 0), w);
    }
    {   /* N=9,B=2,P=4: last round p0 [8,0], p1 [1,2], p2 [3,4], p3 [5,6] */
        const char *w[] = {"[0,1][8,0]", "[2,3][1,2]", "[4,5][3,4]", "[6,7][5,6]"};
        expect_shards("N9B2P4", mk(9, 2, 4, 0, 0, 1, 0, 0), w);
    }
    {   /* BatchSamplerShard at P=1 pads the short batch: [0,1],[2,3],[4,0] */
        const char *w[] = {"[0,1][2,3][4,0]"};
        expect_shards("N5B2P1", mk(5, 2, 1, 0, 0, 1, 0, 0), w);
        expect_shards("N5B2P1-iterable", mk(5, 2, 1, 0, 0, 1, 0, 1), w);
    }
    {   /* 5 batches, P=2, drop_last: incomplete rounds dropped even with full batches → 2 each */
        const char *w[] = {"[0,1][4,5]", "[2,3][6,7]"};
        expect_shards("5batches-drop", mk(10, 2, 2, 0, 0, 1, 1, 0), w);
    }
    {   /* 5 batches (N=10, B=2), P=2, even: the 5th goes to p0, p1 gets initial_data[0:2] */
        const char *w[] = {"[0,1][4,5][8,9]", "[2,3][6,7][0,1]"};
        expect_shards("5batches-even", mk(10, 2, 2, 0, 0, 1, 0, 0), w);
    }
    {   /* not even: the held batch is yielded, even short; p1 gets fewer */
        const char *w[] = {"[0,1,2][6,7,8]", "[3,4,5][9]"};
        expect_shards("N10B3P2-uneven", mk(10, 3, 2, 0, 0, 0, 0, 0), w);
        {
            const char *w2[] = {"[0,1][4,5][8,9]", "[2,3][6,7]"};
            expect_shards("5batches-uneven", mk(10, 2, 2, 0, 0, 0, 0, 0), w2);
        }
    }
    {   /* N=3, B=2, P=2: batches [0,1],[2]; p1's short batch is completed from initial_data */
        const char *w[] = {"[0,1]", "[2,0]"};
        expect_shards("N3B2P2", mk(3, 2, 2, 0, 0, 1, 0, 0), w);
    }
    {   /* N=3, B=2, P=4: the cursor walks a doubled initial_data [0,1,2,0,1,2,...] */
        const char *w[] = {"[0,1]", "[2,0]", "[1,2]", "[0,1]"};
        expect_shards("N3B2P4", mk(3, 2, 4, 0, 0, 1, 0, 0), w);
    }
    {   /* split_batches: B=4 P=2 N=10: [0..3],[4..7] split; last [8,9] + initial [0,1,2,3] */
        const char *w[] = {"[0,1][4,5][8,9]", "[2,3][6,7][0,1]"};
        expect_shards("split-even", mk(10, 4, 2, 0, 1, 1, 0, 0), w);
    }
    {   /* split, not even: p1's slice of the short batch is empty → one batch less (policy 1 length) */
        const char *w[] = {"[0,1][4,5][8,9]", "[2,3][6,7]"};
        expect_shards("split-uneven", mk(10, 4, 2, 0, 1, 0, 0, 0), w);
    }
    {   /* split, not even, short slice: N=9, B=4, P=2: last batch [8] → p0 [8], p1 nothing */
        const char *w[] = {"[0,1][4,5][8]", "[2,3][6,7]"};
        expect_shards("split-uneven-short", mk(9, 4, 2, 0, 1, 0, 0, 0), w);
    }
    {   /* split with N < B: the first batch only, doubled: [0,1,2] + [0,1,2,0,1,2] */
        const char *w[] = {"[0,1]", "[2,0]"};
        expect_shards("split-small", mk(3, 4, 2, 0, 1, 1, 0, 0), w);
    }
    {   /* split drop_last */
        const char *w[] = {"[0,1][4,5]", "[2,3][6,7]"};
        expect_shards("split-drop", mk(10, 4, 2, 0, 1, 1, 1, 0), w);
    }
    {   /* iterable, no split: windows of B*P=6: [0..5], then [6,7,8,9] + first window → [6,7,8,9,0,1] */
        const char *w[] = {"[0,1,2][6,7,8]", "[3,4,5][9,0,1]"};
        expect_shards("iter-N10B3P2", mk(10, 3, 2, 0, 0, 0, 0, 1), w);
    }
    {   /* iterable, split: windows of B=4, slices of 2 */
        const char *w[] = {"[0,1][4,5][8,9]", "[2,3][6,7][0,1]"};
        expect_shards("iter-split", mk(10, 4, 2, 0, 1, 1, 0, 1), w);
    }
    {   /* iterable, fewer items than a window: the leftover is its own "first batch" */
        const char *w[] = {"[0,1,2]", "[3,4,0]"};
        expect_shards("iter-small", mk(5, 3, 2, 0, 0, 1, 0, 1), w);
    }
    {   /* iterable drop_last */
        const char *w[] = {"[0,1,2]", "[3,4,5]"};
        expect_shards("iter-drop", mk(10, 3, 2, 0, 0, 1, 1, 1), w);
    }
    {   /* empty cases: N=0, and drop_last with N < B → nobody gets anything, in every mode */
        const char *w[] = {"", ""};
        int split, even, it;
        for (split = 0; split < 2; ++split)
            for (even = 0; even < 2; ++even)
                for (it = 0; it < 2; ++it) {
                    expect_shards("empty", mk(0, 2, 2, 0, split, even, 0, it), w);
                    expect_shards("drop-small", mk(1, 2, 2, 0, split, even, 1, it), w);
                }
    }
}

/* One process: prepare() does not shard, the plain DataLoader yields the short last batch (no padding from the start
   of the epoch), for map-style and iterable datasets, whatever even_batches says; remainder = N % B. */
static void test_one_process(void) {
    int even, it, split;
    for (even = 0; even < 2; ++even)
        for (it = 0; it < 2; ++it)
            for (split = 0; split < 2; ++split) {
                const char *w[] = {"[0,1][2,3][4]"}, *wd[] = {"[0,1][2,3]"}, *w7[] = {"[0,1,2][3,4,5][6]"};
                expect_shards("prepare-N5B2P1", mk_prepare(5, 2, 1, 0, split, even, 0, it), w);
                expect_shards("prepare-N5B2P1-drop", mk_prepare(5, 2, 1, 0, split, even, 1, it), wd);
                expect_shards("prepare-N7B3P1", mk_prepare(7, 3, 1, 0, split, even, 0, it), w7);
            }
    {   /* the trainer-facing default (num_processes from a one-process acc) is that rule; its bookkeeping too */
        accel acc;
        accel_desc ad;
        accel_data_shard sh;
        accel_data_shard_desc d;
        int64_t buf[4], count;
        memset(&ad, 0, sizeof ad);
        ad.no_mpi = 1; ad.cpu = 1; ad.log_fn = quiet_log;
        AT_EQ_INT(accel_init(&acc, &ad), ACCEL_OK);
        for (it = 0; it < 2; ++it) {
            memset(&d, 0, sizeof d);
            d.dataset_len = 5; d.batch_size = 2; d.iterable = it;
            AT_EQ_INT(accel_data_shard_init(&acc, &sh, &d), ACCEL_OK);
            AT_EQ_INT(accel_data_shard_len(&sh), 3);
            AT_EQ_INT(accel_data_shard_remainder(&sh), 1); /* N % B */
            AT_EQ_INT(accel_data_shard_next(&sh, buf, &count), ACCEL_OK);
            AT_EQ_INT(accel_data_shard_next(&sh, buf, &count), ACCEL_OK);
            AT_EQ_INT(accel_data_shard_next(&sh, buf, &count), ACCEL_OK);
            AT_EQ_INT(count, 1); /* [4], not [4,0] */
            AT_EQ_INT(buf[0], 4);
            AT_EQ_INT(acc.end_of_dataloader, 1);
            AT_EQ_INT(acc.remainder, 1);
            AT_EQ_INT(accel_data_gather_real_rows(&acc, count), 1); /* gather_for_metrics keeps the one real row */
            AT_EQ_INT(accel_data_shard_next(&sh, buf, &count), ACCEL_OK);
            AT_EQ_INT(count, 0);
            accel_data_shard_deinit(&sh);
        }
        /* shuffled: the epoch's order cut into batches of B, the last one short */
        {
            accel_data_sampler smp;
            int64_t k = 0, i, got = 0;
            int same = 1;
            memset(&d, 0, sizeof d);
            d.dataset_len = 11; d.batch_size = 4; d.shuffle = 1; d.seed = 3;
            AT_EQ_INT(accel_data_shard_init(&acc, &sh, &d), ACCEL_OK);
            accel_data_sampler_init(NULL, &smp, 11, 1, 3);
            while (accel_data_shard_next(&sh, buf, &count) == ACCEL_OK && count > 0) {
                for (i = 0; i < count; ++i) same &= buf[i] == accel_data_sampler_index(&smp, k * 4 + i);
                got += count;
                ++k;
            }
            AT_CHECK(same);
            AT_EQ_INT(got, 11);
            AT_EQ_INT(k, 3);
            accel_data_shard_deinit(&sh);
        }
        accel_shutdown(&acc);
    }
}

static void test_errors(void) {
    accel_data_shard sh;
    accel_data_shard_desc d;
    /* trainer-facing: prepare_data_loader's sanity check fires first, with its text */
    d = mk_prepare(10, 3, 2, 0, 1, 1, 0, 0);
    AT_EQ_INT(accel_data_shard_init(NULL, &sh, &d), ACCEL_ERR_INVALID_ARGUMENT);
    AT_CONTAINS(accel_last_error(NULL), "To use a `DataLoader` in `split_batches` mode, the batch size (3) needs to be a "
                                        "round multiple of the number of processes (2).");
    d = mk_prepare(10, 3, 2, 0, 1, 1, 0, 1);
    AT_EQ_INT(accel_data_shard_init(NULL, &sh, &d), ACCEL_ERR_INVALID_ARGUMENT);
    AT_CONTAINS(accel_last_error(NULL), "To use a `DataLoader` in `split_batches` mode, the batch size (3)");
    d = mk_prepare(10, 1, 2, 0, 1, 1, 0, 0); /* prepare() lets B == 1 through; BatchSamplerShard's check applies */
    AT_EQ_INT(accel_data_shard_init(NULL, &sh, &d), ACCEL_ERR_INVALID_ARGUMENT);
    AT_CONTAINS(accel_last_error(NULL), "To use `BatchSamplerShard` in `split_batches` mode, the batch size (1) needs to "
                                        "be a round multiple of the number of processes (2).");
    d = mk_prepare(10, 1, 2, 0, 1, 1, 0, 1); /* ... and for an iterable, policy 2 */
    AT_EQ_INT(accel_data_shard_init(NULL, &sh, &d), ACCEL_ERR_INVALID_ARGUMENT);
    AT_CONTAINS(accel_last_error(NULL), "batch size 1");
    d = mk_prepare(10, 6, 4, 0, 1, 1, 0, 0);
    AT_EQ_INT(accel_data_shard_init(NULL, &sh, &d), ACCEL_ERR_INVALID_ARGUMENT);
    AT_CONTAINS(accel_last_error(NULL), "`DataLoader` in `split_batches` mode, the batch size (6) needs to be a round "
                                        "multiple of the number of processes (4).");
    d = mk_prepare(10, 3, 1, 0, 1, 1, 0, 1); /* one process: nothing to split */
    AT_EQ_INT(accel_data_shard_init(NULL, &sh, &d), ACCEL_OK);
    /* the shard classes themselves (batch_sampler_shard, the CLI): their own messages */
    d = mk(10, 3, 2, 0, 1, 1, 0, 0);
    AT_EQ_INT(accel_data_shard_init(NULL, &sh, &d), ACCEL_ERR_INVALID_ARGUMENT);
    AT_CONTAINS(accel_last_error(NULL), "To use `BatchSamplerShard` in `split_batches` mode, the batch size (3) needs to be "
                                        "a round multiple of the number of processes (2).");
    d = mk(10, 1, 2, 0, 1, 1, 0, 0); /* BatchSamplerShard rejects B=1, P>1 in split mode */
    AT_EQ_INT(accel_data_shard_init(NULL, &sh, &d), ACCEL_ERR_INVALID_ARGUMENT);
    d = mk(10, 3, 2, 0, 1, 1, 0, 1);
    AT_EQ_INT(accel_data_shard_init(NULL, &sh, &d), ACCEL_ERR_INVALID_ARGUMENT);
    AT_CONTAINS(accel_last_error(NULL), "To use `IterableDatasetShard` in `split_batches` mode, the batch size (3)");
    d = mk(10, 1, 2, 0, 1, 1, 0, 1); /* policy 2 */
    AT_EQ_INT(accel_data_shard_init(NULL, &sh, &d), ACCEL_ERR_INVALID_ARGUMENT);
    AT_CONTAINS(accel_last_error(NULL), "batch size 1");
    d = mk(10, 1, 1, 0, 1, 1, 0, 1); /* B=1, P=1 split is fine */
    AT_EQ_INT(accel_data_shard_init(NULL, &sh, &d), ACCEL_OK);
    d = mk(10, 0, 1, 0, 0, 1, 0, 0);
    AT_EQ_INT(accel_data_shard_init(NULL, &sh, &d), ACCEL_ERR_INVALID_ARGUMENT);
    d = mk(-1, 2, 1, 0, 0, 1, 0, 0);
    AT_EQ_INT(accel_data_shard_init(NULL, &sh, &d), ACCEL_ERR_INVALID_ARGUMENT);
    d = mk(10, 2, 2, 2, 0, 1, 0, 0);
    AT_EQ_INT(accel_data_shard_init(NULL, &sh, &d), ACCEL_ERR_INVALID_ARGUMENT);
    AT_CONTAINS(accel_last_error(NULL), "process_index 2");
    d = mk(10, 2, 2, 0, 0, 1, 0, 0);
    d.split_batches = (accel_toggle)5;
    AT_EQ_INT(accel_data_shard_init(NULL, &sh, &d), ACCEL_ERR_INVALID_ARGUMENT);
    AT_CONTAINS(accel_last_error(NULL), "split_batches 5");
    d = mk(10, 3, 2, 1, 0, 1, 0, 0);
    d.no_even_batches = 7; /* any nonzero value turns it off: p1 gets [3,4,5],[9] */
    AT_EQ_INT(accel_data_shard_init(NULL, &sh, &d), ACCEL_OK);
    AT_EQ_INT(sh.desc.no_even_batches, 1);
    AT_EQ_INT(accel_data_shard_batch_len(&sh, 1), 1);
    {   /* issue 26: the sampler's range and a zeroed shard are errors (were: a NULL dereference, an endless loop for
           indices past n, an empty epoch forever) */
        accel_data_sampler smp;
        accel_data_shard zero;
        int64_t idx[16], cnt = -1;
        int64_t i;
        AT_EQ_INT(accel_data_sampler_init(NULL, &smp, 5, 1, 42), ACCEL_OK);
        AT_EQ_INT(accel_data_sampler_fill(NULL, 0, 1, idx), ACCEL_ERR_INVALID_ARGUMENT);
        AT_CONTAINS(accel_last_error(NULL), "sampler is NULL");
        AT_EQ_INT(accel_data_sampler_fill(&smp, 0, 1, NULL), ACCEL_ERR_INVALID_ARGUMENT);
        AT_EQ_INT(accel_data_sampler_fill(&smp, 3, 10, idx), ACCEL_ERR_INVALID_ARGUMENT);
        AT_CONTAINS(accel_last_error(NULL), "not within the dataset's [0, 5)");
        AT_EQ_INT(accel_data_sampler_fill(&smp, 5, 1, idx), ACCEL_ERR_INVALID_ARGUMENT);
        AT_EQ_INT(accel_data_sampler_fill(&smp, -1, 2, idx), ACCEL_ERR_INVALID_ARGUMENT);
        AT_EQ_INT(accel_data_sampler_fill(&smp, 2, -1, idx), ACCEL_ERR_INVALID_ARGUMENT);
        AT_EQ_INT(accel_data_sampler_fill(&smp, 2, INT64_MAX, idx), ACCEL_ERR_INVALID_ARGUMENT);
        AT_EQ_INT(accel_data_sampler_fill(&smp, 5, 0, idx), ACCEL_OK); /* an empty range at the end */
        AT_EQ_INT(accel_data_sampler_fill(&smp, 0, 5, idx), ACCEL_OK);
        for (i = 0; i < 5; ++i) AT_EQ_INT(idx[i], accel_data_sampler_index(&smp, i));
        memset(&zero, 0, sizeof zero);
        AT_EQ_INT(accel_data_shard_next(&zero, idx, &cnt), ACCEL_ERR_STATE);
        AT_CONTAINS(accel_last_error(NULL), "not initialized");
    }
    {   /* a failed init changes nothing */
        accel_data_shard before;
        d = mk(10, 3, 2, 1, 0, 1, 0, 0);
        AT_EQ_INT(accel_data_shard_init(NULL, &sh, &d), ACCEL_OK);
        before = sh;
        d.batch_size = 0;
        AT_EQ_INT(accel_data_shard_init(NULL, &sh, &d), ACCEL_ERR_INVALID_ARGUMENT);
        AT_CHECK(!memcmp(&before, &sh, sizeof sh));
    }
}

/* ------------------------------------------------------------------------------------------ grid */
static void test_grid(void) {
    static int64_t buf[64], buf2[64];
    static int counts[256];
    int64_t n, b, P, flags;
    int bad = 0, cases = 0;
    for (n = 0; n <= 200; ++n)
        for (b = 1; b <= 8; ++b)
            for (P = 1; P <= 5; ++P)
                for (flags = 0; flags < 32; ++flags) {
                    int split = flags & 1, even = (flags >> 1) & 1, drop = (flags >> 2) & 1, it = (flags >> 3) & 1;
                    int prepare = (flags >> 4) & 1; /* prepare()'s rule: no sharding (no padding) with one process */
                    int64_t lens[5], total = 0, G, i, p, dup = 0, expect_total;
                    int pads = !drop && (even || it) && !(prepare && P == 1);
                    accel_data_shard_desc d = prepare ? mk_prepare(n, b, (int)P, 0, split, even, drop, it)
                                                      : mk(n, b, (int)P, 0, split, even, drop, it);
                    accel_data_shard sh;
                    if ((split && b % P) || (split && it && b == 1 && P > 1)) continue;
                    ++cases;
                    memset(counts, 0, sizeof counts);
                    G = split ? b : b * P;
                    for (p = 0; p < P; ++p) {
                        int64_t k = 0, count, skip;
                        d.process_index = (int)p;
                        if (accel_data_shard_init(NULL, &sh, &d) != ACCEL_OK) { bad++; continue; }
                        lens[p] = accel_data_shard_len(&sh);
                        /* lengths == iteration, and the iteration equals random access */
                        while (accel_data_shard_next(&sh, buf, &count) == ACCEL_OK && count > 0) {
                            int64_t c2 = -1;
                            accel_data_shard_get_batch(&sh, k, buf2, &c2);
                            if (c2 != count || memcmp(buf, buf2, sizeof(int64_t) * (size_t)count)) bad++;
                            if (count > accel_data_shard_batch_size(&sh)) bad++;
                            if ((pads || drop) && count != accel_data_shard_batch_size(&sh)) bad++;
                            for (i = 0; i < count; ++i) {
                                if (buf[i] < 0 || buf[i] >= n) { bad++; continue; }
                                counts[buf[i]]++;
                            }
                            total += count;
                            ++k;
                        }
                        if (k != lens[p]) bad++;
                        if (accel_data_shard_epoch(&sh) != 1) bad++;
                        /* skip_first_batches(s) == the stream minus s batches */
                        for (skip = 0; skip <= lens[p] + 1; skip += (lens[p] > 4 ? 3 : 1)) {
                            int64_t k2 = skip;
                            accel_data_shard_set_epoch(&sh, 0);
                            accel_data_shard_skip_first_batches(&sh, skip);
                            while (accel_data_shard_next(&sh, buf, &count) == ACCEL_OK && count > 0) {
                                int64_t c2 = -1;
                                accel_data_shard_get_batch(&sh, k2, buf2, &c2);
                                if (c2 != count || memcmp(buf, buf2, sizeof(int64_t) * (size_t)count)) bad++;
                                ++k2;
                            }
                            if (k2 != (skip > lens[p] ? skip : lens[p])) bad++;
                        }
                    }
                    /* coverage */
                    if (drop) expect_total = (n / G) * G;
                    else if (pads) expect_total = ((n + G - 1) / G) * G;
                    else expect_total = n;
                    if (total != expect_total) bad++;
                    for (i = 0; i < n; ++i) {
                        if (!drop && counts[i] < 1) bad++;
                        if (counts[i] > 1) dup += counts[i] - 1;
                        if (drop && i < (n / G) * G && counts[i] != 1) bad++;
                        if (drop && i >= (n / G) * G && counts[i] != 0) bad++;
                    }
                    if (!pads && dup) bad++;                   /* duplicates only where padding is required */
                    if (pads && dup != expect_total - n) bad++;
                    if (pads || drop)                          /* even_batches: equal lengths */
                        for (p = 1; p < P; ++p)
                            if (lens[p] != lens[0]) bad++;
                    if (bad) {
                        fprintf(stderr, "grid failure at N=%lld B=%lld P=%lld split=%d even=%d drop=%d iterable=%d\n",
                                (long long)n, (long long)b, (long long)P, split, even, drop, it);
                        AT_CHECK(0);
                        return;
                    }
                }
    AT_CHECK(bad == 0);
    AT_CHECK(cases > 100000);
}

/* ------------------------------------------------------------------------------------- random sampler */
static void test_sampler(void) {
    static unsigned char seen[5000];
    accel_data_sampler s, s2;
    int64_t n, i;
    int ok = 1, same_seed_same = 1;
    for (n = 0; n <= 300; ++n) {
        AT_EQ_INT(accel_data_sampler_init(NULL, &s, n, 1, 1234), ACCEL_OK);
        accel_data_sampler_set_epoch(&s, n % 3);
        memset(seen, 0, sizeof seen);
        for (i = 0; i < n; ++i) {
            int64_t x = accel_data_sampler_index(&s, i);
            if (x < 0 || x >= n || seen[x]) ok = 0;
            else seen[x] = 1;
        }
    }
    AT_CHECK_MSG(ok, "shuffled order is a permutation of [0, n) for n <= 300");
    n = 4099;
    accel_data_sampler_init(NULL, &s, n, 1, 7);
    accel_data_sampler_init(NULL, &s2, n, 1, 7);
    memset(seen, 0, sizeof seen);
    for (i = 0; i < n; ++i) {
        int64_t x = accel_data_sampler_index(&s, i);
        if (x < 0 || x >= n || seen[x]) ok = 0; else seen[x] = 1;
        if (x != accel_data_sampler_index(&s2, i)) same_seed_same = 0;
    }
    AT_CHECK(ok);
    AT_CHECK_MSG(same_seed_same, "same (seed, epoch) → same order");
    {   /* shuffled: not the identity, and epochs / seeds differ */
        int fixed = 0, ediff = 0, sdiff = 0;
        accel_data_sampler_set_epoch(&s2, 1);
        for (i = 0; i < n; ++i) {
            fixed += accel_data_sampler_index(&s, i) == i;
            ediff += accel_data_sampler_index(&s, i) != accel_data_sampler_index(&s2, i);
        }
        accel_data_sampler_init(NULL, &s2, n, 1, 8);
        for (i = 0; i < n; ++i) sdiff += accel_data_sampler_index(&s, i) != accel_data_sampler_index(&s2, i);
        AT_CHECK(fixed < 20);
        AT_CHECK(ediff > n / 2);
        AT_CHECK(sdiff > n / 2);
    }
    {   /* sequential is the identity */
        accel_data_sampler_init(NULL, &s2, 50, 0, 7);
        for (i = 0; i < 50; ++i) if (accel_data_sampler_index(&s2, i) != i) ok = 0;
        AT_CHECK(ok);
    }
    {   /* a huge dataset costs nothing: index positions of a 10^12 permutation */
        int64_t big = (int64_t)1000000000000LL, x;
        AT_EQ_INT(accel_data_sampler_init(NULL, &s, big, 1, 99), ACCEL_OK);
        for (i = 0; i < 1000; ++i) {
            x = accel_data_sampler_index(&s, big - 1 - i * 999999);
            if (x < 0 || x >= big) ok = 0;
        }
        AT_CHECK(ok);
    }
    {   /* world-size independence: for P = 1, 2, 3, batch k of rank p is positions (kP+p)B.. of ONE order */
        int64_t N = 120, B = 4, Pn, k, j, buf[8], count;
        int64_t order[120];
        int consistent = 1;
        accel_data_sampler_init(NULL, &s, N, 1, 5);
        accel_data_sampler_set_epoch(&s, 3);
        for (i = 0; i < N; ++i) order[i] = accel_data_sampler_index(&s, i);
        for (Pn = 1; Pn <= 3; ++Pn) {
            int p;
            for (p = 0; p < Pn; ++p) {
                accel_data_shard sh;
                accel_data_shard_desc d = mk(N, B, (int)Pn, p, 0, 1, 1, 0);
                d.shuffle = 1; d.seed = 5;
                accel_data_shard_init(NULL, &sh, &d);
                accel_data_shard_set_epoch(&sh, 3);
                for (k = 0; k < accel_data_shard_len(&sh); ++k) {
                    accel_data_shard_get_batch(&sh, k, buf, &count);
                    for (j = 0; j < count; ++j)
                        if (buf[j] != order[(k * Pn + p) * B + j]) consistent = 0;
                }
            }
        }
        AT_CHECK_MSG(consistent, "the shuffled order is the same for P = 1, 2, 3");
    }
}

/* ------------------------------------------------------------------------ bookkeeping, state, remainder */
static void test_bookkeeping(void) {
    accel acc;
    accel_desc ad;
    accel_data_shard sh;
    accel_data_shard_desc d;
    int64_t buf[8], count, k;
    memset(&ad, 0, sizeof ad);
    ad.no_mpi = 1; ad.cpu = 1; ad.log_fn = quiet_log;
    AT_EQ_INT(accel_init(&acc, &ad), ACCEL_OK);
    AT_EQ_INT(acc.remainder, -1);
    AT_EQ_INT(acc.end_of_dataloader, 0);
    /* N=10, B=3, P=2 (rank 0 of 2 explicitly): remainder = 10 % 6 = 4; eod set with the last batch */
    d = mk(10, 3, 2, 0, 0, 1, 0, 0);
    AT_EQ_INT(accel_data_shard_init(&acc, &sh, &d), ACCEL_OK);
    AT_EQ_INT(accel_data_shard_remainder(&sh), 4);
    AT_EQ_INT(accel_data_shard_next(&sh, buf, &count), ACCEL_OK);
    AT_EQ_INT(count, 3);
    AT_EQ_INT(acc.remainder, 4);
    AT_EQ_INT(acc.end_of_dataloader, 0);
    AT_EQ_INT(accel_data_shard_next(&sh, buf, &count), ACCEL_OK);
    AT_EQ_INT(acc.end_of_dataloader, 1); /* one ahead: set while the last batch is in hand */
    /* gather_for_metrics: the 2 ranks' last batches gathered = 6 rows [6,7,8,9,0,1] → 4 real */
    AT_EQ_INT(accel_data_gather_real_rows(&acc, 6), 4);
    AT_EQ_INT(accel_data_shard_next(&sh, buf, &count), ACCEL_OK);
    AT_EQ_INT(count, 0);
    AT_EQ_INT(acc.end_of_dataloader, 0); /* end(): no active dataloader */
    AT_EQ_INT(acc.remainder, -1);
    AT_EQ_INT(sh.epoch, 1);
    /* drop_last → remainder -1; split → total_batch_size B */
    d = mk(10, 3, 2, 0, 0, 1, 1, 0);
    accel_data_shard_init(&acc, &sh, &d);
    AT_EQ_INT(accel_data_shard_remainder(&sh), -1);
    d = mk(10, 4, 2, 0, 1, 1, 0, 0);
    accel_data_shard_init(&acc, &sh, &d);
    AT_EQ_INT(accel_data_shard_remainder(&sh), 2);
    d = mk(12, 3, 2, 0, 0, 1, 0, 0);
    accel_data_shard_init(&acc, &sh, &d);
    AT_EQ_INT(accel_data_shard_remainder(&sh), 0);
    /* SEMANTICS §3: N=7, B=2, P=2, skip 1 → ranks hold [4,5] and [6,0]; gathered [4,5,6,0]; accel keeps remainder
       3 (policy 4), so 3 rows are real */
    {
        int p;
        int64_t gathered[4];
        int ngathered = 0;
        for (p = 0; p < 2; ++p) {
            d = mk(7, 2, 2, p, 0, 1, 0, 0);
            accel_data_shard_init(&acc, &sh, &d);
            AT_EQ_INT(accel_data_shard_skip_first_batches(&sh, 1), ACCEL_OK);
            AT_EQ_INT(accel_data_shard_next(&sh, buf, &count), ACCEL_OK);
            AT_EQ_INT(count, 2);
            AT_EQ_INT(acc.end_of_dataloader, 1);
            AT_EQ_INT(acc.remainder, 3);
            gathered[ngathered++] = buf[0];
            gathered[ngathered++] = buf[1];
            AT_EQ_INT(accel_data_shard_next(&sh, buf, &count), ACCEL_OK);
            AT_EQ_INT(count, 0);
        }
        AT_EQ_INT(gathered[0], 4); AT_EQ_INT(gathered[1], 5); AT_EQ_INT(gathered[2], 6); AT_EQ_INT(gathered[3], 0);
        AT_EQ_INT(accel_data_real_rows(1, 3, 4), 3);
    }
    AT_EQ_INT(accel_data_real_rows(0, 3, 8), 8);   /* not the last batch */
    AT_EQ_INT(accel_data_real_rows(1, -1, 8), 8);  /* unknown remainder */
    AT_EQ_INT(accel_data_real_rows(1, 0, 8), 8);   /* full last batch */
    AT_EQ_INT(accel_data_real_rows(1, 5, 3), 3);
    /* nested loaders: the inner one's end restores the outer's values */
    {
        accel_data_shard outer, inner;
        accel_data_shard_desc od = mk(10, 3, 1, 0, 0, 1, 0, 0), id = mk(5, 2, 1, 0, 0, 1, 0, 0);
        accel_data_shard_init(&acc, &outer, &od);
        accel_data_shard_init(&acc, &inner, &id);
        for (k = 0; k < 4; ++k) accel_data_shard_next(&outer, buf, &count);
        AT_EQ_INT(acc.end_of_dataloader, 1);
        AT_EQ_INT(acc.remainder, 1);
        accel_data_shard_next(&inner, buf, &count);
        AT_EQ_INT(acc.end_of_dataloader, 0);
        AT_EQ_INT(acc.remainder, 1);
        while (accel_data_shard_next(&inner, buf, &count) == ACCEL_OK && count > 0) {}
        AT_EQ_INT(acc.end_of_dataloader, 1);
        AT_EQ_INT(acc.remainder, 1);
        accel_data_shard_next(&outer, buf, &count);
        AT_EQ_INT(count, 0);
        AT_EQ_INT(acc.end_of_dataloader, 0);
        AT_EQ_INT(acc.remainder, -1);
    }
    /* state: save mid-epoch, load into a fresh shard: the rest of the stream is identical */
    {
        accel_data_shard a, b2;
        uint8_t st[ACCEL_DATA_SHARD_STATE_BYTES + 8];
        size_t w = 0;
        int64_t ba[8], bb[8], ca, cb;
        int same = 1;
        d = mk_prepare(103, 4, 3, 1, 0, 1, 0, 0);
        d.shuffle = 1; d.seed = 77;
        accel_data_shard_init(&acc, &a, &d);
        accel_data_shard_set_epoch(&a, 2);
        for (k = 0; k < 5; ++k) accel_data_shard_next(&a, ba, &ca);
        /* accel_state_save_fn: too small or NULL → the size, nothing written */
        memset(st, 0xAB, sizeof st);
        AT_EQ_INT(accel_data_shard_state_save(&a, st, 10, &w), ACCEL_OK);
        AT_EQ_INT(w, ACCEL_DATA_SHARD_STATE_BYTES);
        AT_EQ_INT(st[0], 0xAB);
        w = 0;
        AT_EQ_INT(accel_data_shard_state_save(&a, NULL, 0, &w), ACCEL_OK);
        AT_EQ_INT(w, ACCEL_DATA_SHARD_STATE_BYTES);
        AT_EQ_INT(accel_data_shard_state_save(&a, st, sizeof st, NULL), ACCEL_ERR_INVALID_ARGUMENT);
        AT_EQ_INT(accel_data_shard_state_save(&a, st, sizeof st, &w), ACCEL_OK);
        AT_EQ_INT(w, ACCEL_DATA_SHARD_STATE_BYTES);
        /* the documented little-endian layout */
        AT_CHECK(!memcmp(st, "ACDS", 4));
        AT_EQ_INT(st[4], 1);
        AT_EQ_INT(st[8], 103);
        AT_EQ_INT(st[16], 4);
        AT_EQ_INT(st[24], 3);
        AT_EQ_INT(st[28], 1);
        AT_EQ_INT(st[32], 2 | 16);
        AT_EQ_INT(st[40], 77);
        AT_EQ_INT(st[48], 2);
        AT_EQ_INT(st[56], 5);
        d.seed = 1; /* the state carries the seed */
        accel_data_shard_init(&acc, &b2, &d);
        AT_EQ_INT(accel_data_shard_state_load(&b2, st, w), ACCEL_OK);
        for (;;) {
            accel_data_shard_next(&a, ba, &ca);
            accel_data_shard_next(&b2, bb, &cb);
            if (ca != cb || memcmp(ba, bb, sizeof(int64_t) * (size_t)ca)) same = 0;
            if (ca == 0 || cb == 0) break;
        }
        AT_CHECK_MSG(same, "state round trip resumes the identical stream");
        AT_EQ_INT(accel_data_shard_epoch(&b2), 3);
        /* mismatches and corruption change nothing */
        {
            accel_data_shard c;
            accel_data_shard_desc d2 = d;
            uint8_t bad[ACCEL_DATA_SHARD_STATE_BYTES];
            d2.batch_size = 5;
            accel_data_shard_init(&acc, &c, &d2);
            AT_EQ_INT(accel_data_shard_state_load(&c, st, w), ACCEL_ERR_MISMATCH);
            AT_CONTAINS(accel_last_error(&acc), "batch_size");
            AT_EQ_INT(c.position, 0);
            AT_CONTAINS(accel_last_error(&acc), "shard state: saved for batch_size 4, this shard has 5");
            d2 = d; d2.dataset_len = 104;
            accel_data_shard_init(&acc, &c, &d2);
            AT_EQ_INT(accel_data_shard_state_load(&c, st, w), ACCEL_ERR_MISMATCH);
            /* the root cause stays in the shard's acc, with both values */
            AT_CONTAINS(accel_last_error(&acc), "shard state: saved for dataset_len 103, this shard has 104");
            d2 = d; d2.batch_sampler_shard = 1;
            accel_data_shard_init(&acc, &c, &d2);
            AT_EQ_INT(accel_data_shard_state_load(&c, st, w), ACCEL_ERR_MISMATCH);
            AT_CONTAINS(accel_last_error(&acc), "32 batch_sampler_shard");
            d2 = d; d2.drop_last = 1;
            accel_data_shard_init(&acc, &c, &d2);
            AT_EQ_INT(accel_data_shard_state_load(&c, st, w), ACCEL_ERR_MISMATCH);
            memcpy(bad, st, sizeof bad);
            bad[0] = 'X';
            AT_EQ_INT(accel_data_shard_state_load(&b2, bad, w), ACCEL_ERR_FORMAT);
            AT_EQ_INT(accel_data_shard_state_load(&b2, st, w - 1), ACCEL_ERR_FORMAT);
            memcpy(bad, st, sizeof bad);
            bad[63] = 0x80; /* negative position */
            AT_EQ_INT(accel_data_shard_state_load(&b2, bad, w), ACCEL_ERR_FORMAT);
        }
    }
    /* skip after the epoch started is a state error */
    d = mk(10, 2, 1, 0, 0, 1, 0, 0);
    accel_data_shard_init(&acc, &sh, &d);
    accel_data_shard_next(&sh, buf, &count);
    AT_EQ_INT(accel_data_shard_skip_first_batches(&sh, 1), ACCEL_ERR_STATE);
    accel_data_shard_end(&sh);
    AT_EQ_INT(acc.remainder, -1);
    /* num_processes 0 takes P/p from acc */
    memset(&d, 0, sizeof d);
    d.dataset_len = 10; d.batch_size = 3;
    AT_EQ_INT(accel_data_shard_init(&acc, &sh, &d), ACCEL_OK);
    AT_EQ_INT(sh.num_processes, 1);
    AT_EQ_INT(accel_data_shard_len(&sh), 4);
    accel_shutdown(&acc);
}

/* ------------------------------------------------------------------------------ acc's list of loaders */
/* The list of active loaders lives in each Accelerator (accel.h), keyed by the loader object: nothing is shared
   between Accelerators (the old process-wide list was capped at 64 for all of them together and shared its
   entries between threads), and a shard that ends its bookkeeping (deinit / end) leaves the list. */
static void test_loader_list(void) {
    static accel_data_shard many[64];
    accel acc1, acc2;
    accel_desc ad;
    accel_data_shard a, b, c;
    accel_data_shard_desc d;
    int64_t buf[8], count;
    int i;
    memset(&ad, 0, sizeof ad);
    ad.no_mpi = 1; ad.cpu = 1; ad.log_fn = quiet_log;
    AT_EQ_INT(accel_init(&acc1, &ad), ACCEL_OK);
    AT_EQ_INT(accel_init(&acc2, &ad), ACCEL_OK);
    /* 64 loaders in the middle of an epoch on acc1 do not use up acc2's list */
    d = mk_prepare(10, 3, 1, 0, 0, 1, 0, 0);
    for (i = 0; i < 64; ++i) {
        AT_EQ_INT(accel_data_shard_init(&acc1, &many[i], &d), ACCEL_OK);
        AT_EQ_INT(accel_data_shard_next(&many[i], buf, &count), ACCEL_OK);
    }
    AT_EQ_INT(accel_data_shard_init(&acc2, &a, &d), ACCEL_OK);
    AT_EQ_INT(accel_data_shard_next(&a, buf, &count), ACCEL_OK);
    AT_EQ_INT(count, 3);
    AT_EQ_INT(acc2.remainder, 1);
    /* ... while a 65th on acc1 is refused (the core's limit), with the reason in acc1 */
    AT_EQ_INT(accel_data_shard_init(&acc1, &b, &d), ACCEL_OK);
    AT_EQ_INT(accel_data_shard_next(&b, buf, &count), ACCEL_ERR_STATE);
    AT_CONTAINS(accel_last_error(&acc1), "dataloaders are being iterated at once");
    for (i = 0; i < 64; ++i) accel_data_shard_deinit(&many[i]);
    AT_EQ_INT(acc1.remainder, -1);
    AT_EQ_INT(acc1.end_of_dataloader, 0);
    /* acc2's loader reaching its last batch does not show on acc1 */
    AT_EQ_INT(accel_data_shard_init(&acc1, &b, &d), ACCEL_OK);
    AT_EQ_INT(accel_data_shard_next(&b, buf, &count), ACCEL_OK);
    while (acc2.end_of_dataloader == 0) AT_EQ_INT(accel_data_shard_next(&a, buf, &count), ACCEL_OK);
    AT_EQ_INT(acc1.end_of_dataloader, 0);
    /* an inner loader deinitialized mid-epoch (it goes out of scope) restores the outer one's values */
    d = mk_prepare(5, 2, 1, 0, 0, 1, 0, 0);
    AT_EQ_INT(accel_data_shard_init(&acc2, &c, &d), ACCEL_OK);
    AT_EQ_INT(accel_data_shard_next(&c, buf, &count), ACCEL_OK);
    AT_EQ_INT(acc2.end_of_dataloader, 0);
    AT_EQ_INT(acc2.remainder, 1);
    accel_data_shard_deinit(&c);
    AT_EQ_INT(acc2.end_of_dataloader, 1); /* a's last batch again */
    accel_data_shard_deinit(&c);          /* idempotent */
    /* re-initializing a loader in place in the middle of its epoch takes it off the list */
    AT_EQ_INT(accel_data_shard_init(&acc2, &a, &d), ACCEL_OK);
    AT_EQ_INT(acc2.end_of_dataloader, 0);
    AT_EQ_INT(acc2.remainder, -1);
    /* the end of an epoch leaves the list; abandoning an epoch restarts it, the epoch unchanged */
    AT_EQ_INT(accel_data_shard_next(&a, buf, &count), ACCEL_OK);
    accel_data_shard_end(&a);
    AT_EQ_INT(acc2.remainder, -1);
    AT_EQ_INT(accel_data_shard_epoch(&a), 0);
    AT_EQ_INT(accel_data_shard_next(&a, buf, &count), ACCEL_OK);
    AT_EQ_INT(buf[0], 0);
    accel_data_shard_deinit(&a);
    accel_data_shard_deinit(&b);
    {   /* deinit is safe on a zeroed shard and without acc */
        accel_data_shard z;
        memset(&z, 0, sizeof z);
        accel_data_shard_deinit(&z);
        accel_data_shard_deinit(NULL);
    }
    accel_shutdown(&acc1);
    accel_shutdown(&acc2);
}

/* ----------------------------------------------------------------------------------- epochs and resume */
#define LOG_CAP 200000
typedef struct batch_log {
    int64_t v[LOG_CAP];
    int64_t n;
} batch_log;

static void log_push(batch_log *l, int64_t x) {
    if (l->n < LOG_CAP) l->v[l->n] = x;
    l->n++;
}

/* The documented loop over `epochs` epochs, logging (epoch, count, end_of_dataloader, remainder, indices) of every
   batch. interrupt_at > 0: after that many batches the state is saved, the shard dropped and a fresh one initialized
   and loaded, and the loop starts over from its top, as a restarted process would. set_epoch_at_top: the loop also
   calls set_epoch(epoch) at the top of every epoch. */
static void run_documented_loop(accel *acc, const accel_data_shard_desc *d, int64_t epochs, int64_t interrupt_at,
                                int set_epoch_at_top, batch_log *l) {
    accel_data_shard sh;
    int64_t idx[64], count, seen = 0, i;
    l->n = 0;
    if (accel_data_shard_init(acc, &sh, d) != ACCEL_OK) { log_push(l, -999); return; }
    while (accel_data_shard_epoch(&sh) < epochs) {
        if (set_epoch_at_top && accel_data_shard_set_epoch(&sh, accel_data_shard_epoch(&sh)) != ACCEL_OK) log_push(l, -998);
        while (accel_data_shard_next(&sh, idx, &count) == ACCEL_OK && count > 0) {
            log_push(l, accel_data_shard_epoch(&sh));
            log_push(l, count);
            log_push(l, acc ? acc->end_of_dataloader : -5);
            log_push(l, acc ? acc->remainder : -5);
            for (i = 0; i < count; ++i) log_push(l, idx[i]);
            if (++seen == interrupt_at) {
                unsigned char st[ACCEL_DATA_SHARD_STATE_BYTES];
                size_t w = 0;
                if (accel_data_shard_state_save(&sh, st, sizeof st, &w) != ACCEL_OK) log_push(l, -997);
                accel_data_shard_deinit(&sh);
                if (accel_data_shard_init(acc, &sh, d) != ACCEL_OK || accel_data_shard_state_load(&sh, st, w) != ACCEL_OK)
                    log_push(l, -996);
                break; /* back to the top of the program */
            }
        }
    }
    accel_data_shard_deinit(&sh);
}

static void test_epochs_resume(void) {
    static batch_log ref, got;
    accel acc;
    accel_desc ad;
    accel_data_shard sh, sh2;
    accel_data_shard_desc d;
    int64_t buf[8], buf2[8], count, count2, k;
    unsigned char st[ACCEL_DATA_SHARD_STATE_BYTES];
    size_t w = 0;
    memset(&ad, 0, sizeof ad);
    ad.no_mpi = 1; ad.cpu = 1; ad.log_fn = quiet_log;
    AT_EQ_INT(accel_init(&acc, &ad), ACCEL_OK);
    /* state_load, then set_epoch with the same epoch before its first next(): the restored position is kept */
    d = mk_prepare(23, 2, 2, 1, 0, 1, 0, 0);
    d.shuffle = 1; d.seed = 5;
    AT_EQ_INT(accel_data_shard_init(&acc, &sh, &d), ACCEL_OK);
    AT_EQ_INT(accel_data_shard_epoch(&sh), 0);
    AT_EQ_INT(accel_data_shard_set_epoch(&sh, 1), ACCEL_OK);
    for (k = 0; k < 3; ++k) accel_data_shard_next(&sh, buf, &count);
    AT_EQ_INT(accel_data_shard_state_save(&sh, st, sizeof st, &w), ACCEL_OK);
    AT_EQ_INT(accel_data_shard_next(&sh, buf, &count), ACCEL_OK); /* batch 3 of epoch 1: what must come next */
    accel_data_shard_deinit(&sh);
    AT_EQ_INT(accel_data_shard_init(&acc, &sh2, &d), ACCEL_OK);
    AT_EQ_INT(accel_data_shard_state_load(&sh2, st, w), ACCEL_OK);
    AT_EQ_INT(accel_data_shard_epoch(&sh2), 1);
    AT_EQ_INT(accel_data_shard_set_epoch(&sh2, 1), ACCEL_OK);
    AT_EQ_INT(sh2.position, 3);
    AT_EQ_INT(accel_data_shard_next(&sh2, buf2, &count2), ACCEL_OK);
    AT_EQ_INT(count2, count);
    AT_CHECK_MSG(count == count2 && !memcmp(buf, buf2, sizeof(int64_t) * (size_t)count),
                 "set_epoch(same epoch) after state_load continues at the restored batch");
    /* once the epoch is being iterated, set_epoch(same) starts it over at its first batch */
    AT_EQ_INT(accel_data_shard_set_epoch(&sh2, 1), ACCEL_OK);
    AT_EQ_INT(sh2.position, 0);
    AT_EQ_INT(acc.remainder, -1); /* the abandoned epoch left acc's list */
    AT_EQ_INT(accel_data_shard_get_batch(&sh2, 0, buf, &count), ACCEL_OK);
    AT_EQ_INT(accel_data_shard_next(&sh2, buf2, &count2), ACCEL_OK);
    AT_CHECK(count == count2 && !memcmp(buf, buf2, sizeof(int64_t) * (size_t)count));
    /* a different epoch starts at its first batch, even right after state_load */
    AT_EQ_INT(accel_data_shard_state_load(&sh2, st, w), ACCEL_OK);
    AT_EQ_INT(accel_data_shard_set_epoch(&sh2, 4), ACCEL_OK);
    AT_EQ_INT(sh2.position, 0);
    AT_EQ_INT(accel_data_shard_epoch(&sh2), 4);
    /* skip_first_batches, then set_epoch(same): the skip is kept */
    AT_EQ_INT(accel_data_shard_skip_first_batches(&sh2, 2), ACCEL_OK);
    AT_EQ_INT(accel_data_shard_set_epoch(&sh2, 4), ACCEL_OK);
    AT_EQ_INT(sh2.position, 2);
    AT_EQ_INT(accel_data_shard_set_epoch(&sh2, -1), ACCEL_ERR_INVALID_ARGUMENT);
    accel_data_shard_deinit(&sh2);

    /* the documented loop interrupted after every possible batch (with and without set_epoch at the top of each
       epoch) yields exactly the batches — and the bookkeeping — of the uninterrupted run */
    {
        static const int64_t cases[][8] = {
            /* N, B, P, p, split, even, drop, iterable */
            {23, 2, 2, 1, 0, 1, 0, 0}, {23, 3, 1, 0, 0, 1, 0, 0}, {10, 4, 2, 0, 1, 0, 0, 0}, {17, 2, 3, 2, 0, 0, 0, 1},
            {30, 4, 2, 1, 0, 1, 1, 0}, {5, 8, 1, 0, 0, 1, 1, 0}, {0, 2, 2, 0, 0, 1, 0, 0},
        };
        int ci, shuffle, top, mismatches = 0, runs = 0;
        for (ci = 0; ci < (int)(sizeof cases / sizeof cases[0]); ++ci)
            for (shuffle = 0; shuffle < 2; ++shuffle)
                for (top = 0; top < 2; ++top) {
                    const int64_t *c = cases[ci];
                    int64_t stop, epochs = 3, total;
                    d = mk_prepare(c[0], c[1], (int)c[2], (int)c[3], (int)c[4], (int)c[5], (int)c[6], (int)c[7]);
                    d.shuffle = shuffle; d.seed = 11;
                    run_documented_loop(&acc, &d, epochs, -1, top, &ref);
                    AT_CHECK(ref.n < LOG_CAP);
                    accel_data_shard_init(NULL, &sh, &d);
                    total = epochs * accel_data_shard_len(&sh);
                    for (stop = 1; stop <= total; ++stop) {
                        run_documented_loop(&acc, &d, epochs, stop, top, &got);
                        ++runs;
                        if (got.n != ref.n || memcmp(got.v, ref.v, sizeof(int64_t) * (size_t)ref.n)) {
                            if (!mismatches)
                                fprintf(stderr, "resume mismatch: case %d shuffle %d set_epoch-at-top %d interrupted "
                                        "after %lld batches (%lld vs %lld entries)\n", ci, shuffle, top, (long long)stop,
                                        (long long)got.n, (long long)ref.n);
                            ++mismatches;
                        }
                    }
                }
        AT_CHECK_MSG(mismatches == 0, "a resumed documented loop yields the uninterrupted batch sequence");
        AT_CHECK(runs > 250);
        AT_EQ_INT(acc.remainder, -1);
        AT_EQ_INT(acc.end_of_dataloader, 0);
    }
    accel_shutdown(&acc);
}

/* ------------------------------------------------------------------------------------------- token files */
static char tmpdir[256];

/* an llm.c shard written with plain stdio (independent of the reader); token i = (i * mul) % vocab */
static void write_shard(const char *path, int32_t magic, int32_t version, int32_t ntok_header, int width, int64_t ntok,
                        uint32_t mul) {
    int32_t header[256];
    FILE *f = fopen(path, "wb");
    int64_t i;
    if (!f) { perror(path); return; }
    memset(header, 0, sizeof header);
    header[0] = magic; header[1] = version; header[2] = ntok_header;
    fwrite(header, sizeof header, 1, f);
    for (i = 0; i < ntok; ++i) {
        uint32_t v = (uint32_t)(i * mul) % (width == 2 ? 50257u : 128256u);
        if (width == 2) { uint16_t u = (uint16_t)v; fwrite(&u, 2, 1, f); }
        else fwrite(&v, 4, 1, f);
    }
    fclose(f);
}

/* a FIFO as a token shard: refused as not a regular file at once (opened blocking it would wait for a writer) */
static int token_fifo_child(void *arg) {
    accel_data_token_file tf;
    accel_result r = accel_data_token_file_open(NULL, &tf, (const char *)arg);
    if (r == ACCEL_ERR_FORMAT && strstr(accel_last_error(NULL), "not a regular file")) return 0;
    fprintf(stderr, "token shard FIFO: %d: %s\n", (int)r, accel_last_error(NULL));
    return 1;
}
static void test_token_files(void) {
    char p1[512], p2[512], pbad[512];
    accel_data_token_file tf;
    int32_t out[16];
    accel acc;
    accel_desc ad;
    memset(&ad, 0, sizeof ad);
    ad.no_mpi = 1; ad.cpu = 1; ad.log_fn = quiet_log;
    AT_EQ_INT(accel_init(&acc, &ad), ACCEL_OK);
    snprintf(p1, sizeof p1, "%s/gpt2.bin", tmpdir);
    snprintf(p2, sizeof p2, "%s/llama3.bin", tmpdir);
    snprintf(pbad, sizeof pbad, "%s/bad.bin", tmpdir);
    write_shard(p1, 20240520, 1, 1000, 2, 1000, 7);
    write_shard(p2, 20240801, 7, 500, 4, 500, 131);
    AT_EQ_INT(accel_data_token_file_open(&acc, &tf, p1), ACCEL_OK);
    AT_EQ_INT(tf.info.token_bytes, 2);
    AT_EQ_INT(tf.info.num_tokens, 1000);
    AT_EQ_INT(accel_data_token_file_read(&tf, 990, 10, out), ACCEL_OK);
    AT_EQ_INT(out[0], (990 * 7) % 50257);
    AT_EQ_INT(out[9], (999 * 7) % 50257);
    AT_EQ_INT(accel_data_token_file_read(&tf, 995, 10, out), ACCEL_ERR_INVALID_ARGUMENT);
    {   /* every token, through the vectorized widening at odd offsets and lengths */
        static int32_t all[1000];
        int64_t first, i;
        int okv = 1;
        for (first = 0; first < 9; ++first) {
            AT_EQ_INT(accel_data_token_file_read(&tf, first, 1000 - first - (first & 3), all), ACCEL_OK);
            for (i = 0; i < 1000 - first - (first & 3); ++i)
                if (all[i] != (int32_t)(((first + i) * 7) % 50257)) okv = 0;
        }
        AT_CHECK_MSG(okv, "uint16 tokens widen exactly");
    }
    accel_data_token_file_deinit(&tf);
    AT_EQ_INT(accel_data_token_file_open(&acc, &tf, p2), ACCEL_OK);
    AT_EQ_INT(tf.info.token_bytes, 4);
    AT_EQ_INT(tf.info.num_tokens, 500);
    AT_EQ_INT(accel_data_token_file_read(&tf, 499, 1, out), ACCEL_OK);
    AT_EQ_INT(out[0], (int32_t)((499u * 131u) % 128256u));
    {
        static int32_t all[500];
        int64_t i;
        int okv = 1;
        AT_EQ_INT(accel_data_token_file_read(&tf, 3, 497, all), ACCEL_OK);
        for (i = 0; i < 497; ++i)
            if (all[i] != (int32_t)((uint32_t)((3 + i) * 131) % 128256u)) okv = 0;
        AT_CHECK_MSG(okv, "uint32 tokens read exactly");
    }
    accel_data_token_file_deinit(&tf);
    /* bad files */
    write_shard(pbad, 20240520, 1, 1000, 2, 999, 1);
    AT_EQ_INT(accel_data_token_file_open(&acc, &tf, pbad), ACCEL_ERR_FORMAT);
    AT_CONTAINS(accel_last_error(&acc), "truncated");
    AT_CONTAINS(accel_last_error(&acc), "bad.bin");
    write_shard(pbad, 20240520, 1, 1000, 2, 1001, 1);
    AT_EQ_INT(accel_data_token_file_open(&acc, &tf, pbad), ACCEL_ERR_FORMAT);
    AT_CONTAINS(accel_last_error(&acc), "trailing");
    write_shard(pbad, 20240521, 1, 10, 2, 10, 1);
    AT_EQ_INT(accel_data_token_file_open(&acc, &tf, pbad), ACCEL_ERR_FORMAT);
    AT_CONTAINS(accel_last_error(&acc), "bad magic 20240521");
    write_shard(pbad, 20240520, 7, 10, 2, 10, 1); /* GPT-2 magic, Llama version */
    AT_EQ_INT(accel_data_token_file_open(&acc, &tf, pbad), ACCEL_ERR_FORMAT);
    AT_CONTAINS(accel_last_error(&acc), "version 7");
    write_shard(pbad, 20240801, 7, 10, 2, 10, 1); /* Llama magic, uint16 payload → size mismatch */
    AT_EQ_INT(accel_data_token_file_open(&acc, &tf, pbad), ACCEL_ERR_FORMAT);
    write_shard(pbad, 20240520, 1, -5, 2, 0, 1);
    AT_EQ_INT(accel_data_token_file_open(&acc, &tf, pbad), ACCEL_ERR_FORMAT);
    AT_CONTAINS(accel_last_error(&acc), "negative");
    {   /* shorter than the header */
        FILE *f = fopen(pbad, "wb");
        int32_t h[3] = {20240520, 1, 0};
        fwrite(h, sizeof h, 1, f);
        fclose(f);
        AT_EQ_INT(accel_data_token_file_open(&acc, &tf, pbad), ACCEL_ERR_FORMAT);
        AT_CONTAINS(accel_last_error(&acc), "too small");
    }
    write_shard(pbad, 20240520, 1, 0, 2, 0, 1); /* empty but valid */
    AT_EQ_INT(accel_data_token_file_open(&acc, &tf, pbad), ACCEL_OK);
    AT_EQ_INT(tf.info.num_tokens, 0);
    accel_data_token_file_deinit(&tf);
    AT_EQ_INT(accel_data_token_file_open(&acc, &tf, "/nonexistent/accel/x.bin"), ACCEL_ERR_NOT_FOUND);
    AT_EQ_INT(accel_data_token_file_open(&acc, &tf, tmpdir), ACCEL_ERR_FORMAT); /* a directory */
    {
        char pfifo[512];
        snprintf(pfifo, sizeof pfifo, "%s/fifo.bin", tmpdir);
        AT_CHECK(mkfifo(pfifo, 0600) == 0);
        AT_EQ_INT(at_bounded(token_fifo_child, pfifo, 10), 0);
        unlink(pfifo);
    }
    {   /* > 4 GiB (sparse): Llama-3 with 2^30 + 3 tokens = 4 GiB + 1036 bytes; 64-bit offsets throughout */
        char pbig[512];
        int fd;
        int32_t header[256];
        int64_t ntok = ((int64_t)1 << 30) + 3;
        uint32_t tail[3] = {11, 22, 33};
        snprintf(pbig, sizeof pbig, "%s/big.bin", tmpdir);
        memset(header, 0, sizeof header);
        header[0] = 20240801; header[1] = 7; header[2] = (int32_t)ntok;
        fd = open(pbig, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0 && pwrite(fd, header, sizeof header, 0) == (ssize_t)sizeof header &&
            ftruncate(fd, (off_t)(1024 + ntok * 4)) == 0 &&
            pwrite(fd, tail, sizeof tail, (off_t)(1024 + (ntok - 3) * 4)) == (ssize_t)sizeof tail) {
            close(fd);
            AT_EQ_INT(accel_data_token_file_open(&acc, &tf, pbig), ACCEL_OK);
            AT_EQ_INT(tf.info.num_tokens, ntok);
            AT_EQ_INT(accel_data_token_file_read(&tf, ntok - 4, 4, out), ACCEL_OK);
            AT_EQ_INT(out[0], 0); AT_EQ_INT(out[1], 11); AT_EQ_INT(out[2], 22); AT_EQ_INT(out[3], 33);
            accel_data_token_file_deinit(&tf);
        } else {
            if (fd >= 0) close(fd);
            fprintf(stderr, "note: no sparse 4 GiB file here; that case was not run\n");
        }
        unlink(pbig);
    }
    {   /* the parser on raw bytes */
        uint8_t h[1024];
        accel_data_token_info info;
        uint32_t m = 20240520u;
        memset(h, 0, sizeof h);
        h[0] = (uint8_t)m; h[1] = (uint8_t)(m >> 8); h[2] = (uint8_t)(m >> 16); h[3] = (uint8_t)(m >> 24);
        h[4] = 1; h[8] = 4;
        AT_EQ_INT(accel_data_token_header_parse(&acc, h, sizeof h, 1032, &info), ACCEL_OK);
        AT_EQ_INT(info.num_tokens, 4);
        AT_EQ_INT(accel_data_token_header_parse(&acc, h, 100, 1032, &info), ACCEL_ERR_FORMAT);
        AT_EQ_INT(accel_data_token_header_parse(&acc, h, sizeof h, 1031, &info), ACCEL_ERR_FORMAT);
    }
    unlink(pbad);
    unlink(p1);
    unlink(p2);
    accel_shutdown(&acc);
}

static void test_seq_loader(void) {
    char p1[512], p2[512];
    const char *files[2];
    accel_data_seq_loader ld[3], r;
    accel_data_seq_desc d;
    int32_t buf[2 * 5], buf2[2 * 5];
    static unsigned char seen[2][64];
    int64_t k;
    int rank, row, got, ok = 1, disjoint = 1;
    snprintf(p1, sizeof p1, "%s/s1.bin", tmpdir);
    snprintf(p2, sizeof p2, "%s/s2.bin", tmpdir);
    write_shard(p1, 20240520, 1, 101, 2, 101, 1);    /* token i = i: (101-1)/4 = 25 windows of T=4 */
    write_shard(p2, 20240801, 7, 50, 4, 50, 1);      /* 12 windows; token i = i */
    files[0] = p1; files[1] = p2;
    memset(&d, 0, sizeof d);
    d.files = files; d.num_files = 2; d.batch_size = 2; d.seq_len = 4; d.num_processes = 3;
    for (rank = 0; rank < 3; ++rank) {
        d.process_index = rank;
        AT_EQ_INT(accel_data_seq_init(NULL, &ld[rank], &d), ACCEL_OK);
    }
    AT_EQ_INT(ld[0].num_windows, 37);
    AT_EQ_INT(accel_data_seq_len(&ld[0]), 6); /* 37 / (3*2) */
    /* sequential = llm.c's layout: rank r, row i of global batch k = tokens from ((k*P + r)*B + i)*T, T+1 of them */
    accel_data_seq_get_batch(&ld[1], 0, buf);
    AT_EQ_INT(buf[0], 8); AT_EQ_INT(buf[4], 12); AT_EQ_INT(buf[5], 12); AT_EQ_INT(buf[9], 16);
    accel_data_seq_get_batch(&ld[0], 4, buf); /* windows 24 (file 1: tokens 96..100) and 25 (file 2: 0..4) */
    AT_EQ_INT(buf[0], 96); AT_EQ_INT(buf[4], 100); AT_EQ_INT(buf[5], 0); AT_EQ_INT(buf[9], 4);
    /* shuffled: in an epoch the ranks' rows are disjoint windows; a window is (file, first token / 4) */
    for (rank = 0; rank < 3; ++rank) {
        accel_data_seq_deinit(&ld[rank]);
        d.process_index = rank; d.shuffle = 1; d.seed = 9;
        accel_data_seq_init(NULL, &ld[rank], &d);
        accel_data_seq_set_epoch(&ld[rank], 1);
    }
    memset(seen, 0, sizeof seen);
    for (rank = 0; rank < 3; ++rank) {
        int nb = 0;
        while (accel_data_seq_next(&ld[rank], buf, &got) == ACCEL_OK && got) {
            for (row = 0; row < 2; ++row) {
                int32_t *w = buf + row * 5;
                int j, key;
                for (j = 1; j < 5; ++j) if (w[j] != w[0] + j) ok = 0;
                if (w[0] % 4 != 0 || w[0] > 96) { ok = 0; continue; }
                key = w[0] / 4;
                /* file 2 has windows 0..11 only; a start both files share is told apart by the count */
                if (seen[0][key] == 0) seen[0][key] = 1;
                else if (seen[1][key] == 0 && key < 12) seen[1][key] = 1;
                else disjoint = 0;
            }
            ++nb;
        }
        AT_EQ_INT(nb, 6);
        AT_EQ_INT(accel_data_seq_epoch(&ld[rank]), 2);
    }
    AT_CHECK(ok);
    AT_CHECK_MSG(disjoint, "no window is given twice in an epoch");
    /* resumable: state round trip */
    {
        uint8_t st[ACCEL_DATA_SEQ_STATE_BYTES];
        size_t w;
        int same = 1, g2;
        accel_data_seq_set_epoch(&ld[2], 5);
        for (k = 0; k < 3; ++k) accel_data_seq_next(&ld[2], buf, &got);
        AT_EQ_INT(accel_data_seq_state_save(&ld[2], st, sizeof st, &w), ACCEL_OK);
        { /* the decoder `accel ckpt ls` prints from: the fields as the loader was configured, corruptions refused */
            accel_data_seq_state_info qi;
            uint8_t bad[ACCEL_DATA_SEQ_STATE_BYTES];
            static const struct { int at; uint8_t v; const char *says; } dmg[] = {
                {0, 'X', "not a sequence loader state"}, {4, 2, "unsupported version 2"},
                {36, 1, "corrupt (epoch"}, {55, 0x80, "corrupt (epoch"}, {32, 9, "process 9 of"},
                {20, 0, "B 0"}};
            int q;
            AT_EQ_INT(accel_data_seq_state_decode(NULL, st, w, &qi), ACCEL_OK);
            AT_EQ_INT(qi.epoch, 5);
            AT_EQ_INT(qi.position, 3);
            AT_EQ_INT(qi.process_index, 2);
            AT_EQ_INT(qi.num_processes, d.num_processes);
            AT_EQ_INT(qi.batch_size, d.batch_size);
            AT_EQ_INT(qi.seq_len, d.seq_len);
            AT_EQ_INT(qi.num_files, d.num_files);
            AT_EQ_INT((long long)qi.seed, (long long)d.seed);
            AT_EQ_INT((int)qi.flags, d.shuffle ? 16 : 0);
            AT_EQ_INT(accel_data_seq_state_decode(NULL, st, w - 1, &qi), ACCEL_ERR_FORMAT);
            for (q = 0; q < (int)(sizeof dmg / sizeof dmg[0]); ++q) {
                memcpy(bad, st, sizeof bad);
                bad[dmg[q].at] = dmg[q].v;
                AT_EQ_INT(accel_data_seq_state_decode(NULL, bad, sizeof bad, &qi), ACCEL_ERR_FORMAT);
                AT_CONTAINS(accel_last_error(NULL), dmg[q].says);
                AT_EQ_INT(accel_data_seq_state_load(&ld[2], bad, sizeof bad), ACCEL_ERR_FORMAT);
            }
        }
        d.process_index = 2; d.seed = 1;
        AT_EQ_INT(accel_data_seq_init(NULL, &r, &d), ACCEL_OK);
        AT_EQ_INT(accel_data_seq_state_load(&r, st, w), ACCEL_OK);
        AT_EQ_INT(accel_data_seq_epoch(&r), 5);
        AT_EQ_INT(accel_data_seq_set_epoch(&r, 5), ACCEL_OK); /* the same epoch before its first next(): kept */
        AT_EQ_INT(r.position, 3);
        for (;;) {
            accel_data_seq_next(&ld[2], buf, &got);
            accel_data_seq_next(&r, buf2, &g2);
            if (got != g2 || (got && memcmp(buf, buf2, sizeof buf))) same = 0;
            if (!got || !g2) break;
        }
        AT_CHECK(same);
        AT_EQ_INT(accel_data_seq_epoch(&r), 6);
        /* once iterated, set_epoch(same) restarts the epoch; another epoch starts at its first batch */
        AT_EQ_INT(accel_data_seq_next(&r, buf, &g2), ACCEL_OK);
        AT_EQ_INT(accel_data_seq_set_epoch(&r, 6), ACCEL_OK);
        AT_EQ_INT(r.position, 0);
        AT_EQ_INT(accel_data_seq_state_load(&r, st, w), ACCEL_OK);
        AT_EQ_INT(accel_data_seq_set_epoch(&r, 7), ACCEL_OK);
        AT_EQ_INT(r.position, 0);
        {   /* accel_state_save_fn: the size query */
            size_t need = 0;
            AT_EQ_INT(accel_data_seq_state_save(&r, NULL, 0, &need), ACCEL_OK);
            AT_EQ_INT(need, ACCEL_DATA_SEQ_STATE_BYTES);
        }
        /* the documented loop with a restart after any batch gives the uninterrupted sequence */
        {
            int64_t stop, total = 3 * accel_data_seq_len(&r);
            int bad = 0;
            static int32_t ref[64 * 10], out[64 * 10];
            int nref = 0;
            for (stop = 0; stop <= total; ++stop) {
                accel_data_seq_loader x;
                int64_t seen = 0;
                int nout = 0;
                AT_EQ_INT(accel_data_seq_init(NULL, &x, &d), ACCEL_OK);
                while (accel_data_seq_epoch(&x) < 3) {
                    accel_data_seq_set_epoch(&x, accel_data_seq_epoch(&x));
                    while (accel_data_seq_next(&x, buf, &g2) == ACCEL_OK && g2) {
                        int32_t *dst = stop ? out : ref;
                        int *nd = stop ? &nout : &nref;
                        if (*nd < 64 * 10) dst[(*nd)++] = buf[0] + 100000 * (int32_t)accel_data_seq_epoch(&x);
                        if (++seen == stop) {
                            uint8_t s2[ACCEL_DATA_SEQ_STATE_BYTES];
                            size_t w2 = 0;
                            accel_data_seq_state_save(&x, s2, sizeof s2, &w2);
                            accel_data_seq_deinit(&x);
                            AT_EQ_INT(accel_data_seq_init(NULL, &x, &d), ACCEL_OK);
                            AT_EQ_INT(accel_data_seq_state_load(&x, s2, w2), ACCEL_OK);
                            break;
                        }
                    }
                }
                accel_data_seq_deinit(&x);
                if (stop && (nout != nref || memcmp(out, ref, sizeof(int32_t) * (size_t)nref))) bad++;
            }
            AT_CHECK(nref == 3 * accel_data_seq_len(&r));
            AT_CHECK_MSG(bad == 0, "seq loader: a resumed documented loop yields the uninterrupted sequence");
        }
        accel_data_seq_deinit(&r);
        d.batch_size = 1;
        AT_EQ_INT(accel_data_seq_init(NULL, &r, &d), ACCEL_OK);
        AT_EQ_INT(accel_data_seq_state_load(&r, st, w), ACCEL_ERR_MISMATCH);
        accel_data_seq_deinit(&r);
    }
    for (rank = 0; rank < 3; ++rank) accel_data_seq_deinit(&ld[rank]);
    {   /* a bad file fails init cleanly */
        const char *bad[2];
        bad[0] = p1; bad[1] = "/nonexistent/x.bin";
        d.files = bad;
        AT_EQ_INT(accel_data_seq_init(NULL, &r, &d), ACCEL_ERR_NOT_FOUND);
    }
    unlink(p1);
    unlink(p2);
}

/* Rows longer than the loader's 64-byte conversion lines and its read-ahead distance (2048 bytes), odd lengths,
   rows that end in one file while the next row is in the other, uint16 and uint32 files, sequential and shuffled:
   every token against the formula the files were written with (window w -> file, first token; the window of a
   shuffled row from accel_data_sampler_index, which ref_permutation.py checks). */
static void test_seq_long_rows(void) {
    char p1[512], p2[512];
    const char *files[2];
    accel_data_seq_loader ld;
    accel_data_seq_desc d;
    static int32_t buf[3 * 1501];
    const int64_t ntok[2] = {7001, 5000}, vocab[2] = {50257, 128256}, mul[2] = {7, 13};
    int t, sh, rank, bad = 0, rows = 0;
    at_context = "seq loader, long rows";
    snprintf(p1, sizeof p1, "%s/long1.bin", tmpdir);
    snprintf(p2, sizeof p2, "%s/long2.bin", tmpdir);
    write_shard(p1, 20240520, 1, 7001, 2, 7001, 7);
    write_shard(p2, 20240801, 7, 5000, 4, 5000, 13);
    files[0] = p1; files[1] = p2;
    for (t = 0; t < 2; ++t)
        for (sh = 0; sh < 2; ++sh)
            for (rank = 0; rank < 2; ++rank) {
                const int T = t ? 1500 : 333;
                int64_t k, w1 = (ntok[0] - 1) / T;
                memset(&d, 0, sizeof d);
                d.files = files; d.num_files = 2; d.batch_size = 3; d.seq_len = T; d.num_processes = 2;
                d.process_index = rank; d.shuffle = sh; d.seed = 3;
                if (accel_data_seq_init(NULL, &ld, &d) != ACCEL_OK) { AT_CHECK(0); continue; }
                AT_EQ_INT(ld.num_windows, w1 + (ntok[1] - 1) / T);
                for (k = 0; k < accel_data_seq_len(&ld); ++k) {
                    int row;
                    AT_EQ_INT(accel_data_seq_get_batch(&ld, k, buf), ACCEL_OK);
                    for (row = 0; row < 3; ++row) {
                        int64_t w = accel_data_sampler_index(&ld.sampler, (k * 2 + rank) * 3 + row), j;
                        int fi = w >= w1;
                        int64_t first = (fi ? w - w1 : w) * T;
                        if (!sh && w != (k * 2 + rank) * 3 + row) bad++;
                        for (j = 0; j <= T; ++j)
                            if (buf[row * (T + 1) + j] != (int32_t)(((first + j) * mul[fi]) % vocab[fi])) { bad++; break; }
                        rows++;
                    }
                }
                accel_data_seq_deinit(&ld);
            }
    AT_EQ_INT(rows, 84); /* 2 ranks x 2 orders x (6 batches of T = 333 + 1 of T = 1500) x 3 rows */
    AT_EQ_INT(bad, 0);
    at_context = "";
}

static void test_stager_cpu(void) {
    accel_data_stager st;
    void *h0, *h1, *d0, *d1;
    AT_EQ_INT(accel_data_stager_init(NULL, &st, 64), ACCEL_OK);
    AT_EQ_INT(accel_data_stager_host(&st, &h0), ACCEL_OK);
    memset(h0, 7, 64);
    AT_EQ_INT(accel_data_stager_submit(&st, &d0), ACCEL_OK);
    AT_CHECK(d0 == h0); /* CPU: copy-free */
    AT_EQ_INT(accel_data_stager_host(&st, &h1), ACCEL_OK);
    AT_CHECK(h1 != h0); /* double-buffered: filling the next batch leaves the current one intact */
    memset(h1, 9, 64);
    AT_EQ_INT(accel_data_stager_submit(&st, &d1), ACCEL_OK);
    AT_EQ_INT(((unsigned char *)d0)[63], 7);
    AT_EQ_INT(((unsigned char *)d1)[0], 9);
    accel_data_stager_deinit(&st);
    accel_data_stager_deinit(&st); /* idempotent */
    AT_EQ_INT(accel_data_stager_init(NULL, &st, 0), ACCEL_ERR_INVALID_ARGUMENT);
}

/* Every host allocation of the module goes through acc's allocator (a counting one sees them all and gets them all
   back); a failing allocator gives errors, not crashes. */
typedef struct counting { long allocs, frees, fail_after; } counting;
static void *count_alloc(size_t n, void *u) {
    counting *c = (counting *)u;
    if (c->fail_after >= 0 && c->allocs >= c->fail_after) return NULL;
    c->allocs++;
    return malloc(n);
}
static void count_free(void *p, void *u) {
    ((counting *)u)->frees++;
    free(p);
}

static void test_allocators(void) {
    char p1[512];
    const char *files[1];
    counting c;
    accel acc;
    accel_desc ad;
    accel_data_stager st;
    accel_data_seq_loader ld;
    accel_data_seq_desc d;
    long base, fbase, k;
    snprintf(p1, sizeof p1, "%s/alloc.bin", tmpdir);
    write_shard(p1, 20240520, 1, 101, 2, 101, 1);
    files[0] = p1;
    memset(&c, 0, sizeof c);
    c.fail_after = -1;
    memset(&ad, 0, sizeof ad);
    ad.no_mpi = 1; ad.cpu = 1; ad.log_fn = quiet_log;
    ad.host_allocator.alloc = count_alloc; ad.host_allocator.free = count_free; ad.host_allocator.user_data = &c;
    AT_EQ_INT(accel_init(&acc, &ad), ACCEL_OK);
    base = c.allocs;
    fbase = c.frees;
    AT_EQ_INT(accel_data_stager_init(&acc, &st, 128), ACCEL_OK);
    AT_EQ_INT(c.allocs - base, 2); /* the two staging buffers (pinned on a device; host memory on the CPU) */
    accel_data_stager_deinit(&st);
    AT_EQ_INT(c.frees - fbase, 2);
    memset(&d, 0, sizeof d);
    d.files = files; d.num_files = 1; d.batch_size = 2; d.seq_len = 4;
    base = c.allocs;
    fbase = c.frees;
    AT_EQ_INT(accel_data_seq_init(&acc, &ld, &d), ACCEL_OK);
    AT_CHECK(c.allocs - base >= 2);
    accel_data_seq_deinit(&ld);
    AT_EQ_INT(c.allocs - base, c.frees - fbase);
    /* every allocation failing in turn: an error, nothing leaked, no crash */
    for (k = 0; k < 4; ++k) {
        long before_a = c.allocs, before_f = c.frees;
        accel_result r1, r2;
        c.fail_after = c.allocs + k;
        r1 = accel_data_stager_init(&acc, &st, 128);
        if (r1 == ACCEL_OK) accel_data_stager_deinit(&st);
        else AT_CONTAINS(accel_last_error(&acc), "stager");
        c.fail_after = c.allocs + k;
        r2 = accel_data_seq_init(&acc, &ld, &d);
        if (r2 == ACCEL_OK) accel_data_seq_deinit(&ld);
        else AT_EQ_INT(r2, ACCEL_ERR_OUT_OF_MEMORY);
        if (k == 0) { AT_EQ_INT(r1, ACCEL_ERR_OUT_OF_MEMORY); AT_EQ_INT(r2, ACCEL_ERR_OUT_OF_MEMORY); }
        AT_EQ_INT(c.allocs - before_a, c.frees - before_f);
    }
    c.fail_after = -1;
    accel_shutdown(&acc);
    unlink(p1);
}

/* Resume on another number of processes (issue 29): the saving run's position becomes global samples consumed, and
   the new run starts at global batch floor(consumed / its global batch). Checked long-hand against the epoch's
   stream, taken from an uninterrupted one-process run: global position q is stream[q] below N and the padding
   stream[(q - N) mod min(N, G)] past it (the SHARDING closed form). */
static void stream_of(int64_t n, int64_t b, uint64_t seed, int64_t epoch, int64_t *stream) {
    accel_data_shard one;
    accel_data_shard_desc d = mk_prepare(n, b, 1, 0, 0, 1, 0, 0);
    int64_t buf[64], cnt = 0, at = 0;
    d.shuffle = 1;
    d.seed = seed;
    AT_EQ_INT(accel_data_shard_init(NULL, &one, &d), ACCEL_OK);
    AT_EQ_INT(accel_data_shard_set_epoch(&one, epoch), ACCEL_OK);
    while (accel_data_shard_next(&one, buf, &cnt) == ACCEL_OK && cnt > 0) {
        memcpy(stream + at, buf, sizeof(int64_t) * (size_t)cnt);
        at += cnt;
    }
    AT_EQ_INT(at, n);
}
static void test_resume_world_size(void) {
    enum { N = 50, B = 4 };
    int64_t stream[N], buf[64], cnt;
    uint8_t st[ACCEL_DATA_SHARD_STATE_BYTES];
    size_t w = 0;
    int r, k, j;
    /* 2 processes -> 1: each of the 2 consumed 3 batches (global positions 0..23); 1 process resumes at 24/4 = 6 */
    {
        accel_data_shard old[2], neu;
        accel_data_shard_desc d;
        int64_t seen = 0;
        stream_of(N, B, 9, 1, stream);
        for (r = 0; r < 2; ++r) {
            d = mk_prepare(N, B, 2, r, 0, 1, 0, 0);
            d.shuffle = 1; d.seed = 9;
            AT_EQ_INT(accel_data_shard_init(NULL, &old[r], &d), ACCEL_OK);
            AT_EQ_INT(accel_data_shard_set_epoch(&old[r], 1), ACCEL_OK);
        }
        for (k = 0; k < 3; ++k)
            for (r = 0; r < 2; ++r) { /* the saving run saw stream[k*8 + r*4 ..] (its own sharding, long-hand) */
                AT_EQ_INT(accel_data_shard_next(&old[r], buf, &cnt), ACCEL_OK);
                AT_EQ_INT(cnt, B);
                for (j = 0; j < B; ++j) AT_EQ_INT(buf[j], stream[k * 8 + r * 4 + j]);
            }
        AT_EQ_INT(accel_data_shard_state_save(&old[0], st, sizeof st, &w), ACCEL_OK);
        d = mk_prepare(N, B, 1, 0, 0, 1, 0, 0);
        d.shuffle = 1; d.seed = 9;
        AT_EQ_INT(accel_data_shard_init(NULL, &neu, &d), ACCEL_OK);
        AT_EQ_INT(accel_data_shard_state_load(&neu, st, w), ACCEL_OK);
        AT_EQ_INT(accel_data_shard_epoch(&neu), 1);
        AT_EQ_INT(neu.position, 6);
        seen = 24;
        while (accel_data_shard_next(&neu, buf, &cnt) == ACCEL_OK && cnt > 0) {
            for (j = 0; j < cnt; ++j) AT_EQ_INT(buf[j], stream[seen + j]);
            seen += cnt;
        }
        AT_EQ_INT(seen, N); /* the rest of the epoch, nothing skipped, nothing twice */
        AT_EQ_INT(accel_data_shard_epoch(&neu), 2);
        /* a complete saved epoch stays complete */
        for (r = 0; r < 2; ++r)
            while (accel_data_shard_next(&old[r], buf, &cnt) == ACCEL_OK && cnt > 0 && old[r].position < 7) {}
        AT_EQ_INT(old[0].position, old[0].num_batches);
        AT_EQ_INT(accel_data_shard_state_save(&old[0], st, sizeof st, &w), ACCEL_OK);
        AT_EQ_INT(accel_data_shard_init(NULL, &neu, &d), ACCEL_OK);
        AT_EQ_INT(accel_data_shard_state_load(&neu, st, w), ACCEL_OK);
        AT_EQ_INT(accel_data_shard_next(&neu, buf, &cnt), ACCEL_OK);
        AT_EQ_INT(cnt, 0); /* the epoch ends at once */
    }
    /* 1 process -> 3: 5 batches consumed (positions 0..19); 3 processes (global batch 12) resume at floor(20/12) = 1,
       so positions 12..19 are seen again and none is skipped; every batch checked to the end (padding included) */
    {
        accel_data_shard old, neu[3];
        accel_data_shard_desc d = mk_prepare(N, B, 1, 0, 0, 1, 0, 0);
        stream_of(N, B, 5, 0, stream);
        d.shuffle = 1; d.seed = 5;
        AT_EQ_INT(accel_data_shard_init(NULL, &old, &d), ACCEL_OK);
        for (k = 0; k < 5; ++k) AT_EQ_INT(accel_data_shard_next(&old, buf, &cnt), ACCEL_OK);
        AT_EQ_INT(accel_data_shard_state_save(&old, st, sizeof st, &w), ACCEL_OK);
        for (r = 0; r < 3; ++r) {
            int64_t kk = 1;
            d = mk_prepare(N, B, 3, r, 0, 1, 0, 0);
            d.shuffle = 1; d.seed = 5;
            AT_EQ_INT(accel_data_shard_init(NULL, &neu[r], &d), ACCEL_OK);
            AT_EQ_INT(accel_data_shard_state_load(&neu[r], st, w), ACCEL_OK);
            while (accel_data_shard_next(&neu[r], buf, &cnt) == ACCEL_OK && cnt > 0) {
                AT_EQ_INT(cnt, B); /* even_batches: every batch full */
                for (j = 0; j < B; ++j) {
                    int64_t q = kk * 12 + r * 4 + j;
                    AT_EQ_INT(buf[j], q < N ? stream[q] : stream[(q - N) % 12]);
                }
                ++kk;
            }
            AT_EQ_INT(kk, 5); /* batches 1..4 of ceil(50/12) = 5 */
        }
    }
}

int main(void) {
    const char *t = getenv("TMPDIR");
    accel_set_default_logger(quiet_log, NULL);
    snprintf(tmpdir, sizeof tmpdir, "%s/accel_data_test_XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 1; }
    test_worked_cases();
    test_one_process();
    test_errors();
    test_grid();
    test_sampler();
    test_bookkeeping();
    test_loader_list();
    test_epochs_resume();
    test_resume_world_size();
    test_token_files();
    test_seq_loader();
    test_seq_long_rows();
    test_stager_cpu();
    test_allocators();
    rmdir(tmpdir);
    return at_finish("data-unit");
}
