/* accel_amp.h — mixed precision for accel: precision policy, fp32 <-> fp16/bf16 conversion (round-to-nearest-even and
   stochastic rounding), torch's dynamic loss scaler (GradScaler), fused unscale + non-finite check, gradient clipping
   (clip_grad_norm_, clip_grad_value_), master-weight copies, and fp8: E4M3 / E5M2 codecs bit-exact with cuda_fp8.h,
   fused cast + amax, and Transformer Engine's delayed-scaling recipe (mixed_precision="fp8"). CPU and CUDA, same
   per-element math.

   CONTENTS
       USAGE                     an fp16 training step
       PRECISION POLICY          accel_amp_get_policy
       CONVERSIONS               accel_amp_convert, _convert_to_fp32, _master_to_model, _model_to_master; stochastic
                                 rounding (accel_amp_sr)
       LOSS SCALER               accel_amp_scaler_init / _deinit, _loss_scale, _unscale_and_check, _update, state
       CLIPPING                  accel_amp_clip_grad_norm, _grad_norm, _clip_grad_value
       FP8                       accel_amp_fp8_init / _deinit, _quantize, _dequantize, _record_amax, _update, state;
                                 the E4M3 / E5M2 codecs
       OPTIONS / MACROS          ACCEL_AMP_CUDA_BLOCK, ACCEL_AMP_NO_DISPATCH
       THREADS AND STREAMS       where the work runs, what synchronizes
       DIFFERENCES FROM ACCELERATE / PYTORCH

   USAGE (fp16 training step; the same code runs on the CPU and, with the implementation TU built by nvcc, on CUDA)
       accel_amp_scaler sc;
       accel_amp_scaler_desc sd = {0};                   // zero = Accelerate's defaults (65536, 2, 0.5, 2000); C++: {}
       if (accel_amp_scaler_init(&acc, &sc, &sd) != ACCEL_OK) return 1;   // disabled unless acc.mixed_precision=fp16
       // the scaler remembers &acc: its methods take the scaler alone. Its state needs no adapter (accel_ckpt.h):
       accel_ckpt_register(ck, "scaler", accel_amp_scaler_state_save, accel_amp_scaler_state_load, &sc);
       accel_tensor grads[2] = {...};                    // fp32 (or fp16/bf16) gradient buffers on acc's device
       for (step = 0; step < steps; ++step) {
           float loss_mult = accel_amp_loss_scale(&sc) / accel_loss_divisor(&acc);
           forward_backward(loss_mult);                  // your kernels: d(loss * loss_mult)
           int found_inf;
           accel_amp_unscale_and_check(&sc, grads, 2, &found_inf);   // grads *= 1/scale; any rank inf → all
           double norm;
           accel_amp_clip_grad_norm(&acc, grads, 2, 1.0, 2.0, 0, &norm);   // free functions take acc first
           if (!found_inf) { adamw_step(master, grads);   // fp32 master weights
                             accel_amp_master_to_model(&acc, master, model16, ACCEL_BF16, n, NULL); }
           accel_amp_update(&sc);                        // backoff / growth; sets acc.optimizer_step_was_skipped
           accel_optimizer_step_done(&acc, accel_amp_step_was_skipped(&sc));   // the core's step counters
       }
       uint8_t st[ACCEL_AMP_SCALER_STATE_BYTES]; size_t w;      // or by hand: fixed little-endian bytes
       accel_amp_scaler_state_save(&sc, st, sizeof st, &w);
       accel_amp_scaler_deinit(&sc);

   PRECISION POLICY (accel_amp_get_policy, from acc->mixed_precision)
       "no"   fp32 everywhere, no scaling       "bf16" bf16 compute, no scaling (as Accelerate: no scaler)
       "fp16" fp16 compute, dynamic scaling     "fp8"  fp8 GEMM inputs with delayed scaling (accel_amp_fp8),
                                                       bf16 compute elsewhere, no loss scaling (as Accelerate + TE)

   CONVERSIONS
       The 16-bit codec is the core's (accel.h: accel_f32_to_bf16, accel_bf16_to_f32, accel_f32_to_f16,
       accel_f16_to_f32, static ACCEL_HD, usable in your own kernels); the buffer conversions below apply it.
       fp32 -> fp16 / bf16: IEEE round-to-nearest-even, overflow to Inf, fp16 subnormals, bit-exact with the host
       versions of cuda_fp16.h's __float2half_rn and cuda_bf16.h's __float2bfloat16 for all 2^32 inputs (checked by
       tests/unit/amp/test_amp_cuda_host.cu --all-fp32), including NaN: every NaN becomes the
       canonical quiet NaN 0x7FFF (CUDA's choice: the sign and payload are dropped; PyTorch's CPU kernels give
       sign|0x7E00 for fp16 and 0x7FC0 for bf16 instead). fp16/bf16 -> fp32 is exact (NaN stays NaN; bf16 keeps its
       payload, fp16 NaNs are quieted with sign and payload kept).
       Stochastic rounding fp32 -> bf16: add 16 random bits below the bf16 mantissa and truncate, so E[round(x)] = x.
       The bits of element i are accel_rng_draw4(seed, step, (index_offset + i) / 4)[(index_offset + i) % 4] from
       the core's Philox: deterministic for (seed, step, index) and identical on CPU and GPU.

   LOSS SCALER (torch.amp.GradScaler semantics, docs/semantics.md §10)
       scale is float32, growth_tracker int32; unscale multiplies by inv = (float)(1.0 / (double)scale) and records
       non-finite inputs; update(): found_inf → scale = (float)(scale * backoff), tracker = 0 (no floor: the scale
       can reach 0); else ++tracker, and at growth_interval scale = (float)(scale * growth) only if that is finite,
       tracker = 0 either way. found_inf is OR-ed over all ranks through the core's host process group (a
       collective: every rank calls unscale_and_check, with the group's deadline) unless desc.local_found_inf.
       With several processes and no host group (torchrun without MPI, before a collectives context installed
       itself) unscale_and_check is ACCEL_ERR_UNSUPPORTED with nothing changed, unless desc.local_found_inf.
       Unscaling twice in one step is ACCEL_ERR_STATE (torch raises too); update() without unscale in the step is
       ACCEL_ERR_STATE (torch asserts "No inf checks were recorded"). desc.static_scale: the scale never changes
       (found_inf still skips the step). The scaler remembers the Accelerator given to accel_amp_scaler_init: its
       methods take the scaler alone and record their errors in that Accelerator.
       Checkpoints: accel_amp_scaler_state_save / _load implement the core's accel_state_save_fn /
       accel_state_load_fn contract (void *scaler first), so they register with accel_ckpt_register as they are.

   CLIPPING
       accel_amp_clip_grad_norm: torch.nn.utils.clip_grad_norm_. total = ||(||g_i||_p)_i||_p over F32/F16/BF16
       buffers, coef = max_norm / (total + 1e-6) clamped to 1 — in float32 and, like torch's Tensor.__rtruediv__, as
       reciprocal(total + 1e-6f) * max_norm — every gradient multiplied by coef (also when coef = 1, as torch).
       total NaN → grads become NaN, total Inf → coef 0, exactly as torch; ACCEL_AMP_CLIP_ERROR_IF_NONFINITE turns a
       non-finite total into ACCEL_ERR_STATE before anything is changed. ACCEL_AMP_CLIP_SHARDED: each rank
       holds a different shard of the gradients: the p-th power sums (or maxima) are all-reduced across ranks
       (through the core's host process group).
       accel_amp_clip_grad_value: clamp(g, -v, v) (NaN stays NaN, as torch.clamp).

   FP8 (E4M3 / E5M2 and Transformer Engine's DelayedScaling recipe)
       Usage (one Linear layer y = x·Wᵀ as TE runs it; examples/fp8/ has a training run and a cuBLASLt GEMM):
           accel_amp_fp8 f8;
           accel_amp_fp8_desc fd = {0};             // zero = Accelerate's FP8RecipeKwargs defaults (HYBRID, margin 0,
           fd.num_forward = 2;                      //   history 1024, "most_recent"); ACCELERATE_FP8_* override them
           fd.num_backward = 1;                     // slots: 0 x, 1 W (E4M3), 2 dy (E5M2 under HYBRID)
           accel_amp_fp8_init(&acc, &f8, &fd);
           accel_ckpt_register(ck, "fp8", accel_amp_fp8_state_save, accel_amp_fp8_state_load, &f8);
           // forward: both casts in one pass each (one launch on CUDA), this step's amax recorded per slot
           accel_tensor hi[2] = {x, W}, lo[2] = {x8, W8};              // F32/BF16/F16 in, F8_E4M3 out
           accel_amp_fp8_quantize(&f8, NULL, hi, lo, 2);
           fp8_gemm(x8, W8, f8.scale_inv[0], f8.scale_inv[1], y);       // your GEMM dequantizes with scale_inv
           // backward: int s = 2; accel_amp_fp8_quantize(&f8, &s, &dy, &dy8, 1); dgrad/wgrad GEMMs ...
           accel_amp_fp8_update(&f8);               // once per step, after backward: amax all-reduce (MAX) + new scales
       Formats (safetensors F8_E4M3 / F8_E5M2, the core's ACCEL_F8_E4M3 / ACCEL_F8_E5M2): E4M3 has no Inf, its NaN is
       S.1111.111, largest 448; E5M2 is IEEE-like (±Inf, NaN), largest 57344. The codec (accel_amp_f32_to_fp8,
       accel_amp_fp8_to_f32 and their e4m3/e5m2 forms) is bit-exact with cuda_fp8.h's __nv_cvt_float_to_fp8
       (__NV_SATFINITE and __NV_NOSAT), __nv_cvt_halfraw_to_fp8, __nv_cvt_bfloat16raw_to_fp8 and the conversions back,
       for every input (all 2^32 fp32 patterns; tests/unit/amp/test_fp8_cuda_host.cu --all-fp32): round to nearest
       even; NaN → 0x7F (sign dropped); overflow and ±Inf → ±largest (satfinite) or E4M3 sign|0x7F (NaN), E5M2
       ±Inf; fp8 → fp32 exact, NaN → 0x7FFFFFFF. Casts saturate (TE's choice) unless desc.no_saturate.
       The recipe, as Transformer Engine's main branch (2.x: pytorch/quantization.py reduce_and_update_fp8_tensors →
       common/recipe/delayed_scaling.cu, the kernel_bulk of amax_and_scale_update_after_reduction; read for this
       header at delayed_scaling.cu commit 6b71a0a) runs it, per slot, in float32, with `last` = this step's amax after
       the MAX over ranks:
         last == 0 (nothing was cast): nothing changes — the history does not roll and the scale stays;
         otherwise the history [amax_history_len][num_tensors] rolls: row i takes row i+1, the last row takes `last`,
         row 0 is cleared for the next step; amax = fmaxf over the rolled-out window (the last amax_history_len
         non-zero step amaxes; NaN entries are not seen) for "max", or `last` for "most_recent";
         scale = (fp8_max · 2^-margin) / amax if amax is finite and > 0, else the old scale (non-finite amax keeps it);
         a scale that overflows to Inf becomes FLT_MAX; scale_inv = 1 / scale (float divisions).
       fp8_max is 448 for forward slots and, under HYBRID, 57344 for backward slots (E5M2); every scale starts at 1.
       The amax of a cast is max |x| over the non-NaN elements (TE's fmaxf); Inf counts. Several casts into a slot in
       one step keep the largest. accel_amp_fp8_record_amax adds an amax computed elsewhere (a GEMM's output).
       Across ranks the step's amaxes are MAX-reduced through the core's host process group before the rule (a
       collective: every rank calls accel_amp_fp8_update), unless desc.local_amax; a NaN on any rank wins everywhere.
       Checkpoints: accel_amp_fp8_state_save / _load implement the core's state contract (scales, scale_invs, history).

   OPTIONS / MACROS
       ACCEL_AMP_CUDA_BLOCK    threads per block of the CUDA kernels (default 256; a power of two in [32, 1024]);
                               the other launch shapes are internal macros (ACCEL__AMP_U_*, _MINB_*, _WAVES_*: "list
                               kernels" in the implementation; bench/amp/sweep_gpu.sh measures variants)
       ACCEL_AMP_NO_DISPATCH   x86-64, GCC/clang: do not choose the AVX2 (+F16C) CPU loops at run time; then only an
                               AVX2 build (-mavx2, -march=native) uses them. The same bits either way.

   THREADS AND STREAMS
       Buffers live on acc's device (acc->device < 0: host memory). CUDA work is enqueued on acc->stream: a list of
       up to 160 buffers (64 when built with CUDA < 12.1) is one kernel launch (the buffers' descriptors are the
       kernel's parameter); longer lists take one launch per 160. On CUDA every buffer must be aligned to its element
       size (else ACCEL_ERR_INVALID_ARGUMENT, nothing changed); any element offset is fine. Results (found_inf, the
       norm's per-block partial sums) go to the Accelerator's device scratch, which comes from the device allocator
       and is reused in stream order (keep amp's work on acc->stream), and come back into its page-locked scratch
       (the pinned allocator): unscale_and_check synchronizes once to read found_inf back, clip_grad_norm /
       grad_norm once to read the partial sums (summed on the host in a fixed order); conversions and
       clip_grad_value do not synchronize. fp8: a quantize or dequantize list does not
       synchronize (the step's amax stays on the device, raised with atomicMax); accel_amp_fp8_update reads it back
       (one synchronization). The scales live on the host and travel in the launch's descriptors, so the quantize of
       the next step sees them. A scaler, and an accel_amp_fp8, is used by one thread at a time.

   DIFFERENCES FROM ACCELERATE / PYTORCH (deliberate)
     - Accelerate creates a GradScaler only for fp16 on a non-CPU device (docs/semantics.md §4); accel also scales
       in fp16 mode on the CPU (the CPU trainer trains in fp16 with dynamic scaling).
       accel_amp_policy.accelerate_would_scale says what Accelerate would do. desc.enabled = ACCEL_ON / ACCEL_OFF
       overrides the policy.
     - Norms are more accurate than torch's (which sums in the gradient's dtype / float32): the CPU sums in float64,
       the GPU in compensated fp32 pairs folded into float64 (again in float64 where a sum leaves the fp32 range),
       both within 1e-12 relative of the exact sum; the clip coefficient is then rounded to float32 as torch's is.
     - The scale lives on the host (torch keeps it on the device); the values and the rule are the same.
     - A static-scale mode (DeepSpeed's static loss scale) exists; GradScaler has none.
     - fp32 -> fp16/bf16 NaN gives 0x7FFF (CUDA's canonical NaN) on the CPU too, so CPU and GPU agree bit for bit.
     - unscale_and_check accepts F16/BF16 gradients (torch's unscale_ refuses fp16 gradients); they are widened,
       checked, multiplied and rounded back (RNE).
     - With several ranks, unscale_and_check first agrees that every rank's buffer list is valid (one small host
       collective) so a bad call on one rank fails everywhere with nothing changed (that rank gets its own error,
       the others ACCEL_ERR_REMOTE carrying its message), then ORs found_inf (a second). Sharded clipping likewise
       agrees on the arguments before the norm is all-reduced.
     - clip_grad_value refuses a negative clip value (torch.clamp would silently set everything to -|v|).
     - fp8: Accelerate needs Transformer Engine (or MS-AMP / torchao) and a GPU that has fp8; accel emulates the recipe
       on the CPU too (the casts and scales are real, the GEMMs are yours). The recipe's defaults are Accelerate's
       FP8RecipeKwargs (amax_compute_algo "most_recent"; TE's own DelayedScaling default is "max"); no `interval`,
       no custom amax / scaling-factor callables, no fp8 attention options.
     - TE updates forward scales when the autocast region exits and backward scales after backward; accel updates
       every slot in one accel_amp_fp8_update per step (use two objects to update forward and backward apart).
     - The scales and the amax history live on the host (TE keeps them on the device); the rule and the float32
       arithmetic are the same. The all-reduce lets a NaN amax win on every rank (NCCL's MAX leaves NaN order to the
       transport).
*/
#ifndef ACCEL_AMP_H_INCLUDED
#define ACCEL_AMP_H_INCLUDED
#include "accel.h"
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------------------ policy */
typedef struct accel_amp_policy {
    accel_precision precision;   /* resolved: ACCEL_PRECISION_NO, _FP16, _BF16 or _FP8 */
    accel_dtype compute_dtype;   /* ACCEL_F32, ACCEL_F16 or ACCEL_BF16 (fp8: BF16 outside the fp8 GEMMs) */
    int loss_scaling;            /* 1 for fp16 (accel scales on every device) */
    int accelerate_would_scale;  /* 1 for fp16 on a CUDA device only (Accelerate's rule) */
} accel_amp_policy;

/* fp8: compute_dtype BF16, no loss scaling; the GEMM inputs go through accel_amp_fp8 (delayed scaling). */
ACCEL_API accel_result accel_amp_get_policy(accel *acc, accel_amp_policy *out);

/* ------------------------------------------------------------------------------ element-wise helpers (HD) */
/* The 16-bit codec (accel_f32_to_bf16, accel_bf16_to_f32, accel_f32_to_f16, accel_f16_to_f32, accel_f32_bits,
   accel_bits_f32) is the core's, in accel.h. What follows is amp's own. */

/* 1 when f is Inf or NaN (branch-free so loops vectorize). */
static ACCEL_INLINE ACCEL_HD uint32_t accel_amp_nonfinite(float f) {
    return (uint32_t)((accel_f32_bits(f) & 0x7f800000u) == 0x7f800000u);
}

/* fp32 → bf16 with stochastic rounding: rnd's low 16 bits are added below the kept mantissa, then truncated.
   NaN → 0x7FFF, ±Inf stays, finite values beyond the largest bf16 may round to ±Inf with their probability. */
static ACCEL_INLINE ACCEL_HD uint16_t accel_amp_f32_to_bf16_sr(float f, uint32_t rnd) {
    uint32_t u = accel_f32_bits(f);
    uint32_t a = u & 0x7fffffffu;
    uint32_t r = (a == 0x7f800000u) ? (u >> 16) : ((u + (rnd & 0xffffu)) >> 16);
    return (uint16_t)(a > 0x7f800000u ? 0x7fffu : r);
}

/* The random bits stochastic rounding uses for element `index` (see the top comment). */
static ACCEL_INLINE ACCEL_HD uint32_t accel_amp_sr_bits(uint64_t seed, uint64_t step, uint64_t index) {
    uint32_t out[4];
    unsigned m = (unsigned)(index & 3u);
    accel_rng_draw4(seed, step, index >> 2, out);
    return m == 0 ? out[0] : m == 1 ? out[1] : m == 2 ? out[2] : out[3]; /* no indexed local array in kernels */
}

/* torch's unscale of one element: inv == 1 leaves the value untouched. */
static ACCEL_INLINE ACCEL_HD float accel_amp_unscale1(float v, float inv) { return inv == 1.0f ? v : v * inv; }

/* torch.clamp(v, lo, hi): NaN propagates. */
static ACCEL_INLINE ACCEL_HD float accel_amp_clamp1(float v, float lo, float hi) {
    return v != v ? v : (v < lo ? lo : (v > hi ? hi : v));
}

/* torch's _amp_update_scale_ kernel (AmpGradScalerKernels.cpp), in place. */
static ACCEL_INLINE ACCEL_HD void accel_amp_update_scale_rule(float *scale, int32_t *tracker, int found_inf,
                                                              double growth, double backoff, int32_t interval) {
    if (found_inf) {
        *scale = (float)((double)*scale * backoff);
        *tracker = 0;
    } else {
        int32_t s = *tracker + 1;
        if (s == interval) {
            float ns = (float)((double)*scale * growth);
            uint32_t b = accel_f32_bits(ns);
            if ((b & 0x7f800000u) != 0x7f800000u) *scale = ns;
            *tracker = 0;
        } else {
            *tracker = s;
        }
    }
}

/* ------------------------------------------------------------------------------- fp8 element-wise helpers (HD) */
/* E4M3 (safetensors F8_E4M3, torch.float8_e4m3fn, CUDA __NV_E4M3): 1 sign, 4 exponent bits (bias 7), 3 mantissa bits,
   largest 448, smallest subnormal 2^-9, NO infinity, NaN = S.1111.111 (0x7F / 0xFF).
   E5M2 (F8_E5M2, torch.float8_e5m2, __NV_E5M2): 1 sign, 5 exponent bits (bias 15), 2 mantissa bits, largest 57344,
   smallest subnormal 2^-16, IEEE-style: ±Inf = 0x7C / 0xFC, NaN = exponent all ones with a nonzero mantissa.
   fp32 → fp8, bit-exact with cuda_fp8.h's __nv_cvt_float_to_fp8 (host and device) for all 2^32 inputs:
     round to nearest even; |x| <= half the smallest subnormal → ±0 (sign kept);
     NaN → 0x7F in both formats (sign and payload dropped);
     overflow (E4M3: |x| > 464 = 448 + half an ulp; E5M2: |x| >= 61440) and ±Inf:
       satfinite (__NV_SATFINITE): ±largest finite (±448 / ±57344) — Inf too;
       not (__NV_NOSAT):           E4M3 → sign|0x7F (NaN: E4M3 has no Inf), E5M2 → ±Inf.
   fp16 / bf16 → fp8: widen exactly (accel_f16_to_f32 / accel_bf16_to_f32), then as fp32: bit-exact with
   __nv_cvt_halfraw_to_fp8 / __nv_cvt_bfloat16raw_to_fp8.
   fp8 → fp32 is exact; every NaN becomes 0x7FFFFFFF (what cuda_fp8.h's conversion to float gives).
   fp8 → bf16 / fp16: accel_f32_to_bf16 / accel_f32_to_f16 of that (exact; NaN → 0x7FFF, as __nv_cvt_fp8_to_halfraw
   and the __nv_fp8_e4m3 → __nv_bfloat16 conversion).
   The encode is integer math and one float add whose operands and result are normal floats (a float-subnormal
   input gives 0 either way), so it gives the same bits under -ffast-math / FTZ / DAZ, on the CPU and in your own
   kernels; it assumes the default rounding mode (to nearest even). */
#define ACCEL_AMP_E4M3_MAX 448.0f
#define ACCEL_AMP_E5M2_MAX 57344.0f

/* fp32 bits → fp8 code (0..255, in a 32-bit word: loops keep 32-bit lanes until the store); e5m2 selects the
   format, satfinite the overflow rule (see above). Branch-free: selects are masks, so compilers keep CPU loops
   vectorized (a ?: next to float math becomes a branch under the default -ftrapping-math). */
static ACCEL_INLINE ACCEL_HD uint32_t accel_amp_fp8_encode_bits(uint32_t u, int e5m2, int satfinite) {
    uint32_t a = u & 0x7fffffffu;
    /* |x| clamped to the largest value kept: the largest finite (satfinite) or the first grid point past it, whose
       code is the overflow code (E4M3 480 → 0x7F = NaN, E5M2 65536 → 0x7C = Inf); larger values (and Inf) round
       there anyway. NaN is clamped too and replaced at the end. */
    uint32_t lim = e5m2 ? (satfinite ? 0x47600000u : 0x47800000u) : (satfinite ? 0x43e00000u : 0x43f00000u);
    uint32_t k = 0u - (uint32_t)((int32_t)a < (int32_t)lim);
    uint32_t c = (a & k) | (lim & ~k);
    uint32_t sh = e5m2 ? 21u : 20u;                                /* 23 - mantissa bits */
    uint32_t t = c - (e5m2 ? 0x38000000u : 0x3c000000u);           /* rebias the exponent: (127 - bias) << 23 */
    uint32_t rn = (t + (1u << (sh - 1u)) - 1u + ((t >> sh) & 1u)) >> sh; /* normal: the dropped bits, to even */
    /* subnormal: the float add rounds c to a multiple of ulp(2^7 | 2^14) = the smallest subnormal, to even */
    uint32_t rd = accel_f32_bits(accel_bits_f32(c) + (e5m2 ? 128.0f : 16384.0f)) - (e5m2 ? 0x43000000u : 0x46800000u);
    uint32_t r;
    k = 0u - (uint32_t)((int32_t)t < 0x00800000); /* c below the smallest normal (t small or wrapped negative) */
    r = ((rd & k) | (rn & ~k)) | ((u >> 24) & 0x80u);
    k = 0u - (uint32_t)((int32_t)a > 0x7f800000); /* NaN → 0x7F, no sign */
    return (0x7fu & k) | (r & ~k);
}
/* fp32 → fp8 bits. */
static ACCEL_INLINE ACCEL_HD uint8_t accel_amp_f32_to_fp8(float f, int e5m2, int satfinite) {
    return (uint8_t)accel_amp_fp8_encode_bits(accel_f32_bits(f), e5m2, satfinite);
}
/* fp8 bits → fp32 (exact; NaN → 0x7FFFFFFF). */
static ACCEL_INLINE ACCEL_HD float accel_amp_fp8_to_f32(uint8_t x, int e5m2) {
    uint32_t s = ((uint32_t)x & 0x80u) << 24;
    uint32_t v = (uint32_t)x & 0x7fu;
    uint32_t mb = e5m2 ? 2u : 3u;
    uint32_t normal = s | ((v << (23u - mb)) + (e5m2 ? 0x38000000u : 0x3c000000u));
    uint32_t sub =
        s | accel_f32_bits((float)(int32_t)(v & ((1u << mb) - 1u)) * (e5m2 ? 1.52587890625e-05f : 0.001953125f));
    uint32_t k = 0u - (uint32_t)((v >> mb) == 0u); /* masks, for branch-free (vectorizable) loops */
    uint32_t r = (sub & k) | (normal & ~k);
    k = 0u - (uint32_t)(e5m2 && v == 0x7cu);
    r = ((s | 0x7f800000u) & k) | (r & ~k);
    k = 0u - (uint32_t)(e5m2 ? v > 0x7cu : v == 0x7fu);
    return accel_bits_f32((0x7fffffffu & k) | (r & ~k));
}
static ACCEL_INLINE ACCEL_HD uint8_t accel_amp_f32_to_e4m3(float f, int satfinite) {
    return accel_amp_f32_to_fp8(f, 0, satfinite);
}
static ACCEL_INLINE ACCEL_HD uint8_t accel_amp_f32_to_e5m2(float f, int satfinite) {
    return accel_amp_f32_to_fp8(f, 1, satfinite);
}
static ACCEL_INLINE ACCEL_HD float accel_amp_e4m3_to_f32(uint8_t x) { return accel_amp_fp8_to_f32(x, 0); }
static ACCEL_INLINE ACCEL_HD float accel_amp_e5m2_to_f32(uint8_t x) { return accel_amp_fp8_to_f32(x, 1); }

