#!/usr/bin/env python3
"""Sparse against dense input features (issue 36): epoch time, peak memory, losses.

For each dataset and model, sar-train runs twice on one process (1 thread), once with
--sparse-features on and once off, with the same seed; prints one Markdown table (bench/RESULTS.md
§29): median epoch, the process's peak resident memory, and the largest relative difference of
the per-epoch training losses. With --ranks P > 1, sar-partition first writes a P-part store of
each dataset with sparse features and one with dense features, and sar-train trains on each
under mpirun (the peak is the largest rank's).

  /usr/bin/python3 bench/sparse_features.py --out /tmp/sparse-features
  /usr/bin/python3 bench/sparse_features.py --datasets cora --models gcn --epochs 20
  /usr/bin/python3 bench/sparse_features.py --datasets planted --ranks 2 --epochs 10
"""
import argparse
import json
import os
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)
data = os.path.join(os.path.dirname(root), "shared", "data")
parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--build", default=os.path.join(root, "build"), help="build directory")
parser.add_argument("--out", default=os.path.join(here, "out", "sparse"), help="scratch/results")
parser.add_argument("--datasets", nargs="+", default=["cora", "citeseer", "planted"],
                    help="cora, citeseer (../shared/data) or planted (200k nodes, 5,000 binary "
                    "features, 0.3%% non-zero)")
parser.add_argument("--models", nargs="+", default=["gcn", "sage"])
parser.add_argument("--epochs", type=int, default=50)
parser.add_argument("--threads", type=int, default=1, help="threads per rank")
parser.add_argument("--ranks", type=int, default=1, help="P > 1: train from P-part stores")
args = parser.parse_args()

specs = {"cora": os.path.join(data, "cora"), "citeseer": os.path.join(data, "citeseer"),
         "planted": "planted:nodes=200000,degree=10,features=5000,density=0.003"}
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
os.makedirs(args.out, exist_ok=True)


def run(command):
    print("+", " ".join(command), flush=True)
    if subprocess.run(command, env=env).returncode:
        sys.exit(f"failed: {' '.join(command)}")


def store(dataset, sparse):
    """The P-part store of `dataset` with sparse features (on) or dense ones (off)."""
    path = os.path.join(args.out, f"{dataset}-{args.ranks}-{sparse}")
    if not os.path.exists(os.path.join(path, "meta.json")):
        run([os.path.join(args.build, "examples", "sar-partition"), "--dataset", specs[dataset],
             "--parts", str(args.ranks), "--sparse-features", sparse, "--out", path])
    return path


def train(dataset, model, sparse):
    """Runs sar-train and returns its metrics."""
    metrics = os.path.join(args.out, f"{dataset}-{model}-{sparse}-{args.ranks}.json")
    program = [os.path.join(args.build, "examples", "sar-train")]
    source = ["--dataset", specs[dataset]]
    if args.ranks > 1:
        program = ["mpirun", "-np", str(args.ranks), "--oversubscribe", *program]
        source = ["--partitions", store(dataset, sparse)]
    command = [*program, *source, "--model", model, "--epochs", str(args.epochs),
               "--threads", str(args.threads), "--sparse-features", sparse, "--eval-every", "0",
               "--seed", "1", "--quiet", "--metrics-out", metrics]
    run(command)
    with open(metrics) as f:
        return json.load(f)


rows = []
for dataset in args.datasets:
    for model in args.models:
        dense, sparse = train(dataset, model, "off"), train(dataset, model, "on")
        losses = zip(dense["train_loss"], sparse["train_loss"])
        worst = max(abs(a - b) / max(abs(a), 1e-30) for a, b in losses)
        t_dense, t_sparse = dense["epoch_seconds_median"], sparse["epoch_seconds_median"]
        m_dense, m_sparse = dense["peak_memory_bytes"], sparse["peak_memory_bytes"]
        rows.append(f"| {dataset} | {model} | {t_dense * 1e3:.1f} | {t_sparse * 1e3:.1f} | "
                    f"{t_dense / t_sparse:.1f}x | {m_dense / 2**20:.0f} | {m_sparse / 2**20:.0f} | "
                    f"{m_dense / m_sparse:.1f}x | {worst:.1e} |")
print("| dataset | model | dense epoch (ms) | sparse epoch (ms) | faster | dense peak (MiB) | "
      "sparse peak (MiB) | smaller | loss difference |")
print("|---|---|---|---|---|---|---|---|---|")
print("\n".join(rows))
