#!/usr/bin/env python3
"""Export a Colonnade checkpoint as a self-contained PyTorch model (TorchScript, and ONNX
where the installed PyTorch can write it).

  scripts/export_torch.py CHECKPOINT OUT.pt [--onnx] [--dataset DIR]

  m = torch.jit.load("OUT.pt")                       # no Colonnade code needed
  logits = m(x)                                      # x: see "Inputs" below

Models: alexnet (any --columns), cifar10-18pct, cifar10-80sec, resnet18-cifar, resnet18,
resnet34, resnet50, resnet152, resnet18d, resnet50d (ResNet-D), resnet9 (Page's ResNet-9). The network is rebuilt in PyTorch from the checkpoint's
attributes (model, columns, input_size, num_classes, input_channels) and the canonical
tensors under /params (docs/CHECKPOINTS.md), with Colonnade's layer semantics
(src/core/models.cc, zoo_imagenet.cc, core/ops/lrn.cc and the other ops; docs/MODELS.md):

  * LRN across channels (AlexNet norm1, norm2): b_c = a_c / (k + alpha * sum a_j^2)^beta
    over the channels j in [c - 2, c + 2] of c's own column (window clipped to the column),
    size 5, alpha 1e-4 (the paper's convention: not divided by the size), beta 0.75, k 2.
  * cuda-convnet's within-map normalisation `rnorm` (cifar10-18pct): b = u / (1 + 5e-5 / 9 *
    sum u^2)^0.75 over the 3x3 window of the same channel, clipped to the image.
  * pooling in ceil mode (the last window may run past the image and is clipped; average
    pooling divides by the number of in-image pixels); ResNet's stem max-pool is PyTorch's
    floor mode with padding 1. A window larger than the padded input gives one output.
  * grouped convolutions: AlexNet's conv2, conv4, conv5 use groups = columns.
  * batch norm at inference: running statistics, eps 1e-5.
  * dropout is the identity at inference (Colonnade's dropout scales at training time).
  * fc6's input is the (C, H, W)-flattened activation, as torch.flatten on NCHW.

Inputs. Without --dataset the model takes exactly what the trainer feeds its `data` blob,
transposed to NCHW: float32 [N][C][S][S], S = the checkpoint's input_size, each value
(pixel - mean) * scale, where pixel is the stored 0..255 value, mean the training set's
mean image at the source pixel (before the centre crop; `--mean=image`, the default), and
scale the model recipe's: 1 for alexnet and the cifar10 nets (raw pixel units, as
cuda-convnet), 1/64 for resnet9, 1/255 for the other ResNets. That is what `trainer
--mode=predict` computes.

With --dataset DIR (a shard directory written by make_shards, normally the training split
or a val split that stores the training mean) the preprocessing goes inside the model: it
then takes the images as make_shards stores them, uint8 (or float) [N][H][W][C] RGB at
the dataset's size, subtracts DIR/dataset.h5's /mean_image (or its per-channel mean when
the checkpoint was trained with --mean=channel; nothing with --mean=none), multiplies by
the recipe's scale, and takes the centre S x S crop (offset (H - S) / 2, rounded down), as
the trainer's evaluation pipeline does; when the checkpoint was trained with
--random_resized_crop or --eval_crop_fraction, the centre square of that fraction (0.875 by
default with --random_resized_crop) resized to S x S by the trainer's fixed-point bilinear
(src/core/bilinear.h; the mean image read at each output pixel's nearer tap).

Outputs: logits float32 [N][num_classes] (no softmax), the trainer's --predictions /logits.

Also written: OUT.pt holds an extra file colonnade.json (model, columns, sizes, the input
convention; torch.jit.load(..., _extra_files={"colonnade.json": ""}) reads it), and with
--onnx, OUT.onnx (opset 13, batch dimension dynamic) unless this PyTorch cannot export
(then a warning, exit 0; exit 1 only if the TorchScript export fails).

Needs torch (Debian: python3-torch), h5py and numpy. If the python3 that runs this lacks
them, the script re-runs itself with /usr/bin/python3 (scripts/_python.py). Exit codes: 0
written, 1 runtime error (or a missing package), 2 usage error (bad flag, unsupported
model, a file that is not a checkpoint).
"""

