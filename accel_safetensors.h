/* accel_safetensors.h — the safetensors format layer of accel: safetensors files read and written from host or
   device memory, Accelerate's sharded save_model / load_model with its index, and the strict JSON reader and XXH64
   they rest on. Builds on accel.h alone; accel_ckpt.h (checkpoints) and accel_bigmodel.h (device maps, dispatch)
   build on it. The ACCEL_IMPLEMENTATION TU needs stb_ds.h on the include path, as the core does (Debian:
   libstb-dev, -I/usr/include/stb).

   CONTENTS
     USAGE                        write a file, read it, save_model / load_model
     FILES                        a file, a sharded model, crash safety
     OPTIONS                      max_shard_size, memory
     ERRORS
     THREADS AND STREAMS
     DIFFERENCES FROM ACCELERATE  and from the reference writer

   USAGE
       accel_st_save(&acc, "w.safetensors", params, n, NULL, 0);  // atomic write; host or device tensors
       accel_st_file *f;                                          // any safetensors file (mmap; all checks first)
       accel_st_file_open(&acc, "w.safetensors", &f);
       accel_st_file_load(f, &params[0]);                 // dtype and shape checked; host or device destination
       accel_st_file_load_all(f, params, n);              // all or nothing
       accel_st_file_destroy(f);
       accel_st_save_model(&acc, "out", params, n, "10GB"); // model.safetensors, or shards + index (collective)
       accel_st_load_model(&acc, "out", params, n);         // either form, every tensor checked first (local)

   FILES
     A file is laid out as the reference writer lays it out (DIFFERENCES below) and written to "<path>.tmp.<pid>",
     fsync'd and renamed (the core's atomic write): a reader sees the old file or the new one. save_model writes
     model.safetensors when the list fits in max_shard_size, else model-00001-of-0000N.safetensors and
     model.safetensors.index.json (json.dumps(indent=2, sort_keys=True) layout; huggingface_hub's plan,
     docs/semantics.md §6, policy 7), and removes stale shards of the prefix.

   OPTIONS
     max_shard_size  a policy-6 size ("10GB", "5MiB", "1000"; accel_parse_size); NULL → "10GB".
     memory          host memory from desc.host_allocator, the staging buffers of device tensors from
                     desc.pinned_allocator (accel.h "MEMORY"); acc NULL: the defaults. A file remembers its acc.

   ERRORS
     Every reader checks everything before it copies a byte (all-or-nothing). accel_st_file_open makes every check
     of the reference reader, in its order: ACCEL_ERR_FORMAT names the problem, ACCEL_ERR_UNSUPPORTED is a valid
     dtype or rank accel does not handle. A destination whose dtype or shape differs is ACCEL_ERR_INVALID_ARGUMENT
     naming the tensor, expected and found. A path that is not a regular file (a FIFO, a device, a directory) is
     ACCEL_ERR_IO "is not a regular file", refused at once (a FIFO is never opened blocking).

   THREADS AND STREAMS
     One thread at a time per accel / accel_st_file. Device buffers (found with cudaPointerGetAttributes in CUDA
     builds) are staged through two pinned 8 MiB buffers on acc->stream (NULL acc: the default stream); a load to a
     device preads each staging chunk with up to 4 threads (as many as CPUs), started with the buffers and joined
     before the call returns (link with -pthread where libc needs it). A call returns when the data is on disk / in
     the destination. save_model is a collective (the main process writes, every process returns its verdict);
     everything else is local.

   DIFFERENCES FROM ACCELERATE (deliberate; docs/semantics.md §6 and "Policies")
     - One size parser (policy 6); sharding is huggingface_hub's greedy algorithm (§6, policy 7). Tensors that share
       storage are not detected (accel_tensor has no storage identity): every entry is saved.
     - save_model also removes a stale model.safetensors.index.json (single-file save) or a stale
       model.safetensors (sharded save) so a loader never mixes generations.
     - JSON is read strictly: duplicate keys, invalid UTF-8, lone surrogates and trailing garbage are errors.
     - Files are written as the reference writer writes them: tensors in its Dtype enum order (descending: U64 I64
       F64 F32 U32 I32 BF16 F16 U16 I16 F8_E4M3 F8_E5M2 I8 U8 BOOL), then by name; the header padded with spaces so
       the data section, and every tensor, is aligned (padding between tensors would be a hole that the reference
       reader rejects). A tensor may be named "" (only "__metadata__" is reserved). Metadata keys and values are
       read whole, U+0000 included (accel_st_file_metadata gives their lengths); the writer takes C strings, so it
       cannot write a NUL.
*/
#ifndef ACCEL_SAFETENSORS_H_INCLUDED
#define ACCEL_SAFETENSORS_H_INCLUDED
#include "accel.h"
#ifdef __cplusplus
extern "C" {
#endif

/* -------------------------------------------------------------------------------------------------- safetensors */
/* Writes `path` atomically (temporary name, fsync, rename, directory fsync). metadata: nmeta (key, value) pairs
   stored as __metadata__ (NULL/0 for none). Tensors may live on the host or (CUDA builds) the device. */
ACCEL_API accel_result accel_st_save(accel *acc, const char *path, const accel_tensor *tensors, int n,
                                                   const char *const *metadata, int nmeta);

typedef struct accel_st_file accel_st_file;
typedef struct accel_st_entry {
    const char *name;
    accel_dtype dtype;
    int ndim;
    int64_t shape[ACCEL_MAX_DIMS];
    uint64_t begin, end;      /* data_offsets, relative to the data section */
    const void *data;         /* zero-copy view (mmap) of the bytes */
} accel_st_entry;

/* Opens and fully validates a file (every check of the reference reader, in its order, before any byte is
   trusted). Errors: ACCEL_ERR_IO, ACCEL_ERR_NOT_FOUND, ACCEL_ERR_FORMAT (the message names the problem),
   ACCEL_ERR_UNSUPPORTED (a valid dtype or rank accel does not handle). *out is NULL on failure. The file object
   remembers acc (NULL: the default allocator, errors in accel_last_error(NULL)). */
ACCEL_API accel_result accel_st_file_open(accel *acc, const char *path, accel_st_file **out);
/* Same checks on bytes in memory (not copied: they must outlive the file object). */
ACCEL_API accel_result accel_st_file_open_memory(accel *acc, const void *bytes, size_t size, accel_st_file **out);
ACCEL_API void accel_st_file_destroy(accel_st_file *f); /* NULL ok */
ACCEL_API int accel_st_file_count(const accel_st_file *f);                 /* tensors (entries sorted by offset) */
ACCEL_API const accel_st_entry *accel_st_file_entry(const accel_st_file *f, int i);
ACCEL_API int accel_st_file_find(const accel_st_file *f, const char *name); /* index or -1 */
ACCEL_API int accel_st_file_metadata_count(const accel_st_file *f);
/* Entry i of __metadata__ (in the file's order). Keys and values are NUL-terminated, and may contain U+0000 as the
   reference writer allows: *key_len / *value_len (each may be NULL) give the whole length. */
ACCEL_API accel_result accel_st_file_metadata(const accel_st_file *f, int i, const char **key, size_t *key_len,
                                                const char **value, size_t *value_len);
/* The value of the key that equals `key` as a whole (a stored "k\0x" is not "k"); NULL if absent. */
ACCEL_API const char *accel_st_file_metadata_get(const accel_st_file *f, const char *key);
/* Copies the tensor named dst->name into dst->ptr (host or device) after checking dtype and shape; a mismatch is
   ACCEL_ERR_INVALID_ARGUMENT naming the tensor, expected vs found. */
ACCEL_API accel_result accel_st_file_load(accel_st_file *f, const accel_tensor *dst);
/* All or nothing: every destination is checked before the first byte is copied. */
ACCEL_API accel_result accel_st_file_load_all(accel_st_file *f, const accel_tensor *dst, int n);

/* ----------------------------------------------------------------------------------------------- sharded models */
/* The huggingface_hub plan (docs/semantics.md §6, policy 7): shard_of[i] = shard of tensor i (0-based), shard_bytes[s],
   *n_shards. shard_of must hold n ints, shard_bytes n uint64 (n_shards <= n). Shards are numbered in the order
   they are appended, so an oversize tensor can precede earlier small ones. */
ACCEL_API accel_result accel_st_plan_shards(accel *acc, const uint64_t *sizes, int n, uint64_t max_shard_size,
                                              int *shard_of, uint64_t *shard_bytes, int *n_shards);
/* "model.safetensors" (n_shards == 1) or "model-00001-of-00003.safetensors" (shard is 0-based). */
ACCEL_API void accel_st_shard_name(int shard, int n_shards, char *out, size_t cap);
/* Accelerate's save_model: a single model.safetensors when it fits, else shards + model.safetensors.index.json
   (json.dumps(indent=2, sort_keys=True) layout). max_shard_size NULL → "10GB". Stale shards of the prefix are
   removed. An empty list writes nothing. Collective: the main process writes (each local main process with
   save_on_each_node), every process returns the same verdict. */
ACCEL_API accel_result accel_st_save_model(accel *acc, const char *dir, const accel_tensor *tensors, int n,
                                             const char *max_shard_size);
ACCEL_API accel_result accel_st_save_model_bytes(accel *acc, const char *dir, const accel_tensor *tensors, int n,
                                                   uint64_t max_shard_size, int save_on_each_node);
/* Loads dir/model.safetensors.index.json (sharded) or dir/model.safetensors; every tensor must be present with
   the same dtype/shape and the files must hold no other tensors; all checked before anything is copied. Local. */
ACCEL_API accel_result accel_st_load_model(accel *acc, const char *dir, const accel_tensor *tensors, int n);

/* XXH64 (the checksum of accel_ckpt.h's marker), exposed for tools and tests. */
ACCEL_API uint64_t accel_st_xxh64(const void *data, size_t n, uint64_t seed);

#ifdef __cplusplus
}
#endif
#endif /* ACCEL_SAFETENSORS_H_INCLUDED */

/* ========================================================================================== implementation */
#if defined(ACCEL_IMPLEMENTATION) && !defined(ACCEL__SAFETENSORS_IMPL_DONE)
#define ACCEL__SAFETENSORS_IMPL_DONE
/* CONTENTS (the core's private services — allocation, errors, byte order, UTF-8, string builder, files, agreement —
   come from accel.h's implementation section, which precedes this one in the same TU)
     0. includes, allocation shorthands
     1. XXH64
     2. JSON reader (strict)
     3. device staging (two pinned buffers, parallel readers)
     4. safetensors writer
     5. safetensors reader (accel_st_file)
     6. sharded models: plan, save_model, the index, load_model
   LENT to accel_ckpt.h and accel_bigmodel.h, whose implementations follow in the same TU: accel__st_strndup /
   _zalloc / _strp_cmp / _shape_str / _safe_file_name / _sb_u64; XXH64 (accel__st_xxh64 state, _init / _update /
   _final); the JSON reader (accel__st_json, _json_parse / _json_free / _json_failed, _jget / _jkeyp / _jstr / _ju64,
   ACCEL__ST_J_*); the staging (accel__st_stage, _stage_begin / _stage_end, _is_device_ptr, _write_from_device,
   _stage_to_device with its convert step); the writer (accel__st_save, _layout with accel__st_item, _check_tensors,
   _name_file / _name_file_cmp, ACCEL__ST_IO_CHUNK) and the reader (struct accel_st_file's fields, accel__st_piece,
   _new / _map / _parse, _check_dst, _copy / _copy_mapped, _entryp_name_cmp). */

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <unistd.h>
#include <dirent.h>
#include <sys/types.h>
#include <sys/stat.h>
#include <sys/mman.h>
#include <pthread.h>

/* stb_ds.h: the core's implementation section included it (and emitted its implementation through the hooks). */

/* Allocation shorthands over acc's host allocator (NULL with the allocator's error recorded on acc). */
static char *accel__st_strndup(accel *acc, const char *s, size_t n) { /* s[0..n) + NUL */
    char *p = (char *)accel_host_alloc(acc, n + 1);
    if (p) { memcpy(p, s, n); p[n] = 0; }
    return p;
}
static void *accel__st_zalloc(accel *acc, size_t n, size_t size) { /* n zeroed elements (at least one) */
    void *p;
    if (n == 0) n = 1;
    if (size && n > (size_t)-1 / size) {
        ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "%zu elements of %zu bytes do not fit in memory", n, size);
        return NULL;
    }
    p = accel_host_alloc(acc, n * size);
    if (p) memset(p, 0, n * size);
    return p;
}

