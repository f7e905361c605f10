#!/usr/bin/python3
"""Plots bench/low_bit_link.sh's runs (its OUT.jsonl): median epoch seconds per link rate, one
bar per exchange (fp32 sequential, 1-bit sync, fp32 stale, 1-bit + stale; with the progress
thread and pacing named where they were on), log axis, each bar labelled with the halo MiB it
sent per epoch. Repeated runs of one bar: the median of their medians.

Needs matplotlib (apt-get install python3-matplotlib; run with /usr/bin/python3).
usage: /usr/bin/python3 bench/plot_low_bit.py RUNS.jsonl [--out bench/low_bit_link.png]
"""
import argparse, json, os, statistics, sys

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit("plot_low_bit.py: needs matplotlib (apt-get install python3-matplotlib)")

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("runs")
parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "low_bit_link.png"))
args = parser.parse_args()

def series(run):
    name = run["exchange"]
    if run.get("progress_us", 0) > 0:
        name += f", progress {run['progress_us']} us"
    if run.get("pace_kib", 0) > 0:
        name += f", paced {run['pace_kib']} KiB"
    return name

runs = [json.loads(line) for line in open(args.runs) if line.strip()]
rates = list(dict.fromkeys(r["rate"] for r in runs))
exchanges = list(dict.fromkeys(series(r) for r in runs))
width = 0.8 / len(exchanges)
fig, ax = plt.subplots(figsize=(8, 4.5))
for k, name in enumerate(exchanges):
    xs, ys, labels = [], [], []
    for i, rate in enumerate(rates):
        same = [r for r in runs if r["rate"] == rate and series(r) == name]
        if not same:
            continue
        xs.append(i + (k - (len(exchanges) - 1) / 2) * width)
        ys.append(statistics.median(r["epoch_seconds_median"] for r in same))
        labels.append((same[0]["halo_feature_bytes_per_epoch"] + same[0]["halo_gradient_bytes_per_epoch"]) / 2**20)
    bars = ax.bar(xs, ys, width, label=name)
    for bar, mib in zip(bars, labels):
        ax.annotate(f"{mib:.0f}", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center", va="bottom", fontsize=7)
ax.set_yscale("log")
ax.set_xticks(range(len(rates)))
ax.set_xticklabels(["no limit" if r == "none" else r for r in rates])
ax.set_xlabel("loopback rate (tc tbf), 4 ranks over TCP")
ax.set_ylabel("median epoch seconds (log)")
ax.set_title("GCN 3x128 on the planted graph: low-bit and stale halos\n(labels: halo MiB sent per epoch)")
ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig(args.out, dpi=110)
print(f"wrote {args.out}")
