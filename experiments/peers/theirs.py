#!/usr/bin/env python3
"""theirs.py: one contender of experiments/peers/peers.py that is not this engine: PyTorch's own
pipelining (torch.distributed.pipelining) on K Gloo ranks, or a plain eager training loop.

Why this file exists: the first thing a researcher holds this engine against is the pipelining
that ships with PyTorch. This runs it on the LibTorch the project's build-torch2 links (the venv
of scripts/install_deps.sh --torch2), with the engine's layers (scripts/eager_reference.py builds
them), the engine's balance and the engine's training step: cross-entropy over the mini-batch,
split into M micro-batches, SGD. Every rank is a process with one intra-op thread, on loopback.

Before any step is timed, the pipeline's losses of its first --check-steps steps are compared
with the plain model's (one process, the same weights and batch): a schedule that trains
something else is refused, not timed. Where a schedule fails on CPU with Gloo the error is
printed on one line and the exit status is 3; --workaround names a fix applied to PyTorch's
side (see WORKAROUNDS) and the output says it was used.

  python theirs.py --schedule 1f1b -K 2 -M 8 --balance 4,5 --json out.json
  python theirs.py --plain --threads 2 --json plain.json

Writes JSON: {"losses": [...every step...], "step_ms": [...timed steps...], "check": {...}}.
"""
import argparse
import datetime
import json
import os
import socket
import statistics
import sys
import tempfile
import time
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import eager_reference  # noqa: E402  (the engine's models in PyTorch)

from torch.distributed.pipelining import (  # noqa: E402
    PipelineStage, Schedule1F1B, ScheduleDualPipeV, ScheduleGPipe, ScheduleInterleaved1F1B,
    ScheduleInterleavedZeroBubble, ScheduleLoopedBFS, ScheduleZBVZeroBubble)
from torch.distributed.pipelining.schedules import PipelineScheduleSingle  # noqa: E402

# The engine's schedule names, PyTorch's class for each, and how its stages sit on ranks: "one"
# (stage r on rank r), "loop" (stages r, r + K, ... on rank r) or "v" (stages r and 2K - 1 - r).
SCHEDULES = {
    "gpipe": (ScheduleGPipe, "one"),
    "1f1b": (Schedule1F1B, "one"),
    "zb-h1": (ScheduleInterleavedZeroBubble, "one"),  # PyTorch's ZB1P on one stage per rank
    "interleaved-1f1b": (ScheduleInterleaved1F1B, "loop"),
    "looped-bfs": (ScheduleLoopedBFS, "loop"),
    "zbv": (ScheduleZBVZeroBubble, "v"),
    "dualpipev": (ScheduleDualPipeV, "v"),
}

# Fixes to PyTorch's side, applied only when named. self-send: the V schedules' warm-up of the
# links (_get_init_p2p_neighbors_ops) sends from the stage before the V's turn to the one after
# it, on the same rank, and Gloo refuses a send to one's own rank; the fix drops those two
# messages (the stages on one rank pass tensors in memory, as PyTorch's own runtime does).
WORKAROUNDS = ("self-send",)


class SelfSendFreeStage(PipelineStage):
    def _get_init_p2p_neighbors_ops(self):
        return [op for op in super()._get_init_p2p_neighbors_ops()
                if op.group_peer != self.group_rank]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    eager_reference.add_model_flags(p)
    p.add_argument("--lr", type=float, default=0.01, help="SGD's learning rate")
    p.add_argument("--plain", action="store_true",
                   help="a plain eager loop on one process (no pipeline)")
    p.add_argument("--threads", type=eager_reference.positive, default=1,
                   help="intra-op threads of the plain loop (pipeline ranks: 1 each)")
    p.add_argument("--schedule", choices=sorted(SCHEDULES), default="gpipe")
    p.add_argument("-K", "--partitions", dest="K", type=eager_reference.positive, default=2)
    p.add_argument("-M", "--chunks", dest="M", type=eager_reference.positive, default=8)
    p.add_argument("--balance", type=eager_reference.positive_list,
                   help="engine layers per stage, in stage order (K entries, or 2K for the "
                        "interleaved and V schedules)")
    p.add_argument("--workaround", choices=WORKAROUNDS, action="append", default=[])
    p.add_argument("--check-steps", type=eager_reference.positive, default=3,
                   help="steps whose losses must equal the plain model's (also the warm-up)")
    p.add_argument("--steps", type=eager_reference.positive, default=5, help="timed steps")
    p.add_argument("--tolerance", type=float, default=1e-4,
                   help="largest |pipelined loss - plain loss| / plain loss accepted")
    p.add_argument("--comm-timeout", type=eager_reference.positive, default=120,
                   help="seconds a rank waits for a peer (a failed peer ends the run)")
    p.add_argument("--json", required=True, help="where the result goes")
    args = p.parse_args(argv)
    eager_reference.check_model_flags(p, args)
    if args.batch_size % args.M:
        p.error(f"--batch-size {args.batch_size} does not split into -M {args.M}")
    if not args.plain:
        stages = args.K * (1 if SCHEDULES[args.schedule][1] == "one" else 2)
        layers = len(engine_layers(args))
        if args.balance is None:
            p.error("--balance is needed for a pipeline")
        if len(args.balance) != stages or sum(args.balance) != layers:
            p.error(f"--balance {','.join(map(str, args.balance))} must have {stages} entries "
                    f"summing to the model's {layers} layers")
    return args


