/* accel_amp.h — mixed precision for accel: precision policy, fp32 <-> fp16/bf16 conversion (round-to-nearest-even and
   stochastic rounding), torch's dynamic loss scaler (GradScaler), fused unscale + non-finite check, gradient clipping
   (clip_grad_norm_, clip_grad_value_) and master-weight copies. CPU and CUDA, same per-element math.

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
       "fp16" fp16 compute, dynamic scaling     "fp8"  ACCEL_ERR_UNSUPPORTED (reserved)

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

   OPTIONS / MACROS
       ACCEL_AMP_CUDA_BLOCK    threads per block of the kernels (default 256; a power of two)
       ACCEL_AMP_CHUNK         elements per multi-tensor chunk (default 65536; a multiple of 8, keeps vector alignment)

   THREADS AND STREAMS
       Buffers live on acc's device (acc->device < 0: host memory). CUDA work is enqueued on acc->stream; a list of
       buffers is one kernel launch (its descriptor array is copied into the Accelerator's device scratch buffer,
       which comes from the device allocator and is reused in stream order: keep amp's work on acc->stream).
       unscale_and_check synchronizes once to read found_inf (one 4-byte copy); clip_grad_norm reads back the
       per-block partial norms (≤ 8 KiB). Conversions and clip_grad_value do not synchronize. A scaler is used by one
       thread at a time.

   DIFFERENCES FROM ACCELERATE / PYTORCH (deliberate)
     - Accelerate creates a GradScaler only for fp16 on a non-CPU device (docs/semantics.md §4); accel also scales
       in fp16 mode on the CPU (the CPU trainer trains in fp16 with dynamic scaling).
       accel_amp_policy.accelerate_would_scale says what Accelerate would do. desc.enabled = ACCEL_ON / ACCEL_OFF
       overrides the policy.
     - Norms are accumulated in float64 (torch: in the gradient's dtype / float32), so the returned norm is more
       accurate; the clip coefficient is then rounded to float32 as torch's is.
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
    accel_precision precision;   /* resolved: ACCEL_PRECISION_NO, _FP16 or _BF16 */
    accel_dtype compute_dtype;   /* ACCEL_F32, ACCEL_F16 or ACCEL_BF16 */
    int loss_scaling;            /* 1 for fp16 (accel scales on every device) */
    int accelerate_would_scale;  /* 1 for fp16 on a CUDA device only (Accelerate's rule) */
} accel_amp_policy;

/* fp8 → ACCEL_ERR_UNSUPPORTED. */
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
    accel_rng_draw4(seed, step, index >> 2, out);
    return out[index & 3u];
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

/* --------------------------------------------------------------------------------------- buffer conversions */
/* Stochastic-rounding parameters: element i of a call uses index index_offset + i. */
typedef struct accel_amp_sr {
    uint64_t seed;
    uint64_t step;
    uint64_t index_offset;
} accel_amp_sr;

/* dst[i] = convert(src[i]) for F32/F16/BF16 in any combination (same dtype = copy). sr != NULL selects stochastic
   rounding (only F32 → BF16). src and dst must not overlap unless they are the same buffer of equal dtype size. */
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

#ifdef __cplusplus
}
#endif
#endif /* ACCEL_AMP_H_INCLUDED */

/* ========================================================================================== implementation */
#if defined(ACCEL_IMPLEMENTATION) && !defined(ACCEL__AMP_IMPL_DONE)
#define ACCEL__AMP_IMPL_DONE

#include <math.h>
#include <string.h>

#ifndef ACCEL_AMP_CUDA_BLOCK
#define ACCEL_AMP_CUDA_BLOCK 256
#endif
#ifndef ACCEL_AMP_CHUNK
#define ACCEL_AMP_CHUNK 65536
#endif
#define ACCEL__AMP_MAX_BLOCKS 1024
#if (ACCEL_AMP_CHUNK % 8) != 0 || ACCEL_AMP_CHUNK <= 0
#error "ACCEL_AMP_CHUNK must be a positive multiple of 8"
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
    case ACCEL_PRECISION_FP8:
        return ACCEL__FAIL(acc, ACCEL_ERR_UNSUPPORTED, "mixed_precision=fp8 is reserved and not implemented yet (use bf16 or fp16)");
    default:
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "mixed_precision=%d is not an accel_precision", (int)acc->mixed_precision);
    }
    return ACCEL_OK;
}

