#!/usr/bin/env python3
"""Draw a Colonnade checkpoint's first-layer filters, one block per column, and measure
how colour-specific each filter is.

  scripts/show_filters.py CHECKPOINT OUT.png [--layer NAME] [--csv OUT.csv]

The picture is AlexNet's Figure 3 for any checkpoint: the filters of the model's first
convolution (or of --layer), each drawn as a small RGB image of its taps, in one block per
column (the paper's two GPUs). With --columns=K a convolution's filters are split into K
consecutive blocks along their first dimension: column c holds filters
[c*F/K, (c+1)*F/K) (src/core/models.cc: conv1 sees the whole image and is split by
filters; src/parallel/model_split.cc gives rank c exactly that row block). Models that
cannot be split (ResNet, GoogLeNet, the CIFAR-10 nets) have one column.

Each filter is contrast-normalised on its own, as in the paper's figure: its values are
mapped linearly from [min, max] of that filter to [0, 1] (all three channels together, so
the hue is kept). Channel order is the data's, RGB.

Colour fraction, per filter (documented in docs/MODELS.md, "Filters and their colour"):
at every tap (y, x) the filter's weight vector v = (w_R, w_G, w_B) is split into its part
along the luminance direction u = (1, 1, 1)/sqrt(3) and the rest,
    v = (v.u) u + v_perp,
and
    colour_fraction = sum over taps ||v_perp||^2 / sum over taps ||v||^2
(the share of the filter's energy that responds to colour rather than to brightness).
0 for a grey filter (e.g. an oriented edge with equal R, G, B weights), 2/3 for a pure red
(or pure green or blue) one, 1 for a filter that sums to zero across colours at every tap
(red minus green). For uncorrelated random weights its expected value is 2/3, so a trained
filter well below 2/3 prefers luminance and one above it is colour-opponent.

Output:
  * OUT.png, the filter picture; each block's label gives its column, its filter range and
    the column's mean colour fraction +- standard deviation.
  * A table on stdout: one row per filter (index, column, colour fraction, L2 norm), then one
    row per column (filters, mean, standard deviation, min, median, max, and how many
    filters are colour-dominated: colour fraction above 1/2).
  * With --csv OUT.csv: the per-filter rows (layer,column,filter,colour_fraction,norm) in
    OUT.csv and the per-column rows (layer,column,first_filter,filters,mean,std,min,
    median,max,colour_dominated) in OUT_columns.csv beside it.

A layer whose filters do not read 3 channels (conv2 and later, or a grayscale model) has
no colour statistic (the columns are left empty); it is drawn as one grey image per filter,
the L2 norm over input channels at every tap (where the filter looks).

The checkpoint may also be any HDF5 file with the attributes `model` and `columns` and the
dataset /params/<layer>/weight [out][in][kh][kw] (a checkpoint cut down to its first layer,
as experiments/columns/run.sh keeps them).

Needs h5py, numpy and matplotlib (Debian: python3-h5py python3-matplotlib). If the python3
that runs this lacks them, the script re-runs itself with /usr/bin/python3
(scripts/_python.py). Exit codes: 0 written, 1 runtime error, 2 usage error or a file it
cannot use.
"""

import argparse
import csv
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _python  # noqa: E402  scripts/_python.py: re-run under /usr/bin/python3 if need be

COLOUR_DOMINATED = 0.5  # more of the energy in colour than in luminance


def reexec_or_exit(what):
    _python.reexec_or_exit("show_filters.py", what,
                           "python3-h5py python3-numpy python3-matplotlib")


try:
    import numpy as np
except ImportError:
    reexec_or_exit("numpy")


def usage_error(msg):
    print("show_filters.py: error: " + msg, file=sys.stderr)
    sys.exit(2)


# ---- the statistic -----------------------------------------------------------------------

