"""Attention masks, with one convention everywhere in vaswani.

**Convention: a mask is a boolean tensor, ``True`` means "may attend".** It
broadcasts against attention scores of shape ``(batch, heads, q_len, k_len)``;
the helpers here return ``(batch, 1, 1, k_len)`` for padding and
``(1, 1, q_len, k_len)`` for position-based masks, and masks combine with ``&``.

This is the opposite of ``torch.nn.Transformer`` (``True`` = ignore) and the
same as Hugging Face's ``attention_mask`` (1 = keep) after ``.bool()``:
convert at the edges with :func:`from_key_padding_mask` and never inside.

Masked scores are never filled with a large negative constant such as ``-1e9``
(which overflows in half precision); boolean masks go straight to
``scaled_dot_product_attention`` and the explicit path fills with
``torch.finfo(dtype).min``. A row in which no key may be attended (an empty
source sentence) is handled once, in :mod:`vaswani.layers.attention`.
"""

from __future__ import annotations

import torch
from torch import Tensor


def padding_mask(tokens: Tensor, pad_id: int) -> Tensor:
    """``(batch, 1, 1, k_len)``: True at real tokens, False at padding."""
    return (tokens != pad_id)[:, None, None, :]


def from_key_padding_mask(key_padding_mask: Tensor) -> Tensor:
    """Convert ``nn.Transformer``'s ``(batch, k_len)`` True-is-pad mask to ours."""
    return (~key_padding_mask.bool())[:, None, None, :]


def causal_mask(q_len: int, k_len: int | None = None, device: torch.device | None = None) -> Tensor:
    """``(1, 1, q_len, k_len)``: query ``i`` may attend key ``j`` iff ``j <= i + (k_len - q_len)``.

    With a KV cache the ``q_len`` queries are the *last* ``q_len`` of the
    ``k_len`` positions, hence the offset ``k_len - q_len``.
    """
    k_len = q_len if k_len is None else k_len
    q = torch.arange(k_len - q_len, k_len, device=device)[:, None]
    k = torch.arange(k_len, device=device)[None, :]
    return (k <= q)[None, None]


def window_mask(
    q_len: int,
    window: int,
    k_len: int | None = None,
    causal: bool = False,
    device: torch.device | None = None,
) -> Tensor:
    """``(1, 1, q_len, k_len)`` band mask of truncated (local) attention.

    Query at position ``i`` may attend key ``j`` iff ``|i - j| <= window``; with
    ``causal=True`` iff ``0 <= i - j <= window`` (itself and the previous
    ``window`` keys: ``window + 1`` keys). Queries are the last ``q_len`` of ``k_len`` positions.
    This is the convention of ``attn_window`` everywhere (the banded path of
    :mod:`vaswani.layers.local` too). Mistral's and Hugging Face's ``sliding_window`` counts the
    query itself among its keys: their ``sliding_window`` is our ``window + 1``.
    """
    if window < 1:
        raise ValueError(f"attn_window must be >= 1, got {window}")
    k_len = q_len if k_len is None else k_len
    q = torch.arange(k_len - q_len, k_len, device=device)[:, None]
    k = torch.arange(k_len, device=device)[None, :]
    dist = q - k
    allowed = dist.abs() <= window
    if causal:
        allowed &= dist >= 0
    return allowed[None, None]


def self_attention_mask(
    q_len: int,
    k_len: int,
    causal: bool,
    window: int | None,
    device: torch.device | None = None,
) -> Tensor | None:
    """The position-based part of a self-attention mask, or None when all may attend
    (no causal mask, no window, or a causal mask over a single newest query)."""
    if window is not None:
        return window_mask(q_len, window, k_len, causal=causal, device=device)
    if causal and q_len > 1:
        return causal_mask(q_len, k_len, device=device)
    return None


def placed_mask(columns: Tensor, k_len: int, window: int | None) -> Tensor:
    """``(1, 1, q_len, k_len)`` causal mask of queries placed at the key columns ``columns``
    (q_len,) of a buffer of ``k_len`` (a static KV cache): query i may attend key j iff
    ``j <= columns[i]``, and with a ``window`` iff also ``columns[i] - j <= window``. The columns
    after a query, which a static cache has not filled yet, are masked with them."""
    dist = columns[:, None] - torch.arange(k_len, device=columns.device)[None, :]
    allowed = dist >= 0
    if window is not None:
        allowed &= dist <= window
    return allowed[None, None]


def combine(*masks: Tensor | None) -> Tensor | None:
    """Logical AND of the masks that are not None (None when all are None)."""
    result: Tensor | None = None
    for mask in masks:
        if mask is not None:
            result = mask if result is None else result & mask
    return result
