#define _DEFAULT_SOURCE 1
/* Collectives benchmark (run under mpirun): JSON lines, one per measurement, every ratio from numbers of this run.
   1. all_reduce (F32, sum) through accel vs raw MPI_Allreduce on the same buffers, 1 KiB .. ACCEL_BENCH_MAX_BYTES
      (default 256 MiB): busbw (nccl-tests: algbw * 2(n-1)/n) and algbw; accel with its watchdog (MPI_Iallreduce +
      polling, the default) and without (plain MPI_Allreduce inside accel); and in place, accel (watchdog) vs
      MPI_Allreduce(MPI_IN_PLACE) — out of place MPI copies the send buffer first and accel's 2-rank ring does not,
      so the in-place lines are the like-for-like comparison of the algorithms.
   2. gradient sync of GPT-2 small's 148 fp32 tensors (124,439,808 parameters): the bucketed reducer (and the flat
      single all-reduce) vs one accel all-reduce per tensor (for information: no goal; bucketing is for overlap, 4).
   3. with 2 ranks and /usr/bin/python3 + torch: torch.distributed (gloo, torch's own spawn on 2 processes) all_reduce
      on the same sizes and DDP on the GPT-2 list, run from rank 0 while the other rank sleeps.
   4. overlap: a backward pass simulated layer by layer with the reducer fed as gradients become ready, against
      max(compute, communication) (goal: <= 1.1x) and all-reduce after backward (see overlap()).
   5. all_gather, gather, reduce, broadcast against MPI_Allgather/Gather/Reduce/Bcast on 2, 3 and 4 ranks (ops()).
   ACCEL_BENCH_ONLY=sweep|overlap|ops (or the argument --ops) runs that part alone; ACCEL_BENCH_OVERLAP_RHO
   (compute / communication, default 0.5, 1 and 2) and ACCEL_BENCH_OVERLAP_REPS (best of, default 3) tune part 4. */
#include "accel.h"
#include "accel_collectives.h"
#include "accel_ddp.h"
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static accel acc;
static int P, R;

static double max_time(double t) {
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return t;
}

/* kind 0: accel (watchdog), 1: raw MPI_Allreduce, 2: accel without watchdog, all from a into b; in place (in b, which
   holds zeros so that repeated sums stay finite): 3 accel (watchdog), 4 MPI_Allreduce(MPI_IN_PLACE) */
