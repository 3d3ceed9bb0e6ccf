#!/usr/bin/env bash
# A throwaway Slurm cluster on this one machine for the project's Slurm tests: munged, slurmctld and N slurmd
# (nodes HOST, HOST2, ... all on 127.0.0.1), everything — key, config, spool, state, logs, pid files — under one
# directory; nothing under /etc is touched and the daemons are stopped by the PIDs they wrote. Run as root
# (the Debian daemons run as root here).
#   cluster.sh DIR up NODES     start (installs nothing: see scripts/install-deps.sh --slurm); waits for idle nodes
#   cluster.sh DIR down         stop every daemon started by `up`
#   cluster.sh DIR run CMD...   CMD with SLURM_CONF pointing at this cluster
# ACCEL_SLURM_PORT (default 6900): slurmctld's port; slurmd's use the next ones. MpiDefault stays Slurm's default
# (none), so a bare srun behaves as on a cluster that never set it.
set -euo pipefail
dir=$1 cmd=$2; shift 2
conf=$dir/slurm.conf
host=$(hostname -s)
port=${ACCEL_SLURM_PORT:-6900}
say() { echo "cluster: $*" >&2; }
alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
node() { if [ "$1" -eq 1 ]; then echo "$host"; else echo "$host$1"; fi; }

up() {
  local n=$1 i states=""
  mkdir -p "$dir"/{munge,state,log,run}
  chmod 755 "$dir/munge"
  for i in $(seq "$n"); do mkdir -p "$dir/spool/$(node "$i")"; done
  [ -s "$dir/munge/key" ] || { head -c 1024 /dev/urandom > "$dir/munge/key"; chmod 400 "$dir/munge/key"; }
  # --force: a key and socket under a world-writable /tmp would otherwise be refused
  munged --force --key-file="$dir/munge/key" --socket="$dir/munge/socket" --pid-file="$dir/run/munged.pid" \
    --log-file="$dir/log/munged.log" --seed-file="$dir/munge/seed"
  for _ in $(seq 50); do [ -S "$dir/munge/socket" ] && break; sleep 0.1; done
  {
    echo "ClusterName=accel-test"
    echo "SlurmctldHost=$host(127.0.0.1)"
    echo "SlurmctldPort=$port"
    echo "SlurmUser=root"
    echo "SlurmdUser=root"
    echo "AuthType=auth/munge"
    echo "AuthInfo=socket=$dir/munge/socket"
    echo "CredType=cred/munge"
    echo "StateSaveLocation=$dir/state"
    echo "SlurmdSpoolDir=$dir/spool/%n"
    echo "SlurmctldPidFile=$dir/run/slurmctld.pid"
    echo "SlurmdPidFile=$dir/run/slurmd.%n.pid"
    echo "SlurmctldLogFile=$dir/log/slurmctld.log"
    echo "SlurmdLogFile=$dir/log/slurmd.%n.log"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_CPU"
    echo "MpiDefault=none"
    echo "ReturnToService=2"
    echo "SchedulerType=sched/builtin"
    echo "JobCompType=jobcomp/none"
    echo "JobAcctGatherType=jobacct_gather/none"
    echo "AccountingStorageType=accounting_storage/none"
    echo "PlugStackConfig=$dir/plugstack.conf"
    echo "KillWait=5"
    echo "InactiveLimit=0"
    for i in $(seq "$n"); do
      echo "NodeName=$(node "$i") NodeAddr=127.0.0.1 NodeHostname=$host Port=$((port + i)) CPUs=$(nproc) State=UNKNOWN"
    done
    echo "PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
  } > "$conf"
  : > "$dir/plugstack.conf"
  slurmctld -c -f "$conf"
  for _ in $(seq 100); do SLURM_CONF=$conf scontrol ping 2>/dev/null | grep -q UP && break; sleep 0.2; done
  for i in $(seq "$n"); do slurmd -f "$conf" -N "$(node "$i")"; done
  for _ in $(seq 150); do
    states=$(SLURM_CONF=$conf sinfo -h -N -o '%t' 2>/dev/null | sort -u | tr '\n' ' ' || true)
    [ "$states" = "idle " ] && return 0
    sleep 0.2
  done
  say "nodes are '$states', not idle; logs in $dir/log"
  return 1
}

down() {
  local f pid
  for f in "$dir"/run/slurmd.*.pid "$dir/run/slurmctld.pid" "$dir/run/munged.pid"; do
    [ -f "$f" ] || continue
    pid=$(cat "$f")
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$f"
  done
}

case "$cmd" in
up) up "${1:-1}" ;;
down) down ;;
run) SLURM_CONF=$conf exec "$@" ;;
*) echo "usage: cluster.sh DIR up NODES | down | run CMD..." >&2; exit 2 ;;
esac
