"""What every run kind's wrapper shares: the :class:`Pipeline` protocol that the command line and
the server type against, and where a loaded model computes (its own device).

A wrapper holds a trained model with everything needed to use it (tokenizers, labels, image
processing) and is made from a run directory by ``load(run_dir, device)``: the weights are read on
the CPU, then moved, so that a run decodes on any device. Its inputs are built on the CPU and moved
to the model's device (:func:`on_model_device`); text and vectors come back to the CPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

import torch
from torch import nn

from vaswani.errors import ConfigError, DataError
from vaswani.training.batches import to_device

B = TypeVar("B")


def refuse_empty(texts: list[str], what: str) -> list[str]:
    """``texts``, each of which must hold more than white space: an empty one is refused naming it
    (``what`` and its number from 1). The one check of every command and endpoint that decodes,
    classifies, tags or embeds texts (a language model's prompt may be empty: it starts a document)."""
    for number, text in enumerate(texts, start=1):
        if not text.strip():
            raise DataError(f"{what} {number} is empty")
    return texts


@runtime_checkable
class Pipeline(Protocol):
    """A trained run in use: its ``model`` (an ``nn.Module`` on its device, in eval mode after
    ``load``) and the constructor ``load(run_dir, device)`` of its run kind."""

    model: nn.Module

    @classmethod
    def load(cls, run_dir: str | Path, device: str | torch.device = "auto") -> Any: ...


def model_device(model: nn.Module) -> torch.device:
    """The device of ``model``'s parameters (the CPU for a model without any)."""
    return next(model.parameters(), torch.empty(0)).device


def on_model_device(model: nn.Module, batch: B) -> B:
    """``batch`` (a tensor, or a dataclass, tuple, list or dict of them) with every tensor moved to
    ``model``'s device (:func:`vaswani.training.batches.to_device`)."""
    moved: Any = to_device(batch, model_device(model))
    return moved


INFERENCE_WEIGHTS = ("lm", "translation")
"""The run kinds whose models ``--quantize`` and ``--dtype`` prepare (the decoders: generate,
translate, their evaluation and serving; :func:`vaswani.layers.quantize.prepare_weights`)."""


def check_inference_weights(task: str, run_dir: object, quantize: str | None, dtype: str | None) -> None:
    """Refuse ``--quantize`` or ``--dtype`` for a run of another task than :data:`INFERENCE_WEIGHTS`."""
    if (quantize is not None or dtype is not None) and task not in INFERENCE_WEIGHTS:
        raise ConfigError(
            f"{run_dir}: --quantize and --dtype apply to {' and '.join(INFERENCE_WEIGHTS)} runs, "
            f"not to a {task} run"
        )
