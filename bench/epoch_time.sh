#!/usr/bin/env bash
# Times one training epoch (forward + backward + Adam step; median over epochs) of 2-layer
# GCN, GraphSAGE-mean (hidden 128) and GAT (4 heads x 32) on one process, on the planted-
# partition graph with 200k nodes, average degree 20 and 128 features. Prints a Markdown
# table. Usage: bench/epoch_time.sh [build-dir] [epochs]   (defaults: build 5)
set -euo pipefail
build=${1:-build}
epochs=${2:-5}
dataset="planted:nodes=200000,degree=20,features=128"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "| model | epoch seconds (median of $epochs) | peak memory MiB |"
echo "|---|---:|---:|"
for model in gcn sage gat; do
  args=(--hidden 128)
  [[ $model == gat ]] && args=(--hidden 32 --heads 4)
  "$build/tools/sar-train" --dataset "$dataset" --model "$model" "${args[@]}" \
    --epochs "$epochs" --patience 0 --quiet --metrics-out "$out/$model.json" 2>/dev/null
  python3 -c "import json,sys; m=json.load(open(sys.argv[1])); print(f\"| {sys.argv[2]} | {m['epoch_seconds_median']:.3f} | {m['peak_memory_bytes']/2**20:.0f} |\")" "$out/$model.json" "$model"
done