/* ----------------------------------------------------------------------------------------------------- 1. XXH64 */
#define ACCEL__ST_XP1 11400714785074694791ull
#define ACCEL__ST_XP2 14029467366897019727ull
#define ACCEL__ST_XP3 1609587929392839161ull
#define ACCEL__ST_XP4 9650029242287828579ull
#define ACCEL__ST_XP5 2870177450012600261ull

typedef struct accel__st_xxh64 {
    uint64_t v[4], total;
    unsigned char buf[32];
    size_t nbuf;
    uint64_t seed;
} accel__st_xxh64;

/* XXH64 reads its input as little-endian words: the core's accel__get_u64/u32. */
static ACCEL_INLINE uint64_t accel__st_rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
static ACCEL_INLINE uint64_t accel__st_xround(uint64_t acc, uint64_t in) {
    acc += in * ACCEL__ST_XP2;
    acc = accel__st_rotl64(acc, 31);
    return acc * ACCEL__ST_XP1;
}
static ACCEL_INLINE uint64_t accel__st_xmerge(uint64_t acc, uint64_t val) {
    acc ^= accel__st_xround(0, val);
    return acc * ACCEL__ST_XP1 + ACCEL__ST_XP4;
}
static void accel__st_xxh64_init(accel__st_xxh64 *h, uint64_t seed) {
    memset(h, 0, sizeof *h);
    h->seed = seed;
    h->v[0] = seed + ACCEL__ST_XP1 + ACCEL__ST_XP2;
    h->v[1] = seed + ACCEL__ST_XP2;
    h->v[2] = seed;
    h->v[3] = seed - ACCEL__ST_XP1;
}
static void accel__st_xxh64_update(accel__st_xxh64 *h, const void *data, size_t n) {
    const unsigned char *p = (const unsigned char *)data, *end = p + n;
    h->total += n;
    if (h->nbuf + n < 32) {
        if (n) memcpy(h->buf + h->nbuf, p, n);
        h->nbuf += n;
        return;
    }
    if (h->nbuf) {
        size_t take = 32 - h->nbuf;
        memcpy(h->buf + h->nbuf, p, take);
        p += take;
        h->v[0] = accel__st_xround(h->v[0], accel__get_u64(h->buf));
        h->v[1] = accel__st_xround(h->v[1], accel__get_u64(h->buf + 8));
        h->v[2] = accel__st_xround(h->v[2], accel__get_u64(h->buf + 16));
        h->v[3] = accel__st_xround(h->v[3], accel__get_u64(h->buf + 24));
        h->nbuf = 0;
    }
    {
        uint64_t v0 = h->v[0], v1 = h->v[1], v2 = h->v[2], v3 = h->v[3];
        while ((size_t)(end - p) >= 32) {
            v0 = accel__st_xround(v0, accel__get_u64(p));
            v1 = accel__st_xround(v1, accel__get_u64(p + 8));
            v2 = accel__st_xround(v2, accel__get_u64(p + 16));
            v3 = accel__st_xround(v3, accel__get_u64(p + 24));
            p += 32;
        }
        h->v[0] = v0; h->v[1] = v1; h->v[2] = v2; h->v[3] = v3;
    }
    if (p < end) {
        memcpy(h->buf, p, (size_t)(end - p));
        h->nbuf = (size_t)(end - p);
    }
}
static uint64_t accel__st_xxh64_final(const accel__st_xxh64 *h) {
    uint64_t r;
    const unsigned char *p = h->buf, *end = h->buf + h->nbuf;
    if (h->total >= 32) {
        r = accel__st_rotl64(h->v[0], 1) + accel__st_rotl64(h->v[1], 7) + accel__st_rotl64(h->v[2], 12) +
            accel__st_rotl64(h->v[3], 18);
        r = accel__st_xmerge(r, h->v[0]);
        r = accel__st_xmerge(r, h->v[1]);
        r = accel__st_xmerge(r, h->v[2]);
        r = accel__st_xmerge(r, h->v[3]);
    } else {
        r = h->seed + ACCEL__ST_XP5;
    }
    r += h->total;
    while (end - p >= 8) {
        r ^= accel__st_xround(0, accel__get_u64(p));
        r = accel__st_rotl64(r, 27) * ACCEL__ST_XP1 + ACCEL__ST_XP4;
        p += 8;
    }
    if (end - p >= 4) {
        r ^= (uint64_t)accel__get_u32(p) * ACCEL__ST_XP1;
        r = accel__st_rotl64(r, 23) * ACCEL__ST_XP2 + ACCEL__ST_XP3;
        p += 4;
    }
    while (p < end) {
        r ^= (uint64_t)(*p) * ACCEL__ST_XP5;
        r = accel__st_rotl64(r, 11) * ACCEL__ST_XP1;
        ++p;
    }
    r ^= r >> 33;
    r *= ACCEL__ST_XP2;
    r ^= r >> 29;
    r *= ACCEL__ST_XP3;
    r ^= r >> 32;
    return r;
}
ACCEL__DEF uint64_t accel_st_xxh64(const void *data, size_t n, uint64_t seed) {
    accel__st_xxh64 h;
    accel__st_xxh64_init(&h, seed);
    accel__st_xxh64_update(&h, data, n);
    return accel__st_xxh64_final(&h);
}

/* ----------------------------------------------------------------------------------------------- 2. JSON reader */
/* (JSON is written with the core's accel__sb; this is the one number format it needs.) */
static void accel__st_sb_u64(accel__sb *b, uint64_t v) { accel__sb_printf(b, "%llu", (unsigned long long)v); }

enum {
    ACCEL__ST_J_NULL = 1,
    ACCEL__ST_J_FALSE,
    ACCEL__ST_J_TRUE,
    ACCEL__ST_J_NUM,
    ACCEL__ST_J_STR,
    ACCEL__ST_J_ARR,
    ACCEL__ST_J_OBJ
};
#define ACCEL__ST_JSON_MAX_DEPTH 64

typedef struct accel__st_jnode {
    int type;
    int first, last, next, count; /* children (arrays, objects), next sibling */
    size_t key, keylen;           /* member key (offset into the arena) */
    size_t str, len;              /* decoded string, or number text */
} accel__st_jnode;

typedef struct accel__st_json {
    accel *acc;          /* allocator of the temporary key array */
    accel__st_jnode *nodes; /* stb_ds array */
    char *arena;         /* stb_ds array of NUL-terminated strings */
    const unsigned char *beg, *p, *end;
    int depth;
    int oom;             /* the failure was an allocation, not the document: 1 recorded on acc, 2 an array's growth */
    char err[256];
} accel__st_json;

static void accel__st_json_free(accel__st_json *j) {
    stbds_arrfree(j->nodes);
    stbds_arrfree(j->arena);
    j->nodes = NULL;
    j->arena = NULL;
}
static int accel__st_json_error(accel__st_json *j, const char *what) {
    if (!j->err[0]) snprintf(j->err, sizeof j->err, "%s at byte %lu", what, (unsigned long)(j->p - j->beg));
    return -1;
}
static void accel__st_json_ws(accel__st_json *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) ++j->p;
}
static int accel__st_json_new(accel__st_json *j, int type) {
    accel__st_jnode nd;
    memset(&nd, 0, sizeof nd);
    nd.type = type;
    nd.first = nd.last = nd.next = -1;
    if (ACCEL__ARR_PUT(j->nodes, nd) != 0) {
        j->oom = 2;
        return accel__st_json_error(j, "out of memory");
    }
    return (int)stbds_arrlen(j->nodes) - 1;
}
/* One byte into the arena. A failed growth sets j->oom (the arena is unchanged); the string parsers check it once at
   the end, so the bytes in between go nowhere. */
