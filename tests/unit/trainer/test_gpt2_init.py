#!/usr/bin/env python3
"""--init's config.json checks and the export's config.json (examples/gpt2/gpt2.h), through gpt2_cpu.

A tiny random GPT-2 (L2 H2 C32 V64, block 16) is written as Hugging Face safetensors (struct, no torch) into a folder
with a config.json the test writes; gpt2_cpu --init FOLDER runs one step at lr 0 and writes the loss file.
  - accepted: the hub's gpt2 config.json layout (task_specific_params, dropouts, n_ctx, ...) sized to the model; a
    config.json written by transformers 5.24.0 itself (data/, GPT2Config(...).save_pretrained; bos/eos 50256 as
    transformers writes them) and, when transformers can be imported here, one written now; every variant that
    computes the same function (the tanh-GELU spellings, reorder_and_upcast_attn, aliases that agree, other
    dropouts, unknown keys, 1e-5 spelled otherwise, a tied lm_head.weight, no config.json with --heads). Each gives
    the same first loss, bit for bit, as the baseline.
  - refused, naming the field, nothing trained (exit status != 0, no loss file): each GPT2Config field that changes
    the math set otherwise (activation_function, layer_norm_epsilon, tie_word_embeddings with and without a head of
    its own, scale_attn_weights, scale_attn_by_inverse_layer_idx, n_inner, add_cross_attention, pruned_heads,
    model_type), the sizes against the tensors (vocab_size, n_positions, n_ctx, n_embd, n_layer, their aliases,
    n_head vs n_embd and --heads), a missing size, a wrong JSON type, text that is not JSON; without config.json an
    lm_head.weight that differs from wte.weight.
  - the export's config.json: every field --init checks, bos/eos null for V=64 and 50256 for GPT-2's 50257 tokens;
    --init from the export is accepted; with transformers importable, GPT2Config.from_pretrained reads it without a
    warning and with the same values.
  - the reader against Python's json (what transformers uses), on documents that probe the grammar (escapes,
    surrogates, numbers, NaN/Infinity, duplicate keys, invalid UTF-8, trailing data, ...): it accepts exactly what
    Python accepts (a dict) and reads the same values for the keys it knows (gpt2_config_dump prints them).
usage: test_gpt2_init.py GPT2_CPU_EXE GPT2_CONFIG_DUMP_EXE
"""
import json
import math
import os
import random
import struct
import subprocess
import sys
import tempfile

failures = checks = 0
L, H, C, V, BLOCK = 2, 2, 32, 64, 16
HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "data", "transformers-5.24.0-gpt2-tiny-config.json")


def check(ok, what):
    global failures, checks
    checks += 1
    failures += 0 if ok else 1
    print(("ok: " if ok else "FAIL: ") + what, flush=True)


def write_safetensors(path, tensors):
    """tensors: name -> (shape, floats); F32, sorted names, header padded to 8 bytes."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        shape, vals = tensors[name]
        b = struct.pack("<%df" % len(vals), *vals)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def random_model(rng, prefix="", lm_head=None):
    """Hugging Face GPT-2 tensors (Conv1D weights [in, out]); lm_head: None, "tied" (= wte) or "own"."""
    def n(*shape, s=0.1, base=0.0):
        k = 1
        for d in shape:
            k *= d
        return (list(shape), [base + rng.gauss(0.0, s) for _ in range(k)])
    t = {"wte.weight": n(V, C), "wpe.weight": n(BLOCK, C), "ln_f.weight": n(C, s=0.2, base=1.0), "ln_f.bias": n(C)}
    for l in range(L):
        p = "h.%d." % l
        t.update({p + "ln_1.weight": n(C, s=0.2, base=1.0), p + "ln_1.bias": n(C),
                  p + "attn.c_attn.weight": n(C, 3 * C), p + "attn.c_attn.bias": n(3 * C),
                  p + "attn.c_proj.weight": n(C, C), p + "attn.c_proj.bias": n(C),
                  p + "ln_2.weight": n(C, s=0.2, base=1.0), p + "ln_2.bias": n(C), p + "mlp.c_fc.weight": n(C, 4 * C),
                  p + "mlp.c_fc.bias": n(4 * C), p + "mlp.c_proj.weight": n(4 * C, C), p + "mlp.c_proj.bias": n(C)})
    t = {prefix + k: v for k, v in t.items()}
    if lm_head == "tied":
        t["lm_head.weight"] = t[prefix + "wte.weight"]
    elif lm_head == "own":
        t["lm_head.weight"] = n(V, C)
    return t


def hub_config():
    """The layout of the hub's openai-community/gpt2 config.json, sized to the tiny model."""
    return {"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
            "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02,
            "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": BLOCK, "n_embd": C, "n_head": H, "n_layer": L,
            "n_positions": BLOCK, "resid_pdrop": 0.1, "summary_activation": None, "summary_first_dropout": 0.1,
            "summary_proj_to_labels": True, "summary_type": "cls_index", "summary_use_proj": True,
            "task_specific_params": {"text-generation": {"do_sample": True, "max_length": 50}}, "vocab_size": V}


