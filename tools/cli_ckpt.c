/* `accel ckpt ls|verify|plan` and `accel size` (accel_safetensors.h, accel_ckpt.h).
     accel ckpt ls FILE|DIR        tensors (name, dtype, shape, bytes, offsets) and metadata of a safetensors file;
                                   for a directory: its index, its completion marker and every .safetensors in it;
                                   a checkpoint (or a folder of checkpoint_<N>) is verified: each one is "complete,
                                   checksums OK", INCOMPLETE or DAMAGED with the reason, the one load_state(NULL)
                                   loads is marked, and any incomplete or damaged one makes the exit code 1; one
                                   checkpoint's state files (random_states_<r>.bin, sampler.bin, scaler.bin,
                                   optim_state.bin, loader.bin) are decoded in words by their modules' decoders
     accel ckpt verify DIR         completeness (marker, sizes) and XXH64 checksums of a checkpoint directory
     accel ckpt plan --max-shard-size SIZE name:bytes …
                                   the save_model sharding plan as one JSON object, writing nothing
     accel ckpt merge DIR OUT [--name NAME] [--max-shard-size SIZE]
                                   a sharded ZeRO-3 checkpoint (every rank's NAME_<rank>.bin, NAME fsdp_state by
                                   default) → OUT/model.safetensors, or shards + index above SIZE (Accelerate's
                                   merge-weights): the checkpoint verified first (marker, sizes, checksums), then
                                   accel_zero_fsdp_merge (accel_zero.h) streams the values with bounded memory
     accel size STRING             the byte count of a size string (docs/semantics.md policy 6)
   Exit codes: 0 ok, 1 failure (bad file, failed check), 2 usage error (including an invalid size). */
#include "accel_safetensors.h"
#include "accel_amp.h"
#include "accel_ckpt.h"
#include "accel_data.h"
#include "accel_optim.h"
#include "accel_zero.h"
#include "cli.h"
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void quiet_log(void *user, accel_log_level level, const char *msg) { (void)user; (void)level; (void)msg; }

