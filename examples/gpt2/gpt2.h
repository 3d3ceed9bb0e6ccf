/* gpt2.h — what the two GPT-2 trainers share: gpt2_cpu.c (float32 reference) and train_gpt2.cu (CUDA, bf16). The
   model description (configuration, parameter layout, initialization), the Hugging Face names, layout and config.json
   for import and export, the learning-rate schedule, the command line, and the run around the model (accel's setup,
   the step's bookkeeping, logs, checkpoints, the test hooks). The model's math lives in the trainers.

   THE MODEL (GPT-2, Radford et al. 2019; the layout of karpathy/llm.c)
     tokens → wte[token] + wpe[position] → L pre-LN blocks → LayerNorm → logits = x · wteᵀ (tied LM head)
     block:  x = x + attn_proj(causal_self_attention(qkv(LN1(x))));  x = x + fc_proj(GELU_tanh(fc(LN2(x))))
     LayerNorm eps 1e-5, 4C hidden units, heads of C/H channels, softmax scale 1/sqrt(C/H), no dropout. The vocabulary
     is padded to Vp (a multiple of 128) for aligned GEMMs: the padded rows of wte stay zero, padded logits are ignored.

   PARAMETERS — 16 tensors, one contiguous float buffer, in this order (llm.c's; weights are [out, in] = nn.Linear):
     wte [Vp,C]  wpe [maxT,C]  ln1w ln1b [L,C]  qkvw [L,3C,C] qkvb [L,3C]  attprojw [L,C,C] attprojb [L,C]
     ln2w ln2b [L,C]  fcw [L,4C,C] fcb [L,4C]  fcprojw [L,C,4C] fcprojb [L,C]  lnfw lnfb [C]
   AdamW decays the 2-D weights only (wte, wpe, qkvw, attprojw, fcw, fcprojw), as llm.c and nanoGPT.

   HUGGING FACE FILES (--init, --export): the tensor names and layout of the hub's gpt2/model.safetensors —
     wte.weight [V,C] (unpadded), wpe.weight [maxT,C], h.<l>.ln_1.weight/.bias, h.<l>.attn.c_attn.weight [C,3C],
     h.<l>.attn.c_attn.bias, h.<l>.attn.c_proj.weight [C,C], h.<l>.attn.c_proj.bias, h.<l>.ln_2.weight/.bias,
     h.<l>.mlp.c_fc.weight [C,4C], h.<l>.mlp.c_fc.bias, h.<l>.mlp.c_proj.weight [4C,C], h.<l>.mlp.c_proj.bias,
     ln_f.weight, ln_f.bias — F32. Conv1D weights are stored [in, out], the transpose of ours. A "transformer." prefix
     (GPT2LMHeadModel.save_pretrained) is accepted on import; other tensors (attn.bias buffers, a tied lm_head.weight)
     are ignored. --init takes a folder (model.safetensors + config.json) or a .safetensors file (config.json beside
     it, optional): the tensors give L, C, V and the block size, config.json gives H and must describe this model —
     every GPT2Config field that changes the math is checked and a refusal names it (activation_function a tanh GELU,
     layer_norm_epsilon 1e-5, tie_word_embeddings, scale_attn_weights, scale_attn_by_inverse_layer_idx, n_inner,
     add_cross_attention, pruned_heads, model_type, the sizes against the tensors; see gpt2_hf_config_check). Without
     config.json, an lm_head.weight that differs from wte.weight is refused. The export writes model.safetensors and a
     config.json that transformers' from_pretrained(dir) loads (bos/eos token ids inside the vocabulary, or null).

   THE OPTIMIZER: accel_optim.h's AdamW (torch.optim.AdamW's update, betas 0.9/0.95 and eps 1e-8 as llm.c), one
   parameter group per tensor so the list keeps this layout (stochastic-rounding indices are flat offsets) and only the
   2-D weights decay; transformers' cosine schedule with warmup on Accelerate's scheduler count.

   THE RUN (gpt2_run): a trainer's main is its model plus these calls, and its loop reads like README.md's:
       CHECK(gpt2_run_init(&run, &acc, &desc, &o, "gpt2_cpu"));      // accel_init, --init, the model's shape
       ... allocate the model ...; CHECK(gpt2_run_weights(&run, host_params));
       CHECK(gpt2_run_setup(&run, params, grads, NULL));              // AdamW, loader, reducer, checkpoints, logs
       while (acc.optimizer_steps < o.steps && !run.stop) {         // run.stop: preempted, saved (step_end)
           CHECK(gpt2_run_next(&run, win, &got)); if (!got) continue;
           accel_accumulate_begin(&acc);
           forward; backward(1 / accel_loss_divisor(&acc));
           CHECK(gpt2_run_log_pending(&run));                         // the previous step's log line
           if (accel_should_reduce(&acc)) CHECK(gpt2_run_reduce(&run));
           if (acc.sync_gradients) { CHECK(gpt2_run_optimizer_step(&run)); zero_grad; }
           accel_scheduler_steps(&acc, 0);
           accel_accumulate_end(&acc);
           if (acc.sync_gradients) { gpt2_run_log_later(&run, micro, loss_sum); CHECK(gpt2_run_step_end(&run)); }
       }
       if (!run.stop) CHECK(gpt2_run_finish(&run));                   // summary line, profile, export
       rc = run.stop ? ACCEL_EXIT_REQUEUE : 0;
     fail: gpt2_run_release(&run); ... free the model ...; return gpt2_run_end(&run, rc);
   The test and benchmark options (--dump-grads, --kill-at, --bench-noop-accel: gpt2_hooks) are parsed with the others
   and run inside these calls at named points (gpt2_hooks_grads_reduced, _step_end, _run_end); --bench-noop-accel
   makes main run its bench_noop_loop (the loop with accel's calls taken out) instead of the loop.

   --zero 3 (a trainer sets run.zero3_capable: gpt2_cpu, train_gpt2): gpt2_run_setup(r, NULL or the whole initial
   weights, NULL, NULL) builds the FSDP object (gpt2_z3: unit 0 = wte, wpe, lnfw, lnfb; unit 1 + l = block l; without
   weights the initialization is drawn into the shards — host shards only: a device trainer passes its weights, in
   device memory), AdamW over its shards (--offload: on the host; with run.z3_param_dtype BF16 it writes the shard's
   bf16 copy the gathers read), sharded checkpoints; the trainer's forward and backward take each unit's tensors
   from gpt2_z3_unit (_v: any dtype) and give them back with gpt2_z3_done.

   Both trainers include this file after accel.h and the module headers (it includes them itself: C99 and C++). Not
   thread-safe (one run per process); errors are accel_result codes with accel_last_error's message. */
#ifndef GPT2_H_INCLUDED
#define GPT2_H_INCLUDED
#include "accel.h"
#include "accel_amp.h"
#include "accel_ckpt.h"
#include "accel_safetensors.h"
#include "accel_collectives.h"
#include "accel_ddp.h"
#include "accel_data.h"
#include "accel_optim.h"
#include "accel_profile.h"
#include "accel_trackers.h"
#include "accel_zero.h"
#include <math.h>
#include <signal.h>
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

/* The model's units (--zero 3's, and the trainers' forward and backward walk them either way): unit 0 = wte, wpe,
   lnfw, lnfb (the embeddings and the final norm, used first and last); unit 1 + l = block l's twelve tensors.
   gpt2_unit_has: whether tensor t belongs to unit u; gpt2_unit_offset: where u's part of tensor t starts in the
   flat buffer (offsets from gpt2_offsets): the whole tensor, or layer l's slice of a stacked one. */