/* --------------------------------------------------------------------------------------- buffer conversions */
/* Stochastic-rounding parameters: element i of a call uses index index_offset + i. */
typedef struct accel_amp_sr {
    uint64_t seed;
    uint64_t step;
    uint64_t index_offset;
} accel_amp_sr;

/* dst[i] = convert(src[i]) for F32/F16/BF16/F8_E4M3/F8_E5M2 in any combination (same dtype = copy). To fp8: unscaled
   and saturating (satfinite, as TE's casts; scaled casts with either rule: accel_amp_fp8). sr != NULL selects
   stochastic rounding (only F32 → BF16). src and dst must not overlap unless they are the same buffer of equal dtype
   size. */
ACCEL_API accel_result accel_amp_convert(accel *acc, const void *src, accel_dtype src_dtype, void *dst,
                                         accel_dtype dst_dtype, size_t n, const accel_amp_sr *sr);
/* Accelerate's convert_to_fp32 for a list: out[k] (n_k floats) = in[k] (F16/BF16/F32) widened. One launch on CUDA. */
ACCEL_API accel_result accel_amp_convert_to_fp32(accel *acc, const accel_tensor *in, float *const *out, int count);
/* Master weights: fp32 master → F16/BF16 (or F32) model weights, RNE or stochastic (sr != NULL, BF16 only). */
ACCEL_API accel_result accel_amp_master_to_model(accel *acc, const float *master, void *model, accel_dtype model_dtype,
                                                 size_t n, const accel_amp_sr *sr);
/* Model weights (F16/BF16/F32) → fp32 master (exact). */
ACCEL_API accel_result accel_amp_model_to_master(accel *acc, const void *model, accel_dtype model_dtype, float *master,
                                                 size_t n);

/* -------------------------------------------------------------------------------------------- loss scaler */
/* Zero is the default for every field (C: = {0}; C++: = {}; NULL desc = all defaults). */
typedef struct accel_amp_scaler_desc {
    float init_scale;      /* 0 → 65536 */
    double growth_factor;  /* 0 → 2.0 (must be > 1) */
    double backoff_factor; /* 0 → 0.5 (must be in (0, 1)) */
    int growth_interval;   /* 0 → 2000 (must be > 0) */
    int static_scale;      /* nonzero: the scale never changes (default: dynamic) */
    accel_toggle enabled;  /* ACCEL_DEFAULT → by policy (on for fp16), ACCEL_ON, ACCEL_OFF */
    int local_found_inf;   /* nonzero: do not OR found_inf across ranks (gradients are already identical) */
} accel_amp_scaler_desc;

/* Caller-owned; fields are readable, change them only through the functions. */
typedef struct accel_amp_scaler {
    accel *acc;                /* from accel_amp_scaler_init: where the methods record errors and collectives run */
    int enabled;
    int dynamic;               /* 0 in static mode */
    float scale;               /* float32, as torch */
    double growth_factor;
    double backoff_factor;
    int32_t growth_interval;
    int32_t growth_tracker;    /* int32, as torch */
    int local_found_inf;
    int unscaled;              /* unscale_and_check was called in this step */
    int found_inf;             /* from the last unscale (all ranks) */
    int step_was_skipped;      /* from the last update */
    int64_t steps;             /* updates so far */
    int64_t skipped_steps;     /* of which skipped */
} accel_amp_scaler;

/* Resolves desc (NULL = defaults) against acc's precision policy and remembers acc (it must outlive the scaler). */
ACCEL_API accel_result accel_amp_scaler_init(accel *acc, accel_amp_scaler *s, const accel_amp_scaler_desc *desc);
/* Safe on a zeroed or failed scaler, idempotent, NULL ok. The scaler holds no resources. */
ACCEL_API void accel_amp_scaler_deinit(accel_amp_scaler *s);
/* What to multiply the loss by: the scale, or 1 when the scaler is disabled (or NULL). */
ACCEL_API float accel_amp_loss_scale(const accel_amp_scaler *s);
/* In place grads *= (float)(1.0/(double)scale) for every buffer (F32/F16/BF16), one fused pass; *found_inf (may be
   NULL) = any input Inf/NaN on any rank. Disabled scaler: no-op, found_inf 0 (torch: unscale_ is a no-op).
   Collective unless desc.local_found_inf (see LOSS SCALER above). */
ACCEL_API accel_result accel_amp_unscale_and_check(accel_amp_scaler *s, const accel_tensor *grads, int count,
                                                   int *found_inf);
/* End of the optimizer step: apply the scale rule; step_was_skipped = found_inf; also sets the scaler's
   acc->optimizer_step_was_skipped. The step counters stay with the core: call
   accel_optimizer_step_done(acc, accel_amp_step_was_skipped(s)) as usual. */
ACCEL_API accel_result accel_amp_update(accel_amp_scaler *s);
ACCEL_API int accel_amp_step_was_skipped(const accel_amp_scaler *s);

/* Checkpoint bytes, little-endian: "AMPS" u32 version=1, f32 scale, f64 growth_factor, f64 backoff_factor,
   i32 growth_interval, i32 growth_tracker (torch's state_dict keys). */
#define ACCEL_AMP_SCALER_STATE_BYTES 36
/* accel_state_save_fn: scaler = an accel_amp_scaler *. buf NULL or cap < ACCEL_AMP_SCALER_STATE_BYTES → *size =
   ACCEL_AMP_SCALER_STATE_BYTES, ACCEL_OK, nothing written; else the bytes are written and *size = their count. */
ACCEL_API accel_result accel_amp_scaler_state_save(void *scaler, void *buf, size_t cap, size_t *size);
/* accel_state_load_fn: validates all size bytes before changing the scaler (bad bytes: ACCEL_ERR_FORMAT, recorded in
   the scaler's Accelerator); the scaler's enabled/static/local settings are kept. */
ACCEL_API accel_result accel_amp_scaler_state_load(void *scaler, const void *buf, size_t size);
/* The bytes decoded without a scaler (tools: `accel ckpt ls`): the parser and checks of accel_amp_scaler_state_load
   (ACCEL_ERR_FORMAT naming the problem). acc may be NULL. */
typedef struct accel_amp_scaler_state_info {
    float scale;
    double growth_factor, backoff_factor;
    int32_t growth_interval, growth_tracker; /* tracker: the overflow-free steps since the scale last changed */
} accel_amp_scaler_state_info;
ACCEL_API accel_result accel_amp_scaler_state_decode(accel *acc, const void *buf, size_t size,
                                                     accel_amp_scaler_state_info *out);

/* --------------------------------------------------------------------------------------------- clipping */
#define ACCEL_AMP_CLIP_ERROR_IF_NONFINITE 1 /* non-finite total norm → ACCEL_ERR_STATE, gradients untouched */
#define ACCEL_AMP_CLIP_SHARDED 2            /* gradients are sharded across ranks: reduce the norm (a collective) */

/* norm_type: any p > 0, or HUGE_VAL / INFINITY for the max norm. *total_norm (may be NULL) receives the norm. */
ACCEL_API accel_result accel_amp_clip_grad_norm(accel *acc, const accel_tensor *grads, int count, double max_norm,
                                                double norm_type, int flags, double *total_norm);
/* The total norm alone (nothing is modified). */
ACCEL_API accel_result accel_amp_grad_norm(accel *acc, const accel_tensor *grads, int count, double norm_type,
                                           int flags, double *total_norm);
ACCEL_API accel_result accel_amp_clip_grad_value(accel *acc, const accel_tensor *grads, int count, double clip_value);

/* -------------------------------------------------------------------------------- fp8: delayed scaling */
/* Transformer Engine's DelayedScaling recipe (see FP8 at the top). Zero is the default for every desc field; the
   defaults are Accelerate's FP8RecipeKwargs ones, and ACCELERATE_FP8_* variables override the zero fields as
   Accelerate's kwargs handler does. */
typedef enum accel_amp_fp8_format {
    ACCEL_AMP_FP8_FORMAT_DEFAULT = 0, /* ACCELERATE_FP8_FORMAT, else HYBRID */
    ACCEL_AMP_FP8_HYBRID,             /* forward tensors E4M3, backward (gradients) E5M2 */
    ACCEL_AMP_FP8_E4M3                /* E4M3 everywhere */
} accel_amp_fp8_format;
typedef enum accel_amp_amax_algo {
    ACCEL_AMP_AMAX_DEFAULT = 0,       /* ACCELERATE_FP8_AMAX_COMPUTE_ALGO, else most_recent (Accelerate; TE: max) */
    ACCEL_AMP_AMAX_MOST_RECENT,       /* "most_recent": this step's amax */
    ACCEL_AMP_AMAX_MAX                /* "max": the largest amax in the history window */
} accel_amp_amax_algo;

typedef struct accel_amp_fp8_desc {
    int num_forward;                  /* slots 0 .. num_forward-1: forward tensors (inputs, weights) */
    int num_backward;                 /* slots num_forward .. +num_backward-1: gradients. At least one slot in all */
    accel_amp_fp8_format fp8_format;
    int margin;                       /* scale = fp8_max * 2^-margin / amax; 0 → ACCELERATE_FP8_MARGIN, else 0 */
    int amax_history_len;             /* 0 → ACCELERATE_FP8_AMAX_HISTORY_LEN, else 1024 */
    accel_amp_amax_algo amax_compute_algo;
    int local_amax;                   /* nonzero: do not reduce amax across ranks (TE: reduce_amax=False) */
    int no_saturate;                  /* nonzero: casts overflow to NaN (E4M3) / Inf (E5M2) instead of ±max */
} accel_amp_fp8_desc;

/* Caller-owned; fields are readable, change them only through the functions. */
typedef struct accel_amp_fp8 {
    accel *acc;                       /* from accel_amp_fp8_init */
    int num_tensors;                  /* num_forward + num_backward */
    int num_forward;
    accel_amp_fp8_format fp8_format;  /* resolved: HYBRID or E4M3 */
    int margin;
    int amax_history_len;
    accel_amp_amax_algo amax_compute_algo; /* resolved: MOST_RECENT or MAX */
    int local_amax;
    int no_saturate;
    float *scale;                     /* [num_tensors], host: what quantize multiplies by (starts at 1) */
    float *scale_inv;                 /* [num_tensors], host: 1 / scale, what dequantize and GEMMs multiply by */
    float *amax_history;              /* [amax_history_len][num_tensors], host; row 0 = this step's amax (TE's
                                         layout) */
    void *amax_device;                /* [num_tensors] floats on acc's CUDA device: this step's amax, until update */
    int64_t updates;                  /* accel_amp_fp8_update calls so far */
} accel_amp_fp8;

/* Resolves desc (see the fields) and remembers acc (it must outlive the object). Every scale starts at 1, the
   history at 0 (TE's initial state). */
ACCEL_API accel_result accel_amp_fp8_init(accel *acc, accel_amp_fp8 *f, const accel_amp_fp8_desc *desc);
/* Frees the arrays; safe on a zeroed or failed object, idempotent, NULL ok. */
ACCEL_API void accel_amp_fp8_deinit(accel_amp_fp8 *f);
/* ACCEL_F8_E4M3 or ACCEL_F8_E5M2: the format of a slot (its forward/backward role and the fp8_format);
   ACCEL_DTYPE_INVALID for a bad slot. */
ACCEL_API accel_dtype accel_amp_fp8_dtype(const accel_amp_fp8 *f, int slot);
/* Fused cast + amax, one pass per buffer (one launch for the list on CUDA): dst[i] = fp8(src[i] * scale[slot]) and
   this step's amax of the slot (amax_history row 0) rises to max |src[i]| (TE's rule: NaN elements are not seen,
   Inf is). slot = slots[i], or i when slots is NULL. src F32/F16/BF16; dst of the slot's dtype, same element count;
   satfinite unless desc.no_saturate. No synchronization. */
ACCEL_API accel_result accel_amp_fp8_quantize(accel_amp_fp8 *f, const int *slots, const accel_tensor *src,
                                              const accel_tensor *dst, int n);
/* The reverse: dst[i] (F32/F16/BF16) = fp8 value of src[i] * scale_inv[slot], rounded RNE to dst's dtype. Uses the
   slot's CURRENT scale_inv: valid for tensors quantized since the last accel_amp_fp8_update (copy
   f->scale_inv[slot] when you quantize if you dequantize after an update, as TE's Float8Tensor keeps its own). */
ACCEL_API accel_result accel_amp_fp8_dequantize(accel_amp_fp8 *f, const int *slots, const accel_tensor *src,
                                                const accel_tensor *dst, int n);
/* Raise this step's amax of a slot to amax (e.g. the amax output of a cuBLASLt fp8 GEMM): NaN is stored (a NaN
   step amax), negative values are refused. Host only, no synchronization. */
ACCEL_API accel_result accel_amp_fp8_record_amax(accel_amp_fp8 *f, int slot, float amax);
/* End of the step (TE: after forward / backward; here once per step for every slot): this step's amax is reduced
   across ranks (MAX; a collective unless desc.local_amax or one process), then per slot the history rolls and the
   scale and scale_inv are recomputed (the rule at the top). On CUDA it reads this step's amax back (one
   synchronization of acc->stream). With several processes and no host group: ACCEL_ERR_UNSUPPORTED, nothing
   changed, unless desc.local_amax. */
ACCEL_API accel_result accel_amp_fp8_update(accel_amp_fp8 *f);

/* Checkpoint bytes, little-endian: "AF8S", u32 version=1, u32 num_forward, u32 num_backward, u32 fp8_format,
   u32 amax_history_len, i32 margin, u32 amax_compute_algo, i64 updates, then f32 scale[num_tensors],
   f32 scale_inv[num_tensors], f32 amax_history[amax_history_len][num_tensors]. */
#define ACCEL_AMP_FP8_STATE_HEADER_BYTES 40
/* accel_state_save_fn: f = an accel_amp_fp8 *. buf NULL or cap too small → *size = the bytes needed (header +
   4 * num_tensors * (2 + amax_history_len)), ACCEL_OK, nothing written. Saves what the host holds: call it after
   accel_amp_fp8_update (on CUDA the amax of a step in progress is still on the device). */
ACCEL_API accel_result accel_amp_fp8_state_save(void *f, void *buf, size_t cap, size_t *size);
/* accel_state_load_fn: validates everything first (the slot counts, format and history length must match this
   object; every scale finite and > 0 with scale_inv = 1/scale; amaxes >= 0 or NaN), then applies. margin and
   amax_compute_algo stay this object's (configuration, not state). Bad bytes: ACCEL_ERR_FORMAT, nothing changed. */
ACCEL_API accel_result accel_amp_fp8_state_load(void *f, const void *buf, size_t size);

#ifdef __cplusplus
}
#endif
#endif /* ACCEL_AMP_H_INCLUDED */

/* ========================================================================================== implementation */
#if defined(ACCEL_IMPLEMENTATION) && !defined(ACCEL__AMP_IMPL_DONE)
#define ACCEL__AMP_IMPL_DONE
/* CONTENTS
     1. policy
     2. CPU loops (and their AVX2 twins chosen at run time), fp8 CPU loops, norms
     3. list kernels: the per-thread code (ACCEL_HD: units, chunks, element work), the host plan, then
        (CUDA) the kernel, its instances and the launcher
     4. conversions
     5. loss scaler
     6. clipping
     7. fp8 delayed scaling */

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifndef ACCEL_AMP_CUDA_BLOCK
#define ACCEL_AMP_CUDA_BLOCK 256
#endif
#if (ACCEL_AMP_CUDA_BLOCK & (ACCEL_AMP_CUDA_BLOCK - 1)) != 0 || ACCEL_AMP_CUDA_BLOCK < 32 || ACCEL_AMP_CUDA_BLOCK > 1024
#error "ACCEL_AMP_CUDA_BLOCK must be a power of two in [32, 1024]"
#endif

ACCEL__DEF accel_result accel_amp_get_policy(accel *acc, accel_amp_policy *out) {
    if (!acc || !out) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_amp_get_policy: NULL argument");
    memset(out, 0, sizeof *out);
    switch (acc->mixed_precision) {
    case ACCEL_PRECISION_DEFAULT:
    case ACCEL_PRECISION_NO: out->precision = ACCEL_PRECISION_NO; out->compute_dtype = ACCEL_F32; break;
    case ACCEL_PRECISION_FP16:
        out->precision = ACCEL_PRECISION_FP16; out->compute_dtype = ACCEL_F16; out->loss_scaling = 1;
        out->accelerate_would_scale = acc->device >= 0;
        break;
    case ACCEL_PRECISION_BF16: out->precision = ACCEL_PRECISION_BF16; out->compute_dtype = ACCEL_BF16; break;
    case ACCEL_PRECISION_FP8: /* Accelerate: GEMMs in fp8 (TE), the rest under bf16 autocast, no GradScaler */
        out->precision = ACCEL_PRECISION_FP8; out->compute_dtype = ACCEL_BF16; break;
    default:
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "mixed_precision=%d is not an accel_precision",
                           (int)acc->mixed_precision);
    }
    return ACCEL_OK;
}

/* ------------------------------------------------------------------------------------------ CPU loops */
static int accel__amp_is16or32(accel_dtype t) { return t == ACCEL_F32 || t == ACCEL_F16 || t == ACCEL_BF16; }

/* The hot loops are written as blocks of 16 with a constant trip count so that GCC's -O2 cost model ("very cheap")
   vectorizes them too (with -O3 / -march=native any loop shape would do). */
#define ACCEL__AMP_BLK 16

/* Vector width independent of the user's flags (the one dispatch point): on x86-64 with GCC or clang the CPU hot loops
   (fp32 → bf16 / fp16, fp32 unscale_and_check, the fp32 → fp8 cast) have AVX2 twins compiled with target attributes
   and chosen at run time (the core's accel__cpu_has), so a baseline -O2 build runs 256-bit code on an AVX2 machine. An
   AVX2 build (-mavx2 / -march=native) takes them unconditionally; ACCEL_AMP_NO_DISPATCH turns the run-time check off
   (then only an AVX2 build uses them). Every twin gives the same bits as its scalar loop (tests/unit/amp/
   test_amp_vec.c checks all 2^32 fp32 inputs of the conversions and the unscale results and found_inf). */
#if defined(ACCEL__X86) && defined(__x86_64__) && (defined(__AVX2__) || !defined(ACCEL_AMP_NO_DISPATCH))
#define ACCEL__AMP_AVX2 1
#define ACCEL__AMP_TARGET_AVX2 ACCEL__TARGET_AVX2
#define ACCEL__AMP_TARGET_F16C ACCEL__TARGET_F16C
/* the core's CPU check (accel__cpu_has); ACCEL_AMP_NO_DISPATCH: only what the build's -march has */
static int accel__amp_has_avx2(void) { return accel__cpu_has(ACCEL__CPU_AVX2); }
static int accel__amp_has_f16c(void) {
#if defined(ACCEL_AMP_NO_DISPATCH) && !(defined(__AVX2__) && defined(__F16C__))
    return 0;
#else
    return accel__cpu_has(ACCEL__CPU_AVX2 | ACCEL__CPU_F16C);
#endif
}

/* g *= inv (inv == 1: read only) and OR of "exponent all ones", 32 elements per iteration: the scalar rule. */
ACCEL__AMP_TARGET_AVX2 static uint32_t accel__amp_cpu_unscale_f32_avx2(float *g, size_t n, float inv) {
    const __m256i em = _mm256_set1_epi32(0x7f800000);
    const __m256 vi = _mm256_set1_ps(inv);
    __m256i bad = _mm256_setzero_si256();
    uint32_t b;
    size_t i = 0;
    int k;
    if (inv == 1.0f) {
        for (; i + 32 <= n; i += 32)
            for (k = 0; k < 4; ++k) {
                __m256i u = _mm256_loadu_si256((const __m256i *)(const void *)(g + i + 8 * k));
                bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(_mm256_and_si256(u, em), em));
            }
    } else {
        for (; i + 32 <= n; i += 32)
            for (k = 0; k < 4; ++k) {
                __m256 x = _mm256_loadu_ps(g + i + 8 * k);
                bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_castps_si256(x), em), em));
                _mm256_storeu_ps(g + i + 8 * k, _mm256_mul_ps(x, vi));
            }
    }
    b = _mm256_testz_si256(bad, bad) ? 0u : 1u;
    for (; i < n; ++i) {
        float v = g[i];
        b |= accel_amp_nonfinite(v);
        if (inv != 1.0f) g[i] = v * inv;
    }
    return b;
}
/* Outputs of at least this many bytes are written with non-temporal (streaming) stores: a large cast's output does
   not fit in the caches anyway, and a streaming store skips the read of every destination line before it is written
   (a third less memory traffic for fp32 → 16-bit: measured 1.21-1.33x the plain-store loop at 256 MiB). Smaller
   outputs keep plain stores, so a consumer that reads them soon finds them in cache. */
#ifndef ACCEL__AMP_NT_BYTES
#define ACCEL__AMP_NT_BYTES ((size_t)4 << 20)
#endif
/* Elements to convert one by one before d is 32-byte aligned for streaming stores (0 when streaming is not used or d
   cannot be aligned: an odd address). */
static size_t accel__amp_nt_head(const uint16_t *d, size_t n) {
    size_t mis = (size_t)((uintptr_t)d & 31u);
    if (n * sizeof(uint16_t) < ACCEL__AMP_NT_BYTES || (mis & 1u)) return (size_t)-1;
    return mis ? (32u - mis) / 2u : 0;
}
/* accel_f32_to_bf16 on 16 lanes: (u + 0x7fff + lsb) >> 16, NaN → 0x7fff; packed with one pack and one permute. */
ACCEL__AMP_TARGET_AVX2 static void accel__amp_cpu_f32_to_bf16_avx2(const float *s, uint16_t *d, size_t n) {
    const __m256i absm = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    const __m256i rb = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1);
    size_t i = 0, head = accel__amp_nt_head(d, n);
    int nt = head != (size_t)-1;
    if (nt)
        for (; i < head; ++i) d[i] = accel_f32_to_bf16(s[i]);
    for (; i + 16 <= n; i += 16) {
        __m256i u0 = _mm256_loadu_si256((const __m256i *)(const void *)(s + i));
        __m256i u1 = _mm256_loadu_si256((const __m256i *)(const void *)(s + i + 8));
        __m256i r0 = _mm256_srli_epi32(
            _mm256_add_epi32(_mm256_add_epi32(u0, rb), _mm256_and_si256(_mm256_srli_epi32(u0, 16), one)), 16);
        __m256i r1 = _mm256_srli_epi32(
            _mm256_add_epi32(_mm256_add_epi32(u1, rb), _mm256_and_si256(_mm256_srli_epi32(u1, 16), one)), 16);
        __m256i o;
        r0 = _mm256_blendv_epi8(r0, rb, _mm256_cmpgt_epi32(_mm256_and_si256(u0, absm), inf));
        r1 = _mm256_blendv_epi8(r1, rb, _mm256_cmpgt_epi32(_mm256_and_si256(u1, absm), inf));
        o = _mm256_permute4x64_epi64(_mm256_packus_epi32(r0, r1), 0xd8);
        if (nt) _mm256_stream_si256((__m256i *)(void *)(d + i), o); /* d + i is 32-byte aligned after the head */
        else _mm256_storeu_si256((__m256i *)(void *)(d + i), o);
    }
    if (nt) _mm_sfence(); /* streaming stores are weakly ordered: make them visible before returning */
    for (; i < n; ++i) d[i] = accel_f32_to_bf16(s[i]);
}
/* accel_f32_to_f16 on 16 lanes: F16C's round-to-nearest-even conversion (the same rounding, overflow and subnormals),
   then every NaN lane replaced by 0x7fff (F16C keeps the payload; the core's codec does not). */
