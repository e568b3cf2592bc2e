"""The old spellings of model fields, still read wherever a model config comes from (Python, YAML
recipes and ``--config`` files, presets, flags and the ``config.json`` of run directories), and
how the model fields of several such sources merge.

- ``norm``: the combined values from before its kind and its placement were two fields
  (:data:`COMBINED_NORMS`: ``norm: pre_ln`` is ``norm: layernorm`` with ``norm_placement: pre``).
- A single-stack model's vocabulary and depth, ``vocab_size`` and ``n_layers``, were once the
  fields of its side (:data:`ALIASES`: a GPT's ``tgt_vocab_size`` and ``n_decoder_layers``, a
  BERT's ``src_vocab_size`` and ``n_encoder_layers``). An encoder-decoder's per-side fields
  (:data:`SIDES`) are no aliases: they override the neutral fields for one side.

- ``activation``: the names of a gated feed-forward with its activation (:data:`COMBINED_ACTIVATIONS`:
  ``activation: swiglu`` is ``ffn: gated`` with ``activation: silu``, Llama's; ``geglu`` the same with
  ``gelu``). These are no old spellings but the common names of the two fields together.
- ``bf16`` (true, false or a recipe's ``auto``): the training's precision before fp16 came, read
  as ``precision`` (:func:`precision_of_bf16`).

Each source is read on its own (:func:`split_combined`, :func:`check_aliases`), then laid
over the earlier ones (:func:`merged_model`); :func:`resolved_sides` gives what a built config
holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vaswani.errors import ConfigError

# The values of ``norm`` from before its kind and its placement were two fields: each sets both.
COMBINED_NORMS = {
    "post_ln": ("layernorm", "post"),
    "pre_ln": ("layernorm", "pre"),
    "pre_rmsnorm": ("rmsnorm", "pre"),
}
# The names of a gated feed-forward with its activation: each sets ``ffn`` and ``activation``.
COMBINED_ACTIVATIONS = {"swiglu": ("gated", "silu"), "geglu": ("gated", "gelu")}
# The neutral vocabulary and depth fields → an encoder-decoder's per-side fields (None: the neutral one).
SIDES = {
    "vocab_size": ("src_vocab_size", "tgt_vocab_size"),
    "n_layers": ("n_encoder_layers", "n_decoder_layers"),
}
# A single-stack arch → its old names of its vocabulary and depth (old name → field); the per-side
# fields of the other side were unused, and are dropped.
ALIASES = {
    "decoder_only": {"tgt_vocab_size": "vocab_size", "n_decoder_layers": "n_layers"},
    "encoder_only": {"src_vocab_size": "vocab_size", "n_encoder_layers": "n_layers"},
    "vit": {},
}


def aliases_of(arch: Any) -> dict[str, str]:
    """The old names of ``arch`` (old name → field; none for an encoder-decoder or a bad arch)."""
    return ALIASES.get(arch, {}) if isinstance(arch, str) else {}


def split_combined_norm(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The model fields ``fields`` of one source (a call, a YAML section, a ``config.json``, the
    flags) with an old combined ``norm`` (``pre_ln``: :data:`COMBINED_NORMS`) written as the two
    fields it stands for, ``norm`` (the kind) and ``norm_placement``. Merge sources after splitting
    each, so that a later ``norm: post_ln`` replaces an earlier placement. A ``norm_placement`` in
    the same source that contradicts the old value is a :class:`ConfigError` naming the field."""
    norm = fields.get("norm")
    if not isinstance(norm, str) or norm not in COMBINED_NORMS:
        return dict(fields)
    kind, placement = COMBINED_NORMS[norm]
    given = fields.get("norm_placement")
    if given is not None and given != placement:
        raise ConfigError(
            f"config field 'model.norm_placement': {given!r} contradicts norm {norm!r} ({kind} "
            f"placed {placement!r}); give norm {kind!r} and the placement, or the old value alone"
        )
    return {**fields, "norm": kind, "norm_placement": placement}


