#!/usr/bin/env python3
"""Plots the per-epoch CSV logs of sar-train (--log-csv) as one PNG: losses on the left,
accuracies on the right, one colour per run.

  usage: plot_training.py OUT.png LABEL=LOG.csv [LABEL=LOG.csv ...]

Needs matplotlib (Debian: python3-matplotlib). Writes OUT.png through a temporary file in the
same directory, so a failure leaves a previous plot intact.
"""
import csv
import os
import sys
import tempfile


def read_log(path):
    """{column: [values]} of a sar-train CSV log; empty cells (not evaluated) become None."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit(f"plot_training.py: {path} has no epochs")
    return {key: [float(r[key]) if r[key] else None for r in rows] for key in rows[0]}


def main():
    if len(sys.argv) < 3 or sys.argv[1] in ("-h", "--help") or "=" not in "".join(sys.argv[2:]):
        print(__doc__.strip())
        sys.exit(0 if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help") else 2)
    out = sys.argv[1]
    runs = [arg.split("=", 1) for arg in sys.argv[2:]]
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (loss_ax, acc_ax) = plt.subplots(1, 2, figsize=(11, 4.2))
    for index, (label, path) in enumerate(runs):
        log = read_log(path)
        colour = f"C{index}"
        epochs = log["epoch"]

        def series(column):
            pairs = [(e, v) for e, v in zip(epochs, log[column]) if v is not None]
            return [p[0] for p in pairs], [p[1] for p in pairs]

        loss_ax.plot(*series("train_loss"), color=colour, label=f"{label} train")
        loss_ax.plot(*series("valid_loss"), color=colour, linestyle="--", label=f"{label} valid")
        acc_ax.plot(*series("train_acc"), color=colour, linestyle=":", label=f"{label} train")
        acc_ax.plot(*series("test_acc"), color=colour, label=f"{label} test")
    loss_ax.set(xlabel="epoch", ylabel="cross-entropy loss", title="loss")
    acc_ax.set(xlabel="epoch", ylabel="accuracy", title="accuracy", ylim=(0, 1))
    for ax in (loss_ax, acc_ax):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()

    directory = os.path.dirname(os.path.abspath(out))
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=".plot-", suffix=".png")
    os.close(handle)
    try:
        fig.savefig(temporary, dpi=110)
        os.replace(temporary, out)
    except BaseException:
        os.unlink(temporary)
        raise


if __name__ == "__main__":
    main()
