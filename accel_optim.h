/* accel_optim.h — fused AdamW and SGD for accel over lists of buffers, with torch.optim's exact update, parameter
   groups, learning-rate schedules and checkpointable state. CPU and CUDA run the same per-element math.

   CONTENTS
     USAGE                          a step with groups, a schedule and checkpoints; the fused inputs
     THE UPDATE                     AdamW, SGD, the gradient's preprocessing and the model copy, as torch computes them
     BF16 MOMENTS                   moment_dtype = ACCEL_BF16: the rounding rule and its accuracy
     STEP COUNTS AND SKIPPED STEPS  per-parameter counts, found_inf
     LEARNING-RATE SCHEDULES        constant, linear, cosine (transformers' lambdas)
     CHECKPOINTS                    the moments as tensors (F32 or BF16), the rest as bytes
     OPTIONS                        desc fields, macros, flags
     CUDA                           the launches, and which parameters take the vector path
     THREADS AND STREAMS
     DESIGN FOR ZeRO                an optimizer over shard views
     HOST STEP                      desc.offload: pinned host state, the step on the CPU (ZeRO-Offload)
     DIFFERENCES FROM TORCH

   USAGE (fp32 master weights, bf16 gradients and a bf16 model copy; on CUDA every buffer lives on acc's device)
       accel_tensor params[3] = {...};                   // F32 master weights: name, ptr, dtype, ndim, shape
       accel_tensor grads[3] = {...};                    // F32 / BF16 / F16, same shapes (ptr NULL: no gradient)
       accel_tensor model[3] = {...};                    // BF16 / F16 copies written by the step (or desc.model NULL)
       accel_optim_group groups[2] = {{0}};
       groups[0].count = 2; groups[0].weight_decay = 0.1;   // params[0..1]: the weights
       groups[1].count = 1; groups[1].weight_decay = 0.0;   // params[2]: biases and LayerNorm gains, no decay
       accel_optim_desc od = {0};                        // zero = default (C++: accel_optim_desc od = {};)
       od.algorithm = ACCEL_OPTIM_ADAMW;                 // betas (0.9, 0.999), eps 1e-8 by default
       od.lr = 6e-4;
       od.params = params; od.grads = grads; od.model = model; od.nparams = 3;
       od.groups = groups; od.ngroups = 2;
       accel_optim *opt;
       if (accel_optim_create(&acc, &od, &opt) != ACCEL_OK) die(accel_last_error(&acc));
       accel_optim_schedule sch = {ACCEL_OPTIM_SCHEDULE_COSINE, 100, 5000, 0.1, 0.0};  // warmup, total, floor
       const accel_tensor *mom; int nmom;                // checkpoints: the moments as tensors, the rest as bytes
       accel_optim_state_tensors(opt, &mom, &nmom);
       accel_ckpt_register_optimizer(ck, mom, nmom);     // optimizer.safetensors: state.<i>.exp_avg, ...
       accel_ckpt_register(ck, "optim_state", accel_optim_state_save, accel_optim_state_load, opt);
       ...
       // each optimizer step (after the gradients are reduced):
       accel_optim_apply_schedule(opt, &sch, acc.scheduler_steps);   // lr of every group = its base lr × factor
       accel_optim_step(opt, NULL);                      // one pass: params, moments, model copy
       ...
       accel_optim_destroy(opt);

     Fused inputs (all optional; what torch's fused AdamW takes as grad_scale / found_inf, plus clipping):
       accel_optim_step_args sa = {0};
       sa.inv_scale = (float)(1.0 / loss_scale);         // unscale inside the step (amp's rule: float(1 / scale))
       sa.clip_coef = &coef;                             // coef = accel_optim_clip_coef(total_norm, max_norm), or:
       sa.grad_norm = d_norm; sa.max_norm = 1.0;         // the total norm where it lies (device memory on CUDA):
                                                         // the step computes that coefficient itself, no host read
       sa.found_inf = d_found_inf;                       // int32 that your kernels set on overflow (device memory on
       accel_optim_step(opt, &sa);                       // CUDA): nonzero skips the step without a host round trip
     With accel_amp.h's scaler, which unscales the gradients in place and returns found_inf on the host, leave
     inv_scale 0 and step only when found_inf is 0: if (!found_inf) accel_optim_step(opt, &sa);

   THE UPDATE (per element, float32; every scalar below is rounded to float32 first, as torch casts Python scalars to
   the tensor dtype; fma = one rounding, as torch's AVX2/AVX-512/NEON kernels compute add(alpha)/addcmul; all other
   operations round separately). t = this parameter's step count after the increment (1 on its first step).
     gradient  g = grad (F32, or BF16/F16 widened exactly); inv_scale: g = r(g * inv_scale), clip_coef:
               g = r(g * clip_coef), where r rounds to the gradient's dtype (what unscaling and clipping in place
               do); maximize: g = -g.
     AdamW     (torch.optim.AdamW, foreach=False; torch 1.13 adamw.py _single_tensor_adamw and torch 2.x adamw.py /
               adam.py with decoupled_weight_decay are the same sequence, except the first moment, see moment_rule)
               p  = p * (1 - lr*wd)                                   param.mul_(1 - lr * weight_decay)
               m  = fma(g, 1-b1, m * b1)                              exp_avg.mul_(beta1).add_(grad, alpha=1-beta1)
                    [ACCEL_OPTIM_MOMENT_LERP: m = fma(w, g - m, m) with w = 1-b1 if |w| < 0.5, else
                     m = fma(w - 1, g - m, g)                         exp_avg.lerp_(grad, 1-beta1), torch 2.x]
               v  = fma((1-b2) * g, g, v * b2)                        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1-b2)
               amsgrad: vmax = max(vmax, v) (NaN wins), and vmax replaces v below
               d  = sqrt(v) / sqrt(1 - b2^t) + eps                    (exp_avg_sq.sqrt() / bc2_sqrt).add_(eps)
               p  = p + (-(lr / (1 - b1^t)) * m) / d                  param.addcdiv_(exp_avg, denom, value=-step_size)
               The scalars 1 - lr*wd, 1 - b^t, lr / (1 - b1^t) and sqrt(1 - b2^t) are computed in double, as Python
               does (b^t by binary powering — exact to about 1e-15, identical on CPU and GPU — where Python calls
               pow()), then rounded to float32 where torch uses them.
     SGD       (torch.optim.SGD, foreach=False; torch 1.13 and 2.x sgd.py _single_tensor_sgd are identical)
               wd != 0:        g = fma(p, wd, g)                      grad.add(param, alpha=weight_decay)
               momentum != 0:  first step of this parameter: buf = g  torch.clone(grad)
                               later:  buf = fma(g, 1 - dampening, buf * momentum)
                               nesterov: g = fma(buf, momentum, g), else g = buf
               p = fma(g, -lr, p)                                     param.add_(grad, alpha=-lr)
     model copy  model = bf16(p) or f16(p) round to nearest even (accel_f32_to_bf16 / _f16), or, for BF16 with
               ACCEL_OPTIM_ROUND_STOCHASTIC, accel_optim_f32_to_bf16_sr(p, accel_optim_sr_bits(sr_seed, t, index))
               where index = desc.index_offset + (elements of the parameters before this one) + element index: the
               rule of accel_amp.h's stochastic rounding (accel_amp_master_to_model with sr = {sr_seed, t, that
               offset} gives the same bits).
   The fused step equals, bit for bit, unscaling and clipping the gradients in place, then stepping, then writing the
   model copy (tests/unit/optim). Against torch 1.13 (Debian's, AVX2 kernels) every value of the tests' 8 runs of 20
   steps is bit-identical (parameters, moments, step counts, learning rates); where torch's CPU kernels do not fuse
   (its DEFAULT capability, no FMA) torch differs from both by an ulp per operation.

   BF16 MOMENTS (desc.moment_dtype = ACCEL_BF16; AdamW without amsgrad)
     exp_avg and exp_avg_sq are stored as BF16 (16 instead of 32 bytes of state per parameter; a step moves 20 bytes
     per parameter with F32 gradients instead of 28). Each step widens them exactly, runs the update above in
     float32 (d and the parameter use the new moments before rounding), then stores them with stochastic rounding
     (accel_optim_f32_to_bf16_sr): element index (as for the model copy) draws r = accel_optim_sr_bits(sr_seed,
     t | 2^63, index), word index % 4 of the Philox4x32-10 block (sr_seed, stream t | 2^63, counter index / 4) —
     one block serves 4 elements, 32 bits each — and exp_avg takes the low 16 bits of r, exp_avg_sq the high 16
     (r >> 16). The same bits on CPU and GPU, independent of the model copy's draws (stream t). Accuracy
     (tests/unit/optim test_bf16_accuracy): after 1000 steps on the quadratic 1/2 sum a_i (x_i - c_i)^2 (a_i from
     0.01 to 10, x_0 = 0, lr 1e-2 with a cosine decay to 0, weight_decay 0.01) every parameter is within
     1e-3 * max|x_0 - c| of a float64 AdamW run's, and the loss within 3e-8 * the initial loss of that run's (F32
     moments: 1e-5 and 1e-8).

   STEP COUNTS AND SKIPPED STEPS (torch keeps state["step"] per parameter; accel too)
     Each parameter has its own step count t, incremented by every step in which it had a gradient (grad ptr
     NULL = torch's p.grad None: the parameter and its state are untouched and its count stays). The optimizer's own
     count (accel_optim_step_count) is incremented by every step that was taken. found_inf != 0 skips the whole
     step: parameters, moments, model copy and every count stay as they were. torch's fused AdamW does the same
     (_fused_adamw adds 1 to state_steps, the kernel returns early on found_inf, then subtracts found_inf). On
     CUDA the counts live on the device and found_inf is read there, so a step is enqueued without a host round
     trip; reading a count (accel_optim_step_count, _param_steps, state_save) synchronizes acc->stream.

   LEARNING-RATE SCHEDULES (pure functions of a step count s; as transformers' schedules through LambdaLR:
   lr = base_lr * factor(s); W = warmup_steps, T = total_steps; for s < W every kind gives s / max(1, W))
     CONSTANT  factor = 1                                                    (get_constant_schedule_with_warmup)
     LINEAR    factor = max(0, (T - s) / max(1, T - W))                      (get_linear_schedule_with_warmup)
     COSINE    q = (s - W) / max(1, T - W); c = 0.5 * (1 + cos(pi * num_cycles * 2 * q));
               factor = max(0, c * (1 - min_lr_ratio) + min_lr_ratio)      (get_cosine_with_min_lr_schedule_with_
               warmup with min_lr_rate; get_cosine_schedule_with_warmup when min_lr_ratio = 0; num_cycles 0 → 0.5)
     Computed in double exactly as those Python lambdas are (same libm cos), so lr is bit-identical to LambdaLR's.
     Which step count: acc->scheduler_steps gives Accelerate's rule (AcceleratedScheduler steps P times per optimizer
     step unless split_batches, docs/semantics.md §4); accel_optim_step_count gives "per optimizer step".

   CHECKPOINTS (the core contract accel_state_save_fn / accel_state_load_fn; docs/semantics.md §5)
     accel_optim_state_tensors: the moments as F32 tensors (BF16 with moment_dtype BF16) in acc's device memory
     (pinned host memory with desc.offload),
     torch's state_dict keys:
       "state.<i>.exp_avg", "state.<i>.exp_avg_sq" (+ "state.<i>.max_exp_avg_sq" with amsgrad) for AdamW,
       "state.<i>.momentum_buffer" for SGD with momentum (none without), i = the parameter's index in desc.params.
     accel_optim_state_save/_load: everything else as little-endian bytes (ACCEL_OPTIM_STATE_BYTES(G, N)):
       "AOPT", u32 version 1, u32 algorithm, u32 flags (1 amsgrad, 2 maximize, 4 nesterov, 8 lerp moment rule,
       16 momentum buffers), i32 groups G, i32 params N, f64 beta1, beta2, eps, momentum, dampening,
       i64 optimizer steps; per group: i32 count, i32 0, f64 lr, f64 base lr, f64 weight_decay; per param:
       i64 numel, i64 step; u64 FNV-1a of all the bytes before it.
     Load validates everything first (size, magic, version, checksum, ranges, and that the algorithm, amsgrad,
     momentum buffers, groups and parameter sizes match this optimizer), then restores the hyperparameters, learning
     rates and step counts, as torch's load_state_dict does. The moments come back through the checkpoint's tensors;
     accel_ckpt's load_state converts F32 moments into BF16 ones (round to nearest even) and back (exactly), so a
     run resumes with the other moment_dtype. sr_seed and index_offset are configuration, not state: give them
     again when resuming.

   OPTIONS
     desc field        zero means                        notes
     algorithm         ACCEL_OPTIM_ADAMW                 or ACCEL_OPTIM_SGD
     lr                1e-3 (torch's default)            group lr 0 → desc.lr; an explicit zero: ACCEL_OPTIM_ZERO
     weight_decay      0 (none)                          torch AdamW's default is 1e-2: set it; used when no groups
     beta1, beta2      0.9, 0.999                        ACCEL_OPTIM_ZERO for a true 0
     eps               1e-8                              ACCEL_OPTIM_ZERO for a true 0
     momentum, dampening, nesterov, amsgrad, maximize    0 / off, as torch
     moment_rule       torch 1.x mul + add               ACCEL_OPTIM_MOMENT_LERP: torch 2.x's lerp_
     model_rounding    round to nearest even             ACCEL_OPTIM_ROUND_STOCHASTIC (BF16 copies), sr_seed
     index_offset      0                                 element index of params[0] in the whole model (shards)
     moment_dtype      ACCEL_F32                         ACCEL_BF16: AdamW without amsgrad (BF16 MOMENTS)
     offload           0: state and step on acc's device  nonzero: pinned host state, the CPU step (HOST STEP)
     An empty list (nparams 0) is an error, as torch's "optimizer got an empty parameter list".
     step_args: clip_coef or grad_norm + max_norm (both: an error naming them; max_norm NaN, or nonzero without
     grad_norm: an error). The coefficient from grad_norm is accel_optim_clip_coef(*grad_norm, max_norm) bit for bit.
     Macros (the CUDA launch shape; speed, never results — bench/optim/sweep_gpu.sh times bench/optim/variants.txt):
       ACCEL_OPTIM_CHUNK          elements per CUDA block (2048; a multiple of 8) of the kernels without a Philox stream
       ACCEL_OPTIM_CHUNK_SR       the same for the kernels with one (BF16 moments or a stochastic copy; 8192)
       ACCEL_OPTIM_CUDA_BLOCK     threads per block (256; a power of two, 32 to 1024)
       ACCEL_OPTIM_CUDA_U         vectors of 8 elements a thread loads before its first store (1; 1 to 4)
       ACCEL_OPTIM_CUDA_FAST      1: the vector path's square root and divisions without a branch (below), 0: nvcc's
       ACCEL_OPTIM_CUDA_MINB      blocks of 256 threads per SM the launch bound keeps (3: 80 registers a thread)
       ACCEL_OPTIM_CUDA_MINB_SR   the same for a stochastic copy with F32 moments (2: 128 registers)
       ACCEL_OPTIM_CUDA_MINB_MOM16  the same for BF16 moments (3)
     ACCEL_OPTIM_NO_DISPATCH: no run-time choice of the AVX2+FMA loop.
     Speed (never results): compile the ACCEL_IMPLEMENTATION TU with -fno-math-errno (the project's build does), or
     sqrtf stays a libm call per element and the CPU loop does not vectorize; on x86 GCC/Clang builds without FMA
     in -march the step picks an AVX2+FMA loop at run time when the CPU has it; elsewhere without hardware FMA
     the fused multiply-add is emulated exactly in double (slower, same bits).
     Results: the bits do not depend on flags, except that nvcc's --use_fast_math (or -ftz=true) changes the device
     results (flushed subnormals, approximate division); GCC's GNU-mode -ffp-contract=fast is neutralized per
     function.

   CUDA
     A step is a one-block kernel that reads found_inf (and grad_norm), counts the step and computes each
     parameter's constants and the clip coefficient, then one multi-tensor kernel per kind of parameter present
     (a block per ACCEL_OPTIM_CHUNK elements of one parameter; up to 160 parameters a launch, whose buffers travel
     as the kernel parameter: CUDA 12.1 or later), chosen on the host per step, never per element. The vector path
     reads and writes every stream in 16-byte vectors of 8 elements; it takes AdamW (either moment rule) without
     amsgrad, F32 or BF16 gradients, no copy or a BF16 one (nearest or stochastic), F32 or BF16 moments, when the
     parameter, its gradient and its copy reach 16-byte alignment at the same element (the moments are laid out to
     follow the parameter): e.g. buffers from cudaMalloc, or one flat buffer per stream with the same element
     offsets. Everything else (SGD, amsgrad, F16 gradients or copies, buffers misaligned against each other) goes
     through the generic kernel, element by element. Both give the same bits as the CPU (unscale, clip coefficient,
     maximize, found_inf included); the few elements before the first aligned one and after the last whole vector
     go one by one. With ACCEL_OPTIM_CUDA_FAST the vector path computes sqrt(v) and the two divisions of AdamW with
     the fast sequences of nvcc's own correctly rounded __fsqrt_rn / __fdiv_rn (the multi-function unit's
     approximation, a Newton step, a residual correction), without their per-element branch to the slow path, on
     operands where those sequences are exact (sqrt: v in [2^-101, FLT_MAX] as nvcc tests it; a / b: 2^-60 <=
     |a|, b < 2^60); a vector with an operand outside (zero moments aside: exact zeros are handled) is computed
     again with __fsqrt_rn / __fdiv_rn. tests/gpu/optim (optim-fast-gpu) checks the square root for every float in
     range and the division and the update on 2^30 operands against nvcc's operations on the device.

   THREADS AND STREAMS
     An optimizer is used by one thread at a time; accel_optim_step is local (not a collective). CPU runs are one
     thread. On CUDA the launches run on acc->stream with the tensor list in the core's device scratch; nothing
     synchronizes. The buffers must not be used by other streams during the step.

   DESIGN FOR ZeRO (accel_zero.h partitions and communicates: accel_zero_*): an optimizer over a shard
   is an optimizer over views — params/grads/model are the shard's contiguous pieces (1-D accel_tensors, one per
   parameter, empty outside the shard, so groups and state keys keep their indices), and index_offset is the
   shard's first element in the whole flattened list, so stochastic rounding draws the same bits as the unsharded
   run and every element's math is unchanged: the sharded result equals the unsharded one bit for bit. State
   tensors and step counts are per view. For checkpoints that load on another partition,
   accel_optim_shard_state_save/_load (obj: accel_optim_shard_state {opt, full}) write the state bytes with the
   whole parameters' element counts (full[i]) instead of the views' and put this optimizer's back on load; the
   moments go through accel_zero_export/_import (see accel_zero.h CHECKPOINTS).

   HOST STEP (desc.offload: DeepSpeed's offload_optimizer, ZeRO-Offload): the moments and step counts live in
   pinned host memory (acc's pinned allocator) and every step runs the CPU loop, also when acc has a device — over
   params/grads/model the host can address (pinned or host memory: accel_zero_fsdp's offloaded shard views, whose
   F32 master, gradient and param_dtype copy are pinned; the next gathers stage the updated copy to the device).
   found_inf and grad_norm are then host pointers. On CUDA the step first synchronizes acc->stream (the gradients'
   producers, e.g. unscaling kernels, are enqueued there), then computes on the calling thread; nothing is left
   enqueued. Same per-element math as the device kernels and the CPU run (fma exact on every target), so an
   offloaded step gives the same bits as one on the device.

   DIFFERENCES FROM TORCH (deliberate)
     - weight_decay defaults to 0 (torch AdamW: 1e-2), so zero-initialized descriptors mean "no decay".
     - Parameter groups share every hyperparameter except lr and weight_decay.
     - Gradients may be BF16/F16 with F32 parameters (torch requires equal dtypes); they are widened exactly.
     - The fused step reads the gradients and never writes them (torch's unscale_/clip_grad_norm_ modify them).
     - SGD keeps a step count per parameter (torch's SGD keeps none; its "momentum_buffer is None" is t == 0 here).
     - b^t is computed by binary powering instead of pow() (≤ 1e-15 relative; identical on CPU and GPU).
     - fma is exact on every target (hardware, or emulated), so the CPU and CUDA results are identical bit for bit;
       torch's results depend on its CPU capability and differ between its CPU and CUDA kernels.
     - Stochastic rounding of the model copy has no torch counterpart; nor have BF16 moments with F32 parameters
       (torch's AdamW keeps its state in the parameters' dtype).
*/
#ifndef ACCEL_OPTIM_H_INCLUDED
#define ACCEL_OPTIM_H_INCLUDED
#include "accel.h"
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* An explicit zero for desc fields whose zero value means "default" (lr, beta1, beta2, eps): negative zero. */
#define ACCEL_OPTIM_ZERO (-0.0)

