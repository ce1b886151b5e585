#!/usr/bin/env python3
"""Writes airbench's CIFAR-10 cache from our JPEG copy of CIFAR-10 (issue 35, point 4a).

    airbench_cache.py SRC OUTDIR [--workers N] [--limit N]

SRC is the unpacked `cifar10-jpeg` folder (`train/<class>/*.jpg`, `test/<class>/*.jpg`, from
`../shared/data/cifar10-jpeg.tar.gz`) or the .tar.gz itself. OUTDIR/train.pt and
OUTDIR/test.pt get what airbench94_muon.py's `CifarLoader` reads (and would otherwise
download from torchvision):

    {"images": uint8 tensor [N, 32, 32, 3] (NHWC, RGB), "labels": int64 tensor [N],
     "classes": list of class names}

Classes are the sorted folder names (for CIFAR-10 that is the canonical order, airplane ..
truck), images in sorted file order within a class. Each JPEG is decoded by Pillow with its
defaults and converted to RGB: the same bytes the trainer's shards hold (make_shards
--source=folder decodes the same files with libjpeg-turbo; experiments/peer_quality found
both decodes equal on this machine). --limit N keeps the first N images per class (tests).
"""
import argparse
import os
import sys
import tarfile
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np
from PIL import Image


def decode(path):
    with Image.open(path) as im:
        a = np.asarray(im.convert("RGB"), dtype=np.uint8)
    if a.shape != (32, 32, 3):
        raise ValueError(f"{path}: decoded shape {a.shape}, expected (32, 32, 3)")
    return a


def split(root, name, workers, limit):
    d = os.path.join(root, name)
    classes = sorted(c for c in os.listdir(d) if os.path.isdir(os.path.join(d, c)))
    paths, labels = [], []
    for i, c in enumerate(classes):
        files = sorted(f for f in os.listdir(os.path.join(d, c))
                       if f.lower().endswith((".jpg", ".jpeg", ".png")))
        if limit:
            files = files[:limit]
        paths += [os.path.join(d, c, f) for f in files]
        labels += [i] * len(files)
    with ProcessPoolExecutor(max_workers=workers) as ex:
        images = list(ex.map(decode, paths, chunksize=512))
    return np.stack(images), np.asarray(labels, dtype=np.int64), classes


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src")
    ap.add_argument("outdir")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--limit", type=int, default=0, help="images per class (tests only)")
    args = ap.parse_args()
    import torch  # after the arguments: --help works without torch

    t0 = time.time()
    tmp = None
    root = args.src
    if os.path.isfile(root):
        tmp = tempfile.TemporaryDirectory()
        with tarfile.open(root) as tf:
            tf.extractall(tmp.name)
        root = os.path.join(tmp.name, "cifar10-jpeg")
    os.makedirs(args.outdir, exist_ok=True)
    for name in ("train", "test"):
        images, labels, classes = split(root, name, args.workers, args.limit)
        path = os.path.join(args.outdir, name + ".pt")
        torch.save({"images": torch.from_numpy(images), "labels": torch.from_numpy(labels),
                    "classes": classes}, path)
        print(f"airbench_cache.py: {path}: {images.shape[0]} images {tuple(images.shape[1:])}, "
              f"{len(classes)} classes, pixel mean {images.mean():.3f}", flush=True)
    if tmp:
        tmp.cleanup()
    print(f"airbench_cache.py: done in {time.time() - t0:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
