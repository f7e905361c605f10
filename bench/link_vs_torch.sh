#!/usr/bin/env bash
# Link prediction against the PyTorch peer (bench/torch_link_peer.py) on a Cora split:
# GCN and GraphSAGE with a dot decoder, 200 epochs, seeds 0 1 2, 2 threads each; prints the
# means over the seeds (bench/RESULTS.md §50). EVAL=every (default): the test figures at the
# best validation Hits@50; EVAL=last: at the last epoch (both programs evaluate only then).
# Needs Debian's python3-torch.
#   usage: bash bench/link_vs_torch.sh [OUT_DIR]   (default bench/out/link)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench/out/link}
mkdir -p "$out"
links="$out/cora-links"
[ -d "$links" ] || build/tools/sar-convert --dataset ../shared/data/cora --split-edges 0.05,0.10 \
  --per-source-negatives 100 --seed 3 --sparse-features off --out "$links" >/dev/null
evaluate=()
[ "${EVAL:-every}" = last ] && evaluate=(--eval-every 1000)
for model in gcn sage; do
  for seed in 0 1 2; do
    common=(--dataset "$links" --model "$model" --epochs 200 --seed "$seed" --threads 2
            "${evaluate[@]}")
    build/tools/sar-train --task link --quiet "${common[@]}" \
      --metrics-out "$out/sar-$model-$seed.json" >/dev/null 2>&1
    /usr/bin/python3 bench/torch_link_peer.py "${common[@]}" \
      --metrics-out "$out/torch-$model-$seed.json" >/dev/null
  done
done
python3 - "$out" <<'PY'
import json, statistics, sys
out = sys.argv[1]
for model in ("gcn", "sage"):
    for who in ("sar", "torch"):
        runs = [json.load(open(f"{out}/{who}-{model}-{s}.json")) for s in range(3)]
        mean = lambda k: statistics.mean(r[k] for r in runs)
        print(json.dumps({"model": model, "who": who,
                          **{k: round(mean(k), 4)
                             for k in ("test_auc", "test_hits@50", "test_mrr")},
                          "epoch_ms": round(1000 * mean("epoch_seconds_median"), 2),
                          "peak_mib": round(mean("peak_memory_bytes") / 2**20, 1)}))
PY
