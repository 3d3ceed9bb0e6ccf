/* accel's one 16-bit codec (the core's accel_f32_to_f16 / _bf16 and back, which accel_amp.h's conversions and
   kernels use) against the host versions of cuda_fp16.h / cuda_bf16.h (compiled by nvcc, run on the
   CPU: no CUDA runtime call, no device needed). Checked: __float2half_rn, __float2half, __float2bfloat16,
   __float2bfloat16_rn (fp32 → 16-bit, bit-exact including NaN → 0x7FFF), __half2float and __bfloat162float
   (16-bit → fp32 over all 2^16 patterns), on every fp32 exponent with boundary mantissas plus random patterns. */
#include "accel.h"
#include "accel_amp.h"
#include "accel_test.h"
#include "amp_ref.h"
#include <cuda_bf16.h>
#include <cuda_fp16.h>

static unsigned short h_bits(__half h) { __half_raw r = h; return r.x; }
static unsigned short b_bits(__nv_bfloat16 h) { __nv_bfloat16_raw r = h; return r.x; }
static __half mk_half(unsigned short x) { __half_raw r; r.x = x; return __half(r); }
static __nv_bfloat16 mk_bf16(unsigned short x) { __nv_bfloat16_raw r; r.x = x; return __nv_bfloat16(r); }

int main(int argc, char **argv) {
    size_t cap = 400000, n, i, nrand = 4000000;
    uint32_t *set = (uint32_t *)malloc(cap * sizeof *set);
    uint64_t s = 0x243f6a8885a308d3ull;
    long bad16 = 0, badb = 0, badw16 = 0, badwb = 0, shown = 0;
    uint32_t h;
    int full = argc > 1 && !strcmp(argv[1], "--all-fp32"); /* 2^32 sweep: minutes, run by hand */
    n = ref_boundary_set(set, cap);
    AT_CHECK(n > 200000);
    for (i = 0; i < n + nrand; ++i) {
        uint32_t u;
        float f;
        if (i < n) u = set[i];
        else { s ^= s << 13; s ^= s >> 7; s ^= s << 17; u = (uint32_t)(s >> 11); }
        f = bits_f(u);
        if (accel_f32_to_f16(f) != h_bits(__float2half_rn(f)) || accel_f32_to_f16(f) != h_bits(__float2half(f))) {
            bad16++;
            if (shown++ < 5) printf("f16 %08x: accel %04x cuda %04x\n", u, accel_f32_to_f16(f), h_bits(__float2half_rn(f)));
        }
        if (accel_f32_to_bf16(f) != b_bits(__float2bfloat16(f)) || accel_f32_to_bf16(f) != b_bits(__float2bfloat16_rn(f))) {
            badb++;
            if (shown++ < 5) printf("bf16 %08x: accel %04x cuda %04x\n", u, accel_f32_to_bf16(f), b_bits(__float2bfloat16(f)));
        }
    }
    AT_EQ_INT(bad16, 0);
    AT_EQ_INT(badb, 0);
    for (h = 0; h < 65536; ++h) {
        float a = accel_f16_to_f32((uint16_t)h), c = __half2float(mk_half((unsigned short)h));
        float ab = accel_bf16_to_f32((uint16_t)h), cb = __bfloat162float(mk_bf16((unsigned short)h));
        /* fp16 NaN: CUDA's host widening returns the canonical 0x7FFFFFFF, accel keeps sign/payload: both NaN */
        if (isnan(c) ? !isnan(a) : f_bits(a) != f_bits(c)) badw16++;
        if (f_bits(ab) != f_bits(cb)) badwb++;
    }
    AT_EQ_INT(badw16, 0);
    AT_EQ_INT(badwb, 0);
    if (full) {
        uint64_t u;
        long b1 = 0, b2 = 0;
        for (u = 0; u <= 0xffffffffull; ++u) {
            float f = bits_f((uint32_t)u);
            b1 += accel_f32_to_f16(f) != h_bits(__float2half_rn(f));
            b2 += accel_f32_to_bf16(f) != b_bits(__float2bfloat16(f));
        }
        printf("all 2^32 fp32 patterns: %ld fp16 and %ld bf16 mismatches\n", b1, b2);
        AT_EQ_INT(b1, 0);
        AT_EQ_INT(b2, 0);
    }
    free(set);
    return at_finish("amp_cuda_host");
}
