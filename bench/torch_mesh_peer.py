#!/usr/bin/python3
"""The PyTorch peer of sar-surrogate train: a plain PyTorch MeshGraphNet on the CPU, the model
and training that sar/train/mesh_surrogate.hpp runs, on the same trajectory dataset (DeepMind's
layout with .npy fields: meta.json, train/ valid/ test/, one folder per trajectory).

Data: mesh edges are every two corners of a cell, both ways, once; an edge j -> i carries
pos_j - pos_i and its norm. A node's input is its state (every dynamic field), its static
float fields and its node type one-hot (9). Normalisers: column means and deviations over the
inputs, edges and increments (increments of predicted nodes only) of the first
--normaliser-steps steps, which only observe; then frozen; a column seen constant has the
deviation 1. Predicted nodes: types 0 (normal) and 5 (outflow).
Model (hidden h, L steps): node encoder Linear(F, h), relu, Linear(h, h), LayerNorm; edge
encoder Linear(D + 1, h), LayerNorm; each step: m_e = LayerNorm(MLP([x_dst, x_src, e])) with
MLP = Linear(2h + h, h), relu, Linear(h, h); e' = e + m_e; M_i = sum of m over i's in-edges;
x' = x + LayerNorm(MLP([x, M])); decoder Linear(h, h), relu, Linear(h, state width). Weights
Glorot-uniform, biases zero, as sar initialises them.
Training: each step --batch-meshes (trajectory, time) samples uniformly at random, one
block-diagonal graph; Gaussian noise of deviation --noise on normal nodes' input state and the
target the increment from the noisy state to the next one; loss = the mean over predicted nodes
of the sum of squared errors over the columns (normalised increments); Adam, its learning rate
decayed exponentially to --lr-decay of --lr by the last step.
Evaluation as sar's: the one-step RMSE and rollouts (the model's outputs fed back, other nodes
held to the trajectory's values), RMSE over the first 1, 10, 50 and all steps, next to
persistence, over predicted nodes, in the fields' units.
A step's time is its sampling, batching, forward, backward and Adam step (median over the steps
after the first 10); peak memory is ru_maxrss.

  /usr/bin/python3 bench/torch_mesh_peer.py --dataset waves --steps 2000 --metrics-out t.json
"""
import argparse
import json
import os
import resource
import statistics
import sys
import time

import torch_peer  # sets the thread counts from --threads before numpy and torch load
from torch_peer import PeerError, np, torch, nn, F, run, write_metrics

NODE_TYPES = 9


def read_dataset(directory):
    """(fields, {split: [trajectory dict]}) of a trajectory dataset directory."""
    with open(os.path.join(directory, "meta.json")) as f:
        meta = json.load(f)
    names = meta.get("field_names") or sorted(meta["features"])
    dynamic = [n for n in names if meta["features"][n]["type"] == "dynamic"]
    static = [n for n in names if meta["features"][n]["type"] == "static"
              and n not in ("mesh_pos", "cells", "node_type")]
    splits = {}
    for split in ("train", "valid", "test"):
        folder = os.path.join(directory, split)
        trajectories = []
        for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
            path = lambda field: os.path.join(folder, name, field + ".npy")
            pos = np.load(path("mesh_pos")).astype(np.float32)
            n = pos.shape[0]
            cells = np.load(path("cells")).astype(np.int64)
            types = np.load(path("node_type")).reshape(-1).astype(np.int64)
            state = np.concatenate([np.load(path(d)).reshape(-1, n, meta["features"][d]["shape"][2])
                                    for d in dynamic], axis=2).astype(np.float32)
            statics = (np.concatenate([np.load(path(s)).reshape(n, -1) for s in static], axis=1)
                       if static else np.zeros((n, 0), np.float32)).astype(np.float32)
            pairs = set()
            for cell in cells:
                for a in cell:
                    for b in cell:
                        if a != b:
                            pairs.add((int(a), int(b)))
            src, dst = np.array(sorted(pairs), dtype=np.int64).T
            rel = pos[src] - pos[dst]
            edges = np.concatenate([rel, np.linalg.norm(rel, axis=1, keepdims=True)], axis=1)
            trajectories.append({"name": f"{split}/{name}", "n": n, "types": types,
                                 "state": state, "static": statics, "src": src, "dst": dst,
                                 "edges": edges.astype(np.float32),
                                 "predicted": np.isin(types, [0, 5])})
        splits[split] = trajectories
    if not splits["train"]:
        raise PeerError(f"{directory}/train: no trajectory")
    return splits


