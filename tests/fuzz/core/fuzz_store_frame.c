/* libFuzzer target: the host store as pure state machines fed byte streams (no sockets): rank 0's side of the
   admission handshake (accel__admit_step with the store's own admission rule), a peer's side (rank 0's CHALLENGE and
   WELCOME), and the hub's handling of contributions (frame header, accel__store_check_op, accel__store_combine).
   Byte 0 picks the part and the mode: keyed (a secret) or not, and "legit": the harness builds the frame the real
   peer would send and the input then changes bytes of it. Invariants: a keyed rank 0 never admits a HELLO whose
   authenticated fields differ from what a holder of the secret sent (nor does a keyed peer accept such a WELCOME);
   an unchanged legit HELLO/WELCOME is accepted; an admitted peer holds the slot of the rank it proved; the hub's
   result is every accepted contribution in rank order. */
#define ACCEL_IMPLEMENTATION
#include "accel.h"
#include <stdint.h>
#include <string.h>
#include "../fuzz_admit.h"

static void quiet(void *u, accel_log_level l, const char *m) { (void)u; (void)l; (void)m; }

/* applies "XOR at offset" pairs from the input to buf[0..n); changed[i] = 1 where the byte ends up different */
static void mutate(rd *in, unsigned char *buf, size_t n, unsigned char *changed) {
    unsigned k = take(in) % 8, i;
    memset(changed, 0, n);
    for (i = 0; i < k && n; ++i) {
        size_t off = (size_t)(take(in) | take(in) << 8) % n;
        unsigned char x = (unsigned char)take(in);
        buf[off] ^= x;
        changed[off] ^= x; /* the net XOR: two changes of one byte may cancel */
    }
    for (i = 0; i < n; ++i) changed[i] = changed[i] != 0;
}

static void server_side(rd *in, int keyed, int legit) {
    accel__admit a;
    accel__admit_conn c;
    accel__store st;
    accel__store_setup su;
    int fds[4] = {-1, -1, -1, -1}, verdict = ACCEL__ADMIT_MORE, auth_changed = 0, i;
    unsigned char frame[ACCEL__ST_HDR + ACCEL__ADMIT_HELLO_FIXED + ACCEL__ST_MAX_TOKEN + 64], changed[sizeof frame];
    unsigned char nonces[4 * 2 * ACCEL__ADMIT_NONCE], cli[ACCEL__ADMIT_NONCE];
    uint32_t world = 4, rank = 1;
    size_t n, off = 0;
    char why[400];
    fuzz_admit(&a, "store", keyed);
    memset(&c, 0, sizeof c);
    c.fd = 77;
    for (i = 0; i < ACCEL__ADMIT_NONCE; ++i) c.nonce[i] = (unsigned char)(i * 7 + 1);
    memset(&st, 0, sizeof st);
    st.size = 4;
    st.fd = fds;
    su.st = &st;
    su.nonces = nonces;
    if (legit) {
        world = take(in) % 6;
        rank = take(in) % 6;
        for (i = 0; i < ACCEL__ADMIT_NONCE; ++i) cli[i] = (unsigned char)take(in);
        n = accel__admit_put_hello(&a, world, rank, c.nonce, cli, frame);
        mutate(in, frame, n, changed);
        /* the fields the proof covers: world, rank, the peer's nonce, the proof itself, the run id */
        for (i = 0; i < (int)n; ++i) {
            int po = i - ACCEL__ST_HDR;
            if (changed[i] && po >= 4 && (po < 12 || po >= 20)) auth_changed = 1;
        }
    } else {
        n = in->n < sizeof frame ? in->n : sizeof frame;
        memcpy(frame, in->p, n);
        in->p += n;
        in->n -= n;
    }
    while (off < n && verdict == ACCEL__ADMIT_MORE) {
        long need = accel__admit_need(&c);
        size_t k = 1 + (size_t)(frame[off] % 61);
        if (need <= 0) { verdict = ACCEL__ADMIT_DROP; break; }
        if (k > (size_t)need) k = (size_t)need;
        if (k > n - off) k = n - off;
        verdict = accel__admit_step(&a, &c, frame + off, k, accel__store_admit, &su, why, sizeof why);
        off += k;
    }
    if (verdict == ACCEL__ADMIT_KEPT || verdict == ACCEL__ADMIT_DONE) {
        if (keyed && a.keyed && (!legit || auth_changed)) __builtin_trap(); /* admitted without the secret */
        if (world != 4 && legit && !auth_changed) __builtin_trap();
        if (fds[0] == 77) __builtin_trap(); /* rank 0 is the hub itself */
        if (fds[1] != 77 && fds[2] != 77 && fds[3] != 77) __builtin_trap(); /* admitted but holds no slot */
        if (verdict == ACCEL__ADMIT_DONE) __builtin_trap();                 /* 3 slots: one peer cannot fill them */
    }
    if (legit && off == n && !auth_changed && world == 4 && rank >= 1 && rank < 4) {
        /* an unchanged HELLO from a holder of the secret: admitted (changes outside the proof may break framing) */
        int framing = 0;
        for (i = 0; i < (int)n; ++i)
            if (changed[i]) framing = 1;
        if (!framing && verdict != ACCEL__ADMIT_KEPT) __builtin_trap();
    }
}