typedef enum accel_optim_algorithm {
    ACCEL_OPTIM_ADAMW = 0, /* torch.optim.AdamW */
    ACCEL_OPTIM_SGD        /* torch.optim.SGD */
} accel_optim_algorithm;

typedef enum accel_optim_moment_rule {
    ACCEL_OPTIM_MOMENT_DEFAULT = 0, /* = ACCEL_OPTIM_MOMENT_MUL_ADD */
    ACCEL_OPTIM_MOMENT_MUL_ADD,     /* torch 1.x: exp_avg.mul_(beta1).add_(grad, alpha=1-beta1) */
    ACCEL_OPTIM_MOMENT_LERP         /* torch 2.x: exp_avg.lerp_(grad, 1-beta1) */
} accel_optim_moment_rule;

typedef enum accel_optim_rounding {
    ACCEL_OPTIM_ROUND_NEAREST = 0, /* model copy: round to nearest even */
    ACCEL_OPTIM_ROUND_STOCHASTIC   /* model copy (BF16 only): accel_amp.h's stochastic rounding rule */
} accel_optim_rounding;

/* A parameter group: `count` consecutive parameters of desc.params (groups cover the list in order). */
typedef struct accel_optim_group {
    int count;
    double lr;           /* 0 → desc.lr (ACCEL_OPTIM_ZERO for 0); the group's base lr for schedules */
    double weight_decay; /* taken as is: 0 = no decay (not inherited from desc.weight_decay) */
} accel_optim_group;

typedef struct accel_optim_desc {
    accel_optim_algorithm algorithm;
    /* Lists of nparams entries; descriptors and names are copied, the memory stays the caller's (acc's device). */
    const accel_tensor *params; /* F32 master weights */
    const accel_tensor *grads;  /* F32/BF16/F16, numel equal to the param's; NULL list or NULL ptr: no gradient */
    const accel_tensor *model;  /* NULL, or BF16/F16 copies written by every step (NULL ptr: no copy of that one) */
    int nparams;
    const accel_optim_group *groups; /* NULL: one group with desc.lr and desc.weight_decay */
    int ngroups;
    double lr;                  /* 0 → 1e-3 */
    double weight_decay;        /* 0 → none */
    double beta1, beta2;        /* AdamW: 0 → 0.9, 0.999 */
    double eps;                 /* AdamW: 0 → 1e-8 */
    int amsgrad;                /* AdamW */
    accel_optim_moment_rule moment_rule; /* AdamW */
    double momentum;            /* SGD: 0 → none */
    double dampening;           /* SGD */
    int nesterov;               /* SGD: needs momentum > 0 and dampening 0 (as torch) */
    int maximize;
    accel_optim_rounding model_rounding;
    uint64_t sr_seed;           /* stochastic rounding key (model copy, BF16 moments) */
    uint64_t index_offset;      /* global element index of params[0] (stochastic rounding; shards) */
    accel_dtype moment_dtype;   /* AdamW: exp_avg, exp_avg_sq as 0/ACCEL_F32 or ACCEL_BF16 (stochastic rounding) */
    int offload;                /* nonzero: state in pinned host memory, the step on the CPU (HOST STEP) */
} accel_optim_desc;

/* Optional inputs of one step (NULL args = none of them). */
typedef struct accel_optim_step_args {
    float inv_scale;          /* 0 → no unscaling; else gradients are multiplied by it (1 / loss scale) */
    const float *clip_coef;   /* host pointer or NULL: gradients are multiplied by *clip_coef (0 is a valid value) */
    const int32_t *found_inf; /* NULL, or a flag in acc's device memory (host memory on a CPU run or with
                                 desc.offload): nonzero skips */
    const double *grad_norm;  /* NULL, or the total gradient norm in acc's device memory (host memory on a CPU run or
                                 with desc.offload):
                                 the step clips with accel_optim_clip_coef(*grad_norm, max_norm), computed on the
                                 device without a host read; not together with clip_coef */
    double max_norm;          /* with grad_norm (NaN refused; nonzero without grad_norm refused) */
} accel_optim_step_args;

typedef struct accel_optim accel_optim;

ACCEL_API accel_result accel_optim_create(accel *acc, const accel_optim_desc *desc, accel_optim **out);
ACCEL_API void accel_optim_destroy(accel_optim *opt); /* NULL ok */
/* One optimizer step over every parameter that has a gradient. Local; on CUDA asynchronous on acc->stream. */
ACCEL_API accel_result accel_optim_step(accel_optim *opt, const accel_optim_step_args *args);
/* Re-points the gradients (n == the number of params; same shapes, F32/BF16/F16; NULL ptr = no gradient). */
ACCEL_API accel_result accel_optim_set_grads(accel_optim *opt, const accel_tensor *grads, int n);

ACCEL_API int accel_optim_num_groups(const accel_optim *opt);
/* group -1: every group. lr >= 0 and finite. */
ACCEL_API accel_result accel_optim_set_lr(accel_optim *opt, int group, double lr);
ACCEL_API double accel_optim_lr(const accel_optim *opt, int group);      /* current lr (-1 for a bad group) */
ACCEL_API double accel_optim_base_lr(const accel_optim *opt, int group); /* the lr it was created with (initial_lr) */

/* Taken steps of the optimizer, and of each parameter (out: nparams values). Synchronize on CUDA. */
ACCEL_API accel_result accel_optim_step_count(accel_optim *opt, int64_t *steps);
ACCEL_API accel_result accel_optim_param_steps(accel_optim *opt, int64_t *steps, int n);

/* The moments as tensors (owned by opt, valid until destroy) for accel_ckpt_register_optimizer; see the manual. */
ACCEL_API accel_result accel_optim_state_tensors(accel_optim *opt, const accel_tensor **tensors, int *n);
/* The core state contract (accel_state_save_fn / accel_state_load_fn); obj is an accel_optim *. */
#define ACCEL_OPTIM_STATE_BYTES(ngroups, nparams) (80u + 32u * (size_t)(ngroups) + 16u * (size_t)(nparams))
ACCEL_API accel_result accel_optim_state_save(void *opt, void *buf, size_t cap, size_t *size);
ACCEL_API accel_result accel_optim_state_load(void *opt, const void *buf, size_t size);
/* The bytes decoded without an optimizer (tools: `accel ckpt ls`): the parser and format checks of
   accel_optim_state_load (header, size, checksum, flags, hyperparameter and counter ranges: ACCEL_ERR_FORMAT naming
   the problem); whether they fit an optimizer is load's business. Also reads accel_optim_shard_state_save's bytes
   (the whole parameters' element counts). acc may be NULL. Once decode succeeded, _group and _param read group g's
   and parameter i's entries of the same bytes. */
typedef struct accel_optim_state_info {
    accel_optim_algorithm algorithm;
    int amsgrad, maximize, nesterov, lerp, momentum_buffer; /* the flags; momentum_buffer: SGD keeps one */
    int ngroups, nparams;
    double beta1, beta2, eps, momentum, dampening;
    int64_t steps; /* the optimizer's taken steps */
} accel_optim_state_info;
ACCEL_API accel_result accel_optim_state_decode(accel *acc, const void *buf, size_t size, accel_optim_state_info *out);
ACCEL_API void accel_optim_state_decode_group(const void *buf, int g, int *nparams, double *lr, double *base_lr,
                                              double *weight_decay);
ACCEL_API void accel_optim_state_decode_param(const void *buf, int ngroups, int i, int64_t *numel, int64_t *steps);

/* ZeRO checkpoints (an optimizer over shard views, see DESIGN FOR ZeRO): the state bytes of accel_optim_state_save
   with each whole parameter's element count (numel of full[i]) in place of its view's, the checksum recomputed, so
   that they load into the shard optimizer of any partition (the load checks the whole counts, then puts this
   optimizer's view counts back). obj: an accel_optim_shard_state, for accel_ckpt_register. */
typedef struct accel_optim_shard_state {
    accel_optim *opt;
    const accel_tensor *full; /* nparams entries: the whole parameters (only their shapes are read) */
} accel_optim_shard_state;
ACCEL_API accel_result accel_optim_shard_state_save(void *state, void *buf, size_t cap, size_t *size);
ACCEL_API accel_result accel_optim_shard_state_load(void *state, const void *buf, size_t size);

/* ----------------------------------------------------------------------------------------- schedules */
typedef enum accel_optim_schedule_kind {
    ACCEL_OPTIM_SCHEDULE_CONSTANT = 0,
    ACCEL_OPTIM_SCHEDULE_LINEAR,
    ACCEL_OPTIM_SCHEDULE_COSINE
} accel_optim_schedule_kind;

typedef struct accel_optim_schedule {
    accel_optim_schedule_kind kind;
    int64_t warmup_steps;
    int64_t total_steps;  /* LINEAR, COSINE */
    double min_lr_ratio;  /* COSINE: the floor as a fraction of the base lr (transformers' min_lr_rate) */
    double num_cycles;    /* COSINE: 0 → 0.5 (half a cosine from the base lr to the floor) */
} accel_optim_schedule;

/* The multiplier of the base lr at step count `step` (formulas in the manual). NaN for an invalid schedule. */
ACCEL_API double accel_optim_schedule_factor(const accel_optim_schedule *s, int64_t step);
/* Every group's lr = its base lr × accel_optim_schedule_factor(s, step). */
ACCEL_API accel_result accel_optim_apply_schedule(accel_optim *opt, const accel_optim_schedule *s, int64_t step);

/* torch.nn.utils.clip_grad_norm_'s coefficient for step_args.clip_coef: min(1, max_norm / (total_norm + 1e-6)) in
   float32, computed as torch does (reciprocal(total + 1e-6f) * max_norm). */
ACCEL_API float accel_optim_clip_coef(double total_norm, double max_norm);

/* ------------------------------------------------------------ element-wise helpers (CPU and CUDA, public) */
/* The stochastic-rounding bits of element `index` for stream `stream` (the parameter's step count): the rule of
   accel_amp.h, accel_rng_draw4(seed, stream, index / 4)[index % 4]. */
static ACCEL_INLINE ACCEL_HD uint32_t accel_optim_sr_bits(uint64_t seed, uint64_t stream, uint64_t index) {
    uint32_t out[4];
    accel_rng_draw4(seed, stream, index >> 2, out);
    return (index & 2u) ? ((index & 1u) ? out[3] : out[2]) : ((index & 1u) ? out[1] : out[0]); /* no computed index:
                                                                                               registers on a GPU */
}
/* fp32 → bf16 with stochastic rounding: the low 16 bits of rnd are added below the bf16 mantissa, then the result is
   truncated (E[result] = f). NaN → 0x7FFF (the core codec's NaN), ±Inf stays, finite values may round to ±Inf. */
static ACCEL_INLINE ACCEL_HD uint16_t accel_optim_f32_to_bf16_sr(float f, uint32_t rnd) {
    uint32_t u = accel_f32_bits(f);
    uint32_t a = u & 0x7fffffffu;
    uint32_t r = (a == 0x7f800000u) ? (u >> 16) : ((u + (rnd & 0xffffu)) >> 16);
    return (uint16_t)(a > 0x7f800000u ? 0x7fffu : r);
}

#ifdef __cplusplus
}
#endif
#endif /* ACCEL_OPTIM_H_INCLUDED */

/* ========================================================================================== implementation */
#if defined(ACCEL_IMPLEMENTATION) && !defined(ACCEL__OPTIM_IMPL_DONE)
#define ACCEL__OPTIM_IMPL_DONE
/* CONTENTS
     1. element-wise math (ACCEL_HD: the CPU loops and the CUDA kernels call the same functions)
     2. CPU loops (and their AVX2+FMA twin chosen at run time)
     3. CUDA kernels and their launcher
     4. create / destroy / set_grads
     5. the step
     6. learning rates, schedules, step counts
     7. saved state */
#include <math.h>
#include <stdio.h>
#include <string.h>

#ifndef ACCEL_OPTIM_CUDA_BLOCK
#define ACCEL_OPTIM_CUDA_BLOCK 256
#endif
/* Chunk sizes as measured on an H200 (bench/optim/sweep_gpu.sh, GPT-2 124M list): the kernels without a Philox
   stream ran best with 2048 elements a block (F32 gradients 0.95x of a copy against 0.89x with 8192), those with
   one (BF16 moments, a stochastic copy) with 8192 (2048: 0.52-0.73x against 0.66-0.81x): each block sets up its
   stream once per chunk. */
#ifndef ACCEL_OPTIM_CHUNK
#define ACCEL_OPTIM_CHUNK 2048 /* one round of a vector of 8 per thread of a 256-thread block */
#endif
#ifndef ACCEL_OPTIM_CHUNK_SR
#define ACCEL_OPTIM_CHUNK_SR 8192 /* four rounds */
#endif
#if ACCEL_OPTIM_CHUNK <= 0 || ACCEL_OPTIM_CHUNK_SR <= 0
#error "ACCEL_OPTIM_CHUNK and ACCEL_OPTIM_CHUNK_SR must be positive"
#endif
#if (ACCEL_OPTIM_CUDA_BLOCK & (ACCEL_OPTIM_CUDA_BLOCK - 1)) != 0 || ACCEL_OPTIM_CUDA_BLOCK < 32 ||                     \
        ACCEL_OPTIM_CUDA_BLOCK > 1024
#error "ACCEL_OPTIM_CUDA_BLOCK must be a power of two in [32, 1024]"
#endif
#define ACCEL__OPTIM_MAX_BLOCKS 65536
#define ACCEL__OPTIM_STAGGER_BYTES 4160 /* between two state slabs beyond their contents: 4 KiB + 64 B */

/* Element-wise helpers are force-inlined: the CPU loops vectorize only once the math is inlined into them. */
#if defined(__CUDACC__)
#define ACCEL__OPTIM_HDI static __forceinline__ ACCEL_HD
#define ACCEL__OPTIM_HI static __forceinline__
#elif defined(__GNUC__) || defined(__clang__)
#define ACCEL__OPTIM_HDI static ACCEL_INLINE __attribute__((always_inline))
#define ACCEL__OPTIM_HI static ACCEL_INLINE __attribute__((always_inline))
#else
#define ACCEL__OPTIM_HDI static ACCEL_INLINE
#define ACCEL__OPTIM_HI static ACCEL_INLINE
#endif
/* No FP contraction in the functions that run the math on the host: a product that torch rounds must stay rounded
   even under GCC's GNU-mode default -ffp-contract=fast with FMA in -march (ISO modes are already off; Clang
   contracts only inside one expression; device code uses __fmul_rn & co.). */
#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#define ACCEL__OPTIM_NOCONTRACT __attribute__((optimize("fp-contract=off")))
#else
#define ACCEL__OPTIM_NOCONTRACT
#endif
/* Run-time dispatch (the core's accel__cpu_has) to an AVX2+FMA twin of the CPU loop on x86 GCC/Clang builds whose
   -march has no FMA. */
#if defined(ACCEL__X86) && !defined(__FP_FAST_FMAF) && !defined(ACCEL_OPTIM_NO_DISPATCH)
#define ACCEL__OPTIM_X86_DISPATCH 1
#endif
#ifdef __FP_FAST_FMAF
#define ACCEL__OPTIM_HW_FMA 1 /* fmaf is one instruction here */
#else
#define ACCEL__OPTIM_HW_FMA 0
#endif

/* ------------------------------------------------------------------------------- 1. element-wise math */
/* Operations whose rounding must not be merged with a neighbour's (nvcc contracts a*b+c by default). */
ACCEL__OPTIM_HDI float accel__optim_mul(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}
ACCEL__OPTIM_HDI float accel__optim_add(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}
ACCEL__OPTIM_HDI float accel__optim_div(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fdiv_rn(a, b);
#else
    return a / b;
#endif
}
ACCEL__OPTIM_HDI float accel__optim_sqrt(float a) {
#ifdef __CUDA_ARCH__
    return __fsqrt_rn(a);
#else
    return sqrtf(a);
#endif
}
ACCEL__OPTIM_HDI double accel__optim_dmul(double a, double b) {
#ifdef __CUDA_ARCH__
    return __dmul_rn(a, b);
#else
    return a * b;
#endif
}

#ifndef __CUDA_ARCH__
/* fmaf without an FMA instruction, exact: a*b is exact in double; s = a*b + c is rounded once, its error e recovered
   with TwoSum; making s odd when e != 0 (round to odd, 53 >= 24 + 2 bits) lets the final rounding to float be the
   correctly rounded a*b + c (Boldo & Melquiond, "Emulation of FMA and correctly rounded sums", IEEE TC 2008). */
ACCEL__OPTIM_HI float accel__optim_fma_emu(float a, float b, float c) {
    double p = (double)a * (double)b, dc = (double)c;
    double s = p + dc;
    double bb = s - p;
    double e = (p - (s - bb)) + (dc - bb);
    uint64_t u, ue;
    memcpy(&u, &s, sizeof u);
    memcpy(&ue, &e, sizeof ue);
    if (e != 0.0 && !(u & 1u) && (u & 0x7ff0000000000000ull) != 0x7ff0000000000000ull)
        u += ((ue ^ u) >> 63) ? ~(uint64_t)0 : (uint64_t)1; /* one ulp toward e: up in magnitude if same sign */
    memcpy(&s, &u, sizeof s);
    return (float)s;
}
#endif
/* a*b + c rounded once, on every target (hw: the caller runs where fmaf is one instruction). */
ACCEL__OPTIM_HDI float accel__optim_fma(float a, float b, float c, const int hw) {
#ifdef __CUDA_ARCH__
    (void)hw;
    return __fmaf_rn(a, b, c);
#else
    if (hw) {
#if defined(__GNUC__) || defined(__clang__)
        return __builtin_fmaf(a, b, c);
#else
        return fmaf(a, b, c);
#endif
    }
    return accel__optim_fma_emu(a, b, c);
#endif
}

/* b^e for the bias corrections: binary powering in double, identical on CPU and GPU (Python calls pow(); the two
   agree to ~1e-15 relative). */
ACCEL__OPTIM_HDI double accel__optim_powi(double b, unsigned long long e) {
    double r = 1.0;
    while (e) {
        if (e & 1u) r = accel__optim_dmul(r, b);
        e >>= 1;
        if (e) b = accel__optim_dmul(b, b);
    }
    return r;
}

enum { ACCEL__OPTIM_K_ADAMW = 0, ACCEL__OPTIM_K_ADAMW_LERP, ACCEL__OPTIM_K_SGD, ACCEL__OPTIM_K_SGD_MOM };

/* What every parameter shares (by value into the kernels). */
typedef struct accel__optim_hyper {
    double beta1, beta2, eps, momentum, dampening;
    int kind;               /* ACCEL__OPTIM_K_* */
    int amsgrad, nesterov, maximize, stochastic;
    int mom_bf16, pad;      /* AdamW: exp_avg and exp_avg_sq stored as BF16 (stochastic rounding) */
    unsigned long long sr_seed;
} accel__optim_hyper;

/* One parameter's constants for one step, rounded to float32 where torch applies them. */
typedef struct accel__optim_coefs {
    float decay, beta1, omb1, beta2, omb2, bc2s, eps, nss; /* AdamW */
    float lerp_w;                                          /* AdamW lerp: w, or w - 1 when |w| >= 0.5 */
    float wd, mom, omd, nlr;                               /* SGD */
    float clip;                                            /* the clip coefficient (used with in.has_coef) */
    int lerp_small, has_wd, first;
    int skip;                                              /* found_inf: the step changes nothing (CUDA: the
                                                              coefficient kernel's verdict, read by every block) */
    unsigned long long t;                                  /* the step count after this step */
} accel__optim_coefs;

/* The doubles are combined as Python combines them (lr * weight_decay, 1 - beta ** t, lr / bc1, sqrt(bc2)). */
ACCEL__OPTIM_HDI void accel__optim_make_coefs(const accel__optim_hyper *hy, double lr, double wd, unsigned long long t,
                                               float clip, accel__optim_coefs *k) {
    double bc1 = 1.0 - accel__optim_powi(hy->beta1, t);
    double bc2 = 1.0 - accel__optim_powi(hy->beta2, t);
    float w = (float)(1.0 - hy->beta1);
    k->decay = (float)(1.0 - accel__optim_dmul(lr, wd));
    k->beta1 = (float)hy->beta1;
    k->omb1 = w;
    k->beta2 = (float)hy->beta2;
    k->omb2 = (float)(1.0 - hy->beta2);
#ifdef __CUDA_ARCH__
    k->bc2s = (float)__dsqrt_rn(bc2);
    k->nss = (float)(-__ddiv_rn(lr, bc1));
#else
    k->bc2s = (float)sqrt(bc2);
    k->nss = (float)(-(lr / bc1));
#endif
    k->eps = (float)hy->eps;
    k->lerp_small = (w < 0.5f && w > -0.5f);
    k->lerp_w = k->lerp_small ? w : w - 1.0f;
    k->wd = (float)wd;
    k->has_wd = wd != 0.0;
    k->mom = (float)hy->momentum;
    k->omd = (float)(1.0 - hy->dampening);
    k->nlr = (float)(-lr);
    k->first = t == 1u;
    k->clip = clip;
    k->skip = 0;
    k->t = t;
}

