"""Minibatch training on features read in place (sar-train --map-features) against loaded
features: the same losses; epoch time with the features' pages evicted from the page cache
(cold: the first epoch reads them from the disk) and cached (warm); peak memory
(bench/RESULTS.md).

usage: python3 bench/mapped_features.py SAR_TRAIN SAR_CONVERT WORK_DIR [NODES] [FEATURES]

Writes WORK_DIR/planted.npy with sar-convert (removed afterwards). Cold: the file's pages are
dropped from the page cache (posix_fadvise DONTNEED, which drops clean pages no process maps)
before the run. Each run is a process of its own.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sar_train, sar_convert, work = sys.argv[1:4]
nodes = int(sys.argv[4]) if len(sys.argv) > 4 else 2_000_000
width = int(sys.argv[5]) if len(sys.argv) > 5 else 128
dataset = os.path.join(work, "planted.npy")
features = os.path.join(dataset, "features.npy")
subprocess.run([sar_convert, "--dataset",
                f"planted:nodes={nodes},classes=16,degree=10,features={width}", "--out", dataset],
               check=True, capture_output=True)
common = [sar_train, "--dataset", dataset, "--minibatch", "1024", "--model", "sage",
          "--layers", "2", "--hidden", "128", "--epochs", "3", "--seed", "1", "--eval-every",
          "0", "--threads", "2", "--normalise-features", "off", "--quiet"]


def evict():
    fd = os.open(features, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)


def train(label, *options, cold=False):
    if cold:
        evict()
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        command = [*common, "--metrics-out", out.name, *options]
        subprocess.run(command, check=True, capture_output=True)
        m = json.load(open(out.name))
    return {"run": label, "command": " ".join(command), "epoch_s": m["epoch_seconds"],
            "peak_mib": m["peak_memory_bytes"] / 2**20, "losses": m["train_loss"]}


rows = [train("loaded"), train("mapped, cold", "--map-features", cold=True),
        train("mapped, warm", "--map-features")]
rows[0]["features_mib"] = os.path.getsize(features) / 2**20
for row in rows[1:]:
    row["same_losses_as_loaded"] = row["losses"] == rows[0]["losses"]
shutil.rmtree(dataset)
for row in rows:
    print(json.dumps(row))
