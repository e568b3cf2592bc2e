"""The tokenizers of ``vaswani.tokenizer``: the translation BPE (``TextTokenizer``), the language
model's characters and GPT-2's byte-level BPE (``LMTokenizer``), on chosen and on generated text
(Hypothesis), and BERT's WordPiece (continuation pieces, pairs and segments, truncation, casing and
accents, ``vocab.txt``, the same vocabulary from every training)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from vaswani.errors import RunDirError
from vaswani.tokenizer import (
    END_OF_TEXT,
    LM_UNK,
    UNK_ID,
    WP_SPECIALS,
    LMTokenizer,
    TextTokenizer,
    WordPieceTokenizer,
)

# ---------------------------------------------------------------------------------------------
# TextTokenizer


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


# ---------------------------------------------------------------------------------------------
# LMTokenizer


LM_TEXTS = ["the cat sat on the mat.\nThe dog <ran> | away!", "a second document, with 12 digits"]
UNICODE = "naïve café 汤 😀 — \x00\t\r\n ' <|endoftext|> trailing  "


def test_char_tokenizer_round_trips_seen_characters():
    tok = LMTokenizer.train(LM_TEXTS, "char", vocab_size=1000)
    assert tok.vocab_size == len(set("".join(LM_TEXTS))) + 2  # each character, <|endoftext|>, <unk>
    for text in [*LM_TEXTS, "cat dog 12!", ""]:
        ids = tok.encode(text)
        assert len(ids) == len(text)  # one token per character
        assert tok.decode(ids) == text


def test_char_tokenizer_maps_an_unseen_character_to_unk_and_decoding_drops_it():
    tok = LMTokenizer.train(LM_TEXTS, "char", vocab_size=1000)
    unk = tok.tokenizer.token_to_id(LM_UNK)
    ids = tok.encode("cat汤z")  # neither 汤 nor z is in the training text
    assert ids[:3] == tok.encode("cat") and ids[3:] == [unk, unk]
    assert tok.decode(ids) == "cat"


@pytest.mark.parametrize("kind", ["char", "bpe"])
def test_typed_end_of_text_is_text_not_the_special_token(kind):
    tok = LMTokenizer.train([*LM_TEXTS, "<|endoftext|> as text"] * 3, kind, vocab_size=300)
    ids = tok.encode(f"a {END_OF_TEXT} c")
    assert tok.eos_id not in ids
    assert tok.decode(ids) == f"a {END_OF_TEXT} c"
    assert tok.decode([*tok.encode("a"), tok.eos_id, *tok.encode("c")]) == "ac"  # the real one is left out


def test_byte_level_bpe_round_trips_any_text_exactly():
    tok = LMTokenizer.train(LM_TEXTS * 20, "bpe", vocab_size=300)
    assert tok.vocab_size > 257  # 256 bytes, <|endoftext|> and some merges were learned
    for text in [*LM_TEXTS, UNICODE, " leading space", "\n\nblank lines\n", "ÿ\ufeff\u200b"]:
        ids = tok.encode(text)
        assert tok.decode(ids) == text
    assert len(tok.encode("the cat sat on the mat")) < len("the cat sat on the mat")  # merges apply


@pytest.mark.parametrize("kind", ["char", "bpe"])
def test_saved_tokenizer_loads_with_identical_ids(tmp_path, kind):
    tok = LMTokenizer.train(LM_TEXTS * 5, kind, vocab_size=300)
    tok.save(tmp_path / "tokenizer.json")
    loaded = LMTokenizer.load(tmp_path / "tokenizer.json")
    assert loaded.vocab_size == tok.vocab_size and loaded.eos_id == tok.eos_id
    for text in [*LM_TEXTS, UNICODE, f"x{END_OF_TEXT}y"]:
        assert loaded.encode(text) == tok.encode(text)
        assert loaded.decode(tok.encode(text)) == tok.decode(tok.encode(text))


@pytest.mark.parametrize("taken, words", [(True, "which is 't''s"), (False, "not an id of the vocabulary")])
def test_an_added_token_that_would_be_renumbered_is_refused(tmp_path, taken, words):
    """``tokenizers`` gives an added token whose id is another token's, or past the vocabulary, a
    new id without a word: the load refuses it, naming the file and the token."""
    tok = LMTokenizer.train(LM_TEXTS * 5, "char", vocab_size=300)
    path = tmp_path / "tokenizer.json"
    tok.save(path)
    saved = json.loads(path.read_text())
    assert saved["added_tokens"], "the trained tokenizer has added (special) tokens"
    saved["added_tokens"][0]["id"] = tok.tokenizer.token_to_id("t") if taken else 10**6
    path.write_text(json.dumps(saved))
    with pytest.raises(RunDirError, match=rf"{path}: added token .* {words}"):
        LMTokenizer.load(path)


@pytest.fixture(scope="module")
def byte_tokenizer() -> LMTokenizer:
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


# ---------------------------------------------------------------------------------------------
# WordPieceTokenizer


WORDPIECE_CORPUS = [
    "play plays played playing",
    "walk walks walked walking",
    "jump jumps jumped jumping",
    "talk talked talking",
    "sing sings singer ring rings, walk! talk.",
] * 10


@pytest.fixture(scope="module")
def wordpiece() -> WordPieceTokenizer:
    return WordPieceTokenizer.train(WORDPIECE_CORPUS, vocab_size=54, min_frequency=1)


def test_wordpiece_learns_continuation_pieces(wordpiece):
    assert wordpiece.tokenize("playing") == ["play", "##ing"]
    assert wordpiece.tokenize("Jumped walks") == ["jump", "##ed", "walk", "##s"]
    assert [wordpiece.tokenizer.token_to_id(t) for t in WP_SPECIALS] == [0, 1, 2, 3, 4]
    ids = (wordpiece.pad_id, wordpiece.unk_id, wordpiece.cls_id, wordpiece.sep_id, wordpiece.mask_id)
    assert ids == (0, 1, 2, 3, 4)
    assert wordpiece.encode("play xyz") == [2, *wordpiece.encode_batch(["play"])[0][1:-1], 1, 3]
    assert wordpiece.decode(wordpiece.encode("Playing, walked!")) == "playing, walked!"
    assert wordpiece.mask_id not in wordpiece.encode("[MASK]")  # typed text is never a special token


def test_pair_layout_and_segments(wordpiece):
    a, b = wordpiece.tokenize("play walks"), wordpiece.tokenize("singing")
    ids, segments = wordpiece.encode_segments("play walks", "singing")
    pieces = [wordpiece.tokenizer.id_to_token(i) for i in ids]
    assert pieces == ["[CLS]", *a, "[SEP]", *b, "[SEP]"]
    assert segments == [0] * (len(a) + 2) + [1] * (len(b) + 1)
    single_ids, single_segments = wordpiece.encode_segments("play walks")
    assert single_ids == wordpiece.encode("play walks") and single_segments == [0] * (len(a) + 2)
    batch = wordpiece.encode_segments_batch(["play walks", "sing"], ["singing", "rings"])
    assert batch[0] == (ids, segments)
    with pytest.raises(ValueError, match="pairs"):
        wordpiece.encode_segments_batch(["a", "b"], ["c"])


def test_truncation_keeps_the_specials():
    long_text = " ".join(["walking"] * 10)  # 20 pieces
    tok = WordPieceTokenizer.train(WORDPIECE_CORPUS, vocab_size=54, min_frequency=1, max_len=8)
    ids = tok.encode(long_text)
    assert len(ids) == 8 and ids[0] == tok.cls_id and ids[-1] == tok.sep_id
    ids, segments = tok.encode_segments(long_text, "play")  # the longer text is cut first
    assert len(ids) == 8 and ids[-3:] == [tok.sep_id, tok.tokenizer.token_to_id("play"), tok.sep_id]
    assert segments == [0] * 6 + [1] * 2
    tok.max_len = 512
    assert len(tok.encode(long_text)) == 22
    with pytest.raises(ValueError, match="max_len"):
        tok.max_len = 2


@pytest.mark.parametrize(
    "lowercase,strip_accents,same,different",
    [
        (True, None, [("HÉLLO", "hello")], []),
        (True, False, [("HÉLLO", "héllo")], [("héllo", "hello")]),
        (False, None, [("Héllo", "Héllo")], [("Héllo", "héllo"), ("héllo", "hello")]),
        (False, True, [("héllo", "hello")], [("Hello", "hello")]),
    ],
)
def test_lowercase_and_accent_options(lowercase, strip_accents, same, different):
    texts = ["Héllo héllo hello HELLO Hello wörld world"] * 5
    tok = WordPieceTokenizer.train(
        texts, 60, lowercase=lowercase, strip_accents=strip_accents, min_frequency=1
    )
    assert (tok.lowercase, tok.strip_accents) == (lowercase, strip_accents)
    for a, b in same:
        assert tok.encode(a) == tok.encode(b)
    for a, b in different:
        assert tok.encode(a) != tok.encode(b)


def test_save_load_and_vocab_txt(wordpiece, tmp_path: Path):
    texts = ["Playing, walked!", "sings jumped rings", "an unknown word"]
    wordpiece.save(tmp_path / "tokenizer.json")
    loaded = WordPieceTokenizer.load(tmp_path / "tokenizer.json", max_len=6)
    assert loaded.max_len == 6 and len(loaded.encode(" ".join(texts))) == 6
    loaded.max_len = 512
    (tmp_path / "vocab.txt").write_text(wordpiece.vocab_text(), encoding="utf-8")
    from_vocab = WordPieceTokenizer.from_vocab(tmp_path / "vocab.txt")
    for tok in (loaded, from_vocab):
        assert tok.encode_batch(texts) == wordpiece.encode_batch(texts)
        assert tok.decode(tok.encode(texts[0])) == "playing, walked!"


def test_a_tokenizer_without_bert_specials_is_refused(tmp_path: Path):
    path = tmp_path / "vocab.txt"
    path.write_text("[PAD]\n[UNK]\n[CLS]\nplay\n", encoding="utf-8")
    with pytest.raises(RunDirError, match=r"\[SEP\]"):
        WordPieceTokenizer.from_vocab(path)


def test_wordpiece_training_gives_the_same_vocabulary_every_time():
    """The reruns and resumes of an mlm run depend on it (tokenizers' own trainer does not, #1794)."""
    from vaswani.data.text import default_documents

    texts = default_documents()[:12]
    first = WordPieceTokenizer.train(texts, 1000).tokenizer.get_vocab()
    for _ in range(3):
        assert WordPieceTokenizer.train(texts, 1000).tokenizer.get_vocab() == first
    tokenizer = WordPieceTokenizer.train(texts, 1000)
    assert tokenizer.tokenize("zqx") == ["z", "##q", "##x"]  # single characters continue a word
    assert tokenizer.tokenizer.get_added_tokens_decoder().keys() == {0, 1, 2, 3, 4}  # "##x" are pieces
