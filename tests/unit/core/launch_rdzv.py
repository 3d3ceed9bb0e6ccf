"""`accel launch` across "nodes" with different process counts (issue 30 item 9): several launchers on this host, one
per node rank, meet through the authenticated rendezvous, and their workers (launch_child rdzv: prints its torchrun
variables, then all-gathers and all-reduces over accel's host group) get the ranks torchrun would give them. The
expected table is written by hand from torchrun's rule (agent/server/api.py, _assign_worker_ranks: a node's workers
are [offset, offset + local_world_size), offset = the sum of the local world sizes of the nodes of lower group rank)
and, where torch is installed ($ACCEL_REFERENCE_PYTHON or python3), checked against torchrun's own code run for the
same counts. Then the bad cases: a node that never arrives (every launcher exits non-zero naming it, by the
deadline), a launcher with a wrong secret (refused, named), settings that differ between nodes (named), a node count
that differs, a node rank given twice — and in none of them does any worker start.
usage: launch_rdzv.py ACCEL_EXE LAUNCH_CHILD_EXE"""
import os
import socket
import subprocess
import sys
import tempfile
import time

ACCEL, CHILD = sys.argv[1], sys.argv[2]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def by_hand(counts):
    """torchrun's rule, long-hand: RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE GROUP_RANK GROUP_WORLD_SIZE ROLE_RANK
    ROLE_WORLD_SIZE for every worker, in rank order (one role: role ranks are the global ranks)."""
    rows, world = [], sum(counts)
    for g, n in enumerate(counts):
        offset = sum(counts[:g])
        for local in range(n):
            rows.append((offset + local, local, world, n, g, len(counts), offset + local, world))
    return rows


TORCH_REF = r'''
import sys, threading
from torch.distributed import HashStore
from torch.distributed.elastic.agent.server.api import SimpleElasticAgent, WorkerSpec
counts = [int(x) for x in sys.argv[1].split(",")]
store, out = HashStore(), {}
class Agent:  # torchrun's agent: only what _assign_worker_ranks uses
    _share_and_gather = SimpleElasticAgent._share_and_gather
    _get_ranks = SimpleElasticAgent._get_ranks
def node(g):  # one thread per node's agent, meeting in the store as torchrun's agents do
    spec = WorkerSpec(role="default", local_world_size=counts[g], rdzv_handler=None, entrypoint="x")
    out[g] = SimpleElasticAgent._assign_worker_ranks(Agent(), store, g, len(counts), spec)
ts = [threading.Thread(target=node, args=(g,)) for g in range(len(counts))]
[t.start() for t in ts]; [t.join(60) for t in ts]
for g in range(len(counts)):
    for w in out[g]:
        print(w.global_rank, w.local_rank, w.world_size, counts[g], g, len(counts), w.role_rank, w.role_world_size)
'''


def by_torchrun(counts):
    """torchrun's own rank assignment for these counts, or None when torch is not installed."""
    for py in (os.environ.get("ACCEL_REFERENCE_PYTHON"), "python3"):
        if not py:
            continue
        try:
            r = subprocess.run([py, "-c", TORCH_REF, ",".join(map(str, counts))], capture_output=True, text=True,
                               timeout=120)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if r.returncode == 0:
            return sorted(tuple(int(x) for x in line.split()) for line in r.stdout.split("\n") if line.strip())
    return None


def launch(counts, order, extra=None, env_for=None, timeout=60, mode="rdzv", nnodes=None, node_ranks=None):
    """Starts one `accel launch` per node (in `order`), waits for all; [(rc, output)] by position."""
    port, procs, outs = free_port(), {}, {}
    tmp = tempfile.mkdtemp()
    node_ranks = node_ranks or list(range(len(counts)))
    for i in order:
        env = dict(os.environ)
        for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_RUN_ID", "ACCEL_RUN_ID", "ACCEL_STORE_SECRET",
                  "HF_HOME"):
            env.pop(k, None)
        env["HF_HOME"] = tmp  # never the user's default config
        if env_for:
            env.update(env_for(i))
        args = [ACCEL, "launch", "--nnodes", str(nnodes[i] if nnodes else len(counts)), "--node-rank",
                str(node_ranks[i]), "--master-addr", "127.0.0.1", "--master-port", str(port), "-n",
                str(counts[i])] + (extra(i) if extra else []) + ["--", CHILD, mode]
        outs[i] = open(os.path.join(tmp, "node%d.out" % i), "w+")
        procs[i] = subprocess.Popen(args, stdout=outs[i], stderr=subprocess.STDOUT, env=env)
        time.sleep(0.2)  # arrival order differs from node order
    res = {}
    t_end = time.time() + timeout
    for i in order:
        try:
            rc = procs[i].wait(max(1, t_end - time.time()))
        except subprocess.TimeoutExpired:
            procs[i].kill()
            rc = "hung"
        outs[i].seek(0)
        res[i] = (rc, outs[i].read())
        outs[i].close()
    return [res[i] for i in range(len(counts))]


