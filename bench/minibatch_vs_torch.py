#!/usr/bin/python3
"""Minibatch training, sar against a plain-PyTorch peer (bench/RESULTS.md §11).

On a planted graph (default 1M nodes, degree 20, 32 features) written once as a sar .npy
dataset directory, both train 3-layer GraphSAGE (mean, hidden 64, dropout 0.5, Adam lr 0.01,
decay 5e-4), fanouts 15,10,5, batch 1024, on all cores, without evaluation (--eval-every 0:
the epoch is training only, and the peak memory is training's):
  sar-train --minibatch 1024 --bulk K      for each K of --bulks
  bench/torch_minibatch_peer.py            samples every minibatch with torch operations
Targets (the sampling issue): sar's epoch at least 5x faster, its peak memory at most half of
the peer's. Prints a table, writes the metrics to --work and a plot (epoch split into
sampling, feature gather and the rest; peak memory) to --plot.

  /usr/bin/python3 bench/minibatch_vs_torch.py --build build [--nodes 1000000] [--epochs 2]
"""
import argparse
import json
import os
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--build", default="build", help="meson build directory")
parser.add_argument("--nodes", type=int, default=1000000, help="planted graph size")
parser.add_argument("--epochs", type=int, default=2, help="epochs per run (median reported)")
parser.add_argument("--bulks", default="1,32", help="sar's --bulk values, comma separated")
parser.add_argument("--work", default="/tmp/sar-bench-minibatch-torch",
                    help="directory for the dataset and the metrics (created)")
parser.add_argument("--plot", default=os.path.join(here, "minibatch_vs_torch.png"))
args = parser.parse_args()

os.makedirs(args.work, exist_ok=True)
dataset = os.path.join(args.work, "planted-%d" % args.nodes)
if not os.path.exists(os.path.join(dataset, "meta.json")):
    subprocess.run([os.path.join(args.build, "examples", "sar-convert"), "--dataset",
                    "planted:nodes=%d,degree=20" % args.nodes, "--out", dataset], check=True)
training = ["--fanouts", "15,10,5", "--minibatch", "1024", "--epochs", str(args.epochs)]


def run(command, name):
    metrics = os.path.join(args.work, name + ".json")
    command = command + ["--metrics-out", metrics]
    print("$", " ".join(command), flush=True)
    subprocess.run(command, check=True)
    with open(metrics) as f:
        return json.load(f)


runs = []
for bulk in [int(b) for b in args.bulks.split(",")]:
    m = run([os.path.join(args.build, "examples", "sar-train"), "--dataset", dataset, "--model",
             "sage", "--layers", "3", "--bulk", str(bulk), "--eval-every", "0", "--quiet"]
            + training, "sar-bulk%d" % bulk)
    runs.append(("sar, bulk %d" % bulk, m))
peer = run(["/usr/bin/python3", os.path.join(here, "torch_minibatch_peer.py"), "--dataset",
            dataset] + training, "torch")
runs.append(("PyTorch peer", peer))

print("\n| run | epoch s | sampling s | gather s | rest s | peak MiB | epoch vs peer | "
      "memory vs peer |")
print("|---|---|---|---|---|---|---|---|")
for name, m in runs:
    epoch, sampling, gather = (m["epoch_seconds_median"], m["sampling_seconds_median"],
                               m["gather_seconds_median"])
    print("| %s | %.2f | %.2f | %.2f | %.2f | %.1f | %.2fx faster | %.2f |" % (
        name, epoch, sampling, gather, epoch - sampling - gather,
        m["peak_memory_bytes"] / 2**20, peer["epoch_seconds_median"] / epoch,
        m["peak_memory_bytes"] / peer["peak_memory_bytes"]))
print("\ntraining loss, first epoch: " + ", ".join(
    "%s %.4f" % (name, m["train_loss"][0]) for name, m in runs))
print("targets: epoch at least 5x faster, peak memory at most 0.5 of the peer's")

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit("no matplotlib: table above, no plot (scripts/install-deps.sh --bench)")
names = [name for name, _ in runs]
figure, (time_axis, memory_axis) = plt.subplots(1, 2, figsize=(10, 4))
bottom = [0.0] * len(runs)
for label, part in (("sampling", lambda m: m["sampling_seconds_median"]),
                    ("feature gather", lambda m: m["gather_seconds_median"]),
                    ("forward, backward, step", lambda m: m["epoch_seconds_median"]
                     - m["sampling_seconds_median"] - m["gather_seconds_median"])):
    values = [part(m) for _, m in runs]
    time_axis.bar(names, values, bottom=bottom, label=label)
    bottom = [b + v for b, v in zip(bottom, values)]
time_axis.set_ylabel("seconds per epoch")
time_axis.legend()
memory_axis.bar(names, [m["peak_memory_bytes"] / 2**20 for _, m in runs], color="tab:gray")
memory_axis.set_ylabel("peak memory (MiB)")
figure.suptitle("Minibatch GraphSAGE, %d-node planted graph, fanouts 15,10,5, batch 1024"
                % args.nodes)
figure.tight_layout()
figure.savefig(args.plot, dpi=100)
print("plot:", args.plot)
