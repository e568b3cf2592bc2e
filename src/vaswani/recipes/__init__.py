"""Recipes: every named setting of vaswani, as YAML read by one loader that the command line and the
Python API share.

A recipe has up to three sections, ``model:``, ``train:`` and ``data:``, holding fields of
:class:`~vaswani.config.ModelConfig`, :class:`~vaswani.config.TrainConfig` and the task's data
config. Two more keys are read here: ``base: NAME`` starts from another recipe of this folder
(``base: [A, B]``: from A, then B's fields over it), and
``model: {preset: NAME}`` from a named architecture of ``presets.yaml``. ``precision: auto`` is
bf16 autocast where the training device computes bf16 natively, else fp32
(:func:`vaswani.runtime.auto_precision`).

The recipes of this folder are the embedded default jobs and the settings each task starts from
(``translation.yaml`` is what ``vaswani train translation`` runs); ``configs/`` in the repository
holds recipes for real data sets, read the same way (``--config FILE``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from vaswani.aliases import merged_model, precision_of_bf16
from vaswani.config import presets
from vaswani.data.readers import read_lines
from vaswani.errors import ConfigError
from vaswani.runtime import auto_precision

FOLDER = Path(__file__).parent
SECTIONS = ("model", "train", "data")
Sections = dict[str, dict[str, Any]]


class _NoAliasLoader(yaml.SafeLoader):
    """YAML's safe loader without anchors and aliases (``&a``, ``*a``): a config never needs them, and
    a few hundred bytes of nested aliases (an "alias bomb") would expand to gigabytes."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise yaml.composer.ComposerError(
                None, None, "anchors and aliases (&name, *name) are not allowed in a config", event.start_mark
            )
        return super().compose_node(parent, index)


def _parse(text: str, where: str) -> Any:
    try:
        return yaml.load(text, Loader=_NoAliasLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f"{where}:{mark.line + 1}" if mark is not None else where
        raise ConfigError(f"{at}: not valid YAML ({getattr(exc, 'problem', exc)})") from None


def preset(name: str) -> dict[str, Any]:
    """The model fields of the named architecture ``name``."""
    if name not in presets():
        raise ConfigError(f"unknown preset '{name}'; choose from {', '.join(presets())}")
    return dict(presets()[name])


def read(path: str | Path, base: Sections | None = None) -> Sections:
    """The sections of the recipe file ``path``, over ``base`` (a recipe's ``base:`` first, then
    its ``preset``, then its own fields). Unknown sections are refused with the file named."""
    path = Path(path)
    loaded = _parse("\n".join(read_lines(path, allow_empty_lines=True)), str(path)) or {}
    if not isinstance(loaded, dict):
        raise ConfigError(f"{path}: expected sections model:, train: and data:")
    out: Sections = {s: dict(v) for s, v in (base or {}).items()}
    bases = loaded.pop("base", [])
    for name in [bases] if isinstance(bases, str) else bases:  # one recipe, or several in order
        out = merge(out, packaged(str(name)))
    for section, value in loaded.items():
        if section not in SECTIONS:
            raise ConfigError(f"{path}: unknown config section '{section}'")
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: section '{section}' must be a mapping")
    model = dict(loaded.get("model") or {})
    if "preset" in model:
        out = merge(out, {"model": preset(str(model.pop("preset")))})
    return merge(out, {**loaded, "model": model}, source=str(path))


def names() -> list[str]:
    """The names of this folder's recipes (``presets.yaml`` holds architectures, not a recipe)."""
    return sorted(p.stem for p in FOLDER.glob("*.yaml") if p.stem != "presets")


def packaged(name: str) -> Sections:
    """The recipe ``NAME.yaml`` of this folder."""
    if name not in names():
        raise ConfigError(f"unknown recipe '{name}'; choose from {', '.join(names())}")
    return read(FOLDER / f"{name}.yaml")


def merge(base: Sections, over: Sections, source: str = "flags") -> Sections:
    """``over``'s fields (read from ``source``) over ``base``'s, section by section (new dicts); the
    model's merge as :func:`vaswani.aliases.merged_model` does (an old combined ``norm`` of ``over``
    replaces both norm fields, its ``n_layers`` every stack's depth, a GPT's ``n_decoder_layers`` the
    ``n_layers``), and an old ``bf16`` of ``over`` replaces the precision."""
    out = {s: dict(base.get(s, {})) for s in SECTIONS if s in base or s in over}
    for section, fields in over.items():
        if section == "model":
            out[section] = merged_model(out[section], fields or {})
        elif section == "train":
            out[section].update(precision_of_bf16(fields or {}, source))
        else:
            out[section].update(fields or {})
    return out


def resolved(sections: Sections) -> Sections:
    """``sections`` with ``precision: auto`` decided for the training device of this machine."""
    out = {s: dict(v) for s, v in sections.items()}
    train = out.get("train", {})
    if train.get("precision") == "auto":
        train["precision"] = auto_precision(str(train.get("device", "auto")))
    return out
