#!/usr/bin/python3
"""The PyTorch peer of sar-train --minibatch: plain PyTorch on the CPU that samples every
minibatch with torch operations (the way a DGL/PyG user's node-wise neighbour sampler works)
and trains the same GraphSAGE model, with the same hyper-parameters, on the same sar .npy
dataset directory (sar-convert --out; docs/npy-dataset.md), reporting epoch time and peak
memory as sar-train's --metrics-out does.

An epoch: the training nodes in a random order, cut into minibatches of --minibatch seeds;
per minibatch, from the seeds down, one sampled block per layer (each destination draws
min(fanout, in-degree) distinct in-neighbours uniformly; the block's sources are its
destinations followed by the new neighbours, DGL's block layout), the feature rows of the
input level gathered, forward + cross-entropy over the seeds + backward + Adam step. No
evaluation is timed (sar-train's epoch_seconds leaves it out too).

Sampling, vectorised: every candidate edge of the level gets a uniform key; one sort by
(row, key) puts each row's edges in random order and the first min(fanout, degree) are its
picks. Sources are numbered through one n-entry lookup table kept across levels (reset after
use).

Model (include/sar/train/models.hpp, GraphSAGE mean, paper_defaults): dropout 0.5 on the
input of every layer, out_i = x_i W_self + mean_{j picked} x_j W_nbr + b, ReLU between the
layers, hidden 64, Adam lr 0.01 with L2 weight decay 5e-4 on everything. The mean is
index_add over the picked edges divided by the pick count, applied before or after the
neighbour weight, whichever does fewer multiply-adds (DGL's SAGEConv rule, on the block).

Run with Debian's interpreter: /usr/bin/python3 (python3-torch, libopenblas0-pthread).
"""
import argparse
import math
import os
import resource
import statistics
import sys
import time

# torch_peer sets the thread variables from --threads before it loads torch.
from torch_peer import (DEFAULTS, PeerError, blas_library, glorot, load_dataset, run, torch,
                        write_metrics, zeros)
import torch.nn as nn
import torch.nn.functional as F


class NeighbourSampler:
    """Node-wise uniform sampling without replacement over an in-edge CSR (torch tensors)."""

    def __init__(self, indptr, indices, fanouts, generator):
        self.indptr, self.indices, self.fanouts = indptr, indices, fanouts
        self.generator = generator
        self.position = torch.full((indptr.numel() - 1,), -1, dtype=torch.int64)

    def block(self, destinations, fanout):
        """(sources, rows, columns): sources = destinations then new neighbours; edge k goes
        from sources[columns[k]] into destinations[rows[k]]."""
        starts = self.indptr.index_select(0, destinations)
        degrees = self.indptr.index_select(0, destinations + 1) - starts
        rows = torch.repeat_interleave(torch.arange(destinations.numel()), degrees)
        first = torch.cumsum(degrees, 0) - degrees  # first candidate edge of each row
        within = torch.arange(rows.numel()) - first.index_select(0, rows)
        if fanout >= 0:
            keys = torch.rand(rows.numel(), generator=self.generator, dtype=torch.float64)
            order = torch.argsort(rows.to(torch.float64) + keys)  # row-major, random within
            rows = rows.index_select(0, order)
            within_shuffled = within.index_select(0, order)
            rank = torch.arange(rows.numel()) - first.index_select(0, rows)
            keep = rank < fanout
            rows, within = rows[keep], within_shuffled[keep]
        neighbours = self.indices.index_select(0, starts.index_select(0, rows) + within)

        position = self.position
        position[destinations] = torch.arange(destinations.numel())
        candidates = torch.unique(neighbours)
        new = candidates[position.index_select(0, candidates) < 0]
        position[new] = torch.arange(destinations.numel(), destinations.numel() + new.numel())
        columns = position.index_select(0, neighbours)
        sources = torch.cat([destinations, new])
        position[sources] = -1
        return sources, rows, columns

    def sample(self, seeds):
        """The blocks of one minibatch, input layer first, and the input level's node ids."""
        blocks, level = [], seeds
        for fanout in reversed(self.fanouts):
            sources, rows, columns = self.block(level, fanout)
            count = torch.bincount(rows, minlength=level.numel()).clamp(min=1)
            blocks.append((level.numel(), rows, columns, count.to(torch.float32).reciprocal()))
            level = sources
        return list(reversed(blocks)), level


class SAGEBlockLayer(nn.Module):
    def __init__(self, fin, fout):
        super().__init__()
        self.self_weight = glorot(fin, fout)
        self.neighbour_weight = glorot(fin, fout)
        self.bias = zeros(fout)

    def forward(self, block, x):
        destinations, rows, columns, inverse_count = block
        fin, fout = self.neighbour_weight.shape
        edges = rows.numel()

        def mean(h):
            summed = torch.zeros(destinations, h.shape[1], dtype=h.dtype).index_add_(
                0, rows, h.index_select(0, columns))
            return summed * inverse_count.unsqueeze(1)

        if x.shape[0] * fin * fout + edges * fout < edges * fin + destinations * fin * fout:
            neighbours = mean(x @ self.neighbour_weight)
        else:
            neighbours = mean(x) @ self.neighbour_weight
        return x[:destinations] @ self.self_weight + neighbours + self.bias


