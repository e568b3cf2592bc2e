"""Compiled decoding on a static KV cache against Hugging Face ``generate``, same weights.

The GPT-2-shaped model of ``benchmarks/gpt_speed.py`` (6 layers, 6 heads, 384 dims, context 256,
65 characters of vocabulary; its own module is at its 400-line limit, so this one imports it):
greedy generation, batch 1, fp32, a 16-token prompt and 240 new tokens, three ways in one process:
ours eager (``lm_next_logits``, the growing cache), ours compiled
(:func:`vaswani.generation.compiled.lm_compiled_next_logits`: a static cache and the decoding step
through ``torch.compile`` with inductor), and ``GPT2LMHeadModel.generate``; all under
``torch.inference_mode``, timed in rounds that alternate their order, after one untimed run
each. The compilation (the first run of the compiled step) is timed apart and reported; the
tokens of the three are compared.

    python benchmarks/compiled_generation.py             # a few minutes on 2 busy cores
    python benchmarks/compiled_generation.py --quick     # a tiny model, a smoke run
    python benchmarks/compiled_generation.py --threads 1 --clock cpu   # steadiest on a busy machine
    python benchmarks/compiled_generation.py --backend aot_eager --reps 5 --threads 2
    python benchmarks/compiled_generation.py --threads 1 --profile     # and where the time goes

``--profile`` then runs each side once more under ``torch.profiler`` and prints, per generated
token, the operators called, the self CPU time and its share in matrix products (what fp32 weights
bound), and the operators that take the most of it: what limits each side.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import torch
import transformers
from gpt_speed import FULL, NEVER_EOS, NO_DROPOUT, NO_SPECIAL_TOKENS, QUICK, Setup, build_pair, hf_generate
from timing import (
    add_clock_flag,
    available_cores,
    bench_device,
    device_description,
    record,
    synced_clock,
    use_clock,
)
from torch import Tensor

from vaswani.generation.compiled import CompiledDecoding, lm_compiled_next_logits
from vaswani.generation.lm import lm_next_logits
from vaswani.generation.sampling import generate
from vaswani.models.gpt import GPT

TARGET = 2.0  # ours compiled / HF generated tokens/s, fp32, batch 1


def ours(model: GPT, prompt: Tensor, new_tokens: int, compiled: CompiledDecoding | None) -> Tensor:
    """``new_tokens`` greedy tokens (1, new_tokens) after ``prompt`` (1, t): eager, or compiled."""
    mask = torch.ones_like(prompt, dtype=torch.bool)
    if compiled is None:
        next_logits = lm_next_logits(model, mask, use_cache=True)
    else:
        next_logits = lm_compiled_next_logits(model, mask, new_tokens, compiled)
    return generate(next_logits, prompt, new_tokens, NEVER_EOS, 0).tokens


MATRIX_PRODUCTS = ("addmm", "aten::mm", "bmm", "linear", "matmul", "mkldnn", "onednn", "int8pack")
"""Operator names (substrings) of the matrix products, whose share of the time is the weights' part."""


def profiled(sides: dict[str, Callable[[], Tensor]], new_tokens: int) -> None:
    """Each side once under ``torch.profiler``: its operators and self CPU time per token."""
    from torch.profiler import ProfilerActivity, profile

    for name, run in sides.items():
        with torch.inference_mode(), profile(activities=[ProfilerActivity.CPU]) as prof:
            run()
        events = [e for e in prof.key_averages() if e.self_cpu_time_total > 0]
        total = sum(e.self_cpu_time_total for e in events)
        products = sum(e.self_cpu_time_total for e in events if any(k in e.key for k in MATRIX_PRODUCTS))
        calls = sum(e.count for e in events) / new_tokens
        print(
            f"\nprofile, {name}: {calls:,.0f} operator calls and {total / 1e3 / new_tokens:.2f} ms of "
            f"self CPU time a token (the profiler's own cost included), {products / total:.0%} of it in "
            "matrix products; the most:"
        )
        for e in sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:8]:
            share = e.self_cpu_time_total / total
            print(f"  {share:6.1%}  {e.count / new_tokens:6.1f} calls a token  {e.key}")