class TokenEmbedding(torch.nn.Module):
    """The Transformer's first engine layer: token embedding plus the sinusoidal positions."""

    def __init__(self, model):
        super().__init__()
        self.embedding = model.embedding
        self.register_buffer("positions", model.positions)

    def forward(self, tokens):
        return self.embedding(tokens) + self.positions[: tokens.shape[1]]


class AmoebaStem(torch.nn.Module):
    """AmoebaNet's first engine layer: the stem, whose output is both states of the first cell."""

    def __init__(self, stem):
        super().__init__()
        self.stem = stem

    def forward(self, images):
        x = self.stem(images)
        return x, x


class AmoebaCellLayer(torch.nn.Module):
    """One cell as an engine layer: (x, skip) -> (the cell's output, x)."""

    def __init__(self, cell):
        super().__init__()
        self.cell = cell

    def forward(self, x, skip):
        return self.cell(x, skip), x


class AmoebaHead(torch.nn.Module):
    """ReLU, global average pooling and the classifier, of the last cell's output."""

    def __init__(self, classifier):
        super().__init__()
        self.classifier = classifier

    def forward(self, x, skip):
        return self.classifier(torch.relu(x).mean((2, 3)))


class Stage(torch.nn.Module):
    """Consecutive engine layers; a tuple from one is the next one's arguments."""

    def __init__(self, layers):
        super().__init__()
        self.layers = torch.nn.ModuleList(layers)

    def forward(self, *inputs):
        for layer in self.layers:
            out = layer(*inputs)
            inputs = out if isinstance(out, tuple) else (out,)
        return out


def engine_layers(args):
    """The model (scripts/eager_reference.py, seeded alike in every process) as the engine's
    layers: MLP [Linear, ReLU] per hidden layer then the classifier; Transformer-L the embedding,
    each decoder layer, then final LayerNorm and projection; AmoebaNet-D the stem, each cell, then
    the head."""
    model = eager_reference.make_model(args, torch.device("cpu"))
    if args.model == "mlp":
        modules = list(model)
        return [torch.nn.Sequential(modules[i], modules[i + 1])
                for i in range(0, len(modules) - 1, 2)] + [modules[-1]]
    if args.model == "transformer-l":
        return ([TokenEmbedding(model)] + list(model.layers) +
                [torch.nn.Sequential(model.norm, model.projection)])
    return ([AmoebaStem(model.stem)] + [AmoebaCellLayer(c) for c in model.cells] +
            [AmoebaHead(model.classifier)])


def stage_ranks(args):
    """The rank of each stage, in stage order."""
    K, placement = args.K, SCHEDULES[args.schedule][1]
    if placement == "one":
        return list(range(K))
    if placement == "loop":
        return [s % K for s in range(2 * K)]
    return list(range(K)) + list(reversed(range(K)))


def stage_modules(args, layers):
    """The layers cut into stages by --balance."""
    out, at = [], 0
    for count in args.balance:
        out.append(Stage(layers[at:at + count]))
        at += count
    return out


def loss_fn(output, target):
    """Cross-entropy, the mean over the samples (and a Transformer's positions)."""
    return torch.nn.functional.cross_entropy(output.reshape(-1, output.shape[-1]),
                                             target.reshape(-1))


def plain_run(args, steps, M):
    """Losses and step times of the plain model: the batch in M micro-batches, each one's loss
    weighted by its share and back-propagated in turn (the pipeline's arithmetic, BatchNorm's
    statistics per micro-batch included), one SGD step."""
    torch.set_num_threads(args.threads)
    model = Stage(engine_layers(args))
    inputs, targets = eager_reference.sample(args)
    pairs = list(zip(torch.tensor_split(inputs, M), torch.tensor_split(targets, M)))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    losses, times = [], []
    for _ in range(steps):
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for x, y in pairs:
            loss = loss_fn(model(x), y) * (len(y) / len(targets))
            loss.backward()
            total += loss.item()
        optimizer.step()
        times.append((time.perf_counter() - start) * 1e3)
        losses.append(total)
    return losses, times


