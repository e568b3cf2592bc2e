"""BLEU and speed of Mask-Predict (a nat run) against autoregressive decoding (a translation run), on
the test split both runs were trained with (their valid split without one).

    python benchmarks/mask_predict.py --nat runs/nat --ar runs/zh
    python benchmarks/mask_predict.py --quick     # a smoke run on tiny runs it trains

prints a markdown table: test BLEU (cased, lowercased) and chrF of the translation run greedy and with
beam 5, and of the nat run at T ∈ {1, 4, 10} × l ∈ {1, 3, 5}; and sentences/s at batch 1 over the
first --timed test sentences (one sentence per call, after one warm-up call) and at batch 64 over the
whole split, for every row. ``benchmarks/translation_results.py`` makes these rows for every model of
its table.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import quick
import torch
from timing import cpu_description
from translation_results import decodings, scores, test_pairs, timed


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nat", type=Path, help="a nat run (vaswani train nat)")
    parser.add_argument("--ar", type=Path, help="a translation run on the same data")
    parser.add_argument("--timed", type=int, default=100, help="test sentences timed at batch 1")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--quick", action="store_true", help="a smoke run: tiny runs trained for it")
    args = parser.parse_args()
    scratch = tempfile.TemporaryDirectory()
    if args.quick:
        args.ar, args.nat = (quick.train(task, Path(scratch.name)) for task in ("translation", "nat"))
        args.timed = 4
    elif args.nat is None or args.ar is None:
        parser.error("give --nat and --ar (or --quick)")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    pairs = test_pairs(args.nat)
    sources, refs = [s for s, _ in pairs], [t for _, t in pairs]
    print(f"torch {torch.__version__}, {cpu_description()}, {torch.get_num_threads()} threads, load "
          f"{os.getloadavg()[0]:.1f}, {time.strftime('%Y-%m-%d')}, {len(pairs)} test pairs, {args.timed} "
          "timed at batch 1\n")  # fmt: skip
    print(
        "| run | decoding | BLEU | BLEU (lowercased) | chrF | sentences/s, batch 1 | sentences/s, batch 64 |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for run in (args.ar, args.nat):
        for name, translate, tokenize in decodings(run):
            hyps, batch64 = timed(translate, sources, 64)
            batch1 = timed(translate, sources[: args.timed], 1)[1]
            cells = scores(hyps, refs, tokenize)[0]
            print(f"| {run.name} | {name} | {cells} | {batch1:.1f} | {batch64:.1f} |", flush=True)


if __name__ == "__main__":
    main()
