#!/usr/bin/env bash
# Epoch time, bytes and accuracy of the low-bit / stale halo exchange on a REAL slow link:
# every run is 4 MPI ranks inside a private network namespace whose loopback is rate-limited
# with tc (token bucket), MPI forced onto TCP over that loopback. For each link rate, sar-train
# runs GCN (3 layers, hidden 128, no dropout on the features) on the planted graph under
#   fp32 sequential         today's exchange
#   1-bit (sync)            --halo-bits 1 --gradient-bits 1
#   fp32 stale S=5          --staleness 5
#   1-bit + stale S=5       both
# each with the progress thread polling every P microseconds for every P in $PROGRESS_US
# (default "0 1000"; 0: no thread, transfers move only inside MPI calls). Evaluation runs
# after the last epoch only. Stale exchanges also run with their transfers paced in chunks of K
# KiB for every K in $PACE_KIB (default "0": unpaced; K > 0 runs only with P > 0, the thread
# that posts the chunks). Prints one Markdown row per (rate, exchange, P, K): median epoch
# seconds, halo MiB sent per epoch (all ranks), test accuracy. Needs root (unshare -n, tc).
# Usage: bench/low_bit_link.sh BUILD [nodes=200000] [epochs=6] [rates="none 1gbit 200mbit"] [OUT.jsonl]
#        (EXCHANGES="fp32 sequential|1-bit sync" selects exchanges by name, '|'-separated;
#         MPIRUN_ARGS adds options to mpirun, e.g. "--mca btl_tcp_sndbuf 65536")
set -euo pipefail
build=$(realpath "$1") nodes=${2:-200000} epochs=${3:-6} rates=${4:-none 1gbit 200mbit} out=${5:-}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
dataset="planted:nodes=$nodes,degree=20,features=128"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$build/tools/sar-partition" --dataset "$dataset" --parts 4 --method metis --out "$work/p4" >/dev/null
declare -A exchanges=(
  ["fp32 sequential"]="--halo-bits 32 --gradient-bits 32 --staleness 1"
  ["1-bit sync"]="--halo-bits 1 --gradient-bits 1 --staleness 1"
  ["fp32 stale S=5"]="--halo-bits 32 --gradient-bits 32 --staleness 5"
  ["1-bit + stale S=5"]="--halo-bits 1 --gradient-bits 1 --staleness 5"
)
order=("fp32 sequential" "1-bit sync" "fp32 stale S=5" "1-bit + stale S=5")
[[ -n ${EXCHANGES:-} ]] && IFS='|' read -r -a order <<< "$EXCHANGES"
echo "| link | exchange | progress us | pace KiB | epoch seconds (median) | halo MiB per epoch | test accuracy |"
echo "|---|---|---:|---:|---:|---:|---:|"
for rate in $rates; do
  for name in "${order[@]}"; do
   for progress in ${PROGRESS_US:-0 1000}; do
   for pace in ${PACE_KIB:-0}; do
    [[ $pace != 0 && ( $progress == 0 || $name != *stale* ) ]] && continue
    metrics="$work/m.json"
    shaping="true"
    [[ $rate != none ]] && shaping="tc qdisc add dev lo root tbf rate $rate burst 256kb latency 50ms"
    # shellcheck disable=SC2086
    unshare -n bash -c "ip link set lo up && $shaping && mpirun -np 4 --oversubscribe \
      --mca btl self,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo ${MPIRUN_ARGS:-} \
      '$build/tools/sar-train' --partitions '$work/p4' --model gcn --layers 3 --hidden 128 \
      --input-dropout 0 --epochs $epochs --patience 0 --threads 1 --quiet \
      --eval-every $epochs --progress-us $progress --pace-kib $pace \
      ${exchanges[$name]} --metrics-out '$metrics'" >/dev/null 2>"$work/err" ||
      { cat "$work/err" >&2; exit 1; }
    python3 - "$metrics" "$rate" "$name" "$progress" "$pace" "$out" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
rate, name, progress, pace, out = sys.argv[2:7]
halo = (m["halo_feature_bytes_per_epoch"] + m["halo_gradient_bytes_per_epoch"]) / 2**20
print(f"| {rate} | {name} | {progress} | {pace} | {m['epoch_seconds_median']:.3f} | {halo:.1f} | "
      f"{m['test_acc']:.4f} |", flush=True)
if out:
    with open(out, "a") as f:
        f.write(json.dumps({"rate": rate, "exchange": name, "progress_us": int(progress),
                            "pace_kib": int(pace), **m}) + "\n")
PY
   done
   done
  done
done
