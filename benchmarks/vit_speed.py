"""Inference and training speed of our ViT against ``transformers.ViTForImageClassification``, same weights.

Compares, in one process and side by side, Hugging Face's ``ViTForImageClassification`` in the ViT-Ti/16
layout at 224² (192 dimensions, 12 layers, 3 heads, FFN 768, exact GELU, LayerNorm eps 1e-12, 1,000
classes, 5.7 M parameters; its own random initialisation, saved with ``save_pretrained`` and loaded back
with ``attn_implementation="sdpa"``) and our :class:`vaswani.models.vit.ViT` built from the same folder
through ``vaswani.interop.vit`` (``config_from_hf`` + ``state_from_hf``: q, k and v fused into one
projection, as every import does). Before timing it checks that both give the same logits (eval mode,
fp32) and have the same parameter count.

Inputs are batches of 32 random images (N(0, 1) pixel values, as normalised images are), 3 × 224 × 224;
4 batches used in turn. It measures, in fp32 and under bf16 autocast:

1. **inference images/s**: one forward (the logits) in eval mode under ``torch.inference_mode``;
2. **training images/s** (steps/s = images/s ÷ 32): the forward in train mode (dropout 0 in both, ViT's
   default), cross-entropy on random labels, backward, and a ``torch.optim.AdamW`` step (lr 1e-3, weight
   decay 0.05, fused) over every parameter; each side has its own optimizer;
3. with ``--compile``, **training images/s through ``torch.compile``** (inductor, ``dynamic=True``), in
   rows of their own: ours through the trainer's ``--compile`` path
   (``vaswani.training.compilation.compile_for_training``), Hugging Face's model through
   ``torch.compile`` with the same settings; each compiled in its warm-up calls;
4. **peak memory of training**: each side trains a few steps in a fresh (spawned) process, which reports
   the growth of its resident size over the built model (``VmRSS`` → ``VmHWM``; on a GPU the allocator's
   peak), lower is better.

After warm-up, calls are timed one by one in A B B A order, so that a busy neighbour hits both alike; the
figures are medians and each ratio is the median of the per-pair ratios ours/HF. Target (from the issue):
ours/HF >= 1.2 for inference and training in fp32.

    python benchmarks/vit_speed.py                # ViT-Ti/16 at 224², batch 32, 6 timed calls each
    python benchmarks/vit_speed.py --quick        # smoke run: a tiny ViT, batch 4, seconds
    python benchmarks/vit_speed.py --fp32         # fp32 only (--bf16: bf16 autocast only)
    python benchmarks/vit_speed.py --threads 1 --clock cpu   # steadiest on a busy machine
    python benchmarks/vit_speed.py --fp32 --compile   # and the training step through torch.compile
    python benchmarks/vit_speed.py --device cuda  # on a GPU (wall clock, synchronised)
"""

from __future__ import annotations

import argparse
import datetime
import multiprocessing
import os
import platform
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from timing import (
    Row,
    add_clock_flag,
    autocast,
    available_cores,
    bench_device,
    comparison_table,
    device_description,
    interleave,
    memory_around,
    record_rows,
    synced_clock,
    use_clock,
)
from torch import Tensor, nn

from vaswani.interop.common import read_hf_config, read_hf_weights
from vaswani.interop.vit import config_from_hf, state_from_hf
from vaswani.models.vit import ViT
from vaswani.training.compilation import BACKEND, CompiledModel, compile_for_training

try:  # the `compare` extra: pip install -e .[compare]
    import transformers
except ImportError as exc:
    MISSING: str | None = exc.name or str(exc)
else:
    MISSING = None

VIT_TI = {
    "hidden_size": 192, "num_hidden_layers": 12, "num_attention_heads": 3, "intermediate_size": 768,
    "image_size": 224, "patch_size": 16, "num_labels": 1000,
}  # fmt: skip
QUICK = {**VIT_TI, "num_hidden_layers": 2, "image_size": 64, "num_labels": 10}
SIDES = ("ours", "HF")
LR, WEIGHT_DECAY = 1e-3, 0.05
N_BATCHES = 4
MAX_DIFF = 1e-4  # logits, ours against HF, fp32
TARGET = 1.2  # ours / HF images/s in fp32, inference and training


