"""Every number of every config is finite and in range: a test generated from the fields of every
:class:`~vaswani.schema.Config` class (their ``range`` metadata), and the decoding config's numbers.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any

import pytest

import vaswani.tasks.registry  # noqa: F401  (imports every task, and so every task's data config)
from vaswani.config import ModelConfig, TrainConfig
from vaswani.data.config import LabeledData, NatData, ParallelData, TagData, TextData
from vaswani.data.images import ImageProcessing
from vaswani.errors import ConfigError
from vaswani.generation.config import DecodingConfig
from vaswani.schema import INT64_MAX, Config, Range, range_problem
from vaswani.tasks.image import ImageData

VALID = {
    ParallelData: {"src": "a.src", "tgt": "a.tgt"},
    NatData: {"src": "a.src", "tgt": "a.tgt"},
    LabeledData: {"train_file": "t.tsv", "dev_file": "d.tsv"},
    TagData: {"train_file": "t.conllu", "dev_file": "d.conllu"},
}
"""What a class needs besides its defaults to be valid (the others are valid as they are)."""


def config_classes() -> list[type[Config]]:
    """Every concrete config class of vaswani (dataclasses below :class:`Config`)."""
    found, todo = [], [Config]
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if dataclasses.is_dataclass(cls) and cls.__module__.startswith("vaswani."):
            found.append(cls)
    return sorted(found, key=lambda c: c.__qualname__)


def number_kind(annotation: Any) -> tuple[type, bool] | None:
    """(int or float, whether the field is a tuple of them), or None for a field of no numbers."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return number_kind(args[0]) if len(args) == 1 else None
    if typing.get_origin(annotation) is tuple:
        inner = number_kind(typing.get_args(annotation)[0])
        return (inner[0], True) if inner else None
    return (annotation, False) if annotation in (int, float) else None


NUMBER_FIELDS = [
    (cls, f, *kind)
    for cls in config_classes()
    for f in dataclasses.fields(cls)
    if (kind := number_kind(typing.get_type_hints(cls)[f.name])) is not None
]


def bad_values(kind: type, interval: Range) -> list[Any]:
    """Values just outside ``interval`` at each finite end, and (floats) NaN and the infinities."""
    step = 1 if kind is int else 1e-9
    out: list[Any] = [math.nan, math.inf, -math.inf] if kind is float else [INT64_MAX + 1, -(2**70)]
    if math.isfinite(interval.low):
        out.append(interval.low if not interval.low_closed else interval.low - step)
    if math.isfinite(interval.high):
        out.append(interval.high if not interval.high_closed else interval.high + step)
    return out


def test_every_config_class_is_walked():
    assert {
        ModelConfig,
        TrainConfig,
        ParallelData,
        TextData,
        LabeledData,
        TagData,
        ImageData,
        ImageProcessing,
    } <= set(config_classes())
    assert len(NUMBER_FIELDS) >= 60


@pytest.mark.parametrize("cls", config_classes(), ids=lambda c: c.__qualname__)
def test_every_config_class_is_valid_with_its_defaults(cls):
    cls(**VALID.get(cls, {}))


@pytest.mark.parametrize(
    ("cls", "f", "kind", "many"),
    NUMBER_FIELDS,
    ids=[f"{c.__qualname__}.{f.name}" for c, f, *_ in NUMBER_FIELDS],
)
def test_every_number_field_has_a_range_that_refuses_what_lies_outside(cls, f, kind, many):
    """Each numeric field names its range, and a config given a number outside it (NaN, an infinity,
    a 65-bit integer, one step past an end; in a tuple, as one of its values) is refused naming the
    field, whether it comes from code or from a file (``from_dict``)."""
    assert f.metadata.get("range"), f"{cls.__qualname__}.{f.name} has no range"
    interval = Range.parse(f.metadata["range"])
    base = VALID.get(cls, {})
    default = f.default if f.default is not None else ((1,) if many else 1)
    for bad in bad_values(kind, interval):
        value = tuple([*default[:-1], bad]) if many else bad
        assert range_problem(bad, f.metadata["range"]) is not None, (f.name, bad)
        with pytest.raises(ConfigError, match=rf"'{cls._section}\.{f.name}': (every value )?must be"):
            cls.from_dict({**base, f.name: value}, source="test.yaml")