class Env:
    def __init__(self, exe, tmp):
        self.exe, self.tmp = exe, tmp
        self.shard = os.path.join(tmp, "tokens.bin")
        subprocess.run([exe, "--gen-shard", self.shard, "4000", str(V)], check=True, capture_output=True)
        self.n = 0

    def folder(self, tensors, config):
        """A model folder: model.safetensors and config.json (a dict, raw text, or None for none)."""
        self.n += 1
        d = os.path.join(self.tmp, "m%d" % self.n)
        os.mkdir(d)
        write_safetensors(os.path.join(d, "model.safetensors"), tensors)
        if config is not None:
            with open(os.path.join(d, "config.json"), "w") as f:
                f.write(config if isinstance(config, str) else json.dumps(config, indent=2))
        return d

    def run(self, init, extra=()):
        """(returncode, stderr, first loss or None) of one step at lr 0 from --init."""
        lf = os.path.join(self.tmp, "loss%d.txt" % self.n)
        cmd = [self.exe, "--init", init, "--data", self.shard, "--steps", 1, "--batch", 2, "--seq", BLOCK,
               "--lr", 0, "--loss-file", lf, "--print-every", 0] + list(extra)
        r = subprocess.run([str(x) for x in cmd], capture_output=True, text=True, timeout=120)
        loss = float(open(lf).read().split()[1]) if os.path.exists(lf) else None
        return r.returncode, r.stdout + r.stderr, loss


def transformers_python():
    """A python that can import transformers (this one, or the reference venv's), else None."""
    for py in (sys.executable, os.environ.get("ACCEL_REFERENCE_PYTHON")):
        if py and subprocess.run([py, "-c", "import transformers"], capture_output=True).returncode == 0:
            return py
    return None


