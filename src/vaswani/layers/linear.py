"""The affine map of every projection: ``nn.Linear`` with a faster CPU inference kernel."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

# oneDNN's linear with a fused element-wise epilogue: (its name, its algorithm) of each activation.
ONEDNN_ACTIVATIONS = {
    "none": ("none", ""),
    "relu": ("relu", ""),
    "gelu": ("gelu", "none"),
    "gelu_tanh": ("gelu", "tanh"),
    "silu": ("swish", ""),
}
ACTIVATIONS = {
    "none": lambda x: x,
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
}
HAS_ONEDNN = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def onednn_applies(x: Tensor, weight: Tensor) -> bool:
    """Whether ``act(x Wᵀ + b)`` may run through oneDNN: float32 on the CPU, no gradient needed,
    no autocast (which the kernel would bypass)."""
    return (
        HAS_ONEDNN
        and x.device.type == "cpu"
        and x.dtype == weight.dtype == torch.float32
        and not (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad))
        and not torch.is_autocast_enabled("cpu")
    )


class Linear(nn.Linear):
    """y = act(x Wᵀ + b): ``nn.Linear`` (same parameters, names and initialisation) with an
    optional activation applied to its output (``relu``, ``gelu``, ``gelu_tanh``, ``silu``).

    Training runs ``F.linear`` then the activation. Inference in float32 on the CPU (see
    :func:`onednn_applies`) runs oneDNN's linear kernel, with the activation fused into it: the
    same float32 arithmetic in another order (results differ at rounding level), and faster than
    MKL's GEMM behind ``F.linear`` at our models' shapes: 8-20% per call for BERT encoding and
    beam-search decoding, more with the activation fused (``benchmarks/bert_speed.py``,
    ``benchmarks/marian_speed.py``).
    """

    def forward(self, x: Tensor, activation: str = "none") -> Tensor:
        if onednn_applies(x, self.weight):
            attr, algorithm = ONEDNN_ACTIVATIONS[activation]
            return torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, attr, [], algorithm)
        return ACTIVATIONS[activation](F.linear(x, self.weight, self.bias))
