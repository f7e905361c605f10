#!/usr/bin/python3
"""The performance benchmark of issue 5, in one run: sar against a PyTorch peer and against
the machine's limits.

On one planted-partition graph (default 200k nodes, average degree 20, 128 features, written
once by sar-convert to an .npy directory that both sides read):
  1. bench-kernels: STREAM-style triad, SGEMM, and SpMM at width 128 (1 and 2 threads);
  2. sar-train and bench/torch_peer.py train 2-layer GCN, GraphSAGE-mean (hidden 128) and
     GAT (4 heads x 32) with the same hyper-parameters; epoch = forward + backward + Adam;
  3. sar-train again with 1 thread (thread speed-up) and under `mpirun -np 2` with the
     `sequential` schedule and 1 thread per rank (distributed overhead);
then prints a table per target with the ratios and PASS/FAIL, and writes OUT/summary.json and
OUT/summary.md. Every measurement is a separate process run one after another, nothing in
parallel; runs whose JSON exists are reused unless --force.

Steps 2 and 3 are repeated in --rounds rounds. A round runs the four measurements of a model
back to back (sar, peer, sar on 1 thread, P = 2), so each ratio is taken between runs a minute
apart; a verdict is on the median over rounds of that round's ratio, and the table shows the
smallest and largest round too. On a shared host whose speed drifts by tens of per cent over
minutes, one run per side compares two different machines.

--sweep "50000 100000 ..." instead times every model on graphs of those sizes (ours and the
peer's, 2 threads) for the plot of epoch time against graph size (bench/plot_perf.py).

Run it with the system Python (/usr/bin/python3): the peer needs Debian's python3-torch.
As root, export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 for mpirun.
"""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)

parser = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--build", default=os.path.join(root, "build"), help="build directory")
parser.add_argument("--out", default=os.path.join(here, "out", "perf"), help="scratch/results")
parser.add_argument("--nodes", type=int, default=200000)
parser.add_argument("--degree", type=int, default=20)
parser.add_argument("--features", type=int, default=128)
parser.add_argument("--epochs", type=int, default=6, help="epochs per run (median of all "
                    "but the first)")
parser.add_argument("--rounds", type=int, default=3, help="rounds of the model runs (a verdict "
                    "is on the median over rounds of each round's ratio)")
parser.add_argument("--models", default="gcn sage gat")
parser.add_argument("--threads", type=int, default=2, help="threads of the main comparison")
parser.add_argument("--sweep", default="", help="graph sizes for the epoch-time plot")
parser.add_argument("--peer-max-nodes", default="gat:400000",
                    help="'model:N ...': skip the peer above N nodes in --sweep (its GAT "
                    "needs ~45 MiB per 1000 nodes)")
parser.add_argument("--timeout", type=int, default=1800, help="seconds per run")
parser.add_argument("--force", action="store_true", help="rerun runs whose results exist")
args = parser.parse_args()
if args.rounds < 1:
    parser.error(f"--rounds {args.rounds}: at least 1")

MIB = 1024.0 * 1024.0
MODEL_ARGS = {"gcn": ["--hidden", "128"], "sage": ["--aggregator", "mean", "--hidden", "128"],
              "gat": ["--hidden", "32", "--heads", "4"]}
PEER_ARGS = {"gcn": ["--hidden", "128"], "sage": ["--hidden", "128"],
             "gat": ["--hidden", "32", "--heads", "4"]}
models = args.models.split()
program = {name: os.path.join(args.build, sub, name) for sub, name in
           [("examples", "sar-train"), ("examples", "sar-convert"),
            ("examples", "sar-partition"), ("bench", "bench-kernels")]}
for name, path in program.items():
    if not os.access(path, os.X_OK):
        sys.exit(f"perf_vs_torch.py: {path} not found; build it (scripts/build.sh, or ninja -C "
                 f"{args.build} {os.path.relpath(path, args.build)})")
os.makedirs(os.path.join(args.out, "runs"), exist_ok=True)
environment = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


def run(command, log):
    """Runs command (a list), output to log; raises with the log's tail on failure."""
    print("+ " + " ".join(shlex.quote(c) for c in command), flush=True)
    start = time.time()
    with open(log, "w") as f:
        code = subprocess.run(command, stdout=f, stderr=subprocess.STDOUT, env=environment,
                              timeout=args.timeout).returncode
    if code != 0:
        with open(log) as f:
            tail = "".join(f.readlines()[-8:])
        raise RuntimeError(f"exit {code} after {time.time() - start:.0f} s; {log}:\n{tail}")
    print(f"  done in {time.time() - start:.0f} s", flush=True)


def measured(name, command_for):
    """The JSON of run `name`, running command_for(json_path) first if needed."""
    path = os.path.join(args.out, "runs", name + ".json")
    if args.force or not os.path.exists(path):
        tmp = path + ".tmp"
        run(command_for(tmp), os.path.join(args.out, "runs", name + ".log"))
        os.replace(tmp, path)
    with open(path) as f:
        return json.load(f)


