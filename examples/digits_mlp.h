/* digits_mlp.h — the model math shared by examples/train_digits.c (with accel) and examples/train_digits_raw.c
   (hand-written MPI, no accel): the UCI digits CSV loader, a 64 → hidden → 10 ReLU MLP with its own forward and
   backward pass (softmax cross-entropy), SGD with momentum (torch semantics) and a warmup + cosine LR schedule.
   Keeping it in one place makes "same math" literal for the overhead benchmark. Plain C99, no accel dependency. */
#ifndef DIGITS_MLP_H
#define DIGITS_MLP_H
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Each program uses part of this header. */
#if defined(__GNUC__) || defined(__clang__)
#define DIGITS_FN static __attribute__((unused))
#else
#define DIGITS_FN static
#endif

#define DIGITS_FEATURES 64
#define DIGITS_CLASSES 10
#define DIGITS_ROWS 1797

/* ------------------------------------------------------------------------------------------------ dataset */
typedef struct digits_data {
    float *x; /* n × 64, scaled to [0, 1] */
    int *y;   /* n labels 0..9 */
    int n;
} digits_data;

/* Reads "f0,...,f63,label" rows (features 0..16). Returns 0 on success; prints why on failure. */
DIGITS_FN void digits_split(digits_data *d);
DIGITS_FN int digits_load(const char *path, digits_data *d) {
    FILE *f = fopen(path, "r");
    int cap = DIGITS_ROWS, r, c;
    memset(d, 0, sizeof *d);
    if (!f) {
        fprintf(stderr, "digits: cannot open %s (run scripts/fetch-digits.sh)\n", path);
        return 1;
    }
    d->x = (float *)malloc((size_t)cap * DIGITS_FEATURES * sizeof(float));
    d->y = (int *)malloc((size_t)cap * sizeof(int));
    if (!d->x || !d->y) { fclose(f); return 1; }
    for (r = 0; r < cap; ++r) {
        double v;
        for (c = 0; c < DIGITS_FEATURES; ++c) {
            if (fscanf(f, " %lf ,", &v) != 1) break;
            d->x[(size_t)r * DIGITS_FEATURES + c] = (float)(v / 16.0);
        }
        if (c == 0 && feof(f)) break;
        if (c != DIGITS_FEATURES || fscanf(f, " %lf", &v) != 1 || v < 0 || v > 9 || v != floor(v)) {
            fprintf(stderr, "digits: %s: malformed row %d\n", path, r + 1);
            fclose(f);
            return 1;
        }
        d->y[r] = (int)v;
    }
    fclose(f);
    d->n = r;
    if (r != DIGITS_ROWS) {
        fprintf(stderr, "digits: %s has %d rows, expected %d\n", path, r, DIGITS_ROWS);
        return 1;
    }
    digits_split(d);
    return 0;
}
/* The fixed train/test split every trainer uses: rows are permuted once with a constant seed (independent of the
   training seed; the file is ordered by writer, so its tail is not a fair test set), then the first n_train
   permuted rows train and the rest test. */
#define DIGITS_TRAIN 1500
DIGITS_FN void digits_split(digits_data *d) {
    uint64_t st = 0xD161u;
    int i, c;
    for (i = d->n - 1; i > 0; --i) {
        uint64_t z = (st += 0x9E3779B97F4A7C15ull);
        int j, t;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        j = (int)(z % (uint64_t)(i + 1));
        t = d->y[i]; d->y[i] = d->y[j]; d->y[j] = t;
        for (c = 0; c < DIGITS_FEATURES; ++c) {
            float f = d->x[(size_t)i * DIGITS_FEATURES + c];
            d->x[(size_t)i * DIGITS_FEATURES + c] = d->x[(size_t)j * DIGITS_FEATURES + c];
            d->x[(size_t)j * DIGITS_FEATURES + c] = f;
        }
    }
}
DIGITS_FN void digits_free(digits_data *d) { free(d->x); free(d->y); memset(d, 0, sizeof *d); }

/* ---------------------------------------------------------------------------------------------------- model */
/* All parameters live in one flat fp32 array (so one tensor list describes them for the reducer and checkpoints):
   W1 [H][64], b1 [H], W2 [10][H], b2 [10]. */
