"""Training through ``torch.compile``."""

from __future__ import annotations

import torch
from torch import nn


def compile_for_training(model: nn.Module) -> nn.Module:
    """``model`` compiled by ``torch.compile`` (the same parameters: the optimizer, checkpoints
    and evaluation keep using ``model``)."""
    return torch.compile(model)  # type: ignore[return-value]
