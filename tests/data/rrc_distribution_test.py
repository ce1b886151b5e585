#!/usr/bin/env python3
"""The random-resized crop's boxes (data::DrawAugment, printed by the test binary rrc_draws)
against torchvision's RandomResizedCrop.get_params: the same distribution of top, left,
height, width, area fraction, log aspect ratio and fallback rate, for several image sizes
and ranges (one of them mostly fallbacks).

  rrc_distribution_test.py RRC_DRAWS

Both samplers are random (Philox keyed by position; torch's generator seeded), so single
draws are never compared. Per case and statistic, with n draws from each:
  * the two-sample Kolmogorov-Smirnov distance D must stay below its critical value at
    alpha = 1e-6, c * sqrt(2 / n) with c = sqrt(ln(2 / alpha) / 2) = 2.69 (conservative
    for these integer-valued statistics);
  * the means must agree within 5 standard errors of their difference (two-sided
    p about 6e-7).
With about 100 such comparisons the chance that a correct sampler fails is below 1e-4;
both samplers are deterministic, so the result does not change from run to run. Drawing
the aspect ratio uniformly instead of log-uniformly, or the area fraction from another
range, moves D by 0.05-0.1, far past the 0.019 allowed at n = 40,000; so does skipping
the fallback (the last case).
Exit 0 pass, 1 fail, 77 skip (no torch/torchvision; a failure under COLONNADE_NO_SKIP=1).
"""
import math
import os
import subprocess
import sys


sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from skip_policy import skip_or_fail  # noqa: E402  (tests/skip_policy.py)


try:
    import numpy as np
    import torch
    import torchvision.transforms as T
except ImportError as e:
    skip_or_fail("%s (Debian: python3-torch python3-torchvision)" % e)

N = 40000
ALPHA_C = math.sqrt(math.log(2 / 1e-6) / 2)  # KS coefficient at alpha = 1e-6
Z = 5.0
# (height, width, scale, ratio)
CASES = [
    (224, 224, (0.08, 1.0), (3 / 4, 4 / 3)),  # ImageNet's defaults
    (160, 213, (0.08, 1.0), (3 / 4, 4 / 3)),  # non-square
    (32, 32, (0.35, 1.0), (3 / 4, 4 / 3)),    # small images: rounding matters
    (60, 100, (0.25, 0.9), (0.5, 2.0)),       # other ranges
    (40, 40, (0.25, 1.0), (2.0, 4.0)),        # 10 misses (the fallback) about 18% of the time
]


def ours(binary, h, w, scale, ratio):
    out = subprocess.run([binary, str(h), str(w), repr(scale[0]), repr(scale[1]),
                          repr(ratio[0]), repr(ratio[1]), str(N), "2024"],
                         check=True, capture_output=True, text=True).stdout
    return np.array([[int(v) for v in line.split()] for line in out.splitlines()])


def torchvision_draws(h, w, scale, ratio):
    torch.manual_seed(0)
    img = torch.empty(1, h, w)
    return np.array([T.RandomResizedCrop.get_params(img, list(scale), list(ratio))
                     for _ in range(N)])


def ks(a, b):
    a, b = np.sort(a), np.sort(b)
    grid = np.concatenate([a, b])
    fa = np.searchsorted(a, grid, side="right") / len(a)
    fb = np.searchsorted(b, grid, side="right") / len(b)
    return float(np.max(np.abs(fa - fb)))


def stats(d, h, w, scale, ratio):
    i, j, bh, bw = d[:, 0], d[:, 1], d[:, 2], d[:, 3]
    # Centred boxes of the full height or width: every fallback (the last case's ~18%) and a
    # few drawn boxes, the same rule for both samplers.
    centred = (i == (h - bh) // 2) & (j == (w - bw) // 2) & ((bh == h) | (bw == w))
    return {"top": i, "left": j, "height": bh, "width": bw, "area": bh * bw / (h * w),
            "log_aspect": np.log(bw / bh), "centred_full": centred.astype(float)}


def main(binary):
    failures = []
    crit = ALPHA_C * math.sqrt(2.0 / N)
    for h, w, scale, ratio in CASES:
        a = stats(ours(binary, h, w, scale, ratio), h, w, scale, ratio)
        b = stats(torchvision_draws(h, w, scale, ratio), h, w, scale, ratio)
        for name in a:
            x, y = a[name], b[name]
            d = ks(x, y)
            se = math.sqrt(x.var() / len(x) + y.var() / len(y))
            dm = abs(x.mean() - y.mean())
            ok = d <= crit and dm <= Z * se + 1e-12
            line = ("%dx%d scale %s ratio %s %-12s mean %.4f vs torchvision %.4f (|diff| %.4f, "
                    "allowed %.4f)  KS %.4f (allowed %.4f)%s"
                    % (h, w, scale, tuple(round(r, 4) for r in ratio), name, x.mean(), y.mean(),
                       dm, Z * se, d, crit, "" if ok else "  <-- FAIL"))
            print(line)
            if not ok:
                failures.append(line)
    if failures:
        print("FAIL: %d statistics differ from torchvision's RandomResizedCrop.get_params"
              % len(failures), file=sys.stderr)
        return 1
    print("ok: random-resized crop boxes match torchvision's distribution (%d draws a case)" % N)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
