#!/usr/bin/env python3
"""Prints the zoo table of README.md from the raw records in h200/:
zoo_ours.jsonl (bench_train --json) and zoo_torchvision.jsonl (torchvision_step.py --json).
The newest record of each (model, batch[, mode]) wins. Memory in GiB (2^30 bytes) for both.

    /usr/bin/python3 experiments/zoo/table.py [DIR]
"""
import json
import os
import sys

d = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "h200")
ours, peer, order = {}, {}, []
for line in open(os.path.join(d, "zoo_ours.jsonl"), encoding="utf-8"):
    r = json.loads(line)
    if r["model"] not in ours:
        order.append(r["model"])
    ours[r["model"]] = r
for line in open(os.path.join(d, "zoo_torchvision.jsonl"), encoding="utf-8"):
    r = json.loads(line)
    peer[(r["model"], r["mode"])] = r

print("| model | Colonnade FP32 img/s | torchvision FP32 img/s | torchvision TF32 img/s "
      "| ours / torch FP32 | peak memory ours / torch FP32 (GiB) |")
print("|---|---:|---:|---:|---:|---:|")
for m in order:
    o = ours[m]
    f32, t32 = peer.get((m, "fp32")), peer.get((m, "tf32"))
    cell = lambda r: f"{r['images_per_sec']:.0f}" if r else "—"
    ratio = f"{o['img_per_s'] / f32['images_per_sec']:.2f}" if f32 else "—"
    mem = f"{o['peak_in_use_bytes'] / 2**30:.1f} / " + (
        f"{f32['peak_mem_mib'] / 1024:.1f}" if f32 else "—")
    print(f"| {m} | {o['img_per_s']:.0f} | {cell(f32)} | {cell(t32)} | {ratio} | {mem} |")
