#!/usr/bin/python3
"""Checks of bench/torch_peer.py and bench/torch_minibatch_peer.py, and a numpy writer of
planted-partition test graphs.

  /usr/bin/python3 bench/torch_peer_check.py
      1. each aggregation (GCN both weight orders, SAGE-mean, GAT concat and mean) on a
         4-node directed graph with a self-loop and a node without in-edges, against a dense
         numpy computation; the gradients of every parameter and of the input against
         central differences of that numpy computation (float64);
      2. the command line on a 3000-node planted graph: 50 epochs of each model, the
         training loss must fall; the JSON fields; clear errors (exit 2) for a missing
         directory, a wrong format and a wrong dtype;
      3. the minibatch peer: a block's sources start with its destinations and hold no id
         twice; every destination has min(fanout, in-degree) distinct in-neighbours (all of
         them for -1); a row of degree 10 with fanout 3 includes each neighbour in 3/10 of
         4000 draws within 4 sigma; the block layer equals a dense mean aggregation (both
         product orders); 5 epochs on a 3000-node planted graph lower the training loss; a
         zero fanout is refused (exit 2).
  /usr/bin/python3 bench/torch_peer_check.py make-data --nodes N --degree D --features F --out DIR
      writes a sar .npy dataset directory (symmetric graph, no self-loops, 8 classes,
      features = class centroid + noise, 10 % train, 10 % valid) without sar-convert.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import torch_peer  # noqa: E402

PEER = os.path.join(here, "torch_peer.py")


def make_planted(out, nodes, degree, features, classes=8, homophily=0.7, noise=2.0,
                 train=0.1, valid=0.1, seed=1):
    """Writes a symmetric planted-partition dataset (average in-degree ~degree) to out."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, nodes).astype(np.int32)
    order = np.argsort(labels, kind="stable")
    count = np.bincount(labels, minlength=classes)
    start = np.concatenate([[0], np.cumsum(count)[:-1]])
    half = nodes * degree // 2
    src = rng.integers(0, nodes, half)
    same = rng.random(half) < homophily
    c = labels[src[same]]
    dst = rng.integers(0, nodes, half)
    dst[same] = order[start[c] + (rng.random(same.sum()) * count[c]).astype(np.int64)]
    keep = src != dst
    src, dst = src[keep], dst[keep]
    keys = np.unique(np.concatenate([dst * nodes + src, src * nodes + dst]))  # sorted by dst
    rows, cols = keys // nodes, keys % nodes
    indptr = np.zeros(nodes + 1, np.int64)
    indptr[1:] = np.cumsum(np.bincount(rows, minlength=nodes))
    centroids = rng.standard_normal((classes, features))
    x = (centroids[labels] + noise * rng.standard_normal((nodes, features))).astype(np.float32)
    u = rng.random(nodes)
    split = np.where(u < train, 1, np.where(u < train + valid, 2, 3)).astype(np.uint8)
    os.makedirs(out, exist_ok=True)
    for name, a in [("indptr", indptr), ("indices", cols.astype(np.int64)), ("features", x),
                    ("labels", labels), ("split", split)]:
        np.save(os.path.join(out, name + ".npy"), a)
    meta = {"format": "sar-npy-dataset", "version": 1, "name": f"numpy-planted-{nodes}",
            "num_nodes": nodes, "num_edges": int(cols.size), "feature_dim": features,
            "num_classes": classes}
    with open(os.path.join(out, "meta.json"), "w") as f:
        json.dump(meta, f)
    return meta


# ---------------------------------------------------------------------------------------
# 1. The aggregations against dense numpy

# In-edge CSR of 0 -> 1, 3 -> 1, 0 -> 2, 1 -> 2, 2 -> 2 (a self-loop), 1 -> 3, 2 -> 3;
# node 0 has no in-edge.
INDPTR = np.array([0, 0, 2, 5, 7], np.int64)
INDICES = np.array([0, 3, 0, 1, 2, 1, 2], np.int64)


def dense_adjacency():
    a = np.zeros((4, 4))
    for i in range(4):
        a[i, INDICES[INDPTR[i]:INDPTR[i + 1]]] += 1
    return a


def one_self_loop(a):
    a = a.copy()
    np.fill_diagonal(a, 1)
    return a


