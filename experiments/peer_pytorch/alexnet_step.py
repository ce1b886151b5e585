#!/usr/bin/env python3
"""PyTorch peer of bench_train: the same AlexNet training step (forward, backward, SGD with
momentum 0.9 and weight decay 5e-4) on synthetic data, in images per second.

The network is Colonnade's `alexnet` (src/core/models.cc, Krizhevsky et al. 2012): conv1
11x11/4 pad 2 (96), ReLU, LRN, max-pool 3/2, conv2 5x5 pad 2 (256, two groups), ReLU, LRN,
max-pool, conv3 3x3 (384), conv4 3x3 (384, two groups), conv5 3x3 (256, two groups), max-pool,
fc6 4096, ReLU, dropout 0.5, fc7 4096, ReLU, dropout 0.5, fc8 1000, softmax cross-entropy.
LRN: size 5, alpha 1e-4, beta 0.75, k 2 as in the paper; PyTorch's LocalResponseNorm divides
alpha by size, so it is given alpha * size. (Colonnade's LRN also keeps the two columns'
channels apart, which PyTorch's cannot; the arithmetic is the same.)

Modes (each timed at every batch size):
  fp32      strict FP32: TF32 off for matmul and cuDNN, NCHW
  fp32_cl   strict FP32, channels_last (NHWC) memory format
  tf32      TF32 tensor cores allowed
  bf16_cl   bf16 autocast, channels_last, eager (TF32 allowed)
  bf16_compile  bf16 autocast + torch.compile (TF32 allowed)
cudnn.benchmark is on in all modes (PyTorch picks its fastest algorithms).

  python3 alexnet_step.py --batch_sizes 128,256 --modes fp32,fp32_cl,tf32,bf16_compile --json out.json
"""
import argparse
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class AlexNet(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        lrn = lambda: nn.LocalResponseNorm(5, alpha=1e-4 * 5, beta=0.75, k=2.0)
        self.features = nn.Sequential(
            nn.Conv2d(3, 96, 11, stride=4, padding=2), nn.ReLU(inplace=True), lrn(),
            nn.MaxPool2d(3, 2, ceil_mode=True),
            nn.Conv2d(96, 256, 5, padding=2, groups=2), nn.ReLU(inplace=True), lrn(),
            nn.MaxPool2d(3, 2, ceil_mode=True),
            nn.Conv2d(256, 384, 3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(384, 384, 3, padding=1, groups=2), nn.ReLU(inplace=True),
            nn.Conv2d(384, 256, 3, padding=1, groups=2), nn.ReLU(inplace=True),
            nn.MaxPool2d(3, 2, ceil_mode=True),
        )
        self.classifier = nn.Sequential(
            nn.Linear(256 * 6 * 6, 4096), nn.ReLU(inplace=True), nn.Dropout(0.5),
            nn.Linear(4096, 4096), nn.ReLU(inplace=True), nn.Dropout(0.5),
            nn.Linear(4096, num_classes),
        )
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.normal_(m.weight, 0.0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))


def set_mode(mode):
    tf32 = mode not in ("fp32", "fp32_cl")
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = True
    torch.set_float32_matmul_precision("high" if tf32 else "highest")


def run(mode, batch, warmup, steps):
    set_mode(mode)
    torch.manual_seed(0)
    dev = torch.device("cuda")
    model = AlexNet().to(dev)
    cl = mode in ("fp32_cl", "bf16_cl")
    if cl:
        model = model.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    x = torch.randn(batch, 3, 224, 224, device=dev)
    if cl:
        x = x.contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (batch,), device=dev)
    use_bf16 = mode in ("bf16_compile", "bf16_cl")

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=use_bf16):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    if mode == "bf16_compile":
        model = torch.compile(model, dynamic=False)
    fn = step
    t0 = time.time()
    for _ in range(warmup):
        loss = fn()
    torch.cuda.synchronize()
    warm_s = time.time() - t0
    first = float(loss)
    torch.cuda.reset_peak_memory_stats()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(steps):
        loss = fn()
    end.record()
    end.synchronize()
    ms = start.elapsed_time(end)
    r = {
        "impl": "pytorch", "mode": mode, "batch": batch, "img_per_s": batch * steps / (ms / 1e3),
        "ms_per_step": ms / steps, "max_memory_allocated": torch.cuda.max_memory_allocated(),
        "max_memory_reserved": torch.cuda.max_memory_reserved(), "loss_first": first,
        "loss_last": float(loss), "warmup_s": warm_s, "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(), "gpu": torch.cuda.get_device_name(),
    }
    del model, opt, x, y
    torch.cuda.empty_cache()
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch_sizes", default="128,256")
    ap.add_argument("--modes", default="fp32,fp32_cl,tf32,bf16_compile")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--json", default="")
    ap.add_argument("--compile_batches", default="256",
                    help="batch sizes for bf16_compile (each compiles anew, about a minute)")
    a = ap.parse_args()
    results = []
    for mode in a.modes.split(","):
        for b in [int(v) for v in a.batch_sizes.split(",")]:
            if mode == "bf16_compile" and str(b) not in a.compile_batches.split(","):
                continue
            try:
                r = run(mode, b, a.warmup if mode != "bf16_compile" else max(a.warmup, 3), a.steps)
            except Exception as e:  # report and go on: one failed mode must not hide the rest
                r = {"impl": "pytorch", "mode": mode, "batch": b, "error": repr(e)[:300]}
            results.append(r)
            print(json.dumps(r), flush=True)
            if a.json:
                with open(a.json, "a") as f:
                    f.write(json.dumps(r) + "\n")
    print("\n| mode | batch | img/s | ms/step | max_memory_allocated GiB |")
    print("|---|---|---|---|---|")
    for r in results:
        if "error" in r:
            print(f"| {r['mode']} | {r['batch']} | error | | |")
        else:
            print(f"| {r['mode']} | {r['batch']} | {r['img_per_s']:.0f} | {r['ms_per_step']:.2f} | "
                  f"{r['max_memory_allocated'] / 2**30:.2f} |")


if __name__ == "__main__":
    main()
