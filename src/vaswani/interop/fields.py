"""Hugging Face config fields as data: a family states how its ``config.json`` maps to our
:class:`~vaswani.config.ModelConfig` as a table of :class:`Field` rows, which :func:`from_hf`
reads and :func:`to_hf` writes, as the weights' names go through
:class:`~vaswani.interop.common.KeyMap` rows.

A row names a Hugging Face field and ours (or none, for a field we do not have: a flag that must
keep one value, a constant we write), its JSON kind, the default that Hugging Face's config class
gives it when a file leaves it out, the checks that refuse a value naming the field, and a
conversion each way. What is not one field's mapping (a value derived from several fields, a rule
between them) stays explicit code in the family's module. Every refusal is a one-line
:class:`~vaswani.errors.ConfigError` that names the field.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vaswani.config import ModelConfig
from vaswani.errors import ConfigError
from vaswani.resources import check_fits

# A check of a value read: (its Hugging Face name, the value, the values of the rows read before it).
Check = Callable[[str, Any, Mapping[str, Any]], None]


@dataclass(frozen=True)
class Field:
    """One row of a config table: the Hugging Face field ``hf`` and our field ``ours``.

    Reading, the value (``default`` when the file leaves it out; also when it is null, for an
    ``optional`` row, whose null default skips the checks and gives None) must be a ``kind``
    and pass ``checks``; ``to_ours`` converts it: a function, or a table whose other values are
    refused. Writing, ``to_hf`` gives the Hugging Face value: a table of the values of ``ours``, or
    a function of the whole config (for a value derived from several fields); without one, ``ours``
    as it is, or ``default`` for a field we do not have. A row that is not ``imported`` is only
    written (a copy of one of ours, a constant), never read.
    """

    hf: str
    ours: str | None
    kind: type
    default: Any
    checks: tuple[Check, ...] = ()
    to_ours: Callable[[Any], Any] | Mapping[Any, Any] | None = None
    to_hf: Callable[[ModelConfig], Any] | Mapping[Any, Any] | None = None
    optional: bool = False
    imported: bool = True


def of_kind(name: str, value: Any, kind: type) -> Any:
    """``value`` of the field ``name``, refused with a :class:`~vaswani.errors.ConfigError` naming
    the field when it is not a ``kind`` (an int is a float; a float without a fraction, JSON's
    ``1e6``, is an int, and given as one; a bool is neither)."""
    if kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif kind is int:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, kind)
    if not ok:
        raise ConfigError(f"field '{name}': expected {kind.__name__}, got {value!r}")
    return value


def from_hf(
    hf: Mapping[str, Any], model_type: str, table: Sequence[Field]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Our config fields of a ``config.json`` of ``model_type`` by ``table``, and every Hugging Face
    value read (by its name, before conversion: for the family's rules between fields). The rows
    are read in order; the first value refused (or a file of another ``model_type``) is a
    :class:`ConfigError` naming it."""
    found = hf.get("model_type", model_type)
    if found != model_type:
        raise ConfigError(f"field 'model_type': expected {model_type!r}, got {found!r}")
    ours: dict[str, Any] = {}
    read: dict[str, Any] = {}
    for row in table:
        if not row.imported:
            continue
        value = hf.get(row.hf, row.default)
        if value is None and row.optional:
            value = row.default
        if value is not None or not row.optional:  # else None, left out: the family derives it
            value = of_kind(row.hf, value, row.kind)
            for check in row.checks:
                check(row.hf, value, read)
        read[row.hf] = value
        if row.ours is not None:
            ours[row.ours] = _converted(row, value)
    return ours, read


def _converted(row: Field, value: Any) -> Any:
    """Our value of the Hugging Face ``value`` read by ``row`` (None stays None); a value that a
    table conversion does not hold is refused, naming the field and the values it holds."""
    if value is None or row.to_ours is None:
        return value
    if not isinstance(row.to_ours, Mapping):
        return row.to_ours(value)
    if value not in row.to_ours:
        raise ConfigError(
            f"field '{row.hf}': {value!r} is not supported; supported: {', '.join(row.to_ours)}"
        )
    return row.to_ours[value]


def to_hf(cfg: ModelConfig, model_type: str, architecture: str, table: Sequence[Field]) -> dict[str, Any]:
    """The ``config.json`` fields of ``cfg`` by ``table``, after ``model_type`` and ``architectures``
    (``[architecture]``), in the table's order."""
    hf: dict[str, Any] = {"model_type": model_type, "architectures": [architecture]}
    for row in table:
        if callable(row.to_hf):
            hf[row.hf] = row.to_hf(cfg)
        elif row.ours is None:
            hf[row.hf] = row.default
        else:
            value = getattr(cfg, row.ours)
            hf[row.hf] = value if row.to_hf is None else row.to_hf[value]
    return hf


