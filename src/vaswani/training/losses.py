"""Losses shared by the tasks."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor


def label_smoothed_nll(logits: Tensor, target: Tensor, pad_id: int, smoothing: float) -> Tensor:
    """Summed label-smoothed cross-entropy over the non-padding targets.

    The target distribution puts 1 - ε on the reference token and spreads ε
    uniformly over the vocabulary (Szegedy et al. 2016; the paper's ε = 0.1):
    loss = (1 - ε) · (-log p_y) + ε · mean_v(-log p_v). Padding targets add
    nothing; the sum is divided by the token count by the caller, so that
    gradient accumulation weighs every token alike. Computed in fp32.
    """
    return F.cross_entropy(
        logits.flatten(0, -2).float(),
        target.flatten(),
        ignore_index=pad_id,
        label_smoothing=smoothing,
        reduction="sum",
    )
