#!/usr/bin/env python3
"""torchvision's ResNet-18 trained with Colonnade's recipe semantics on Colonnade's own
JPEG shards: the peer of `trainer --model=resnet18` in the training-quality comparison of
issue 12, point 19 (experiments/peer_quality/README.md lists every rule and difference).

    python3 torchvision_resnet18.py --train .gpu_data/imagenette-small/train \
        --val .gpu_data/imagenette-small/val --epochs 18 --crop 112 --seed 1 \
        --commit $(git rev-parse HEAD) --metrics out.jsonl

What is Colonnade's and reproduced here (the source it comes from in brackets):
  * input  (pixel - mean[sy][sx]) * (1/255), the training split's mean IMAGE by default
    (--mean=image; channel = the mean image's per-channel average) [data/augment.cc,
    Recipe::input_scale in core/models.h]; eval uses the val split's stored mean, which
    prepare_data.sh makes the training mean, as the trainer does [apps/train_session.cc].
  * train  random crop, offsets uniform in [0, H - crop] for y and x, mirror with
    probability 1/2; an epoch is a fresh permutation, drop_last [docs/DATA.md section 4-5].
  * eval   centre crop at ((H - crop) // 2, (W - crop) // 2): odd margins round down (one
    pixel more at the bottom/right), unlike torchvision's CenterCrop, which rounds.
  * lr     at step s (0-based) lr = float32(At(base, s / per_epoch, total_steps / per_epoch))
    with cosine 0.5 (1 + cos(pi min(1, e / E))) times e / W while e < W (warm-up): the first
    step's lr is exactly 0 [core/optimizer.cc, the training loop].
  * SGD    v = m v - lr (g + wd_mult wd w); w += v, with wd_mult = 0 for biases and batch-norm
    gamma/beta (--weight_decay_on=weights) [core/optimizer.cc, core/layers.cc]; for a
    constant lr this is torch.optim.SGD, for a changing lr it is not (PyTorch's buffer has
    no lr in it), so the update is written out below.
  * loss   mean softmax cross-entropy over the batch; BN momentum 0.1, eps 1e-5, running
    variance unbiased (as PyTorch).
Not reproducible bit for bit: the random streams (Colonnade draws with Philox), and by
default the initialisation (--init=colonnade gives Colonnade's distributions: He-normal
N(0, 2/fan_in) for every conv and fc weight, fc bias 0; torchvision: conv N(0, 2/fan_out),
fc weight and bias U(+-1/sqrt(fan_in))).

Writes JSON lines to --metrics: one "epoch" record per epoch (train loss, held-out top-1
error, wall seconds since the training loop started) and one "final" record. Exit codes:
0 done, 2 bad arguments or data, 3 non-finite loss, 75 stopped by SIGTERM/SIGINT (the
records so far are kept).
"""
import argparse
import io
import json
import math
import os
import signal
import sys
import time

import h5py
import numpy as np
import torch
import torch.nn.functional as F
import torchvision
from PIL import Image

SCALE = np.float32(1.0) / np.float32(255.0)  # Recipe::input_scale = 1.0f / 255.0f


# ---- data --------------------------------------------------------------------------------
class Shards:
    """A Colonnade JPEG shard directory (docs/DATA.md section 1), read whole with h5py: the
    JPEG streams (a few tens of MB) stay in memory and are decoded by the loader workers."""

    def __init__(self, root, limit=0):
        with h5py.File(os.path.join(root, "dataset.h5"), "r") as index:
            # String attributes are variable-length (h5py: str) in datasets written by
            # current builds, fixed-length (bytes) in those of earlier ones: accept both.
            a = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in index.attrs.items()}
            if a["encoding"] != "jpeg":
                raise ValueError(f"{root}/dataset.h5: encoding is {a['encoding']}, expected jpeg")
            self.height, self.width = int(a["height"]), int(a["width"])
            self.channels, self.classes = int(a["channels"]), int(a["num_classes"])
            self.mean_source = str(a["mean_source"])
            self.mean_image = index["mean_image"][:].astype(np.float32)  # [H][W][C]
            files = index["shard_files"].asstr()[:]
        streams, offsets, labels, base = [], [np.zeros(1, np.int64)], [], 0
        for f in files:
            with h5py.File(os.path.join(root, f), "r") as shard:
                streams.append(shard["images"][:])
                offsets.append(shard["offsets"][1:].astype(np.int64) + base)
                labels.append(shard["labels"][:].astype(np.int64))
                base += int(shard["offsets"][-1])
        self.bytes = np.concatenate(streams)
        self.offsets = np.concatenate(offsets)
        self.labels = np.concatenate(labels)
        self.size = len(self.labels) if limit <= 0 else min(limit, len(self.labels))
        self.root = root
        if self.channels != 3:
            raise ValueError(f"{root}: {self.channels} channels; this script expects RGB")

    def decode(self, i):
        b, e = self.offsets[i], self.offsets[i + 1]
        img = np.asarray(Image.open(io.BytesIO(self.bytes[b:e].tobytes())).convert("RGB"))
        if img.shape[0] != self.height or img.shape[1] != self.width:
            raise ValueError(f"{self.root}: image {i} decodes to {img.shape[1]}x{img.shape[0]}, "
                             f"the dataset declares {self.width}x{self.height}")
        return img