def test_init(env, tfpy):
    rng = random.Random(5)
    model = random_model(rng)
    base = env.folder(model, hub_config())
    rc, out, loss0 = env.run(base)
    check(rc == 0 and loss0 is not None and 2.0 < loss0 < 8.0,
          "the hub's config.json layout is accepted (first loss %s)%s" % (loss0, "" if rc == 0 else "\n" + out))

    def accepted(what, config, tensors=None, extra=(), path=None):
        d = env.folder(tensors or model, config)
        rc, out, loss = env.run(path(d) if path else d, extra)
        check(rc == 0 and loss == loss0, "accepted, same first loss: %s (%s)%s" %
              (what, loss, "" if rc == 0 else "\n" + out.strip()))

    def refused(what, field, config, tensors=None, extra=()):
        d = env.folder(tensors or model, config)
        rc, out, loss = env.run(d, extra)
        check(rc != 0 and loss is None and field in out and "--init" in out,
              "refused, naming %s: %s (exit %d: %s)" % (field, what, rc, out.strip().splitlines()[-1] if out else ""))

    def cfg(**kw):
        c = hub_config()
        for k, v in kw.items():
            if v is KeyError:
                del c[k]
            else:
                c[k] = v
        return c

    # accepted: files written by transformers, and every spelling of the same model
    accepted("transformers 5.24.0's GPT2Config.save_pretrained (data/)", open(FIXTURE).read())
    if tfpy:
        d = os.path.join(env.tmp, "tf_live")
        code = ("import sys; from transformers import GPT2Config; GPT2Config(vocab_size=%d, n_positions=%d, n_embd=%d, "
                "n_layer=%d, n_head=%d).save_pretrained(sys.argv[1])" % (V, BLOCK, C, L, H))
        r = subprocess.run([tfpy, "-c", code, d], capture_output=True, text=True)
        accepted("a config.json transformers wrote in this run", open(os.path.join(d, "config.json")).read()
                 if r.returncode == 0 else "{}")
    else:
        print("note: transformers cannot be imported here; the committed transformers-written config stands in")
    for act in ("gelu_pytorch_tanh", "gelu_python_tanh", "gelu_fast", "gelu_accurate"):
        accepted("activation_function %s (transformers' other spellings of the tanh GELU)" % act,
                 cfg(activation_function=act))
    accepted("reorder_and_upcast_attn true (the same scores, computed in float32 under autocast)",
             cfg(reorder_and_upcast_attn=True))
    accepted("n_inner = 4 x n_embd, scale_attn_weights true, scale_attn_by_inverse_layer_idx false, "
             "add_cross_attention false, pruned_heads {}, tie_word_embeddings true, all explicit",
             cfg(n_inner=4 * C, scale_attn_weights=True, scale_attn_by_inverse_layer_idx=False,
                 add_cross_attention=False, pruned_heads={}, tie_word_embeddings=True))
    accepted("dropouts 0.5, unknown keys, bos/eos outside the vocabulary",
             cfg(resid_pdrop=0.5, attn_pdrop=0.5, embd_pdrop=0.5, my_key=[1, {"a": None}], bos_token_id=99999))
    accepted("n_ctx null (transformers does not read it)", cfg(n_ctx=None))
    accepted("aliases that agree (hidden_size, max_position_embeddings, num_attention_heads, num_hidden_layers)",
             cfg(hidden_size=C, max_position_embeddings=BLOCK, num_attention_heads=H, num_hidden_layers=L))
    accepted("aliases alone (n_embd, n_positions, n_head, n_layer left out)",
             cfg(n_embd=KeyError, n_positions=KeyError, n_head=KeyError, n_layer=KeyError, n_ctx=KeyError,
                 hidden_size=C, max_position_embeddings=BLOCK, num_attention_heads=H, num_hidden_layers=L))
    for spelled in ("0.00001", "1E-5", "1.0e-05", "10e-6"):
        accepted("layer_norm_epsilon written %s" % spelled,
                 json.dumps(hub_config()).replace('"layer_norm_epsilon": 1e-05', '"layer_norm_epsilon": ' + spelled))
    accepted("an lm_head.weight equal to wte.weight (tied)", hub_config(), random_model(random.Random(5), "", "tied"))
    accepted("tie_word_embeddings true with an lm_head.weight of its own (transformers ties it: wte is the head)",
             hub_config(), random_model(random.Random(5), "", "own"))
    accepted("names with GPT2LMHeadModel's transformer. prefix", hub_config(),
             random_model(random.Random(5), "transformer.", "tied"))
    accepted("no config.json: the heads from --heads", None, extra=["--heads", H])
    accepted("the .safetensors file form (config.json beside it)", hub_config(),
             path=lambda d: os.path.join(d, "model.safetensors"))

    # refused: each field that changes the math
    refused("the exact (erf) GELU", "activation_function", cfg(activation_function="gelu"))
    refused("ReLU", "activation_function", cfg(activation_function="relu"))
    refused("a number", "activation_function", cfg(activation_function=1))
    refused("gelu_new, a NUL, more", "activation_function",
            json.dumps(hub_config()).replace('"gelu_new"', '"gelu_new\\u0000x"'))
    refused("a long name that starts like gelu_new", "activation_function",
            cfg(activation_function="gelu_new" + "x" * 80))
    refused("1e-6", "layer_norm_epsilon", cfg(layer_norm_epsilon=1e-6))
    refused("a string", "layer_norm_epsilon", cfg(layer_norm_epsilon="1e-05"))
    refused("false with a head of its own", "tie_word_embeddings", cfg(tie_word_embeddings=False),
            random_model(random.Random(5), "", "own"))
    refused("false without lm_head.weight", "tie_word_embeddings", cfg(tie_word_embeddings=False))
    refused("false", "scale_attn_weights", cfg(scale_attn_weights=False))
    refused("null", "scale_attn_weights", cfg(scale_attn_weights=None))
    refused("true", "scale_attn_by_inverse_layer_idx", cfg(scale_attn_by_inverse_layer_idx=True))
    refused("2C hidden units", "n_inner", cfg(n_inner=2 * C))
    refused("a string", "n_inner", cfg(n_inner=str(4 * C)))
    refused("true", "add_cross_attention", cfg(add_cross_attention=True))
    refused("a pruned head", "pruned_heads", cfg(pruned_heads={"0": [1]}))
    refused("gpt_neo", "model_type", cfg(model_type="gpt_neo"))
    refused("65 (wte has 64 rows)", "vocab_size", cfg(vocab_size=V + 1))
    refused("32 (wpe has 16 rows)", "n_positions", cfg(n_positions=2 * BLOCK))
    refused("32 (wpe has 16 rows)", "n_ctx", cfg(n_ctx=2 * BLOCK))
    refused("48 (wte has 32 columns)", "n_embd", cfg(n_embd=48))
    refused("32.0 (a real number)", "n_embd", cfg(n_embd=32.0))
    refused("3 (the file holds 2 layers)", "n_layer", cfg(n_layer=3))
    refused("1 (the file holds 2 layers)", "n_layer", cfg(n_layer=1))
    refused("3 (does not divide 32)", "n_head", cfg(n_head=3))
    refused("2, but --heads 4", "n_head", cfg(), extra=["--heads", 4])
    refused("missing (transformers would take 768)", "n_embd", cfg(n_embd=KeyError))
    refused("missing", "vocab_size", cfg(vocab_size=KeyError))
    refused("hidden_size 48 against n_embd 32", "hidden_size", cfg(hidden_size=48))
    refused("max_position_embeddings alone, 32", "max_position_embeddings",
            cfg(n_positions=KeyError, max_position_embeddings=2 * BLOCK))
    refused("num_hidden_layers 3 against n_layer 2", "num_hidden_layers", cfg(num_hidden_layers=3))
    refused("num_attention_heads 4 against n_head 2", "num_attention_heads", cfg(num_attention_heads=4))
    refused("a trailing comma", "not JSON", json.dumps(hub_config())[:-1] + ",}")
    refused("no config.json and an lm_head.weight of its own", "lm_head.weight", None,
            random_model(random.Random(5), "", "own"), extra=["--heads", H])


