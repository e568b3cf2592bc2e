"""Property-based tests of the file readers (issue 34): any bytes given as a file (plain text, TSV
pairs, TSV/CSV/JSONL labeled files, CoNLL-U and column files, the three word vectors formats, a
safetensors header) either parse or raise the project's one-line error, never another exception
and never a hang; and what vaswani's own writers write reads back as it was written."""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vaswani.data.conll import read_tagged
from vaswani.data.labeled import read_labeled
from vaswani.data.readers import read_lines, read_tsv_pairs, text_lines
from vaswani.data.vectors import read_word_vectors
from vaswani.errors import VaswaniError
from vaswani.io import safetensors_header

BOUNDED = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

PIECES = [
    b"a", b"word", b" ", b"\t", b"\n", b"\r", b"\0", b"\xff", b"\xc3\xa9", b"\xef\xbb\xbf", b"1", b"0.5",
    b"-", b"#", b"_", b"nan", b"inf", b"1e999", b"{", b"}", b'"', b":", b",", b"[", b"text", b"label",
    b"3 2", b"1-2", b"8.1", b"-DOCSTART-",
]  # fmt: skip
files = st.one_of(
    st.binary(max_size=200),
    st.lists(st.sampled_from(PIECES), max_size=60).map(b"".join),
)
"""Bytes of a file: arbitrary, or pieces that readers give meaning to (tabs, numbers, JSON...)."""


def parses_or_refuses(read: Callable[[], Any]) -> None:
    """``read()`` returns, or raises a :class:`VaswaniError` of one line; nothing else."""
    try:
        read()
    except VaswaniError as exc:
        assert str(exc) and "\n" not in str(exc)


def written(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


@BOUNDED
@given(data=files)
def test_any_bytes_as_text_are_lines_or_one_line_error(tmp_path, data):
    path = written(tmp_path, "a.txt", data)
    parses_or_refuses(lambda: read_lines(path))
    parses_or_refuses(lambda: read_lines(path, allow_empty_lines=True))
    parses_or_refuses(lambda: read_tsv_pairs(path))


@BOUNDED
@given(data=files, fmt=st.sampled_from(["tsv", "csv", "jsonl"]))
def test_any_bytes_as_a_labeled_file_are_examples_or_one_line_error(tmp_path, data, fmt):
    path = written(tmp_path, f"a.{fmt}", data)
    parses_or_refuses(lambda: read_labeled(path))


@BOUNDED
@given(data=files, name=st.sampled_from(["a.conllu", "a.txt"]), column=st.sampled_from([None, "XPOS", "2"]))
def test_any_bytes_as_a_tagged_file_are_sentences_or_one_line_error(tmp_path, data, name, column):
    path = written(tmp_path, name, data)
    parses_or_refuses(lambda: read_tagged(path, column))


@BOUNDED
@given(data=files, fmt=st.sampled_from([None, "word2vec", "word2vec-binary", "glove"]))
def test_any_bytes_as_word_vectors_are_vectors_or_one_line_error(tmp_path, data, fmt):
    path = written(tmp_path, "v.txt", data)
    parses_or_refuses(lambda: read_word_vectors(path, fmt, wanted={"a", "word", "text"}))


json_values = st.recursive(
    st.none() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
headers = st.one_of(
    st.binary(max_size=100),
    st.dictionaries(st.text(max_size=5), json_values, max_size=3).map(
        lambda value: json.dumps(value).encode()
    ),
)


@BOUNDED
@given(header=headers, declared=st.one_of(st.none(), st.integers(0, 2**64 - 1)))
def test_any_safetensors_header_is_tensors_or_one_line_error(tmp_path, header, declared):
    size = len(header) if declared is None else declared
    path = written(tmp_path, "model.safetensors", struct.pack("<Q", size) + header)
    parses_or_refuses(lambda: safetensors_header(path))


line = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r\0\ufeff"), min_size=1, max_size=30
).filter(str.strip)


@BOUNDED
@given(lines=st.lists(line, min_size=1, max_size=20), crlf=st.booleans())
def test_lines_written_read_back_as_they_were(tmp_path, lines, crlf):
    ending = "\r\n" if crlf else "\n"
    path = written(tmp_path, "a.txt", "".join(text + ending for text in lines).encode())
    assert read_lines(path) == lines
    assert text_lines(path.read_bytes(), "a.txt") == lines


cell = st.text(
    st.characters(blacklist_categories=("Cs", "Zs", "Cc", "Zl", "Zp"), blacklist_characters="\ufeff\x85"),
    min_size=1,
    max_size=12,
)


@BOUNDED
@given(pairs=st.lists(st.tuples(cell, cell), min_size=1, max_size=10))
def test_tsv_pairs_written_read_back_as_they_were(tmp_path, pairs):
    path = written(tmp_path, "p.tsv", "".join(f"{s}\t{t}\tsource\n" for s, t in pairs).encode())
    assert read_tsv_pairs(path) == pairs


finite = st.floats(-1e6, 1e6, allow_nan=False, width=32)


words = st.from_regex(r"[a-zé]{1,6}", fullmatch=True)


@BOUNDED
@given(
    table=st.dictionaries(words, st.lists(finite, min_size=3, max_size=3), min_size=1, max_size=8),
    fmt=st.sampled_from(["word2vec", "word2vec-binary", "glove"]),
)
def test_word_vectors_written_read_back_as_they_were(tmp_path, table, fmt):
    if fmt == "word2vec-binary":
        rows = b"".join(w.encode() + b" " + struct.pack("<3f", *v) + b"\n" for w, v in table.items())
        data = f"{len(table)} 3\n".encode() + rows
    else:
        rows = "".join(f"{w} {' '.join(repr(x) for x in v)}\n" for w, v in table.items())
        data = ((f"{len(table)} 3\n" if fmt == "word2vec" else "") + rows).encode()
    read = read_word_vectors(written(tmp_path, "v", data), fmt, wanted=set(table))
    assert read.rows == len(table) and read.dim == 3 and read.vectors.keys() == table.keys()
    for word, values in table.items():
        assert torch.equal(read.vectors[word], torch.tensor(values, dtype=torch.float32))
        assert all(math.isfinite(v) for v in read.vectors[word].tolist())


@pytest.mark.parametrize("value", ["nan", "-inf", "1e999", "3.5e38"])
def test_a_value_that_is_not_a_finite_float32_is_refused_naming_its_line(tmp_path, value):
    path = written(tmp_path, "v.txt", f"a 0.5 1\nword 0.5 {value}\n".encode())
    with pytest.raises(VaswaniError, match=rf"v\.txt:2: the value '{value}' is not a finite number"):
        read_word_vectors(path, wanted={"word"})