ACCEL__AMP_TARGET_F16C static void accel__amp_cpu_f32_to_f16_avx2(const float *s, uint16_t *d, size_t n) {
    const __m256i absm = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    const __m256i nanc = _mm256_set1_epi16(0x7fff);
    size_t i = 0, head = accel__amp_nt_head(d, n);
    int nt = head != (size_t)-1;
    if (nt)
        for (; i < head; ++i) d[i] = accel_f32_to_f16(s[i]);
    for (; i + 16 <= n; i += 16) {
        __m256 x0 = _mm256_loadu_ps(s + i), x1 = _mm256_loadu_ps(s + i + 8);
        __m256i m0 = _mm256_cmpgt_epi32(_mm256_and_si256(_mm256_castps_si256(x0), absm), inf);
        __m256i m1 = _mm256_cmpgt_epi32(_mm256_and_si256(_mm256_castps_si256(x1), absm), inf);
        __m256i h = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm256_cvtps_ph(x0, _MM_FROUND_TO_NEAREST_INT)),
                                            _mm256_cvtps_ph(x1, _MM_FROUND_TO_NEAREST_INT), 1);
        __m256i m = _mm256_permute4x64_epi64(_mm256_packs_epi32(m0, m1), 0xd8);
        if (nt) _mm256_stream_si256((__m256i *)(void *)(d + i), _mm256_blendv_epi8(h, nanc, m));
        else _mm256_storeu_si256((__m256i *)(void *)(d + i), _mm256_blendv_epi8(h, nanc, m));
    }
    if (nt) _mm_sfence();
    for (; i < n; ++i) d[i] = accel_f32_to_f16(s[i]);
}
#endif

static uint32_t accel__amp_cpu_unscale_f32(float *ACCEL_RESTRICT g, size_t n, float inv) {
    uint32_t bad = 0;
    size_t i = 0, j;
#ifdef ACCEL__AMP_AVX2
    if (accel__amp_has_avx2()) return accel__amp_cpu_unscale_f32_avx2(g, n, inv);
#endif
    if (inv == 1.0f) {
        for (; i + ACCEL__AMP_BLK <= n; i += ACCEL__AMP_BLK)
            for (j = 0; j < ACCEL__AMP_BLK; ++j) bad |= accel_amp_nonfinite(g[i + j]);
        for (; i < n; ++i) bad |= accel_amp_nonfinite(g[i]);
        return bad;
    }
    for (; i + ACCEL__AMP_BLK <= n; i += ACCEL__AMP_BLK) {
        for (j = 0; j < ACCEL__AMP_BLK; ++j) {
            float v = g[i + j];
            bad |= accel_amp_nonfinite(v);
            g[i + j] = v * inv;
        }
    }
    for (; i < n; ++i) {
        float v = g[i];
        bad |= accel_amp_nonfinite(v);
        g[i] = v * inv;
    }
    return bad;
}
static uint32_t accel__amp_cpu_unscale_16(uint16_t *ACCEL_RESTRICT g, size_t n, float inv, int bf16) {
    uint32_t bad = 0;
    size_t i;
    for (i = 0; i < n; ++i) {
        float v = bf16 ? accel_bf16_to_f32(g[i]) : accel_f16_to_f32(g[i]);
        bad |= accel_amp_nonfinite(v);
        v = accel_amp_unscale1(v, inv);
        g[i] = bf16 ? accel_f32_to_bf16(v) : accel_f32_to_f16(v);
    }
    return bad;
}

static void accel__amp_cpu_f32_to_bf16(const float *ACCEL_RESTRICT s, uint16_t *ACCEL_RESTRICT d, size_t n) {
    size_t i = 0, j;
#ifdef ACCEL__AMP_AVX2
    if (accel__amp_has_avx2()) { accel__amp_cpu_f32_to_bf16_avx2(s, d, n); return; }
#endif
    for (; i + ACCEL__AMP_BLK <= n; i += ACCEL__AMP_BLK)
        for (j = 0; j < ACCEL__AMP_BLK; ++j) d[i + j] = accel_f32_to_bf16(s[i + j]);
    for (; i < n; ++i) d[i] = accel_f32_to_bf16(s[i]);
}
static void accel__amp_cpu_f32_to_f16(const float *ACCEL_RESTRICT s, uint16_t *ACCEL_RESTRICT d, size_t n) {
    size_t i;
#ifdef ACCEL__AMP_AVX2
    if (accel__amp_has_f16c()) { accel__amp_cpu_f32_to_f16_avx2(s, d, n); return; }
#endif
    for (i = 0; i < n; ++i) d[i] = accel_f32_to_f16(s[i]);
}
static void accel__amp_cpu_bf16_to_f32(const uint16_t *ACCEL_RESTRICT s, float *ACCEL_RESTRICT d, size_t n) {
    size_t i = 0, j;
    for (; i + ACCEL__AMP_BLK <= n; i += ACCEL__AMP_BLK)
        for (j = 0; j < ACCEL__AMP_BLK; ++j) d[i + j] = accel_bf16_to_f32(s[i + j]);
    for (; i < n; ++i) d[i] = accel_bf16_to_f32(s[i]);
}
static void accel__amp_cpu_f16_to_f32(const uint16_t *ACCEL_RESTRICT s, float *ACCEL_RESTRICT d, size_t n) {
    size_t i;
    for (i = 0; i < n; ++i) d[i] = accel_f16_to_f32(s[i]);
}
static void accel__amp_cpu_f32_to_bf16_sr(const float *ACCEL_RESTRICT s, uint16_t *ACCEL_RESTRICT d, size_t n,
                                          const accel_amp_sr *sr) {
    size_t i = 0;
    uint64_t idx = sr->index_offset;
    uint32_t r[4];
    /* leading elements up to a multiple of 4 in index space, then one Philox block per 4 elements */
    while (i < n && (idx & 3u)) {
        d[i] = accel_amp_f32_to_bf16_sr(s[i], accel_amp_sr_bits(sr->seed, sr->step, idx));
        ++i;
        ++idx;
    }
    for (; i + 4 <= n; i += 4, idx += 4) {
        accel_rng_draw4(sr->seed, sr->step, idx >> 2, r);
        d[i] = accel_amp_f32_to_bf16_sr(s[i], r[0]);
        d[i + 1] = accel_amp_f32_to_bf16_sr(s[i + 1], r[1]);
        d[i + 2] = accel_amp_f32_to_bf16_sr(s[i + 2], r[2]);
        d[i + 3] = accel_amp_f32_to_bf16_sr(s[i + 3], r[3]);
    }
    for (; i < n; ++i, ++idx) d[i] = accel_amp_f32_to_bf16_sr(s[i], accel_amp_sr_bits(sr->seed, sr->step, idx));
}

static float accel__amp_load(const void *p, accel_dtype t, size_t i) {
    if (t == ACCEL_F32) return ((const float *)p)[i];
    if (t == ACCEL_BF16) return accel_bf16_to_f32(((const uint16_t *)p)[i]);
    if (t == ACCEL_F8_E4M3 || t == ACCEL_F8_E5M2)
        return accel_amp_fp8_to_f32(((const uint8_t *)p)[i], t == ACCEL_F8_E5M2);
    return accel_f16_to_f32(((const uint16_t *)p)[i]);
}
/* fp8 destinations saturate (accel_amp_convert's rule) */
static void accel__amp_store(void *p, accel_dtype t, size_t i, float v) {
    if (t == ACCEL_F32) ((float *)p)[i] = v;
    else if (t == ACCEL_BF16) ((uint16_t *)p)[i] = accel_f32_to_bf16(v);
    else if (t == ACCEL_F8_E4M3 || t == ACCEL_F8_E5M2)
        ((uint8_t *)p)[i] = accel_amp_f32_to_fp8(v, t == ACCEL_F8_E5M2, 1);
    else ((uint16_t *)p)[i] = accel_f32_to_f16(v);
}

/* ------------------------------------------------------------------------------------------ fp8 CPU loops */
static int accel__amp_is_fp8(accel_dtype t) { return t == ACCEL_F8_E4M3 || t == ACCEL_F8_E5M2; }

/* Fused cast + amax of an fp32 buffer: d = fp8(s * scale), returns the largest |s| as fp32 bits with NaN left out
   (for non-NaN floats the order of |x| is the order of its bits). One function per (format, rule) so the constant
   arguments reach the element helper. Each block of 16 is encoded into 32-bit codes, then narrowed in a second
   loop: both vectorize in 32-bit lanes (narrowing each intermediate instead, as compilers do when the codes go
   straight to bytes, costs twice the instructions with SSE2). The max is signed: GCC vectorizes a signed max
   reduction with SSE2, not an unsigned one. */
#define ACCEL__AMP_FP8Q_F32(ATTR, NAME, E5, SAT)                                                                      \
    ATTR static uint32_t NAME(const float *ACCEL_RESTRICT s, uint8_t *ACCEL_RESTRICT d, size_t n, float scale) {      \
        int32_t m = 0, mv[ACCEL__AMP_BLK];                                                                             \
        uint32_t c[ACCEL__AMP_BLK];                                                                                    \
        size_t i = 0, j;                                                                                               \
        for (j = 0; j < ACCEL__AMP_BLK; ++j) mv[j] = 0;                                                                \
        for (; i + ACCEL__AMP_BLK <= n; i += ACCEL__AMP_BLK) {                                                         \
            for (j = 0; j < ACCEL__AMP_BLK; ++j) {                                                                     \
                float x = s[i + j];                                                                                    \
                int32_t a = (int32_t)(accel_f32_bits(x) & 0x7fffffffu);                                                \
                a = a > 0x7f800000 ? 0 : a;                                                                            \
                mv[j] = a > mv[j] ? a : mv[j];                                                                         \
                c[j] = accel_amp_fp8_encode_bits(accel_f32_bits(x * scale), E5, SAT);                                  \
            }                                                                                                          \
            for (j = 0; j < ACCEL__AMP_BLK; ++j) d[i + j] = (uint8_t)c[j];                                             \
        }                                                                                                              \
        for (j = 0; j < ACCEL__AMP_BLK; ++j) m = mv[j] > m ? mv[j] : m;                                                \
        for (; i < n; ++i) {                                                                                           \
            float x = s[i];                                                                                            \
            int32_t a = (int32_t)(accel_f32_bits(x) & 0x7fffffffu);                                                    \
            a = a > 0x7f800000 ? 0 : a;                                                                                \
            m = a > m ? a : m;                                                                                         \
            d[i] = accel_amp_f32_to_fp8(x * scale, E5, SAT);                                                           \
        }                                                                                                              \
        return (uint32_t)m;                                                                                            \
    }
