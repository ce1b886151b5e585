#!/usr/bin/python3
"""Per-layer TFLOP/s of the convolutions in two bench_train --breakdown logs (before, after).

  layer_table.py resnet50|vgg16 BEFORE.log AFTER.log [--ceiling 989]

FLOPs from the layer shapes (2 x output elements x input channels x kernel taps forward;
backward twice that, data and filter gradients, except the stem whose data gradient is not
computed). The models' structure is written out here (torchvision ResNet-50 v1.5, stride on
the 3x3; VGG-16 configuration D). Prints a markdown table: ms and TFLOP/s before and after,
forward and backward, and the share of the dense bf16 ceiling (--ceiling TFLOP/s, the H100
SXM's 989) after; '<50%' marks the layers below half of it.
"""
import argparse
import re

def resnet50_in(name):
    """(input channels, kernel side) of a ResNet-50 convolution, from its name."""
    if name == "conv1":
        return 3, 7
    m = re.match(r"layer(\d)_(\d+)_(conv\d|downsample)$", name)
    stage, block, kind = int(m.group(1)), int(m.group(2)), m.group(3)
    width = 64 * 2 ** (stage - 1)
    prev_out = 64 if stage == 1 else 4 * 64 * 2 ** (stage - 2)
    block_in = prev_out if block == 0 else 4 * width
    return {"conv1": (block_in, 1), "conv2": (width, 3), "conv3": (width, 1),
            "downsample": (block_in, 1)}[kind]

def parse(path):
    rows = []
    for line in open(path):
        f = line.split()
        if len(f) >= 5 and f[1] == "conv":
            c, h, w, n = map(int, f[2].split("x"))
            rows.append((f[0], c, h, w, n, float(f[3]), float(f[4])))
    return rows

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--ceiling", type=float, default=989.0)
    a = ap.parse_args()
    before = {r[0]: r for r in parse(a.before)}
    after = parse(a.after)
    prev_c = 3
    print("| layer | out CxHxW | GFLOP fwd | fwd ms before → after | fwd TFLOP/s before → after "
          "| bwd ms before → after | bwd TFLOP/s before → after | after, share of ceiling (fwd / bwd) |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    tot = [0.0] * 5
    for name, c, h, w, n, fa, ba in after:
        if a.model == "resnet50":
            cin, k = resnet50_in(name)
        else:
            cin, k = prev_c, 3
            prev_c = c
        fl = 2.0 * c * h * w * n * cin * k * k
        bl = fl * (1 if name in ("conv1", "conv1_1") else 2)
        fb, bb = before[name][5], before[name][6]
        tf = lambda flops, ms: flops / (ms * 1e-3) / 1e12
        sf, sb = tf(fl, fa) / a.ceiling, tf(bl, ba) / a.ceiling
        mark = " <50%" if min(sf, sb) < 0.5 else ""
        print(f"| {name} | {c}x{h}x{w} | {fl / 1e9:.1f} | {fb:.3f} → {fa:.3f} | {tf(fl, fb):.0f} → "
              f"{tf(fl, fa):.0f} | {bb:.3f} → {ba:.3f} | {tf(bl, bb):.0f} → {tf(bl, ba):.0f} | "
              f"{100 * sf:.0f}% / {100 * sb:.0f}%{mark} |")
        for i, v in enumerate((fl, fb, fa, bb, ba)):
            tot[i] += v
    fl = tot[0]
    print(f"| all convolutions | | {fl / 1e9:.0f} | {tot[1]:.2f} → {tot[2]:.2f} | "
          f"{fl / tot[1] / 1e9:.0f} → {fl / tot[2] / 1e9:.0f} | {tot[3]:.2f} → {tot[4]:.2f} | | |")

if __name__ == "__main__":
    main()
