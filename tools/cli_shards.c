/* `accel shards` — which dataset indices each process sees (accel_data.h), as one JSON object:
     {"shards": [[[i, ...], ...], ...], "lengths": [n0, ...]}
   shards[p] is the list of process p's batches for one epoch; lengths[p] the number of batches it really gets.
   It models Accelerate's BatchSamplerShard / IterableDatasetShard themselves (desc.batch_sampler_shard: they shard
   and pad with one process too); --prepare shows what Accelerator.prepare() hands each process instead (no sharding
   with one process, prepare()'s split_batches check first), i.e. accel_data_shard's default.
   Exit codes: 0 ok, 1 failure, 2 usage error / invalid combination (with Accelerate's ValueError text). */
#include "accel_data.h"
#include "cli.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void shards_usage(FILE *f) {
    fprintf(f,
            "usage: accel shards --dataset-len N --batch-size B --num-processes P [--split-batches]\n"
            "                    [--even-batches 0|1] [--drop-last] [--iterable] [--shuffle --seed S] [--epoch E]\n"
            "                    [--prepare]\n"
            "  Prints {\"shards\": [[[i, ...], ...], ...], \"lengths\": [n0, ...]}: for each process the batches of\n"
            "  dataset indices it sees in one epoch (Accelerate's BatchSamplerShard, or with --iterable\n"
            "  IterableDatasetShard + the per-process DataLoader), and how many batches it really gets.\n"
            "  --even-batches defaults to 1 as in Accelerate. The sampler is sequential unless --shuffle.\n"
            "  --prepare: what Accelerator.prepare() hands each process instead of the shard classes (with one\n"
            "  process no sharding: the last batch stays short; prepare()'s split_batches check first).\n");
}

static void shards_quiet_log(void *user, accel_log_level level, const char *message) {
    (void)user; (void)level; (void)message;
}

static int shards_int(const char *opt, const char *s, long long lo, long long hi, long long *out) {
    char *end = NULL;
    long long v;
    if (!s) { fprintf(stderr, "accel shards: %s needs a value\n", opt); return 0; }
    errno = 0;
    v = strtoll(s, &end, 10);
    if (errno || !end || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "accel shards: %s: '%s' is not an integer in [%lld, %lld]\n", opt, s, lo, hi);
        return 0;
    }
    *out = v;
    return 1;
}

int cli_shards(int argc, char **argv) {
    long long n = -1, b = -1, P = -1, even = 1, seed = 0, epoch = 0;
    int split = 0, drop = 0, iterable = 0, shuffle = 0, prepare = 0, i, p;
    int64_t *buf = NULL, total = 0;
    accel_data_shard sh;
    accel_data_shard_desc d;
    for (i = 1; i < argc; ++i) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { shards_usage(stdout); return 0; }
        else if (!strcmp(a, "--dataset-len")) { if (!shards_int(a, v, 0, (long long)1 << 40, &n)) return 2; ++i; }
        else if (!strcmp(a, "--batch-size")) { if (!shards_int(a, v, 1, 1 << 30, &b)) return 2; ++i; }
        else if (!strcmp(a, "--num-processes")) { if (!shards_int(a, v, 1, 1 << 20, &P)) return 2; ++i; }
        else if (!strcmp(a, "--even-batches")) { if (!shards_int(a, v, 0, 1, &even)) return 2; ++i; }
        else if (!strcmp(a, "--seed")) { if (!shards_int(a, v, 0, 0x7fffffffffffffffLL, &seed)) return 2; ++i; }
        else if (!strcmp(a, "--epoch")) { if (!shards_int(a, v, 0, 0x7fffffffffffffffLL, &epoch)) return 2; ++i; }
        else if (!strcmp(a, "--split-batches")) split = 1;
        else if (!strcmp(a, "--drop-last")) drop = 1;
        else if (!strcmp(a, "--iterable")) iterable = 1;
        else if (!strcmp(a, "--shuffle")) shuffle = 1;
        else if (!strcmp(a, "--prepare")) prepare = 1;
        else { fprintf(stderr, "accel shards: unknown option '%s'\n", a); shards_usage(stderr); return 2; }
    }
    if (n < 0 || b < 1 || P < 1) {
        fprintf(stderr, "accel shards: --dataset-len, --batch-size and --num-processes are required\n");
        shards_usage(stderr);
        return 2;
    }
    accel_set_default_logger(shards_quiet_log, NULL);
    memset(&d, 0, sizeof d);
    d.dataset_len = n;
    d.batch_size = b;
    d.num_processes = (int)P;
    d.split_batches = split ? ACCEL_ON : ACCEL_OFF;
    d.no_even_batches = !even;
    d.batch_sampler_shard = !prepare; /* the shard classes, P = 1 included (docs/semantics.md §1) */
    d.drop_last = drop;
    d.iterable = iterable;
    d.shuffle = shuffle;
    d.seed = (uint64_t)seed;
    /* validate once (process 0) so an invalid combination is a usage error */
    if (accel_data_shard_init(NULL, &sh, &d) != ACCEL_OK) {
        fprintf(stderr, "accel shards: ValueError: %s\n", accel_last_error(NULL));
        return 2;
    }
    for (p = 0; p < (int)P; ++p) {
        d.process_index = p;
        if (accel_data_shard_init(NULL, &sh, &d) != ACCEL_OK) break;
        total += accel_data_shard_len(&sh) * accel_data_shard_batch_size(&sh);
    }
    if (total > ((int64_t)1 << 31)) {
        fprintf(stderr, "accel shards: %lld indices are too many to print\n", (long long)total);
        return 2;
    }
    buf = (int64_t *)malloc(sizeof(int64_t) * (size_t)(accel_data_shard_batch_size(&sh) > 0 ? accel_data_shard_batch_size(&sh) : 1));
    if (!buf) { fprintf(stderr, "accel shards: out of memory\n"); return 1; }
    fputs("{\"shards\": [", stdout);
    for (p = 0; p < (int)P; ++p) {
        int64_t k, j, count;
        d.process_index = p;
        if (accel_data_shard_init(NULL, &sh, &d) != ACCEL_OK || accel_data_shard_set_epoch(&sh, epoch) != ACCEL_OK) {
            fprintf(stderr, "\naccel shards: %s\n", accel_last_error(NULL));
            free(buf);
            return 1;
        }
        fputs(p ? ", [" : "[", stdout);
        for (k = 0; k < accel_data_shard_len(&sh); ++k) {
            if (accel_data_shard_get_batch(&sh, k, buf, &count) != ACCEL_OK) {
                fprintf(stderr, "\naccel shards: %s\n", accel_last_error(NULL));
                free(buf);
                return 1;
            }
            fputs(k ? ", [" : "[", stdout);
            for (j = 0; j < count; ++j) printf(j ? ", %lld" : "%lld", (long long)buf[j]);
            fputc(']', stdout);
        }
        fputc(']', stdout);
    }
    fputs("], \"lengths\": [", stdout);
    for (p = 0; p < (int)P; ++p) {
        d.process_index = p;
        (void)accel_data_shard_init(NULL, &sh, &d);
        printf(p ? ", %lld" : "%lld", (long long)accel_data_shard_len(&sh));
    }
    fputs("]}\n", stdout);
    free(buf);
    return fflush(stdout) == 0 ? 0 : 1;
}