def main(argv: list[str] | None = None) -> None:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--quick", action="store_true", help="tiny model, 24 tokens: a smoke run")
    parser.add_argument("--reps", type=int, default=3, help="timed rounds (default 3)")
    parser.add_argument("--threads", type=int, help="torch threads (default: all cores)")
    parser.add_argument("--backend", default="inductor", help="torch.compile backend (default inductor)")
    parser.add_argument("--mode", help="torch.compile mode (reduce-overhead: CUDA graphs)")
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda or cuda:N")
    parser.add_argument("--profile", action="store_true", help="then each side under torch.profiler")
    add_clock_flag(parser)
    args = parser.parse_args(argv)
    device = bench_device(args.device, args.clock, "compiled_generation.py")
    use_clock(args.clock)
    threads = args.threads or available_cores()
    torch.set_num_threads(threads)
    transformers.logging.set_verbosity_error()
    shape, (prompt_len, new_tokens) = (QUICK, (8, 24)) if args.quick else (FULL, (16, 240))
    setup = Setup({**shape, **NO_DROPOUT, **NO_SPECIAL_TOKENS}, 1, prompt_len, new_tokens, device)
    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}, {threads} threads, "
        f"load average {os.getloadavg()[0]:.1f}; device {device} ({device_description(device)}); "
        f"backend {args.backend}, mode {args.mode}, {args.clock} clock",
        flush=True,
    )
    model, hf = build_pair(setup)
    model.eval()
    hf.eval()
    g = torch.Generator().manual_seed(2)
    prompt = torch.randint(0, int(shape["vocab_size"]), (1, prompt_len), generator=g).to(device)
    compiled = CompiledDecoding(args.backend, args.mode)
    sides = {
        "eager": lambda: ours(model, prompt, new_tokens, None),
        "compiled": lambda: ours(model, prompt, new_tokens, compiled),
        "HF": lambda: hf_generate(hf, prompt, new_tokens),
    }
    rates: dict[str, list[float]] = {name: [] for name in sides}
    tokens: dict[str, Tensor] = {}
    started = time.perf_counter()
    for rep in range(args.reps + 1):
        order = list(sides) if rep % 2 == 0 else list(reversed(sides))
        for name in order:
            start = synced_clock(device)
            with torch.inference_mode():
                tokens[name] = sides[name]()
            seconds = synced_clock(device) - start
            if rep:  # the first round is untimed: it compiles
                rates[name].append(new_tokens / seconds)
            print(f"[round {rep}] {name}: {new_tokens / seconds:,.1f} tokens/s", flush=True)
    if compiled.failure is not None:
        print(f"compilation failed: {compiled.failure}")
    median = {name: statistics.median(r) for name, r in rates.items()}
    ratios = sorted(c / h for c, h in zip(rates["compiled"], rates["HF"], strict=True))
    same = {name: bool(torch.equal(tokens[name], tokens["HF"])) for name in ("eager", "compiled")}
    for name in ("eager", "compiled"):
        benchmark = f"GPT greedy generation, batch 1, {name} vs generate(), tokens/s"
        target = f">= {TARGET}" if name == "compiled" else ""
        record(benchmark, "fp32", rates[name], rates["HF"], target=target)
    print(f"compile time (first run of the step, one bucket): {compiled.compile_seconds:.1f} s")
    print(f"total {time.perf_counter() - started:.0f} s\n")
    print("| greedy, batch 1, fp32 | tokens/s (median) | / HF |\n|---|---:|---:|")
    for name in sides:
        print(f"| {name} | {median[name]:,.1f} | {median[name] / median['HF']:.2f} |")
    print(
        f"\ncompiled/HF per round: {', '.join(f'{r:.2f}' for r in ratios)} (target >= {TARGET}); "
        f"same tokens as HF: eager {same['eager']}, compiled {same['compiled']}; "
        f"{prompt_len} + {new_tokens} tokens, {args.reps} timed rounds"
    )
    if args.profile:
        profiled(sides, new_tokens)


if __name__ == "__main__":
    main()
