"""The base of every typed config: :class:`Config`, a dataclass that checks each field against its
annotation when it is built and refuses unknown fields by name, and :func:`flag`/:func:`no_flag`,
the field metadata that :mod:`vaswani.cli.flags` turns into command-line flags.

Every number is checked against its field's ``range`` (metadata given to :func:`flag` or
:func:`no_flag`), an interval such as ``"(0, inf)"`` or ``"[0, 1)"``, each element of a tuple
alike: a float is finite (NaN and infinity are refused for every field: where "no limit" is
meaningful, such as ``clip_norm`` or ``max_minutes``, it is ``None``), and an integer fits in 64
bits (torch's and NumPy's integers) whatever its range's upper end. A field without a range gets
these two rules alone.

The configs themselves live with what they configure: the model's and the training's in
:mod:`vaswani.config`, the data's in :mod:`vaswani.data.config`.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from dataclasses import field
from typing import Any, TypeVar

from vaswani.errors import ConfigError, shown

T = TypeVar("T")
INT64_MAX = 2**63 - 1
_INTERVAL = re.compile(r"([\[(])\s*(-inf|[-+0-9.e]+)\s*,\s*(inf|[-+0-9.e]+)\s*([\])])")


@dataclasses.dataclass(frozen=True)
class Range:
    """An interval of numbers, parsed from ``"[low, high)"`` notation (``-inf``/``inf`` for no end)."""

    low: float
    high: float
    low_closed: bool
    high_closed: bool

    @classmethod
    def parse(cls, text: str) -> Range:
        found = _INTERVAL.fullmatch(text.strip())
        if found is None:
            raise ValueError(f"not an interval such as '[0, 1)': {text!r}")
        opening, low, high, closing = found.groups()
        return cls(_bound(low), _bound(high), opening == "[", closing == "]")

    def __contains__(self, value: float) -> bool:
        above = value >= self.low if self.low_closed else value > self.low
        below = value <= self.high if self.high_closed else value < self.high
        return above and below

    def describe(self) -> str:
        """``> 0``, ``>= 1`` or ``in [0, 1)``: what a value must be."""
        if math.isinf(self.high):
            return f"{'>=' if self.low_closed else '>'} {_number_text(self.low)}"
        opening, closing = "[" if self.low_closed else "(", "]" if self.high_closed else ")"
        return f"in {opening}{_number_text(self.low)}, {_number_text(self.high)}{closing}"


def _bound(text: str) -> float:
    return float(text) if "inf" in text or "." in text or "e" in text else int(text)


def _number_text(value: float) -> str:
    return "-inf" if value == -math.inf else str(value)


def range_problem(value: Any, spec: str | None) -> str | None:
    """What the number ``value`` must be and is not for the interval ``spec`` (None: any finite
    float, any 64-bit integer), such as ``> 0`` or ``a finite number``; None when it fits (and for
    what is not a number)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    interval = Range.parse(spec) if spec is not None else None
    if isinstance(value, float) and not math.isfinite(value):
        if interval is None:
            return "a finite number"
        return interval.describe() + ("" if math.isfinite(interval.high) else " and finite")
    if interval is not None and value not in interval:
        return interval.describe()
    if isinstance(value, int) and not -INT64_MAX - 1 <= value <= INT64_MAX:
        return f"a 64-bit integer (at most {INT64_MAX})"
    return None


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
            self._check_range(f, getattr(self, f.name))
        self._check()

    _section = "config"

    def _check(self) -> None:
        """Cross-field checks; subclasses override."""

    def _fail(self, name: str, message: str) -> None:
        raise ConfigError(f"config field '{self._section}.{name}': {message}")

    def _check_range(self, f: dataclasses.Field[Any], value: Any) -> None:
        """Refuse a number of field ``f`` (or of its tuple) outside the field's ``range``."""
        spec = f.metadata.get("range")
        if isinstance(value, tuple):
            problems = [p for p in (range_problem(item, spec) for item in value) if p is not None]
            if problems:
                self._fail(f.name, f"every value must be {problems[0]}, got {shown(list(value))}")
        else:
            problem = range_problem(value, spec)
            if problem is not None:
                self._fail(f.name, f"must be {problem}, got {shown(value)}")

    def _one_of(self, name: str, choices: tuple[str, ...]) -> None:
        if getattr(self, name) not in choices:
            self._fail(name, f"must be one of {', '.join(choices)}; got {getattr(self, name)!r}")

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
    """A field with what its command-line flag needs (see :mod:`vaswani.cli.flags`); a number's
    ``range`` (``"(0, inf)"``) is checked whenever the config is built."""
    if "range" in more:
        Range.parse(more["range"])
    return field(default=default, metadata={"help": help, **more})


def no_flag(default: Any, range: str | None = None) -> Any:
    """A field with no command-line flag (one the task derives), of numbers in ``range``."""
    if range is not None:
        Range.parse(range)
    return field(default=default, metadata={"flag": None, "range": range})


def _type_name(annotation: Any) -> str:
    return str(annotation).replace("typing.", "").replace("<class '", "").replace("'>", "")
