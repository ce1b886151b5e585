#!/usr/bin/python3
"""Per-kernel totals of the last training step in an ncu_step.sh CSV (gzip).

  kernel_table.py resnet50_b128_ncu.csv.gz [--list N]

The step's kernels run from the one after the last-but-one optimiser run (SgdKernel, or
SgdManyKernel from 0a2b759) to the last optimiser kernel. Prints, by total time, each kernel
(template arguments kept: they name the wgmma tile), its launches and share; --list N also
the step's first N kernels in order with grid and time.
"""
import argparse, collections, csv, gzip, re, sys

def load(path):
    lines = [l for l in gzip.open(path, "rt") if l.startswith('"')]
    rows = list(csv.reader(lines))
    h = rows[0]
    name, grid, val = h.index("Kernel Name"), h.index("Grid Size"), h.index("Metric Value")
    return [(r[name], r[grid], float(r[val].replace(",", ""))) for r in rows[1:] if r[0] != "ID"]

def short(n):
    n = re.sub(r"colonnade::(cuda::)?(conv::)?(<unnamed>::)?", "", n)
    n = re.sub(r"conv::<unnamed>::", "", n)
    n = re.sub(r"\((colonnade|const|conv::|BnParams|Binary|Relu|ReduceSplit|ArrangeParams|Gap|Pool|Sgd|Results|Xent|Sum|Convert|Fill).*$", "", n)
    return n.replace("void ", "")[:90]

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--list", type=int, default=0)
    a = ap.parse_args()
    data = load(a.csv)
    sgd = [i for i, d in enumerate(data) if re.search(r"Sgd(Many)?Kernel", d[0])]
    runs = []
    for i in sgd:
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    if len(runs) < 2:
        sys.exit("fewer than two optimiser steps in the profile")
    step = data[runs[-2][-1] + 1: runs[-1][-1] + 1]
    total = sum(d[2] for d in step)
    by = collections.defaultdict(float)
    n = collections.Counter()
    for d in step:
        by[short(d[0])] += d[2]
        n[short(d[0])] += 1
    print(f"{len(step)} kernels, {total / 1e6:.2f} ms (ncu: serialised, caches flushed)")
    for k, v in sorted(by.items(), key=lambda x: -x[1]):
        print(f"{v / 1e6:8.3f} ms {100 * v / total:5.1f}% {n[k]:5d}  {k}")
    for i, d in enumerate(step[: a.list]):
        print(f"{i:4d} {d[2] / 1e3:8.1f} us {d[1]:>16s} {short(d[0])}")

if __name__ == "__main__":
    main()
