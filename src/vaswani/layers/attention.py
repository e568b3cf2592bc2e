"""Scaled dot-product attention and multi-head attention (self and cross, with a KV cache of
:mod:`vaswani.layers.cache`).

Shapes: inputs are ``(batch, seq, d_model)``; inside, heads are
``(batch, heads, seq, d_head)``. Masks follow :mod:`vaswani.layers.masks`
(boolean, True = may attend).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vaswani.layers.cache import AttentionCache, KVCache, RollingKVCache, StaticKVCache, newest_keys
from vaswani.layers.kernels import explicit_attention_is_faster, sdpa_takes_grouped_heads
from vaswani.layers.linear import Linear
from vaswani.layers.local import is_key_mask, local_attention
from vaswani.layers.masks import combine, placed_mask, self_attention_mask
from vaswani.layers.positions import ALiBiPositions, RelativePositions, ScorePositions, position_ids


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


def attention_weights(q: Tensor, k: Tensor, mask: Tensor | None, bias: Tensor | None = None) -> Tensor:
    """softmax(Q Kᵀ / sqrt(d_head) + bias) with masked scores removed, (batch, heads, q_len, k_len)."""
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if bias is not None:
        scores = scores + bias
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    return scores.softmax(dim=-1)


def regroup(q: Tensor, group: int) -> Tensor:
    """(rows, heads, t, d) → (rows / group, heads, group · t, d): the queries of ``group``
    consecutive rows become one row's queries (they attend to the same memory row)."""
    rows, heads, t, d = q.shape
    n = rows // group
    return q.view(n, group, heads, t, d).transpose(1, 2).reshape(n, heads, group * t, d)


