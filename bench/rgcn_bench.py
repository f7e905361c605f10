#!/usr/bin/python3
"""The R-GCN benchmark of issue 35: sar-train --model rgcn against a PyTorch peer
(bench/torch_rgcn_peer.py), and its memory on 4 ranks against one process.

1. Comparison. Planted heterogeneous graphs (sar-convert --dataset
   planted-hetero:nodes=N,authors=A --out DIR, written once; N papers with 16 features,
   A authors with 8, relations writes / agrees / disagrees and their reverses: 22 in-edges
   per paper in all) are trained by sar-train (--eval-every 0: no evaluation, so an epoch is
   forward + loss + backward + Adam step on both sides) and by the peer with the same model
   and settings (2 R-GCN layers, hidden 64, dropout 0.5, Adam lr 0.01), on T = 1 and 2
   threads. The peer runs every --aggregations way of its relation sum (torch.sparse.mm per
   relation, index_add per relation, one fused sparse.mm); the target ratio is taken against
   the faster of the two per-relation ways (the peer a DGL/PyG user writes), and the fused
   one is shown too.
   Targets: sar's epoch at least 5x faster, its peak memory at most half the peer's.

2. Memory at P = 4. A --memory-layers (3) layer R-GCN on a graph of about 1M nodes
   (nodes=800000,authors=200000): one process (sar-train --dataset DIR, 2 threads) against
   mpirun -np 4 --oversubscribe sar-train --partitions STORE --schedule sequential (1 thread
   per rank; STORE from sar-partition --dataset DIR --parts 4, METIS).
   Target: the largest rank's peak_memory_bytes at most 0.4 of the one process's; both
   runs learn (the loss falls) and the 4-rank losses equal the one process's (1e-5).

Every measurement is a separate process run one after another, nothing in parallel; a run
whose JSON exists in OUT/runs is reused unless --force. Timings are repeated in --rounds
rounds (sar, then the peer, back to back for each size and thread count), so each ratio is
between runs minutes apart; the tables give the median over rounds and [smallest-largest].
Epoch time is the median of a run's epochs after the first, the same rule for both sides.

Run with the system Python (/usr/bin/python3; the peer needs Debian's python3-torch:
scripts/install-deps.sh --bench). mpirun runs with OMPI_ALLOW_RUN_AS_ROOT set.
"""
import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)

parser = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--build", default=os.path.join(root, "build"), help="build directory")
parser.add_argument("--out", default=os.path.join(here, "out", "rgcn"), help="scratch/results")
parser.add_argument("--sizes", default="50000:15000 200000:60000",
                    help="graphs of the comparison, 'papers:authors ...'")
parser.add_argument("--threads", default="1 2", help="thread counts of the comparison")
parser.add_argument("--epochs", type=int, default=6,
                    help="epochs per comparison run (median of all but the first)")
parser.add_argument("--rounds", type=int, default=3, help="rounds of the comparison runs")
parser.add_argument("--aggregations", default="sparse index_add fused",
                    help="the peer's ways of summing relations (torch_rgcn_peer.py "
                    "--aggregation)")
parser.add_argument("--aggregation-rounds", type=int, default=1,
                    help="rounds in which the peer runs every --aggregations way (later "
                    "rounds run only the fastest per-relation way of round 1)")
parser.add_argument("--memory-size", default="800000:200000",
                    help="graph of the P = 4 memory test, 'papers:authors' ('' skips it)")
parser.add_argument("--memory-layers", type=int, default=3)
parser.add_argument("--memory-epochs", type=int, default=10)
parser.add_argument("--ranks", type=int, default=4)
parser.add_argument("--skip-comparison", action="store_true")
parser.add_argument("--timeout", type=int, default=7200, help="seconds per run")
parser.add_argument("--force", action="store_true", help="rerun runs whose results exist")
args = parser.parse_args()
if args.rounds < 1 or args.epochs < 2:
    parser.error("need --rounds >= 1 and --epochs >= 2")

MIB = 1024.0 * 1024.0
PER_RELATION = ("sparse", "index_add")
program = {name: os.path.join(args.build, "examples", name)
           for name in ("sar-train", "sar-convert", "sar-partition")}
os.makedirs(os.path.join(args.out, "runs"), exist_ok=True)
environment = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


