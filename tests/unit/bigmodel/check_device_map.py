#!/usr/bin/env python3
"""`accel device-map` against Accelerate itself, on random module trees (docs/semantics.md §9).

usage: check_device_map.py ACCEL_CLI [N_CASES] [SEED]

Needs an interpreter with accelerate (>= 1.0, whose infer_auto_device_map this compares with: clean_result and
fallback_allocation exist there) and torch: this one, or the one named by ACCEL_REFERENCE_PYTHON, e.g. a venv made
with `python3 -m venv --system-site-packages V && V/bin/pip install --no-deps accelerate packaging psutil pyyaml`
beside Debian's python3-torch. Without one the test is skipped (exit 77). torch 1.13's named_parameters has no
remove_duplicate argument (accelerate's find_tied_parameters passes it): the same traversal is added for it here.

Each case builds a random torch module tree (meta tensors of random dtypes and shapes, random class names, parameters
tied across modules), writes it in the JSON form, and compares, for random max_memory / no_split_module_classes /
dtype / low_zero / fallback_allocation / clean_result:
  - compute_module_sizes: every key, value and the order;
  - get_balanced_memory: every value (or both raise);
  - infer_auto_device_map: the same map in the same order without clean_result; with it the same entries, those that
    clean_device_map did not produce in the same relative order (Accelerate walks a Python set there: its order of
    collapsed entries changes from run to run, accel's is first appearance), or both raise.
A case where Accelerate raises AttributeError from fallback_allocate's size parser (a fractional limit: one of the
deliberate differences in accel_bigmodel.h) is counted, not compared.
"""
import json
import logging
import os
import random
import subprocess
import sys
import tempfile
import warnings

try:
    import torch
    import torch.nn as nn
    import accelerate  # noqa: F401
    from accelerate.utils import modeling
except ImportError:
    ref = os.environ.get("ACCEL_REFERENCE_PYTHON")
    if ref and os.path.realpath(ref) != os.path.realpath(sys.executable) and not os.environ.get("ACCEL_REF_REEXEC"):
        os.environ["ACCEL_REF_REEXEC"] = "1"
        os.execv(ref, [ref] + sys.argv)
    print("skipped: no interpreter with accelerate and torch (set ACCEL_REFERENCE_PYTHON)")
    sys.exit(77)
import inspect

if "remove_duplicate" not in inspect.signature(nn.Module.named_parameters).parameters:
    def _named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        memo = set()
        modules = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) if recurse else [(prefix, self)]
        for module_prefix, module in modules:
            for k, v in module._parameters.items():
                if v is None or v in memo:
                    continue
                if remove_duplicate:
                    memo.add(v)
                yield module_prefix + ("." if module_prefix else "") + k, v
    nn.Module.named_parameters = _named_parameters

logging.disable(logging.CRITICAL)
warnings.simplefilter("ignore")

CLI = sys.argv[1]
N = int(sys.argv[2]) if len(sys.argv) > 2 else 300
SEED = int(sys.argv[3]) if len(sys.argv) > 3 else 1234
rng = random.Random(SEED)
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32, torch.int8, torch.bool,
          torch.uint8]
CLASSES = ["Block", "Linear", "Norm", "Seq", "Embed", "Attn"]
CLASS_TYPES = {c: type(c, (nn.Module,), {}) for c in CLASSES}
failures = 0
checks = 0
stats = {"cases": 0, "raised_both": 0, "fallback_float_skipped": 0, "with_ties": 0, "balanced": 0, "fallback": 0,
         "disk_used": 0, "gpu0_empty": 0}


def check(cond, what):
    global failures, checks
    checks += 1
    if not cond:
        failures += 1
        print("FAIL:", what, file=sys.stderr)
    return cond


def random_tensor():
    dt = rng.choice(DTYPES)
    shape = [rng.choice([0, 1, 2, 3, 5, 8, 16]) for _ in range(rng.choice([0, 1, 1, 2, 2, 3]))]
    return torch.empty(shape, dtype=dt, device="meta")


def build(depth=0):
    m = CLASS_TYPES[rng.choice(CLASSES)]()
    for i in range(rng.choice([0, 1, 1, 2])):
        t = random_tensor()
        m.register_parameter("p%d" % i, nn.Parameter(t, requires_grad=t.is_floating_point()))
    if rng.random() < 0.25:
        m.register_buffer("buf", random_tensor())
    if depth < 3:
        for i in range(rng.choice([0, 1, 2, 3] if depth else [1, 2, 3, 4])):
            m.add_module("c%d" % i, build(depth + 1))
    return m


def tie_some(model):
    params = [(n, p) for n, p in model.named_parameters()]
    mods = [(n, m) for n, m in model.named_modules()]
    tied = 0
    for k in range(rng.choice([0, 0, 1, 2])):
        if not params:
            break
        pn, p = rng.choice(params)
        mn, m = rng.choice(mods)
        m.register_parameter("tied%d" % k, p)
        tied += 1
    return tied


def to_json(model):
    mods = []
    for name, m in model.named_modules():
        mods.append([name, type(m).__name__, [n for n, _ in m.named_children()], list(m._parameters.keys()),
                     list(m._buffers.keys())])
    tensors = []
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        tensors.append([name, list(t.shape), str(t.dtype)])
    named = {n for n, _ in model.named_parameters()}
    tied = []
    for g in modeling.find_tied_parameters(model):  # the order infer_auto_device_map will use in this process
        first = [n for n in g if n in named]
        tied.append(first + [n for n in g if n not in first])
    return {"modules": mods, "tensors": tensors, "tied": tied}


