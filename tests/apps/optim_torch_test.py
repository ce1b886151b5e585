#!/usr/bin/env python3
"""Colonnade's optimisation options against independent references (issue 35).

  optim_torch_test.py TOOL      (TOOL: the build's optim_reference_tool)

* Nesterov and plain momentum SGD with weight decay: torch.optim.SGD(nesterov=True|False)
  at a constant lr, its buffer b and Colonnade's velocity v related by v = -lr * b.
* Label smoothing: torch.nn.CrossEntropyLoss(label_smoothing=eps), per-image loss and the
  gradient of the mean loss.
* EMA of the weights: a hand EMA, ema = d * ema + (1 - d) * w after each step, from w0 (as
  torchvision's ExponentialMovingAverage).
* LARS: numpy, written from You et al. 2017 and MLPerf's reference (TensorFlow's
  LARSOptimizer): trust = eta ||w|| / (||g|| + wd ||w||), m = mu m + lr trust (g + wd w),
  w -= m; biases take neither the trust ratio nor weight decay.
Exit 0 when everything agrees within 2e-6 relative (float32 against float32/float64).
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

TOOL = sys.argv[1]
TOL = 2e-6
failures = []


def rel(a, b):
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def check(name, got, want, tol=TOL):
    r = rel(got, want)
    ok = r <= tol
    print(f"{'ok  ' if ok else 'FAIL'} {name}: relative difference {r:.3g} (tolerance {tol:g})")
    if not ok:
        failures.append(name)


def run_tool(args, inputs, n_out):
    with tempfile.TemporaryDirectory() as d:
        fin, fout = os.path.join(d, "in.bin"), os.path.join(d, "out.bin")
        np.concatenate([np.asarray(x, np.float32).ravel() for x in inputs]).tofile(fin)
        subprocess.run([TOOL, args[0], fin, fout] + [str(a) for a in args[1:]], check=True)
        out = np.fromfile(fout, np.float32)
    assert out.size == n_out, (out.size, n_out)
    return out


def colonnade_sgd(w0, grads, lr, mom, wd, nesterov, lars=False, eta=0.001, is_weight=True,
                  ema=0.0):
    steps, n = grads.shape
    out = run_tool(["sgd", steps, n, lr, mom, wd, int(nesterov), int(lars), eta, int(is_weight),
                    ema], [w0, grads], 3 * n)
    return out[:n], out[n:2 * n], out[2 * n:]


rng = np.random.default_rng(35)
n, steps = 257, 6
w0 = rng.normal(0, 0.5, n).astype(np.float32)
grads = rng.normal(0, 1.0, (steps, n)).astype(np.float32)
lr, mom, wd = 0.05, 0.9, 5e-3

# ---- momentum SGD, plain and Nesterov, against torch.optim.SGD ----------------------------
for nesterov in (False, True):
    w = torch.tensor(w0, requires_grad=True)
    opt = torch.optim.SGD([w], lr=lr, momentum=mom, weight_decay=wd, nesterov=nesterov)
    for g in grads:
        w.grad = torch.tensor(g)
        opt.step()
    buf = opt.state[w]["momentum_buffer"].numpy()
    cw, cv, _ = colonnade_sgd(w0, grads, lr, mom, wd, nesterov)
    kind = "nesterov" if nesterov else "momentum"
    check(f"{kind} SGD weights vs torch", cw, w.detach().numpy())
    check(f"{kind} SGD velocity vs -lr x torch buffer", cv, -lr * buf)

# ---- EMA of the weights: a hand EMA over the torch trajectory -----------------------------
decay = 0.8
w = torch.tensor(w0, requires_grad=True)
opt = torch.optim.SGD([w], lr=lr, momentum=mom, weight_decay=wd, nesterov=True)
shadow = torch.tensor(w0).double()
for g in grads:
    w.grad = torch.tensor(g)
    opt.step()
    shadow = decay * shadow + (1 - decay) * w.detach().double()
_, _, cema = colonnade_sgd(w0, grads, lr, mom, wd, True, ema=decay)
check("EMA of the weights vs a hand EMA", cema, shadow.numpy())


# ---- LARS from the paper (numpy, float64) --------------------------------------------------
def lars_reference(w0, grads, lr, mom, wd, eta, is_weight):
    w = w0.astype(np.float64)
    m = np.zeros_like(w)
    for g in grads.astype(np.float64):
        if is_weight:
            wn, gn = np.linalg.norm(w), np.linalg.norm(g)
            trust = eta * wn / (gn + wd * wn) if wn > 0 and gn > 0 else 1.0
            d = g + wd * w
        else:  # biases and batch-norm parameters: excluded from LARS and weight decay
            trust, d = 1.0, g
        m = mom * m + lr * trust * d
        w = w - m
    return w, -m


eta = 0.02
for is_weight in (True, False):
    rw, rv = lars_reference(w0, grads, 2.0, mom, wd, eta, is_weight)
    cw, cv, _ = colonnade_sgd(w0, grads, 2.0, mom, wd, False, lars=True, eta=eta,
                              is_weight=is_weight)
    what = "weight" if is_weight else "bias (excluded)"
    check(f"LARS {what} vs the paper's update", cw, rw, 1e-5)
    check(f"LARS {what} velocity", cv, rv, 1e-5)

# ---- label smoothing against torch.nn.CrossEntropyLoss -------------------------------------
for k, nimg, eps in ((10, 33, 0.1), (1000, 7, 0.2), (10, 5, 0.0)):
    logits = rng.normal(0, 3.0, (nimg, k)).astype(np.float32)
    labels = rng.integers(0, k, nimg)
    out = run_tool(["xent", k, nimg, eps], [logits.T.copy(), labels.astype(np.float32)],
                   nimg + k * nimg)
    closs, cgrad = out[:nimg], out[nimg:].reshape(k, nimg).T
    z = torch.tensor(logits.astype(np.float64), requires_grad=True)
    per = torch.nn.CrossEntropyLoss(label_smoothing=eps, reduction="none")(z,
                                                                          torch.tensor(labels))
    per.mean().backward()
    check(f"label smoothing {eps} loss, K={k}", closs, per.detach().numpy())
    check(f"label smoothing {eps} gradient, K={k}", cgrad, z.grad.numpy())

if failures:
    print("FAILED:", ", ".join(failures))
    sys.exit(1)
print("all optimiser references agree")