#define ACCEL__AMP_FP8Q_SET(ATTR, SFX)                                                                                 \
    ACCEL__AMP_FP8Q_F32(ATTR, accel__amp_cpu_fp8q_e4m3_sat##SFX, 0, 1)                                                 \
    ACCEL__AMP_FP8Q_F32(ATTR, accel__amp_cpu_fp8q_e4m3_nosat##SFX, 0, 0)                                               \
    ACCEL__AMP_FP8Q_F32(ATTR, accel__amp_cpu_fp8q_e5m2_sat##SFX, 1, 1)                                                 \
    ACCEL__AMP_FP8Q_F32(ATTR, accel__amp_cpu_fp8q_e5m2_nosat##SFX, 1, 0)                                               \
    static uint32_t accel__amp_cpu_fp8q_f32##SFX(const float *s, uint8_t *d, size_t n, float scale, int e5m2,         \
                                                 int sat) {                                                           \
        if (e5m2)                                                                                                      \
            return sat ? accel__amp_cpu_fp8q_e5m2_sat##SFX(s, d, n, scale)                                             \
                       : accel__amp_cpu_fp8q_e5m2_nosat##SFX(s, d, n, scale);                                          \
        return sat ? accel__amp_cpu_fp8q_e4m3_sat##SFX(s, d, n, scale)                                                 \
                   : accel__amp_cpu_fp8q_e4m3_nosat##SFX(s, d, n, scale);                                              \
    }
ACCEL__AMP_FP8Q_SET(, )
/* x86-64 with GCC or clang: an AVX2 kernel (the same element rule as accel_amp_fp8_encode_bits, lane for lane, and
   the same amax), dispatched as the other AVX2 twins (accel__amp_has_avx2 above). It handles 32
   elements per iteration and narrows the codes with two packs and one permute (the compiler's version of the loop
   above spends as much on narrowing and on the amax as on the encode). */
#ifdef ACCEL__AMP_AVX2
ACCEL__AMP_TARGET_AVX2 static uint32_t accel__amp_cpu_fp8q_f32_avx2(const float *s, uint8_t *d, size_t n,
                                                                             float scale, int e5m2, int sat) {
    const int sh = e5m2 ? 21 : 20;
    const __m128i shc = _mm_cvtsi32_si128(sh);
    const __m256i absm = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    const __m256i lim =
        _mm256_set1_epi32((int)(e5m2 ? (sat ? 0x47600000u : 0x47800000u) : (sat ? 0x43e00000u : 0x43f00000u)));
    const __m256i bias = _mm256_set1_epi32(e5m2 ? 0x38000000 : 0x3c000000);
    const __m256i half = _mm256_set1_epi32((1 << (sh - 1)) - 1), one = _mm256_set1_epi32(1);
    const __m256 addf = _mm256_set1_ps(e5m2 ? 128.0f : 16384.0f);
    const __m256i subi = _mm256_set1_epi32(e5m2 ? 0x43000000 : 0x46800000);
    const __m256i minnorm = _mm256_set1_epi32(0x00800000), signm = _mm256_set1_epi32(0x80);
    const __m256i nanc = _mm256_set1_epi32(0x7f), perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    const __m256 vs = _mm256_set1_ps(scale);
    __m256i mx = _mm256_setzero_si256(), r[4];
    int32_t lanes[8], m = 0;
    size_t i = 0;
    int k;
    for (; i + 32 <= n; i += 32) {
        for (k = 0; k < 4; ++k) {
            __m256 x = _mm256_loadu_ps(s + i + 8 * k);
            __m256i a = _mm256_and_si256(_mm256_castps_si256(x), absm);
            __m256i u = _mm256_castps_si256(_mm256_mul_ps(x, vs));
            __m256i au = _mm256_and_si256(u, absm);
            __m256i c = _mm256_min_epi32(au, lim);
            __m256i t = _mm256_sub_epi32(c, bias);
            __m256i rn = _mm256_srl_epi32(
                _mm256_add_epi32(_mm256_add_epi32(t, half), _mm256_and_si256(_mm256_srl_epi32(t, shc), one)), shc);
            __m256i rd = _mm256_sub_epi32(_mm256_castps_si256(_mm256_add_ps(_mm256_castsi256_ps(c), addf)), subi);
            __m256i v = _mm256_blendv_epi8(rn, rd, _mm256_cmpgt_epi32(minnorm, t));
            mx = _mm256_max_epi32(mx, _mm256_andnot_si256(_mm256_cmpgt_epi32(a, inf), a));
            v = _mm256_or_si256(v, _mm256_and_si256(_mm256_srli_epi32(u, 24), signm));
            r[k] = _mm256_blendv_epi8(v, nanc, _mm256_cmpgt_epi32(au, inf));
        }
        _mm256_storeu_si256((__m256i *)(void *)(d + i),
                            _mm256_permutevar8x32_epi32(_mm256_packus_epi16(_mm256_packus_epi32(r[0], r[1]),
                                                                            _mm256_packus_epi32(r[2], r[3])), perm));
    }
    _mm256_storeu_si256((__m256i *)(void *)lanes, mx);
    for (k = 0; k < 8; ++k) m = lanes[k] > m ? lanes[k] : m;
    for (; i < n; ++i) {
        int32_t a = (int32_t)(accel_f32_bits(s[i]) & 0x7fffffffu);
        a = a > 0x7f800000 ? 0 : a;
        m = a > m ? a : m;
        d[i] = accel_amp_f32_to_fp8(s[i] * scale, e5m2, sat);
    }
    return (uint32_t)m;
}
#endif
#undef ACCEL__AMP_FP8Q_SET
#undef ACCEL__AMP_FP8Q_F32

/* src F32/F16/BF16 → dst F8 with scale; returns max |src| bits (NaN left out). */
static uint32_t accel__amp_cpu_fp8q(const void *src, accel_dtype st, uint8_t *dst, size_t n, float scale, int e5m2,
                                    int sat) {
    uint32_t m = 0;
    size_t i;
    if (st == ACCEL_F32) {
#ifdef ACCEL__AMP_AVX2
        if (accel__amp_has_avx2()) return accel__amp_cpu_fp8q_f32_avx2((const float *)src, dst, n, scale, e5m2, sat);
#endif
        return accel__amp_cpu_fp8q_f32((const float *)src, dst, n, scale, e5m2, sat);
    }
    for (i = 0; i < n; ++i) {
        float x = accel__amp_load(src, st, i);
        uint32_t a = accel_f32_bits(x) & 0x7fffffffu;
        a = a > 0x7f800000u ? 0u : a;
        m = a > m ? a : m;
        dst[i] = accel_amp_f32_to_fp8(x * scale, e5m2, sat);
    }
    return m;
}

/* src F8 → dst F32/F16/BF16: fp8 value * scale_inv, rounded to dst's dtype. A buffer of more than a few codes goes
   through a 256-entry table of the results (the same float product and rounding per code, so the same bits): one
   load per element instead of the decode. */
static void accel__amp_cpu_fp8d(const uint8_t *ACCEL_RESTRICT src, int e5m2, void *dst, accel_dtype dt, size_t n,
                                float scale_inv) {
    size_t i;
    if (n >= 4096 && (dt == ACCEL_F32 || dt == ACCEL_F16 || dt == ACCEL_BF16)) {
        float lf[256];
        uint16_t lh[256];
        int k;
        for (k = 0; k < 256; ++k) {
            float v = accel_amp_fp8_to_f32((uint8_t)k, e5m2) * scale_inv;
            if (dt == ACCEL_F32) lf[k] = v;
            else accel__amp_store(lh, dt, (size_t)k, v);
        }
        if (dt == ACCEL_F32) {
            float *ACCEL_RESTRICT d = (float *)dst;
            for (i = 0; i < n; ++i) d[i] = lf[src[i]];
        } else {
            uint16_t *ACCEL_RESTRICT d = (uint16_t *)dst;
            for (i = 0; i < n; ++i) d[i] = lh[src[i]];
        }
        return;
    }
    for (i = 0; i < n; ++i) accel__amp_store(dst, dt, i, accel_amp_fp8_to_f32(src[i], e5m2) * scale_inv);
}

/* (Non-temporal stores for large destinations were tried and measured slower here: see bench/amp.) */
static void accel__amp_cpu_convert(const void *src, accel_dtype st, void *dst, accel_dtype dt, size_t n,
                                   const accel_amp_sr *sr) {
    size_t i;
    if (st == dt) { if (src != dst) memmove(dst, src, n * accel_dtype_size(st)); return; }
    if (st == ACCEL_F32 && dt == ACCEL_BF16) {
        if (sr) accel__amp_cpu_f32_to_bf16_sr((const float *)src, (uint16_t *)dst, n, sr);
        else accel__amp_cpu_f32_to_bf16((const float *)src, (uint16_t *)dst, n);
        return;
    }
    if (st == ACCEL_F32 && dt == ACCEL_F16) {
        accel__amp_cpu_f32_to_f16((const float *)src, (uint16_t *)dst, n);
        return;
    }
    if (st == ACCEL_BF16 && dt == ACCEL_F32) {
        accel__amp_cpu_bf16_to_f32((const uint16_t *)src, (float *)dst, n);
        return;
    }
    if (st == ACCEL_F16 && dt == ACCEL_F32) {
        accel__amp_cpu_f16_to_f32((const uint16_t *)src, (float *)dst, n);
        return;
    }
    if (accel__amp_is_fp8(dt) && !accel__amp_is_fp8(st)) {
        (void)accel__amp_cpu_fp8q(src, st, (uint8_t *)dst, n, 1.0f, dt == ACCEL_F8_E5M2, 1);
        return;
    }
    if (accel__amp_is_fp8(st) && !accel__amp_is_fp8(dt)) {
        accel__amp_cpu_fp8d((const uint8_t *)src, st == ACCEL_F8_E5M2, dst, dt, n, 1.0f);
        return;
    }
    for (i = 0; i < n; ++i) accel__amp_store(dst, dt, i, accel__amp_load(src, st, i)); /* f16 <-> bf16, e4m3 <-> e5m2 */
}


/* Norm accumulation: sum of |x|^p (p finite) or max |x| (p = inf; NaN wins). */
static ACCEL_INLINE ACCEL_HD double accel__amp_pow_term(float v, double p) {
    double a = v < 0 ? -(double)v : (double)v;
    if (v != v) return (double)v;
    if (p == 2.0) return a * a;
    if (p == 1.0) return a;
    return pow(a, p);
}
static ACCEL_INLINE ACCEL_HD double accel__amp_max_nan(double m, double a) { return (a != a || a > m) ? a : m; }

static void accel__amp_cpu_norm(const void *p, accel_dtype t, size_t n, double norm_type, int is_inf, double *acc_out) {
    size_t i;
    double s = 0.0;
    if (is_inf) {
        for (i = 0; i < n; ++i) {
            float v = accel__amp_load(p, t, i);
            s = accel__amp_max_nan(s, v < 0 ? -(double)v : (double)v);
        }
        *acc_out = accel__amp_max_nan(*acc_out, s);
        return;
    }
    if (t == ACCEL_F32 && norm_type == 2.0) {
        const float *f = (const float *)p;
        for (i = 0; i < n; ++i) s += (double)f[i] * (double)f[i];
    } else {
        for (i = 0; i < n; ++i) s += accel__amp_pow_term(accel__amp_load(p, t, i), norm_type);
    }
    *acc_out += s;
}

static void accel__amp_cpu_scale(void *p, accel_dtype t, size_t n, float coef) {
    size_t i;
    if (t == ACCEL_F32) {
        float *ACCEL_RESTRICT f = (float *)p;
        size_t j;
        for (i = 0; i + ACCEL__AMP_BLK <= n; i += ACCEL__AMP_BLK)
            for (j = 0; j < ACCEL__AMP_BLK; ++j) f[i + j] *= coef;
        for (; i < n; ++i) f[i] *= coef;
        return;
    }
    for (i = 0; i < n; ++i) accel__amp_store(p, t, i, accel__amp_load(p, t, i) * coef);
}
static void accel__amp_cpu_clamp(void *p, accel_dtype t, size_t n, float lo, float hi) {
    size_t i;
    for (i = 0; i < n; ++i) accel__amp_store(p, t, i, accel_amp_clamp1(accel__amp_load(p, t, i), lo, hi));
}

/* ------------------------------------------------------------------------------------------ list kernels */
/* How a buffer list runs on the GPU. Everything here but the kernel's epilogue and the launcher is plain C with
   ACCEL_HD functions: tests/unit/amp/test_amp_grid.c runs the very same per-thread code on the CPU over every
   (block, thread) of small grids and compares it with the CPU path.
   - Units. Each buffer is cut into units of 16 bytes of its wider stream (vw = 4 elements when fp32 is involved, 8
     for 16-bit ones, 16 for fp8 to fp8). First come the body units, where every stream is aligned to a whole unit
     (16 bytes, or vw * size for the narrower stream), then the head (the elements before the first aligned unit)
     and the tail as element-wise units. A buffer whose streams cannot be aligned together (source and destination
     at different element phases; stochastic rounding also needs the Philox index at a multiple of 4) keeps the same
     cut with element-wise body units.
   - Chunks. A buffer's units are cut into chunks of B x U units (B threads a block, U units a thread), numbered
     buffer after buffer through the launch (a chunk never spans two buffers: its buffer is looked up once). Thread i
     takes units i + k*B (k < U) of its chunk, so each of its U loads is part of one contiguous 16*B-byte run of the
     block, and issues all U before anything is computed or stored (the compiler cannot prove the streams disjoint,
     so it would not hoist the loads itself). Every chunk but a buffer's last lies in the aligned body and runs
     without a bound check.
   - Grid. The read + write kinds launch one block per chunk (ACCEL__AMP_WAVES_FAST = 0): blocks are handed out in
     order as SMs free up, so the resident blocks hold neighbouring chunks, the whole grid streams through one window
     of memory (each DRAM page opened is read or written whole, as by torch's element-wise kernels and a plain copy
     kernel) and there is no partly empty last round. The design before this one gave each of about a thousand
     blocks one contiguous share of the list: a thousand streams at a thousand places in memory, which measured
     0.65-0.86 of a copy on an H200. The norm, whose per-block partial sums are read back, launches
     ACCEL__AMP_WAVES_NORM x the blocks resident at once, each walking the chunks with the grid as its stride (the
     same moving window).
   - Launch shapes (U, the launch bound's blocks per SM, the waves) are overridable macros below; bench/amp/
     sweep_gpu.sh measures variants of them. Their ranges are those test_amp_grid runs the thread code over.
   - Descriptors travel as the kernel's parameter (__grid_constant__: no copy, no stream work before the launch), up
     to ACCEL__AMP_CAP buffers a launch; longer lists take several launches.
   - Results: unscale's found_inf is one word of device scratch (cleared before the launch, set by any block that saw
     Inf or NaN); the norm's partial sums are one double per block, folded on the host in block order (deterministic
     for a given device). Either comes back with one copy into page-locked memory (accel__pinned_scratch) and one
     synchronization. The fp8 amax goes to the device slot with atomicMax, once per block and slot.
   - Element math: the same ACCEL_HD helpers as the CPU loops; the specialised instances (fp32 lists) get their
     dtypes as compile-time constants, the generic one dispatches on each buffer's dtypes. */
enum { ACCEL__AMP_K_UNSCALE = 0, ACCEL__AMP_K_CONVERT, ACCEL__AMP_K_SR, ACCEL__AMP_K_NORM, ACCEL__AMP_K_SCALE,
       ACCEL__AMP_K_CLAMP, ACCEL__AMP_K_FP8Q, ACCEL__AMP_K_FP8D };
/* Norm modes: fp32 compensated sums of squares / of |x| (the host reruns in float64 when a sum left the fp32
   range), the max of |x| (exact as bits), or float64 terms (other p, and the rerun). */
enum { ACCEL__AMP_NORM_P2 = 0, ACCEL__AMP_NORM_P1, ACCEL__AMP_NORM_INF, ACCEL__AMP_NORM_F64 };

/* Launch shapes. U: 16-byte units a thread loads before it works on them (1, 2, 4 or 8). MINB: blocks of 256
   threads the launch bound keeps resident per SM (the register budget: 8 -> 32 registers a thread, 4 -> 64).
   WAVES: blocks launched as a multiple of those resident at once; 0 = one block per chunk. _FAST: the specialised
   read + write instances (fp32 unscale / scale, fp32 -> bf16 / fp16 / fp8, fp8 -> fp32, stochastic rounding);
   _NORM: the norm (always a bounded grid: its partials are read back); _ANY: the generic instance (mixed, 16-bit
   and fp8-sourced lists; code size over depth), which takes WAVES_FAST (WAVES_NORM for a norm).
   Defaults: the H200 measured 4 KiB of loads in flight per thread group to be plenty (the copy limit's kernel peaks
   at 1 in flight with every thread resident); 4 units a thread at <= 64 registers gives 64-96 KiB of loads in flight
   per SM, so blocks that start late or end early never starve the memory; the read-only norm keeps 4 (as the read
   limit's best kernel). */
#ifndef ACCEL__AMP_U_FAST
#define ACCEL__AMP_U_FAST 4
#endif
#ifndef ACCEL__AMP_U_NORM
#define ACCEL__AMP_U_NORM 4
#endif
#ifndef ACCEL__AMP_U_ANY
#define ACCEL__AMP_U_ANY 2
#endif
#ifndef ACCEL__AMP_MINB_FAST
#define ACCEL__AMP_MINB_FAST 4
#endif
#ifndef ACCEL__AMP_MINB_NORM
#define ACCEL__AMP_MINB_NORM 4
#endif
#ifndef ACCEL__AMP_MINB_ANY
#define ACCEL__AMP_MINB_ANY 2
#endif
#ifndef ACCEL__AMP_WAVES_FAST
#define ACCEL__AMP_WAVES_FAST 0
#endif
#ifndef ACCEL__AMP_WAVES_NORM
#define ACCEL__AMP_WAVES_NORM 1
#endif
/* Unscale (in place, the most used of them) takes its own U and launch bound: 2 units a thread measured 0.95-0.96 x a
   copy on the GPT-2 list (H200, three runs) against 0.92-0.93 with 4. */
#ifndef ACCEL__AMP_U_UNSCALE
#define ACCEL__AMP_U_UNSCALE 2
#endif
#ifndef ACCEL__AMP_MINB_UNSCALE
#define ACCEL__AMP_MINB_UNSCALE ACCEL__AMP_MINB_FAST
#endif
/* ... except for a launch of large buffers (ACCEL__AMP_BIG_UNITS 16-byte units a buffer on average, and more): one
   unit a thread and 8 blocks an SM reached 0.953 x a copy on one 1 GiB buffer against 0.935-0.942 with the list's
   shape, and 0.886 on the list (H200, stop 37): the shape is chosen per launch from its buffers' mean size. */
#ifndef ACCEL__AMP_U_UNSCALE_BIG
#define ACCEL__AMP_U_UNSCALE_BIG 1
#endif
#ifndef ACCEL__AMP_MINB_UNSCALE_BIG
#define ACCEL__AMP_MINB_UNSCALE_BIG 8
#endif
#ifndef ACCEL__AMP_BIG_UNITS
#define ACCEL__AMP_BIG_UNITS (1LL << 22)
#endif
/* Cache qualifiers of the 16-byte unit accesses on the device (bench/amp/sweep_gpu.sh measures them): 0 = none, 1 =
   streaming loads and stores (evict first: __ldcs / __stcs), 2 = loads that ask L2 for the whole 256-byte block. */
#ifndef ACCEL__AMP_CACHE
#define ACCEL__AMP_CACHE 0
#endif
#if ACCEL__AMP_CACHE < 0 || ACCEL__AMP_CACHE > 2
#error "ACCEL__AMP_CACHE must be 0, 1 or 2"
#endif
/* The fp8 cast with amax: a bounded grid, whose blocks each fold the amax of many chunks before their one atomicMax
   per slot (a block per chunk: 0.88x of a copy on an H200, a grid of the resident blocks: 0.95-0.98x). */
#ifndef ACCEL__AMP_WAVES_FP8Q
#define ACCEL__AMP_WAVES_FP8Q 1
#endif
#define ACCEL__AMP_U_OK(u) ((u) == 1 || (u) == 2 || (u) == 4 || (u) == 8)
#if !ACCEL__AMP_U_OK(ACCEL__AMP_U_FAST) || !ACCEL__AMP_U_OK(ACCEL__AMP_U_NORM) ||                                 \
    !ACCEL__AMP_U_OK(ACCEL__AMP_U_ANY) || !ACCEL__AMP_U_OK(ACCEL__AMP_U_UNSCALE) ||                                 \
    !ACCEL__AMP_U_OK(ACCEL__AMP_U_UNSCALE_BIG)
#error "ACCEL__AMP_U_FAST, _NORM, _ANY, _UNSCALE and _UNSCALE_BIG must be 1, 2, 4 or 8"
#endif
#if ACCEL__AMP_MINB_UNSCALE < 1 || ACCEL__AMP_MINB_UNSCALE > 8 || ACCEL__AMP_MINB_UNSCALE_BIG < 1 ||               \
    ACCEL__AMP_MINB_UNSCALE_BIG > 8
#error "ACCEL__AMP_MINB_UNSCALE and ACCEL__AMP_MINB_UNSCALE_BIG must be in [1, 8]"
#endif
#if ACCEL__AMP_MINB_FAST < 1 || ACCEL__AMP_MINB_FAST > 8 || ACCEL__AMP_MINB_NORM < 1 || ACCEL__AMP_MINB_NORM > 8 || \
    ACCEL__AMP_MINB_ANY < 1 || ACCEL__AMP_MINB_ANY > 8
#error "ACCEL__AMP_MINB_FAST, ACCEL__AMP_MINB_NORM and ACCEL__AMP_MINB_ANY must be in [1, 8]"
#endif
#if ACCEL__AMP_WAVES_FAST < 0 || ACCEL__AMP_WAVES_FAST > 64 || ACCEL__AMP_WAVES_NORM < 1 ||                          \
    ACCEL__AMP_WAVES_NORM > 64 || ACCEL__AMP_WAVES_FP8Q < 0 || ACCEL__AMP_WAVES_FP8Q > 64
#error "ACCEL__AMP_WAVES_FAST and ACCEL__AMP_WAVES_FP8Q must be in [0, 64] and ACCEL__AMP_WAVES_NORM in [1, 64]"
#endif
/* stochastic rounding's Philox rounds need about 40 registers: at 32 (MINB 8) they spill */
#define ACCEL__AMP_MINB_SR (ACCEL__AMP_MINB_FAST < 6 ? ACCEL__AMP_MINB_FAST : 6)
#define ACCEL__AMP_U 8          /* the most units a thread takes (the register array's size) */
#if defined(__CUDACC__) && defined(CUDART_VERSION) && CUDART_VERSION < 12010
#define ACCEL__AMP_CAP 64       /* before CUDA 12.1 kernel parameters were limited to 4 KiB */
#else
#define ACCEL__AMP_CAP 160      /* 9 KiB of kernel parameters (CUDA >= 12.1 takes 32 KiB on Volta and later) */
#endif

typedef struct accel__amp_v16 { uint32_t w[4]; } accel__amp_v16; /* 16 bytes of one stream, as loaded */

typedef struct accel__amp_mt {
    void *a;                 /* the buffer (in place) or the source */
    void *b;                 /* the destination (conversions, fp8) */
    long long n;             /* elements */
    long long nu;            /* units (accel__amp_plan) */
    float scale;             /* fp8 quantize: the slot's scale; dequantize: its scale_inv */
    int slot;                /* fp8 quantize: where the amax goes */
    unsigned char ta, tb;    /* accel_dtype of a and b (in place: tb = ta) */
    unsigned char head;      /* elements before the first body unit (< vw) */
    unsigned char vwl;       /* log2 of the elements per unit (2, 3 or 4); | 0x80: body units are aligned vectors */
} accel__amp_mt;

/* A list's result: unscale's flag (read back), or the norm folded on the host from one double per block (its
   partial sum, or its max |x| as fp32 bits for p = inf). An fp32 norm sum that left its range makes its block's
   double, and so the total, Inf or NaN. */
typedef struct accel__amp_part {
    double sum;              /* norm: the total of the partial sums */
    uint32_t bits;           /* norm inf: max |x| as fp32 bits */
    uint32_t flag;           /* unscale: found a non-finite value */
} accel__amp_part;

/* A launch's scalar arguments. */
typedef struct accel__amp_kp {
    int mode;                /* norm: ACCEL__AMP_NORM_*; fp8 quantize: satfinite */
    float f0, f1;            /* inv_scale | coef | clamp lo, hi */
    double p;                /* norm type (float64 mode) */
    unsigned long long seed, step, index_offset; /* stochastic rounding */
    unsigned int *amax;      /* fp8 quantize: per-slot amax as fp32 bits, raised with atomicMax */
} accel__amp_kp;

/* A launch: the kernel's one parameter. */
typedef struct accel__amp_args {
    accel__amp_kp k;
    long long chunks;        /* chunks of this launch */
    int nt;                  /* buffers (<= ACCEL__AMP_CAP) */
    double *part;            /* norm: one record per block */
    unsigned int *flag;      /* unscale: set to 1 by a block that saw Inf or NaN (cleared before the launch) */
    long long cb[ACCEL__AMP_CAP + 1]; /* first chunk of each buffer; cb[nt] = chunks */
    accel__amp_mt t[ACCEL__AMP_CAP];
} accel__amp_args;

/* One thread's running state. */
typedef struct accel__amp_acc {
    double sum;              /* norm: float64 fold of the thread's fp32 chunks (float64 mode: the sum itself) */
    float hi, lo;            /* norm P2 / P1: this chunk's compensated fp32 sum, hi + lo */
    uint32_t bits;           /* unscale: max exponent field; norm inf / fp8 quantize: max |x| as bits */
    int slot;                /* fp8 quantize: the slot `bits` belongs to (-1: none yet) */
} accel__amp_acc;

#ifdef __CUDACC__
#define ACCEL__AMP_FI static __forceinline__ ACCEL_HD
#else
#define ACCEL__AMP_FI static ACCEL_INLINE ACCEL_HD
#endif
#ifdef __CUDA_ARCH__ /* the device pass only (host compilers warn about the pragma) */
#define ACCEL__AMP_UNROLL _Pragma("unroll")
#define ACCEL__AMP_NO_UNROLL _Pragma("unroll 1")
#else
#define ACCEL__AMP_UNROLL
#define ACCEL__AMP_NO_UNROLL
#endif
/* IEEE operations the device compiler must not fuse into FMAs (the compensated sums rely on each rounding) */
#ifdef __CUDA_ARCH__
#define ACCEL__AMP_ADD(x, y) __fadd_rn((x), (y))
#define ACCEL__AMP_SUB(x, y) __fsub_rn((x), (y))
#define ACCEL__AMP_MUL(x, y) __fmul_rn((x), (y))
#else
#define ACCEL__AMP_ADD(x, y) ((x) + (y))
#define ACCEL__AMP_SUB(x, y) ((x) - (y))
#define ACCEL__AMP_MUL(x, y) ((x) * (y))
#endif

ACCEL__AMP_FI int accel__amp_esz(int dt) { return dt == ACCEL_F32 ? 4 : (dt == ACCEL_F16 || dt == ACCEL_BF16) ? 2 : 1; }

/* The buffer holding chunk c: the last t with cb[t] <= c (the launch's buffers all have chunks). */
ACCEL__AMP_FI int accel__amp_find(const accel__amp_args *A, long long c) {
    int lo = 0, hi = A->nt - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (A->cb[mid] <= c) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* Unit q of a buffer: its first element and element count (body units: 1 << vwl elements). */
ACCEL__AMP_FI long long accel__amp_nv(const accel__amp_mt *d, int vwl) { return (d->n - d->head) >> vwl; }
ACCEL__AMP_FI void accel__amp_unit(const accel__amp_mt *d, int vwl, long long q, long long *e, int *c) {
    const long long nv = accel__amp_nv(d, vwl);
    if (q < nv) { *e = d->head + (q << vwl); *c = 1 << vwl; }
    else if (q == nv && d->head) { *e = 0; *c = d->head; }
    else { *e = d->head + (nv << vwl); *c = (int)(d->n - *e); }
}

/* Host emulation only: every byte range the thread code reads or writes goes through ACCEL__AMP_ACCESS_HOOK when it
   is defined (test_amp_grid checks that each lies inside a buffer of the list: a read past the end would fault on the
   device even where the result is right). */
#ifdef ACCEL__AMP_ACCESS_HOOK
#define ACCEL__AMP_ACCESS(p, nb) ACCEL__AMP_ACCESS_HOOK((const void *)(p), (size_t)(nb))
#else
#define ACCEL__AMP_ACCESS(p, nb) ((void)0)
#endif
/* One unit of nb bytes (16, 8 or 4) as one vector access; p is nb-aligned. */
ACCEL__AMP_FI void accel__amp_ldv(const unsigned char *p, int nb, accel__amp_v16 *v) {
#ifdef __CUDA_ARCH__
    if (nb == 16) {
#if ACCEL__AMP_CACHE == 1
        uint4 x = __ldcs((const uint4 *)p);
#elif ACCEL__AMP_CACHE == 2
        uint4 x;
        asm volatile("ld.global.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(x.x), "=r"(x.y), "=r"(x.z), "=r"(x.w) : "l"(__cvta_generic_to_global(p)));
#else
        uint4 x = *(const uint4 *)p;
#endif
        v->w[0] = x.x; v->w[1] = x.y; v->w[2] = x.z; v->w[3] = x.w;
    }
    else if (nb == 8) { uint2 x = *(const uint2 *)p; v->w[0] = x.x; v->w[1] = x.y; v->w[2] = v->w[3] = 0; }
    else { v->w[0] = *(const uint32_t *)p; v->w[1] = v->w[2] = v->w[3] = 0; }
#else
    ACCEL__AMP_ACCESS(p, nb);
    v->w[0] = v->w[1] = v->w[2] = v->w[3] = 0;
    memcpy(v->w, p, (size_t)nb);
#endif
}
ACCEL__AMP_FI void accel__amp_stv(unsigned char *p, int nb, const accel__amp_v16 *v) {
#ifdef __CUDA_ARCH__
#if ACCEL__AMP_CACHE == 1
    if (nb == 16) __stcs((uint4 *)p, make_uint4(v->w[0], v->w[1], v->w[2], v->w[3]));
#else
    if (nb == 16) *(uint4 *)p = make_uint4(v->w[0], v->w[1], v->w[2], v->w[3]);
#endif
    else if (nb == 8) *(uint2 *)p = make_uint2(v->w[0], v->w[1]);
    else *(uint32_t *)p = v->w[0];
#else
    ACCEL__AMP_ACCESS(p, nb);
    memcpy(p, v->w, (size_t)nb);
#endif
}
/* c elements of size es, one access each, into lanes [0, c) (the others zero). */
ACCEL__AMP_FI void accel__amp_lds(const unsigned char *p, int es, int c, accel__amp_v16 *v) {
    int i;
    v->w[0] = v->w[1] = v->w[2] = v->w[3] = 0;
    ACCEL__AMP_UNROLL /* constant lane numbers keep v in registers */
    for (i = 0; i < 16; ++i) {
        uint32_t x;
        if (i >= c || i >= 16 / es) continue;
#ifdef __CUDA_ARCH__
        x = es == 4 ? ((const uint32_t *)p)[i] : es == 2 ? ((const uint16_t *)p)[i] : p[i];
#else
        {
            uint16_t x16;
            ACCEL__AMP_ACCESS(p + es * i, es);
            x = p[i];
            if (es == 4) memcpy(&x, p + 4 * i, 4);
            else if (es == 2) { memcpy(&x16, p + 2 * i, 2); x = x16; }
        }
#endif
        if (es == 4) v->w[i & 3] = x;
        else if (es == 2) v->w[(i >> 1) & 3] |= x << (16 * (i & 1));
        else v->w[(i >> 2) & 3] |= x << (8 * (i & 3));
    }
}
ACCEL__AMP_FI void accel__amp_sts(unsigned char *p, int es, int c, const accel__amp_v16 *v) {
    int i;
    ACCEL__AMP_UNROLL
    for (i = 0; i < 16; ++i) {
        uint32_t x;
        if (i >= c || i >= 16 / es) continue;
        x = es == 4 ? v->w[i & 3] : es == 2 ? (v->w[(i >> 1) & 3] >> (16 * (i & 1))) & 0xffffu
                                            : (v->w[(i >> 2) & 3] >> (8 * (i & 3))) & 0xffu;
#ifdef __CUDA_ARCH__
        if (es == 4) ((uint32_t *)p)[i] = x;
        else if (es == 2) ((uint16_t *)p)[i] = (uint16_t)x;
        else p[i] = (unsigned char)x;
#else
        {
            uint16_t x16 = (uint16_t)x;
            ACCEL__AMP_ACCESS(p + es * i, es);
            if (es == 4) memcpy(p + 4 * i, &x, 4);
            else if (es == 2) memcpy(p + 2 * i, &x16, 2);
            else p[i] = (unsigned char)x;
        }
#endif
    }
}

/* A pair of floats as packed 16-bit codes (lo in the low half): the core's codec (round to nearest even, NaN →
   0x7FFF). sm_80+: one cvt.rn.{bf16,f16}x2.f32, the same bits (the GPU tests compare with the CPU codec). */
ACCEL__AMP_FI uint32_t accel__amp_pair(int dt, float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    uint32_t r;
    if (dt == ACCEL_BF16) asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    else asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
#else
    if (dt == ACCEL_BF16) return (uint32_t)accel_f32_to_bf16(lo) | ((uint32_t)accel_f32_to_bf16(hi) << 16);
    return (uint32_t)accel_f32_to_f16(lo) | ((uint32_t)accel_f32_to_f16(hi) << 16);
#endif
}
/* Lanes f[0, lanes) encoded into o (dtype dt; fp8 with the satfinite rule sat). */
ACCEL__AMP_FI void accel__amp_put(accel__amp_v16 *o, int dt, const float *f, int lanes, int sat) {
    int j;
    o->w[0] = o->w[1] = o->w[2] = o->w[3] = 0;
    if (dt == ACCEL_F32) {
        ACCEL__AMP_UNROLL
        for (j = 0; j < 4; ++j) if (j < lanes) o->w[j] = accel_f32_bits(f[j]);
    } else if (dt == ACCEL_BF16 || dt == ACCEL_F16) {
        ACCEL__AMP_UNROLL
        for (j = 0; j < 4; ++j) if (2 * j < lanes) o->w[j] = accel__amp_pair(dt, f[2 * j], f[2 * j + 1]);
    } else {
        const int e5 = dt == ACCEL_F8_E5M2;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
        /* sm_89+: cvt.rn.satfinite.{e4m3,e5m2}x2.f32, the bits of accel_amp_fp8_encode_bits(.., 1): cuda_fp8.h uses
           the instruction and tests/gpu/amp/test_fp8_gpu.cu sweeps all 2^32 inputs through both */
        if (sat) {
            ACCEL__AMP_UNROLL
            for (j = 0; j < 8; ++j)
                if (2 * j < lanes) {
                    unsigned short r;
                    if (e5) asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(r) : "f"(f[2 * j + 1]), "f"(f[2 * j]));
                    else asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(f[2 * j + 1]), "f"(f[2 * j]));
                    o->w[j >> 1] |= (uint32_t)r << (16 * (j & 1));
                }
            return;
        }
#endif
        ACCEL__AMP_UNROLL
        for (j = 0; j < 16; ++j)
            if (j < lanes) o->w[j >> 2] |= accel_amp_fp8_encode_bits(accel_f32_bits(f[j]), e5, sat) << (8 * (j & 3));
    }
}

/* |x| as fp32 bits, NaN left out (TE's fmaxf does not see NaN); non-negative floats order like their bits. */
ACCEL__AMP_FI uint32_t accel__amp_absbits(float x) {
    uint32_t a = accel_f32_bits(x) & 0x7fffffffu;
    return a > 0x7f800000u ? 0u : a;
}
/* Adds v (exactly) to the compensated pair (hi, lo): Knuth's TwoSum, so hi + lo carries the sum to about 2^-48
   relative per chunk (the thread folds the pair into float64 after every chunk). */
ACCEL__AMP_FI void accel__amp_two_sum(float *hi, float *lo, float v) {
    float t = ACCEL__AMP_ADD(*hi, v), z = ACCEL__AMP_SUB(t, *hi);
    float err = ACCEL__AMP_ADD(ACCEL__AMP_SUB(*hi, ACCEL__AMP_SUB(t, z)), ACCEL__AMP_SUB(v, z));
    *hi = t;
    *lo = ACCEL__AMP_ADD(*lo, err);
}
/* One element into a norm accumulator. P2: x*x is split exactly into sq + e (an FMA), both summed. */
ACCEL__AMP_FI void accel__amp_norm1(accel__amp_acc *s, int mode, double p, float x) {
    if (mode == ACCEL__AMP_NORM_P2) {
        float sq = ACCEL__AMP_MUL(x, x), e = fmaf(x, x, -sq);
        accel__amp_two_sum(&s->hi, &s->lo, sq);
        s->lo = ACCEL__AMP_ADD(s->lo, e);
    } else if (mode == ACCEL__AMP_NORM_P1) {
        accel__amp_two_sum(&s->hi, &s->lo, fabsf(x));
    } else if (mode == ACCEL__AMP_NORM_INF) {
        uint32_t a = accel_f32_bits(x) & 0x7fffffffu; /* NaN's bits lie above Inf's: NaN wins, as on the CPU */
        s->bits = a > s->bits ? a : s->bits;
    } else {
        s->sum += accel__amp_pow_term(x, p);
    }
}
/* The fp32 pair into the thread's float64 sum (after every chunk). A pair that is not finite (Inf/NaN among the
   values, an fp32 overflow) makes the sum, and the total, Inf or NaN: the host then reruns the norm in float64
   (where the CPU's rule decides between a finite total, Inf and NaN). */
ACCEL__AMP_FI void accel__amp_norm_fold(accel__amp_acc *s) {
    s->sum += (double)s->hi + (double)s->lo;
    s->hi = 0.0f;
    s->lo = 0.0f;
}
/* fp8 quantize: the thread's amax goes to its slot (device: an atomic only when it can raise the slot, which only
   grows during a launch; host emulation: a plain max). */
ACCEL__AMP_FI void accel__amp_amax_flush(unsigned int *amax, int slot, uint32_t m) {
    if (slot < 0 || !m) return;
#ifdef __CUDA_ARCH__
    if (m > __ldcg(amax + slot)) atomicMax(amax + slot, m);
#else
    if (m > amax[slot]) amax[slot] = m;
#endif
}

/* The kinds that write back into their buffer. */
ACCEL__AMP_FI int accel__amp_in_place(int kind) {
    return kind == ACCEL__AMP_K_UNSCALE || kind == ACCEL__AMP_K_SCALE || kind == ACCEL__AMP_K_CLAMP ||
           kind == ACCEL__AMP_K_NORM;
}
/* The dtypes a kind reads and writes; the fp8 side of a quantize / dequantize is either fp8 format, which the
   specialised kernels leave open: written so that the compiler still knows its size and decoder. */
ACCEL__AMP_FI int accel__amp_dt_in(int kind, int ta) {
    return kind == ACCEL__AMP_K_FP8D ? (ta == ACCEL_F8_E5M2 ? ACCEL_F8_E5M2 : ACCEL_F8_E4M3) : ta;
}
ACCEL__AMP_FI int accel__amp_dt_out(int kind, int ta, int tb) {
    return accel__amp_in_place(kind)   ? ta
           : kind == ACCEL__AMP_K_FP8Q ? (tb == ACCEL_F8_E5M2 ? ACCEL_F8_E5M2 : ACCEL_F8_E4M3)
                                       : tb;
}

/* The unit's lanes as floats: f[i] for i < 16 / size (dtype dt; the others untouched). One switch per unit. */
ACCEL__AMP_FI void accel__amp_decode(const accel__amp_v16 *v, int dt, float *f) {
    int i;
    if (dt == ACCEL_F32) {
        ACCEL__AMP_UNROLL
        for (i = 0; i < 4; ++i) f[i] = accel_bits_f32(v->w[i]);
    } else if (dt == ACCEL_BF16) {
        ACCEL__AMP_UNROLL
        for (i = 0; i < 8; ++i) f[i] = accel_bf16_to_f32((uint16_t)(v->w[i >> 1] >> (16 * (i & 1))));
    } else if (dt == ACCEL_F16) {
        ACCEL__AMP_UNROLL
        for (i = 0; i < 8; ++i) f[i] = accel_f16_to_f32((uint16_t)(v->w[i >> 1] >> (16 * (i & 1))));
    } else {
        const int e5 = dt == ACCEL_F8_E5M2;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
        /* sm_89+: cvt.rn.f16x2.{e4m3,e5m2}x2 (exact: both formats fit fp16), then fp16 -> fp32 (exact); NaN made the
           CPU's 0x7FFFFFFF whatever the conversions keep of it */
        ACCEL__AMP_UNROLL
        for (i = 0; i < 8; ++i) {
            unsigned short p2 = (unsigned short)(v->w[i >> 1] >> (16 * (i & 1))), lo, hi;
            uint32_t h2;
            float a, b;
            if (e5) asm("cvt.rn.f16x2.e5m2x2 %0, %1;" : "=r"(h2) : "h"(p2));
            else asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(p2));
            lo = (unsigned short)h2;
            hi = (unsigned short)(h2 >> 16);
            asm("cvt.f32.f16 %0, %1;" : "=f"(a) : "h"(lo));
            asm("cvt.f32.f16 %0, %1;" : "=f"(b) : "h"(hi));
            f[2 * i] = a == a ? a : accel_bits_f32(0x7fffffffu);
            f[2 * i + 1] = b == b ? b : accel_bits_f32(0x7fffffffu);
        }
#else
        ACCEL__AMP_UNROLL
        for (i = 0; i < 16; ++i) f[i] = accel_amp_fp8_to_f32((uint8_t)(v->w[i >> 2] >> (8 * (i & 3))), e5);
#endif
    }
}
/* The exponent field: all ones (0x7F800000, the largest value it takes) exactly for Inf and NaN, so the max of it
   over a buffer says whether accel_amp_nonfinite was true for any element. */
ACCEL__AMP_FI uint32_t accel__amp_expo(float x) { return accel_f32_bits(x) & 0x7f800000u; }

/* The element work on unit v of buffer d: c valid lanes from element e, dtypes ta -> tb, 1 << vwl lanes, vec: an
   aligned body unit. Results into s; returns 1 when o is to be stored (in place: into a as ta, else into b as tb).
   Every branch on kind / dtype / mode is a constant in the specialised kernels, and once per unit in the generic
   one. */
ACCEL__AMP_FI int accel__amp_work(const accel__amp_args *A, const accel__amp_mt *d, int kind, int ta, int tb,
                                  int vwl, int mode, long long e, int c, int vec, const accel__amp_v16 *v,
                                  accel__amp_v16 *o, accel__amp_acc *s) {
    float f[16];
    int i;
    const int lanes = 1 << vwl, n = c < lanes ? c : lanes;
    if (kind == ACCEL__AMP_K_SR) { /* F32 -> BF16: one Philox block per aligned unit of 4, the CPU's stream */
        unsigned long long idx = A->k.index_offset + (unsigned long long)e;
        uint32_t r[4], q[4];
        if (vec) accel_rng_draw4(A->k.seed, A->k.step, idx >> 2, r);
        ACCEL__AMP_UNROLL
        for (i = 0; i < 4; ++i)
            q[i] = accel_amp_f32_to_bf16_sr(accel_bits_f32(v->w[i]),
                                            vec ? r[i] : accel_amp_sr_bits(A->k.seed, A->k.step, idx + (unsigned)i));
        o->w[0] = q[0] | (q[1] << 16);
        o->w[1] = q[2] | (q[3] << 16);
        o->w[2] = o->w[3] = 0;
        return 1;
    }
    for (i = 0; i < 16; ++i) f[i] = 0.0f;
    accel__amp_decode(v, accel__amp_dt_in(kind, ta), f);
    if (kind == ACCEL__AMP_K_NORM) {
        if (mode == ACCEL__AMP_NORM_P2) {
            ACCEL__AMP_UNROLL
            for (i = 0; i < 16; ++i) if (i < n) accel__amp_norm1(s, ACCEL__AMP_NORM_P2, 0.0, f[i]);
        } else if (mode == ACCEL__AMP_NORM_P1) {
            ACCEL__AMP_UNROLL
            for (i = 0; i < 16; ++i) if (i < n) accel__amp_norm1(s, ACCEL__AMP_NORM_P1, 0.0, f[i]);
        } else if (mode == ACCEL__AMP_NORM_INF) {
            ACCEL__AMP_UNROLL
            for (i = 0; i < 16; ++i) if (i < n) accel__amp_norm1(s, ACCEL__AMP_NORM_INF, 0.0, f[i]);
        } else { /* (unrolled too: an indexed f would live in local memory for every mode) */
            ACCEL__AMP_UNROLL
            for (i = 0; i < 16; ++i) if (i < n) accel__amp_norm1(s, ACCEL__AMP_NORM_F64, A->k.p, f[i]);
        }
        return 0;
    }
    if (kind == ACCEL__AMP_K_FP8Q) { /* fused cast + amax */
        if (s->slot != d->slot) {
            accel__amp_amax_flush(A->k.amax, s->slot, s->bits);
            s->slot = d->slot;
            s->bits = 0;
        }
        ACCEL__AMP_UNROLL
        for (i = 0; i < 16; ++i) {
            uint32_t a = i < n ? accel__amp_absbits(f[i]) : 0u;
            s->bits = a > s->bits ? a : s->bits;
            f[i] = f[i] * d->scale;
        }
        accel__amp_put(o, accel__amp_dt_out(kind, ta, tb), f, lanes, A->k.mode);
        return 1;
    }
    if (kind == ACCEL__AMP_K_UNSCALE) {
        const float inv = A->k.f0;
        ACCEL__AMP_UNROLL
        for (i = 0; i < 16; ++i) {
            uint32_t x = i < n ? accel__amp_expo(f[i]) : 0u;
            s->bits = x > s->bits ? x : s->bits;
            f[i] = accel_amp_unscale1(f[i], inv);
        }
        if (ta == ACCEL_F32 && inv == 1.0f) return 0; /* fp32 by 1 writes nothing, as the CPU loop */
    } else if (kind == ACCEL__AMP_K_SCALE) {
        ACCEL__AMP_UNROLL
        for (i = 0; i < 16; ++i) f[i] = f[i] * A->k.f0;
    } else if (kind == ACCEL__AMP_K_CLAMP) {
        ACCEL__AMP_UNROLL
        for (i = 0; i < 16; ++i) f[i] = accel_amp_clamp1(f[i], A->k.f0, A->k.f1);
    } else if (kind == ACCEL__AMP_K_FP8D) {
        ACCEL__AMP_UNROLL
        for (i = 0; i < 16; ++i) f[i] = f[i] * d->scale;
    } /* convert: the values as they are; fp8 destinations saturate (accel_amp_convert's rule) */
    accel__amp_put(o, accel__amp_dt_out(kind, ta, tb), f, lanes, 1);
    return 1;
}

/* One aligned body unit of buffer d (unit q, element e) from v: the work, then the store. */
ACCEL__AMP_FI void accel__amp_body(const accel__amp_args *A, const accel__amp_mt *d, int kind, int ta, int tb, int vwl,
                                   int mode, long long e, const accel__amp_v16 *v, unsigned char *out,
                                   accel__amp_acc *s) {
    accel__amp_v16 o;
    const int es = accel__amp_esz(accel__amp_dt_out(kind, ta, tb));
    if (accel__amp_work(A, d, kind, ta, tb, vwl, mode, e, 1 << vwl, 1, v, &o, s)) accel__amp_stv(out, es << vwl, &o);
}

/* Thread tid's part of chunk j of buffer d, with B threads of U units each: its units q = j*B*U + tid + k*B (k < U).
   A chunk inside the aligned body (every chunk but a buffer's last) issues its U vector loads before any work, with
   no bound check; a buffer's last chunk loads its body units under a bound, then does its element-wise units (head,
   tail, bodies that cannot be aligned) one at a time. kind, ta, tb, vwl, mode < 0: the buffer's own / the launch's
   value. The norm's compensated pair is folded into float64 after every chunk. */
ACCEL__AMP_FI void accel__amp_chunk(const accel__amp_args *A, const accel__amp_mt *d, int kind, int ta_c, int tb_c,
                                    int vwl_c, int mode_c, int U, long long j, int tid, int B, accel__amp_acc *s) {
    const int ta = ta_c >= 0 ? ta_c : d->ta, tb = tb_c >= 0 ? tb_c : d->tb;
    const int vwl = vwl_c >= 0 ? vwl_c : (d->vwl & 0x7f), mode = mode_c >= 0 ? mode_c : A->k.mode;
    const int ip = accel__amp_in_place(kind), out = ip ? ta : tb;
    const int ea = accel__amp_esz(accel__amp_dt_in(kind, ta)), eo = accel__amp_esz(accel__amp_dt_out(kind, ta, tb));
    const long long cu = (long long)B * U, q0 = j * cu + tid, nv = (d->vwl & 0x80) ? accel__amp_nv(d, vwl) : 0;
    const long long e0 = (long long)d->head + (q0 << vwl), de = (long long)B << vwl;
    const unsigned char *pa = (const unsigned char *)d->a;
    unsigned char *po = (unsigned char *)(ip ? d->a : d->b);
    accel__amp_v16 v[ACCEL__AMP_U];
    int k;
    if (kind == ACCEL__AMP_K_FP8Q && s->slot != d->slot) { /* the whole block changes slot together */
        accel__amp_amax_flush(A->k.amax, s->slot, s->bits);
        s->slot = d->slot;
        s->bits = 0;
    }
    if ((j + 1) * cu <= nv) {
        ACCEL__AMP_UNROLL
        for (k = 0; k < ACCEL__AMP_U; ++k)
            if (k < U) accel__amp_ldv(pa + (e0 + k * de) * ea, ea << vwl, &v[k]);
        ACCEL__AMP_UNROLL
        for (k = 0; k < ACCEL__AMP_U; ++k)
            if (k < U) accel__amp_body(A, d, kind, ta, tb, vwl, mode, e0 + k * de, &v[k], po + (e0 + k * de) * eo, s);
    } else {
        ACCEL__AMP_UNROLL
        for (k = 0; k < ACCEL__AMP_U; ++k)
            if (k < U && q0 + k * B < nv) accel__amp_ldv(pa + (e0 + k * de) * ea, ea << vwl, &v[k]);
        ACCEL__AMP_UNROLL
        for (k = 0; k < ACCEL__AMP_U; ++k)
            if (k < U && q0 + k * B < nv)
                accel__amp_body(A, d, kind, ta, tb, vwl, mode, e0 + k * de, &v[k], po + (e0 + k * de) * eo, s);
        ACCEL__AMP_NO_UNROLL /* a few per buffer: one copy of the element-wise code */
        for (k = 0; k < U; ++k) {
            const long long q = q0 + (long long)k * B;
            accel__amp_v16 w, o;
            long long e;
            int c;
            if (q < nv || q >= d->nu) continue;
            accel__amp_unit(d, vwl, q, &e, &c);
            accel__amp_lds(pa + e * accel__amp_esz(ta), accel__amp_esz(ta), c, &w);
            if (accel__amp_work(A, d, kind, ta, tb, vwl, mode, e, c, 0, &w, &o, s))
                accel__amp_sts(po + e * accel__amp_esz(out), accel__amp_esz(out), c, &o);
        }
    }
    if (kind == ACCEL__AMP_K_NORM && (mode == ACCEL__AMP_NORM_P2 || mode == ACCEL__AMP_NORM_P1))
        accel__amp_norm_fold(s);
}

/* Everything thread tid of block b does in a launch of G blocks of B threads: chunks b, b + G, b + 2G, ... (one
   chunk when the grid has a block per chunk), the buffer found once and then walked forward. */
ACCEL__AMP_FI void accel__amp_thread(const accel__amp_args *A, int kind, int ta, int tb, int vwl, int mode, int U,
                                     long long b, long long G, int tid, int B, accel__amp_acc *s) {
    long long c = b;
    int t;
    if (c >= A->chunks) return;
    t = accel__amp_find(A, c);
    for (; c < A->chunks; c += G) {
        while (c >= A->cb[t + 1]) ++t;
        accel__amp_chunk(A, &A->t[t], kind, ta, tb, vwl, mode, U, c - A->cb[t], tid, B, s);
    }
}

ACCEL__AMP_FI void accel__amp_acc_init(accel__amp_acc *s) {
    s->sum = 0.0;
    s->hi = s->lo = 0.0f;
    s->bits = 0u;
    s->slot = -1;
}

/* ---- host side of a launch (also what the CPU grid test builds) */
/* A kernel instance: which template arguments run a launch. The specialised ones (every buffer fp32, the hot
   paths) take their dtypes as constants and U = ACCEL__AMP_U_FAST / _NORM; the generic one reads each buffer's
   dtypes and takes U = ACCEL__AMP_U_ANY. waves: ACCEL__AMP_WAVES_NORM for a norm, ACCEL__AMP_WAVES_FP8Q for the fp8
   cast with amax, else ACCEL__AMP_WAVES_FAST. */
typedef struct accel__amp_cfg { int id, ta, tb, vwl, mode, u, waves; } accel__amp_cfg;
enum { ACCEL__AMP_I_GENERIC = 0, ACCEL__AMP_I_F32, ACCEL__AMP_I_F32_BF16, ACCEL__AMP_I_F32_F16, ACCEL__AMP_I_F32_F8,
       ACCEL__AMP_I_F8_F32 };
ACCEL__PRIVATE void accel__amp_pick(int kind, int mode, int ta, int tb, accel__amp_cfg *c) {
    /* ta / tb: the dtype every buffer of the launch has, or -1 */
    c->id = ACCEL__AMP_I_GENERIC; c->ta = c->tb = c->vwl = c->mode = -1; c->u = ACCEL__AMP_U_ANY;
    c->waves = kind == ACCEL__AMP_K_NORM   ? ACCEL__AMP_WAVES_NORM
               : kind == ACCEL__AMP_K_FP8Q ? ACCEL__AMP_WAVES_FP8Q
                                           : ACCEL__AMP_WAVES_FAST;
    switch (kind) {
    case ACCEL__AMP_K_UNSCALE: case ACCEL__AMP_K_SCALE:
        if (ta == ACCEL_F32) c->id = ACCEL__AMP_I_F32;
        break;
    case ACCEL__AMP_K_NORM:
        if (ta == ACCEL_F32 && mode == ACCEL__AMP_NORM_P2) { c->id = ACCEL__AMP_I_F32; c->mode = mode; }
        break;
    case ACCEL__AMP_K_CONVERT:
        if (ta == ACCEL_F32 && tb == ACCEL_BF16) c->id = ACCEL__AMP_I_F32_BF16;
        if (ta == ACCEL_F32 && tb == ACCEL_F16) c->id = ACCEL__AMP_I_F32_F16;
        break;
    case ACCEL__AMP_K_SR: /* only F32 -> BF16 exists */
        c->id = ACCEL__AMP_I_F32_BF16;
        break;
    case ACCEL__AMP_K_FP8Q:
        if (ta == ACCEL_F32) c->id = ACCEL__AMP_I_F32_F8;
        break;
    case ACCEL__AMP_K_FP8D:
        if (tb == ACCEL_F32) c->id = ACCEL__AMP_I_F8_F32;
        break;
    default: break;
    }
    switch (c->id) {
    case ACCEL__AMP_I_F32: c->ta = c->tb = ACCEL_F32; c->vwl = 2; break;
    case ACCEL__AMP_I_F32_BF16: c->ta = ACCEL_F32; c->tb = ACCEL_BF16; c->vwl = 2; break;
    case ACCEL__AMP_I_F32_F16: c->ta = ACCEL_F32; c->tb = ACCEL_F16; c->vwl = 2; break;
    case ACCEL__AMP_I_F32_F8: c->ta = ACCEL_F32; c->vwl = 2; break;
    case ACCEL__AMP_I_F8_F32: c->tb = ACCEL_F32; c->vwl = 2; break;
    default: break;
    }
    if (c->id != ACCEL__AMP_I_GENERIC)
        c->u = kind == ACCEL__AMP_K_NORM ? ACCEL__AMP_U_NORM : kind == ACCEL__AMP_K_UNSCALE ? ACCEL__AMP_U_UNSCALE
                                                                                          : ACCEL__AMP_U_FAST;
}

/* The unscale shape for a launch of large buffers (h[0, nt), planned): U = ACCEL__AMP_U_UNSCALE_BIG when their mean
   unit count reaches ACCEL__AMP_BIG_UNITS. The launch's bits do not depend on U (the CPU grid test runs every U). */
ACCEL__PRIVATE void accel__amp_pick_big(int kind, const accel__amp_mt *h, int nt, accel__amp_cfg *c) {
    long long units = 0;
    int i;
    if (kind != ACCEL__AMP_K_UNSCALE || c->id != ACCEL__AMP_I_F32 || nt <= 0) return;
    for (i = 0; i < nt; ++i) units += h[i].nu;
    if (units / nt >= (long long)ACCEL__AMP_BIG_UNITS) c->u = ACCEL__AMP_U_UNSCALE_BIG;
}

/* Plans buffer d (a, b, n, ta, tb set) for a kind: its unit width, its head, whether its body units are aligned
   vectors, and its unit count d->nu (0 for an empty buffer), which it returns. sr: stochastic rounding (index
   phase index_offset). */
ACCEL__PRIVATE long long accel__amp_plan(accel__amp_mt *d, int in_place, int sr, unsigned long long index_offset) {
    int ea = accel__amp_esz(d->ta), eb = in_place ? ea : accel__amp_esz(d->tb), w = ea > eb ? ea : eb;
    int vwl = w == 4 ? 2 : w == 2 ? 3 : 4, vw = 1 << vwl, h, head = -1;
    uintptr_t pa = (uintptr_t)d->a, pb = (uintptr_t)d->b;
    long long nv, tail;
    for (h = 0; h < vw && head < 0; ++h) { /* (vector sizes are powers of two: masks, no divisions per call) */
        if ((pa + (uintptr_t)(h * ea)) & (uintptr_t)(vw * ea - 1)) continue;
        if (!in_place && ((pb + (uintptr_t)(h * eb)) & (uintptr_t)(vw * eb - 1))) continue;
        if (sr && ((index_offset + (unsigned long long)h) & 3u)) continue;
        head = h;
    }
    d->vwl = (unsigned char)(vwl | (head >= 0 ? 0x80 : 0));
    if (head < 0) head = 0;
    if (head > d->n) head = (int)d->n;
    d->head = (unsigned char)head;
    nv = (d->n - head) >> vwl;
    tail = d->n - head - (nv << vwl);
    d->nu = nv + (head > 0) + (tail > 0);
    return d->nu;
}

/* The dtypes every buffer of h[0, nt) shares (-1 where they differ). */
ACCEL__PRIVATE void accel__amp_common(const accel__amp_mt *h, int nt, int *ta, int *tb) {
    int i;
    *ta = nt ? h[0].ta : -1;
    *tb = nt ? h[0].tb : -1;
    for (i = 1; i < nt; ++i) {
        if (h[i].ta != *ta) *ta = -1;
        if (h[i].tb != *tb) *tb = -1;
    }
}

/* Fills launch A (its scalar fields already set) with the planned buffers h[0, nt) in chunks of cu units. */
ACCEL__PRIVATE void accel__amp_fill(accel__amp_args *A, const accel__amp_mt *h, int nt, long long cu) {
    long long c = 0;
    int i;
    for (i = 0; i < nt; ++i) {
        A->t[i] = h[i];
        A->cb[i] = c;
        c += (h[i].nu + cu - 1) / cu;
    }
    A->cb[nt] = c;
    A->chunks = c;
    A->nt = nt;
}

/* Folds n per-block norm records (norm mode) in block order into out. */
ACCEL__PRIVATE void accel__amp_fold(int mode, const double *p, int n, accel__amp_part *out) {
    int i;
    for (i = 0; i < n; ++i) {
        if (mode == ACCEL__AMP_NORM_INF) out->bits = (uint32_t)p[i] > out->bits ? (uint32_t)p[i] : out->bits;
        else out->sum += p[i];
    }
}

/* Plans the buffers h[0, count) (a, b, n, ta, tb, scale, slot filled; in place: b and tb unused) for kind: the
   empty ones are left out (h is compacted to *k entries). A buffer not aligned to its element size is refused
   before anything runs (the GPU would fault on it). */
ACCEL__PRIVATE accel_result accel__amp_prepare(accel *acc, int kind, accel__amp_mt *h, int count,
                                               const accel__amp_kp *kp, int *k, const char *what) {
    const int in_place = accel__amp_in_place(kind);
    int i;
    *k = 0;
    for (i = 0; i < count; ++i) {
        int ea = accel__amp_esz(h[i].ta), eb = accel__amp_esz(h[i].tb);
        if (h[i].n == 0) continue;
        if ((uintptr_t)h[i].a % (uintptr_t)ea || (!in_place && (uintptr_t)h[i].b % (uintptr_t)eb))
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                               "%s: buffer %d (%p -> %p) is not aligned to its element "
                               "size (%d -> %d bytes); nothing was changed",
                               what, i, h[i].a, in_place ? h[i].a : h[i].b, ea, in_place ? ea : eb);
    }
    for (i = 0; i < count; ++i) {
        if (h[i].n == 0) continue;
        h[*k] = h[i];
        if (in_place) { h[*k].b = h[*k].a; h[*k].tb = h[*k].ta; }
        accel__amp_plan(&h[*k], in_place, kind == ACCEL__AMP_K_SR, kp->index_offset);
        ++*k;
    }
    return ACCEL_OK;
}

/* The norm's second pass: an fp32 sum (P2 / P1) that left the fp32 range — not finite (Inf or NaN among the values,
   an overflow) or, for squares, a total below n * 2^-100, where squares that underflowed could show — is computed
   again with float64 terms, the CPU path's arithmetic. */
ACCEL__PRIVATE int accel__amp_norm_again(int mode, const accel__amp_part *res, double n) {
    if (mode != ACCEL__AMP_NORM_P2 && mode != ACCEL__AMP_NORM_P1) return 0;
    if (!(res->sum <= DBL_MAX)) return 1; /* Inf or NaN */
    return mode == ACCEL__AMP_NORM_P2 && !(res->sum >= n * ldexp(1.0, -100));
}

#ifdef __CUDACC__
/* the launch must fit the kernel-parameter limit (4 KiB before CUDA 12.1, 32764 bytes since) */
typedef char accel__amp_args_fit[sizeof(accel__amp_args) <= (ACCEL__AMP_CAP > 64 ? 32764 : 4096) ? 1 : -1];
/* The kernel: the thread's chunks, then the block's result. */
/* MINB: blocks of 256 threads to keep resident per SM (the register budget: 4 -> 64 registers a thread) */
#define ACCEL__AMP_MINB(m) ((m) * 256 / ACCEL_AMP_CUDA_BLOCK > 0 ? (m) * 256 / ACCEL_AMP_CUDA_BLOCK : 1)
template <int K, int ID, int TA, int TB, int VWL, int MODE, int U, int MINB>
static __global__ void __launch_bounds__(ACCEL_AMP_CUDA_BLOCK, ACCEL__AMP_MINB(MINB))
    accel__amp_kernel(const __grid_constant__ accel__amp_args A) {
    __shared__ double rsum[ACCEL_AMP_CUDA_BLOCK / 32];
    __shared__ uint32_t rbits[ACCEL_AMP_CUDA_BLOCK / 32];
    __shared__ int rslot[ACCEL_AMP_CUDA_BLOCK / 32];
    accel__amp_acc s;
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    accel__amp_acc_init(&s);
    accel__amp_thread(&A, K, TA, TB, VWL, MODE, U, blockIdx.x, gridDim.x, (int)threadIdx.x, ACCEL_AMP_CUDA_BLOCK, &s);
    if (K == ACCEL__AMP_K_UNSCALE) { /* one store per block that saw Inf / NaN (per warp, an all-Inf list would
                                         queue millions of stores on one address) */
        if (__syncthreads_or(s.bits == 0x7f800000u) && threadIdx.x == 0) *A.flag = 1u;
    } else if (K == ACCEL__AMP_K_NORM) { /* warp butterflies, then the warps in order: a fixed order */
        const int mode = MODE >= 0 ? MODE : A.k.mode;
        int o;
        unsigned w;
        for (o = 16; o > 0; o >>= 1) {
            uint32_t b = __shfl_xor_sync(0xffffffffu, s.bits, o);
            s.sum += __shfl_xor_sync(0xffffffffu, s.sum, o);
            s.bits = b > s.bits ? b : s.bits;
        }
        if (lane == 0) { rsum[warp] = s.sum; rbits[warp] = s.bits; }
        __syncthreads();
        if (threadIdx.x == 0) {
            for (w = 1; w < nw; ++w) {
                s.sum += rsum[w];
                s.bits = rbits[w] > s.bits ? rbits[w] : s.bits;
            }
            A.part[blockIdx.x] = mode == ACCEL__AMP_NORM_INF ? (double)s.bits : s.sum;
        }
    } else if (K == ACCEL__AMP_K_FP8Q) { /* one atomic per block and slot where the warps agree on the slot */
        int o, same = __all_sync(0xffffffffu, s.slot == __shfl_sync(0xffffffffu, s.slot, 0));
        unsigned w;
        if (!same) { accel__amp_amax_flush(A.k.amax, s.slot, s.bits); s.slot = -1; s.bits = 0; }
        for (o = 16; o > 0; o >>= 1) {
            uint32_t b = __shfl_xor_sync(0xffffffffu, s.bits, o);
            s.bits = b > s.bits ? b : s.bits;
        }
        if (lane == 0) { rbits[warp] = s.bits; rslot[warp] = same ? s.slot : -1; }
        __syncthreads();
        if (threadIdx.x == 0) {
            int slot = rslot[0];
            uint32_t m = rbits[0];
            for (w = 1; w < nw; ++w) {
                if (rslot[w] != slot) { accel__amp_amax_flush(A.k.amax, slot, m); slot = rslot[w]; m = 0; }
                m = rbits[w] > m ? rbits[w] : m;
            }
            accel__amp_amax_flush(A.k.amax, slot, m);
        }
    }
}

#define ACCEL__AMP_NDEV 64
/* Launches one instance over A. waves 0: a block per chunk; else waves x the blocks resident at once (the occupancy
   calculator's count for this instance, cached per device), at most gcap. *g: the blocks launched. */
template <int K, int ID, int TA, int TB, int VWL, int MODE, int U, int MINB>
static accel_result accel__amp_go(accel *acc, const accel__amp_args *A, int sms, int waves, int gcap, int *g) {
    static int occ[ACCEL__AMP_NDEV]; /* blocks per SM (a race only writes the same value twice) */
    long long want = A->chunks;
    if (want > 0x7fffffffLL) want = 0x7fffffffLL; /* the grid's limit: the blocks then take several chunks */
    if (waves > 0) {
        int dev = acc->device, per_sm = dev >= 0 && dev < ACCEL__AMP_NDEV ? occ[dev] : 0;
        long long gw;
        if (per_sm <= 0) {
            ACCEL__CUDA_CHECK(acc, cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                                       &per_sm, accel__amp_kernel<K, ID, TA, TB, VWL, MODE, U, MINB>,
                                       ACCEL_AMP_CUDA_BLOCK, 0));
            if (per_sm < 1) per_sm = 1;
            if (dev >= 0 && dev < ACCEL__AMP_NDEV) occ[dev] = per_sm;
        }
        gw = (long long)sms * per_sm * waves;
        if (gcap > 0 && gw > gcap) gw = gcap;
        if (gw < want) want = gw;
    }
    *g = want > 0 ? (int)want : 1;
    accel__amp_kernel<K, ID, TA, TB, VWL, MODE, U, MINB>
        <<<*g, ACCEL_AMP_CUDA_BLOCK, 0, (cudaStream_t)acc->stream>>>(*A);
    ACCEL__CUDA_CHECK(acc, cudaGetLastError());
    return ACCEL_OK;
}

