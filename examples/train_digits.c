/* train_digits.c — a data-parallel CPU trainer in plain C on real data, using every accel module.

   The UCI handwritten digits (1,797 8×8 images; scripts/fetch-digits.sh puts them in data/digits.csv), a
   64 → hidden → 10 ReLU MLP with its own forward/backward (digits_mlp.h), SGD with momentum and a warmup+cosine
   LR schedule. accel supplies: the process group (accel.h), the sharded + shuffled sampler and the metric
   remainder (accel_data.h), gradient accumulation bookkeeping (accel.h), the bucketed gradient all-reduce and
   gather_for_metrics (accel_collectives.h), fp16 loss scaling / bf16 rounding / unscale+check / clip_grad_norm
   (accel_amp.h), save_state/load_state (accel_ckpt.h) and TensorBoard/JSONL logging (accel_trackers.h);
   --profile DIR adds the step profiler (accel_profile.h: a phase table at the end and Chrome traces in DIR).
   --zero 1|2 shards the optimizer (ZeRO-1/2, accel_zero.h) and steps accel_optim.h's SGD over this rank's
   shard (torch.optim.SGD's rule), then all-gathers the weights; without checkpoints in this example.
   --zero 3 is FSDP's FULL_SHARD (accel_zero_fsdp): one unit per layer, every rank keeps only its shard of each
   layer's weights, gradients and momenta; a layer is all-gathered (in the training precision) for its forward and
   again for its backward, its gradients are reduce-scattered, and the SGD steps the shard. Checkpoints are sharded
   (fsdp_state_<rank>.bin; loadable on another number of processes); the final weights are exported whole for
   --dump-weights and the evaluation. Bit-identical to --zero 1 (trainer tests).

     mpirun -np 2 build/examples/train_digits --zero 3 --checkpoint-dir ck --checkpoint-every 50

   With --checkpoint-dir the run is preemptible (accel.h: PREEMPTION): SIGTERM or SIGUSR1 to any rank (Slurm's
   --signal=USR1@90, scancel, a preempting job) makes every rank stop after the same step, save a checkpoint there
   and exit with ACCEL_EXIT_REQUEUE (75); the job script requeues and the next run continues with --resume,
   bit-identical to a run never stopped (README.md: "Preemption and requeue under Slurm").

     scripts/fetch-digits.sh
     mpirun -np 2 build/examples/train_digits --steps 500 --batch 16 --precision fp16
     → ... test accuracy: 97.64%

   Semantics worth knowing (they are Accelerate's):
   - --batch is the per-process micro-batch size. A global optimizer step sees P × batch × accum samples: the
     sampler's global order (a permutation that depends on seed and epoch only, never on P) is cut into batches of
     `batch`, batch i goes to process i % P, and each process accumulates `accum` of its batches. So step s covers
     global samples [s·G, (s+1)·G) of the epoch's permutation, G = P·batch·accum, whatever P, batch and accum are.
   - The loss is divided by accum (always the full accum, also in a short final window) and the all-reduce
     averages over processes, so the gradient is the mean over the G samples.
   - The LR schedule is a function of scheduler position / scheduler length. The scheduler takes num_processes
     steps per optimizer step (Accelerate's AcceleratedScheduler without split_batches), so its length is
     steps × P ("as if stepped once per un-sharded batch"): the LR per optimizer step is then independent of P.
     Skipped (fp16 overflow) steps do not advance it.
   - --steps counts sync steps (optimizer step attempts), skipped ones included, like `completed_steps` in
     Accelerate's examples.
*/
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* nanosleep (--throttle-ms) under -std=c99 */
#endif
#include "accel.h"
#include "accel_ckpt.h"
#include "accel_collectives.h"
#include "accel_ddp.h"
#include "accel_zero.h"
#include "accel_data.h"
#include "accel_amp.h"
#include "accel_trackers.h"
#include "accel_profile.h"
#include "accel_optim.h"
#include "digits_mlp.h"
#include <signal.h>
#include <stdarg.h>
#include <time.h>

/* ------------------------------------------------------------------------------------------------ options */
typedef struct opts {
    const char *data, *precision, *comm_hook, *ckpt_dir, *resume, *dump_weights, *loss_file, *log_dir, *profile_dir;
    int steps, epochs, batch, accum, hidden, shuffle, ckpt_every, kill_at, print_every, eval_batch, async_ckpt;
    int signal_at, throttle_ms;
    float lr, momentum, weight_decay, clip, warmup, init_scale;
    int growth_interval, bucket_kb, no_watchdog, zero;
    uint64_t seed;
} opts;

static void usage(void) {
    fprintf(stderr,
            "usage: train_digits [options]\n"
            "  --data PATH            digits CSV (default data/digits.csv; scripts/fetch-digits.sh makes it)\n"
            "  --steps N              optimizer (sync) steps, skipped ones included (default 500)\n"
            "  --epochs E             train E epochs instead of --steps\n"
            "  --batch B              per-process micro-batch size (default 16)\n"
            "  --accum A              gradient accumulation steps (default 1)\n"
            "  --precision P          no | fp16 | bf16 (default: the launcher's, e.g. accel launch --mixed-precision;\n"
            "                         else no)\n"
            "  --init-scale S         fp16 initial loss scale (default 65536)\n"
            "  --growth-interval N    fp16 scaler growth interval (default 2000)\n"
            "  --hidden H             hidden units (default 64)\n"
            "  --lr X --momentum X --weight-decay X --warmup FRACTION\n"
            "  --clip X               max global gradient norm (0 = off; default 1)\n"
            "  --seed N               init + shuffle seed (default 42)\n"
            "  --no-shuffle           sampler order 0..N-1\n"
            "  --checkpoint-dir DIR   save_state here ...\n"
            "  --checkpoint-every N   ... every N steps (and at the end)\n"
            "  --async-checkpoint     save_state returns after a snapshot; a writer thread writes (accel_ckpt.h)\n"
            "  --resume               load the latest checkpoint in --checkpoint-dir and continue\n"
            "  --kill-at N            after step N (and its checkpoint) SIGKILL every rank (resume tests)\n"
            "  --signal-at N          the last rank raises SIGUSR1 in step N (preemption tests)\n"
            "  --throttle-ms N        sleep N ms after every step (preemption tests: time to signal mid-run)\n"
            "  --dump-weights FILE    final fp32 master weights (raw little-endian float32)\n"
            "  --loss-file FILE       one line per step: step loss lr scale skipped scheduler_steps\n"
            "  --log-dir DIR          TensorBoard + JSONL logs (accel_trackers)\n"
            "  --profile DIR          phase table + Chrome traces in DIR (accel_profile; open in ui.perfetto.dev)\n"
            "  --print-every N        progress line every N steps (default 50)\n"
            "  --bucket-kb N          all-reduce gradients in N-KiB buckets (default: one flat all-reduce)\n"
            "  --no-watchdog          plain blocking MPI calls (no collective deadline)\n"
            "  --comm-hook H          none | fp16 | bf16: all-reduce gradients in 16 bits (Accelerate's\n"
            "                         DDPCommunicationHookType; half the bytes on the wire; not with --zero)\n"
            "  --zero 1|2             ZeRO-1/2: shard the optimizer state (and with 2 the gradients) over the ranks\n"
            "  --zero 3               ZeRO-3 / FSDP FULL_SHARD: the weights too, one unit per layer (gathered for\n"
            "                         its forward and its backward, gradients reduce-scattered); checkpoints: sharded\n"
            "                         (one file per rank, loadable on another number of processes)\n");
}

