"""Small data and configs shared by the tests."""

from __future__ import annotations

import random
from pathlib import Path

WORDS = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"]


def write_reverse_task(folder: Path, n: int = 400, seed: int = 0) -> tuple[Path, Path]:
    """Parallel files where the target is the source reversed."""
    rng = random.Random(seed)
    src, tgt = folder / "train.src", folder / "train.tgt"
    rows = [[rng.choice(WORDS) for _ in range(rng.randint(2, 6))] for _ in range(n)]
    src.write_text("".join(" ".join(r) + "\n" for r in rows), encoding="utf-8")
    tgt.write_text("".join(" ".join(reversed(r)) + "\n" for r in rows), encoding="utf-8")
    return src, tgt


def tiny_args(src: Path, tgt: Path, out: Path, *extra: str) -> list[str]:
    """``vaswani train translation`` arguments for a model that trains in a second or two."""
    return [
        "train", "translation", "--src", str(src), "--tgt", str(tgt), "--out", str(out),
        "--preset", "tiny", "--vocab-size", "60", "--batch-tokens", "400", "--max-steps", "6",
        "--eval-every", "1000", "--warmup", "2", "--quiet", *extra,
    ]  # fmt: skip
