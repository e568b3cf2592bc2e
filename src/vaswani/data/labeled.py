"""Labeled examples for classifiers: one or two texts and a label per row of a TSV, CSV or
JSON-lines file, with errors that name the file and the line.

The format comes from the extension (``.tsv``, ``.csv``, ``.jsonl``) unless it is given. TSV
rows are split on tabs (no quoting, as GLUE's files); CSV rows are read by :mod:`csv`
(quoted fields may hold commas); a JSON line is an object. Blank lines are skipped.

Columns are named by a header name (a JSON key) or by a 0-based index written in digits. By
default the label is the column named ``label`` (any case) or else the last one, and the texts
are the other columns, when there are one or two of them (two: a sentence pair). A TSV or CSV
file has a header when a column is named, or when the first row's label cell is not a label
and looks like a column name: it is not among the known labels (the training labels, for a dev
file; the labels of the other rows, for a training file), and it is a usual name of a label
column (:data:`LABEL_NAMES`), or the labels are integers and it is not, or (in a training file)
every other label occurs more than once. Labels are strings (a JSON number or boolean is written
as JSON writes it); texts are stripped of surrounding spaces, and an empty one is refused.
"""

from __future__ import annotations

import csv
import json
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vaswani.data.config import LABELED_FORMATS
from vaswani.data.readers import read_lines
from vaswani.errors import DataError

LABEL = "label"
LABEL_NAMES = frozenset({"label", "labels", "class", "category", "target", "gold_label", "sentiment", "y"})
Row = tuple[int, Any]  # (line number, list of cells or JSON object)


@dataclass(frozen=True)
class Example:
    """One labeled example: its text (or sentence pair), its label and the line it came from."""

    texts: tuple[str, ...]
    label: str
    line: int


@dataclass(frozen=True)
class LabeledFile:
    """The examples of a file and the columns they were read from, as :func:`read_labeled` takes
    them (header names or JSON keys; indices in digits for a file without a header)."""

    path: Path
    examples: list[Example]
    text_columns: tuple[str, ...]
    label_column: str
    header: bool

    @property
    def labels(self) -> tuple[str, ...]:
        """The labels that occur, sorted (by value when all are integers)."""
        return sort_labels({e.label for e in self.examples})


def sort_labels(labels: set[str] | Sequence[str]) -> tuple[str, ...]:
    """Labels in order: numerically when every one is an integer ("2" before "10"), else as text."""
    try:
        return tuple(sorted(set(labels), key=int))
    except ValueError:
        return tuple(sorted(set(labels)))


def file_format(path: Path, given: str | None = None) -> str:
    """The format of ``path``: ``given``, or the one its extension names."""
    if given is not None:
        return given
    suffix = path.suffix.lower().lstrip(".")
    if suffix not in LABELED_FORMATS:
        raise DataError(
            f"{path}: cannot tell the format from the extension {path.suffix or '(none)'}; "
            f"name it with --format ({', '.join(LABELED_FORMATS)})"
        )
    return suffix


def _tsv_rows(path: Path) -> Iterator[Row]:
    for number, line in enumerate(read_lines(path, allow_empty_lines=True), start=1):
        if line.strip():
            yield number, line.split("\t")


def _csv_rows(path: Path) -> Iterator[Row]:
    reader = csv.reader(read_lines(path, allow_empty_lines=True), strict=True)
    start = 1
    try:
        for cells in reader:
            if any(cell.strip() for cell in cells):
                yield start, cells
            start = reader.line_num + 1
    except csv.Error as exc:
        raise DataError(f"{path}:{start}: not valid CSV ({exc})") from None