static int parse_opts(int argc, char **argv, opts *o) {
    int i;
    memset(o, 0, sizeof *o);
    o->data = "data/digits.csv";
    o->precision = NULL; /* the launcher's (ACCELERATE_MIXED_PRECISION), else no */
    o->steps = 500; o->batch = 16; o->accum = 1; o->hidden = 64; o->shuffle = 1; o->print_every = 50;
    o->eval_batch = 32; o->lr = 0.05f; o->momentum = 0.9f; o->clip = 1.0f; o->warmup = 0.05f;
    o->init_scale = 65536.0f; o->growth_interval = 2000; o->seed = 42;
    for (i = 1; i < argc; ++i) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define TD_ARG(name) (!strcmp(a, name) && v && (++i, 1))
        if (TD_ARG("--data")) o->data = v;
        else if (TD_ARG("--steps")) o->steps = atoi(v);
        else if (TD_ARG("--epochs")) o->epochs = atoi(v);
        else if (TD_ARG("--batch")) o->batch = atoi(v);
        else if (TD_ARG("--accum")) o->accum = atoi(v);
        else if (TD_ARG("--precision")) o->precision = v;
        else if (TD_ARG("--init-scale")) o->init_scale = (float)atof(v);
        else if (TD_ARG("--growth-interval")) o->growth_interval = atoi(v);
        else if (TD_ARG("--hidden")) o->hidden = atoi(v);
        else if (TD_ARG("--lr")) o->lr = (float)atof(v);
        else if (TD_ARG("--momentum")) o->momentum = (float)atof(v);
        else if (TD_ARG("--weight-decay")) o->weight_decay = (float)atof(v);
        else if (TD_ARG("--warmup")) o->warmup = (float)atof(v);
        else if (TD_ARG("--clip")) o->clip = (float)atof(v);
        else if (TD_ARG("--seed")) o->seed = strtoull(v, NULL, 10);
        else if (TD_ARG("--checkpoint-dir")) o->ckpt_dir = v;
        else if (TD_ARG("--checkpoint-every")) o->ckpt_every = atoi(v);
        else if (TD_ARG("--kill-at")) o->kill_at = atoi(v);
        else if (TD_ARG("--signal-at")) o->signal_at = atoi(v);
        else if (TD_ARG("--throttle-ms")) o->throttle_ms = atoi(v);
        else if (TD_ARG("--dump-weights")) o->dump_weights = v;
        else if (TD_ARG("--loss-file")) o->loss_file = v;
        else if (TD_ARG("--log-dir")) o->log_dir = v;
        else if (TD_ARG("--profile")) o->profile_dir = v;
        else if (TD_ARG("--print-every")) o->print_every = atoi(v);
        else if (TD_ARG("--eval-batch")) o->eval_batch = atoi(v);
        else if (TD_ARG("--bucket-kb")) o->bucket_kb = atoi(v);
        else if (TD_ARG("--zero")) o->zero = atoi(v);
        else if (TD_ARG("--comm-hook")) o->comm_hook = v;
        else if (!strcmp(a, "--resume")) o->resume = "latest";
        else if (!strcmp(a, "--no-shuffle")) o->shuffle = 0;
        else if (!strcmp(a, "--async-checkpoint")) o->async_ckpt = 1;
        else if (!strcmp(a, "--no-watchdog")) o->no_watchdog = 1;
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(); return 2; }
        else { fprintf(stderr, "train_digits: unknown or incomplete option %s\n", a); usage(); return 2; }
#undef TD_ARG
    }
    if (o->batch < 1 || o->accum < 1 || o->hidden < 1 || o->eval_batch < 1 || (o->steps < 1 && o->epochs < 1) ||
        o->ckpt_every < 0 || o->print_every < 0 || o->signal_at < 0 || o->throttle_ms < 0) {
        fprintf(stderr, "train_digits: sizes and counts must be positive\n");
        return 2;
    }
    if (o->precision && strcmp(o->precision, "no") && strcmp(o->precision, "fp16") && strcmp(o->precision, "bf16")) {
        fprintf(stderr, "train_digits: --precision must be no, fp16 or bf16\n");
        return 2;
    }
    if (o->comm_hook && strcmp(o->comm_hook, "none") && strcmp(o->comm_hook, "fp16") && strcmp(o->comm_hook, "bf16")) {
        fprintf(stderr, "train_digits: --comm-hook must be none, fp16 or bf16\n");
        return 2;
    }
    if (o->zero && o->comm_hook && strcmp(o->comm_hook, "none")) { /* ZeRO reduce-scatters; the hook is DDP's */
        fprintf(stderr, "train_digits: --comm-hook is the DDP reducer's and does not combine with --zero\n");
        return 2;
    }
    if (o->zero < 0 || o->zero > 3) {
        fprintf(stderr, "train_digits: --zero takes 1, 2 or 3\n");
        return 2;
    }
    if ((o->zero == 1 || o->zero == 2) && o->ckpt_dir) {
        fprintf(stderr, "train_digits: --zero 1|2 does not combine with --checkpoint-dir here (--zero 3 does)\n");
        return 2;
    }
    if ((o->resume || o->kill_at || o->signal_at) && !o->ckpt_dir) {
        fprintf(stderr, "train_digits: --resume, --kill-at and --signal-at need --checkpoint-dir\n");
        return 2;
    }
    return 0;
}

