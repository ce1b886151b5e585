#!/usr/bin/env python3
"""The torchvision peer of issue 35 point 4b: a ResNet-50 (or ResNet-50-D) trained with the
"modern" ImageNet recipe on Colonnade's Imagenette JPEG shards, read from the same files as
`trainer` (experiments/recipes/README.md has the recipe table, both sides).

    python3 torchvision_recipe.py --train .gpu_data/imagenette-small/train \
        --val .gpu_data/imagenette-small/val --model resnet50 --epochs 5 --batch 256 \
        --lr 0.1 --warmup 1 --metrics out.jsonl --commit SHA

Recipe (each a flag): random-resized crop of the decoded 128 px image to --crop (scale
--rrc_scale, ratio 3/4..4/3, torchvision's RandomResizedCrop.get_params, bilinear without
antialiasing as the trainer's resize, --antialias for torchvision's default), mirror p 1/2,
input (pixel - training channel mean) / 255 (the trainer's --mean=channel with the ResNets'
input scale 1/255), label smoothing, SGD momentum 0.9 (Colonnade's update: v = m v -
lr (g + wd w), w += v, decay on conv/fc weights only, from experiments/peer_quality), lr
cosine with linear warm-up per step as the trainer's `cosine+warmup:W`, bf16 autocast and
channels_last. Evaluation (every epoch, on the GPU from a uint8 copy of the split): the
centre square of round(--eval_crop_fraction x 128) pixels resized to --crop (bilinear,
half-pixel centres; the trainer's eval crop), and with --eval_views 2 the mean of its and
its mirror's softmax (the trainer's --eval_views=2).

Images per second are end to end: training images over training wall time, evaluations
excluded, data loading included (--workers processes decode and crop on the host).
Writes JSON lines to --metrics: a config record, one "epoch" record per epoch
(heldout_top1 accuracy, wall_sec since the loop started, before that epoch's evaluation),
and a "final" record. Exit 0 done, 2 bad arguments or data, 3 non-finite loss, 75 stopped
by SIGTERM (records so far kept).
"""
import argparse
import json
import math
import os
import signal
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
import torchvision
import torchvision.transforms.functional as TF

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "peer_quality"))
from torchvision_resnet18 import ColonnadeSgd, LrSchedule, Shards, ignore_stop_signals  # noqa: E402


# ---- models -------------------------------------------------------------------------------
def resnet50d(num_classes):
    """timm's resnet50d on torchvision's resnet50 (docs/MODELS.md, resnet50d): a deep stem
    (3x3/2 3->32, 3x3 32->32, 3x3 32->64, each + BN + ReLU) and, on strided shortcuts, a
    2x2/2 average pool (ceil mode, padding excluded) before the 1x1/1 projection."""
    nn = torch.nn
    m = torchvision.models.resnet50(weights=None, num_classes=num_classes)

    def cbr(i, o, s):
        return [nn.Conv2d(i, o, 3, s, 1, bias=False), nn.BatchNorm2d(o), nn.ReLU(inplace=True)]
    stem = cbr(3, 32, 2) + cbr(32, 32, 1) + cbr(32, 64, 1)
    m.conv1 = nn.Sequential(*stem[:-2])
    m.bn1 = stem[-2]
    for layer in (m.layer1, m.layer2, m.layer3, m.layer4):
        ds = layer[0].downsample
        conv, bn = ds[0], ds[1]
        stride = conv.stride[0]
        new = [nn.Conv2d(conv.in_channels, conv.out_channels, 1, 1, bias=False), bn]
        if stride > 1:
            new.insert(0, nn.AvgPool2d(2, stride, ceil_mode=True, count_include_pad=False))
        layer[0].downsample = nn.Sequential(*new)
    for mod in m.modules():  # torchvision's init for the new convs
        if isinstance(mod, nn.Conv2d):
            nn.init.kaiming_normal_(mod.weight, mode="fan_out", nonlinearity="relu")
    return m


def build_model(name, num_classes):
    if name == "resnet50d":
        return resnet50d(num_classes)
    return getattr(torchvision.models, name)(weights=None, num_classes=num_classes)


# ---- data ---------------------------------------------------------------------------------
def to_uint8_chw(img):
    return torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1)


class TrainBatches(torch.utils.data.Dataset):
    """Item k is the uint8 batch [B, 3, crop, crop] of global step k: epoch k // per_epoch's
    permutation (drop_last), every image random-resized-cropped and mirrored with draws that
    are a function of (seed, k), so any worker builds any batch."""

    def __init__(self, data, a, per_epoch, total_steps):
        self.d, self.a, self.per_epoch, self.total = data, a, per_epoch, total_steps
        self._epoch, self._order = -1, None

    def __len__(self):
        return self.total

    def __getitem__(self, k):
        epoch, b = divmod(k, self.per_epoch)
        if epoch != self._epoch:
            self._epoch = epoch
            self._order = np.random.default_rng([self.a.seed, 1, epoch]).permutation(self.d.size)
        torch.manual_seed(self.a.seed * 1_000_003 + k)  # get_params draws from torch's RNG
        B, c = self.a.batch, self.a.crop
        x = torch.empty((B, 3, c, c), dtype=torch.uint8)
        y = torch.empty(B, dtype=torch.int64)
        for j in range(B):
            i = int(self._order[b * B + j])
            img = to_uint8_chw(self.d.decode(i))
            top, left, h, w = torchvision.transforms.RandomResizedCrop.get_params(
                img, self.a.rrc_scale, self.a.rrc_ratio)
            out = TF.resized_crop(img, top, left, h, w, [c, c],
                                  interpolation=TF.InterpolationMode.BILINEAR,
                                  antialias=self.a.antialias)
            if self.a.mirror and torch.rand(()) < 0.5:
                out = out.flip(-1)
            x[j] = out
            y[j] = int(self.d.labels[i])
        return x, y


