#!/usr/bin/env python3
"""Mean and standard deviation of sar-train's test accuracy (at the best validation epoch)
over several seeds, on the public Planetoid splits in ../shared/data, with the papers'
hyper-parameters (sar-train's defaults per model).

usage: bench/accuracy.py [--build build] [--data ../shared/data] [--seeds 10]
                         [--runs gcn:cora,gcn:citeseer,gat:cora,gat:citeseer] [--out FILE.json]
"""
import argparse, json, os, statistics, subprocess, sys, tempfile, time

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--build", default="build")
parser.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data"))
parser.add_argument("--seeds", type=int, default=10)
parser.add_argument("--runs", default="gcn:cora,gcn:citeseer,gat:cora,gat:citeseer")
parser.add_argument("--threads", type=int, default=0)
parser.add_argument("--out", default="")
args = parser.parse_args()

summary = []
for run in args.runs.split(","):
    model, dataset = run.split(":")
    accs, epochs, seconds = [], [], []
    for seed in range(args.seeds):
        with tempfile.NamedTemporaryFile(suffix=".json") as metrics:
            cmd = [os.path.join(args.build, "examples", "sar-train"), "--dataset",
                   os.path.join(args.data, dataset), "--model", model, "--seed", str(seed),
                   "--threads", str(args.threads), "--quiet", "--metrics-out", metrics.name]
            start = time.time()
            subprocess.run(cmd, check=True, stderr=subprocess.DEVNULL)
            m = json.load(open(metrics.name))
        accs.append(100 * m["test_acc"])
        epochs.append(m["epochs"])
        seconds.append(time.time() - start)
        print(f"{model} {dataset} seed {seed}: test {accs[-1]:.1f} (best epoch {m['best_epoch']}, "
              f"{m['epochs']} epochs, {seconds[-1]:.0f} s)", flush=True)
    row = {"model": model, "dataset": dataset, "seeds": args.seeds,
           "mean": statistics.mean(accs), "std": statistics.stdev(accs) if len(accs) > 1 else 0.0,
           "runs": accs, "command": " ".join(cmd[:7] + ["--seed", "S"])}
    summary.append(row)
    print(f"== {model} {dataset}: {row['mean']:.2f} +- {row['std']:.2f} over {args.seeds} seeds", flush=True)

if args.out:
    json.dump(summary, open(args.out, "w"), indent=2)
print("| model | dataset | mean test acc (%) | std | seeds |")
print("|---|---|---:|---:|---:|")
for r in summary:
    print(f"| {r['model']} | {r['dataset']} | {r['mean']:.2f} | {r['std']:.2f} | {r['seeds']} |")