#define CHECK(call)                                                                                                  \
    do {                                                                                                            \
        accel_result r_ = (call);                                                                                   \
        if (r_ != ACCEL_OK) {                                                                                       \
            fprintf(stderr, "train_digits: rank %d: %s failed: %s\n", acc.process_index, #call, accel_last_error(&acc)); \
            goto fail;                                                                                              \
        }                                                                                                           \
    } while (0)

/* ------------------------------------------------------------------------------------------ precision rounding */
/* The model runs in the training precision: activations, backward activations and the gradient buffer are rounded
   through fp16/bf16 (accel_amp's RNE helpers — the same math its CUDA kernels use), so at too high a loss scale fp16
   gradients really overflow to Inf. */
static void round_f16(float *v, size_t n) {
    size_t i;
    for (i = 0; i < n; ++i) v[i] = accel_f16_to_f32(accel_f32_to_f16(v[i]));
}
static void round_bf16(float *v, size_t n) {
    size_t i;
    for (i = 0; i < n; ++i) v[i] = accel_bf16_to_f32(accel_f32_to_bf16(v[i]));
}

static double now_s(void) { return accel_now(); }

/* ------------------------------------------------------------------------------------------------ trainer state */
/* What a checkpoint holds besides the model and the optimizer (trainer.bin; host byte order, as a struct). */
typedef struct progress {
    int64_t step;               /* sync steps done (skipped ones included) */
    int64_t epoch;              /* current epoch */
    int64_t samples_in_epoch;   /* global samples consumed in the current epoch (world-size independent) */
    int64_t scheduler_steps;    /* the scheduler's position */
    int64_t scheduler_total;    /* its length when saved (steps × P): rescaled on a different P */
    int64_t optimizer_steps;    /* steps taken (not skipped) */
    int32_t momentum_started, num_processes, batch, pad;
} progress;

/* Where to continue after load_state. Same world size: the shard's own state (exact). Another world size: the
   epoch and the global samples consumed are world-size independent; skip samples / (P·batch) per-process batches.
   The scheduler position is rescaled to the new length (it counts num_processes steps per optimizer step). */
static accel_result resume_position(accel *acc, progress *pg, accel_data_shard *train, const uint8_t *shard_state,
                                    int64_t sched_total) {
    accel_result r = ACCEL_OK;
    if (pg->num_processes == acc->num_processes && pg->batch == accel_data_shard_batch_size(train)) {
        r = accel_data_shard_state_load(train, shard_state, ACCEL_DATA_SHARD_STATE_BYTES);
    } else {
        int64_t per = (int64_t)acc->num_processes * accel_data_shard_batch_size(train);
        if (pg->samples_in_epoch % per)
            return accel_set_error(acc, ACCEL_ERR_MISMATCH, "resume: %lld samples into the epoch is not a whole number "
                               "of %d x %lld batches", (long long)pg->samples_in_epoch, acc->num_processes,
                               (long long)accel_data_shard_batch_size(train));
        if ((r = accel_data_shard_set_epoch(train, pg->epoch)) != ACCEL_OK) return r;
        r = accel_data_shard_skip_first_batches(train, pg->samples_in_epoch / per);
    }
    if (r != ACCEL_OK) return r;
    if (pg->scheduler_total != sched_total && pg->scheduler_total > 0)
        pg->scheduler_steps = pg->scheduler_steps * sched_total / pg->scheduler_total;
    pg->scheduler_total = sched_total;
    pg->num_processes = acc->num_processes;
    return ACCEL_OK;
}

/* ---------------------------------------------------------------------------------------------- tracking */
static accel_track g_track;
static int g_track_on;

static accel_result start_tracking(accel *acc, const opts *o) {
    accel_track_desc td;
    accel_track_param cfg[8];
    accel_result r;
    memset(&td, 0, sizeof td);
    td.log_with = ACCEL_TRACK_ALL;
    td.logging_dir = o->log_dir;
    if ((r = accel_track_init(acc, &g_track, &td)) != ACCEL_OK) return r;
    cfg[0] = accel_track_param_number("lr", o->lr);
    cfg[1] = accel_track_param_int("batch_size", o->batch);
    cfg[2] = accel_track_param_int("gradient_accumulation_steps", o->accum);
    cfg[3] = accel_track_param_int("num_processes", acc->num_processes);
    cfg[4] = accel_track_param_string("mixed_precision", accel_precision_name(acc->mixed_precision));
    cfg[5] = accel_track_param_int("hidden", o->hidden);
    cfg[6] = accel_track_param_int("steps", o->steps);
    cfg[7] = accel_track_param_int("seed", (int64_t)o->seed);
    if ((r = accel_track_init_trackers(&g_track, "train_digits", cfg, 8)) != ACCEL_OK) return r;
    g_track_on = 1;
    return ACCEL_OK;
}

/* Negative values are left out (the final call logs only the accuracy). */
static accel_result log_scalars(accel *acc, const opts *o, int64_t step, double loss, float lr, float scale,
                                double norm_or_accuracy) {
    accel_track_value v[4];
    int n = 0;
    (void)acc; (void)o;
    if (!g_track_on) return ACCEL_OK;
    if (loss >= 0) {
        v[n++] = accel_track_scalar("train/loss", loss);
        v[n++] = accel_track_scalar("train/lr", lr);
        if (scale >= 0) v[n++] = accel_track_scalar("train/loss_scale", scale);
        v[n++] = accel_track_scalar("train/grad_norm", norm_or_accuracy);
    } else {
        v[n++] = accel_track_scalar("eval/accuracy", norm_or_accuracy);
    }
    return accel_track_log(&g_track, v, n, step);
}

/* ------------------------------------------------------------------------------------------ gradients */
/* DDP's reducer: the four gradients are registered once; after backward each is marked ready in the order backward
   finishes them (fc2 first) and full buckets are all-reduced (averaged) right away. By default the reducer sees
   one contiguous fp32 buffer and does a single in-place all-reduce; --bucket-kb N forces N-KiB buckets. */
static accel_result reduce_gradients(accel_ddp *red) {
    accel_result r;
    int k;
    for (k = 3; k >= 0; --k)
        if ((r = accel_ddp_grad_ready(red, k)) != ACCEL_OK) return r;
    return accel_ddp_wait(red);
}
/* ZeRO: the same hand-over; stage 2 leaves each rank only its shard of the averaged gradients */
static accel_result reduce_gradients_zero(accel_zero *z) {
    accel_result r;
    int k;
    for (k = 3; k >= 0; --k)
        if ((r = accel_zero_grad_ready(z, k)) != ACCEL_OK) return r;
    return accel_zero_wait(z);
}

/* ------------------------------------------------------------------------------------------- ZeRO-3 (--zero 3) */
/* The model as two FSDP units, one per layer ("fc1": W1, b1; "fc2": W2, b2). Each rank keeps its shard of every
   unit (master, gradient, momentum); a layer's weights exist whole only between wait and release. So the micro-batch
   runs layer by layer over the whole batch (digits_mlp.h's mlp_forward_backward runs sample by sample over both
   layers): the same operations on the same values in the same order per element — the gradient sums still add the
   samples in order — so the result is that function's bit for bit, with the batch's activations kept in between. */
typedef struct z3_model {
    accel_zero_fsdp *f;
    accel_tensor w[2][2];  /* the units' parameters as wait() hands them out (param_dtype) */
    accel_tensor g[2][2];  /* the units' gradient buffers (F32) */
    float *wide;           /* a gathered F16/BF16 unit widened to F32 for the CPU kernels (NULL: F32 gathers) */
    float *hpre, *h, *dh, *dlog; /* the micro-batch's activations: batch x H (x 10 for dlog) */
} z3_model;

/* wait(u), and the unit's weights as F32 (the gathered buffer itself, or widened into z->wide) */
static accel_result z3_weights(accel *acc, z3_model *z, int u, const float **W, const float **B) {
    accel_result r = accel_zero_fsdp_wait(z->f, u, z->w[u], 2);
    size_t nw = (size_t)accel_tensor_numel(&z->w[u][0]), nb = (size_t)accel_tensor_numel(&z->w[u][1]);
    if (r != ACCEL_OK) return r;
    if (!z->wide) {
        *W = (const float *)z->w[u][0].ptr;
        *B = (const float *)z->w[u][1].ptr;
        return ACCEL_OK;
    }
    if ((r = accel_amp_convert(acc, z->w[u][0].ptr, z->w[u][0].dtype, z->wide, ACCEL_F32, nw, NULL)) != ACCEL_OK ||
        (r = accel_amp_convert(acc, z->w[u][1].ptr, z->w[u][1].dtype, z->wide + nw, ACCEL_F32, nb, NULL)) != ACCEL_OK)
        return r;
    *W = z->wide;
    *B = z->wide + nw;
    return ACCEL_OK;
}

/* One micro-batch: forward fc1, fc2 (gather/wait/release), backward fc2, fc1 (wait, grads, release,
   reduce_scatter). Returns the summed per-sample loss in *total (unscaled), as mlp_forward_backward. */
static accel_result z3_forward_backward(accel *acc, z3_model *z, const mlp_shape *s, const float *X, const int *Y,
                                        const int64_t *idx, int n, float mult, mlp_round_fn rnd, double *total) {
    const int H = s->hidden;
    const float *W, *B;
    float g = n > 0 ? mult / (float)n : 0.0f;
    accel_result r;
    int i, j, k, c, u;
    *total = 0.0;
    if ((r = accel_zero_fsdp_begin_forward(z->f)) != ACCEL_OK) return r;
    if ((r = z3_weights(acc, z, 0, &W, &B)) != ACCEL_OK) return r; /* fc1 */
    for (i = 0; i < n; ++i) {
        const float *x = X + (size_t)idx[i] * DIGITS_FEATURES;
        float *hp = z->hpre + (size_t)i * H, *h = z->h + (size_t)i * H;
        for (j = 0; j < H; ++j) {
            const float *row = W + (size_t)j * DIGITS_FEATURES;
            float a = B[j];
            for (k = 0; k < DIGITS_FEATURES; ++k) a += row[k] * x[k];
            hp[j] = a;
            h[j] = a > 0.0f ? a : 0.0f;
        }
        if (rnd) rnd(h, (size_t)H);
    }
    if ((r = accel_zero_fsdp_release(z->f, 0)) != ACCEL_OK) return r;
    if ((r = z3_weights(acc, z, 1, &W, &B)) != ACCEL_OK) return r; /* fc2 and the loss */
    for (i = 0; i < n; ++i) {
        float *lg = z->dlog + (size_t)i * DIGITS_CLASSES, *h = z->h + (size_t)i * H, p[DIGITS_CLASSES], mx, sum = 0.0f;
        int y = Y[idx[i]];
        for (c = 0; c < DIGITS_CLASSES; ++c) {
            const float *row = W + (size_t)c * H;
            float a = B[c];
            for (j = 0; j < H; ++j) a += row[j] * h[j];
            lg[c] = a;
        }
        if (rnd) rnd(lg, DIGITS_CLASSES);
        mx = lg[0];
        for (c = 1; c < DIGITS_CLASSES; ++c)
            if (lg[c] > mx) mx = lg[c];
        for (c = 0; c < DIGITS_CLASSES; ++c) { p[c] = expf(lg[c] - mx); sum += p[c]; }
        *total += -(lg[y] - mx - logf(sum)); /* a float, summed in double (mlp_forward1's return) */
        for (c = 0; c < DIGITS_CLASSES; ++c) lg[c] = (p[c] / sum - (c == y ? 1.0f : 0.0f)) * g;
        if (rnd) rnd(lg, DIGITS_CLASSES);
    }
    if ((r = accel_zero_fsdp_release(z->f, 1)) != ACCEL_OK) return r;
    if ((r = accel_zero_fsdp_begin_backward(z->f)) != ACCEL_OK) return r;
    for (u = 1; u >= 0; --u) {
        float *gW, *gB;
        if ((r = z3_weights(acc, z, u, &W, &B)) != ACCEL_OK) return r;
        if ((r = accel_zero_fsdp_grads(z->f, u, z->g[u], 2)) != ACCEL_OK) return r;
        gW = (float *)z->g[u][0].ptr;
        gB = (float *)z->g[u][1].ptr;
        for (i = 0; i < n; ++i) {
            if (u == 1) { /* fc2: its gradients and the hidden layer's */
                const float *lg = z->dlog + (size_t)i * DIGITS_CLASSES, *h = z->h + (size_t)i * H;
                const float *hp = z->hpre + (size_t)i * H;
                float *dh = z->dh + (size_t)i * H;
                for (j = 0; j < H; ++j) dh[j] = 0.0f;
                for (c = 0; c < DIGITS_CLASSES; ++c) {
                    const float *row = W + (size_t)c * H;
                    float *grow = gW + (size_t)c * H, d = lg[c];
                    for (j = 0; j < H; ++j) { grow[j] += d * h[j]; dh[j] += d * row[j]; }
                    gB[c] += d;
                }
                for (j = 0; j < H; ++j) dh[j] = hp[j] > 0.0f ? dh[j] : 0.0f;
                if (rnd) rnd(dh, (size_t)H);
            } else { /* fc1 */
                const float *x = X + (size_t)idx[i] * DIGITS_FEATURES, *dh = z->dh + (size_t)i * H;
                for (j = 0; j < H; ++j) {
                    float *grow = gW + (size_t)j * DIGITS_FEATURES, d = dh[j];
                    if (d == 0.0f) continue;
                    for (k = 0; k < DIGITS_FEATURES; ++k) grow[k] += d * x[k];
                    gB[j] += d;
                }
            }
        }
        if (rnd) { /* the gradient buffer in the training precision, as mlp_forward_backward's */
            rnd(gW, (size_t)accel_tensor_numel(&z->g[u][0]));
            rnd(gB, (size_t)accel_tensor_numel(&z->g[u][1]));
        }
        if ((r = accel_zero_fsdp_release(z->f, u)) != ACCEL_OK) return r;
        if ((r = accel_zero_fsdp_reduce_scatter(z->f, u)) != ACCEL_OK) return r;
    }
    return accel_zero_fsdp_end_backward(z->f);
}

/* --------------------------------------------------------------------------------------------- evaluation */
/* Accelerate's eval loop: every process predicts its (padded, even_batches) shard of the test set; the
   (prediction, label) rows go through gather_for_metrics, which drops the padding duplicates of the last batch. */
static accel_result evaluate(accel *acc, accel_coll *coll, accel_data_shard *test, const mlp_shape *shape,
                             const float *model, const digits_data *data, mlp_work *work, mlp_round_fn rnd,
                             int64_t *idx, double *pct) {
    int64_t b = accel_data_shard_batch_size(test), count, i, j, correct = 0, total = 0;
    int32_t *mine = (int32_t *)accel_host_alloc(acc, (size_t)b * 2 * sizeof(int32_t));
    int *preds = (int *)accel_host_alloc(acc, (size_t)b * sizeof(int));
    accel_result r = ACCEL_OK;
    if (!mine || !preds) { r = ACCEL_ERR_OUT_OF_MEMORY; goto done; }
    for (;;) {
        accel_tensor in, out;
        if ((r = accel_data_shard_next(test, idx, &count)) != ACCEL_OK || count == 0) break;
        for (i = 0; i < count; ++i) idx[i] += DIGITS_TRAIN;
        mlp_correct(shape, model, data->x, data->y, idx, (int)count, work, rnd, preds);
        for (i = 0; i < count; ++i) {
            mine[2 * i] = preds[i];
            mine[2 * i + 1] = data->y[idx[i]];
        }
        memset(&in, 0, sizeof in);
        memset(&out, 0, sizeof out);
        in.name = "eval/pred_label";
        in.ptr = mine;
        in.dtype = ACCEL_I32;
        in.ndim = 2;
        in.shape[0] = count;
        in.shape[1] = 2;
        if ((r = accel_coll_gather_for_metrics(coll, &in, &out)) != ACCEL_OK) break;
        for (j = 0; j < out.shape[0]; ++j)
            correct += ((const int32_t *)out.ptr)[2 * j] == ((const int32_t *)out.ptr)[2 * j + 1];
        total += out.shape[0];
        accel_coll_free(coll, out.ptr);
    }
    *pct = total ? 100.0 * (double)correct / (double)total : 0.0;
    if (r == ACCEL_OK && total != DIGITS_ROWS - DIGITS_TRAIN)
        r = accel_set_error(acc, ACCEL_ERR_STATE, "evaluate: gathered %lld test rows, expected %d", (long long)total,
                        DIGITS_ROWS - DIGITS_TRAIN);
done:
    accel_host_free(acc, mine);
    accel_host_free(acc, preds);
    return r;
}

/* ------------------------------------------------------------------------------------------- checkpoints */
/* save_state writes the model (fp32 master weights) and the optimizer (momentum) as safetensors, plus the blobs
   registered here: "scaler" (accel_amp's state bytes) and "trainer" (progress + the sampler's state bytes). */
typedef struct trainer_blob {
    progress pg;
    uint8_t shard[ACCEL_DATA_SHARD_STATE_BYTES];
} trainer_blob;
typedef struct ckpt_ctx {
    accel *acc;
    progress *pg;
    accel_data_shard *train;
    accel_amp_scaler *scaler;
    trainer_blob loaded;
    int have_loaded;
} ckpt_ctx;

static accel_result save_trainer(void *user, void *buf, size_t cap, size_t *written) {
    ckpt_ctx *c = (ckpt_ctx *)user;
    trainer_blob t;
    size_t w = 0;
    accel_result r;
    if (cap < sizeof t) { *written = sizeof t; return ACCEL_OK; }
    memset(&t, 0, sizeof t);
    t.pg = *c->pg;
    t.pg.epoch = c->train->epoch;
    if ((r = accel_data_shard_state_save(c->train, t.shard, sizeof t.shard, &w)) != ACCEL_OK) return r;
    memcpy(buf, &t, sizeof t);
    *written = sizeof t;
    return ACCEL_OK;
}
/* Only kept here; applied after load_state succeeded (resume_position), so a failed load changes nothing. */
static accel_result load_trainer(void *user, const void *buf, size_t n) {
    ckpt_ctx *c = (ckpt_ctx *)user;
    if (n != sizeof c->loaded)
        return accel_set_error(c->acc, ACCEL_ERR_FORMAT, "trainer.bin: %zu bytes, expected %zu", n, sizeof c->loaded);
    memcpy(&c->loaded, buf, n);
    c->have_loaded = 1;
    return ACCEL_OK;
}

/* An async save's snapshot and background write, as ranges of the profiler (created after the checkpointer). */
static void ckpt_range(void *user, const char *name, double begin, double end) {
    accel_prof_record_range(*(accel_prof **)user, name, begin, end);
}

static accel_result setup_checkpoints(accel *acc, const opts *o, ckpt_ctx *cc, accel_ckpt **ck,
                                      const accel_tensor *params, const accel_tensor *moms, accel_prof **prof) {
    accel_ckpt_desc cd;
    accel_result r;
    memset(&cd, 0, sizeof cd);
    cd.project_dir = o->ckpt_dir;
    cd.automatic_checkpoint_naming = 1; /* <dir>/checkpoints/checkpoint_<i> */
    cd.total_limit = 2;
    cd.async = o->async_ckpt ? ACCEL_ON : ACCEL_OFF; /* the momenta and weights may change once save_state returns */
    cd.on_range = ckpt_range;
    cd.range_user = prof;
    if ((r = accel_ckpt_create(acc, &cd, ck)) != ACCEL_OK) return r;
    if (params && (r = accel_ckpt_register_model(*ck, params, 4)) != ACCEL_OK) return r;
    if (moms && (r = accel_ckpt_register_optimizer(*ck, moms, 4)) != ACCEL_OK) return r;
    r = accel_ckpt_register(*ck, "scaler", accel_amp_scaler_state_save, accel_amp_scaler_state_load, cc->scaler);
    if (r != ACCEL_OK) return r;
    return accel_ckpt_register(*ck, "trainer", save_trainer, load_trainer, cc);
}

/* --zero 1|2|3: accel_optim's SGD (torch.optim.SGD's rule) over this rank's shard */
static accel_result shard_sgd(accel *acc, const opts *o, const accel_tensor *params, const accel_tensor *grads,
                              const accel_tensor *model, uint64_t index_offset, accel_optim **out) {
    accel_optim_desc od;
    memset(&od, 0, sizeof od);
    od.algorithm = ACCEL_OPTIM_SGD;
    od.lr = o->lr > 0 ? o->lr : ACCEL_OPTIM_ZERO;
    od.momentum = o->momentum;
    od.weight_decay = o->weight_decay;
    od.params = params; od.grads = grads; od.model = model; od.nparams = 4;
    od.index_offset = index_offset;
    return accel_optim_create(acc, &od, out);
}

/* --zero 3: each rank saves its shards of the weights and momenta (accel_zero_fsdp_state, Accelerate's
   SHARDED_STATE_DICT, loadable on any number of ranks) and the optimizer's step counts; the rest as above. */
static accel_result setup_checkpoints_z3(accel_ckpt *ck, accel_zero_fsdp_state *fs, accel_optim_shard_state *ss) {
    accel_result r = accel_ckpt_register_sharded(ck, "fsdp_state", accel_zero_fsdp_state_save,
                                                 accel_zero_fsdp_state_load_all, fs);
    if (r != ACCEL_OK) return r;
    return accel_ckpt_register(ck, "optim_state", accel_optim_shard_state_save, accel_optim_shard_state_load, ss);
}

int main(int argc, char **argv) {
    opts o;
    accel acc;
    accel_desc desc;
    digits_data data;
    mlp_shape shape;
    mlp_work work;
    accel_data_shard train, test;
    accel_data_shard_desc sd;
    accel_amp_scaler scaler;
    accel_amp_scaler_desc scd;
    accel_tensor grads[4], params[4], moms[4];
    progress pg;
    accel_coll *coll = NULL;
    accel_ddp *red = NULL;
    accel_zero *zero = NULL;        /* --zero: the partition and its communication */
    accel_optim *zopt = NULL;            /* --zero: SGD over this rank's shard */
    accel_tensor zgrads[4];              /* --zero: the gradients the optimizer reads (stage 2: the shard's) */
    z3_model z3;                         /* --zero 3: the FSDP object, its views and the batch's activations */
    accel_tensor vp[4], vm[4], vg[4], vn[4], vfull[4]; /* --zero 3: shard views (accel_zero_fsdp_views) */
    accel_zero_fsdp_state z3fs;
    accel_optim_shard_state z3ss;
    accel_ckpt *ck = NULL;
    accel_prof *prof = NULL;
    accel_prof_desc pfd;
    int fwd_bwd = 0;
    ckpt_ctx cc;
    mlp_round_fn rnd = NULL;
    accel_dtype model_dtype = ACCEL_F32;
    float *master = NULL, *model = NULL, *grad = NULL, *mom = NULL;
    uint16_t *model16 = NULL;
    int64_t *idx = NULL, count, total_steps, sched_total, global_batch;
    FILE *loss_f = NULL;
    double t_start, loss_local = 0.0, last_loss = 0.0, samples_done = 0.0;
    int rc = 1, inited = 0, have_data = 0, have_work = 0, have_scaler = 0, stop = 0, last_rank;
    int pr = parse_opts(argc, argv, &o);
    if (pr) return pr;
    memset(&z3, 0, sizeof z3);

    memset(&desc, 0, sizeof desc);
    desc.gradient_accumulation_steps = o.accum;
    desc.mixed_precision = !o.precision                   ? ACCEL_PRECISION_DEFAULT
                           : !strcmp(o.precision, "fp16") ? ACCEL_PRECISION_FP16
                           : !strcmp(o.precision, "bf16") ? ACCEL_PRECISION_BF16
                                                          : ACCEL_PRECISION_NO;
    desc.cpu = 1;
    desc.collective_timeout_ms = 120000; /* a lost peer ends the run in 2 minutes instead of Accelerate's 30 */
    if (accel_init(&acc, &desc) != ACCEL_OK) {
        fprintf(stderr, "train_digits: accel_init: %s\n", accel_last_error(&acc));
        accel_shutdown(&acc);
        return 1;
    }
    inited = 1;
    last_rank = acc.num_processes - 1;
    if (acc.gradient_accumulation_steps != o.accum) o.accum = acc.gradient_accumulation_steps; /* env override */
    if (acc.mixed_precision == ACCEL_PRECISION_FP8) {
        fprintf(stderr, "train_digits: mixed precision fp8 (from the launcher) is not one this trainer runs (no, fp16, "
                "bf16)\n");
        goto fail;
    }

    /* 1. data: every rank reads the CSV (small); the sampler shards it */
    if (digits_load(o.data, &data)) goto fail;
    have_data = 1;
    shape = mlp_make_shape(o.hidden);
    memset(&sd, 0, sizeof sd);
    sd.dataset_len = DIGITS_TRAIN;
    sd.batch_size = o.batch;
    sd.drop_last = 1;
    sd.shuffle = o.shuffle;
    sd.seed = o.seed;
    CHECK(accel_data_shard_init(&acc, &train, &sd));
    memset(&sd, 0, sizeof sd);
    sd.dataset_len = data.n - DIGITS_TRAIN;
    sd.batch_size = o.eval_batch; /* even_batches (default): padded, gather_for_metrics drops the padding */
    CHECK(accel_data_shard_init(&acc, &test, &sd));
    if (accel_data_shard_len(&train) < 1) {
        fprintf(stderr, "train_digits: batch %d on %d processes leaves no full batch of %d samples\n", o.batch,
                acc.num_processes, DIGITS_TRAIN);
        goto fail;
    }
    global_batch = (int64_t)acc.num_processes * o.batch * o.accum;
    if (o.epochs > 0) /* sync steps per epoch: ceil(batches / accum) with sync_with_dataloader */
        o.steps = (int)(o.epochs * ((accel_data_shard_len(&train) + o.accum - 1) / o.accum));
    total_steps = o.steps;
    sched_total = total_steps * acc.num_processes; /* stepped num_processes times per optimizer step */

    /* 2. model: fp32 master weights, a low-precision model copy for bf16/fp16 */
    master = (float *)accel_host_alloc(&acc, shape.count * sizeof(float));
    grad = (float *)accel_host_alloc(&acc, shape.count * sizeof(float));
    mom = (float *)accel_host_alloc(&acc, shape.count * sizeof(float));
    idx = (int64_t *)accel_host_alloc(&acc, (size_t)(o.batch > o.eval_batch ? o.batch : o.eval_batch) * sizeof(int64_t));
    if (!master || !grad || !mom || !idx || mlp_work_init(&work, o.hidden)) goto fail;
    have_work = 1;
    mlp_init(&shape, master, o.seed);
    memset(grad, 0, shape.count * sizeof(float));
    memset(mom, 0, shape.count * sizeof(float));
    if (acc.mixed_precision == ACCEL_PRECISION_FP16 || acc.mixed_precision == ACCEL_PRECISION_BF16) {
        model_dtype = acc.mixed_precision == ACCEL_PRECISION_FP16 ? ACCEL_F16 : ACCEL_BF16;
        rnd = model_dtype == ACCEL_F16 ? round_f16 : round_bf16;
        model16 = (uint16_t *)accel_host_alloc(&acc, shape.count * sizeof(uint16_t));
        model = (float *)accel_host_alloc(&acc, shape.count * sizeof(float));
        if (!model16 || !model) goto fail;
    } else {
        model = master;
    }
    {   /* one accel_tensor per parameter, for the reducer, the scaler/clipping and the checkpoints */
        static const char *names[4] = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"};
        static const char *mnames[4] = {"fc1.weight.momentum_buffer", "fc1.bias.momentum_buffer",
                                        "fc2.weight.momentum_buffer", "fc2.bias.momentum_buffer"};
        size_t offs[5];
        int k;
        offs[0] = shape.off_w1; offs[1] = shape.off_b1; offs[2] = shape.off_w2; offs[3] = shape.off_b2;
        offs[4] = shape.count;
        for (k = 0; k < 4; ++k) {
            memset(&grads[k], 0, sizeof grads[k]);
            grads[k].name = names[k];
            grads[k].ptr = grad + offs[k];
            grads[k].dtype = ACCEL_F32;
            grads[k].ndim = k % 2 ? 1 : 2;
            grads[k].shape[0] = k % 2 ? (int64_t)(offs[k + 1] - offs[k]) : (k == 0 ? o.hidden : DIGITS_CLASSES);
            grads[k].shape[1] = k == 0 ? DIGITS_FEATURES : o.hidden;
            params[k] = grads[k];
            params[k].ptr = master + offs[k];
            moms[k] = grads[k];
            moms[k].name = mnames[k];
            moms[k].ptr = mom + offs[k];
        }
    }

    /* 3. collectives: the process group's communicator and the gradient reducer */
    {
        accel_coll_desc cdesc;
        accel_ddp_desc rd;
        memset(&cdesc, 0, sizeof cdesc);
        cdesc.no_watchdog = o.no_watchdog;
        CHECK(accel_coll_create(&acc, &cdesc, &coll));
        memset(&rd, 0, sizeof rd);
        if (o.bucket_kb > 0) {
            rd.flat = ACCEL_OFF;
            rd.bucket_cap_mb = rd.first_bucket_mb = o.bucket_kb / 1024.0;
        }
        if (o.comm_hook) /* DistributedDataParallelKwargs(comm_hook=...) */
            rd.comm_hook = !strcmp(o.comm_hook, "fp16")   ? ACCEL_DDP_COMM_HOOK_FP16
                           : !strcmp(o.comm_hook, "bf16") ? ACCEL_DDP_COMM_HOOK_BF16
                                                          : ACCEL_DDP_COMM_HOOK_NONE;
        if (o.zero == 3) {
            accel_zero_unit units[2];
            accel_zero_fsdp_desc fd;
            const accel_tensor *zmom = NULL;
            int nmom = 0;
            size_t wide = shape.off_w2 > shape.count - shape.off_w2 ? shape.off_w2 : shape.count - shape.off_w2;
            memset(units, 0, sizeof units);
            units[0].name = "fc1"; units[0].params = params; units[0].n = 2;
            units[1].name = "fc2"; units[1].params = params + 2; units[1].n = 2;
            memset(&fd, 0, sizeof fd);
            fd.strategy = ACCEL_ZERO_FULL_SHARD;
            fd.units = units; fd.nunits = 2;
            fd.param_dtype = model_dtype; /* gathered in the training precision; gradients reduced in F32 */
            fd.reduce_dtype = ACCEL_F32;
            fd.forward_prefetch = ACCEL_ON;
            CHECK(accel_zero_fsdp_create(coll, &fd, &z3.f));
            CHECK(accel_zero_fsdp_views(z3.f, ACCEL_ZERO_VIEW_PARAMS, vp, 4));
            CHECK(accel_zero_fsdp_views(z3.f, ACCEL_ZERO_VIEW_MODEL, vm, 4));
            CHECK(accel_zero_fsdp_views(z3.f, ACCEL_ZERO_VIEW_GRADS, vg, 4));
            CHECK(accel_zero_fsdp_views(z3.f, ACCEL_ZERO_VIEW_NORM_GRADS, vn, 4));
            CHECK(accel_zero_fsdp_full_tensors(z3.f, vfull, 4));
            z3.hpre = (float *)accel_host_alloc(&acc, (size_t)o.batch * (3 * (size_t)o.hidden + DIGITS_CLASSES) *
                                                          sizeof(float));
            if (!z3.hpre) goto fail;
            z3.h = z3.hpre + (size_t)o.batch * o.hidden;
            z3.dh = z3.h + (size_t)o.batch * o.hidden;
            z3.dlog = z3.dh + (size_t)o.batch * o.hidden;
            if (model_dtype != ACCEL_F32 && !(z3.wide = (float *)accel_host_alloc(&acc, wide * sizeof(float))))
                goto fail;
            /* the param_dtype copy (vm) is what the next gathers read: the step keeps it current */
            CHECK(shard_sgd(&acc, &o, vp, vg, model_dtype != ACCEL_F32 ? vm : NULL, 0, &zopt));
            CHECK(accel_optim_state_tensors(zopt, &zmom, &nmom));
            z3fs.fsdp = z3.f; z3fs.state = zmom; z3fs.m = nmom;
            z3ss.opt = zopt; z3ss.full = vfull;
        } else if (o.zero) {
            accel_zero_desc zd;
            accel_tensor zparams[4];
            memset(&zd, 0, sizeof zd);
            zd.stage = o.zero;
            zd.params = params; zd.grads = grads; zd.n = 4;
            zd.bucket_cap_mb = o.bucket_kb > 0 ? o.bucket_kb / 1024.0 : 0.0;
            CHECK(accel_zero_create(coll, &zd, &zero));
            CHECK(accel_zero_views(zero, params, 4, zparams));
            CHECK(accel_zero_grad_views(zero, zgrads, 4));
            CHECK(shard_sgd(&acc, &o, zparams, zgrads, NULL, (uint64_t)accel_zero_get_partition(zero)->begin, &zopt));
        } else {
            CHECK(accel_ddp_create(coll, &rd, &red));
            CHECK(accel_ddp_add(red, grads, 4));
            CHECK(accel_ddp_finalize(red));
        }
    }

    /* 4. loss scaler (enabled by the fp16 policy) */
    memset(&scd, 0, sizeof scd);
    scd.init_scale = o.init_scale;
    scd.growth_interval = o.growth_interval;
    scd.local_found_inf = o.zero < 2; /* all-reduced gradients: every rank sees the same Inf (ZeRO-2/3: a shard) */
    CHECK(accel_amp_scaler_init(&acc, &scaler, &scd));
    have_scaler = 1;

    memset(&pg, 0, sizeof pg);
    pg.num_processes = acc.num_processes;
    /* 5. checkpoints: save_state / load_state */
    memset(&cc, 0, sizeof cc);
    cc.acc = &acc;
    cc.pg = &pg;
    cc.train = &train;
    cc.scaler = &scaler;
    if (o.ckpt_dir) CHECK(setup_checkpoints(&acc, &o, &cc, &ck, o.zero == 3 ? NULL : params, o.zero == 3 ? NULL : moms,
                                            &prof));
    if (o.ckpt_dir && o.zero == 3) CHECK(setup_checkpoints_z3(ck, &z3fs, &z3ss));
    /* preemptible: SIGTERM / SIGUSR1 now set a stop flag the ranks agree on after a step (accel_should_stop below) */
    if (o.ckpt_dir) CHECK(accel_preemption_install(&acc, ACCEL_PREEMPT_SIGNALS));
    if (o.resume) {
        CHECK(accel_ckpt_load_state(ck, NULL)); /* the newest complete checkpoint under <dir>/checkpoints */
        if (!cc.have_loaded) {
            fprintf(stderr, "train_digits: the checkpoint has no trainer.bin\n");
            goto fail;
        }
        pg = cc.loaded.pg;
        CHECK(resume_position(&acc, &pg, &train, cc.loaded.shard, sched_total));
        accel_print(&acc, "resumed at step %lld (epoch %lld, %lld samples into it)\n", (long long)pg.step,
                    (long long)pg.epoch, (long long)pg.samples_in_epoch);
    }
    if (model_dtype != ACCEL_F32) {
        CHECK(accel_amp_master_to_model(&acc, master, model16, model_dtype, shape.count, NULL));
        CHECK(accel_amp_convert(&acc, model16, model_dtype, model, ACCEL_F32, shape.count, NULL));
    }
    if (o.loss_file && acc.is_main_process) {
        loss_f = fopen(o.loss_file, o.resume ? "a" : "w");
        if (!loss_f) { fprintf(stderr, "train_digits: cannot write %s\n", o.loss_file); goto fail; }
    }
    if (o.log_dir) CHECK(start_tracking(&acc, &o));
    accel_print(&acc, "train_digits: %d process(es), batch %d x accum %d = global batch %lld, precision %s, %lld steps\n",
                acc.num_processes, o.batch, o.accum, (long long)global_batch, accel_precision_name(acc.mixed_precision),
                (long long)total_steps);

    /* the profiler: disabled without --profile (then every begin/end below is one flag test) */
    memset(&pfd, 0, sizeof pfd);
    pfd.disabled = !o.profile_dir;
    pfd.trace_dir = o.profile_dir;
    CHECK(accel_prof_create(&acc, &pfd, &prof));
    CHECK(accel_prof_range_id(prof, "forward_backward", &fwd_bwd));
#define PROF_BEGIN(id) CHECK(accel_prof_begin(prof, (id)))
#define PROF_END(id) CHECK(accel_prof_end(prof, (id)))

    /* 6. the loop */
    t_start = now_s();
    while (pg.step < total_steps) {
        PROF_BEGIN(ACCEL_PROF_DATA);
        CHECK(accel_data_shard_next(&train, idx, &count));
        PROF_END(ACCEL_PROF_DATA);
        if (count == 0) { /* end of epoch: the shard advanced its epoch */
            pg.epoch++;
            pg.samples_in_epoch = 0;
            continue;
        }
        accel_accumulate_begin(&acc); /* sync_gradients for this micro-batch (end_of_dataloader set by next()) */
        PROF_BEGIN(fwd_bwd);
        if (z3.f) { /* gathers, releases and reduce-scatters inside (accel_should_reduce: hold or reduce) */
            double tot = 0.0;
            CHECK(z3_forward_backward(&acc, &z3, &shape, data.x, data.y, idx, (int)count,
                                      accel_amp_loss_scale(&scaler) / accel_loss_divisor(&acc), rnd, &tot));
            loss_local += tot / (double)count / accel_loss_divisor(&acc);
        } else {
            loss_local += mlp_forward_backward(&shape, model, grad, data.x, data.y, idx, (int)count,
                                               accel_amp_loss_scale(&scaler) / accel_loss_divisor(&acc), &work, rnd) /
                          (double)count / accel_loss_divisor(&acc);
        }
        PROF_END(fwd_bwd);
        if (o.signal_at && acc.sync_gradients && pg.step + 1 == o.signal_at && acc.process_index == last_rank)
            raise(SIGUSR1); /* --signal-at: a preemption notice reaching one rank inside step N */
        pg.samples_in_epoch += (int64_t)acc.num_processes * count;
        PROF_BEGIN(ACCEL_PROF_GRAD_SYNC);
        if (accel_should_reduce(&acc) && !z3.f) CHECK(zero ? reduce_gradients_zero(zero) : reduce_gradients(red));
        PROF_END(ACCEL_PROF_GRAD_SYNC);
        if (acc.sync_gradients) {
            int found_inf = 0, nsched;
            double norm = 0.0, lossv = loss_local;
            float lr = lr_at(o.lr, pg.scheduler_steps, sched_total, o.warmup), scale = accel_amp_loss_scale(&scaler);
            PROF_BEGIN(ACCEL_PROF_OPTIMIZER);
            CHECK(accel_amp_unscale_and_check(&scaler, o.zero == 3 ? vg : o.zero == 2 ? zgrads : grads, 4, &found_inf));
            if (!found_inf && o.clip > 0) /* ZeRO-2/3: the norm of the shards, reduced over the ranks */
                CHECK(accel_amp_clip_grad_norm(&acc, o.zero == 3 ? vn : o.zero == 2 ? zgrads : grads, 4, o.clip, 2.0,
                                               o.zero >= 2 ? ACCEL_AMP_CLIP_SHARDED : 0, &norm));
            if (!found_inf && z3.f) { /* the shard (and its param_dtype copy, which the next gathers read) */
                CHECK(accel_optim_set_lr(zopt, -1, lr));
                CHECK(accel_optim_step(zopt, NULL));
            } else if (!found_inf && zero) { /* this rank's shard, then every rank's shard to every rank */
                CHECK(accel_optim_set_lr(zopt, -1, lr));
                CHECK(accel_optim_step(zopt, NULL));
                CHECK(accel_zero_gather(zero, params, 4));
                if (model_dtype != ACCEL_F32) {
                    CHECK(accel_amp_master_to_model(&acc, master, model16, model_dtype, shape.count, NULL));
                    CHECK(accel_amp_convert(&acc, model16, model_dtype, model, ACCEL_F32, shape.count, NULL));
                }
            } else if (!found_inf) {
                int started = pg.momentum_started;
                sgd_momentum_step(master, grad, mom, shape.count, lr, o.momentum, o.weight_decay, &started);
                pg.momentum_started = started;
                if (model_dtype != ACCEL_F32) {
                    CHECK(accel_amp_master_to_model(&acc, master, model16, model_dtype, shape.count, NULL));
                    CHECK(accel_amp_convert(&acc, model16, model_dtype, model, ACCEL_F32, shape.count, NULL));
                }
            }
            if (scaler.enabled) CHECK(accel_amp_update(&scaler)); /* backoff / growth */
            accel_optimizer_step_done(&acc, found_inf); /* optimizer_step_was_skipped, optimizer_steps */
            nsched = accel_scheduler_steps(&acc, 0);
            pg.scheduler_steps += nsched;
            if (!found_inf) pg.optimizer_steps++;
            memset(grad, 0, shape.count * sizeof(float)); /* zero_grad */
            if (z3.f) CHECK(accel_zero_fsdp_zero_grad(z3.f));
            PROF_END(ACCEL_PROF_OPTIMIZER);
            PROF_BEGIN(ACCEL_PROF_LOGGING);
            CHECK(accel_coll_all_reduce(coll, &lossv, &lossv, 1, ACCEL_F64, ACCEL_COLL_AVG));
            last_loss = lossv;
            loss_local = 0.0;
            pg.step++;
            samples_done += (double)global_batch;
            if (loss_f)
                fprintf(loss_f, "%lld %.9g %.9g %.9g %d %lld\n", (long long)pg.step, last_loss, lr, scale, found_inf,
                        (long long)pg.scheduler_steps);
            if (o.print_every && (pg.step % o.print_every == 0 || pg.step == total_steps)) {
                double t = now_s(), rate = samples_done / (t - t_start + 1e-12);
                double eta = (double)(total_steps - pg.step) * global_batch / (rate > 0 ? rate : 1);
                char sc[48] = "";
                if (scaler.enabled)
                    snprintf(sc, sizeof sc, "scale %g%s | ", (double)accel_amp_loss_scale(&scaler), found_inf ? " (skipped)" : "");
                accel_print(&acc, "step %5lld/%lld | loss %.4f | lr %.4g | %s%.0f samples/s | ETA %.1fs\n",
                            (long long)pg.step, (long long)total_steps, last_loss, lr, sc, rate, eta);
            }
            CHECK(log_scalars(&acc, &o, pg.step, last_loss, lr, scaler.enabled ? scale : -1.0f, norm));
            PROF_END(ACCEL_PROF_LOGGING);
            /* preemption: every rank learns at this step whether any rank got SIGTERM / SIGUSR1 (one small
               all-reduce); then the step's checkpoint is saved below and the run ends with the requeue code. A
               signal after the last step changes nothing: the run is complete. */
            if (ck && pg.step < total_steps) CHECK(accel_should_stop(&acc, &stop));
            if (o.ckpt_dir && ((o.ckpt_every && pg.step % o.ckpt_every == 0) || pg.step == total_steps || stop)) {
                pg.scheduler_total = sched_total;
                pg.num_processes = acc.num_processes;
                pg.batch = o.batch;
                PROF_BEGIN(ACCEL_PROF_CHECKPOINT);
                CHECK(accel_ckpt_save_state(ck, NULL, NULL, 0));
                PROF_END(ACCEL_PROF_CHECKPOINT);
            }
            CHECK(accel_prof_step(prof)); /* one profiler step per optimizer step */
            if (o.kill_at && pg.step == o.kill_at) {
                if (loss_f) fclose(loss_f);
                loss_f = NULL;
                fflush(stdout);
                if (ck) CHECK(accel_ckpt_wait(ck)); /* an async save: on disk before the crash */
                accel_wait_for_everyone(&acc);
                raise(SIGKILL); /* a crash right after the checkpoint: nothing else is written */
            }
            if (stop) {
                CHECK(accel_ckpt_wait(ck)); /* an async save: on disk before the exit */
                accel_print(&acc, "preempted (signal %d) after step %lld: checkpoint saved; exiting with %d to be "
                            "requeued (then --resume)\n", stop, (long long)pg.step, ACCEL_EXIT_REQUEUE);
                break;
            }
            if (o.throttle_ms) {
                struct timespec ts;
                ts.tv_sec = o.throttle_ms / 1000;
                ts.tv_nsec = (long)(o.throttle_ms % 1000) * 1000000L;
                nanosleep(&ts, NULL); /* cut short by a signal: fine, a test's pacing only */
            }
        } else {
            /* Accelerate's loop calls lr_scheduler.step() on every batch: 0 steps here (adjust_scheduler counts) */
            pg.scheduler_steps += accel_scheduler_steps(&acc, 0);
        }
        accel_accumulate_end(&acc);
    }
    if (stop) { /* preempted: saved; no summary, weights or evaluation (the requeued run gives them) */
        if (g_track_on) CHECK(accel_track_deinit(&g_track));
        rc = ACCEL_EXIT_REQUEUE;
        goto fail;
    }
    if (ck) CHECK(accel_ckpt_wait(ck)); /* the last async save published (or its error) before the summary */
    accel_wait_for_everyone(&acc);
    {
        double secs = now_s() - t_start;
        accel_print(&acc, "train samples/s: %.1f\n", samples_done / (secs > 0 ? secs : 1e-9));
        accel_print(&acc, "final loss: %.6f\n", last_loss);
    }
    if (o.profile_dir) { /* this rank's phase table, the per-rank traces and, on several ranks, the merge */
        if (acc.is_main_process) CHECK(accel_prof_print_table(prof, stdout));
        CHECK(accel_prof_write_trace(prof));
        if (acc.num_processes > 1) CHECK(accel_prof_merge_trace(prof, NULL));
    }
    if (z3.f) { /* the whole weights on every rank for the dump and the evaluation (FULL_STATE_DICT's export) */
        CHECK(accel_zero_fsdp_export(z3.f, params, 4));
        if (model_dtype != ACCEL_F32) {
            CHECK(accel_amp_master_to_model(&acc, master, model16, model_dtype, shape.count, NULL));
            CHECK(accel_amp_convert(&acc, model16, model_dtype, model, ACCEL_F32, shape.count, NULL));
        }
    }
    if (o.dump_weights && acc.is_main_process) {
        FILE *f = fopen(o.dump_weights, "wb");
        if (!f || fwrite(master, sizeof(float), shape.count, f) != shape.count) {
            fprintf(stderr, "train_digits: cannot write %s\n", o.dump_weights);
            if (f) fclose(f);
            goto fail;
        }
        fclose(f);
    }

    /* 7. evaluation: each rank predicts its shard of the test set; gather_for_metrics drops the padding */
    {
        double acc_pct = 0.0;
        CHECK(evaluate(&acc, coll, &test, &shape, model, &data, &work, rnd, idx, &acc_pct));
        CHECK(log_scalars(&acc, &o, pg.step, -1.0, -1.0f, -1.0f, acc_pct));
        accel_print(&acc, "test accuracy: %.2f%%\n", acc_pct);
    }
    if (g_track_on) CHECK(accel_track_deinit(&g_track));
    rc = 0;
fail:
    if (loss_f) fclose(loss_f);
    if (have_scaler) accel_amp_scaler_deinit(&scaler);
    accel_ckpt_destroy(ck); /* first: an async write in flight reports its range to the profiler */
    accel_prof_destroy(prof);
    accel_ddp_destroy(red);
    accel_optim_destroy(zopt);
    accel_zero_destroy(zero);
    accel_zero_fsdp_destroy(z3.f);
    accel_host_free(&acc, z3.hpre);
    accel_host_free(&acc, z3.wide);
    accel_coll_destroy(coll);
    if (have_work) mlp_work_free(&work);
    if (model && model != master) accel_host_free(&acc, model);
    accel_host_free(&acc, model16);
    accel_host_free(&acc, master);
    accel_host_free(&acc, grad);
    accel_host_free(&acc, mom);
    accel_host_free(&acc, idx);
    if (have_data) digits_free(&data);
    if (rc && rc != ACCEL_EXIT_REQUEUE && inited && acc.num_processes > 1) {
        /* the other ranks may be waiting in a collective: leave without MPI_Finalize so the launcher ends the job
           (a preempted run instead stopped on every rank at the same step: accel_shutdown as usual) */
        fflush(stdout);
        fflush(stderr);
        exit(rc);
    }
    if (inited) accel_shutdown(&acc);
    return rc;
}
