"""Classification and sentence embeddings with BERT: the labeled-file readers (TSV, CSV, JSON
lines, headers, string labels, sentence pairs, every bad row named by file and line), the
classifier's pooling and metrics, a tiny classifier that learns, ``--init`` from an mlm run,
``vaswani classify``, ``vaswani embed`` and ``evaluate --labeled`` (their bad input on the command
line is in test_bad_inputs.py)."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from tests.helpers import (
    encoder_run,
    log_rows,
    record_initial_state,
    tiny_classify_args,
    tiny_mlm_run,
    write,
    write_sentiment,
)
from vaswani.cli import main
from vaswani.config import ModelConfig
from vaswani.data.labeled import read_labeled, sort_labels
from vaswani.errors import DataError
from vaswani.models.bert import BertClassifier
from vaswani.pipelines.bert import encode_texts, text_batch
from vaswani.pipelines.classify import TextClassifier
from vaswani.pipelines.encoder import SentenceEncoder
from vaswani.tokenizer import WordPieceTokenizer

# ---------------------------------------------------------------------------------------------
# Reading labeled files


def test_tsv_with_a_header_as_sst2(tmp_path):
    path = write(tmp_path / "train.tsv", "sentence\tlabel\nit 's a charming journey \t1\nawful \t0\n\n")
    data = read_labeled(path)
    assert data.header and data.text_columns == ("sentence",) and data.label_column == "label"
    assert [(e.texts, e.label, e.line) for e in data.examples] == [
        (("it 's a charming journey",), "1", 2),
        (("awful",), "0", 3),
    ]
    assert data.labels == ("0", "1")


def test_tsv_without_a_header_and_columns_by_index(tmp_path):
    path = write(tmp_path / "train.tsv", "pos\tx\ta fine film\npos\ty\tgood\nneg\tz\tdull\n")
    data = read_labeled(path, text_columns=["2"], label_column="0")
    assert not data.header and data.text_columns == ("2",) and data.label_column == "0"
    assert [e.texts[0] for e in data.examples] == ["a fine film", "good", "dull"]
    assert data.labels == ("neg", "pos")  # string labels, sorted
    default = read_labeled(write(tmp_path / "two.tsv", "a fine film\tpos\ndull\tneg\ngood\tpos\n"))
    assert not default.header and default.label_column == "1" and len(default.examples) == 3


@pytest.mark.parametrize(
    ("text", "header"),
    [
        ("good\tpos\nbad\tneg\n", False),  # a label seen once is still a label
        ("text\tpolarity\ngood\tpos\nbad\tneg\nfine\tpos\nawful\tneg\n", True),  # the odd one out
        ("text\tlabel\ngood\tpos\nbad\tneg\n", True),  # a usual name
        ("review\tstars\ngood\t5\nbad\t1\n", True),  # not a number among numbers
        ("good\tpos\nbad\tneg\nfine\tpos\n", False),
    ],
)
def test_a_training_file_header_is_told_from_its_labels(tmp_path, text, header):
    data = read_labeled(write(tmp_path / "train.tsv", text))
    assert data.header == header
    assert len(data.examples) == text.count("\n") - header


def test_a_dev_file_header_is_told_by_the_training_labels(tmp_path):
    dev = write(tmp_path / "dev.tsv", "text\tlabel\nnice\tpos\n")
    data = read_labeled(dev, labels=("neg", "pos"))
    assert data.header and [e.texts for e in data.examples] == [("nice",)]
    plain = write(tmp_path / "plain.tsv", "nice\tpos\nbad\tneg\n")
    assert not read_labeled(plain, labels=("neg", "pos")).header
    odd = write(tmp_path / "odd.tsv", "text\tgold\nnice\tpos\n")  # not a label, nor a usual name
    with pytest.raises(DataError, match=r"odd\.tsv:1: label 'gold' is not one of the training labels"):
        read_labeled(odd, labels=("neg", "pos"))
    assert read_labeled(odd, label_column="gold", labels=("neg", "pos")).header  # named: a header


def test_csv_with_quotes_and_a_sentence_pair_by_name(tmp_path):
    path = write(
        tmp_path / "pairs.csv",
        'id,premise,hypothesis,label\n1,"A man, tall, sings.","He says ""hi""",entailment\n'
        "2,A dog runs,A cat sleeps,contradiction\n",
    )
    data = read_labeled(path, text_columns=["premise", "hypothesis"])
    assert data.header and data.text_columns == ("premise", "hypothesis") and data.label_column == "label"
    assert data.examples[0].texts == ("A man, tall, sings.", 'He says "hi"')
    assert data.labels == ("contradiction", "entailment")


