"""Tagged sentences: CoNLL-U files (Universal Dependencies) and column files (CoNLL-2003 style).

A file is CoNLL-U when its name ends in ``.conllu``, or else when its first word line (the first
that is not blank, a ``#`` comment or a ``-DOCSTART-`` line) is ten tab-separated fields whose
first is a word ID (``3``, ``2-3``, ``8.1``); any other file is a column file.

- CoNLL-U: one word a line, ten tab-separated fields (ID FORM LEMMA UPOS XPOS FEATS HEAD DEPREL
  DEPS MISC), the word's FORM second; a blank line ends a sentence; comments (``#``), multi-word
  tokens (ID ``1-2``, whose words follow on their own lines) and empty nodes (ID ``8.1``) are
  skipped. The tag is the UPOS field, or the one ``--column`` names (by name, or its number from 1).
- Column files: one word a line, its fields split at tabs where the line has one, else at runs of
  white space; the word first and, by default, the tag last (the second of a word-and-tag file;
  ``--column N`` takes the N-th from 1 instead, e.g. CoNLL-2003's fourth, its named entities); a
  blank line ends a sentence; ``-DOCSTART-`` lines (documents' starts) are skipped; every word line
  has as many fields as the first.

Every bad line is a one-line :class:`~vaswani.errors.DataError` naming the file and the line.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from vaswani.data.readers import read_lines
from vaswani.errors import DataError

CONLLU_COLUMNS = ("ID", "FORM", "LEMMA", "UPOS", "XPOS", "FEATS", "HEAD", "DEPREL", "DEPS", "MISC")
WORD_ID = re.compile(r"[0-9]+([-.][0-9]+)?")
DOCSTART = "-DOCSTART-"


@dataclass(frozen=True)
class Sentence:
    """The words of one sentence, their tags and the line number of each word in its file."""

    words: tuple[str, ...]
    tags: tuple[str, ...]
    lines: tuple[int, ...]


def column_problem(column: str) -> str | None:
    """Why ``column`` is not a ``--column`` value (a CoNLL-U column's name, in any case, or a
    column number from 1), or None."""
    if column.upper() in CONLLU_COLUMNS or (re.fullmatch(r"[0-9]+", column) and int(column) >= 1):
        return None
    return f"a CoNLL-U column ({', '.join(CONLLU_COLUMNS[2:])}) or a column number from 1, got {column!r}"


def is_conllu(path: str | Path, lines: Sequence[str]) -> bool:
    """Whether the file ``path`` of ``lines`` reads as CoNLL-U (see the module's docstring)."""
    if Path(path).suffix.lower() == ".conllu":
        return True
    for line in lines:
        if line.strip() and not line.startswith("#") and line.split()[0] != DOCSTART:
            fields = line.split("\t")
            return len(fields) == 10 and WORD_ID.fullmatch(fields[0]) is not None
    return False


def read_tagged(path: str | Path, column: str | None = None) -> list[Sentence]:
    """The sentences of a CoNLL-U or column file, the tags from ``column`` (None: UPOS, or a
    column file's last field); a file without a word is a :class:`DataError`."""
    lines = read_lines(path, allow_empty_lines=True)
    conllu = is_conllu(path, lines)
    sentences = (conllu_sentences if conllu else column_sentences)(path, lines, column)
    if not sentences:
        raise DataError(
            f"{path}: no sentences (expected CoNLL-U, or a word and its tag a line; a blank line after each)"
        )
    return sentences


def conllu_index(path: str | Path, column: str | None) -> int:
    """The 0-based field of the tags in a CoNLL-U file: UPOS, or the one ``column`` names."""
    name = "UPOS" if column is None else column.upper()
    index = CONLLU_COLUMNS.index(name) if name in CONLLU_COLUMNS else int(name) - 1
    if index >= len(CONLLU_COLUMNS):
        raise DataError(
            f"{path}: --column {column}: a CoNLL-U file has 10 columns ({' '.join(CONLLU_COLUMNS)})"
        )
    if index == 1:
        raise DataError(f"{path}: --column {column} is FORM, the words themselves")
    return index


def conllu_sentences(path: str | Path, lines: Sequence[str], column: str | None) -> list[Sentence]:
    """The sentences of CoNLL-U ``lines``. A line that is not ten tab-separated fields, a word ID
    out of order (a missing blank line between sentences), a word without a FORM or tag (``_``),
    or a sentence without a word (its ``# sent_id``/``# text`` comment or multi-word token lines
    followed by a blank line) is a :class:`DataError` naming file and line."""
    index = conllu_index(path, column)
    sentences: list[Sentence] = []
    words: list[tuple[str, str, int]] = []
    opened: int | None = None  # the first line of a sentence that has no word yet
    for number, line in enumerate([*lines, ""], start=1):
        if not line.strip():
            if words:
                sentences.append(Sentence(*(tuple(field) for field in zip(*words, strict=True))))
            elif opened is not None:
                raise DataError(
                    f"{path}:{opened}: a sentence without tokens (no word line before line {number})"
                )
            words, opened = [], None
            continue
        if line.startswith("#"):
            if opened is None and re.match(r"#\s*(sent_id|text)\s*=", line):
                opened = number
            continue
        fields = line.split("\t")
        if len(fields) != 10:
            raise DataError(f"{path}:{number}: {len(fields)} tab-separated field(s), CoNLL-U has 10")
        ident, form, tag = fields[0], fields[1], fields[index]
        if "-" in ident or "." in ident:  # a multi-word token or an empty node
            opened = number if opened is None else opened
            continue
        if ident != str(len(words) + 1):
            raise DataError(
                f"{path}:{number}: word ID {ident!r} where {len(words) + 1} was expected "
                "(is a blank line missing between two sentences?)"
            )
        if not form or not tag or tag == "_":
            missing = "FORM" if not form else f"{CONLLU_COLUMNS[index]} tag"
            raise DataError(f"{path}:{number}: word {ident} has no {missing}")
        words.append((form, tag, number))
    return sentences


def column_fields(line: str) -> list[str]:
    """The fields of a column file's line: split at tabs where it has one, else at white space."""
    return [field.strip() for field in line.split("\t")] if "\t" in line else line.split()


def column_sentences(path: str | Path, lines: Sequence[str], column: str | None) -> list[Sentence]:
    """The sentences of a column file's ``lines``: the word first, the tag in ``column`` (a number
    from 1; None: the last field). A line with another number of fields than the first word line,
    a single field, an empty word or tag, or a ``column`` past the fields is a :class:`DataError`
    naming file and line."""
    if column is not None and column.upper() in CONLLU_COLUMNS:
        raise DataError(
            f"{path}: --column {column} names a CoNLL-U column, but this is a column file (a word and its "
            "tag a line): give the tag's column number"
        )
    sentences: list[Sentence] = []
    words: list[tuple[str, str, int]] = []
    first: tuple[int, int] | None = None  # the first word line's number of fields, and its number
    index = 0
    for number, line in enumerate([*lines, ""], start=1):
        if not line.strip():
            if words:
                sentences.append(Sentence(*(tuple(field) for field in zip(*words, strict=True))))
            words = []
            continue
        fields = column_fields(line)
        if fields[0] == DOCSTART:
            continue
        if first is None:
            first = (len(fields), number)
            index = len(fields) - 1 if column is None else int(column) - 1
            if len(fields) < 2:
                raise DataError(f"{path}:{number}: 1 field; a column file has a word and its tag a line")
            if index >= len(fields):
                raise DataError(f"{path}:{number}: --column {column}, but the line has {len(fields)} columns")
            if index == 0:
                raise DataError(f"{path}: --column {column} is the words themselves")
        elif len(fields) != first[0]:
            raise DataError(f"{path}:{number}: {len(fields)} columns where line {first[1]} has {first[0]}")
        if not fields[0] or not fields[index]:
            raise DataError(f"{path}:{number}: {'an empty word' if not fields[0] else 'no tag'}")
        words.append((fields[0], fields[index], number))
    return sentences
