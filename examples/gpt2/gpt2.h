/* gpt2.h — the GPT-2 model description shared by gpt2_cpu.c (float32 reference) and train_gpt2.cu (CUDA, bf16):
   the configuration, the parameter layout, the initialization, the Hugging Face names and layout for import and
   export, the learning-rate schedule, the command line, and small file helpers. The math lives in the trainers.

   THE MODEL (GPT-2, Radford et al. 2019; the layout of karpathy/llm.c)
     tokens → wte[token] + wpe[position] → L pre-LN blocks → LayerNorm → logits = x · wteᵀ (tied LM head)
     block:  x = x + attn_proj(causal_self_attention(qkv(LN1(x))));  x = x + fc_proj(GELU_tanh(fc(LN2(x))))
     LayerNorm eps 1e-5, 4C hidden units, heads of C/H channels, softmax scale 1/sqrt(C/H). The vocabulary is padded to
     Vp (a multiple of 128) for aligned GEMMs: the padded rows of wte stay zero and the padded logits are ignored.

   PARAMETERS — 16 tensors, one contiguous float buffer, in this order (llm.c's; weights are [out, in] = nn.Linear):
     wte [Vp,C]  wpe [maxT,C]  ln1w ln1b [L,C]  qkvw [L,3C,C] qkvb [L,3C]  attprojw [L,C,C] attprojb [L,C]
     ln2w ln2b [L,C]  fcw [L,4C,C] fcb [L,4C]  fcprojw [L,C,4C] fcprojb [L,C]  lnfw lnfb [C]
   AdamW decays the 2-D weights only (wte, wpe, qkvw, attprojw, fcw, fcprojw), as llm.c and nanoGPT.

   HUGGING FACE FILES (--init, --export): the tensor names and layout of the hub's gpt2/model.safetensors —
     wte.weight [V,C] (unpadded), wpe.weight [maxT,C], h.<l>.ln_1.weight/.bias, h.<l>.attn.c_attn.weight [C,3C],
     h.<l>.attn.c_attn.bias, h.<l>.attn.c_proj.weight [C,C], h.<l>.attn.c_proj.bias, h.<l>.ln_2.weight/.bias,
     h.<l>.mlp.c_fc.weight [C,4C], h.<l>.mlp.c_fc.bias, h.<l>.mlp.c_proj.weight [4C,C], h.<l>.mlp.c_proj.bias,
     ln_f.weight, ln_f.bias — F32. Conv1D weights are stored [in, out], the transpose of ours. A "transformer." prefix
     (GPT2LMHeadModel.save_pretrained) is accepted on import; other tensors (attn.bias buffers, lm_head.weight) are
     ignored. The export also writes a config.json (GPT2Config), so transformers' from_pretrained(dir) loads it.

   THE OPTIMIZER: accel_optim.h's AdamW (torch.optim.AdamW's update, betas 0.9/0.95 and eps 1e-8 as llm.c), one
   parameter group per tensor so the list keeps this layout (stochastic-rounding indices are flat offsets) and only the
   2-D weights decay; transformers' cosine schedule with warmup on Accelerate's scheduler count.

   Both trainers include this file after accel.h, accel_ckpt.h, accel_data.h and accel_optim.h (C99 and C++). */
#ifndef GPT2_H_INCLUDED
#define GPT2_H_INCLUDED
#include "accel.h"
#include "accel_safetensors.h"
#include "accel_data.h"
#include "accel_optim.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------- configuration */
typedef struct gpt2_config {
    int max_seq_len;       /* block size: rows of wpe (GPT-2: 1024) */
    int vocab_size;        /* V (GPT-2: 50257) */
    int padded_vocab_size; /* Vp: V rounded up to a multiple of 128 (50304) */
    int num_layers;        /* L (12) */
    int num_heads;         /* H (12) */
    int channels;          /* C (768) */
} gpt2_config;

enum {
    GPT2_WTE, GPT2_WPE, GPT2_LN1W, GPT2_LN1B, GPT2_QKVW, GPT2_QKVB, GPT2_ATTPROJW, GPT2_ATTPROJB,
    GPT2_LN2W, GPT2_LN2B, GPT2_FCW, GPT2_FCB, GPT2_FCPROJW, GPT2_FCPROJB, GPT2_LNFW, GPT2_LNFB, GPT2_NUM_TENSORS
};

