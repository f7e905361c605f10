#!/usr/bin/env bash
# A/B epoch times of two builds (e.g. before and after a change to the exchange engine):
# GCN, SAGE-mean (hidden 128) and GAT (4 heads x 32) on the planted graph (nodes N, degree 20,
# 128 features), on one process and on 2 MPI ranks (sequential schedule, METIS parts), runs of
# the two builds alternated `pairs` times. Prints one Markdown row per (model, ranks, build)
# with the median over runs of each run's median epoch.
# Usage: bench/engine_ab.sh BUILD_A BUILD_B [nodes=100000] [epochs=5] [pairs=2]
set -euo pipefail
a=$1 b=$2 nodes=${3:-100000} epochs=${4:-5} pairs=${5:-2}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
dataset="planted:nodes=$nodes,degree=20,features=128"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$a/tools/sar-partition" --dataset "$dataset" --parts 2 --method metis --out "$out/p2" >/dev/null
echo "| model | ranks | build | epoch seconds (median) | runs |"
echo "|---|---:|---|---:|---|"
for model in gcn sage gat; do
  args=(--hidden 128)
  [[ $model == gat ]] && args=(--hidden 32 --heads 4)
  for ranks in 1 2; do
    for ((k = 0; k < pairs; ++k)); do
      for side in a b; do
        build=${!side}
        if [[ $ranks == 1 ]]; then
          "$build/tools/sar-train" --dataset "$dataset" --model $model "${args[@]}" \
            --epochs $epochs --patience 0 --quiet --threads 2 --metrics-out "$out/$model-$ranks-$side-$k.json" >/dev/null 2>&1
        else
          mpirun -np 2 --oversubscribe "$build/tools/sar-train" --partitions "$out/p2" --model $model \
            "${args[@]}" --epochs $epochs --patience 0 --quiet --threads 1 \
            --metrics-out "$out/$model-$ranks-$side-$k.json" >/dev/null 2>&1
        fi
      done
    done
    for side in a b; do
      python3 - "$out" $model $ranks $side $pairs "${!side}" <<'PY'
import json, statistics, sys
out, model, ranks, side, pairs, build = sys.argv[1:]
runs = [json.load(open(f"{out}/{model}-{ranks}-{side}-{k}.json"))["epoch_seconds_median"] for k in range(int(pairs))]
print(f"| {model} | {ranks} | {build} | {statistics.median(runs):.4f} | {', '.join(f'{r:.4f}' for r in runs)} |")
PY
    done
  done
done
