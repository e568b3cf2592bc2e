"""Long contexts: the attention of one causal self-attention layer, full attention against the
masked window against local attention in blocks: forward + backward time, and the memory autograd
keeps for the backward pass.

The layer is ``MultiHeadAttention`` (d_model 256, 4 heads of 64, causal, no dropout, fp32); what is
measured is its attention, ``attend(q, k, v, mask)``: softmax(Q Kᵀ / 8) V from the heads of random
projections (batch, L, 3 · 256) to the output heads, the projections left out (they cost the same
on every path: about 0.5 s of forward + backward for the 16,384 tokens here). Batch · L = 16,384
tokens per step, for L = 256, 512, …, 16,384, in three ways:

- ``full``: no window, SDPA told ``is_causal`` (on the CPU its flash kernel, which keeps no L × L
  tensor either);
- ``masked w``: the window as today's dense path lays it, a band mask (L × L) over SDPA's scores:
  the same layer with the banded path turned off;
- ``local w``: the same layer taking :mod:`vaswani.layers.local`, O(L · w),

for w = 128 and 256 (the convention of ``attn_window``: the query and the w keys before it).

Time: the best of ``--repeats`` forward + backward passes (wall clock, after one untimed pass at
the smallest length). Memory: the bytes of the tensors autograd saves for the backward pass
(``torch.autograd.graph.saved_tensors_hooks``, each storage once; the projections' output, which
every path keeps, included): the activation memory that a training step keeps per layer; the
temporaries of one pass (the dense path's int64 distance matrix while it builds its mask, for
one) are not counted. Targets (the issue's): at L = 8192 the local path at least 4× faster and 4×
smaller than both others; from L = 2048 on, doubling L costs it at most 2.2× the time.

    python benchmarks/long_context.py                   # about 3 minutes on 2 cores; dense to 8192
    python benchmarks/long_context.py --dense-max 16384 # the dense paths at 16,384 too: 6 minutes
    python benchmarks/long_context.py --quick           # seconds: small lengths, no PNG unless --png
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import time
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import torch
from timing import available_cores, cpu_description, record
from torch import Tensor

import vaswani.layers.attention as attention
from vaswani.layers.attention import MultiHeadAttention
from vaswani.layers.scores import Mask

D_MODEL, HEADS = 256, 4
LENGTHS = [256 * 2**i for i in range(7)]
WINDOWS = (128, 256)
TOKENS = 16384
QUICK = dict(lengths=[64, 128, 256], windows=(16, 32), tokens=512)
MIB = 2**20
DEFAULT_PNG = Path(__file__).resolve().parent / "results" / "long_context.png"


@contextlib.contextmanager
def dense_window() -> Iterator[None]:
    """Today's dense path for windows: the banded one turned off (no mask counts as a key mask)."""
    with mock.patch.object(attention, "is_key_mask", lambda mask, length: False):
        yield


def saved_bytes(layer: MultiHeadAttention, projected: Tensor) -> tuple[Tensor, int]:
    """The attention of ``layer`` over the heads of ``projected`` (batch, L, 3 · d_model), and the
    bytes its autograd graph keeps (each storage once)."""
    storages: dict[int, int] = {}

    def pack(t: Tensor) -> Tensor:
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        q, k, v = (layer._heads(part) for part in projected.chunk(3, dim=-1))
        out, _ = attention.attend(q, k, v, Mask(causal=layer.causal, window=layer.window))
    return out, sum(storages.values())


