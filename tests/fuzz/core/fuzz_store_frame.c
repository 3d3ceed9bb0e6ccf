/* libFuzzer target: the host store's frame parsing (untrusted bytes from the network). The input is what a peer
   sends: it goes through a socketpair into the same receive path the hub and the ranks use (header checks, payload
   read, HELLO parsing). Anything may be refused, nothing may crash, and an accepted frame must obey the limits. */
#define ACCEL_IMPLEMENTATION
#include "accel.h"
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void quiet(void *u, accel_log_level l, const char *m) { (void)u; (void)l; (void)m; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int sv[2];
    accel__store st;
    accel__st_frame f;
    unsigned char *payload = NULL;
    char why[200];
    accel_set_default_logger(quiet, NULL);
    /* the parser alone */
    if (accel__store_parse_header(data, size, &f, why, sizeof why) == 0) {
        if (f.len > ACCEL__ST_MAX_PAYLOAD || f.kind < ACCEL__ST_HELLO || f.kind > ACCEL__ST_ERROR) __builtin_trap();
        if (f.kind == ACCEL__ST_HELLO && size >= ACCEL__ST_HDR + f.len) {
            uint32_t world, rank, tl;
            const unsigned char *tok;
            if (accel__store_parse_hello(data + ACCEL__ST_HDR, f.len, &world, &rank, &tok, &tl, why, sizeof why) == 0 &&
                (tl > ACCEL__ST_MAX_TOKEN || (uint64_t)tl + 16 != f.len))
                __builtin_trap();
        }
    }
    /* the receive path over a real socket (a short deadline: a frame that claims more bytes than were sent ends
       at EOF, not by waiting) */
    if (size > 65536 || socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 0;
    if (size && write(sv[1], data, size) != (ssize_t)size) { close(sv[0]); close(sv[1]); return 0; }
    close(sv[1]);
    memset(&st, 0, sizeof st);
    st.size = 2;
    strcpy(st.where, "fuzz");
    if (accel__store_recv(NULL, &st, sv[0], 1, &f, &payload, accel_now() + 0.2) == ACCEL_OK) {
        if (!payload || f.len > size) __builtin_trap();
        accel_host_free(NULL, payload);
    }
    close(sv[0]);
    return 0;
}
