"""BLEU and chrF of translation runs by source length: the long-distance claim of the seeds (the
RNN encoder-decoder against the Transformer; on the embedded corpus, relative clauses make the long
sentences).

Each run translates its own test split (greedy, as ``vaswani evaluate`` does, with the weights that
command uses); the sentences are cut into buckets by their number of source words, and each bucket
is scored with sacreBLEU (the run's BLEU tokenizer). Prints a Markdown table, one row per run.

    python benchmarks/length_buckets.py RUN_DIR [RUN_DIR ...] [--edges 4,6,8,10]
    python benchmarks/length_buckets.py --quick     # a smoke run on a tiny run it trains
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import quick

from vaswani.data.config import ParallelData
from vaswani.metrics import bleu, chrf
from vaswani.pipelines.translation import TASK, Translator
from vaswani.rundir import RunDir
from vaswani.tasks.translation import load_data


def buckets(edges: list[int]) -> list[tuple[int, int | None]]:
    """(first, last) source lengths of each bucket; the last bucket has no end (None)."""
    starts = [1, *(e + 1 for e in edges)]
    return [(a, b) for a, b in zip(starts, [*edges, None], strict=True)]


def name_of(bucket: tuple[int, int | None]) -> str:
    first, last = bucket
    return f"{first}+" if last is None else f"{first}-{last}"


def scored(run_dir: Path, edges: list[int]) -> tuple[str, list[str]]:
    """The run's note on its weights and one cell per bucket: BLEU / chrF (sentences)."""
    translator = Translator.load(run_dir, "cpu")
    data = load_data(RunDir(run_dir).read_config(TASK, ParallelData).data)  # type: ignore[arg-type]
    pairs = data.test or data.valid
    hyps = translator.translate([s for s, _ in pairs])
    cells = []
    for first, last in buckets(edges):
        chosen = [
            i
            for i, (s, _) in enumerate(pairs)
            if first <= len(s.split()) and (last is None or len(s.split()) <= last)
        ]
        if not chosen:
            cells.append("–")
            continue
        h, r = [hyps[i] for i in chosen], [pairs[i][1] for i in chosen]
        cells.append(
            f"{bleu(h, r, translator.bleu_tokenize).value:.1f} / {chrf(h, r).value:.1f} ({len(chosen)})"
        )
    return translator.weights_note, cells


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="*", type=Path, metavar="RUN_DIR")
    parser.add_argument("--edges", default="4,6,8,10", help="last source length of each bucket but the last")
    parser.add_argument("--quick", action="store_true", help="a smoke run: a tiny run trained for it")
    args = parser.parse_args()
    scratch = tempfile.TemporaryDirectory()
    if args.quick:
        args.runs = [quick.train("translation", Path(scratch.name))]
    elif not args.runs:
        parser.error("give at least one RUN_DIR (or --quick)")
    edges = [int(e) for e in args.edges.split(",")]
    print("| run | " + " | ".join(f"{name_of(b)} words" for b in buckets(edges)) + " |")
    print("|---" * (len(edges) + 2) + "|")
    for run in args.runs:
        note, cells = scored(run, edges)
        print(f"| {run.name} ({note}) | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