def transform(img, mean, y0, x0, crop, mirror, mean_mode, channel_mean):
    """Colonnade's WriteImageCHWN for one image: crop at (y0, x0), optional mirror, mean
    subtraction, scale; returns float32 [C][crop][crop]."""
    px = img[y0:y0 + crop, x0:x0 + crop].astype(np.float32)
    if mean_mode == "image":
        px = px - mean[y0:y0 + crop, x0:x0 + crop]  # the mean pixel at the same source pixel
    elif mean_mode == "channel":
        px = px + (-channel_mean)  # the trainer adds (light - channel mean), light = 0
    out = px * SCALE
    if mirror:
        out = out[:, ::-1]
    return np.ascontiguousarray(out.transpose(2, 0, 1))


class TrainBatches(torch.utils.data.Dataset):
    """Item k is the training batch of global step k: epoch k // per_epoch, batch
    k % per_epoch of that epoch's permutation (drop_last). The order and the augmentation
    draws are pure functions of (seed, epoch), so any worker builds any batch."""

    def __init__(self, data, args, per_epoch, total_steps):
        self.d, self.a, self.per_epoch, self.total = data, args, per_epoch, total_steps
        self.channel_mean = mean_per_channel(data.mean_image)
        self._plan_epoch, self._plan = -1, None

    def __len__(self):
        return self.total

    def plan(self, epoch):
        if epoch != self._plan_epoch:
            rng = np.random.default_rng([self.a.seed, 1, epoch])
            n, c = self.d.size, self.a.crop
            order = rng.permutation(n)
            y0 = rng.integers(0, self.d.height - c + 1, size=n)
            x0 = rng.integers(0, self.d.width - c + 1, size=n)
            mirror = rng.random(n) < 0.5 if self.a.mirror else np.zeros(n, bool)
            self._plan_epoch, self._plan = epoch, (order, y0, x0, mirror)
        return self._plan

    def __getitem__(self, k):
        epoch, b = divmod(k, self.per_epoch)
        order, y0, x0, mirror = self.plan(epoch)
        B = self.a.batch
        x = np.empty((B, 3, self.a.crop, self.a.crop), np.float32)
        y = np.empty(B, np.int64)
        for j, pos in enumerate(range(b * B, (b + 1) * B)):
            i = order[pos]
            x[j] = transform(self.d.decode(i), self.d.mean_image, y0[pos], x0[pos], self.a.crop,
                             mirror[pos], self.a.mean, self.channel_mean)
            y[j] = self.d.labels[i]
        return torch.from_numpy(x), torch.from_numpy(y)


class EvalBatches(torch.utils.data.Dataset):
    """Dataset order, the last batch partial, centre crops rounding odd margins down."""

    def __init__(self, data, args):
        self.d, self.a = data, args
        self.channel_mean = mean_per_channel(data.mean_image)
        self.y0 = (data.height - args.crop) // 2
        self.x0 = (data.width - args.crop) // 2

    def __len__(self):
        return (self.d.size + self.a.batch - 1) // self.a.batch

    def __getitem__(self, b):
        idx = range(b * self.a.batch, min((b + 1) * self.a.batch, self.d.size))
        x = np.stack([transform(self.d.decode(i), self.d.mean_image, self.y0, self.x0,
                                self.a.crop, False, self.a.mean, self.channel_mean) for i in idx])
        return torch.from_numpy(x), torch.from_numpy(self.d.labels[list(idx)])


def ignore_stop_signals(_worker_id):
    # `timeout` signals the whole process group: loader workers leave the stop to the main
    # process, which finishes its step, writes its records and shuts them down.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def mean_per_channel(mean_image):
    # The pipeline's channel mean: the mean image's average over pixels, in double.
    return mean_image.reshape(-1, mean_image.shape[-1]).astype(np.float64).mean(0).astype(np.float32)


