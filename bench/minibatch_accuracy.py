#!/usr/bin/env python3
"""Test accuracy (at the best validation epoch) of minibatch training against full-batch
training on one process: Cora and CiteSeer (public Planetoid splits), sar-train's paper
defaults, mean over seeds. Minibatch GraphSAGE (fanouts 25,10, batch 64) against full-batch
GraphSAGE; LADIES GCN (512 per layer, batch 64) against full-batch GCN. Prints one Markdown row
per (dataset, run) and writes the runs as JSON.

usage: bench/minibatch_accuracy.py [--build build] [--data ../shared/data] [--seeds 5]
        [--datasets cora,citeseer] [--out FILE.json]
"""
import argparse, json, os, statistics, subprocess, sys, tempfile

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--build", default="build")
parser.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data"))
parser.add_argument("--seeds", type=int, default=5)
parser.add_argument("--datasets", default="cora,citeseer")
parser.add_argument("--out", default="")
args = parser.parse_args()

RUNS = [  # (label, model, extra sar-train arguments, label of the full-batch reference)
    ("sage full batch", "sage", [], None),
    ("sage minibatch 64, fanouts 25,10", "sage",
     ["--minibatch", "64", "--fanouts", "25,10", "--bulk", "8"], "sage full batch"),
    ("gcn full batch", "gcn", [], None),
    ("gcn LADIES minibatch 64, 512 per layer", "gcn",
     ["--minibatch", "64", "--sampler", "ladies", "--fanouts", "512,512", "--bulk", "8"],
     "gcn full batch"),
]
train = os.path.join(args.build, "examples", "sar-train")
rows = []
with tempfile.TemporaryDirectory() as tmp:
    for dataset in args.datasets.split(","):
        for label, model, extra, reference in RUNS:
            accs, seconds = [], []
            for seed in range(args.seeds):
                metrics = os.path.join(tmp, "m.json")
                cmd = [train, "--dataset", os.path.join(args.data, dataset), "--model", model,
                       "--seed", str(seed), "--quiet", "--metrics-out", metrics] + extra
                subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                m = json.load(open(metrics))
                accs.append(100 * m["test_acc"])
                seconds.append(m["epoch_seconds_median"])
                print(f"{dataset} {label} seed {seed}: test {accs[-1]:.1f} (best epoch "
                      f"{m['best_epoch']}, epoch {seconds[-1]:.4f} s)", file=sys.stderr, flush=True)
            rows.append({"dataset": dataset, "run": label, "reference": reference,
                         "mean": statistics.mean(accs),
                         "std": statistics.stdev(accs) if len(accs) > 1 else 0.0, "runs": accs,
                         "epoch_seconds_median": statistics.median(seconds)})

print(f"| dataset | run | test accuracy (mean ± std over {args.seeds} seeds) | vs full batch | "
      "median epoch (s) |")
print("|---|---|---:|---:|---:|")
for r in rows:
    ref = next((b for b in rows if b["dataset"] == r["dataset"] and b["run"] == r["reference"]), None)
    delta = f"{r['mean'] - ref['mean']:+.2f}" if ref else ""
    print(f"| {r['dataset']} | {r['run']} | {r['mean']:.2f} ± {r['std']:.2f} | {delta} | "
          f"{r['epoch_seconds_median']:.4f} |")
if args.out:
    with open(args.out, "w") as f:
        json.dump(rows, f, indent=1)
