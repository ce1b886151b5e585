#!/usr/bin/env python3
"""Records, tables and curves of the columns experiment (experiments/columns/README.md).

  summarize.py cut CHECKPOINT OUT.h5
      conv1 alone (weight, bias, and the checkpoint's attributes): a 0.14 MB file that
      scripts/show_filters.py reads like the 244 MB checkpoint (needs h5py).
  summarize.py record METRICS OUT.jsonl --run R --columns K --seed S --commit C --wall SEC
                      --exit RC [--limit SEC] [--colour_csv RUN_conv1_columns.csv]
      the trainer's --metrics_file -> OUT.jsonl: every train/eval record with run, columns,
      seed and commit added, then one "run" record: exit status, wall time, steps and epochs
      done, the final checkpoint and its step, the last held-out errors (and their step),
      and the per-column colour fractions of conv1.
  summarize.py table RESULTS_DIR
      a markdown table of every RESULTS_DIR/c*s*.jsonl (the README's results table).
  summarize.py curves RESULTS_DIR OUT.png
      held-out top-1 error and training loss against the epoch, one line per run (needs
      matplotlib).
record and table use the standard library only.
"""
import argparse
import csv
import glob
import json
import os
import sys


def read_jsonl(path):
    out = []
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                print("summarize.py: %s: skipping a line that is not JSON" % path,
                      file=sys.stderr)
    return out


def cut(a):
    import h5py
    with h5py.File(a.checkpoint, "r") as f, h5py.File(a.out, "w") as g:
        for k, v in f.attrs.items():
            g.attrs[k] = v
        for p in f["params/conv1"]:
            g.create_dataset("params/conv1/" + p, data=f["params/conv1/" + p][...])