static void accel__st_json_putc(accel__st_json *j, char c) {
    if (!j->oom && ACCEL__ARR_PUT(j->arena, c) != 0) j->oom = 2;
}
static void accel__st_json_put_cp(accel__st_json *j, uint32_t cp) {
    if (cp < 0x80) accel__st_json_putc(j, (char)cp);
    else if (cp < 0x800) {
        accel__st_json_putc(j, (char)(0xC0 | (cp >> 6)));
        accel__st_json_putc(j, (char)(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        accel__st_json_putc(j, (char)(0xE0 | (cp >> 12)));
        accel__st_json_putc(j, (char)(0x80 | ((cp >> 6) & 0x3F)));
        accel__st_json_putc(j, (char)(0x80 | (cp & 0x3F)));
    } else {
        accel__st_json_putc(j, (char)(0xF0 | (cp >> 18)));
        accel__st_json_putc(j, (char)(0x80 | ((cp >> 12) & 0x3F)));
        accel__st_json_putc(j, (char)(0x80 | ((cp >> 6) & 0x3F)));
        accel__st_json_putc(j, (char)(0x80 | (cp & 0x3F)));
    }
}
static int accel__st_json_hex4(accel__st_json *j, uint32_t *out) {
    uint32_t v = 0;
    int i;
    if (j->end - j->p < 4) return accel__st_json_error(j, "truncated \\u escape");
    for (i = 0; i < 4; ++i) {
        unsigned c = j->p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= c - '0';
        else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
        else return accel__st_json_error(j, "bad hex digit in \\u escape");
    }
    j->p += 4;
    *out = v;
    return 0;
}
/* Parses a string at j->p (the opening quote); appends the decoded bytes + NUL to the arena. */
static int accel__st_json_string(accel__st_json *j, size_t *off, size_t *len) {
    size_t start = (size_t)stbds_arrlen(j->arena);
    ++j->p;
    for (;;) {
        unsigned c;
        if (j->p >= j->end) return accel__st_json_error(j, "unterminated string");
        c = *j->p;
        if (c == '"') { ++j->p; break; }
        if (c < 0x20) return accel__st_json_error(j, "control character in string");
        if (c == '\\') {
            uint32_t cp;
            ++j->p;
            if (j->p >= j->end) return accel__st_json_error(j, "unterminated escape");
            c = *j->p++;
            switch (c) {
            case '"': accel__st_json_putc(j, '"'); break;
            case '\\': accel__st_json_putc(j, '\\'); break;
            case '/': accel__st_json_putc(j, '/'); break;
            case 'b': accel__st_json_putc(j, '\b'); break;
            case 'f': accel__st_json_putc(j, '\f'); break;
            case 'n': accel__st_json_putc(j, '\n'); break;
            case 'r': accel__st_json_putc(j, '\r'); break;
            case 't': accel__st_json_putc(j, '\t'); break;
            case 'u':
                if (accel__st_json_hex4(j, &cp)) return -1;
                if (cp >= 0xDC00 && cp <= 0xDFFF) return accel__st_json_error(j, "lone low surrogate in \\u escape");
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    uint32_t lo;
                    if (j->end - j->p < 2 || j->p[0] != '\\' || j->p[1] != 'u')
                        return accel__st_json_error(j, "high surrogate not followed by a low surrogate");
                    j->p += 2;
                    if (accel__st_json_hex4(j, &lo)) return -1;
                    if (lo < 0xDC00 || lo > 0xDFFF)
                        return accel__st_json_error(j, "high surrogate not followed by a low surrogate");
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                }
                accel__st_json_put_cp(j, cp);
                break;
            default: --j->p; return accel__st_json_error(j, "invalid escape");
            }
            continue;
        }
        if (c >= 0x80) {
            uint32_t cp;
            size_t l = accel__utf8_decode(j->p, j->end, &cp), k;
            if (!l) return accel__st_json_error(j, "invalid UTF-8 in string");
            for (k = 0; k < l; ++k) accel__st_json_putc(j, (char)j->p[k]);
            j->p += l;
            continue;
        }
        accel__st_json_putc(j, (char)c);
        ++j->p;
    }
    *off = start;
    *len = (size_t)stbds_arrlen(j->arena) - start;
    accel__st_json_putc(j, 0);
    if (j->oom) return accel__st_json_error(j, "out of memory");
    return 0;
}
static int accel__st_json_value(accel__st_json *j);

typedef struct accel__st_jkey { const char *s; size_t n; } accel__st_jkey;
static int accel__st_jkey_cmp(const void *a, const void *b) {
    const accel__st_jkey *x = (const accel__st_jkey *)a, *y = (const accel__st_jkey *)b;
    size_t m = x->n < y->n ? x->n : y->n;
    int c = memcmp(x->s, y->s, m);
    if (c) return c;
    return x->n < y->n ? -1 : x->n > y->n;
}
static void accel__st_json_link(accel__st_json *j, int parent, int child) {
    if (j->nodes[parent].last < 0) j->nodes[parent].first = child;
    else j->nodes[j->nodes[parent].last].next = child;
    j->nodes[parent].last = child;
    j->nodes[parent].count++;
}
static int accel__st_json_object(accel__st_json *j) {
    int obj = accel__st_json_new(j, ACCEL__ST_J_OBJ);
    if (obj < 0) return -1;
    ++j->p;
    accel__st_json_ws(j);
    if (j->p < j->end && *j->p == '}') { ++j->p; return obj; }
    for (;;) {
        size_t ko, kl;
        int v;
        accel__st_json_ws(j);
        if (j->p >= j->end || *j->p != '"') return accel__st_json_error(j, "expected a string key");
        if (accel__st_json_string(j, &ko, &kl)) return -1;
        accel__st_json_ws(j);
        if (j->p >= j->end || *j->p != ':') return accel__st_json_error(j, "expected ':'");
        ++j->p;
        v = accel__st_json_value(j);
        if (v < 0) return -1;
        j->nodes[v].key = ko;
        j->nodes[v].keylen = kl;
        accel__st_json_link(j, obj, v);
        accel__st_json_ws(j);
        if (j->p < j->end && *j->p == ',') { ++j->p; continue; }
        if (j->p < j->end && *j->p == '}') { ++j->p; break; }
        return accel__st_json_error(j, "expected ',' or '}'");
    }
    if (j->nodes[obj].count > 1) { /* duplicate keys are an error (safetensors forbids them) */
        int n = j->nodes[obj].count, i = 0, c;
        accel__st_jkey *keys = (accel__st_jkey *)accel_host_alloc(j->acc, sizeof(accel__st_jkey) * (size_t)n);
        if (!keys) {
            j->oom = 1;
            return accel__st_json_error(j, "out of memory");
        }
        for (c = j->nodes[obj].first; c >= 0; c = j->nodes[c].next, ++i) {
            keys[i].s = j->arena + j->nodes[c].key;
            keys[i].n = j->nodes[c].keylen;
        }
        qsort(keys, (size_t)n, sizeof *keys, accel__st_jkey_cmp);
        for (i = 1; i < n; ++i) {
            if (!accel__st_jkey_cmp(&keys[i - 1], &keys[i])) {
                char m[200];
                snprintf(m, sizeof m, "duplicate key \"%.120s\"", keys[i].s);
                accel_host_free(j->acc, keys);
                return accel__st_json_error(j, m);
            }
        }
        accel_host_free(j->acc, keys);
    }
    return obj;
}
static int accel__st_json_array(accel__st_json *j) {
    int arr = accel__st_json_new(j, ACCEL__ST_J_ARR);
    if (arr < 0) return -1;
    ++j->p;
    accel__st_json_ws(j);
    if (j->p < j->end && *j->p == ']') { ++j->p; return arr; }
    for (;;) {
        int v = accel__st_json_value(j);
        if (v < 0) return -1;
        accel__st_json_link(j, arr, v);
        accel__st_json_ws(j);
        if (j->p < j->end && *j->p == ',') { ++j->p; continue; }
        if (j->p < j->end && *j->p == ']') { ++j->p; break; }
        return accel__st_json_error(j, "expected ',' or ']'");
    }
    return arr;
}
static int accel__st_json_number(accel__st_json *j) {
    const unsigned char *s = j->p;
    int nd;
    size_t off, k;
    if (j->p < j->end && *j->p == '-') ++j->p;
    if (j->p >= j->end || *j->p < '0' || *j->p > '9') return accel__st_json_error(j, "invalid number");
    if (*j->p == '0') ++j->p;
    else while (j->p < j->end && *j->p >= '0' && *j->p <= '9') ++j->p;
    if (j->p < j->end && *j->p == '.') {
        ++j->p;
        if (j->p >= j->end || *j->p < '0' || *j->p > '9') return accel__st_json_error(j, "invalid number");
        while (j->p < j->end && *j->p >= '0' && *j->p <= '9') ++j->p;
    }
    if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
        ++j->p;
        if (j->p < j->end && (*j->p == '+' || *j->p == '-')) ++j->p;
        if (j->p >= j->end || *j->p < '0' || *j->p > '9') return accel__st_json_error(j, "invalid number");
        while (j->p < j->end && *j->p >= '0' && *j->p <= '9') ++j->p;
    }
    nd = accel__st_json_new(j, ACCEL__ST_J_NUM);
    off = (size_t)stbds_arrlen(j->arena);
    for (k = 0; k < (size_t)(j->p - s); ++k) accel__st_json_putc(j, (char)s[k]);
    accel__st_json_putc(j, 0);
    if (nd < 0 || j->oom) return accel__st_json_error(j, "out of memory");
    j->nodes[nd].str = off;
    j->nodes[nd].len = (size_t)(j->p - s);
    return nd;
}
static int accel__st_json_lit(accel__st_json *j, const char *lit, int type) {
    size_t n = strlen(lit);
    if ((size_t)(j->end - j->p) < n || memcmp(j->p, lit, n)) return accel__st_json_error(j, "invalid literal");
    j->p += n;
    return accel__st_json_new(j, type);
}
static int accel__st_json_value(accel__st_json *j) {
    int r;
    accel__st_json_ws(j);
    if (j->p >= j->end) return accel__st_json_error(j, "unexpected end of input");
    switch (*j->p) {
    case '{':
    case '[':
        if (++j->depth > ACCEL__ST_JSON_MAX_DEPTH) return accel__st_json_error(j, "nesting deeper than 64");
        r = *j->p == '{' ? accel__st_json_object(j) : accel__st_json_array(j);
        --j->depth;
        return r;
    case '"': {
        size_t o, l;
        int nd;
        if (accel__st_json_string(j, &o, &l)) return -1;
        nd = accel__st_json_new(j, ACCEL__ST_J_STR);
        if (nd < 0) return -1;
        j->nodes[nd].str = o;
        j->nodes[nd].len = l;
        return nd;
    }
    case 't': return accel__st_json_lit(j, "true", ACCEL__ST_J_TRUE);
    case 'f': return accel__st_json_lit(j, "false", ACCEL__ST_J_FALSE);
    case 'n': return accel__st_json_lit(j, "null", ACCEL__ST_J_NULL);
    default:
        if (*j->p == '-' || (*j->p >= '0' && *j->p <= '9')) return accel__st_json_number(j);
        return accel__st_json_error(j, "unexpected character");
    }
}
/* Parses a whole document: one value, whitespace around it, nothing else. Returns the root or -1 (j->err; report
   it with accel__st_json_failed). The caller frees j (also on failure). */
static int accel__st_json_parse(accel__st_json *j, accel *acc, const void *data, size_t n) {
    int root;
    memset(j, 0, sizeof *j);
    j->acc = acc;
    j->beg = j->p = (const unsigned char *)data;
    j->end = j->beg + n;
    root = accel__st_json_value(j);
    if (root < 0) return -1;
    accel__st_json_ws(j);
    if (j->p != j->end) return accel__st_json_error(j, "trailing data after the JSON value");
    return root;
}
/* The error of a failed parse of `what`: ACCEL_ERR_OUT_OF_MEMORY (the allocator's message kept) or ACCEL_ERR_FORMAT. */
static accel_result accel__st_json_failed(accel *acc, const accel__st_json *j, const char *what) {
    if (j->oom == 1) return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "parsing %.400s", what);
    if (j->oom) return ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "parsing %.400s: out of memory", what);
    return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.400s is not valid JSON: %s", what, j->err);
}
static const char *accel__st_jstr(const accel__st_json *j, int nd) { return j->arena + j->nodes[nd].str; }
static const char *accel__st_jkeyp(const accel__st_json *j, int nd) { return j->arena + j->nodes[nd].key; }
static int accel__st_jget(const accel__st_json *j, int obj, const char *key) {
    int c;
    size_t kl = strlen(key);
    if (obj < 0 || j->nodes[obj].type != ACCEL__ST_J_OBJ) return -1;
    for (c = j->nodes[obj].first; c >= 0; c = j->nodes[c].next)
        if (j->nodes[c].keylen == kl && !memcmp(j->arena + j->nodes[c].key, key, kl)) return c;
    return -1;
}
/* A JSON integer 0..UINT64_MAX written without sign, fraction or exponent. */
static int accel__st_ju64(const accel__st_json *j, int nd, uint64_t *out) {
    const char *s;
    uint64_t v = 0;
    if (nd < 0 || j->nodes[nd].type != ACCEL__ST_J_NUM) return -1;
    s = accel__st_jstr(j, nd);
    if (!*s || *s == '-') return -1;
    for (; *s; ++s) {
        unsigned d;
        if (*s < '0' || *s > '9') return -1;
        d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10) return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

/* -------------------------------------------------------------------------------------------- 3. device staging */
static int accel__st_is_device_ptr(const void *p) {
#ifdef ACCEL_WITH_CUDA
    struct cudaPointerAttributes a;
    cudaError_t e;
    if (!p) return 0;
    e = cudaPointerGetAttributes(&a, p);
    if (e != cudaSuccess) { (void)cudaGetLastError(); return 0; }
    return a.type == cudaMemoryTypeDevice;
#else
    (void)p;
    return 0;
#endif
}

#define ACCEL__ST_STAGE_BYTES ((size_t)8 << 20)
#define ACCEL__ST_IO_CHUNK ((size_t)1 << 20)

/* Readers of one staging chunk: the caller and up to 3 helper threads, each pread-ing a slice. One thread copies
   from the page cache at 5-8 GB/s, below what pinned host-to-device copies take (~50 GB/s): a 1 GiB tensor loaded
   at 0.75x safetensors.torch (whose pageable copy is done by the driver) until the reads were split. */
#define ACCEL__ST_READERS 4
#define ACCEL__ST_SPLIT_MIN ((size_t)1 << 20) /* below this a chunk is read by the caller alone */

struct accel__st_stage;
typedef struct accel__st_reader { struct accel__st_stage *s; int k; } accel__st_reader;

/* Created empty (nothing allocated until a device tensor needs it); the buffers come from acc's pinned allocator. */
typedef struct accel__st_stage {
    accel *acc;
    void *buf[2]; /* pinned host buffers */
    void *ev[2];  /* cudaEvent_t */
    int ready;
    /* the helper readers (started with the buffers, stopped in stage_end) */
    int nhelp, sync_ok, quit, busy, err;
    unsigned long gen;
    pthread_t th[ACCEL__ST_READERS - 1];
    accel__st_reader arg[ACCEL__ST_READERS - 1];
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    int fd;
    unsigned char *dst;
    uint64_t off;
    size_t len;
} accel__st_stage;

/* Only device loads use the readers (through pinned buffers); plain POSIX, so a CPU test drives them too. */
/* Slice k of P of [0, len): 4 KiB-aligned cuts, the last slice takes the rest. */
static ACCEL__UNUSED void accel__st_slice(size_t len, int k, int P, size_t *lo, size_t *hi) {
    *lo = k == 0 ? 0 : (size_t)((uint64_t)len * (uint64_t)k / (uint64_t)P) & ~(size_t)4095;
    *hi = k == P - 1 ? len : (size_t)((uint64_t)len * (uint64_t)(k + 1) / (uint64_t)P) & ~(size_t)4095;
}
static ACCEL__UNUSED void *accel__st_reader_main(void *p) {
    accel__st_reader *a = (accel__st_reader *)p;
    accel__st_stage *s = a->s;
    unsigned long seen = 0;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        int fd, rc;
        unsigned char *dst;
        uint64_t off;
        size_t lo, hi;
        while (!s->quit && s->gen == seen) pthread_cond_wait(&s->go, &s->mu);
        if (s->quit) break;
        seen = s->gen;
        fd = s->fd; dst = s->dst; off = s->off;
        accel__st_slice(s->len, a->k, s->nhelp + 1, &lo, &hi);
        pthread_mutex_unlock(&s->mu);
        rc = hi > lo ? accel__pread_all(fd, dst + lo, hi - lo, off + lo) : 0;
        pthread_mutex_lock(&s->mu);
        if (rc != 0) s->err = errno ? errno : EIO;
        if (--s->busy == 0) pthread_cond_signal(&s->done);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}
/* pread of len bytes at off into dst, split among the readers; 0 or -1 with errno set. */
static ACCEL__UNUSED int accel__st_stage_pread(accel__st_stage *s, int fd, void *dst, size_t len, uint64_t off) {
    size_t lo, hi;
    int rc, err;
    if (s->nhelp == 0 || len < ACCEL__ST_SPLIT_MIN) return accel__pread_all(fd, dst, len, off);
    pthread_mutex_lock(&s->mu);
    s->fd = fd; s->dst = (unsigned char *)dst; s->off = off; s->len = len;
    s->err = 0; s->busy = s->nhelp; ++s->gen;
    pthread_cond_broadcast(&s->go);
    pthread_mutex_unlock(&s->mu);
    accel__st_slice(len, 0, s->nhelp + 1, &lo, &hi);
    rc = accel__pread_all(fd, dst, hi - lo, off); /* slice 0 starts at 0 */
    err = rc != 0 ? (errno ? errno : EIO) : 0;
    pthread_mutex_lock(&s->mu);
    while (s->busy > 0) pthread_cond_wait(&s->done, &s->mu); /* never leave a helper writing into the buffer */
    if (!err) err = s->err;
    pthread_mutex_unlock(&s->mu);
    if (err) { errno = err; return -1; }
    return 0;
}
static void accel__st_readers_stop(accel__st_stage *s) {
    int k;
    if (!s->sync_ok) return;
    pthread_mutex_lock(&s->mu);
    s->quit = 1;
    pthread_cond_broadcast(&s->go);
    pthread_mutex_unlock(&s->mu);
    for (k = 0; k < s->nhelp; ++k) pthread_join(s->th[k], NULL);
    pthread_cond_destroy(&s->go);
    pthread_cond_destroy(&s->done);
    pthread_mutex_destroy(&s->mu);
    s->nhelp = 0;
    s->sync_ok = 0;
}
/* readers - 1 helper threads (fewer if a thread cannot be started: the caller then reads more itself). */
static ACCEL__UNUSED void accel__st_readers_start(accel__st_stage *s, int readers) {
    int want = (readers > ACCEL__ST_READERS ? ACCEL__ST_READERS : readers) - 1, k;
    if (want <= 0 || s->sync_ok) return;
    if (pthread_mutex_init(&s->mu, NULL) != 0) return;
    if (pthread_cond_init(&s->go, NULL) != 0) { pthread_mutex_destroy(&s->mu); return; }
    if (pthread_cond_init(&s->done, NULL) != 0) { pthread_cond_destroy(&s->go); pthread_mutex_destroy(&s->mu); return; }
    s->sync_ok = 1;
    for (k = 0; k < want; ++k) {
        s->arg[k].s = s;
        s->arg[k].k = k + 1;
        if (pthread_create(&s->th[k], NULL, accel__st_reader_main, &s->arg[k]) != 0) break;
        s->nhelp = k + 1;
    }
}

static void accel__st_stage_begin(accel__st_stage *s, accel *acc) {
    memset(s, 0, sizeof *s);
    s->acc = acc;
}
static void accel__st_stage_end(accel__st_stage *s) {
    int i;
    accel__st_readers_stop(s);
    for (i = 0; i < 2; ++i) {
        accel_pinned_free(s->acc, s->buf[i]);
#ifdef ACCEL_WITH_CUDA
        if (s->ev[i]) cudaEventDestroy((cudaEvent_t)s->ev[i]);
#endif
    }
    accel__st_stage_begin(s, s->acc);
}
#ifdef ACCEL_WITH_CUDA
static accel_result accel__st_stage_init(accel *acc, accel__st_stage *s) {
    int i;
    cudaError_t e;
    if (s->ready) return ACCEL_OK;
    for (i = 0; i < 2; ++i) {
        cudaEvent_t ev;
        s->buf[i] = accel_pinned_alloc(s->acc, ACCEL__ST_STAGE_BYTES);
        if (!s->buf[i]) {
            accel__st_stage_end(s);
            return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "staging buffer for device tensors");
        }
        e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
        if (e != cudaSuccess) {
            accel__st_stage_end(s);
            return ACCEL__FAIL(acc, ACCEL_ERR_CUDA, "cudaEventCreate: %s", cudaGetErrorString(e));
        }
        s->ev[i] = (void *)ev;
    }
    { /* as many readers as CPUs, up to ACCEL__ST_READERS (none extra on a single CPU) */
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        accel__st_readers_start(s, ncpu < 1 ? 1 : ncpu > ACCEL__ST_READERS ? ACCEL__ST_READERS : (int)ncpu);
    }
    s->ready = 1;
    return ACCEL_OK;
}
#endif

