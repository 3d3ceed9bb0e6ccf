#!/usr/bin/env python3
"""`accel test` under a launcher: every check has exactly one verdict line on the main process, the expected ones
pass, the exit status says whether any failed. With --fault CHECK:RANK (the ACCEL_TEST_FAULT test hook) that check
must FAIL, the others still PASS, and the exit status must be non-zero; with --dir-file the checkpoint directory is a
regular file, so the checkpoint check must FAIL.

usage: check_accel_test.py ACCEL {plain|mpirun MPIRUN_SH|launch} NP [--fault CHECK:RANK] [--dir-file]"""
import os
import re
import subprocess
import sys
import tempfile

CHECKS = ["host-group", "collectives", "device-collectives", "rng", "shards", "checkpoint", "timings"]


def main():
    args = sys.argv[1:]
    accel, how = args[0], args[1]
    rest = args[2:]
    mpirun = None
    if how == "mpirun":
        mpirun, rest = rest[0], rest[1:]
    np_, rest = int(rest[0]), rest[1:]
    fault = None
    dir_file = False
    while rest:
        if rest[0] == "--fault":
            fault, rest = rest[1], rest[2:]
        elif rest[0] == "--dir-file":
            dir_file, rest = True, rest[1:]
        else:
            sys.exit("unknown argument " + rest[0])
    env = dict(os.environ)
    env.pop("ACCEL_TEST_FAULT", None)
    if fault:
        env["ACCEL_TEST_FAULT"] = fault
    tmp = tempfile.mkdtemp(prefix="accel-test-check-")
    env["TMPDIR"] = tmp
    cmd = [accel, "test"]
    if dir_file:
        blocker = os.path.join(tmp, "not-a-dir")
        open(blocker, "w").close()
        cmd += ["--dir", blocker]
    if how == "plain":
        assert np_ == 1
    elif how == "mpirun":
        cmd = [mpirun, str(np_)] + cmd
    elif how == "launch":
        cmd = [accel, "launch", "-n", str(np_), "--"] + cmd
    else:
        sys.exit("unknown launcher " + how)
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=150)
    out = p.stdout
    sys.stdout.write(out)
    sys.stderr.write(p.stderr[-4000:])
    verdicts = {}
    for line in out.splitlines():
        m = re.match(r"^(PASS|FAIL|SKIP)  (\S+)\s+(.*)$", line)
        if m:
            assert m.group(2) not in verdicts, "two verdict lines for " + m.group(2)
            verdicts[m.group(2)] = (m.group(1), m.group(3))
    assert re.search(r"^accel test: %d process(es)?, " % np_, out, re.M), "no header line for %d processes" % np_
    assert sorted(verdicts) == sorted(CHECKS), "verdict lines %s, expected %s" % (sorted(verdicts), sorted(CHECKS))
    expect = {c: "PASS" for c in CHECKS}
    expect["device-collectives"] = "SKIP"  # PASS too where a device per process exists (below)
    if how == "launch" and np_ > 1:  # the TCP store: no MPI for the data collectives
        expect["collectives"] = "SKIP"
        assert "needs MPI" in verdicts["collectives"][1], verdicts["collectives"]
    if fault:
        expect[fault.split(":")[0]] = "FAIL"
    if dir_file:
        expect["checkpoint"] = "FAIL"
        assert "Not a directory" in verdicts["checkpoint"][1], verdicts["checkpoint"]
    if verdicts["device-collectives"][0] == "PASS":  # CUDA + NCCL and a device for every process (the GPU run)
        expect["device-collectives"] = "PASS"
    for c in CHECKS:
        assert verdicts[c][0] == expect[c], "%s: %s (%s), expected %s" % (c, verdicts[c][0], verdicts[c][1], expect[c])
    m = re.match(r"slowest rank (\d+): [0-9.]+ ms .*per rank:((?: \d+=[0-9.]+)+) ms$", verdicts["timings"][1])
    assert m and 0 <= int(m.group(1)) < np_, verdicts["timings"]
    per = dict(kv.split("=") for kv in m.group(2).split())
    assert sorted(int(k) for k in per) == list(range(np_)), per
    assert max(float(v) for v in per.values()) == float(per[m.group(1)]), "the slowest rank is not the slowest"
    failed = "FAIL" in expect.values()
    assert (p.returncode != 0) == failed, "exit status %d with %s" % (p.returncode, "a FAIL" if failed else "no FAIL")
    assert not os.listdir(tmp) or dir_file, "temporary checkpoint directory left behind: %s" % os.listdir(tmp)
    print("ok")


if __name__ == "__main__":
    main()
