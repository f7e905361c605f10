#!/usr/bin/env bash
# Minibatch link prediction against full batch on a Cora split (85/5/10, 100 per-source
# negatives): GraphSAGE with a dot decoder, 100 epochs, seeds 0 1 2, 2 threads; full batch and
# --minibatch 512 (fanouts 25,10, the minibatch's edges left out of its samples), the test
# figures at the best validation Hits@50; prints the means over the seeds (bench/RESULTS.md §53).
#   usage: bash bench/link_minibatch_vs_full.sh [OUT_DIR]   (default bench/out/link-minibatch)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench/out/link-minibatch}
mkdir -p "$out"
links="$out/cora-links"
[ -d "$links" ] || build/tools/sar-convert --dataset ../shared/data/cora --split-edges 0.05,0.10 \
  --per-source-negatives 100 --seed 3 --sparse-features off --out "$links" >/dev/null
for batch in 0 512; do
  for seed in 0 1 2; do
    build/tools/sar-train --dataset "$links" --task link --model sage --epochs 100 \
      --minibatch "$batch" --seed "$seed" --threads 2 --quiet \
      --metrics-out "$out/sage-$batch-$seed.json" >/dev/null 2>&1
  done
done
python3 - "$out" <<'PY'
import json, statistics, sys
out = sys.argv[1]
for batch in (0, 512):
    runs = [json.load(open(f"{out}/sage-{batch}-{s}.json")) for s in range(3)]
    mean = lambda k: statistics.mean(r[k] for r in runs)
    print(json.dumps({"minibatch": batch,
                      **{k: round(mean(k), 4) for k in ("test_auc", "test_hits@50", "test_mrr")},
                      "hits@50_by_seed": [round(r["test_hits@50"], 4) for r in runs],
                      "epoch_ms": round(1000 * mean("epoch_seconds_median"), 1)}))
PY