def wait_for_programs():
    """Waits (up to an hour) while a sar program is missing, e.g. being relinked."""
    for attempt in range(60):
        missing = [p for p in program.values() if not os.access(p, os.X_OK)]
        if not missing:
            return
        print(f"  {missing[0]} missing (being rebuilt?); waiting 60 s", flush=True)
        time.sleep(60)
    sys.exit(f"rgcn_bench.py: {missing[0]} not found; build it (ninja -C {args.build})")


def run(command, log, attempts=4):
    """Runs command (a list), output to log; on failure waits and retries (the programs may
    be relinked under us), then raises with the log's tail."""
    for attempt in range(1, attempts + 1):
        wait_for_programs()
        print("+ " + " ".join(shlex.quote(c) for c in command), flush=True)
        start = time.time()
        with open(log, "w") as f:
            code = subprocess.run(command, stdout=f, stderr=subprocess.STDOUT, env=environment,
                                  timeout=args.timeout).returncode
        if code == 0:
            print(f"  done in {time.time() - start:.0f} s", flush=True)
            return
        with open(log) as f:
            tail = "".join(f.readlines()[-8:])
        if attempt == attempts:
            raise RuntimeError(f"exit {code} after {time.time() - start:.0f} s; {log}:\n{tail}")
        print(f"  exit {code}; retrying in 120 s; {log}:\n{tail}", flush=True)
        time.sleep(120)


def measured(name, command_for):
    """The JSON of run `name`, running command_for(json_path) first if needed (with the
    sar-train binary's modification time recorded)."""
    path = os.path.join(args.out, "runs", name + ".json")
    if args.force or not os.path.exists(path):
        tmp = path + ".tmp"
        run(command_for(tmp), os.path.join(args.out, "runs", name + ".log"))
        with open(tmp) as f:
            m = json.load(f)
        m["bench_sar_train_mtime"] = time.ctime(os.path.getmtime(program["sar-train"]))
        m["bench_load_average"] = os.getloadavg()[0]
        with open(tmp, "w") as f:
            json.dump(m, f, indent=1)
        os.replace(tmp, path)
    with open(path) as f:
        return json.load(f)


def size_name(size):
    papers, authors = size.split(":")
    return f"{int(papers) // 1000}k-{int(authors) // 1000}k"


def graph(size):
    """The .npy directory of the planted heterogeneous graph 'papers:authors' (written once;
    the spec is kept beside it)."""
    papers, authors = size.split(":")
    spec = f"planted-hetero:nodes={papers},authors={authors}"
    directory = os.path.join(args.out, f"hetero-{size_name(size)}")
    stamp = directory + ".spec"
    if args.force or not os.path.exists(stamp) or open(stamp).read() != spec:
        if os.path.exists(directory):
            shutil.rmtree(directory)
        run([program["sar-convert"], "--dataset", spec, "--out", directory],
            directory + ".log")
        with open(stamp, "w") as f:
            f.write(spec)
    return directory


def dataset_size(directory):
    """(nodes, stored edges) from the dataset's meta.json."""
    with open(os.path.join(directory, "meta.json")) as f:
        meta = json.load(f)
    return meta["num_nodes"], meta["num_edges"]


def store(directory, parts):
    """The METIS partition store of `directory` in `parts` parts (written once)."""
    out = f"{directory}.{parts}"
    if args.force or not os.path.exists(os.path.join(out, "meta.json")):
        if os.path.exists(out):
            shutil.rmtree(out)
        run([program["sar-partition"], "--dataset", directory, "--parts", str(parts), "--out",
             out], out + ".log")
    return out


def sar_command(source, threads, epochs, layers, metrics, mpi_ranks=0):
    command = [program["sar-train"], *source, "--model", "rgcn", "--layers", str(layers),
               "--epochs", str(epochs), "--eval-every", "0", "--normalise-features", "off",
               "--threads", str(threads), "--quiet", "--metrics-out", metrics]
    if mpi_ranks:
        command = ["mpirun", "-np", str(mpi_ranks), "--oversubscribe", "--bind-to", "none",
                   *command, "--schedule", "sequential"]
    return command


def ours(directory, threads, tag):
    return measured(f"sar-{tag}-t{threads}", lambda m: sar_command(
        ["--dataset", directory], threads, args.epochs, 2, m))