def quiet_transformers() -> None:
    """No warnings or progress bars from ``transformers``."""
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()


def load(side: str, folder: Path, device: torch.device) -> nn.Module:
    """``side``'s model of the ViT ``folder`` on ``device``."""
    if side == "ours":
        tensors, _ = read_hf_weights(folder)
        cfg = config_from_hf(read_hf_config(folder))
        model: nn.Module = ViT(cfg, int(tensors["classifier.weight"].shape[0]))
        model.load_state_dict(state_from_hf(tensors, cfg), strict=True)
        return model.to(device)
    hf = transformers.ViTForImageClassification.from_pretrained(
        folder, attn_implementation="sdpa", dtype=torch.float32, local_files_only=True
    )
    return hf.to(device)


def logits_of(side: str, model: nn.Module, pixels: Tensor) -> Tensor:
    return model(pixels) if side == "ours" else model(pixel_values=pixels).logits


@dataclass(frozen=True)
class Inputs:
    """The shared batches: ``pixels`` (batch, 3, H, W) and random class ids ``labels`` (batch,)."""

    pixels: list[Tensor]
    labels: list[Tensor]

    @classmethod
    def random(cls, batch: int, size: int, n_classes: int, device: torch.device) -> Inputs:
        g = torch.Generator().manual_seed(0)
        pixels = [torch.randn(batch, 3, size, size, generator=g).to(device) for _ in range(N_BATCHES)]
        labels = [torch.randint(0, n_classes, (batch,), generator=g).to(device) for _ in range(N_BATCHES)]
        return cls(pixels, labels)


class Trainer:
    """A model in train mode and its AdamW: :meth:`step` is one training step on batch ``index``."""

    def __init__(self, side: str, model: nn.Module, inputs: Inputs, bf16: bool, device: torch.device) -> None:
        self.side, self.model, self.inputs, self.bf16, self.device = side, model.train(), inputs, bf16, device
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY, fused=True)

    def step(self, index: int) -> None:
        with autocast(self.bf16, self.device.type):
            logits = logits_of(self.side, self.model, self.inputs.pixels[index])
        loss = F.cross_entropy(logits.float(), self.inputs.labels[index])
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


def compiled(side: str, model: nn.Module) -> nn.Module:
    """``side``'s model through ``torch.compile`` for training: ours by the trainer's ``--compile``
    path, Hugging Face's by ``torch.compile`` with the same backend and ``dynamic=True``."""
    if side == "ours":
        return compile_for_training(model)
    return torch.compile(model, backend=BACKEND, dynamic=True)  # type: ignore[return-value]


def inference(
    side: str, model: nn.Module, inputs: Inputs, bf16: bool, device: torch.device
) -> Callable[[int], None]:
    """The call that classifies batch ``index`` in eval mode under ``torch.inference_mode``."""

    def call(index: int) -> None:
        with torch.inference_mode(), autocast(bf16, device.type):
            logits_of(side, model, inputs.pixels[index])

    return call


@dataclass
class Timed:
    """One side's calls of ``work`` (given the batch index), in turn over the batches; images/s of each."""

    work: Callable[[int], None]
    batch: int
    device: torch.device
    rates: list[float] = field(default_factory=list)
    calls: int = 0

    def run(self, n: int = 1, timed: bool = True) -> None:
        for _ in range(n):
            index = self.calls % N_BATCHES
            self.calls += 1
            start = synced_clock(self.device)
            self.work(index)
            elapsed = synced_clock(self.device) - start
            if timed:
                self.rates.append(self.batch / elapsed)