/* torch.nn.utils.clip_grad_norm_'s coefficient from the total norm (accel_optim_clip_coef, and the step's own when
   it is given the norm): min(1, reciprocal(float(total) + 1e-6f) * float(max_norm)), NaN kept. */
ACCEL__OPTIM_HDI float accel__optim_clip_coef(double total_norm, double max_norm) {
    float c = accel__optim_mul(accel__optim_div(1.0f, accel__optim_add((float)total_norm, 1e-6f)), (float)max_norm);
    return c != c ? c : (c > 1.0f ? 1.0f : c);
}

/* x rounded to the gradient's dtype (what storing it back into the gradient buffer does). */
ACCEL__OPTIM_HDI float accel__optim_round_to(float x, int dt) {
    if (dt == (int)ACCEL_BF16) return accel_bf16_to_f32(accel_f32_to_bf16(x));
    if (dt == (int)ACCEL_F16) return accel_f16_to_f32(accel_f32_to_f16(x));
    return x;
}

/* Gradient preprocessing of one step: unscale, clip (each rounded to the gradient's dtype), maximize. The clip
   coefficient itself is in the coefficients (clip), as the CUDA step may compute it on the device. */
typedef struct accel__optim_in {
    float inv;
    int has_inv, has_coef, neg;
} accel__optim_in;

ACCEL__OPTIM_HDI float accel__optim_grad_in(float g, int dt, const accel__optim_in *in, float clip) {
    if (in->has_inv) g = accel__optim_round_to(accel__optim_mul(g, in->inv), dt);
    if (in->has_coef) g = accel__optim_round_to(accel__optim_mul(g, clip), dt);
    return in->neg ? -g : g;
}

/* torch.maximum: NaN if either is NaN. */
ACCEL__OPTIM_HDI float accel__optim_max(float a, float b) { return (a > b || a != a) ? a : b; }

/* AdamW's moments of one element from the preprocessed gradient g (the manual's formula, in its order). */
ACCEL__OPTIM_HDI void accel__optim_moments(const accel__optim_coefs *k, float g, float *m, float *v, const int lerp,
                                           const int hw) {
    float mm = *m;
    if (lerp) mm = accel__optim_fma(k->lerp_w, g - mm, k->lerp_small ? mm : g, hw);
    else mm = accel__optim_fma(g, k->omb1, accel__optim_mul(mm, k->beta1), hw);
    *v = accel__optim_fma(accel__optim_mul(k->omb2, g), g, accel__optim_mul(*v, k->beta2), hw);
    *m = mm;
}
/* The rest of AdamW from the decayed parameter p and the new moments (v: max_exp_avg_sq with amsgrad):
   p + (nss * m) / (sqrt(v) / bc2s + eps), every operation rounded once. */
ACCEL__OPTIM_HDI float accel__optim_adamw_tail(const accel__optim_coefs *k, float p, float m, float v) {
    const float d = accel__optim_add(accel__optim_div(accel__optim_sqrt(v), k->bc2s), k->eps);
    return accel__optim_add(p, accel__optim_div(accel__optim_mul(k->nss, m), d));
}
/* AdamW on one element; returns the new parameter. */
ACCEL__OPTIM_HDI float accel__optim_adamw1(const accel__optim_coefs *k, float g, float p, float *m, float *v,
                                           float *vmax, const int ams, const int lerp, const int hw) {
    float vv;
    p = accel__optim_mul(p, k->decay);
    accel__optim_moments(k, g, m, v, lerp, hw);
    vv = *v;
    if (ams) {
        vv = accel__optim_max(*vmax, vv);
        *vmax = vv;
    }
    return accel__optim_adamw_tail(k, p, *m, vv);
}

/* SGD on one element (buf is only touched with momentum; has_wd and first are the coefficients' flags, passed
   apart so that the CPU loops can fix them per loop). */
ACCEL__OPTIM_HDI float accel__optim_sgd1(const accel__optim_coefs *k, float g, float p, float *buf, const int mom,
                                         const int nesterov, const int has_wd, const int first, const int hw) {
    if (has_wd) g = accel__optim_fma(p, k->wd, g, hw);
    if (mom) {
        float b = first ? g : accel__optim_fma(g, k->omd, accel__optim_mul(*buf, k->mom), hw);
        *buf = b;
        g = nesterov ? accel__optim_fma(b, k->mom, g, hw) : b;
    }
    return accel__optim_fma(g, k->nlr, p, hw);
}

/* The model copy of one element (mt: ACCEL_BF16 or ACCEL_F16). */
ACCEL__OPTIM_HDI uint16_t accel__optim_model1(float p, int mt, int stochastic, unsigned long long seed,
                                              unsigned long long t, unsigned long long index) {
    if (mt == (int)ACCEL_F16) return accel_f32_to_f16(p);
    if (stochastic) return accel_optim_f32_to_bf16_sr(p, accel_optim_sr_bits(seed, t, index));
    return accel_f32_to_bf16(p);
}

/* bf16 moments: the stochastic-rounding bits of element `index` (the manual's rule: Philox stream t with the top bit
   set, so that the model copy's draws (stream t) are not reused; exp_avg takes the low 16 bits, exp_avg_sq the high
   16, so one draw serves both). */
#define ACCEL__OPTIM_MOMENT_STREAM 0x8000000000000000ull
ACCEL__OPTIM_HDI uint32_t accel__optim_moment_bits(unsigned long long seed, unsigned long long t,
                                                   unsigned long long index) {
    return accel_optim_sr_bits(seed, t | ACCEL__OPTIM_MOMENT_STREAM, index);
}

/* One parameter's buffers in one step: what the element functions and the CUDA kernels read (the kernels from their
   launch's parameter, accel__optim_largs). */
typedef struct accel__optim_dj {
    float *p;
    const void *g;
    void *m, *v;             /* exp_avg, exp_avg_sq (F32, or BF16 with hy.mom_bf16) | SGD: momentum_buffer in m (F32) */
    float *vmax;             /* max_exp_avg_sq (amsgrad) */
    void *model;             /* NULL: no copy */
    long long n;             /* elements */
    unsigned long long index; /* global element index of element 0 (stochastic rounding) */
    int gt, mt;
    int head;                /* CUDA: first element of the vector path (0..7), -1: the generic path (_vec_head) */
    int kj;                  /* CUDA: this job's place in the step's device job array (its coefficients) */
} accel__optim_dj;

/* One parameter's work in one step (the CUDA step copies the array to the device for the coefficient kernel). */
typedef struct accel__optim_job {
    accel__optim_dj d;
    long long chunk_begin;   /* CUDA: first chunk, counted within the job's class */
    double lr, wd;
    int param, pad;
    accel__optim_coefs k;    /* filled on the host (CPU) or by the coefficient kernel (CUDA) */
} accel__optim_job;

/* Element e of a buffer of dtype dt, widened exactly to float. */
ACCEL__OPTIM_HDI float accel__optim_ldx(const void *s, int dt, long long e) {
    if (dt == (int)ACCEL_F32) return ((const float *)s)[e];
    if (dt == (int)ACCEL_BF16) return accel_bf16_to_f32(((const uint16_t *)s)[e]);
    return accel_f16_to_f32(((const uint16_t *)s)[e]);
}

/* One element in three parts, x = {p, g, m, v, vmax}: the loads, the update, the stores. The generic CUDA path issues
   the loads of several elements before their updates; accel__optim_elem is the three in a row. */
ACCEL__OPTIM_HDI void accel__optim_load1(const accel__optim_dj *jb, const accel__optim_hyper *hy, long long e,
                                         float x[5]) {
    const int st = hy->mom_bf16 ? (int)ACCEL_BF16 : (int)ACCEL_F32;
    x[0] = jb->p[e];
    x[1] = accel__optim_ldx(jb->g, jb->gt, e);
    x[2] = jb->m ? accel__optim_ldx(jb->m, st, e) : 0.0f;
    x[3] = jb->v ? accel__optim_ldx(jb->v, st, e) : 0.0f;
    x[4] = jb->vmax ? jb->vmax[e] : 0.0f;
}
ACCEL__OPTIM_HDI void accel__optim_update1(const accel__optim_coefs *k, const accel__optim_hyper *hy,
                                           const accel__optim_in *in, int gt, float x[5], const int hw) {
    float g = accel__optim_grad_in(x[1], gt, in, k->clip);
    if (hy->kind == ACCEL__OPTIM_K_ADAMW || hy->kind == ACCEL__OPTIM_K_ADAMW_LERP)
        x[0] = accel__optim_adamw1(k, g, x[0], &x[2], &x[3], &x[4], hy->amsgrad, hy->kind == ACCEL__OPTIM_K_ADAMW_LERP,
                                   hw);
    else if (hy->kind == ACCEL__OPTIM_K_SGD_MOM)
        x[0] = accel__optim_sgd1(k, g, x[0], &x[2], 1, hy->nesterov, k->has_wd, k->first, hw);
    else
        x[0] = accel__optim_sgd1(k, g, x[0], NULL, 0, 0, k->has_wd, 0, hw);
}
ACCEL__OPTIM_HDI void accel__optim_store1(const accel__optim_dj *jb, const accel__optim_coefs *k,
                                          const accel__optim_hyper *hy, long long e, const float x[5]) {
    const unsigned long long ix = jb->index + (unsigned long long)e;
    jb->p[e] = x[0];
    if (hy->mom_bf16) { /* AdamW without amsgrad: both moments */
        uint32_t r = accel__optim_moment_bits(hy->sr_seed, k->t, ix);
        ((uint16_t *)jb->m)[e] = accel_optim_f32_to_bf16_sr(x[2], r);
        ((uint16_t *)jb->v)[e] = accel_optim_f32_to_bf16_sr(x[3], r >> 16);
    } else {
        if (jb->m) ((float *)jb->m)[e] = x[2];
        if (jb->v) ((float *)jb->v)[e] = x[3];
    }
    if (jb->vmax) jb->vmax[e] = x[4];
    if (jb->model)
        ((uint16_t *)jb->model)[e] = accel__optim_model1(x[0], jb->mt, hy->stochastic, hy->sr_seed, k->t, ix);
}

/* Element e of one job, everything in one place: the reference that tests run against the blocked CPU loops below,
   and what the CUDA kernels do with the few elements outside their vectors. */
ACCEL__OPTIM_HDI void accel__optim_elem(const accel__optim_dj *jb, const accel__optim_coefs *k,
                                        const accel__optim_hyper *hy, const accel__optim_in *in, long long e,
                                        const int hw) {
    float x[5];
    accel__optim_load1(jb, hy, e, x);
    accel__optim_update1(k, hy, in, jb->gt, x, hw);
    accel__optim_store1(jb, k, hy, e, x);
}

/* ------------------------------------------------------------------------------------- 2. CPU loops */
/* Blocks of 256 elements with a constant trip count, so that GCC's -O2 cost model vectorizes them (as accel_amp's
   loops) and the per-block bookkeeping is amortized (16 ran at a third of the speed in cache); the gradient is
   staged in a small array first, so that each stage is one simple loop. */
#define ACCEL__OPTIM_BLK 256

ACCEL__OPTIM_HI void accel__optim_cpu_grads(float *ACCEL_RESTRICT g, const void *ACCEL_RESTRICT src, int gt, size_t cnt,
                                            const accel__optim_in *in, float clip) {
    size_t j;
    if (gt == (int)ACCEL_F32) {
        const float *s = (const float *)src;
        for (j = 0; j < cnt; ++j) g[j] = s[j];
        if (in->has_inv) for (j = 0; j < cnt; ++j) g[j] = accel__optim_mul(g[j], in->inv);
        if (in->has_coef) for (j = 0; j < cnt; ++j) g[j] = accel__optim_mul(g[j], clip);
    } else {
        const uint16_t *s = (const uint16_t *)src;
        if (gt == (int)ACCEL_BF16) for (j = 0; j < cnt; ++j) g[j] = accel_bf16_to_f32(s[j]);
        else for (j = 0; j < cnt; ++j) g[j] = accel_f16_to_f32(s[j]);
        if (in->has_inv) for (j = 0; j < cnt; ++j) g[j] = accel__optim_round_to(accel__optim_mul(g[j], in->inv), gt);
        if (in->has_coef) for (j = 0; j < cnt; ++j) g[j] = accel__optim_round_to(accel__optim_mul(g[j], clip), gt);
    }
    if (in->neg) for (j = 0; j < cnt; ++j) g[j] = -g[j];
}

ACCEL__OPTIM_HI void accel__optim_cpu_math(float *ACCEL_RESTRICT p, const float *ACCEL_RESTRICT g,
                                           float *ACCEL_RESTRICT m, float *ACCEL_RESTRICT v,
                                           float *ACCEL_RESTRICT vmax, size_t cnt, const accel__optim_coefs *kp,
                                           const int kind, const int ams, const int nesterov, const int hw) {
    accel__optim_coefs k = *kp;
    size_t j;
    if (kind == ACCEL__OPTIM_K_ADAMW || kind == ACCEL__OPTIM_K_ADAMW_LERP) {
        const int lerp = kind == ACCEL__OPTIM_K_ADAMW_LERP;
        if (ams)
            for (j = 0; j < cnt; ++j) p[j] = accel__optim_adamw1(&k, g[j], p[j], &m[j], &v[j], &vmax[j], 1, lerp, hw);
        else for (j = 0; j < cnt; ++j) p[j] = accel__optim_adamw1(&k, g[j], p[j], &m[j], &v[j], NULL, 0, lerp, hw);
    } else if (kind == ACCEL__OPTIM_K_SGD_MOM) {
#define ACCEL__OPTIM_SGD_LOOP(N, W, F)                                                                                 \
    for (j = 0; j < cnt; ++j) p[j] = accel__optim_sgd1(&k, g[j], p[j], &m[j], 1, N, W, F, hw)
        switch ((k.has_wd ? 4 : 0) | (k.first ? 2 : 0) | (nesterov ? 1 : 0)) {
        case 0: ACCEL__OPTIM_SGD_LOOP(0, 0, 0); break;
        case 1: ACCEL__OPTIM_SGD_LOOP(1, 0, 0); break;
        case 2: ACCEL__OPTIM_SGD_LOOP(0, 0, 1); break;
        case 3: ACCEL__OPTIM_SGD_LOOP(1, 0, 1); break;
        case 4: ACCEL__OPTIM_SGD_LOOP(0, 1, 0); break;
        case 5: ACCEL__OPTIM_SGD_LOOP(1, 1, 0); break;
        case 6: ACCEL__OPTIM_SGD_LOOP(0, 1, 1); break;
        default: ACCEL__OPTIM_SGD_LOOP(1, 1, 1); break;
        }
#undef ACCEL__OPTIM_SGD_LOOP
    } else if (k.has_wd) {
        for (j = 0; j < cnt; ++j) p[j] = accel__optim_sgd1(&k, g[j], p[j], NULL, 0, 0, 1, 0, hw);
    } else {
        for (j = 0; j < cnt; ++j) p[j] = accel__optim_sgd1(&k, g[j], p[j], NULL, 0, 0, 0, 0, hw);
    }
}

/* Stochastic rounding of x[0..cnt) (element indices index, index + 1, ...) into d with the low 16 bits of each
   element's draw and, when d2 is given, of x2 into d2 with the high 16 bits: one Philox block per 4 aligned
   indices. */
ACCEL__OPTIM_HI void accel__optim_cpu_sr(uint16_t *ACCEL_RESTRICT d, const float *ACCEL_RESTRICT x,
                                         uint16_t *ACCEL_RESTRICT d2, const float *ACCEL_RESTRICT x2, size_t cnt,
                                         unsigned long long seed,
                                         unsigned long long stream, unsigned long long index) {
    size_t j = 0;
    while (j < cnt) {
        uint32_t r[4];
        unsigned long long ix = index + j;
        size_t q, w = ((ix & 3u) == 0 && j + 4 <= cnt) ? 4u : 1u;
        if (w == 4u) accel_rng_draw4(seed, stream, ix >> 2, r);
        else r[0] = accel_optim_sr_bits(seed, stream, ix);
        for (q = 0; q < w; ++q) {
            d[j + q] = accel_optim_f32_to_bf16_sr(x[j + q], r[q]);
            if (d2) d2[j + q] = accel_optim_f32_to_bf16_sr(x2[j + q], r[q] >> 16);
        }
        j += w;
    }
}

ACCEL__OPTIM_HI void accel__optim_cpu_model(void *model, int mt, const float *ACCEL_RESTRICT p, size_t cnt,
                                            const accel__optim_hyper *hy, unsigned long long t,
                                            unsigned long long index) {
    uint16_t *ACCEL_RESTRICT d = (uint16_t *)model;
    size_t j;
    if (mt == (int)ACCEL_F16) {
        for (j = 0; j < cnt; ++j) d[j] = accel_f32_to_f16(p[j]);
    } else if (!hy->stochastic) {
        for (j = 0; j < cnt; ++j) d[j] = accel_f32_to_bf16(p[j]);
    } else {
        accel__optim_cpu_sr(d, p, NULL, NULL, cnt, hy->sr_seed, t, index);
    }
}

/* Elements [i, i + cnt) of one job (cnt <= ACCEL__OPTIM_BLK, a constant in the hot loop). BF16 moments are widened
   into two more small arrays, updated by the same loop, then rounded back stochastically. */
ACCEL__OPTIM_HI void accel__optim_cpu_block(const accel__optim_job *jb, const accel__optim_hyper *hy,
                                            const accel__optim_in *in, size_t i, size_t cnt, const int kind,
                                            const int ams, const int hw) {
    float g[ACCEL__OPTIM_BLK];
    size_t es = jb->d.gt == (int)ACCEL_F32 ? 4u : 2u;
    accel__optim_cpu_grads(g, (const unsigned char *)jb->d.g + i * es, jb->d.gt, cnt, in, jb->k.clip);
    if (hy->mom_bf16) {
        float mf[ACCEL__OPTIM_BLK], vf[ACCEL__OPTIM_BLK];
        uint16_t *m16 = (uint16_t *)jb->d.m + i, *v16 = (uint16_t *)jb->d.v + i;
        size_t j;
        for (j = 0; j < cnt; ++j) mf[j] = accel_bf16_to_f32(m16[j]);
        for (j = 0; j < cnt; ++j) vf[j] = accel_bf16_to_f32(v16[j]);
        accel__optim_cpu_math(jb->d.p + i, g, mf, vf, NULL, cnt, &jb->k, kind, 0, hy->nesterov, hw);
        accel__optim_cpu_sr(m16, mf, v16, vf, cnt, hy->sr_seed, jb->k.t | ACCEL__OPTIM_MOMENT_STREAM,
                            jb->d.index + i);
    } else {
        accel__optim_cpu_math(jb->d.p + i, g, jb->d.m ? (float *)jb->d.m + i : NULL,
                              jb->d.v ? (float *)jb->d.v + i : NULL, jb->d.vmax ? jb->d.vmax + i : NULL, cnt, &jb->k,
                              kind, ams, hy->nesterov, hw);
    }
    if (jb->d.model)
        accel__optim_cpu_model((uint16_t *)jb->d.model + i, jb->d.mt, jb->d.p + i, cnt, hy, jb->k.t, jb->d.index + i);
}

ACCEL__OPTIM_HI void accel__optim_cpu_jobs(const accel__optim_job *jobs, int njobs, const accel__optim_hyper *hy,
                                           const accel__optim_in *in, const int kind, const int ams, const int hw) {
    int q;
    for (q = 0; q < njobs; ++q) {
        const accel__optim_job *jb = &jobs[q];
        size_t n = (size_t)jb->d.n, i = 0;
        for (; i + ACCEL__OPTIM_BLK <= n; i += ACCEL__OPTIM_BLK)
            accel__optim_cpu_block(jb, hy, in, i, ACCEL__OPTIM_BLK, kind, ams, hw);
        if (i < n) accel__optim_cpu_block(jb, hy, in, i, n - i, kind, ams, hw);
    }
}