def measure(window: int | None, dense: bool, length: int, tokens: int, repeats: int) -> tuple[float, float]:
    """(seconds of forward + backward, MiB saved for backward) of the attention at ``length``."""
    torch.manual_seed(0)
    layer = MultiHeadAttention(D_MODEL, HEADS, causal=True, window=window)
    projected = torch.randn(max(1, tokens // length), length, 3 * D_MODEL, requires_grad=True)
    best, memory = float("inf"), 0
    with dense_window() if dense else contextlib.nullcontext():
        for _ in range(repeats):
            start = time.perf_counter()
            out, memory = saved_bytes(layer, projected)
            out.backward(torch.ones_like(out))
            best = min(best, time.perf_counter() - start)
            projected.grad = None
    return best, memory / MIB


def series(windows: tuple[int, ...]) -> list[tuple[str, int | None, bool]]:
    """(name, window, dense) of every measured path."""
    paths: list[tuple[str, int | None, bool]] = [("full", None, False)]
    paths += [(f"masked w={w}", w, True) for w in windows]
    paths += [(f"local w={w}", w, False) for w in windows]
    return paths


def table(results: dict[str, dict[int, tuple[float, float]]], lengths: list[int], tokens: int) -> str:
    """The markdown table: per length, each path's seconds and MiB."""
    names = list(results)
    head = (
        "| L | batch | " + " | ".join(f"{n} s" for n in names) + " | " + " | ".join(f"{n} MiB" for n in names)
    )
    lines = [head + " |", "|" + " --- |" * (2 + 2 * len(names))]
    for length in lengths:
        cells = [str(length), str(max(1, tokens // length))]
        cells += [f"{results[n][length][0]:.3f}" if length in results[n] else "skipped" for n in names]
        cells += [f"{results[n][length][1]:.1f}" if length in results[n] else "skipped" for n in names]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def verdicts(results: dict[str, dict[int, tuple[float, float]]], windows: tuple[int, ...]) -> list[str]:
    """The ratios against the targets: at L = 8192 (or the longest length measured by all), and the
    local path's cost of doubling L from 2048 on."""
    lines = []
    for w in windows:
        local = results[f"local w={w}"]
        for other in ("full", f"masked w={w}"):
            common = sorted(set(local) & set(results[other]))
            at = 8192 if 8192 in common else common[-1]
            time_ratio = results[other][at][0] / local[at][0]
            memory_ratio = results[other][at][1] / local[at][1]
            met = "met" if time_ratio >= 4 and memory_ratio >= 4 else "NOT met"
            name = f"local w={w}"
            record(
                f"attention fwd+bwd passes/s, L={at}",
                "fp32",
                [1 / local[at][0]],
                [1 / results[other][at][0]],
                other,
                ">= 4",
                name,
            )
            record(
                f"attention saved MiB, L={at} (lower is better)",
                "fp32",
                [local[at][1]],
                [results[other][at][1]],
                other,
                ">= 4",
                name,
            )
            lines.append(
                f"L={at}: {other} / local w={w}: time {time_ratio:.2f}x, memory {memory_ratio:.2f}x "
                f"(target >= 4x both: {met})"
            )
        long = sorted(length for length in local if length >= 2048)
        steps = [local[b][0] / local[a][0] for a, b in itertools.pairwise(long)]
        if steps:
            met = "met" if max(steps) <= 2.2 else "NOT met"
            shown = ", ".join(f"{r:.2f}" for r in steps)
            lines.append(f"local w={w}, doubling L from 2048: time x {shown} (target <= 2.2: {met})")
    return lines


def plot(results: dict[str, dict[int, tuple[float, float]]], path: Path) -> None:
    """Log-log time and memory against L, one line per path."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.5))
    for i, (label, unit) in enumerate((("forward + backward", "s"), ("saved for backward", "MiB"))):
        ax = fig.add_subplot(1, 2, i + 1)
        for name, points in results.items():
            lengths = sorted(points)
            ax.loglog(lengths, [points[n][i] for n in lengths], marker="o", label=name, base=2)
        ax.set_xlabel("sequence length L (batch · L constant)")
        ax.set_ylabel(f"{label}, {unit}")
        ax.grid(True, which="both", alpha=0.3)
    fig.axes[0].legend()
    fig.suptitle(f"the attention of one causal layer, d_model {D_MODEL}, {HEADS} heads, fp32, CPU")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small lengths and windows, seconds")
    parser.add_argument("--repeats", type=int, default=2, help="timed passes per point (the best counts)")
    parser.add_argument("--threads", type=int, default=available_cores())
    parser.add_argument(
        "--png", type=Path, help=f"the plot (default {DEFAULT_PNG.name} in benchmarks/results)"
    )
    parser.add_argument(
        "--dense-max", type=int, default=8192, help="skip full and masked attention above this length"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    lengths = QUICK["lengths"] if args.quick else LENGTHS
    windows = QUICK["windows"] if args.quick else WINDOWS
    tokens = QUICK["tokens"] if args.quick else TOKENS
    print(f"CPU: {cpu_description()}; {args.threads} threads; torch {torch.__version__}")
    print(f"the attention of one causal layer: d_model {D_MODEL}, {HEADS} heads of {D_MODEL // HEADS}, fp32,")
    print(f"{tokens} tokens per step; best of {args.repeats} forward + backward passes")
    measure(None, False, lengths[0], tokens, 1)
    results: dict[str, dict[int, tuple[float, float]]] = {}
    for name, window, dense in series(windows):
        results[name] = {}
        for length in lengths:
            if name.startswith("local") or length <= args.dense_max:
                results[name][length] = measure(window, dense, length, tokens, args.repeats)
                seconds, mib = results[name][length]
                print(f"  {name:>14} L={length:>6}: {seconds:8.3f} s {mib:9.1f} MiB", flush=True)
    skipped = [n for n in lengths if n > args.dense_max]
    if skipped:
        print(f"full and masked attention skipped at L = {', '.join(map(str, skipped))} (--dense-max)")
    print()
    print(table(results, lengths, tokens))
    print()
    print("\n".join(verdicts(results, windows)))
    png = args.png if args.png is not None else (None if args.quick else DEFAULT_PNG)
    if png is not None:
        plot(results, png)
        print(f"wrote {png.name}")


if __name__ == "__main__":
    main()
