#!/usr/bin/env python3
"""Turns the runs of run_gpu.sh into results.jsonl records (issue 35, point 4) and prints the
summary table.

    results.py stamp                       stdin -> stdout, each line prefixed "[SECONDS] "
                                           (seconds since $STAMP_T0, a `date +%s.%N`)
    results.py colonnade METRICS COMMON... one record from the trainer's --metrics_file
    results.py torchvision METRICS COMMON. one record from torchvision_recipe.py --metrics
    results.py airbench STAMPED_LOG COMMON one record per timed run of airbench94_muon.py
    results.py summary RESULTS.jsonl       the table of summary.txt

COMMON: --what W --run NAME --model M --flags "..." --epochs E --batch B --wall S --exit RC
--device D --commit C [--target ACC] [--note TEXT]. Every record names what, run, impl,
model, flags, epochs, batch, train_s, wall_s, compile_s, final_acc, acc_per_epoch
([epoch, train_s, acc] triples), time_to_target_s, img_per_s, device, commit, exit.

train_s, by implementation:
  colonnade    training time with evaluations left out: the sum over the trainer's train
               records of (images in the interval) / (its img/s), which the trainer measures
               with evaluation time removed; elapsed_s is the trainer's own clock (from the
               training loop's start, evaluations included); wall_s the process, build
               excluded.
  torchvision  its train_sec (wall time of the loop, evaluations left out, data loading in).
  airbench     time_seconds as airbench prints it (CUDA events around its training epochs,
               its whitening init and its final TTA evaluation; per-epoch evaluations out);
               compile_s is the process's time until its warm-up run ended (torch.compile
               and one run on random labels), wall_s the process's seconds for this run.
"""
import argparse
import json
import os
import re
import sys
import time


def common_args(p):
    p.add_argument("--what", required=True)
    p.add_argument("--run", required=True)
    p.add_argument("--model", default="")
    p.add_argument("--flags", default="")
    p.add_argument("--epochs", type=float, default=0)
    p.add_argument("--batch", type=int, default=0)
    p.add_argument("--wall", type=float, default=None)
    p.add_argument("--exit", type=int, default=None)
    p.add_argument("--device", default="")
    p.add_argument("--commit", default="unknown")
    p.add_argument("--target", type=float, default=None)
    p.add_argument("--note", default="")


def base_record(a, impl):
    return {"what": a.what, "run": a.run, "impl": impl, "model": a.model, "flags": a.flags,
            "epochs": a.epochs, "batch": a.batch}


def finish(rec, a, curve):
    rec["acc_per_epoch"] = curve
    rec["target"] = a.target
    rec["time_to_target_s"] = None
    if a.target is not None:
        for _, t, acc in curve:
            if acc is not None and acc >= a.target:
                rec["time_to_target_s"] = t
                break
    rec.update({"device": a.device, "exit": a.exit, "note": a.note, "commit": a.commit})
    return rec


def read_jsonl(path):
    out = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        out.append(json.loads(line))
                    except json.JSONDecodeError:
                        pass
    return out


def colonnade(a):
    recs = read_jsonl(a.metrics)
    rec = base_record(a, "colonnade")
    train_s, last_step, images, curve, pending = 0.0, 0, 0, [], None
    elapsed = None
    for r in recs:
        if r.get("kind") == "train":
            n = (r["step"] - last_step) * a.batch
            if r.get("images_per_sec", 0) > 0:
                train_s += n / r["images_per_sec"]
            images += n
            last_step = r["step"]
            elapsed = r.get("elapsed_sec")
            pending = (round(r["epoch"], 3), round(train_s, 3))
        elif r.get("kind") == "eval":
            acc = round(1.0 - r["top1_error"], 5)
            ep = round(r["epoch"], 3)
            t = pending[1] if pending and abs(pending[0] - ep) < 1e-3 else round(train_s, 3)
            curve.append([ep, t, acc])
    rec.update({"train_s": round(train_s, 3), "elapsed_s": elapsed, "wall_s": a.wall,
                "compile_s": None, "final_acc": curve[-1][2] if curve else None,
                "img_per_s": round(images / train_s, 1) if train_s > 0 else None,
                "steps_done": last_step})
    print(json.dumps(finish(rec, a, curve)))


def torchvision(a):
    recs = read_jsonl(a.metrics)
    rec = base_record(a, "torchvision")
    curve = [[r["epoch"], r["train_sec"], r["heldout_top1"]] for r in recs
             if r.get("kind") == "epoch"]
    final = next((r for r in recs if r.get("kind") == "final"), {})
    config = next((r for r in recs if r.get("kind") == "config"), {})
    rec.update({"train_s": final.get("train_sec"), "wall_s": a.wall, "compile_s": None,
                "startup_s": config.get("startup_sec"),
                "final_acc": final.get("heldout_top1"), "img_per_s": final.get("img_per_s"),
                "torch": config.get("torch"), "max_memory_gib": final.get("max_memory_gib")})
    print(json.dumps(finish(rec, a, curve)))


