#!/usr/bin/env python3
"""Accuracy against training time from run_gpu.sh's results.jsonl (issue 35, point 4): one
PNG per part (cifar, imagenette, largebatch), one curve per run (its acc_per_epoch
[epoch, train_s, acc] points), the part's target accuracy as a dashed line.

    /usr/bin/python3 experiments/recipes/plot.py RESULTS.jsonl [MORE.jsonl ...] OUTDIR

Writes OUTDIR/<part>_acc_vs_time.png (x: training seconds as results.py defines train_s
for each implementation; y: held-out top-1 accuracy) and, for largebatch,
largebatch_acc_vs_epoch.png (the same curves against epochs).
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

TARGETS = {"cifar": [(0.907, "airbench on this data (~90.7%)")],
           "imagenette": [(0.874, "leaderboard 5 ep (87.4%)"), (0.916, "leaderboard 20 ep (91.6%)")]}
STYLE = {"colonnade": "-", "torchvision": "--", "airbench": ":"}


def load(paths):
    recs = []
    for p in paths:
        with open(p) as f:
            recs += [json.loads(line) for line in f if line.strip().startswith("{")]
    return [r for r in recs if r.get("what") != "build" and r.get("acc_per_epoch")]


def draw(recs, part, x_index, xlabel, path):
    fig, ax = plt.subplots(figsize=(8, 5))
    for r in recs:
        pts = [p for p in r["acc_per_epoch"] if p[2] is not None]
        if not pts:
            continue
        xs = [p[x_index] for p in pts]
        ys = [100 * p[2] for p in pts]
        label = f"{r['impl']} {r['run']} ({100 * r['final_acc']:.2f}%)" if r.get("final_acc") \
            is not None else f"{r['impl']} {r['run']}"
        ax.plot(xs, ys, STYLE.get(r["impl"], "-"), marker=".", label=label)
    for y, text in TARGETS.get(part, []):
        ax.axhline(100 * y, color="grey", linestyle="--", linewidth=0.8)
        ax.text(ax.get_xlim()[0], 100 * y, " " + text, va="bottom", fontsize=8, color="grey")
    if x_index == 1 and part == "cifar":
        ax.set_xscale("log")
    device = sorted({r.get("device", "") for r in recs})
    commit = sorted({(r.get("commit") or "")[:10] for r in recs})
    ax.set_title(f"{part}: held-out top-1 vs {xlabel.split(' ')[0]}\n{', '.join(device)}; "
                 f"commit {', '.join(commit)}", fontsize=9)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("held-out top-1 accuracy (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(path)


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    recs = load(sys.argv[1:-1])
    out = sys.argv[-1]
    os.makedirs(out, exist_ok=True)
    for part in sorted({r["what"] for r in recs}):
        sub = [r for r in recs if r["what"] == part]
        draw(sub, part, 1, "training seconds (evaluations excluded)",
             os.path.join(out, f"{part}_acc_vs_time.png"))
        if part == "largebatch":
            draw(sub, part, 0, "epochs", os.path.join(out, f"{part}_acc_vs_epoch.png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
