"""Command-line flags generated from the config dataclasses, so that a field gets its flag, help
and validation once: where it is declared.

Every field of a config class becomes ``--field-name`` (underscores as dashes). A field's
``metadata`` may add ``flag`` (more spellings, such as ``--heads`` for ``n_heads``; ``flags``:
these spellings instead), ``help``,
``choices`` and ``metavar``, or ``flag=None`` for a field that is no flag (one the task derives,
such as a classifier's label set). Flags left unset read as None and keep the value of the
recipe or the config file; the dataclass validates what was given, naming the field.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from pathlib import Path
from typing import Any

from vaswani.errors import ConfigError


def flag_names(f: dataclasses.Field[Any]) -> list[str]:
    """The spellings of a field's flag: ``--field-name`` and any in its metadata (none: no flag)."""
    if "flag" in f.metadata and f.metadata["flag"] is None:
        return []
    if "flags" in f.metadata:  # these spellings only
        return list(f.metadata["flags"])
    names = [f"--{f.name.replace('_', '-')}"]
    extra = f.metadata.get("flag", ())
    for name in [extra] if isinstance(extra, str) else extra:
        if name not in names:
            names.append(name)
    return names


def _base_type(annotation: Any) -> Any:
    """``int`` of ``int | None``; ``tuple[str, ...]`` stays as it is."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return args[0] if len(args) == 1 else str
    return annotation


def _parse_tuple(text: str, flag: str, annotation: Any) -> list[Any]:
    """``"0,1"`` → ``[0, 1]`` for a tuple field (``tuple[int, int]``, ``tuple[float, ...]``), or a
    one-line :class:`ConfigError` naming the flag."""
    args = typing.get_args(annotation)
    count = None if len(args) == 2 and args[1] is Ellipsis else len(args)
    try:
        values = [args[0](part) for part in text.split(",")]
    except ValueError:
        values = []
    if not values or (count is not None and len(values) != count):
        what = f"{count} values" if count else "values"
        raise ConfigError(f"{flag}: expected {what} separated by commas, such as 0,1; got {text!r}")
    return values


def add_fields(group: Any, cls: type, skip: tuple[str, ...] = ()) -> None:
    """One flag per field of the config dataclass ``cls`` (but those in ``skip``), on ``group``
    (a parser or an argument group). Values are stored under ``SECTION.FIELD``."""
    hints = typing.get_type_hints(cls)
    section = cls._section  # type: ignore[attr-defined]
    for f in dataclasses.fields(cls):
        names = flag_names(f)
        if not names or f.name in skip:
            continue
        kind = _base_type(hints[f.name])
        options: dict[str, Any] = {
            "dest": f"{section}.{f.name}",
            "default": None,
            "help": f.metadata.get("help"),
        }
        if f.metadata.get("append"):
            options["action"] = "append"
        if kind is not bool and "choices" not in f.metadata:
            options["metavar"] = f.metadata.get("metavar", f.name.upper())
        if kind is bool:
            options["action"] = argparse.BooleanOptionalAction
        elif f.metadata.get("append"):
            options["type"] = str
        elif typing.get_origin(kind) is tuple:
            args = typing.get_args(kind)
            item = str if args[0] is Path else args[0]
            if f.metadata.get("nargs"):  # --text A B C
                options.update(nargs=f.metadata["nargs"], type=item)
            else:  # "0,1", parsed by given()
                options["type"] = str
        else:
            options["type"] = kind
        if "choices" in f.metadata:
            options["choices"] = f.metadata["choices"]
        group.add_argument(*names, **options)


def given(args: argparse.Namespace, cls: type) -> dict[str, Any]:
    """The fields of the config class ``cls`` whose flags were given: {field: value}."""
    hints = typing.get_type_hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        value = getattr(args, f"{cls._section}.{f.name}", None)  # type: ignore[attr-defined]
        if value is None:
            continue
        kind = _base_type(hints[f.name])
        if typing.get_origin(kind) is tuple and isinstance(value, str):
            value = _parse_tuple(value, flag_names(f)[-1], kind)
        out[f.name] = value
    return out
