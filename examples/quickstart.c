/* quickstart.c — the README's training loop, complete and compiled: a linear model trained data-parallel with
   every wave-2 piece a trainer needs (sharded data, gradient accumulation, the DDP reducer, the loss scaler, fused
   AdamW with a cosine schedule, save_state/load_state). It resumes where a checkpoint left it: kill it at any step,
   start it again with the same arguments, and it finishes with the same weights, bit for bit, as a run that was
   never interrupted (tests/mpi/trainer's quickstart-resume test does exactly that on 1 and 2 processes).

     mpirun -np 2 build/examples/quickstart --dir runs/quick                 # trains; checkpoints every 10 steps
     mpirun -np 2 build/examples/quickstart --dir runs/quick                 # again: resumes from the newest one

   Options: --dir DIR (project_dir; checkpoints under DIR/checkpoints), --epochs E (4), --every K (checkpoint every
   K optimizer steps, 10), --accum A (2), --fp16 (mixed_precision fp16: the scaler scales), --kill-at S (SIGKILL
   this process after optimizer step S and its checkpoint, if any, in the first attempt only — a run restarted by
   `accel launch --max-restarts`, ACCEL_RESTART_COUNT > 0, goes on: for the resume tests), --dump FILE (the final
   weights as raw float32, main process), --log FILE (one line per optimizer step, main process). */
#include "accel.h" /* the implementation comes from the library (or vendor: #define ACCEL_IMPLEMENTATION first) */
#include "accel_amp.h"
#include "accel_ckpt.h"
#include "accel_collectives.h"
#include "accel_ddp.h"
#include "accel_data.h"
#include "accel_optim.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define D 16       /* features */
#define N 600      /* samples */
#define B 8        /* per-process batch */

typedef struct model {
    float w[D + 1], g[D + 1]; /* weights + bias, and their gradients */
    float x[N][D], y[N];      /* the dataset: y = x . w_true + 0.5 + noise, the same on every process */
} model;

/* A fixed pseudo-random dataset (xorshift; no libc rand so every platform gets the same numbers). */
static void make_data(model *m) {
    uint32_t s = 2463534242u;
    int i, j;
    for (i = 0; i < N; ++i) {
        double t = 0.5;
        for (j = 0; j < D; ++j) {
            s ^= s << 13; s ^= s >> 17; s ^= s << 5;
            m->x[i][j] = (float)((double)s / 4294967296.0 - 0.5);
            t += m->x[i][j] * (0.25 * (j + 1) * (j % 2 ? -1 : 1));
        }
        s ^= s << 13; s ^= s >> 17; s ^= s << 5;
        m->y[i] = (float)(t + 0.01 * ((double)s / 4294967296.0 - 0.5));
    }
    memset(m->w, 0, sizeof m->w);
    memset(m->g, 0, sizeof m->g);
}

/* Mean squared error over the micro-batch; the gradient (times `mult` = loss scale / accumulation steps, as
   accelerator.backward scales the loss) is added to m->g. Returns the unscaled loss. */
static float forward_backward(model *m, const int64_t *idx, int64_t n, float mult) {
    double loss = 0.0;
    int64_t k;
    int j;
    for (k = 0; k < n; ++k) {
        const float *x = m->x[idx[k]];
        float p = m->w[D], e;
        for (j = 0; j < D; ++j) p += m->w[j] * x[j];
        e = p - m->y[idx[k]];
        loss += (double)e * e;
        for (j = 0; j < D; ++j) m->g[j] += mult * 2.0f * e * x[j] / (float)n;
        m->g[D] += mult * 2.0f * e / (float)n;
    }
    return (float)(loss / (double)n);
}

static void zero_grad(model *m) { memset(m->g, 0, sizeof m->g); }

static int die(accel *acc) {
    fprintf(stderr, "quickstart: %s\n", accel_last_error(acc));
    return 1;
}
#define CHECK(call) do { if ((call) != ACCEL_OK) return die(&acc); } while (0)

