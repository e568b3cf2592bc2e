"""Local (windowed) self-attention computed in blocks: time and memory O(L · w), never L × L.

**The window convention** (that of :func:`vaswani.layers.masks.window_mask` and of the
``attn_window`` field): with window w, query i may attend key j iff ``|i − j| <= w``; causal, iff
``0 <= i − j <= w``: the query itself and the w keys before it, w + 1 keys. Mistral's and Hugging
Face's ``sliding_window`` counts the query itself among its keys: their ``sliding_window`` is our
w + 1.

The sequence (length L, padded inside to a multiple of the block size b) is cut into L / b query
blocks (:class:`Blocks`); block n attends to the keys of blocks n − back … n + ahead, with
``back = ceil(w / b)`` and ``ahead = back`` (0 when causal), which hold every key within the
window of its queries. Query r of a block and key c of its window are ``r − c + back · b``
positions apart in every block, so one boolean pattern (b, keys) is the band (:func:`band`); it is
AND-ed with the keys that exist (not padding, not outside the sequence). The windows of keys and
values are overlapping views of one padded copy (:func:`key_windows`), and the blocks are the batch
rows of ``scaled_dot_product_attention``, the band as its boolean mask (ALiBi's bias as a float
mask), or of an explicit softmax where relative positions (Shaw et al.) need their terms or where
:mod:`vaswani.layers.kernels` measured it faster. Position terms are computed from the position
ids of each block's queries and window's keys, so left-padded rows get the same terms as in the
dense path. Rows with no key to attend give zeros.

Measured on 2 CPU cores (torch 2.13, L = 8192, w = 128, 4 heads of 64, fp32, forward + backward):
SDPA on the blocks 0.53 s against 0.84 s for the explicit softmax; blocks of 32, 64, 128 keys
within 10% of each other, 256 30% slower; hence b = w, at least :data:`MIN_BLOCK`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from vaswani.layers.kernels import sdpa_takes_grouped_heads
from vaswani.layers.positions import ALiBiPositions, RelativePositions, ScorePositions, position_ids

MIN_BLOCK = 32
"""The smallest query block: tiny windows would otherwise make many tiny blocks."""


@dataclass(frozen=True)
class Blocks:
    """How a sequence of ``length`` is cut for a window: ``count`` blocks of ``size`` queries, each
    attending to the ``keys = (back + 1 + ahead) · size`` keys of the blocks from ``back`` before it
    to ``ahead`` after it."""

    length: int
    size: int
    count: int
    back: int
    ahead: int

    @property
    def keys(self) -> int:
        """The keys in each block's window."""
        return (self.back + 1 + self.ahead) * self.size

    @property
    def padded(self) -> int:
        """The length padded to whole blocks."""
        return self.count * self.size


