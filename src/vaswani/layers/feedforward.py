"""The position-wise feed-forward network."""

from __future__ import annotations

from torch import Tensor, nn

from vaswani.layers.linear import Linear


class FeedForward(nn.Module):
    """FFN(x) = act(x W_1 + b_1) W_2 + b_2, applied to each position alone.

    ``(batch, seq, d_model) → (batch, seq, d_model)`` through ``d_ff`` hidden
    units; the paper uses ReLU, BERT GELU, GPT-2 the tanh approximation and OPUS-MT's Marian
    models SiLU (swish, x · sigmoid(x)). The activation is applied by the first
    :class:`~vaswani.layers.linear.Linear` (fused into it in CPU inference).
    """

    def __init__(self, d_model: int, d_ff: int, activation: str = "relu", bias: bool = True) -> None:
        super().__init__()
        self.linear1 = Linear(d_model, d_ff, bias=bias)
        self.linear2 = Linear(d_ff, d_model, bias=bias)
        self.activation = activation

    def forward(self, x: Tensor) -> Tensor:
        return self.linear2(self.linear1(x, self.activation))
