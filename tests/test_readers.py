"""The line readers of ``data/readers.py`` on arbitrary bytes (Hypothesis): lines or one
``DataError`` line naming the file, and aligned pairs from two files (their refusals of particular
bad files: test_bad_inputs.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vaswani.data.readers import read_lines, read_parallel
from vaswani.errors import DataError

# Bytes that make text files interesting: line ends, spaces, multi-byte UTF-8 and its fragments.
PIECES = [b"a", b"b", b" ", b"\t", b"\n", b"\r", b"\r\n", b"\x00", b"\xff", b"\xc3", b"\xa9", "汤".encode()]


FILE_BYTES = st.one_of(
    st.binary(max_size=64),
    st.text(max_size=32).map(str.encode),
    st.lists(st.sampled_from(PIECES), max_size=24).map(b"".join),
)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("properties")


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@settings(max_examples=300, deadline=None)
@given(data=FILE_BYTES, allow_empty_lines=st.booleans())
def test_read_lines_gives_lines_or_a_data_error(folder, data, allow_empty_lines):
    path = _write(folder / "text", data)
    try:
        lines = read_lines(path, allow_empty_lines=allow_empty_lines)
    except DataError as exc:
        message = str(exc)
        assert message.startswith(str(path)) and "\n" not in message
        return
    data.decode("utf-8")  # only valid UTF-8 is accepted
    assert len(lines) == data.count(b"\n") + (not data.endswith(b"\n"))
    for line in lines:
        assert isinstance(line, str) and "\n" not in line and not line.endswith("\r")
        assert allow_empty_lines or line.strip()


@settings(max_examples=200, deadline=None)
@given(src=FILE_BYTES, tgt=FILE_BYTES)
def test_read_parallel_gives_aligned_pairs_or_a_data_error(folder, src, tgt):
    src_path, tgt_path = _write(folder / "src", src), _write(folder / "tgt", tgt)
    try:
        pairs = read_parallel(src_path, tgt_path)
    except DataError as exc:
        assert "\n" not in str(exc)
        return
    assert pairs == list(zip(read_lines(src_path), read_lines(tgt_path), strict=True))
