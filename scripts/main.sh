#!/usr/bin/env bash
# The main job on a fresh machine: installs, builds, creates the built-in planted-partition
# graph, partitions it with METIS into 2 parts, and trains a GCN on 2 MPI ranks with the
# sequential (SAR) schedule, printing per-epoch progress. Extra arguments go to sar-train.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
if [[ $(id -u) -eq 0 ]]; then  # Open MPI refuses root unless told
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
out=build/main-job
mkdir -p "$out"
./build/examples/sar-partition --dataset planted --parts 2 --method metis --out "$out/planted-2"
mpirun -np 2 --oversubscribe ./build/examples/sar-train --partitions "$out/planted-2" \
  --model gcn --hidden 64 --epochs 100 --schedule sequential --metrics-out "$out/metrics.json" "$@"
echo "metrics: $out/metrics.json"
