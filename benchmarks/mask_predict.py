"""BLEU and speed of Mask-Predict (a nat run) against autoregressive decoding (a translation run), on
the test split both runs were trained with (their valid split without one).

    python benchmarks/mask_predict.py --nat runs/nat --ar runs/zh

prints a markdown table: test BLEU and chrF of the nat run at T ∈ --iterations × l ∈ --length-beams,
and of the translation run greedy and with beam 5; and sentences/s at batch 1 over the first
--timed test sentences (one sentence per call, after one warm-up call), for every row.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from vaswani.generation.config import GREEDY, DecodingConfig
from vaswani.generation.mask_predict import MaskPredictConfig
from vaswani.metrics import bleu, chrf
from vaswani.rundir import RunDir
from vaswani.tasks import translation
from vaswani.tasks.nat_translator import NatData, NatTranslator
from vaswani.tasks.translator import Translator

Translate = Callable[[Sequence[str], int], list[str]]


def sentences_per_second(translate: Translate, sources: Sequence[str]) -> float:
    """Sentences per second translating ``sources`` one call each (batch 1), after a warm-up call."""
    translate(sources[:1], 1)
    start = time.perf_counter()
    for sentence in sources:
        translate([sentence], 1)
    return len(sources) / (time.perf_counter() - start)


def row(name: str, translate: Translate, pairs: list[tuple[str, str]], timed: int, tokenize: str) -> str:
    """One table row: BLEU and chrF over ``pairs`` (batches of 64) and sentences/s at batch 1."""
    hyps = translate([s for s, _ in pairs], 64)
    refs = [t for _, t in pairs]
    speed = sentences_per_second(translate, [s for s, _ in pairs[:timed]])
    return f"| {name} | {bleu(hyps, refs, tokenize).value:.2f} | {chrf(hyps, refs).value:.2f} | {speed:.1f} |"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nat", type=Path, required=True, help="a nat run (vaswani train nat)")
    parser.add_argument("--ar", type=Path, required=True, help="a translation run on the same data")
    parser.add_argument("--iterations", type=int, nargs="+", default=[1, 4, 10])
    parser.add_argument("--length-beams", type=int, nargs="+", default=[1, 3, 5])
    parser.add_argument("--timed", type=int, default=100, help="test sentences timed at batch 1")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    nat, ar = NatTranslator.load(args.nat, "cpu"), Translator.load(args.ar, "cpu")
    data = translation.load_data(RunDir(args.nat).read_config("nat", NatData).data)  # type: ignore[arg-type]
    pairs, split = (data.test, "test") if data.test else (data.valid, "valid")
    print(f"torch {torch.__version__}, {platform.processor() or platform.machine()}, "
          f"{torch.get_num_threads()} threads, load {os.getloadavg()[0]:.1f}, {time.strftime('%Y-%m-%d')}, "
          f"{len(pairs)} {split} pairs, {args.timed} timed at batch 1\n")  # fmt: skip
    print("| decoding | BLEU | chrF | sentences/s, batch 1 |\n| --- | --- | --- | --- |")
    for name, decoding in (
        ("autoregressive, greedy", GREEDY),
        ("autoregressive, beam 5", DecodingConfig(beam=5)),
    ):
        print(row(name, lambda s, b, d=decoding: ar.translate(s, d, b), pairs, args.timed, ar.bleu_tokenize))
    for iterations in args.iterations:
        for beam in args.length_beams:
            config = MaskPredictConfig(iterations=iterations, length_beam=beam)
            name = f"Mask-Predict, T = {iterations}, l = {beam}"
            print(
                row(name, lambda s, b, c=config: nat.translate(s, c, b), pairs, args.timed, nat.bleu_tokenize)
            )


if __name__ == "__main__":
    main()
