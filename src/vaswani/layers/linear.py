"""The affine map of every projection: ``nn.Linear`` with a faster CPU inference kernel."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from vaswani.layers.kernels import HAS_ONEDNN, onednn_applies, onednn_linear

__all__ = ["ACTIVATIONS", "HAS_ONEDNN", "Linear", "onednn_applies"]

ACTIVATIONS = {
    "none": lambda x: x,
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
}


class Linear(nn.Linear):
    """y = act(x Wᵀ + b): ``nn.Linear`` (same parameters, names and initialisation) with an
    optional activation applied to its output (``relu``, ``gelu``, ``gelu_tanh``, ``silu``).

    Training runs ``F.linear`` then the activation. Inference in float32 on the CPU runs oneDNN's
    linear kernel with the activation fused into it where :mod:`vaswani.layers.kernels` chooses
    it: the same float32 arithmetic in another order (results differ at rounding level), faster
    at our models' shapes.
    """

    def forward(self, x: Tensor, activation: str = "none") -> Tensor:
        if onednn_applies(x, self.weight):
            out = onednn_linear(x, self.weight, self.bias, activation)
            if out is not None:
                return out
        return ACTIVATIONS[activation](F.linear(x, self.weight, self.bias))
