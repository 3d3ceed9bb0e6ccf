/* Writes a deterministic run with accel_trackers.h for the Python readers (check_events.py, check_tensorboard.py),
   which recompute every expected value themselves.
   usage: write_run LOGGING_DIR [tensorboard|jsonl|all]
          write_run LOGGING_DIR fmt     JSONL only: FMT_CALLS calls of 10 doubles from splitmix64 bit patterns and
                                        short decimals (the number formatter against Python's float parsing) */
#include "accel.h"
#include "accel_trackers.h"
#include <stdio.h>
#include <string.h>

#define NSTEPS 50

static int fail(accel *acc, const char *what) {
    fprintf(stderr, "write_run: %s: %s\n", what, accel_last_error(acc));
    return 1;
}

#define FMT_CALLS 4000

static uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* value k of call i; expected_run.py computes the same */
static double fmt_value(int i, int k) {
    uint64_t r = splitmix64((uint64_t)i * 10u + (uint64_t)k);
    double d;
    if (k < 6) { /* any finite double, all exponents; k == 5 every 4th call: a subnormal */
        if (((r >> 52) & 0x7FF) == 0x7FF) r ^= (uint64_t)1 << 62;
        if (k == 5 && i % 4 == 0) r &= ~((uint64_t)0x7FF << 52);
        memcpy(&d, &r, sizeof d);
        return d;
    }
    if (k < 8) return (double)(int64_t)(r % 2000001u - 1000000) / 1000.0; /* short decimals */
    if (k == 8) return (double)(float)((double)(r >> 11) * (1.0 / 9007199254740992.0)); /* float32 values */
    return (double)(int64_t)(r >> 11) * (k & 1 ? 1.0 : -1.0);                         /* large integers */
}

static int write_fmt(accel *acc, const char *dir) {
    accel_track trk;
    accel_track_desc td;
    accel_track_value v[10];
    static const char *vn[10] = {"v0", "v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8", "v9"};
    int i, k;
    memset(&td, 0, sizeof td);
    td.log_with = ACCEL_TRACK_JSONL;
    td.logging_dir = dir;
    if (accel_track_init(acc, &trk, &td) != ACCEL_OK) return fail(acc, "accel_track_init");
    if (accel_track_init_trackers(&trk, "fmt", NULL, 0) != ACCEL_OK) return fail(acc, "init_trackers");
    for (i = 0; i < FMT_CALLS; ++i) {
        for (k = 0; k < 10; ++k) v[k] = accel_track_scalar(vn[k], fmt_value(i, k));
        if (accel_track_log(&trk, v, 10, i) != ACCEL_OK) return fail(acc, "log");
    }
    if (accel_track_deinit(&trk) != ACCEL_OK) return fail(acc, "deinit");
    printf("run_dir=%s\njsonl_file=%s\n", trk.run_dir, trk.jsonl_file);
    accel_shutdown(acc);
    return 0;
}

int main(int argc, char **argv) {
    accel acc;
    accel_desc d;
    accel_track trk;
    accel_track_desc td;
    accel_track_param cfg[7];
    accel_track_value v[8];
    const char *names[4] = {"train/loss", "lr", "acc \"quoted\" \\back/slash", "\xc3\xbcn\xc3\xaf/\xe5\x90\x8d\xe5\x89\x8d"};
    int s;
    double zero = 0.0;
    if (argc < 2) { fprintf(stderr, "usage: write_run LOGGING_DIR [tensorboard|jsonl|all]\n"); return 2; }
    memset(&d, 0, sizeof d);
    d.no_mpi = 1;
    if (accel_init(&acc, &d) != ACCEL_OK) return fail(&acc, "accel_init");
    if (argc > 2 && !strcmp(argv[2], "fmt")) return write_fmt(&acc, argv[1]);
    memset(&td, 0, sizeof td);
    td.log_with = argc > 2 ? accel_track_parse_log_with(argv[2]) : ACCEL_TRACK_ALL;
    td.logging_dir = argv[1];
    td.flush_secs = 0.0; /* default: everything reaches the file at deinit */
    if (accel_track_init(&acc, &trk, &td) != ACCEL_OK) return fail(&acc, "accel_track_init");
    cfg[0] = accel_track_param_number("lr", 3e-4);
    cfg[1] = accel_track_param_int("batch_size", 64);
    cfg[2] = accel_track_param_int("big", (int64_t)4611686018427387905LL); /* 2^62 + 1: not a double */
    cfg[3] = accel_track_param_string("model", "gpt2 \"small\" | 124M\nline2");
    cfg[4] = accel_track_param_bool("use_amp", 1);
    cfg[5] = accel_track_param_number("ctl\x01\t", 1.0 / zero);
    cfg[6] = accel_track_param_number("nan", zero / zero);
    if (accel_track_init_trackers(&trk, "demo run", cfg, 7) != ACCEL_OK) return fail(&acc, "init_trackers");
    for (s = 0; s < NSTEPS; ++s) {
        v[0] = accel_track_scalar(names[0], 1.0 / (s + 1) + 0.125);
        v[1] = accel_track_scalar(names[1], 3e-4 * (s % 7));
        v[2] = accel_track_scalar(names[2], s * 0.01);
        v[3] = accel_track_scalar(names[3], -s * 1e10);
        if (accel_track_log(&trk, v, 4, s) != ACCEL_OK) return fail(&acc, "log");
        if (s == 10) {
            v[0] = accel_track_scalar("special/nan", zero / zero);
            v[1] = accel_track_scalar("special/inf", 1.0 / zero);
            v[2] = accel_track_scalar("special/-inf", -1.0 / zero);
            v[3] = accel_track_scalar("ctl\n\t\x01\x1f", 0.1);
            v[4] = accel_track_scalar("fmt/third", 1.0 / 3.0);
            v[5] = accel_track_scalar("fmt/tiny", 5e-324);
            v[6] = accel_track_scalar("fmt/huge", 1.7976931348623157e308);
            v[7] = accel_track_scalar("fmt/negzero", -zero);
            if (accel_track_log(&trk, v, 8, s) != ACCEL_OK) return fail(&acc, "log specials");
        }
    }
    v[0] = accel_track_scalar("big/step", 2.5);
    if (accel_track_log(&trk, v, 1, (int64_t)1 << 40) != ACCEL_OK) return fail(&acc, "log big step");
    v[0] = accel_track_scalar("final/score", 42.0);
    if (accel_track_log(&trk, v, 1, ACCEL_TRACK_NO_STEP) != ACCEL_OK) return fail(&acc, "log no step");
    if (accel_track_deinit(&trk) != ACCEL_OK) return fail(&acc, "deinit");
    printf("run_dir=%s\nevent_file=%s\njsonl_file=%s\nconfig_file=%s\n", trk.run_dir, trk.event_file, trk.jsonl_file,
           trk.config_file);
    accel_shutdown(&acc);
    return 0;
}
