#!/usr/bin/python3
"""The PyTorch peer of `sar-train --model rgcn`: plain PyTorch on the CPU, as a DGL or PyG user
would write R-GCN without those libraries, training the same model with the same
hyper-parameters on the same heterogeneous sar .npy dataset directory (meta.json with a
"schema", indptr.npy, indices.npy, edge_types.npy, features.npy, labels.npy, split.npy; see
docs/npy-dataset.md and docs/heterogeneous-data.md), and reporting epoch time and peak memory
as sar-train's --metrics-out does (epoch_seconds_median, peak_memory_bytes).

Model (include/sar/train/models.hpp, "rgcn" with paper_defaults):
  projection  h_i = x_i[0, F_t) W_t + b_t for node i of type t (one Glorot F_t x H weight and
              a zero bias per type; a featureless type, F_t = 0, gets b_t alone)
  dropout     0.5 on the first R-GCN layer's input
  L layers    y_i = x_i W_0 + sum_r (1 / c_{i,r}) sum_{j in N_r(i)} x_j W_r + b,
              c_{i,r} = |N_r(i)| (DGL's RelGraphConv norm "right", PyG's RGCNConv mean);
              W_r, W_0 Glorot at the scale of one F_in x F_out matrix, b zeros;
              ReLU and dropout 0.5 between the layers; widths H ... H, then the classes
  loss        cross-entropy averaged over the training nodes
  optimiser   Adam, lr 0.01, weight decay 0 (sar's rgcn defaults; --weight-decay adds L2 to
              every parameter's gradient, as sar's decay_first_layer_only = false does)

The relation sum, --aggregation (all differentiate with torch's own autograd):
  sparse     per relation, torch.sparse.mm with a coalesced COO matrix A_r whose row i holds
             1 / c_{i,r} at each in-neighbour of relation r (built once); the weight first
             when it narrows (the last layer), else aggregated first: A_r (x W_r) or
             (A_r x) W_r. In torch 1.13 (Debian, no MKL) COO is faster than CSR, forward and
             backward (bench/torch_peer.py measured that for GCN).
  index_add  per relation, PyG's RGCNConv way: messages x_j (or x_j W_r when it narrows)
             gathered by index_select over the relation's edges, scaled by 1 / c_{i,r},
             summed by index_add into the destinations.
  fused      one sparse.mm for all relations: x [W_1 | ... | W_R] (n x R F_out) viewed as
             R n rows, and one n x R n COO matrix with 1 / c_{i,r} at (i, R j + r): what a
             user who knows the trick writes (DGL's typed-linear idea).
The default is sparse, the fastest of the per-relation ways here (bench/RESULTS.md section
25 has the numbers).

An epoch is forward + loss + backward + Adam step (model.train(), no evaluation), timed with
time.perf_counter; epoch_seconds_median is the median of the epochs after the --warmup ones.
peak_memory_bytes is the process's ru_maxrss (reading and building the graph included), as
sar-train's. OMP_WAIT_POLICY defaults to PASSIVE here (see below the imports).

Run with Debian's interpreter: /usr/bin/python3 (python3-torch and libopenblas0-pthread:
scripts/install-deps.sh --bench).
"""
import argparse
import json
import math
import os
import resource
import statistics
import sys
import time

# libgomp's threads spin while they wait for work (OMP_WAIT_POLICY active) unless told to
# sleep: on a machine shared with other jobs a spinning thread burns the time slice its
# partner needs, and the 2-thread epoch was 2 to 4x slower than with PASSIVE (measured on the
# 2-core benchmark host under a build). Set before torch loads libgomp; an explicit
# OMP_WAIT_POLICY in the environment wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# torch_peer sets the OpenMP/OpenBLAS thread variables from --threads before it loads torch.
from torch_peer import (PeerError, blas_library, glorot, read_array, read_meta, read_node_data,
                        run, torch, train_epochs, write_metrics, zeros)
import numpy as np
import torch.nn as nn
import torch.nn.functional as F

SPLIT_TRAIN = 1
AGGREGATIONS = ("sparse", "index_add", "fused")


# ---------------------------------------------------------------------------------------
# The dataset directory


