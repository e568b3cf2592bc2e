"""Token embeddings combined with absolute positions."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from vaswani.layers.positions import LearnedPositions, SinusoidalPositions


def make_positions(kind: str, max_len: int, d_model: int) -> nn.Module | None:
    """The absolute position module for the ``position`` config field (None for relative,
    which lives inside attention)."""
    if kind in ("sinusoidal", "sinusoidal_halves"):
        return SinusoidalPositions(max_len, d_model, halves=kind == "sinusoidal_halves")
    if kind == "learned":
        return LearnedPositions(max_len, d_model)
    return None


class Embeddings(nn.Module):
    """x = Dropout(E[token] · sqrt(d_model) + P[position]), ``(batch, seq) → (batch, seq, d_model)``.

    The sqrt(d_model) scale is the paper's (section 3.4); BERT and GPT-2 leave
    it out (``scale=False``). ``positions`` may be None for relative schemes.
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        positions: nn.Module | None,
        dropout: float,
        scale: bool = True,
        token: nn.Embedding | None = None,
    ) -> None:
        super().__init__()
        self.token = token if token is not None else nn.Embedding(vocab_size, d_model)
        self.positions = positions
        self.scale = math.sqrt(d_model) if scale else 1.0
        self.dropout = nn.Dropout(dropout)

    def forward(self, tokens: Tensor, positions: Tensor | None = None, offset: int = 0) -> Tensor:
        """``positions`` (batch, seq) overrides the default ``offset, offset+1, …``
        (left-padded prompts take theirs from the attention mask)."""
        x = self.token(tokens) * self.scale
        if self.positions is not None:
            if positions is None:
                last = offset + tokens.shape[1] - 1  # known without reading the tensor back
                positions = torch.arange(offset, last + 1, device=tokens.device)
            else:
                last = int(positions.max())
            if last >= self.positions.max_len:
                raise ValueError(f"sequence of {last + 1} positions exceeds max_len={self.positions.max_len}")
            x = x + self.positions(positions)
        return self.dropout(x)