def _jsonl_rows(path: Path) -> Iterator[Row]:
    for number, line in enumerate(read_lines(path, allow_empty_lines=True), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError as exc:
            raise DataError(f"{path}:{number}: not valid JSON ({exc})") from None
        if not isinstance(value, dict):
            raise DataError(f"{path}:{number}: expected a JSON object, got {type(value).__name__}")
        yield number, value


READERS = {"tsv": _tsv_rows, "csv": _csv_rows, "jsonl": _jsonl_rows}


def _is_index(spec: str) -> bool:
    return spec.isdigit()


def _cell(path: Path, number: int, cells: list[str], index: int, name: str) -> str:
    if index >= len(cells):
        raise DataError(f"{path}:{number}: missing column {name}: the row has {len(cells)} field(s)")
    return cells[index]


def _tabular_columns(
    path: Path,
    rows: list[Row],
    text_specs: Sequence[str] | None,
    label_spec: str | None,
    labels: Sequence[str] | None,
) -> tuple[list[int], int, list[str], bool]:
    """Resolve the columns of a TSV or CSV file: (text indices, label index, the header's
    names (none without a header), whether the first row is a header)."""
    number, first = rows[0]
    specs = [*(text_specs or []), *([label_spec] if label_spec is not None else [])]
    header = any(not _is_index(spec) for spec in specs)
    lowered = [cell.strip().lower() for cell in first]
    if label_spec is not None:
        label_index = int(label_spec) if _is_index(label_spec) else -1
    elif LABEL in lowered:
        label_index = lowered.index(LABEL)
    else:
        label_index = len(first) - 1
    if not header and label_index >= 0:
        first_label = _cell(path, number, first, label_index, str(label_index)).strip()
        others = Counter(_label_cell(cells, label_index) for _, cells in rows[1:])
        header = _looks_like_a_header(first_label, others, labels)
    header_names = [cell.strip() for cell in first] if header else []

    def index_of(spec: str) -> int:
        if _is_index(spec):
            return int(spec)
        if spec not in header_names:
            raise DataError(
                f"{path}:{number}: no column named '{spec}' (the header has {', '.join(header_names)})"
            )
        return header_names.index(spec)

    if label_spec is not None:
        label_index = index_of(label_spec)
    if text_specs:
        text_indices = [index_of(spec) for spec in text_specs]
    else:
        text_indices = [i for i in range(len(first)) if i != label_index]
        if len(text_indices) not in (1, 2):
            raise DataError(
                f"{path}:{number}: {len(text_indices)} columns besides the label; name the text "
                "column(s) with --text-column"
            )
    if label_index in text_indices:
        raise DataError(f"{path}: column {label_index} cannot be both a text and the label")
    beyond = [i for i in [*text_indices, label_index] if i >= len(first)]
    if beyond:
        raise DataError(f"{path}:{number}: missing column {beyond[0]}: the row has {len(first)} field(s)")
    return text_indices, label_index, header_names, header


def _looks_like_a_header(cell: str, others: Counter[str | None], labels: Sequence[str] | None) -> bool:
    """Whether a first row whose label cell is ``cell`` is a header (see the module docstring),
    given the label cells of the other rows and the known labels (None: a training file)."""
    known = set(labels) if labels is not None else set(others) - {None}
    if cell in known:
        return False
    numeric = all(label.lstrip("-").isdigit() for label in known)
    repeated = labels is None and all(count > 1 for label, count in others.items() if label is not None)
    return cell.lower() in LABEL_NAMES or (numeric and not cell.lstrip("-").isdigit()) or repeated


def _label_cell(cells: list[str], index: int) -> str | None:
    return cells[index].strip() if index < len(cells) else None


def _column_name(header_names: list[str], index: int) -> str:
    """How messages name a column: its header name in quotes, or its index."""
    return f"'{header_names[index]}'" if index < len(header_names) else str(index)


def _read_tabular(
    path: Path,
    rows: list[Row],
    text_specs: Sequence[str] | None,
    label_spec: str | None,
    labels: Sequence[str] | None,
) -> LabeledFile:
    text_indices, label_index, header_names, header = _tabular_columns(
        path, rows, text_specs, label_spec, labels
    )
    text_names = tuple(_column_name(header_names, i) for i in text_indices)
    label_name = _column_name(header_names, label_index)
    examples = []
    for number, cells in rows[1:] if header else rows:
        texts = tuple(
            _cell(path, number, cells, i, name).strip()
            for i, name in zip(text_indices, text_names, strict=True)
        )
        label = _cell(path, number, cells, label_index, label_name).strip()
        examples.append(_example(path, number, texts, text_names, label, label_name, labels))
    specs = [header_names[i] if header else str(i) for i in [*text_indices, label_index]]
    return LabeledFile(path, examples, tuple(specs[:-1]), specs[-1], header)


def _json_label(path: Path, number: int, value: Any, name: str) -> str:
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, (bool, int)) or (isinstance(value, float) and value.is_integer()):
        return json.dumps(int(value) if isinstance(value, float) else value)
    raise DataError(f"{path}:{number}: field {name} must be a string, an integer or a boolean, got {value!r}")


