#!/usr/bin/env python3
"""Plot Colonnade training curves from trainer --metrics_file JSON lines.

  scripts/plot_metrics.py run/metrics.jsonl                  # -> run/metrics.png
  scripts/plot_metrics.py run/metrics.jsonl run.png          # -> run.png
  scripts/plot_metrics.py a.jsonl b.jsonl cmp.png --labels a,b --x epoch

The picture to write is the last argument when it ends in .png, .pdf or .svg (as
show_filters.py and export_torch.py take their output second); without one it is the
first metrics file with .png. `-o OUT.png` is still accepted but deprecated.

One PNG with four panels: loss, top-1 error (top-5 dotted), training throughput (img/s)
and learning rate, against the step (or epoch). Training records are drawn as lines,
evaluation records as markers; a dotted vertical line marks where a requeued job resumed
(the run's elapsed_sec starts again). Several files are overlaid, one colour each (a
learning-rate sweep: checkpoints/<sweep>/lr-*/metrics.jsonl).

A metrics file is appended to by every run of a job, so after a preemption the steps
between the last checkpoint and the stop may appear twice; the newest record of each step
wins. Lines that are not JSON objects of kind "train" or "eval" are counted and skipped.

Needs matplotlib (Debian: python3-matplotlib). If the python3 that runs this lacks it,
the script re-runs itself with /usr/bin/python3 (scripts/_python.py).
Exit codes: 0 written, 1 runtime error, 2 usage error or no usable records.
"""

import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _python  # noqa: E402  scripts/_python.py: re-run under /usr/bin/python3 if need be


def load(path):
    """Returns ({'train': [rec...], 'eval': [rec...]}, skipped_line_count), newest record
    per (kind, step), sorted by step."""
    by_key = {}
    skipped = 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                skipped += 1
                continue
            if (not isinstance(rec, dict) or rec.get("kind") not in ("train", "eval")
                    or not isinstance(rec.get("step"), (int, float))):
                skipped += 1
                continue
            by_key[(rec["kind"], rec["step"])] = rec  # a later line replaces an earlier one
    out = {"train": [], "eval": []}
    for (kind, _), rec in sorted(by_key.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        out[kind].append(rec)
    return out, skipped


def series(records, x, y):
    xs, ys = [], []
    for r in records:
        v = r.get(y)
        if isinstance(v, (int, float)) and math.isfinite(v) and isinstance(r.get(x), (int, float)):
            xs.append(r[x])
            ys.append(v)
    return xs, ys


def restarts(train_records):
    """Steps after which a new run of the job took over: elapsed_sec (seconds since the
    run started) goes down between consecutive records."""
    out = []
    prev = None
    for r in train_records:
        e = r.get("elapsed_sec")
        if not isinstance(e, (int, float)):
            continue
        if prev is not None and e < prev[1]:
            out.append(prev[0])
        prev = (r, e)
    return out


PICTURE_SUFFIXES = (".png", ".pdf", ".svg")


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="plot_metrics.py",
        usage="plot_metrics.py METRICS.jsonl [METRICS.jsonl ...] [OUT.png] [options]",
        description="Plot loss, top-1/top-5 error, img/s and learning rate from trainer "
        "--metrics_file JSON lines into one PNG.",
        epilog="Records: {\"kind\":\"train\",\"step\",\"epoch\",\"loss\",\"top1_error\","
        "\"top5_error\",\"lr\",\"images_per_sec\",...} and {\"kind\":\"eval\",\"step\","
        "\"epoch\",\"loss\",\"top1_error\",\"top5_error\",\"images\"}. Duplicate steps "
        "(a requeued job) keep the newest record.")
    p.add_argument("files", nargs="+", metavar="METRICS.jsonl [OUT.png]",
                   help="metrics files to plot, then the picture to write (a last argument "
                   "ending in %s) [the first file with .png]" % ", ".join(PICTURE_SUFFIXES))
    p.add_argument("-o", "--output", help="deprecated: give OUT.png as the last argument")
    p.add_argument("--x", choices=("step", "epoch"), default="step",
                   help="horizontal axis [step]")
    p.add_argument("--labels", help="comma-separated legend labels, one per file "
                   "[the file's directory name, or its name]")
    p.add_argument("--title", help="figure title [the file names]")
    p.add_argument("--log_loss", action="store_true", help="logarithmic loss axis")
    p.add_argument("--no_top5", action="store_true", help="leave out the top-5 error curves")
    p.add_argument("--dpi", type=int, default=120, help="resolution [120]")
    args = p.parse_args(argv)
    positional_out = None
    if len(args.files) > 1 and args.files[-1].lower().endswith(PICTURE_SUFFIXES):
        positional_out = args.files.pop()
    elif args.files[-1].lower().endswith(PICTURE_SUFFIXES):
        p.error("no metrics file given, only the picture %s" % args.files[-1])
    if args.output is not None:
        if positional_out is not None:
            p.error("the picture is given twice (%s and -o %s)" % (positional_out, args.output))
        print("plot_metrics.py: note: -o/--output is deprecated; give the picture as the "
              "last argument: plot_metrics.py METRICS.jsonl... %s" % args.output,
              file=sys.stderr)
    else:
        args.output = positional_out
    return args