def colour_fractions(w):
    """w: float array [F][3][kh][kw] (RGB). Returns the colour fraction of every filter,
    float64 [F]: the share of sum ||v||^2 outside the luminance direction (1,1,1)/sqrt(3),
    v being the RGB vector of one tap. A filter of all zeros gets 0."""
    w = np.asarray(w, dtype=np.float64)
    if w.ndim != 4 or w.shape[1] != 3:
        raise ValueError("colour fractions need weights [F][3][kh][kw], got %s" % (w.shape,))
    total = (w ** 2).sum(axis=(1, 2, 3))
    # (v.u)^2 = (R + G + B)^2 / 3 at every tap; the orthogonal part is the rest.
    luminance = ((w.sum(axis=1) ** 2) / 3.0).sum(axis=(1, 2))
    colour = np.maximum(total - luminance, 0.0)  # rounding may make it a hair negative
    out = np.zeros_like(total)
    np.divide(colour, total, out=out, where=total > 0)
    return out


def column_of(filters, columns):
    """Column of each of `filters` filters split into `columns` consecutive blocks."""
    per = filters // columns
    return [f // per for f in range(filters)]


def column_summary(fractions, norms, columns):
    """Per-column rows: dicts with column, first_filter, filters, mean, std, min, median,
    max, colour_dominated (fractions may be None: no colour statistic)."""
    n = len(norms)
    per = n // columns
    rows = []
    for c in range(columns):
        row = {"column": c, "first_filter": c * per, "filters": per}
        if fractions is not None:
            f = np.asarray(fractions[c * per:(c + 1) * per], dtype=np.float64)
            row.update({"mean": f.mean(), "std": f.std(), "min": f.min(),
                        "median": float(np.median(f)), "max": f.max(),
                        "colour_dominated": int((f > COLOUR_DOMINATED).sum())})
        rows.append(row)
    return rows


# ---- reading -----------------------------------------------------------------------------

def attr_str(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def param_layers_in_order(f):
    """Layer names under /params in creation order (the Net's layer order) when the file
    tracks it, else by name."""
    import h5py
    g = f["params"]
    names = []
    try:
        g.id.links.iterate(lambda n: names.append(n.decode()), idx_type=h5py.h5.INDEX_CRT_ORDER)
        return names
    except Exception:  # creation order not tracked
        return sorted(g.keys())


def read_filters(path, layer):
    """Returns (weights [F][C][kh][kw] float32, layer name, model, columns, step or None)."""
    try:
        import h5py
    except ImportError:
        reexec_or_exit("h5py")
    if not os.path.isfile(path):
        usage_error("%s: no such file" % path)
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        usage_error("%s: not an HDF5 file (%s)" % (path, e))
    with f:
        if "params" not in f or not isinstance(f["params"], h5py.Group):
            usage_error("%s: no /params group: not a Colonnade checkpoint (docs/CHECKPOINTS.md)"
                        % path)
        for a in ("model", "columns"):
            if a not in f.attrs:
                usage_error("%s: attribute '%s' missing: not a Colonnade checkpoint "
                            "(docs/CHECKPOINTS.md)" % (path, a))
        model = attr_str(f.attrs["model"])
        columns = int(f.attrs["columns"])
        step = int(f.attrs["step"]) if "step" in f.attrs else None
        in_ch = int(f.attrs["input_channels"]) if "input_channels" in f.attrs else None
        layers = param_layers_in_order(f)
        convs = [n for n in layers if "weight" in f["params"][n] and
                 len(f["params"][n]["weight"].shape) == 4]
        if layer is None:
            # conv1 where the model has one (AlexNet, the CIFAR nets, ZFNet, GoogLeNet,
            # ResNet); else the first convolution reading the image (VGG's conv1_1).
            if "conv1" in convs:
                layer = "conv1"
            else:
                first = [n for n in convs
                         if in_ch is None or f["params"][n]["weight"].shape[1] == in_ch]
                if not first:
                    usage_error("%s: model %s has no convolution under /params; name one "
                                "with --layer" % (path, model))
                layer = first[0]
        if layer not in layers or "weight" not in f["params"][layer]:
            usage_error("%s: no /params/%s/weight; layers with weights: %s"
                        % (path, layer, ", ".join(layers)))
        w = f["params"][layer]["weight"][...]
    if w.ndim != 4:
        usage_error("%s: /params/%s/weight has shape %s, not [out][in][kh][kw]: not a "
                    "convolution; convolutions: %s" % (path, layer, w.shape, ", ".join(convs)))
    if columns < 1 or w.shape[0] % columns != 0:
        usage_error("%s: %d filters of %s do not split into %d columns (attribute 'columns')"
                    % (path, w.shape[0], layer, columns))
    return w.astype(np.float32), layer, model, columns, step


# ---- drawing -----------------------------------------------------------------------------

def filter_image(w):
    """One filter [C][kh][kw] -> image [kh][kw][3] in [0, 1]: RGB contrast-normalised over
    the filter (min -> 0, max -> 1); other channel counts: the per-tap L2 norm, grey."""
    if w.shape[0] == 3:
        img = np.transpose(w, (1, 2, 0)).astype(np.float64)
    else:
        img = np.sqrt((w.astype(np.float64) ** 2).sum(axis=0))[:, :, None].repeat(3, axis=2)
    lo, hi = img.min(), img.max()
    return (img - lo) / (hi - lo) if hi > lo else np.full(img.shape, 0.5)


def mosaic(ws, per_row):
    """Filters [n][C][kh][kw] -> one image with a 1-pixel white gap between filters."""
    n, _, kh, kw = ws.shape
    rows = int(math.ceil(n / per_row))
    cols = min(n, per_row)
    out = np.ones((rows * (kh + 1) + 1, cols * (kw + 1) + 1, 3))
    for i in range(n):
        r, c = divmod(i, per_row)
        out[1 + r * (kh + 1):1 + r * (kh + 1) + kh, 1 + c * (kw + 1):1 + c * (kw + 1) + kw] = \
            filter_image(ws[i])
    return out


def draw(w, layer, model, columns, step, summary, out_png):
    try:
        import matplotlib
    except ImportError:
        reexec_or_exit("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    per = w.shape[0] // columns
    # Up to 16 a row, and full rows where a divisor allows (48 -> 3 x 16, 24 -> 2 x 12).
    per_row = next((d for d in range(16, 7, -1) if per % d == 0), min(16, per))
    blocks = [mosaic(w[c * per:(c + 1) * per], per_row) for c in range(columns)]
    h_px = sum(b.shape[0] for b in blocks)
    w_px = blocks[0].shape[1]
    scale = max(4.0, 600.0 / max(w_px, 1)) / 100.0  # inches per mosaic pixel
    fig_w = max(w_px * scale, 4.0)
    fig_h = h_px * scale + 0.45 * columns + 0.5
    fig, axes = plt.subplots(columns, 1, figsize=(fig_w, fig_h), squeeze=False,
                             gridspec_kw={"height_ratios": [b.shape[0] for b in blocks]})
    for c, (ax, b) in enumerate(zip(axes[:, 0], blocks)):
        ax.imshow(b, interpolation="nearest")
        ax.set_xticks([])
        ax.set_yticks([])
        s = summary[c]
        label = "column %d: filters %d-%d" % (c, s["first_filter"], s["first_filter"] + per - 1)
        if "mean" in s:
            label += ", colour fraction %.2f \u00b1 %.2f" % (s["mean"], s["std"])
        ax.set_title(label, fontsize=9, loc="left")
    kind = "RGB" if w.shape[1] == 3 else "L2 norm over %d input channels" % w.shape[1]
    fig.suptitle("%s %s%s: %d filters %dx%d (%s), %d column%s" % (
        model, layer, "" if step is None else " at step %d" % step, w.shape[0], w.shape[2],
        w.shape[3], kind, columns, "" if columns == 1 else "s"), fontsize=10)
    fig.tight_layout()
    fig.savefig(out_png, dpi=100)
    plt.close(fig)


# ---- main --------------------------------------------------------------------------------

def fmt(v):
    return "" if v is None else "%.6f" % v


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="show_filters.py",
        description=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", help="Colonnade checkpoint (ckpt-<step>.h5, docs/CHECKPOINTS.md)")
    p.add_argument("out_png", metavar="OUT.png", help="picture to write")
    p.add_argument("--layer", metavar="NAME",
                   help="convolution to draw (a name under /params, e.g. conv2); default: the "
                        "model's first convolution (conv1, or VGG's conv1_1)")
    p.add_argument("--csv", metavar="OUT.csv",
                   help="also write the per-filter table to OUT.csv and the per-column one to "
                        "OUT_columns.csv")
    return p.parse_args(argv)


def main(argv):
    a = parse_args(argv)
    w, layer, model, columns, step = read_filters(a.checkpoint, a.layer)
    rgb = w.shape[1] == 3
    fractions = colour_fractions(w) if rgb else None
    norms = np.sqrt((w.astype(np.float64) ** 2).sum(axis=(1, 2, 3)))
    cols = column_of(w.shape[0], columns)
    summary = column_summary(fractions, norms, columns)

    print("%s: %s %s, %d filters %dx%dx%d, %d column(s) of %d" % (
        a.checkpoint, model, layer, w.shape[0], w.shape[1], w.shape[2], w.shape[3], columns,
        w.shape[0] // columns))
    if rgb:
        print("colour fraction: share of the filter's energy outside the luminance direction "
              "(1,1,1)/sqrt(3); grey 0, pure red 2/3, random weights 2/3 on average")
    else:
        print("no colour statistic: the filters read %d channels, not RGB" % w.shape[1])
    print("%6s %6s %15s %10s" % ("filter", "column", "colour_fraction", "norm"))
    for i in range(w.shape[0]):
        print("%6d %6d %15s %10.5f" % (i, cols[i], "-" if fractions is None else
                                       "%.4f" % fractions[i], norms[i]))
    print("%6s %8s %8s %8s %8s %8s %8s %8s" % ("column", "filters", "mean", "std", "min",
                                               "median", "max", ">1/2"))
    for s in summary:
        if "mean" in s:
            print("%6d %8s %8.4f %8.4f %8.4f %8.4f %8.4f %8d" % (
                s["column"], "%d-%d" % (s["first_filter"], s["first_filter"] + s["filters"] - 1),
                s["mean"], s["std"], s["min"], s["median"], s["max"], s["colour_dominated"]))
        else:
            print("%6d %8s %8s" % (s["column"], "%d-%d" % (s["first_filter"], s["first_filter"] +
                                                            s["filters"] - 1), "-"))

    try:
        draw(w, layer, model, columns, step, summary, a.out_png)
    except OSError as e:
        print("show_filters.py: error: cannot write %s: %s" % (a.out_png, e), file=sys.stderr)
        return 1
    print("wrote %s" % a.out_png)
    if a.csv:
        stem = a.csv[:-4] if a.csv.lower().endswith(".csv") else a.csv
        col_csv = stem + "_columns.csv"
        try:
            with open(a.csv, "w", newline="") as fh:
                wr = csv.writer(fh)
                wr.writerow(["layer", "column", "filter", "colour_fraction", "norm"])
                for i in range(w.shape[0]):
                    wr.writerow([layer, cols[i], i, fmt(None if fractions is None else
                                                        float(fractions[i])), fmt(norms[i])])
            with open(col_csv, "w", newline="") as fh:
                wr = csv.writer(fh)
                keys = ["mean", "std", "min", "median", "max"]
                wr.writerow(["layer", "column", "first_filter", "filters"] + keys +
                            ["colour_dominated"])
                for s in summary:
                    wr.writerow([layer, s["column"], s["first_filter"], s["filters"]] +
                                [fmt(s.get(k)) for k in keys] + [s.get("colour_dominated", "")])
        except OSError as e:
            print("show_filters.py: error: cannot write %s: %s" % (a.csv, e), file=sys.stderr)
            return 1
        print("wrote %s and %s" % (a.csv, col_csv))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