/* JSON string (ASCII-only output, Python json.dumps escaping). */
void cli_put_json_str(FILE *f, const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    fputc('"', f);
    while (*p) {
        unsigned c = *p, cp = c;
        int extra = 0;
        if (c >= 0xF0) { cp = c & 0x07; extra = 3; }
        else if (c >= 0xE0) { cp = c & 0x0F; extra = 2; }
        else if (c >= 0xC0) { cp = c & 0x1F; extra = 1; }
        ++p;
        while (extra-- > 0 && (*p & 0xC0) == 0x80) cp = (cp << 6) | (*p++ & 0x3F);
        if (cp == '"') fputs("\\\"", f);
        else if (cp == '\\') fputs("\\\\", f);
        else if (cp == '\n') fputs("\\n", f);
        else if (cp == '\r') fputs("\\r", f);
        else if (cp == '\t') fputs("\\t", f);
        else if (cp == '\b') fputs("\\b", f);
        else if (cp == '\f') fputs("\\f", f);
        else if (cp >= 0x20 && cp < 0x7F) fputc((int)cp, f);
        else if (cp >= 0x10000) {
            unsigned v = cp - 0x10000;
            fprintf(f, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
        } else fprintf(f, "\\u%04x", cp);
    }
    fputc('"', f);
}

/* n bytes as they are, except U+0000 (which a metadata key or value may contain), shown as \u0000 */
static void put_bytes(const char *s, size_t n) {
    size_t i;
    for (i = 0; i < n; ++i) {
        if (s[i]) putchar(s[i]);
        else fputs("\\u0000", stdout);
    }
}

static void print_shape(const accel_st_entry *e) {
    int d;
    printf("[");
    for (d = 0; d < e->ndim; ++d) printf("%s%lld", d ? ", " : "", (long long)e->shape[d]);
    printf("]");
}

static int ls_file(const char *path) {
    accel_st_file *f = NULL;
    int i;
    unsigned long long total = 0;
    if (accel_st_file_open(NULL, path, &f) != ACCEL_OK) {
        fprintf(stderr, "accel ckpt ls: %s\n", accel_last_error(NULL));
        return 1;
    }
    printf("%s: %d tensors\n", path, accel_st_file_count(f));
    for (i = 0; i < accel_st_file_metadata_count(f); ++i) {
        const char *k, *v;
        size_t kn = 0, vn = 0;
        accel_st_file_metadata(f, i, &k, &kn, &v, &vn);
        printf("  metadata ");
        put_bytes(k, kn);
        printf(" = ");
        put_bytes(v, vn);
        printf("\n");
    }
    for (i = 0; i < accel_st_file_count(f); ++i) {
        const accel_st_entry *e = accel_st_file_entry(f, i);
        printf("  %-40s %-8s ", e->name, accel_dtype_name(e->dtype));
        print_shape(e);
        printf(" %llu bytes [%llu, %llu)\n", (unsigned long long)(e->end - e->begin), (unsigned long long)e->begin,
               (unsigned long long)e->end);
        total += e->end - e->begin;
    }
    printf("  total %llu bytes\n", total);
    accel_st_file_destroy(f);
    return 0;
}

char *cli_dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = (char *)malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* "checkpoint_<digits>" (automatic naming) → its number, else -1 */
static long ckpt_number(const char *name) {
    const char *p = name + 11;
    long v = 0;
    if (strncmp(name, "checkpoint_", 11) || !*p) return -1;
    for (; *p; ++p) {
        if (*p < '0' || *p > '9' || v > 100000000L) return -1;
        v = v * 10 + (*p - '0');
    }
    return v;
}
/* One checkpoint directory's verdict (accel_ckpt_verify: marker, sizes, every checksum) on one line; 0 = complete. */
static int ckpt_status(const char *label, const char *dir, const char *mark) {
    char marker[4200];
    struct stat st;
    accel_result r;
    snprintf(marker, sizeof marker, "%s/checkpoint_complete.json", dir);
    accel_set_default_logger(quiet_log, NULL);
    r = accel_ckpt_verify(NULL, dir);
    accel_set_default_logger(NULL, NULL);
    if (r == ACCEL_OK) {
        printf("%s: checkpoint, complete, checksums OK%s\n", label, mark);
        return 0;
    }
    printf("%s: checkpoint, %s: %s\n", label, stat(marker, &st) == 0 ? "DAMAGED" : "INCOMPLETE",
           accel_last_error(NULL));
    return 1;
}
/* A folder of checkpoint_<N> directories (project_dir/checkpoints): each one's verdict, newest last; the newest
   complete one is what load_state(NULL) loads (FALLBACK in accel_ckpt.h). */
static int ls_checkpoints(const char *dir, char **names, int n) {
    long *num = (long *)malloc(sizeof(long) * (size_t)(n ? n : 1));
    int *ok = (int *)malloc(sizeof(int) * (size_t)(n ? n : 1));
    int i, j, rc = 0, newest = -1;
    char path[4200];
    if (!num || !ok) { free(num); free(ok); return 1; }
    for (i = 0; i < n; ++i) num[i] = ckpt_number(names[i]);
    for (i = 0; i < n; ++i) { /* by number, not by name: checkpoint_10 after checkpoint_9 */
        for (j = i + 1; j < n; ++j)
            if (num[j] >= 0 && (num[i] < 0 || num[j] < num[i])) {
                long t = num[i];
                char *s = names[i];
                num[i] = num[j]; num[j] = t;
                names[i] = names[j]; names[j] = s;
            }
    }
    for (i = 0; i < n; ++i) {
        ok[i] = 0;
        if (num[i] < 0) continue;
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        accel_set_default_logger(quiet_log, NULL);
        ok[i] = accel_ckpt_verify(NULL, path) == ACCEL_OK;
        accel_set_default_logger(NULL, NULL);
        if (ok[i]) newest = i;
    }
    for (i = 0; i < n; ++i) {
        if (num[i] < 0) continue;
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (ckpt_status(path, path, i == newest ? " (newest complete: load_state loads it)" : "") != 0) rc = 1;
    }
    if (newest < 0) printf("%s: no complete checkpoint\n", dir);
    free(num);
    free(ok);
    return rc;
}

/* ------------------------------------------------------------------------------- state files decoded in words */
/* A state file is recognized by its magic, or by the name accel and the examples give it (so that a file whose magic
   was damaged is still reported as what it should be); the module's own decoder parses it. */
enum { ST_NONE, ST_TRAINING, ST_SAMPLER, ST_SCALER, ST_OPTIM, ST_SEQ };
static int state_kind(const char *name, const unsigned char *b, size_t n) {
    size_t l = strlen(name);
    if (n >= 4 && !memcmp(b, "ACST", 4)) return ST_TRAINING;
    if (n >= 4 && !memcmp(b, "ACDS", 4)) return ST_SAMPLER;
    if (n >= 4 && !memcmp(b, "AMPS", 4)) return ST_SCALER;
    if (n >= 4 && !memcmp(b, "AOPT", 4)) return ST_OPTIM;
    if (n >= 4 && !memcmp(b, "ACSQ", 4)) return ST_SEQ;
    if (!strncmp(name, "random_states_", 14) && l > 18 && !strcmp(name + l - 4, ".bin")) return ST_TRAINING;
    if (!strcmp(name, "sampler.bin")) return ST_SAMPLER;
    if (!strcmp(name, "scaler.bin")) return ST_SCALER;
    if (!strcmp(name, "optim_state.bin")) return ST_OPTIM;
    if (!strcmp(name, "loader.bin")) return ST_SEQ; /* the examples' name for their sequence loader */
    return ST_NONE;
}
static const char *yes_no(int v) { return v ? "yes" : "no"; }
static void print_sampler_flags(uint32_t f) {
    static const char *names[] = {"split_batches", "even_batches", "drop_last", "iterable", "shuffle",
                                  "batch_sampler_shard"};
    int i, any = 0;
    for (i = 0; i < 6; ++i)
        if (f & (1u << i)) printf("%s%s", any++ ? ", " : "", names[i]);
    if (!any) printf("none");
}
/* Prints the decoded state (indented lines under "<path>: <what>"); returns 0, or 1 when it does not decode. */
static int ls_state(const char *path, int kind, const unsigned char *b, size_t n) {
    accel_result r = ACCEL_OK;
    accel_set_default_logger(quiet_log, NULL);
    if (kind == ST_TRAINING) {
        accel_state_info t;
        if ((r = accel_state_decode(NULL, b, n, &t)) == ACCEL_OK) {
            printf("%s: training state of process %d of %d\n", path, (int)t.process_index, (int)t.num_processes);
            printf("  optimizer steps %lld (the last one skipped: %s), scheduler steps %lld (adjusted %lld)\n",
                   (long long)t.optimizer_steps, yes_no(t.optimizer_step_was_skipped), (long long)t.scheduler_steps,
                   (long long)t.scheduler_adjusted_steps);
            printf("  micro-step counter %d, gradient_accumulation_steps %d, sync_gradients %s\n", (int)t.step,
                   (int)t.gradient_accumulation_steps, yes_no(t.sync_gradients));
            printf("  RNG seed %llu, offset %llu\n", (unsigned long long)t.rng_seed,
                   (unsigned long long)t.rng_offset);
        }
    } else if (kind == ST_SAMPLER) {
        accel_data_shard_state_info d;
        if ((r = accel_data_shard_state_decode(NULL, b, n, &d)) == ACCEL_OK) {
            printf("%s: sampler state, saved by process %d of %d\n", path, (int)d.process_index,
                   (int)d.num_processes);
            printf("  epoch %lld, next batch %lld (per process), seed %llu\n", (long long)d.epoch,
                   (long long)d.position, (unsigned long long)d.seed);
            printf("  dataset_len %lld, batch_size %lld, options: ", (long long)d.dataset_len,
                   (long long)d.batch_size);
            print_sampler_flags(d.flags);
            printf("\n");
        }
    } else if (kind == ST_SEQ) {
        accel_data_seq_state_info q;
        if ((r = accel_data_seq_state_decode(NULL, b, n, &q)) == ACCEL_OK) {
            printf("%s: sequence loader state, saved by process %d of %d\n", path, (int)q.process_index,
                   (int)q.num_processes);
            printf("  epoch %lld, next global batch %lld, seed %llu, shuffle %s\n", (long long)q.epoch,
                   (long long)q.position, (unsigned long long)q.seed, yes_no(q.flags & 16u));
            printf("  %d token files, %lld tokens, batch_size %d, seq_len %d\n", (int)q.num_files,
                   (long long)q.total_tokens, (int)q.batch_size, (int)q.seq_len);
        }
    } else if (kind == ST_SCALER) {
        accel_amp_scaler_state_info a;
        if ((r = accel_amp_scaler_state_decode(NULL, b, n, &a)) == ACCEL_OK) {
            printf("%s: loss scaler state\n", path);
            printf("  scale %.9g, growth_tracker %d of growth_interval %d, growth_factor %.9g, backoff_factor %.9g\n",
                   (double)a.scale, (int)a.growth_tracker, (int)a.growth_interval, a.growth_factor, a.backoff_factor);
        }
    } else if (kind == ST_OPTIM) {
        accel_optim_state_info o;
        int g, i;
        if ((r = accel_optim_state_decode(NULL, b, n, &o)) == ACCEL_OK) {
            printf("%s: optimizer state, %s, %lld steps, %d groups, %d parameters\n", path,
                   o.algorithm == ACCEL_OPTIM_ADAMW ? "AdamW" : "SGD", (long long)o.steps, o.ngroups, o.nparams);
            if (o.algorithm == ACCEL_OPTIM_ADAMW)
                printf("  betas (%.9g, %.9g), eps %.9g, amsgrad %s, maximize %s\n", o.beta1, o.beta2, o.eps,
                       yes_no(o.amsgrad), yes_no(o.maximize));
            else
                printf("  momentum %.9g, dampening %.9g, nesterov %s, maximize %s\n", o.momentum, o.dampening,
                       yes_no(o.nesterov), yes_no(o.maximize));
            for (g = 0; g < o.ngroups; ++g) {
                int np;
                double lr, base, wd;
                accel_optim_state_decode_group(b, g, &np, &lr, &base, &wd);
                printf("  group %d: %d parameters, lr %.9g (initial %.9g), weight_decay %.9g\n", g, np, lr, base, wd);
            }
            for (i = 0; i < o.nparams; ++i) {
                int64_t numel, steps;
                accel_optim_state_decode_param(b, o.ngroups, i, &numel, &steps);
                printf("  parameter %d: %lld elements, %lld steps\n", i, (long long)numel, (long long)steps);
            }
        }
    }
    accel_set_default_logger(NULL, NULL);
    if (r == ACCEL_OK) return 0;
    printf("%s: CORRUPT %s state: %s\n", path,
           kind == ST_TRAINING ? "training" : kind == ST_SAMPLER ? "sampler" : kind == ST_SCALER ? "loss scaler"
                                            : kind == ST_SEQ      ? "sequence loader"
                                                                  : "optimizer",
           accel_last_error(NULL));
    return 1;
}
/* A regular file of a checkpoint directory: decoded when it is a state file, else its size. */
static int ls_other_file(const char *path, const char *name, long long size) {
    unsigned char *b;
    size_t n = 0;
    int kind, rc;
    FILE *f;
    if (size > (64ll << 20)) { /* no state file is this large */
        printf("%s: %lld bytes\n", path, size);
        return 0;
    }
    b = (unsigned char *)malloc((size_t)size + 1);
    f = fopen(path, "rb");
    if (b && f) n = fread(b, 1, (size_t)size, f);
    if (f) fclose(f);
    if (!b || !f || n != (size_t)size) {
        printf("%s: CANNOT READ (%lld bytes expected, %zu read)\n", path, size, n);
        free(b);
        return 1;
    }
    kind = state_kind(name, b, n);
    if (kind == ST_NONE) {
        printf("%s: %lld bytes\n", path, size);
        rc = 0;
    } else {
        rc = ls_state(path, kind, b, n);
    }
    free(b);
    return rc;
}

static int ls_dir(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *de;
    char **names = NULL, path[4096];
    int n = 0, cap = 0, i, rc = 0;
    struct stat st;
    if (!d) { perror(dir); return 1; }
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.') continue;
        if (n == cap) {
            char **nn;
            cap = cap ? cap * 2 : 16;
            nn = (char **)realloc(names, sizeof(char *) * (size_t)cap);
            if (!nn) { closedir(d); return 1; }
            names = nn;
        }
        names[n] = cli_dup_str(de->d_name);
        if (names[n]) ++n;
    }
    closedir(d);
    if (n) qsort(names, (size_t)n, sizeof *names, cmp_str);
    for (i = 0; i < n; ++i) { /* a folder of checkpoints: the verdicts only */
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (ckpt_number(names[i]) >= 0 && stat(path, &st) == 0 && S_ISDIR(st.st_mode)) break;
    }
    if (i < n) {
        rc = ls_checkpoints(dir, names, n);
        for (i = 0; i < n; ++i) free(names[i]);
        free(names);
        return rc;
    }
    snprintf(path, sizeof path, "%s/checkpoint_complete.json", dir);
    {
        const char *base = strrchr(dir, '/');
        base = base ? base + 1 : dir;
        if ((stat(path, &st) == 0 || ckpt_number(base) >= 0) && ckpt_status(dir, dir, "") != 0) rc = 1;
    }
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    if (stat(path, &st) == 0) printf("%s: sharded model (model.safetensors.index.json)\n", dir);
    for (i = 0; i < n; ++i) {
        size_t l = strlen(names[i]);
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (l > 12 && !strcmp(names[i] + l - 12, ".safetensors")) {
            if (ls_file(path) != 0) rc = 1;
        } else if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            if (ls_other_file(path, names[i], (long long)st.st_size) != 0) rc = 1;
        }
        free(names[i]);
    }
    free(names);
    return rc;
}

