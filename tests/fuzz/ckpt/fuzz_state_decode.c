/* libFuzzer target: the state-file decoders `accel ckpt ls` runs on a checkpoint's files (untrusted bytes) —
   accel_state_decode (random_states_<rank>.bin), accel_data_shard_state_decode (sampler), accel_amp_scaler_state_decode
   (scaler), accel_optim_state_decode with its group/parameter readers (optimizer) and accel_data_seq_state_decode
   (the examples' loader.bin). The first byte picks the
   decoder and, for small inputs, the magic the rest is given, so every decoder gets past its header. Anything may come
   back but a crash, a read out of bounds (ASan) or a success that breaks the format's documented ranges. */
#define ACCEL_IMPLEMENTATION
#include "accel.h"
#include "accel_amp.h"
#include "accel_data.h"
#include "accel_optim.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void quiet(void *u, accel_log_level l, const char *m) { (void)u; (void)l; (void)m; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *magic[5] = {"ACST", "ACDS", "AMPS", "AOPT", "ACSQ"};
    unsigned char *b;
    size_t n;
    int kind;
    accel_set_default_logger(quiet, NULL);
    if (size < 1) return 0;
    kind = (data[0] & 7) % 5;
    n = size - 1;
    b = (unsigned char *)malloc(n + 1); /* an exact-size copy: ASan sees any read past the end */
    if (!b) return 0;
    memcpy(b, data + 1, n);
    if ((data[0] & 8) && n >= 4) memcpy(b, magic[kind], 4);
    if (kind == 0) {
        accel_state_info t;
        if (accel_state_decode(NULL, b, n, &t) == ACCEL_OK &&
            (n != ACCEL_STATE_BYTES || t.num_processes < 1 || t.process_index < 0 ||
             t.process_index >= t.num_processes || t.optimizer_steps < 0 || t.gradient_accumulation_steps < 1))
            __builtin_trap();
    } else if (kind == 1) {
        accel_data_shard_state_info d;
        if (accel_data_shard_state_decode(NULL, b, n, &d) == ACCEL_OK &&
            (n != ACCEL_DATA_SHARD_STATE_BYTES || d.epoch < 0 || d.position < 0 || d.num_processes < 1 ||
             (d.flags & ~63u)))
            __builtin_trap();
    } else if (kind == 2) {
        accel_amp_scaler_state_info a;
        if (accel_amp_scaler_state_decode(NULL, b, n, &a) == ACCEL_OK &&
            (n != ACCEL_AMP_SCALER_STATE_BYTES || !(a.scale >= 0.0f) || a.growth_interval < 1 ||
             a.growth_tracker < 0 || a.growth_tracker >= a.growth_interval))
            __builtin_trap();
    } else if (kind == 4) {
        accel_data_seq_state_info q;
        if (accel_data_seq_state_decode(NULL, b, n, &q) == ACCEL_OK &&
            (n != ACCEL_DATA_SEQ_STATE_BYTES || q.epoch < 0 || q.position < 0 || q.num_processes < 1 ||
             q.process_index < 0 || q.process_index >= q.num_processes || q.batch_size < 1 || q.seq_len < 1 ||
             q.num_files < 1 || q.total_tokens < 0 || (q.flags & ~16u)))
            __builtin_trap();
    } else {
        accel_optim_state_info o;
        if (accel_optim_state_decode(NULL, b, n, &o) == ACCEL_OK) {
            int g, i;
            if (o.ngroups < 1 || o.nparams < 0 || n != ACCEL_OPTIM_STATE_BYTES(o.ngroups, o.nparams) || o.steps < 0)
                __builtin_trap();
            for (g = 0; g < o.ngroups; ++g) {
                int np;
                double lr, base, wd;
                accel_optim_state_decode_group(b, g, &np, &lr, &base, &wd);
                if (np < 0 || !(lr >= 0.0) || !(base >= 0.0) || !(wd >= 0.0)) __builtin_trap();
            }
            for (i = 0; i < o.nparams; ++i) {
                int64_t numel, steps;
                accel_optim_state_decode_param(b, o.ngroups, i, &numel, &steps);
                if (numel < 0 || steps < 0) __builtin_trap();
            }
        }
    }
    free(b);
    return 0;
}
