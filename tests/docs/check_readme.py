#!/usr/bin/env python3
"""README.md stays literally correct (issue 11):
  1. the loop under "A training loop that resumes" is examples/quickstart.c's region between "README:begin" and
     "README:end", dedented by four spaces, character for character (quickstart.c is compiled and its resume is
     tested, so the README's loop is too);
  2. every accel_* / ACCEL_* identifier the README names exists in a header, the CLI, an example, a benchmark or a script (a renamed API
     left in the README fails here).
usage: check_readme.py SOURCE_ROOT   (--selftest: both checks must fail on a mutated README)
"""
import glob
import os
import re
import sys

NOT_C = {"accel_dep", "accel_headers", "accel_headers_dep", "accel_impl"}  # meson names / file stems


def problems(root, readme):
    out = []
    src = open(os.path.join(root, "examples", "quickstart.c")).read()
    m = re.search(r"/\* README:begin[^\n]*\n(.*?)\n[ ]*/\* README:end \*/", src, re.S)
    if not m:
        return ["examples/quickstart.c has no README:begin/README:end region"]
    region = "\n".join(l[4:] if l.startswith("    ") else l for l in m.group(1).split("\n"))
    blocks = re.findall(r"```c\n(.*?)\n```", readme, re.S)
    if region not in blocks:
        out.append("README.md has no ```c block equal to examples/quickstart.c's README region")
    corpus = ""
    for pat in ("*.h", "tools/*.c", "tools/*.h", "examples/*.c", "examples/*.cu", "examples/*/*.c*", "src/*",
                "bench/*.h", "bench/*/*.c*", "bench/*/*.py", "scripts/*"):
        for f in glob.glob(os.path.join(root, pat)):
            corpus += open(f, errors="replace").read()
    known = set(re.findall(r"\b(?:accel|ACCEL)_[A-Za-z0-9_]*", corpus))
    for name in sorted(set(re.findall(r"\b(?:accel|ACCEL)_[A-Za-z0-9_]*", readme))):
        if name not in known and name not in NOT_C and not name.endswith("_"):
            out.append("README.md names %s, which no header, tool or example defines or uses" % name)
    return out


def main():
    args = [a for a in sys.argv[1:] if a != "--selftest"]
    root = args[0]
    readme = open(os.path.join(root, "README.md")).read()
    if "--selftest" in sys.argv:
        bad = readme.replace("accel_scheduler_steps(&acc, 0);", "accel_scheduler_steps(&acc, 1);", 1)
        bad = bad.replace("accel_track_deinit", "accel_track_end_training", 1)
        p = problems(root, bad)
        ok = any("README region" in x for x in p) and any("accel_track_end_training" in x for x in p)
        print("selftest: %s (%d problems found in the mutated README)" % ("ok" if ok else "FAIL", len(p)))
        return 0 if ok else 1
    p = problems(root, readme)
    for x in p:
        print("FAIL: " + x)
    print("readme: %d problem(s)" % len(p))
    return 1 if p else 0


if __name__ == "__main__":
    sys.exit(main())