# ---- schedule and optimiser --------------------------------------------------------------
class LrSchedule:
    """core/optimizer.cc's LrSchedule::At: constant | step:E | multistep:E1,... | cosine,
    optionally +warmup:W (epochs), evaluated in double and rounded to float32."""

    def __init__(self, spec):
        self.kind, self.step_epochs, self.milestones, self.warmup = None, 0.0, [], 0.0
        for i, part in enumerate(spec.split("+")):
            name, _, arg = part.partition(":")
            if i > 0:
                if name != "warmup":
                    raise ValueError(f"--lr_schedule={spec}: only +warmup:W may follow")
                self.warmup = float(arg)
            elif name in ("constant", "cosine"):
                self.kind = name
            elif name == "step":
                self.kind, self.step_epochs = name, float(arg)
            elif name == "multistep":
                self.kind, self.milestones = name, [float(v) for v in arg.split(",")]
            else:
                raise ValueError(f"--lr_schedule={spec}: unknown schedule '{name}'")

    def at(self, base_lr, epoch, total_epochs):
        lr = float(np.float32(base_lr))
        if self.kind == "step":
            lr *= math.pow(0.1, math.floor(epoch / self.step_epochs))
        elif self.kind == "multistep":
            for m in self.milestones:
                if epoch >= m:
                    lr *= 0.1
        elif self.kind == "cosine" and total_epochs > 0:
            lr *= 0.5 * (1.0 + math.cos(math.pi * min(1.0, epoch / total_epochs)))
        if self.warmup > 0 and epoch < self.warmup:
            lr *= epoch / self.warmup
        return float(np.float32(lr))


class ColonnadeSgd:
    """v = momentum v - lr (g + wd w); w += v (SgdOptimizer::Step and the SgdUpdate op), with
    weight decay on the conv/fc weights only (weights) or on every parameter (all)."""

    def __init__(self, model, momentum, weight_decay, decay_on):
        self.momentum, self.wd = momentum, weight_decay
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        # Conv and fc weights are the parameters of rank > 1; biases and BN gamma/beta are 1-D.
        self.decayed = [p for n, p in named if decay_on == "all" or p.dim() > 1]
        self.plain = [p for n, p in named if not (decay_on == "all" or p.dim() > 1)]
        self.vel = {p: torch.zeros_like(p) for _, p in named}
        self.decayed_names = [n for n, p in named if decay_on == "all" or p.dim() > 1]

    @torch.no_grad()
    def step(self, lr):
        for group, wd in ((self.decayed, self.wd), (self.plain, 0.0)):
            if not group:
                continue
            grads = [p.grad for p in group]
            d = torch._foreach_add(grads, group, alpha=wd) if wd != 0.0 else grads
            v = [self.vel[p] for p in group]
            torch._foreach_mul_(v, self.momentum)
            torch._foreach_add_(v, d, alpha=-lr)
            torch._foreach_add_(group, v)


def colonnade_init(model):
    """Colonnade's initialisation of resnet18 (core/layers.cc, core/net.cc): every conv and
    fc weight He-normal N(0, 2 / fan_in), fan_in = in_channels / groups * kh * kw (fc:
    inputs); fc bias 0; BN gamma 1, beta 0 (torchvision's too)."""
    for m in model.modules():
        if isinstance(m, torch.nn.Conv2d):
            fan_in = m.in_channels // m.groups * m.kernel_size[0] * m.kernel_size[1]
            torch.nn.init.normal_(m.weight, 0.0, math.sqrt(2.0 / fan_in))
            if m.bias is not None:
                torch.nn.init.zeros_(m.bias)
        elif isinstance(m, torch.nn.Linear):
            torch.nn.init.normal_(m.weight, 0.0, math.sqrt(2.0 / m.in_features))
            torch.nn.init.zeros_(m.bias)