/* Device → file, double-buffered: the copy of chunk i+1 overlaps the hash + write of chunk i. */
static accel_result accel__st_write_from_device(accel *acc, accel__st_stage *s, int fd, const char *path,
                                                const void *src, uint64_t n, accel__st_xxh64 *h) {
#ifdef ACCEL_WITH_CUDA
    cudaStream_t st = acc ? (cudaStream_t)acc->stream : (cudaStream_t)0;
    uint64_t off = 0, nchunks = (n + ACCEL__ST_STAGE_BYTES - 1) / ACCEL__ST_STAGE_BYTES, i;
    cudaError_t e;
    accel_result r = accel__st_stage_init(acc, s);
    if (r != ACCEL_OK) return r;
    if (n == 0) return ACCEL_OK;
    e = cudaMemcpyAsync(s->buf[0], src, (size_t)(n < ACCEL__ST_STAGE_BYTES ? n : ACCEL__ST_STAGE_BYTES),
                        cudaMemcpyDeviceToHost, st);
    if (e == cudaSuccess) e = cudaEventRecord((cudaEvent_t)s->ev[0], st);
    if (e != cudaSuccess)
        return ACCEL__FAIL(acc, ACCEL_ERR_CUDA, "device-to-host copy for %.300s: %s", path, cudaGetErrorString(e));
    for (i = 0; i < nchunks; ++i) {
        size_t len = (size_t)((n - off) < ACCEL__ST_STAGE_BYTES ? (n - off) : ACCEL__ST_STAGE_BYTES);
        int b = (int)(i & 1);
        if (i + 1 < nchunks) {
            uint64_t noff = off + len;
            size_t nlen = (size_t)((n - noff) < ACCEL__ST_STAGE_BYTES ? (n - noff) : ACCEL__ST_STAGE_BYTES);
            e = cudaMemcpyAsync(s->buf[b ^ 1], (const char *)src + noff, nlen, cudaMemcpyDeviceToHost, st);
            if (e == cudaSuccess) e = cudaEventRecord((cudaEvent_t)s->ev[b ^ 1], st);
            if (e != cudaSuccess)
                return ACCEL__FAIL(acc, ACCEL_ERR_CUDA, "device-to-host copy for %.300s: %s", path,
                                   cudaGetErrorString(e));
        }
        e = cudaEventSynchronize((cudaEvent_t)s->ev[b]);
        if (e != cudaSuccess)
            return ACCEL__FAIL(acc, ACCEL_ERR_CUDA, "device-to-host copy for %.300s: %s", path, cudaGetErrorString(e));
        if (h) accel__st_xxh64_update(h, s->buf[b], len);
        if (accel__write_all(fd, s->buf[b], len) != 0) {
            (void)cudaStreamSynchronize(st);
            return accel__io_fail(acc, "cannot write", path);
        }
        off += len;
    }
    return ACCEL_OK;
#else
    (void)s; (void)fd; (void)src; (void)n; (void)h;
    return ACCEL__FAIL(acc, ACCEL_ERR_UNSUPPORTED,
                       "writing %.300s from a device buffer needs CUDA: compile the ACCEL_IMPLEMENTATION TU with nvcc",
                       path);
#endif
}

#ifdef ACCEL_WITH_CUDA
/* Converts n elements of `from` at src into elements of `to` at dst (host memory). */
typedef void (*accel__st_convert_fn)(void *dst, accel_dtype to, const void *src, accel_dtype from, size_t n);
/* The one host → device loop: numel elements of `from` — read from fd at byte off0 (fd >= 0), or taken from
   mem + off0 — become numel elements of `to` at dst, double-buffered through the stage's pinned buffers on stream st:
   filling chunk i+1 (a pread, a copy, or `convert`, which may be NULL when from == to) overlaps the copy of chunk i.
   Returns once every copy finished. The stage's events and buffers belong to the current device. */
static accel_result accel__st_stage_to_device(accel *acc, accel__st_stage *s, cudaStream_t st, int fd,
                                              const unsigned char *mem, uint64_t off0, accel_dtype from, void *dst,
                                              accel_dtype to, uint64_t numel, accel__st_convert_fn convert,
                                              const char *what) {
    size_t si = accel_dtype_size(from), so = accel_dtype_size(to), per = ACCEL__ST_STAGE_BYTES / (si > so ? si : so);
    uint64_t off = 0;
    int i = 0, used[2] = {0, 0};
    cudaError_t e;
    accel_result r = accel__st_stage_init(acc, s);
    if (r != ACCEL_OK) return r;
    while (off < numel) {
        size_t cnt = (size_t)(numel - off < per ? numel - off : per);
        int b = i & 1;
        if (used[b]) {
            e = cudaEventSynchronize((cudaEvent_t)s->ev[b]);
            if (e != cudaSuccess)
                return ACCEL__FAIL(acc, ACCEL_ERR_CUDA, "host-to-device copy of %.300s: %s", what,
                                   cudaGetErrorString(e));
        }
        if (convert) {
            convert(s->buf[b], to, mem + off0 + off * si, from, cnt);
        } else if (fd >= 0) {
            if (accel__st_stage_pread(s, fd, s->buf[b], cnt * si, off0 + off * si) != 0) {
                (void)cudaStreamSynchronize(st);
                return accel__io_fail(acc, "cannot read", what);
            }
        } else {
            memcpy(s->buf[b], mem + off0 + off * si, cnt * si);
        }
        e = cudaMemcpyAsync((char *)dst + off * so, s->buf[b], cnt * so, cudaMemcpyHostToDevice, st);
        if (e == cudaSuccess) e = cudaEventRecord((cudaEvent_t)s->ev[b], st);
        if (e != cudaSuccess)
            return ACCEL__FAIL(acc, ACCEL_ERR_CUDA, "host-to-device copy of %.300s: %s", what, cudaGetErrorString(e));
        used[b] = 1;
        off += cnt;
        ++i;
    }
    e = cudaStreamSynchronize(st);
    if (e != cudaSuccess)
        return ACCEL__FAIL(acc, ACCEL_ERR_CUDA, "host-to-device copy of %.300s: %s", what, cudaGetErrorString(e));
    return ACCEL_OK;
}
#endif

/* File (or memory) → device: n bytes through the staging loop on acc's stream. */
static accel_result accel__st_read_to_device(accel *acc, accel__st_stage *s, int fd, const unsigned char *mem,
                                             uint64_t off0, void *dst, uint64_t n, const char *what) {
#ifdef ACCEL_WITH_CUDA
    cudaStream_t st = acc ? (cudaStream_t)acc->stream : (cudaStream_t)0;
    return accel__st_stage_to_device(acc, s, st, fd, mem, off0, ACCEL_U8, dst, ACCEL_U8, n, NULL, what);
#else
    (void)s; (void)fd; (void)mem; (void)off0; (void)dst; (void)n;
    return ACCEL__FAIL(acc, ACCEL_ERR_UNSUPPORTED, "loading %.300s into a device buffer needs CUDA: compile the "
                       "ACCEL_IMPLEMENTATION TU with nvcc", what);
#endif
}