/* The instance for kind / cfg (accel__amp_pick chose it). */
static accel_result accel__amp_dispatch(accel *acc, int kind, const accel__amp_cfg *c, const accel__amp_args *A,
                                        int sms, int gcap, int *g) {
    enum { F32 = ACCEL_F32, BF = ACCEL_BF16, H = ACCEL_F16, P2 = ACCEL__AMP_NORM_P2 };
    enum { UF = ACCEL__AMP_U_FAST, UN = ACCEL__AMP_U_NORM, UA = ACCEL__AMP_U_ANY, UU = ACCEL__AMP_U_UNSCALE };
    enum { MF = ACCEL__AMP_MINB_FAST, MN = ACCEL__AMP_MINB_NORM, MA = ACCEL__AMP_MINB_ANY };
    enum { MU = ACCEL__AMP_MINB_UNSCALE };
    enum { UUB = ACCEL__AMP_U_UNSCALE_BIG, MUB = ACCEL__AMP_MINB_UNSCALE_BIG };
    if (kind == ACCEL__AMP_K_UNSCALE && c->id == ACCEL__AMP_I_F32 && (int)UUB != (int)UU && c->u == UUB &&
        c->ta == F32 && c->tb == F32 && c->vwl == 2 && c->mode == -1) /* large buffers (accel__amp_pick_big) */
        return accel__amp_go<ACCEL__AMP_K_UNSCALE, ACCEL__AMP_I_F32, F32, F32, 2, -1, UUB, MUB>(acc, A, sms, c->waves,
                                                                                              gcap, g);
    switch (kind * 8 + c->id) {
#define ACCEL__AMP_GO(K, ID, TA, TB, VWL, MODE, U, MINB)                                                               \
    case K * 8 + ID:                                                                                                   \
        if (c->ta != TA || c->tb != TB || c->vwl != VWL || c->mode != MODE || c->u != U) break;                        \
        return accel__amp_go<K, ID, TA, TB, VWL, MODE, U, MINB>(acc, A, sms, c->waves, gcap, g);
    ACCEL__AMP_GO(ACCEL__AMP_K_UNSCALE, ACCEL__AMP_I_F32, F32, F32, 2, -1, UU, MU)
    ACCEL__AMP_GO(ACCEL__AMP_K_UNSCALE, ACCEL__AMP_I_GENERIC, -1, -1, -1, -1, UA, MA)
    ACCEL__AMP_GO(ACCEL__AMP_K_NORM, ACCEL__AMP_I_F32, F32, F32, 2, P2, UN, MN)
    ACCEL__AMP_GO(ACCEL__AMP_K_NORM, ACCEL__AMP_I_GENERIC, -1, -1, -1, -1, UA, MA)
    ACCEL__AMP_GO(ACCEL__AMP_K_SCALE, ACCEL__AMP_I_F32, F32, F32, 2, -1, UF, MF)
    ACCEL__AMP_GO(ACCEL__AMP_K_SCALE, ACCEL__AMP_I_GENERIC, -1, -1, -1, -1, UA, MA)
    ACCEL__AMP_GO(ACCEL__AMP_K_CLAMP, ACCEL__AMP_I_GENERIC, -1, -1, -1, -1, UA, MA)
    ACCEL__AMP_GO(ACCEL__AMP_K_CONVERT, ACCEL__AMP_I_F32_BF16, F32, BF, 2, -1, UF, MF)
    ACCEL__AMP_GO(ACCEL__AMP_K_CONVERT, ACCEL__AMP_I_F32_F16, F32, H, 2, -1, UF, MF)
    ACCEL__AMP_GO(ACCEL__AMP_K_CONVERT, ACCEL__AMP_I_GENERIC, -1, -1, -1, -1, UA, MA)
    ACCEL__AMP_GO(ACCEL__AMP_K_SR, ACCEL__AMP_I_F32_BF16, F32, BF, 2, -1, UF, ACCEL__AMP_MINB_SR)
    ACCEL__AMP_GO(ACCEL__AMP_K_FP8Q, ACCEL__AMP_I_F32_F8, F32, -1, 2, -1, UF, MF)
    ACCEL__AMP_GO(ACCEL__AMP_K_FP8Q, ACCEL__AMP_I_GENERIC, -1, -1, -1, -1, UA, MA)
    ACCEL__AMP_GO(ACCEL__AMP_K_FP8D, ACCEL__AMP_I_F8_F32, -1, F32, 2, -1, UF, MF)
    ACCEL__AMP_GO(ACCEL__AMP_K_FP8D, ACCEL__AMP_I_GENERIC, -1, -1, -1, -1, UA, MA)
#undef ACCEL__AMP_GO
    default: break;
    }
    return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "amp: no kernel instance for kind %d as chosen (%d: %d -> %d, "
                       "vwl %d, mode %d, U %d)", kind, c->id, c->ta, c->tb, c->vwl, c->mode, c->u);
}

