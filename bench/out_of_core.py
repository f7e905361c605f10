"""Out-of-core training (sar-train --memory-budget) against training in memory: peak memory
within budgets of 1/2, 1/4 and 1/8 of the in-memory peak, epoch time, spill traffic, and the
same losses (bench/RESULTS.md).

usage: python3 bench/out_of_core.py SAR_TRAIN SPILL_DIR [NODES] [EPOCHS] [MODEL] [SAR_PARTITION]

FRACTIONS=4 (environment) runs that budget alone (default 2,4,8). With SAR_PARTITION, the
budget of 1/4 again on a partition store of METIS parts that each fit it (sar-partition
--parts K, K = 1.05 x the parts of the run in node order, as sar-plan suggests), written in
SPILL_DIR/store and removed afterwards: parts of neighbourhoods.

The in-memory run's peak is its process peak (loading included); the out-of-core runs report
the peak of training (sar-train resets the peak once the features are on disk: loading the
dataset holds it whole first). Each run is a process of its own; the page cache is not
dropped between runs.
"""
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sar_train, spill = sys.argv[1], sys.argv[2]
nodes = int(sys.argv[3]) if len(sys.argv) > 3 else 1_000_000
epochs = sys.argv[4] if len(sys.argv) > 4 else "3"
model = sys.argv[5] if len(sys.argv) > 5 else "gcn"
sar_partition = sys.argv[6] if len(sys.argv) > 6 else None
dataset = f"planted:nodes={nodes},classes=16,degree=20,features=64"
common = ["--dataset", dataset, "--model",
          model, "--layers", "3", "--hidden", "64", "--epochs", epochs, "--seed", "1",
          "--eval-every", "0", "--log-every", "1", "--threads", "2"]


def train(*options):
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        command = [sar_train, *common, "--metrics-out", out.name, *options]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:  # a budget below the smallest feasible one: its reason
            return None, result.stderr.strip().splitlines()[-1], None, " ".join(command)
        metrics = json.load(open(out.name))
    log = result.stderr + result.stdout
    spilled = [(float(r), float(w)) for r, w in
               re.findall(r"spill ([0-9.]+) MiB read, ([0-9.]+) MiB written", log)]
    parts = re.findall(r"out of core within [^:]+: (\d+) parts of at most (\d+) nodes", log)
    return metrics, spilled, parts, " ".join(command)


in_memory, _, _, command = train()
peak = in_memory["peak_memory_bytes"]
rows = [{"budget": "in memory", "command": command, "peak_mib": peak / 2**20,
         "epoch_s": in_memory["epoch_seconds_median"], "losses": in_memory["train_loss"]}]
for fraction in (int(f) for f in os.environ.get("FRACTIONS", "2,4,8").split(",")):
    budget = int(peak / fraction)
    metrics, spilled, parts, command = train("--memory-budget", str(budget), "--spill-dir", spill)
    if metrics is None:
        rows.append({"budget": f"1/{fraction}", "budget_mib": budget / 2**20,
                     "command": command, "refused": spilled})
        continue
    worst = max(abs(a - b) / abs(a)
                for a, b in zip(in_memory["train_loss"], metrics["train_loss"]))
    rows.append({"budget": f"1/{fraction}", "budget_mib": budget / 2**20, "command": command,
                 "parts": parts[0] if parts else None,
                 "peak_mib": metrics["peak_memory_bytes"] / 2**20,
                 "over_budget_mib": (metrics["peak_memory_bytes"] - budget) / 2**20,
                 "epoch_s": metrics["epoch_seconds_median"],
                 "spill_mib_per_epoch": spilled[-1] if spilled else None,
                 "largest_loss_difference": worst})
quarter = next((r for r in rows if r["budget"] == "1/4" and r.get("parts")), None)
if sar_partition and quarter:
    store = os.path.join(spill, "store")
    parts = math.ceil(1.05 * int(quarter["parts"][0]))
    started = time.time()
    subprocess.run([sar_partition, "--dataset", dataset, "--parts", str(parts), "--method",
                    "metis", "--out", store], check=True, capture_output=True)
    partitioned = time.time() - started
    common = [o for o in common if o not in ("--dataset", dataset)] + ["--partitions", store]
    metrics, spilled, cut, command = train("--memory-budget", str(int(peak / 4)),
                                           "--spill-dir", spill)
    shutil.rmtree(store)
    worst = max(abs(a - b) / abs(a)
                for a, b in zip(in_memory["train_loss"], metrics["train_loss"]))
    rows.append({"budget": "1/4, a store of METIS parts", "store_parts": parts,
                 "sar_partition_seconds": partitioned, "command": command, "parts": cut[0],
                 "peak_mib": metrics["peak_memory_bytes"] / 2**20,
                 "over_budget_mib": (metrics["peak_memory_bytes"] - peak / 4) / 2**20,
                 "epoch_s": metrics["epoch_seconds_median"],
                 "spill_mib_per_epoch": spilled[-1] if spilled else None,
                 "largest_loss_difference": worst})
for row in rows:
    print(json.dumps(row))
