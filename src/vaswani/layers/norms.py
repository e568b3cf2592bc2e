"""Normalisation layers and the residual placements that use them: the ``norm`` (kind) and
``norm_placement`` config fields are resolved here, and so is the final norm of a stack."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vaswani.config import ModelConfig


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


# Each value of ``ModelConfig.norm`` (``config.NORMS``): its module over (d_model, eps, bias).
NORMS: dict[str, Callable[[int, float, bool], nn.Module]] = {
    "layernorm": lambda d_model, eps, bias: nn.LayerNorm(d_model, eps=eps, bias=bias),
    "rmsnorm": lambda d_model, eps, bias: RMSNorm(d_model, eps),
}


def make_norm(cfg: ModelConfig) -> nn.Module:
    """A norm of kind ``cfg.norm`` over the last dimension (d_model) with ``cfg.norm_eps``:
    LayerNorm, LN(x) = (x − mean(x)) / sqrt(var(x) + eps) · γ + β (no β when ``cfg.bias`` is
    False, as nanoGPT's), or RMSNorm (gain only)."""
    return NORMS[cfg.norm](cfg.d_model, cfg.norm_eps, cfg.bias)


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


# Each value of ``ModelConfig.norm_placement`` (``config.NORM_PLACEMENTS``).
RESIDUALS: dict[str, Residual] = {"post": post_norm_residual, "pre": pre_norm_residual}


def residual_for(cfg: ModelConfig) -> Residual:
    """The residual placement ``cfg.norm_placement`` of every sublayer of a block."""
    assert cfg.norm_placement is not None  # None is only an input: a built config has its placement
    return RESIDUALS[cfg.norm_placement]


def final_norm(cfg: ModelConfig) -> nn.Module:
    """The norm after a stack's last block: ``pre`` leaves the residual stream unnormalised, so it
    ends with one more norm (GPT-2's ``ln_f``); ``post`` already ends normalised (Identity)."""
    return make_norm(cfg) if cfg.norm_placement == "pre" else nn.Identity()
