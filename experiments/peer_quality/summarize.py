#!/usr/bin/env python3
"""Records of the peer comparison (experiments/peer_quality/README.md), standard library only
so that it runs with any python3:

  summarize.py colonnade METRICS OUT --seed S --commit C [--crop N]
      the trainer's --metrics_file (train and eval records) -> OUT in this experiment's
      format: one "epoch" record per train record with the held-out error of the eval
      record of the same step, then a "final" record; every record names impl, model,
      seed and commit.
  summarize.py run OUT --impl I --seed S --commit C --wall SEC --exit RC --schedule SCHED
      appends the "run" record (the process wall time measured by run.sh, its exit status
      and whether it ran alone on the GPU) to OUT.
  summarize.py table RESULTS_DIR
      prints a markdown table of every RESULTS_DIR/*.jsonl and the per-impl means.
"""
import argparse
import glob
import json
import os
import sys


def read_jsonl(path):
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    print(f"summarize.py: {path}: skipping a line that is not JSON", file=sys.stderr)
    return out


def convert_colonnade(a):
    recs = read_jsonl(a.metrics) if os.path.exists(a.metrics) else []
    evals = {r["step"]: r for r in recs if r.get("kind") == "eval"}
    base = {"impl": "colonnade", "model": "resnet18", "seed": a.seed, "commit": a.commit}
    out, last_eval, last_train = [], None, None
    images = seconds = 0.0
    for r in recs:
        if r.get("kind") != "train":
            continue
        e = {**base, "kind": "epoch", "step": r["step"], "epoch": r["epoch"], "lr": r["lr"],
             "train_loss": r["loss"], "train_top1_error": r["top1_error"],
             "wall_sec": r["elapsed_sec"], "images_per_sec": r["images_per_sec"]}
        ev = evals.get(r["step"])
        if ev:
            e.update({"heldout_loss": ev["loss"], "heldout_top1_error": ev["top1_error"],
                      "heldout_top5_error": ev["top5_error"], "heldout_images": ev["images"]})
            last_eval = ev
        out.append(e)
        # img/s of an interval leaves its evaluation out; images over summed seconds.
        n = r["step"] - (last_train["step"] if last_train else 0)
        images += n
        seconds += n / max(r["images_per_sec"], 1e-9)
        last_train = r
    final = {**base, "kind": "final", "steps_done": last_train["step"] if last_train else 0,
             "train_wall_sec": last_train["elapsed_sec"] if last_train else None,
             "images_per_sec_steps": round(images / seconds, 1) if seconds else None}
    if last_eval:
        final.update({"heldout_top1_error": last_eval["top1_error"],
                      "heldout_top5_error": last_eval["top5_error"],
                      "heldout_loss": last_eval["loss"], "heldout_at_step": last_eval["step"]})
    out.append(final)
    with open(a.out, "w") as f:
        for r in out:
            f.write(json.dumps(r) + "\n")


def append_run(a):
    with open(a.out, "a") as f:
        f.write(json.dumps({"impl": a.impl, "model": "resnet18", "seed": a.seed,
                            "commit": a.commit, "kind": "run", "process_wall_sec": a.wall,
                            "exit": a.exit, "schedule": a.schedule}) + "\n")


def fmt(v, spec):
    return format(v, spec) if isinstance(v, (int, float)) else "—"


def table(a):
    rows = []
    for path in sorted(glob.glob(os.path.join(a.results, "*.jsonl"))):
        recs = read_jsonl(path)
        run = next((r for r in reversed(recs) if r.get("kind") == "run"), {})
        epochs = [r for r in recs if r.get("kind") == "epoch"]
        if not epochs:
            continue
        # A run killed before its final record: its last evaluated epoch stands in.
        final = next((r for r in reversed(recs) if r.get("kind") == "final"), None) or next(
            (r for r in reversed(epochs) if "heldout_top1_error" in r), epochs[-1])
        # img/s from the steps (evaluations left out): our records carry it per interval,
        # the torchvision script in its final record.
        ips = final.get("images_per_sec_steps", final.get("images_per_sec"))
        done = epochs[-1]["epoch"]
        best = min((r["heldout_top1_error"] for r in epochs if "heldout_top1_error" in r),
                   default=None)
        rows.append({"impl": final["impl"], "seed": final["seed"], "commit": final["commit"],
                     "err": final.get("heldout_top1_error"), "best": best,
                     "loss": epochs[-1]["train_loss"], "epochs": done,
                     "train_wall": final.get("train_wall_sec", final.get("wall_sec")),
                     "wall": run.get("process_wall_sec"), "ips": ips,
                     "exit": run.get("exit"), "schedule": run.get("schedule", "?")})
    print("| impl | seed | held-out top-1 error (last epoch) | best epoch | final train loss "
          "| epochs done | train wall s | process wall s | img/s (steps) | exit | GPU | commit |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
    for r in rows:
        print(f"| {r['impl']} | {r['seed']} | {fmt(r['err'], '.4f')} | {fmt(r['best'], '.4f')} | "
              f"{fmt(r['loss'], '.4f')} | {fmt(r['epochs'], '.2f')} | {fmt(r['train_wall'], '.1f')} | "
              f"{fmt(r['wall'], '.1f')} | {fmt(r['ips'], '.0f')} | {r['exit']} | {r['schedule']} | "
              f"{str(r['commit'])[:10]} |")
    print()
    for impl in sorted({r["impl"] for r in rows}):
        errs = [r["err"] for r in rows if r["impl"] == impl and isinstance(r["err"], float)]
        if errs:
            mean = sum(errs) / len(errs)
            print(f"- {impl}: mean held-out top-1 error {mean:.4f} over {len(errs)} seed(s), "
                  f"range {min(errs):.4f}–{max(errs):.4f}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("colonnade")
    c.add_argument("metrics")
    c.add_argument("out")
    c.add_argument("--seed", type=int, required=True)
    c.add_argument("--commit", required=True)
    r = sub.add_parser("run")
    r.add_argument("out")
    for name in ("impl", "commit", "schedule"):
        r.add_argument("--" + name, required=True)
    r.add_argument("--seed", type=int, required=True)
    r.add_argument("--wall", type=float, required=True)
    r.add_argument("--exit", type=int, required=True)
    t = sub.add_parser("table")
    t.add_argument("results")
    a = p.parse_args()
    {"colonnade": convert_colonnade, "run": append_run, "table": table}[a.cmd](a)


if __name__ == "__main__":
    main()