def fitting(cfg: ModelConfig, table: Sequence[Field]) -> ModelConfig:
    """``cfg``, once a model of it is seen to fit in memory (:func:`~vaswani.resources.check_fits`,
    before anything is allocated); refused in one line naming its largest fields by their names in
    ``table`` (``max_position_embeddings=…``)."""
    check_fits(cfg, names={row.ours: row.hf for row in table if row.ours is not None and row.imported})
    return cfg


def at_least_one(name: str, value: int, read: Mapping[str, Any]) -> None:
    """Refuse a size below 1."""
    if value < 1:
        raise ConfigError(f"field '{name}': must be >= 1, got {value}")


def a_rate(name: str, value: float, read: Mapping[str, Any]) -> None:
    """Refuse a dropout rate outside [0, 1)."""
    if not 0.0 <= value < 1.0:
        raise ConfigError(f"field '{name}': must be in [0, 1), got {value}")


def positive(name: str, value: float, read: Mapping[str, Any]) -> None:
    """Refuse a value that is not > 0 (an epsilon)."""
    if not value > 0:
        raise ConfigError(f"field '{name}': must be > 0, got {value}")


def divides(whole: str) -> Check:
    """A check that the value divides the field ``whole`` read before it (heads and the width)."""

    def check(name: str, value: int, read: Mapping[str, Any]) -> None:
        if read[whole] % value:
            raise ConfigError(f"field '{name}': must divide {whole}={read[whole]}, got {value}")

    return check


def token_id(*vocabularies: str) -> Check:
    """A check that the value is an id of each vocabulary size among ``vocabularies`` read before it
    (one read as None, an optional size left out, does not count)."""

    def check(name: str, value: int, read: Mapping[str, Any]) -> None:
        if not 0 <= value < min(read[size] for size in vocabularies if read[size] is not None):
            raise ConfigError(f"field '{name}': must be a token id, got {value}")

    return check


def needs(value: Any, note: str = "") -> Check:
    """A check that refuses any value but ``value`` (a setting whose other values change the
    computation in a way ours does not), with ``note`` after the refusal."""

    def check(name: str, found: Any, read: Mapping[str, Any]) -> None:
        if found != value:
            raise ConfigError(f"field '{name}': {json.dumps(found)} is not supported{note}")

    return check


SIZE = (at_least_one,)
RATE = (a_rate,)


def size(hf: str, ours: str, default: int) -> Field:
    """A size (>= 1), the same number in both configs."""
    return Field(hf, ours, int, default, SIZE)


def rate(hf: str, ours: str, default: float) -> Field:
    """A dropout rate in [0, 1), the same number in both configs."""
    return Field(hf, ours, float, default, RATE)


def required(hf: str, value: Any, note: str = "") -> Field:
    """A Hugging Face field we do not have, which must be ``value`` (its default), as we write it."""
    return Field(hf, None, type(value), value, (needs(value, note),))


def constant(hf: str, value: Any) -> Field:
    """A Hugging Face field we do not have, written as ``value`` and ignored when read."""
    return Field(hf, None, type(value), value, imported=False)


def tied_head(default: bool) -> Field:
    """``tie_word_embeddings`` (``default`` when left out): our ``tie_embeddings`` "output" when
    true, "none" when false."""
    return Field(
        "tie_word_embeddings",
        "tie_embeddings",
        bool,
        default,
        to_ours={True: "output", False: "none"},
        to_hf=lambda cfg: cfg.tie_embeddings != "none",
    )


def require(cfg: ModelConfig, family: str, needed: Mapping[str, Any]) -> None:
    """Refuse, naming the first, a field of ``cfg`` whose value is not the one in ``needed``: what
    ``family``'s format cannot express."""
    for name, value in needed.items():
        found = getattr(cfg, name)
        if found != value:
            raise ConfigError(
                f"config field 'model.{name}': {family} needs {json.dumps(value)}, got {json.dumps(found)}"
            )


def refuse_grouped_heads(cfg: ModelConfig, family: str) -> None:
    """Refuse grouped-query attention (``n_kv_heads`` below ``n_heads``) for ``family``, whose
    attention has one key/value head per query head."""
    if cfg.n_kv_heads not in (None, cfg.n_heads):
        raise ConfigError(
            f"config field 'model.n_kv_heads': {family} has one key/value head per query head "
            f"(n_heads={cfg.n_heads}), got {cfg.n_kv_heads}"
        )


# Hugging Face's activation names (ACT2FN) → ours: gelu is the exact erf form; gelu_new,
# gelu_pytorch_tanh and gelu_fast are all 0.5 x (1 + tanh(sqrt(2/π) (x + 0.044715 x³))); swish and
# silu are both x · sigmoid(x).
HF_ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
    "relu": "relu",
    "silu": "silu",
    "swish": "silu",
}


def activations(*names: str) -> dict[str, str]:
    """The Hugging Face activation ``names`` a family reads (in the order its refusals list them),
    each with ours."""
    return {name: HF_ACTIVATIONS[name] for name in names}
