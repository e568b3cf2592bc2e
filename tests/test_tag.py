"""Part-of-speech tagging with BERT: the CoNLL-U reader (multi-word tokens, empty nodes, every bad
line named by file and line), the first-piece alignment of words and WordPiece pieces, the loss
against a hand computation, a tiny tagger that learns through ``vaswani train tag``, ``evaluate
--labeled``, ``--resume``, ``--init`` from an mlm run, and batched tagging = each sentence alone."""

from __future__ import annotations

import json
import math
import random
import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.helpers import assert_resumed_like_whole, record_initial_state, tiny_mlm_run, write
from vaswani.cli import main
from vaswani.config import ModelConfig
from vaswani.data.conll import Sentence
from vaswani.data.conll import read_tagged as read_conllu
from vaswani.errors import DataError
from vaswani.models.tagger import BertTagger
from vaswani.pipelines.tag import Span, Tagger, encode_words, tag_batch
from vaswani.tasks import registry
from vaswani.tasks.tag import TagTask, tagging_loss
from vaswani.tokenizer import WordPieceTokenizer

# ---------------------------------------------------------------------------------------------
# Reading CoNLL-U


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


# ---------------------------------------------------------------------------------------------
# A tiny tagger: training, evaluation, resume, --init

LEXICON = {
    "DET": ["the", "a", "every", "this"],
    "ADJ": ["red", "enormous", "quiet", "magnificent"],
    "NOUN": ["cat", "dog", "kingfisher", "bicycle", "umbrella", "mountaineer"],
    "VERB": ["sees", "chases", "photographs", "remembers", "bites"],
    "PUNCT": [".", "!"],
}
TAG_OF = {word: tag for tag, words in LEXICON.items() for word in words}


def random_sentence(rng: random.Random, n_phrases: int = 1) -> list[str]:
    """DET (ADJ) NOUN VERB DET (ADJ) NOUN, ``n_phrases`` times, then punctuation: each word's tag
    is a function of the word."""
    roles = ["DET", "ADJ?", "NOUN", "VERB", "DET", "ADJ?", "NOUN"] * n_phrases + ["PUNCT"]
    kept = [role.rstrip("?") for role in roles if not role.endswith("?") or rng.random() < 0.5]
    return [rng.choice(LEXICON[role]) for role in kept]


def write_tagged(path: Path, n: int, seed: int) -> Path:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        words = random_sentence(rng)
        lines = "".join(word_line(str(j), w, TAG_OF[w]) for j, w in enumerate(words, start=1))
        rows.append(f"# sent_id = {i}\n# text = {' '.join(words)}\n{lines}\n")
    return write(path, "".join(rows))


def tiny_tag_args(data: Path, out: Path, *extra: str) -> list[str]:
    """``vaswani train tag`` arguments for a one-layer model from scratch (about a second)."""
    return [
        "train", "tag", "--train", str(data / "train.conllu"), "--dev", str(data / "dev.conllu"),
        "--out", str(out), "--d-model", "32", "--heads", "2", "--d-ff", "64", "--layers", "1",
        "--vocab-size", "100", "--max-len", "24", "--epochs", "5", "--lr", "5e-3", "--quiet", "--no-bf16",
        *extra,
    ]  # fmt: skip


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tagged")
    write_tagged(folder / "train.conllu", 300, seed=0)
    write_tagged(folder / "dev.conllu", 60, seed=1)
    return folder


@pytest.fixture(scope="module")
def run(data) -> Path:
    assert main(tiny_tag_args(data, data / "run")) == 0
    return data / "run"


def test_a_tiny_tagger_from_scratch_learns(run, data):
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["valid_accuracy"] > 0.9
    steps_per_epoch = math.ceil(300 / 32)
    assert metrics["steps"] == 5 * steps_per_epoch
    log = (run / "train_log.csv").read_text().splitlines()
    assert log[0].split(",")[-2:] == ["valid_loss", "valid_accuracy"]
    config = json.loads((run / "config.json").read_text())
    assert config["task"] == "tag" and not config["model"]["pooler"]
    assert config["data"]["tags"] == ["ADJ", "DET", "NOUN", "PUNCT", "VERB"]
    assert config["data"]["train_file"] == str((data / "train.conllu").resolve())
    assert config["train"]["eval_every"] == steps_per_epoch
    tokenizer = Tagger.load(run).tokenizer
    assert any(len(tokenizer.tokenize(word)) > 1 for word in TAG_OF), "no word of several pieces"


def test_evaluate_prints_the_dev_accuracy(run, data, capsys):
    capsys.readouterr()
    assert main(["evaluate", str(run), "--labeled", str(data / "dev.conllu")]) == 0
    printed = capsys.readouterr().out
    words = sum(len(s.words) for s in read_conllu(data / "dev.conllu"))
    first, macro, header, *rows = printed.splitlines()
    assert re.fullmatch(rf"accuracy \d+\.\d%  loss \d+\.\d{{4}}  \({words} words, 60 sentences\)", first)
    metrics = json.loads((run / "metrics.json").read_text())
    assert printed.startswith(f"accuracy {metrics['valid_accuracy']:.1%}")
    assert macro == f"macro-F1 {metrics['valid_macro_f1']:.3f} (the mean F1 of 5 tags)"
    assert header.split() == ["tag", "F1", "gold", "predicted"]
    assert [row.split()[0] for row in rows] == ["ADJ", "DET", "NOUN", "PUNCT", "VERB"]
    assert main(["evaluate", str(run)]) == 2
    assert "a tagger is evaluated with --labeled FILE" in capsys.readouterr().err


