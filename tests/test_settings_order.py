"""Settings take effect in the documented order, recipe < ``--preset`` < ``--config FILE`` < flags,
for every flag of ``vaswani train TASK`` that has a config field: a test generated from the flag
definitions (:mod:`vaswani.cli.flags`), and the data flags that pick the user's files."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml

from vaswani.cli import build_parser, parse
from vaswani.cli.flags import _base_type, flag_names
from vaswani.cli.train import flags_of
from vaswani.config import FAMILY_FIELDS, ModelConfig, TrainConfig
from vaswani.recipes import Sections
from vaswani.schema import Range
from vaswani.tasks import registry
from vaswani.tasks.settings import run_config


def two_values(f: dataclasses.Field[Any], annotation: Any) -> tuple[Any, Any] | None:
    """Two different valid-looking values of a field (the file's, the flag's), or None."""
    kind = _base_type(annotation)
    if f.name == "device":
        return ("auto", "cpu")
    if "choices" in f.metadata:
        return tuple(f.metadata["choices"][:2])  # type: ignore[return-value]
    if kind is bool:
        return (True, False)
    low = Range.parse(f.metadata["range"]).low if f.metadata.get("range") else 0
    start = max(0, low) if low != float("-inf") else 0
    if kind is int:
        return (int(start) + 2, int(start) + 3)
    if kind is float:
        return (0.25, 0.5)
    if typing.get_origin(kind) is tuple:
        item = typing.get_args(kind)[0]
        return ((item(0), item(1)), (item(1), item(0))) if item in (int, float) else (("a",), ("b",))
    return ("a.txt", "b.txt")


def as_argv(value: Any) -> list[str]:
    """A value as the command-line words of its flag."""
    if isinstance(value, tuple):
        return [",".join(map(str, value))]
    return [str(value)]


def flag_cases() -> list[tuple[str, str, str, Any, Any]]:
    """(task, section, field, the file's value, the flag's value) for every flag with a config field
    (of the model's fields, those the task's archs read: ``train translation`` has no ``--image-size``)."""
    cases = []
    for spec in registry.trainable():
        for section, cls in (("model", ModelConfig), ("train", TrainConfig), ("data", spec.data)):
            hints = typing.get_type_hints(cls)
            for f in dataclasses.fields(cls):
                others = section == "model" and not set(FAMILY_FIELDS.get(f.name, spec.archs)) & set(
                    spec.archs
                )
                values = two_values(f, hints[f.name]) if flag_names(f) and not others else None
                if values is not None:
                    cases.append((spec.name, section, f.name, *values))
    return cases


CASES = flag_cases()


def flag_argv(task: str, section: str, name: str, value: Any) -> list[str]:
    cls = {"model": ModelConfig, "train": TrainConfig, "data": registry.get(task).data}[section]
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    spelling = flag_names(f)[0]
    if isinstance(value, bool):
        return [spelling if value else "--no-" + spelling.removeprefix("--")]
    if f.metadata.get("nargs") or f.metadata.get("append"):
        return [spelling, *(value if isinstance(value, tuple) else [value])]
    return [spelling, *as_argv(value)]


def test_every_task_and_section_is_covered():
    assert {task for task, *_ in CASES} == {spec.name for spec in registry.trainable()}
    assert {(task, section) for task, section, *_ in CASES} >= {
        (spec.name, s) for spec in registry.trainable() for s in ("model", "train", "data")
    }
    assert len(CASES) > 200


@pytest.mark.parametrize(
    ("task", "section", "name", "in_file", "in_flag"), CASES, ids=[f"{t}-{s}.{n}" for t, s, n, *_ in CASES]
)
def test_a_flag_beats_the_config_file(tmp_path, task, section, name, in_file, in_flag):
    """The file sets the field to one value and the flag to another: the sections the task's hook
    resolves hold the flag's (the flag parsed by the real command line)."""
    config = tmp_path / "c.yaml"
    file_value = list(in_file) if isinstance(in_file, tuple) else in_file
    config.write_text(yaml.safe_dump({section: {name: file_value}}), encoding="utf-8")
    args = parse(build_parser(), ["train", task, *flag_argv(task, section, name, in_flag)])
    flags = flags_of(args, registry.get(args.task))
    seen: dict[str, Sections] = {}

    def capture(sections: Sections, user: Sections, source: str) -> None:
        seen["sections"], seen["user"] = sections, user

    run_config(registry.get(task).recipe, capture, flags, config=Path(config))
    resolved = seen["sections"][section][name]
    expected = flags[section][name]
    assert (tuple(resolved) if isinstance(resolved, list) else resolved) == (
        tuple(expected) if isinstance(expected, list) else expected
    ), (resolved, expected)
    if section == "data":
        assert seen["user"]["data"][name] == expected  # the hook sees the flag's value, not the file's


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_data_flags_beat_the_files_data_and_the_files_data_is_used(tmp_path):
    """A file's ``data.src`` trains on the user's files as ``--src`` does (not on the embedded
    corpus), and ``--src`` beats the file's ``data.src``; the same for ``--text`` and ``--data``."""
    a, b = write(tmp_path / "a.txt", "x\n"), write(tmp_path / "b.txt", "y\n")
    config = write(tmp_path / "c.yaml", f"data: {{src: {a}, tgt: {a}}}\n")
    from_file = registry.configure("translation", config=config)
    assert (from_file.data.source, from_file.data.src) == ("files", str(a))
    assert from_file.model == registry.configure("translation", {"data": {"src": a, "tgt": a}}).model
    from_flags = registry.configure("translation", {"data": {"src": str(b), "tgt": str(b)}}, config=config)
    assert (from_flags.data.source, from_flags.data.src, from_flags.data.tgt) == ("files", str(b), str(b))
    text = write(tmp_path / "t.yaml", f"data: {{text: [{a}]}}\n")
    for task in ("lm", "mlm"):
        assert registry.configure(task, config=text).data.text == (str(a),)
        assert registry.configure(task, config=text).data.source == "text"
        assert registry.configure(task, {"data": {"text": [str(b)]}}, config=text).data.text == (str(b),)