/* ------------------------------------------------------------------------------------------ CPU loops */
static int accel__amp_is16or32(accel_dtype t) { return t == ACCEL_F32 || t == ACCEL_F16 || t == ACCEL_BF16; }

/* The hot loops are written as blocks of 16 with a constant trip count so that GCC's -O2 cost model ("very cheap")
   vectorizes them too (with -O3 / -march=native any loop shape would do). */
#define ACCEL__AMP_BLK 16

static uint32_t accel__amp_cpu_unscale_f32(float *ACCEL_RESTRICT g, size_t n, float inv) {
    uint32_t bad = 0;
    size_t i = 0, j;
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
    for (; i + ACCEL__AMP_BLK <= n; i += ACCEL__AMP_BLK)
        for (j = 0; j < ACCEL__AMP_BLK; ++j) d[i + j] = accel_f32_to_bf16(s[i + j]);
    for (; i < n; ++i) d[i] = accel_f32_to_bf16(s[i]);
}
static void accel__amp_cpu_f32_to_f16(const float *ACCEL_RESTRICT s, uint16_t *ACCEL_RESTRICT d, size_t n) {
    size_t i;
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
    while (i < n && (idx & 3u)) { d[i] = accel_amp_f32_to_bf16_sr(s[i], accel_amp_sr_bits(sr->seed, sr->step, idx)); ++i; ++idx; }
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
    return accel_f16_to_f32(((const uint16_t *)p)[i]);
}
static void accel__amp_store(void *p, accel_dtype t, size_t i, float v) {
    if (t == ACCEL_F32) ((float *)p)[i] = v;
    else if (t == ACCEL_BF16) ((uint16_t *)p)[i] = accel_f32_to_bf16(v);
    else ((uint16_t *)p)[i] = accel_f32_to_f16(v);
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
    if (st == ACCEL_F32 && dt == ACCEL_F16) { accel__amp_cpu_f32_to_f16((const float *)src, (uint16_t *)dst, n); return; }
    if (st == ACCEL_BF16 && dt == ACCEL_F32) { accel__amp_cpu_bf16_to_f32((const uint16_t *)src, (float *)dst, n); return; }
    if (st == ACCEL_F16 && dt == ACCEL_F32) { accel__amp_cpu_f16_to_f32((const uint16_t *)src, (float *)dst, n); return; }
    for (i = 0; i < n; ++i) accel__amp_store(dst, dt, i, accel__amp_load(src, st, i)); /* f16 <-> bf16 */
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

/* ------------------------------------------------------------------------------------------ CUDA kernels */
enum { ACCEL__AMP_K_UNSCALE = 0, ACCEL__AMP_K_CONVERT, ACCEL__AMP_K_NORM, ACCEL__AMP_K_SCALE, ACCEL__AMP_K_CLAMP };

typedef struct accel__amp_mt {
    void *a;                 /* the buffer (source for convert) */
    void *b;                 /* destination for convert */
    long long n;             /* elements */
    long long chunk_begin;   /* first global chunk of this buffer */
    int ta, tb;              /* accel_dtype of a and b */
    long long pad;
} accel__amp_mt;

typedef struct accel__amp_kparams {
    float f0, f1;            /* inv_scale | coef | clamp lo, hi */
    double p;                /* norm type */
    int is_inf;
    int use_sr;
    unsigned long long seed, step, index_offset;
} accel__amp_kparams;

#ifdef __CUDACC__
static __device__ int accel__amp_find(const accel__amp_mt *d, int nt, long long c) {
    int lo = 0, hi = nt - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (d[mid].chunk_begin <= c) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}
static __device__ float accel__amp_dload(const void *p, int t, long long i) {
    if (t == ACCEL_F32) return ((const float *)p)[i];
    if (t == ACCEL_BF16) return accel_bf16_to_f32(((const uint16_t *)p)[i]);
    return accel_f16_to_f32(((const uint16_t *)p)[i]);
}
static __device__ void accel__amp_dstore(void *p, int t, long long i, float v) {
    if (t == ACCEL_F32) ((float *)p)[i] = v;
    else if (t == ACCEL_BF16) ((uint16_t *)p)[i] = accel_f32_to_bf16(v);
    else ((uint16_t *)p)[i] = accel_f32_to_f16(v);
}

/* One kernel for every multi-tensor operation: block b walks chunks b, b+grid, ...; in each chunk the threads
   stride over the elements (16-byte vectors for aligned fp32). */
static __global__ void accel__amp_kernel(int kind, const accel__amp_mt *d, int nt, long long nchunks,
                                         accel__amp_kparams kp, int *found, double *partials) {
    __shared__ double red[ACCEL_AMP_CUDA_BLOCK];
    unsigned bad = 0;
    double acc = 0.0;
    long long c;
    for (c = blockIdx.x; c < nchunks; c += gridDim.x) {
        int t = accel__amp_find(d, nt, c);
        long long start = (c - d[t].chunk_begin) * (long long)ACCEL_AMP_CHUNK;
        long long len = d[t].n - start;
        long long i;
        int ta = d[t].ta;
        if (len > ACCEL_AMP_CHUNK) len = ACCEL_AMP_CHUNK;
        if (kind == ACCEL__AMP_K_UNSCALE) {
            if (ta == ACCEL_F32) {
                float *p = (float *)d[t].a + start;
                long long nv = (((size_t)p & 15u) == 0) ? len / 4 : 0;
                float4 *p4 = (float4 *)p;
                for (i = threadIdx.x; i < nv; i += blockDim.x) {
                    float4 v = p4[i];
                    bad |= accel_amp_nonfinite(v.x) | accel_amp_nonfinite(v.y) | accel_amp_nonfinite(v.z) |
                           accel_amp_nonfinite(v.w);
                    v.x = accel_amp_unscale1(v.x, kp.f0); v.y = accel_amp_unscale1(v.y, kp.f0);
                    v.z = accel_amp_unscale1(v.z, kp.f0); v.w = accel_amp_unscale1(v.w, kp.f0);
                    p4[i] = v;
                }
                for (i = nv * 4 + threadIdx.x; i < len; i += blockDim.x) {
                    float v = p[i];
                    bad |= accel_amp_nonfinite(v);
                    p[i] = accel_amp_unscale1(v, kp.f0);
                }
            } else {
                for (i = threadIdx.x; i < len; i += blockDim.x) {
                    float v = accel__amp_dload(d[t].a, ta, start + i);
                    bad |= accel_amp_nonfinite(v);
                    accel__amp_dstore(d[t].a, ta, start + i, accel_amp_unscale1(v, kp.f0));
                }
            }
        } else if (kind == ACCEL__AMP_K_CONVERT) {
            int tb = d[t].tb;
            if (ta == ACCEL_F32 && tb == ACCEL_BF16 && !kp.use_sr && (((size_t)((float *)d[t].a + start) & 15u) == 0) &&
                (((size_t)((uint16_t *)d[t].b + start) & 7u) == 0)) {
                const float4 *s4 = (const float4 *)((const float *)d[t].a + start);
                uint2 *d2 = (uint2 *)((uint16_t *)d[t].b + start);
                long long nv = len / 4;
                for (i = threadIdx.x; i < nv; i += blockDim.x) {
                    float4 v = s4[i];
                    uint2 o;
                    o.x = (unsigned)accel_f32_to_bf16(v.x) | ((unsigned)accel_f32_to_bf16(v.y) << 16);
                    o.y = (unsigned)accel_f32_to_bf16(v.z) | ((unsigned)accel_f32_to_bf16(v.w) << 16);
                    d2[i] = o;
                }
                for (i = nv * 4 + threadIdx.x; i < len; i += blockDim.x)
                    ((uint16_t *)d[t].b)[start + i] = accel_f32_to_bf16(((const float *)d[t].a)[start + i]);
            } else if (kp.use_sr) { /* F32 → BF16 stochastic */
                for (i = threadIdx.x; i < len; i += blockDim.x) {
                    unsigned long long idx = kp.index_offset + (unsigned long long)(start + i);
                    ((uint16_t *)d[t].b)[start + i] = accel_amp_f32_to_bf16_sr(
                        ((const float *)d[t].a)[start + i], accel_amp_sr_bits(kp.seed, kp.step, idx));
                }
            } else {
                for (i = threadIdx.x; i < len; i += blockDim.x)
                    accel__amp_dstore(d[t].b, tb, start + i, accel__amp_dload(d[t].a, ta, start + i));
            }
        } else if (kind == ACCEL__AMP_K_NORM) {
            for (i = threadIdx.x; i < len; i += blockDim.x) {
                float v = accel__amp_dload(d[t].a, ta, start + i);
                if (kp.is_inf) acc = accel__amp_max_nan(acc, v < 0 ? -(double)v : (double)v);
                else acc += accel__amp_pow_term(v, kp.p);
            }
        } else if (kind == ACCEL__AMP_K_SCALE) {
            if (ta == ACCEL_F32) {
                float *p = (float *)d[t].a + start;
                long long nv = (((size_t)p & 15u) == 0) ? len / 4 : 0;
                float4 *p4 = (float4 *)p;
                for (i = threadIdx.x; i < nv; i += blockDim.x) {
                    float4 v = p4[i];
                    v.x *= kp.f0; v.y *= kp.f0; v.z *= kp.f0; v.w *= kp.f0;
                    p4[i] = v;
                }
                for (i = nv * 4 + threadIdx.x; i < len; i += blockDim.x) p[i] *= kp.f0;
            } else {
                for (i = threadIdx.x; i < len; i += blockDim.x)
                    accel__amp_dstore(d[t].a, ta, start + i, accel__amp_dload(d[t].a, ta, start + i) * kp.f0);
            }
        } else { /* clamp */
            for (i = threadIdx.x; i < len; i += blockDim.x)
                accel__amp_dstore(d[t].a, ta, start + i,
                                  accel_amp_clamp1(accel__amp_dload(d[t].a, ta, start + i), kp.f0, kp.f1));
        }
    }
    if (kind == ACCEL__AMP_K_UNSCALE && bad) *found = 1;
    if (kind == ACCEL__AMP_K_NORM) {
        unsigned s;
        red[threadIdx.x] = acc;
        __syncthreads();
        for (s = blockDim.x / 2; s > 0; s >>= 1) {
            if (threadIdx.x < s) {
                double o = red[threadIdx.x + s];
                red[threadIdx.x] = kp.is_inf ? accel__amp_max_nan(red[threadIdx.x], o) : red[threadIdx.x] + o;
            }
            __syncthreads();
        }
        if (threadIdx.x == 0) partials[blockIdx.x] = red[0];
    }
}

/* Copies the descriptors into the Accelerator's device scratch (persistent, from the device allocator; reused in
   stream order, so everything here stays on acc->stream), runs one launch over every buffer, and reads back
   found_inf / partials (only when asked: one synchronization). The host table may be freed on return (a pageable
   host-to-device cudaMemcpyAsync has staged it by then). */
static accel_result accel__amp_launch(accel *acc, int kind, const accel__amp_mt *h, int nt, long long nchunks,
                                      const accel__amp_kparams *kp, int *found_out, double *partials_out,
                                      int *nblocks_out) {
    cudaStream_t st = (cudaStream_t)acc->stream;
    unsigned char *scratch;
    size_t dbytes = sizeof(accel__amp_mt) * (size_t)nt;
    size_t off_found = (dbytes + 15u) & ~(size_t)15u;
    size_t off_part = off_found + 16u;
    size_t total = off_part + sizeof(double) * ACCEL__AMP_MAX_BLOCKS;
    int blocks = (int)(nchunks < ACCEL__AMP_MAX_BLOCKS ? nchunks : ACCEL__AMP_MAX_BLOCKS);
    int dev_found = 0;
    if (nblocks_out) *nblocks_out = blocks;
    if (found_out) *found_out = 0;
    if (nchunks <= 0) return ACCEL_OK;
    scratch = (unsigned char *)accel__device_scratch(acc, total);
    if (!scratch) return accel__fail_wrap(acc, acc->last_result, "amp kernel arguments (%zu bytes)", total);
    ACCEL__CUDA_CHECK(acc, cudaMemcpyAsync(scratch, h, dbytes, cudaMemcpyHostToDevice, st));
    if (found_out) ACCEL__CUDA_CHECK(acc, cudaMemsetAsync(scratch + off_found, 0, 4, st));
    accel__amp_kernel<<<blocks, ACCEL_AMP_CUDA_BLOCK, 0, st>>>(kind, (const accel__amp_mt *)scratch, nt, nchunks, *kp,
                                                              (int *)(scratch + off_found), (double *)(scratch + off_part));
    ACCEL__CUDA_CHECK(acc, cudaGetLastError());
    if (found_out) ACCEL__CUDA_CHECK(acc, cudaMemcpyAsync(&dev_found, scratch + off_found, 4, cudaMemcpyDeviceToHost, st));
    if (partials_out)
        ACCEL__CUDA_CHECK(acc, cudaMemcpyAsync(partials_out, scratch + off_part, sizeof(double) * (size_t)blocks,
                                               cudaMemcpyDeviceToHost, st));
    if (found_out || partials_out) ACCEL__CUDA_CHECK(acc, cudaStreamSynchronize(st));
    if (found_out) *found_out = dev_found != 0;
    return ACCEL_OK;
}
#endif /* __CUDACC__ */

#ifndef __CUDACC__
static accel_result accel__amp_no_cuda(accel *acc, const char *what) {
    return ACCEL__FAIL(acc, ACCEL_ERR_UNSUPPORTED,
                       "%s on CUDA device %d needs the kernels: compile the ACCEL_IMPLEMENTATION TU with nvcc", what,
                       acc->device);
}
#endif

#ifdef __CUDACC__
/* Builds the descriptor table of a list (empty buffers left out). */
static accel_result accel__amp_table(accel *acc, const accel_tensor *ts, int count, accel__amp_mt **out, int *nt,
                                     long long *nchunks) {
    int i, k = 0;
    long long c = 0;
    accel__amp_mt *h;
    *out = NULL; *nt = 0; *nchunks = 0;
    h = (accel__amp_mt *)accel_host_alloc(acc, sizeof(accel__amp_mt) * (size_t)(count > 0 ? count : 1));
    if (!h) return ACCEL_ERR_OUT_OF_MEMORY;
    for (i = 0; i < count; ++i) {
        int64_t n = accel_tensor_numel(&ts[i]);
        if (n == 0) continue;
        memset(&h[k], 0, sizeof h[k]);
        h[k].a = ts[i].ptr; h[k].b = NULL; h[k].n = (long long)n; h[k].chunk_begin = c;
        h[k].ta = (int)ts[i].dtype; h[k].tb = 0;
        c += (n + ACCEL_AMP_CHUNK - 1) / ACCEL_AMP_CHUNK;
        ++k;
    }
    *out = h; *nt = k; *nchunks = c;
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
        if (n < 0) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: buffer %d \"%s\" has an invalid shape", what, i, nm);
        if (!accel__amp_is16or32(ts[i].dtype))
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "%s: buffer %d \"%s\" has dtype %s (need F32, F16 or BF16)",
                               what, i, nm, accel_dtype_name(ts[i].dtype) ? accel_dtype_name(ts[i].dtype) : "invalid");
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
        accel__amp_mt *h = (accel__amp_mt *)accel_host_alloc(acc, sizeof(accel__amp_mt) * (size_t)(count > 0 ? count : 1));
        accel__amp_kparams kp;
        accel_result r;
        long long c = 0;
        int k = 0;
        if (!h) return ACCEL_ERR_OUT_OF_MEMORY;
        memset(&kp, 0, sizeof kp);
        if (sr) { kp.use_sr = 1; kp.seed = sr->seed; kp.step = sr->step; kp.index_offset = sr->index_offset; }
        for (i = 0; i < count; ++i) {
            if (n[i] == 0) continue;
            if (st[i] == dt[i]) { /* a copy: the copy engine does it */
                cudaError_t e = src[i] == dst[i] ? cudaSuccess
                                                 : cudaMemcpyAsync(dst[i], src[i], n[i] * accel_dtype_size(st[i]),
                                                                   cudaMemcpyDeviceToDevice, (cudaStream_t)acc->stream);
                if (e != cudaSuccess) {
                    accel_host_free(acc, h);
                    return ACCEL__FAIL(acc, ACCEL_ERR_CUDA, "cudaMemcpyAsync failed: %s", cudaGetErrorString(e));
                }
                continue;
            }
            memset(&h[k], 0, sizeof h[k]);
            h[k].a = (void *)src[i]; h[k].b = dst[i]; h[k].n = (long long)n[i]; h[k].chunk_begin = c;
            h[k].ta = (int)st[i]; h[k].tb = (int)dt[i];
            c += ((long long)n[i] + ACCEL_AMP_CHUNK - 1) / ACCEL_AMP_CHUNK;
            ++k;
        }
        r = accel__amp_launch(acc, ACCEL__AMP_K_CONVERT, h, k, c, &kp, NULL, NULL, NULL);
        accel_host_free(acc, h);
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
    if (!accel__amp_is16or32(src_dtype) || !accel__amp_is16or32(dst_dtype))
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_amp_convert: %s -> %s is not supported (F32, F16, BF16)",
                           accel_dtype_name(src_dtype) ? accel_dtype_name(src_dtype) : "invalid",
                           accel_dtype_name(dst_dtype) ? accel_dtype_name(dst_dtype) : "invalid");
    if (sr && !(src_dtype == ACCEL_F32 && dst_dtype == ACCEL_BF16))
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_amp_convert: stochastic rounding is only F32 -> BF16 (got %s -> %s)",
                           accel_dtype_name(src_dtype), accel_dtype_name(dst_dtype));
    if (n == 0) return ACCEL_OK;
    if (!src || !dst) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_amp_convert: NULL buffer");
    if (n > (size_t)INT64_MAX / 4) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_amp_convert: n=%zu is too large", n);
    if (src == dst && accel_dtype_size(src_dtype) != accel_dtype_size(dst_dtype))
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_amp_convert: in-place conversion between sizes %zu and %zu",
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
    if (count > 0 && !out) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_amp_convert_to_fp32: out is NULL");
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
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "scaler: init_scale=%g must be finite and > 0", (double)d.init_scale);
    if (!(d.growth_factor > 1.0) || d.growth_factor != d.growth_factor || d.growth_factor > 1e30)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "scaler: growth_factor=%g must be > 1 (as torch)", d.growth_factor);
    if (!(d.backoff_factor > 0.0 && d.backoff_factor < 1.0))
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "scaler: backoff_factor=%g must be in (0, 1)", d.backoff_factor);
    if (d.growth_interval < 0)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "scaler: growth_interval=%d must be > 0", d.growth_interval);
    if (d.enabled != ACCEL_DEFAULT && d.enabled != ACCEL_ON && d.enabled != ACCEL_OFF)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "scaler: enabled=%d must be ACCEL_DEFAULT, ACCEL_ON or ACCEL_OFF",
                           (int)d.enabled);
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
        return ACCEL__FAIL(NULL, ACCEL_ERR_STATE, "%s: the scaler is not initialized (accel_amp_scaler_init failed, was "
                           "not called, or accel_amp_scaler_deinit was)", what);
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
        return ACCEL__FAIL(acc, ACCEL_ERR_UNSUPPORTED,
                           "%s: found_inf must be OR-ed across %d processes, but there is no host process group (launched "
                           "by %s without MPI, and no collectives context installed itself yet): build with MPI, create "
                           "the accel_coll first, or set accel_amp_scaler_desc.local_found_inf when every rank holds the "
                           "same (already reduced) gradients (nothing was changed)",
                           what, acc->num_processes, accel_launcher_name(acc->launcher));
    if (s->unscaled)
        r = ACCEL__FAIL(acc, ACCEL_ERR_STATE,
                        "%s was already called since the last update (torch: \"unscale_() has already been called on this "
                        "optimizer since the last update()\")", what);
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
        int nt, f = 0;
        long long nc;
        accel__amp_kparams kp;
        r = accel__amp_table(acc, grads, count, &h, &nt, &nc);
        if (r == ACCEL_OK) {
            memset(&kp, 0, sizeof kp);
            kp.f0 = inv;
            r = accel__amp_launch(acc, ACCEL__AMP_K_UNSCALE, h, nt, nc, &kp, &f, NULL, NULL);
            accel_host_free(acc, h);
        }
        bad = (uint32_t)f;
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
        if (r2 != ACCEL_OK) return accel__fail_wrap(acc, r2, "%s: OR of found_inf across ranks (this rank's gradients were unscaled)", what);
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
            return ACCEL__FAIL(s->acc, ACCEL_ERR_STATE,
                               "accel_amp_update: no accel_amp_unscale_and_check in this step (torch: \"No inf checks were "
                               "recorded prior to update.\")");
        if (s->dynamic)
            accel_amp_update_scale_rule(&s->scale, &s->growth_tracker, s->found_inf, s->growth_factor, s->backoff_factor,
                                        s->growth_interval);
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

