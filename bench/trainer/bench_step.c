/* bench_step.c — accel's per-step overhead in the digits trainer, measured step by step in ONE process (per rank):
   the accel training step of examples/train_digits.c and the same step written with hand-written MPI calls run
   alternately (the order flips every iteration), each on its own copy of the model, so both see the same machine
   load at the same moment. Same math (digits_mlp.h), fp32, SGD with momentum, clipping, gradient accumulation.

     accel step: accel_data shard (shuffled, sharded) → accumulate_begin → forward/backward → reducer (grad_ready,
                 wait) → unscale_and_check (a no-op without fp16) → clip_grad_norm → SGD → optimizer_step_done →
                 scheduler_steps → all_reduce of the loss (accel_coll) → accumulate_end
     raw step:   index array → forward/backward → MPI_Allreduce + divide → global norm + scale → SGD → MPI_Allreduce
                 of the loss

   usage: mpirun -np P bench_step DATA_CSV [STEPS] — prints one JSON line (rank 0): samples/s both ways. */
#include "accel.h"
#include "accel_amp.h"
#include "accel_collectives.h"
#include "accel_ddp.h"
#include "accel_data.h"
#include "digits_mlp.h"
#include <mpi.h>

typedef struct model {
    float *p, *g, *m;
    int started;
} model;

static int model_init(model *md, const mlp_shape *s) {
    md->p = (float *)malloc(s->count * sizeof(float));
    md->g = (float *)calloc(s->count, sizeof(float));
    md->m = (float *)calloc(s->count, sizeof(float));
    md->started = 0;
    if (!md->p || !md->g || !md->m) return 1;
    mlp_init(s, md->p, 1);
    return 0;
}

