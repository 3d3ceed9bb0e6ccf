/* Shared by the fuzz targets of the admission (issue 26): an input reader and the admission settings of a job whose
   secret and run id the harness knows (so that it can also play a process of the job). Include after accel.h
   (ACCEL_IMPLEMENTATION: the targets use the core's private accel__admit). */
#ifndef ACCEL_FUZZ_ADMIT_H
#define ACCEL_FUZZ_ADMIT_H
#include <stdint.h>
#include <string.h>

typedef struct { const uint8_t *p; size_t n; } rd;
/* the next input byte (0 once the input is used up) */
static unsigned take(rd *r) {
    unsigned v = 0;
    if (r->n) { v = r->p[0]; r->p++; r->n--; }
    return v;
}
/* a job's admission: secret "fuzz-secret", run id "fuzz-run"; keyed only when this build has the MAC */
static void fuzz_admit(accel__admit *a, const char *label, int keyed) {
    memset(a, 0, sizeof *a);
    a->label = label;
    strcpy(a->secret, "fuzz-secret");
    a->secret_len = strlen(a->secret);
    strcpy(a->run_id, "fuzz-run");
    a->run_len = strlen(a->run_id);
#ifdef ACCEL_WITH_OPENSSL
    a->keyed = keyed;
#else
    (void)keyed;
#endif
}
#endif