def compare(label: str, precision: str, works: dict[str, Callable[[int], None]], args: argparse.Namespace,
            device: torch.device, target: str = "") -> Row:  # fmt: skip
    """Time both sides' ``works`` in A B B A order after the warm-up calls; their row."""
    ours, hf = (Timed(works[side], args.batch, device) for side in SIDES)
    interleave(lambda: ours.run(args.warmup, timed=False), lambda: hf.run(args.warmup, timed=False), 1)
    interleave(ours.run, hf.run, args.reps)
    row = Row(label, precision, ours.rates, hf.rates, target)
    ours_rate, hf_rate = row.cells()
    print(f"[{label}, {precision}] ours {ours_rate}, HF {hf_rate}, ours/HF {row.ratio:.3f}", flush=True)
    return row


def compare_compiled(models: dict[str, nn.Module], inputs: Inputs, bf16: bool, args: argparse.Namespace,
                     device: torch.device, target: str) -> Row:  # fmt: skip
    """The training row of both sides through ``torch.compile`` (:func:`compiled`); an error where
    ours fell back to eager (the row would not be what it says)."""
    precision = "bf16" if bf16 else "fp32"
    trainers = {side: Trainer(side, compiled(side, models[side]), inputs, bf16, device) for side in SIDES}
    label = f"training images/s, torch.compile (steps/s = ÷ {args.batch})"
    row = compare(label, precision, {side: t.step for side, t in trainers.items()}, args, device, target)
    ours = trainers["ours"].model
    if not (isinstance(ours, CompiledModel) and ours.compiled):
        raise RuntimeError("our model fell back to eager: the compiled row would be the eager one")
    return row


def memory_child(side: str, folder: Path, batch: int, size: int, steps: int, threads: int, bf16: bool,
                 device_name: str) -> tuple[int, int]:  # fmt: skip
    """In a fresh process: train ``side``'s model ``steps`` steps; memory before and at the peak, KiB."""
    torch.set_num_threads(threads)
    quiet_transformers()
    device = torch.device(device_name)
    model = load(side, folder, device)
    n_classes = len(read_hf_config(folder)["id2label"])
    trainer = Trainer(side, model, Inputs.random(batch, size, n_classes, device), bf16, device)

    def train() -> None:
        for _ in range(steps):
            trainer.step(0)

    return memory_around(device, train)


def bench_memory(folder: Path, args: argparse.Namespace, size: int, threads: int, bf16: bool,
                 device: torch.device) -> Row:  # fmt: skip
    """Peak memory growth of training, each side in its own spawned process, in MiB."""
    mib: dict[str, float] = {}
    steps = 1 if args.quick else 3
    for side in SIDES:
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            before, peak = pool.submit(
                memory_child, side, folder, args.batch, size, steps, threads, bf16, str(device)
            ).result()
        mib[side] = (peak - before) / 1024
        print(
            f"[memory, {'bf16' if bf16 else 'fp32'}] {side}: +{mib[side]:,.0f} MiB while training", flush=True
        )
    what = "RSS" if device.type == "cpu" else "allocated"
    label = f"training peak {what} growth, MiB (lower is better)"
    return Row(label, "bf16" if bf16 else "fp32", [mib["ours"]], [mib["HF"]])


