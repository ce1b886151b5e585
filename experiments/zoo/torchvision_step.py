#!/usr/bin/env python3
"""Times one training step (forward, backward, SGD with momentum and weight decay) of
torchvision models on one GPU, in images per second: the peer of `bench_train
--model=NAME` in the zoo benchmark (experiments/zoo/README.md).

    python3 torchvision_step.py --models vgg16,resnet50 --batch 64 --modes fp32,tf32 \
        --json out.jsonl

Modes: fp32 (strict: TF32 off for matmul and cuDNN), tf32, bf16_cl (autocast bf16,
channels_last, eager), bf16_compile (the same under torch.compile; its compile time is
spent in the warm-up, not timed), bf16_autotune (torch.compile mode="max-autotune": Triton
and cuBLAS candidates timed per shape, minutes of warm-up) -- the peer modes of
experiments/mixed_precision. Inputs are random tensors on
the device, so the number is the network's, not a data pipeline's. Timed with CUDA
events after warm-up; the median of --repeats runs of --steps steps.
"""
import argparse
import json
import statistics

import torch
import torchvision


def build(name, classes):
    if name == "googlenet":
        return torchvision.models.googlenet(weights=None, aux_logits=False, init_weights=False,
                                            num_classes=classes)
    return getattr(torchvision.models, name)(weights=None, num_classes=classes)


def time_model(name, batch, mode, steps, repeats, size, classes):
    if mode not in ("fp32", "tf32", "bf16_cl", "bf16_compile", "bf16_autotune"):
        raise SystemExit(f"torchvision_step.py: unknown mode {mode}")
    tf32 = mode != "fp32"  # bf16 modes: what autocast leaves in float runs as TF32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = True
    bf16 = mode.startswith("bf16")
    model = build(name, classes).cuda().train()
    x = torch.randn(batch, 3, size, size, device="cuda")
    if bf16:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    y = torch.randint(0, classes, (batch,), device="cuda")
    loss_fn = torch.nn.CrossEntropyLoss()
    net = model
    if mode == "bf16_compile":
        net = torch.compile(model, dynamic=False)
    elif mode == "bf16_autotune":
        net = torch.compile(model, dynamic=False, mode="max-autotune")

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            loss = loss_fn(net(x), y)
        loss.backward()
        opt.step()

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    rates = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(steps):
            step()
        end.record()
        torch.cuda.synchronize()
        rates.append(batch * steps / (start.elapsed_time(end) / 1000.0))
    return statistics.median(rates), torch.cuda.max_memory_allocated()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="vgg16,vgg19,googlenet,resnet18,resnet34,resnet50,resnet152")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--modes", default="fp32,tf32")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--classes", type=int, default=1000)
    p.add_argument("--json", default="")
    a = p.parse_args()
    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}, "
          f"{torch.cuda.get_device_name()}, batch {a.batch}, {a.size}x{a.size}")
    for name in a.models.split(","):
        for mode in a.modes.split(","):
            ips, mem = time_model(name, a.batch, mode, a.steps, a.repeats, a.size, a.classes)
            row = {"peer": "torchvision", "model": name, "mode": mode, "batch": a.batch,
                   "images_per_sec": round(ips, 1), "peak_mem_mib": round(mem / 2**20)}
            print(json.dumps(row), flush=True)
            if a.json:
                with open(a.json, "a") as f:
                    f.write(json.dumps(row) + "\n")
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
