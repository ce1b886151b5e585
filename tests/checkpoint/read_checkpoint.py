#!/usr/bin/python3
"""Reads a Colonnade checkpoint with h5py and checks it follows docs/CHECKPOINTS.md.

Run with Debian's /usr/bin/python3 (python3-h5py, numpy). Exits 77 (ctest SKIP) when h5py
or numpy is missing.

  read_checkpoint.py --writer=PATH/write_test_checkpoint   # writes AlexNet in a temp dir,
                                                            # checks it, deletes it
  read_checkpoint.py CKPT.h5 [--model=alexnet]              # checks an existing file

With --writer the AlexNet checkpoint (input 224, 1000 classes, about 490 MB with
velocities) is written to a temporary directory together with one forward pass's
activations around fc6, and removed afterwards.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import h5py
    import numpy as np
except ImportError as e:  # pragma: no cover
    # A skip only where nothing requires the check (CI sets COLONNADE_NO_SKIP=1).
    required = os.environ.get("COLONNADE_NO_SKIP") == "1"
    print(f"{'FAIL' if required else 'SKIP'}: {e} (run with Debian's /usr/bin/python3 and python3-h5py)")
    sys.exit(1 if required else 77)

FAILURES = []


def check(cond, message):
    if not cond:
        FAILURES.append(message)
        print("FAIL:", message)


def text(attr):
    # Variable-length string attributes come back as str; the fixed-length ones of
    # checkpoints written before issue 31 as bytes (see docs/CHECKPOINTS.md).
    return attr.decode("utf-8") if isinstance(attr, (bytes, np.bytes_)) else str(attr)


# The canonical AlexNet (Krizhevsky et al. 2012) with two columns, input 224, 1000 classes.
ALEXNET = {
    "conv1/weight": (96, 3, 11, 11), "conv1/bias": (96,),
    "conv2/weight": (256, 48, 5, 5), "conv2/bias": (256,),
    "conv3/weight": (384, 256, 3, 3), "conv3/bias": (384,),
    "conv4/weight": (384, 192, 3, 3), "conv4/bias": (384,),
    "conv5/weight": (256, 192, 3, 3), "conv5/bias": (256,),
    "fc6/weight": (4096, 9216), "fc6/bias": (4096,),
    "fc7/weight": (4096, 4096), "fc7/bias": (4096,),
    "fc8/weight": (1000, 4096), "fc8/bias": (1000,),
}
ALEXNET_PARAMS = 60965224  # the figure in the model zoo's description

INT_ATTRS = ["format_version", "step", "epoch", "cursor_epoch", "cursor_position", "columns",
             "input_size", "num_classes", "input_channels", "num_params", "has_optimizer_state"]
STR_ATTRS = ["format", "rng", "model", "flags"]


def check_layout(path, model=None):
    """Checks every rule of the layout; returns {name: value array} of /params."""
    params = {}
    with h5py.File(path, "r") as f:
        a = f.attrs
        for k in INT_ATTRS + STR_ATTRS + ["seed"]:
            check(k in a, f"root attribute {k} is missing")
        if FAILURES:
            return params
        check(text(a["format"]) == "colonnade.checkpoint", f"format is {a['format']!r}")
        check(int(a["format_version"]) == 1, f"format_version is {a['format_version']}")
        for k in INT_ATTRS:
            check(np.issubdtype(a[k].dtype, np.integer) and int(a[k]) >= 0, f"{k} is not a non-negative integer")
        check(a["seed"].dtype == np.uint64, f"seed has dtype {a['seed'].dtype}, expected uint64")
        for k in STR_ATTRS:
            # What user scripts compare: f.attrs["model"] == "alexnet" must hold as written.
            check(isinstance(a[k], str), f"{k} is {type(a[k]).__name__}, not str")
        check(a["format"] == "colonnade.checkpoint", "format == 'colonnade.checkpoint' is False")
        # The strings' checksum (docs/CHECKPOINTS.md): a CRC-32, and (address, bytes, CRC-32)
        # of each global heap collection.
        check("string_attrs_crc32" in a and 0 <= int(a["string_attrs_crc32"]) < 2**32,
              "string_attrs_crc32 is missing or not a CRC-32")
        heaps = np.atleast_1d(a.get("string_heaps_crc32", np.zeros(0, np.int64)))
        check(np.issubdtype(heaps.dtype, np.integer) and heaps.size >= 3 and heaps.size % 3 == 0,
              f"string_heaps_crc32 is {heaps!r}, not (address, bytes, crc32) triples")
        if model is not None:
            check(text(a["model"]) == model, f"model is {text(a['model'])}, expected {model}")
        base = os.path.basename(path)
        if base.startswith("ckpt-") and base.endswith(".h5"):
            check(base == "ckpt-%09d.h5" % int(a["step"]), f"file name {base} does not match step {int(a['step'])}")
        check(set(f.keys()) <= {"params", "optimizer"}, f"unexpected root objects {sorted(f.keys())}")
        has_opt = int(a["has_optimizer_state"]) == 1
        check(("optimizer" in f) == has_opt, "/optimizer present iff has_optimizer_state")

        def dataset_rules(name, d):
            check(isinstance(d, h5py.Dataset), f"{name} is not a dataset")
            check(d.dtype == np.dtype("<f4"), f"{name} has dtype {d.dtype}, expected little-endian float32")
            check(d.chunks is not None and d.fletcher32, f"{name} lacks a chunked layout with Fletcher-32")
            check(len(d.shape) >= 1 and all(n >= 1 for n in d.shape), f"{name} has shape {d.shape}")

        learnable = {}
        for layer, group in f["params"].items():
            check(isinstance(group, h5py.Group), f"/params/{layer} is not a group")
            for pname, d in group.items():
                full = f"/params/{layer}/{pname}"
                dataset_rules(full, d)
                check(int(d.attrs.get("learnable", -1)) in (0, 1), f"{full} lacks attribute learnable")
                s = d.shape
                kind = layer.rstrip("0123456789")
                if pname == "weight" and kind == "conv":
                    check(len(s) == 4, f"{full}: conv weight must be [out][in/groups][kh][kw], got {s}")
                elif pname == "weight" and kind == "fc":
                    check(len(s) == 2, f"{full}: fc weight must be [out][in], got {s}")
                elif pname in ("bias", "gamma", "beta", "running_mean", "running_var"):
                    check(len(s) == 1, f"{full}: {pname} must be [out], got {s}")
                if pname == "bias" and "weight" in group:
                    check(s[0] == group["weight"].shape[0], f"{full}: bias length != weight rows")
                if pname in ("running_mean", "running_var"):
                    check(int(d.attrs["learnable"]) == 0, f"{full} must not be learnable")
                params[f"{layer}/{pname}"] = d[...]
                learnable[f"{layer}/{pname}"] = int(d.attrs["learnable"]) == 1
        check(len(params) == int(a["num_params"]), f"{len(params)} tensors but num_params {int(a['num_params'])}")
        if has_opt:
            for name, is_learnable in learnable.items():
                v = f"/optimizer/{name}/velocity"
                if is_learnable:
                    check(v in f, f"{v} is missing")
                    if v in f:
                        dataset_rules(v, f[v])
                        check(f[v].shape == params[name].shape, f"{v} shape differs from /params/{name}")
                else:
                    check(f"/optimizer/{name}" not in f, f"/optimizer/{name} for a non-learnable tensor")
    return params


def check_alexnet(path, activations):
    params = check_layout(path, model="alexnet")
    with h5py.File(path, "r") as f:
        check(f["params/conv1/weight"].shape == (96, 3, 11, 11),
              f"/params/conv1/weight has shape {f['params/conv1/weight'].shape}, expected (96, 3, 11, 11)")
        for name, shape in ALEXNET.items():
            check(name in params and params[name].shape == shape,
                  f"/params/{name} has shape {params[name].shape if name in params else None}, expected {shape}")
        check(set(params) == set(ALEXNET), f"unexpected tensors {sorted(set(params) ^ set(ALEXNET))}")
        total = sum(v.size for v in params.values())
        check(total == ALEXNET_PARAMS, f"{total} parameters, expected {ALEXNET_PARAMS}")
        check(int(f.attrs["columns"]) == 2 and int(f.attrs["num_classes"]) == 1000 and
              int(f.attrs["input_size"]) == 224, "columns / num_classes / input_size attributes")
        # The writer sets velocity = value / 2: each velocity sits under its own parameter.
        for name in ("conv1/weight", "fc8/bias"):
            v = f[f"optimizer/{name}/velocity"][...]
            check(np.array_equal(v, params[name] * np.float32(0.5)), f"velocity of {name} is not value/2")
        # fc6 biases start at 0.1 (Caffe's replication init, the default; docs/MODELS.md).
        check(np.all(params["fc6/bias"] == np.float32(0.1)), "fc6 biases are initialised to 0.1")
    if activations:
        with h5py.File(activations, "r") as a:
            x = a["fc_input"][...]   # pool5, CHWN: (256, 6, 6, N)
            y = a["fc_output"][...]  # relu(fc6), CHWN: (4096, 1, 1, N)
        n = x.shape[3]
        # What docs/CHECKPOINTS.md says: a flattened fc input is in (C, H, W) order, the
        # order of torch's x.flatten(1) on NCHW. NCHW here is CHWN transposed.
        nchw = x.transpose(3, 0, 1, 2)
        flat = nchw.reshape(n, -1)
        w = params["fc6/weight"].astype(np.float64)
        b = params["fc6/bias"].astype(np.float64)
        want = np.maximum(flat @ w.T + b, 0.0)
        got = y.reshape(4096, n).T
        err = np.linalg.norm(got - want) / np.linalg.norm(want)
        check(err < 1e-5, f"fc6 from the (C,H,W)-flattened pool5 differs from Colonnade's: rel err {err:.3g}")
        # The negative control: another flattening order (H, W, C) must not match, or the
        # check above proves nothing.
        wrong = np.maximum(nchw.transpose(0, 2, 3, 1).reshape(n, -1) @ w.T + b, 0.0)
        err_wrong = np.linalg.norm(got - wrong) / np.linalg.norm(wrong)
        check(err_wrong > 1e-2, f"(H,W,C) flattening also matches (rel err {err_wrong:.3g}): the check is blind")
        print(f"fc6 check: (C,H,W) flattening rel err {err:.2e}, (H,W,C) flattening {err_wrong:.2e}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", nargs="?")
    p.add_argument("--writer", help="path of write_test_checkpoint: write AlexNet and check it")
    p.add_argument("--model", help="expected model name")
    args = p.parse_args()
    if args.writer:
        tmp = tempfile.mkdtemp(prefix="colonnade-ckpt-py-")
        try:
            act = os.path.join(tmp, "activations.h5")
            out = subprocess.run([args.writer, f"--dir={tmp}", "--model=alexnet", "--input_size=224",
                                  "--num_classes=1000", "--step=100", f"--activations={act}"],
                                 check=True, stdout=subprocess.PIPE, text=True)
            path = out.stdout.strip().splitlines()[-1]
            check(os.path.basename(path) == "ckpt-000000100.h5", f"writer wrote {path}")
            check_alexnet(path, act)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    elif args.checkpoint:
        params = check_layout(args.checkpoint, model=args.model)
        if args.model == "alexnet":
            check_alexnet(args.checkpoint, None)
        print(f"{len(params)} tensors")
    else:
        p.error("give a checkpoint or --writer")
    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed")
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
