#!/usr/bin/env python3
"""Features stored as bf16 against fp32 (issue 36): accuracy, bytes per node, rank counts.

Three parts, each printing a Markdown table (bench/RESULTS.md §31):
  accuracy  sar-train on Cora and CiteSeer (../shared/data; dense features) and the planted
            default graph, GCN and GAT with their paper settings, seeds 1..5, --storage fp32
            and bf16: mean test accuracy.
  memory    sar-train on a planted .npy graph (written once by sar-convert; degree 20, 128
            features), GCN hidden 128, 2 epochs, one process of 1 thread: the peak per node,
            and sar-plan's plan of the same run.
  ranks     sar-train on Cora for 30 epochs on 1 process and on 2 and 4 ranks (--partition
            ptscotch), fp32 and bf16: the largest relative difference of the training losses
            from the 1-process run's.

  /usr/bin/python3 bench/bf16_storage.py --out /tmp/bf16
  /usr/bin/python3 bench/bf16_storage.py --parts memory --nodes 200000 1000000
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)
data = os.path.join(os.path.dirname(root), "shared", "data")
parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--build", default=os.path.join(root, "build"), help="build directory")
parser.add_argument("--out", default=os.path.join(here, "out", "bf16"), help="scratch/results")
parser.add_argument("--parts", nargs="+", default=["accuracy", "memory", "ranks"])
parser.add_argument("--datasets", nargs="+", default=["cora", "citeseer", "planted"],
                    help="cora, citeseer (../shared/data), planted (sar-train's default graph)")
parser.add_argument("--models", nargs="+", default=["gcn", "gat"])
parser.add_argument("--seeds", type=int, default=5)
parser.add_argument("--nodes", type=int, nargs="+", default=[1000000], help="planted sizes")
parser.add_argument("--threads", type=int, default=2, help="threads (accuracy part)")
args = parser.parse_args()

env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
os.makedirs(args.out, exist_ok=True)
program = lambda name: os.path.join(args.build, "examples", name)


def run(command, capture=False):
    print("+", " ".join(command), flush=True)
    done = subprocess.run(command, env=env, capture_output=capture, text=True)
    if done.returncode:
        sys.exit(f"failed: {' '.join(command)}\n{done.stderr if capture else ''}")
    return done.stdout


def train(name, options, ranks=1):
    """sar-train with `options` (and its metrics file); returns the metrics."""
    metrics = os.path.join(args.out, name + ".json")
    launcher = ["mpirun", "-np", str(ranks), "--oversubscribe"] if ranks > 1 else []
    run([*launcher, program("sar-train"), *options, "--quiet", "--metrics-out", metrics])
    with open(metrics) as f:
        return json.load(f)


if "accuracy" in args.parts:
    rows = []
    for dataset in args.datasets:
        for model in args.models:
            scores = {}
            for storage in ("fp32", "bf16"):
                scores[storage] = [
                    train(f"acc-{dataset}-{model}-{storage}-{seed}",
                          ["--dataset", dataset if dataset == "planted" else
                           os.path.join(data, dataset), "--model", model,
                           "--sparse-features", "off", "--storage", storage, "--seed", str(seed),
                           "--threads", str(args.threads)])["test_acc"] * 100
                    for seed in range(1, args.seeds + 1)]
            fp32, bf16 = (statistics.mean(scores[s]) for s in ("fp32", "bf16"))
            rows.append(f"| {dataset} | {model} | {fp32:.2f} | {bf16:.2f} | {bf16 - fp32:+.2f} | "
                        f"{' '.join(f'{v:.1f}' for v in scores['bf16'])} |")
    print(f"\nTest accuracy (%), mean over seeds 1..{args.seeds}:\n")
    print("| dataset | model | fp32 | bf16 | bf16 - fp32 | bf16 per seed |")
    print("|---|---|---:|---:|---:|---|")
    print("\n".join(rows))

if "memory" in args.parts:
    rows = []
    for n in args.nodes:
        path = os.path.join(args.out, f"planted-{n}.npy")
        if not os.path.exists(os.path.join(path, "meta.json")):
            run([program("sar-convert"), "--dataset",
                 f"planted:nodes={n},degree=20,features=128", "--out", path])
        for storage in ("fp32", "bf16"):
            m = train(f"mem-{n}-{storage}",
                      ["--dataset", path, "--model", "gcn", "--hidden", "128", "--epochs", "2",
                       "--eval-every", "0", "--threads", "1", "--storage", storage])
            plan = json.loads(run([program("sar-plan"), "--dataset", path, "--model", "gcn",
                                   "--hidden", "128", "--storage", storage, "--json"],
                                  capture=True))
            planned = plan["peak_memory_bytes_per_rank"]  # one P: the plan itself
            peak = m["peak_memory_bytes"]
            rows.append(f"| {n // 1000}k | {storage} | {peak / 2**20:.0f} | {peak / n:.0f} | "
                        f"{planned / 2**20:.0f} | {(planned - peak) / peak * 100:+.1f} % | "
                        f"{m['epoch_seconds_median']:.2f} |")
    print("\nGCN (hidden 128, 2 layers), one process of 1 thread:\n")
    print("| nodes | storage | peak (MiB) | bytes per node | sar-plan (MiB) | plan error | "
          "epoch (s) |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    print("\n".join(rows))

if "ranks" in args.parts:
    rows = []
    for storage in ("fp32", "bf16"):
        for model in args.models:
            common = ["--dataset", os.path.join(data, "cora"), "--model", model, "--epochs", "30",
                      "--sparse-features", "off", "--storage", storage, "--seed", "1",
                      "--threads", "1", "--eval-every", "0"]
            one = train(f"ranks-{model}-{storage}-1", common)["train_loss"]
            cells = []
            for ranks in (2, 4):
                got = train(f"ranks-{model}-{storage}-{ranks}",
                            [*common, "--partition", "ptscotch"], ranks)["train_loss"]
                cells.append(max(abs(a - b) / abs(a) for a, b in zip(one, got)))
            rows.append(f"| {model} | {storage} | {cells[0]:.1e} | {cells[1]:.1e} |")
    print("\nCora, 30 epochs: largest relative difference of the training losses from one "
          "process's:\n")
    print("| model | storage | 2 ranks | 4 ranks |")
    print("|---|---|---:|---:|")
    print("\n".join(rows))