def test_jsonl_labels_may_be_numbers_and_sort_by_value(tmp_path):
    rows = [
        {"text": "a", "label": 10, "idx": 0},
        {"text": "b", "label": 2, "idx": 1},
        {"text": "c", "label": 2},
    ]
    path = write(tmp_path / "train.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    data = read_labeled(path)
    assert data.text_columns == ("text",) and data.label_column == "label"
    assert [e.label for e in data.examples] == ["10", "2", "2"] and data.labels == ("2", "10")
    assert sort_labels(["b", "10", "a"]) == ("10", "a", "b")


def test_the_format_can_be_named(tmp_path):
    path = write(tmp_path / "train.txt", "good\tpos\nbad\tneg\nfine\tpos\n")
    assert len(read_labeled(path, fmt="tsv").examples) == 3
    with pytest.raises(DataError, match="--format"):
        read_labeled(path)


BAD_FILES = [
    ("missing column", "train.tsv", "a\tpos\nb\tneg\nc\n", {}, ["train.tsv:3", "missing column 1"]),
    ("empty text", "train.tsv", "text\tlabel\n  \tpos\n", {}, ["train.tsv:2", "empty text", "'text'"]),
    ("empty label", "train.tsv", "a\tpos\nb\t \nc\tneg\n", {}, ["train.tsv:2", "empty label"]),
    ("unknown label", "dev.tsv", "a\tpos\nb\tmaybe\n", {"labels": ("neg", "pos")},
     ["dev.tsv:2", "'maybe'", "training labels"]),
    ("unknown column name", "train.tsv", "text\tlabel\na\tpos\n", {"text_columns": ["sentence"]},
     ["train.tsv:1", "no column named 'sentence'"]),
    ("malformed JSON", "train.jsonl", '{"text": "a", "label": 1}\n{"text": "b", label: 0}\n', {},
     ["train.jsonl:2", "not valid JSON"]),
    ("JSON not an object", "train.jsonl", '{"text": "a", "label": 1}\n["b", 0]\n', {},
     ["train.jsonl:2", "JSON object"]),
    ("JSON field missing", "train.jsonl", '{"text": "a", "label": 1}\n{"label": 0}\n', {},
     ["train.jsonl:2", "missing field 'text'"]),
    ("JSON text not a string", "train.jsonl", '{"text": "a", "label": 1}\n{"text": 3, "label": 0}\n', {},
     ["train.jsonl:2", "'text'", "string"]),
    ("malformed CSV", "train.csv", 'a,pos\n"b,neg\n', {}, ["train.csv:2", "CSV"]),
    ("too many columns", "train.tsv", "a\tb\tc\tpos\n", {}, ["train.tsv:1", "--text-column"]),
    ("only a header", "train.tsv", "text\tlabel\n", {"text_columns": ["text"]}, ["train.tsv", "no examples"]),
    ("not UTF-8", "train.tsv", None, {}, ["train.tsv:2", "UTF-8"]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "file", "text", "kwargs", "words"), BAD_FILES, ids=[b[0] for b in BAD_FILES]
)
def test_bad_rows_are_named_by_file_and_line(tmp_path, name, file, text, kwargs, words):
    path = tmp_path / file
    if text is None:
        path.write_bytes(b"good\tpos\nGr\xfc\xdfe\tneg\n")
    else:
        write(path, text)
    with pytest.raises(DataError) as caught:
        read_labeled(path, **kwargs)
    message = str(caught.value)
    assert "\n" not in message
    for word in words:
        assert word in message, (word, message)


# ---------------------------------------------------------------------------------------------
# The classifier


@pytest.mark.parametrize("pairs", [False, True], ids=["texts", "pairs"])
@pytest.mark.parametrize("pool", ["cls", "mean"])
def test_a_padded_batch_gives_each_text_its_own_logits(pool, pairs):
    tokenizer = WordPieceTokenizer.train(["the cat sat on the mat", "a dog ran"] * 5, 60, min_frequency=1)
    cfg = ModelConfig.preset(
        "bert-base", src_vocab_size=64, d_model=16, n_heads=2, d_ff=32, n_encoder_layers=1, max_len=32,
        dropout=0.0, attn_dropout=0.0,
    )  # fmt: skip
    torch.manual_seed(0)
    model = BertClassifier(cfg, 3, pool).eval()
    texts = [("the cat sat on the mat",), ("a dog",), ("the dog",)]
    if pairs:
        texts = [
            (text, second) for (text,), second in zip(texts, ["a cat", "sat on the mat", "ran"], strict=True)
        ]
    encoded = encode_texts(tokenizer, texts)
    assert all((1 in segments) == pairs for _, segments in encoded)  # a pair's second text: segment 1
    batch = text_batch(encoded, tokenizer.pad_id)
    with torch.no_grad():
        together = model(batch.tokens, batch.segments, batch.mask)
        for i, row in enumerate(encoded):
            alone = text_batch([row], tokenizer.pad_id)
            torch.testing.assert_close(together[i], model(alone.tokens, alone.segments, alone.mask)[0])


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("sentiment")
    write_sentiment(folder, "train", 400, seed=0)
    write_sentiment(folder, "dev", 100, seed=1)
    return folder


@pytest.fixture(scope="module")
def run(data) -> Path:
    assert main(tiny_classify_args(data / "train.tsv", data / "dev.tsv", data / "run")) == 0
    return data / "run"


@pytest.fixture(scope="module")
def mlm_run(tmp_path_factory) -> Path:
    return tiny_mlm_run(tmp_path_factory.mktemp("mlm"))


def test_a_tiny_classifier_from_scratch_learns(run):
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["valid_accuracy"] > 0.9 and metrics["valid_macro_f1"] > 0.9
    assert metrics["steps"] == 5 * 13  # 400 examples in batches of 32, five times
    log = (run / "train_log.csv").read_text().splitlines()
    assert log[0].split(",")[-3:] == ["valid_loss", "valid_accuracy", "valid_macro_f1"]
    assert [row["step"] for row in log_rows(run, "eval")] == ["13", "26", "39", "52", "65"]  # once an epoch
    config = json.loads((run / "config.json").read_text())
    assert config["task"] == "classify" and config["model"]["pooler"]
    data = config["data"]
    assert data["labels"] == ["negative", "positive"]
    assert data["text_columns"] == ["sentence"] and data["label_column"] == "label"
    assert config["train"]["warmup_steps"] == 6 and config["train"]["eval_every"] == 13


def test_classify_prints_each_label_and_its_probability(run, capsys, monkeypatch):
    import io
    import sys

    texts = ["the movie was great", "a very dull plot"]
    capsys.readouterr()
    assert main(["classify", str(run), *texts]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[0] for line in lines] == ["positive", "negative"]
    expected = TextClassifier.load(run).predict([(t,) for t in texts])
    for line, (label, prob) in zip(lines, expected, strict=True):
        assert line == f"{label}\t{prob:.4f}" and prob > 0.5
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO("\n".join(texts).encode() + b"\n")))
    assert main(["classify", str(run)]) == 0
    assert capsys.readouterr().out.splitlines() == lines


