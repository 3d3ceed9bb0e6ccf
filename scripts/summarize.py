"""Prints meson's test results per suite, why each skipped test skipped (its last line of output, grouped), and the
closing 'N passed, N failed' line. meson's testlog.json names a test 'project:suiteA+suiteB / name'."""
import collections
import json
import sys

per = collections.defaultdict(collections.Counter)
tot = collections.Counter()
why = collections.defaultdict(list)  # reason -> skipped tests


def reason(t):
    """The test's last non-empty line of output (stdout, else stderr): every skip in the tree prints why."""
    for stream in ("stdout", "stderr"):
        lines = [ln.strip() for ln in (t.get(stream) or "").splitlines() if ln.strip()]
        if lines:
            return lines[-1][:160]
    return "(no reason printed)"


for line in open(sys.argv[1]):
    if not line.strip():
        continue
    t = json.loads(line)
    res = t["result"]
    kind = "passed" if res == "OK" else "skipped" if res == "SKIP" else "failed"
    tot[kind] += 1
    if kind == "skipped":
        why[reason(t)].append(t["name"].split(" / ")[-1])
    suites = t["name"].split(" / ")[0].split(":", 1)[-1].split("+")
    for s in suites:
        per[s][kind] += 1
for s in sorted(per):
    c = per[s]
    print(f"  suite {s:12s} {c['passed']:4d} passed {c['failed']:3d} failed {c['skipped']:3d} skipped")
for r in sorted(why, key=lambda r: -len(why[r])):
    names = why[r]
    shown = ", ".join(names[:8]) + (f", ... ({len(names) - 8} more)" if len(names) > 8 else "")
    print(f"  skipped {len(names):3d}: {r} -- {shown}")
print(f"tests: {tot['passed']} passed, {tot['failed']} failed, {tot['skipped']} skipped")