def peer(directory, threads, aggregation, tag):
    return measured(f"torch-{aggregation}-{tag}-t{threads}", lambda m: [
        "/usr/bin/python3", os.path.join(here, "torch_rgcn_peer.py"), "--dataset", directory,
        "--layers", "2", "--hidden", "64", "--dropout", "0.5", "--lr", "0.01",
        "--aggregation", aggregation, "--epochs", str(args.epochs), "--threads", str(threads),
        "--metrics-out", m])


def epoch_seconds(metrics):
    """Median epoch time without the first (warm-up) epoch, the same rule for both sides."""
    times = metrics["epoch_seconds"]
    return statistics.median(times[1:] if len(times) > 1 else times)


def spread(values, digits, suffix=""):
    """'median [min-max]' of per-round values."""
    text = f"{statistics.median(values):.{digits}f}{suffix}"
    if len(values) > 1:
        text += f" [{min(values):.{digits}f}-{max(values):.{digits}f}]"
    return text


def verdict(ok):
    return "met" if ok else "MISSED"


def comparison(summary, out):
    sizes = args.sizes.split()
    thread_counts = [int(t) for t in args.threads.split()]
    aggregations = args.aggregations.split()
    # runs[(size, t)]: one dict per round: "sar" and the peer's aggregations run that round.
    runs = {(s, t): [] for s in sizes for t in thread_counts}
    chosen = {}  # (size, t) -> the faster per-relation way of round 1
    for r in range(1, args.rounds + 1):
        for size in sizes:
            directory = graph(size)
            for t in thread_counts:
                tag = f"{size_name(size)}-r{r}"
                entry = {"sar": ours(directory, t, tag)}
                ways = aggregations if r <= args.aggregation_rounds else \
                    [chosen[(size, t)]] + (["fused"] if "fused" in aggregations else [])
                for a in ways:
                    entry[a] = peer(directory, t, a, tag)
                if (size, t) not in chosen:
                    candidates = [a for a in PER_RELATION if a in entry] or \
                        [a for a in aggregations if a in entry]
                    chosen[(size, t)] = min(candidates, key=lambda a: epoch_seconds(entry[a]))
                runs[(size, t)].append(entry)

    out.append("### sar against the PyTorch peer (2 R-GCN layers, hidden 64)\n")
    out.append(f"Median of epochs 2..{args.epochs} per run; {args.rounds} rounds, median "
               f"[smallest-largest] over rounds. 'peer' = the faster per-relation way of the "
               f"peer (round 1 picks it).\n")
    out.append("| graph (papers:authors) | nodes | edges | T | sar s | peer way | peer s | "
               "speed-up (>= 5x) | fused peer s | speed-up vs fused | sar MiB | peer MiB | "
               "memory ratio (<= 0.5) | fused peer MiB |")
    out.append("|---|---:|---:|---:|---:|---|---:|---|---:|---:|---:|---:|---|---:|")
    summary["comparison"] = []
    for (size, t), entries in runs.items():
        way = chosen[(size, t)]
        sar_s = [epoch_seconds(e["sar"]) for e in entries]
        peer_s = [epoch_seconds(e[way]) for e in entries]
        speed = [p / s for p, s in zip(peer_s, sar_s)]
        sar_mib = [e["sar"]["peak_memory_bytes"] / MIB for e in entries]
        peer_mib = [e[way]["peak_memory_bytes"] / MIB for e in entries]
        memory = [a / b for a, b in zip(sar_mib, peer_mib)]
        fused = [e for e in entries if "fused" in e]
        fused_s = [epoch_seconds(e["fused"]) for e in fused]
        fused_speed = [epoch_seconds(e["fused"]) / epoch_seconds(e["sar"]) for e in fused]
        fused_mib = [e["fused"]["peak_memory_bytes"] / MIB for e in fused]
        all_ways = {a: [epoch_seconds(e[a]) for e in entries if a in e] for a in aggregations}
        nodes, edges = dataset_size(graph(size))
        row = {"size": size, "threads": t, "nodes": nodes, "edges": edges, "peer_way": way,
               "sar_seconds": sar_s, "peer_seconds": peer_s, "speedup": speed,
               "sar_mib": sar_mib, "peer_mib": peer_mib, "memory_ratio": memory,
               "fused_seconds": fused_s, "fused_mib": fused_mib,
               "peer_seconds_by_way": all_ways,
               "sar_loss_first_last": [entries[0]["sar"]["train_loss"][0],
                                       entries[0]["sar"]["train_loss"][-1]],
               "peer_loss_first_last": [entries[0][way]["train_loss"][0],
                                        entries[0][way]["train_loss"][-1]]}
        summary["comparison"].append(row)
        out.append(
            f"| {size} | {row['nodes']} | {row['edges']} | {t} | {spread(sar_s, 3)} | {way} | "
            f"{spread(peer_s, 3)} | {spread(speed, 1, 'x')} "
            f"{verdict(statistics.median(speed) >= 5)} | "
            f"{spread(fused_s, 3) if fused_s else '-'} | "
            f"{spread(fused_speed, 1, 'x') if fused_speed else '-'} | "
            f"{statistics.median(sar_mib):.0f} | {statistics.median(peer_mib):.0f} | "
            f"{spread(memory, 2)} {verdict(statistics.median(memory) <= 0.5)} | "
            f"{f'{statistics.median(fused_mib):.0f}' if fused_mib else '-'} |")
    out.append("\nThe peer's ways, epoch seconds (median over the rounds that ran them):\n")
    out.append("| graph | T | " + " | ".join(aggregations) + " |")
    out.append("|---|---:|" + "---:|" * len(aggregations))
    for row in summary["comparison"]:
        cells = [f"{statistics.median(v):.3f}" if v else "-"
                 for v in (row["peer_seconds_by_way"][a] for a in aggregations)]
        out.append(f"| {row['size']} | {row['threads']} | " + " | ".join(cells) + " |")


