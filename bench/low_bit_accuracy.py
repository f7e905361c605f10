#!/usr/bin/env python3
"""Test accuracy (at the best validation epoch) of low-bit, bounded-stale halo exchange against
the fp32 synchronous run at the same P: Cora and CiteSeer on METIS parts, GCN, GraphSAGE and
GAT with sar-train's paper defaults and no dropout on the features (the first layer's halo
then travels once, exactly), mean over seeds. Prints one Markdown row per (dataset, model,
exchange) and writes the runs as JSON.

usage: bench/low_bit_accuracy.py [--build build] [--data ../shared/data] [--ranks 4]
        [--seeds 5] [--models gcn,sage,gat] [--datasets cora,citeseer]
        [--exchanges 32:32:1,1:1:5,2:2:10] [--train-args "--hidden 128 --layers 3"]
        [--out FILE.json]
An exchange is HALO_BITS:GRADIENT_BITS:STALENESS; --train-args are added to every sar-train run
(e.g. --sparse-features off: the stores hold Cora's and CiteSeer's features sparse).
"""
import argparse, json, os, statistics, subprocess, sys, tempfile

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--build", default="build")
parser.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data"))
parser.add_argument("--ranks", type=int, default=4)
parser.add_argument("--seeds", type=int, default=5)
parser.add_argument("--models", default="gcn,sage,gat")
parser.add_argument("--datasets", default="cora,citeseer")
parser.add_argument("--exchanges", default="32:32:1,1:1:5,2:2:10")
parser.add_argument("--train-args", default="", help="more sar-train arguments, one string")
parser.add_argument("--out", default="")
args = parser.parse_args()

env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
train = os.path.join(args.build, "examples", "sar-train")
rows = []
with tempfile.TemporaryDirectory() as tmp:
    for dataset in args.datasets.split(","):
        store = os.path.join(tmp, dataset)
        subprocess.run([os.path.join(args.build, "examples", "sar-partition"), "--dataset",
                        os.path.join(args.data, dataset), "--parts", str(args.ranks),
                        "--method", "metis", "--out", store], check=True, env=env,
                        stdout=subprocess.DEVNULL)
        for model in args.models.split(","):
            for exchange in args.exchanges.split(","):
                halo, grad, stale = exchange.split(":")
                accs = []
                for seed in range(args.seeds):
                    metrics = os.path.join(tmp, "m.json")
                    cmd = ["mpirun", "-np", str(args.ranks), "--oversubscribe", train,
                           "--partitions", store, "--model", model, "--seed", str(seed),
                           "--threads", "1", "--input-dropout", "0", "--halo-bits", halo,
                           "--gradient-bits", grad, "--staleness", stale, "--quiet",
                           "--metrics-out", metrics] + args.train_args.split()
                    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
                    m = json.load(open(metrics))
                    accs.append(100 * m["test_acc"])
                    print(f"{dataset} {model} {exchange} seed {seed}: test {accs[-1]:.1f} "
                          f"(best epoch {m['best_epoch']}, {m['epochs']} epochs, halo "
                          f"{m['halo_feature_bytes_per_epoch'] + m['halo_gradient_bytes_per_epoch']} "
                          f"B/epoch)", file=sys.stderr, flush=True)
                rows.append({"dataset": dataset, "model": model, "halo_bits": int(halo),
                             "gradient_bits": int(grad), "staleness": int(stale),
                             "mean": statistics.mean(accs),
                             "std": statistics.stdev(accs) if len(accs) > 1 else 0.0,
                             "runs": accs, "halo_bytes_per_epoch":
                                 m["halo_feature_bytes_per_epoch"] + m["halo_gradient_bytes_per_epoch"]})

print(f"| dataset | model | halo / gradient bits, staleness | test accuracy (mean ± std over "
      f"{args.seeds} seeds) | vs fp32 sync | halo bytes per epoch |")
print("|---|---|---|---:|---:|---:|")
for r in rows:
    base = next((b for b in rows if b["dataset"] == r["dataset"] and b["model"] == r["model"]
                 and b["halo_bits"] == 32 and b["staleness"] == 1), None)  # absent: not run
    delta = f"{r['mean'] - base['mean']:+.2f}" if base else "n/a"
    print(f"| {r['dataset']} | {r['model']} | {r['halo_bits']} / {r['gradient_bits']}, S = "
          f"{r['staleness']} | {r['mean']:.2f} ± {r['std']:.2f} | {delta} | "
          f"{r['halo_bytes_per_epoch']} |")
if args.out:
    with open(args.out, "w") as f:
        json.dump(rows, f, indent=1)
