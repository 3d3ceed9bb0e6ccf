/* The training-step bookkeeping of accel.h (SEMANTICS.md §4) driven the way a trainer drives it — every
   micro-batch of several epochs — and compared with an independent statement of the rules:
   - sync_with_dataloader on: within an epoch of N batches, batch b (0-based) syncs iff (b+1) % A == 0 or b == N-1
     (windows A, A, ..., N % A); the counter restarts each epoch.
   - sync_with_dataloader off: a global micro-batch counter g (0-based, never reset) syncs iff (g+1) % A == 0;
     leftover micro-batches carry into the next epoch.
   - the loss divisor is always A, also in the short final window;
   - scheduler steps per micro-batch call: 0 unless syncing; 0 when the optimizer step was skipped; else 1 with
     split_batches and P without; step_scheduler_with_optimizer off → 1 per call (uncapped); a total_steps cap counts
     adjust_scheduler bumps (one per non-sync call) like torch's _step_count. */
#include "accel.h"
#include "accel_test.h"

/* What a loader does around its batches (accel_dataloader_*): the last batch is flagged one batch ahead. */
static const int test_loader_key = 0;
static void set_loader(accel *acc, int last, int remainder) {
    accel_dataloader_begin(acc, &test_loader_key, remainder);
    if (last) accel_dataloader_last_batch(acc, &test_loader_key);
}

static void init1(accel *acc, int accum, int sync_with_dataloader, int split, int adjust, int with_opt) {
    accel_desc d;
    memset(&d, 0, sizeof d);
    d.no_mpi = 1;
    d.gradient_accumulation_steps = accum;
    d.no_sync_with_dataloader = !sync_with_dataloader;
    d.split_batches = split;
    d.no_adjust_scheduler = !adjust;
    d.no_step_scheduler_with_optimizer = !with_opt;
    unsetenv("ACCELERATE_GRADIENT_ACCUMULATION_STEPS");
    if (accel_init(acc, &d) != ACCEL_OK) {
        fprintf(stderr, "accel_init: %s\n", accel_last_error(acc));
        exit(1);
    }
}

/* sync pattern over `epochs` epochs of N batches, A accumulation steps */
static void check_sync_pattern(int N, int A, int epochs, int swd) {
    accel acc;
    int e, b, g = 0, mismatches = 0, windows = 0, win_len = 0, short_windows = 0;
    char ctx[96];
    snprintf(ctx, sizeof ctx, "N=%d A=%d epochs=%d sync_with_dataloader=%d", N, A, epochs, swd);
    at_context = ctx;
    init1(&acc, A, swd, 0, 1, 1);
    for (e = 0; e < epochs; ++e)
        for (b = 0; b < N; ++b, ++g) {
            int want = swd ? ((b + 1) % A == 0 || b == N - 1) : ((g + 1) % A == 0);
            set_loader(&acc, b == N - 1, -1); /* the loader looks one batch ahead */
            accel_accumulate_begin(&acc);
            if (acc.sync_gradients != want) mismatches++;
            if (accel_should_reduce(&acc) != want) mismatches++; /* one process: no sync_each_batch effect */
            if (accel_loss_divisor(&acc) != (float)A) mismatches++;
            ++win_len;
            if (acc.sync_gradients) {
                windows++;
                if (win_len != A) short_windows++;
                win_len = 0;
            }
            accel_accumulate_end(&acc);
        }
    AT_EQ_INT(mismatches, 0);
    if (swd) {
        AT_EQ_INT(windows, epochs * ((N + A - 1) / A));
        AT_EQ_INT(short_windows, N % A ? epochs : 0);
    } else {
        AT_EQ_INT(windows, (epochs * N) / A);
        AT_EQ_INT(short_windows, 0);
    }
    accel_shutdown(&acc);
    at_context = "";
}

