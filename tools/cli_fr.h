/* The flight recorder's dumps for `accel fr DIR` (tools/cli_fr.c): a reader of one rank's dump (untrusted bytes: a
   file anyone may have written into the directory; fuzzed by tests/fuzz/collectives/fuzz_fr_dump.c) and the
   analysis that names the first divergence between ranks. The format is written by accel_collectives.h's
   accel__coll_fr_write (its FLIGHT RECORDER section documents it):
     {"format":"accel-flight-recorder","version":1,"rank":R,"world_size":P,"pid":..,"reason":"..","now_us":..,
      "capacity":N,"recorded":M,"groups":[{"id":G,"name":"..","rank":r,"size":n},..],
      "calls":[{"seq":k,"group":G,"what":"all_reduce","op":"sum","dtype":"F32","count":..,"bytes":..,"root":..,
                "file":"train.c","line":88,"posted_us":..,"completed_us":..,"state":"completed|failed|posted"},..]}
   Unknown keys are skipped (a newer writer may add some); a missing required key, a wrong type, a number out of
   range or bytes that are not JSON make the dump unreadable with a message. Self-contained C99 (no accel calls), so
   the fuzz target builds it alone. */
#ifndef ACCEL_TOOLS_CLI_FR_H
#define ACCEL_TOOLS_CLI_FR_H
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CLI_FR_MAX_CALLS 1000000 /* ACCEL_FLIGHT_RECORDER_SIZE's limit */
#define CLI_FR_MAX_GROUPS 64
#define CLI_FR_MAX_DEPTH 32

typedef struct cli_fr_call {
    int64_t seq, group, count, bytes, root, line, posted_us, completed_us;
    char what[24], op[8], dtype[12], file[200], state[12];
} cli_fr_call;
typedef struct cli_fr_group {
    int64_t id, rank, size;
    char name[32];
} cli_fr_group;
typedef struct cli_fr_dump {
    int64_t rank, world_size, pid, now_us, capacity, recorded;
    char reason[96];
    cli_fr_group groups[CLI_FR_MAX_GROUPS];
    int ngroups;
    cli_fr_call *calls; /* malloc'ed; cli_fr_free */
    int ncalls;
} cli_fr_dump;

typedef struct cli_fr_rd {
    const char *p, *e;
    int depth;
    char *err;
    size_t errcap;
} cli_fr_rd;

