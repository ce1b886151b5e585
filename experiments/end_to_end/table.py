#!/usr/bin/env python3
"""Markdown tables from experiments/end_to_end/run.sh's e2e.jsonl files.

  table.py results/e2e.jsonl [more.jsonl ...]

1. trainer vs bench_train: each trainer run next to the bare step of the same model, batch
   and precision (target: >= 95%, data wait < 5%).
2. peak device memory, ours (memory plan on / off) / PyTorch's, same model, batch, FP32.
3. the largest ResNet-50 batch that trained, ours and PyTorch's.
"""
import json
import sys


def load(paths):
    recs = []
    for p in paths:
        for line in open(p):
            if line.strip():
                recs.append(json.loads(line))
    return recs


def step_table(recs):
    # The bare step of the same tree (commit), model, batch and precision.
    bench = {(r["commit"], r["model"], r["batch"], r["precision"]): r for r in recs
             if r["what"] == "bench_train" and r["impl"] == "colonnade"
             and not r.get("name", "").startswith(("mem_", "maxbatch_")) and "img_per_s" in r}
    print("| tree | run | model | batch | precision | trainer img/s | data wait "
          "| bench_train img/s | trainer / step |")
    print("|---|---|---|---:|---|---:|---:|---:|---:|")
    for r in recs:
        if r["what"] != "trainer":
            continue
        b = bench.get((r["commit"], r["model"], r["batch"], r["precision"]))
        head = f"| {r['commit'][:7]} | {r['name']} | {r['model']} | {r['batch']} | {r['precision']} |"
        if "img_per_s" not in r:
            print(f"{head} error: {r.get('error', '?')} | | | |")
            continue
        step = f"{b['img_per_s']:,.0f} | {r['img_per_s'] / b['img_per_s']:.1%}" if b else "— | —"
        print(f"{head} {r['img_per_s']:,.0f} | {r['data_wait_frac']:.1%} | {step} |")


def memory_table(recs):
    mem = {}
    for r in recs:
        name = r.get("name", "")
        if r["impl"] == "colonnade" and name.startswith("mem_") and "peak_mem_bytes" in r:
            mem[(r["model"], r["batch"], "plan" if name.endswith("_plan") else "noplan")] = r
        if r["impl"] == "pytorch" and "peak_mem_bytes" in r and r["precision"] == "fp32":
            mem[(r["model"], r["batch"], "pytorch")] = r
    keys = sorted({(m, b) for (m, b, _) in mem})
    if not keys:
        return
    print("| model | batch | ours, plan (GiB) | ours, no plan (GiB) | PyTorch (GiB) | plan / PyTorch "
          "| plan / no plan |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    gib = 2**30
    for m, b in keys:
        p, n, t = (mem.get((m, b, k)) for k in ("plan", "noplan", "pytorch"))
        cell = lambda r: f"{r['peak_mem_bytes'] / gib:.2f}" if r else "—"
        ratio = lambda a, c: f"{a['peak_mem_bytes'] / c['peak_mem_bytes']:.2f}" if a and c else "—"
        print(f"| {m} | {b} | {cell(p)} | {cell(n)} | {cell(t)} | {ratio(p, t)} | {ratio(p, n)} |")


def maxbatch_table(recs):
    ours = [r["batch"] for r in recs if r.get("name", "").startswith("maxbatch_")
            and "img_per_s" in r]
    peer = [r["batch"] for r in recs if r["impl"] == "pytorch" and r["model"] == "resnet50"
            and "img_per_s" in r and r["batch"] >= 256]
    if ours or peer:
        print(f"Largest ResNet-50 FP32 batch that trained (ladder 256, 512, 768, 1024, 1536, 2048): "
              f"ours {max(ours) if ours else 'none'}, PyTorch {max(peer) if peer else 'none'}.")


def main():
    recs = load(sys.argv[1:])
    step_table(recs)
    print()
    memory_table(recs)
    print()
    maxbatch_table(recs)


if __name__ == "__main__":
    main()
