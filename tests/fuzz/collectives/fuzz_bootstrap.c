/* libFuzzer target: the NCCL bootstraps' parsers of untrusted bytes. TCP: rank 0's side of the handshake (the core's
   accel__admit_step with the bootstrap's own admission rule, which answers an admitted peer with the bytes — over a
   socketpair made once, drained after each input) and a peer's side (rank 0's CHALLENGE and WELCOME, label
   "nccl-tcp"). File: accel__admit_unseal on the input, and the real reader (accel_coll_file_broadcast) on the input
   written to a file. Byte 0 picks the part and the mode (keyed or not; legit: the harness makes what a holder of the
   secret would send and the input changes bytes of it). Invariants: without the secret nothing is admitted or
   accepted; the bytes reach only an admitted peer; an unchanged legit message is accepted and yields the bytes. */
#define ACCEL_IMPLEMENTATION
#include "accel.h"
#include "accel_collectives.h"
#include <fcntl.h>
#include <stdlib.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "../fuzz_admit.h"

static void quiet(void *u, accel_log_level l, const char *m) { (void)u; (void)l; (void)m; }
static int sv[2] = {-1, -1};
static char path[128];
static const unsigned char secret_id[16] = {0x5e, 0xc7, 0xe7, 0x1d, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0xaa, 0xbb};

static void cleanup(void) { unlink(path); }
/* XORs bytes of buf[0..n) where the input says; 1 when a byte in [from, n) ended up different (skip: a range of
   bytes the proof does not cover, [skip0, skip1)) */
static int mutate(rd *in, unsigned char *buf, size_t n, size_t from, size_t skip0, size_t skip1) {
    unsigned char orig[600];
    unsigned k = take(in) % 6, i;
    size_t j;
    if (n > sizeof orig) return 1;
    memcpy(orig, buf, n);
    for (i = 0; i < k && n; ++i) {
        size_t off = (size_t)(take(in) | take(in) << 8) % n;
        buf[off] ^= (unsigned char)take(in);
    }
    for (j = from; j < n; ++j)
        if (buf[j] != orig[j] && (j < skip0 || j >= skip1)) return 1;
    return 0;
}
/* drains what the callback sent: returns 1 when the bytes were in it */
static int drained_id(void) {
    unsigned char b[4096];
    ssize_t k;
    size_t i, n = 0;
    int found = 0;
    while ((k = recv(sv[1], b + n, sizeof b - n, MSG_DONTWAIT)) > 0) {
        n += (size_t)k;
        if (n == sizeof b) break;
    }
    for (i = 0; i + sizeof secret_id <= n; ++i)
        if (memcmp(b + i, secret_id, sizeof secret_id) == 0) found = 1;
    return found;
}