static const char *const gpt2_tensor_names[GPT2_NUM_TENSORS] = {
    "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};

/* GPT-2 124M. */
static inline void gpt2_config_default(gpt2_config *c) {
    c->max_seq_len = 1024;
    c->vocab_size = 50257;
    c->num_layers = 12;
    c->num_heads = 12;
    c->channels = 768;
    c->padded_vocab_size = (c->vocab_size + 127) / 128 * 128;
}

/* The shapes of the 16 tensors (ndim, shape) and their element counts; returns the total. */
static inline size_t gpt2_shapes(const gpt2_config *c, int ndim[GPT2_NUM_TENSORS], int64_t shape[GPT2_NUM_TENSORS][3],
                          size_t numel[GPT2_NUM_TENSORS]) {
    int64_t L = c->num_layers, C = c->channels;
    int64_t s[GPT2_NUM_TENSORS][3] = {
        {c->padded_vocab_size, C, 0}, {c->max_seq_len, C, 0}, {L, C, 0}, {L, C, 0}, {L, 3 * C, C}, {L, 3 * C, 0},
        {L, C, C}, {L, C, 0}, {L, C, 0}, {L, C, 0}, {L, 4 * C, C}, {L, 4 * C, 0}, {L, C, 4 * C}, {L, C, 0},
        {C, 0, 0}, {C, 0, 0}};
    int nd[GPT2_NUM_TENSORS] = {2, 2, 2, 2, 3, 2, 3, 2, 2, 2, 3, 2, 3, 2, 1, 1};
    size_t total = 0;
    int i, k;
    for (i = 0; i < GPT2_NUM_TENSORS; ++i) {
        size_t n = 1;
        for (k = 0; k < nd[i]; ++k) n *= (size_t)s[i][k];
        if (ndim) ndim[i] = nd[i];
        if (shape) for (k = 0; k < 3; ++k) shape[i][k] = s[i][k];
        if (numel) numel[i] = n;
        total += n;
    }
    return total;
}

/* Element offsets of the 16 tensors in the flat buffer (offset[16] = total). */
static inline size_t gpt2_offsets(const gpt2_config *c, size_t offset[GPT2_NUM_TENSORS + 1]) {
    size_t numel[GPT2_NUM_TENSORS];
    int i;
    gpt2_shapes(c, NULL, NULL, numel);
    offset[0] = 0;
    for (i = 0; i < GPT2_NUM_TENSORS; ++i) offset[i + 1] = offset[i] + numel[i];
    return offset[GPT2_NUM_TENSORS];
}

/* Weight decay applies to the 2-D weight matrices only. */
static inline int gpt2_decays(int tensor) {
    return tensor == GPT2_WTE || tensor == GPT2_WPE || tensor == GPT2_QKVW || tensor == GPT2_ATTPROJW ||
           tensor == GPT2_FCW || tensor == GPT2_FCPROJW;
}

/* accel descriptors of the 16 tensors of a flat buffer of dtype dt (F32 master weights and gradients, the BF16 model
   copy) for the reducer, the norm, the optimizer and the checkpoints. */
static inline void gpt2_describe(const gpt2_config *c, void *base, accel_dtype dt, accel_tensor out[GPT2_NUM_TENSORS]) {
    int ndim[GPT2_NUM_TENSORS], i, k;
    int64_t shape[GPT2_NUM_TENSORS][3];
    size_t off[GPT2_NUM_TENSORS + 1];
    gpt2_shapes(c, ndim, shape, NULL);
    gpt2_offsets(c, off);
    for (i = 0; i < GPT2_NUM_TENSORS; ++i) {
        memset(&out[i], 0, sizeof out[i]);
        out[i].name = gpt2_tensor_names[i];
        out[i].ptr = (char *)base + off[i] * accel_dtype_size(dt);
        out[i].dtype = dt;
        out[i].ndim = ndim[i];
        for (k = 0; k < ndim[i]; ++k) out[i].shape[k] = shape[i][k];
    }
}

/* Parameters counted as computed (padded vocabulary included, as llm.c counts them). */
static inline size_t gpt2_num_parameters(const gpt2_config *c) { return gpt2_shapes(c, NULL, NULL, NULL); }

/* Model FLOPs per trained token, forward + backward: 6N for the weights plus 6·L·C·T for attention
   (llm.c's / PaLM's count; MFU = this · tokens/s ÷ peak). */
static inline double gpt2_flops_per_token(const gpt2_config *c, int T) {
    return 6.0 * (double)gpt2_num_parameters(c) + 6.0 * c->num_layers * (double)c->channels * T;
}

/* ------------------------------------------------------------------------------------------- initialization */
/* GPT-2's initialization: weights N(0, 0.02), the two residual projections N(0, 0.02/sqrt(2L)), biases 0,
   LayerNorm gains 1. The normals come from the core's Philox stream (accel_rng_draw4(seed, tensor, i/2), Box-Muller
   in double), so every rank, both trainers and any thread count draw the same weights. The padded rows of wte are 0. */
static inline void gpt2_init_params(const gpt2_config *c, float *params, uint64_t seed) {
    size_t off[GPT2_NUM_TENSORS + 1], i;
    int t;
    gpt2_offsets(c, off);
    for (t = 0; t < GPT2_NUM_TENSORS; ++t) {
        float *p = params + off[t];
        size_t n = off[t + 1] - off[t];
        double std = 0.02;
        if (t == GPT2_LN1W || t == GPT2_LN2W || t == GPT2_LNFW) {
            for (i = 0; i < n; ++i) p[i] = 1.0f;
            continue;
        }
        if (!gpt2_decays(t)) { /* biases */
            memset(p, 0, n * sizeof *p);
            continue;
        }
        if (t == GPT2_ATTPROJW || t == GPT2_FCPROJW) std = 0.02 / sqrt(2.0 * c->num_layers);
        if (t == GPT2_WTE) n = (size_t)c->vocab_size * c->channels;
        for (i = 0; i < n; i += 2) {
            uint32_t w[4];
            double u1, u2, r;
            accel_rng_draw4(seed, (uint64_t)t, (uint64_t)(i / 2), w);
            u1 = ((double)w[0] + 0.5) / 4294967296.0;
            u2 = ((double)w[1] + 0.5) / 4294967296.0;
            r = sqrt(-2.0 * log(u1));
            p[i] = (float)(std * r * cos(6.283185307179586 * u2));
            if (i + 1 < n) p[i + 1] = (float)(std * r * sin(6.283185307179586 * u2));
        }
        if (t == GPT2_WTE) memset(p + n, 0, (off[t + 1] - off[t] - n) * sizeof *p);
    }
}

/* --------------------------------------------------------------------------------------- Hugging Face names */
typedef struct gpt2_hf_tensor {
    char name[48];
    int tensor;          /* GPT2_* */
    int layer;           /* -1 for the non-layer tensors */
    int rows, cols;      /* our block: rows x cols (row-major; a vector is 1 x cols) */
    int transpose;       /* Conv1D weights: HF stores cols x rows */
} gpt2_hf_tensor;

#define GPT2_HF_MAX_LAYERS 256
/* The 4 + 12L tensors of a Hugging Face GPT-2 file; returns their count. */
static inline int gpt2_hf_tensors(const gpt2_config *c, gpt2_hf_tensor *out) {
    static const struct { const char *suffix; int tensor, rows_mult, cols_mult, transpose; } per_layer[12] = {
        {"ln_1.weight", GPT2_LN1W, 0, 1, 0},      {"ln_1.bias", GPT2_LN1B, 0, 1, 0},
        {"attn.c_attn.weight", GPT2_QKVW, 3, 1, 1}, {"attn.c_attn.bias", GPT2_QKVB, 0, 3, 0},
        {"attn.c_proj.weight", GPT2_ATTPROJW, 1, 1, 1}, {"attn.c_proj.bias", GPT2_ATTPROJB, 0, 1, 0},
        {"ln_2.weight", GPT2_LN2W, 0, 1, 0},      {"ln_2.bias", GPT2_LN2B, 0, 1, 0},
        {"mlp.c_fc.weight", GPT2_FCW, 4, 1, 1},   {"mlp.c_fc.bias", GPT2_FCB, 0, 4, 0},
        {"mlp.c_proj.weight", GPT2_FCPROJW, 1, 4, 1}, {"mlp.c_proj.bias", GPT2_FCPROJB, 0, 1, 0}};
    int n = 0, l, k, C = c->channels;
    gpt2_hf_tensor *e;
#define GPT2_HF_ADD(nm, t, ly, r, cl, tr)                                                                            \
    do {                                                                                                             \
        e = &out[n++];                                                                                               \
        snprintf(e->name, sizeof e->name, "%s", nm);                                                                 \
        e->tensor = (t); e->layer = (ly); e->rows = (r); e->cols = (cl); e->transpose = (tr);                        \
    } while (0)
    GPT2_HF_ADD("wte.weight", GPT2_WTE, -1, c->vocab_size, C, 0);
    GPT2_HF_ADD("wpe.weight", GPT2_WPE, -1, c->max_seq_len, C, 0);
    for (l = 0; l < c->num_layers; ++l)
        for (k = 0; k < 12; ++k) {
            char nm[48];
            snprintf(nm, sizeof nm, "h.%d.%s", l, per_layer[k].suffix);
            GPT2_HF_ADD(nm, per_layer[k].tensor, l, per_layer[k].rows_mult ? per_layer[k].rows_mult * C : 1,
                        per_layer[k].cols_mult * C, per_layer[k].transpose);
        }
    GPT2_HF_ADD("ln_f.weight", GPT2_LNFW, -1, 1, C, 0);
    GPT2_HF_ADD("ln_f.bias", GPT2_LNFB, -1, 1, C, 0);
#undef GPT2_HF_ADD
    return n;
}

/* Where an HF tensor's block starts in our flat buffer. */
static inline size_t gpt2_hf_block(const gpt2_config *c, const gpt2_hf_tensor *e) {
    size_t off[GPT2_NUM_TENSORS + 1];
    gpt2_offsets(c, off);
    if (e->layer < 0) return off[e->tensor];
    return off[e->tensor] + (size_t)e->layer * ((off[e->tensor + 1] - off[e->tensor]) / (size_t)c->num_layers);
}

/* Our flat buffer → HF tensors in `hf` (sum of rows*cols floats), descriptors in out[] (names point into e[]). */
static inline int gpt2_to_hf(const gpt2_config *c, const float *params, float *hf, gpt2_hf_tensor *e, accel_tensor *out) {
    int n = gpt2_hf_tensors(c, e), k;
    size_t pos = 0;
    for (k = 0; k < n; ++k) {
        const float *src = params + gpt2_hf_block(c, &e[k]);
        float *dst = hf + pos;
        int r, col;
        if (e[k].transpose) {
            for (r = 0; r < e[k].rows; ++r)
                for (col = 0; col < e[k].cols; ++col) dst[(size_t)col * e[k].rows + r] = src[(size_t)r * e[k].cols + col];
        } else {
            memcpy(dst, src, (size_t)e[k].rows * e[k].cols * sizeof(float));
        }
        memset(&out[k], 0, sizeof out[k]);
        out[k].name = e[k].name;
        out[k].ptr = dst;
        out[k].dtype = ACCEL_F32;
        if (e[k].rows == 1) {
            out[k].ndim = 1;
            out[k].shape[0] = e[k].cols;
        } else {
            out[k].ndim = 2;
            out[k].shape[0] = e[k].transpose ? e[k].cols : e[k].rows;
            out[k].shape[1] = e[k].transpose ? e[k].rows : e[k].cols;
        }
        pos += (size_t)e[k].rows * e[k].cols;
    }
    return n;
}

/* Writes an HF config.json for the model into dir (main process only; C string, no accel needed). */
static inline int gpt2_write_hf_config(const gpt2_config *c, const char *dir) {
    char path[4096];
    FILE *f;
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (!(f = fopen(path, "w"))) return -1;
    fprintf(f, "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n"
               "  \"activation_function\": \"gelu_new\",\n  \"layer_norm_epsilon\": 1e-05,\n"
               "  \"n_ctx\": %d,\n  \"n_positions\": %d,\n  \"n_embd\": %d,\n  \"n_head\": %d,\n  \"n_layer\": %d,\n"
               "  \"vocab_size\": %d,\n  \"tie_word_embeddings\": true\n}\n",
            c->max_seq_len, c->max_seq_len, c->channels, c->num_heads, c->num_layers, c->vocab_size);
    return fclose(f) == 0 ? 0 : -1;
}

/* save_model with HF names (collective): params is a host copy of the fp32 weights. */
static inline accel_result gpt2_export(accel *acc, const gpt2_config *c, const float *params, const char *dir) {
    int nmax = 4 + 12 * c->num_layers, n;
    gpt2_hf_tensor *e = (gpt2_hf_tensor *)accel_host_alloc(acc, (size_t)nmax * sizeof *e);
    accel_tensor *t = (accel_tensor *)accel_host_alloc(acc, (size_t)nmax * sizeof *t);
    float *hf = (float *)accel_host_alloc(acc, gpt2_num_parameters(c) * sizeof(float));
    accel_result r;
    if (!e || !t || !hf) {
        accel_host_free(acc, e); accel_host_free(acc, t); accel_host_free(acc, hf);
        return accel_set_error(acc, ACCEL_ERR_OUT_OF_MEMORY, "gpt2_export: out of host memory");
    }
    n = gpt2_to_hf(c, params, hf, e, t);
    r = accel_st_save_model(acc, dir, t, n, NULL);
    if (r == ACCEL_OK && acc->is_main_process && gpt2_write_hf_config(c, dir) != 0)
        r = accel_set_error(acc, ACCEL_ERR_IO, "gpt2_export: cannot write %s/config.json", dir);
    accel_host_free(acc, e); accel_host_free(acc, t); accel_host_free(acc, hf);
    return r;
}

/* Gradients (or any flat buffer) as an HF-named safetensors file, written by this process (tests: --dump-grads). */
static inline accel_result gpt2_save_hf_file(accel *acc, const gpt2_config *c, const float *params, const char *path) {
    int nmax = 4 + 12 * c->num_layers, n;
    gpt2_hf_tensor *e = (gpt2_hf_tensor *)accel_host_alloc(acc, (size_t)nmax * sizeof *e);
    accel_tensor *t = (accel_tensor *)accel_host_alloc(acc, (size_t)nmax * sizeof *t);
    float *hf = (float *)accel_host_alloc(acc, gpt2_num_parameters(c) * sizeof(float));
    accel_result r = ACCEL_ERR_OUT_OF_MEMORY;
    if (e && t && hf) {
        n = gpt2_to_hf(c, params, hf, e, t);
        r = accel_st_save(acc, path, t, n, NULL, 0);
    } else {
        accel_set_error(acc, r, "gpt2_save_hf_file: out of host memory");
    }
    accel_host_free(acc, e); accel_host_free(acc, t); accel_host_free(acc, hf);
    return r;
}

/* Reads the model shape of an HF GPT-2 file: V, C (wte), maxT (wpe), L (h.<l>.* present); the heads come from the
   caller (the file does not say; config.json does). prefix receives "" or "transformer.". */
static inline accel_result gpt2_hf_probe(accel *acc, accel_st_file *f, gpt2_config *c, char prefix[16]) {
    const char *pre[2] = {"", "transformer."};
    char nm[80];
    int p, i;
    for (p = 0; p < 2; ++p) {
        snprintf(nm, sizeof nm, "%swte.weight", pre[p]);
        if ((i = accel_st_file_find(f, nm)) >= 0) break;
    }
    if (p == 2) return accel_set_error(acc, ACCEL_ERR_FORMAT, "--init: no wte.weight: not a GPT-2 file");
    snprintf(prefix, 16, "%s", pre[p]);
    {
        const accel_st_entry *wte = accel_st_file_entry(f, i), *wpe;
        snprintf(nm, sizeof nm, "%swpe.weight", prefix);
        if ((i = accel_st_file_find(f, nm)) < 0) return accel_set_error(acc, ACCEL_ERR_FORMAT, "--init: no wpe.weight");
        wpe = accel_st_file_entry(f, i);
        if (wte->ndim != 2 || wpe->ndim != 2 || wte->shape[1] != wpe->shape[1])
            return accel_set_error(acc, ACCEL_ERR_FORMAT, "--init: wte.weight / wpe.weight have unexpected shapes");
        c->vocab_size = (int)wte->shape[0];
        c->channels = (int)wte->shape[1];
        c->max_seq_len = (int)wpe->shape[0];
    }
    for (c->num_layers = 0; c->num_layers < GPT2_HF_MAX_LAYERS; ++c->num_layers) {
        snprintf(nm, sizeof nm, "%sh.%d.ln_1.weight", prefix, c->num_layers);
        if (accel_st_file_find(f, nm) < 0) break;
    }
    c->padded_vocab_size = (c->vocab_size + 127) / 128 * 128;
    return ACCEL_OK;
}

/* Loads an HF GPT-2 file into our flat buffer (every tensor checked: F32, shape; padded wte rows zeroed). */
static inline accel_result gpt2_hf_load(accel *acc, accel_st_file *f, const gpt2_config *c, const char *prefix,
                                 float *params) {
    int nmax = 4 + 12 * c->num_layers, n, k;
    gpt2_hf_tensor *e = (gpt2_hf_tensor *)accel_host_alloc(acc, (size_t)nmax * sizeof *e);
    accel_result r = ACCEL_OK;
    size_t off[GPT2_NUM_TENSORS + 1];
    if (!e) return accel_set_error(acc, ACCEL_ERR_OUT_OF_MEMORY, "--init: out of host memory");
    gpt2_offsets(c, off);
    n = gpt2_hf_tensors(c, e);
    for (k = 0; k < n && r == ACCEL_OK; ++k) {
        char nm[80];
        int i, row, col, R = e[k].rows, Cn = e[k].cols;
        int64_t want0 = R == 1 ? Cn : (e[k].transpose ? Cn : R), want1 = e[k].transpose ? R : Cn;
        const accel_st_entry *en;
        const unsigned char *src;
        float *dst = params + gpt2_hf_block(c, &e[k]);
        snprintf(nm, sizeof nm, "%s%s", prefix, e[k].name);
        if ((i = accel_st_file_find(f, nm)) < 0) {
            r = accel_set_error(acc, ACCEL_ERR_FORMAT, "--init: tensor %s is missing", nm);
            break;
        }
        en = accel_st_file_entry(f, i);
        if (en->dtype != ACCEL_F32 || en->ndim != (R == 1 ? 1 : 2) || en->shape[0] != want0 ||
            (R != 1 && en->shape[1] != want1)) {
            r = accel_set_error(acc, ACCEL_ERR_FORMAT, "--init: %s has dtype %s and shape [%lld%s%lld], expected F32 "
                                "[%lld%s%lld]", nm, accel_dtype_name(en->dtype), (long long)en->shape[0],
                                en->ndim > 1 ? ", " : "", en->ndim > 1 ? (long long)en->shape[1] : 0LL,
                                (long long)want0, R != 1 ? ", " : "", R != 1 ? (long long)want1 : 0LL);
            break;
        }
        src = (const unsigned char *)en->data;
        for (row = 0; row < R; ++row)
            for (col = 0; col < Cn; ++col) {
                size_t at = e[k].transpose ? (size_t)col * R + row : (size_t)row * Cn + col;
                memcpy(&dst[(size_t)row * Cn + col], src + at * 4, 4); /* little-endian host */
            }
    }
    if (r == ACCEL_OK) /* padded vocabulary rows */
        memset(params + off[GPT2_WTE] + (size_t)c->vocab_size * c->channels, 0,
               (size_t)(c->padded_vocab_size - c->vocab_size) * c->channels * sizeof(float));
    accel_host_free(acc, e);
    return r;
}

/* n_head from a config.json next to an HF weights file (0 if there is none). */
static inline int gpt2_hf_config_heads(const char *weights_path) {
    char path[4096], buf[8192];
    const char *slash = strrchr(weights_path, '/'), *p;
    size_t n;
    FILE *f;
    if (slash) snprintf(path, sizeof path, "%.*s/config.json", (int)(slash - weights_path), weights_path);
    else snprintf(path, sizeof path, "config.json");
    if (!(f = fopen(path, "rb"))) return 0;
    n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    if (!(p = strstr(buf, "\"n_head\""))) return 0;
    p = strchr(p + 8, ':');
    return p ? atoi(p + 1) : 0;
}

/* ----------------------------------------------------------------------------------------------- optimizer */
/* AdamW over the 16 tensors (model: the BF16 copies the step writes, or NULL), lr 0 allowed (--lr 0). */
static inline accel_result gpt2_optim_create(accel *acc, const accel_tensor *params, const accel_tensor *grads,
                                             const accel_tensor *model, double lr, double weight_decay, int sr,
                                             uint64_t seed, accel_optim **out) {
    accel_optim_group g[GPT2_NUM_TENSORS];
    accel_optim_desc d;
    int k;
    memset(g, 0, sizeof g);
    memset(&d, 0, sizeof d);
    for (k = 0; k < GPT2_NUM_TENSORS; ++k) {
        g[k].count = 1;
        g[k].weight_decay = gpt2_decays(k) ? weight_decay : 0.0;
    }
    d.algorithm = ACCEL_OPTIM_ADAMW;
    d.params = params;
    d.grads = grads;
    d.model = model;
    d.nparams = GPT2_NUM_TENSORS;
    d.groups = g;
    d.ngroups = GPT2_NUM_TENSORS;
    d.lr = lr > 0 ? lr : ACCEL_OPTIM_ZERO;
    d.beta1 = 0.9;
    d.beta2 = 0.95;
    d.eps = 1e-8;
    d.model_rounding = sr ? ACCEL_OPTIM_ROUND_STOCHASTIC : ACCEL_OPTIM_ROUND_NEAREST;
    d.sr_seed = seed;
    return accel_optim_create(acc, &d, out);
}

/* transformers' get_cosine_schedule_with_warmup (warmup and length in optimizer steps), read at Accelerate's
   scheduler count: acc.scheduler_steps advances num_processes per taken step (AcceleratedScheduler), so the
   schedule's units are scaled by P and the LR of an optimizer step does not depend on the number of processes. */
static inline accel_optim_schedule gpt2_schedule(int64_t warmup, int64_t steps, int num_processes) {
    accel_optim_schedule s;
    memset(&s, 0, sizeof s);
    s.kind = ACCEL_OPTIM_SCHEDULE_COSINE;
    s.warmup_steps = warmup * num_processes;
    s.total_steps = steps * num_processes;
    return s;
}

/* ------------------------------------------------------------------------------------------- command line */
#define GPT2_MAX_FILES 64
typedef struct gpt2_opts {
    const char *init, *data[GPT2_MAX_FILES], *loss_file, *export_dir, *ckpt_dir, *log_dir, *dump_grads, *profile_dir;
    int ndata, steps, batch, seq, accum, warmup, layers, heads, channels, vocab, block_size, ckpt_every, resume;
    int print_every, kill_at, shuffle, sr, bench_noop;
    double lr, weight_decay, clip, peak_tflops;
    uint64_t seed;
} gpt2_opts;

static inline void gpt2_usage(const char *prog) {
    fprintf(stderr,
            "usage: %s --data SHARD [SHARD ...] [options]       (llm.c token shards, e.g. --data fineweb_train_*.bin)\n"
            "       %s --gen-shard PATH NTOKENS VOCAB      (a synthetic llm.c uint16 shard: a Markov chain)\n"
            "model (default GPT-2 124M: --layers 12 --heads 12 --channels 768 --vocab 50257 --block-size 1024)\n"
            "  --init FILE.safetensors  start from these weights (Hugging Face GPT-2 names; sets L, C, V, block size;\n"
            "                           heads from a config.json beside it, else --heads)\n"
            "  --layers L --heads H --channels C --vocab V --block-size N\n"
            "training\n"
            "  --batch B                per-process micro-batch (default 4)\n"
            "  --seq T                  sequence length (default 1024; at most the block size)\n"
            "  --accum A                gradient accumulation steps (default 1)\n"
            "  --steps N                optimizer steps (default 10)\n"
            "  --lr X --warmup N        peak LR (default 3e-4), linear warmup steps, then cosine decay to 0\n"
            "  --weight-decay X         AdamW decay of the 2-D weights (default 0); betas 0.9/0.95, eps 1e-8\n"
            "  --clip X                 max global gradient norm (default 1; 0 = off)\n"
            "  --seed S                 initialization seed (default 1337)\n"
            "  --shuffle                shuffle the token windows per epoch (default: llm.c's sequential order)\n"
            "  --sr                     (CUDA) stochastic rounding of the bf16 weights\n"
            "output\n"
            "  --loss-file F            one line per optimizer step: step loss lr\n"
            "  --export DIR             save_model at the end: DIR/model.safetensors (HF names) + config.json\n"
            "  --checkpoint-dir D --checkpoint-every N --resume   save_state / load_state (D/checkpoints/...)\n"
            "  --log-dir DIR            TensorBoard + JSONL logs\n"
            "  --print-every N          progress line every N steps (default 1)\n"
            "  --profile DIR            phase table at the end + Chrome traces DIR/profile_<rank>.json (accel_profile.h;\n"
            "                           several ranks: DIR/profile_merged.json too; open in ui.perfetto.dev)\n"
            "  --peak-tflops X          peak FLOP/s for MFU (default: H100/H200 989, A100 312, else none)\n"
            "testing\n"
            "  --kill-at N              SIGKILL every rank after step N (resume tests)\n"
            "  --dump-grads FILE        the first step's reduced gradients (before clipping) as HF safetensors\n"
            "  --bench-noop-accel       benchmark: accel's calls in the step replaced by no-ops (one batch, no accumulation,\n"
            "                           sync, clipping, schedule or logs); both trainers print a summary: JSON line\n",
            prog, prog);
}

/* A synthetic uint16 llm.c shard: a first-order Markov chain in which each token has two likely successors
   (the best possible loss is ln 2). */
static inline int gpt2_gen_shard(const char *prog, const char *path, long ntok, int vocab) {
    int32_t header[256];
    FILE *f = fopen(path, "wb");
    uint64_t s = 12345;
    long i;
    uint16_t tok = 1;
    if (!f || vocab < 2 || vocab > 65535 || ntok < 2) {
        fprintf(stderr, "%s: --gen-shard: bad arguments or cannot write %s\n", prog, path);
        if (f) fclose(f);
        return 1;
    }
    memset(header, 0, sizeof header);
    header[0] = ACCEL_DATA_GPT2_MAGIC;
    header[1] = ACCEL_DATA_GPT2_VERSION;
    header[2] = (int32_t)ntok;
    fwrite(header, sizeof header, 1, f);
    for (i = 0; i < ntok; ++i) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        fwrite(&tok, sizeof tok, 1, f);
        tok = (uint16_t)(((uint32_t)tok * 7u + ((s >> 33) & 1u ? 3u : 11u)) % (uint32_t)vocab);
    }
    if (fclose(f) != 0) return 1;
    printf("wrote %s: %ld tokens, vocab %d\n", path, ntok, vocab);
    return 0;
}