def ungroup(x: Tensor, group: int) -> Tensor:
    """The inverse of :func:`regroup`: (rows / group, heads, group · t, d) → (rows, heads, t, d)."""
    n, heads, gt, d = x.shape
    return x.view(n, heads, group, gt // group, d).transpose(1, 2).reshape(n * group, heads, gt // group, d)


def expand_heads(x: Tensor, n_heads: int) -> Tensor:
    """Key/value heads (batch, kv_heads, seq, d_head) → (batch, n_heads, seq, d_head), each repeated
    for the ``n_heads / kv_heads`` consecutive query heads of its group."""
    return x.repeat_interleave(n_heads // x.shape[1], dim=1)


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1, …, head_h) W^O, head_i = Attention(Q W^Q_i, K W^K_i, V W^V_i).

    ``Attention(Q, K, V) = softmax(Q Kᵀ / sqrt(d_head)) V``. Self-attention takes
    queries, keys and values from ``x``; cross-attention (``cross=True``) takes
    keys and values from ``memory``. ``causal`` and ``window`` shape
    self-attention (decoder, local attention). Positions (built in
    :mod:`vaswani.layers.positions`) act in self-attention: ``relative`` is the scores' scheme,
    Shaw et al.'s relative terms on the scores and values or ALiBi's bias on the scores, and
    ``qk_positions`` transforms the new queries and keys (:meth:`apply_qk_positions`). The fast
    path is ``scaled_dot_product_attention`` (ALiBi's bias given as a float mask); the explicit
    path (used for relative positions, when weights are asked for, and where
    :mod:`vaswani.layers.kernels` measured it faster) computes the same thing step by step and
    returns the weights.

    Grouped-query attention (``n_kv_heads`` < ``n_heads``; 1 is multi-query): keys and values
    have ``n_kv_heads`` heads of ``d_head``, query head ``h`` attending with key/value head
    ``h // (n_heads / n_kv_heads)``; the cache keeps the ``n_kv_heads`` heads, which are expanded
    (:func:`expand_heads`) only for the product, or not at all where SDPA groups them itself.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        fused: bool = False,
        cross: bool = False,
        causal: bool = False,
        window: int | None = None,
        relative: ScorePositions | None = None,
        qk_positions: nn.Module | None = None,
        n_kv_heads: int | None = None,
    ) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        self.d_head = d_model // n_heads
        d_kv = self.n_kv_heads * self.d_head
        self.dropout = dropout
        self.fused = fused
        self.cross = cross
        self.causal = causal
        self.window = window
        self.relative = relative if isinstance(relative, RelativePositions) else None
        self.alibi = relative if isinstance(relative, ALiBiPositions) else None
        self.qk_positions = qk_positions
        if fused and not cross:
            self.qkv_proj = Linear(d_model, d_model + 2 * d_kv, bias=bias)
        elif fused:
            self.q_proj = Linear(d_model, d_model, bias=bias)
            self.kv_proj = Linear(d_model, 2 * d_kv, bias=bias)
        else:
            self.q_proj = Linear(d_model, d_model, bias=bias)
            self.k_proj = Linear(d_model, d_kv, bias=bias)
            self.v_proj = Linear(d_model, d_kv, bias=bias)
        self.out_proj = Linear(d_model, d_model, bias=bias)

    def new_cache(self, static: int | None = None, position: Tensor | None = None) -> AttentionCache:
        """An empty cache for decoding with this layer: a :class:`RollingKVCache` of the newest
        ``window`` keys for windowed causal self-attention (its memory constant in the length), a
        growing :class:`KVCache` otherwise (full attention, cross-attention).

        With ``static`` (a number of columns), causal self-attention gets a :class:`StaticKVCache`
        of that many columns instead, windowed layers too (the window then masks the buffer's
        columns: one buffer size and one step shape for every layer), writing at ``position`` (a
        0-dim long tensor shared by the layers of a stack; a new one on this layer's device when
        None). Cross-attention keeps its :class:`KVCache`, filled once and fixed in size."""
        if static is not None and self.causal and not self.cross:
            if position is None:
                position = torch.zeros((), dtype=torch.long, device=self.out_proj.weight.device)
            return StaticKVCache(static, position)
        if static is not None and not self.cross:
            raise ValueError("a static KV cache serves causal self-attention only")
        if self.window is not None and self.causal and not self.cross:
            return RollingKVCache(self.window)
        return KVCache()

    def _heads(self, x: Tensor) -> Tensor:
        """(batch, seq, heads · d_head) → (batch, heads, seq, d_head), for query or key/value heads."""
        return x.unflatten(-1, (-1, self.d_head)).transpose(1, 2)

    def _project(
        self,
        x: Tensor,
        source: Tensor,
        cache: AttentionCache | None,
        positions: Tensor | None,
        ids: Tensor | None = None,
    ) -> tuple[Tensor, ...]:
        """Queries from ``x``; keys and values from ``source`` or the cache. The new queries and
        keys go through :meth:`apply_qk_positions` (at the new tokens' ids ``ids``) before the
        cache keeps the keys."""
        if self.fused and not self.cross:
            d_kv = self.n_kv_heads * self.d_head
            q, k, v = self.qkv_proj(x).split([self.n_heads * self.d_head, d_kv, d_kv], dim=-1)
            q, k, v = self._heads(q), self._heads(k), self._heads(v)
        else:
            q = self._heads(self.q_proj(x))
            if self.cross and cache is not None and cache.length:
                return q, cache.key, cache.value
            if self.fused:
                k, v = self.kv_proj(source).chunk(2, dim=-1)
            else:
                k, v = self.k_proj(source), self.v_proj(source)
            k, v = self._heads(k), self._heads(v)
        q, k = self.apply_qk_positions(q, k, positions, ids)
        return (q, *cache.append(k, v)) if cache is not None else (q, k, v)

    def apply_qk_positions(
        self, q: Tensor, k: Tensor, positions: Tensor | None, ids: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """The hook of position schemes that act on queries and keys (rotary): ``q`` and ``k``
        (batch, heads, new, d_head) of the new tokens → ``qk_positions(q, k, ids, length)``, where
        ``ids`` (batch | 1, new) are the new tokens' position ids, by default the last columns of
        ``positions`` (batch | 1, cached + new), and ``length`` = cached + new bounds them (an id
        counts the tokens before it). Unchanged without such a scheme."""
        if self.qk_positions is None or positions is None:
            return q, k
        ids = positions[:, -q.shape[2] :] if ids is None else ids
        return self.qk_positions(q, k, ids, positions.shape[-1])

    def _positions(self, x: Tensor, cache: AttentionCache | None, positions: Tensor | None) -> Tensor | None:
        """The position ids (batch | 1, cached + q_len) of every key of self-attention, for the
        schemes that use them (None without one): the given ones, else 0, 1, … (no padding)."""
        if self.cross or (self.relative is None and self.alibi is None and self.qk_positions is None):
            return None
        if positions is None:
            if isinstance(cache, StaticKVCache):
                return position_ids(cache.max_len, x.device)
            positions = position_ids((cache.length if cache is not None else 0) + x.shape[1], x.device)
        return positions

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        mask: Tensor | None = None,
        cache: AttentionCache | None = None,
        need_weights: bool = False,
        positions: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend from ``x`` (batch, q_len, d_model).

        ``memory`` (batch, k_len, d_model) is the key/value source of
        cross-attention; it may have fewer rows than ``x``, each memory row then serving
        that many consecutive rows of ``x`` (the hypotheses of one source in beam search),
        whose queries are attended together. ``mask`` is a boolean may-attend mask
        broadcastable to (batch, heads, q_len, k_len), with memory rows as its batch in
        cross-attention, typically the key padding mask; the causal and window parts
        are added here from the layer's own settings. ``positions`` (batch | 1, cached + q_len)
        are the position ids of every key of self-attention, the queries being the last q_len of
        them (left-padded rows count their real tokens only; 0, 1, … when None). A cache may keep
        only the newest keys (:class:`RollingKVCache`): the mask's key columns and ``positions``
        are then cut to those (k_len of them). With a :class:`StaticKVCache` the keys are its
        ``max_len`` columns, and ``mask`` and ``positions`` cover those columns (k_len = max_len),
        the queries sitting at its next columns. Returns the output (batch, q_len, d_model) and, if
        ``need_weights``, the attention weights (batch, heads, q_len, k_len) before dropout.
        """
        positions = self._positions(x, cache, positions)
        columns = cache.columns(x.shape[1]) if isinstance(cache, StaticKVCache) else None
        ids = None
        if positions is not None:
            ids = positions[:, -x.shape[1] :] if columns is None else positions.index_select(1, columns)
        q, k, v = self._project(x, x if memory is None else memory, cache, positions, ids)
        if cache is not None and not self.cross:
            mask, positions = newest_keys(mask, positions, k.shape[2])
        group = self._group_size(q, k)
        if group > 1:
            q = regroup(q, group)
        out, weights = self._attention(q, k, v, mask, need_weights, positions, ids, columns)
        if group > 1:
            out = ungroup(out, group)
            weights = None if weights is None else ungroup(weights, group)
        return self.out_proj(out.transpose(1, 2).flatten(-2)), weights

    def _attention(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Tensor | None,
        need_weights: bool,
        positions: Tensor | None,
        ids: Tensor | None = None,
        columns: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """softmax(Q Kᵀ / sqrt(d_head) + position terms) V over the keys ``mask`` allows, with the
        layer's causal and window parts: (batch, heads, q_len, d_head), and the weights
        (batch, heads, q_len, k_len) if ``need_weights``; ``positions`` are the keys' position ids
        (relative terms, ALiBi's bias), ``ids`` the queries' (by default the last q_len of
        ``positions``). ``columns`` (q_len,) place the queries among the keys of a static cache
        (:func:`~vaswani.layers.masks.placed_mask`); else they are the last q_len. ``k`` and ``v`` have
        the layer's ``n_kv_heads`` heads: SDPA takes them so with ``enable_gqa`` where
        :func:`~vaswani.layers.kernels.sdpa_takes_grouped_heads` says so, else they are expanded to
        every query head before the product.

        The explicit path computes the weights (asked for, or needed by relative positions) or is
        the faster kernel here (:func:`~vaswani.layers.kernels.explicit_attention_is_faster`);
        otherwise SDPA runs, told ``is_causal`` instead of given a mask where it can be, and given
        ALiBi's bias as a float mask (masked keys at the dtype's minimum). Rows in which no key may
        be attended give zeros, not NaN.

        With a ``window``, many queries over as many keys (training, evaluation, a prompt's
        prefill) and a key mask, the banded path of :mod:`vaswani.layers.local` runs instead, in
        O(L · w); the weights (``need_weights``) and decoding steps take the dense masked path."""
        q_len, k_len = q.shape[2], k.shape[2]
        if (
            self.window is not None
            and not need_weights
            and q_len == k_len > 1
            and columns is None
            and is_key_mask(mask, k_len)
        ):
            explicit = self.relative is not None or explicit_attention_is_faster(q)
            dropout = self.dropout if self.training else 0.0
            scores = self.relative if self.relative is not None else self.alibi
            return local_attention(
                q, k, v, self.window, self.causal, mask, dropout, positions, scores, explicit
            ), None
        if ids is None and positions is not None:
            ids = positions[:, -q_len:]
        bias = None
        if self.alibi is not None and positions is not None and ids is not None:
            bias = self.alibi.bias(ids, positions).to(q.dtype)
        explicit = need_weights or self.relative is not None or explicit_attention_is_faster(q)
        is_causal = (
            not explicit
            and bias is None
            and self.causal
            and self.window is None
            and mask is None
            and q_len == k_len > 1
            and columns is None
        )
        if columns is not None:
            mask = combine(mask, placed_mask(columns, k_len, self.window))
        elif not self.cross and not is_causal:
            mask = combine(mask, self_attention_mask(q_len, k_len, self.causal, self.window, q.device))
        has_key = None
        if mask is not None:
            mask, has_key = guard_empty_rows(mask)
        dropout = self.dropout if self.training else 0.0
        weights = None
        grouped = self.n_kv_heads != self.n_heads
        enable_gqa = (
            grouped and not explicit and sdpa_takes_grouped_heads(q, mask is not None or bias is not None)
        )
        if grouped and not enable_gqa:
            k, v = expand_heads(k, self.n_heads), expand_heads(v, self.n_heads)
        if explicit:
            out, weights = self._explicit(q, k, v, mask, dropout, positions, bias, ids)
        else:
            if bias is not None:
                mask = bias if mask is None else torch.where(mask, bias, torch.finfo(bias.dtype).min)
            gqa = {"enable_gqa": True} if enable_gqa else {}
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=is_causal, **gqa
            )
        if has_key is not None:
            out = out * has_key
            weights = None if weights is None else weights * has_key
        return out, (weights if need_weights else None)

    def _group_size(self, q: Tensor, k: Tensor) -> int:
        """How many consecutive query rows share each memory row in cross-attention (1 otherwise)."""
        rows, memory_rows = q.shape[0], k.shape[0]
        if not self.cross or rows == memory_rows or not memory_rows:
            return 1
        if rows % memory_rows:
            raise ValueError(f"cross-attention: {rows} query rows cannot share {memory_rows} memory rows")
        return rows // memory_rows

    def _explicit(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Tensor | None,
        dropout: float,
        positions: Tensor | None,
        bias: Tensor | None = None,
        ids: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """The reference path: weights computed explicitly, ``bias`` (ALiBi's) or relative terms
        added (by the position ids ``positions`` of the keys and ``ids`` of the queries, by default
        the last of ``positions``)."""
        bucket = None
        if self.relative is not None and positions is not None:
            ids = positions[:, -q.shape[2] :] if ids is None else ids
            bucket = self.relative.bucket(ids[:, None], positions[:, None])
            bias = self.relative.key_scores(q, bucket) / math.sqrt(self.d_head)
        weights = attention_weights(q, k, mask, bias)
        dropped = F.dropout(weights, dropout) if dropout > 0 else weights
        out = dropped @ v
        if self.relative is not None and bucket is not None:
            out = out + self.relative.value_term(dropped, bucket)
        return out, weights
