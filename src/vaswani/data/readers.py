"""Reading the user's text files, with errors that name the file and the line."""

from __future__ import annotations

from pathlib import Path

from vaswani.errors import DataError
from vaswani.io import MAX_LINE_ENV, max_line_chars, read_bytes_bounded


def read_lines(path: str | Path, allow_empty_lines: bool = False) -> list[str]:
    """The lines of a UTF-8 text file (or a pipe: ``<(…)``, ``/dev/fd/N``), without their line
    endings, as :func:`text_lines` reads them.

    Raises :class:`DataError` for a missing file, a directory, a device, a FIFO without a writer, a
    file past the input limit (:func:`vaswani.io.read_bytes_bounded`), what :func:`text_lines`
    refuses, or a file with no text.
    """
    path = Path(path)
    found = text_lines(read_bytes_bounded(path, "a text file"), str(path), allow_empty_lines)
    if not found:
        raise DataError(f"{path}: file is empty")
    return found


def text_lines(data: bytes, name: str, allow_empty_lines: bool = False) -> list[str]:
    """The lines of ``data`` (the text of the file or stream ``name``), split at ``\\n``, without
    their line endings: the one reader of every text vaswani is given (files, standard input, and
    through them TSV, JSONL, CSV and CoNLL-U files).

    A UTF-8 byte-order mark at the start is dropped. Refused in one line naming ``name`` and the
    line: bytes that are not UTF-8, a NUL byte (no text holds one; a binary file given as text
    does), a line longer than :func:`vaswani.io.max_line_chars` characters (before any tokenizer
    is trained on it), or (unless ``allow_empty_lines``) an empty line.
    """
    longest = max_line_chars()
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    decoded = []
    for number, raw in enumerate(lines, start=1):
        try:
            line = raw.decode("utf-8").rstrip("\r")
            if number == 1:  # a UTF-8 byte-order mark (Windows editors write one) is not text
                line = line.removeprefix("\ufeff")
        except UnicodeDecodeError as exc:
            raise DataError(
                f"{name}:{number}: not valid UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})"
            ) from None
        if "\0" in line:
            column = line.index("\0") + 1
            raise DataError(f"{name}:{number}: a NUL byte at column {column}; text has none (a binary file?)")
        if len(line) > longest:
            raise DataError(
                f"{name}:{number}: a line of {len(line)} characters, more than the limit of {longest}; "
                f"raise it with {MAX_LINE_ENV}"
            )
        if not allow_empty_lines and not line.strip():
            raise DataError(f"{name}:{number}: empty line")
        decoded.append(line)
    return decoded


def read_parallel(src: str | Path, tgt: str | Path) -> list[tuple[str, str]]:
    """Aligned sentence pairs from two files with one sentence per line."""
    src_lines, tgt_lines = read_lines(src), read_lines(tgt)
    if len(src_lines) != len(tgt_lines):
        raise DataError(
            f"{src} has {len(src_lines)} lines but {tgt} has {len(tgt_lines)}: "
            "parallel files must have one sentence per line, aligned"
        )
    return list(zip(src_lines, tgt_lines, strict=True))


def read_tsv_pairs(path: str | Path, columns: tuple[int, int] = (0, 1)) -> list[tuple[str, str]]:
    """Sentence pairs from two columns of a tab-separated file (counted from 0), such as the
    Tatoeba exports ``English<TAB>translation<TAB>attribution``; a line without those columns,
    or with one of them empty, is refused with its number."""
    pairs = []
    for number, line in enumerate(read_lines(path), start=1):
        fields = line.split("\t")
        if len(fields) <= max(columns):
            raise DataError(
                f"{path}:{number}: {len(fields)} tab-separated field(s), expected at least "
                f"{max(columns) + 1} (columns {columns[0]} and {columns[1]})"
            )
        src, tgt = fields[columns[0]].strip(), fields[columns[1]].strip()
        for column, text in ((columns[0], src), (columns[1], tgt)):
            if not text:
                raise DataError(f"{path}:{number}: column {column} is empty")
        pairs.append((src, tgt))
    return pairs
