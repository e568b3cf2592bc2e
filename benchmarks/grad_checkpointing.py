"""Peak memory and step time of a GPT training step with and without gradient checkpointing.

The GPT benchmark shape of ``gpt_speed.py`` (6 layers, 6 heads, 384 dims, context 256, 65
characters of vocabulary, dropout 0) on its batch of 16 × 256 random ids: forward, mean
cross-entropy, backward, the trainer's fused AdamW. For each of fp32 and bf16 autocast, without and
with ``set_grad_checkpointing`` (each configuration in a fresh spawned process):

- on the CPU, the growth of the peak resident set size (``VmHWM``) over the size before the first
  step (the model and its batch built), and the bytes autograd saves for the backward pass of one
  step, counted by ``torch.autograd.graph.saved_tensors_hooks`` (each storage once, parameters
  left out; under checkpointing the hook sees what is kept between the blocks, not what a block
  saves while it is recomputed);
- on CUDA, ``torch.cuda.max_memory_allocated`` over the allocation before the first step;
- the median step time, whose ratio is the cost of recomputing each block's forward pass.

    python benchmarks/grad_checkpointing.py              # about a minute and a half on 2 cores
    python benchmarks/grad_checkpointing.py --quick      # a tiny model, seconds
    python benchmarks/grad_checkpointing.py --device cuda --steps 10
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from timing import available_cores, device_description, memory_kib
from torch import Tensor

from vaswani.config import ModelConfig, TrainConfig
from vaswani.layers.blocks import set_grad_checkpointing
from vaswani.models.gpt import GPT
from vaswani.runtime import native_bf16, resolve_device
from vaswani.training.optimizer import make_optimizer

FULL = dict(d_model=384, n_heads=6, d_ff=1536, n_layers=6, max_len=256)
QUICK = dict(d_model=64, n_heads=2, d_ff=256, n_layers=2, max_len=64)
VOCAB = 65
TRAIN = TrainConfig(optimizer="adamw", lr=3e-4, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1, warmup_steps=0)
MIB = 1024 * 1024


@dataclass(frozen=True)
class Job:
    """One configuration, run in its own process."""

    shape: tuple[tuple[str, int], ...]
    batch: int
    bf16: bool
    checkpointing: bool
    steps: int
    threads: int
    device: str


@dataclass(frozen=True)
class Result:
    """What one configuration measured: memory in MiB, seconds per step."""

    peak_growth: float  # RSS growth (CPU) or max_memory_allocated growth (CUDA)
    saved: float  # bytes saved for backward (CPU only; 0 on CUDA)
    step_seconds: float


def saved_bytes(build: Callable[[], object], parameters: set[int]) -> int:
    """The bytes of the tensors autograd saves for backward while ``build()`` builds a graph (each
    storage once; the storages whose addresses are in ``parameters`` left out)."""
    storages: dict[int, int] = {}

    def pack(t: Tensor) -> Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in parameters:
            storages[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        build()
    return sum(storages.values())


def run_job(job: Job) -> Result:
    """In a fresh process: build the model, time ``job.steps`` training steps after one warm-up
    step, and measure the peak memory and the saved bytes of a step."""
    torch.set_num_threads(job.threads)
    device = resolve_device(job.device)
    torch.manual_seed(0)
    cfg = ModelConfig.preset(
        "gpt-mini", src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, dropout=0.0, **dict(job.shape)
    )
    model = GPT(cfg).to(device).train()
    if job.checkpointing:
        set_grad_checkpointing(model)
    optimizer = make_optimizer(model, TRAIN)
    ids = torch.randint(0, VOCAB, (job.batch, cfg.max_len + 1), generator=torch.Generator().manual_seed(1))
    ids = ids.to(device)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}

    def forward() -> Tensor:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=job.bf16):
            logits = model(ids[:, :-1])
        return F.cross_entropy(logits.flatten(0, 1).float(), ids[:, 1:].flatten())

    def step() -> None:
        forward().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    if device.type == "cuda":
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    else:
        before = memory_kib("VmRSS") * 1024
    step()
    seconds = []
    for _ in range(job.steps):
        start = time.perf_counter()
        step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
    if device.type == "cuda":
        return Result((torch.cuda.max_memory_allocated() - before) / MIB, 0.0, statistics.median(seconds))
    peak = memory_kib("VmHWM") * 1024
    losses: list[Tensor] = []
    kept = saved_bytes(lambda: losses.append(forward()), params)
    losses[0].backward()
    optimizer.zero_grad(set_to_none=True)
    return Result((peak - before) / MIB, kept / MIB, statistics.median(seconds))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="a tiny model (smoke run)")
    parser.add_argument(
        "--steps", type=int, default=3, help="timed steps per configuration (after 1 warm-up)"
    )
    parser.add_argument("--threads", type=int, default=available_cores())
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N")
    args = parser.parse_args()
    shape = tuple((QUICK if args.quick else FULL).items())
    batch = 4 if args.quick else 16
    device = resolve_device(args.device)
    where = device_description(device)
    print(
        f"# {where}; torch {torch.__version__}; {args.threads} threads; native bf16: {native_bf16()}; "
        f"GPT {dict(shape)}, batch {batch} × {dict(shape)['max_len']}; {args.steps} timed steps",
        flush=True,
    )
    results: dict[tuple[bool, bool], Result] = {}
    for bf16 in (False, True):
        for checkpointing in (False, True):
            job = Job(shape, batch, bf16, checkpointing, args.steps, args.threads, args.device)
            with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
                results[bf16, checkpointing] = result = pool.submit(run_job, job).result()
            print(f"# {'bf16' if bf16 else 'fp32'} checkpointing={checkpointing}: {result}", flush=True)
    peak = "peak allocated growth" if device.type == "cuda" else "peak RSS growth"
    print(
        f"\n| precision | {peak}, MiB: without → with (ratio) | saved for backward, MiB: without → with "
        "(ratio) | step s: without → with (ratio) |"
    )
    print("| --- | --- | --- | --- |")
    for bf16 in (False, True):
        off, on = results[bf16, False], results[bf16, True]
        cells = [
            f"{a:,.0f} → {b:,.0f} ({b / a:.2f})" if a else "n/a"
            for a, b in ((off.peak_growth, on.peak_growth), (off.saved, on.saved))
        ]
        time_cell = (
            f"{off.step_seconds:.2f} → {on.step_seconds:.2f} ({on.step_seconds / off.step_seconds:.2f})"
        )
        print(f"| {'bf16' if bf16 else 'fp32'} | {cells[0]} | {cells[1]} | {time_cell} |")


if __name__ == "__main__":
    main()
