/* libFuzzer target: strays beside a job (issue 26), as a pure model of the store's setup and first collective. A
   3-rank job with a secret: ranks 1 and 2 answer their challenges as accel does (accel__admit_put_hello); 1 to 4
   strays send what the input says — random bytes, or a real rank's HELLO recorded for another challenge (a replay),
   or a HELLO with a guessed proof. The input also decides who speaks when and in which pieces. Every piece goes
   through rank 0's real per-connection step (accel__admit_step) with the store's admission rule; then each rank
   sends its contribution to an all-gather, strays send frames the input makes, and the hub reads each slot's
   connection (accel__store_check_op, accel__store_combine). Invariants: strays are never admitted, the real ranks
   always are (whatever the strays did), and the all-gather's result is the ranks' contributions in rank order. */
#define ACCEL_IMPLEMENTATION
#include "accel.h"
#include <stdint.h>
#include <string.h>
#include "../fuzz_admit.h"

#define NREAL 2
#define MAXSTRAY 4

static void quiet(void *u, accel_log_level l, const char *m) { (void)u; (void)l; (void)m; }

typedef struct {
    accel__admit_conn c;
    unsigned char out[ACCEL__ST_HDR + ACCEL__ADMIT_HELLO_FIXED + ACCEL__ST_MAX_TOKEN + 64]; /* what it sends */
    size_t n, sent;
    int verdict;
} peer;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    accel__admit a;
    accel__store st;
    accel__store_setup su;
    peer ps[NREAL + MAXSTRAY];
    int fds[3] = {-1, -1, -1}, np, nstray, i, r, steps = 0;
    unsigned char nonces[3 * 2 * ACCEL__ADMIT_NONCE];
    unsigned char *bufs[3] = {NULL, NULL, NULL}, mine[8], *res;
    uint64_t want[3] = {8, 8, 8};
    char why[400];
    rd in;
    accel_set_default_logger(quiet, NULL);
    in.p = data;
    in.n = size;
    fuzz_admit(&a, "store", 1);
    memset(&st, 0, sizeof st);
    st.size = 3;
    st.fd = fds;
    su.st = &st;
    su.nonces = nonces;
    nstray = 1 + (int)(take(&in) % MAXSTRAY);
    np = NREAL + nstray;
    memset(ps, 0, sizeof ps);
    for (i = 0; i < np; ++i) {
        int b;
        ps[i].c.fd = 100 + i;
        for (b = 0; b < ACCEL__ADMIT_NONCE; ++b) ps[i].c.nonce[b] = (unsigned char)(i * 41 + b * 3 + 1); /* distinct */
        ps[i].verdict = ACCEL__ADMIT_MORE;
    }
    /* the real ranks answer their own challenges */
    for (i = 0; i < NREAL; ++i) {
        unsigned char cli[ACCEL__ADMIT_NONCE];
        memset(cli, 0x30 + i, sizeof cli);
        ps[i].n = accel__admit_put_hello(&a, 3, (uint32_t)(i + 1), ps[i].c.nonce, cli, ps[i].out);
    }
    /* the strays */
    for (i = NREAL; i < np; ++i) {
        unsigned kind = take(&in) % 3;
        if (kind == 0) { /* a real rank's HELLO, recorded for that rank's challenge, replayed here */
            memcpy(ps[i].out, ps[take(&in) % NREAL].out, sizeof ps[i].out);
            ps[i].n = ps[0].n;
        } else if (kind == 1) { /* a well-formed HELLO with a guessed proof (and maybe the secret-less flag) */
            accel__admit b = a;
            unsigned char cli[ACCEL__ADMIT_NONCE];
            size_t k;
            memset(cli, (int)take(&in), sizeof cli);
            b.keyed = 0;
            ps[i].n = accel__admit_put_hello(&b, 3, 1 + take(&in) % 2, ps[i].c.nonce, cli, ps[i].out);
            ps[i].out[ACCEL__ST_HDR + 12] = (unsigned char)(take(&in) & 1);
            for (k = 0; k < ACCEL__ADMIT_MAC; ++k)
                ps[i].out[ACCEL__ST_HDR + 20 + ACCEL__ADMIT_NONCE + k] = (unsigned char)take(&in);
        } else { /* anything */
            size_t k, n = take(&in) * 2;
            if (n > sizeof ps[i].out) n = sizeof ps[i].out;
            for (k = 0; k < n; ++k) ps[i].out[k] = (unsigned char)take(&in);
            ps[i].n = n;
        }
    }
    /* the schedule: who sends the next piece, and how big; the real ranks finish whatever happens */
    while (steps++ < 4096) {
        int who, pending = 0;
        size_t k;
        long need;
        for (i = 0; i < np; ++i) pending += ps[i].verdict == ACCEL__ADMIT_MORE && ps[i].sent < ps[i].n;
        if (!pending) break;
        who = in.n ? (int)(take(&in) % (unsigned)np) : 0;
        while (!(ps[who].verdict == ACCEL__ADMIT_MORE && ps[who].sent < ps[who].n)) who = (who + 1) % np;
        need = accel__admit_need(&ps[who].c);
        if (need <= 0) { ps[who].verdict = ACCEL__ADMIT_DROP; continue; }
        k = 1 + (in.n ? take(&in) % 40 : 40);
        if (k > (size_t)need) k = (size_t)need;
        if (k > ps[who].n - ps[who].sent) k = ps[who].n - ps[who].sent;
        ps[who].verdict = accel__admit_step(&a, &ps[who].c, ps[who].out + ps[who].sent, k, accel__store_admit, &su,
                                            why, sizeof why);
        ps[who].sent += k;
    }
    for (i = NREAL; i < np; ++i)
        if (a.keyed && (ps[i].verdict == ACCEL__ADMIT_KEPT || ps[i].verdict == ACCEL__ADMIT_DONE)) __builtin_trap();
    if (!a.keyed) return 0; /* without the MAC a stray that knows the run id may join: the policy keeps such a store
                               on loopback, and this model has nothing more to check */
    for (i = 0; i < NREAL; ++i) {
        if (ps[i].verdict != ACCEL__ADMIT_KEPT && ps[i].verdict != ACCEL__ADMIT_DONE) __builtin_trap();
        if (fds[i + 1] != ps[i].c.fd) __builtin_trap();
    }
    /* the first collective: an all-gather of 8 bytes a rank. Each connection sends one frame: the real ranks theirs,
       the strays what the input says; the hub reads the connections that hold a slot. */
    memset(mine, 0xA0, sizeof mine);
    st.seq = 1;
    for (r = 1; r < 3; ++r) {
        int owner = -1;
        unsigned char frame[ACCEL__ST_HDR + 8];
        accel__st_frame f;
        for (i = 0; i < np; ++i)
            if (ps[i].c.fd == fds[r]) owner = i;
        if (owner < 0) __builtin_trap();
        if (owner < NREAL) { /* the real rank's contribution */
            accel__store_put_header(frame, ACCEL__ST_OP, ACCEL__ST_OP_ALLGATHER, (uint32_t)r, 1, 8);
            memset(frame + ACCEL__ST_HDR, 0x10 * r, 8);
        } else { /* unreachable while the invariants above hold: a stray's frame */
            for (i = 0; i < (int)sizeof frame; ++i) frame[i] = (unsigned char)take(&in);
        }
        if (accel__store_parse_header(frame, sizeof frame, &f, why, sizeof why) != 0 ||
            accel__store_check_op(&st, &f, ACCEL__ST_OP_ALLGATHER, r, want[r], why, sizeof why) != 0)
            __builtin_trap();
        bufs[r] = (unsigned char *)accel_host_alloc(NULL, 8);
        memcpy(bufs[r], frame + ACCEL__ST_HDR, 8);
    }
    res = (unsigned char *)accel_host_alloc(NULL, accel__store_combine(ACCEL__ST_OP_ALLGATHER, 3, 0, mine, 8, bufs,
                                                                       want, NULL));
    (void)accel__store_combine(ACCEL__ST_OP_ALLGATHER, 3, 0, mine, 8, bufs, want, res);
    for (i = 0; i < 24; ++i)
        if (res[i] != (i < 8 ? 0xA0 : i < 16 ? 0x10 : 0x20)) __builtin_trap(); /* the result is the ranks' alone */
    accel_host_free(NULL, res);
    for (r = 0; r < 3; ++r) accel_host_free(NULL, bufs[r]);
    return 0;
}