static int cmd_ls(int argc, char **argv) {
    struct stat st;
    if (argc != 2) { fprintf(stderr, "usage: accel ckpt ls FILE|DIR\n"); return 2; }
    if (stat(argv[1], &st) != 0) { perror(argv[1]); return 1; }
    return S_ISDIR(st.st_mode) ? ls_dir(argv[1]) : ls_file(argv[1]);
}

static int cmd_verify(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: accel ckpt verify DIR\n"); return 2; }
    accel_set_default_logger(quiet_log, NULL);
    if (accel_ckpt_verify(NULL, argv[1]) != ACCEL_OK) {
        fprintf(stderr, "accel ckpt verify: %s\n", accel_last_error(NULL));
        return 1;
    }
    printf("%s: complete, every checksum matches\n", argv[1]);
    return 0;
}

typedef struct { const char *name; int shard; } name_shard;
static int cmp_name_shard(const void *a, const void *b) {
    return strcmp(((const name_shard *)a)->name, ((const name_shard *)b)->name);
}

static int cmd_plan(int argc, char **argv) {
    const char *size_str = NULL;
    char **names;
    uint64_t *sizes, *shard_bytes, max = 0, total = 0;
    int *shard_of, n = 0, ns = 0, i, s, first, rc = 2;
    char fname[64];
    name_shard *sorted;
    accel_set_default_logger(quiet_log, NULL);
    names = (char **)calloc((size_t)argc + 1, sizeof *names);
    sizes = (uint64_t *)calloc((size_t)argc + 1, sizeof *sizes);
    shard_bytes = (uint64_t *)calloc((size_t)argc + 1, sizeof *shard_bytes);
    shard_of = (int *)calloc((size_t)argc + 1, sizeof *shard_of);
    sorted = (name_shard *)calloc((size_t)argc + 1, sizeof *sorted);
    if (!names || !sizes || !shard_bytes || !shard_of || !sorted) { rc = 1; goto out; }
    for (i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--max-shard-size") && i + 1 < argc) { size_str = argv[++i]; continue; }
        if (!strncmp(argv[i], "--max-shard-size=", 17)) { size_str = argv[i] + 17; continue; }
        {
            char *colon = strrchr(argv[i], ':');
            if (!colon || colon == argv[i]) {
                fprintf(stderr, "accel ckpt plan: expected name:bytes, got \"%s\"\n", argv[i]);
                goto out;
            }
            *colon = 0;
            if (accel_parse_size(NULL, colon + 1, &sizes[n]) != ACCEL_OK) {
                fprintf(stderr, "accel ckpt plan: tensor %s: %s\n", argv[i], accel_last_error(NULL));
                goto out;
            }
            for (s = 0; s < n; ++s)
                if (!strcmp(names[s], argv[i])) { fprintf(stderr, "accel ckpt plan: duplicate tensor name \"%s\"\n", argv[i]); goto out; }
            names[n++] = argv[i];
        }
    }
    if (!size_str) { fprintf(stderr, "usage: accel ckpt plan --max-shard-size SIZE name:bytes ...\n"); goto out; }
    if (accel_parse_size(NULL, size_str, &max) != ACCEL_OK) {
        fprintf(stderr, "accel ckpt plan: --max-shard-size: %s\n", accel_last_error(NULL));
        goto out;
    }
    if (accel_st_plan_shards(NULL, sizes, n, max, shard_of, shard_bytes, &ns) != ACCEL_OK) {
        fprintf(stderr, "accel ckpt plan: %s\n", accel_last_error(NULL));
        rc = 1;
        goto out;
    }
    for (i = 0; i < n; ++i) total += sizes[i];
    printf("{\"shards\": [");
    for (s = 0; s < ns; ++s) {
        accel_st_shard_name(s, ns, fname, sizeof fname);
        printf("%s{\"file\": \"%s\", \"tensors\": [", s ? ", " : "", fname);
        for (i = 0, first = 1; i < n; ++i) {
            if (shard_of[i] != s) continue;
            if (!first) printf(", ");
            cli_put_json_str(stdout, names[i]);
            first = 0;
        }
        printf("], \"bytes\": %llu}", (unsigned long long)shard_bytes[s]);
    }
    printf("], \"is_sharded\": %s, \"index\": ", ns > 1 ? "true" : "false");
    if (ns > 1) {
        for (i = 0; i < n; ++i) { sorted[i].name = names[i]; sorted[i].shard = shard_of[i]; }
        qsort(sorted, (size_t)n, sizeof *sorted, cmp_name_shard);
        printf("{\"metadata\": {\"total_size\": %llu}, \"weight_map\": {", (unsigned long long)total);
        for (i = 0; i < n; ++i) {
            if (i) printf(", ");
            cli_put_json_str(stdout, sorted[i].name);
            accel_st_shard_name(sorted[i].shard, ns, fname, sizeof fname);
            printf(": \"%s\"", fname);
        }
        printf("}}");
    } else {
        printf("null");
    }
    printf("}\n");
    rc = 0;
out:
    free(names); free(sizes); free(shard_bytes); free(shard_of); free(sorted);
    return rc;
}