def test_export(env, tfpy):
    ex = os.path.join(env.tmp, "export")
    r = subprocess.run([str(x) for x in [env.exe, "--data", env.shard, "--layers", L, "--heads", H, "--channels", C,
                                         "--vocab", V, "--block-size", BLOCK, "--seq", BLOCK, "--batch", 2,
                                         "--steps", 2, "--export", ex, "--print-every", 0]],
                       capture_output=True, text=True, timeout=120)
    cfg = json.load(open(os.path.join(ex, "config.json"))) if r.returncode == 0 else {}
    want = {"model_type": "gpt2", "vocab_size": V, "n_positions": BLOCK, "n_ctx": BLOCK, "n_embd": C, "n_layer": L,
            "n_head": H, "n_inner": None, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
            "scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False, "reorder_and_upcast_attn": False,
            "add_cross_attention": False, "tie_word_embeddings": True, "bos_token_id": None, "eos_token_id": None}
    bad = {k: cfg.get(k, "(missing)") for k in want if cfg.get(k, "(missing)") != want[k]}
    check(r.returncode == 0 and not bad, "export (V=%d): config.json spells out the model, bos/eos null (%s)%s" %
          (V, bad or "all as expected", "" if r.returncode == 0 else "\n" + r.stdout + r.stderr))
    rc, out, _ = env.run(ex)
    check(rc == 0, "--init from the export folder is accepted%s" % ("" if rc == 0 else "\n" + out))
    # GPT-2's vocabulary: <|endoftext|> = 50256 is inside it
    shard = os.path.join(env.tmp, "big_vocab.bin")
    subprocess.run([env.exe, "--gen-shard", shard, "200", "50257"], check=True, capture_output=True)
    ex2 = os.path.join(env.tmp, "export50257")
    r = subprocess.run([str(x) for x in [env.exe, "--data", shard, "--layers", 1, "--heads", 1, "--channels", 8,
                                         "--vocab", 50257, "--block-size", 8, "--seq", 8, "--batch", 1, "--steps", 1,
                                         "--export", ex2, "--print-every", 0]], capture_output=True, text=True,
                       timeout=120)
    cfg2 = json.load(open(os.path.join(ex2, "config.json"))) if r.returncode == 0 else {}
    check(cfg2.get("bos_token_id") == 50256 and cfg2.get("eos_token_id") == 50256 and cfg2.get("vocab_size") == 50257,
          "export (V=50257): bos/eos 50256, GPT-2's <|endoftext|> (%s)" %
          {k: cfg2.get(k) for k in ("bos_token_id", "eos_token_id", "vocab_size")})
    if not tfpy:
        print("note: transformers cannot be imported here: GPT2Config.from_pretrained on the export not run")
        return
    code = ("import json, logging, sys\nfrom transformers import GPT2Config\n"
            "from transformers.utils import logging as tl\n"
            "records = []\n"
            "class Keep(logging.Handler):\n"
            "    def emit(self, rec): records.append(rec.getMessage())\n"
            "tl.get_logger('transformers').addHandler(Keep())\n"
            "c = GPT2Config.from_pretrained(sys.argv[1])\n"
            "print(json.dumps({'warnings': [m for m in records if 'token_id' in m], 'bos': c.bos_token_id, "
            "'eos': c.eos_token_id, 'n_embd': c.n_embd, 'n_head': c.n_head, 'n_layer': c.n_layer, "
            "'vocab': c.vocab_size, 'act': c.activation_function, 'tie': c.tie_word_embeddings}))")
    r = subprocess.run([tfpy, "-c", code, ex], capture_output=True, text=True)
    got = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else {}
    check(got and not got["warnings"] and got["bos"] is None and got["eos"] is None and
          (got["n_embd"], got["n_head"], got["n_layer"], got["vocab"]) == (C, H, L, V) and got["act"] == "gelu_new" and
          got["tie"], "transformers' GPT2Config.from_pretrained reads the export without a token-id warning: %s%s" %
          (got, "" if r.returncode == 0 else "\n" + r.stderr[-2000:]))


