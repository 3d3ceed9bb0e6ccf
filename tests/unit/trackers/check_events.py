"""Independent reader of the files accel_trackers.h writes: TFRecord framing with both masked CRC32Cs checked by a
bitwise CRC32C written here, protobuf fields decoded by hand with struct, the JSONL lines and config.json read with
Python's json module. Expected values come from expected_run.py, not from the writer.
usage: check_events.py WRITE_RUN_EXE"""
import json
import math
import os
import re
import socket
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import expected_run as X  # noqa: E402

failures = 0
passes = 0


def check(cond, what):
    global failures, passes
    if cond:
        passes += 1
    else:
        failures += 1
        print("FAIL:", what)


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(blob):
    pos, out = 0, []
    while pos < len(blob):
        check(pos + 12 <= len(blob), "record header complete at offset %d" % pos)
        (n,) = struct.unpack_from("<Q", blob, pos)
        (hcrc,) = struct.unpack_from("<I", blob, pos + 8)
        check(hcrc == masked(crc32c(blob[pos:pos + 8])), "length CRC of record at %d" % pos)
        data = blob[pos + 12:pos + 12 + n]
        check(len(data) == n and pos + 16 + n <= len(blob), "record data complete at %d" % pos)
        (dcrc,) = struct.unpack_from("<I", blob, pos + 12 + n)
        check(dcrc == masked(crc32c(data)), "data CRC of record at %d" % pos)
        out.append(data)
        pos += 16 + n
    return out


def varint(buf, pos):
    v, shift = 0, 0
    while True:
        b = buf[pos]
        pos += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, pos


def fields(buf):
    """[(field number, wire type, raw value)] — varint int, fixed64/fixed32 bytes, length-delimited bytes."""
    pos, out = 0, []
    while pos < len(buf):
        key, pos = varint(buf, pos)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, pos = varint(buf, pos)
        elif wt == 1:
            v, pos = buf[pos:pos + 8], pos + 8
        elif wt == 5:
            v, pos = buf[pos:pos + 4], pos + 4
        elif wt == 2:
            n, pos = varint(buf, pos)
            v, pos = buf[pos:pos + n], pos + n
        else:
            raise ValueError("wire type %d" % wt)
        out.append((num, wt, v))
    return out


def decode_event(data):
    ev = {"wall_time": None, "step": 0, "file_version": None, "values": []}
    for num, wt, v in fields(data):
        if num == 1 and wt == 1:
            ev["wall_time"] = struct.unpack("<d", v)[0]
        elif num == 2 and wt == 0:
            ev["step"] = v - (1 << 64) if v >= 1 << 63 else v
        elif num == 3 and wt == 2:
            ev["file_version"] = v.decode()
        elif num == 5 and wt == 2:
            for snum, swt, sv in fields(v):
                check(snum == 1 and swt == 2, "Summary has only repeated Value (field 1)")
                val = {}
                for vnum, vwt, vv in fields(sv):
                    if vnum == 1:
                        val["tag"] = vv.decode("utf-8")
                    elif vnum == 2 and vwt == 5:
                        val["simple_value"] = struct.unpack("<f", vv)[0]
                    elif vnum == 8:
                        val["tensor"] = fields(vv)
                    elif vnum == 9:
                        val["metadata"] = fields(vv)
                ev["values"].append(val)
        else:
            check(False, "unexpected Event field %d wire type %d" % (num, wt))
    return ev