@pytest.mark.parametrize(
    ("cls", "name"),
    [(c, f.name) for c, f, *_ in NUMBER_FIELDS if Range.parse(f.metadata["range"]).low >= 0],
    ids=lambda x: getattr(x, "__qualname__", x),
)
def test_a_negative_number_is_refused_where_numbers_are_not_negative(cls, name):
    kind = number_kind(typing.get_type_hints(cls)[name])
    assert kind is not None
    value = -1 if kind[0] is int else -0.5
    default = getattr(cls(**VALID.get(cls, {})), name)
    given = tuple([value] * len(default)) if kind[1] and default is not None else value
    with pytest.raises(ConfigError, match=rf"'{cls._section}\.{name}'"):
        cls(**{**VALID.get(cls, {}), name: given})


def test_no_float_field_takes_infinity():
    """Where "no limit" means something (clipping, a time budget, epochs) it is null, never inf."""
    for _, f, kind, _ in NUMBER_FIELDS:
        if kind is float:
            assert range_problem(math.inf, f.metadata["range"]) is not None, f.name
    with pytest.raises(ConfigError, match=r"'train\.clip_norm': must be > 0 and finite, got inf"):
        TrainConfig(clip_norm=math.inf)
    assert TrainConfig(clip_norm=None).clip_norm is None


def test_ranges_read_their_notation():
    assert Range.parse("[0, 1)") == Range(0, 1, True, False)
    assert 0 in Range.parse("[0, 1)") and 1 not in Range.parse("[0, 1)")
    assert Range.parse("(0, inf)").describe() == "> 0" and Range.parse("[1, inf)").describe() == ">= 1"
    assert Range.parse("(0, 0.5)").describe() == "in (0, 0.5)"
    with pytest.raises(ValueError, match="interval"):
        Range.parse("0 to 1")


DECODING = [
    # field, the other fields it needs, values refused
    ("beam", {}, [0, INT64_MAX + 1, 1.5, math.nan]),
    ("n_best", {"beam": 2}, [0, 3, INT64_MAX + 1]),
    ("length_penalty", {"beam": 2}, [math.nan, math.inf, -math.inf]),
    ("temperature", {}, [-1.0, math.nan, math.inf]),
    ("top_k", {}, [0, -5, INT64_MAX + 1, 10**30]),
    ("top_p", {}, [0.0, 1.5, math.nan, math.inf]),
    ("seed", {"top_k": 5}, [-1, 2**64, 2**70, 0.5]),
    ("max_new_tokens", {}, [0, -1, 10**30]),
    ("max_len_a", {}, [-1.0, math.nan, math.inf]),
    ("max_len_b", {}, [-1, 10**30]),
]


@pytest.mark.parametrize(("name", "needs", "values"), DECODING, ids=[row[0] for row in DECODING])
def test_every_decoding_number_is_finite_and_in_range(name, needs, values):
    for value in values:
        with pytest.raises(ConfigError, match=rf"decoding\.{name}"):
            DecodingConfig(**{**needs, name: value})


def test_every_decoding_number_is_in_the_table():
    hints = typing.get_type_hints(DecodingConfig)
    numbers = {f.name for f in dataclasses.fields(DecodingConfig) if number_kind(hints[f.name]) is not None}
    assert numbers == {row[0] for row in DECODING}


def test_a_stop_string_may_not_be_empty():
    with pytest.raises(ConfigError, match=r"decoding\.stop must not be empty"):
        DecodingConfig(stop=("x", ""))
