#!/usr/bin/env bash
# The main job on a fresh machine: installs what is missing, builds only sar-partition and
# sar-train, generates the built-in planted-partition graph (no download), partitions it with
# METIS into 2 parts, and trains a 2-layer GCN on 2 MPI ranks with the sequential (SAR)
# schedule, printing per-epoch progress; then trains a plain MLP (no graph) with the same
# settings as the baseline the GCN has to beat, and plots both runs' losses and accuracies.
# Extra arguments go to the GCN's sar-train (e.g. --model gat, --epochs 50, --halo-bits 1).
# Outputs in build/main-job/: metrics.json, gnn.csv, mlp-metrics.json, mlp.csv, training.png.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --plot
[[ -f build/build.ninja ]] || meson setup build --buildtype=release
echo "sar: building sar-partition and sar-train (bash scripts/test.sh builds everything) ..."
ninja -C build tools/sar-partition tools/sar-train
if [[ $(id -u) -eq 0 ]]; then  # Open MPI refuses root unless told
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
out=build/main-job
mkdir -p "$out"
# 20 000 nodes in 8 classes; an edge stays inside its class with probability 0.4 and a node's
# features are its class centroid under noise 3x its spread: a node alone says little, its
# neighbourhood more (bench/RESULTS.md §15 has the accuracies of GCN and MLP).
graph=planted:nodes=20000,classes=8,degree=6,homophily=0.4,noise=3
./build/tools/sar-partition --dataset "$graph" --parts 2 --method metis --out "$out/planted-2"
train=(mpirun -np 2 --oversubscribe ./build/tools/sar-train --partitions "$out/planted-2"
       --schedule sequential --epochs 200)
echo "sar: training a GCN on 2 ranks ..."
"${train[@]}" --model gcn --metrics-out "$out/metrics.json" --log-csv "$out/gnn.csv" "$@"
echo "sar: training the baseline, an MLP (features only, no graph), on 2 ranks ..."
"${train[@]}" --model mlp --quiet --metrics-out "$out/mlp-metrics.json" --log-csv "$out/mlp.csv"
model=$(python3 - "$out/metrics.json" "$out/mlp-metrics.json" <<'PY'
import json, sys
gnn, mlp = (json.load(open(path)) for path in sys.argv[1:])
def accuracy(m):
    return "n/a" if m["test_acc"] is None else f"{m['test_acc']:.3f}"
print(f"test accuracy: {gnn['model']} {accuracy(gnn)}, mlp {accuracy(mlp)} (the graph's worth)",
      file=sys.stderr)
print(gnn["model"])
PY
)
# Debian's python3 (python3-matplotlib), whatever else is first on PATH.
/usr/bin/python3 scripts/plot_training.py "$out/training.png" "$model=$out/gnn.csv" "mlp=$out/mlp.csv"
echo "metrics: $out/metrics.json"
echo "plot:    $out/training.png"
