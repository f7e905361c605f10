#!/usr/bin/env python3
"""Feature traffic of distributed minibatch training against bulk size (bench/RESULTS.md §19).

The measurement of the issue "make the seeds' speed mechanisms pay": a planted graph (200k
nodes, degree 20, 64 features), a METIS store of 4 parts, 4 ranks, 3-layer GraphSAGE, fanouts
15,10,5, batch 1024, two epochs without evaluation; for bulk k = 1, 8, 32 the bytes the ranks
send per epoch, split by kind (sar-train's sampling_bytes_per_epoch: rows of A for sampling,
feature rows, labels, request ids) and the epoch time, against one process's epoch.

It also counts the rows: what the minibatches read (each one's distinct input nodes, summed),
what the gathers fetched (each group's union once), and of those the rows sent by other ranks
(the feature bytes over a row's bytes), so that k = 1 shows no row sent twice within a
minibatch nor to the rank that holds it. --plot draws bytes by kind and rows per k.

  bench/minibatch_traffic.py --build build [--nodes 200000] [--ranks 4] [--work DIR]
                             [--bulks 1 8 32] [--storage fp32|bf16] [--plot PNG]
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
parser.add_argument("--plot", help="write a plot of bytes by kind and rows per k to this PNG")
args = parser.parse_args()

programs = os.path.join(args.build, "examples")
os.makedirs(args.work, exist_ok=True)
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
model = ["--model", "sage", "--layers", "3", "--fanouts", "15,10,5", "--minibatch", "1024",
         "--epochs", "2", "--eval-every", "0", "--quiet", "--storage", args.storage]

FEATURES = 64
row_bytes = FEATURES * (4 if args.storage == "fp32" else 2)
dataset = os.path.join(args.work, "planted-%d.npy" % args.nodes)
if not os.path.exists(os.path.join(dataset, "meta.json")):
    subprocess.run([os.path.join(programs, "sar-convert"), "--dataset",
                    "planted:nodes=%d,degree=20,features=%d" % (args.nodes, FEATURES),
                    "--out", dataset],
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

print("\n| k | input rows (minibatches read) | rows fetched (groups' unions) | of them sent by "
      "other ranks | sent / read |")
print("|---|---:|---:|---:|---:|")
for k, m in rows:
    sent = m["sampling_bytes_per_epoch"]["feature_rows"] / row_bytes
    print("| %d | %d | %d | %d | %.3f |" % (k, m["input_rows_per_epoch"],
                                             m["gathered_rows_per_epoch"], sent,
                                             sent / m["input_rows_per_epoch"]))

if args.plot:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    labels = [str(k) for k, _ in rows]
    kinds = [("feature_rows", "feature rows"), ("adjacency_rows", "rows of A (sampling)"),
             ("requests", "request ids"), ("entries", "labels, degrees")]
    bottom = [0.0] * len(rows)
    for key, name in kinds:
        mbs = [mb(m["sampling_bytes_per_epoch"][key]) for _, m in rows]
        left.bar(labels, mbs, bottom=bottom, label=name)
        bottom = [b + v for b, v in zip(bottom, mbs)]
    for i, (_, m) in enumerate(rows):
        left.annotate("%.2f s\n(%.2fx one process)" % (
            m["epoch_seconds_median"], m["epoch_seconds_median"] / one["epoch_seconds_median"]),
            (i, bottom[i]), ha="center", va="bottom", fontsize=8)
    left.set_ylim(0, max(bottom) * 1.25)
    left.set_xlabel("minibatches sampled and fetched together (k)")
    left.set_ylabel("MB sent per epoch, all ranks")
    left.set_title("bytes by kind, and epoch time")
    left.legend(fontsize=8)
    width = 0.27
    series = [("read by the minibatches", lambda m: m["input_rows_per_epoch"]),
              ("fetched (each group's union)", lambda m: m["gathered_rows_per_epoch"]),
              ("sent by other ranks", lambda m: m["sampling_bytes_per_epoch"]["feature_rows"]
               / row_bytes)]
    for j, (name, value) in enumerate(series):
        right.bar([i + (j - 1) * width for i in range(len(rows))],
                  [value(m) / 1e6 for _, m in rows], width, label=name)
    right.set_xticks(range(len(rows)), labels)
    right.set_ylim(0, max(m["input_rows_per_epoch"] for _, m in rows) / 1e6 * 1.35)
    right.set_xlabel("minibatches sampled and fetched together (k)")
    right.set_ylabel("million feature rows per epoch, all ranks")
    right.set_title("feature rows")
    right.legend(fontsize=8)
    fig.suptitle("Distributed minibatch GraphSAGE: planted %dk nodes, %d ranks, fanouts 15,10,5, "
                 "batch 1024" % (args.nodes // 1000, args.ranks), fontsize=10)
    fig.tight_layout()
    fig.savefig(args.plot, dpi=110)
    print("plot:", args.plot)