static void tcp_server(rd *in, int keyed, int legit) {
    accel__admit a;
    accel__admit_conn c;
    accel__coll_tcp_serve s;
    unsigned char done[4] = {0, 0, 0, 0}, frame[ACCEL__ST_HDR + ACCEL__ADMIT_HELLO_FIXED + ACCEL__ST_MAX_TOKEN + 8];
    size_t n, off = 0;
    int verdict = ACCEL__ADMIT_MORE, changed = 0, i;
    char why[400];
    fuzz_admit(&a, "nccl-tcp", keyed);
    memset(&c, 0, sizeof c);
    for (i = 0; i < ACCEL__ADMIT_NONCE; ++i) c.nonce[i] = (unsigned char)(i + 100);
    c.fd = dup(sv[0]); /* the callback closes it */
    memset(&s, 0, sizeof s);
    s.adm = &a;
    s.data = secret_id;
    s.bytes = sizeof secret_id;
    s.size = 4;
    s.done = done;
    s.deadline = accel_now() + 0.5;
    if (legit) {
        unsigned char cli[ACCEL__ADMIT_NONCE];
        memset(cli, (int)take(in), sizeof cli);
        n = accel__admit_put_hello(&a, take(in) % 5, take(in) % 5, c.nonce, cli, frame);
        /* the proof covers the world size, the rank, the nonce, the proof and the run id */
        changed = mutate(in, frame, n, ACCEL__ST_HDR + 4, ACCEL__ST_HDR + 12, ACCEL__ST_HDR + 20);
    } else {
        n = in->n < sizeof frame ? in->n : sizeof frame;
        memcpy(frame, in->p, n);
    }
    while (off < n && verdict == ACCEL__ADMIT_MORE) {
        long need = accel__admit_need(&c);
        size_t k = 1 + (size_t)(frame[off] % 50);
        if (need <= 0) break;
        if (k > (size_t)need) k = (size_t)need;
        if (k > n - off) k = n - off;
        verdict = accel__admit_step(&a, &c, frame + off, k, accel__coll_tcp_admit, &s, why, sizeof why);
        off += k;
    }
    if (verdict != ACCEL__ADMIT_KEPT && verdict != ACCEL__ADMIT_DONE) close(c.fd);
    if (drained_id()) {
        if (verdict != ACCEL__ADMIT_KEPT && verdict != ACCEL__ADMIT_DONE) __builtin_trap(); /* given to a stranger */
        if (a.keyed && (!legit || changed)) __builtin_trap();                               /* without the secret */
    }
}
static void tcp_client(rd *in, int keyed, int legit) {
    accel__admit a;
    unsigned char srv[ACCEL__ADMIT_NONCE], cli[ACCEL__ADMIT_NONCE], msg[4 + ACCEL__ADMIT_MAC + 64];
    const unsigned char *body = NULL;
    size_t blen = 0, n, i;
    int ok, changed = 0;
    char why[400];
    fuzz_admit(&a, "nccl-tcp", keyed);
    for (i = 0; i < ACCEL__ADMIT_NONCE; ++i) { srv[i] = (unsigned char)take(in); cli[i] = (unsigned char)(i * 3); }
    if (legit) {
        size_t pre = accel__admit_put_welcome(&a, 4, 3, srv, cli, secret_id, sizeof secret_id, msg);
        if (!pre) return;
        memcpy(msg + pre, secret_id, sizeof secret_id);
        n = pre + sizeof secret_id;
        changed = mutate(in, msg, n, 0, 0, 0);
    } else {
        n = in->n < sizeof msg ? in->n : sizeof msg;
        memcpy(msg, in->p, n);
    }
    ok = accel__admit_check_welcome(&a, msg, n, srv, cli, 4, 3, &body, &blen, why, sizeof why) == 0;
    if (ok && (body < msg || body + blen > msg + n)) __builtin_trap();
    if (ok && a.keyed && (!legit || changed)) __builtin_trap(); /* a forged WELCOME would plant another id */
    if (legit && !changed && (!ok || blen != sizeof secret_id || memcmp(body, secret_id, blen) != 0)) __builtin_trap();
}
static void file_reader(rd *in, int keyed, int legit) {
    accel__admit a;
    unsigned char *sealed = NULL, buf[600], got[sizeof secret_id];
    const unsigned char *body = NULL;
    size_t n = 0, blen = 0;
    int changed = 0, fd, ok;
    char why[400];
    fuzz_admit(&a, "nccl-file", keyed);
    if (legit) {
        if (accel__admit_seal(NULL, &a, secret_id, sizeof secret_id, &sealed, &n) != ACCEL_OK || n > sizeof buf) return;
        memcpy(buf, sealed, n);
        accel_host_free(NULL, sealed);
        changed = mutate(in, buf, n, 0, 0, 0);
    } else {
        n = in->n < sizeof buf ? in->n : sizeof buf;
        memcpy(buf, in->p, n);
    }
    ok = accel__admit_unseal(&a, buf, n, &body, &blen, why, sizeof why) == 0;
    if (ok && (body < buf || body + blen > buf + n)) __builtin_trap();
    if (ok && a.keyed && (!legit || changed)) __builtin_trap();
    if (legit && !changed && (!ok || blen != sizeof secret_id)) __builtin_trap();
    /* the real reader, on the same bytes in a file: it either returns the bytes of a file it accepted, or times out
       (ignored) or says the size differs — never anything else */
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) return;
    if (write(fd, buf, n) != (ssize_t)n) { close(fd); return; }
    close(fd);
    if (keyed) setenv("ACCEL_STORE_SECRET", "fuzz-secret", 1);
    else unsetenv("ACCEL_STORE_SECRET");
    memset(got, 0, sizeof got);
    {
        accel_result r = accel_coll_file_broadcast(NULL, path, 1, got, sizeof got, 0);
        if (r == ACCEL_OK && (!ok || memcmp(got, body, sizeof got) != 0)) __builtin_trap();
        if (r != ACCEL_OK && r != ACCEL_ERR_TIMEOUT && r != ACCEL_ERR_FORMAT) __builtin_trap();
        if (ok && blen == sizeof got && r != ACCEL_OK) __builtin_trap();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    rd in;
    unsigned mode;
    accel_set_default_logger(quiet, NULL);
    if (sv[0] < 0) {
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 0;
        snprintf(path, sizeof path, "/dev/shm/accel_fuzz_boot_%d", (int)getpid());
        atexit(cleanup);
        setenv("ACCEL_RUN_ID", "fuzz-run", 1);
        unsetenv("TORCHELASTIC_RUN_ID");
    }
    in.p = data;
    in.n = size;
    mode = take(&in);
    switch (mode % 3) {
    case 0: tcp_server(&in, (mode >> 2) & 1, (mode >> 3) & 1); break;
    case 1: tcp_client(&in, (mode >> 2) & 1, (mode >> 3) & 1); break;
    default: file_reader(&in, (mode >> 2) & 1, (mode >> 3) & 1); break;
    }
    return 0;
}