def split_combined_activation(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The model fields ``fields`` of one source with a combined ``activation`` (``swiglu``:
    :data:`COMBINED_ACTIVATIONS`) written as the two fields it stands for, ``ffn`` and
    ``activation``. An ``ffn`` in the same source that contradicts it is a :class:`ConfigError`
    naming the field."""
    activation = fields.get("activation")
    if not isinstance(activation, str) or activation not in COMBINED_ACTIVATIONS:
        return dict(fields)
    ffn, kind = COMBINED_ACTIVATIONS[activation]
    given = fields.get("ffn")
    if given is not None and given != ffn:
        raise ConfigError(
            f"config field 'model.ffn': {given!r} contradicts activation {activation!r} (the {ffn} "
            f"feed-forward with {kind}); give ffn {ffn!r} or leave it out"
        )
    return {**fields, "ffn": ffn, "activation": kind}


def split_combined(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The model fields ``fields`` of one source with every combined value (``norm: pre_ln``,
    ``activation: swiglu``) written as the fields it stands for."""
    return split_combined_activation(split_combined_norm(fields))


def check_aliases(fields: Mapping[str, Any], source: str) -> None:
    """Refuse, naming the field, a single-stack model's field that one source ``fields`` also
    gives under an old name with another value (a GPT's ``n_layers: 4`` and ``n_decoder_layers: 6``)."""
    for alias, neutral in aliases_of(fields.get("arch", "encoder_decoder")).items():
        if neutral in fields and fields.get(alias) is not None and fields[alias] != fields[neutral]:
            raise ConfigError(
                f"{source}: config field 'model.{neutral}': {fields[neutral]!r}, but its old name "
                f"{alias} says {fields[alias]!r}; give one of them"
            )


def merged_model(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """The model fields ``base`` (earlier sources, merged) with those of a later source ``over``
    on top. ``over``'s combined values (an old ``norm``, ``activation: swiglu``) are split first;
    its ``n_layers`` (``vocab_size``) replaces ``base``'s per-side values (``--layers`` sets every
    stack), and for a single-stack ``arch`` its old name of a field replaces ``base``'s value of
    that field."""
    over = split_combined(over)
    dropped = {side for neutral, sides in SIDES.items() if neutral in over for side in sides}
    aliases = aliases_of(over.get("arch", base.get("arch")))
    dropped |= {neutral for alias, neutral in aliases.items() if over.get(alias) is not None}
    return {**{k: v for k, v in base.items() if k not in dropped}, **over}


def resolved_sides(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The vocabulary and depth fields that a model config with ``fields`` holds once built. An
    encoder-decoder's sides hold their values (None: the neutral field's), and the neutral field
    the sides' common value when they agree; a single-stack model's neutral field is its old
    name's value where that is given, and every per-side field is None."""
    aliases = ALIASES.get(fields["arch"])
    out: dict[str, Any] = {}
    for neutral, sides in SIDES.items():
        if aliases is None:
            out.update({side: fields[neutral] if fields[side] is None else fields[side] for side in sides})
            values = {out[side] for side in sides}
            out[neutral] = values.pop() if len(values) == 1 else fields[neutral]
        else:
            given = [fields[s] for s in sides if aliases.get(s) == neutral and fields[s] is not None]
            out.update({neutral: given[0] if given else fields[neutral], **dict.fromkeys(sides)})
    return out


def precision_of_bf16(fields: Mapping[str, Any], source: str) -> dict[str, Any]:
    """The training fields ``fields`` of one source with an old ``bf16`` written as ``precision``
    (true: ``bf16``, false: ``fp32``, ``auto``: ``auto``). Merge sources after reading each, so
    that a later ``bf16`` replaces an earlier precision. A ``precision`` in the same source that
    contradicts it is a :class:`ConfigError` naming the field."""
    if "bf16" not in fields:
        return dict(fields)
    out = {k: v for k, v in fields.items() if k != "bf16"}
    old = fields["bf16"]
    if old == "auto" or isinstance(old, bool):
        precision = "auto" if old == "auto" else ("bf16" if old else "fp32")
    else:
        raise ConfigError(f"{source}: config field 'train.bf16': expected true, false or auto, got {old!r}")
    given = fields.get("precision")
    if given is not None and given != precision:
        raise ConfigError(
            f"{source}: config field 'train.precision': {given!r} contradicts the old bf16: {old!r} "
            "(--bf16/--no-bf16); give one of them"
        )
    out["precision"] = precision
    return out