# ---- training ----------------------------------------------------------------------------
def evaluate(model, loader, device):
    model.eval()
    sums = torch.zeros(4, dtype=torch.float64, device=device)  # loss, top1, top5, images
    with torch.no_grad():
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            logits = model(x)
            top5 = logits.topk(min(5, logits.shape[1]), dim=1).indices
            sums[0] += F.cross_entropy(logits, y, reduction="sum").double()
            sums[1] += (top5[:, 0] == y).sum()
            sums[2] += (top5 == y[:, None]).any(1).sum()
            sums[3] += y.numel()
    model.train()
    s = sums.tolist()
    return {"loss": s[0] / s[3], "top1_error": 1 - s[1] / s[3], "top5_error": 1 - s[2] / s[3],
            "images": int(s[3])}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--train", required=True, help="training shard directory (make_shards)")
    p.add_argument("--val", required=True, help="held-out shard directory")
    p.add_argument("--epochs", type=float, default=18)
    p.add_argument("--steps", type=int, default=0, help="training steps; 0: --epochs")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--lr_schedule", default="cosine+warmup:1")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight_decay", type=float, default=5e-4)
    p.add_argument("--weight_decay_on", choices=["weights", "all"], default="weights",
                   help="weights: conv and fc weights only (Colonnade's rule); all: also "
                        "biases and BN gamma/beta (torch.optim.SGD's weight_decay)")
    p.add_argument("--crop", type=int, default=112)
    p.add_argument("--mirror", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--mean", choices=["image", "channel", "none"], default="image")
    p.add_argument("--init", choices=["torchvision", "colonnade"], default="torchvision")
    p.add_argument("--precision", choices=["fp32", "tf32"], default="fp32",
                   help="fp32: TF32 off for cuDNN and matmul (Colonnade's arithmetic)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--eval_every", type=int, default=0, help="steps; 0: every epoch")
    p.add_argument("--workers", type=int, default=8, help="training loader processes")
    p.add_argument("--eval_workers", type=int, default=4)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--val_limit", type=int, default=0, help="tests: evaluate the first N only")
    p.add_argument("--metrics", default="", help="JSON lines output (appended)")
    p.add_argument("--commit", default="", help="commit of the tree measured, for the records")
    p.add_argument("--log_every", type=int, default=0, help="print a line every N steps")
    a = p.parse_args(argv)
    if not (a.batch > 0 and a.crop > 0 and a.lr >= 0 and a.weight_decay >= 0
            and 0 <= a.momentum < 1 and math.isfinite(a.epochs) and a.epochs > 0):
        p.error("--batch, --crop, --epochs must be positive, --lr and --weight_decay "
                "non-negative, --momentum in [0, 1)")
    return a


def main(argv=None):
    a = parse_args(argv)
    t_process = time.time()
    stop = {"signal": 0}

    def on_signal(sig, _frame):
        stop["signal"] = sig
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    try:
        train = Shards(a.train)
        val = Shards(a.val, a.val_limit)
        schedule = LrSchedule(a.lr_schedule)
    except (OSError, KeyError, ValueError) as e:
        print(f"torchvision_resnet18.py: error: {e}", file=sys.stderr)
        return 2
    if a.crop > min(train.height, train.width) or (val.height, val.width) != (train.height,
                                                                               train.width):
        print(f"torchvision_resnet18.py: error: crop {a.crop} does not fit {train.height}x"
              f"{train.width} images, or the splits differ in size", file=sys.stderr)
        return 2
    if not np.array_equal(val.mean_image, train.mean_image):
        print(f"warning: {a.val}: stores a mean image other than {a.train}'s "
              f"(mean_source {val.mean_source}); evaluation subtracts the val split's, as the "
              f"trainer does", file=sys.stderr)
    per_epoch = train.size // a.batch
    if per_epoch < 1:
        print(f"torchvision_resnet18.py: error: {train.size} images < one batch", file=sys.stderr)
        return 2
    total_steps = a.steps if a.steps > 0 else max(1, math.ceil(a.epochs * per_epoch))
    total_epochs = total_steps / per_epoch
    eval_every = a.eval_every if a.eval_every > 0 else per_epoch

    device = torch.device(a.device)
    tf32 = a.precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(a.seed)
    model = torchvision.models.resnet18(weights=None, num_classes=train.classes)
    if a.init == "colonnade":
        colonnade_init(model)
    model = model.to(device).train()
    opt = ColonnadeSgd(model, a.momentum, a.weight_decay, a.weight_decay_on)

    pin = device.type == "cuda"
    more = {"prefetch_factor": 4} if a.workers > 0 else {}  # torch 1.x refuses it without workers
    train_loader = torch.utils.data.DataLoader(
        TrainBatches(train, a, per_epoch, total_steps), batch_size=None, shuffle=False,
        num_workers=a.workers, pin_memory=pin, worker_init_fn=ignore_stop_signals, **more)
    val_loader = torch.utils.data.DataLoader(
        EvalBatches(val, a), batch_size=None, shuffle=False, num_workers=a.eval_workers,
        pin_memory=pin, persistent_workers=a.eval_workers > 0, worker_init_fn=ignore_stop_signals)

    out = open(a.metrics, "a") if a.metrics else None
    base = {"impl": "torchvision", "torch": torch.__version__,
            "torchvision": torchvision.__version__, "model": "resnet18", "seed": a.seed,
            "commit": a.commit or "unknown"}

    def record(r):
        line = json.dumps({**base, **r})
        print(line, flush=True)
        if out:
            out.write(line + "\n")
            out.flush()

    print(f"torchvision resnet18: {train.size} train / {val.size} val images {train.height}x"
          f"{train.width}, crop {a.crop}, batch {a.batch}, {per_epoch} steps/epoch, "
          f"{total_steps} steps ({total_epochs:.2f} epochs), lr {a.lr} {a.lr_schedule}, "
          f"momentum {a.momentum}, wd {a.weight_decay} on {a.weight_decay_on} "
          f"({len(opt.decayed)} tensors decayed), init {a.init}, mean {a.mean}, "
          f"{a.precision}, device {device}", flush=True)
    record({"kind": "config", "train": a.train, "val": a.val, "train_images": train.size,
            "val_images": val.size, "image_size": train.height, "crop": a.crop,
            "batch": a.batch, "steps": total_steps, "steps_per_epoch": per_epoch,
            "lr": a.lr, "lr_schedule": a.lr_schedule, "momentum": a.momentum,
            "weight_decay": a.weight_decay, "weight_decay_on": a.weight_decay_on,
            "init": a.init, "mean": a.mean, "mirror": a.mirror, "precision": a.precision,
            "workers": a.workers, "device": str(device),
            "gpu": torch.cuda.get_device_name(device) if pin else ""})

    start = time.time()
    sums = torch.zeros(3, dtype=torch.float64, device=device)  # loss sum, correct, images
    last, lr, code, done = None, 0.0, 0, 0
    train_wall, logged, eval_before, eval_sec = 0.0, 0, 0.0, 0.0
    for step, (x, y) in enumerate(train_loader):
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        for p in model.parameters():
            p.grad = None
        loss.backward()
        # The trainer reads the step's lr after backward, from the 0-based step.
        lr = schedule.at(a.lr, step / per_epoch, total_epochs)
        opt.step(lr)
        sums[0] += loss.detach().double() * y.numel()
        sums[1] += (logits.detach().argmax(1) == y).sum()
        sums[2] += y.numel()
        done = step + 1
        if a.log_every > 0 and done % a.log_every == 0:
            print(f"step {done}/{total_steps} loss {loss.item():.4f} lr {lr:.4g} "
                  f"{time.time() - start:.1f}s", flush=True)
        if done % per_epoch == 0 or done % eval_every == 0 or done == total_steps:
            s = sums.tolist()
            if not math.isfinite(s[0]):
                print(f"torchvision_resnet18.py: the loss became {s[0]} before step {done}",
                      file=sys.stderr)
                code = 3
                break
            # wall_sec: since the loop started, after this step and before this evaluation
            # (earlier evaluations included), as the trainer's train record's elapsed_sec.
            train_wall, logged, eval_before = time.time() - start, done, eval_sec
            r = {"kind": "epoch", "step": done, "epoch": round(done / per_epoch, 4),
                 "lr": lr, "train_loss": s[0] / s[2], "train_top1_error": 1 - s[1] / s[2],
                 "wall_sec": round(train_wall, 3)}
            sums.zero_()
            if done % eval_every == 0 or done == total_steps:
                t_eval = time.time()
                last = evaluate(model, val_loader, device)
                eval_sec += time.time() - t_eval
                r.update({"heldout_loss": last["loss"], "heldout_top1_error": last["top1_error"],
                          "heldout_top5_error": last["top5_error"], "heldout_images": last["images"]})
            record(r)
        if stop["signal"]:
            code = 75
            break
    if pin:
        torch.cuda.synchronize()
    # train_wall_sec: until the last logged step, before its evaluation; images_per_sec leaves
    # the evaluations out (both as the trainer's records do).
    final = {"kind": "final", "steps_done": done,
             "steps": total_steps, "completed": code == 0, "exit": code,
             "train_wall_sec": round(train_wall, 3),
             "process_wall_sec": round(time.time() - t_process, 3),
             "images_per_sec": round(logged * a.batch / max(train_wall - eval_before, 1e-9), 1)}
    if last:
        final.update({"heldout_top1_error": last["top1_error"],
                      "heldout_top5_error": last["top5_error"], "heldout_loss": last["loss"]})
    if pin:
        final["max_memory_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 3)
    record(final)
    if out:
        out.close()
    return code


if __name__ == "__main__":
    sys.exit(main())
