"""What ``vaswani evaluate`` hands a task's evaluate hook: the inputs of every task in one request;
and where a model evaluates: on its own device.

Each task reads the fields it scores on (its registry entry's ``evaluates`` says which) and
refuses, in one line, a request without them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch
from torch import nn

from vaswani.generation.config import DecodingConfig
from vaswani.training.batches import to_device

B = TypeVar("B")


def model_device(model: nn.Module) -> torch.device:
    """The device of ``model``'s parameters (the CPU for a model without any)."""
    return next(model.parameters(), torch.empty(0)).device


def on_model_device(model: nn.Module, batch: B) -> B:
    """``batch`` (a tensor, or a dataclass, tuple, list or dict of them) with every tensor moved to
    ``model``'s device (:func:`vaswani.training.batches.to_device`)."""
    moved: Any = to_device(batch, model_device(model))
    return moved


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
    # draws a classifier's confusion matrix (predicted, gold, classes, out, title): the CLI passes
    # vaswani.plots.confusion_figure, which sits above the tasks; None: no picture
    confusion_figure: Callable[..., Any] | None = None
