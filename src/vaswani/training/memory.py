"""Memory in training: the model's size is checked against the memory available before it is
built (:func:`vaswani.resources.check_fits`), and a step that runs out of memory (a batch too large)
ends training with one line naming the task's batch flag, leaving the run's checkpoints as they
were: nothing is written during a step, so the last checkpoint stays intact and resumable."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import torch
from torch import nn

from vaswani.config import RunConfig, TrainConfig
from vaswani.errors import ConfigError
from vaswani.io import first_line
from vaswani.resources import check_fits, is_out_of_memory

T = TypeVar("T")


def built(run: RunConfig, device: torch.device, build_model: Callable[[], nn.Module]) -> nn.Module:
    """``build_model()``, once the model with its gradients and optimizer state is seen to fit."""
    check_fits(run.model, training=True, device=device)
    return build_model()


def batch_flags(task: Any, cfg: TrainConfig) -> str:
    """The flag that sizes ``task``'s batches with its value: the task's ``batch_flag``
    (``--batch-tokens`` or ``--batch-size``), or both when it names none."""
    values = {"--batch-tokens": cfg.batch_tokens, "--batch-size": cfg.batch_size}
    flag = getattr(task, "batch_flag", None)
    if flag in values:
        return f"{flag} (now {values[flag]})"
    return " or ".join(f"{name} (now {value})" for name, value in values.items())


def guarded(step: Callable[[], T], task: Any, cfg: TrainConfig, done: int) -> T:
    """``step()``; running out of memory in it is a :class:`ConfigError` naming the batch flag
    (``done`` steps were finished before it)."""
    try:
        return step()
    except Exception as exc:
        if not is_out_of_memory(exc):
            raise
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        raise ConfigError(
            f"out of memory at step {done + 1} ({first_line(exc)[:160]}): lower {batch_flags(task, cfg)} "
            "in a new run, or continue this one from its last checkpoint (if it has one: nothing was "
            "written) with --resume and --grad-checkpointing"
        ) from None