class Normaliser:
    """Sums of what it is shown; mean and deviation (1 for a constant column)."""

    def __init__(self, width):
        self.sums = np.zeros(2 * width + 1)

    def add(self, rows):
        rows = rows.astype(np.float64)
        w = rows.shape[1]
        self.sums[:w] += rows.sum(0)
        self.sums[w:2 * w] += (rows * rows).sum(0)
        self.sums[-1] += rows.shape[0]
        n = max(self.sums[-1], 1.0)
        self.mean = self.sums[:w] / n
        var = self.sums[w:2 * w] / n - self.mean ** 2
        constant = var <= 1e-12 * np.maximum(1.0, self.mean ** 2)
        self.dev = np.where(constant, 1.0, np.sqrt(np.maximum(var, 0)))

    def __call__(self, rows):
        return ((rows - self.mean) / self.dev).astype(np.float32)


def linear(rows, cols):
    layer = nn.Linear(rows, cols)
    nn.init.xavier_uniform_(layer.weight)
    nn.init.zeros_(layer.bias)
    return layer


class MeshGraphNet(nn.Module):
    def __init__(self, inputs, edge_inputs, outputs, hidden, steps):
        super().__init__()
        self.encoder = nn.Sequential(linear(inputs, hidden), nn.ReLU(), linear(hidden, hidden),
                                     nn.LayerNorm(hidden))
        self.edge_encoder = nn.Sequential(linear(edge_inputs, hidden), nn.LayerNorm(hidden))
        self.edge_mlps = nn.ModuleList(
            nn.Sequential(linear(3 * hidden, hidden), nn.ReLU(), linear(hidden, hidden),
                          nn.LayerNorm(hidden)) for _ in range(steps))
        self.node_mlps = nn.ModuleList(
            nn.Sequential(linear(2 * hidden, hidden), nn.ReLU(), linear(hidden, hidden),
                          nn.LayerNorm(hidden)) for _ in range(steps))
        self.decoder = nn.Sequential(linear(hidden, hidden), nn.ReLU(), linear(hidden, outputs))

    def forward(self, x, e, src, dst):
        x = self.encoder(x)
        e = self.edge_encoder(e)
        for edge_mlp, node_mlp in zip(self.edge_mlps, self.node_mlps):
            m = edge_mlp(torch.cat([x[dst], x[src], e], dim=1))
            e = e + m
            summed = torch.zeros_like(x).index_add_(0, dst, m)
            x = x + node_mlp(torch.cat([x, summed], dim=1))
        return self.decoder(x)


def one_hot(types):
    out = np.zeros((types.shape[0], NODE_TYPES), np.float32)
    out[np.arange(types.shape[0]), types] = 1
    return out


def batch(samples, noise, rng):
    """Inputs, edges, src, dst, increments (or None), predicted mask of (trajectory, state,
    next) samples as one block-diagonal graph; noise on normal nodes' state."""
    inputs, edges, src, dst, increments, predicted = [], [], [], [], [], []
    offset = 0
    for t, state, nxt in samples:
        state = state.copy()
        if noise > 0:
            normal = t["types"] == 0
            state[normal] += rng.normal(0, noise, size=state[normal].shape).astype(np.float32)
        inputs.append(np.concatenate([state, t["static"], one_hot(t["types"])], axis=1))
        edges.append(t["edges"])
        src.append(t["src"] + offset)
        dst.append(t["dst"] + offset)
        if nxt is not None:
            increments.append(nxt - state)
        predicted.append(t["predicted"])
        offset += t["n"]
    return (np.concatenate(inputs), np.concatenate(edges), np.concatenate(src),
            np.concatenate(dst), np.concatenate(increments) if increments else None,
            np.concatenate(predicted))


def predict(net, norms, samples):
    """The increments in the fields' units for samples (no noise)."""
    inputs, edges, src, dst, _, _ = batch(samples, 0, None)
    with torch.no_grad():
        y = net(torch.from_numpy(norms[0](inputs)), torch.from_numpy(norms[1](edges)),
                torch.from_numpy(src), torch.from_numpy(dst)).numpy().astype(np.float64)
    return y * norms[2].dev + norms[2].mean


