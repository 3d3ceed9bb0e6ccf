/* gpt2_cpu.c — GPT-2 in plain C, float32: the reference trainer (forward, backward, AdamW) on accel.

   The model math follows karpathy/llm.c's train_gpt2.c (same layers, same parameter layout: see gpt2.h); it is
   checked against the same model written in PyTorch (tests/unit/trainer/test_gpt2_torch.py) and is the oracle of the
   CUDA trainer (train_gpt2.cu). Everything around the model is accel, exactly as in the CUDA trainer (set up and
   driven through gpt2.h's gpt2_run; main below is the model, the loop, and those calls):

     accel.h              process group (mpirun / srun / torchrun), gradient accumulation, scheduler bookkeeping
     accel_data.h         llm.c token shards: each rank's (B, T+1) windows of every global batch, resumable
     accel_collectives.h  the gradient reducer (averages the gradients over ranks; MPI on the CPU)
     accel_zero.h         --zero 3: ZeRO-3 / FSDP FULL_SHARD, units = the embeddings (+ final norm) and each block;
                          forward and backward wait for a unit's weights and release them (unit_get / unit_done),
                          backward reduce-scatters each unit's gradients; AdamW steps this rank's shards;
                          --offload: shards and AdamW state in pinned host memory, the step on the host
     accel_amp.h          the global gradient norm (clip_grad_norm's)
     accel_optim.h        AdamW (torch.optim.AdamW's update; the clip coefficient fused into the step), the schedule
     accel_ckpt.h         save_state / load_state (weights, AdamW moments, loader and step counters), save_model
                          with Hugging Face GPT-2 names, --init from such a file
     accel_trackers.h     TensorBoard + JSONL
     accel_profile.h      --profile DIR: the per-step phase table and Chrome traces (data, forward, backward,
                          grad_sync, optimizer, logging, checkpoint)

     build/examples/gpt2/gpt2_cpu --gen-shard /tmp/tiny.bin 100000 64
     build/examples/gpt2/gpt2_cpu --data /tmp/tiny.bin --layers 2 --heads 2 --channels 32 --vocab 64 --seq 32 \
         --batch 8 --steps 200 --lr 1e-3
     mpirun -np 2 build/examples/gpt2/gpt2_cpu ... (the same run: --batch is per process, the loader shards)
     mpirun -np 2 build/examples/gpt2/gpt2_cpu ... --zero 3 (the same run again, each rank holding half the model)

   Semantics (Accelerate's): --batch is per process; a step sees P × batch × accum windows; the loss is divided by
   accum and the reducer averages over ranks, so the gradient is the mean over the global batch whatever P and accum
   are. The LR schedule reads acc.scheduler_steps (P per optimizer step). */
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
#include "gpt2.h"

/* ------------------------------------------------------------------------------------------------- layers */
/* Shapes: B batch, T time, C channels, OC output channels, NH heads; activations are row-major (B, T, ...). */

static void encoder_forward(float *out, const int *inp, const float *wte, const float *wpe, int B, int T, int C) {
    int b, t, i;
    for (b = 0; b < B; ++b)
        for (t = 0; t < T; ++t) {
            float *o = out + ((size_t)b * T + t) * C;
            const float *te = wte + (size_t)inp[b * T + t] * C, *pe = wpe + (size_t)t * C;
            for (i = 0; i < C; ++i) o[i] = te[i] + pe[i];
        }
}

static void encoder_backward(float *dwte, float *dwpe, const float *dout, const int *inp, int B, int T, int C) {
    int b, t, i;
    for (b = 0; b < B; ++b)
        for (t = 0; t < T; ++t) {
            const float *d = dout + ((size_t)b * T + t) * C;
            float *dte = dwte + (size_t)inp[b * T + t] * C, *dpe = dwpe + (size_t)t * C;
            for (i = 0; i < C; ++i) {
                dte[i] += d[i];
                dpe[i] += d[i];
            }
        }
}