def dense_gcn(x, weight, bias):
    a = one_self_loop(dense_adjacency())
    d_in, d_out = a.sum(1) ** -0.5, a.sum(0) ** -0.5
    return (d_in[:, None] * a * d_out[None, :]) @ x @ weight + bias


def dense_sage(x, self_weight, neighbour_weight, bias):
    a = dense_adjacency()  # self-loop 2 -> 2 kept: node 2 is its own neighbour
    mean = a / np.maximum(a.sum(1, keepdims=True), 1)  # node 0: no neighbour, mean 0
    return x @ self_weight + mean @ x @ neighbour_weight + bias


def dense_gat(x, weight, attention_left, attention_right, bias, concat):
    a = one_self_loop(dense_adjacency())
    heads, width = attention_left.shape
    z = (x @ weight).reshape(4, heads, width)
    el, er = (z * attention_left).sum(-1), (z * attention_right).sum(-1)
    out = np.zeros((4, heads, width))
    for h in range(heads):
        logits = er[:, h][:, None] + el[:, h][None, :]  # [i, j]: edge j -> i
        logits = np.where(logits > 0, logits, 0.2 * logits)
        e = np.where(a > 0, np.exp(logits - logits.max()), 0)
        alpha = e / e.sum(1, keepdims=True)
        out[:, h] = alpha @ z[:, h]
    return (out.reshape(4, heads * width) if concat else out.mean(1)) + bias


def layer_cases():
    """(name, torch layer, graph operator, dense function of (x, *parameters), input width)."""
    torch = torch_peer.torch
    gat_edges = torch_peer.attention_edges(INDPTR, INDICES)
    return [
        ("gcn 3 -> 2 (weight first)", torch_peer.GCNLayer(3, 2),
         torch_peer.gcn_adjacency(INDPTR, INDICES, torch.float64), dense_gcn, 3),
        ("gcn 3 -> 5 (aggregate first)", torch_peer.GCNLayer(3, 5),
         torch_peer.gcn_adjacency(INDPTR, INDICES, torch.float64), dense_gcn, 3),
        ("sage-mean 3 -> 2", torch_peer.SAGEMeanLayer(3, 2),
         torch_peer.mean_adjacency(INDPTR, INDICES, torch.float64), dense_sage, 3),
        ("sage-mean 3 -> 5", torch_peer.SAGEMeanLayer(3, 5),
         torch_peer.mean_adjacency(INDPTR, INDICES, torch.float64), dense_sage, 3),
        ("gat 2 heads x 2, concat", torch_peer.GATLayer(3, 2, 2, True, 0.0), gat_edges,
         lambda x, *p: dense_gat(x, *p, concat=True), 3),
        ("gat 2 heads x 3, mean", torch_peer.GATLayer(3, 3, 2, False, 0.0), gat_edges,
         lambda x, *p: dense_gat(x, *p, concat=False), 3),
    ]


def check_layers(report):
    torch = torch_peer.torch
    rng = np.random.default_rng(7)
    for name, layer, graph, dense, fin in layer_cases():
        layer = layer.double()
        with torch.no_grad():
            for p in layer.parameters():  # biases too, so that they are checked
                p.copy_(torch.from_numpy(rng.standard_normal(tuple(p.shape))))
        x = torch.from_numpy(rng.standard_normal((4, fin))).requires_grad_(True)
        params = [p.detach().numpy().copy() for p in layer.parameters()]
        out = layer(graph, x)
        expected = dense(x.detach().numpy(), *params)
        report(f"{name}: forward", np.allclose(out.detach().numpy(), expected, atol=1e-10),
               np.abs(out.detach().numpy() - expected).max())
        # Gradients of sum(out * r) against central differences of the dense function.
        r = rng.standard_normal(expected.shape)
        (out * torch.from_numpy(r)).sum().backward()
        inputs = [x.detach().numpy().copy()] + params
        grads = [x.grad.numpy()] + [p.grad.numpy() for p in layer.parameters()]
        worst = 0.0
        for k, value in enumerate(inputs):
            numeric = np.zeros_like(value)
            for idx in np.ndindex(value.shape):
                old = value[idx]
                value[idx] = old + 1e-6
                up = (dense(*inputs) * r).sum()
                value[idx] = old - 1e-6
                down = (dense(*inputs) * r).sum()
                value[idx] = old
                numeric[idx] = (up - down) / 2e-6
            worst = max(worst, np.abs(numeric - grads[k]).max())
        report(f"{name}: gradients of input and {len(params)} parameters", worst < 1e-6, worst)


