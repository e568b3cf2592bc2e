"""Tiny runs for the benchmarks' ``--quick`` smoke runs: a few seconds each, never a measurement.

``--quick`` exists so that a refactor cannot break a benchmark unnoticed (``tests/test_benchmarks.py``
runs every script with it). A script that measures run directories trains the tiny ones it needs
here, through the command-line tool's own ``main``, on a small generated corpus: words spelled out
as numbers on the source side, the same words reversed on the target side.
"""

from __future__ import annotations

import random
from pathlib import Path

from vaswani.cli import main as vaswani

WORDS = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"]
TINY_MODEL = ("--d-model", "32", "--heads", "2", "--d-ff", "64", "--layers", "1", "--no-bf16")


def parallel_corpus(
    folder: Path, pairs: int = 120, names: tuple[str, str] = ("src.txt", "tgt.txt"), seed: int = 0
) -> tuple[Path, Path]:
    """``folder/src.txt`` and ``folder/tgt.txt`` (or ``names``): ``pairs`` lines of 2 to 9 number
    words, and the same words in reverse order (seeded: the same files every time)."""
    rng = random.Random(seed)
    sources = [" ".join(rng.choices(WORDS, k=rng.randint(2, 9))) for _ in range(pairs)]
    src, tgt = folder / names[0], folder / names[1]
    src.write_text("".join(s + "\n" for s in sources), encoding="utf-8")
    tgt.write_text("".join(" ".join(reversed(s.split())) + "\n" for s in sources), encoding="utf-8")
    return src, tgt


def train(task: str, folder: Path, *extra: str) -> Path:
    """A tiny run of ``task`` (``translation``, ``nat`` or ``lm``) in ``folder/task``, trained for a
    few steps on the corpus of :func:`parallel_corpus` (its target side is the lm's text)."""
    folder.mkdir(parents=True, exist_ok=True)
    src, tgt = parallel_corpus(folder)
    out = folder / task
    data = ("--text", str(tgt)) if task == "lm" else ("--src", str(src), "--tgt", str(tgt))
    common = ("--max-steps", "4", "--eval-every", "1000", "--batch-tokens", "256", "--quiet")
    if vaswani(["train", task, *data, "--out", str(out), *TINY_MODEL, *common, *extra]) != 0:
        raise SystemExit(f"quick: training the tiny {task} run failed")
    return out