/* y = (x - mean) / sqrt(var + 1e-5) * w + b per row (population variance); keeps mean and 1/std for backward. */
static void layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
                              int N, int C) {
    int n, i;
    for (n = 0; n < N; ++n) {
        const float *x = inp + (size_t)n * C;
        float *o = out + (size_t)n * C, m = 0.0f, v = 0.0f, s;
        for (i = 0; i < C; ++i) m += x[i];
        m /= C;
        for (i = 0; i < C; ++i) v += (x[i] - m) * (x[i] - m);
        v /= C;
        s = 1.0f / sqrtf(v + 1e-5f);
        for (i = 0; i < C; ++i) o[i] = (x[i] - m) * s * w[i] + b[i];
        mean[n] = m;
        rstd[n] = s;
    }
}

/* dinp += ..., dw += ..., db += ... */
static void layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                               const float *mean, const float *rstd, int N, int C) {
    int n, i;
    for (n = 0; n < N; ++n) {
        const float *d = dout + (size_t)n * C, *x = inp + (size_t)n * C;
        float *dx = dinp + (size_t)n * C, m = mean[n], s = rstd[n], dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
        for (i = 0; i < C; ++i) {
            float norm = (x[i] - m) * s, dnorm = w[i] * d[i];
            dnorm_mean += dnorm;
            dnorm_norm_mean += dnorm * norm;
        }
        dnorm_mean /= C;
        dnorm_norm_mean /= C;
        for (i = 0; i < C; ++i) {
            float norm = (x[i] - m) * s, dnorm = w[i] * d[i];
            db[i] += d[i];
            dw[i] += norm * d[i];
            dx[i] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
        }
    }
}

/* out (N, OC) = inp (N, C) · weightᵀ (weight: OC rows of C) + bias (NULL: none). */
static void matmul_forward(float *out, const float *inp, const float *weight, const float *bias, int N, int C, int OC) {
    int n, o, i;
    for (n = 0; n < N; ++n) {
        const float *x = inp + (size_t)n * C;
        for (o = 0; o < OC; ++o) {
            const float *wr = weight + (size_t)o * C;
            float s = bias ? bias[o] : 0.0f;
            for (i = 0; i < C; ++i) s += x[i] * wr[i];
            out[(size_t)n * OC + o] = s;
        }
    }
}

/* dinp = dout · weight (overwritten); dweight += doutᵀ · inp; dbias += column sums of dout (NULL: none). */
static void matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                            const float *weight, int N, int C, int OC) {
    int n, o, i;
    for (n = 0; n < N; ++n) {
        const float *d = dout + (size_t)n * OC, *x = inp + (size_t)n * C;
        float *dx = dinp + (size_t)n * C;
        for (i = 0; i < C; ++i) dx[i] = 0.0f;
        for (o = 0; o < OC; ++o) {
            const float *wr = weight + (size_t)o * C;
            float *dwr = dweight + (size_t)o * C, g = d[o];
            for (i = 0; i < C; ++i) {
                dx[i] += g * wr[i];
                dwr[i] += g * x[i];
            }
            if (dbias) dbias[o] += g;
        }
    }
}

/* Causal self-attention. qkv (B, T, 3C) holds q, k, v; head h uses channels h*hs .. h*hs+hs-1 of each.
   att (B, NH, T, T) keeps the softmax rows (0 above the diagonal) for backward. */
static void attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH) {
    int hs = C / NH, b, t, h, t2, i;
    float scale = 1.0f / sqrtf((float)hs);
    for (b = 0; b < B; ++b)
        for (t = 0; t < T; ++t)
            for (h = 0; h < NH; ++h) {
                const float *q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
                float *a = att + (((size_t)b * NH + h) * T + t) * T, mx = -INFINITY, sum = 0.0f;
                float *o = out + ((size_t)b * T + t) * C + h * hs;
                for (t2 = 0; t2 <= t; ++t2) {
                    const float *k = qkv + ((size_t)b * T + t2) * 3 * C + C + h * hs;
                    float s = 0.0f;
                    for (i = 0; i < hs; ++i) s += q[i] * k[i];
                    a[t2] = s * scale;
                    if (a[t2] > mx) mx = a[t2];
                }
                for (t2 = 0; t2 <= t; ++t2) {
                    a[t2] = expf(a[t2] - mx);
                    sum += a[t2];
                }
                for (t2 = 0; t2 <= t; ++t2) a[t2] /= sum;
                for (t2 = t + 1; t2 < T; ++t2) a[t2] = 0.0f;
                for (i = 0; i < hs; ++i) o[i] = 0.0f;
                for (t2 = 0; t2 <= t; ++t2) {
                    const float *v = qkv + ((size_t)b * T + t2) * 3 * C + 2 * C + h * hs;
                    for (i = 0; i < hs; ++i) o[i] += a[t2] * v[i];
                }
            }
}

