#!/usr/bin/env bash
# Mesh surrogates against the PyTorch peer (bench/torch_mesh_peer.py, the same MeshGraphNet in
# plain PyTorch) on a generated wave dataset (sar-surrogate generate: 40 training, 2 validation
# and 8 test trajectories of 60 steps, each its own mesh of about 315 nodes around a random
# obstacle); 2 threads each, one after the other (bench/RESULTS.md §57). Needs Debian's
# python3-torch.
#   quality: latent 64, 6 steps, 6000 training steps of 2 meshes, the same settings for both;
#            the test one-step and rollout RMSEs next to persistence's
#   speed:   MeshGraphNets' size (latent 128, 15 steps), 2 meshes per step, on the training
#            trajectories only (no evaluation): the median training step and the peak memory
#   usage: bash bench/surrogate_vs_torch.sh [OUT_DIR] [QUALITY_STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench/out/surrogate}
steps=${2:-6000}
mkdir -p "$out"
data="$out/waves"
if [ ! -f "$data/meta.json" ]; then
  build/tools/sar-surrogate generate --out "$data" --train 40 --valid 2 --test 8 --steps 60 \
    --cells-across 12 --seed 1
fi
speed="$out/speed"  # the training trajectories alone
mkdir -p "$speed"
cp "$data/meta.json" "$speed/"
ln -sfn ../waves/train "$speed/train"

quality=(--dataset "$data" --steps "$steps" --normaliser-steps 100 --batch-meshes 2
         --hidden 64 --layers 6 --lr 2e-3 --lr-decay 0.05 --noise 0.003 --threads 2
         --log-every 1000)
build/tools/sar-surrogate train "${quality[@]}" --metrics-out "$out/sar.json" 2>"$out/sar.log"
/usr/bin/python3 bench/torch_mesh_peer.py "${quality[@]}" --metrics-out "$out/torch.json" \
  2>"$out/torch.log"
full=(--dataset "$speed" --normaliser-steps 10 --batch-meshes 2 --hidden 128 --layers 15
      --threads 2)
build/tools/sar-surrogate train "${full[@]}" --steps 60 --log-every 0 \
  --metrics-out "$out/speed-sar.json" 2>/dev/null
/usr/bin/python3 bench/torch_mesh_peer.py "${full[@]}" --steps 40 \
  --metrics-out "$out/speed-torch.json"

python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
runs = {p: json.load(open(f"{out}/{p}.json")) for p in ("sar", "torch", "speed-sar", "speed-torch")}
horizons = sorted(int(k.rsplit("_", 1)[1]) for k in runs["sar"] if k.startswith("test_rollout_rmse_"))
print(f"{'test RMSE':24s} {'sar':>8s} {'pytorch':>8s} {'persistence':>12s} {'sar/pytorch':>12s}")
for key in ["one_step_rmse"] + [f"rollout_rmse_{h}" for h in horizons]:
    s, t = runs["sar"]["test_" + key], runs["torch"]["test_" + key]
    p = runs["sar"]["test_persistence_" + key]
    print(f"{key:24s} {s:8.4f} {t:8.4f} {p:12.4f} {s / t:12.2f}")
for name in ("", "speed-"):
    s, t = runs[name + "sar"], runs[name + "torch"]
    label = "latent 128, 15 steps" if name else "latent 64, 6 steps"
    print(f"{label}: median step sar {s['step_seconds_median']:.4f} s, pytorch "
          f"{t['step_seconds_median']:.4f} s ({t['step_seconds_median'] / s['step_seconds_median']:.1f}x);"
          f" peak memory {s['peak_memory_bytes'] / 2**20:.0f} vs {t['peak_memory_bytes'] / 2**20:.0f}"
          f" MiB ({s['peak_memory_bytes'] / t['peak_memory_bytes']:.2f})")
PY
