"""The affine map of every projection: ``nn.Linear`` with faster CPU kernels (inference, and training
where MKL skips AVX-512)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from vaswani.layers.kernels import (
    HAS_ONEDNN,
    blocked_applies,
    blocked_product,
    onednn_applies,
    onednn_compiles,
    onednn_linear,
    onednn_train_linear,
    onednn_trains,
)

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

    Training runs ``F.linear`` then the activation, or, in float32 on a CPU where
    :func:`~vaswani.layers.kernels.onednn_trains` chooses it, every product of the forward and the
    backward pass by oneDNN's linear (:func:`~vaswani.layers.kernels.onednn_train_linear`), then
    the activation. Inference in float32 on the CPU runs oneDNN's linear kernel with the
    activation fused into it where :mod:`vaswani.layers.kernels` chooses it, and inside
    ``torch.compile`` its product as one custom op where
    :func:`~vaswani.layers.kernels.onednn_compiles` chooses it. All are the same
    float32 arithmetic in another order (results differ at rounding level), faster at our
    models' shapes. Compiled decoding of one or two rows computes the product from ``blocked``,
    a copy of the weight in blocks of 16 output columns
    (:func:`~vaswani.layers.blocked.block_projections`), where it has one.
    """

    blocked: Tensor | None = None
    """The weight as :func:`~vaswani.layers.kernels.blocked_weight` (not a buffer: never saved), or None."""

    def forward(self, x: Tensor, activation: str = "none") -> Tensor:
        if blocked_applies(x, self.blocked):
            assert self.blocked is not None
            y = blocked_product(x, self.blocked, self.out_features)
            return ACTIVATIONS[activation](y if self.bias is None else y + self.bias)
        if onednn_applies(x, self.weight):
            out = onednn_linear(x, self.weight, self.bias, activation)
            if out is not None:
                return out
        if onednn_trains(x, self.weight) or onednn_compiles(x, self.weight):
            return ACTIVATIONS[activation](onednn_train_linear(x, self.weight, self.bias))
        return ACTIVATIONS[activation](F.linear(x, self.weight, self.bias))
