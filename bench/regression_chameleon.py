#!/usr/bin/python3
"""Node regression on chameleon (../shared/data/chameleon: log10 monthly traffic of Wikipedia
pages, 2277 nodes, 3132 binary features, split/random): test R^2 of sar-train (--task regress)
against a plain PyTorch model of the same architecture and a features-only ridge baseline.

For each model (gcn, sage) and seed 0..S-1:
  sar      sar-train --dataset chameleon --task regress --model M --seed s (defaults: 200
           epochs, the papers' hyper-parameters, targets standardised on the training nodes,
           features row-normalised, best epoch by validation R^2, test R^2 there)
  pytorch  the same 2-layer model in plain PyTorch (bench/torch_peer.py's layers: the same
           normalised adjacency, Glorot initialisation, dropout, Adam with L2 in the gradient
           on the same parameters), the same standardisation, loss (mean squared error over the
           training nodes), epochs and best-epoch rule; torch.manual_seed(s)
  ridge    features only (no graph): raw features and targets centred on the training means,
           lambda = 1 and lambda picked on validation from 0.1 .. 1000 (as the data README)
R^2 = 1 - SSE / SST on the test nodes (SST about their own mean), as sar reports it.

Run with Debian's interpreter (python3-torch, libopenblas0-pthread: scripts/install-deps.sh
--bench). usage: bench/regression_chameleon.py [--build build] [--data ../shared/data]
                 [--seeds 5] [--models gcn,sage] [--epochs 200] [--out FILE.json]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_peer  # noqa: E402  (sets the thread counts before numpy and torch load)
from torch_peer import np, torch, F  # noqa: E402

SPLIT = {"train": 1, "valid": 2, "test": 3}


def read_csv_gz(path, dtype):
    import gzip
    with gzip.open(path, "rt") as f:
        return np.loadtxt(f, delimiter=",", dtype=dtype, ndmin=2)


def load_chameleon(directory):
    """Graph (in-edge CSR, symmetrised and deduplicated like sar's reader), features, targets,
    split from the OGB raw layout."""
    raw = os.path.join(directory, "raw")
    n = int(read_csv_gz(os.path.join(raw, "num-node-list.csv.gz"), np.int64)[0, 0])
    edges = read_csv_gz(os.path.join(raw, "edge.csv.gz"), np.int64)
    src = np.concatenate([edges[:, 0], edges[:, 1]])
    dst = np.concatenate([edges[:, 1], edges[:, 0]])
    key = np.unique(dst * n + src)
    dst, src = key // n, key % n
    indptr = np.zeros(n + 1, np.int64)
    np.add.at(indptr, dst + 1, 1)
    indptr = np.cumsum(indptr)
    features = read_csv_gz(os.path.join(raw, "node-feat.csv.gz"), np.float32)
    targets = read_csv_gz(os.path.join(raw, "node-target.csv.gz"), np.float64)
    split = np.zeros(n, np.int64)
    for name, code in SPLIT.items():
        ids = read_csv_gz(os.path.join(directory, "split", "random", name + ".csv.gz"), np.int64)
        split[ids[:, 0]] = code
    return indptr, src, features, targets, split


def r2(pred, y):
    """sar's R^2: 1 - SSE / SST per output (about the nodes' own mean), averaged."""
    sse = ((pred - y) ** 2).sum(0)
    sst = ((y - y.mean(0)) ** 2).sum(0)
    return float(np.mean(1 - sse / sst))


def ridge(features, y, split, lam):
    train = split == SPLIT["train"]
    mu_x, mu_y = features[train].mean(0), y[train].mean(0)
    x = features[train] - mu_x
    w = np.linalg.solve(x.T @ x + lam * np.eye(x.shape[1]), x.T @ (y[train] - mu_y))
    return lambda which: (features[split == SPLIT[which]] - mu_x) @ w + mu_y


def ridge_baselines(features, y, split):
    f = features.astype(np.float64)
    fixed = ridge(f, y, split, 1.0)
    best = max(([lam, ridge(f, y, split, lam)] for lam in (0.1, 0.3, 1, 3, 10, 30, 100, 300, 1000)),
               key=lambda lp: r2(lp[1]("valid"), y[split == SPLIT["valid"]]))
    test_y = y[split == SPLIT["test"]]
    return {"ridge_lambda_1": r2(fixed("test"), test_y),
            "ridge_tuned": r2(best[1]("test"), test_y), "ridge_tuned_lambda": best[0]}


def torch_run(model, seed, epochs, indptr, indices, features, y, split):
    settings = torch_peer.DEFAULTS[model]
    torch.manual_seed(seed)
    graph = torch_peer.build_graph(model, indptr, indices)
    sums = features.sum(1, keepdims=True)  # sar-train's --normalise-features auto (non-negative)
    x = torch.from_numpy(np.where(sums != 0, features / np.where(sums != 0, sums, 1), features)
                         .astype(np.float32))
    train = split == SPLIT["train"]
    mean, scale = y[train].mean(0), y[train].std(0)
    target = torch.from_numpy(((y - mean) / scale).astype(np.float32))
    masks = {k: torch.from_numpy(np.flatnonzero(split == v)) for k, v in SPLIT.items()}
    net = torch_peer.Net(model, x.shape[1], y.shape[1], settings["hidden"], settings["heads"],
                         settings["dropout"], settings["attention_dropout"])
    optimiser = torch_peer.make_optimiser(net, settings)
    best = (-np.inf, np.inf, None, -1)  # valid R^2, valid loss, test R^2, epoch
    for epoch in range(epochs):
        net.train()
        optimiser.zero_grad(set_to_none=True)
        out = net(graph, x)
        F.mse_loss(out[masks["train"]], target[masks["train"]]).backward()
        optimiser.step()
        net.eval()
        with torch.no_grad():
            out = net(graph, x)
            valid_loss = F.mse_loss(out[masks["valid"]], target[masks["valid"]]).item()
            pred = out.numpy().astype(np.float64)
        valid_r2 = r2(pred[split == SPLIT["valid"]], ((y - mean) / scale)[split == SPLIT["valid"]])
        if valid_r2 > best[0] or (valid_r2 == best[0] and valid_loss < best[1]):
            test_r2 = r2(pred[split == SPLIT["test"]], ((y - mean) / scale)[split == SPLIT["test"]])
            best = (valid_r2, valid_loss, test_r2, epoch)
    return {"best_val_r2": best[0], "test_r2": best[2], "best_epoch": best[3]}


def sar_run(build, directory, model, seed, epochs):
    with tempfile.NamedTemporaryFile(suffix=".json") as metrics:
        command = [os.path.join(build, "examples", "sar-train"), "--dataset", directory,
                   "--task", "regress", "--model", model, "--seed", str(seed), "--epochs",
                   str(epochs), "--quiet", "--metrics-out", metrics.name]
        subprocess.run(command, check=True, stderr=subprocess.DEVNULL)
        m = json.load(open(metrics.name))
    return {"best_val_r2": m["best_val_r2"], "test_r2": m["test_r2"],
            "best_epoch": m["best_epoch"]}, " ".join(command[:9])


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--build", default=os.path.join(here, "..", "build"))
    parser.add_argument("--data", default=os.path.join(here, "..", "..", "shared", "data"))
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--models", default="gcn,sage")
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    directory = os.path.join(args.data, "chameleon")
    indptr, indices, features, y, split = load_chameleon(directory)
    baselines = ridge_baselines(features, y, split)
    print(f"ridge (features only): lambda 1 {baselines['ridge_lambda_1']:.4f}, tuned "
          f"(lambda {baselines['ridge_tuned_lambda']}) {baselines['ridge_tuned']:.4f}", flush=True)
    rows = []
    for model in args.models.split(","):
        runs = {"sar": [], "pytorch": []}
        command = ""
        for seed in range(args.seeds):
            start = time.time()
            got, command = sar_run(args.build, directory, model, seed, args.epochs)
            runs["sar"].append(got)
            sar_seconds = time.time() - start
            start = time.time()
            runs["pytorch"].append(torch_run(model, seed, args.epochs, indptr, indices, features,
                                             y, split))
            print(f"{model} seed {seed}: sar {runs['sar'][-1]['test_r2']:.4f} "
                  f"({sar_seconds:.1f} s), pytorch {runs['pytorch'][-1]['test_r2']:.4f} "
                  f"({time.time() - start:.1f} s)", flush=True)
        row = {"model": model, "seeds": args.seeds, "epochs": args.epochs, "command": command}
        for name, results in runs.items():
            values = [r["test_r2"] for r in results]
            row[name] = {"mean": statistics.mean(values),
                         "std": statistics.stdev(values) if len(values) > 1 else 0.0,
                         "runs": results}
        rows.append(row)
    summary = {"dataset": "chameleon", "baselines": baselines, "models": rows,
               "torch_version": torch.__version__}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(summary, f, indent=2)
            f.write("\n")
    print("| model | sar test R² | PyTorch test R² | difference |")
    print("|---|---:|---:|---:|")
    for r in rows:
        print(f"| {r['model']} | {r['sar']['mean']:.4f} ± {r['sar']['std']:.4f} | "
              f"{r['pytorch']['mean']:.4f} ± {r['pytorch']['std']:.4f} | "
              f"{r['sar']['mean'] - r['pytorch']['mean']:+.4f} |")


if __name__ == "__main__":
    main()