def normalise(x, mean, channels_last):
    x = (x.float() - mean) * (1.0 / 255.0)
    return x.contiguous(memory_format=torch.channels_last) if channels_last else x


def eval_views(x_u8, a):
    """The trainer's evaluation crop: the centre square of round(f * side) pixels (offset
    rounded down) resized to crop x crop (bilinear, half-pixel centres)."""
    H, W = x_u8.shape[-2:]
    s = int(round(a.eval_crop_fraction * min(H, W)))
    y0, x0 = (H - s) // 2, (W - s) // 2
    x = x_u8[..., y0:y0 + s, x0:x0 + s].float()
    if s != a.crop:
        x = F.interpolate(x, size=(a.crop, a.crop), mode="bilinear", align_corners=False)
    return x


@torch.no_grad()
def evaluate(model, val_x, val_y, mean, a, device, amp):
    model.eval()
    correct, loss_sum, n = 0, 0.0, val_y.numel()
    for i in range(0, n, a.eval_batch):
        xb = eval_views(val_x[i:i + a.eval_batch].to(device, non_blocking=True), a)
        yb = val_y[i:i + a.eval_batch].to(device)
        views = [xb, xb.flip(-1)] if a.eval_views == 2 else [xb]
        p = 0
        for v in views:
            with amp():
                logits = model(normalise(v, mean, a.channels_last))
            p = p + F.softmax(logits.float(), dim=1)
        p = p / len(views)
        correct += int((p.argmax(1) == yb).sum())
        loss_sum += float(-torch.log(p.gather(1, yb[:, None]).clamp_min(1e-30)).sum())
    model.train()
    return correct / n, loss_sum / n


