"""Where batch-1 greedy decoding's time goes, by encoder and decoder depth: why a deep encoder with a
shallow decoder (Kasai et al. 2021) is not ``decoder layers`` times faster on a small model.

For each translation run given (e.g. the en→zh Transformer 2 + 2 and 6 + 1 of
``translation_results.py``): its first ``--sentences`` test sources translated one at a time,
greedy, on one thread, timing the encoder apart from the decoding steps. Then the per-step time of
the first run's decoder cut or repeated to 1, 2, 4 and 6 layers (its own layers, the outputs not
looked at: only the step's cost), fitted as a + b · layers: ``a`` is what every step pays whatever
the depth (the embedding, the output projection over the vocabulary, the argmax, the cache and the
Python of the loop), ``b`` one decoder layer's self-attention, cross-attention and feed-forward.

With ``--compile``, each run also decodes through ``Translator.compile_decoding()`` (the encoder,
the first step and the later steps each a graph: the Python of an operator a layer gone), after a
pass over the same sources that compiles every length bucket; the encoder's time is then inside
its graph, so only the whole is timed.

    python benchmarks/decoder_depth.py runs/zh-ar runs/zh-desd
    python benchmarks/decoder_depth.py runs/zh-ar runs/zh-desd --compile
    python benchmarks/decoder_depth.py --quick     # a smoke run on a tiny run it trains
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import quick  # noqa: E402
from timing import cpu_description  # noqa: E402
from translation_results import test_pairs  # noqa: E402

from vaswani.generation.config import GREEDY  # noqa: E402
from vaswani.pipelines.translation import Translator  # noqa: E402


def timed_translation(translator: Translator, sources: list[str]) -> dict[str, float]:
    """Seconds of the encoder and of everything else, and decoding steps, over ``sources`` one by one."""
    model, spent = translator.model, {"encoder": 0.0, "steps": 0}
    encode = model.encode

    def timed_encode(*args: object, **kwargs: object) -> object:
        start = time.perf_counter()
        out = encode(*args, **kwargs)
        spent["encoder"] += time.perf_counter() - start
        return out

    def count(tokens: torch.Tensor) -> bool:
        spent["steps"] += 1
        return False

    model.encode = timed_encode  # type: ignore[method-assign]
    start = time.perf_counter()
    for source in sources:
        translator.translate([source], GREEDY, batch_size=1, on_step=count)
    spent["total"] = time.perf_counter() - start
    del model.encode
    return spent


def compiled_rates(
    translators: list[Translator], sources: list[str], passes: int = 5
) -> list[tuple[float, int]]:
    """Sentences/s of each translator's compiled greedy decoding over ``sources`` one by one (the
    best of ``passes``, the translators in turn, after a pass each that compiles them all), and how
    many of its translations equal its eager ones."""
    same = []
    for translator in translators:
        eager = [translator.translate([s], GREEDY, batch_size=1)[0] for s in sources]
        translator.compile_decoding()
        compiled = [translator.translate([s], GREEDY, batch_size=1)[0] for s in sources]
        same.append(sum(c == e for c, e in zip(compiled, eager, strict=True)))
    best = [float("inf")] * len(translators)
    for _ in range(passes):
        for i, translator in enumerate(translators):
            start = time.perf_counter()
            for source in sources:
                translator.translate([source], GREEDY, batch_size=1)
            best[i] = min(best[i], time.perf_counter() - start)
    return [(len(sources) / seconds, n) for seconds, n in zip(best, same, strict=True)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="*", type=Path, help="translation run directories")
    parser.add_argument("--sentences", type=int, default=100, help="test sources, one at a time (100)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: a tiny run trained for it")
    parser.add_argument("--compile", action="store_true", help="also time each run's compiled decoding")
    args = parser.parse_args(argv)
    scratch = tempfile.TemporaryDirectory()
    if args.quick:
        args.runs, args.sentences = [quick.train("translation", Path(scratch.name))], 4
    elif not args.runs:
        parser.error("give one or more translation run directories (or --quick)")
    torch.set_num_threads(1)
    print(f"{cpu_description()}, torch {torch.__version__}, python {platform.python_version()}, 1 thread")
    print(f"load average at the start: {os.getloadavg()[0]:.2f}")
    sources = [s for s, _ in test_pairs(args.runs[0])[: args.sentences]]
    print("| run | layers | sentences/s | encoder ms a sentence | ms a decoding step | steps a sentence |")
    print("|---|---|---:|---:|---:|---:|")
    for run in args.runs:
        translator = Translator.load(run, "cpu")
        cfg = translator.model.config
        translate = timed_translation(translator, sources[:5])  # warm-up
        translate = timed_translation(translator, sources)
        n, steps = len(sources), translate["steps"]
        decoding = translate["total"] - translate["encoder"]
        print(
            f"| {run.name} | {cfg.n_encoder_layers} + {cfg.n_decoder_layers} | "
            f"{n / translate['total']:.1f} | "
            f"{1000 * translate['encoder'] / n:.2f} | {1000 * decoding / steps:.3f} | {steps / n:.1f} |"
        )
    if args.compile:
        rates = compiled_rates([Translator.load(run, "cpu") for run in args.runs], sources)
        print("\n| run | compiled sentences/s | against the first run | as eager |\n|---|---:|---:|---:|")
        for run, (rate, same) in zip(args.runs, rates, strict=True):
            print(f"| {run.name} | {rate:.1f} | {rate / rates[0][0]:.2f}× | {same} of {len(sources)} |")
    translator = Translator.load(args.runs[0], "cpu")
    own = list(translator.model.decoder.layers)
    per_step = {}
    for depth in (1, 2, 4, 6):
        translator.model.decoder.layers = nn.ModuleList(own[i % len(own)] for i in range(depth))
        timed_translation(translator, sources[:5])
        spent = timed_translation(translator, sources)
        per_step[depth] = (spent["total"] - spent["encoder"]) / spent["steps"]
    depths = torch.tensor(list(per_step), dtype=torch.float64)
    times = torch.tensor(list(per_step.values()), dtype=torch.float64)
    b = float(
        ((depths - depths.mean()) * (times - times.mean())).sum() / ((depths - depths.mean()) ** 2).sum()
    )
    a = float(times.mean()) - b * float(depths.mean())
    print(
        "\nms a decoding step by decoder layers (the first run's decoder): "
        + ", ".join(f"{d}: {1000 * t:.3f}" for d, t in per_step.items())
    )
    print(f"fit: {1000 * a:.3f} ms a step whatever the depth + {1000 * b:.3f} ms a decoder layer")
    for layers in (2, 3):
        print(
            f"decoding steps of {layers} decoder layers against 1: {(a + layers * b) / (a + b):.2f}× "
            "(the most a 1-layer decoder can gain, before its deeper encoder)"
        )
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