static int cli_fr_fail(cli_fr_rd *r, const char *what) {
    if (r->err && r->errcap && !r->err[0]) snprintf(r->err, r->errcap, "%s at byte %ld", what, (long)(r->e - r->p));
    return -1;
}
static void cli_fr_ws(cli_fr_rd *r) {
    while (r->p < r->e && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r')) ++r->p;
}
static int cli_fr_lit(cli_fr_rd *r, char c) {
    cli_fr_ws(r);
    if (r->p >= r->e || *r->p != c) return -1;
    ++r->p;
    return 0;
}
static int cli_fr_hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}
/* A JSON string into out (cap bytes, NUL-terminated; longer strings are cut; non-ASCII becomes '?'). */
static int cli_fr_string(cli_fr_rd *r, char *out, size_t cap) {
    size_t n = 0;
    if (cli_fr_lit(r, '"')) return cli_fr_fail(r, "expected a string");
    for (;;) {
        unsigned char c;
        if (r->p >= r->e) return cli_fr_fail(r, "unterminated string");
        c = (unsigned char)*r->p++;
        if (c == '"') break;
        if (c < 0x20) return cli_fr_fail(r, "control character in a string");
        if (c == '\\') {
            if (r->p >= r->e) return cli_fr_fail(r, "unterminated escape");
            c = (unsigned char)*r->p++;
            switch (c) {
            case '"': case '\\': case '/': break;
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case 'n': c = '\n'; break;
            case 'r': c = '\r'; break;
            case 't': c = '\t'; break;
            case 'u': {
                int i, v = 0;
                if (r->e - r->p < 4) return cli_fr_fail(r, "truncated \\u escape");
                for (i = 0; i < 4; ++i) {
                    int h = cli_fr_hex(r->p[i]);
                    if (h < 0) return cli_fr_fail(r, "bad \\u escape");
                    v = v * 16 + h;
                }
                r->p += 4;
                c = v >= 0x20 && v < 0x7f ? (unsigned char)v : '?';
                break;
            }
            default: return cli_fr_fail(r, "bad escape");
            }
        } else if (c >= 0x80) {
            c = '?';
        }
        if (out && n + 1 < cap) out[n++] = (char)c;
    }
    if (out && cap) out[n] = 0;
    return 0;
}
/* An integer (no fraction or exponent: the writer writes none) within int64. */
static int cli_fr_int(cli_fr_rd *r, int64_t *v) {
    int neg = 0, any = 0;
    uint64_t u = 0;
    cli_fr_ws(r);
    if (r->p < r->e && *r->p == '-') { neg = 1; ++r->p; }
    while (r->p < r->e && *r->p >= '0' && *r->p <= '9') {
        unsigned d = (unsigned)(*r->p++ - '0');
        if (u > (UINT64_MAX - d) / 10) return cli_fr_fail(r, "number out of range");
        u = u * 10 + d;
        any = 1;
    }
    if (!any) return cli_fr_fail(r, "expected an integer");
    if (r->p < r->e && (*r->p == '.' || *r->p == 'e' || *r->p == 'E')) return cli_fr_fail(r, "expected an integer");
    if (u > (uint64_t)INT64_MAX + (uint64_t)neg) return cli_fr_fail(r, "number out of range");
    *v = neg ? (int64_t)(0 - u) : (int64_t)u;
    return 0;
}
/* Skips any JSON value (an unknown key's). */
static int cli_fr_skip(cli_fr_rd *r) {
    cli_fr_ws(r);
    if (r->p >= r->e) return cli_fr_fail(r, "unexpected end");
    if (*r->p == '"') return cli_fr_string(r, NULL, 0);
    if (*r->p == '{' || *r->p == '[') {
        char close = *r->p == '{' ? '}' : ']';
        int obj = *r->p == '{', first = 1;
        if (++r->depth > CLI_FR_MAX_DEPTH) return cli_fr_fail(r, "nesting too deep");
        ++r->p;
        for (;;) {
            if (!cli_fr_lit(r, close)) break;
            if (!first && cli_fr_lit(r, ',')) return cli_fr_fail(r, "expected ',' or a closing bracket");
            first = 0;
            if (obj && (cli_fr_string(r, NULL, 0) || cli_fr_lit(r, ':'))) return cli_fr_fail(r, "expected a key");
            if (cli_fr_skip(r)) return -1;
        }
        --r->depth;
        return 0;
    }
    if (*r->p == '-' || (*r->p >= '0' && *r->p <= '9')) {
        ++r->p;
        while (r->p < r->e && ((*r->p >= '0' && *r->p <= '9') || *r->p == '.' || *r->p == 'e' || *r->p == 'E' ||
                               *r->p == '+' || *r->p == '-'))
            ++r->p;
        return 0;
    }
    if (r->e - r->p >= 4 && (!memcmp(r->p, "true", 4) || !memcmp(r->p, "null", 4))) { r->p += 4; return 0; }
    if (r->e - r->p >= 5 && !memcmp(r->p, "false", 5)) { r->p += 5; return 0; }
    return cli_fr_fail(r, "not a JSON value");
}

/* Iterates an object: calls fn(r, key, user) for each member with the reader at the value. */
typedef int (*cli_fr_member_fn)(cli_fr_rd *r, const char *key, void *user);
static int cli_fr_object(cli_fr_rd *r, cli_fr_member_fn fn, void *user) {
    int first = 1;
    if (cli_fr_lit(r, '{')) return cli_fr_fail(r, "expected an object");
    if (++r->depth > CLI_FR_MAX_DEPTH) return cli_fr_fail(r, "nesting too deep");
    for (;;) {
        char key[32];
        if (!cli_fr_lit(r, '}')) break;
        if (!first && cli_fr_lit(r, ',')) return cli_fr_fail(r, "expected ',' or '}'");
        first = 0;
        if (cli_fr_string(r, key, sizeof key) || cli_fr_lit(r, ':')) return cli_fr_fail(r, "expected a key");
        if (fn(r, key, user)) return -1;
    }
    --r->depth;
    return 0;
}