def default_label(path):
    d = os.path.basename(os.path.dirname(os.path.abspath(path)))
    base = os.path.basename(path)
    return d if base == "metrics.jsonl" and d else base


def import_pyplot():
    try:
        import matplotlib
    except ImportError:
        _python.reexec_or_exit("plot_metrics.py", "matplotlib", "python3-matplotlib")
    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt
    return plt


def main(argv):
    args = parse_args(argv)
    labels = args.labels.split(",") if args.labels else [default_label(f) for f in args.files]
    if len(labels) != len(args.files):
        print("plot_metrics.py: error: --labels has %d names for %d files"
              % (len(labels), len(args.files)), file=sys.stderr)
        return 2
    runs = []
    for path, label in zip(args.files, labels):
        try:
            data, skipped = load(path)
        except OSError as e:
            print("plot_metrics.py: error: cannot read %s: %s" % (path, e.strerror), file=sys.stderr)
            return 2
        if skipped:
            print("plot_metrics.py: %s: skipped %d line(s) that are not train/eval records"
                  % (path, skipped), file=sys.stderr)
        if not data["train"] and not data["eval"]:
            print("plot_metrics.py: error: %s has no train or eval records (is it a trainer "
                  "--metrics_file?)" % path, file=sys.stderr)
            return 2
        runs.append((label, data))
    out = args.output or os.path.splitext(args.files[0])[0] + ".png"

    plt = import_pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(12, 8), sharex=True)
    ax_loss, ax_err, ax_speed, ax_lr = axes[0][0], axes[0][1], axes[1][0], axes[1][1]
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    many = len(runs) > 1
    lrs = []
    for i, (label, data) in enumerate(runs):
        c = colors[i % len(colors)]
        name = (label + " ") if many else ""
        tr, ev = data["train"], data["eval"]
        xs, ys = series(tr, args.x, "loss")
        if xs:
            ax_loss.plot(xs, ys, color=c, label=name + "train")
        xs, ys = series(ev, args.x, "loss")
        if xs:
            ax_loss.plot(xs, ys, "o--", color=c, markersize=5, label=name + "eval")
        for key, style, what in (("top1_error", "-", "top-1"), ("top5_error", ":", "top-5")):
            if key == "top5_error" and args.no_top5:
                continue
            xs, ys = series(tr, args.x, key)
            if xs:
                ax_err.plot(xs, ys, style, color=c, label="%strain %s" % (name, what))
            xs, ys = series(ev, args.x, key)
            if xs:
                ax_err.plot(xs, ys, "o" + ("--" if what == "top-1" else ":"), color=c,
                            markersize=5, label="%seval %s" % (name, what))
        xs, ys = series(tr, args.x, "images_per_sec")
        if xs:
            ax_speed.plot(xs, ys, color=c, label=label if many else None)
        xs, ys = series(tr, args.x, "lr")
        if xs:
            ax_lr.plot(xs, ys, color=c, label=label if many else None)
            lrs += ys
        # Where the job was stopped and a later run resumed it (a requeue).
        for k, r in enumerate(restarts(tr)):
            if isinstance(r.get(args.x), (int, float)):
                for ax in (ax_loss, ax_err, ax_speed, ax_lr):
                    ax.axvline(r[args.x], color=c, linestyle=":", linewidth=1, alpha=0.7,
                               label=("%sresumed" % name) if k == 0 and ax is ax_loss else None)

    if args.log_loss:
        ax_loss.set_yscale("log")
    if lrs and min(lrs) > 0 and max(lrs) / min(lrs) > 20:
        ax_lr.set_yscale("log")  # a step schedule over decades
    else:
        ax_lr.set_ylim(bottom=0, top=max(lrs + [0]) * 1.15 or None)
        ax_lr.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3), useOffset=False)
    ax_loss.set_title("loss")
    ax_err.set_title("error rate" + ("" if args.no_top5 else " (top-1 solid, top-5 dotted)"))
    ax_err.set_ylim(bottom=0)
    ax_speed.set_title("training throughput (images/s, all ranks)")
    ax_speed.set_ylim(bottom=0)
    ax_lr.set_title("learning rate")
    for ax in (ax_speed, ax_lr):
        ax.set_xlabel(args.x)
    for ax in (ax_loss, ax_err, ax_speed, ax_lr):
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.suptitle(args.title or ", ".join(args.files), fontsize=10)
    fig.tight_layout()
    try:
        fig.savefig(out, dpi=args.dpi)
    except OSError as e:
        print("plot_metrics.py: error: cannot write %s: %s" % (out, e.strerror), file=sys.stderr)
        return 1
    n = sum(len(d["train"]) + len(d["eval"]) for _, d in runs)
    resumes = sum(len(restarts(d["train"])) for _, d in runs)
    print("plot_metrics.py: wrote %s (%d records from %d file(s), %d resume(s) marked)"
          % (out, n, len(runs), resumes))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