# documents for the reader vs Python's json; bytes
JSON_CASES = [
    b'{"n_embd": 32, "n_head": 2}',
    b' \t\r\n{ "n_embd" : 32 , "n_head" : 2 } \n',
    b'{}',
    b'{"n_embd": 32, "n_embd": 48}',                                   # duplicate key: the last wins
    b'{"n_\\u0065mbd": 7}',                                           # an escaped key is the same key
    b'{"activation_function": "gelu\\u005fnew"}',
    b'{"activation_function": "gel\\"u\\\\\\/\\b\\f\\n\\r\\t"}',
    b'{"activation_function": "\\u00e9\\u4e2d\\ud83d\\ude00"}',
    b'{"activation_function": "\\ud800x"}',                           # a lone surrogate: Python keeps it
    b'{"activation_function": "gelu_new\\u0000x", "model_type": "gpt2\\u0000"}',  # NUL inside a string
    b'{"activation_function": "\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80"}',
    b'{"activation_function": "' + b"y" * 200 + b'"}',
    b'{"layer_norm_epsilon": 1e-05, "n_inner": null, "vocab_size": -0, "n_ctx": 12345678901234567890}',
    b'{"layer_norm_epsilon": 1E+2, "n_embd": 0.5, "n_head": -3.25e-2, "n_layer": 1e400, "vocab_size": -1e400}',
    b'{"layer_norm_epsilon": NaN, "n_embd": Infinity, "n_head": -Infinity}',
    b'{"tie_word_embeddings": true, "scale_attn_weights": false, "add_cross_attention": null}',
    b'{"pruned_heads": {"0": [1, 2], "1": []}, "model_type": "gpt2", "x": [[[]]], "task": {"a": {"b": [1, "]"]}}}',
    b'{"pruned_heads": [], "n_inner": [1, 2, 3]}',
    b'{"n_embd": 32,}',
    b"{'n_embd': 32}",
    b'{"n_embd": 32} // comment',
    b'{"n_embd": 012}',
    b'{"n_embd": 1.}',
    b'{"n_embd": .5}',
    b'{"n_embd": +1}',
    b'{"n_embd": 1e}',
    b'{"n_embd": -}',
    b'{"n_embd": 0x10}',
    b'{"n_embd": tru}',
    b'{"n_embd": nan}',
    b'{"n_embd": "abc',
    b'{"n_embd": "a\x01b"}',
    b'{"n_embd": "a\\xb"}',
    b'{"n_embd": "\\u12"}',
    b'{"n_embd": "\xff"}',
    b'{"n_embd": "\xc0\xaf"}',
    b'{"n_embd": "\xed\xa0\x80"}',
    b'{"n_embd": "\xf4\x90\x80\x80"}',
    b'{"n_embd": "\xe4\xb8"}',
    b'\xef\xbb\xbf{"n_embd": 32}',
    b'[{"n_embd": 32}]',
    b'"n_embd"',
    b'{"n_embd": 32} {}',
    b'{"n_embd": 32',
    b'{"n_embd" 32}',
    b'{n_embd: 32}',
    b'{"a": [1 2]}',
    b'{"a": [1,]}',
    b'',
    b'{"a": ' + b'[' * 60 + b']' * 60 + b'}',
]