/* One instantiation per (kind, amsgrad): the compile-time flags are what lets each loop vectorize. */
#define ACCEL__OPTIM_CPU_VARIANTS(PREFIX, ATTR, HW)                                                                    \
    static ATTR void PREFIX##_adamw(const accel__optim_job *j, int n, const accel__optim_hyper *h,                     \
                                    const accel__optim_in *in) {                                                       \
        accel__optim_cpu_jobs(j, n, h, in, ACCEL__OPTIM_K_ADAMW, 0, HW);                                               \
    }                                                                                                                  \
    static ATTR void PREFIX##_adamw_ams(const accel__optim_job *j, int n, const accel__optim_hyper *h,                 \
                                        const accel__optim_in *in) {                                                   \
        accel__optim_cpu_jobs(j, n, h, in, ACCEL__OPTIM_K_ADAMW, 1, HW);                                               \
    }                                                                                                                  \
    static ATTR void PREFIX##_lerp(const accel__optim_job *j, int n, const accel__optim_hyper *h,                      \
                                   const accel__optim_in *in) {                                                        \
        accel__optim_cpu_jobs(j, n, h, in, ACCEL__OPTIM_K_ADAMW_LERP, 0, HW);                                          \
    }                                                                                                                  \
    static ATTR void PREFIX##_lerp_ams(const accel__optim_job *j, int n, const accel__optim_hyper *h,                  \
                                       const accel__optim_in *in) {                                                    \
        accel__optim_cpu_jobs(j, n, h, in, ACCEL__OPTIM_K_ADAMW_LERP, 1, HW);                                          \
    }                                                                                                                  \
    static ATTR void PREFIX##_sgd(const accel__optim_job *j, int n, const accel__optim_hyper *h,                       \
                                  const accel__optim_in *in) {                                                         \
        accel__optim_cpu_jobs(j, n, h, in, ACCEL__OPTIM_K_SGD, 0, HW);                                                 \
    }                                                                                                                  \
    static ATTR void PREFIX##_sgd_mom(const accel__optim_job *j, int n, const accel__optim_hyper *h,                   \
                                      const accel__optim_in *in) {                                                     \
        accel__optim_cpu_jobs(j, n, h, in, ACCEL__OPTIM_K_SGD_MOM, 0, HW);                                             \
    }                                                                                                                  \
    static void PREFIX(const accel__optim_job *j, int n, const accel__optim_hyper *h, const accel__optim_in *in) {     \
        switch (h->kind) {                                                                                             \
        case ACCEL__OPTIM_K_ADAMW:                                                                                     \
            if (h->amsgrad) PREFIX##_adamw_ams(j, n, h, in);                                                           \
            else PREFIX##_adamw(j, n, h, in);                                                                          \
            break;                                                                                                     \
        case ACCEL__OPTIM_K_ADAMW_LERP:                                                                                \
            if (h->amsgrad) PREFIX##_lerp_ams(j, n, h, in);                                                            \
            else PREFIX##_lerp(j, n, h, in);                                                                           \
            break;                                                                                                     \
        case ACCEL__OPTIM_K_SGD_MOM: PREFIX##_sgd_mom(j, n, h, in); break;                                             \
        default: PREFIX##_sgd(j, n, h, in); break;                                                                     \
        }                                                                                                              \
    }

ACCEL__OPTIM_CPU_VARIANTS(accel__optim_cpu_generic, ACCEL__OPTIM_NOCONTRACT, ACCEL__OPTIM_HW_FMA)
#ifdef ACCEL__OPTIM_X86_DISPATCH
ACCEL__OPTIM_CPU_VARIANTS(accel__optim_cpu_avx2, ACCEL__OPTIM_NOCONTRACT __attribute__((target("avx2,fma"))), 1)
#endif

/* The CPU loop for this machine (both give the same bits; the twin only uses the FMA instruction). */
static void accel__optim_cpu_run(const accel__optim_job *jobs, int njobs, const accel__optim_hyper *hy,
                                 const accel__optim_in *in) {
#ifdef ACCEL__OPTIM_X86_DISPATCH
    if (accel__cpu_has(ACCEL__CPU_AVX2 | ACCEL__CPU_FMA)) {
        accel__optim_cpu_avx2(jobs, njobs, hy, in);
        return;
    }
#endif
    accel__optim_cpu_generic(jobs, njobs, hy, in);
}

/* Host side of the per-parameter constants (no contraction: 1 - lr*wd and 1 - b^t must round as Python's do). */
static ACCEL__OPTIM_NOCONTRACT void accel__optim_host_coefs(const accel__optim_hyper *hy, double lr, double wd,
                                                            unsigned long long t, float clip, accel__optim_coefs *k) {
    accel__optim_make_coefs(hy, lr, wd, t, clip, k);
}


/* ------------------------------------------------------------------------ 3. CUDA: per-thread work, kernels */
/* A step is the coefficient kernel (one block: found_inf, the step counts, each job's constants and the clip
   coefficient, written to the step's job array in device memory), then one launch per class of jobs
   (accel__optim_class) and per ACCEL__OPTIM_CAP jobs of a class. A launch carries its jobs' buffers and first
   chunks as its kernel parameter (accel__optim_largs, read through the constant cache, which the step's streams do
   not evict): a block finds its job by a binary search there and issues its first loads at once, the coefficients
   (from the device job array) in the same round as the data. A block takes one chunk of ACCEL_OPTIM_CHUNK elements
   (ACCEL_OPTIM_CHUNK_SR for a class whose instance draws from a Philox stream: the launch's `chunk`) of one job;
   the hardware hands blocks to SMs as they free up, so the last round stays balanced.
   The vector path (accel__optim_vec_head: AdamW without amsgrad, F32 or BF16 gradients, no copy or a BF16 one, and
   streams that all reach 16-byte alignment at the same element `head` < 8) moves vectors of 8 elements (two float4
   per F32 stream, one uint4 per 16-bit stream): a thread issues every load of its ACCEL_OPTIM_CUDA_U vectors before
   any update or store, as volatile loads that the compiler can neither sink below the found_inf test (which waits
   for the coefficients) nor drop; the head and the tail (fewer than 8 elements each) go element by element. With
   ACCEL_OPTIM_CUDA_FAST the square root and the two divisions of the 8 elements run without a branch
   (accel__optim_update_fast) and a vector with an operand outside their exact range is computed again with the IEEE
   operations: nvcc's __fsqrt_rn and __fdiv_rn branch per element to their slow paths, which kept each element's
   chain of dependent steps (three multi-function unit results, about 40 instructions) from overlapping the next
   element's. The generic path takes every dtype and option, ACCEL__OPTIM_UG elements per thread loaded before any
   store. Both are the ACCEL_HD functions below, called by the kernels with compile-time flags and by
   tests/unit/optim on the CPU for every (block, thread) of a grid; the element-wise math is section 1's in both.
   Measured on an H200, GPT-2 124M list: one element per thread through accel__optim_elem, 64 Ki-element chunks,
   a binary search per chunk in device memory: 0.39x of a device copy; vectors of 8 in 4096-element chunks with the
   job table in device memory and nvcc's division per element: 0.90x (F32 gradients, 28 bytes a parameter) down to
   0.56x (BF16 gradients, moments and copy, 18 bytes) — about 133 G parameters/s in every form: a bound of latency
   per element, not of bandwidth. Then branch-free square roots and divisions, a Philox draw per 4 elements and
   per-class chunks (2048 elements; 8192 with a Philox stream): 0.95x (F32 gradients) to 0.71x (all BF16), 1.6-2.4x
   torch's fused AdamW. bench/optim/sweep_gpu.sh measures the launch shapes below against each other. */
#define ACCEL__OPTIM_VEC 8
#ifndef ACCEL_OPTIM_CUDA_U
#define ACCEL_OPTIM_CUDA_U 1
#endif
#ifndef ACCEL__OPTIM_UG
#define ACCEL__OPTIM_UG 2
#endif
#ifndef ACCEL_OPTIM_CUDA_FAST
#define ACCEL_OPTIM_CUDA_FAST 1
#endif
#ifndef ACCEL__OPTIM_CAP
#define ACCEL__OPTIM_CAP 160 /* jobs per launch: 88 bytes each of the kernel parameter (CUDA >= 12.1: 32764 bytes) */
#endif
#if (ACCEL_OPTIM_CHUNK % ACCEL__OPTIM_VEC) != 0 || (ACCEL_OPTIM_CHUNK_SR % ACCEL__OPTIM_VEC) != 0
#error "ACCEL_OPTIM_CHUNK and ACCEL_OPTIM_CHUNK_SR must be multiples of 8"
#endif
#if ACCEL_OPTIM_CUDA_U < 1 || ACCEL_OPTIM_CUDA_U > 4
#error "ACCEL_OPTIM_CUDA_U must be 1 to 4"
#endif
#if ACCEL__OPTIM_CAP < 1
#error "ACCEL__OPTIM_CAP must be positive"
#endif
#ifdef __CUDA_ARCH__
#define ACCEL__OPTIM_UNROLL _Pragma("unroll")
#else
#define ACCEL__OPTIM_UNROLL
#endif
/* Tests define these to check, on the CPU, that every vector access of the vector path is 16-byte aligned, and to
   count the vectors that the fast sequences leave to the IEEE operations. */
#ifndef ACCEL__OPTIM_VEC_CHECK
#define ACCEL__OPTIM_VEC_CHECK(ptr) ((void)0)
#endif
#ifndef ACCEL__OPTIM_VEC_CHECK8 /* the same for the 8-byte accesses of 16-bit streams in the split layout */
#define ACCEL__OPTIM_VEC_CHECK8(ptr) ((void)0)
#endif
#ifndef ACCEL__OPTIM_FALLBACK_NOTE
#define ACCEL__OPTIM_FALLBACK_NOTE() ((void)0)
#endif

/* Cache qualifiers of the vector path's loads and stores (bench/optim/sweep_gpu.sh measures them): 0 = none (the
   default), 1 = streaming (.cs: evict first) loads and stores, 2 = loads that ask L2 for the whole 256-byte block
   (.L2::256B), 3 = both of 2's loads and 1's stores. Every form computes the same values. */
#ifndef ACCEL__OPTIM_CACHE
#define ACCEL__OPTIM_CACHE 0
#endif
#if ACCEL__OPTIM_CACHE == 1
#define ACCEL__OPTIM_LDQ ".cs"
#define ACCEL__OPTIM_STQ ".cs"
#elif ACCEL__OPTIM_CACHE == 2
#define ACCEL__OPTIM_LDQ ".L2::256B"
#define ACCEL__OPTIM_STQ ""
#elif ACCEL__OPTIM_CACHE == 3
#define ACCEL__OPTIM_LDQ ".L2::256B"
#define ACCEL__OPTIM_STQ ".cs"
#elif ACCEL__OPTIM_CACHE == 0
#define ACCEL__OPTIM_LDQ ""
#define ACCEL__OPTIM_STQ ""
#else
#error "ACCEL__OPTIM_CACHE must be 0 to 3"
#endif

/* 8 consecutive elements as 16-byte vectors (the caller guarantees the alignment), as global loads and stores in
   inline PTX: volatile, so that the compiler issues the loads where they are written (see above) and keeps each
   vector whole (from C, the stores of the vector path came out as 32-bit ones). */