int main(int argc, char **argv) {
    const int batch = 15, accum = 2, hidden = 64; /* 1500 = 100 batches of 15: even windows at P = 1 and 2 */
    const float lr = 0.05f, clip = 1.0f;
    int steps = argc > 2 ? atoi(argv[2]) : 600, micro, k, done = 0, rc = 1;
    accel acc;
    accel_desc desc;
    accel_data_shard sh;
    accel_data_shard_desc sd;
    accel_coll *coll = NULL;
    accel_ddp *red = NULL;
    accel_amp_scaler sc;
    accel_amp_scaler_desc scd;
    accel_tensor grads[4];
    digits_data data;
    mlp_shape s;
    mlp_work w;
    model ma, mr;
    int64_t *idx, *perm, count, raw_cursor = 0, raw_epoch = 0, raw_nb;
    double t_accel = 0.0, t_raw = 0.0, loss_a = 0.0, loss_r = 0.0;
    int mpi_was_up = 0;
    if (argc < 2) { fprintf(stderr, "usage: bench_step DATA_CSV [STEPS]\n"); return 2; }
    MPI_Initialized(&mpi_was_up);
    if (!mpi_was_up) MPI_Init(&argc, &argv); /* the raw step needs MPI even without a launcher; accel then uses it */
    memset(&desc, 0, sizeof desc);
    desc.cpu = 1;
    desc.gradient_accumulation_steps = accum;
    if (accel_init(&acc, &desc) != ACCEL_OK) { fprintf(stderr, "%s\n", accel_last_error(&acc)); return 1; }
    if (digits_load(argv[1], &data)) goto out;
    s = mlp_make_shape(hidden);
    if (model_init(&ma, &s) || model_init(&mr, &s) || mlp_work_init(&w, hidden)) goto out;
    idx = (int64_t *)malloc(batch * sizeof(int64_t));
    perm = (int64_t *)malloc(DIGITS_TRAIN * sizeof(int64_t));
    if (!idx || !perm) goto out;

    memset(&sd, 0, sizeof sd);
    sd.dataset_len = DIGITS_TRAIN;
    sd.batch_size = batch;
    sd.drop_last = 1;
    sd.shuffle = 1;
    sd.seed = 1;
    if (accel_data_shard_init(&acc, &sh, &sd) != ACCEL_OK) goto out;
    {
        accel_coll_desc cd;
        size_t offs[5];
        memset(&cd, 0, sizeof cd);
        cd.no_watchdog = 1; /* blocking MPI, like the raw step */
        if (accel_coll_create(&acc, &cd, &coll) != ACCEL_OK || accel_ddp_create(coll, NULL, &red) != ACCEL_OK)
            goto out;
        offs[0] = s.off_w1; offs[1] = s.off_b1; offs[2] = s.off_w2; offs[3] = s.off_b2; offs[4] = s.count;
        for (k = 0; k < 4; ++k) {
            memset(&grads[k], 0, sizeof grads[k]);
            grads[k].name = k == 0 ? "w1" : k == 1 ? "b1" : k == 2 ? "w2" : "b2";
            grads[k].ptr = ma.g + offs[k];
            grads[k].dtype = ACCEL_F32;
            grads[k].ndim = 1;
            grads[k].shape[0] = (int64_t)(offs[k + 1] - offs[k]);
        }
        if (accel_ddp_add(red, grads, 4) != ACCEL_OK) goto out;
        if (accel_ddp_finalize(red) != ACCEL_OK) goto out;
    }
    memset(&scd, 0, sizeof scd);
    if (accel_amp_scaler_init(&acc, &sc, &scd) != ACCEL_OK) goto out; /* disabled in fp32, as in the trainer */
    raw_nb = DIGITS_TRAIN / ((int64_t)batch * acc.num_processes);
    for (k = 0; k < DIGITS_TRAIN; ++k) perm[k] = k;

    for (done = 0; done < steps; ++done) {
        int order;
        for (order = 0; order < 2; ++order) {
            int accel_turn = (order == 0) == (done % 2 == 0);
            double t0;
            MPI_Barrier(MPI_COMM_WORLD); /* both variants start together on every rank */
            t0 = MPI_Wtime();
            if (accel_turn) {
                for (micro = 0; micro < accum; ++micro) {
                    do {
                        if (accel_data_shard_next(&sh, idx, &count) != ACCEL_OK) goto out;
                    } while (count == 0);
                    accel_accumulate_begin(&acc);
                    loss_a += mlp_forward_backward(&s, ma.p, ma.g, data.x, data.y, idx, (int)count,
                                                   accel_amp_loss_scale(&sc) / accel_loss_divisor(&acc), &w, NULL) /
                              (double)count / accel_loss_divisor(&acc);
                    if (accel_should_reduce(&acc)) {
                        for (k = 3; k >= 0; --k)
                            if (accel_ddp_grad_ready(red, k) != ACCEL_OK) goto out;
                        if (accel_ddp_wait(red) != ACCEL_OK) goto out;
                    }
                    if (acc.sync_gradients) {
                        int inf = 0;
                        double norm;
                        if (accel_amp_unscale_and_check(&sc, grads, 4, &inf) != ACCEL_OK) goto out;
                        if (accel_amp_clip_grad_norm(&acc, grads, 4, clip, 2.0, 0, &norm) != ACCEL_OK) goto out;
                        sgd_momentum_step(ma.p, ma.g, ma.m, s.count, lr, 0.9f, 0.0f, &ma.started);
                        accel_optimizer_step_done(&acc, inf);
                        (void)accel_scheduler_steps(&acc, 0);
                        memset(ma.g, 0, s.count * sizeof(float));
                        if (accel_coll_all_reduce(coll, &loss_a, &loss_a, 1, ACCEL_F64, ACCEL_COLL_AVG) != ACCEL_OK)
                            goto out;
                        loss_a = 0.0;
                    }
                    accel_accumulate_end(&acc);
                }
                t_accel += MPI_Wtime() - t0;
            } else {
                double norm, l;
                for (micro = 0; micro < accum; ++micro) {
                    const int64_t *bi = perm + (raw_cursor * acc.num_processes + acc.process_index) * batch;
                    loss_r += mlp_forward_backward(&s, mr.p, mr.g, data.x, data.y, bi, batch, 1.0f / accum, &w, NULL) /
                              (double)batch / accum;
                    if (++raw_cursor == raw_nb) { /* next epoch: a fresh Fisher-Yates shuffle */
                        uint64_t st = 0x9E3779B97F4A7C15ull * (uint64_t)(++raw_epoch);
                        raw_cursor = 0;
                        for (k = DIGITS_TRAIN - 1; k > 0; --k) {
                            int j = (int)(mlp__splitmix(&st) % (uint64_t)(k + 1));
                            int64_t t = perm[k];
                            perm[k] = perm[j];
                            perm[j] = t;
                        }
                    }
                }
                MPI_Allreduce(MPI_IN_PLACE, mr.g, (int)s.count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
                for (k = 0; k < (int)s.count; ++k) mr.g[k] /= (float)acc.num_processes;
                norm = 0.0;
                for (k = 0; k < (int)s.count; ++k) norm += (double)mr.g[k] * mr.g[k];
                norm = sqrt(norm);
                {
                    double coef = clip / (norm + 1e-6);
                    float c = (float)(coef < 1.0 ? coef : 1.0);
                    for (k = 0; k < (int)s.count; ++k) mr.g[k] *= c;
                }
                sgd_momentum_step(mr.p, mr.g, mr.m, s.count, lr, 0.9f, 0.0f, &mr.started);
                memset(mr.g, 0, s.count * sizeof(float));
                l = loss_r;
                MPI_Allreduce(MPI_IN_PLACE, &l, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
                loss_r = 0.0;
                t_raw += MPI_Wtime() - t0;
            }
        }
    }
    {
        double t[2] = {t_accel, t_raw};
        double samples = (double)steps * batch * accum * acc.num_processes;
        MPI_Allreduce(MPI_IN_PLACE, t, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD); /* the slowest rank sets the pace */
        if (acc.is_main_process)
            printf("{\"bench\": \"train_digits_step_interleaved\", \"params\": {\"processes\": %d, \"hidden\": %d, "
                   "\"batch\": %d, \"accum\": %d, \"steps\": %d, \"precision\": \"no\"}, \"unit\": \"samples/s\", "
                   "\"accel\": %.1f, \"reference\": %.1f, \"reference_name\": \"same step with hand-written MPI, no "
                   "accel (alternating steps, same process)\", \"ratio\": %.4f, \"goal\": 0.98}\n",
                   acc.num_processes, hidden, batch, accum, steps, samples / t[0], samples / t[1], t[1] / t[0]);
    }
    rc = 0;
out:
    if (rc) fprintf(stderr, "bench_step: %s\n", accel_last_error(&acc));
    accel_ddp_destroy(red);
    accel_coll_destroy(coll);
    accel_shutdown(&acc);
    if (!mpi_was_up) MPI_Finalize();
    return rc;
}
