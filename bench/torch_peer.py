#!/usr/bin/python3
"""The PyTorch peer of sar-train: plain PyTorch on the CPU (torch.sparse aggregation, the way
DGL/PyG users train full-batch on a CPU) training the same 2-layer models, with the same
hyper-parameters, on the same sar .npy dataset directory (meta.json, indptr.npy, indices.npy,
features.npy, labels.npy, split.npy; see docs/npy-dataset.md), and reporting epoch time and
peak memory in the same way as sar-train's --metrics-out.

Models (as include/sar/train/models.hpp builds them; dropout on the input of every layer,
the activation between the layers, cross-entropy averaged over the training nodes, Adam with
L2 weight decay added to the gradient):
  gcn   out = D^-1/2 (A + I) D^-1/2 X W + b (exactly one self-loop per node; destination side
        in-degree, source side out-degree), ReLU, dropout 0.5, lr 0.01, decay 5e-4 on the
        first layer's weight only
  sage  out_i = x_i W_self + mean_{j in N_in(i)} x_j W_nbr + b (graph as stored; no
        in-neighbour: mean 0), ReLU, dropout 0.5, lr 0.01, decay 5e-4 on everything
  gat   K heads concatenated (ELU), then 1 head; exactly one self-loop per node;
        e_ij = LeakyReLU_0.2(<a_l, z_j> + <a_r, z_i>), softmax over the in-neighbours j of i,
        attention dropout 0.6, dropout 0.6, lr 0.005, decay 5e-4 on everything
GCN and SAGE aggregate with torch.sparse.mm on a coalesced COO matrix built once (in torch
1.13 without MKL it is faster than CSR, forward and backward); W is applied before
aggregating when the layer narrows (as sar and DGL do). GAT is PyG's GATConv on CPU:
per-edge tensors by index_select, softmax by scatter_reduce('amax') / exp / index_add, the
weighted sum by index_add (torch.sparse.mm with the attention values as a sparse operand
differentiates through a dense n x n matrix in torch 1.13).

--sparse-features trains on the features as a sparse matrix, as a plain PyTorch user with
bag-of-words features would: a coalesced COO tensor (from the directory's sparse arrays, or
features.npy made sparse), input dropout on its stored values (F.dropout on the values, the
structure kept, as sar does), and the first layer's x W as torch.sparse.mm(x, W) (each
weight of SAGE's first layer its own product; the weight always first). Without it a
directory with sparse features is refused.

An epoch is model.train() forward + loss + backward + Adam step, timed with
time.perf_counter; no evaluation. epoch_seconds_median is the median of the epochs after the
--warmup ones. peak_memory_bytes is the process's ru_maxrss (includes loading), as sar's.

Run with Debian's interpreter: /usr/bin/python3 (python3-torch). Install libopenblas0-pthread
too: Debian's torch calls the system libblas.so.3, and the reference BLAS is ~10x slower.
"""
import argparse
import functools
import json
import math
import os
import resource
import statistics
import sys
import time
import warnings


def threads_from_command_line(argv):
    """--threads of argv (default: all cores), read before the imports below."""
    early = argparse.ArgumentParser(add_help=False)
    early.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    threads = early.parse_known_args(argv)[0].threads
    return threads if threads >= 1 else 1


# OpenMP and OpenBLAS read their thread counts when numpy and torch load them (also for the
# sibling scripts that import this module: their command lines take --threads as well).
if "torch" not in sys.modules:
    for variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[variable] = str(threads_from_command_line(sys.argv[1:]))
try:
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:
    sys.exit(f"torch_peer.py: error: {e}: run with /usr/bin/python3 and Debian's "
             f"python3-torch (apt-get install python3-torch libopenblas0-pthread)")
warnings.filterwarnings("ignore", message="scatter_reduce.. is in beta")
warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")

# sar-train's defaults (sar::paper_defaults) per model.
DEFAULTS = {
    "gcn": {"hidden": 16, "heads": 1, "dropout": 0.5, "attention_dropout": 0.0, "lr": 0.01,
            "weight_decay": 5e-4, "decay_first_layer_only": True},
    "sage": {"hidden": 64, "heads": 1, "dropout": 0.5, "attention_dropout": 0.0, "lr": 0.01,
             "weight_decay": 5e-4, "decay_first_layer_only": False},
    "gat": {"hidden": 8, "heads": 8, "dropout": 0.6, "attention_dropout": 0.6, "lr": 0.005,
            "weight_decay": 5e-4, "decay_first_layer_only": False},
}
SPLIT_TRAIN = 1


