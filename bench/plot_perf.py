#!/usr/bin/python3
"""Plots bench/perf_vs_torch.py --sweep: epoch time and peak memory against graph size (log-log),
sar (solid) and the PyTorch peer (dashed), one colour per model.

Needs matplotlib: apt-get install python3-matplotlib, run with /usr/bin/python3.
usage: /usr/bin/python3 bench/plot_perf.py [--sweep bench/out/perf/sweep.json]
                                           [--out bench/perf_scaling.png]
"""
import argparse
import json
import os
import sys

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit("plot_perf.py: needs matplotlib (apt-get install python3-matplotlib; "
             "run with /usr/bin/python3)")

here = os.path.dirname(os.path.abspath(__file__))
parser = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--sweep", default=os.path.join(here, "out", "perf", "sweep.json"))
parser.add_argument("--out", default=os.path.join(here, "perf_scaling.png"))
args = parser.parse_args()

with open(args.sweep) as f:
    rows = json.load(f)
if not rows:
    sys.exit(f"plot_perf.py: no rows in {args.sweep}")

colours = {"gcn": "tab:blue", "sage": "tab:green", "gat": "tab:red"}
names = {"gcn": "GCN", "sage": "SAGE-mean", "gat": "GAT 4x32"}
fig, (ax_time, ax_memory) = plt.subplots(1, 2, figsize=(14, 5.5))
for model in [m for m in ["gcn", "sage", "gat"] if any(r["model"] == m for r in rows)]:
    for side, style, label in [("sar", "-o", "sar"), ("torch", "--s", "PyTorch")]:
        points = sorted((r["nodes"], r[f"{side}_seconds"], r[f"{side}_peak_bytes"])
                        for r in rows if r["model"] == model and f"{side}_seconds" in r)
        if not points:
            continue
        nodes = [p[0] for p in points]
        ax_time.plot(nodes, [p[1] for p in points], style, color=colours[model],
                     label=f"{names[model]}, {label}")
        ax_memory.plot(nodes, [p[2] / 2**30 for p in points], style, color=colours[model],
                       label=f"{names[model]}, {label}")
for ax, title, unit in [(ax_time, "epoch time (forward + backward + Adam)", "seconds"),
                        (ax_memory, "peak memory (process RSS)", "GiB")]:
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("nodes (planted partition, average degree 20, 128 features)")
    ax.set_ylabel(unit)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
fig.suptitle("sar vs a PyTorch peer, 2 threads, 2-layer models (hidden 128; GAT 4 heads x 32)")
fig.tight_layout()
fig.savefig(args.out, dpi=110)
print(f"wrote {args.out}")
