"""What ``vaswani evaluate`` hands a task's evaluate hook (the inputs of every task in one request)
and what the hook gives back (a :class:`Report`: data, which the command line prints and draws).

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
    images: Path | None = None  # a folder of one subfolder of images per class
    file_format: str | None = None
    batch_size: int = 64
    decoding: DecodingConfig | None = None  # None: greedy
    device: str = "auto"  # where the run's model is loaded (vaswani.runtime.resolve_device)
    quantize: str | None = None  # int8: int8 weights for inference (vaswani.layers.quantize)
    dtype: str | None = None  # fp32 or bf16: the weights cast for inference


@dataclass(frozen=True)
class Confusion:
    """A classifier's predictions against the gold labels (class indices), to be drawn as a
    confusion matrix titled ``title`` at ``out``."""

    predicted: list[int]
    gold: list[int]
    classes: tuple[str, ...]
    out: Path
    title: str


@dataclass(frozen=True)
class Report:
    """What an evaluation found: the ``lines`` to print and, for a classifier of images, the
    ``confusion`` to draw (``vaswani.plots.confusion_figure``)."""

    lines: list[str]
    confusion: Confusion | None = None
