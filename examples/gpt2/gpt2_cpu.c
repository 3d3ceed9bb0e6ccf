/* gpt2_cpu.c — GPT-2 in plain C, float32: the reference trainer (forward, backward, AdamW) on accel.

   The model math follows karpathy/llm.c's train_gpt2.c (same layers, same parameter layout: see gpt2.h); it is
   checked against the same model written in PyTorch (tests/unit/trainer/test_gpt2_torch.py) and is the oracle of the
   CUDA trainer (train_gpt2.cu). Everything around the model is accel, exactly as in the CUDA trainer:

     accel.h              process group (mpirun / srun / torchrun), gradient accumulation, scheduler bookkeeping
     accel_data.h         llm.c token shards: each rank's (B, T+1) windows of every global batch, resumable
     accel_collectives.h  the gradient reducer (averages the gradients over ranks; MPI on the CPU)
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

   Semantics (Accelerate's): --batch is per process; a step sees P × batch × accum windows; the loss is divided by
   accum and the reducer averages over ranks, so the gradient is the mean over the global batch whatever P and accum
   are. The LR schedule reads acc.scheduler_steps (P per optimizer step). */
#include "accel.h"
#include "accel_amp.h"
#include "accel_safetensors.h"
#include "accel_ckpt.h"
#include "accel_collectives.h"
#include "accel_ddp.h"
#include "accel_data.h"
#include "accel_optim.h"
#include "accel_profile.h"
#include "accel_trackers.h"
#include "gpt2.h"
#include <signal.h>

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
} gpt2;

#define P_(m, t) ((m)->params + (m)->off[t])
#define G_(m, t) ((m)->grads + (m)->off[t])

static int gpt2_alloc(accel *acc, gpt2 *m, const gpt2_config *cfg, int B, int T) {
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
    A_(params, m->nparams); A_(grads, m->nparams);
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
    return 0;
}

static void gpt2_free(accel *acc, gpt2 *m) {
    accel_host_free(acc, m->mem);
    accel_host_free(acc, m->inputs);
}

/* Forward over m->inputs / m->targets (B, T); returns the mean loss. */
static float gpt2_forward(gpt2 *m) {
    const gpt2_config *c = &m->cfg;
    int B = m->B, T = m->T, C = c->channels, NH = c->num_heads, L = c->num_layers, l, BT = B * T;
    size_t btc = (size_t)BT * C;
    double sum = 0.0;
    int n;
    encoder_forward(m->encoded, m->inputs, P_(m, GPT2_WTE), P_(m, GPT2_WPE), B, T, C);
    for (l = 0; l < L; ++l) {
        const float *res = l == 0 ? m->encoded : m->residual3 + (l - 1) * btc;
        float *ln1 = m->ln1 + l * btc, *qkv = m->qkv + l * 3 * btc, *atty = m->atty + l * btc;
        float *att = m->att + (size_t)l * B * NH * T * T, *res2 = m->residual2 + l * btc, *ln2 = m->ln2 + l * btc;
        float *fch = m->fch + l * 4 * btc, *fch_gelu = m->fch_gelu + l * 4 * btc, *res3 = m->residual3 + l * btc;
        layernorm_forward(ln1, m->ln1_mean + l * BT, m->ln1_rstd + l * BT, res, P_(m, GPT2_LN1W) + l * C,
                          P_(m, GPT2_LN1B) + l * C, BT, C);
        matmul_forward(qkv, ln1, P_(m, GPT2_QKVW) + (size_t)l * 3 * C * C, P_(m, GPT2_QKVB) + l * 3 * C, BT, C, 3 * C);
        attention_forward(atty, att, qkv, B, T, C, NH);
        matmul_forward(m->tmp, atty, P_(m, GPT2_ATTPROJW) + (size_t)l * C * C, P_(m, GPT2_ATTPROJB) + l * C, BT, C, C);
        residual_forward(res2, res, m->tmp, btc);
        layernorm_forward(ln2, m->ln2_mean + l * BT, m->ln2_rstd + l * BT, res2, P_(m, GPT2_LN2W) + l * C,
                          P_(m, GPT2_LN2B) + l * C, BT, C);
        matmul_forward(fch, ln2, P_(m, GPT2_FCW) + (size_t)l * 4 * C * C, P_(m, GPT2_FCB) + l * 4 * C, BT, C, 4 * C);
        gelu_forward(fch_gelu, fch, 4 * btc);
        matmul_forward(m->tmp, fch_gelu, P_(m, GPT2_FCPROJW) + (size_t)l * 4 * C * C, P_(m, GPT2_FCPROJB) + l * C, BT,
                       4 * C, C);
        residual_forward(res3, res2, m->tmp, btc);
    }
    layernorm_forward(m->lnf, m->lnf_mean, m->lnf_rstd, m->residual3 + (L - 1) * btc, P_(m, GPT2_LNFW),
                      P_(m, GPT2_LNFB), BT, C);
    matmul_forward(m->logits, m->lnf, P_(m, GPT2_WTE), NULL, BT, C, c->padded_vocab_size);
    crossentropy_forward(m->losses, m->logits, m->targets, BT, c->vocab_size, c->padded_vocab_size);
    for (n = 0; n < BT; ++n) sum += m->losses[n];
    return (float)(sum / BT);
}