static inline int gpt2_unit_has(int u, int t) {
    return u == 0 ? (t == GPT2_WTE || t == GPT2_WPE || t == GPT2_LNFW || t == GPT2_LNFB)
                  : (t >= GPT2_LN1W && t <= GPT2_FCPROJB);
}
static inline size_t gpt2_unit_offset(const size_t offset[GPT2_NUM_TENSORS + 1], int num_layers, int u, int t) {
    return offset[t] + (u == 0 ? 0 : (size_t)(u - 1) * ((offset[t + 1] - offset[t]) / (size_t)num_layers));
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
/* Elements [lo, hi) of tensor t (its whole, stacked layout) into p[0 .. hi - lo): any range of any tensor, so that
   --zero 3 initializes each rank's shard pieces directly (gpt2_z3_init) with the bits of the whole buffer. */
static inline void gpt2_init_range(const gpt2_config *c, int t, size_t lo, size_t hi, float *p, uint64_t seed) {
    size_t n = hi, i;
    double std = 0.02;
    if (t == GPT2_LN1W || t == GPT2_LN2W || t == GPT2_LNFW) {
        for (i = lo; i < hi; ++i) p[i - lo] = 1.0f;
        return;
    }
    if (!gpt2_decays(t)) { /* biases */
        memset(p, 0, (hi - lo) * sizeof *p);
        return;
    }
    if (t == GPT2_ATTPROJW || t == GPT2_FCPROJW) std = 0.02 / sqrt(2.0 * c->num_layers);
    if (t == GPT2_WTE && n > (size_t)c->vocab_size * c->channels) n = (size_t)c->vocab_size * c->channels;
    for (i = lo & ~(size_t)1; i < n; i += 2) { /* a pair of normals per draw: element i is its cos (even) or sin */
        uint32_t w[4];
        double u1, u2, r;
        accel_rng_draw4(seed, (uint64_t)t, (uint64_t)(i / 2), w);
        u1 = ((double)w[0] + 0.5) / 4294967296.0;
        u2 = ((double)w[1] + 0.5) / 4294967296.0;
        r = sqrt(-2.0 * log(u1));
        if (i >= lo) p[i - lo] = (float)(std * r * cos(6.283185307179586 * u2));
        if (i + 1 >= lo && i + 1 < n) p[i + 1 - lo] = (float)(std * r * sin(6.283185307179586 * u2));
    }
    for (i = n > lo ? n : lo; i < hi; ++i) p[i - lo] = 0.0f; /* wte's padded rows */
}
static inline void gpt2_init_params(const gpt2_config *c, float *params, uint64_t seed) {
    size_t off[GPT2_NUM_TENSORS + 1];
    int t;
    gpt2_offsets(c, off);
    for (t = 0; t < GPT2_NUM_TENSORS; ++t) gpt2_init_range(c, t, 0, off[t + 1] - off[t], params + off[t], seed);
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
static inline int gpt2_to_hf(const gpt2_config *c, const float *params, float *hf, gpt2_hf_tensor *e,
                             accel_tensor *out) {
    int n = gpt2_hf_tensors(c, e), k;
    size_t pos = 0;
    for (k = 0; k < n; ++k) {
        const float *src = params + gpt2_hf_block(c, &e[k]);
        float *dst = hf + pos;
        int r, col;
        if (e[k].transpose) {
            for (r = 0; r < e[k].rows; ++r)
                for (col = 0; col < e[k].cols; ++col)
                    dst[(size_t)col * e[k].rows + r] = src[(size_t)r * e[k].cols + col];
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

/* Writes an HF config.json for the model into dir (main process only; C string, no accel needed): every GPT2Config
   field that decides the math, spelled out (what --init checks), and bos/eos token ids that exist in the vocabulary:
   GPT-2's <|endoftext|> (50256) for its 50257-token vocabulary, else null (transformers' default, 50256, would lie
   outside a smaller vocabulary, and it warns about that on every load). */
static inline int gpt2_write_hf_config(const gpt2_config *c, const char *dir) {
    char path[4096], tok[16] = "null";
    FILE *f;
    int ok;
    if (c->vocab_size == 50257) snprintf(tok, sizeof tok, "50256");
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (!(f = fopen(path, "w"))) return -1;
    fprintf(f, "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n"
               "  \"vocab_size\": %d,\n  \"n_positions\": %d,\n  \"n_ctx\": %d,\n  \"n_embd\": %d,\n"
               "  \"n_layer\": %d,\n"
               "  \"n_head\": %d,\n  \"n_inner\": null,\n  \"activation_function\": \"gelu_new\",\n"
               "  \"layer_norm_epsilon\": 1e-05,\n  \"scale_attn_weights\": true,\n"
               "  \"scale_attn_by_inverse_layer_idx\": false,\n  \"reorder_and_upcast_attn\": false,\n"
               "  \"add_cross_attention\": false,\n  \"tie_word_embeddings\": true,\n  \"bos_token_id\": %s,\n"
               "  \"eos_token_id\": %s\n}\n",
            c->vocab_size, c->max_seq_len, c->max_seq_len, c->channels, c->num_layers, c->num_heads, tok, tok);
    ok = !ferror(f);
    return fclose(f) == 0 && ok ? 0 : -1;
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
        if ((i = accel_st_file_find(f, nm)) < 0)
            return accel_set_error(acc, ACCEL_ERR_FORMAT, "--init: no wpe.weight");
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

/* ---------------------------------------------------------------------------------- Hugging Face config.json */
/* --init reads the config.json beside the weights and refuses one that describes another model. The fields below are
   those of transformers' GPT2Config (configuration_gpt2.py) that change what modeling_gpt2.py computes, plus the
   attribute_map aliases (hidden_size, max_position_embeddings, num_attention_heads, num_hidden_layers; an alias wins
   over its field in transformers, and both present must agree here). Everything else is read over: dropouts (the
   trainers train without dropout, as llm.c), summary_* (GPT2DoubleHeadsModel), token ids, use_cache,
   task_specific_params, reorder_and_upcast_attn (the same scores computed in float32 under autocast: the same math),
   initializer_range, dtype, unknown keys. */
enum {
    GPT2_HF_VOCAB_SIZE, GPT2_HF_N_POSITIONS, GPT2_HF_MAX_POSITION_EMBEDDINGS, GPT2_HF_N_CTX, GPT2_HF_N_EMBD,
    GPT2_HF_HIDDEN_SIZE, GPT2_HF_N_LAYER, GPT2_HF_NUM_HIDDEN_LAYERS, GPT2_HF_N_HEAD, GPT2_HF_NUM_ATTENTION_HEADS,
    GPT2_HF_N_INNER, GPT2_HF_ACTIVATION_FUNCTION, GPT2_HF_LAYER_NORM_EPSILON, GPT2_HF_TIE_WORD_EMBEDDINGS,
    GPT2_HF_SCALE_ATTN_WEIGHTS, GPT2_HF_SCALE_ATTN_BY_INVERSE_LAYER_IDX, GPT2_HF_ADD_CROSS_ATTENTION,
    GPT2_HF_MODEL_TYPE, GPT2_HF_PRUNED_HEADS, GPT2_HF_NUM_KEYS
};
static const char *const gpt2_hf_keys[GPT2_HF_NUM_KEYS] = {
    "vocab_size", "n_positions", "max_position_embeddings", "n_ctx", "n_embd", "hidden_size", "n_layer",
    "num_hidden_layers", "n_head", "num_attention_heads", "n_inner", "activation_function", "layer_norm_epsilon",
    "tie_word_embeddings", "scale_attn_weights", "scale_attn_by_inverse_layer_idx", "add_cross_attention",
    "model_type", "pruned_heads"};

/* JSON types; GPT2_JSON_INT is a number written without a fraction or an exponent (Python's int). */
enum { GPT2_JSON_ABSENT, GPT2_JSON_NULL, GPT2_JSON_FALSE, GPT2_JSON_TRUE, GPT2_JSON_INT, GPT2_JSON_REAL,
       GPT2_JSON_STRING, GPT2_JSON_ARRAY, GPT2_JSON_OBJECT };
static const char *const gpt2_json_type_names[] = {"absent", "null", "false", "true", "an integer", "a real number",
                                                   "a string", "an array", "an object"};

typedef struct gpt2_json_value {
    int type;         /* GPT2_JSON_* */
    double number;    /* INT, REAL (NaN and ±Infinity as Python's json reads them) */
    int count;        /* ARRAY, OBJECT: elements or members */
    char str[64];     /* STRING: the first 63 bytes (UTF-8), NUL-terminated */
    size_t len;       /* STRING: its full length in bytes */
} gpt2_json_value;

typedef struct gpt2_hf_config {
    gpt2_json_value v[GPT2_HF_NUM_KEYS]; /* indexed by GPT2_HF_*; a repeated key keeps its last value (Python's) */
} gpt2_hf_config;

#define GPT2_JSON_MAX_DEPTH 64
#define GPT2_HF_CONFIG_MAX_BYTES (1 << 20)

/* A strict JSON reader for config.json (RFC 8259 plus NaN/Infinity, which Python's json accepts; the text must be
   UTF-8, as transformers opens it). Untrusted bytes: every read is bounds-checked (tests/fuzz/trainer). */
typedef struct gpt2__json {
    const unsigned char *beg, *p, *end;
    int depth;
    char *err;
    size_t errcap;
} gpt2__json;

static inline int gpt2__json_fail(gpt2__json *j, const char *what) {
    if (!j->err[0]) snprintf(j->err, j->errcap, "%s at byte %lu", what, (unsigned long)(j->p - j->beg));
    return -1;
}
static inline void gpt2__json_ws(gpt2__json *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) ++j->p;
}
static inline int gpt2__json_hex4(gpt2__json *j, uint32_t *out) {
    uint32_t v = 0;
    int i;
    if (j->end - j->p < 4) return gpt2__json_fail(j, "truncated \\u escape");
    for (i = 0; i < 4; ++i) {
        unsigned c = j->p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= c - '0';
        else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
        else return gpt2__json_fail(j, "bad \\u escape");
    }
    j->p += 4;
    *out = v;
    return 0;
}
/* The length of the well-formed UTF-8 sequence at p (Python's strict decoder: no overlong forms, no surrogates,
   nothing above U+10FFFF), 0 if there is none. */
static inline int gpt2__utf8_len(const unsigned char *p, const unsigned char *end) {
    unsigned c = p[0], lo = 0x80, hi = 0xBF;
    int n, i;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else return 0;
    if (end - p < n) return 0;
    for (i = 1; i < n; ++i) {
        if (p[i] < (i == 1 ? lo : 0x80) || p[i] > (i == 1 ? hi : 0xBF)) return 0;
    }
    return n;
}
/* A string at j->p (its opening quote), decoded into out (cap bytes, NUL-terminated, cut short if longer); *len
   receives the decoded length. Lone surrogate escapes decode as their 3-byte form (Python keeps them in a str). */
static inline int gpt2__json_string(gpt2__json *j, char *out, size_t cap, size_t *len) {
    size_t n = 0;
    ++j->p;
    for (;;) {
        unsigned char b[4];
        int nb = 1, k;
        unsigned c;
        if (j->p >= j->end) return gpt2__json_fail(j, "unterminated string");
        c = *j->p;
        if (c == '"') {
            ++j->p;
            break;
        }
        if (c < 0x20) return gpt2__json_fail(j, "control character in a string");
        if (c == '\\') {
            uint32_t cp;
            if (++j->p >= j->end) return gpt2__json_fail(j, "unterminated string");
            c = *j->p++;
            switch (c) {
            case '"': case '\\': case '/': cp = c; break;
            case 'b': cp = 8; break;
            case 'f': cp = 12; break;
            case 'n': cp = 10; break;
            case 'r': cp = 13; break;
            case 't': cp = 9; break;
            case 'u':
                if (gpt2__json_hex4(j, &cp) != 0) return -1;
                if (cp >= 0xD800 && cp <= 0xDBFF && j->end - j->p >= 6 && j->p[0] == '\\' && j->p[1] == 'u') {
                    const unsigned char *save = j->p;
                    uint32_t lo;
                    j->p += 2;
                    if (gpt2__json_hex4(j, &lo) != 0) return -1;
                    if (lo >= 0xDC00 && lo <= 0xDFFF) cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    else j->p = save; /* two code points: the lone high surrogate, then whatever follows */
                }
                break;
            default: return gpt2__json_fail(j, "bad escape in a string");
            }
            if (cp < 0x80) b[0] = (unsigned char)cp;
            else if (cp < 0x800) {
                b[0] = (unsigned char)(0xC0 | (cp >> 6));
                b[1] = (unsigned char)(0x80 | (cp & 0x3F));
                nb = 2;
            } else if (cp < 0x10000) {
                b[0] = (unsigned char)(0xE0 | (cp >> 12));
                b[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
                b[2] = (unsigned char)(0x80 | (cp & 0x3F));
                nb = 3;
            } else {
                b[0] = (unsigned char)(0xF0 | (cp >> 18));
                b[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
                b[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
                b[3] = (unsigned char)(0x80 | (cp & 0x3F));
                nb = 4;
            }
        } else {
            if (!(nb = gpt2__utf8_len(j->p, j->end))) return gpt2__json_fail(j, "invalid UTF-8");
            memcpy(b, j->p, (size_t)nb);
            j->p += nb;
        }
        for (k = 0; k < nb; ++k, ++n)
            if (n + 1 < cap) out[n] = (char)b[k];
    }
    if (cap) out[n < cap ? n : cap - 1] = 0;
    *len = n;
    return 0;
}
static inline int gpt2__json_literal(gpt2__json *j, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(j->end - j->p) < n || memcmp(j->p, word, n) != 0) return 0;
    j->p += n;
    return 1;
}
static inline int gpt2__json_digits(gpt2__json *j) {
    const unsigned char *s = j->p;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') ++j->p;
    return j->p > s;
}
static inline int gpt2__json_number(gpt2__json *j, gpt2_json_value *v) {
    const unsigned char *s = j->p;
    char small[64], *text;
    size_t n;
    v->type = GPT2_JSON_INT;
    if (j->p < j->end && *j->p == '-') ++j->p;
    if (gpt2__json_literal(j, "Infinity")) {
        v->type = GPT2_JSON_REAL;
        v->number = *s == '-' ? -INFINITY : INFINITY;
        return 0;
    }
    if (j->p < j->end && *j->p == '0') ++j->p;
    else if (!gpt2__json_digits(j)) return gpt2__json_fail(j, "bad number");
    if (j->p < j->end && *j->p == '.') {
        ++j->p;
        if (!gpt2__json_digits(j)) return gpt2__json_fail(j, "bad number");
        v->type = GPT2_JSON_REAL;
    }
    if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
        ++j->p;
        if (j->p < j->end && (*j->p == '+' || *j->p == '-')) ++j->p;
        if (!gpt2__json_digits(j)) return gpt2__json_fail(j, "bad number");
        v->type = GPT2_JSON_REAL;
    }
    n = (size_t)(j->p - s); /* strtod on a NUL-terminated copy: its grammar is wider than JSON's (hex, "inf") */
    text = n < sizeof small ? small : (char *)malloc(n + 1);
    if (!text) return gpt2__json_fail(j, "out of memory");
    memcpy(text, s, n);
    text[n] = 0;
    v->number = strtod(text, NULL);
    if (text != small) free(text);
    return 0;
}

/* The slot a member's value goes to (NULL: read over). */
typedef gpt2_json_value *(*gpt2__json_slot_fn)(void *ctx, const char *key, size_t keylen);

/* Any value at j->p into v (v NULL: read over); the members of an object go where slot says (slot NULL: nowhere). */
static inline int gpt2__json_value(gpt2__json *j, gpt2_json_value *v, gpt2__json_slot_fn slot, void *ctx) {
    gpt2_json_value scratch;
    if (!v) v = &scratch;
    memset(v, 0, sizeof *v);
    gpt2__json_ws(j);
    if (j->p >= j->end) return gpt2__json_fail(j, "unexpected end");
    if (*j->p == '"') {
        v->type = GPT2_JSON_STRING;
        return gpt2__json_string(j, v->str, sizeof v->str, &v->len);
    }
    if (*j->p == '{' || *j->p == '[') {
        int obj = *j->p == '{';
        unsigned char close = obj ? '}' : ']';
        if (++j->depth > GPT2_JSON_MAX_DEPTH) return gpt2__json_fail(j, "nested too deeply");
        v->type = obj ? GPT2_JSON_OBJECT : GPT2_JSON_ARRAY;
        ++j->p;
        gpt2__json_ws(j);
        if (j->p < j->end && *j->p == close) {
            ++j->p;
            --j->depth;
            return 0;
        }
        for (;;) {
            gpt2_json_value *dst = NULL;
            if (obj) {
                char key[64];
                size_t keylen;
                gpt2__json_ws(j);
                if (j->p >= j->end || *j->p != '"') return gpt2__json_fail(j, "expected a member name");
                if (gpt2__json_string(j, key, sizeof key, &keylen) != 0) return -1;
                if (slot && keylen < sizeof key) dst = slot(ctx, key, keylen);
                gpt2__json_ws(j);
                if (j->p >= j->end || *j->p != ':') return gpt2__json_fail(j, "expected ':'");
                ++j->p;
            }
            if (gpt2__json_value(j, dst, NULL, NULL) != 0) return -1;
            ++v->count;
            gpt2__json_ws(j);
            if (j->p < j->end && *j->p == ',') {
                ++j->p;
                continue;
            }
            if (j->p < j->end && *j->p == close) {
                ++j->p;
                --j->depth;
                return 0;
            }
            return gpt2__json_fail(j, obj ? "expected ',' or '}'" : "expected ',' or ']'");
        }
    }
    if (gpt2__json_literal(j, "null")) v->type = GPT2_JSON_NULL;
    else if (gpt2__json_literal(j, "true")) v->type = GPT2_JSON_TRUE;
    else if (gpt2__json_literal(j, "false")) v->type = GPT2_JSON_FALSE;
    else if (gpt2__json_literal(j, "NaN")) {
        v->type = GPT2_JSON_REAL;
        v->number = NAN;
    } else if (gpt2__json_literal(j, "Infinity")) {
        v->type = GPT2_JSON_REAL;
        v->number = INFINITY;
    } else if (*j->p == '-' || (*j->p >= '0' && *j->p <= '9')) return gpt2__json_number(j, v);
    else return gpt2__json_fail(j, "unexpected character");
    return 0;
}

static inline gpt2_json_value *gpt2__hf_config_slot(void *ctx, const char *key, size_t keylen) {
    gpt2_hf_config *h = (gpt2_hf_config *)ctx;
    int i;
    for (i = 0; i < GPT2_HF_NUM_KEYS; ++i)
        if (strlen(gpt2_hf_keys[i]) == keylen && !memcmp(gpt2_hf_keys[i], key, keylen)) return &h->v[i];
    return NULL;
}

/* Parses config.json's text (n bytes, no NUL needed): 0, or -1 with err (errcap bytes) saying what and where. */
static inline int gpt2_hf_config_parse(const void *text, size_t n, gpt2_hf_config *h, char *err, size_t errcap) {
    gpt2__json j;
    gpt2_json_value top;
    char scratch[8];
    memset(h, 0, sizeof *h);
    if (!err || !errcap) {
        err = scratch;
        errcap = sizeof scratch;
    }
    err[0] = 0;
    j.beg = j.p = (const unsigned char *)text;
    j.end = j.beg + n;
    j.depth = 0;
    j.err = err;
    j.errcap = errcap;
    gpt2__json_ws(&j);
    if (j.p >= j.end || *j.p != '{') return gpt2__json_fail(&j, "expected an object");
    if (gpt2__json_value(&j, &top, gpt2__hf_config_slot, h) != 0) {
        memset(h, 0, sizeof *h);
        return -1;
    }
    gpt2__json_ws(&j);
    if (j.p != j.end) {
        memset(h, 0, sizeof *h);
        return gpt2__json_fail(&j, "extra data after the object");
    }
    return 0;
}

/* Checks a parsed config.json against the model the weights hold (c: V, C, block size and L from the tensors) and
   sets c->num_heads from it. heads_opt: --heads (0: none). untied: the file has an lm_head.weight that differs from
   wte.weight. Every refusal names the field. */
static inline accel_result gpt2_hf_config_check(accel *acc, const char *path, const gpt2_hf_config *h,
                                                gpt2_config *c, int heads_opt, int untied) {
    static const struct { int field, alias; } ints[] = {
        {GPT2_HF_VOCAB_SIZE, -1}, {GPT2_HF_N_POSITIONS, GPT2_HF_MAX_POSITION_EMBEDDINGS}, {GPT2_HF_N_CTX, -1},
        {GPT2_HF_N_EMBD, GPT2_HF_HIDDEN_SIZE}, {GPT2_HF_N_LAYER, GPT2_HF_NUM_HIDDEN_LAYERS},
        {GPT2_HF_N_HEAD, GPT2_HF_NUM_ATTENTION_HEADS}};
    static const char *const tanh_gelus[] = {"gelu_new", "gelu_pytorch_tanh", "gelu_python_tanh", "gelu_fast",
                                             "gelu_accurate"};
    const gpt2_json_value *v = h->v;
    int64_t want[6];
    int i, heads = 0;
    /* each size field (or its alias) is an integer and equals what the tensors say */
    want[0] = c->vocab_size;
    want[1] = want[2] = c->max_seq_len;
    want[3] = c->channels;
    want[4] = c->num_layers;
    want[5] = -1; /* n_head: not in the tensors */
    for (i = 0; i < 6; ++i) {
        int f = ints[i].field, a = ints[i].alias, use = a >= 0 && v[a].type ? a : f;
        const char *name = gpt2_hf_keys[use];
        if (a >= 0 && v[a].type && v[f].type && (v[a].type != v[f].type || v[a].number != v[f].number))
            return accel_set_error(acc, ACCEL_ERR_FORMAT, "--init: %s: %s and %s disagree", path, gpt2_hf_keys[a],
                                   gpt2_hf_keys[f]);
        if (f == GPT2_HF_N_CTX && v[use].type <= GPT2_JSON_NULL) continue; /* legacy, unread by transformers */
        if (!v[use].type) {
            return accel_set_error(acc, ACCEL_ERR_FORMAT, "--init: %s: no %s (transformers would take its GPT-2 "
                                   "124M default)", path, name);
        }
        if (v[use].type != GPT2_JSON_INT || v[use].number < 1 || v[use].number > 1e9)
            return accel_set_error(acc, ACCEL_ERR_FORMAT, "--init: %s: %s must be a positive integer, not %s", path,
                                   name, gpt2_json_type_names[v[use].type]);
        if (want[i] >= 0 && (int64_t)v[use].number != want[i])
            return accel_set_error(acc, ACCEL_ERR_FORMAT, "--init: %s: %s is %lld but the weights have %lld (%s)",
                                   path, name, (long long)v[use].number, (long long)want[i],
                                   i == 0 ? "rows of wte.weight" : i <= 2 ? "rows of wpe.weight: the block size"
                                   : i == 3 ? "columns of wte.weight" : "layers h.<l>.*");
        if (i == 5) heads = (int)v[use].number;
    }
    if (c->channels % heads)
        return accel_set_error(acc, ACCEL_ERR_FORMAT, "--init: %s: n_head %d does not divide n_embd %d", path,
                               heads, c->channels);
    if (heads_opt && heads_opt != heads)
        return accel_set_error(acc, ACCEL_ERR_FORMAT, "--init: %s: n_head is %d; --heads %d disagrees", path, heads,
                               heads_opt);
    c->num_heads = heads;
    /* the MLP: 4C hidden units, the tanh GELU */
    if (v[GPT2_HF_N_INNER].type > GPT2_JSON_NULL &&
        (v[GPT2_HF_N_INNER].type != GPT2_JSON_INT || v[GPT2_HF_N_INNER].number != 4.0 * c->channels))
        return accel_set_error(acc, ACCEL_ERR_FORMAT, "--init: %s: n_inner must be null or 4 x n_embd = %d (the "
                               "trainers' MLP width)", path, 4 * c->channels);
    if (v[GPT2_HF_ACTIVATION_FUNCTION].type) {
        const gpt2_json_value *a = &v[GPT2_HF_ACTIVATION_FUNCTION];
        int ok = 0, is_str = a->type == GPT2_JSON_STRING;
        for (i = 0; i < (int)(sizeof tanh_gelus / sizeof *tanh_gelus); ++i)
            ok |= is_str && a->len == strlen(tanh_gelus[i]) && !strcmp(a->str, tanh_gelus[i]);
        if (!ok)
            return accel_set_error(acc, ACCEL_ERR_FORMAT, "--init: %s: activation_function is %s%s%s; the trainers "
                                   "compute GPT-2's tanh GELU (gelu_new)", path, is_str ? "\"" : "",
                                   is_str ? a->str : gpt2_json_type_names[a->type], is_str ? "\"" : "");
    }
    /* LayerNorm */
    if (v[GPT2_HF_LAYER_NORM_EPSILON].type && ((v[GPT2_HF_LAYER_NORM_EPSILON].type != GPT2_JSON_INT &&
                                                v[GPT2_HF_LAYER_NORM_EPSILON].type != GPT2_JSON_REAL) ||
                                               v[GPT2_HF_LAYER_NORM_EPSILON].number != 1e-5))
        return accel_set_error(acc, ACCEL_ERR_FORMAT, "--init: %s: layer_norm_epsilon must be 1e-05 (the trainers' "
                               "LayerNorm)", path);
    /* attention: scores scaled by 1/sqrt(C/H), in every layer alike */
    if (v[GPT2_HF_SCALE_ATTN_WEIGHTS].type && v[GPT2_HF_SCALE_ATTN_WEIGHTS].type != GPT2_JSON_TRUE)
        return accel_set_error(acc, ACCEL_ERR_FORMAT, "--init: %s: scale_attn_weights must be true (the trainers scale "
                               "attention scores by 1/sqrt(n_embd/n_head))", path);
    if (v[GPT2_HF_SCALE_ATTN_BY_INVERSE_LAYER_IDX].type &&
        v[GPT2_HF_SCALE_ATTN_BY_INVERSE_LAYER_IDX].type != GPT2_JSON_FALSE)
        return accel_set_error(acc, ACCEL_ERR_FORMAT, "--init: %s: scale_attn_by_inverse_layer_idx must be false (the "
                               "trainers do not divide layer l's scores by l+1)", path);
    if (v[GPT2_HF_ADD_CROSS_ATTENTION].type && v[GPT2_HF_ADD_CROSS_ATTENTION].type != GPT2_JSON_FALSE)
        return accel_set_error(acc, ACCEL_ERR_FORMAT, "--init: %s: add_cross_attention must be false (the decoder of "
                               "an encoder-decoder model has cross-attention layers the trainers do not have)", path);
    if (v[GPT2_HF_PRUNED_HEADS].type > GPT2_JSON_NULL &&
        (v[GPT2_HF_PRUNED_HEADS].type != GPT2_JSON_OBJECT || v[GPT2_HF_PRUNED_HEADS].count))
        return accel_set_error(acc, ACCEL_ERR_FORMAT, "--init: %s: pruned_heads must be empty (pruned attention heads "
                               "change the layers' shapes)", path);
    /* the LM head: tied to wte */
    if (v[GPT2_HF_TIE_WORD_EMBEDDINGS].type && v[GPT2_HF_TIE_WORD_EMBEDDINGS].type != GPT2_JSON_TRUE)
        return accel_set_error(acc, ACCEL_ERR_FORMAT, "--init: %s: tie_word_embeddings must be true: %s; the trainers' "
                               "LM head is wte", path, untied ? "the file's lm_head.weight is a head of its own"
                               : "transformers would give the model an LM head of its own");
    if (v[GPT2_HF_MODEL_TYPE].type &&
        (v[GPT2_HF_MODEL_TYPE].type != GPT2_JSON_STRING || v[GPT2_HF_MODEL_TYPE].len != 4 ||
         strcmp(v[GPT2_HF_MODEL_TYPE].str, "gpt2") != 0))
        return accel_set_error(acc, ACCEL_ERR_FORMAT, "--init: %s: model_type must be \"gpt2\"", path);
    return ACCEL_OK;
}

/* Reads config.json into h; *found = 0 (and ACCEL_OK) when there is no such file. */
static inline accel_result gpt2_hf_config_read(accel *acc, const char *path, gpt2_hf_config *h, int *found) {
    FILE *f = fopen(path, "rb");
    char *buf, err[160];
    size_t n;
    int bad;
    memset(h, 0, sizeof *h);
    *found = f != NULL;
    if (!f) return ACCEL_OK;
    buf = (char *)accel_host_alloc(acc, GPT2_HF_CONFIG_MAX_BYTES + 1);
    if (!buf) {
        fclose(f);
        return accel_set_error(acc, ACCEL_ERR_OUT_OF_MEMORY, "--init: out of host memory");
    }
    n = fread(buf, 1, GPT2_HF_CONFIG_MAX_BYTES + 1, f);
    bad = ferror(f);
    fclose(f);
    if (bad || n > GPT2_HF_CONFIG_MAX_BYTES) {
        accel_host_free(acc, buf);
        return accel_set_error(acc, bad ? ACCEL_ERR_IO : ACCEL_ERR_FORMAT, "--init: %s: %s", path,
                               bad ? "read error" : "larger than 1 MiB: not a model configuration");
    }
    bad = gpt2_hf_config_parse(buf, n, h, err, sizeof err);
    accel_host_free(acc, buf);
    if (bad) return accel_set_error(acc, ACCEL_ERR_FORMAT, "--init: %s: not JSON: %s", path, err);
    return ACCEL_OK;
}

/* 1 when the file holds an lm_head.weight that is not bit-equal to its wte.weight (an untied head). */
static inline int gpt2_hf_untied_head(accel_st_file *f, const char *prefix) {
    char nm[80];
    int i = accel_st_file_find(f, "lm_head.weight"), k;
    const accel_st_entry *head, *wte;
    if (i < 0) return 0;
    head = accel_st_file_entry(f, i);
    snprintf(nm, sizeof nm, "%swte.weight", prefix);
    if ((k = accel_st_file_find(f, nm)) < 0) return 1;
    wte = accel_st_file_entry(f, k);
    return head->dtype != wte->dtype || head->ndim != wte->ndim || head->shape[0] != wte->shape[0] ||
           head->shape[1] != wte->shape[1] || head->end - head->begin != wte->end - wte->begin ||
           memcmp(head->data, wte->data, (size_t)(wte->end - wte->begin)) != 0;
}

/* ----------------------------------------------------------------------------------------------- optimizer */
/* AdamW over the 16 tensors (model: the BF16 copies the step writes, or NULL), lr 0 allowed (--lr 0). */
/* offload: the state in pinned host memory and the step on the CPU (accel_optim_desc.offload; --zero 3 --offload) */
static inline accel_result gpt2_optim_create_list(accel *acc, const accel_tensor *params, const accel_tensor *grads,
                                                  const accel_tensor *model, int n, const int *tensor_of, double lr,
                                                  double weight_decay, int sr, uint64_t seed, int offload,
                                                  accel_optim **out) {
    accel_optim_group *g = (accel_optim_group *)accel_host_alloc(acc, sizeof *g * (size_t)(n > 0 ? n : 1));
    accel_optim_desc d;
    accel_result res;
    int k;
    if (!g) return accel_set_error(acc, ACCEL_ERR_OUT_OF_MEMORY, "AdamW: %d groups", n);
    memset(g, 0, sizeof *g * (size_t)n);
    memset(&d, 0, sizeof d);
    for (k = 0; k < n; ++k) {
        g[k].count = 1;
        g[k].weight_decay = gpt2_decays(tensor_of ? tensor_of[k] : k) ? weight_decay : 0.0;
    }
    d.algorithm = ACCEL_OPTIM_ADAMW;
    d.params = params;
    d.grads = grads;
    d.model = model;
    d.nparams = n;
    d.groups = g;
    d.ngroups = n;
    d.lr = lr > 0 ? lr : ACCEL_OPTIM_ZERO;
    d.beta1 = 0.9;
    d.beta2 = 0.95;
    d.eps = 1e-8;
    d.model_rounding = sr ? ACCEL_OPTIM_ROUND_STOCHASTIC : ACCEL_OPTIM_ROUND_NEAREST;
    d.sr_seed = seed;
    d.offload = offload;
    res = accel_optim_create(acc, &d, out);
    accel_host_free(acc, g);
    return res;
}
/* AdamW over the 16 tensors, one group each (the 2-D weights decay). */
static inline accel_result gpt2_optim_create(accel *acc, const accel_tensor *params, const accel_tensor *grads,
                                             const accel_tensor *model, double lr, double weight_decay, int sr,
                                             uint64_t seed, accel_optim **out) {
    return gpt2_optim_create_list(acc, params, grads, model, GPT2_NUM_TENSORS, NULL, lr, weight_decay, sr, seed, 0,
                                  out);
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
/* The test and benchmark hooks ("testing" in --help): parsed with the options, called by the run at named points
   (gpt2_hooks_grads_reduced, gpt2_hooks_step_end, gpt2_hooks_run_end below), never from a trainer's loop. */
typedef struct gpt2_hooks {
    const char *dump_grads; /* --dump-grads FILE: the first step's reduced gradients, before clipping, as HF names */
    int kill_at;            /* --kill-at N: SIGKILL on every rank at the end of step N, after its checkpoint */
    int signal_at;          /* --signal-at N: the last rank raises SIGUSR1 at the end of step N (preemption) */
    int bench_noop;         /* --bench-noop-accel: main runs its no-op loop (accel's calls removed) instead */
} gpt2_hooks;

/* --attention (CUDA trainer): cuDNN's fused attention or the trainer's own kernels; AUTO = cuDNN when built */
enum { GPT2_ATTENTION_AUTO, GPT2_ATTENTION_CUDNN, GPT2_ATTENTION_OWN };
typedef struct gpt2_opts {
    const char *init, *data[GPT2_MAX_FILES], *loss_file, *export_dir, *ckpt_dir, *log_dir, *profile_dir;
    int ndata, steps, batch, seq, accum, warmup, layers, heads, channels, vocab, block_size, ckpt_every, resume;
    int print_every, shuffle, sr, attention, async_ckpt, zero, offload;
    double lr, weight_decay, clip, peak_tflops;
    uint64_t seed;
    gpt2_hooks hooks;
} gpt2_opts;

static inline void gpt2_usage(const char *prog) {
    fprintf(stderr,
            "usage: %s --data SHARD [SHARD ...] [options]       (llm.c token shards, e.g. --data fineweb_train_*.bin)\n"
            "       %s --gen-shard PATH NTOKENS VOCAB      (a synthetic llm.c uint16 shard: a Markov chain)\n"
            "model (default GPT-2 124M: --layers 12 --heads 12 --channels 768 --vocab 50257 --block-size 1024)\n"
            "  --init PATH              start from Hugging Face GPT-2 weights: a folder with model.safetensors and\n"
            "                           config.json, or FILE.safetensors (config.json beside it, if any); sets L, C,\n"
            "                           V, the block size and H (else --heads); refuses a config.json that\n"
            "                           describes another model (activation, LayerNorm eps, untied head, ...)\n"
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
            "  --zero 0|3               3: ZeRO-3 / FSDP FULL_SHARD, units = the embeddings (+ final norm) and\n"
            "                           each block: every rank keeps its shard of weights, gradients and AdamW state\n"
            "  --offload                with --zero 3: the shards and AdamW state in pinned host memory, AdamW's step\n"
            "                           on the CPU (FSDP's cpu_offload + DeepSpeed's offload_optimizer)\n"
            "  --attention cudnn|own    (CUDA) cuDNN's flash attention (default when built) or the trainer's own\n"
            "output\n"
            "  --loss-file F            one line per optimizer step: step loss lr\n"
            "  --export DIR             save_model at the end: DIR/model.safetensors (HF names) + config.json\n"
            "  --checkpoint-dir D --checkpoint-every N --resume   save_state / load_state (D/checkpoints/...)\n"
            "  --async-checkpoint       save_state returns after a pinned snapshot; a writer thread writes\n"
            "  --log-dir DIR            TensorBoard + JSONL logs\n"
            "  --print-every N          progress line every N steps (default 1)\n"
            "  --profile DIR            the phase table at the end, Chrome traces DIR/profile_<rank>.json\n"
            "                           and on several ranks DIR/profile_merged.json (accel_profile.h; Perfetto)\n"
            "  --peak-tflops X          peak TFLOP/s for MFU (CUDA default: the device's bf16 dense peak; CPU: none)\n"
            "testing (the hooks: gpt2_hooks)\n"
            "  --kill-at N              SIGKILL every rank after step N (resume tests)\n"
            "  --signal-at N            the last rank raises SIGUSR1 after step N (preemption tests)\n"
            "  --dump-grads FILE        the first step's reduced gradients (before clipping) as HF safetensors\n"
            "  --bench-noop-accel       benchmark: the loop with accel's calls taken out (one batch, no accumulation,\n"
            "                           sync, clipping, schedule or logs). Every run ends with a summary: JSON line\n"
            "                           (tokens/s over the steps after the 3rd)\n",
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
        else if (GPT2_ARG("--kill-at")) o->hooks.kill_at = atoi(v);
        else if (GPT2_ARG("--signal-at")) o->hooks.signal_at = atoi(v);
        else if (GPT2_ARG("--dump-grads")) o->hooks.dump_grads = v;
        else if (GPT2_ARG("--peak-tflops")) o->peak_tflops = atof(v);
        else if (GPT2_ARG("--zero")) {
            o->zero = atoi(v);
            if (strcmp(v, "0") && strcmp(v, "3")) { fprintf(stderr, "%s: --zero takes 0 or 3\n", prog); return 2; }
        }
        else if (GPT2_ARG("--attention")) {
            if (!strcmp(v, "cudnn")) o->attention = GPT2_ATTENTION_CUDNN;
            else if (!strcmp(v, "own")) o->attention = GPT2_ATTENTION_OWN;
            else if (!strcmp(v, "auto")) o->attention = GPT2_ATTENTION_AUTO;
            else { fprintf(stderr, "%s: --attention %s: cudnn, own or auto\n", prog, v); return 2; }
        }
        else if (!strcmp(a, "--resume")) o->resume = 1;
        else if (!strcmp(a, "--shuffle")) o->shuffle = 1;
        else if (!strcmp(a, "--async-checkpoint")) o->async_ckpt = 1;
        else if (!strcmp(a, "--sr")) o->sr = 1;
        else if (!strcmp(a, "--offload")) o->offload = 1;
        else if (!strcmp(a, "--bench-noop-accel")) o->hooks.bench_noop = 1;
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) { gpt2_usage(prog); return 0; }
        else { fprintf(stderr, "%s: unknown or incomplete option %s\n", prog, a); gpt2_usage(prog); return 2; }
#undef GPT2_ARG
    }
    if (o->ndata == 0 || o->steps < 0 || o->batch < 1 || o->seq < 1 || o->accum < 1 || o->warmup < 0 ||
        o->layers < 0 || o->heads < 0 || o->channels < 0 || o->vocab < 0 || o->block_size < 0 || o->ckpt_every < 0 ||
        o->print_every < 0 || o->hooks.kill_at < 0 || o->hooks.signal_at < 0 || o->lr < 0 || o->clip < 0) {
        fprintf(stderr, "%s: need --data and non-negative sizes (see --help)\n", prog);
        return 2;
    }
    if ((o->resume || o->hooks.kill_at || o->hooks.signal_at) && !o->ckpt_dir) {
        fprintf(stderr, "%s: --resume, --kill-at and --signal-at need --checkpoint-dir\n", prog);
        return 2;
    }
    if (o->offload && o->zero != 3) {
        fprintf(stderr, "%s: --offload needs --zero 3 (it offloads the shards and their optimizer)\n", prog);
        return 2;
    }
    return -1;
}

/* --init's two files: a folder holding model.safetensors and config.json, or a .safetensors file (config.json is
   looked for beside it). */
static inline void gpt2_init_paths(const char *init, char weights[4096], char config[4096]) {
    size_t n = strlen(init);
    if (n >= 12 && !strcmp(init + n - 12, ".safetensors")) {
        const char *slash = strrchr(init, '/');
        snprintf(weights, 4096, "%s", init);
        if (slash) snprintf(config, 4096, "%.*s/config.json", (int)(slash - init), init);
        else snprintf(config, 4096, "config.json");
    } else {
        snprintf(weights, 4096, "%s/model.safetensors", init);
        snprintf(config, 4096, "%s/config.json", init);
    }
}

/* The model configuration: from --init's tensors (f, open) and its config.json (checked: it must describe this
   model), else from the command line, whose sizes must then agree with --init's. */
static inline accel_result gpt2_resolve_config(accel *acc, const gpt2_opts *o, accel_st_file *f,
                                               const char *config_path, gpt2_config *c, char prefix[16]) {
    accel_result r;
    gpt2_config_default(c);
    prefix[0] = 0;
    if (f) {
        gpt2_hf_config h;
        int found;
        if ((r = gpt2_hf_probe(acc, f, c, prefix)) != ACCEL_OK) return r;
        if ((o->layers && o->layers != c->num_layers) || (o->channels && o->channels != c->channels) ||
            (o->vocab && o->vocab != c->vocab_size) || (o->block_size && o->block_size != c->max_seq_len))
            return accel_set_error(acc, ACCEL_ERR_INVALID_ARGUMENT, "--init %s holds L=%d C=%d V=%d block %d; the "
                                   "command line disagrees", o->init, c->num_layers, c->channels, c->vocab_size,
                                   c->max_seq_len);
        if ((r = gpt2_hf_config_read(acc, config_path, &h, &found)) != ACCEL_OK) return r;
        if (found) {
            r = gpt2_hf_config_check(acc, config_path, &h, c, o->heads, gpt2_hf_untied_head(f, prefix));
            if (r != ACCEL_OK) return r;
        } else if (gpt2_hf_untied_head(f, prefix)) {
            return accel_set_error(acc, ACCEL_ERR_FORMAT, "--init: lm_head.weight differs from wte.weight (an LM head "
                                   "of its own) and no %s says the head is tied; the trainers' LM head is wte",
                                   config_path);
        } else if (o->heads) {
            c->num_heads = o->heads;
        }
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
        c->max_seq_len < 1 || o->seq > c->max_seq_len)
        return accel_set_error(acc, ACCEL_ERR_INVALID_ARGUMENT, "bad model: L=%d H=%d C=%d (C must be a multiple of "
                               "H) V=%d block %d, seq %d (at most the block size)", c->num_layers, c->num_heads,
                               c->channels, c->vocab_size, c->max_seq_len, o->seq);
    return ACCEL_OK;
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

/* ------------------------------------------------------------------------------------------------- the run */
/* Everything both trainers do around their model, in the order of their main:
     gpt2_run_init           accel_init; --init's weights and config.json (checked); the model's shape (run.cfg)
     gpt2_run_weights        the initial weights (--init's, else GPT-2's initialization) into a host buffer
     gpt2_run_setup          AdamW and its schedule, the loader, the reducer, checkpoints (and --resume), the loss
                             file, trackers, the profiler, the banner
   in the loop, around the trainer's forward and backward:
     gpt2_run_next           the next (B, T+1) token windows of this rank (*got = 0 at an epoch's end)
     gpt2_run_reduce         the gradients averaged over ranks
     gpt2_run_optimizer_step clip_grad_norm_, the schedule, AdamW (then the trainer zeroes its gradients)
     gpt2_run_log_pending    the previous step's log line (after a micro-batch's forward and backward)
     gpt2_run_log_later      a step's log line, to be written later (after gpt2_run_optimizer_step)
     gpt2_run_step_end       the step's log line at once where the step must be complete (a checkpoint, --kill-at,
                             the summary clock, the last step), a checkpoint when one is due, the profiler's step
   A step's log line (its loss averaged over ranks: the loss file, the progress line, the trackers) is written after
   the next micro-batch's forward and backward: the CUDA trainer reads the loss back from the device without
   waiting (fetch_loss waits for it then, while the device runs that micro-batch); the CPU trainer knows its loss at
   once and logs in the same order, so that both trainers' lines and hooks run the same code and the CPU tests
   check it.
   and after it gpt2_run_finish (the summary line, the profile, the export), gpt2_run_release (accel's objects, before
   the trainer frees its buffers) and gpt2_run_end (accel_shutdown; returns the exit status). The hooks (gpt2_hooks)
   are called from these at the points their names say. Parameters and gradients are the trainer's flat buffers (host
   or device); to_host copies from a device buffer. */
typedef accel_result (*gpt2_to_host_fn)(accel *acc, void *dst, const void *src, size_t bytes);
/* The pending step's loss from where the trainer left it at the step's end (the sum over its micro-batches, this
   rank's); the CUDA trainer waits for its read-back here. */
typedef accel_result (*gpt2_fetch_loss_fn)(accel *acc, void *ctx, double *loss_sum);

/* A step whose log line is still to be written: what gpt2_run_optimizer_step left (its number, LR, gradient norm),
   its micro-batches, its loss sum (unless fetched) and the clock reading for the line (when the loss was known). */
typedef struct gpt2_late_log {
    int pending, micro;
    int64_t step;
    double lr, norm, loss_sum, t;
} gpt2_late_log;

#define GPT2_UNTIMED_STEPS 3 /* the summary line times the steps after these (caches, cuBLAS, allocator warm up) */

/* ----- ZeRO-3 (--zero 3): FSDP FULL_SHARD (accel_zero.h) over the model's units — unit 0 the embeddings and the
   final norm (wte, wpe, lnfw, lnfb: used first and last in forward, so held through the pass), unit 1 + l block l
   (its 12 tensors: layer l's slices of the stacked ones). Every rank keeps its shard of each unit's F32 weights,
   gradients and AdamW moments; the trainer's forward and backward wait for a unit's whole weights, compute, and
   release it (backward: reduce-scatter its gradients). Gathers are F32 (FSDP's param_dtype float32), so the run
   equals --zero 0 (DDP) where the reductions sum in the same order (always at 2 ranks; tests/mpi/trainer).
   No rank holds the whole model while it trains: GPT-2's initialization is drawn straight into each rank's shard
   pieces (gpt2_init_range: the Philox stream is indexed by tensor and element, so the pieces get the whole buffer's
   bits), and the export gathers the shards into a whole buffer only at the end. --init reads the file into a whole
   buffer that lives until create has copied each rank's shard out of it. */
#define GPT2_Z3_ROOT 4 /* unit 0's tensors */
#define GPT2_Z3_BLOCK 12
typedef struct gpt2_z3 {
    accel_zero_fsdp *f;
    int n, nunits;
    accel_tensor *list;     /* n: the parameters in unit order, views of a whole flat buffer when one is there
                               (--init's values at create; the export's destination), else ptr NULL */
    int *tensor_of;         /* n: each one's GPT2_* tensor (AdamW's decay) */
    accel_zero_unit *units; /* nunits */
    accel_tensor *vp, *vg, *vn, *vm, *full; /* n each: the shard's views (params, grads, norm grads, the
                                               param_dtype copy: ptr NULL when F32); whole descriptors */
    char (*names)[32];      /* n: wte, wpe, lnfw, lnfb, h.<l>.<tensor> (the sharded checkpoint's and its merge's) */
    accel_zero_fsdp_state fs;   /* checkpoints: this rank's shard of weights and moments (fsdp_state_<rank>.bin) */
    accel_optim_shard_state ss; /* and AdamW's step counts and hyperparameters (optim_state.bin) */
    /* the overlap, from accel_zero's events (gpt2_z3_trace): the unit waited on and not yet released (computing;
       -1: none), the blocks' gathers, and those of them started (prefetched) while the unit before computed */
    int busy;
    int64_t block_gathers, block_ahead;
} gpt2_z3;

typedef struct gpt2_run {
    accel *acc;
    const gpt2_opts *o;
    const char *name;                    /* the program: messages, the trackers' project */
    gpt2_config cfg;
    accel_tensor params[GPT2_NUM_TENSORS], grads[GPT2_NUM_TENSORS]; /* fp32, the trainer's buffers */
    accel_data_seq_loader loader;
    accel_coll *coll;
    accel_ddp *reducer;
    accel_optim *opt;
    accel_optim_schedule sched;
    accel_ckpt *ckpt;                    /* NULL without --checkpoint-dir */
    accel_track trk;
    int tracking, inited;
    accel_prof *prof;
    FILE *loss_file;
    accel_st_file *init;               /* --init's weights, open from gpt2_run_init to gpt2_run_weights */
    char init_prefix[16];
    gpt2_to_host_fn to_host;             /* NULL: the buffers are host memory */
    float *host;                         /* with to_host: a host buffer of the parameters' size */
    double peak_flops;                   /* peak FLOP/s for MFU: --peak-tflops, else the trainer's; 0: MFU n/a */
    int64_t first_step, step;            /* the step the run started at (after a resume), the last step taken */
    double t0, lr, norm;                 /* loop start; the last step's LR and gradient norm */
    const char *banner_note;             /* the trainer's words for the banner (e.g. which attention); NULL: none */
    gpt2_fetch_loss_fn fetch_loss;       /* NULL: gpt2_run_log_later's loss_sum is the loss */
    void *fetch_ctx;
    gpt2_late_log late;                  /* the step whose log line waits */
    int64_t timed_from;                  /* the summary line's clock: steps after timed_from, from timed_t0 */
    double timed_t0;
    int stop;                            /* preempted: the signal every rank agreed on after r->step (0: none) */
    int zero3_capable;                   /* the trainer drives gpt2_z3_* in its forward and backward */
    accel_dtype z3_param_dtype;          /* --zero 3: the dtype its kernels read weights in (0: F32; train_gpt2: BF16,
                                            the shard's copy AdamW keeps, as the bf16 model copy under --zero 0) */
    gpt2_z3 z3;                          /* --zero 3 */
} gpt2_run;

/* One phase of a step in the profiler's table and trace (accel_profile.h; one flag test without --profile), around
   the statements that follow id. CHECK is the trainer's: it reports a failure and jumps to main's cleanup. */
#define GPT2_PHASE(run, id, ...)                                                                                     \
    do {                                                                                                             \
        CHECK(accel_prof_begin((run).prof, (id)));                                                                   \
        __VA_ARGS__;                                                                                                 \
        CHECK(accel_prof_end((run).prof, (id)));                                                                     \
    } while (0)

/* ----- hooks, at their named points */
/* Starts the summary line's clock after the run's GPT2_UNTIMED_STEPS-th step (the step's work must be done: the
   CUDA trainer's loop has waited for that step's loss, gpt2_run_step_must_complete; its no-op loop synchronizes
   before this call). */
static inline void gpt2_hooks_step_timed(gpt2_run *r, int64_t step) {
    if (step == r->first_step + GPT2_UNTIMED_STEPS) {
        r->timed_from = step;
        r->timed_t0 = accel_now();
    }
}

/* After the first step's reduction, before clipping: --dump-grads (main process). */
static inline accel_result gpt2_hooks_grads_reduced(gpt2_run *r) {
    const void *src = r->grads[0].ptr; /* the flat buffer (wte first) */
    accel_result res;
    if (!r->o->hooks.dump_grads || r->step != 1 || !r->acc->is_main_process) return ACCEL_OK;
    if (r->to_host) {
        if ((res = r->to_host(r->acc, r->host, src, gpt2_num_parameters(&r->cfg) * sizeof(float))) != ACCEL_OK)
            return res;
        src = r->host;
    }
    return gpt2_save_hf_file(r->acc, &r->cfg, (const float *)src, r->o->hooks.dump_grads);
}

/* At the end of a step (after its checkpoint): the summary clock; --kill-at (a crash: nothing after it is written;
   the ranks meet first so that none is killed while a peer still writes the checkpoint). */
static inline void gpt2_hooks_step_end(gpt2_run *r) {
    gpt2_hooks_step_timed(r, r->step);
    if (r->o->hooks.kill_at && r->step == r->o->hooks.kill_at) {
        if (r->loss_file) fclose(r->loss_file);
        r->loss_file = NULL;
        fflush(stdout);
        accel_wait_for_everyone(r->acc);
        raise(SIGKILL);
    }
}

/* After the loop: the summary line bench/trainer/bench_gpt2*.py read (tokens/s over the timed steps). */
static inline void gpt2_hooks_run_end(gpt2_run *r) {
    const gpt2_opts *o = r->o;
    double el, tps;
    if (r->timed_from < 0 || r->step <= r->timed_from) return;
    el = accel_now() - r->timed_t0;
    tps = (double)(r->step - r->timed_from) * o->batch * o->seq *
          (o->hooks.bench_noop ? 1 : r->acc->gradient_accumulation_steps) * r->acc->num_processes / el;
    accel_print(r->acc, "summary: {\"steps\": %lld, \"tokens_per_s\": %.1f, \"step_ms\": %.3f, \"mfu\": %.4f, "
                "\"noop_accel\": %d}\n", (long long)(r->step - r->timed_from), tps,
                1000.0 * el / (double)(r->step - r->timed_from),
                r->peak_flops > 0 ? gpt2_flops_per_token(&r->cfg, o->seq) * tps / (r->peak_flops *
                r->acc->num_processes) : 0.0, o->hooks.bench_noop);
}

/* ----- the run */
static inline accel_result gpt2_run_init(gpt2_run *r, accel *acc, const accel_desc *desc, const gpt2_opts *o,
                                         const char *name) {
    char weights[4096], config[4096] = "";
    accel_result res;
    memset(r, 0, sizeof *r);
    r->acc = acc;
    r->o = o;
    r->name = name;
    r->timed_from = -1;
    r->peak_flops = o->peak_tflops * 1e12; /* 0: the trainer may know the device's */
    if ((res = accel_init(acc, desc)) != ACCEL_OK) return res;
    r->inited = 1;
    if (o->init) {
        gpt2_init_paths(o->init, weights, config);
        if ((res = accel_st_file_open(acc, weights, &r->init)) != ACCEL_OK) return res;
    }
    return gpt2_resolve_config(acc, o, r->init, config, &r->cfg, r->init_prefix);
}

/* accel_ckpt's range callback: an async save's snapshot and background write go to the profiler, which is created
   after the checkpointer (range_user is &r->prof; a NULL profiler records nothing). */
static inline void gpt2_ckpt_range(void *user, const char *name, double begin, double end) {
    accel_prof_record_range(*(accel_prof **)user, name, begin, end);
}

/* The initial weights into params (a host buffer of gpt2_num_parameters floats). */
static inline accel_result gpt2_run_weights(gpt2_run *r, float *params) {
    accel_result res = ACCEL_OK;
    if (r->init) {
        res = gpt2_hf_load(r->acc, r->init, &r->cfg, r->init_prefix, params);
        accel_st_file_destroy(r->init);
        r->init = NULL;
    } else {
        gpt2_init_params(&r->cfg, params, r->o->seed);
    }
    return res;
}

/* ----- ZeRO-3 (gpt2_z3, above): the units over the flat buffer, the FSDP object and its shard views */
/* accel_zero's event hook: counts the blocks' gathers, and those issued ahead — a prefetch started while another
   unit was between its wait and its release, i.e. computing (FSDP's forward_prefetch / BACKWARD_PRE overlap).
   The summary line of gpt2_run_finish prints them; tests/mpi/trainer/gpt2_zero3.py checks every block gather after
   the first (recording) pass is ahead. */
static inline void gpt2_z3_trace(void *user, accel_zero_event ev, int unit) {
    gpt2_z3 *z = (gpt2_z3 *)user;
    if (ev == ACCEL_ZERO_EV_WAIT) z->busy = unit;
    else if (ev == ACCEL_ZERO_EV_RELEASE && z->busy == unit) z->busy = -1;
    else if ((ev == ACCEL_ZERO_EV_GATHER || ev == ACCEL_ZERO_EV_PREFETCH) && unit > 0) {
        z->block_gathers++;
        z->block_ahead += ev == ACCEL_ZERO_EV_PREFETCH && z->busy >= 0 && z->busy != unit;
    }
}
/* Points the parameter list into the whole flat buffer `params` (NULL: no buffer, ptr NULL). */
static inline void gpt2_z3_place(gpt2_run *r, float *params) {
    gpt2_z3 *z = &r->z3;
    size_t off[GPT2_NUM_TENSORS + 1];
    int k;
    gpt2_offsets(&r->cfg, off);
    for (k = 0; k < z->n; ++k) {
        int u = k < GPT2_Z3_ROOT ? 0 : 1 + (k - GPT2_Z3_ROOT) / GPT2_Z3_BLOCK;
        z->list[k].ptr = params ? (void *)(params + gpt2_unit_offset(off, r->cfg.num_layers, u, z->tensor_of[k]))
                                : NULL;
    }
}
/* GPT-2's initialization of this rank's pieces of every parameter, from the seed (no whole model anywhere). */
static inline accel_result gpt2_z3_init(gpt2_run *r) {
    gpt2_z3 *z = &r->z3;
    size_t numel[GPT2_NUM_TENSORS];
    accel_tensor_piece *pc = (accel_tensor_piece *)accel_host_alloc(r->acc, sizeof *pc * (size_t)z->n);
    accel_result res;
    int k, L = r->cfg.num_layers;
    if (!pc) return accel_set_error(r->acc, ACCEL_ERR_OUT_OF_MEMORY, "--zero 3: %d pieces", z->n);
    gpt2_shapes(&r->cfg, NULL, NULL, numel);
    res = accel_zero_fsdp_pieces(z->f, ACCEL_ZERO_VIEW_PARAMS, 0, pc, z->n);
    for (k = 0; res == ACCEL_OK && k < z->n; ++k) {
        int tt = z->tensor_of[k], l = k < GPT2_Z3_ROOT ? 0 : (k - GPT2_Z3_ROOT) / GPT2_Z3_BLOCK;
        size_t at = (k < GPT2_Z3_ROOT ? 0 : (size_t)l * (numel[tt] / (size_t)L)) + (size_t)pc[k].offset;
        if (pc[k].count > 0) gpt2_init_range(&r->cfg, tt, at, at + (size_t)pc[k].count, (float *)pc[k].ptr, r->o->seed);
    }
    accel_host_free(r->acc, pc);
    return res;
}
/* params: the whole initial weights (--init), or NULL: GPT-2's initialization drawn into the shards */
static inline accel_result gpt2_z3_create(gpt2_run *r, float *params) {
    accel *acc = r->acc;
    const gpt2_config *c = &r->cfg;
    gpt2_z3 *z = &r->z3;
    int ndim[GPT2_NUM_TENSORS], L = c->num_layers, i, l, k, t, d;
    int64_t shape[GPT2_NUM_TENSORS][3];
    static const int root[GPT2_Z3_ROOT] = {GPT2_WTE, GPT2_WPE, GPT2_LNFW, GPT2_LNFB};
    accel_zero_fsdp_desc fd;
    accel_result res;
    gpt2_shapes(c, ndim, shape, NULL);
    z->nunits = 1 + L;
    z->n = GPT2_Z3_ROOT + GPT2_Z3_BLOCK * L;
    z->list = (accel_tensor *)accel_host_alloc(acc, sizeof(accel_tensor) * (size_t)z->n * 6);
    z->tensor_of = (int *)accel_host_alloc(acc, sizeof(int) * (size_t)z->n);
    z->units = (accel_zero_unit *)accel_host_alloc(acc, sizeof(accel_zero_unit) * (size_t)z->nunits);
    z->names = (char (*)[32])accel_host_alloc(acc, sizeof *z->names * (size_t)z->n);
    if (!z->list || !z->tensor_of || !z->units || !z->names)
        return accel_set_error(acc, ACCEL_ERR_OUT_OF_MEMORY, "--zero 3: %d parameters", z->n);
    memset(z->list, 0, sizeof(accel_tensor) * (size_t)z->n * 6);
    z->vp = z->list + z->n;
    z->vg = z->vp + z->n;
    z->vn = z->vg + z->n;
    z->vm = z->vn + z->n;
    z->full = z->vm + z->n;
    for (i = 0, k = 0; i < z->nunits; ++i) {
        int nt = i == 0 ? GPT2_Z3_ROOT : GPT2_Z3_BLOCK;
        z->units[i].name = NULL;
        z->units[i].params = z->list + k;
        z->units[i].n = nt;
        for (t = 0; t < nt; ++t, ++k) {
            int tt = i == 0 ? root[t] : GPT2_LN1W + t;
            accel_tensor *x = &z->list[k];
            l = i - 1;
            z->tensor_of[k] = tt;
            if (i == 0) snprintf(z->names[k], sizeof z->names[k], "%s", gpt2_tensor_names[tt]);
            else snprintf(z->names[k], sizeof z->names[k], "h.%d.%s", l, gpt2_tensor_names[tt]);
            x->name = z->names[k];
            x->dtype = ACCEL_F32;
            if (i == 0) { /* whole */
                x->ndim = ndim[tt];
                for (d = 0; d < ndim[tt]; ++d) x->shape[d] = shape[tt][d];
            } else {      /* layer l's slice of a stacked [L, ...] tensor */
                x->ndim = ndim[tt] - 1;
                for (d = 1; d < ndim[tt]; ++d) x->shape[d - 1] = shape[tt][d];
            }
        }
    }
    gpt2_z3_place(r, params);
    memset(&fd, 0, sizeof fd);
    fd.strategy = ACCEL_ZERO_FULL_SHARD;
    fd.units = z->units;
    fd.nunits = z->nunits;
    fd.param_dtype = r->z3_param_dtype ? r->z3_param_dtype : ACCEL_F32; /* what the trainer's kernels read */
    fd.reduce_dtype = ACCEL_F32;
    fd.forward_prefetch = ACCEL_ON; /* unit 0 (the root) is held through each pass, the blocks rotate: u + 1's gather
                                       is in flight while u computes (accel_zero.h UNITS, SHARDS AND BUFFERS) */
    fd.backward_prefetch = ACCEL_ZERO_BACKWARD_PRE;
    fd.cpu_offload = r->o->offload ? ACCEL_ON : ACCEL_OFF;
    fd.trace = gpt2_z3_trace;
    fd.trace_user = z;
    z->busy = -1;
    if ((res = accel_zero_fsdp_create(r->coll, &fd, &z->f)) != ACCEL_OK ||
        (res = accel_zero_fsdp_views(z->f, ACCEL_ZERO_VIEW_PARAMS, z->vp, z->n)) != ACCEL_OK ||
        (res = accel_zero_fsdp_views(z->f, ACCEL_ZERO_VIEW_GRADS, z->vg, z->n)) != ACCEL_OK ||
        (res = accel_zero_fsdp_views(z->f, ACCEL_ZERO_VIEW_NORM_GRADS, z->vn, z->n)) != ACCEL_OK ||
        (res = accel_zero_fsdp_views(z->f, ACCEL_ZERO_VIEW_MODEL, z->vm, z->n)) != ACCEL_OK ||
        (res = accel_zero_fsdp_full_tensors(z->f, z->full, z->n)) != ACCEL_OK)
        return res;
    gpt2_z3_place(r, NULL); /* the initial values were copied (or there were none) */
    if (!params && r->to_host) /* device shards: gpt2_init_range writes host memory */
        return accel_set_error(acc, ACCEL_ERR_INVALID_ARGUMENT, "--zero 3: a trainer with device buffers passes the "
                               "whole initial weights (in device memory) to gpt2_run_setup");
    return params ? ACCEL_OK : gpt2_z3_init(r);
}
/* --zero 3's checkpoint (FSDP's SHARDED_STATE_DICT): every rank's shard of weights and moments, loadable on any
   number of processes; `accel ckpt merge` turns it into model.safetensors with the names above. */
static inline accel_result gpt2_z3_register(gpt2_run *r) {
    gpt2_z3 *z = &r->z3;
    const accel_tensor *moments;
    int nmoments;
    accel_result res = accel_optim_state_tensors(r->opt, &moments, &nmoments);
    if (res != ACCEL_OK) return res;
    z->fs.fsdp = z->f;
    z->fs.state = moments;
    z->fs.m = nmoments;
    z->ss.opt = r->opt;
    z->ss.full = z->full;
    if ((res = accel_ckpt_register_sharded(r->ckpt, "fsdp_state", accel_zero_fsdp_state_save,
                                           accel_zero_fsdp_state_load_all, &z->fs)) != ACCEL_OK)
        return res;
    return accel_ckpt_register(r->ckpt, "optim_state", accel_optim_shard_state_save, accel_optim_shard_state_load,
                               &z->ss);
}
/* Unit u's whole weights (wait; in z3_param_dtype) into w[tensor] (the unit's tensors; a block's are layer u-1's
   slices), and with g its F32 gradient buffer (to += into) into g[tensor]. */
static inline accel_result gpt2_z3_unit_v(gpt2_run *r, int u, void *w[GPT2_NUM_TENSORS], void *g[GPT2_NUM_TENSORS]) {
    gpt2_z3 *z = &r->z3;
    accel_tensor v[GPT2_Z3_BLOCK];
    const int first = u == 0 ? 0 : GPT2_Z3_ROOT + GPT2_Z3_BLOCK * (u - 1);
    int n = u == 0 ? GPT2_Z3_ROOT : GPT2_Z3_BLOCK, k;
    accel_result res = accel_zero_fsdp_wait(z->f, u, v, n);
    for (k = 0; k < n && res == ACCEL_OK; ++k) w[z->tensor_of[first + k]] = v[k].ptr;
    if (res == ACCEL_OK && g) res = accel_zero_fsdp_grads(z->f, u, v, n);
    for (k = 0; g && k < n && res == ACCEL_OK; ++k) g[z->tensor_of[first + k]] = v[k].ptr;
    return res;
}
/* The same as float pointers (F32 weights: gpt2_cpu). */
static inline accel_result gpt2_z3_unit(gpt2_run *r, int u, float *w[GPT2_NUM_TENSORS], float *g[GPT2_NUM_TENSORS]) {
    void *wv[GPT2_NUM_TENSORS], *gv[GPT2_NUM_TENSORS];
    accel_result res = gpt2_z3_unit_v(r, u, wv, g ? gv : NULL);
    int t;
    for (t = 0; t < GPT2_NUM_TENSORS && res == ACCEL_OK; ++t) {
        if (!gpt2_unit_has(u, t)) continue;
        w[t] = (float *)wv[t];
        if (g) g[t] = (float *)gv[t];
    }
    return res;
}
/* Done with unit u: release its weights; in backward (grads taken), its gradients are final: reduce-scatter. */
static inline accel_result gpt2_z3_done(gpt2_run *r, int u, int backward) {
    accel_result res = accel_zero_fsdp_release(r->z3.f, u);
    if (res == ACCEL_OK && backward) res = accel_zero_fsdp_reduce_scatter(r->z3.f, u);
    return res;
}
static inline void gpt2_z3_destroy(gpt2_run *r) {
    accel_zero_fsdp_destroy(r->z3.f);
    accel_host_free(r->acc, r->z3.list);
    accel_host_free(r->acc, r->z3.tensor_of);
    accel_host_free(r->acc, r->z3.units);
    accel_host_free(r->acc, r->z3.names);
    memset(&r->z3, 0, sizeof r->z3);
}

/* params, grads: the fp32 flat buffers; model16: the bf16 copy AdamW writes (NULL: none; --sr applies to it). */
static inline accel_result gpt2_run_setup(gpt2_run *r, void *params, void *grads, void *model16) {
    accel *acc = r->acc;
    const gpt2_opts *o = r->o;
    const gpt2_config *c = &r->cfg;
    accel_tensor model[GPT2_NUM_TENSORS];
    accel_data_seq_desc sd;
    accel_prof_desc pd;
    accel_result res;
    int P = acc->num_processes;
    if (params) gpt2_describe(c, params, ACCEL_F32, r->params); /* --zero 3: none (the shards, gpt2_z3_init) */
    if (grads) gpt2_describe(c, grads, ACCEL_F32, r->grads); /* --zero 3: FSDP's buffers instead */
    if (model16) gpt2_describe(c, model16, ACCEL_BF16, model);
    if (o->zero == 3) { /* what --zero 3 takes over, and what it does not combine with */
        const char *no = !r->zero3_capable ? "this trainer" : model16 ? "a model copy of the trainer's (the FSDP "
                         "object keeps the shard's, z3_param_dtype)" : o->hooks.dump_grads ? "--dump-grads"
                         : o->hooks.bench_noop ? "--bench-noop-accel"
                         : o->sr && r->z3_param_dtype == ACCEL_BF16 ? "--sr (its bits are indexed by the flat "
                         "buffer's offsets; the shard views are not one contiguous range of it)" : NULL;
        if (no) return accel_set_error(acc, ACCEL_ERR_INVALID_ARGUMENT, "--zero 3 is not supported with %s", no);
        if ((res = accel_coll_create(acc, NULL, &r->coll)) != ACCEL_OK ||
            (res = gpt2_z3_create(r, (float *)params)) != ACCEL_OK)
            return res;
        /* the param_dtype copy of the shard (vm; none for F32) is AdamW's model copy: what the next gathers read */
        res = gpt2_optim_create_list(acc, r->z3.vp, r->z3.vg, r->z3.vm[0].ptr ? r->z3.vm : NULL, r->z3.n,
                                     r->z3.tensor_of, o->lr, o->weight_decay, 0, o->seed, o->offload, &r->opt);
        memset(r->params, 0, sizeof r->params); /* the initial weights were copied into the shards */
    } else if (!grads) {
        return accel_set_error(acc, ACCEL_ERR_INVALID_ARGUMENT, "gpt2_run_setup: no gradient buffer");
    } else {
        /* AdamW (decay on the 2-D weights), cosine schedule with warmup on the scheduler count */
        res = gpt2_optim_create(acc, r->params, r->grads, model16 ? model : NULL, o->lr, o->weight_decay,
                                o->sr && model16, o->seed, &r->opt);
    }
    if (res != ACCEL_OK) return res;
    r->sched = gpt2_schedule(o->warmup, o->steps, P);

    /* data: rank r gets rows r*B .. r*B+B-1 of every global batch of P*B windows of T+1 tokens */
    memset(&sd, 0, sizeof sd);
    sd.files = o->data;
    sd.num_files = o->ndata;
    sd.batch_size = o->batch;
    sd.seq_len = o->seq;
    sd.shuffle = o->shuffle;
    sd.seed = o->seed;
    if ((res = accel_data_seq_init(acc, &r->loader, &sd)) != ACCEL_OK) return res;
    if (accel_data_seq_len(&r->loader) < 1)
        return accel_set_error(acc, ACCEL_ERR_INVALID_ARGUMENT, "the shards hold less than one global batch of %d x %d "
                               "tokens", P * o->batch, o->seq + 1);

    /* the reducer: the 16 gradients are one contiguous buffer in registration order, so it does one in-place
       all-reduce (averaged) after backward (NCCL between GPUs, MPI between CPU processes, nothing on one). A trainer
       that overlaps communication with backward would register them in the order backward finishes them. */
    if (!r->z3.f && ((res = accel_coll_create(acc, NULL, &r->coll)) != ACCEL_OK ||
                     (res = accel_ddp_create(r->coll, NULL, &r->reducer)) != ACCEL_OK ||
                     (res = accel_ddp_add(r->reducer, r->grads, GPT2_NUM_TENSORS)) != ACCEL_OK ||
                     (res = accel_ddp_finalize(r->reducer)) != ACCEL_OK))
        return res;

    /* checkpoints: the fp32 weights and AdamW moments (device buffers are staged by accel), the optimizer's step
       counts and the loader's position; accel's own state (step counters, RNG) comes with every checkpoint */
    if (o->ckpt_dir) {
        accel_ckpt_desc kd;
        const accel_tensor *moments;
        int nmoments;
        memset(&kd, 0, sizeof kd);
        kd.project_dir = o->ckpt_dir;
        kd.automatic_checkpoint_naming = 1;
        kd.total_limit = 2;
        kd.async = o->async_ckpt ? ACCEL_ON : ACCEL_OFF; /* the step after save_state may update the weights */
        kd.on_range = gpt2_ckpt_range;                   /* the snapshot and the background write: profiler ranges */
        kd.range_user = &r->prof;
        if ((res = accel_ckpt_create(acc, &kd, &r->ckpt)) != ACCEL_OK) return res;
        if (r->z3.f) res = gpt2_z3_register(r); /* --zero 3: sharded, no whole model on any rank */
        else if ((res = accel_ckpt_register_model(r->ckpt, r->params, GPT2_NUM_TENSORS)) != ACCEL_OK ||
                 (res = accel_optim_state_tensors(r->opt, &moments, &nmoments)) != ACCEL_OK ||
                 (res = accel_ckpt_register_optimizer(r->ckpt, moments, nmoments)) != ACCEL_OK)
            return res;
        else res = accel_ckpt_register(r->ckpt, "optim_state", accel_optim_state_save, accel_optim_state_load, r->opt);
        if (res != ACCEL_OK ||
            (res = accel_ckpt_register(r->ckpt, "loader", accel_data_seq_state_save, accel_data_seq_state_load,
                                       &r->loader)) != ACCEL_OK)
            return res;
        if (o->resume) {
            res = accel_ckpt_load_state(r->ckpt, NULL);
            if (res == ACCEL_ERR_NOT_FOUND) accel_print(acc, "no checkpoint in %s: starting fresh\n", o->ckpt_dir);
            else if (res != ACCEL_OK) return res;
            else accel_print(acc, "resumed at step %lld\n", (long long)acc->optimizer_steps);
        }
        /* preemptible: SIGTERM / SIGUSR1 set a stop flag, agreed on in gpt2_run_step_end (accel.h: PREEMPTION) */
        if ((res = accel_preemption_install(acc, ACCEL_PREEMPT_SIGNALS)) != ACCEL_OK) return res;
    }
    r->first_step = r->step = acc->optimizer_steps;

    /* logs: the loss file (main process), TensorBoard + JSONL; the profiler (disabled without --profile: then every
       begin/end is one flag test; device times are CUDA events on acc->stream, read without synchronizing) */
    if (o->loss_file && acc->is_main_process && !(r->loss_file = gpt2_open_loss_file(o->loss_file, o->resume,
                                                                                       r->first_step)))
        return accel_set_error(acc, ACCEL_ERR_IO, "cannot write %s", o->loss_file);
    if (o->log_dir) {
        accel_track_desc td;
        accel_track_param hp[8];
        memset(&td, 0, sizeof td);
        td.log_with = ACCEL_TRACK_ALL;
        td.logging_dir = o->log_dir;
        if ((res = accel_track_init(acc, &r->trk, &td)) != ACCEL_OK) return res;
        r->tracking = 1;
        hp[0] = accel_track_param_int("layers", c->num_layers);
        hp[1] = accel_track_param_int("heads", c->num_heads);
        hp[2] = accel_track_param_int("channels", c->channels);
        hp[3] = accel_track_param_int("vocab", c->vocab_size);
        hp[4] = accel_track_param_int("batch", o->batch);
        hp[5] = accel_track_param_int("seq", o->seq);
        hp[6] = accel_track_param_int("accum", acc->gradient_accumulation_steps);
        hp[7] = accel_track_param_number("lr", o->lr);
        if ((res = accel_track_init_trackers(&r->trk, r->name, hp, 8)) != ACCEL_OK) return res;
    }

    accel_print(acc, "%s: L=%d H=%d C=%d V=%d (padded %d) block %d: %zu parameters | %d %s x batch %d x seq %d x "
                "accum %d | %s | %lld global batches per epoch | reducer: %s%s%s%s\n", r->name, c->num_layers,
                c->num_heads, c->channels, c->vocab_size, c->padded_vocab_size, c->max_seq_len,
                gpt2_num_parameters(c), P, acc->device >= 0 ? "GPU(s)" : "process(es)", o->batch, o->seq,
                acc->gradient_accumulation_steps, !model16 ? "float32" : o->sr ? "bf16 (stochastic rounding)" : "bf16",
                (long long)accel_data_seq_len(&r->loader),
                r->z3.f ? (o->offload ? "ZeRO-3 (FULL_SHARD: embeddings + one unit per block; offload: AdamW on the "
                                        "host)" : "ZeRO-3 (FULL_SHARD: embeddings + one unit per block)")
                : accel_ddp_is_flat(r->reducer) ? "one in-place all-reduce" : "buckets",
                r->banner_note ? " | " : "", r->banner_note ? r->banner_note : "",
                o->hooks.bench_noop ? " | BENCHMARK: accel's calls are no-ops" : "");
    /* the profiler last: its first step starts here (the loop's first step) */
    memset(&pd, 0, sizeof pd);
    pd.disabled = !o->profile_dir;
    pd.trace_dir = o->profile_dir;
    if ((res = accel_prof_create(acc, &pd, &r->prof)) != ACCEL_OK) return res;
    r->t0 = accel_now();
    return ACCEL_OK;
}

/* The next (B, T+1) windows of this rank into win; *got = 0 at the end of an epoch (the loader advanced it). */
static inline accel_result gpt2_run_next(gpt2_run *r, int32_t *win, int *got) {
    int32_t bad;
    accel_result res = accel_data_seq_next(&r->loader, win, got);
    if (res != ACCEL_OK || !*got) return res;
    if (gpt2_check_tokens(win, (size_t)r->o->batch * (r->o->seq + 1), r->cfg.vocab_size, &bad) != 0)
        return accel_set_error(r->acc, ACCEL_ERR_FORMAT, "token %d in the data is outside the vocabulary (%d)",
                               (int)bad, r->cfg.vocab_size);
    return ACCEL_OK;
}

/* The gradients averaged over ranks (in place; NCCL on acc->stream, MPI on the CPU). */
static inline accel_result gpt2_run_reduce(gpt2_run *r) {
    accel_result res;
    int k;
    if (r->z3.f) return ACCEL_OK; /* --zero 3: reduce-scattered unit by unit in backward (gpt2_z3_done) */
    for (k = 0; k < GPT2_NUM_TENSORS; ++k)
        if ((res = accel_ddp_grad_ready(r->reducer, k)) != ACCEL_OK) return res;
    return accel_ddp_wait(r->reducer);
}

/* The optimizer step (on a sync micro-batch): clip_grad_norm_ (the norm here, the coefficient applied inside the
   fused step), the schedule at Accelerate's scheduler count, AdamW (parameters, moments and the bf16 copy in one
   pass). Sets r->step, r->lr, r->norm. */
static inline accel_result gpt2_run_optimizer_step(gpt2_run *r) {
    accel *acc = r->acc;
    accel_optim_step_args sa;
    float coef = 1.0f;
    accel_result res;
    r->step = acc->optimizer_steps + 1; /* the 1-based number of this step */
    if ((res = gpt2_hooks_grads_reduced(r)) != ACCEL_OK) return res;
    /* DEVICE-SIDE CLIP GOES HERE. On a GPU the norm is the step's one synchronization: accel_amp_grad_norm returns
       it to the host, which computes the coefficient before AdamW is enqueued, so the device idles while the host
       launches the optimizer. When accel_optim_step_args takes the norm in device memory (grad_norm, max_norm) and
       accel_amp can write it there, pass it instead; r->norm (for the log) then comes back with the step's loss
       (fetch_loss, train_gpt2.cu's step_readback). */
    res = r->z3.f ? accel_amp_grad_norm(acc, r->z3.vn, r->z3.n, 2.0, ACCEL_AMP_CLIP_SHARDED, &r->norm) /* collective */
                  : accel_amp_grad_norm(acc, r->grads, GPT2_NUM_TENSORS, 2.0, 0, &r->norm);
    if (res != ACCEL_OK) return res;
    if (r->o->clip > 0) coef = accel_optim_clip_coef(r->norm, r->o->clip);
    memset(&sa, 0, sizeof sa);
    sa.clip_coef = r->o->clip > 0 ? &coef : NULL;
    if ((res = accel_optim_apply_schedule(r->opt, &r->sched, acc->scheduler_steps)) != ACCEL_OK) return res;
    r->lr = accel_optim_lr(r->opt, 0);
    if ((res = accel_optim_step(r->opt, &sa)) != ACCEL_OK) return res;
    accel_optimizer_step_done(acc, 0);
    return ACCEL_OK;
}

/* A step's log line: loss = this rank's mean loss over the step's micro-batches; the mean over ranks goes to the
   loss file (step loss lr), the progress line (every --print-every steps and the last) and the trackers. Every rank
   logs the same steps at the same point of its loop (the mean over ranks is a collective). */
static inline accel_result gpt2_run_log_step(gpt2_run *r, const gpt2_late_log *s, double loss) {
    accel *acc = r->acc;
    const gpt2_opts *o = r->o;
    int P = acc->num_processes;
    double el, tps, mfu;
    accel_result res;
    if ((res = accel_host_allreduce_f64(acc, &loss, 1, ACCEL_HOST_SUM)) != ACCEL_OK) return res;
    loss /= P;
    if (r->loss_file) {
        fprintf(r->loss_file, "%lld %.9g %.9g\n", (long long)s->step, loss, s->lr);
        fflush(r->loss_file);
    }
    el = s->t - r->t0;
    tps = (double)(s->step - r->first_step) * o->batch * o->seq * acc->gradient_accumulation_steps * P /
          (el > 0 ? el : 1e-9);
    mfu = r->peak_flops > 0 ? gpt2_flops_per_token(&r->cfg, o->seq) * tps / (r->peak_flops * P) : 0.0;
    if (o->print_every && (s->step % o->print_every == 0 || s->step == o->steps)) {
        char mfus[32] = "n/a";
        if (r->peak_flops > 0) snprintf(mfus, sizeof mfus, "%.1f%%", 100.0 * mfu);
        accel_print(acc, "step %5lld/%d | loss %.6f | lr %.3e | norm %.4f | %.1f ms/step | %.0f tok/s | MFU %s\n",
                    (long long)s->step, o->steps, loss, s->lr, s->norm,
                    1000.0 * el / (double)(s->step - r->first_step), tps, mfus);
    }
    if (r->tracking) {
        accel_track_value tv[5];
        tv[0] = accel_track_scalar("train/loss", loss);
        tv[1] = accel_track_scalar("train/lr", s->lr);
        tv[2] = accel_track_scalar("train/grad_norm", s->norm);
        tv[3] = accel_track_scalar("perf/tokens_per_s", tps);
        tv[4] = accel_track_scalar("perf/mfu", mfu);
        if ((res = accel_track_log(&r->trk, tv, 5, s->step)) != ACCEL_OK) return res;
    }
    return ACCEL_OK;
}

/* At the end of a step (after gpt2_run_optimizer_step and accumulate_end): its log line is written later, by
   gpt2_run_log_pending or gpt2_run_step_end. loss_sum: the sum of its micro-batches' losses (ignored with
   fetch_loss, which brings it then). */
static inline void gpt2_run_log_later(gpt2_run *r, int micro, double loss_sum) {
    gpt2_late_log *s = &r->late;
    s->pending = 1;
    s->micro = micro;
    s->step = r->step;
    s->lr = r->lr;
    s->norm = r->norm;
    s->loss_sum = loss_sum;
    s->t = accel_now();
}

/* The pending step's log line, if one waits (a "logging" range in the profiler): fetch_loss first, whose return is
   when the loss became known. */
static inline accel_result gpt2_run_log_pending(gpt2_run *r) {
    gpt2_late_log *s = &r->late;
    accel_result res;
    if (!s->pending) return ACCEL_OK;
    s->pending = 0;
    if ((res = accel_prof_begin(r->prof, ACCEL_PROF_LOGGING)) != ACCEL_OK) return res;
    if (r->fetch_loss) {
        if ((res = r->fetch_loss(r->acc, r->fetch_ctx, &s->loss_sum)) != ACCEL_OK) return res;
        s->t = accel_now();
    }
    if ((res = gpt2_run_log_step(r, s, s->loss_sum / s->micro)) != ACCEL_OK) return res;
    return accel_prof_end(r->prof, ACCEL_PROF_LOGGING);
}

/* Whether gpt2_run_step_end saves a checkpoint after step r->step: every --checkpoint-every steps, the last, and
   the step a preemption stops at. */
static inline int gpt2_run_ckpt_due(const gpt2_run *r) {
    const gpt2_opts *o = r->o;
    return r->ckpt && ((o->ckpt_every && r->step % o->ckpt_every == 0) || r->step == o->steps || r->stop);
}

/* Whether step r->step must be complete and logged in gpt2_run_step_end: before a checkpoint (the loss file holds
   the steps it covers), --kill-at (the killed run's loss file is read back on resume), the summary clock's start
   (the step's device work done), the run's last step. The same on every rank. */
static inline int gpt2_run_step_must_complete(const gpt2_run *r) {
    const gpt2_opts *o = r->o;
    return gpt2_run_ckpt_due(r) || r->step == o->steps || (o->hooks.kill_at && r->step == o->hooks.kill_at) ||
           r->step == r->first_step + GPT2_UNTIMED_STEPS;
}

/* The end of a step (after gpt2_run_log_later): with checkpoints, whether any rank was preempted (SIGTERM/SIGUSR1,
   accel_should_stop: every rank the same answer at the same step; r->stop, and the trainer's loop ends); its log line
   where the step must be complete, save_state every --checkpoint-every steps, after the last and when stopping
   (after accumulate_end: the counters are final; an async save is waited for when stopping), the profiler's step,
   then the step-end hooks. */
static inline accel_result gpt2_run_step_end(gpt2_run *r) {
    accel_result res;
    if (r->o->hooks.signal_at && r->step == r->o->hooks.signal_at &&
        r->acc->process_index == r->acc->num_processes - 1)
        raise(SIGUSR1); /* --signal-at: a preemption notice reaching one rank */
    /* the stop agreement is a small host all-reduce, counted with the step's other host reductions (logging) so that
       the profiler's phases still cover the step */
    if (r->ckpt && r->step < r->o->steps &&
        ((res = accel_prof_begin(r->prof, ACCEL_PROF_LOGGING)) != ACCEL_OK ||
         (res = accel_should_stop(r->acc, &r->stop)) != ACCEL_OK ||
         (res = accel_prof_end(r->prof, ACCEL_PROF_LOGGING)) != ACCEL_OK))
        return res;
    if (gpt2_run_step_must_complete(r) && (res = gpt2_run_log_pending(r)) != ACCEL_OK) return res;
    if (gpt2_run_ckpt_due(r)) {
        if ((res = accel_prof_begin(r->prof, ACCEL_PROF_CHECKPOINT)) != ACCEL_OK ||
            (res = accel_ckpt_save_state(r->ckpt, NULL, NULL, 0)) != ACCEL_OK ||
            (res = accel_prof_end(r->prof, ACCEL_PROF_CHECKPOINT)) != ACCEL_OK)
            return res;
    }
    /* --kill-at after an async save: the crash comes once it is on disk (a kill during the write is ckpt-crash's) */
    if (r->ckpt && r->o->hooks.kill_at && r->step == r->o->hooks.kill_at &&
        (res = accel_ckpt_wait(r->ckpt)) != ACCEL_OK)
        return res;
    if (r->stop) {
        if ((res = accel_ckpt_wait(r->ckpt)) != ACCEL_OK) return res;
        accel_print(r->acc, "preempted (signal %d) after step %lld: checkpoint saved; exiting with %d to be requeued "
                    "(then --resume)\n", r->stop, (long long)r->step, ACCEL_EXIT_REQUEUE);
    }
    if ((res = accel_prof_step(r->prof)) != ACCEL_OK) return res;
    gpt2_hooks_step_end(r);
    return ACCEL_OK;
}

/* After the loop (device work finished): the summary line, this rank's phase table and traces (and on several
   ranks their merge), save_model with Hugging Face names (collective), the trackers' last write. */
static inline accel_result gpt2_run_finish(gpt2_run *r) {
    accel *acc = r->acc;
    const gpt2_opts *o = r->o;
    accel_result res;
    if ((res = gpt2_run_log_pending(r)) != ACCEL_OK) return res; /* none after a last step: it logs at once */
    if (r->ckpt && (res = accel_ckpt_wait(r->ckpt)) != ACCEL_OK) return res; /* the last async save, or its error */
    gpt2_hooks_run_end(r);
    if (r->z3.f) { /* --zero 3: the gathers' overlap and the gather buffers' peak (per rank: the same on every rank) */
        accel_zero_fsdp_stats st;
        accel_zero_fsdp_desc fd;
        accel_zero_fsdp_memory em;
        if ((res = accel_zero_fsdp_get_stats(r->z3.f, &st)) != ACCEL_OK ||
            (res = accel_zero_fsdp_get_desc(r->z3.f, &fd)) != ACCEL_OK)
            return res;
        fd.units = r->z3.units;
        if ((res = accel_zero_fsdp_estimate(acc, &fd, acc->num_processes, 0, ACCEL_F32, 0, &em)) != ACCEL_OK)
            return res;
        accel_print(acc, "zero3: %lld block gathers, %lld prefetched while the unit before computed; gather buffers "
                    "per rank: at most %d live, peak %llu bytes (estimate %llu: the root + two blocks)\n",
                    (long long)r->z3.block_gathers, (long long)r->z3.block_ahead, st.peak_gathers,
                    (unsigned long long)st.peak_gather_bytes, (unsigned long long)em.gather_buffers);
    }
    if (o->profile_dir) {
        if (acc->is_main_process && (res = accel_prof_print_table(r->prof, stdout)) != ACCEL_OK) return res;
        if ((res = accel_prof_write_trace(r->prof)) != ACCEL_OK) return res;
        if (acc->num_processes > 1 && (res = accel_prof_merge_trace(r->prof, NULL)) != ACCEL_OK) return res;
    }
    if (o->export_dir && r->z3.f) { /* the shards gathered into a whole buffer for the file (FULL_STATE_DICT) */
        size_t bytes = gpt2_num_parameters(&r->cfg) * sizeof(float);
        /* in the communicator's memory (the device's with to_host), then through r->host to the file */
        float *whole = (float *)(r->to_host ? accel_device_alloc(acc, bytes) : accel_host_alloc(acc, bytes));
        if (whole && !r->to_host) memset(whole, 0, bytes);
        gpt2_z3_place(r, whole); /* NULL: the export refuses it on every rank (collective: no rank waits) */
        res = accel_zero_fsdp_export(r->z3.f, r->z3.list, r->z3.n);
        if (!whole) res = accel_set_error(acc, ACCEL_ERR_OUT_OF_MEMORY, "--export: %zu bytes", bytes);
        if (res == ACCEL_OK && r->to_host) res = r->to_host(acc, r->host, whole, bytes);
        if (res == ACCEL_OK) res = gpt2_export(acc, &r->cfg, r->to_host ? r->host : whole, o->export_dir);
        gpt2_z3_place(r, NULL);
        if (r->to_host) accel_device_free(acc, whole);
        else accel_host_free(acc, whole);
        if (res != ACCEL_OK) return res;
        accel_print(acc, "exported %s/model.safetensors (Hugging Face GPT-2 names) and config.json\n", o->export_dir);
    } else if (o->export_dir) {
        const void *params = r->params[0].ptr;
        if (r->to_host) {
            if ((res = r->to_host(acc, r->host, params, gpt2_num_parameters(&r->cfg) * sizeof(float))) != ACCEL_OK)
                return res;
            params = r->host;
        }
        if ((res = gpt2_export(acc, &r->cfg, (const float *)params, o->export_dir)) != ACCEL_OK) return res;
        accel_print(acc, "exported %s/model.safetensors (Hugging Face GPT-2 names) and config.json\n", o->export_dir);
    }
    if (r->tracking) {
        r->tracking = 0;
        if ((res = accel_track_deinit(&r->trk)) != ACCEL_OK) return res;
    }
    return ACCEL_OK;
}

/* Destroys accel's objects (before the trainer frees the buffers they hold; safe after any failure). */
static inline void gpt2_run_release(gpt2_run *r) {
    if (r->loss_file) fclose(r->loss_file);
    r->loss_file = NULL;
    if (r->tracking) accel_track_deinit(&r->trk);
    r->tracking = 0;
    accel_st_file_destroy(r->init);
    accel_ckpt_destroy(r->ckpt);
    accel_optim_destroy(r->opt);
    accel_prof_destroy(r->prof);
    gpt2_z3_destroy(r);
    accel_ddp_destroy(r->reducer);
    accel_coll_destroy(r->coll);
    accel_data_seq_deinit(&r->loader);
    r->init = NULL;
    r->ckpt = NULL;
    r->opt = NULL;
    r->prof = NULL;
    r->reducer = NULL;
    r->coll = NULL;
}

/* The end of main (after gpt2_run_release and the trainer's frees): accel_shutdown; returns rc. On a failure with
   several ranks the process exits here instead: peers may wait in a collective, and the launcher ends the job (not
   after a preemption, ACCEL_EXIT_REQUEUE: every rank stopped at the same step). */
static inline int gpt2_run_end(gpt2_run *r, int rc) {
    if (rc && rc != ACCEL_EXIT_REQUEUE && r->inited && r->acc->num_processes > 1) {
        fflush(stdout);
        fflush(stderr);
        exit(rc);
    }
    accel_shutdown(r->acc);
    return rc;
}

#endif /* GPT2_H_INCLUDED */
