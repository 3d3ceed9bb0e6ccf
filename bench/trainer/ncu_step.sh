#!/usr/bin/env bash
# Kernel-time breakdown of one GPT-2 124M training step (T=1024) of examples/gpt2/train_gpt2.cu under Nsight Compute:
# the trainer runs 4 steps, ncu measures gpu__time_duration of every kernel (clocks not locked, caches not flushed:
# as in training), and the launches of the third step — from its encoder_forward_kernel, the first launch of every
# step, to the next step's, so the optimizer's kernels count — are summed by kernel name into a table.
#   usage: bench/trainer/ncu_step.sh TRAIN_GPT2_EXE [B, default 16] [trainer options, e.g. --attention own]
#   e.g.   bash bench/trainer/ncu_step.sh build/tests/gpu/trainer/train_gpt2_for_tests 16
# Prints the table on stdout (exit 77 when ncu or a GPU is missing). Takes well under a minute on an H100/H200.
set -eu
exe=${1:?usage: ncu_step.sh TRAIN_GPT2_EXE [B] [trainer options]}
B=${2:-16}
shift $(( $# >= 2 ? 2 : 1 ))
NCU=${NCU:-$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || true)}
[ -n "$NCU" ] || { echo "ncu_step.sh: ncu (Nsight Compute) not found: set NCU=/path/to/ncu"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$exe" --gen-shard "$tmp/tok.bin" $(( 6 * B * 1025 + 1 )) 50257 > /dev/null
t0=$(date +%s)
set +e
timeout 300 "$NCU" --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
  --print-units base --print-kernel-base function --log-file "$tmp/ncu.csv" \
  "$exe" --data "$tmp/tok.bin" --batch "$B" --seq 1024 --steps 4 --print-every 0 --lr 6e-4 --warmup 2 \
  "$@" > "$tmp/trainer.out" 2>&1
rc=$?
set -e
if [ $rc = 77 ]; then cat "$tmp/trainer.out"; exit 77; fi
if [ $rc != 0 ]; then
  echo "ncu_step.sh: ncu or the trainer failed ($rc)"; tail -20 "$tmp/trainer.out"; tail -20 "$tmp/ncu.csv" 2>/dev/null
  exit 1
fi
python3 - "$tmp/ncu.csv" "$B" "$(( $(date +%s) - t0 ))" "$*" <<'PY'
import csv, sys
path, B, secs, extra = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
rows = [r for r in csv.reader(open(path)) if r]
head = next((i for i, r in enumerate(rows) if "Kernel Name" in r and "Metric Value" in r), None)
if head is None:
    sys.exit("ncu_step.sh: no kernel rows in the ncu output\n" + open(path).read()[-2000:])
h = rows[head]
id_i, name_i, metric_i, unit_i, value_i = h.index("ID"), h.index("Kernel Name"), h.index("Metric Name"), \
    h.index("Metric Unit"), h.index("Metric Value")
scale = {"ns": 1e-3, "nsecond": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6, "s": 1e6}
launches = sorted(((int(r[id_i]), r[name_i], float(r[value_i].replace(",", "")) * scale.get(r[unit_i], 1e-3))
                   for r in rows[head + 1:] if len(r) > value_i and r[metric_i] == "gpu__time_duration.sum"))
starts = [i for i, l in enumerate(launches) if l[1] == "encoder_forward_kernel"]
if len(starts) < 4:
    sys.exit("ncu_step.sh: expected 4 steps (encoder_forward_kernel launches), found %d" % len(starts))
tot, calls = {}, {}
for _, name, us in launches[starts[2]:starts[3]]:
    tot[name] = tot.get(name, 0.0) + us
    calls[name] = calls.get(name, 0) + 1
total = sum(tot.values())
print("one training step, GPT-2 124M B=%s T=1024%s: %d kernel launches, %.2f ms of kernel time (ncu, %ss)" %
      (B, (" " + extra) if extra else "", sum(calls.values()), total / 1e3, secs))
print("%8s %6s %7s  %s" % ("ms", "share", "calls", "kernel"))
for k in sorted(tot, key=tot.get, reverse=True):
    print("%8.3f %5.1f%% %7d  %s" % (tot[k] / 1e3, 100.0 * tot[k] / total, calls[k], k[:100]))
PY
