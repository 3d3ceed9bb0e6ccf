"""scripts/summarize.py (the test summary scripts/test.sh and .ci/run print): per-suite counts, and each skipped test
listed under the reason it printed (its last line of output), grouped. The input is a testlog.json written here by
hand in meson's format, the expected lines are written out literally below."""
import json
import os
import subprocess
import sys
import tempfile

root = sys.argv[1]
tests = [
    {"name": "accel:amp+gpu / amp-gpu", "result": "SKIP", "stdout": "setup\nno CUDA device: skipped\n", "stderr": ""},
    {"name": "accel:optim+gpu / optim-gpu", "result": "SKIP", "stdout": "no CUDA device: skipped\n\n", "stderr": ""},
    {"name": "accel:core+slurm / core-slurm", "result": "SKIP", "stdout": "", "stderr": "slurm-local: no munge\n"},
    {"name": "accel:core+unit / core-unit", "result": "OK", "stdout": "ok\n", "stderr": ""},
    {"name": "accel:core+mpi / core-mpi-np2", "result": "FAIL", "stdout": "", "stderr": "boom\n"},
    {"name": "accel:data+unit / data-quiet", "result": "SKIP", "stdout": None, "stderr": None},
]
with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
    for t in tests:
        f.write(json.dumps(t) + "\n")
out = subprocess.run([sys.executable, os.path.join(root, "scripts", "summarize.py"), f.name], capture_output=True,
                     text=True, check=True).stdout.splitlines()
os.unlink(f.name)
want = [
    "  suite amp             0 passed   0 failed   1 skipped",
    "  suite core            1 passed   1 failed   1 skipped",
    "  skipped   2: no CUDA device: skipped -- amp-gpu, optim-gpu",
    "  skipped   1: slurm-local: no munge -- core-slurm",
    "  skipped   1: (no reason printed) -- data-quiet",
    "tests: 1 passed, 1 failed, 4 skipped",
]
missing = [w for w in want if w not in out]
if missing:
    print("summarize.py output:\n" + "\n".join(out) + "\nmissing:\n" + "\n".join(missing))
    sys.exit(1)
print("summarize: %d lines as expected" % len(want))
