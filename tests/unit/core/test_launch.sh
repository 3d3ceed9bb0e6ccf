#!/usr/bin/env bash
# `accel launch` and `accel config` end to end: the environment the children get (checked by launch_child, which
# also forms the host group over the TCP store), config files in YAML and in the JSON `accel config --default`
# writes, command-line overrides, --tee, two "nodes" on one host, a failing rank (its exit code is propagated, the
# rank is named, the others are stopped) and SIGTERM forwarding — and after every run, no process is left behind.
# usage: test_launch.sh ACCEL_EXE LAUNCH_CHILD_EXE
set -u
accel=$1 child=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export HF_HOME="$tmp/hf" # never read the user's default config
unset OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE PMI_RANK PMI_SIZE SLURM_STEP_ID RANK WORLD_SIZE
passed=0 failed=0
ok() { passed=$((passed + 1)); }
bad() { failed=$((failed + 1)); echo "FAIL: $*"; }
check() { if eval "$1"; then ok; else bad "$2"; fi; }
# every process started with this marker in its arguments must be gone
leftovers() { pgrep -f "launch_child.*$1" >/dev/null && echo yes || echo no; }

# 1. three processes, every helper over the store
out=$("$accel" launch -n 3 -- "$child" ok 2>&1); rc=$?
check '[ $rc = 0 ]' "launch -n 3 exit $rc: $out"
check '[ "$(echo "$out" | grep -c ": ok (bad=0)")" = 3 ]' "three ranks report ok: $out"

# 2. YAML config file (Accelerate's keys; others ignored), then the JSON one `accel config --default` writes
cat > "$tmp/cfg.yaml" <<'Y'
compute_environment: LOCAL_MACHINE
distributed_type: MULTI_CPU
num_processes: 2
num_machines: 1
machine_rank: 0
mixed_precision: bf16
gradient_accumulation_steps: 4
use_cpu: true
deepspeed_config: {}
main_process_port: null
Y
out=$("$accel" launch --config-file "$tmp/cfg.yaml" -- "$child" config bf16 4 2>&1); rc=$?
if echo "$out" | grep -q "built without libyaml"; then
  # a build without libyaml (-Dyaml=disabled, or none found) refuses every config file it would read, the default too
  check '[ $rc = 2 ]' "no libyaml: --config-file must be refused with exit 2: $out"
  mkdir -p "$HF_HOME/accelerate" && cp "$tmp/cfg.yaml" "$HF_HOME/accelerate/default_config.yaml"
  out=$("$accel" launch -- "$child" config bf16 4 2>&1); rc=$?
  check '[ $rc = 2 ] && echo "$out" | grep -q "built without libyaml"' "no libyaml: the default config is refused: $out"
  rm -f "$HF_HOME/accelerate/default_config.yaml"
  noyaml=1
else
noyaml=0
check '[ $rc = 0 ] && [ "$(echo "$out" | grep -c "of 2: ok")" = 2 ]' "yaml config: $out"
out=$("$accel" launch --config-file "$tmp/cfg.yaml" -n 3 --mixed-precision fp16 -- "$child" config fp16 4 2>&1); rc=$?
check '[ $rc = 0 ] && [ "$(echo "$out" | grep -c "of 3: ok")" = 3 ]' "command line overrides the config: $out"
"$accel" config --default --mixed-precision fp16 "$tmp/basic.json" >/dev/null; rc=$?
check '[ $rc = 0 ]' "accel config --default: exit $rc"
check 'python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert d[\"mixed_precision\"]==\"fp16\" and d[\"num_processes\"]>=1 and d[\"compute_environment\"]==\"LOCAL_MACHINE\" and d[\"distributed_type\"] in (\"NO\",\"MULTI_GPU\"); assert list(d)==sorted(d)" "$tmp/basic.json"' "config --default writes Accelerate's keys, sorted: $(cat "$tmp/basic.json")"
check 'python3 -c "import yaml,json,sys; assert yaml.safe_load(open(sys.argv[1]))==json.load(open(sys.argv[1]))" "$tmp/basic.json"' "the JSON reads the same as YAML"
out=$("$accel" launch --config-file "$tmp/basic.json" -- "$child" config fp16 1 2>&1); rc=$?
check '[ $rc = 0 ] && echo "$out" | grep -q "of 1: ok"' "json config from accel config --default: $out"
before=$(md5sum < "$tmp/basic.json")
out=$("$accel" config --default "$tmp/basic.json" 2>&1); rc=$?
check '[ $rc = 0 ] && [ "$(md5sum < "$tmp/basic.json")" = "$before" ] && echo "$out" | grep -q "already exists"' "an existing config is left alone: $out"
mkdir -p "$HF_HOME/accelerate" && cp "$tmp/cfg.yaml" "$HF_HOME/accelerate/default_config.yaml"
out=$("$accel" launch -- "$child" config bf16 4 2>&1); rc=$?
check '[ $rc = 0 ] && [ "$(echo "$out" | grep -c "of 2: ok")" = 2 ]' "the default config file is read: $out"
rm -f "$HF_HOME/accelerate/default_config.yaml"
fi

# 3. usage errors: exit 2 with a message
for args in "--nnodes 2 --node-rank 2 --master-addr 127.0.0.1" "--mixed-precision fp13" "--nnodes 2" "--bogus" ""; do
  out=$("$accel" launch $args -- ${args:+"$child"} 2>&1); rc=$?
  check '[ $rc = 2 ] && [ -n "$out" ]' "usage error '$args' exit $rc: $out"
