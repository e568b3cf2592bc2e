"""Batch-1 decoding against the memory roofline: how near vaswani's greedy decoding of a GPT-2-124M
shape (random weights) comes to what the machine's memory bandwidth allows.

At batch 1 a decoding step does two FLOPs for each weight it reads, far too few to keep the cores
busy: it waits on memory. Its ceiling is

    roofline tokens/s = B / bytes read per token

with B the copy bandwidth measured in the same run (STREAM's copy: ``dst ← src`` over two buffers of
``--buffer-mib`` MiB each, far larger than the caches, on the same torch threads; B = 2 · bytes /
seconds, one read and one write) and the bytes read per token:
every weight matrix, bias and norm parameter once (the LM head's table whole, tied or not), one row
of each embedding table, and the KV cache of the tokens so far, averaged over the generated tokens.
Three weight formats: fp32, bf16 (the weights cast, as ``--dtype bf16``) and weight-only int8 (int8
matrices with per-row fp32 scales, fp32 activations, as ``--quantize int8``), eagerly, and fp32
and int8 compiled as ``--compile`` decodes (a static cache, the step one graph whose products read
the blocked copies of the weights: ``vaswani.layers.kernels.blocked_product``; the untimed first
run compiles).

B is measured around every timed run: the best of three copies just before it and of three just
after it, each run's roofline taken from the better of the two. On a shared machine the bandwidth a
process gets moves with its neighbours (on the 2-core AMD EPYC VM the copy figure moved between 34
and 52 GB/s within one run of this benchmark, and over three runs the best copy moved by 44% where
the compiled fp32 rate moved by a tenth), so a run is held against the bandwidth of its own
moment. Each row prints the median tokens/s, the median roofline and the median of the runs'
shares, which ``run_all.py`` records (target: fp32, eager or compiled, at 60% of its roofline or
more), and, stricter, the median tokens/s against the best copy of the whole benchmark.

    python benchmarks/roofline.py                # GPT-2-124M: 16-token prompt, 64 new tokens
    python benchmarks/roofline.py --threads 1
    python benchmarks/roofline.py --quick        # a smoke run on a tiny shape
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import statistics
import time

import torch
from timing import available_cores, cpu_description, record
from torch import Tensor, nn

from vaswani.generation.compiled import CompiledDecoding, lm_compiled_next_logits
from vaswani.generation.lm import lm_next_logits
from vaswani.generation.sampling import generate
from vaswani.interop.gpt2 import config_from_hf
from vaswani.layers.quantize import Int8Linear, prepare_weights
from vaswani.models.gpt import GPT

GPT2_124M = {"n_layer": 12, "n_head": 12, "n_embd": 768, "n_positions": 1024, "vocab_size": 50257}
QUICK = {"n_layer": 2, "n_head": 2, "n_embd": 64, "n_positions": 64, "vocab_size": 65}
FORMATS = {  # (--dtype, --quantize, --compile)
    "fp32": ("fp32", None, False),
    "fp32, compiled": ("fp32", None, True),
    "bf16": ("bf16", None, False),
    "int8": (None, "int8", False),
    "int8, compiled": (None, "int8", True),
}
TARGET = 0.6  # fp32 tokens/s over its roofline
NEVER_EOS = -1  # generate() runs to max_new_tokens: argmax never returns -1


class CopyMeter:
    """STREAM's copy over two float32 buffers of ``mib`` MiB, allocated (and faulted in) once."""

    def __init__(self, mib: int) -> None:
        self.src = torch.ones(mib * 2**20 // 4)
        self.dst = torch.empty_like(self.src)
        self.dst.copy_(self.src)
        self.seen: list[float] = []

    def bandwidth(self, reps: int = 3) -> float:
        """Bytes/s of ``dst.copy_(src)``: 2 · bytes / seconds (each byte read once and written
        once), the best of ``reps`` copies; every figure is kept in :attr:`seen`."""
        best = 0.0
        for _ in range(reps):
            start = time.perf_counter()
            self.dst.copy_(self.src)
            best = max(best, 2 * self.src.nbytes / (time.perf_counter() - start))
        self.seen.append(best)
        return best


def weight_bytes(model: nn.Module) -> int:
    """Bytes of ``model``'s weights that one decoding step reads: every parameter once (a tied table
    once) and an int8 layer's matrix, scales and bias, except an embedding table that no linear
    layer also uses, of which the step reads one row."""
    products = {
        id(m.weight) for m in model.modules() if isinstance(m, nn.Linear)
    }  # tables that are also a head: read whole
    seen: set[int] = set()
    total = 0
    for module in model.modules():
        tensors = list(module.parameters(recurse=False))
        if isinstance(module, Int8Linear):
            tensors += [b for b in module.buffers(recurse=False) if b is not None]
        for t in tensors:
            if id(t) in seen:
                continue
            seen.add(id(t))
            embedding_row = isinstance(module, nn.Embedding) and id(t) not in products
            total += t[0].nbytes if embedding_row else t.nbytes
    return total


def cache_bytes(model: GPT, prompt: int, new_tokens: int, dtype: torch.dtype) -> float:
    """Mean bytes of keys and values a step reads while ``new_tokens`` follow a ``prompt``: token
    i (0-based) attends to prompt + i + 1 positions, each 2 · layers · d_model values of ``dtype``."""
    cfg = model.config
    per_position = 2 * cfg.n_layers * cfg.d_model * torch.finfo(dtype).bits // 8
    return per_position * (prompt + (new_tokens + 1) / 2)


def timed_generation(
    model: GPT, prompt: Tensor, new_tokens: int, reps: int, compiled: CompiledDecoding | None,
    meter: CopyMeter,
) -> tuple[list[float], list[float]]:  # fmt: skip
    """Greedy tokens/s, batch 1, with the KV cache (a static one, the steps ``compiled``, where
    given): ``reps`` runs after one untimed (which compiles); and the copy bandwidth of each run's
    moment: the better of ``meter``'s figures just before and just after it."""
    mask = torch.ones_like(prompt, dtype=torch.bool)
    rates, copies = [], []
    with torch.inference_mode():
        for rep in range(reps + 1):
            if rep:
                copies.append(meter.bandwidth())
            start = time.perf_counter()
            if compiled is None:
                next_logits = lm_next_logits(model, mask, use_cache=True)
            else:
                next_logits = lm_compiled_next_logits(model, mask, new_tokens, compiled)
            tokens = generate(next_logits, prompt, new_tokens, NEVER_EOS, 0).tokens
            elapsed = time.perf_counter() - start
            if tokens.shape != (1, new_tokens):
                raise RuntimeError(f"expected {new_tokens} new tokens, got {tuple(tokens.shape)}")
            if rep:
                rates.append(new_tokens / elapsed)
    copies.append(meter.bandwidth())
    return rates, [max(before, after) for before, after in itertools.pairwise(copies)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=available_cores(), help="torch threads (the cores)")
    parser.add_argument("--prompt", type=int, default=16, help="prompt tokens (16)")
    parser.add_argument("--new-tokens", type=int, default=64, help="generated tokens a run (64)")
    parser.add_argument("--reps", type=int, default=5, help="timed runs a format (5)")
    parser.add_argument("--buffer-mib", type=int, default=1024, help="each copy buffer, MiB (1024)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: a tiny shape, small buffers")
    args = parser.parse_args(argv)
    shape = QUICK if args.quick else GPT2_124M
    if args.quick:
        args.new_tokens, args.reps, args.buffer_mib = 8, 2, 64
    torch.set_num_threads(args.threads)
    print(f"{cpu_description()}, torch {torch.__version__}, python {platform.python_version()}")
    print(f"{args.threads} threads")
    print(f"load average at the start: {os.getloadavg()[0]:.2f}")
    shape_name = "GPT-2-124M" if not args.quick else "tiny GPT-2"
    print(
        f"{shape_name} shape: {shape['n_layer']} layers, d_model {shape['n_embd']}, "
        f"vocabulary {shape['vocab_size']:,}, random weights; batch 1, greedy, "
        f"{args.prompt}-token prompt, {args.new_tokens} new tokens\n"
    )
    meter = CopyMeter(args.buffer_mib)
    rows = []
    for name, (dtype, quantize, compile_steps) in FORMATS.items():
        torch.manual_seed(0)
        model = prepare_weights(
            GPT(config_from_hf({**shape, "resid_pdrop": 0.0, "attn_pdrop": 0.0})), quantize, dtype
        )
        act = torch.bfloat16 if dtype == "bf16" else torch.float32
        prompt = torch.randint(
            0, shape["vocab_size"], (1, args.prompt), generator=torch.Generator().manual_seed(1)
        )
        # --quick traces the compiled formats without inductor's C++ (seconds, not a minute each)
        compiled = CompiledDecoding("eager" if args.quick else None) if compile_steps else None
        rates, bandwidths = timed_generation(model, prompt, args.new_tokens, args.reps, compiled, meter)
        read = weight_bytes(model) + cache_bytes(model, args.prompt, args.new_tokens, act)
        rows.append((name, read, rates, [b / read for b in bandwidths]))
        del model
    best = max(meter.seen)
    print(
        f"copy bandwidth: best {best / 1e9:.1f} GB/s, lowest {min(meter.seen) / 1e9:.1f} GB/s "
        f"({len(meter.seen)} measurements, each the best of 3 copies of {args.buffer_mib} MiB, "
        "before and after every timed run)\n"
    )  # fmt: skip
    print(
        "| weights | MB read a token | tokens/s (median) | roofline tokens/s (median of the runs') "
        "| share of the roofline (median of the runs') | share of the best copy's roofline |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for name, read, rates, roofs in rows:
        rate = statistics.median(rates)
        share = statistics.median(r / roof for r, roof in zip(rates, roofs, strict=True))
        print(
            f"| {name} | {read / 1e6:.1f} | {rate:.1f} | {statistics.median(roofs):.1f} | {share:.0%} "
            f"| {rate / (best / read):.0%} |"
        )
        record(
            f"batch-1 greedy tokens/s of a {shape_name} shape against its memory roofline "
            f"(copy bandwidth of the run's moment ÷ bytes read a token)",
            name, rates, roofs, "roofline", f">= {TARGET}" if name.startswith("fp32") else "",
        )  # fmt: skip
    print(f"\nload average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