/* Returns -1 to go on, else the exit status (--help, --gen-shard, a bad option). */
static inline int gpt2_parse_args(int argc, char **argv, gpt2_opts *o) {
    const char *prog = argv[0];
    int i;
    memset(o, 0, sizeof *o);
    o->steps = 10; o->batch = 4; o->seq = 1024; o->accum = 1; o->lr = 3e-4; o->clip = 1.0; o->seed = 1337;
    o->print_every = 1;
    for (i = 1; i < argc; ++i) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--gen-shard")) {
            if (i + 3 >= argc) { gpt2_usage(prog); return 2; }
            return gpt2_gen_shard(prog, argv[i + 1], atol(argv[i + 2]), atoi(argv[i + 3]));
        }
#define GPT2_ARG(name) (!strcmp(a, name) && v && (++i, 1))
        if (!strcmp(a, "--data")) { /* --data A [B ...]: every following argument up to the next option */
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) {
                if (o->ndata == GPT2_MAX_FILES) {
                    fprintf(stderr, "%s: at most %d --data files\n", prog, GPT2_MAX_FILES);
                    return 2;
                }
                o->data[o->ndata++] = argv[++i];
            }
        }
        else if (GPT2_ARG("--init")) o->init = v;
        else if (GPT2_ARG("--steps")) o->steps = atoi(v);
        else if (GPT2_ARG("--batch")) o->batch = atoi(v);
        else if (GPT2_ARG("--seq")) o->seq = atoi(v);
        else if (GPT2_ARG("--accum")) o->accum = atoi(v);
        else if (GPT2_ARG("--lr")) o->lr = atof(v);
        else if (GPT2_ARG("--warmup")) o->warmup = atoi(v);
        else if (GPT2_ARG("--weight-decay")) o->weight_decay = atof(v);
        else if (GPT2_ARG("--clip")) o->clip = atof(v);
        else if (GPT2_ARG("--layers")) o->layers = atoi(v);
        else if (GPT2_ARG("--heads")) o->heads = atoi(v);
        else if (GPT2_ARG("--channels")) o->channels = atoi(v);
        else if (GPT2_ARG("--vocab")) o->vocab = atoi(v);
        else if (GPT2_ARG("--block-size")) o->block_size = atoi(v);
        else if (GPT2_ARG("--loss-file")) o->loss_file = v;
        else if (GPT2_ARG("--export")) o->export_dir = v;
        else if (GPT2_ARG("--checkpoint-dir")) o->ckpt_dir = v;
        else if (GPT2_ARG("--checkpoint-every")) o->ckpt_every = atoi(v);
        else if (GPT2_ARG("--log-dir")) o->log_dir = v;
        else if (GPT2_ARG("--profile")) o->profile_dir = v;
        else if (GPT2_ARG("--print-every")) o->print_every = atoi(v);
        else if (GPT2_ARG("--seed")) o->seed = strtoull(v, NULL, 10);
        else if (GPT2_ARG("--kill-at")) o->kill_at = atoi(v);
        else if (GPT2_ARG("--dump-grads")) o->dump_grads = v;
        else if (GPT2_ARG("--peak-tflops")) o->peak_tflops = atof(v);
        else if (!strcmp(a, "--resume")) o->resume = 1;
        else if (!strcmp(a, "--shuffle")) o->shuffle = 1;
        else if (!strcmp(a, "--sr")) o->sr = 1;
        else if (!strcmp(a, "--bench-noop-accel")) o->bench_noop = 1;
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) { gpt2_usage(prog); return 0; }
        else { fprintf(stderr, "%s: unknown or incomplete option %s\n", prog, a); gpt2_usage(prog); return 2; }
