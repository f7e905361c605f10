#!/usr/bin/python3
"""The PyTorch peer of sar-train --task graph-classify: plain PyTorch on the CPU, batching
graphs as PyG's DataLoader does (a minibatch is one block-diagonal graph, its edges
concatenated with node offsets; a batch vector maps nodes to graphs), training the model
sar/train/graph_level.hpp builds for --model gin, on the same TU dataset and split folder.

Model (layers L, hidden h, optional batch norm, dropout d; as sar-train with input dropout 0):
  GIN layer k: z = x W1 (no bias); z = (1 + eps) z + sum_{j -> i} z_j + b1; relu; z W2 + b2
  (the last layer's output h wide); between layers batch norm (then W2 has no bias), relu and
  dropout d; after the last: relu, sum readout per graph, then Linear(h, h), relu, dropout d,
  Linear(h, classes). Weights Glorot-uniform, biases and eps zero, as sar initialises them.
Training: each epoch the training graphs in a random order, minibatches of --batch-graphs,
cross-entropy averaged over the minibatch's graphs, Adam (lr 0.01, no weight decay). After each
epoch the validation and test graphs in evaluation mode; the test accuracy reported is that of
the epoch with the best validation accuracy (ties: lower validation loss), as sar-train does.
An epoch's time is its training (batching, forward, backward, step); peak memory is ru_maxrss.

  /usr/bin/python3 bench/torch_graph_peer.py --dataset NCI1 --split fold0 --epochs 100 \\
      --metrics-out out.json
"""
import argparse
import os
import resource
import statistics
import sys
import time

import torch_peer  # sets the thread counts from --threads before numpy and torch load
from torch_peer import np, torch, F, run, write_metrics


def read_tu(directory):
    """Edges (source, destination; self-loops dropped, duplicates merged), one-hot node labels,
    the graph of each node and the graph labels 0..C-1, as sar's TU reader makes them."""
    name = os.path.basename(os.path.normpath(directory))
    path = lambda stem: os.path.join(directory, f"{name}_{stem}")
    indicator = np.loadtxt(path("graph_indicator.txt"), dtype=np.int64) - 1
    a = np.loadtxt(path("A.txt"), dtype=np.int64, delimiter=",").reshape(-1, 2) - 1
    a = a[a[:, 0] != a[:, 1]]
    a = np.unique(a, axis=0)
    labels = np.loadtxt(path("node_labels.txt"), dtype=np.int64).reshape(len(indicator), -1)
    columns = [np.eye(labels[:, c].max() - labels[:, c].min() + 1, dtype=np.float32)[
        labels[:, c] - labels[:, c].min()] for c in range(labels.shape[1])]
    features = np.concatenate(columns, axis=1)
    graph_labels = np.loadtxt(path("graph_labels.txt"), dtype=np.int64)
    _, graph_labels = np.unique(graph_labels, return_inverse=True)
    return a, features, indicator, graph_labels