# ---- main ---------------------------------------------------------------------------------
def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--train", required=True)
    p.add_argument("--val", required=True)
    p.add_argument("--model", default="resnet50", help="a torchvision model name or resnet50d")
    p.add_argument("--epochs", type=float, default=5)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--warmup", type=float, default=1, help="epochs of linear warm-up")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight_decay", type=float, default=5e-5)
    p.add_argument("--weight_decay_on", choices=["weights", "all"], default="weights")
    p.add_argument("--label_smoothing", type=float, default=0.1)
    p.add_argument("--crop", type=int, default=128)
    p.add_argument("--rrc_scale", default="0.35,1")
    p.add_argument("--rrc_ratio", default="0.75,1.3333333")
    p.add_argument("--antialias", action="store_true",
                   help="antialias the training resize (torchvision's default; the trainer's "
                        "resize has none)")
    p.add_argument("--mirror", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--eval_crop_fraction", type=float, default=0.875)
    p.add_argument("--eval_views", type=int, choices=[1, 2], default=2)
    p.add_argument("--eval_batch", type=int, default=500)
    p.add_argument("--precision", choices=["bf16", "fp32"], default="bf16")
    p.add_argument("--channels_last", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--workers", type=int, default=12)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--train_limit", type=int, default=0, help="tests: the first N images")
    p.add_argument("--val_limit", type=int, default=0, help="tests: the first N images")
    p.add_argument("--metrics", default="")
    p.add_argument("--commit", default="")
    a = p.parse_args(argv)
    a.rrc_scale = tuple(float(v) for v in a.rrc_scale.split(","))
    a.rrc_ratio = tuple(float(v) for v in a.rrc_ratio.split(","))
    if not (a.batch > 0 and a.epochs > 0 and a.lr >= 0 and 0 < a.eval_crop_fraction <= 1):
        p.error("bad --batch, --epochs, --lr or --eval_crop_fraction")
    return a


def main(argv=None):
    t_process = time.time()
    a = parse_args(argv)
    stop = {"signal": 0}
    signal.signal(signal.SIGTERM, lambda s, f: stop.update(signal=s))
    signal.signal(signal.SIGINT, lambda s, f: stop.update(signal=s))
    try:
        train, val = Shards(a.train, a.train_limit), Shards(a.val, a.val_limit)
    except (OSError, KeyError, ValueError) as e:
        print(f"torchvision_recipe.py: error: {e}", file=sys.stderr)
        return 2
    per_epoch = train.size // a.batch
    if per_epoch < 1:
        print(f"torchvision_recipe.py: {train.size} images < one batch", file=sys.stderr)
        return 2
    total_steps = max(1, math.ceil(a.epochs * per_epoch))
    total_epochs = total_steps / per_epoch
    schedule = LrSchedule(f"cosine+warmup:{a.warmup:g}" if a.warmup > 0 else "cosine")

    device = torch.device(a.device)
    cuda = device.type == "cuda"
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.manual_seed(a.seed)
    model = build_model(a.model, train.classes).to(device)
    if a.channels_last:
        model = model.to(memory_format=torch.channels_last)
    model.train()
    opt = ColonnadeSgd(model, a.momentum, a.weight_decay, a.weight_decay_on)
    if a.precision == "bf16":
        def amp():
            return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    else:
        def amp():
            return torch.autocast(device_type=device.type, enabled=False)
    # The training split's per-channel mean (the trainer's --mean=channel), as [1, 3, 1, 1].
    cmean = train.mean_image.reshape(-1, 3).astype(np.float64).mean(0).astype(np.float32)
    mean = torch.tensor(cmean, device=device).view(1, 3, 1, 1)
    val_x = torch.stack([to_uint8_chw(val.decode(i)) for i in range(val.size)])
    val_y = torch.from_numpy(val.labels[:val.size].copy())
    if cuda:
        val_x, val_y = val_x.to(device), val_y.to(device)

    more = {"prefetch_factor": 4, "persistent_workers": True} if a.workers > 0 else {}
    loader = torch.utils.data.DataLoader(
        TrainBatches(train, a, per_epoch, total_steps), batch_size=None, shuffle=False,
        num_workers=a.workers, pin_memory=cuda, worker_init_fn=ignore_stop_signals, **more)

    out = open(a.metrics, "a") if a.metrics else None
    base = {"impl": "torchvision", "model": a.model, "seed": a.seed,
            "commit": a.commit or "unknown"}

    def record(r):
        line = json.dumps({**base, **r})
        print(line, flush=True)
        if out:
            out.write(line + "\n")
            out.flush()

    params = sum(p.numel() for p in model.parameters())
    record({"kind": "config", "torch": torch.__version__, "torchvision": torchvision.__version__,
            "params": params, "train_images": train.size, "val_images": val.size,
            "image_size": train.height, "crop": a.crop, "batch": a.batch,
            "steps": total_steps, "steps_per_epoch": per_epoch, "epochs": total_epochs,
            "lr": a.lr, "lr_schedule": f"cosine+warmup:{a.warmup:g}", "momentum": a.momentum,
            "weight_decay": a.weight_decay, "weight_decay_on": a.weight_decay_on,
            "label_smoothing": a.label_smoothing, "rrc_scale": a.rrc_scale,
            "rrc_ratio": a.rrc_ratio, "antialias": a.antialias,
            "eval_crop_fraction": a.eval_crop_fraction, "eval_views": a.eval_views,
            "precision": a.precision, "channels_last": a.channels_last, "workers": a.workers,
            "gpu": torch.cuda.get_device_name(device) if cuda else "",
            "startup_sec": round(time.time() - t_process, 3)})

    start = time.time()
    eval_sec, train_wall, done, code, acc, lr = 0.0, 0.0, 0, 0, None, 0.0
    loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    for step, (x, y) in enumerate(loader):
        x = normalise(x.to(device, non_blocking=True), mean, a.channels_last)
        y = y.to(device, non_blocking=True)
        with amp():
            logits = model(x)
        loss = F.cross_entropy(logits.float(), y, label_smoothing=a.label_smoothing)
        for p in model.parameters():
            p.grad = None
        loss.backward()
        lr = schedule.at(a.lr, step / per_epoch, total_epochs)
        opt.step(lr)
        loss_sum += loss.detach().double()
        done = step + 1
        if done % per_epoch == 0 or done == total_steps:
            if cuda:
                torch.cuda.synchronize()
            train_wall = time.time() - start - eval_sec
            mean_loss = float(loss_sum) / (done - (math.ceil(done / per_epoch) - 1) * per_epoch)
            loss_sum.zero_()
            if not math.isfinite(mean_loss):
                code = 3
                break
            t = time.time()
            acc, vloss = evaluate(model, val_x, val_y, mean, a, device, amp)
            eval_sec += time.time() - t
            record({"kind": "epoch", "step": done, "epoch": round(done / per_epoch, 4), "lr": lr,
                    "train_loss": mean_loss, "heldout_top1": acc, "heldout_loss": vloss,
                    "train_sec": round(train_wall, 3),
                    "wall_sec": round(time.time() - t_process, 3)})
        if stop["signal"]:
            code = 75
            break
    final = {"kind": "final", "completed": code == 0, "exit": code, "steps_done": done,
             "steps": total_steps, "train_sec": round(train_wall, 3),
             "eval_sec": round(eval_sec, 3),
             "process_wall_sec": round(time.time() - t_process, 3),
             "img_per_s": round(done * a.batch / max(train_wall, 1e-9), 1),
             "heldout_top1": acc}
    if cuda:
        final["max_memory_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 3)
    record(final)
    if out:
        out.close()
    return code


if __name__ == "__main__":
    sys.exit(main())