/* dqkv (overwritten) from dout (B, T, C); datt is a scratch row of T floats. */
static void attention_backward(float *dqkv, float *datt, const float *dout, const float *qkv, const float *att, int B,
                               int T, int C, int NH) {
    int hs = C / NH, b, t, h, t2, i;
    float scale = 1.0f / sqrtf((float)hs);
    memset(dqkv, 0, (size_t)B * T * 3 * C * sizeof(float));
    for (b = 0; b < B; ++b)
        for (t = 0; t < T; ++t)
            for (h = 0; h < NH; ++h) {
                const float *a = att + (((size_t)b * NH + h) * T + t) * T;
                const float *d = dout + ((size_t)b * T + t) * C + h * hs;
                const float *q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
                float *dq = dqkv + ((size_t)b * T + t) * 3 * C + h * hs, dot = 0.0f;
                for (t2 = 0; t2 <= t; ++t2) { /* out = Σ a·v: da = d·v, dv += a·d */
                    const float *v = qkv + ((size_t)b * T + t2) * 3 * C + 2 * C + h * hs;
                    float *dv = dqkv + ((size_t)b * T + t2) * 3 * C + 2 * C + h * hs, s = 0.0f;
                    for (i = 0; i < hs; ++i) {
                        s += d[i] * v[i];
                        dv[i] += a[t2] * d[i];
                    }
                    datt[t2] = s;
                    dot += a[t2] * s;
                }
                for (t2 = 0; t2 <= t; ++t2) { /* softmax: dpre = a·(da - Σ a·da); pre = scale·q·k */
                    const float *k = qkv + ((size_t)b * T + t2) * 3 * C + C + h * hs;
                    float *dk = dqkv + ((size_t)b * T + t2) * 3 * C + C + h * hs;
                    float dpre = a[t2] * (datt[t2] - dot) * scale;
                    for (i = 0; i < hs; ++i) {
                        dq[i] += dpre * k[i];
                        dk[i] += dpre * q[i];
                    }
                }
            }
}

#define GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */
static void gelu_forward(float *out, const float *inp, size_t n) {
    size_t i;
    for (i = 0; i < n; ++i) {
        float x = inp[i];
        out[i] = 0.5f * x * (1.0f + tanhf(GELU_SCALE * (x + 0.044715f * x * x * x)));
    }
}
/* d = d · gelu'(x), in place */
static void gelu_backward(float *d, const float *inp, size_t n) {
    size_t i;
    for (i = 0; i < n; ++i) {
        float x = inp[i], u = GELU_SCALE * (x + 0.044715f * x * x * x), th = tanhf(u);
        d[i] *= 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
    }
}