/* SM count per device (cached; a race only writes the same value twice). */
static int accel__amp_sms(accel *acc) {
    static int sms[ACCEL__AMP_NDEV];
    int dev = acc->device, n = dev >= 0 && dev < ACCEL__AMP_NDEV ? sms[dev] : 0;
    if (n <= 0 && cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) n = 0;
    if (n <= 0) n = 1;
    if (dev >= 0 && dev < ACCEL__AMP_NDEV) sms[dev] = n;
    return n;
}

/* Runs kind over the planned buffers h[0, n) (none empty) in launches of up to ACCEL__AMP_CAP buffers. res != NULL
   (unscale, norm): the result comes back through page-locked memory with one synchronization: unscale's flag (4
   bytes), or every norm block's record (G x 8 bytes a launch, G at most WAVES_NORM x the SMs' thread capacity),
   folded in block order into *res. */
static accel_result accel__amp_run(accel *acc, int kind, const accel__amp_mt *h, int n, const accel__amp_kp *kp,
                                   accel__amp_part *res) {
    const int per_sm = 2048 / ACCEL_AMP_CUDA_BLOCK < 32 ? 2048 / ACCEL_AMP_CUDA_BLOCK : 32; /* resident at most */
    const int nl = (n + ACCEL__AMP_CAP - 1) / ACCEL__AMP_CAP, sms = accel__amp_sms(acc);
    const int norm = kind == ACCEL__AMP_K_NORM, gnorm = sms * per_sm * ACCEL__AMP_WAVES_NORM, gcap = norm ? gnorm : 0;
    const size_t off = 16; /* the unscale flag, then the norm records */
    cudaStream_t st = (cudaStream_t)acc->stream;
    accel__amp_args *A = NULL;
    unsigned char *dev = NULL, *host = NULL;
    size_t bytes = 0;
    int j, *gs = NULL;
    accel_result r = ACCEL_OK;
    if (res) memset(res, 0, sizeof *res);
    if (n <= 0) return ACCEL_OK;
    A = (accel__amp_args *)accel_host_alloc(acc, sizeof *A);
    gs = (int *)accel_host_alloc(acc, sizeof(int) * (size_t)nl);
    if (!A || !gs) { r = ACCEL_ERR_OUT_OF_MEMORY; goto done; }
    if (res) {
        bytes = off + sizeof(double) * (size_t)nl * (size_t)gnorm; /* a norm's size for either: no regrowth */
        dev = (unsigned char *)accel__device_scratch(acc, bytes);
        host = dev ? (unsigned char *)accel__pinned_scratch(acc, bytes) : NULL;
        if (!dev || !host) {
            r = accel__fail_wrap(acc, acc->last_result, "amp: %s results (%zu bytes)", dev ? "host" : "device", bytes);
            goto done;
        }
        if (!norm) {
            cudaError_t e = cudaMemsetAsync(dev, 0, sizeof(unsigned int), st);
            if (e != cudaSuccess) {
                r = ACCEL__FAIL(acc, ACCEL_ERR_CUDA, "amp: clearing the found_inf flag: %s", cudaGetErrorString(e));
                goto done;
            }
        }
    }
    for (j = 0; j < nl && r == ACCEL_OK; ++j) {
        int nt = n - j * ACCEL__AMP_CAP < ACCEL__AMP_CAP ? n - j * ACCEL__AMP_CAP : ACCEL__AMP_CAP, ta, tb;
        accel__amp_cfg c;
        const accel__amp_mt *hj = h + (size_t)j * ACCEL__AMP_CAP;
        accel__amp_common(hj, nt, &ta, &tb);
        accel__amp_pick(kind, kp->mode, ta, tb, &c);
        accel__amp_pick_big(kind, hj, nt, &c);
        A->k = *kp;
        A->flag = dev ? (unsigned int *)dev : NULL;
        A->part = dev && norm ? (double *)(dev + off) + (size_t)j * (size_t)gcap : NULL;
        accel__amp_fill(A, hj, nt, (long long)c.u * ACCEL_AMP_CUDA_BLOCK);
        r = accel__amp_dispatch(acc, kind, &c, A, sms, gcap, &gs[j]);
    }
    if (r == ACCEL_OK && res) {
        size_t got = norm ? off + sizeof(double) * ((size_t)(nl - 1) * (size_t)gcap + (size_t)gs[nl - 1])
                          : sizeof(unsigned int);
        cudaError_t e = cudaMemcpyAsync(host, dev, got, cudaMemcpyDeviceToHost, st);
        if (e == cudaSuccess) e = cudaStreamSynchronize(st);
        if (e != cudaSuccess)
            r = ACCEL__FAIL(acc, ACCEL_ERR_CUDA, "amp: reading the results back: %s", cudaGetErrorString(e));
        else if (!norm) {
            unsigned int f;
            memcpy(&f, host, sizeof f);
            res->flag = f != 0u;
        } else {
            for (j = 0; j < nl; ++j)
                accel__amp_fold(kp->mode, (const double *)(host + off) + (size_t)j * (size_t)gcap, gs[j], res);
        }
    }
done:
    accel_host_free(acc, A);
    accel_host_free(acc, gs);
    return r;
}

/* Plans the buffers h[0, count) for kind (see accel__amp_prepare) and runs them. */
static accel_result accel__amp_exec(accel *acc, int kind, accel__amp_mt *h, int count, const accel__amp_kp *kp,
                                    accel__amp_part *res, const char *what) {
    accel_result r;
    int k = 0;
    if (res) memset(res, 0, sizeof *res);
    r = accel__amp_prepare(acc, kind, h, count, kp, &k, what);
    return r == ACCEL_OK ? accel__amp_run(acc, kind, h, k, kp, res) : r;
}
#endif

#ifndef __CUDACC__
static accel_result accel__amp_no_cuda(accel *acc, const char *what) {
    return ACCEL__FAIL(acc, ACCEL_ERR_UNSUPPORTED,
                       "%s on CUDA device %d needs the kernels: compile the ACCEL_IMPLEMENTATION TU with nvcc", what,
                       acc->device);
}
#endif

#ifdef __CUDACC__
/* A gradient list as in-place buffer descriptors (the caller frees *out). */
static accel_result accel__amp_from_tensors(accel *acc, const accel_tensor *ts, int count, accel__amp_mt **out) {
    accel__amp_mt *h = (accel__amp_mt *)accel_host_alloc(acc, sizeof(accel__amp_mt) * (size_t)(count > 0 ? count : 1));
    int i;
    *out = h;
    if (!h) return ACCEL_ERR_OUT_OF_MEMORY;
    for (i = 0; i < count; ++i) {
        memset(&h[i], 0, sizeof h[i]);
        h[i].a = ts[i].ptr;
        h[i].n = (long long)accel_tensor_numel(&ts[i]);
        h[i].ta = h[i].tb = (unsigned char)ts[i].dtype;
    }
    return ACCEL_OK;
}
#endif

/* Validates a gradient list: F32/F16/BF16, valid shapes, non-NULL data. */
static accel_result accel__amp_check_list(accel *acc, const accel_tensor *ts, int count, const char *what) {
    int i;
    if (count < 0 || (count > 0 && !ts))
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: bad buffer list (count %d)", what, count);
    for (i = 0; i < count; ++i) {
        int64_t n = accel_tensor_numel(&ts[i]);
        const char *nm = ts[i].name ? ts[i].name : "(unnamed)";
        if (n < 0)
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: buffer %d \"%s\" has an invalid shape", what, i,
                               nm);
        if (!accel__amp_is16or32(ts[i].dtype))
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                               "%s: buffer %d \"%s\" has dtype %s (need F32, F16 or BF16)", what, i, nm,
                               accel_dtype_name(ts[i].dtype) ? accel_dtype_name(ts[i].dtype) : "invalid");
        if (n > 0 && !ts[i].ptr)
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: buffer %d \"%s\" has NULL data", what, i, nm);
    }
    return ACCEL_OK;
}

/* ------------------------------------------------------------------------------------------ conversions */
static accel_result accel__amp_convert_list(accel *acc, const void *const *src, const accel_dtype *st, void *const *dst,
                                            const accel_dtype *dt, const size_t *n, int count, const accel_amp_sr *sr) {
    int i;
    if (acc->device < 0) {
        for (i = 0; i < count; ++i) accel__amp_cpu_convert(src[i], st[i], dst[i], dt[i], n[i], sr);
        return ACCEL_OK;
    }
#ifdef __CUDACC__
    {
        accel__amp_mt *h =
            (accel__amp_mt *)accel_host_alloc(acc, sizeof(accel__amp_mt) * (size_t)(count > 0 ? count : 1));
        accel__amp_kp kp;
        accel_result r;
        int k = 0;
        if (!h) return ACCEL_ERR_OUT_OF_MEMORY;
        memset(&kp, 0, sizeof kp);
        if (sr) { kp.seed = sr->seed; kp.step = sr->step; kp.index_offset = sr->index_offset; }
        for (i = 0; i < count; ++i) {
            if (n[i] == 0 || st[i] == dt[i]) continue;
            memset(&h[k], 0, sizeof h[k]);
            h[k].a = (void *)src[i]; h[k].b = dst[i]; h[k].n = (long long)n[i];
            h[k].ta = (unsigned char)st[i]; h[k].tb = (unsigned char)dt[i];
            ++k;
        }
        r = accel__amp_exec(acc, sr ? ACCEL__AMP_K_SR : ACCEL__AMP_K_CONVERT, h, k, &kp, NULL, "conversion");
        accel_host_free(acc, h);
        for (i = 0; r == ACCEL_OK && i < count; ++i) { /* same dtype: a copy, the copy engine does it */
            cudaError_t e;
            if (n[i] == 0 || st[i] != dt[i] || src[i] == dst[i]) continue;
            e = cudaMemcpyAsync(dst[i], src[i], n[i] * accel_dtype_size(st[i]), cudaMemcpyDeviceToDevice,
                                (cudaStream_t)acc->stream);
            if (e != cudaSuccess)
                r = ACCEL__FAIL(acc, ACCEL_ERR_CUDA, "cudaMemcpyAsync failed: %s", cudaGetErrorString(e));
        }
        return r;
    }
#else
    (void)src; (void)st; (void)dst; (void)dt; (void)n; (void)count; (void)sr;
    return accel__amp_no_cuda(acc, "conversion");
#endif
}

ACCEL__DEF accel_result accel_amp_convert(accel *acc, const void *src, accel_dtype src_dtype, void *dst,
                                          accel_dtype dst_dtype, size_t n, const accel_amp_sr *sr) {
    const void *s1[1];
    void *d1[1];
    if (!acc) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_amp_convert: acc is NULL");
    if (!(accel__amp_is16or32(src_dtype) || accel__amp_is_fp8(src_dtype)) ||
        !(accel__amp_is16or32(dst_dtype) || accel__amp_is_fp8(dst_dtype)))
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                           "accel_amp_convert: %s -> %s is not supported (F32, F16, BF16, F8_E4M3, F8_E5M2)",
                           accel_dtype_name(src_dtype) ? accel_dtype_name(src_dtype) : "invalid",
                           accel_dtype_name(dst_dtype) ? accel_dtype_name(dst_dtype) : "invalid");
    if (sr && !(src_dtype == ACCEL_F32 && dst_dtype == ACCEL_BF16))
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                           "accel_amp_convert: stochastic rounding is only F32 -> BF16 (got %s -> %s)",
                           accel_dtype_name(src_dtype), accel_dtype_name(dst_dtype));
    if (n == 0) return ACCEL_OK;
    if (!src || !dst) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_amp_convert: NULL buffer");
    if (n > (size_t)INT64_MAX / 4)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_amp_convert: n=%zu is too large", n);
    if (src == dst && accel_dtype_size(src_dtype) != accel_dtype_size(dst_dtype))
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                           "accel_amp_convert: in-place conversion between sizes %zu and %zu",
                           accel_dtype_size(src_dtype), accel_dtype_size(dst_dtype));
    s1[0] = src; d1[0] = dst;
    return accel__amp_convert_list(acc, s1, &src_dtype, d1, &dst_dtype, &n, 1, sr);
}

ACCEL__DEF accel_result accel_amp_convert_to_fp32(accel *acc, const accel_tensor *in, float *const *out, int count) {
    const void **src;
    void **dst;
    accel_dtype *st, *dt;
    size_t *n;
    accel_result r;
    int i;
    if (!acc) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_amp_convert_to_fp32: acc is NULL");
    r = accel__amp_check_list(acc, in, count, "accel_amp_convert_to_fp32");
    if (r != ACCEL_OK) return r;
    if (count > 0 && !out)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_amp_convert_to_fp32: out is NULL");
    for (i = 0; i < count; ++i)
        if (accel_tensor_numel(&in[i]) > 0 && !out[i])
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_amp_convert_to_fp32: out[%d] is NULL", i);
    if (count == 0) return ACCEL_OK;
    src = (const void **)accel_host_alloc(acc, sizeof(void *) * 2 * (size_t)count);
    st = (accel_dtype *)accel_host_alloc(acc, sizeof(accel_dtype) * 2 * (size_t)count);
    n = (size_t *)accel_host_alloc(acc, sizeof(size_t) * (size_t)count);
    if (!src || !st || !n) {
        accel_host_free(acc, (void *)src); accel_host_free(acc, st); accel_host_free(acc, n);
        return ACCEL_ERR_OUT_OF_MEMORY;
    }
    dst = (void **)(src + count);
    dt = st + count;
    for (i = 0; i < count; ++i) {
        src[i] = in[i].ptr; st[i] = in[i].dtype; dst[i] = out[i]; dt[i] = ACCEL_F32;
        n[i] = (size_t)accel_tensor_numel(&in[i]);
    }
    r = accel__amp_convert_list(acc, src, st, dst, dt, n, count, NULL);
    accel_host_free(acc, (void *)src); accel_host_free(acc, st); accel_host_free(acc, n);
    return r;
}