#define CLI_FR_SEEN(bit) (*seen |= (1u << (bit)))
typedef struct cli_fr_call_ctx { cli_fr_call *c; unsigned seen; } cli_fr_call_ctx;
static int cli_fr_call_member(cli_fr_rd *r, const char *k, void *user) {
    cli_fr_call_ctx *x = (cli_fr_call_ctx *)user;
    cli_fr_call *c = x->c;
    unsigned *seen = &x->seen;
    if (!strcmp(k, "seq")) { CLI_FR_SEEN(0); return cli_fr_int(r, &c->seq); }
    if (!strcmp(k, "group")) { CLI_FR_SEEN(1); return cli_fr_int(r, &c->group); }
    if (!strcmp(k, "what")) { CLI_FR_SEEN(2); return cli_fr_string(r, c->what, sizeof c->what); }
    if (!strcmp(k, "state")) { CLI_FR_SEEN(3); return cli_fr_string(r, c->state, sizeof c->state); }
    if (!strcmp(k, "op")) return cli_fr_string(r, c->op, sizeof c->op);
    if (!strcmp(k, "dtype")) return cli_fr_string(r, c->dtype, sizeof c->dtype);
    if (!strcmp(k, "file")) return cli_fr_string(r, c->file, sizeof c->file);
    if (!strcmp(k, "count")) return cli_fr_int(r, &c->count);
    if (!strcmp(k, "bytes")) return cli_fr_int(r, &c->bytes);
    if (!strcmp(k, "root")) return cli_fr_int(r, &c->root);
    if (!strcmp(k, "line")) return cli_fr_int(r, &c->line);
    if (!strcmp(k, "posted_us")) return cli_fr_int(r, &c->posted_us);
    if (!strcmp(k, "completed_us")) return cli_fr_int(r, &c->completed_us);
    return cli_fr_skip(r);
}
static int cli_fr_group_member(cli_fr_rd *r, const char *k, void *user) {
    cli_fr_group *g = (cli_fr_group *)user;
    if (!strcmp(k, "id")) return cli_fr_int(r, &g->id);
    if (!strcmp(k, "name")) return cli_fr_string(r, g->name, sizeof g->name);
    if (!strcmp(k, "rank")) return cli_fr_int(r, &g->rank);
    if (!strcmp(k, "size")) return cli_fr_int(r, &g->size);
    return cli_fr_skip(r);
}
typedef struct cli_fr_dump_ctx {
    cli_fr_dump *d;
    unsigned seen;
    char format[32];
    int64_t version;
    int cap;
} cli_fr_dump_ctx;
static int cli_fr_dump_member(cli_fr_rd *r, const char *k, void *user) {
    cli_fr_dump_ctx *x = (cli_fr_dump_ctx *)user;
    cli_fr_dump *d = x->d;
    unsigned *seen = &x->seen;
    if (!strcmp(k, "format")) { CLI_FR_SEEN(0); return cli_fr_string(r, x->format, sizeof x->format); }
    if (!strcmp(k, "version")) { CLI_FR_SEEN(1); return cli_fr_int(r, &x->version); }
    if (!strcmp(k, "rank")) { CLI_FR_SEEN(2); return cli_fr_int(r, &d->rank); }
    if (!strcmp(k, "world_size")) { CLI_FR_SEEN(3); return cli_fr_int(r, &d->world_size); }
    if (!strcmp(k, "pid")) return cli_fr_int(r, &d->pid);
    if (!strcmp(k, "reason")) return cli_fr_string(r, d->reason, sizeof d->reason);
    if (!strcmp(k, "now_us")) return cli_fr_int(r, &d->now_us);
    if (!strcmp(k, "capacity")) return cli_fr_int(r, &d->capacity);
    if (!strcmp(k, "recorded")) return cli_fr_int(r, &d->recorded);
    if (!strcmp(k, "groups") || !strcmp(k, "calls")) {
        int groups = k[0] == 'g', first = 1;
        CLI_FR_SEEN(groups ? 4 : 5);
        if (cli_fr_lit(r, '[')) return cli_fr_fail(r, "expected an array");
        for (;;) {
            if (!cli_fr_lit(r, ']')) break;
            if (!first && cli_fr_lit(r, ',')) return cli_fr_fail(r, "expected ',' or ']'");
            first = 0;
            if (groups) {
                cli_fr_group *g;
                if (d->ngroups >= CLI_FR_MAX_GROUPS) return cli_fr_fail(r, "more than 64 groups");
                g = &d->groups[d->ngroups];
                memset(g, 0, sizeof *g);
                g->id = -1;
                if (cli_fr_object(r, cli_fr_group_member, g)) return -1;
                if (g->id != d->ngroups || g->rank < 0 || g->size < 1 || g->rank >= g->size)
                    return cli_fr_fail(r, "a group's id, rank or size is out of range");
                ++d->ngroups;
            } else {
                cli_fr_call_ctx cx;
                if (d->ncalls >= CLI_FR_MAX_CALLS) return cli_fr_fail(r, "more than 1000000 calls");
                if (d->ncalls == x->cap) {
                    int nc = x->cap ? x->cap * 2 : 64;
                    cli_fr_call *p = (cli_fr_call *)realloc(d->calls, sizeof *p * (size_t)nc);
                    if (!p) return cli_fr_fail(r, "out of memory");
                    d->calls = p;
                    x->cap = nc;
                }
                cx.c = &d->calls[d->ncalls];
                cx.seen = 0;
                memset(cx.c, 0, sizeof *cx.c);
                cx.c->root = -1;
                if (cli_fr_object(r, cli_fr_call_member, &cx)) return -1;
                if ((cx.seen & 15u) != 15u) return cli_fr_fail(r, "a call lacks seq, group, what or state");
                if (cx.c->seq < 0 || cx.c->group < 0 || cx.c->group >= CLI_FR_MAX_GROUPS)
                    return cli_fr_fail(r, "a call's seq or group is out of range");
                if (strcmp(cx.c->state, "completed") && strcmp(cx.c->state, "failed") && strcmp(cx.c->state, "posted"))
                    return cli_fr_fail(r, "a call's state is not completed, failed or posted");
                ++d->ncalls;
            }
        }
        return 0;
    }
    return cli_fr_skip(r);
}

