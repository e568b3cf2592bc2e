"""Multi-head attention (self and cross, with a KV cache of :mod:`vaswani.layers.cache`), in the
three steps of its equation:

1. project: the queries, keys and values, and where the queries sit among the keys (their
   position ids, a static cache's columns) (:meth:`MultiHeadAttention.project`);
2. mask and bias: which keys each query may attend (padding, causal, window, a static cache's
   columns) and what the score positions add (:meth:`MultiHeadAttention.mask_and_bias`);
3. attend: ``softmax(Q Kᵀ / sqrt(d_head) + B) V`` by one of :data:`KERNELS`, the reference
   softmax, SDPA or the banded path, which share one signature (as Hugging Face's table of
   attention implementations), chosen by :func:`choose_kernel` where :mod:`vaswani.layers.kernels`
   measured (:func:`attend`).

Shapes: inputs are ``(batch, seq, d_model)``; inside, heads are
``(batch, heads, seq, d_head)``. Masks follow :mod:`vaswani.layers.masks`
(boolean, True = may attend).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vaswani.layers.cache import AttentionCache, KVCache, RollingKVCache, StaticKVCache, newest_keys
from vaswani.layers.kernels import explicit_attention_is_faster, sdpa_takes_grouped_heads
from vaswani.layers.linear import Linear
from vaswani.layers.local import is_key_mask, local_attention
from vaswani.layers.positions import ScoreScheme, position_ids, require
from vaswani.layers.scores import Mask, ScoreBias, softmax_attention

Kernel = Callable[[Tensor, Tensor, Tensor, Mask, ScoreBias | None, float], tuple[Tensor, Tensor | None]]
"""An attention kernel: ``(q, k, v, mask, bias, dropout) → (out, weights or None)``, q (batch, heads,
q_len, d_head), k and v (batch, kv_heads, k_len, d_head), out (batch, heads, q_len, d_head), the
weights (batch, heads, q_len, k_len) before dropout; rows that may attend no key give zeros."""


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
    for the ``n_heads / kv_heads`` consecutive query heads of its group (``x`` itself when equal)."""
    return x if x.shape[1] == n_heads else x.repeat_interleave(n_heads // x.shape[1], dim=1)


def reference(
    q: Tensor, k: Tensor, v: Tensor, mask: Mask, bias: ScoreBias | None, dropout: float = 0.0
) -> tuple[Tensor, Tensor]:
    """The reference kernel: the paper's softmax step by step
    (:func:`~vaswani.layers.scores.softmax_attention`) over the whole mask, the keys and values
    expanded to every query head; the only kernel that returns the weights."""
    allowed, has_key = mask.dense(q.shape[2], k.shape[2], q.device)
    k, v = expand_heads(k, q.shape[1]), expand_heads(v, q.shape[1])
    out, weights = softmax_attention(q, k, v, allowed, bias, dropout)
    return (out, weights) if has_key is None else (out * has_key, weights * has_key)


def sdpa(
    q: Tensor, k: Tensor, v: Tensor, mask: Mask, bias: ScoreBias | None, dropout: float = 0.0
) -> tuple[Tensor, None]:
    """PyTorch's fused ``scaled_dot_product_attention``: told ``is_causal`` instead of given a mask
    where that is the whole mask, given the bias as a float mask (masked keys at the dtype's
    minimum), and grouped key/value heads as they are where
    :func:`~vaswani.layers.kernels.sdpa_takes_grouped_heads` says so (else expanded)."""
    q_len, k_len = q.shape[2], k.shape[2]
    is_causal = bias is None and mask.is_causal_only(q_len, k_len)
    allowed, has_key = (None, None) if is_causal else mask.dense(q_len, k_len, q.device)
    grouped = k.shape[1] != q.shape[1]
    enable_gqa = grouped and sdpa_takes_grouped_heads(q, allowed is not None or bias is not None)
    if grouped and not enable_gqa:
        k, v = expand_heads(k, q.shape[1]), expand_heads(v, q.shape[1])
    attn_mask = allowed
    if bias is not None:
        scores = bias.scores(q)  # the scheme's bias is added to the scaled scores
        attn_mask = scores if allowed is None else torch.where(allowed, scores, torch.finfo(scores.dtype).min)
    gqa = {"enable_gqa": True} if enable_gqa else {}
    # bool(): under torch.onnx's tracer the comparison of shapes is a tensor, which SDPA refuses
    out = F.scaled_dot_product_attention(
        q, k, v, attn_mask=attn_mask, dropout_p=dropout, is_causal=bool(is_causal), **gqa
    )
    return (out if has_key is None else out * has_key), None


def banded(
    q: Tensor, k: Tensor, v: Tensor, mask: Mask, bias: ScoreBias | None, dropout: float = 0.0
) -> tuple[Tensor, None]:
    """The window in blocks (:func:`~vaswani.layers.local.local_attention`), O(L · w), for a
    windowed ``mask`` of a key mask over as many queries as keys: the softmax step by step where
    the bias adds a term of the values or where it was measured faster, else SDPA on the blocks."""
    if mask.window is None:
        raise ValueError("the banded kernel needs a window")
    explicit = (bias is not None and bias.has_values) or explicit_attention_is_faster(q)
    ids, scheme = (None, None) if bias is None else (bias.key_ids, bias.scheme)
    return local_attention(
        q, k, v, mask.window, mask.causal, mask.given, dropout, ids, scheme, explicit
    ), None


KERNELS: dict[str, Kernel] = {"reference": reference, "sdpa": sdpa, "banded": banded}
"""The attention kernels by name; :func:`choose_kernel` picks one."""


def choose_kernel(q: Tensor, k: Tensor, mask: Mask, bias: ScoreBias | None, need_weights: bool) -> str:
    """The name in :data:`KERNELS` of the kernel for these queries and keys: ``banded`` for a
    window over many queries and as many keys (training, evaluation, a prompt's prefill) under a
    key mask (:func:`~vaswani.layers.local.is_key_mask`) when the weights are not asked for;
    ``reference`` when they are, when the bias adds a term of the values (both need the weights),
    or where it was measured faster (:func:`~vaswani.layers.kernels.explicit_attention_is_faster`);
    ``sdpa`` otherwise."""
    q_len, k_len = q.shape[2], k.shape[2]
    windowed = mask.window is not None and mask.columns is None and q_len == k_len > 1
    if windowed and not need_weights and is_key_mask(mask.given, k_len):
        return "banded"
    if need_weights or (bias is not None and bias.has_values) or explicit_attention_is_faster(q):
        return "reference"
    return "sdpa"


def attend(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Mask,
    bias: ScoreBias | None = None,
    dropout: float = 0.0,
    need_weights: bool = False,
    group: int = 1,
) -> tuple[Tensor, Tensor | None]:
    """``softmax(Q Kᵀ / sqrt(d_head) + B) V`` over the keys ``mask`` allows, B the ``bias`` of the
    position scheme, by the kernel :func:`choose_kernel` names: (batch, heads, q_len, d_head), and
    the weights (batch, heads, q_len, k_len) before dropout if ``need_weights``. ``k`` and ``v``
    have kv_heads dividing the query heads. ``group`` consecutive rows of ``q`` share each row of
    ``k`` and ``v`` (cross-attention of beam hypotheses over their source): they are attended as
    one row's queries (:func:`regroup`). Rows that may attend no key give zeros, not NaN."""
    if group > 1:
        q = regroup(q, group)
    out, weights = KERNELS[choose_kernel(q, k, mask, bias, need_weights)](q, k, v, mask, bias, dropout)
    if group > 1:
        out, weights = ungroup(out, group), None if weights is None else ungroup(weights, group)
    return out, (weights if need_weights else None)


class Placement(NamedTuple):
    """Where the new queries sit among the keys: the position ids of the ``queries`` (batch | 1,
    q_len) and of every ``keys`` (batch | 1, cached + q_len) of self-attention (None without a
    position scheme), and their ``columns`` (q_len,) in a static cache (None without one)."""

    queries: Tensor | None
    keys: Tensor | None
    columns: Tensor | None


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1, …, head_h) W^O, head_i = Attention(Q W^Q_i, K W^K_i, V W^V_i).

    ``Attention(Q, K, V) = softmax(Q Kᵀ / sqrt(d_head) + B) V`` (:func:`attend`). Self-attention
    takes queries, keys and values from ``x``; cross-attention (``cross=True``) takes keys and
    values from ``memory``. ``causal`` and ``window`` shape self-attention (decoder, local
    attention). Positions (built in :mod:`vaswani.layers.positions`) act in self-attention:
    ``relative`` is the scores' scheme (a :class:`~vaswani.layers.positions.ScoreScheme`: the bias
    B, and a term of the values for Shaw et al.'s), ``qk_positions`` transforms the new queries
    and keys (:meth:`apply_qk_positions`); a module that does not implement its protocol is
    refused here.

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
        relative: ScoreScheme | None = None,
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
        self.relative = None if relative is None else require(relative, "scores")
        self.qk_positions = None if qk_positions is None else require(qk_positions, "queries_keys")
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
            k, v = self.keys_values(source)
        q, k = self.apply_qk_positions(q, k, positions, ids)
        return (q, *cache.append(k, v)) if cache is not None else (q, k, v)

    def keys_values(self, source: Tensor) -> tuple[Tensor, Tensor]:
        """K = source W_K, V = source W_V, each (batch, kv_heads, k_len, d_head), of ``source``
        (batch, k_len, d_model): the encoder output in cross-attention (what its cache keeps),
        ``x`` itself in self-attention without a fused QKV projection."""
        if self.fused:
            k, v = self.kv_proj(source).chunk(2, dim=-1)
        else:
            k, v = self.k_proj(source), self.v_proj(source)
        return self._heads(k), self._heads(v)

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

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        mask: Tensor | None = None,
        cache: AttentionCache | None = None,
        need_weights: bool = False,
        positions: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend from ``x`` (batch, q_len, d_model): project, mask and bias, attend.

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
        q, k, v, placed = self.project(x, memory, cache, positions)
        allowed, bias = self.mask_and_bias(mask, placed, cache, k.shape[2])
        dropout = self.dropout if self.training else 0.0
        out, weights = attend(q, k, v, allowed, bias, dropout, need_weights, self._group_size(q, k))
        return self.out_proj(out.transpose(1, 2).flatten(-2)), weights

    def project(
        self, x: Tensor, memory: Tensor | None, cache: AttentionCache | None, positions: Tensor | None
    ) -> tuple[Tensor, Tensor, Tensor, Placement]:
        """Q = x W^Q (batch, heads, q_len, d_head); K = source W^K and V = source W^V (batch,
        kv_heads, k_len, d_head), the source ``memory`` or ``x``, through the cache (which returns
        every key it keeps); and the :class:`Placement` of the queries among the keys. The new
        queries and keys go through :meth:`apply_qk_positions` before the cache keeps the keys."""
        positions = self._positions(x, cache, positions)
        columns = cache.columns(x.shape[1]) if isinstance(cache, StaticKVCache) else None
        ids = None
        if positions is not None:
            ids = positions[:, -x.shape[1] :] if columns is None else positions.index_select(1, columns)
        q, k, v = self._project(x, x if memory is None else memory, cache, positions, ids)
        return q, k, v, Placement(ids, positions, columns)

    def mask_and_bias(
        self, mask: Tensor | None, placed: Placement, cache: AttentionCache | None, k_len: int
    ) -> tuple[Mask, ScoreBias | None]:
        """The :class:`~vaswani.layers.scores.Mask` of the queries over the ``k_len`` keys: the
        given ``mask`` (its key columns cut to those the cache returned), the layer's causal and
        window parts in self-attention, a static cache's columns; and the score scheme's
        :class:`~vaswani.layers.scores.ScoreBias` at the queries' and keys' ids (None without one)."""
        key_ids = placed.keys
        if cache is not None and not self.cross:
            mask, key_ids = newest_keys(mask, key_ids, k_len)
        causal, window = (False, None) if self.cross else (self.causal, self.window)
        bias = None
        if self.relative is not None and placed.queries is not None and key_ids is not None:
            bias = ScoreBias(self.relative, placed.queries, key_ids)
        return Mask(mask, causal, window, placed.columns), bias

    def _positions(self, x: Tensor, cache: AttentionCache | None, positions: Tensor | None) -> Tensor | None:
        """The position ids (batch | 1, cached + q_len) of every key of self-attention, for the
        schemes that use them (None without one): the given ones, else 0, 1, … (no padding)."""
        if self.cross or (self.relative is None and self.qk_positions is None):
            return None
        if positions is None:
            if isinstance(cache, StaticKVCache):
                return position_ids(cache.max_len, x.device)
            positions = position_ids((cache.length if cache is not None else 0) + x.shape[1], x.device)
        return positions

    def _group_size(self, q: Tensor, k: Tensor) -> int:
        """How many consecutive query rows share each memory row in cross-attention (1 otherwise)."""
        rows, memory_rows = q.shape[0], k.shape[0]
        if not self.cross or rows == memory_rows or not memory_rows:
            return 1
        if rows % memory_rows:
            raise ValueError(f"cross-attention: {rows} query rows cannot share {memory_rows} memory rows")
        return rows // memory_rows