def env_rows(results):
    rows = []
    for _, out in results:
        rows += [tuple(int(x) for x in line.split()[1:]) for line in out.split("\n") if line.startswith("env: ")]
    return sorted(rows)


# 1. 1 + 2 + 3 processes, the launchers arriving last node first; then 3 + 1 + 2 with a shared secret (the keyed
#    admission) arriving in node order
for counts, order, secret in (([1, 2, 3], [2, 1, 0], None), ([3, 1, 2], [0, 1, 2], "a-shared-node-secret")):
    want = by_hand(counts)
    ref = by_torchrun(counts)
    if ref is None:
        print("note: torch is not installed: the hand-written table alone is the reference")
    else:
        check(ref == want, "torchrun's own assignment %s equals the hand-written one %s" % (ref, want))
    res = launch(counts, order, env_for=(lambda i: {"ACCEL_STORE_SECRET": secret}) if secret else None)
    world = sum(counts)
    ok_lines = sum(out.count("of %d: ok (bad=0)" % world) for _, out in res)
    check(all(rc == 0 for rc, _ in res) and ok_lines == world,
          "counts %s: every node exits 0 and every worker's collectives agree: %s" % (counts, res))
    check(env_rows(res) == want,
          "counts %s: the workers' variables %s are torchrun's %s" % (counts, env_rows(res), want))


def refused(res, who, pattern, what):
    import re
    for i in who:
        rc, out = res[i]
        check(rc not in (0, "hung") and re.search(pattern, out) is not None and "env: " not in out,
              "%s: node %d exits non-zero naming it (/%s/), no worker started: rc %s: %s" % (what, i, pattern, rc, out))


# 2. a node that never arrives: node 2 of 3 is not started; the others give up at the deadline naming it
t0 = time.time()
res = launch([1, 1], [1, 0], extra=lambda i: ["--rdzv-timeout", "3"], nnodes=[3, 3])
check(time.time() - t0 < 30, "the missing node is noticed by the deadline (%.1f s)" % (time.time() - t0))
refused(res, [0, 1], r"node\(s\) 2 did not connect within 3\.0 s", "node 2 never arrives")
#    node 0 never arrives: nodes 1 and 2 give up naming node 0
res = launch([1, 1], [0, 1], extra=lambda i: ["--rdzv-timeout", "3"], nnodes=[3, 3], node_ranks=[1, 2])
refused(res, [0, 1], r"node 0 never answered", "node 0 never arrives")

# 3. a launcher with a wrong secret is refused and says so; the others name it as the node that did not come
res = launch([1, 1, 1], [0, 1, 2], extra=lambda i: ["--rdzv-timeout", "4"],
             env_for=lambda i: {"ACCEL_STORE_SECRET": "the-job-secret" if i < 2 else "not-the-job-secret"})
refused(res, [2], r"not admitted: wrong secret", "wrong secret (the refused launcher)")
refused(res, [0, 1], r"node\(s\) 2 did not connect.*wrong secret", "wrong secret (the others)")

# 4. settings that differ between nodes: every launcher names the node and the setting
res = launch([2, 1, 1], [0, 1, 2], extra=lambda i: ["--mixed-precision", "bf16"] if i == 1 else [])
refused(res, [0, 1, 2], r"node 1 has --mixed-precision bf16 and node 0 has unset", "--mixed-precision differs")
res = launch([1, 1], [0, 1], extra=lambda i: ["--max-restarts", str(i)])
refused(res, [0, 1], r"node 1 has --max-restarts 1 and node 0 has 0", "--max-restarts differs")
#    another node count: refused by node 0, which then names the node missing
res = launch([1, 1], [0, 1], extra=lambda i: ["--rdzv-timeout", "3"], nnodes=[2, 3])
refused(res, [1], r"it expects 3 nodes, this meeting has 2", "--nnodes differs (the refused launcher)")
refused(res, [0], r"node\(s\) 1 did not connect.*it expects 3 nodes", "--nnodes differs (node 0)")
#    a node rank given twice: the second is refused; node 2 is then missing
res = launch([1, 1, 1], [0, 1, 2], extra=lambda i: ["--rdzv-timeout", "3"], node_ranks=[0, 1, 1])
refused(res, [2], r"node 1 has already joined", "node rank 1 twice (the second)")
refused(res, [0, 1], r"node\(s\) 2 did not connect", "node rank 1 twice (the others)")

print("launch-rdzv: %d failure(s)" % len(failures))
sys.exit(1 if failures else 0)
