"""Part-of-speech tagging with BERT: the CoNLL-U reader (multi-word tokens, empty nodes, every bad
line named by file and line), the first-piece alignment of words and WordPiece pieces, and the
loss against a hand computation."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from vaswani.config import ModelConfig
from vaswani.errors import DataError
from vaswani.models.tagger import BertTagger
from vaswani.tasks.tag import Sentence, encode_words, read_conllu, tag_batch, tagging_loss
from vaswani.tokenizer import WordPieceTokenizer

# ---------------------------------------------------------------------------------------------
# Reading CoNLL-U


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def word_line(ident: str, form: str, upos: str) -> str:
    return f"{ident}\t{form}\t{form.lower()}\t{upos}\t_\t_\t0\tdep\t_\t_\n"


UD_SAMPLE = (
    "# sent_id = 1\n# text = I don't know.\n"
    + word_line("1", "I", "PRON")
    + "2-3\tdon't\t_\t_\t_\t_\t_\t_\t_\t_\n"
    + word_line("2", "do", "AUX")
    + word_line("3", "n't", "PART")
    + word_line("4", "know", "VERB")
    + "4.1\tknows\tknow\tVERB\t_\t_\t_\t_\t3:conj\t_\n"
    + word_line("5", ".", "PUNCT")
    + "\n"
    + word_line("1", "Yes", "INTJ")  # the file ends without the blank line
)


def test_the_reader_keeps_the_words_and_skips_multiword_tokens_and_empty_nodes(tmp_path):
    sentences = read_conllu(write(tmp_path / "a.conllu", UD_SAMPLE))
    assert sentences == [
        Sentence(("I", "do", "n't", "know", "."), ("PRON", "AUX", "PART", "VERB", "PUNCT"), (3, 5, 6, 7, 9)),
        Sentence(("Yes",), ("INTJ",), (11,)),
    ]


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        (word_line("1", "a", "DET").replace("\t_\t_\n", "\n"), 1, "8 tab-separated field(s)"),
        (word_line("1", "a", "DET") + word_line("1", "b", "NOUN"), 2, "word ID '1' where 2 was expected"),
        ("# c\n" + word_line("1", "a", "DET") + word_line("2", "b", "_"), 3, "word 2 has no UPOS tag"),
        (word_line("1", "", "DET"), 1, "word 1 has no FORM"),
    ],
)
def test_bad_lines_are_named_by_file_and_line(tmp_path, text, line, words):
    path = write(tmp_path / "bad.conllu", text)
    with pytest.raises(DataError, match=rf"^{re.escape(str(path))}:{line}: .*{re.escape(words)}"):
        read_conllu(path)


def test_a_file_of_comments_has_no_sentences(tmp_path):
    path = write(tmp_path / "empty.conllu", "# only a comment\n\n")
    with pytest.raises(DataError, match=rf"^{re.escape(str(path))}: no sentences"):
        read_conllu(path)


# ---------------------------------------------------------------------------------------------
# Words and pieces, the loss

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "dog", "play", "##ing", "##ed", "."]


@pytest.fixture
def tokenizer(tmp_path) -> WordPieceTokenizer:
    """A WordPiece vocabulary written by hand: [PAD] 0, [UNK] 1, [CLS] 2, [SEP] 3, then the pieces."""
    return WordPieceTokenizer.from_vocab(write(tmp_path / "vocab.txt", "".join(f"{p}\n" for p in VOCAB)))


def test_a_word_of_several_pieces_is_tagged_once_at_its_first(tokenizer):
    (span,) = encode_words(tokenizer, [["the", "cat", "playing", "."]])
    assert span.ids == [2, 5, 6, 8, 9, 11, 3]  # [CLS] the cat play ##ing . [SEP]
    assert span.first == [1, 2, 3, 5]
    batch = tag_batch([span], tokenizer.pad_id, [0, 1, 2, 3])
    assert batch.first.tolist() == [[False, True, True, True, False, True, False]]
    assert len(batch.tags) == int(batch.first.sum()) == 4


def test_a_sentence_too_long_for_the_model_is_cut_between_words(tokenizer):
    tokenizer.max_len = 6  # four pieces between [CLS] and [SEP]
    words = ["the", "playing", "dog", "played", "cat", "."]  # pieces: 1, 2, 1, 2, 1, 1
    spans = encode_words(tokenizer, [["cat"], words])
    assert [(s.sentence, s.start, s.ids, s.first) for s in spans] == [
        (0, 0, [2, 6, 3], [1]),
        (1, 0, [2, 5, 8, 9, 7, 3], [1, 2, 4]),
        (1, 3, [2, 8, 10, 6, 11, 3], [1, 3, 4]),
    ]


def test_the_loss_is_the_cross_entropy_at_first_pieces_only(tokenizer):
    """Σ −log softmax(logits)[tag] at the four first pieces, by hand: the later piece (##ing),
    [CLS], [SEP] and the padding of the shorter row do not count, nor does more padding."""
    torch.manual_seed(0)
    cfg = ModelConfig.preset(
        "bert-base", src_vocab_size=64, d_model=16, n_heads=2, d_ff=32, n_encoder_layers=1, max_len=16
    )
    model = BertTagger(cfg, n_tags=3).eval()
    spans = encode_words(tokenizer, [["the", "cat", "playing"], ["dog"]])
    batch = tag_batch(spans, tokenizer.pad_id, [0, 1, 2, 2])
    assert batch.tokens.tolist() == [[2, 5, 6, 8, 9, 3], [2, 7, 3, 0, 0, 0]]
    with torch.no_grad():
        logits = model(batch.tokens, batch.mask).log_softmax(dim=-1)
        by_hand = -(logits[0, 1, 0] + logits[0, 2, 1] + logits[0, 3, 2] + logits[1, 1, 2])
        loss, count = tagging_loss(model, batch)
        torch.testing.assert_close(loss, by_hand)
        assert count == 4
        wider = tag_batch(spans, tokenizer.pad_id, [0, 1, 2, 2])
        wider.tokens = torch.cat([wider.tokens, torch.zeros(2, 3, dtype=torch.long)], dim=1)
        wider.mask, wider.first = wider.tokens != 0, torch.cat([wider.first, torch.zeros(2, 3).bool()], 1)
        torch.testing.assert_close(tagging_loss(model, wider)[0], by_hand)
