/* libFuzzer target: the flight recorder's dump reader of `accel fr` (tools/cli_fr.h; untrusted bytes: any file named
   rank<R>.json in the directory) and its analysis, plus the writer (accel_collectives.h) read back by that reader.
   Byte 0 picks the part:
     even  the rest is a dump: cli_fr_parse either fails with a message and nothing kept, or gives a dump whose
           strings are NUL-terminated and whose numbers are in range; a parsed dump is then analysed against a copy
           of itself as another rank with its last call changed (the report must name a divergence).
     odd   the rest becomes the recorder's strings (what, the call site's file) and numbers of 3 calls; the real
           writer dumps them and the reader must read back exactly what was recorded (the writer keeps printable
           ASCII and writes '?' for the rest). */
#define ACCEL_IMPLEMENTATION
#include "accel.h"
#include "accel_collectives.h"
#include "cli_fr.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void check_strings(const cli_fr_dump *d) {
    int i;
    if (!memchr(d->reason, 0, sizeof d->reason)) __builtin_trap();
    if (d->ngroups < 0 || d->ngroups > CLI_FR_MAX_GROUPS || d->ncalls < 0 || d->ncalls > CLI_FR_MAX_CALLS)
        __builtin_trap();
    if (d->rank < 0 || d->rank >= d->world_size) __builtin_trap();
    for (i = 0; i < d->ngroups; ++i)
        if (!memchr(d->groups[i].name, 0, sizeof d->groups[i].name) || d->groups[i].id != i) __builtin_trap();
    for (i = 0; i < d->ncalls; ++i) {
        const cli_fr_call *c = &d->calls[i];
        if (!memchr(c->what, 0, sizeof c->what) || !memchr(c->op, 0, sizeof c->op) ||
            !memchr(c->dtype, 0, sizeof c->dtype) || !memchr(c->file, 0, sizeof c->file) ||
            !memchr(c->state, 0, sizeof c->state))
            __builtin_trap();
        if (c->group < 0 || c->group >= d->ngroups || c->seq < 0) __builtin_trap();
    }
}

static void parse_part(const uint8_t *data, size_t size) {
    cli_fr_dump d[2];
    char err[160], *report;
    if (cli_fr_parse((const char *)data, size, &d[0], err, sizeof err) != 0) {
        if (!err[0] || !memchr(err, 0, sizeof err) || d[0].calls || d[0].ncalls) __builtin_trap();
        return;
    }
    check_strings(&d[0]);
    report = (char *)malloc(4096);
    if (report && d[0].ncalls > 0 && d[0].world_size > 1) {
        d[1] = d[0];
        d[1].rank = d[0].rank == 0 ? 1 : 0;
        d[1].calls = (cli_fr_call *)malloc(sizeof(cli_fr_call) * (size_t)d[0].ncalls);
        if (d[1].calls) {
            memcpy(d[1].calls, d[0].calls, sizeof(cli_fr_call) * (size_t)d[0].ncalls);
            d[1].calls[d[0].ncalls - 1].count ^= 1; /* the same seq, another count: a divergence somewhere */
            if (cli_fr_analyze(d, 2, report, 4096) < 1 || !memchr(report, 0, 4096)) __builtin_trap();
            free(d[1].calls);
        }
    }
    free(report);
    cli_fr_free(&d[0]);
}

static char dir[64];
static char file_buf[3][80];
static void remove_dir(void) { /* the writer's directory, at exit */
    char path[128];
    snprintf(path, sizeof path, "%s/rank0.json", dir);
    (void)unlink(path);
    (void)rmdir(dir);
}

static void writer_part(const uint8_t *data, size_t size) {
    cli_fr_dump d;
    char path[128], err[160], want[80];
    FILE *f;
    char *text;
    long n;
    int k;
    uint64_t ids[3];
    size_t at = 0;
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/fuzz_fr_dump.%d", (int)getpid());
        accel__coll_fr_rank = 0;
        accel__coll_fr_world = 2;
        snprintf(accel__coll_fr_dir, sizeof accel__coll_fr_dir, "%s", dir);
        setenv("ACCEL_FLIGHT_RECORDER_SIZE", "8", 1); /* a small ring that wraps: each dump stays small */
        (void)accel__fr_setup(NULL);
        (void)accel__fr_group("host", 0, 2);
        atexit(remove_dir);
    }
    for (k = 0; k < 3; ++k) { /* each call: what and file from the input (up to 20 / 79 bytes), numbers too */
        char what[21];
        size_t wl = size - at < 20 ? size - at : 20, fl;
        memcpy(what, data + at, wl);
        what[wl] = 0;
        at += wl;
        fl = size - at < 79 ? size - at : 79;
        memcpy(file_buf[k], data + at, fl);
        file_buf[k][fl] = 0;
        at += fl;
        accel_fr_site_enter(file_buf[k], (int)(at & 0xffff));
        ids[k] = accel__fr_post(0, 1000 + (uint64_t)k, what, k == 0 ? -1 : (int)ACCEL_COLL_MAX, k == 2 ? -1 : 2,
                                (int64_t)size * (k - 1), (int64_t)at, k);
        accel_fr_site_leave(ACCEL_OK);
        if (k < 2) accel__fr_done(NULL, ids[k], k ? ACCEL_ERR_INVALID_ARGUMENT : ACCEL_OK);
    }
    if (accel__coll_fr_write("fuzz \"reason\"\n") != 0) return; /* no disk: nothing to compare */
    snprintf(path, sizeof path, "%s/rank0.json", dir);
    f = fopen(path, "rb");
    if (!f) __builtin_trap();
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    text = (char *)malloc((size_t)n + 1);
    if (!text || fread(text, 1, (size_t)n, f) != (size_t)n) __builtin_trap();
    fclose(f);
    if (cli_fr_parse(text, (size_t)n, &d, err, sizeof err) != 0) __builtin_trap(); /* the writer's own output */
    free(text);
    check_strings(&d);
    if (d.ncalls < 3 || strcmp(d.reason, "fuzz \"reason\"?")) __builtin_trap();
    for (k = 0; k < 3; ++k) {
        const cli_fr_call *c = &d.calls[d.ncalls - 3 + k];
        const accel__fr_entry *e = &accel__g_fr[(ids[k] - 1) % accel__g_fr_cap];
        size_t i;
        if (c->seq != 1000 + k || c->count != e->count || c->bytes != e->bytes || c->root != k || c->line != e->line)
            __builtin_trap();
        for (i = 0; e->what[i]; ++i) want[i] = (e->what[i] >= 0x20 && e->what[i] < 0x7f) ? e->what[i] : '?';
        want[i] = 0;
        if (strcmp(c->what, want)) __builtin_trap();
        for (i = 0; file_buf[k][i]; ++i)
            want[i] = (file_buf[k][i] >= 0x20 && file_buf[k][i] < 0x7f) ? file_buf[k][i] : '?';
        want[i] = 0;
        if (strcmp(c->file, want)) __builtin_trap();
        if (strcmp(c->state, k == 0 ? "completed" : k == 1 ? "failed" : "posted")) __builtin_trap();
        if (strcmp(c->op, k == 0 ? "" : "max") || strcmp(c->dtype, k == 2 ? "" : "F32")) __builtin_trap();
    }
    cli_fr_free(&d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    if (data[0] & 1) writer_part(data + 1, size - 1);
    else parse_part(data + 1, size - 1);
    return 0;
}