def _read_jsonl(
    path: Path,
    rows: list[Row],
    text_specs: Sequence[str] | None,
    label_spec: str | None,
    labels: Sequence[str] | None,
) -> LabeledFile:
    number, first = rows[0]
    label_key = label_spec if label_spec is not None else LABEL
    if text_specs:
        text_keys = list(text_specs)
    else:
        text_keys = [k for k, v in first.items() if k != label_key and isinstance(v, str)]
        if len(text_keys) not in (1, 2):
            raise DataError(
                f"{path}:{number}: {len(text_keys)} text fields besides {label_key!r}; name the text "
                "field(s) with --text-column"
            )
    text_names = tuple(f"'{k}'" for k in text_keys)
    label_name = f"'{label_key}'"
    examples = []
    for number, obj in rows:
        for key in [*text_keys, label_key]:
            if key not in obj:
                raise DataError(f"{path}:{number}: missing field '{key}'")
        texts = []
        for key, name in zip(text_keys, text_names, strict=True):
            if not isinstance(obj[key], str):
                raise DataError(f"{path}:{number}: field {name} must be a string, got {obj[key]!r}")
            texts.append(obj[key].strip())
        label = _json_label(path, number, obj[label_key], label_name)
        examples.append(_example(path, number, tuple(texts), text_names, label, label_name, labels))
    return LabeledFile(path, examples, tuple(text_keys), label_key, False)


def _example(
    path: Path,
    number: int,
    texts: tuple[str, ...],
    text_names: tuple[str, ...],
    label: str,
    label_name: str,
    labels: Sequence[str] | None,
) -> Example:
    for text, name in zip(texts, text_names, strict=True):
        if not text:
            raise DataError(f"{path}:{number}: empty text in column {name}")
    if not label:
        raise DataError(f"{path}:{number}: empty label in column {label_name}")
    if labels is not None and label not in labels:
        raise DataError(
            f"{path}:{number}: label {label!r} is not one of the training labels ({', '.join(labels)})"
        )
    return Example(texts, label, number)


def read_labeled(
    path: str | Path,
    text_columns: Sequence[str] | None = None,
    label_column: str | None = None,
    fmt: str | None = None,
    labels: Sequence[str] | None = None,
) -> LabeledFile:
    """The examples of a labeled file (see the module docstring). ``labels``: the known labels
    (those of the training file, when reading a dev file); a row with another label is refused."""
    path = Path(path)
    kind = file_format(path, fmt)
    rows = list(READERS[kind](path))
    if not rows:
        raise DataError(f"{path}: no examples (only blank lines)")
    if kind == "jsonl":
        result = _read_jsonl(path, rows, text_columns, label_column, labels)
    else:
        result = _read_tabular(path, rows, text_columns, label_column, labels)
    if not result.examples:
        raise DataError(f"{path}: no examples (only a header)")
    return result