class Net(nn.Module):
    def __init__(self, fin, hidden, classes, layers, dropout):
        super().__init__()
        widths = [fin] + [hidden] * (layers - 1) + [classes]
        self.layers = nn.ModuleList(SAGEBlockLayer(a, b) for a, b in zip(widths, widths[1:]))
        self.dropout = dropout

    def forward(self, blocks, x):
        for k, (layer, block) in enumerate(zip(self.layers, blocks)):
            x = layer(block, F.dropout(x, self.dropout, self.training))
            if k + 1 < len(self.layers):
                x = F.relu(x)
        return x


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", required=True,
                   help="sar .npy dataset directory (sar-convert --out)")
    p.add_argument("--fanouts", default="15,10,5",
                   help="in-neighbours per node per layer, from the input (-1: all)")
    p.add_argument("--minibatch", type=int, default=1024, help="seeds per minibatch")
    p.add_argument("--hidden", type=int, default=DEFAULTS["sage"]["hidden"])
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--warmup", type=int, default=0,
                   help="epochs left out of the median (default 0)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--seed", type=int, default=0,
                   help="torch.manual_seed (initialisation, order, samples, dropout)")
    p.add_argument("--metrics-out", help="write the JSON summary to this file")
    args = p.parse_args(argv)
    try:
        args.fanouts = [int(f) for f in args.fanouts.split(",")]
    except ValueError:
        p.error(f"--fanouts {args.fanouts!r}: expected integers separated by commas")
    if not args.fanouts or any(f == 0 or f < -1 for f in args.fanouts):
        p.error(f"--fanouts {args.fanouts}: each must be >= 1 or -1")
    for name in ("minibatch", "hidden", "epochs", "threads"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.warmup < 0 or args.warmup >= args.epochs:
        p.error(f"--warmup must be in [0, --epochs), got {args.warmup}")
    return args


def train(args):
    settings = DEFAULTS["sage"]
    torch.manual_seed(args.seed)
    generator = torch.Generator().manual_seed(args.seed + 1)
    start = time.perf_counter()
    data = load_dataset(args.dataset)
    meta = data["meta"]
    indptr, indices = torch.from_numpy(data["indptr"]), torch.from_numpy(data["indices"])
    x_all = torch.from_numpy(data["features"])
    labels = torch.from_numpy(data["labels"])
    train_nodes = torch.from_numpy(data["train"])
    del data
    print(f"torch_minibatch_peer: {meta.get('name', args.dataset)}: {meta['num_nodes']} nodes, "
          f"{meta['num_edges']} edges, {x_all.shape[1]} features, {meta['num_classes']} "
          f"classes, {train_nodes.numel()} training nodes; loaded in "
          f"{time.perf_counter() - start:.2f} s; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, BLAS {blas_library()}", flush=True)

    sampler = NeighbourSampler(indptr, indices, args.fanouts, generator)
    net = Net(x_all.shape[1], args.hidden, meta["num_classes"], len(args.fanouts),
              settings["dropout"])
    optimiser = torch.optim.Adam(net.parameters(), lr=settings["lr"],
                                 weight_decay=settings["weight_decay"])
    net.train()
    seconds, sampling, gather, losses = [], [], [], []
    for epoch in range(1, args.epochs + 1):
        start = time.perf_counter()
        sampled = gathered = loss_sum = 0.0
        order = train_nodes[torch.randperm(train_nodes.numel(), generator=generator)]
        for seeds in torch.split(order, args.minibatch):
            t = time.perf_counter()
            blocks, inputs = sampler.sample(seeds)
            sampled += time.perf_counter() - t
            t = time.perf_counter()
            x = x_all.index_select(0, inputs)
            y = labels.index_select(0, seeds)
            gathered += time.perf_counter() - t
            optimiser.zero_grad(set_to_none=True)
            loss = F.cross_entropy(net(blocks, x), y)
            loss.backward()
            optimiser.step()
            loss_sum += loss.item() * seeds.numel()
        seconds.append(time.perf_counter() - start)
        sampling.append(sampled)
        gather.append(gathered)
        losses.append(loss_sum / train_nodes.numel())
        if not math.isfinite(losses[-1]):
            raise PeerError(f"epoch {epoch}: training loss is {losses[-1]}")
        print(f"epoch {epoch:4d}  loss {losses[-1]:.4f}  time {seconds[-1]:.2f}s  (sampling "
              f"{sampled:.2f} s, gather {gathered:.2f} s)", flush=True)

    def timed(values):
        return statistics.median(values[args.warmup:])

    metrics = {
        "implementation": "pytorch",
        "torch_version": torch.__version__,
        "model": "sage",
        "dataset": meta.get("name", os.path.basename(os.path.normpath(args.dataset))),
        "num_nodes": meta["num_nodes"],
        "num_edges": meta["num_edges"],
        "threads": torch.get_num_threads(),
        "fanouts": args.fanouts,
        "minibatch": args.minibatch,
        "epochs": args.epochs,
        "warmup": args.warmup,
        "epoch_seconds": seconds,
        "epoch_seconds_median": timed(seconds),
        "sampling_seconds_median": timed(sampling),
        "gather_seconds_median": timed(gather),
        "peak_memory_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "train_loss": losses,
        "hidden": args.hidden,
        "seed": args.seed,
        "blas": blas_library(),
    }
    print(f"torch_minibatch_peer: median epoch {metrics['epoch_seconds_median']:.2f} s, peak "
          f"memory {metrics['peak_memory_bytes'] / 2**20:.1f} MiB", flush=True)
    write_metrics(args.metrics_out, metrics)
    return metrics


def main(argv=None):
    return run("torch_minibatch_peer.py", train,
               parse_args(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