ACCEL__OPTIM_HDI void accel__optim_ld4f(float o[4], const float *s) {
#ifdef __CUDA_ARCH__
    asm volatile("ld.global" ACCEL__OPTIM_LDQ ".v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(o[0]), "=f"(o[1]), "=f"(o[2]), "=f"(o[3]) : "l"(__cvta_generic_to_global(s)));
#else
    ACCEL__OPTIM_VEC_CHECK(s);
    memcpy(o, s, 4 * sizeof(float));
#endif
}
ACCEL__OPTIM_HDI void accel__optim_st4f(float *d, const float x[4]) {
#ifdef __CUDA_ARCH__
    asm volatile("st.global" ACCEL__OPTIM_STQ ".v4.f32 [%0], {%1, %2, %3, %4};"
                 ::"l"(__cvta_generic_to_global(d)), "f"(x[0]), "f"(x[1]), "f"(x[2]), "f"(x[3]));
#else
    ACCEL__OPTIM_VEC_CHECK(d);
    memcpy(d, x, 4 * sizeof(float));
#endif
}
/* 4 16-bit elements as one 8-byte access (the split layout's halves; p is 8-byte aligned) */
ACCEL__OPTIM_HDI void accel__optim_ld4h(uint16_t o[4], const uint16_t *s) {
#ifdef __CUDA_ARCH__
    unsigned w0, w1;
    asm volatile("ld.global" ACCEL__OPTIM_LDQ ".v2.u32 {%0, %1}, [%2];"
                 : "=r"(w0), "=r"(w1) : "l"(__cvta_generic_to_global(s)));
    o[0] = (uint16_t)w0; o[1] = (uint16_t)(w0 >> 16); o[2] = (uint16_t)w1; o[3] = (uint16_t)(w1 >> 16);
#else
    ACCEL__OPTIM_VEC_CHECK8(s);
    memcpy(o, s, 4 * sizeof(uint16_t));
#endif
}
ACCEL__OPTIM_HDI void accel__optim_st4h(uint16_t *d, const uint16_t h[4]) {
#ifdef __CUDA_ARCH__
    asm volatile("st.global" ACCEL__OPTIM_STQ ".v2.u32 [%0], {%1, %2};" ::"l"(__cvta_generic_to_global(d)),
                 "r"((unsigned)h[0] | ((unsigned)h[1] << 16)), "r"((unsigned)h[2] | ((unsigned)h[3] << 16)));
#else
    ACCEL__OPTIM_VEC_CHECK8(d);
    memcpy(d, h, 4 * sizeof(uint16_t));
#endif
}
ACCEL__OPTIM_HDI void accel__optim_ld8h(uint16_t o[8], const uint16_t *s) {
#ifdef __CUDA_ARCH__
    unsigned w0, w1, w2, w3;
    asm volatile("ld.global" ACCEL__OPTIM_LDQ ".v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(w0), "=r"(w1), "=r"(w2), "=r"(w3)
                 : "l"(__cvta_generic_to_global(s)));
    o[0] = (uint16_t)w0; o[1] = (uint16_t)(w0 >> 16); o[2] = (uint16_t)w1; o[3] = (uint16_t)(w1 >> 16);
    o[4] = (uint16_t)w2; o[5] = (uint16_t)(w2 >> 16); o[6] = (uint16_t)w3; o[7] = (uint16_t)(w3 >> 16);
#else
    ACCEL__OPTIM_VEC_CHECK(s);
    memcpy(o, s, 8 * sizeof(uint16_t));
#endif
}
ACCEL__OPTIM_HDI void accel__optim_st8h(uint16_t *d, const uint16_t h[8]) {
#ifdef __CUDA_ARCH__
    asm volatile("st.global" ACCEL__OPTIM_STQ ".v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(__cvta_generic_to_global(d)),
                 "r"((unsigned)h[0] | ((unsigned)h[1] << 16)), "r"((unsigned)h[2] | ((unsigned)h[3] << 16)),
                 "r"((unsigned)h[4] | ((unsigned)h[5] << 16)), "r"((unsigned)h[6] | ((unsigned)h[7] << 16)));
#else
    ACCEL__OPTIM_VEC_CHECK(d);
    memcpy(d, h, 8 * sizeof(uint16_t));
#endif
}

/* The draws of the 8 elements index .. index + 7 (accel_optim_sr_bits of each): two Philox blocks when index is a
   multiple of 4, else three, shifted into place by constant moves (a computed register index would go to local
   memory). */
ACCEL__OPTIM_HDI void accel__optim_bits8(unsigned long long seed, unsigned long long stream, unsigned long long index,
                                         uint32_t r[8]) {
    uint32_t w[12];
    const unsigned o = (unsigned)(index & 3u);
    int i;
    accel_rng_draw4(seed, stream, index >> 2, w);
    accel_rng_draw4(seed, stream, (index >> 2) + 1u, w + 4);
    w[8] = w[9] = w[10] = w[11] = 0u;
    if (o) {
        accel_rng_draw4(seed, stream, (index >> 2) + 2u, w + 8);
        if (o & 1u) {
            ACCEL__OPTIM_UNROLL
            for (i = 0; i < 11; ++i) w[i] = w[i + 1];
        }
        if (o & 2u) {
            ACCEL__OPTIM_UNROLL
            for (i = 0; i < 10; ++i) w[i] = w[i + 2];
        }
    }
    ACCEL__OPTIM_UNROLL
    for (i = 0; i < 8; ++i) r[i] = w[i];
}
/* The draws of the 4 elements index .. index + 3: one Philox block when index is a multiple of 4, else two. */
ACCEL__OPTIM_HDI void accel__optim_bits4(unsigned long long seed, unsigned long long stream, unsigned long long index,
                                         uint32_t r[4]) {
    uint32_t w[8];
    const unsigned o = (unsigned)(index & 3u);
    int i;
    accel_rng_draw4(seed, stream, index >> 2, w);
    w[4] = w[5] = w[6] = w[7] = 0u;
    if (o) {
        accel_rng_draw4(seed, stream, (index >> 2) + 1u, w + 4);
        if (o & 1u) {
            ACCEL__OPTIM_UNROLL
            for (i = 0; i < 7; ++i) w[i] = w[i + 1];
        }
        if (o & 2u) {
            ACCEL__OPTIM_UNROLL
            for (i = 0; i < 6; ++i) w[i] = w[i + 2];
        }
    }
    ACCEL__OPTIM_UNROLL
    for (i = 0; i < 4; ++i) r[i] = w[i];
}

/* The square root and divisions of the vector path without a branch (device), each the fast sequence of nvcc's own
   correctly rounded operation — the multi-function unit's approximate reciprocal (square root), one Newton step,
   a residual correction — used only on operands where that sequence is exact:
     sqrt(v): v in [2^-101, FLT_MAX], nvcc's own test for its fast path (and v = 0: v itself);
     a / b:   2^-60 <= |a|, b < 2^60, b > 0 (and a = 0: a itself), well inside what nvcc's FCHK passes to the same
              sequence (quotients and residuals stay normal).
   Host: the IEEE operations (the device sequences are exact where they are used, so both give the same bits). */
#ifdef __CUDA_ARCH__
ACCEL__OPTIM_HDI float accel__optim_rcp_approx(float x) {
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
ACCEL__OPTIM_HDI float accel__optim_rsqrt_approx(float x) {
    float y;
    asm("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
#endif
/* v in [2^-101, FLT_MAX]: where nvcc's own square root takes its fast sequence */
ACCEL__OPTIM_HDI int accel__optim_sqrt_in(float v) { return accel_f32_bits(v) - 0x0d000000u <= 0x727fffffu; }
/* 2^-60 <= |x| < 2^60; _pos: and x > 0 */
ACCEL__OPTIM_HDI int accel__optim_mid(float x) {
    return (accel_f32_bits(x) & 0x7fffffffu) - 0x21800000u < 0x3c000000u;
}
ACCEL__OPTIM_HDI int accel__optim_mid_pos(float x) { return accel_f32_bits(x) - 0x21800000u < 0x3c000000u; }
/* 1/b refined once (the first half of the division; the vector path hoists it for b = bc2s) */
ACCEL__OPTIM_HDI float accel__optim_rcp1(float b) {
#ifdef __CUDA_ARCH__
    const float y = accel__optim_rcp_approx(b);
    return __fmaf_rn(y, __fmaf_rn(-b, y, 1.0f), y);
#else
    return 1.0f / b;
#endif
}
/* a / b from y = accel__optim_rcp1(b) (the second half) */
ACCEL__OPTIM_HDI float accel__optim_div_y(float a, float b, float y) {
#ifdef __CUDA_ARCH__
    const float q = __fmaf_rn(y, a, 0.0f);
    return __fmaf_rn(y, __fmaf_rn(-b, q, a), q);
#else
    (void)y;
    return a / b;
#endif
}
ACCEL__OPTIM_HDI float accel__optim_sqrt_fast(float v) {
#ifdef __CUDA_ARCH__
    const float y = accel__optim_rsqrt_approx(v), s = __fmul_rn(v, y);
    return __fmaf_rn(__fmaf_rn(-s, s, v), __fmul_rn(y, 0.5f), s);
#else
    return sqrtf(v);
#endif
}
/* accel__optim_adamw_tail(k, p, m, v) by those sequences (rb = accel__optim_rcp1(k->bc2s), whose range the caller
   checks). *ok is cleared where an operand is out of range; the result is then wrong (on the host deliberately, so
   that the CPU tests catch a caller that keeps it), and the caller computes it again with accel__optim_adamw_tail. */
ACCEL__OPTIM_HDI float accel__optim_update_fast(const accel__optim_coefs *k, float rb, float p, float m, float v,
                                                int *ok) {
    const float s = v == 0.0f ? v : accel__optim_sqrt_fast(v);
    const float q1 = s == 0.0f ? s : accel__optim_div_y(s, k->bc2s, rb);
    const float d = accel__optim_add(q1, k->eps), a = accel__optim_mul(k->nss, m);
    const float q2 = a == 0.0f ? a : accel__optim_div_y(a, d, accel__optim_rcp1(d));
    const int good = (accel__optim_sqrt_in(v) | (v == 0.0f)) &
                     (accel__optim_mid(s) | (s == 0.0f)) & accel__optim_mid_pos(d) &
                     (accel__optim_mid(a) | (a == 0.0f));
    *ok &= good;
#ifdef __CUDA_ARCH__
    return accel__optim_add(p, q2);
#else
    return good ? accel__optim_add(p, q2) : 12345.0f;
#endif
}

/* The first element from which every stream of the job can be read in 16-byte vectors, or -1 (the generic path):
   also -1 for what the vector path does not do (SGD, amsgrad, F16 gradients or model copies). The state slabs are
   laid out so that a parameter's moments share its address modulo 32 bytes (accel_optim_create), so an aligned
   parameter, gradient and model copy are enough. Host only: the pointers are known when the step is enqueued. */
static int accel__optim_vec_head(const accel__optim_dj *jb, const accel__optim_hyper *hy) {
    const uintptr_t gs = jb->gt == (int)ACCEL_F32 ? 4u : 2u, ms = hy->mom_bf16 ? 2u : 4u;
    uintptr_t h;
    if ((hy->kind != ACCEL__OPTIM_K_ADAMW && hy->kind != ACCEL__OPTIM_K_ADAMW_LERP) || hy->amsgrad ||
        (jb->gt != (int)ACCEL_F32 && jb->gt != (int)ACCEL_BF16) || (jb->model && jb->mt != (int)ACCEL_BF16))
        return -1;
    for (h = 0; h < ACCEL__OPTIM_VEC; ++h)
        if (!(((uintptr_t)jb->p + 4u * h) & 15u) && !(((uintptr_t)jb->g + gs * h) & 15u) &&
            !(((uintptr_t)jb->m + ms * h) & 15u) && !(((uintptr_t)jb->v + ms * h) & 15u) &&
            (!jb->model || !(((uintptr_t)jb->model + 2u * h) & 15u)))
            return (int)h;
    return -1;
}

/* The CUDA launch that takes a job: 0..3 the vector path (bit 1: BF16 gradients, bit 0: a model copy), 4 the
   generic one; accel__optim_class_args: the kernel instance's flags. */
#define ACCEL__OPTIM_CLASSES 5
static ACCEL_INLINE int accel__optim_class(const accel__optim_dj *jb) {
    return jb->head < 0 ? 4 : (jb->gt == (int)ACCEL_BF16 ? 2 : 0) | (jb->model ? 1 : 0);
}
static ACCEL_INLINE void accel__optim_class_args(int q, const accel__optim_hyper *hy, int *vec, int *gt, int *model,
                                                 int *sr) {
    *vec = q < 4;
    *gt = (q & 2) ? (int)ACCEL_BF16 : (int)ACCEL_F32;
    *model = q < 4 && (q & 1);
    *sr = *model && hy->stochastic;
}
/* The jobs grouped by class, in order within each: class q is out[first[q] .. first[q + 1]), its chunks numbered
   from 0 (chunk_begin), nchunks[q] in all; d.kj = the job's place in out (the device copy of out holds its
   coefficients). */
static ACCEL_INLINE int accel__optim_chunk_elems(int q, const accel__optim_hyper *hy) {
    int vec, gt, model, sr;
    accel__optim_class_args(q, hy, &vec, &gt, &model, &sr);
    return sr || hy->mom_bf16 ? ACCEL_OPTIM_CHUNK_SR : ACCEL_OPTIM_CHUNK;
}
static ACCEL_INLINE void accel__optim_classify(const accel__optim_job *jobs, int nj, const accel__optim_hyper *hy,
                                               accel__optim_job *out, int first[ACCEL__OPTIM_CLASSES + 1],
                                               long long nchunks[ACCEL__OPTIM_CLASSES]) {
    int q, i, at[ACCEL__OPTIM_CLASSES];
    for (q = 0; q <= ACCEL__OPTIM_CLASSES; ++q) first[q] = 0;
    for (i = 0; i < nj; ++i) ++first[accel__optim_class(&jobs[i].d) + 1];
    for (q = 0; q < ACCEL__OPTIM_CLASSES; ++q) {
        first[q + 1] += first[q];
        at[q] = first[q];
        nchunks[q] = 0;
    }
    for (i = 0; i < nj; ++i) {
        q = accel__optim_class(&jobs[i].d);
        out[at[q]] = jobs[i];
        out[at[q]].chunk_begin = nchunks[q];
        out[at[q]].d.kj = at[q];
        ++at[q];
        nchunks[q] += (jobs[i].d.n + accel__optim_chunk_elems(q, hy) - 1) / accel__optim_chunk_elems(q, hy);
    }
}

/* One launch: its kernel parameter. */
typedef struct accel__optim_largs {
    const accel__optim_job *jobs;        /* the step's jobs in device memory: job kj's coefficients in jobs[kj].k */
    long long nchunks;                   /* chunks of this launch: its grid (a grid-stride loop past 65536) */
    int nj, chunk;                       /* chunk: elements a block (accel__optim_chunk_elems of the class) */
    accel__optim_hyper hy;
    accel__optim_in in;
    long long begins[ACCEL__OPTIM_CAP];  /* each job's first chunk, from 0 */
    accel__optim_dj d[ACCEL__OPTIM_CAP];
} accel__optim_largs;

/* Fills L with the launch of class q that starts at job a of the grouped jobs (at most ACCEL__OPTIM_CAP of them);
   returns the job after its last. djobs: the device copy of `sorted`. */
static ACCEL_INLINE int accel__optim_launch_fill(accel__optim_largs *L, const accel__optim_job *sorted,
                                                 const int *first, const long long *nchunks, int q, int a,
                                                 const accel__optim_job *djobs, const accel__optim_hyper *hy,
                                                 const accel__optim_in *in) {
    const int b = first[q + 1] - a > ACCEL__OPTIM_CAP ? a + ACCEL__OPTIM_CAP : first[q + 1];
    const long long c0 = sorted[a].chunk_begin;
    int i;
    L->jobs = djobs;
    L->nj = b - a;
    L->chunk = accel__optim_chunk_elems(q, hy);
    L->nchunks = (b < first[q + 1] ? sorted[b].chunk_begin : nchunks[q]) - c0;
    L->hy = *hy;
    L->in = *in;
    for (i = 0; i < b - a; ++i) {
        L->begins[i] = sorted[a + i].chunk_begin - c0;
        L->d[i] = sorted[a + i].d;
    }
    return b;
}

/* What the block on chunk c (counted from the job's first) does on the vector path. */
typedef struct accel__optim_span {
    long long v0, v1; /* vectors [v0, v1); vector j = elements head + 8j .. head + 8j + 7 */
    long long s0, s1; /* single elements [s0, s1): the head, on chunk 0 */
    long long t0, t1; /* single elements [t0, t1): the tail, on the job's last chunk */
} accel__optim_span;

ACCEL__OPTIM_HDI void accel__optim_span_of(long long n, int head, long long c, int chunk, accel__optim_span *s) {
    const long long cv = chunk / ACCEL__OPTIM_VEC;
    const long long nvec = n > head ? (n - head) / ACCEL__OPTIM_VEC : 0;
    const long long last = (n + chunk - 1) / chunk - 1;
    const long long tail = head + ACCEL__OPTIM_VEC * nvec;
    s->v0 = c * cv < nvec ? c * cv : nvec;
    s->v1 = (c + 1) * cv < nvec ? (c + 1) * cv : nvec;
    s->s0 = 0;
    s->s1 = c == 0 ? (head < n ? head : n) : 0;
    s->t0 = tail < n ? tail : n;
    s->t1 = c == last ? n : s->t0;
}

/* The job of chunk c: the last one whose first chunk is c or before (an empty job shares its successor's first
   chunk). */
ACCEL__OPTIM_HDI int accel__optim_find(const long long *begins, int nj, long long c) {
    int lo = 0, hi = nj - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (begins[mid] <= c) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* Which elements vector j (of thread lane `lane` of its warp) holds: its two halves of 4 start at *ea and *eb.
   Split layout (ACCEL__OPTIM_SPLIT; where the warp's 32 vectors g0 = j - lane .. g0 + 31 all lie below v1 and the
   block's threads come in whole warps): the 256 elements of the group are laid out so that each 16-byte access of
   the warp covers 512 contiguous bytes of an F32 stream (256 of a 16-bit one) — lane l holds elements 4l..4l+3 and
   128+4l..128+4l+3 of the group. With 8 consecutive elements a lane (the layout of the other vectors), each of a
   warp's F32 accesses covers half of every 32-byte sector it touches: L1 merges the loads, but every store reaches
   L2 as two half-sector writes (ncu on an H200, bf16 grads + bf16 copy: L2 89 % busy, DRAM 76 %; split: 83 % and
   78 %, the step 0.853 -> 0.867 x a copy). BF16-moment instances keep 8 consecutive elements: their 16-bit
   streams are whole 16-byte accesses either way, and the split's extra instructions measured slower there (0.856
   -> 0.838). Returns 1 for the split layout, 0 for 8 consecutive elements (*eb = *ea + 4). */
#ifndef ACCEL__OPTIM_SPLIT
#define ACCEL__OPTIM_SPLIT 1
#endif
ACCEL__OPTIM_HDI int accel__optim_halves(int head, long long j, int lane, int bd, long long v1, const int mom16,
                                         long long *ea, long long *eb) {
    const long long g0 = j - lane;
    if (ACCEL__OPTIM_SPLIT && !mom16 && (bd & 31) == 0 && g0 + 32 <= v1) {
        *ea = head + ACCEL__OPTIM_VEC * g0 + 4 * lane;
        *eb = *ea + 128;
        return 1;
    }
    *ea = head + ACCEL__OPTIM_VEC * j;
    *eb = *ea + 4;
    return 0;
}
/* A 16-bit stream's 8 elements of a vector, widened to float (split: two 8-byte halves). */
ACCEL__OPTIM_HDI void accel__optim_ld8w(float o[8], const uint16_t *s, long long ea, long long eb, int split) {
    uint16_t h[8];
    int q;
    if (split) {
        accel__optim_ld4h(h, s + ea);
        accel__optim_ld4h(h + 4, s + eb);
    } else {
        accel__optim_ld8h(h, s + ea);
    }
    ACCEL__OPTIM_UNROLL
    for (q = 0; q < 8; ++q) o[q] = accel_bf16_to_f32(h[q]);
}
ACCEL__OPTIM_HDI void accel__optim_st8n(uint16_t *d, const uint16_t h[8], long long ea, long long eb, int split) {
    if (split) {
        accel__optim_st4h(d + ea, h);
        accel__optim_st4h(d + eb, h + 4);
    } else {
        accel__optim_st8h(d + ea, h);
    }
}
/* The draws of a vector's 8 elements (element indices index + ea .. + 3, index + eb .. + 3). */
ACCEL__OPTIM_HDI void accel__optim_bits_v(unsigned long long seed, unsigned long long stream, unsigned long long index,
                                          long long ea, long long eb, int split, uint32_t r[8]) {
    if (split) {
        accel__optim_bits4(seed, stream, index + (unsigned long long)ea, r);
        accel__optim_bits4(seed, stream, index + (unsigned long long)eb, r + 4);
    } else {
        accel__optim_bits8(seed, stream, index + (unsigned long long)ea, r);
    }
}

/* The loads of one round of the vector path: the vectors i, i + bd, ... (ACCEL_OPTIM_CUDA_U of them, those below v1;
   lane: the thread's lane in its warp), widened to float. */
ACCEL__OPTIM_HDI void accel__optim_vec_load(const accel__optim_dj *jb, long long i, int lane, int bd, long long v1,
                                            const int gt, const int mom16, float p[][8], float g[][8], float m[][8],
                                            float v[][8]) {
    int u, q;
    ACCEL__OPTIM_UNROLL
    for (u = 0; u < ACCEL_OPTIM_CUDA_U; ++u) {
        const long long j = i + (long long)u * bd;
        long long ea, eb;
        int split;
        ACCEL__OPTIM_UNROLL
        for (q = 0; q < 8; ++q) p[u][q] = g[u][q] = m[u][q] = v[u][q] = 0.0f;
        if (j >= v1) continue;
        split = accel__optim_halves(jb->head, j, lane, bd, v1, mom16, &ea, &eb);
        accel__optim_ld4f(p[u], jb->p + ea);
        accel__optim_ld4f(p[u] + 4, jb->p + eb);
        if (gt == (int)ACCEL_F32) {
            accel__optim_ld4f(g[u], (const float *)jb->g + ea);
            accel__optim_ld4f(g[u] + 4, (const float *)jb->g + eb);
        } else {
            accel__optim_ld8w(g[u], (const uint16_t *)jb->g, ea, eb, split);
        }
        if (mom16) {
            accel__optim_ld8w(m[u], (const uint16_t *)jb->m, ea, eb, split);
            accel__optim_ld8w(v[u], (const uint16_t *)jb->v, ea, eb, split);
        } else {
            accel__optim_ld4f(m[u], (const float *)jb->m + ea);
            accel__optim_ld4f(m[u] + 4, (const float *)jb->m + eb);
            accel__optim_ld4f(v[u], (const float *)jb->v + ea);
            accel__optim_ld4f(v[u] + 4, (const float *)jb->v + eb);
        }
    }
}

/* The updates and stores of one round (rb, ok0: accel__optim_update_fast's reciprocal and range of bc2s). */
ACCEL__OPTIM_HDI void accel__optim_vec_store(const accel__optim_dj *jb, const accel__optim_coefs *k,
                                             const accel__optim_hyper *hy, const accel__optim_in *in, long long i,
                                             int lane, int bd, long long v1, const int gt, const int model,
                                             const int sr,
                                             const int mom16, float rb, int ok0, float p[][8], float g[][8],
                                             float m[][8], float v[][8]) {
    const int lerp = hy->kind == ACCEL__OPTIM_K_ADAMW_LERP;
    int u, q;
    (void)rb; /* without ACCEL_OPTIM_CUDA_FAST */
    ACCEL__OPTIM_UNROLL
    for (u = 0; u < ACCEL_OPTIM_CUDA_U; ++u) {
        const long long j = i + (long long)u * bd;
        long long ea, eb;
        uint32_t r[8];
        uint16_t h[8], h2[8];
        float pn[8];
        int ok = ok0, split;
        if (j >= v1) continue;
        split = accel__optim_halves(jb->head, j, lane, bd, v1, mom16, &ea, &eb);
        ACCEL__OPTIM_UNROLL
        for (q = 0; q < 8; ++q) {
            p[u][q] = accel__optim_mul(p[u][q], k->decay);
            accel__optim_moments(k, accel__optim_grad_in(g[u][q], gt, in, k->clip), &m[u][q], &v[u][q], lerp, 1);
#if ACCEL_OPTIM_CUDA_FAST
            pn[q] = accel__optim_update_fast(k, rb, p[u][q], m[u][q], v[u][q], &ok);
#else
            pn[q] = accel__optim_adamw_tail(k, p[u][q], m[u][q], v[u][q]);
#endif
        }
        if (!ok) { /* an operand out of the fast sequences' range (zero or tiny moments, Inf, NaN): all 8 again */
            ACCEL__OPTIM_FALLBACK_NOTE();
            ACCEL__OPTIM_UNROLL
            for (q = 0; q < 8; ++q) pn[q] = accel__optim_adamw_tail(k, p[u][q], m[u][q], v[u][q]);
        }
        accel__optim_st4f(jb->p + ea, pn);
        accel__optim_st4f(jb->p + eb, pn + 4);
        if (mom16) {
            accel__optim_bits_v(hy->sr_seed, k->t | ACCEL__OPTIM_MOMENT_STREAM, jb->index, ea, eb, split, r);
            ACCEL__OPTIM_UNROLL
            for (q = 0; q < 8; ++q) {
                h[q] = accel_optim_f32_to_bf16_sr(m[u][q], r[q]);
                h2[q] = accel_optim_f32_to_bf16_sr(v[u][q], r[q] >> 16);
            }
            accel__optim_st8n((uint16_t *)jb->m, h, ea, eb, split);
            accel__optim_st8n((uint16_t *)jb->v, h2, ea, eb, split);
        } else {
            accel__optim_st4f((float *)jb->m + ea, m[u]);
            accel__optim_st4f((float *)jb->m + eb, m[u] + 4);
            accel__optim_st4f((float *)jb->v + ea, v[u]);
            accel__optim_st4f((float *)jb->v + eb, v[u] + 4);
        }
        if (model) {
            if (sr) {
                accel__optim_bits_v(hy->sr_seed, k->t, jb->index, ea, eb, split, r);
                ACCEL__OPTIM_UNROLL
                for (q = 0; q < 8; ++q) h[q] = accel_optim_f32_to_bf16_sr(pn[q], r[q]);
            } else {
                ACCEL__OPTIM_UNROLL
                for (q = 0; q < 8; ++q) h[q] = accel_f32_to_bf16(pn[q]);
            }
            accel__optim_st8n((uint16_t *)jb->model, h, ea, eb, split);
        }
    }
}

/* The coefficients of a block's job, for its threads: on the device staged in shared memory (stage) by the first
   threads after every thread has issued its first loads, so that no block waits for them before its data is on
   the way and the compiler can neither sink those loads below the found_inf test nor keep 20 more values in
   registers; on the host (stage NULL) the array itself. */
ACCEL__OPTIM_HDI const accel__optim_coefs *accel__optim_stage(const accel__optim_coefs *kp, accel__optim_coefs *stage,
                                                              int tid) {
#ifdef __CUDA_ARCH__
    if (tid < (int)(sizeof(accel__optim_coefs) / 4)) ((uint32_t *)stage)[tid] = ((const uint32_t *)kp)[tid];
    __syncthreads();
    return stage;
#else
    (void)stage;
    (void)tid;
    return kp;
#endif
}

/* The vector path of thread tid (of bd) on one chunk: the rounds of vectors i = v0 + tid, i + U * bd, ..., then the
   head and tail elements (kp: the job's coefficients in device memory, stage: accel__optim_stage's). gt (ACCEL_F32
   / ACCEL_BF16), model (a BF16 copy), sr (its stochastic rounding) and mom16 (BF16 moments) are compile-time
   constants in the kernel. */
ACCEL__OPTIM_HDI void accel__optim_vec_thread(const accel__optim_dj *jb, const accel__optim_coefs *kp,
                                              accel__optim_coefs *stage, const accel__optim_hyper *hy,
                                              const accel__optim_in *in, const accel__optim_span *s, int tid, int bd,
                                              const int gt, const int model, const int sr, const int mom16) {
    float p[ACCEL_OPTIM_CUDA_U][8], g[ACCEL_OPTIM_CUDA_U][8], m[ACCEL_OPTIM_CUDA_U][8], v[ACCEL_OPTIM_CUDA_U][8];
    long long i = s->v0 + tid, e;
    const accel__optim_coefs *k;
    float rb;
    int ok0;
    const int lane = tid & 31;
    if (i < s->v1) accel__optim_vec_load(jb, i, lane, bd, s->v1, gt, mom16, p, g, m, v);
    k = accel__optim_stage(kp, stage, tid);
    if (k->skip) return; /* found_inf: nothing is written */
    rb = accel__optim_rcp1(k->bc2s);
    ok0 = ACCEL_OPTIM_CUDA_FAST ? accel__optim_mid_pos(k->bc2s) : 1;
    while (i < s->v1) {
        accel__optim_vec_store(jb, k, hy, in, i, lane, bd, s->v1, gt, model, sr, mom16, rb, ok0, p, g, m, v);
        i += (long long)ACCEL_OPTIM_CUDA_U * bd;
        if (i < s->v1) accel__optim_vec_load(jb, i, lane, bd, s->v1, gt, mom16, p, g, m, v);
    }
    for (e = s->s0 + tid; e < s->s1; e += bd) accel__optim_elem(jb, k, hy, in, e, 1);
    for (e = s->t0 + tid; e < s->t1; e += bd) accel__optim_elem(jb, k, hy, in, e, 1);
}

/* The generic path of thread tid (of bd) on elements [start, start + len) of one job. */
ACCEL__OPTIM_HDI void accel__optim_gen_thread(const accel__optim_dj *jb, const accel__optim_coefs *k,
                                              const accel__optim_hyper *hy, const accel__optim_in *in,
                                              long long start, long long len, int tid, int bd, const int hw) {
    long long i;
    if (k->skip) return;
    for (i = tid; i < len; i += (long long)ACCEL__OPTIM_UG * bd) {
        float x[ACCEL__OPTIM_UG][5];
        int u, q;
        ACCEL__OPTIM_UNROLL
        for (u = 0; u < ACCEL__OPTIM_UG; ++u) {
            ACCEL__OPTIM_UNROLL
            for (q = 0; q < 5; ++q) x[u][q] = 0.0f;
            if (i + (long long)u * bd < len) accel__optim_load1(jb, hy, start + i + (long long)u * bd, x[u]);
        }
        ACCEL__OPTIM_UNROLL
        for (u = 0; u < ACCEL__OPTIM_UG; ++u) {
            if (i + (long long)u * bd >= len) continue;
            accel__optim_update1(k, hy, in, jb->gt, x[u], hw);
            accel__optim_store1(jb, k, hy, start + i + (long long)u * bd, x[u]);
        }
    }
}

/* Block work on chunk c of launch A: the job lookup, then the thread's path (vec: the vector path; compile-time
   flags; stage: shared memory for its coefficients on the device, NULL on the host) or the generic path (on a
   copy of the coefficients: the compiler could not otherwise keep them in registers across the stores). */
ACCEL__OPTIM_HDI void accel__optim_chunk(const accel__optim_largs *A, long long c, int tid, int bd, const int vec,
                                         const int gt, const int model, const int sr, const int mom16,
                                         accel__optim_coefs *stage) {
    const int j = accel__optim_find(A->begins, A->nj, c);
    const accel__optim_dj *d = &A->d[j];
    if (vec) {
        accel__optim_span s;
        accel__optim_span_of(d->n, d->head, c - A->begins[j], A->chunk, &s);
        accel__optim_vec_thread(d, &A->jobs[d->kj].k, stage, &A->hy, &A->in, &s, tid, bd, gt, model, sr, mom16);
    } else {
        const long long start = (c - A->begins[j]) * A->chunk;
        const long long len = d->n - start < A->chunk ? d->n - start : A->chunk;
        const accel__optim_coefs k = A->jobs[d->kj].k;
        accel__optim_gen_thread(d, &k, &A->hy, &A->in, start, len, tid, bd, 1);
    }
}

#ifdef __CUDACC__
/* Reads found_inf, counts the step (each parameter with a gradient, and the optimizer), computes each job's
   constants and the clip coefficient (from the device norm, without a host read, or the host's value); with
   found_inf set it only marks every job skipped. One block: the lists are short (a GPT-2 has 148 tensors). */
static __global__ void accel__optim_coef_kernel(accel__optim_job *jobs, int njobs, accel__optim_hyper hy,
                                                long long *counters, int nparams, const int32_t *found,
                                                const double *norm, double max_norm, float clip) {
    const int skip = found && *found;
    const float c = norm ? accel__optim_clip_coef(*norm, max_norm) : clip;
    int i;
    for (i = (int)threadIdx.x; i < njobs; i += (int)blockDim.x) {
        long long t;
        if (skip) {
            jobs[i].k.skip = 1;
            continue;
        }
        t = counters[jobs[i].param] + 1;
        counters[jobs[i].param] = t;
        accel__optim_make_coefs(&hy, jobs[i].lr, jobs[i].wd, (unsigned long long)t, c, &jobs[i].k);
    }
    if (threadIdx.x == 0 && !skip) counters[nparams] += 1;
}

/* One instance of the vector path per (gradient dtype, copy, its rounding, moment dtype) and one of the generic
   path, so that each holds one path and gets the registers of that path alone (in one kernel, the compiler kept the
   fields of every path live at the branch and spilled). The launch bounds: ACCEL_OPTIM_CUDA_MINB (instances without
   a Philox stream), ACCEL_OPTIM_CUDA_MINB_SR (a stochastic copy with F32 moments) and ACCEL_OPTIM_CUDA_MINB_MOM16
   (BF16 moments) blocks of 256 threads per SM: 4 leave 64 registers a thread, 3 leave 80, 2 leave 128 (sm_90 with
   nvcc 13: the vector path with F32 moments fits 80 without spills, with a Philox stream 128). Measured on an H200:
   the BF16-moment instances ran faster at 3 despite spilling (0.86x of a copy against 0.80x at 2), the stochastic
   copy slower (0.75x against 0.81x). */
#ifndef ACCEL_OPTIM_CUDA_MINB
#define ACCEL_OPTIM_CUDA_MINB 3
#endif
#ifndef ACCEL_OPTIM_CUDA_MINB_SR
#define ACCEL_OPTIM_CUDA_MINB_SR 2
#endif
#ifndef ACCEL_OPTIM_CUDA_MINB_MOM16
#define ACCEL_OPTIM_CUDA_MINB_MOM16 3
#endif
#if ACCEL_OPTIM_CUDA_MINB < 1 || ACCEL_OPTIM_CUDA_MINB_SR < 1 || ACCEL_OPTIM_CUDA_MINB_MOM16 < 1
#error "ACCEL_OPTIM_CUDA_MINB, ACCEL_OPTIM_CUDA_MINB_SR and ACCEL_OPTIM_CUDA_MINB_MOM16 must be positive"
#endif
#define ACCEL__OPTIM_MINB(m) ((m) * 256 / ACCEL_OPTIM_CUDA_BLOCK > 0 ? (m) * 256 / ACCEL_OPTIM_CUDA_BLOCK : 1)
typedef char accel__optim_largs_fit[sizeof(accel__optim_largs) <= 32764 ? 1 : -1];
template <int gt, int model, int sr, int mom16>
static __global__ void __launch_bounds__(ACCEL_OPTIM_CUDA_BLOCK,
                                         ACCEL__OPTIM_MINB(mom16  ? ACCEL_OPTIM_CUDA_MINB_MOM16
                                                           : sr ? ACCEL_OPTIM_CUDA_MINB_SR
                                                                : ACCEL_OPTIM_CUDA_MINB))
accel__optim_vec_kernel(const __grid_constant__ accel__optim_largs A) {
    __shared__ accel__optim_coefs stage;
    long long c;
    for (c = blockIdx.x; c < A.nchunks; c += gridDim.x) {
        if (c != blockIdx.x) __syncthreads(); /* every thread is done with the stage of the last chunk */
        accel__optim_chunk(&A, c, (int)threadIdx.x, (int)blockDim.x, 1, gt, model, sr, mom16, &stage);
    }
}
static __global__ void __launch_bounds__(ACCEL_OPTIM_CUDA_BLOCK, ACCEL__OPTIM_MINB(ACCEL_OPTIM_CUDA_MINB))
accel__optim_gen_kernel(const __grid_constant__ accel__optim_largs A) {
    long long c;
    for (c = blockIdx.x; c < A.nchunks; c += gridDim.x)
        accel__optim_chunk(&A, c, (int)threadIdx.x, (int)blockDim.x, 0, 0, 0, 0, 0, NULL);
}

/* jobs: njobs descriptors grouped by class (accel__optim_classify), copied to the device scratch in one go for the
   coefficient kernel, then the launches (L: the host's room for one kernel parameter). */
static accel_result accel__optim_cuda_step(accel *acc, const accel__optim_job *jobs, int njobs, const int *first,
                                           const long long *nchunks, const accel__optim_hyper *hy,
                                           const accel__optim_in *in, long long *counters, int nparams,
                                           const int32_t *found, const double *norm, double max_norm, float clip,
                                           accel__optim_largs *L) {
    cudaStream_t st = (cudaStream_t)acc->stream;
    size_t bytes = sizeof(accel__optim_job) * (size_t)(njobs > 0 ? njobs : 1);
    accel__optim_job *d = (accel__optim_job *)accel__device_scratch(acc, bytes);
    int q, a, b;
    if (!d) return accel__fail_wrap(acc, acc->last_result != ACCEL_OK ? acc->last_result : ACCEL_ERR_OUT_OF_MEMORY,
                                    "accel_optim_step: the device tensor list");
    /* jobs is pageable (the host allocator): cudaMemcpyAsync returns once the bytes are staged, so the next step may
       rewrite it while this one is still queued */
    if (njobs > 0) ACCEL__CUDA_CHECK(acc, cudaMemcpyAsync(d, jobs, bytes, cudaMemcpyHostToDevice, st));
    accel__optim_coef_kernel<<<1, ACCEL_OPTIM_CUDA_BLOCK, 0, st>>>(d, njobs, *hy, counters, nparams, found, norm,
                                                                   max_norm, clip);
    ACCEL__CUDA_CHECK(acc, cudaGetLastError());
    for (q = 0; q < ACCEL__OPTIM_CLASSES; ++q)
        for (a = first[q]; a < first[q + 1]; a = b) {
            int vec, gt, model, sr, blocks;
            const int m16 = hy->mom_bf16;
            b = accel__optim_launch_fill(L, jobs, first, nchunks, q, a, d, hy, in);
            blocks = (int)(L->nchunks < ACCEL__OPTIM_MAX_BLOCKS ? L->nchunks : ACCEL__OPTIM_MAX_BLOCKS);
            if (blocks <= 0) continue;
            accel__optim_class_args(q, hy, &vec, &gt, &model, &sr);
#define ACCEL__OPTIM_VEC_LAUNCH(G, M, S, B)                                                                            \
    accel__optim_vec_kernel<G, M, S, B><<<blocks, ACCEL_OPTIM_CUDA_BLOCK, 0, st>>>(*L)
#define ACCEL__OPTIM_VEC_LAUNCH2(G, M, S)                                                                              \
    do {                                                                                                               \
        if (m16) ACCEL__OPTIM_VEC_LAUNCH(G, M, S, 1);                                                                  \
        else ACCEL__OPTIM_VEC_LAUNCH(G, M, S, 0);                                                                      \
    } while (0)
            if (!vec) accel__optim_gen_kernel<<<blocks, ACCEL_OPTIM_CUDA_BLOCK, 0, st>>>(*L);
            else if (gt == (int)ACCEL_F32 && !model) ACCEL__OPTIM_VEC_LAUNCH2((int)ACCEL_F32, 0, 0);
            else if (gt == (int)ACCEL_F32 && !sr) ACCEL__OPTIM_VEC_LAUNCH2((int)ACCEL_F32, 1, 0);
            else if (gt == (int)ACCEL_F32) ACCEL__OPTIM_VEC_LAUNCH2((int)ACCEL_F32, 1, 1);
            else if (!model) ACCEL__OPTIM_VEC_LAUNCH2((int)ACCEL_BF16, 0, 0);
            else if (!sr) ACCEL__OPTIM_VEC_LAUNCH2((int)ACCEL_BF16, 1, 0);
            else ACCEL__OPTIM_VEC_LAUNCH2((int)ACCEL_BF16, 1, 1);
#undef ACCEL__OPTIM_VEC_LAUNCH2
#undef ACCEL__OPTIM_VEC_LAUNCH
            ACCEL__CUDA_CHECK(acc, cudaGetLastError());
        }
    return ACCEL_OK;
}
#endif /* __CUDACC__ */

/* --------------------------------------------------------------------------- 4. create / destroy / grads */
struct accel_optim {
    accel *acc;
    accel__optim_hyper hy;
    accel_optim_algorithm algorithm;
    int lerp;                   /* moment rule */
    int nparams, ngroups, nstate;
    accel_tensor *params, *grads, *model; /* copies (names point into `names`) */
    accel_tensor *state;        /* nparams * nstate, param-major */
    char *names;
    int *group_of, *group_count;
    double *lr, *base_lr, *wd;  /* per group */
    long long *numel;
    unsigned long long *eoff;   /* element offset of each param in the list (for index) */
    size_t *soff;               /* element offset of each param inside a state slab (see accel_optim_create) */
    size_t slab_elems;          /* elements per slab, staggered (ACCEL__OPTIM_STAGGER_BYTES) */
    size_t state_size;          /* bytes per state element: 4, or 2 with BF16 moments */
    unsigned long long index_offset;
    unsigned char *slab;        /* nstate slabs, 64-byte aligned, in slab_mem: acc's device memory (host: CPU run;
                                   pinned: offload) */
    void *slab_mem;
    long long *counters;        /* where the slabs are: nparams per-param steps + 1 */
    int host;                   /* the step runs the CPU loop: a CPU run, or desc.offload */
    int pinned;                 /* desc.offload: slab_mem and counters came from acc's pinned allocator */
    accel__optim_job *jobs;     /* host scratch for one step */
    void *largs;                /* CUDA: the host's room for one launch's kernel parameter (accel__optim_largs) */
};

static const char *accel__optim_state_key(const accel_optim *o, int s) {
    if (o->algorithm == ACCEL_OPTIM_SGD) return "momentum_buffer";
    return s == 0 ? "exp_avg" : s == 1 ? "exp_avg_sq" : "max_exp_avg_sq";
}

static const char *accel__optim_tname(const accel_tensor *t) { return t && t->name ? t->name : "(unnamed)"; }

/* 0 → default; negative zero (ACCEL_OPTIM_ZERO) → 0. */
static double accel__optim_dflt(double v, double dflt) { return v == 0.0 ? (signbit(v) ? 0.0 : dflt) : v; }
static int accel__optim_finite(double v) { return v == v && v < 1.7976931348623157e308 && v > -1.7976931348623157e308; }

/* Validates one list against the params: n entries, numel equal, dtypes allowed, ptr present when numel > 0
   (allow_null: a NULL ptr means "none"). */
static accel_result accel__optim_check_list(accel *acc, const char *what, const accel_tensor *t,
                                            const accel_tensor *params, int n, int want_mask, int allow_null) {
    int i;
    for (i = 0; i < n; ++i) {
        int64_t pn = accel_tensor_numel(&params[i]), tn = accel_tensor_numel(&t[i]);
        if (!t[i].ptr && allow_null) continue;
        if (tn < 0)
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_optim: %s[%d] \"%.100s\" has an invalid shape",
                               what, i, accel__optim_tname(&t[i]));
        if (tn != pn)
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                               "accel_optim: %s[%d] \"%.100s\" has %lld elements, its parameter "
                               "\"%.100s\" has %lld",
                               what, i, accel__optim_tname(&t[i]), (long long)tn, accel__optim_tname(&params[i]),
                               (long long)pn);
        if ((int)t[i].dtype <= 0 || (int)t[i].dtype >= (int)ACCEL_DTYPE_COUNT || !((1 << (int)t[i].dtype) & want_mask))
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_optim: %s[%d] \"%.100s\" has dtype %s (%s)",
                               what, i, accel__optim_tname(&t[i]),
                               accel_dtype_name(t[i].dtype) ? accel_dtype_name(t[i].dtype) : "invalid",
                               want_mask == (1 << ACCEL_F32)    ? "need F32"
                               : (want_mask & (1 << ACCEL_F32)) ? "need F32, BF16 or F16"
                                                                : "need BF16 or F16");
        if (tn > 0 && !t[i].ptr)
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_optim: %s[%d] \"%.100s\" has no data pointer",
                               what, i, accel__optim_tname(&t[i]));
    }
    return ACCEL_OK;
}

static accel_result accel__optim_check_desc(accel *acc, const accel_optim_desc *d) {
    const int f32 = 1 << ACCEL_F32, any = (1 << ACCEL_F32) | (1 << ACCEL_BF16) | (1 << ACCEL_F16);
    const int half = (1 << ACCEL_BF16) | (1 << ACCEL_F16);
    double lr = accel__optim_dflt(d->lr, 1e-3), b1 = accel__optim_dflt(d->beta1, 0.9);
    double b2 = accel__optim_dflt(d->beta2, 0.999), eps = accel__optim_dflt(d->eps, 1e-8);
    accel_result r;
    int i, sum = 0;
    if (d->algorithm != ACCEL_OPTIM_ADAMW && d->algorithm != ACCEL_OPTIM_SGD)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                           "accel_optim_create: algorithm %d is not ACCEL_OPTIM_ADAMW or _SGD", (int)d->algorithm);
    if (d->nparams == 0) /* torch: "optimizer got an empty parameter list" */
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                           "accel_optim_create: optimizer got an empty parameter list (nparams 0)");
    if (d->nparams < 0 || !d->params)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                           "accel_optim_create: bad parameter list (nparams %d, params %s)", d->nparams,
                           d->params ? "given" : "NULL");
    if (!accel__optim_finite(lr) || lr < 0.0)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                           "accel_optim_create: lr=%g must be finite and >= 0 (torch: Invalid learning rate)", lr);
    if (!accel__optim_finite(d->weight_decay) || d->weight_decay < 0.0)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                           "accel_optim_create: weight_decay=%g must be finite and >= 0", d->weight_decay);
    if (d->algorithm == ACCEL_OPTIM_ADAMW) {
        if (!(b1 >= 0.0 && b1 < 1.0) || !(b2 >= 0.0 && b2 < 1.0))
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                               "accel_optim_create: betas (%g, %g) must be in [0, 1) (as torch)", b1, b2);
        if (!accel__optim_finite(eps) || eps < 0.0)
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_optim_create: eps=%g must be finite and >= 0",
                               eps);
        if (d->moment_rule != ACCEL_OPTIM_MOMENT_DEFAULT && d->moment_rule != ACCEL_OPTIM_MOMENT_MUL_ADD &&
            d->moment_rule != ACCEL_OPTIM_MOMENT_LERP)
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                               "accel_optim_create: moment_rule %d is not an accel_optim_moment_rule",
                               (int)d->moment_rule);
        if (d->momentum != 0.0 || d->dampening != 0.0 || d->nesterov)
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                               "accel_optim_create: momentum, dampening and nesterov are SGD options");
    } else {
        if (!accel__optim_finite(d->momentum) || d->momentum < 0.0)
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                               "accel_optim_create: momentum=%g must be finite and >= 0", d->momentum);
        if (!accel__optim_finite(d->dampening))
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_optim_create: dampening=%g must be finite",
                               d->dampening);
        if (d->nesterov && (d->momentum <= 0.0 || d->dampening != 0.0))
            return ACCEL__FAIL(
                    acc, ACCEL_ERR_INVALID_ARGUMENT,
                    "accel_optim_create: Nesterov momentum requires a momentum and zero dampening (as torch)");
        if (d->amsgrad || d->moment_rule != ACCEL_OPTIM_MOMENT_DEFAULT || d->beta1 != 0.0 || d->beta2 != 0.0 ||
            d->eps != 0.0)
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                               "accel_optim_create: betas, eps, amsgrad and moment_rule are AdamW options");
    }
    if (d->moment_dtype != ACCEL_DTYPE_INVALID && d->moment_dtype != ACCEL_F32 && d->moment_dtype != ACCEL_BF16)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_optim_create: moment_dtype %s (need F32 or BF16)",
                           accel_dtype_name(d->moment_dtype) ? accel_dtype_name(d->moment_dtype) : "invalid");
    if (d->moment_dtype == ACCEL_BF16 && (d->algorithm != ACCEL_OPTIM_ADAMW || d->amsgrad))
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                           "accel_optim_create: moment_dtype BF16 is for AdamW without amsgrad (exp_avg, exp_avg_sq)");
    if (d->model_rounding != ACCEL_OPTIM_ROUND_NEAREST && d->model_rounding != ACCEL_OPTIM_ROUND_STOCHASTIC)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                           "accel_optim_create: model_rounding %d is not an accel_optim_rounding",
                           (int)d->model_rounding);
    r = accel__optim_check_list(acc, "params", d->params, d->params, d->nparams, f32, 0);
    if (r == ACCEL_OK && d->grads) r = accel__optim_check_list(acc, "grads", d->grads, d->params, d->nparams, any, 1);
    if (r == ACCEL_OK && d->model) r = accel__optim_check_list(acc, "model", d->model, d->params, d->nparams, half, 1);
    if (r != ACCEL_OK) return r;
    if (d->model && d->model_rounding == ACCEL_OPTIM_ROUND_STOCHASTIC)
        for (i = 0; i < d->nparams; ++i)
            if (d->model[i].ptr && d->model[i].dtype != ACCEL_BF16)
                return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                                   "accel_optim_create: model[%d] \"%.100s\" is %s; stochastic "
                                   "rounding writes BF16 only",
                                   i, accel__optim_tname(&d->model[i]), accel_dtype_name(d->model[i].dtype));
    if (d->groups) {
        if (d->ngroups <= 0)
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_optim_create: groups given with ngroups %d",
                               d->ngroups);
        for (i = 0; i < d->ngroups; ++i) {
            double glr = accel__optim_dflt(d->groups[i].lr, lr);
            if (d->groups[i].count < 0)
                return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_optim_create: group %d has count %d", i,
                                   d->groups[i].count);
            if (!accel__optim_finite(glr) || glr < 0.0)
                return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                                   "accel_optim_create: group %d lr=%g must be finite and >= 0", i, glr);
            if (!accel__optim_finite(d->groups[i].weight_decay) || d->groups[i].weight_decay < 0.0)
                return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                                   "accel_optim_create: group %d weight_decay=%g must be finite and >= 0", i,
                                   d->groups[i].weight_decay);
            sum += d->groups[i].count;
            if (sum > d->nparams) break;
        }
        if (sum != d->nparams)
            return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT,
                               "accel_optim_create: the groups' counts add up to %s%d, the list has %d "
                               "parameters",
                               sum > d->nparams ? "more than " : "", sum, d->nparams);
    } else if (d->ngroups != 0) {
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_optim_create: ngroups %d without groups",
                           d->ngroups);
    }
    return ACCEL_OK;
}

