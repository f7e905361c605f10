#!/usr/bin/env python3
"""sar-plan against sar-train: per-rank peak memory, halo bytes and epoch time (issue 36).

For each planted graph size N, model and rank count P: sar-train runs (one process for P = 1,
mpirun -np P on a METIS store otherwise, 1 thread per rank, every rank on this machine) and
sar-plan plans the same run from the same dataset or store, calibrated once per model and size
on this machine (sar-plan --calibrate with the model and every P: its kernel rates, its own
epoch on small planted graphs, and on planted graphs of each P's part, P copies at once, as
--ranks-per-machine P says the runs share this machine).
Prints one Markdown table (bench/RESULTS.md §26) and writes every run's metrics under --out.

  /usr/bin/python3 bench/plan_accuracy.py --out /tmp/plan-accuracy
  /usr/bin/python3 bench/plan_accuracy.py --sizes 200000 --ranks 1 2 --models gcn

Graphs, stores, runs and calibrations already under --out are reused (--force reruns the runs
and calibrations, --recalibrate the calibrations alone). Ranks beyond the machine's cores share
them (--oversubscribe), and so do the calibration's copies: such rows are marked.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)
parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--build", default=os.path.join(root, "build"), help="build directory")
parser.add_argument("--out", default=os.path.join(here, "out", "plan"), help="scratch/results")
parser.add_argument("--sizes", nargs="+", type=int, default=[200000, 1000000], help="nodes")
parser.add_argument("--ranks", nargs="+", type=int, default=[1, 2, 4])
parser.add_argument("--models", nargs="+", default=["gcn", "sage", "gat"])
parser.add_argument("--epochs", type=int, default=4, help="epochs per run (median of 2..)")
parser.add_argument("--force", action="store_true", help="rerun runs whose results exist")
parser.add_argument("--recalibrate", action="store_true",
                    help="measure the rates again even where a calibration exists")
args = parser.parse_args()

widths = {"gcn": ["--hidden", "128"], "sage": ["--hidden", "128"],
          "gat": ["--hidden", "32", "--heads", "4"]}
programs = os.path.join(args.build, "examples")
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
cores = os.cpu_count() or 1


def run(command, log):
    """Runs `command`, its output to `log`; exits naming the log on failure."""
    print("+", " ".join(command), flush=True)
    with open(log, "w") as out:
        if subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=env).returncode:
            sys.exit(f"failed: {' '.join(command)} (see {log})")


def program(name):
    return os.path.join(programs, name)


os.makedirs(args.out, exist_ok=True)

rows = []
calibrated = set()  # (model, size) calibrated by this run
ranks_list = ",".join(str(p) for p in args.ranks)
for n in args.sizes:
    dataset = os.path.join(args.out, f"planted-{n}.npy")
    if not os.path.isdir(dataset):
        run([program("sar-convert"), "--dataset", f"planted:nodes={n},degree=20,features=128",
             "--out", dataset], dataset + ".log")
    for p in args.ranks:
        store = os.path.join(args.out, f"store-{n}-{p}")
        if p > 1 and not os.path.isdir(store):
            run([program("sar-partition"), "--dataset", dataset, "--parts", str(p), "--out", store],
                store + ".log")
        source = ["--dataset", dataset] if p == 1 else ["--partitions", store]
        for model in args.models:
            options = ["--model", model] + widths[model]
            # The kernel rates and the model's own epoch on this machine, on small graphs and
            # on every P's part, all ranks on this machine (one file per model and size).
            rates = os.path.join(args.out, f"rates-{model}-{n}.json")
            if (model, n) not in calibrated and (args.force or args.recalibrate or
                                                 not os.path.exists(rates)):
                run([program("sar-plan"), "--dataset", dataset] + options +
                    ["--ranks", ranks_list, "--ranks-per-machine", str(max(args.ranks)),
                     "--calibrate", "--calibration", rates + ".tmp"], rates + ".log")
                os.replace(rates + ".tmp", rates)
            calibrated.add((model, n))
            metrics = os.path.join(args.out, f"{model}-{n}-{p}.json")
            if args.force or not os.path.exists(metrics):
                train = [program("sar-train")] + source + options + [
                    "--epochs", str(args.epochs), "--eval-every", "0", "--threads", "1",
                    "--quiet", "--metrics-out", metrics + ".tmp"]
                if p > 1:
                    train = ["mpirun", "-np", str(p), "--oversubscribe", "--bind-to", "none"] + train
                run(train, metrics + ".log")
                os.replace(metrics + ".tmp", metrics)
            plan_out = subprocess.run(
                [program("sar-plan")] + source + options +
                ["--ranks", str(p), "--ranks-per-machine", str(p), "--calibration", rates,
                 "--json"],
                capture_output=True, text=True, env=env, check=True).stdout
            plan = json.loads(plan_out)
            plan = plan[0] if isinstance(plan, list) else plan
            measured = json.load(open(metrics))
            epochs = measured["epoch_seconds"][1:] or measured["epoch_seconds"]
            halo = (measured.get("halo_feature_bytes_per_epoch") or 0) + \
                   (measured.get("halo_gradient_bytes_per_epoch") or 0)
            rows.append((n, p, model, plan["peak_memory_bytes_per_rank"],
                         measured["peak_memory_bytes"], plan["halo_bytes_per_epoch"], halo,
                         plan["epoch_seconds"], statistics.median(epochs)))

mib = 2 ** 20
print("\n| N | P | model | planned MiB | measured MiB | error | planned halo MB | measured halo MB "
      "| error | planned epoch s | measured epoch s | error |")
print("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for n, p, model, pm, mm, ph, mh, ps, ms in rows:
    def error(planned, got):
        return f"{100 * (planned - got) / got:+.1f} %" if got else "-"
    shared = " (shares cores)" if p > cores else ""
    print(f"| {n // 1000}k | {p} | {model} | {pm / mib:.0f} | {mm / mib:.0f} | {error(pm, mm)} | "
          f"{ph / 1e6:.1f} | {mh / 1e6:.1f} | {error(ph, mh)} | {ps:.3f} | {ms:.3f}{shared} | "
          f"{error(ps, ms)} |")