/* ---------------------------------------------------------------------------------------- 4. safetensors writer */
static void accel__st_shape_str(char *out, size_t cap, int ndim, const int64_t *shape) {
    size_t o = 0;
    int i;
    o += (size_t)accel__fmt(out + o, cap - o, "[");
    for (i = 0; i < ndim && o < cap; ++i)
        o += (size_t)accel__fmt(out + o, cap - o, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (o < cap) accel__fmt(out + o, cap - o, "]");
}

/* The reference writer's order (safetensors `prepare`): its Dtype enum order, descending, then the name (bytes).
   The enum: BOOL U8 I8 F8_E5M2 F8_E4M3 I16 U16 F16 BF16 I32 U32 F32 F64 I64 U64 — so F32 precedes U32 and I32,
   BF16 precedes F16, and every tensor stays aligned to its element size. */
static int accel__st_rank(accel_dtype d) {
    switch (d) {
    case ACCEL_BOOL: return 0;
    case ACCEL_U8: return 1;
    case ACCEL_I8: return 2;
    case ACCEL_F8_E5M2: return 3;
    case ACCEL_F8_E4M3: return 4;
    case ACCEL_I16: return 5;
    case ACCEL_U16: return 6;
    case ACCEL_F16: return 7;
    case ACCEL_BF16: return 8;
    case ACCEL_I32: return 9;
    case ACCEL_U32: return 10;
    case ACCEL_F32: return 11;
    case ACCEL_F64: return 12;
    case ACCEL_I64: return 13;
    case ACCEL_U64: return 14;
    default: return -1;
    }
}
typedef struct accel__st_item { const accel_tensor *t; uint64_t nbytes; int rank; } accel__st_item;
static int accel__st_item_cmp(const void *a, const void *b) {
    const accel__st_item *x = (const accel__st_item *)a, *y = (const accel__st_item *)b;
    if (x->rank != y->rank) return x->rank > y->rank ? -1 : 1;
    return strcmp(x->t->name, y->t->name);
}

static int accel__st_strp_cmp(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static accel_result accel__st_check_tensors(accel *acc, const accel_tensor *t, int n, const char *what) {
    int i;
    const char **names;
    accel_result r = ACCEL_OK;
    if (n < 0 || (n > 0 && !t))
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "%.300s: bad tensor list (n=%d)", what, n);
    for (i = 0; i < n; ++i) {
        int64_t nb;
        size_t bad = 0;
        if (!t[i].name) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "%.300s: tensor %d has no name", what, i);
        if (!strcmp(t[i].name, "__metadata__")) /* "" is a valid name, as for the reference writer */
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                               "%.300s: tensor %d has the reserved name \"__metadata__\"", what, i);
        if (!accel__utf8_valid((const unsigned char *)t[i].name, strlen(t[i].name), &bad))
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                               "%.300s: tensor %d's name is not valid UTF-8 (byte %lu)", what, i, (unsigned long)bad);
        if (!accel_dtype_name(t[i].dtype))
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "%.300s: tensor '%.200s' has an invalid dtype %d", what,
                               t[i].name, (int)t[i].dtype);
        nb = accel_tensor_nbytes(&t[i]);
        if (nb < 0)
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                               "%.300s: tensor '%.200s' has an invalid shape (ndim %d)", what, t[i].name, t[i].ndim);
        if (nb > 0 && !t[i].ptr)
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "%.300s: tensor '%.200s' has no data pointer", what,
                               t[i].name);
    }
    if (n < 2) return ACCEL_OK;
    /* duplicates: the names sorted, neighbours compared */
    names = (const char **)accel_host_alloc(acc, sizeof(const char *) * (size_t)n);
    if (!names) return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "%.300s", what);
    for (i = 0; i < n; ++i) names[i] = t[i].name;
    qsort(names, (size_t)n, sizeof *names, accel__st_strp_cmp);
    for (i = 1; i < n && r == ACCEL_OK; ++i)
        if (!strcmp(names[i - 1], names[i]))
            r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "%.300s: duplicate tensor name '%.200s'", what, names[i]);
    accel_host_free(acc, names);
    return r;
}

typedef struct accel__st_hash_job { const accel__st_item *items; int n; accel__st_xxh64 *h; } accel__st_hash_job;
static void *accel__st_hash_items(void *arg) {
    accel__st_hash_job *j = (accel__st_hash_job *)arg;
    int i;
    for (i = 0; i < j->n; ++i)
        if (j->items[i].nbytes) accel__st_xxh64_update(j->h, j->items[i].t->ptr, (size_t)j->items[i].nbytes);
    return NULL;
}

/* The layout of a safetensors file: its tensors in the reference writer's order (*items, n entries, acc's
   allocator; NULL when n == 0), and its first bytes — the 8-byte header length, then the header padded so the data
   section starts 8-byte aligned — in hb (initialized here; free it with accel__sb_free). *data_bytes: the size of
   the data section. The file is those bytes, then each item's nbytes in order. */
static accel_result accel__st_layout(accel *acc, const char *path, const accel_tensor *t, int n,
                                     const char *const *meta, int nmeta, accel__sb *hb, accel__st_item **out_items,
                                     uint64_t *data_bytes) {
    accel__st_item *items = NULL;
    uint64_t off = 0;
    unsigned char len8[8];
    int i, first = 1;
    accel__sb_init(hb, acc);
    *out_items = NULL;
    if (n > 0) {
        items = (accel__st_item *)accel_host_alloc(acc, sizeof(accel__st_item) * (size_t)n);
        if (!items) return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "writing %.300s", path);
    }
    for (i = 0; i < n; ++i) {
        items[i].t = &t[i];
        items[i].nbytes = (uint64_t)accel_tensor_nbytes(&t[i]);
        items[i].rank = accel__st_rank(t[i].dtype);
    }
    if (n > 1) qsort(items, (size_t)n, sizeof *items, accel__st_item_cmp);
    accel__sb_add(hb, "\0\0\0\0\0\0\0\0", 8); /* the length, filled in below */
    accel__sb_puts(hb, "{");
    if (nmeta > 0) {
        accel__sb_puts(hb, "\"__metadata__\":{");
        for (i = 0; i < nmeta; ++i) {
            if (i) accel__sb_puts(hb, ",");
            accel__sb_json_str(hb, meta[2 * i], strlen(meta[2 * i]), 1);
            accel__sb_puts(hb, ":");
            accel__sb_json_str(hb, meta[2 * i + 1], strlen(meta[2 * i + 1]), 1);
        }
        accel__sb_puts(hb, "}");
        first = 0;
    }
    for (i = 0; i < n; ++i) {
        const accel_tensor *x = items[i].t;
        int d;
        if (!first) accel__sb_puts(hb, ",");
        first = 0;
        accel__sb_json_str(hb, x->name, strlen(x->name), 1);
        accel__sb_puts(hb, ":{\"dtype\":\"");
        accel__sb_puts(hb, accel_dtype_name(x->dtype));
        accel__sb_puts(hb, "\",\"shape\":[");
        for (d = 0; d < x->ndim; ++d) {
            if (d) accel__sb_puts(hb, ",");
            accel__st_sb_u64(hb, (uint64_t)x->shape[d]);
        }
        accel__sb_puts(hb, "],\"data_offsets\":[");
        accel__st_sb_u64(hb, off);
        accel__sb_puts(hb, ",");
        off += items[i].nbytes;
        accel__st_sb_u64(hb, off);
        accel__sb_puts(hb, "]}");
    }
    accel__sb_puts(hb, "}");
    while ((hb->n - 8) % 8) accel__sb_puts(hb, " "); /* the data section starts 8-byte aligned */
    if (hb->oom) {
        accel_host_free(acc, items);
        accel__sb_free(hb);
        return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "header of %.300s", path);
    }
    accel__put_u64(len8, (uint64_t)(hb->n - 8));
    memcpy(hb->p, len8, 8);
    *out_items = items;
    *data_bytes = off;
    return ACCEL_OK;
}

/* Writes a complete safetensors file to fd; *out_bytes / *out_hash (when not NULL: computed) describe it. */
static accel_result accel__st_write_fd(accel *acc, int fd, const char *path, const accel_tensor *t, int n,
                                       const char *const *meta, int nmeta, uint64_t *out_bytes, uint64_t *out_hash) {
    accel__st_item *items = NULL;
    accel__sb hb;
    accel__st_xxh64 h;
    accel__st_stage stage;
    uint64_t off = 0, head;
    accel_result r;
    int i, any_device = 0, threaded = 0;
    pthread_t hasher;
    accel__st_hash_job hj;
    memset(&hj, 0, sizeof hj);
    r = accel__st_layout(acc, path, t, n, meta, nmeta, &hb, &items, &off);
    if (r != ACCEL_OK) return r;
    accel__st_stage_begin(&stage, acc);
    head = hb.n;
    accel__st_xxh64_init(&h, 0);
    accel__st_xxh64_update(&h, hb.p, hb.n);
    if (accel__write_all(fd, hb.p, hb.n) != 0) r = accel__io_fail(acc, "cannot write", path);
    accel__sb_free(&hb);
    /* The checksum of host data is computed by a second thread while this one writes (hashing runs at about memcpy
       speed: done inline it would cost as much as the write itself). Device data is hashed from the staging buffer. */
    for (i = 0; i < n; ++i)
        if (items[i].nbytes && accel__st_is_device_ptr(items[i].t->ptr)) any_device = 1;
    if (out_hash && !any_device && off >= ACCEL__ST_IO_CHUNK) {
        hj.items = items;
        hj.n = n;
        hj.h = &h;
        if (pthread_create(&hasher, NULL, accel__st_hash_items, &hj) == 0) threaded = 1;
    }
    for (i = 0; i < n && r == ACCEL_OK; ++i) {
        const unsigned char *src = (const unsigned char *)items[i].t->ptr;
        uint64_t nb = items[i].nbytes, done = 0;
        if (nb == 0) continue;
        if (any_device && accel__st_is_device_ptr(src)) {
            r = accel__st_write_from_device(acc, &stage, fd, path, src, nb, out_hash ? &h : NULL);
            continue;
        }
        if (!out_hash || threaded) {
            if (accel__write_all(fd, src, (size_t)nb) != 0) r = accel__io_fail(acc, "cannot write", path);
            continue;
        }
        while (done < nb) { /* hash a cache-sized chunk, then write it while it is still hot */
            size_t len = (size_t)((nb - done) < ACCEL__ST_IO_CHUNK ? (nb - done) : ACCEL__ST_IO_CHUNK);
            accel__st_xxh64_update(&h, src + done, len);
            if (accel__write_all(fd, src + done, len) != 0) { r = accel__io_fail(acc, "cannot write", path); break; }
            done += len;
        }
    }
    if (threaded) pthread_join(hasher, NULL);
    accel__st_stage_end(&stage);
    accel_host_free(acc, items);
    if (r != ACCEL_OK) return r;
    if (out_bytes) *out_bytes = head + off;
    if (out_hash) *out_hash = accel__st_xxh64_final(&h);
    return ACCEL_OK;
}

static accel_result accel__st_check_meta(accel *acc, const char *const *meta, int nmeta) {
    int i, k;
    if (nmeta < 0 || (nmeta > 0 && !meta))
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "metadata: bad list (n=%d)", nmeta);
    for (i = 0; i < 2 * nmeta; ++i)
        if (!meta[i] || !accel__utf8_valid((const unsigned char *)meta[i], strlen(meta[i]), NULL))
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "metadata entry %d is NULL or not valid UTF-8", i / 2);
    for (i = 0; i < nmeta; ++i)
        for (k = 0; k < i; ++k)
            if (!strcmp(meta[2 * i], meta[2 * k]))
                return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "duplicate metadata key '%.200s'", meta[2 * i]);
    return ACCEL_OK;
}

/* Writes path: atomic through the core's pair (accel__atomic_open/_commit: "<path>.tmp.<pid>", fsync, rename,
   directory fsync), else directly (inside a checkpoint's hidden directory, which is itself published atomically),
   fsync'd. */
static accel_result accel__st_save(accel *acc, const char *path, const accel_tensor *t, int n, const char *const *meta,
                                   int nmeta, int atomic, uint64_t *out_bytes, uint64_t *out_hash) {
    char tmp[4200];
    int fd;
    accel_result r = accel__st_check_tensors(acc, t, n, path);
    if (r == ACCEL_OK) r = accel__st_check_meta(acc, meta, nmeta);
    if (r != ACCEL_OK) return r;
    if (atomic) {
        r = accel__atomic_open(acc, path, tmp, sizeof tmp, &fd);
        if (r != ACCEL_OK) return r;
        r = accel__st_write_fd(acc, fd, tmp, t, n, meta, nmeta, out_bytes, out_hash);
        if (r != ACCEL_OK) {
            (void)accel__atomic_commit(acc, fd, tmp, path, 0); /* removes the temporary; r is the cause */
            return r;
        }
        return accel__atomic_commit(acc, fd, tmp, path, 1);
    }
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return accel__io_fail(acc, "cannot create", path);
    r = accel__st_write_fd(acc, fd, path, t, n, meta, nmeta, out_bytes, out_hash);
    if (r == ACCEL_OK && fsync(fd) != 0) r = accel__io_fail(acc, "cannot fsync", path);
    if (close(fd) != 0 && r == ACCEL_OK) r = accel__io_fail(acc, "cannot close", path);
    return r;
}

ACCEL__DEF accel_result accel_st_save(accel *acc, const char *path, const accel_tensor *tensors, int n,
                                                    const char *const *metadata, int nmeta) {
    if (!path) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "save_safetensors: path is NULL");
    return accel__st_save(acc, path, tensors, n, metadata, nmeta, 1, NULL, NULL);
}

/* ---------------------------------------------------------------------------------------- 5. safetensors reader */
struct accel_st_file {
    accel *acc;
    int fd;
    const unsigned char *map;
    size_t size;
    int mapped;
    uint64_t data_start;
    accel_st_entry *entries; /* stb_ds array, sorted by offset */
    char **meta; /* stb_ds array: key, value, key, value … (strings from acc's allocator, NUL-terminated) */
    size_t *meta_len;          /* stb_ds array: their lengths (a key or value may contain U+0000) */
    char *names;               /* the JSON arena (entry names point into it) */
    const accel_st_entry **by_name; /* the entries sorted by name (acc's allocator), for binary search */
    struct accel__st_piece *pieces; /* stb_ds: an offload folder's mapped .dat files */
    accel_st_file **subs;    /* stb_ds: safetensors files an offload folder's index points into */
    char path[512];
};
typedef struct accel__st_piece { void *p; size_t n; } accel__st_piece;