def evaluate(net, norms, trajectories, batch_meshes):
    sums = [0.0, 0.0, 0.0]
    pending = [(t, k) for t in trajectories for k in range(t["state"].shape[0] - 1)]
    for first in range(0, len(pending), batch_meshes):
        chunk = pending[first:first + batch_meshes]
        d = predict(net, norms, [(t, t["state"][k], None) for t, k in chunk])
        offset = 0
        for t, k in chunk:
            p = t["predicted"]
            pred = t["state"][k] + d[offset:offset + t["n"]]
            sums[0] += ((pred - t["state"][k + 1])[p] ** 2).sum()
            sums[1] += ((t["state"][k] - t["state"][k + 1])[p] ** 2).sum()
            sums[2] += p.sum() * t["state"].shape[2]
            offset += t["n"]
    steps = trajectories[0]["state"].shape[0]
    model_steps, kept_steps, counts = np.zeros(steps - 1), np.zeros(steps - 1), np.zeros(steps - 1)
    states = [t["state"][0].astype(np.float64) for t in trajectories]
    for k in range(1, steps):
        d = predict(net, norms, [(t, s.astype(np.float32), None)
                                 for t, s in zip(trajectories, states)])
        offset = 0
        for j, t in enumerate(trajectories):
            p = t["predicted"]
            nxt = states[j] + d[offset:offset + t["n"]]
            nxt[~p] = t["state"][k][~p]
            states[j] = nxt
            model_steps[k - 1] += ((nxt - t["state"][k])[p] ** 2).sum()
            kept_steps[k - 1] += ((t["state"][0] - t["state"][k])[p] ** 2).sum()
            counts[k - 1] += p.sum() * t["state"].shape[2]
            offset += t["n"]
    out = {"one_step_rmse": float(np.sqrt(sums[0] / sums[2])),
           "persistence_one_step_rmse": float(np.sqrt(sums[1] / sums[2]))}
    for h in sorted({h for h in (1, 10, 50, steps - 1) if 1 <= h <= steps - 1}):
        out[f"rollout_rmse_{h}"] = float(np.sqrt(model_steps[:h].sum() / counts[:h].sum()))
        out[f"persistence_rollout_rmse_{h}"] = float(
            np.sqrt(kept_steps[:h].sum() / counts[:h].sum()))
    return out


def train(args):
    splits = read_dataset(args.dataset)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    first = splits["train"][0]
    width = first["state"].shape[2]
    inputs = width + first["static"].shape[1] + NODE_TYPES
    norms = (Normaliser(inputs), Normaliser(first["edges"].shape[1]), Normaliser(width))
    net = MeshGraphNet(inputs, first["edges"].shape[1], width, args.hidden, args.layers)
    optimiser = torch.optim.Adam(net.parameters(), lr=args.lr)
    losses, seconds = [], []
    for step in range(args.normaliser_steps + args.steps):
        started = time.perf_counter()
        samples = []
        for _ in range(args.batch_meshes):
            t = splits["train"][rng.integers(len(splits["train"]))]
            k = rng.integers(t["state"].shape[0] - 1)
            samples.append((t, t["state"][k], t["state"][k + 1]))
        x, e, src, dst, inc, predicted = batch(samples, args.noise, rng)
        if step < args.normaliser_steps:
            norms[0].add(x)
            norms[1].add(e)
            norms[2].add(inc[predicted])
            continue
        done = (step - args.normaliser_steps) / max(1, args.steps - 1)
        for group in optimiser.param_groups:
            group["lr"] = args.lr * args.lr_decay ** done
        y = net(torch.from_numpy(norms[0](x)), torch.from_numpy(norms[1](e)),
                torch.from_numpy(src), torch.from_numpy(dst))
        target = torch.from_numpy(norms[2](inc))
        mask = torch.from_numpy(predicted)
        loss = ((y - target) ** 2).sum(1)[mask].mean()
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
        seconds.append(time.perf_counter() - started)
        if args.log_every and len(losses) % args.log_every == 0:
            print(f"step {len(losses)}: loss {losses[-1]:.5f} ({seconds[-1]:.3f} s)",
                  file=sys.stderr)
    metrics = {"program": "torch_mesh_peer.py", "steps": args.steps, "losses": losses,
               "step_seconds_median": statistics.median(seconds[10:] or seconds),
               "hidden": args.hidden, "layers": args.layers, "batch_meshes": args.batch_meshes}
    net.eval()
    for split in ("valid", "test"):
        if splits[split]:
            for key, value in evaluate(net, norms, splits[split], args.batch_meshes).items():
                metrics[f"{split}_{key}"] = value
    metrics["peak_memory_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    write_metrics(args.metrics_out, metrics)
    return metrics


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", required=True, help="trajectory dataset directory")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--normaliser-steps", type=int, default=100)
    p.add_argument("--batch-meshes", type=int, default=2)
    p.add_argument("--noise", type=float, default=0.02)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=15)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--lr-decay", type=float, default=0.1,
                   help="the learning rate decays exponentially to this fraction by the last step")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--log-every", type=int, default=0)
    p.add_argument("--metrics-out")
    return p.parse_args(argv)


if __name__ == "__main__":
    sys.exit(run("torch_mesh_peer.py", train, parse_args(sys.argv[1:])))
