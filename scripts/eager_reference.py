#!/usr/bin/env python3
"""PyTorch eager reference for engine_overhead: the same MLP (or Transformer-L), batch,
micro-batches, precision and input placement, stepped by PyTorch's own Python loop on the same
machine.

Why: engine_overhead compares the engine with a plain LibTorch loop in C++. This script adds the
number a PyTorch user knows: the same training step written in Python, [Linear, ReLU] x layers
then Linear to the classes, cross-entropy, SGD, the batch split into M micro-batches whose
losses are weighted by their share and back-propagated in turn, one optimizer step. Input
placements as engine_overhead's: 'host' copies the batch to the device each step, 'resident'
keeps it there. Contenders run in interleaved rounds; each row is the median of its steps.
--model transformer-l builds the engine's Transformer-L (token embedding plus sinusoidal
positions, pre-LayerNorm decoder layers with causal attention and a ReLU FFN, final LayerNorm
and an untied projection) from --layers, --d-model, --ffn, --heads, --seq-len, --vocab.
--precision bf16|fp16 runs each micro-batch's forward under torch.autocast and the loss in fp32,
as the engine does (fp16 with torch.amp.GradScaler).

  python3 scripts/eager_reference.py --device cuda:0 --in-features 2048 --width 2048 \
      --layers 8 --classes 10 --batch-size 1024 --chunks 1,4,8 --json eager.json
  python3 scripts/eager_reference.py --model transformer-l --precision bf16 --layers 8 \
      --d-model 1024 --ffn 4096 --heads 16 --seq-len 256 --vocab 32000 --batch-size 16

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


class DecoderLayer(torch.nn.Module):
    """x + attention(LN(x)), then h + FFN(LN(h)): the engine's Transformer-L layer."""

    def __init__(self, d, ffn, heads):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.out = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.ffn_in, self.ffn_out = torch.nn.Linear(d, ffn), torch.nn.Linear(ffn, d)

    def attention(self, x):
        n, t, d = x.shape
        dh = d // self.heads
        q, k, v = self.qkv(x).view(n, t, 3, self.heads, dh).permute(2, 0, 3, 1, 4)
        scores = torch.matmul(q * (1.0 / dh ** 0.5), k.transpose(-2, -1))
        future = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        weights = torch.softmax(scores.masked_fill(future, float("-inf")), -1)
        return self.out(torch.matmul(weights, v).transpose(1, 2).reshape(n, t, d))

    def forward(self, x):
        h = x + self.attention(self.norm1(x))
        return h + self.ffn_out(torch.relu(self.ffn_in(self.norm2(h))))


class TransformerL(torch.nn.Module):
    def __init__(self, args):
        super().__init__()
        d = args.d_model
        self.embedding = torch.nn.Embedding(args.vocab, d)
        position = torch.arange(args.seq_len, dtype=torch.float).unsqueeze(1)
        rate = torch.exp(torch.arange(0, d, 2, dtype=torch.float) * (-torch.log(torch.tensor(
            10000.0)) / d))
        table = torch.zeros(args.seq_len, d)
        table[:, 0::2], table[:, 1::2] = torch.sin(position * rate), torch.cos(position * rate)
        self.register_buffer("positions", table)
        self.layers = torch.nn.Sequential(
            *[DecoderLayer(d, args.ffn, args.heads) for _ in range(args.layers)])
        self.norm = torch.nn.LayerNorm(d)
        self.projection = torch.nn.Linear(d, args.vocab)

    def forward(self, tokens):
        h = self.embedding(tokens) + self.positions[: tokens.shape[1]]
        return self.projection(self.norm(self.layers(h)))


def make_model(args, device):
    if args.model == "mlp":
        return make_mlp(args, device)
    torch.manual_seed(0)
    return TransformerL(args).to(device)


def sample(args):
    """The batch: features and classes for the MLP, tokens and next tokens for the Transformer."""
    torch.manual_seed(1)
    if args.model == "mlp":
        return (torch.randn(args.batch_size, args.in_features),
                torch.randint(0, args.classes, (args.batch_size,)))
    tokens = torch.randint(0, args.vocab, (args.batch_size, args.seq_len + 1))
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


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
    x, y = sample(args)
    placed = {"host": (x, y), "resident": (x.to(device), y.to(device))}
    rows = [{"chunks": m, "input": p, "ms": []} for m in args.chunks for p in args.input]
    low = args.precision != "fp32"
    for _ in range(args.rounds):
        for row in rows:
            model = make_model(args, device)
            sgd = torch.optim.SGD(model.parameters(), lr=0.01)
            scaler = torch.amp.GradScaler(device.type, enabled=args.precision == "fp16")
            bx, by = placed[row["input"]]

            def step(m=row["chunks"]):
                sgd.zero_grad()
                total = torch.zeros((), device=device)
                for xs, ys in zip(bx.to(device).chunk(m), by.to(device).chunk(m)):
                    with torch.autocast(device.type, dtype=DTYPES.get(args.precision),
                                        enabled=low):
                        out = model(xs)
                    loss = torch.nn.functional.cross_entropy(
                        out.float().flatten(0, -2), ys.flatten()) * (len(xs) / len(bx))
                    scaler.scale(loss).backward()
                    total += loss.detach()
                scaler.step(sgd)
                scaler.update()
                return total.item()

            row["ms"] += timed_steps(step, device, args.warmup, args.steps)
    for row in rows:
        row["ms_median"] = statistics.median(row["ms"])
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda:0", help="cpu or cuda:N (default cuda:0)")
    parser.add_argument("--model", choices=["mlp", "transformer-l"], default="mlp")
    parser.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32",
                        help="autocast dtype of the forward (the loss in fp32)")
    parser.add_argument("--d-model", type=positive, default=64, help="transformer-l")
    parser.add_argument("--ffn", type=positive, default=256, help="transformer-l")
    parser.add_argument("--heads", type=positive, default=4, help="transformer-l")
    parser.add_argument("--seq-len", type=positive, default=32, help="transformer-l")
    parser.add_argument("--vocab", type=positive, default=1000, help="transformer-l")
    parser.add_argument("--in-features", type=positive, default=2048)
    parser.add_argument("--width", type=positive, default=2048)
    parser.add_argument("--layers", type=positive, default=8,
                        help="hidden layers (mlp), decoder layers (transformer-l)")
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
        model = ({"in_features": args.in_features, "width": args.width, "layers": args.layers,
                  "classes": args.classes} if args.model == "mlp" else
                 {"layers": args.layers, "d_model": args.d_model, "ffn": args.ffn,
                  "heads": args.heads, "seq_len": args.seq_len, "vocab": args.vocab})
        json.dump({"torch": torch.__version__, "device": args.device, "batch_size": args.batch_size,
                   "model": args.model, "precision": args.precision, args.model: model,
                   "rounds": args.rounds, "steps_per_round": args.steps, "rows": rows},
                  out, indent=2)
        out.write("\n")


if __name__ == "__main__":
    main()