def test_evaluate_a_classifier_on_labeled_examples(run, data, capsys, tmp_path):
    jsonl = write_sentiment(tmp_path, "test", 40, seed=5, suffix="jsonl")
    capsys.readouterr()
    assert main(["evaluate", str(run), "--labeled", str(data / "dev.tsv")]) == 0
    printed = capsys.readouterr().out
    assert re.search(r"accuracy \d+\.\d%  macro-F1 \d\.\d{3}  loss \d+\.\d{4}  \(100 examples\)", printed)
    metrics = json.loads((run / "metrics.json").read_text())
    assert f"accuracy {metrics['valid_accuracy']:.1%}" in printed
    # Another format, by its own columns: the run's column names are those of a JSON object too.
    renamed = write(tmp_path / "renamed.jsonl", jsonl.read_text().replace('"text"', '"sentence"'))
    assert main(["evaluate", str(run), "--labeled", str(renamed)]) == 0
    assert "(40 examples)" in capsys.readouterr().out


def test_init_from_an_mlm_run_starts_from_its_encoder(mlm_run, data, tmp_path, monkeypatch):
    """The classifier's encoder equals the mlm run's before the first step; the pooler the mlm run
    lacks is new; the tokenizer and model config are the mlm run's."""
    seen = record_initial_state(monkeypatch)
    out = tmp_path / "run"
    args = [
        "train", "classify", "--train", str(data / "train.tsv"), "--dev", str(data / "dev.tsv"),
        "--init", str(mlm_run), "--out", str(out), "--max-steps", "3", "--quiet", "--no-bf16",
    ]  # fmt: skip
    assert main(args) == 0
    pretrained = load_file(mlm_run / "model.safetensors")
    encoder = {k.removeprefix("bert."): v for k, v in pretrained.items() if k.startswith("bert.")}
    assert encoder and not any(k.startswith("pooler.") for k in encoder)
    for key, tensor in encoder.items():
        assert torch.equal(seen[f"bert.{key}"], tensor), key
    assert {"bert.pooler.dense.weight", "head.linear.weight"} <= set(seen)
    trained = load_file(out / "model.safetensors")
    assert not torch.equal(trained["bert.embed.token.weight"], encoder["embed.token.weight"])  # fine-tuned
    mlm_config = json.loads((mlm_run / "config.json").read_text())["model"]
    config = json.loads((out / "config.json").read_text())
    assert config["model"] == {**mlm_config, "pooler": True, "dropout": 0.1}
    assert config["data"]["init"] == str(mlm_run.resolve()) and config["train"]["lr"] == 5e-5
    vocab = WordPieceTokenizer.load(mlm_run / "tokenizer.json").tokenizer.get_vocab()
    assert WordPieceTokenizer.load(out / "tokenizer.json").tokenizer.get_vocab() == vocab


