"""Positions, in one home: what the embedding adds, what attention adds to its scores, and what
attention applies to its queries and keys.

The ``position`` config field is resolved here and nowhere else (:data:`SCHEMES`). A scheme acts
in one of three places:

- the embedding adds an absolute table: position ids ``(batch, seq)`` → vectors
  ``(batch, seq, d_model)`` (sinusoidal, sinusoidal_halves, learned; :func:`embedding_positions`);
- attention adds to its scores, ``e_ij = q_i · k_j / sqrt(d_head) + b(q_i, p_i, p_j)`` (relative, Shaw
  et al. 2018, which also adds a term to the values; ALiBi, Press et al. 2022; T5's bucketed bias,
  Raffel et al. 2020; :func:`score_positions`);
- attention applies it to the new queries and keys before the cache keeps them,
  ``(q, k, positions, length) → (q', k')`` with q, k ``(batch, heads, new, d_head)``, their position
  ids ``(batch | 1, new)`` and a bound ``length`` on the ids (rotary, Su et al. 2021, in both
  layouts; :func:`query_key_positions`).

Each place has its protocol (:class:`TablePositions`, :class:`ScoreScheme`,
:class:`QueryKeyPositions`), which the model calls and nothing else: a module that does not
implement the protocol of its place is refused when the model is built (:func:`require`), never
skipped. Position ids ``p`` are threaded from the model down to attention (:func:`position_ids`):
0, 1, … after the cache, or counted from the attention mask for left-padded rows
(:func:`positions_from_mask`), so that a scheme sees every token's true position.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar, runtime_checkable

import torch
from torch import Tensor, nn

from vaswani.config import POSITIONS, ModelConfig
from vaswani.config.positions import PLACES
from vaswani.layers.rotary import RotaryPositions


@runtime_checkable
class TablePositions(Protocol):
    """What the embedding adds: an absolute table P (max_len, d_model) read at position ids,
    ``ids (..., seq) → P[ids] (..., seq, d_model)``."""

    max_len: int

    def __call__(self, positions: Tensor) -> Tensor: ...

    def table_values(self) -> Tensor:
        """The whole table P (max_len, d_model), without gradient (what ``plot positions`` reads)."""
        ...


@runtime_checkable
class ScoreScheme(Protocol):
    """What self-attention adds to its scores from the position ids of its queries and keys,

        e_ij = q_i · k_j / sqrt(d_head) + b_ij,   b = score_bias(q, query_ids, key_ids),

    ``q`` (rows, heads, q_len, d_head), the ids (rows | 1, q_len) and (rows | 1, k_len), b
    broadcasting to (rows, heads, q_len, k_len); b may read the queries (Shaw et al.'s
    q_i · a^K_ij / sqrt(d_head)). ``value_bias`` is None, or adds a term of the values,
    ``z_i = Σ_j α_ij v_j + value_bias(α, query_ids, key_ids)_i`` (Shaw et al.'s Σ_j α_ij a^V_ij),
    α (rows, heads, q_len, k_len) → (rows, heads, q_len, d_head): it needs the weights α, which only
    attention's reference kernel computes."""

    value_bias: Callable[[Tensor, Tensor, Tensor], Tensor] | None

    def score_bias(self, q: Tensor, query_ids: Tensor, key_ids: Tensor) -> Tensor: ...


@runtime_checkable
class QueryKeyPositions(Protocol):
    """What self-attention applies to its new queries and keys before the cache keeps the keys,
    ``(q, k, ids, length) → (q', k')``: q, k (batch, heads, new, d_head), their position ids
    (batch | 1, new), each below ``length`` (the cached and new tokens)."""

    def __call__(self, q: Tensor, k: Tensor, ids: Tensor, length: int) -> tuple[Tensor, Tensor]: ...


PROTOCOLS: dict[str, type] = {
    "embedding": TablePositions,
    "scores": ScoreScheme,
    "queries_keys": QueryKeyPositions,
}
"""The protocol of a scheme acting in each place of ``config.positions.PLACES``."""

M = TypeVar("M")


def require(module: M, place: str, name: str = "") -> M:
    """``module`` if it implements the protocol of a scheme acting in ``place``; else a TypeError
    naming the scheme (``name``), its class and the members it lacks."""
    protocol = PROTOCOLS[place]
    if isinstance(module, protocol):
        return module
    members = [*getattr(protocol, "__annotations__", {}), *vars(protocol)]
    missing = [m for m in dict.fromkeys(members) if not m.startswith("_") and not hasattr(module, m)]
    raise TypeError(
        f"position scheme {name or type(module).__name__!r}: {type(module).__name__} does not implement "
        f"{protocol.__name__}, the protocol of a scheme acting in the {place}"
        + (f" (it lacks {', '.join(missing)})" if missing else "")
    )


def sinusoidal_table(max_len: int, d_model: int, halves: bool = False) -> Tensor:
    """The paper's fixed table, ``(max_len, d_model)``.

    PE(pos, 2i)   = sin(pos / 10000^(2i / d_model))
    PE(pos, 2i+1) = cos(pos / 10000^(2i / d_model))

    With ``halves`` the same values are laid out as all the sines, then all the cosines:
    PE(pos, i) = sin(pos / 10000^(2i / d_model)) for i < ceil(d_model / 2), the cosines after
    them (Marian's layout, and tensor2tensor's); it is the interleaved table with its columns
    permuted (:func:`halves_order`).
    """
    position = torch.arange(max_len, dtype=torch.float64)[:, None]
    inv_freq = torch.exp(-math.log(10000.0) * torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    table = torch.zeros(max_len, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(position * inv_freq)
    table[:, 1::2] = torch.cos(position * inv_freq)[:, : d_model // 2]
    if halves:
        table = table[:, halves_order(d_model)]
    return table.float()


def halves_order(d_model: int) -> Tensor:
    """The column order that turns the interleaved sinusoidal table into the halves one: the
    even columns (sines), then the odd ones (cosines)."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


class SinusoidalPositions(nn.Module):
    """Fixed sinusoidal positions (Vaswani et al. 2017, section 3.5); no parameters. ``halves``
    lays the table out as sines then cosines (see :func:`sinusoidal_table`)."""

    def __init__(self, max_len: int, d_model: int, halves: bool = False) -> None:
        super().__init__()
        self.max_len = max_len
        self.register_buffer("table", sinusoidal_table(max_len, d_model, halves), persistent=False)

    def forward(self, positions: Tensor) -> Tensor:
        """``positions`` (..., seq) int64 → (..., seq, d_model)."""
        return self.table[positions]

    def table_values(self) -> Tensor:
        """The table (max_len, d_model), from its formula."""
        return self.table


class LearnedPositions(nn.Module):
    """Learned absolute positions: one trained vector per position id (BERT, GPT-2)."""

    def __init__(self, max_len: int, d_model: int) -> None:
        super().__init__()
        self.max_len = max_len
        self.embedding = nn.Embedding(max_len, d_model)

    def forward(self, positions: Tensor) -> Tensor:
        """``positions`` (..., seq) int64 → (..., seq, d_model)."""
        return self.embedding(positions)

    def table_values(self) -> Tensor:
        """The trained table (max_len, d_model)."""
        return self.embedding.weight.detach()


class RelativePositions(nn.Module):
    """Relative position representations of Shaw et al. (2018), shared by all heads.

    For query position i and key position j the distance is clipped,
    ``r = clip(j - i, -k, k)``, and two learned tables give ``a^K_r`` and
    ``a^V_r`` of size ``d_head``. Attention becomes

        e_ij = q_i · (k_j + a^K_ij) / sqrt(d_head)
        z_i  = Σ_j α_ij (v_j + a^V_ij)

    Neither term builds the ``(q_len, k_len, d_head)`` tensor: the key term
    multiplies queries by the ``2k+1`` table rows and gathers by distance; the
    value term sums the attention weights per distance bucket first, then
    multiplies by the table.
    """

    def __init__(self, d_head: int, clip: int) -> None:
        super().__init__()
        self.clip = clip
        self.keys = nn.Embedding(2 * clip + 1, d_head)
        self.values = nn.Embedding(2 * clip + 1, d_head)

    def bucket(self, query_ids: Tensor, key_ids: Tensor) -> Tensor:
        """Table index ``clip(p_j - p_i, -k, k) + k`` of the queries' position ids ``query_ids``
        (..., q_len) and the keys' ``key_ids`` (..., k_len), (..., q_len, k_len). With a KV cache
        the queries are the last of the keys; in a left-padded row the ids count real tokens only."""
        distance = key_ids[..., None, :] - query_ids[..., :, None]
        return distance.clamp(-self.clip, self.clip) + self.clip

    def key_scores(self, q: Tensor, bucket: Tensor) -> Tensor:
        """``q`` (batch, heads, q_len, d_head) → q_i · a^K_ij, (batch, heads, q_len, k_len);
        ``bucket`` broadcasts to (batch, heads, q_len, k_len)."""
        per_bucket = q @ self.keys.weight.to(q.dtype).t()
        index = bucket.expand(*q.shape[:2], *bucket.shape[-2:])
        return per_bucket.gather(-1, index)

    def value_term(self, weights: Tensor, bucket: Tensor) -> Tensor:
        """``weights`` (batch, heads, q_len, k_len) → Σ_j α_ij a^V_ij, (batch, heads, q_len, d_head)."""
        index = bucket.expand_as(weights)
        summed = weights.new_zeros(*weights.shape[:-1], self.keys.num_embeddings)
        summed.scatter_add_(-1, index, weights)
        return summed @ self.values.weight.to(weights.dtype)

    def score_bias(self, q: Tensor, query_ids: Tensor, key_ids: Tensor) -> Tensor:
        """The key term as a bias of the scaled scores, q_i · a^K_ij / sqrt(d_head), (rows, heads,
        q_len, k_len) (:class:`ScoreScheme`)."""
        return self.key_scores(q, self.bucket(query_ids[:, None], key_ids[:, None])) / math.sqrt(q.shape[-1])

    def value_bias(self, weights: Tensor, query_ids: Tensor, key_ids: Tensor) -> Tensor:
        """The value term Σ_j α_ij a^V_ij of the weights α (:class:`ScoreScheme`)."""
        return self.value_term(weights, self.bucket(query_ids[:, None], key_ids[:, None]))


def alibi_slopes(n_heads: int) -> Tensor:
    """ALiBi's head slopes m_h, (n_heads,) float64. For n a power of two they are the geometric
    sequence m_h = 2^(−8h / n), h = 1 … n (8 heads: 1/2, 1/4, …, 1/256); otherwise those of the
    nearest lower power of two 2^k, then every other slope of 2^(k+1) (the odd ones,
    2^(−4(2h − 1) / 2^k)) until there are n (Press et al. 2022, their reference code)."""
    lower = 2 ** math.floor(math.log2(n_heads))
    first = [2.0 ** (-8.0 * h / lower) for h in range(1, lower + 1)]
    rest = [2.0 ** (-8.0 * (2 * h - 1) / (2 * lower)) for h in range(1, n_heads - lower + 1)]
    return torch.tensor(first + rest, dtype=torch.float64)


class ALiBiPositions(nn.Module):
    """Attention with linear biases (ALiBi, Press et al. 2022): no position embedding, and each
    head h adds ``b_ij = −m_h · (p_i − p_j)`` to its scores q_i · k_j / sqrt(d_head), with the
    slopes m_h of :func:`alibi_slopes`. Causal attention sees only p_j ≤ p_i, where that is the
    paper's bias; a bidirectional encoder uses the symmetric ``−m_h · |p_i − p_j|`` (every key
    penalised by its distance, on either side). Both are computed as ``−m_h · |p_i − p_j|``.
    No parameters; the slopes are a buffer outside the state dict."""

    def __init__(self, n_heads: int) -> None:
        super().__init__()
        self.register_buffer("slopes", alibi_slopes(n_heads).float(), persistent=False)

    value_bias = None  # nothing added to the values (:class:`ScoreScheme`)

    def bias(self, query_ids: Tensor, key_ids: Tensor) -> Tensor:
        """The bias of the queries' position ids ``query_ids`` (batch | 1, q_len) against the
        keys' ``key_ids`` (batch | 1, k_len): (batch | 1, heads, q_len, k_len), the slopes' dtype."""
        distance = (query_ids[:, :, None] - key_ids[:, None, :]).abs()
        return -self.slopes[:, None, None] * distance[:, None].to(self.slopes.dtype)

    def score_bias(self, q: Tensor, query_ids: Tensor, key_ids: Tensor) -> Tensor:
        """:meth:`bias`, which does not read the queries (:class:`ScoreScheme`)."""
        return self.bias(query_ids, key_ids)


class T5Bias(nn.Module):
    """T5's relative position bias (Raffel et al. 2020; Mesh TensorFlow's and Hugging Face's
    ``T5Attention``): a learned scalar per (distance bucket, head), added to each head's scores,

        e_ij = q_i · k_j / sqrt(d_head) + B[bucket(p_j − p_i), h].

    Of ``num_buckets``, a bidirectional layer gives half to the keys after the query and half to
    the others; a causal one gives all of them to the keys before it (those after are masked).
    Within a direction's n buckets, distances below n / 2 have one bucket each, the others
    log-spaced buckets up to ``max_distance``, beyond which they share the last (:meth:`bucket`).

    Two deviations from T5: T5 adds the bias to the unscaled q_i · k_j (its initialisation absorbs
    1 / sqrt(d_head)), here it is added to the scaled scores, as every score scheme's bias (a T5
    checkpoint reads the same with W^Q scaled by sqrt(d_head)); and each self-attention layer learns
    its own table, where T5 shares the first layer's with the others."""

    value_bias = None  # nothing added to the values (:class:`ScoreScheme`)

    def __init__(
        self, n_heads: int, num_buckets: int = 32, max_distance: int = 128, bidirectional: bool = True
    ):
        super().__init__()
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.bidirectional = bidirectional
        self.table = nn.Embedding(num_buckets, n_heads)

    def bucket(self, distance: Tensor) -> Tensor:
        """The bucket of each distance p_j − p_i (long, any shape), T5's arithmetic step by step:
        in a direction of n buckets, d below n / 2 is its own bucket, a larger one
        n / 2 + floor(log(d / (n / 2)) / log(max_distance / (n / 2)) · n / 2), at most n − 1."""
        buckets, offset = self.num_buckets, torch.zeros_like(distance)
        if self.bidirectional:
            buckets //= 2
            offset = (distance > 0).long() * buckets
            distance = distance.abs()
        else:
            distance = (-distance).clamp(min=0)
        exact = buckets // 2
        ratio = torch.log(distance.clamp(min=exact).float() / exact) / math.log(self.max_distance / exact)
        far = (exact + (ratio * (buckets - exact)).long()).clamp(max=buckets - 1)
        return offset + torch.where(distance < exact, distance, far)

    def score_bias(self, q: Tensor, query_ids: Tensor, key_ids: Tensor) -> Tensor:
        """B[bucket(p_j − p_i), h] of the ids (rows | 1, q_len) and (rows | 1, k_len): (rows | 1,
        heads, q_len, k_len), the table's dtype; the queries are not read (:class:`ScoreScheme`)."""
        distance = key_ids[:, None, :] - query_ids[:, :, None]
        return self.table(self.bucket(distance)).movedim(-1, 1)


def position_ids(length: int, device: torch.device | None = None) -> Tensor:
    """The ids ``0, 1, …, length − 1`` of a row without padding, (1, length); with a KV cache,
    ``length`` counts the cached tokens and the new ones."""
    return torch.arange(length, device=device)[None]


def positions_from_mask(attention_mask: Tensor, offset: int = 0) -> Tensor:
    """Position ids of left-padded rows: each real token counts the real tokens before it,
    ``p_t = Σ_{s ≤ t} m_s − 1``.

    ``attention_mask`` (batch, seq) is True on real tokens; padding gets position 0 (it is
    masked anyway). ``offset`` skips the first columns (the part already in the cache):
    (batch, seq − offset).
    """
    positions = attention_mask.long().cumsum(dim=1) - 1
    return positions.clamp(min=0)[:, offset:]


@dataclass(frozen=True)
class Scheme:
    """Where one value of the ``position`` config field acts: the builder of its module from the
    config in that place (the others None), implementing the place's protocol.

    ``embedding``: a :class:`TablePositions` the embedding adds. ``scores``: a :class:`ScoreScheme`
    from the config and whether its attention is causal (T5's buckets are one-sided there).
    ``queries_keys``: a :class:`QueryKeyPositions` applied to the new queries and keys.
    """

    embedding: Callable[[ModelConfig], nn.Module] | None = None
    scores: Callable[[ModelConfig, bool], nn.Module] | None = None
    queries_keys: Callable[[ModelConfig], nn.Module] | None = None

    @property
    def places(self) -> list[str]:
        """The places it has a builder for (one)."""
        return [place for place in PLACES if getattr(self, place) is not None]


def rotary(cfg: ModelConfig, interleaved: bool) -> RotaryPositions:
    """The rotary module of ``cfg`` (its head dimension, ``max_len`` and ``rope_theta``)."""
    return RotaryPositions(cfg.d_model // cfg.n_heads, cfg.max_len, cfg.rope_theta, interleaved)


# Every value of ``ModelConfig.position``: a new scheme is its module above, one entry here and its
# entry in ``config.POSITIONS`` (where it acts, its parameters), checked to agree below.
SCHEMES: dict[str, Scheme] = {
    "sinusoidal": Scheme(embedding=lambda cfg: SinusoidalPositions(cfg.max_len, cfg.d_model)),
    "sinusoidal_halves": Scheme(
        embedding=lambda cfg: SinusoidalPositions(cfg.max_len, cfg.d_model, halves=True)
    ),
    "learned": Scheme(embedding=lambda cfg: LearnedPositions(cfg.max_len, cfg.d_model)),
    "relative": Scheme(
        scores=lambda cfg, causal: RelativePositions(cfg.d_model // cfg.n_heads, cfg.rel_clip)
    ),
    "rope": Scheme(queries_keys=lambda cfg: rotary(cfg, interleaved=False)),
    "rope_interleaved": Scheme(queries_keys=lambda cfg: rotary(cfg, interleaved=True)),
    "alibi": Scheme(scores=lambda cfg, causal: ALiBiPositions(cfg.n_heads)),
    "t5_bias": Scheme(
        scores=lambda cfg, causal: T5Bias(cfg.n_heads, cfg.rel_buckets, cfg.rel_max_distance, not causal)
    ),
}


def check_schemes(schemes: dict[str, Scheme]) -> None:
    """A TypeError unless ``schemes`` has one entry per value of ``config.POSITIONS``, each
    building its module in the one place the config's table says."""
    if set(schemes) != set(POSITIONS):
        raise TypeError(f"SCHEMES and config.POSITIONS differ: {sorted(set(schemes) ^ set(POSITIONS))}")
    wrong = [name for name, scheme in schemes.items() if scheme.places != [POSITIONS[name].acts]]
    if wrong:
        raise TypeError(f"SCHEMES and config.POSITIONS disagree on where {', '.join(wrong)} act")


check_schemes(SCHEMES)


def embedding_positions(cfg: ModelConfig) -> nn.Module | None:
    """What the embedding adds for ``cfg.position`` (a :class:`TablePositions`), or None."""
    build = SCHEMES[cfg.position].embedding
    return None if build is None else require(build(cfg), "embedding", cfg.position)


def score_positions(cfg: ModelConfig, causal: bool = False) -> nn.Module | None:
    """What self-attention (``causal`` or not) adds to its scores for ``cfg.position`` (a
    :class:`ScoreScheme`), or None."""
    build = SCHEMES[cfg.position].scores
    return None if build is None else require(build(cfg, causal), "scores", cfg.position)


def query_key_positions(cfg: ModelConfig) -> nn.Module | None:
    """What self-attention applies to its new queries and keys for ``cfg.position`` (a
    :class:`QueryKeyPositions`), or None."""
    build = SCHEMES[cfg.position].queries_keys
    return None if build is None else require(build(cfg), "queries_keys", cfg.position)
