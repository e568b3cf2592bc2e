"""What attention's kernels take besides the queries, keys and values, and the paper's softmax over
them: which keys each query may attend (:class:`Mask`, described in parts, built whole by the
dense kernels and block by block by the banded one), what the position scheme adds to the scores
(:class:`ScoreBias`), and ``softmax(Q Kᵀ / sqrt(d_head) + B) V`` step by step
(:func:`softmax_attention`).

Masks follow :mod:`vaswani.layers.masks` (boolean, True = may attend).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from vaswani.layers.masks import combine, placed_mask, self_attention_mask
from vaswani.layers.positions import ScoreScheme


def guard_empty_rows(mask: Tensor) -> tuple[Tensor, Tensor]:
    """Make rows in which no key may be attended safe for softmax.

    Such a row (an empty source, or padding under a causal mask) would give
    softmax over nothing, i.e. NaN. It is opened to every key here and its
    output is zeroed by the caller with the returned ``(…, q_len, 1)`` flag.
    Both are device-side operations, done for every mask: asking first whether
    any row is empty would wait for the device in every layer.
    """
    has_key = mask.any(dim=-1, keepdim=True)
    return mask | ~has_key, has_key


@dataclass(frozen=True)
class Mask:
    """Which keys each query may attend, in parts: ``given`` (the caller's, typically the key
    padding, broadcastable to (batch, heads, q_len, k_len)); self-attention's ``causal`` and
    ``window`` parts (:func:`~vaswani.layers.masks.self_attention_mask`, the queries the last
    q_len keys), or, with ``columns`` (q_len,), the queries placed at those key columns of a
    static cache (:func:`~vaswani.layers.masks.placed_mask`: causal, and the window)."""

    given: Tensor | None = None
    causal: bool = False
    window: int | None = None
    columns: Tensor | None = None

    def is_causal_only(self, q_len: int, k_len: int) -> bool:
        """Whether it is exactly the causal mask of q_len > 1 queries over as many keys (what SDPA's
        ``is_causal`` applies without a mask)."""
        plain = self.given is None and self.window is None and self.columns is None
        return plain and self.causal and q_len == k_len > 1

    def dense(self, q_len: int, k_len: int, device: torch.device) -> tuple[Tensor | None, Tensor | None]:
        """The parts combined, (…, q_len, k_len), with the rows that may attend no key opened to
        all of them, and the flag (…, q_len, 1) of the rows that may attend one
        (:func:`guard_empty_rows`); (None, None) when every query may attend every key."""
        if self.columns is not None:
            mask = combine(self.given, placed_mask(self.columns, k_len, self.window))
        else:
            mask = combine(self.given, self_attention_mask(q_len, k_len, self.causal, self.window, device))
        return (None, None) if mask is None else guard_empty_rows(mask)


@dataclass(frozen=True)
class ScoreBias:
    """A score scheme (:class:`~vaswani.layers.positions.ScoreScheme`) at the position ids of the
    queries (rows | 1, q_len) and of the keys (rows | 1, k_len): the ``bias`` the kernels take."""

    scheme: ScoreScheme
    query_ids: Tensor
    key_ids: Tensor

    @property
    def has_values(self) -> bool:
        """Whether the scheme adds a term of the values (which needs the weights α)."""
        return self.scheme.value_bias is not None

    def scores(self, q: Tensor) -> Tensor:
        """b_ij for the queries ``q`` (rows, heads, q_len, d_head), in their dtype."""
        return self.scheme.score_bias(q, self.query_ids, self.key_ids).to(q.dtype)

    def values(self, weights: Tensor) -> Tensor | None:
        """The scheme's term of the values for the weights (rows, heads, q_len, k_len), or None."""
        value_bias = self.scheme.value_bias
        return None if value_bias is None else value_bias(weights, self.query_ids, self.key_ids)


def softmax_attention(
    q: Tensor, k: Tensor, v: Tensor, allowed: Tensor | None, bias: ScoreBias | None, dropout: float = 0.0
) -> tuple[Tensor, Tensor]:
    """The paper's equation step by step, ``α = softmax(Q Kᵀ / sqrt(d_head) + B)``, ``Z = α V``
    (plus the bias's term of the values, if any): ``q`` (rows, heads, q_len, d_head), ``k``, ``v``
    (rows, heads, k_len, d_head), the keys a query may not attend (``allowed`` False) at the
    dtype's minimum, dropout on α. Returns Z (rows, heads, q_len, d_head) and α before dropout."""
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if bias is not None:
        scores = scores + bias.scores(q)  # the scheme's bias is added to the scaled scores
    if allowed is not None:
        scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
    weights = scores.softmax(dim=-1)
    dropped = F.dropout(weights, dropout) if dropout > 0 else weights
    out = dropped @ v
    values = None if bias is None else bias.values(dropped)
    return (out if values is None else out + values), weights