# ---------------------------------------------------------------------------------------
# 2. The command line


def run_peer(*arguments):
    return subprocess.run(["/usr/bin/python3", PEER, *arguments], capture_output=True, text=True)


def check_cli(report, scratch):
    data = os.path.join(scratch, "planted")
    make_planted(data, nodes=3000, degree=10, features=32)
    for model, extra in [("gcn", ["--hidden", "128"]), ("sage", ["--hidden", "128"]),
                         ("gat", ["--hidden", "32", "--heads", "4"])]:
        metrics = os.path.join(scratch, model + ".json")
        r = run_peer("--dataset", data, "--model", model, *extra, "--epochs", "50",
                     "--threads", "1", "--metrics-out", metrics)
        if r.returncode != 0:
            report(f"{model}: 50 epochs", False, r.stderr.strip()[-300:])
            continue
        m = json.load(open(metrics))
        loss = m["train_loss"]
        report(f"{model}: training loss falls", min(loss[-5:]) < 0.6 * loss[0],
               f"{loss[0]:.3f} -> {loss[-1]:.3f}")
        keys = {"implementation", "torch_version", "model", "dataset", "num_nodes", "num_edges",
                "threads", "epochs", "epoch_seconds", "epoch_seconds_median",
                "peak_memory_bytes", "train_loss", "hidden", "heads"}
        report(f"{model}: JSON fields", keys <= m.keys() and len(m["epoch_seconds"]) == 50
               and m["implementation"] == "pytorch" and m["peak_memory_bytes"] > 2**20,
               sorted(keys - m.keys()))

    missing = run_peer("--dataset", os.path.join(scratch, "nowhere"), "--model", "gcn")
    report("missing directory: exit 2 and a message",
           missing.returncode == 2 and "not a directory" in missing.stderr, missing.stderr.strip())
    wrong = os.path.join(scratch, "wrong")
    make_planted(wrong, nodes=100, degree=4, features=4)
    with open(os.path.join(wrong, "meta.json"), "w") as f:
        json.dump({"format": "ogb", "version": 1}, f)
    r = run_peer("--dataset", wrong, "--model", "gcn")
    report("wrong format: exit 2 and a message",
           r.returncode == 2 and "sar-npy-dataset" in r.stderr, r.stderr.strip())
    make_planted(wrong, nodes=100, degree=4, features=4)
    np.save(os.path.join(wrong, "features.npy"), np.zeros((100, 4), np.int32))
    r = run_peer("--dataset", wrong, "--model", "sage")
    report("wrong dtype: exit 2 and a message",
           r.returncode == 2 and "features.npy: dtype int32" in r.stderr, r.stderr.strip())


# ---------------------------------------------------------------------------------------
# 3. The minibatch peer


