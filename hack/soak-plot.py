#!/usr/bin/env python3
"""Draws a soak run (hack/soak.sh): one panel per resource over time, one line per process,
the faults marked as vertical lines, into DIR/soak.svg.

    python3 hack/soak-plot.py DIR          # DIR holds samples.csv and faults.csv

Needs matplotlib (pip install matplotlib); without it, says so and exits 1.
"""
import csv
import os
import sys


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = sys.argv[1]
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("soak-plot: matplotlib is missing: pip install matplotlib", file=sys.stderr)
        return 1
    with open(os.path.join(out, "samples.csv")) as f:
        rows = list(csv.DictReader(f))
    faults = []
    path = os.path.join(out, "faults.csv")
    if os.path.exists(path):
        with open(path) as f:
            faults = list(csv.DictReader(f))
    panels = [
        ("rss_kib", "RSS (MiB)", 1 / 1024),
        ("anon_kib", "anonymous memory (MiB)", 1 / 1024),
        ("fds", "open fds", 1),
        ("threads", "threads", 1),
        ("tokio_tasks", "Tokio tasks (managers)", 1),
        ("queue_depth", "work queue depth (managers)", 1),
        ("cache_objects", "objects: informer caches (managers), stored (server)", 1),
        ("history_bytes", "watch history (MiB, server)", 1 / 1048576),
    ]
    processes = sorted({r["process"] for r in rows})
    colors = {"fault": {"apiserver-kill": "red", "drop-watches": "#bbbbbb", "compact": "orange",
                        "webhook-down": "purple", "webhook-up": "plum", "leader-handover": "green", "manager-exited": "red"}}
    fig, axes = plt.subplots(len(panels), 1, figsize=(11, 2.3 * len(panels)), sharex=True)
    for ax, (key, title, scale) in zip(axes, panels):
        for p in processes:
            pts = [(float(r["t_seconds"]) / 60, float(r[key]) * scale)
                   for r in rows if r["process"] == p and r.get(key)]
            if pts:
                ax.plot([x for x, _ in pts], [y for _, y in pts], label=p, linewidth=1)
        for fa in faults:
            c = colors["fault"].get(fa["fault"], "black")
            ax.axvline(float(fa["t_seconds"]) / 60, color=c, linewidth=0.6,
                       alpha=0.35 if fa["fault"] == "drop-watches" else 0.8)
        ax.set_ylabel(title, fontsize=8)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    axes[0].legend(loc="upper left", fontsize=8)
    axes[-1].set_xlabel("minutes")
    kinds = sorted({fa["fault"] for fa in faults})
    fig.suptitle("soak: " + ", ".join(f"{k} ({colors['fault'].get(k, 'black')})" for k in kinds),
                 fontsize=9)
    fig.tight_layout()
    target = os.path.join(out, "soak.svg")
    fig.savefig(target)
    print(f"soak-plot: {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
