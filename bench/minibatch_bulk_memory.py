#!/usr/bin/env python3
"""Bulk sampling speed and distributed minibatch memory (bench/RESULTS.md §10).

On a planted graph (default 1M nodes, degree 20), 3-layer GraphSAGE, fanouts 15,10,5,
batch 1024, one epoch each:
  1. one process with --bulk 1 and --bulk 32: sampling seconds per minibatch (the issue's
     target: k = 32 at most 1/3 of k = 1), and where the epoch goes (sampling, gather, rest);
  2. one process against 4 ranks (c = 1, a METIS store of 4 parts): each rank's graph and
     feature bytes (sar-train's graph_feature_bytes, largest rank) against one process's
     (target: at most 1.2 / P), and the training loss of both (the same model).

  bench/minibatch_bulk_memory.py --build build [--nodes 1000000] [--work /tmp/sar-bench]
"""
import argparse
import json
import os
import subprocess
import sys

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--build", default="build", help="meson build directory")
parser.add_argument("--nodes", type=int, default=1000000, help="planted graph size")
parser.add_argument("--work", default="/tmp/sar-bench-minibatch",
                    help="directory for the partition store and metrics (created)")
parser.add_argument("--ranks", type=int, default=4)
args = parser.parse_args()

programs = os.path.join(args.build, "examples")
dataset = "planted:nodes=%d,degree=20" % args.nodes
model = ["--model", "sage", "--layers", "3", "--fanouts", "15,10,5", "--minibatch", "1024",
         "--epochs", "1", "--quiet"]
os.makedirs(args.work, exist_ok=True)
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


def run(command, name):
    metrics = os.path.join(args.work, name + ".json")
    print("$", " ".join(command + ["--metrics-out", metrics]), flush=True)
    subprocess.run(command + ["--metrics-out", metrics], check=True, env=env)
    return json.load(open(metrics))


store = os.path.join(args.work, "store-%d-%d" % (args.nodes, args.ranks))
if not os.path.exists(os.path.join(store, "meta.json")):
    subprocess.run([os.path.join(programs, "sar-partition"), "--dataset", dataset, "--parts",
                    str(args.ranks), "--out", store], check=True)

train = os.path.join(programs, "sar-train")
bulk1 = run([train, "--dataset", dataset, "--bulk", "1"] + model, "bulk1")
bulk32 = run([train, "--dataset", dataset, "--bulk", "32"] + model, "bulk32")
ranks = run(["mpirun", "-np", str(args.ranks), "--oversubscribe", train, "--partitions", store,
             "--bulk", "32"] + model, "ranks")

# Both runs draw the same minibatches, so the ratio of their epochs' sampling times is the
# ratio per minibatch.
s1, s32 = bulk1["sampling_seconds_median"], bulk32["sampling_seconds_median"]
print("\n| run | epoch s | sampling s | gather s | compute s |")
print("|---|---|---|---|---|")
for name, m in (("1 process, k = 1", bulk1), ("1 process, k = 32", bulk32),
                ("%d ranks, k = 32" % args.ranks, ranks)):
    epoch, sampling, gather = (m["epoch_seconds_median"], m["sampling_seconds_median"],
                               m["gather_seconds_median"])
    print("| %s | %.2f | %.2f | %.2f | %.2f |" % (name, epoch, sampling, gather,
                                                  epoch - sampling - gather))
print("\nsampling time k = 32 / k = 1: %.3f (target <= 0.333)" % (s32 / s1))
one, per_rank = bulk32["graph_feature_bytes"], ranks["graph_feature_bytes"]
print("graph + feature bytes: one process %.1f MiB, largest of %d ranks %.1f MiB = %.3f / P "
      "(target <= 1.2 / P)" % (one / 2**20, args.ranks, per_rank / 2**20,
                               per_rank / one * args.ranks))
print("training loss: one process %.6f, %d ranks %.6f" % (bulk32["train_loss"][0], args.ranks,
                                                           ranks["train_loss"][0]))
sys.exit(0)
