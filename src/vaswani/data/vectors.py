"""Pretrained word vectors read from a file: word2vec's text and binary formats and GloVe's text.

- word2vec text: a header line ``N D`` (words, dimensions), then one row a line: the word and its D
  values, separated by spaces;
- word2vec binary: the same header, then N rows of the word's UTF-8 bytes, a space and D
  little-endian float32 values (each row may start with a newline, as Google's tools write it);
- GloVe: word2vec text without the header (D is the first row's count of values).

The format is detected from the file's first bytes (a header of two integers: word2vec; the row
after it a word and numbers as text: word2vec text, else binary; no header: GloVe), or named. Only the rows of
``wanted`` words are converted to numbers; every row's shape is checked. A row of another length
than the first (or than the header says), a header that disagrees with the rows, a word that is not
UTF-8 or a value that is not a number is a one-line :class:`~vaswani.errors.DataError` naming the
file and the line (the row, in a binary file).
"""

from __future__ import annotations

import struct
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import torch
from torch import Tensor

from vaswani.errors import DataError

FORMATS = ("word2vec", "word2vec-binary", "glove")
PEEK = 1 << 16  # bytes read to detect the format


@dataclass(frozen=True)
class WordVectors:
    """The vectors of the wanted words found in ``path`` (word → (dim,) float32), the file's
    ``format``, its dimension and its count of rows."""

    path: str
    format: str
    dim: int
    rows: int
    vectors: dict[str, Tensor]


def _header(line: bytes) -> tuple[int, int] | None:
    """``(N, D)`` of a word2vec header line, or None if the line is not two integers."""
    parts = line.split()
    if len(parts) == 2 and all(part.isdigit() for part in parts):
        return int(parts[0]), int(parts[1])
    return None


def detect_format(path: Path) -> str:
    """The format of the vectors file ``path`` (see the module docstring)."""
    with _open(path) as f:
        head = f.read(PEEK)
    first, _, rest = head.partition(b"\n")
    header = _header(first)
    if header is None:
        return "glove"
    row = rest.partition(b"\n")[0]
    try:
        parts = row.decode("utf-8").split()
        [float(x) for x in parts[1:]]
    except (UnicodeDecodeError, ValueError):
        return "word2vec-binary"
    return "word2vec" if len(parts) > 1 else "word2vec-binary"


def _open(path: Path) -> BinaryIO:
    try:
        return path.open("rb")
    except OSError as exc:
        raise DataError(f"{path}: cannot read the word vectors ({exc.strerror or exc})") from None


def _word(raw: bytes, where: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise DataError(f"{where}: the word {raw[:40]!r} is not UTF-8") from None


def _values(parts: list[bytes], where: str) -> Tensor:
    try:
        return torch.tensor([float(x) for x in parts], dtype=torch.float32)
    except ValueError:
        bad = next(x for x in parts if not _is_number(x))
        raise DataError(f"{where}: the value {bad.decode('utf-8', 'replace')!r} is not a number") from None


def _is_number(text: bytes) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _text_rows(path: Path, header: bool) -> Iterator[tuple[int, list[bytes]]]:
    """(line number, whitespace-separated fields) of each non-blank row of a text file."""
    with _open(path) as f:
        for number, line in enumerate(f, start=1):
            if header and number == 1:
                continue
            parts = line.split()
            if parts:
                yield number, parts


def _read_text(path: Path, file_format: str, wanted: Collection[str]) -> WordVectors:
    header = None
    if file_format == "word2vec":
        with _open(path) as f:
            header = _header(f.readline())
        if header is None:
            raise DataError(f"{path}:1: a word2vec text file starts with a header 'WORDS DIMENSIONS'")
    dim, rows, found = None if header is None else header[1], 0, {}
    for number, parts in _text_rows(path, header is not None):
        where = f"{path}:{number}"
        if dim is None:
            dim = len(parts) - 1
            if dim < 1:
                raise DataError(f"{where}: a row is a word and its values, got {len(parts)} field(s)")
        if len(parts) - 1 != dim:
            said = "the header says" if header is not None else "the first row has"
            raise DataError(f"{where}: {len(parts) - 1} values where {said} {dim}")
        word = _word(parts[0], where)
        rows += 1
        if word in wanted and word not in found:
            found[word] = _values(parts[1:], where)
    if header is not None and rows != header[0]:
        raise DataError(f"{path}:1: the header says {header[0]} words, the file has {rows} rows")
    if dim is None:
        raise DataError(f"{path}: no word vectors in the file")
    return WordVectors(str(path), file_format, dim, rows, found)


def _read_binary(path: Path, wanted: Collection[str]) -> WordVectors:
    found = {}
    with _open(path) as f:
        header = _header(f.readline())
        if header is None:
            raise DataError(f"{path}:1: a word2vec binary file starts with a header 'WORDS DIMENSIONS'")
        n_words, dim = header
        for row in range(1, n_words + 1):
            where = f"{path}: row {row} of the {n_words} the header says"
            raw = bytearray()
            while (byte := f.read(1)) != b" ":
                if not byte:
                    raise DataError(f"{where}: the file ends before it")
                if byte != b"\n" or raw:
                    raw += byte
            data = f.read(4 * dim)
            if len(data) != 4 * dim:
                raise DataError(f"{where}: the file ends inside its {dim} values")
            word = _word(bytes(raw), where)
            if word in wanted and word not in found:
                found[word] = torch.tensor(struct.unpack(f"<{dim}f", data), dtype=torch.float32)
        if f.read().strip():
            raise DataError(f"{path}: more data after the {n_words} rows the header says")
    return WordVectors(str(path), "word2vec-binary", dim, n_words, found)


def read_word_vectors(
    path: str | Path, file_format: str | None = None, wanted: Collection[str] = frozenset()
) -> WordVectors:
    """The vectors of the ``wanted`` words in the file ``path`` (``file_format``: one of
    :data:`FORMATS`, None: detected), the file's shape checked on every row."""
    path = Path(path)
    file_format = file_format or detect_format(path)
    if file_format not in FORMATS:
        raise DataError(f"{path}: unknown word vectors format {file_format!r} ({', '.join(FORMATS)})")
    if file_format == "word2vec-binary":
        return _read_binary(path, wanted)
    return _read_text(path, file_format, wanted)