static int accel__st_entryp_name_cmp(const void *a, const void *b) {
    return strcmp((*(const accel_st_entry *const *)a)->name, (*(const accel_st_entry *const *)b)->name);
}
static int accel__st_entry_cmp(const void *a, const void *b) {
    const accel_st_entry *x = (const accel_st_entry *)a, *y = (const accel_st_entry *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

ACCEL__DEF void accel_st_file_destroy(accel_st_file *f) {
    int i;
    if (!f) return;
    for (i = 0; i < (int)stbds_arrlen(f->meta); ++i) accel_host_free(f->acc, f->meta[i]);
    stbds_arrfree(f->meta);
    stbds_arrfree(f->meta_len);
    stbds_arrfree(f->entries);
    stbds_arrfree(f->names);
    accel_host_free(f->acc, (void *)f->by_name);
    for (i = 0; i < (int)stbds_arrlen(f->pieces); ++i) munmap(f->pieces[i].p, f->pieces[i].n);
    stbds_arrfree(f->pieces);
    for (i = 0; i < (int)stbds_arrlen(f->subs); ++i) accel_st_file_destroy(f->subs[i]);
    stbds_arrfree(f->subs);
    if (f->mapped && f->map) munmap((void *)f->map, f->size);
    if (f->fd >= 0) close(f->fd);
    accel_host_free(f->acc, f);
}

/* Every check of the reference reader, in its order. */
static accel_result accel__st_parse(accel_st_file *f) {
    accel *acc = f->acc;
    const char *path = f->path;
    uint64_t n = 0, data_len, cursor = 0;
    size_t bad = 0;
    accel__st_json j;
    int root, c, i, cnt;
    accel_result r = ACCEL_OK;
    if (f->size < 8)
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.300s: truncated: %lu bytes, shorter than the 8-byte header length",
                           path, (unsigned long)f->size);
    n = accel__get_u64(f->map);
    if (n > 100000000u)
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.300s: header size %llu exceeds the 100000000-byte limit", path,
                           (unsigned long long)n);
    if (n > (uint64_t)f->size - 8)
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.300s: header size %llu is larger than the file (%lu bytes)", path,
                           (unsigned long long)n, (unsigned long)f->size);
    if (!accel__utf8_valid(f->map + 8, (size_t)n, &bad))
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.300s: header is not valid UTF-8 (byte %lu)", path,
                           (unsigned long)bad);
    root = accel__st_json_parse(&j, acc, f->map + 8, (size_t)n);
    if (root < 0) {
        char what[400];
        accel__fmt(what, sizeof what, "%.300s: header", path);
        r = accel__st_json_failed(acc, &j, what);
        accel__st_json_free(&j);
        return r;
    }
    if (j.nodes[root].type != ACCEL__ST_J_OBJ) {
        accel__st_json_free(&j);
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.300s: header is not a JSON object", path);
    }
    f->data_start = 8 + n;
    data_len = (uint64_t)f->size - 8 - n;
    for (c = j.nodes[root].first; c >= 0 && r == ACCEL_OK; c = j.nodes[c].next) {
        const char *key = accel__st_jkeyp(&j, c);
        accel_st_entry e;
        int dt, sh, off, m, d;
        if (j.nodes[c].keylen == 12 && !strcmp(key, "__metadata__")) {
            if (j.nodes[c].type != ACCEL__ST_J_OBJ) {
                r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.300s: __metadata__ is not an object", path);
                break;
            }
            for (m = j.nodes[c].first; m >= 0; m = j.nodes[m].next) {
                char *k2, *v2;
                if (j.nodes[m].type != ACCEL__ST_J_STR) {
                    r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.300s: __metadata__ value of '%.200s' is not a string",
                                    path, accel__st_jkeyp(&j, m));
                    break;
                }
                k2 = (char *)accel_host_alloc(acc, j.nodes[m].keylen + 1);
                v2 = (char *)accel_host_alloc(acc, j.nodes[m].len + 1);
                if (!k2 || !v2) {
                    accel_host_free(acc, k2);
                    accel_host_free(acc, v2);
                    r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "%.300s: metadata", path);
                    break;
                }
                memcpy(k2, accel__st_jkeyp(&j, m), j.nodes[m].keylen + 1);
                memcpy(v2, accel__st_jstr(&j, m), j.nodes[m].len + 1);
                if (accel__arr_reserve((void **)&f->meta, sizeof *f->meta, 2) ||
                    accel__arr_reserve((void **)&f->meta_len, sizeof *f->meta_len, 2)) {
                    accel_host_free(acc, k2);
                    accel_host_free(acc, v2);
                    r = ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "%.300s: metadata: out of memory", path);
                    break;
                }
                (void)ACCEL__ARR_PUT(f->meta, k2); /* reserved above: cannot fail */
                (void)ACCEL__ARR_PUT(f->meta, v2);
                (void)ACCEL__ARR_PUT(f->meta_len, j.nodes[m].keylen);
                (void)ACCEL__ARR_PUT(f->meta_len, j.nodes[m].len);
            }
            continue;
        }
        memset(&e, 0, sizeof e);
        if (strlen(key) != j.nodes[c].keylen) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.300s: a tensor name contains a NUL character", path);
            break;
        }
        if (j.nodes[c].type != ACCEL__ST_J_OBJ) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.300s: entry '%.200s' is not an object", path, key);
            break;
        }
        dt = accel__st_jget(&j, c, "dtype");
        sh = accel__st_jget(&j, c, "shape");
        off = accel__st_jget(&j, c, "data_offsets");
        if (j.nodes[c].count != 3 || dt < 0 || sh < 0 || off < 0) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT,
                            "%.300s: tensor '%.200s' must have exactly dtype, shape and data_offsets", path, key);
            break;
        }
        if (j.nodes[dt].type != ACCEL__ST_J_STR) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.300s: tensor '%.200s': dtype is not a string", path, key);
            break;
        }
        e.dtype = accel_dtype_from_name(accel__st_jstr(&j, dt));
        if (e.dtype == ACCEL_DTYPE_INVALID) {
            static const char *other[] = {"C64", "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ",
                                          "F4",  "F6_E2M3", "F6_E3M2",     NULL};
            int k, known = 0;
            for (k = 0; other[k]; ++k)
                if (!strcmp(other[k], accel__st_jstr(&j, dt))) known = 1;
            r = ACCEL__FAIL(acc, known ? ACCEL_ERR_UNSUPPORTED : ACCEL_ERR_FORMAT,
                            "%.300s: tensor '%.200s': %s dtype \"%.40s\"", path, key,
                            known ? "accel does not support the" : "bad", accel__st_jstr(&j, dt));
            break;
        }
        if (j.nodes[sh].type != ACCEL__ST_J_ARR) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.300s: tensor '%.200s': shape is not an array", path, key);
            break;
        }
        if (j.nodes[sh].count > ACCEL_MAX_DIMS) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_UNSUPPORTED, "%.300s: tensor '%.200s' has %d dimensions (accel supports %d)",
                            path, key, j.nodes[sh].count, ACCEL_MAX_DIMS);
            break;
        }
        e.ndim = j.nodes[sh].count;
        for (d = 0, m = j.nodes[sh].first; m >= 0; m = j.nodes[m].next, ++d) {
            uint64_t v;
            if (accel__st_ju64(&j, m, &v) || v > (uint64_t)INT64_MAX) {
                r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT,
                                "%.300s: tensor '%.200s': shape entries must be non-negative integers", path, key);
                break;
            }
            e.shape[d] = (int64_t)v;
        }
        if (r != ACCEL_OK) break;
        if (j.nodes[off].type != ACCEL__ST_J_ARR || j.nodes[off].count != 2 ||
            accel__st_ju64(&j, j.nodes[off].first, &e.begin) ||
            accel__st_ju64(&j, j.nodes[j.nodes[off].first].next, &e.end)) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT,
                            "%.300s: tensor '%.200s': data_offsets must be two non-negative integers", path, key);
            break;
        }
        e.name = (const char *)(uintptr_t)j.nodes[c].key; /* an arena offset until the arena is final */
        if (ACCEL__ARR_PUT(f->entries, e) != 0) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "%.300s: out of memory", path);
            break;
        }
    }
    if (r != ACCEL_OK) { accel__st_json_free(&j); return r; }
    f->names = j.arena; /* the arena is final: offsets become pointers */
    j.arena = NULL;
    accel__st_json_free(&j);
    cnt = (int)stbds_arrlen(f->entries);
    for (i = 0; i < cnt; ++i) f->entries[i].name = f->names + (size_t)(uintptr_t)f->entries[i].name;
    if (cnt > 1) qsort(f->entries, (size_t)cnt, sizeof *f->entries, accel__st_entry_cmp);
    for (i = 0; i < cnt; ++i) {
        accel_st_entry *e = &f->entries[i];
        accel_tensor t;
        int64_t nb;
        if (e->begin != cursor || e->end < e->begin) {
            if (e->begin == cursor)
                return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT,
                                   "%.300s: tensor '%.200s': data_offsets [%llu, %llu] end before they begin", path,
                                   e->name, (unsigned long long)e->begin, (unsigned long long)e->end);
            return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT,
                               "%.300s: tensor '%.200s': data_offsets [%llu, %llu] %s (expected to begin at %llu): "
                               "offsets must tile the data section",
                               path, e->name, (unsigned long long)e->begin, (unsigned long long)e->end,
                               e->begin < cursor ? "overlap the previous tensor" : "leave a hole",
                               (unsigned long long)cursor);
        }
        memset(&t, 0, sizeof t);
        t.dtype = e->dtype;
        t.ndim = e->ndim;
        memcpy(t.shape, e->shape, sizeof t.shape);
        nb = accel_tensor_nbytes(&t);
        if (nb < 0)
            return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.300s: tensor '%.200s': shape product overflows", path,
                               e->name);
        if ((uint64_t)nb != e->end - e->begin) {
            char s[200];
            accel__st_shape_str(s, sizeof s, e->ndim, e->shape);
            return ACCEL__FAIL(
                acc, ACCEL_ERR_FORMAT, "%.300s: tensor '%.200s': %s %s needs %lld bytes but data_offsets span %llu",
                path, e->name, accel_dtype_name(e->dtype), s, (long long)nb, (unsigned long long)(e->end - e->begin));
        }
        cursor = e->end;
    }
    if (cursor != data_len)
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT,
                           "%.300s: the data section is %llu bytes but the tensors cover %llu (%s)", path,
                           (unsigned long long)data_len, (unsigned long long)cursor,
                           cursor > data_len ? "offsets point past the end of the file: truncated?" : "trailing bytes");
    f->by_name = (const accel_st_entry **)accel_host_alloc(acc, sizeof(accel_st_entry *) * (size_t)(cnt ? cnt : 1));
    if (!f->by_name) return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "%.300s: name index", path);
    for (i = 0; i < cnt; ++i) {
        f->entries[i].data = f->map + f->data_start + f->entries[i].begin;
        f->by_name[i] = &f->entries[i];
    }
    if (cnt > 1) qsort((void *)f->by_name, (size_t)cnt, sizeof *f->by_name, accel__st_entryp_name_cmp);
    return ACCEL_OK;
}

static accel_result accel__st_new(accel *acc, const char *path, accel_st_file **out) {
    accel_st_file *f = (accel_st_file *)accel_host_alloc(acc, sizeof *f);
    if (!f) return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "open %.300s", path);
    memset(f, 0, sizeof *f);
    f->acc = acc;
    f->fd = -1;
    accel__fmt(f->path, sizeof f->path, "%s", path);
    *out = f;
    return ACCEL_OK;
}