def load_dataset(directory):
    """Reads and checks a heterogeneous sar .npy dataset directory (versions 1 to 4).
    Returns a dict of numpy arrays, the schema and meta."""
    meta, meta_path = read_meta(directory, "planted-hetero:nodes=N,authors=A")
    if meta.get("task", "classify") != "classify":
        raise PeerError(f"{meta_path}: task {meta.get('task')!r}; R-GCN here classifies")
    schema = meta.get("schema")
    if not isinstance(schema, dict) or not schema.get("node_types") or not schema.get("relations"):
        raise PeerError(f"{meta_path}: no \"schema\" (a homogeneous dataset: R-GCN needs node "
                        f"types and relations; sar-convert --dataset planted-hetero:...)")
    n, num_edges = meta["num_nodes"], meta["num_edges"]
    names = [t["name"] for t in schema["node_types"]]
    counts = [t["count"] for t in schema["node_types"]]
    widths = [t["feature_dim"] for t in schema["node_types"]]
    if sum(counts) != n or any(w > meta["feature_dim"] or w < 0 for w in widths):
        raise PeerError(f"{meta_path}: the schema's types ({counts} nodes, {widths} features) "
                        f"disagree with {n} nodes and {meta['feature_dim']} features")
    for rel in schema["relations"]:
        if rel["source"] not in names or rel["destination"] not in names:
            raise PeerError(f"{meta_path}: relation {rel} names an unknown node type")

    data = read_node_data(directory, meta)
    edge_types = read_array(directory, "edge_types.npy", "iu", (num_edges,)).astype(np.int64)
    relations = len(schema["relations"])
    if num_edges and (edge_types.min() < 0 or edge_types.max() >= relations):
        raise PeerError(f"{directory}/edge_types.npy: a relation outside [0, {relations})")
    data.update(edge_types=edge_types, type_counts=counts, type_widths=widths, type_names=names,
                num_relations=relations)
    return data


# ---------------------------------------------------------------------------------------
# The graph, built once before training


class RelationalGraph:
    """The in-edges split by relation, with the mean's weights 1 / c_{i,r} per edge, in the
    form --aggregation needs."""

    def __init__(self, indptr, indices, edge_types, num_relations, aggregation):
        n = indptr.shape[0] - 1
        self.n, self.relations, self.aggregation = n, num_relations, aggregation
        dst = torch.repeat_interleave(torch.arange(n), torch.from_numpy(np.diff(indptr)))
        src = torch.from_numpy(indices)
        rel = torch.from_numpy(edge_types)
        # c_{i,r}: the edges of relation r into i.
        key = dst * num_relations + rel
        count = torch.bincount(key, minlength=n * num_relations)
        norm = count.index_select(0, key).to(torch.float32).reciprocal()
        del count
        if aggregation == "fused":
            self.matrix = torch.sparse_coo_tensor(
                torch.stack([dst, src * num_relations + rel]), norm,
                (n, n * num_relations)).coalesce()
            return
        self.per_relation = []
        for r in range(num_relations):
            mask = rel == r
            d, s, w = dst[mask], src[mask], norm[mask]
            if aggregation == "sparse":
                self.per_relation.append(
                    torch.sparse_coo_tensor(torch.stack([d, s]), w, (n, n)).coalesce())
            else:
                self.per_relation.append((d, s, w.unsqueeze(1)))


# ---------------------------------------------------------------------------------------
# Layers and model


class TypeProjection(nn.Module):
    """h_i = x_i[0, F_t) W_t + b_t by the type t of node i (types: consecutive id ranges)."""

    def __init__(self, counts, widths, hidden):
        super().__init__()
        self.counts, self.widths = counts, widths
        self.weights = nn.ParameterList(
            [glorot(w, hidden) if w > 0 else nn.Parameter(torch.empty(0)) for w in widths])
        self.biases = nn.ParameterList([zeros(hidden) for _ in widths])

    def forward(self, x):
        parts, begin = [], 0
        for count, width, weight, bias in zip(self.counts, self.widths, self.weights,
                                              self.biases):
            if width > 0:
                parts.append(torch.addmm(bias, x[begin:begin + count, :width], weight))
            else:
                parts.append(bias.expand(count, -1))
            begin += count
        return torch.cat(parts)