typedef struct mlp_shape {
    int hidden;
    size_t off_w1, off_b1, off_w2, off_b2, count;
} mlp_shape;

DIGITS_FN mlp_shape mlp_make_shape(int hidden) {
    mlp_shape s;
    s.hidden = hidden;
    s.off_w1 = 0;
    s.off_b1 = s.off_w1 + (size_t)hidden * DIGITS_FEATURES;
    s.off_w2 = s.off_b1 + (size_t)hidden;
    s.off_b2 = s.off_w2 + (size_t)DIGITS_CLASSES * hidden;
    s.count = s.off_b2 + DIGITS_CLASSES;
    return s;
}

/* Deterministic init from a 64-bit seed (splitmix64 → uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)), torch's Linear
   default bound); identical on every rank. */
DIGITS_FN uint64_t mlp__splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
DIGITS_FN void mlp_init(const mlp_shape *s, float *p, uint64_t seed) {
    uint64_t st = seed * 0x2545F4914F6CDD1Dull + 1;
    size_t i;
    float b1 = 1.0f / sqrtf((float)DIGITS_FEATURES), b2 = 1.0f / sqrtf((float)s->hidden);
    for (i = 0; i < s->count; ++i) {
        float u = (float)((mlp__splitmix(&st) >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
        p[i] = u * (i < s->off_w2 ? b1 : b2);
    }
}

/* Rounds a vector through the training precision in place (NULL = fp32: nothing to do). */
typedef void (*mlp_round_fn)(float *v, size_t n);

/* Scratch for one sample. */
typedef struct mlp_work {
    float *hpre, *h, *dh, logits[DIGITS_CLASSES], dlog[DIGITS_CLASSES];
} mlp_work;
DIGITS_FN int mlp_work_init(mlp_work *w, int hidden) {
    w->hpre = (float *)calloc((size_t)hidden * 3, sizeof(float));
    w->h = w->hpre + hidden;
    w->dh = w->h + hidden;
    return w->hpre ? 0 : 1;
}
DIGITS_FN void mlp_work_free(mlp_work *w) { free(w->hpre); }

/* Forward of one sample; returns -log p[y] (computed in fp32 from the rounded logits) and writes the argmax. */
DIGITS_FN float mlp_forward1(const mlp_shape *s, const float *p, const float *x, int y, mlp_work *w, mlp_round_fn rnd,
                          int *pred) {
    const int H = s->hidden;
    const float *W1 = p + s->off_w1, *B1 = p + s->off_b1, *W2 = p + s->off_w2, *B2 = p + s->off_b2;
    float mx, sum = 0.0f;
    int j, k, c, best = 0;
    for (j = 0; j < H; ++j) {
        const float *row = W1 + (size_t)j * DIGITS_FEATURES;
        float a = B1[j];
        for (k = 0; k < DIGITS_FEATURES; ++k) a += row[k] * x[k];
        w->hpre[j] = a;
        w->h[j] = a > 0.0f ? a : 0.0f;
    }
    if (rnd) rnd(w->h, (size_t)H);
    for (c = 0; c < DIGITS_CLASSES; ++c) {
        const float *row = W2 + (size_t)c * H;
        float a = B2[c];
        for (j = 0; j < H; ++j) a += row[j] * w->h[j];
        w->logits[c] = a;
    }
    if (rnd) rnd(w->logits, DIGITS_CLASSES);
    mx = w->logits[0];
    for (c = 1; c < DIGITS_CLASSES; ++c)
        if (w->logits[c] > mx) { mx = w->logits[c]; best = c; }
    for (c = 0; c < DIGITS_CLASSES; ++c) { w->dlog[c] = expf(w->logits[c] - mx); sum += w->dlog[c]; }
    for (c = 0; c < DIGITS_CLASSES; ++c) w->dlog[c] /= sum; /* softmax probabilities */
    if (pred) *pred = best;
    return -(w->logits[y] - mx - logf(sum));
}

/* Forward + backward over a micro-batch: adds d(mult · mean_i loss_i)/dθ to grad (the caller picks mult = loss
   scale / accumulation divisor) and returns the sum of the per-sample losses (unscaled). With a rounding
   function the backward activations and the updated gradient buffer are rounded through the precision too, so
   an fp16 overflow really produces inf. */
DIGITS_FN double mlp_forward_backward(const mlp_shape *s, const float *p, float *grad, const float *X, const int *Y,
                                   const int64_t *idx, int n, float mult, mlp_work *w, mlp_round_fn rnd) {
    const int H = s->hidden;
    const float *W2 = p + s->off_w2;
    float *gW1 = grad + s->off_w1, *gB1 = grad + s->off_b1, *gW2 = grad + s->off_w2, *gB2 = grad + s->off_b2;
    float g = n > 0 ? mult / (float)n : 0.0f;
    double total = 0.0;
    int i, j, k, c;
    for (i = 0; i < n; ++i) {
        const float *x = X + (size_t)idx[i] * DIGITS_FEATURES;
        int y = Y[idx[i]];
        total += mlp_forward1(s, p, x, y, w, rnd, NULL);
        for (c = 0; c < DIGITS_CLASSES; ++c) w->dlog[c] = (w->dlog[c] - (c == y ? 1.0f : 0.0f)) * g;
        if (rnd) rnd(w->dlog, DIGITS_CLASSES);
        for (j = 0; j < H; ++j) w->dh[j] = 0.0f;
        for (c = 0; c < DIGITS_CLASSES; ++c) {
            const float *row = W2 + (size_t)c * H;
            float *grow = gW2 + (size_t)c * H, d = w->dlog[c];
            for (j = 0; j < H; ++j) { grow[j] += d * w->h[j]; w->dh[j] += d * row[j]; }
            gB2[c] += d;
        }
        for (j = 0; j < H; ++j) w->dh[j] = w->hpre[j] > 0.0f ? w->dh[j] : 0.0f;
        if (rnd) rnd(w->dh, (size_t)H);
        for (j = 0; j < H; ++j) {
            float *grow = gW1 + (size_t)j * DIGITS_FEATURES, d = w->dh[j];
            if (d == 0.0f) continue;
            for (k = 0; k < DIGITS_FEATURES; ++k) grow[k] += d * x[k];
            gB1[j] += d;
        }
    }
    if (rnd) rnd(grad, s->count);
    return total;
}

/* Number of correct predictions over rows idx[0..n). */
DIGITS_FN int mlp_correct(const mlp_shape *s, const float *p, const float *X, const int *Y, const int64_t *idx, int n,
                       mlp_work *w, mlp_round_fn rnd, int *preds) {
    int i, ok = 0, pr;
    for (i = 0; i < n; ++i) {
        mlp_forward1(s, p, X + (size_t)idx[i] * DIGITS_FEATURES, Y[idx[i]], w, rnd, &pr);
        if (preds) preds[i] = pr;
        ok += pr == Y[idx[i]];
    }
    return ok;
}

/* ---------------------------------------------------------------------------------------- optimizer, schedule */
/* torch.optim.SGD(momentum, dampening=0, nesterov=False, weight_decay): buf = m·buf + g; p -= lr·buf. The first
   step initializes buf = g (torch), tracked by *started. */
DIGITS_FN void sgd_momentum_step(float *p, const float *g, float *buf, size_t n, float lr, float momentum, float wd,
                              int *started) {
    size_t i;
    for (i = 0; i < n; ++i) {
        float gi = g[i] + wd * p[i];
        buf[i] = *started ? momentum * buf[i] + gi : gi;
        p[i] -= lr * buf[i];
    }
    *started = 1;
}

/* Linear warmup from 10 % over the first `warmup` fraction, then cosine decay to 10 % of lr, as a function of the scheduler's
   position t out of total (both in scheduler steps). */
DIGITS_FN float lr_at(float lr, int64_t t, int64_t total, float warmup) {
    double f = total > 0 ? (double)t / (double)total : 0.0;
    if (f > 1.0) f = 1.0;
    if (warmup > 0 && f < warmup) return (float)(lr * (0.1 + 0.9 * f / warmup)); /* only t/total: P-independent */
    f = warmup < 1 ? (f - warmup) / (1.0 - warmup) : 1.0;
    return (float)(lr * (0.1 + 0.9 * 0.5 * (1.0 + cos(3.14159265358979323846 * f))));
}

#endif
