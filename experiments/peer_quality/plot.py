#!/usr/bin/env python3
"""Held-out top-1 error and training loss per epoch, Colonnade and torchvision, every seed,
from run.sh's results/*.jsonl (experiments/peer_quality/README.md):

    /usr/bin/python3 experiments/peer_quality/plot.py RESULTS_DIR OUT.png
"""
import glob
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLOURS = {"colonnade": "tab:blue", "torchvision": "tab:orange"}
STYLES = ["-", "--", ":", "-."]


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    results, png = sys.argv[1], sys.argv[2]
    fig, (ax_err, ax_loss) = plt.subplots(1, 2, figsize=(12, 4.5))
    runs, images = 0, None
    for path in sorted(glob.glob(os.path.join(results, "*.jsonl"))):
        recs = []
        with open(path) as f:
            for line in f:
                if line.strip():
                    recs.append(json.loads(line))
        epochs = [r for r in recs if r.get("kind") == "epoch"]
        if not epochs:
            continue
        impl, seed = epochs[0]["impl"], epochs[0]["seed"]
        final = next((r for r in recs if r.get("kind") == "final"), {})
        run = next((r for r in recs if r.get("kind") == "run"), {})
        style = dict(color=COLOURS.get(impl, "grey"), linestyle=STYLES[(int(seed) - 1) % 4])
        ev = [r for r in epochs if "heldout_top1_error" in r]
        images = next((r["heldout_images"] for r in ev if "heldout_images" in r), images)
        label = f"{impl} seed {seed}"
        if "heldout_top1_error" in final:
            label += f": {100 * final['heldout_top1_error']:.2f}%"
        if run.get("process_wall_sec") is not None:
            label += f", {run['process_wall_sec']:.0f} s ({run.get('schedule', '?')})"
        ax_err.plot([r["epoch"] for r in ev], [100 * r["heldout_top1_error"] for r in ev],
                    marker="o", markersize=3, label=label, **style)
        ax_loss.plot([r["epoch"] for r in epochs], [r["train_loss"] for r in epochs],
                     marker=".", label=f"{impl} seed {seed}", **style)
        runs += 1
    if runs == 0:
        sys.exit(f"plot.py: no epoch records in {results}/*.jsonl")
    ax_err.set(xlabel="epoch", ylabel="held-out top-1 error (%)",
               title=f"ResNet-18, Imagenette val ({images or '?'} images), centre crop")
    ax_loss.set(xlabel="epoch", ylabel="training loss (epoch mean)", yscale="log",
                title="training loss")
    for ax in (ax_err, ax_loss):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    print(f"wrote {png} ({runs} runs)")


if __name__ == "__main__":
    main()