ROW = re.compile(r"^\[\s*([0-9.]+)\]\s*\|(.*)\|\s*$")


def airbench(a):
    """Rows of airbench's table: | run | epoch | train_acc | val_acc | tta_val_acc | time |;
    the run number is printed on a run's first row only; the warm-up run says 'warmup'."""
    runs, cur = [], None
    with open(a.log) as f:
        for line in f:
            m = ROW.match(line.rstrip("\n"))
            if not m:
                continue
            cells = [c.strip() for c in m.group(2).split("|")]
            if len(cells) != 6 or cells[1] == "epoch":
                continue
            run, epoch, _train_acc, val_acc, tta, secs = cells
            if run:
                cur = {"run": run, "curve": [], "final": None, "end": None, "train_s": None}
                runs.append(cur)
            if cur is None:
                continue
            t = float(m.group(1))
            if epoch == "eval":
                cur.update(final=float(tta), train_s=float(secs), end=t)
            else:
                cur["curve"].append([int(epoch) + 1, float(secs), float(val_acc)])
    compile_s, prev_end = None, None
    for r in runs:
        if r["run"] == "warmup":
            compile_s = r["end"]
            prev_end = r["end"]
            continue
        rec = base_record(a, "airbench")
        rec["run"] = f"{a.run}_{r['run']}"
        curve = list(r["curve"])
        if r["final"] is not None and curve:  # the TTA evaluation, at the printed final time
            curve.append([curve[-1][0], r["train_s"], r["final"]])
        wall = None
        if r["end"] is not None and prev_end is not None:
            wall = round(r["end"] - prev_end, 3)
        prev_end = r["end"] if r["end"] is not None else prev_end
        rec.update({"train_s": r["train_s"], "wall_s": wall, "compile_s": compile_s,
                    "process_wall_s": a.wall, "final_acc": r["final"],
                    "final_acc_no_tta": r["curve"][-1][2] if r["curve"] else None,
                    "img_per_s": round(50000 * a.epochs / r["train_s"], 1)
                    if r["train_s"] and a.epochs else None})
        print(json.dumps(finish(rec, a, curve)))


def stamp(_a):
    t0 = float(os.environ.get("STAMP_T0", time.time()))
    for line in sys.stdin:
        sys.stdout.write(f"[{time.time() - t0:9.3f}] {line}")
        sys.stdout.flush()


def fmt(v, spec):
    return format(v, spec) if isinstance(v, (int, float)) else "-"


def summary(a):
    recs = read_jsonl(a.results)
    print(f"{'what':<11} {'run':<22} {'impl':<11} {'model':<10} {'ep':>4} {'batch':>5} "
          f"{'acc':>7} {'train_s':>8} {'wall_s':>7} {'compile':>7} {'t->tgt':>7} "
          f"{'img/s':>8} exit")
    for r in recs:
        if r.get("what") == "build":
            print(f"{'build':<11} {r.get('run', ''):<22} rc={r.get('exit')} in "
                  f"{fmt(r.get('wall_s'), '.1f')} s")
            continue
        acc = r.get("final_acc")
        print(f"{r.get('what', ''):<11} {r.get('run', ''):<22} {r.get('impl', ''):<11} "
              f"{r.get('model', ''):<10} {fmt(r.get('epochs'), '4g')} {fmt(r.get('batch'), '5d')} "
              f"{fmt(acc * 100 if isinstance(acc, float) else None, '6.2f')}% "
              f"{fmt(r.get('train_s'), '8.2f')} {fmt(r.get('wall_s'), '7.1f')} "
              f"{fmt(r.get('compile_s'), '7.1f')} {fmt(r.get('time_to_target_s'), '7.2f')} "
              f"{fmt(r.get('img_per_s'), '8.0f')} {r.get('exit')}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("stamp").set_defaults(fn=stamp)
    for name, fn, arg in (("colonnade", colonnade, "metrics"), ("torchvision", torchvision, "metrics"),
                          ("airbench", airbench, "log")):
        p = sub.add_parser(name)
        p.add_argument(arg)
        common_args(p)
        p.set_defaults(fn=fn)
    p = sub.add_parser("summary")
    p.add_argument("results")
    p.set_defaults(fn=summary)
    a = ap.parse_args()
    a.fn(a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
