"""The position-wise feed-forward network, plain or gated."""

from __future__ import annotations

from torch import Tensor, nn

from vaswani.config import FFNS
from vaswani.layers.linear import Linear


class FeedForward(nn.Module):
    """The feed-forward sublayer, applied to each position alone:
    ``(batch, seq, d_model) → (batch, seq, d_model)`` through ``d_ff`` hidden units.

    ``kind="plain"`` (the paper's): FFN(x) = act(x W_1 + b_1) W_2 + b_2, with the weights
    ``linear1`` (d_model → d_ff) and ``linear2`` (d_ff → d_model); 2 · d_model · d_ff
    weights. The paper uses ReLU, BERT GELU, GPT-2 the tanh approximation and OPUS-MT's Marian
    models SiLU (swish, x · sigmoid(x)).

    ``kind="gated"`` (Shazeer 2020, "GLU Variants Improve Transformer"):
    FFN(x) = (act(x W_gate + b_gate) ⊙ (x W_up + b_up)) W_down + b_down, with the weights
    ``gate_proj`` and ``up_proj`` (d_model → d_ff) and ``down_proj`` (d_ff → d_model), named as
    in Hugging Face's ``LlamaMLP``; 3 · d_model · d_ff weights. With ``act`` SiLU it is SwiGLU
    (Llama's), with GELU GeGLU. To keep the plain FFN's parameter count at d_ff = 4 · d_model,
    the convention is d_ff = 2/3 · 4 · d_model (Llama rounds it up to a multiple of 256); the
    caller sets it through ``d_ff``.

    The biases follow ``bias``. The activation is applied by the first (the gate's)
    :class:`~vaswani.layers.linear.Linear` (fused into it in CPU inference).
    """

    def __init__(
        self, d_model: int, d_ff: int, activation: str = "relu", bias: bool = True, kind: str = "plain"
    ) -> None:
        super().__init__()
        if kind not in FFNS:
            raise ValueError(f"kind must be one of {', '.join(FFNS)}, got {kind!r}")
        self.activation = activation
        self.gated = kind == "gated"
        if self.gated:
            self.gate_proj = Linear(d_model, d_ff, bias=bias)
            self.up_proj = Linear(d_model, d_ff, bias=bias)
            self.down_proj = Linear(d_ff, d_model, bias=bias)
        else:
            self.linear1 = Linear(d_model, d_ff, bias=bias)
            self.linear2 = Linear(d_ff, d_model, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        if self.gated:
            return self.down_proj(self.gate_proj(x, self.activation) * self.up_proj(x))
        return self.linear2(self.linear1(x, self.activation))