/* Sets every state tensor and the step counts to zero (device memory on CUDA, on acc->stream). */
static accel_result accel__optim_zero_device(accel_optim *o, void *p, size_t bytes) {
    accel *acc = o->acc;
    if (!bytes) return ACCEL_OK;
    if (o->host) { memset(p, 0, bytes); return ACCEL_OK; }
#ifdef ACCEL_WITH_CUDA
    ACCEL__CUDA_CHECK(acc, cudaMemsetAsync(p, 0, bytes, (cudaStream_t)acc->stream));
    return ACCEL_OK;
#else
    return ACCEL__FAIL(acc, ACCEL_ERR_UNSUPPORTED,
                       "accel_optim: CUDA device %d needs an implementation built with CUDA", acc->device);
#endif
}

ACCEL__DEF void accel_optim_destroy(accel_optim *o) {
    accel *acc;
    if (!o) return;
    acc = o->acc;
    if (o->pinned) {
        accel_pinned_free(acc, o->slab_mem);
        accel_pinned_free(acc, o->counters);
    } else {
        if (o->slab_mem) accel_device_free(acc, o->slab_mem);
        if (o->counters) accel_device_free(acc, o->counters);
    }
    accel_host_free(acc, o->params);
    accel_host_free(acc, o->names);
    accel_host_free(acc, o->group_of);
    accel_host_free(acc, o->lr);
    accel_host_free(acc, o->numel);
    accel_host_free(acc, o->jobs);
    accel_host_free(acc, o->largs);
    accel_host_free(acc, o);
}

