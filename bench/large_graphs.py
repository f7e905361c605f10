#!/usr/bin/env python3
"""Distributed partitioning against serial METIS (bench/RESULTS.md §18).

For a .npy dataset (default: planted, 2M nodes, degree 20 (40M directed edges), 128 features,
written once with sar-convert), runs
  sar-partition --method metis                     (one process: loads everything)
  mpirun -np P sar-partition --method ptscotch     (for each P of --ranks)
and prints one JSON line per run: peak resident memory (serial: the process's; distributed:
the largest rank's, per phase), wall time, edge cut and node/edge balance. Then the cut of
PT-Scotch against METIS on an R-MAT graph (power law).

usage: python3 bench/large_graphs.py [--build build] [--ranks 4 8] [--parts 8] [--nodes 2000000]
       [--degree 20] [--features 128] [--work /tmp/sar-large] [--rmat-scale 20] [--skip-serial]
       [--skip-rmat] [--ptscotch-args "--cluster-size 64 --arc-fraction 0.5"]
"""
import argparse, json, os, re, shlex, subprocess, sys, time

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--build", default="build")
parser.add_argument("--ranks", type=int, nargs="+", default=[4, 8])
parser.add_argument("--parts", type=int, default=8, help="parts of every run (K)")
parser.add_argument("--nodes", type=int, default=2_000_000)
parser.add_argument("--degree", type=int, default=20)
parser.add_argument("--features", type=int, default=128)
parser.add_argument("--rmat-scale", type=int, default=20)
parser.add_argument("--work", default="/tmp/sar-large")
parser.add_argument("--skip-serial", action="store_true", help="skip METIS on the planted graph")
parser.add_argument("--skip-rmat", action="store_true", help="skip the R-MAT graph")
parser.add_argument("--ptscotch-args", default="",
                    help="more options of the ptscotch runs, e.g. '--cluster-size 64'")
args = parser.parse_args()

programs = os.path.join(args.build, "examples")
partition = os.path.join(programs, "sar-partition")
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
os.makedirs(args.work, exist_ok=True)


def run(cmd):
    start = time.time()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{out.stdout}{out.stderr}")
    return out.stdout + out.stderr, time.time() - start


def quality(text):
    m = re.search(r"edge cut (\d+) of (\d+) edges \(([\d.]+)%\); balance \(max/mean\): nodes "
                  r"([\d.]+), edges ([\d.]+)", text)
    return {"edge_cut": int(m[1]), "edges": int(m[2]), "cut_percent": float(m[3]),
            "node_balance": float(m[4]), "edge_balance": float(m[5])}


def measure(spec, label, methods):
    results = []
    for method, ranks in methods:
        out_dir = os.path.join(args.work, f"{label}-{method}-{ranks}")
        cmd = [partition, "--dataset", spec, "--parts", str(args.parts),
               "--method", method, "--out", out_dir]
        if method == "ptscotch":
            cmd += shlex.split(args.ptscotch_args)
        if ranks > 1:
            cmd = ["mpirun", "-np", str(ranks), "--oversubscribe", *cmd]
        text, seconds = run(cmd)
        row = {"input": label, "method": method, "ranks": ranks, "seconds": round(seconds, 1),
               **quality(text)}
        if method == "ptscotch" and args.ptscotch_args:
            row["options"] = args.ptscotch_args
        if ranks > 1:
            row["peak_bytes_largest_rank"] = int(float(re.search(
                r"peak memory ([\d.]+) MiB \(largest rank\)", text)[1]) * 2**20)
            row["phases"] = {m[1]: {"seconds": float(m[2]), "peak_mib": float(m[3])}
                             for m in re.finditer(r"phase (\w+): ([\d.e+-]+) s; largest peak "
                                                  r"([\d.e+-]+) MiB", text)}
        else:
            row["peak_bytes"] = int(float(re.search(r"peak memory ([\d.]+) MiB", text)[1]) * 2**20)
        print(json.dumps(row), flush=True)
        results.append(row)
    return results


npy = os.path.join(args.work, f"planted-{args.nodes}-{args.degree}-{args.features}.npy")
if not os.path.exists(os.path.join(npy, "meta.json")):
    run([os.path.join(programs, "sar-convert"), "--dataset",
         f"planted:nodes={args.nodes},degree={args.degree},features={args.features}",
         "--out", npy])
planted = measure(npy, "planted", ([] if args.skip_serial else [("metis", 1)]) +
                  [("ptscotch", p) for p in args.ranks])
if not args.skip_rmat:
    rmat = f"rmat:scale={args.rmat_scale}"
    measure(rmat, "rmat", [("metis", 1), ("ptscotch", min(args.ranks))])
