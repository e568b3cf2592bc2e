"""The values of ``ModelConfig.position``, as data: where each scheme acts and what it weighs.

The modules themselves are built in :mod:`vaswani.layers.positions` (its ``SCHEMES`` has one entry
per value here, acting in the same place); this table sits below the layers so that the config
(the ``--position`` flag's choices), the memory estimate (:mod:`vaswani.resources`) and the
exporters (:data:`ROTARY`) can read it without building a model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vaswani.config import ModelConfig

PLACES = ("embedding", "scores", "queries_keys")


@dataclass(frozen=True)
class PositionKind:
    """Where a value of ``position`` acts, one of :data:`PLACES`: ``embedding`` (an absolute table
    the embedding adds), ``scores`` (a bias of attention's scores, built per self-attention layer)
    or ``queries_keys`` (a map of the new queries and keys; ``rotary`` if it rotates their pairs of
    features). For the memory estimate: the ``elements`` of its parameters or table in a model of a
    config, the config ``fields`` they grow with, and whether the weights file ``stored`` them (a
    sinusoidal table is a buffer that it does not)."""

    acts: str
    elements: Callable[[ModelConfig], int] = lambda cfg: 0
    fields: tuple[str, ...] = ()
    stored: bool = True
    rotary: bool = False


def self_attention_layers(cfg: ModelConfig) -> int:
    """The self-attention layers of a model of ``cfg``, each with its own score positions."""
    if cfg.arch != "encoder_decoder":
        return cfg.n_layers
    return (cfg.n_encoder_layers or cfg.n_layers) + (cfg.n_decoder_layers or cfg.n_layers)


def table(cfg: ModelConfig) -> int:
    """The elements of the absolute tables, (max_len, d_model): one in each embedding (an
    encoder-decoder's source and target have one each)."""
    return (1 + (cfg.arch == "encoder_decoder")) * cfg.max_len * cfg.d_model


def shaw(cfg: ModelConfig) -> int:
    """Shaw et al.'s a^K and a^V, (2 · rel_clip + 1, d_head) each, in every self-attention layer."""
    return self_attention_layers(cfg) * 2 * (2 * cfg.rel_clip + 1) * (cfg.d_model // cfg.n_heads)


def rotary_table(cfg: ModelConfig) -> int:
    """The cos and sin tables of rotary positions, (max_len, d_head / 2) each, in every attention
    layer that rotates (each builds its own on first use)."""
    return self_attention_layers(cfg) * cfg.max_len * (cfg.d_model // cfg.n_heads)


def alibi(cfg: ModelConfig) -> int:
    """ALiBi's slope of each head, in every self-attention layer (a buffer)."""
    return self_attention_layers(cfg) * cfg.n_heads


def t5(cfg: ModelConfig) -> int:
    """T5's scalar per (bucket, head), in every self-attention layer."""
    return self_attention_layers(cfg) * cfg.rel_buckets * cfg.n_heads


TABLE = ("max_len", "d_model")
ROTARY_FIELDS = ("max_len", "d_model", "n_layers")
POSITIONS: dict[str, PositionKind] = {
    "sinusoidal": PositionKind("embedding", table, TABLE, stored=False),
    "learned": PositionKind("embedding", table, TABLE),
    "relative": PositionKind("scores", shaw, ("rel_clip", "d_model", "n_layers")),
    "sinusoidal_halves": PositionKind("embedding", table, TABLE, stored=False),
    "rope": PositionKind("queries_keys", rotary_table, ROTARY_FIELDS, stored=False, rotary=True),
    "rope_interleaved": PositionKind("queries_keys", rotary_table, ROTARY_FIELDS, stored=False, rotary=True),
    "alibi": PositionKind("scores", alibi, ("n_heads", "n_layers"), stored=False),
    "t5_bias": PositionKind("scores", t5, ("rel_buckets", "n_heads", "n_layers")),
}
"""Every value of ``ModelConfig.position``. A new scheme is one entry here and one in
:data:`vaswani.layers.positions.SCHEMES`, acting in the same place."""

ROTARY = tuple(name for name, kind in POSITIONS.items() if kind.rotary)
"""The schemes that rotate queries and keys (exported as Llama; drawn as rotary's kernel)."""


def position_problem(cfg: ModelConfig) -> tuple[str, str] | None:
    """The field and the message of what does not fit in ``cfg``'s position fields, or None: a
    rotary scheme needs an even head dimension; T5's buckets need ``rel_max_distance`` beyond the
    exact ones (the log of its ratio to them divides)."""
    d_head = cfg.d_model // cfg.n_heads
    if cfg.position in ROTARY and d_head % 2:
        return "position", (
            f"{cfg.position} rotates pairs of features and needs an even head dimension "
            f"(d_model / n_heads), got {cfg.d_model} / {cfg.n_heads} = {d_head}"
        )
    exact = cfg.rel_buckets // 2
    if cfg.position == "t5_bias" and cfg.rel_max_distance <= exact:
        return "rel_max_distance", f"must be > rel_buckets / 2 = {exact}, got {cfg.rel_max_distance}"
    return None
