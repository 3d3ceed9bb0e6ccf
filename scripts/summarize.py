"""Prints meson's test results per suite and the closing 'N passed, N failed' line.
meson's testlog.json names a test 'project:suiteA+suiteB / name'."""
import collections
import json
import sys

per = collections.defaultdict(collections.Counter)
tot = collections.Counter()
for line in open(sys.argv[1]):
    t = json.loads(line)
    res = t["result"]
    kind = "passed" if res == "OK" else "skipped" if res == "SKIP" else "failed"
    tot[kind] += 1
    suites = t["name"].split(" / ")[0].split(":", 1)[-1].split("+")
    for s in suites:
        per[s][kind] += 1
for s in sorted(per):
    c = per[s]
    print(f"  suite {s:12s} {c['passed']:4d} passed {c['failed']:3d} failed {c['skipped']:3d} skipped")
print(f"tests: {tot['passed']} passed, {tot['failed']} failed, {tot['skipped']} skipped")
