/* accel_optim.h's branch-free device sequences (ACCEL_OPTIM_CUDA_FAST) on the device against nvcc's own correctly
   rounded operations, in a TU of its own (ACCEL_IMPLEMENTATION: the private helpers):
   1. the square root (accel__optim_sqrt_fast) against __fsqrt_rn for every float that accel__optim_sqrt_in admits
      (all of [2^-101, FLT_MAX]: 1.92e9 values) — and that the range test admits exactly those;
   2. the division (accel__optim_div_y with accel__optim_rcp1) against __fdiv_rn: 2^30 random pairs with both
      operands anywhere in 2^-60 <= |x| < 2^60 (b > 0), then every divisor significand for numerators at the range's
      ends and in between (2^23 divisors, 16 numerators each);
   3. the whole update (accel__optim_update_fast) against accel__optim_adamw_tail on the device for 2^26 random
      (p, m, v) over the exponent range of moments, zero included, with four sets of coefficients: equal bits
      wherever the range test passes, and the range test passing for the ordinary values.
   The host path uses the IEEE operations for the same helpers, so these equalities are what makes the GPU's vector
   path give the CPU's bits. Exits 77 without a device. */
#define ACCEL_IMPLEMENTATION
#include "accel.h"
#include "accel_optim.h"
#include "accel_test.h"
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <string.h>

struct counts {
    unsigned long long checked, bad, admitted, first_bad_a, first_bad_b;
};

__device__ static uint32_t mix32(uint64_t x) { /* splitmix64's finalizer: a counter-based random number */
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return (uint32_t)((x ^ (x >> 31)) >> 16);
}
__device__ static void note(counts *c, unsigned long long checked, unsigned long long bad, unsigned long long admitted,
                            uint32_t a, uint32_t b) {
    if (checked) atomicAdd(&c->checked, checked);
    if (admitted) atomicAdd(&c->admitted, admitted);
    if (bad && atomicAdd(&c->bad, bad) == 0) {
        c->first_bad_a = a;
        c->first_bad_b = b;
    }
}

/* 1. every non-negative float bit pattern */
__global__ void sqrt_all(counts *c) {
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    unsigned long long checked = 0, bad = 0, adm = 0;
    uint32_t fa = 0;
    uint64_t u;
    for (u = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; u < 0x80000000ull; u += stride) {
        const float x = __uint_as_float((uint32_t)u);
        const int in = accel__optim_sqrt_in(x), want = x >= 0x1p-101f && x <= 3.40282347e38f;
        if (in != want) { ++bad; fa = (uint32_t)u; }
        if (in) {
            ++adm;
            ++checked;
            if (__float_as_uint(accel__optim_sqrt_fast(x)) != __float_as_uint(__fsqrt_rn(x))) {
                ++bad;
                fa = (uint32_t)u;
            }
        }
    }
    note(c, checked, bad, adm, fa, 0);
}

/* a float with a random significand and a random exponent in [-60, 59], sign as asked */
__device__ static float in_range(uint64_t key, int neg) {
    const uint32_t r = mix32(key), e = 67u + mix32(key ^ 0x5555ull) % 120u; /* biased exponents 67 .. 186 */
    return __uint_as_float((neg ? 0x80000000u : 0u) | (e << 23) | (r & 0x7fffffu));
}

/* a / b by the branch-free sequence against __fdiv_rn; a difference is counted and its operands kept */
__device__ static void div_check(float a, float b, unsigned long long *bad, uint32_t *fa, uint32_t *fb) {
    if (__float_as_uint(accel__optim_div_y(a, b, accel__optim_rcp1(b))) != __float_as_uint(__fdiv_rn(a, b))) {
        ++*bad;
        *fa = __float_as_uint(a);
        *fb = __float_as_uint(b);
    }
}

/* 2a. random pairs */
__global__ void div_random(counts *c, uint64_t n) {
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    unsigned long long checked = 0, bad = 0;
    uint32_t fa = 0, fb = 0;
    uint64_t i;
    for (i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += stride) {
        ++checked;
        div_check(in_range(2 * i, (int)(i & 1)), in_range(2 * i + 1, 0), &bad, &fa, &fb);
    }
    note(c, checked, bad, 0, fa, fb);
}

/* 2b. every divisor significand (exponent varied with it) against numerators at the range's ends and between */
__global__ void div_significands(counts *c) {
    static const float nums[16] = {0x1p-60f, -0x1p-60f, 0x1.fffffep59f, -0x1.fffffep59f, 1.0f, 0x1.fffffep-1f,
                                   1.5f, 0x1.000002p0f, 3.0f, 0x1.555556p-2f, 7.0e-9f, -6.0e-4f, 0x1.8p-59f,
                                   0x1.7ffffep58f, 0.1f, -0.3f};
    unsigned long long checked = 0, bad = 0;
    uint32_t fa = 0, fb = 0, s = blockIdx.x * blockDim.x + threadIdx.x;
    int k;
    if (s >= (1u << 23)) return;
    for (k = 0; k < 16; ++k) {
        const uint32_t e = 67u + (s * 7u + (uint32_t)k * 13u) % 120u;
        ++checked;
        div_check(nums[k], __uint_as_float((e << 23) | s), &bad, &fa, &fb);
    }
    note(c, checked, bad, 0, fa, fb);
}

