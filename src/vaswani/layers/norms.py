"""Normalisation layers and the residual placements that use them."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class RMSNorm(nn.Module):
    """Root-mean-square normalisation (Zhang & Sennrich 2019).

    RMSNorm(x) = x / sqrt(mean(x²) + eps) · g, over the last dimension; unlike
    LayerNorm it neither subtracts the mean nor adds a bias.
    """

    def __init__(self, d_model: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: Tensor) -> Tensor:
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


def make_norm(kind: str, d_model: int, eps: float, bias: bool = True) -> nn.Module:
    """The norm module a placement uses: LayerNorm for ``post_ln``/``pre_ln`` (with a bias β unless
    ``bias`` is False, as nanoGPT's), RMSNorm (gain only) for ``pre_rmsnorm``."""
    if kind == "pre_rmsnorm":
        return RMSNorm(d_model, eps)
    return nn.LayerNorm(d_model, eps=eps, bias=bias)


Residual = Callable[[Tensor, nn.Module, Callable[[Tensor], Tensor], nn.Module], Tensor]


def post_norm_residual(
    x: Tensor, norm: nn.Module, sublayer: Callable[[Tensor], Tensor], dropout: nn.Module
) -> Tensor:
    """The paper's placement: LayerNorm(x + Dropout(Sublayer(x)))."""
    return norm(x + dropout(sublayer(x)))


def pre_norm_residual(
    x: Tensor, norm: nn.Module, sublayer: Callable[[Tensor], Tensor], dropout: nn.Module
) -> Tensor:
    """Pre-norm placement (Xiong et al. 2020): x + Dropout(Sublayer(Norm(x))).

    The stack then needs a final norm after its last block.
    """
    return x + dropout(sublayer(norm(x)))


def residual_for(kind: str) -> Residual:
    """Resolve the ``norm`` config field to its residual placement, in one place."""
    return post_norm_residual if kind == "post_ln" else pre_norm_residual
