/* Helpers of the multi-process tests of the communicator and its clients (collectives, ddp, zero): test-local 16-bit
   codecs written independently of the library's, a host allocator that refuses large blocks on demand, and the
   check that a local failure on one rank failed every rank at once. Include after accel.h and accel_test.h. */
#ifndef ACCEL_TEST_COLL_H
#define ACCEL_TEST_COLL_H
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The value of a 16-bit code (bf nonzero: bfloat16, else IEEE half). */
static inline double at_dec16(uint16_t h, int bf) {
    if (bf) {
        uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    } else {
        int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
        double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m + 1024, e - 25);
        return s ? -v : v;
    }
}
/* The code of an exactly representable 16-bit value. */
static inline uint16_t at_code16(double r, int bf) {
    uint16_t s = (uint16_t)(r < 0 ? 0x8000 : 0);
    double a = fabs(r);
    int e;
    if (bf) {
        float f = (float)r;
        uint32_t u;
        memcpy(&u, &f, 4);
        return (uint16_t)(u >> 16);
    }
    if (a == 0) return s;
    if (a < ldexp(1, -14)) return (uint16_t)(s | (uint16_t)ldexp(a, 24)); /* subnormal */
    (void)frexp(a, &e);                                                       /* a = m 2^e, m in [0.5, 1) */
    return (uint16_t)(s | (uint16_t)((e - 1 + 15) << 10) | (uint16_t)((int)ldexp(ldexp(a, 1 - e) - 1, 10) & 1023));
}
/* A double rounded to the nearest 16-bit value, ties to even, by arithmetic on doubles (rint). */
static inline uint16_t at_enc16(double x, int bf) {
    int mant_bits = bf ? 7 : 10, e;
    double r;
    if (x == 0) return 0;
    e = (int)floor(log2(fabs(x)));
    if (!bf && e < -14) e = -14;
    r = ldexp(rint(ldexp(x, mant_bits - e)), e - mant_bits);
    return at_code16(r, bf);
}

static inline void at_quiet_log(void *u, accel_log_level l, const char *m) { (void)u; (void)l; (void)m; }

/* A host allocator (accel_desc.host_allocator) that refuses every block of at least at_fail_min_bytes (0: none). */
static size_t at_fail_min_bytes;
static inline void *at_refusing_alloc(size_t n, void *u) {
    (void)u;
    return at_fail_min_bytes && n >= at_fail_min_bytes ? NULL : malloc(n);
}
static inline void at_refusing_free(void *p, void *u) { (void)u; free(p); }

/* r is what rank `rank` got from a collective call in which rank failing_rank failed locally with `local`: that rank
   keeps its error, the others get ACCEL_ERR_REMOTE naming it, and none waited for the deadline (t0: accel_now()
   before the call) instead of being left blocked in the next exchange. */
static inline void at_expect_collective_failure(accel *acc, int rank, accel_result r, int failing_rank,
                                                accel_result local, double t0) {
    char want[32];
    if (rank == failing_rank) AT_EQ_INT(r, local);
    else {
        AT_EQ_INT(r, ACCEL_ERR_REMOTE);
        snprintf(want, sizeof want, "rank %d", failing_rank);
        AT_CONTAINS(accel_last_error(acc), want);
    }
    AT_CHECK_MSG(accel_now() - t0 < 10.0, "failed at once, not at the 60 s deadline");
}

/* accel_init of a CPU process (under mpirun, one rank), expected errors read through accel_last_error rather than
   logged; flags: AT_INIT_NO_MPI (desc.no_mpi), AT_INIT_REFUSING (the host allocator is at_refusing_alloc). *size and
   *rank (either may be NULL) receive the process count and index. Prints why and returns nonzero when it fails. */
#define AT_INIT_NO_MPI 1
#define AT_INIT_REFUSING 2
static inline int at_init_cpu(accel *acc, int flags, int *size, int *rank) {
    accel_desc d;
    memset(&d, 0, sizeof d);
    d.cpu = 1;
    d.no_mpi = (flags & AT_INIT_NO_MPI) ? 1 : 0;
    d.log_fn = at_quiet_log;
    if (flags & AT_INIT_REFUSING) {
        d.host_allocator.alloc = at_refusing_alloc;
        d.host_allocator.free = at_refusing_free;
    }
    if (accel_init(acc, &d) != ACCEL_OK) {
        fprintf(stderr, "accel_init: %s\n", accel_last_error(acc));
        return 1;
    }
    if (size) *size = acc->num_processes;
    if (rank) *rank = acc->process_index;
    return 0;
}
#endif
