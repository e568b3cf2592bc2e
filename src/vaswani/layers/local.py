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
AND-ed with the keys that exist (not padding, not outside the sequence). The blocks are the batch
rows of ``scaled_dot_product_attention``, the band as its boolean mask (a score scheme's bias as a
float mask), or of the explicit softmax where the scheme adds a term of the values (Shaw et al.'s)
or where :mod:`vaswani.layers.kernels` measured it faster. A score scheme is called, through its
protocol (:class:`~vaswani.layers.positions.ScoreScheme`), with the position ids of each block's
queries and window's keys, so left-padded rows get the same terms as in the dense path. Rows with
no key to attend give zeros.

**Memory.** The blocks are cut in three spans (:attr:`Blocks.spans`): the inner blocks, whose
windows lie inside the sequence, and the edges before and after them (at most one block before,
as b >= w; the last one or two after). The inner blocks' queries, keys and values are views of
``q``, ``k``, ``v`` themselves (the windows overlapping views, :func:`span_windows`), and without
a key padding mask their mask is the band alone, (1, 1, b, keys), which SDPA broadcasts without a
float copy per block; the edges read a padded copy of the few positions they cover, with a mask
per block. Where the batch rows and the inner blocks do not flatten into one batch dimension as
a view (the windows never do, unless one row or one block), SDPA runs once per row or per block,
whichever are fewer (:func:`pieces`). So autograd keeps for backward, beyond q, k, v and the
output, only the edges' copies and the log-sum-exp of SDPA: at L = 8192, w = 128 (batch 2, 4 heads
of 64, fp32) 65.8 MiB in all against 112.5 MiB with one padded copy of the keys and values and a
mask per block, the time the same (``benchmarks/long_context.py``).