class GIN(torch.nn.Module):
    def __init__(self, features, hidden, classes, layers, batch_norm, dropout):
        super().__init__()
        self.layers, self.dropout = layers, dropout
        self.w1 = torch.nn.ModuleList()
        self.w2 = torch.nn.ModuleList()
        self.eps = torch.nn.ParameterList()
        self.b1 = torch.nn.ParameterList()
        self.norms = torch.nn.ModuleList()
        width = features
        for k in range(layers):
            last = k + 1 == layers
            self.w1.append(torch.nn.Linear(width, hidden, bias=False))
            self.eps.append(torch.nn.Parameter(torch.zeros(1)))
            self.b1.append(torch.nn.Parameter(torch.zeros(hidden)))
            self.w2.append(torch.nn.Linear(hidden, hidden, bias=last or not batch_norm))
            if batch_norm and not last:
                self.norms.append(torch.nn.BatchNorm1d(hidden, momentum=0.1, eps=1e-5))
            width = hidden
        self.head0 = torch.nn.Linear(hidden, hidden)
        self.head1 = torch.nn.Linear(hidden, classes)
        for m in self.modules():
            if isinstance(m, torch.nn.Linear):
                torch.nn.init.xavier_uniform_(m.weight)
                if m.bias is not None:
                    torch.nn.init.zeros_(m.bias)

    def forward(self, x, source, destination, batch, graphs):
        for k in range(self.layers):
            z = self.w1[k](x)
            z = (1 + self.eps[k]) * z + torch.zeros_like(z).index_add_(0, destination, z[source])
            z = torch.relu(z + self.b1[k])
            x = self.w2[k](z)
            if k + 1 < self.layers:
                if len(self.norms):
                    x = self.norms[k](x)
                x = F.dropout(torch.relu(x), self.dropout, self.training)
        x = torch.relu(x)
        pooled = torch.zeros(graphs, x.shape[1]).index_add_(0, batch, x)
        h = F.dropout(torch.relu(self.head0(pooled)), self.dropout, self.training)
        return self.head1(h)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", required=True, help="a TU dataset directory")
    parser.add_argument("--split", required=True, help="a folder of its split/")
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--batch-graphs", type=int, default=32)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--dropout", type=float, default=0.5)
    parser.add_argument("--batch-norm", action="store_true")
    parser.add_argument("--learning-rate", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--metrics-out")
    return parser.parse_args(argv)


def train(args):
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)

    edges, features, indicator, graph_labels = read_tu(args.dataset)
    num_graphs = len(graph_labels)
    offsets = np.zeros(num_graphs + 1, dtype=np.int64)
    np.add.at(offsets, indicator + 1, 1)
    offsets = np.cumsum(offsets)
    edge_graph = indicator[edges[:, 0]]
    order = np.argsort(edge_graph, kind="stable")
    edges, edge_graph = edges[order], edge_graph[order]
    edge_offsets = np.searchsorted(edge_graph, np.arange(num_graphs + 1))
    split = {part: np.load(os.path.join(args.dataset, "split", args.split, part + ".npy"))
             for part in ("train", "valid", "test")}
    x_all = torch.from_numpy(features)
    y_all = torch.from_numpy(graph_labels)

    def collate(graphs):
        """The block-diagonal minibatch of `graphs` (PyG's Batch.from_data_list)."""
        xs, sources, destinations, batch = [], [], [], []
        start = 0
        for b, g in enumerate(graphs):
            n = offsets[g + 1] - offsets[g]
            xs.append(x_all[offsets[g]:offsets[g + 1]])
            e = edges[edge_offsets[g]:edge_offsets[g + 1]] - offsets[g] + start
            sources.append(e[:, 0])
            destinations.append(e[:, 1])
            batch.append(np.full(n, b, dtype=np.int64))
            start += n
        return (torch.cat(xs), torch.from_numpy(np.concatenate(sources)),
                torch.from_numpy(np.concatenate(destinations)),
                torch.from_numpy(np.concatenate(batch)), len(graphs), y_all[graphs])

    model = GIN(features.shape[1], args.hidden, int(graph_labels.max()) + 1, args.layers,
                args.batch_norm, args.dropout)
    optimiser = torch.optim.Adam(model.parameters(), lr=args.learning_rate)

    def evaluate(graphs):
        model.eval()
        loss, correct = 0.0, 0
        with torch.no_grad():
            for first in range(0, len(graphs), args.batch_graphs):
                x, s, d, batch, count, y = collate(graphs[first:first + args.batch_graphs])
                out = model(x, s, d, batch, count)
                loss += F.cross_entropy(out, y, reduction="sum").item()
                correct += (out.argmax(1) == y).sum().item()
        return loss / len(graphs), correct / len(graphs)

    history, seconds = [], []
    best = None
    for epoch in range(args.epochs):
        model.train()
        started = time.perf_counter()
        order = rng.permutation(split["train"])
        total = 0.0
        batches = range(0, len(order), args.batch_graphs)
        for first in batches:
            x, s, d, batch, count, y = collate(order[first:first + args.batch_graphs])
            optimiser.zero_grad()
            loss = F.cross_entropy(model(x, s, d, batch, count), y)
            loss.backward()
            optimiser.step()
            total += loss.item() / len(batches)
        seconds.append(time.perf_counter() - started)
        valid_loss, valid_acc = evaluate(split["valid"])
        _, test_acc = evaluate(split["test"])
        history.append(total)
        if best is None or valid_acc > best[1] or (valid_acc == best[1] and valid_loss < best[2]):
            best = (epoch, valid_acc, valid_loss, test_acc)
    metrics = {"peer": "torch", "torch_version": torch.__version__, "threads": args.threads,
               "dataset": os.path.basename(os.path.normpath(args.dataset)), "split": args.split,
               "epochs": args.epochs, "train_loss": history, "best_epoch": best[0],
               "best_val_acc": best[1], "test_acc": best[3],
               "epoch_seconds_median": statistics.median(seconds),
               "peak_memory_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    print(f"torch_graph_peer: test acc {best[3]:.4f} at epoch {best[0]}, median epoch "
          f"{metrics['epoch_seconds_median']:.3f} s", flush=True)
    write_metrics(args.metrics_out, metrics)
    return metrics


if __name__ == "__main__":
    sys.exit(run("torch_graph_peer.py", train, parse_args(sys.argv[1:])))