ACCEL__DEF accel_result accel_amp_master_to_model(accel *acc, const float *master, void *model, accel_dtype model_dtype,
                                                  size_t n, const accel_amp_sr *sr) {
    return accel_amp_convert(acc, master, ACCEL_F32, model, model_dtype, n, sr);
}
ACCEL__DEF accel_result accel_amp_model_to_master(accel *acc, const void *model, accel_dtype model_dtype, float *master,
                                                  size_t n) {
    return accel_amp_convert(acc, model, model_dtype, master, ACCEL_F32, n, NULL);
}

/* ------------------------------------------------------------------------------------------ loss scaler */
ACCEL__DEF accel_result accel_amp_scaler_init(accel *acc, accel_amp_scaler *s, const accel_amp_scaler_desc *desc) {
    accel_amp_scaler_desc d;
    accel_amp_policy pol;
    accel_result r;
    if (s) memset(s, 0, sizeof *s); /* a failed init leaves a zeroed scaler (deinit-safe, refused by the methods) */
    if (!acc || !s) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_amp_scaler_init: NULL argument");
    if (desc) d = *desc;
    else memset(&d, 0, sizeof d);
    r = accel_amp_get_policy(acc, &pol);
    if (r != ACCEL_OK) return r;
    if (d.init_scale == 0.0f) d.init_scale = 65536.0f;
    if (d.growth_factor == 0.0) d.growth_factor = 2.0;
    if (d.backoff_factor == 0.0) d.backoff_factor = 0.5;
    if (d.growth_interval == 0) d.growth_interval = 2000;
    if (!(d.init_scale > 0.0f) || accel_amp_nonfinite(d.init_scale))
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "scaler: init_scale=%g must be finite and > 0",
                           (double)d.init_scale);
    if (!(d.growth_factor > 1.0) || d.growth_factor != d.growth_factor || d.growth_factor > 1e30)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "scaler: growth_factor=%g must be > 1 (as torch)",
                           d.growth_factor);
    if (!(d.backoff_factor > 0.0 && d.backoff_factor < 1.0))
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "scaler: backoff_factor=%g must be in (0, 1)",
                           d.backoff_factor);
    if (d.growth_interval < 0)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "scaler: growth_interval=%d must be > 0",
                           d.growth_interval);
    if (d.enabled != ACCEL_DEFAULT && d.enabled != ACCEL_ON && d.enabled != ACCEL_OFF)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                           "scaler: enabled=%d must be ACCEL_DEFAULT, ACCEL_ON or ACCEL_OFF", (int)d.enabled);
    s->acc = acc;
    s->enabled = d.enabled == ACCEL_ON ? 1 : d.enabled == ACCEL_OFF ? 0 : pol.loss_scaling;
    s->dynamic = d.static_scale ? 0 : 1;
    s->scale = d.init_scale;
    s->growth_factor = d.growth_factor;
    s->backoff_factor = d.backoff_factor;
    s->growth_interval = d.growth_interval;
    s->growth_tracker = 0;
    s->local_found_inf = d.local_found_inf ? 1 : 0;
    return ACCEL_OK;
}

ACCEL__DEF void accel_amp_scaler_deinit(accel_amp_scaler *s) {
    if (s) memset(s, 0, sizeof *s);
}

ACCEL__DEF float accel_amp_loss_scale(const accel_amp_scaler *s) { return (s && s->enabled) ? s->scale : 1.0f; }
ACCEL__DEF int accel_amp_step_was_skipped(const accel_amp_scaler *s) { return s ? s->step_was_skipped : 0; }

/* The scaler's Accelerator, or an error (recorded process-wide: there is no Accelerator to record it in). */
static accel_result accel__amp_scaler_acc(const accel_amp_scaler *s, const char *what) {
    if (!s) return ACCEL__FAIL(NULL, ACCEL_ERR_INVALID_ARGUMENT, "%s: scaler is NULL", what);
    if (!s->acc)
        return ACCEL__FAIL(NULL, ACCEL_ERR_STATE,
                           "%s: the scaler is not initialized (accel_amp_scaler_init failed, was "
                           "not called, or accel_amp_scaler_deinit was)",
                           what);
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_amp_unscale_and_check(accel_amp_scaler *s, const accel_tensor *grads, int count,
                                                    int *found_inf) {
    static const char what[] = "accel_amp_unscale_and_check";
    accel *acc;
    accel_result r;
    uint32_t bad = 0;
    float inv;
    int i, collective;
    if (found_inf) *found_inf = 0;
    if ((r = accel__amp_scaler_acc(s, what)) != ACCEL_OK) return r;
    acc = s->acc;
    if (!s->enabled) return ACCEL_OK;
    collective = !s->local_found_inf && acc->num_processes > 1;
    if (collective && !strcmp(accel_host_group_name(acc), "none"))
        return ACCEL__FAIL(
            acc, ACCEL_ERR_UNSUPPORTED,
            "%s: found_inf must be OR-ed across %d processes, but there is no host process group (launched "
            "by %s without MPI, and no collectives context installed itself yet): build with MPI, create "
            "the accel_coll first, or set accel_amp_scaler_desc.local_found_inf when every rank holds the "
            "same (already reduced) gradients (nothing was changed)",
            what, acc->num_processes, accel_launcher_name(acc->launcher));
    if (s->unscaled)
        r = ACCEL__FAIL(
            acc, ACCEL_ERR_STATE,
            "%s was already called since the last update (torch: \"unscale_() has already been called on this "
            "optimizer since the last update()\")",
            what);
    else
        r = accel__amp_check_list(acc, grads, count, what);
    /* every rank's call must be valid before any rank changes its gradients: a failure on one fails all (the others
       get ACCEL_ERR_REMOTE with its message), with nothing changed anywhere */
    if (collective) r = accel__agree(acc, r, "accel_amp_unscale_and_check (argument check)");
    if (r != ACCEL_OK) return r;
    inv = (float)(1.0 / (double)s->scale);
    if (acc->device < 0) {
        for (i = 0; i < count; ++i) {
            size_t n = (size_t)accel_tensor_numel(&grads[i]);
            if (grads[i].dtype == ACCEL_F32) bad |= accel__amp_cpu_unscale_f32((float *)grads[i].ptr, n, inv);
            else bad |= accel__amp_cpu_unscale_16((uint16_t *)grads[i].ptr, n, inv, grads[i].dtype == ACCEL_BF16);
        }
    } else {
#ifdef __CUDACC__
        accel__amp_mt *h;
        accel__amp_kp kp;
        accel__amp_part res;
        memset(&kp, 0, sizeof kp);
        memset(&res, 0, sizeof res);
        kp.f0 = inv;
        r = accel__amp_from_tensors(acc, grads, count, &h);
        if (r == ACCEL_OK) r = accel__amp_exec(acc, ACCEL__AMP_K_UNSCALE, h, count, &kp, &res, what);
        accel_host_free(acc, h);
        bad = res.flag;
#else
        r = accel__amp_no_cuda(acc, what);
#endif
    }
    if (collective) {
        /* found_inf OR over the ranks (MAX of 0/1). A rank whose kernels failed still joins, with 2 + its rank, so no
           rank waits for it until the deadline; the others learn which rank failed. */
        int64_t v = r != ACCEL_OK ? 2 + (int64_t)acc->process_index : bad ? 1 : 0;
        accel_result r2 = accel_host_allreduce_i64(acc, &v, 1, ACCEL_HOST_MAX);
        if (r != ACCEL_OK) return r;
        if (r2 != ACCEL_OK)
            return accel__fail_wrap(acc, r2, "%s: OR of found_inf across ranks (this rank's gradients were unscaled)",
                                    what);
        if (v >= 2)
            return ACCEL__FAIL(acc, ACCEL_ERR_REMOTE, "%s failed on rank %lld (see its accel_last_error); this rank's "
                               "gradients were unscaled", what, (long long)(v - 2));
        bad = v ? 1u : 0u;
    }
    if (r != ACCEL_OK) return r;
    s->unscaled = 1;
    s->found_inf = bad ? 1 : 0;
    if (found_inf) *found_inf = s->found_inf;
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_amp_update(accel_amp_scaler *s) {
    accel_result r = accel__amp_scaler_acc(s, "accel_amp_update");
    if (r != ACCEL_OK) return r;
    if (s->enabled) {
        if (!s->unscaled)
            return ACCEL__FAIL(
                s->acc, ACCEL_ERR_STATE,
                "accel_amp_update: no accel_amp_unscale_and_check in this step (torch: \"No inf checks were "
                "recorded prior to update.\")");
        if (s->dynamic)
            accel_amp_update_scale_rule(&s->scale, &s->growth_tracker, s->found_inf, s->growth_factor,
                                        s->backoff_factor, s->growth_interval);
        s->step_was_skipped = s->found_inf;
    } else {
        s->step_was_skipped = 0;
    }
    s->unscaled = 0;
    s->found_inf = 0;
    s->steps++;
    if (s->step_was_skipped) s->skipped_steps++;
    s->acc->optimizer_step_was_skipped = s->step_was_skipped;
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_amp_scaler_state_save(void *scaler, void *buf, size_t cap, size_t *size) {
    const accel_amp_scaler *s = (const accel_amp_scaler *)scaler;
    unsigned char *p = (unsigned char *)buf;
    uint64_t u;
    if (!s || !size)
        return ACCEL__FAIL(s ? s->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, "accel_amp_scaler_state_save: NULL %s",
                           s ? "size" : "scaler");
    *size = ACCEL_AMP_SCALER_STATE_BYTES;
    if (!buf || cap < ACCEL_AMP_SCALER_STATE_BYTES) return ACCEL_OK; /* the contract: report the size */
    memcpy(p, "AMPS", 4);
    accel__put_u32(p + 4, 1u);
    accel__put_u32(p + 8, accel_f32_bits(s->scale));
    memcpy(&u, &s->growth_factor, 8);
    accel__put_u64(p + 12, u);
    memcpy(&u, &s->backoff_factor, 8);
    accel__put_u64(p + 20, u);
    accel__put_u32(p + 28, (uint32_t)s->growth_interval);
    accel__put_u32(p + 32, (uint32_t)s->growth_tracker);
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_amp_scaler_state_decode(accel *acc, const void *buf, size_t size,
                                                     accel_amp_scaler_state_info *out) {
    const unsigned char *p = (const unsigned char *)buf;
    float scale;
    double g, b;
    uint64_t u;
    int32_t interval, tracker;
    uint32_t ver;
    if (!out || (!buf && size))
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_amp_scaler_state_decode: NULL %s",
                           out ? "buffer" : "out");
    if (size != ACCEL_AMP_SCALER_STATE_BYTES)
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "scaler state: %zu bytes, expected %d", size,
                           ACCEL_AMP_SCALER_STATE_BYTES);
    if (memcmp(p, "AMPS", 4) != 0) return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "scaler state: bad magic (not \"AMPS\")");
    ver = accel__get_u32(p + 4);
    if (ver != 1u)
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "scaler state: version %u is not supported (1)", (unsigned)ver);
    scale = accel_bits_f32(accel__get_u32(p + 8));
    u = accel__get_u64(p + 12);
    memcpy(&g, &u, 8);
    u = accel__get_u64(p + 20);
    memcpy(&b, &u, 8);
    interval = (int32_t)accel__get_u32(p + 28);
    tracker = (int32_t)accel__get_u32(p + 32);
    if (!(scale >= 0.0f) || accel_amp_nonfinite(scale))
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "scaler state: scale %g is not finite and >= 0", (double)scale);
    if (!(g > 1.0) || g > 1e30)
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "scaler state: growth_factor %g is not > 1", g);
    if (!(b > 0.0 && b < 1.0))
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "scaler state: backoff_factor %g is not in (0, 1)", b);
    if (interval <= 0)
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "scaler state: growth_interval %d is not > 0", (int)interval);
    if (tracker < 0 || tracker >= interval)
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "scaler state: growth_tracker %d is not in [0, %d)", (int)tracker,
                           (int)interval);
    out->scale = scale;
    out->growth_factor = g;
    out->backoff_factor = b;
    out->growth_interval = interval;
    out->growth_tracker = tracker;
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_amp_scaler_state_load(void *scaler, const void *buf, size_t size) {
    accel_amp_scaler *s = (accel_amp_scaler *)scaler;
    accel_amp_scaler_state_info d;
    accel_result r;
    if (!s || (!buf && size))
        return ACCEL__FAIL(s ? s->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, "accel_amp_scaler_state_load: NULL %s",
                           s ? "buffer" : "scaler");
    if ((r = accel_amp_scaler_state_decode(s->acc, buf, size, &d)) != ACCEL_OK) return r;
    s->scale = d.scale;
    s->growth_factor = d.growth_factor;
    s->backoff_factor = d.backoff_factor;
    s->growth_interval = d.growth_interval;
    s->growth_tracker = d.growth_tracker;
    s->unscaled = 0;
    s->found_inf = 0;
    return ACCEL_OK;
}

/* ------------------------------------------------------------------------------------------ clipping */
/* pre: the caller's own argument check (joins the agreement below, so a sharded call fails on every rank). */
static accel_result accel__amp_norm(accel *acc, const accel_tensor *grads, int count, double norm_type, int flags,
                                    accel_result pre, double *total) {
    int is_inf = norm_type > 1e308;
    int sharded = (flags & ACCEL_AMP_CLIP_SHARDED) && acc->num_processes > 1;
    double sum = 0.0;
    int i;
    accel_result r;
    if (pre != ACCEL_OK)
        r = pre;
    else if (!(norm_type > 0.0))
        r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                        "clip_grad_norm: norm_type=%g must be > 0 (or HUGE_VAL for inf)", norm_type);
    else r = accel__amp_check_list(acc, grads, count, "clip_grad_norm");
    /* sharded: a bad call on one rank fails every rank with its message (ACCEL_ERR_REMOTE elsewhere), nothing
       changed */
    if (sharded) r = accel__agree(acc, r, "clip_grad_norm (sharded; argument check)");
    if (r != ACCEL_OK) return r;
    if (acc->device < 0) {
        for (i = 0; i < count; ++i)
            accel__amp_cpu_norm(grads[i].ptr, grads[i].dtype, (size_t)accel_tensor_numel(&grads[i]), norm_type, is_inf,
                                &sum);
    } else {
#ifdef __CUDACC__
        /* fp32 compensated sums (accel__amp_norm1), and a float64 pass where they left the fp32 range */
        accel__amp_mt *h = NULL;
        accel__amp_kp kp;
        accel__amp_part res;
        double n_all = 0.0;
        int pass;
        memset(&kp, 0, sizeof kp);
        memset(&res, 0, sizeof res);
        kp.p = norm_type;
        kp.mode = is_inf ? ACCEL__AMP_NORM_INF : norm_type == 2.0 ? ACCEL__AMP_NORM_P2
                : norm_type == 1.0 ? ACCEL__AMP_NORM_P1 : ACCEL__AMP_NORM_F64;
        for (i = 0; i < count; ++i) n_all += (double)accel_tensor_numel(&grads[i]);
        for (pass = 0; pass < 2 && r == ACCEL_OK; ++pass) {
            if (pass == 1) {
                if (!accel__amp_norm_again(kp.mode, &res, n_all)) break;
                kp.mode = ACCEL__AMP_NORM_F64;
            }
            r = accel__amp_from_tensors(acc, grads, count, &h);
            if (r == ACCEL_OK) r = accel__amp_exec(acc, ACCEL__AMP_K_NORM, h, count, &kp, &res, "clip_grad_norm");
            accel_host_free(acc, h);
            h = NULL;
        }
        sum = kp.mode == ACCEL__AMP_NORM_INF ? (double)accel_bits_f32(res.bits) : res.sum;
#else
        r = accel__amp_no_cuda(acc, "clip_grad_norm");
#endif
    }
    if (sharded) {
        /* NaN must win whatever the transport does with NaN: carry a NaN flag, and a failure flag so a rank whose
           kernels failed still joins (no rank waits for it until the deadline) */
        double v[3];
        accel_result r2;
        v[0] = (r != ACCEL_OK || sum != sum) ? 0.0 : sum;
        v[1] = (r == ACCEL_OK && sum != sum) ? 1.0 : 0.0;
        v[2] = r != ACCEL_OK ? 1.0 : 0.0;
        r2 = accel_host_allreduce_f64(acc, v, 3, is_inf ? ACCEL_HOST_MAX : ACCEL_HOST_SUM);
        if (r != ACCEL_OK) return r;
        if (r2 != ACCEL_OK) return accel__fail_wrap(acc, r2, "clip_grad_norm: all-reduce of the sharded norm");
        if (v[2] != 0.0)
            return ACCEL__FAIL(acc, ACCEL_ERR_REMOTE,
                               "clip_grad_norm: computing the local norm failed on another rank (see "
                               "its accel_last_error); nothing was changed");
        sum = v[1] != 0.0 ? (double)NAN : v[0];
    }
    if (r != ACCEL_OK) return r;
    if (is_inf || sum != sum) *total = sum;
    else if (norm_type == 2.0) *total = sqrt(sum);
    else if (norm_type == 1.0) *total = sum;
    else *total = pow(sum, 1.0 / norm_type);
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_amp_grad_norm(accel *acc, const accel_tensor *grads, int count, double norm_type,
                                            int flags, double *total_norm) {
    double t = 0.0;
    accel_result r;
    if (!acc) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_amp_grad_norm: acc is NULL");
    r = accel__amp_norm(acc, grads, count, norm_type, flags, ACCEL_OK, &t);
    if (r == ACCEL_OK && total_norm) *total_norm = t;
    return r;
}

static accel_result accel__amp_apply(accel *acc, const accel_tensor *grads, int count, int kind, float f0, float f1) {
    int i;
    if (acc->device < 0) {
        for (i = 0; i < count; ++i) {
            size_t n = (size_t)accel_tensor_numel(&grads[i]);
            if (kind == ACCEL__AMP_K_SCALE) accel__amp_cpu_scale(grads[i].ptr, grads[i].dtype, n, f0);
            else accel__amp_cpu_clamp(grads[i].ptr, grads[i].dtype, n, f0, f1);
        }
        return ACCEL_OK;
    }
#ifdef __CUDACC__
    {
        accel__amp_mt *h;
        accel__amp_kp kp;
        accel_result r;
        memset(&kp, 0, sizeof kp);
        kp.f0 = f0;
        kp.f1 = f1;
        r = accel__amp_from_tensors(acc, grads, count, &h);
        if (r == ACCEL_OK)
            r = accel__amp_exec(acc, kind, h, count, &kp, NULL,
                                kind == ACCEL__AMP_K_SCALE ? "clip_grad_norm" : "clip_grad_value");
        accel_host_free(acc, h);
        return r;
    }
#else
    (void)kind; (void)f0; (void)f1;
    return accel__amp_no_cuda(acc, "gradient clipping");
#endif
}

ACCEL__DEF accel_result accel_amp_clip_grad_norm(accel *acc, const accel_tensor *grads, int count, double max_norm,
                                                 double norm_type, int flags, double *total_norm) {
    double total = 0.0;
    float coef;
    accel_result r;
    if (!acc) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_amp_clip_grad_norm: acc is NULL");
    r = max_norm != max_norm ? ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_amp_clip_grad_norm: max_norm is NaN")
                             : ACCEL_OK;
    r = accel__amp_norm(acc, grads, count, norm_type, flags, r, &total);
    if (r != ACCEL_OK) return r;
    if (total_norm) *total_norm = total;
    if ((flags & ACCEL_AMP_CLIP_ERROR_IF_NONFINITE) && (total != total || total > 1.7976931348623157e308))
        return ACCEL__FAIL(acc, ACCEL_ERR_STATE,
                           "clip_grad_norm: the total norm of order %g is non-finite (%g), so it cannot be clipped "
                           "(torch: error_if_nonfinite=True); gradients left unchanged", norm_type, total);
    if (count == 0) return ACCEL_OK;
    /* torch: clip_coef = max_norm / (total_norm + 1e-6) in the norm's dtype (float32), clamped to 1 */
    {
        float tf = (float)total;
        float c = (1.0f / (tf + 1e-6f)) * (float)max_norm; /* torch: max_norm / t is t.reciprocal() * max_norm */
        coef = c != c ? c : (c > 1.0f ? 1.0f : c);
    }
    return accel__amp_apply(acc, grads, count, ACCEL__AMP_K_SCALE, coef, 0.0f);
}

ACCEL__DEF accel_result accel_amp_clip_grad_value(accel *acc, const accel_tensor *grads, int count, double clip_value) {
    accel_result r;
    float v;
    if (!acc) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_amp_clip_grad_value: acc is NULL");
    if (clip_value != clip_value || clip_value < 0.0)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_amp_clip_grad_value: clip_value=%g must be >= 0",
                           clip_value);
    r = accel__amp_check_list(acc, grads, count, "clip_grad_value");
    if (r != ACCEL_OK) return r;
    v = (float)clip_value;
    return accel__amp_apply(acc, grads, count, ACCEL__AMP_K_CLAMP, -v, v);
}

/* ------------------------------------------------------------------------------------------ fp8 delayed scaling */
/* ACCELERATE_FP8_* value (NULL when unset or empty). */
static const char *accel__amp_fp8_env(const char *name) {
    const char *s = getenv(name);
    return (s && *s) ? s : NULL;
}
/* Strict int (optional sign, digits, surrounding blanks). */
static int accel__amp_parse_int(const char *s, long lo, long hi, int *out) {
    char *end;
    long v;
    while (*s == ' ' || *s == '\t') ++s;
    if (!(isdigit((unsigned char)*s) || ((*s == '-' || *s == '+') && isdigit((unsigned char)s[1])))) return 0;
    errno = 0;
    v = strtol(s, &end, 10);
    while (*end == ' ' || *end == '\t') ++end;
    if (errno || *end || v < lo || v > hi) return 0;
    *out = (int)v;
    return 1;
}
static int accel__amp_ieq(const char *a, const char *b) { /* ASCII case-insensitive equality */
    for (; *a && *b; ++a, ++b)
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b)) return 0;
    return *a == *b;
}

#define ACCEL__AMP_FP8_MAX_HISTORY (1 << 20)
#define ACCEL__AMP_FP8_MAX_SLOTS (1 << 20)