def test_a_sentence_pair_classifier_reads_a_pair_per_line(tmp_path, capsys):
    rng = random.Random(0)
    words = ["red", "green", "blue", "black", "white", "pink"]
    rows = []
    for _ in range(200):
        a, b = rng.choice(words), rng.choice(words)
        rows.append(f"{a},{b},{'same' if a == b else 'different'}\n")
    train = write(tmp_path / "train.csv", "first,second,label\n" + "".join(rows))
    dev = write(tmp_path / "dev.csv", "first,second,label\n" + "".join(rows[:40]))
    assert main(tiny_classify_args(train, dev, tmp_path / "run", "--max-steps", "5")) == 0
    config = json.loads((tmp_path / "run" / "config.json").read_text())["data"]
    assert config["text_columns"] == ["first", "second"]
    capsys.readouterr()
    assert main(["classify", str(tmp_path / "run"), "red\tred", "red\tblue"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2
    assert main(["classify", str(tmp_path / "run"), "red blue"]) == 2
    assert "A<TAB>B" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# Sentence embeddings


def _cosine_matrix(printed: str) -> np.ndarray:
    table = printed.split("cosine similarity")[1].split("\n\n")[0]
    return np.array([[float(x) for x in line.split()[1:]] for line in table.splitlines()[2:]])


@pytest.mark.parametrize("kind", ["mlm", "classify", "encoder"])
def test_embed_prints_a_symmetric_cosine_matrix(kind, mlm_run, run, tmp_path, capsys):
    run_dir = {"mlm": mlm_run, "classify": run, "encoder": None}[kind] or encoder_run(tmp_path)
    sentences = ["one one one two", "two two two", "the movie was great"]
    capsys.readouterr()
    assert main(["embed", str(run_dir), *sentences, "--out", str(tmp_path / "e.npy")]) == 0
    printed = capsys.readouterr().out
    rows = [line for line in printed.splitlines() if re.match(r"\d+  \[", line)]
    assert len(rows) == 3 and all("norm 1.0000" in row for row in rows)
    matrix = _cosine_matrix(printed)
    assert matrix.shape == (3, 3)
    np.testing.assert_allclose(matrix, matrix.T, atol=1e-4)
    np.testing.assert_allclose(np.diag(matrix), 1.0, atol=1e-4)
    saved = np.load(tmp_path / "e.npy")
    expected = SentenceEncoder.load(run_dir).embed(sentences)
    np.testing.assert_allclose(saved, expected.numpy(), atol=1e-6)
    np.testing.assert_allclose(matrix, saved @ saved.T, atol=1e-4)


def test_embed_pooling_normalisation_and_safetensors(run, tmp_path, capsys):
    sentences = ["a good film", "a bad film"]
    out = tmp_path / "e.safetensors"
    assert main(["embed", str(run), *sentences, "--pool", "cls", "--no-normalize", "--out", str(out)]) == 0
    saved = load_file(out)["embeddings"]
    encoder = SentenceEncoder.load(run)
    torch.testing.assert_close(saved, encoder.embed(sentences, pool="cls", normalize=False))
    assert not torch.allclose(saved.norm(dim=-1), torch.ones(2))
    mean = encoder.embed(sentences, pool="mean")
    assert not torch.allclose(torch.nn.functional.normalize(saved, dim=-1), mean, atol=1e-3)
