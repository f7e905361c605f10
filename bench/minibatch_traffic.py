#!/usr/bin/env python3
"""Feature traffic of distributed minibatch training against bulk size (bench/RESULTS.md §19).

The measurement of the issue "make the seeds' speed mechanisms pay": a planted graph (200k
nodes, degree 20, 64 features), a METIS store of 4 parts, 4 ranks, 3-layer GraphSAGE, fanouts
15,10,5, batch 1024, two epochs without evaluation; for bulk k = 1, 8, 32 the bytes the ranks
send per epoch, split by kind (sar-train's sampling_bytes_per_epoch: rows of A for sampling,
feature rows, labels, request ids) and the epoch time, against one process's epoch.

  bench/minibatch_traffic.py --build build [--nodes 200000] [--ranks 4] [--work DIR]
                             [--bulks 1 8 32] [--storage fp32|bf16]
"""
import argparse
import json
import os
import subprocess

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--build", default="build", help="meson build directory")
parser.add_argument("--nodes", type=int, default=200000, help="planted graph size")
parser.add_argument("--ranks", type=int, default=4)
parser.add_argument("--bulks", type=int, nargs="+", default=[1, 8, 32])
parser.add_argument("--storage", default="fp32", choices=["fp32", "bf16"],
                    help="how the features are held (bf16: gathered and sent as bf16)")
parser.add_argument("--work", default="/tmp/sar-bench-traffic",
                    help="directory for the dataset, store and metrics (created)")
args = parser.parse_args()

programs = os.path.join(args.build, "examples")
os.makedirs(args.work, exist_ok=True)
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
model = ["--model", "sage", "--layers", "3", "--fanouts", "15,10,5", "--minibatch", "1024",
         "--epochs", "2", "--eval-every", "0", "--quiet", "--storage", args.storage]

dataset = os.path.join(args.work, "planted-%d.npy" % args.nodes)
if not os.path.exists(os.path.join(dataset, "meta.json")):
    subprocess.run([os.path.join(programs, "sar-convert"), "--dataset",
                    "planted:nodes=%d,degree=20,features=64" % args.nodes, "--out", dataset],
                   check=True, env=env, stdout=subprocess.DEVNULL)
store = os.path.join(args.work, "store-%d-%d" % (args.nodes, args.ranks))
if not os.path.exists(os.path.join(store, "meta.json")):
    subprocess.run([os.path.join(programs, "sar-partition"), "--dataset", dataset, "--parts",
                    str(args.ranks), "--out", store], check=True, env=env,
                   stdout=subprocess.DEVNULL)


def run(command, name):
    metrics = os.path.join(args.work, name + ".json")
    print("$", " ".join(command + ["--metrics-out", metrics]), flush=True)
    subprocess.run(command + ["--metrics-out", metrics], check=True, env=env)
    return json.load(open(metrics))


train = os.path.join(programs, "sar-train")
one = run([train, "--dataset", dataset, "--bulk", "32"] + model, "one-process-" + args.storage)
rows = []
for k in args.bulks:
    m = run(["mpirun", "-np", str(args.ranks), "--oversubscribe", train, "--partitions", store,
             "--bulk", str(k)] + model, "bulk-%d-%s" % (k, args.storage))
    rows.append((k, m))
    with open(os.path.join(args.work, "results.jsonl"), "a") as f:
        f.write(json.dumps({"bulk": k, "ranks": args.ranks, "storage": args.storage,
                            "metrics": m}) + "\n")

mb = lambda b: b / 1e6
print("\none process, k = 32: epoch %.2f s" % one["epoch_seconds_median"])
print("\n| k | epoch s | x one process | sampling s | gather s | all sent MB | rows of A MB "
      "| feature rows MB | labels MB | requests MB |")
print("|---|---|---|---|---|---|---|---|---|---|")
for k, m in rows:
    s = m["sampling_bytes_per_epoch"]
    print("| %d | %.2f | %.2f | %.2f | %.2f | %.1f | %.1f | %.1f | %.1f | %.1f |" % (
        k, m["epoch_seconds_median"], m["epoch_seconds_median"] / one["epoch_seconds_median"],
        m["sampling_seconds_median"], m["gather_seconds_median"],
        mb(m["bytes_sent_per_epoch"]), mb(s["adjacency_rows"]), mb(s["feature_rows"]),
        mb(s["entries"]), mb(s["requests"])))
first = rows[0][1]["bytes_sent_per_epoch"]
for k, m in rows[1:]:
    print("k = %d sends %.3f of k = %d's bytes per epoch" % (k, m["bytes_sent_per_epoch"] / first,
                                                            rows[0][0]))
