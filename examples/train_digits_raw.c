/* train_digits_raw.c — the digits MLP trainer of train_digits.c written WITHOUT accel: the same model math
   (digits_mlp.h), fp32, SGD with momentum, gradient accumulation, global-norm clipping and data parallelism with
   hand-written MPI calls. It exists as the reference of bench/trainer (accel's per-step overhead) and as the
   "before" picture of the five changes listed at the top of accel.h.

     mpirun -np 2 ./train_digits_raw --data data/digits.csv --steps 300 --batch 16
*/
#include "digits_mlp.h"
#include <mpi.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* L2 norm of a vector in double. */
static double vec_norm(const float *g, size_t n) {
    double s = 0.0;
    size_t i;
    for (i = 0; i < n; ++i) s += (double)g[i] * g[i];
    return sqrt(s);
}

/* Fisher-Yates permutation of [0, n) from (seed, epoch): the same on every rank. */
static void shuffle(int64_t *perm, int n, uint64_t seed, int epoch, int do_shuffle) {
    uint64_t st = seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)(epoch + 1));
    int i;
    for (i = 0; i < n; ++i) perm[i] = i;
    if (!do_shuffle) return;
    for (i = n - 1; i > 0; --i) {
        int j = (int)(mlp__splitmix(&st) % (uint64_t)(i + 1));
        int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

int main(int argc, char **argv) {
    const char *data_path = "data/digits.csv";
    int steps = 300, batch = 16, accum = 1, hidden = 64, print_every = 0, shuffle_on = 1, i;
    float lr = 0.05f, momentum = 0.9f, clip = 1.0f, warmup = 0.05f;
    uint64_t seed = 42;
    int rank, world, ntrain = DIGITS_TRAIN, ntest;
    digits_data d;
    mlp_shape s;
    mlp_work w;
    float *params, *grad, *mbuf;
    int64_t *perm, *test_idx;
    int started = 0, step = 0, epoch = 0, cursor = 0, nb_per_rank, micro = 0;
    double t0, t_train, loss_acc = 0.0, last_loss = 0.0;

    for (i = 1; i < argc; ++i) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(a, "--data")) { data_path = v; ++i; }
        else if (!strcmp(a, "--steps")) { steps = atoi(v); ++i; }
        else if (!strcmp(a, "--batch")) { batch = atoi(v); ++i; }
        else if (!strcmp(a, "--accum")) { accum = atoi(v); ++i; }
        else if (!strcmp(a, "--hidden")) { hidden = atoi(v); ++i; }
        else if (!strcmp(a, "--lr")) { lr = (float)atof(v); ++i; }
        else if (!strcmp(a, "--clip")) { clip = (float)atof(v); ++i; }
        else if (!strcmp(a, "--seed")) { seed = strtoull(v, NULL, 10); ++i; }
        else if (!strcmp(a, "--print-every")) { print_every = atoi(v); ++i; }
        else if (!strcmp(a, "--no-shuffle")) { shuffle_on = 0; }
        else { fprintf(stderr, "train_digits_raw: unknown option %s\n", a); return 2; }
    }
    if (steps < 1 || batch < 1 || accum < 1 || hidden < 1) { fprintf(stderr, "train_digits_raw: bad sizes\n"); return 2; }
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (digits_load(data_path, &d)) MPI_Abort(MPI_COMM_WORLD, 1);
    ntest = d.n - ntrain;
    s = mlp_make_shape(hidden);
    params = (float *)malloc(s.count * sizeof(float));
    grad = (float *)calloc(s.count, sizeof(float));
    mbuf = (float *)calloc(s.count, sizeof(float));
    perm = (int64_t *)malloc((size_t)ntrain * sizeof(int64_t));
    test_idx = (int64_t *)malloc((size_t)ntest * sizeof(int64_t));
    if (!params || !grad || !mbuf || !perm || !test_idx || mlp_work_init(&w, hidden)) MPI_Abort(MPI_COMM_WORLD, 1);
    mlp_init(&s, params, seed);
    nb_per_rank = ntrain / (batch * world); /* drop_last: full rounds only */
    if (nb_per_rank < 1) { fprintf(stderr, "train_digits_raw: batch too large\n"); MPI_Abort(MPI_COMM_WORLD, 1); }
    shuffle(perm, ntrain, seed, epoch, shuffle_on);

    t0 = now_s();
    while (step < steps) {
        /* this rank's batch `cursor` of the epoch is global batch cursor·P + rank (round-robin, like accel_data) */
        const int64_t *idx = perm + ((size_t)cursor * world + rank) * batch;
        int last = cursor == nb_per_rank - 1, sync;
        ++micro;
        sync = last || micro % accum == 0;
        loss_acc += mlp_forward_backward(&s, params, grad, d.x, d.y, idx, batch, 1.0f / (float)accum, &w, NULL) /
                    (double)batch / accum;
        if (sync) {
            double norm, l = loss_acc;
            float cur_lr = lr_at(lr, (int64_t)step * world, (int64_t)steps * world, warmup);
            MPI_Allreduce(MPI_IN_PLACE, grad, (int)s.count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            for (i = 0; i < (int)s.count; ++i) grad[i] /= (float)world;
            MPI_Allreduce(MPI_IN_PLACE, &l, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
            last_loss = l / world;
            norm = vec_norm(grad, s.count);
            if (clip > 0) { /* torch's clip_grad_norm_: always multiplies by the clamped coefficient */
                double coef = clip / (norm + 1e-6);
                float c = (float)(coef < 1.0 ? coef : 1.0);
                for (i = 0; i < (int)s.count; ++i) grad[i] *= c;
            }
            sgd_momentum_step(params, grad, mbuf, s.count, cur_lr, momentum, 0.0f, &started);
            memset(grad, 0, s.count * sizeof(float));
            loss_acc = 0.0;
            micro = 0;
            ++step;
            if (rank == 0 && print_every > 0 && step % print_every == 0)
                printf("step %d/%d | loss %.4f | lr %.4g\n", step, steps, last_loss, cur_lr);
        }
        if (++cursor == nb_per_rank) { cursor = 0; ++epoch; shuffle(perm, ntrain, seed, epoch, shuffle_on); micro = 0; }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    t_train = now_s() - t0;
    {
        int n_local = 0, correct, totals[2];
        for (i = rank; i < ntest; i += world) test_idx[n_local++] = ntrain + i;
        correct = mlp_correct(&s, params, d.x, d.y, test_idx, n_local, &w, NULL, NULL);
        totals[0] = correct;
        totals[1] = n_local;
        MPI_Allreduce(MPI_IN_PLACE, totals, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        if (rank == 0) {
            printf("train samples/s: %.1f\n", (double)steps * batch * accum * world / t_train);
            printf("final loss: %.6f\n", last_loss);
            printf("test accuracy: %.2f%%\n", 100.0 * totals[0] / totals[1]);
        }
    }
    mlp_work_free(&w);
    free(params); free(grad); free(mbuf); free(perm); free(test_idx);
    digits_free(&d);
    MPI_Finalize();
    return 0;
}
