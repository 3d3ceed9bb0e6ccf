/* libFuzzer target: examples/gpt2/gpt2.h's config.json reader (untrusted bytes: --init reads any config.json) and
   the checks behind it. Anything may come back but a crash, a read out of bounds, or a result that breaks the
   reader's contract: on success every value has a valid type, a string is NUL-terminated within its buffer and no
   longer than its length says, and the checks either accept (then n_head divides n_embd) or say why. */
#define ACCEL_IMPLEMENTATION
#include "gpt2.h"
#include <stdint.h>
#include <string.h>

static void quiet(void *u, accel_log_level l, const char *m) { (void)u; (void)l; (void)m; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gpt2_hf_config h;
    gpt2_config c;
    char err[96];
    int i, r;
    accel_set_default_logger(quiet, NULL);
    r = gpt2_hf_config_parse(data, size, &h, err, sizeof err);
    if (r != 0) {
        if (!err[0] || !memchr(err, 0, sizeof err)) __builtin_trap();
        for (i = 0; i < GPT2_HF_NUM_KEYS; ++i)
            if (h.v[i].type) __builtin_trap(); /* nothing half-read */
        return 0;
    }
    for (i = 0; i < GPT2_HF_NUM_KEYS; ++i) {
        const gpt2_json_value *v = &h.v[i];
        if (v->type < GPT2_JSON_ABSENT || v->type > GPT2_JSON_OBJECT) __builtin_trap();
        if (v->type == GPT2_JSON_STRING && (!memchr(v->str, 0, sizeof v->str) || strlen(v->str) > v->len))
            __builtin_trap();
        if ((v->type == GPT2_JSON_ARRAY || v->type == GPT2_JSON_OBJECT) && v->count < 0) __builtin_trap();
    }
    /* the checks against the tiny model of tests/unit/trainer/test_gpt2_init.py, and against GPT-2 124M */
    for (i = 0; i < 2; ++i) {
        gpt2_config_default(&c);
        if (i == 0) {
            c.num_layers = 2; c.channels = 32; c.vocab_size = 64; c.max_seq_len = 16; c.num_heads = 0;
        }
        if (gpt2_hf_config_check(NULL, "config.json", &h, &c, 0, i) == ACCEL_OK) {
            if (c.num_heads < 1 || c.channels % c.num_heads) __builtin_trap();
        } else if (!accel_last_error(NULL)[0]) {
            __builtin_trap();
        }
    }
    return 0;
}