def graph(nodes):
    """The .npy directory of the planted graph with `nodes` nodes (written once)."""
    spec = f"planted:nodes={nodes},degree={args.degree},features={args.features}"
    directory = os.path.join(args.out, f"graph-{nodes}")
    stamp = os.path.join(directory, ".spec")
    if args.force or not os.path.exists(stamp) or open(stamp).read() != spec:
        run([program["sar-convert"], "--dataset", spec, "--out", directory],
            os.path.join(args.out, f"graph-{nodes}.log"))
        with open(stamp, "w") as f:
            f.write(spec)
    return directory


def ours(model, directory, threads, tag, extra=()):
    def command(metrics):
        return [program["sar-train"], "--dataset", directory, "--model", model,
                *MODEL_ARGS[model], "--epochs", str(args.epochs), "--patience", "0",
                "--normalise-features", "off", "--threads", str(threads), "--quiet",
                "--metrics-out", metrics, *extra]
    return measured(f"sar-{model}-{tag}", command)


def peer(model, directory, threads, tag):
    def command(metrics):
        return ["/usr/bin/python3", os.path.join(here, "torch_peer.py"), "--dataset", directory,
                "--model", model, *PEER_ARGS[model], "--epochs", str(args.epochs),
                "--threads", str(threads), "--metrics-out", metrics]
    return measured(f"torch-{model}-{tag}", command)


def distributed(model, directory, nodes, tag):
    parts = os.path.join(args.out, f"parts2-{nodes}")
    if args.force or not os.path.exists(os.path.join(parts, "meta.json")):
        run([program["sar-partition"], "--dataset", directory, "--parts", "2", "--method",
             "metis", "--out", parts], os.path.join(args.out, f"parts2-{nodes}.log"))

    def command(metrics):
        return ["mpirun", "-np", "2", "--oversubscribe", "--bind-to", "none",
                program["sar-train"], "--partitions", parts, "--schedule", "sequential",
                "--model", model, *MODEL_ARGS[model], "--epochs", str(args.epochs),
                "--patience", "0", "--normalise-features", "off", "--threads", "1", "--quiet",
                "--metrics-out", metrics]
    return measured(f"sar-{model}-{tag}-p2-sequential", command)


def epoch_seconds(metrics):
    """Median epoch time without the first (warm-up) epoch, the same rule for both sides."""
    times = metrics["epoch_seconds"]
    return statistics.median(times[1:] if len(times) > 1 else times)


def verdict(ok):
    return "PASS" if ok else "FAIL"


def sweep():
    peer_limit = {model: int(nodes) for model, nodes in
                  (item.split(":") for item in args.peer_max_nodes.split())}
    sides = [("sar", ours), ("torch", peer)]
    rows = []
    for nodes in [int(n) for n in args.sweep.split()]:
        directory = graph(nodes)
        for model in models:
            row = {"nodes": nodes, "model": model}
            for side, run_side in sides:
                if side == "torch" and nodes > peer_limit.get(model, nodes):
                    continue
                try:
                    m = run_side(model, directory, args.threads, f"{nodes}-t{args.threads}")
                    row[f"{side}_seconds"] = epoch_seconds(m)
                    row[f"{side}_peak_bytes"] = m["peak_memory_bytes"]
                except (RuntimeError, subprocess.TimeoutExpired) as e:
                    print(f"  {side} {model} at {nodes} nodes failed: {e}", flush=True)
            rows.append(row)
            print(json.dumps(row), flush=True)
    with open(os.path.join(args.out, "sweep.json"), "w") as f:
        json.dump(rows, f, indent=1)
    print(f"wrote {os.path.join(args.out, 'sweep.json')}")


def spread(values, digits, suffix=""):
    """'median [min-max]' of per-round values."""
    text = f"{statistics.median(values):.{digits}f}{suffix}"
    if len(values) > 1:
        text += f" [{min(values):.{digits}f}-{max(values):.{digits}f}]"
    return text


def pages(spmm):
    """The forward SpMM's time on huge-page and on 4 KiB-page operands (bench-kernels)."""
    small = spmm.get("forward_small_pages")
    if small is None:
        return "-"
    return (f"{spmm['forward']['ms']:.0f} / {small['ms']:.0f} "
            f"({small['huge_page_speedup']:.2f}x)")


