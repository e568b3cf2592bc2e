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
UTF-8, a value that is not a finite number (``nan``, ``inf``, ``1e999``: every training step would
be NaN) or a NUL byte in a text file is a one-line :class:`~vaswani.errors.DataError` naming the
file and the line (the row, in a binary file).
"""

from __future__ import annotations

import io
import struct
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import torch
from torch import Tensor

from vaswani.errors import DataError
from vaswani.io import MAX_LINE_ENV, Replayed, max_line_chars, open_input

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
        return _detected(f.read(PEEK))


def _detected(head: bytes) -> str:
    """The format of a vectors file that starts with ``head``."""
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
    """``path`` opened by the one opener of every input (:func:`vaswani.io.open_input`: a regular
    file or a pipe with a writer, never a directory, a device or a FIFO without one)."""
    return open_input(path, "a word vectors file")


def _word(raw: bytes, where: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise DataError(f"{where}: the word {raw[:40]!r} is not UTF-8") from None


def _finite(values: Tensor, shown: list[str], where: str) -> Tensor:
    """``values``, refused in one line naming ``where`` if one is not finite (``nan``, ``inf``,
    ``1e999``, a value past float32's range): it would make every training step NaN."""
    bad = (~torch.isfinite(values)).nonzero()
    if len(bad):
        raise DataError(f"{where}: the value {shown[int(bad[0])]!r} is not a finite number")
    return values


def _values(parts: list[bytes], where: str) -> Tensor:
    try:
        values = torch.tensor([float(x) for x in parts], dtype=torch.float32)
    except ValueError:
        bad = next(x for x in parts if not _is_number(x))
        raise DataError(f"{where}: the value {bad.decode('utf-8', 'replace')!r} is not a number") from None
    return _finite(values, [x.decode("utf-8", "replace") for x in parts], where)


def _is_number(text: bytes) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _lines(f: BinaryIO, path: Path) -> Iterator[tuple[int, bytes]]:
    """(line number, line) of a text vectors file, each refused in one line naming it when it holds
    a NUL byte (a binary file read as text) or passes :func:`vaswani.io.max_line_chars` bytes."""
    longest = max_line_chars()
    number = 0
    while line := f.readline(longest + 1):
        number += 1
        if len(line) > longest and not line.endswith(b"\n"):
            raise DataError(
                f"{path}:{number}: a line of more than {longest} bytes; raise it with {MAX_LINE_ENV}"
            )
        if b"\0" in line:
            raise DataError(f"{path}:{number}: a NUL byte at column {line.index(0) + 1}; text has none")
        yield number, line


def _read_text(path: Path, f: BinaryIO, file_format: str, wanted: Collection[str]) -> WordVectors:
    header = None
    dim, rows, found = None, 0, {}
    for number, line in _lines(f, path):
        if number == 1 and file_format == "word2vec":
            header = _header(line)
            if header is None:
                raise DataError(f"{path}:1: a word2vec text file starts with a header 'WORDS DIMENSIONS'")
            dim = header[1]
            continue
        parts = line.split()
        if not parts:
            continue
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
    if file_format == "word2vec" and header is None:
        raise DataError(f"{path}:1: a word2vec text file starts with a header 'WORDS DIMENSIONS'")
    if header is not None and rows != header[0]:
        raise DataError(f"{path}:1: the header says {header[0]} words, the file has {rows} rows")
    if dim is None:
        raise DataError(f"{path}: no word vectors in the file")
    return WordVectors(str(path), file_format, dim, rows, found)


def _read_binary(path: Path, f: BinaryIO, wanted: Collection[str]) -> WordVectors:
    found = {}
    header = _header(f.readline(PEEK))
    if header is None:
        raise DataError(f"{path}:1: a word2vec binary file starts with a header 'WORDS DIMENSIONS'")
    n_words, dim = header
    for row in range(1, n_words + 1):
        where = f"{path}: row {row} of the {n_words} the header says"
        raw = bytearray()
        while (byte := f.read(1)) != b" ":
            if not byte:
                raise DataError(f"{where}: the file ends before it")
            if len(raw) > PEEK:
                raise DataError(f"{where}: a word of more than {PEEK} bytes (not a word2vec binary file?)")
            if byte != b"\n" or raw:
                raw += byte
        data = f.read(4 * dim)
        if len(data) != 4 * dim:
            raise DataError(f"{where}: the file ends inside its {dim} values")
        word = _word(bytes(raw), where)
        if word in wanted and word not in found:
            values = torch.tensor(struct.unpack(f"<{dim}f", data), dtype=torch.float32)
            found[word] = _finite(values, [str(float(v)) for v in values], where)
    if f.read(PEEK).strip():
        raise DataError(f"{path}: more data after the {n_words} rows the header says")
    return WordVectors(str(path), "word2vec-binary", dim, n_words, found)


def read_word_vectors(
    path: str | Path, file_format: str | None = None, wanted: Collection[str] = frozenset()
) -> WordVectors:
    """The vectors of the ``wanted`` words in the file ``path`` (``file_format``: one of
    :data:`FORMATS`, None: detected), the file's shape checked on every row. The file is opened
    once (a pipe, ``<(…)``, is read as a file is) and streamed, not held whole: the input limit
    (``VASWANI_MAX_INPUT_BYTES``) does not apply to it, the line limit does."""
    path = Path(path)
    if file_format is not None and file_format not in FORMATS:
        raise DataError(f"{path}: unknown word vectors format {file_format!r} ({', '.join(FORMATS)})")
    with _open(path) as opened:
        head = opened.read(PEEK)
        f = io.BufferedReader(Replayed(head, opened))
        file_format = file_format or _detected(head)
        if file_format == "word2vec-binary":
            return _read_binary(path, f, wanted)
        return _read_text(path, f, file_format, wanted)
