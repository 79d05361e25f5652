#!/usr/bin/env python3
"""PyTorch eager reference for engine_overhead: the same MLP (or Transformer-L, or
AmoebaNet-D), batch, micro-batches, precision and input placement, stepped by PyTorch's own
Python loop on the same machine.

Why: engine_overhead compares the engine with a plain LibTorch loop in C++. This script adds the
number a PyTorch user knows: the same training step written in Python, [Linear, ReLU] x layers
then Linear to the classes, cross-entropy, SGD, the batch split into M micro-batches whose
losses are weighted by their share and back-propagated in turn, one optimizer step. Input
placements as engine_overhead's: 'host' copies the batch to the device each step, 'resident'
keeps it there. Contenders run in interleaved rounds; each row is the median of its steps.
--model transformer-l builds the engine's Transformer-L (token embedding plus sinusoidal
positions, pre-LayerNorm decoder layers with causal attention and a ReLU FFN, final LayerNorm
and an untied projection) from --layers, --d-model, --ffn, --heads, --seq-len, --vocab.
--model amoebanet-d builds the engine's AmoebaNet-D (models/src/amoebanet*.cpp) at
engine_overhead's settings from --layers (L), --filters (D), --image-size, --channels and
--classes: a 3x3 stride-2 conv-BN stem to 32 filters, reduction cells of D/4 and D/2 filters,
L normal cells in three stacks of D, 2D and 4D filters with a reduction cell before the second
and third, then ReLU, global average pooling and a linear classifier; every BatchNorm with
epsilon 1e-3, no dropout or drop-path (engine_overhead's 0). It has the engine's parameters
and buffers, tensor for tensor. BatchNorm2d updates its running statistics from each
micro-batch, the engine's DeferredBatchNorm once a step from all of them (the same figures at
M = 1). Its input: random images (batch, channels, image size, image size), random classes.
--precision bf16|fp16 runs each micro-batch's forward under torch.autocast and the loss in fp32,
as the engine does (fp16 with torch.amp.GradScaler).

  python3 scripts/eager_reference.py --device cuda:0 --in-features 2048 --width 2048 \
      --layers 8 --classes 10 --batch-size 1024 --chunks 1,4,8 --json eager.json
  python3 scripts/eager_reference.py --model transformer-l --precision bf16 --layers 8 \
      --d-model 1024 --ffn 4096 --heads 16 --seq-len 256 --vocab 32000 --batch-size 16
  python3 scripts/eager_reference.py --model amoebanet-d --precision bf16 --layers 6 \
      --filters 64 --image-size 64 --batch-size 64 --chunks 1

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


# AmoebaNet-D's cells as models/src/amoebanet_genotype.cpp holds them: (operations, the state
# each reads, the states concatenated into the output). Pair p adds operations 2p and 2p+1.
AMOEBANET_D = {
    "normal": (["1x1", "max_pool_3x3", "none", "1x7_7x1", "1x1", "1x7_7x1", "max_pool_3x3",
                "none", "avg_pool_3x3", "1x1"], [1, 1, 1, 0, 0, 0, 2, 2, 1, 5], [0, 3, 4, 6]),
    "reduction": (["max_pool_2x2", "max_pool_3x3", "none", "3x3", "1x7_7x1", "max_pool_3x3",
                   "none", "max_pool_2x2", "avg_pool_3x3", "1x1"], [0, 0, 2, 1, 2, 2, 3, 1, 2, 3],
                  [4, 5, 6]),
}
STEM_FILTERS = 32  # AmoebaNetOptions' stem_filters; its stem_stride is 2


def conv_bn(cin, cout, kernel, stride=1):
    """Convolution without bias, padded by (kernel - 1) / 2 a side, then BatchNorm with epsilon
    1e-3: the engine's ConvBn. kernel and stride: an int or (height, width)."""
    kernel = kernel if isinstance(kernel, tuple) else (kernel, kernel)
    stride = stride if isinstance(stride, tuple) else (stride, stride)
    padding = tuple((k - 1) // 2 for k in kernel)
    return torch.nn.Sequential(torch.nn.Conv2d(cin, cout, kernel, stride, padding, bias=False),
                               torch.nn.BatchNorm2d(cout, eps=1e-3))


class FactorizedReduce(torch.nn.Module):
    """Halves the side: 1x1 stride-2 convolutions on the even and on the odd pixel grid, each to
    half the channels, the odd one zero-padded to the even one's size, joined, BatchNorm."""

    def __init__(self, cin, cout):
        super().__init__()
        self.even = torch.nn.Conv2d(cin, cout // 2, 1, 2, bias=False)
        self.odd = torch.nn.Conv2d(cin, cout // 2, 1, 2, bias=False)
        self.bn = torch.nn.BatchNorm2d(cout, eps=1e-3)

    def forward(self, x):
        a, b = self.even(x), self.odd(x[:, :, 1:, 1:])
        b = torch.nn.functional.pad(b, (0, a.shape[3] - b.shape[3], 0, a.shape[2] - b.shape[2]))
        return self.bn(torch.cat([a, b], 1))


def cell_operation(name, c, stride):
    """(the operation's module, whether it takes ReLU of its state), as amoebanet_ops.cpp's
    make_cell_operation builds the operations AmoebaNet-D names on c channels."""
    if name in ("none", "1x1"):
        plain = name == "none" and stride == 1
        return (torch.nn.Identity(), False) if plain else (conv_bn(c, c, 1, stride), True)
    if name == "max_pool_2x2":
        return torch.nn.MaxPool2d(2, 2, ceil_mode=True), False
    if name == "max_pool_3x3":
        return torch.nn.MaxPool2d(3, stride, 1), False
    if name == "avg_pool_3x3":
        return torch.nn.AvgPool2d(3, stride, 1, count_include_pad=False), False
    r = c // 4  # 3x3 and 1x7_7x1 bottleneck to a quarter of the channels
    if name == "3x3":
        spatial = [conv_bn(r, r, 3, stride)]
    elif name == "1x7_7x1":
        spatial = [conv_bn(r, r, (1, 7), (1, stride)), torch.nn.ReLU(),
                   conv_bn(r, r, (7, 1), (stride, 1))]
    else:
        raise ValueError(f"AmoebaNet-D has no operation '{name}'")
    return torch.nn.Sequential(conv_bn(c, r, 1), torch.nn.ReLU(), *spatial, torch.nn.ReLU(),
                               conv_bn(r, c, 1)), True


class AmoebaCell(torch.nn.Module):
    """The engine's AmoebaCell: state 0 is conv-BN 1x1 of ReLU(x), state 1 the skip brought to c
    channels and x's side (factorized reduction, conv-BN 1x1 of its ReLU, or itself); then the
    genotype's five pairs, each operation on its state or that state's ReLU (made once); the
    output joins the concat states."""

    def __init__(self, reduction, cin, cskip, c, skip_reduced):
        super().__init__()
        names, self.inputs, self.concat = AMOEBANET_D["reduction" if reduction else "normal"]
        self.preprocess = conv_bn(cin, c, 1)
        self.skip = (FactorizedReduce(cskip, c) if skip_reduced else
                     conv_bn(cskip, c, 1) if cskip != c else None)
        built = [cell_operation(name, c, 2 if reduction and state < 2 else 1)
                 for name, state in zip(names, self.inputs)]
        self.ops = torch.nn.ModuleList(op for op, _ in built)
        self.relu_input = [relu for _, relu in built]

    def forward(self, x, skip):
        relu_x = torch.relu(x)
        states = [self.preprocess(relu_x), skip if self.skip is None else
                  self.skip(relu_x if skip is x else torch.relu(skip))]
        relus = {}
        for p in range(5):
            ys = []
            for i in (2 * p, 2 * p + 1):
                state = self.inputs[i]
                if self.relu_input[i] and state not in relus:
                    relus[state] = torch.relu(states[state])
                ys.append(self.ops[i](relus[state] if self.relu_input[i] else states[state]))
            states.append(ys[0] + ys[1])
        return torch.cat([states[s] for s in self.concat], 1)


def amoebanet_plan(args):
    """Each cell's (reduction, x channels, skip channels, filters, skip has twice x's side) and
    the last cell's channels, as AmoebaNetBuilder lays them out: reduction cells of D/4 and D/2
    filters, then L normal cells, a reduction cell doubling the filters before normal cell
    floor(k L / 3) for k = 1, 2; each halving of the side rounds up."""
    filters, reductions = args.filters, 0
    cells = [(True, filters // 4), (True, filters // 2)]
    for n in range(args.layers):
        while reductions < 2 and n == (reductions + 1) * args.layers // 3:
            filters, reductions = filters * 2, reductions + 1
            cells.append((True, filters))
        cells.append((False, filters))
    x = skip = STEM_FILTERS
    size = skip_size = (args.image_size + 1) // 2
    plan = []
    for reduction, c in cells:
        plan.append((reduction, x, skip, c, skip_size != size))
        skip, skip_size = x, size
        x = len(AMOEBANET_D["reduction" if reduction else "normal"][2]) * c
        size = (size + 1) // 2 if reduction else size
    return plan, x


class AmoebaNetD(torch.nn.Module):
    """Stem (3x3 stride-2 conv-BN to 32 filters), the cells, each reading the two outputs before
    it (the first its input twice), then ReLU, global average pooling and a linear classifier."""

    def __init__(self, args):
        super().__init__()
        plan, channels = amoebanet_plan(args)
        self.stem = conv_bn(args.channels, STEM_FILTERS, 3, 2)
        self.cells = torch.nn.ModuleList(AmoebaCell(*cell) for cell in plan)
        self.classifier = torch.nn.Linear(channels, args.classes)

    def forward(self, images):
        x = skip = self.stem(images)
        for cell in self.cells:
            x, skip = cell(x, skip), x
        return self.classifier(torch.relu(x).mean((2, 3)))


def make_model(args, device):
    if args.model == "mlp":
        return make_mlp(args, device)
    torch.manual_seed(0)
    return (AmoebaNetD if args.model == "amoebanet-d" else TransformerL)(args).to(device)


def sample(args):
    """The batch: features or images and their classes for the MLP or AmoebaNet-D, tokens and
    next tokens for the Transformer."""
    torch.manual_seed(1)
    if args.model != "transformer-l":
        shape = ((args.in_features,) if args.model == "mlp" else
                 (args.channels, args.image_size, args.image_size))
        return (torch.randn(args.batch_size, *shape),
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


def add_model_flags(parser):
    """The model and its knobs, the mini-batch (experiments/peers/theirs.py takes the same)."""
    parser.add_argument("--model", choices=["mlp", "transformer-l", "amoebanet-d"], default="mlp")
    parser.add_argument("--d-model", type=positive, default=64, help="transformer-l")
    parser.add_argument("--ffn", type=positive, default=256, help="transformer-l")
    parser.add_argument("--heads", type=positive, default=4, help="transformer-l")
    parser.add_argument("--seq-len", type=positive, default=32, help="transformer-l")
    parser.add_argument("--vocab", type=positive, default=1000, help="transformer-l")
    parser.add_argument("--filters", type=positive, default=16,
                        help="amoebanet-d: D, a multiple of 16")
    parser.add_argument("--image-size", type=positive, default=32,
                        help="amoebanet-d: square images, at least 17 pixels")
    parser.add_argument("--channels", type=positive, default=3, help="amoebanet-d")
    parser.add_argument("--in-features", type=positive, default=2048)
    parser.add_argument("--width", type=positive, default=2048)
    parser.add_argument("--layers", type=positive, default=8,
                        help="hidden layers (mlp), decoder layers (transformer-l), "
                             "normal cells L (amoebanet-d)")
    parser.add_argument("--classes", type=positive, default=10)
    parser.add_argument("--batch-size", type=positive, default=1024)


def check_model_flags(parser, args):
    if args.model == "amoebanet-d" and args.filters % 16:
        parser.error(f"--filters {args.filters}: amoebanet-d needs a multiple of 16 (its first "
                     "stem cell has D/4 filters and bottlenecks to a quarter of those)")
    if args.model == "amoebanet-d" and args.image_size < 17:
        parser.error(f"--image-size {args.image_size}: amoebanet-d halves the image five times "
                     "and needs at least 17 pixels")


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda:0", help="cpu or cuda:N (default cuda:0)")
    parser.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32",
                        help="autocast dtype of the forward (the loss in fp32)")
    add_model_flags(parser)
    parser.add_argument("--chunks", type=positive_list, default=[1, 4, 8], help="M values")
    parser.add_argument("--input", type=lambda t: t.split(","), default=["host", "resident"],
                        help="placements: host, resident")
    parser.add_argument("--rounds", type=positive, default=3)
    parser.add_argument("--steps", type=positive, default=5, help="timed steps a round")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    check_args(parser, args)
    return args


def check_args(parser, args):
    bad = [p for p in args.input if p not in ("host", "resident")]
    if bad:
        parser.error(f"--input {bad[0]!r} is not a placement: use host or resident")
    if any(args.batch_size % m for m in args.chunks):
        parser.error(f"--batch-size {args.batch_size} does not split into --chunks {args.chunks}")
    check_model_flags(parser, args)
    try:
        device = torch.device(args.device)
    except RuntimeError:
        parser.error(f"--device {args.device!r} is not a device: use cpu or cuda:N")
    if device.type == "cuda" and (not torch.cuda.is_available()
                                  or (device.index or 0) >= torch.cuda.device_count()):
        parser.error(f"--device {args.device}: {torch.cuda.device_count()} CUDA device(s) visible")


def model_config(args):
    """The model's knobs, as the JSON records them."""
    if args.model == "mlp":
        return {"in_features": args.in_features, "width": args.width, "layers": args.layers,
                "classes": args.classes}
    if args.model == "amoebanet-d":
        return {"layers": args.layers, "filters": args.filters, "image_size": args.image_size,
                "channels": args.channels, "classes": args.classes}
    return {"layers": args.layers, "d_model": args.d_model, "ffn": args.ffn,
            "heads": args.heads, "seq_len": args.seq_len, "vocab": args.vocab}


def main():
    args = parse_args()
    out = open(args.json, "w") if args.json else None
    rows = measure(args)
    print(f"{'M':<4} {'input':<9} {'eager ms':>10}")
    for row in rows:
        print(f"{row['chunks']:<4} {row['input']:<9} {row['ms_median']:>10.3f}")
    if out:
        json.dump({"torch": torch.__version__, "device": args.device, "batch_size": args.batch_size,
                   "model": args.model, "precision": args.precision, args.model: model_config(args),
                   "rounds": args.rounds, "steps_per_round": args.steps, "rows": rows},
                  out, indent=2)
        out.write("\n")

if __name__ == "__main__":
    main()
