"""PyTorch CPU as the oracle of test_optim_torch.c: usage torch_oracle.py DIR... (exit 77 when torch is missing).

Each DIR/case.json describes one run; DIR/in.bin holds little-endian float32: the initial parameters (all tensors
concatenated in order), then the gradients of every step (all tensors, step after step). This script runs
torch.optim.AdamW / SGD (foreach=False) for the given steps, with torch.optim.lr_scheduler.LambdaLR and
transformers' schedule lambdas (copied below from transformers/optimization.py), and writes DIR/out.bin:
the final parameters, then every parameter's state tensors (exp_avg, exp_avg_sq[, max_exp_avg_sq] | momentum_buffer),
all float32, then float64: every parameter's step count, and the lr of every group at every step.

rule "lerp" runs torch 2.x's _single_tensor_adamw sequence (exp_avg.lerp_ instead of mul_ + add_), op for op, with
torch 1.13's kernels: the installed torch is 1.13, whose AdamW uses mul_ + add_."""
import json
import math
import os
import struct
import sys
import warnings
from functools import partial

try:
    import numpy as np
    import torch
except ImportError:
    sys.exit(77)


# transformers/optimization.py (get_constant_schedule_with_warmup, get_linear_schedule_with_warmup,
# get_cosine_with_min_lr_schedule_with_warmup; min_lr_rate 0 is get_cosine_schedule_with_warmup)
def _get_constant_schedule_with_warmup_lr_lambda(current_step: int, *, num_warmup_steps: int):
    if current_step < num_warmup_steps:
        return float(current_step) / float(max(1.0, num_warmup_steps))
    return 1.0


def _get_linear_schedule_with_warmup_lr_lambda(current_step: int, *, num_warmup_steps: int, num_training_steps: int):
    if current_step < num_warmup_steps:
        return float(current_step) / float(max(1, num_warmup_steps))
    return max(0.0, float(num_training_steps - current_step) / float(max(1, num_training_steps - num_warmup_steps)))


def _get_cosine_schedule_with_warmup_lr_lambda(current_step: int, *, num_warmup_steps: int, num_training_steps: int,
                                               num_cycles: float, min_lr_rate: float = 0.0):
    if current_step < num_warmup_steps:
        return float(current_step) / float(max(1, num_warmup_steps))
    progress = float(current_step - num_warmup_steps) / float(max(1, num_training_steps - num_warmup_steps))
    factor = 0.5 * (1.0 + math.cos(math.pi * float(num_cycles) * 2.0 * progress))
    factor = factor * (1 - min_lr_rate) + min_lr_rate
    return max(0, factor)


def make_lambda(s):
    if s is None:
        return lambda step: 1.0
    if s["kind"] == "constant":
        return partial(_get_constant_schedule_with_warmup_lr_lambda, num_warmup_steps=s["warmup"])
    if s["kind"] == "linear":
        return partial(_get_linear_schedule_with_warmup_lr_lambda, num_warmup_steps=s["warmup"],
                       num_training_steps=s["total"])
    return partial(_get_cosine_schedule_with_warmup_lr_lambda, num_warmup_steps=s["warmup"],
                   num_training_steps=s["total"], num_cycles=s.get("num_cycles", 0.5),
                   min_lr_rate=s.get("min_lr_ratio", 0.0))


