#!/usr/bin/python3
"""sar against a PyTorch peer on bag-of-words graphs, both with sparse input features
(issue 58): the ratios of the dense planted graph (bench/perf_vs_torch.py) do not carry over
to graphs whose first layer is a sparse product.

For each dataset (Cora and CiteSeer from ../shared/data, OGB raw layout) sar-convert writes an
.npy directory with sparse features once; then, in each of --rounds rounds, for each dataset
and model (GCN hidden 16, GraphSAGE-mean hidden 64, GAT 8 heads x 8: sar-train's defaults),
sar-train (--sparse-features on) and bench/torch_peer.py --sparse-features (a COO tensor, the
first layer's x W by torch.sparse.mm) train --epochs epochs on --threads threads, one run
after the other, never in parallel. The epoch is forward + backward + Adam step on both
sides (no evaluation); each run reports its median epoch. The table gives, per dataset and
model, the median over rounds of each side's median epoch and of each round's ratio
(PyTorch's epoch over sar's; the smallest and largest round's in brackets), and the load
average seen before the runs (a busy host slows both sides, not always alike).
--dense-peer also times the peer on the same features made dense (features.npy), the way
bench/perf_vs_torch.py compares.

  /usr/bin/python3 bench/bag_of_words.py --build build-bench --rounds 3
  /usr/bin/python3 bench/bag_of_words.py --build build-bench --datasets citeseer --models sage

Run it with the system Python (/usr/bin/python3): the peer needs Debian's python3-torch.
"""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)
data_root = os.path.join(os.path.dirname(root), "shared", "data")

parser = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--build", default=os.path.join(root, "build"), help="build directory "
                    "with tools/sar-train and tools/sar-convert")
parser.add_argument("--out", default=os.path.join(here, "out", "bag-of-words"),
                    help="scratch directory (datasets, metrics, logs)")
parser.add_argument("--datasets", nargs="+", default=["cora", "citeseer"],
                    help="names under --data (OGB raw directories)")
parser.add_argument("--data", default=data_root, help="directory of the datasets")
parser.add_argument("--models", nargs="+", default=["gcn", "sage", "gat"],
                    choices=["gcn", "sage", "gat"])
parser.add_argument("--epochs", type=int, default=50)
parser.add_argument("--threads", type=int, default=2)
parser.add_argument("--rounds", type=int, default=3)
parser.add_argument("--dense-peer", action="store_true",
                    help="also time the peer on dense features")
parser.add_argument("--timeout", type=int, default=1800, help="seconds per run")
args = parser.parse_args()
if args.rounds < 1 or args.epochs < 2 or args.threads < 1:
    parser.error("--rounds and --threads must be at least 1, --epochs at least 2")

MODEL_ARGS = {"gcn": ["--hidden", "16"], "sage": ["--aggregator", "mean", "--hidden", "64"],
              "gat": ["--hidden", "8", "--heads", "8"]}
PEER_ARGS = {"gcn": ["--hidden", "16"], "sage": ["--hidden", "64"],
             "gat": ["--hidden", "8", "--heads", "8"]}
LABEL = {"gcn": "GCN (hidden 16)", "sage": "GraphSAGE-mean (hidden 64)",
         "gat": "GAT (8 heads x 8)"}
program = {name: os.path.join(args.build, "examples", name) for name in ("sar-train",
                                                                         "sar-convert")}
for path in program.values():
    if not os.access(path, os.X_OK):
        sys.exit(f"bag_of_words.py: {path} not found; build it (ninja -C {args.build} "
                 f"{os.path.relpath(path, args.build)})")
os.makedirs(args.out, exist_ok=True)
commands = []  # one example of each kind of command line, for the report


def load_average():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def run(command, log):
    """Runs command (a list) with its output in log; exits with the log's tail on failure."""
    line = " ".join(shlex.quote(c) for c in command)
    print("+ " + line, flush=True)
    with open(log, "w") as f:
        code = subprocess.run(command, stdout=f, stderr=subprocess.STDOUT,
                              timeout=args.timeout).returncode
    if code != 0:
        with open(log) as f:
            tail = "".join(f.readlines()[-8:])
        sys.exit(f"bag_of_words.py: exit {code}: {line}\n{tail}")
    return line