def blocks_for(length: int, window: int, causal: bool) -> Blocks:
    """The blocks of a sequence of ``length`` (>= 1) under ``window``: block size w (at least
    :data:`MIN_BLOCK`, at most ``length``), reaching ``ceil(w / b)`` blocks back (and ahead when
    not causal), never beyond the first or last block."""
    size = min(length, max(window, MIN_BLOCK))
    count = -(-length // size)
    reach = min(-(-window // size), count - 1)
    return Blocks(length, size, count, reach, 0 if causal else reach)


def band(blocks: Blocks, window: int, causal: bool, device: torch.device) -> Tensor:
    """(size, keys) bool: query r of a block may attend key c of its window (their distance
    ``r − c + back · size`` is within the window, and not negative when causal)."""
    r = torch.arange(blocks.size, device=device)[:, None]
    c = torch.arange(blocks.keys, device=device)[None]
    distance = r - c + blocks.back * blocks.size
    allowed = distance.abs() <= window
    if causal:
        allowed &= distance >= 0
    return allowed


def query_blocks(x: Tensor, blocks: Blocks, fill: float | bool = 0) -> Tensor:
    """(rows, length, *rest) → (rows, count, size, *rest): padded at the end with ``fill``."""
    pad = blocks.padded - blocks.length
    padded = F.pad(x, (0, 0) * (x.dim() - 2) + (0, pad), value=fill) if pad else x
    return padded.unflatten(1, (blocks.count, blocks.size))


def id_windows(x: Tensor, blocks: Blocks, fill: float | bool = 0) -> Tensor:
    """(rows, length) → (rows, count, keys): each block's window, ``fill`` outside the sequence."""
    front, end = blocks.back * blocks.size, blocks.ahead * blocks.size + blocks.padded - blocks.length
    return F.pad(x, (front, end), value=fill).unfold(1, blocks.keys, blocks.size)


def key_windows(x: Tensor, blocks: Blocks) -> Tensor:
    """Keys or values (batch, heads, length, d) → (batch · count, heads, keys, d), overlapping views
    of one copy of the rows padded to whole blocks and laid end to end: a window beyond its row's
    ends reads zeros or the neighbouring row's keys, which :func:`block_mask` removes."""
    batch, heads, _, d = x.shape
    rows = query_blocks(x.transpose(1, 2), blocks).reshape(batch * blocks.padded, heads, d)
    flat = F.pad(rows, (0, 0, 0, 0, blocks.back * blocks.size, blocks.ahead * blocks.size))
    return flat.unfold(0, blocks.keys, blocks.size).permute(0, 1, 3, 2)


def per_row(x: Tensor, batch: int) -> Tensor:
    """(rows, count, …) with rows 1 or ``batch`` → (batch · count, …)."""
    return x.expand(batch, *x.shape[1:]).flatten(0, 1)


def block_mask(
    blocks: Blocks, window: int, causal: bool, key_mask: Tensor | None, batch: int, device: torch.device
) -> Tensor:
    """(batch · count, 1, size, keys) bool: the band AND the keys that exist in each window (inside
    the sequence and allowed by ``key_mask`` (batch | 1, length), True = may attend)."""
    if key_mask is None:
        key_mask = torch.ones(1, blocks.length, dtype=torch.bool, device=device)
    exists = id_windows(key_mask, blocks, False)
    allowed = exists[:, :, None, :] & band(blocks, window, causal, device)
    return per_row(allowed, batch)[:, None]


def is_key_mask(mask: Tensor | None, length: int) -> bool:
    """Whether ``mask`` is None or a key mask (batch | 1, 1, 1, length), what :func:`local_attention`
    takes (a mask that varies by query or head keeps the dense path)."""
    return mask is None or (mask.dim() == 4 and mask.shape[1:] == (1, 1, length))


def local_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    window: int,
    causal: bool,
    mask: Tensor | None = None,
    dropout: float = 0.0,
    positions: Tensor | None = None,
    scores: ScorePositions | None = None,
    explicit: bool = False,
) -> Tensor:
    """Windowed self-attention of ``q`` (batch, heads, L, d_head) over ``k``, ``v`` (batch,
    kv_heads, L, d_head), kv_heads dividing heads: (batch, heads, L, d_head), equal to the dense
    path over :func:`~vaswani.layers.masks.window_mask` (the convention of this module).

    ``mask`` (batch | 1, 1, 1, L) is the key padding mask (True = may attend); ``dropout`` the
    probability of dropping an attention weight; ``positions`` (batch | 1, L) the position ids of
    the tokens (0, 1, … when None), read by ``scores``: ALiBi's bias or Shaw et al.'s relative
    terms. ``explicit`` computes the softmax step by step (always with relative terms) instead of
    SDPA. The attention weights are not returned: a caller that needs them takes the dense path."""
    batch, heads, length, d_head = q.shape
    blocks = blocks_for(length, window, causal)
    relative = scores if isinstance(scores, RelativePositions) else None
    explicit = explicit or relative is not None
    key_mask = None if mask is None else mask[:, 0, 0]
    allowed = block_mask(blocks, window, causal, key_mask, batch, q.device)
    has_key = allowed.any(dim=-1, keepdim=True)
    allowed = allowed | ~has_key
    if k.shape[1] != heads and (explicit or not sdpa_takes_grouped_heads(q, True)):
        k, v = (x.repeat_interleave(heads // x.shape[1], dim=1) for x in (k, v))
    queries = query_blocks(q.transpose(1, 2), blocks).flatten(0, 1).transpose(1, 2)
    keys, values = key_windows(k, blocks), key_windows(v, blocks)
    bias, bucket = None, None
    if scores is not None:
        ids = position_ids(length, q.device) if positions is None else positions
        query_ids = query_blocks(ids, blocks).flatten(0, 1)
        key_ids = id_windows(ids, blocks).flatten(0, 1)
        if isinstance(scores, ALiBiPositions):
            bias = scores.bias(query_ids, key_ids).to(q.dtype).unflatten(0, (-1, blocks.count))
            bias = per_row(bias, batch)
        else:
            bucket = scores.bucket(query_ids[:, None], key_ids[:, None]).unflatten(0, (-1, blocks.count))
            bucket = per_row(bucket, batch)
    if explicit:
        out = _explicit(queries, keys, values, allowed, dropout, bias, bucket, relative)
    else:
        attn_mask = allowed if bias is None else torch.where(allowed, bias, torch.finfo(bias.dtype).min)
        gqa = {"enable_gqa": True} if keys.shape[1] != heads else {}
        out = F.scaled_dot_product_attention(
            queries, keys, values, attn_mask=attn_mask, dropout_p=dropout, **gqa
        )
    out = out * has_key
    out = out.transpose(1, 2).reshape(batch, blocks.padded, heads, d_head)[:, :length]
    return out.transpose(1, 2)


def _explicit(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    allowed: Tensor,
    dropout: float,
    bias: Tensor | None,
    bucket: Tensor | None,
    relative: RelativePositions | None,
) -> Tensor:
    """softmax(Q Kᵀ / sqrt(d_head) + position terms) V on the blocks: ``q`` (rows, heads, size,
    d_head), ``k``, ``v`` (rows, heads, keys, d_head), ``allowed`` (rows, 1, size, keys); Shaw et
    al.'s terms by ``bucket`` (rows, 1, size, keys) or ALiBi's ``bias`` (rows, heads, size, keys)."""
    logits = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if relative is not None and bucket is not None:
        logits = logits + relative.key_scores(q, bucket) / math.sqrt(q.shape[-1])
    if bias is not None:
        logits = logits + bias
    weights = logits.masked_fill(~allowed, torch.finfo(logits.dtype).min).softmax(dim=-1)
    dropped = F.dropout(weights, dropout) if dropout > 0 else weights
    out = dropped @ v
    if relative is not None and bucket is not None:
        out = out + relative.value_term(dropped, bucket)
    return out
