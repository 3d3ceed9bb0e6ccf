/* `accel estimate` (Accelerate's `accelerate estimate-memory`, stated as what accel allocates): per-rank bytes of a
   model under each strategy, from accel_zero_fsdp_estimate (accel_zero.h) — the slot sizing create allocates with.
     accel estimate MODEL [--np P] [--replicate R] [--dtype D] [--reduce-dtype D] [--optimizer adamw|sgd|none]
                          [--accumulation] [--activations SIZE] [--json]
   MODEL  a .safetensors file; a model.safetensors.index.json (its shards beside it: model-*-of-*.safetensors) or a
          folder holding one or model.safetensors (or only a config.json); an HF config.json of a GPT-2
          (transformers' GPT2Config fields and defaults; the layout of examples/gpt2/gpt2.h); any other .json is
          accel's model description (`accel device-map --structure`; its parameters, not buffers or tied aliases).
   Units (FSDP's transformer auto-wrap policy): the tensors whose name holds "<prefix>.<number>." (h.3.…,
   model.layers.7.…) form one unit per such block; every other tensor goes into one root unit (embeddings, final
   norm). The master weights are F32 whatever the file's dtype; D is the compute (gather) dtype, FSDP's param_dtype
   (float32 | bfloat16 | float16, default float32), --reduce-dtype the gradients' (default D). --optimizer: AdamW's
   two F32 moments (default), SGD's momentum, or none. --accumulation: micro-batches accumulate (no_sync holds every
   unit's gradient buffer). --activations: the trainer's activation bytes per rank, added to every total.
   Rows: DDP (NO_SHARD: everything replicated), ZeRO-1 (DDP's weights and gradients, the optimizer state over
   accel_zero's partition of the flattened list: ceil(N / P) elements; its reducer's buckets not counted), ZeRO-2
   (SHARD_GRAD_OP), ZeRO-3 (FULL_SHARD), ZeRO-3 + CPU offload (the shards and optimizer state in pinned host memory:
   the `host` column), and with --replicate R HYBRID_SHARD / HYBRID_SHARD_ZERO2 (sharded over P / R). Bytes are
   what the runtime allocates at most, for units of one size or of different sizes (its buffer pools reuse a buffer
   only for a unit of the same size, so they never hold more than the largest units' buffers; FULL_SHARD gathers
   the root unit into a buffer of its own beside the two rotating ones: accel_zero.h UNITS, SHARDS AND BUFFERS).
   Exit codes: 0 ok, 1 the model cannot be read, 2 usage. */
#include "accel_safetensors.h"
#include "accel_bigmodel.h"
#include "accel_zero.h"
#include "../examples/gpt2/gpt2.h" /* GPT-2's tensors from config.json (gpt2_hf_config_read, gpt2_hf_tensors) */
#include "cli.h"
#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void quiet_log(void *user, accel_log_level level, const char *msg) { (void)user; (void)level; (void)msg; }

typedef struct est_model {
    accel_tensor *t; /* names owned (strdup), F32, shapes */
    int n, cap;
    char what[160];  /* what was read, for the header line */
} est_model;

static int est_add(est_model *m, const char *name, int ndim, const int64_t *shape) {
    int d;
    if (m->n == m->cap) {
        int nc = m->cap ? m->cap * 2 : 64;
        accel_tensor *nt = (accel_tensor *)realloc(m->t, sizeof *nt * (size_t)nc);
        if (!nt) return -1;
        m->t = nt;
        m->cap = nc;
    }
    memset(&m->t[m->n], 0, sizeof m->t[m->n]);
    m->t[m->n].name = cli_dup_str(name);
    if (!m->t[m->n].name || ndim < 0 || ndim > ACCEL_MAX_DIMS) return -1;
    m->t[m->n].dtype = ACCEL_F32;
    m->t[m->n].ndim = ndim;
    for (d = 0; d < ndim; ++d) m->t[m->n].shape[d] = shape[d];
    ++m->n;
    return 0;
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}
static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