def record(a):
    recs = read_jsonl(a.metrics)
    base = {"run": a.run, "model": "alexnet", "columns": a.columns, "seed": a.seed,
            "commit": a.commit}
    trains = [r for r in recs if r.get("kind") == "train"]
    evals = [r for r in recs if r.get("kind") == "eval"]
    run = dict(base, kind="run", exit=a.exit, wall_sec=a.wall, limit_sec=a.limit,
               stopped_by_timeout=a.exit in (75, 124, 137),
               checkpoint=os.path.basename(a.checkpoint) if a.checkpoint else None,
               checkpoint_step=(int(os.path.basename(a.checkpoint)[5:-3])
                                if a.checkpoint else None),
               steps_done=trains[-1]["step"] if trains else 0,
               epochs_done=trains[-1]["epoch"] if trains else 0.0,
               train_loss=trains[-1]["loss"] if trains else None,
               train_top1_error=trains[-1]["top1_error"] if trains else None,
               train_sec=trains[-1]["elapsed_sec"] if trains else None)
    if trains:  # images per second over the training steps (evaluations left out)
        rates = [r["images_per_sec"] for r in trains if r.get("images_per_sec")]
        run["images_per_sec_median"] = sorted(rates)[len(rates) // 2] if rates else None
    if evals:
        e = evals[-1]
        run.update(heldout_top1_error=e["top1_error"], heldout_top5_error=e["top5_error"],
                   heldout_loss=e["loss"], heldout_images=e["images"], heldout_step=e["step"])
    cols = []
    if a.colour_csv and os.path.exists(a.colour_csv):
        with open(a.colour_csv) as f:
            for r in csv.DictReader(f):
                cols.append({k: (float(v) if k in ("mean", "std", "min", "median", "max")
                                 else int(v)) for k, v in r.items() if k != "layer" and v != ""})
    run["conv1_columns"] = cols
    with open(a.out, "w") as f:
        for r in recs:
            if r.get("kind") in ("train", "eval"):
                f.write(json.dumps(dict(base, **r)) + "\n")
        f.write(json.dumps(run) + "\n")


def runs(results):
    out = []
    for path in sorted(glob.glob(os.path.join(results, "c*s*.jsonl"))):
        recs = read_jsonl(path)
        run = [r for r in recs if r.get("kind") == "run"]
        if run:
            out.append((run[-1], recs))
    out.sort(key=lambda x: (x[0]["columns"] != 2, x[0]["columns"], x[0]["seed"]))
    return out


def fmt(v, spec):
    return format(v, spec) if isinstance(v, (int, float)) else "—"


def table(a):
    rs = runs(a.results)
    print("| run | columns | seed | exit | epochs | held-out top-1 | top-5 | img/s | "
          "conv1 colour fraction per column (mean ± sd; colour-dominated filters) | "
          "most colour-specific column | gap |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for run, _ in rs:
        cols = run.get("conv1_columns") or []
        per = "; ".join("c%d %.3f ± %.3f (%d/%d)" % (c["column"], c["mean"], c["std"],
                                                     c.get("colour_dominated", 0), c["filters"])
                        for c in cols)
        if len(cols) > 1:
            hi = max(cols, key=lambda c: c["mean"])
            lo = min(cols, key=lambda c: c["mean"])
            best, gap = "c%d" % hi["column"], "%.3f" % (hi["mean"] - lo["mean"])
        else:
            best, gap = "—", "—"
        print("| %s | %d | %d | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            run["run"], run["columns"], run["seed"], run["exit"],
            fmt(run.get("epochs_done"), ".1f"), fmt(run.get("heldout_top1_error"), ".4f"),
            fmt(run.get("heldout_top5_error"), ".4f"),
            fmt(run.get("images_per_sec_median"), ".0f"), per or "—", best, gap))
    commits = sorted({run["commit"] for run, _ in rs})
    print("\nCommit%s: %s. Colour fraction: share of a conv1 filter's energy outside the "
          "luminance direction (docs/MODELS.md); colour-dominated: above 1/2; random "
          "filters average 2/3." % ("s" if len(commits) > 1 else "", ", ".join(commits) or "—"))


def curves(a):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rs = runs(a.results)
    if not rs:
        sys.exit("summarize.py: no runs in %s" % a.results)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for run, recs in rs:
        label = "%s (columns %d, seed %d)" % (run["run"], run["columns"], run["seed"])
        ev = [r for r in recs if r.get("kind") == "eval"]
        tr = [r for r in recs if r.get("kind") == "train"]
        style = {1: ":", 2: "-", 4: "--"}.get(run["columns"], "-.")
        ax1.plot([r["epoch"] for r in ev], [r["top1_error"] for r in ev], style, marker="o",
                 markersize=3, label=label)
        ax2.plot([r["epoch"] for r in tr], [r["loss"] for r in tr], style, label=label)
    ax1.set(xlabel="epoch", ylabel="held-out top-1 error", title="held-out error")
    ax2.set(xlabel="epoch", ylabel="training loss", title="training loss (per epoch)")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
    ax1.legend(fontsize=8)
    fig.suptitle("AlexNet on the Imagenette subset: columns 1, 2 (three seeds), 4")
    fig.tight_layout()
    fig.savefig(a.out, dpi=100)
    print("wrote %s" % a.out)


def main(argv):
    p = argparse.ArgumentParser(prog="summarize.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("cut")
    c.add_argument("checkpoint")
    c.add_argument("out")
    r = sub.add_parser("record")
    r.add_argument("metrics")
    r.add_argument("out")
    r.add_argument("--run", required=True)
    r.add_argument("--columns", type=int, required=True)
    r.add_argument("--seed", type=int, required=True)
    r.add_argument("--commit", required=True)
    r.add_argument("--wall", type=float, required=True)
    r.add_argument("--exit", type=int, required=True)
    r.add_argument("--limit", type=float)
    r.add_argument("--colour_csv")
    r.add_argument("--checkpoint", help="the run's final checkpoint (ckpt-<step>.h5)")
    t = sub.add_parser("table")
    t.add_argument("results")
    cv = sub.add_parser("curves")
    cv.add_argument("results")
    cv.add_argument("out")
    a = p.parse_args(argv)
    {"cut": cut, "record": record, "table": table, "curves": curves}[a.cmd](a)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
