"""How a task's settings become a run config: the recipe, then ``--preset``, then ``--config``, then the
flags, then the task's own rules (its ``configure`` hook), then validation.

:func:`run_config` is what ``vaswani train TASK`` and the Python API (:func:`vaswani.tasks.registry.
configure`) both call. A task's hook gets the merged ``sections`` (model, train, data: plain dicts)
and what the user set (the flags, and the data fields of the ``--config`` file under the data flags:
for rules such as "--src and --tgt go together" and for which data the user named), and returns the
validated :class:`~vaswani.config.RunConfig`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from vaswani import recipes
from vaswani.config import ModelConfig, RunConfig, TrainConfig
from vaswani.errors import ConfigError
from vaswani.io import absolute_path
from vaswani.recipes import Sections


def validated(task: str, sections: Sections, data: type, source: str) -> RunConfig:
    """The run config of ``sections``, each section validated by its class (errors name ``source``)."""
    return RunConfig(
        task,
        ModelConfig.from_dict(sections.get("model", {}), source=source),
        TrainConfig.from_dict(sections.get("train", {}), source=source),
        data.from_dict(sections.get("data", {}), source=source),  # type: ignore[attr-defined]
    )


def absolute(data: dict[str, Any], fields: tuple[str, ...]) -> None:
    """Store the paths of ``fields`` absolute (in place), so that ``--resume`` works from any folder."""
    for key in fields:
        value = data.get(key)
        if isinstance(value, (str, Path)):
            data[key] = absolute_path(value)
        elif isinstance(value, (list, tuple)):
            data[key] = [absolute_path(v) for v in value]


def one_stack(model: dict[str, Any], arch: str, source: str) -> None:
    """A single-stack model (GPT, BERT): ``arch`` set (another one given is refused)."""
    if model.get("arch", arch) != arch:
        raise ConfigError(
            f"{source}: config field 'model.arch': this task trains '{arch}', got {model['arch']!r}"
        )
    model["arch"] = arch


def run_config(
    recipe: Any,
    configure: Any,
    flags: Sections,
    preset: str | None = None,
    config: Path | None = None,
    named: str | None = None,
) -> RunConfig:
    """The packaged recipe < ``preset`` < the YAML file ``config`` < ``flags``, resolved (``bf16:
    auto``) and handed to the task's ``configure(sections, flags, source)`` hook.

    ``recipe(given)`` names the packaged recipe (``named``, ``--recipe NAME``, replaces it), and the
    hook reads which data the user named (``--src``, ``--text``, ``--init``...) from its ``flags``:
    both get the data fields of the ``config`` file under those of the flags, so that a file's
    ``data.src`` picks the user's files as ``--src`` does, and a ``--src`` flag beats the file's
    ``data.src``."""
    user = {s: dict(v) for s, v in flags.items()}
    in_file = recipes.read(config) if config is not None else {}
    if config is not None:
        user["data"] = {**in_file.get("data", {}), **flags.get("data", {})}
    sections = recipes.packaged(named or recipe(user))
    fields = {s: dict(v) for s, v in flags.items()}
    preset = fields.get("model", {}).pop("preset", preset)  # the CLI's --preset travels with the flags
    if preset is not None:
        sections = recipes.merge(sections, {"model": recipes.preset(preset)})
    if config is not None:
        sections = recipes.read(config, base=sections)
    sections = recipes.resolved(recipes.merge(sections, fields))
    source = str(config) if config is not None else "flags"
    try:
        return configure(sections, user, source)
    except ConfigError as exc:
        raise _naming_the_file(exc, source, in_file, flags) from None


def _naming_the_file(exc: ConfigError, source: str, in_file: Sections, flags: Sections) -> ConfigError:
    """``exc``, led by the config file ``source`` when the field it names was set there (and not
    by a flag, which the CLI names instead)."""
    found = re.search(r"config field '(model|train|data)\.(\w+)'", str(exc))
    if found is None or str(exc).startswith(f"{source}:"):
        return exc
    section, name = found.groups()
    if name in in_file.get(section, {}) and name not in flags.get(section, {}):
        return ConfigError(f"{source}: {exc}")
    return exc


def text_recipe(task: str, flags: Sections) -> str:
    """A task trained on plain text: its embedded default job (``TASK-default``), or the recipe
    for the user's text (``TASK``) once ``--text`` or ``--dataset`` is given."""
    given = flags.get("data", {})
    return task if "text" in given or "dataset" in given else f"{task}-default"


def text_run(
    task: str, arch: str, data_class: type, sections: Sections, flags: Sections, source: str
) -> RunConfig:
    """The rules of a task trained on plain text (``lm``, ``mlm``): a single-stack model of
    ``arch``; ``--text`` (or ``--dataset``) is stored absolute and read as the source."""
    data = sections.setdefault("data", {})
    for name in ("text", "dataset"):
        if name in flags.get("data", {}):
            data["source"] = name
    absolute(data, ("text", "dataset"))
    one_stack(sections.setdefault("model", {}), arch, source)
    return validated(task, sections, data_class, source)
