"""Pretrained word vectors as the input: the three file formats read the same vectors, the
word-level tokenizers, the embedding rows of known words (projected when the width differs), and
frozen embeddings that stay fixed while everything else trains (translation, classify, tag)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.helpers import (
    record_initial_state,
    tiny_args,
    tiny_classify_args,
    write_reverse_task,
    write_sentiment,
)
from tests.test_tag import tiny_tag_args, write_tagged
from vaswani.cli import main
from vaswani.data.vectors import detect_format, read_word_vectors
from vaswani.data.words import train_bert_words, train_source_words, word_vocabulary
from vaswani.pipelines.classify import TextClassifier
from vaswani.pipelines.tag import Tagger
from vaswani.pipelines.translation import Translator
from vaswani.tokenizer import TextTokenizer, WordPieceTokenizer

WORDS = ["great", "good", "lovely", "awful", "bad", "movie", "naïve", "the"]


def vectors(dim: int, words: list[str] = WORDS, seed: int = 0) -> dict[str, list[float]]:
    """Random vectors, rounded so that the text formats write them exactly."""
    rng = torch.Generator().manual_seed(seed)
    return {w: [round(x, 3) for x in torch.randn(dim, generator=rng).tolist()] for w in words}


def write_vectors(path: Path, table: dict[str, list[float]], kind: str) -> Path:
    """``table`` written as GloVe text, word2vec text or word2vec binary."""
    dim = len(next(iter(table.values())))
    header = f"{len(table)} {dim}\n"
    rows = "".join(f"{w} {' '.join(str(x) for x in v)}\n" for w, v in table.items())
    if kind == "glove":
        path.write_text(rows, encoding="utf-8")
    elif kind == "word2vec":
        path.write_text(header + rows, encoding="utf-8")
    else:
        binary = b"".join(w.encode() + b" " + struct.pack(f"<{dim}f", *v) + b"\n" for w, v in table.items())
        path.write_bytes(header.encode() + binary)
    return path


KINDS = {"glove": "v.txt", "word2vec": "v.w2v.txt", "word2vec-binary": "v.bin"}


def test_each_format_reads_the_same_vectors(tmp_path):
    table = vectors(5)
    wanted = {"good", "naïve", "absent"}
    read = {}
    for kind, name in KINDS.items():
        path = write_vectors(tmp_path / name, table, kind)
        assert detect_format(path) == kind
        read[kind] = read_word_vectors(path, wanted=wanted)
        named = read_word_vectors(path, kind, wanted)  # named: the same
        assert named.vectors.keys() == read[kind].vectors.keys() and named.format == kind
        assert (read[kind].format, read[kind].dim, read[kind].rows) == (kind, 5, len(WORDS))
        assert set(read[kind].vectors) == {"good", "naïve"}
    for vectors_read in read.values():
        for word in ("good", "naïve"):
            torch.testing.assert_close(vectors_read.vectors[word], torch.tensor(table[word]))


def test_the_word_vocabulary_is_by_frequency_then_alphabetical():
    vocab = word_vocabulary(["b", "a", "c", "b", "a", "b", "d"], ("<pad>",), 4)
    assert vocab == {"<pad>": 0, "b": 1, "a": 2, "c": 3}
    source = train_source_words(["The cat sat.", "the cat ran"], 100)
    assert source.tokenizer.token_to_id("cat") == 4  # after <pad> <bos> <eos> <unk>
    assert source.encode("The dog sat") == [source.tokenizer.token_to_id("The"), source.unk_id,
                                            source.tokenizer.token_to_id("sat")]  # fmt: skip
    bert = train_bert_words(["The Cat sat.", "the cat"], 100, max_len=16)
    ids, _ = bert.encode_segments("THE CAT flew")
    assert ids == [bert.cls_id, bert.tokenizer.token_to_id("the"), bert.tokenizer.token_to_id("cat"),
                   bert.unk_id, bert.sep_id]  # fmt: skip


def test_word_level_tokenizers_are_saved_and_read_back(tmp_path):
    source = train_source_words(["a b c", "c d"], 100)
    source.save(tmp_path / "src.json")
    assert TextTokenizer.load(tmp_path / "src.json").encode("c a x") == source.encode("c a x")
    bert = train_bert_words(["a b c", "c d"], 100, max_len=16)
    (tmp_path / "bert.json").write_bytes(bert.to_json())
    again = WordPieceTokenizer.load(tmp_path / "bert.json", 16)
    assert again.encode_segments("c a x") == bert.encode_segments("c a x")


@pytest.fixture(scope="module")
def sentiment(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("sentiment")
    write_sentiment(folder, "train", 120, seed=0)
    write_sentiment(folder, "dev", 30, seed=1)
    return folder


def classify(folder: Path, out: str, *extra: str) -> list[str]:
    return tiny_classify_args(folder / "train.tsv", folder / "dev.tsv", folder / out, "--epochs", "2", *extra)


@pytest.mark.parametrize("dim", [32, 12])
def test_a_classifier_s_rows_of_known_words_are_the_file_s_vectors(
    sentiment, tmp_path, dim, capsys, monkeypatch
):
    initial = record_initial_state(monkeypatch)
    table = vectors(dim)
    path = write_vectors(tmp_path / "v.bin", table, "word2vec-binary")
    run = tmp_path / "run"
    args = [
        *classify(sentiment, "unused", "--tokenizer", "word", "--word-vectors", str(path)),
        "--out",
        str(run),
    ]
    args.remove("--quiet")
    assert main(args) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("word vectors:"))
    tokenizer = TextClassifier.load(run, "cpu").tokenizer
    vocab = tokenizer.tokenizer.get_vocab()
    known = [w for w in WORDS if w in vocab]
    assert set(known) == {"great", "good", "lovely", "awful", "bad", "movie", "the"}  # not "naïve"
    assert line.startswith(
        f"word vectors: {len(known)} of the {len(vocab) - 5} words of the vocabulary found"
    )
    assert f"{dim} dimensions" in line and ("projected to d_model 32" in line) == (dim != 32)
    for word in known:
        torch.testing.assert_close(initial["bert.embed.token.weight"][vocab[word]], torch.tensor(table[word]))
    config = json.loads((run / "config.json").read_text())
    assert config["model"]["word_dim"] == (None if dim == 32 else dim)
    assert ("bert.embed.project.weight" in initial) == (dim != 32)
    if dim != 32:  # the embedding projects the word's vector: E[w] W_pᵀ
        classifier = TextClassifier.load(run, "cpu")
        embed = classifier.model.bert.embed
        ids = torch.tensor([[vocab["good"]]])
        with torch.no_grad():
            word_part = embed.project(embed.token(ids))
        torch.testing.assert_close(word_part[0, 0], embed.project.weight @ embed.token.weight[vocab["good"]])
        assert embed.token.weight.shape[1] == dim


def test_frozen_embeddings_stay_while_the_rest_trains(sentiment, tmp_path, monkeypatch):
    initial = record_initial_state(monkeypatch)
    path = write_vectors(tmp_path / "v.txt", vectors(32), "glove")
    frozen = tmp_path / "frozen"
    vector_flags = ("--tokenizer", "word", "--word-vectors", str(path))
    assert main([*classify(sentiment, "x", *vector_flags, "--freeze-embeddings"), "--out", str(frozen)]) == 0
    trained = load_file(frozen / "model.safetensors")
    assert torch.equal(trained["bert.embed.token.weight"], initial["bert.embed.token.weight"])
    moved = [k for k in trained if not torch.equal(trained[k], initial[k])]
    assert "bert.embed.positions.embedding.weight" in moved and "head.linear.weight" in moved
    free = tmp_path / "free"
    assert main([*classify(sentiment, "x", *vector_flags), "--out", str(free)]) == 0
    assert not torch.equal(load_file(free / "model.safetensors")["bert.embed.token.weight"],
                           trained["bert.embed.token.weight"])  # fmt: skip
    steps = json.loads((frozen / "metrics.json").read_text())["steps"]
    assert main(["train", "classify", "--resume", str(frozen), "--max-steps", str(steps + 3), "--quiet"]) == 0
    resumed = load_file(frozen / "model.safetensors")
    assert torch.equal(resumed["bert.embed.token.weight"], initial["bert.embed.token.weight"])


def test_a_translator_s_source_embedding_takes_the_vectors(tmp_path, monkeypatch):
    initial = record_initial_state(monkeypatch)
    src, tgt = write_reverse_task(tmp_path, n=120)
    words = sorted({w for line in src.read_text().splitlines() for w in line.split()})
    table = vectors(8, words)
    path = write_vectors(tmp_path / "v.w2v", table, "word2vec")
    run = tmp_path / "run"
    flags = ("--tokenizer", "word", "--word-vectors", str(path), "--freeze-embeddings")
    assert main(tiny_args(src, tgt, run, *flags)) == 0
    translator = Translator.load(run, "cpu")
    vocab = translator.src_tok.tokenizer.get_vocab()
    assert set(words) <= set(vocab)
    trained = load_file(run / "model.safetensors")
    for word in words:
        torch.testing.assert_close(trained["src_embed.token.weight"][vocab[word]], torch.tensor(table[word]))
    assert torch.equal(trained["src_embed.token.weight"], initial["src_embed.token.weight"])
    assert not torch.equal(trained["src_embed.project.weight"], initial["src_embed.project.weight"])
    assert translator.translate(["a b"])[0] == translator.translate(["a b"])[0]  # it decodes
    assert main(["export-hf", str(run), str(tmp_path / "hf")]) == 2  # Marian has no projected table


def test_a_tagger_reads_word_vectors(tmp_path):
    write_tagged(tmp_path / "train.conllu", 60, seed=0)
    write_tagged(tmp_path / "dev.conllu", 10, seed=1)
    table = vectors(32, ["cat", "dog", "the"])
    path = write_vectors(tmp_path / "v.txt", table, "glove")
    flags = ("--tokenizer", "word", "--word-vectors", str(path), "--freeze-embeddings", "--epochs", "1")
    assert main(tiny_tag_args(tmp_path, tmp_path / "run", *flags)) == 0
    tagger = Tagger.load(tmp_path / "run", "cpu")
    vocab = tagger.tokenizer.tokenizer.get_vocab()
    for word, vector in table.items():
        torch.testing.assert_close(tagger.model.bert.embed.token.weight[vocab[word]], torch.tensor(vector))
    assert len(tagger.tag([["the", "cat", "sees", "a", "dog", "."]])[0]) == 6