def adamw_torch2_step(opt):
    """torch 2.x torch/optim/adamw.py _single_tensor_adamw (capturable=False), op for op."""
    for group in opt.param_groups:
        beta1, beta2 = group["betas"]
        lr, weight_decay, eps = group["lr"], group["weight_decay"], group["eps"]
        for param in group["params"]:
            if param.grad is None:
                continue
            grad = param.grad if not group["maximize"] else -param.grad
            state = opt.state[param]
            if len(state) == 0:
                state["step"] = torch.tensor(0.0)
                state["exp_avg"] = torch.zeros_like(param)
                state["exp_avg_sq"] = torch.zeros_like(param)
                if group["amsgrad"]:
                    state["max_exp_avg_sq"] = torch.zeros_like(param)
            exp_avg, exp_avg_sq, step_t = state["exp_avg"], state["exp_avg_sq"], state["step"]
            with torch.no_grad():
                step_t += 1
                param.mul_(1 - lr * weight_decay)
                exp_avg.lerp_(grad, 1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                step = step_t.item()
                bias_correction1 = 1 - beta1 ** step
                bias_correction2 = 1 - beta2 ** step
                step_size = lr / bias_correction1
                bias_correction2_sqrt = math.sqrt(bias_correction2)
                if group["amsgrad"]:
                    torch.maximum(state["max_exp_avg_sq"], exp_avg_sq, out=state["max_exp_avg_sq"])
                    denom = (state["max_exp_avg_sq"].sqrt() / bias_correction2_sqrt).add_(eps)
                else:
                    denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
                param.addcdiv_(exp_avg, denom, value=-step_size)


def torch_schedules(d, c):
    """torch's own closed schedulers (no warmup): CosineAnnealingLR(T_max=T, eta_min=r*base) and
    LinearLR(start_factor=1, end_factor=0, total_iters=T), stepped from 0 to T + 5; float64 lrs to DIR/out.bin."""
    with open(os.path.join(d, "out.bin"), "wb") as f:
        for kind in ("cosine", "linear"):
            for T, r in c["grid"]:
                if kind == "linear" and r != 0.0:
                    continue
                p = torch.nn.Parameter(torch.zeros(1))
                opt = torch.optim.SGD([p], lr=c["base"])
                if kind == "cosine":
                    sch = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=T, eta_min=r * c["base"])
                else:
                    sch = torch.optim.lr_scheduler.LinearLR(opt, start_factor=1.0, end_factor=0.0, total_iters=T)
                for _ in range(T + 6):
                    f.write(struct.pack("<d", opt.param_groups[0]["lr"]))
                    opt.step()
                    sch.step()


def run(d):
    with open(os.path.join(d, "case.json")) as f:
        c = json.load(f)
    if c.get("kind") == "schedules":
        return torch_schedules(d, c)
    shapes = [tuple(s) for s in c["shapes"]]
    sizes = [int(np.prod(s)) if len(s) else 1 for s in shapes]
    total = sum(sizes)
    data = np.fromfile(os.path.join(d, "in.bin"), dtype="<f4")
    steps = c["steps"]
    assert data.size == total * (1 + steps), (data.size, total, steps)

    def split(flat):
        out, at = [], 0
        for n, s in zip(sizes, shapes):
            out.append(torch.from_numpy(flat[at:at + n].astype(np.float32).copy()).reshape(s))
            at += n
        return out

    params = [torch.nn.Parameter(t) for t in split(data[:total])]
    groups, at = [], 0
    for g in c["groups"]:
        groups.append({"params": params[at:at + g["count"]], "lr": g["lr"], "weight_decay": g["weight_decay"]})
        at += g["count"]
    if c["algorithm"] == "adamw":
        opt = torch.optim.AdamW(groups, betas=tuple(c["betas"]), eps=c["eps"], amsgrad=c["amsgrad"],
                                maximize=c["maximize"], foreach=False)
    else:
        opt = torch.optim.SGD(groups, lr=c["groups"][0]["lr"], momentum=c["momentum"], dampening=c["dampening"],
                              nesterov=c["nesterov"], maximize=c["maximize"], foreach=False)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, make_lambda(c.get("schedule")))
    nograd = {(s, p) for s, p in c.get("nograd", [])}
    lrs = []
    for k in range(steps):
        grads = split(data[total * (1 + k): total * (2 + k)])
        for i, (p, g) in enumerate(zip(params, grads)):
            p.grad = None if (k, i) in nograd else g
        lrs.append([g["lr"] for g in opt.param_groups])
        if c.get("rule") == "lerp":
            adamw_torch2_step(opt)
        else:
            opt.step()
        sched.step()
    keys = (["exp_avg", "exp_avg_sq"] + (["max_exp_avg_sq"] if c["amsgrad"] else [])) if c["algorithm"] == "adamw" \
        else (["momentum_buffer"] if c["momentum"] != 0 else [])
    with open(os.path.join(d, "out.bin"), "wb") as f:
        for p in params:
            f.write(p.detach().numpy().astype("<f4").tobytes())
        for p in params:
            st = opt.state.get(p, {})
            for key in keys:
                t = st.get(key)
                t = torch.zeros_like(p) if t is None else t  # never stepped: accel's state is zero
                f.write(t.detach().numpy().astype("<f4").tobytes())
        for p in params:
            st = opt.state.get(p, {})
            if c["algorithm"] == "adamw":
                n = float(st["step"]) if "step" in st else 0.0
            else:  # SGD keeps no count: the test counts the steps with a gradient itself
                n = -1.0
            f.write(struct.pack("<d", n))
        for row in lrs:
            f.write(struct.pack("<%dd" % len(row), *row))


if __name__ == "__main__":
    warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler\.step\(\)`")  # the lerp runs step by hand
    torch.set_num_threads(1)
    for d in sys.argv[1:]:
        run(d)
