/* `accel fr DIR`: reads every rank's flight recorder dump in DIR (rank<R>.json, written by accel_collectives.h on a
   deadline, a fatal collective error, SIGUSR1 or accel_coll_fr_dump) and names the first divergence of each group:
   the rank that never made call #k, the rank that made a different call (what, op, dtype, count, root), or the rank
   still inside #k while the others completed it — with the call sites. Exit status: 0 no divergence, 1 a divergence
   was named, 2 usage error or no readable dump. */
#include "cli.h"
#include "cli_fr.h"
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t cap = 0, len = 0, k;
    if (!f) return NULL;
    for (;;) {
        if (len == cap) {
            char *p;
            if (cap >= ((size_t)256 << 20)) { free(buf); fclose(f); return NULL; } /* no dump is that large */
            cap = cap ? cap * 2 : 65536;
            p = (char *)realloc(buf, cap);
            if (!p) { free(buf); fclose(f); return NULL; }
            buf = p;
        }
        k = fread(buf + len, 1, cap - len, f);
        len += k;
        if (k == 0) break;
    }
    fclose(f);
    *n = len;
    return buf;
}

static int is_dump_name(const char *s) { /* rank<digits>.json */
    size_t n = strlen(s), i;
    if (n < 10 || strncmp(s, "rank", 4) || strcmp(s + n - 5, ".json")) return 0;
    for (i = 4; i < n - 5; ++i)
        if (s[i] < '0' || s[i] > '9') return 0;
    return 1;
}

int cli_fr(int argc, char **argv) {
    DIR *dir;
    struct dirent *de;
    cli_fr_dump *d = NULL;
    int n = 0, cap = 0, i, j, bad = 0, found;
    char *report;
    if (argc != 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        fprintf(argc == 2 ? stdout : stderr,
                "usage: accel fr DIR\n  reads every rank's flight recorder dump (DIR/rank<R>.json) and names the first "
                "divergence\n  between ranks: who never made call #k, made another call, or is still inside it\n");
        return argc == 2 ? 0 : 2;
    }
    dir = opendir(argv[1]);
    if (!dir) { fprintf(stderr, "accel fr: cannot open %s\n", argv[1]); return 2; }
    while ((de = readdir(dir)) != NULL) {
        char path[4096], err[160];
        char *text;
        size_t len = 0;
        if (!is_dump_name(de->d_name)) continue;
        snprintf(path, sizeof path, "%s/%s", argv[1], de->d_name);
        text = read_file(path, &len);
        if (!text) { fprintf(stderr, "accel fr: cannot read %s\n", path); bad = 1; continue; }
        if (n == cap) {
            cli_fr_dump *p = (cli_fr_dump *)realloc(d, sizeof *d * (size_t)(cap ? cap * 2 : 8));
            if (!p) { free(text); bad = 1; break; }
            d = p;
            cap = cap ? cap * 2 : 8;
        }
        if (cli_fr_parse(text, len, &d[n], err, sizeof err) != 0) {
            fprintf(stderr, "accel fr: %s: %s\n", path, err);
            bad = 1;
        } else {
            ++n;
        }
        free(text);
    }
    closedir(dir);
    if (n == 0) {
        fprintf(stderr, "accel fr: no readable dump (rank<R>.json) in %s\n", argv[1]);
        free(d);
        return 2;
    }
    /* one dump per rank, ordered by rank; every dump of one job */
    for (i = 1; i < n; ++i)
        for (j = i; j > 0 && d[j - 1].rank > d[j].rank; --j) { cli_fr_dump t = d[j]; d[j] = d[j - 1]; d[j - 1] = t; }
    for (i = 0; i < n; ++i) {
        if (i && d[i].rank == d[i - 1].rank) {
            fprintf(stderr, "accel fr: two dumps of rank %lld\n", (long long)d[i].rank);
            bad = 1;
        }
        if (d[i].world_size != d[0].world_size) {
            fprintf(stderr, "accel fr: rank %lld's dump is of a job of %lld ranks, rank %lld's of %lld\n",
                    (long long)d[i].rank, (long long)d[i].world_size, (long long)d[0].rank, (long long)d[0].world_size);
            bad = 1;
        }
        printf("rank %lld: %d calls recorded (pid %lld), dumped on: %s\n", (long long)d[i].rank, d[i].ncalls,
               (long long)d[i].pid, d[i].reason);
    }
    if (n < d[0].world_size)
        printf("note: %d of %lld ranks dumped; a rank without a dump may be dead (or send it SIGUSR1)\n", n,
               (long long)d[0].world_size);
    report = (char *)malloc(65536);
    found = 0;
    if (report && !bad) {
        found = cli_fr_analyze(d, n, report, 65536);
        fputs(report, stdout);
    }
    free(report);
    for (i = 0; i < n; ++i) cli_fr_free(&d[i]);
    free(d);
    return bad ? 2 : found ? 1 : 0;
}
