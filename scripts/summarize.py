"""Prints meson's test results per suite and the closing 'N passed, N failed' line."""
import json, sys, collections
per = collections.defaultdict(lambda: collections.Counter())
tot = collections.Counter()
for line in open(sys.argv[1]):
    t = json.loads(line)
    res = t["result"]
    kind = "passed" if res == "OK" else "skipped" if res == "SKIP" else "failed"
    tot[kind] += 1
    for s in t.get("suite", []):
        s = s.split(":")[-1]
        per[s][kind] += 1
for s in sorted(per):
    c = per[s]
    print(f"  suite {s:12s} {c['passed']:4d} passed {c['failed']:3d} failed {c['skipped']:3d} skipped")
print(f"tests: {tot['passed']} passed, {tot['failed']} failed, {tot['skipped']} skipped")