def run_cli(path, mm, no_split, dtype, balanced, low_zero, fallback, clean):
    args = [CLI, "device-map", "--structure", path, "--max-memory",
            ",".join("%s=%d" % (k, v) for k, v in mm.items())]
    if no_split:
        args += ["--no-split", ",".join(no_split)]
    if dtype is not None:
        args += ["--dtype", str(dtype)]
    if balanced:
        args += ["--balanced"] + (["--low-zero"] if low_zero else [])
    if fallback:
        args += ["--fallback-allocation"]
    if not clean:
        args += ["--no-clean"]
    return subprocess.run(args, capture_output=True, text=True)


def devkey(d):
    return d if isinstance(d, str) else int(d)


with tempfile.TemporaryDirectory() as tmp:
    for case in range(N):
        model = build()
        ntied = tie_some(model)
        stats["with_ties"] += ntied > 0
        desc = to_json(model)
        path = os.path.join(tmp, "m.json")
        with open(path, "w") as f:
            json.dump(desc, f)
        total = modeling.compute_module_sizes(model)[""]
        scale = max(int(total), 8)
        mm = {}
        for g in sorted(rng.sample([0, 1, 2], rng.choice([0, 1, 2, 2, 3]))):
            mm[g] = rng.randint(0, scale)
        if rng.random() < 0.7:
            mm["cpu"] = rng.randint(0, scale)
        if rng.random() < 0.05:
            mm["mps"] = rng.randint(0, scale)
        balanced = rng.random() < 0.3 and "mps" not in mm
        if not balanced and rng.random() < 0.2:
            mm["disk"] = rng.randint(0, scale)
        no_split = rng.sample(CLASSES, rng.choice([0, 0, 1, 2]))
        dtype = rng.choice([None, None, torch.float16, torch.bfloat16, torch.float32])
        low_zero = balanced and rng.random() < 0.5
        fallback = rng.random() < 0.3
        clean = rng.random() < 0.6
        stats["cases"] += 1
        ctx = "case %d (seed %d): mm=%r no_split=%r dtype=%r balanced=%r low_zero=%r fallback=%r clean=%r" % (
            case, SEED, mm, no_split, dtype, balanced, low_zero, fallback, clean)
        # Accelerate
        ref_sizes = modeling.compute_module_sizes(model, dtype=dtype)
        ref_bal, ref_map, ref_raw, ref_err = None, None, None, None
        try:
            use = dict(mm)
            if balanced:
                stats["balanced"] += 1
                ref_bal = modeling.get_balanced_memory(model, max_memory=dict(mm), no_split_module_classes=no_split,
                                                       dtype=dtype, low_zero=low_zero)
                use = ref_bal
            ref_map = modeling.infer_auto_device_map(model, max_memory=dict(use), no_split_module_classes=no_split,
                                                     dtype=dtype, clean_result=clean, fallback_allocation=fallback)
            ref_raw = modeling.infer_auto_device_map(model, max_memory=dict(use), no_split_module_classes=no_split,
                                                     dtype=dtype, clean_result=False, fallback_allocation=fallback)
        except AttributeError as e:
            if fallback and "upper" in str(e):
                stats["fallback_float_skipped"] += 1
                continue
            ref_err = e
        except (ValueError, IndexError, KeyError, RuntimeError) as e:
            ref_err = e
        out = run_cli(path, mm, no_split, dtype, balanced, low_zero, fallback, clean)
        if ref_err is not None:
            stats["raised_both"] += out.returncode == 2
            stats[type(ref_err).__name__] = stats.get(type(ref_err).__name__, 0) + 1
            check(out.returncode == 2, "%s: Accelerate raised %r, accel exited %d: %s" % (ctx, ref_err, out.returncode,
                                                                                          out.stdout[:300]))
            continue
        if not check(out.returncode == 0, "%s: accel exited %d: %s" % (ctx, out.returncode, out.stderr)):
            continue
        got = json.loads(out.stdout)
        check(list(got["module_sizes"].items()) == [(k, v) for k, v in ref_sizes.items()],
              "%s: module sizes\n  accel:      %r\n  accelerate: %r" % (ctx, got["module_sizes"], dict(ref_sizes)))
        if balanced:
            check(list(got["balanced_memory"].items()) == [(str(k), v) for k, v in ref_bal.items()],
                  "%s: balanced memory accel %r accelerate %r" % (ctx, got["balanced_memory"], ref_bal))
        gm = [(k, devkey(d)) for k, d in got["device_map"]]
        rm = [(k, devkey(d)) for k, d in ref_map.items()]
        if not clean:
            check(gm == rm, "%s: device map\n  accel:      %r\n  accelerate: %r" % (ctx, gm, rm))
        else:
            same = check(dict(gm) == dict(rm) and len(gm) == len(rm),
                         "%s: cleaned device map\n  accel:      %r\n  accelerate: %r" % (ctx, gm, rm))
            if same:
                raw = set(ref_raw.keys())
                check([k for k, _ in gm if k in raw] == [k for k, _ in rm if k in raw],
                      "%s: relative order of the entries clean_device_map kept\n  accel %r\n  accelerate %r" % (ctx, gm, rm))
        stats["disk_used"] += "disk" in [d for _, d in rm]
        stats["gpu0_empty"] += 0 in mm and 0 not in [d for _, d in rm] and any(isinstance(d, int) for _, d in rm)
        stats["fallback"] += fallback

print("device-map vs accelerate %s: %r" % (accelerate.__version__, stats))
print(f"ckpt-device-map-accelerate: {checks - failures} passed, {failures} failed")
sys.exit(1 if failures else 0)
