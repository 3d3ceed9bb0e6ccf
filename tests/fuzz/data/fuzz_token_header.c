/* libFuzzer target: the llm.c token-shard header parser (untrusted bytes), and the sampler-state loaders.
   Input: 8 bytes of claimed file size, then the header bytes. Anything may come back but a crash or a success that
   breaks the format's rule (size == 1024 + ntok * width). */
#define ACCEL_IMPLEMENTATION
#include "accel.h"
#include "accel_data.h"
#include <stdint.h>
#include <string.h>

static void quiet(void *u, accel_log_level l, const char *m) { (void)u; (void)l; (void)m; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    accel_data_token_info info;
    uint64_t fsize = 0;
    size_t i;
    accel_set_default_logger(quiet, NULL);
    if (size < 8) return 0;
    for (i = 0; i < 8; ++i) fsize |= (uint64_t)data[i] << (8 * i);
    if (accel_data_token_header_parse(NULL, data + 8, size - 8, fsize, &info) == ACCEL_OK) {
        if (fsize != 1024u + (uint64_t)info.num_tokens * (uint64_t)info.token_bytes) __builtin_trap();
        if (info.token_bytes != 2 && info.token_bytes != 4) __builtin_trap();
    }
    /* the same bytes as a shard state and a loader state */
    {
        accel_data_shard sh;
        accel_data_shard_desc d;
        memset(&d, 0, sizeof d);
        d.dataset_len = 100; d.batch_size = 4; d.num_processes = 2;
        if (accel_data_shard_init(NULL, &sh, &d) == ACCEL_OK &&
            accel_data_shard_state_load(&sh, data + 8, size - 8) == ACCEL_OK) {
            int64_t buf[8], count, pos = sh.position;
            if (sh.position < 0 || sh.epoch < 0) __builtin_trap();
            /* the resume-safe loop's set_epoch(current epoch) keeps any loaded position */
            if (accel_data_shard_set_epoch(&sh, accel_data_shard_epoch(&sh)) != ACCEL_OK || sh.position != pos)
                __builtin_trap();
            (void)accel_data_shard_next(&sh, buf, &count); /* must be safe for any loaded position */
            if (count < 0 || count > 4) __builtin_trap();
            accel_data_shard_end(&sh);
        }
        accel_data_shard_deinit(&sh);
    }
    return 0;
}