def test_a_dev_tag_outside_the_run_s_tags_is_named_by_line(run, tmp_path):
    path = write(tmp_path / "x.conllu", word_line("1", "the", "DET") + word_line("2", "hmm", "INTJ"))
    with pytest.raises(DataError, match=rf"^{re.escape(str(path))}:2: tag 'INTJ' is not in the run's tag"):
        Tagger.load(run).evaluate(read_conllu(path), path)


def test_a_batch_gives_each_sentence_its_own_tags(run):
    rng = random.Random(7)
    sentences = [random_sentence(rng) for _ in range(6)] + [random_sentence(rng, n_phrases=4)]
    assert sum(len(Tagger.load(run).tokenizer.tokenize(w)) for w in sentences[-1]) > 22  # cut into spans
    tagger = registry.load(run)
    assert isinstance(tagger, Tagger)
    together = tagger.tag(sentences)
    assert together == [tagger.tag([s])[0] for s in sentences]
    gold = [TAG_OF[w] for s in sentences for w in s]
    predicted = [t for tags in together for t in tags]
    assert len(predicted) == len(gold) and sum(map(str.__eq__, predicted, gold)) / len(gold) > 0.9
    assert tagger.tag([]) == []


def test_plot_and_average_work_from_the_registry(run, tmp_path, capsys):
    assert main(["plot", str(run), "--out", str(tmp_path / "curves.png")]) == 0
    assert (tmp_path / "curves.png").stat().st_size > 0
    assert main(["average", str(run), "--last", "1", "--out", str(tmp_path / "avg.safetensors")]) == 0


def test_a_resumed_run_ends_with_the_same_weights(data, tmp_path):
    steps = ["--schedule", "constant", "--warmup", "2", "--checkpoint-every", "6", "--dropout", "0.1"]
    assert main(tiny_tag_args(data, tmp_path / "whole", "--max-steps", "12", *steps)) == 0
    parts = tmp_path / "parts"
    assert main(tiny_tag_args(data, parts, "--max-steps", "6", *steps)) == 0
    first_leg = load_file(parts / "model.safetensors")
    assert main(["train", "tag", "--resume", str(parts), "--max-steps", "12", "--quiet"]) == 0
    assert_resumed_like_whole(tmp_path / "whole", parts, first_leg, 12)


def test_init_from_an_mlm_run_starts_from_its_encoder(data, tmp_path, monkeypatch, capsys):
    """The tagger's encoder equals the mlm run's before the first step; the tokenizer and model
    config (but dropout) are the mlm run's, the learning rate the fine-tuning one; the model of
    an --init run cannot be changed."""
    mlm_run = tiny_mlm_run(tmp_path)
    seen = record_initial_state(monkeypatch)
    out = tmp_path / "run"
    files = ["--train", str(data / "train.conllu"), "--dev", str(data / "dev.conllu")]
    args = ["train", "tag", *files, "--init", str(mlm_run), "--out", str(out), "--max-steps", "3"]
    assert main([*args, "--quiet", "--no-bf16"]) == 0
    pretrained = load_file(mlm_run / "model.safetensors")
    encoder = {k.removeprefix("bert."): v for k, v in pretrained.items() if k.startswith("bert.")}
    head = {"head.linear.weight", "head.linear.bias"}
    assert encoder and set(seen) == {f"bert.{k}" for k in encoder} | head  # no pooler
    for key, tensor in encoder.items():
        assert torch.equal(seen[f"bert.{key}"], tensor), key
    mlm_config = json.loads((mlm_run / "config.json").read_text())["model"]
    config = json.loads((out / "config.json").read_text())
    assert config["model"] == {**mlm_config, "dropout": 0.1}
    assert config["data"]["init"] == str(mlm_run.resolve()) and config["train"]["lr"] == 5e-5
    vocab = WordPieceTokenizer.load(mlm_run / "tokenizer.json").tokenizer.get_vocab()
    assert WordPieceTokenizer.load(out / "tokenizer.json").tokenizer.get_vocab() == vocab
    capsys.readouterr()
    assert main(["train", "tag", *files, "--init", str(mlm_run), "--layers", "2"]) == 2
    assert "--layers: the model of an --init run is fixed" in capsys.readouterr().err


@pytest.mark.parametrize(("start", "stop"), [(0, 1), (1, 3), (2, 4), (0, 4), (3, 3)])
def test_a_process_share_of_a_batch_keeps_the_tags_of_its_own_words(start, stop):
    """The rows a process trains on (``TagTask.take_rows``) are the batch of those rows alone: the
    gold tags run over the words of all rows, so each share takes the tags of its own words."""
    spans = [
        Span(0, 0, [1, 5, 6, 2], [1, 2]), Span(1, 0, [1, 7, 2], [1]), Span(2, 0, [1, 5, 5, 5, 2], [1, 2, 3]),
        Span(3, 0, [1, 8, 2], [1]),
    ]  # fmt: skip
    tags = [[3, 4], [5], [6, 7, 8], [9]]
    whole = tag_batch(spans, 0, [t for row in tags for t in row])
    share = TagTask.take_rows(None, whole, start, stop)  # type: ignore[arg-type]
    alone = tag_batch(spans[start:stop], 0, [t for row in tags[start:stop] for t in row])
    width = whole.tokens.shape[1]  # the share keeps the whole batch's padding width
    assert torch.equal(share.tokens, whole.tokens[start:stop]) and share.tags is not None
    assert torch.equal(share.tags, alone.tags)
    assert torch.equal(share.first[:, : alone.first.shape[1]], alone.first) and share.first.shape[1] == width