/* "<prefix><digits>.bin" → the number, else -1 */
static long rank_of(const char *name, const char *prefix) {
    size_t l = strlen(prefix), n = strlen(name);
    const char *p;
    long v = 0;
    if (n <= l + 4 || strncmp(name, prefix, l) || strcmp(name + n - 4, ".bin")) return -1;
    for (p = name + l; p < name + n - 4; ++p) {
        if (*p < '0' || *p > '9' || v > 1000000L) return -1;
        v = v * 10 + (*p - '0');
    }
    return v;
}

static int cmd_merge(int argc, char **argv) {
    const char *dir = NULL, *out = NULL, *name = "fsdp_state", *size_str = NULL;
    char prefix[300], **paths = NULL;
    uint64_t max = 0;
    long nsaved = 0, nstate = 0, r_;
    int i, rc = 1;
    DIR *d;
    struct dirent *de;
    accel_zero_fsdp_merge_info info;
    for (i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--name") && i + 1 < argc) name = argv[++i];
        else if (!strcmp(argv[i], "--max-shard-size") && i + 1 < argc) size_str = argv[++i];
        else if (argv[i][0] == '-' && argv[i][1]) { dir = NULL; break; }
        else if (!dir) dir = argv[i];
        else if (!out) out = argv[i];
        else { dir = NULL; break; }
    }
    if (!dir || !out || !*name || strlen(name) > 200) {
        fprintf(stderr, "usage: accel ckpt merge DIR OUT [--name NAME] [--max-shard-size SIZE]\n");
        return 2;
    }
    accel_set_default_logger(quiet_log, NULL);
    if (size_str && accel_parse_size(NULL, size_str, &max) != ACCEL_OK) {
        fprintf(stderr, "accel ckpt merge: --max-shard-size: %s\n", accel_last_error(NULL));
        return 2;
    }
    /* 1. the checkpoint as load_state verifies it: marker, every file's size and checksum */
    if (accel_ckpt_verify(NULL, dir) != ACCEL_OK) {
        fprintf(stderr, "accel ckpt merge: %s: %s\n", dir, accel_last_error(NULL));
        return 1;
    }
    /* 2. the saving processes (random_states_<rank>.bin: one each) and their NAME_<rank>.bin */
    snprintf(prefix, sizeof prefix, "%s_", name);
    d = opendir(dir);
    if (!d) { perror(dir); return 1; }
    while ((de = readdir(d)) != NULL) {
        if ((r_ = rank_of(de->d_name, "random_states_")) >= 0 && r_ + 1 > nsaved) nsaved = r_ + 1;
        if ((r_ = rank_of(de->d_name, prefix)) >= 0 && r_ + 1 > nstate) nstate = r_ + 1;
    }
    closedir(d);
    if (nstate == 0) {
        fprintf(stderr, "accel ckpt merge: %s holds no %s<rank>.bin: not a sharded ZeRO-3 checkpoint (one saved "
                "with accel_zero_fsdp_state under another name: --name; a whole model is in model.safetensors "
                "already)\n", dir, prefix);
        return 1;
    }
    if (nsaved < nstate) nsaved = nstate;
    paths = (char **)calloc((size_t)nsaved, sizeof *paths);
    if (!paths) return 1;
    for (i = 0; i < nsaved; ++i) {
        struct stat st;
        size_t l = strlen(dir) + strlen(prefix) + 32;
        paths[i] = (char *)malloc(l);
        if (!paths[i]) goto out;
        snprintf(paths[i], l, "%s/%s%d.bin", dir, prefix, i);
        if (stat(paths[i], &st) != 0) {
            fprintf(stderr, "accel ckpt merge: %s: %s%d.bin is missing (the checkpoint was saved by %ld processes): "
                    "a shard of the model is not there\n", dir, prefix, i, nsaved);
            goto out;
        }
    }
    /* 3. headers checked (one model, pieces tiling every parameter), then streamed into safetensors */
    if (accel_zero_fsdp_merge(NULL, (const char *const *)paths, (int)nsaved, out, max, &info) != ACCEL_OK) {
        fprintf(stderr, "accel ckpt merge: %s: %s\n", dir, accel_last_error(NULL));
        goto out;
    }
    printf("%s: %d tensors, %llu bytes from %d ranks' shards into %d file%s in %s (held %llu bytes)\n", dir,
           info.tensors, (unsigned long long)info.bytes, info.saved_ranks, info.files, info.files == 1 ? "" : "s",
           out, (unsigned long long)info.memory);
    rc = 0;
out:
    for (i = 0; i < nsaved; ++i) free(paths[i]);
    free(paths);
    return rc;
}

