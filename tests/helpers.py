"""Small data and configs shared by the tests."""

from __future__ import annotations

import random
from pathlib import Path

import torch

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


LM_WORDS = [
    "the", "cat", "sat", "on", "a", "mat", "and", "the", "dog", "ran", "to", "the", "red", "hat",
    "while", "birds", "sang",
]  # fmt: skip


def write_lm_text(path: Path, lines: int = 300, seed: int = 0) -> Path:
    """A small English-like text for a character-level language model."""
    rng = random.Random(seed)
    rows = [" ".join(rng.choice(LM_WORDS) for _ in range(rng.randint(4, 10))) for _ in range(lines)]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def tiny_lm_args(text: Path, out: Path, *extra: str) -> list[str]:
    """``vaswani train lm`` arguments for a character-level GPT that trains in about a second (and
    no longer generates one repeated character)."""
    return [
        "train", "lm", "--text", str(text), "--out", str(out), "--tokenizer", "char",
        "--d-model", "32", "--heads", "2", "--d-ff", "64", "--layers", "1", "--max-len", "32",
        "--batch-tokens", "256", "--max-steps", "100", "--lr", "5e-3", "--max-minutes", "1",
        "--eval-every", "1000", "--warmup", "5", "--quiet", "--no-bf16", *extra,
    ]  # fmt: skip


def tiny_lm_run(folder: Path, *extra: str) -> Path:
    """Train the tiny language model of :func:`tiny_lm_args` in ``folder / "run"``."""
    from vaswani.cli import main

    text = write_lm_text(folder / "train.txt")
    assert main(tiny_lm_args(text, folder / "run", *extra)) == 0
    return folder / "run"


def defined_mask(q_len: int, k_len: int, causal: bool, window: int | None) -> torch.Tensor:
    """The attention masks' definition, one pair at a time, as a (1, 1, q_len, k_len) may-attend
    mask: the queries are the last ``q_len`` of ``k_len`` positions; causal: a key not after the
    query; window: a key at most ``window`` away (|i - j| <= w, or 0 <= i - j <= w when causal)."""
    rows = [
        [
            (not causal or j <= i) and (window is None or abs(i - j) <= window)
            for j in range(k_len)
        ]
        for i in range(k_len - q_len, k_len)
    ]  # fmt: skip
    return torch.tensor(rows, dtype=torch.bool).reshape(1, 1, q_len, k_len)
