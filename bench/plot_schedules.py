#!/usr/bin/python3
"""Plots the results of bench/bench_schedules.sh against the number of ranks P (log-2 axis),
one line per (model, schedule): peak memory per rank, with the ideal 1/P line from each
model's P = 1 run; the same peak as a fraction of P = 1, with the issue's target (sequential
at P = 4 <= 0.35 of P = 1 for GCN and SAGE); and the halo bytes sent per epoch (all ranks).

Needs matplotlib: on Debian `apt-get install python3-matplotlib` and run it with the system
Python, /usr/bin/python3 (a pyenv/venv python3 may not see Debian's packages).

usage: /usr/bin/python3 bench/plot_schedules.py [--results bench/out/schedules/results.json]
                                                [--out bench/schedules_memory.png]
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
    sys.exit("plot_schedules.py: needs matplotlib (apt-get install python3-matplotlib; "
             "run with /usr/bin/python3)")

here = os.path.dirname(os.path.abspath(__file__))
parser = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--results", default=os.path.join(here, "out", "schedules", "results.json"))
parser.add_argument("--out", default=os.path.join(here, "schedules_memory.png"))
parser.add_argument("--title", default="")
args = parser.parse_args()

with open(args.results) as f:
    runs = json.load(f)
if not runs:
    sys.exit(f"plot_schedules.py: no runs in {args.results}")

MIB = 1024.0 * 1024.0
colours = {"gcn": "tab:blue", "sage": "tab:green", "gat": "tab:red"}
styles = {"sequential": ("-", "o"), "keep_halo": (":", "s"), "one_shot": ("--", "^")}
model_names = {"gcn": "GCN", "sage": "SAGE-mean", "gat": "GAT"}

series = {}  # (model, schedule) -> {P: run}
for r in runs:
    series.setdefault((r["model"], r["schedule"]), {})[int(r["ranks"])] = r
models = [m for m in ["gcn", "sage", "gat"] if any(k[0] == m for k in series)]
schedules = [s for s in ["sequential", "keep_halo", "one_shot"] if any(k[1] == s for k in series)]
ranks = sorted({int(r["ranks"]) for r in runs})

fig, (ax_mem, ax_ratio, ax_sent) = plt.subplots(1, 3, figsize=(16, 6))
for m in models:
    # P = 1 runs are the same computation under every schedule: the ideal line starts from
    # their smallest peak.
    p1 = [series[(m, s)][1]["peak_memory_bytes"] for s in schedules
          if (m, s) in series and 1 in series[(m, s)]]
    base = min(p1) / MIB if p1 else None
    if base:
        ax_mem.plot(ranks, [base / p for p in ranks], color=colours[m], alpha=0.3, lw=4,
                    label=f"{model_names[m]}: P=1 peak / P (ideal)")
    for s in schedules:
        pts = sorted(series.get((m, s), {}).items())
        if not pts:
            continue
        ls, marker = styles[s]
        xs = [p for p, _ in pts]
        ax_mem.plot(xs, [r["peak_memory_bytes"] / MIB for _, r in pts], color=colours[m],
                    ls=ls, marker=marker, label=f"{model_names[m]} {s}")
        if base:
            ax_ratio.plot(xs, [r["peak_memory_bytes"] / MIB / base for _, r in pts],
                          color=colours[m], ls=ls, marker=marker)
        sent = [(p, r["bytes_sent_per_epoch"] / MIB) for p, r in pts if p > 1]
        if sent:
            ax_sent.plot([p for p, _ in sent], [b for _, b in sent], color=colours[m], ls=ls,
                         marker=marker, label=f"{model_names[m]} {s}")

ax_ratio.plot(ranks, [1.0 / p for p in ranks], color="grey", alpha=0.4, lw=4)
ax_ratio.plot([4], [0.35], marker="*", ms=16, color="black", ls="none")
ax_ratio.annotate("target: sequential at P=4\n<= 0.35 (GCN, SAGE)", (4, 0.35),
                  textcoords="offset points", xytext=(-170, -60), fontsize=8,
                  arrowprops=dict(arrowstyle="->", color="black"))
for ax in (ax_mem, ax_ratio, ax_sent):
    ax.set_xscale("log", base=2)
    ax.set_xticks(ranks)
    ax.set_xticklabels([str(p) for p in ranks])
    ax.set_xlabel("ranks P (MPI processes on one machine)")
    ax.grid(True, which="both", alpha=0.3)
ax_mem.set_yscale("log", base=2)
ax_mem.set_ylabel("peak resident memory of the largest rank (MiB)")
ax_mem.set_title("peak memory per rank")
ax_mem.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
ax_ratio.set_yscale("log", base=2)
ax_ratio.set_ylabel("peak per rank / peak at P = 1 (same model)")
ax_ratio.set_title("fraction of the P = 1 peak (grey: 1/P)")
ax_ratio.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
ax_sent.set_xticks([p for p in ranks if p > 1] or ranks)
ax_sent.set_xticklabels([str(p) for p in ranks if p > 1] or [str(p) for p in ranks])
ax_sent.set_ylabel("halo payload sent per epoch, all ranks (MiB)")
ax_sent.set_title("communication per epoch (schedules of a model overlap;\nGCN = SAGE)", fontsize=10)
title = args.title or (f"sar schedules: {runs[0].get('dataset', '')}, "
                       f"{max(int(r['epochs']) for r in runs)} epochs per run")
fig.suptitle(title)
handles, labels = ax_mem.get_legend_handles_labels()
fig.legend(handles, labels, loc="lower center", ncol=min(6, len(labels)), fontsize=8,
           frameon=False)
fig.tight_layout(rect=(0, 0.1, 1, 1))
fig.savefig(args.out, dpi=110)
print(f"wrote {args.out}")
