#!/usr/bin/env python3
"""PyTorch eager reference for engine_overhead: the same MLP, batch, micro-batches and input
placement, stepped by PyTorch's own Python loop on the same machine.

Why: engine_overhead compares the engine with a plain LibTorch loop in C++. This script adds the
number a PyTorch user knows: the same training step written in Python, [Linear, ReLU] x layers
then Linear to the classes, cross-entropy, SGD, the batch split into M micro-batches whose
losses are weighted by their share and back-propagated in turn, one optimizer step. Input
placements as engine_overhead's: 'host' copies the batch to the device each step, 'resident'
keeps it there. Contenders run in interleaved rounds; each row is the median of its steps.

  python3 scripts/eager_reference.py --device cuda:0 --in-features 2048 --width 2048 \
      --layers 8 --classes 10 --batch-size 1024 --chunks 1,4,8 --json eager.json

Needs only torch (a GPU machine's python3 has nothing else).
"""
import argparse
import json
import statistics
import sys
import time

try:
    import torch
except ImportError:
    sys.exit("eager_reference.py: this python3 cannot import torch")


def positive_list(text):
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a comma-separated list of integers")
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"'{text}' must hold integers >= 1")
    return values


def positive(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not an integer")
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be >= 1")
    return value


def make_mlp(args, device):
    torch.manual_seed(0)
    layers, width = [], args.in_features
    for _ in range(args.layers):
        layers += [torch.nn.Linear(width, args.width), torch.nn.ReLU()]
        width = args.width
    layers.append(torch.nn.Linear(width, args.classes))
    return torch.nn.Sequential(*layers).to(device)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_steps(step, device, warmup, steps):
    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        sync(device)
        start = time.perf_counter()
        step()
        sync(device)
        times.append((time.perf_counter() - start) * 1e3)
    return times


def measure(args):
    device = torch.device(args.device)
    torch.manual_seed(1)
    x = torch.randn(args.batch_size, args.in_features)
    y = torch.randint(0, args.classes, (args.batch_size,))
    placed = {"host": (x, y), "resident": (x.to(device), y.to(device))}
    rows = [{"chunks": m, "input": p, "ms": []} for m in args.chunks for p in args.input]
    for _ in range(args.rounds):
        for row in rows:
            model = make_mlp(args, device)
            sgd = torch.optim.SGD(model.parameters(), lr=0.01)
            bx, by = placed[row["input"]]

            def step(m=row["chunks"]):
                sgd.zero_grad()
                total = torch.zeros((), device=device)
                for xs, ys in zip(bx.to(device).chunk(m), by.to(device).chunk(m)):
                    loss = torch.nn.functional.cross_entropy(model(xs), ys) * (len(xs) / len(bx))
                    loss.backward()
                    total += loss.detach()
                sgd.step()
                return total.item()

            row["ms"] += timed_steps(step, device, args.warmup, args.steps)
    for row in rows:
        row["ms_median"] = statistics.median(row["ms"])
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda:0", help="cpu or cuda:N (default cuda:0)")
    parser.add_argument("--in-features", type=positive, default=2048)
    parser.add_argument("--width", type=positive, default=2048)
    parser.add_argument("--layers", type=positive, default=8, help="hidden layers")
    parser.add_argument("--classes", type=positive, default=10)
    parser.add_argument("--batch-size", type=positive, default=1024)
    parser.add_argument("--chunks", type=positive_list, default=[1, 4, 8], help="M values")
    parser.add_argument("--input", type=lambda t: t.split(","), default=["host", "resident"],
                        help="placements: host, resident")
    parser.add_argument("--rounds", type=positive, default=3)
    parser.add_argument("--steps", type=positive, default=5, help="timed steps a round")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    bad = [p for p in args.input if p not in ("host", "resident")]
    if bad:
        parser.error(f"--input {bad[0]!r} is not a placement: use host or resident")
    if any(args.batch_size % m for m in args.chunks):
        parser.error(f"--batch-size {args.batch_size} does not split into --chunks {args.chunks}")
    try:
        device = torch.device(args.device)
    except RuntimeError:
        parser.error(f"--device {args.device!r} is not a device: use cpu or cuda:N")
    if device.type == "cuda" and (not torch.cuda.is_available()
                                  or (device.index or 0) >= torch.cuda.device_count()):
        parser.error(f"--device {args.device}: {torch.cuda.device_count()} CUDA device(s) visible")
    out = open(args.json, "w") if args.json else None
    rows = measure(args)
    print(f"{'M':<4} {'input':<9} {'eager ms':>10}")
    for row in rows:
        print(f"{row['chunks']:<4} {row['input']:<9} {row['ms_median']:>10.3f}")
    if out:
        json.dump({"torch": torch.__version__, "device": args.device, "batch_size": args.batch_size,
                   "mlp": {"in_features": args.in_features, "width": args.width,
                           "layers": args.layers, "classes": args.classes},
                   "rounds": args.rounds, "steps_per_round": args.steps, "rows": rows},
                  out, indent=2)
        out.write("\n")


if __name__ == "__main__":
    main()
