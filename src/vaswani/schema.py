"""The base of every typed config: :class:`Config`, a dataclass that checks each field against its
annotation when it is built and refuses unknown fields by name, and :func:`flag`/:func:`no_flag`,
the field metadata that :mod:`vaswani.cli.flags` turns into command-line flags.

The configs themselves live with what they configure: the model's and the training's in
:mod:`vaswani.config`, the data's in :mod:`vaswani.data.config`.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import field
from typing import Any, TypeVar

from vaswani.errors import ConfigError

T = TypeVar("T")


def _matches(value: Any, annotation: Any) -> bool:
    """Whether ``value`` fits a simple annotation (int, float, str, bool, X | None, tuple)."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, arg) for arg in typing.get_args(annotation))
    if annotation is type(None):
        return value is None
    if origin is tuple:
        args = typing.get_args(annotation)
        if len(args) == 2 and args[1] is Ellipsis:  # tuple[X, ...]
            return isinstance(value, (tuple, list)) and all(_matches(v, args[0]) for v in value)
        return (
            isinstance(value, (tuple, list))
            and len(value) == len(args)
            and all(_matches(v, a) for v, a in zip(value, args, strict=True))
        )
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, annotation)


class Config:
    """Type checks every field against its annotation, then runs ``_check``."""

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if not _matches(value, hints[f.name]):
                raise ConfigError(
                    f"config field '{self._section}.{f.name}': expected {_type_name(hints[f.name])}, "
                    f"got {value!r}"
                )
            if hints[f.name] is float and isinstance(value, int):
                object.__setattr__(self, f.name, float(value))
            if isinstance(value, list):
                object.__setattr__(self, f.name, tuple(value))
        self._check()

    _section = "config"

    def _check(self) -> None:
        """Cross-field checks; subclasses override."""

    def _fail(self, name: str, message: str) -> None:
        raise ConfigError(f"config field '{self._section}.{name}': {message}")

    def _positive(self, *names: str) -> None:
        for name in names:
            value = getattr(self, name)
            if value is not None and not value > 0:  # "not >" also refuses NaN
                self._fail(name, f"must be > 0, got {value}")

    def _one_of(self, name: str, choices: tuple[str, ...]) -> None:
        if getattr(self, name) not in choices:
            self._fail(name, f"must be one of {', '.join(choices)}; got {getattr(self, name)!r}")

    def _fraction(self, *names: str) -> None:
        for name in names:
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                self._fail(name, f"must be in [0, 1), got {value}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls: type[T], data: dict[str, Any], source: str = "config") -> T:
        """Build from a mapping; unknown fields are refused with their name and ``source``."""
        if not isinstance(data, dict):
            raise ConfigError(f"{source}: section '{cls._section}' must be a mapping")  # type: ignore[attr-defined]
        known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        for name in data:
            if name not in known:
                raise ConfigError(
                    f"{source}: unknown config field '{cls._section}.{name}'"  # type: ignore[attr-defined]
                )
        return cls(**data)

    def replace(self: T, **changes: Any) -> T:
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]


def flag(default: Any, help: str | None = None, **more: Any) -> Any:
    """A field with what its command-line flag needs (see :mod:`vaswani.cli.flags`)."""
    return field(default=default, metadata={"help": help, **more})


def no_flag(default: Any) -> Any:
    """A field that the task derives, with no command-line flag."""
    return field(default=default, metadata={"flag": None})


def _type_name(annotation: Any) -> str:
    return str(annotation).replace("typing.", "").replace("<class '", "").replace("'>", "")
