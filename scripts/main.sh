#!/usr/bin/env bash
# The main job on a fresh machine: installs, builds, creates the built-in planted-partition
# graph, partitions it with METIS into 2 parts and trains on it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
out=build/main-job
mkdir -p "$out"
./build/examples/sar-partition --dataset planted --parts 2 --method metis --out "$out/planted-2"
./build/examples/sar-train --dataset planted --model gcn --epochs 100 --metrics-out "$out/metrics.json"
echo "metrics written to $out/metrics.json"
