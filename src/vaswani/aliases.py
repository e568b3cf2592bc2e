"""The old spellings of model fields, still read wherever a model config comes from (Python, YAML
recipes and ``--config`` files, presets, flags and the ``config.json`` of run directories).

- ``norm``: the combined values from before its kind and its placement were two fields
  (:data:`COMBINED_NORMS`: ``norm: pre_ln`` is ``norm: layernorm`` with ``norm_placement: pre``).

Each source is read on its own (:func:`split_combined_norm`), then merged with the others.
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