static int run(int argc, char **argv, model *m) {
    const char *dir = "runs/quickstart", *dump = NULL, *logf = NULL;
    int epochs = 4, every = 10, accum = 2, fp16 = 0, kill_at = 0, a;
    accel acc;
    accel_desc desc = {0};
    accel_data_shard sh;
    accel_data_shard_desc dd = {0};
    accel_coll *coll = NULL;
    accel_ddp *red = NULL;
    accel_amp_scaler sc;
    accel_amp_scaler_desc scd = {0};
    accel_optim *opt = NULL;
    accel_optim_desc od = {0};
    const accel_tensor *mom;
    int nmom;
    accel_ckpt *ck = NULL;
    accel_ckpt_desc cd = {0};
    accel_tensor params[1], grads[1];
    accel_optim_schedule sch = {ACCEL_OPTIM_SCHEDULE_COSINE, 5, 0, 0.1, 0.0};
    accel_result lr;
    FILE *log = NULL;
    float loss = 0.0f;

    for (a = 1; a < argc; ++a) {
        const char *v = a + 1 < argc ? argv[a + 1] : NULL;
        if (!strcmp(argv[a], "--fp16")) { fp16 = 1; continue; }
        if (!v) { fprintf(stderr, "quickstart: %s needs a value (see the top of quickstart.c)\n", argv[a]); return 2; }
        if (!strcmp(argv[a], "--dir")) dir = v;
        else if (!strcmp(argv[a], "--epochs")) epochs = atoi(v);
        else if (!strcmp(argv[a], "--every")) every = atoi(v);
        else if (!strcmp(argv[a], "--accum")) accum = atoi(v);
        else if (!strcmp(argv[a], "--kill-at")) kill_at = atoi(v);
        else if (!strcmp(argv[a], "--dump")) dump = v;
        else if (!strcmp(argv[a], "--log")) logf = v;
        else { fprintf(stderr, "quickstart: unknown option %s\n", argv[a]); return 2; }
        ++a;
    }
    if (epochs < 1 || every < 1 || accum < 1) { fprintf(stderr, "quickstart: bad --epochs/--every/--accum\n"); return 2; }
    if (getenv("ACCEL_RESTART_COUNT") && atoi(getenv("ACCEL_RESTART_COUNT")) > 0) kill_at = 0; /* restarted: go on */
    make_data(m);

    desc.gradient_accumulation_steps = accum;
    desc.mixed_precision = fp16 ? ACCEL_PRECISION_FP16 : ACCEL_PRECISION_DEFAULT; /* default: the launcher's */
    desc.project_dir = dir;
    if (accel_init(&acc, &desc) != ACCEL_OK) { die(&acc); accel_shutdown(&acc); return 1; }

    params[0].name = "linear.weight"; params[0].ptr = m->w; params[0].dtype = ACCEL_F32;
    params[0].ndim = 1; params[0].shape[0] = D + 1;
    grads[0] = params[0];
    grads[0].name = "linear.weight.grad"; grads[0].ptr = m->g;

    /* 1-3: shard the data, reduce gradients, scale the loss, step with AdamW, checkpoint everything */
    dd.dataset_len = N; dd.batch_size = B; dd.shuffle = 1; dd.seed = 42;
    CHECK(accel_data_shard_init(&acc, &sh, &dd));          /* collective: ranks must agree on the config */
    CHECK(accel_coll_create(&acc, NULL, &coll));
    CHECK(accel_ddp_create(coll, NULL, &red));
    CHECK(accel_ddp_add(red, grads, 1));
    scd.growth_interval = 7;                                /* let the scale move, so its state matters */
    CHECK(accel_amp_scaler_init(&acc, &sc, &scd));          /* scales only in fp16 */
    od.algorithm = ACCEL_OPTIM_ADAMW; od.lr = 0.2; od.weight_decay = 0.01;
    od.params = params; od.grads = grads; od.nparams = 1;
    CHECK(accel_optim_create(&acc, &od, &opt));
    sch.total_steps = (int64_t)epochs * (accel_data_shard_len(&sh) / accum) * acc.num_processes;
    cd.automatic_checkpoint_naming = 1; cd.total_limit = 2;
    CHECK(accel_ckpt_create(&acc, &cd, &ck));
    CHECK(accel_ckpt_register_model(ck, params, 1));
    CHECK(accel_optim_state_tensors(opt, &mom, &nmom));
    CHECK(accel_ckpt_register_optimizer(ck, mom, nmom));
    CHECK(accel_ckpt_register(ck, "optim_state", accel_optim_state_save, accel_optim_state_load, opt));
    CHECK(accel_ckpt_register(ck, "sampler", accel_data_shard_state_save, accel_data_shard_state_load, &sh));
    CHECK(accel_ckpt_register(ck, "scaler", accel_amp_scaler_state_save, accel_amp_scaler_state_load, &sc));
    lr = accel_ckpt_load_state(ck, NULL);                   /* the newest complete checkpoint, if any */
    if (lr != ACCEL_OK && lr != ACCEL_ERR_NOT_FOUND) return die(&acc);
    if (lr == ACCEL_OK)
        accel_print(&acc, "resumed at optimizer step %lld (epoch %lld)\n", (long long)acc.optimizer_steps,
                    (long long)accel_data_shard_epoch(&sh));
    if (logf && acc.is_main_process && !(log = fopen(logf, lr == ACCEL_OK ? "a" : "w"))) {
        fprintf(stderr, "quickstart: cannot open %s\n", logf);
        return 1;
    }

    /* README:begin — the resume-safe loop */
    while (accel_data_shard_epoch(&sh) < epochs) {        /* the shard owns the epoch: never count it yourself */
        int64_t idx[B], n;
        while (accel_data_shard_next(&sh, idx, &n) == ACCEL_OK && n > 0) {    /* n == 0: the epoch is over */
            accel_accumulate_begin(&acc);                                     /* sets acc.sync_gradients */
            loss = forward_backward(m, idx, n, accel_amp_loss_scale(&sc) / accel_loss_divisor(&acc));
            if (accel_should_reduce(&acc)) CHECK(accel_ddp_wait(red));    /* DDP all-reduce (average) */
            if (acc.sync_gradients) {
                int found_inf = 0;
                CHECK(accel_amp_unscale_and_check(&sc, grads, 1, &found_inf));   /* every rank agrees */
                if (!found_inf) {
                    CHECK(accel_optim_apply_schedule(opt, &sch, acc.scheduler_steps));
                    CHECK(accel_optim_step(opt, NULL));
                }
                CHECK(accel_amp_update(&sc));
                accel_optimizer_step_done(&acc, found_inf);
                zero_grad(m);
            }
            accel_scheduler_steps(&acc, 0);                  /* EVERY micro-batch: P per taken step, else 0 */
            accel_accumulate_end(&acc);
            if (acc.sync_gradients && !acc.optimizer_step_was_skipped) {
                if (log) fprintf(log, "%lld %.9g %.9g\n", (long long)acc.optimizer_steps, loss, accel_optim_lr(opt, 0));
                if (acc.optimizer_steps % every == 0) CHECK(accel_ckpt_save_state(ck, NULL, NULL, 0));
                if (acc.optimizer_steps == kill_at) { if (log) fflush(log); raise(SIGKILL); }
            }
        }
    }
    /* README:end */

    accel_print(&acc, "done: %lld optimizer steps, last loss %.6f\n", (long long)acc.optimizer_steps, loss);
    if (log) fclose(log);
    if (dump && acc.is_main_process) {
        FILE *f = fopen(dump, "wb");
        if (!f || fwrite(m->w, sizeof m->w, 1, f) != 1) { fprintf(stderr, "quickstart: cannot write %s\n", dump); return 1; }
        fclose(f);
    }
    accel_ckpt_destroy(ck);
    accel_optim_destroy(opt);
    accel_ddp_destroy(red);
    accel_coll_destroy(coll);
    accel_data_shard_deinit(&sh);
    accel_shutdown(&acc);
    return 0;
}

int main(int argc, char **argv) {
    static model m; /* 40 KB: not on the stack */
    return run(argc, argv, &m);
}