/* open + read-only mapping, not parsed yet (accel_st_file_open parses at once; load_state hashes first). */
static accel_result accel__st_map(accel *acc, const char *path, accel_st_file **out) {
    accel_st_file *f = NULL;
    struct stat st;
    accel_result r;
    *out = NULL;
    r = accel__st_new(acc, path, &f);
    if (r != ACCEL_OK) return r;
    r = accel__open_regular(acc, path, &st, &f->fd); /* a FIFO named as a safetensors file must not hang the open */
    if (r != ACCEL_OK) {
        accel_st_file_destroy(f);
        return r;
    }
    f->size = (size_t)st.st_size;
    if (f->size > 0) {
        void *m = mmap(NULL, f->size, PROT_READ, MAP_SHARED, f->fd, 0);
        if (m == MAP_FAILED) {
            r = accel__io_fail(acc, "cannot mmap", path);
            accel_st_file_destroy(f);
            return r;
        }
        f->map = (const unsigned char *)m;
        f->mapped = 1;
    } else {
        f->map = (const unsigned char *)"";
    }
    *out = f;
    return ACCEL_OK;
}
ACCEL__DEF accel_result accel_st_file_open(accel *acc, const char *path, accel_st_file **out) {
    accel_st_file *f = NULL;
    accel_result r;
    if (!path || !out) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_st_file_open: NULL argument");
    r = accel__st_map(acc, path, &f);
    if (r != ACCEL_OK) return r;
    r = accel__st_parse(f);
    if (r != ACCEL_OK) { accel_st_file_destroy(f); return r; }
    *out = f;
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_st_file_open_memory(accel *acc, const void *bytes, size_t size, accel_st_file **out) {
    accel_st_file *f = NULL;
    accel_result r;
    if ((!bytes && size) || !out)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_st_file_open_memory: NULL argument");
    *out = NULL;
    r = accel__st_new(acc, "<memory>", &f);
    if (r != ACCEL_OK) return r;
    f->map = bytes ? (const unsigned char *)bytes : (const unsigned char *)"";
    f->size = size;
    r = accel__st_parse(f);
    if (r != ACCEL_OK) { accel_st_file_destroy(f); return r; }
    *out = f;
    return ACCEL_OK;
}

ACCEL__DEF int accel_st_file_count(const accel_st_file *f) { return f ? (int)stbds_arrlen(f->entries) : 0; }
ACCEL__DEF const accel_st_entry *accel_st_file_entry(const accel_st_file *f, int i) {
    if (!f || i < 0 || i >= (int)stbds_arrlen(f->entries)) return NULL;
    return &f->entries[i];
}
ACCEL__DEF int accel_st_file_find(const accel_st_file *f, const char *name) {
    size_t lo = 0, hi;
    if (!f || !name || !f->by_name) return -1;
    hi = (size_t)stbds_arrlen(f->entries);
    while (lo < hi) { /* binary search of the sorted names */
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(f->by_name[mid]->name, name);
        if (c == 0) return (int)(f->by_name[mid] - f->entries);
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}
ACCEL__DEF int accel_st_file_metadata_count(const accel_st_file *f) { return f ? (int)stbds_arrlen(f->meta) / 2 : 0; }
ACCEL__DEF accel_result accel_st_file_metadata(const accel_st_file *f, int i, const char **key, size_t *key_len,
                                                 const char **value, size_t *value_len) {
    if (!f || i < 0 || i >= accel_st_file_metadata_count(f))
        return ACCEL__FAIL(f ? f->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, "metadata index %d out of range", i);
    if (key) *key = f->meta[2 * i];
    if (key_len) *key_len = f->meta_len[2 * i];
    if (value) *value = f->meta[2 * i + 1];
    if (value_len) *value_len = f->meta_len[2 * i + 1];
    return ACCEL_OK;
}
ACCEL__DEF const char *accel_st_file_metadata_get(const accel_st_file *f, const char *key) {
    int i;
    size_t n;
    if (!f || !key) return NULL;
    n = strlen(key);
    for (i = 0; i < accel_st_file_metadata_count(f); ++i) /* the whole key: "k\0x" is not "k" */
        if (f->meta_len[2 * i] == n && !memcmp(f->meta[2 * i], key, n)) return f->meta[2 * i + 1];
    return NULL;
}

/* dtype/shape check of one destination against the file. */
static accel_result accel__st_check_dst(accel_st_file *f, const accel_tensor *dst, int *idx) {
    const accel_st_entry *e;
    int k, same;
    if (!dst || !dst->name)
        return ACCEL__FAIL(f->acc, ACCEL_ERR_INVALID_ARGUMENT, "load: destination tensor or its name is NULL");
    k = accel_st_file_find(f, dst->name);
    if (k < 0) return ACCEL__FAIL(f->acc, ACCEL_ERR_NOT_FOUND, "tensor '%.200s' is not in %.300s", dst->name, f->path);
    e = &f->entries[k];
    same = e->dtype == dst->dtype && e->ndim == dst->ndim && dst->ndim >= 0 && dst->ndim <= ACCEL_MAX_DIMS;
    if (same && e->ndim > 0) same = !memcmp(e->shape, dst->shape, sizeof(int64_t) * (size_t)e->ndim);
    if (!same) {
        char se[200], sf[200];
        const char *dn = accel_dtype_name(dst->dtype);
        accel__st_shape_str(se, sizeof se, dst->ndim < 0 || dst->ndim > ACCEL_MAX_DIMS ? 0 : dst->ndim, dst->shape);
        accel__st_shape_str(sf, sizeof sf, e->ndim, e->shape);
        return ACCEL__FAIL(f->acc, ACCEL_ERR_INVALID_ARGUMENT, "tensor '%.200s': expected %s %s, found %s %s in %.300s",
                           dst->name, dn ? dn : "?", se, accel_dtype_name(e->dtype), sf, f->path);
    }
    if (e->end > e->begin && !dst->ptr)
        return ACCEL__FAIL(f->acc, ACCEL_ERR_INVALID_ARGUMENT, "tensor '%.200s': destination pointer is NULL",
                           dst->name);
    *idx = k;
    return ACCEL_OK;
}
static accel_result accel__st_copy(accel_st_file *f, int k, void *dst, accel__st_stage *stage) {
    const accel_st_entry *e = &f->entries[k];
    uint64_t nb = e->end - e->begin;
    if (nb == 0) return ACCEL_OK;
    if (accel__st_is_device_ptr(dst)) /* from the file (pread), or from the entry's bytes in memory */
        return accel__st_read_to_device(f->acc, stage, f->fd, f->fd >= 0 ? f->map : (const unsigned char *)e->data,
                                          f->fd >= 0 ? f->data_start + e->begin : 0, dst, nb, e->name);
    if (f->fd >= 0) {
        if (accel__pread_all(f->fd, dst, (size_t)nb, f->data_start + e->begin) != 0)
            return accel__io_fail(f->acc, "cannot read", f->path);
    } else {
        memcpy(dst, e->data, (size_t)nb);
    }
    return ACCEL_OK;
}
/* The same copy from the file's mapping (load_state: the bytes its checksum was just computed from). */
ACCEL__PRIVATE accel_result accel__st_copy_mapped(accel_st_file *f, int k, void *dst, accel__st_stage *stage) {
    const accel_st_entry *e = &f->entries[k];
    uint64_t nb = e->end - e->begin;
    if (nb == 0) return ACCEL_OK;
    if (accel__st_is_device_ptr(dst))
        return accel__st_read_to_device(f->acc, stage, -1, (const unsigned char *)e->data, 0, dst, nb, e->name);
    memcpy(dst, e->data, (size_t)nb);
    return ACCEL_OK;
}
ACCEL__DEF accel_result accel_st_file_load(accel_st_file *f, const accel_tensor *dst) {
    return accel_st_file_load_all(f, dst, 1);
}
ACCEL__DEF accel_result accel_st_file_load_all(accel_st_file *f, const accel_tensor *dst, int n) {
    int i, *idx;
    accel__st_stage stage;
    accel_result r = ACCEL_OK;
    if (!f || n < 0 || (n > 0 && !dst))
        return ACCEL__FAIL(f ? f->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, "load: bad arguments");
    if (n == 0) return ACCEL_OK;
    idx = (int *)accel_host_alloc(f->acc, sizeof(int) * (size_t)n);
    if (!idx) return accel__fail_wrap(f->acc, ACCEL_ERR_OUT_OF_MEMORY, "load from %.300s", f->path);
    for (i = 0; i < n && r == ACCEL_OK; ++i) r = accel__st_check_dst(f, &dst[i], &idx[i]);
    accel__st_stage_begin(&stage, f->acc);
    for (i = 0; i < n && r == ACCEL_OK; ++i) r = accel__st_copy(f, idx[i], dst[i].ptr, &stage);
    accel__st_stage_end(&stage);
    accel_host_free(f->acc, idx);
    return r;
}

/* -------------------------------------------------------------------------- 6. sharded models: plan, save, load */
ACCEL__DEF accel_result accel_st_plan_shards(accel *acc, const uint64_t *sizes, int n, uint64_t max, int *shard_of,
                                               uint64_t *shard_bytes, int *n_shards) {
    int i, j, ns = 0, cur_first = -1;
    uint64_t cur_size = 0;
    if (n < 0 || (n > 0 && (!sizes || !shard_of || !shard_bytes)) || !n_shards)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "plan_shards: bad arguments");
    /* huggingface_hub split_state_dict_into_shards_factory: an oversize tensor is appended to the shard list at
       once, as its own shard, without closing the current one; otherwise a tensor that does not fit closes the
       current shard. Shard numbers are positions in that list. Members of the open shard are marked -2. */
    for (i = 0; i < n; ++i) {
        if (sizes[i] > max) {
            shard_of[i] = ns;
            shard_bytes[ns++] = sizes[i];
            continue;
        }
        if (cur_first >= 0 && cur_size + sizes[i] > max) {
            for (j = cur_first; j < i; ++j)
                if (shard_of[j] == -2) shard_of[j] = ns;
            shard_bytes[ns++] = cur_size;
            cur_first = -1;
            cur_size = 0;
        }
        if (cur_first < 0) cur_first = i;
        shard_of[i] = -2;
        cur_size += sizes[i];
    }
    if (cur_first >= 0) {
        for (j = cur_first; j < n; ++j)
            if (shard_of[j] == -2) shard_of[j] = ns;
        shard_bytes[ns++] = cur_size;
    }
    *n_shards = ns;
    return ACCEL_OK;
}

ACCEL__DEF void accel_st_shard_name(int shard, int n_shards, char *out, size_t cap) {
    if (!out || cap == 0) return;
    if (n_shards <= 1) accel__fmt(out, cap, "model.safetensors");
    else accel__fmt(out, cap, "model-%05d-of-%05d.safetensors", shard + 1, n_shards);
}

static int accel__st_is_shard_name(const char *s) { /* model-NNNNN-of-NNNNN.safetensors */
    int i;
    if (strlen(s) != strlen("model-00001-of-00001.safetensors") || strncmp(s, "model-", 6)) return 0;
    for (i = 6; i < 11; ++i)
        if (s[i] < '0' || s[i] > '9') return 0;
    if (strncmp(s + 11, "-of-", 4)) return 0;
    for (i = 15; i < 20; ++i)
        if (s[i] < '0' || s[i] > '9') return 0;
    return !strcmp(s + 20, ".safetensors");
}

typedef struct accel__st_name_file { const char *name; int shard; } accel__st_name_file;
static int accel__st_name_file_cmp(const void *a, const void *b) {
    return strcmp(((const accel__st_name_file *)a)->name, ((const accel__st_name_file *)b)->name);
}
/* The index exactly as json.dumps(obj, indent=2, sort_keys=True) + "\n". */
static void accel__st_index_json(accel__sb *b, const accel_tensor *t, int n, const int *shard_of, int ns,
                                 uint64_t total) {
    accel__st_name_file *nf =
        (accel__st_name_file *)accel_host_alloc(b->acc, sizeof(accel__st_name_file) * (size_t)(n ? n : 1));
    int i;
    char fname[64];
    if (!nf) { b->oom = 1; return; }
    for (i = 0; i < n; ++i) { nf[i].name = t[i].name; nf[i].shard = shard_of[i]; }
    qsort(nf, (size_t)n, sizeof *nf, accel__st_name_file_cmp);
    accel__sb_puts(b, "{\n  \"metadata\": {\n    \"total_size\": ");
    accel__st_sb_u64(b, total);
    accel__sb_puts(b, "\n  },\n  \"weight_map\": {");
    for (i = 0; i < n; ++i) {
        accel__sb_puts(b, i ? ",\n    " : "\n    ");
        accel__sb_json_str(b, nf[i].name, strlen(nf[i].name), 1);
        accel__sb_puts(b, ": ");
        accel_st_shard_name(nf[i].shard, ns, fname, sizeof fname);
        accel__sb_json_str(b, fname, strlen(fname), 1);
    }
    accel__sb_puts(b, n ? "\n  }\n}\n" : "}\n}\n");
    accel_host_free(b->acc, nf);
}

static accel_result accel__st_save_model_local(accel *acc, const char *dir, const accel_tensor *t, int n,
                                               uint64_t max) {
    int *shard_of = NULL, ns = 0, s, i;
    uint64_t *sizes = NULL, *shard_bytes = NULL, total = 0;
    accel_tensor *sub = NULL;
    const char *meta[2] = {"format", "pt"};
    char path[4200], fname[64];
    accel_result r = accel__st_check_tensors(acc, t, n, "save_model");
    DIR *d;
    struct dirent *de;
    if (r != ACCEL_OK) return r;
    if (n == 0) return ACCEL_OK; /* Accelerate writes nothing for an empty state dict */
    if (accel__mkdir_p(dir, NULL, 0) != 0) return accel__io_fail(acc, "cannot create directory", dir);
    sizes = (uint64_t *)accel_host_alloc(acc, sizeof(uint64_t) * (size_t)n);
    shard_bytes = (uint64_t *)accel_host_alloc(acc, sizeof(uint64_t) * (size_t)n);
    shard_of = (int *)accel_host_alloc(acc, sizeof(int) * (size_t)n);
    sub = (accel_tensor *)accel_host_alloc(acc, sizeof(accel_tensor) * (size_t)n);
    if (!sizes || !shard_bytes || !shard_of || !sub) {
        r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "save_model");
        goto done;
    }
    for (i = 0; i < n; ++i) { sizes[i] = (uint64_t)accel_tensor_nbytes(&t[i]); total += sizes[i]; }
    r = accel_st_plan_shards(acc, sizes, n, max, shard_of, shard_bytes, &ns);
    for (s = 0; s < ns && r == ACCEL_OK; ++s) {
        int m = 0;
        for (i = 0; i < n; ++i)
            if (shard_of[i] == s) sub[m++] = t[i];
        accel_st_shard_name(s, ns, fname, sizeof fname);
        accel__fmt(path, sizeof path, "%s/%s", dir, fname);
        r = accel__st_save(acc, path, sub, m, meta, 1, 1, NULL, NULL);
    }
    if (r != ACCEL_OK) goto done;
    accel__fmt(path, sizeof path, "%s/model.safetensors.index.json", dir);
    if (ns > 1) {
        accel__sb b;
        accel__sb_init(&b, acc);
        accel__st_index_json(&b, t, n, shard_of, ns, total);
        if (b.oom) r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "%.300s", path);
        else r = accel__write_file(acc, path, b.p, b.n, 1);
        accel__sb_free(&b);
        if (r != ACCEL_OK) goto done;
        accel__fmt(path, sizeof path, "%s/model.safetensors", dir);
    }
    /* the other layout's file is stale: the index for a single file, model.safetensors for shards */
    if (unlink(path) != 0 && errno != ENOENT) { r = accel__io_fail(acc, "cannot remove stale", path); goto done; }
    /* stale shards of the prefix that are not part of this save */
    d = opendir(dir);
    if (!d) { r = accel__io_fail(acc, "cannot list", dir); goto done; }
    while ((de = readdir(d)) != NULL) {
        int keep = 0;
        if (!accel__st_is_shard_name(de->d_name)) continue;
        if (ns > 1)
            for (s = 0; s < ns && !keep; ++s) {
                accel_st_shard_name(s, ns, fname, sizeof fname);
                keep = !strcmp(fname, de->d_name);
            }
        if (keep) continue;
        accel__fmt(path, sizeof path, "%s/%s", dir, de->d_name);
        if (accel__is_file(path) && unlink(path) != 0) {
            r = accel__io_fail(acc, "cannot remove stale shard", path);
            break;
        }
    }
    closedir(d);
    if (r == ACCEL_OK && accel__fsync_dir(dir) != 0) r = accel__io_fail(acc, "cannot fsync directory", dir);