static void cli_fr_free(cli_fr_dump *d) {
    if (!d) return;
    free(d->calls);
    d->calls = NULL;
    d->ncalls = 0;
}

/* Reads one dump. 0 ok; -1 with err set (d is then empty). */
static int cli_fr_parse(const char *text, size_t n, cli_fr_dump *d, char *err, size_t errcap) {
    cli_fr_rd r;
    cli_fr_dump_ctx x;
    int i, rc;
    memset(d, 0, sizeof *d);
    memset(&x, 0, sizeof x);
    if (err && errcap) err[0] = 0;
    r.p = text;
    r.e = text + n;
    r.depth = 0;
    r.err = err;
    r.errcap = errcap;
    x.d = d;
    rc = cli_fr_object(&r, cli_fr_dump_member, &x);
    if (!rc) {
        cli_fr_ws(&r);
        if (r.p != r.e) rc = cli_fr_fail(&r, "bytes after the document");
    }
    if (!rc && ((x.seen & 63u) != 63u || strcmp(x.format, "accel-flight-recorder")))
        rc = cli_fr_fail(&r, "not an accel flight recorder dump (format, version, rank, world_size, groups, calls)");
    if (!rc && x.version != 1) rc = cli_fr_fail(&r, "unsupported version (this reader knows 1)");
    if (!rc && (d->world_size < 1 || d->rank < 0 || d->rank >= d->world_size))
        rc = cli_fr_fail(&r, "rank or world_size out of range");
    for (i = 0; !rc && i < d->ncalls; ++i)
        if (d->calls[i].group >= d->ngroups) rc = cli_fr_fail(&r, "a call names a group the dump does not list");
    if (rc) cli_fr_free(d);
    return rc;
}