class PeerError(Exception):
    """A user-facing error: printed without a traceback, exit status 2."""


def blas_library():
    """The BLAS shared library this process has mapped (what torch's matmuls call)."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "blas" in line.split()[-1]}
    except OSError:
        return "unknown"
    return ", ".join(sorted(paths)) or "unknown"


# ---------------------------------------------------------------------------------------
# The dataset directory


def read_meta(directory, example, sparse_features=False):
    """The checked meta.json of the sar .npy dataset directory `directory` (versions 1 to 4;
    `example`: a sar-convert --dataset spec named when the directory is missing), and its path.
    Sparse features are refused unless `sparse_features`. Raises PeerError naming the file and
    the first bad field."""
    if not os.path.isdir(directory):
        raise PeerError(f"{directory}: not a directory (write one with sar-convert --dataset "
                        f"{example} --out DIR)")
    meta_path = os.path.join(directory, "meta.json")
    try:
        with open(meta_path) as f:
            meta = json.load(f)
    except FileNotFoundError:
        raise PeerError(f"{meta_path}: missing (not a sar .npy dataset directory)") from None
    except (OSError, ValueError) as e:
        raise PeerError(f"{meta_path}: cannot read: {e}") from None
    if not isinstance(meta, dict):
        raise PeerError(f"{meta_path}: not a JSON object")
    if meta.get("format") != "sar-npy-dataset":
        raise PeerError(f"{meta_path}: format is {meta.get('format')!r}, "
                        f"expected 'sar-npy-dataset'")
    if meta.get("version") not in (1, 2, 3, 4):
        raise PeerError(f"{meta_path}: version {meta.get('version')!r}, expected 1 to 4")
    if meta.get("sparse_features") and not sparse_features:  # version 4's sparse rows
        raise PeerError(f"{meta_path}: the features are stored sparse; the peer reads dense "
                        f"features.npy (sar-convert --sparse-features off) unless given "
                        f"--sparse-features")
    for key in ("num_nodes", "num_edges", "feature_dim", "num_classes"):
        if not isinstance(meta.get(key), int) or meta[key] < 0:
            raise PeerError(f"{meta_path}: '{key}' is {meta.get(key)!r}, expected an integer >= 0")
    return meta, meta_path


def read_array(directory, name, kind, shape):
    """The .npy array `name` of `directory`, checked: its dtype kind is one of `kind` (numpy's
    letters) and its shape is `shape`. Raises PeerError naming the file otherwise."""
    path = os.path.join(directory, name)
    if not os.path.exists(path):
        raise PeerError(f"{path}: missing (training reads it; docs/npy-dataset.md)")
    try:
        a = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise PeerError(f"{path}: not a readable .npy file: {e}") from None
    if a.dtype.kind not in kind:
        expected = "an integer" if "i" in kind else "a floating-point"
        raise PeerError(f"{path}: dtype {a.dtype}, expected {expected} type")
    if a.shape != shape:
        raise PeerError(f"{path}: shape {a.shape}, meta.json implies {shape}")
    return a


def read_sparse_features(directory, meta):
    """The sparse features of the dataset `directory` (features_indptr.npy,
    features_indices.npy, features_data.npy; docs/npy-dataset.md) as a tuple (indptr int64,
    indices int64, data float32), checked against meta. Raises PeerError naming the file."""
    n, width = meta["num_nodes"], meta["feature_dim"]
    entries = meta.get("feature_entries")
    if not isinstance(entries, int) or entries < 0:
        raise PeerError(f"{directory}/meta.json: 'feature_entries' is {entries!r}, expected an "
                        f"integer >= 0")
    array = functools.partial(read_array, directory)
    indptr = array("features_indptr.npy", "iu", (n + 1,)).astype(np.int64, copy=False)
    indices = array("features_indices.npy", "iu", (entries,)).astype(np.int64, copy=False)
    data = np.ascontiguousarray(array("features_data.npy", "f", (entries,)), dtype=np.float32)
    if indptr[0] != 0 or indptr[-1] != entries or np.any(np.diff(indptr) < 0):
        raise PeerError(f"{directory}/features_indptr.npy: not offsets from 0 to {entries}")
    if entries and (indices.min() < 0 or indices.max() >= width):
        raise PeerError(f"{directory}/features_indices.npy: a column outside [0, {width})")
    return indptr, indices, data


def read_node_data(directory, meta):
    """The in-edge CSR, features, labels and training nodes of the dataset `directory` whose
    checked meta.json is `meta` (read_meta), each array checked against it. Returns a dict of
    numpy arrays (meta, indptr, indices, features, labels, train; features is the tuple of
    read_sparse_features when they are stored sparse). Raises PeerError naming the file and
    what is wrong."""
    n, num_edges = meta["num_nodes"], meta["num_edges"]
    array = functools.partial(read_array, directory)
    indptr = array("indptr.npy", "iu", (n + 1,)).astype(np.int64, copy=False)
    indices = array("indices.npy", "iu", (num_edges,)).astype(np.int64, copy=False)
    if meta.get("sparse_features"):
        features = read_sparse_features(directory, meta)
    else:
        features = np.ascontiguousarray(array("features.npy", "f", (n, meta["feature_dim"])),
                                        dtype=np.float32)
    labels = array("labels.npy", "iu", (n,)).astype(np.int64)
    split = array("split.npy", "iu", (n,))
    if indptr[0] != 0 or indptr[-1] != num_edges or np.any(np.diff(indptr) < 0):
        raise PeerError(f"{directory}/indptr.npy: not CSR offsets from 0 to {num_edges}")
    if num_edges and (indices.min() < 0 or indices.max() >= n):
        raise PeerError(f"{directory}/indices.npy: a source id outside [0, {n})")
    train = np.flatnonzero(split == SPLIT_TRAIN)
    if train.size == 0:
        raise PeerError(f"{directory}/split.npy: no training node (split value 1)")
    bad = train[(labels[train] < 0) | (labels[train] >= meta["num_classes"])]
    if bad.size:
        raise PeerError(f"{directory}: training node {bad[0]} has label {labels[bad[0]]}, "
                        f"outside [0, {meta['num_classes']})")
    return {"meta": meta, "indptr": indptr, "indices": indices, "features": features,
            "labels": labels, "train": train}


def load_dataset(directory, sparse_features=False):
    """Reads and checks a sar-npy-dataset directory (sparse features refused unless
    `sparse_features`). Returns a dict of numpy arrays and meta."""
    meta, meta_path = read_meta(directory, "planted:nodes=...,degree=...,features=...",
                                sparse_features)
    if "schema" in meta:
        raise PeerError(f"{meta_path}: a heterogeneous dataset (\"schema\"): this peer trains "
                        f"homogeneous models (bench/torch_rgcn_peer.py trains R-GCN)")
    return read_node_data(directory, meta)


# ---------------------------------------------------------------------------------------
# Graph operators, built once before training


def edge_lists(indptr, indices):
    """(destination, source) tensors of the in-edge CSR: edge indices[k] -> row of k."""
    n = indptr.shape[0] - 1
    dst = torch.repeat_interleave(torch.arange(n), torch.from_numpy(np.diff(indptr)))
    return dst, torch.from_numpy(indices)


def with_one_self_loop(dst, src, n):
    """Drops every self-loop, then adds exactly one per node (sar's self_loop_policy::add)."""
    keep = dst != src
    loops = torch.arange(n)
    return torch.cat([dst[keep], loops]), torch.cat([src[keep], loops])


def sparse_matrix(dst, src, values, n):
    """The coalesced n x n COO matrix with A[dst, src] = values (duplicates summed)."""
    return torch.sparse_coo_tensor(torch.stack([dst, src]), values, (n, n)).coalesce()


def gcn_adjacency(indptr, indices, dtype=None):
    """D_in^-1/2 (A + I) D_out^-1/2, degrees clamped to >= 1."""
    n = indptr.shape[0] - 1
    dst, src = with_one_self_loop(*edge_lists(indptr, indices), n)
    dtype = dtype or torch.float32
    d_in = torch.bincount(dst, minlength=n).clamp(min=1).to(dtype).pow(-0.5)
    d_out = torch.bincount(src, minlength=n).clamp(min=1).to(dtype).pow(-0.5)
    return sparse_matrix(dst, src, d_in[dst] * d_out[src], n)


def mean_adjacency(indptr, indices, dtype=None):
    """Row i: 1 / max(in-degree(i), 1) at every in-neighbour (graph as stored)."""
    n = indptr.shape[0] - 1
    dst, src = edge_lists(indptr, indices)
    degree = torch.bincount(dst, minlength=n).clamp(min=1).to(dtype or torch.float32)
    return sparse_matrix(dst, src, degree.reciprocal()[dst], n)


def attention_edges(indptr, indices):
    """(destination, source) edge lists with exactly one self-loop per node, for GAT."""
    return with_one_self_loop(*edge_lists(indptr, indices), indptr.shape[0] - 1)


def build_graph(model, indptr, indices, dtype=None):
    """The operator the model's layers take: a sparse matrix, or GAT's edge lists."""
    if model == "gcn":
        return gcn_adjacency(indptr, indices, dtype)
    if model == "sage":
        return mean_adjacency(indptr, indices, dtype)
    return attention_edges(indptr, indices)


class SparseFeatures:
    """Input features as a coalesced n x F COO tensor: what the first layer multiplies by its
    weight with torch.sparse.mm. dropped(p, training) is the input dropout on the stored
    values (the structure kept: a dropped entry is a stored 0, as in sar)."""

    def __init__(self, features, width):
        if isinstance(features, tuple):  # (indptr, indices, data) of the directory
            indptr, indices, data = features
            rows = indptr.shape[0] - 1
            index = torch.from_numpy(np.stack([np.repeat(np.arange(rows), np.diff(indptr)),
                                               indices]))
            values = torch.from_numpy(data)
        else:  # dense features.npy made sparse
            dense = torch.from_numpy(features)
            rows = dense.shape[0]
            index = dense.nonzero().t().contiguous()
            values = dense[index[0], index[1]]
        self.tensor = torch.sparse_coo_tensor(index, values, (rows, width)).coalesce()
        self.shape = self.tensor.shape

    def dropped(self, p, training):
        if not training or p == 0:
            return self.tensor
        values = F.dropout(self.tensor.values(), p, True)
        # The indices are the coalesced tensor's: marked so, torch.sparse.mm does not sort them.
        return torch.sparse_coo_tensor(self.tensor.indices(), values,
                                       self.shape)._coalesced_(True)


def first_product(x, weight):
    """x @ weight: torch.sparse.mm for a sparse x (a torch sparse tensor), else the matmul."""
    return torch.sparse.mm(x, weight) if x.is_sparse else x @ weight


# ---------------------------------------------------------------------------------------
# Layers and models


def glorot(rows, cols):
    """sar's init_kind::glorot_uniform: U(-a, a), a = sqrt(6 / (rows + cols))."""
    w = nn.Parameter(torch.empty(rows, cols))
    nn.init.xavier_uniform_(w)
    return w


def zeros(cols):
    return nn.Parameter(torch.zeros(cols))


def project_and_aggregate(adjacency, x, weight):
    """adjacency @ x @ weight, with the weight first when it narrows the features or x is
    sparse."""
    if weight.shape[1] < weight.shape[0] or x.is_sparse:
        return torch.sparse.mm(adjacency, first_product(x, weight))
    return torch.sparse.mm(adjacency, x) @ weight


class GCNLayer(nn.Module):
    def __init__(self, fin, fout):
        super().__init__()
        self.weight = glorot(fin, fout)
        self.bias = zeros(fout)

    def forward(self, adjacency, x):
        return project_and_aggregate(adjacency, x, self.weight) + self.bias


class SAGEMeanLayer(nn.Module):
    def __init__(self, fin, fout):
        super().__init__()
        self.self_weight = glorot(fin, fout)
        self.neighbour_weight = glorot(fin, fout)
        self.bias = zeros(fout)

    def forward(self, adjacency, x):
        return (first_product(x, self.self_weight) +
                project_and_aggregate(adjacency, x, self.neighbour_weight) + self.bias)


def edge_softmax(logits, dst, n):
    """Softmax of per-edge logits (E x H) over the edges entering each destination."""
    index = dst.unsqueeze(1).expand_as(logits)
    top = torch.zeros(n, logits.shape[1], dtype=logits.dtype).scatter_reduce(
        0, index, logits.detach(), reduce="amax", include_self=False)
    e = (logits - top.index_select(0, dst)).exp()
    total = torch.zeros(n, logits.shape[1], dtype=logits.dtype).index_add(0, dst, e)
    return e / total.index_select(0, dst)


class GATLayer(nn.Module):
    def __init__(self, fin, head_dim, heads, concat, attention_dropout, negative_slope=0.2):
        super().__init__()
        self.heads, self.head_dim, self.concat = heads, head_dim, concat
        self.attention_dropout, self.negative_slope = attention_dropout, negative_slope
        self.weight = glorot(fin, heads * head_dim)
        self.attention_left = glorot(heads, head_dim)
        self.attention_right = glorot(heads, head_dim)
        self.bias = zeros(heads * head_dim if concat else head_dim)

    def forward(self, edges, x):
        dst, src = edges
        n, heads, width = x.shape[0], self.heads, self.head_dim
        z = first_product(x, self.weight).view(n, heads, width)
        el = (z * self.attention_left).sum(-1)   # n x H, source side
        er = (z * self.attention_right).sum(-1)  # n x H, destination side
        logits = F.leaky_relu(el.index_select(0, src) + er.index_select(0, dst),
                              self.negative_slope)
        alpha = edge_softmax(logits, dst, n)
        alpha = F.dropout(alpha, self.attention_dropout, self.training)
        messages = z.index_select(0, src) * alpha.unsqueeze(-1)  # E x H x F
        out = torch.zeros(n, heads, width, dtype=x.dtype).index_add(0, dst, messages)
        out = out.reshape(n, heads * width) if self.concat else out.mean(1)
        return out + self.bias


class Net(nn.Module):
    """dropout -> layer 1 -> activation -> dropout -> layer 2."""

    def __init__(self, model, fin, classes, hidden, heads, dropout, attention_dropout):
        super().__init__()
        self.dropout = dropout
        if model == "gcn":
            self.layers = nn.ModuleList([GCNLayer(fin, hidden), GCNLayer(hidden, classes)])
            self.activation = F.relu
        elif model == "sage":
            self.layers = nn.ModuleList([SAGEMeanLayer(fin, hidden),
                                         SAGEMeanLayer(hidden, classes)])
            self.activation = F.relu
        else:
            self.layers = nn.ModuleList([
                GATLayer(fin, hidden, heads, True, attention_dropout),
                GATLayer(hidden * heads, classes, 1, False, attention_dropout)])
            self.activation = F.elu

    def forward(self, graph, x):
        for k, layer in enumerate(self.layers):
            if isinstance(x, SparseFeatures):
                x = layer(graph, x.dropped(self.dropout, self.training))
            else:
                x = layer(graph, F.dropout(x, self.dropout, self.training))
            if k + 1 < len(self.layers):
                x = self.activation(x)
        return x


def make_optimiser(net, settings):
    """torch.optim.Adam with sar's parameter groups (decay on the first layer's weight only,
    or on everything)."""
    decay = settings["weight_decay"]
    if settings["decay_first_layer_only"]:
        first = net.layers[0].weight
        rest = [p for p in net.parameters() if p is not first]
        groups = [{"params": [first], "weight_decay": decay},
                  {"params": rest, "weight_decay": 0.0}]
    else:
        groups = [{"params": list(net.parameters()), "weight_decay": decay}]
    return torch.optim.Adam(groups, lr=settings["lr"])


# ---------------------------------------------------------------------------------------
# The command line


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", required=True,
                   help="sar .npy dataset directory (sar-convert --out)")
    p.add_argument("--model", required=True, choices=sorted(DEFAULTS))
    p.add_argument("--aggregator", default="mean", choices=["mean"],
                   help="GraphSAGE aggregator (only mean; accepted for sar-train compatibility)")
    p.add_argument("--hidden", type=int, help="hidden width, per head for GAT "
                   "(default as sar-train: gcn 16, sage 64, gat 8)")
    p.add_argument("--heads", type=int, help="GAT heads of the hidden layer (default 8)")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--warmup", type=int, default=1,
                   help="epochs left out of the median (default 1)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--seed", type=int, default=0,
                   help="torch.manual_seed (initialisation, dropout)")
    p.add_argument("--metrics-out", help="write the JSON summary to this file")
    p.add_argument("--sparse-features", action="store_true",
                   help="train on the features as a torch sparse COO tensor (the first layer's "
                   "x W by torch.sparse.mm); reads a directory's sparse arrays or makes "
                   "features.npy sparse")
    args = p.parse_args(argv)
    for name in ("hidden", "heads", "epochs", "threads"):
        value = getattr(args, name)
        if value is not None and value < 1:
            p.error(f"--{name} must be >= 1, got {value}")
    if args.warmup < 0:
        p.error(f"--warmup must be >= 0, got {args.warmup}")
    return args


