/* accel_amp against PyTorch CPU itself (/usr/bin/python3 + python3-torch; exit 77 = skip when it is missing):
   clip_grad_norm_ over 120 random multi-buffer cases (norm types 2, 1, 3, inf) and fp32 → bf16 / fp16 conversion of
   200000 random bit patterns. usage: test_amp_torch torch_oracle.py */
#include "accel.h"
#include "accel_amp.h"
#include "accel_test.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static int rd(FILE *f, void *p, size_t n) { return fread(p, 1, n, f) == n; }

int main(int argc, char **argv) {
    char cmd[1024];
    FILE *f;
    accel acc;
    accel_desc d;
    int32_t nb;
    int cases = 0, exact_cases = 0, bad_vals = 0, bad_total = 0;
    if (argc < 2) { fprintf(stderr, "usage: %s torch_oracle.py\n", argv[0]); return 2; }
    if (system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
        printf("/usr/bin/python3 with torch not available: skipped\n");
        return 77;
    }
    memset(&d, 0, sizeof d);
    d.cpu = 1; d.no_mpi = 1;
    if (accel_init(&acc, &d) != ACCEL_OK) return 1;
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s'", argv[1]);
    f = popen(cmd, "r");
    if (!f) { perror("popen"); return 1; }
    for (;;) {
        double max_norm, norm_type, total = 0;
        float ttotal;
        float *in[8], *out[8];
        accel_tensor t[8];
        int k, same;
        if (!rd(f, &nb, 4)) { AT_CHECK_MSG(0, "truncated oracle stream"); break; }
        if (nb < 0) break;
        if (nb > 8 || !rd(f, &max_norm, 8) || !rd(f, &norm_type, 8) || !rd(f, &ttotal, 4)) { AT_CHECK(0); break; }
        memset(t, 0, sizeof t);
        for (k = 0; k < nb; ++k) {
            int32_t n;
            if (!rd(f, &n, 4) || n <= 0) { AT_CHECK(0); return at_finish("amp_torch"); }
            in[k] = (float *)malloc((size_t)n * 4);
            out[k] = (float *)malloc((size_t)n * 4);
            if (!rd(f, in[k], (size_t)n * 4) || !rd(f, out[k], (size_t)n * 4)) { AT_CHECK(0); return at_finish("amp_torch"); }
            t[k].ptr = in[k]; t[k].dtype = ACCEL_F32; t[k].ndim = 1; t[k].shape[0] = n;
        }
        AT_EQ_INT(accel_amp_clip_grad_norm(&acc, t, nb, max_norm, isinf(norm_type) ? HUGE_VAL : norm_type, 0, &total), ACCEL_OK);
        /* torch accumulates in float32: its total is within a few ulps of accel's float64 one */
        if (fabs(total - (double)ttotal) > 1e-5 * (double)ttotal) bad_total++;
        same = (float)total == ttotal;
        exact_cases += same;
        for (k = 0; k < nb; ++k) {
            int64_t i, n = t[k].shape[0];
            for (i = 0; i < n; ++i) {
                /* same float total → same coefficient → bit-identical gradients; otherwise within 1e-6 */
                if (same ? in[k][i] != out[k][i] : fabs((double)in[k][i] - (double)out[k][i]) > 1e-6 * fabs((double)out[k][i]))
                {
                    if (bad_vals < 5)
                        fprintf(stderr, "case %d p=%g total %.9g torch %.9g max_norm %.9g: %.9g vs torch %.9g\n", cases,
                                norm_type, total, (double)ttotal, max_norm, (double)in[k][i], (double)out[k][i]);
                    bad_vals++;
                }
            }
            free(in[k]); free(out[k]);
        }
        cases++;
    }
    AT_EQ_INT(cases, 120);
    AT_EQ_INT(bad_total, 0);
    AT_EQ_INT(bad_vals, 0);
    AT_CHECK_MSG(exact_cases >= cases / 3, "too few cases where the float32 totals agree: the exact check ran too rarely");
    {
        int32_t n = 0;
        int32_t i, bad_b = 0, bad_h = 0, nan_seen = 0;
        float *x;
        uint16_t *b, *h;
        AT_CHECK(rd(f, &n, 4) && n > 0);
        x = (float *)malloc((size_t)n * 4);
        b = (uint16_t *)malloc((size_t)n * 2);
        h = (uint16_t *)malloc((size_t)n * 2);
        AT_CHECK(rd(f, x, (size_t)n * 4) && rd(f, b, (size_t)n * 2) && rd(f, h, (size_t)n * 2));
        for (i = 0; i < n; ++i) {
            if (x[i] != x[i]) {
                /* torch CPU: bf16 NaN → 0x7FC0, fp16 NaN → sign|0x7E00; accel (= CUDA): 0x7FFF. Both NaN. */
                nan_seen++;
                bad_b += (b[i] & 0x7f80) != 0x7f80 || !(b[i] & 0x7f) || accel_f32_to_bf16(x[i]) != 0x7fff;
                bad_h += (h[i] & 0x7c00) != 0x7c00 || !(h[i] & 0x3ff) || accel_f32_to_f16(x[i]) != 0x7fff;
                continue;
            }
            bad_b += accel_f32_to_bf16(x[i]) != b[i];
            bad_h += accel_f32_to_f16(x[i]) != h[i];
        }
        AT_EQ_INT(bad_b, 0);
        AT_EQ_INT(bad_h, 0);
        AT_CHECK(nan_seen > 100);
        free(x); free(b); free(h);
    }
    pclose(f);
    accel_shutdown(&acc);
    return at_finish("amp_torch");
}
