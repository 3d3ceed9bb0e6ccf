/* Unit tests of accel_data.h: SEMANTICS.md's worked sharding cases, grid properties (coverage, duplicates only where
   even_batches pads, equal lengths, lengths == iteration, skip == stream minus k), the random sampler (a permutation,
   a function of (seed, epoch) only, world-size independent), GradientState bookkeeping and gather_for_metrics rows,
   state round trips, llm.c token shards (good GPT-2/Llama-3 files written here with plain fwrite; corrupt, truncated,
   wrong magic; a sparse > 4 GiB file), the sequence loader and the CPU stager. The exact Accelerate iteration is
   checked separately against a literal Python transcription of Accelerate's generators (ref_shards.py). */
#include "accel_data.h"
#include "accel_test.h"
#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

static void quiet_log(void *u, accel_log_level l, const char *m) { (void)u; (void)l; (void)m; }

/* ------------------------------------------------------------------------------------------ helpers */
static accel_data_shard_desc mk(int64_t n, int64_t b, int P, int p, int split, int even, int drop, int iterable) {
    accel_data_shard_desc d;
    memset(&d, 0, sizeof d);
    d.dataset_len = n; d.batch_size = b; d.num_processes = P; d.process_index = p;
    d.split_batches = split ? ACCEL_ON : ACCEL_OFF;
    d.even_batches = even ? ACCEL_ON : ACCEL_OFF;
    d.drop_last = drop; d.iterable = iterable;
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
    {   /* P=1 pads the short batch: [0,1],[2,3],[4,0] */
        const char *w[] = {"[0,1][2,3][4,0]"};
        expect_shards("N5B2P1", mk(5, 2, 1, 0, 0, 1, 0, 0), w);
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

static void test_errors(void) {
    accel_data_shard sh;
    accel_data_shard_desc d;
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
    d.even_batches = 5;
    AT_EQ_INT(accel_data_shard_init(NULL, &sh, &d), ACCEL_ERR_INVALID_ARGUMENT);
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
                for (flags = 0; flags < 16; ++flags) {
                    int split = flags & 1, even = (flags >> 1) & 1, drop = (flags >> 2) & 1, it = (flags >> 3) & 1;
                    int64_t lens[5], total = 0, G, i, p, dup = 0, expect_total;
                    int pads = !drop && (even || it);
                    accel_data_shard_desc d = mk(n, b, (int)P, 0, split, even, drop, it);
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
                        if (sh.epoch != 1) bad++;
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
                    if (even || it || drop)                    /* even_batches: equal lengths */
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
    AT_CHECK(cases > 50000);
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
        d = mk(103, 4, 3, 1, 0, 1, 0, 0);
        d.shuffle = 1; d.seed = 77;
        accel_data_shard_init(&acc, &a, &d);
        accel_data_shard_set_epoch(&a, 2);
        for (k = 0; k < 5; ++k) accel_data_shard_next(&a, ba, &ca);
        AT_EQ_INT(accel_data_shard_state_save(&a, st, 10, &w), ACCEL_ERR_INVALID_ARGUMENT);
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
        AT_EQ_INT(b2.epoch, 3);
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
            d2 = d; d2.num_processes = 4;
            accel_data_shard_init(&acc, &c, &d2);
            AT_EQ_INT(accel_data_shard_state_load(&c, st, w), ACCEL_ERR_MISMATCH);
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
    AT_EQ_INT(accel_data_token_file_read(&acc, &tf, 990, 10, out), ACCEL_OK);
    AT_EQ_INT(out[0], (990 * 7) % 50257);
    AT_EQ_INT(out[9], (999 * 7) % 50257);
    AT_EQ_INT(accel_data_token_file_read(&acc, &tf, 995, 10, out), ACCEL_ERR_INVALID_ARGUMENT);
    {   /* every token, through the vectorized widening at odd offsets and lengths */
        static int32_t all[1000];
        int64_t first, i;
        int okv = 1;
        for (first = 0; first < 9; ++first) {
            AT_EQ_INT(accel_data_token_file_read(&acc, &tf, first, 1000 - first - (first & 3), all), ACCEL_OK);
            for (i = 0; i < 1000 - first - (first & 3); ++i)
                if (all[i] != (int32_t)(((first + i) * 7) % 50257)) okv = 0;
        }
        AT_CHECK_MSG(okv, "uint16 tokens widen exactly");
    }
    accel_data_token_file_close(&tf);
    AT_EQ_INT(accel_data_token_file_open(&acc, &tf, p2), ACCEL_OK);
    AT_EQ_INT(tf.info.token_bytes, 4);
    AT_EQ_INT(tf.info.num_tokens, 500);
    AT_EQ_INT(accel_data_token_file_read(&acc, &tf, 499, 1, out), ACCEL_OK);
    AT_EQ_INT(out[0], (int32_t)((499u * 131u) % 128256u));
    {
        static int32_t all[500];
        int64_t i;
        int okv = 1;
        AT_EQ_INT(accel_data_token_file_read(&acc, &tf, 3, 497, all), ACCEL_OK);
        for (i = 0; i < 497; ++i)
            if (all[i] != (int32_t)((uint32_t)((3 + i) * 131) % 128256u)) okv = 0;
        AT_CHECK_MSG(okv, "uint32 tokens read exactly");
    }
    accel_data_token_file_close(&tf);
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
    accel_data_token_file_close(&tf);
    AT_EQ_INT(accel_data_token_file_open(&acc, &tf, "/nonexistent/accel/x.bin"), ACCEL_ERR_NOT_FOUND);
    AT_EQ_INT(accel_data_token_file_open(&acc, &tf, tmpdir), ACCEL_ERR_FORMAT); /* a directory */
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
            AT_EQ_INT(accel_data_token_file_read(&acc, &tf, ntok - 4, 4, out), ACCEL_OK);
            AT_EQ_INT(out[0], 0); AT_EQ_INT(out[1], 11); AT_EQ_INT(out[2], 22); AT_EQ_INT(out[3], 33);
            accel_data_token_file_close(&tf);
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
        accel_data_seq_free(&ld[rank]);
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
        AT_EQ_INT(ld[rank].epoch, 2);
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
        d.process_index = 2; d.seed = 1;
        AT_EQ_INT(accel_data_seq_init(NULL, &r, &d), ACCEL_OK);
        AT_EQ_INT(accel_data_seq_state_load(&r, st, w), ACCEL_OK);
        for (;;) {
            accel_data_seq_next(&ld[2], buf, &got);
            accel_data_seq_next(&r, buf2, &g2);
            if (got != g2 || (got && memcmp(buf, buf2, sizeof buf))) same = 0;
            if (!got || !g2) break;
        }
        AT_CHECK(same);
        accel_data_seq_free(&r);
        d.batch_size = 1;
        AT_EQ_INT(accel_data_seq_init(NULL, &r, &d), ACCEL_OK);
        AT_EQ_INT(accel_data_seq_state_load(&r, st, w), ACCEL_ERR_MISMATCH);
        accel_data_seq_free(&r);
    }
    for (rank = 0; rank < 3; ++rank) accel_data_seq_free(&ld[rank]);
    {   /* a bad file fails init cleanly */
        const char *bad[2];
        bad[0] = p1; bad[1] = "/nonexistent/x.bin";
        d.files = bad;
        AT_EQ_INT(accel_data_seq_init(NULL, &r, &d), ACCEL_ERR_NOT_FOUND);
    }
    unlink(p1);
    unlink(p2);
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
    accel_data_stager_free(&st);
    AT_EQ_INT(accel_data_stager_init(NULL, &st, 0), ACCEL_ERR_INVALID_ARGUMENT);
}

int main(void) {
    const char *t = getenv("TMPDIR");
    accel_set_default_logger(quiet_log, NULL);
    snprintf(tmpdir, sizeof tmpdir, "%s/accel_data_test_XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 1; }
    test_worked_cases();
    test_errors();
    test_grid();
    test_sampler();
    test_bookkeeping();
    test_token_files();
    test_seq_loader();
    test_stager_cpu();
    rmdir(tmpdir);
    return at_finish("data-unit");
}