static int read_safetensors(est_model *m, const char *path) {
    accel_st_file *f = NULL;
    int i;
    if (accel_st_file_open(NULL, path, &f) != ACCEL_OK) {
        fprintf(stderr, "accel estimate: %s\n", accel_last_error(NULL));
        return 1;
    }
    for (i = 0; i < accel_st_file_count(f); ++i) {
        const accel_st_entry *e = accel_st_file_entry(f, i);
        if (est_add(m, e->name, e->ndim, e->shape) != 0) { accel_st_file_destroy(f); return 1; }
    }
    accel_st_file_destroy(f);
    return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* the shards of a sharded save: model-NNNNN-of-NNNNN.safetensors in dir, all of one count, every one present */
static int read_index(est_model *m, const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *de;
    char *names[4096], path[4300];
    int n = 0, i, of = -1, rc = 0;
    if (!d) { perror(dir); return 1; }
    while ((de = readdir(d)) != NULL && n < 4096) {
        int a, b;
        char tail[32];
        if (sscanf(de->d_name, "model-%5d-of-%5d%31s", &a, &b, tail) == 3 && !strcmp(tail, ".safetensors") &&
            strlen(de->d_name) == strlen("model-00001-of-00001.safetensors")) {
            if (of >= 0 && b != of) {
                fprintf(stderr, "accel estimate: %s holds shards of two saves (of %d and of %d)\n", dir, of, b);
                rc = 1;
            }
            of = b;
            names[n++] = cli_dup_str(de->d_name);
        }
    }
    closedir(d);
    if (!rc && (n == 0 || n != of)) {
        fprintf(stderr, "accel estimate: %s: the index's shards are not all there (%d of %d)\n", dir, n, of);
        rc = 1;
    }
    if (n > 1) qsort(names, (size_t)n, sizeof *names, cmp_str);
    for (i = 0; i < n; ++i) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (!rc && !names[i]) rc = 1;
        if (!rc) rc = read_safetensors(m, path);
        free(names[i]);
    }
    return rc;
}

/* GPT2Config: its fields (or their attribute_map aliases), transformers' defaults when absent */
static int hf_int(const gpt2_hf_config *h, int key, int alias, int dflt, long *out, const char *path) {
    const gpt2_json_value *v = h->v[alias].type != GPT2_JSON_ABSENT ? &h->v[alias] : &h->v[key];
    if (v->type == GPT2_JSON_ABSENT) { *out = dflt; return 0; }
    if (v->type != GPT2_JSON_INT || v->number < 1 || v->number > 1e9) {
        fprintf(stderr, "accel estimate: %s: %s is %s, not a positive integer\n", path, gpt2_hf_keys[key],
                gpt2_json_type_names[v->type]);
        return -1;
    }
    *out = (long)v->number;
    return 0;
}
static int read_gpt2_config(est_model *m, const char *path) {
    gpt2_hf_config h;
    gpt2_config c;
    gpt2_hf_tensor *e;
    long V, T, C, L;
    int found = 0, n, i;
    if (gpt2_hf_config_read(NULL, path, &h, &found) != ACCEL_OK || !found) {
        fprintf(stderr, "accel estimate: %s\n", found ? accel_last_error(NULL) : "config.json not found");
        return 1;
    }
    if (h.v[GPT2_HF_MODEL_TYPE].type != GPT2_JSON_STRING || strcmp(h.v[GPT2_HF_MODEL_TYPE].str, "gpt2")) {
        fprintf(stderr, "accel estimate: %s: model_type is not \"gpt2\" (the config.json models read here are "
                "GPT-2's; give the model's safetensors or accel's model JSON instead)\n", path);
        return 1;
    }
    if (hf_int(&h, GPT2_HF_VOCAB_SIZE, GPT2_HF_VOCAB_SIZE, 50257, &V, path) ||
        hf_int(&h, GPT2_HF_N_POSITIONS, GPT2_HF_MAX_POSITION_EMBEDDINGS, 1024, &T, path) ||
        hf_int(&h, GPT2_HF_N_EMBD, GPT2_HF_HIDDEN_SIZE, 768, &C, path) ||
        hf_int(&h, GPT2_HF_N_LAYER, GPT2_HF_NUM_HIDDEN_LAYERS, 12, &L, path))
        return 1;
    if (L > GPT2_HF_MAX_LAYERS) {
        fprintf(stderr, "accel estimate: %s: %ld layers (at most %d)\n", path, L, GPT2_HF_MAX_LAYERS);
        return 1;
    }
    memset(&c, 0, sizeof c);
    c.vocab_size = (int)V;
    c.max_seq_len = (int)T;
    c.channels = (int)C;
    c.num_layers = (int)L;
    c.num_heads = 1;
    c.padded_vocab_size = (c.vocab_size + 127) / 128 * 128;
    e = (gpt2_hf_tensor *)malloc(sizeof *e * (size_t)(4 + 12 * L));
    if (!e) return 1;
    n = gpt2_hf_tensors(&c, e);
    for (i = 0; i < n; ++i) { /* the hub file's shapes: vectors 1-D, Conv1D weights [in, out] */
        int64_t s[2];
        s[0] = e[i].transpose ? e[i].cols : e[i].rows;
        s[1] = e[i].transpose ? e[i].rows : e[i].cols;
        if (est_add(m, e[i].name, e[i].rows == 1 ? 1 : 2, e[i].rows == 1 ? s + 1 : s) != 0) { free(e); return 1; }
    }
    free(e);
    snprintf(m->what, sizeof m->what, "GPT-2 config (vocab %ld, positions %ld, n_embd %ld, n_layer %ld)", V, T, C,
             L);
    return 0;
}

