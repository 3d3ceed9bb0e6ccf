/* gpt2_config_dump FILE... — what examples/gpt2/gpt2.h's config.json reader (gpt2_hf_config_parse) makes of each
   FILE, one JSON line per file, for test_gpt2_init.py to compare with Python's json (what transformers reads):
     {"ok": true, "keys": {"<known key>": {"type": "int", "number": "768"}, ...}}   or   {"ok": false, "error": "..."}
   Numbers are printed with %.17g as strings (NaN and infinities included); strings as the hex of their first 63
   bytes, with their full length. */
#include "gpt2.h"

static const char *const type_names[] = {"absent", "null", "false", "true", "int", "real", "string", "array",
                                         "object"};

static void dump(const char *path) {
    static char buf[GPT2_HF_CONFIG_MAX_BYTES + 1];
    char err[160];
    gpt2_hf_config h;
    FILE *f = fopen(path, "rb");
    size_t n, k;
    int i, first = 1;
    if (!f) {
        printf("{\"ok\": false, \"error\": \"cannot open\"}\n");
        return;
    }
    n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    if (gpt2_hf_config_parse(buf, n, &h, err, sizeof err) != 0) {
        for (k = 0; err[k]; ++k)
            if (err[k] == '"' || err[k] == '\\' || (unsigned char)err[k] < 0x20) err[k] = '?';
        printf("{\"ok\": false, \"error\": \"%s\"}\n", err);
        return;
    }
    printf("{\"ok\": true, \"keys\": {");
    for (i = 0; i < GPT2_HF_NUM_KEYS; ++i) {
        const gpt2_json_value *v = &h.v[i];
        if (!v->type) continue;
        printf("%s\"%s\": {\"type\": \"%s\"", first ? "" : ", ", gpt2_hf_keys[i], type_names[v->type]);
        first = 0;
        if (v->type == GPT2_JSON_INT || v->type == GPT2_JSON_REAL) printf(", \"number\": \"%.17g\"", v->number);
        if (v->type == GPT2_JSON_ARRAY || v->type == GPT2_JSON_OBJECT) printf(", \"count\": %d", v->count);
        if (v->type == GPT2_JSON_STRING) {
            printf(", \"len\": %zu, \"hex\": \"", v->len);
            for (k = 0; k < v->len && k + 1 < sizeof v->str; ++k) printf("%02x", (unsigned char)v->str[k]);
            printf("\"");
        }
        printf("}");
    }
    printf("}}\n");
}

int main(int argc, char **argv) {
    int i;
    for (i = 1; i < argc; ++i) dump(argv[i]);
    return argc > 1 ? 0 : 2;
}
