#!/usr/bin/env bash
# Full-batch GraphSAGE link prediction (dot decoder, 1 negative per positive) against the
# PyTorch peer (bench/torch_link_peer.py): the median training-epoch time and the peak memory
# on a 200k-node planted graph with dense features and on CiteSeer (bag-of-words, sparse in
# both: sar-train's --sparse-features auto, the peer's --sparse-features), each split 85/5/10
# by sar-convert --split-edges; 10 epochs, evaluated once at the end, seed 0, 2 threads
# (bench/RESULTS.md §52). Needs Debian's python3-torch.
#   usage: bash bench/link_speed_vs_torch.sh [OUT_DIR]   (default bench/out/link-speed)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench/out/link-speed}
mkdir -p "$out"
declare -A source=([planted200k]="planted:nodes=200000,degree=20,features=128"
                   [citeseer]="../shared/data/citeseer")
declare -A peer_features=([planted200k]="" [citeseer]="--sparse-features")
for name in planted200k citeseer; do
  links="$out/$name-links"
  [ -d "$links" ] || build/tools/sar-convert --dataset "${source[$name]}" \
    --split-edges 0.05,0.10 --seed 3 --sparse-features off --out "$links" >/dev/null
  common=(--dataset "$links" --model sage --epochs 10 --eval-every 1000 --seed 0 --threads 2)
  build/tools/sar-train --task link --quiet "${common[@]}" \
    --metrics-out "$out/sar-$name.json" >/dev/null 2>&1
  /usr/bin/python3 bench/torch_link_peer.py "${common[@]}" ${peer_features[$name]} \
    --metrics-out "$out/torch-$name.json" >/dev/null
done
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
for name in ("planted200k", "citeseer"):
    sar, torch = (json.load(open(f"{out}/{who}-{name}.json")) for who in ("sar", "torch"))
    print(json.dumps({"dataset": name,
                      "sar_epoch_ms": round(1000 * sar["epoch_seconds_median"], 1),
                      "torch_epoch_ms": round(1000 * torch["epoch_seconds_median"], 1),
                      "speedup": round(torch["epoch_seconds_median"] / sar["epoch_seconds_median"], 2),
                      "sar_peak_mib": round(sar["peak_memory_bytes"] / 2**20, 1),
                      "torch_peak_mib": round(torch["peak_memory_bytes"] / 2**20, 1),
                      "memory_ratio": round(sar["peak_memory_bytes"] / torch["peak_memory_bytes"], 3),
                      "sar_test_auc": round(sar["test_auc"], 4),
                      "torch_test_auc": round(torch["test_auc"], 4)}))
PY