def main_comparison():
    nodes, t = args.nodes, args.threads
    directory = graph(nodes)
    kernels = measured(f"kernels-{nodes}", lambda out: [
        program["bench-kernels"], "--nodes", str(nodes), "--degree", str(args.degree),
        "--width", str(args.features), "--threads", f"1,{t}", "--json-out", out])
    summary = {"dataset": f"planted:nodes={nodes},degree={args.degree},features={args.features}",
               "epochs": args.epochs, "threads": t, "rounds": args.rounds, "kernels": kernels,
               "models": {}}
    # rounds[model]: one dict of runs per round (below, ratios[name]: one ratio per round).
    rounds = {model: [] for model in models}
    for r in range(1, args.rounds + 1):
        tag = f"{nodes}-r{r}"
        for model in models:
            rounds[model].append({
                "sar": ours(model, directory, t, f"{tag}-t{t}"),
                "torch": peer(model, directory, t, f"{tag}-t{t}"),
                "sar_1_thread": ours(model, directory, 1, f"{tag}-t1"),
                "sar_p2_sequential": distributed(model, directory, nodes, tag)})
    lines = []
    for model in models:
        ratios = {"speedup_vs_torch": [], "memory_ratio": [], "thread_speedup": [],
                  "p2_overhead": []}
        for runs in rounds[model]:
            a = epoch_seconds(runs["sar"])
            ratios["speedup_vs_torch"].append(epoch_seconds(runs["torch"]) / a)
            ratios["memory_ratio"].append(runs["sar"]["peak_memory_bytes"] /
                                          runs["torch"]["peak_memory_bytes"])
            ratios["thread_speedup"].append(epoch_seconds(runs["sar_1_thread"]) / a)
            ratios["p2_overhead"].append(epoch_seconds(runs["sar_p2_sequential"]) / a)
        seconds = {name: [epoch_seconds(runs[name]) for runs in rounds[model]]
                   for name in rounds[model][0]}
        peaks = {name: [runs[name]["peak_memory_bytes"] / MIB for runs in rounds[model]]
                 for name in ("sar", "torch")}
        summary["models"][model] = {
            "rounds": rounds[model], "ratios_per_round": ratios,
            **{name: statistics.median(values) for name, values in ratios.items()}}
        lines.append((model, seconds, peaks, ratios))

    out = []
    out.append(f"## Per model (planted {nodes} nodes, degree {args.degree}, {args.features} "
               f"features; {t} threads; median of epochs 2..{args.epochs} per run; "
               f"{args.rounds} rounds: median [smallest-largest] over rounds, verdicts on "
               f"the median)\n")
    out.append("| model | sar s | torch s | speed-up (target) | sar MiB | torch MiB | memory "
               "ratio (<= 0.5) | 1 thread s | 2-thread speed-up (>= 1.7) | P=2 seq. s | "
               "P=2 / 1 process (<= 1.5) |")
    out.append("|---|---:|---:|---|---:|---:|---|---:|---|---:|---|")
    for model, seconds, peaks, ratios in lines:
        need = 5.0 if model == "gat" else 10.0
        speed, memory, ts, ov = (statistics.median(ratios[k]) for k in
                                 ("speedup_vs_torch", "memory_ratio", "thread_speedup",
                                  "p2_overhead"))
        out.append(
            f"| {model} | {spread(seconds['sar'], 3)} | {spread(seconds['torch'], 3)} | "
            f"{spread(ratios['speedup_vs_torch'], 1, 'x')} (>= {need:.0f}x) "
            f"{verdict(speed >= need)} | {statistics.median(peaks['sar']):.0f} | "
            f"{statistics.median(peaks['torch']):.0f} | "
            f"{spread(ratios['memory_ratio'], 2)} {verdict(memory <= 0.5)} | "
            f"{spread(seconds['sar_1_thread'], 3)} | {spread(ratios['thread_speedup'], 2, 'x')} "
            f"{verdict(ts >= 1.7)} | {spread(seconds['sar_p2_sequential'], 3)} | "
            f"{spread(ratios['p2_overhead'], 2)} {verdict(ov <= 1.5)} |")
    g = kernels["graph"]
    out.append(f"\n## Kernels (bench-kernels, same run; planted graph, {g['nodes']} nodes, "
               f"{g['edges_with_self_loops']} edges with self-loops)\n")
    out.append("| threads | triad GB/s | SGEMM 200k x 128 x 128 GFLOP/s | SGEMM 2048^3 GFLOP/s | "
               "SpMM width | SpMM GB/s (fraction of triad, >= 0.6) | transpose SpMM GB/s "
               "(fraction) | SpMM ms, huge pages / 4 KiB pages |")
    out.append("|---:|---:|---:|---:|---:|---|---|---|")
    for r in kernels["results"]:
        for spmm in r["spmm"]:
            f, t = spmm["forward"], spmm["transpose"]
            out.append(f"| {r['threads']} | {r['triad_gbs']:.1f} | {r['sgemm_tall_gflops']:.1f} | "
                       f"{r['sgemm_square_gflops']:.1f} | {spmm['width']} | {f['gbs']:.1f} "
                       f"({f['fraction_of_triad']:.2f} {verdict(f['fraction_of_triad'] >= 0.6)}) | "
                       f"{t['gbs']:.1f} ({t['fraction_of_triad']:.2f}) | {pages(spmm)} |")
    text = "\n".join(out)
    print(text)
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(f"wrote {args.out}/summary.md and summary.json")


if args.sweep:
    sweep()
else:
    main_comparison()
