"""Properties checked on generated input (Hypothesis): the readers on arbitrary bytes and what the
tokenizer promises."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from vaswani.data.readers import read_lines, read_parallel
from vaswani.errors import DataError
from vaswani.tokenizer import UNK_ID, TextTokenizer

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


# Characters the tokenizer is trained on: Latin with accents, digits, ASCII punctuation (with the
# characters of "<eos>"), Chinese and its punctuation. No space (the word separator) and no "▁".
ALPHABET = (
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZäöüßéñç0123456789"
    ".,;:!?'\"()[]<>/-_@#&*+=%$"
    "汤姆追逐杰瑞猫狗看见了在过不没吗的是我你他她们喜欢吃米饭书三本小大"
    "，。？！、：；「」（）"
)


@pytest.fixture(scope="module")
def tokenizer() -> TextTokenizer:
    words = [ALPHABET[i : i + 5] for i in range(0, len(ALPHABET), 5)]
    corpus = [" ".join(words[i:] + words[:i]) for i in range(len(words))]
    return TextTokenizer.train_bpe(corpus, vocab_size=400)


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet=ALPHABET + " ", max_size=40))
@example(text="<eos> a<pad>b <unk><bos>")
@example(text="汤姆追逐杰瑞。  Tom chases Jerry!  ")
@example(text=" leading space")
def test_text_of_seen_characters_round_trips(tokenizer, text):
    """Exactly, runs of spaces and trailing spaces included; only one leading space is lost."""
    assert tokenizer.decode(tokenizer.encode(text)) == text.removeprefix(" ")


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=40))
@example(text="a\tb\nc\u3000d\u00a0e\u2581f")
@example(text="😀 汤\x00")
def test_any_text_encodes_and_decodes_unseen_characters_as_unk(tokenizer, text):
    """Arbitrary Unicode does not round-trip: each character not seen in training becomes <unk>,
    which decoding leaves out ("▁", the word marker, reads as a space)."""
    ids = tokenizer.encode(text)
    assert all(0 <= i < tokenizer.vocab_size for i in ids)
    unseen = [c for c in text if c not in ALPHABET and c not in " ▁"]
    assert ids.count(UNK_ID) == len(unseen)
    kept = text.replace("▁", " ").removeprefix(" ")
    assert tokenizer.decode(ids) == "".join(c for c in kept if c in ALPHABET or c == " ")


@pytest.fixture(scope="module")
def byte_tokenizer():
    from vaswani.tokenizer import LMTokenizer

    corpus = ["the cat sat on the mat. Le chat est sur le tapis. 猫坐在垫子上。 😀\n"] * 20
    return LMTokenizer.train(corpus, "bpe", vocab_size=320)


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=60))
@example(text="<|endoftext|>")
@example(text="a<|endoftext|>b <|endoftext|>\n")
@example(text="\x00\x01\x7f\r\n\t\u200b\ufeff\ud7ff\U0010ffff")
@example(text="😀👩‍👩‍👧 汤姆追逐杰瑞。 the cat")
@example(text="   leading and trailing spaces   ")
def test_byte_level_tokenizer_round_trips_any_text(byte_tokenizer, text):
    """GPT-2's byte-level BPE: every string encodes without an unknown token and decodes back
    exactly; "<|endoftext|>" typed as text stays text (never the special id)."""
    ids = byte_tokenizer.encode(text)
    assert byte_tokenizer.decode(ids) == text
    assert byte_tokenizer.eos_id not in ids
    assert all(0 <= i < byte_tokenizer.vocab_size for i in ids)
