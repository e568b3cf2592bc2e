"""What ``vaswani evaluate`` hands a task's evaluate hook: the inputs of every task in one request.

Each task reads the fields it scores on (its registry entry's ``evaluates`` says which) and
refuses, in one line, a request without them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from vaswani.generation.config import DecodingConfig


@dataclass(frozen=True)
class Evaluation:
    """The inputs of an evaluation; ``out`` is where a task may write its outputs (hypotheses)."""

    src: Path | None = None
    ref: Path | None = None
    out: Path | None = None
    text: Sequence[Path] = ()
    labeled: Path | None = None
    file_format: str | None = None
    batch_size: int = 64
    decoding: DecodingConfig | None = None  # None: greedy