import argparse
import json
import math
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _python  # noqa: E402  scripts/_python.py: re-run under /usr/bin/python3 if need be

try:
    import h5py
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:
    _python.reexec_or_exit("export_torch.py", e.name or str(e),
                           "python3-torch python3-h5py python3-numpy")

from typing import List

SUPPORTED = ("alexnet", "cifar10-18pct", "cifar10-80sec", "resnet18-cifar", "resnet18",
             "resnet34", "resnet50", "resnet152", "resnet18d", "resnet50d", "resnet9")
# Recipe::input_scale of src/core/models.cc: raw pixel units for AlexNet and cuda-convnet's
# nets, 1/64 for ResNet-9 (Page's per-channel std, about 0.25 of 255), 0..1 for the other
# ResNets (the Recipe default 1/255, a float32 constant).
INPUT_SCALE = {"alexnet": 1.0, "cifar10-18pct": 1.0, "cifar10-80sec": 1.0, "resnet9": 1.0 / 64}
DEFAULT_SCALE = float(np.float32(1.0) / np.float32(255.0))


class UsageError(Exception):
    pass


# ---- layers with Colonnade's semantics ----------------------------------------------------

class CrossChannelLRN(nn.Module):
    """LrnCrossParams (core/ops.h): b_c = a_c (k + alpha' sum_{j in window(c)} a_j^2)^-beta,
    window(c) = [c - size/2, c + size/2] clipped to c's group of C/groups channels;
    alpha' = alpha (or alpha/size when alpha_over_size)."""

    def __init__(self, size: int, alpha: float, beta: float, k: float, groups: int,
                 alpha_over_size: bool = False):
        super().__init__()
        self.size = size
        self.alpha = alpha / size if alpha_over_size else alpha
        self.beta = beta
        self.k = k
        self.groups = groups

    def forward(self, x):
        n, c, h, w = x.shape
        half = self.size // 2
        sq = (x * x).reshape(n, self.groups, c // self.groups, h, w)
        sq = F.pad(sq, [0, 0, 0, 0, half, half])  # zeros outside the group: a clipped window
        cg = c // self.groups
        acc = sq[:, :, 0:cg]
        for d in range(1, self.size):
            acc = acc + sq[:, :, d:d + cg]
        denom = self.k + self.alpha * acc.reshape(n, c, h, w)
        return x * denom.pow(-self.beta)


class WithinMapNorm(nn.Module):
    """LrnWithinParams (cuda-convnet rnorm): b = u (k + alpha/size^2 sum_{window} u^2)^-beta,
    window of pixel y: [y - size/2, y - size/2 + size) clipped to the image."""

    def __init__(self, size: int, alpha: float, beta: float, k: float):
        super().__init__()
        self.size = size
        self.alpha = alpha / float(size * size)
        self.beta = beta
        self.k = k

    def forward(self, x):
        lo = self.size // 2
        hi = self.size - 1 - lo
        h, w = x.shape[2], x.shape[3]
        sq = F.pad(x * x, [lo, hi, lo, hi])  # zeros outside the image: a clipped window
        rows = sq[:, :, :, 0:w]  # box sum along x, then along y (ONNX-friendly slices)
        for d in range(1, self.size):
            rows = rows + sq[:, :, :, d:d + w]
        box = rows[:, :, 0:h, :]
        for d in range(1, self.size):
            box = box + rows[:, :, d:d + h, :]
        return x * (self.k + self.alpha * box).pow(-self.beta)


class Pool(nn.Module):
    """PoolParams (core/ops.h): windows start at -pad and step by stride; ceil mode covers the
    border (a window running past the image is clipped, average pooling divides by the
    in-image pixel count); a window larger than the padded input gives one output over the
    whole image (PoolOutSize's span <= 0 case, which PyTorch refuses)."""

    def __init__(self, kind: str, size: int, stride: int, pad: int = 0, ceil_mode: bool = True):
        super().__init__()
        self.is_max = kind == "max"
        self.size = size
        self.stride = stride
        self.pad = pad
        self.ceil_mode = ceil_mode

    def forward(self, x):
        if x.shape[2] + 2 * self.pad < self.size or x.shape[3] + 2 * self.pad < self.size:
            if self.is_max:
                return torch.amax(x, dim=[2, 3], keepdim=True)
            return torch.mean(x, dim=[2, 3], keepdim=True)
        if self.is_max:
            return F.max_pool2d(x, self.size, self.stride, self.pad, ceil_mode=self.ceil_mode)
        return F.avg_pool2d(x, self.size, self.stride, self.pad, ceil_mode=self.ceil_mode,
                            count_include_pad=False)


class Flatten(nn.Module):
    """(C, H, W) order: what Colonnade's fully connected layers read (CHWN activations)."""

    def forward(self, x):
        return torch.flatten(x, 1)


class GlobalAvgPool(nn.Module):
    def forward(self, x):
        return torch.mean(x, dim=[2, 3])


# ---- the zoo ------------------------------------------------------------------------------
# Each builder returns (module, names): names maps a Colonnade tensor "<layer>/<param>" to
# the module's state_dict key, so that loading is strict in both directions.

def flat_size(layers, a):
    """Inputs of the first fully connected layer: the features after `layers` for one image
    of the checkpoint's input size (fc6 depends on --input_size)."""
    x = torch.zeros(1, a["input_channels"], a["input_size"], a["input_size"])
    with torch.no_grad():
        for _, mod in layers:
            x = mod(x)
    return x.shape[1]


def alexnet(a):
    k, cin, classes = a["columns"], a["input_channels"], a["num_classes"]

    def lrn():
        return CrossChannelLRN(5, 1e-4, 0.75, 2.0, k)

    layers = [
        ("conv1", nn.Conv2d(cin, 96, 11, stride=4, padding=2)), ("relu1", nn.ReLU()),
        ("norm1", lrn()), ("pool1", Pool("max", 3, 2)),
        ("conv2", nn.Conv2d(96, 256, 5, padding=2, groups=k)), ("relu2", nn.ReLU()),
        ("norm2", lrn()), ("pool2", Pool("max", 3, 2)),
        ("conv3", nn.Conv2d(256, 384, 3, padding=1)), ("relu3", nn.ReLU()),
        ("conv4", nn.Conv2d(384, 384, 3, padding=1, groups=k)), ("relu4", nn.ReLU()),
        ("conv5", nn.Conv2d(384, 256, 3, padding=1, groups=k)), ("relu5", nn.ReLU()),
        ("pool5", Pool("max", 3, 2)), ("flatten", Flatten()),
    ]
    layers += [
        ("fc6", nn.Linear(flat_size(layers, a), 4096)), ("relu6", nn.ReLU()),
        ("drop6", nn.Identity()),  # dropout: the identity at inference
        ("fc7", nn.Linear(4096, 4096)), ("relu7", nn.ReLU()), ("drop7", nn.Identity()),
        ("fc8", nn.Linear(4096, classes)),
    ]
    return sequential(layers)


def cifar_net(a, with_norms):
    cin, classes = a["input_channels"], a["num_classes"]
    # pooling before the ReLU in the first stage, as in layers-18pct.cfg (models.cc)
    layers = [("conv1", nn.Conv2d(cin, 32, 5, padding=2)), ("pool1", Pool("max", 3, 2)),
              ("relu1", nn.ReLU())]
    if with_norms:
        layers.append(("rnorm1", WithinMapNorm(3, 5e-5, 0.75, 1.0)))
    layers += [("conv2", nn.Conv2d(32, 32, 5, padding=2)), ("relu2", nn.ReLU()),
               ("pool2", Pool("avg", 3, 2))]
    if with_norms:
        layers.append(("rnorm2", WithinMapNorm(3, 5e-5, 0.75, 1.0)))
    layers += [("conv3", nn.Conv2d(32, 64, 5, padding=2)), ("relu3", nn.ReLU()),
               ("pool3", Pool("avg", 3, 2)), ("flatten", Flatten())]
    features = flat_size(layers, a)
    if with_norms:
        layers.append(("fc10", nn.Linear(features, classes)))
    else:
        layers += [("fc64", nn.Linear(features, 64)), ("relu64", nn.ReLU()),
                   ("fc10", nn.Linear(64, classes))]
    return sequential(layers)


def sequential(layers):
    from collections import OrderedDict
    m = nn.Sequential(OrderedDict(layers))
    names = {}
    for name, mod in layers:
        if isinstance(mod, (nn.Conv2d, nn.Linear)):
            names[name + "/weight"] = name + ".weight"
            names[name + "/bias"] = name + ".bias"
    return m, names


class ConvBN(nn.Module):
    """conv (no bias) + batch norm (+ ReLU): Colonnade's ConvBn unit (zoo_imagenet.cc)."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int, pad: int, relu: bool,
                 eps: float = 1e-5):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel, stride=stride, padding=pad, bias=False)
        self.bn = nn.BatchNorm2d(cout, eps=eps)
        self.relu = relu

    def forward(self, x):
        y = self.bn(self.conv(x))
        return F.relu(y) if self.relu else y


class Block(nn.Module):
    """A residual block as BuildResNet (zoo_imagenet.cc) makes it: basic (3x3, 3x3) or
    bottleneck (1x1, 3x3 with the stride, 1x1 x4), a 1x1 projection when the shape changes,
    add, ReLU. ResNet-D (d_variant): the projection of a strided block averages 2x2/2 (ceil
    mode, in-image divisor) and then convolves 1x1 with stride 1."""

    def __init__(self, cin: int, width: int, stride: int, bottleneck: bool,
                 d_variant: bool = False):
        super().__init__()
        cout = width * 4 if bottleneck else width
        if bottleneck:
            self.body = nn.Sequential(ConvBN(cin, width, 1, 1, 0, True),
                                      ConvBN(width, width, 3, stride, 1, True),
                                      ConvBN(width, cout, 1, 1, 0, False))
        else:
            self.body = nn.Sequential(ConvBN(cin, width, 3, stride, 1, True),
                                      ConvBN(width, width, 3, 1, 1, False))
        self.has_proj = stride != 1 or cin != cout
        proj_stride = 1 if d_variant else stride
        self.proj_pool = (Pool("avg", 2, 2, 0, True) if d_variant and stride != 1
                          else nn.Identity())
        self.proj = (ConvBN(cin, cout, 1, proj_stride, 0, False) if self.has_proj
                     else nn.Identity())

    def forward(self, x):
        return F.relu(self.body(x) + self.proj(self.proj_pool(x)))


class ResNet(nn.Module):
    def __init__(self, stem: nn.Module, blocks: nn.Sequential, features: int, classes: int):
        super().__init__()
        self.stem = stem
        self.blocks = blocks
        self.avgpool = GlobalAvgPool()
        self.fc = nn.Linear(features, classes)

    def forward(self, x):
        return self.fc(self.avgpool(self.blocks(self.stem(x))))


RESNETS = {"resnet18": ([2, 2, 2, 2], False), "resnet34": ([3, 4, 6, 3], False),
           "resnet50": ([3, 4, 6, 3], True), "resnet152": ([3, 8, 36, 3], True),
           "resnet18-cifar": ([2, 2, 2, 2], False), "resnet18d": ([2, 2, 2, 2], False),
           "resnet50d": ([3, 4, 6, 3], True)}


def add_convbn(names, colonnade, key):
    """names[] of a ConvBN unit: Colonnade's <conv>/weight and <conv>_bn/* -> key.conv/.bn."""
    names[colonnade + "/weight"] = key + ".conv.weight"
    for p in ("gamma", "beta", "running_mean", "running_var"):
        torch_name = {"gamma": "weight", "beta": "bias"}.get(p, p)
        names[colonnade + "_bn/" + p] = key + ".bn." + torch_name


def resnet(a, model):
    counts, bottleneck = RESNETS[model]
    d_variant = model.endswith("d")
    cin = a["input_channels"]
    names = {}
    if model == "resnet18-cifar":
        stem = nn.Sequential(ConvBN(cin, 64, 3, 1, 1, True))
        add_convbn(names, "conv1", "stem.0")
    elif d_variant:  # ResNet-D's deep stem (zoo_imagenet.cc): 3x3/2 32, 3x3 32, 3x3 64, pool
        stem = nn.Sequential(ConvBN(cin, 32, 3, 2, 1, True), ConvBN(32, 32, 3, 1, 1, True),
                             ConvBN(32, 64, 3, 1, 1, True), Pool("max", 3, 2, 1, False))
        for i in range(3):
            add_convbn(names, "conv1_%d" % (i + 1), "stem.%d" % i)
    else:
        stem = nn.Sequential(ConvBN(cin, 64, 7, 2, 3, True), Pool("max", 3, 2, 1, False))
        add_convbn(names, "conv1", "stem.0")
    blocks = []
    c = 64
    for stage, n in enumerate(counts):
        width = 64 << stage
        for b in range(n):
            stride = 2 if (b == 0 and stage > 0) else 1
            blk = Block(c, width, stride, bottleneck, d_variant)
            i = len(blocks)
            pre = "layer%d_%d" % (stage + 1, b)
            for j in range(3 if bottleneck else 2):
                add_convbn(names, "%s_conv%d" % (pre, j + 1), "blocks.%d.body.%d" % (i, j))
            if blk.has_proj:
                add_convbn(names, pre + "_downsample", "blocks.%d.proj" % i)
            blocks.append(blk)
            c = width * (4 if bottleneck else 1)
    m = ResNet(stem, nn.Sequential(*blocks), c, a["num_classes"])
    names["fc/weight"] = "fc.weight"
    names["fc/bias"] = "fc.bias"
    return m, names


RESNET9_OUT_SCALE = 0.125  # FullyConnectedLayer::output_scale of resnet9's fc


class ResNet9(nn.Module):
    """David Page's ResNet-9 as BuildResNet9 (zoo_imagenet.cc) makes it: conv_bn units (3x3
    p1 conv without bias, batch norm, ReLU), max 2x2/2 pools in floor mode, residual layers 1
    and 3 (two conv_bn added to the pooled map, no ReLU after the sum), a max over the whole
    map, and fc whose product is scaled by 0.125 before its bias (Colonnade's bias is frozen
    at 0; Page's Linear has none)."""

    def __init__(self, cin: int, classes: int):
        super().__init__()
        self.prep = ConvBN(cin, 64, 3, 1, 1, True)
        self.layer1_conv = ConvBN(64, 128, 3, 1, 1, True)
        self.layer1_res1 = ConvBN(128, 128, 3, 1, 1, True)
        self.layer1_res2 = ConvBN(128, 128, 3, 1, 1, True)
        self.layer2_conv = ConvBN(128, 256, 3, 1, 1, True)
        self.layer3_conv = ConvBN(256, 512, 3, 1, 1, True)
        self.layer3_res1 = ConvBN(512, 512, 3, 1, 1, True)
        self.layer3_res2 = ConvBN(512, 512, 3, 1, 1, True)
        self.fc = nn.Linear(512, classes)
        self.out_scale = RESNET9_OUT_SCALE

    def forward(self, x):
        x = F.max_pool2d(self.layer1_conv(self.prep(x)), 2)
        x = x + self.layer1_res2(self.layer1_res1(x))
        x = F.max_pool2d(self.layer2_conv(x), 2)
        x = F.max_pool2d(self.layer3_conv(x), 2)
        x = x + self.layer3_res2(self.layer3_res1(x))
        x = torch.amax(x, dim=[2, 3])
        return F.linear(x, self.fc.weight) * self.out_scale + self.fc.bias


def resnet9(a):
    m = ResNet9(a["input_channels"], a["num_classes"])
    names = {"fc/weight": "fc.weight", "fc/bias": "fc.bias"}
    for unit in ("prep", "layer1_conv", "layer1_res1", "layer1_res2", "layer2_conv",
                 "layer3_conv", "layer3_res1", "layer3_res2"):
        add_convbn(names, unit, unit)
    return m, names


def build(a):
    model = a["model"]
    if model == "alexnet":
        return alexnet(a)
    if model in ("cifar10-18pct", "cifar10-80sec"):
        return cifar_net(a, model == "cifar10-18pct")
    if model == "resnet9":
        return resnet9(a)
    return resnet(a, model)


# ---- preprocessing inside the model (--dataset) -------------------------------------------

def bilinear_taps(out, box, origin):
    """core/bilinear.h's taps of `out` output pixels over a box of `box` source pixels that
    starts at `origin`: absolute source indices i0, i1 and i1's weight f (of 256), and the
    nearer tap, in integers exactly as the trainer computes them."""
    i0, i1, f, near = [], [], [], []
    for o in range(out):
        num = (2 * o + 1) * box - out
        s = 0 if num <= 0 else (num * 256) // (2 * out)
        a = s >> 8
        b = min(a + 1, box - 1)
        i0.append(origin + a)
        i1.append(origin + b)
        f.append(s & 255)
        near.append(origin + (b if (s & 255) >= 128 else a))
    return i0, i1, f, near


class WithPreprocessing(nn.Module):
    """images [N][H][W][C] (uint8 or float, 0..255) -> (x - mean) * scale, NCHW, centre crop,
    then the network: the trainer's evaluation pipeline (data/augment.cc). With `box` > 0
    (the checkpoint's evaluation crop fraction, data::EvalBoxOf) the centre box x box square
    is resized to crop x crop by core/bilinear.h's fixed-point bilinear, exact in float32 for
    integer pixels as in the trainer, and the mean is read at each output pixel's nearer tap."""

    def __init__(self, net: nn.Module, mean_hwc: torch.Tensor, scale: float, crop: int,
                 box: int = 0):
        super().__init__()
        self.net = net
        self.register_buffer("mean", mean_hwc)
        self.scale = scale
        self.crop = crop
        self.resize = box > 0
        h, w = mean_hwc.shape[0], mean_hwc.shape[1]
        r0, r1, fy, ny = bilinear_taps(crop, max(box, 1), (h - box) // 2)
        c0, c1, fx, nx = bilinear_taps(crop, max(box, 1), (w - box) // 2)
        for name, v in (("r0", r0), ("r1", r1), ("c0", c0), ("c1", c1)):
            self.register_buffer(name, torch.tensor(v, dtype=torch.long))
        self.register_buffer("fy", torch.tensor(fy, dtype=torch.float32).reshape(1, crop, 1, 1))
        self.register_buffer("fx", torch.tensor(fx, dtype=torch.float32).reshape(1, 1, crop, 1))
        near = mean_hwc[torch.tensor(ny, dtype=torch.long)][:, torch.tensor(nx, dtype=torch.long)]
        self.register_buffer("mean_near", near.contiguous())

    def forward(self, images):
        if self.resize:
            x = images.to(torch.float32)
            top, bottom = x.index_select(1, self.r0), x.index_select(1, self.r1)
            p00, p01 = top.index_select(2, self.c0), top.index_select(2, self.c1)
            p10, p11 = bottom.index_select(2, self.c0), bottom.index_select(2, self.c1)
            gx, gy = 256.0 - self.fx, 256.0 - self.fy
            v = ((p00 * gx + p01 * self.fx) * gy + (p10 * gx + p11 * self.fx) * self.fy) / 65536.0
            x = (v - self.mean_near) * self.scale
        else:
            x = (images.to(torch.float32) - self.mean) * self.scale
            h, w = x.shape[1], x.shape[2]
            y0 = (h - self.crop) // 2
            x0 = (w - self.crop) // 2
            x = x[:, y0:y0 + self.crop, x0:x0 + self.crop, :]
        return self.net(x.permute(0, 3, 1, 2).contiguous())


# ---- reading and exporting ----------------------------------------------------------------

def read_checkpoint(path):
    if not os.path.isfile(path):
        raise UsageError("%s: no such file" % path)
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise UsageError("%s: not an HDF5 file (%s)" % (path, e))
    with f:
        fmt = f.attrs.get("format", b"")
        fmt = fmt.decode() if isinstance(fmt, bytes) else str(fmt)
        if fmt != "colonnade.checkpoint" or "params" not in f:
            raise UsageError("%s: not a Colonnade checkpoint (attribute format is '%s'; "
                             "docs/CHECKPOINTS.md)" % (path, fmt))
        a = {}
        for k in ("model", "flags"):
            v = f.attrs[k]
            a[k] = v.decode() if isinstance(v, bytes) else str(v)
        for k in ("columns", "input_size", "num_classes", "input_channels", "step"):
            a[k] = int(f.attrs[k])
        tensors = {}
        for layer, g in f["params"].items():
            for p, d in g.items():
                tensors[layer + "/" + p] = torch.from_numpy(np.asarray(d[...], dtype=np.float32))
    return a, tensors


def flag_value(flags_text, name, default):
    """The last --name=value of the checkpoint's flags (one per line), or default."""
    v = default
    for line in flags_text.splitlines():
        if line.startswith("--" + name + "="):
            v = line.split("=", 1)[1]
    return v


def bool_flag(flags_text, name):
    """A boolean flag of the checkpoint's flags: the last of --name, --name=true|false|1|0,
    --noname."""
    v = False
    for line in flags_text.splitlines():
        if line == "--" + name:
            v = True
        elif line == "--no" + name:
            v = False
        elif line.startswith("--" + name + "="):
            v = line.split("=", 1)[1].lower() in ("true", "1", "yes", "t", "y")
    return v


def eval_box(flags_text, h, w):
    """data::EvalBoxOf for the checkpoint's flags (train_config.h's EvalCropFraction):
    --eval_crop_fraction, else 0.875 with --random_resized_crop, else 0 (no resize)."""
    fraction = float(flag_value(flags_text, "eval_crop_fraction", "0"))
    if not fraction > 0 and bool_flag(flags_text, "random_resized_crop"):
        fraction = 0.875
    if not fraction > 0:
        return 0
    x = fraction * min(h, w)  # std::lround: halves away from zero
    return int(math.floor(x + 0.5))


def load_params(m, names, tensors, a, path):
    state = m.state_dict()
    missing = [k for k in names if k not in tensors]
    extra = [k for k in tensors if k not in names]
    if missing or extra:
        raise UsageError("%s: tensors do not match model %s: missing %s, unexpected %s"
                         % (path, a["model"], missing[:5], extra[:5]))
    new_state = {}
    for cname, key in names.items():
        t = tensors[cname]
        if tuple(state[key].shape) != tuple(t.shape):
            raise UsageError("%s: /params/%s has shape %s, model %s (columns %d, input %d) "
                             "expects %s" % (path, cname, tuple(t.shape), a["model"],
                                             a["columns"], a["input_size"],
                                             tuple(state[key].shape)))
        new_state[key] = t
    for key in state:
        if key not in new_state:
            if key.endswith("num_batches_tracked"):
                new_state[key] = state[key]
            else:
                raise UsageError("internal: %s has no Colonnade tensor" % key)
    m.load_state_dict(new_state, strict=True)
    m.eval()


def export(path, out, onnx, dataset):
    a, tensors = read_checkpoint(path)
    model = a["model"]
    if model not in SUPPORTED:
        raise UsageError("%s: model %s cannot be exported; supported: %s"
                         % (path, model, ", ".join(SUPPORTED)))
    net, names = build(a)
    load_params(net, names, tensors, a, path)
    scale = INPUT_SCALE.get(model, DEFAULT_SCALE)
    s, cin = a["input_size"], a["input_channels"]
    info = {"format": "colonnade.export", "version": 1, "model": model, "columns": a["columns"],
            "input_size": s, "num_classes": a["num_classes"], "input_channels": cin,
            "step": a["step"], "checkpoint": os.path.abspath(path), "input_scale": scale,
            "output": "logits float32 [N][num_classes]"}
    if dataset:
        idx = os.path.join(dataset, "dataset.h5")
        if not os.path.isfile(idx):
            raise UsageError("--dataset %s: no dataset.h5 (a shard directory written by "
                             "make_shards)" % dataset)
        with h5py.File(idx, "r") as f:
            mean_image = np.asarray(f["mean_image"][...], dtype=np.float32)  # [H][W][C]
        h, w, c = mean_image.shape
        if c != cin or h < s or w < s:
            raise UsageError("--dataset %s: images %dx%dx%d cannot feed model input %dx%dx%d"
                             % (dataset, h, w, c, cin, s, s))
        mode = flag_value(a["flags"], "mean", "image")
        if mode == "channel":  # AugmentConfig::channel_mean: mean of the mean image, double
            ch = mean_image.astype(np.float64).reshape(-1, c).sum(0) / (h * w)
            mean_image = np.broadcast_to(ch.astype(np.float32), mean_image.shape).copy()
        elif mode == "none":
            mean_image = np.zeros_like(mean_image)
        box = eval_box(a["flags"], h, w)
        if box == s:
            box = 0  # the centre square is the crop itself: no resize, as in the trainer
        net = WithPreprocessing(net, torch.from_numpy(mean_image), scale, s, box)
        crop_text = ("resizes the centre %dx%d to %d (bilinear, docs/DATA.md)" % (box, box, s)
                     if box else "centre-crops to %d" % s)
        info.update({"input": "images uint8 or float [N][%d][%d][%d] (0..255, RGB, as "
                              "make_shards stores them); the model subtracts the mean (%s), "
                              "scales by %r and %s" % (h, w, c, mode, scale, crop_text),
                     "mean": mode, "dataset": os.path.abspath(dataset), "eval_box": box})
        example = torch.zeros(1, h, w, c, dtype=torch.uint8)
    else:
        info["input"] = ("float32 [N][%d][%d][%d] NCHW: (pixel - training mean image) * %r, "
                         "centre crop, as the trainer feeds its data blob" % (cin, s, s, scale))
        example = torch.zeros(1, cin, s, s)
    net.eval()
    scripted = torch.jit.script(net)
    scripted.save(out, _extra_files={"colonnade.json": json.dumps(info, indent=1)})
    print("wrote %s: %s at step %d, input %s" % (out, model, a["step"], info["input"]))
    if onnx:
        onnx_path = os.path.splitext(out)[0] + ".onnx"
        try:
            # The exporter traces: the input size is fixed, so the pooling branch and the
            # crop are constants, which its warnings say at length.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.onnx.export(net, (example,), onnx_path, opset_version=13,
                                  input_names=["input"], output_names=["logits"],
                                  dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})
            print("wrote %s" % onnx_path)
        except Exception as e:  # an older or newer torch without the exporter it needs
            print("export_torch.py: warning: no ONNX file: this PyTorch (%s) cannot export "
                  "it: %s" % (torch.__version__, str(e).splitlines()[0] if str(e) else
                              type(e).__name__), file=sys.stderr)
    return info


def main(argv):
    p = argparse.ArgumentParser(prog="export_torch.py",
                                description=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", help="Colonnade checkpoint (docs/CHECKPOINTS.md)")
    p.add_argument("out", metavar="OUT.pt", help="TorchScript file to write")
    p.add_argument("--onnx", action="store_true",
                   help="also write OUT.onnx (same inputs and outputs) where this torch can")
    p.add_argument("--dataset", metavar="DIR",
                   help="shard directory whose mean image (and the checkpoint's --mean mode, "
                        "the recipe's scale and the centre crop) go inside the model, which "
                        "then takes uint8 images [N][H][W][C]")
    a = p.parse_args(argv)
    try:
        export(a.checkpoint, a.out, a.onnx, a.dataset)
    except UsageError as e:
        print("export_torch.py: error: %s" % e, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    sys.exit(main(sys.argv[1:]))