static void residual_forward(float *out, const float *a, const float *b, size_t n) {
    size_t i;
    for (i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

/* losses[n] = logsumexp(logits[n, :V]) - logits[n, target]; the Vp - V padded columns are ignored. */
static void crossentropy_forward(float *losses, const float *logits, const int *targets, int N, int V, int Vp) {
    int n, i;
    for (n = 0; n < N; ++n) {
        const float *z = logits + (size_t)n * Vp;
        float mx = -INFINITY, sum = 0.0f;
        for (i = 0; i < V; ++i) if (z[i] > mx) mx = z[i];
        for (i = 0; i < V; ++i) sum += expf(z[i] - mx);
        losses[n] = logf(sum) + mx - z[targets[n]];
    }
}
/* logits → dlogits in place: (softmax - onehot) · dloss; padded columns 0. */
static void crossentropy_softmax_backward(float *logits, const int *targets, float dloss, int N, int V, int Vp) {
    int n, i;
    for (n = 0; n < N; ++n) {
        float *z = logits + (size_t)n * Vp, mx = -INFINITY, sum = 0.0f;
        for (i = 0; i < V; ++i) if (z[i] > mx) mx = z[i];
        for (i = 0; i < V; ++i) sum += expf(z[i] - mx);
        for (i = 0; i < V; ++i) z[i] = (expf(z[i] - mx) / sum - (i == targets[n] ? 1.0f : 0.0f)) * dloss;
        for (i = V; i < Vp; ++i) z[i] = 0.0f;
    }
}

/* -------------------------------------------------------------------------------------------------- model */
typedef struct gpt2 {
    gpt2_config cfg;
    int B, T;
    size_t off[GPT2_NUM_TENSORS + 1], nparams;
    float *params, *grads; /* flat, gpt2.h's layout (the AdamW moments belong to accel_optim) */
    /* activations kept for backward (per layer: L × the size) */
    float *encoded, *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *att, *residual2, *ln2, *ln2_mean, *ln2_rstd, *fch,
        *fch_gelu, *residual3, *lnf, *lnf_mean, *lnf_rstd, *logits, *losses;
    /* scratch: one layer's worth */
    float *tmp, *dres, *dc, *d4c, *dqkv, *datt;
    int *inputs, *targets;
    float *mem;
    gpt2_run *z3; /* --zero 3: the run whose FSDP object holds the weights and gradients (NULL: the flat buffers) */
} gpt2;

static int gpt2_alloc(accel *acc, gpt2 *m, const gpt2_config *cfg, int B, int T, int zero3) {
    size_t L = (size_t)cfg->num_layers, C = (size_t)cfg->channels, NH = (size_t)cfg->num_heads, BT = (size_t)B * T;
    size_t sizes[25], total = 0;
    float **ptrs[25];
    int k = 0, i;
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    m->B = B;
    m->T = T;
    m->nparams = gpt2_offsets(cfg, m->off);
#define A_(p, n) (ptrs[k] = &m->p, sizes[k++] = (n))
    A_(params, zero3 ? 0 : m->nparams); A_(grads, zero3 ? 0 : m->nparams); /* --zero 3: FSDP's shards and buffers */
    A_(encoded, BT * C); A_(ln1, L * BT * C); A_(ln1_mean, L * BT); A_(ln1_rstd, L * BT); A_(qkv, L * BT * 3 * C);
    A_(atty, L * BT * C); A_(att, L * B * NH * T * T); A_(residual2, L * BT * C); A_(ln2, L * BT * C);
    A_(ln2_mean, L * BT); A_(ln2_rstd, L * BT); A_(fch, L * BT * 4 * C); A_(fch_gelu, L * BT * 4 * C);
    A_(residual3, L * BT * C); A_(lnf, BT * C); A_(lnf_mean, BT); A_(lnf_rstd, BT);
    A_(logits, BT * (size_t)cfg->padded_vocab_size); A_(losses, BT);
    A_(tmp, BT * 4 * C); /* tmp: (BT, C) outputs; with dres .. datt the backward scratch */
#undef A_
    for (i = 0; i < k; ++i) total += sizes[i];
    total += BT * C * 2 + BT * 4 * C + BT * 3 * C + (size_t)T; /* dres dc d4c dqkv datt */
    m->mem = (float *)accel_host_alloc(acc, total * sizeof(float));
    m->inputs = (int *)accel_host_alloc(acc, 2 * BT * sizeof(int));
    if (!m->mem || !m->inputs) return -1;
    memset(m->mem, 0, total * sizeof(float));
    total = 0;
    for (i = 0; i < k; ++i) {
        *ptrs[i] = m->mem + total;
        total += sizes[i];
    }
    m->dres = m->mem + total; total += BT * C;
    m->dc = m->mem + total; total += BT * C;
    m->d4c = m->mem + total; total += BT * 4 * C;
    m->dqkv = m->mem + total; total += BT * 3 * C;
    m->datt = m->mem + total;
    m->targets = m->inputs + BT;
    if (zero3) m->params = m->grads = NULL;
    return 0;
}

/* Unit u's tensors (u = 0: wte, wpe, lnfw, lnfb; u = 1 + l: block l's twelve) as pointers w[tensor] (and with g the
   gradients to += into): slices of the flat buffers, or under --zero 3 the gathered unit and its gradient buffer
   (gpt2_z3_unit: FSDP's wait / grads). unit_done releases it (and in backward reduce-scatters its gradients). */
static accel_result unit_get(gpt2 *m, int u, float *w[GPT2_NUM_TENSORS], float *g[GPT2_NUM_TENSORS]) {
    int t;
    if (m->z3) return gpt2_z3_unit(m->z3, u, w, g);
    for (t = 0; t < GPT2_NUM_TENSORS; ++t) {
        size_t at = gpt2_unit_offset(m->off, m->cfg.num_layers, u, t);
        if (!gpt2_unit_has(u, t)) continue;
        w[t] = m->params + at;
        if (g) g[t] = m->grads + at;
    }
    return ACCEL_OK;
}
static accel_result unit_done(gpt2 *m, int u, int backward) {
    return m->z3 ? gpt2_z3_done(m->z3, u, backward) : ACCEL_OK;
}
/* Inside a block's compute: MPI moves the next unit's prefetched gather (and the last unit's reduction) only inside
   MPI calls, so the block's large steps are interleaved with accel_zero_fsdp_progress (local; no-op otherwise). */
static accel_result unit_progress(gpt2 *m) { return m->z3 ? accel_zero_fsdp_progress(m->z3->z3.f) : ACCEL_OK; }
#define TRY(call)                                                                                                    \
    do {                                                                                                            \
        accel_result try_r_ = (call);                                                                               \
        if (try_r_ != ACCEL_OK) return try_r_;                                                                      \
    } while (0)

static void gpt2_free(accel *acc, gpt2 *m) {
    accel_host_free(acc, m->mem);
    accel_host_free(acc, m->inputs);
}

/* Forward over m->inputs / m->targets (B, T): *loss = the mean loss. Unit by unit (unit_get / unit_done): the
   embeddings and final norm (unit 0, FSDP's root) are held through the pass, each block's weights only while it
   computes; under --zero 3 the next block's gather is in flight meanwhile (started by unit_get of this block:
   forward_prefetch; the root does not take one of the two places, accel_zero.h UNITS, SHARDS AND BUFFERS). */
static accel_result gpt2_forward(gpt2 *m, float *loss) {
    const gpt2_config *c = &m->cfg;
    int B = m->B, T = m->T, C = c->channels, NH = c->num_heads, L = c->num_layers, l, BT = B * T;
    size_t btc = (size_t)BT * C;
    float *e[GPT2_NUM_TENSORS], *w[GPT2_NUM_TENSORS];
    double sum = 0.0;
    int n;
    if (m->z3) TRY(accel_zero_fsdp_begin_forward(m->z3->z3.f));
    TRY(unit_get(m, 0, e, NULL));
    encoder_forward(m->encoded, m->inputs, e[GPT2_WTE], e[GPT2_WPE], B, T, C);
    for (l = 0; l < L; ++l) {
        const float *res = l == 0 ? m->encoded : m->residual3 + (l - 1) * btc;
        float *ln1 = m->ln1 + l * btc, *qkv = m->qkv + l * 3 * btc, *atty = m->atty + l * btc;
        float *att = m->att + (size_t)l * B * NH * T * T, *res2 = m->residual2 + l * btc, *ln2 = m->ln2 + l * btc;
        float *fch = m->fch + l * 4 * btc, *fch_gelu = m->fch_gelu + l * 4 * btc, *res3 = m->residual3 + l * btc;
        TRY(unit_get(m, 1 + l, w, NULL));
        layernorm_forward(ln1, m->ln1_mean + l * BT, m->ln1_rstd + l * BT, res, w[GPT2_LN1W], w[GPT2_LN1B], BT, C);
        matmul_forward(qkv, ln1, w[GPT2_QKVW], w[GPT2_QKVB], BT, C, 3 * C);
        TRY(unit_progress(m));
        attention_forward(atty, att, qkv, B, T, C, NH);
        TRY(unit_progress(m));
        matmul_forward(m->tmp, atty, w[GPT2_ATTPROJW], w[GPT2_ATTPROJB], BT, C, C);
        residual_forward(res2, res, m->tmp, btc);
        layernorm_forward(ln2, m->ln2_mean + l * BT, m->ln2_rstd + l * BT, res2, w[GPT2_LN2W], w[GPT2_LN2B], BT, C);
        matmul_forward(fch, ln2, w[GPT2_FCW], w[GPT2_FCB], BT, C, 4 * C);
        TRY(unit_progress(m));
        gelu_forward(fch_gelu, fch, 4 * btc);
        matmul_forward(m->tmp, fch_gelu, w[GPT2_FCPROJW], w[GPT2_FCPROJB], BT, 4 * C, C);
        residual_forward(res3, res2, m->tmp, btc);
        TRY(unit_done(m, 1 + l, 0));
    }
    layernorm_forward(m->lnf, m->lnf_mean, m->lnf_rstd, m->residual3 + (L - 1) * btc, e[GPT2_LNFW], e[GPT2_LNFB], BT,
                      C);
    matmul_forward(m->logits, m->lnf, e[GPT2_WTE], NULL, BT, C, c->padded_vocab_size);
    TRY(unit_done(m, 0, 0));
    crossentropy_forward(m->losses, m->logits, m->targets, BT, c->vocab_size, c->padded_vocab_size);
    for (n = 0; n < BT; ++n) sum += m->losses[n];
    *loss = (float)(sum / BT);
    return ACCEL_OK;
}

/* Backward of (mean loss) × loss_mult; gradients accumulate into the units' gradients (the flat buffer, zeroed by
   the caller after a step; --zero 3: FSDP's buffers, reduce-scattered as each unit is done on a reducing step). */
static accel_result gpt2_backward(gpt2 *m, float loss_mult) {
    const gpt2_config *c = &m->cfg;
    int B = m->B, T = m->T, C = c->channels, NH = c->num_heads, L = c->num_layers, l, BT = B * T;
    size_t btc = (size_t)BT * C;
    float *e[GPT2_NUM_TENSORS], *ge[GPT2_NUM_TENSORS], *w[GPT2_NUM_TENSORS], *g[GPT2_NUM_TENSORS];
    if (m->z3) TRY(accel_zero_fsdp_begin_backward(m->z3->z3.f));
    TRY(unit_get(m, 0, e, ge));
    crossentropy_softmax_backward(m->logits, m->targets, loss_mult / (float)BT, BT, c->vocab_size,
                                  c->padded_vocab_size);
    matmul_backward(m->dc, ge[GPT2_WTE], NULL, m->logits, m->lnf, e[GPT2_WTE], BT, C, c->padded_vocab_size);
    memset(m->dres, 0, btc * sizeof(float));
    layernorm_backward(m->dres, ge[GPT2_LNFW], ge[GPT2_LNFB], m->dc, m->residual3 + (L - 1) * btc, e[GPT2_LNFW],
                       m->lnf_mean, m->lnf_rstd, BT, C);
    for (l = L - 1; l >= 0; --l) { /* m->dres = d(residual3 of layer l) */
        const float *res = l == 0 ? m->encoded : m->residual3 + (l - 1) * btc;
        const float *ln1 = m->ln1 + l * btc, *qkv = m->qkv + l * 3 * btc, *atty = m->atty + l * btc;
        const float *att = m->att + (size_t)l * B * NH * T * T, *res2 = m->residual2 + l * btc;
        const float *ln2 = m->ln2 + l * btc, *fch = m->fch + l * 4 * btc, *fch_gelu = m->fch_gelu + l * 4 * btc;
        TRY(unit_get(m, 1 + l, w, g));
        matmul_backward(m->d4c, g[GPT2_FCPROJW], g[GPT2_FCPROJB], m->dres, fch_gelu, w[GPT2_FCPROJW], BT, 4 * C, C);
        gelu_backward(m->d4c, fch, 4 * btc);
        TRY(unit_progress(m)); /* the block before's gather (BACKWARD_PRE), the block after's reduction */
        matmul_backward(m->dc, g[GPT2_FCW], g[GPT2_FCB], m->d4c, ln2, w[GPT2_FCW], BT, C, 4 * C);
        TRY(unit_progress(m));
        layernorm_backward(m->dres, g[GPT2_LN2W], g[GPT2_LN2B], m->dc, res2, w[GPT2_LN2W], m->ln2_mean + l * BT,
                           m->ln2_rstd + l * BT, BT, C);
        matmul_backward(m->dc, g[GPT2_ATTPROJW], g[GPT2_ATTPROJB], m->dres, atty, w[GPT2_ATTPROJW], BT, C, C);
        attention_backward(m->dqkv, m->datt, m->dc, qkv, att, B, T, C, NH);
        TRY(unit_progress(m));
        matmul_backward(m->dc, g[GPT2_QKVW], g[GPT2_QKVB], m->dqkv, ln1, w[GPT2_QKVW], BT, C, 3 * C);
        layernorm_backward(m->dres, g[GPT2_LN1W], g[GPT2_LN1B], m->dc, res, w[GPT2_LN1W], m->ln1_mean + l * BT,
                           m->ln1_rstd + l * BT, BT, C);
        TRY(unit_done(m, 1 + l, 1));
    }
    encoder_backward(ge[GPT2_WTE], ge[GPT2_WPE], m->dres, m->inputs, B, T, C);
    TRY(unit_done(m, 0, 1));
    return m->z3 ? accel_zero_fsdp_end_backward(m->z3->z3.f) : ACCEL_OK;
}

/* The (B, T+1) token windows → inputs (each window's first T tokens) and targets (its last T). */
static void gpt2_set_batch(gpt2 *m, const int32_t *win) {
    int B = m->B, T = m->T, i;
    for (i = 0; i < B * T; ++i) {
        m->inputs[i] = win[(i / T) * (T + 1) + i % T];
        m->targets[i] = win[(i / T) * (T + 1) + i % T + 1];
    }
}

/* --bench-noop-accel (bench/trainer/bench_gpt2_cpu.py): main's loop with accel's calls taken out — one batch, loaded
   once; one micro-batch a step; no accumulation, reduction, clipping, schedule, logs or checkpoints. The optimizer
   (the model's math) still steps. The training loop's tokens/s over this one's is accel's share of the step. */
static accel_result bench_noop_loop(gpt2_run *run, gpt2 *m, int32_t *win) {
    int64_t step;
    int got = 0;
    accel_result r;
    while (!got)
        if ((r = gpt2_run_next(run, win, &got)) != ACCEL_OK) return r;
    gpt2_set_batch(m, win);
    for (step = run->first_step + 1; step <= run->o->steps; ++step) {
        float loss;
        if ((r = gpt2_forward(m, &loss)) != ACCEL_OK || (r = gpt2_backward(m, 1.0f)) != ACCEL_OK) return r;
        if ((r = accel_optim_step(run->opt, NULL)) != ACCEL_OK) return r;
        memset(m->grads, 0, m->nparams * sizeof(float));
        run->step = step;
        gpt2_hooks_step_timed(run, step);
    }
    return ACCEL_OK;
}

/* ------------------------------------------------------------------------------------------------- main */
#define CHECK(call)                                                                                                  \
    do {                                                                                                            \
        if ((call) != ACCEL_OK) {                                                                                   \
            fprintf(stderr, "gpt2_cpu: rank %d: %s: %s\n", acc.process_index, #call, accel_last_error(&acc));       \
            goto fail;                                                                                              \
        }                                                                                                           \
    } while (0)
#define PHASE(id, ...) GPT2_PHASE(run, id, __VA_ARGS__) /* a phase of the step in the profiler */

int main(int argc, char **argv) {
    gpt2_opts o;
    gpt2_run run; /* accel and everything around the model: gpt2.h */
    gpt2 model;
    accel acc;
    accel_desc desc;
    int32_t *win = NULL;
    double loss_sum = 0.0;
    float loss = 0.0f;
    int rc = 1, micro = 0, pr = gpt2_parse_args(argc, argv, &o);
    if (pr >= 0) return pr;
    memset(&model, 0, sizeof model);
    memset(&desc, 0, sizeof desc);
    desc.cpu = 1;
    desc.gradient_accumulation_steps = o.accum;
    desc.collective_timeout_ms = 300000; /* a lost peer ends the run in 5 minutes */
    CHECK(gpt2_run_init(&run, &acc, &desc, &o, "gpt2_cpu"));
    run.zero3_capable = 1; /* forward and backward go unit by unit (unit_get / unit_done) */

    /* the model: --init's weights (Hugging Face names) or GPT-2's initialization; AdamW, data, checkpoints, logs */
    win = (int32_t *)accel_host_alloc(&acc, (size_t)o.batch * (o.seq + 1) * sizeof(int32_t));
    if (!win || gpt2_alloc(&acc, &model, &run.cfg, o.batch, o.seq, o.zero == 3) != 0) {
        fprintf(stderr, "gpt2_cpu: out of memory\n");
        goto fail;
    }
    if (o.zero == 3 && o.init) { /* --zero 3 --init: the file's whole weights until create copied the shards */
        float *whole = (float *)accel_host_alloc(&acc, model.nparams * sizeof(float));
        accel_result res = whole ? gpt2_run_weights(&run, whole) : ACCEL_ERR_OUT_OF_MEMORY;
        if (res == ACCEL_OK) res = gpt2_run_setup(&run, whole, NULL, NULL);
        accel_host_free(&acc, whole);
        if (res != ACCEL_OK) {
            fprintf(stderr, "gpt2_cpu: rank %d: --init: %s\n", acc.process_index,
                    whole ? accel_last_error(&acc) : "out of memory");
            goto fail;
        }
    } else {
        if (model.params) CHECK(gpt2_run_weights(&run, model.params)); /* --zero 3: drawn into the shards */
        CHECK(gpt2_run_setup(&run, model.params, model.grads, NULL));
    }
    if (run.z3.f) model.z3 = &run; /* --zero 3: the weights live in the FSDP object's shards from here on */

    if (o.hooks.bench_noop) {
        CHECK(bench_noop_loop(&run, &model, win));
    } else {
        /* the loop: one micro-batch per iteration; the optimizer steps on sync micro-batches */
        while (acc.optimizer_steps < o.steps && !run.stop) { /* run.stop: preempted and saved (gpt2_run_step_end) */
            int got = 0;
            PHASE(ACCEL_PROF_DATA, CHECK(gpt2_run_next(&run, win, &got)));
            if (!got) continue; /* end of an epoch: the loader advanced it */
            gpt2_set_batch(&model, win);
            accel_accumulate_begin(&acc); /* sets acc.sync_gradients */
            PHASE(ACCEL_PROF_FORWARD, CHECK(gpt2_forward(&model, &loss)); loss_sum += loss);
            PHASE(ACCEL_PROF_BACKWARD, CHECK(gpt2_backward(&model, 1.0f / accel_loss_divisor(&acc)))); /* / accum */
            micro++;
            CHECK(gpt2_run_log_pending(&run)); /* the previous step's log line (train_gpt2.cu's order, gpt2.h) */
            if (accel_should_reduce(&acc)) PHASE(ACCEL_PROF_GRAD_SYNC, CHECK(gpt2_run_reduce(&run)));
            if (acc.sync_gradients) /* clip, schedule, AdamW; zero_grad */
                PHASE(ACCEL_PROF_OPTIMIZER, CHECK(gpt2_run_optimizer_step(&run));
                      if (model.z3) CHECK(accel_zero_fsdp_zero_grad(run.z3.f));
                      else memset(model.grads, 0, model.nparams * sizeof(float)));
            accel_scheduler_steps(&acc, 0); /* every micro-batch: P on a taken step, 0 otherwise */
            accel_accumulate_end(&acc);
            if (!acc.sync_gradients) continue;
            gpt2_run_log_later(&run, micro, loss_sum); /* the step's log line, written after the next backward */
            loss_sum = 0.0;
            micro = 0;
            CHECK(gpt2_run_step_end(&run)); /* its log line when it must be complete, a checkpoint when due, ... */
        }
    }
    if (!run.stop) CHECK(gpt2_run_finish(&run)); /* summary line, profile, export (not when preempted) */
    rc = run.stop ? ACCEL_EXIT_REQUEUE : 0; /* preempted: the job script requeues on it (README.md) */
fail:
    gpt2_run_release(&run); /* before the buffers it uses */
    accel_host_free(&acc, win);
    gpt2_free(&acc, &model);
    return gpt2_run_end(&run, rc);
}