static int read_model_json(est_model *m, const char *path) {
    accel_bm_model *bm = NULL;
    int i, rc = 0;
    if (accel_bm_model_open(NULL, path, &bm) != ACCEL_OK) {
        fprintf(stderr, "accel estimate: %s\n", accel_last_error(NULL));
        return 1;
    }
    for (i = 0; i < accel_bm_model_tensor_count(bm) && !rc; ++i) {
        accel_tensor t;
        int is_buffer = 0;
        const char *tied = NULL;
        if (accel_bm_model_tensor(bm, i, &t, &is_buffer, &tied) != ACCEL_OK) rc = 1;
        else if (!is_buffer && !tied && est_add(m, t.name, t.ndim, t.shape) != 0) rc = 1;
    }
    accel_bm_model_destroy(bm);
    return rc;
}

static int read_model(est_model *m, const char *path) {
    struct stat st;
    char p[4300];
    if (stat(path, &st) != 0) { perror(path); return 1; }
    snprintf(m->what, sizeof m->what, "%.150s", path);
    if (S_ISDIR(st.st_mode)) {
        snprintf(p, sizeof p, "%s/model.safetensors.index.json", path);
        if (stat(p, &st) == 0) return read_index(m, path);
        snprintf(p, sizeof p, "%s/model.safetensors", path);
        if (stat(p, &st) == 0) return read_safetensors(m, p);
        snprintf(p, sizeof p, "%s/config.json", path);
        if (stat(p, &st) == 0) return read_gpt2_config(m, p);
        fprintf(stderr, "accel estimate: %s holds no model.safetensors, index or config.json\n", path);
        return 1;
    }
    if (ends_with(path, ".safetensors")) return read_safetensors(m, path);
    if (ends_with(path, ".index.json")) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", path);
        if (strrchr(dir, '/')) *strrchr(dir, '/') = 0;
        else snprintf(dir, sizeof dir, ".");
        return read_index(m, dir);
    }
    if (!strcmp(base_name(path), "config.json")) return read_gpt2_config(m, path);
    if (ends_with(path, ".json")) return read_model_json(m, path);
    fprintf(stderr, "accel estimate: %s: not a .safetensors, an index, a config.json or a model .json\n", path);
    return 1;
}