static void client_side(rd *in, int keyed, int legit) {
    accel__admit a;
    unsigned char srv[ACCEL__ADMIT_NONCE], cli[ACCEL__ADMIT_NONCE], msg[4 + ACCEL__ADMIT_MAC + 256],
        changed[sizeof msg];
    const unsigned char *body;
    size_t blen, n = 0, i;
    char why[400];
    accel__st_frame f;
    int auth_changed = 0, ok;
    fuzz_admit(&a, "store", keyed);
    /* a CHALLENGE from whoever holds the port */
    if (in->n >= ACCEL__ST_HDR && accel__store_parse_header(in->p, in->n, &f, why, sizeof why) == 0 &&
        f.kind == ACCEL__ST_CHALLENGE && in->n >= ACCEL__ST_HDR + f.len)
        (void)accel__admit_parse_challenge(in->p + ACCEL__ST_HDR, f.len, srv, why, sizeof why);
    for (i = 0; i < ACCEL__ADMIT_NONCE; ++i) { srv[i] = (unsigned char)take(in); cli[i] = (unsigned char)(i + 3); }
    if (legit) {
        unsigned char body_in[256];
        size_t bl = take(in) % 200, pre;
        for (i = 0; i < bl; ++i) body_in[i] = (unsigned char)take(in);
        pre = accel__admit_put_welcome(&a, 4, 2, srv, cli, body_in, bl, msg);
        if (!pre) return;
        memcpy(msg + pre, body_in, bl);
        n = pre + bl;
        mutate(in, msg, n, changed);
        for (i = 0; i < n; ++i)
            if (changed[i]) auth_changed = 1; /* everything after the flags is covered by the proof */
    } else {
        n = in->n < sizeof msg ? in->n : sizeof msg;
        memcpy(msg, in->p, n);
    }
    ok = accel__admit_check_welcome(&a, msg, n, srv, cli, 4, 2, &body, &blen, why, sizeof why) == 0;
    if (ok && (body < msg || body + blen > msg + n)) __builtin_trap();
    if (ok && a.keyed && (!legit || auth_changed)) __builtin_trap(); /* a WELCOME forged without the secret */
    if (legit && !auth_changed && !ok) __builtin_trap();
}

static void hub_side(rd *in) {
    accel__store st;
    int fds[4] = {-1, 1, 2, 3}, P = 2 + (int)(take(in) % 3), op = 1 + (int)(take(in) % 3), root = (int)(take(in) % 4);
    unsigned char *bufs[4] = {NULL, NULL, NULL, NULL}, mine[16], *out;
    uint64_t want[4];
    int r, got = 0;
    size_t total, i;
    char why[400];
    if (root >= P) root = 0;
    memset(&st, 0, sizeof st);
    st.size = P;
    st.fd = fds;
    st.seq = take(in);
    for (r = 0; r < 4; ++r) want[r] = op == ACCEL__ST_OP_BCAST ? (r == root ? 16 : 0) : 8 * (uint64_t)(r + 1);
    for (i = 0; i < sizeof mine; ++i) mine[i] = (unsigned char)(i * 5);
    /* frames as the peers' streams deliver them: each one checked as the hub checks it */
    while (in->n >= ACCEL__ST_HDR && got < P - 1) {
        accel__st_frame f;
        r = 1 + (int)(in->p[8] % (unsigned)(P - 1 > 0 ? P - 1 : 1));
        if (accel__store_parse_header(in->p, in->n, &f, why, sizeof why) != 0) break;
        if (f.len > in->n - ACCEL__ST_HDR) break;
        if (!bufs[r] && accel__store_check_op(&st, &f, op, r, want[r], why, sizeof why) == 0) {
            if (f.len != want[r]) __builtin_trap();
            bufs[r] = (unsigned char *)accel_host_alloc(NULL, (size_t)f.len + 1);
            if (f.len) memcpy(bufs[r], in->p + ACCEL__ST_HDR, (size_t)f.len);
            ++got;
        }
        in->p += ACCEL__ST_HDR + f.len;
        in->n -= ACCEL__ST_HDR + (size_t)f.len;
    }
    if (got == P - 1) {
        size_t in_len = op == ACCEL__ST_OP_BCAST ? (root == 0 ? 16 : 0) : 8;
        total = accel__store_combine(op, P, root, mine, in_len, bufs, want, NULL);
        out = (unsigned char *)accel_host_alloc(NULL, total + 1);
        if (out) {
            size_t off = 0;
            (void)accel__store_combine(op, P, root, mine, in_len, bufs, want, out);
            /* the reference, written out: rank order, or the root's bytes */
            if (op == ACCEL__ST_OP_BCAST) {
                if (total != 16 || memcmp(out, root == 0 ? mine : bufs[root], 16) != 0) __builtin_trap();
            } else {
                if (memcmp(out, mine, 8) != 0) __builtin_trap();
                off = 8;
                for (r = 1; r < P; ++r) {
                    if (memcmp(out + off, bufs[r], (size_t)want[r]) != 0) __builtin_trap();
                    off += (size_t)want[r];
                }
                if (off != total) __builtin_trap();
            }
            accel_host_free(NULL, out);
        }
    }
    for (r = 0; r < 4; ++r) accel_host_free(NULL, bufs[r]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    rd in;
    unsigned mode;
    accel__st_frame f;
    char why[200];
    accel_set_default_logger(quiet, NULL);
    /* the header parser alone, on the raw input */
    if (accel__store_parse_header(data, size, &f, why, sizeof why) == 0 &&
        (f.len > ACCEL__ST_MAX_PAYLOAD || f.kind < ACCEL__ST_HELLO || f.kind > ACCEL__ST_CHALLENGE))
        __builtin_trap();
    in.p = data;
    in.n = size;
    mode = take(&in);
    switch (mode % 3) {
    case 0: server_side(&in, (mode >> 2) & 1, (mode >> 3) & 1); break;
    case 1: client_side(&in, (mode >> 2) & 1, (mode >> 3) & 1); break;
    default: hub_side(&in); break;
    }
    return 0;
}