Measured on 2 CPU cores (torch 2.13, L = 8192, w = 128, 4 heads of 64, fp32, forward + backward):
SDPA on the blocks 0.53 s against 0.84 s for the explicit softmax; blocks of 32, 64, 128 keys
within 10% of each other, 256 30% slower; hence b = w, at least :data:`MIN_BLOCK`.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from vaswani.layers.kernels import sdpa_takes_grouped_heads
from vaswani.layers.positions import ScoreScheme, position_ids
from vaswani.layers.scores import ScoreBias, softmax_attention

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
    def inner(self) -> range:
        """The blocks whose windows lie inside the sequence: from ``back`` to the last whose
        window ends by ``length``."""
        return range(self.back, max(self.back, self.length // self.size - self.ahead))

    @property
    def spans(self) -> list[range]:
        """The blocks cut in three: those before :attr:`inner` (their windows begin before the
        sequence), :attr:`inner`, those after it (their windows pass its end), empty ones left out;
        all of them as one span when no block is inner."""
        inner = self.inner
        if not inner:
            return [range(self.count)]
        return [s for s in (range(0, inner.start), inner, range(inner.stop, self.count)) if s]


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


def span_blocks(x: Tensor, blocks: Blocks, span: range, fill: float | bool = 0) -> Tensor:
    """(rows, length, *rest) → (rows, len(span), size, *rest): the blocks of ``span``, the last
    padded with ``fill`` where it passes the end; a view where it does not."""
    start, stop = span.start * blocks.size, span.stop * blocks.size
    part = x.narrow(1, start, min(stop, blocks.length) - start)
    pad = stop - start - part.shape[1]
    padded = F.pad(part, (0, 0) * (x.dim() - 2) + (0, pad), value=fill) if pad else part
    return padded.unflatten(1, (len(span), blocks.size))


def span_windows(x: Tensor, blocks: Blocks, span: range, fill: float | bool = 0) -> Tensor:
    """(rows, length, *rest) → (rows, len(span), *rest, keys): the window of each block of
    ``span``, ``fill`` outside the sequence; overlapping views of ``x`` itself when every window is
    inside it (:attr:`Blocks.inner`), else of a padded copy of the slice the windows cover."""
    start = (span.start - blocks.back) * blocks.size
    stop = (span.stop + blocks.ahead) * blocks.size
    inside = x.narrow(1, max(start, 0), min(stop, blocks.length) - max(start, 0))
    front, end = max(-start, 0), max(stop - blocks.length, 0)
    if front or end:
        inside = F.pad(inside, (0, 0) * (x.dim() - 2) + (front, end), value=fill)
    return inside.unfold(1, blocks.keys, blocks.size)


def span_mask(
    blocks: Blocks, span: range, window: int, causal: bool, key_mask: Tensor | None, device: torch.device
) -> Tensor:
    """(rows | 1, n, 1, size, keys) bool, n = len(span): the band AND the keys that exist in each
    window of ``span`` (inside the sequence, allowed by ``key_mask`` (rows | 1, length), True = may
    attend)."""
    if key_mask is None:
        key_mask = torch.ones(1, blocks.length, dtype=torch.bool, device=device)
    exists = span_windows(key_mask, blocks, span, False)
    return (exists[:, :, None, :] & band(blocks, window, causal, device))[:, :, None]


def merges(x: Tensor) -> bool:
    """Whether the first two dimensions of ``x`` flatten into one as a view (no copy)."""
    return x.shape[0] == 1 or x.shape[1] == 1 or x.stride(0) == x.shape[1] * x.stride(1)


def pieces(x: Tensor, dim: int | None, batch: int) -> tuple[Tensor, ...]:
    """(rows | 1, n, …) → what the SDPA calls take: all of it as (batch · n, …) when ``dim`` is
    None; else one piece per batch row (n, …) when ``dim`` is 0, per block (rows | 1, …) when it
    is 1, views whose gradients autograd stacks at once."""
    if dim is None:
        return (x.expand(batch, *x.shape[1:]).flatten(0, 1),)
    return x.expand(batch, *x.shape[1:]).unbind(0) if dim == 0 else x.unbind(1)


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
    scores: ScoreScheme | None = None,
    explicit: bool = False,
) -> Tensor:
    """Windowed self-attention of ``q`` (batch, heads, L, d_head) over ``k``, ``v`` (batch,
    kv_heads, L, d_head), kv_heads dividing heads: (batch, heads, L, d_head), equal to the dense
    path over :func:`~vaswani.layers.masks.window_mask` (the convention of this module).

    ``mask`` (batch | 1, 1, 1, L) is the key padding mask (True = may attend); ``dropout`` the
    probability of dropping an attention weight; ``positions`` (batch | 1, L) the position ids of
    the tokens (0, 1, … when None), read by the score scheme ``scores``. ``explicit`` computes the
    softmax step by step (always when the scheme adds a term of the values) instead of SDPA. The
    attention weights are not returned: a caller that needs them takes the dense path."""
    batch, heads, length = q.shape[:3]
    blocks = blocks_for(length, window, causal)
    explicit = explicit or (scores is not None and scores.value_bias is not None)
    key_mask = None if mask is None else mask[:, 0, 0]
    if k.shape[1] != heads and (explicit or not sdpa_takes_grouped_heads(q, True)):
        k, v = (x.repeat_interleave(heads // x.shape[1], dim=1) for x in (k, v))
    ids = None
    if scores is not None:
        ids = position_ids(length, q.device) if positions is None else positions
    parts = []
    for span in blocks.spans:
        n = len(span)
        queries = span_blocks(q.transpose(1, 2), blocks, span).transpose(2, 3)
        keys, values = (span_windows(x.transpose(1, 2), blocks, span).transpose(-1, -2) for x in (k, v))
        inner = span == blocks.inner
        dim = None if not inner or all(merges(x) for x in (queries, keys, values)) else int(n <= batch)
        guard = key_mask is not None or not inner
        masks = (
            pieces(span_mask(blocks, span, window, causal, key_mask, q.device), dim, batch)
            if guard
            else itertools.repeat(band(blocks, window, causal, q.device)[None, None])
        )
        biases: Iterable[ScoreBias | None] = itertools.repeat(None)
        if scores is not None and ids is not None:
            query_ids, key_ids = span_blocks(ids, blocks, span), span_windows(ids, blocks, span)
            biases = (
                ScoreBias(scores, *pair)
                for pair in zip(pieces(query_ids, dim, batch), pieces(key_ids, dim, batch), strict=True)
            )
        calls = zip(*(pieces(x, dim, batch) for x in (queries, keys, values)), masks, biases, strict=False)
        outs = [attend_blocks(*args, guard, dropout, explicit).transpose(1, 2) for args in calls]
        out = outs[0].unflatten(0, (batch, n)) if dim is None else torch.stack(outs, dim)
        parts.append(out.flatten(1, 2)[:, : min(span.stop * blocks.size, length) - span.start * blocks.size])
    return (parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)).transpose(1, 2)


def attend_blocks(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    allowed: Tensor,
    bias: ScoreBias | None,
    guard: bool,
    dropout: float,
    explicit: bool,
) -> Tensor:
    """Attention of the blocks ``q`` (rows, heads, size, d_head) over their windows ``k``, ``v``
    (rows, kv_heads, keys, d_head), kv_heads dividing heads (heads when ``explicit``), where
    ``allowed`` (rows | 1, 1, size, keys) says so, with the score scheme's ``bias`` at the ids of
    the blocks (rows | 1, size) and windows (rows | 1, keys). With ``guard``, queries that may
    attend no key give zeros (else every query has one)."""
    has_key = allowed.any(dim=-1, keepdim=True) if guard else None
    if has_key is not None:
        allowed = allowed | ~has_key
    if explicit:
        out = softmax_attention(q, k, v, allowed, bias, dropout)[0]
    else:
        attn_mask = allowed
        if bias is not None:
            scores = bias.scores(q)
            attn_mask = torch.where(allowed, scores, torch.finfo(scores.dtype).min)
        gqa = {"enable_gqa": True} if k.shape[1] != q.shape[1] else {}
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout, **gqa)
    return out if has_key is None else out * has_key
