#!/usr/bin/env python3
"""One model of tests/scripts/export_torch_test.sh: exports CHECKPOINT with
scripts/export_torch.py and compares the exported model's logits on the images of DATASET
with the trainer's `--mode=predict --predictions=PREDICTIONS` on the same images.

  export_compare.py CHECKPOINT DATASET PREDICTIONS WORKDIR [--plain] [--onnx]
                    [--perturb NAME ...]

Default: the model is exported with --dataset DATASET (preprocessing inside) and fed the
shards' raw uint8 images. --plain: exported without it and fed (pixel - mean) * scale,
centre-cropped, NCHW, computed here in numpy as data/augment.cc does. Passes when
max|exported - trainer| / max|trainer| <= 1e-4 (TOLERANCE). --onnx also writes the ONNX file
and checks it with onnx.checker. Each --perturb NAME rebuilds the model with one semantic
changed and requires the comparison to FAIL for it (the test must see a drift):
lrn_k (LRN k 2 -> 1), lrn_columns (LRN window across columns), rnorm_alpha (rnorm's alpha
not divided by size^2), avg_divisor (average pooling divides by the whole window),
stem_pool_ceil (ResNet's stem max-pool in ceil mode), resnet9_out_scale (ResNet-9's fc
without its 0.125), d_shortcut_stride (ResNet-D's shortcut as a 1x1/2 conv, no average).
Exit 0 pass, 1 fail, 77 skip (no torch; a failure when COLONNADE_NO_SKIP=1).
"""
import importlib.util
import os
import sys

TOLERANCE = 1e-4
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from skip_policy import skip_or_fail  # noqa: E402  (tests/skip_policy.py)


try:
    import h5py
    import numpy as np
    import torch
except ImportError as e:
    skip_or_fail("%s (Debian: python3-torch python3-h5py)" % e)

spec = importlib.util.spec_from_file_location("export_torch",
                                              os.path.join(ROOT, "scripts", "export_torch.py"))
et = importlib.util.module_from_spec(spec)
spec.loader.exec_module(et)


def shard_images(dataset):
    """The dataset's uint8 images [n][H][W][C] in dataset order (raw shards)."""
    with h5py.File(os.path.join(dataset, "dataset.h5"), "r") as f:
        files = [s.decode() if isinstance(s, bytes) else s for s in f["shard_files"][...]]
        mean = np.asarray(f["mean_image"][...], dtype=np.float32)
        assert (f.attrs["encoding"].decode() if isinstance(f.attrs["encoding"], bytes)
                else f.attrs["encoding"]) == "raw", "the test writes raw shards"
    imgs = []
    for s in files:
        with h5py.File(os.path.join(dataset, s), "r") as f:
            imgs.append(f["images"][...])
    return np.concatenate(imgs), mean


def preprocess(images, mean, a):
    """data/augment.cc at evaluation: (pixel - mean) * scale in float32, centre crop, NCHW."""
    mode = et.flag_value(a["flags"], "mean", "image")
    if mode == "channel":
        h, w, c = mean.shape
        mean = np.broadcast_to((mean.astype(np.float64).reshape(-1, c).sum(0) / (h * w))
                               .astype(np.float32), mean.shape)
    elif mode == "none":
        mean = np.zeros_like(mean)
    scale = np.float32(et.INPUT_SCALE.get(a["model"], et.DEFAULT_SCALE))
    x = (images.astype(np.float32) - mean) * scale
    s = a["input_size"]
    y0, x0 = (x.shape[1] - s) // 2, (x.shape[2] - s) // 2
    x = x[:, y0:y0 + s, x0:x0 + s, :]
    return torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))


def rel_diff(out, ref):
    return float(np.abs(out - ref).max() / max(np.abs(ref).max(), 1e-30))