ACCEL__DEF accel_result accel_optim_create(accel *acc, const accel_optim_desc *desc, accel_optim **out) {
    accel_optim_desc d;
    accel_optim *o;
    accel_result r;
    size_t name_bytes = 0, pos = 0, total = 0;
    int i, s, g, ng, n;
    if (out) *out = NULL;
    if (!acc || !out) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_optim_create: NULL acc or out");
    if (desc) d = *desc;
    else memset(&d, 0, sizeof d);
    r = accel__optim_check_desc(acc, &d);
    if (r != ACCEL_OK) return r;
    n = d.nparams;
    ng = d.groups ? d.ngroups : 1;
    o = (accel_optim *)accel_host_alloc(acc, sizeof *o);
    if (!o) return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "accel_optim_create");
    memset(o, 0, sizeof *o);
    o->acc = acc;
    o->algorithm = d.algorithm;
    o->nparams = n;
    o->ngroups = ng;
    o->lerp = d.algorithm == ACCEL_OPTIM_ADAMW && d.moment_rule == ACCEL_OPTIM_MOMENT_LERP;
    o->nstate = d.algorithm == ACCEL_OPTIM_ADAMW ? (d.amsgrad ? 3 : 2) : (d.momentum != 0.0 ? 1 : 0);
    o->index_offset = d.index_offset;
    o->pinned = d.offload != 0;
    o->host = acc->device < 0 || o->pinned;
    o->hy.beta1 = d.algorithm == ACCEL_OPTIM_ADAMW ? accel__optim_dflt(d.beta1, 0.9) : 0.0;
    o->hy.beta2 = d.algorithm == ACCEL_OPTIM_ADAMW ? accel__optim_dflt(d.beta2, 0.999) : 0.0;
    o->hy.eps = d.algorithm == ACCEL_OPTIM_ADAMW ? accel__optim_dflt(d.eps, 1e-8) : 0.0;
    o->hy.momentum = d.momentum;
    o->hy.dampening = d.dampening;
    o->hy.kind = d.algorithm == ACCEL_OPTIM_ADAMW ? (o->lerp ? ACCEL__OPTIM_K_ADAMW_LERP : ACCEL__OPTIM_K_ADAMW)
                                                  : (d.momentum != 0.0 ? ACCEL__OPTIM_K_SGD_MOM : ACCEL__OPTIM_K_SGD);
    o->hy.amsgrad = d.amsgrad ? 1 : 0;
    o->hy.nesterov = d.nesterov ? 1 : 0;
    o->hy.maximize = d.maximize ? 1 : 0;
    o->hy.stochastic = d.model_rounding == ACCEL_OPTIM_ROUND_STOCHASTIC;
    o->hy.sr_seed = d.sr_seed;
    o->hy.mom_bf16 = d.moment_dtype == ACCEL_BF16;
    o->state_size = o->hy.mom_bf16 ? 2u : 4u;

    /* host bookkeeping: four blocks (tensor descriptors, names, per-param ints/offsets, per-group doubles) */
    for (i = 0; i < n; ++i) name_bytes += (d.params[i].name ? strlen(d.params[i].name) : 0) + 1;
    name_bytes += (size_t)n * (size_t)o->nstate * 48u;
    o->params = (accel_tensor *)accel_host_alloc(acc, sizeof(accel_tensor) * (size_t)(4 * n + n * o->nstate + 1));
    o->names = (char *)accel_host_alloc(acc, name_bytes + 1);
    o->group_of = (int *)accel_host_alloc(acc, sizeof(int) * (size_t)(n + ng + 1));
    o->lr = (double *)accel_host_alloc(acc, sizeof(double) * (size_t)(3 * ng));
    o->numel = (long long *)accel_host_alloc(acc, (sizeof(long long) + sizeof(unsigned long long) + sizeof(size_t)) *
                                                          (size_t)(n + 1));
    /* the jobs in parameter order, then grouped by class for CUDA */
    o->jobs = (accel__optim_job *)accel_host_alloc(acc, 2 * sizeof(accel__optim_job) * (size_t)(n + 1));
    if (!o->host) o->largs = accel_host_alloc(acc, sizeof(accel__optim_largs));
    if (!o->params || !o->names || !o->group_of || !o->lr || !o->numel || !o->jobs || (!o->host && !o->largs)) {
        accel_optim_destroy(o);
        return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "accel_optim_create (%d parameters)", n);
    }
    memset(o->params, 0, sizeof(accel_tensor) * (size_t)(4 * n + n * o->nstate + 1));
    o->grads = o->params + n;
    o->model = o->params + 2 * n;
    o->state = o->params + 4 * n;
    o->group_count = o->group_of + n;
    o->base_lr = o->lr + ng;
    o->wd = o->lr + 2 * ng;
    o->eoff = (unsigned long long *)(o->numel + n + 1);
    o->soff = (size_t *)(o->eoff + n + 1);
    for (i = 0; i < n; ++i) {
        o->params[i] = d.params[i];
        o->params[i].name = o->names + pos;
        if (d.params[i].name) {
            size_t l = strlen(d.params[i].name);
            memcpy(o->names + pos, d.params[i].name, l);
            pos += l;
        }
        o->names[pos++] = 0;
        if (d.grads) { o->grads[i] = d.grads[i]; o->grads[i].name = NULL; }
        if (d.model) { o->model[i] = d.model[i]; o->model[i].name = NULL; }
        o->numel[i] = (long long)accel_tensor_numel(&d.params[i]);
        o->eoff[i] = i ? o->eoff[i - 1] + (unsigned long long)o->numel[i - 1] : 0u;
        /* Each piece starts on a 16-element boundary plus the parameter's own offset from a 32-byte boundary (in
           floats), so that its moments are as aligned as the parameter: the CUDA step reads every stream in 16-byte
           vectors from the first element where the parameter, gradient and copy are (accel__optim_vec_head) */
        total = (total + 15u) & ~(size_t)15u;
        o->soff[i] = total + (size_t)(((uintptr_t)d.params[i].ptr >> 2) & 7u);
        total = o->soff[i] + (size_t)o->numel[i];
    }
    /* The slabs are staggered by 4 KiB + 64 B: slabs a power of two apart put exp_avg[i] and exp_avg_sq[i] on the
       same cache set and DRAM bank, and the step ran at a third of the speed (bench/optim). */
    total = ((total + 15u) & ~(size_t)15u) + ACCEL__OPTIM_STAGGER_BYTES / o->state_size;
    o->slab_elems = total;
    for (g = 0, i = 0; g < ng; ++g) {
        int c = d.groups ? d.groups[g].count : n, k;
        o->group_count[g] = c;
        o->lr[g] = o->base_lr[g] = d.groups ? accel__optim_dflt(d.groups[g].lr, accel__optim_dflt(d.lr, 1e-3))
                                             : accel__optim_dflt(d.lr, 1e-3);
        o->wd[g] = d.groups ? d.groups[g].weight_decay : d.weight_decay;
        if (o->wd[g] == 0.0) o->wd[g] = 0.0; /* drop a negative zero */
        for (k = 0; k < c; ++k) o->group_of[i++] = g;
    }

    /* device state: the moments in nstate slabs, then the step counts */
    if (o->nstate && total) {
        size_t bytes = o->state_size * total * (size_t)o->nstate;
        /* host allocators give 16 bytes: the layout needs 32 */
        o->slab_mem = o->pinned ? accel_pinned_alloc(acc, bytes + 64) : accel_device_alloc(acc, bytes + 64);
        o->slab = o->slab_mem ? (unsigned char *)o->slab_mem + ((64u - ((uintptr_t)o->slab_mem & 63u)) & 63u) : NULL;
        if (!o->slab) {
            accel_optim_destroy(o);
            return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "accel_optim_create: optimizer state of %zu bytes",
                                    bytes);
        }
    }
    o->counters = (long long *)(o->pinned ? accel_pinned_alloc(acc, sizeof(long long) * (size_t)(n + 1))
                                          : accel_device_alloc(acc, sizeof(long long) * (size_t)(n + 1)));
    if (!o->counters) {
        accel_optim_destroy(o);
        return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "accel_optim_create: step counts");
    }
    r = accel__optim_zero_device(o, o->slab, o->slab ? o->state_size * total * (size_t)o->nstate : 0);
    if (r == ACCEL_OK) r = accel__optim_zero_device(o, o->counters, sizeof(long long) * (size_t)(n + 1));
    if (r != ACCEL_OK) {
        accel_optim_destroy(o);
        return r;
    }
    for (i = 0; i < n; ++i)
        for (s = 0; s < o->nstate; ++s) {
            accel_tensor *t = &o->state[i * o->nstate + s];
            char *nm = o->names + pos;
            int w = accel__fmt(nm, 48, "state.%d.%s", i, accel__optim_state_key(o, s));
            *t = d.params[i];
            t->name = nm;
            t->ptr = o->slab ? (void *)(o->slab + o->state_size * ((size_t)s * total + o->soff[i])) : NULL;
            t->dtype = o->hy.mom_bf16 ? ACCEL_BF16 : ACCEL_F32;
            pos += (size_t)w + 1;
        }
    *out = o;
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_optim_set_grads(accel_optim *o, const accel_tensor *grads, int n) {
    const int any = (1 << ACCEL_F32) | (1 << ACCEL_BF16) | (1 << ACCEL_F16);
    accel_result r;
    int i;
    if (!o) return ACCEL__FAIL(NULL, ACCEL_ERR_INVALID_ARGUMENT, "accel_optim_set_grads: opt is NULL");
    if (n != o->nparams || (n > 0 && !grads))
        return ACCEL__FAIL(o->acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_optim_set_grads: %d gradients for %d parameters",
                           n, o->nparams);
    r = accel__optim_check_list(o->acc, "grads", grads, o->params, n, any, 1);
    if (r != ACCEL_OK) return r;
    for (i = 0; i < n; ++i) {
        o->grads[i] = grads[i];
        o->grads[i].name = NULL;
    }
    return ACCEL_OK;
}

/* ------------------------------------------------------------------------------------------ 5. the step */
ACCEL__DEF accel_result accel_optim_step(accel_optim *o, const accel_optim_step_args *args) {
    accel *acc;
    accel__optim_in in;
    const double *norm = args ? args->grad_norm : NULL;
    float clip = 1.0f;
    int i, nj = 0;
    if (!o) return ACCEL__FAIL(NULL, ACCEL_ERR_INVALID_ARGUMENT, "accel_optim_step: opt is NULL");
    acc = o->acc;
    if (args && args->clip_coef && norm)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_optim_step: clip_coef and grad_norm are both given "
                           "(one clip coefficient: pass either)");
    if (norm && args->max_norm != args->max_norm)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_optim_step: max_norm is NaN");
    if (args && !norm && args->max_norm != 0.0)
        return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_optim_step: max_norm %g without grad_norm",
                           args->max_norm);
    memset(&in, 0, sizeof in);
    if (args && args->inv_scale != 0.0f) { in.has_inv = 1; in.inv = args->inv_scale; }
    if (args && args->clip_coef) { in.has_coef = 1; clip = *args->clip_coef; }
    if (norm) in.has_coef = 1;
    in.neg = o->hy.maximize;
#ifdef ACCEL_WITH_CUDA
    /* offload on a device: the gradients' producers (and found_inf / grad_norm's) are enqueued on acc->stream */
    if (o->host && acc->device >= 0) ACCEL__CUDA_CHECK(acc, cudaStreamSynchronize((cudaStream_t)acc->stream));
#endif
    if (o->host && args && args->found_inf && *args->found_inf) return ACCEL_OK; /* skipped: nothing changes */
    if (o->host && norm) clip = accel__optim_clip_coef(*norm, args->max_norm);
    for (i = 0; i < o->nparams; ++i) {
        accel__optim_job *jb;
        int s = o->group_of[i];
        if (!o->grads[i].ptr) continue; /* no gradient (torch: p.grad is None): the parameter is skipped */
        jb = &o->jobs[nj++];
        memset(jb, 0, sizeof *jb);
        jb->d.p = (float *)o->params[i].ptr;
        jb->d.g = o->grads[i].ptr;
        jb->d.gt = (int)o->grads[i].dtype;
        jb->d.m = o->nstate >= 1 ? o->state[i * o->nstate].ptr : NULL;
        jb->d.v = o->nstate >= 2 ? o->state[i * o->nstate + 1].ptr : NULL;
        jb->d.vmax = o->nstate >= 3 ? (float *)o->state[i * o->nstate + 2].ptr : NULL;
        jb->d.model = o->model[i].ptr;
        jb->d.mt = o->model[i].ptr ? (int)o->model[i].dtype : 0;
        jb->d.n = o->numel[i];
        jb->d.index = o->index_offset + o->eoff[i];
        jb->d.head = o->host ? -1 : accel__optim_vec_head(&jb->d, &o->hy);
        jb->lr = o->lr[s];
        jb->wd = o->wd[s];
        jb->param = i;
    }
    if (o->host) {
        for (i = 0; i < nj; ++i) {
            accel__optim_job *jb = &o->jobs[i];
            long long t = o->counters[jb->param] + 1;
            o->counters[jb->param] = t;
            accel__optim_host_coefs(&o->hy, jb->lr, jb->wd, (unsigned long long)t, clip, &jb->k);
        }
        o->counters[o->nparams] += 1;
        accel__optim_cpu_run(o->jobs, nj, &o->hy, &in);
        return ACCEL_OK;
    }
#ifdef __CUDACC__
    {
        int first[ACCEL__OPTIM_CLASSES + 1];
        long long nchunks[ACCEL__OPTIM_CLASSES];
        accel__optim_job *sorted = o->jobs + o->nparams + 1;
        accel__optim_classify(o->jobs, nj, &o->hy, sorted, first, nchunks);
        return accel__optim_cuda_step(acc, sorted, nj, first, nchunks, &o->hy, &in, o->counters, o->nparams,
                                      args ? args->found_inf : NULL, norm, norm ? args->max_norm : 0.0, clip,
                                      (accel__optim_largs *)o->largs);
    }
#else
    return ACCEL__FAIL(acc, ACCEL_ERR_UNSUPPORTED, "accel_optim_step on CUDA device %d needs the kernels: compile the "
                       "ACCEL_IMPLEMENTATION TU with nvcc", acc->device);
#endif
}

/* ------------------------------------------------------------------- 6. learning rates, schedules, counts */
ACCEL__DEF int accel_optim_num_groups(const accel_optim *o) { return o ? o->ngroups : 0; }