/* 3. the whole update, coefficients as accel__optim_make_coefs makes them */
__global__ void update(counts *c, accel__optim_coefs k, uint64_t n, uint64_t salt) {
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    const float rb = accel__optim_rcp1(k.bc2s);
    unsigned long long checked = 0, bad = 0, adm = 0;
    uint32_t fa = 0, fb = 0;
    uint64_t i;
    for (i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += stride) {
        const uint64_t key = 3 * i + salt;
        /* moments from 2^-60 to 2^4 (v its square's range), 1 in 64 zero; p in [-2, 2) */
        const float m = (mix32(key) & 63u) == 0 ? 0.0f : ldexpf(1.0f + (float)(mix32(key + 1) & 0xffffu) / 65536.0f,
                                                                 (int)(mix32(key + 2) % 64u) - 60) *
                                                             ((mix32(key) & 64u) ? -1.0f : 1.0f);
        const float v = (mix32(key + 1) & 63u) == 1 ? 0.0f : ldexpf(1.0f + (float)(mix32(key) >> 16) / 65536.0f,
                                                                     (int)(mix32(key + 2) % 120u) - 118);
        const float p = ((float)(mix32(key + 2) & 0xffffu) - 32768.0f) / 16384.0f;
        int ok = 1;
        const float f = accel__optim_update_fast(&k, rb, p, m, v, &ok);
        ++checked;
        if (ok) {
            ++adm;
            if (__float_as_uint(f) != __float_as_uint(accel__optim_adamw_tail(&k, p, m, v))) {
                ++bad;
                fa = __float_as_uint(m);
                fb = __float_as_uint(v);
            }
        }
    }
    note(c, checked, bad, adm, fa, fb);
}

static counts run(const char *what, void (*launch)(counts *), unsigned long long min_checked) {
    counts h, *d = NULL;
    memset(&h, 0, sizeof h);
    AT_CHECK(cudaMalloc((void **)&d, sizeof h) == cudaSuccess);
    AT_CHECK(cudaMemset(d, 0, sizeof h) == cudaSuccess);
    launch(d);
    AT_CHECK(cudaGetLastError() == cudaSuccess);
    AT_CHECK(cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost) == cudaSuccess);
    cudaFree(d);
    at_context = what;
    printf("%s: %llu checked, %llu admitted by the range test, %llu differences", what, h.checked, h.admitted, h.bad);
    if (h.bad) printf(" (first: %08llx / %08llx)", h.first_bad_a, h.first_bad_b);
    printf("\n");
    AT_EQ_INT(h.bad, 0);
    AT_CHECK(h.checked >= min_checked);
    return h;
}

static void l_sqrt(counts *c) { sqrt_all<<<4096, 256>>>(c); }
static void l_div_random(counts *c) { div_random<<<4096, 256>>>(c, 1ull << 30); }
static void l_div_sig(counts *c) { div_significands<<<(1u << 23) / 256, 256>>>(c); }
static accel__optim_coefs kset;
static void l_update(counts *c) { update<<<4096, 256>>>(c, kset, 1ull << 24, (uint64_t)kset.t * 77u); }

int main(void) {
    int count = 0, i;
    /* lr, weight decay, step count, beta2, eps: a first step, a late one, eps 0, a beta2 whose bias correction is
       tiny for many steps */
    static const struct { double lr, wd, beta2, eps; unsigned long long t; } ks[4] = {
        {6e-4, 0.1, 0.999, 1e-8, 1}, {3e-5, 0.0, 0.95, 1e-8, 100000}, {1e-3, 0.01, 0.999, 0.0, 7},
        {1e-2, 0.0, 0.999999, 1e-6, 3}};
    counts h;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        printf("no CUDA device: skipped\n");
        return 77;
    }
    h = run("square root, every float in range", l_sqrt, 0x7f7fffffull - 0x0d000000ull + 1);
    AT_EQ_INT(h.admitted, 0x7f7fffffull - 0x0d000000ull + 1); /* exactly [2^-101, FLT_MAX] */
    run("division, random operands in range", l_div_random, 1ull << 30);
    run("division, every divisor significand", l_div_sig, 16ull << 23);
    for (i = 0; i < 4; ++i) {
        accel__optim_hyper hy;
        char what[96];
        memset(&hy, 0, sizeof hy);
        hy.beta1 = 0.9;
        hy.beta2 = ks[i].beta2;
        hy.eps = ks[i].eps;
        accel__optim_host_coefs(&hy, ks[i].lr, ks[i].wd, ks[i].t, 1.0f, &kset);
        snprintf(what, sizeof what, "update, lr %g t %llu beta2 %g eps %g", ks[i].lr, ks[i].t, ks[i].beta2,
                 ks[i].eps);
        h = run(what, l_update, 1ull << 24);
        AT_CHECK(h.admitted > h.checked / 2); /* the fast sequences take the ordinary values */
    }
    at_context = "";
    return at_finish("optim-fast-gpu");
}