def run(args: argparse.Namespace, folder: Path, threads: int, device: torch.device) -> None:
    """The benchmark on the ViT ``folder``; prints the progress and the table."""
    config = read_hf_config(folder)
    size, n_classes = int(config["image_size"]), len(config["id2label"])
    models = {side: load(side, folder, device) for side in SIDES}
    n_params = {side: sum(p.numel() for p in model.parameters()) for side, model in models.items()}
    if n_params["ours"] != n_params["HF"]:
        raise RuntimeError(f"parameter counts differ: {n_params}")
    inputs = Inputs.random(args.batch, size, n_classes, device)
    with torch.inference_mode():
        diff = float(
            (logits_of("ours", models["ours"].eval(), inputs.pixels[0])
             - logits_of("HF", models["HF"].eval(), inputs.pixels[0])).abs().max()
        )  # fmt: skip
    name = "tiny ViT (--quick)" if args.quick else "ViT-Ti/16"
    c = config
    described = (
        f"{name} at {size}²: {c['num_hidden_layers']} layers, {c['num_attention_heads']} heads, "
        f"d {c['hidden_size']}, FFN {c['intermediate_size']}, {n_classes} classes, "
        f"{n_params['ours']:,} parameters; batch {args.batch}"
    )
    print(f"{described}\nmax |ours - HF| of the logits, fp32: {diff:.1e}", flush=True)
    if diff >= MAX_DIFF:
        raise RuntimeError(f"ours and HF disagree by {MAX_DIFF} or more: {diff:.1e}")
    start = time.perf_counter()
    rows = []
    for bf16 in args.precisions:
        precision = "bf16" if bf16 else "fp32"
        target = f">= {TARGET}" if not bf16 else ""
        infer = {side: inference(side, models[side].eval(), inputs, bf16, device) for side in SIDES}
        rows.append(compare("inference images/s", precision, infer, args, device, target))
        steps = {side: Trainer(side, models[side], inputs, bf16, device).step for side in SIDES}
        rows.append(
            compare(f"training images/s (steps/s = ÷ {args.batch})", precision, steps, args, device, target)
        )
        if args.compile:
            rows.append(compare_compiled(models, inputs, bf16, args, device, target))
        rows.append(bench_memory(folder, args, size, threads, bf16, device))
    print(f"\ntotal {time.perf_counter() - start:.0f} s\n")
    now = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    notes = (
        f"{described}; max |ours - HF| of the logits {diff:.1e}\n\n"
        f"{device_description(device)}; torch {torch.__version__}, transformers {transformers.__version__}, "
        f"{threads} threads, {args.clock} clock, {os.cpu_count()} CPUs, python {platform.python_version()}, "
        f"{now}; spread: interquartile range of the per-pair ratios (min–max under 4 pairs)"
    )
    record_rows(rows)
    print(comparison_table(rows, notes))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="a tiny ViT, batch 4, 1 rep: a smoke run")
    parser.add_argument("--reps", type=int, help="timed calls per model and benchmark (6; --quick 1)")
    parser.add_argument("--batch", type=int, help="images a batch (32; --quick 4)")
    parser.add_argument("--threads", type=int, help="torch threads (default: all cores)")
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda or cuda:N")
    parser.add_argument("--compile", action="store_true", help="add the training rows through torch.compile")
    only = parser.add_mutually_exclusive_group()
    only.add_argument("--fp32", action="store_true", help="fp32 only")
    only.add_argument("--bf16", action="store_true", help="bf16 autocast only")
    add_clock_flag(parser)
    args = parser.parse_args(argv)
    if MISSING:
        print(f"skipped: no module {MISSING!r} (pip install -e .[compare])")
        return
    device = bench_device(args.device, args.clock, "vit_speed.py")
    use_clock(args.clock)
    threads = args.threads or available_cores()
    torch.set_num_threads(threads)
    quiet_transformers()
    args.reps = args.reps or (1 if args.quick else 6)
    args.batch = args.batch or (4 if args.quick else 32)
    args.warmup = 1 if args.quick else 2
    args.precisions = [False] if args.fp32 else [True] if args.bf16 else [False, True]
    print(f"{device_description(device)}; torch {torch.__version__}, {threads} threads", flush=True)
    load_average = os.getloadavg()[0]
    if load_average > 0.5 and args.clock == "wall" and device.type == "cpu":
        print(
            f"note: load average {load_average:.1f} before the run: other processes compete for the cores; "
            "if the spreads are wide, rerun with --threads 1 --clock cpu",
            flush=True,
        )
    with tempfile.TemporaryDirectory() as tmp:
        torch.manual_seed(0)
        config = transformers.ViTConfig(**(QUICK if args.quick else VIT_TI))
        transformers.ViTForImageClassification(config).save_pretrained(tmp)
        run(args, Path(tmp), threads, device)


if __name__ == "__main__":
    main()