def stage_examples(args, modules):
    """Each stage's input and output on one micro-batch. Given to PipelineStage, they spare its
    shape inference at run time, whose object messages need NumPy (which the venv lacks)."""
    inputs, _ = eager_reference.sample(args)
    example = (torch.tensor_split(inputs, args.M)[0],)
    out = []
    with torch.no_grad():
        for module in modules:
            result = module(*example)
            result = result if isinstance(result, tuple) else (result,)
            out.append((example, result))
            example = result
    return out


def make_schedule(args, rank):
    layers = engine_layers(args)  # every rank builds all, seeded alike, and keeps its own
    modules = stage_modules(args, layers)
    examples = stage_examples(args, modules)
    ranks = stage_ranks(args)
    stage_class = SelfSendFreeStage if "self-send" in args.workaround else PipelineStage
    stages = [stage_class(modules[s], s, len(modules), torch.device("cpu"),
                          input_args=examples[s][0], output_args=examples[s][1])
              for s in range(len(modules)) if ranks[s] == rank]
    schedule_class = SCHEDULES[args.schedule][0]
    single = issubclass(schedule_class, PipelineScheduleSingle)  # takes one stage, not a list
    schedule = schedule_class(stages[0] if single else stages, args.M, loss_fn=loss_fn)
    params = [p for stage in stages for p in stage.submod.parameters()]
    return schedule, stages, torch.optim.SGD(params, lr=args.lr)


def rank_main(rank, args, port, out_dir):
    """One rank: its stages, every step in order, the step's loss where it holds the last stage."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=args.K,
                            timeout=datetime.timedelta(seconds=args.comm_timeout))
    try:
        schedule, stages, optimizer = make_schedule(args, rank)
        inputs, targets = eager_reference.sample(args)
        holds_first = any(s.is_first for s in stages)
        holds_last = any(s.is_last for s in stages)
        losses, times = [], []
        for _ in range(args.check_steps + args.steps):
            dist.barrier()
            start = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            step_losses = [] if holds_last else None
            schedule.step(*([inputs] if holds_first else []),
                          target=targets if holds_last else None, losses=step_losses)
            optimizer.step()
            dist.barrier()
            times.append((time.perf_counter() - start) * 1e3)
            if holds_last:
                losses.append(torch.stack(step_losses).mean().item())
        result = {"losses": losses, "step_ms": times}
    except Exception as error:  # recorded for the driver, one line
        traceback.print_exc()
        result = {"error": f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"}
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pipeline_run(args):
    """Spawns the K ranks; the losses of the rank holding the last stage, rank 0's step times."""
    with tempfile.TemporaryDirectory() as out_dir:
        mp.spawn(rank_main, args=(args, free_port(), out_dir), nprocs=args.K, join=True)
        ranks = []
        for r in range(args.K):
            with open(os.path.join(out_dir, f"rank{r}.json")) as f:
                ranks.append(json.load(f))
    # A rank's own failure first: its peers' errors only say that it went away.
    errors = sorted((r["error"] for r in ranks if "error" in r), key=lambda e: "by peer" in e)
    if errors:
        raise RuntimeError(errors[0])
    last = stage_ranks(args)[-1]
    return ranks[last]["losses"], ranks[0]["step_ms"]


def check_losses(args, losses, reference):
    """The first --check-steps losses against the plain model's, by relative difference."""
    worst = max(abs(a - b) / abs(b) for a, b in zip(losses, reference))
    return {"steps": len(reference), "pipelined": losses[:len(reference)],
            "plain": reference, "worst_relative": worst, "passed": worst <= args.tolerance}


def main():
    args = parse_args()
    result = {"contender": "plain" if args.plain else args.schedule, "torch": torch.__version__,
              "workarounds": args.workaround}
    try:
        if args.plain:
            losses, times = plain_run(args, args.check_steps + args.steps, args.M)
        else:
            reference, _ = plain_run(args, args.check_steps, args.M)
            losses, times = pipeline_run(args)
            result["check"] = check_losses(args, losses, reference)
            if not result["check"]["passed"]:
                raise RuntimeError(f"its losses {result['check']['pipelined']} are not the plain "
                                   f"model's {reference}")
    except Exception as error:
        result["error"] = str(error).splitlines()[0] if str(error) else type(error).__name__
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
        print(f"theirs.py: {args.schedule if not args.plain else 'plain'} failed: "
              f"{result['error']}", file=sys.stderr)
        return 3
    result.update(losses=losses, step_ms=times[args.check_steps:],
                  median_step_ms=statistics.median(times[args.check_steps:]))
    with open(args.json, "w") as f:
        json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
