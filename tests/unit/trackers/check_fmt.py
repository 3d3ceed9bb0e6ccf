"""The JSONL number text of accel_trackers.h against Python itself: test_trackers_fmt --dump N prints "hexbits text"
for the special doubles and N random ones (its own formatter, no printf); every text must be what repr(float)
writes (finite values), what json.dumps writes (NaN, Infinity, -Infinity), and json.loads must read it back as
the same double (the same bits: -0.0 included).
usage: check_fmt.py TEST_TRACKERS_FMT_EXE [N]"""
import json
import math
import struct
import subprocess
import sys

exe = sys.argv[1]
n = sys.argv[2] if len(sys.argv) > 2 else "400000"
out = subprocess.run([exe, "--dump", n], check=True, stdout=subprocess.PIPE).stdout.decode("ascii")
lines = out.splitlines()
bad = 0
for line in lines:
    hexbits, text = line.split(" ", 1)
    v = struct.unpack("<d", struct.pack("<Q", int(hexbits, 16)))[0]
    want = json.dumps(v) if not math.isfinite(v) else repr(v)
    back = json.loads(text)
    same = isinstance(back, float) and (struct.pack("<d", back) == struct.pack("<d", v) or (v != v and back != back))
    if text != want or not same:
        bad += 1
        if bad <= 20:
            print("FAIL: bits %s: accel wrote %r, Python writes %r, json.loads reads %r" % (hexbits, text, want, back))
print("check_fmt: %d values, %d differ from Python" % (len(lines), bad))
sys.exit(1 if bad or len(lines) < 400000 else 0)