/* The unit of a tensor name: the prefix through the first ".<digits>." component, or "" (the root unit). */
static size_t unit_key(const char *name) {
    const char *p = name;
    while ((p = strchr(p, '.')) != NULL) {
        const char *q = p + 1;
        while (isdigit((unsigned char)*q)) ++q;
        if (q > p + 1 && *q == '.') return (size_t)(q - name);
        p = p + 1;
    }
    return 0;
}

typedef struct est_units {
    accel_zero_unit *u;
    accel_tensor *t; /* the tensors reordered unit by unit */
    char **names;
    int k, blocks;
} est_units;
static int make_units(const est_model *m, est_units *out) {
    int i, j, k = 0, at = 0;
    memset(out, 0, sizeof *out);
    out->u = (accel_zero_unit *)calloc((size_t)m->n + 1, sizeof *out->u);
    out->t = (accel_tensor *)calloc((size_t)m->n + 1, sizeof *out->t);
    out->names = (char **)calloc((size_t)m->n + 1, sizeof *out->names);
    if (!out->u || !out->t || !out->names) return -1;
    /* the root unit first (embeddings come before the blocks in forward), then the blocks in first-seen order */
    for (i = 0; i < m->n; ++i)
        if (unit_key(m->t[i].name) == 0) out->t[at++] = m->t[i];
    if (at > 0) {
        out->names[k] = cli_dup_str("(root)");
        if (!out->names[k]) return -1;
        out->u[k].name = out->names[k];
        out->u[k].params = out->t;
        out->u[k].n = at;
        ++k;
    }
    for (i = 0; i < m->n; ++i) {
        size_t key = unit_key(m->t[i].name);
        int seen = 0, first = at;
        if (key == 0) continue;
        for (j = 0; j < i && !seen; ++j)
            seen = unit_key(m->t[j].name) == key && !strncmp(m->t[j].name, m->t[i].name, key);
        if (seen) continue;
        for (j = i; j < m->n; ++j)
            if (unit_key(m->t[j].name) == key && !strncmp(m->t[j].name, m->t[i].name, key)) out->t[at++] = m->t[j];
        out->names[k] = (char *)malloc(key + 1);
        if (!out->names[k]) return -1;
        memcpy(out->names[k], m->t[i].name, key);
        out->names[k][key] = 0;
        out->u[k].name = out->names[k];
        out->u[k].params = out->t + first;
        out->u[k].n = at - first;
        ++k;
        ++out->blocks;
    }
    out->k = k;
    return 0;
}

static accel_dtype parse_dtype(const char *s) {
    if (!strcmp(s, "fp32") || !strcmp(s, "f32")) return ACCEL_F32;
    if (!strcmp(s, "bf16")) return ACCEL_BF16;
    if (!strcmp(s, "fp16") || !strcmp(s, "f16")) return ACCEL_F16;
    return accel_dtype_from_torch(s);
}

static void human(char *out, size_t cap, uint64_t b) {
    static const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    int i = 0;
    while (v >= 1024 && i < 4) { v /= 1024; ++i; }
    snprintf(out, cap, i ? "%.2f %s" : "%.0f %s", v, u[i]);
}

typedef struct est_row {
    const char *name;
    uint64_t weights, optimizer, buffers, activations, total, host;
} est_row;