def train_epochs(net, optimiser, graph, x, train_nodes, train_labels, epochs):
    """Trains `net` for `epochs` full-batch epochs (forward, cross-entropy over the training
    nodes, backward, optimiser step; no evaluation), one line per epoch. Returns each epoch's
    seconds and training loss. Raises PeerError on a loss that is not finite."""
    net.train()
    seconds, losses = [], []
    for epoch in range(1, epochs + 1):
        start = time.perf_counter()
        optimiser.zero_grad(set_to_none=True)
        logits = net(graph, x)
        loss = F.cross_entropy(logits.index_select(0, train_nodes), train_labels)
        loss.backward()
        optimiser.step()
        seconds.append(time.perf_counter() - start)
        losses.append(loss.item())
        del logits, loss
        if not math.isfinite(losses[-1]):
            raise PeerError(f"epoch {epoch}: training loss is {losses[-1]}")
        print(f"epoch {epoch:4d}  loss {losses[-1]:.4f}  time {seconds[-1]:.4f}s", flush=True)
    return seconds, losses


def train(args):
    settings = dict(DEFAULTS[args.model])
    if args.hidden is not None:
        settings["hidden"] = args.hidden
    if args.heads is not None:
        if args.model != "gat":
            raise PeerError("--heads applies to --model gat only")
        settings["heads"] = args.heads
    torch.manual_seed(args.seed)

    start = time.perf_counter()
    data = load_dataset(args.dataset, args.sparse_features)
    meta = data["meta"]
    graph = build_graph(args.model, data["indptr"], data["indices"])
    if args.sparse_features:
        x = SparseFeatures(data["features"], meta["feature_dim"])
    elif isinstance(data["features"], tuple):
        raise PeerError(f"{args.dataset}: sparse features: give --sparse-features")
    else:
        x = torch.from_numpy(data["features"])
    labels = torch.from_numpy(data["labels"])
    train_nodes = torch.from_numpy(data["train"])
    train_labels = labels.index_select(0, train_nodes)
    del data
    print(f"torch_peer: {meta.get('name', args.dataset)}: {meta['num_nodes']} nodes, "
          f"{meta['num_edges']} edges, {x.shape[1]} features"
          f"{' (sparse)' if args.sparse_features else ''}, {meta['num_classes']} classes, "
          f"{train_nodes.numel()} training nodes; loaded and built in "
          f"{time.perf_counter() - start:.2f} s; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, BLAS {blas_library()}", flush=True)
    if "/blas/libblas" in blas_library():
        print("torch_peer: warning: the reference BLAS is loaded (matmuls ~10x slower than "
              "OpenBLAS): apt-get install libopenblas0-pthread", file=sys.stderr, flush=True)

    net = Net(args.model, x.shape[1], meta["num_classes"], settings["hidden"], settings["heads"],
              settings["dropout"], settings["attention_dropout"])
    optimiser = make_optimiser(net, settings)
    seconds, losses = train_epochs(net, optimiser, graph, x, train_nodes, train_labels,
                                   args.epochs)

    timed = seconds[args.warmup:] or seconds
    metrics = {
        "implementation": "pytorch",
        "torch_version": torch.__version__,
        "model": args.model,
        "dataset": meta.get("name", os.path.basename(os.path.normpath(args.dataset))),
        "num_nodes": meta["num_nodes"],
        "num_edges": meta["num_edges"],
        "threads": torch.get_num_threads(),
        "epochs": args.epochs,
        "warmup": args.warmup,
        "epoch_seconds": seconds,
        "epoch_seconds_median": statistics.median(timed),
        "peak_memory_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "train_loss": losses,
        "hidden": settings["hidden"],
        "heads": settings["heads"],
        "seed": args.seed,
        "sparse_features": args.sparse_features,
        "blas": blas_library(),
    }
    print(f"torch_peer: median epoch {metrics['epoch_seconds_median']:.4f} s "
          f"(of {len(timed)}), peak memory {metrics['peak_memory_bytes'] / 2**20:.1f} MiB",
          flush=True)
    write_metrics(args.metrics_out, metrics)
    return metrics


def write_metrics(path, metrics):
    """Writes metrics as JSON to path, if given. Raises PeerError if it cannot."""
    if not path:
        return
    try:
        with open(path, "w") as f:
            json.dump(metrics, f, indent=2)
            f.write("\n")
    except OSError as e:
        raise PeerError(f"cannot write {path}: {e}") from None


def run(program, train_function, args):
    """train_function(args) on args.threads threads; the exit status: 0, 2 for a PeerError
    (printed as "program: error: ..."), 3 when out of memory."""
    try:
        torch.set_num_threads(args.threads)
        train_function(args)
    except PeerError as e:
        print(f"{program}: error: {e}", file=sys.stderr)
        return 2
    except MemoryError:
        print(f"{program}: error: out of memory", file=sys.stderr)
        return 3
    return 0


def main(argv=None):
    return run("torch_peer.py", train, parse_args(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
