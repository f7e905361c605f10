"""sar-train's numerics and option domains (usage: numerics_test.py SAR_TRAIN).

On small .npy dataset directories written here (no numpy needed):
1. features of 3e38 and 1e30 train to finite losses (row normalisation cannot overflow);
2. a NaN feature is refused, naming its row and column;
3. --dropout nan, --lr inf and --epochs 0 are refused (exit 1);
4. a loss above --max-loss stops training with the bound in the message;
5. --eval-every 0 reports "not evaluated"; a split without nodes reports "n/a".
"""
import json
import math
import os
import subprocess
import sys
import tempfile

from npy_files import write_npy

program = sys.argv[1]


def write_dataset(directory, features, split):
    """A ring of n nodes (both directions), 2 classes alternating, the given features."""
    n, width = len(features), len(features[0])
    os.makedirs(directory)
    indptr, indices = [0], []
    for i in range(n):
        indices += sorted({(i - 1) % n, (i + 1) % n})
        indptr.append(len(indices))
    write_npy(os.path.join(directory, "indptr.npy"), "<i8", [n + 1], indptr)
    write_npy(os.path.join(directory, "indices.npy"), "<i8", [len(indices)], indices)
    write_npy(os.path.join(directory, "features.npy"), "<f4", [n, width],
              [v for row in features for v in row])
    write_npy(os.path.join(directory, "labels.npy"), "<i4", [n], [i % 2 for i in range(n)])
    write_npy(os.path.join(directory, "split.npy"), "|u1", [n], split)
    with open(os.path.join(directory, "meta.json"), "w") as f:
        json.dump({"format": "sar-npy-dataset", "version": 1, "name": "ring", "num_nodes": n,
                   "num_edges": len(indices), "feature_dim": width, "num_classes": 2}, f)


def train(dataset, *options, expect=0):
    with tempfile.NamedTemporaryFile(suffix=".json") as metrics:
        result = subprocess.run([program, "--dataset", dataset, "--model", "gcn", "--epochs", "3",
                                 "--metrics-out", metrics.name, *options],
                                capture_output=True, text=True)
        assert result.returncode == expect, (options, result.returncode, result.stderr)
        m = json.load(open(metrics.name)) if expect == 0 else None
    return result, m


with tempfile.TemporaryDirectory() as tmp:
    n = 12
    split = [1, 2, 3] * (n // 3)
    huge = os.path.join(tmp, "huge")
    write_dataset(huge, [[3e38 if i % 2 else 1e30, 1.0 + i, 2e38] for i in range(n)], split)
    _, m = train(huge, "--epochs", "60", "--lr", "0.1", "--dropout", "0")
    assert all(math.isfinite(loss) for loss in m["train_loss"]), m["train_loss"]
    # The classes differ only in the ratio of the huge entries: features normalised to zero
    # (the sum overflowing) would leave the accuracy at 0.5.
    assert m["best_val_acc"] == 1.0, m
    _, m = train(huge, "--normalise-features", "on")
    assert all(math.isfinite(loss) for loss in m["train_loss"]), m["train_loss"]

    bad = os.path.join(tmp, "nan")
    write_dataset(bad, [[float("nan") if i == 7 else 1.0, 2.0] for i in range(n)], split)
    r, _ = train(bad, expect=1)
    assert "feature row 7 column 0 is nan" in r.stderr, r.stderr

    for options, words in ((["--dropout", "nan"], "finite"), (["--lr", "inf"], "finite"),
                           (["--epochs", "0"], "--epochs")):
        r, _ = train(huge, *options, expect=1)  # a bad option: exit 1, naming it
        assert words in r.stderr, (options, r.stderr)

    r, _ = train(huge, "--max-loss", "1e-9", expect=1)
    assert "above the bound 1e-09" in r.stderr and "epoch 0" in r.stderr, r.stderr

    r, m = train(huge, "--eval-every", "0")
    assert "not evaluated" in r.stderr + r.stdout and m["best_epoch"] is None, m
    no_valid = os.path.join(tmp, "no-valid")
    write_dataset(no_valid, [[1.0 + i, 1.0] for i in range(n)], [1, 3] * (n // 2))
    r, _ = train(no_valid)
    assert "val n/a" in r.stderr + r.stdout, r.stderr + r.stdout
print("numerics: ok")