class RGCNLayer(nn.Module):
    """y_i = x_i W_0 + sum_r mean_{j in N_r(i)} x_j W_r + b (free relation weights)."""

    def __init__(self, fin, fout, relations):
        super().__init__()
        self.fin, self.fout, self.relations = fin, fout, relations
        bound = math.sqrt(6.0 / (fin + fout))  # Glorot of one fin x fout matrix, as sar's
        self.weight = nn.Parameter(torch.empty(relations, fin, fout).uniform_(-bound, bound))
        self.loop_weight = glorot(fin, fout)
        self.bias = zeros(fout)

    def forward(self, graph, x):
        y = torch.addmm(self.bias, x, self.loop_weight)
        weight_first = self.fout < self.fin
        if graph.aggregation == "fused":
            # x [W_1 | ... | W_R]: n x R fout, row-major, viewed as R n rows (row R j + r).
            stacked = x @ self.weight.permute(1, 0, 2).reshape(self.fin,
                                                               self.relations * self.fout)
            return y + torch.sparse.mm(graph.matrix, stacked.view(-1, self.fout))
        for r in range(self.relations):
            w = self.weight[r]
            if graph.aggregation == "sparse":
                a = graph.per_relation[r]
                if weight_first:
                    y = y + torch.sparse.mm(a, x @ w)
                else:
                    y = y + torch.sparse.mm(a, x) @ w
            else:
                d, s, norm = graph.per_relation[r]
                h = x @ w if weight_first else x
                messages = h.index_select(0, s) * norm
                summed = torch.zeros(graph.n, h.shape[1], dtype=h.dtype).index_add_(0, d,
                                                                                    messages)
                y = y + (summed if weight_first else summed @ w)
        return y


class RGCN(nn.Module):
    """Type projection -> dropout -> R-GCN -> (ReLU -> dropout -> R-GCN) ..."""

    def __init__(self, counts, widths, relations, hidden, classes, layers, dropout):
        super().__init__()
        self.dropout = dropout
        self.projection = TypeProjection(counts, widths, hidden)
        self.layers = nn.ModuleList(
            [RGCNLayer(hidden, classes if k + 1 == layers else hidden, relations)
             for k in range(layers)])

    def forward(self, graph, x):
        h = F.dropout(self.projection(x), self.dropout, self.training)
        for k, layer in enumerate(self.layers):
            if k > 0:
                h = F.dropout(F.relu(h), self.dropout, self.training)
            h = layer(graph, h)
        return h


def load_sar_parameters(net, path):
    """Copies the parameters of a sar model file (sar-train --model rgcn --save-model; format
    in include/sar/train/model_file.hpp) into net, so that both start alike: with --dropout 0
    the first loss must equal sar-train's (the check that this is the same model)."""
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except OSError as e:
        raise PeerError(f"--init-from {path}: {e}") from None
    if blob[:8] != b"SARMODEL" or len(blob) < 28:
        raise PeerError(f"--init-from {path}: not a sar model file")
    size = int.from_bytes(blob[16:24], "little")
    header = json.loads(blob[24:24 + size])
    if header.get("scalar") != "float32" or header["model"].get("kind") != "rgcn":
        raise PeerError(f"--init-from {path}: not a float32 rgcn model")
    ours = [p for module in [net.projection] for pair in zip(module.weights, module.biases)
            for p in pair if p.numel() > 0]
    for layer in net.layers:
        ours += [layer.weight, layer.loop_weight, layer.bias]
    theirs = header["parameters"]
    if len(theirs) != len(ours):
        raise PeerError(f"--init-from {path}: {len(theirs)} parameters, this model has "
                        f"{len(ours)}")
    offset = 24 + size
    for mine, spec in zip(ours, theirs):
        count = spec["rows"] * spec["cols"]
        if count != mine.numel():
            raise PeerError(f"--init-from {path}: {spec['name']} has {count} values, this "
                            f"model's has {mine.numel()}")
        values = np.frombuffer(blob, dtype="<f4", count=count, offset=offset)
        with torch.no_grad():  # row-major R fin x fout = R x fin x fout
            mine.copy_(torch.from_numpy(values.copy()).view(mine.shape))
        offset += 4 * count


