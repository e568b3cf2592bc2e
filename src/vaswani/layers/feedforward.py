"""The position-wise feed-forward network."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

ACTIVATIONS = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
}


class FeedForward(nn.Module):
    """FFN(x) = act(x W_1 + b_1) W_2 + b_2, applied to each position alone.

    ``(batch, seq, d_model) → (batch, seq, d_model)`` through ``d_ff`` hidden
    units; the paper uses ReLU, BERT GELU, GPT-2 the tanh approximation and OPUS-MT's Marian
    models SiLU (swish, x · sigmoid(x)).
    """

    def __init__(self, d_model: int, d_ff: int, activation: str = "relu", bias: bool = True) -> None:
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff, bias=bias)
        self.linear2 = nn.Linear(d_ff, d_model, bias=bias)
        self.activation = ACTIVATIONS[activation]

    def forward(self, x: Tensor) -> Tensor:
        return self.linear2(self.activation(self.linear1(x)))