def main():
    # the CRC written here against RFC 3720 B.4 and the standard check value
    check(crc32c(bytes(32)) == 0x8A9136AA, "crc32c zeros")
    check(crc32c(b"\xff" * 32) == 0x62A8AB43, "crc32c ones")
    check(crc32c(bytes(range(32))) == 0x46DD794E, "crc32c incrementing")
    check(crc32c(bytes(range(31, -1, -1))) == 0x113FDB5C, "crc32c decrementing")
    check(crc32c(b"123456789") == 0xE3069283, "crc32c check value")

    tmp, paths, t0, t1 = X.run_writer(sys.argv[1], "all")
    run_dir = paths["run_dir"]
    check(os.path.normpath(run_dir) == os.path.join(tmp.name, X.PROJECT), "run_dir is logging_dir/project_name")
    names = sorted(os.listdir(run_dir))
    ev_names = [n for n in names if "tfevents" in n]
    check(len(ev_names) == 1, "exactly one event file: %s" % names)
    host = socket.gethostname().replace("/", "_")
    check(re.fullmatch(r"events\.out\.tfevents\.(\d+)\." + re.escape(host), ev_names[0]) is not None,
          "event file name %s" % ev_names[0])
    secs = int(ev_names[0].split(".")[3])
    check(int(t0) - 1 <= secs <= t1 + 1, "file name time %d within the run" % secs)
    check(names == sorted(["config.json", "metrics.jsonl", ev_names[0]]), "files in run dir: %s" % names)

    # ---------------------------------------------------------------- event file
    blob = open(os.path.join(run_dir, ev_names[0]), "rb").read()
    evs = [decode_event(r) for r in records(blob)]
    check(evs[0]["file_version"] == "brain.Event:2" and not evs[0]["values"], "first record is file_version")
    for e in evs:
        check(e["wall_time"] is not None and t0 - 1 <= e["wall_time"] <= t1 + 1, "wall_time within the run")
    # hparams text summary
    hp = evs[1]["values"]
    check(len(hp) == 1 and hp[0].get("tag") == "hparams", "second record is the hparams text summary")
    if hp and "tensor" in hp[0]:
        tf = hp[0]["tensor"]
        check((1, 0, 7) in tf, "tensor dtype DT_STRING")
        texts = [v.decode("utf-8") for n, w, v in tf if n == 8]
        check(len(texts) == 1, "one string_val")
        text = texts[0] if texts else ""
        check(text.startswith("| name | value |\n|---|---|\n"), "markdown table header")
        check("| lr | 0.0003 |" in text and "| batch_size | 64 |" in text and "| big | 4611686018427387905 |" in text,
              "hparams rows: " + text)
        check('| model | gpt2 "small" \\| 124M line2 |' in text, "pipe escaped, newline flattened")
        meta = hp[0].get("metadata", [])
        pd = [fields(v) for n, w, v in meta if n == 1]
        check(pd and (1, 2, b"text") in pd[0], "plugin_name text")
    scal = evs[2:]
    exp = X.calls()
    check(len(scal) == len(exp), "one Event per log() call: %d vs %d" % (len(scal), len(exp)))
    for e, (step, vals) in zip(scal, exp):
        check(e["step"] == (step if step is not None else 0), "step %s" % step)
        check([v.get("tag") for v in e["values"]] == [n for n, _ in vals], "tags at step %s" % step)
        for got, (n, x) in zip(e["values"], vals):
            check(X.same(got.get("simple_value"), X.f32(x)), "%r at step %s: %r vs %r" % (n, step, got.get("simple_value"), X.f32(x)))
    walls = [e["wall_time"] for e in evs]
    check(walls == sorted(walls), "wall_time non-decreasing")

    # ---------------------------------------------------------------- metrics.jsonl
    raw = open(os.path.join(run_dir, "metrics.jsonl"), "rb").read()
    check(raw.endswith(b"\n"), "jsonl ends with a newline")
    lines = raw.decode("utf-8").splitlines()
    check(len(lines) == len(exp), "one line per log() call")
    prev_t = 0.0
    for line, (step, vals) in zip(lines, exp):
        obj = json.loads(line)  # NaN/Infinity tokens are accepted by default
        keys = list(obj.keys())
        check(keys == ["step", "time"] + [n for n, _ in vals], "keys in order: %s" % keys)
        check(obj["step"] == step and (step is None or type(obj["step"]) is int), "jsonl step %s" % step)
        check(isinstance(obj["time"], float) and t0 - 1 <= obj["time"] <= t1 + 1 and obj["time"] >= prev_t, "time")
        prev_t = obj["time"]
        for n, x in vals:
            check(X.same(obj.get(n), x), "jsonl %r at %s: %r vs %r" % (n, step, obj.get(n), x))
    # byte for byte what Python's json.dumps(..., ensure_ascii=False) writes (separators ", " and ": "), except the
    # "time" token, which is copied from the line
    bad_bytes = 0
    for line, (step, vals) in zip(lines, exp):
        m = re.match(r'\{"step": [^,]+, "time": ([0-9.]+)', line)
        want = '{"step": ' + json.dumps(step) + ', "time": ' + (m.group(1) if m else "?") + "".join(
            ", " + json.dumps(n, ensure_ascii=False) + ": " + json.dumps(x) for n, x in vals) + "}"
        if line != want:
            bad_bytes += 1
            if bad_bytes < 3:
                print("jsonl line differs from json.dumps:\n  got  %r\n  want %r" % (line, want))
    check(bad_bytes == 0, "jsonl lines are byte-identical to json.dumps (%d differ)" % bad_bytes)
    check('"fmt/third": 0.3333333333333333' in raw.decode(), "shortest round-trip text for 1/3")
    check('"lr": 0.0003,' in lines[1], "shortest text for 3e-4: %s" % lines[1][:120])

    # ---------------------------------------------------------------- config.json
    cfg = json.load(open(os.path.join(run_dir, "config.json"), encoding="utf-8"))
    check(list(cfg.keys()) == [n for n, _ in X.CONFIG], "config keys: %s" % list(cfg.keys()))
    for n, x in X.CONFIG:
        check(X.same(cfg.get(n), x), "config %r: %r vs %r" % (n, cfg.get(n), x))
    text = open(os.path.join(run_dir, "config.json"), encoding="utf-8").read()
    want = json.dumps(dict(X.CONFIG), indent=2, ensure_ascii=False) + "\n"
    check(text == want, "config.json is byte-identical to json.dumps(indent=2, ensure_ascii=False):\n%r\n%r"
          % (text, want))

    # ---------------------------------------------------------------- single-tracker runs write only their file
    for mode, want in (("tensorboard", "tfevents"), ("jsonl", "metrics.jsonl")):
        t2, p2, _, _ = X.run_writer(sys.argv[1], mode)
        files = sorted(os.listdir(p2["run_dir"]))
        check(len(files) == 2 and "config.json" in files and any(want in f for f in files),
              "%s-only run writes %s + config.json: %s" % (mode, want, files))
        t2.cleanup()
    tmp.cleanup()

    # ---------------------------------------------------------------- the number formatter, 40000 doubles
    t3, p3, _, _ = X.run_writer(sys.argv[1], "fmt")
    lines = open(p3["jsonl_file"], encoding="utf-8").read().splitlines()
    check(len(lines) == X.FMT_CALLS, "fmt lines")
    bad_value = not_shortest = 0
    for i, line in enumerate(lines):
        obj = json.loads(line)
        toks = dict(re.findall(r'"(v\d)": ([^,}]+)', line))
        for k in range(10):
            want = X.fmt_value(i, k)
            if not X.same(obj.get("v%d" % k), want):
                bad_value += 1
                if bad_value < 5:
                    print("value mismatch", i, k, toks.get("v%d" % k), repr(want))
            elif len(toks.get("v%d" % k, "")) > len(repr(want)) and float(repr(want)) == want:
                not_shortest += 1
    check(bad_value == 0, "every double reads back exactly (%d mismatches)" % bad_value)
    check(not_shortest == 0, "shortest round-trip form (no longer than repr): %d longer" % not_shortest)
    t3.cleanup()
    print("trackers-events: %d passed, %d failed" % (passes, failures))
    return 1 if failures or not passes else 0


if __name__ == "__main__":
    sys.exit(main())