/* 7 batches, 3 steps → windows 3,3,1 (SEMANTICS.md §4's example), written out literally */
static void check_semantics_example(void) {
    accel acc;
    int b, lens[8], nw = 0, len = 0;
    init1(&acc, 3, 1, 0, 1, 1);
    for (b = 0; b < 7; ++b) {
        set_loader(&acc, b == 6, 0);
        accel_accumulate_begin(&acc);
        ++len;
        if (acc.sync_gradients) { lens[nw++] = len; len = 0; }
        accel_accumulate_end(&acc);
    }
    AT_EQ_INT(nw, 3);
    AT_EQ_INT(lens[0], 3);
    AT_EQ_INT(lens[1], 3);
    AT_EQ_INT(lens[2], 1);
    AT_EQ_INT(acc.step, 0);
    accel_shutdown(&acc);
}

/* A trainer's loop: every micro-batch asks accel_scheduler_steps; optimizer steps are skipped per `skip`. */
static void check_scheduler(int P, int A, int split, int adjust, int with_opt, int64_t total, const char *skip) {
    accel acc;
    int k, n_micro = 4 * A, want_total = 0, got_total = 0, bumps = 0, sched = 0, bad = 0;
    char ctx[128];
    snprintf(ctx, sizeof ctx, "P=%d A=%d split=%d adjust=%d with_opt=%d total=%lld skip=%s", P, A, split, adjust,
             with_opt, (long long)total, skip);
    at_context = ctx;
    init1(&acc, A, 1, split, adjust, with_opt);
    acc.num_processes = P; /* the rule reads num_processes (a one-process test stands in for P) */
    for (k = 0; k < n_micro; ++k) {
        int sync = (k + 1) % A == 0, skipped = sync && skip[(k / A) % 4] == '1', want, i, got;
        accel_accumulate_begin(&acc);
        if (acc.sync_gradients != sync) bad++;
        if (sync) accel_optimizer_step_done(&acc, skipped);
        /* reference */
        if (!with_opt) want = 1;
        else if (!sync) { want = 0; if (adjust) bumps++; }
        else if (skipped) want = 0;
        else want = split ? 1 : P;
        if (total > 0 && with_opt) { /* Accelerate applies the OneCycle guard only when stepping with the optimizer */
            int capped = 0;
            for (i = 0; i < want; ++i)
                if (1 + sched + capped + bumps <= total) capped++;
            want = capped;
        }
        sched += want;
        want_total += want;
        got = accel_scheduler_steps(&acc, total);
        if (got != want) bad++;
        got_total += got;
        accel_accumulate_end(&acc);
    }
    AT_EQ_INT(bad, 0);
    AT_EQ_INT(got_total, want_total);
    AT_EQ_INT(acc.scheduler_steps, want_total);
    {
        int nskip = 0;
        for (k = 0; k < 4; ++k) nskip += skip[k] == '1';
        AT_EQ_INT(acc.optimizer_steps, 4 - nskip);
    }
    acc.num_processes = 1;
    accel_shutdown(&acc);
    at_context = "";
}

int main(void) {
    static const int Ns[] = {1, 2, 6, 7, 9, 10};
    static const int As[] = {1, 2, 3, 4};
    static const int Ps[] = {1, 2, 4};
    static const char *skips[] = {"0000", "1000", "1101", "1111"};
    size_t i, j, k;
    int swd, split, adjust, with_opt;
    check_semantics_example();
    for (i = 0; i < sizeof Ns / sizeof *Ns; ++i)
        for (j = 0; j < sizeof As / sizeof *As; ++j)
            for (swd = 0; swd < 2; ++swd) check_sync_pattern(Ns[i], As[j], 3, swd);
    for (i = 0; i < sizeof Ps / sizeof *Ps; ++i)
        for (j = 0; j < sizeof As / sizeof *As; ++j)
            for (k = 0; k < sizeof skips / sizeof *skips; ++k)
                for (split = 0; split < 2; ++split)
                    for (adjust = 0; adjust < 2; ++adjust)
                        for (with_opt = 0; with_opt < 2; ++with_opt) {
                            check_scheduler(Ps[i], As[j], split, adjust, with_opt, 0, skips[k]);
                            check_scheduler(Ps[i], As[j], split, adjust, with_opt, 7, skips[k]);
                        }
    return at_finish("trainer-step-rules");
}