def python_view(doc):
    """What transformers reads: the UTF-8 text through json.loads; None unless it is an object."""
    try:
        v = json.loads(doc.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    return v if isinstance(v, dict) else None


def same_value(py, c):
    if isinstance(py, bool) or py is None:
        return c["type"] == {None: "null", True: "true", False: "false"}[py]
    if isinstance(py, int):
        return c["type"] == "int" and float(c["number"]) == float(py)
    if isinstance(py, float):
        x = float(c["number"]) if c["type"] == "real" else None
        return x is not None and (x == py or (math.isnan(x) and math.isnan(py)))
    if isinstance(py, str):
        b = py.encode("utf-8", "surrogatepass")
        return c["type"] == "string" and c["len"] == len(b) and bytes.fromhex(c["hex"]) == b[:63]
    if isinstance(py, list):
        return c["type"] == "array" and c["count"] == len(py)
    return c["type"] == "object" and c["count"] == len(py)


def test_reader(dump, tmp):
    known = ["vocab_size", "n_positions", "max_position_embeddings", "n_ctx", "n_embd", "hidden_size", "n_layer",
             "num_hidden_layers", "n_head", "num_attention_heads", "n_inner", "activation_function",
             "layer_norm_epsilon", "tie_word_embeddings", "scale_attn_weights", "scale_attn_by_inverse_layer_idx",
             "add_cross_attention", "model_type", "pruned_heads"]
    docs = list(JSON_CASES)
    rng = random.Random(7)
    for _ in range(200):  # random documents built from the keys it knows, values of every type, nested
        def value(depth):
            k = rng.randrange(8 if depth < 3 else 6)
            return [lambda: None, lambda: True, lambda: False, lambda: rng.randint(-10 ** 6, 10 ** 6),
                    lambda: rng.uniform(-1e3, 1e3),
                    lambda: "".join(rng.choice("ab\"\\\n\u00e9\u4e2d\U0001f600") for _ in range(rng.randrange(70))),
                    lambda: [value(depth + 1) for _ in range(rng.randrange(3))],
                    lambda: {rng.choice(known + ["x"]): value(depth + 1) for _ in range(rng.randrange(3))}][k]()
        pairs = ['"%s": %s' % (rng.choice(known + ["other"]), json.dumps(value(0), ensure_ascii=rng.random() < 0.5))
                 for _ in range(rng.randrange(1, 8))]
        docs.append(("{" + ", ".join(pairs) + "}").encode("utf-8"))
    paths = []
    for i, d in enumerate(docs):
        paths.append(os.path.join(tmp, "doc%d.json" % i))
        with open(paths[-1], "wb") as f:
            f.write(d)
    r = subprocess.run([dump] + paths, capture_output=True, text=True, timeout=60)
    lines = r.stdout.splitlines()
    mismatches = []
    for d, line in zip(docs, lines):
        c, py = json.loads(line), python_view(d)
        if (py is not None) != c["ok"]:
            mismatches.append("%r: Python %s, reader %s" % (d[:60], "accepts" if py is not None else "refuses",
                                                           c.get("error", "accepts")))
            continue
        if py is None:
            continue
        want = {k: py[k] for k in known if k in py}
        if sorted(want) != sorted(c["keys"]) or not all(same_value(want[k], c["keys"][k]) for k in want):
            mismatches.append("%r: Python %s, reader %s" % (d[:60], want, c["keys"]))
    check(r.returncode == 0 and len(lines) == len(docs) and not mismatches,
          "config.json reader = Python's json on %d documents (%d accepted by both)%s" %
          (len(docs), sum(1 for d in docs if python_view(d) is not None), "".join("\n  " + m for m in mismatches)))
    deep = os.path.join(tmp, "deep.json")
    with open(deep, "w") as f:
        f.write('{"a": ' + "[" * 100 + "]" * 100 + "}")
    out = subprocess.run([dump, deep], capture_output=True, text=True).stdout
    check("nested too deeply" in out, "the one documented difference: nesting deeper than 64 is refused (%s)" %
          out.strip())


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    exe, dump = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    tfpy = transformers_python()
    with tempfile.TemporaryDirectory(prefix="gpt2-init-") as tmp:
        env = Env(exe, tmp)
        test_reader(dump, tmp)
        test_init(env, tfpy)
        test_export(env, tfpy)
    print("gpt2-init: %d passed, %d failed" % (checks - failures, failures))
    return 1 if failures or not checks else 0


if __name__ == "__main__":
    sys.exit(main())