done:
    accel_host_free(acc, sizes);
    accel_host_free(acc, shard_bytes);
    accel_host_free(acc, shard_of);
    accel_host_free(acc, sub);
    return r;
}

ACCEL__DEF accel_result accel_st_save_model_bytes(accel *acc, const char *dir, const accel_tensor *tensors, int n,
                                                    uint64_t max_shard_size, int save_on_each_node) {
    accel_result r = ACCEL_OK;
    int writer =
        !acc || acc->num_processes <= 1 || (save_on_each_node ? acc->is_local_main_process : acc->is_main_process);
    if (!dir) r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "save_model: dir is NULL");
    else if (writer) r = accel__st_save_model_local(acc, dir, tensors, n, max_shard_size);
    return accel__agree(acc, r, "save_model");
}
ACCEL__DEF accel_result accel_st_save_model(accel *acc, const char *dir, const accel_tensor *tensors, int n,
                                              const char *max_shard_size) {
    uint64_t max = 0;
    accel_result r = accel_parse_size(acc, max_shard_size ? max_shard_size : "10GB", &max);
    if (r != ACCEL_OK) return accel__agree(acc, r, "save_model");
    return accel_st_save_model_bytes(acc, dir, tensors, n, max, 0);
}

/* model.safetensors.index.json → weight_map as parallel stb_ds arrays of strings from acc's allocator. */
typedef struct accel__st_index { accel *acc; char **names; char **files; } accel__st_index;
static void accel__st_index_free(accel__st_index *x) {
    int i;
    for (i = 0; i < (int)stbds_arrlen(x->names); ++i) {
        accel_host_free(x->acc, x->names[i]);
        accel_host_free(x->acc, x->files[i]);
    }
    stbds_arrfree(x->names);
    stbds_arrfree(x->files);
    x->names = x->files = NULL;
}
static int accel__st_safe_file_name(const char *s) {
    return *s && strcmp(s, ".") && strcmp(s, "..") && !strchr(s, '/') && strlen(s) <= 255;
}
static accel_result accel__st_index_parse(accel *acc, const char *what, const void *data, size_t n,
                                          accel__st_index *out) {
    accel__st_json j;
    int root, wm, md, c;
    size_t bad = 0;
    accel_result r = ACCEL_OK;
    memset(out, 0, sizeof *out);
    out->acc = acc;
    if (!accel__utf8_valid((const unsigned char *)data, n, &bad))
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.300s is not valid UTF-8 (byte %lu)", what, (unsigned long)bad);
    root = accel__st_json_parse(&j, acc, data, n);
    if (root < 0) { r = accel__st_json_failed(acc, &j, what); accel__st_json_free(&j); return r; }
    wm = accel__st_jget(&j, root, "weight_map");
    md = accel__st_jget(&j, root, "metadata");
    if (j.nodes[root].type != ACCEL__ST_J_OBJ || wm < 0 || j.nodes[wm].type != ACCEL__ST_J_OBJ ||
        (md >= 0 && j.nodes[md].type != ACCEL__ST_J_OBJ)) {
        accel__st_json_free(&j);
        return ACCEL__FAIL(
            acc, ACCEL_ERR_FORMAT,
            "%.300s: expected an object with a \"weight_map\" object (and an optional \"metadata\" object)", what);
    }
    for (c = j.nodes[wm].first; c >= 0; c = j.nodes[c].next) {
        char *a, *b;
        if (j.nodes[c].type != ACCEL__ST_J_STR || strlen(accel__st_jstr(&j, c)) != j.nodes[c].len ||
            !accel__st_safe_file_name(accel__st_jstr(&j, c))) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.300s: weight_map entry '%.200s' is not a plain file name", what,
                            accel__st_jkeyp(&j, c));
            break;
        }
        if (strlen(accel__st_jkeyp(&j, c)) != j.nodes[c].keylen) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.300s: a tensor name contains NUL", what);
            break;
        }
        a = accel__st_strndup(acc, accel__st_jkeyp(&j, c), j.nodes[c].keylen);
        b = accel__st_strndup(acc, accel__st_jstr(&j, c), j.nodes[c].len);
        if (!a || !b) {
            accel_host_free(acc, a);
            accel_host_free(acc, b);
            r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "%.300s", what);
            break;
        }
        if (accel__arr_reserve((void **)&out->names, sizeof *out->names, 1) ||
            accel__arr_reserve((void **)&out->files, sizeof *out->files, 1)) {
            accel_host_free(acc, a);
            accel_host_free(acc, b);
            r = ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "%.300s: out of memory", what);
            break;
        }
        (void)ACCEL__ARR_PUT(out->names, a); /* reserved above: cannot fail */
        (void)ACCEL__ARR_PUT(out->files, b);
    }
    accel__st_json_free(&j);
    if (r != ACCEL_OK) accel__st_index_free(out);
    return r;
}

ACCEL__DEF accel_result accel_st_load_model(accel *acc, const char *dir, const accel_tensor *t, int n) {
    char path[4200];
    accel__st_index ix;
    accel_st_file **files = NULL;
    char **fnames = NULL;
    int *file_of = NULL, *idx = NULL, nf = 0, i, k, sharded, total = 0;
    char *data = NULL;
    size_t dn = 0;
    accel_result r;
    accel__st_stage stage;
    if (!dir) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "load_model: dir is NULL");
    r = accel__st_check_tensors(acc, t, n, "load_model");
    if (r != ACCEL_OK) return r;
    memset(&ix, 0, sizeof ix);
    ix.acc = acc;
    accel__st_stage_begin(&stage, acc);
    accel__fmt(path, sizeof path, "%s/model.safetensors.index.json", dir);
    sharded = accel__is_file(path);
    if (sharded) {
        r = accel__read_file(acc, path, &data, &dn, (size_t)100000000);
        if (r == ACCEL_OK) r = accel__st_index_parse(acc, path, data, dn, &ix);
        accel_host_free(acc, data);
        if (r != ACCEL_OK) return r;
        for (i = 0; i < (int)stbds_arrlen(ix.files); ++i) {
            for (k = 0; k < nf; ++k)
                if (!strcmp(fnames[k], ix.files[i])) break;
            if (k == nf) {
                if (ACCEL__ARR_PUT(fnames, ix.files[i]) != 0) {
                    r = ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "load_model: out of memory");
                    goto done;
                }
                ++nf;
            }
        }
    } else {
        if (ACCEL__ARR_PUT(fnames, (char *)"model.safetensors") != 0) {
            r = ACCEL__FAIL(acc, ACCEL_ERR_OUT_OF_MEMORY, "load_model: out of memory");
            goto done;
        }
        nf = 1;
    }
    files = (accel_st_file **)accel__st_zalloc(acc, (size_t)nf, sizeof *files);
    file_of = (int *)accel_host_alloc(acc, sizeof(int) * (size_t)(n ? n : 1));
    idx = (int *)accel_host_alloc(acc, sizeof(int) * (size_t)(n ? n : 1));
    if (!files || !file_of || !idx) { r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "load_model"); goto done; }
    for (k = 0; k < nf && r == ACCEL_OK; ++k) {
        accel__fmt(path, sizeof path, "%s/%s", dir, fnames[k]);
        r = accel_st_file_open(acc, path, &files[k]);
        if (r == ACCEL_OK) total += accel_st_file_count(files[k]);
    }
    /* every requested tensor found with the right dtype/shape; nothing else in the files */
    for (i = 0; i < n && r == ACCEL_OK; ++i) {
        file_of[i] = 0;
        if (sharded) {
            int w, nw = (int)stbds_arrlen(ix.names);
            for (w = 0; w < nw; ++w)
                if (!strcmp(ix.names[w], t[i].name)) break;
            if (w == nw) {
                r = ACCEL__FAIL(acc, ACCEL_ERR_NOT_FOUND, "tensor '%.200s' is not in the weight_map of %.300s",
                                t[i].name, dir);
                break;
            }
            for (k = 0; k < nf; ++k)
                if (!strcmp(fnames[k], ix.files[w])) file_of[i] = k;
        }
        r = accel__st_check_dst(files[file_of[i]], &t[i], &idx[i]);
    }
    if (r == ACCEL_OK && total != n)
        r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                        "%.300s holds %d tensors but %d were requested (unexpected tensors in the checkpoint)", dir,
                        total, n);
    if (r == ACCEL_OK && sharded && (int)stbds_arrlen(ix.names) != n)
        r = ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "%.300s: the weight_map lists %d tensors but the shards hold %d", dir,
                        (int)stbds_arrlen(ix.names), n);
    for (i = 0; i < n && r == ACCEL_OK; ++i) r = accel__st_copy(files[file_of[i]], idx[i], t[i].ptr, &stage);
done:
    accel__st_stage_end(&stage);
    if (files)
        for (k = 0; k < nf; ++k) accel_st_file_destroy(files[k]);
    accel_host_free(acc, files);
    accel_host_free(acc, file_of);
    accel_host_free(acc, idx);
    stbds_arrfree(fnames);
    accel__st_index_free(&ix);
    return r;
}

#endif /* ACCEL_IMPLEMENTATION && !ACCEL__SAFETENSORS_IMPL_DONE */

/* accel is released under the MIT licence. Copyright (c) 2026 the accel authors. */
