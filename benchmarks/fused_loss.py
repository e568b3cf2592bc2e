"""The LM head and its cross-entropy: one chunked pass (``layers/cross_entropy.py``, what ``train lm``
uses) against the logits made whole then ``F.cross_entropy``, on a GPT training step.

The GPT benchmark shape of ``gpt_speed.py`` (6 layers, 6 heads, 384 dims, context 256, dropout 0),
batch 8 × 256, with the vocabulary of the shipped lm recipe (1,024 BPE pieces) and with GPT-2's
(50,257), fp32 and bf16 autocast. Per configuration:

- training tokens/s, the two ways interleaved (A B B A) in this process, the median of the paired
  ratios and their spread;
- the peak resident memory growth of a step, each way in a fresh spawned process (``VmHWM`` over
  the size before the first step), and the bytes autograd saves for the backward pass of one step.

    python benchmarks/fused_loss.py              # a few minutes on 2 cores
    python benchmarks/fused_loss.py --quick      # a tiny model, seconds
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
from concurrent.futures import ProcessPoolExecutor

import torch
import torch.nn.functional as F
from grad_checkpointing import saved_bytes
from timing import Row, available_cores, clock, cpu_description, interleave, memory_kib, record_rows
from torch import Tensor

from vaswani.config import ModelConfig, TrainConfig
from vaswani.models.gpt import GPT
from vaswani.training.optimizer import make_optimizer

FULL = dict(d_model=384, n_heads=6, d_ff=1536, n_layers=6, max_len=256)
QUICK = dict(d_model=64, n_heads=2, d_ff=256, n_layers=2, max_len=64)
VOCABS = (1024, 50257)
TRAIN = TrainConfig(optimizer="adamw", lr=3e-4, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1, warmup_steps=0)
MIB = 1024 * 1024


def setup(shape: dict[str, int], vocab: int, batch: int) -> tuple[GPT, torch.optim.Optimizer, Tensor]:
    torch.manual_seed(0)
    cfg = ModelConfig.preset("gpt-mini", src_vocab_size=vocab, tgt_vocab_size=vocab, dropout=0.0, **shape)
    model = GPT(cfg).train()
    ids = torch.randint(0, vocab, (batch, cfg.max_len + 1), generator=torch.Generator().manual_seed(1))
    return model, make_optimizer(model, TRAIN), ids


def loss_of(model: GPT, ids: Tensor, fused: bool, bf16: bool) -> Tensor:
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        if fused:
            return model(ids[:, :-1], targets=ids[:, 1:])
        logits = model(ids[:, :-1])
    return F.cross_entropy(logits.flatten(0, 1).float(), ids[:, 1:].flatten(), reduction="sum")


def step(model: GPT, optimizer: torch.optim.Optimizer, ids: Tensor, fused: bool, bf16: bool) -> None:
    loss_of(model, ids, fused, bf16).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def memory_child(
    shape: dict[str, int], vocab: int, batch: int, fused: bool, bf16: bool, threads: int
) -> tuple[float, float]:
    """In a fresh process: the peak RSS growth of two steps and the bytes saved for one backward, MiB."""
    torch.set_num_threads(threads)
    model, optimizer, ids = setup(shape, vocab, batch)
    before = memory_kib("VmRSS") * 1024
    for _ in range(2):
        step(model, optimizer, ids, fused, bf16)
    peak = memory_kib("VmHWM") * 1024
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    losses: list[Tensor] = []
    kept = saved_bytes(lambda: losses.append(loss_of(model, ids, fused, bf16)), params)
    return (peak - before) / MIB, kept / MIB


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="a tiny model (smoke run)")
    parser.add_argument("--steps", type=int, default=4, help="timed steps each way (after 1 warm-up)")
    parser.add_argument("--threads", type=int, default=available_cores())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    shape, batch = (QUICK, 2) if args.quick else (FULL, 8)
    vocabs = VOCABS[:1] if args.quick else VOCABS
    args.steps = 1 if args.quick else args.steps
    print(f"CPU: {cpu_description()}; torch {torch.__version__}; {args.threads} threads; GPT {shape}, "
          f"batch {batch} × {shape['max_len']}; {args.steps} timed steps each way", flush=True)  # fmt: skip
    rows: list[Row] = []
    memory_lines = []
    for vocab in vocabs:
        for bf16 in (False, True):
            precision = "bf16" if bf16 else "fp32"
            model, optimizer, ids = setup(shape, vocab, batch)
            rates: dict[bool, list[float]] = {True: [], False: []}

            def timed(fused: bool) -> None:
                start = clock()
                step(model, optimizer, ids, fused, bf16)  # noqa: B023
                rates[fused].append(ids[:, 1:].numel() / (clock() - start))  # noqa: B023

            interleave(lambda: timed(True), lambda: timed(False), 1)
            rates = {True: [], False: []}
            interleave(lambda: timed(True), lambda: timed(False), args.steps)
            rows.append(Row(f"train tokens/s, vocab {vocab:,}", precision, rates[True], rates[False]))
            mib = {}
            for fused in (False, True):
                with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
                    work = pool.submit(memory_child, shape, vocab, batch, fused, bf16, args.threads)
                    mib[fused] = work.result()
            rows.append(Row(f"step peak RSS growth MiB, vocab {vocab:,} (lower is better)", precision,
                            [mib[True][0]], [mib[False][0]]))  # fmt: skip
            memory_lines.append(
                f"| {vocab:,} | {precision} | {mib[False][1]:,.0f} → {mib[True][1]:,.0f} "
                f"| {mib[False][0]:,.0f} → {mib[True][0]:,.0f} |"
            )
            print(
                f"[{precision} vocab {vocab}] {rows[-2].cells()} tok/s fused/plain, memory {mib}", flush=True
            )
    record_rows(rows, "logits then F.cross_entropy")
    print("\n| benchmark | precision | fused (median) | plain (median) | fused/plain | spread |")
    print("|---|---|---:|---:|---:|---|")
    for r in rows:
        fused, plain = r.cells()
        ratios = [1 / x for x in r.ratios] if "lower is better" in r.benchmark else r.ratios
        shown = f"**{statistics.median(ratios):.2f}** | {min(ratios):.2f}–{max(ratios):.2f}"
        print(f"| {r.benchmark} | {r.precision} | {fused} | {plain} | {shown} |")
    print("\n(the ratio: fused / plain for a rate, plain / fused for memory; the spread: min–max)\n")
    print(
        "| vocab | precision | saved for backward MiB: plain → fused | peak RSS growth MiB: plain → fused |"
    )
    print("|---:|---|---|---|")
    print("\n".join(memory_lines))


if __name__ == "__main__":
    main()