ACCEL__DEF accel_result accel_amp_fp8_init(accel *acc, accel_amp_fp8 *f, const accel_amp_fp8_desc *desc) {
    accel_amp_fp8_desc d;
    const char *s;
    size_t n, cells;
    int k;
    if (f) memset(f, 0, sizeof *f); /* a failed init leaves a zeroed object (deinit-safe, refused by the methods) */
    if (!acc || !f) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_amp_fp8_init: NULL argument");
    if (!desc)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_amp_fp8_init: desc is NULL (it names the slots)");
    d = *desc;
    /* Accelerate's FP8RecipeKwargs: ACCELERATE_FP8_* fill the fields left at their zero default */
    if (d.fp8_format == ACCEL_AMP_FP8_FORMAT_DEFAULT) {
        d.fp8_format = ACCEL_AMP_FP8_HYBRID;
        if ((s = accel__amp_fp8_env("ACCELERATE_FP8_FORMAT")) != NULL) {
            if (accel__amp_ieq(s, "HYBRID")) d.fp8_format = ACCEL_AMP_FP8_HYBRID;
            else if (accel__amp_ieq(s, "E4M3")) d.fp8_format = ACCEL_AMP_FP8_E4M3;
            else
                return ACCEL__FAIL(acc, ACCEL_ERR_ENVIRONMENT,
                                   "ACCELERATE_FP8_FORMAT=\"%s\" is not one of HYBRID, E4M3", s);
        }
    }
    if (d.amax_compute_algo == ACCEL_AMP_AMAX_DEFAULT) {
        d.amax_compute_algo = ACCEL_AMP_AMAX_MOST_RECENT;
        if ((s = accel__amp_fp8_env("ACCELERATE_FP8_AMAX_COMPUTE_ALGO")) != NULL) {
            if (!strcmp(s, "most_recent")) d.amax_compute_algo = ACCEL_AMP_AMAX_MOST_RECENT;
            else if (!strcmp(s, "max")) d.amax_compute_algo = ACCEL_AMP_AMAX_MAX;
            else return ACCEL__FAIL(acc, ACCEL_ERR_ENVIRONMENT,
                                    "ACCELERATE_FP8_AMAX_COMPUTE_ALGO=\"%s\" is not one of max, most_recent", s);
        }
    }
    if (d.amax_history_len == 0) {
        d.amax_history_len = 1024;
        if ((s = accel__amp_fp8_env("ACCELERATE_FP8_AMAX_HISTORY_LEN")) != NULL &&
            !accel__amp_parse_int(s, 1, ACCEL__AMP_FP8_MAX_HISTORY, &d.amax_history_len))
            return ACCEL__FAIL(acc, ACCEL_ERR_ENVIRONMENT,
                               "ACCELERATE_FP8_AMAX_HISTORY_LEN=\"%s\" is not an integer in "
                               "[1, %d]",
                               s, ACCEL__AMP_FP8_MAX_HISTORY);
    }
    if (d.margin == 0 && (s = accel__amp_fp8_env("ACCELERATE_FP8_MARGIN")) != NULL &&
        !accel__amp_parse_int(s, -1000, 1000, &d.margin))
        return ACCEL__FAIL(acc, ACCEL_ERR_ENVIRONMENT,
                           "ACCELERATE_FP8_MARGIN=\"%s\" is not an integer in [-1000, 1000]", s);
    if (d.num_forward < 0 || d.num_backward < 0 || d.num_forward + 0LL + d.num_backward < 1 ||
        d.num_forward + 0LL + d.num_backward > ACCEL__AMP_FP8_MAX_SLOTS)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                           "accel_amp_fp8_init: num_forward=%d, num_backward=%d: need "
                           ">= 0 each and 1 .. %d slots in all",
                           d.num_forward, d.num_backward, ACCEL__AMP_FP8_MAX_SLOTS);
    if (d.fp8_format != ACCEL_AMP_FP8_HYBRID && d.fp8_format != ACCEL_AMP_FP8_E4M3)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                           "accel_amp_fp8_init: fp8_format=%d is not an accel_amp_fp8_format "
                           "(TE refuses pure E5M2 training too)",
                           (int)d.fp8_format);
    if (d.amax_compute_algo != ACCEL_AMP_AMAX_MOST_RECENT && d.amax_compute_algo != ACCEL_AMP_AMAX_MAX)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_amp_fp8_init: amax_compute_algo=%d is not an "
                           "accel_amp_amax_algo", (int)d.amax_compute_algo);
    if (d.amax_history_len < 1 || d.amax_history_len > ACCEL__AMP_FP8_MAX_HISTORY)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                           "accel_amp_fp8_init: amax_history_len=%d must be in [1, %d]", d.amax_history_len,
                           ACCEL__AMP_FP8_MAX_HISTORY);
    if (d.margin < -1000 || d.margin > 1000)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_amp_fp8_init: margin=%d must be in [-1000, 1000]",
                           d.margin);
    n = (size_t)d.num_forward + (size_t)d.num_backward;
    cells = n * (size_t)d.amax_history_len;
    if (cells > ((size_t)1 << 28))
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_amp_fp8_init: %zu slots x history %d is too large",
                           n, d.amax_history_len);
    f->scale = (float *)accel_host_alloc(acc, sizeof(float) * (2 * n + cells));
    if (!f->scale) return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "accel_amp_fp8_init: %zu slots", n);
    f->scale_inv = f->scale + n;
    f->amax_history = f->scale + 2 * n;
    for (k = 0; k < (int)n; ++k) { f->scale[k] = 1.0f; f->scale_inv[k] = 1.0f; }
    memset(f->amax_history, 0, sizeof(float) * cells);
    f->acc = acc;
    f->num_tensors = (int)n;
    f->num_forward = d.num_forward;
    f->fp8_format = d.fp8_format;
    f->margin = d.margin;
    f->amax_history_len = d.amax_history_len;
    f->amax_compute_algo = d.amax_compute_algo;
    f->local_amax = d.local_amax ? 1 : 0;
    f->no_saturate = d.no_saturate ? 1 : 0;
    return ACCEL_OK;
}

ACCEL__DEF void accel_amp_fp8_deinit(accel_amp_fp8 *f) {
    if (!f) return;
    if (f->acc) {
        accel_host_free(f->acc, f->scale);
        if (f->amax_device) accel_device_free(f->acc, f->amax_device);
    }
    memset(f, 0, sizeof *f);
}

ACCEL__DEF accel_dtype accel_amp_fp8_dtype(const accel_amp_fp8 *f, int slot) {
    if (!f || !f->acc || slot < 0 || slot >= f->num_tensors) return ACCEL_DTYPE_INVALID;
    return (slot >= f->num_forward && f->fp8_format == ACCEL_AMP_FP8_HYBRID) ? ACCEL_F8_E5M2 : ACCEL_F8_E4M3;
}

static accel_result accel__amp_fp8_obj(const accel_amp_fp8 *f, const char *what) {
    if (!f) return ACCEL__FAIL(NULL, ACCEL_ERR_INVALID_ARGUMENT, "%s: the fp8 object is NULL", what);
    if (!f->acc)
        return ACCEL__FAIL(NULL, ACCEL_ERR_STATE,
                           "%s: the fp8 object is not initialized (accel_amp_fp8_init failed, was "
                           "not called, or accel_amp_fp8_deinit was)",
                           what);
    return ACCEL_OK;
}

/* Validates a quantize (q = 1) or dequantize (q = 0) list: the high-precision side hp (F32/F16/BF16), the fp8 side
   of the slot's dtype, equal element counts, non-NULL data. */
static accel_result accel__amp_fp8_check(const accel_amp_fp8 *f, const int *slots, const accel_tensor *hp,
                                         const accel_tensor *f8, int n, const char *what) {
    accel *acc = f->acc;
    int i;
    if (n < 0 || (n > 0 && (!hp || !f8)))
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: bad buffer lists (n %d)", what, n);
    for (i = 0; i < n; ++i) {
        int slot = slots ? slots[i] : i;
        int64_t a = accel_tensor_numel(&hp[i]), b = accel_tensor_numel(&f8[i]);
        const char *nm = hp[i].name ? hp[i].name : f8[i].name ? f8[i].name : "(unnamed)";
        accel_dtype want;
        if (slot < 0 || slot >= f->num_tensors)
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: buffer %d \"%s\": slot %d is not in [0, %d)", what,
                               i, nm, slot, f->num_tensors);
        want = accel_amp_fp8_dtype(f, slot);
        if (a < 0 || b < 0)
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: buffer %d \"%s\" has an invalid shape", what, i,
                               nm);
        if (a != b)
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                               "%s: buffer %d \"%s\": %lld elements vs %lld in its fp8 "
                               "buffer",
                               what, i, nm, (long long)a, (long long)b);
        if (!accel__amp_is16or32(hp[i].dtype))
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                               "%s: buffer %d \"%s\" has dtype %s (need F32, F16 or BF16)", what, i, nm,
                               accel_dtype_name(hp[i].dtype) ? accel_dtype_name(hp[i].dtype) : "invalid");
        if (f8[i].dtype != want)
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                               "%s: buffer %d \"%s\": slot %d is %s (a %s slot of a %s "
                               "recipe), the fp8 buffer is %s",
                               what, i, nm, slot, accel_dtype_name(want),
                               slot < f->num_forward ? "forward" : "backward",
                               f->fp8_format == ACCEL_AMP_FP8_HYBRID ? "HYBRID" : "E4M3",
                               accel_dtype_name(f8[i].dtype) ? accel_dtype_name(f8[i].dtype) : "invalid");
        if (a > 0 && (!hp[i].ptr || !f8[i].ptr))
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: buffer %d \"%s\" has NULL data", what, i, nm);
    }
    return ACCEL_OK;
}

#ifdef __CUDACC__
/* One launch for a quantize (q = 1) or dequantize list; the amax stays on the device (f->amax_device). */
static accel_result accel__amp_fp8_launch(accel_amp_fp8 *f, int q, const int *slots, const accel_tensor *src,
                                          const accel_tensor *dst, int n) {
    accel *acc = f->acc;
    accel__amp_mt *h;
    accel__amp_kp kp;
    accel_result r;
    int i;
    if (q && !f->amax_device) {
        f->amax_device = accel_device_alloc(acc, sizeof(float) * (size_t)f->num_tensors);
        if (!f->amax_device) return accel__fail_wrap(acc, acc->last_result, "accel_amp_fp8_quantize: the device amax");
        ACCEL__CUDA_CHECK(acc, cudaMemsetAsync(f->amax_device, 0, sizeof(float) * (size_t)f->num_tensors,
                                               (cudaStream_t)acc->stream));
    }
    h = (accel__amp_mt *)accel_host_alloc(acc, sizeof(accel__amp_mt) * (size_t)(n > 0 ? n : 1));
    if (!h) return ACCEL_ERR_OUT_OF_MEMORY;
    for (i = 0; i < n; ++i) {
        int slot = slots ? slots[i] : i;
        memset(&h[i], 0, sizeof h[i]);
        h[i].a = src[i].ptr; h[i].b = dst[i].ptr; h[i].n = (long long)accel_tensor_numel(&src[i]);
        h[i].ta = (unsigned char)src[i].dtype; h[i].tb = (unsigned char)dst[i].dtype;
        h[i].scale = q ? f->scale[slot] : f->scale_inv[slot];
        h[i].slot = slot;
    }
    memset(&kp, 0, sizeof kp);
    kp.mode = !f->no_saturate;
    kp.amax = (unsigned int *)f->amax_device;
    r = accel__amp_exec(acc, q ? ACCEL__AMP_K_FP8Q : ACCEL__AMP_K_FP8D, h, n, &kp, NULL, q ? "accel_amp_fp8_quantize"
                                                                                       : "accel_amp_fp8_dequantize");
    accel_host_free(acc, h);
    return r;
}
#endif

ACCEL__DEF accel_result accel_amp_fp8_quantize(accel_amp_fp8 *f, const int *slots, const accel_tensor *src,
                                               const accel_tensor *dst, int n) {
    static const char what[] = "accel_amp_fp8_quantize";
    accel_result r;
    int i;
    if ((r = accel__amp_fp8_obj(f, what)) != ACCEL_OK) return r;
    if ((r = accel__amp_fp8_check(f, slots, src, dst, n, what)) != ACCEL_OK) return r;
    if (f->acc->device < 0) {
        for (i = 0; i < n; ++i) {
            int slot = slots ? slots[i] : i;
            float *row0 = &f->amax_history[slot];
            uint32_t m = accel__amp_cpu_fp8q(src[i].ptr, src[i].dtype, (uint8_t *)dst[i].ptr,
                                             (size_t)accel_tensor_numel(&src[i]), f->scale[slot],
                                             dst[i].dtype == ACCEL_F8_E5M2, !f->no_saturate);
            float a = accel_bits_f32(m);
            if (a > *row0) *row0 = a; /* a NaN recorded by hand stays */
        }
        return ACCEL_OK;
    }
#ifdef __CUDACC__
    return accel__amp_fp8_launch(f, 1, slots, src, dst, n);
#else
    return accel__amp_no_cuda(f->acc, what);
#endif
}

ACCEL__DEF accel_result accel_amp_fp8_dequantize(accel_amp_fp8 *f, const int *slots, const accel_tensor *src,
                                                 const accel_tensor *dst, int n) {
    static const char what[] = "accel_amp_fp8_dequantize";
    accel_result r;
    int i;
    if ((r = accel__amp_fp8_obj(f, what)) != ACCEL_OK) return r;
    if ((r = accel__amp_fp8_check(f, slots, dst, src, n, what)) != ACCEL_OK) return r;
    if (f->acc->device < 0) {
        for (i = 0; i < n; ++i) {
            int slot = slots ? slots[i] : i;
            accel__amp_cpu_fp8d((const uint8_t *)src[i].ptr, src[i].dtype == ACCEL_F8_E5M2, dst[i].ptr, dst[i].dtype,
                                (size_t)accel_tensor_numel(&src[i]), f->scale_inv[slot]);
        }
        return ACCEL_OK;
    }
#ifdef __CUDACC__
    return accel__amp_fp8_launch(f, 0, slots, src, dst, n);
#else
    return accel__amp_no_cuda(f->acc, what);
#endif
}

ACCEL__DEF accel_result accel_amp_fp8_record_amax(accel_amp_fp8 *f, int slot, float amax) {
    static const char what[] = "accel_amp_fp8_record_amax";
    accel_result r;
    float *row0;
    if ((r = accel__amp_fp8_obj(f, what)) != ACCEL_OK) return r;
    if (slot < 0 || slot >= f->num_tensors)
        return ACCEL__FAIL(f->acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: slot %d is not in [0, %d)", what, slot,
                           f->num_tensors);
    if (amax < 0.0f)
        return ACCEL__FAIL(f->acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: amax %g is negative", what, (double)amax);
    row0 = &f->amax_history[slot];
    if (amax != amax || amax > *row0) *row0 = amax;
    return ACCEL_OK;
}

/* TE's delayed-scaling update of one slot (transformer_engine/common/recipe/delayed_scaling.cu, kernel_bulk), on the
   host: `last` is this step's amax after the cross-rank reduction. */
static void accel__amp_fp8_rule(float *hist, int len, int n, int k, float last, int algo, float scaled_max,
                                float *scale, float *scale_inv) {
    float amax = 0.0f, s;
    int i;
    if (last != 0.0f) { /* a zero step leaves the history as it is (NaN is not zero) */
        for (i = 0; i < len; ++i) {
            float a = i < len - 1 ? hist[(size_t)(i + 1) * (size_t)n + (size_t)k] : last;
            amax = fmaxf(amax, a); /* fmaxf: NaN entries are not seen */
            hist[(size_t)i * (size_t)n + (size_t)k] = i > 0 ? a : 0.0f;
        }
    }
    if (algo == ACCEL_AMP_AMAX_MOST_RECENT) amax = last;
    s = (isfinite(amax) && amax > 0.0f) ? scaled_max / amax : *scale;
    if (isinf(s)) s = FLT_MAX;
    *scale = s;
    *scale_inv = 1.0f / s;
}

ACCEL__DEF accel_result accel_amp_fp8_update(accel_amp_fp8 *f) {
    static const char what[] = "accel_amp_fp8_update";
    accel *acc;
    accel_result r = ACCEL_OK;
    double *v;
    int n, k, collective;
    if ((r = accel__amp_fp8_obj(f, what)) != ACCEL_OK) return r;
    acc = f->acc;
    n = f->num_tensors;
    collective = !f->local_amax && acc->num_processes > 1;
    if (collective && !strcmp(accel_host_group_name(acc), "none"))
        return ACCEL__FAIL(
            acc, ACCEL_ERR_UNSUPPORTED,
            "%s: the amaxes must be reduced across %d processes, but there is no host process group "
            "(launched by %s without MPI, and no collectives context installed itself yet): build with "
            "MPI, create the accel_coll first, or set accel_amp_fp8_desc.local_amax (nothing was changed)",
            what, acc->num_processes, accel_launcher_name(acc->launcher));
    v = (double *)accel_host_alloc(acc, sizeof(double) * ((size_t)n + 1));
    if (!v) r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "%s", what);
    for (k = 0; r == ACCEL_OK && k < n; ++k) v[k] = (double)f->amax_history[k];
#ifdef __CUDACC__
    if (r == ACCEL_OK && f->amax_device) {
        /* this step's amax from the kernels: fp32 bits, max-merged with what was recorded on the host */
        cudaStream_t st = (cudaStream_t)acc->stream;
        uint32_t *dev = (uint32_t *)accel_host_alloc(acc, sizeof(uint32_t) * (size_t)n);
        cudaError_t e = cudaSuccess;
        if (!dev) r = accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "%s", what);
        if (r == ACCEL_OK)
            e = cudaMemcpyAsync(dev, f->amax_device, sizeof(uint32_t) * (size_t)n, cudaMemcpyDeviceToHost, st);
        if (r == ACCEL_OK && e == cudaSuccess) e = cudaStreamSynchronize(st);
        if (r == ACCEL_OK && e != cudaSuccess)
            r = ACCEL__FAIL(acc, ACCEL_ERR_CUDA, "%s: reading the amax back: %s", what, cudaGetErrorString(e));
        for (k = 0; r == ACCEL_OK && k < n; ++k) {
            double a = (double)accel_bits_f32(dev[k]);
            if (a > v[k]) v[k] = a; /* a NaN v[k] stays */
        }
        accel_host_free(acc, dev);
    }
#endif
    if (collective) {
        /* MAX over the ranks (the core's MAX lets NaN win on every rank alike). A rank whose local part failed joins
           with its rank + 1 in the last value, so no rank waits for it until the deadline. */
        accel_result r2;
        if (!v) { /* no memory for the values: join with a 1-value call, which the other ranks' n+1 refuse (MISMATCH) */
            double one = 1.0 + (double)acc->process_index;
            (void)accel_host_allreduce_f64(acc, &one, 1, ACCEL_HOST_MAX);
            return r;
        }
        if (r != ACCEL_OK) for (k = 0; k < n; ++k) v[k] = 0.0;
        v[n] = r != ACCEL_OK ? 1.0 + (double)acc->process_index : 0.0;
        r2 = accel_host_allreduce_f64(acc, v, n + 1, ACCEL_HOST_MAX);
        if (r == ACCEL_OK && r2 != ACCEL_OK)
            r = accel__fail_wrap(acc, r2, "%s: MAX of the amaxes across ranks (nothing changed)", what);
        else if (r == ACCEL_OK && v[n] != 0.0)
            r = ACCEL__FAIL(acc, ACCEL_ERR_REMOTE, "%s failed on rank %d (see its accel_last_error); nothing changed",
                            what, (int)v[n] - 1);
    }
    if (r == ACCEL_OK) {
        for (k = 0; k < n; ++k) {
            accel_dtype t = accel_amp_fp8_dtype(f, k);
            float fp8_max = t == ACCEL_F8_E5M2 ? ACCEL_AMP_E5M2_MAX : ACCEL_AMP_E4M3_MAX;
            float scaled_max = fp8_max * powf(2.0f, (float)-f->margin); /* TE: fp8_max * std::pow(2.f, -margin) */
            accel__amp_fp8_rule(f->amax_history, f->amax_history_len, n, k, (float)v[k], (int)f->amax_compute_algo,
                                scaled_max, &f->scale[k], &f->scale_inv[k]);
        }
        f->updates++;
#ifdef __CUDACC__
        if (f->amax_device)
            r = cudaMemsetAsync(f->amax_device, 0, sizeof(float) * (size_t)n, (cudaStream_t)acc->stream) == cudaSuccess
                    ? ACCEL_OK : ACCEL__FAIL(acc, ACCEL_ERR_CUDA, "%s: clearing the device amax", what);
#endif
    }
    accel_host_free(acc, v);
    return r;
}

ACCEL__DEF accel_result accel_amp_fp8_state_save(void *obj, void *buf, size_t cap, size_t *size) {
    const accel_amp_fp8 *f = (const accel_amp_fp8 *)obj;
    unsigned char *p = (unsigned char *)buf;
    size_t n, cells, need, i;
    accel_result r = accel__amp_fp8_obj(f, "accel_amp_fp8_state_save");
    if (r != ACCEL_OK) return r;
    if (!size) return ACCEL__FAIL(f->acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_amp_fp8_state_save: size is NULL");
    n = (size_t)f->num_tensors;
    cells = n * (size_t)f->amax_history_len;
    need = ACCEL_AMP_FP8_STATE_HEADER_BYTES + 4 * (2 * n + cells);
    *size = need;
    if (!buf || cap < need) return ACCEL_OK; /* the contract: report the size */
    memcpy(p, "AF8S", 4);
    accel__put_u32(p + 4, 1u);
    accel__put_u32(p + 8, (uint32_t)f->num_forward);
    accel__put_u32(p + 12, (uint32_t)(f->num_tensors - f->num_forward));
    accel__put_u32(p + 16, (uint32_t)f->fp8_format);
    accel__put_u32(p + 20, (uint32_t)f->amax_history_len);
    accel__put_u32(p + 24, (uint32_t)f->margin);
    accel__put_u32(p + 28, (uint32_t)f->amax_compute_algo);
    accel__put_u64(p + 32, (uint64_t)f->updates);
    p += ACCEL_AMP_FP8_STATE_HEADER_BYTES;
    for (i = 0; i < 2 * n + cells; ++i)
        accel__put_u32(p + 4 * i, accel_f32_bits(f->scale[i])); /* scale, scale_inv, history */
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_amp_fp8_state_load(void *obj, const void *buf, size_t size) {
    accel_amp_fp8 *f = (accel_amp_fp8 *)obj;
    const unsigned char *p = (const unsigned char *)buf;
    size_t n, cells, need, i;
    accel *acc;
    uint32_t nf, nb, fmt, len, ver;
    int64_t updates;
    accel_result r = accel__amp_fp8_obj(f, "accel_amp_fp8_state_load");
    if (r != ACCEL_OK) return r;
    acc = f->acc;
    if (!buf && size) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_amp_fp8_state_load: NULL buffer");
    n = (size_t)f->num_tensors;
    cells = n * (size_t)f->amax_history_len;
    need = ACCEL_AMP_FP8_STATE_HEADER_BYTES + 4 * (2 * n + cells);
    if (size < ACCEL_AMP_FP8_STATE_HEADER_BYTES)
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "fp8 state: %zu bytes, shorter than its %d-byte header", size,
                           ACCEL_AMP_FP8_STATE_HEADER_BYTES);
    if (memcmp(p, "AF8S", 4) != 0) return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "fp8 state: bad magic (not \"AF8S\")");
    ver = accel__get_u32(p + 4);
    if (ver != 1u)
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "fp8 state: version %u is not supported (1)", (unsigned)ver);
    nf = accel__get_u32(p + 8);
    nb = accel__get_u32(p + 12);
    fmt = accel__get_u32(p + 16);
    len = accel__get_u32(p + 20);
    updates = (int64_t)accel__get_u64(p + 32);
    if (nf != (uint32_t)f->num_forward || nb != (uint32_t)(f->num_tensors - f->num_forward))
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT,
                           "fp8 state: saved with %u forward + %u backward slots, this object has %d + %d",
                           (unsigned)nf, (unsigned)nb, f->num_forward, f->num_tensors - f->num_forward);
    if (fmt != (uint32_t)f->fp8_format)
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "fp8 state: saved with fp8_format %s, this object is %s",
                           fmt == (uint32_t)ACCEL_AMP_FP8_HYBRID ? "HYBRID"
                           : fmt == (uint32_t)ACCEL_AMP_FP8_E4M3 ? "E4M3"
                                                                 : "invalid",
                           f->fp8_format == ACCEL_AMP_FP8_HYBRID ? "HYBRID" : "E4M3");
    if (len != (uint32_t)f->amax_history_len)
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "fp8 state: saved with amax_history_len %u, this object has %d",
                           (unsigned)len, f->amax_history_len);
    if (size != need)
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "fp8 state: %zu bytes, expected %zu", size, need);
    if (updates < 0)
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "fp8 state: update count %lld is negative", (long long)updates);
    p += ACCEL_AMP_FP8_STATE_HEADER_BYTES;
    for (i = 0; i < n; ++i) {
        float s = accel_bits_f32(accel__get_u32(p + 4 * i)), si = accel_bits_f32(accel__get_u32(p + 4 * (n + i)));
        float want = 1.0f / s;
        if (!(s > 0.0f) || !isfinite(s) || accel_f32_bits(si) != accel_f32_bits(want))
            return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT,
                               "fp8 state: slot %zu has scale %g and scale_inv %g (need a finite "
                               "scale > 0 and scale_inv = 1/scale)",
                               i, (double)s, (double)si);
    }
    for (i = 0; i < cells; ++i) {
        uint32_t b = accel__get_u32(p + 4 * (2 * n + i));
        float a = accel_bits_f32(b);
        if ((b >> 31) && a == a)
            return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "fp8 state: amax history entry %zu (step row %zu, slot %zu) is "
                               "negative (%g)", i, i / n, i % n, (double)a);
    }
    for (i = 0; i < 2 * n + cells; ++i) f->scale[i] = accel_bits_f32(accel__get_u32(p + 4 * i));
    f->updates = updates;
#ifdef __CUDACC__
    if (f->amax_device &&
        cudaMemsetAsync(f->amax_device, 0, sizeof(float) * n, (cudaStream_t)acc->stream) != cudaSuccess)
        return ACCEL__FAIL(acc, ACCEL_ERR_CUDA, "fp8 state: clearing the device amax (the state was loaded)");
#endif
    return ACCEL_OK;
}

#endif /* ACCEL_IMPLEMENTATION */

/* accel is released under the MIT licence. Copyright (c) 2026 the accel authors. */