ACCEL__DEF accel_result accel_amp_scaler_state_load(void *scaler, const void *buf, size_t size) {
    accel_amp_scaler *s = (accel_amp_scaler *)scaler;
    const unsigned char *p = (const unsigned char *)buf;
    accel *acc = s ? s->acc : NULL;
    float scale;
    double g, b;
    uint64_t u;
    int32_t interval, tracker;
    uint32_t ver;
    if (!s || (!buf && size))
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_amp_scaler_state_load: NULL %s", s ? "buffer" : "scaler");
    if (size != ACCEL_AMP_SCALER_STATE_BYTES)
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "scaler state: %zu bytes, expected %d", size, ACCEL_AMP_SCALER_STATE_BYTES);
    if (memcmp(p, "AMPS", 4) != 0) return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "scaler state: bad magic (not \"AMPS\")");
    ver = accel__get_u32(p + 4);
    if (ver != 1u) return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "scaler state: version %u is not supported (1)", (unsigned)ver);
    scale = accel_bits_f32(accel__get_u32(p + 8));
    u = accel__get_u64(p + 12);
    memcpy(&g, &u, 8);
    u = accel__get_u64(p + 20);
    memcpy(&b, &u, 8);
    interval = (int32_t)accel__get_u32(p + 28);
    tracker = (int32_t)accel__get_u32(p + 32);
    if (!(scale >= 0.0f) || accel_amp_nonfinite(scale))
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "scaler state: scale %g is not finite and >= 0", (double)scale);
    if (!(g > 1.0) || g > 1e30) return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "scaler state: growth_factor %g is not > 1", g);
    if (!(b > 0.0 && b < 1.0)) return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "scaler state: backoff_factor %g is not in (0, 1)", b);
    if (interval <= 0) return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "scaler state: growth_interval %d is not > 0", (int)interval);
    if (tracker < 0 || tracker >= interval)
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "scaler state: growth_tracker %d is not in [0, %d)", (int)tracker, (int)interval);
    s->scale = scale;
    s->growth_factor = g;
    s->backoff_factor = b;
    s->growth_interval = interval;
    s->growth_tracker = tracker;
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
        r = ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "clip_grad_norm: norm_type=%g must be > 0 (or HUGE_VAL for inf)", norm_type);
    else r = accel__amp_check_list(acc, grads, count, "clip_grad_norm");
    /* sharded: a bad call on one rank fails every rank with its message (ACCEL_ERR_REMOTE elsewhere), nothing changed */
    if (sharded) r = accel__agree(acc, r, "clip_grad_norm (sharded; argument check)");
    if (r != ACCEL_OK) return r;
    if (acc->device < 0) {
        for (i = 0; i < count; ++i)
            accel__amp_cpu_norm(grads[i].ptr, grads[i].dtype, (size_t)accel_tensor_numel(&grads[i]), norm_type, is_inf, &sum);
    } else {
#ifdef __CUDACC__
        accel__amp_mt *h;
        int nt, nb = 0;
        long long nc = 0;
        accel__amp_kparams kp;
        double part[ACCEL__AMP_MAX_BLOCKS];
        r = accel__amp_table(acc, grads, count, &h, &nt, &nc);
        if (r == ACCEL_OK) {
            memset(&kp, 0, sizeof kp);
            kp.p = norm_type;
            kp.is_inf = is_inf;
            r = accel__amp_launch(acc, ACCEL__AMP_K_NORM, h, nt, nc, &kp, NULL, part, &nb);
            accel_host_free(acc, h);
        }
        for (i = 0; r == ACCEL_OK && i < nb && nc > 0; ++i) sum = is_inf ? accel__amp_max_nan(sum, part[i]) : sum + part[i];
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
            return ACCEL__FAIL(acc, ACCEL_ERR_REMOTE, "clip_grad_norm: computing the local norm failed on another rank (see "
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

ACCEL__DEF accel_result accel_amp_grad_norm(accel *acc, const accel_tensor *grads, int count, double norm_type, int flags,
                                            double *total_norm) {
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
        int nt;
        long long nc;
        accel__amp_kparams kp;
        accel_result r = accel__amp_table(acc, grads, count, &h, &nt, &nc);
        if (r != ACCEL_OK) return r;
        memset(&kp, 0, sizeof kp);
        kp.f0 = f0;
        kp.f1 = f1;
        r = accel__amp_launch(acc, kind, h, nt, nc, &kp, NULL, NULL, NULL);
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
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_amp_clip_grad_value: clip_value=%g must be >= 0", clip_value);
    r = accel__amp_check_list(acc, grads, count, "clip_grad_value");
    if (r != ACCEL_OK) return r;
    v = (float)clip_value;
    return accel__amp_apply(acc, grads, count, ACCEL__AMP_K_CLAMP, -v, v);
}

#endif /* ACCEL_IMPLEMENTATION */

/* accel is released under the MIT licence. Copyright (c) 2026 the accel authors. */