ACCEL__DEF accel_result accel_optim_set_lr(accel_optim *o, int group, double lr) {
    int g;
    if (!o) return ACCEL__FAIL(NULL, ACCEL_ERR_INVALID_ARGUMENT, "accel_optim_set_lr: opt is NULL");
    if (group < -1 || group >= o->ngroups)
        return ACCEL__FAIL(o->acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_optim_set_lr: group %d of %d", group, o->ngroups);
    if (!accel__optim_finite(lr) || lr < 0.0)
        return ACCEL__FAIL(o->acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_optim_set_lr: lr=%g must be finite and >= 0", lr);
    for (g = 0; g < o->ngroups; ++g)
        if (group < 0 || g == group) o->lr[g] = lr;
    return ACCEL_OK;
}
ACCEL__DEF double accel_optim_lr(const accel_optim *o, int group) {
    return (o && group >= 0 && group < o->ngroups) ? o->lr[group] : -1.0;
}
ACCEL__DEF double accel_optim_base_lr(const accel_optim *o, int group) {
    return (o && group >= 0 && group < o->ngroups) ? o->base_lr[group] : -1.0;
}

ACCEL__DEF double accel_optim_schedule_factor(const accel_optim_schedule *s, int64_t step) {
    double w, T, x, q, c, cyc;
    if (!s || step < 0 || s->warmup_steps < 0 || s->total_steps < 0) return NAN;
    w = (double)s->warmup_steps;
    T = (double)s->total_steps;
    x = (double)step;
    if (s->kind != ACCEL_OPTIM_SCHEDULE_CONSTANT && s->kind != ACCEL_OPTIM_SCHEDULE_LINEAR &&
        s->kind != ACCEL_OPTIM_SCHEDULE_COSINE)
        return NAN;
    if (step < s->warmup_steps) return x / (w > 1.0 ? w : 1.0);
    if (s->kind == ACCEL_OPTIM_SCHEDULE_CONSTANT) return 1.0;
    if (s->kind == ACCEL_OPTIM_SCHEDULE_LINEAR) {
        double f = (double)(s->total_steps - step) / (T - w > 1.0 ? T - w : 1.0);
        return f > 0.0 ? f : 0.0;
    }
    if (!accel__optim_finite(s->min_lr_ratio) || !accel__optim_finite(s->num_cycles)) return NAN;
    cyc = s->num_cycles == 0.0 ? 0.5 : s->num_cycles;
    q = (double)(step - s->warmup_steps) / ((double)(s->total_steps - s->warmup_steps) > 1.0
                                                 ? (double)(s->total_steps - s->warmup_steps) : 1.0);
    c = 0.5 * (1.0 + cos(3.141592653589793 * cyc * 2.0 * q));
    c = c * (1.0 - s->min_lr_ratio) + s->min_lr_ratio;
    return c > 0.0 ? c : 0.0;
}

ACCEL__DEF accel_result accel_optim_apply_schedule(accel_optim *o, const accel_optim_schedule *s, int64_t step) {
    double f = accel_optim_schedule_factor(s, step);
    int g;
    if (!o) return ACCEL__FAIL(NULL, ACCEL_ERR_INVALID_ARGUMENT, "accel_optim_apply_schedule: opt is NULL");
    if (f != f)
        return ACCEL__FAIL(o->acc, ACCEL_ERR_INVALID_ARGUMENT,
                           "accel_optim_apply_schedule: invalid schedule or step %lld "
                           "(kind %d, warmup %lld, total %lld)",
                           (long long)step, s ? (int)s->kind : -1, s ? (long long)s->warmup_steps : -1LL,
                           s ? (long long)s->total_steps : -1LL);
    for (g = 0; g < o->ngroups; ++g) o->lr[g] = o->base_lr[g] * f;
    return ACCEL_OK;
}

ACCEL__DEF float accel_optim_clip_coef(double total_norm, double max_norm) {
    return accel__optim_clip_coef(total_norm, max_norm);
}

/* Copies the step counts (nparams + 1) to host memory; synchronizes acc->stream on CUDA. */
static accel_result accel__optim_read_counts(accel_optim *o, long long *out) {
    accel *acc = o->acc;
    size_t bytes = sizeof(long long) * (size_t)(o->nparams + 1);
    if (o->host) { memcpy(out, o->counters, bytes); return ACCEL_OK; }
#ifdef ACCEL_WITH_CUDA
    ACCEL__CUDA_CHECK(acc, cudaMemcpyAsync(out, o->counters, bytes, cudaMemcpyDeviceToHost, (cudaStream_t)acc->stream));
    ACCEL__CUDA_CHECK(acc, cudaStreamSynchronize((cudaStream_t)acc->stream));
    return ACCEL_OK;
#else
    (void)bytes;
    return ACCEL__FAIL(acc, ACCEL_ERR_UNSUPPORTED,
                       "accel_optim: CUDA device %d needs an implementation built with CUDA", acc->device);
#endif
}
static accel_result accel__optim_write_counts(accel_optim *o, const long long *in) {
    accel *acc = o->acc;
    size_t bytes = sizeof(long long) * (size_t)(o->nparams + 1);
    if (o->host) { memcpy(o->counters, in, bytes); return ACCEL_OK; }
#ifdef ACCEL_WITH_CUDA
    ACCEL__CUDA_CHECK(acc, cudaMemcpyAsync(o->counters, in, bytes, cudaMemcpyHostToDevice, (cudaStream_t)acc->stream));
    ACCEL__CUDA_CHECK(acc, cudaStreamSynchronize((cudaStream_t)acc->stream));
    return ACCEL_OK;
#else
    (void)bytes;
    return ACCEL__FAIL(acc, ACCEL_ERR_UNSUPPORTED,
                       "accel_optim: CUDA device %d needs an implementation built with CUDA", acc->device);
#endif
}

ACCEL__DEF accel_result accel_optim_step_count(accel_optim *o, int64_t *steps) {
    long long *c;
    accel_result r;
    if (!o || !steps)
        return ACCEL__FAIL(o ? o->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, "accel_optim_step_count: NULL argument");
    c = (long long *)accel_host_alloc(o->acc, sizeof(long long) * (size_t)(o->nparams + 1));
    if (!c) return accel__fail_wrap(o->acc, ACCEL_ERR_OUT_OF_MEMORY, "accel_optim_step_count");
    r = accel__optim_read_counts(o, c);
    if (r == ACCEL_OK) *steps = (int64_t)c[o->nparams];
    accel_host_free(o->acc, c);
    return r;
}
ACCEL__DEF accel_result accel_optim_param_steps(accel_optim *o, int64_t *steps, int n) {
    long long *c;
    accel_result r;
    int i;
    if (!o || (n > 0 && !steps))
        return ACCEL__FAIL(o ? o->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, "accel_optim_param_steps: NULL argument");
    if (n != o->nparams)
        return ACCEL__FAIL(o->acc, ACCEL_ERR_INVALID_ARGUMENT,
                           "accel_optim_param_steps: room for %d counts, the optimizer has %d "
                           "parameters",
                           n, o->nparams);
    c = (long long *)accel_host_alloc(o->acc, sizeof(long long) * (size_t)(o->nparams + 1));
    if (!c) return accel__fail_wrap(o->acc, ACCEL_ERR_OUT_OF_MEMORY, "accel_optim_param_steps");
    r = accel__optim_read_counts(o, c);
    if (r == ACCEL_OK)
        for (i = 0; i < n; ++i) steps[i] = (int64_t)c[i];
    accel_host_free(o->acc, c);
    return r;
}

/* ------------------------------------------------------------------------------------------ 7. saved state */
ACCEL__DEF accel_result accel_optim_state_tensors(accel_optim *o, const accel_tensor **tensors, int *n) {
    if (!o || !tensors || !n)
        return ACCEL__FAIL(o ? o->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, "accel_optim_state_tensors: NULL argument");
    *tensors = o->state;
    *n = o->nparams * o->nstate;
    return ACCEL_OK;
}

#define ACCEL__OPTIM_STATE_VERSION 1u
#define ACCEL__OPTIM_F_AMSGRAD 1u
#define ACCEL__OPTIM_F_MAXIMIZE 2u
#define ACCEL__OPTIM_F_NESTEROV 4u
#define ACCEL__OPTIM_F_LERP 8u
#define ACCEL__OPTIM_F_MOMENTUM 16u

static void accel__optim_put_f64(unsigned char *p, double d) {
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    accel__put_u64(p, u);
}
static double accel__optim_get_f64(const unsigned char *p) {
    uint64_t u = accel__get_u64(p);
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}
static uint32_t accel__optim_flags(const accel_optim *o) {
    return (o->hy.amsgrad ? ACCEL__OPTIM_F_AMSGRAD : 0u) | (o->hy.maximize ? ACCEL__OPTIM_F_MAXIMIZE : 0u) |
           (o->hy.nesterov ? ACCEL__OPTIM_F_NESTEROV : 0u) | (o->lerp ? ACCEL__OPTIM_F_LERP : 0u) |
           (o->hy.kind == ACCEL__OPTIM_K_SGD_MOM ? ACCEL__OPTIM_F_MOMENTUM : 0u);
}

ACCEL__DEF accel_result accel_optim_state_save(void *obj, void *buf, size_t cap, size_t *size) {
    accel_optim *o = (accel_optim *)obj;
    size_t need, at;
    unsigned char *b = (unsigned char *)buf;
    long long *c;
    accel_result r;
    int i, g;
    if (!o || !size)
        return ACCEL__FAIL(o ? o->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT, "accel_optim_state_save: NULL argument");
    need = ACCEL_OPTIM_STATE_BYTES(o->ngroups, o->nparams);
    *size = need;
    if (!buf || cap < need) return ACCEL_OK;
    c = (long long *)accel_host_alloc(o->acc, sizeof(long long) * (size_t)(o->nparams + 1));
    if (!c) return accel__fail_wrap(o->acc, ACCEL_ERR_OUT_OF_MEMORY, "accel_optim_state_save");
    r = accel__optim_read_counts(o, c);
    if (r != ACCEL_OK) {
        accel_host_free(o->acc, c);
        return accel__fail_wrap(o->acc, r, "accel_optim_state_save: reading the step counts");
    }
    memcpy(b, "AOPT", 4);
    accel__put_u32(b + 4, ACCEL__OPTIM_STATE_VERSION);
    accel__put_u32(b + 8, (uint32_t)o->algorithm);
    accel__put_u32(b + 12, accel__optim_flags(o));
    accel__put_u32(b + 16, (uint32_t)o->ngroups);
    accel__put_u32(b + 20, (uint32_t)o->nparams);
    accel__optim_put_f64(b + 24, o->hy.beta1);
    accel__optim_put_f64(b + 32, o->hy.beta2);
    accel__optim_put_f64(b + 40, o->hy.eps);
    accel__optim_put_f64(b + 48, o->hy.momentum);
    accel__optim_put_f64(b + 56, o->hy.dampening);
    accel__put_u64(b + 64, (uint64_t)c[o->nparams]);
    at = 72;
    for (g = 0; g < o->ngroups; ++g, at += 32) {
        accel__put_u32(b + at, (uint32_t)o->group_count[g]);
        accel__put_u32(b + at + 4, 0u);
        accel__optim_put_f64(b + at + 8, o->lr[g]);
        accel__optim_put_f64(b + at + 16, o->base_lr[g]);
        accel__optim_put_f64(b + at + 24, o->wd[g]);
    }
    for (i = 0; i < o->nparams; ++i, at += 16) {
        accel__put_u64(b + at, (uint64_t)o->numel[i]);
        accel__put_u64(b + at + 8, (uint64_t)c[i]);
    }
    accel__put_u64(b + at, accel__fnv1a(ACCEL__FNV_INIT, b, at));
    accel_host_free(o->acc, c);
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_optim_state_decode(accel *acc, const void *buf, size_t size,
                                                 accel_optim_state_info *out) {
    const unsigned char *b = (const unsigned char *)buf;
    uint32_t ver, algo, flags;
    int32_t ng, np;
    double beta1, beta2, eps, mom, damp;
    size_t at;
    int i, g;
    if (!out) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_optim_state_decode: out is NULL");
    if (!b && size) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_optim_state_decode: NULL buffer");
    if (size < 80 || memcmp(b, "AOPT", 4) != 0)
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "optimizer state: %zu bytes without the \"AOPT\" header", size);
    ver = accel__get_u32(b + 4);
    if (ver != ACCEL__OPTIM_STATE_VERSION)
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "optimizer state: version %u is not supported (%u)", (unsigned)ver,
                           ACCEL__OPTIM_STATE_VERSION);
    ng = (int32_t)accel__get_u32(b + 16);
    np = (int32_t)accel__get_u32(b + 20);
    if (ng < 1 || np < 0 || ng > (1 << 24) || np > (1 << 26) || size != ACCEL_OPTIM_STATE_BYTES(ng, np))
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "optimizer state: %zu bytes do not hold %d groups and %d parameters",
                           size, (int)ng, (int)np);
    if (accel__get_u64(b + size - 8) != accel__fnv1a(ACCEL__FNV_INIT, b, size - 8))
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "optimizer state: checksum mismatch (corrupt bytes)");
    algo = accel__get_u32(b + 8);
    flags = accel__get_u32(b + 12);
    if (algo != (uint32_t)ACCEL_OPTIM_ADAMW && algo != (uint32_t)ACCEL_OPTIM_SGD)
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "optimizer state: saved by an unknown algorithm (%u)",
                           (unsigned)algo);
    if ((flags & ~31u) ||
        (algo == (uint32_t)ACCEL_OPTIM_SGD && (flags & (ACCEL__OPTIM_F_AMSGRAD | ACCEL__OPTIM_F_LERP))) ||
        (algo == (uint32_t)ACCEL_OPTIM_ADAMW && (flags & (ACCEL__OPTIM_F_NESTEROV | ACCEL__OPTIM_F_MOMENTUM))))
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "optimizer state: flags 0x%x are not valid for %s", (unsigned)flags,
                           algo == (uint32_t)ACCEL_OPTIM_ADAMW ? "AdamW" : "SGD");
    beta1 = accel__optim_get_f64(b + 24);
    beta2 = accel__optim_get_f64(b + 32);
    eps = accel__optim_get_f64(b + 40);
    mom = accel__optim_get_f64(b + 48);
    damp = accel__optim_get_f64(b + 56);
    if (!(beta1 >= 0.0 && beta1 < 1.0) || !(beta2 >= 0.0 && beta2 < 1.0) || !accel__optim_finite(eps) || eps < 0.0 ||
        !accel__optim_finite(mom) || mom < 0.0 || !accel__optim_finite(damp) ||
        ((mom != 0.0) != ((flags & ACCEL__OPTIM_F_MOMENTUM) != 0)) ||
        ((flags & ACCEL__OPTIM_F_NESTEROV) && (mom <= 0.0 || damp != 0.0)))
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT,
                           "optimizer state: hyperparameters out of range (betas %g %g, eps %g, momentum %g, "
                           "dampening %g)",
                           beta1, beta2, eps, mom, damp);
    if ((int64_t)accel__get_u64(b + 64) < 0)
        return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "optimizer state: negative step count");
    for (g = 0, at = 72; g < ng; ++g, at += 32) {
        double lr = accel__optim_get_f64(b + at + 8), base = accel__optim_get_f64(b + at + 16),
               wd = accel__optim_get_f64(b + at + 24);
        if (accel__get_u32(b + at + 4) != 0u || (int32_t)accel__get_u32(b + at) < 0)
            return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "optimizer state: group %d: corrupt (%d parameters, reserved "
                               "word %u)", g, (int)(int32_t)accel__get_u32(b + at),
                               (unsigned)accel__get_u32(b + at + 4));
        if (!accel__optim_finite(lr) || lr < 0.0 || !accel__optim_finite(base) || base < 0.0 ||
            !accel__optim_finite(wd) || wd < 0.0)
            return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT,
                               "optimizer state: group %d has lr %g, base lr %g, weight_decay %g", g, lr, base, wd);
    }
    for (i = 0; i < np; ++i, at += 16)
        if ((int64_t)accel__get_u64(b + at) < 0 || (int64_t)accel__get_u64(b + at + 8) < 0)
            return ACCEL__FAIL(acc, ACCEL_ERR_FORMAT, "optimizer state: parameter %d has a negative %s", i,
                               (int64_t)accel__get_u64(b + at) < 0 ? "element count" : "step count");
    out->algorithm = (accel_optim_algorithm)algo;
    out->amsgrad = (flags & ACCEL__OPTIM_F_AMSGRAD) != 0;
    out->maximize = (flags & ACCEL__OPTIM_F_MAXIMIZE) != 0;
    out->nesterov = (flags & ACCEL__OPTIM_F_NESTEROV) != 0;
    out->lerp = (flags & ACCEL__OPTIM_F_LERP) != 0;
    out->momentum_buffer = (flags & ACCEL__OPTIM_F_MOMENTUM) != 0;
    out->ngroups = ng;
    out->nparams = np;
    out->beta1 = beta1;
    out->beta2 = beta2;
    out->eps = eps;
    out->momentum = mom;
    out->dampening = damp;
    out->steps = (int64_t)accel__get_u64(b + 64);
    return ACCEL_OK;
}
ACCEL__DEF void accel_optim_state_decode_group(const void *buf, int g, int *nparams, double *lr, double *base_lr,
                                               double *weight_decay) {
    const unsigned char *b = (const unsigned char *)buf + 72 + 32u * (size_t)g;
    if (nparams) *nparams = (int)(int32_t)accel__get_u32(b);
    if (lr) *lr = accel__optim_get_f64(b + 8);
    if (base_lr) *base_lr = accel__optim_get_f64(b + 16);
    if (weight_decay) *weight_decay = accel__optim_get_f64(b + 24);
}
ACCEL__DEF void accel_optim_state_decode_param(const void *buf, int ngroups, int i, int64_t *numel, int64_t *steps) {
    const unsigned char *b = (const unsigned char *)buf + 72 + 32u * (size_t)ngroups + 16u * (size_t)i;
    if (numel) *numel = (int64_t)accel__get_u64(b);
    if (steps) *steps = (int64_t)accel__get_u64(b + 8);
}

ACCEL__DEF accel_result accel_optim_state_load(void *obj, const void *buf, size_t size) {
    accel_optim *o = (accel_optim *)obj;
    const unsigned char *b = (const unsigned char *)buf;
    accel *acc;
    accel_optim_state_info d;
    uint32_t flags, want_flags;
    int32_t ng, np;
    long long *c;
    accel_result r;
    size_t at;
    int i, g;
    if (!o) return ACCEL__FAIL(NULL, ACCEL_ERR_INVALID_ARGUMENT, "accel_optim_state_load: opt is NULL");
    acc = o->acc;
    if (!b && size) return ACCEL__FAIL(acc, ACCEL_ERR_INVALID_ARGUMENT, "accel_optim_state_load: NULL buffer");
    if ((r = accel_optim_state_decode(acc, buf, size, &d)) != ACCEL_OK) return r;
    ng = d.ngroups;
    np = d.nparams;
    flags = accel__get_u32(b + 12);
    want_flags = accel__optim_flags(o);
    if (d.algorithm != o->algorithm)
        return ACCEL__FAIL(acc, ACCEL_ERR_MISMATCH, "optimizer state: saved by %s, this optimizer is %s",
                           d.algorithm == ACCEL_OPTIM_ADAMW ? "AdamW" : "SGD",
                           o->algorithm == ACCEL_OPTIM_ADAMW ? "AdamW" : "SGD");
    if ((flags ^ want_flags) & (ACCEL__OPTIM_F_AMSGRAD | ACCEL__OPTIM_F_MOMENTUM))
        return ACCEL__FAIL(acc, ACCEL_ERR_MISMATCH,
                           "optimizer state: saved %s, this optimizer %s (the state tensors differ)",
                           (flags & ACCEL__OPTIM_F_AMSGRAD)    ? "with amsgrad"
                           : (flags & ACCEL__OPTIM_F_MOMENTUM) ? "with momentum"
                           : o->algorithm == ACCEL_OPTIM_ADAMW ? "without amsgrad"
                                                               : "without momentum",
                           (want_flags & ACCEL__OPTIM_F_AMSGRAD)    ? "has amsgrad"
                           : (want_flags & ACCEL__OPTIM_F_MOMENTUM) ? "has momentum"
                           : o->algorithm == ACCEL_OPTIM_ADAMW      ? "has no amsgrad"
                                                                    : "has no momentum");
    if (ng != o->ngroups || np != o->nparams)
        return ACCEL__FAIL(acc, ACCEL_ERR_MISMATCH,
                           "optimizer state: saved with %d groups and %d parameters, this optimizer has %d "
                           "and %d",
                           (int)ng, (int)np, o->ngroups, o->nparams);
    for (g = 0, at = 72; g < ng; ++g, at += 32)
        if ((int)accel__get_u32(b + at) != o->group_count[g])
            return ACCEL__FAIL(acc, ACCEL_ERR_MISMATCH, "optimizer state: group %d has %d parameters there, %d here", g,
                               (int)accel__get_u32(b + at), o->group_count[g]);
    for (i = 0; i < np; ++i, at += 16)
        if ((long long)accel__get_u64(b + at) != o->numel[i])
            return ACCEL__FAIL(acc, ACCEL_ERR_MISMATCH,
                               "optimizer state: parameter %d (\"%.100s\") has %lld elements there, %lld here", i,
                               o->params[i].name, (long long)accel__get_u64(b + at), o->numel[i]);
    /* everything is valid: apply (the step counts first — the only part that can fail) */
    c = (long long *)accel_host_alloc(acc, sizeof(long long) * (size_t)(np + 1));
    if (!c) return accel__fail_wrap(acc, ACCEL_ERR_OUT_OF_MEMORY, "accel_optim_state_load");
    for (i = 0, at = 72 + 32u * (size_t)ng; i < np; ++i, at += 16) c[i] = (long long)accel__get_u64(b + at + 8);
    c[np] = (long long)accel__get_u64(b + 64);
    r = accel__optim_write_counts(o, c);
    accel_host_free(acc, c);
    if (r != ACCEL_OK) return accel__fail_wrap(acc, r, "accel_optim_state_load: writing the step counts");
    o->hy.beta1 = d.beta1;
    o->hy.beta2 = d.beta2;
    o->hy.eps = d.eps;
    o->hy.momentum = d.momentum;
    o->hy.dampening = d.dampening;
    o->hy.maximize = (flags & ACCEL__OPTIM_F_MAXIMIZE) ? 1 : 0;
    o->hy.nesterov = (flags & ACCEL__OPTIM_F_NESTEROV) ? 1 : 0;
    if (o->algorithm == ACCEL_OPTIM_ADAMW) {
        o->lerp = (flags & ACCEL__OPTIM_F_LERP) ? 1 : 0;
        o->hy.kind = o->lerp ? ACCEL__OPTIM_K_ADAMW_LERP : ACCEL__OPTIM_K_ADAMW;
    }
    for (g = 0, at = 72; g < ng; ++g, at += 32) {
        o->lr[g] = accel__optim_get_f64(b + at + 8);
        o->base_lr[g] = accel__optim_get_f64(b + at + 16);
        o->wd[g] = accel__optim_get_f64(b + at + 24);
    }
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_optim_shard_state_save(void *state, void *buf, size_t cap, size_t *size) {
    accel_optim_shard_state *ss = (accel_optim_shard_state *)state;
    unsigned char *b = (unsigned char *)buf;
    accel_result r;
    size_t at;
    int i;
    if (!ss || !ss->opt || !ss->full || !size)
        return ACCEL__FAIL(ss && ss->opt ? ss->opt->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT,
                           "accel_optim_shard_state_save: NULL argument");
    r = accel_optim_state_save(ss->opt, buf, cap, size);
    if (r != ACCEL_OK || !buf || cap < *size) return r;
    for (i = 0, at = 72 + 32u * (size_t)ss->opt->ngroups; i < ss->opt->nparams; ++i, at += 16)
        accel__put_u64(b + at, (uint64_t)accel_tensor_numel(&ss->full[i]));
    accel__put_u64(b + at, accel__fnv1a(ACCEL__FNV_INIT, b, at));
    return ACCEL_OK;
}

ACCEL__DEF accel_result accel_optim_shard_state_load(void *state, const void *buf, size_t size) {
    accel_optim_shard_state *ss = (accel_optim_shard_state *)state;
    accel_optim *o;
    unsigned char *t;
    accel_result r;
    size_t at;
    int i;
    if (!ss || !ss->opt || !ss->full)
        return ACCEL__FAIL(ss && ss->opt ? ss->opt->acc : NULL, ACCEL_ERR_INVALID_ARGUMENT,
                           "accel_optim_shard_state_load: NULL argument");
    o = ss->opt;
    /* anything that is not this optimizer's layout: the plain load names the problem */
    if (!buf || size != ACCEL_OPTIM_STATE_BYTES(o->ngroups, o->nparams) || memcmp(buf, "AOPT", 4) != 0 ||
        accel__get_u64((const unsigned char *)buf + size - 8) != accel__fnv1a(ACCEL__FNV_INIT, buf, size - 8))
        return accel_optim_state_load(o, buf, size);
    for (i = 0, at = 72 + 32u * (size_t)o->ngroups; i < o->nparams; ++i, at += 16)
        if ((int64_t)accel__get_u64((const unsigned char *)buf + at) != accel_tensor_numel(&ss->full[i]))
            return ACCEL__FAIL(o->acc, ACCEL_ERR_MISMATCH,
                               "optimizer shard state: parameter %d (\"%.100s\") has %lld elements there, "
                               "%lld here",
                               i, accel__optim_tname(&ss->full[i]),
                               (long long)accel__get_u64((const unsigned char *)buf + at),
                               (long long)accel_tensor_numel(&ss->full[i]));
    t = (unsigned char *)accel_host_alloc(o->acc, size);
    if (!t) return accel__fail_wrap(o->acc, ACCEL_ERR_OUT_OF_MEMORY, "accel_optim_shard_state_load");
    memcpy(t, buf, size);
    for (i = 0, at = 72 + 32u * (size_t)o->ngroups; i < o->nparams; ++i, at += 16)
        accel__put_u64(t + at, (uint64_t)o->numel[i]);
    accel__put_u64(t + at, accel__fnv1a(ACCEL__FNV_INIT, t, at));
    r = accel_optim_state_load(o, t, size);
    accel_host_free(o->acc, t);
    return r;
}

#endif /* ACCEL_IMPLEMENTATION */

/* accel is released under the MIT licence. Copyright (c) 2026 the accel authors. */
