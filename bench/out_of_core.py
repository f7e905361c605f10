"""Out-of-core training (sar-train --memory-budget) against training in memory: peak memory
within budgets of 1/2, 1/4 and 1/8 of the in-memory peak, epoch time, spill traffic, and the
same losses (bench/RESULTS.md).

usage: python3 bench/out_of_core.py SAR_TRAIN SPILL_DIR [NODES] [EPOCHS] [MODEL]

The in-memory run's peak is its process peak (loading included); the out-of-core runs report
the peak of training (sar-train resets the peak once the features are on disk: loading the
dataset holds it whole first). Each run is a process of its own; the page cache is not
dropped between runs.
"""
import json
import re
import subprocess
import sys
import tempfile

sar_train, spill = sys.argv[1], sys.argv[2]
nodes = int(sys.argv[3]) if len(sys.argv) > 3 else 1_000_000
epochs = sys.argv[4] if len(sys.argv) > 4 else "3"
model = sys.argv[5] if len(sys.argv) > 5 else "gcn"
common = ["--dataset", f"planted:nodes={nodes},classes=16,degree=20,features=64", "--model",
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
    parts = re.findall(r"out of core within [^:]+: (\d+) parts of (\d+) nodes", log)
    return metrics, spilled, parts, " ".join(command)


in_memory, _, _, command = train()
peak = in_memory["peak_memory_bytes"]
rows = [{"budget": "in memory", "command": command, "peak_mib": peak / 2**20,
         "epoch_s": in_memory["epoch_seconds_median"], "losses": in_memory["train_loss"]}]
for fraction in (2, 4, 8):
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
for row in rows:
    print(json.dumps(row))