static double block(int kind, accel_coll *cw, accel_coll *cn, float *a, float *b, size_t n, int it) {
    double t0;
    int i;
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = accel_now();
    for (i = 0; i < it; ++i) {
        if (kind == 1) MPI_Allreduce(a, b, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        else if (kind == 4) MPI_Allreduce(MPI_IN_PLACE, b, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        else if (accel_coll_all_reduce(kind == 2 ? cn : cw, kind == 3 ? b : a, b, n, ACCEL_F32, ACCEL_COLL_SUM) != ACCEL_OK) {
            fprintf(stderr, "%s\n", accel_last_error(&acc));
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
    return max_time((accel_now() - t0) / it);
}

static void line(const char *bench, const char *params, double accel_v, double ref_v, const char *ref_name, double goal,
                 const char *extra) {
    char g[32];
    if (R != 0) return;
    if (goal > 0) snprintf(g, sizeof g, "%.2f", goal);
    else snprintf(g, sizeof g, "null");
    printf("{\"bench\": \"%s\", \"params\": {%s}, \"unit\": \"GB/s\", \"accel\": %.4f, \"reference\": %.4f, "
           "\"reference_name\": \"%s\", \"ratio\": %.4f, \"goal\": %s%s}\n",
           bench, params, accel_v, ref_v, ref_name, accel_v / ref_v, g, extra ? extra : "");
    fflush(stdout);
}

static void sweep(size_t max_bytes) {
    accel_coll *cw, *cn;
    accel_coll_desc cd;
    size_t S;
    memset(&cd, 0, sizeof cd);
    accel_coll_create(&acc, &cd, &cw);
    cd.no_watchdog = 1;
    accel_coll_create(&acc, &cd, &cn);
    for (S = 1024; S <= max_bytes; S *= 4) {
        size_t n = S / 4, i;
        float *a = (float *)malloc(S), *b = (float *)malloc(S);
        double best[5] = {1e30, 1e30, 1e30, 1e30, 1e30}, bus = 2.0 * (P - 1) / P;
        /* best of 7 blocks from 1 MiB up: with best of 3 blocks of 4 calls, accel without its watchdog (the same
           MPI_Allreduce call as the reference) came out at 0.87-1.03x of it at 16 MiB on a 2-core machine */
        int it = (int)(((size_t)256 << 20) / S / 4), reps = S >= ((size_t)1 << 20) ? 7 : 5, rep, k;
        char params[160], extra[200];
        if (it > 400) it = 400;
        if (it < 6) it = 6;
        for (i = 0; i < n; ++i) a[i] = (float)(i % 13);
        block(0, cw, cn, a, b, n, 1); /* warm up (page faults, connections) */
        block(1, cw, cn, a, b, n, 1);
        for (rep = 0; rep < reps; ++rep)
            for (k = 0; k < 5; ++k) {
                int kind = (k + rep) % 5; /* rotate the order so drift hits everyone */
                double t;
                if (kind >= 3) memset(b, 0, S);
                t = block(kind, cw, cn, a, b, n, it);
                if (t < best[kind]) best[kind] = t;
            }
        snprintf(params, sizeof params, "\"bytes\": %zu, \"ranks\": %d, \"dtype\": \"F32\", \"op\": \"sum\", \"watchdog\": true, \"in_place\": false", S, P);
        snprintf(extra, sizeof extra, ", \"algbw_accel\": %.4f, \"algbw_reference\": %.4f, \"seconds_accel\": %.3e, \"seconds_reference\": %.3e",
                 S / best[0] / 1e9, S / best[1] / 1e9, best[0], best[1]);
        line("all_reduce", params, bus * S / best[0] / 1e9, bus * S / best[1] / 1e9, "MPI_Allreduce", S >= 65536 ? 0.98 : 0, extra);
        snprintf(params, sizeof params, "\"bytes\": %zu, \"ranks\": %d, \"dtype\": \"F32\", \"op\": \"sum\", \"watchdog\": false, \"in_place\": false", S, P);
        snprintf(extra, sizeof extra, ", \"algbw_accel\": %.4f, \"algbw_reference\": %.4f", S / best[2] / 1e9, S / best[1] / 1e9);
        line("all_reduce", params, bus * S / best[2] / 1e9, bus * S / best[1] / 1e9, "MPI_Allreduce", S >= 65536 ? 0.98 : 0, extra);
        /* in place (the reducer's case): against MPI_Allreduce(MPI_IN_PLACE), which copies nothing either */
        snprintf(params, sizeof params, "\"bytes\": %zu, \"ranks\": %d, \"dtype\": \"F32\", \"op\": \"sum\", \"watchdog\": true, \"in_place\": true", S, P);
        snprintf(extra, sizeof extra, ", \"algbw_accel\": %.4f, \"algbw_reference\": %.4f, \"seconds_accel\": %.3e, \"seconds_reference\": %.3e",
                 S / best[3] / 1e9, S / best[4] / 1e9, best[3], best[4]);
        line("all_reduce", params, bus * S / best[3] / 1e9, bus * S / best[4] / 1e9, "MPI_Allreduce(MPI_IN_PLACE)", S >= 65536 ? 0.98 : 0, extra);
        free(a);
        free(b);
    }
    accel_coll_destroy(cw);
    accel_coll_destroy(cn);
}

/* GPT-2 small (124M): wte, wpe, 12 x (ln_1 w b, attn.c_attn w b, attn.c_proj w b, ln_2 w b, mlp.c_fc w b,
   mlp.c_proj w b), ln_f w b = 2 + 12*12 + 2 = 148 tensors */
static int gpt2_sizes(size_t *sz) {
    int n = 0, l;
    const size_t C = 768;
    sz[n++] = 50257 * C;
    sz[n++] = 1024 * C;
    for (l = 0; l < 12; ++l) {
        sz[n++] = C; sz[n++] = C;
        sz[n++] = C * 3 * C; sz[n++] = 3 * C;
        sz[n++] = C * C; sz[n++] = C;
        sz[n++] = C; sz[n++] = C;
        sz[n++] = C * 4 * C; sz[n++] = 4 * C;
        sz[n++] = 4 * C * C; sz[n++] = C;
    }
    sz[n++] = C; sz[n++] = C;
    return n;
}

static accel_tensor f32_vector(float *p, size_t n) {
    accel_tensor t;
    memset(&t, 0, sizeof t);
    t.name = "p";
    t.ptr = p;
    t.dtype = ACCEL_F32;
    t.ndim = 1;
    t.shape[0] = (int64_t)n;
    return t;
}

static void gpt2(void) {
    size_t sz[160], total = 0, off;
    int nt = gpt2_sizes(sz), t, rep, reps = 3;
    float *g[160], *flat;
    accel_tensor gt[160];
    accel_coll *c;
    accel_ddp *red, *redf;
    accel_ddp_desc rd;
    double best_b = 1e30, best_t = 1e30, best_f = 1e30, t0, bytes;
    char params[200], extra[160];
    accel_coll_create(&acc, NULL, &c);
    for (t = 0; t < nt; ++t) {
        size_t i;
        total += sz[t];
        g[t] = (float *)malloc(sz[t] * 4);
        for (i = 0; i < sz[t]; ++i) g[t][i] = 1.0f;
    }
    bytes = (double)total * 4;
    memset(&rd, 0, sizeof rd);
    rd.flat = ACCEL_OFF;
    accel_ddp_create(c, &rd, &red);
    for (t = 0; t < nt; ++t) gt[t] = f32_vector(g[t], sz[t]);
    accel_ddp_add(red, gt, nt);
    accel_ddp_finalize(red);
    /* warm-up both paths once */
    accel_ddp_wait(red);
    for (t = 0; t < nt; ++t) accel_coll_all_reduce(c, g[t], g[t], sz[t], ACCEL_F32, ACCEL_COLL_AVG);
    for (rep = 0; rep < reps; ++rep) {
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = accel_now();
        for (t = nt - 1; t >= 0; --t) accel_ddp_grad_ready(red, t); /* backward order */
        if (accel_ddp_wait(red) != ACCEL_OK) { fprintf(stderr, "%s\n", accel_last_error(&acc)); MPI_Abort(MPI_COMM_WORLD, 1); }
        t0 = max_time(accel_now() - t0);
        if (t0 < best_b) best_b = t0;
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = accel_now();
        for (t = nt - 1; t >= 0; --t) accel_coll_all_reduce(c, g[t], g[t], sz[t], ACCEL_F32, ACCEL_COLL_AVG);
        t0 = max_time(accel_now() - t0);
        if (t0 < best_t) best_t = t0;
    }
    if (R == 0) fprintf(stderr, "gpt2: %d tensors, %zu params, %d buckets\n", nt, total, accel_ddp_num_buckets(red));
    accel_ddp_destroy(red);
    for (t = 0; t < nt; ++t) free(g[t]);
    /* flat: the same tensors as views of one buffer (llm.c layout) */
    flat = (float *)malloc(total * 4);
    {
        size_t i;
        for (i = 0; i < total; ++i) flat[i] = 1.0f;
    }
    accel_ddp_create(c, NULL, &redf);
    for (t = 0, off = 0; t < nt; ++t) { gt[t] = f32_vector(flat + off, sz[t]); off += sz[t]; }
    accel_ddp_add(redf, gt, nt);
    accel_ddp_wait(redf);
    for (rep = 0; rep < reps; ++rep) {
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = accel_now();
        for (t = nt - 1; t >= 0; --t) accel_ddp_grad_ready(redf, t);
        accel_ddp_wait(redf);
        t0 = max_time(accel_now() - t0);
        if (t0 < best_f) best_f = t0;
    }
    accel_ddp_destroy(redf);
    free(flat);
    snprintf(params, sizeof params, "\"model\": \"gpt2-124M\", \"tensors\": %d, \"bytes\": %.0f, \"ranks\": %d, \"bucket_cap_mb\": 25", nt, bytes, P);
    snprintf(extra, sizeof extra, ", \"seconds_accel\": %.4f, \"seconds_reference\": %.4f", best_b, best_t);
    line("grad_sync_bucketed", params, bytes / best_b / 1e9, bytes / best_t / 1e9, "accel all_reduce per tensor", 0, extra);
    snprintf(params, sizeof params, "\"model\": \"gpt2-124M\", \"tensors\": %d, \"bytes\": %.0f, \"ranks\": %d, \"flat\": true", nt, bytes, P);
    snprintf(extra, sizeof extra, ", \"seconds_accel\": %.4f, \"seconds_reference\": %.4f", best_f, best_t);
    line("grad_sync_flat", params, bytes / best_f / 1e9, bytes / best_t / 1e9, "accel all_reduce per tensor", 0, extra);
    accel_coll_destroy(c);
    /* hand the numbers to the torch comparison */
    if (R == 0) {
        FILE *f = fopen("/tmp/accel_bench_coll_gpt2.txt", "w");
        if (f) { fprintf(f, "%.6f %.6f\n", best_b, bytes); fclose(f); }
    }
}

/* ------------------------------------------------------------------------------------------------- 4. overlap */
/* The reducer's point: buckets all-reduce while backward still runs. A backward pass over the GPT-2 list is simulated
   layer by layer, last tensor first, each gradient handed to the reducer (grad_ready) as soon as its layer is done;
   compute is proportional to the layer's bytes and calibrated so that the whole backward takes RHO x the
   communication time. Four steps, each the slowest rank's time, best of reps:
     comm     grad_ready for every tensor, then wait (no compute): the communication time
     compute  the backward alone
     serial   backward, then grad_ready for every tensor and wait: all-reduce after backward (compute + comm)
     overlap  backward with grad_ready per layer, then wait: the reducer's case; goal <= 1.1 x max(compute, comm)
   Two kinds of compute:
     cpu      a calibrated multiply-add loop over the gradient on the calling thread (a CPU trainer's backward)
     offload  the layer finishes at a fixed time (an accelerator running backward asynchronously): the thread sleeps
              until then, so the core is free for MPI, as with a GPU backward and host-side reduction. */
static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* t on accel_now()'s clock (CLOCK_MONOTONIC) */
static void sleep_until(double t) {
    struct timespec ts;
    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0) {
    }
}

/* k multiply-adds per element, written back (a backward writes its gradient); values stay near 1 */
static void burn(float *g, size_t n, int k) {
    size_t i;
    int j;
    for (i = 0; i < n; ++i) {
        float x = g[i];
        for (j = 0; j < k; ++j) x = x * 0.999f + 0.001f;
        g[i] = x;
    }
}

typedef struct ovl {
    int nt, cpu, k;       /* tensors; cpu compute (else offload); multiply-adds per element */
    size_t *sz;
    float **g;
    double total, secs;   /* bytes; offload: seconds of compute per byte */
    accel_ddp *red;
} ovl;

/* one step: mode 0 comm, 1 compute, 2 serial, 3 overlap; the slowest rank's seconds */
static double ovl_step(const ovl *o, int mode) {
    double t0, done = 0;
    int t;
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = accel_now();
    if (mode != 0)
        for (t = o->nt - 1; t >= 0; --t) {
            if (o->cpu) burn(o->g[t], o->sz[t], o->k);
            else {
                done += (double)o->sz[t] * 4 * o->secs;
                sleep_until(t0 + done);
            }
            if (mode == 3 && accel_ddp_grad_ready(o->red, t) != ACCEL_OK) goto fail;
        }
    if (mode == 0 || mode == 2)
        for (t = o->nt - 1; t >= 0; --t)
            if (accel_ddp_grad_ready(o->red, t) != ACCEL_OK) goto fail;
    if (mode != 1 && accel_ddp_wait(o->red) != ACCEL_OK) goto fail;
    return max_time(accel_now() - t0);
fail:
    fprintf(stderr, "overlap: %s\n", accel_last_error(&acc));
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 0;
}

static double ovl_best(const ovl *o, int mode, int reps) {
    double best = 1e30;
    int r;
    for (r = 0; r < reps; ++r) {
        double t = ovl_step(o, mode);
        if (t < best) best = t;
    }
    return best;
}

/* The best any reducer can do on one channel: gradient t is ready once the layers after it are computed, and the
   all-reduces run one after another, each as soon as its gradient is ready and the previous one is done (both
   proportional to bytes; buckets only coarsen this). The last gradient of backward — GPT-2's tied embedding, 31 % of
   the bytes — can only start when backward ends, so max(compute, comm) is out of reach when that tensor is large. */
static double pipeline_bound(const size_t *sz, int nt, double total, double comp, double comm) {
    double ready = 0, end = 0;
    int t;
    for (t = nt - 1; t >= 0; --t) {
        ready += comp * (double)sz[t] * 4 / total;
        end = (end > ready ? end : ready) + comm * (double)sz[t] * 4 / total;
    }
    return end;
}

static void overlap(const char *model, const size_t *sz, int nt) {
    float *g[160];
    accel_tensor gt[160];
    accel_coll *c;
    accel_ddp_desc rd;
    ovl o;
    const char *rs = getenv("ACCEL_BENCH_OVERLAP_RHO"), *ks = getenv("ACCEL_BENCH_OVERLAP_REPS");
    double rhos[3] = {0.5, 1.0, 2.0}, comm, comm_cpu;
    int nr = 3, ir, t, reps = ks ? atoi(ks) : 3;
    if (rs) { rhos[0] = atof(rs); nr = 1; }
    if (reps < 1) reps = 1;
    memset(&o, 0, sizeof o);
    o.nt = nt;
    o.sz = (size_t *)sz;
    o.g = g;
    accel_coll_create(&acc, NULL, &c);
    for (t = 0; t < o.nt; ++t) {
        size_t i;
        g[t] = (float *)malloc(sz[t] * 4);
        for (i = 0; i < sz[t]; ++i) g[t][i] = 1.0f;
        gt[t] = f32_vector(g[t], sz[t]);
        o.total += (double)sz[t] * 4;
    }
    memset(&rd, 0, sizeof rd);
    rd.flat = ACCEL_OFF; /* separate tensors: DDP's buckets */
    accel_ddp_create(c, &rd, &o.red);
    accel_ddp_add(o.red, gt, o.nt);
    accel_ddp_finalize(o.red);
    ovl_step(&o, 0); /* warm-up: scratch buffers, first-touch */
    comm = ovl_best(&o, 0, reps);
    {   /* how much of the communication is CPU work on this rank (shared-memory MPI copies on the calling core) */
        double c0 = cpu_now(), w = ovl_step(&o, 0), c1 = cpu_now() - c0;
        MPI_Allreduce(MPI_IN_PLACE, &c1, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        comm_cpu = c1 / w;
    }
    for (o.cpu = 1; o.cpu >= 0; --o.cpu) {
        double per_k = 0;
        if (o.cpu) { /* the backward's seconds per multiply-add per element, all ranks computing at once */
            double a, b;
            o.k = 2;
            a = ovl_best(&o, 1, 2);
            o.k = 10;
            b = ovl_best(&o, 1, 2);
            per_k = (b - a) / 8;
            if (per_k <= 0) per_k = b / 10;
        }
        for (ir = 0; ir < nr; ++ir) {
            double comp, ser, ov, bound, pipe;
            char params[300], extra[500];
            if (o.cpu) {
                o.k = (int)(rhos[ir] * comm / per_k + 0.5);
                if (o.k < 1) o.k = 1;
            } else {
                o.secs = rhos[ir] * comm / o.total;
            }
            comp = ovl_best(&o, 1, reps);
            ser = ovl_best(&o, 2, reps);
            ov = ovl_best(&o, 3, reps);
            bound = comp > comm ? comp : comm;
            pipe = pipeline_bound(sz, nt, o.total, comp, comm);
            snprintf(params, sizeof params,
                     "\"model\": \"%s\", \"tensors\": %d, \"bytes\": %.0f, \"ranks\": %d, \"buckets\": %d, "
                     "\"compute\": \"%s\", \"compute_over_comm_target\": %.2f",
                     model, o.nt, o.total, P, accel_ddp_num_buckets(o.red), o.cpu ? "cpu" : "offload", rhos[ir]);
            snprintf(extra, sizeof extra,
                     ", \"seconds_overlap\": %.4f, \"seconds_compute\": %.4f, \"seconds_comm\": %.4f, "
                     "\"seconds_serial\": %.4f, \"overlap_over_max\": %.3f, \"serial_over_sum\": %.3f, "
                     "\"serial_over_overlap\": %.3f, \"comm_cpu_busy\": %.2f, \"seconds_pipeline_bound\": %.4f, "
                     "\"overlap_over_pipeline_bound\": %.3f",
                     ov, comp, comm, ser, ov / bound, ser / (comp + comm), ser / ov, comm_cpu, pipe, ov / pipe);
            if (R == 0) {
                printf("{\"bench\": \"grad_sync_overlap\", \"params\": {%s}, \"unit\": \"steps/s\", \"accel\": %.4f, "
                       "\"reference\": %.4f, \"reference_name\": \"1 / max(backward compute, communication)\", "
                       "\"ratio\": %.4f, \"goal\": 0.91%s}\n",
                       params, 1.0 / ov, 1.0 / bound, bound / ov, extra);
                fflush(stdout);
            }
        }
    }
    accel_ddp_destroy(o.red);
    for (t = 0; t < o.nt; ++t) free(g[t]);
    accel_coll_destroy(c);
}

/* the other ranks sleep (not spin) while rank 0 runs the torch peer */
static void torch_peer(const char *script, size_t max_bytes, const double *accel_busbw, int nsizes) {
    char cmd[1024], buf[512];
    FILE *p;
    int port = 29000 + (int)(getpid() % 2000);
    if (R == 0) {
        if (access("/usr/bin/python3", X_OK) != 0) {
            fprintf(stderr, "torch peer: /usr/bin/python3 missing: skipped\n");
        } else {
            snprintf(cmd, sizeof cmd, "timeout 1000 /usr/bin/python3 %s %zu %d 2>&1", script, max_bytes, port);
            p = popen(cmd, "r");
            while (p && fgets(buf, sizeof buf, p)) {
                unsigned long long bytes = 0;
                double sec = 0, ddp = 0, nosync = 0;
                if (sscanf(buf, "allreduce %llu %lf", &bytes, &sec) == 2) {
                    int k = 0;
                    size_t S;
                    char params[160];
                    for (S = 1024; S < bytes; S *= 4) ++k;
                    if (k < nsizes && sec > 0) {
                        double tb = 2.0 * (P - 1) / P * (double)bytes / sec / 1e9;
                        snprintf(params, sizeof params, "\"bytes\": %llu, \"ranks\": %d, \"dtype\": \"F32\", \"op\": \"sum\"", bytes, P);
                        line("all_reduce_vs_torch", params, accel_busbw[k], tb, "torch.distributed gloo all_reduce", 0, NULL);
                    }
                } else if (sscanf(buf, "ddp %llu %lf %lf", &bytes, &ddp, &nosync) == 3) {
                    FILE *f = fopen("/tmp/accel_bench_coll_gpt2.txt", "r");
                    double mine = 0, b2 = 0, torch_t = ddp - nosync;
                    if (f) { if (fscanf(f, "%lf %lf", &mine, &b2) != 2) mine = 0; fclose(f); }
                    if (mine > 0 && torch_t > 0) {
                        char params[160], extra[200];
                        snprintf(params, sizeof params, "\"model\": \"gpt2-124M\", \"tensors\": 148, \"bytes\": %.0f, \"ranks\": %d", b2, P);
                        snprintf(extra, sizeof extra, ", \"seconds_accel\": %.4f, \"seconds_reference\": %.4f, \"torch_backward_with_sync\": %.4f, \"torch_backward_no_sync\": %.4f",
                                 mine, torch_t, ddp, nosync);
                        line("grad_sync_vs_torch_ddp", params, b2 / mine / 1e9, b2 / torch_t / 1e9, "torch DDP gloo (backward with sync - no_sync)", 0, extra);
                    }
                } else {
                    fprintf(stderr, "torch peer: %s", buf);
                }
            }
            if (p) pclose(p);
        }
    }
    {
        MPI_Request q;
        int done = 0;
        MPI_Ibarrier(MPI_COMM_WORLD, &q);
        while (!done) {
            MPI_Test(&q, &done, MPI_STATUS_IGNORE);
            if (!done) usleep(20000);
        }
    }
}

/* 5. the other host data collectives — all_gather, gather, reduce (F32 sum), broadcast — accel (with its watchdog
   and, where accel checks the call's signature outside debug mode, that check) against the raw MPI_* call on the same
   buffers and the same communicator, on sub-communicators of 2, 3 and 4 ranks of this run (ranks outside one wait),
   4 B .. 16 MiB per rank's block; accel and MPI blocks alternate, best of 5. Ratio: MPI's time / accel's (goal 0.99
   at 64 KiB). Roots: the last rank of the group. */
static double ops_block(int kind, int mpi, accel_coll *c, MPI_Comm comm, float *a, float *b, size_t n, int it) {
    int i, p, root, rc = ACCEL_OK;
    double t0, t;
    MPI_Comm_size(comm, &p);
    root = p - 1;
    MPI_Barrier(comm);
    t0 = accel_now();
    for (i = 0; i < it && rc == ACCEL_OK; ++i) {
        switch (kind) {
        case 0:
            if (mpi) MPI_Allgather(a, (int)n, MPI_FLOAT, b, (int)n, MPI_FLOAT, comm);
            else rc = accel_coll_all_gather(c, a, b, n, ACCEL_F32);
            break;
        case 1:
            if (mpi) MPI_Gather(a, (int)n, MPI_FLOAT, b, (int)n, MPI_FLOAT, root, comm);
            else rc = accel_coll_gather(c, a, b, n, ACCEL_F32, root);
            break;
        case 2:
            if (mpi) MPI_Reduce(a, b, (int)n, MPI_FLOAT, MPI_SUM, root, comm);
            else rc = accel_coll_reduce(c, a, b, n, ACCEL_F32, ACCEL_COLL_SUM, root);
            break;
        default:
            if (mpi) MPI_Bcast(a, (int)n, MPI_FLOAT, root, comm);
            else rc = accel_coll_broadcast(c, a, n, ACCEL_F32, root);
            break;
        }
    }
    if (rc != ACCEL_OK) {
        fprintf(stderr, "%s\n", accel_last_error(&acc));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    t = (accel_now() - t0) / it;
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, comm);
    return t;
}

static void ops(void) {
    static const char *names[] = {"all_gather", "gather", "reduce", "broadcast"};
    static const size_t bytes[] = {4, 4096, 65536, (size_t)1 << 20, (size_t)16 << 20};
    int np;
    for (np = 2; np <= P && np <= 4; ++np) {
        MPI_Comm sub;
        MPI_Comm_split(MPI_COMM_WORLD, R < np ? 0 : MPI_UNDEFINED, R, &sub);
        if (sub != MPI_COMM_NULL) {
            accel_coll *c;
            accel_coll_desc cd;
            int kind, si;
            memset(&cd, 0, sizeof cd);
            cd.mpi_comm = &sub;
            if (accel_coll_create(&acc, &cd, &c) != ACCEL_OK) {
                fprintf(stderr, "%s\n", accel_last_error(&acc));
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
            for (si = 0; si < (int)(sizeof bytes / sizeof bytes[0]); ++si) {
                size_t S = bytes[si], n = S / 4;
                float *a = (float *)calloc(n, 4), *b = (float *)calloc(n * (size_t)np, 4);
                int it = (int)(((size_t)64 << 20) / S / (size_t)np), rep;
                if (it > 2000) it = 2000;
                if (it < 3) it = 3;
                for (kind = 0; kind < 4; ++kind) {
                    double best[2] = {1e30, 1e30};
                    char params[160];
                    ops_block(kind, 0, c, sub, a, b, n, 2);
                    ops_block(kind, 1, c, sub, a, b, n, 2);
                    for (rep = 0; rep < 5; ++rep) {
                        int m;
                        for (m = 0; m < 2; ++m) {
                            double t = ops_block(kind, m, c, sub, a, b, n, it);
                            if (t < best[m]) best[m] = t;
                        }
                    }
                    snprintf(params, sizeof params, "\"op\": \"%s\", \"np\": %d, \"bytes\": %zu, \"dtype\": \"F32\"",
                             names[kind], np, S);
                    if (R == 0) {
                        printf("{\"bench\": \"coll_host_op\", \"params\": {%s}, \"unit\": \"us\", \"accel\": %.3f, "
                               "\"reference\": %.3f, \"reference_name\": \"MPI_%s\", \"ratio\": %.4f, \"goal\": %s}\n",
                               params, best[0] * 1e6, best[1] * 1e6,
                               kind == 0 ? "Allgather" : kind == 1 ? "Gather" : kind == 2 ? "Reduce" : "Bcast",
                               best[1] / best[0], S == 65536 ? "0.99" : "null");
                        fflush(stdout);
                    }
                }
                free(a);
                free(b);
            }
            accel_coll_destroy(c);
            MPI_Comm_free(&sub);
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }
}

int main(int argc, char **argv) {
    accel_desc d;
    const char *s = getenv("ACCEL_BENCH_MAX_BYTES");
    size_t max_bytes = s ? (size_t)strtoull(s, NULL, 10) : ((size_t)256 << 20);
    const char *script = argc > 1 ? argv[1] : NULL;
    memset(&d, 0, sizeof d);
    d.cpu = 1;
    if (accel_init(&acc, &d) != ACCEL_OK) { fprintf(stderr, "%s\n", accel_last_error(&acc)); return 1; }
    P = acc.num_processes;
    R = acc.process_index;
    if (P < 2) { if (R == 0) fprintf(stderr, "bench_coll needs >= 2 ranks\n"); accel_shutdown(&acc); return 0; }
    {
        /* the sweep keeps accel's watchdog busbw per size for the torch line */
        static double busbw[32];
        int nsizes = 0;
        accel_coll *cw;
        size_t S;
        const char *only = getenv("ACCEL_BENCH_ONLY"); /* "sweep", "overlap" or "ops": that part alone */
        int sweep_only = only && strcmp(only, "sweep") == 0, overlap_only = only && strcmp(only, "overlap") == 0;
        if ((only && strcmp(only, "ops") == 0) || (script && strcmp(script, "--ops") == 0)) {
            ops();
            accel_shutdown(&acc);
            return 0;
        }
        if (!overlap_only) sweep(max_bytes);
        if (!sweep_only && !overlap_only) gpt2();
        if (!sweep_only) {
            size_t sz[160];
            int n = gpt2_sizes(sz), k;
            /* GPT-2 as it is (the embedding's gradient, 31 % of the bytes, is ready last), and 48 equal layers */
            overlap("gpt2-124M", sz, n);
            for (k = 0; k < 48; ++k) sz[k] = (size_t)2 << 20;
            overlap("uniform-48x8MiB", sz, 48);
        }
        sweep_only |= overlap_only;
        if (script && P == 2 && !sweep_only) {
            /* accel numbers for the torch comparison, measured again now (same run, right before the peer) */
            accel_coll_create(&acc, NULL, &cw);
            for (S = 1024; S <= max_bytes && nsizes < 32; S *= 4, ++nsizes) {
                size_t n = S / 4;
                float *a = (float *)calloc(n, 4), *b = (float *)calloc(n, 4);
                int it = (int)(((size_t)256 << 20) / S / 4), rep;
                double best = 1e30;
                if (it > 400) it = 400;
                if (it < 2) it = 2;
                block(0, cw, cw, a, b, n, 1);
                for (rep = 0; rep < 3; ++rep) {
                    double t = block(0, cw, cw, a, b, n, it);
                    if (t < best) best = t;
                }
                busbw[nsizes] = 2.0 * (P - 1) / P * (double)S / best / 1e9;
                free(a);
                free(b);
            }
            accel_coll_destroy(cw);
            torch_peer(script, max_bytes, busbw, nsizes);
        }
    }
    accel_shutdown(&acc);
    return 0;
}