#undef GPT2_ARG
    }
    if (o->ndata == 0 || o->steps < 0 || o->batch < 1 || o->seq < 1 || o->accum < 1 || o->warmup < 0 ||
        o->layers < 0 || o->heads < 0 || o->channels < 0 || o->vocab < 0 || o->block_size < 0 || o->ckpt_every < 0 ||
        o->print_every < 0 || o->kill_at < 0 || o->lr < 0 || o->clip < 0) {
        fprintf(stderr, "%s: need --data and non-negative sizes (see --help)\n", prog);
        return 2;
    }
    if ((o->resume || o->kill_at) && !o->ckpt_dir) {
        fprintf(stderr, "%s: --resume and --kill-at need --checkpoint-dir\n", prog);
        return 2;
    }
    return -1;
}

/* The model configuration from --init (its shapes) and the command line; 0 or an error printed. f may be NULL. */
static inline int gpt2_resolve_config(accel *acc, const gpt2_opts *o, accel_st_file *f, gpt2_config *c, char prefix[16]) {
    const char *prog = "gpt2";
    gpt2_config_default(c);
    prefix[0] = 0;
    if (f) {
        int heads = gpt2_hf_config_heads(o->init);
        if (gpt2_hf_probe(acc, f, c, prefix) != ACCEL_OK) {
            fprintf(stderr, "%s: %s\n", prog, accel_last_error(acc));
            return -1;
        }
        if (heads > 0) c->num_heads = heads;
        if ((o->layers && o->layers != c->num_layers) || (o->channels && o->channels != c->channels) ||
            (o->vocab && o->vocab != c->vocab_size) || (o->block_size && o->block_size != c->max_seq_len) ||
            (o->heads && heads > 0 && o->heads != heads)) {
            fprintf(stderr, "%s: --init %s holds L=%d H=%d C=%d V=%d block %d; the command line disagrees\n", prog,
                    o->init, c->num_layers, c->num_heads, c->channels, c->vocab_size, c->max_seq_len);
            return -1;
        }
        if (o->heads) c->num_heads = o->heads;
    } else {
        if (o->layers) c->num_layers = o->layers;
        if (o->heads) c->num_heads = o->heads;
        if (o->channels) c->channels = o->channels;
        if (o->vocab) c->vocab_size = o->vocab;
        if (o->block_size) c->max_seq_len = o->block_size;
        else if (o->seq > c->max_seq_len) c->max_seq_len = o->seq;
        c->padded_vocab_size = (c->vocab_size + 127) / 128 * 128;
    }
    if (c->num_layers < 1 || c->num_heads < 1 || c->channels < 1 || c->channels % c->num_heads || c->vocab_size < 2 ||
        c->max_seq_len < 1 || o->seq > c->max_seq_len) {
        fprintf(stderr, "%s: bad model: L=%d H=%d C=%d (C must be a multiple of H) V=%d block %d, seq %d (at most the "
                        "block size)\n", prog, c->num_layers, c->num_heads, c->channels, c->vocab_size,
                c->max_seq_len, o->seq);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------------ helpers */
/* The loss file: a fresh run truncates it; a resumed run keeps the lines of the steps up to `step` (those of the
   killed run beyond the checkpoint go) and appends. NULL on failure. */
static inline FILE *gpt2_open_loss_file(const char *path, int resume, int64_t step) {
    FILE *f;
    if (resume && (f = fopen(path, "r"))) {
        char line[256];
        size_t cap = 1 << 16, len = 0;
        char *keep = (char *)malloc(cap);
        if (!keep) { fclose(f); return NULL; }
        while (fgets(line, sizeof line, f)) {
            size_t n = strlen(line);
            if (atoll(line) > step) break;
            if (len + n + 1 > cap) {
                char *p = (char *)realloc(keep, cap *= 2);
                if (!p) { free(keep); fclose(f); return NULL; }
                keep = p;
            }
            memcpy(keep + len, line, n);
            len += n;
        }
        fclose(f);
        if ((f = fopen(path, "w"))) fwrite(keep, 1, len, f);
        free(keep);
        return f;
    }
    return fopen(path, "w");
}

/* Every token of a batch must be < V (a shard of another tokenizer is an error, not a crash). */
static inline int gpt2_check_tokens(const int32_t *tok, size_t n, int V, int32_t *bad) {
    size_t i;
    for (i = 0; i < n; ++i)
        if (tok[i] < 0 || tok[i] >= V) { *bad = tok[i]; return -1; }
    return 0;
}

#endif /* GPT2_H_INCLUDED */