done
if [ $noyaml = 0 ]; then
printf 'num_processes: 3\nnum_machines: 2\n' > "$tmp/odd.yaml"
out=$("$accel" launch --config-file "$tmp/odd.yaml" -- "$child" ok 2>&1); rc=$?
check '[ $rc = 2 ] && echo "$out" | grep -q "not a multiple"' "num_processes not a multiple of num_machines: $out"
printf 'num_processes: [oops\n' > "$tmp/broken.yaml"
out=$("$accel" launch --config-file "$tmp/broken.yaml" -- "$child" ok 2>&1); rc=$?
check '[ $rc = 2 ] && echo "$out" | grep -q "not valid YAML"' "broken config file: $out"
fi

# 4. --tee: every line prefixed with its rank, partial last lines too
out=$("$accel" launch --tee -n 2 -- "$child" echo 2>&1); rc=$?
check '[ $rc = 0 ] && echo "$out" | grep -qx "\[rank0\]: hello from 0" && echo "$out" | grep -qx "\[rank1\]: err from 1" && echo "$out" | grep -qx "\[rank1\]: partial line without newline"' "tee: $out"

# 5. two "nodes" on this host: two launchers, world 4
port=$(python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])")
"$accel" launch --nnodes 2 --node-rank 1 --master-addr 127.0.0.1 --master-port "$port" -n 2 -- "$child" ok > "$tmp/n1.out" 2>&1 &
n1=$!
out=$("$accel" launch --nnodes 2 --node-rank 0 --master-addr 127.0.0.1 --master-port "$port" -n 2 -- "$child" ok 2>&1); rc=$?
wait $n1; rc1=$?
check '[ $rc = 0 ] && [ $rc1 = 0 ] && [ "$(cat "$tmp/n1.out"; echo "$out")" != "" ] && [ "$( (cat "$tmp/n1.out"; echo "$out") | grep -c "of 4: ok")" = 4 ]' "two nodes: $out / $(cat "$tmp/n1.out")"

# 6. a rank fails: its code comes back, it is named, the others are stopped, nothing is left
marker="fail-$$"
t0=$(date +%s)
out=$("$accel" launch -n 3 -- "$child" fail 1 7 "$marker" 2>&1); rc=$?
t1=$(date +%s)
check '[ $rc = 7 ]' "failing rank's code propagated (got $rc): $out"
check 'echo "$out" | grep -q "rank 1 (local rank 1, pid [0-9]*) exited with code 7; stopped the other 2"' "the failed rank is named: $out"
check '[ $((t1 - t0)) -lt 15 ]' "the others were stopped promptly ($((t1 - t0)) s)"
sleep 0.3
check '[ "$(leftovers "$marker")" = no ]' "no process left behind after a failure"

# 7. SIGTERM to the launcher reaches every process; exit 128+15; nothing left
marker="sleep-$$"
"$accel" launch -n 2 -- "$child" sleep "$marker" > "$tmp/sig.out" 2>&1 &
lp=$!
for i in $(seq 1 100); do [ "$(grep -c waiting "$tmp/sig.out")" = 2 ] && break; sleep 0.1; done
kill -TERM $lp
wait $lp; rc=$?
check '[ $rc = 143 ]' "SIGTERM: launcher exit $rc: $(cat "$tmp/sig.out")"
sleep 0.3
check '[ "$(leftovers "$marker")" = no ]' "no process left behind after SIGTERM"

# 8. bounds (issue 26): a config asking for more processes than a node may start is refused before any fork, with
#    --tee (its poll set is sized for 1024) and without
if [ $noyaml = 0 ]; then
for n in 1025 1048576; do
  printf 'num_processes: %s\nnum_machines: 1\n' "$n" > "$tmp/big.yaml"
  for tee in --tee ""; do
    rm -f "$tmp/forked"
    out=$("$accel" launch --config-file "$tmp/big.yaml" $tee -- sh -c "touch '$tmp/forked'" 2>&1); rc=$?
    check '[ $rc = 2 ] && [ ! -e "$tmp/forked" ] && echo "$out" | grep -q "more than the 1024"' "num_processes $n $tee: exit $rc, forked=$([ -e "$tmp/forked" ] && echo yes || echo no): $out"
  done
done
fi
out=$("$accel" launch --nnodes 65537 --node-rank 0 --master-addr 127.0.0.1 -- "$child" ok 2>&1); rc=$?
check '[ $rc = 2 ]' "--nnodes 65537 refused: $out"

# 9. the job's secret: in every process's environment, on no command line, new for every job
out=$("$accel" launch -n 2 -- "$child" secret "$tmp/s1" 2>&1); rc=$?
check '[ $rc = 0 ] && [ "$(echo "$out" | grep -c ": ok (bad=0)")" = 2 ]' "secret run 1: $out"
out=$("$accel" launch -n 2 -- "$child" secret "$tmp/s2" 2>&1); rc=$?
check '[ $rc = 0 ] && [ -s "$tmp/s1" ] && [ -s "$tmp/s2" ] && ! cmp -s "$tmp/s1" "$tmp/s2"' "a new secret per job: $out"
# two nodes share the secret their launchers were started with
port=$(python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])")
ACCEL_STORE_SECRET=shared-node-secret "$accel" launch --nnodes 2 --node-rank 1 --master-addr 127.0.0.1 --master-port "$port" -n 1 -- "$child" ok > "$tmp/n1s.out" 2>&1 &
n1=$!
out=$(ACCEL_STORE_SECRET=shared-node-secret "$accel" launch --nnodes 2 --node-rank 0 --master-addr 127.0.0.1 --master-port "$port" -n 1 -- "$child" ok 2>&1); rc=$?
wait $n1; rc1=$?
check '[ $rc = 0 ] && [ $rc1 = 0 ]' "two nodes with ACCEL_STORE_SECRET: $out / $(cat "$tmp/n1s.out")"

echo "launch: $passed passed, $failed failed"
[ $failed = 0 ]