/* Backward of (mean loss) × loss_mult; gradients accumulate into m->grads (zeroed by the caller after a step). */
static void gpt2_backward(gpt2 *m, float loss_mult) {
    const gpt2_config *c = &m->cfg;
    int B = m->B, T = m->T, C = c->channels, NH = c->num_heads, L = c->num_layers, l, BT = B * T;
    size_t btc = (size_t)BT * C;
    crossentropy_softmax_backward(m->logits, m->targets, loss_mult / (float)BT, BT, c->vocab_size,
                                  c->padded_vocab_size);
    matmul_backward(m->dc, G_(m, GPT2_WTE), NULL, m->logits, m->lnf, P_(m, GPT2_WTE), BT, C, c->padded_vocab_size);
    memset(m->dres, 0, btc * sizeof(float));
    layernorm_backward(m->dres, G_(m, GPT2_LNFW), G_(m, GPT2_LNFB), m->dc, m->residual3 + (L - 1) * btc,
                       P_(m, GPT2_LNFW), m->lnf_mean, m->lnf_rstd, BT, C);
    for (l = L - 1; l >= 0; --l) { /* m->dres = d(residual3 of layer l) */
        const float *res = l == 0 ? m->encoded : m->residual3 + (l - 1) * btc;
        const float *ln1 = m->ln1 + l * btc, *qkv = m->qkv + l * 3 * btc, *atty = m->atty + l * btc;
        const float *att = m->att + (size_t)l * B * NH * T * T, *res2 = m->residual2 + l * btc;
        const float *ln2 = m->ln2 + l * btc, *fch = m->fch + l * 4 * btc, *fch_gelu = m->fch_gelu + l * 4 * btc;
        matmul_backward(m->d4c, G_(m, GPT2_FCPROJW) + (size_t)l * 4 * C * C, G_(m, GPT2_FCPROJB) + l * C, m->dres,
                        fch_gelu, P_(m, GPT2_FCPROJW) + (size_t)l * 4 * C * C, BT, 4 * C, C);
        gelu_backward(m->d4c, fch, 4 * btc);
        matmul_backward(m->dc, G_(m, GPT2_FCW) + (size_t)l * 4 * C * C, G_(m, GPT2_FCB) + l * 4 * C, m->d4c, ln2,
                        P_(m, GPT2_FCW) + (size_t)l * 4 * C * C, BT, C, 4 * C);
        layernorm_backward(m->dres, G_(m, GPT2_LN2W) + l * C, G_(m, GPT2_LN2B) + l * C, m->dc, res2,
                           P_(m, GPT2_LN2W) + l * C, m->ln2_mean + l * BT, m->ln2_rstd + l * BT, BT, C);
        matmul_backward(m->dc, G_(m, GPT2_ATTPROJW) + (size_t)l * C * C, G_(m, GPT2_ATTPROJB) + l * C, m->dres, atty,
                        P_(m, GPT2_ATTPROJW) + (size_t)l * C * C, BT, C, C);
        attention_backward(m->dqkv, m->datt, m->dc, qkv, att, B, T, C, NH);
        matmul_backward(m->dc, G_(m, GPT2_QKVW) + (size_t)l * 3 * C * C, G_(m, GPT2_QKVB) + l * 3 * C, m->dqkv, ln1,
                        P_(m, GPT2_QKVW) + (size_t)l * 3 * C * C, BT, C, 3 * C);
        layernorm_backward(m->dres, G_(m, GPT2_LN1W) + l * C, G_(m, GPT2_LN1B) + l * C, m->dc, res,
                           P_(m, GPT2_LN1W) + l * C, m->ln1_mean + l * BT, m->ln1_rstd + l * BT, BT, C);
    }
    encoder_backward(G_(m, GPT2_WTE), G_(m, GPT2_WPE), m->dres, m->inputs, B, T, C);
}