def dataset(name, sparse):
    """The .npy directory of dataset `name` with sparse (or dense) features, written once."""
    directory = os.path.join(args.out, f"{name}-{'sparse' if sparse else 'dense'}")
    if not os.path.exists(os.path.join(directory, "meta.json")):
        run([program["sar-convert"], "--dataset", os.path.join(args.data, name), "--out",
             directory, "--sparse-features", "on" if sparse else "off"], directory + ".log")
    return directory


def timed(kind, command, metrics):
    """Runs command, which writes metrics; returns (median epoch in s, load average before)."""
    load = load_average()
    line = run(command, metrics + ".log")
    commands.append((kind, line))
    with open(metrics) as f:
        return json.load(f)["epoch_seconds_median"], load


def sar(directory, model, metrics):
    return timed("sar", [program["sar-train"], "--dataset", directory, "--model", model,
                         *MODEL_ARGS[model], "--epochs", str(args.epochs), "--patience", "0",
                         "--normalise-features", "off", "--sparse-features", "on",
                         "--threads", str(args.threads), "--quiet", "--metrics-out", metrics],
                 metrics)


def peer(directory, model, metrics, sparse=True):
    return timed("peer" if sparse else "dense peer",
                 ["/usr/bin/python3", os.path.join(here, "torch_peer.py"), "--dataset",
                  directory, "--model", model, *PEER_ARGS[model], "--epochs", str(args.epochs),
                  "--threads", str(args.threads), "--metrics-out", metrics,
                  *(["--sparse-features"] if sparse else [])], metrics)


runs = {}  # (dataset, model) -> list of per-round dicts
for round_ in range(args.rounds):
    for name in args.datasets:
        sparse_dir = dataset(name, True)
        dense_dir = dataset(name, False) if args.dense_peer else None
        for model in args.models:
            stem = os.path.join(args.out, f"{name}-{model}-r{round_}")
            r = {}
            r["sar"], r["load_sar"] = sar(sparse_dir, model, stem + "-sar.json")
            r["peer"], r["load_peer"] = peer(sparse_dir, model, stem + "-peer.json")
            if args.dense_peer:
                r["dense"], _ = peer(dense_dir, model, stem + "-dense.json", sparse=False)
            runs.setdefault((name, model), []).append(r)
            print(f"  {name} {model}: sar {r['sar'] * 1e3:.2f} ms, peer {r['peer'] * 1e3:.2f} ms"
                  f", ratio {r['peer'] / r['sar']:.2f}", flush=True)


def ms(seconds):
    return f"{seconds * 1e3:.2f}"


head = ["dataset", "model", "sar epoch (ms)", "PyTorch sparse epoch (ms)",
        "PyTorch / sar (min-max)"]
if args.dense_peer:
    head += ["PyTorch dense epoch (ms)"]
head += ["load avg"]
lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
summary = []
for (name, model), rs in runs.items():
    ratios = [r["peer"] / r["sar"] for r in rs]
    row = [name, LABEL[model], ms(statistics.median(r["sar"] for r in rs)),
           ms(statistics.median(r["peer"] for r in rs)),
           f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"]
    if args.dense_peer:
        row.append(ms(statistics.median(r["dense"] for r in rs)))
    loads = [r["load_sar"] for r in rs] + [r["load_peer"] for r in rs]
    row.append(f"{min(loads):.1f}-{max(loads):.1f}")
    lines.append("| " + " | ".join(row) + " |")
    summary.append({"dataset": name, "model": model, "rounds": rs})
with open(os.path.join(args.out, "summary.json"), "w") as f:
    json.dump(summary, f, indent=2)
print()
print(f"{args.rounds} rounds, {args.epochs} epochs per run, {args.threads} threads, "
      f"{time.strftime('%Y-%m-%d %H:%M')}; commands (one of each kind):")
print()
seen = set()
for kind, line in commands:
    if (kind, line.split("--model")[1].split()[0]) not in seen:
        seen.add((kind, line.split("--model")[1].split()[0]))
        print(f"    {line}")
print()
print("\n".join(lines))
