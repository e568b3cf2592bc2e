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

from vaswani.errors import ConfigError
from vaswani.generation.config import DecodingConfig
from vaswani.layers.quantize import prepare_weights
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


INFERENCE_WEIGHTS = ("lm", "translation")
"""The tasks whose models ``--quantize`` and ``--dtype`` prepare (the decoders: generate, translate,
their evaluation and serving)."""


def check_inference_weights(task: str, run_dir: object, quantize: str | None, dtype: str | None) -> None:
    """Refuse ``--quantize`` or ``--dtype`` for a run of another task than :data:`INFERENCE_WEIGHTS`."""
    if (quantize is not None or dtype is not None) and task not in INFERENCE_WEIGHTS:
        raise ConfigError(
            f"{run_dir}: --quantize and --dtype apply to {' and '.join(INFERENCE_WEIGHTS)} runs, "
            f"not to a {task} run"
        )


def prepare_inference(model: nn.Module, quantize: str | None, dtype: str | None) -> nn.Module:
    """A loaded model with the weights ``--quantize`` and ``--dtype`` ask for (unchanged without
    them; see :func:`vaswani.layers.quantize.prepare_weights`)."""
    if quantize is None and dtype is None:
        return model
    return prepare_weights(model, quantize, dtype)


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
    quantize: str | None = None  # int8: weight-only int8 for inference (vaswani.layers.quantize)
    dtype: str | None = None  # fp32 or bf16: the weights cast for inference
    # draws a classifier's confusion matrix (predicted, gold, classes, out, title): the CLI passes
    # vaswani.plots.confusion_figure, which sits above the tasks; None: no picture
    confusion_figure: Callable[..., Any] | None = None