int cli_ckpt(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        fprintf(argc < 2 ? stderr : stdout,
                "usage: accel ckpt ls FILE|DIR\n"
                "       accel ckpt verify DIR\n"
                "       accel ckpt plan --max-shard-size SIZE name:bytes ...\n"
                "       accel ckpt merge DIR OUT [--name NAME] [--max-shard-size SIZE]\n");
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "ls")) return cmd_ls(argc - 1, argv + 1);
    if (!strcmp(argv[1], "verify")) return cmd_verify(argc - 1, argv + 1);
    if (!strcmp(argv[1], "plan")) return cmd_plan(argc - 1, argv + 1);
    if (!strcmp(argv[1], "merge")) return cmd_merge(argc - 1, argv + 1);
    fprintf(stderr, "accel ckpt: unknown subcommand '%s' (ls, verify, plan, merge)\n", argv[1]);
    return 2;
}

int cli_size(int argc, char **argv) {
    uint64_t v = 0;
    if (argc != 2) { fprintf(stderr, "usage: accel size STRING   (e.g. accel size 10GB)\n"); return 2; }
    accel_set_default_logger(quiet_log, NULL);
    if (accel_parse_size(NULL, argv[1], &v) != ACCEL_OK) {
        fprintf(stderr, "accel size: %s\n", accel_last_error(NULL));
        return 2;
    }
    printf("%llu\n", (unsigned long long)v);
    return 0;
}