def perturbed_logits(name, ckpt, dataset, images, plain_input):
    """Logits of the model rebuilt with one semantic changed (not scripted)."""
    saved = {}

    def patch(attr, value):
        saved[attr] = getattr(et, attr)
        setattr(et, attr, value)

    orig_lrn, orig_norm, orig_pool = et.CrossChannelLRN, et.WithinMapNorm, et.Pool
    if name == "lrn_k":
        patch("CrossChannelLRN", lambda size, alpha, beta, k, groups:
              orig_lrn(size, alpha, beta, 1.0, groups))
    elif name == "lrn_columns":
        patch("CrossChannelLRN", lambda size, alpha, beta, k, groups:
              orig_lrn(size, alpha, beta, k, 1))
    elif name == "rnorm_alpha":
        patch("WithinMapNorm", lambda size, alpha, beta, k:
              orig_norm(size, alpha * size * size, beta, k))
    elif name == "avg_divisor":
        class WholeWindowAvg(orig_pool):
            def forward(self, x):
                if self.is_max:
                    return super().forward(x)
                return torch.nn.functional.avg_pool2d(x, self.size, self.stride, self.pad,
                                                      ceil_mode=True,
                                                      divisor_override=self.size * self.size)
        patch("Pool", WholeWindowAvg)
    elif name == "resnet9_out_scale":  # ResNet-9's classifier without its x0.125
        patch("RESNET9_OUT_SCALE", 1.0)
    elif name == "d_shortcut_stride":  # ResNet-D's shortcut as plain ResNet's 1x1/2 conv
        orig_block = et.Block
        patch("Block", lambda cin, width, stride, bottleneck, d_variant=False:
              orig_block(cin, width, stride, bottleneck, False))
    elif name == "stem_pool_ceil":
        patch("Pool", lambda kind, size, stride, pad=0, ceil_mode=True:
              orig_pool(kind, size, stride, pad, True))
    else:
        raise SystemExit("unknown --perturb %s" % name)
    try:
        a, tensors = et.read_checkpoint(ckpt)
        net, names = et.build(a)
        et.load_params(net, names, tensors, a, ckpt)
    finally:
        for k, v in saved.items():
            setattr(et, k, v)
    with torch.no_grad():
        return net(plain_input).numpy()


def main(argv):
    import argparse
    p = argparse.ArgumentParser()
    p.add_argument("checkpoint")
    p.add_argument("dataset")
    p.add_argument("predictions")
    p.add_argument("workdir")
    p.add_argument("--plain", action="store_true")
    p.add_argument("--onnx", action="store_true")
    p.add_argument("--perturb", action="append", default=[])
    a = p.parse_args(argv)
    torch.set_grad_enabled(False)
    out = os.path.join(a.workdir, os.path.basename(a.checkpoint) + ".pt")
    info = et.export(a.checkpoint, out, a.onnx, None if a.plain else a.dataset)
    model = info["model"]
    m = torch.jit.load(out)
    images, mean = shard_images(a.dataset)
    ck, _ = et.read_checkpoint(a.checkpoint)
    plain_input = preprocess(images, mean, ck)
    got = m(plain_input if a.plain else torch.from_numpy(images)).numpy()
    with h5py.File(a.predictions, "r") as f:
        ref = f["logits"][...]
    if not np.isfinite(ref).all():
        print("FAIL: %s: the trainer's own logits are not finite (%s): nothing to compare"
              % (model, a.predictions))
        return 1
    if got.shape != ref.shape:
        print("FAIL: %s: exported logits %s, trainer's %s" % (model, got.shape, ref.shape))
        return 1
    d = rel_diff(got, ref)
    mode = "plain NCHW input" if a.plain else "uint8 images, preprocessing inside"
    print("%s (%s): %d images, max |exported - trainer| / max |trainer| = %.3g (limit %g)"
          % (model, mode, got.shape[0], d, TOLERANCE))
    status = 0
    if not d <= TOLERANCE:
        print("FAIL: %s: the exported model drifted from the trainer" % model)
        status = 1
    if a.onnx:
        onnx_path = os.path.splitext(out)[0] + ".onnx"
        if not os.path.isfile(onnx_path):
            print("FAIL: %s: no ONNX file written" % model)
            status = 1
        else:
            try:
                import onnx
            except ImportError:
                skip_or_fail("no onnx module to check %s (Debian: python3-onnx)" % onnx_path)
            onnx.checker.check_model(onnx.load(onnx_path))
            print("%s: %s passes onnx.checker" % (model, os.path.basename(onnx_path)))
    for name in a.perturb:
        dp = rel_diff(perturbed_logits(name, a.checkpoint, a.dataset, images, plain_input), ref)
        seen = dp > TOLERANCE
        print("%s with %s changed: %.3g -> %s" % (model, name, dp,
                                                  "detected" if seen else "NOT DETECTED"))
        if not seen:
            print("FAIL: %s: the comparison does not see %s changed" % (model, name))
            status = 1
    for f in os.listdir(a.workdir):  # exported files are large (AlexNet 93 MB)
        if f.startswith(os.path.basename(a.checkpoint)):
            os.remove(os.path.join(a.workdir, f))
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
