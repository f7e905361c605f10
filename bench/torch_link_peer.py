#!/usr/bin/python3
"""The PyTorch peer of sar-train --task link: plain PyTorch on the CPU training the same
encoder (torch_peer.py's GCN or GraphSAGE with sar-train --task link's defaults: the paper's
widths and learning rate, no dropout, no weight decay; output width = hidden) with a
dot-product decoder on the same link split (a sar .npy dataset directory with split/NAME/,
written by sar-convert --split-edges; docs/link-prediction.md), and reporting the same
figures as sar-train's --metrics-out.

Each epoch: forward on the message-passing graph, scores of every train edge and of K
negatives per edge (its source with a destination uniform over the nodes, torch.randint),
binary cross-entropy with logits averaged over all those pairs, backward, Adam. After each
epoch an evaluation forward and, as OGB's evaluators compute them: AUC (ties half), Hits@K
against the shared negatives (above the K-th highest negative score), MRR against the
per-source negatives (ties half). The test figures are those of the epoch with the best
validation Hits@50 (or --select-by). Features are row-normalised when none is negative, as
sar-train's --normalise-features auto does. --sparse-features trains on them as a torch sparse
COO tensor (the first layer's x W by torch.sparse.mm), as torch_peer.py does.

  /usr/bin/python3 bench/torch_link_peer.py --dataset cora-links --model gcn --epochs 100
"""
import argparse
import json
import os
import resource
import statistics
import sys
import time

import torch_peer  # sets the thread counts from --threads before numpy and torch load
from torch_peer import np, torch, F, PeerError


def read_pairs(path, columns=2):
    array = np.load(path)
    if array.dtype != np.int64 or array.ndim != 2 or (columns and array.shape[1] != columns):
        raise PeerError(f"{path}: expected int64 [n, {columns}], got {array.dtype} {array.shape}")
    return torch.from_numpy(array)


def figures(positive, shared, own, hits_at):
    """AUC, Hits@K and MRR as OGB computes them (see the top of this file)."""
    out = {}
    order = torch.sort(shared).values
    below = torch.searchsorted(order, positive, right=False).double()
    equal = torch.searchsorted(order, positive, right=True).double() - below
    out["auc"] = float((below + 0.5 * equal).sum() / (positive.numel() * shared.numel()))
    for k in hits_at:
        if shared.numel() < k:
            out[f"hits@{k}"] = 1.0
        else:
            kth = torch.topk(shared, k).values[-1]
            out[f"hits@{k}"] = float((positive > kth).double().mean())
    if own is not None:
        above = (own > positive[:, None]).sum(1).double()
        ties = (own == positive[:, None]).sum(1).double()
        out["mrr"] = float((1.0 / (1 + above + 0.5 * ties)).mean())
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", required=True)
    p.add_argument("--split", default="random")
    p.add_argument("--model", default="gcn", choices=["gcn", "sage"])
    p.add_argument("--hidden", type=int)
    p.add_argument("--epochs", type=int, default=100)
    p.add_argument("--negatives", type=int, default=1)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--select-by", default="hits@50")
    p.add_argument("--eval-every", type=int, default=1,
                   help="evaluate after every N-th epoch and the last (as sar-train)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--metrics-out")
    p.add_argument("--sparse-features", action="store_true",
                   help="the features as a sparse COO tensor (torch.sparse.mm in the first layer)")
    args = p.parse_args(argv)
    torch.manual_seed(args.seed)
    settings = dict(torch_peer.DEFAULTS[args.model])
    settings["dropout"], settings["weight_decay"] = args.dropout, args.weight_decay
    hidden = args.hidden or settings["hidden"]
    data = torch_peer.load_dataset(args.dataset)
    x = torch.from_numpy(data["features"])
    if x.min() >= 0:
        sums = x.sum(1, keepdim=True)
        x = torch.where(sums > 0, x / torch.where(sums > 0, sums, torch.ones_like(sums)), x)
    n, width = x.shape
    if args.sparse_features:
        x = torch_peer.SparseFeatures(x.numpy(), width)
    graph = torch_peer.build_graph(args.model, data["indptr"], data["indices"])
    folder = os.path.join(args.dataset, "split", args.split)
    train = read_pairs(os.path.join(folder, "train_edge.npy"))
    held = {}
    for part in ("valid", "test"):
        own_path = os.path.join(folder, f"{part}_target_node_neg.npy")
        held[part] = (read_pairs(os.path.join(folder, f"{part}_edge.npy")),
                      read_pairs(os.path.join(folder, f"{part}_edge_neg.npy")),
                      read_pairs(own_path, 0) if os.path.exists(own_path) else None)
    net = torch_peer.Net(args.model, width, hidden, hidden, settings["heads"],
                         settings["dropout"], settings["attention_dropout"])
    optimiser = torch_peer.make_optimiser(net, settings)
    hits_at = (20, 50, 100)

    def score(h, src, dst):
        return (h[src] * h[dst]).sum(-1)

    history, seconds, best = [], [], None
    for epoch in range(args.epochs):
        start = time.perf_counter()
        net.train()
        optimiser.zero_grad()
        h = net(graph, x)
        src = train[:, 0].repeat_interleave(args.negatives)
        negatives = torch.randint(0, n, (src.numel(),))
        logits = torch.cat([score(h, train[:, 0], train[:, 1]), score(h, src, negatives)])
        labels = torch.cat([torch.ones(train.shape[0]), torch.zeros(src.numel())])
        loss = F.binary_cross_entropy_with_logits(logits, labels)
        loss.backward()
        optimiser.step()
        seconds.append(time.perf_counter() - start)
        history.append(float(loss))
        if (epoch + 1) % args.eval_every != 0 and epoch + 1 != args.epochs:
            continue
        net.eval()
        with torch.no_grad():
            h = net(graph, x)
            result = {}
            for part, (positive, shared, own) in held.items():
                own_scores = None
                if own is not None:
                    own_scores = score(h, positive[:, 0].unsqueeze(1).expand_as(own), own)
                result[part] = figures(score(h, positive[:, 0], positive[:, 1]).double(),
                                       score(h, shared[:, 0], shared[:, 1]).double(),
                                       None if own_scores is None else own_scores.double(),
                                       hits_at)
        if best is None or result["valid"][args.select_by] > best[1]["valid"][args.select_by]:
            best = (epoch, result)
    metrics = {"dataset": args.dataset, "model": args.model, "task": "link", "decoder": "dot",
               "peer": "pytorch", "seed": args.seed, "best_epoch": best[0],
               "train_loss": history,
               "epoch_seconds_median": statistics.median(seconds[1:] or seconds),
               "peak_memory_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    for part in ("valid", "test"):
        for key, value in best[1][part].items():
            metrics[f"{part}_{key}"] = value
    text = json.dumps(metrics, indent=2)
    if args.metrics_out:
        with open(args.metrics_out, "w") as f:
            f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    try:
        main()
    except PeerError as e:
        sys.exit(f"torch_link_peer.py: error: {e}")
