"""What write_run.c logs, recomputed independently in Python (float64 arithmetic is IEEE in both languages)."""
import ctypes
import math
import os
import subprocess
import tempfile

NSTEPS = 50
NAMES = ["train/loss", "lr", 'acc "quoted" \\back/slash', "\u00fcn\u00ef/\u540d\u524d"]
PROJECT = "demo run"


def calls():
    """[(step or None, [(name, float64 value), ...]), ...] in log() order."""
    out = []
    for s in range(NSTEPS):
        out.append((s, [(NAMES[0], 1.0 / (s + 1) + 0.125), (NAMES[1], 3e-4 * (s % 7)),
                        (NAMES[2], s * 0.01), (NAMES[3], -s * 1e10)]))
        if s == 10:
            out.append((s, [("special/nan", math.nan), ("special/inf", math.inf), ("special/-inf", -math.inf),
                            ("ctl\n\t\x01\x1f", 0.1), ("fmt/third", 1.0 / 3.0), ("fmt/tiny", 5e-324),
                            ("fmt/huge", 1.7976931348623157e308), ("fmt/negzero", -0.0)]))
    out.append((1 << 40, [("big/step", 2.5)]))
    out.append((None, [("final/score", 42.0)]))
    return out


CONFIG = [("lr", 3e-4), ("batch_size", 64), ("big", (1 << 62) + 1), ("model", 'gpt2 "small" | 124M\nline2'),
          ("use_amp", True), ("ctl\x01\t", math.inf), ("nan", math.nan)]


FMT_CALLS = 4000
M64 = (1 << 64) - 1


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def fmt_value(i, k):
    """Value k of call i of write_run's fmt mode."""
    import struct
    r = splitmix64(i * 10 + k)
    if k < 6:
        if (r >> 52) & 0x7FF == 0x7FF:
            r ^= 1 << 62
        if k == 5 and i % 4 == 0:
            r &= ~(0x7FF << 52)
        return struct.unpack("<d", struct.pack("<Q", r))[0]
    if k < 8:
        return float(r % 2000001 - 1000000) / 1000.0
    if k == 8:
        return f32((r >> 11) * (1.0 / 9007199254740992.0))
    return float(r >> 11) * (1.0 if k & 1 else -1.0)


def f32(x):
    """float64 -> float32 -> float64, as a C (float) cast rounds (to nearest; overflow -> inf)."""
    return ctypes.c_float(x).value


def same(a, b):
    """Bit-for-bit equal floats (NaN == NaN, -0.0 != 0.0)."""
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    return type(a) is type(b) and a == b


def run_writer(exe, mode="all"):
    """Runs write_run into a fresh temporary directory; returns (tmpdir object, paths dict, t_before, t_after)."""
    import time
    tmp = tempfile.TemporaryDirectory(prefix="accel-trackers-")
    t0 = time.time()
    p = subprocess.run([exe, tmp.name, mode], capture_output=True, text=True, timeout=60)
    t1 = time.time()
    if p.returncode != 0:
        raise SystemExit("write_run failed (%d): %s %s" % (p.returncode, p.stdout, p.stderr))
    paths = dict(line.split("=", 1) for line in p.stdout.splitlines() if "=" in line)
    return tmp, paths, t0, t1