/* ------------------------------------------------------------------------------------------------- main */
#define CHECK(call)                                                                                                  \
    do {                                                                                                            \
        if ((call) != ACCEL_OK) {                                                                                   \
            fprintf(stderr, "gpt2_cpu: rank %d: %s: %s\n", acc.process_index, #call, accel_last_error(&acc));       \
            goto fail;                                                                                              \
        }                                                                                                           \
    } while (0)

int main(int argc, char **argv) {
    gpt2_opts o;
    gpt2_config cfg;
    gpt2 model;
    accel acc;
    accel_desc desc;
    accel_data_seq_loader ld;
    accel_data_seq_desc sd;
    accel_coll *coll = NULL;
    accel_ddp *red = NULL;
    accel_ckpt *ck = NULL;
    accel_st_file *initf = NULL;
    accel_optim *opt = NULL;
    accel_prof *prof = NULL;
    accel_prof_desc pfd;
    accel_optim_schedule sched;
    accel_track trk;
    accel_tensor params[GPT2_NUM_TENSORS], grads[GPT2_NUM_TENSORS];
    int32_t *win = NULL;
    char prefix[16];
    FILE *lf = NULL;
    int rc = 1, inited = 0, have_model = 0, tracking = 0, k, B, T, P;
    double t0, t_bench = 0.0, loss_sum = 0.0, lr = 0.0, norm = 0.0, lossv;
    int64_t first_step, step = 0, bench_from = -1;
    int micro = 0;
    int pr = gpt2_parse_args(argc, argv, &o);
    if (pr >= 0) return pr;
    memset(&ld, 0, sizeof ld);
    memset(&trk, 0, sizeof trk);

    memset(&desc, 0, sizeof desc);
    desc.cpu = 1;
    desc.gradient_accumulation_steps = o.accum;
    desc.collective_timeout_ms = 300000; /* a lost peer ends the run in 5 minutes */
    if (accel_init(&acc, &desc) != ACCEL_OK) {
        fprintf(stderr, "gpt2_cpu: accel_init: %s\n", accel_last_error(&acc));
        accel_shutdown(&acc);
        return 1;
    }
    inited = 1;
    B = o.batch;
    T = o.seq;
    P = acc.num_processes;

    /* 1. the model: from --init (Hugging Face names) or GPT-2's initialization */
    if (o.init) CHECK(accel_st_file_open(&acc, o.init, &initf));
    if (gpt2_resolve_config(&acc, &o, initf, &cfg, prefix) != 0) goto fail;
    if (gpt2_alloc(&acc, &model, &cfg, B, T) != 0) {
        fprintf(stderr, "gpt2_cpu: out of memory\n");
        goto fail;
    }
    have_model = 1;
    if (initf) {
        CHECK(gpt2_hf_load(&acc, initf, &cfg, prefix, model.params));
        accel_st_file_destroy(initf);
        initf = NULL;
    } else {
        gpt2_init_params(&cfg, model.params, o.seed);
    }
    gpt2_describe(&cfg, model.params, ACCEL_F32, params);
    gpt2_describe(&cfg, model.grads, ACCEL_F32, grads);
    /* AdamW (decay on the 2-D weights), cosine schedule with warmup on the scheduler count */
    CHECK(gpt2_optim_create(&acc, params, grads, NULL, o.lr, o.weight_decay, 0, o.seed, &opt));
    sched = gpt2_schedule(o.warmup, o.steps, P);

    /* 2. data: rank r gets rows r*B .. r*B+B-1 of every global batch of P*B windows of T+1 tokens */
    memset(&sd, 0, sizeof sd);
    sd.files = o.data;
    sd.num_files = o.ndata;
    sd.batch_size = B;
    sd.seq_len = T;
    sd.shuffle = o.shuffle;
    sd.seed = o.seed;
    CHECK(accel_data_seq_init(&acc, &ld, &sd));
    if (accel_data_seq_len(&ld) < 1) {
        fprintf(stderr, "gpt2_cpu: the shards hold less than one global batch of %d x %d tokens\n", P * B, T + 1);
        goto fail;
    }
    win = (int32_t *)accel_host_alloc(&acc, (size_t)B * (T + 1) * sizeof(int32_t));
    if (!win) goto fail;

    /* 3. gradient reducer: the 16 gradients are one contiguous buffer in registration order, so the reducer does one
          in-place all-reduce (averaged) after backward. (A trainer that overlaps communication with backward would
          register them in the order backward finishes them and call grad_ready as each is done.) */
    CHECK(accel_coll_create(&acc, NULL, &coll));
    CHECK(accel_ddp_create(coll, NULL, &red));
    CHECK(accel_ddp_add(red, grads, GPT2_NUM_TENSORS));
    CHECK(accel_ddp_finalize(red));

    /* 4. checkpoints: weights + AdamW moments as safetensors, the optimizer's step counts and the loader's position as
          bytes, the step counters and RNG in accel's own state; load_state resumes all of it */
    if (o.ckpt_dir) {
        accel_ckpt_desc kd;
        const accel_tensor *moments;
        int nmoments;
        memset(&kd, 0, sizeof kd);
        kd.project_dir = o.ckpt_dir;
        kd.automatic_checkpoint_naming = 1;
        kd.total_limit = 2;
        CHECK(accel_ckpt_create(&acc, &kd, &ck));
        CHECK(accel_ckpt_register_model(ck, params, GPT2_NUM_TENSORS));
        CHECK(accel_optim_state_tensors(opt, &moments, &nmoments));
        CHECK(accel_ckpt_register_optimizer(ck, moments, nmoments));
        CHECK(accel_ckpt_register(ck, "optim_state", accel_optim_state_save, accel_optim_state_load, opt));
        CHECK(accel_ckpt_register(ck, "loader", accel_data_seq_state_save, accel_data_seq_state_load, &ld));
        if (o.resume) {
            accel_result r = accel_ckpt_load_state(ck, NULL);
            if (r == ACCEL_ERR_NOT_FOUND) accel_print(&acc, "no checkpoint in %s: starting fresh\n", o.ckpt_dir);
            else CHECK(r);
            if (r == ACCEL_OK) accel_print(&acc, "resumed at step %lld\n", (long long)acc.optimizer_steps);
        }
    }
    first_step = acc.optimizer_steps;
    if (o.loss_file && acc.is_main_process && !(lf = gpt2_open_loss_file(o.loss_file, o.resume, first_step))) {
        fprintf(stderr, "gpt2_cpu: cannot write %s\n", o.loss_file);
        goto fail;
    }
    if (o.log_dir) {
        accel_track_desc td;
        accel_track_param hp[8];
        memset(&td, 0, sizeof td);
        td.log_with = ACCEL_TRACK_ALL;
        td.logging_dir = o.log_dir;
        CHECK(accel_track_init(&acc, &trk, &td));
        tracking = 1;
        hp[0] = accel_track_param_int("layers", cfg.num_layers);
        hp[1] = accel_track_param_int("heads", cfg.num_heads);
        hp[2] = accel_track_param_int("channels", cfg.channels);
        hp[3] = accel_track_param_int("vocab", cfg.vocab_size);
        hp[4] = accel_track_param_int("batch", B);
        hp[5] = accel_track_param_int("seq", T);
        hp[6] = accel_track_param_int("accum", acc.gradient_accumulation_steps);
        hp[7] = accel_track_param_number("lr", o.lr);
        CHECK(accel_track_init_trackers(&trk, "gpt2_cpu", hp, 8));
    }
    accel_print(&acc, "gpt2_cpu: L=%d H=%d C=%d V=%d (padded %d) block %d: %zu parameters | %d process(es) x batch %d "
                "x seq %d x accum %d | %lld global batches per epoch | reducer: %s\n", cfg.num_layers, cfg.num_heads,
                cfg.channels, cfg.vocab_size, cfg.padded_vocab_size, cfg.max_seq_len, model.nparams, P, B, T,
                acc.gradient_accumulation_steps, (long long)accel_data_seq_len(&ld),
                accel_ddp_is_flat(red) ? "one in-place all-reduce" : "buckets");
    if (o.bench_noop) accel_print(&acc, "BENCHMARK: accel's calls are no-ops\n");

    /* the profiler: disabled without --profile (then every begin/end below is one flag test); one profiler step per
       optimizer step */
    memset(&pfd, 0, sizeof pfd);
    pfd.disabled = !o.profile_dir;
    pfd.trace_dir = o.profile_dir;
    CHECK(accel_prof_create(&acc, &pfd, &prof));
#define PROF_BEGIN(id) CHECK(accel_prof_begin(prof, (id)))
#define PROF_END(id) CHECK(accel_prof_end(prof, (id)))

    /* 5. the loop: one micro-batch per iteration; the optimizer steps on sync micro-batches */
    t0 = accel_now();
    while (acc.optimizer_steps < o.steps) {
        int got = 0, i;
        int32_t bad;
        float loss;
        if (!o.bench_noop || step == 0) {
            PROF_BEGIN(ACCEL_PROF_DATA);
            CHECK(accel_data_seq_next(&ld, win, &got));
            PROF_END(ACCEL_PROF_DATA);
            if (!got) continue; /* end of an epoch: the loader advanced it */
            for (i = 0; i < B * T; ++i) {
                model.inputs[i] = win[(i / T) * (T + 1) + i % T];
                model.targets[i] = win[(i / T) * (T + 1) + i % T + 1];
            }
            if (gpt2_check_tokens(win, (size_t)B * (T + 1), cfg.vocab_size, &bad) != 0) {
                fprintf(stderr, "gpt2_cpu: token %d in the data is outside the vocabulary (%d)\n", (int)bad,
                        cfg.vocab_size);
                goto fail;
            }
        }
        if (!o.bench_noop) accel_accumulate_begin(&acc);
        PROF_BEGIN(ACCEL_PROF_FORWARD);
        loss = gpt2_forward(&model);
        PROF_END(ACCEL_PROF_FORWARD);
        PROF_BEGIN(ACCEL_PROF_BACKWARD);
        /* accelerator.backward(loss): loss / accum */
        gpt2_backward(&model, o.bench_noop ? 1.0f : 1.0f / accel_loss_divisor(&acc));
        PROF_END(ACCEL_PROF_BACKWARD);
        loss_sum += loss;
        micro++;
        if (o.bench_noop) { /* as train_gpt2.cu's: the same math without accel's bookkeeping (one batch, loaded once;
                               one micro-batch per step; no accumulation, sync, clipping, schedule or logs); the
                               optimizer (the model's math) still steps */
            step++;
            CHECK(accel_optim_step(opt, NULL));
            memset(model.grads, 0, model.nparams * sizeof(float));
            if (step == 3) {
                t_bench = accel_now();
                bench_from = step;
            }
            if (step == o.steps) break;
            continue;
        }
        if (accel_should_reduce(&acc)) {
            PROF_BEGIN(ACCEL_PROF_GRAD_SYNC);
            for (k = 0; k < GPT2_NUM_TENSORS; ++k) CHECK(accel_ddp_grad_ready(red, k));
            CHECK(accel_ddp_wait(red)); /* average over ranks */
            PROF_END(ACCEL_PROF_GRAD_SYNC);
        }
        if (acc.sync_gradients) {
            accel_optim_step_args sa;
            float coef = 1.0f;
            PROF_BEGIN(ACCEL_PROF_OPTIMIZER);
            step = acc.optimizer_steps + 1; /* 1-based number of this step */
            if (o.dump_grads && step == 1 && acc.is_main_process)
                CHECK(gpt2_save_hf_file(&acc, &cfg, model.grads, o.dump_grads));
            /* clip_grad_norm_: the norm here, the coefficient applied inside the fused step */
            CHECK(accel_amp_grad_norm(&acc, grads, GPT2_NUM_TENSORS, 2.0, 0, &norm));
            if (o.clip > 0) coef = accel_optim_clip_coef(norm, o.clip);
            memset(&sa, 0, sizeof sa);
            sa.clip_coef = o.clip > 0 ? &coef : NULL;
            CHECK(accel_optim_apply_schedule(opt, &sched, acc.scheduler_steps));
            lr = accel_optim_lr(opt, 0);
            CHECK(accel_optim_step(opt, &sa));
            accel_optimizer_step_done(&acc, 0);
            memset(model.grads, 0, model.nparams * sizeof(float)); /* zero_grad */
            PROF_END(ACCEL_PROF_OPTIMIZER);
        }
        accel_scheduler_steps(&acc, 0); /* every micro-batch: P on a taken step, 0 otherwise */
        accel_accumulate_end(&acc);
        if (!acc.sync_gradients) continue;

        /* after the step: the mean loss of the step's micro-batches over all ranks, logs, checkpoint */
        PROF_BEGIN(ACCEL_PROF_LOGGING);
        lossv = loss_sum / micro;
        loss_sum = 0.0;
        micro = 0;
        CHECK(accel_host_allreduce_f64(&acc, &lossv, 1, ACCEL_HOST_SUM));
        lossv /= P;
        if (step == first_step + 3) { /* steady state from here (bench/trainer/bench_gpt2_cpu.py) */
            t_bench = accel_now();
            bench_from = step;
        }
        if (lf) {
            fprintf(lf, "%lld %.9g %.9g\n", (long long)step, lossv, lr);
            fflush(lf);
        }
        if (o.print_every && (step % o.print_every == 0 || step == o.steps)) {
            double el = accel_now() - t0;
            double tok = (double)(step - first_step) * B * T * acc.gradient_accumulation_steps * P;
            accel_print(&acc, "step %4lld/%d | loss %.6f | lr %.3e | norm %.4f | %.0f tok/s\n", (long long)step,
                        o.steps, lossv, lr, norm, tok / (el > 0 ? el : 1e-9));
        }
        if (tracking) {
            accel_track_value tv[3];
            tv[0] = accel_track_scalar("train/loss", lossv);
            tv[1] = accel_track_scalar("train/lr", lr);
            tv[2] = accel_track_scalar("train/grad_norm", norm);
            CHECK(accel_track_log(&trk, tv, 3, step));
        }
        PROF_END(ACCEL_PROF_LOGGING);
        if (ck && ((o.ckpt_every && step % o.ckpt_every == 0) || step == o.steps)) {
            PROF_BEGIN(ACCEL_PROF_CHECKPOINT);
            CHECK(accel_ckpt_save_state(ck, NULL, NULL, 0)); /* after accumulate_end: the counters are final */
            PROF_END(ACCEL_PROF_CHECKPOINT);
        }
        CHECK(accel_prof_step(prof));
        if (o.kill_at && step == o.kill_at) { /* a crash: nothing after this point is written */
            if (lf) fclose(lf);
            lf = NULL;
            fflush(stdout);
            accel_wait_for_everyone(&acc);
            raise(SIGKILL);
        }
    }
    if (bench_from >= 0 && step > bench_from) { /* one line for bench/trainer/bench_gpt2_cpu.py */
        double el = accel_now() - t_bench;
        double tps = (double)(step - bench_from) * B * T * (o.bench_noop ? 1 : acc.gradient_accumulation_steps) * P / el;
        accel_print(&acc, "summary: {\"steps\": %lld, \"tokens_per_s\": %.1f, \"step_ms\": %.3f, \"noop_accel\": %d}\n",
                    (long long)(step - bench_from), tps, 1000.0 * el / (double)(step - bench_from), o.bench_noop);
    }
    if (o.profile_dir) { /* this rank's phase table, the per-rank traces and, on several ranks, the merge */
        if (acc.is_main_process) CHECK(accel_prof_print_table(prof, stdout));
        CHECK(accel_prof_write_trace(prof));
        if (P > 1) CHECK(accel_prof_merge_trace(prof, NULL));
    }
    if (o.export_dir) {
        CHECK(gpt2_export(&acc, &cfg, model.params, o.export_dir));
        accel_print(&acc, "exported %s/model.safetensors (Hugging Face GPT-2 names) and config.json\n", o.export_dir);
    }
    if (tracking) CHECK(accel_track_deinit(&trk));
    tracking = 0;
    rc = 0;
fail:
    if (lf) fclose(lf);
    if (tracking) accel_track_deinit(&trk);
    accel_st_file_destroy(initf);
    accel_ckpt_destroy(ck);
    accel_optim_destroy(opt);
    accel_prof_destroy(prof);
    accel_ddp_destroy(red);
    accel_coll_destroy(coll);
    accel_data_seq_deinit(&ld);
    accel_host_free(&acc, win);
    if (have_model) gpt2_free(&acc, &model);
    if (rc && inited && acc.num_processes > 1) { /* peers may wait in a collective: let the launcher end the job */
        fflush(stdout);
        fflush(stderr);
        exit(rc);
    }
    if (inited) accel_shutdown(&acc);
    return rc;
}