int cli_estimate(int argc, char **argv) {
    const char *model = NULL, *act_str = NULL;
    int np = 1, replicate = 0, optim_states = 2, no_sync = 0, json = 0, i, rc = 1, nrows = 0;
    accel_dtype pdt = ACCEL_F32, rdt = ACCEL_DTYPE_INVALID;
    uint64_t act = 0, whole = 0;
    est_model m;
    est_units un;
    est_row rows[8];
    memset(&m, 0, sizeof m);
    memset(&un, 0, sizeof un);
    for (i = 1; i < argc; ++i) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--np") && v) { np = atoi(v); ++i; }
        else if (!strcmp(a, "--replicate") && v) { replicate = atoi(v); ++i; }
        else if (!strcmp(a, "--dtype") && v) { pdt = parse_dtype(v); ++i; if (pdt == ACCEL_DTYPE_INVALID) break; }
        else if (!strcmp(a, "--reduce-dtype") && v) {
            rdt = parse_dtype(v);
            ++i;
            if (rdt == ACCEL_DTYPE_INVALID) break;
        } else if (!strcmp(a, "--optimizer") && v) {
            optim_states = !strcmp(v, "adamw") ? 2 : !strcmp(v, "sgd") ? 1 : !strcmp(v, "none") ? 0 : -1;
            ++i;
            if (optim_states < 0) break;
        } else if (!strcmp(a, "--activations") && v) { act_str = v; ++i; }
        else if (!strcmp(a, "--accumulation")) no_sync = 1;
        else if (!strcmp(a, "--json")) json = 1;
        else if (a[0] == '-' || model) { model = NULL; break; }
        else model = a;
    }
    if (rdt == ACCEL_DTYPE_INVALID) rdt = pdt;
    if (!model || i < argc || np < 1 || replicate < 0 || (replicate > 0 && (np % replicate || replicate > np)) ||
        (pdt != ACCEL_F32 && pdt != ACCEL_BF16 && pdt != ACCEL_F16) ||
        (rdt != ACCEL_F32 && rdt != ACCEL_BF16 && rdt != ACCEL_F16)) {
        fprintf(stderr, "usage: accel estimate MODEL [--np P] [--replicate R (dividing P)] [--dtype float32|bfloat16|"
                "float16] [--reduce-dtype D]\n"
                "                      [--optimizer adamw|sgd|none] [--accumulation] [--activations SIZE] [--json]\n"
                "MODEL: a .safetensors file, a model.safetensors.index.json, a folder with either, a GPT-2 "
                "config.json, or accel's model .json\n");
        return 2;
    }
    accel_set_default_logger(quiet_log, NULL);
    if (act_str && accel_parse_size(NULL, act_str, &act) != ACCEL_OK) {
        fprintf(stderr, "accel estimate: --activations: %s\n", accel_last_error(NULL));
        return 2;
    }
    if (read_model(&m, model) != 0) goto out;
    if (m.n == 0) { fprintf(stderr, "accel estimate: %s holds no parameters\n", model); goto out; }
    if (make_units(&m, &un) != 0) { fprintf(stderr, "accel estimate: out of memory\n"); goto out; }
    for (i = 0; i < m.n; ++i) whole += (uint64_t)accel_tensor_numel(&m.t[i]);
    {
        static const struct { const char *name; accel_zero_strategy s; int offload, hybrid; } rs[] = {
            {"DDP (NO_SHARD)", ACCEL_ZERO_NO_SHARD, 0, 0},
            {"ZeRO-1", ACCEL_ZERO_NO_SHARD, 0, 0}, /* DDP's weights and gradients, the state over the partition */
            {"ZeRO-2 (SHARD_GRAD_OP)", ACCEL_ZERO_SHARD_GRAD_OP, 0, 0},
            {"ZeRO-3 (FULL_SHARD)", ACCEL_ZERO_FULL_SHARD, 0, 0},
            {"ZeRO-3 + CPU offload", ACCEL_ZERO_FULL_SHARD, 1, 0},
            {"HYBRID_SHARD", ACCEL_ZERO_HYBRID_SHARD, 0, 1},
            {"HYBRID_SHARD_ZERO2", ACCEL_ZERO_HYBRID_SHARD_ZERO2, 0, 1}};
        int r;
        for (r = 0; r < (int)(sizeof rs / sizeof rs[0]); ++r) {
            accel_zero_fsdp_desc fd;
            accel_zero_fsdp_memory em;
            est_row *row = &rows[nrows];
            int dp_shard = rs[r].hybrid ? np / (replicate ? replicate : 1) : np;
            if (rs[r].hybrid && replicate == 0) continue;
            memset(&fd, 0, sizeof fd);
            fd.strategy = rs[r].s;
            fd.units = un.u;
            fd.nunits = un.k;
            fd.param_dtype = pdt;
            fd.reduce_dtype = rdt;
            fd.cpu_offload = rs[r].offload ? ACCEL_ON : ACCEL_OFF;
            if (accel_zero_fsdp_estimate(NULL, &fd, dp_shard, optim_states, ACCEL_F32, no_sync, &em) != ACCEL_OK) {
                fprintf(stderr, "accel estimate: %s\n", accel_last_error(NULL));
                goto out;
            }
            row->name = rs[r].name;
            row->weights = em.shards;
            row->optimizer = em.optimizer;
            row->buffers = em.gather_buffers + em.grad_buffers + em.staging;
            if (r == 1) { /* ZeRO-1: accel_zero's partition of the flattened list, ceil(N / P) per rank */
                accel_zero_partition part;
                if (accel_zero_partition_list(NULL, m.t, m.n, np, 0, &part) != ACCEL_OK) {
                    fprintf(stderr, "accel estimate: %s\n", accel_last_error(NULL));
                    goto out;
                }
                row->optimizer = (uint64_t)part.shard * (uint64_t)optim_states * 4;
            }
            row->activations = act;
            row->total = row->weights + row->optimizer + row->buffers + act;
            row->host = em.offloaded;
            ++nrows;
        }
    }
    if (json) {
        printf("{\"model\": ");
        cli_put_json_str(stdout, m.what);
        printf(", \"parameters\": %llu, \"units\": %d, \"blocks\": %d, \"num_processes\": %d, \"replicate\": %d, "
               "\"param_dtype\": \"%s\", \"reduce_dtype\": \"%s\", \"optimizer_states\": %d, \"accumulation\": %s, "
               "\"rows\": [", (unsigned long long)whole, un.k, un.blocks, np, replicate, accel_dtype_name(pdt),
               accel_dtype_name(rdt), optim_states, no_sync ? "true" : "false");
        for (i = 0; i < nrows; ++i)
            printf("%s{\"strategy\": \"%s\", \"weights_and_grads\": %llu, \"optimizer\": %llu, \"buffers\": %llu, "
                   "\"activations\": %llu, \"total\": %llu, \"pinned_host\": %llu}", i ? ", " : "",
                   rows[i].name, (unsigned long long)rows[i].weights, (unsigned long long)rows[i].optimizer,
                   (unsigned long long)rows[i].buffers, (unsigned long long)rows[i].activations,
                   (unsigned long long)rows[i].total, (unsigned long long)rows[i].host);
        printf("]}\n");
    } else {
        char a[32], b[32], c[32], d[32], e[32], f[32];
        printf("%s: %llu parameters in %d units (%d blocks + root), %d processes, param %s, reduce %s, "
               "optimizer states %d (F32)%s\n", m.what, (unsigned long long)whole, un.k, un.blocks, np,
               accel_dtype_name(pdt), accel_dtype_name(rdt), optim_states, no_sync ? ", accumulation (no_sync)" : "");
        if (replicate) printf("hybrid: shard over %d, replicate over %d\n", np / replicate, replicate);
        printf("per-rank bytes          %14s %14s %14s %14s %14s %14s\n", "weights+grads", "optimizer", "buffers",
               "activations", "total", "pinned host");
        for (i = 0; i < nrows; ++i) {
            human(a, sizeof a, rows[i].weights);
            human(b, sizeof b, rows[i].optimizer);
            human(c, sizeof c, rows[i].buffers);
            human(d, sizeof d, rows[i].activations);
            human(e, sizeof e, rows[i].total);
            human(f, sizeof f, rows[i].host);
            printf("%-23s %14s %14s %14s %14s %14s %14s\n", rows[i].name, a, b, c, d, e, f);
        }
    }
    rc = 0;
out:
    for (i = 0; i < m.n; ++i) free((void *)m.t[i].name);
    free(m.t);
    for (i = 0; un.names && i < un.k; ++i) free(un.names[i]);
    free(un.names);
    free(un.u);
    free(un.t);
    return rc;
}