# ---------------------------------------------------------------------------------------
# The command line


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", required=True,
                   help="heterogeneous sar .npy dataset directory (sar-convert --out)")
    p.add_argument("--model", default="rgcn", choices=["rgcn"],
                   help="accepted for sar-train compatibility")
    p.add_argument("--layers", type=int, default=2, help="R-GCN layers (default 2)")
    p.add_argument("--hidden", type=int, default=64, help="hidden width (default 64)")
    p.add_argument("--dropout", type=float, default=0.5)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--aggregation", default="sparse", choices=AGGREGATIONS,
                   help="how the relation sum runs (see above; default sparse)")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--warmup", type=int, default=1,
                   help="epochs left out of the median (default 1)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--seed", type=int, default=0,
                   help="torch.manual_seed (initialisation, dropout)")
    p.add_argument("--metrics-out", help="write the JSON summary to this file")
    p.add_argument("--init-from", help="start from the parameters of this sar model file "
                   "(sar-train --model rgcn --lr 0 --epochs 1 --save-model F): a check")
    args = p.parse_args(argv)
    for name in ("layers", "hidden", "epochs", "threads"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.warmup < 0:
        p.error(f"--warmup must be >= 0, got {args.warmup}")
    if not 0 <= args.dropout < 1:
        p.error(f"--dropout must be in [0, 1), got {args.dropout}")
    return args


def train(args):
    torch.manual_seed(args.seed)
    start = time.perf_counter()
    data = load_dataset(args.dataset)
    meta = data["meta"]
    graph = RelationalGraph(data["indptr"], data["indices"], data["edge_types"],
                            data["num_relations"], args.aggregation)
    x = torch.from_numpy(data["features"])
    labels = torch.from_numpy(data["labels"])
    train_nodes = torch.from_numpy(data["train"])
    train_labels = labels.index_select(0, train_nodes)
    counts, widths, relations = data["type_counts"], data["type_widths"], data["num_relations"]
    types = ", ".join(f"{name} {c} x {w}" for name, c, w in
                      zip(data["type_names"], counts, widths))
    del data
    print(f"torch_rgcn_peer: {meta.get('name', args.dataset)}: {meta['num_nodes']} nodes "
          f"({types}), {meta['num_edges']} edges, {relations} relations, "
          f"{meta['num_classes']} classes, {train_nodes.numel()} training nodes; loaded and "
          f"built in {time.perf_counter() - start:.2f} s; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, aggregation {args.aggregation}, "
          f"BLAS {blas_library()}", flush=True)
    if "/blas/libblas" in blas_library():
        print("torch_rgcn_peer: warning: the reference BLAS is loaded (matmuls ~10x slower "
              "than OpenBLAS): apt-get install libopenblas0-pthread", file=sys.stderr,
              flush=True)

    net = RGCN(counts, widths, relations, args.hidden, meta["num_classes"], args.layers,
               args.dropout)
    if args.init_from:
        load_sar_parameters(net, args.init_from)
    optimiser = torch.optim.Adam(net.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    seconds, losses = train_epochs(net, optimiser, graph, x, train_nodes, train_labels,
                                   args.epochs)

    timed = seconds[args.warmup:] or seconds
    metrics = {
        "implementation": "pytorch",
        "torch_version": torch.__version__,
        "model": "rgcn",
        "aggregation": args.aggregation,
        "dataset": meta.get("name", os.path.basename(os.path.normpath(args.dataset))),
        "num_nodes": meta["num_nodes"],
        "num_edges": meta["num_edges"],
        "num_relations": relations,
        "threads": torch.get_num_threads(),
        "layers": args.layers,
        "hidden": args.hidden,
        "epochs": args.epochs,
        "warmup": args.warmup,
        "epoch_seconds": seconds,
        "epoch_seconds_median": statistics.median(timed),
        "peak_memory_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "train_loss": losses,
        "seed": args.seed,
        "blas": blas_library(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
    }
    print(f"torch_rgcn_peer: median epoch {metrics['epoch_seconds_median']:.4f} s "
          f"(of {len(timed)}), peak memory {metrics['peak_memory_bytes'] / 2**20:.1f} MiB",
          flush=True)
    write_metrics(args.metrics_out, metrics)
    return metrics


def main(argv=None):
    return run("torch_rgcn_peer.py", train, parse_args(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