/* ------------------------------------------------------------------------------------------------ the analysis */
typedef struct cli_fr_out { char *buf; size_t cap, len; } cli_fr_out;
static void cli_fr_put(cli_fr_out *o, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void cli_fr_put(cli_fr_out *o, const char *fmt, ...) {
    va_list ap;
    int k;
    if (o->len + 1 >= o->cap) return;
    va_start(ap, fmt);
    k = vsnprintf(o->buf + o->len, o->cap - o->len, fmt, ap);
    va_end(ap);
    if (k > 0) o->len = o->len + (size_t)k < o->cap ? o->len + (size_t)k : o->cap - 1;
}
static const cli_fr_call *cli_fr_find(const cli_fr_dump *d, int64_t group, int64_t seq) {
    int i;
    for (i = d->ncalls - 1; i >= 0; --i) /* newest first: a wrapped ring holds each (group, seq) once */
        if (d->calls[i].group == group && d->calls[i].seq == seq) return &d->calls[i];
    return NULL;
}
static const cli_fr_call *cli_fr_last(const cli_fr_dump *d, int64_t group) {
    const cli_fr_call *best = NULL;
    int i;
    for (i = 0; i < d->ncalls; ++i)
        if (d->calls[i].group == group && (!best || d->calls[i].seq > best->seq)) best = &d->calls[i];
    return best;
}
static int cli_fr_same(const cli_fr_call *a, const cli_fr_call *b) {
    return !strcmp(a->what, b->what) && !strcmp(a->op, b->op) && !strcmp(a->dtype, b->dtype) && a->count == b->count &&
           a->root == b->root;
}
static void cli_fr_describe(cli_fr_out *o, const cli_fr_call *c) {
    cli_fr_put(o, "%s(", c->what);
    if (c->op[0]) cli_fr_put(o, "%s, ", c->op);
    if (c->dtype[0]) cli_fr_put(o, "%s, ", c->dtype);
    cli_fr_put(o, "count %lld", (long long)c->count);
    if (c->root > 0) cli_fr_put(o, ", root %lld", (long long)c->root);
    cli_fr_put(o, ") at %s:%lld", c->file[0] ? c->file : "?", (long long)c->line);
}
/* the ranks (dump indices in idx[0..n)) as "rank 0, 1" */
static void cli_fr_ranks(cli_fr_out *o, const cli_fr_dump *d, const int *idx, int n) {
    int i;
    cli_fr_put(o, n == 1 ? "rank " : "ranks ");
    for (i = 0; i < n; ++i) cli_fr_put(o, "%s%lld", i ? ", " : "", (long long)d[idx[i]].rank);
}

/* Names the first divergence of every group over the dumps d[0..n) (one per rank). Writes the report into
   buf (cap bytes). Returns the number of groups with a divergence (0: every rank made the same calls). */
static int cli_fr_analyze(const cli_fr_dump *d, int n, char *buf, size_t cap) {
    cli_fr_out o;
    int g, ng = 0, found = 0, i, *in, *out;
    o.buf = buf;
    o.cap = cap;
    o.len = 0;
    if (cap) buf[0] = 0;
    if (n <= 0) return 0;
    in = (int *)malloc(sizeof(int) * (size_t)n * 2);
    if (!in) { cli_fr_put(&o, "out of memory\n"); return 0; }
    out = in + n;
    for (i = 0; i < n; ++i) ng = d[i].ngroups > ng ? d[i].ngroups : ng;
    for (g = 0; g < ng; ++g) {
        int64_t lo = 0, hi = -1, k;
        int members = 0, done = 0;
        for (i = 0; i < n; ++i) {
            const cli_fr_call *last;
            int64_t first = INT64_MAX;
            int j;
            if (g >= d[i].ngroups) continue;
            ++members;
            last = cli_fr_last(&d[i], g);
            if (last && last->seq > hi) hi = last->seq;
            for (j = 0; j < d[i].ncalls; ++j)
                if (d[i].calls[j].group == g && d[i].calls[j].seq < first) first = d[i].calls[j].seq;
            /* a ring that wrapped: only calls every such rank still holds are compared */
            if (d[i].recorded > d[i].capacity && first != INT64_MAX && first > lo) lo = first;
        }
        if (members < 2) continue;
        for (k = lo; k <= hi && !done; ++k) {
            const cli_fr_call *ref = NULL;
            int nin = 0, nout = 0, j, nmaj = 0, best = -1;
            for (i = 0; i < n; ++i) {
                if (g >= d[i].ngroups) continue;
                if (cli_fr_find(&d[i], g, k)) in[nin++] = i;
                else out[nout++] = i;
            }
            if (nout > 0 && nin > 0) { /* some ranks never made call #k */
                const cli_fr_call *c = cli_fr_find(&d[in[0]], g, k);
                cli_fr_put(&o, "group %d (%s): call #%lld: ", g, d[in[0]].groups[g].name, (long long)k);
                cli_fr_ranks(&o, d, out, nout);
                cli_fr_put(&o, " never made it; ");
                cli_fr_ranks(&o, d, in, nin);
                cli_fr_put(&o, " made ");
                cli_fr_describe(&o, c);
                cli_fr_put(&o, " (%s)\n", c->state);
                for (j = 0; j < nout; ++j) {
                    const cli_fr_call *l = cli_fr_last(&d[out[j]], g);
                    cli_fr_put(&o, "  rank %lld's last call in this group: ", (long long)d[out[j]].rank);
                    if (l) {
                        cli_fr_put(&o, "#%lld ", (long long)l->seq);
                        cli_fr_describe(&o, l);
                        cli_fr_put(&o, " (%s)\n", l->state);
                    } else {
                        cli_fr_put(&o, "none recorded\n");
                    }
                }
                done = 1;
                break;
            }
            if (nin == 0) continue;
            /* every rank made #k: the majority's call is the reference */
            for (i = 0; i < nin; ++i) {
                int votes = 0;
                const cli_fr_call *a = cli_fr_find(&d[in[i]], g, k);
                for (j = 0; j < nin; ++j) votes += cli_fr_same(a, cli_fr_find(&d[in[j]], g, k));
                if (votes > nmaj) { nmaj = votes; best = i; }
            }
            ref = cli_fr_find(&d[in[best]], g, k);
            nout = 0;
            for (i = 0; i < nin; ++i)
                if (!cli_fr_same(ref, cli_fr_find(&d[in[i]], g, k))) out[nout++] = in[i];
            if (nout > 0) {
                int nsame = 0, *same = (int *)malloc(sizeof(int) * (size_t)nin);
                if (!same) break;
                for (i = 0; i < nin; ++i)
                    if (cli_fr_same(ref, cli_fr_find(&d[in[i]], g, k))) same[nsame++] = in[i];
                for (j = 0; j < nout; ++j) {
                    const cli_fr_call *c = cli_fr_find(&d[out[j]], g, k), *next = cli_fr_find(&d[same[0]], g, k + 1);
                    cli_fr_put(&o, "group %d (%s): call #%lld: rank %lld made a different call: ", g,
                               d[out[j]].groups[g].name, (long long)k, (long long)d[out[j]].rank);
                    cli_fr_describe(&o, c);
                    cli_fr_put(&o, "; ");
                    cli_fr_ranks(&o, d, same, nsame);
                    cli_fr_put(&o, " made ");
                    cli_fr_describe(&o, ref);
                    cli_fr_put(&o, "\n");
                    if (next && cli_fr_same(c, next)) {
                        cli_fr_put(&o, "  rank %lld skipped a call: its #%lld is the others' #%lld (",
                                   (long long)d[out[j]].rank, (long long)k, (long long)(k + 1));
                        cli_fr_describe(&o, next);
                        cli_fr_put(&o, ")\n");
                    }
                }
                free(same);
                done = 1;
                break;
            }
            /* the same call everywhere: a rank still inside it while others completed it */
            nout = 0;
            for (i = 0; i < nin; ++i)
                if (strcmp(cli_fr_find(&d[in[i]], g, k)->state, "completed")) out[nout++] = in[i];
            if (nout > 0 && nout < nin) {
                int ndone = 0, *dn = (int *)malloc(sizeof(int) * (size_t)nin);
                if (!dn) break;
                for (i = 0; i < nin; ++i)
                    if (!strcmp(cli_fr_find(&d[in[i]], g, k)->state, "completed")) dn[ndone++] = in[i];
                for (j = 0; j < nout; ++j) {
                    const cli_fr_call *c = cli_fr_find(&d[out[j]], g, k);
                    cli_fr_put(&o, "group %d (%s): call #%lld: rank %lld is still inside ", g, d[out[j]].groups[g].name,
                               (long long)k, (long long)d[out[j]].rank);
                    cli_fr_describe(&o, c);
                    cli_fr_put(&o, " (%s", c->state);
                    if (d[out[j]].now_us > c->posted_us && c->posted_us > 0)
                        cli_fr_put(&o, ", posted %.1f s before its dump",
                                   1e-6 * (double)(d[out[j]].now_us - c->posted_us));
                    cli_fr_put(&o, "); ");
                    cli_fr_ranks(&o, d, dn, ndone);
                    c = cli_fr_find(&d[dn[0]], g, k);
                    cli_fr_put(&o, " completed it at %s:%lld\n", c->file[0] ? c->file : "?", (long long)c->line);
                }
                free(dn);
                done = 1;
                break;
            }
        }
        found += done;
    }
    free(in);
    if (!found) cli_fr_put(&o, "no divergence: every rank's recorded calls agree\n");
    return found;
}
#endif