def memory_test(summary, out):
    directory = graph(args.memory_size)
    parts = store(directory, args.ranks)
    tag = f"{size_name(args.memory_size)}-l{args.memory_layers}"
    one = measured(f"sar-{tag}-p1", lambda m: sar_command(
        ["--dataset", directory], 2, args.memory_epochs, args.memory_layers, m))
    many = measured(f"sar-{tag}-p{args.ranks}", lambda m: sar_command(
        ["--partitions", parts], 1, args.memory_epochs, args.memory_layers, m,
        mpi_ranks=args.ranks))
    ratio = many["peak_memory_bytes"] / one["peak_memory_bytes"]
    l1, lp = one["train_loss"], many["train_loss"]
    difference = max(abs(a - b) / max(abs(a), 1e-30) for a, b in zip(l1, lp))
    summary["memory"] = {"size": args.memory_size, "layers": args.memory_layers,
                         "ranks": args.ranks, "one_process": one, "ranks_run": many,
                         "ratio": ratio, "loss_relative_difference": difference}
    out.append(f"\n### Memory: {args.memory_layers}-layer R-GCN, one process against "
               f"P = {args.ranks} (sequential)\n")
    out.append("| graph | nodes | edges | P = 1 MiB | P = 4 MiB (largest rank) | ratio (<= 0.4) | "
               "P = 1 losses | P = 4 losses | largest relative loss difference | epoch s "
               "P = 1 / P = 4 |")
    out.append("|---|---:|---:|---:|---:|---|---|---|---:|---|")
    losses = lambda v: ", ".join(f"{x:.6f}" for x in v)
    nodes, edges = dataset_size(directory)
    out.append(f"| {args.memory_size} | {nodes} | {edges} | "
               f"{one['peak_memory_bytes'] / MIB:.0f} | {many['peak_memory_bytes'] / MIB:.0f} | "
               f"{ratio:.3f} {verdict(ratio <= 0.4)} | {losses(l1)} | {losses(lp)} | "
               f"{difference:.1e} {verdict(difference <= 1e-5)} | "
               f"{epoch_seconds(one):.1f} / {epoch_seconds(many):.1f} |")
    learns = l1[-1] < l1[0] and lp[-1] < lp[0]
    out.append(f"\nBoth runs learn (last loss below the first): {verdict(learns)}.")


def main():
    summary = {"epochs": args.epochs, "rounds": args.rounds, "threads": args.threads,
               "sizes": args.sizes, "load_average_at_start": os.getloadavg()}
    out = []
    if not args.skip_comparison:
        comparison(summary, out)
    if args.memory_size:
        memory_test(summary, out)
    text = "\n".join(out)
    print(text)
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(f"wrote {args.out}/summary.md and summary.json")


if __name__ == "__main__":
    main()