def check_minibatch_peer(report, scratch):
    import torch_minibatch_peer as mb
    torch = torch_peer.torch
    rng = np.random.default_rng(3)
    n = 60
    degrees = rng.integers(0, 12, n)
    degrees[7] = 10
    neighbours = [np.sort(rng.choice(n, d, replace=False)) for d in degrees]
    indptr = torch.tensor(np.concatenate([[0], np.cumsum(degrees)]), dtype=torch.int64)
    indices = torch.tensor(np.concatenate(neighbours), dtype=torch.int64)
    sampler = mb.NeighbourSampler(indptr, indices, [4, 3], torch.Generator().manual_seed(5))

    destinations = torch.tensor([5, 17, 2, 40, 7, 0], dtype=torch.int64)
    for fanout in (3, -1):
        sources, rows, columns = sampler.block(destinations, fanout)
        bad = []
        if not torch.equal(sources[:destinations.numel()], destinations) or \
                sources.unique().numel() != sources.numel():
            bad.append("sources do not start with the destinations or repeat an id")
        for i, v in enumerate(destinations.tolist()):
            picked = sources[columns[rows == i]].numpy()
            want = degrees[v] if fanout < 0 else min(fanout, degrees[v])
            if picked.size != want or np.unique(picked).size != want or \
                    not np.isin(picked, neighbours[v]).all():
                bad.append(f"node {v}: picks {sorted(picked)} of {list(neighbours[v])}")
        report(f"minibatch peer: block with fanout {fanout}", not bad, "; ".join(bad) or
               "min(fanout, degree) distinct in-neighbours, destinations first")

    draws, counts = 4000, np.zeros(n)
    for _ in range(draws):
        sources, rows, columns = sampler.block(torch.tensor([7]), 3)
        counts[sources[columns].numpy()] += 1
    p = 3 / 10
    z = np.abs(counts[neighbours[7]] - draws * p) / np.sqrt(draws * p * (1 - p))
    report("minibatch peer: inclusion 3/10 within 4 sigma", z.max() < 4, f"max z {z.max():.2f}")

    blocks, inputs = sampler.sample(destinations[:3])
    report("minibatch peer: one block per fanout, seeds first",
           len(blocks) == 2 and blocks[-1][0] == 3 and torch.equal(inputs[:3], destinations[:3]),
           f"{len(blocks)} blocks")

    torch.manual_seed(0)
    worst = 0.0
    for fin, fout in ((3, 5), (6, 2)):
        layer = mb.SAGEBlockLayer(fin, fout).double()
        sources, rows, columns = sampler.block(destinations, 3)
        count = torch.bincount(rows, minlength=destinations.numel()).clamp(min=1)
        x = torch.randn(sources.numel(), fin, dtype=torch.float64)
        got = layer((destinations.numel(), rows, columns, count.double().reciprocal()), x)
        mean = torch.zeros(destinations.numel(), sources.numel(), dtype=torch.float64)
        mean.index_put_((rows, columns), torch.ones(rows.numel(), dtype=torch.float64),
                        accumulate=True)
        mean /= count.double().unsqueeze(1)
        want = (x[:destinations.numel()] @ layer.self_weight + mean @ x @ layer.neighbour_weight
                + layer.bias)
        worst = max(worst, (got - want).abs().max().item())
    report("minibatch peer: block layer equals dense mean", worst < 1e-12, f"max error {worst:.1e}")

    data = os.path.join(scratch, "planted-minibatch")
    make_planted(data, nodes=3000, degree=10, features=32)
    metrics = os.path.join(scratch, "minibatch.json")
    peer = os.path.join(here, "torch_minibatch_peer.py")
    r = subprocess.run(["/usr/bin/python3", peer, "--dataset", data, "--minibatch", "64",
                        "--fanouts", "10,5", "--epochs", "5", "--threads", "1", "--metrics-out",
                        metrics], capture_output=True, text=True)
    if r.returncode != 0:
        report("minibatch peer: 5 epochs", False, r.stderr.strip()[-300:])
    else:
        loss = json.load(open(metrics))["train_loss"]
        report("minibatch peer: training loss falls", loss[-1] < 0.8 * loss[0],
               f"{loss[0]:.3f} -> {loss[-1]:.3f}")
    r = subprocess.run(["/usr/bin/python3", peer, "--dataset", data, "--fanouts", "10,0"],
                       capture_output=True, text=True)
    report("minibatch peer: zero fanout refused", r.returncode == 2 and "--fanouts" in r.stderr,
           r.stderr.strip()[-200:])


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command")
    make = sub.add_parser("make-data", help="write a planted-partition dataset directory")
    make.add_argument("--nodes", type=int, default=200000)
    make.add_argument("--degree", type=int, default=20)
    make.add_argument("--features", type=int, default=128)
    make.add_argument("--classes", type=int, default=8)
    make.add_argument("--seed", type=int, default=1)
    make.add_argument("--out", required=True)
    args = parser.parse_args()
    if args.command == "make-data":
        meta = make_planted(args.out, args.nodes, args.degree, args.features, args.classes,
                            seed=args.seed)
        print(json.dumps(meta))
        return 0

    torch_peer.torch.set_num_threads(1)
    counts = {True: 0, False: 0}

    def report(name, ok, detail):
        counts[bool(ok)] += 1
        print(f"{'ok  ' if ok else 'FAIL'}  {name}  ({detail})", flush=True)

    check_layers(report)
    with tempfile.TemporaryDirectory() as scratch:
        check_cli(report, scratch)
        check_minibatch_peer(report, scratch)
    print(f"{counts[True]} passed, {counts[False]} failed")
    return 0 if counts[False] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
